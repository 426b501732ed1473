/*
 * core/ops/gemm_tile_avx2.c — the M > 1 (prefill) GEMM kernel for x86-64 AVX2 + F16C
 * (compiled like gemm_avx2.c, never -mfma; called by gemm.c only after cpuid said yes, for
 * M >= 2).
 *
 * Same bits as the portable code (gemm.h's order) and as gemm_avx2.c: one 8-float register
 * holds the 8 lanes (k mod 8) of one output feature, each lane adds its products in k order
 * starting from 0. What changes is the blocking:
 *  - activations: the rows are taken in chunks of up to RC; for each 128-wide K block the
 *    chunk's activations are packed once into an aligned L1 buffer (xq·xs for REFERENCE with
 *    f32/bf16 weights, as gemm.c computes them), so they stay in L1 for every tile whatever
 *    the row stride is;
 *  - weights: a tile of NT = 8 output features' block is decoded once per chunk into a 4 KiB
 *    buffer (the floats of gemm_avx2.c's row_w: EXACT scaled, REFERENCE FP8/FP4 code values)
 *    and used by every row of the chunk;
 *  - products: 2 rows (3 for REFERENCE FP8) against 4 features at a time, 8 (12)
 *    independent accumulators (each weight vector loaded once per register block of rows,
 *    each activation vector once per 4 features), in two passes over the tile's features
 *    0..3 and 4..7;
 *  - lane combination: activations and weights are stored with their lanes in lane_order
 *    (0, 4, 1, 5, 2, 6, 3, 7) — products are lane-wise, so each accumulator lane still holds
 *    one k mod 8 class — which puts the pairs gemm.h adds first side by side: two levels of
 *    hadd and one add of 128-bit halves give the 8 features' ((l0+l4)+(l1+l5))+((l2+l6)+
 *    (l3+l7)) in one vector, instead of one horizontal comb8 per feature, and the epilogues
 *    (y += d; REFERENCE FP8 y += d·(sa·sb); REFERENCE FP4 y += (d·sa)·sb_s per 32 sub-block,
 *    in gemm.c's order) run on 8 features at once;
 *  - REFERENCE mode with FP8/FP4 weights, when the CPU has FMA: the products xq·wq are exact
 *    when the 128 activations of the block have at most 8 significant bits in
 *    [2^-100, 2^101) (E4M3 values always do; checked per row and block when the block is
 *    packed): then one fused multiply-add acc + x·w rounds the same real number once as the
 *    separate multiplication (exact) and addition do, so the bits are unchanged. The FMA is
 *    inline assembly (as in gemm_tile_avx512.c): GCC refuses to inline an FMA intrinsic into
 *    these -mavx2 -mf16c helpers, and a target("fma") attribute would have to be carried by
 *    every caller up to a separately compiled copy of the whole kernel. It runs only after
 *    __builtin_cpu_supports("fma") said yes; rows whose block fails the check multiply then
 *    add.
 *  - REFERENCE FP4 rows whose block's sums are exact (all 4 sub-blocks pass fp4_sub_exact:
 *    every partial sum of a sub-block is exact, in any order): the 8-lane reduction of each
 *    32-wide sub-block is the costly part of the layout above (4 vectors of products, then 9
 *    shuffles and adds per row and 8 features). Such rows and the tile's weights are packed
 *    a second way instead, "by pairs": vector v of a block holds k = 2v, 2v + 1 of each
 *    sub-block s in lanes 2s, 2s + 1 (for the weights, the 4 bytes v, 16 + v, 32 + v, 48 + v
 *    of the row's block), so one accumulator per row and feature runs over the whole block,
 *    and one round of hadd, shuffles and 128-bit permutes gives all 4 sub-block sums of 8
 *    features. The sums are the same numbers (exact), so the same bits; the epilogue is
 *    unchanged. A chunk's rows go to their layout by index lists, not in runs, so a row
 *    that does not fit takes no neighbour out of the pairs, and the pairs' register blocks
 *    are 3 rows with FMA (12 chains).
 * Output features past the last full tile go to srt_gemmk_avx2 (same bits); fewer than 8
 * features, M < 2 and f32/bf16 with K % 8 != 0 are left to the caller.
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm_avx2_common.h"
#include "ops/gemm_isa.h"

#define KB 128       /* K block */
#define NT 8         /* output features per tile */
#define NV (KB / 8)  /* 8-float vectors per block */
#define RB 3         /* activation rows per register block, at most (chunk's rb: 3 or 2) */
#define WST (NV * 8) /* floats from one feature's decoded block to the next */
#define XST KB       /* floats from one packed activation row to the next */
#define RC 64        /* activation rows per chunk: 32 KiB packed, one weight decode per chunk */
#define PAIRS_MIN 24 /* fitting FP4 rows that pay for a second decode */

