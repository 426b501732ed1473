/*
 * Tests of core/plugin: the host table (thread pool, allocation, logging), the loader's checks
 * against real broken shared objects, search order and shadowing, instances of one valid
 * plugin of each kind doing real work, and the `shadowrt plugins` command.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shadowrt/shadowrt.h>

#include "plugin/host.h"
#include "plugin/registry.h"

static char fx_buf[4][1024];
static int fx_next;

/* <fixtures>/<rel>; valid until four more calls. */
static const char *fx(const char *rel)
{
	char *b = fx_buf[fx_next++ % 4];
	snprintf(b, sizeof(fx_buf[0]), "%s/%s", SRT_FX_DIR, rel);
	return b;
}

static struct srt_host *host;

static void host_setup(void)
{
	char why[256];
	unsetenv(SRT_PLUGIN_PATH_ENV);
	srt_log_set_level(SRT_LOG_ERROR); /* rejections are asserted, not logged, here */
	ck_assert_int_eq(srt_host_create(2, &host, why, sizeof(why)), 0);
}

static void host_teardown(void)
{
	srt_host_destroy(host);
	host = NULL;
}

static struct srt_registry *open_dirs(const char *a, const char *b)
{
	const char *dirs[2] = {a, b};
	struct srt_registry *reg = NULL;
	ck_assert_int_eq(srt_registry_open(&reg, dirs, b ? 2 : a ? 1 : 0, host,
					   SRT_REGISTRY_NO_ENV | SRT_REGISTRY_NO_DEFAULTS),
			 0);
	return reg;
}

/* The entry whose file is <file>, or NULL. */
static const struct srt_plugin_info *by_file(const struct srt_registry *reg, const char *file)
{
	for (size_t i = 0; i < srt_registry_count(reg); i++) {
		const struct srt_plugin_info *p = srt_registry_at(reg, i);
		const char *base = strrchr(p->path, '/');
		if (!strcmp(base ? base + 1 : p->path, file))
			return p;
	}
	return NULL;
}

/* --- host: thread pool ----------------------------------------------------------------------- */

struct cover {
	atomic_int *hits;
	int nthreads;
	atomic_int calls_per_tid[64];
	int64_t begin_of[64], end_of[64];
	atomic_int bad_tid;
};

static void cover_fn(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct cover *c = ctx;
	if (tid < 0 || tid >= c->nthreads || tid >= 64) {
		atomic_fetch_add(&c->bad_tid, 1);
		return;
	}
	atomic_fetch_add(&c->calls_per_tid[tid], 1);
	c->begin_of[tid] = begin;
	c->end_of[tid] = end;
	for (int64_t i = begin; i < end; i++)
		atomic_fetch_add(&c->hits[i], 1);
}

START_TEST(test_parallel_for_covers_every_index_exactly_once)
{
	const int threads[] = {1, 2, 3, 4, 7, 16};
	const int64_t sizes[] = {0, 1, 2, 3, 5, 16, 17, 1000, 100003};
	char why[256];
	for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
		struct srt_host *h;
		ck_assert_int_eq(srt_host_create(threads[t], &h, why, sizeof(why)), 0);
		ck_assert_int_eq(h->nthreads, threads[t]);
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			int64_t n = sizes[s];
			struct cover c = {.nthreads = h->nthreads};
			c.hits = calloc((size_t)n + 1, sizeof(*c.hits));
			h->parallel_for(h, n, cover_fn, &c);
			ck_assert_int_eq(atomic_load(&c.bad_tid), 0);
			for (int64_t i = 0; i < n; i++)
				ck_assert_msg(c.hits[i] == 1, "threads %d n %lld: index %lld hit %d times",
					      threads[t], (long long)n, (long long)i, (int)c.hits[i]);
			/* Contiguous ranges, in tid order, one per thread that had work. */
			int64_t expect_begin = 0;
			int used = n < h->nthreads ? (int)n : h->nthreads;
			for (int k = 0; k < h->nthreads; k++) {
				int calls = atomic_load(&c.calls_per_tid[k]);
				ck_assert_int_le(calls, 1);
				if (k >= used) {
					ck_assert_int_eq(calls, 0);
					continue;
				}
				if (!calls)
					continue; /* empty range: never called */
				ck_assert_int_eq(c.begin_of[k], expect_begin);
				expect_begin = c.end_of[k];
			}
			ck_assert_int_eq(expect_begin, n);
			free(c.hits);
		}
		srt_host_destroy(h);
	}
}
END_TEST

START_TEST(test_host_zero_threads_means_online_cpus)
{
	char why[256];
	struct srt_host *h;
	ck_assert_int_eq(srt_host_create(0, &h, why, sizeof(why)), 0);
	ck_assert_int_eq(h->nthreads, (int)sysconf(_SC_NPROCESSORS_ONLN));
	ck_assert_uint_eq(h->struct_size, sizeof(struct srt_host));
	ck_assert_int_eq(h->abi_major, SRT_ABI_MAJOR);
	ck_assert(SRT_HOST_HAS(h, parallel_for));
	srt_host_destroy(h);
}
END_TEST

START_TEST(test_host_rejects_negative_thread_count)
{
	char why[256] = "";
	struct srt_host *h = (struct srt_host *)1;
	ck_assert_int_eq(srt_host_create(-3, &h, why, sizeof(why)), SRT_EINVAL);
	ck_assert_ptr_null(h);
	ck_assert_ptr_nonnull(strstr(why, "threads = -3"));
}
END_TEST

struct nest {
	const struct srt_host *h;
	atomic_int inner_hits[8 * 10];
	atomic_int tid_mismatch;
};

static void inner_fn(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct nest **pp = ctx;
	struct nest *n = pp[0];
	int64_t base = (int64_t)(intptr_t)pp[1];
	int outer_tid = (int)(intptr_t)pp[2];
	if (tid != outer_tid)
		atomic_fetch_add(&n->tid_mismatch, 1);
	for (int64_t i = begin; i < end; i++)
		atomic_fetch_add(&n->inner_hits[base + i], 1);
}

static void outer_fn(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct nest *n = ctx;
	for (int64_t i = begin; i < end; i++) {
		void *args[3] = {n, (void *)(intptr_t)(i * 10), (void *)(intptr_t)tid};
		n->h->parallel_for(n->h, 10, inner_fn, args);
	}
}

START_TEST(test_parallel_for_nested_call_runs_inline_without_deadlock)
{
	char why[256];
	struct srt_host *h;
	ck_assert_int_eq(srt_host_create(4, &h, why, sizeof(why)), 0);
	struct nest n = {.h = h};
	h->parallel_for(h, 8, outer_fn, &n);
	for (int i = 0; i < 80; i++)
		ck_assert_int_eq(n.inner_hits[i], 1);
	ck_assert_int_eq(n.tid_mismatch, 0);
	srt_host_destroy(h);
}
END_TEST

struct caller {
	const struct srt_host *h;
	atomic_llong sum;
};

static void add_fn(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct caller *c = ctx;
	(void)tid;
	long long s = 0;
	for (int64_t i = begin; i < end; i++)
		s += i;
	atomic_fetch_add(&c->sum, s);
}

