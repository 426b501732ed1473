/*
 * core/ops/gemm_tile_avx512.c — the M > 1 (prefill) GEMM kernel for x86-64 AVX-512F/BW
 * (+ AVX2, F16C; compiled like gemm_avx512.c, never -mfma; called by gemm.c only after cpuid
 * said yes, for M >= 2).
 *
 * Same bits as the portable code (gemm.h's order) and as gemm_avx512.c, whose "pair" layout
 * it keeps: one 16-float register holds the 8 lanes (k mod 8) of two output features, so a
 * tile of NP = 4 pairs is 8 output features. What changes is the blocking:
 *  - weights: a tile's 128-wide K block is decoded once into an L1 buffer (4 KiB) — the same
 *    floats as gemm_avx512.c's tile() — and used by every row of a chunk of up to RC rows;
 *  - activations: RB = 4 rows at a time against the 4 pairs, 16 independent accumulators in
 *    registers (each weight vector loaded once per 4 rows, each activation vector broadcast
 *    from memory once per 4 pairs), instead of one row's 4 dependent add chains;
 *  - REFERENCE mode with FP8/FP4 weights: the products xq·wq are exact when the 128
 *    activations of the block have at most 8 significant bits in [2^-100, 2^101) (E4M3
 *    values always do; checked per row and block, once per row chunk): then one fused
 *    multiply-add acc + x·w rounds the same real number once, as the separate multiplication
 *    (exact) and addition do, so the bits are unchanged and the adds leave the FP add ports
 *    to the lane reductions. Blocks that fail the check use multiply then add.
 * Each lane still adds its products in k order starting from 0, a tile's 8 results per block
 * (or per 32 sub-block for FP4 REFERENCE) are combined by the same 8-lane reduction, and the
 * epilogues do the same operations in the same order as tile(), so every y is bit-identical.
 * Output features past the last full tile go to srt_gemmk_avx512 (same bits).
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm_avx512_pairs.h"
#include "ops/gemm_isa.h"

#define KB 128      /* K block */
#define NP 4        /* row pairs per tile (8 output features) */
#define NV (KB / 8) /* pair vectors per block */
#define RB 4        /* activation rows per register block */
#define RC 128      /* activation rows per chunk (one weight decode per chunk and block) */
#define NBMAX 128   /* K blocks whose exactness flags are kept (K <= 16384); larger K: no FMA */
#define TF 16       /* output features per transposed tile (below) */
#define RT 3        /* its rows per register block (24 accumulators) */

#include "ops/gemm_tile_avx512_t.h"

/* Decode block [k0, k0 + 8·nv) of the tile's pairs (rows n+2p, n+2p+1) into wbuf[p][v][16]:
 * gemm.c's decode_row floats (EXACT: scaled; REFERENCE: FP8 code values, FP4 code values). */
static inline __attribute__((always_inline)) void
decode_tile(const struct srt_weight *w, int type, bool ref, size_t n, size_t k0, size_t nv,
	    float *restrict wbuf)
{
	const size_t K = w->cols;
	for (int p = 0; p < NP; p++) {
		const size_t ra = n + 2 * (size_t)p, rb = ra + 1;
		float *dst = wbuf + (size_t)p * NV * 16;
		switch (type) {
		case SRT_WT_F32: {
			const float *a = (const float *)w->data + ra * K + k0;
			const float *b = (const float *)w->data + rb * K + k0;
			for (size_t v = 0; v < nv; v++)
				_mm512_store_ps(dst + v * 16, pair_f32(a + v * 8, b + v * 8));
			break;
		}
		case SRT_WT_BF16: {
			const uint16_t *a = (const uint16_t *)w->data + ra * K + k0;
			const uint16_t *b = (const uint16_t *)w->data + rb * K + k0;
			for (size_t v = 0; v < nv; v++)
				_mm512_store_ps(dst + v * 16, pair_bf16(a + v * 8, b + v * 8));
			break;
		}
		case SRT_WT_FP8: {
			const uint8_t *a = (const uint8_t *)w->data + ra * K + k0;
			const uint8_t *b = (const uint8_t *)w->data + rb * K + k0;
			const size_t nb = (K + KB - 1) / KB;
			const uint8_t ea = w->scales[(ra / KB) * nb + k0 / KB];
			const uint8_t eb = w->scales[(rb / KB) * nb + k0 / KB];
			/* (v·2^-8)·(2^8·s): the real v·s rounded once when 2^8·s is finite;
			 * else (v·2^-8·2^8)·s; REFERENCE: v·2^-8·2^8 = v */
			__m512 f = _mm512_set1_ps(256.0f), f2 = _mm512_set1_ps(1.0f);
			bool two = false;
			if (!ref && ea <= 246 && eb <= 246) {
				f = pair_set(256.0f * srt_e8m0_to_f32(ea), 256.0f * srt_e8m0_to_f32(eb));
			} else if (!ref) {
				f2 = pair_set(srt_e8m0_to_f32(ea), srt_e8m0_to_f32(eb));
				two = true;
			}
			for (size_t v = 0; v < nv; v++) {
				__m512 x = _mm512_mul_ps(pair_fp8_half(a + v * 8, b + v * 8), f);
				if (two)
					x = _mm512_mul_ps(x, f2);
				_mm512_store_ps(dst + v * 16, x);
			}
			break;
		}
		default: {
			const uint8_t *a = (const uint8_t *)w->data + (ra * K + k0) / 2;
			const uint8_t *b = (const uint8_t *)w->data + (rb * K + k0) / 2;
			const uint8_t *sa = w->scales + ra * (K / 32) + k0 / 32;
			const uint8_t *sb = w->scales + rb * (K / 32) + k0 / 32;
			for (size_t v = 0; v < nv; v++) {
				__m512 x = pair_fp4(a + v * 4, b + v * 4);
				if (!ref)
					x = _mm512_mul_ps(x, pair_set(srt_e8m0_to_f32(sa[v / 4]),
								      srt_e8m0_to_f32(sb[v / 4])));
				_mm512_store_ps(dst + v * 16, x);
			}
			break;
		}
		}
	}
}

