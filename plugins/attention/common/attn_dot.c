/*
 * Double-accumulated dot products of float operands, vectorised across independent outputs
 * (attn_dot.h). Each output is the same sequence of IEEE operations as the scalar loop
 *     s = 0; for (k = 0; k < K; k++) s += (double)a[k] * (double)b[k];
 * (the products of two floats are exact in double; the adds run in k order), so every kernel
 * set gives the bits of that loop: the AVX-512 paths only put 8 outputs in the 8 lanes of a
 * vector. No fused multiply-add is used (explicit mul then add; -ffp-contract=off).
 * SRT_GEMM_ISA=generic or avx2 in the environment selects the portable loops (tests).
 */
#include "attn_dot.h"

#include <stdlib.h>
#include <string.h>

#include "ops/fp.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTN_X86 1
#endif

#ifdef ATTN_X86
static int have_avx512(void)
{
	static int v = -1;
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		/* SRT_GEMM_ISA=generic|avx2 (core/ops/gemm.h) also steers these kernels */
		const char *isa = getenv("SRT_GEMM_ISA");
		__builtin_cpu_init();
		r = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
		    (!isa || !strcmp(isa, "avx512")) ? 1 : 0;
		__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	}
	return r;
}

__attribute__((target("avx512f"))) static void tiles_avx512(const float *x, const float *t,
							     size_t K, size_t nt, double *y)
{
	size_t j = 0;
	for (; j + 4 <= nt; j += 4) {
		const float *t0 = t + j * K * 8;
		__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
		for (size_t k = 0; k < K; k++) {
			__m512d xv = _mm512_set1_pd((double)x[k]);
			const float *p = t0 + k * 8;
			a0 = _mm512_add_pd(a0, _mm512_mul_pd(xv, _mm512_cvtps_pd(_mm256_loadu_ps(p))));
			a1 = _mm512_add_pd(a1, _mm512_mul_pd(xv, _mm512_cvtps_pd(
									 _mm256_loadu_ps(p + K * 8))));
			a2 = _mm512_add_pd(a2, _mm512_mul_pd(xv, _mm512_cvtps_pd(
									 _mm256_loadu_ps(p + 2 * K * 8))));
			a3 = _mm512_add_pd(a3, _mm512_mul_pd(xv, _mm512_cvtps_pd(
									 _mm256_loadu_ps(p + 3 * K * 8))));
		}
		_mm512_storeu_pd(y + j * 8, a0);
		_mm512_storeu_pd(y + j * 8 + 8, a1);
		_mm512_storeu_pd(y + j * 8 + 16, a2);
		_mm512_storeu_pd(y + j * 8 + 24, a3);
	}
	for (; j < nt; j++) {
		const float *t0 = t + j * K * 8;
		__m512d a0 = _mm512_setzero_pd();
		for (size_t k = 0; k < K; k++)
			a0 = _mm512_add_pd(a0, _mm512_mul_pd(_mm512_set1_pd((double)x[k]),
							     _mm512_cvtps_pd(_mm256_loadu_ps(t0 + k * 8))));
		_mm512_storeu_pd(y + j * 8, a0);
	}
}

/* bf16 tiles: the 8 uint16 of a row widened to float bits (exact), then to double */
#define BF8(p) _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(                        \
	_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16)))

__attribute__((target("avx512f,avx2"))) static void tiles_bf16_avx512(const float *x,
								     const uint16_t *t, size_t K,
								     size_t nt, double *y)
{
	size_t j = 0;
	for (; j + 4 <= nt; j += 4) {
		const uint16_t *t0 = t + j * K * 8;
		__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
		for (size_t k = 0; k < K; k++) {
			__m512d xv = _mm512_set1_pd((double)x[k]);
			const uint16_t *p = t0 + k * 8;
			a0 = _mm512_add_pd(a0, _mm512_mul_pd(xv, BF8(p)));
			a1 = _mm512_add_pd(a1, _mm512_mul_pd(xv, BF8(p + K * 8)));
			a2 = _mm512_add_pd(a2, _mm512_mul_pd(xv, BF8(p + 2 * K * 8)));
			a3 = _mm512_add_pd(a3, _mm512_mul_pd(xv, BF8(p + 3 * K * 8)));
		}
		_mm512_storeu_pd(y + j * 8, a0);
		_mm512_storeu_pd(y + j * 8 + 8, a1);
		_mm512_storeu_pd(y + j * 8 + 16, a2);
		_mm512_storeu_pd(y + j * 8 + 24, a3);
	}
	for (; j < nt; j++) {
		const uint16_t *t0 = t + j * K * 8;
		__m512d a0 = _mm512_setzero_pd();
		for (size_t k = 0; k < K; k++)
			a0 = _mm512_add_pd(a0, _mm512_mul_pd(_mm512_set1_pd((double)x[k]),
							     BF8(t0 + k * 8)));
		_mm512_storeu_pd(y + j * 8, a0);
	}
}

