/*
 * Randomized property test of ShadowRadix against a brute-force model of the same rules.
 *
 * Sequences are paths of page "choices"; page v of a path has the identity id_v = H(id_{v-1},
 * choice_v) and its first two token ids encode id_v, so a page's ids name its whole prefix. The
 * model is a flat table id -> (vpage, parent id, presence per pool) mirroring what the tree
 * holds: rows are added by commits (computed by the model itself from the request's pages) and
 * changed only by drop events the cache reports through its hook. After every operation:
 *   - start/match hits equal the model's brute-force longest valid page boundary;
 *   - commit's cached length equals the model's;
 *   - a dropped page was never locked (ALL path or TAIL window of a live request), and a
 *     deleted page had no children in the model;
 *   - every page in a live request's page tables is live memory holding that page's identity,
 *     and no page a request needs is missing;
 *   - each pool's byte count equals the allocator's own count, and no budget is exceeded;
 *   - srt_rdx_cache_check passes.
 * At the end every request is finished or aborted, the cache destroyed, and nothing leaks.
 *
 * Seed: fixed in CI; SRT_PROPERTY_SEED=random or =<number> for local runs (printed).
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "radix/radix.h"
#include "test_util.h"

#define P 128
#define MAXPAGES 7
#define MAXREQ 5
#define MAXROWS 4096

enum { NPOOLS = 7 };
static struct srt_pool_decl decls[NPOOLS];

static uint64_t rng;
static uint64_t rnd(void)
{
	rng = tu_mix(rng);
	return rng;
}
static uint64_t rndn(uint64_t n)
{
	return rnd() % n;
}

struct row {
	uint64_t id, parent;
	uint64_t vpage;
	int used;
	uint8_t present[NPOOLS];
};
static struct row rows[MAXROWS];
static int nrows;

static struct row *row_find(uint64_t id)
{
	for (int i = 0; i < nrows; i++)
		if (rows[i].used && rows[i].id == id)
			return &rows[i];
	return NULL;
}

struct mreq {
	struct srt_rdx_req *r;
	uint64_t ids[MAXPAGES + 1]; /* page identities of the whole path */
	uint64_t max_len;           /* tokens the request will reach */
	uint64_t len, e;            /* tokens so far; tree pages */
	uint64_t rel[NPOOLS];
	uint8_t present[MAXPAGES + 1][NPOOLS]; /* private pages [e, ..) */
	int tail_locked;
};
static struct mreq reqs[MAXREQ];
static int nreqs;

static struct tu_alloc A;
static struct srt_rdx_cache *C;
static uint32_t max_tail_pages, max_tail_tokens;
static char err[512];
static uint64_t n_hits, n_tomb, n_del;

static int32_t token_at(const uint64_t *ids, uint64_t q)
{
	uint64_t id = ids[q / P], off = q % P;
	if (off == 0)
		return (int32_t)(id & 0x7fffffff);
	if (off == 1)
		return (int32_t)((id >> 31) & 0x7fffffff);
	return (int32_t)(tu_mix(id + off) & 0x7fffffff);
}
static void make_tokens(const uint64_t *ids, uint64_t from, uint64_t n, int32_t *out)
{
	for (uint64_t i = 0; i < n; i++)
		out[i] = token_at(ids, from + i);
}
static uint64_t id_of_tokens(const int32_t *t)
{
	return (uint64_t)(uint32_t)t[0] | ((uint64_t)(uint32_t)t[1] << 31);
}
static void random_path(uint64_t *ids)
{
	uint64_t id = 0x1234;
	for (int v = 0; v <= MAXPAGES; v++) {
		uint64_t choice = rndn(8) < 6 ? 0 : 1 + rndn(3); /* mostly shared prefixes */
		id = tu_mix(id * 31 + choice + 1) & ((1ull << 62) - 1);
		ids[v] = id;
	}
}

