/*
 * core/ops/gemm_avx512.c — GEMM kernels for x86-64 AVX-512F/BW (+ AVX2, F16C; compiled with
 * -mavx512f -mavx512bw -mavx2 -mf16c, never -mfma). Called only after gemm.c saw all of them
 * in cpuid.
 *
 * The summation order (gemm.h) has 8 lanes, so one 16-float register holds the 8 lanes of
 * TWO output features ("a pair"): lanes 0-7 row a, lanes 8-15 row b, multiplied by the same 8
 * activations repeated twice. Each lane still sees its products in k order, product then
 * add, and the two halves are combined as gemm.c's dot_blk does, so the bits are those of
 * the portable code while every instruction does 16 weights.
 *
 * A tile is NP pairs (8 output features). M = 1 (decode) decodes each weight vector right
 * before its product: the weight bytes are read once and nothing is stored. M > 1 decodes a
 * 128 K block of the tile once into an L1 buffer (pair layout) and reuses it for every row
 * of x. A full tile's 8 results are combined by one vector reduction (the same adds as
 * dot_blk) and added to y with vector epilogues (the same operations, in the same order).
 *
 * Decoders, 16 weights (8 of each row):
 *  - E4M3: the code's bits placed as an IEEE half (bias 15 instead of 7, sign on bit 15),
 *    converted by vcvtph2ps: the code value times 2^-8, exact for every code (E4M3
 *    subnormals are half subnormals, which the conversion makes normal floats: no float32
 *    subnormal reaches a multiplier), NaN codes give ±480·2^-8 like gemm.c's fp8_fast. At
 *    M = 1 two vectors are decoded per step. The 2^8 goes with the scale: (v·2^8)·s is done
 *    as v·(2^8·s) when 2^8·s is finite, the same real product rounded once, so the same
 *    bits. When provably exact, the multiplier m moves onto the activations instead:
 *    x·(v·m) == (x·m)·v when v·m and x·m are both exact (one rounding of the same real);
 *    checked per block (x·m·(1/m) == x), else the weights carry it.
 *  - E2M1: each row's 4 bytes broadcast to its 8 lanes, shifted right by 4·lane, looked up
 *    (sign included) in a 16-float table by vpermps, which reads only the low 4 index bits.
 *  - bf16: zero-extend, shift to the high half. f32: two loads.
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm_avx512_pairs.h"
#include "ops/gemm_avx2_common.h"
#include "ops/gemm_isa.h"

#define KB 128        /* K block */
#define NP 4          /* row pairs per tile */
#define NV (KB / 8)   /* 16-float pair vectors per block */

/* Two consecutive pair vectors of FP8 codes (k = 0..7 and 8..15 from a and b) at half the
 * shuffle cost: one [a 16 bytes | b 16 bytes] register, its qwords reordered to a0-7 b0-7
 * a8-15 b8-15, sign-extended to 32 words at once; lo/hi as pair_fp8_half gives them. */
static inline void pair_fp8_half2(const uint8_t *a, const uint8_t *b, __m512 *lo, __m512 *hi)
{
	__m256i v = _mm256_inserti128_si256(
		_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
		_mm_loadu_si128((const __m128i *)(const void *)b), 1);
	v = _mm256_permute4x64_epi64(v, _MM_SHUFFLE(3, 1, 2, 0));
	const __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(v), 7),
					   _mm512_set1_epi16((short)0xBF80));
	*lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
	*hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

/* The weights of one block of a tile, ready to be turned into pair vectors. */
struct blk {
	const void *ra[NP], *rb[NP]; /* rows a and b of each pair at the block's first k */
	__m512 f[NP][KB / 32];       /* per pair (and per 32 for FP4): the weight multiplier */
	__m512 f2[NP];               /* FP8 second multiplier when `two` */
	bool two;                    /* FP8: 2^8·s not finite: (v·2^8)·s in two steps */
	uint8_t e8;                  /* FP8: the tile's one scale code, 0 when rows differ */
};

/* Pair vector v (k = 8v .. 8v+7 of the block) of pair p. With `wmul` (and `two`), exactly
 * the floats of gemm.c's decode_row; without, FP8 gives the code value · 2^-8 and FP4 the
 * unscaled code value, for callers that moved the multiplier onto the activations.
 * type, wmul and two are compile-time constants at every call. */
