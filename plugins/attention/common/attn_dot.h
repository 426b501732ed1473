/*
 * Internal kernels of srt_attn_common: dot products of float operands accumulated in double,
 * in ascending k order, many independent outputs at once. Every output has the bits of
 *     s = 0; for (k = 0; k < K; k++) s += (double)a[k] * (double)b[k];
 * whatever the kernel set (AVX-512F when the CPU has it, else AVX2, else portable C), so
 * callers may split outputs between threads freely. Thread-safe; nothing is allocated.
 */
#ifndef SRT_ATTN_DOT_H
#define SRT_ATTN_DOT_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/shadowrt.h>

#include "ops/gemm.h"

/*
 * Tile layout of a [n][k] matrix (row stride ldw) for srt_attn_dot_tiles: ceil(n/8) tiles,
 * tile j = [k][8] floats holding rows 8j..8j+7 (rows past n are zero). t holds
 * ceil(n/8) * 8 * k floats.
 */
void srt_attn_tile(const float *w, size_t n, size_t k, size_t ldw, float *t);
/* The tile of 8 FP8 cache entries e[0 .. 8) (nope E4M3 codes, rd bf16 rope words, nope/64
 * scale codes; nope a multiple of 64, rd of 8) straight from their codes: the floats
 * srt_attn_tile gives for the rows srt_attn_fp8_row and srt_attn_bf16_row decode, without
 * the rows. *proven as srt_attn_fp8_row's result for every key. 0, with t untouched, for a key
 * with a NaN code or a scale code above 246, or without AVX2 + F16C. */
int srt_attn_fp8_tile(const uint8_t *const *e, size_t nope, size_t rd, float *t, int *proven);

/* y[8j + l] = Σ_c x[c] · row (8j + l) of the tiled matrix, for tiles j in [0, nt) of t. */
void srt_attn_dot_tiles(const float *x, const float *t, size_t k, size_t nt, double *y);

/*
 * A constant [n][k] weight matrix in tile layout for repeated products: bf16 tiles when every
 * value is exactly a bf16 (half the bytes to stream), float tiles otherwise.
 */
struct srt_attn_tm {
	/* the matrix as stored, when it is a row-major bf16 or f32 checkpoint tensor (borrowed;
	 * data NULL otherwise): float32-accumulated products through srt_gemm */
	struct srt_weight w;
	void *t;     /* ceil(n/8) tiles of [k][8]: float, uint16_t bf16 bits or E4M3 codes */
	float *sc;   /* E4M3: [tile][k/128][8] the scale of each row's 128-block; else NULL */
	size_t n, k;
	int bf16;    /* 1: bf16 tiles */
	int fp8;     /* 1: E4M3 tiles with sc (1 byte per weight) */
};

/* Build m from w [n][k] (row stride k). 0, or SRT_ENOMEM. Free with srt_attn_tm_free. */
int srt_attn_tm_make(const struct srt_host *host, const float *w, size_t n, size_t k,
		     struct srt_attn_tm *m);
/*
 * Build m from an FP8 E4M3 matrix (rows [row0, row0 + n) of codes [*][k], UE8M0 scales of
 * 128x128 blocks with sb_cols per block row) whose dequantized values are `deq` [n][k]: E4M3
 * tiles when decoding them gives exactly deq, else srt_attn_tm_make(deq). k a multiple of 128.
 */
int srt_attn_tm_make_fp8(const struct srt_host *host, const uint8_t *codes,
			 const uint8_t *scales, size_t sb_cols, size_t row0, size_t n, size_t k,
			 const float *deq, struct srt_attn_tm *m);
void srt_attn_tm_free(const struct srt_host *host, struct srt_attn_tm *m);

/* y[8i + l] = Σ_c x[c] · row (8 (t0 + i) + l) of m, i in [0, nt) (rows >= n give 0). */
void srt_attn_tm_dot(const struct srt_attn_tm *m, const float *x, size_t t0, size_t nt,
		     double *y);