/* The lane order of packed activations and decoded weights: register lane p holds the
 * products of k = 8v + LANE[p]. Products are lane-wise, so each accumulator lane still sums
 * one k mod 8 class in k order; the order only puts the lanes that gemm.h combines first
 * (l0+l4, l1+l5, ...) next to each other, where hadd adds them. */
static inline __m256i lane_order(void)
{
	return _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
}

static inline __m256 in_order(__m256 v)
{
	return _mm256_permutevar8x32_ps(v, lane_order());
}

/* 8 E2M1 values of 4 packed bytes (low nibble first) as gemm_avx2.c decodes them, in
 * lane_order: lane p takes nibble LANE[p]. */
static inline __m256 fp4x8(const uint8_t *p)
{
	return fp4x8_shifts(p, _mm256_setr_epi32(0, 16, 4, 20, 8, 24, 12, 28));
}

/* acc + x·w in one rounding (vfmadd231ps). Only where the CPU has FMA and x·w is exact. */
static inline __m256 fma8(__m256 acc, __m256 x, __m256 w)
{
	__asm__("vfmadd231ps %2, %1, %0" : "+x"(acc) : "x"(x), "x"(w));
	return acc;
}

/* Decode block [k0, k0 + 8·nv) of features [n, n + 8) into wbuf[t][v][8]: gemm.c's
 * decode_row floats (EXACT: scaled; REFERENCE: FP8 and FP4 code values), computed as
 * gemm_avx2.c's row_w computes them. */
static inline __attribute__((always_inline)) void
decode_tile(const struct srt_weight *w, int type, bool ref, size_t n, size_t k0, size_t nv,
	    float *restrict wbuf)
{
	const size_t K = w->cols;
	for (size_t t = 0; t < NT; t++) {
		const size_t r = n + t;
		float *dst = wbuf + t * WST;
		switch (type) {
		case SRT_WT_F32: {
			const float *src = (const float *)w->data + r * K + k0;
			for (size_t v = 0; v < nv; v++)
				_mm256_store_ps(dst + v * 8, in_order(_mm256_loadu_ps(src + v * 8)));
			break;
		}
		case SRT_WT_BF16: {
			const uint16_t *src = (const uint16_t *)w->data + r * K + k0;
			for (size_t v = 0; v < nv; v++)
				_mm256_store_ps(dst + v * 8,
						in_order(_mm256_castsi256_ps(_mm256_slli_epi32(
							_mm256_cvtepu16_epi32(_mm_loadu_si128(
								(const __m128i *)(const void *)(src + v * 8))),
							16))));
			break;
		}
		case SRT_WT_FP8: {
			const uint8_t *src = (const uint8_t *)w->data + r * K + k0;
			const size_t nb = (K + KB - 1) / KB;
			const uint8_t e = w->scales[(r / KB) * nb + k0 / KB];
			/* (v·2^-8)·(2^8·s): the real v·s rounded once when 2^8·s is finite;
			 * else (v·2^-8·2^8)·s; REFERENCE: v·2^-8·2^8 = v */
			__m256 f = _mm256_set1_ps(256.0f), f2 = _mm256_set1_ps(1.0f);
			bool two = false;
			if (!ref && e <= 246) {
				f = _mm256_set1_ps(256.0f * srt_e8m0_to_f32(e));
			} else if (!ref) {
				f2 = _mm256_set1_ps(srt_e8m0_to_f32(e));
				two = true;
			}
			for (size_t v = 0; v < nv; v++) {
				__m256 x = _mm256_mul_ps(fp8x8_half(src + v * 8), f);
				if (two)
					x = _mm256_mul_ps(x, f2);
				_mm256_store_ps(dst + v * 8, in_order(x));
			}
			break;
		}
		default: {
			const uint8_t *src = (const uint8_t *)w->data + (r * K + k0) / 2;
			const uint8_t *sc = w->scales + r * (K / 32) + k0 / 32;
			for (size_t v = 0; v < nv; v++) {
				__m256 x = fp4x8(src + v * 4);
				if (!ref)
					x = _mm256_mul_ps(x, _mm256_set1_ps(srt_e8m0_to_f32(sc[v / 4])));
				_mm256_store_ps(dst + v * 8, x);
			}
			break;
		}
		}
	}
}

