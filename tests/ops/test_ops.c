/*
 * tests/ops — srt_ops against independent references.
 *
 * Codecs and quantizers: golden tables from ml_dtypes (data/golden.h, see gen_golden.py).
 * Transforms, norms, RoPE, GEMMs: naive double-precision references written here, with
 * tolerances derived from the float32 summation depth of the code under test.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/golden.h"
#include "ops/act.h"
#include "ops/fp.h"
#include "ops/gemm.h"
#include "ops/hadamard.h"
#include "ops/norm.h"
#include "ops/quant.h"
#include "ops/rope.h"
#include "shadowrt/plugin.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* Bitwise float equality that treats every NaN as equal to every NaN. */
static int same_float(float a, float b)
{
	return (isnan(a) && isnan(b)) || f2u(a) == f2u(b);
}

/* Deterministic pseudo-random floats (xorshift), N(0,1)-ish by summing uniforms. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
	float s = 0.0f;
	for (int i = 0; i < 4; i++) {
		rng_state ^= rng_state << 13;
		rng_state ^= rng_state >> 7;
		rng_state ^= rng_state << 17;
		s += (float)((rng_state >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
	}
	return s * 1.7f;
}

/* ==== bf16 ===================================================================================== */

START_TEST(bf16_encode_matches_ml_dtypes_including_ties)
{
	for (size_t i = 0; i < N_OF(golden_bf16_in); i++) {
		uint16_t got = srt_bf16_from_f32(u2f(golden_bf16_in[i]));
		ck_assert_msg(got == golden_bf16_out[i], "input 0x%08x: got 0x%04x, expected 0x%04x",
			      golden_bf16_in[i], got, golden_bf16_out[i]);
	}
}
END_TEST

START_TEST(bf16_every_code_round_trips_and_nan_stays_nan)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = srt_bf16_to_f32((uint16_t)h);
		ck_assert_uint_eq(f2u(f), h << 16);
		if (isnan(f))
			ck_assert(isnan(srt_round_bf16(f)));
		else
			ck_assert_uint_eq(srt_bf16_from_f32(f), h);
	}
	ck_assert_uint_eq(srt_bf16_from_f32(NAN), 0x7FC0);
	ck_assert(isnan(srt_round_bf16(-NAN)));
	/* ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1 (even);
	 * 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 -> 1 + 2^-6 */
	ck_assert(srt_round_bf16(1.0f + 0x1p-8f) == 1.0f);
	ck_assert(srt_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
	ck_assert(isinf(srt_round_bf16(3.4028235e38f)));
}
END_TEST

/* ==== FP8 E4M3 ================================================================================= */

START_TEST(fp8_decode_of_all_256_codes_matches_ml_dtypes)
{
	for (int c = 0; c < 256; c++) {
		ck_assert_msg(same_float(srt_fp8_e4m3_to_f32((uint8_t)c), u2f(golden_fp8_decode[c])),
			      "code 0x%02x", c);
		ck_assert_int_eq(srt_fp8_e4m3_is_nan((uint8_t)c), isnan(u2f(golden_fp8_decode[c])));
	}
	float tmp[256];
	uint8_t codes[256];
	for (int c = 0; c < 256; c++)
		codes[c] = (uint8_t)c;
	srt_fp8_e4m3_to_f32_n(codes, tmp, 256);
	for (int c = 0; c < 256; c++)
		ck_assert(same_float(tmp[c], u2f(golden_fp8_decode[c])));
}
END_TEST

START_TEST(fp8_encode_of_decode_is_identity_for_every_non_nan_code)
{
	for (int c = 0; c < 256; c++) {
		if (srt_fp8_e4m3_is_nan((uint8_t)c))
			continue;
		float v = srt_fp8_e4m3_to_f32((uint8_t)c);
		ck_assert_uint_eq(srt_fp8_e4m3_from_f32(v), (unsigned)c);
		ck_assert_uint_eq(srt_fp8_e4m3_from_f32_sat(v), (unsigned)c);
	}
}
END_TEST

START_TEST(fp8_raw_and_saturating_encode_match_ml_dtypes_ties_subnormals_overflow)
{
	for (size_t i = 0; i < N_OF(golden_fp8_in); i++) {
		float x = u2f(golden_fp8_in[i]);
		uint8_t raw = srt_fp8_e4m3_from_f32(x), sat = srt_fp8_e4m3_from_f32_sat(x);
		ck_assert_msg(raw == golden_fp8_raw[i], "raw %a: got 0x%02x expected 0x%02x", x, raw,
			      golden_fp8_raw[i]);
		ck_assert_msg(sat == golden_fp8_sat[i], "sat %a: got 0x%02x expected 0x%02x", x, sat,
			      golden_fp8_sat[i]);
	}
}
END_TEST

START_TEST(fp8_special_values_nan_inf_saturation_subnormals)
{
	/* raw cast (PyTorch): above 464 -> NaN; 464 ties to 448 */
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32(464.0f), 0x7E);
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32(nextafterf(464.0f, 1e9f)), 0x7F);
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32(-INFINITY), 0xFF);
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32(NAN) & 0x7F, 0x7F);
	/* saturating cast: clamps to ±448, NaN stays NaN */
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32_sat(1e30f), 0x7E);
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32_sat(-INFINITY), 0xFE);
	ck_assert(srt_fp8_e4m3_is_nan(srt_fp8_e4m3_from_f32_sat(NAN)));
	/* subnormals k*2^-9; half of the smallest rounds to zero (even), 3/2 of it to 2 (even) */
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32(0x1p-9f), 0x01);
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32(0x1p-10f), 0x00);
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32(3 * 0x1p-10f), 0x02);
	ck_assert_uint_eq(srt_fp8_e4m3_from_f32(-0x1p-11f), 0x80);
	ck_assert(srt_fp8_e4m3_to_f32(0x07) == 7 * 0x1p-9f);
	ck_assert(srt_fp8_e4m3_to_f32(0x7E) == 448.0f);
}
END_TEST

START_TEST(fp8_ties_round_to_even_at_every_binade)
{
	for (int e = -6; e <= 8; e++) {
		for (int m = 0; m < 8; m++) {
			/* midpoint between mantissas m and m+1 of binade e */
			float lo = ldexpf(1.0f + m / 8.0f, e), hi = ldexpf(1.0f + (m + 1) / 8.0f, e);
			if (hi > 448.0f)
				continue;
			float mid = (lo + hi) / 2;
			float want = (m % 2 == 0) ? lo : hi;
			ck_assert_msg(srt_fp8_e4m3_to_f32(srt_fp8_e4m3_from_f32(mid)) == want,
				      "binade %d mantissa %d", e, m);
			ck_assert(srt_fp8_e4m3_to_f32(srt_fp8_e4m3_from_f32(-mid)) == -want);
		}
	}
}
END_TEST

/* ==== UE8M0 ==================================================================================== */

START_TEST(e8m0_decode_of_all_256_codes_matches_ml_dtypes_and_pow2_round_trips)
{
	for (int e = 0; e < 256; e++) {
		float v = srt_e8m0_to_f32((uint8_t)e);
		ck_assert_msg(same_float(v, u2f(golden_e8m0_decode[e])), "code %d", e);
		if (e != 255)
			ck_assert_uint_eq(srt_e8m0_from_pow2(v), (unsigned)e);
	}
}
END_TEST

START_TEST(e8m0_ceil_rounds_up_to_a_power_of_two)
{
	ck_assert_uint_eq(srt_e8m0_ceil(1.0f), 127);
	ck_assert_uint_eq(srt_e8m0_ceil(nextafterf(1.0f, 2.0f)), 128);
	ck_assert_uint_eq(srt_e8m0_ceil(1.5f), 128);
	ck_assert_uint_eq(srt_e8m0_ceil(0.75f), 127);
	ck_assert_uint_eq(srt_e8m0_ceil(0x1p-126f), 1);
	ck_assert(srt_pow2_ceil(3.0f) == 4.0f);
	ck_assert(srt_pow2_ceil(0x1p127f) == 0x1p127f);
	for (int i = 0; i < 1000; i++) {
		float x = fabsf(frand()) * 1000.0f + 1e-3f;
		float p = srt_pow2_ceil(x);
		ck_assert(p >= x && p / 2 < x);
	}
}
END_TEST

/* ==== FP4 E2M1 ================================================================================= */

START_TEST(fp4_decode_all_16_codes_and_encode_round_trips)
{
	static const float values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
	for (int c = 0; c < 16; c++) {
		float v = srt_fp4_e2m1_to_f32((uint8_t)c);
		ck_assert(same_float(v, u2f(golden_fp4_decode[c])));
		ck_assert(fabsf(v) == values[c & 7] && (signbit(v) != 0) == (c >= 8));
		ck_assert_uint_eq(srt_fp4_e2m1_from_f32(v), (unsigned)c);
	}
}
END_TEST

START_TEST(fp4_encode_matches_ml_dtypes_ties_and_saturation)
{
	for (size_t i = 0; i < N_OF(golden_fp4_in); i++) {
		float x = u2f(golden_fp4_in[i]);
		ck_assert_msg(srt_fp4_e2m1_from_f32(x) == golden_fp4_code[i], "%a: got %u expected %u",
			      x, srt_fp4_e2m1_from_f32(x), golden_fp4_code[i]);
	}
	ck_assert_uint_eq(srt_fp4_e2m1_from_f32(5.0f), 0x6);  /* tie 4|6 -> 4 (even) */
	ck_assert_uint_eq(srt_fp4_e2m1_from_f32(2.5f), 0x4);  /* tie 2|3 -> 2 */
	ck_assert_uint_eq(srt_fp4_e2m1_from_f32(0.25f), 0x0); /* tie 0|0.5 -> 0 */
	ck_assert_uint_eq(srt_fp4_e2m1_from_f32(0.75f), 0x2); /* tie 0.5|1 -> 1 */
	ck_assert_uint_eq(srt_fp4_e2m1_from_f32(-1e9f), 0xF);
	ck_assert_uint_eq(srt_fp4_e2m1_from_f32(NAN), 0x7);
}
END_TEST

START_TEST(fp4_packing_puts_even_index_in_low_nibble)
{
	uint8_t p[2] = {0, 0};
	srt_fp4_set(p, 0, 0x3);
	srt_fp4_set(p, 1, 0xC);
	srt_fp4_set(p, 2, 0x7);
	ck_assert_uint_eq(p[0], 0xC3);
	ck_assert_uint_eq(p[1], 0x07);
	ck_assert_uint_eq(srt_fp4_get(p, 1), 0xC);
	float out[4];
	srt_fp4_unpack(p, out, 4);
	ck_assert(out[0] == 1.5f && out[1] == -2.0f && out[2] == 6.0f && out[3] == 0.0f);
}
END_TEST

/* ==== quantizers ================================================================================ */

START_TEST(act_quant_matches_reference_codes_scales_and_fake_quant)
{
	float x[512], scales[4], fake[512];
	uint8_t codes[512], e8[4], codes2[512];
	for (int i = 0; i < 512; i++)
		x[i] = u2f(golden_act_in[i]);
	srt_quant_act(x, 512, codes, scales);
	srt_quant_act_fake(x, fake, 512);
	srt_quant_fp8_ue8m0(x, 512, 128, codes2, e8);
	for (int b = 0; b < 4; b++) {
		ck_assert_msg(f2u(scales[b]) == golden_act_scales[b], "block %d scale %a", b, scales[b]);
		ck_assert(srt_e8m0_to_f32(e8[b]) == scales[b]);
	}
	for (int i = 0; i < 512; i++) {
		ck_assert_msg(codes[i] == golden_act_codes[i], "element %d", i);
		ck_assert(codes2[i] == codes[i]);
		ck_assert_msg(f2u(fake[i]) == golden_act_fake[i], "fake element %d", i);
	}
	/* in place gives the same */
	srt_quant_act_fake(x, x, 512);
	ck_assert(memcmp(x, fake, sizeof fake) == 0);
}
END_TEST