/* Tiles [t0, t0 + nt) of m as float tiles (out: nt * 8 * k floats), for srt_attn_dot_tiles
 * over many rows: same values, so the same results as srt_attn_tm_dot. */
void srt_attn_tm_decode(const struct srt_attn_tm *m, size_t t0, size_t nt, float *out);

/* y[i] = Σ_c p[c] · v[c·ld + i] for i in [0, n), c in ascending order (probabilities · values). */
void srt_attn_pv(const double *p, const float *v, size_t ld, size_t n, size_t k, double *y);

/*
 * Float32 variants for the reference profile (whose attention accumulates in float32): the
 * bits of the scalar loops
 *     y[8j + l] = 0; for (c = 0; c < k; c++) y[8j + l] += x[c] * t[(j·k + c)·8 + l];
 *     y[i] = 0;      for (c = 0; c < k; c++) y[i] += p[c] * v[c·ld + i];
 * (multiplication then addition, ascending c) whatever the kernel set.
 */
void srt_attn_dot_tiles_f32(const float *x, const float *t, size_t k, size_t nt, float *y);
void srt_attn_pv_f32(const float *p, const float *v, size_t ld, size_t n, size_t k, float *y);
/* The same for two query heads over the same keys (each key vector is loaded once for both):
 * y0, y1 get exactly what srt_attn_dot_tiles_f32 / srt_attn_pv_f32 give for x0 / p0 and
 * x1 / p1. t_exact / v_exact: the caller found srt_attn_bf16_exact true for every value of
 * t (all nt tiles) / of the k rows of v (each n wide); when the query / probabilities pass it
 * too (checked here), the kernels use fused multiply-adds, which give the same bits. */
void srt_attn_dot_tiles_f32_2(const float *x0, const float *x1, const float *t, size_t k,
			      size_t nt, float *y0, float *y1, int t_exact);
void srt_attn_pv_f32_2(const float *p0, const float *p1, const float *v, size_t ld, size_t n,
		       size_t k, float *y0, float *y1, int v_exact);

/* The same for nh query heads over the same keys: y[h] gets exactly what
 * srt_attn_dot_tiles_f32 / srt_attn_pv_f32 give for x[h] / p[h], h in [0, nh) (x, p, y arrays
 * of nh pointers, borrowed). Heads go four at a time through kernels that load each key
 * vector once for all of them (AVX2; values on AVX-512 CPUs keep the two-head kernels), the
 * rest in pairs and alone. t_exact / v_exact as for the two-head calls; t_exact may add
 * SRT_ATTN_X_EXACT where the caller found srt_attn_bf16_exact true for every x[h] (k values
 * each), which spares the check per call (a row's query is checked once, not once per block of
 * its keys). */
#define SRT_ATTN_X_EXACT 2
void srt_attn_dot_tiles_f32_n(size_t nh, const float *const *x, const float *t, size_t k,
			      size_t nt, float *const *y, int t_exact);
void srt_attn_pv_f32_n(size_t nh, const float *const *p, const float *v, size_t ld, size_t n,
		       size_t k, float *const *y, int v_exact);

/* Values in panels of 16 dims for srt_attn_pv_f32_np: key k0 + k's n values (n a multiple of
 * 16; v row-major, n floats a key, nk keys) go to vp[j·ldk + (k0 + k)·16 + (i - j)], j = i
 * rounded down to 16: panel j / 16 holds dims j .. j + 15 of ldk keys, one key after the other. */
void srt_attn_v_panels(const float *v, size_t nk, size_t n, size_t k0, size_t ldk, float *vp);
/* The indices j of score[0 .. n) with score[j] >= P, ascending, to idx (room for n; it may
 * write any of idx[0 .. n)); returns their number, or -1 if a score is NaN. The
 * indexer's top-k prefilter (srt_attn_topk): 16 scores a step by a compare and a compress on
 * AVX-512, else a loop without a branch on the data. */
int64_t srt_attn_ge_indices(const double *score, int64_t n, double P, int32_t *idx);

