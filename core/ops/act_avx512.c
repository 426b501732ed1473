/*
 * core/ops/act_avx512.c — internal: expf over 16 lanes with glibc's bits (act.c's dispatch).
 *
 * glibc's expf (2.28 and later, its FMA build on a CPU with FMA, so every AVX-512 CPU) works in
 * double: with z = x·32/ln2, k = z rounded to the nearest integer (z + 1.5·2^52 by one fused
 * multiply-add), r = x·32/ln2 - k by one fused multiply-subtract (the product exact), and
 * s = 2^(k/32) from a 32-entry table with k / 32 added to its exponent,
 * expf(x) = (float)(s · ((c0·r + c1)·r² + (c2·r + 1))), each of the three "a·b + c" fused.
 * The same operations in the same order here, in 8 double lanes at a time, give the same
 * double, hence the same float. Checked against the library's expf for every float of
 * magnitude below 88 (2^31.1 of them; the other lanes go to the library: over- and underflow,
 * infinities, NaN); act.c repeats a sample of that check before it lets this code run.
 */
#include "ops/act_isa.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* expf of 8 floats (xd, widened) as the double before its rounding to float. tab[i]: 2^(i/32)
 * with i << 47 taken off its bits (k's low bits pick the entry; k << 47 added back puts k / 32
 * into the exponent), computed once by the portable code in act.c. */
static __m512d exp_mul(__m512d xd, const double *tab)
{
	const __m512d invln2n = _mm512_set1_pd(0x1.71547652b82fep+0 * 32);
	const __m512d shift = _mm512_set1_pd(0x1.8p+52);
	const __m512d kd0 = _mm512_fmadd_pd(invln2n, xd, shift);
	const __m512i ki = _mm512_castpd_si512(kd0);
	const __m512d r = _mm512_fmsub_pd(invln2n, xd, _mm512_sub_pd(kd0, shift));
	/* entry k mod 32: entries 0..15 and 16..31 by two table permutes, bit 4 chooses */
	const __m512d lo = _mm512_permutex2var_pd(_mm512_loadu_pd(tab), ki, _mm512_loadu_pd(tab + 8));
	const __m512d hi = _mm512_permutex2var_pd(_mm512_loadu_pd(tab + 16), ki,
						  _mm512_loadu_pd(tab + 24));
	const __m512d t = _mm512_mask_mov_pd(lo, _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), hi);
	const __m512d s = _mm512_castsi512_pd(
		_mm512_add_epi64(_mm512_castpd_si512(t), _mm512_slli_epi64(ki, 47)));
	const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32), r,
					  _mm512_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32));
	const __m512d r2 = _mm512_mul_pd(r, r);
	__m512d y = _mm512_fmadd_pd(_mm512_set1_pd(0x1.62e42ff0c52d6p-1 / 32), r, _mm512_set1_pd(1.0));
	y = _mm512_fmadd_pd(z, r2, y);
	return _mm512_mul_pd(y, s);
}

/* expf of 16 floats; lanes of magnitude 88 and above (and NaN) by the library */
static __m512 exp16(__m512 x, const double *tab)
{
	const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
	const __m512d d1 = _mm512_cvtps_pd(
		_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
	const __m256 y0 = _mm512_cvtpd_ps(exp_mul(d0, tab)), y1 = _mm512_cvtpd_ps(exp_mul(d1, tab));
	__m512 y = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(y0)),
						       _mm256_castps_pd(y1), 1));
	/* glibc's test: (bits >> 20) & 0x7ff >= that of 88.0f */
	const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20),
					     _mm512_set1_epi32(0x7ff));
	const __mmask16 big = _mm512_cmpge_epi32_mask(top, _mm512_set1_epi32(0x42b));
	if (big) {
		float xs[16], ys[16];
		_mm512_storeu_ps(xs, x);
		_mm512_storeu_ps(ys, y);
		for (int i = 0; i < 16; i++)
			if (big >> i & 1)
				ys[i] = expf(xs[i]);
		y = _mm512_loadu_ps(ys);
	}
	return y;
}

void srt_expf_avx512(const float *x, float *y, size_t n, const double *tab)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i), tab));
	if (i < n) {
		const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i), tab));
	}
}

void srt_silu_avx512(const float *x, float *y, size_t n, const double *tab)
{
	size_t i = 0;
	const __m512 one = _mm512_set1_ps(1.0f);
	for (; i < n; i += 16) {
		const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
		const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
		const __m512 e = exp16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v),
								      _mm512_set1_epi32(INT32_MIN))),
				       tab); /* -x */
		_mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(v, _mm512_add_ps(one, e)));
	}
}
