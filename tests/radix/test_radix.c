/* ShadowRadix unit tests: one test per operation and per rule of core/radix/radix.h. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "radix/radix.h"
#include "test_util.h"

#define P 32
enum { WIN, C4, C16, STATE, NPOOLS };

static struct tu_alloc A;
static struct srt_rdx_allocator AL;
static char err[512];

/* window (ratio 1, TAIL 16), C4 (ALL), a ratio-16 research pool (ALL), carry state (page, TAIL 1) */
static struct srt_rdx_cache *mk(const uint64_t *budgets)
{
	struct srt_pool_decl d[NPOOLS] = {
		tu_pool("win", 1, SRT_RETAIN_TAIL, 16, 8, 2),
		tu_pool("c4", 4, SRT_RETAIN_ALL, 0, 16, 2),
		tu_pool("c16", 16, SRT_RETAIN_ALL, 0, 8, 1),
		tu_pool("state", SRT_RATIO_PAGE, SRT_RETAIN_TAIL, 1, 64, 2),
	};
	memset(&A, 0, sizeof(A));
	AL = tu_allocator(&A);
	struct srt_rdx_config cfg = {.page_tokens = P, .budgets = budgets, .alloc = &AL};
	struct srt_rdx_cache *c = NULL;
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, d, NPOOLS, &c, err, sizeof(err)), 0);
	return c;
}
static void done(struct srt_rdx_cache *c)
{
	ck_assert_int_eq(srt_rdx_cache_check(c, err, sizeof(err)), 0);
	srt_rdx_cache_destroy(c);
	ck_assert_uint_eq(A.live_pages, 0);
	ck_assert_uint_eq(A.errors, 0);
	tu_alloc_done(&A);
}
static void seq(int32_t *t, uint64_t n, uint64_t seed)
{
	for (uint64_t i = 0; i < n; i++)
		t[i] = (int32_t)(tu_mix(seed * 1000003 + i) & 0x7fffffff);
}
static void check_ok(struct srt_rdx_cache *c)
{
	int rc = srt_rdx_cache_check(c, err, sizeof(err));
	ck_assert_msg(rc == 0, "cache check: %s", err);
	for (uint32_t p = 0; p < srt_rdx_pool_count(c); p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(c, p, &st);
		ck_assert_uint_eq(st.bytes, A.live_bytes[p]);
	}
}
/* Run a request over t[0..n) to the end: start, extend the rest, finish. Returns the hit. */
static uint64_t run_req(struct srt_rdx_cache *c, const int32_t *t, uint64_t n)
{
	struct srt_rdx_req *r;
	uint64_t hit;
	ck_assert_int_eq(srt_rdx_req_start(c, t, n, &r, &hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(r, t + hit, n - hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_finish(r, NULL, err, sizeof(err)), 0);
	srt_rdx_req_free(r);
	check_ok(c);
	return hit;
}

START_TEST(create_refuses_page_size_not_multiple_of_a_ratio)
{
	struct srt_pool_decl d[2] = {tu_pool("win", 1, SRT_RETAIN_TAIL, 128, 8, 1),
				     tu_pool("c16", 16, SRT_RETAIN_ALL, 0, 8, 1)};
	struct srt_rdx_config cfg = {.page_tokens = 24};
	struct srt_rdx_cache *c = (void *)1;
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, d, 2, &c, err, sizeof(err)), SRT_EINVAL);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(err, "'c16'") && strstr(err, "24") && strstr(err, "16"), "%s", err);
	/* ratio above P */
	cfg.page_tokens = 8;
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, d, 2, &c, err, sizeof(err)), SRT_EINVAL);
	/* duplicate names, zero entry bytes, TAIL without w */
	cfg.page_tokens = 32;
	struct srt_pool_decl dup[2] = {d[0], d[0]};
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, dup, 2, &c, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "twice"), "%s", err);
	struct srt_pool_decl z = tu_pool("z", 4, SRT_RETAIN_ALL, 0, 0, 1);
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, &z, 1, &c, err, sizeof(err)), SRT_EINVAL);
	struct srt_pool_decl t = tu_pool("t", 4, SRT_RETAIN_TAIL, 0, 8, 1);
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, &t, 1, &c, err, sizeof(err)), SRT_EINVAL);
}
END_TEST

