/*
 * The scheduler (core/sched) on the synthetic tiny checkpoint with the real plugins.
 *
 *  - determinism end to end: 10 requests (shared prefixes, different lengths, greedy and
 *    seeded temperature / top-p / top-k sampling) give the same tokens run one at a time,
 *    submitted all at once (5 running at most, 96 rows a step), and in reverse order;
 *  - the same under an L1 budget too small for all of them: requests queue and are preempted
 *    (the test asserts that preemption happened) and still give the same tokens;
 *  - identical concurrent prefixes are computed once (the second request hits the first's);
 *  - with an L2, requests whose prefix must be loaded are admitted while it loads and join the
 *    batch a step later (the load overlaps the forward); the tokens are the same;
 *  - cancellation frees the sequence at once (no live cache request remains);
 *  - max_tokens, eos / stop ids, and bad requests (ids out of range, empty, over the context).
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "exec/engine.h"
#include "radix/radix.h"
#include "sched/sched.h"

#define NREQ 10

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

/* engine on the tiny model; ini (may be NULL) is written to a file and used as config */
static struct srt_engine *open_engine(const char *ini, int chunk)
{
	char dir[4096], err[2048], cfg[4096] = "";
	snprintf(dir, sizeof(dir), "%s/models/tiny", env_or("SRT_BUILD_DIR", "."));
	setenv("SHADOWRT_PLUGIN_PATH", env_or("SRT_PLUGIN_DIR", "lib/shadowrt/plugins"), 1);
	if (ini) {
		snprintf(cfg, sizeof(cfg), "%s/tests/sched_%d.ini", env_or("SRT_BUILD_DIR", "."),
			 (int)getpid());
		FILE *f = fopen(cfg, "w");
		ck_assert_ptr_nonnull(f);
		fputs(ini, f);
		fclose(f);
	}
	struct srt_engine_opts o = {.model = dir, .config_path = ini ? cfg : NULL, .threads = 2,
				    .profile = -1, .chunk = chunk, .quiet = 1};
	struct srt_engine *e = NULL;
	int rc = srt_engine_open(&o, &e, err, sizeof(err));
	if (ini)
		remove(cfg);
	ck_assert_msg(rc == 0, "engine open: %s (%d)", err, rc);
	return e;
}

struct spec {
	int32_t *prompt;
	uint64_t n;
	struct srt_sched_params p;
};

static int32_t rnd(uint64_t *s)
{
	*s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
	return (int32_t)((*s >> 8) & 0x7fffffff);
}

/* requests: 3 families sharing a 270-token prefix each, tails of various lengths */
static void make_specs(struct spec *sp, int32_t vocab)
{
	for (int i = 0; i < NREQ; i++) {
		uint64_t fam = (uint64_t)(i % 3), s = fam * 7919 + 1;
		uint64_t shared = 270, tail = 5 + (uint64_t)i * 37 % 120;
		sp[i].n = shared + tail;
		sp[i].prompt = malloc(sizeof(int32_t) * sp[i].n);
		for (uint64_t k = 0; k < sp[i].n; k++) {
			if (k == shared)
				s = (uint64_t)i * 104729 + 3;
			sp[i].prompt[k] = 2 + rnd(&s) % (vocab - 2);
		}
		memset(&sp[i].p, 0, sizeof(sp[i].p));
		sp[i].p.max_tokens = 6 + (uint32_t)(i % 4) * 5;
		sp[i].p.top_p = 1.0f;
		sp[i].p.seed = 1000 + (uint64_t)i;
		sp[i].p.ignore_eos = 1;
		if (i % 2) {
			sp[i].p.temperature = 0.9f;
			sp[i].p.top_p = i % 3 ? 0.9f : 1.0f;
			sp[i].p.top_k = i % 4 == 1 ? 20 : 0;
		}
	}
}

struct result {
	int32_t toks[64];
	uint64_t n;
	int finish;
};

