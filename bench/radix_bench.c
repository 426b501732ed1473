/*
 * radix_bench: figures for ShadowRadix (a program, not a test).
 *   1. insert and match throughput on a 1M-token cached prefix (Flash pool geometry, pages
 *      accounted but not backed);
 *   2. metadata bytes per cached token (token ids alone are 4 B/token);
 *   3. replay time of the whole synthetic trace, unbounded and bounded;
 *   4. KV bytes the plugin-declared pools account for DeepSeek-V4-Pro and -Flash at 1,048,576
 *      tokens (bf16 layout, and FlashMLA fp8 + fp4 indexer), against spec section 8.
 * usage: radix_bench [TRACE.jsonl]   (default /work/shared/traces/mooncake-synthetic.jsonl)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "radix/geometry.h"
#include "radix/radix.h"
#include "trace/replay.h"
#include "trace/trace.h"

#define M_TOKENS 1048576ull

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int die(const char *what, const char *err)
{
	fprintf(stderr, "radix_bench: %s: %s\n", what, err);
	return 1;
}

static struct srt_rdx_geometry *geom(const char *model, const char *kv, const char *ix, char *err,
				     size_t len)
{
	struct srt_rdx_geometry_opts o = {.page_tokens = 256, .kv_dtype = kv, .index_dtype = ix};
	struct srt_rdx_geometry *g = NULL;
	if (srt_rdx_geometry_load(model, &o, &g, err, len))
		return NULL;
	return g;
}

static int bench_prefix(void)
{
	char err[1024];
	struct srt_rdx_geometry *g = geom("deepseek-v4-flash", "bf16", "bf16", err, sizeof(err));
	if (!g)
		return die("geometry", err);
	struct srt_rdx_config cfg = {.page_tokens = 256, .alloc = &srt_rdx_null_allocator};
	struct srt_rdx_cache *c;
	if (srt_rdx_cache_create(&cfg, g->pools, g->n_pools, &c, err, sizeof(err)))
		return die("cache", err);
	int32_t *tok = malloc((M_TOKENS + 256) * sizeof(int32_t));
	for (uint64_t i = 0; i < M_TOKENS + 256; i++)
		tok[i] = (int32_t)((i * 2654435761u) % 129280);
	/* insert: one request, prefilled in 8192-token chunks, each committed */
	double t0 = now_s();
	struct srt_rdx_req *r;
	uint64_t hit;
	srt_rdx_req_start(c, tok, M_TOKENS, &r, &hit, err, sizeof(err));
	for (uint64_t pos = 0; pos < M_TOKENS; pos += 8192) {
		if (srt_rdx_req_extend(r, tok + pos, 8192, err, sizeof(err)) ||
		    srt_rdx_req_commit(r, NULL, err, sizeof(err)) ||
		    srt_rdx_req_release_window(r, NULL, err, sizeof(err)))
			return die("insert", err);
	}
	srt_rdx_req_finish(r, NULL, err, sizeof(err));
	srt_rdx_req_free(r);
	double t_ins = now_s() - t0;
	/* match: the whole prefix, repeatedly */
	int reps = 50;
	struct srt_rdx_match m;
	t0 = now_s();
	for (int i = 0; i < reps; i++)
		srt_rdx_match(c, tok, M_TOKENS, &m);
	double t_match = (now_s() - t0) / reps;
	/* request lifecycle on the cached prefix: start (match + lock) + 256 new tokens + finish */
	t0 = now_s();
	for (int i = 0; i < reps; i++) {
		tok[M_TOKENS] = i; /* a different continuation each time */
		srt_rdx_req_start(c, tok, M_TOKENS + 256, &r, &hit, err, sizeof(err));
		srt_rdx_req_extend(r, tok + hit, M_TOKENS + 256 - hit, err, sizeof(err));
		srt_rdx_req_finish(r, NULL, err, sizeof(err));
		srt_rdx_req_free(r);
	}
	double t_life = (now_s() - t0) / reps;
	struct srt_rdx_stats st;
	srt_rdx_stats(c, &st);
	printf("1. 1M-token prefix (Flash geometry, %u pools, page 256)\n", g->n_pools);
	printf("   insert (8192-token chunks, commit each): %.3f s = %.1f M tokens/s\n", t_ins,
	       M_TOKENS / t_ins / 1e6);
	printf("   match of the whole prefix:               %.3f ms = %.1f M tokens/s (hit %" PRIu64
	       ")\n", t_match * 1e3, M_TOKENS / t_match / 1e6, m.hit_tokens);
	printf("   start+extend 256+finish on the prefix:   %.3f ms per request\n", t_life * 1e3);
	uint64_t cached = st.tree_pages * 256;
	printf("2. metadata: %" PRIu64 " bytes for %" PRIu64 " cached tokens = %.2f B/token "
	       "(%.2fx the 4 B/token of the ids alone; %" PRIu64 " nodes)\n",
	       st.meta_bytes, cached, (double)st.meta_bytes / cached,
	       (double)st.meta_bytes / cached / 4.0, st.nodes);
	free(tok);
	srt_rdx_cache_destroy(c);
	srt_rdx_geometry_free(g);
	return 0;
}

