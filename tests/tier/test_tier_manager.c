/*
 * Tier manager tests: a real ShadowRadix cache with real page bytes, the real tier plugins
 * (host for L2; file, sqlite and redis for L3) loaded through the plugin registry, and the real
 * `shadowrt replay` for the two-process case.
 *
 * Page contents are derived independently of the manager: page v of pool p of a sequence is
 * filled from a hash of (p, v, the sequence's tokens [0, (v + 1) * P)), so a page restored from
 * any tier must equal what the test computes from the tokens alone.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "plugin/host.h"
#include "plugin/registry.h"
#include "radix/radix.h"
#include "tier/key.h"
#include "tier/manager.h"
#include "tier/xxh64.h"
#include "tier_util.h"

#define P 64u

static const int32_t layers2[2] = {0, 1};
static const int32_t layers1[1] = {0};
static struct srt_pool_decl pools[3];

static void init_pools(void)
{
	memset(pools, 0, sizeof(pools));
	pools[0] = (struct srt_pool_decl){.struct_size = sizeof(pools[0]), .name = "kv", .ratio = 4,
					  .retention = SRT_RETAIN_ALL, .entry_bytes = 16,
					  .n_layers = 2, .layers = layers2};
	pools[1] = (struct srt_pool_decl){.struct_size = sizeof(pools[0]), .name = "win", .ratio = 1,
					  .retention = SRT_RETAIN_TAIL, .tail_tokens = 32,
					  .entry_bytes = 8, .n_layers = 1, .layers = layers1};
	pools[2] = (struct srt_pool_decl){.struct_size = sizeof(pools[0]), .name = "state",
					  .ratio = SRT_RATIO_PAGE, .retention = SRT_RETAIN_TAIL,
					  .tail_tokens = 1, .entry_bytes = 100, .n_layers = 1,
					  .layers = layers1};
}

static size_t page_bytes(uint32_t p)
{
	uint32_t r = pools[p].ratio ? pools[p].ratio : P;
	return (size_t)pools[p].n_layers * (P / r) * pools[p].entry_bytes;
}

/* zeroed L1 pages, so that a page not loaded yet is visibly not its content */
static int z_alloc(void *ctx, uint32_t pool, size_t bytes, void **page)
{
	(void)ctx, (void)pool;
	*page = calloc(1, bytes);
	return *page ? 0 : SRT_ENOMEM;
}
static void z_free(void *ctx, uint32_t pool, void *page, size_t bytes)
{
	(void)ctx, (void)pool, (void)bytes;
	free(page);
}
static const struct srt_rdx_allocator zalloc = {NULL, z_alloc, z_free};

static void expected(uint32_t pool, uint64_t v, const int32_t *tokens, uint8_t *out, size_t n)
{
	uint64_t seed = srt_tier_xxh64(tokens, (v + 1) * P * sizeof(int32_t), pool * 131 + v);
	tu_fill(out, n, seed);
}

static void seq(int32_t *t, uint64_t n, uint64_t seed)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t x = (seed << 32) + i + 0x9e3779b97f4a7c15ull;
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
		x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
		t[i] = (int32_t)((x ^ (x >> 31)) % 50000);
	}
}

struct env {
	struct srt_host *host;
	struct srt_registry *reg;
	struct srt_instance *l2, *l3;
	struct srt_tmgr *m;
	struct srt_rdx_cache *c;
	char *dir;
	int keep_dir;
	pid_t redis;
	int port;
	FILE *log;
};

static const char *optv(void *ctx, const char *key)
{
	const char *const *kv = ctx;
	for (; kv && kv[0]; kv += 2)
		if (!strcmp(kv[0], key))
			return kv[1];
	return NULL;
}

static struct srt_instance *load(struct env *e, const char *name, const char *const *opts)
{
	const struct srt_plugin_info *pi;
	char why[1024];
	int rc = srt_registry_find(e->reg, SRT_KIND_TIER, name, &pi, why, sizeof(why));
	ck_assert_msg(rc == 0, "find %s: %s", name, why);
	struct srt_plugin_args a = {.struct_size = sizeof(a), .page_tokens = P, .option = optv,
				    .option_ctx = (void *)opts, .role = "tier"};
	struct srt_instance *inst;
	rc = srt_plugin_instantiate(pi, e->host, &a, &inst, why, sizeof(why));
	ck_assert_msg(rc == 0, "create %s: %s", name, why);
	return inst;
}

struct setup {
	uint64_t l1_pages;   /* per pool */
	uint64_t l2_budget;  /* 0 = no L2 */
	const char *l3;      /* NULL = none */
	uint64_t l3_budget;
	int policy, prefetch;
	uint32_t retry_ms;
	uint64_t queue_bytes; /* L3 write queue (0 = default) */
	int full;             /* SRT_TWR_WAIT / SRT_TWR_DROP */
	uint32_t report_ms;   /* lost-put summaries (0 = default) */
	int sync_writes;
	uint32_t payload;     /* synthetic payload bytes (0 = real pages) */
	const char *dir;      /* L3 directory to reuse (NULL = a fresh one, removed at close) */
	uint32_t tail_stride;
	int gate; /* L3 behind the race gate below */
};

/*
 * The race gate: a store plugin built for the race test. It forwards every call to the real
 * L3 plugin, except that puts wait while `hold_puts` is set (a batch stays in flight in the
 * writer) and, once `trap` is set, the next exists() answers what the real store says, then
 * lets the held puts land and waits until the writer has dequeued every operation before it
 * returns that answer: the worst schedule of a lookup that asks the store first and the write
 * queue second (the store said absent, the queue no longer has the page).
 */
static struct gate {
	const struct srt_tier_vtable *vt;
	void *inst;
	struct srt_tmgr *m;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int hold_puts, trap, sprung;
} gate_g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static struct srt_tier_vtable gate_vt;

static int gate_put(void *inst, const struct srt_key *keys, uint32_t n, const void *const *bufs,
		    const size_t *lens)
{
	struct gate *g = inst;
	pthread_mutex_lock(&g->mu);
	while (g->hold_puts)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	return g->vt->put(g->inst, keys, n, bufs, lens);
}

static int gate_get(void *inst, const struct srt_key *keys, uint32_t n, void *const *bufs,
		    const size_t *caps, size_t *lens)
{
	struct gate *g = inst;
	return g->vt->get(g->inst, keys, n, bufs, caps, lens);
}

static int gate_remove(void *inst, const struct srt_key *keys, uint32_t n)
{
	struct gate *g = inst;
	return g->vt->remove(g->inst, keys, n);
}

static int gate_usage(void *inst, uint64_t *bytes, uint64_t *objects)
{
	struct gate *g = inst;
	return g->vt->usage(g->inst, bytes, objects);
}

