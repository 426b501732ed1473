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
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm_avx2_common.h"
#include "ops/gemm_isa.h"

#define KB 128      /* K block */
#define NT 4        /* output features per tile */
#define NV (KB / 8) /* 8-float vectors per block */

/* 8 E2M1 values of 4 packed bytes in k order. */
static inline __m256 fp4x8(const uint8_t *p)
{
	return fp4x8_shifts(p, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
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

SRT_GEMM_DEFINE_RUN_BY_TYPE(run_by_type, run)

/* ==== decode (M = 1): FP8 / FP4 (both modes) and EXACT bf16, full 8-row tiles =================
 *
 * The same operations as tile() for M = 1 (so the same bits), arranged for a GEMV as
 * gemm_avx512.c's gemv_ref: the activation vectors are built once per call for the whole K
 * (FP8: times 2^8 per block when exact; EXACT FP8: also times 2^8·s, once per 128-row scale
 * block, see gemv_exact_fp8), a tile is 8 output features whose 8 block (or
 * sub-block) results are combined by one transposed lane reduction, y of a tile stays in a
 * register across the K blocks and is stored once, and the tile after next is prefetched into
 * L2 as one sequential stream (one line per 64 bytes consumed). Where the products are exact
 * (x_exact_products) the multiply-adds are fused, which rounds the same real number once.
 *
 * FP4 and bf16 use a "pair" layout: one 8-float register holds lanes 0-3 of row a and lanes
 * 0-3 of row b (lo), another lanes 4-7 of both (hi); the activations are repeated in both
 * halves. Every decode step then stays inside 128-bit lanes: a [row a 16 bytes | row b 16
 * bytes] register is split into nibbles, looked up by vpshufb as the high and low bytes of the
 * bf16 value (E2M1 values are exact bf16), interleaved into bf16 words and unpacked against
 * zero into floats. Each lane still adds its products in k order. REFERENCE FP4 blocks whose
 * activations are small integers times a power of two sum exactly in integers instead
 * (fp4_int_block, below).
 */
/* K of the on-stack activation vectors (64 KiB, and 26 KiB of FP4 integer forms); larger K:
 * tile() */
#define GEMV_KMAX 8192

static bool cpu_fma(void)
{
	static _Atomic int have = -1;
	int h = atomic_load_explicit(&have, memory_order_relaxed);
	if (h < 0) {
		__builtin_cpu_init();
		h = __builtin_cpu_supports("fma") ? 1 : 0;
		atomic_store_explicit(&have, h, memory_order_relaxed);
	}
	return h == 1;
}

#define GEMV_TARGET __attribute__((target("avx2,f16c,fma")))

/* acc + x·w: one fused multiply-add when `fused` (exact products only). */
GEMV_TARGET static inline __attribute__((always_inline)) __m256 madd(__m256 acc, __m256 x, __m256 w,
								      bool fused)
{
	return fused ? _mm256_fmadd_ps(x, w, acc) : _mm256_add_ps(acc, _mm256_mul_ps(x, w));
}

/* The 8 row results of pair accumulators lo[p], hi[p] (rows p and p + 4), each combined as
 * ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)): lo + hi gives s_j = l_j + l_j+4 of both rows, two
 * rounds of hadd (s0+s1, s2+s3, then their sum) leave rows 0-3 in the low half, 4-7 in the
 * high half. */
GEMV_TARGET static inline __m256 reduce_pairs(const __m256 *lo, const __m256 *hi)
{
	const __m256 s0 = _mm256_add_ps(lo[0], hi[0]), s1 = _mm256_add_ps(lo[1], hi[1]);
	const __m256 s2 = _mm256_add_ps(lo[2], hi[2]), s3 = _mm256_add_ps(lo[3], hi[3]);
	return _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
}

/* The same for 8 row accumulators (row t's 8 lanes in acc[t]): rows t and t + 4 are first
 * gathered into one pair as [t lanes 0-3 | t+4 lanes 0-3] and [t 4-7 | t+4 4-7]. */
GEMV_TARGET static inline __m256 reduce_rows(const __m256 *acc)
{
	__m256 lo[4], hi[4];
	for (int t = 0; t < 4; t++) {
		lo[t] = _mm256_permute2f128_ps(acc[t], acc[t + 4], 0x20);
		hi[t] = _mm256_permute2f128_ps(acc[t], acc[t + 4], 0x31);
	}
	return reduce_pairs(lo, hi);
}

/* The 8 row results of FP4 accumulators in the even/odd pair layout (fp4_words): ev[p] holds
 * lanes 0, 2, 4, 6 of rows p (low half) and p + 4 (high half), od[p] lanes 1, 3, 5, 7. The
 * same adds as reduce_pairs, two pairs at a time: [l0 l2 | l0 l2] + [l4 l6 | l4 l6] of pairs
 * p and q gives s0 = l0+l4 and s2 = l2+l6 of both (s1, s3 likewise from od), adding those
 * gives (s0+s1) and (s2+s3), and one hadd of pairs 0-1 and 2-3 their sums in row order. */
GEMV_TARGET static inline __m256 reduce_eo(const __m256 *ev, const __m256 *od)
{
	__m256 u[2];
	for (int h = 0; h < 2; h++) {
		const __m256 ep = ev[2 * h], eq = ev[2 * h + 1], op = od[2 * h], oq = od[2 * h + 1];
		const __m256 e = _mm256_add_ps(_mm256_shuffle_ps(ep, eq, _MM_SHUFFLE(1, 0, 1, 0)),
					       _mm256_shuffle_ps(ep, eq, _MM_SHUFFLE(3, 2, 3, 2)));
		const __m256 o = _mm256_add_ps(_mm256_shuffle_ps(op, oq, _MM_SHUFFLE(1, 0, 1, 0)),
					       _mm256_shuffle_ps(op, oq, _MM_SHUFFLE(3, 2, 3, 2)));
		u[h] = _mm256_add_ps(e, o); /* [p: s0+s1, s2+s3, q: s0+s1, s2+s3] of both rows */
	}
	return _mm256_hadd_ps(u[0], u[1]);
}

/* Activation vectors of the even/odd pair layout: xe[g] = x[8g], x[8g+2], x[8g+4], x[8g+6]
 * twice, xo[g] the odd ones, for g < nv. */
GEMV_TARGET static void x_eo_vecs(const float *x, size_t nv, __m256 *xe, __m256 *xo)
{
	for (size_t g = 0; g < nv; g++) {
		const __m128 a = _mm_loadu_ps(x + 8 * g), b = _mm_loadu_ps(x + 8 * g + 4);
		const __m128 e = _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
		const __m128 o = _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
		xe[g] = _mm256_set_m128(e, e);
		xo[g] = _mm256_set_m128(o, o);
	}
}

/* Activation vectors of the pair layout: xl[g] = x[8g .. 8g+3] twice, xh[g] = x[8g+4 .. 8g+7]
 * twice, for g < nv. */
GEMV_TARGET static void x_pair_vecs(const float *x, size_t nv, __m256 *xl, __m256 *xh)
{
	for (size_t g = 0; g < nv; g++) {
		xl[g] = _mm256_broadcast_ps((const __m128 *)(const void *)(x + 8 * g));
		xh[g] = _mm256_broadcast_ps((const __m128 *)(const void *)(x + 8 * g + 4));
	}
}

/* The FP8 blocks' share of the prefetch of the tile after next (pf, NULL for none): two
 * lines per step of two vectors over the 8 rows, at rows 0 and 4. */
static inline __attribute__((always_inline)) void fp8_prefetch(const char *pf, size_t b, size_t v,
								 int t)
{
	if (pf && t % 4 == 0)
		_mm_prefetch(pf + b * (8 * KB) + (v / 2) * 128 + (size_t)(t / 4) * 64, _MM_HINT_T1);
}

/* One FP8 block of a tile: acc[t] += x·w over the block's 16 vectors of row t, in order;
 * x256: the activations carry 2^8 (else the weights do: times wf[t], or 2^8 when wf is NULL,
 * then times wf2[t] when wf2 is not NULL); fused: exact products. */
GEMV_TARGET static inline __attribute__((always_inline)) void
fp8_blk(const uint8_t *const *rows, size_t b, const __m256 *xb, __m256 *acc, bool x256,
	bool fused, const __m256 *wf, const __m256 *wf2, const char *pf)
{
	const __m256 f256 = _mm256_set1_ps(256.0f);
	const __m256i hmask = _mm256_set1_epi16((short)0xBF80);
	for (size_t v = 0; v < NV; v += 2)
		for (int t = 0; t < 8; t++) {
			fp8_prefetch(pf, b, v, t);
			const __m256i h = _mm256_and_si256(
				_mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(
							  (const __m128i *)(const void *)(rows[t] + b * KB + v * 8))),
						  7),
				hmask);
			__m256 w0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
			__m256 w1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
			if (!x256) {
				w0 = _mm256_mul_ps(w0, wf ? wf[t] : f256);
				w1 = _mm256_mul_ps(w1, wf ? wf[t] : f256);
			}
			if (!x256 && wf2) {
				w0 = _mm256_mul_ps(w0, wf2[t]);
				w1 = _mm256_mul_ps(w1, wf2[t]);
			}
			acc[t] = madd(acc[t], xb[v], w0, fused);
			acc[t] = madd(acc[t], xb[v + 1], w1, fused);
		}
}