/* E4M3 tiles: the 8 codes as f16 bits (sign to bit 15, exponent and mantissa at bit 7: the
 * f16 value is the E4M3 value / 2^8, exact), widened to float, times 2^8 x the block scale */
#define FP8X8(p) _mm256_cvtph_ps(_mm_or_si128(                                               \
	_mm_slli_epi16(_mm_and_si128(c16_(p), _mm_set1_epi16(0x80)), 8),                        \
	_mm_slli_epi16(_mm_and_si128(c16_(p), _mm_set1_epi16(0x7f)), 7)))
#define c16_(p) _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)(p)))

__attribute__((target("avx512f,avx2,f16c"))) static void tiles_fp8_avx512(
	const float *x, const uint8_t *t, const float *sc, size_t K, size_t nt, double *y)
{
	size_t nb = K / 128;
	for (size_t j = 0; j < nt; j += 4) {
		size_t m = nt - j < 4 ? nt - j : 4;
		__m512d acc[4];
		for (size_t i = 0; i < 4; i++)
			acc[i] = _mm512_setzero_pd();
		for (size_t b = 0; b < nb; b++) {
			__m256 s[4];
			const uint8_t *p[4];
			for (size_t i = 0; i < m; i++) {
				s[i] = _mm256_mul_ps(_mm256_loadu_ps(sc + ((j + i) * nb + b) * 8),
						     _mm256_set1_ps(256.0f));
				p[i] = t + ((j + i) * K + b * 128) * 8;
			}
			if (m == 4) {
				for (size_t k = 0; k < 128; k++) {
					__m512d xv = _mm512_set1_pd((double)x[b * 128 + k]);
#define FP8ACC(i) acc[i] = _mm512_add_pd(acc[i], _mm512_mul_pd(xv, _mm512_cvtps_pd(                \
	_mm256_mul_ps(FP8X8(p[i] + k * 8), s[i]))))
					FP8ACC(0);
					FP8ACC(1);
					FP8ACC(2);
					FP8ACC(3);
				}
			} else {
				for (size_t i = 0; i < m; i++)
					for (size_t k = 0; k < 128; k++) {
						__m512d xv = _mm512_set1_pd((double)x[b * 128 + k]);
						FP8ACC(i);
					}
			}
#undef FP8ACC
		}
		for (size_t i = 0; i < m; i++)
			_mm512_storeu_pd(y + (j + i) * 8, acc[i]);
	}
}

__attribute__((target("avx512f"))) static void pv_avx512(const double *p, const float *v,
							  size_t ld, size_t n, size_t K,
							  double *y)
{
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
		for (size_t k = 0; k < K; k++) {
			__m512d pk = _mm512_set1_pd(p[k]);
			const float *r = v + k * ld + i;
			a0 = _mm512_add_pd(a0, _mm512_mul_pd(pk, _mm512_cvtps_pd(_mm256_loadu_ps(r))));
			a1 = _mm512_add_pd(a1, _mm512_mul_pd(pk, _mm512_cvtps_pd(_mm256_loadu_ps(r + 8))));
			a2 = _mm512_add_pd(a2, _mm512_mul_pd(pk, _mm512_cvtps_pd(_mm256_loadu_ps(r + 16))));
			a3 = _mm512_add_pd(a3, _mm512_mul_pd(pk, _mm512_cvtps_pd(_mm256_loadu_ps(r + 24))));
		}
		_mm512_storeu_pd(y + i, a0);
		_mm512_storeu_pd(y + i + 8, a1);
		_mm512_storeu_pd(y + i + 16, a2);
		_mm512_storeu_pd(y + i + 24, a3);
	}
	for (; i + 8 <= n; i += 8) {
		__m512d a0 = _mm512_setzero_pd();
		for (size_t k = 0; k < K; k++)
			a0 = _mm512_add_pd(a0, _mm512_mul_pd(_mm512_set1_pd(p[k]),
							     _mm512_cvtps_pd(_mm256_loadu_ps(v + k * ld + i))));
		_mm512_storeu_pd(y + i, a0);
	}
	for (; i < n; i++) {
		double s = 0;
		for (size_t k = 0; k < K; k++)
			s += p[k] * (double)v[k * ld + i];
		y[i] = s;
	}
}
#endif