/* acc[0..3]: the lanes (in lane_order) of 4 features a, b, c, d. Returns
 * [a, b, c, d: (l0+l4)+(l1+l5) | a, b, c, d: (l2+l6)+(l3+l7)]. */
static inline __m256 reduce4(const __m256 *acc)
{
	return _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
}

/* One vector v of pass4: acc[r][q] += x_r[v]·w_q[v]. */
static inline __attribute__((always_inline)) void
pass4_step(const float *const *wp, const float *const *x, int R, size_t v, bool fused,
	   __m256 (*acc)[4])
{
	__m256 xv[RB];
	for (int r = 0; r < R; r++)
		xv[r] = _mm256_load_ps(x[r] + v * 8);
	for (int q = 0; q < 4; q++) {
		const __m256 wv = _mm256_load_ps(wp[q] + v * 8);
		for (int r = 0; r < R; r++)
			acc[r][q] = fused ? fma8(acc[r][q], xv[r], wv)
					  : _mm256_add_ps(acc[r][q], _mm256_mul_ps(xv[r], wv));
	}
}

/* acc[r][q] = the lane-wise sums x_r[v]·w_q[v] over vectors [v0, v0 + nv), from +0, of the
 * packed rows x[r] (r < R) and the 4 features whose decoded vectors start at wp[q]. */
static inline __attribute__((always_inline)) void
pass4_acc(const float *const *wp, const float *const *x, int R, size_t v0, size_t nv,
	  bool fused, __m256 (*acc)[4])
{
	for (int r = 0; r < R; r++)
		for (int q = 0; q < 4; q++)
			acc[r][q] = _mm256_setzero_ps();
	/* Unrolling (measured on Zen 4): GCC's register allocation of the unrolled FMA loop
	 * spills; the multiply-add loop gains from it. */
	if (fused) {
#pragma GCC unroll 1
		for (size_t v = v0; v < v0 + nv; v++)
			pass4_step(wp, x, R, v, true, acc);
	} else {
#pragma GCC unroll 4
		for (size_t v = v0; v < v0 + nv; v++)
			pass4_step(wp, x, R, v, false, acc);
	}
}

/* h[r] = reduce4 of pass4_acc's sums of row r over vectors [v0, v0 + nv). */
static inline __attribute__((always_inline)) void
pass4(const float *w0, const float *w1, const float *w2, const float *w3,
      const float *const *x, int R, size_t v0, size_t nv, bool fused, __m256 *h)
{
	const float *wp[4] = {w0, w1, w2, w3};
	__m256 acc[RB][4];
	pass4_acc(wp, x, R, v0, nv, fused, acc);
	for (int r = 0; r < R; r++)
		h[r] = reduce4(acc[r]);
}

/* d[r] = the tile's 8 dots of the packed rows x[r] over vectors [v0, v0 + nv) of wbuf,
 * for r < R: two passes over the features 0..3 and 4..7, whose reduce4 results one add of
 * 128-bit halves completes in feature order. fused: every product exact (fused multiply-add,
 * same bits). R, nv and fused are compile-time constants at every call. */
static inline __attribute__((always_inline)) void
rows_dots(const float *wbuf, const float *const *x, int R, size_t v0, size_t nv, bool fused,
	  __m256 *d)
{
	__m256 h0[RB], h1[RB];
#define WF(f) (wbuf + (size_t)(f) * WST)
	pass4(WF(0), WF(1), WF(2), WF(3), x, R, v0, nv, fused, h0);
	pass4(WF(4), WF(5), WF(6), WF(7), x, R, v0, nv, fused, h1);
#undef WF
	/* [h0.lo + h0.hi | h1.lo + h1.hi]: ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)), features 0..7 */
	for (int r = 0; r < R; r++)
		d[r] = _mm256_add_ps(_mm256_permute2f128_ps(h0[r], h1[r], 0x20),
				     _mm256_permute2f128_ps(h0[r], h1[r], 0x31));
}

