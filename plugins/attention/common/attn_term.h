/*
 * The indexer's per-head term on x86 AVX2 and AVX-512 (8 and 16 lanes), shared by
 * attn_dot.c (srt_attn_ix_weigh_bf16, srt_attn_ix_score_bf16) and attn_ix.c (the scores with
 * the keys in the lanes), so that both compute the term with the same operations. Internal to
 * srt_attn_common; callers compile it only on x86-64 with GCC-style target attributes.
 */
#ifndef SRT_ATTN_TERM_H
#define SRT_ATTN_TERM_H

#include <immintrin.h>

/* srt_round_bf16_v8, _v8_num, _v16, _v16_num: the bf16 roundings, shared with core/ops */
#include "ops/fp_isa.h"

/* The weighting of 8 scores already narrowed to float: bf16(ReLU(bf16(f)) · w), the floats of
 * the scalar expression; max(sc, 0) returns 0 for NaN and for -0, as (sc > 0 ? sc : 0.0f). */
__attribute__((target("avx2"))) static inline __m256 ix_term8(__m256 f, __m256 w)
{
	const __m256 r = _mm256_max_ps(srt_round_bf16_v8(f), _mm256_setzero_ps());
	return srt_round_bf16_v8(_mm256_mul_ps(r, w));
}

/* ix_term8 without NaN in f (±inf allowed), as ix_term16_num. */
__attribute__((target("avx2"))) static inline __m256 ix_term8_num(__m256 f, __m256 w)
{
	const __m256 r = _mm256_max_ps(srt_round_bf16_v8_num(f), _mm256_setzero_ps());
	return srt_round_bf16_v8(_mm256_mul_ps(r, w));
}

/* ix_term8 on 16 floats without NaN (±inf allowed): the first rounding needs no NaN fix, the
 * second keeps it (w may be anything, and inf · 0 is NaN). Lanes holding NaN get any value. */
__attribute__((target("avx512f"))) static inline __m512 ix_term16_num(__m512 f, __m512 w)
{
	const __m512 r = _mm512_max_ps(srt_round_bf16_v16_num(f), _mm512_setzero_ps());
	return srt_round_bf16_v16(_mm512_mul_ps(r, w));
}

#endif
