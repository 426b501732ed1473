/*
 * core/ops/gemm_avx2.c — GEMM kernels for x86-64 AVX2 + F16C (compiled with -mavx2 -mf16c,
 * never -mfma). Called only after gemm.c saw both features in cpuid.
 *
 * Bitwise contract (gemm.h): each y element is built exactly as gemm.c's portable code
 * builds it: per 128 K block, 8 lanes (k mod 8) accumulated in k order, product then add
 * (srt_ops builds with -ffp-contract=off), lanes combined as ((l0+l4)+(l1+l5))+((l2+l6)+
 * (l3+l7)), the block result scaled and added to y in the portable code's order. One
 * 8-float register is one output feature's 8 lanes; a tile of NT features runs NT
 * independent chains. M = 1 decodes each weight vector right before its product (fused: the
 * weight bytes are read once, nothing is stored); M > 1 decodes a block once into an L1
 * buffer and reuses it for every row of x.
 *
 * Decoders, 8 weights per vector:
 *  - bf16: zero-extend to 32 bits, shift into the high half.
 *  - E4M3: the code's 7 exponent/mantissa bits placed in an IEEE half (bias 15 instead of 7,
 *    sign on bit 15) and converted by F16C: the code value times 2^-8, exact for every code
 *    (E4M3 subnormals are half subnormals, which the conversion makes normal floats: no
 *    float32 subnormal reaches a multiplier), NaN codes give ±480·2^-8 as fp8_fast does.
 *    The 2^8 goes with the scale: (v·2^8)·s is computed as v·(2^8·s) when 2^8·s is finite,
 *    the same real product rounded once, so the same bits. When exact, the multiplier moves
 *    onto the activations instead: x·(v·m) == (x·m)·v if v·m and x·m are both exact (the
 *    same real product, one rounding) — checked per block, else the weights carry it.
 *  - E2M1: the 8 nibbles of 4 bytes shifted into 8 lanes, the magnitude looked up in an
 *    8-entry float table by vpermps (which reads the low 3 bits), the sign bit or-ed in.
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm_isa.h"

#define KB 128      /* K block */
#define NT 4        /* output features per tile */
#define NV (KB / 8) /* 8-float vectors per block */

/* E4M3 codes as halves converted to float: the code value times 2^-8. */
static inline __m256 fp8x8_half(const uint8_t *p)
{
	__m128i b = _mm_loadl_epi64((const __m128i *)(const void *)p);
	__m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7),
				  _mm_set1_epi16((short)0xBF80));
	return _mm256_cvtph_ps(h);
}

static inline __m256 fp4x8(const uint8_t *p)
{
	int32_t u;
	memcpy(&u, p, sizeof u);
	const __m256i v = _mm256_set1_epi32(u);
	const __m256i idx = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
	const __m256i sgn = _mm256_and_si256(
		_mm256_sllv_epi32(v, _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0)),
		_mm256_set1_epi32((int32_t)0x80000000u));
	const __m256 mag = _mm256_permutevar8x32_ps(
		_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), idx);
	return _mm256_or_ps(mag, _mm256_castsi256_ps(sgn));
}

/* The weights of one block of a tile (NT rows). */
struct blk {
	const void *r[NT];        /* each row at the block's first k */
	__m256 f[NT][KB / 32];    /* the weight multiplier: per row (FP8), per row and 32 (FP4) */
	__m256 f2[NT];            /* FP8 second multiplier when `two` */
	bool two;                 /* FP8: 2^8·s not finite: (v·2^8)·s in two steps */
	uint8_t e8;               /* FP8: the tile's one scale code, 0 when rows differ */
};

/* Vector v (k = 8v .. 8v+7 of the block) of row t. With `wmul` (and `two`) exactly the
 * floats of gemm.c's decode_row; without, FP8 gives the code value · 2^-8 and FP4 the
 * unscaled code value. type, wmul and two are compile-time constants at every call. */
static inline __attribute__((always_inline)) __m256
row_w(const struct blk *bk, int type, int t, size_t v, bool wmul, bool two)
{
	__m256 x;
	switch (type) {
	case SRT_WT_F32:
		return _mm256_loadu_ps((const float *)bk->r[t] + v * 8);
	case SRT_WT_BF16:
		return _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128(
				(const __m128i *)(const void *)((const uint16_t *)bk->r[t] + v * 8))),
			16));
	case SRT_WT_FP8:
		x = fp8x8_half((const uint8_t *)bk->r[t] + v * 8);
		if (wmul)
			x = _mm256_mul_ps(x, bk->f[t][0]);
		if (wmul && two)
			x = _mm256_mul_ps(x, bk->f2[t]);
		return x;
	default:
		x = fp4x8((const uint8_t *)bk->r[t] + v * 4);
		if (wmul)
			x = _mm256_mul_ps(x, bk->f[t][v / 4]);
		return x;
	}
}

