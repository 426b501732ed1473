/*
 * core/ops/gemm_avx512_pairs.h — the AVX-512 "pair" helpers shared by the M = 1 kernels
 * (gemm_avx512.c) and the M > 1 kernels (gemm_tile_avx512.c): a pair vector holds 8 K values
 * of output feature (row) a in lanes 0-7 and 8 of row b in lanes 8-15. Included only by files
 * compiled for AVX-512F/BW + F16C; static inline, so each file keeps its own copy.
 */
#ifndef SRT_OPS_GEMM_AVX512_PAIRS_H
#define SRT_OPS_GEMM_AVX512_PAIRS_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline __m512 pair_f32(const float *a, const float *b)
{
	return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a))),
						   _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}

static inline __m512 pair_bf16(const uint16_t *a, const uint16_t *b)
{
	__m256i v = _mm256_inserti128_si256(
		_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
		_mm_loadu_si128((const __m128i *)(const void *)b), 1);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* E4M3 codes as halves converted to float: the code value times 2^-8. */
static inline __m512 pair_fp8_half(const uint8_t *a, const uint8_t *b)
{
	__m128i v = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(const void *)a),
				       _mm_loadl_epi64((const __m128i *)(const void *)b));
	__m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(v), 7),
				     _mm256_set1_epi16((short)0xBF80));
	return _mm512_cvtph_ps(h);
}

/* 8 nibbles of row a in lanes 0-7, of row b in lanes 8-15: each lane holds its row's 4 bytes
 * (broadcast loads) shifted right by 4·lane; vpermps reads only the low 4 bits of each
 * index, which are that lane's nibble, and looks the value (sign included) up. */
static inline __m512 pair_fp4(const uint8_t *a, const uint8_t *b)
{
	int32_t ua, ub;
	memcpy(&ua, a, 4);
	memcpy(&ub, b, 4);
	const __m512i v = _mm512_mask_set1_epi32(_mm512_set1_epi32(ua), (__mmask16)0xFF00, ub);
	const __m512i idx = _mm512_srlv_epi32(
		v, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28));
	const __m512 tab = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
					  -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
	return _mm512_permutexvar_ps(idx, tab);
}

/* [sa x8, sb x8] */
static inline __m512 pair_set(float sa, float sb)
{
	return _mm512_mask_blend_ps((__mmask16)0xFF00, _mm512_set1_ps(sa), _mm512_set1_ps(sb));
}

/* The 8 row results of NP = 4 pair accumulators (rows 2p, 2p+1 in acc[p]), each combined
 * as ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)), the same adds as comb8, done for 8 rows at once:
 * step 1 adds the 128-bit quarters swapped pairwise (l_j + l_j+4), steps 2 and 3 add
 * neighbours ((s0+s1), (s2+s3), then their sum) across accumulators. */
static inline __m256 reduce8(const __m512 *acc)
{
	__m512 h[4];
	for (int p = 0; p < 4; p++)
		h[p] = _mm512_add_ps(acc[p], _mm512_shuffle_f32x4(acc[p], acc[p], _MM_SHUFFLE(2, 3, 0, 1)));
	/* per 128-bit quarter q (0: first row, 2: second row of each pair): [s0,s1,s2,s3] */
	const __m512 ab = _mm512_add_ps(_mm512_shuffle_ps(h[0], h[1], _MM_SHUFFLE(2, 0, 2, 0)),
					_mm512_shuffle_ps(h[0], h[1], _MM_SHUFFLE(3, 1, 3, 1)));
	const __m512 cd = _mm512_add_ps(_mm512_shuffle_ps(h[2], h[3], _MM_SHUFFLE(2, 0, 2, 0)),
					_mm512_shuffle_ps(h[2], h[3], _MM_SHUFFLE(3, 1, 3, 1)));
	/* quarter 0: rows 0, 2, 4, 6; quarter 2: rows 1, 3, 5, 7 */
	const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
				       _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
	const __m128 even = _mm512_castps512_ps128(r), odd = _mm512_extractf32x4_ps(r, 2);
	return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_unpacklo_ps(even, odd)),
				    _mm_unpackhi_ps(even, odd), 1);
}

/* UE8M0 codes (one per lane, < 256) -> float, as srt_e8m0_to_f32: 2^(e-127), the subnormal
 * 2^-127 for 0, NaN for 255. */
static inline __m512 e8m0_16(__m512i e)
{
	__m512i u = _mm512_slli_epi32(e, 23);
	u = _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
				  _mm512_set1_epi32(0x00400000));
	u = _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)),
				  _mm512_set1_epi32(0x7FC00000));
	return _mm512_castsi512_ps(u);
}

#endif /* SRT_OPS_GEMM_AVX512_PAIRS_H */