static void collect(struct srt_sched_req *h, struct result *r)
{
	struct srt_sched_info in;
	srt_sched_wait(h, UINT64_MAX - 1, SIZE_MAX - 1, &in);
	ck_assert_int_eq(in.state, SRT_SCHED_DONE);
	ck_assert_msg(in.finish != SRT_SCHED_ERROR, "request failed: %s", in.error);
	r->n = srt_sched_tokens(h, 0, r->toks, 64);
	ck_assert_uint_eq(r->n, in.generated);
	r->finish = in.finish;
}

static struct srt_sched_req *submit(struct srt_sched *s, const struct spec *sp)
{
	char err[512];
	struct srt_sched_req *h = NULL;
	int rc = srt_sched_submit(s, sp->prompt, sp->n, &sp->p, &h, err, sizeof(err));
	ck_assert_msg(rc == 0, "submit: %s", err);
	return h;
}

static void run_alone(struct srt_engine *e, struct spec *sp, struct result *res)
{
	char err[512];
	struct srt_sched *s;
	ck_assert_msg(!srt_sched_create(e, NULL, &s, err, sizeof(err)), "%s", err);
	for (int i = 0; i < NREQ; i++) {
		struct srt_sched_req *h = submit(s, &sp[i]);
		collect(h, &res[i]);
		srt_sched_release(h);
	}
	srt_sched_destroy(s);
}

static void run_together(struct srt_engine *e, const struct srt_sched_config *cfg,
			 struct spec *sp, struct result *res, int reverse)
{
	char err[512];
	struct srt_sched *s;
	struct srt_sched_req *h[NREQ];
	ck_assert_msg(!srt_sched_create(e, cfg, &s, err, sizeof(err)), "%s", err);
	for (int k = 0; k < NREQ; k++) {
		int i = reverse ? NREQ - 1 - k : k;
		h[i] = submit(s, &sp[i]);
	}
	for (int i = 0; i < NREQ; i++) {
		collect(h[i], &res[i]);
		srt_sched_release(h[i]);
	}
	srt_sched_destroy(s);
}

static void assert_same(const struct result *a, const struct result *b, const char *what)
{
	for (int i = 0; i < NREQ; i++) {
		ck_assert_msg(a[i].n == b[i].n, "%s: request %d: %llu vs %llu tokens", what, i,
			      (unsigned long long)a[i].n, (unsigned long long)b[i].n);
		for (uint64_t k = 0; k < a[i].n; k++)
			ck_assert_msg(a[i].toks[k] == b[i].toks[k],
				      "%s: request %d token %llu: %d vs %d", what, i,
				      (unsigned long long)k, a[i].toks[k], b[i].toks[k]);
	}
}

static void free_specs(struct spec *sp)
{
	for (int i = 0; i < NREQ; i++)
		free(sp[i].prompt);
}

START_TEST(tokens_independent_of_arrival_order_and_batching)
{
	struct srt_engine *e = open_engine(NULL, 64);
	struct spec sp[NREQ];
	struct result alone[NREQ], all[NREQ], rev[NREQ];
	make_specs(sp, srt_engine_model(e)->vocab_size);
	run_alone(e, sp, alone);
	for (int i = 0; i < NREQ; i++)
		ck_assert_uint_eq(alone[i].n, sp[i].p.max_tokens);
	struct srt_sched_config cfg = {.token_budget = 96, .max_running = 5};
	run_together(e, &cfg, sp, all, 0);
	assert_same(alone, all, "all at once");
	run_together(e, NULL, sp, rev, 1);
	assert_same(alone, rev, "reverse order");
	/* sampling really is per request: two seeds differ somewhere */
	int differ = 0;
	for (int i = 1; i < NREQ; i += 2)
		for (uint64_t k = 0; k < alone[i].n; k++)
			differ |= alone[i].toks[k] != alone[1].toks[k];
	ck_assert_msg(differ, "every sampled request produced the same tokens");
	free_specs(sp);
	srt_engine_close(e);
}
END_TEST