#ifdef ATTN_X86
/* Heads in lanes (8 per vector, two vectors per step), four keys at a time: eight
 * independent add chains, each lane's products added in c order. nh a multiple of 8. */
__attribute__((target("avx512f"))) static void qk_heads_avx512(const double *qt, size_t nh,
							       const float *keys, size_t K,
							       size_t ne, double *y)
{
	size_t e = 0;
	for (; e + 4 <= ne; e += 4) {
		const float *k0 = keys + e * K, *k1 = k0 + K, *k2 = k1 + K, *k3 = k2 + K;
		size_t h = 0;
		for (; h + 16 <= nh; h += 16) {
			__m512d a00 = _mm512_setzero_pd(), a01 = a00, a10 = a00, a11 = a00;
			__m512d a20 = a00, a21 = a00, a30 = a00, a31 = a00;
			for (size_t c = 0; c < K; c++) {
				const __m512d q0 = _mm512_loadu_pd(qt + c * nh + h);
				const __m512d q1 = _mm512_loadu_pd(qt + c * nh + h + 8);
				__m512d b = _mm512_set1_pd((double)k0[c]);
				a00 = _mm512_add_pd(a00, _mm512_mul_pd(q0, b));
				a01 = _mm512_add_pd(a01, _mm512_mul_pd(q1, b));
				b = _mm512_set1_pd((double)k1[c]);
				a10 = _mm512_add_pd(a10, _mm512_mul_pd(q0, b));
				a11 = _mm512_add_pd(a11, _mm512_mul_pd(q1, b));
				b = _mm512_set1_pd((double)k2[c]);
				a20 = _mm512_add_pd(a20, _mm512_mul_pd(q0, b));
				a21 = _mm512_add_pd(a21, _mm512_mul_pd(q1, b));
				b = _mm512_set1_pd((double)k3[c]);
				a30 = _mm512_add_pd(a30, _mm512_mul_pd(q0, b));
				a31 = _mm512_add_pd(a31, _mm512_mul_pd(q1, b));
			}
			_mm512_storeu_pd(y + e * nh + h, a00);
			_mm512_storeu_pd(y + e * nh + h + 8, a01);
			_mm512_storeu_pd(y + (e + 1) * nh + h, a10);
			_mm512_storeu_pd(y + (e + 1) * nh + h + 8, a11);
			_mm512_storeu_pd(y + (e + 2) * nh + h, a20);
			_mm512_storeu_pd(y + (e + 2) * nh + h + 8, a21);
			_mm512_storeu_pd(y + (e + 3) * nh + h, a30);
			_mm512_storeu_pd(y + (e + 3) * nh + h + 8, a31);
		}
		for (; h < nh; h += 8) {
			__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
			for (size_t c = 0; c < K; c++) {
				const __m512d q0 = _mm512_loadu_pd(qt + c * nh + h);
				a0 = _mm512_add_pd(a0, _mm512_mul_pd(q0, _mm512_set1_pd((double)k0[c])));
				a1 = _mm512_add_pd(a1, _mm512_mul_pd(q0, _mm512_set1_pd((double)k1[c])));
				a2 = _mm512_add_pd(a2, _mm512_mul_pd(q0, _mm512_set1_pd((double)k2[c])));
				a3 = _mm512_add_pd(a3, _mm512_mul_pd(q0, _mm512_set1_pd((double)k3[c])));
			}
			_mm512_storeu_pd(y + e * nh + h, a0);
			_mm512_storeu_pd(y + (e + 1) * nh + h, a1);
			_mm512_storeu_pd(y + (e + 2) * nh + h, a2);
			_mm512_storeu_pd(y + (e + 3) * nh + h, a3);
		}
	}
	for (; e < ne; e++) {
		const float *k0 = keys + e * K;
		for (size_t h = 0; h < nh; h += 8) {
			__m512d a0 = _mm512_setzero_pd();
			for (size_t c = 0; c < K; c++)
				a0 = _mm512_add_pd(a0, _mm512_mul_pd(_mm512_loadu_pd(qt + c * nh + h),
								     _mm512_set1_pd((double)k0[c])));
			_mm512_storeu_pd(y + e * nh + h, a0);
		}
	}
}
#endif

