/*
 * Double-accumulated dot products of float operands, vectorised across independent outputs
 * (attn_dot.h). Each output is the same sequence of IEEE operations as the scalar loop
 *     s = 0; for (k = 0; k < K; k++) s += (double)a[k] * (double)b[k];
 * (the products of two floats are exact in double; the adds run in k order), so every kernel
 * set gives the bits of that loop: the AVX-512 and AVX2 paths only put independent outputs in
 * the lanes of a vector (8 doubles or 16 floats, 4 doubles or 8 floats), each output's own
 * chain in the loop's order. No fused multiply-add is used (explicit mul then add;
 * -ffp-contract=off), except in srt_attn_qk_heads when every query value is a float, and in
 * the two-head float32 kernels on srt_attn_bf16_exact operands (then each product is exact
 * and one fused multiply-add rounds the same sum).
 * Kernel sets: AVX-512F when the CPU has it, else AVX2 (FMA, F16C where a kernel needs them),
 * else the portable loops. The reference profile's float32 q·k and p·v also have AVX512_BF16
 * kernels on bf16 pairs (srt_attn_qk16_bf16, srt_attn_pv_bf16: same bits, below).
 * SRT_GEMM_ISA=generic in the environment selects the portable loops, SRT_GEMM_ISA=avx2 at
 * most the AVX2 kernels (tests).
 */
#include "attn_dot.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/fp.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "ops/gemm_isa.h" /* srt_gemm_bf16dp_usable */
#include "attn_term.h"
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

/* AVX2 kernels allowed: the CPU has AVX2 and SRT_GEMM_ISA is not "generic". */
static int have_avx2(void)
{
	static int v = -1;
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		const char *isa = getenv("SRT_GEMM_ISA");
		__builtin_cpu_init();
		r = __builtin_cpu_supports("avx2") && (!isa || strcmp(isa, "generic")) ? 1 : 0;
		__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	}
	return r;
}

/* have_avx2() and the half-float conversions (the FP8 decodes) */
static int have_avx2_f16c(void)
{
	static int v = -1;
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		__builtin_cpu_init();
		r = have_avx2() && __builtin_cpu_supports("f16c") ? 1 : 0;
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

/*
 * The AVX2 versions of the four double kernels above: the same outputs in 4-lane halves
 * (lanes 0-3 and 4-7 of a tile row in two vectors), each lane's chain 0 + x[0]·t[0] + ...
 * in k order with separate multiplication and addition.
 */
#define F4(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define MADD4(a, x, w) ((a) = _mm256_add_pd((a), _mm256_mul_pd((x), (w))))

__attribute__((target("avx2"))) static void tiles_avx2(const float *x, const float *t,
							size_t K, size_t nt, double *y)
{
	size_t j = 0;
	for (; j + 4 <= nt; j += 4) {
		const float *t0 = t + j * K * 8;
		__m256d a[8];
		for (int i = 0; i < 8; i++)
			a[i] = _mm256_setzero_pd();
		for (size_t k = 0; k < K; k++) {
			const __m256d xv = _mm256_set1_pd((double)x[k]);
			const float *p = t0 + k * 8;
			for (int i = 0; i < 4; i++) {
				MADD4(a[2 * i], xv, F4(p + (size_t)i * K * 8));
				MADD4(a[2 * i + 1], xv, F4(p + (size_t)i * K * 8 + 4));
			}
		}
		for (int i = 0; i < 8; i++)
			_mm256_storeu_pd(y + j * 8 + 4 * (size_t)i, a[i]);
	}
	for (; j < nt; j++) {
		const float *t0 = t + j * K * 8;
		__m256d a0 = _mm256_setzero_pd(), a1 = a0;
		for (size_t k = 0; k < K; k++) {
			const __m256d xv = _mm256_set1_pd((double)x[k]);
			MADD4(a0, xv, F4(t0 + k * 8));
			MADD4(a1, xv, F4(t0 + k * 8 + 4));
		}
		_mm256_storeu_pd(y + j * 8, a0);
		_mm256_storeu_pd(y + j * 8 + 4, a1);
	}
}

/* bf16 tile row: the 8 uint16 widened to float bits (exact), lanes 0-3 / 4-7 to double */
__attribute__((target("avx2"), always_inline)) static inline __m256 bf8_ps(const uint16_t *p)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(
		_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16));
}
#define LO4(v) _mm256_cvtps_pd(_mm256_castps256_ps128(v))
#define HI4(v) _mm256_cvtps_pd(_mm256_extractf128_ps((v), 1))

__attribute__((target("avx2"))) static void tiles_bf16_avx2(const float *x, const uint16_t *t,
							     size_t K, size_t nt, double *y)
{
	size_t j = 0;
	for (; j + 4 <= nt; j += 4) {
		const uint16_t *t0 = t + j * K * 8;
		__m256d a[8];
		for (int i = 0; i < 8; i++)
			a[i] = _mm256_setzero_pd();
		for (size_t k = 0; k < K; k++) {
			const __m256d xv = _mm256_set1_pd((double)x[k]);
			const uint16_t *p = t0 + k * 8;
			for (int i = 0; i < 4; i++) {
				const __m256 w = bf8_ps(p + (size_t)i * K * 8);
				MADD4(a[2 * i], xv, LO4(w));
				MADD4(a[2 * i + 1], xv, HI4(w));
			}
		}
		for (int i = 0; i < 8; i++)
			_mm256_storeu_pd(y + j * 8 + 4 * (size_t)i, a[i]);
	}
	for (; j < nt; j++) {
		const uint16_t *t0 = t + j * K * 8;
		__m256d a0 = _mm256_setzero_pd(), a1 = a0;
		for (size_t k = 0; k < K; k++) {
			const __m256d xv = _mm256_set1_pd((double)x[k]);
			const __m256 w = bf8_ps(t0 + k * 8);
			MADD4(a0, xv, LO4(w));
			MADD4(a1, xv, HI4(w));
		}
		_mm256_storeu_pd(y + j * 8, a0);
		_mm256_storeu_pd(y + j * 8 + 4, a1);
	}
}

/* E4M3 tiles as tiles_fp8_avx512: the same float values (FP8X8 times 2^8 x the scale), then
 * the same double chains in 4-lane halves */
__attribute__((target("avx2,f16c"))) static void tiles_fp8_avx2(
	const float *x, const uint8_t *t, const float *sc, size_t K, size_t nt, double *y)
{
	size_t nb = K / 128;
	for (size_t j = 0; j < nt; j += 2) {
		size_t m = nt - j < 2 ? nt - j : 2;
		__m256d acc[4];
		for (size_t i = 0; i < 4; i++)
			acc[i] = _mm256_setzero_pd();
		for (size_t b = 0; b < nb; b++) {
			__m256 s[2];
			const uint8_t *p[2];
			for (size_t i = 0; i < m; i++) {
				s[i] = _mm256_mul_ps(_mm256_loadu_ps(sc + ((j + i) * nb + b) * 8),
						     _mm256_set1_ps(256.0f));
				p[i] = t + ((j + i) * K + b * 128) * 8;
			}
#define FP8ACC2(i)                                                                             \
	do {                                                                                   \
		const __m256 w_ = _mm256_mul_ps(FP8X8(p[i] + k * 8), s[i]);                    \
		MADD4(acc[2 * (i)], xv, LO4(w_));                                              \
		MADD4(acc[2 * (i) + 1], xv, HI4(w_));                                          \
	} while (0)
			if (m == 2) {
				for (size_t k = 0; k < 128; k++) {
					const __m256d xv = _mm256_set1_pd((double)x[b * 128 + k]);
					FP8ACC2(0);
					FP8ACC2(1);
				}
			} else {
				for (size_t k = 0; k < 128; k++) {
					const __m256d xv = _mm256_set1_pd((double)x[b * 128 + k]);
					FP8ACC2(0);
				}
			}
#undef FP8ACC2
		}
		for (size_t i = 0; i < 2 * m; i++)
			_mm256_storeu_pd(y + j * 8 + 4 * i, acc[i]);
	}
}

__attribute__((target("avx2"))) static void pv_avx2(const double *p, const float *v, size_t ld,
						     size_t n, size_t K, double *y)
{
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m256d a[8];
		for (int q = 0; q < 8; q++)
			a[q] = _mm256_setzero_pd();
		for (size_t k = 0; k < K; k++) {
			const __m256d pk = _mm256_set1_pd(p[k]);
			const float *r = v + k * ld + i;
			for (int q = 0; q < 8; q++)
				MADD4(a[q], pk, F4(r + 4 * q));
		}
		for (int q = 0; q < 8; q++)
			_mm256_storeu_pd(y + i + 4 * (size_t)q, a[q]);
	}
	for (; i + 4 <= n; i += 4) {
		__m256d a0 = _mm256_setzero_pd();
		for (size_t k = 0; k < K; k++)
			MADD4(a0, _mm256_set1_pd(p[k]), F4(v + k * ld + i));
		_mm256_storeu_pd(y + i, a0);
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
/* acc + a·b: one fused multiply-add when `fused` (the product is exact: see qk_heads). */
__attribute__((target("avx512f"), always_inline)) static inline __m512d
madd_pd(__m512d acc, __m512d a, __m512d b, int fused)
{
	return fused ? _mm512_fmadd_pd(a, b, acc) : _mm512_add_pd(acc, _mm512_mul_pd(a, b));
}

/* Heads in lanes (8 per vector, two vectors per step), four keys at a time: eight
 * independent add chains, each lane's products added in c order. nh a multiple of 8. */
__attribute__((target("avx512f"), always_inline)) static inline void
qk_heads_body(const double *qt, size_t nh, const float *keys, size_t K, size_t ne, double *y,
	      int fused)
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
				a00 = madd_pd(a00, q0, b, fused);
				a01 = madd_pd(a01, q1, b, fused);
				b = _mm512_set1_pd((double)k1[c]);
				a10 = madd_pd(a10, q0, b, fused);
				a11 = madd_pd(a11, q1, b, fused);
				b = _mm512_set1_pd((double)k2[c]);
				a20 = madd_pd(a20, q0, b, fused);
				a21 = madd_pd(a21, q1, b, fused);
				b = _mm512_set1_pd((double)k3[c]);
				a30 = madd_pd(a30, q0, b, fused);
				a31 = madd_pd(a31, q1, b, fused);
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
				a0 = madd_pd(a0, q0, _mm512_set1_pd((double)k0[c]), fused);
				a1 = madd_pd(a1, q0, _mm512_set1_pd((double)k1[c]), fused);
				a2 = madd_pd(a2, q0, _mm512_set1_pd((double)k2[c]), fused);
				a3 = madd_pd(a3, q0, _mm512_set1_pd((double)k3[c]), fused);
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
				a0 = madd_pd(a0, _mm512_loadu_pd(qt + c * nh + h),
					     _mm512_set1_pd((double)k0[c]), fused);
			_mm512_storeu_pd(y + e * nh + h, a0);
		}
	}
}

/* The products of two floats are exact in double (48 significant bits, no overflow or
 * underflow), so round(acc + q·k) by one fused multiply-add is the bit-identical result of the
 * loop's multiplication and addition when every query value is a float: checked per call
 * (the indexer's queries are widened floats), else the separate operations. */
__attribute__((target("avx512f"))) static void qk_heads_avx512(const double *qt, size_t nh,
							       const float *keys, size_t K,
							       size_t ne, double *y)
{
	int floats = 1;
	for (size_t i = 0; i < K * nh && floats; i++)
		floats = (double)(float)qt[i] == qt[i];
	if (floats)
		qk_heads_body(qt, nh, keys, K, ne, y, 1);
	else
		qk_heads_body(qt, nh, keys, K, ne, y, 0);
}

/* qk_heads_body with heads in 4-lane vectors (nh a multiple of 4): the same chains, lane by
 * lane; MADD(acc, q, k) is acc + q·k, fused or not. Instantiated twice (the fused kernel
 * needs the fma target). */
#define QK_HEADS_AVX2(name, tgt, MADD)                                                         \
	__attribute__((target(tgt))) static void name(const double *qt, size_t nh,             \
						      const float *keys, size_t K, size_t ne,  \
						      double *y)                               \
	{                                                                              \
		size_t e = 0;                                                          \
		for (; e + 4 <= ne; e += 4) {                                          \
			const float *k0 = keys + e * K;                                \
			size_t h = 0;                                                  \
			for (; h + 8 <= nh; h += 8) {                                  \
				__m256d a[8];                                          \
				for (int i = 0; i < 8; i++)                            \
					a[i] = _mm256_setzero_pd();                    \
				for (size_t c = 0; c < K; c++) {                       \
					const __m256d q0 = _mm256_loadu_pd(qt + c * nh + h);     \
					const __m256d q1 = _mm256_loadu_pd(qt + c * nh + h + 4); \
					for (int i = 0; i < 4; i++) {                  \
						const __m256d b = _mm256_set1_pd(      \
							(double)k0[(size_t)i * K + c]); \
						a[2 * i] = MADD(a[2 * i], q0, b);      \
						a[2 * i + 1] = MADD(a[2 * i + 1], q1, b); \
					}                                              \
				}                                                      \
				for (int i = 0; i < 4; i++) {                          \
					_mm256_storeu_pd(y + (e + (size_t)i) * nh + h, a[2 * i]);     \
					_mm256_storeu_pd(y + (e + (size_t)i) * nh + h + 4,        \
							 a[2 * i + 1]);                 \
				}                                                      \
			}                                                              \
			for (; h < nh; h += 4) {                                       \
				__m256d a[4];                                          \
				for (int i = 0; i < 4; i++)                            \
					a[i] = _mm256_setzero_pd();                    \
				for (size_t c = 0; c < K; c++) {                       \
					const __m256d q0 = _mm256_loadu_pd(qt + c * nh + h); \
					for (int i = 0; i < 4; i++)                    \
						a[i] = MADD(a[i], q0, _mm256_set1_pd(   \
							(double)k0[(size_t)i * K + c])); \
				}                                                      \
				for (int i = 0; i < 4; i++)                            \
					_mm256_storeu_pd(y + (e + (size_t)i) * nh + h, a[i]); \
			}                                                              \
		}                                                                      \
		for (; e < ne; e++) {                                                  \
			const float *k0 = keys + e * K;                                \
			for (size_t h = 0; h < nh; h += 4) {                           \
				__m256d a0 = _mm256_setzero_pd();                      \
				for (size_t c = 0; c < K; c++)                         \
					a0 = MADD(a0, _mm256_loadu_pd(qt + c * nh + h), \
						  _mm256_set1_pd((double)k0[c]));      \
				_mm256_storeu_pd(y + e * nh + h, a0);                  \
			}                                                              \
		}                                                                      \
	}