/* Brute force: longest t (pages) such that ALL pools hold [0,t) and TAIL pools their window. */
static void model_match(const uint64_t *ids, uint64_t npages, uint64_t *hit, uint64_t *matched)
{
	const struct row *path[MAXPAGES + 1];
	uint64_t m = 0;
	while (m < npages) {
		const struct row *rw = row_find(ids[m]);
		if (!rw)
			break;
		path[m++] = rw;
	}
	*hit = 0;
	for (uint64_t t = 1; t <= m; t++) {
		int ok = 1;
		for (uint32_t p = 0; p < NPOOLS && ok; p++) {
			struct srt_rdx_pool_stats st;
			srt_rdx_pool_stats(C, p, &st);
			uint64_t lo = st.retention == SRT_RETAIN_ALL ? 0
				      : (t > st.tail_pages ? t - st.tail_pages : 0);
			for (uint64_t v = lo; v < t && ok; v++)
				ok = path[v]->present[p];
		}
		if (ok)
			*hit = t;
	}
	/* the cache stops walking at the first page with an ALL hole; no such rows exist */
	*matched = m;
}

static void on_drop(void *ctx, uint32_t pool, uint64_t vpage, const int32_t *tokens,
		    const struct srt_rdx_loc *loc, size_t bytes, int why)
{
	(void)ctx, (void)bytes;
	uint64_t id = id_of_tokens(tokens);
	struct row *rw = row_find(id);
	ck_assert_msg(rw, "drop of a page the model does not hold (vpage %" PRIu64 ")", vpage);
	ck_assert_uint_eq(rw->vpage, vpage);
	ck_assert_msg(rw->present[pool], "drop of an absent page");
	ck_assert(tu_is_live(loc->addr));
	/* never a locked page */
	for (int i = 0; i < nreqs; i++) {
		const struct mreq *q = &reqs[i];
		if (vpage < q->e && q->ids[vpage] == id) {
			ck_assert_msg(decls[pool].retention == SRT_RETAIN_TAIL && why == SRT_RDX_DROP_TOMBSTONE,
				      "pool %u page %" PRIu64 " dropped under an ALL lock", pool, vpage);
			ck_assert_msg(!(q->tail_locked && vpage + max_tail_pages >= q->e),
				      "pool %u page %" PRIu64 " dropped under a TAIL lock", pool, vpage);
		}
	}
	rw->present[pool] = 0;
	if (why == SRT_RDX_DROP_TOMBSTONE) {
		ck_assert_int_eq(decls[pool].retention, SRT_RETAIN_TAIL);
		n_tomb++;
	} else {
		int any = 0;
		for (uint32_t p = 0; p < NPOOLS; p++)
			any |= rw->present[p];
		if (!any) { /* the node's last pool: the page leaves the tree */
			for (int i = 0; i < nrows; i++)
				ck_assert_msg(!(rows[i].used && rows[i].parent == id),
					      "deleted a page that has children");
			rw->used = 0;
			n_del++;
		}
	}
}

static void model_commit(struct mreq *q, uint64_t *cached)
{
	uint64_t target = q->len / P, v = q->e;
	int fresh = 0;
	*cached = q->e;
	for (; v < target; v++) {
		struct row *rw = fresh ? NULL : row_find(q->ids[v]);
		uint8_t *pr = q->present[v - q->e];
		if (rw) {
			*cached = v + 1;
			for (uint32_t p = 0; p < NPOOLS; p++)
				if (!rw->present[p] && pr[p])
					rw->present[p] = 1;
			continue;
		}
		fresh = 1;
		int slot = -1;
		for (int i = 0; i < nrows && slot < 0; i++)
			if (!rows[i].used)
				slot = i;
		if (slot < 0) {
			ck_assert_int_lt(nrows, MAXROWS);
			slot = nrows++;
		}
		rw = &rows[slot];
		rw->used = 1;
		rw->id = q->ids[v];
		rw->parent = v ? q->ids[v - 1] : 0;
		rw->vpage = v;
		memcpy(rw->present, pr, NPOOLS);
	}
	uint64_t moved = target > q->e ? target - q->e : 0;
	memmove(q->present, q->present + moved, (MAXPAGES + 1 - moved) * NPOOLS);
	if (target > q->e)
		q->e = target;
	q->tail_locked = q->e && q->e * P + max_tail_tokens > q->len;
}

