/*
 * core/ops/gemm_tile_avx512_t.h — the pieces of the transposed prefill kernel (16 output
 * features per tile, one per lane) shared by gemm_tile_avx512.c and gemm_tile_avx512_bf16.c:
 * the activation exactness check, the tile decode, the 8-lane combine, the scales. Included
 * only by files compiled for AVX-512F/BW + F16C; static inline, so each file keeps its own
 * copy. The includer defines KB (128), TF (16) and RT (rows per register block).
 */
#ifndef SRT_OPS_GEMM_TILE_AVX512_T_H
#define SRT_OPS_GEMM_TILE_AVX512_T_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/gemm.h"
#include "ops/gemm_avx512_pairs.h"

/* True when each of the 128 floats at x is 0 or has at most 8 significant bits (low 16
 * mantissa bits clear) with a magnitude in [2^-100, 2^101): its product with any E4M3 code
 * value (4 bits, [2^-9, 448]) or E2M1 value (2 bits, [0.5, 6]) is then an exact normal float. */
static inline bool x_exact_products(const float *x)
{
	__m512i bad = _mm512_setzero_si512();
	for (int i = 0; i < KB; i += 16) {
		const __m512i u = _mm512_loadu_si512((const void *)(x + i));
		const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
		const __m512i e = _mm512_srli_epi32(a, 23);
		const __mmask16 nz = _mm512_test_epi32_mask(a, a);
		const __mmask16 out = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(27)) |
				      _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(227));
		bad = _mm512_or_si512(bad, _mm512_and_si512(u, _mm512_set1_epi32(0x0000FFFF)));
		bad = _mm512_mask_mov_epi32(bad, (__mmask16)(out & nz), _mm512_set1_epi32(1));
	}
	return _mm512_test_epi32_mask(bad, bad) == 0;
}

/* wt[k][16] for the block at k0 of features [n, n + 16): FP4 / FP8 code values. */
static inline __attribute__((always_inline)) void
decode_t(const struct srt_weight *w, int type, size_t n, size_t k0, float *restrict wt)
{
	const size_t K = w->cols;
	if (type == SRT_WT_FP4) {
		const __m512i vidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
							_mm512_set1_epi32((int)(K / 2)));
		const __m512 tab = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
						  -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
		const uint8_t *base = (const uint8_t *)w->data + n * (K / 2) + k0 / 2;
		for (size_t v = 0; v < KB / 8; v++) {
			const __m512i g = _mm512_i32gather_epi32(vidx, (const void *)(base + v * 4), 1);
			for (int j = 0; j < 8; j++)
				_mm512_store_ps(wt + (v * 8 + (size_t)j) * TF,
						_mm512_permutexvar_ps(_mm512_srli_epi32(g, (unsigned)(4 * j)), tab));
		}
	} else {
		const __m512i vidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
							_mm512_set1_epi32((int)K));
		const uint8_t *base = (const uint8_t *)w->data + n * K + k0;
		const __m512 f256 = _mm512_set1_ps(256.0f);
		for (size_t q = 0; q < KB / 4; q++) {
			const __m512i g = _mm512_i32gather_epi32(vidx, (const void *)(base + q * 4), 1);
			for (int j = 0; j < 4; j++) {
				/* byte j of each lane, sign-extended to 16 bits, as pair_fp8_half */
				const __m256i c = _mm512_cvtepi32_epi16(_mm512_srai_epi32(
					_mm512_slli_epi32(g, (unsigned)(24 - 8 * j)), 24));
				const __m256i h = _mm256_and_si256(_mm256_slli_epi16(c, 7),
								   _mm256_set1_epi16((short)0xBF80));
				_mm512_store_ps(wt + (q * 4 + (size_t)j) * TF,
						_mm512_mul_ps(_mm512_cvtph_ps(h), f256));
			}
		}
	}
}

/* ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)) */
static inline __m512 comb_t(const __m512 *a)
{
	return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[1], a[5])),
			     _mm512_add_ps(_mm512_add_ps(a[2], a[6]), _mm512_add_ps(a[3], a[7])));
}

/* acc + w·(*x broadcast) by one fused multiply-add, and w·(*x broadcast), each with the
 * activation as an embedded-broadcast memory operand (GCC otherwise broadcasts into a
 * register and reloads the weight vector for every row). */
