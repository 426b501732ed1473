/*
 * core/ops/fp_avx512.c — internal: srt_round_bf16_n and srt_quant_fp4_fake over 16 lanes
 * (fp_isa.h; fp.c's and quant.c's dispatch, after cpuid showed AVX-512F/BW).
 *
 * Each lane goes through the scalar code's steps on the same bits: the bf16 rounding adds
 * 0x7FFF plus the lowest kept bit and clears the low half (NaN: 0x7FC00000); the E2M1 code of
 * q = x / s is 7 for |q| >= 6 and for infinities, nearbyint(2|q|) below 1 (the subnormal grid,
 * rounded in the current mode as nearbyintf does), and the one-mantissa-bit rounding of the
 * bits in between; a NaN q is +6 (code 7 without its sign). No float arithmetic but the
 * scalar code's own division, doubling and multiplication, so the results are its bits.
 */
#include "ops/fp_isa.h"

#include <math.h>
#include <stdint.h>

/* lanes [0, n - i) of a 16-lane step at i: all 16 but in the last step */
static inline __mmask16 tail16(size_t n, size_t i)
{
	return n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
}

void srt_round_bf16_avx512(float *x, size_t n)
{
	for (size_t i = 0; i < n; i += 16) {
		const __mmask16 m = tail16(n, i);
		_mm512_mask_storeu_ps(x + i, m, srt_round_bf16_v16(_mm512_maskz_loadu_ps(m, x + i)));
	}
}

float srt_amax_avx512(const float *x, size_t n)
{
	__m512 mx = _mm512_setzero_ps();
	__mmask16 nan = 0;
	for (size_t i = 0; i < n; i += 16) {
		const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(tail16(n, i), x + i));
		nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
		mx = _mm512_max_ps(mx, a);
	}
	return nan ? NAN : _mm512_reduce_max_ps(mx);
}

void srt_fp4_fake_avx512(const float *x, float *y, size_t n, float s)
{
	static const float value[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
					-0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
	const __m512 tab = _mm512_loadu_ps(value), sv = _mm512_set1_ps(s);
	const __m512i one = _mm512_set1_epi32(1), seven = _mm512_set1_epi32(7);
	for (size_t i = 0; i < n; i += 16) {
		const __mmask16 m = tail16(n, i);
		if (isnan(s)) {
			_mm512_mask_storeu_ps(y + i, m, _mm512_set1_ps(NAN));
			continue;
		}
		const __m512 q = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), sv);
		const __m512i u = _mm512_castps_si512(q);
		const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
		/* [1, 6): keep one mantissa bit, nearest even, rebias 127 -> 1 */
		const __m512i r = _mm512_add_epi32(
			a, _mm512_add_epi32(_mm512_set1_epi32(0x1FFFFF), _mm512_and_si512(_mm512_srli_epi32(a, 22), one)));
		__m512i code = _mm512_sub_epi32(_mm512_srli_epi32(r, 22), _mm512_set1_epi32(252));
		/* below 1: the grid k · 0.5 */
		const __m512i sub = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(2.0f)));
		code = _mm512_mask_mov_epi32(code, _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x3F800000)), sub);
		code = _mm512_mask_mov_epi32(code, _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x40C00000)), seven);
		code = _mm512_or_si512(code, _mm512_and_si512(_mm512_srli_epi32(u, 28), _mm512_set1_epi32(8)));
		code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7F800000)), seven);
		_mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_permutexvar_ps(code, tab), sv));
	}
}