#ifdef ATTN_X86
/* Eight tiles (64 outputs) per pass, one 8-float accumulator per tile. */
__attribute__((target("avx2"))) static void tiles_f32_avx(const float *x, const float *t,
							  size_t K, size_t nt, float *y)
{
	size_t j = 0;
	for (; j + 8 <= nt; j += 8) {
		__m256 a[8];
		for (int i = 0; i < 8; i++)
			a[i] = _mm256_setzero_ps();
		const float *tj = t + j * K * 8;
		for (size_t c = 0; c < K; c++) {
			const __m256 xv = _mm256_broadcast_ss(x + c);
			for (int i = 0; i < 8; i++)
				a[i] = _mm256_add_ps(a[i], _mm256_mul_ps(xv, _mm256_loadu_ps(
								     tj + ((size_t)i * K + c) * 8)));
		}
		for (int i = 0; i < 8; i++)
			_mm256_storeu_ps(y + (j + (size_t)i) * 8, a[i]);
	}
	for (; j < nt; j++) {
		__m256 a = _mm256_setzero_ps();
		for (size_t c = 0; c < K; c++)
			a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_broadcast_ss(x + c),
							   _mm256_loadu_ps(t + (j * K + c) * 8)));
		_mm256_storeu_ps(y + j * 8, a);
	}
}

/* 128 outputs per pass (8 x 16 lanes), then 16, then single outputs. */
__attribute__((target("avx512f"))) static void pv_f32_avx512(const float *p, const float *v,
							      size_t ld, size_t n, size_t K,
							      float *y)
{
	size_t i = 0;
	for (; i + 128 <= n; i += 128) {
		__m512 a[8];
		for (int q = 0; q < 8; q++)
			a[q] = _mm512_setzero_ps();
		for (size_t k = 0; k < K; k++) {
			const __m512 pk = _mm512_set1_ps(p[k]);
			const float *r = v + k * ld + i;
			for (int q = 0; q < 8; q++)
				a[q] = _mm512_add_ps(a[q], _mm512_mul_ps(pk, _mm512_loadu_ps(r + 16 * q)));
		}
		for (int q = 0; q < 8; q++)
			_mm512_storeu_ps(y + i + 16 * (size_t)q, a[q]);
	}
	for (; i + 16 <= n; i += 16) {
		__m512 a = _mm512_setzero_ps();
		for (size_t k = 0; k < K; k++)
			a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_set1_ps(p[k]),
							   _mm512_loadu_ps(v + k * ld + i)));
		_mm512_storeu_ps(y + i, a);
	}
	for (; i < n; i++) {
		float s = 0;
		for (size_t k = 0; k < K; k++)
			s += p[k] * v[k * ld + i];
		y[i] = s;
	}
}
#endif

#ifdef ATTN_X86
/* Two heads, four tiles (32 keys) per pass: each tile vector loaded once for both heads;
 * every output is the chain of tiles_f32_avx (0, then + x[c]·t[c] in c order). */
__attribute__((target("avx2"))) static void tiles_f32_2_avx(const float *x0, const float *x1,
							    const float *t, size_t K, size_t nt,
							    float *y0, float *y1)
{
	size_t j = 0;
	for (; j + 4 <= nt; j += 4) {
		__m256 a[4], b[4];
		for (int i = 0; i < 4; i++)
			a[i] = b[i] = _mm256_setzero_ps();
		const float *tj = t + j * K * 8;
		for (size_t c = 0; c < K; c++) {
			const __m256 xa = _mm256_broadcast_ss(x0 + c), xb = _mm256_broadcast_ss(x1 + c);
			for (int i = 0; i < 4; i++) {
				const __m256 w = _mm256_loadu_ps(tj + ((size_t)i * K + c) * 8);
				a[i] = _mm256_add_ps(a[i], _mm256_mul_ps(xa, w));
				b[i] = _mm256_add_ps(b[i], _mm256_mul_ps(xb, w));
			}
		}
		for (int i = 0; i < 4; i++) {
			_mm256_storeu_ps(y0 + (j + (size_t)i) * 8, a[i]);
			_mm256_storeu_ps(y1 + (j + (size_t)i) * 8, b[i]);
		}
	}
	for (; j < nt; j++) {
		__m256 a = _mm256_setzero_ps(), b = a;
		for (size_t c = 0; c < K; c++) {
			const __m256 w = _mm256_loadu_ps(t + (j * K + c) * 8);
			a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_broadcast_ss(x0 + c), w));
			b = _mm256_add_ps(b, _mm256_mul_ps(_mm256_broadcast_ss(x1 + c), w));
		}
		_mm256_storeu_ps(y0 + j * 8, a);
		_mm256_storeu_ps(y1 + j * 8, b);
	}
}