static inline __attribute__((always_inline)) void
blk_init(struct blk *bk, const struct srt_weight *w, int type, int nt, size_t n, size_t k0,
	 size_t len, bool scaled)
{
	const size_t K = w->cols;
	const size_t esz = type == SRT_WT_F32 ? 4 : type == SRT_WT_BF16 ? 2 : 1;
	bk->two = false;
	bk->e8 = 0;
	for (int t = 0; t < nt; t++)
		bk->r[t] = (const uint8_t *)w->data +
			   (type == SRT_WT_FP4 ? ((n + t) * K + k0) / 2 : ((n + t) * K + k0) * esz);
	if (type == SRT_WT_FP8) {
		const size_t nb = (K + KB - 1) / KB;
		bk->e8 = w->scales[(n / KB) * nb + k0 / KB];
		for (int t = 0; t < nt; t++) {
			const uint8_t e = w->scales[((n + t) / KB) * nb + k0 / KB];
			if (e != bk->e8)
				bk->e8 = 0;
			bk->f[t][0] = _mm256_set1_ps(256.0f);
			bk->f2[t] = _mm256_set1_ps(1.0f);
			if (scaled && e <= 246) {
				/* 2^8·s finite: one multiplication, same rounding (file header) */
				bk->f[t][0] = _mm256_set1_ps(256.0f * srt_e8m0_to_f32(e));
			} else if (scaled) {
				bk->f2[t] = _mm256_set1_ps(srt_e8m0_to_f32(e));
				bk->two = true;
			}
		}
	} else if (type == SRT_WT_FP4 && scaled) {
		for (int t = 0; t < nt; t++) {
			const uint8_t *sc = w->scales + (n + t) * (K / 32) + k0 / 32;
			for (size_t s = 0; s < len / 32; s++)
				bk->f[t][s] = _mm256_set1_ps(srt_e8m0_to_f32(sc[s]));
		}
	}
}

/* ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)) of the 8 lanes, as dot_blk combines them. */
static inline float comb8(__m256 acc)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
	__m128 h = _mm_hadd_ps(s, s); /* [s0+s1, s2+s3, ...] */
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* out[t] = the 8-lane dot of row t over vectors [v0, v0+nv) of the block with xb (the
 * block's activations, prepared), weights decoded on the fly (wbuf NULL) or read from wbuf.
 * type, nt and wmul are compile-time constants at every call. */
static inline __attribute__((always_inline)) void
row_dots(const float *xb, const struct blk *bk, const float *wbuf, int type, int nt,
	 bool wmul, size_t v0, size_t nv, float *out)
{
	__m256 acc[NT];
	for (int t = 0; t < nt; t++)
		acc[t] = _mm256_setzero_ps();
	for (size_t v = v0; v < v0 + nv; v++) {
		const __m256 xv = _mm256_load_ps(xb + v * 8);
		for (int t = 0; t < nt; t++) {
			const __m256 wv = wbuf ? _mm256_load_ps(wbuf + ((size_t)t * NV + v) * 8)
					       : row_w(bk, type, t, v, wmul, false);
			acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(xv, wv));
		}
	}
	for (int t = 0; t < nt; t++)
		out[t] = comb8(acc[t]);
}

/* xb = the block's activations, times f (a power of two) when `mul`. With `check`, returns
 * false unless every product is exact (x·f·(1/f) gives x back), so that a multiplier can
 * move from the weights onto the activations without changing a bit. */
static inline __attribute__((always_inline)) bool
x_prep(const float *xr, size_t nv, bool mul, float f, bool check, float *xb)
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
		_mm256_store_ps(xb + v * 8, x8);
	}
	return _mm256_movemask_ps(bad) == 0;
}

