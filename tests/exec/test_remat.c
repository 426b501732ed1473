/*
 * Window rematerialization (check suite `remat`) on the synthetic tiny and tiny-pro checkpoints
 * with the real plugins:
 *
 *  - a prefix whose window / carry-state (TAIL) pages were all dropped, only its compressed
 *    (ALL) pages cached, is resumed at the branch point by rebuilding the trapezoid; the logits
 *    of the rest of the prompt and of decode steps after it are bitwise those computed from
 *    scratch, and the rebuilt window and carry pages are bitwise the pages of a computation
 *    from position 0 (tiny: SWA + CSA + HCA layers; tiny-pro: HCA first layers);
 *  - the same with the resumed prompt prefilled in odd chunks and in one batch with a second
 *    rematerialized sequence;
 *  - the executor's choice: with window pages cached one page before the branch point it
 *    resumes there (cheaper than the trapezoid), with none it rematerializes; with
 *    rematerialization off it falls back to a computation from 0;
 *  - a new engine resumes a branch point from an L3 that holds window pages only at resume
 *    points; an attention plugin built for ABI 1.0 loads and gets no rematerialized hit;
 *  - a property test: random prompts, random branch points, windows dropped or kept at random,
 *    random chunk sizes: always bitwise equal to scratch.
 * Case 'small' (a 512-token prefix) is what sanitizer builds run.
 *
 * Every comparison is bitwise (memcmp of the float logits and of the page bytes).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/plugin.h>

#include "check/diverge.h"
#include "exec/engine.h"
#include "radix/radix.h"
#include "radix/remat.h"
#include "tier/manager.h"

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

static struct srt_engine *open_engine(const char *preset, int chunk, int no_remat)
{
	char dir[4096], err[2048];
	snprintf(dir, sizeof(dir), "%s/models/%s", env_or("SRT_BUILD_DIR", "."), preset);
	setenv("SHADOWRT_PLUGIN_PATH", env_or("SRT_PLUGIN_DIR", "lib/shadowrt/plugins"), 1);
	struct srt_engine_opts o = {.model = dir, .threads = 2, .profile = SRT_PROFILE_REFERENCE,
				    .chunk = chunk, .quiet = 1, .no_remat = no_remat};
	struct srt_engine *e = NULL;
	int rc = srt_engine_open(&o, &e, err, sizeof(err));
	ck_assert_msg(rc == 0, "engine open on %s: %s (%d)", dir, err, rc);
	return e;
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
	return *s;
}

/* deterministic prompt: ids in [2, vocab) */
static int32_t *make_prompt(uint64_t n, int32_t vocab, uint64_t seed)
{
	int32_t *t = malloc(sizeof(int32_t) * n);
	ck_assert_ptr_nonnull(t);
	srt_div_prompt(t, n, vocab, seed); /* core/check/diverge.h: the same xorshift */
	return t;
}

static void assert_same(const float *a, const float *b, size_t n, size_t V, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)))
			ck_abort_msg("%s: first difference at float %zu (row %zu): %.9g vs %.9g", what, i,
				     i / V, a[i], b[i]);
}

static void finish_prompt(struct srt_engine *e, const int32_t *a, uint64_t na, int use_cache)
{
	char err[2048];
	struct srt_seq *s;
	ck_assert_msg(!srt_engine_seq_start(e, a, na, use_cache, &s, NULL, err, sizeof(err)), "%s",
		      err);
	ck_assert_msg(!srt_engine_prefill(e, s, NULL, 0, err, sizeof(err)), "%s", err);
	ck_assert_msg(!srt_engine_seq_finish(s, NULL, err, sizeof(err)), "%s", err);
	srt_engine_seq_free(s);
}

/*
 * Drop every TAIL-pool page of the tree (windows, carry state) except those before the node
 * ending at `keep` tokens (0 = none): the nodes on the path of t[0..n) are ALL-locked so
 * that they are tombstoned, not deleted. Returns the bytes dropped.
 */
