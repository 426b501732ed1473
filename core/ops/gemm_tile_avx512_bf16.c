/*
 * core/ops/gemm_tile_avx512_bf16.c — the M >= 8 (prefill) REFERENCE-mode GEMM for FP8 and FP4
 * weights by AVX512_BF16 dot products (compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vbmi -mavx512bf16, never -mfma). Called from gemm_tile_avx512.c in place of its
 * transposed kernel (run_t); runs only after srt_gemm_bf16dp_usable() said yes.
 *
 * Same layout as gemm_tile_avx512.c's transposed kernel: a tile is 16 output features, one
 * per lane, and each of the 8 partial sums of gemm.h's order (lane j = k mod 8) is its own
 * register, chaining k = j, j + 8, j + 16, ... So one VDPBF16PS does two steps of that chain,
 * k then k + 8, when each dword of the weight operand holds [w[f][k] high word | w[f][k+8] low
 * word] (VDPBF16PS adds the odd word's product first, then the even word's, each addition
 * rounded to nearest even) and the broadcast activation dword holds [x[k] | x[k+8]]. Why that
 * gives gemm.h's bits is gemm_avx512_bf16.c's header (exact bf16 operands, exact float32
 * products, nothing denormal when x_exact_products holds; its known-answer test of the
 * rounding order gates this file too). Register blocks of rows where some block fails
 * x_exact_products use the float multiply-then-add path (the float code values are decoded
 * first, by gemm_tile_avx512_t.h's decode_t; the bf16 words are their high halves).
 *
 * Loop order: per chunk of rows, per group of TG tiles, per 128 block: the chunk's activation
 * words of the block are made once (32 KiB) and used by the group's tiles; each tile's block
 * is decoded once and used by every row of the chunk. Every y still gets its blocks (FP4: its
 * sub-blocks) added in order, by the same epilogue as gemm_tile_avx512.c.
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm_isa.h"
#define KB 128     /* K block */
#define RC 128     /* activation rows per chunk */
#define NBMAX 128  /* K blocks whose exactness flags are kept (K <= 16384); larger K: false */
#define TF 16      /* output features per tile */
#define RT 3       /* rows per register block (24 accumulators) */
#define TG 8       /* tiles per group (activation words made once per group and block) */
#define NS (KB / 16) /* dot-product steps per block (each two k per lane) */

#include "ops/gemm_tile_avx512_t.h"

/* acc + the two products of each lane, the odd (high) word's first, with the activation dword
 * as an embedded-broadcast memory operand. */
static inline __m512 dp_bx(__m512 acc, __m512i w, const uint32_t *x)
{
	__asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x));
	return acc;
}

/* ---- the kernels --------------------------------------------------------------------------- */

/* Dot-product path: d[r] for rows r < R whose activation words are xw + r·64 (dword s·8 + j
 * = [x[16s + j] | x[16s + j + 8]]), over steps [s0, s0 + ns) of wb (wb[(s·8 + j)·16 + f] =
 * [w[f][16s + j] | w[f][16s + j + 8]]). */
static inline __attribute__((always_inline)) void
rows_dp(const uint32_t *wb, const uint32_t *xw, int R, int s0, int ns, __m512 *d)
{
	__m512 acc[RT][8];
	for (int r = 0; r < R; r++)
		for (int j = 0; j < 8; j++)
			acc[r][j] = _mm512_setzero_ps();
	for (int s = s0; s < s0 + ns; s++)
		for (int j = 0; j < 8; j++) {
			const __m512i wv = _mm512_load_si512((const void *)(wb + (size_t)(s * 8 + j) * TF));
			for (int r = 0; r < R; r++)
				acc[r][j] = dp_bx(acc[r][j], wv, xw + (size_t)r * (NS * 8) + s * 8 + j);
		}
	for (int r = 0; r < R; r++)
		d[r] = comb_t(acc[r]);
}

/* y rows r < R (stride ldy), block b: the products of rows x (floats, stride ldx; dp: the
 * words xw) and the tile, added as gemm_tile_avx512.c's rows_t_blk does. */