#define QK_MUL_ADD(acc, a, b) _mm256_add_pd((acc), _mm256_mul_pd((a), (b)))
#define QK_FMA(acc, a, b) _mm256_fmadd_pd((a), (b), (acc))
QK_HEADS_AVX2(qk_heads_avx2_sep, "avx2", QK_MUL_ADD)
QK_HEADS_AVX2(qk_heads_avx2_fma, "avx2,fma", QK_FMA)
#undef QK_MUL_ADD
#undef QK_FMA
#undef QK_HEADS_AVX2
#endif

#ifdef ATTN_X86
/* 32 FP4 values of one scale block: bytes 0-7 (16 nibbles, low first) in the first vector,
 * bytes 8-15 in the second; vpermps reads the low 4 bits of each shifted byte. */
__attribute__((target("avx512f"))) static void fp4_row_avx512(const uint8_t *codes,
							     const uint8_t *scales, size_t d,
							     float *v)
{
	const __m512 tab = _mm512_loadu_ps(srt_fp4_e2m1_table);
	const __m512i sh = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
	const __m512i lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
	const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
	for (size_t b = 0; b < d / 32; b++) {
		const __m512i w = _mm512_cvtepu8_epi32(
			_mm_loadu_si128((const __m128i *)(const void *)(codes + b * 16)));
		const __m512 s = _mm512_set1_ps(srt_e8m0_to_f32(scales[b]));
		const __m512i n0 = _mm512_srlv_epi32(_mm512_permutexvar_epi32(lo, w), sh);
		const __m512i n1 = _mm512_srlv_epi32(_mm512_permutexvar_epi32(hi, w), sh);
		_mm512_storeu_ps(v + b * 32, _mm512_mul_ps(_mm512_permutexvar_ps(n0, tab), s));
		_mm512_storeu_ps(v + b * 32 + 16, _mm512_mul_ps(_mm512_permutexvar_ps(n1, tab), s));
	}
}

/* fp4_row_avx512 8 values at a time: 4 code bytes to lanes (0,0,1,1,2,2,3,3), shifted by 0 or
 * 4; vpermps reads the low 3 bits of each, bit 3 (moved to the sign bit) picks the table
 * half. The same table floats times the same scale. */
__attribute__((target("avx2"))) static void fp4_row_avx2(const uint8_t *codes,
							  const uint8_t *scales, size_t d, float *v)
{
	const __m256 tlo = _mm256_loadu_ps(srt_fp4_e2m1_table);
	const __m256 thi = _mm256_loadu_ps(srt_fp4_e2m1_table + 8);
	const __m256i sh = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
	const __m256i lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
	for (size_t b = 0; b < d / 32; b++) {
		const __m256 s = _mm256_set1_ps(srt_e8m0_to_f32(scales[b]));
		const __m256i w16 = _mm256_cvtepu8_epi32(
			_mm_loadl_epi64((const __m128i *)(const void *)(codes + b * 16)));
		const __m256i w16h = _mm256_cvtepu8_epi32(
			_mm_loadl_epi64((const __m128i *)(const void *)(codes + b * 16 + 8)));
		for (int q = 0; q < 4; q++) {
			/* bytes 4q .. 4q + 3 of the block in lanes 0-3 */
			const __m256i w = q < 2 ? w16 : w16h;
			const __m256i idx = _mm256_add_epi32(lo, _mm256_set1_epi32(4 * (q & 1)));
			const __m256i n = _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(w, idx), sh);
			const __m256 f = _mm256_blendv_ps(_mm256_permutevar8x32_ps(tlo, n),
							  _mm256_permutevar8x32_ps(thi, n),
							  _mm256_castsi256_ps(_mm256_slli_epi32(n, 28)));
			_mm256_storeu_ps(v + b * 32 + 8 * (size_t)q, _mm256_mul_ps(f, s));
		}
	}
}
#endif

#ifdef ATTN_X86
/* A block scale code with which every E4M3 value of the block (nonzero magnitudes 2^-9 ..
 * 448, at most 4 significant bits) times 2^(code - 127) passes srt_attn_bf16_exact: nonzero
 * biased exponents code - 9 .. code + 8 within [67, 187]. */
#define FP8_EXACT_CODE(sc) ((sc) >= 76 && (sc) <= 179)

/* One 64 block of E4M3 codes c times the scale of code sc by the scalar loop (the blocks the
 * vector kernels decline). */
static void fp8_block_scalar(const uint8_t *c, uint8_t sc, float *v)
{
	const float s = srt_e8m0_to_f32(sc);
	for (size_t i = 0; i < 64; i++)
		v[i] = srt_fp8_e4m3_to_f32(c[i]) * s;
}

/* Whether the 64 E4M3 codes at c hold a NaN code (0x7F or 0xFF). */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) int
fp8_block_nan_avx2(const uint8_t *c)
{
	const __m256i m7f = _mm256_set1_epi8(0x7F);
	const __m256i c0 = _mm256_loadu_si256((const __m256i *)(const void *)c);
	const __m256i c1 = _mm256_loadu_si256((const __m256i *)(const void *)(c + 32));
	return (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(c0, m7f), m7f)) |
		_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(c1, m7f), m7f))) != 0;
}

/* 2^8 times the block scale 2^(code - 127) of a scale code <= 246: the float of biased
 * exponent code + 8, 256.0f * srt_e8m0_to_f32(code) (code 0 included), as 8 lanes. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) __m256
fp8_f256_avx2(uint8_t code)
{
	return _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)((uint32_t)code + 8) << 23));
}

/* The 16 E4M3 codes at c as halves (code value times 2^-8) times f (fp8_f256_avx2): codes
 * 0-7 to *lo, 8-15 to *hi. */
__attribute__((target("avx2,f16c"))) static inline __attribute__((always_inline)) void
fp8x16_avx2(const uint8_t *c, __m256 f, __m256 *lo, __m256 *hi)
{
	const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)c);
	const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(x), 7),
					   _mm256_set1_epi16((short)0xBF80));
	*lo = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), f);
	*hi = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), f);
}

/*
 * E4M3 codes of one 64 block times the block scale s = 2^(e-127): the code's bits placed as
 * an IEEE half (sign on bit 15, bias 15 instead of 7) convert exactly to v·2^-8 (E4M3
 * subnormals are half subnormals and become normal floats), and (v·2^-8)·(2^8·s) is the same
 * real product as v·s, rounded once: the same float. Blocks with a NaN code or a scale code
 * above 246 (2^8·s not finite, or NaN) take the scalar loop.
 */
__attribute__((target("avx512f,avx2,f16c"))) static int fp8_row_avx512(const uint8_t *codes,
								      const uint8_t *scales,
								      size_t n, float *v)
{
	int ex = 1;
	for (size_t b = 0; b < n / 64; b++) {
		const uint8_t *c = codes + b * 64;
		const int nan = fp8_block_nan_avx2(c);
		ex &= !nan && FP8_EXACT_CODE(scales[b]);
		if (nan || scales[b] > 246) {
			fp8_block_scalar(c, scales[b], v + b * 64);
			continue;
		}
		const __m512 f = _mm512_set1_ps(256.0f * srt_e8m0_to_f32(scales[b]));
		const __m256i mask = _mm256_set1_epi16((short)0xBF80);
		for (int q = 0; q < 4; q++) {
			const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(c + 16 * q));
			const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(x), 7), mask);
			_mm512_storeu_ps(v + b * 64 + 16 * q, _mm512_mul_ps(_mm512_cvtph_ps(h), f));
		}
	}
	return ex;
}

/* fp8_row_avx512 with 8-float vectors: the same halves, the same products. */
__attribute__((target("avx2,f16c"))) static int fp8_row_avx2(const uint8_t *codes,
							       const uint8_t *scales, size_t n,
							       float *v)
{
	int ex = 1;
	for (size_t b = 0; b < n / 64; b++) {
		const uint8_t *c = codes + b * 64;
		const int nan = fp8_block_nan_avx2(c);
		ex &= !nan && FP8_EXACT_CODE(scales[b]);
		if (nan || scales[b] > 246) {
			fp8_block_scalar(c, scales[b], v + b * 64);
			continue;
		}
		const __m256 f = fp8_f256_avx2(scales[b]);
		for (int q = 0; q < 4; q++) {
			__m256 lo, hi;
			fp8x16_avx2(c + 16 * q, f, &lo, &hi);
			_mm256_storeu_ps(v + b * 64 + 16 * q, lo);
			_mm256_storeu_ps(v + b * 64 + 16 * q + 8, hi);
		}
	}
	return ex;
}
#endif

#ifdef ATTN_X86
__attribute__((target("avx512f,avx2"))) static void bf16_row_avx512(const uint8_t *words,
								    size_t n, float *v)
{
	for (size_t i = 0; i < n; i += 16) {
		const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)(words + 2 * i));
		_mm512_storeu_si512((void *)(v + i), _mm512_slli_epi32(_mm512_cvtepu16_epi32(w), 16));
	}
}

__attribute__((target("avx2"))) static void bf16_row_avx2(const uint8_t *words, size_t n, float *v)
{
	for (size_t i = 0; i < n; i += 8) {
		const __m128i w = _mm_loadu_si128((const __m128i *)(const void *)(words + 2 * i));
		_mm256_storeu_si256((__m256i *)(void *)(v + i),
				    _mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16));
	}
}
#endif

void srt_attn_bf16_row(const uint8_t *words, size_t n, float *v)
{
	size_t i = 0;
#ifdef ATTN_X86
	if (have_avx512()) {
		i = n / 16 * 16;
		bf16_row_avx512(words, i, v);
	} else if (have_avx2()) {
		i = n / 8 * 8;
		bf16_row_avx2(words, i, v);
	}
#endif
	for (; i < n; i++) {
		const uint32_t u = (uint32_t)(words[2 * i] | words[2 * i + 1] << 8) << 16;
		memcpy(&v[i], &u, sizeof u);
	}
}

#ifdef ATTN_X86
/* srt_attn_fp8_panels on AVX2 + F16C: fp8_row_avx2's halves and products, each 16 floats
 * stored at their panel's slot; the rope words widened to floats. */
__attribute__((target("avx2,f16c"))) static int fp8_panels_avx2(const uint8_t *codes,
								  const uint8_t *scales, size_t n,
								  const uint8_t *rope, size_t rd,
								  float *vp, size_t ldk)
{
	for (size_t b = 0; b < n / 64; b++) {
		const uint8_t *c = codes + b * 64;
		if (scales[b] > 246 || fp8_block_nan_avx2(c))
			return 0; /* fp8_row_avx2's scalar blocks: the caller's path */
		const __m256 f = fp8_f256_avx2(scales[b]);
		for (size_t q = 0; q < 4; q++) {
			__m256 lo, hi;
			fp8x16_avx2(c + 16 * q, f, &lo, &hi);
			float *o = vp + (b * 64 + 16 * q) * ldk;
			_mm256_storeu_ps(o, lo);
			_mm256_storeu_ps(o + 8, hi);
		}
	}
	for (size_t i = 0; i < rd; i += 16) {
		const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)(rope + 2 * i));
		float *o = vp + (n + i) * ldk;
		_mm256_storeu_si256((__m256i *)(void *)o,
				    _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(w)), 16));
		_mm256_storeu_si256((__m256i *)(void *)(o + 8),
				    _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(w, 1)), 16));
	}
	return 1;
}
#endif

int srt_attn_fp8_panels(const uint8_t *codes, const uint8_t *scales, size_t n, const uint8_t *rope,
			size_t rd, float *vp, size_t ldk)
{
#ifdef ATTN_X86
	if (n % 64 == 0 && rd % 16 == 0 && have_avx2_f16c())
		return fp8_panels_avx2(codes, scales, n, rope, rd, vp, ldk);
#endif
	(void)codes, (void)scales, (void)n, (void)rope, (void)rd, (void)vp, (void)ldk;
	return 0;
}

int srt_attn_fp8_row(const uint8_t *codes, const uint8_t *scales, size_t n, float *v)
{
#ifdef ATTN_X86
	if (n % 64 == 0 && have_avx512())
		return fp8_row_avx512(codes, scales, n, v);
	if (n % 64 == 0 && have_avx2_f16c())
		return fp8_row_avx2(codes, scales, n, v);
#endif
	for (size_t i = 0; i < n; i++)
		v[i] = srt_fp8_e4m3_to_f32(codes[i]) * srt_e8m0_to_f32(scales[i / 64]);
	return 0;
}

static float round_bf16_scalar(float x)
{
	return srt_round_bf16(x);
}

#ifdef ATTN_X86
__attribute__((target("avx512f,avx2"))) static void ix_weigh_avx512(const double *qk,
								    const float *w, size_t nh,
								    float *t)
{
	for (size_t h = 0; h < nh; h += 8)
		_mm256_storeu_ps(t + h, ix_term8(_mm512_cvtpd_ps(_mm512_loadu_pd(qk + h)),
						 _mm256_loadu_ps(w + h)));
}

__attribute__((target("avx2"))) static void ix_weigh_avx2(const double *qk, const float *w,
							   size_t nh, float *t)
{
	for (size_t h = 0; h < nh; h += 8) {
		const __m256 f = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(
				_mm256_loadu_pd(qk + h))), _mm256_cvtpd_ps(_mm256_loadu_pd(qk + h + 4)), 1);
		_mm256_storeu_ps(t + h, ix_term8(f, _mm256_loadu_ps(w + h)));
	}
}

__attribute__((target("avx2"))) static void div_bf16_avx2(const float *x, float d, size_t n,
							   float *y)
{
	const __m256 dv = _mm256_set1_ps(d);
	for (size_t i = 0; i < n; i += 8)
		_mm256_storeu_ps(y + i, srt_round_bf16_v8(_mm256_div_ps(_mm256_loadu_ps(x + i), dv)));
}
#endif