static inline __m512 fma_bx(__m512 acc, __m512 w, const float *x)
{
	__asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x));
	return acc;
}

static inline __m512 mul_bx(__m512 w, const float *x)
{
	__m512 r;
	__asm__("vmulps %2%{1to16%}, %1, %0" : "=v"(r) : "v"(w), "m"(*x));
	return r;
}

/* d[r] for rows x + r·ldx (r < R) over k in [kk0, kk0 + len) of the block (R <= RT): the 8
 * partial sums of each row, fused multiply-adds when `fused` (exact products only). */
static inline __attribute__((always_inline)) void
rows_t(const float *wt, const float *x, size_t ldx, int R, size_t kk0, size_t len, bool fused,
       __m512 *d)
{
	__m512 acc[RT][8];
	for (int r = 0; r < R; r++)
		for (int j = 0; j < 8; j++)
			acc[r][j] = _mm512_setzero_ps();
	for (size_t k = kk0; k < kk0 + len; k += 8)
		for (int j = 0; j < 8; j++) {
			const __m512 wv = _mm512_load_ps(wt + (k + (size_t)j) * TF);
			for (int r = 0; r < R; r++) {
				const float *xp = x + (size_t)r * ldx + k + (size_t)j;
				acc[r][j] = fused ? fma_bx(acc[r][j], wv, xp)
						  : _mm512_add_ps(acc[r][j], mul_bx(wv, xp));
			}
		}
	for (int r = 0; r < R; r++)
		d[r] = comb_t(acc[r]);
}

/* sb[q] = the UE8M0 scales of features [n, n + 16) for K block b, one lane each (FP8: q = 0;
 * FP4: one vector per 32-wide sub-block q). */
static inline void tile_scales_t(const struct srt_weight *w, int type, size_t n, size_t b,
				 __m512 *sb)
{
	const size_t K = w->cols, nb = K / KB;
	int32_t e[KB / 32][TF];
	for (int t = 0; t < TF; t++) {
		if (type == SRT_WT_FP8) {
			e[0][t] = w->scales[((n + (size_t)t) / KB) * nb + b];
		} else {
			const uint8_t *sc = w->scales + (n + (size_t)t) * (K / 32) + b * (KB / 32);
			for (int q = 0; q < KB / 32; q++)
				e[q][t] = sc[q];
		}
	}
	for (int q = 0; q < (type == SRT_WT_FP8 ? 1 : KB / 32); q++)
		sb[q] = e8m0_16(_mm512_loadu_si512((const void *)e[q]));
}

/* y rows r < R (stride ldy) of a tile += the FP8 block b results d[r] times (sa·sb): y = 0
 * before block 0 (the first block's terms are added to +0, nothing stored first). */
static inline __attribute__((always_inline)) void
y_add_fp8_t(const __m512 *d, int R, const float *xs, size_t nb, size_t b, const __m512 *sb,
	    float *y, size_t ldy)
{
	for (int r = 0; r < R; r++) {
		float *yr = y + (size_t)r * ldy;
		const __m512 f = _mm512_mul_ps(_mm512_set1_ps(xs[(size_t)r * nb + b]), sb[0]);
		const __m512 y0 = b == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(yr);
		_mm512_storeu_ps(yr, _mm512_add_ps(y0, _mm512_mul_ps(d[r], f)));
	}
}

/* The same for FP4 sub-block s of block b: y += d·sa·sb[s]. */
static inline __attribute__((always_inline)) void
y_add_fp4_t(const __m512 *d, int R, const float *xs, size_t nb, size_t b, size_t s,
	    const __m512 *sb, float *y, size_t ldy)
{
	for (int r = 0; r < R; r++) {
		float *yr = y + (size_t)r * ldy;
		const __m512 da = _mm512_mul_ps(d[r], _mm512_set1_ps(xs[(size_t)r * nb + b]));
		const __m512 y0 = b == 0 && s == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(yr);
		_mm512_storeu_ps(yr, _mm512_add_ps(y0, _mm512_mul_ps(da, sb[s])));
	}
}

#endif /* SRT_OPS_GEMM_TILE_AVX512_T_H */
