/*
 * core/ops/act_avx2.c — internal: expf over 8 lanes with glibc's bits (act.c's dispatch), on
 * CPUs with AVX2 and FMA. act_avx512.c's algorithm (glibc's FMA build of expf: k and r by
 * fused operations, s = 2^(k/32) from the 32-entry table, the polynomial by three fused
 * multiply-adds, all in double) on 4 double lanes at a time, the table read by a gather. The
 * same operations in the same order give the same double, hence the same float; act.c
 * compares a sample with the library before this code runs. Lanes of magnitude 88 and above
 * (and NaN) go to the library.
 */
#include "ops/act_isa.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* expf of 4 floats (xd, widened) as the double before its rounding to float; tab as in
 * act_avx512.c */
static __m256d exp_mul4(__m256d xd, const double *tab)
{
	const __m256d invln2n = _mm256_set1_pd(0x1.71547652b82fep+0 * 32);
	const __m256d shift = _mm256_set1_pd(0x1.8p+52);
	const __m256d kd0 = _mm256_fmadd_pd(invln2n, xd, shift);
	const __m256i ki = _mm256_castpd_si256(kd0);
	const __m256d r = _mm256_fmsub_pd(invln2n, xd, _mm256_sub_pd(kd0, shift));
	const __m256d t = _mm256_i64gather_pd(tab, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
	const __m256d s = _mm256_castsi256_pd(
		_mm256_add_epi64(_mm256_castpd_si256(t), _mm256_slli_epi64(ki, 47)));
	const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32), r,
					  _mm256_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32));
	const __m256d r2 = _mm256_mul_pd(r, r);
	__m256d y = _mm256_fmadd_pd(_mm256_set1_pd(0x1.62e42ff0c52d6p-1 / 32), r, _mm256_set1_pd(1.0));
	y = _mm256_fmadd_pd(z, r2, y);
	return _mm256_mul_pd(y, s);
}

/* expf of 8 floats; lanes of magnitude 88 and above (and NaN) by the library */
static __m256 exp8(__m256 x, const double *tab)
{
	const __m128 y0 = _mm256_cvtpd_ps(exp_mul4(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), tab));
	const __m128 y1 = _mm256_cvtpd_ps(exp_mul4(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), tab));
	__m256 y = _mm256_set_m128(y1, y0);
	/* glibc's test: (bits >> 20) & 0x7ff >= that of 88.0f */
	const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20),
					     _mm256_set1_epi32(0x7ff));
	const int big = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a))));
	if (big) {
		float xs[8], ys[8];
		_mm256_storeu_ps(xs, x);
		_mm256_storeu_ps(ys, y);
		for (int i = 0; i < 8; i++)
			if (big >> i & 1)
				ys[i] = expf(xs[i]);
		y = _mm256_loadu_ps(ys);
	}
	return y;
}

/* f of x[0 .. n) into y, 8 at a time, the tail through a zero-padded vector */
#define ACT8_LOOP(f)                                                                               \
	size_t i = 0;                                                                              \
	for (; i + 8 <= n; i += 8)                                                                 \
		_mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i), tab));                           \
	if (i < n) {                                                                               \
		float b[8] = {0};                                                                  \
		memcpy(b, x + i, (n - i) * sizeof(float));                                         \
		_mm256_storeu_ps(b, f(_mm256_loadu_ps(b), tab));                                   \
		memcpy(y + i, b, (n - i) * sizeof(float));                                         \
	}

void srt_expf_avx2(const float *x, float *y, size_t n, const double *tab)
{
	ACT8_LOOP(exp8)
}

/* srt_silu of 8 floats: x / (1 + expf(-x)) */
static __m256 silu8(__m256 v, const double *tab)
{
	const __m256 e = exp8(_mm256_xor_ps(v, _mm256_set1_ps(-0.0f)), tab);
	return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void srt_silu_avx2(const float *x, float *y, size_t n, const double *tab)
{
	ACT8_LOOP(silu8)
}