/*
 * One FP8 block of a tile with the E4M3 codes turned into float bits by integer operations
 * instead of F16C: the code's 7 exponent/mantissa bits at bit 20 and its sign at bit 31 are
 * the float of the code value times 2^-120, subnormal codes included (an E4M3 subnormal
 * m·2^-9 becomes the float subnormal m·2^-129, the same factor as for the normals), NaN
 * codes ±480·2^-120 as fp8_blk's. The activations carry 2^118 (x_prep, exact when every
 * |x| < 2^10), so each product is the reference's exact product times 2^-2: x has at most 8
 * significant bits (x_exact_products) and the code 4, so the product is exact and at least
 * 2^-111, and every partial sum is a multiple of 2^-118 — a normal float or zero. Scaling
 * all the sums by 2^-2 then commutes with their roundings: the caller multiplies the lanes'
 * combination by 4 and gets the reference's bits. A row's 16 bytes are broadcast to both
 * 128-bit lanes, VPSHUFB moves bytes 0-3 | 4-7 (then 8-11 | 12-15) to the top of the dword
 * lanes, an arithmetic shift by 4 and a mask leave the sign and the 7 bits in place.
 */
GEMV_TARGET static inline __attribute__((always_inline)) void
fp8_blk_bits(const uint8_t *const *rows, size_t b, const __m256 *xb, __m256 *acc, const char *pf)
{
	const __m256i lo = _mm256_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3,
					    -1, -1, -1, 4, -1, -1, -1, 5, -1, -1, -1, 6, -1, -1, -1, 7);
	const __m256i hi = _mm256_add_epi32(lo, _mm256_set1_epi32(0x08000000));
	const __m256i keep = _mm256_set1_epi32((int32_t)0x87F00000u);
	for (size_t v = 0; v < NV; v += 2)
		for (int t = 0; t < 8; t++) {
			fp8_prefetch(pf, b, v, t);
			const __m256i c = _mm256_broadcastsi128_si256(
				_mm_loadu_si128((const __m128i *)(const void *)(rows[t] + b * KB + v * 8)));
			const __m256 w0 = _mm256_castsi256_ps(
				_mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(c, lo), 4), keep));
			const __m256 w1 = _mm256_castsi256_ps(
				_mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(c, hi), 4), keep));
			acc[t] = _mm256_fmadd_ps(xb[v], w0, acc[t]);
			acc[t] = _mm256_fmadd_ps(xb[v + 1], w1, acc[t]);
		}
}