START_TEST(act_quant_scale_is_amax_over_448_rounded_up_with_floor)
{
	float x[128] = {0};
	x[5] = 448.0f; /* 448/448 = 1: already a power of two */
	ck_assert(srt_quant_fp8_scale(x, 128, true) == 1.0f);
	x[5] = 449.0f; /* just above: rounds up to 2 */
	ck_assert(srt_quant_fp8_scale(x, 128, true) == 2.0f);
	x[5] = -300.0f; /* sign ignored: 300/448 -> 1 */
	ck_assert(srt_quant_fp8_scale(x, 128, true) == 1.0f);
	x[5] = 0.0f; /* all zero: amax floored at 1e-4; 1e-4/448 ~ 2.2e-7 -> 2^-22 */
	ck_assert(srt_quant_fp8_scale(x, 128, true) == 0x1p-22f);
	x[5] = 300.0f; /* float scale mode: exactly amax * (1/448), max element maps to ±448 */
	float s = srt_quant_fp8_scale(x, 128, false);
	ck_assert(s == 300.0f * (float)(1.0 / 448.0));
	uint8_t c[128];
	float sc;
	srt_quant_fp8(x, 128, 128, false, c, &sc);
	ck_assert_uint_eq(c[5], 0x7E);
	/* NaN propagates instead of being hidden by the max */
	x[7] = NAN;
	ck_assert(isnan(srt_quant_fp8_scale(x, 128, true)));
}
END_TEST

START_TEST(kv_fake_quant_blocks_of_64_on_nope_and_bf16_on_rope_dims)
{
	/* generic shape: head_dim 192, rope_dim 64 -> two FP8 blocks of 64 + 64 bf16 dims */
	float x[192], y[192];
	for (int i = 0; i < 192; i++)
		x[i] = frand() * (i < 64 ? 0.01f : 5.0f);
	memcpy(y, x, sizeof x);
	srt_quant_kv_fake(y, 192, 64);
	for (int b = 0; b < 2; b++) {
		float s = srt_quant_fp8_scale(x + 64 * b, 64, true);
		ck_assert(s == srt_pow2_ceil(fmaxf(srt_quant_fp8_scale(x + 64 * b, 64, false), 0)));
		for (int i = 64 * b; i < 64 * b + 64; i++) {
			float want = srt_fp8_e4m3_to_f32(srt_fp8_e4m3_from_f32_sat(x[i] / s)) * s;
			ck_assert(y[i] == want);
			/* relative error of E4M3 (3 mantissa bits) <= 2^-4 for normals */
			ck_assert(fabsf(y[i] - x[i]) <= fmaxf(fabsf(x[i]) * 0x1p-4f, s * 0x1p-10f));
		}
	}
	for (int i = 128; i < 192; i++)
		ck_assert(y[i] == srt_round_bf16(x[i]));
}
END_TEST

START_TEST(fp4_fake_quant_matches_reference_and_scale_floor)
{
	float x[128], y[128];
	for (int i = 0; i < 128; i++)
		x[i] = u2f(golden_fp4q_in[i]);
	srt_quant_fp4_fake(x, y, 128);
	for (int b = 0; b < 4; b++)
		ck_assert(f2u(srt_quant_fp4_scale(x + 32 * b, 32)) == golden_fp4q_scales[b]);
	for (int i = 0; i < 128; i++)
		ck_assert_msg(f2u(y[i]) == golden_fp4q_fake[i], "element %d: %a", i, y[i]);
	/* the all-zero block (the 4th) uses the floor 6*2^-126 -> scale 2^-126 */
	ck_assert(srt_quant_fp4_scale(x + 96, 32) == 0x1p-126f);
	/* the packed form decodes to the same values */
	uint8_t packed[64], sc[4];
	srt_quant_fp4(x, 128, packed, sc);
	for (int i = 0; i < 128; i++)
		ck_assert(srt_fp4_e2m1_to_f32(srt_fp4_get(packed, (size_t)i)) *
				  srt_e8m0_to_f32(sc[i / 32]) ==
			  y[i]);
}
END_TEST

/*
 * The array forms srt_round_bf16_n and srt_quant_fp4_fake at this CPU's kernels (AVX-512:
 * fp_avx512.c) against the portable loops (SRT_GEMM_ISA_GENERIC), bitwise, on hostile floats:
 * random bit patterns (NaN, infinities, subnormals), bf16 and E2M1 ties, the E2M1 grid's
 * edges (0.25, 0.75, 1, 6 times a power of two and their neighbours), lengths that leave a
 * partial vector, and FP4 blocks with a NaN (scale NaN: every element NaN) or an infinity.
 */
static uint32_t xs32(uint32_t *st)
{
	uint32_t x = *st;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *st = x;
}

START_TEST(round_bf16_and_fp4_fake_arrays_equal_the_portable_loops_bitwise)
{
	enum { N = 32 * 97 };
	static float x[N], a[N], b[N];
	static const float edge[] = {0.25f, 0.75f, 1.0f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 0.5f};
	uint32_t st = 0x9E3779B9u;
	for (size_t i = 0; i < N; i++) {
		const uint32_t r = xs32(&st);
		switch (i % 4) {
		case 0: /* any bits */
			x[i] = u2f(r);
			break;
		case 1: /* a bf16 tie or its neighbours */
			x[i] = u2f((r & 0xFFFF0000u) | (0x7FFFu + r % 3u));
			break;
		case 2: { /* an E2M1 edge times a power of two, or one ulp off it */
			const float e = ldexpf(edge[r % 10], (int)(r >> 8 & 15) - 8);
			x[i] = u2f(f2u(e) + (r >> 12 & 2u) - 1u) * ((r >> 16 & 1u) ? -1.0f : 1.0f);
			break;
		}
		default: /* ordinary values over a wide range */
			x[i] = ldexpf((float)(r & 0xFFFF) / 65536.0f - 0.5f, (int)(r >> 16 & 63) - 32);
		}
	}
	for (size_t b0 = 32 * 2; b0 < N; b0 += 32 * 4) { /* blocks of E2M1 ties: scale 8, q an edge */
		for (size_t j = 0; j < 32; j++) {
			const uint32_t r = xs32(&st);
			x[b0 + j] = u2f(f2u(8.0f * edge[r % 10]) + r / 10 % 3u - 1u) * (r & 1u << 20 ? -1.0f : 1.0f);
		}
		x[b0] = 40.0f; /* amax 40: 40 / 6 rounds up to the scale 8 */
	}
	for (size_t b0 = 0; b0 < N; b0 += 32 * 7) /* some blocks with a NaN or an infinity */
		x[b0 + 5] = b0 % 3 ? u2f(0x7FC00001u) : -INFINITY;
	const enum srt_gemm_isa was = srt_gemm_isa_current();
	if (srt_gemm_isa_best() < SRT_GEMM_ISA_AVX2)
		fprintf(stderr, "array forms: no AVX2 here, nothing to compare\n");
	size_t nan_blocks = 0;
	/* each vector set this CPU has (8 and 16 lanes) against the portable loops */
	for (int isa = SRT_GEMM_ISA_AVX2; isa <= SRT_GEMM_ISA_AVX512; isa++) {
		if (srt_gemm_set_isa((enum srt_gemm_isa)isa) != 0)
			continue;
		for (size_t n = 1; n <= 70; n++) { /* partial vectors */
			memcpy(a, x + 3 * n, n * sizeof(float));
			memcpy(b, x + 3 * n, n * sizeof(float));
			srt_round_bf16_n(a, n);
			ck_assert_int_eq(srt_gemm_set_isa(SRT_GEMM_ISA_GENERIC), 0);
			srt_round_bf16_n(b, n);
			ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
			ck_assert_msg(memcmp(a, b, n * sizeof(float)) == 0, "srt_round_bf16_n, n = %zu, %s", n,
				      srt_gemm_isa_name((enum srt_gemm_isa)isa));
		}
		memcpy(a, x, sizeof x);
		srt_round_bf16_n(a, N);
		for (size_t i = 0; i < N; i++)
			ck_assert_msg(f2u(a[i]) == f2u(srt_round_bf16(x[i])), "bf16 of %#x", f2u(x[i]));
		srt_quant_fp4_fake(x, a, N);
		ck_assert_int_eq(srt_gemm_set_isa(SRT_GEMM_ISA_GENERIC), 0);
		srt_quant_fp4_fake(x, b, N);
		ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
		for (size_t i = 0; i < N; i++) {
			ck_assert_msg(f2u(a[i]) == f2u(b[i]), "%s fp4 fake of %#x (element %zu): %#x vs %#x",
				      srt_gemm_isa_name((enum srt_gemm_isa)isa), f2u(x[i]), i, f2u(a[i]), f2u(b[i]));
			nan_blocks += i % 32 == 0 && isnan(a[i]);
		}
	}
	ck_assert_int_eq(srt_gemm_set_isa(was), 0);
	if (srt_gemm_isa_best() >= SRT_GEMM_ISA_AVX2)
		ck_assert_uint_gt(nan_blocks, 0); /* the NaN blocks were hit */
}
END_TEST

START_TEST(weight_fp8_quant_uses_one_pow2_scale_per_128x128_block_with_partial_edges)
{
	enum { R = 200, C = 300 }; /* 2 x 3 blocks, last ones partial */
	float *w = malloc(sizeof(float) * R * C);
	uint8_t *codes = malloc(R * C), sc[2 * 3];
	for (int i = 0; i < R * C; i++)
		w[i] = frand() * (float)(1 + (i % C) / 128) * 0.05f;
	srt_quant_weight_fp8(w, R, C, codes, sc);
	ck_assert_uint_eq(srt_weight_scale_bytes(SRT_WT_FP8, R, C), 6);
	for (int br = 0; br < 2; br++) {
		for (int bc = 0; bc < 3; bc++) {
			float amax = 0;
			for (int r = br * 128; r < R && r < br * 128 + 128; r++)
				for (int c = bc * 128; c < C && c < bc * 128 + 128; c++)
					amax = fmaxf(amax, fabsf(w[r * C + c]));
			float s = srt_e8m0_to_f32(sc[br * 3 + bc]);
			ck_assert(s == srt_pow2_ceil(amax * (float)(1.0 / 448.0)));
		}
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			float s = srt_e8m0_to_f32(sc[(r / 128) * 3 + c / 128]);
			float d = srt_fp8_e4m3_to_f32(codes[r * C + c]) * s;
			ck_assert(!srt_fp8_e4m3_is_nan(codes[r * C + c]));
			/* half an E4M3 ulp: 2^-4 relative for normals, 2^-10 * s absolute below */
			ck_assert(fabsf(d - w[r * C + c]) <= fmaxf(fabsf(w[r * C + c]) * 0x1p-4f, s * 0x1p-10f));
		}
	free(w);
	free(codes);
}
END_TEST