void srt_attn_div_bf16(const float *x, float d, size_t n, float *y)
{
	size_t i = 0;
#ifdef ATTN_X86
	if (have_avx2()) { /* IEEE division, correctly rounded in every lane as in the loop */
		i = n / 8 * 8;
		div_bf16_avx2(x, d, i, y);
	}
#endif
	for (; i < n; i++)
		y[i] = round_bf16_scalar(x[i] / d);
}

void srt_attn_ix_weigh_bf16(const double *qk, const float *w, size_t nh, float *t)
{
#ifdef ATTN_X86
	if (nh % 8 == 0 && have_avx512()) {
		ix_weigh_avx512(qk, w, nh, t);
		return;
	}
	if (nh % 8 == 0 && have_avx2()) {
		ix_weigh_avx2(qk, w, nh, t);
		return;
	}
#endif
	for (size_t h = 0; h < nh; h++) {
		float sc = round_bf16_scalar((float)qk[h]);
		t[h] = round_bf16_scalar((sc > 0 ? sc : 0.0f) * w[h]);
	}
}

#ifdef ATTN_X86
/* The 8x8 transpose of doubles: r[i][j] -> r[j][i]. */
__attribute__((target("avx512f"))) static inline void transpose8_pd(__m512d r[8])
{
	__m512d t[8], u[8];
	for (int i = 0; i < 8; i += 2) { /* pairs of rows, element pairs interleaved */
		t[i] = _mm512_unpacklo_pd(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_pd(r[i], r[i + 1]);
	}
	/* 128-bit pieces of four rows: 0/2 and 1/3 of each group of four */
	const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
	const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
	for (int g = 0; g < 8; g += 4)
		for (int i = 0; i < 2; i++) {
			u[g + i] = _mm512_permutex2var_pd(t[g + i], lo, t[g + 2 + i]);
			u[g + 2 + i] = _mm512_permutex2var_pd(t[g + i], hi, t[g + 2 + i]);
		}
	for (int i = 0; i < 4; i++) { /* 256-bit halves of the two groups */
		r[i] = _mm512_shuffle_f64x2(u[i], u[4 + i], 0x44);
		r[4 + i] = _mm512_shuffle_f64x2(u[i], u[4 + i], 0xEE);
	}
}

/* Keys in the lanes, eight at a time (two such groups a pass: independent sums): their rows
 * of qk transposed eight heads at a time, each head's term for the eight keys by ix_term8
 * (the floats of srt_attn_ix_weigh_bf16), added to the keys' sums in ascending heads. */
__attribute__((target("avx512f,avx2"))) static inline __m512d ix_sum8(__m512d tot,
								      const double *qk, size_t nh,
								      const float *w)
{
	__m512d r[8];
	for (size_t k = 0; k < 8; k++)
		r[k] = _mm512_loadu_pd(qk + k * nh);
	transpose8_pd(r); /* r[i]: head i of the eight keys */
	for (size_t i = 0; i < 8; i++)
		tot = _mm512_add_pd(tot, _mm512_cvtps_pd(ix_term8(_mm512_cvtpd_ps(r[i]),
								  _mm256_set1_ps(w[i]))));
	return tot;
}

__attribute__((target("avx512f,avx2"))) static inline void ix_store8(double *out, __m512d tot)
{
	_mm512_storeu_pd(out, _mm512_cvtps_pd(srt_round_bf16_v8(_mm512_cvtpd_ps(tot))));
}

__attribute__((target("avx512f,avx2"))) static size_t ix_score_avx512(const double *qk,
								      const float *w, size_t nh,
								      size_t ne, double *out)
{
	size_t e = 0;
	if (nh % 8 != 0)
		return 0;
	for (; e + 16 <= ne; e += 16) {
		__m512d t0 = _mm512_setzero_pd(), t1 = t0;
		for (size_t h = 0; h < nh; h += 8) {
			t0 = ix_sum8(t0, qk + e * nh + h, nh, w + h);
			t1 = ix_sum8(t1, qk + (e + 8) * nh + h, nh, w + h);
		}
		ix_store8(out + e, t0);
		ix_store8(out + e + 8, t1);
	}
	for (; e + 8 <= ne; e += 8) {
		__m512d t0 = _mm512_setzero_pd();
		for (size_t h = 0; h < nh; h += 8)
			t0 = ix_sum8(t0, qk + e * nh + h, nh, w + h);
		ix_store8(out + e, t0);
	}
	return e;
}
#endif

void srt_attn_ix_score_bf16(const double *qk, const float *w, size_t nh, size_t ne, double *out)
{
	size_t e = 0;
#ifdef ATTN_X86
	if (have_avx512())
		e = ix_score_avx512(qk, w, nh, ne, out);
#endif
	for (; e < ne; e++) { /* a key at a time, the heads' terms vectorised */
		double tot = 0;
		float t[64];
		for (size_t h0 = 0; h0 < nh; h0 += 64) {
			size_t n = nh - h0 < 64 ? nh - h0 : 64;
			srt_attn_ix_weigh_bf16(qk + e * nh + h0, w + h0, n, t);
			for (size_t h = 0; h < n; h++)
				tot += t[h];
		}
		out[e] = round_bf16_scalar((float)tot);
	}
}

void srt_attn_fp4_row(const uint8_t *codes, const uint8_t *scales, size_t d, float *v)
{
#ifdef ATTN_X86
	if (d % 32 == 0 && have_avx512()) {
		fp4_row_avx512(codes, scales, d, v);
		return;
	}
	if (d % 32 == 0 && have_avx2()) {
		fp4_row_avx2(codes, scales, d, v);
		return;
	}
#endif
	for (size_t i = 0; i < d; i++)
		v[i] = srt_fp4_e2m1_to_f32(srt_fp4_get(codes, i)) * srt_e8m0_to_f32(scales[i / 32]);
}

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

/* pv's single outputs [i0, n) for nh heads: each output's scalar chain (0, then + in ascending
 * k), the tail of every multi-head pv kernel (a function without the fma target, so no
 * contraction is possible). */
static void pv_tail(const float *const *p, size_t nh, const float *v, size_t ld, size_t i0,
		    size_t n, size_t K, float *const *y)
{
	for (size_t i = i0; i < n; i++)
		for (size_t h = 0; h < nh; h++) {
			float s = 0;
			for (size_t k = 0; k < K; k++)
				s += p[h][k] * v[k * ld + i];
			y[h][i] = s;
		}
}

/*
 * The vector pass of the float32 p·v kernels, one body for every width and mode: while NV
 * vectors of W outputs are left, outputs [i, i + NV·W) of NH heads (row pointers P[h], Y[h])
 * per step, each output's chain 0, then + P[h][k]·v[k][i] in k order; MADD(acc, p, w) is acc +
 * p·w (multiply then add, or one fused multiply-add where the products are exact). Each value
 * vector is loaded once for all heads. Expects v, ld, n, K and the index i in scope.
 */
/* Full unrolling of the constant-count loops of PV_PASS, so its accumulators stay in
 * registers. */
#if defined(__clang__)
#define PV_UNROLL _Pragma("unroll")
#else
#define PV_UNROLL _Pragma("GCC unroll 16")
#endif
#define PV_PASS(VT, W, NV, NH, P, Y, ZERO, SET1, LOAD, STORE, MADD)                          \
	for (; i + (size_t)(NV) * (W) <= n; i += (size_t)(NV) * (W)) {                          \
		VT acc_[NH][NV];                                                                \
		PV_UNROLL for (int h_ = 0; h_ < (NH); h_++)                                               \
			PV_UNROLL for (int q_ = 0; q_ < (NV); q_++)                                       \
				acc_[h_][q_] = ZERO();                                          \
		for (size_t k_ = 0; k_ < K; k_++) {                                             \
			VT pk_[NH];                                                             \
			PV_UNROLL for (int h_ = 0; h_ < (NH); h_++)                                       \
				pk_[h_] = SET1((P)[h_][k_]);                                    \
			const float *r_ = v + k_ * ld + i;                                      \
			PV_UNROLL for (int q_ = 0; q_ < (NV); q_++) {                                     \
				const VT w_ = LOAD(r_ + (size_t)(W) * q_);                      \
				PV_UNROLL for (int h_ = 0; h_ < (NH); h_++)                               \
					acc_[h_][q_] = MADD(acc_[h_][q_], pk_[h_], w_);         \
			}                                                                       \
		}                                                                               \
		PV_UNROLL for (int h_ = 0; h_ < (NH); h_++)                                               \
			PV_UNROLL for (int q_ = 0; q_ < (NV); q_++)                                       \
				STORE((Y)[h_] + i + (size_t)(W) * q_, acc_[h_][q_]);            \
	}
#define PV_MUL_ADD512(a, p, w) _mm512_add_ps(a, _mm512_mul_ps(p, w))
#define PV_MUL_ADD256(a, p, w) _mm256_add_ps(a, _mm256_mul_ps(p, w))
#define PV_FMA512(a, p, w) _mm512_fmadd_ps(p, w, a)
#define PV_FMA256(a, p, w) _mm256_fmadd_ps(p, w, a)
#define PV_PASS512(NV, NH, P, Y, MADD)                                                          \
	PV_PASS(__m512, 16, NV, NH, P, Y, _mm512_setzero_ps, _mm512_set1_ps, _mm512_loadu_ps,   \
		_mm512_storeu_ps, MADD)
#define PV_PASS256(NV, NH, P, Y, MADD)                                                          \
	PV_PASS(__m256, 8, NV, NH, P, Y, _mm256_setzero_ps, _mm256_set1_ps, _mm256_loadu_ps,    \
		_mm256_storeu_ps, MADD)

/* 128 outputs per pass (8 x 16 lanes), then 16, then single outputs. */
__attribute__((target("avx512f"))) static void pv_f32_avx512(const float *p, const float *v,
							      size_t ld, size_t n, size_t K,
							      float *y)
{
	size_t i = 0;
	PV_PASS512(8, 1, &p, &y, PV_MUL_ADD512)
	PV_PASS512(1, 1, &p, &y, PV_MUL_ADD512)
	pv_tail(&p, 1, v, ld, i, n, K, &y);
}

/* pv_f32_avx512 in 8-float vectors: 64 outputs per pass, then 8, then single outputs. */
__attribute__((target("avx2"))) static void pv_f32_avx2(const float *p, const float *v,
							 size_t ld, size_t n, size_t K, float *y)
{
	size_t i = 0;
	PV_PASS256(8, 1, &p, &y, PV_MUL_ADD256)
	PV_PASS256(1, 1, &p, &y, PV_MUL_ADD256)
	pv_tail(&p, 1, v, ld, i, n, K, &y);
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
	const float *const p[2] = {p0, p1};
	float *const y[2] = {y0, y1};
	size_t i = 0;
	PV_PASS512(4, 2, p, y, PV_MUL_ADD512)
	PV_PASS512(1, 2, p, y, PV_MUL_ADD512)
	pv_tail(p, 2, v, ld, i, n, K, y);
}

/* pv_f32_2_avx512 in 8-float vectors: 32 outputs per pass (4 x 8 lanes each), then 8, then
 * single outputs. */
__attribute__((target("avx2"))) static void pv_f32_2_avx2(const float *p0, const float *p1,
							   const float *v, size_t ld, size_t n,
							   size_t K, float *y0, float *y1)
{
	const float *const p[2] = {p0, p1};
	float *const y[2] = {y0, y1};
	size_t i = 0;
	PV_PASS256(4, 2, p, y, PV_MUL_ADD256)
	PV_PASS256(1, 2, p, y, PV_MUL_ADD256)
	pv_tail(p, 2, v, ld, i, n, K, y);
}
#endif

#ifdef ATTN_X86
/*
 * The two-head kernels above with fused multiply-adds, for operands srt_attn_bf16_exact
 * passed: every product x·t is then an exact normal float, so round(acc + x·t) in one step
 * is the bits of the multiplication then addition, at half the floating-point operations.
 * Same chains, same order.
 */
__attribute__((target("avx2,fma"))) static void tiles_f32_2_fma(const float *x0, const float *x1,
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
				a[i] = _mm256_fmadd_ps(xa, w, a[i]);
				b[i] = _mm256_fmadd_ps(xb, w, b[i]);
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
			a = _mm256_fmadd_ps(_mm256_broadcast_ss(x0 + c), w, a);
			b = _mm256_fmadd_ps(_mm256_broadcast_ss(x1 + c), w, b);
		}
		_mm256_storeu_ps(y0 + j * 8, a);
		_mm256_storeu_ps(y1 + j * 8, b);
	}
}

__attribute__((target("avx512f"))) static void pv_f32_2_fma512(const float *p0, const float *p1,
								const float *v, size_t ld, size_t n,
								size_t K, float *y0, float *y1)
{
	const float *const p[2] = {p0, p1};
	float *const y[2] = {y0, y1};
	size_t i = 0;
	PV_PASS512(4, 2, p, y, PV_FMA512)
	if (i < n) /* the rest as the unfused kernel (same bits) */
		pv_f32_2_avx512(p0, p1, v + i, ld, n - i, K, y0 + i, y1 + i);
}

__attribute__((target("avx2,fma"))) static void pv_f32_2_fma(const float *p0, const float *p1,
							     const float *v, size_t ld, size_t n,
							     size_t K, float *y0, float *y1)
{
	const float *const p[2] = {p0, p1};
	float *const y[2] = {y0, y1};
	size_t i = 0;
	PV_PASS256(4, 2, p, y, PV_FMA256)
	if (i < n) /* the rest as the unfused kernel (same bits) */
		pv_f32_2_avx2(p0, p1, v + i, ld, n - i, K, y0 + i, y1 + i);
}

static int have_fma(void)
{
	static int v = -1;
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		__builtin_cpu_init();
		r = __builtin_cpu_supports("fma") ? 1 : 0;
		__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	}
	return r;
}

/* srt_attn_bf16_exact's test for 16 floats: low 16 bits clear, and 0 or a biased exponent
 * in [127 - 60, 127 + 60] */
__attribute__((target("avx512f"))) static int bf16_exact_avx512(const float *x, size_t n)
{
	__mmask16 bad = 0;
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m512i u = _mm512_loadu_si512((const void *)(x + i));
		const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
		const __m512i e = _mm512_srli_epi32(a, 23);
		const __mmask16 out = _mm512_cmpge_epu32_mask(_mm512_sub_epi32(e, _mm512_set1_epi32(67)),
							      _mm512_set1_epi32(121));
		bad |= _mm512_test_epi32_mask(u, _mm512_set1_epi32(0xFFFF)) |
		       (out & _mm512_test_epi32_mask(a, a));
	}
	if (bad)
		return 0;
	for (; i < n; i++)
		if (!srt_attn_bf16_exact(x + i, 1))
			return 0;
	return 1;
}

