/*
 * The indexer's per-head term and the bf16 rounding of 8 floats on x86 AVX2, shared by
 * attn_dot.c (srt_attn_ix_weigh_bf16, srt_attn_ix_score_bf16) and attn_ix.c (the scores with
 * the keys in the lanes), so that both compute the term with the same operations. Internal to
 * srt_attn_common; callers compile it only on x86-64 with GCC-style target attributes.
 */
#ifndef SRT_ATTN_TERM_H
#define SRT_ATTN_TERM_H

#include <immintrin.h>

#include "ops/fp_isa.h" /* srt_round_bf16_v16, _num: the 16-lane forms, shared with core/ops */

/* srt_round_bf16 of 8 floats: nearest even on the 16 dropped bits, NaN -> 0x7FC00000. */
__attribute__((target("avx2"))) static inline __m256 round_bf16_v8(__m256 x)
{
	__m256i u = _mm256_castps_si256(x);
	const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
	u = _mm256_and_si256(u, _mm256_set1_epi32((int)0xFFFF0000u));
	const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
	return _mm256_blendv_ps(_mm256_castsi256_ps(u), _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
				nan);
}

/* The weighting of 8 scores already narrowed to float: bf16(ReLU(bf16(f)) · w), the floats of
 * the scalar expression; max(sc, 0) returns 0 for NaN and for -0, as (sc > 0 ? sc : 0.0f). */
__attribute__((target("avx2"))) static inline __m256 ix_term8(__m256 f, __m256 w)
{
	const __m256 r = _mm256_max_ps(round_bf16_v8(f), _mm256_setzero_ps());
	return round_bf16_v8(_mm256_mul_ps(r, w));
}

/* ix_term8 on 16 floats without NaN (±inf allowed): the first rounding needs no NaN fix, the
 * second keeps it (w may be anything, and inf · 0 is NaN). Lanes holding NaN get any value. */
__attribute__((target("avx512f"))) static inline __m512 ix_term16_num(__m512 f, __m512 w)
{
	const __m512 r = _mm512_max_ps(srt_round_bf16_v16_num(f), _mm512_setzero_ps());
	return srt_round_bf16_v16(_mm512_mul_ps(r, w));
}

#endif