static uint64_t expect_id(uint32_t p, uint64_t id)
{
	return tu_mix(id ^ (p + 1) * 0x51ed27u);
}

/* The "kernel": write each new page's identity into it. */
static void write_pages(struct mreq *q, uint64_t from_page, uint64_t to_page)
{
	void *buf[MAXPAGES + 1];
	struct srt_page_table t;
	for (uint32_t p = 0; p < NPOOLS; p++) {
		ck_assert_int_eq(srt_rdx_req_page_table(q->r, p, buf, MAXPAGES + 1, &t), 0);
		for (uint64_t v = from_page; v < to_page; v++) {
			ck_assert_ptr_nonnull(buf[v]);
			uint64_t x = expect_id(p, q->ids[v]);
			memcpy(buf[v], &x, sizeof(x));
		}
	}
}

static void verify(void)
{
	int rc = srt_rdx_cache_check(C, err, sizeof(err));
	ck_assert_msg(rc == 0, "cache check: %s", err);
	ck_assert_uint_eq(A.errors, 0);
	for (uint32_t p = 0; p < NPOOLS; p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(C, p, &st);
		ck_assert_uint_eq(st.bytes, A.live_bytes[p]);
		ck_assert_uint_le(st.bytes, st.budget);
	}
	for (int i = 0; i < nreqs; i++) {
		struct mreq *q = &reqs[i];
		ck_assert_uint_eq(srt_rdx_req_len(q->r), q->len);
		ck_assert_uint_eq(srt_rdx_req_tree_tokens(q->r), q->e * P);
		void *buf[MAXPAGES + 1];
		struct srt_page_table t;
		uint64_t n = (q->len + P - 1) / P;
		for (uint32_t p = 0; p < NPOOLS; p++) {
			ck_assert_int_eq(srt_rdx_req_page_table(q->r, p, buf, MAXPAGES + 1, &t), 0);
			ck_assert_uint_eq(t.n_pages, n);
			for (uint64_t v = 0; v < n; v++) {
				int needed = decls[p].retention == SRT_RETAIN_ALL ||
					     (v + 1) * P + decls[p].tail_tokens > q->len;
				if (!buf[v]) {
					ck_assert_msg(!needed, "req %d pool %u page %" PRIu64
						      " missing (len %" PRIu64 ")", i, p, v, q->len);
					continue;
				}
				ck_assert_msg(tu_is_live(buf[v]), "page table holds a freed page");
				uint64_t x;
				memcpy(&x, buf[v], sizeof(x));
				ck_assert_msg(x == expect_id(p, q->ids[v]),
					      "req %d pool %u page %" PRIu64 " holds other data", i, p, v);
			}
		}
	}
}

static void op_start(void)
{
	if (nreqs == MAXREQ)
		return;
	struct mreq *q = &reqs[nreqs];
	memset(q, 0, sizeof(*q));
	random_path(q->ids);
	q->max_len = 1 + rndn(MAXPAGES * P);
	uint64_t prompt = 1 + rndn(q->max_len);
	int32_t tok[(MAXPAGES + 1) * P];
	make_tokens(q->ids, 0, prompt, tok);
	uint64_t want, matched, hit;
	model_match(q->ids, prompt / P, &want, &matched);
	ck_assert_int_eq(srt_rdx_req_start(C, tok, prompt, &q->r, &hit, err, sizeof(err)), 0);
	ck_assert_uint_eq(hit, want * P);
	n_hits += hit;
	q->len = hit;
	q->e = hit / P;
	q->tail_locked = q->e && q->e * P + max_tail_tokens > q->len;
	nreqs++;
}