static inline __attribute__((always_inline)) __m512
pair_w(const struct blk *bk, int type, int p, size_t v, bool wmul, bool two)
{
	__m512 x;
	switch (type) {
	case SRT_WT_F32:
		return pair_f32((const float *)bk->ra[p] + v * 8, (const float *)bk->rb[p] + v * 8);
	case SRT_WT_BF16:
		return pair_bf16((const uint16_t *)bk->ra[p] + v * 8,
				 (const uint16_t *)bk->rb[p] + v * 8);
	case SRT_WT_FP8:
		x = pair_fp8_half((const uint8_t *)bk->ra[p] + v * 8, (const uint8_t *)bk->rb[p] + v * 8);
		if (wmul)
			x = _mm512_mul_ps(x, bk->f[p][0]);
		if (wmul && two)
			x = _mm512_mul_ps(x, bk->f2[p]);
		return x;
	default:
		x = pair_fp4((const uint8_t *)bk->ra[p] + v * 4, (const uint8_t *)bk->rb[p] + v * 4);
		if (wmul)
			x = _mm512_mul_ps(x, bk->f[p][v / 4]);
		return x;
	}
}

/* Set up block [k0, k0+len) of pairs (rowa[p], rowb[p]); `scaled` in EXACT mode. */
static inline __attribute__((always_inline)) void
blk_init(struct blk *bk, const struct srt_weight *w, int type, int np, const size_t *rowa,
	 const size_t *rowb, size_t k0, size_t len, bool scaled)
{
	const size_t K = w->cols;
	const size_t esz = type == SRT_WT_F32 ? 4 : type == SRT_WT_BF16 ? 2 : 1;
	bk->two = false;
	bk->e8 = 0;
	for (int p = 0; p < np; p++) {
		if (type == SRT_WT_FP4) {
			bk->ra[p] = (const uint8_t *)w->data + (rowa[p] * K + k0) / 2;
			bk->rb[p] = (const uint8_t *)w->data + (rowb[p] * K + k0) / 2;
		} else {
			bk->ra[p] = (const uint8_t *)w->data + (rowa[p] * K + k0) * esz;
			bk->rb[p] = (const uint8_t *)w->data + (rowb[p] * K + k0) * esz;
		}
	}
	if (type == SRT_WT_FP8) {
		const size_t nb = (K + KB - 1) / KB;
		bk->e8 = w->scales[(rowa[0] / KB) * nb + k0 / KB];
		for (int p = 0; p < np; p++) {
			const uint8_t ea = w->scales[(rowa[p] / KB) * nb + k0 / KB];
			const uint8_t eb = w->scales[(rowb[p] / KB) * nb + k0 / KB];
			if (ea != bk->e8 || eb != bk->e8)
				bk->e8 = 0;
			bk->f[p][0] = _mm512_set1_ps(256.0f);
			bk->f2[p] = _mm512_set1_ps(1.0f);
			if (scaled && ea <= 246 && eb <= 246) {
				/* 2^8·s finite: one multiplication, same rounding (file header) */
				bk->f[p][0] = pair_set(256.0f * srt_e8m0_to_f32(ea),
						       256.0f * srt_e8m0_to_f32(eb));
			} else if (scaled) {
				bk->f2[p] = pair_set(srt_e8m0_to_f32(ea), srt_e8m0_to_f32(eb));
				bk->two = true;
			}
		}
	} else if (type == SRT_WT_FP4 && scaled) {
		for (int p = 0; p < np; p++) {
			const uint8_t *sa = w->scales + rowa[p] * (K / 32) + k0 / 32;
			const uint8_t *sb = w->scales + rowb[p] * (K / 32) + k0 / 32;
			for (size_t s = 0; s < len / 32; s++)
				bk->f[p][s] = pair_set(srt_e8m0_to_f32(sa[s]), srt_e8m0_to_f32(sb[s]));
		}
	}
}

/* ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)) of 8 lanes, as dot_blk combines them. */
static inline float comb8(__m256 acc)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
	__m128 h = _mm_hadd_ps(s, s); /* [s0+s1, s2+s3, ...] */
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* out[2p], out[2p+1] = the 8-lane dots of pair p over vectors [v0, v0+nv) of the block,
 * weights decoded on the fly (wbuf NULL: fused, every weight byte read once and never
 * stored) or read from wbuf (decoded once for all rows of x). type, np and wmul are
 * compile-time constants at every call (independent add chains, no switch in the loop). */