static void gate_release(struct gate *g)
{
	pthread_mutex_lock(&g->mu);
	g->hold_puts = 0;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

static int gate_exists(void *inst, const struct srt_key *keys, uint32_t n, uint32_t *n_present)
{
	struct gate *g = inst;
	int rc = g->vt->exists(g->inst, keys, n, n_present);
	pthread_mutex_lock(&g->mu);
	int trap = g->trap;
	g->trap = 0;
	pthread_mutex_unlock(&g->mu);
	if (trap) {
		gate_release(g);
		struct srt_twr_stats ws;
		for (srt_tmgr_write_stats(g->m, &ws); ws.queued_now; srt_tmgr_write_stats(g->m, &ws))
			nanosleep(&(struct timespec){0, 200000}, NULL); /* the writer drains */
		g->sprung = 1;
	}
	return rc;
}

static void env_open(struct env *e, const struct setup *s)
{
	memset(e, 0, sizeof(*e));
	init_pools();
	e->log = tmpfile();
	srt_log_set_stream(e->log);
	srt_log_set_level(SRT_LOG_INFO);
	char why[512];
	ck_assert_int_eq(srt_host_create(1, &e->host, why, sizeof(why)), 0);
	const char *dir = getenv("SRT_PLUGIN_DIR");
	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(srt_registry_open(&e->reg, &dir, 1, e->host,
					   SRT_REGISTRY_NO_ENV | SRT_REGISTRY_NO_DEFAULTS),
			 0);
	struct srt_tmgr_config mc = {.page_tokens = P, .pools = pools, .n_pools = 3,
				     .write_policy = s->policy, .prefetch = s->prefetch,
				     .l3_budget = s->l3_budget ? s->l3_budget : UINT64_MAX,
				     .l3_retry_ms = s->retry_ms, .host = e->host,
				     .write_queue_bytes = s->queue_bytes, .write_full = s->full,
				     .l3_report_ms = s->report_ms, .write_sync = s->sync_writes,
				     .payload_bytes = s->payload, .tail_stride = s->tail_stride};
	mc.scope.layout_version = 1;
	srt_tmgr_fingerprint("test-model kv=bf16", P, pools, 3, mc.scope.model_fp);
	if (s->l2_budget) {
		e->l2 = load(e, "host", NULL);
		mc.l2_vt = e->l2->vtable;
		mc.l2_inst = e->l2->ctx;
		mc.l2_budget = s->l2_budget;
	}
	if (s->l3) {
		char port[16];
		e->dir = s->dir ? strdup(s->dir) : tu_tmpdir("tmgr");
		e->keep_dir = s->dir != NULL;
		char db[4096];
		snprintf(db, sizeof(db), "%s/l3.db", e->dir);
		const char *opts[8] = {"path", !strcmp(s->l3, "sqlite") ? db : e->dir, NULL};
		if (!strcmp(s->l3, "redis")) {
			e->port = tu_free_port();
			e->redis = tu_redis_start(e->port);
			ck_assert_int_gt(e->redis, 0);
			snprintf(port, sizeof(port), "%d", e->port);
			const char *ro[] = {"host", "127.0.0.1", "port", port, "timeout_ms", "10000",
					    NULL};
			memcpy(opts, ro, sizeof(ro));
		}
		e->l3 = load(e, s->l3, opts);
		mc.l3_vt = e->l3->vtable;
		mc.l3_inst = e->l3->ctx;
		mc.l3_name = s->l3;
		if (s->gate) {
			gate_g.vt = mc.l3_vt;
			gate_g.inst = e->l3->ctx;
			gate_g.hold_puts = gate_g.trap = gate_g.sprung = 0;
			gate_vt = *gate_g.vt;
			gate_vt.put = gate_put;
			gate_vt.exists = gate_exists;
			gate_vt.get = gate_get;
			gate_vt.remove = gate_remove;
			gate_vt.usage = gate_vt.usage ? gate_usage : NULL;
			mc.l3_vt = &gate_vt;
			mc.l3_inst = &gate_g;
		}
	}
	ck_assert_msg(srt_tmgr_create(&mc, &e->m, why, sizeof(why)) == 0, "%s", why);
	gate_g.m = e->m;
	uint64_t budgets[3];
	for (int p = 0; p < 3; p++)
		budgets[p] = s->l1_pages ? s->l1_pages * page_bytes(p) : SRT_RDX_UNBOUNDED;
	struct srt_rdx_config rc = {.page_tokens = P, .budgets = budgets, .alloc = &zalloc,
				    .hooks = srt_tmgr_hooks(e->m)};
	ck_assert_msg(srt_rdx_cache_create(&rc, pools, 3, &e->c, why, sizeof(why)) == 0, "%s",
		      why);
	srt_tmgr_attach(e->m, e->c);
}

static void env_close(struct env *e)
{
	srt_rdx_cache_destroy(e->c);
	srt_tmgr_destroy(e->m);
	srt_instance_destroy(e->l2);
	srt_instance_destroy(e->l3);
	srt_registry_close(e->reg);
	srt_host_destroy(e->host);
	if (e->redis > 0)
		tu_redis_stop(e->redis);
	if (e->dir) {
		if (!e->keep_dir)
			tu_rmrf(e->dir);
		free(e->dir);
	}
	srt_log_set_stream(NULL);
	fclose(e->log);
}

static int log_has(struct env *e, const char *needle)
{
	fflush(e->log);
	rewind(e->log);
	char line[2048];
	int found = 0;
	while (fgets(line, sizeof(line), e->log))
		found |= strstr(line, needle) != NULL;
	fseek(e->log, 0, SEEK_END);
	return found;
}

static void check_all(struct env *e)
{
	char why[512];
	ck_assert_msg(srt_tmgr_check(e->m, why, sizeof(why)) == 0, "%s", why);
	ck_assert_msg(srt_rdx_cache_check(e->c, why, sizeof(why)) == 0, "%s", why);
}

/* Pages of the hit [0, hit) that must be in L1 equal their expected bytes. */
static void verify_hit(struct env *e, struct srt_tmgr_req *tr, const int32_t *t, uint64_t hit)
{
	(void)e;
	uint64_t hp = hit / P;
	void *buf[1024];
	uint8_t want[1024];
	for (uint32_t p = 0; p < 3; p++) {
		struct srt_page_table pt;
		ck_assert_int_eq(srt_rdx_req_page_table(srt_tmgr_req_rdx(tr), p, buf, 1024, &pt), 0);
		uint64_t K = pools[p].retention == SRT_RETAIN_ALL ? hp : 1;
		for (uint64_t j = hp - (K < hp ? K : hp); j < hp; j++) {
			ck_assert_msg(buf[j] != NULL, "pool %u page %" PRIu64 " of the hit not in L1",
				      p, j);
			expected(p, j, t, want, page_bytes(p));
			ck_assert_msg(!memcmp(buf[j], want, page_bytes(p)),
				      "pool %u page %" PRIu64 ": restored bytes differ", p, j);
		}
	}
}

/* One request: start, wait, verify the hit, compute (fill) the rest, finish. */
static struct srt_tmgr_hit run(struct env *e, const int32_t *t, uint64_t n)
{
	char why[512];
	struct srt_tmgr_req *tr;
	struct srt_tmgr_hit h;
	ck_assert_msg(srt_tmgr_req_start(e->m, t, n, &tr, &h, why, sizeof(why)) == 0, "%s", why);
	ck_assert_msg(srt_tmgr_req_wait(tr, &h, why, sizeof(why)) == 0, "%s", why);
	ck_assert(srt_tmgr_req_ready(tr));
	uint64_t hit = h.l1_tokens + h.l2_tokens + h.l3_tokens;
	ck_assert_uint_eq(srt_rdx_req_len(srt_tmgr_req_rdx(tr)), hit);
	verify_hit(e, tr, t, hit);
	struct srt_rdx_req *r = srt_tmgr_req_rdx(tr);
	ck_assert_msg(srt_rdx_req_extend(r, t + hit, n - hit, why, sizeof(why)) == 0, "%s", why);
	void *buf[1024];
	for (uint32_t p = 0; p < 3; p++) {
		struct srt_page_table pt;
		ck_assert_int_eq(srt_rdx_req_page_table(r, p, buf, 1024, &pt), 0);
		for (uint64_t j = hit / P; j < n / P; j++)
			if (buf[j])
				expected(p, j, t, buf[j], page_bytes(p));
	}
	ck_assert_msg(srt_tmgr_req_finish(tr, NULL, why, sizeof(why)) == 0, "%s", why);
	srt_tmgr_req_free(tr);
	check_all(e);
	return h;
}

/* Fill L1 with other sequences so that everything of earlier ones leaves it. */
static void flush_l1(struct env *e, uint64_t seed, int n_seqs, uint64_t pages)
{
	int32_t *t = malloc(pages * P * sizeof(int32_t));
	for (int i = 0; i < n_seqs; i++) {
		seq(t, pages * P, seed + (uint64_t)i);
		run(e, t, pages * P);
	}
	free(t);
}

/* --- round trips -------------------------------------------------------------------------- */

START_TEST(l1_evicted_prefix_comes_back_from_l2_byte_exact)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l2_budget = 1 << 20,
				     .policy = SRT_TMGR_WRITE_BACK});
	int32_t a[16 * P];
	seq(a, 16 * P, 1);
	struct srt_tmgr_hit h = run(&e, a, 8 * P);
	ck_assert_uint_eq(h.l1_tokens + h.l2_tokens + h.l3_tokens, 0);
	flush_l1(&e, 100, 4, 10);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_gt(st.pages_l1_to_l2, 0); /* write-back: copied on eviction */
	h = run(&e, a, 16 * P);                   /* same prefix, then 8 new pages */
	ck_assert_uint_eq(h.l1_tokens, 0);
	ck_assert_uint_eq(h.l2_tokens, 8 * P); /* verify_hit checked every byte */
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.pages_l2_to_l1, 8 + 8 / 8 * 2); /* 8 kv + 1 win + 1 state */
	env_close(&e);
}
END_TEST