START_TEST(weight_fp4_quant_uses_pow2_scale_per_32_along_k)
{
	enum { R = 3, C = 96 };
	float w[R * C];
	uint8_t packed[R * C / 2], sc[R * C / 32];
	for (int i = 0; i < R * C; i++)
		w[i] = frand() * (float)(1 + i % 7);
	srt_quant_weight_fp4(w, R, C, packed, sc);
	for (int r = 0; r < R; r++)
		for (int b = 0; b < C / 32; b++) {
			float amax = 0;
			for (int k = 0; k < 32; k++)
				amax = fmaxf(amax, fabsf(w[r * C + b * 32 + k]));
			float s = srt_e8m0_to_f32(sc[r * (C / 32) + b]);
			ck_assert(s == srt_pow2_ceil(amax * (float)(1.0 / 6.0)));
			for (int k = 0; k < 32; k++) {
				size_t i = (size_t)(r * C + b * 32 + k);
				float d = srt_fp4_e2m1_to_f32(srt_fp4_get(packed, i)) * s;
				/* nearest of the E2M1 grid: error <= half the gap (<= 1 * s, at 4..6) */
				ck_assert(fabsf(d - w[i]) <= s * 1.0f);
				ck_assert(fabsf(d - w[i]) <= fmaxf(fabsf(w[i]) * 0.25f, s * 0.25f));
			}
		}
}
END_TEST

/* ==== Hadamard ================================================================================= */

START_TEST(hadamard_matches_explicit_sylvester_matrix_and_is_an_involution)
{
	for (size_t n = 1; n <= 256; n *= 2) {
		float x[256], y[256];
		for (size_t i = 0; i < n; i++)
			x[i] = frand();
		memcpy(y, x, n * sizeof(float));
		srt_hadamard(y, n);
		double amax = 0;
		for (size_t i = 0; i < n; i++)
			amax = fmax(amax, fabs(x[i]));
		for (size_t i = 0; i < n; i++) {
			double ref = 0;
			for (size_t j = 0; j < n; j++)
				ref += (__builtin_popcountll(i & j) & 1 ? -1.0 : 1.0) * x[j];
			ref /= sqrt((double)n);
			/* log2(n) rounded butterfly passes + 1 scaling, each |err| <= 2^-24 * partial
			 * sums bounded by sqrt(n)*... : use (log2 n + 1) * 2^-24 * sqrt(n) * amax */
			double tol = (log2((double)n) + 1) * 0x1p-24 * sqrt((double)n) * amax * 2;
			ck_assert_msg(fabs(y[i] - ref) <= tol, "n %zu i %zu: %g vs %g", n, i, y[i], ref);
		}
		/* H * H = I: applying twice gives x back */
		srt_hadamard(y, n);
		for (size_t i = 0; i < n; i++)
			ck_assert(fabs(y[i] - x[i]) <= 4 * (log2((double)n) + 1) * 0x1p-24 * sqrt((double)n) * amax);
	}
	/* H_2 = [[1,1],[1,-1]]/sqrt2 exactly on (1, 0) */
	float e[2] = {1, 0};
	srt_hadamard(e, 2);
	ck_assert(e[0] == (float)(1 / sqrt(2.0)) && e[1] == e[0]);
}
END_TEST

/* ==== RMSNorm, activations ====================================================================== */

START_TEST(rmsnorm_matches_double_reference_with_f32_and_bf16_weights)
{
	enum { N = 1000 };
	float x[N], wf[N], y[N], y2[N], y3[N];
	uint16_t wb[N];
	for (int i = 0; i < N; i++) {
		x[i] = frand() * 3;
		wb[i] = srt_bf16_from_f32(1 + frand() * 0.1f);
		wf[i] = srt_bf16_to_f32(wb[i]);
	}
	double ss = 0;
	for (int i = 0; i < N; i++)
		ss += (double)x[i] * x[i];
	double r = 1 / sqrt(ss / N + 1e-6);
	srt_rmsnorm(x, y, N, 1e-6f);
	srt_rmsnorm_f32w(x, y2, N, wf, 1e-6f);
	srt_rmsnorm_bf16w(x, y3, N, wb, 1e-6f);
	for (int i = 0; i < N; i++) {
		/* sum of 1000 squares in 8 lanes: depth 125 + 3; then 4 more roundings */
		double tol = 140 * 0x1p-24 * fabs(x[i] * r) + 1e-30;
		ck_assert(fabs(y[i] - x[i] * r) <= tol);
		ck_assert(fabs(y2[i] - wf[i] * x[i] * r) <= tol * 1.2);
		ck_assert(y3[i] == y2[i]);
	}
	/* sum order is fixed: in place equals out of place */
	memcpy(y2, x, sizeof x);
	srt_rmsnorm(y2, y2, N, 1e-6f);
	ck_assert(memcmp(y, y2, sizeof y) == 0);
}
END_TEST

START_TEST(sigmoid_silu_softplus_match_double)
{
	for (int i = -400; i <= 400; i++) {
		double x = (double)(float)(i * 0.1);
		double sg = 1 / (1 + exp(-x));
		ck_assert(fabs(srt_sigmoid((float)x) - sg) <= 4e-7 * sg + 1e-30);
		ck_assert(fabs(srt_silu((float)x) - x * sg) <= 1e-6 * fabs(x * sg) + 1e-30);
		double sp = x > 20 ? x : log1p(exp(x));
		ck_assert(fabs(srt_softplus((float)x) - sp) <= 1e-6 * sp + 1e-30);
	}
	ck_assert(srt_softplus(25.0f) == 25.0f); /* threshold 20: identity above */
}
END_TEST

/* ==== RoPE / YaRN ============================================================================== */

START_TEST(yarn_correction_range_for_v4_compressed_layers_is_15_25)
{
	int lo, hi;
	/* corr(32) = 64 ln(65536/(64π)) / (2 ln 160000) = 15.45 -> floor 15
	 * corr(1)  = 64 ln(65536/(2π))  / (2 ln 160000) = 24.71 -> ceil 25 */
	srt_rope_correction_range(64, 160000, 65536, 32, 1, &lo, &hi);
	ck_assert_int_eq(lo, 15);
	ck_assert_int_eq(hi, 25);
	/* theta 10000 (DeepSeek-V3: dim 64, orig 4096):
	 * corr(32) = 64 ln(4096/(64π)) / (2 ln 10000) = 10.47 -> 10,
	 * corr(1)  = 64 ln(4096/(2π))  / (2 ln 10000) = 22.51 -> 23 */
	srt_rope_correction_range(64, 10000, 4096, 32, 1, &lo, &hi);
	ck_assert_int_eq(lo, 10);
	ck_assert_int_eq(hi, 23);
}
END_TEST

START_TEST(yarn_frequency_table_matches_hand_derived_values)
{
	float f[32], plain[32];
	struct srt_rope_yarn y = {16, 65536, 32, 1};
	srt_rope_freqs(f, 64, 160000, &y);
	srt_rope_freqs(plain, 64, 160000, NULL);
	/* Hand derivation (low 15, high 25, ramp_i = clamp((i-15)/10, 0, 1), smooth = 1 - ramp):
	 *  i <= 15: smooth 1 -> f_i' = f_i            (high-frequency pairs untouched)
	 *  i >= 25: smooth 0 -> f_i' = f_i / 16       (low-frequency pairs interpolated)
	 *  i = 20:  smooth 0.5 -> f_i' = f_i (1/32 + 1/2) = f_i * 17/32
	 * and f_i = 160000^(-i/32): f_0 = 1, f_16 = 1/400, f_31 = 160000^(-31/32). */
	ck_assert(f[0] == 1.0f && plain[0] == 1.0f);
	ck_assert(fabs(plain[16] - 1.0 / 400.0) <= 1e-7 / 400.0 * 4);
	ck_assert(fabs(plain[31] - pow(160000.0, -31.0 / 32.0)) <= 4e-7 * plain[31]);
	for (int i = 0; i <= 15; i++)
		ck_assert(f[i] == plain[i]);
	for (int i = 25; i < 32; i++)
		ck_assert(f[i] == plain[i] / 16.0f);
	ck_assert(fabs(f[20] - plain[20] * 17.0 / 32.0) <= 2e-7 * f[20]);
	for (int i = 16; i < 25; i++) {
		double sm = 1 - (i - 15) / 10.0;
		ck_assert(fabs(f[i] - (plain[i] / 16.0 * (1 - sm) + plain[i] * sm)) <= 3e-7 * f[i]);
	}
	/* plain RoPE for SWA layers: theta 10000, f_i = 10000^(-i/32) */
	srt_rope_freqs(plain, 64, 10000, NULL);
	for (int i = 0; i < 32; i++)
		ck_assert(fabs(plain[i] - pow(10000.0, -i / 32.0)) <= 3e-7 * plain[i]);
}
END_TEST

START_TEST(rope_rotates_interleaved_pairs_and_inverse_restores)
{
	float freqs[32], x[64], y[64];
	struct srt_rope_yarn yr = {16, 65536, 32, 1};
	srt_rope_freqs(freqs, 64, 160000, &yr);
	for (int i = 0; i < 64; i++)
		x[i] = frand();
	const int64_t pos = 12345;
	memcpy(y, x, sizeof x);
	srt_rope_apply_pos(y, 64, freqs, pos, false);
	for (int i = 0; i < 32; i++) {
		double ang = (double)((float)pos * freqs[i]);
		double c = cos(ang), s = sin(ang);
		double re = x[2 * i] * c - x[2 * i + 1] * s, im = x[2 * i] * s + x[2 * i + 1] * c;
		double mag = fabs(x[2 * i]) + fabs(x[2 * i + 1]);
		ck_assert(fabs(y[2 * i] - re) <= 4 * 0x1p-24 * mag);
		ck_assert(fabs(y[2 * i + 1] - im) <= 4 * 0x1p-24 * mag);
	}
	srt_rope_apply_pos(y, 64, freqs, pos, true);
	for (int i = 0; i < 64; i++)
		ck_assert(fabs(y[i] - x[i]) <= 1e-6 * (fabs(x[i ^ 1]) + fabs(x[i])));
	/* position 0 is the identity */
	memcpy(y, x, sizeof x);
	srt_rope_apply_pos(y, 64, freqs, 0, false);
	ck_assert(memcmp(x, y, sizeof x) == 0);
}
END_TEST

/* ==== GEMM ===================================================================================== */

struct wtest {
	struct srt_weight w;
	float *deq; /* dequantized [N][K] */
	void *data;
	uint8_t *scales;
};

static void make_weight(struct wtest *t, enum srt_wtype type, size_t N, size_t K)
{
	float *src = malloc(sizeof(float) * N * K);
	for (size_t i = 0; i < N * K; i++)
		src[i] = frand() * (float)(1 + (i % K) / 100) * 0.1f;
	t->deq = malloc(sizeof(float) * N * K);
	t->data = malloc(srt_weight_data_bytes(type, N, K));
	t->scales = malloc(srt_weight_scale_bytes(type, N, K) + 1);
	switch (type) {
	case SRT_WT_F32:
		memcpy(t->data, src, sizeof(float) * N * K);
		memcpy(t->deq, src, sizeof(float) * N * K);
		break;
	case SRT_WT_BF16:
		srt_f32_to_bf16_n(src, t->data, N * K);
		srt_bf16_to_f32_n(t->data, t->deq, N * K);
		break;
	case SRT_WT_FP8: {
		srt_quant_weight_fp8(src, N, K, t->data, t->scales);
		const uint8_t *c = t->data;
		for (size_t n = 0; n < N; n++)
			for (size_t k = 0; k < K; k++)
				t->deq[n * K + k] = srt_fp8_e4m3_to_f32(c[n * K + k]) *
						    srt_e8m0_to_f32(t->scales[(n / 128) * ((K + 127) / 128) + k / 128]);
		break;
	}
	case SRT_WT_FP4:
		srt_quant_weight_fp4(src, N, K, t->data, t->scales);
		for (size_t n = 0; n < N; n++)
			for (size_t k = 0; k < K; k++)
				t->deq[n * K + k] = srt_fp4_e2m1_to_f32(srt_fp4_get(t->data, n * K + k)) *
						    srt_e8m0_to_f32(t->scales[n * (K / 32) + k / 32]);
		break;
	case SRT_WT_FP8_PAIRED: /* made from an FP8 one (srt_weight_fp8_pair) */
		ck_abort_msg("make_weight: pair an SRT_WT_FP8 weight instead");
		break;
	}
	t->w = (struct srt_weight){type, N, K, t->data, (type >= SRT_WT_FP8) ? t->scales : NULL};
	free(src);
}

