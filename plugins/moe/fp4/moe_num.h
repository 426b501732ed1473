/*
 * Number formats used by the fp4 MoE plugin (spec section 7): bf16 rounding, E4M3 FP8,
 * E2M1 FP4, UE8M0 scales, and the per-128 dynamic activation quantisation of the reference.
 *
 * Everything here is a pure function of its arguments (no state, thread-safe). Private to the
 * plugin: the shared copies of these codecs belong to core/ops.
 */
#ifndef MOE_NUM_H
#define MOE_NUM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MOE_FP8_MAX 448.0f
#define MOE_ACT_BLOCK 128 /* activation quantisation block along K */
#define MOE_FP4_BLOCK 32  /* FP4 weight scale block along K */

/* Round an fp32 value to the nearest bf16 (ties to even), returned as fp32. NaN stays NaN. */
static inline float moe_bf16_round(float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof(u));
	if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
		return v;
	u += 0x7fffu + ((u >> 16) & 1u);
	u &= 0xffff0000u;
	memcpy(&v, &u, sizeof(v));
	return v;
}

/* bf16 bit pattern -> fp32. */
static inline float moe_bf16_to_f32(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float v;
	memcpy(&v, &u, sizeof(v));
	return v;
}

/* UE8M0 scale byte -> 2^(e-127). */
static inline float moe_e8m0_to_f32(uint8_t e)
{
	if (e == 0xff)
		return NAN;
	return ldexpf(1.0f, (int)e - 127);
}

/* float8_e4m3fn byte -> fp32 (no infinities; 0x7f / 0xff are NaN). */
static inline float moe_e4m3_to_f32(uint8_t b)
{
	int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
	float v;
	if (exp == 0xf && man == 7)
		return NAN;
	if (exp == 0)
		v = ldexpf((float)man, -9); /* subnormal: man * 2^-3 * 2^-6 */
	else
		v = ldexpf((float)(8 + man), exp - 10);
	return sign ? -v : v;
}

/*
 * Round v (already clamped to [-448, 448]) to the nearest E4M3 value, ties to even, and
 * return that value as fp32. E4M3 has 3 mantissa bits; normals start at 2^-6, subnormals are
 * multiples of 2^-9.
 */
static inline float moe_e4m3_round(float v)
{
	float a = fabsf(v);
	int e;
	if (a == 0.0f || isnan(a))
		return v;
	if (a < 0x1p-6f)
		return ldexpf(rintf(ldexpf(v, 9)), -9);
	frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1): spacing of a is 2^(e-1-3) */
	return ldexpf(rintf(ldexpf(v, 4 - e)), e - 4);
}

/* Smallest power of two >= s (s > 0, finite). */
static inline float moe_pow2_ceil(float s)
{
	int e;
	float m = frexpf(s, &e);
	return m == 0.5f ? s : ldexpf(1.0f, e);
}

/*
 * The reference's dynamic activation quantisation (kernel act_quant, scale_fmt ue8m0), applied
 * in place as quantise + dequantise: for each block of 128 values, scale = 2^ceil(log2(amax /
 * 448)) with amax floored at 1e-4, q = e4m3(clamp(x / scale, +-448)), x <- q * scale. The
 * dequantised values are exact in fp32, so a later fp32 dot product equals the reference's
 * "dequantise both operands, then matmul". n must be a multiple of 128.
 */
static inline void moe_act_quant(float *x, int64_t n)
{
	for (int64_t b = 0; b < n; b += MOE_ACT_BLOCK) {
		float amax = 1e-4f;
		for (int i = 0; i < MOE_ACT_BLOCK; i++)
			amax = fmaxf(amax, fabsf(x[b + i]));
		float scale = moe_pow2_ceil(amax * (1.0f / MOE_FP8_MAX));
		for (int i = 0; i < MOE_ACT_BLOCK; i++) {
			float q = x[b + i] / scale;
			q = fminf(fmaxf(q, -MOE_FP8_MAX), MOE_FP8_MAX);
			x[b + i] = moe_e4m3_round(q) * scale;
		}
	}
}

/*
 * fp32 dot product in one fixed summation order (8 interleaved partial sums, then a fixed
 * tree), so a row's result never depends on anything but its own operands.
 */
static inline float moe_dot(const float *a, const float *b, int64_t n)
{
	float s[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += a[i + j] * b[i + j];
	for (; i < n; i++)
		s[i & 7] += a[i] * b[i];
	return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

#endif /* MOE_NUM_H */