static void l3_round_trip(const char *store)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = store, .policy = SRT_TMGR_WRITE_BACK,
				     .prefetch = 1});
	int32_t a[16 * P];
	seq(a, 16 * P, 2);
	run(&e, a, 10 * P);
	flush_l1(&e, 200, 3, 10); /* no flush: some demoted pages may still be queued */
	struct srt_tmgr_hit h = run(&e, a, 16 * P);
	ck_assert_uint_eq(h.l3_tokens, 10 * P);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.pages_l3_to_l1, 10 + 2);
	ck_assert_uint_eq(st.loads_failed, 0);
	/* once flushed, the store holds exactly what the manager accounts */
	srt_tmgr_flush(e.m);
	const struct srt_tier_vtable *vt = e.l3->vtable;
	uint64_t bytes, objs;
	if (vt->usage && !vt->usage(e.l3->ctx, &bytes, &objs))
		ck_assert_uint_eq(objs, st.l3_objects);
	env_close(&e);
}

START_TEST(l1_evicted_prefix_comes_back_from_file_l3_byte_exact)
{
	l3_round_trip("file");
}
END_TEST

START_TEST(l1_evicted_prefix_comes_back_from_sqlite_l3_byte_exact)
{
	l3_round_trip("sqlite");
}
END_TEST

START_TEST(l1_evicted_prefix_comes_back_from_redis_l3_byte_exact)
{
	if (!tu_redis_server())
		return;
	l3_round_trip("redis");
}
END_TEST

/*
 * A page counts as in L3 from the moment its put is queued until it is removed: a lookup that
 * runs while the writer stores and dequeues the page (the gate's worst schedule) still hits
 * every page, and the load returns the right bytes. Before the fix the lookup asked the store
 * first and the queue second, and this schedule missed the whole prefix (0 hit tokens).
 */
static void lookup_races_the_writer(const char *store)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = store, .policy = SRT_TMGR_WRITE_BACK,
				     .prefetch = 1, .gate = 1});
	int32_t a[16 * P];
	seq(a, 16 * P, 5);
	run(&e, a, 10 * P);
	pthread_mutex_lock(&gate_g.mu);
	gate_g.hold_puts = 1;
	pthread_mutex_unlock(&gate_g.mu);
	flush_l1(&e, 250, 3, 10); /* a's pages demoted: queued, a batch held in put */
	struct srt_twr_stats ws;
	srt_tmgr_write_stats(e.m, &ws);
	ck_assert_uint_gt(ws.queued_now, 0); /* the race window is open */
	pthread_mutex_lock(&gate_g.mu);
	gate_g.trap = 1;
	pthread_mutex_unlock(&gate_g.mu);
	struct srt_tmgr_hit h = run(&e, a, 16 * P); /* verify_hit checks every byte */
	ck_assert(gate_g.sprung);
	ck_assert_uint_eq(h.l3_tokens, 10 * P);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.loads_failed, 0);
	gate_release(&gate_g);
	env_close(&e);
}

START_TEST(a_lookup_racing_the_writer_still_hits_pages_in_flight_file)
{
	lookup_races_the_writer("file");
}
END_TEST

START_TEST(a_lookup_racing_the_writer_still_hits_pages_in_flight_sqlite)
{
	lookup_races_the_writer("sqlite");
}
END_TEST

START_TEST(a_lookup_racing_the_writer_still_hits_pages_in_flight_redis)
{
	if (!tu_redis_server())
		return;
	lookup_races_the_writer("redis");
}
END_TEST

