/*
 * core/ops/fp_isa.h — internal: the AVX-512 and AVX2 forms behind fp.c's srt_round_bf16_n and
 * quant.c's srt_quant_fp4_fake (fp_avx512.c, fp_avx2.c). The same bits as the scalar loops;
 * each called only after cpuid showed its set (srt_gemm_isa_current() >= SRT_GEMM_ISA_AVX512,
 * >= SRT_GEMM_ISA_AVX2). The 16- and 8-lane bf16 roundings are also the attention plugins'
 * (attn_term.h).
 */
#ifndef SRT_OPS_FP_ISA_H
#define SRT_OPS_FP_ISA_H

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* srt_round_bf16 of 16 floats without the NaN fix: right for every lane but NaN ones (±inf
 * stay ±inf), which get any value. */
__attribute__((target("avx512f"))) static inline __m512 srt_round_bf16_v16_num(__m512 x)
{
	__m512i u = _mm512_castps_si512(x);
	const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
	return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* srt_round_bf16 of 16 floats: nearest even on the 16 dropped bits, NaN -> 0x7FC00000. */
__attribute__((target("avx512f"))) static inline __m512 srt_round_bf16_v16(__m512 x)
{
	return _mm512_mask_mov_ps(srt_round_bf16_v16_num(x), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
				  _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

/* srt_round_bf16 of 8 floats without the NaN fix (as srt_round_bf16_v16_num). */
__attribute__((target("avx2"))) static inline __m256 srt_round_bf16_v8_num(__m256 x)
{
	__m256i u = _mm256_castps_si256(x);
	const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
	return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* srt_round_bf16 of 8 floats: nearest even on the 16 dropped bits, NaN -> 0x7FC00000. */
__attribute__((target("avx2"))) static inline __m256 srt_round_bf16_v8(__m256 x)
{
	const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
	return _mm256_blendv_ps(srt_round_bf16_v8_num(x), qnan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
#endif

/* srt_round_bf16_n */
void srt_round_bf16_avx512(float *x, size_t n);
/* max |x[i]|, NaN if any x[i] is NaN (quant.c's block_amax) */
float srt_amax_avx512(const float *x, size_t n);
/* y[i] := E2M1(x[i] / s) · s, NaN everywhere for a NaN s (srt_quant_fp4_fake's element step) */
void srt_fp4_fake_avx512(const float *x, float *y, size_t n, float s);

/* The same three over 8 lanes (fp_avx2.c): n a multiple of 8 for the last two */
void srt_round_bf16_avx2(float *x, size_t n);
float srt_amax_avx2(const float *x, size_t n);
void srt_fp4_fake_avx2(const float *x, float *y, size_t n, float s);

#endif /* SRT_OPS_FP_ISA_H */