static int bench_replay(const char *path)
{
	char err[1024];
	struct srt_trace *t;
	double t0 = now_s();
	if (srt_trace_load(path, 0, &t, err, sizeof(err)))
		return die("trace", err);
	double t_load = now_s() - t0;
	struct srt_rdx_geometry *g = geom("deepseek-v4-flash", "bf16", "bf16", err, sizeof(err));
	if (!g)
		return die("geometry", err);
	printf("3. replay of %s: %zu requests, %" PRIu64 " input tokens (load %.2f s)\n", path,
	       t->n, t->input_tokens, t_load);
	uint64_t budgets_list[] = {SRT_RDX_UNBOUNDED, 100ull << 30};
	for (int k = 0; k < 2; k++) {
		uint64_t b[SRT_RDX_MAX_POOLS];
		for (uint32_t i = 0; i < g->n_pools; i++)
			b[i] = budgets_list[k] == SRT_RDX_UNBOUNDED ? SRT_RDX_UNBOUNDED
								   : budgets_list[k] / g->n_pools;
		struct srt_rdx_config cfg = {.page_tokens = 256, .budgets = b,
					     .alloc = &srt_rdx_null_allocator};
		struct srt_rdx_cache *c;
		if (srt_rdx_cache_create(&cfg, g->pools, g->n_pools, &c, err, sizeof(err)))
			return die("cache", err);
		struct srt_replay_opts o = {0};
		struct srt_replay_result res;
		if (srt_trace_replay(c, t, &o, &res, err, sizeof(err)))
			return die("replay", err);
		printf("   budget %-9s: %.2f s (%.0f requests/s, %.1f M input tokens/s), hit %.2f%%, "
		       "ceiling %.2f%%, hit/ceiling %.4f\n",
		       k ? "100 GiB/8" : "unbounded", res.wall_s, res.requests / res.wall_s,
		       res.input_tokens / res.wall_s / 1e6, 100.0 * res.hit_tokens / res.input_tokens,
		       100.0 * res.ceiling_tokens / res.input_tokens,
		       (double)res.hit_tokens / res.ceiling_tokens);
		srt_rdx_cache_destroy(c);
	}
	srt_rdx_geometry_free(g);
	srt_trace_free(t);
	return 0;
}

static int bench_kv(void)
{
	char err[1024];
	struct {
		const char *model;
		double spec_gib;
	} models[] = {{"deepseek-v4-pro", 9.62}, {"deepseek-v4-flash", 6.72}};
	printf("4. KV bytes at 1,048,576 tokens from the plugins' pool declarations\n");
	for (int i = 0; i < 2; i++) {
		struct srt_rdx_geometry *g = geom(models[i].model, "bf16", "bf16", err, sizeof(err));
		if (!g)
			return die(models[i].model, err);
		uint64_t all, tail;
		srt_rdx_geometry_seq_bytes(g, 256, M_TOKENS, &all, &tail);
		double gib = all / 1073741824.0;
		printf("   %-18s bf16: ALL pools %.2f GiB = %.1f B/token; spec section 8 %.2f GiB: ratio "
		       "%.4f; + TAIL pools (window, carry state; constant) %.2f MiB\n",
		       models[i].model, gib, (double)all / M_TOKENS, models[i].spec_gib,
		       gib / models[i].spec_gib, tail / 1048576.0);
		srt_rdx_geometry_free(g);
		g = geom(models[i].model, "fp8", "fp4", err, sizeof(err));
		if (!g)
			return die(models[i].model, err);
		srt_rdx_geometry_seq_bytes(g, 256, M_TOKENS, &all, &tail);
		printf("   %-18s fp8 KV + fp4 indexer: ALL pools %.2f GiB (%.2fx smaller than bf16)\n",
		       models[i].model, all / 1073741824.0, gib / (all / 1073741824.0));
		srt_rdx_geometry_free(g);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *trace = argc > 1 ? argv[1] : "/work/shared/traces/mooncake-synthetic.jsonl";
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: radix_bench [TRACE.jsonl]\n");
		return 0;
	}
	int rc = bench_prefix();
	if (!rc)
		rc = bench_replay(trace);
	if (!rc)
		rc = bench_kv();
	return rc;
}