/* srt_attn_pv_f32_n over values in panels (vp as srt_attn_v_panels wrote them; n a multiple
 * of 16): y[h] gets the bits srt_attn_pv_f32 gives for p[h] and the row-major values. Each
 * pass reads one panel's contiguous keys, where the row-major kernels read a cache line per
 * key; 1 from srt_attn_pv_panels when it has vector kernels here (AVX2 CPUs without AVX-512;
 * elsewhere the portable loop, correct but slow). With cont, the k keys continue earlier ones:
 * each y[h][i] holds the sum of those and gets these keys' products added in order, so a row's
 * keys taken a block at a time (p[h] and vp at the block's first key) give the bits of one
 * call over all of them. */
int srt_attn_pv_panels(void);
/* One FP8 key's values straight into value panels (srt_attn_v_panels' layout, vp at the key's
 * slot: dim i at vp[(i rounded down to 16)·ldk + i % 16]): n E4M3 codes (a multiple of 64)
 * times their blocks' scales, then rd bf16 rope words (a multiple of 16), the floats
 * srt_attn_fp8_row and srt_attn_bf16_row give. 0 (written partly, or not at all) for a key
 * with a NaN code or a scale code above 246, or without AVX2 + F16C: the caller decodes it
 * the general way. */
int srt_attn_fp8_panels(const uint8_t *codes, const uint8_t *scales, size_t n, const uint8_t *rope,
			size_t rd, float *vp, size_t ldk);
void srt_attn_pv_f32_np(size_t nh, const float *const *p, const float *vp, size_t ldk, size_t n,
			size_t k, float *const *y, int v_exact, int cont);

/* 1 when every x[i] is ±0 or a bf16 value (low 16 mantissa bits clear) of magnitude in
 * [2^-60, 2^61), else 0: the product of two such values is an exact normal float (at most
 * 16 significant bits, no underflow, no overflow). The reference profile's queries, keys
 * (E4M3 times a power of two, or bf16) and probabilities (bf16) are such values unless
 * extreme. */
int srt_attn_bf16_exact(const float *x, size_t n);

/*
 * AVX512_BF16 kernels for the reference profile's q·k and p·v: the bits of the float32 loops
 * above (y = 0; y += a[c] · b[c], c ascending, multiplication then addition) from VDPBF16PS,
 * which does two steps of such a chain per instruction (attn_dot.c says why the bits are
 * the same). Operands are pairs of bf16 words in dwords: (x[c] high word, x[c + 1] low word).
 * Valid only for operands whose exponent spans pass srt_attn_dp_fits; the kernels run on any
 * CPU (portable loops where srt_attn_dp_usable() is 0), callers use them only when it is 1.
 */

/* 1 when the AVX512_BF16 kernels run as VDPBF16PS (the CPU has AVX512_BF16 with the SDM's
 * rounding, srt_gemm_bf16dp_usable, and SRT_GEMM_ISA allows AVX-512). Cached, thread-safe. */
int srt_attn_dp_usable(void);

/* 1 when every x[i] is ±0 or a finite, normal float whose low 16 bits are clear (a bf16
 * value the kernels read exactly), else 0. *lo / *hi: the smallest and largest biased
 * exponent of the nonzero values (255 / 0 when none is nonzero). */
int srt_attn_bf16_span(const float *x, size_t n, uint8_t *lo, uint8_t *hi);

/*
 * 1 when chains of at most n products a·b, a and b from two operand sets of spans (lo_a,
 * hi_a) and (lo_b, hi_b) that srt_attn_bf16_span accepted, are computed by VDPBF16PS with
 * the float32 loop's bits: nothing denormal, nothing overflows (attn_dot.c). Either set all
 * zeros (lo > hi) always fits.
 */
static inline int srt_attn_dp_fits(uint8_t lo_a, uint8_t hi_a, uint8_t lo_b, uint8_t hi_b,
				   size_t n)
{
	if (lo_a > hi_a || lo_b > hi_b)
		return 1;
	return n <= 32768 && lo_a + lo_b >= 142 && hi_a + hi_b <= 364;
}