static uint64_t drop_windows(struct srt_engine *e, const int32_t *t, uint64_t n, uint64_t keep)
{
	char err[512];
	struct srt_rdx_cache *c = srt_engine_cache(e);
	struct srt_rdx_match m, mk = {0};
	ck_assert_int_eq(srt_rdx_match(c, t, n, &m), 0);
	struct srt_rdx_node *node = m.node;
	ck_assert_int_eq(srt_rdx_lock(c, node, SRT_RDX_LOCK_ALL, err, sizeof(err)), 0);
	if (keep) {
		ck_assert_int_eq(srt_rdx_match(c, t, keep, &mk), 0);
		ck_assert_uint_eq(mk.hit_tokens, keep);
		ck_assert_int_eq(srt_rdx_lock(c, mk.node, SRT_RDX_LOCK_TAIL, err, sizeof(err)), 0);
	}
	uint64_t dropped = 0;
	for (uint32_t p = 0; p < srt_rdx_pool_count(c); p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(c, p, &st);
		if (st.retention != SRT_RETAIN_TAIL)
			continue;
		uint64_t freed = 0;
		srt_rdx_evict(c, p, 0, &freed);
		dropped += freed;
	}
	if (keep)
		ck_assert_int_eq(srt_rdx_unlock(c, mk.node, SRT_RDX_LOCK_TAIL, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_unlock(c, node, SRT_RDX_LOCK_ALL, err, sizeof(err)), 0);
	ck_assert_msg(!srt_rdx_cache_check(c, err, sizeof(err)), "%s", err);
	return dropped;
}

/* logits [n - start][V] of every position from start on, and 3 decode steps [3][V] */
struct run {
	float *lg, *dl;
	uint64_t hit, remat, remat_cost;
};

static struct run run_seq(struct srt_engine *e, const int32_t *b, uint64_t nb, int use_cache,
			  int chunk)
{
	char err[2048];
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	struct run r = {0};
	struct srt_seq *s;
	ck_assert_msg(!srt_engine_seq_start(e, b, nb, use_cache, &s, &r.hit, err, sizeof(err)),
		      "%s", err);
	r.remat = srt_seq_remat(s, &r.remat_cost);
	r.lg = malloc(sizeof(float) * V * (nb - r.hit));
	r.dl = malloc(sizeof(float) * V * 3);
	ck_assert(r.lg && r.dl);
	int old = srt_engine_chunk(e);
	srt_engine_set_chunk(e, chunk);
	ck_assert_msg(!srt_engine_prefill(e, s, r.lg, 1, err, sizeof(err)), "%s", err);
	srt_engine_set_chunk(e, old);
	for (int k = 0; k < 3; k++)
		ck_assert_msg(!srt_engine_decode(e, &s, 1, &b[k], r.dl + (size_t)k * V, err,
						 sizeof(err)), "%s", err);
	ck_assert_msg(!srt_engine_seq_finish(s, NULL, err, sizeof(err)), "%s", err);
	srt_engine_seq_free(s);
	return r;
}

static void run_free(struct run *r)
{
	free(r->lg), free(r->dl);
}

/* the resumed run equals the scratch run (from 0) bitwise */
static void assert_run_same(const struct run *res, const struct run *full, uint64_t nb, size_t V,
			    const char *what)
{
	char msg[160];
	snprintf(msg, sizeof(msg), "%s: prompt logits, resumed at %llu (remat %llu) vs scratch",
		 what, (unsigned long long)res->hit, (unsigned long long)res->remat);
	assert_same(res->lg, full->lg + res->hit * V, V * (nb - res->hit), V, msg);
	snprintf(msg, sizeof(msg), "%s: decode after the resume vs scratch", what);
	assert_same(res->dl, full->dl, V * 3, V, msg);
}

/*
 * Compare the TAIL-pool pages of the cached prefix t[0..upto) in two engines' caches bytewise,
 * for the pages before `upto` (both caches must hold them in L1).
 */
static void assert_tail_pages_same(struct srt_engine *a, struct srt_engine *b, const int32_t *t,
				   uint64_t upto)
{
	char err[512];
	struct srt_rdx_cache *ca = srt_engine_cache(a), *cb = srt_engine_cache(b);
	uint32_t P = srt_rdx_page_tokens(ca);
	struct srt_rdx_req *ra, *rb;
	uint64_t ha, hb;
	ck_assert_int_eq(srt_rdx_req_start(ca, t, upto, &ra, &ha, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_rdx_req_start(cb, t, upto, &rb, &hb, err, sizeof(err)), 0);
	ck_assert_uint_eq(ha, upto);
	ck_assert_uint_eq(hb, upto);
	uint32_t n = (uint32_t)(upto / P), compared = 0;
	void **ba = calloc(n, sizeof(void *)), **bb = calloc(n, sizeof(void *));
	for (uint32_t p = 0; p < srt_rdx_pool_count(ca); p++) {
		struct srt_rdx_pool_stats st;
		struct srt_page_table pa, pb;
		srt_rdx_pool_stats(ca, p, &st);
		if (st.retention != SRT_RETAIN_TAIL)
			continue;
		ck_assert_int_eq(srt_rdx_req_page_table(ra, p, ba, n, &pa), 0);
		ck_assert_int_eq(srt_rdx_req_page_table(rb, p, bb, n, &pb), 0);
		for (uint32_t v = n - st.tail_pages; v < n; v++) {
			ck_assert_msg(ba[v] && bb[v], "pool %s page %u missing", st.name, v);
			ck_assert_msg(!memcmp(ba[v], bb[v], st.page_bytes),
				      "pool %s: rebuilt page %u differs from the computed one", st.name,
				      v);
			compared++;
		}
	}
	ck_assert_uint_gt(compared, 0);
	free(ba), free(bb);
	srt_rdx_req_free(ra);
	srt_rdx_req_free(rb);
}

/* --- the branch point -------------------------------------------------------------------- */

#define NA 1300 /* the cached prompt */
#define NB 1200 /* the resumed prompt; shares BR tokens with a */
#define BR 1100 /* branch point: the whole pages before it (1024) are the hit */

static void branch_point_without_windows(const char *preset)
{
	struct srt_engine *e = open_engine(preset, 256, 0);
	struct srt_engine *fresh = open_engine(preset, 256, 0);
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	int32_t *a = make_prompt(NA, (int32_t)V, 31), *b = make_prompt(NB, (int32_t)V, 32);
	memcpy(b, a, sizeof(int32_t) * BR);
	finish_prompt(e, a, NA, 1);
	ck_assert_uint_gt(drop_windows(e, a, NA, 0), 0);
	struct srt_rdx_match m;
	ck_assert_int_eq(srt_rdx_match(srt_engine_cache(e), b, NB - 1, &m), 0);
	ck_assert_uint_eq(m.hit_tokens, 0); /* no window anywhere: no ordinary hit */
	ck_assert_uint_eq(m.all_tokens, 1024);

	struct run res = run_seq(e, b, NB, 1, 256), full = run_seq(fresh, b, NB, 0, 256);
	fprintf(stderr, "[remat] %s: resumed at %llu by rematerialization, %llu token-layers "
		"(computing the prefix: %llu)\n", preset, (unsigned long long)res.hit,
		(unsigned long long)res.remat_cost,
		(unsigned long long)(1024 * (uint64_t)srt_engine_model(e)->num_hidden_layers));
	ck_assert_uint_eq(res.hit, 1024);
	ck_assert_uint_eq(res.remat, 1024);
	ck_assert_uint_lt(res.remat_cost,
			  1024 * (uint64_t)srt_engine_model(e)->num_hidden_layers);
	assert_run_same(&res, &full, NB, V, preset);
	/* the rebuilt window and carry pages joined the cache: bitwise the computed ones */
	assert_tail_pages_same(e, fresh, b, 1024);
	run_free(&res), run_free(&full);
	free(a), free(b);
	srt_engine_close(e);
	srt_engine_close(fresh);
}

START_TEST(resume_at_a_branch_point_without_window_pages_equals_scratch_bitwise_tiny)
{
	branch_point_without_windows("tiny");
}
END_TEST

START_TEST(resume_at_a_branch_point_without_window_pages_equals_scratch_bitwise_tiny_pro)
{
	branch_point_without_windows("tiny-pro");
}
END_TEST

/* chunks of 7 / 100 tokens after the resume, and a batch of two rematerialized sequences */
START_TEST(rematerialized_resumes_prefilled_in_chunks_and_in_a_batch_equal_scratch_bitwise)
{
	char err[2048];
	struct srt_engine *e = open_engine("tiny", 256, 0);
	struct srt_engine *fresh = open_engine("tiny", 256, 0);
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	int32_t *a = make_prompt(NA, (int32_t)V, 41);
	int32_t *b1 = make_prompt(NB, (int32_t)V, 42), *b2 = make_prompt(NB - 50, (int32_t)V, 43);
	memcpy(b1, a, sizeof(int32_t) * BR);
	memcpy(b2, a, sizeof(int32_t) * 800); /* branches inside page 3: remat at 768 */
	finish_prompt(e, a, NA, 1);
	drop_windows(e, a, NA, 0);
	struct run f1 = run_seq(fresh, b1, NB, 0, 256);
	struct run r7 = run_seq(e, b1, NB, 1, 7);
	ck_assert_uint_eq(r7.remat, 1024);
	assert_run_same(&r7, &f1, NB, V, "chunks of 7");

	/* batch: both sequences rematerialized at start (windows dropped again), then one
	 * forward for both prompt rests and a batched decode step */
	drop_windows(e, a, NA, 0);
	uint64_t n2 = NB - 50;
	struct run f2 = run_seq(fresh, b2, n2, 0, 100);
	struct srt_seq *s[2];
	uint64_t h[2];
	ck_assert(!srt_engine_seq_start(e, b1, NB, 1, &s[0], &h[0], err, sizeof(err)));
	ck_assert(!srt_engine_seq_start(e, b2, n2, 1, &s[1], &h[1], err, sizeof(err)));
	ck_assert_uint_eq(srt_seq_remat(s[0], NULL), 1024);
	ck_assert_uint_eq(srt_seq_remat(s[1], NULL), 768);
	const int32_t *toks[2] = {b1 + h[0], b2 + h[1]};
	int32_t nt[2] = {(int32_t)(NB - h[0]), (int32_t)(n2 - h[1])};
	float *lg = malloc(sizeof(float) * V * (size_t)(nt[0] + nt[1]));
	ck_assert_msg(!srt_engine_forward(e, s, 2, toks, nt, lg, 1, err, sizeof(err)), "%s", err);
	assert_same(lg, f1.lg + h[0] * V, V * (size_t)nt[0], V, "batched sequence 1 vs scratch");
	assert_same(lg + V * (size_t)nt[0], f2.lg + h[1] * V, V * (size_t)nt[1], V,
		    "batched sequence 2 vs scratch");
	float dl[2 * 512];
	ck_assert_uint_le(V, 512);
	int32_t nx[2] = {b1[0], b2[0]};
	ck_assert(!srt_engine_decode(e, s, 2, nx, dl, err, sizeof(err)));
	assert_same(dl, f1.dl, V, V, "batched decode 1");
	assert_same(dl + V, f2.dl, V, V, "batched decode 2");
	srt_engine_seq_free(s[0]);
	srt_engine_seq_free(s[1]);
	free(lg);
	run_free(&f1), run_free(&f2), run_free(&r7);
	free(a), free(b1), free(b2);
	srt_engine_close(e);
	srt_engine_close(fresh);
}
END_TEST

/* with the window cached one page before the branch, resuming there is cheaper */
START_TEST(the_executor_resumes_earlier_when_that_costs_less_and_never_remats_when_off)
{
	struct srt_engine *e = open_engine("tiny", 256, 0);
	struct srt_engine *off = open_engine("tiny", 256, 1);
	struct srt_engine *fresh = open_engine("tiny", 256, 0);
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	uint32_t L = (uint32_t)srt_engine_model(e)->num_hidden_layers;
	int32_t *a = make_prompt(NA, (int32_t)V, 51), *b = make_prompt(NB, (int32_t)V, 52);
	int32_t *c = make_prompt(900, (int32_t)V, 53);
	memcpy(b, a, sizeof(int32_t) * BR);
	memcpy(c, a, sizeof(int32_t) * 780); /* a node boundary at 768 */
	struct srt_remat_geom g = {.layers = L, .window = 128, .page_tokens = 256,
				   .tail_pages = 1};
	/* the rule the test relies on: remat(1024) > 256 tokens, < 1024 tokens */
	ck_assert_uint_gt(srt_remat_cost(&g, 1024), 256 * (uint64_t)L);
	ck_assert_uint_lt(srt_remat_cost(&g, 1024), 1024 * (uint64_t)L);
	struct run full = run_seq(fresh, b, NB, 0, 256);

	finish_prompt(e, a, NA, 1);
	finish_prompt(e, c, 900, 1);
	drop_windows(e, a, NA, 768);
	struct run r = run_seq(e, b, NB, 1, 256);
	ck_assert_uint_eq(r.hit, 768);
	ck_assert_uint_eq(r.remat, 0);
	assert_run_same(&r, &full, NB, V, "resume at the earlier window");

	finish_prompt(off, a, NA, 1);
	drop_windows(off, a, NA, 0);
	struct run o = run_seq(off, b, NB, 1, 256);
	ck_assert_uint_eq(o.hit, 0);
	ck_assert_uint_eq(o.remat, 0);
	assert_run_same(&o, &full, NB, V, "remat off");
	run_free(&full), run_free(&r), run_free(&o);
	free(a), free(b), free(c);
	srt_engine_close(e);
	srt_engine_close(off);
	srt_engine_close(fresh);
}
END_TEST

/* an engine with a file L3 under dir (write-through) */
static struct srt_engine *open_l3(const char *dir)
{
	char path[4200], err[2048], mdir[4096];
	snprintf(path, sizeof(path), "%s/tiers.ini", dir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[tier.l2]\nplugin = none\n[tier.l3]\nplugin = file\npath = %s/l3\n"
		"budget = 1G\n", dir);
	ck_assert_int_eq(fclose(f), 0);
	snprintf(mdir, sizeof(mdir), "%s/models/tiny", env_or("SRT_BUILD_DIR", "."));
	struct srt_engine_opts o = {.config_path = path, .model = mdir, .threads = 2,
				    .profile = SRT_PROFILE_REFERENCE, .chunk = 4096, .quiet = 1,
				    .tiers = 1};
	struct srt_engine *e = NULL;
	ck_assert_msg(!srt_engine_open(&o, &e, err, sizeof(err)), "%s", err);
	ck_assert_ptr_nonnull(srt_engine_tiers(e));
	return e;
}

/*
 * L3 keeps the compressed pools of every page and window / carry pages only at resume points
 * (here a's end: one prefill chunk); a new engine resumes b at its branch point from L3 by
 * rematerialization
 */
START_TEST(resume_from_an_l3_holding_no_window_pages_rematerializes_bitwise)
{
	char d[4200], cmd[4300];
	snprintf(d, sizeof(d), "%s/tests/remat-l3-XXXXXX", env_or("SRT_BUILD_DIR", "."));
	ck_assert_ptr_nonnull(mkdtemp(d));
	struct srt_engine *e = open_l3(d);
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	int32_t *a = make_prompt(NA, (int32_t)V, 61), *b = make_prompt(NB, (int32_t)V, 62);
	memcpy(b, a, sizeof(int32_t) * BR);
	finish_prompt(e, a, NA, 1);
	struct srt_tmgr_stats ts;
	srt_tmgr_stats(srt_engine_tiers(e), &ts);
	uint64_t n_all = 0, n_tail = 0;
	for (uint32_t p = 0; p < srt_rdx_pool_count(srt_engine_cache(e)); p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(srt_engine_cache(e), p, &st);
		n_all += st.retention == SRT_RETAIN_ALL;
		n_tail += st.retention == SRT_RETAIN_TAIL;
	}
	/* 5 whole pages of a in every ALL pool, TAIL pools only the page before its end */
	fprintf(stderr, "[remat] L3 after the first engine: %llu objects\n",
		(unsigned long long)ts.l3_objects);
	ck_assert_uint_eq(ts.l3_objects, 5 * n_all + n_tail);
	srt_engine_close(e);
	e = open_l3(d);
	struct srt_engine *fresh = open_engine("tiny", 256, 0);
	struct run r = run_seq(e, b, NB, 1, 256), f = run_seq(fresh, b, NB, 0, 256);
	ck_assert_uint_eq(r.hit, 1024);
	ck_assert_uint_eq(r.remat, 1024);
	assert_run_same(&r, &f, NB, V, "L3 resume");
	run_free(&r), run_free(&f);
	free(a), free(b);
	srt_engine_close(e);
	srt_engine_close(fresh);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* a short prefix (512 tokens, 2 pages): small enough for the sanitizer builds */
START_TEST(a_short_rematerialized_resume_equals_scratch_bitwise)
{
	struct srt_engine *e = open_engine("tiny", 256, 0);
	struct srt_engine *fresh = open_engine("tiny", 256, 0);
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	int32_t *a = make_prompt(600, (int32_t)V, 81), *b = make_prompt(540, (int32_t)V, 82);
	memcpy(b, a, sizeof(int32_t) * 530);
	finish_prompt(e, a, 600, 1);
	drop_windows(e, a, 600, 0);
	struct run r = run_seq(e, b, 540, 1, 100), full = run_seq(fresh, b, 540, 0, 256);
	ck_assert_uint_eq(r.remat, 512);
	assert_run_same(&r, &full, 540, V, "short prefix");
	assert_tail_pages_same(e, fresh, b, 512);
	run_free(&r), run_free(&full);
	free(a), free(b);
	srt_engine_close(e);
	srt_engine_close(fresh);
}
END_TEST

/* an attention plugin of ABI 1.0 (window layers) loads, and the engine never rematerializes */
START_TEST(an_abi_1_0_attention_plugin_loads_and_gets_no_rematerialized_hits)
{
	char d[4200], path[4300], err[2048], mdir[4096], cmd[4300];
	snprintf(d, sizeof(d), "%s/tests/remat-abi10-XXXXXX", env_or("SRT_BUILD_DIR", "."));
	ck_assert_ptr_nonnull(mkdtemp(d));
	snprintf(path, sizeof(path), "%s/abi10.ini", d);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[attention]\nratio.0 = %s\n", SRT_TEST_ABI10_PLUGIN);
	ck_assert_int_eq(fclose(f), 0);
	snprintf(mdir, sizeof(mdir), "%s/models/tiny", env_or("SRT_BUILD_DIR", "."));
	setenv("SHADOWRT_PLUGIN_PATH", env_or("SRT_PLUGIN_DIR", "lib/shadowrt/plugins"), 1);
	struct srt_engine_opts o = {.config_path = path, .model = mdir, .threads = 2,
				    .profile = SRT_PROFILE_REFERENCE, .chunk = 256, .quiet = 1};
	struct srt_engine *e = NULL;
	ck_assert_msg(!srt_engine_open(&o, &e, err, sizeof(err)), "%s", err);
	struct srt_engine *fresh = open_engine("tiny", 256, 0);
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	int32_t *a = make_prompt(600, (int32_t)V, 71), *b = make_prompt(560, (int32_t)V, 72);
	memcpy(b, a, sizeof(int32_t) * 530);
	finish_prompt(e, a, 600, 1);
	drop_windows(e, a, 600, 0);
	/* an ABI 1.1 stack would rematerialize here: cost(512) < 512 tokens of 6 layers */
	struct srt_remat_geom g = {.layers = 6, .window = 128, .page_tokens = 256, .tail_pages = 1};
	ck_assert_uint_lt(srt_remat_cost(&g, 512), 512 * 6);
	struct run r = run_seq(e, b, 560, 1, 256), full = run_seq(fresh, b, 560, 0, 256);
	ck_assert_uint_eq(r.remat, 0);
	ck_assert_uint_eq(r.hit, 0);
	assert_run_same(&r, &full, 560, V, "ABI 1.0 window plugin");
	run_free(&r), run_free(&full);
	free(a), free(b);
	srt_engine_close(e);
	srt_engine_close(fresh);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* random prompts, branch points, window drops and chunks: always bitwise equal to scratch */
static void property(const char *preset, uint64_t seed, int trials)
{
	struct srt_engine *e = open_engine(preset, 256, 0);
	struct srt_engine *fresh = open_engine(preset, 256, 0);
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	uint64_t s = seed, remats = 0;
	for (int i = 0; i < trials; i++) {
		/* branch points past two pages: there the trapezoid costs less than the prefix */
		uint64_t na = 900 + rng(&s) % 700, br = 512 + rng(&s) % (na - 552);
		uint64_t nb = br + 20 + rng(&s) % 200;
		int drop = i == 0 || (int)(rng(&s) % 4) != 0, chunk = 1 + (int)(rng(&s) % 300);
		int32_t *a = make_prompt(na, (int32_t)V, rng(&s)), *b = make_prompt(nb, (int32_t)V,
										  rng(&s));
		memcpy(b, a, sizeof(int32_t) * br);
		finish_prompt(e, a, na, 1);
		if (drop)
			drop_windows(e, a, na, 0);
		struct run r = run_seq(e, b, nb, 1, chunk), f = run_seq(fresh, b, nb, 0, 256);
		char what[160];
		snprintf(what, sizeof(what), "%s trial %d (a %llu, branch %llu, b %llu, drop %d, "
			 "chunk %d)", preset, i, (unsigned long long)na, (unsigned long long)br,
			 (unsigned long long)nb, drop, chunk);
		fprintf(stderr, "[remat] %s: hit %llu, remat %llu\n", what, (unsigned long long)r.hit,
			(unsigned long long)r.remat);
		ck_assert_uint_le(r.hit, br / 256 * 256);
		assert_run_same(&r, &f, nb, V, what);
		remats += r.remat != 0;
		run_free(&r), run_free(&f);
		free(a), free(b);
	}
	ck_assert_uint_gt(remats, 0); /* the property covered rematerialized resumes */
	srt_engine_close(e);
	srt_engine_close(fresh);
}

START_TEST(random_branch_points_resume_bitwise_equal_to_scratch_tiny)
{
	property("tiny", 7, 2);
}
END_TEST

START_TEST(random_branch_points_resume_bitwise_equal_to_scratch_tiny_pro)
{
	property("tiny-pro", 11, 1);
}
END_TEST

static Suite *remat_suite(void)
{
	Suite *s = suite_create("remat");
	TCase *small = tcase_create("small"); /* the case sanitizer builds run */
	tcase_set_timeout(small, 300);
	tcase_add_test(small, a_short_rematerialized_resume_equals_scratch_bitwise);
	suite_add_tcase(s, small);
	TCase *tc = tcase_create("remat");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, resume_at_a_branch_point_without_window_pages_equals_scratch_bitwise_tiny);
	tcase_add_test(tc,
		       resume_at_a_branch_point_without_window_pages_equals_scratch_bitwise_tiny_pro);
	tcase_add_test(tc, the_executor_resumes_earlier_when_that_costs_less_and_never_remats_when_off);
	tcase_add_test(tc, an_abi_1_0_attention_plugin_loads_and_gets_no_rematerialized_hits);
	suite_add_tcase(s, tc);
	TCase *more = tcase_create("more");
	tcase_set_timeout(more, 300);
	tcase_add_test(more,
		       rematerialized_resumes_prefilled_in_chunks_and_in_a_batch_equal_scratch_bitwise);
	tcase_add_test(more, resume_from_an_l3_holding_no_window_pages_rematerializes_bitwise);
	tcase_add_test(more, random_branch_points_resume_bitwise_equal_to_scratch_tiny);
	tcase_add_test(more, random_branch_points_resume_bitwise_equal_to_scratch_tiny_pro);
	suite_add_tcase(s, more);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(remat_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