/* d[r] = the tile's 8 dots of rows x + r·ldx over pair vectors [v0, v0 + nv) of wbuf, for
 * r < R. xmul: each row's activations times xmul[r] first (REFERENCE with f32/bf16 weights:
 * xq·xs, as gemm.c); fused: every product exact (fused multiply-add, same bits). R, nv,
 * fused and whether xmul is set are compile-time constants at every call. */
static inline __attribute__((always_inline)) void
rows_dots(const float *wbuf, const float *x, size_t ldx, int R, size_t v0, size_t nv,
	  bool fused, const float *xmul, __m256 *d)
{
	__m512 acc[RB][NP];
	for (int r = 0; r < R; r++)
		for (int p = 0; p < NP; p++)
			acc[r][p] = _mm512_setzero_ps();
	for (size_t v = v0; v < v0 + nv; v++) {
		__m512 xb[RB];
		for (int r = 0; r < R; r++) {
			xb[r] = _mm512_castpd_ps(_mm512_broadcast_f64x4(
				_mm256_castps_pd(_mm256_loadu_ps(x + (size_t)r * ldx + v * 8))));
			if (xmul)
				xb[r] = _mm512_mul_ps(xb[r], _mm512_set1_ps(xmul[r]));
		}
		for (int p = 0; p < NP; p++) {
			const __m512 wv = _mm512_load_ps(wbuf + ((size_t)p * NV + v) * 16);
			for (int r = 0; r < R; r++)
				acc[r][p] = fused ? _mm512_fmadd_ps(xb[r], wv, acc[r][p])
						  : _mm512_add_ps(acc[r][p], _mm512_mul_ps(xb[r], wv));
		}
	}
	for (int r = 0; r < R; r++)
		d[r] = reduce8(acc[r]);
}

/* Rows [i, i + R) of one tile and block b: dots and epilogue, as tile() in gemm_avx512.c:
 * EXACT (and REFERENCE with f32/bf16 weights): y += d; REFERENCE FP8: y += d·(sa·sb);
 * REFERENCE FP4, per 32 sub-block s: y += (d·sa)·sb_s. */
