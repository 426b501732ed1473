/*
 * Unit tests of core/check/diverge.c (check suite `diverge`): the statistics `ab` and
 * `check-plugin` report, against values worked out by hand.
 */
#include <check.h>
#include <math.h>
#include <string.h>

#include "check/diverge.h"

START_TEST(identical_logits_are_bitwise_equal_with_zero_divergence)
{
	float a[6] = {1, 2, 3, -1, 0, 5};
	struct srt_div d;
	double kl[2], ma[2];
	uint8_t t1[2];
	srt_div_compare(a, a, 2, 3, &d, kl, ma, t1);
	ck_assert(d.bitwise_equal);
	ck_assert_int_eq(d.first_diff, -1);
	ck_assert_int_eq(d.first_top1, -1);
	ck_assert(d.kl_mean == 0 && d.kl_max == 0 && d.max_abs == 0 && d.top1_agree == 1);
	ck_assert(kl[1] == 0 && ma[1] == 0 && t1[0] == 1 && t1[1] == 1);
}
END_TEST

START_TEST(kl_max_abs_and_top1_match_hand_computed_values)
{
	/* position 0 equal; position 1: a = log(0.5, 0.25, 0.25), b = log(0.25, 0.5, 0.25) */
	float a[6] = {0, 1, 2, logf(0.5f), logf(0.25f), logf(0.25f)};
	float b[6] = {0, 1, 2, logf(0.25f), logf(0.5f), logf(0.25f)};
	struct srt_div d;
	double kl[2], ma[2];
	uint8_t t1[2];
	srt_div_compare(a, b, 2, 3, &d, kl, ma, t1);
	/* KL = 0.5 ln 2 + 0.25 ln 0.5 + 0 = 0.25 ln 2 */
	ck_assert_double_eq_tol(kl[1], 0.25 * log(2.0), 1e-6);
	ck_assert_double_eq_tol(d.kl_mean, 0.125 * log(2.0), 1e-6);
	ck_assert_double_eq_tol(d.max_abs, log(2.0), 1e-6);
	ck_assert_int_eq(d.first_diff, 1);
	ck_assert_int_eq(d.first_top1, 1);
	ck_assert_double_eq(d.top1_agree, 0.5);
	ck_assert_int_eq(t1[1], 0);
	ck_assert(!d.bitwise_equal);
}
END_TEST

START_TEST(one_bit_of_difference_is_found_and_ties_go_to_the_lower_index)
{
	float a[4] = {1, 1, 0, 0}, b[4];
	memcpy(b, a, sizeof(a));
	ck_assert_int_eq(srt_div_argmax(a, 4), 0);
	b[3] = nextafterf(0.0f, 1.0f);
	struct srt_div d;
	srt_div_compare(a, b, 1, 4, &d, NULL, NULL, NULL);
	ck_assert(!d.bitwise_equal);
	ck_assert_int_eq(d.first_diff, 0);
	ck_assert_double_eq(d.top1_agree, 1);
	b[3] = NAN;
	srt_div_compare(a, b, 1, 4, &d, NULL, NULL, NULL);
	ck_assert(isinf(d.kl_max) && isinf(d.max_abs));
}
END_TEST

START_TEST(prompts_are_deterministic_and_inside_the_vocabulary)
{
	int32_t x[1000], y[1000];
	srt_div_prompt(x, 1000, 512, 7);
	srt_div_prompt(y, 1000, 512, 7);
	ck_assert(!memcmp(x, y, sizeof(x)));
	for (int i = 0; i < 1000; i++)
		ck_assert(x[i] >= 2 && x[i] < 512);
	srt_div_prompt(y, 1000, 512, 8);
	ck_assert(memcmp(x, y, sizeof(x)));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("diverge");
	TCase *t = tcase_create("diverge");
	tcase_add_test(t, identical_logits_are_bitwise_equal_with_zero_divergence);
	tcase_add_test(t, kl_max_abs_and_top1_match_hand_computed_values);
	tcase_add_test(t, one_bit_of_difference_is_found_and_ties_go_to_the_lower_index);
	tcase_add_test(t, prompts_are_deterministic_and_inside_the_vocabulary);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