START_TEST(l2_eviction_writes_back_to_l3_and_the_page_returns_from_l3)
{
	struct env e;
	/* L2 holds a few pages only: everything passes through it into L3 */
	env_open(&e, &(struct setup){.l1_pages = 24, .l2_budget = 6 * 512, .l3 = "file",
				     .policy = SRT_TMGR_WRITE_BACK, .prefetch = 1});
	int32_t a[16 * P];
	seq(a, 16 * P, 3);
	run(&e, a, 10 * P);
	flush_l1(&e, 300, 4, 10);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_gt(st.pages_l2_to_l3, 0);
	ck_assert_uint_le(st.l2_peak, 6 * 512);
	struct srt_tmgr_hit h = run(&e, a, 16 * P);
	ck_assert_uint_eq(h.l1_tokens + h.l2_tokens + h.l3_tokens, 10 * P);
	ck_assert_uint_gt(h.l3_tokens, 0);
	env_close(&e);
}
END_TEST

/* --- budgets -------------------------------------------------------------------------------- */

START_TEST(budgets_are_never_exceeded_under_a_random_workload)
{
	for (int policy = 0; policy < 3; policy++) {
		struct env e;
		uint64_t l3b = 40 * (512 + 64);
		env_open(&e, &(struct setup){.l1_pages = 24, .l2_budget = 20 * 512, .l3 = "file",
					     .l3_budget = l3b, .policy = policy, .prefetch = policy != 1});
		int32_t t[24 * P], base[24 * P];
		uint64_t rng = 7 + (uint64_t)policy;
		for (int i = 0; i < 60; i++) {
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			uint64_t shared = (rng >> 33) % 12, total = shared + 1 + (rng >> 40) % 10;
			seq(base, 24 * P, (rng >> 50) % 4); /* four families of prefixes */
			memcpy(t, base, shared * P * sizeof(int32_t));
			seq(t + shared * P, (total - shared) * P, 1000 + (uint64_t)i);
			run(&e, t, total * P); /* checks budgets (tmgr_check) and bytes each time */
			const struct srt_tier_vtable *vt = e.l3->vtable;
			uint64_t bytes, objs;
			ck_assert_int_eq(vt->usage(e.l3->ctx, &bytes, &objs), 0);
			ck_assert_uint_le(bytes, l3b); /* the store itself, not just the accounting */
		}
		struct srt_tmgr_stats st;
		srt_tmgr_stats(e.m, &st);
		ck_assert_uint_le(st.l2_peak, 20 * 512);
		ck_assert_uint_le(st.l3_peak, l3b);
		ck_assert_uint_gt(st.l2_evicted + st.l3_evicted, 0); /* the budgets really bit */
		for (uint32_t p = 0; p < 3; p++) {
			struct srt_rdx_pool_stats ps;
			srt_rdx_pool_stats(e.c, p, &ps);
			ck_assert_uint_le(ps.peak_bytes, ps.budget);
		}
		env_close(&e);
	}
}
END_TEST

START_TEST(budgets_smaller_than_a_page_skip_the_tier_without_failing)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l2_budget = 99, .l3 = "file",
				     .l3_budget = 200, .policy = SRT_TMGR_WRITE_THROUGH});
	int32_t a[10 * P];
	seq(a, 10 * P, 4);
	run(&e, a, 10 * P);
	flush_l1(&e, 400, 3, 10);
	struct srt_tmgr_hit h = run(&e, a, 10 * P);
	ck_assert_uint_eq(h.l2_tokens + h.l3_tokens, 0);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.l2_peak, 0);
	ck_assert_uint_le(st.l3_peak, 200);
	ck_assert(log_has(&e, "smaller than one page"));
	/* an L1 budget too small for one request: a clear SRT_ENOMEM, not a crash */
	char why[256];
	struct srt_tmgr_req *tr;
	int32_t big[40 * P];
	seq(big, 40 * P, 5);
	ck_assert_int_eq(srt_tmgr_req_start(e.m, big, 40 * P, &tr, &h, why, sizeof(why)), 0);
	ck_assert_int_eq(srt_tmgr_req_wait(tr, &h, why, sizeof(why)), 0);
	int rc = srt_rdx_req_extend(srt_tmgr_req_rdx(tr), big, 40 * P, why, sizeof(why));
	ck_assert_int_eq(rc, SRT_ENOMEM);
	ck_assert_int_eq(srt_tmgr_req_abort(tr, why, sizeof(why)), 0);
	srt_tmgr_req_free(tr);
	check_all(&e);
	env_close(&e);
}
END_TEST

/* --- write policies ------------------------------------------------------------------------- */

START_TEST(write_through_copies_at_commit_write_back_only_on_eviction)
{
	for (int policy = 0; policy < 3; policy += 2) {
		struct env e;
		env_open(&e, &(struct setup){.l1_pages = 100, .l2_budget = 1 << 20, .l3 = "file",
					     .policy = policy, .prefetch = 1});
		int32_t a[8 * P];
		seq(a, 8 * P, 6);
		run(&e, a, 8 * P); /* nothing evicted: L1 holds 100 pages */
		struct srt_tmgr_stats st;
		srt_tmgr_stats(e.m, &st);
		if (policy == SRT_TMGR_WRITE_THROUGH) {
			/* 8 kv pages + the TAIL windows before the commit point (1 win + 1 state) */
			ck_assert_uint_eq(st.pages_l1_to_l2, 10);
			ck_assert_uint_eq(st.pages_l1_to_l3, 10);
		} else {
			ck_assert_uint_eq(st.pages_l1_to_l2 + st.pages_l1_to_l3, 0);
		}
		env_close(&e);
	}
}
END_TEST

START_TEST(write_through_after_2_copies_once_the_prefix_was_hit_twice)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 100, .l2_budget = 1 << 20,
				     .policy = SRT_TMGR_WRITE_AFTER_HITS});
	int32_t a[8 * P];
	seq(a, 8 * P, 7);
	struct srt_tmgr_stats st;
	run(&e, a, 8 * P);
	run(&e, a, 8 * P); /* hit 1 */
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.pages_l1_to_l2, 0);
	ck_assert_uint_eq(st.hit_tokens[0], 8 * P);
	run(&e, a, 8 * P); /* hit 2: copied now */
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.pages_l1_to_l2, 10);
	run(&e, a, 8 * P); /* no second copy */
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.pages_l1_to_l2, 10);
	env_close(&e);
}
END_TEST

/* --- prefetch ------------------------------------------------------------------------------- */