static inline __attribute__((always_inline)) void
rows_blk(const float *wbuf, int type, bool ref, const float *x, const float *xs, size_t ldx,
	 float *y, size_t ldy, size_t nb, size_t b, size_t nv, const __m256 *sb, int R, bool fused)
{
	const bool quant = type == SRT_WT_FP8 || type == SRT_WT_FP4;
	__m256 d[RB];
	if (!ref || !quant) {
		if (ref) {
			float xm[RB];
			for (int r = 0; r < R; r++)
				xm[r] = xs[(size_t)r * nb + b];
			rows_dots(wbuf, x, ldx, R, 0, nv, false, xm, d);
		} else {
			rows_dots(wbuf, x, ldx, R, 0, nv, false, NULL, d);
		}
		for (int r = 0; r < R; r++) {
			float *yr = y + (size_t)r * ldy;
			_mm256_storeu_ps(yr, _mm256_add_ps(_mm256_loadu_ps(yr), d[r]));
		}
	} else if (type == SRT_WT_FP8) {
		rows_dots(wbuf, x, ldx, R, 0, NV, fused, NULL, d);
		for (int r = 0; r < R; r++) {
			float *yr = y + (size_t)r * ldy;
			const __m256 f = _mm256_mul_ps(_mm256_set1_ps(xs[(size_t)r * nb + b]), sb[0]);
			_mm256_storeu_ps(yr, _mm256_add_ps(_mm256_loadu_ps(yr), _mm256_mul_ps(d[r], f)));
		}
	} else {
		for (size_t s = 0; s < KB / 32; s++) {
			rows_dots(wbuf, x, ldx, R, s * 4, 4, fused, NULL, d);
			for (int r = 0; r < R; r++) {
				float *yr = y + (size_t)r * ldy;
				const __m256 da = _mm256_mul_ps(d[r], _mm256_set1_ps(xs[(size_t)r * nb + b]));
				_mm256_storeu_ps(yr, _mm256_add_ps(_mm256_loadu_ps(yr), _mm256_mul_ps(da, sb[s])));
			}
		}
	}
}

/* Rows [i0, i0 + mc) (mc <= RC), full tiles [n0, n1). type and ref compile-time. */
static inline __attribute__((always_inline)) void
chunk(const struct srt_weight *w, int type, bool ref, const float *x, const float *xs,
      size_t mc, size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	_Alignas(64) float wbuf[NP * NV * 16];
	const size_t K = w->cols, nb = (K + KB - 1) / KB;
	const bool quant = type == SRT_WT_FP8 || type == SRT_WT_FP4;
	/* REFERENCE FP8/FP4: block b of row i has exact products (fused multiply-adds) */
	uint8_t ex[RC][NBMAX];
	const bool can_fuse = ref && quant && nb <= NBMAX;
	if (can_fuse)
		for (size_t i = 0; i < mc; i++)
			for (size_t b = 0; b < nb; b++)
				ex[i][b] = x_exact_products(x + i * ldx + b * KB);
	for (size_t n = n0; n < n1; n += 2 * NP) {
		for (size_t i = 0; i < mc; i++)
			_mm256_storeu_ps(y + i * ldy + n, _mm256_setzero_ps());
		for (size_t b = 0; b < nb; b++) {
			const size_t k0 = b * KB, len = K - k0 < KB ? K - k0 : KB, nv = len / 8;
			decode_tile(w, type, ref, n, k0, nv, wbuf);
			__m256 sb[KB / 32];
			if (ref && quant) {
				float s[KB / 32][8];
				srt_gemm_tile8_scales(w, n, b, s);
				for (int q = 0; q < (type == SRT_WT_FP8 ? 1 : KB / 32); q++)
					sb[q] = _mm256_loadu_ps(s[q]);
			}
			size_t i = 0;
			for (; i + RB <= mc; i += RB) {
				const float *xr = x + i * ldx + k0;
				float *yr = y + i * ldy + n;
				const float *xsr = ref ? xs + i * nb : NULL;
				if (can_fuse && ex[i][b] && ex[i + 1][b] && ex[i + 2][b] && ex[i + 3][b])
					rows_blk(wbuf, type, ref, xr, xsr, ldx, yr, ldy, nb, b, nv, sb, RB, true);
				else
					rows_blk(wbuf, type, ref, xr, xsr, ldx, yr, ldy, nb, b, nv, sb, RB, false);
			}
			for (; i < mc; i++) {
				const float *xr = x + i * ldx + k0;
				float *yr = y + i * ldy + n;
				const float *xsr = ref ? xs + i * nb : NULL;
				if (can_fuse && ex[i][b])
					rows_blk(wbuf, type, ref, xr, xsr, ldx, yr, ldy, nb, b, nv, sb, 1, true);
				else
					rows_blk(wbuf, type, ref, xr, xsr, ldx, yr, ldy, nb, b, nv, sb, 1, false);
			}
		}
	}
}

static inline __attribute__((always_inline)) void
run(const struct srt_weight *w, int type, bool ref, const float *x, const float *xs, size_t m,
    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	const size_t nb = (w->cols + KB - 1) / KB;
	for (size_t i0 = 0; i0 < m; i0 += RC) {
		const size_t mc = m - i0 < RC ? m - i0 : RC;
		chunk(w, type, ref, x + i0 * ldx, xs ? xs + i0 * nb : NULL, mc, ldx, y + i0 * ldy,
		      ldy, n0, n1);
	}
}

