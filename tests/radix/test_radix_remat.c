/*
 * ShadowRadix with window rematerialization (check suite `radix_remat`), no model: the match
 * rule "every ALL pool holds [0, t)" (all_tokens), the cost decision of
 * srt_rdx_req_start_remat, the pending TAIL pages (page tables, install on success, free on
 * failure / abort, accounting checked by srt_rdx_cache_check and a checking allocator), the
 * remat eviction rule (TAIL pressure tombstones, never deletes a leaf), and the trapezoid
 * arithmetic of remat.h.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "radix/radix.h"
#include "radix/remat.h"
#include "test_util.h"

#define P 256u

/* window (ratio 1, TAIL 128), c4 (ALL), state (one per page, TAIL 1) */
static const int32_t layers[2] = {0, 1};
static struct srt_pool_decl pools[3];

static void decls(void)
{
	const char *names[3] = {"window", "c4", "state"};
	uint32_t ratio[3] = {1, 4, SRT_RATIO_PAGE}, ret[3] = {SRT_RETAIN_TAIL, SRT_RETAIN_ALL,
							       SRT_RETAIN_TAIL};
	uint32_t tail[3] = {128, 0, 1};
	for (int i = 0; i < 3; i++) {
		memset(&pools[i], 0, sizeof(pools[i]));
		pools[i].struct_size = sizeof(pools[i]);
		strcpy(pools[i].name, names[i]);
		pools[i].ratio = ratio[i];
		pools[i].retention = ret[i];
		pools[i].tail_tokens = tail[i];
		pools[i].entry_bytes = 8;
		pools[i].n_layers = 2;
		pools[i].layers = layers;
	}
}

static struct tu_alloc al;
static struct srt_rdx_allocator alloc = {&al, tu_alloc_fn, tu_free_fn};

static struct srt_rdx_cache *make(int remat)
{
	char err[256];
	struct srt_rdx_cache *c;
	memset(&al, 0, sizeof(al));
	decls();
	struct srt_rdx_config cfg = {.page_tokens = P, .alloc = &alloc, .remat = remat};
	ck_assert_msg(!srt_rdx_cache_create(&cfg, pools, 3, &c, err, sizeof(err)), "%s", err);
	return c;
}

static void check(struct srt_rdx_cache *c)
{
	char err[256];
	ck_assert_msg(!srt_rdx_cache_check(c, err, sizeof(err)), "%s", err);
	ck_assert_uint_eq(al.errors, 0);
}

static int32_t *toks(uint64_t n, uint64_t seed)
{
	int32_t *t = malloc(n * sizeof(int32_t));
	for (uint64_t i = 0; i < n; i++)
		t[i] = (int32_t)(tu_mix(seed * 1000003 + i) % 30000);
	return t;
}

/* a request over t[0..n) computed and finished into the cache */
static void put(struct srt_rdx_cache *c, const int32_t *t, uint64_t n)
{
	char err[256];
	struct srt_rdx_req *r;
	uint64_t h;
	ck_assert(!srt_rdx_req_start(c, t, n, &r, &h, err, sizeof(err)));
	ck_assert(!srt_rdx_req_extend(r, t + h, n - h, err, sizeof(err)));
	ck_assert(!srt_rdx_req_finish(r, NULL, err, sizeof(err)));
	srt_rdx_req_free(r);
}

/* drop every TAIL page of the tree (the path of t[0..n) locked so it is tombstoned) */
static void drop_tail(struct srt_rdx_cache *c, const int32_t *t, uint64_t n)
{
	char err[256];
	struct srt_rdx_match m;
	ck_assert(!srt_rdx_match(c, t, n, &m));
	ck_assert(!srt_rdx_lock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err)));
	srt_rdx_evict(c, 0, 0, NULL);
	srt_rdx_evict(c, 2, 0, NULL);
	ck_assert(!srt_rdx_unlock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err)));
	check(c);
}

static uint64_t cost_fixed(void *ctx, uint64_t t)
{
	(void)t;
	return *(uint64_t *)ctx;
}

START_TEST(trapezoid_rows_and_cost_follow_the_window_recurrence)
{
	struct srt_remat_geom g = {.layers = 43, .window = 128, .page_tokens = 256,
				   .tail_pages = 1};
	uint64_t t = 100 * 256;
	ck_assert_uint_eq(srt_remat_top(&g, t), t - 256);
	ck_assert_uint_eq(srt_remat_lo(&g, t, 42), t - 256);
	/* each layer below needs 127 more rows: the window of its first exact row */
	for (uint32_t l = 0; l < 42; l++)
		ck_assert_uint_eq(srt_remat_lo(&g, t, l + 1) - srt_remat_lo(&g, t, l), 127);
	ck_assert_uint_eq(srt_remat_cost(&g, t), 256 * 43 + 127 * 43 * 42 / 2);
	/* near the start every layer is clipped at 0: the cost is computing the prefix */
	ck_assert_uint_eq(srt_remat_cost(&g, 256), 256 * 43);
}
END_TEST