/* Two heads, 64 outputs per pass (4 x 16 lanes each), then 16, then single outputs: each
 * value vector loaded once for both heads; every output is pv_f32_avx512's chain. */
__attribute__((target("avx512f"))) static void pv_f32_2_avx512(const float *p0, const float *p1,
								const float *v, size_t ld, size_t n,
								size_t K, float *y0, float *y1)
{
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		__m512 a[4], b[4];
		for (int q = 0; q < 4; q++)
			a[q] = b[q] = _mm512_setzero_ps();
		for (size_t k = 0; k < K; k++) {
			const __m512 pa = _mm512_set1_ps(p0[k]), pb = _mm512_set1_ps(p1[k]);
			const float *r = v + k * ld + i;
			for (int q = 0; q < 4; q++) {
				const __m512 w = _mm512_loadu_ps(r + 16 * q);
				a[q] = _mm512_add_ps(a[q], _mm512_mul_ps(pa, w));
				b[q] = _mm512_add_ps(b[q], _mm512_mul_ps(pb, w));
			}
		}
		for (int q = 0; q < 4; q++) {
			_mm512_storeu_ps(y0 + i + 16 * (size_t)q, a[q]);
			_mm512_storeu_ps(y1 + i + 16 * (size_t)q, b[q]);
		}
	}
	for (; i + 16 <= n; i += 16) {
		__m512 a = _mm512_setzero_ps(), b = a;
		for (size_t k = 0; k < K; k++) {
			const __m512 w = _mm512_loadu_ps(v + k * ld + i);
			a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_set1_ps(p0[k]), w));
			b = _mm512_add_ps(b, _mm512_mul_ps(_mm512_set1_ps(p1[k]), w));
		}
		_mm512_storeu_ps(y0 + i, a);
		_mm512_storeu_ps(y1 + i, b);
	}
	for (; i < n; i++) {
		float s0 = 0, s1 = 0;
		for (size_t k = 0; k < K; k++) {
			s0 += p0[k] * v[k * ld + i];
			s1 += p1[k] * v[k * ld + i];
		}
		y0[i] = s0;
		y1[i] = s1;
	}
}
#endif

void srt_attn_dot_tiles_f32_2(const float *x0, const float *x1, const float *t, size_t k,
			      size_t nt, float *y0, float *y1)
{
#ifdef ATTN_X86
	if (have_avx512()) {
		tiles_f32_2_avx(x0, x1, t, k, nt, y0, y1);
		return;
	}
#endif
	srt_attn_dot_tiles_f32(x0, t, k, nt, y0);
	srt_attn_dot_tiles_f32(x1, t, k, nt, y1);
}

void srt_attn_pv_f32_2(const float *p0, const float *p1, const float *v, size_t ld, size_t n,
		       size_t k, float *y0, float *y1)
{
#ifdef ATTN_X86
	if (have_avx512()) {
		pv_f32_2_avx512(p0, p1, v, ld, n, k, y0, y1);
		return;
	}
#endif
	srt_attn_pv_f32(p0, v, ld, n, k, y0);
	srt_attn_pv_f32(p1, v, ld, n, k, y1);
}

void srt_attn_dot_tiles_f32(const float *x, const float *t, size_t k, size_t nt, float *y)
{
#ifdef ATTN_X86
	if (have_avx512()) { /* AVX-512 implies AVX2 here (have_avx512 checks both) */
		tiles_f32_avx(x, t, k, nt, y);
		return;
	}
#endif
	for (size_t j = 0; j < nt; j++) {
		float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
		const float *tj = t + j * k * 8;
		for (size_t c = 0; c < k; c++)
			for (size_t l = 0; l < 8; l++)
				s[l] += x[c] * tj[c * 8 + l];
		memcpy(y + j * 8, s, sizeof(s));
	}
}

