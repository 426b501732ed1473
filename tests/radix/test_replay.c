/*
 * Replay of the first 300 requests of the Mooncake synthetic trace through the real cache with
 * the pool geometry the real attention plugins declare (loaded through the registry) for
 * deepseek-v4-flash: unbounded, the hit rate equals the independently computed ceiling;
 * bounded, no pool ever exceeds its budget and the hit rate stays under the ceiling.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "radix/geometry.h"
#include "radix/radix.h"
#include "trace/replay.h"
#include "trace/trace.h"

#define N_REQ 300

static char err[1024];
static char trace_path[4096];
static const char *plugin_dir;

static struct srt_rdx_geometry *load_geometry(const char *model, uint32_t P)
{
	const char *dirs[1] = {plugin_dir};
	/* bf16 entries, named here: the plugins' default ("auto") follows the numerics profile. */
	struct srt_rdx_geometry_opts o = {.page_tokens = P, .kv_dtype = "bf16",
					  .index_dtype = "bf16",
					  .dirs = plugin_dir ? dirs : NULL,
					  .ndirs = plugin_dir ? 1 : 0};
	struct srt_rdx_geometry *g = NULL;
	int rc = srt_rdx_geometry_load(model, &o, &g, err, sizeof(err));
	ck_assert_msg(rc == 0, "geometry: %s", err);
	return g;
}

START_TEST(flash_geometry_comes_from_the_three_plugins)
{
	struct srt_rdx_geometry *g = load_geometry("deepseek-v4-flash", 256);
	const char *want[] = {"swa.window", "csa.window", "csa.c4_kv", "csa.c4_index",
			      "csa.c4_state", "hca.window", "hca.c128_kv", "hca.c128_state"};
	ck_assert_uint_eq(g->n_pools, 8);
	for (int i = 0; i < 8; i++)
		ck_assert_str_eq(g->pools[i].name, want[i]);
	ck_assert_uint_eq(g->pools[0].n_layers, 3);  /* blocks 0, 1 and the MTP block */
	ck_assert_uint_eq(g->pools[2].n_layers, 21); /* CSA */
	ck_assert_uint_eq(g->pools[6].n_layers, 20); /* HCA */
	ck_assert_uint_eq(g->pools[2].entry_bytes, 1024);
	ck_assert_uint_eq(g->pools[3].entry_bytes, 256);
	/* rings, then the pending rows (a header and 3 rows of hidden_size 4096) */
	ck_assert_uint_eq(g->pools[4].entry_bytes, 8 * 2 * 1024 * 4 + 8 * 2 * 256 * 4 + 16 + 3 * 4096 * 4);
	ck_assert_uint_eq(g->pools[7].entry_bytes, 3 * 512 * 4 + 16 + 3 * 4096 * 4);
	srt_rdx_geometry_free(g);
}
END_TEST

START_TEST(page_size_not_a_multiple_of_128_is_refused_for_flash)
{
	struct srt_rdx_geometry *g = load_geometry("deepseek-v4-flash", 192);
	struct srt_rdx_config cfg = {.page_tokens = 192, .alloc = &srt_rdx_null_allocator};
	struct srt_rdx_cache *c;
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, g->pools, g->n_pools, &c, err, sizeof(err)),
			 SRT_EINVAL);
	ck_assert_msg(strstr(err, "hca.c128_kv") && strstr(err, "192"), "%s", err);
	srt_rdx_geometry_free(g);
}
END_TEST

static void replay(uint64_t budget_total, struct srt_replay_result *res, int *over)
{
	struct srt_rdx_geometry *g = load_geometry("deepseek-v4-flash", 256);
	struct srt_trace *t;
	ck_assert_msg(srt_trace_load(trace_path, N_REQ, &t, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(t->n, N_REQ);
	uint64_t budgets[SRT_RDX_MAX_POOLS];
	for (uint32_t i = 0; i < g->n_pools; i++) /* equal share of pages per pool */
		budgets[i] = budget_total == SRT_RDX_UNBOUNDED ? SRT_RDX_UNBOUNDED
							       : budget_total / g->n_pools;
	struct srt_rdx_config cfg = {.page_tokens = 256, .budgets = budgets,
				     .alloc = &srt_rdx_null_allocator};
	struct srt_rdx_cache *c;
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, g->pools, g->n_pools, &c, err, sizeof(err)), 0);
	struct srt_replay_opts o = {.chunk_tokens = 8192};
	ck_assert_msg(srt_trace_replay(c, t, &o, res, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(srt_rdx_cache_check(c, err, sizeof(err)) == 0, "%s", err);
	*over = 0;
	for (uint32_t i = 0; i < g->n_pools; i++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(c, i, &st);
		*over += st.peak_bytes > st.budget;
		ck_assert_uint_eq(st.bytes, st.pages * st.page_bytes);
	}
	srt_rdx_cache_destroy(c);
	srt_trace_free(t);
	srt_rdx_geometry_free(g);
}

START_TEST(unbounded_hit_rate_equals_the_ceiling)
{
	struct srt_replay_result res;
	int over;
	replay(SRT_RDX_UNBOUNDED, &res, &over);
	ck_assert_uint_eq(res.requests, N_REQ);
	ck_assert_uint_gt(res.ceiling_tokens, 0);
	ck_assert_uint_eq(res.hit_tokens, res.ceiling_tokens);
	ck_assert_uint_eq(res.rejected, 0);
}
END_TEST

START_TEST(bounded_replay_never_exceeds_a_pool_budget)
{
	struct srt_replay_result res, unb;
	int over;
	replay(SRT_RDX_UNBOUNDED, &unb, &over);
	replay(64ull << 30, &res, &over);
	ck_assert_int_eq(over, 0);
	ck_assert_uint_le(res.hit_tokens, res.ceiling_tokens);
	ck_assert_uint_lt(res.hit_tokens, unb.hit_tokens); /* the budget really bit */
	ck_assert_uint_gt(res.hit_tokens, 0);
}
END_TEST

int main(void)
{
	const char *src = getenv("SRT_SOURCE_DIR");
	plugin_dir = getenv("SRT_PLUGIN_DIR");
	snprintf(trace_path, sizeof(trace_path), "%s",
		 getenv("SRT_TRACE") ? getenv("SRT_TRACE")
				     : "/work/shared/traces/mooncake-synthetic.jsonl");
	(void)src;
	Suite *s = suite_create("radix_replay");
	TCase *tc = tcase_create("replay");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, flash_geometry_comes_from_the_three_plugins);
	tcase_add_test(tc, page_size_not_a_multiple_of_128_is_refused_for_flash);
	tcase_add_test(tc, unbounded_hit_rate_equals_the_ceiling);
	tcase_add_test(tc, bounded_replay_never_exceeds_a_pool_budget);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