/* w[j · ws] = (bf16 of x[2j]) << 16 | (bf16 of x[2j + 1]) for j < ceil(n / 2), the high
 * halves of the floats (x[n] taken as 0 when n is odd). */
void srt_attn_bf16_pairs(const float *x, size_t n, uint32_t *w, size_t ws);

/* w[c] = (bf16 of v0[c]) << 16 | (bf16 of v1[c]) for c < n (v1 NULL: zeros): two keys' values
 * as the pair-interleaved rows of srt_attn_pv_bf16. */
void srt_attn_bf16_vpairs(const float *v0, const float *v1, size_t n, uint32_t *w);

/* qp [hd/2][16] for srt_attn_qk16_bf16 from nh <= 16 heads' queries q [nh][hd] (hd even):
 * qp[j·16 + l] = srt_attn_bf16_pairs of q_l's dims 2j, 2j + 1, 0 for lanes l >= nh. */
void srt_attn_bf16_qpairs(const float *q, size_t nh, size_t hd, uint32_t *qp);

/*
 * nk keys of hd floats (row-major) in one pass: kp [nk][hd/2] their pairs
 * (srt_attn_bf16_pairs of each key), vp [(nk + 1)/2][hd] the pair-interleaved rows
 * (srt_attn_bf16_vpairs of keys 2j and 2j + 1, NULL for a last odd key), and the return value
 * and *lo, *hi those of srt_attn_bf16_span over all nk · hd values. kp and vp are written
 * whatever it returns.
 */
int srt_attn_bf16_keys(const float *keys, size_t nk, size_t hd, uint32_t *kp, uint32_t *vp,
		       uint8_t *lo, uint8_t *hi);

/*
 * srt_attn_bf16_keys of nk FP8 KV entries e[k] (nope E4M3 codes, rd bf16 rope words, nope/64
 * UE8M0 scales: srt_attn_kv_decode's layout) without storing their floats: the same kp, vp,
 * span and return value as decoding each entry (srt_attn_fp8_row, srt_attn_bf16_row) and
 * calling srt_attn_bf16_keys on the nk · (nope + rd) floats. tmp: room for those floats
 * (used only where no vector kernel applies).
 */
int srt_attn_fp8_keys(const uint8_t *const *e, size_t nk, size_t nope, size_t rd, float *tmp,
		      uint32_t *kp, uint32_t *vp, uint8_t *lo, uint8_t *hi);

/*
 * y[k·16 + l] = Σ_c q_l[c] · key_k[c], c in [0, hd) ascending, for keys k in [0, nk) and 16
 * query lanes l (heads): the bits of srt_attn_dot_tiles_f32 for each (lane, key). qp:
 * [hd/2][16] dwords, qp[j·16 + l] the pair (q_l[2j], q_l[2j + 1]) (srt_attn_bf16_pairs(q_l,
 * hd, qp + l, 16)); keys: [nk][hd/2] dwords, each key's pairs (srt_attn_bf16_pairs(key, hd,
 * ., 1)). hd even.
 */
void srt_attn_qk16_bf16(const uint32_t *qp, const uint32_t *keys, size_t hd, size_t nk,
			float *y);

/*
 * y[h][c] = Σ_k p_h[k] · v[k][c], k ascending, for heads h in [0, nh), c in [0, n): the bits
 * of srt_attn_pv_f32 for each head. pp[h]: [np] dwords, the pairs (p_h[2j], p_h[2j + 1])
 * (srt_attn_bf16_pairs); vp: [np][n] dwords, row j the pairs of keys 2j and 2j + 1
 * (srt_attn_bf16_vpairs). An odd key count pads with p = 0 and a zero value: adding +0 to a
 * chain that started at +0 changes nothing (such a chain is never -0). n a multiple of 64.
 */
void srt_attn_pv_bf16(size_t nh, const uint32_t *const *pp, const uint32_t *vp, size_t n,
		      size_t np, float *const *y);