/* The 4 pair vectors of 32 FP4 weights of rows a and b, as bf16 words: w[0] = k 0-7 of both
 * rows ([a | b]), w[1] = k 8-15, w[2] = 16-23, w[3] = 24-31. */
GEMV_TARGET static inline __attribute__((always_inline)) void
fp4_words(const uint8_t *a, const uint8_t *b, __m256i *w)
{
	const __m256i tab_hi = _mm256_setr_epi8(0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, (char)0x80,
						(char)0xBF, (char)0xBF, (char)0xBF, (char)0xC0, (char)0xC0,
						(char)0xC0, (char)0xC0, 0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40,
						0x40, (char)0x80, (char)0xBF, (char)0xBF, (char)0xBF, (char)0xC0,
						(char)0xC0, (char)0xC0, (char)0xC0);
	const __m256i tab_lo = _mm256_setr_epi8(0x00, 0x00, (char)0x80, (char)0xC0, 0x00, 0x40, (char)0x80,
						(char)0xC0, 0x00, 0x00, (char)0x80, (char)0xC0, 0x00, 0x40,
						(char)0x80, (char)0xC0, 0x00, 0x00, (char)0x80, (char)0xC0, 0x00,
						0x40, (char)0x80, (char)0xC0, 0x00, 0x00, (char)0x80, (char)0xC0,
						0x00, 0x40, (char)0x80, (char)0xC0);
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	const __m256i v = _mm256_inserti128_si256(
		_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
		_mm_loadu_si128((const __m128i *)(const void *)b), 1);
	const __m256i lo = _mm256_and_si256(v, m4);                        /* even k */
	const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4); /* odd k */
	const __m256i n0 = _mm256_unpacklo_epi8(lo, hi);                   /* k 0-15 */
	const __m256i n1 = _mm256_unpackhi_epi8(lo, hi);                   /* k 16-31 */
	const __m256i h0 = _mm256_shuffle_epi8(tab_hi, n0), l0 = _mm256_shuffle_epi8(tab_lo, n0);
	const __m256i h1 = _mm256_shuffle_epi8(tab_hi, n1), l1 = _mm256_shuffle_epi8(tab_lo, n1);
	w[0] = _mm256_unpacklo_epi8(l0, h0);
	w[1] = _mm256_unpackhi_epi8(l0, h0);
	w[2] = _mm256_unpacklo_epi8(l1, h1);
	w[3] = _mm256_unpackhi_epi8(l1, h1);
}

/*
 * REFERENCE FP4 by integer dot products (gemm_avx512_bf16.c's VPDPBUSD path, here by
 * vpmaddubsw + vpmaddwd). Where a sub-block's 32 activations are integers X times one power of
 * two 2^e with |X| < 2^14, every product x·w is an integer multiple of 2^(e-1) (the E2M1 values
 * are halves) and every partial sum of the sub-block is below 32·6·2^14·2^e < 2^24·2^(e-1):
 * gemm.h's float32 sums are all exact, whatever their order, and equal the integer sum
 * (Σ X·2w)·2^(e-1). e is the exponent of the largest |x| minus 13; a sub-block fits when
 * (float)X·2^e gives every x back (so a tiny x that would round to X = 0 does not fit) and
 * -100 <= e <= 90 (2^e, 2^-e and 2^(e-1) normal, every nonzero product and sum at least
 * 2^-101, all below 2^112); all zeros (either sign) are X = 0 at e = 0. A zero sum is +0 both
 * ways (gemm.h's lanes start at +0). A 128 block takes this path only when its 4 sub-blocks
 * fit, decided per block once per call (fp4_int_block); other blocks keep the float code.
 *
 * In the pair layout of fp4_words ([row a 16 bytes | row b 16 bytes], byte β holds k = 2β
 * in the low nibble, 2β + 1 in the high one) one vpshufb per nibble half gives the weights as
 * unsigned bytes 2w + 12 (0..24); the activations are signed bytes Xh = X >> 7 (-128..127)
 * and Xl = X & 127 (X = 128·Xh + Xl), of the even k and of the odd k, the same 16 bytes in
 * both 128-bit lanes. vpmaddubsw sums two byte products into a word (|.| <= 2·24·128 =
 * 6144), the even and odd ones are added (|.| <= 12288: no saturation anywhere), vpmaddwd by
 * 128 (Xh) and by 1 (Xl) sums word pairs into dwords, so each 128-bit lane (one row) holds 4
 * dwords that add up to Σ X·(2w + 12), |.| < 2^24; 12·ΣX, made once per call, comes off
 * after the row sums. Converting to float and multiplying by 2^(e-1) is then exact, and the
 * scales go on as in the float path (d·sa, then times sb, in gemm.h's order; no FMA).
 *
 * A block whose sub-blocks do not all fit but all pass fp4_sub_exact (integers in units of
 * their finest bit, |X| < 2^21, Σ|X|·12 < 2^24: gemm.h's sums exact again) takes three bytes
 * instead: Xh = X >> 14 (-128..127), Xm = (X >> 7) & 127, Xl = X & 127, the word sums of Xh
 * times 16384 by vpmaddwd (|.| <= 2·12288·16384 < 2^31), of Xm times 128, of Xl times 1; the
 * row sums stay below Σ|X|·24 < 2^26 and Σ X·2w below 2^24, so the rest is as above.
 */
struct fp4_xi {
	/* sub-block s: bytes of even k, of odd k, for each part from the highest (two parts: Xh,
	 * Xl; three: Xh, Xm, Xl) */
	_Alignas(32) int8_t x[4][6][16];
	int32_t corr[4];                 /* 12·ΣX of sub-block s */
	float f[4];                      /* 2^(e_s - 1) */
};

/* The 32 X of one sub-block as nparts signed bytes each (fp4_xi's layout: [even k | odd k]
 * per part) into x[0 .. 2·nparts), and 12·ΣX. The bytes of 32 X, packed in k order
 * (packssdw and packsswb interleave 4-k groups of the two 128-bit lanes: vpermd undoes that),
 * are split into even and odd k by one vpshufb per lane and one vpermq. */