START_TEST(page_bytes_follow_the_declaration_for_any_ratio)
{
	struct srt_rdx_cache *c = mk(NULL);
	struct srt_rdx_pool_stats st;
	srt_rdx_pool_stats(c, WIN, &st);
	ck_assert_uint_eq(st.page_bytes, 2u * (P / 1) * 8);
	srt_rdx_pool_stats(c, C4, &st);
	ck_assert_uint_eq(st.page_bytes, 2u * (P / 4) * 16);
	srt_rdx_pool_stats(c, C16, &st); /* a ratio no core code knows about */
	ck_assert_uint_eq(st.ratio, 16);
	ck_assert_uint_eq(st.page_bytes, 1u * (P / 16) * 8);
	srt_rdx_pool_stats(c, STATE, &st); /* SRT_RATIO_PAGE resolves to P: one entry per page */
	ck_assert_uint_eq(st.ratio, P);
	ck_assert_uint_eq(st.page_bytes, 2u * 1 * 64);
	ck_assert_uint_eq(st.tail_pages, 1);
	ck_assert_int_eq(srt_rdx_pool_find(c, "c16"), C16);
	ck_assert_int_eq(srt_rdx_pool_find(c, "nope"), -1);
	done(c);
}
END_TEST

START_TEST(miss_then_whole_pages_hit_after_finish)
{
	struct srt_rdx_cache *c = mk(NULL);
	int32_t t[100];
	seq(t, 100, 1);
	ck_assert_uint_eq(run_req(c, t, 100), 0);
	ck_assert_uint_eq(run_req(c, t, 100), 96); /* 3 whole pages; the partial one is not cached */
	ck_assert_uint_eq(run_req(c, t, 64), 64);
	ck_assert_uint_eq(run_req(c, t, 31), 0); /* less than a page */
	struct srt_rdx_stats s;
	srt_rdx_stats(c, &s);
	ck_assert_uint_eq(s.tree_pages, 3);
	done(c);
}
END_TEST