static inline __attribute__((always_inline)) void
pair_dots(const __m512 *xv, const struct blk *bk, const float *wbuf, int type, int np,
	  bool wmul, size_t v0, size_t nv, float *out)
{
	__m512 acc[NP];
	for (int p = 0; p < np; p++)
		acc[p] = _mm512_setzero_ps();
	if (!wbuf && type == SRT_WT_FP8) {
		/* fused FP8: two vectors per step, the same products added in the same order */
		for (size_t v = v0; v < v0 + nv; v += 2)
			for (int p = 0; p < np; p++) {
				__m512 w0, w1;
				pair_fp8_half2((const uint8_t *)bk->ra[p] + v * 8,
					       (const uint8_t *)bk->rb[p] + v * 8, &w0, &w1);
				if (wmul) {
					w0 = _mm512_mul_ps(w0, bk->f[p][0]);
					w1 = _mm512_mul_ps(w1, bk->f[p][0]);
				}
				acc[p] = _mm512_add_ps(acc[p], _mm512_mul_ps(xv[v], w0));
				acc[p] = _mm512_add_ps(acc[p], _mm512_mul_ps(xv[v + 1], w1));
			}
	} else {
		for (size_t v = v0; v < v0 + nv; v++)
			for (int p = 0; p < np; p++) {
				const __m512 wv = wbuf ? _mm512_load_ps(wbuf + ((size_t)p * NV + v) * 16)
						       : pair_w(bk, type, p, v, wmul, false);
				acc[p] = _mm512_add_ps(acc[p], _mm512_mul_ps(xv[v], wv));
			}
	}
	if (np == NP) {
		_mm256_storeu_ps(out, reduce8(acc));
		return;
	}
	for (int p = 0; p < np; p++) {
		out[2 * p] = comb8(_mm512_castps512_ps256(acc[p]));
		out[2 * p + 1] = comb8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1)));
	}
}

/* xv[v] = the 8 activations of vector v repeated for both rows of a pair, times f (a power
 * of two) when `mul`. With `check`, returns false unless every product is exact (x·f·(1/f)
 * gives x back: no overflow, no bits lost below the normal range), so that a weight's
 * multiplier f can move from the weights onto the activations without changing a bit. */
static inline __attribute__((always_inline)) bool
x_pairs(const float *xr, size_t nv, bool mul, float f, bool check, __m512 *xv)
{
	const __m256 vf = _mm256_set1_ps(f), vr = _mm256_set1_ps(1.0f / f);
	__m256 bad = _mm256_setzero_ps();
	for (size_t v = 0; v < nv; v++) {
		__m256 x8 = _mm256_loadu_ps(xr + v * 8);
		if (mul) {
			const __m256 p = _mm256_mul_ps(x8, vf);
			if (check)
				bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_mul_ps(p, vr), x8, _CMP_NEQ_UQ));
			x8 = p;
		}
		const __m512 x16 = _mm512_castps256_ps512(x8);
		xv[v] = _mm512_shuffle_f32x4(x16, x16, 0x44);
	}
	return _mm256_movemask_ps(bad) == 0;
}

/* One tile: output features [n, n + nt), nt <= 2·np; an odd last row is paired with itself
 * and its second result dropped. ref (REFERENCE mode), type and np are compile-time. */