GEMV_TARGET static int32_t fp4_x_parts(const __m256i *X, int nparts, int8_t (*x)[16])
{
	const __m256i ord = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	const __m256i eo = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
					    0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
	const __m256i m127 = _mm256_set1_epi32(127);
	for (int j = 0; j < nparts; j++) {
		/* part j of each X, from the highest: X >> 7·(nparts - 1) (arithmetic), then the
		 * 7-bit groups below it; each fits a signed byte */
		const int sh = 7 * (nparts - 1 - j);
		__m256i q[4];
		for (int i = 0; i < 4; i++) {
			const __m256i v = _mm256_srai_epi32(X[i], sh);
			q[i] = j == 0 ? v : _mm256_and_si256(v, m127);
		}
		const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
							 _mm256_packs_epi32(q[2], q[3]));
		const __m256i kb = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(bytes, ord), eo);
		_mm256_store_si256((__m256i *)(void *)x[2 * j],
				   _mm256_permute4x64_epi64(kb, _MM_SHUFFLE(3, 1, 2, 0)));
	}
	return 12 * hsum8_epi32(_mm256_add_epi32(_mm256_add_epi32(X[0], X[1]),
						 _mm256_add_epi32(X[2], X[3])));
}

/* Block x (128 activations) as struct fp4_xi: 2 when every sub-block fits (fp4_sub_fit:
 * two bytes of X), else 3 when every sub-block passes fp4_sub_exact (three bytes), else 0
 * (the float code). */
GEMV_TARGET static int fp4_int_block(const float *x, struct fp4_xi *o)
{
	__m256i X[4][4];
	int e[4], parts = 2;
	for (int s = 0; s < 4 && parts == 2; s++)
		if (!fp4_sub_fit(x + 32 * s, X[s], &e[s]))
			parts = 3;
	for (int s = 0; s < 4 && parts == 3; s++)
		if (!fp4_sub_exact(x + 32 * s, X[s], &e[s]))
			return 0;
	for (int s = 0; s < 4; s++) {
		o->corr[s] = fp4_x_parts(X[s], parts, o->x[s]);
		o->f[s] = pow2f(e[s] - 1);
	}
	return parts;
}

/* Sub-block s of K block b of a tile whose block is in integer form (xi, in `parts` bytes, a
 * compile-time 2 or 3): the 8 row sums in row order, the bits fp4_sub_float gives. */
GEMV_TARGET static inline __attribute__((always_inline)) __m256
fp4_sub_int(const uint8_t *const *rows, size_t b, int s, const struct fp4_xi *xi, int parts)
{
	/* 2·E2M1 + 12 of each nibble */
	const __m256i tu = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
					    12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	/* each part's bytes of even k, of odd k: the same 16 bytes in both lanes */
	__m256i xv[6];
	for (int j = 0; j < 2 * parts; j++)
		xv[j] = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(const void *)xi->x[s][j]));
	const size_t o = b * 64 + (size_t)s * 16;
	__m256i acc[4];
	for (int p = 0; p < 4; p++) {
		const __m256i v = _mm256_inserti128_si256(
			_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(rows[p] + o))),
			_mm_loadu_si128((const __m128i *)(const void *)(rows[p + 4] + o)), 1);
		const __m256i wa = _mm256_shuffle_epi8(tu, _mm256_and_si256(v, m4)); /* even k */
		const __m256i wb = _mm256_shuffle_epi8(tu, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
		/* part j's word sums times 2^(7·(parts - 1 - j)), from the highest part */
		acc[p] = _mm256_setzero_si256();
		for (int j = 0; j < parts; j++) {
			const __m256i ws = _mm256_add_epi16(_mm256_maddubs_epi16(wa, xv[2 * j]),
							    _mm256_maddubs_epi16(wb, xv[2 * j + 1]));
			const __m256i m = _mm256_set1_epi16((short)(1 << (7 * (parts - 1 - j))));
			acc[p] = _mm256_add_epi32(acc[p], _mm256_madd_epi16(ws, m));
		}
	}
	/* pairs p = 0-3 (rows p | p + 4) -> [rows 0-3 | rows 4-7], less 12·ΣX, times 2^(e-1) */
	const __m256i sum = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0], acc[1]),
					      _mm256_hadd_epi32(acc[2], acc[3]));
	const __m256i d = _mm256_sub_epi32(sum, _mm256_set1_epi32(xi->corr[s]));
	return _mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(xi->f[s]));
}

/* Sub-block s of K block b of a tile by floats (fp4_words; activation vectors xe, xo of the
 * sub-block, x_eo_vecs): the 8 row sums by reduce_eo. fused: exact products. */
GEMV_TARGET static inline __attribute__((always_inline)) __m256
fp4_sub_float(const uint8_t *const *rows, size_t b, int s, const __m256 *xe, const __m256 *xo,
	      bool fused)
{
	const __m256i himask = _mm256_set1_epi32((int32_t)0xFFFF0000u);
	__m256 lo[4], hi[4];
	for (int p = 0; p < 4; p++) {
		__m256i wv[4];
		fp4_words(rows[p] + b * 64 + s * 16, rows[p + 4] + b * 64 + s * 16, wv);
		lo[p] = _mm256_setzero_ps();
		hi[p] = _mm256_setzero_ps();
		for (int q = 0; q < 4; q++) {
			/* dword = [k even | k odd] bf16: even by a shift, odd by a mask */
			const __m256 wl = _mm256_castsi256_ps(_mm256_slli_epi32(wv[q], 16));
			const __m256 wh = _mm256_castsi256_ps(_mm256_and_si256(wv[q], himask));
			lo[p] = madd(lo[p], xe[q], wl, fused);
			hi[p] = madd(hi[p], xo[q], wh, fused);
		}
	}
	return reduce_eo(lo, hi);
}

/* Rows [n0, n0 + 8·ntiles) of y = W·x (REFERENCE, FP8 or FP4, one row of prepared
 * activations). */