static void free_weight(struct wtest *t)
{
	free(t->deq);
	free(t->data);
	free(t->scales);
}

/* Error bound of the library's float32 dot over K: each of the K products is rounded once,
 * then added along a path of depth <= K/128 (block adds) + 16 (one lane) + 3 (lane combine)
 * (+2 for the reference-mode scale multiplications): |err| <= (depth + 1) * 2^-24 * Σ|x w|. */
static double dot_tol(size_t K, double sum_abs)
{
	return ((double)K / 128 + 16 + 3 + 3) * 0x1p-24 * sum_abs * 1.01 + 1e-30;
}

static const enum srt_wtype all_types[] = {SRT_WT_F32, SRT_WT_BF16, SRT_WT_FP8, SRT_WT_FP4};

START_TEST(gemm_exact_matches_dequantize_then_multiply_in_double)
{
	enum { M = 3, N = 130, K = 384 };
	float x[M * K], y[M * N];
	for (int i = 0; i < M * K; i++)
		x[i] = frand();
	for (size_t ti = 0; ti < N_OF(all_types); ti++) {
		struct wtest t;
		make_weight(&t, all_types[ti], N, K);
		ck_assert_int_eq(srt_gemm(&t.w, x, M, K, y, N, 0, N, SRT_GEMM_EXACT), 0);
		for (int m = 0; m < M; m++)
			for (int n = 0; n < N; n++) {
				double ref = 0, sa = 0;
				for (int k = 0; k < K; k++) {
					ref += (double)x[m * K + k] * t.deq[n * K + k];
					sa += fabs((double)x[m * K + k] * t.deq[n * K + k]);
				}
				ck_assert_msg(fabs(y[m * N + n] - ref) <= dot_tol(K, sa),
					      "type %d m %d n %d: %.9g vs %.9g", all_types[ti], m, n,
					      y[m * N + n], ref);
			}
		free_weight(&t);
	}
}
END_TEST

START_TEST(gemm_reference_matches_blockwise_fp8_activation_formula_in_double)
{
	enum { M = 2, N = 129, K = 256 };
	float x[M * K], y[M * N];
	for (int i = 0; i < M * K; i++)
		x[i] = frand() * (i % 128 < 64 ? 1.0f : 30.0f);
	for (size_t ti = 0; ti < N_OF(all_types); ti++) {
		struct wtest t;
		make_weight(&t, all_types[ti], N, K);
		ck_assert_int_eq(srt_gemm(&t.w, x, M, K, y, N, 0, N, SRT_GEMM_REFERENCE), 0);
		for (int m = 0; m < M; m++) {
			/* activation fake-quant per 128 (pow2 scale), then a double dot product; the
			 * reference does not quantize activations for f32/bf16 weights */
			float xq[K];
			if (all_types[ti] >= SRT_WT_FP8)
				srt_quant_act_fake(x + m * K, xq, K);
			else
				memcpy(xq, x + m * K, sizeof xq);
			for (int n = 0; n < N; n++) {
				double ref = 0, sa = 0;
				for (int k = 0; k < K; k++) {
					ref += (double)xq[k] * t.deq[n * K + k];
					sa += fabs((double)xq[k] * t.deq[n * K + k]);
				}
				ck_assert_msg(fabs(y[m * N + n] - ref) <= dot_tol(K, sa),
					      "type %d m %d n %d: %.9g vs %.9g", all_types[ti], m, n,
					      y[m * N + n], ref);
			}
		}
		free_weight(&t);
	}
}
END_TEST

START_TEST(gemm_results_are_bitwise_identical_for_chunked_and_one_shot_runs)
{
	enum { M = 5, N = 70, K = 256 };
	float x[M * K], y1[M * N], y2[M * N];
	for (int i = 0; i < M * K; i++)
		x[i] = frand();
	for (size_t ti = 0; ti < N_OF(all_types); ti++) {
		struct wtest t;
		make_weight(&t, all_types[ti], N, K);
		for (int mode = 0; mode < 2; mode++) {
			ck_assert_int_eq(srt_gemm(&t.w, x, M, K, y1, N, 0, N, mode), 0);
			memset(y2, 0xFF, sizeof y2);
			/* one row at a time, split into uneven column ranges */
			for (int m = 0; m < M; m++) {
				ck_assert_int_eq(srt_gemm(&t.w, x + m * K, 1, K, y2 + m * N, N, 0, 3, mode), 0);
				ck_assert_int_eq(srt_gemm(&t.w, x + m * K, 1, K, y2 + m * N, N, 3, 41, mode), 0);
				ck_assert_int_eq(srt_gemm(&t.w, x + m * K, 1, K, y2 + m * N, N, 41, N, mode), 0);
			}
			ck_assert_msg(memcmp(y1, y2, sizeof y1) == 0, "type %d mode %d", all_types[ti], mode);
		}
		free_weight(&t);
	}
}
END_TEST

START_TEST(gemm_reference_on_prepared_activations_equals_convenience_call)
{
	enum { M = 2, N = 16, K = 256 };
	float x[M * K], xq[M * K], xs[M * 2], y1[M * N], y2[M * N];
	for (int i = 0; i < M * K; i++)
		x[i] = frand();
	for (int m = 0; m < M; m++)
		srt_gemm_quant_row(x + m * K, K, xq + m * K, xs + m * 2);
	struct wtest t;
	make_weight(&t, SRT_WT_FP4, N, K);
	ck_assert_int_eq(srt_gemm(&t.w, x, M, K, y1, N, 0, N, SRT_GEMM_REFERENCE), 0);
	srt_gemm_ref(&t.w, xq, xs, M, K, y2, N, 0, N);
	ck_assert(memcmp(y1, y2, sizeof y1) == 0);
	free_weight(&t);
}
END_TEST

/* Random raw weights: every code of the format (E4M3 without its two NaN codes, all E2M1,
 * bf16 of N(0,1)-ish floats), UE8M0 scales 2^-20 .. 2^20 (or, when `wide`, any of 2^-127 ..
 * 2^127), so subnormal codes, -0 and every nibble go through each decoder. */
static void make_raw_weight(struct wtest *t, enum srt_wtype type, size_t N, size_t K, bool wide)
{
	size_t db = srt_weight_data_bytes(type, N, K), sb = srt_weight_scale_bytes(type, N, K);
	t->deq = NULL;
	t->data = malloc(db);
	t->scales = malloc(sb + 1);
	uint8_t *d = t->data;
	for (size_t i = 0; i < db; i++) {
		rng_state ^= rng_state << 13;
		rng_state ^= rng_state >> 7;
		rng_state ^= rng_state << 17;
		d[i] = (uint8_t)(rng_state >> 32);
		if (type == SRT_WT_FP8 && (d[i] & 0x7F) == 0x7F)
			d[i] ^= 1;
	}
	if (type == SRT_WT_F32)
		for (size_t i = 0; i < N * K; i++)
			((float *)t->data)[i] = frand();
	if (type == SRT_WT_BF16)
		for (size_t i = 0; i < N * K; i++)
			((uint16_t *)t->data)[i] = (uint16_t)(f2u(frand()) >> 16);
	for (size_t i = 0; i < sb; i++)
		t->scales[i] = wide ? (uint8_t)((d[(i * 13) % db] + i) % 255)
				    : (uint8_t)(107 + (d[i % db] * 7 + i) % 41);
	t->w = (struct srt_weight){type, N, K, t->data, (type >= SRT_WT_FP8) ? t->scales : NULL};
}

/* Every kernel set the CPU has (generic, AVX2, AVX-512) gives the generic set's bits: both
 * modes, every type, M = 1, 2, 3, 4, 5, 7, 8, 17, output ranges that start and end off the tile
 * grid, K with a partial last block (exact mode) and K % 8 != 0 (f32/bf16). */