static inline __attribute__((always_inline)) void
tile(const struct srt_weight *w, int type, bool ref, const float *x, const float *xs, size_t m,
     size_t ldx, float *y, size_t ldy, size_t n, int nt, int np)
{
	_Alignas(64) float wbuf[NP * NV * 16];
	__m512 xv[NV];
	struct blk bk;
	size_t rowa[NP], rowb[NP];
	const size_t K = w->cols;
	const bool quant = type == SRT_WT_FP8 || type == SRT_WT_FP4;
	const size_t nb = (K + KB - 1) / KB;
	for (int p = 0; p < np; p++) {
		rowa[p] = n + 2 * (size_t)p;
		rowb[p] = 2 * p + 1 < nt ? rowa[p] + 1 : rowa[p];
	}
	for (size_t i = 0; i < m; i++)
		for (int t = 0; t < nt; t++)
			y[i * ldy + n + t] = 0.0f;
	for (size_t b = 0; b < nb; b++) {
		const size_t k0 = b * KB, len = K - k0 < KB ? K - k0 : KB, nv = len / 8;
		float sb[KB / 32][2 * NP]; /* REFERENCE: weight scales, [sub-block][row] */
		blk_init(&bk, w, type, np, rowa, rowb, k0, len, !ref);
		/* M = 1: fused, unless an FP8 scale needs two multiplications (then buffered) */
		const bool fused = m == 1 && !bk.two;
		if (!fused) {
			for (size_t v = 0; v < nv; v++)
				for (int p = 0; p < np; p++)
					_mm512_store_ps(wbuf + ((size_t)p * NV + v) * 16,
							pair_w(&bk, type, p, v, !(type == SRT_WT_FP4 && ref), bk.two));
		}
		if (ref && quant) {
			for (int t = 0; t < nt; t++) {
				if (type == SRT_WT_FP8) {
					sb[0][t] = srt_e8m0_to_f32(w->scales[((n + t) / KB) * nb + b]);
				} else {
					const uint8_t *sc = w->scales + (n + t) * (K / 32) + b * (KB / 32);
					for (int s = 0; s < KB / 32; s++)
						sb[s][t] = srt_e8m0_to_f32(sc[s]);
				}
			}
		}
		for (size_t i = 0; i < m; i++) {
			const float *xr = x + i * ldx + k0;
			float *yr = y + i * ldy + n;
			float d[2 * NP];
			if (!fused || type == SRT_WT_F32 || type == SRT_WT_BF16 ||
			    (type == SRT_WT_FP4 && ref)) {
				/* the reference's f32/bf16 case dequantizes the activations first
				 * (xq · xs, as gemm.c) */
				const bool scale_x = ref && !quant;
				x_pairs(xr, nv, scale_x, scale_x ? xs[i * nb + b] : 1.0f, false, xv);
				if (fused)
					pair_dots(xv, &bk, NULL, type, np, false, 0, nv, d);
			} else if (type == SRT_WT_FP4) {
				/* fused FP4 EXACT: the per-32 scales stay on the weights */
				x_pairs(xr, nv, false, 1.0f, false, xv);
				pair_dots(xv, &bk, NULL, type, np, true, 0, nv, d);
			} else if (ref) {
				/* fused FP8 REFERENCE: x·(v·2^8) == (x·2^8)·v when x·2^8 is exact */
				if (x_pairs(xr, nv, true, 256.0f, true, xv)) {
					pair_dots(xv, &bk, NULL, type, np, false, 0, nv, d);
				} else {
					x_pairs(xr, nv, false, 1.0f, false, xv);
					pair_dots(xv, &bk, NULL, type, np, true, 0, nv, d);
				}
			} else {
				/* fused FP8 EXACT: x·(v·2^8·s) == (x·2^8·s)·v when the tile has one
				 * scale, v·2^8·s is exact for every code (10 <= e <= 246) and so is
				 * x·2^8·s */
				const bool fold = bk.e8 >= 10 && bk.e8 <= 246 &&
						  x_pairs(xr, nv, true, 256.0f * srt_e8m0_to_f32(bk.e8), true, xv);
				if (fold) {
					pair_dots(xv, &bk, NULL, type, np, false, 0, nv, d);
				} else {
					x_pairs(xr, nv, false, 1.0f, false, xv);
					pair_dots(xv, &bk, NULL, type, np, true, 0, nv, d);
				}
			}
			if (!ref || !quant) {
				if (!fused)
					pair_dots(xv, &bk, wbuf, type, np, true, 0, nv, d);
				if (nt == 2 * NP)
					_mm256_storeu_ps(yr, _mm256_add_ps(_mm256_loadu_ps(yr), _mm256_loadu_ps(d)));
				else
					for (int t = 0; t < nt; t++)
						yr[t] += d[t];
			} else if (type == SRT_WT_FP8) {
				const float sa = xs[i * nb + b];
				if (!fused)
					pair_dots(xv, &bk, wbuf, type, np, true, 0, NV, d);
				if (nt == 2 * NP) {
					const __m256 f = _mm256_mul_ps(_mm256_set1_ps(sa), _mm256_loadu_ps(sb[0]));
					_mm256_storeu_ps(yr, _mm256_add_ps(_mm256_loadu_ps(yr),
									   _mm256_mul_ps(_mm256_loadu_ps(d), f)));
				} else {
					for (int t = 0; t < nt; t++)
						yr[t] += d[t] * (sa * sb[0][t]);
				}
			} else {
				const float sa = xs[i * nb + b];
				for (size_t s = 0; s < KB / 32; s++) {
					pair_dots(xv, &bk, fused ? NULL : wbuf, type, np, false, s * 4, 4, d);
					if (nt == 2 * NP) {
						const __m256 da = _mm256_mul_ps(_mm256_loadu_ps(d), _mm256_set1_ps(sa));
						_mm256_storeu_ps(yr, _mm256_add_ps(_mm256_loadu_ps(yr),
										   _mm256_mul_ps(da, _mm256_loadu_ps(sb[s]))));
					} else {
						for (int t = 0; t < nt; t++)
							yr[t] += d[t] * sa * sb[s][t];
					}
				}
			}
		}
	}
}