static void op_extend(struct mreq *q)
{
	if (q->len >= q->max_len)
		return;
	uint64_t n = 1 + rndn(rndn(2) ? 4 : 2 * P);
	if (q->len + n > q->max_len)
		n = q->max_len - q->len;
	int32_t tok[(MAXPAGES + 1) * P];
	make_tokens(q->ids, q->len, n, tok);
	uint64_t old_pages = (q->len + P - 1) / P;
	int rc = srt_rdx_req_extend(q->r, tok, n, err, sizeof(err));
	if (rc == SRT_ENOMEM)
		return; /* all or nothing: the model is unchanged (drops came through the hook) */
	ck_assert_msg(rc == 0, "%s", err);
	q->len += n;
	uint64_t new_pages = (q->len + P - 1) / P;
	for (uint64_t v = old_pages; v < new_pages; v++)
		memset(q->present[v - q->e], 1, NPOOLS);
	write_pages(q, old_pages, new_pages);
}

static void op_release(struct mreq *q)
{
	uint64_t rel;
	ck_assert_int_eq(srt_rdx_req_release_window(q->r, &rel, err, sizeof(err)), 0);
	uint64_t want = 0, n = (q->len + P - 1) / P;
	for (uint32_t p = 0; p < NPOOLS; p++) {
		if (decls[p].retention != SRT_RETAIN_TAIL || q->len < decls[p].tail_tokens)
			continue;
		uint64_t lim = (q->len - decls[p].tail_tokens) / P;
		for (uint64_t v = q->e; v < lim && v < n; v++)
			if (q->present[v - q->e][p]) {
				q->present[v - q->e][p] = 0;
				want++;
			}
	}
	ck_assert_uint_eq(rel, want);
	q->tail_locked = q->tail_locked && q->e * P + max_tail_tokens > q->len;
}

static void op_commit(struct mreq *q)
{
	uint64_t cached, want;
	model_commit(q, &want);
	ck_assert_int_eq(srt_rdx_req_commit(q->r, &cached, err, sizeof(err)), 0);
	ck_assert_uint_eq(cached, want * P);
}

static void drop_req(int i)
{
	srt_rdx_req_free(reqs[i].r);
	reqs[i] = reqs[--nreqs];
}

static void op_finish(int i)
{
	struct mreq *q = &reqs[i];
	uint64_t cached, want;
	model_commit(q, &want);
	ck_assert_int_eq(srt_rdx_req_finish(q->r, &cached, err, sizeof(err)), 0);
	ck_assert_uint_eq(cached, want * P);
	drop_req(i);
}

static void op_abort(int i)
{
	ck_assert_int_eq(srt_rdx_req_abort(reqs[i].r, err, sizeof(err)), 0);
	drop_req(i);
}

static void op_probe(void)
{
	uint64_t ids[MAXPAGES + 1], want, matched;
	random_path(ids);
	uint64_t n = rndn(MAXPAGES + 1) * P;
	int32_t tok[(MAXPAGES + 1) * P];
	make_tokens(ids, 0, n, tok);
	model_match(ids, n / P, &want, &matched);
	struct srt_rdx_match m;
	ck_assert_int_eq(srt_rdx_match(C, tok, n, &m), 0);
	ck_assert_uint_eq(m.hit_tokens, want * P);
	ck_assert_uint_eq(m.matched_tokens, matched * P);
}

static void op_evict(void)
{
	uint32_t p = (uint32_t)rndn(NPOOLS);
	struct srt_rdx_pool_stats st;
	srt_rdx_pool_stats(C, p, &st);
	srt_rdx_evict(C, p, st.bytes / 2, NULL);
}