static void *caller_main(void *arg)
{
	struct caller *c = arg;
	for (int r = 0; r < 200; r++)
		c->h->parallel_for(c->h, 1000, add_fn, c);
	return NULL;
}

START_TEST(test_parallel_for_from_two_threads_at_once_is_correct)
{
	char why[256];
	struct srt_host *h;
	ck_assert_int_eq(srt_host_create(3, &h, why, sizeof(why)), 0);
	struct caller a = {.h = h}, b = {.h = h};
	pthread_t ta, tb;
	ck_assert_int_eq(pthread_create(&ta, NULL, caller_main, &a), 0);
	ck_assert_int_eq(pthread_create(&tb, NULL, caller_main, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	ck_assert_int_eq(a.sum, 200LL * 999 * 1000 / 2);
	ck_assert_int_eq(b.sum, 200LL * 999 * 1000 / 2);
	srt_host_destroy(h);
}
END_TEST

/* Many back-to-back jobs (the decode pattern: short regions, one after another), with the
 * pool sleeping at once, spinning a little, and spinning long; every job's sum is checked,
 * so a lost wake-up hangs and a job read while being rewritten gives a wrong sum. */
START_TEST(test_parallel_for_back_to_back_jobs_any_spin_budget)
{
	const char *spins[] = {"0", "5", "200", "1000000"};
	const int threads[] = {2, 3};
	char why[256] = "";
	for (size_t s = 0; s < sizeof(spins) / sizeof(spins[0]); s++) {
		ck_assert_int_eq(setenv("SRT_POOL_SPIN_US", spins[s], 1), 0);
		for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
			struct srt_host *h;
			ck_assert_int_eq(srt_host_create(threads[t], &h, why, sizeof(why)), 0);
			for (int r = 0; r < 2000; r++) {
				int64_t n = 1 + r % 7; /* also fewer ranges than threads */
				struct caller c = {.h = h};
				h->parallel_for(h, n, add_fn, &c);
				ck_assert_msg(c.sum == n * (n - 1) / 2, "spin %s threads %d job %d: sum %lld",
					      spins[s], threads[t], r, (long long)c.sum);
			}
			srt_host_destroy(h);
		}
	}
	unsetenv("SRT_POOL_SPIN_US");
}
END_TEST

/* Wall seconds a test may wait for something that must happen (env SRT_TEST_WAIT_S, default
 * 120): the outcome is asserted, not the time. */
static double wait_limit_s(void)
{
	const char *s = getenv("SRT_TEST_WAIT_S");
	return s && atof(s) > 0 ? atof(s) : 120.0;
}

static void sleep_fn(void *ctx, int64_t begin, int64_t end, int tid)
{
	(void)ctx, (void)begin, (void)end, (void)tid;
	struct timespec ts = {0, 3000000};
	nanosleep(&ts, NULL);
}

/* The pool's one-thread time counts the caller's stretches between jobs and the jobs it runs
 * alone (lower bounds only: a loaded machine makes every stretch longer). */
START_TEST(test_pool_one_thread_time_counts_serial_stretches)
{
	char why[256] = "";
	struct srt_host *h;
	ck_assert_int_eq(srt_host_create(2, &h, why, sizeof(why)), 0);
	ck_assert_int_eq(srt_host_pool_one_thread_ns(h), 0); /* off */
	srt_host_pool_timing(h, 1);
	h->parallel_for(h, 1, sleep_fn, NULL); /* one unit: on the caller alone, 3 ms */
	struct timespec ts = {0, 4000000};
	nanosleep(&ts, NULL); /* a serial stretch of 4 ms */
	h->parallel_for(h, 2, sleep_fn, NULL); /* both threads: not counted */
	const long long ns = srt_host_pool_one_thread_ns(h);
	ck_assert_msg(ns >= 7000000LL, "one-thread time %lld ns, expected >= 7 ms", ns);
	srt_host_pool_timing(h, 0);
	ck_assert_int_eq(srt_host_pool_one_thread_ns(h), 0);
	srt_host_destroy(h);
}
END_TEST

/* The spin is bounded: after a job, idle workers go to sleep (no busy-wait forever), and a
 * sleeping pool still wakes for the next job. */
START_TEST(test_idle_pool_workers_stop_spinning_and_sleep)
{
	char why[256] = "";
	struct srt_host *h;
	ck_assert_int_eq(setenv("SRT_POOL_SPIN_US", "2000", 1), 0);
	ck_assert_int_eq(srt_host_create(3, &h, why, sizeof(why)), 0);
	unsetenv("SRT_POOL_SPIN_US");
	for (int round = 0; round < 2; round++) {
		struct caller c = {.h = h};
		long long sleeps0 = srt_host_pool_sleeps(h);
		h->parallel_for(h, 1000, add_fn, &c);
		ck_assert_int_eq(c.sum, 999LL * 1000 / 2);
		double waited = 0;
		while (srt_host_pool_sleeping(h) < 2 && waited < wait_limit_s()) {
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
			waited += 1e-3;
		}
		ck_assert_msg(srt_host_pool_sleeping(h) == 2,
			      "round %d: %d of 2 workers asleep after %.0f s idle (spin budget 2 ms)",
			      round, srt_host_pool_sleeping(h), waited);
		ck_assert_int_ge(srt_host_pool_sleeps(h), sleeps0 + 2);
	}
	srt_host_destroy(h);
}
END_TEST

START_TEST(test_host_rejects_bad_spin_budget)
{
	const char *bad[] = {"abc", "-1", "12x", "1000001"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char why[256] = "";
		struct srt_host *h = (struct srt_host *)1;
		ck_assert_int_eq(setenv("SRT_POOL_SPIN_US", bad[i], 1), 0);
		ck_assert_int_eq(srt_host_create(2, &h, why, sizeof(why)), SRT_EINVAL);
		ck_assert_ptr_null(h);
		ck_assert_msg(strstr(why, "SRT_POOL_SPIN_US") && strstr(why, bad[i]), "why: %s", why);
	}
	unsetenv("SRT_POOL_SPIN_US");
}
END_TEST

START_TEST(test_many_hosts_each_run_their_own_pool)
{
	enum { N_HOSTS = 12 };
	char why[256] = "";
	struct srt_host *hs[N_HOSTS];
	for (int i = 0; i < N_HOSTS; i++)
		ck_assert_int_eq(srt_host_create(1 + i % 3, &hs[i], why, sizeof(why)), 0);
	/* Each host's parallel_for reaches its own pool. */
	for (int i = 0; i < N_HOSTS; i++) {
		struct caller c = {.h = hs[i]};
		hs[i]->parallel_for(hs[i], 100, add_fn, &c);
		ck_assert_int_eq(c.sum, 4950);
	}
	for (int i = 0; i < N_HOSTS; i++)
		srt_host_destroy(hs[i]);
}
END_TEST

START_TEST(test_host_alloc_honours_alignment_and_refuses_bad_alignment)
{
	const size_t aligns[] = {sizeof(void *), 16, 64, 4096};
	for (size_t i = 0; i < 4; i++) {
		char *p = host->alloc(1000, aligns[i]);
		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq((uintptr_t)p % aligns[i], 0);
		memset(p, 0xab, 1000);
		host->free(p);
	}
	void *z = host->alloc(0, 64);
	ck_assert_ptr_nonnull(z);
	host->free(z);
	ck_assert_ptr_null(host->alloc(64, 48));
	ck_assert_ptr_null(host->alloc(64, 2));
}
END_TEST

START_TEST(test_log_prefixes_plugin_name_and_filters_by_level)
{
	FILE *f = tmpfile();
	ck_assert_ptr_nonnull(f);
	srt_log_set_stream(f);
	srt_log_set_level(SRT_LOG_INFO);
	host->log(SRT_LOG_WARN, "csa", "page %d missing", 7);
	host->log(SRT_LOG_DEBUG, "csa", "hidden at info level");
	host->log(SRT_LOG_INFO, NULL, "core line\n");
	srt_log_set_stream(NULL);
	rewind(f);
	char buf[512] = "";
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	ck_assert_str_eq(buf, "shadowrt[csa] warn: page 7 missing\nshadowrt info: core line\n");
	srt_log_set_level(SRT_LOG_WARN);
	ck_assert_int_eq(srt_log_get_level(), SRT_LOG_WARN);
}
END_TEST

/* --- registry: the valid plugins ------------------------------------------------------------- */

START_TEST(test_valid_plugin_of_each_kind_loads_and_is_found_by_name)
{
	struct srt_registry *reg = open_dirs(fx("good"), NULL);
	ck_assert_uint_eq(srt_registry_count(reg), 5);
	for (size_t i = 0; i < 5; i++)
		ck_assert_msg(srt_registry_at(reg, i)->state == SRT_PLUGIN_OK, "%s: %s",
			      srt_registry_at(reg, i)->path, srt_registry_at(reg, i)->reason);
	const struct {
		enum srt_kind kind;
		const char *name, *file, *version;
	} want[] = {
		{SRT_KIND_ATTENTION, "fx-attention", "attention.so", "1.0.0"},
		{SRT_KIND_MOE, "fx-moe", "moe.so", "1.0.0"},
		{SRT_KIND_RESIDUAL, "fx-plain", "residual.so", "0.3"},
		{SRT_KIND_TIER, "fx-arena", "arena.so", "1.0.0"},
		{SRT_KIND_TIER, "fx-store", "store.so", "1.0.0"},
	};
	char why[1024];
	for (size_t i = 0; i < 5; i++) {
		const struct srt_plugin_info *p = NULL;
		ck_assert_int_eq(srt_registry_find(reg, want[i].kind, want[i].name, &p, why,
						   sizeof(why)), 0);
		ck_assert_str_eq(p->desc->version, want[i].version);
		ck_assert_ptr_eq(p, by_file(reg, want[i].file));
		ck_assert_ptr_nonnull(p->vtable);
		ck_assert_int_eq(p->abi_major, SRT_ABI_MAJOR);
	}
	/* Scanned in file-name order. */
	ck_assert_ptr_nonnull(strstr(srt_registry_at(reg, 0)->path, "arena.so"));
	ck_assert_ptr_nonnull(strstr(srt_registry_at(reg, 4)->path, "store.so"));
	srt_registry_close(reg);
}
END_TEST

/* --- registry: every refusal, with its reason ------------------------------------------------ */

static void expect_rejected(const char *file, int code, const char *r1, const char *r2)
{
	struct srt_registry *reg = open_dirs(fx("bad"), NULL);
	const struct srt_plugin_info *p = by_file(reg, file);
	ck_assert_msg(p != NULL, "%s was not scanned", file);
	ck_assert_msg(p->state == SRT_PLUGIN_REJECTED, "%s was not rejected", file);
	ck_assert_int_eq(p->code, code);
	ck_assert_ptr_null(p->vtable);
	ck_assert_msg(strstr(p->reason, p->path) != NULL, "reason does not name the file: %s",
		      p->reason);
	ck_assert_msg(strstr(p->reason, r1) != NULL, "'%s' not in: %s", r1, p->reason);
	if (r2)
		ck_assert_msg(strstr(p->reason, r2) != NULL, "'%s' not in: %s", r2, p->reason);
	/* Requesting it by path gives the same refusal. */
	const struct srt_plugin_info *q = (void *)1;
	char why[1024];
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_ATTENTION, p->path, &q, why, sizeof(why)),
			 code);
	ck_assert_ptr_null(q);
	ck_assert_str_eq(why, p->reason);
	srt_registry_close(reg);
}