GEMV_TARGET static inline __attribute__((always_inline)) void
gemv_ref(const struct srt_weight *w, int type, const float *xq, const float *xs, float *y,
	 size_t n0, size_t ntiles)
{
	const size_t K = w->cols, nb = K / KB;
	_Alignas(32) float xbuf[KB];
	__m256 xa[GEMV_KMAX / 8], xh[GEMV_KMAX / 8];
	struct fp4_xi xi[GEMV_KMAX / KB];
	bool x256[GEMV_KMAX / KB];  /* FP8: block b's activations carry the 2^8 */
	uint8_t isint[GEMV_KMAX / KB]; /* FP4: block b by integer sums in 2 or 3 bytes (xi[b]), 0:
				       * by floats */
	bool xfma[GEMV_KMAX / KB];  /* float block b's products are exact: fused multiply-adds */
	bool xbits[GEMV_KMAX / KB]; /* FP8: block b's activations carry 2^118 (fp8_blk_bits) */
	for (size_t b = 0; b < nb; b++) {
		x256[b] = xbits[b] = false;
		isint[b] = 0;
		if (type == SRT_WT_FP8) {
			const bool exact = x_exact_products(xq + b * KB);
			xbits[b] = exact && x_prep(xq + b * KB, NV, true, 0x1p118f, true, xbuf);
			x256[b] = !xbits[b] && x_prep(xq + b * KB, NV, true, 256.0f, true, xbuf);
			if (!xbits[b] && !x256[b])
				x_prep(xq + b * KB, NV, false, 1.0f, false, xbuf);
			for (size_t v = 0; v < NV; v++)
				xa[b * NV + v] = _mm256_load_ps(xbuf + v * 8);
			xfma[b] = x256[b] && exact;
		} else {
			isint[b] = (uint8_t)fp4_int_block(xq + b * KB, &xi[b]);
			if (!isint[b])
				x_eo_vecs(xq + b * KB, NV, xa + b * NV, xh + b * NV);
			xfma[b] = !isint[b] && x_exact_products(xq + b * KB);
		}
	}
	const size_t rowbytes = type == SRT_WT_FP8 ? K : K / 2;
	gemv_head_prefetch(w->data, rowbytes, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const char *pf = tt + 2 < ntiles ? (const char *)w->data + (n + 16) * rowbytes : NULL;
		const uint8_t *rows[8];
		for (int t = 0; t < 8; t++)
			rows[t] = (const uint8_t *)w->data + (n + (size_t)t) * rowbytes;
		__m256 yacc = _mm256_setzero_ps();
		if (type == SRT_WT_FP8) {
			size_t srow[8]; /* the scale block row of each of the 8 rows */
			for (int t = 0; t < 8; t++)
				srow[t] = ((n + (size_t)t) / KB) * nb;
			for (size_t b = 0; b < nb; b++) {
				__m256 acc[8];
				for (int t = 0; t < 8; t++)
					acc[t] = _mm256_setzero_ps();
				const __m256 *xb = xa + b * NV;
				const __m256 f = fp8_tile_factors(w->scales, srow, b, xs[b]);
				if (xbits[b]) {
					fp8_blk_bits(rows, b, xb, acc, pf);
					yacc = _mm256_add_ps(
						yacc, _mm256_mul_ps(_mm256_mul_ps(reduce_rows(acc), _mm256_set1_ps(4.0f)), f));
					continue;
				}
				if (xfma[b])
					fp8_blk(rows, b, xb, acc, true, true, NULL, NULL, pf);
				else if (x256[b])
					fp8_blk(rows, b, xb, acc, true, false, NULL, NULL, pf);
				else
					fp8_blk(rows, b, xb, acc, false, false, NULL, NULL, pf);
				yacc = _mm256_add_ps(yacc, _mm256_mul_ps(reduce_rows(acc), f));
			}
		} else {
			const uint8_t *sc[8];
			for (int t = 0; t < 8; t++)
				sc[t] = w->scales + (n + (size_t)t) * (K / 32);
			for (size_t b = 0; b < nb; b++) {
				const __m256i e4 = fp4_tile_scale_codes(sc, b);
				const __m256 sa = _mm256_set1_ps(xs[b]);
				const bool plain = e8m0_codes_plain(e4);
				/* the 4 sub-block sums first, then their terms added to y in order:
				 * the sums do not wait on y's chain */
				__m256 d[4];
				for (int sub = 0; sub < 4; sub++) {
					const size_t g0 = b * NV + (size_t)sub * 4;
					if (pf) /* 8 x 16 bytes a sub-block */
						for (int l = 0; l < 2; l++)
							_mm_prefetch(pf + b * (4 * KB) + (size_t)sub * 128 +
									     (size_t)l * 64, _MM_HINT_T1);
					if (isint[b] == 2)
						d[sub] = fp4_sub_int(rows, b, sub, &xi[b], 2);
					else if (isint[b] == 3)
						d[sub] = fp4_sub_int(rows, b, sub, &xi[b], 3);
					else if (xfma[b])
						d[sub] = fp4_sub_float(rows, b, sub, xa + g0, xh + g0, true);
					else
						d[sub] = fp4_sub_float(rows, b, sub, xa + g0, xh + g0, false);
				}
				for (int sub = 0; sub < 4; sub++) {
					const __m256 da = _mm256_mul_ps(d[sub], sa);
					const __m256 sb = fp4_sub_scales(e4, sub, plain);
					yacc = _mm256_add_ps(yacc, _mm256_mul_ps(da, sb));
				}
			}
		}
		_mm256_storeu_ps(y + n, yacc);
	}
}

/* One step of the bf16 GEMVs: 16 weights of rows a and b as the pair vectors of k 0-3 / 4-7
 * (wl[0], wh[0]) and k 8-11 / 12-15 (wl[1], wh[1]), [a | b] in float32: vperm2i128 into
 * [a k 0-7 | b k 0-7] and [a 8-15 | b 8-15], unpacked against zero. */