START_TEST(commit_returns_the_already_cached_length)
{
	struct srt_rdx_cache *c = mk(NULL);
	int32_t t[200];
	seq(t, 200, 2);
	/* two concurrent misses on the same prompt */
	struct srt_rdx_req *a, *b;
	uint64_t hit, cached;
	ck_assert_int_eq(srt_rdx_req_start(c, t, 200, &a, &hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_start(c, t, 200, &b, &hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(a, t, 200, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(b, t, 200, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_commit(a, &cached, err, sizeof(err)), 0);
	ck_assert_uint_eq(cached, 0);
	ck_assert_int_eq(srt_rdx_req_commit(b, &cached, err, sizeof(err)), 0);
	ck_assert_uint_eq(cached, 192); /* 6 whole pages were already there */
	check_ok(c);
	/* b's duplicate pages were freed: one copy of each whole page + two partial pages */
	struct srt_rdx_pool_stats st;
	srt_rdx_pool_stats(c, C4, &st);
	ck_assert_uint_eq(st.pages, 6 + 2);
	/* both page tables now point at the same shared pages */
	void *pa[8], *pb[8];
	struct srt_page_table ta, tb;
	ck_assert_int_eq(srt_rdx_req_page_table(a, C4, pa, 8, &ta), 0);
	ck_assert_int_eq(srt_rdx_req_page_table(b, C4, pb, 8, &tb), 0);
	ck_assert_uint_eq(ta.n_pages, 7);
	for (int i = 0; i < 6; i++)
		ck_assert_ptr_eq(pa[i], pb[i]);
	ck_assert_ptr_ne(pa[6], pb[6]); /* partial pages stay private */
	ck_assert_int_eq(srt_rdx_req_finish(a, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_finish(b, &cached, err, sizeof(err)), 0);
	ck_assert_uint_eq(cached, 192);
	srt_rdx_req_free(a);
	srt_rdx_req_free(b);
	done(c);
}
END_TEST

START_TEST(partial_match_splits_a_node)
{
	struct srt_rdx_cache *c = mk(NULL);
	int32_t a[128], b[128];
	seq(a, 128, 3);
	memcpy(b, a, sizeof(a));
	b[70] ^= 1; /* diverge in page 2 */
	run_req(c, a, 128);
	struct srt_rdx_stats s;
	srt_rdx_stats(c, &s);
	ck_assert_uint_eq(s.nodes, 1);
	struct srt_rdx_match m;
	ck_assert_int_eq(srt_rdx_match(c, b, 128, &m), 0);
	ck_assert_uint_eq(m.hit_tokens, 64);
	ck_assert_uint_eq(m.matched_tokens, 64);
	srt_rdx_stats(c, &s);
	ck_assert_uint_eq(s.nodes, 2); /* split at page 2 */
	check_ok(c);
	ck_assert_uint_eq(run_req(c, b, 128), 64);
	srt_rdx_stats(c, &s);
	ck_assert_uint_eq(s.nodes, 3);
	ck_assert_uint_eq(s.tree_pages, 6);
	ck_assert_uint_eq(run_req(c, a, 128), 128);
	ck_assert_uint_eq(run_req(c, b, 128), 128);
	done(c);
}
END_TEST

START_TEST(tombstoned_window_keeps_compressed_pages_matchable)
{
	struct srt_rdx_cache *c = mk(NULL);
	int32_t t[256];
	seq(t, 256, 4);
	run_req(c, t, 128);       /* node X = pages 0..3 */
	run_req(c, t, 256);       /* node Y = pages 4..7 below X */
	struct srt_rdx_req *r;
	uint64_t hit;
	ck_assert_int_eq(srt_rdx_req_start(c, t, 256, &r, &hit, err, sizeof(err)), 0);
	ck_assert_uint_eq(hit, 256);
	/* r TAIL-locks only the last page; the window pages of X are droppable */
	uint64_t freed;
	/* everything but Y's last page (TAIL-locked by r) goes: X's 4 pages, Y's 3 interior */
	ck_assert_int_eq(srt_rdx_evict(c, WIN, 0, &freed), SRT_ENOMEM);
	struct srt_rdx_pool_stats st;
	srt_rdx_pool_stats(c, WIN, &st);
	ck_assert_uint_eq(st.tombstoned_pages, 7);
	ck_assert_uint_eq(freed, 7 * st.page_bytes);
	ck_assert_uint_eq(st.pages, 1);
	srt_rdx_pool_stats(c, C4, &st);
	ck_assert_uint_eq(st.pages, 8); /* compressed pages all kept */
	/* the page table of r shows the holes */
	void *pt[8];
	struct srt_page_table tab;
	ck_assert_int_eq(srt_rdx_req_page_table(r, WIN, pt, 8, &tab), 0);
	ck_assert_ptr_null(pt[0]);
	ck_assert_ptr_nonnull(pt[7]);
	check_ok(c);
	ck_assert_int_eq(srt_rdx_req_abort(r, err, sizeof(err)), 0);
	srt_rdx_req_free(r);
	/* a hit may end at 256 (window page 7 present) but not at 128 (window page 3 gone) */
	struct srt_rdx_match m;
	ck_assert_int_eq(srt_rdx_match(c, t, 256, &m), 0);
	ck_assert_uint_eq(m.hit_tokens, 256);
	ck_assert_int_eq(srt_rdx_match(c, t, 128, &m), 0);
	ck_assert_uint_eq(m.hit_tokens, 0);
	ck_assert_uint_eq(m.matched_tokens, 128);
	/* recomputing the 128-token prefix refills the tombstoned page on commit */
	ck_assert_uint_eq(run_req(c, t, 128), 0);
	ck_assert_int_eq(srt_rdx_match(c, t, 128, &m), 0);
	ck_assert_uint_eq(m.hit_tokens, 128);
	done(c);
}
END_TEST

START_TEST(window_pressure_drops_interior_pages_before_node_ends)
{
	/* win pages are 2 * 32 * 8 = 512 B; room for 5 */
	uint64_t budgets[NPOOLS] = {5 * 512, SRT_RDX_UNBOUNDED, SRT_RDX_UNBOUNDED, SRT_RDX_UNBOUNDED};
	struct srt_rdx_cache *c = mk(budgets);
	int32_t a[128], b[128];
	seq(a, 128, 20), seq(b, 128, 21);
	run_req(c, a, 128); /* 4 pages, all windows present */
	run_req(c, b, 128); /* needs 4 more win pages: a's interior pages 0..2 go first */
	struct srt_rdx_pool_stats st;
	srt_rdx_pool_stats(c, WIN, &st);
	ck_assert_uint_eq(st.tombstoned_pages, 3);
	struct srt_rdx_match m;
	srt_rdx_match(c, a, 128, &m); /* a's end is still a usable hit end */
	ck_assert_uint_eq(m.hit_tokens, 128);
	srt_rdx_match(c, a, 96, &m); /* but not the middle */
	ck_assert_uint_eq(m.hit_tokens, 0);
	done(c);
}
END_TEST

START_TEST(unlock_without_lock_is_an_error)
{
	struct srt_rdx_cache *c = mk(NULL);
	int32_t t[64];
	seq(t, 64, 5);
	run_req(c, t, 64);
	struct srt_rdx_match m;
	srt_rdx_match(c, t, 64, &m);
	ck_assert_uint_eq(m.hit_tokens, 64);
	ck_assert_int_eq(srt_rdx_unlock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "unlock without lock"), "%s", err);
	ck_assert_int_eq(srt_rdx_lock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err)), 0);
	/* locked: cannot be evicted */
	ck_assert_int_eq(srt_rdx_evict(c, C4, 0, NULL), SRT_ENOMEM);
	ck_assert_int_eq(srt_rdx_unlock(c, m.node, SRT_RDX_LOCK_TAIL, err, sizeof(err)), SRT_EINVAL);
	ck_assert_int_eq(srt_rdx_unlock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_unlock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err)), SRT_EINVAL);
	ck_assert_int_eq(srt_rdx_lock(c, m.node, 7, err, sizeof(err)), SRT_EINVAL);
	ck_assert_int_eq(srt_rdx_evict(c, C4, 0, NULL), 0);
	struct srt_rdx_stats s;
	srt_rdx_stats(c, &s);
	ck_assert_uint_eq(s.nodes, 0);
	done(c);
}
END_TEST