START_TEST(test_reject_text_file_named_so)
{
	expect_rejected("x.so", SRT_EINVAL, "not a loadable shared object", "x.so");
}
END_TEST

START_TEST(test_reject_library_without_entry_symbol)
{
	expect_rejected("no_entry.so", SRT_EINVAL, "no entry symbol srt_plugin_entry", NULL);
}
END_TEST

START_TEST(test_reject_entry_returning_null)
{
	expect_rejected("null_desc.so", SRT_EINVAL, "srt_plugin_entry() returned NULL", NULL);
}
END_TEST

START_TEST(test_reject_abi_major_mismatch_names_both_versions)
{
	expect_rejected("abi_major.so", SRT_EVERSION, "ABI major version mismatch",
			"plugin built for ABI 2.0, core is ABI 1.1");
	struct srt_registry *reg = open_dirs(fx("bad"), NULL);
	const struct srt_plugin_info *p = by_file(reg, "abi_major.so");
	ck_assert_int_eq(p->abi_major, 2);
	ck_assert_ptr_null(p->desc); /* never trusted past the version */
	srt_registry_close(reg);
}
END_TEST

START_TEST(test_reject_newer_minor_names_both_versions)
{
	expect_rejected("newer_minor.so", SRT_EVERSION, "needs a newer core",
			"built for ABI 1.7, core is ABI 1.1");
}
END_TEST

START_TEST(test_reject_descriptor_struct_size_too_small)
{
	char want[128];
	snprintf(want, sizeof(want), "struct_size 16 is smaller than the ABI v1 descriptor (%zu",
		 (size_t)SRT_PLUGIN_DESC_V1_SIZE);
	expect_rejected("desc_small.so", SRT_EVERSION, want, "core ABI 1.1");
}
END_TEST

START_TEST(test_reject_unknown_kind)
{
	expect_rejected("unknown_kind.so", SRT_EINVAL, "unknown plugin kind 9", NULL);
}
END_TEST

START_TEST(test_reject_missing_create)
{
	expect_rejected("no_create.so", SRT_EINVAL, "missing required descriptor member create",
			NULL);
}
END_TEST

START_TEST(test_reject_attention_without_forward)
{
	expect_rejected("attn_no_forward.so", SRT_EINVAL,
			"attention plugin 'fx-broken' is missing required method forward", NULL);
}
END_TEST

START_TEST(test_reject_attention_vtable_too_small)
{
	expect_rejected("attn_vt_small.so", SRT_EVERSION, "attention vtable struct_size 8",
			"smaller than the ABI v1 attention vtable");
}
END_TEST

START_TEST(test_reject_moe_without_forward)
{
	expect_rejected("moe_no_forward.so", SRT_EINVAL,
			"moe plugin 'fx-broken' is missing required method forward", NULL);
}
END_TEST