/*
 * Many queries' heads against many keys (the lightning indexer's q·k): y[e·nh + h] =
 * Σ_c qt[c·nh + h] · keys[e·k + c] for entries e in [0, ne), heads h in [0, nh), c ascending
 * (qt is the query transposed, [k][nh], as doubles; the key floats are widened exactly).
 */
/*
 * v[i] = E2M1 code i of `codes` (packed, low nibble = even i) times the UE8M0 scale
 * scales[i / 32], for i in [0, d): the floats of the scalar loop (one multiplication each),
 * vectorised when d is a multiple of 32 (the indexer's FP4 keys).
 */
void srt_attn_fp4_row(const uint8_t *codes, const uint8_t *scales, size_t d, float *v);

/*
 * v[i] = E4M3 code i times the UE8M0 scale scales[i / 64], for i in [0, n): the floats of the
 * scalar loop (one multiplication each), vectorised when n is a multiple of 64 (the KV cache's
 * FP8 "nope" dims). Returns 1 when the codes and scales alone prove that every v[i] passes
 * srt_attn_bf16_exact (no NaN code, every scale code in [76, 179], a vectorised row), else 0:
 * then the floats may pass it or not.
 */
int srt_attn_fp8_row(const uint8_t *codes, const uint8_t *scales, size_t n, float *v);

/*
 * v[i] = the bf16 value whose little-endian bits are bytes 2i, 2i + 1 of `words` (any
 * alignment), for i in [0, n): exact widenings, vectorised when n is a multiple of 16 (the KV
 * cache's rope dims and bf16 entries).
 */
void srt_attn_bf16_row(const uint8_t *words, size_t n, float *v);

/* y[i] = srt_round_bf16(x[i] / d) for i in [0, n): the floats of that scalar expression,
 * vectorised (the reference profile's attention output). */
void srt_attn_div_bf16(const float *x, float d, size_t n, float *y);

/*
 * The indexer's per-head weighting in the reference profile: t[h] = bf16(ReLU(bf16((float)
 * qk[h])) · w[h]) for h in [0, nh) (bf16(): srt_round_bf16), the floats of that scalar
 * expression, vectorised when nh is a multiple of 8.
 */
void srt_attn_ix_weigh_bf16(const double *qk, const float *w, size_t nh, float *t);

/*
 * The indexer's scores in the reference profile: out[e] = bf16((float)Σ_h t[h]) for keys e in
 * [0, ne), where t = srt_attn_ix_weigh_bf16 of qk[e·nh .. e·nh + nh) and the sum is in double
 * over ascending heads (starting from 0), the result widened back to double: the bits of that
 * scalar loop, vectorised over keys (eight in the lanes) on AVX-512.
 */
void srt_attn_ix_score_bf16(const double *qk, const float *w, size_t nh, size_t ne, double *out);

void srt_attn_qk_heads(const double *qt, size_t nh, const float *keys, size_t k, size_t ne,
		       double *y);

/*
 * The query's per-head steps in the reference profile (attn_forward.c's head_norm, hadamard).
 * srt_attn_sumsq_bf16: *ss := Σ_i bf16(q[i]²) in double, the bits of the sequential loop,
 * and 1, when AVX-512 (n % 16 == 0) or AVX2 (n % 8 == 0) runs and no order of the sum can
 * round (all squares finite and within 45 - log2(n) binades of each other); else 0 and *ss
 * untouched.
 * srt_attn_scale_bf16: q[i] := bf16(q[i] · r).
 * srt_attn_hadamard_d: x := the normalized Walsh-Hadamard transform of attn_forward.c's
 * hadamard (butterflies in double in its order, then (float)y · (float)n^-1/2 and bf16 with
 * `ref`, else (float)(y · n^-1/2)), the same bits, and 1 when AVX-512 (n a power of two in
 * [8, 1024]) or AVX2 (in [4, 1024]) runs; else 0 and x untouched.
 */
int srt_attn_sumsq_bf16(const float *q, size_t n, double *ss);
void srt_attn_scale_bf16(float *q, size_t n, float r);
int srt_attn_hadamard_d(float *x, size_t n, int ref);

#endif