static inline __attribute__((always_inline)) void
run(const struct srt_weight *w, int type, bool ref, const float *x, const float *xs, size_t m,
    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	size_t n = n0;
	for (; n + 2 * NP <= n1; n += 2 * NP)
		tile(w, type, ref, x, xs, m, ldx, y, ldy, n, 2 * NP, NP);
	const int rest = (int)(n1 - n);
	switch ((rest + 1) / 2) {
	case 1:
		tile(w, type, ref, x, xs, m, ldx, y, ldy, n, rest, 1);
		break;
	case 2:
		tile(w, type, ref, x, xs, m, ldx, y, ldy, n, rest, 2);
		break;
	case 3:
		tile(w, type, ref, x, xs, m, ldx, y, ldy, n, rest, 3);
		break;
	case 4: /* 7 left: 3 pairs and a last row paired with itself */
		tile(w, type, ref, x, xs, m, ldx, y, ldy, n, rest, 4);
		break;
	default:
		break;
	}
}

SRT_GEMM_DEFINE_RUN_BY_TYPE(run_by_type, run)

/* ==== decode (M = 1) in REFERENCE mode, FP8 / FP4 weights, full tiles =========================
 *
 * The same operations as tile() for M = 1 and a full tile (so the same bits), arranged for a
 * GEMV: the activation pair vectors are built once per call for the whole K (FP8: times 2^8
 * per block when exact, the check of x_pairs), the weight scales of a tile are converted in
 * vector registers, the tile's 8 results stay in a register across the K blocks (y = 0, then
 * y + d·f per block or sub-block, in order) and are stored once, and FP4 weights are decoded
 * from one [a 16 bytes | b 16 bytes] load per 32-wide sub-block (vpermd picks each vector's
 * dword of both rows, vpsrlvd and vpermps as pair_fp4).
 *
 * Prefetch: a tile reads 8 whole rows, one contiguous region, as 8 interleaved streams, which
 * the hardware prefetchers follow at about half of this machine's read bandwidth (measured:
 * 13-17 GB/s against 28 for one stream). So each tile also prefetches, into L2, the region of
 * the tile after next front to back, one line per 64 bytes it consumes itself: the weights
 * then arrive as one sequential stream, a tile ahead.
 */
#define GEMV_KMAX 8192 /* K of the on-stack activation pairs (64 KiB); larger K: tile() */

/* The 4 pair vectors of FP4 sub-block (32 weights) of rows a and b. */
static inline void pair_fp4_sub(const uint8_t *a, const uint8_t *b, __m512 *out)
{
	const __m512i v = _mm512_castsi256_si512(_mm256_inserti128_si256(
		_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
		_mm_loadu_si128((const __m128i *)(const void *)b), 1));
	const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
	const __m512 tab = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
					  -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
	for (int q = 0; q < 4; q++) {
		const __m512i idx = _mm512_mask_set1_epi32(_mm512_set1_epi32(q), (__mmask16)0xFF00, 4 + q);
		const __m512i nib = _mm512_srlv_epi32(_mm512_permutexvar_epi32(idx, v), sh);
		out[q] = _mm512_permutexvar_ps(nib, tab);
	}
}

/* acc + x·w: one fused multiply-add when `fused` (exact products only, see above). */
static inline __attribute__((always_inline)) __m512 madd(__m512 acc, __m512 x, __m512 w, bool fused)
{
	return fused ? _mm512_fmadd_ps(x, w, acc) : _mm512_add_ps(acc, _mm512_mul_ps(x, w));
}

/* One FP8 block of a tile: acc[p] = Σ x·w over the block's 16 pair vectors, in order;
 * x256: the pairs carry 2^8 (else the weights do); fused: exact products (madd). */
static inline __attribute__((always_inline)) void
fp8_blk(const uint8_t *const *rows, size_t b, const __m512 *xb, __m512 *acc, bool x256,
	bool fused, const char *pf)
{
	const __m512 f256 = _mm512_set1_ps(256.0f);
	for (size_t v = 0; v < NV; v += 2)
		for (int p = 0; p < NP; p++) {
			__m512 w0, w1;
			if (pf && p % 2 == 0) /* 32 bytes a step: a line every other step */
				_mm_prefetch(pf + b * (8 * KB) + (v / 2) * (2 * NP * 16) + (size_t)p * 32,
					     _MM_HINT_T1);
			pair_fp8_half2(rows[2 * p] + b * KB + v * 8, rows[2 * p + 1] + b * KB + v * 8,
				       &w0, &w1);
			if (!x256) {
				w0 = _mm512_mul_ps(w0, f256);
				w1 = _mm512_mul_ps(w1, f256);
			}
			acc[p] = madd(acc[p], xb[v], w0, fused);
			acc[p] = madd(acc[p], xb[v + 1], w1, fused);
		}
}

