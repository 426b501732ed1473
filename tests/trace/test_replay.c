/*
 * The cache-only replay (core/trace/replay.c) on a real ShadowRadix cache: the sequential mode's
 * error for a budget too small for one request, and the concurrent mode's model of time (arrivals
 * at trace timestamps, running requests holding their pages, admission in arrival order).
 *
 * One ALL pool of 1 byte per token, page 512 tokens = one trace block: a request of b blocks and
 * one output token locks b + 1 pages of 512 bytes.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "radix/radix.h"
#include "trace/replay.h"
#include "trace/trace.h"

#define P 512u

static const int32_t layer0[1] = {0};

static struct srt_rdx_cache *cache(uint64_t pages)
{
	static struct srt_pool_decl pool;
	pool = (struct srt_pool_decl){.struct_size = sizeof(pool), .name = "kv", .ratio = 1,
				      .retention = SRT_RETAIN_ALL, .entry_bytes = 1, .n_layers = 1,
				      .layers = layer0};
	uint64_t budget = pages ? pages * P : SRT_RDX_UNBOUNDED;
	struct srt_rdx_config cfg = {.page_tokens = P, .budgets = &budget,
				     .alloc = &srt_rdx_null_allocator};
	struct srt_rdx_cache *c;
	char err[256];
	ck_assert_msg(srt_rdx_cache_create(&cfg, &pool, 1, &c, err, sizeof(err)) == 0, "%s", err);
	return c;
}

/* Request lines: "ts:first_block:n_blocks" entries; each block id counts up from first. */
static struct srt_trace *trace(const char *const *reqs, size_t n)
{
	char path[] = "/tmp/srt-replay-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	FILE *f = fdopen(fd, "w");
	for (size_t i = 0; i < n; i++) {
		long ts, first, nb;
		ck_assert_int_eq(sscanf(reqs[i], "%ld:%ld:%ld", &ts, &first, &nb), 3);
		fprintf(f, "{\"timestamp\": %ld, \"input_length\": %ld, \"output_length\": 1, "
			   "\"hash_ids\": [", ts, nb * 512);
		for (long b = 0; b < nb; b++)
			fprintf(f, "%s%ld", b ? ", " : "", first + b);
		fprintf(f, "]}\n");
	}
	fclose(f);
	struct srt_trace *t;
	char err[256];
	ck_assert_msg(srt_trace_load(path, 0, &t, err, sizeof(err)) == 0, "%s", err);
	unlink(path);
	return t;
}

START_TEST(a_budget_too_small_for_one_request_is_an_error_naming_the_request_and_the_pool)
{
	static const char *const reqs[] = {"0:0:4", "1000:100:30", "2000:200:4"};
	struct srt_trace *t = trace(reqs, 3);
	for (int conc = 0; conc < 2; conc++) {
		struct srt_rdx_cache *c = cache(20); /* request 1 needs 31 pages */
		struct srt_replay_opts o = {.concurrent = conc};
		struct srt_replay_result res;
		char err[1024] = "";
		ck_assert_int_eq(srt_trace_replay(c, t, &o, &res, err, sizeof(err)), SRT_ENOMEM);
		ck_assert_msg(strstr(err, "request 1 (trace line 2") && strstr(err, "pool 'kv'") &&
				      strstr(err, "even with no other request running"),
			      "error: %s", err);
		srt_rdx_cache_destroy(c);
	}
	srt_trace_free(t);
}
END_TEST

