/* Quantizers of spec §7 and the checkpoint weight quantizers (see quant.h). */
#include "ops/quant.h"

#include <assert.h>
#include <math.h>

#include "ops/fp.h"

#if defined(SRT_OPS_X86)
#include "ops/fp_isa.h"
#include "ops/gemm.h"
#endif

/* max |x| over the block; NaN if any element is NaN (torch's amax propagates NaN). */
static float block_amax(const float *x, size_t n)
{
	float m = 0.0f;
	for (size_t i = 0; i < n; i++) {
		float a = fabsf(x[i]);
		if (isnan(a))
			return NAN;
		m = a > m ? a : m;
	}
	return m;
}

/* amax -> scale. The reference multiplies by the float32 reciprocal of the format's maximum
 * (`amax * (1.0 / 448)`), then (pow2) rounds up to a power of two by the exponent rule.
 * NaN stays NaN; an infinite amax gives an infinite scale (as the bit trick does). */
static float scale_from_amax(float amax, float floor_, float max_inv, bool pow2)
{
	if (isnan(amax))
		return NAN;
	amax = amax > floor_ ? amax : floor_;
	float s = amax * max_inv;
	if (!pow2 || isinf(s))
		return s;
	return srt_pow2_ceil(s);
}

static const float fp8_max_inv = (float)(1.0 / 448.0);
static const float fp4_max_inv = (float)(1.0 / 6.0);

static inline uint8_t scale_to_e8m0(float s)
{
	return isfinite(s) ? srt_e8m0_from_pow2(s) : (uint8_t)SRT_E8M0_NAN;
}

float srt_quant_fp8_scale(const float *x, size_t n, bool pow2)
{
	return scale_from_amax(block_amax(x, n), SRT_QUANT_FP8_AMAX_FLOOR, fp8_max_inv, pow2);
}

float srt_quant_fp4_scale(const float *x, size_t n)
{
	return scale_from_amax(block_amax(x, n), SRT_QUANT_FP4_AMAX_FLOOR, fp4_max_inv, true);
}

/* The quantized E4M3 code of x in a block of scale s: clamp(x / s, ±448) then the cast. The
 * clamp makes the cast saturating; NaN propagates to the NaN code. */
static inline uint8_t fp8_code(float x, float s)
{
	return srt_fp8_e4m3_from_f32_sat(x / s);
}

static inline uint8_t fp4_code(float x, float s)
{
	float q = x / s;
	if (isnan(q))
		return 0x7u; /* unreachable from finite inputs; CUDA satfinite gives +6 */
	return srt_fp4_e2m1_from_f32(q);
}

void srt_quant_fp8(const float *x, size_t n, size_t block, bool pow2, uint8_t *codes,
		   float *scales)
{
	assert(block > 0 && n % block == 0);
	for (size_t b = 0; b < n / block; b++) {
		const float *xb = x + b * block;
		float s = srt_quant_fp8_scale(xb, block, pow2);
		scales[b] = s;
		for (size_t i = 0; i < block; i++)
			codes[b * block + i] = fp8_code(xb[i], s);
	}
}

void srt_quant_fp8_ue8m0(const float *x, size_t n, size_t block, uint8_t *codes,
			 uint8_t *scales)
{
	assert(block > 0 && n % block == 0);
	for (size_t b = 0; b < n / block; b++) {
		const float *xb = x + b * block;
		float s = srt_quant_fp8_scale(xb, block, true);
		scales[b] = scale_to_e8m0(s);
		for (size_t i = 0; i < block; i++)
			codes[b * block + i] = fp8_code(xb[i], s);
	}
}

void srt_quant_fp8_fake(const float *x, float *y, size_t n, size_t block, bool pow2)
{
	assert(block > 0 && n % block == 0);
	for (size_t b = 0; b < n / block; b++) {
		const float *xb = x + b * block;
		float *yb = y + b * block;
		float s = srt_quant_fp8_scale(xb, block, pow2);
		for (size_t i = 0; i < block; i++)
			yb[i] = srt_fp8_e4m3_to_f32(fp8_code(xb[i], s)) * s;
	}
}

void srt_quant_act(const float *x, size_t n, uint8_t *codes, float *scales)
{
	srt_quant_fp8(x, n, SRT_QUANT_ACT_BLOCK, true, codes, scales);
}

void srt_quant_act_fake(const float *x, float *y, size_t n)
{
	srt_quant_fp8_fake(x, y, n, SRT_QUANT_ACT_BLOCK, true);
}