START_TEST(prefetched_pages_are_not_served_before_they_arrive)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = "file", .policy = SRT_TMGR_WRITE_BACK,
				     .prefetch = 1});
	int32_t a[12 * P];
	seq(a, 12 * P, 8);
	run(&e, a, 8 * P);
	flush_l1(&e, 800, 3, 10);
	srt_tmgr_hold_prefetch(e.m, 1);
	char why[256];
	struct srt_tmgr_req *tr;
	struct srt_tmgr_hit h;
	ck_assert_int_eq(srt_tmgr_req_start(e.m, a, 12 * P, &tr, &h, why, sizeof(why)), 0);
	ck_assert_uint_eq(h.l3_tokens, 8 * P);
	ck_assert(!srt_tmgr_req_ready(tr));
	/* not committed: another request does not hit the loading pages in L1 */
	uint64_t tree = 0;
	struct srt_rdx_match mm;
	ck_assert_int_eq(srt_rdx_match(e.c, a, 8 * P, &mm), 0);
	tree = mm.hit_tokens;
	ck_assert_uint_eq(tree, 0);
	/* and the request's own pages are still empty: nothing arrived */
	void *buf[64];
	struct srt_page_table pt;
	ck_assert_int_eq(srt_rdx_req_page_table(srt_tmgr_req_rdx(tr), 0, buf, 64, &pt), 0);
	static const uint8_t zero[512];
	ck_assert(buf[3] && !memcmp(buf[3], zero, page_bytes(0)));
	srt_tmgr_hold_prefetch(e.m, 0);
	ck_assert_int_eq(srt_tmgr_req_wait(tr, &h, why, sizeof(why)), 0);
	ck_assert(srt_tmgr_req_ready(tr));
	ck_assert_uint_eq(h.l3_tokens, 8 * P);
	verify_hit(&e, tr, a, 8 * P);
	ck_assert_int_eq(srt_rdx_match(e.c, a, 8 * P, &mm), 0);
	ck_assert_uint_eq(mm.hit_tokens, 8 * P); /* committed after arrival */
	srt_tmgr_req_free(tr);
	check_all(&e);
	env_close(&e);
}
END_TEST

/* --- faults --------------------------------------------------------------------------------- */

/* Flip a payload byte of every stored object (the header stays intact). */
static void corrupt_every_object(const char *dir)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && find . -type f -size +100c ! -path './tmp/*' | while read f; do "
		 "printf 'X' | dd of=\"$f\" bs=1 seek=80 conv=notrunc 2>/dev/null; done",
		 dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(a_corrupt_l3_object_is_a_miss_and_never_served)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = "file", .policy = SRT_TMGR_WRITE_BACK,
				     .prefetch = 1});
	int32_t a[8 * P];
	seq(a, 8 * P, 9);
	run(&e, a, 8 * P);
	flush_l1(&e, 900, 3, 10);
	/* exists() still finds the objects; the loads fail validation, so the tier hit turns
	 * into a miss and the request computes the prefix (run() checks what is served) */
	srt_tmgr_flush(e.m); /* every object on disk, none left in the write queue */
	corrupt_every_object(e.dir);
	struct srt_tmgr_hit h = run(&e, a, 8 * P);
	ck_assert_uint_eq(h.l2_tokens + h.l3_tokens, 0);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.loads_failed, 1);
	ck_assert_uint_ge(st.l3_rejected, 1);
	ck_assert_uint_eq(st.pages_l3_to_l1, 0);
	ck_assert(log_has(&e, "rejected"));
	env_close(&e);
}
END_TEST

START_TEST(redis_stopped_mid_run_runs_on_without_l3_and_uses_it_again_when_back)
{
	if (!tu_redis_server())
		return;
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = "redis", .policy = SRT_TMGR_WRITE_THROUGH,
				     .prefetch = 1, .retry_ms = 50});
	int32_t a[8 * P];
	seq(a, 8 * P, 10);
	run(&e, a, 8 * P);
	/* the pages written so far reach the server first: a page still in the write queue
	 * counts as in L3 and would be served from the queue while the server is down, which
	 * made this test depend on how fast the writer thread ran */
	srt_tmgr_flush(e.m);
	tu_redis_stop(e.redis); /* mid-run */
	e.redis = 0;
	flush_l1(&e, 1000, 3, 10); /* writes fail: logged, the run goes on */
	struct srt_tmgr_hit h = run(&e, a, 8 * P);
	ck_assert_uint_eq(h.l3_tokens, 0);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.l3_outages, 1);
	ck_assert(log_has(&e, "unavailable"));
	/* back (empty: no persistence); after the retry interval L3 is used again */
	e.redis = tu_redis_start(e.port);
	ck_assert_int_gt(e.redis, 0);
	usleep(100 * 1000);
	int32_t b[8 * P];
	seq(b, 8 * P, 11);
	run(&e, b, 8 * P);
	flush_l1(&e, 1100, 3, 10);
	usleep(100 * 1000);
	h = run(&e, b, 8 * P);
	ck_assert(log_has(&e, "is back"));
	ck_assert_uint_eq(h.l3_tokens, 8 * P);
	env_close(&e);
}
END_TEST

/* --- asynchronous L3 writes ------------------------------------------------------------------ */

static uint64_t store_objects(struct env *e)
{
	uint64_t bytes, objs;
	const struct srt_tier_vtable *vt = e->l3->vtable;
	ck_assert_int_eq(vt->usage(e->l3->ctx, &bytes, &objs), 0);
	return objs;
}

START_TEST(l3_writes_leave_the_request_path_and_queued_pages_are_served_from_the_queue)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = "file", .policy = SRT_TMGR_WRITE_BACK,
				     .prefetch = 1});
	srt_tmgr_hold_writes(e.m, 1); /* the disk is "slow": nothing reaches it for now */
	int32_t a[12 * P];
	seq(a, 12 * P, 20);
	run(&e, a, 8 * P);
	flush_l1(&e, 2000, 3, 10); /* a's pages go down to L3: queued */
	ck_assert_uint_eq(store_objects(&e), 0); /* no request waited for a write */
	struct srt_tmgr_hit h = run(&e, a, 12 * P); /* verify_hit checks every byte */
	ck_assert_uint_eq(h.l3_tokens, 8 * P);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_ge(st.l3_queue_reads, 8);
	ck_assert_uint_eq(st.loads_failed, 0);
	srt_tmgr_hold_writes(e.m, 0);
	ck_assert_uint_eq(srt_tmgr_flush(e.m), 0);
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(store_objects(&e), st.l3_objects); /* all written, as accounted */
	ck_assert_uint_eq(st.l3_puts_written, st.l3_puts_queued);
	ck_assert_uint_lt(st.l3_write_batches * 4, st.l3_puts_written); /* batched */
	env_close(&e);
}
END_TEST