/* The same test for 8 floats: the biased exponent (0 .. 255) compared signed. */
__attribute__((target("avx2"))) static int bf16_exact_avx2(const float *x, size_t n)
{
	__m256i bad = _mm256_setzero_si256();
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(x + i));
		const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
		const __m256i e = _mm256_srli_epi32(a, 23);
		const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(67), e),
						    _mm256_cmpgt_epi32(e, _mm256_set1_epi32(187)));
		const __m256i nz = _mm256_xor_si256(_mm256_cmpeq_epi32(a, _mm256_setzero_si256()),
						    _mm256_set1_epi32(-1));
		bad = _mm256_or_si256(bad, _mm256_and_si256(u, _mm256_set1_epi32(0xFFFF)));
		bad = _mm256_or_si256(bad, _mm256_and_si256(out, nz));
	}
	if (!_mm256_testz_si256(bad, bad))
		return 0;
	for (; i < n; i++)
		if (!srt_attn_bf16_exact(x + i, 1))
			return 0;
	return 1;
}
#endif

int srt_attn_bf16_exact(const float *x, size_t n)
{
#ifdef ATTN_X86
	if (n >= 16 && have_avx512())
		return bf16_exact_avx512(x, n);
	if (n >= 8 && have_avx2())
		return bf16_exact_avx2(x, n);
#endif
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &x[i], sizeof u);
		const uint32_t e = (u & 0x7FFFFFFFu) >> 23;
		if ((u & 0xFFFFu) || ((u & 0x7FFFFFFFu) && (e < 67 || e > 187)))
			return 0;
	}
	return 1;
}

void srt_attn_dot_tiles_f32_2(const float *x0, const float *x1, const float *t, size_t k,
			      size_t nt, float *y0, float *y1, int t_exact)
{
#ifdef ATTN_X86
	if (have_avx2()) { /* AVX-512 implies AVX2 (have_avx512 checks both) */
		if (t_exact && have_fma() && srt_attn_bf16_exact(x0, k) && srt_attn_bf16_exact(x1, k))
			tiles_f32_2_fma(x0, x1, t, k, nt, y0, y1);
		else
			tiles_f32_2_avx(x0, x1, t, k, nt, y0, y1);
		return;
	}
#endif
	(void)t_exact;
	srt_attn_dot_tiles_f32(x0, t, k, nt, y0);
	srt_attn_dot_tiles_f32(x1, t, k, nt, y1);
}

void srt_attn_pv_f32_2(const float *p0, const float *p1, const float *v, size_t ld, size_t n,
		       size_t k, float *y0, float *y1, int v_exact)
{
#ifdef ATTN_X86
	if (have_avx512()) {
		if (v_exact && srt_attn_bf16_exact(p0, k) && srt_attn_bf16_exact(p1, k))
			pv_f32_2_fma512(p0, p1, v, ld, n, k, y0, y1);
		else
			pv_f32_2_avx512(p0, p1, v, ld, n, k, y0, y1);
		return;
	}
	if (have_avx2()) {
		if (v_exact && have_fma() && srt_attn_bf16_exact(p0, k) && srt_attn_bf16_exact(p1, k))
			pv_f32_2_fma(p0, p1, v, ld, n, k, y0, y1);
		else
			pv_f32_2_avx2(p0, p1, v, ld, n, k, y0, y1);
		return;
	}
#endif
	(void)v_exact;
	srt_attn_pv_f32(p0, v, ld, n, k, y0);
	srt_attn_pv_f32(p1, v, ld, n, k, y1);
}

#ifdef ATTN_X86
/*
 * Four heads over the same keys, each key vector loaded once for all four (half the key
 * traffic of two two-head calls). MADD(acc, x, w) is acc + x·w: multiplication then
 * addition, or fused (only for operands srt_attn_bf16_exact passed: exact products, the same
 * bits). Every output is the chain of tiles_f32_avx / pv_f32_avx2 (0, then + in ascending c
 * or k); only which outputs share a pass differs. Instantiated twice (the fused kernels need
 * the fma target).
 * Tiles: three tiles (24 keys) x four heads per pass, then two, then single tiles (3k + 1
 * tiles as 3(k - 1) + 2 + 2: the forward pass's 32-key blocks are 4 tiles): 12 chains of fused
 * multiply-adds in flight where the eight-head kernel had 8 (Zen 2: 4.0 -> 5.5 FMA a ns in a
 * harness over 8-128 tiles of 512 dims, warm and from L3, although the tiles are read four
 * times for 16 heads instead of twice).
 * Values: 16 outputs x four heads per pass, then 8, then single outputs (pv_tail).
 */
#define ATTN_MA(acc, x, w) _mm256_add_ps(acc, _mm256_mul_ps(x, w))
#define ATTN_FMA(acc, x, w) _mm256_fmadd_ps(x, w, acc)
/* One step of the 4 heads x 3 vectors passes (tiles and value panels): a[u][h] = MADD(a[u][h],
 * x[h][c], the vector at w[u] + o), 12 chains. */
#define ATTN_STEP_4X3(a, w, o, x, c, MADD)                                                     \
	do {                                                                                   \
		__m256 w_[3];                                                                  \
		PV_UNROLL for (int u_ = 0; u_ < 3; u_++) w_[u_] = _mm256_loadu_ps((w)[u_] + (o)); \
		PV_UNROLL for (int h_ = 0; h_ < 4; h_++) {                                     \
			const __m256 x_ = _mm256_broadcast_ss((x)[h_] + (c));                  \
			PV_UNROLL for (int u_ = 0; u_ < 3; u_++)                               \
				(a)[u_][h_] = MADD((a)[u_][h_], x_, w_[u_]);                   \
		}                                                                              \
	} while (0)
#define ATTN_F32_4(tiles, pv, tgt, MADD)                                                      \
	__attribute__((target(tgt))) static void tiles(const float *const *x, const float *t,  \
						       size_t K, size_t nt, float *const *y)   \
	{                                                                                      \
		const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3];                    \
		const float *xh[4] = {x0, x1, x2, x3};                                         \
		/* a single last tile would run 4 chains: 3k + 1 tiles as 3(k - 1) + 2 + 2 */  \
		const size_t n3 = nt % 3 == 1 && nt >= 4 ? nt - 4 : nt;                        \
		size_t j = 0;                                                                  \
		for (; j + 3 <= n3; j += 3) {                                                  \
			__m256 a[3][4];                                                        \
			PV_UNROLL for (int u = 0; u < 3; u++)                                  \
			PV_UNROLL for (int h = 0; h < 4; h++) a[u][h] = _mm256_setzero_ps();   \
			const float *tj[3] = {t + j * K * 8, t + (j + 1) * K * 8,              \
					      t + (j + 2) * K * 8};                            \
			for (size_t c = 0; c < K; c++)                                         \
				ATTN_STEP_4X3(a, tj, c * 8, xh, c, MADD);                      \
			PV_UNROLL for (int u = 0; u < 3; u++)                                  \
			PV_UNROLL for (int h = 0; h < 4; h++)                                  \
				_mm256_storeu_ps(y[h] + (j + (size_t)u) * 8, a[u][h]);         \
		}                                                                              \
		for (; j + 2 <= nt; j += 2) {                                                  \
			__m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0,     \
			       c1 = a0, d0 = a0, d1 = a0;                                      \
			const float *t0 = t + j * K * 8, *t1 = t0 + K * 8;                     \
			for (size_t c = 0; c < K; c++) {                                       \
				const __m256 w0 = _mm256_loadu_ps(t0 + c * 8);                 \
				const __m256 w1 = _mm256_loadu_ps(t1 + c * 8);                 \
				__m256 xv = _mm256_broadcast_ss(x0 + c);                       \
				a0 = MADD(a0, xv, w0), a1 = MADD(a1, xv, w1);                  \
				xv = _mm256_broadcast_ss(x1 + c);                              \
				b0 = MADD(b0, xv, w0), b1 = MADD(b1, xv, w1);                  \
				xv = _mm256_broadcast_ss(x2 + c);                              \
				c0 = MADD(c0, xv, w0), c1 = MADD(c1, xv, w1);                  \
				xv = _mm256_broadcast_ss(x3 + c);                              \
				d0 = MADD(d0, xv, w0), d1 = MADD(d1, xv, w1);                  \
			}                                                                      \
			_mm256_storeu_ps(y[0] + j * 8, a0), _mm256_storeu_ps(y[0] + j * 8 + 8, a1); \
			_mm256_storeu_ps(y[1] + j * 8, b0), _mm256_storeu_ps(y[1] + j * 8 + 8, b1); \
			_mm256_storeu_ps(y[2] + j * 8, c0), _mm256_storeu_ps(y[2] + j * 8 + 8, c1); \
			_mm256_storeu_ps(y[3] + j * 8, d0), _mm256_storeu_ps(y[3] + j * 8 + 8, d1); \
		}                                                                              \
		for (; j < nt; j++) {                                                          \
			__m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;                   \
			const float *tj = t + j * K * 8;                                       \
			for (size_t k = 0; k < K; k++) {                                       \
				const __m256 w = _mm256_loadu_ps(tj + k * 8);                  \
				a = MADD(a, _mm256_broadcast_ss(x0 + k), w);                   \
				b = MADD(b, _mm256_broadcast_ss(x1 + k), w);                   \
				c = MADD(c, _mm256_broadcast_ss(x2 + k), w);                   \
				d = MADD(d, _mm256_broadcast_ss(x3 + k), w);                   \
			}                                                                      \
			_mm256_storeu_ps(y[0] + j * 8, a), _mm256_storeu_ps(y[1] + j * 8, b);  \
			_mm256_storeu_ps(y[2] + j * 8, c), _mm256_storeu_ps(y[3] + j * 8, d);  \
		}                                                                              \
	}                                                                                      \
	__attribute__((target(tgt))) static void pv(const float *const *p, const float *v,     \
						    size_t ld, size_t n, size_t K,             \
						    float *const *y)                           \
	{                                                                                      \
		const float *p0 = p[0], *p1 = p[1], *p2 = p[2], *p3 = p[3];                    \
		size_t i = 0;                                                                  \
		for (; i + 16 <= n; i += 16) {                                                 \
			__m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0,     \
			       c1 = a0, d0 = a0, d1 = a0;                                      \
			for (size_t k = 0; k < K; k++) {                                       \
				const float *r = v + k * ld + i;                               \
				const __m256 w0 = _mm256_loadu_ps(r), w1 = _mm256_loadu_ps(r + 8); \
				__m256 pk = _mm256_broadcast_ss(p0 + k);                       \
				a0 = MADD(a0, pk, w0), a1 = MADD(a1, pk, w1);                  \
				pk = _mm256_broadcast_ss(p1 + k);                              \
				b0 = MADD(b0, pk, w0), b1 = MADD(b1, pk, w1);                  \
				pk = _mm256_broadcast_ss(p2 + k);                              \
				c0 = MADD(c0, pk, w0), c1 = MADD(c1, pk, w1);                  \
				pk = _mm256_broadcast_ss(p3 + k);                              \
				d0 = MADD(d0, pk, w0), d1 = MADD(d1, pk, w1);                  \
			}                                                                      \
			_mm256_storeu_ps(y[0] + i, a0), _mm256_storeu_ps(y[0] + i + 8, a1);    \
			_mm256_storeu_ps(y[1] + i, b0), _mm256_storeu_ps(y[1] + i + 8, b1);    \
			_mm256_storeu_ps(y[2] + i, c0), _mm256_storeu_ps(y[2] + i + 8, c1);    \
			_mm256_storeu_ps(y[3] + i, d0), _mm256_storeu_ps(y[3] + i + 8, d1);    \
		}                                                                              \
		for (; i + 8 <= n; i += 8) {                                                   \
			__m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;                   \
			for (size_t k = 0; k < K; k++) {                                       \
				const __m256 w = _mm256_loadu_ps(v + k * ld + i);              \
				a = MADD(a, _mm256_broadcast_ss(p0 + k), w);                   \
				b = MADD(b, _mm256_broadcast_ss(p1 + k), w);                   \
				c = MADD(c, _mm256_broadcast_ss(p2 + k), w);                   \
				d = MADD(d, _mm256_broadcast_ss(p3 + k), w);                   \
			}                                                                      \
			_mm256_storeu_ps(y[0] + i, a), _mm256_storeu_ps(y[1] + i, b);          \
			_mm256_storeu_ps(y[2] + i, c), _mm256_storeu_ps(y[3] + i, d);          \
		}                                                                              \
		pv_tail(p, 4, v, ld, i, n, K, y);                                           \
	}
ATTN_F32_4(tiles_f32_4_avx, pv_f32_4_avx2, "avx2", ATTN_MA)
ATTN_F32_4(tiles_f32_4_fma, pv_f32_4_fma, "avx2,fma", ATTN_FMA)

/* 1 when the k values of each of the nh arrays pass srt_attn_bf16_exact. */
static int exact_n(const float *const *x, size_t nh, size_t k)
{
	for (size_t h = 0; h < nh; h++)
		if (!srt_attn_bf16_exact(x[h], k))
			return 0;
	return 1;
}
#endif

#ifdef ATTN_X86
/*
 * p·v over values in 16-dim panels (srt_attn_v_panels): per pass, 4 heads x three half panels
 * (8 heads: two such passes; 12 chains of multiply-adds in flight, where 8 heads x half a
 * panel had 8: pv_panel_fma's samples at 64K tokens of context 3.9 -> 2.9 % of a decode step),
 * or NH heads (a constant: 2 or 1) x the 16 outputs of one panel. A panel's keys are one
 * contiguous run (16 floats a key), where the row-major kernels read one cache line per key,
 * ld floats apart: a row's values (256 keys: 512 KiB) do not stay in L1, and the strided pass
 * waited on every key (16 heads x 256 keys x 512 dims, warm caches: 58 us against 106 us).
 * Each output's chain is 0 (or, with cont, the y the earlier keys left), then + p[k]·v[k][i] in
 * k order: the bits of srt_attn_pv_f32. MADD as for ATTN_F32_4.
 */