GEMV_TARGET static inline __attribute__((always_inline)) void
bf16_pair_step(const uint16_t *a, const uint16_t *b, __m256 *wl, __m256 *wh)
{
	const __m256i zero = _mm256_setzero_si256();
	const __m256i ra = _mm256_loadu_si256((const __m256i *)(const void *)a);
	const __m256i rb = _mm256_loadu_si256((const __m256i *)(const void *)b);
	const __m256i pw[2] = {_mm256_permute2x128_si256(ra, rb, 0x20),
			       _mm256_permute2x128_si256(ra, rb, 0x31)};
	for (int q = 0; q < 2; q++) {
		wl[q] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, pw[q]));
		wh[q] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, pw[q]));
	}
}

/* Rows [n0, n0 + 8·ntiles) of y = W·x, EXACT mode, bf16 weights, one row of activations, K a
 * multiple of 128 (the pair layout above: 32 bytes of each row of a pair, vperm2i128 into
 * [a k 0-7 | b k 0-7] and [a 8-15 | b 8-15], unpacked against zero into floats). */
GEMV_TARGET static void gemv_bf16(const struct srt_weight *w, const float *x, float *y, size_t n0,
				  size_t ntiles)
{
	const size_t K = w->cols, nb = K / KB;
	__m256 xa[GEMV_KMAX / 8], xh[GEMV_KMAX / 8];
	x_pair_vecs(x, K / 8, xa, xh);
	gemv_head_prefetch(w->data, 2 * K, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const uint16_t *rows[8];
		const char *pf = bf16_tile_rows(w->data, K, n, tt, ntiles, rows);
		__m256 yacc = _mm256_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			__m256 lo[4], hi[4];
			for (int p = 0; p < 4; p++)
				lo[p] = hi[p] = _mm256_setzero_ps();
			for (size_t v = 0; v < NV; v += 2) {
				if (pf) /* 256 bytes a step */
					for (int l = 0; l < 4; l++)
						_mm_prefetch(pf + b * (16 * KB) + (v / 2) * 256 + (size_t)l * 64,
							     _MM_HINT_T1);
				for (int p = 0; p < 4; p++) {
					__m256 wl[2], wh[2];
					bf16_pair_step(rows[p] + b * KB + v * 8, rows[p + 4] + b * KB + v * 8, wl, wh);
					for (int q = 0; q < 2; q++) {
						const size_t g = b * NV + v + (size_t)q;
						lo[p] = _mm256_add_ps(lo[p], _mm256_mul_ps(xa[g], wl[q]));
						hi[p] = _mm256_add_ps(hi[p], _mm256_mul_ps(xh[g], wh[q]));
					}
				}
			}
			yacc = _mm256_add_ps(yacc, reduce_pairs(lo, hi));
		}
		_mm256_storeu_ps(y + n, yacc);
	}
}

/* gemv_bf16 for M = 2..4 rows of activations (stride ldx): each row's operations as
 * gemv_bf16's (same bits), each pair of weight rows unpacked once for all M rows. Pair by
 * pair, so that the 2·M accumulators fit the 16 registers; the activations are broadcast
 * from x where they are used (any K). */
GEMV_TARGET static inline __attribute__((always_inline)) void
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
			__m256 lo[4][4], hi[4][4];
			for (int p = 0; p < 4; p++) {
				__m256 l[4], h[4];
				for (int r = 0; r < M; r++)
					l[r] = h[r] = _mm256_setzero_ps();
				for (size_t v = 0; v < NV; v += 2) {
					if (pf && p == 0) /* 256 bytes a step, as gemv_bf16 */
						for (int q = 0; q < 4; q++)
							_mm_prefetch(pf + b * (16 * KB) + (v / 2) * 256 + (size_t)q * 64,
								     _MM_HINT_T1);
					__m256 wl[2], wh[2];
					bf16_pair_step(rows[p] + b * KB + v * 8, rows[p + 4] + b * KB + v * 8, wl, wh);
					for (int q = 0; q < 2; q++) {
						const size_t k = b * KB + (v + (size_t)q) * 8;
						for (int r = 0; r < M; r++) {
							const float *xr = x + (size_t)r * ldx + k;
							l[r] = _mm256_add_ps(l[r], _mm256_mul_ps(_mm256_broadcast_ps(
								(const __m128 *)(const void *)xr), wl[q]));
							h[r] = _mm256_add_ps(h[r], _mm256_mul_ps(_mm256_broadcast_ps(
								(const __m128 *)(const void *)(xr + 4)), wh[q]));
						}
					}
				}
				for (int r = 0; r < M; r++) {
					lo[r][p] = l[r];
					hi[r][p] = h[r];
				}
			}
			for (int r = 0; r < M; r++)
				yacc[r] = _mm256_add_ps(yacc[r], reduce_pairs(lo[r], hi[r]));
		}
		for (int r = 0; r < M; r++)
			_mm256_storeu_ps(y + (size_t)r * ldy + n, yacc[r]);
	}
}

GEMV_TARGET static void gemv_bf16_2(const struct srt_weight *w, const float *x, size_t ldx,
				    float *y, size_t ldy, size_t n0, size_t ntiles)
{
	gemv_bf16_rows(w, x, ldx, y, ldy, n0, ntiles, 2);
}

GEMV_TARGET static void gemv_bf16_3(const struct srt_weight *w, const float *x, size_t ldx,
				    float *y, size_t ldy, size_t n0, size_t ntiles)
{
	gemv_bf16_rows(w, x, ldx, y, ldy, n0, ntiles, 3);
}

GEMV_TARGET static void gemv_bf16_4(const struct srt_weight *w, const float *x, size_t ldx,
				    float *y, size_t ldy, size_t n0, size_t ntiles)
{
	gemv_bf16_rows(w, x, ldx, y, ldy, n0, ntiles, 4);
}