/* y[0..8) + a, y taken as +0 for the first term (gemm.c zeroes y, then adds). */
static inline void y_add(float *y, bool first, __m256 a)
{
	const __m256 y0 = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y);
	_mm256_storeu_ps(y, _mm256_add_ps(y0, a));
}

/* One row's block (nv vectors at src) in the k mod 8 lanes (lane_order) into dst, times f
 * when `scale` (REFERENCE with f32/bf16 weights: xq·xs, as gemm.c); *ex: REFERENCE FP8/FP4
 * products exact (can_fuse: fused multiply-adds allowed at all). */
static inline __attribute__((always_inline)) void
pack_lanes(const float *src, size_t nv, bool scale, float f, bool can_fuse, float *dst, bool *ex)
{
	const __m256 fv = _mm256_set1_ps(f);
	for (size_t v = 0; v < nv; v++) {
		__m256 xv = _mm256_loadu_ps(src + v * 8);
		if (scale)
			xv = _mm256_mul_ps(xv, fv);
		_mm256_store_ps(dst + v * 8, in_order(xv));
	}
	*ex = can_fuse && x_exact_products(dst);
}

/* Packed rows x[0 .. R) of one tile and block b: dots and epilogue, as gemm.c: EXACT (and
 * REFERENCE with f32/bf16 weights): y[r] += d; REFERENCE FP8: y[r] += d·(sa·sb); REFERENCE
 * FP4, per 32 sub-block s: y[r] += (d·sa)·sb_s. sa[r]: row r's activation scale of block b;
 * y[r]: its 8 outputs of the tile. */
static inline __attribute__((always_inline)) void
rows_blk(const float *wbuf, int type, bool ref, const float *const *x, const float *sa,
	 float *const *y, bool first, size_t nv, const __m256 *sb, int R, bool fused)
{
	const bool quant = type == SRT_WT_FP8 || type == SRT_WT_FP4;
	__m256 d[RB];
	if (!ref || !quant) {
		rows_dots(wbuf, x, R, 0, nv, false, d);
		for (int r = 0; r < R; r++)
			y_add(y[r], first, d[r]);
	} else if (type == SRT_WT_FP8) {
		rows_dots(wbuf, x, R, 0, NV, fused, d);
		for (int r = 0; r < R; r++) {
			const __m256 f = _mm256_mul_ps(_mm256_set1_ps(sa[r]), sb[0]);
			y_add(y[r], first, _mm256_mul_ps(d[r], f));
		}
	} else {
		/* y stays in registers over the 4 sub-blocks */
		__m256 yv[RB];
		for (int r = 0; r < R; r++)
			yv[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y[r]);
		for (size_t s = 0; s < KB / 32; s++) {
			rows_dots(wbuf, x, R, s * 4, 4, fused, d);
			for (int r = 0; r < R; r++) {
				const __m256 da = _mm256_mul_ps(d[r], _mm256_set1_ps(sa[r]));
				yv[r] = _mm256_add_ps(yv[r], _mm256_mul_ps(da, sb[s]));
			}
		}
		for (int r = 0; r < R; r++)
			_mm256_storeu_ps(y[r], yv[r]);
	}
}

/* The tile's REFERENCE FP4 block b (k0) "by pairs" into wbuf[t][v][8]: lanes 2s, 2s + 1 of
 * vector v are the code values of k = 32s + 2v, 32s + 2v + 1 (the low and high nibble of
 * byte 16s + v of the row's 64 bytes). */
