/*
 * Tier loads overlap compute (check suite `overlap`), on the synthetic tiny checkpoint with the
 * real plugins, a real L2 (host arena) and a real L3 (file store in a temporary directory):
 *
 *  - srt_engine_seq_begin starts a sequence whose prefix lies in L3 without waiting for the
 *    load; another sequence is computed while it is outstanding (the load is not yet waited
 *    for: not counted as promoted, the sequence still loading); the first prefill of the begun
 *    sequence waits, and its logits are bitwise those of a computation from scratch;
 *  - the same with the tier manager's prefetch thread held, so the load is certainly in flight
 *    (queued, not done) while the other sequence computes a decode step; and with an L2 hit
 *    (the L2 -> L1 copies run in the same thread);
 *  - a load that fails while outstanding (every L3 object corrupted after begin) falls back at
 *    the wait to the longest prefix still verified (here the first page, in L1): a forward
 *    that placed its tokens after the hit begin gave is refused with a message, the prefill
 *    then computes from the fallback and its logits are still bitwise those from scratch.
 *
 * If the executor waited for the loads in begin (before compute), the "still loading after
 * compute" assertions fail; if it served pages before waiting, the logits comparisons fail.
 *
 * Case `layout`: window pool pages are a ring of 128 rows (half a 256-token page's rows).
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
#include "tier/manager.h"

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

/* deterministic prompt: ids in [2, vocab), the generator of core/check/diverge.h */
static int32_t *make_prompt(uint64_t n, int32_t vocab, uint64_t seed)
{
	int32_t *t = malloc(sizeof(int32_t) * n);
	ck_assert_ptr_nonnull(t);
	srt_div_prompt(t, n, vocab, seed);
	return t;
}

/* an engine on tiny; dir != NULL: with L2 (host, 64 MiB) and a file L3 under dir */
static struct srt_engine *open_engine(const char *dir)
{
	char path[4200], err[2048], mdir[4096];
	setenv("SHADOWRT_PLUGIN_PATH", env_or("SRT_PLUGIN_DIR", "lib/shadowrt/plugins"), 1);
	snprintf(mdir, sizeof(mdir), "%s/models/tiny", env_or("SRT_BUILD_DIR", "."));
	struct srt_engine_opts o = {.model = mdir, .threads = 2, .profile = SRT_PROFILE_REFERENCE,
				    .chunk = 4096, .quiet = 1};
	if (dir) {
		snprintf(path, sizeof(path), "%s/tiers.ini", dir);
		FILE *f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "[tier.l2]\nplugin = host\nbudget = 64MiB\n[tier.l3]\nplugin = file\n"
			"path = %s/l3\nbudget = 1G\n[cache]\nprefetch = on\n", dir);
		ck_assert_int_eq(fclose(f), 0);
		o.config_path = path;
		o.tiers = 1;
	}
	struct srt_engine *e = NULL;
	ck_assert_msg(!srt_engine_open(&o, &e, err, sizeof(err)), "%s", err);
	if (dir)
		ck_assert_ptr_nonnull(srt_engine_tiers(e));
	return e;
}

/* start (waiting), prefill, finish; the last prompt position's logits into lg (may be NULL) */
static void run_prompt(struct srt_engine *e, const int32_t *t, uint64_t n, int use_cache,
		       float *lg)
{
	char err[2048];
	struct srt_seq *s;
	ck_assert_msg(!srt_engine_seq_start(e, t, n, use_cache, &s, NULL, err, sizeof(err)), "%s",
		      err);
	ck_assert_msg(!srt_engine_prefill(e, s, lg, 0, err, sizeof(err)), "%s", err);
	ck_assert_msg(!srt_engine_seq_finish(s, NULL, err, sizeof(err)), "%s", err);
	srt_engine_seq_free(s);
}

static void assert_same(const float *a, const float *b, size_t V, const char *what)
{
	for (size_t i = 0; i < V; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)))
			ck_abort_msg("%s: first difference at logit %zu: %.9g vs %.9g", what, i, a[i],
				     b[i]);
}

/* L2 + L3 hit tokens the tier manager has counted: it counts them when a request's loads are
 * waited for (srt_tmgr_req_wait), not when they start */
static uint64_t promoted(struct srt_engine *e)
{
	struct srt_tmgr_stats st;
	srt_tmgr_stats(srt_engine_tiers(e), &st);
	return st.hit_tokens[1] + st.hit_tokens[2];
}

/* prefill a begun sequence (this waits), compare its last logits, finish and free it */
static void finish_begun(struct srt_engine *e, struct srt_seq *s, const float *ref, size_t V,
			 const char *what)
{
	char err[2048];
	float *lg = malloc(sizeof(float) * V);
	ck_assert_ptr_nonnull(lg);
	ck_assert_msg(!srt_engine_prefill(e, s, lg, 0, err, sizeof(err)), "%s: %s", what, err);
	ck_assert(!srt_seq_loading(s));
	assert_same(lg, ref, V, what);
	ck_assert_msg(!srt_engine_seq_finish(s, NULL, err, sizeof(err)), "%s", err);
	srt_engine_seq_free(s);
	free(lg);
}