static void run_config(uint64_t seed, int steps)
{
	rng = seed;
	decls[0] = tu_pool("swa", 1, SRT_RETAIN_TAIL, 1 + (uint32_t)rndn(P), 8, 1);
	decls[1] = tu_pool("c4", 4, SRT_RETAIN_ALL, 0, 8, 2);
	decls[2] = tu_pool("c16", 16, SRT_RETAIN_ALL, 0, 8, 1);
	decls[3] = tu_pool("c128", 128, SRT_RETAIN_ALL, 0, 16, 3);
	decls[4] = tu_pool("state", SRT_RATIO_PAGE, SRT_RETAIN_TAIL, 1, 8, 2);
	decls[5] = tu_pool("long_win", 1, SRT_RETAIN_TAIL, P + 1 + (uint32_t)rndn(2 * P), 8, 1);
	decls[6] = tu_pool("c4_all_page", SRT_RATIO_PAGE, SRT_RETAIN_ALL, 0, 8, 1);
	uint64_t budgets[NPOOLS];
	for (uint32_t p = 0; p < NPOOLS; p++) {
		uint64_t pb = (uint64_t)decls[p].n_layers * (P / (decls[p].ratio ? decls[p].ratio : P)) *
			      decls[p].entry_bytes;
		/* TAIL pools tighter, so tombstoning happens as often as deletion */
		uint64_t room = decls[p].retention == SRT_RETAIN_TAIL ? 6 + rndn(10) : 12 + rndn(30);
		budgets[p] = rndn(5) == 0 ? SRT_RDX_UNBOUNDED : pb * room;
	}
	memset(&A, 0, sizeof(A));
	memset(rows, 0, sizeof(rows));
	nrows = nreqs = 0;
	struct srt_rdx_allocator al = tu_allocator(&A);
	struct srt_rdx_hooks hooks = {NULL, on_drop};
	struct srt_rdx_config cfg = {.page_tokens = P, .budgets = budgets, .alloc = &al,
				     .hooks = &hooks};
	ck_assert_int_eq(srt_rdx_cache_create(&cfg, decls, NPOOLS, &C, err, sizeof(err)), 0);
	max_tail_pages = max_tail_tokens = 0;
	for (uint32_t p = 0; p < NPOOLS; p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(C, p, &st);
		if (st.tail_pages > max_tail_pages)
			max_tail_pages = st.tail_pages;
		if (st.tail_tokens > max_tail_tokens)
			max_tail_tokens = st.tail_tokens;
	}
	for (int s = 0; s < steps; s++) {
		uint64_t k = rndn(100);
		int i = nreqs ? (int)rndn(nreqs) : -1;
		if (k < 15 || i < 0)
			op_start();
		else if (k < 50)
			op_extend(&reqs[i]);
		else if (k < 62)
			op_release(&reqs[i]);
		else if (k < 70)
			op_commit(&reqs[i]);
		else if (k < 82) {
			if (reqs[i].len < reqs[i].max_len && rndn(2))
				op_extend(&reqs[i]);
			else
				op_finish(i);
		} else if (k < 86)
			op_abort(i);
		else if (k < 95)
			op_probe();
		else
			op_evict();
		verify();
	}
	while (nreqs)
		rndn(2) ? op_finish(nreqs - 1) : op_abort(nreqs - 1);
	verify();
	srt_rdx_cache_destroy(C);
	C = NULL;
	ck_assert_uint_eq(A.live_pages, 0);
	for (uint32_t p = 0; p < NPOOLS; p++)
		ck_assert_uint_eq(A.live_bytes[p], 0);
	ck_assert_uint_eq(A.errors, 0);
	tu_alloc_done(&A);
}

static uint64_t base_seed(void)
{
	const char *s = getenv("SRT_PROPERTY_SEED");
	uint64_t seed = 20261129;
	if (s && !strcmp(s, "random")) {
		/* Nanoseconds and the (forked) process id: two runs in the same second differ. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
		       ((uint64_t)getpid() << 32);
	}
	else if (s && *s)
		seed = strtoull(s, NULL, 0);
	return seed;
}

START_TEST(random_operations_agree_with_the_brute_force_model)
{
	/* One call: with "random" each call gives another seed, and the printed one must be the
	 * one that reproduces this run. */
	uint64_t base = base_seed();
	uint64_t seed = base + (uint64_t)_i * 7919;
	printf("radix property: seed %" PRIu64 " (SRT_PROPERTY_SEED=%" PRIu64 ", config %d)\n",
	       seed, base, _i);
	fflush(stdout);
	run_config(seed, 5000);
	printf("radix property: config %d: %" PRIu64 " hit tokens, %" PRIu64 " tombstoned, %" PRIu64
	       " deleted pages\n", _i, n_hits, n_tomb, n_del);
	ck_assert_uint_gt(n_hits, 0); /* the workload really shares prefixes */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("radix_property");
	TCase *tc = tcase_create("property");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, random_operations_agree_with_the_brute_force_model, 0, 4);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
