/*
 * core/ops/fp_isa.h — internal: the AVX-512 forms behind fp.c's srt_round_bf16_n and quant.c's
 * srt_quant_fp4_fake (fp_avx512.c). The same bits as the scalar loops; called only after
 * cpuid showed AVX-512F and AVX-512BW (srt_gemm_isa_current() >= SRT_GEMM_ISA_AVX512). The
 * 16-lane bf16 rounding is also the attention plugins' (attn_term.h).
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
#endif

/* srt_round_bf16_n */
void srt_round_bf16_avx512(float *x, size_t n);
/* max |x[i]|, NaN if any x[i] is NaN (quant.c's block_amax) */
float srt_amax_avx512(const float *x, size_t n);
/* y[i] := E2M1(x[i] / s) · s, NaN everywhere for a NaN s (srt_quant_fp4_fake's element step) */
void srt_fp4_fake_avx512(const float *x, float *y, size_t n, float s);

#endif /* SRT_OPS_FP_ISA_H */