/* Flip a payload byte of every stored L3 object (headers intact): every load fails. */
static void corrupt_l3(const char *dir)
{
	char cmd[4400];
	snprintf(cmd, sizeof(cmd),
		 "cd '%s/l3' && find . -type f -size +100c ! -path './tmp/*' | while read f; do "
		 "printf 'X' | dd of=\"$f\" bs=1 seek=80 conv=notrunc 2>/dev/null; done", dir);
	ck_assert_int_eq(system(cmd), 0);
}

#define NA 600 /* 2 whole pages (P = 256) */

START_TEST(tier_loads_overlap_compute_and_are_waited_for_only_when_needed)
{
	char d[4200], err[2048], cmd[4300];
	snprintf(d, sizeof(d), "%s/tests/overlap-XXXXXX", env_or("SRT_BUILD_DIR", "."));
	ck_assert_ptr_nonnull(mkdtemp(d));
	struct srt_engine *ref = open_engine(NULL), *e = open_engine(d);
	size_t V = (size_t)srt_engine_model(ref)->vocab_size;
	int32_t *a = make_prompt(NA, (int32_t)V, 71), *b = make_prompt(NA, (int32_t)V, 72),
		*c = make_prompt(NA, (int32_t)V, 73), *x = make_prompt(300, (int32_t)V, 74);
	float *ra = malloc(sizeof(float) * V), *rb = malloc(sizeof(float) * V),
	      *rc = malloc(sizeof(float) * V), *rx = malloc(sizeof(float) * V),
	      *lx = malloc(sizeof(float) * V);
	ck_assert(ra && rb && rc && rx && lx);
	run_prompt(ref, a, NA, 0, ra);
	run_prompt(ref, b, NA, 0, rb);
	run_prompt(ref, c, NA, 0, rc);
	run_prompt(ref, x, 300, 0, rx);
	/* the first engine writes a, b, c through to L3; the second starts with an empty L1/L2 */
	run_prompt(e, a, NA, 1, NULL);
	run_prompt(e, b, NA, 1, NULL);
	run_prompt(e, c, NA, 1, NULL);
	srt_engine_close(e);
	e = open_engine(d);
	struct srt_tmgr *m = srt_engine_tiers(e);

	/* 1. b's pages come from L3 while x computes */
	struct srt_seq *sb, *sx;
	uint64_t hit = 0, tiers[3];
	ck_assert_msg(!srt_engine_seq_begin(e, b, NA, 1, &sb, &hit, err, sizeof(err)), "%s", err);
	ck_assert_uint_eq(hit, 512);
	ck_assert_int_eq(srt_seq_loading(sb), 1);
	ck_assert_msg(!srt_engine_seq_start(e, x, 300, 1, &sx, NULL, err, sizeof(err)), "%s", err);
	ck_assert_msg(!srt_engine_prefill(e, sx, lx, 0, err, sizeof(err)), "%s", err);
	assert_same(lx, rx, V, "x computed while b loads");
	/* x's compute is done and b's load was not waited for: the begin did not wait */
	ck_assert_int_eq(srt_seq_loading(sb), 1);
	ck_assert_uint_eq(promoted(e), 0);
	ck_assert_uint_eq(srt_engine_seq_waits(e), 0);
	finish_begun(e, sb, rb, V, "b from L3 after overlap");
	ck_assert_uint_eq(srt_engine_seq_waits(e), 1);
	ck_assert_uint_gt(promoted(e), 0);

	/* 2. the prefetch thread held: c's load is certainly in flight while x decodes */
	uint64_t before = promoted(e);
	srt_tmgr_hold_prefetch(m, 1);
	struct srt_seq *sc;
	ck_assert_msg(!srt_engine_seq_begin(e, c, NA, 1, &sc, &hit, err, sizeof(err)), "%s", err);
	ck_assert_uint_eq(hit, 512);
	int32_t tok = 5;
	ck_assert_msg(!srt_engine_decode(e, &sx, 1, &tok, lx, err, sizeof(err)), "%s", err);
	ck_assert_int_eq(srt_seq_loading(sc), 1);
	ck_assert_uint_eq(promoted(e), before);
	srt_tmgr_hold_prefetch(m, 0);
	finish_begun(e, sc, rc, V, "c from L3, load held during a decode step");
	ck_assert_uint_gt(promoted(e), before);

	/* 3. an L2 hit: b's pages pushed out of L1 (demoted to L2) come back while x decodes */
	struct srt_rdx_cache *cache = srt_engine_cache(e);
	ck_assert_msg(!srt_engine_seq_finish(sx, NULL, err, sizeof(err)), "%s", err);
	srt_engine_seq_free(sx);
	for (uint32_t p = 0; p < srt_rdx_pool_count(cache); p++)
		srt_rdx_evict(cache, p, 0, NULL);
	ck_assert_msg(!srt_engine_seq_start(e, x, 300, 1, &sx, NULL, err, sizeof(err)), "%s", err);
	before = promoted(e);
	srt_tmgr_hold_prefetch(m, 1);
	ck_assert_msg(!srt_engine_seq_begin(e, b, NA, 1, &sb, &hit, err, sizeof(err)), "%s", err);
	ck_assert_uint_eq(hit, 512);
	ck_assert_msg(!srt_engine_prefill(e, sx, lx, 0, err, sizeof(err)), "%s", err);
	assert_same(lx, rx, V, "x computed while b loads from L2");
	ck_assert_int_eq(srt_seq_loading(sb), 1);
	ck_assert_uint_eq(promoted(e), before);
	srt_tmgr_hold_prefetch(m, 0);
	ck_assert_msg(!srt_engine_seq_wait(sb, &hit, err, sizeof(err)), "%s", err);
	srt_seq_hit_tiers(sb, tiers);
	ck_assert_uint_eq(tiers[1], 512);
	finish_begun(e, sb, rb, V, "b from L2 after overlap");

	/* 4. a's load fails while outstanding: fallback at the wait to the longest prefix still
	 * verified (a's first page, which a shorter prompt brought into L1), the forward is
	 * refused, the prefill computes from there */
	run_prompt(e, a, 300, 1, NULL);
	srt_tmgr_flush(m); /* every object on disk, none left in the write queue */
	srt_tmgr_hold_prefetch(m, 1);
	struct srt_seq *sa;
	ck_assert_msg(!srt_engine_seq_begin(e, a, NA, 1, &sa, &hit, err, sizeof(err)), "%s", err);
	ck_assert_uint_eq(hit, 512);
	corrupt_l3(d);
	srt_tmgr_hold_prefetch(m, 0);
	const int32_t *tp = a + 512;
	int32_t one = 1;
	ck_assert_int_eq(srt_engine_forward(e, &sa, 1, &tp, &one, NULL, 0, err, sizeof(err)),
			 SRT_EINVAL);
	ck_assert_msg(strstr(err, "fell back from a hit of 512 to 256"), "%s", err);
	ck_assert_uint_eq(srt_seq_hit(sa), 256);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(m, &st);
	ck_assert_uint_eq(st.loads_failed, 1);
	finish_begun(e, sa, ra, V, "a computed after its L3 load failed");

	ck_assert_msg(!srt_engine_seq_finish(sx, NULL, err, sizeof(err)), "%s", err);
	srt_engine_seq_free(sx);
	srt_engine_close(e);
	srt_engine_close(ref);
	free(a), free(b), free(c), free(x), free(ra), free(rb), free(rc), free(rx), free(lx);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/*
 * Window pages are sized to what a resume reads: with P = 256 and a 128-token window every
 * attention plugin's window pool declares ratio 2, so a page is 128 entries per layer (a ring
 * of the page's last 128 rows), half of one entry per token; the carry state and compressed
 * pools are unchanged. (That the ring gives the same logits, chunked, batched, resumed and
 * rematerialized, is what tests/attention, test_exec and test_remat check bitwise.)
 */
START_TEST(window_pages_hold_the_last_128_rows_only)
{
	struct srt_engine *e = open_engine(NULL);
	struct srt_rdx_cache *c = srt_engine_cache(e);
	int windows = 0;
	for (uint32_t p = 0; p < srt_rdx_pool_count(c); p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(c, p, &st);
		size_t nl = strlen(st.name);
		if (nl < 7 || strcmp(st.name + nl - 7, ".window"))
			continue;
		windows++;
		ck_assert_uint_eq(st.retention, SRT_RETAIN_TAIL);
		ck_assert_uint_eq(st.tail_tokens, 128);
		ck_assert_uint_eq(st.ratio, 2);
		ck_assert_uint_eq(st.page_bytes, (uint64_t)st.n_layers * 128 * st.entry_bytes);
		fprintf(stderr, "[layout] %s: %llu bytes a page (%u layers x 128 x %llu)\n", st.name,
			(unsigned long long)st.page_bytes, st.n_layers,
			(unsigned long long)st.entry_bytes);
	}
	ck_assert_int_eq(windows, 3); /* swa, csa, hca */
	srt_engine_close(e);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("overlap");
	TCase *tc = tcase_create("tiers");
	tcase_add_test(tc, tier_loads_overlap_compute_and_are_waited_for_only_when_needed);
	suite_add_tcase(su, tc);
	TCase *tl = tcase_create("layout");
	tcase_add_test(tl, window_pages_hold_the_last_128_rows_only);
	suite_add_tcase(su, tl);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