START_TEST(gemm_every_kernel_set_is_bitwise_identical_to_generic_for_every_m)
{
	static const size_t Ms[] = {1, 2, 3, 4, 5, 7, 8, 17};
	struct shape {
		enum srt_wtype type;
		size_t K;
		int modes; /* bit 0 exact, bit 1 reference */
		bool wide; /* extreme scales and activations: the kernels' exactness fallbacks */
		int bx;    /* bf16 activations (the AVX512_BF16 dot products of bf16 weights);
			    * 2: and weights out of their range in two tiles, an activation out
			    * of it in row 2 (their fallbacks to the float kernels) */
	};
	static const struct shape shapes[] = {
		{SRT_WT_F32, 384, 3, 0, 0},  {SRT_WT_F32, 200, 1, 0, 0},  {SRT_WT_F32, 100, 1, 0, 0},
		{SRT_WT_BF16, 384, 3, 0, 0}, {SRT_WT_BF16, 136, 1, 0, 0}, {SRT_WT_BF16, 36, 1, 0, 0},
		{SRT_WT_FP8, 384, 3, 0, 0},  {SRT_WT_FP4, 384, 3, 0, 0},  {SRT_WT_FP4, 160, 1, 0, 0},
		{SRT_WT_FP8, 384, 3, 1, 0},  {SRT_WT_FP4, 384, 3, 1, 0},
		{SRT_WT_BF16, 384, 1, 0, 1}, {SRT_WT_BF16, 384, 1, 0, 2},
	};
	enum { N = 45, MMAX = 17, KMAX = 384 };
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	ck_assert_int_eq(srt_gemm_set_isa(SRT_GEMM_ISA_GENERIC), 0);
	ck_assert_int_eq(srt_gemm_isa_current(), SRT_GEMM_ISA_GENERIC);
	float *x = malloc(sizeof(float) * MMAX * KMAX), *xq = malloc(sizeof(float) * MMAX * KMAX);
	float xs[MMAX * KMAX / 128];
	float *y0 = malloc(sizeof(float) * MMAX * N), *y1 = malloc(sizeof(float) * MMAX * N);
	for (size_t si = 0; si < N_OF(shapes); si++) {
		const struct shape *sh = &shapes[si];
		/* wide: per 128 block, activations of 2^-140 .. 2^125 (subnormal .. overflowing) */
		for (size_t i = 0; i < MMAX * KMAX; i++)
			x[i] = i % 97 == 0 ? -0.0f : i % 89 == 0 ? 0.0f : frand() * (float)(1 + i % 5);
		if (sh->wide)
			for (size_t i = 0; i < MMAX * KMAX; i++)
				x[i] *= ldexpf(1.0f, (int)((i / 128) * 37 % 266) - 140);
		if (sh->wide)
			for (size_t m = 0; m < MMAX; m++) {
				x[m * sh->K + 130] = 0x1.8p125f; /* x·2^8 overflows */
				x[m * sh->K + 7] = 0x1.234p-140f;
			}
		if (sh->bx) /* bf16 values, -0 and 0 among them */
			for (size_t i = 0; i < MMAX * KMAX; i++)
				x[i] = u2f(f2u(x[i]) & 0xFFFF0000u);
		if (sh->bx == 2) /* row 2: subnormal activations (the dot products would flush them) */
			for (size_t k = 0; k < sh->K; k++)
				x[2 * sh->K + k] = ldexpf(x[2 * sh->K + k], -130);
		struct wtest t;
		make_raw_weight(&t, sh->type, N, sh->K, sh->wide);
		if (sh->bx == 2) { /* a row of subnormal weights in tile 1 (the dot products would
				    * flush them), a huge weight in tile 3 */
			for (size_t k = 0; k < sh->K; k++)
				((uint16_t *)t.data)[9 * sh->K + k] = (uint16_t)(0x0001 + (k % 3) * 0x8010);
			((uint16_t *)t.data)[30 * sh->K + 300] = 0x7E00;
		}
		if (sh->K % 128 == 0)
			for (size_t m = 0; m < MMAX; m++)
				srt_gemm_quant_row(x + m * sh->K, sh->K, xq + m * sh->K, xs + m * (sh->K / 128));
		if (sh->wide) {
			/* any floats as "quantized" activations, FP8 scales at both ends */
			memcpy(xq, x, sizeof(float) * MMAX * KMAX);
			if (sh->type == SRT_WT_FP8) {
				t.scales[0] = 250;
				t.scales[1] = 3;
			}
		}
		for (int mode = 0; mode < 2; mode++) {
			if (!(sh->modes & (1 << mode)))
				continue;
			for (size_t mi = 0; mi < N_OF(Ms); mi++) {
				const size_t M = Ms[mi], n0 = mi % 3, n1 = N - (mi % 2);
				for (int isa = SRT_GEMM_ISA_GENERIC; isa <= (int)best; isa++) {
					float *y = isa == SRT_GEMM_ISA_GENERIC ? y0 : y1;
					memset(y, 0x7F, sizeof(float) * MMAX * N);
					ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
					if (mode == 0)
						srt_gemm_exact(&t.w, x, M, sh->K, y, N, n0, n1);
					else
						srt_gemm_ref(&t.w, xq, xs, M, sh->K, y, N, n0, n1);
					if (isa == SRT_GEMM_ISA_GENERIC)
						continue;
					for (size_t i = 0; i < M * N; i++)
						ck_assert_msg(same_float(y0[i], y1[i]),
							      "%s type %d K %zu mode %d M %zu: y[%zu][%zu] %a vs generic %a",
							      srt_gemm_isa_name((enum srt_gemm_isa)isa), sh->type,
							      sh->K, mode, M, i / N, i % N, y1[i], y0[i]);
				}
			}
		}
		free_weight(&t);
	}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
	free(x);
	free(xq);
	free(y0);
	free(y1);
}
END_TEST

/* SRT_WT_FP8_PAIRED (gemm.h): the layout is the one gemm.h describes (checked here from its
 * words, byte by byte), unpairs back to the row-major codes, refuses shapes it does not take,
 * and every kernel set gives the FP8 weight's bits on it: both modes, M = 1 (the decode
 * kernel) to 130 (two prefill row chunks), column ranges on and off the pairs and tiles,
 * ordinary and extreme activations (the kernels' exactness fallbacks). */
START_TEST(gemm_fp8_paired_layout_gives_the_row_major_bits_in_every_kernel_set)
{
	static const size_t Ms[] = {1, 2, 3, 8, 17, 130};
	static const size_t ranges[][2] = {{0, 272}, {16, 256}, {2, 270}, {1, 271}, {8, 40}, {0, 8},
					   {4, 10}};
	enum { N = 272, K = 384, MMAX = 130 };
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	struct wtest t;
	make_raw_weight(&t, SRT_WT_FP8, N, K, false);
	uint8_t *pd = malloc((size_t)N * K), *back = malloc((size_t)N * K);
	struct srt_weight pw;
	ck_assert_int_eq(srt_weight_fp8_pair(&t.w, pd, &pw), 0);
	ck_assert_int_eq(pw.type, SRT_WT_FP8_PAIRED);
	ck_assert_ptr_eq(pw.data, pd);
	ck_assert_ptr_eq(pw.scales, t.scales);
	const uint8_t *c = t.data;
	for (size_t p = 0; p < N / 2; p++)
		for (size_t g = 0; g < K / 32; g++)
			for (size_t l = 0; l < 4; l++)
				for (size_t u = 0; u < 2; u++)
					for (size_t w = 0; w < 8; w++) {
						const size_t row = 2 * p + l / 2,
							     k = 32 * g + 16 * u + 4 * (l % 2) + w / 2 + (w % 2 ? 0 : 8);
						ck_assert_uint_eq(pd[2 * p * K + 64 * g + 16 * l + 8 * u + w],
								  c[row * K + k]);
					}
	srt_weight_fp8_unpair(&pw, 0, N, back);
	ck_assert_int_eq(memcmp(back, t.data, (size_t)N * K), 0);
	memset(back, 0, (size_t)N * K);
	srt_weight_fp8_unpair(&pw, 130, 6, back);
	ck_assert_int_eq(memcmp(back, c + 130 * K, 6 * K), 0);
	/* shapes it refuses */
	struct srt_weight bad = t.w;
	bad.rows = 40;
	ck_assert_int_eq(srt_weight_fp8_pair(&bad, pd, &pw), SRT_EINVAL);
	bad = t.w;
	bad.cols = 8320;
	ck_assert_int_eq(srt_weight_fp8_pair(&bad, pd, &pw), SRT_EINVAL);
	bad = t.w;
	bad.type = SRT_WT_FP4;
	ck_assert_int_eq(srt_weight_fp8_pair(&bad, pd, &pw), SRT_EINVAL);
	ck_assert_int_eq(srt_weight_fp8_pair(&t.w, pd, &pw), 0);
	/* several at once into one block: the eligible ones only, the same bytes */
	{
		struct srt_weight a = t.w, b = t.w, c = t.w, e = t.w;
		b.rows = 40;               /* not a multiple of 16: stays */
		c.type = SRT_WT_FP4;       /* not FP8: stays */
		e.rows = 128;              /* the first 128 rows */
		struct srt_weight *ws[4] = {&a, &b, &c, &e};
		struct srt_fp8_block blk = {0};
		ck_assert_int_eq(srt_weight_fp8_pair_all(ws, 4, &blk), 0);
		ck_assert_ptr_nonnull(blk.base);
		ck_assert_uint_eq((uintptr_t)blk.base % (2u << 20), 0);
		ck_assert_uint_ge(blk.len, (size_t)(N + 128) * K);
		ck_assert_int_eq(a.type, SRT_WT_FP8_PAIRED);
		ck_assert_int_eq(e.type, SRT_WT_FP8_PAIRED);
		ck_assert_int_eq(b.type, SRT_WT_FP8);
		ck_assert_ptr_eq(b.data, t.data);
		ck_assert_int_eq(c.type, SRT_WT_FP4);
		ck_assert_int_eq(memcmp(a.data, pd, (size_t)N * K), 0);
		ck_assert_int_eq(memcmp(e.data, pd, (size_t)128 * K), 0);
		srt_fp8_block_free(&blk);
		ck_assert_ptr_null(blk.base);
		struct srt_weight *none[1] = {&b};
		ck_assert_int_eq(srt_weight_fp8_pair_all(none, 1, &blk), 0);
		ck_assert_ptr_null(blk.base);
		srt_fp8_block_free(&blk);
		/* no room for the block (a child process with its address space capped just
		 * above what it maps): SRT_ENOMEM, the weights untouched */
		a = t.w;
		struct srt_weight *one[1] = {&a};
		fflush(NULL);
		const pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			FILE *st = fopen("/proc/self/status", "r");
			char line[256];
			unsigned long long vm_kb = 0;
			while (st && fgets(line, sizeof line, st))
				if (sscanf(line, "VmSize: %llu kB", &vm_kb) == 1)
					break;
			if (st)
				fclose(st);
			const struct rlimit lim = {(rlim_t)(vm_kb + 1024) * 1024,
						   (rlim_t)(vm_kb + 1024) * 1024};
			if (!vm_kb || setrlimit(RLIMIT_AS, &lim))
				_exit(3);
			const int rc = srt_weight_fp8_pair_all(one, 1, &blk);
			_exit(rc == SRT_ENOMEM && blk.base == NULL && a.type == SRT_WT_FP8 &&
				      a.data == t.data ? 0 : 1);
		}
		int status = 0;
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "pair_all with no room: child status %d", status);
	}

	float *x = malloc(sizeof(float) * MMAX * K), *xq = malloc(sizeof(float) * MMAX * K);
	float *xs = malloc(sizeof(float) * MMAX * K / 128);
	float *y0 = malloc(sizeof(float) * MMAX * N), *y1 = malloc(sizeof(float) * MMAX * N);
	for (int wide = 0; wide < 2; wide++) {
		for (size_t i = 0; i < (size_t)MMAX * K; i++) {
			x[i] = i % 97 == 0 ? -0.0f : frand() * (float)(1 + i % 5);
			if (wide)
				x[i] *= ldexpf(1.0f, (int)((i / 128) * 37 % 266) - 140);
		}
		for (size_t m = 0; m < MMAX; m++)
			srt_gemm_quant_row(x + m * K, K, xq + m * K, xs + m * (K / 128));
		if (wide) /* any floats as "quantized" activations in some rows */
			memcpy(xq + 3 * K, x + 3 * K, sizeof(float) * 20 * K);
		for (int isa = SRT_GEMM_ISA_GENERIC; isa <= (int)best; isa++) {
			ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
			for (size_t mi = 0; mi < N_OF(Ms); mi++)
				for (size_t ri = 0; ri < N_OF(ranges); ri++) {
					const size_t M = Ms[mi], n0 = ranges[ri][0], n1 = ranges[ri][1];
					if (M > 17 && ri > 1)
						continue; /* the long M once or twice is enough */
					for (int mode = 0; mode < 2; mode++) {
						memset(y0, 0x7F, sizeof(float) * MMAX * N);
						memset(y1, 0x7F, sizeof(float) * MMAX * N);
						if (mode == 0) {
							srt_gemm_exact(&t.w, x, M, K, y0, N, n0, n1);
							srt_gemm_exact(&pw, x, M, K, y1, N, n0, n1);
						} else {
							srt_gemm_ref(&t.w, xq, xs, M, K, y0, N, n0, n1);
							srt_gemm_ref(&pw, xq, xs, M, K, y1, N, n0, n1);
						}
						for (size_t i = 0; i < M * N; i++)
							ck_assert_msg(same_float(y0[i], y1[i]),
								      "%s wide %d mode %d M %zu [%zu, %zu): y[%zu][%zu] %a paired, %a row-major",
								      srt_gemm_isa_name((enum srt_gemm_isa)isa), wide,
								      mode, M, n0, n1, i / N, i % N, y1[i], y0[i]);
					}
				}
		}
	}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
	free(x);
	free(xq);
	free(xs);
	free(y0);
	free(y1);
	free(pd);
	free(back);
	free_weight(&t);
}
END_TEST

/* srt_gemm_ref at M = 1 for output rows from 0, 1 and 2 to the end: every kernel set gives the
 * generic set's bits (the best set is current again afterwards). */