/* Rows [n0, n0 + 8·ntiles) of y = W·x, EXACT mode, FP8 weights, one row of activations, K a
 * multiple of 128: tile()'s operations for M = 1 (same bits), arranged as gemv_ref. A tile
 * whose 8 rows lie in one 128-row scale block has one scale code e per K block; when 10 <= e
 * <= 246 and x·2^8·s is exact for the whole block, the multiplier is folded onto the
 * activations (file header), which are prepared once per 128-row scale block for the whole K.
 * Otherwise the weights carry it: times 2^8·s_t per row, or (times 2^8) times s_t when 2^8·s_t
 * is not finite (e > 246), exactly as tile(). No fused multiply-adds: x is any float. */
GEMV_TARGET static void gemv_exact_fp8(const struct srt_weight *w, const float *x, float *y,
				       size_t n0, size_t ntiles)
{
	const size_t K = w->cols, nb = K / KB;
	_Alignas(32) float xbuf[KB];
	__m256 xr[GEMV_KMAX / 8];  /* the activations as they are */
	__m256 xf[GEMV_KMAX / 8];  /* times 2^8·s of scale block row frow, where fold[b] */
	bool fold[GEMV_KMAX / KB];
	size_t frow = SIZE_MAX;
	for (size_t g = 0; g < K / 8; g++)
		xr[g] = _mm256_loadu_ps(x + 8 * g);
	gemv_head_prefetch(w->data, K, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const char *pf = tt + 2 < ntiles ? (const char *)w->data + (n + 16) * K : NULL;
		const uint8_t *rows[8];
		for (int t = 0; t < 8; t++)
			rows[t] = (const uint8_t *)w->data + (n + (size_t)t) * K;
		const bool one = n / KB == (n + 7) / KB; /* one scale block row for the tile */
		if (one && n / KB != frow) {
			frow = n / KB;
			for (size_t b = 0; b < nb; b++) {
				const uint8_t e = w->scales[frow * nb + b];
				fold[b] = e >= 10 && e <= 246 &&
					  x_prep(x + b * KB, NV, true, 256.0f * srt_e8m0_to_f32(e), true, xbuf);
				if (fold[b])
					for (size_t v = 0; v < NV; v++)
						xf[b * NV + v] = _mm256_load_ps(xbuf + v * 8);
			}
		}
		__m256 yacc = _mm256_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			__m256 acc[8];
			for (int t = 0; t < 8; t++)
				acc[t] = _mm256_setzero_ps();
			if (one && fold[b]) {
				fp8_blk(rows, b, xf + b * NV, acc, true, false, NULL, NULL, pf);
			} else {
				__m256 f1[8], f2[8];
				bool two = false;
				for (int t = 0; t < 8; t++) {
					const uint8_t e = w->scales[((n + (size_t)t) / KB) * nb + b];
					const float s = srt_e8m0_to_f32(e);
					f1[t] = _mm256_set1_ps(e <= 246 ? 256.0f * s : 256.0f);
					f2[t] = _mm256_set1_ps(e <= 246 ? 1.0f : s);
					two = two || e > 246;
				}
				if (two)
					fp8_blk(rows, b, xr + b * NV, acc, false, false, f1, f2, pf);
				else
					fp8_blk(rows, b, xr + b * NV, acc, false, false, f1, NULL, pf);
			}
			yacc = _mm256_add_ps(yacc, reduce_rows(acc));
		}
		_mm256_storeu_ps(y + n, yacc);
	}
}

/* Rows [n0, n0 + 8·ntiles) of y = W·x, EXACT mode, FP4 weights, one row of activations, K a
 * multiple of 128: the even/odd pair layout of gemv_ref, each weight times its row's scale of
 * its 32 sub-block (the float decode_row gives), the 8 lanes of a row accumulating over the
 * whole 128 block in k order, then reduce_eo. No fused multiply-adds: x is any float. */
GEMV_TARGET static void gemv_exact_fp4(const struct srt_weight *w, const float *x, float *y,
				       size_t n0, size_t ntiles)
{
	const size_t K = w->cols, nb = K / KB;
	__m256 xe[GEMV_KMAX / 8], xo[GEMV_KMAX / 8];
	x_eo_vecs(x, K / 8, xe, xo);
	const __m256i himask = _mm256_set1_epi32((int32_t)0xFFFF0000u);
	gemv_head_prefetch(w->data, K / 2, n0, ntiles);
	for (size_t tt = 0; tt < ntiles; tt++) {
		const size_t n = n0 + 8 * tt;
		const char *pf = tt + 2 < ntiles ? (const char *)w->data + (n + 16) * (K / 2) : NULL;
		const uint8_t *rows[8], *sc[8];
		for (int t = 0; t < 8; t++) {
			rows[t] = (const uint8_t *)w->data + (n + (size_t)t) * (K / 2);
			sc[t] = w->scales + (n + (size_t)t) * (K / 32);
		}
		__m256 yacc = _mm256_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			const __m256i e4 = fp4_tile_scale_codes(sc, b);
			const bool plain = e8m0_codes_plain(e4);
			__m256 lo[4], hi[4];
			for (int p = 0; p < 4; p++)
				lo[p] = hi[p] = _mm256_setzero_ps();
			for (int sub = 0; sub < 4; sub++) {
				const size_t g0 = b * NV + (size_t)sub * 4;
				if (pf)
					for (int l = 0; l < 2; l++)
						_mm_prefetch(pf + b * (4 * KB) + (size_t)sub * 128 + (size_t)l * 64,
							     _MM_HINT_T1);
				/* lane t: row t's scale of this sub-block */
				const __m256 s8 = fp4_sub_scales(e4, sub, plain);
				for (int p = 0; p < 4; p++) {
					/* [row p x4 | row p + 4 x4] */
					const __m256 sp = _mm256_permutevar8x32_ps(
						s8, _mm256_setr_epi32(p, p, p, p, p + 4, p + 4, p + 4, p + 4));
					__m256i wv[4];
					fp4_words(rows[p] + b * 64 + sub * 16, rows[p + 4] + b * 64 + sub * 16, wv);
					for (int q = 0; q < 4; q++) {
						const __m256 wl = _mm256_mul_ps(
							_mm256_castsi256_ps(_mm256_slli_epi32(wv[q], 16)), sp);
						const __m256 wh = _mm256_mul_ps(
							_mm256_castsi256_ps(_mm256_and_si256(wv[q], himask)), sp);
						lo[p] = _mm256_add_ps(lo[p], _mm256_mul_ps(xe[g0 + q], wl));
						hi[p] = _mm256_add_ps(hi[p], _mm256_mul_ps(xo[g0 + q], wh));
					}
				}
			}
			yacc = _mm256_add_ps(yacc, reduce_eo(lo, hi));
		}
		_mm256_storeu_ps(y + n, yacc);
	}
}