START_TEST(test_reject_residual_without_head)
{
	expect_rejected("res_no_head.so", SRT_EINVAL, "missing required method head", NULL);
}
END_TEST

START_TEST(test_reject_tier_arena_without_copy_to_host)
{
	expect_rejected("arena_no_copy.so", SRT_EINVAL,
			"tier plugin 'fx-broken' is missing required method copy_to_host (page arena)",
			NULL);
}
END_TEST

START_TEST(test_reject_tier_store_without_remove)
{
	expect_rejected("store_no_remove.so", SRT_EINVAL,
			"missing required method remove (keyed store)", NULL);
}
END_TEST

START_TEST(test_reject_tier_with_neither_family_cap)
{
	expect_rejected("tier_no_caps.so", SRT_EINVAL,
			"declares neither SRT_CAP_PAGE_ARENA nor SRT_CAP_KEYED_STORE", NULL);
}
END_TEST

START_TEST(test_reject_failed_probe_keeps_plugin_reason)
{
	expect_rejected("probe_fail.so", SRT_ENOTSUP, "probe failed",
			"fixture needs the frobnicator extension");
}
END_TEST

START_TEST(test_bad_dir_has_no_usable_plugin)
{
	struct srt_registry *reg = open_dirs(fx("bad"), NULL);
	ck_assert_uint_eq(srt_registry_count(reg), 16);
	for (size_t i = 0; i < srt_registry_count(reg); i++)
		ck_assert_int_eq(srt_registry_at(reg, i)->state, SRT_PLUGIN_REJECTED);
	srt_registry_close(reg);
}
END_TEST

/* --- registry: lookups ----------------------------------------------------------------------- */

START_TEST(test_find_missing_file_by_path)
{
	struct srt_registry *reg = open_dirs(NULL, NULL);
	const struct srt_plugin_info *p = (void *)1;
	char why[1024];
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_MOE, "/nonexistent/dir/csa.so", &p, why,
					   sizeof(why)),
			 SRT_ENOENT);
	ck_assert_ptr_null(p);
	ck_assert_str_eq(why, "plugin file /nonexistent/dir/csa.so: No such file or directory");
	srt_registry_close(reg);
}
END_TEST

START_TEST(test_find_by_path_loads_a_file_outside_the_search_path)
{
	struct srt_registry *reg = open_dirs(fx("bad"), NULL);
	const struct srt_plugin_info *p = NULL;
	char why[1024];
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_ATTENTION, fx("good/attention.so"), &p,
					   why, sizeof(why)),
			 0);
	ck_assert_str_eq(p->desc->name, "fx-attention");
	ck_assert_int_eq(p->origin, SRT_ORIGIN_PATH);
	size_t n = srt_registry_count(reg);
	/* A second request finds the same entry instead of loading it again. */
	const struct srt_plugin_info *q = NULL;
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_ATTENTION, fx("good/../good/attention.so"),
					   &q, why, sizeof(why)),
			 0);
	ck_assert_ptr_eq(p, q);
	ck_assert_uint_eq(srt_registry_count(reg), n);
	/* Asking for it as another kind says what it is. */
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_TIER, fx("good/attention.so"), &q, why,
					   sizeof(why)),
			 SRT_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "is a attention plugin, a tier plugin was requested"));
	srt_registry_close(reg);
}
END_TEST

START_TEST(test_find_unknown_name_lists_the_whole_search_path)
{
	const char *dirs[3] = {fx("good"), "/nonexistent/plugins", fx("bad")};
	struct srt_registry *reg = NULL;
	ck_assert_int_eq(srt_registry_open(&reg, dirs, 3, host, SRT_REGISTRY_NO_ENV | SRT_REGISTRY_NO_DEFAULTS), 0);
	ck_assert_uint_eq(srt_registry_dir_count(reg), 3);
	ck_assert_int_eq(srt_registry_dir_at(reg, 1)->exists, 0);
	const struct srt_plugin_info *p = (void *)1;
	char why[4096];
	FILE *log = tmpfile();
	srt_log_set_stream(log);
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_ATTENTION, "csa", &p, why, sizeof(why)),
			 SRT_ENOENT);
	srt_log_set_stream(NULL);
	ck_assert_ptr_null(p);
	ck_assert_ptr_nonnull(strstr(why, "no attention plugin named 'csa' in the search path:"));
	ck_assert_ptr_nonnull(strstr(why, fx("good")));
	ck_assert_ptr_nonnull(strstr(why, "/nonexistent/plugins (config, missing)"));
	ck_assert_ptr_nonnull(strstr(why, fx("bad")));
	/* ... and nothing went to the log at the default level: the caller prints `why`, so the
	 * user reads the message once (issue 13). */
	rewind(log);
	char logged[4096] = "";
	logged[fread(logged, 1, sizeof(logged) - 1, log)] = '\0';
	fclose(log);
	ck_assert_ptr_null(strstr(logged, "no attention plugin named 'csa'"));
	/* A refused file whose name matches the request is pointed at. */
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_ATTENTION, "probe_fail", &p, why,
					   sizeof(why)),
			 SRT_ENOENT);
	ck_assert_ptr_nonnull(strstr(why, "; rejected: "));
	ck_assert_ptr_nonnull(strstr(why, "frobnicator"));
	srt_registry_close(reg);
}
END_TEST

START_TEST(test_find_name_of_other_kind_says_which_kind_it_is)
{
	struct srt_registry *reg = open_dirs(fx("good"), NULL);
	const struct srt_plugin_info *p = NULL;
	char why[1024];
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_ATTENTION, "fx-moe", &p, why, sizeof(why)),
			 SRT_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "plugin 'fx-moe'"));
	ck_assert_ptr_nonnull(strstr(why, "is a moe plugin, a attention plugin was requested"));
	srt_registry_close(reg);
}
END_TEST

START_TEST(test_first_directory_wins_and_later_duplicate_is_shadowed)
{
	struct srt_registry *reg = open_dirs(fx("dup_a"), fx("dup_b"));
	const struct srt_plugin_info *p = NULL;
	char why[1024];
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_MOE, "fx-dup", &p, why, sizeof(why)), 0);
	ck_assert_str_eq(p->desc->version, "from-a");
	const struct srt_plugin_info *b = srt_registry_at(reg, 1);
	ck_assert_ptr_nonnull(strstr(b->path, "dup_b/dup.so"));
	ck_assert_int_eq(b->state, SRT_PLUGIN_SHADOWED);
	ck_assert_ptr_nonnull(strstr(b->reason, "shadowed by"));
	ck_assert_ptr_nonnull(strstr(b->reason, "dup_a/dup.so"));
	/* The shadowed file can still be requested by its path. */
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_MOE, b->path, &p, why, sizeof(why)), 0);
	ck_assert_str_eq(p->desc->version, "from-b");
	srt_registry_close(reg);
}
END_TEST