static inline void decode_tile_pairs(const struct srt_weight *w, size_t n, size_t k0,
				     float *restrict wbuf)
{
	const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
	for (size_t t = 0; t < NT; t++) {
		const uint8_t *src = (const uint8_t *)w->data + ((n + t) * w->cols + k0) / 2;
		__m128i q[4];
		for (int i = 0; i < 4; i++)
			q[i] = _mm_loadu_si128((const __m128i *)(const void *)(src + 16 * i));
		/* byte v of each sub-block side by side: dword v = bytes v, 16+v, 32+v, 48+v */
		const __m128i a = _mm_unpacklo_epi8(q[0], q[1]), b = _mm_unpackhi_epi8(q[0], q[1]);
		const __m128i c = _mm_unpacklo_epi8(q[2], q[3]), d = _mm_unpackhi_epi8(q[2], q[3]);
		_Alignas(16) uint8_t dw[64];
		_mm_store_si128((__m128i *)(void *)dw, _mm_unpacklo_epi16(a, c));
		_mm_store_si128((__m128i *)(void *)(dw + 16), _mm_unpackhi_epi16(a, c));
		_mm_store_si128((__m128i *)(void *)(dw + 32), _mm_unpacklo_epi16(b, d));
		_mm_store_si128((__m128i *)(void *)(dw + 48), _mm_unpackhi_epi16(b, d));
		for (size_t v = 0; v < NV; v++)
			_mm256_store_ps(wbuf + t * WST + v * 8, fp4x8_shifts(dw + 4 * v, shifts));
	}
}

/* One row's 128 activations "by pairs" (decode_tile_pairs' lanes) into dst[16][8]. */
static inline void pack_pairs(const float *src, float *dst)
{
	for (size_t v = 0; v < NV; v++) {
		const __m128d lo = _mm_loadh_pd(_mm_load_sd((const double *)(const void *)(src + 2 * v)),
						(const double *)(const void *)(src + 32 + 2 * v));
		const __m128d hi = _mm_loadh_pd(_mm_load_sd((const double *)(const void *)(src + 64 + 2 * v)),
						(const double *)(const void *)(src + 96 + 2 * v));
		_mm256_store_ps(dst + v * 8, _mm256_set_m128(_mm_castpd_ps(hi), _mm_castpd_ps(lo)));
	}
}

/* Packed "by pairs" rows x[0 .. R) of one tile and FP4 block b (every sub-block fits): the
 * 4 sub-block sums of the 8 features, then rows_blk's FP4 epilogue. fused: the CPU has FMA
 * (the products and sums are exact either way). */
static inline __attribute__((always_inline)) void
rows_blk_pairs(const float *wbuf, const float *const *x, const float *sa, float *const *y,
	       bool first, const __m256 *sb, int R, bool fused)
{
	__m256 p[RB][4]; /* hadd of features (0,1), (2,3), (4,5), (6,7) */
	for (int half = 0; half < 2; half++) {
		const float *wp[4];
		for (int q = 0; q < 4; q++)
			wp[q] = wbuf + (size_t)(4 * half + q) * WST;
		__m256 acc[RB][4];
		pass4_acc(wp, x, R, 0, NV, fused, acc);
		/* [f_s0, f_s1, g_s0, g_s1 | f_s2, f_s3, g_s2, g_s3] of features f, g */
		for (int r = 0; r < R; r++) {
			p[r][2 * half] = _mm256_hadd_ps(acc[r][0], acc[r][1]);
			p[r][2 * half + 1] = _mm256_hadd_ps(acc[r][2], acc[r][3]);
		}
	}
	for (int r = 0; r < R; r++) {
		/* [0..3: s0 | 0..3: s2], [0..3: s1 | 0..3: s3], and the same of features 4..7 */
		const __m256 e02 = _mm256_shuffle_ps(p[r][0], p[r][1], _MM_SHUFFLE(2, 0, 2, 0));
		const __m256 e13 = _mm256_shuffle_ps(p[r][0], p[r][1], _MM_SHUFFLE(3, 1, 3, 1));
		const __m256 f02 = _mm256_shuffle_ps(p[r][2], p[r][3], _MM_SHUFFLE(2, 0, 2, 0));
		const __m256 f13 = _mm256_shuffle_ps(p[r][2], p[r][3], _MM_SHUFFLE(3, 1, 3, 1));
		const __m256 d[4] = {_mm256_permute2f128_ps(e02, f02, 0x20),
				     _mm256_permute2f128_ps(e13, f13, 0x20),
				     _mm256_permute2f128_ps(e02, f02, 0x31),
				     _mm256_permute2f128_ps(e13, f13, 0x31)};
		__m256 yv = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y[r]);
		for (int s = 0; s < 4; s++) {
			const __m256 da = _mm256_mul_ps(d[s], _mm256_set1_ps(sa[r]));
			yv = _mm256_add_ps(yv, _mm256_mul_ps(da, sb[s]));
		}
		_mm256_storeu_ps(y[r], yv);
	}
}

