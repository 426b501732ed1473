/*
 * tests/ops/test_act.c — srt_expf_n and srt_silu_n (ops/act_n.h) against the C library's expf
 * and act.h's srt_silu, bit for bit: a sweep of every 2^7-th float of magnitude below 2^8
 * (SRT_ACT_EXHAUSTIVE=1: every one)
 * (both signs: the vector lanes and the library's lanes past 88), the special values, every
 * tail length, in place and out of place; on an AVX-512 CPU and on an AVX2 CPU with FMA the
 * vector kernels (each set) must be the ones that ran, and SRT_GEMM_ISA=generic's loop must
 * give the same bits.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/act.h"
#include "ops/act_n.h"
#include "ops/gemm.h"

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* bits equal, or both NaN */
static int same(float a, float b)
{
	return (isnan(a) && isnan(b)) || f2u(a) == f2u(b);
}

/* Compare both functions with the scalar forms on x[0..n); returns the mismatches. */
static size_t compare(const float *x, size_t n, float *y, float *s)
{
	size_t bad = 0;
	srt_expf_n(x, y, n);
	srt_silu_n(x, s, n);
	for (size_t i = 0; i < n; i++) {
		if (!same(y[i], expf(x[i])) && bad++ < 5)
			fprintf(stderr, "expf(%a): %a, the library %a\n", x[i], y[i], expf(x[i]));
		if (!same(s[i], srt_silu(x[i])) && bad++ < 5)
			fprintf(stderr, "silu(%a): %a, srt_silu %a\n", x[i], s[i], srt_silu(x[i]));
	}
	return bad;
}

/* every 2^7-th float below 2^8 in magnitude, both signs (2^25 inputs); with
 * SRT_ACT_EXHAUSTIVE=1 in the environment, every float below 2^8 (2^32.1, ~30 s) */
static size_t sweep(void)
{
	const char *env = getenv("SRT_ACT_EXHAUSTIVE");
	const uint32_t step = env && strcmp(env, "1") == 0 ? 1 : 128;
	enum { NB = 1 << 16 };
	float *x = malloc(NB * sizeof *x), *y = malloc(NB * sizeof *y), *s = malloc(NB * sizeof *s);
	ck_assert(x && y && s);
	size_t bad = 0, n = 0;
	for (uint32_t u = 0; u < 0x43800000u; u += step) { /* a varying offset within each step */
		x[n++] = u2f(u + (u / step) % step);
		x[n++] = u2f((u + (u / step / 4) % step) | 0x80000000u);
		if (n == NB) {
			bad += compare(x, n, y, s);
			n = 0;
		}
	}
	bad += compare(x, n, y, s);
	free(x);
	free(y);
	free(s);
	return bad;
}

START_TEST(expf_and_silu_arrays_have_the_scalar_bits_on_a_sweep)
{
	/* each vector set this CPU has (AVX2 with FMA: 8 lanes; AVX-512: 16) */
	const enum srt_gemm_isa was = srt_gemm_isa_current();
	__builtin_cpu_init();
	for (int isa = SRT_GEMM_ISA_AVX2; isa <= SRT_GEMM_ISA_AVX512; isa++) {
		if (srt_gemm_set_isa((enum srt_gemm_isa)isa) != 0)
			continue;
		if (isa == SRT_GEMM_ISA_AVX512 || __builtin_cpu_supports("fma"))
			ck_assert_msg(srt_expf_vector(), "%s CPU, glibc: the vector kernels should run",
				      srt_gemm_isa_name((enum srt_gemm_isa)isa));
		ck_assert_uint_eq(sweep(), 0);
	}
	ck_assert_int_eq(srt_gemm_set_isa(was), 0);
	ck_assert_uint_eq(sweep(), 0);
}
END_TEST

START_TEST(special_values_tails_and_in_place)
{
	const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 88.0f, -88.0f,
			    0x1.62e42ep6f, 0x1.62e430p6f, -0x1.9fe368p6f, -0x1.9fe36ap6f,
			    -0x1.9d1d9ep6f, -87.3f, -100.0f, -103.0f, -104.0f, 89.0f, 1e-30f,
			    -1e-30f, 0x1p-149f, FLT_MAX, -FLT_MAX, 0.5f, -0.5f, 1.0f, -1.0f,
			    20.0f, -20.0f, 1e-8f, 3.0f, -7.25f, 0.693147f};
	const size_t ns = sizeof sp / sizeof sp[0];
	float x[64] = {0}, y[64], s[64];
	for (size_t len = 0; len <= 40; len++) { /* every tail of the 16 lanes */
		for (size_t i = 0; i < len; i++)
			x[i] = sp[(i * 7 + len) % ns];
		ck_assert_uint_eq(compare(x, len, y, s), 0);
		/* in place: x and y the same array */
		float a[64], b[64];
		memcpy(a, x, len * sizeof *x);
		memcpy(b, x, len * sizeof *x);
		srt_expf_n(a, a, len);
		srt_silu_n(b, b, len);
		for (size_t i = 0; i < len; i++) {
			ck_assert(same(a[i], y[i]));
			ck_assert(same(b[i], s[i]));
		}
	}
}
END_TEST

/* the portable loop (SRT_GEMM_ISA=generic's) gives the same bits as whatever ran above */
START_TEST(the_portable_loop_gives_the_same_bits)
{
	enum { N = 4099 };
	static float x[N], v[N], vs[N], p[N], ps[N];
	for (size_t i = 0; i < N; i++)
		x[i] = (float)((double)i * 0.0517 - 120.0) * (i % 3 ? 1.0f : -0.37f);
	srt_expf_n(x, v, N);
	srt_silu_n(x, vs, N);
	const enum srt_gemm_isa was = srt_gemm_isa_current();
	ck_assert_int_eq(srt_gemm_set_isa(SRT_GEMM_ISA_GENERIC), 0);
	ck_assert(!srt_expf_vector());
	srt_expf_n(x, p, N);
	srt_silu_n(x, ps, N);
	ck_assert_int_eq(srt_gemm_set_isa(was), 0);
	for (size_t i = 0; i < N; i++) {
		ck_assert_msg(same(v[i], p[i]), "expf(%a): %a vs %a", x[i], v[i], p[i]);
		ck_assert_msg(same(vs[i], ps[i]), "silu(%a): %a vs %a", x[i], vs[i], ps[i]);
	}
}
END_TEST

static Suite *act_suite(void)
{
	Suite *s = suite_create("act");
	TCase *tc = tcase_create("expf");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, expf_and_silu_arrays_have_the_scalar_bits_on_a_sweep);
	tcase_add_test(tc, special_values_tails_and_in_place);
	tcase_add_test(tc, the_portable_loop_gives_the_same_bits);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(act_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