void srt_quant_kv_fake(float *x, size_t head_dim, size_t rope_dim)
{
	assert(rope_dim <= head_dim && (head_dim - rope_dim) % SRT_QUANT_KV_BLOCK == 0);
	size_t nope = head_dim - rope_dim;
	srt_quant_fp8_fake(x, x, nope, SRT_QUANT_KV_BLOCK, true);
	srt_round_bf16_n(x + nope, rope_dim);
}

void srt_quant_fp4(const float *x, size_t n, uint8_t *packed, uint8_t *scales)
{
	assert(n % SRT_QUANT_FP4_BLOCK == 0);
	for (size_t b = 0; b < n / SRT_QUANT_FP4_BLOCK; b++) {
		const float *xb = x + b * SRT_QUANT_FP4_BLOCK;
		float s = srt_quant_fp4_scale(xb, SRT_QUANT_FP4_BLOCK);
		scales[b] = scale_to_e8m0(s);
		for (size_t i = 0; i < SRT_QUANT_FP4_BLOCK; i += 2) {
			uint8_t lo = fp4_code(xb[i], s), hi = fp4_code(xb[i + 1], s);
			packed[(b * SRT_QUANT_FP4_BLOCK + i) / 2] = (uint8_t)(lo | (hi << 4));
		}
	}
}

void srt_quant_fp4_fake(const float *x, float *y, size_t n)
{
	assert(n % SRT_QUANT_FP4_BLOCK == 0);
#if defined(SRT_OPS_X86)
	const enum srt_gemm_isa isa = srt_gemm_isa_current();
	if (isa >= SRT_GEMM_ISA_AVX2) { /* 16 or 8 lanes */
		const bool wide = isa >= SRT_GEMM_ISA_AVX512;
		for (size_t b = 0; b < n / SRT_QUANT_FP4_BLOCK; b++) {
			const float *xb = x + b * SRT_QUANT_FP4_BLOCK;
			const float a = (wide ? srt_amax_avx512 : srt_amax_avx2)(xb, SRT_QUANT_FP4_BLOCK);
			const float s = scale_from_amax(a, SRT_QUANT_FP4_AMAX_FLOOR, fp4_max_inv, true);
			(wide ? srt_fp4_fake_avx512 : srt_fp4_fake_avx2)(xb, y + b * SRT_QUANT_FP4_BLOCK,
									 SRT_QUANT_FP4_BLOCK, s);
		}
		return;
	}
#endif
	for (size_t b = 0; b < n / SRT_QUANT_FP4_BLOCK; b++) {
		const float *xb = x + b * SRT_QUANT_FP4_BLOCK;
		float *yb = y + b * SRT_QUANT_FP4_BLOCK;
		float s = srt_quant_fp4_scale(xb, SRT_QUANT_FP4_BLOCK);
		for (size_t i = 0; i < SRT_QUANT_FP4_BLOCK; i++)
			yb[i] = isnan(s) ? NAN : srt_fp4_e2m1_to_f32(fp4_code(xb[i], s)) * s;
	}
}

void srt_quant_weight_fp8(const float *w, size_t rows, size_t cols, uint8_t *codes,
			  uint8_t *scales)
{
	const size_t B = SRT_QUANT_W_BLOCK;
	size_t nbr = (rows + B - 1) / B, nbc = (cols + B - 1) / B;
	for (size_t br = 0; br < nbr; br++) {
		size_t r0 = br * B, r1 = r0 + B < rows ? r0 + B : rows;
		for (size_t bc = 0; bc < nbc; bc++) {
			size_t c0 = bc * B, c1 = c0 + B < cols ? c0 + B : cols;
			float amax = 0.0f;
			for (size_t r = r0; r < r1 && !isnan(amax); r++) {
				float a = block_amax(w + r * cols + c0, c1 - c0);
				amax = (isnan(a) || a > amax) ? a : amax;
			}
			float s = scale_from_amax(amax, SRT_QUANT_FP8_AMAX_FLOOR, fp8_max_inv, true);
			scales[br * nbc + bc] = scale_to_e8m0(s);
			for (size_t r = r0; r < r1; r++)
				for (size_t c = c0; c < c1; c++)
					codes[r * cols + c] = fp8_code(w[r * cols + c], s);
		}
	}
}

void srt_quant_weight_fp4(const float *w, size_t rows, size_t cols, uint8_t *packed,
			  uint8_t *scales)
{
	assert(cols % SRT_QUANT_FP4_BLOCK == 0);
	for (size_t r = 0; r < rows; r++)
		srt_quant_fp4(w + r * cols, cols, packed + r * (cols / 2),
			      scales + r * (cols / SRT_QUANT_FP4_BLOCK));
}
