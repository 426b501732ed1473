/*
 * core/ops/fp_avx2.c — internal: srt_round_bf16_n and srt_quant_fp4_fake over 8 lanes
 * (fp_isa.h; fp.c's and quant.c's dispatch, after cpuid showed AVX2). fp_avx512.c's steps on
 * 8 lanes, the masks as compares and blends: each lane goes through the scalar code's
 * operations on the same bits (the bf16 rounding's integer add; E2M1 codes from the same
 * division x / s, the subnormal grid by cvtps2dq in the current rounding mode as nearbyintf,
 * the one-mantissa-bit rounding, +6 for NaN, the value times s).
 */
#include "ops/fp_isa.h"

#include <math.h>
#include <stdint.h>

#include "ops/fp.h"

void srt_round_bf16_avx2(float *x, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, srt_round_bf16_v8(_mm256_loadu_ps(x + i)));
	for (; i < n; i++)
		x[i] = srt_round_bf16(x[i]);
}

float srt_amax_avx2(const float *x, size_t n)
{
	const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
	__m256 mx = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
	for (size_t i = 0; i < n; i += 8) {
		const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), mag);
		nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
		mx = _mm256_max_ps(mx, a);
	}
	if (!_mm256_testz_ps(nan, nan))
		return NAN;
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

void srt_fp4_fake_avx2(const float *x, float *y, size_t n, float s)
{
	const __m256 tab = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
	const __m256 sv = _mm256_set1_ps(s);
	const __m256i one = _mm256_set1_epi32(1), seven = _mm256_set1_epi32(7);
	for (size_t i = 0; i < n; i += 8) {
		if (isnan(s)) {
			_mm256_storeu_ps(y + i, _mm256_set1_ps(NAN));
			continue;
		}
		const __m256 q = _mm256_div_ps(_mm256_loadu_ps(x + i), sv);
		const __m256i u = _mm256_castps_si256(q);
		const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)); /* >= 0 as int */
		/* [1, 6): keep one mantissa bit, nearest even, rebias 127 -> 1 */
		const __m256i r = _mm256_add_epi32(
			a, _mm256_add_epi32(_mm256_set1_epi32(0x1FFFFF), _mm256_and_si256(_mm256_srli_epi32(a, 22), one)));
		__m256i code = _mm256_sub_epi32(_mm256_srli_epi32(r, 22), _mm256_set1_epi32(252));
		/* below 1: the grid k · 0.5 */
		const __m256i sub = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(2.0f)));
		code = _mm256_blendv_epi8(code, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3F800000), a));
		code = _mm256_blendv_epi8(code, seven, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x40BFFFFF)));
		/* NaN: +6, the magnitude code without the sign */
		const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
		const __m256i sign = _mm256_andnot_si256(nan, _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)));
		code = _mm256_blendv_epi8(code, seven, nan);
		const __m256 v = _mm256_or_ps(_mm256_permutevar8x32_ps(tab, code), _mm256_castsi256_ps(sign));
		_mm256_storeu_ps(y + i, _mm256_mul_ps(v, sv));
	}
}