START_TEST(remat_resumes_where_only_all_pools_are_cached_and_installs_the_rebuilt_pages)
{
	char err[256];
	struct srt_rdx_cache *c = make(1);
	int32_t *a = toks(1300, 1), *b = toks(1200, 2);
	memcpy(b, a, 1100 * sizeof(int32_t));
	put(c, a, 1300);
	drop_tail(c, a, 1300);
	struct srt_rdx_match m;
	ck_assert(!srt_rdx_match(c, b, 1199, &m));
	ck_assert_uint_eq(m.hit_tokens, 0);
	ck_assert_uint_eq(m.all_tokens, 1024);

	/* too expensive: the ordinary hit (0) */
	uint64_t cost = 1024 * 10;
	struct srt_rdx_remat_policy pol = {.cost = cost_fixed, .ctx = &cost, .token_cost = 10};
	struct srt_rdx_req *r;
	uint64_t h, rt;
	ck_assert(!srt_rdx_req_start_remat(c, b, 1199, &pol, &r, &h, &rt, err, sizeof(err)));
	ck_assert_uint_eq(h, 0);
	ck_assert_uint_eq(rt, 0);
	srt_rdx_req_free(r);

	/* cheaper: resumed at 1024 with pending TAIL pages for page 3 only */
	cost = 1024 * 10 - 1;
	ck_assert(!srt_rdx_req_start_remat(c, b, 1199, &pol, &r, &h, &rt, err, sizeof(err)));
	ck_assert_uint_eq(h, 1024);
	ck_assert_uint_eq(rt, 1024);
	ck_assert_uint_eq(srt_rdx_req_strict_hit(r), 0);
	ck_assert_uint_eq(srt_rdx_req_remat_pending(r), 1024);
	check(c);
	void *pg[4];
	struct srt_page_table pt;
	for (uint32_t p = 0; p < 3; p++) {
		ck_assert(!srt_rdx_req_page_table(r, p, pg, 4, &pt));
		ck_assert_uint_eq(pt.n_pages, 4);
		for (uint32_t v = 0; v < 4; v++) {
			int want = p == 1 || v == 3; /* ALL pages, and the rebuilt TAIL page */
			ck_assert_msg((pg[v] != NULL) == want, "pool %u page %u", p, v);
		}
	}
	srt_rdx_req_remat_done(r, 1);
	ck_assert_uint_eq(srt_rdx_req_remat_pending(r), 0);
	check(c);
	ck_assert(!srt_rdx_req_finish(r, NULL, err, sizeof(err)));
	srt_rdx_req_free(r);
	/* the rebuilt pages are tree pages now: an ordinary hit */
	ck_assert(!srt_rdx_match(c, b, 1199, &m));
	ck_assert_uint_eq(m.hit_tokens, 1024);
	check(c);
	free(a), free(b);
	srt_rdx_cache_destroy(c);
	ck_assert_uint_eq(al.live_pages, 0);
	tu_alloc_done(&al);
}
END_TEST

START_TEST(a_failed_or_aborted_rematerialization_frees_its_pages_and_serves_nothing)
{
	char err[256];
	struct srt_rdx_cache *c = make(1);
	int32_t *a = toks(1300, 3);
	put(c, a, 1300);
	drop_tail(c, a, 1300);
	uint64_t cost = 1;
	struct srt_rdx_remat_policy pol = {.cost = cost_fixed, .ctx = &cost, .token_cost = 10};
	struct srt_rdx_req *r;
	uint64_t h, rt, live = al.live_pages;
	ck_assert(!srt_rdx_req_start_remat(c, a, 1299, &pol, &r, &h, &rt, err, sizeof(err)));
	ck_assert_uint_eq(rt, 1280);
	ck_assert_uint_eq(al.live_pages, live + 2); /* window and state of page 4 */
	srt_rdx_req_remat_done(r, 0);
	ck_assert_uint_eq(al.live_pages, live);
	check(c);
	srt_rdx_req_free(r);
	struct srt_rdx_match m;
	ck_assert(!srt_rdx_match(c, a, 1299, &m));
	ck_assert_uint_eq(m.hit_tokens, 0); /* nothing was installed */
	/* abort with pages pending */
	ck_assert(!srt_rdx_req_start_remat(c, a, 1299, &pol, &r, &h, &rt, err, sizeof(err)));
	ck_assert_uint_eq(rt, 1280);
	srt_rdx_req_free(r);
	ck_assert_uint_eq(al.live_pages, live);
	check(c);
	free(a);
	srt_rdx_cache_destroy(c);
	tu_alloc_done(&al);
}
END_TEST

START_TEST(with_remat_tail_pressure_tombstones_leaves_instead_of_deleting_them)
{
	for (int remat = 0; remat < 2; remat++) {
		struct srt_rdx_cache *c = make(remat);
		int32_t *a = toks(1300, 4);
		put(c, a, 1300);
		srt_rdx_evict(c, 0, 0, NULL); /* the window pool under pressure */
		check(c);
		struct srt_rdx_match m;
		ck_assert(!srt_rdx_match(c, a, 1299, &m));
		/* off: the leaf went with its ALL pages; on: they stay rematerializable */
		ck_assert_uint_eq(m.all_tokens, remat ? 1280 : 0);
		ck_assert_uint_eq(m.hit_tokens, 0);
		free(a);
		srt_rdx_cache_destroy(c);
		tu_alloc_done(&al);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("radix_remat");
	TCase *tc = tcase_create("remat");
	tcase_add_test(tc, trapezoid_rows_and_cost_follow_the_window_recurrence);
	tcase_add_test(tc, remat_resumes_where_only_all_pools_are_cached_and_installs_the_rebuilt_pages);
	tcase_add_test(tc, a_failed_or_aborted_rematerialization_frees_its_pages_and_serves_nothing);
	tcase_add_test(tc, with_remat_tail_pressure_tombstones_leaves_instead_of_deleting_them);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