START_TEST(test_plugin_path_env_is_searched_in_order_after_config_dirs)
{
	char env[2048];
	char why[1024];
	const struct srt_plugin_info *p = NULL;
	struct srt_registry *reg = NULL;

	/* Env alone: its order decides; empty components and missing directories are skipped. */
	snprintf(env, sizeof(env), "::%s:/nonexistent/x:%s:", fx("dup_b"), fx("dup_a"));
	setenv(SRT_PLUGIN_PATH_ENV, env, 1);
	ck_assert_int_eq(srt_registry_open(&reg, NULL, 0, host, SRT_REGISTRY_NO_DEFAULTS), 0);
	ck_assert_uint_eq(srt_registry_dir_count(reg), 3);
	ck_assert_int_eq(srt_registry_dir_at(reg, 0)->origin, SRT_ORIGIN_ENV);
	ck_assert_int_eq(srt_registry_dir_at(reg, 1)->exists, 0);
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_MOE, "fx-dup", &p, why, sizeof(why)), 0);
	ck_assert_str_eq(p->desc->version, "from-b");
	ck_assert_int_eq(p->origin, SRT_ORIGIN_ENV);
	srt_registry_close(reg);

	/* A config directory comes before the environment. */
	const char *dirs[1] = {fx("dup_a")};
	ck_assert_int_eq(srt_registry_open(&reg, dirs, 1, host, SRT_REGISTRY_NO_DEFAULTS), 0);
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_MOE, "fx-dup", &p, why, sizeof(why)), 0);
	ck_assert_str_eq(p->desc->version, "from-a");
	ck_assert_int_eq(p->origin, SRT_ORIGIN_CONFIG);
	/* dup_a, given twice (config and env), is scanned once. */
	ck_assert_uint_eq(srt_registry_dir_count(reg), 3);
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_MOE, "fx-only-b", &p, why, sizeof(why)), 0);
	srt_registry_close(reg);

	/* SRT_REGISTRY_NO_ENV ignores it. */
	ck_assert_int_eq(srt_registry_open(&reg, NULL, 0, host,
					   SRT_REGISTRY_NO_ENV | SRT_REGISTRY_NO_DEFAULTS), 0);
	ck_assert_uint_eq(srt_registry_dir_count(reg), 0);
	srt_registry_close(reg);
	unsetenv(SRT_PLUGIN_PATH_ENV);
}
END_TEST

START_TEST(test_default_search_path_is_exe_relative_then_install_dir)
{
	struct srt_registry *reg = NULL;
	ck_assert_int_eq(srt_registry_open(&reg, NULL, 0, host, SRT_REGISTRY_NO_ENV), 0);
	size_t n = srt_registry_dir_count(reg);
	ck_assert_uint_ge(n, 1);
	/* This test runs from <build>/tests: next to it is <build>/lib/shadowrt/plugins. */
	const struct srt_search_dir *d = srt_registry_dir_at(reg, 0);
	ck_assert_int_eq(d->origin, SRT_ORIGIN_EXE);
	const char *build = getenv("SRT_BUILD_DIR");
	if (build && d->exists) {
		char want[2048], *real_build = realpath(build, NULL);
		snprintf(want, sizeof(want), "%s/", real_build);
		free(real_build);
		ck_assert_msg(!strncmp(d->path, want, strlen(want)), "%s not under %s", d->path, want);
	}
	ck_assert_ptr_nonnull(strstr(d->path, "shadowrt/plugins"));
	if (n == 2)
		ck_assert_int_eq(srt_registry_dir_at(reg, 1)->origin, SRT_ORIGIN_INSTALL);
	srt_registry_close(reg);
}
END_TEST

/* --- instances of the valid plugins doing their work ----------------------------------------- */

static struct srt_model_config model(int32_t d)
{
	struct srt_model_config m;
	memset(&m, 0, sizeof(m));
	m.struct_size = sizeof(m);
	m.hidden_size = d;
	return m;
}

static struct srt_instance *instantiate(struct srt_registry *reg, enum srt_kind kind,
					const char *name, const struct srt_plugin_args *args)
{
	const struct srt_plugin_info *p = NULL;
	char why[1024];
	ck_assert_int_eq(srt_registry_find(reg, kind, name, &p, why, sizeof(why)), 0);
	struct srt_instance *inst = NULL;
	int rc = srt_plugin_instantiate(p, host, args, &inst, why, sizeof(why));
	ck_assert_msg(rc == 0, "%s", why);
	return inst;
}

START_TEST(test_attention_instance_keeps_kv_only_in_its_pages)
{
	enum { D = 3, P = 4, T = 7 };
	struct srt_registry *reg = open_dirs(fx("good"), NULL);
	struct srt_model_config m = model(D);
	const int32_t layers[2] = {0, 2};
	struct srt_plugin_args args = {.model = &m, .layers = layers, .n_layers = 2, .page_tokens = P};
	struct srt_instance *inst = instantiate(reg, SRT_KIND_ATTENTION, "fx-attention", &args);
	srt_registry_close(reg); /* the instance does not depend on the registry */
	const struct srt_attention_vtable *vt = inst->vtable;

	const struct srt_pool_decl *pools;
	uint32_t n_pools;
	ck_assert_int_eq(vt->declare_pools(inst->ctx, &pools, &n_pools), 0);
	ck_assert_uint_eq(n_pools, 1);
	ck_assert_str_eq(pools[0].name, "fx_kv");
	ck_assert_uint_eq(pools[0].entry_bytes, D * sizeof(float));
	ck_assert_uint_eq(pools[0].n_layers, 2);

	/* Two pages of 2 layers x P entries; the test owns them, as the core would. */
	size_t page_bytes = 2 * P * pools[0].entry_bytes;
	void *pages[2] = {calloc(1, page_bytes), calloc(1, page_bytes)};
	struct srt_page_table pt = {.n_pages = 2, .mem = SRT_MEM_HOST, .pages = pages};
	float x[T][D], out[T][D];
	for (int t = 0; t < T; t++)
		for (int k = 0; k < D; k++)
			x[t][k] = (float)(t * 10 + k) * 0.25f - 3.0f;

	/* Prefill 6 tokens, then decode the 7th from the cached rows. */
	int32_t ids[T] = {0};
	struct srt_seq_view sv = {.seq_id = 1, .pos = 0, .n_tokens = 6, .first_row = 0,
				  .token_ids = ids, .pools = &pt, .n_pools = 1};
	struct srt_batch b = {.struct_size = sizeof(b), .n_seqs = 1, .seqs = &sv, .n_rows = 6};
	char why[256] = "";
	ck_assert_int_eq(vt->forward(inst->ctx, 2, &b, &x[0][0], &out[0][0], why, sizeof(why)), 0);
	sv.pos = 6;
	sv.n_tokens = 1;
	b.n_rows = 1;
	ck_assert_int_eq(vt->forward(inst->ctx, 2, &b, &x[6][0], &out[6][0], why, sizeof(why)), 0);
	/* Reference: prefix means in double. Float sums of <= 7 terms of size <= 20: 1e-5 abs. */
	for (int t = 0; t < T; t++)
		for (int k = 0; k < D; k++) {
			double s = 0;
			for (int u = 0; u <= t; u++)
				s += x[u][k];
			ck_assert_double_eq_tol(out[t][k], s / (t + 1), 1e-5);
		}
	/* Layer 2 is slot 1: the first page's slot-0 half stayed untouched. */
	const float *slot0 = pages[0];
	for (int i = 0; i < P * D; i++)
		ck_assert_float_eq(slot0[i], 0.0f);
	/* A layer it does not serve is an error with a reason. */
	ck_assert_int_eq(vt->forward(inst->ctx, 5, &b, &x[6][0], &out[6][0], why, sizeof(why)),
			 SRT_EINVAL);
	ck_assert_str_eq(why, "fx-attention: layer 5 is not served by this instance");
	srt_instance_destroy(inst);
	free(pages[0]);
	free(pages[1]);
}
END_TEST