START_TEST(calls_after_finish_or_abort_are_errors)
{
	struct srt_rdx_cache *c = mk(NULL);
	int32_t t[40];
	seq(t, 40, 6);
	struct srt_rdx_req *r;
	uint64_t hit;
	ck_assert_int_eq(srt_rdx_req_start(c, t, 40, &r, &hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(r, t, 40, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_finish(r, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(r, t, 1, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "finished"), "%s", err);
	ck_assert_int_eq(srt_rdx_req_finish(r, NULL, err, sizeof(err)), SRT_EINVAL);
	ck_assert_int_eq(srt_rdx_req_abort(r, err, sizeof(err)), SRT_EINVAL);
	ck_assert_int_eq(srt_rdx_req_release_window(r, NULL, err, sizeof(err)), SRT_EINVAL);
	ck_assert_int_eq(srt_rdx_req_commit(r, NULL, err, sizeof(err)), SRT_EINVAL);
	void *pt[4];
	struct srt_page_table tab;
	ck_assert_int_eq(srt_rdx_req_page_table(r, 0, pt, 4, &tab), SRT_EINVAL);
	srt_rdx_req_free(r);
	ck_assert_int_eq(srt_rdx_req_start(c, t, 40, &r, &hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_abort(r, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(r, t, 1, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "aborted"), "%s", err);
	srt_rdx_req_free(r);
	done(c);
}
END_TEST

START_TEST(abort_frees_every_private_page_and_unlocks)
{
	struct srt_rdx_cache *c = mk(NULL);
	int32_t t[300];
	seq(t, 300, 7);
	run_req(c, t, 96);
	uint64_t before = A.live_pages;
	struct srt_rdx_req *r;
	uint64_t hit;
	ck_assert_int_eq(srt_rdx_req_start(c, t, 300, &r, &hit, err, sizeof(err)), 0);
	ck_assert_uint_eq(hit, 96);
	ck_assert_int_eq(srt_rdx_req_extend(r, t + 96, 204, err, sizeof(err)), 0);
	ck_assert_uint_gt(A.live_pages, before);
	ck_assert_int_eq(srt_rdx_req_abort(r, err, sizeof(err)), 0);
	ck_assert_uint_eq(A.live_pages, before);
	srt_rdx_req_free(r);
	ck_assert_int_eq(srt_rdx_evict(c, C4, 0, NULL), 0); /* nothing left locked */
	ck_assert_uint_eq(A.live_pages, 0);
	done(c);
}
END_TEST

START_TEST(release_window_frees_private_pages_behind_every_window)
{
	struct srt_rdx_cache *c = mk(NULL);
	int32_t t[200];
	seq(t, 200, 8);
	struct srt_rdx_req *r;
	uint64_t hit, rel;
	ck_assert_int_eq(srt_rdx_req_start(c, t, 200, &r, &hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(r, t, 200, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_release_window(r, &rel, err, sizeof(err)), 0);
	/* win (w 16): pages wholly before 184 -> 0..4; state (w 1): before 199 -> 0..5 */
	ck_assert_uint_eq(rel, 5 + 6);
	void *pt[7];
	struct srt_page_table tab;
	ck_assert_int_eq(srt_rdx_req_page_table(r, WIN, pt, 7, &tab), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_ptr_null(pt[i]);
	ck_assert_ptr_nonnull(pt[5]);
	ck_assert_int_eq(srt_rdx_req_page_table(r, C4, pt, 7, &tab), 0);
	for (int i = 0; i < 7; i++)
		ck_assert_ptr_nonnull(pt[i]);
	ck_assert_int_eq(srt_rdx_req_page_table(r, C4, pt, 6, &tab), SRT_EINVAL); /* too small */
	ck_assert_int_eq(srt_rdx_req_release_window(r, &rel, err, sizeof(err)), 0);
	ck_assert_uint_eq(rel, 0); /* idempotent */
	check_ok(c);
	ck_assert_int_eq(srt_rdx_req_finish(r, NULL, err, sizeof(err)), 0);
	srt_rdx_req_free(r);
	/* inserted with holes: the carry state of page 5 left its 1-token window at len 200 and
	 * the window pages 0..4 left theirs, so no page boundary is a usable hit end */
	struct srt_rdx_match m;
	srt_rdx_match(c, t, 192, &m);
	ck_assert_uint_eq(m.hit_tokens, 0);
	ck_assert_uint_eq(m.matched_tokens, 192);
	done(c);
}
END_TEST

START_TEST(committed_pages_are_protected_from_window_release)
{
	struct srt_rdx_cache *c = mk(NULL);
	int32_t t[400];
	seq(t, 400, 9);
	struct srt_rdx_req *r;
	uint64_t hit;
	ck_assert_int_eq(srt_rdx_req_start(c, t, 256, &r, &hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(r, t, 256, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_commit(r, NULL, err, sizeof(err)), 0); /* prefill done */
	for (int i = 256; i < 400; i++) {                                       /* decode */
		ck_assert_int_eq(srt_rdx_req_extend(r, t + i, 1, err, sizeof(err)), 0);
		ck_assert_int_eq(srt_rdx_req_release_window(r, NULL, err, sizeof(err)), 0);
	}
	check_ok(c);
	ck_assert_int_eq(srt_rdx_req_finish(r, NULL, err, sizeof(err)), 0);
	srt_rdx_req_free(r);
	struct srt_rdx_match m;
	for (uint64_t n = 32; n <= 256; n += 32) { /* every prompt page boundary is a hit end */
		srt_rdx_match(c, t, n, &m);
		ck_assert_uint_eq(m.hit_tokens, n);
	}
	srt_rdx_match(c, t, 320, &m); /* decode pages lost their window */
	ck_assert_uint_eq(m.hit_tokens, 256);
	done(c);
}
END_TEST

START_TEST(budget_evicts_the_least_recently_used_leaf)
{
	/* c4 pages are 2 * 8 * 16 = 256 B: room for 6 */
	uint64_t budgets[NPOOLS] = {SRT_RDX_UNBOUNDED, 6 * 256, SRT_RDX_UNBOUNDED, SRT_RDX_UNBOUNDED};
	struct srt_rdx_cache *c = mk(budgets);
	int32_t a[64], b[64], d[64], e[64];
	seq(a, 64, 10), seq(b, 64, 11), seq(d, 64, 12), seq(e, 64, 13);
	run_req(c, a, 64);
	run_req(c, b, 64);
	run_req(c, d, 64);
	ck_assert_uint_eq(run_req(c, a, 64), 64); /* a is now the most recent; b the oldest */
	run_req(c, e, 64);                        /* needs 2 pages: b goes */
	struct srt_rdx_pool_stats st;
	srt_rdx_pool_stats(c, C4, &st);
	ck_assert_uint_eq(st.evicted_pages, 2);
	ck_assert_uint_le(st.peak_bytes, st.budget);
	struct srt_rdx_match m;
	srt_rdx_match(c, b, 64, &m);
	ck_assert_uint_eq(m.hit_tokens, 0);
	srt_rdx_match(c, a, 64, &m);
	ck_assert_uint_eq(m.hit_tokens, 64);
	srt_rdx_match(c, d, 64, &m);
	ck_assert_uint_eq(m.hit_tokens, 64);
	done(c);
}
END_TEST

START_TEST(a_budget_below_one_page_is_refused_saying_so)
{
	uint64_t budgets[NPOOLS] = {SRT_RDX_UNBOUNDED, 1, SRT_RDX_UNBOUNDED, SRT_RDX_UNBOUNDED};
	struct srt_rdx_cache *c = mk(budgets);
	int32_t t[32];
	seq(t, 32, 15);
	struct srt_rdx_req *r;
	uint64_t hit;
	ck_assert_int_eq(srt_rdx_req_start(c, t, 32, &r, &hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(r, t, 32, err, sizeof(err)), SRT_ENOMEM);
	/* not "locked by running requests": nothing is in use, the budget cannot hold a page */
	ck_assert_msg(strstr(err, "'c4'") && strstr(err, "smaller than one page"), "%s", err);
	ck_assert_uint_eq(srt_rdx_req_len(r), 0);
	ck_assert_int_eq(srt_rdx_req_abort(r, err, sizeof(err)), 0);
	srt_rdx_req_free(r);
	done(c);
}
END_TEST

START_TEST(allocation_over_a_locked_budget_fails_cleanly)
{
	uint64_t budgets[NPOOLS] = {SRT_RDX_UNBOUNDED, 2 * 256, SRT_RDX_UNBOUNDED, SRT_RDX_UNBOUNDED};
	struct srt_rdx_cache *c = mk(budgets);
	int32_t t[96];
	seq(t, 96, 14);
	struct srt_rdx_req *r;
	uint64_t hit;
	ck_assert_int_eq(srt_rdx_req_start(c, t, 96, &r, &hit, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_extend(r, t, 64, err, sizeof(err)), 0);
	uint64_t live = A.live_pages;
	ck_assert_int_eq(srt_rdx_req_extend(r, t + 64, 32, err, sizeof(err)), SRT_ENOMEM);
	ck_assert_msg(strstr(err, "'c4'") && strstr(err, "budget"), "%s", err);
	ck_assert_uint_eq(srt_rdx_req_len(r), 64); /* all or nothing */
	ck_assert_uint_eq(A.live_pages, live);
	check_ok(c);
	ck_assert_int_eq(srt_rdx_req_abort(r, err, sizeof(err)), 0);
	srt_rdx_req_free(r);
	done(c);
}
END_TEST

static int drops[2];
static void on_drop(void *ctx, uint32_t pool, uint64_t vpage, const int32_t *tokens,
		    const struct srt_rdx_loc *loc, size_t bytes, int why)
{
	(void)ctx, (void)pool, (void)vpage, (void)tokens, (void)bytes;
	ck_assert_int_eq(loc->tier, SRT_RDX_L1);
	ck_assert(tu_is_live(loc->addr)); /* still readable: the tier manager can copy it */
	drops[why]++;
}

START_TEST(drop_hook_sees_every_evicted_tree_page_before_it_is_freed)
{
	struct srt_pool_decl d[2] = {tu_pool("win", 1, SRT_RETAIN_TAIL, 16, 8, 1),
				     tu_pool("c4", 4, SRT_RETAIN_ALL, 0, 8, 1)};
	memset(&A, 0, sizeof(A));
	AL = tu_allocator(&A);
	struct srt_rdx_hooks hooks = {NULL, on_drop};
	struct srt_rdx_config cfg = {.page_tokens = P, .alloc = &AL, .hooks = &hooks};
	struct srt_rdx_cache *c;
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, d, 2, &c, err, sizeof(err)), 0);
	int32_t t[128];
	seq(t, 128, 15);
	run_req(c, t, 64);
	run_req(c, t, 128);
	struct srt_rdx_match m;
	srt_rdx_match(c, t, 128, &m);
	srt_rdx_lock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err));
	srt_rdx_evict(c, 0, 0, NULL); /* tombstones both nodes' window pages */
	ck_assert_int_eq(drops[SRT_RDX_DROP_TOMBSTONE], 4);
	srt_rdx_unlock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err));
	srt_rdx_evict(c, 1, 0, NULL);
	ck_assert_int_eq(drops[SRT_RDX_DROP_DELETE], 4); /* the c4 pages */
	done(c);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("radix");
	TCase *tc = tcase_create("unit");
	tcase_add_test(tc, create_refuses_page_size_not_multiple_of_a_ratio);
	tcase_add_test(tc, page_bytes_follow_the_declaration_for_any_ratio);
	tcase_add_test(tc, miss_then_whole_pages_hit_after_finish);
	tcase_add_test(tc, commit_returns_the_already_cached_length);
	tcase_add_test(tc, partial_match_splits_a_node);
	tcase_add_test(tc, tombstoned_window_keeps_compressed_pages_matchable);
	tcase_add_test(tc, window_pressure_drops_interior_pages_before_node_ends);
	tcase_add_test(tc, unlock_without_lock_is_an_error);
	tcase_add_test(tc, calls_after_finish_or_abort_are_errors);
	tcase_add_test(tc, abort_frees_every_private_page_and_unlocks);
	tcase_add_test(tc, release_window_frees_private_pages_behind_every_window);
	tcase_add_test(tc, committed_pages_are_protected_from_window_release);
	tcase_add_test(tc, budget_evicts_the_least_recently_used_leaf);
	tcase_add_test(tc, allocation_over_a_locked_budget_fails_cleanly);
	tcase_add_test(tc, a_budget_below_one_page_is_refused_saying_so);
	tcase_add_test(tc, drop_hook_sees_every_evicted_tree_page_before_it_is_freed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