/* Rows [n0, n0 + 8·ntiles) of y = W·x (REFERENCE, one row of prepared activations). */
static inline __attribute__((always_inline)) void
gemv_ref(const struct srt_weight *w, int type, const float *xq, const float *xs, float *y,
	 size_t n0, size_t ntiles)
{
	const size_t K = w->cols, nb = K / KB;
	__m512 xv[GEMV_KMAX / 8];
	bool x256[GEMV_KMAX / KB]; /* FP8: block b's pairs carry the 2^8 */
	bool xfma[GEMV_KMAX / KB]; /* block b's products are exact: fused multiply-adds */
	for (size_t b = 0; b < nb; b++) {
		x256[b] = type == SRT_WT_FP8 && x_pairs(xq + b * KB, NV, true, 256.0f, true, xv + b * NV);
		if (!x256[b])
			x_pairs(xq + b * KB, NV, false, 1.0f, false, xv + b * NV);
		xfma[b] = (type == SRT_WT_FP4 || x256[b]) && x_exact_products(xq + b * KB);
	}
	const size_t rowbytes = type == SRT_WT_FP8 ? K : K / 2;
	gemv_head_prefetch(w->data, rowbytes, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const char *pf = tt + 2 < ntiles ? (const char *)w->data + (n + 16) * rowbytes : NULL;
		__m256 yacc = _mm256_setzero_ps();
		if (type == SRT_WT_FP8) {
			const uint8_t *rows[8];
			for (int t = 0; t < 8; t++)
				rows[t] = (const uint8_t *)w->data + (n + (size_t)t) * K;
			/* the scale block row of each of the 8 rows */
			size_t srow[8];
			for (int t = 0; t < 8; t++)
				srow[t] = ((n + (size_t)t) / KB) * nb;
			for (size_t b = 0; b < nb; b++) {
				__m512 acc[NP];
				for (int p = 0; p < NP; p++)
					acc[p] = _mm512_setzero_ps();
				const __m512 *xb = xv + b * NV;
				if (xfma[b])
					fp8_blk(rows, b, xb, acc, true, true, pf);
				else if (x256[b])
					fp8_blk(rows, b, xb, acc, true, false, pf);
				else
					fp8_blk(rows, b, xb, acc, false, false, pf);
				const __m256 f = fp8_tile_factors(w->scales, srow, b, xs[b]);
				yacc = _mm256_add_ps(yacc, _mm256_mul_ps(reduce8(acc), f));
			}
		} else {
			const uint8_t *rows[8], *sc[8];
			for (int t = 0; t < 8; t++) {
				rows[t] = (const uint8_t *)w->data + (n + (size_t)t) * (K / 2);
				sc[t] = w->scales + (n + (size_t)t) * (K / 32);
			}
			for (size_t b = 0; b < nb; b++) {
				const __m256i e4 = fp4_tile_scale_codes(sc, b);
				const __m256 sa = _mm256_set1_ps(xs[b]);
				const __m512 *xb = xv + b * NV;
				for (int sub = 0; sub < 4; sub++) {
					__m512 acc[NP], wv[NP][4];
					if (pf) /* 4 x 32 bytes a sub-block */
						for (int l = 0; l < 2; l++)
							_mm_prefetch(pf + b * (4 * KB) + (size_t)sub * 128 +
									     (size_t)l * 64, _MM_HINT_T1);
					for (int p = 0; p < NP; p++)
						pair_fp4_sub(rows[2 * p] + b * 64 + sub * 16,
							     rows[2 * p + 1] + b * 64 + sub * 16, wv[p]);
					for (int p = 0; p < NP; p++)
						acc[p] = _mm512_setzero_ps();
					if (xfma[b])
						for (int q = 0; q < 4; q++)
							for (int p = 0; p < NP; p++)
								acc[p] = madd(acc[p], xb[sub * 4 + q], wv[p][q], true);
					else
						for (int q = 0; q < 4; q++)
							for (int p = 0; p < NP; p++)
								acc[p] = madd(acc[p], xb[sub * 4 + q], wv[p][q], false);
					const __m256 da = _mm256_mul_ps(reduce8(acc), sa);
					yacc = _mm256_add_ps(yacc, _mm256_mul_ps(da, fp4_sub_scales(e4, sub, false)));
				}
			}
		}
		_mm256_storeu_ps(y + n, yacc);
	}
}

/* One step of the bf16 GEMVs: 32 weights of rows a and b (from 64 bytes of each) as the 4
 * pair vectors [a k 0-7 | b k 0-7] .. [a 24-31 | b 24-31] in float32, and, when pf is not
 * NULL, 128 bytes of the tile after next prefetched. One VPERMT2W puts words [a0-3 a8-11 |
 * a4-7 a12-15 | b0-3 b8-11 | b4-7 b12-15] in place; unpacking against zero (low / high words
 * of each 128-bit lane, into the high half of each float) gives two pair vectors. */