/* One tile: output features [n, n + nt). ref (REFERENCE mode), type and nt compile-time. */
static inline __attribute__((always_inline)) void
tile(const struct srt_weight *w, int type, bool ref, const float *x, const float *xs, size_t m,
     size_t ldx, float *y, size_t ldy, size_t n, int nt)
{
	_Alignas(32) float wbuf[NT * NV * 8];
	_Alignas(32) float xb[KB];
	struct blk bk;
	const size_t K = w->cols;
	const bool quant = type == SRT_WT_FP8 || type == SRT_WT_FP4;
	const size_t nb = (K + KB - 1) / KB;
	for (size_t i = 0; i < m; i++)
		for (int t = 0; t < nt; t++)
			y[i * ldy + n + t] = 0.0f;
	for (size_t b = 0; b < nb; b++) {
		const size_t k0 = b * KB, len = K - k0 < KB ? K - k0 : KB, nv = len / 8;
		float sb[NT][KB / 32];
		blk_init(&bk, w, type, nt, n, k0, len, !ref);
		/* M = 1: fused, unless an FP8 scale needs two multiplications (then buffered) */
		const bool fused = m == 1 && !bk.two;
		if (!fused)
			for (size_t v = 0; v < nv; v++)
				for (int t = 0; t < nt; t++)
					_mm256_store_ps(wbuf + ((size_t)t * NV + v) * 8,
							row_w(&bk, type, t, v, !(type == SRT_WT_FP4 && ref), bk.two));
		if (ref && quant) {
			for (int t = 0; t < nt; t++) {
				if (type == SRT_WT_FP8) {
					sb[t][0] = srt_e8m0_to_f32(w->scales[((n + t) / KB) * nb + b]);
				} else {
					const uint8_t *sc = w->scales + (n + t) * (K / 32) + b * (KB / 32);
					for (int s = 0; s < KB / 32; s++)
						sb[t][s] = srt_e8m0_to_f32(sc[s]);
				}
			}
		}
		for (size_t i = 0; i < m; i++) {
			const float *xr = x + i * ldx + k0;
			float *yr = y + i * ldy + n;
			float d[NT];
			if (!fused || type == SRT_WT_F32 || type == SRT_WT_BF16 ||
			    (type == SRT_WT_FP4 && ref)) {
				/* the reference's f32/bf16 case dequantizes the activations first
				 * (xq · xs, as gemm.c) */
				const bool scale_x = ref && !quant;
				x_prep(xr, nv, scale_x, scale_x ? xs[i * nb + b] : 1.0f, false, xb);
				if (fused)
					row_dots(xb, &bk, NULL, type, nt, false, 0, nv, d);
			} else if (type == SRT_WT_FP4) {
				x_prep(xr, nv, false, 1.0f, false, xb);
				row_dots(xb, &bk, NULL, type, nt, true, 0, nv, d);
			} else if (ref) {
				/* fused FP8 REFERENCE: x·(v·2^8) == (x·2^8)·v when x·2^8 is exact */
				if (x_prep(xr, nv, true, 256.0f, true, xb)) {
					row_dots(xb, &bk, NULL, type, nt, false, 0, nv, d);
				} else {
					x_prep(xr, nv, false, 1.0f, false, xb);
					row_dots(xb, &bk, NULL, type, nt, true, 0, nv, d);
				}
			} else {
				/* fused FP8 EXACT: x·(v·2^8·s) == (x·2^8·s)·v when the tile has one
				 * scale, v·2^8·s is exact for every code (10 <= e <= 246) and so is
				 * x·2^8·s */
				const bool fold = bk.e8 >= 10 && bk.e8 <= 246 &&
						  x_prep(xr, nv, true, 256.0f * srt_e8m0_to_f32(bk.e8), true, xb);
				if (fold) {
					row_dots(xb, &bk, NULL, type, nt, false, 0, nv, d);
				} else {
					x_prep(xr, nv, false, 1.0f, false, xb);
					row_dots(xb, &bk, NULL, type, nt, true, 0, nv, d);
				}
			}
			if (!ref || !quant) {
				if (!fused)
					row_dots(xb, &bk, wbuf, type, nt, true, 0, nv, d);
				for (int t = 0; t < nt; t++)
					yr[t] += d[t];
			} else if (type == SRT_WT_FP8) {
				const float sa = xs[i * nb + b];
				if (!fused)
					row_dots(xb, &bk, wbuf, type, nt, true, 0, NV, d);
				for (int t = 0; t < nt; t++)
					yr[t] += d[t] * (sa * sb[t][0]);
			} else {
				const float sa = xs[i * nb + b];
				for (size_t s = 0; s < KB / 32; s++) {
					row_dots(xb, &bk, fused ? NULL : wbuf, type, nt, false, s * 4, 4, d);
					for (int t = 0; t < nt; t++)
						yr[t] += d[t] * sa * sb[t][s];
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
	for (; n + NT <= n1; n += NT)
		tile(w, type, ref, x, xs, m, ldx, y, ldy, n, NT);
	for (; n < n1; n++)
		tile(w, type, ref, x, xs, m, ldx, y, ldy, n, 1);
}

bool srt_gemmk_avx2(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	switch (w->type) {
	case SRT_WT_F32:
		if (w->cols % 8 != 0)
			return false; /* lane tails: the portable code handles them */
		if (xs)
			run(w, SRT_WT_F32, true, x, xs, m, ldx, y, ldy, n0, n1);
		else
			run(w, SRT_WT_F32, false, x, xs, m, ldx, y, ldy, n0, n1);
		return true;
	case SRT_WT_BF16:
		if (w->cols % 8 != 0)
			return false;
		if (xs)
			run(w, SRT_WT_BF16, true, x, xs, m, ldx, y, ldy, n0, n1);
		else
			run(w, SRT_WT_BF16, false, x, xs, m, ldx, y, ldy, n0, n1);
		return true;
	case SRT_WT_FP8:
		if (xs)
			run(w, SRT_WT_FP8, true, x, xs, m, ldx, y, ldy, n0, n1);
		else
			run(w, SRT_WT_FP8, false, x, xs, m, ldx, y, ldy, n0, n1);
		return true;
	case SRT_WT_FP4:
		if (xs)
			run(w, SRT_WT_FP4, true, x, xs, m, ldx, y, ldy, n0, n1);
		else
			run(w, SRT_WT_FP4, false, x, xs, m, ldx, y, ldy, n0, n1);
		return true;
	}
	return false;
}