START_TEST(a_full_write_queue_drops_with_policy_drop_and_never_exceeds_its_bound)
{
	struct env e;
	uint64_t bound = 4096;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = "file", .policy = SRT_TMGR_WRITE_THROUGH,
				     .queue_bytes = bound, .full = SRT_TWR_DROP});
	srt_tmgr_hold_writes(e.m, 1);
	int32_t a[10 * P];
	seq(a, 10 * P, 21);
	run(&e, a, 10 * P);
	flush_l1(&e, 2100, 3, 10);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_gt(st.l3_puts_dropped, 0);
	ck_assert_uint_eq(st.l3_puts_lost, st.l3_puts_dropped);
	ck_assert_uint_le(st.l3_queue_peak, bound);
	ck_assert(log_has(&e, "write queue full"));
	srt_tmgr_hold_writes(e.m, 0);
	srt_tmgr_flush(e.m);
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(store_objects(&e), st.l3_objects); /* dropped pages are not accounted */
	run(&e, a, 10 * P); /* whatever comes back is byte exact (run verifies) */
	env_close(&e);
}
END_TEST

struct releaser {
	struct srt_tmgr *m;
	uint64_t waits_seen;
};

/* Release the held writer once the request path is seen waiting for queue space. */
static void *release_when_waiting(void *arg)
{
	struct releaser *rl = arg;
	struct srt_twr_stats ws;
	do {
		usleep(1000);
		srt_tmgr_write_stats(rl->m, &ws);
	} while (!ws.waits);
	rl->waits_seen = ws.waits;
	srt_tmgr_hold_writes(rl->m, 0);
	return NULL;
}

START_TEST(a_full_write_queue_makes_the_producer_wait_with_policy_wait_and_loses_nothing)
{
	struct env e;
	uint64_t bound = 4096;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = "file", .policy = SRT_TMGR_WRITE_THROUGH,
				     .queue_bytes = bound, .full = SRT_TWR_WAIT});
	srt_tmgr_hold_writes(e.m, 1);
	struct releaser rl = {.m = e.m};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, release_when_waiting, &rl), 0);
	int32_t a[10 * P];
	seq(a, 10 * P, 22);
	run(&e, a, 10 * P); /* blocks until the releaser lets the writer go */
	flush_l1(&e, 2200, 3, 10);
	pthread_join(t, NULL);
	ck_assert_uint_gt(rl.waits_seen, 0);
	ck_assert_uint_eq(srt_tmgr_flush(e.m), 0);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.l3_puts_lost, 0);
	ck_assert_uint_le(st.l3_queue_peak, bound);
	ck_assert_uint_eq(store_objects(&e), st.l3_objects);
	struct srt_tmgr_hit h = run(&e, a, 10 * P);
	ck_assert_uint_eq(h.l3_tokens, 10 * P);
	env_close(&e);
}
END_TEST

START_TEST(puts_lost_while_l3_never_recovers_are_reported_periodically_and_at_flush)
{
	if (!tu_redis_server())
		return;
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = "redis", .policy = SRT_TMGR_WRITE_THROUGH,
				     .prefetch = 1, .retry_ms = 1, .report_ms = 1});
	int32_t a[8 * P];
	seq(a, 8 * P, 23);
	run(&e, a, 8 * P);
	ck_assert_uint_eq(srt_tmgr_flush(e.m), 0);
	tu_redis_stop(e.redis); /* for good */
	e.redis = 0;
	for (int i = 0; i < 4; i++) {
		usleep(3000); /* > report_ms and retry_ms: both are due at the next put */
		flush_l1(&e, 2300 + 10 * (uint64_t)i, 1, 10);
	}
	ck_assert(log_has(&e, "put not stored"));
	ck_assert(log_has(&e, "puts not stored in the last")); /* periodic, while it lasts */
	uint64_t lost = srt_tmgr_flush(e.m);
	ck_assert_uint_gt(lost, 0);
	ck_assert(log_has(&e, "has not recovered")); /* and at flush (shutdown) */
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.l3_puts_lost, lost);
	env_close(&e);
}
END_TEST

/* A load that fails part way falls back to the longest prefix still held, not to the L1 hit:
 * with TAIL windows kept every 4 pages, corrupting the kv objects of pages 4..7 leaves 4 pages
 * that L3 can still serve (and run() checks every byte of them). */
START_TEST(a_failed_load_falls_back_to_the_longest_verified_prefix)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l3 = "file", .policy = SRT_TMGR_WRITE_BACK,
				     .prefetch = 1, .tail_stride = 4});
	int32_t a[8 * P];
	seq(a, 8 * P, 24);
	run(&e, a, 8 * P);
	flush_l1(&e, 2400, 3, 10);
	srt_tmgr_flush(e.m);
	for (uint64_t j = 4; j < 8; j++) {
		struct srt_key k;
		char hex[65], path[4400];
		ck_assert_int_eq(srt_tmgr_page_key(e.m, 0, a, j, &k), 0);
		srt_tier_key_hex(&k, hex);
		snprintf(path, sizeof(path), "%s/%.2s/%.2s/%s", e.dir, hex, hex + 2, hex);
		FILE *f = fopen(path, "r+b");
		ck_assert_msg(f != NULL, "page %" PRIu64 " of pool kv is not in L3 (%s)", j, path);
		ck_assert_int_eq(fseek(f, 100, SEEK_SET), 0);
		ck_assert_int_eq(fputc('X', f), 'X');
		fclose(f);
	}
	struct srt_tmgr_hit h = run(&e, a, 8 * P);
	ck_assert_uint_eq(h.l1_tokens + h.l2_tokens + h.l3_tokens, 4 * P);
	struct srt_tmgr_stats st;
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.loads_failed, 1);
	ck_assert_uint_eq(st.loads_retried, 1);
	ck_assert_uint_ge(st.l3_rejected, 1);
	env_close(&e);
}
END_TEST

/* Two requests of one prefix while its pages are still loading from L3: the second loads
 * nothing itself; its wait waits for the first load and hits those pages in L1. */