void srt_attn_pv_f32(const float *p, const float *v, size_t ld, size_t n, size_t k, float *y)
{
#ifdef ATTN_X86
	if (have_avx512()) {
		pv_f32_avx512(p, v, ld, n, k, y);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		y[i] = 0;
	for (size_t c = 0; c < k; c++)
		for (size_t i = 0; i < n; i++)
			y[i] += p[c] * v[c * ld + i];
}

void srt_attn_qk_heads(const double *qt, size_t nh, const float *keys, size_t k, size_t ne,
		       double *y)
{
#ifdef ATTN_X86
	if (nh % 8 == 0 && have_avx512()) {
		qk_heads_avx512(qt, nh, keys, k, ne, y);
		return;
	}
#endif
	for (size_t e = 0; e < ne; e++)
		for (size_t h = 0; h < nh; h++) {
			double s = 0;
			for (size_t c = 0; c < k; c++)
				s += qt[c * nh + h] * (double)keys[e * k + c];
			y[e * nh + h] = s;
		}
}

void srt_attn_tile(const float *w, size_t n, size_t k, size_t ldw, float *t)
{
	size_t nt = (n + 7) / 8;
	for (size_t j = 0; j < nt; j++)
		for (size_t c = 0; c < k; c++)
			for (size_t l = 0; l < 8; l++) {
				size_t r = j * 8 + l;
				t[(j * k + c) * 8 + l] = r < n ? w[r * ldw + c] : 0.0f;
			}
}

void srt_attn_dot_tiles(const float *x, const float *t, size_t k, size_t nt, double *y)
{
#ifdef ATTN_X86
	if (have_avx512()) {
		tiles_avx512(x, t, k, nt, y);
		return;
	}
#endif
	for (size_t j = 0; j < nt; j++) {
		double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
		const float *tj = t + j * k * 8;
		for (size_t c = 0; c < k; c++)
			for (size_t l = 0; l < 8; l++)
				s[l] += (double)x[c] * (double)tj[c * 8 + l];
		memcpy(y + j * 8, s, sizeof(s));
	}
}

static float bf16_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float v;
	memcpy(&v, &u, 4);
	return v;
}

int srt_attn_tm_make(const struct srt_host *host, const float *w, size_t n, size_t k,
		     struct srt_attn_tm *out)
{
	size_t nt = (n + 7) / 8, cnt = nt * 8 * k;
	int bf16 = 1;
	for (size_t i = 0; i < n * k && bf16; i++) {
		uint32_t u;
		memcpy(&u, &w[i], 4);
		bf16 = (u & 0xffffu) == 0;
	}
	float *t = host->alloc(cnt * sizeof(float), 64);
	if (!t)
		return SRT_ENOMEM;
	srt_attn_tile(w, n, k, k, t);
	out->n = n;
	out->k = k;
	out->bf16 = bf16;
	out->fp8 = 0;
	out->sc = NULL;
	if (bf16) {
		uint16_t *h = host->alloc(cnt * sizeof(uint16_t), 64);
		if (!h) {
			host->free(t);
			return SRT_ENOMEM;
		}
		for (size_t i = 0; i < cnt; i++) {
			uint32_t u;
			memcpy(&u, &t[i], 4);
			h[i] = (uint16_t)(u >> 16);
		}
		host->free(t);
		out->t = h;
	} else {
		out->t = t;
	}
	return 0;
}

