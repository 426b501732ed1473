/*
 * The residual plugins (mhc, plain) through the registry on the tiny checkpoint.
 *
 * mhc is compared with the NumPy reference's pieces (mhc_pre: u, post, comb; mhc_post: X';
 * hc_head: y) in both profiles:
 *  - f32: |a - b| <= 1e-5 * max|b| of the row. The plugin and NumPy sum the 4d-term norm and
 *    fn.x products in fp32 in different orders (error ~ sqrt(4d) * 2^-24 ~ 2e-6 relative);
 *    Sinkhorn's 20 rounds of divisions add a few ulps. 1e-5 is a few times that.
 *  - reference: outputs are bf16 values; at most one bf16 ulp apart (a different fp32 sum order
 *    before the bf16 rounding can flip the last bit), and >= 99% bitwise.
 * Sinkhorn output is checked doubly stochastic; plain is checked to be an exact identity / add.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../moe/moe_ref.h"
#include "ops/fp.h"

static struct tfx F;

static void setup(void)
{
	tfx_open(&F);
}

static void teardown(void)
{
	tfx_close(&F);
}

static const struct srt_residual_vtable *vt(struct srt_instance *in)
{
	return in->vtable;
}

enum { N = 9 };

/* Compare n values; f32: relative to the row max; reference: <= 1 bf16 ulp, count bitwise. */
static void compare(const float *a, const float *b, int rows, int width, uint32_t profile,
		    const char *what, long *bitwise, long *total)
{
	for (int i = 0; i < rows; i++) {
		double mx = 0;
		for (int c = 0; c < width; c++)
			mx = fmax(mx, fabs(b[i * width + c]));
		for (int c = 0; c < width; c++) {
			float x = a[i * width + c], y = b[i * width + c];
			*bitwise += x == y;
			(*total)++;
			if (profile == SRT_PROFILE_F32)
				ck_assert_msg(fabs(x - y) <= 1e-5 * mx, "%s row %d [%d]: %.9g vs numpy %.9g",
					      what, i, c, x, y);
			else
				ck_assert_msg(tfx_bf16_ulps(x, y) <= 1.0,
					      "%s row %d [%d]: %.9g vs numpy %.9g (%.1f bf16 ulp)", what,
					      i, c, x, y, tfx_bf16_ulps(x, y));
		}
	}
}