START_TEST(in_flight_loads_of_the_same_pages_are_shared_between_requests)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 40, .l3 = "file", .policy = SRT_TMGR_WRITE_BACK,
				     .prefetch = 1});
	int32_t a[12 * P], b[12 * P];
	seq(a, 12 * P, 25);
	memcpy(b, a, 8 * P * sizeof(int32_t));
	seq(b + 8 * P, 4 * P, 26);
	run(&e, a, 8 * P);
	flush_l1(&e, 2500, 5, 10);
	struct srt_tmgr_stats st0, st;
	srt_tmgr_stats(e.m, &st0);
	srt_tmgr_hold_prefetch(e.m, 1);
	char why[256];
	struct srt_tmgr_req *ra, *rb;
	struct srt_tmgr_hit ha, hb;
	ck_assert_int_eq(srt_tmgr_req_start(e.m, a, 12 * P, &ra, &ha, why, sizeof(why)), 0);
	ck_assert_uint_eq(ha.l3_tokens, 8 * P);
	ck_assert_int_eq(srt_tmgr_req_start(e.m, b, 12 * P, &rb, &hb, why, sizeof(why)), 0);
	ck_assert_uint_eq(hb.l3_tokens, 8 * P); /* on its way, for a */
	ck_assert(!srt_tmgr_req_ready(rb));
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.loads_shared, 1);
	srt_tmgr_hold_prefetch(e.m, 0);
	ck_assert_int_eq(srt_tmgr_req_wait(rb, &hb, why, sizeof(why)), 0); /* b first */
	ck_assert_uint_eq(hb.l1_tokens, 8 * P);
	verify_hit(&e, rb, b, 8 * P);
	ck_assert_int_eq(srt_tmgr_req_wait(ra, &ha, why, sizeof(why)), 0);
	ck_assert_uint_eq(ha.l3_tokens, 8 * P);
	verify_hit(&e, ra, a, 8 * P);
	srt_tmgr_stats(e.m, &st);
	ck_assert_uint_eq(st.pages_l3_to_l1 - st0.pages_l3_to_l1, 8 + 2); /* loaded once */
	srt_tmgr_req_free(ra);
	srt_tmgr_req_free(rb);
	check_all(&e);
	/* a follower whose loader is freed before it arrives looks up again by itself */
	flush_l1(&e, 2600, 5, 10);
	srt_tmgr_hold_prefetch(e.m, 1);
	ck_assert_int_eq(srt_tmgr_req_start(e.m, a, 12 * P, &ra, &ha, why, sizeof(why)), 0);
	ck_assert_int_eq(srt_tmgr_req_start(e.m, b, 12 * P, &rb, &hb, why, sizeof(why)), 0);
	srt_tmgr_hold_prefetch(e.m, 0);
	srt_tmgr_req_free(ra);
	ck_assert_int_eq(srt_tmgr_req_wait(rb, &hb, why, sizeof(why)), 0);
	ck_assert_uint_eq(hb.l1_tokens + hb.l2_tokens + hb.l3_tokens, 8 * P);
	verify_hit(&e, rb, b, 8 * P);
	srt_tmgr_req_free(rb);
	check_all(&e);
	env_close(&e);
}
END_TEST

/* With prefetch on, L2 -> L1 copies run in the loading thread: after start nothing has been
 * copied yet (held), the request is not ready, and its wait delivers every byte. */
START_TEST(l2_to_l1_copies_run_in_the_background_and_are_waited_for)
{
	struct env e;
	env_open(&e, &(struct setup){.l1_pages = 24, .l2_budget = 1 << 20,
				     .policy = SRT_TMGR_WRITE_BACK, .prefetch = 1});
	int32_t a[12 * P];
	seq(a, 12 * P, 27);
	run(&e, a, 8 * P);
	flush_l1(&e, 2700, 4, 10);
	srt_tmgr_hold_prefetch(e.m, 1);
	char why[256];
	struct srt_tmgr_req *tr;
	struct srt_tmgr_hit h;
	ck_assert_int_eq(srt_tmgr_req_start(e.m, a, 12 * P, &tr, &h, why, sizeof(why)), 0);
	ck_assert_uint_eq(h.l2_tokens, 8 * P);
	ck_assert(!srt_tmgr_req_ready(tr));
	void *buf[64];
	struct srt_page_table pt;
	ck_assert_int_eq(srt_rdx_req_page_table(srt_tmgr_req_rdx(tr), 0, buf, 64, &pt), 0);
	static const uint8_t zero[512];
	ck_assert(buf[5] && !memcmp(buf[5], zero, page_bytes(0))); /* not copied yet */
	srt_tmgr_hold_prefetch(e.m, 0);
	ck_assert_int_eq(srt_tmgr_req_wait(tr, &h, why, sizeof(why)), 0);
	ck_assert_uint_eq(h.l2_tokens, 8 * P);
	verify_hit(&e, tr, a, 8 * P);
	srt_tmgr_req_free(tr);
	check_all(&e);
	env_close(&e);
}
END_TEST

/* --- L3 budget across runs ---------------------------------------------------------------- */

/* Synthetic payloads (as replay uses): the store has no byte bound of its own, so only the
 * manager's budget bounds it; a second run on the same store must not add a budget's worth. */
START_TEST(the_l3_budget_bounds_the_store_across_runs_in_synthetic_mode)
{
	char *dir = tu_tmpdir("tmgrruns");
	init_pools();
	uint64_t l3b = 40 * (page_bytes(0) + 64);
	uint64_t objs[2];
	int32_t t[10 * P];
	for (int runs = 0; runs < 2; runs++) {
		struct env e;
		env_open(&e, &(struct setup){.l1_pages = 24, .l3 = "file", .l3_budget = l3b,
					     .policy = SRT_TMGR_WRITE_THROUGH, .payload = 64,
					     .dir = dir});
		struct srt_tmgr_stats st;
		srt_tmgr_stats(e.m, &st);
		if (runs)
			ck_assert_uint_gt(st.l3_objects, 0); /* the first run's pages are accounted */
		for (int i = 0; i < 12; i++) { /* distinct sequences: 12 x (10 kv + ...) pages */
			seq(t, 10 * P, 5000 + 100 * (uint64_t)runs + (uint64_t)i);
			run(&e, t, 10 * P);
		}
		srt_tmgr_flush(e.m);
		srt_tmgr_stats(e.m, &st);
		ck_assert_uint_gt(st.l3_evicted, 0); /* the budget binds within each run */
		ck_assert_uint_le(st.l3_bytes, l3b);
		objs[runs] = store_objects(&e);
		/* plus the saved index of the earlier run (one object) */
		ck_assert_uint_eq(objs[runs], st.l3_objects + (runs > 0));
		env_close(&e);
	}
	/* the second run evicted the first run's pages instead of adding to them */
	ck_assert_uint_le(objs[1], objs[0] + 2);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

/* --- two processes on one L3 (the real CLI) --------------------------------------------- */

/* The KV layout these budgets were sized for (replay's default is bf16, twice the window
 * bytes: with it a 512 MiB L1 cannot hold one 15K-token request of this trace and every
 * request is rejected). */
#define REPLAY_KV "--kv-dtype fp8 --index-dtype fp4"

static void write_trace(const char *path)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	for (int i = 0; i < 12; i++) {
		int conv = i % 4, turn = i / 4, blocks = 10 * (turn + 1);
		fprintf(f, "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": 8, "
			   "\"hash_ids\": [",
			i, 512 * blocks - 100);
		for (int b = 0; b < blocks; b++)
			fprintf(f, "%s%d", b ? ", " : "", conv * 1000 + b);
		fprintf(f, "]}\n");
	}
	fclose(f);
}