START_TEST(test_instantiate_failure_carries_the_plugin_reason)
{
	struct srt_registry *reg = open_dirs(fx("good"), NULL);
	const struct srt_plugin_info *p = NULL;
	char why[1024];
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_ATTENTION, "fx-attention", &p, why,
					   sizeof(why)), 0);
	struct srt_plugin_args args = {.page_tokens = 4}; /* no model */
	struct srt_instance *inst = (void *)1;
	ck_assert_int_eq(srt_plugin_instantiate(p, host, &args, &inst, why, sizeof(why)),
			 SRT_EINVAL);
	ck_assert_ptr_null(inst);
	ck_assert_ptr_nonnull(strstr(why, "attention plugin 'fx-attention'"));
	ck_assert_ptr_nonnull(strstr(why, "create failed"));
	ck_assert_ptr_nonnull(strstr(why, "needs args->model with hidden_size > 0"));
	srt_registry_close(reg);
}
END_TEST

START_TEST(test_moe_instance_computes_through_host_thread_pool)
{
	enum { D = 5, N = 101 };
	char why[256];
	struct srt_host *h4;
	ck_assert_int_eq(srt_host_create(4, &h4, why, sizeof(why)), 0);
	struct srt_registry *reg = open_dirs(fx("good"), NULL);
	const struct srt_plugin_info *p = NULL;
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_MOE, "fx-moe", &p, why, sizeof(why)), 0);
	struct srt_model_config m = model(D);
	struct srt_plugin_args args = {.model = &m};
	struct srt_instance *inst = NULL;
	ck_assert_int_eq(srt_plugin_instantiate(p, h4, &args, &inst, why, sizeof(why)), 0);
	static float x[N * D], out[N * D];
	for (int i = 0; i < N * D; i++)
		x[i] = (float)((i * 37) % 23) - 11.0f;
	struct srt_batch b = {.struct_size = sizeof(b), .n_rows = N};
	const struct srt_moe_vtable *vt = inst->vtable;
	ck_assert_int_eq(vt->forward(inst->ctx, 0, &b, x, out, why, sizeof(why)), 0);
	for (int i = 0; i < N * D; i++) /* exact: 2 * x is exact in float */
		ck_assert_float_eq(out[i], x[i] > 0 ? 2 * x[i] : 0.0f);
	srt_instance_destroy(inst);
	srt_registry_close(reg);
	srt_host_destroy(h4);
}
END_TEST

START_TEST(test_residual_instance_adds_sublayer_output)
{
	enum { D = 4, N = 3 };
	struct srt_registry *reg = open_dirs(fx("good"), NULL);
	struct srt_model_config m = model(D);
	struct srt_plugin_args args = {.model = &m};
	struct srt_instance *inst = instantiate(reg, SRT_KIND_RESIDUAL, "fx-plain", &args);
	const struct srt_residual_vtable *vt = inst->vtable;
	ck_assert_uint_eq(vt->n_streams(inst->ctx), 1);
	ck_assert_uint_eq(vt->mix_floats(inst->ctx), 0);
	float h[N * D], X[N * D], u[N * D], f[N * D], y[N * D];
	for (int i = 0; i < N * D; i++) {
		h[i] = (float)i;
		f[i] = 0.5f * (float)i;
	}
	ck_assert_int_eq(vt->embed(inst->ctx, N, h, X), 0);
	ck_assert_int_eq(vt->pre(inst->ctx, 0, SRT_SUBLAYER_ATTN, N, X, u, NULL), 0);
	ck_assert_int_eq(vt->post(inst->ctx, 0, SRT_SUBLAYER_ATTN, N, f, NULL, X), 0);
	ck_assert_int_eq(vt->head(inst->ctx, N, X, y), 0);
	for (int i = 0; i < N * D; i++) {
		ck_assert_float_eq(u[i], h[i]);
		ck_assert_float_eq(y[i], 1.5f * (float)i);
	}
	srt_instance_destroy(inst);
	srt_registry_close(reg);
}
END_TEST

START_TEST(test_tier_arena_instance_round_trips_pages)
{
	struct srt_registry *reg = open_dirs(fx("good"), NULL);
	struct srt_plugin_args args = {.page_tokens = 256};
	struct srt_instance *inst = instantiate(reg, SRT_KIND_TIER, "fx-arena", &args);
	ck_assert(inst->desc->caps & SRT_CAP_PAGE_ARENA);
	const struct srt_tier_vtable *vt = inst->vtable;
	void *pg[3];
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(vt->alloc_page(inst->ctx, 4096, &pg[i]), 0);
	uint64_t bytes, objs;
	ck_assert_int_eq(vt->usage(inst->ctx, &bytes, &objs), 0);
	ck_assert_uint_eq(objs, 3);
	ck_assert_uint_eq(bytes, 3 * 4096);
	unsigned char src[4096], dst[4096];
	for (int i = 0; i < 4096; i++)
		src[i] = (unsigned char)(i * 7);
	ck_assert_int_eq(vt->copy_from_host(inst->ctx, pg[1], src, sizeof(src)), 0);
	ck_assert_int_eq(vt->copy_to_host(inst->ctx, dst, pg[1], sizeof(dst)), 0);
	ck_assert_mem_eq(src, dst, sizeof(src));
	for (int i = 0; i < 3; i++)
		vt->free_page(inst->ctx, pg[i], 4096);
	ck_assert_int_eq(vt->usage(inst->ctx, &bytes, &objs), 0);
	ck_assert_uint_eq(objs, 0);
	srt_instance_destroy(inst);
	srt_registry_close(reg);
}
END_TEST

static const char *opt_max2(void *ctx, const char *key)
{
	return !strcmp(key, "max_objects") ? (const char *)ctx : NULL;
}

