/* Number formats: bf16, FP8 E4M3, UE8M0, FP4 E2M1 (see fp.h). */
#include "ops/fp.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#if defined(SRT_OPS_X86)
#include "ops/fp_isa.h"
#include "ops/gemm.h"
#endif

static inline uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* ---- bf16 ---------------------------------------------------------------------------------- */

uint16_t srt_bf16_from_f32(float x)
{
	uint32_t u = f2u(x);
	if (isnan(x))
		return 0x7FC0u;
	/* Round to nearest even on the 16 dropped bits: add 0x7FFF plus the lowest kept bit, so a
	 * tie rounds up only when the kept part is odd. A carry propagates into the exponent, and
	 * out of the largest finite value into infinity, as it should. */
	u += 0x7FFFu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float srt_bf16_to_f32(uint16_t h)
{
	return u2f((uint32_t)h << 16);
}

float srt_round_bf16(float x)
{
	return srt_bf16_to_f32(srt_bf16_from_f32(x));
}

void srt_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = u2f((uint32_t)src[i] << 16);
}

void srt_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = srt_bf16_from_f32(src[i]);
}

void srt_round_bf16_n(float *x, size_t n)
{
#if defined(SRT_OPS_X86)
	const enum srt_gemm_isa isa = srt_gemm_isa_current();
	if (n >= 16 && isa >= SRT_GEMM_ISA_AVX512) {
		srt_round_bf16_avx512(x, n);
		return;
	}
	if (n >= 8 && isa >= SRT_GEMM_ISA_AVX2) {
		srt_round_bf16_avx2(x, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		x[i] = srt_round_bf16(x[i]);
}

/* ---- FP8 E4M3 ---------------------------------------------------------------------------------- */

/* Encode a magnitude |x| <= 464 (bits without sign) to the 7-bit E4M3 code, nearest even. */
static inline uint8_t e4m3_encode_mag(uint32_t a)
{
	if (a < (121u << 23)) {
		/* Below 2^-6, the smallest normal: the subnormal grid is k * 2^-9, k = 0..8 (k = 8
		 * is the normal 2^-6, code 0x08, so the carry is right). Scaling by 2^9 is exact;
		 * nearbyintf rounds half to even in the default rounding mode. */
		return (uint8_t)nearbyintf(u2f(a) * 0x1p9f);
	}
	/* Normal: keep 3 mantissa bits, round the 20 dropped bits to nearest even, then rebias
	 * the exponent from 127 to 7. */
	a += 0x7FFFFu + ((a >> 20) & 1u);
	return (uint8_t)((a >> 20) - ((127u - 7u) << 3));
}

uint8_t srt_fp8_e4m3_from_f32(float x)
{
	uint32_t u = f2u(x);
	uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
	uint32_t a = u & 0x7FFFFFFFu;
	if (a > f2u(464.0f)) /* also ±inf and NaN */
		return (uint8_t)(sign | SRT_FP8_E4M3_NAN);
	return (uint8_t)(sign | e4m3_encode_mag(a));
}

uint8_t srt_fp8_e4m3_from_f32_sat(float x)
{
	uint32_t u = f2u(x);
	uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
	uint32_t a = u & 0x7FFFFFFFu;
	if (a > 0x7F800000u) /* NaN */
		return (uint8_t)(sign | SRT_FP8_E4M3_NAN);
	if (a >= f2u(SRT_FP8_E4M3_MAX))
		return (uint8_t)(sign | 0x7Eu);
	return (uint8_t)(sign | e4m3_encode_mag(a));
}

void srt_fp8_e4m3_to_f32_n(const uint8_t *src, float *dst, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = srt_fp8_e4m3_table[src[i]];
}

/* ---- UE8M0 ------------------------------------------------------------------------------------- */

float srt_e8m0_to_f32(uint8_t e)
{
	if (e == SRT_E8M0_NAN)
		return NAN;
	if (e == 0)
		return 0x1p-127f;
	return u2f((uint32_t)e << 23);
}

uint8_t srt_e8m0_from_pow2(float s)
{
	uint32_t u = f2u(s);
	if (u == f2u(0x1p-127f))
		return 0;
	assert(s > 0.0f && (u & 0x007FFFFFu) == 0 && (u >> 23) < 255u &&
	       "srt_e8m0_from_pow2: not a power of two in [2^-127, 2^127]");
	return (uint8_t)(u >> 23);
}

uint8_t srt_e8m0_ceil(float x)
{
	uint32_t u = f2u(x);
	uint32_t e = (u >> 23) & 0xFFu;
	assert(x > 0.0f && e != 0 && x <= 0x1p127f &&
	       "srt_e8m0_ceil: needs a positive normal float <= 2^127");
	return (uint8_t)(e + ((u & 0x007FFFFFu) != 0));
}

float srt_pow2_ceil(float x)
{
	return srt_e8m0_to_f32(srt_e8m0_ceil(x));
}

/* ---- FP4 E2M1 ---------------------------------------------------------------------------------- */

const float srt_fp4_e2m1_table[16] = {
	0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
	-0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f,
};

uint8_t srt_fp4_e2m1_from_f32(float x)
{
	uint32_t u = f2u(x);
	uint8_t sign = (uint8_t)((u >> 28) & 0x8u);
	uint32_t a = u & 0x7FFFFFFFu;
	uint8_t code;
	if (a > 0x7F800000u) /* NaN: +6, as CUDA's satfinite conversion */
		return 0x7u;
	if (a >= f2u(SRT_FP4_E2M1_MAX)) {
		code = 0x7u;
	} else if (a < f2u(1.0f)) {
		/* subnormal grid k * 0.5, k = 0..2 (k = 2 is the normal 1.0, code 2) */
		code = (uint8_t)nearbyintf(u2f(a) * 2.0f);
	} else {
		/* one mantissa bit: round the 22 dropped bits to nearest even, rebias 127 -> 1 */
		a += 0x1FFFFFu + ((a >> 22) & 1u);
		code = (uint8_t)((a >> 22) - ((127u - 1u) << 1));
	}
	return (uint8_t)(sign | code);
}

void srt_fp4_unpack(const uint8_t *packed, float *dst, size_t n)
{
	assert(n % 2 == 0);
	for (size_t i = 0; i < n / 2; i++) {
		dst[2 * i] = srt_fp4_e2m1_table[packed[i] & 0xFu];
		dst[2 * i + 1] = srt_fp4_e2m1_table[packed[i] >> 4];
	}
}