START_TEST(tokens_unchanged_under_memory_pressure_with_preemption)
{
	struct srt_engine *e0 = open_engine(NULL, 64);
	struct spec sp[NREQ];
	struct result alone[NREQ], tight[NREQ];
	make_specs(sp, srt_engine_model(e0)->vocab_size);
	run_alone(e0, sp, alone);
	srt_engine_close(e0);
	/* an L1 budget for about 3 requests' KV */
	char ini[256];
	snprintf(ini, sizeof(ini), "[tier.l1]\nplugin = host\nbudget = %s\n",
		 env_or("SCHED_TIGHT", "1MiB"));
	struct srt_engine *e = open_engine(ini, 64);
	struct srt_sched_config cfg = {.token_budget = 200, .max_running = 12};
	char err[512];
	struct srt_sched *s;
	struct srt_sched_req *h[NREQ];
	ck_assert_msg(!srt_sched_create(e, &cfg, &s, err, sizeof(err)), "%s", err);
	for (int i = 0; i < NREQ; i++)
		h[i] = submit(s, &sp[i]);
	for (int i = 0; i < NREQ; i++) {
		collect(h[i], &tight[i]);
		srt_sched_release(h[i]);
	}
	struct srt_sched_stats st;
	srt_sched_stats(s, &st);
	srt_sched_destroy(s);
	assert_same(alone, tight, "tight L1");
	fprintf(stderr, "tight L1: %llu preemptions, pool 0 peak %llu of %llu bytes\n",
		(unsigned long long)st.preemptions, (unsigned long long)st.pools[0].peak,
		(unsigned long long)st.pools[0].budget);
	ck_assert_msg(st.preemptions > 0,
		      "the budget never forced a preemption");
	for (uint32_t p = 0; p < st.n_pools; p++)
		ck_assert_uint_le(st.pools[p].peak, st.pools[p].budget);
	char cerr[512];
	ck_assert_msg(!srt_rdx_cache_check(srt_engine_cache(e), cerr, sizeof(cerr)), "%s", cerr);
	free_specs(sp);
	srt_engine_close(e);
}
END_TEST

START_TEST(identical_concurrent_prefixes_computed_once)
{
	struct srt_engine *e = open_engine(NULL, 64);
	char err[512];
	struct srt_sched *s;
	/* room in a step for both (64-token chunks): only the prefix rule keeps the second out */
	struct srt_sched_config cfg = {.token_budget = 256};
	ck_assert_msg(!srt_sched_create(e, &cfg, &s, err, sizeof(err)), "%s", err);
	int32_t p[700];
	uint64_t seed = 99;
	for (int i = 0; i < 700; i++)
		p[i] = 2 + rnd(&seed) % 500;
	struct spec a = {.prompt = p, .n = 700, .p = {.max_tokens = 3, .top_p = 1}};
	struct srt_sched_req *h1 = submit(s, &a), *h2 = submit(s, &a);
	struct result r1, r2;
	collect(h1, &r1);
	collect(h2, &r2);
	struct srt_sched_info i1, i2;
	srt_sched_poll(h1, &i1);
	srt_sched_poll(h2, &i2);
	struct srt_sched_stats st;
	srt_sched_stats(s, &st);
	ck_assert_uint_eq(i1.cached_tokens, 0);
	ck_assert_msg(i2.cached_tokens == 512, "second request hit %llu tokens, want 512",
		      (unsigned long long)i2.cached_tokens);
	ck_assert_uint_ge(st.deferred_for_prefix, 1);
	ck_assert_uint_le(st.computed_tokens, 700 + (700 - 512) + 2 * 3);
	ck_assert_uint_eq(r1.n, r2.n);
	ck_assert_int_eq(memcmp(r1.toks, r2.toks, sizeof(int32_t) * r1.n), 0);
	srt_sched_release(h1);
	srt_sched_release(h2);
	srt_sched_destroy(s);
	srt_engine_close(e);
}
END_TEST

/*
 * Requests whose prefix is in L2 are admitted while their pages load and join the batch a step
 * later (the load overlaps the other requests' forward); their tokens do not change.
 */