START_TEST(test_tier_store_instance_puts_gets_and_honours_options)
{
	struct srt_registry *reg = open_dirs(fx("good"), NULL);
	struct srt_plugin_args args = {.option = opt_max2, .option_ctx = "2", .role = "tier.l3"};
	struct srt_instance *inst = instantiate(reg, SRT_KIND_TIER, "fx-store", &args);
	const struct srt_tier_vtable *vt = inst->vtable;
	struct srt_key k[3];
	memset(k, 0, sizeof(k));
	for (int i = 0; i < 3; i++)
		k[i].b[0] = (uint8_t)(i + 1);
	const char *vals[2] = {"alpha", "bravo!"};
	const size_t lens[2] = {5, 6};
	ck_assert_int_eq(vt->put(inst->ctx, k, 2, (const void *const *)vals, lens), 0);
	uint32_t present = 9;
	ck_assert_int_eq(vt->exists(inst->ctx, k, 3, &present), 0);
	ck_assert_uint_eq(present, 2);
	char b0[8], b1[4];
	void *bufs[2] = {b0, b1};
	size_t caps[2] = {sizeof(b0), sizeof(b1)}, got[2];
	ck_assert_int_eq(vt->get(inst->ctx, k, 2, bufs, caps, got), 0);
	ck_assert_uint_eq(got[0], 5);
	ck_assert_mem_eq(b0, "alpha", 5);
	ck_assert_uint_eq(got[1], 0); /* larger than its buffer: absent */
	/* The option from the config bounds it. */
	ck_assert_int_eq(vt->put(inst->ctx, &k[2], 1, (const void *const *)vals, lens), SRT_ENOSPC);
	ck_assert_int_eq(vt->remove(inst->ctx, k, 1), 0);
	ck_assert_int_eq(vt->exists(inst->ctx, k, 2, &present), 0);
	ck_assert_uint_eq(present, 0);
	srt_instance_destroy(inst);

	/* A bad option value is a create failure naming it. */
	const struct srt_plugin_info *p = NULL;
	char why[1024];
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_TIER, "fx-store", &p, why, sizeof(why)), 0);
	args.option_ctx = "lots";
	ck_assert_int_eq(srt_plugin_instantiate(p, host, &args, &inst, why, sizeof(why)), SRT_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "max_objects = 'lots' is not a number"));
	srt_registry_close(reg);
}
END_TEST

/* --- the `shadowrt plugins` command ---------------------------------------------------------- */

static int run_cli(const char *args, char *out, size_t len)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "env -u " SRT_PLUGIN_PATH_ENV " '%s' plugins %s 2>&1",
		 SRT_TEST_CLI, args);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	size_t n = fread(out, 1, len - 1, f);
	out[n] = '\0';
	int st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_cli_lists_found_shadowed_and_rejected_plugins)
{
	static char out[65536];
	char args[2048];
	snprintf(args, sizeof(args), "--plugin-dir %s --plugin-dir %s --plugin-dir %s --plugin-dir %s",
		 fx("good"), fx("dup_a"), fx("dup_b"), fx("bad"));
	ck_assert_int_eq(run_cli(args, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "found ") != NULL, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "fx-attention"));
	ck_assert_ptr_nonnull(strstr(out, "uniform causal attention"));
	ck_assert_ptr_nonnull(strstr(out, "fx-store"));
	ck_assert_ptr_nonnull(strstr(out, "shadowed 1:"));
	ck_assert_ptr_nonnull(strstr(out, "rejected 16:"));
	ck_assert_ptr_nonnull(strstr(out, "x.so: not a loadable shared object"));
	ck_assert_ptr_nonnull(strstr(out, "plugin built for ABI 2.0, core is ABI 1.1"));
	ck_assert_ptr_nonnull(strstr(out, "(config)"));
	/* Not verbose: rejections are listed once, not logged too. */
	ck_assert_ptr_null(strstr(out, "shadowrt[plugins] warn"));
}
END_TEST

START_TEST(test_cli_help_and_usage_errors)
{
	static char out[8192];
	ck_assert_int_eq(run_cli("--help", out, sizeof(out)), 0);
	ck_assert_ptr_nonnull(strstr(out, "usage: shadowrt plugins"));
	ck_assert_ptr_nonnull(strstr(out, SRT_PLUGIN_PATH_ENV));
	ck_assert_ptr_nonnull(strstr(out, "Search order"));
	ck_assert_int_eq(run_cli("--frobnicate", out, sizeof(out)), 2);
	ck_assert_ptr_nonnull(strstr(out, "unknown argument '--frobnicate'"));
	ck_assert_int_eq(run_cli("--plugin-dir", out, sizeof(out)), 2);
}
END_TEST


/* --- isolation: hostile plugins --------------------------------------------------------------- */

/* A plugin whose probe crashes (SIGILL), calls exit() or whose static constructor crashes is
 * rejected by name, stage and signal or status; the scan goes on, the good plugin beside them
 * loads and works. Without isolation the first of them ended the process. */
START_TEST(test_crashing_and_exiting_plugins_are_rejected_by_name_and_the_rest_loads)
{
	struct srt_registry *reg = open_dirs(fx("hostile"), NULL);
	ck_assert_uint_eq(srt_registry_count(reg), 4);
	const struct srt_plugin_info *p = by_file(reg, "probe_crash.so");
	ck_assert_int_eq(p->state, SRT_PLUGIN_REJECTED);
	ck_assert_msg(strstr(p->reason, "probe_crash.so: attention plugin 'fx-crash' crashed in its "
			     "probe (signal 4, Illegal instruction): not loaded"), "%s", p->reason);
	ck_assert_ptr_nonnull(p->desc);
	ck_assert_str_eq(p->desc->name, "fx-crash");
	p = by_file(reg, "probe_exit.so");
	ck_assert_int_eq(p->state, SRT_PLUGIN_REJECTED);
	ck_assert_msg(strstr(p->reason, "attention plugin 'fx-exit' called exit(3) in its probe"),
		      "%s", p->reason);
	/* SIGSEGV in a constructor, before any descriptor exists (an ASan build turns the
	 * signal into exit(1) from its handler: either way the stage is named). */
	p = by_file(reg, "ctor_crash.so");
	ck_assert_int_eq(p->state, SRT_PLUGIN_REJECTED);
	ck_assert_msg(strstr(p->reason, "ctor_crash.so: ") &&
		      strstr(p->reason, " while being loaded (dlopen, static constructors or "
			     "srt_plugin_entry)"), "%s", p->reason);
	ck_assert_ptr_null(p->desc);
	/* The good one: found, instantiated, usable. */
	const struct srt_plugin_info *fine;
	char why[1024];
	ck_assert_msg(srt_registry_find(reg, SRT_KIND_MOE, "fx-fine", &fine, why, sizeof(why)) == 0,
		      "%s", why);
	ck_assert_int_eq(fine->state, SRT_PLUGIN_OK);
	ck_assert_ptr_nonnull(fine->vtable);
	ck_assert_ptr_nonnull(fine->desc->create);
	/* Asking for a rejected one by name says why. */
	ck_assert_int_eq(srt_registry_find(reg, SRT_KIND_ATTENTION, "fx-crash", &fine, why,
					   sizeof(why)), SRT_ENOENT);
	ck_assert_msg(strstr(why, "crashed in its probe"), "%s", why);
	srt_registry_close(reg);
}
END_TEST

/* A plugin found usable in the child is loaded into this process only when asked for: a
 * command that uses one plugin never maps the others. */
static int mapped(const char *file)
{
	FILE *f = fopen("/proc/self/maps", "r");
	ck_assert_ptr_nonnull(f);
	char line[4096];
	int found = 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, file) != NULL;
	fclose(f);
	return found;
}

