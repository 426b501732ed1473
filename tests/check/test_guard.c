/*
 * Unit tests of core/check/guard.c (check suite `guard`): the page allocator check-plugin
 * fences KV pages with. Pages are zeroed and 64-byte aligned; a write one byte past a page
 * faults (in fork mode: the test's own process dies with SIGSEGV, which is what the test
 * expects); a write before a page or into its rounding is found by the canaries.
 */
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "check/guard.h"

static struct srt_guard *g;
static const struct srt_rdx_allocator *al;

static void setup(void)
{
	ck_assert_int_eq(srt_guard_create(&g), 0);
	al = srt_guard_allocator(g);
}

static void teardown(void)
{
	srt_guard_destroy(g);
}

START_TEST(pages_are_zeroed_aligned_and_clean_pages_pass)
{
	void *p;
	char msg[256];
	ck_assert_int_eq(al->alloc(al->ctx, 0, 1000, &p), 0);
	ck_assert_uint_eq((uintptr_t)p % 64, 0);
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(((unsigned char *)p)[i], 0);
	memset(p, 0x5a, 1000); /* the whole page may be written */
	ck_assert_uint_eq(srt_guard_verify(g, msg, sizeof(msg)), 0);
	al->free(al->ctx, 0, p, 1000);
	ck_assert_uint_eq(srt_guard_verify(g, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(srt_guard_pages(g), 1);
}
END_TEST

START_TEST(a_write_into_the_rounding_after_a_page_is_caught_at_free)
{
	void *p;
	char msg[256];
	ck_assert_int_eq(al->alloc(al->ctx, 3, 1000, &p), 0); /* rounded to 1024 */
	((unsigned char *)p)[1000] = 1;
	ck_assert_uint_eq(srt_guard_verify(g, msg, sizeof(msg)), 1);
	ck_assert_msg(strstr(msg, "pool 3: a write 1 bytes past the end of a 1000-byte page"), "%s",
		      msg);
	al->free(al->ctx, 3, p, 1000);
	ck_assert_uint_eq(srt_guard_verify(g, msg, sizeof(msg)), 1);
}
END_TEST

START_TEST(a_write_before_a_page_is_caught)
{
	void *p;
	char msg[256];
	ck_assert_int_eq(al->alloc(al->ctx, 0, 256, &p), 0);
	((unsigned char *)p)[-5] = 1;
	ck_assert_uint_eq(srt_guard_verify(g, msg, sizeof(msg)), 1);
	ck_assert_msg(strstr(msg, "5 bytes before the start"), "%s", msg);
	al->free(al->ctx, 0, p, 256);
}
END_TEST

START_TEST(a_write_past_the_rounded_end_faults)
{
	void *p;
	ck_assert_int_eq(al->alloc(al->ctx, 0, 1024, &p), 0);
	ck_assert(srt_guard_is_guard(g, (unsigned char *)p + 1024));
	ck_assert(!srt_guard_is_guard(g, (unsigned char *)p + 1023));
	signal(SIGSEGV, SIG_DFL); /* the kernel's SIGSEGV, not a sanitizer's report */
	((volatile unsigned char *)p)[1024] = 1; /* SIGSEGV: the test passes by dying of it */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("guard");
	TCase *t = tcase_create("guard");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, pages_are_zeroed_aligned_and_clean_pages_pass);
	tcase_add_test(t, a_write_into_the_rounding_after_a_page_is_caught_at_free);
	tcase_add_test(t, a_write_before_a_page_is_caught);
	tcase_add_test_raise_signal(t, a_write_past_the_rounded_end_faults, SIGSEGV);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