START_TEST(tokens_unchanged_when_l2_loads_overlap_the_forward)
{
	struct srt_engine *e0 = open_engine(NULL, 64);
	struct spec sp[NREQ];
	struct result alone[NREQ], tiered[NREQ];
	make_specs(sp, srt_engine_model(e0)->vocab_size);
	run_alone(e0, sp, alone);
	srt_engine_close(e0);
	char dir[4096], cfg[4200], err[2048];
	snprintf(dir, sizeof(dir), "%s/models/tiny", env_or("SRT_BUILD_DIR", "."));
	snprintf(cfg, sizeof(cfg), "%s/tests/sched_l2_%d.ini", env_or("SRT_BUILD_DIR", "."),
		 (int)getpid());
	FILE *f = fopen(cfg, "w");
	ck_assert_ptr_nonnull(f);
	fputs("[tier.l2]\nplugin = host\nbudget = 64MiB\n[tier.l3]\nplugin = none\n"
	      "[cache]\nprefetch = on\n", f);
	ck_assert_int_eq(fclose(f), 0);
	struct srt_engine_opts o = {.model = dir, .config_path = cfg, .threads = 2, .profile = -1,
				    .chunk = 64, .quiet = 1, .tiers = 1};
	struct srt_engine *e = NULL;
	ck_assert_msg(!srt_engine_open(&o, &e, err, sizeof(err)), "%s", err);
	remove(cfg);
	run_alone(e, sp, tiered); /* fills L1 (and L2, write-through) */
	assert_same(alone, tiered, "first pass with tiers");
	struct srt_rdx_cache *c = srt_engine_cache(e);
	for (uint32_t p = 0; p < srt_rdx_pool_count(c); p++)
		srt_rdx_evict(c, p, 0, NULL); /* every prefix now in L2 only */
	struct srt_sched_config sc = {.token_budget = 96, .max_running = 5};
	struct srt_sched *s;
	struct srt_sched_req *h[NREQ];
	ck_assert_msg(!srt_sched_create(e, &sc, &s, err, sizeof(err)), "%s", err);
	for (int i = 0; i < NREQ; i++)
		h[i] = submit(s, &sp[i]);
	for (int i = 0; i < NREQ; i++) {
		collect(h[i], &tiered[i]);
		srt_sched_release(h[i]);
	}
	struct srt_sched_stats st;
	srt_sched_stats(s, &st);
	srt_sched_destroy(s);
	assert_same(alone, tiered, "L2 hits, loads overlapping the forward");
	fprintf(stderr, "L2 pass: %llu tokens from L2, %llu admissions loaded during a forward\n",
		(unsigned long long)st.hit_tokens[1], (unsigned long long)st.overlapped_loads);
	ck_assert_uint_gt(st.hit_tokens[1], 0);
	ck_assert_uint_gt(st.overlapped_loads, 0);
	ck_assert_msg(!srt_rdx_cache_check(c, err, sizeof(err)), "%s", err);
	free_specs(sp);
	srt_engine_close(e);
}
END_TEST

START_TEST(cancel_frees_the_sequence)
{
	struct srt_engine *e = open_engine(NULL, 64);
	char err[512];
	struct srt_sched *s;
	ck_assert_msg(!srt_sched_create(e, NULL, &s, err, sizeof(err)), "%s", err);
	int32_t p[40];
	for (int i = 0; i < 40; i++)
		p[i] = 2 + i;
	struct spec a = {.prompt = p, .n = 40, .p = {.max_tokens = 100000, .top_p = 1,
						     .ignore_eos = 1}};
	struct srt_sched_req *h = submit(s, &a);
	struct srt_sched_info in;
	srt_sched_wait(h, 2, SIZE_MAX - 1, &in);
	ck_assert_int_eq(in.state, SRT_SCHED_RUNNING);
	srt_sched_cancel(h);
	srt_sched_wait(h, UINT64_MAX - 1, SIZE_MAX - 1, &in);
	ck_assert_int_eq(in.finish, SRT_SCHED_CANCELLED);
	srt_sched_drain(s);
	struct srt_rdx_stats rs;
	srt_rdx_stats(srt_engine_cache(e), &rs);
	ck_assert_uint_eq(rs.live_requests, 0);
	srt_sched_release(h);
	/* releasing a running request cancels it too */
	h = submit(s, &a);
	srt_sched_wait(h, 1, SIZE_MAX - 1, &in);
	srt_sched_release(h);
	srt_sched_drain(s);
	srt_rdx_stats(srt_engine_cache(e), &rs);
	ck_assert_uint_eq(rs.live_requests, 0);
	srt_sched_destroy(s);
	srt_engine_close(e);
}
END_TEST