SRT_GEMM_DEFINE_RUN_BY_TYPE(run_by_type, run)

/* ==== REFERENCE FP8 / FP4 with the output features in the lanes =============================
 *
 * For prefill-sized M the pair layout's per-row lane reductions (shuffles, for each 8 outputs
 * and each 128 block, or each 32 sub-block with FP4) cost as much as the products. Here a
 * tile is 16 output features, one per lane, and each of the 8 partial sums of gemm.h's order
 * (lane k mod 8) is its own register: acc[j] += x[k]·w[k][16 features] for k = 8v + j, v in
 * order, from 0; the combination ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)) is then 7 vertical adds
 * for 16 outputs, and the epilogues are gemm.c's (y += d·(sa·sb); FP4: y += (d·sa)·sb_s).
 * The weights are decoded straight into that transposed layout (wt[k][16]): one 16-lane dword
 * gather per 8 k (FP4) or 4 k (FP8) takes each feature's codes, a shift per k puts the code in
 * each lane's low bits (FP4: vpermps table; FP8: the half-precision placement of
 * gemm_avx512.c, times 2^8: the code value). RT = 3 rows share each weight vector.
 * On CPUs with AVX512_BF16 (+ VBMI, VL, and VDPBF16PS rounding as the SDM says) the same
 * kernel runs from gemm_tile_avx512_bf16.c instead, two k per lane per VDPBF16PS (same bits).
 */
#define TMIN 8 /* fewer rows: the pair kernel (the decode would not pay off) */

static inline __attribute__((always_inline)) void
rows_t_blk(const float *wt, int type, const float *x, const float *xs, size_t ldx, float *y,
	   size_t ldy, size_t nb, size_t b, const __m512 *sb, int R, bool fused)
{
	__m512 d[RT];
	if (type == SRT_WT_FP8) {
		rows_t(wt, x, ldx, R, 0, KB, fused, d);
		y_add_fp8_t(d, R, xs, nb, b, sb, y, ldy);
	} else {
		for (size_t s = 0; s < KB / 32; s++) {
			rows_t(wt, x, ldx, R, s * 32, 32, fused, d);
			y_add_fp4_t(d, R, xs, nb, b, (size_t)s, sb, y, ldy);
		}
	}
}

/* Rows [0, mc) (mc <= RC) and features [n0, n1), n1 - n0 a multiple of 16; REFERENCE. */
static inline __attribute__((always_inline)) void
chunk_t(const struct srt_weight *w, int type, const float *x, const float *xs, size_t mc,
	size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	_Alignas(64) float wt[KB * TF];
	const size_t K = w->cols, nb = K / KB;
	uint8_t ex[RC][NBMAX];
	const bool can_fuse = nb <= NBMAX;
	if (can_fuse)
		for (size_t i = 0; i < mc; i++)
			for (size_t b = 0; b < nb; b++)
				ex[i][b] = x_exact_products(x + i * ldx + b * KB);
	for (size_t n = n0; n < n1; n += TF) {
		/* y starts as 0: the first block adds its terms to +0 (not stored first) */
		for (size_t b = 0; b < nb; b++) {
			const size_t k0 = b * KB;
			decode_t(w, type, n, k0, wt);
			__m512 sb[KB / 32];
			tile_scales_t(w, type, n, b, sb);
			size_t i = 0;
			for (; i + RT <= mc; i += RT) {
				const float *xr = x + i * ldx + k0;
				float *yr = y + i * ldy + n;
				if (can_fuse && ex[i][b] && ex[i + 1][b] && ex[i + 2][b])
					rows_t_blk(wt, type, xr, xs + i * nb, ldx, yr, ldy, nb, b, sb, RT, true);
				else
					rows_t_blk(wt, type, xr, xs + i * nb, ldx, yr, ldy, nb, b, sb, RT, false);
			}
			for (; i < mc; i++) {
				const float *xr = x + i * ldx + k0;
				float *yr = y + i * ldy + n;
				if (can_fuse && ex[i][b])
					rows_t_blk(wt, type, xr, xs + i * nb, ldx, yr, ldy, nb, b, sb, 1, true);
				else
					rows_t_blk(wt, type, xr, xs + i * nb, ldx, yr, ldy, nb, b, sb, 1, false);
			}
		}
	}
}