START_TEST(concurrent_requests_hold_their_pages_and_later_ones_wait_for_memory)
{
	/* three unique 8-block requests at once, each holding 9 pages for 8 * 512 / 1000 + 1 / 30
	 * s: a 20-page L1 runs two; the third waits for the first to finish */
	static const char *const reqs[] = {"0:0:8", "0:100:8", "0:200:8"};
	struct srt_trace *t = trace(reqs, 3);
	struct srt_rdx_cache *c = cache(20);
	struct srt_replay_opts o = {.concurrent = 1, .prefill_tps = 1000, .decode_tps = 30};
	struct srt_replay_result res;
	char err[1024];
	ck_assert_msg(srt_trace_replay(c, t, &o, &res, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(res.requests, 3);
	ck_assert_uint_eq(res.peak_running, 2);
	ck_assert_uint_eq(res.deferred, 1);
	double svc = 8.0 * 512 / 1000 + 1.0 / 30;
	ck_assert_double_eq_tol(res.max_wait_s, svc, 1e-9);    /* the third waited one service */
	ck_assert_double_eq_tol(res.sim_s, 2 * svc, 1e-9);      /* and ended after a second one */
	srt_rdx_cache_destroy(c);
	/* sequential: one at a time, nobody waits */
	c = cache(20);
	o.concurrent = 0;
	ck_assert_msg(srt_trace_replay(c, t, &o, &res, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(res.deferred, 0);
	srt_rdx_cache_destroy(c);
	srt_trace_free(t);
}
END_TEST

START_TEST(arrivals_follow_trace_time_scaled_and_running_prefixes_are_hit)
{
	/* B shares A's first 6 blocks and arrives 1 s after A; C, unique, arrives at 1.5 s */
	static const char *const reqs[] = {"0:0:8", "1000:0:6", "1500:500:8"};
	struct srt_trace *t = trace(reqs, 3);
	/* slow service (A runs ~41 s): B arrives while A runs and hits its prefix; L1 of 26 pages
	 * holds A (9) + B's own 1 + C (9) */
	struct srt_rdx_cache *c = cache(26);
	struct srt_replay_opts o = {.concurrent = 1, .prefill_tps = 100, .decode_tps = 1};
	struct srt_replay_result res;
	char err[1024];
	ck_assert_msg(srt_trace_replay(c, t, &o, &res, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(res.hit_tokens, 6 * 512); /* all of B: A is running, its prefix locked */
	ck_assert_uint_eq(res.peak_running, 3);
	ck_assert_double_eq_tol(res.max_wait_s, 0, 1e-9);
	srt_rdx_cache_destroy(c);
	/* the same trace at 1000x the arrival spacing: nothing overlaps any more */
	c = cache(26);
	o.time_scale = 1000;
	ck_assert_msg(srt_trace_replay(c, t, &o, &res, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(res.peak_running, 1);
	ck_assert_double_eq_tol(res.sim_s, 1500.0 + 8.0 * 512 / 100 + 1.0, 1e-6);
	srt_rdx_cache_destroy(c);
	srt_trace_free(t);
}
END_TEST

/* `shadowrt replay --budget X`: sizes that used to become 0 B or 8 EiB and exit 0 are refused. */
START_TEST(replay_cli_refuses_overflowing_and_non_numeric_budgets)
{
	static const char *const bad[] = {"1e30", "infinity", "18446744073709551615", "nan", "inf",
					  "-1", "4X"};
	char cmd[4096], line[1024];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(cmd, sizeof(cmd), "'%s/bin/shadowrt' replay /nonexistent.jsonl --budget '%s' 2>&1",
			 getenv("SRT_BUILD_DIR"), bad[i]);
		FILE *p = popen(cmd, "r");
		ck_assert_ptr_nonnull(p);
		int named = 0;
		while (fgets(line, sizeof(line), p))
			named |= strstr(line, "--budget") && strstr(line, bad[i]);
		int st = pclose(p);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "--budget %s: exit %d", bad[i],
			      WEXITSTATUS(st));
		ck_assert_msg(named, "--budget %s: the error does not name the option and value", bad[i]);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("replay");
	TCase *tc = tcase_create("replay");
	tcase_add_test(tc, a_budget_too_small_for_one_request_is_an_error_naming_the_request_and_the_pool);
	tcase_add_test(tc, concurrent_requests_hold_their_pages_and_later_ones_wait_for_memory);
	tcase_add_test(tc, arrivals_follow_trace_time_scaled_and_running_prefixes_are_hit);
	tcase_add_test(tc, replay_cli_refuses_overflowing_and_non_numeric_budgets);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
