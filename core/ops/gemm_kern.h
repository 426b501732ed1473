/*
 * core/ops/gemm_kern.h — the SIMD GEMM driver shared by gemm_avx2.c and gemm_avx512.c.
 *
 * Included once by each of them, after it has included <immintrin.h> and defined:
 *   GEMMK_NAME                    the entry point (see gemm_isa.h)
 *   dec_bf16(src, len, out)       bf16 bits -> float, len % 8 == 0
 *   dec_fp8(src, len, scaled, s, out)  E4M3 codes -> code values (times s when scaled),
 *                                 len == 128
 *   dec_fp4(src, len, sc, out)    packed E2M1 -> values (times the UE8M0 scale of each 32
 *                                 when sc != NULL), len % 32 == 0
 * Decoders must produce exactly the floats of gemm.c's decode_row (value for value, scale
 * applied by one float multiplication after the code value).
 *
 * Bitwise contract (see gemm.h): each y element is built exactly as gemm.c's portable code
 * builds it — per 128 K block, 8 lanes (k mod 8) accumulated in order with a product then an
 * add (no FMA; srt_ops builds with -ffp-contract=off), lanes combined as
 * ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)), then the block result scaled/added to y in the
 * portable code's order. Only the grouping of independent work (NT output features decoded
 * together, rows of x reusing them) differs.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/fp.h"
#include "ops/gemm_isa.h"

#define GK_KB 128 /* K block */
#define GK_NT 4   /* output features per tile: each decoded block is reused by every row */

/* ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)) of the 8 lanes, as dot_blk combines them. */
static inline float gk_comb8(__m256 acc)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
	__m128 h = _mm_hadd_ps(s, s); /* [s0+s1, s2+s3, ...] */
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* out[t] = dot_blk(x', wr[t] + off, len) for t < nt, where x' = x[off..] or, when scale_x,
 * x[off..] * xsc element by element (the reference's dequantized activation row). nt is a
 * compile-time constant at every call, so the t loops unroll into independent chains. */
static inline __attribute__((always_inline)) void
gk_dots(const float *x, const float *const *wr, size_t off, size_t len, int nt, bool scale_x,
	float xsc, float *out)
{
	__m256 acc[GK_NT];
	const __m256 vs = _mm256_set1_ps(xsc);
	for (int t = 0; t < nt; t++)
		acc[t] = _mm256_setzero_ps();
	for (size_t k = off; k < off + len; k += 8) {
		__m256 xv = _mm256_loadu_ps(x + k);
		if (scale_x)
			xv = _mm256_mul_ps(xv, vs);
		for (int t = 0; t < nt; t++)
			acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(xv, _mm256_loadu_ps(wr[t] + k)));
	}
	for (int t = 0; t < nt; t++)
		out[t] = gk_comb8(acc[t]);
}

/* Block b of row n as floats: a pointer into the weight for F32, else decoded into buf. */
static inline const float *gk_decode(const struct srt_weight *w, size_t n, size_t k0,
				     size_t len, bool scaled, float *buf)
{
	const size_t K = w->cols;
	switch (w->type) {
	case SRT_WT_F32:
		return (const float *)w->data + n * K + k0;
	case SRT_WT_BF16:
		dec_bf16((const uint16_t *)w->data + n * K + k0, len, buf);
		return buf;
	case SRT_WT_FP8: {
		float s = 0.0f;
		if (scaled)
			s = srt_e8m0_to_f32(
				w->scales[(n / GK_KB) * ((K + GK_KB - 1) / GK_KB) + k0 / GK_KB]);
		dec_fp8((const uint8_t *)w->data + n * K + k0, len, scaled, s, buf);
		return buf;
	}
	case SRT_WT_FP4:
		dec_fp4((const uint8_t *)w->data + (n * K + k0) / 2, len,
			scaled ? w->scales + n * (K / 32) + k0 / 32 : NULL, buf);
		return buf;
	}
	return buf;
}

/* One tile of nt (GK_NT or 1) output features starting at n, every row of x. */
static inline __attribute__((always_inline)) void
gk_tile(const struct srt_weight *w, const float *x, const float *xs, size_t m, size_t ldx,
	float *y, size_t ldy, size_t n, int nt)
{
	_Alignas(64) float wbuf[GK_NT][GK_KB];
	const size_t K = w->cols;
	const bool ref = xs != NULL;
	const bool quant = w->type == SRT_WT_FP8 || w->type == SRT_WT_FP4;
	const size_t nb = (K + GK_KB - 1) / GK_KB;
	for (size_t i = 0; i < m; i++)
		for (int t = 0; t < nt; t++)
			y[i * ldy + n + t] = 0.0f;
	for (size_t b = 0; b < nb; b++) {
		const size_t k0 = b * GK_KB, len = K - k0 < GK_KB ? K - k0 : GK_KB;
		const float *wr[GK_NT];
		float sb[GK_NT][GK_KB / 32];
		for (int t = 0; t < nt; t++) {
			wr[t] = gk_decode(w, n + t, k0, len, !ref, wbuf[t]);
			if (ref && w->type == SRT_WT_FP8) {
				sb[t][0] = srt_e8m0_to_f32(w->scales[((n + t) / GK_KB) * nb + b]);
			} else if (ref && w->type == SRT_WT_FP4) {
				const uint8_t *sc = w->scales + (n + t) * (K / 32) + b * (GK_KB / 32);
				for (int s = 0; s < GK_KB / 32; s++)
					sb[t][s] = srt_e8m0_to_f32(sc[s]);
			}
		}
		for (size_t i = 0; i < m; i++) {
			const float *xr = x + i * ldx + k0;
			float *yr = y + i * ldy + n;
			float d[GK_NT];
			if (!ref || !quant) {
				/* exact mode, or the reference's unquantized f32/bf16 weights */
				gk_dots(xr, wr, 0, len, nt, ref, ref ? xs[i * nb + b] : 1.0f, d);
				for (int t = 0; t < nt; t++)
					yr[t] += d[t];
			} else if (w->type == SRT_WT_FP8) {
				const float sa = xs[i * nb + b];
				gk_dots(xr, wr, 0, GK_KB, nt, false, 1.0f, d);
				for (int t = 0; t < nt; t++)
					yr[t] += d[t] * (sa * sb[t][0]);
			} else {
				const float sa = xs[i * nb + b];
				for (int s = 0; s < GK_KB / 32; s++) {
					gk_dots(xr, wr, (size_t)s * 32, 32, nt, false, 1.0f, d);
					for (int t = 0; t < nt; t++)
						yr[t] += d[t] * sa * sb[t][s];
				}
			}
		}
	}
}

bool GEMMK_NAME(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	if ((w->type == SRT_WT_F32 || w->type == SRT_WT_BF16) && w->cols % 8 != 0)
		return false; /* lane tails: the portable code handles them */
	size_t n = n0;
	for (; n + GK_NT <= n1; n += GK_NT)
		gk_tile(w, x, xs, m, ldx, y, ldy, n, GK_NT);
	for (; n < n1; n++)
		gk_tile(w, x, xs, m, ldx, y, ldy, n, 1);
	return true;
}