static inline __attribute__((always_inline)) void bf16_step(const uint16_t *a, const uint16_t *b,
							   const char *pf, __m512 *wv)
{
	static const int16_t perm[32] = {0,  1,  2,  3,  8,  9,  10, 11, 4,  5,  6,  7,  12, 13, 14, 15,
					 32, 33, 34, 35, 40, 41, 42, 43, 36, 37, 38, 39, 44, 45, 46, 47};
	const __m512i i0 = _mm512_loadu_si512(perm), zero = _mm512_setzero_si512();
	const __m512i i1 = _mm512_add_epi16(i0, _mm512_set1_epi16(16));
	if (pf) {
		_mm_prefetch(pf, _MM_HINT_T1);
		_mm_prefetch(pf + 64, _MM_HINT_T1);
	}
	const __m512i va = _mm512_loadu_si512(a), vb = _mm512_loadu_si512(b);
	const __m512i t0 = _mm512_permutex2var_epi16(va, i0, vb);
	const __m512i t1 = _mm512_permutex2var_epi16(va, i1, vb);
	wv[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, t0));
	wv[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, t0));
	wv[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, t1));
	wv[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, t1));
}

/* Rows [n0, n0 + 8·ntiles) of y = W·x, EXACT mode, bf16 weights, one row of activations,
 * K a multiple of 128: tile()'s operations for M = 1 (same bits), arranged as gemv_ref (pairs
 * built once, y of a tile in a register, the prefetch above), each row read 64 bytes at a
 * time (bf16_step). */
static void gemv_bf16(const struct srt_weight *w, const float *x, float *y, size_t n0,
		      size_t ntiles)
{
	const size_t K = w->cols, nb = K / KB;
	__m512 xv[GEMV_KMAX / 8];
	x_pairs(x, K / 8, false, 1.0f, false, xv);
	gemv_head_prefetch(w->data, 2 * K, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const uint16_t *rows[8];
		const char *pf = bf16_tile_rows(w->data, K, n, tt, ntiles, rows);
		__m256 yacc = _mm256_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			__m512 acc[NP];
			for (int p = 0; p < NP; p++)
				acc[p] = _mm512_setzero_ps();
			const __m512 *xb = xv + b * NV;
			for (size_t v = 0; v < NV; v += 4)
				for (int p = 0; p < NP; p++) {
					__m512 wv[4];
					bf16_step(rows[2 * p] + b * KB + v * 8, rows[2 * p + 1] + b * KB + v * 8,
						  pf ? pf + b * (16 * KB) + (v / 4) * 512 + (size_t)p * 128 : NULL, wv);
					for (int q = 0; q < 4; q++)
						acc[p] = _mm512_add_ps(acc[p], _mm512_mul_ps(xb[v + (size_t)q], wv[q]));
				}
			yacc = _mm256_add_ps(yacc, reduce8(acc));
		}
		_mm256_storeu_ps(y + n, yacc);
	}
}

/* The pair vector of 8 activations (x_pairs without a factor): one broadcast load. */
static inline __m512 xpair(const float *x8)
{
	return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(x8))));
}

/* Rows [n0, n0 + 8·ntiles) of y = W·x, EXACT mode, bf16 weights, M = 2..4 rows of activations
 * (stride ldx), K a multiple of 128: gemv_bf16's operations for each row (same bits), each
 * weight vector loaded and arranged once for all M rows. The activation pair vectors are
 * broadcast from x (8 floats into both halves) where they are used, so any K fits. A
 * decode step's compressor projections (four rows, one group) take this path. */
static inline __attribute__((always_inline)) void
gemv_bf16_rows(const struct srt_weight *w, const float *x, size_t ldx, float *y, size_t ldy,
	       size_t n0, size_t ntiles, const int M)
{
	const size_t K = w->cols, nb = K / KB;
	gemv_head_prefetch(w->data, 2 * K, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const uint16_t *rows[8];
		const char *pf = bf16_tile_rows(w->data, K, n, tt, ntiles, rows);
		__m256 yacc[4];
		for (int r = 0; r < M; r++)
			yacc[r] = _mm256_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			/* pair by pair (a pair's chains in v order, as gemv_bf16's), so that only
			 * M accumulators and one step's 4 weight vectors are live */
			__m512 acc[4][NP];
			for (int p = 0; p < NP; p++) {
				__m512 a[4];
				for (int r = 0; r < M; r++)
					a[r] = _mm512_setzero_ps();
				for (size_t v = 0; v < NV; v += 4) {
					__m512 wv[4];
					bf16_step(rows[2 * p] + b * KB + v * 8, rows[2 * p + 1] + b * KB + v * 8,
						  pf ? pf + b * (16 * KB) + (v / 4) * 512 + (size_t)p * 128 : NULL, wv);
					for (int r = 0; r < M; r++) {
						const float *xr = x + (size_t)r * ldx + b * KB + v * 8;
						for (int q = 0; q < 4; q++)
							a[r] = _mm512_add_ps(a[r], _mm512_mul_ps(xpair(xr + 8 * q), wv[q]));
					}
				}
				for (int r = 0; r < M; r++)
					acc[r][p] = a[r];
			}
			for (int r = 0; r < M; r++)
				yacc[r] = _mm256_add_ps(yacc[r], reduce8(acc[r]));
		}
		for (int r = 0; r < M; r++)
			_mm256_storeu_ps(y + (size_t)r * ldy + n, yacc[r]);
	}
}