/* Rows ri[0 .. R) of one tile and block b (R compile-time): "by pairs" when bp (every row
 * fits: the chunk packed them in xp2 and decoded the tile in wbuf2), else the k mod 8 lanes,
 * by fused multiply-adds where every row's products are exact (ex, can_fuse). The pairs
 * kernel fuses whenever the CPU has FMA: its products and sums are exact. Each row's
 * operations are its own, whichever rows share its register block. */
static inline __attribute__((always_inline)) void
rows_any(const float *wbuf, const float *wbuf2, const float *xp, const float *xp2,
	 const bool *ex, const float *sa, float *y, size_t ldy, int type, bool ref, bool first,
	 size_t nv, const __m256 *sb, bool bp, bool can_fuse, bool fma, const uint8_t *ri, int R)
{
	const float *xr[RB];
	float sr[RB], *yr[RB];
	bool all_ex = can_fuse;
	for (int r = 0; r < R; r++) {
		const size_t i = ri[r];
		xr[r] = (bp ? xp2 : xp) + i * XST;
		sr[r] = sa[i];
		yr[r] = y + i * ldy;
		all_ex = all_ex && ex[i];
	}
	if (bp && fma)
		rows_blk_pairs(wbuf2, xr, sr, yr, first, sb, R, true);
	else if (bp)
		rows_blk_pairs(wbuf2, xr, sr, yr, first, sb, R, false);
	else if (all_ex)
		rows_blk(wbuf, type, ref, xr, sr, yr, first, nv, sb, R, true);
	else
		rows_blk(wbuf, type, ref, xr, sr, yr, first, nv, sb, R, false);
}

/* Rows [0, mc) (mc <= RC), full tiles [n0, n1); type and ref compile-time. Block by block,
 * the rows' activations are packed first (REFERENCE with f32/bf16 weights: xq·xs, as gemm.c),
 * so that the chunk's block stays in L1 for every tile whatever ldx is. fma: the CPU has FMA
 * (used only for REFERENCE FP8/FP4 rows whose block has exact products). */