#define ATTN_PANEL(name, tgt, MADD)                                                            \
	__attribute__((target(tgt))) static inline __attribute__((always_inline)) void         \
	name##_nh(const int NH, const float *const *p, const float *vp, size_t ldk, size_t n,  \
		  size_t K, float *const *y, int cont)                                         \
	{                                                                                      \
		const float *ph[4];                                                            \
		PV_UNROLL for (int h = 0; h < NH; h++) ph[h] = p[h];                           \
		for (size_t i = 0; i < n; i += 16) {                                           \
			const float *pan = vp + i * ldk;                                       \
			__m256 a[4][2];                                                        \
			PV_UNROLL for (int h = 0; h < NH; h++) {                               \
				a[h][0] = cont ? _mm256_loadu_ps(y[h] + i) : _mm256_setzero_ps(); \
				a[h][1] = cont ? _mm256_loadu_ps(y[h] + i + 8) : _mm256_setzero_ps(); \
			}                                                                      \
			for (size_t k = 0; k < K; k++) {                                       \
				const __m256 w0 = _mm256_loadu_ps(pan + k * 16);               \
				const __m256 w1 = _mm256_loadu_ps(pan + k * 16 + 8);           \
				PV_UNROLL for (int h = 0; h < NH; h++) {                       \
					const __m256 pk = _mm256_broadcast_ss(ph[h] + k);      \
					a[h][0] = MADD(a[h][0], pk, w0);                       \
					a[h][1] = MADD(a[h][1], pk, w1);                       \
				}                                                              \
			}                                                                      \
			PV_UNROLL for (int h = 0; h < NH; h++) {                               \
				_mm256_storeu_ps(y[h] + i, a[h][0]);                           \
				_mm256_storeu_ps(y[h] + i + 8, a[h][1]);                       \
			}                                                                      \
		}                                                                              \
	}                                                                                      \
	/* four heads x 24 outputs (three half panels) per pass: 12 chains in flight, then     \
	 * four heads x 8 outputs */                                                           \
	__attribute__((target(tgt))) static void name##_4x3(const float *const *p,            \
							    const float *vp, size_t ldk,      \
							    size_t n, size_t K,               \
							    float *const *y, int cont)        \
	{                                                                                      \
		const float *ph[4];                                                            \
		PV_UNROLL for (int h = 0; h < 4; h++) ph[h] = p[h];                            \
		size_t i = 0;                                                                  \
		for (; i + 24 <= n; i += 24) {                                                 \
			const float *pan[3];                                                   \
			__m256 a[3][4];                                                        \
			PV_UNROLL for (int u = 0; u < 3; u++) {                                \
				const size_t o = i + 8 * (size_t)u;                            \
				pan[u] = vp + (o & ~(size_t)15) * ldk + (o & 8);               \
				PV_UNROLL for (int h = 0; h < 4; h++)                          \
					a[u][h] = cont ? _mm256_loadu_ps(y[h] + o) : _mm256_setzero_ps(); \
			}                                                                      \
			for (size_t k = 0; k < K; k++)                                         \
				ATTN_STEP_4X3(a, pan, k * 16, ph, k, MADD);                    \
			PV_UNROLL for (int u = 0; u < 3; u++)                                  \
			PV_UNROLL for (int h = 0; h < 4; h++)                                  \
				_mm256_storeu_ps(y[h] + i + 8 * (size_t)u, a[u][h]);           \
		}                                                                              \
		for (; i < n; i += 8) {                                                        \
			const float *pan = vp + (i & ~(size_t)15) * ldk + (i & 8);             \
			__m256 a[4];                                                           \
			PV_UNROLL for (int h = 0; h < 4; h++)                                  \
				a[h] = cont ? _mm256_loadu_ps(y[h] + i) : _mm256_setzero_ps(); \
			for (size_t k = 0; k < K; k++) {                                       \
				const __m256 w = _mm256_loadu_ps(pan + k * 16);                \
				PV_UNROLL for (int h = 0; h < 4; h++)                          \
					a[h] = MADD(a[h], _mm256_broadcast_ss(ph[h] + k), w);  \
			}                                                                      \
			PV_UNROLL for (int h = 0; h < 4; h++) _mm256_storeu_ps(y[h] + i, a[h]); \
		}                                                                              \
	}                                                                                      \
	__attribute__((target(tgt))) static void name(size_t nh, const float *const *p,        \
						      const float *vp, size_t ldk, size_t n,   \
						      size_t K, float *const *y, int cont)     \
	{                                                                                      \
		if (nh == 8) {                                                                 \
			name##_4x3(p, vp, ldk, n, K, y, cont);                                 \
			name##_4x3(p + 4, vp, ldk, n, K, y + 4, cont);                         \
		} else if (nh == 4)                                                            \
			name##_4x3(p, vp, ldk, n, K, y, cont);                                 \
		else if (nh == 2)                                                              \
			name##_nh(2, p, vp, ldk, n, K, y, cont);                               \
		else                                                                           \
			name##_nh(1, p, vp, ldk, n, K, y, cont);                               \
	}
ATTN_PANEL(pv_panel_avx2, "avx2", ATTN_MA)
ATTN_PANEL(pv_panel_fma, "avx2,fma", ATTN_FMA)
#endif

/* srt_attn_ge_indices over n scores, n a multiple of 16; *nan set when one is NaN. */
__attribute__((target("avx512f"))) static int64_t ge_indices_avx512(const double *score,
								   int64_t n, double P,
								   int32_t *idx, int *nan)
{
	const __m512d p = _mm512_set1_pd(P);
	const __m512i step = _mm512_set1_epi32(16);
	__m512i j = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	__mmask16 un = 0;
	int64_t c = 0;
	for (int64_t b = 0; b < n; b += 16) {
		const __m512d v0 = _mm512_loadu_pd(score + b), v1 = _mm512_loadu_pd(score + b + 8);
		const __mmask16 m = (__mmask16)(_mm512_cmp_pd_mask(v0, p, _CMP_GE_OQ) |
						 (_mm512_cmp_pd_mask(v1, p, _CMP_GE_OQ) << 8));
		un |= (__mmask16)(_mm512_cmp_pd_mask(v0, v0, _CMP_UNORD_Q) |
				  (_mm512_cmp_pd_mask(v1, v1, _CMP_UNORD_Q) << 8));
		/* the register form of the compress, then a whole store: it writes idx[c ..
		 * c + 15] with c <= b, within idx[0 .. n) (the memory form is microcoded on
		 * some CPUs) */
		_mm512_storeu_si512(idx + c, _mm512_maskz_compress_epi32(m, j));
		c += __builtin_popcount(m);
		j = _mm512_add_epi32(j, step);
	}
	*nan = un != 0;
	return c;
}

int64_t srt_attn_ge_indices(const double *score, int64_t n, double P, int32_t *idx)
{
	int64_t c = 0, b = 0;
	int bad = 0;
	if (have_avx512()) {
		b = n / 16 * 16;
		c = ge_indices_avx512(score, b, P, idx, &bad);
	}
	for (; b < n; b++) { /* the rest: no branch on the data */
		idx[c] = (int32_t)b;
		c += score[b] >= P;
		bad |= score[b] != score[b];
	}
	return bad ? -1 : c;
}

int srt_attn_pv_panels(void)
{
#ifdef ATTN_X86
	return have_avx2() && !have_avx512();
#else
	return 0;
#endif
}

void srt_attn_v_panels(const float *v, size_t nk, size_t n, size_t k0, size_t ldk, float *vp)
{
	assert(n % 16 == 0);
	/* panel by panel: each gets one contiguous run of nk · 16 floats */
	for (size_t j = 0; j < n; j += 16)
		for (size_t k = 0; k < nk; k++)
			memcpy(vp + j * ldk + (k0 + k) * 16, v + k * n + j, 16 * sizeof(float));
}

void srt_attn_pv_f32_np(size_t nh, const float *const *p, const float *vp, size_t ldk, size_t n,
			size_t k, float *const *y, int v_exact, int cont)
{
	assert(n % 16 == 0);
	size_t h = 0;
#ifdef ATTN_X86
	if (have_avx2()) {
		while (h < nh) {
			const size_t g = nh - h >= 8 ? 8 : nh - h >= 4 ? 4 : nh - h >= 2 ? 2 : 1;
			if (v_exact && have_fma() && exact_n(p + h, g, k))
				pv_panel_fma(g, p + h, vp, ldk, n, k, y + h, cont);
			else
				pv_panel_avx2(g, p + h, vp, ldk, n, k, y + h, cont);
			h += g;
		}
		return;
	}
#endif
	(void)v_exact;
	for (; h < nh; h++)
		for (size_t i = 0; i < n; i++) {
			const float *col = vp + (i / 16) * 16 * ldk + i % 16;
			float s = cont ? y[h][i] : 0;
			for (size_t c = 0; c < k; c++)
				s += p[h][c] * col[c * 16];
			y[h][i] = s;
		}
}

void srt_attn_dot_tiles_f32_n(size_t nh, const float *const *x, const float *t, size_t k,
			      size_t nt, float *const *y, int t_exact)
{
	size_t h = 0;
#ifdef ATTN_X86
	if (have_avx2()) /* the AVX2 kernels, as srt_attn_dot_tiles_f32_2 on every x86 CPU */
		for (; h + 4 <= nh; h += 4) {
			if ((t_exact & 1) && have_fma() &&
			    ((t_exact & SRT_ATTN_X_EXACT) || exact_n(x + h, 4, k)))
				tiles_f32_4_fma(x + h, t, k, nt, y + h);
			else
				tiles_f32_4_avx(x + h, t, k, nt, y + h);
		}
#endif
	for (; h + 2 <= nh; h += 2)
		srt_attn_dot_tiles_f32_2(x[h], x[h + 1], t, k, nt, y[h], y[h + 1], t_exact & 1);
	if (h < nh)
		srt_attn_dot_tiles_f32(x[h], t, k, nt, y[h]);
}

void srt_attn_pv_f32_n(size_t nh, const float *const *p, const float *v, size_t ld, size_t n,
		       size_t k, float *const *y, int v_exact)
{
	size_t h = 0;
#ifdef ATTN_X86
	/* AVX-512 CPUs keep the two-head AVX-512 kernels */
	if (have_avx2() && !have_avx512())
		for (; h + 4 <= nh; h += 4) {
			if (v_exact && have_fma() && exact_n(p + h, 4, k))
				pv_f32_4_fma(p + h, v, ld, n, k, y + h);
			else
				pv_f32_4_avx2(p + h, v, ld, n, k, y + h);
		}
#endif
	for (; h + 2 <= nh; h += 2)
		srt_attn_pv_f32_2(p[h], p[h + 1], v, ld, n, k, y[h], y[h + 1], v_exact);
	if (h < nh)
		srt_attn_pv_f32(p[h], v, ld, n, k, y[h]);
}

void srt_attn_dot_tiles_f32(const float *x, const float *t, size_t k, size_t nt, float *y)
{
#ifdef ATTN_X86
	if (have_avx2()) {
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
	if (have_avx2()) {
		pv_f32_avx2(p, v, ld, n, k, y);
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
	if (nh % 4 == 0 && have_avx2()) {
		/* fused when every query value is a float (see qk_heads_avx512) */
		int floats = have_fma();
		for (size_t i = 0; i < k * nh && floats; i++)
			floats = (double)(float)qt[i] == qt[i];
		if (floats)
			qk_heads_avx2_fma(qt, nh, keys, k, ne, y);
		else
			qk_heads_avx2_sep(qt, nh, keys, k, ne, y);
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

#ifdef ATTN_X86
/* Rows r[0 .. 8) of 8 columns each as 8 tile vectors t[c·8 + l] = r[l][c] (moves only). */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
tile8_store(const __m256 *r, float *t)
{
	__m256 u[8], v[8];
	PV_UNROLL for (int l = 0; l < 8; l += 2) {
		u[l] = _mm256_unpacklo_ps(r[l], r[l + 1]);
		u[l + 1] = _mm256_unpackhi_ps(r[l], r[l + 1]);
	}
	PV_UNROLL for (int l = 0; l < 8; l += 4) {
		v[l] = _mm256_shuffle_ps(u[l], u[l + 2], _MM_SHUFFLE(1, 0, 1, 0));
		v[l + 1] = _mm256_shuffle_ps(u[l], u[l + 2], _MM_SHUFFLE(3, 2, 3, 2));
		v[l + 2] = _mm256_shuffle_ps(u[l + 1], u[l + 3], _MM_SHUFFLE(1, 0, 1, 0));
		v[l + 3] = _mm256_shuffle_ps(u[l + 1], u[l + 3], _MM_SHUFFLE(3, 2, 3, 2));
	}
	/* v[0..3]: columns 0, 1, 2, 3 (rows 0-3 | rows 0-3 of columns 4..7 in the high half),
	 * v[4..7]: the same for rows 4-7 */
	PV_UNROLL for (int q = 0; q < 4; q++) {
		_mm256_storeu_ps(t + (size_t)q * 8, _mm256_permute2f128_ps(v[q], v[4 + q], 0x20));
		_mm256_storeu_ps(t + (4 + (size_t)q) * 8, _mm256_permute2f128_ps(v[q], v[4 + q], 0x31));
	}
}

/* One tile (srt_attn_tile's layout, k = nope + rd) of the 8 FP8 entries e[0 .. 8): each
 * block of 8 columns decoded as fp8_row_avx2 decodes it (the E4M3 code as a half, times 2^8
 * times the block scale: the same floats) or widened from the rope's bf16 words, for the 8
 * keys, then transposed into place; the decoded rows are never stored. 0, with nothing
 * written, when a key has a NaN code or a scale code above 246 (fp8_row_avx2's scalar
 * blocks). *proven: every scale code in the range FP8_EXACT_CODE proves exact. */
__attribute__((target("avx2,f16c"))) static int fp8_tile_avx2(const uint8_t *const *e, size_t nope,
								size_t rd, float *t, int *proven)
{
	const __m128i mask = _mm_set1_epi16((short)0xBF80);
	const size_t nb = nope / 64;
	int pr = 1;
	for (int l = 0; l < 8; l++) {
		const uint8_t *sc = e[l] + nope + 2 * rd;
		for (size_t b = 0; b < nb; b++) {
			if (sc[b] > 246 || fp8_block_nan_avx2(e[l] + 64 * b))
				return 0;
			pr &= FP8_EXACT_CODE(sc[b]);
		}
	}
	for (size_t b = 0; b < nb; b++) {
		__m256 f[8];
		PV_UNROLL for (int l = 0; l < 8; l++)
			f[l] = fp8_f256_avx2(e[l][nope + 2 * rd + b]);
		for (size_t c = 64 * b; c < 64 * b + 64; c += 8) {
			__m256 r[8];
			PV_UNROLL for (int l = 0; l < 8; l++) {
				const __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)(e[l] + c));
				const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(x), 7), mask);
				r[l] = _mm256_mul_ps(_mm256_cvtph_ps(h), f[l]);
			}
			tile8_store(r, t + c * 8);
		}
	}
	for (size_t c = 0; c < rd; c += 8) {
		__m256 r[8];
		PV_UNROLL for (int l = 0; l < 8; l++)
			r[l] = _mm256_castsi256_ps(_mm256_slli_epi32(
				_mm256_cvtepu16_epi32(_mm_loadu_si128(
					(const __m128i *)(const void *)(e[l] + nope + 2 * c))),
				16));
		tile8_store(r, t + (nope + c) * 8);
	}
	*proven = pr;
	return 1;
}