/* pre, post of one layer and sub-layer, and the head, against NumPy. */
START_TEST(test_mhc_matches_numpy_pieces)
{
	uint32_t profile = _i % 2 ? SRT_PROFILE_F32 : SRT_PROFILE_REFERENCE;
	int32_t layer = (_i / 4) * 3; /* 0 and 3 */
	uint32_t sub = (_i / 2) % 2;
	const char *prof = profile == SRT_PROFILE_F32 ? "f32" : "reference";
	const int d = F.cfg.hidden_size, S = F.cfg.hc_mult, mixf = S + S * S;
	struct srt_instance *in = tfx_instance(&F, SRT_KIND_RESIDUAL, "mhc", profile, &layer, 1);
	float *X = malloc(sizeof(float) * N * S * d), *u = malloc(sizeof(float) * N * d);
	float *mix = malloc(sizeof(float) * N * mixf), *f = malloc(sizeof(float) * N * d);
	float *pin = malloc(sizeof(float) * N * (S * d + d));
	float *ref = malloc(sizeof(float) * N * (S * d + d + mixf)), *got;
	long bw = 0, tot = 0;
	int ref_bf16 = profile == SRT_PROFILE_REFERENCE;

	ck_assert_uint_eq(vt(in)->n_streams(in->ctx), (uint32_t)S);
	ck_assert_uint_eq(vt(in)->mix_floats(in->ctx), (uint32_t)mixf);
	tfx_rand(X, (size_t)N * S * d, 31 + _i, 2.0f, ref_bf16);
	tfx_rand(f, (size_t)N * d, 57 + _i, 1.0f, ref_bf16);

	/* pre: u, then post / comb */
	ck_assert_int_eq(vt(in)->pre(in->ctx, layer, sub, N, X, u, mix), 0);
	ck_assert_int_eq(tfx_run_piece(&F, "mhc_pre", layer, prof, X, (size_t)N * S * d, NULL, 0,
				       ref, (size_t)N * (d + mixf), sub ? "ffn" : "attn"), 0);
	got = malloc(sizeof(float) * N * (d + mixf));
	for (int i = 0; i < N; i++) {
		memcpy(got + i * (d + mixf), u + i * d, sizeof(float) * d);
		memcpy(got + i * (d + mixf) + d, mix + i * mixf, sizeof(float) * mixf);
	}
	/* u is bf16 in reference; post/comb are fp32 in both: compare them at the f32 bound */
	for (int i = 0; i < N; i++) {
		compare(got + i * (d + mixf), ref + i * (d + mixf), 1, d, profile, "u", &bw, &tot);
		long b2 = 0, t2 = 0;
		compare(got + i * (d + mixf) + d, ref + i * (d + mixf) + d, 1, mixf, SRT_PROFILE_F32,
			"post/comb", &b2, &t2);
	}

	/* post: X' = post * f + comb^T X */
	for (int i = 0; i < N; i++) {
		memcpy(pin + i * (S * d + d), X + i * S * d, sizeof(float) * S * d);
		memcpy(pin + i * (S * d + d) + S * d, f + i * d, sizeof(float) * d);
	}
	ck_assert_int_eq(tfx_run_piece(&F, "mhc_post", layer, prof, pin, (size_t)N * (S * d + d),
				       NULL, 0, ref, (size_t)N * S * d, sub ? "ffn" : "attn"), 0);
	ck_assert_int_eq(vt(in)->post(in->ctx, layer, sub, N, f, mix, X), 0);
	compare(X, ref, N, S * d, profile, "X'", &bw, &tot);

	/* head on the new streams */
	ck_assert_int_eq(vt(in)->head(in->ctx, N, X, u), 0);
	ck_assert_int_eq(tfx_run_piece(&F, "hc_head", layer, prof, X, (size_t)N * S * d, NULL, 0,
				       ref, (size_t)N * d, NULL), 0);
	compare(u, ref, N, d, profile, "head", &bw, &tot);
	fprintf(stderr, "mhc layer %d %s %s vs numpy: %ld of %ld bitwise\n", layer,
		sub ? "ffn" : "attn", prof, bw, tot);
	if (profile == SRT_PROFILE_REFERENCE)
		ck_assert_msg(bw >= tot * 99 / 100, "only %ld of %ld bitwise", bw, tot);
	srt_instance_destroy(in);
	free(X), free(u), free(mix), free(f), free(pin), free(ref), free(got);
}
END_TEST

START_TEST(test_mhc_sinkhorn_is_doubly_stochastic)
{
	int32_t layer = 2;
	const int d = F.cfg.hidden_size, S = F.cfg.hc_mult, mixf = S + S * S;
	struct srt_instance *in = tfx_instance(&F, SRT_KIND_RESIDUAL, "mhc", SRT_PROFILE_F32,
					       &layer, 1);
	float *X = malloc(sizeof(float) * N * S * d), *u = malloc(sizeof(float) * N * d);
	float *mix = malloc(sizeof(float) * N * mixf);
	tfx_rand(X, (size_t)N * S * d, 99, 4.0f, 0);
	ck_assert_int_eq(vt(in)->pre(in->ctx, layer, SRT_SUBLAYER_FFN, N, X, u, mix), 0);
	for (int i = 0; i < N; i++) {
		const float *M = mix + i * mixf + S;
		for (int a = 0; a < S; a++) {
			double rs = 0, cs = 0;
			for (int b = 0; b < S; b++) {
				ck_assert(M[a * S + b] > 0.0f);
				rs += M[a * S + b];
				cs += M[b * S + a];
			}
			/* the last step normalises columns (exact up to the +eps); rows converge */
			ck_assert_msg(fabs(cs - 1.0) < 1e-5, "row %d column %d sums to %.9g", i, a, cs);
			ck_assert_msg(fabs(rs - 1.0) < 1e-3, "row %d row %d sums to %.9g", i, a, rs);
		}
		for (int s = 0; s < S; s++) /* post = 2 sigmoid(.) in (0, 2) */
			ck_assert(mix[i * mixf + s] > 0.0f && mix[i * mixf + s] < 2.0f);
	}
	srt_instance_destroy(in);
	free(X), free(u), free(mix);
}
END_TEST