static uint64_t run_replay(const char *trace, const char *store, const char *where,
			   const char *field)
{
	char cmd[8192];
	snprintf(cmd, sizeof(cmd),
		 "'%s/bin/shadowrt' replay '%s' -q --plugin-dir '%s' --budget 512M --l3 %s "
		 "--l3-path '%s' --l3-opt fsync=off " REPLAY_KV " 2>&1",
		 getenv("SRT_BUILD_DIR"), trace, getenv("SRT_PLUGIN_DIR"), store, where);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	char line[1024];
	uint64_t v = UINT64_MAX;
	int failed_check = 0;
	char rejected[1024] = "";
	while (fgets(line, sizeof(line), p)) {
		if (!strncmp(line, field, strlen(field)))
			v = strtoull(line + strlen(field), NULL, 10);
		failed_check |= strstr(line, "FAILED") != NULL;
		if (strstr(line, "does not fit"))
			snprintf(rejected, sizeof(rejected), "%s", line);
	}
	ck_assert_int_eq(pclose(p), 0);
	ck_assert(!failed_check);
	ck_assert_msg(!rejected[0], "replay rejected requests (budget too small?): %s", rejected);
	ck_assert_msg(v != UINT64_MAX, "no '%s' line in the replay output", field);
	return v;
}

static void two_processes(const char *store)
{
	char *dir = tu_tmpdir("tmgr2p");
	char trace[4096], where[4096];
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", dir);
	snprintf(where, sizeof(where), "%s/%s", dir, !strcmp(store, "sqlite") ? "l3.db" : "l3");
	write_trace(trace);
	uint64_t first = run_replay(trace, store, where, "hit L3");
	uint64_t second = run_replay(trace, store, where, "hit L3");
	/* the first process starts empty (later turns may hit what it evicted itself); the second
	 * also finds the first turn of each conversation in L3 (4 x 4864 tokens) */
	ck_assert_uint_ge(second, first + 4 * 4864);
	tu_rmrf(dir);
	free(dir);
}

START_TEST(a_second_replay_process_hits_the_file_l3_the_first_wrote)
{
	two_processes("file");
}
END_TEST

START_TEST(a_second_replay_process_hits_the_sqlite_l3_the_first_wrote)
{
	two_processes("sqlite");
}
END_TEST

START_TEST(replay_takes_its_tiers_from_a_config_file)
{
	char *dir = tu_tmpdir("tmgrcfg");
	char trace[4096], ini[4096], cmd[16384];
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", dir);
	snprintf(ini, sizeof(ini), "%s/tiers.ini", dir);
	write_trace(trace);
	FILE *f = fopen(ini, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[tier.l1]\nplugin = host\nbudget = 384MiB\n[tier.l2]\nplugin = host\n"
		   "budget = 2GiB\n[tier.l3]\nplugin = sqlite\npath = %s/l3.db\nbudget = 8GiB\n"
		   "[cache]\nwrite_policy = write_back\n",
		dir);
	fclose(f);
	/* --remat off: with rematerialization the one turn that L2 serves resumes in L1 instead
	 * (its compressed pages are still there), and this test is about the config's L2 */
	snprintf(cmd, sizeof(cmd), "'%s/bin/shadowrt' replay '%s' -q --plugin-dir '%s' --config '%s' "
		 "--remat off " REPLAY_KV,
		 getenv("SRT_BUILD_DIR"), trace, getenv("SRT_PLUGIN_DIR"), ini);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	char line[1024];
	int saw_tiers = 0;
	uint64_t l2 = 0;
	while (fgets(line, sizeof(line), p)) {
		if (!strncmp(line, "tiers", 5))
			saw_tiers = strstr(line, "L1 384.00 MiB") && strstr(line, "L2 host 2 GiB") &&
				    strstr(line, "L3 sqlite") && strstr(line, "write_back");
		if (!strncmp(line, "hit L2", 6))
			l2 = strtoull(line + 6, NULL, 10);
	}
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_msg(saw_tiers, "the tiers line does not show the config's settings");
	/* L1 of 384 MiB evicts; later turns come back from L2 (window pages are a ring of 128
	 * rows since attention layout -pages/2: with half their bytes 512 MiB no longer evicts) */
	ck_assert_uint_gt(l2, 0);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	Suite *s = suite_create("tier_manager");
	TCase *tc = tcase_create("manager");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, l1_evicted_prefix_comes_back_from_l2_byte_exact);
	tcase_add_test(tc, l1_evicted_prefix_comes_back_from_file_l3_byte_exact);
	tcase_add_test(tc, l1_evicted_prefix_comes_back_from_sqlite_l3_byte_exact);
	tcase_add_test(tc, l1_evicted_prefix_comes_back_from_redis_l3_byte_exact);
	tcase_add_test(tc, a_lookup_racing_the_writer_still_hits_pages_in_flight_file);
	tcase_add_test(tc, a_lookup_racing_the_writer_still_hits_pages_in_flight_sqlite);
	tcase_add_test(tc, a_lookup_racing_the_writer_still_hits_pages_in_flight_redis);
	tcase_add_test(tc, l2_eviction_writes_back_to_l3_and_the_page_returns_from_l3);
	tcase_add_test(tc, budgets_are_never_exceeded_under_a_random_workload);
	tcase_add_test(tc, budgets_smaller_than_a_page_skip_the_tier_without_failing);
	tcase_add_test(tc, write_through_copies_at_commit_write_back_only_on_eviction);
	tcase_add_test(tc, write_through_after_2_copies_once_the_prefix_was_hit_twice);
	tcase_add_test(tc, prefetched_pages_are_not_served_before_they_arrive);
	tcase_add_test(tc, a_corrupt_l3_object_is_a_miss_and_never_served);
	tcase_add_test(tc, redis_stopped_mid_run_runs_on_without_l3_and_uses_it_again_when_back);
	tcase_add_test(tc, a_failed_load_falls_back_to_the_longest_verified_prefix);
	tcase_add_test(tc, in_flight_loads_of_the_same_pages_are_shared_between_requests);
	tcase_add_test(tc, l2_to_l1_copies_run_in_the_background_and_are_waited_for);
	tcase_add_test(tc, l3_writes_leave_the_request_path_and_queued_pages_are_served_from_the_queue);
	tcase_add_test(tc, a_full_write_queue_drops_with_policy_drop_and_never_exceeds_its_bound);
	tcase_add_test(tc, a_full_write_queue_makes_the_producer_wait_with_policy_wait_and_loses_nothing);
	tcase_add_test(tc, puts_lost_while_l3_never_recovers_are_reported_periodically_and_at_flush);
	tcase_add_test(tc, the_l3_budget_bounds_the_store_across_runs_in_synthetic_mode);
	tcase_add_test(tc, a_second_replay_process_hits_the_file_l3_the_first_wrote);
	tcase_add_test(tc, a_second_replay_process_hits_the_sqlite_l3_the_first_wrote);
	tcase_add_test(tc, replay_takes_its_tiers_from_a_config_file);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