static inline __attribute__((always_inline)) void
rows_blk(const float *wt, const uint32_t *wb, int type, const float *x, const uint32_t *xw,
	 const float *xs, size_t ldx, float *y, size_t ldy, size_t nb, size_t b, const __m512 *sb,
	 int R, bool dp)
{
	__m512 d[RT];
	if (type == SRT_WT_FP8) {
		if (dp)
			rows_dp(wb, xw, R, 0, NS, d);
		else
			rows_t(wt, x, ldx, R, 0, KB, false, d);
		y_add_fp8_t(d, R, xs, nb, b, sb, y, ldy);
	} else {
		for (int s = 0; s < KB / 32; s++) {
			if (dp)
				rows_dp(wb, xw, R, 2 * s, 2, d);
			else
				rows_t(wt, x, ldx, R, (size_t)s * 32, 32, false, d);
			y_add_fp4_t(d, R, xs, nb, b, (size_t)s, sb, y, ldy);
		}
	}
}

/* xw[s·8 + j] = [high half of x[16s + j] | high half of x[16s + j + 8]] for one 128 block
 * (exact bf16 when the block passes x_exact_products; unused otherwise). */
static inline void act_words(const float *x, uint32_t *xw)
{
	for (int s = 0; s < NS; s++) {
		const __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)(x + 16 * s));
		const __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(x + 16 * s + 8));
		/* (lo & 0xFFFF0000) | (hi >> 16) */
		const __m256i r = _mm256_ternarylogic_epi32(lo, _mm256_srli_epi32(hi, 16),
							    _mm256_set1_epi32((int)0xFFFF0000u), 0xE4);
		_mm256_store_si256((__m256i *)(void *)(xw + 8 * s), r);
	}
}

/* wb from wt (float code values, exact bf16): dword (s·8 + j)·16 + f = [wt[16s + j][f] |
 * wt[16s + j + 8][f]]. */
static inline void weight_words(const float *wt, uint32_t *wb)
{
	const __m512i m = _mm512_set1_epi32((int)0xFFFF0000u);
	for (int s = 0; s < NS; s++)
		for (int j = 0; j < 8; j++) {
			const __m512i a = _mm512_load_si512((const void *)(wt + (size_t)(16 * s + j) * TF));
			const __m512i c = _mm512_load_si512((const void *)(wt + (size_t)(16 * s + j + 8) * TF));
			_mm512_store_si512((void *)(wb + (size_t)(s * 8 + j) * TF),
					   _mm512_ternarylogic_epi32(a, _mm512_srli_epi32(c, 16), m, 0xE4));
		}
}

/* decode_t of a SRT_WT_FP8_PAIRED weight (n even): each 64-byte group of the tile's 8 row
 * pairs back to [a 32 | b 32] by one VPERMB (inv: gemm.h's layout inverted), the block's 16
 * rows of 128 codes into a row-major copy, decode_t on that. */
static inline void decode_paired(const struct srt_weight *w, size_t n, size_t k0,
				 const uint8_t *inv, float *restrict wt)
{
	_Alignas(64) uint8_t rm[TF][KB];
	const __m512i ix = _mm512_load_si512((const void *)inv);
	for (size_t q = 0; q < TF / 2; q++) {
		const uint8_t *g = (const uint8_t *)w->data + (n + 2 * q) * w->cols + 2 * k0;
		for (size_t i = 0; i < KB / 32; i++) {
			const __m512i u = _mm512_permutexvar_epi8(
				ix, _mm512_loadu_si512((const void *)(g + 64 * i)));
			_mm256_store_si256((__m256i *)(void *)&rm[2 * q][32 * i], _mm512_castsi512_si256(u));
			_mm256_store_si256((__m256i *)(void *)&rm[2 * q + 1][32 * i],
					   _mm512_extracti64x4_epi64(u, 1));
		}
	}
	const struct srt_weight v = {.type = SRT_WT_FP8, .rows = TF, .cols = KB, .data = rm};
	decode_t(&v, SRT_WT_FP8, 0, 0, wt);
}