START_TEST(test_mhc_batch_rows_equal_each_row_alone_bitwise)
{
	int32_t layer = 1;
	uint32_t profile = _i ? SRT_PROFILE_F32 : SRT_PROFILE_REFERENCE;
	const int d = F.cfg.hidden_size, S = F.cfg.hc_mult, mixf = S + S * S;
	struct srt_instance *in = tfx_instance(&F, SRT_KIND_RESIDUAL, "mhc", profile, &layer, 1);
	float *X = malloc(sizeof(float) * N * S * d), *u = malloc(sizeof(float) * N * d);
	float *mix = malloc(sizeof(float) * N * mixf), *u1 = malloc(sizeof(float) * d);
	float *m1 = malloc(sizeof(float) * mixf);
	tfx_rand(X, (size_t)N * S * d, 5, 2.0f, !_i);
	ck_assert_int_eq(vt(in)->pre(in->ctx, layer, SRT_SUBLAYER_ATTN, N, X, u, mix), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(vt(in)->pre(in->ctx, layer, SRT_SUBLAYER_ATTN, 1, X + i * S * d, u1,
					     m1), 0);
		ck_assert(!memcmp(u1, u + i * d, sizeof(float) * d));
		ck_assert(!memcmp(m1, mix + i * mixf, sizeof(float) * mixf));
	}
	/* post and head: a batch of N rows = each row alone (one-row calls split the row's dot
	 * products and channels over the host's threads) */
	float *f = malloc(sizeof(float) * N * d), *X1 = malloc(sizeof(float) * N * S * d);
	tfx_rand(f, (size_t)N * d, 6, 1.0f, !_i);
	memcpy(X1, X, sizeof(float) * N * S * d);
	ck_assert_int_eq(vt(in)->post(in->ctx, layer, SRT_SUBLAYER_ATTN, N, f, mix, X), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(vt(in)->post(in->ctx, layer, SRT_SUBLAYER_ATTN, 1, f + i * d,
					      mix + i * mixf, X1 + i * S * d), 0);
	ck_assert(!memcmp(X1, X, sizeof(float) * N * S * d));
	ck_assert_int_eq(vt(in)->head(in->ctx, N, X, u), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(vt(in)->head(in->ctx, 1, X + i * S * d, u1), 0);
		ck_assert(!memcmp(u1, u + i * d, sizeof(float) * d));
	}
	srt_instance_destroy(in);
	free(X), free(u), free(mix), free(u1), free(m1), free(f), free(X1);
}
END_TEST

/* post = its defining loop bitwise: per channel c and stream j, ((M[0][j]·X0 + M[1][j]·X1) +
 * M[2][j]·X2) + M[3][j]·X3 (product then sum, in that order), plus post[j]·f, rounded to
 * bf16 in the reference profile; batch rows and one-row calls (split by channels). Inputs
 * of many binades, so another order of the sum fails. */
START_TEST(test_mhc_post_is_the_defining_loop_bitwise)
{
	int32_t layer = 1;
	uint32_t profile = _i ? SRT_PROFILE_F32 : SRT_PROFILE_REFERENCE;
	const int d = F.cfg.hidden_size, S = F.cfg.hc_mult, mixf = S + S * S;
	struct srt_instance *in = tfx_instance(&F, SRT_KIND_RESIDUAL, "mhc", profile, &layer, 1);
	float *X = malloc(sizeof(float) * N * S * d), *u = malloc(sizeof(float) * N * d);
	float *mix = malloc(sizeof(float) * N * mixf), *f = malloc(sizeof(float) * N * d);
	float *want = malloc(sizeof(float) * N * S * d), *X1 = malloc(sizeof(float) * N * S * d);
	tfx_rand(X, (size_t)N * S * d, 11, 2.0f, !_i);
	tfx_rand(f, (size_t)N * d, 12, 1.0f, !_i);
	for (int i = 0; i < N * S * d; i++) /* magnitudes over ~2^-12 .. 2^12 */
		X[i] = ldexpf(X[i], (i * 7) % 25 - 12);
	ck_assert_int_eq(vt(in)->pre(in->ctx, layer, SRT_SUBLAYER_ATTN, N, X, u, mix), 0);
	for (int i = 0; i < N; i++) {
		const float *x = X + i * S * d, *post = mix + i * mixf, *M = post + S;
		for (int c = 0; c < d; c++)
			for (int j = 0; j < S; j++) {
				float v = M[j] * x[c];
				for (int k = 1; k < S; k++)
					v += M[k * S + j] * x[k * d + c];
				float acc = post[j] * f[i * d + c] + v;
				want[i * S * d + j * d + c] = _i ? acc : srt_round_bf16(acc);
			}
	}
	memcpy(X1, X, sizeof(float) * N * S * d);
	ck_assert_int_eq(vt(in)->post(in->ctx, layer, SRT_SUBLAYER_ATTN, N, f, mix, X), 0);
	ck_assert(!memcmp(X, want, sizeof(float) * N * S * d));
	ck_assert_int_eq(vt(in)->post(in->ctx, layer, SRT_SUBLAYER_ATTN, 1, f, mix, X1), 0);
	ck_assert(!memcmp(X1, want, sizeof(float) * S * d));
	srt_instance_destroy(in);
	free(X), free(u), free(mix), free(f), free(want), free(X1);
}
END_TEST

/* One product, not fused into the following add whatever the test's flags. */
static float prod(float a, float b)
{
	volatile float p = a * b;
	return p;
}

/* pre's u = its defining loop bitwise (f32 profile): per channel, ((pre0·X0 + pre1·X1) +
 * pre2·X2) + pre3·X3. The row's pre weights are read from S probe channels (channel s: 1 in
 * stream s, 0 in the others, so u there is pre_s exactly); the other channels' values span
 * many binades, so another order of the sum fails. Batch rows and one-row calls. */
START_TEST(test_mhc_collapse_is_the_defining_loop_bitwise)
{
	int32_t layer = 1;
	const int d = F.cfg.hidden_size, S = F.cfg.hc_mult, mixf = S + S * S;
	struct srt_instance *in = tfx_instance(&F, SRT_KIND_RESIDUAL, "mhc", SRT_PROFILE_F32, &layer, 1);
	float *X = malloc(sizeof(float) * N * S * d), *u = malloc(sizeof(float) * N * d);
	float *mix = malloc(sizeof(float) * N * mixf), *u1 = malloc(sizeof(float) * d);
	tfx_rand(X, (size_t)N * S * d, 13, 2.0f, 0);
	for (int i = 0; i < N * S * d; i++) /* magnitudes over ~2^-12 .. 2^12 */
		X[i] = ldexpf(X[i], (i * 5) % 25 - 12);
	for (int i = 0; i < N; i++)
		for (int s = 0; s < S; s++)
			for (int k = 0; k < S; k++)
				X[(i * S + k) * d + s] = k == s ? 1.0f : 0.0f;
	ck_assert_int_eq(vt(in)->pre(in->ctx, layer, SRT_SUBLAYER_ATTN, N, X, u, mix), 0);
	long checked = 0;
	for (int i = 0; i < N; i++) {
		const float *x = X + i * S * d, *p = u + i * d; /* p[s]: pre_s of row i */
		ck_assert_int_eq(vt(in)->pre(in->ctx, layer, SRT_SUBLAYER_ATTN, 1, x, u1, mix), 0);
		ck_assert(!memcmp(u1, u + i * d, sizeof(float) * d));
		for (int c = S; c < d; c++) {
			float v = prod(p[0], x[c]);
			for (int k = 1; k < S; k++)
				v += prod(p[k], x[k * d + c]);
			ck_assert_msg(!memcmp(&v, &u[i * d + c], sizeof v), "row %d channel %d: %.9g, want %.9g",
				      i, c, u[i * d + c], v);
			checked++;
		}
	}
	ck_assert_int_eq(checked, (long)N * (d - S));
	srt_instance_destroy(in);
	free(X), free(u), free(mix), free(u1);
}
END_TEST

START_TEST(test_mhc_rejects_unserved_layer)
{
	int32_t layer = 1;
	const int d = F.cfg.hidden_size, S = F.cfg.hc_mult;
	struct srt_instance *in = tfx_instance(&F, SRT_KIND_RESIDUAL, "mhc", SRT_PROFILE_F32,
					       &layer, 1);
	float *X = calloc((size_t)S * d, sizeof(float)), *u = calloc(d, sizeof(float));
	float mix[64];
	ck_assert_int_eq(vt(in)->pre(in->ctx, 2, SRT_SUBLAYER_ATTN, 1, X, u, mix), SRT_EINVAL);
	ck_assert_int_eq(vt(in)->pre(in->ctx, 1, 7, 1, X, u, mix), SRT_EINVAL);
	srt_instance_destroy(in);
	free(X), free(u);
}
END_TEST

/* plain: embed/pre/head copy exactly; post is X + f (bf16-rounded in reference). */
START_TEST(test_plain_is_identity_and_add)
{
	uint32_t profile = _i ? SRT_PROFILE_F32 : SRT_PROFILE_REFERENCE;
	const int d = F.cfg.hidden_size;
	struct srt_instance *in = tfx_instance(&F, SRT_KIND_RESIDUAL, "plain", profile, NULL, 0);
	float *h = malloc(sizeof(float) * N * d), *X = malloc(sizeof(float) * N * d);
	float *u = malloc(sizeof(float) * N * d), *f = malloc(sizeof(float) * N * d);
	ck_assert_uint_eq(vt(in)->n_streams(in->ctx), 1);
	ck_assert_uint_eq(vt(in)->mix_floats(in->ctx), 0);
	tfx_rand(h, (size_t)N * d, 1, 3.0f, 0);
	tfx_rand(f, (size_t)N * d, 2, 3.0f, 0);
	ck_assert_int_eq(vt(in)->embed(in->ctx, N, h, X), 0);
	ck_assert(!memcmp(h, X, sizeof(float) * N * d));
	ck_assert_int_eq(vt(in)->pre(in->ctx, 4, SRT_SUBLAYER_FFN, N, X, u, NULL), 0);
	ck_assert(!memcmp(u, X, sizeof(float) * N * d));
	ck_assert_int_eq(vt(in)->post(in->ctx, 4, SRT_SUBLAYER_FFN, N, f, NULL, X), 0);
	for (int i = 0; i < N * d; i++) {
		float want = h[i] + f[i];
		if (profile == SRT_PROFILE_REFERENCE)
			want = srt_round_bf16(want);
		ck_assert_msg(X[i] == want, "[%d]: %.9g, expected %.9g", i, X[i], want);
	}
	ck_assert_int_eq(vt(in)->head(in->ctx, N, X, u), 0);
	ck_assert(!memcmp(u, X, sizeof(float) * N * d));
	srt_instance_destroy(in);
	free(h), free(X), free(u), free(f);
}
END_TEST

static Suite *residual_suite(void)
{
	Suite *s = suite_create("residual");
	TCase *tc = tcase_create("residual");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_mhc_sinkhorn_is_doubly_stochastic);
	tcase_add_loop_test(tc, test_mhc_batch_rows_equal_each_row_alone_bitwise, 0, 2);
	tcase_add_loop_test(tc, test_mhc_post_is_the_defining_loop_bitwise, 0, 2);
	tcase_add_test(tc, test_mhc_collapse_is_the_defining_loop_bitwise);
	tcase_add_test(tc, test_mhc_rejects_unserved_layer);
	tcase_add_loop_test(tc, test_plain_is_identity_and_add, 0, 2);
	suite_add_tcase(s, tc);
	if (tfx_have_numpy_ref()) {
		TCase *np = tcase_create("numpy");
		tcase_add_checked_fixture(np, setup, teardown);
		tcase_set_timeout(np, 120);
		/* 2 layers x 2 sub-layers x 2 profiles */
		tcase_add_loop_test(np, test_mhc_matches_numpy_pieces, 0, 8);
		suite_add_tcase(s, np);
	} else {
		fprintf(stderr, "residual: tests/reference/dsv4_ref.py absent: NumPy comparison not run\n");
	}
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(residual_suite());
	int failed;
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