/* Full tiles (8 rows) by 8x8 transposes of 8 columns at a time (moves only: the same floats);
 * returns the columns done (a multiple of 8). */
__attribute__((target("avx2"))) static size_t tile_avx2(const float *w, size_t k, size_t ldw,
							 float *t)
{
	size_t c = 0;
	for (; c + 8 <= k; c += 8) {
		__m256 r[8];
		for (int l = 0; l < 8; l++)
			r[l] = _mm256_loadu_ps(w + (size_t)l * ldw + c);
		tile8_store(r, t + c * 8);
	}
	return c;
}
#endif

void srt_attn_tile(const float *w, size_t n, size_t k, size_t ldw, float *t)
{
	size_t nt = (n + 7) / 8;
#ifdef ATTN_X86
	if (have_avx2()) {
		size_t j = 0;
		for (; j < n / 8; j++) {
			size_t c = tile_avx2(w + j * 8 * ldw, k, ldw, t + j * k * 8);
			for (; c < k; c++)
				for (size_t l = 0; l < 8; l++)
					t[(j * k + c) * 8 + l] = w[(j * 8 + l) * ldw + c];
		}
		for (; j < nt; j++) /* the last, partial tile */
			for (size_t c = 0; c < k; c++)
				for (size_t l = 0; l < 8; l++) {
					size_t r = j * 8 + l;
					t[(j * k + c) * 8 + l] = r < n ? w[r * ldw + c] : 0.0f;
				}
		return;
	}
#endif
	for (size_t j = 0; j < nt; j++)
		for (size_t c = 0; c < k; c++)
			for (size_t l = 0; l < 8; l++) {
				size_t r = j * 8 + l;
				t[(j * k + c) * 8 + l] = r < n ? w[r * ldw + c] : 0.0f;
			}
}

int srt_attn_fp8_tile(const uint8_t *const *e, size_t nope, size_t rd, float *t, int *proven)
{
#ifdef ATTN_X86
	if (nope % 64 == 0 && rd % 8 == 0 && have_avx2_f16c())
		return fp8_tile_avx2(e, nope, rd, t, proven);
#endif
	(void)e, (void)nope, (void)rd, (void)t, (void)proven;
	return 0;
}

void srt_attn_dot_tiles(const float *x, const float *t, size_t k, size_t nt, double *y)
{
#ifdef ATTN_X86
	if (have_avx512()) {
		tiles_avx512(x, t, k, nt, y);
		return;
	}
	if (have_avx2()) {
		tiles_avx2(x, t, k, nt, y);
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
		if (have_avx2_f16c()) {
			tiles_fp8_avx2(x, t8, sc, m->k, nt, y);
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
	if (have_avx2()) {
		tiles_bf16_avx2(x, t, m->k, nt, y);
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
	if (have_avx2()) {
		pv_avx2(p, v, ld, n, k, y);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		y[i] = 0;
	for (size_t c = 0; c < k; c++)
		for (size_t i = 0; i < n; i++)
			y[i] += p[c] * (double)v[c * ld + i];
}

/*
 * ---- AVX512_BF16 q·k and p·v (reference profile) --------------------------------------------
 *
 * Why VDPBF16PS gives the float32 loops' bits. Per float32 lane j it computes acc +=
 * a[2j+1]·b[2j+1], rounded to nearest even, then acc += a[2j]·b[2j], rounded, with denormal
 * inputs and results flushed to zero (the Intel SDM; srt_gemm_bf16dp_usable checks this
 * machine's rounding by a known-answer test). The loops do y += x[c]·v[c] for ascending c,
 * one float32 product then one float32 addition; the product of two bf16 values (8
 * significant bits each) is exact in float32. So with x[c] in the high word and x[c + 1] in
 * the low word of a dword (srt_attn_bf16_pairs), one instruction is the loop's steps c and
 * c + 1 with the same two roundings. The chain starts at +0 as y = 0 does (+0 + -0 = +0 in
 * both), and since a chain started at +0 is never -0, adding the +0 products of padding
 * words leaves it as it is.
 * What remains is that nothing is ever denormal and nothing overflows, which
 * srt_attn_dp_fits ensures for operands srt_attn_bf16_span accepted (normal bf16 values or
 * ±0; a denormal input would be read as 0). With biased exponents lo_a, lo_b of the smallest
 * nonzero values, a is a multiple of 2^(lo_a - 134) (8 significant bits) and b of
 * 2^(lo_b - 134), so every product is a multiple of 2^(lo_a + lo_b - 268) >= 2^-126 when
 * lo_a + lo_b >= 142. A sum of multiples of 2^-126 is one too, and its float32 rounding
 * stays one (either the sum is representable or the rounding is to a coarser multiple of
 * the ulp, itself a multiple of 2^-126): every partial sum is 0 or at least 2^-126, normal,
 * and products are at least 2^-126 too. Above: |a| < 2^(hi_a - 126), |b| < 2^(hi_b - 126),
 * so n <= 2^15 products sum to less than 2^(hi_a + hi_b - 252 + 15) <= 2^127 when hi_a + hi_b
 * <= 364, and no partial sum (nor its rounding) reaches the float32 overflow at 2^128.
 * The bounds are on the sums of the two exponents, not on each value: a fixed range such as
 * [2^-56, 2^61) for every value keeps the products normal but lets 512 products of 2^121
 * overflow. For the reference profile: head_dim 512 terms per q·k, a few thousand keys per
 * p·v; the probabilities are below 2 (biased exponent <= 127), so values below 2^111 fit, and
 * probabilities down to 2^(15 - lo_v) (lo_v the values' smallest biased exponent).
 */
#ifdef ATTN_X86
int srt_attn_dp_usable(void)
{
	return have_avx512() && srt_gemm_bf16dp_usable();
}

__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline __m512bh
as_bh512(__m512i v)
{
	__m512bh r;
	memcpy(&r, &v, sizeof r);
	return r;
}

/* acc + the bf16 pair dot products of a with the dword at b in every lane: VDPBF16PS with
 * the dword broadcast from memory inside the instruction ({1to16}). GCC 12 does not fold the
 * _mm512_set1_epi32 into it and emits a VPBROADCASTD per product (as for the indexer's
 * VPDPBUSD, attn_ix.c), so GCC gets the instruction written out; clang folds the intrinsic. */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline __m512
dpbf16_bcst(__m512 acc, __m512bh a, const uint32_t *b)
{
#if defined(__clang__)
	return _mm512_dpbf16_ps(acc, a, as_bh512(_mm512_set1_epi32((int)*b)));
#else
	__asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*b));
	return acc;
#endif
}

/* NKP keys (a constant) against the 16 query lanes: one accumulator per key, each qp load
 * serves all NKP, the key dword broadcast inside the product (dpbf16_bcst). */
#define QK_KEYS 8
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
qk_pass(const uint32_t *qp, const uint32_t *kr, size_t hd2, const size_t nkp, float *y)
{
	__m512 acc[QK_KEYS];
	PV_UNROLL
	for (size_t i = 0; i < nkp; i++)
		acc[i] = _mm512_setzero_ps();
	for (size_t j = 0; j < hd2; j++) {
		const __m512bh q = as_bh512(_mm512_loadu_si512((const void *)(qp + 16 * j)));
		PV_UNROLL
		for (size_t i = 0; i < nkp; i++)
			acc[i] = dpbf16_bcst(acc[i], q, kr + i * hd2 + j);
	}
	PV_UNROLL
	for (size_t i = 0; i < nkp; i++)
		_mm512_storeu_ps(y + 16 * i, acc[i]);
}

__attribute__((target("avx512f,avx512bf16"))) static void
qk_dp(const uint32_t *qp, const uint32_t *keys, size_t hd2, size_t nk, float *y)
{
	size_t k = 0;
	for (; k + QK_KEYS <= nk; k += QK_KEYS)
		qk_pass(qp, keys + k * hd2, hd2, QK_KEYS, y + 16 * k);
	for (; k < nk; k++)
		qk_pass(qp, keys + k * hd2, hd2, 1, y + 16 * k);
}

/* NH heads (a constant) x 64 value dims from c0: 4 zmm accumulators per head, each value
 * load serves all NH heads, the probability dwords broadcast. */
#define PV_DP_HEADS 4
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
pv_dp_pass(const uint32_t *const *pp, const uint32_t *vp, size_t n, size_t np, size_t c0,
	   const size_t nh, float *const *y)
{
	__m512 acc[PV_DP_HEADS][4];
	PV_UNROLL
	for (size_t h = 0; h < nh; h++)
		PV_UNROLL
		for (size_t i = 0; i < 4; i++)
			acc[h][i] = _mm512_setzero_ps();
	for (size_t j = 0; j < np; j++) {
		const uint32_t *vr = vp + j * n + c0;
		__m512bh v[4];
		PV_UNROLL
		for (size_t i = 0; i < 4; i++)
			v[i] = as_bh512(_mm512_loadu_si512((const void *)(vr + 16 * i)));
		PV_UNROLL
		for (size_t h = 0; h < nh; h++) {
			const __m512bh p = as_bh512(_mm512_set1_epi32((int)pp[h][j]));
			PV_UNROLL
			for (size_t i = 0; i < 4; i++)
				acc[h][i] = _mm512_dpbf16_ps(acc[h][i], v[i], p);
		}
	}
	PV_UNROLL
	for (size_t h = 0; h < nh; h++)
		PV_UNROLL
		for (size_t i = 0; i < 4; i++)
			_mm512_storeu_ps(y[h] + c0 + 16 * i, acc[h][i]);
}

__attribute__((target("avx512f,avx512bf16"))) static void
pv_dp(size_t nh, const uint32_t *const *pp, const uint32_t *vp, size_t n, size_t np,
      float *const *y)
{
	size_t h = 0;
	for (; h + PV_DP_HEADS <= nh; h += PV_DP_HEADS)
		for (size_t c0 = 0; c0 < n; c0 += 64)
			pv_dp_pass(pp + h, vp, n, np, c0, PV_DP_HEADS, y + h);
	for (; h < nh; h++)
		for (size_t c0 = 0; c0 < n; c0 += 64)
			pv_dp_pass(pp + h, vp, n, np, c0, 1, y + h);
}

/* srt_attn_bf16_span over 16 floats at a time: the OR of all bits (the low halves must stay
 * 0), the largest magnitude (exponent 255: inf or NaN) and the smallest nonzero one (exponent
 * 0: denormal), as magnitude - 1 so that a zero wraps to the largest value, out of the min. */
struct span_acc {
	__m512i any, mx, mn1;
};

__attribute__((target("avx512f"), always_inline)) static inline void
span_init(struct span_acc *s)
{
	s->any = s->mx = _mm512_setzero_si512();
	s->mn1 = _mm512_set1_epi32(-1);
}

__attribute__((target("avx512f"), always_inline)) static inline void
span16(struct span_acc *s, __m512i u)
{
	const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
	s->any = _mm512_or_si512(s->any, u);
	s->mx = _mm512_max_epu32(s->mx, a);
	s->mn1 = _mm512_min_epu32(s->mn1, _mm512_sub_epi32(a, _mm512_set1_epi32(1)));
}

/* srt_attn_bf16_span's result from the accumulated s. */
__attribute__((target("avx512f"))) static int span_end(const struct span_acc *s, uint8_t *lo,
						       uint8_t *hi)
{
	const uint32_t mx = (uint32_t)_mm512_reduce_max_epu32(s->mx);
	const uint32_t mn = (uint32_t)_mm512_reduce_min_epu32(s->mn1) + 1u; /* 0: all zero */
	if (_mm512_test_epi32_mask(s->any, _mm512_set1_epi32(0xFFFF)) || mx >= 0x7F800000u ||
	    (mn && mn < 0x00800000u))
		return 0;
	*lo = mn ? (uint8_t)(mn >> 23) : 255;
	*hi = mn ? (uint8_t)(mx >> 23) : 0;
	return 1;
}

/* The pairs of 16 floats u (srt_attn_bf16_pairs): per 64-bit lane (x[2j] low, x[2j + 1] high
 * dword), (x[2j] & 0xFFFF0000) | x[2j + 1] >> 16, narrowed to 32 bits. */
__attribute__((target("avx512f"), always_inline)) static inline __m256i pairs16(__m512i u)
{
	return _mm512_cvtepi64_epi32(_mm512_or_si512(
		_mm512_and_si512(u, _mm512_set1_epi64(0xFFFF0000)), _mm512_srli_epi64(u, 48)));
}

/* Two keys' values as one pair-interleaved row (srt_attn_bf16_vpairs) */
__attribute__((target("avx512f"), always_inline)) static inline __m512i vpairs16(__m512i a,
										  __m512i b)
{
	return _mm512_or_si512(_mm512_and_si512(a, _mm512_set1_epi32((int)0xFFFF0000u)),
			       _mm512_srli_epi32(b, 16));
}

__attribute__((target("avx512f"))) static int bf16_span_avx512(const float *x, size_t n,
							       uint8_t *lo, uint8_t *hi)
{
	struct span_acc s;
	uint8_t l, h;
	size_t i = 0;
	span_init(&s);
	for (; i + 16 <= n; i += 16)
		span16(&s, _mm512_loadu_si512((const void *)(x + i)));
	if (!span_end(&s, &l, &h))
		return 0;
	for (; i < n; i++) {
		uint8_t l1, h1;
		if (!srt_attn_bf16_span(x + i, 1, &l1, &h1))
			return 0;
		l = l1 < l ? l1 : l;
		h = h1 > h ? h1 : h;
	}
	*lo = l;
	*hi = h;
	return 1;
}

/* Pairs of n = 16 m contiguous floats (ws == 1). */
__attribute__((target("avx512f"))) static void pairs_avx512(const float *x, size_t n,
							    uint32_t *w)
{
	for (size_t i = 0; i < n; i += 16)
		_mm256_storeu_si256((__m256i *)(void *)(w + i / 2),
				    pairs16(_mm512_loadu_si512((const void *)(x + i))));
}

__attribute__((target("avx512f"))) static void vpairs_avx512(const float *v0, const float *v1,
							     size_t n, uint32_t *w)
{
	for (size_t c = 0; c < n; c += 16) {
		const __m512i a = _mm512_loadu_si512((const void *)(v0 + c));
		const __m512i b = v1 ? _mm512_loadu_si512((const void *)(v1 + c))
				     : _mm512_setzero_si512();
		_mm512_storeu_si512((void *)(w + c), vpairs16(a, b));
	}
}

/* srt_attn_bf16_qpairs: per dim pair j, the qwords (q_l[2j], q_l[2j + 1]) of 8 heads by one
 * gather (heads past nh masked to 0), paired as pairs16 does. */
__attribute__((target("avx512f"))) static void qpairs_avx512(const float *q, size_t nh,
							     size_t hd, uint32_t *qp)
{
	const __m256i step = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
	const __m256i i0 = _mm256_mullo_epi32(step, _mm256_set1_epi32((int)(hd / 2)));
	const __m256i i1 = _mm256_add_epi32(i0, _mm256_set1_epi32((int)(4 * hd)));
	const __mmask8 m0 = (__mmask8)(nh >= 8 ? 0xFF : (1u << nh) - 1);
	const __mmask8 m1 = (__mmask8)(nh >= 16 ? 0xFF : nh <= 8 ? 0 : (1u << (nh - 8)) - 1);
	for (size_t j = 0; j < hd / 2; j++) {
		const __m256i o = _mm256_set1_epi32((int)j);
		const __m512i g0 = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), m0,
							       _mm256_add_epi32(i0, o), q, 8);
		const __m512i g1 = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), m1,
							       _mm256_add_epi32(i1, o), q, 8);
		_mm256_storeu_si256((__m256i *)(void *)(qp + 16 * j), pairs16(g0));
		_mm256_storeu_si256((__m256i *)(void *)(qp + 16 * j + 8), pairs16(g1));
	}
}