static void run_t(const struct srt_weight *w, int type, const float *x, const float *xs, size_t m,
		  size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	const size_t nb = w->cols / KB;
	for (size_t i0 = 0; i0 < m; i0 += RC) {
		const size_t mc = m - i0 < RC ? m - i0 : RC;
		if (type == SRT_WT_FP8)
			chunk_t(w, SRT_WT_FP8, x + i0 * ldx, xs + i0 * nb, mc, ldx, y + i0 * ldy, ldy, n0, n1);
		else
			chunk_t(w, SRT_WT_FP4, x + i0 * ldx, xs + i0 * nb, mc, ldx, y + i0 * ldy, ldy, n0, n1);
	}
}

/* ==== activation quantization (srt_gemm_quant_row) ===========================================
 *
 * One 128 block of srt_gemm_quant_row: the scale of srt_quant_act (amax, floored, times the
 * float32 1/448, rounded up to a power of two by srt_pow2_ceil), xq = the E4M3 value of
 * sat(x / s) without the detour through the code: |x / s| clamped to 448 (the saturating
 * cast), below 2^-6 rounded to the subnormal grid k·2^-9 (nearest even, as nearbyintf), else
 * to 3 mantissa bits (nearest even, the integer rounding of e4m3_encode_mag), sign kept (so
 * -0 stays -0). false (nothing written) for a block with a NaN or an infinity: the portable
 * code handles it.
 */
bool srt_gemm_quant_blk_avx512(const float *x, float *xq, float *xs)
{
	const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF);
	__m512 amax = _mm512_setzero_ps();
	__mmask16 bad = 0;
	for (int i = 0; i < KB; i += 16) {
		const __m512 v = _mm512_loadu_ps(x + i);
		const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), absm));
		bad |= _mm512_cmp_ps_mask(a, _mm512_set1_ps(__builtin_inff()), _CMP_NLT_UQ);
		amax = _mm512_max_ps(amax, a);
	}
	if (bad)
		return false;
	float m = _mm512_reduce_max_ps(amax);
	m = m > 1e-4f ? m : 1e-4f; /* SRT_QUANT_FP8_AMAX_FLOOR */
	const float sc = srt_pow2_ceil(m * (float)(1.0 / 448.0));
	const __m512 vs = _mm512_set1_ps(sc);
	for (int i = 0; i < KB; i += 16) {
		const __m512i q = _mm512_castps_si512(_mm512_div_ps(_mm512_loadu_ps(x + i), vs));
		const __m512i sign = _mm512_andnot_si512(absm, q);
		const __m512 a = _mm512_min_ps(_mm512_castsi512_ps(_mm512_and_si512(q, absm)),
					       _mm512_set1_ps(448.0f));
		__m512i u = _mm512_castps_si512(a);
		u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFFF),
							 _mm512_and_si512(_mm512_srli_epi32(u, 20),
									  _mm512_set1_epi32(1))));
		u = _mm512_and_si512(u, _mm512_set1_epi32((int)0xFFF00000u));
		const __m512 sub = _mm512_mul_ps(
			_mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(512.0f)),
					     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
			_mm512_set1_ps(1.0f / 512.0f));
		const __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ);
		const __m512i r = _mm512_mask_mov_epi32(u, small, _mm512_castps_si512(sub));
		_mm512_storeu_ps(xq + i, _mm512_castsi512_ps(_mm512_or_si512(r, sign)));
	}
	*xs = sc;
	return true;
}

bool srt_gemmt_avx512(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		      size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	if (m < 2 || n1 - n0 < 2 * NP)
		return false;
	if ((w->type == SRT_WT_F32 || w->type == SRT_WT_BF16) && w->cols % 8 != 0)
		return false; /* lane tails: the portable code */
	const bool ref = xs != NULL;
	if (ref && m >= TMIN && (w->type == SRT_WT_FP8 || w->type == SRT_WT_FP4) &&
	    n1 - n0 >= TF && w->cols * TF < ((size_t)1 << 31)) { /* gather offsets */
		const size_t nt = n0 + (n1 - n0) / TF * TF;
		if (!srt_gemmt_ref_avx512bf16(w, x, xs, m, ldx, y, ldy, n0, nt))
			run_t(w, w->type, x, xs, m, ldx, y, ldy, n0, nt);
		n0 = nt;
		if (n0 == n1)
			return true;
		if (n1 - n0 < 2 * NP)
			return srt_gemmk_avx512(w, x, xs, m, ldx, y, ldy, n0, n1);
	}
	const size_t nf = n0 + (n1 - n0) / (2 * NP) * (2 * NP);
	if (!run_by_type(w, ref, x, xs, m, ldx, y, ldy, n0, nf))
		return false;
	if (nf < n1 && !srt_gemmk_avx512(w, x, xs, m, ldx, y, ldy, nf, n1))
		return false; /* unreachable: the shapes handled above are handled there too */
	return true;
}