GEMV_TARGET static void gemv_ref_fp8(const struct srt_weight *w, const float *xq, const float *xs,
				     float *y, size_t n0, size_t ntiles)
{
	gemv_ref(w, SRT_WT_FP8, xq, xs, y, n0, ntiles);
}

GEMV_TARGET static void gemv_ref_fp4(const struct srt_weight *w, const float *xq, const float *xs,
				     float *y, size_t n0, size_t ntiles)
{
	gemv_ref(w, SRT_WT_FP4, xq, xs, y, n0, ntiles);
}

bool srt_gemmk_avx2(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	/* 2-7 rows of bf16 EXACT (a decode step's compressor group): 4 rows a pass */
	if (!xs && m >= 2 && m <= 7 && w->type == SRT_WT_BF16 && w->cols % KB == 0 &&
	    n1 - n0 >= 8 && cpu_fma()) {
		const size_t nt = (n1 - n0) / 8, n = n0 + nt * 8;
		for (size_t r = 0; r < m; r += 4) {
			const float *xr = x + r * ldx;
			float *yr = y + r * ldy;
			switch (m - r < 4 ? m - r : 4) {
			case 1:
				srt_gemmk_avx2(w, xr, NULL, 1, ldx, yr, ldy, n0, n);
				break;
			case 2:
				gemv_bf16_2(w, xr, ldx, yr, ldy, n0, nt);
				break;
			case 3:
				gemv_bf16_3(w, xr, ldx, yr, ldy, n0, nt);
				break;
			default:
				gemv_bf16_4(w, xr, ldx, yr, ldy, n0, nt);
				break;
			}
		}
		if (n < n1)
			srt_gemmk_avx2(w, x, xs, m, ldx, y, ldy, n, n1);
		return true;
	}
	if (m == 1 && w->cols % KB == 0 && w->cols <= GEMV_KMAX && n1 - n0 >= 8 && cpu_fma() &&
	    ((!xs && w->type == SRT_WT_BF16) || w->type == SRT_WT_FP8 || w->type == SRT_WT_FP4)) {
		const size_t nt = (n1 - n0) / 8, n = n0 + nt * 8;
		if (w->type == SRT_WT_BF16)
			gemv_bf16(w, x, y, n0, nt);
		else if (w->type == SRT_WT_FP8 && !xs)
			gemv_exact_fp8(w, x, y, n0, nt);
		else if (w->type == SRT_WT_FP4 && !xs)
			gemv_exact_fp4(w, x, y, n0, nt);
		else if (w->type == SRT_WT_FP8)
			gemv_ref_fp8(w, x, xs, y, n0, nt);
		else
			gemv_ref_fp4(w, x, xs, y, n0, nt);
		if (n < n1)
			srt_gemmk_avx2(w, x, xs, m, ldx, y, ldy, n, n1);
		return true;
	}
	if ((w->type == SRT_WT_F32 || w->type == SRT_WT_BF16) && w->cols % 8 != 0)
		return false; /* lane tails: the portable code handles them */
	return run_by_type(w, xs != NULL, x, xs, m, ldx, y, ldy, n0, n1);
}

/* One 128 block of srt_gemm_quant_row, as srt_gemm_quant_blk_avx512 (same floats): amax,
 * the power-of-two scale, then each x / scale clamped to 448 and rounded to E4M3 — normals by
 * adding half an ulp of a 3-bit mantissa (ties to even) and truncating, subnormals (below
 * 2^-6) to the nearest multiple of 2^-9. False for a block with NaN or inf. */
bool srt_gemm_quant_blk_avx2(const float *x, float *xq, float *xs)
{
	const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF);
	__m256 amax = _mm256_setzero_ps();
	__m256 bad = _mm256_setzero_ps();
	for (int i = 0; i < KB; i += 8) {
		const __m256 v = _mm256_loadu_ps(x + i);
		const __m256 a = _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(v), absm));
		bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, _mm256_set1_ps(__builtin_inff()), _CMP_NLT_UQ));
		amax = _mm256_max_ps(amax, a);
	}
	if (_mm256_movemask_ps(bad))
		return false;
	__m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
	m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
	m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
	float m = _mm_cvtss_f32(m4);
	m = m > 1e-4f ? m : 1e-4f; /* SRT_QUANT_FP8_AMAX_FLOOR */
	const float sc = srt_pow2_ceil(m * (float)(1.0 / 448.0));
	const __m256 vs = _mm256_set1_ps(sc);
	for (int i = 0; i < KB; i += 8) {
		const __m256i q = _mm256_castps_si256(_mm256_div_ps(_mm256_loadu_ps(x + i), vs));
		const __m256i sign = _mm256_andnot_si256(absm, q);
		const __m256 a = _mm256_min_ps(_mm256_castsi256_ps(_mm256_and_si256(q, absm)),
					       _mm256_set1_ps(448.0f));
		__m256i u = _mm256_castps_si256(a);
		u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF),
							 _mm256_and_si256(_mm256_srli_epi32(u, 20),
									  _mm256_set1_epi32(1))));
		u = _mm256_and_si256(u, _mm256_set1_epi32((int)0xFFF00000u));
		const __m256 sub = _mm256_mul_ps(
			_mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(512.0f)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
			_mm256_set1_ps(1.0f / 512.0f));
		const __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ);
		const __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(u), sub, small);
		_mm256_storeu_ps(xq + i, _mm256_or_ps(r, _mm256_castsi256_ps(sign)));
	}
	*xs = sc;
	return true;
}