/* srt_attn_bf16_keys in one pass over each pair of keys (hd a multiple of 16). */
__attribute__((target("avx512f"))) static int keys_avx512(const float *keys, size_t nk,
							  size_t hd, uint32_t *kp, uint32_t *vp,
							  uint8_t *lo, uint8_t *hi)
{
	struct span_acc s;
	span_init(&s);
	for (size_t k = 0; k < nk; k += 2) {
		const float *k0 = keys + k * hd, *k1 = k0 + hd;
		uint32_t *p0 = kp + k * (hd / 2), *p1 = p0 + hd / 2, *v = vp + k / 2 * hd;
		for (size_t c = 0; c < hd; c += 16) {
			const __m512i a = _mm512_loadu_si512((const void *)(k0 + c));
			__m512i b = _mm512_setzero_si512();
			span16(&s, a);
			_mm256_storeu_si256((__m256i *)(void *)(p0 + c / 2), pairs16(a));
			if (k + 1 < nk) {
				b = _mm512_loadu_si512((const void *)(k1 + c));
				span16(&s, b);
				_mm256_storeu_si256((__m256i *)(void *)(p1 + c / 2), pairs16(b));
			}
			_mm512_storeu_si512((void *)(v + c), vpairs16(a, b));
		}
	}
	return span_end(&s, lo, hi);
}

/*
 * srt_attn_fp8_keys on bf16 words, never floats (AVX512BW + VBMI: only where
 * srt_attn_dp_usable, which needs them). An E4M3 magnitude m is exactly the bf16 value of
 * word E4M3_BF16(m) (subnormal codes included; the tables hold its two bytes), and times a UE8M0 scale 2^(sc - 127) it is
 * the same word plus (sc - 127) << 7 in the exponent field, provided that field stays in
 * [1, 254]: it spans [118, 135] at sc = 127, so any sc in [10, 246] keeps every nonzero
 * product a normal float, which srt_attn_fp8_row's float is (its low 16 bits zero); zero
 * codes stay ±0. A block with a NaN code or another scale is decoded by the scalar loop and
 * its floats' high words taken, a set low bit remembered (srt_attn_bf16_span rejects it).
 * The span is kept on the words' magnitudes: the largest, and the smallest nonzero.
 */
#define E4M3_BF16(m)                                                                        \
	((m) >> 3 ? ((((m) >> 3) + 120) << 7 | ((m) & 7) << 4)                               \
	 : (m) == 0 ? 0 : (m) == 1 ? 118 << 7 : (m) < 4 ? (119 << 7 | ((m) - 2) << 6)           \
	 : (120 << 7 | ((m) - 4) << 5))
#define E4M3_LO(m) (uint8_t)(E4M3_BF16(m) & 0xFF)
#define E4M3_HI(m) (uint8_t)(E4M3_BF16(m) >> 8)
#define R4(f, m) f(m), f((m) + 1), f((m) + 2), f((m) + 3)
#define R16(f, m) R4(f, m), R4(f, (m) + 4), R4(f, (m) + 8), R4(f, (m) + 12)
#define R64(f, m) R16(f, m), R16(f, (m) + 16), R16(f, (m) + 32), R16(f, (m) + 48)
static const uint8_t e4m3_lo[128] __attribute__((aligned(64))) = {R64(E4M3_LO, 0), R64(E4M3_LO, 64)};
static const uint8_t e4m3_hi[128] __attribute__((aligned(64))) = {R64(E4M3_HI, 0), R64(E4M3_HI, 64)};
#undef R64
#undef R16
#undef R4

struct wspan {
	__m512i mx, mn; /* per word lane: largest magnitude, smallest nonzero one (0xFFFF: none) */
	uint32_t low;   /* low 16 bits seen set in a scalar-decoded float */
};

__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void
wspan32(struct wspan *s, __m512i w)
{
	const __m512i m = _mm512_and_si512(w, _mm512_set1_epi16(0x7FFF));
	s->mx = _mm512_max_epu16(s->mx, m);
	s->mn = _mm512_mask_min_epu16(s->mn, _mm512_test_epi16_mask(m, m), s->mn, m);
}

/* 64 dims of key entry e from dim c as bf16 words, w[0] dims c .. c + 31, w[1] the next 32. */
__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline void
key_words64(const uint8_t *e, size_t c, size_t nope, size_t rd, struct wspan *s, __m512i w[2])
{
	if (c >= nope) { /* rope dims: bf16 words as stored */
		w[0] = _mm512_loadu_si512((const void *)(e + nope + 2 * (c - nope)));
		w[1] = _mm512_loadu_si512((const void *)(e + nope + 2 * (c - nope) + 64));
	} else {
		const uint8_t sc = e[nope + 2 * rd + c / 64];
		const __m512i x = _mm512_loadu_si512((const void *)(e + c));
		const __m512i m7f = _mm512_set1_epi8(0x7F);
		if (sc >= 10 && sc <= 246 &&
		    !_mm512_cmpeq_epi8_mask(_mm512_and_si512(x, m7f), m7f)) {
			const __m512i lo = _mm512_permutex2var_epi8(
				_mm512_load_si512((const void *)e4m3_lo), x,
				_mm512_load_si512((const void *)(e4m3_lo + 64)));
			const __m512i hi = _mm512_ternarylogic_epi32(
				_mm512_permutex2var_epi8(_mm512_load_si512((const void *)e4m3_hi), x,
							 _mm512_load_si512((const void *)(e4m3_hi + 64))),
				x, _mm512_set1_epi8((char)0x80), 0xF8); /* a | (b & c): the sign */
			/* word i: byte i of lo, then byte i of hi */
			const __m512i i0 = _mm512_set_epi8(
				95, 31, 94, 30, 93, 29, 92, 28, 91, 27, 90, 26, 89, 25, 88, 24, 87, 23, 86, 22,
				85, 21, 84, 20, 83, 19, 82, 18, 81, 17, 80, 16, 79, 15, 78, 14, 77, 13, 76, 12,
				75, 11, 74, 10, 73, 9, 72, 8, 71, 7, 70, 6, 69, 5, 68, 4, 67, 3, 66, 2, 65, 1,
				64, 0);
			const __m512i i1 = _mm512_add_epi8(i0, _mm512_set1_epi8(32));
			const __m512i d = _mm512_set1_epi16((short)((sc - 127) * 128)); /* the field's step */
			for (int h = 0; h < 2; h++) {
				const __m512i v = _mm512_permutex2var_epi8(lo, h ? i1 : i0, hi);
				const __mmask32 nz = _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7FFF));
				w[h] = _mm512_mask_add_epi16(v, nz, v, d);
			}
		} else {
			float t[64];
			uint16_t u16[64];
			fp8_block_scalar(e + c, sc, t);
			for (size_t i = 0; i < 64; i++) {
				uint32_t u;
				memcpy(&u, &t[i], sizeof u);
				s->low |= u & 0xFFFFu;
				u16[i] = (uint16_t)(u >> 16);
			}
			w[0] = _mm512_loadu_si512((const void *)u16);
			w[1] = _mm512_loadu_si512((const void *)(u16 + 32));
		}
	}
	wspan32(s, w[0]);
	wspan32(s, w[1]);
}

#define FP8_KEYS_AHEAD 4 /* keys ahead whose entries fp8_keys_vbmi prefetches */

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static int fp8_keys_vbmi(
	const uint8_t *const *e, size_t nk, size_t nope, size_t rd, uint32_t *kp, uint32_t *vp,
	uint8_t *lo, uint8_t *hi)
{
	const size_t hd = nope + rd;
	/* a value pair per dim: key b's word low, key a's high; v0 for the first 16 dims of a
	 * vector of 32, v1 for the other 16 */
	const __m512i v0 = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
					    40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
					    1, 32, 0);
	const __m512i v1 = _mm512_add_epi16(v0, _mm512_set1_epi16(16));
	struct wspan s = {_mm512_setzero_si512(), _mm512_set1_epi32(-1), 0};
	const size_t eb = nope + 2 * rd + nope / 64; /* an entry's bytes this reads */
	for (size_t k = 0; k < nk; k += 2) {
		const int two = k + 1 < nk;
		/* the entries FP8_KEYS_AHEAD keys on: a compressed pool's selected or strided
		 * entries lie on different pages, which the hardware prefetcher does not follow */
		for (size_t j = k + FP8_KEYS_AHEAD; j < k + FP8_KEYS_AHEAD + 2 && j < nk; j++)
			for (size_t o = 0; o < eb; o += 64)
				_mm_prefetch((const char *)e[j] + o, _MM_HINT_T0);
		uint32_t *p0 = kp + k * (hd / 2), *p1 = p0 + hd / 2, *v = vp + k / 2 * hd;
		for (size_t c = 0; c < hd; c += 64) {
			__m512i a[2], b[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
			key_words64(e[k], c, nope, rd, &s, a);
			if (two)
				key_words64(e[k + 1], c, nope, rd, &s, b);
			for (int h = 0; h < 2; h++) {
				/* a key's pairs: the even dim's word high, the odd one's low */
				_mm512_storeu_si512((void *)(p0 + c / 2 + 16 * h), _mm512_rol_epi32(a[h], 16));
				if (two)
					_mm512_storeu_si512((void *)(p1 + c / 2 + 16 * h),
							    _mm512_rol_epi32(b[h], 16));
				_mm512_storeu_si512((void *)(v + c + 32 * h),
						    _mm512_permutex2var_epi16(b[h], v0, a[h]));
				_mm512_storeu_si512((void *)(v + c + 32 * h + 16),
						    _mm512_permutex2var_epi16(b[h], v1, a[h]));
			}
		}
	}
	/* the largest magnitude and the smallest nonzero one, over both halves of the dwords */
	const uint32_t mx = (uint32_t)_mm512_reduce_max_epu32(_mm512_max_epu32(
		_mm512_and_si512(s.mx, _mm512_set1_epi32(0xFFFF)), _mm512_srli_epi32(s.mx, 16)));
	const uint32_t mn = (uint32_t)_mm512_reduce_min_epu32(_mm512_min_epu32(
		_mm512_and_si512(s.mn, _mm512_set1_epi32(0xFFFF)), _mm512_srli_epi32(s.mn, 16)));
	if (s.low || mx >= 0x7F80u || (mn != 0xFFFFu && mn < 0x0080u))
		return 0;
	*lo = mn != 0xFFFFu ? (uint8_t)(mn >> 7) : 255;
	*hi = mn != 0xFFFFu ? (uint8_t)(mx >> 7) : 0;
	return 1;
}
#else
int srt_attn_dp_usable(void)
{
	return 0;
}
#endif

int srt_attn_bf16_span(const float *x, size_t n, uint8_t *lo, uint8_t *hi)
{
#ifdef ATTN_X86
	if (n >= 16 && have_avx512())
		return bf16_span_avx512(x, n, lo, hi);
#endif
	uint8_t l = 255, h = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &x[i], sizeof u);
		const uint32_t e = (u & 0x7FFFFFFFu) >> 23;
		if (u & 0xFFFFu)
			return 0;
		if (!(u & 0x7FFFFFFFu))
			continue;
		if (e == 0 || e == 255)
			return 0;
		l = (uint8_t)e < l ? (uint8_t)e : l;
		h = (uint8_t)e > h ? (uint8_t)e : h;
	}
	*lo = l;
	*hi = h;
	return 1;
}

static uint32_t hi16(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u >> 16;
}

