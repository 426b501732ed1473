/* srt_size_parse: SI and IEC units, whole bytes, every overflow and non-number refused. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/plugin.h>

#include "config/size.h"

START_TEST(si_units_are_powers_of_1000_iec_and_bare_letters_powers_of_1024)
{
	static const struct { const char *s; uint64_t v; } ok[] = {
		{"0", 0}, {"4096", 4096}, {"100B", 100}, {"100 b", 100},
		{"1KB", 1000}, {"1kb", 1000}, {"1KiB", 1024}, {"1K", 1024}, {"4k", 4096},
		{"1MB", 1000000}, {"2MiB", 2u << 20}, {"2M", 2u << 20},
		{"1GB", 1000000000ull}, {"1GiB", 1ull << 30}, {"4G", 4ull << 30},
		{"4 GiB", 4ull << 30}, {" 4GiB ", 4ull << 30}, {"1TB", 1000000000000ull},
		{"1TiB", 1ull << 40}, {"200GB", 200000000000ull}, {"1.5GiB", 3ull << 29},
		{"1.5GB", 1500000000ull}, {"0.5K", 512}, {"1PiB", 1ull << 50}, {"7EiB", 7ull << 60},
		{"9223372036854775807", INT64_MAX}, {"8EB", 8000000000000000000ull},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t v = 12345;
		char err[256] = "";
		ck_assert_msg(srt_size_parse(ok[i].s, &v, err, sizeof(err)) == 0, "'%s' rejected: %s",
			      ok[i].s, err);
		ck_assert_msg(v == ok[i].v, "'%s' -> %llu, expected %llu", ok[i].s,
			      (unsigned long long)v, (unsigned long long)ok[i].v);
	}
}
END_TEST

START_TEST(overflow_infinity_nan_exponents_and_garbage_are_refused_with_a_reason)
{
	static const struct { const char *s, *why; } bad[] = {
		{"1e30", "exponents"}, {"2E+3", "exponents"}, {"infinity", "expected a number"}, {"inf", "expected a number"},
		{"nan", "expected a number"}, {"18446744073709551615", "largest size"},
		{"18446744073709551616", "largest size"}, {"9223372036854775808", "largest size"},
		{"8EiB", "largest size"}, {"10EB", "largest size"}, {"16777216T", "largest size"},
		{"-1", "sign"}, {"+4G", "sign"}, {"", "expected a number"}, {"G", "expected a number"},
		{"4X", "unknown unit"}, {"4GiBs", "unknown unit"}, {"4 G B", "unknown unit"},
		{"4iB", "unknown unit"}, {"4Gi", "unknown unit"}, {"0x10", "unknown unit"},
		{"1.3K", "whole number"}, {"0.1", "whole number"}, {"1..5G", "unknown unit"},
		{"0.0000000000000000001", "decimals"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 12345;
		char err[256] = "";
		ck_assert_msg(srt_size_parse(bad[i].s, &v, err, sizeof(err)) == SRT_EINVAL,
			      "'%s' accepted as %llu", bad[i].s, (unsigned long long)v);
		ck_assert_uint_eq(v, 12345);
		ck_assert_msg(strstr(err, bad[i].why) && err[0] == '\'', "'%s': error '%s' lacks '%s'",
			      bad[i].s, err, bad[i].why);
	}
	uint64_t v;
	ck_assert_int_eq(srt_size_parse(NULL, &v, NULL, 0), SRT_EINVAL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("size");
	TCase *tc = tcase_create("parse");
	tcase_add_test(tc, si_units_are_powers_of_1000_iec_and_bare_letters_powers_of_1024);
	tcase_add_test(tc, overflow_infinity_nan_exponents_and_garbage_are_refused_with_a_reason);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