/* srt_gemm_ref of m rows (stride K, m <= 32) by every kernel set against the generic set,
 * columns from n0 = 0, 1, 2 (N <= 64). */
static void gemm_ref_every_isa_is_generic(const struct srt_weight *w, const float *xq,
					  const float *xs, size_t m, const char *what)
{
	enum { NMAX = 64, MMAX = 32 };
	const size_t N = w->rows, K = w->cols;
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	static float y0[MMAX * NMAX], y1[MMAX * NMAX];
	ck_assert_uint_le(N, NMAX);
	ck_assert_uint_le(m, MMAX);
	for (size_t n0 = 0; n0 < 3; n0++)
		for (int isa = SRT_GEMM_ISA_GENERIC; isa <= (int)best; isa++) {
			float *y = isa == SRT_GEMM_ISA_GENERIC ? y0 : y1;
			ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
			srt_gemm_ref(w, xq, xs, m, K, y, N, n0, N);
			if (isa == SRT_GEMM_ISA_GENERIC)
				continue;
			for (size_t i = 0; i < m; i++)
				for (size_t n = n0; n < N; n++)
					ck_assert_msg(same_float(y0[i * N + n], y1[i * N + n]),
						      "%s %s, %zu rows, columns from %zu: y[%zu][%zu] %a vs generic %a",
						      srt_gemm_isa_name((enum srt_gemm_isa)isa), what, m, n0, i,
						      n, y1[i * N + n], y0[i * N + n]);
		}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
}

static void gemv_ref_every_isa_is_generic(const struct srt_weight *w, const float *xq,
					  const float *xs, const char *what)
{
	gemm_ref_every_isa_is_generic(w, xq, xs, 1, what);
}

/* REFERENCE GEMVs (M = 1) on properly quantized activations (so the exact-product kernels,
 * AVX512_BF16 dot products included, run) with scale codes over the whole UE8M0 range, 0
 * (2^-127) and 255 (NaN) included, K whose per-row FP4 scale bytes end inside a 32-byte load
 * (512, 1280) or on one (1024), zeros of both signs in the activations: every kernel set
 * gives the generic set's bits. */
START_TEST(gemv_reference_matches_generic_for_every_scale_code_on_quantized_activations)
{
	static const size_t Ks[] = {512, 1024, 1280};
	static const enum srt_wtype types[] = {SRT_WT_FP8, SRT_WT_FP4};
	enum { N = 45, KMAX = 1280 };
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	float x[KMAX], xq[KMAX], xs[KMAX / 128];
	for (size_t ki = 0; ki < N_OF(Ks); ki++) {
		const size_t K = Ks[ki];
		for (size_t i = 0; i < K; i++)
			x[i] = i % 53 == 0 ? -0.0f : i % 47 == 0 ? 0.0f
				: frand() * ldexpf(1.0f, (int)(i % 23) - 11);
		srt_gemm_quant_row(x, K, xq, xs);
		for (size_t ti = 0; ti < N_OF(types); ti++) {
			struct wtest t;
			make_raw_weight(&t, types[ti], N, K, true);
			const size_t sb = srt_weight_scale_bytes(types[ti], N, K);
			for (size_t i = 0; i < sb; i += 29)
				t.scales[i] = i % 2 ? 0 : 255;
			char what[48];
			snprintf(what, sizeof what, "type %d K %zu", types[ti], K);
			gemv_ref_every_isa_is_generic(&t.w, xq, xs, what);
			free_weight(&t);
		}
	}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
}
END_TEST

/* REFERENCE FP8 GEMVs on activations that are not all E4M3 values (srt_gemm_ref takes any
 * floats), one kind of block at a time between zero blocks (so no other block's sum hides
 * its bits), scales 2^0: E4M3 values (the AVX2 kernel's integer-bits path, activations times
 * 2^118), floats with 24 significant bits (products not exact: no fused multiply-adds), E4M3
 * values with one of 2^10 or more (times 2^118 overflows), E4M3 values near 2^-100. Every
 * kernel set gives the generic set's bits. */
START_TEST(gemv_reference_fp8_matches_generic_on_unquantized_activations)
{
	enum { N = 40, K = 512 };
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	float x[K], xq[K], xs[K / 128];
	struct wtest t;
	make_raw_weight(&t, SRT_WT_FP8, N, K, false);
	memset(t.scales, 127, srt_weight_scale_bytes(SRT_WT_FP8, N, K));
	for (int kind = 0; kind < 4; kind++) {
		for (size_t i = 0; i < K; i++)
			x[i] = i / 128 == 1 ? frand() * ldexpf(1.0f, (int)(i % 17) - 8) : 0.0f;
		srt_gemm_quant_row(x, K, xq, xs);
		for (size_t i = 128; i < 256; i++) {
			if (kind == 1) /* 24 significant bits */
				xq[i] = x[i] * (1.0f + 0x1p-22f);
			if (kind == 3)
				xq[i] = ldexpf(xq[i], -95);
		}
		if (kind == 2) /* an exact value whose 2^118 multiple overflows */
			xq[128 + 77] = -1536.0f;
		char what[48];
		snprintf(what, sizeof what, "fp8 on unquantized activations, kind %d", kind);
		gemv_ref_every_isa_is_generic(&t.w, xq, xs, what);
	}
	free_weight(&t);
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
}
END_TEST

/* The M = 1 (decode) GEMVs keep the whole activation row on the stack up to K = 8192 and
 * hand larger K to the tile kernels: at K = 8192 and 8320, for every weight type and mode,
 * output ranges starting off the 8-row tile grid and ending in a partial tile, every kernel
 * set gives the generic set's bits. */
START_TEST(gemv_kernels_match_generic_at_the_stack_k_limit)
{
	static const size_t Ks[] = {8192, 8320};
	enum { N = 27, KMAX = 8320 };
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	float *x = malloc(sizeof(float) * KMAX), *xq = malloc(sizeof(float) * KMAX);
	float xs[KMAX / 128], y0[N], y1[N];
	for (size_t ki = 0; ki < N_OF(Ks); ki++) {
		const size_t K = Ks[ki];
		for (size_t i = 0; i < K; i++)
			x[i] = i % 61 == 0 ? 0.0f : frand() * (float)(1 + i % 7);
		srt_gemm_quant_row(x, K, xq, xs);
		for (size_t ti = 0; ti < N_OF(all_types); ti++) {
			struct wtest t;
			make_raw_weight(&t, all_types[ti], N, K, false);
			for (int mode = 0; mode < 2; mode++) {
				const size_t n0 = 3, n1 = N;
				for (int isa = SRT_GEMM_ISA_GENERIC; isa <= (int)best; isa++) {
					float *y = isa == SRT_GEMM_ISA_GENERIC ? y0 : y1;
					memset(y, 0x7F, sizeof(float) * N);
					ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
					if (mode == 0)
						srt_gemm_exact(&t.w, x, 1, K, y, N, n0, n1);
					else
						srt_gemm_ref(&t.w, xq, xs, 1, K, y, N, n0, n1);
					if (isa == SRT_GEMM_ISA_GENERIC)
						continue;
					for (size_t n = 0; n < N; n++)
						ck_assert_msg(same_float(y0[n], y1[n]),
							      "%s type %d K %zu mode %d: y[%zu] %a vs generic %a",
							      srt_gemm_isa_name((enum srt_gemm_isa)isa), all_types[ti],
							      K, mode, n, y1[n], y0[n]);
				}
			}
			free_weight(&t);
		}
	}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
	free(x);
	free(xq);
}
END_TEST

/* A value with 4 significant bits: ±(8 + m)·2^(e - 3), m in 0..7. */
static float sig4(unsigned r, int e)
{
	return (r & 8u ? -1.0f : 1.0f) * ldexpf((float)(8u + (r & 7u)), e - 3);
}

/* REFERENCE FP4 GEMVs where the AVX2 and AVX-512 kernels sum sub-blocks of 32 as integers
 * (when the 32 activations are integers times 2^(emax - 13), the largest's exponent emax) and
 * where they cannot (one activation finer than that: the block goes to the float or bf16
 * kernels), mixed in one call and in one row: at the boundary (X = ±15360 and X = 1 in one
 * sub-block; one value at emax - 14), all-zero sub-blocks with -0, single values, exponents
 * near ±60. Scale codes of about 2^-emax keep every sub-block's term near 1, so no term hides
 * a wrong one. Then one sub-block at a time (the rest of x zero): the largest at 2^103 and
 * 2^-87 (e = 90 and -100, the integer sums' limits) and one binade beyond; and 2^-140 next to
 * 2^40, where x·2^-e underflows to X = 0 (only X·2^e != x rejects it), the large one's weights
 * zero and the tiny one's not. Every kernel set gives the generic set's bits. */
START_TEST(gemv_fp4_integer_sums_match_generic_at_their_fit_boundary)
{
	enum { N = 45, K = 1024, NB = K / 128, M = 31 };
	/* kinds of the 4 sub-blocks of block b % 4: 0 random span 11 binades, 1 boundary that
	 * fits, 2 one value finer (does not fit), 3 zeros, 4 one value, 5 far exponents */
	static const int kinds[4][4] = {{0, 1, 3, 4}, {0, 2, 0, 0}, {5, 5, 1, 0}, {4, 0, 3, 1}};
	static const int elim[] = {103, 104, -87, -88};
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	static float xq[M * K], xs[M * NB];
	int emax[NB][4];
	for (int round = 0; round < 4; round++) {
		/* row j takes the kinds of round + j·(j % 3) (row 0 the GEMV's; rows of M > 1 mix
		 * blocks that fit with blocks that do not, in the prefill kernel's register blocks
		 * of 2 rows, and 31 rows make blocks where both of its layouts run) */
		for (size_t j = 0; j < M; j++)
		for (size_t b = 0; b < NB; b++) {
			xs[j * NB + b] = ldexpf(1.0f, (int)((b + j) % 5) - 2);
			for (int s = 0; s < 4; s++) {
				float *x = xq + j * K + b * 128 + s * 32;
				const int kind = kinds[(b + (size_t)round + j * (j % 3)) % 4][s];
				const int em = kind == 5 ? (s % 2 ? 60 : -60) + round : 8 - (int)(b % 3);
				if (j == 0)
					emax[b][s] = em;
				for (int i = 0; i < 32; i++) {
					const unsigned r = (unsigned)(frand() * 1e6f + 4e6f); /* > 0 */
					x[i] = kind == 3 ? (i % 3 ? 0.0f : -0.0f)
					       : kind == 4 ? (i == 17 ? sig4(r, em) : 0.0f)
							   : sig4(r, em - (int)(r >> 4) % 11);
				}
				if (kind == 1 || kind == 2) {
					x[3] = ldexpf(1.875f, em);
					x[9] = -ldexpf(1.875f, em);
					x[20] = ldexpf(kind == 1 ? 1.0f : 1.5f, em - 13);
					x[31] = -0.0f;
				}
			}
		}
		struct wtest t;
		make_raw_weight(&t, SRT_WT_FP4, N, K, false);
		for (size_t n = 0; n < N; n++)
			for (size_t j = 0; j < K / 32; j++) /* sub-block j / 4, j % 4 of row n */
				t.scales[n * (K / 32) + j] =
					(uint8_t)(127 - emax[j / 4][j % 4] + (int)((n + j) % 5) - 2);
		char what[16];
		snprintf(what, sizeof what, "round %d", round);
		gemv_ref_every_isa_is_generic(&t.w, xq, xs, what);
		gemm_ref_every_isa_is_generic(&t.w, xq, xs, M, what);
		gemm_ref_every_isa_is_generic(&t.w, xq, xs, 7, what);
		gemm_ref_every_isa_is_generic(&t.w, xq + K, xs + NB, 2, what);
		free_weight(&t);
	}
	for (size_t c = 0; c <= N_OF(elim); c++) {
		const size_t b = c % NB, s = (c + 1) % 4, k0 = b * 128 + s * 32;
		const int em = c < N_OF(elim) ? elim[c] : 40;
		float *x = xq + k0;
		memset(xq, 0, sizeof xq);
		for (size_t i = 0; i < NB; i++)
			xs[i] = 1.0f;
		struct wtest t;
		make_raw_weight(&t, SRT_WT_FP4, N, K, false);
		/* scales 2^-em: terms near 1; 2^40 for the 2^-140 case: its term 2^-140·w·2^40 */
		memset(t.scales, c < N_OF(elim) ? 127 - em : 127 + em,
		       srt_weight_scale_bytes(SRT_WT_FP4, N, K));
		if (c < N_OF(elim)) {
			for (int i = 0; i < 32; i++) {
				const unsigned r = (unsigned)(frand() * 1e6f + 4e6f); /* > 0 */
				x[i] = sig4(r, em - (int)(r >> 4) % 11);
			}
			x[5] = -ldexpf(1.875f, em);
		} else {
			/* k0 + 4: 2^40 times weight 0 in every row, k0 + 7: 2^-140 times a nonzero
			 * weight (a subnormal product, exact) */
			uint8_t *d = t.data;
			x[4] = 0x1p40f;
			x[7] = 0x1p-140f;
			for (size_t n = 0; n < N; n++) {
				uint8_t *p4 = d + (n * K + k0 + 4) / 2, *p7 = d + (n * K + k0 + 7) / 2;
				const unsigned c7 = (unsigned)(1 + n % 7 + 8 * (n % 2)); /* not 0, 8 (±0) */
				*p4 = (uint8_t)(*p4 & 0xF0);              /* even k: low nibble */
				*p7 = (uint8_t)((*p7 & 0x0F) | c7 << 4);  /* odd k: high nibble */
			}
		}
		char what[24];
		snprintf(what, sizeof what, "one sub-block 2^%d", em);
		gemv_ref_every_isa_is_generic(&t.w, xq, xs, what);
		free_weight(&t);
	}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
}
END_TEST