START_TEST(limits_and_bad_requests)
{
	struct srt_engine *e = open_engine(NULL, 64);
	char err[512];
	struct srt_sched *s;
	struct srt_sched_config cfg = {.max_context = 100};
	ck_assert_msg(!srt_sched_create(e, &cfg, &s, err, sizeof(err)), "%s", err);
	int32_t p[60];
	for (int i = 0; i < 60; i++)
		p[i] = 2 + i;
	struct srt_sched_params prm = {.max_tokens = 5, .top_p = 1, .ignore_eos = 1};
	struct srt_sched_req *h = NULL;
	ck_assert_int_eq(srt_sched_submit(s, p, 0, &prm, &h, err, sizeof(err)), SRT_EINVAL);
	p[3] = 512;
	ck_assert_int_eq(srt_sched_submit(s, p, 60, &prm, &h, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "512") != NULL, "message: %s", err);
	p[3] = -1;
	ck_assert_int_eq(srt_sched_submit(s, p, 60, &prm, &h, err, sizeof(err)), SRT_EINVAL);
	p[3] = 5;
	prm.max_tokens = 41;
	ck_assert_int_eq(srt_sched_submit(s, p, 60, &prm, &h, err, sizeof(err)), SRT_EINVAL);
	prm.max_tokens = 0;
	ck_assert_int_eq(srt_sched_submit(s, p, 60, &prm, &h, err, sizeof(err)), SRT_EINVAL);
	prm.n_stop = 1;
	prm.stop[0] = "x";
	prm.max_tokens = 3;
	ck_assert_int_eq(srt_sched_submit(s, p, 60, &prm, &h, err, sizeof(err)), SRT_EINVAL);
	prm.n_stop = 0;
	/* max_tokens ends with "length" after exactly max_tokens */
	struct spec a = {.prompt = p, .n = 60, .p = prm};
	struct result r;
	h = submit(s, &a);
	collect(h, &r);
	ck_assert_uint_eq(r.n, 3);
	ck_assert_int_eq(r.finish, SRT_SCHED_LENGTH);
	srt_sched_release(h);
	/* a stop id: the first generated token, made a stop id, ends the request there */
	int32_t first = r.toks[0];
	a.p.stop_ids = &first;
	a.p.n_stop_ids = 1;
	h = submit(s, &a);
	collect(h, &r);
	ck_assert_uint_eq(r.n, 1);
	ck_assert_int_eq(r.finish, SRT_SCHED_STOP);
	srt_sched_release(h);
	/* after shutdown nothing is taken */
	srt_sched_shutdown(s, 0);
	ck_assert_int_eq(srt_sched_submit(s, p, 60, &prm, &h, err, sizeof(err)), SRT_EBUSY);
	srt_sched_destroy(s);
	srt_engine_close(e);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("sched");
	tcase_add_test(tc, tokens_independent_of_arrival_order_and_batching);
	tcase_add_test(tc, tokens_unchanged_under_memory_pressure_with_preemption);
	tcase_add_test(tc, identical_concurrent_prefixes_computed_once);
	tcase_add_test(tc, tokens_unchanged_when_l2_loads_overlap_the_forward);
	tcase_add_test(tc, cancel_frees_the_sequence);
	tcase_add_test(tc, limits_and_bad_requests);
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