int srt_attn_tm_make_fp8(const struct srt_host *host, const uint8_t *codes,
			 const uint8_t *scales, size_t sb_cols, size_t row0, size_t n, size_t k,
			 const float *deq, struct srt_attn_tm *m)
{
	size_t nt = (n + 7) / 8, nb = k / 128;
	uint8_t *t = host->alloc(nt * 8 * k, 64);
	float *sc = host->alloc(nt * nb * 8 * sizeof(float), 64);
	int exact = t && sc && k % 128 == 0;
	for (size_t j = 0; exact && j < nt; j++)
		for (size_t l = 0; l < 8; l++) {
			size_t r = j * 8 + l;
			for (size_t b = 0; b < nb; b++)
				sc[(j * nb + b) * 8 + l] =
					r < n ? srt_e8m0_to_f32(scales[((row0 + r) / 128) * sb_cols + b])
					      : 0.0f;
			for (size_t c = 0; c < k; c++) {
				uint8_t q = r < n ? codes[(row0 + r) * k + c] : 0;
				t[(j * k + c) * 8 + l] = q;
				if (r < n) {
					float v = srt_fp8_e4m3_to_f32(q) * sc[(j * nb + c / 128) * 8 + l];
					exact &= memcmp(&v, &deq[r * k + c], 4) == 0;
				}
			}
		}
	if (!exact) {
		host->free(t);
		host->free(sc);
		return srt_attn_tm_make(host, deq, n, k, m);
	}
	m->t = t;
	m->sc = sc;
	m->n = n;
	m->k = k;
	m->bf16 = 0;
	m->fp8 = 1;
	return 0;
}

void srt_attn_tm_free(const struct srt_host *host, struct srt_attn_tm *m)
{
	host->free(m->t);
	host->free(m->sc);
	m->t = NULL;
	m->sc = NULL;
}

void srt_attn_tm_dot(const struct srt_attn_tm *m, const float *x, size_t t0, size_t nt,
		     double *y)
{
	if (m->fp8) {
		const uint8_t *t8 = (const uint8_t *)m->t + t0 * m->k * 8;
		const float *sc = m->sc + t0 * (m->k / 128) * 8;
#ifdef ATTN_X86
		if (have_avx512()) {
			tiles_fp8_avx512(x, t8, sc, m->k, nt, y);
			return;
		}
#endif
		for (size_t j = 0; j < nt; j++) {
			double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
			for (size_t c = 0; c < m->k; c++)
				for (size_t l = 0; l < 8; l++) {
					float v = srt_fp8_e4m3_to_f32(t8[(j * m->k + c) * 8 + l]) *
						  sc[(j * (m->k / 128) + c / 128) * 8 + l];
					s[l] += (double)x[c] * (double)v;
				}
			memcpy(y + j * 8, s, sizeof(s));
		}
		return;
	}
	if (!m->bf16) {
		srt_attn_dot_tiles(x, (const float *)m->t + t0 * m->k * 8, m->k, nt, y);
		return;
	}
	const uint16_t *t = (const uint16_t *)m->t + t0 * m->k * 8;
#ifdef ATTN_X86
	if (have_avx512()) {
		tiles_bf16_avx512(x, t, m->k, nt, y);
		return;
	}
#endif
	for (size_t j = 0; j < nt; j++) {
		double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
		const uint16_t *tj = t + j * m->k * 8;
		for (size_t c = 0; c < m->k; c++)
			for (size_t l = 0; l < 8; l++)
				s[l] += (double)x[c] * (double)bf16_f32(tj[c * 8 + l]);
		memcpy(y + j * 8, s, sizeof(s));
	}
}

void srt_attn_tm_decode(const struct srt_attn_tm *m, size_t t0, size_t nt, float *out)
{
	size_t k = m->k, cnt = nt * 8 * k;
	if (m->fp8) {
		const uint8_t *t8 = (const uint8_t *)m->t + t0 * k * 8;
		const float *sc = m->sc + t0 * (k / 128) * 8;
		for (size_t j = 0; j < nt; j++)
			for (size_t c = 0; c < k; c++) {
				const float *s = sc + (j * (k / 128) + c / 128) * 8;
				const uint8_t *q = t8 + (j * k + c) * 8;
				float *o = out + (j * k + c) * 8;
				for (size_t l = 0; l < 8; l++)
					o[l] = srt_fp8_e4m3_to_f32(q[l]) * s[l];
			}
	} else if (m->bf16) {
		const uint16_t *t = (const uint16_t *)m->t + t0 * k * 8;
		for (size_t i = 0; i < cnt; i++)
			out[i] = bf16_f32(t[i]);
	} else {
		memcpy(out, (const float *)m->t + t0 * k * 8, cnt * sizeof(float));
	}
}

void srt_attn_pv(const double *p, const float *v, size_t ld, size_t n, size_t k, double *y)
{
#ifdef ATTN_X86
	if (have_avx512()) {
		pv_avx512(p, v, ld, n, k, y);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		y[i] = 0;
	for (size_t c = 0; c < k; c++)
		for (size_t i = 0; i < n; i++)
			y[i] += p[c] * (double)v[c * ld + i];
}