/* REFERENCE FP4 prefill (M > 1): the AVX2 kernel sums a 128 block "by pairs" (in another
 * order than gemm.h's k mod 8 lanes) only for rows whose every sub-block passes fp4_sub_exact
 * (activations integers X times the finest bit 2^e among them, at most 20 binades above it,
 * Σ|X|·12 < 2^24: every partial sum exact). 32 rows in one chunk: 26 whose sub-blocks span up
 * to 16 binades (beyond the GEMV's integer test, within the pairs' one), and 6 whose 28 large
 * activations (X of 2^18 to 2^19, all positive, weights 3 to 6) and 4 small ones (X of 8 to
 * 15, weights 0.5 to 1.5) pass the span test but not the sum (Σ|X|·12 about 2^27), so partial
 * sums of 16 products round and the small terms land differently in the two orders. Every
 * kernel set gives the generic set's bits (a kernel that took the second kind by pairs does
 * not), and so does each row's GEMV (whose integer sums must not take it either). */
START_TEST(gemm_fp4_pairs_and_three_byte_sums_only_for_exact_sub_blocks)
{
	enum { N = 16, K = 256, NB = K / 128, M = 32 };
	static float xq[M * K], xs[M * NB];
	for (size_t j = 0; j < M; j++) {
		const bool big = j % 5 == 2 && j < 30; /* rows 2, 7, ..., 27 */
		for (size_t b = 0; b < NB; b++)
			xs[j * NB + b] = ldexpf(1.0f, (int)(j % 3) - 1);
		for (size_t k = 0; k < K; k++) {
			const unsigned r = (unsigned)(frand() * 1e6f + 4e6f); /* > 0 */
			const bool unit = k % 32 == 1 || k % 32 == 10 || k % 32 == 19 || k % 32 == 28;
			if (big) /* the unit 2^-14: (8..15) and (8..15)·2^15 units */
				xq[j * K + k] = ldexpf((float)(8u + (r & 7u)), unit ? -14 : 1);
			else
				xq[j * K + k] = sig4(r, 2 - (int)(r >> 4) % 13);
		}
	}
	struct wtest t;
	make_raw_weight(&t, SRT_WT_FP4, N, K, false);
	uint8_t *d = t.data;
	for (size_t n = 0; n < N; n++)
		for (size_t k = 0; k < K; k++) {
			const bool unit = k % 32 == 1 || k % 32 == 10 || k % 32 == 19 || k % 32 == 28;
			/* codes 1..3 (0.5, 1, 1.5) at the unit positions, 5..7 (3, 4, 6) elsewhere */
			const unsigned c = (unit ? 1u : 5u) + (unsigned)((n + 3 * k) % 3);
			uint8_t *q = d + (n * K + k) / 2;
			*q = (uint8_t)(k % 2 ? (*q & 0x0F) | c << 4 : (*q & 0xF0) | c);
		}
	memset(t.scales, 127, srt_weight_scale_bytes(SRT_WT_FP4, N, K));
	gemm_ref_every_isa_is_generic(&t.w, xq, xs, M, "pairs boundary");
	/* the same rows one at a time: the AVX2 GEMV's three-byte integer sums take the first
	 * kind (their sub-blocks span too many binades for two bytes), not the second */
	for (size_t j = 0; j < M; j++) {
		char what[32];
		snprintf(what, sizeof what, "GEMV row %zu", j);
		gemv_ref_every_isa_is_generic(&t.w, xq + j * K, xs + j * NB, what);
	}
	free_weight(&t);
}
END_TEST

/* EXACT FP8 at M = 1 with scale codes whose 2^8·s is not finite (250, 254: the weights take
 * two multiplications, (v·2^8)·s) next to ordinary ones, codes below 2 so every dequantized
 * weight is finite, and an output range whose 8-row tiles straddle the 128-row scale blocks
 * (rows of one tile with different scales): every kernel set gives the generic set's bits,
 * and those are finite (a single multiplication by 2^8·s = inf would make them inf or NaN). */
START_TEST(gemv_exact_fp8_matches_generic_for_overflowing_scale_factors)
{
	enum { N = 144, K = 256 };
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	float x[K], y0[N], y1[N];
	for (size_t i = 0; i < K; i++)
		x[i] = i % 53 == 0 ? -0.0f : frand() * 0x1p-125f;
	struct wtest t;
	make_raw_weight(&t, SRT_WT_FP8, N, K, false);
	for (size_t i = 0; i < (size_t)N * K; i++)
		((uint8_t *)t.data)[i] &= 0xBF; /* exponent field <= 7: |value| < 2 */
	static const uint8_t sc[4] = {250, 120, 126, 254}; /* [row block][K block] */
	memcpy(t.scales, sc, sizeof sc);
	for (size_t n0 = 0; n0 < 4; n0 += 3)
		for (int isa = SRT_GEMM_ISA_GENERIC; isa <= (int)best; isa++) {
			float *y = isa == SRT_GEMM_ISA_GENERIC ? y0 : y1;
			memset(y, 0x7F, sizeof(float) * N);
			ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
			srt_gemm_exact(&t.w, x, 1, K, y, N, n0, N);
			for (size_t n = n0; n < N; n++) {
				if (isa == SRT_GEMM_ISA_GENERIC) {
					ck_assert_msg(isfinite(y0[n]), "generic y[%zu] %a", n, y0[n]);
					continue;
				}
				ck_assert_msg(same_float(y0[n], y1[n]), "%s n0 %zu: y[%zu] %a vs generic %a",
					      srt_gemm_isa_name((enum srt_gemm_isa)isa), n0, n, y1[n], y0[n]);
			}
		}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
	free_weight(&t);
}
END_TEST

/* The M > 1 (prefill) kernels: register blocks of 4 (pair tiles) and 3 (16-feature tiles,
 * REFERENCE FP8/FP4 from M = 8) rows with rows left over, row chunks of 128 (M = 131 spans
 * two), output ranges off the tile grids, and, in REFERENCE mode,
 * quantized activations whose blocks fail the exact-product check in some rows only (those
 * row blocks multiply then add, the others use fused multiply-adds): every kernel set gives
 * the generic set's bits. */
START_TEST(gemm_prefill_kernels_are_bitwise_identical_to_generic_for_row_blocks_and_tails)
{
	/* M, column range: pair tiles, 16-feature tiles (M >= 8) with pair-tile and 1-7 tails */
	static const size_t Ms[][3] = {{2, 0, 53}, {4, 1, 48}, {6, 2, 53}, {8, 0, 44},
				       {9, 3, 50}, {131, 1, 53}};
	static const enum srt_wtype types[] = {SRT_WT_F32, SRT_WT_BF16, SRT_WT_FP8, SRT_WT_FP4};
	enum { N = 53, MMAX = 131, K = 384 };
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	float *x = malloc(sizeof(float) * MMAX * K), *xq = malloc(sizeof(float) * MMAX * K);
	float *xs = malloc(sizeof(float) * MMAX * (K / 128));
	float *y0 = malloc(sizeof(float) * MMAX * N), *y1 = malloc(sizeof(float) * MMAX * N);
	for (size_t i = 0; i < MMAX * K; i++)
		x[i] = i % 97 == 0 ? -0.0f : frand() * (float)(1 + i % 7);
	for (size_t m = 0; m < MMAX; m++)
		srt_gemm_quant_row(x + m * K, K, xq + m * K, xs + m * (K / 128));
	/* rows 1, 6, 7 and 129: one block with more than 8 significant bits or out of range */
	for (size_t j = 0; j < 128; j++) {
		xq[1 * K + 128 + j] *= 1.0009765625f;
		xq[6 * K + j] = x[6 * K + j];
		xq[7 * K + 256 + j] *= 0x1p-110f;
		xq[129 * K + 128 + j] = x[129 * K + 128 + j] * 0x1p105f;
	}
	for (size_t ti = 0; ti < N_OF(types); ti++) {
		struct wtest t;
		make_raw_weight(&t, types[ti], N, K, false);
		for (int mode = 0; mode < 2; mode++)
			for (size_t mi = 0; mi < N_OF(Ms); mi++) {
				const size_t M = Ms[mi][0], n0 = Ms[mi][1], n1 = Ms[mi][2];
				for (int isa = SRT_GEMM_ISA_GENERIC; isa <= (int)best; isa++) {
					float *y = isa == SRT_GEMM_ISA_GENERIC ? y0 : y1;
					memset(y, 0x7F, sizeof(float) * MMAX * N);
					ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
					if (mode == 0)
						srt_gemm_exact(&t.w, x, M, K, y, N, n0, n1);
					else
						srt_gemm_ref(&t.w, xq, xs, M, K, y, N, n0, n1);
					if (isa == SRT_GEMM_ISA_GENERIC)
						continue;
					for (size_t i = 0; i < M * N; i++)
						ck_assert_msg(same_float(y0[i], y1[i]),
							      "%s type %d mode %d M %zu: y[%zu][%zu] %a vs generic %a",
							      srt_gemm_isa_name((enum srt_gemm_isa)isa), types[ti],
							      mode, M, i / N, i % N, y1[i], y0[i]);
				}
			}
		free_weight(&t);
	}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
	free(x);
	free(xq);
	free(xs);
	free(y0);
	free(y1);
}
END_TEST