/* Rows [0, mc) (mc <= RC), features [n0, n1) (a multiple of 16), nb <= NBMAX; paired: w is
 * SRT_WT_FP8_PAIRED (type SRT_WT_FP8). */
static inline __attribute__((always_inline)) void
chunk_dp(const struct srt_weight *w, int type, bool paired, const float *x, const float *xs,
	 size_t mc, size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	_Alignas(64) float wt[KB * TF];
	_Alignas(64) uint32_t wb[KB / 2 * TF];
	_Alignas(64) uint32_t xw[RC][NS * 8];
	const size_t K = w->cols, nb = K / KB;
	uint8_t ex[RC][NBMAX];
	_Alignas(64) uint8_t inv[64];
	for (unsigned pos = 0; pos < 64; pos++)
		inv[srt_fp8_pair_src(pos)] = (uint8_t)pos;
	for (size_t i = 0; i < mc; i++)
		for (size_t b = 0; b < nb; b++)
			ex[i][b] = x_exact_products(x + i * ldx + b * KB);
	for (size_t ng = n0; ng < n1; ng += TF * TG) {
		const size_t ne = n1 - ng < TF * TG ? n1 : ng + TF * TG;
		for (size_t b = 0; b < nb; b++) {
			const size_t k0 = b * KB;
			for (size_t i = 0; i < mc; i++)
				act_words(x + i * ldx + k0, xw[i]);
			for (size_t n = ng; n < ne; n += TF) {
				if (paired)
					decode_paired(w, n, k0, inv, wt);
				else
					decode_t(w, type, n, k0, wt);
				weight_words(wt, wb);
				__m512 sb[KB / 32];
				tile_scales_t(w, type, n, b, sb);
				size_t i = 0;
				for (; i + RT <= mc; i += RT) {
					const float *xr = x + i * ldx + k0;
					float *yr = y + i * ldy + n;
					if (ex[i][b] && ex[i + 1][b] && ex[i + 2][b])
						rows_blk(wt, wb, type, xr, xw[i], xs + i * nb, ldx, yr, ldy, nb, b, sb, RT, true);
					else
						rows_blk(wt, wb, type, xr, xw[i], xs + i * nb, ldx, yr, ldy, nb, b, sb, RT, false);
				}
				for (; i < mc; i++) {
					const float *xr = x + i * ldx + k0;
					float *yr = y + i * ldy + n;
					if (ex[i][b])
						rows_blk(wt, wb, type, xr, xw[i], xs + i * nb, ldx, yr, ldy, nb, b, sb, 1, true);
					else
						rows_blk(wt, wb, type, xr, xw[i], xs + i * nb, ldx, yr, ldy, nb, b, sb, 1, false);
				}
			}
		}
	}
}

bool srt_gemmt_ref_avx512bf16(const struct srt_weight *w, const float *xq, const float *xs,
			      size_t m, size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	const bool paired = w->type == SRT_WT_FP8_PAIRED;
	if ((w->type != SRT_WT_FP8 && w->type != SRT_WT_FP4 && !paired) || w->cols % KB != 0 ||
	    w->cols / KB > NBMAX || (n1 - n0) % TF != 0 || w->cols * TF >= ((size_t)1 << 31) ||
	    (paired && n0 % 2 != 0) || !srt_gemm_bf16dp_usable())
		return false;
	const size_t nb = w->cols / KB;
	for (size_t i0 = 0; i0 < m; i0 += RC) {
		const size_t mc = m - i0 < RC ? m - i0 : RC;
		if (paired)
			chunk_dp(w, SRT_WT_FP8, true, xq + i0 * ldx, xs + i0 * nb, mc, ldx, y + i0 * ldy, ldy, n0, n1);
		else if (w->type == SRT_WT_FP8)
			chunk_dp(w, SRT_WT_FP8, false, xq + i0 * ldx, xs + i0 * nb, mc, ldx, y + i0 * ldy, ldy, n0, n1);
		else
			chunk_dp(w, SRT_WT_FP4, false, xq + i0 * ldx, xs + i0 * nb, mc, ldx, y + i0 * ldy, ldy, n0, n1);
	}
	return true;
}