static float bf16_word(uint32_t w)
{
	const uint32_t u = (w & 0xFFFFu) << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

void srt_attn_bf16_pairs(const float *x, size_t n, uint32_t *w, size_t ws)
{
	size_t i = 0;
#ifdef ATTN_X86
	if (ws == 1 && n >= 16 && have_avx512()) {
		i = n / 16 * 16;
		pairs_avx512(x, i, w);
	}
#endif
	for (; i < n; i += 2)
		w[i / 2 * ws] = hi16(x[i]) << 16 | (i + 1 < n ? hi16(x[i + 1]) : 0);
}

void srt_attn_bf16_vpairs(const float *v0, const float *v1, size_t n, uint32_t *w)
{
	size_t c = 0;
#ifdef ATTN_X86
	if (have_avx512()) {
		c = n / 16 * 16;
		vpairs_avx512(v0, v1, c, w);
	}
#endif
	for (; c < n; c++)
		w[c] = hi16(v0[c]) << 16 | (v1 ? hi16(v1[c]) : 0);
}

void srt_attn_bf16_qpairs(const float *q, size_t nh, size_t hd, uint32_t *qp)
{
#ifdef ATTN_X86
	if (have_avx512() && hd * 8 <= 0x7FFFFFFF) {
		qpairs_avx512(q, nh, hd, qp);
		return;
	}
#endif
	for (size_t l = 0; l < 16; l++) {
		if (l < nh)
			srt_attn_bf16_pairs(q + l * hd, hd, qp + l, 16);
		else
			for (size_t j = 0; j < hd / 2; j++)
				qp[16 * j + l] = 0;
	}
}

int srt_attn_bf16_keys(const float *keys, size_t nk, size_t hd, uint32_t *kp, uint32_t *vp,
		       uint8_t *lo, uint8_t *hi)
{
#ifdef ATTN_X86
	if (hd % 16 == 0 && have_avx512())
		return keys_avx512(keys, nk, hd, kp, vp, lo, hi);
#endif
	srt_attn_bf16_pairs(keys, nk * hd, kp, 1);
	for (size_t k = 0; k < nk; k += 2)
		srt_attn_bf16_vpairs(keys + k * hd, k + 1 < nk ? keys + (k + 1) * hd : NULL, hd,
				     vp + k / 2 * hd);
	return srt_attn_bf16_span(keys, nk * hd, lo, hi);
}

int srt_attn_fp8_keys(const uint8_t *const *e, size_t nk, size_t nope, size_t rd, float *tmp,
		      uint32_t *kp, uint32_t *vp, uint8_t *lo, uint8_t *hi)
{
	const size_t hd = nope + rd;
#ifdef ATTN_X86
	if (nope % 64 == 0 && rd % 64 == 0 && srt_attn_dp_usable())
		return fp8_keys_vbmi(e, nk, nope, rd, kp, vp, lo, hi);
#endif
	for (size_t k = 0; k < nk; k++) {
		srt_attn_fp8_row(e[k], e[k] + nope + 2 * rd, nope, tmp + k * hd);
		srt_attn_bf16_row(e[k] + nope, rd, tmp + k * hd + nope);
	}
	return srt_attn_bf16_keys(tmp, nk, hd, kp, vp, lo, hi);
}

void srt_attn_qk16_bf16(const uint32_t *qp, const uint32_t *keys, size_t hd, size_t nk,
			float *y)
{
#ifdef ATTN_X86
	if (srt_attn_dp_usable()) {
		qk_dp(qp, keys, hd / 2, nk, y);
		return;
	}
#endif
	/* the definition: the float32 loop on the words, high word (even dim) first */
	for (size_t k = 0; k < nk; k++)
		for (size_t l = 0; l < 16; l++) {
			float s = 0;
			for (size_t j = 0; j < hd / 2; j++) {
				const uint32_t a = qp[16 * j + l], b = keys[k * (hd / 2) + j];
				s += bf16_word(a >> 16) * bf16_word(b >> 16);
				s += bf16_word(a) * bf16_word(b);
			}
			y[16 * k + l] = s;
		}
}

void srt_attn_pv_bf16(size_t nh, const uint32_t *const *pp, const uint32_t *vp, size_t n,
		      size_t np, float *const *y)
{
	assert(n % 64 == 0);
#ifdef ATTN_X86
	if (srt_attn_dp_usable()) {
		pv_dp(nh, pp, vp, n, np, y);
		return;
	}
#endif
	for (size_t h = 0; h < nh; h++)
		for (size_t c = 0; c < n; c++) {
			float s = 0;
			for (size_t j = 0; j < np; j++) {
				s += bf16_word(pp[h][j] >> 16) * bf16_word(vp[j * n + c] >> 16);
				s += bf16_word(pp[h][j]) * bf16_word(vp[j * n + c]);
			}
			y[h][c] = s;
		}
}

/* ---- the query's per-head steps (phase A5) ----------------------------------------------------- */

#ifdef ATTN_X86
/*
 * Σ bf16(q[i]²) over 16 lanes into two double sums, with the largest and the smallest nonzero
 * exponent field of the squares. Every square is a bf16 number, so a multiple of the ulp of the
 * smallest nonzero one, 2^(emin - 134); when the total stays below 2^53 of those units (n ·
 * 2^(emax - 126) <= 2^(emin - 81)) no partial sum in any order rounds, and these sums equal the
 * sequential double loop's.
 */
__attribute__((target("avx512f,avx512bw"))) static int sumsq_bf16_avx512(const float *q, size_t n,
									double *ss)
{
	__m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
	__m512i emax = _mm512_setzero_si512(), emin = _mm512_set1_epi32(255);
	for (size_t i = 0; i < n; i += 16) {
		const __m512 v = _mm512_loadu_ps(q + i);
		const __m512 sq = srt_round_bf16_v16(_mm512_mul_ps(v, v));
		const __m512i u = _mm512_castps_si512(sq);
		const __m512i e = _mm512_srli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), 23);
		emax = _mm512_max_epi32(emax, e);
		emin = _mm512_mask_min_epi32(emin, _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x7FFFFFFF)),
					     emin, e);
		s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
		s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
	}
	const int hi = _mm512_reduce_max_epi32(emax), lo = _mm512_reduce_min_epi32(emin);
	int lg = 0;
	while (((size_t)1 << lg) < n)
		lg++;
	/* no NaN or infinity, no subnormal square, the spread within the bound (all zeros: lo 255) */
	if (hi == 255 || lo == 0 || (lo <= hi && hi - lo > 45 - lg))
		return 0;
	*ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
	return 1;
}

__attribute__((target("avx512f,avx512bw"))) static void scale_bf16_avx512(float *q, size_t n, float r)
{
	const __m512 rv = _mm512_set1_ps(r);
	for (size_t i = 0; i < n; i += 16)
		_mm512_storeu_ps(q + i, srt_round_bf16_v16(_mm512_mul_ps(_mm512_loadu_ps(q + i), rv)));
}

/* y := x's 8 lanes after the butterfly of stride h < 8 (m: the lanes j with j & h, which take
 * u - v = t - y; the others u + v = y + t), t the lanes swapped at distance h */
__attribute__((target("avx512f"))) static inline __m512d butterfly8(__m512d y, int h)
{
	const __m512d t = h == 1 ? _mm512_permute_pd(y, 0x55)
			  : h == 2 ? _mm512_permutex_pd(y, 0x4E)
				   : _mm512_shuffle_f64x2(y, y, 0x4E);
	const __mmask8 m = h == 1 ? 0xAA : h == 2 ? 0xCC : 0xF0;
	return _mm512_mask_sub_pd(_mm512_add_pd(y, t), m, t, y);
}

__attribute__((target("avx512f"))) static void hadamard_avx512(float *x, size_t n, int ref)
{
	__m512d y[1024 / 8];
	const size_t nv = n / 8;
	for (size_t v = 0; v < nv; v++)
		y[v] = _mm512_cvtps_pd(_mm256_loadu_ps(x + 8 * v));
	for (int h = 1; h < 8; h *= 2)
		for (size_t v = 0; v < nv; v++)
			y[v] = butterfly8(y[v], h);
	for (size_t hv = 1; hv < nv; hv *= 2)
		for (size_t i = 0; i < nv; i += 2 * hv)
			for (size_t j = i; j < i + hv; j++) {
				const __m512d u = y[j], w = y[j + hv];
				y[j] = _mm512_add_pd(u, w);
				y[j + hv] = _mm512_sub_pd(u, w);
			}
	const double sc = pow((double)n, -0.5);
	for (size_t v = 0; v < nv; v++) {
		const __m256 f = ref ? _mm256_mul_ps(_mm512_cvtpd_ps(y[v]), _mm256_set1_ps((float)sc))
				     : _mm512_cvtpd_ps(_mm512_mul_pd(y[v], _mm512_set1_pd(sc)));
		_mm256_storeu_ps(x + 8 * v, f);
	}
}

/* sumsq_bf16_avx512 over 8 lanes (n % 8 == 0) */
__attribute__((target("avx2"))) static int sumsq_bf16_avx2(const float *q, size_t n, double *ss)
{
	const __m256i mag = _mm256_set1_epi32(0x7FFFFFFF);
	__m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
	__m256i emax = _mm256_setzero_si256(), emin = _mm256_set1_epi32(255);
	for (size_t i = 0; i < n; i += 8) {
		const __m256 v = _mm256_loadu_ps(q + i);
		const __m256 sq = srt_round_bf16_v8(_mm256_mul_ps(v, v));
		const __m256i a = _mm256_and_si256(_mm256_castps_si256(sq), mag);
		const __m256i e = _mm256_srli_epi32(a, 23);
		emax = _mm256_max_epi32(emax, e);
		/* zeros (either sign) keep 255 */
		emin = _mm256_min_epi32(emin, _mm256_blendv_epi8(e, _mm256_set1_epi32(255),
								 _mm256_cmpeq_epi32(a, _mm256_setzero_si256())));
		s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
		s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
	}
	_Alignas(32) int32_t mx[8], mn[8];
	_mm256_store_si256((__m256i *)(void *)mx, emax);
	_mm256_store_si256((__m256i *)(void *)mn, emin);
	int hi = 0, lo = 255;
	for (int l = 0; l < 8; l++) {
		hi = mx[l] > hi ? mx[l] : hi;
		lo = mn[l] < lo ? mn[l] : lo;
	}
	int lg = 0;
	while (((size_t)1 << lg) < n)
		lg++;
	if (hi == 255 || lo == 0 || (lo <= hi && hi - lo > 45 - lg))
		return 0;
	/* no order rounds: any combination of the lanes is the sequential sum */
	_Alignas(32) double t[4];
	_mm256_store_pd(t, _mm256_add_pd(s0, s1));
	*ss = (t[0] + t[1]) + (t[2] + t[3]);
	return 1;
}

__attribute__((target("avx2"))) static void scale_bf16_avx2(float *q, size_t n, float r)
{
	const __m256 rv = _mm256_set1_ps(r);
	for (size_t i = 0; i < n; i += 8)
		_mm256_storeu_ps(q + i, srt_round_bf16_v8(_mm256_mul_ps(_mm256_loadu_ps(q + i), rv)));
}

/* butterfly8 on 4 lanes: stride h = 1 (adjacent lanes) or 2 (the halves) */
__attribute__((target("avx2"))) static inline __m256d butterfly4(__m256d y, int h)
{
	const __m256d t = h == 1 ? _mm256_permute_pd(y, 0x5) : _mm256_permute4x64_pd(y, 0x4E);
	return h == 1 ? _mm256_blend_pd(_mm256_add_pd(y, t), _mm256_sub_pd(t, y), 0xA)
		      : _mm256_blend_pd(_mm256_add_pd(y, t), _mm256_sub_pd(t, y), 0xC);
}

/* hadamard_avx512 on 4 doubles a register (n a power of two in [4, 1024]) */
__attribute__((target("avx2"))) static void hadamard_avx2(float *x, size_t n, int ref)
{
	__m256d y[1024 / 4];
	const size_t nv = n / 4;
	for (size_t v = 0; v < nv; v++)
		y[v] = _mm256_cvtps_pd(_mm_loadu_ps(x + 4 * v));
	for (size_t v = 0; v < nv; v++)
		y[v] = butterfly4(butterfly4(y[v], 1), 2);
	for (size_t hv = 1; hv < nv; hv *= 2)
		for (size_t i = 0; i < nv; i += 2 * hv)
			for (size_t j = i; j < i + hv; j++) {
				const __m256d u = y[j], w = y[j + hv];
				y[j] = _mm256_add_pd(u, w);
				y[j + hv] = _mm256_sub_pd(u, w);
			}
	const double sc = pow((double)n, -0.5);
	for (size_t v = 0; v < nv; v++) {
		const __m128 f = ref ? _mm_mul_ps(_mm256_cvtpd_ps(y[v]), _mm_set1_ps((float)sc))
				     : _mm256_cvtpd_ps(_mm256_mul_pd(y[v], _mm256_set1_pd(sc)));
		_mm_storeu_ps(x + 4 * v, f);
	}
}
#endif

int srt_attn_sumsq_bf16(const float *q, size_t n, double *ss)
{
#ifdef ATTN_X86
	if (n % 16 == 0 && have_avx512())
		return sumsq_bf16_avx512(q, n, ss);
	if (n % 8 == 0 && have_avx2())
		return sumsq_bf16_avx2(q, n, ss);
#endif
	(void)q;
	(void)n;
	(void)ss;
	return 0;
}

void srt_attn_scale_bf16(float *q, size_t n, float r)
{
#ifdef ATTN_X86
	if (n % 16 == 0 && have_avx512()) {
		scale_bf16_avx512(q, n, r);
		return;
	}
	if (n % 8 == 0 && have_avx2()) {
		scale_bf16_avx2(q, n, r);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		q[i] = q[i] * r;
	srt_round_bf16_n(q, n);
}

int srt_attn_hadamard_d(float *x, size_t n, int ref)
{
#ifdef ATTN_X86
	if (n >= 8 && n <= 1024 && (n & (n - 1)) == 0 && have_avx512()) {
		hadamard_avx512(x, n, ref);
		if (ref)
			srt_round_bf16_n(x, n);
		return 1;
	}
	if (n >= 4 && n <= 1024 && (n & (n - 1)) == 0 && have_avx2()) {
		hadamard_avx2(x, n, ref);
		if (ref)
			srt_round_bf16_n(x, n);
		return 1;
	}
#endif
	(void)x;
	(void)n;
	(void)ref;
	return 0;
}