/* Tiles [n0, n0 + 8·nt) of y = W·x, EXACT mode, bf16 weights, 1 <= m <= 7 rows, K a multiple
 * of 128, by the float kernels: gemv_bf16 for one row (K <= GEMV_KMAX), gemv_bf16_rows for 2-4
 * at a time. */
static void bf16_float_tiles(const struct srt_weight *w, const float *x, size_t m, size_t ldx,
			     float *y, size_t ldy, size_t n0, size_t nt)
{
	for (size_t r = 0; r < m; r += 4) { /* 4 rows a pass (then 1-3) */
		const float *xr = x + r * ldx;
		float *yr = y + r * ldy;
		switch (m - r < 4 ? m - r : 4) {
		case 1:
			if (w->cols <= GEMV_KMAX)
				gemv_bf16(w, xr, yr, n0, nt);
			else
				run_by_type(w, false, xr, NULL, 1, ldx, yr, ldy, n0, n0 + 8 * nt);
			break;
		case 2:
			gemv_bf16_rows(w, xr, ldx, yr, ldy, n0, nt, 2);
			break;
		case 3:
			gemv_bf16_rows(w, xr, ldx, yr, ldy, n0, nt, 3);
			break;
		default:
			gemv_bf16_rows(w, xr, ldx, yr, ldy, n0, nt, 4);
			break;
		}
	}
}

bool srt_gemmk_avx512(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		      size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	if (!xs && m >= 1 && m <= 7 && w->type == SRT_WT_BF16 && w->cols % KB == 0 &&
	    n1 - n0 >= 2 * NP) {
		const size_t nt = (n1 - n0) / (2 * NP), n = n0 + nt * 2 * NP;
		/* 2-7 rows: bf16 dot products where the CPU has them and the activations are bf16
		 * values (same bits; 2.5-4x the float kernel's rows per second at 4 rows); a tile
		 * with a weight they cannot take, one row (where the float kernel is as fast) and
		 * everything else, by the float kernels */
		size_t t = 0;
		while (m >= 2 && t < nt) {
			const size_t d = srt_gemv_bf16_avx512bf16(w, x, m, ldx, y, ldy, n0 + 8 * t, nt - t);
			if (d == SIZE_MAX)
				break;
			t += d;
			if (t < nt)
				bf16_float_tiles(w, x, m, ldx, y, ldy, n0 + 8 * t++, 1);
		}
		if (t < nt)
			bf16_float_tiles(w, x, m, ldx, y, ldy, n0 + 8 * t, nt - t);
		if (n < n1)
			srt_gemmk_avx512(w, x, xs, m, ldx, y, ldy, n, n1);
		return true;
	}
	if (xs && m == 1 && (w->type == SRT_WT_FP8 || w->type == SRT_WT_FP4) &&
	    w->cols <= GEMV_KMAX && n1 - n0 >= 2 * NP) {
		const size_t nt = (n1 - n0) / (2 * NP), n = n0 + nt * 2 * NP;
		/* bf16 dot products where the CPU has them (same bits), else float32 */
		if (!srt_gemv_ref_avx512bf16(w, x, xs, y, n0, nt)) {
			if (w->type == SRT_WT_FP8)
				gemv_ref(w, SRT_WT_FP8, x, xs, y, n0, nt);
			else
				gemv_ref(w, SRT_WT_FP4, x, xs, y, n0, nt);
		}
		if (n < n1)
			srt_gemmk_avx512(w, x, xs, m, ldx, y, ldy, n, n1);
		return true;
	}
	if ((w->type == SRT_WT_F32 || w->type == SRT_WT_BF16) && w->cols % 8 != 0)
		return false; /* lane tails: the portable code handles them */
	return run_by_type(w, xs != NULL, x, xs, m, ldx, y, ldy, n0, n1);
}