START_TEST(test_only_the_plugins_asked_for_are_loaded_in_process)
{
	struct srt_registry *reg = open_dirs(fx("good"), NULL);
	ck_assert(!mapped("/good/attention.so"));
	ck_assert(!mapped("/good/moe.so"));
	const struct srt_plugin_info *p;
	char why[1024];
	ck_assert_msg(srt_registry_find(reg, SRT_KIND_MOE, "fx-moe", &p, why, sizeof(why)) == 0,
		      "%s", why);
	ck_assert(mapped("/good/moe.so"));
	ck_assert(!mapped("/good/attention.so"));
	srt_registry_close(reg);
}
END_TEST

/* A probe that never returns is killed after the limit and rejected by name; the outcome is
 * asserted, not the time (the plugin blocks for ever, so any limit gives this result).
 * SRT_TEST_HANG_TIMEOUT (seconds, default 3) sets the limit used here. */
START_TEST(test_hanging_probe_is_killed_and_rejected_by_name)
{
	const char *t = getenv("SRT_TEST_HANG_TIMEOUT");
	setenv(SRT_PLUGIN_PROBE_TIMEOUT_ENV, t && *t ? t : "3", 1);
	struct srt_registry *reg = open_dirs(fx("hang"), NULL);
	unsetenv(SRT_PLUGIN_PROBE_TIMEOUT_ENV);
	ck_assert_uint_eq(srt_registry_count(reg), 1);
	const struct srt_plugin_info *p = srt_registry_at(reg, 0);
	ck_assert_int_eq(p->state, SRT_PLUGIN_REJECTED);
	ck_assert_msg(strstr(p->reason, "probe_hang.so: attention plugin 'fx-hang' did not finish "
			     "within ") && strstr(p->reason, " s in its probe (killed; "
						  SRT_PLUGIN_PROBE_TIMEOUT_ENV " sets the limit)"),
		      "%s", p->reason);
	srt_registry_close(reg);
}
END_TEST

/* `shadowrt plugins` with the hostile directory on the search path: exit 0, every hostile
 * plugin listed as rejected with its name, the good one found. */
START_TEST(test_cli_survives_and_names_hostile_plugins)
{
	static char out[65536];
	char args[2048];
	snprintf(args, sizeof(args), "--plugin-dir %s", fx("hostile"));
	ck_assert_int_eq(run_cli(args, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "fx-fine") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "rejected 3:") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "attention plugin 'fx-crash' crashed in its probe") != NULL, "%s",
		      out);
	ck_assert_msg(strstr(out, "attention plugin 'fx-exit' called exit(3) in its probe") != NULL,
		      "%s", out);
}
END_TEST

/* --- suite ----------------------------------------------------------------------------------- */

static Suite *plugin_suite(void)
{
	Suite *s = suite_create("plugin");
	TCase *tc;

	tc = tcase_create("host");
	tcase_add_checked_fixture(tc, host_setup, host_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_parallel_for_covers_every_index_exactly_once);
	tcase_add_test(tc, test_host_zero_threads_means_online_cpus);
	tcase_add_test(tc, test_host_rejects_negative_thread_count);
	tcase_add_test(tc, test_parallel_for_nested_call_runs_inline_without_deadlock);
	tcase_add_test(tc, test_parallel_for_from_two_threads_at_once_is_correct);
	tcase_add_test(tc, test_host_alloc_honours_alignment_and_refuses_bad_alignment);
	tcase_add_test(tc, test_log_prefixes_plugin_name_and_filters_by_level);
	suite_add_tcase(s, tc);

	tc = tcase_create("many_hosts");
	tcase_add_test(tc, test_many_hosts_each_run_their_own_pool);
	tcase_add_test(tc, test_parallel_for_back_to_back_jobs_any_spin_budget);
	tcase_add_test(tc, test_idle_pool_workers_stop_spinning_and_sleep);
	tcase_add_test(tc, test_pool_one_thread_time_counts_serial_stretches);
	tcase_add_test(tc, test_host_rejects_bad_spin_budget);
	suite_add_tcase(s, tc);

	tc = tcase_create("registry");
	tcase_add_checked_fixture(tc, host_setup, host_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_valid_plugin_of_each_kind_loads_and_is_found_by_name);
	tcase_add_test(tc, test_reject_text_file_named_so);
	tcase_add_test(tc, test_reject_library_without_entry_symbol);
	tcase_add_test(tc, test_reject_entry_returning_null);
	tcase_add_test(tc, test_reject_abi_major_mismatch_names_both_versions);
	tcase_add_test(tc, test_reject_newer_minor_names_both_versions);
	tcase_add_test(tc, test_reject_descriptor_struct_size_too_small);
	tcase_add_test(tc, test_reject_unknown_kind);
	tcase_add_test(tc, test_reject_missing_create);
	tcase_add_test(tc, test_reject_attention_without_forward);
	tcase_add_test(tc, test_reject_attention_vtable_too_small);
	tcase_add_test(tc, test_reject_moe_without_forward);
	tcase_add_test(tc, test_reject_residual_without_head);
	tcase_add_test(tc, test_reject_tier_arena_without_copy_to_host);
	tcase_add_test(tc, test_reject_tier_store_without_remove);
	tcase_add_test(tc, test_reject_tier_with_neither_family_cap);
	tcase_add_test(tc, test_reject_failed_probe_keeps_plugin_reason);
	tcase_add_test(tc, test_bad_dir_has_no_usable_plugin);
	tcase_add_test(tc, test_find_missing_file_by_path);
	tcase_add_test(tc, test_find_by_path_loads_a_file_outside_the_search_path);
	tcase_add_test(tc, test_find_unknown_name_lists_the_whole_search_path);
	tcase_add_test(tc, test_find_name_of_other_kind_says_which_kind_it_is);
	tcase_add_test(tc, test_first_directory_wins_and_later_duplicate_is_shadowed);
	tcase_add_test(tc, test_plugin_path_env_is_searched_in_order_after_config_dirs);
	tcase_add_test(tc, test_default_search_path_is_exe_relative_then_install_dir);
	suite_add_tcase(s, tc);

	tc = tcase_create("isolation");
	tcase_add_checked_fixture(tc, host_setup, host_teardown);
	tcase_add_test(tc, test_crashing_and_exiting_plugins_are_rejected_by_name_and_the_rest_loads);
	tcase_add_test(tc, test_only_the_plugins_asked_for_are_loaded_in_process);
	tcase_add_test(tc, test_hanging_probe_is_killed_and_rejected_by_name);
	tcase_add_test(tc, test_cli_survives_and_names_hostile_plugins);
	suite_add_tcase(s, tc);

	tc = tcase_create("instances");
	tcase_add_checked_fixture(tc, host_setup, host_teardown);
	tcase_add_test(tc, test_attention_instance_keeps_kv_only_in_its_pages);
	tcase_add_test(tc, test_instantiate_failure_carries_the_plugin_reason);
	tcase_add_test(tc, test_moe_instance_computes_through_host_thread_pool);
	tcase_add_test(tc, test_residual_instance_adds_sublayer_output);
	tcase_add_test(tc, test_tier_arena_instance_round_trips_pages);
	tcase_add_test(tc, test_tier_store_instance_puts_gets_and_honours_options);
	suite_add_tcase(s, tc);

	tc = tcase_create("cli");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_cli_lists_found_shadowed_and_rejected_plugins);
	tcase_add_test(tc, test_cli_help_and_usage_errors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(plugin_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