/* The M > 1 kernels with row strides wider than the rows (ldx > K, ldy > N) and output
 * ranges off the tile grid: every kernel set gives the generic set's bits in [n0, n1) and
 * leaves every other element of y (columns outside the range, the row padding) untouched. */
START_TEST(gemm_prefill_kernels_honour_row_strides_and_write_only_their_range)
{
	static const size_t ranges[][2] = {{0, 29}, {3, 27}, {5, 13}, {8, 16}};
	enum { M = 7, N = 29, K = 256, LDX = K + 24, LDY = N + 5 };
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	float *x = malloc(sizeof(float) * M * LDX), *xq = malloc(sizeof(float) * M * LDX);
	float xs[M * (K / 128)];
	float *y0 = malloc(sizeof(float) * M * LDY), *y1 = malloc(sizeof(float) * M * LDY);
	for (size_t i = 0; i < M * LDX; i++)
		x[i] = i % 53 == 0 ? -0.0f : frand() * (float)(1 + i % 3);
	for (size_t m = 0; m < M; m++)
		srt_gemm_quant_row(x + m * LDX, K, xq + m * LDX, xs + m * (K / 128));
	for (size_t ti = 0; ti < N_OF(all_types); ti++) {
		struct wtest t;
		make_raw_weight(&t, all_types[ti], N, K, false);
		for (int mode = 0; mode < 2; mode++)
			for (size_t ri = 0; ri < N_OF(ranges); ri++) {
				const size_t n0 = ranges[ri][0], n1 = ranges[ri][1];
				for (int isa = SRT_GEMM_ISA_GENERIC; isa <= (int)best; isa++) {
					float *y = isa == SRT_GEMM_ISA_GENERIC ? y0 : y1;
					memset(y, 0x7F, sizeof(float) * M * LDY);
					ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
					if (mode == 0)
						srt_gemm_exact(&t.w, x, M, LDX, y, LDY, n0, n1);
					else
						srt_gemm_ref(&t.w, xq, xs, M, LDX, y, LDY, n0, n1);
					for (size_t i = 0; i < M * LDY; i++) {
						const size_t c = i % LDY;
						if (c < n0 || c >= n1)
							ck_assert_msg(f2u(y[i]) == 0x7F7F7F7Fu,
								      "%s type %d mode %d [%zu, %zu): y[%zu][%zu] written",
								      srt_gemm_isa_name((enum srt_gemm_isa)isa),
								      all_types[ti], mode, n0, n1, i / LDY, c);
						else if (isa != SRT_GEMM_ISA_GENERIC)
							ck_assert_msg(same_float(y0[i], y1[i]),
								      "%s type %d mode %d [%zu, %zu): y[%zu][%zu] %a vs generic %a",
								      srt_gemm_isa_name((enum srt_gemm_isa)isa),
								      all_types[ti], mode, n0, n1, i / LDY, c, y1[i], y0[i]);
					}
				}
			}
		free_weight(&t);
	}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
	free(x);
	free(xq);
	free(y0);
	free(y1);
}
END_TEST

/* srt_gemm_quant_row gives the same xq and scales with every kernel set: blocks spanning many
 * binades, values on the E4M3 subnormal grid and at its rounding ties, saturating ratios,
 * zeros of both signs, all-zero blocks (the amax floor), subnormal inputs, and blocks with a
 * NaN or an infinity (the portable path), in place and out of place. */
START_TEST(gemm_quant_row_is_bitwise_identical_for_every_kernel_set)
{
	enum { K = 128 * 12 };
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	float *x = malloc(sizeof(float) * K), *q0 = malloc(sizeof(float) * K);
	float *q1 = malloc(sizeof(float) * K), s0[K / 128], s1[K / 128];
	for (int round = 0; round < 40; round++) {
		for (size_t i = 0; i < K; i++) {
			const size_t b = i / 128;
			float v = frand() * ldexpf(1.0f, (int)((b * 29 + (size_t)round * 7) % 60) - 30);
			if (b == 1)
				v = (float)((int)(i % 40) - 20) * 0x1p-10f * (float)(1 + round % 3);
			if (b == 2)
				v = i % 2 ? -0.0f : 0.0f;
			if (b == 3 && i % 128 == 5)
				v = 448.0f * (1.0f + 0x1p-20f) * (float)(1 + round);
			if (b == 4)
				v = frand() * 0x1p-135f;
			if (b == 5 && i % 128 == (size_t)round)
				v = round % 2 ? NAN : -INFINITY;
			if (b == 6)
				v = u2f(f2u(1.0f + (float)(i % 8) / 8.0f + 0x1p-4f) ^ (i % 3 ? 0u : 0x80000000u)) *
				    ldexpf(1.0f, round % 20 - 10);
			x[i] = v;
		}
		for (int inplace = 0; inplace < 2; inplace++)
			for (int isa = SRT_GEMM_ISA_GENERIC; isa <= (int)best; isa++) {
				float *q = isa == SRT_GEMM_ISA_GENERIC ? q0 : q1, *sc = isa == SRT_GEMM_ISA_GENERIC ? s0 : s1;
				ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)isa), 0);
				if (inplace) {
					memcpy(q, x, sizeof(float) * K);
					srt_gemm_quant_row(q, K, q, sc);
				} else {
					srt_gemm_quant_row(x, K, q, sc);
				}
				if (isa == SRT_GEMM_ISA_GENERIC)
					continue;
				for (size_t b = 0; b < K / 128; b++)
					ck_assert_msg(same_float(s0[b], s1[b]), "%s round %d block %zu: scale %a vs %a",
						      srt_gemm_isa_name((enum srt_gemm_isa)isa), round, b, s1[b], s0[b]);
				for (size_t i = 0; i < K; i++)
					ck_assert_msg(same_float(q0[i], q1[i]),
						      "%s round %d: xq[%zu] (x %a) %a vs generic %a",
						      srt_gemm_isa_name((enum srt_gemm_isa)isa), round, i, x[i],
						      q1[i], q0[i]);
			}
	}
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
	free(x);
	free(q0);
	free(q1);
}
END_TEST

START_TEST(gemm_isa_selection_refuses_sets_the_cpu_lacks)
{
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	ck_assert_int_eq(srt_gemm_set_isa(SRT_GEMM_ISA_GENERIC), 0);
	if (best < SRT_GEMM_ISA_AVX512) {
		ck_assert_int_eq(srt_gemm_set_isa(SRT_GEMM_ISA_AVX512), SRT_ENOTSUP);
		ck_assert_int_eq(srt_gemm_isa_current(), SRT_GEMM_ISA_GENERIC);
	}
	ck_assert_int_eq(srt_gemm_set_isa((enum srt_gemm_isa)7), SRT_ENOTSUP);
	ck_assert_int_eq(srt_gemm_set_isa(best), 0);
	ck_assert_int_eq(srt_gemm_isa_current(), best);
	ck_assert_str_eq(srt_gemm_isa_name(SRT_GEMM_ISA_AVX2), "avx2");
}
END_TEST

static Suite *ops_suite(void)
{
	Suite *s = suite_create("ops");
	TCase *tc = tcase_create("codecs");
	tcase_add_test(tc, bf16_encode_matches_ml_dtypes_including_ties);
	tcase_add_test(tc, bf16_every_code_round_trips_and_nan_stays_nan);
	tcase_add_test(tc, fp8_decode_of_all_256_codes_matches_ml_dtypes);
	tcase_add_test(tc, fp8_encode_of_decode_is_identity_for_every_non_nan_code);
	tcase_add_test(tc, fp8_raw_and_saturating_encode_match_ml_dtypes_ties_subnormals_overflow);
	tcase_add_test(tc, fp8_special_values_nan_inf_saturation_subnormals);
	tcase_add_test(tc, fp8_ties_round_to_even_at_every_binade);
	tcase_add_test(tc, e8m0_decode_of_all_256_codes_matches_ml_dtypes_and_pow2_round_trips);
	tcase_add_test(tc, e8m0_ceil_rounds_up_to_a_power_of_two);
	tcase_add_test(tc, fp4_decode_all_16_codes_and_encode_round_trips);
	tcase_add_test(tc, fp4_encode_matches_ml_dtypes_ties_and_saturation);
	tcase_add_test(tc, fp4_packing_puts_even_index_in_low_nibble);
	suite_add_tcase(s, tc);

	tc = tcase_create("quant");
	tcase_add_test(tc, act_quant_matches_reference_codes_scales_and_fake_quant);
	tcase_add_test(tc, act_quant_scale_is_amax_over_448_rounded_up_with_floor);
	tcase_add_test(tc, kv_fake_quant_blocks_of_64_on_nope_and_bf16_on_rope_dims);
	tcase_add_test(tc, fp4_fake_quant_matches_reference_and_scale_floor);
	tcase_add_test(tc, round_bf16_and_fp4_fake_arrays_equal_the_portable_loops_bitwise);
	tcase_add_test(tc, weight_fp8_quant_uses_one_pow2_scale_per_128x128_block_with_partial_edges);
	tcase_add_test(tc, weight_fp4_quant_uses_pow2_scale_per_32_along_k);
	suite_add_tcase(s, tc);

	tc = tcase_create("math");
	tcase_add_test(tc, hadamard_matches_explicit_sylvester_matrix_and_is_an_involution);
	tcase_add_test(tc, rmsnorm_matches_double_reference_with_f32_and_bf16_weights);
	tcase_add_test(tc, sigmoid_silu_softplus_match_double);
	tcase_add_test(tc, yarn_correction_range_for_v4_compressed_layers_is_15_25);
	tcase_add_test(tc, yarn_frequency_table_matches_hand_derived_values);
	tcase_add_test(tc, rope_rotates_interleaved_pairs_and_inverse_restores);
	suite_add_tcase(s, tc);

	tc = tcase_create("gemm");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, gemm_exact_matches_dequantize_then_multiply_in_double);
	tcase_add_test(tc, gemm_reference_matches_blockwise_fp8_activation_formula_in_double);
	tcase_add_test(tc, gemm_results_are_bitwise_identical_for_chunked_and_one_shot_runs);
	tcase_add_test(tc, gemm_reference_on_prepared_activations_equals_convenience_call);
	tcase_add_test(tc, gemm_every_kernel_set_is_bitwise_identical_to_generic_for_every_m);
	tcase_add_test(tc, gemm_fp8_paired_layout_gives_the_row_major_bits_in_every_kernel_set);
	tcase_add_test(tc, gemv_kernels_match_generic_at_the_stack_k_limit);
	tcase_add_test(tc, gemv_fp4_integer_sums_match_generic_at_their_fit_boundary);
	tcase_add_test(tc, gemm_fp4_pairs_and_three_byte_sums_only_for_exact_sub_blocks);
	tcase_add_test(tc, gemv_reference_matches_generic_for_every_scale_code_on_quantized_activations);
	tcase_add_test(tc, gemv_reference_fp8_matches_generic_on_unquantized_activations);
	tcase_add_test(tc, gemv_exact_fp8_matches_generic_for_overflowing_scale_factors);
	tcase_add_test(tc, gemm_prefill_kernels_are_bitwise_identical_to_generic_for_row_blocks_and_tails);
	tcase_add_test(tc, gemm_prefill_kernels_honour_row_strides_and_write_only_their_range);
	tcase_add_test(tc, gemm_quant_row_is_bitwise_identical_for_every_kernel_set);
	tcase_add_test(tc, gemm_isa_selection_refuses_sets_the_cpu_lacks);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ops_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