static inline __attribute__((always_inline)) void
chunk(const struct srt_weight *w, int type, bool ref, const float *x, const float *xs,
      size_t mc, size_t ldx, float *y, size_t ldy, size_t n0, size_t n1, bool fma)
{
	_Alignas(32) float wbuf[NT * WST];
	_Alignas(32) float xp[RC * XST];
	float sa[RC];
	bool ex[RC];
	const size_t K = w->cols, nb = (K + KB - 1) / KB;
	const bool quant = type == SRT_WT_FP8 || type == SRT_WT_FP4;
	const bool can_fuse = fma && ref && quant;
	/* rows per register block: 3 for REFERENCE FP8 (12 accumulators of fused multiply-adds
	 * cover their latency: 54.5 -> 64 GFLOP/s on Zen 2, srt_bench_gemm), 2 elsewhere (more
	 * rows spill the multiply-add and the FP4 sub-block paths' registers) */
	const int rb = ref && type == SRT_WT_FP8 ? 3 : 2;
	/* and by pairs: 3 with FMA (12 chains; all-fitting rows, Zen 2: 51 -> 56 GFLOP/s) */
	const int rbp = fma ? 3 : 2;
	/* REFERENCE FP4: the rows whose block fits (fp4_sub_exact), packed "by pairs" in xp2 */
	const bool pairs = ref && type == SRT_WT_FP4;
	_Alignas(32) float wbuf2[pairs ? NT * WST : 1];
	_Alignas(32) float xp2[pairs ? RC * XST : 1];
	for (size_t b = 0; b < nb; b++) {
		const size_t k0 = b * KB, len = K - k0 < KB ? K - k0 : KB, nv = len / 8;
		/* which layout each row takes: pairs for the rows that fit, the k mod 8 lanes for
		 * the others, each row's block packed for it (the lanes' also for rows that fit
		 * when too few do, below). Each layout costs a decode of every tile; where the
		 * lanes' is needed anyway, the pairs' pays only for PAIRS_MIN fitting rows or more
		 * (measured, srt_bench_gemm) */
		uint8_t pr[RC], lr[RC]; /* the rows by pairs, by lanes */
		size_t np = 0, nl = 0;
#define LANES(i_)                                                                             \
	pack_lanes(x + (i_) * ldx + k0, nv, ref && !quant, ref ? xs[(i_) * nb + b] : 1.0f,      \
		   can_fuse, xp + (i_) * XST, &ex[i_])
		for (size_t i = 0; i < mc; i++) {
			const float *src = x + i * ldx + k0;
			if (ref)
				sa[i] = xs[i * nb + b];
			ex[i] = false;
			bool fit = pairs && len == KB;
			for (int q = 0; q < 4 && fit; q++) {
				__m256i X[4];
				int e;
				fit = fp4_sub_exact(src + 32 * q, X, &e);
			}
			if (fit) {
				pack_pairs(src, xp2 + i * XST);
				pr[np++] = (uint8_t)i;
			} else {
				LANES(i);
				lr[nl++] = (uint8_t)i;
			}
		}
		if (nl && np < PAIRS_MIN) {
			for (size_t i = 0; i < np; i++)
				LANES(pr[i]);
			for (nl = np = 0; nl < mc; nl++)
				lr[nl] = (uint8_t)nl;
		}
#undef LANES
		for (size_t n = n0; n < n1; n += NT) {
			if (nl)
				decode_tile(w, type, ref, n, k0, nv, wbuf);
			if (pairs && np)
				decode_tile_pairs(w, n, k0, wbuf2);
			__m256 sb[KB / 32];
			if (ref && quant) {
				float s[KB / 32][8];
				srt_gemm_tile8_scales(w, n, b, s);
				for (int q = 0; q < (type == SRT_WT_FP8 ? 1 : KB / 32); q++)
					sb[q] = _mm256_loadu_ps(s[q]);
			}
			/* each list in register blocks of rb (pairs: rbp) rows, then the rest by 2
			 * and by 1 */
#define ROWS(ri_, R_, bp_)                                                                  \
	rows_any(wbuf, wbuf2, xp, xp2, ex, sa, y + n, ldy, type, ref, b == 0, nv, sb, bp_,    \
		 can_fuse, fma, ri_, R_)
#define ROW_BLOCKS(list_, cnt_, rbx_, bp_)                                                  \
	do {                                                                                \
		size_t i_ = 0;                                                              \
		if ((rbx_) == 3)                                                            \
			for (; i_ + 3 <= (cnt_); i_ += 3)                                   \
				ROWS((list_) + i_, 3, bp_);                                 \
		for (; i_ + 2 <= (cnt_); i_ += 2)                                           \
			ROWS((list_) + i_, 2, bp_);                                         \
		if (i_ < (cnt_))                                                            \
			ROWS((list_) + i_, 1, bp_);                                         \
	} while (0)
			ROW_BLOCKS(pr, np, rbp, pairs);
			ROW_BLOCKS(lr, nl, rb, false);
#undef ROW_BLOCKS
#undef ROWS
		}
	}
}

static inline __attribute__((always_inline)) void
run(const struct srt_weight *w, int type, bool ref, const float *x, const float *xs, size_t m,
    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	const size_t nb = (w->cols + KB - 1) / KB;
	const bool quant = type == SRT_WT_FP8 || type == SRT_WT_FP4;
	__builtin_cpu_init(); /* done by gemm.c already; cheap, and keeps this file self-contained */
	const bool fma = ref && quant && __builtin_cpu_supports("fma");
	for (size_t i0 = 0; i0 < m; i0 += RC) {
		const size_t mc = m - i0 < RC ? m - i0 : RC;
		chunk(w, type, ref, x + i0 * ldx, xs ? xs + i0 * nb : NULL, mc, ldx, y + i0 * ldy,
		      ldy, n0, n1, fma);
	}
}

SRT_GEMM_DEFINE_RUN_BY_TYPE(run_by_type, run)

bool srt_gemmt_avx2(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	if (m < 2 || n1 - n0 < NT)
		return false;
	if ((w->type == SRT_WT_F32 || w->type == SRT_WT_BF16) && w->cols % 8 != 0)
		return false; /* lane tails: the portable code */
	const bool ref = xs != NULL;
	const size_t nf = n0 + (n1 - n0) / NT * NT;
	if (!run_by_type(w, ref, x, xs, m, ldx, y, ldy, n0, nf))
		return false;
	if (nf < n1 && !srt_gemmk_avx2(w, x, xs, m, ldx, y, ldy, nf, n1))
		return false; /* unreachable: the shapes handled above are handled there too */
	return true;
}
