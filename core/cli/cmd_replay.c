/* shadowrt replay: cache-only replay of a request trace through ShadowRadix. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "radix/geometry.h"
#include "radix/radix.h"
#include "trace/replay.h"
#include "trace/trace.h"

static void replay_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt replay TRACE.jsonl [options]\n"
		"\n"
		"Run a Mooncake-format request trace through the real ShadowRadix prefix cache with the\n"
		"pool geometry the attention plugins declare for a model, under a KV byte budget, with no\n"
		"model compute. Each request is matched, prefilled in chunks (committed to the cache after\n"
		"each chunk), decoded for output_length tokens (window pages released as it goes) and\n"
		"finished, one after another in arrival order. Prints the hit rate against the\n"
		"infinite-cache ceiling (whole pages), evictions and peak bytes per pool, wall time.\n"
		"\n"
		"options:\n"
		"  --model NAME       model preset or config path (default deepseek-v4-flash)\n"
		"  --budget B         total L1 KV bytes (suffix K, M, G, T = 2^10..2^40) or 'unbounded'\n"
		"                     (default); split over the pools so that TAIL pools (windows,\n"
		"                     carry state) get --tail-share pages per page of the ALL pools\n"
		"  --tail-share F     TAIL-pool pages per ALL-pool page under a budget (default 0.1)\n"
		"  --page-size N      tokens per page, a multiple of every pool ratio (default 256)\n"
		"  --limit N          replay only the first N requests\n"
		"  --chunk N          prefill chunk in tokens (default 8192)\n"
		"  --kv-dtype T       KV entry layout: bf16 (default), fp8, f32\n"
		"  --index-dtype T    indexer key layout: bf16, fp8, fp4, f32 (default: as kv)\n"
		"  --plugin-dir DIR   search DIR for plugins first\n"
		"  -q, --quiet        no progress on stderr\n");
}

static int parse_bytes(const char *s, uint64_t *out)
{
	if (!strcmp(s, "unbounded") || !strcmp(s, "inf")) {
		*out = SRT_RDX_UNBOUNDED;
		return 0;
	}
	errno = 0;
	char *end;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -1;
	double m = 1;
	switch (*end) {
	case 'K': case 'k': m = 1024.0; end++; break;
	case 'M': case 'm': m = 1048576.0; end++; break;
	case 'G': case 'g': m = 1073741824.0; end++; break;
	case 'T': case 't': m = 1099511627776.0; end++; break;
	default: break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		return -1;
	*out = (uint64_t)(v * m);
	return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		return -1;
	*out = v;
	return 0;
}

static void fmt_bytes(char *buf, size_t len, uint64_t b)
{
	if (b == SRT_RDX_UNBOUNDED)
		snprintf(buf, len, "unbounded");
	else if (b >= (1ull << 30))
		snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
	else if (b >= (1ull << 20))
		snprintf(buf, len, "%.2f MiB", b / 1048576.0);
	else
		snprintf(buf, len, "%" PRIu64 " B", b);
}

int srt_cmd_replay(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		replay_usage(stdout);
		return 0;
	}
	const char *trace_path = NULL, *model = "deepseek-v4-flash", *kv = NULL, *ix = NULL;
	const char *plugin_dir = NULL;
	uint64_t budget = SRT_RDX_UNBOUNDED, page = 256, limit = 0, chunk = 8192;
	double share = 0.1;
	int quiet = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;
		if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
			quiet = 1;
			continue;
		}
		if (a[0] != '-') {
			if (trace_path) {
				fprintf(stderr, "replay: more than one trace given ('%s', '%s')\n",
					trace_path, a);
				return 2;
			}
			trace_path = a;
			continue;
		}
		if (!v) {
			fprintf(stderr, "replay: option %s needs a value (see --help)\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--model"))
			model = v;
		else if (!strcmp(a, "--budget"))
			bad = parse_bytes(v, &budget);
		else if (!strcmp(a, "--page-size"))
			bad = parse_u64(v, &page) || !page || page > (1u << 20);
		else if (!strcmp(a, "--limit"))
			bad = parse_u64(v, &limit);
		else if (!strcmp(a, "--chunk"))
			bad = parse_u64(v, &chunk) || !chunk;
		else if (!strcmp(a, "--kv-dtype"))
			kv = v;
		else if (!strcmp(a, "--index-dtype"))
			ix = v;
		else if (!strcmp(a, "--plugin-dir"))
			plugin_dir = v;
		else if (!strcmp(a, "--tail-share")) {
			char *end;
			share = strtod(v, &end);
			bad = *end || !(share > 0 && share <= 1);
		} else {
			fprintf(stderr, "replay: unknown option '%s' (see --help)\n", a);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "replay: option %s: invalid value '%s'\n", a, v);
			return 2;
		}
	}
	if (!trace_path) {
		fprintf(stderr, "replay: no trace given\n");
		replay_usage(stderr);
		return 2;
	}

	char err[1024];
	int status = 1;
	struct srt_trace *t = NULL;
	struct srt_rdx_geometry *g = NULL;
	struct srt_rdx_cache *c = NULL;
	const char *dirs[1] = {plugin_dir};
	struct srt_rdx_geometry_opts go = {.page_tokens = (uint32_t)page, .kv_dtype = kv,
					   .index_dtype = ix, .dirs = plugin_dir ? dirs : NULL,
					   .ndirs = plugin_dir ? 1 : 0};
	if (srt_rdx_geometry_load(model, &go, &g, err, sizeof(err))) {
		fprintf(stderr, "replay: %s\n", err);
		goto out;
	}
	if (srt_trace_load(trace_path, (size_t)limit, &t, err, sizeof(err))) {
		fprintf(stderr, "replay: %s\n", err);
		goto out;
	}
	/* budget split: N pages for ALL pools, share * N for TAIL pools */
	uint64_t budgets[SRT_RDX_MAX_POOLS];
	double sum_all = 0, sum_tail = 0;
	for (uint32_t i = 0; i < g->n_pools; i++) {
		const struct srt_pool_decl *d = &g->pools[i];
		uint32_t r = d->ratio == SRT_RATIO_PAGE ? (uint32_t)page : d->ratio;
		double pb = (double)d->n_layers * (r && page % r == 0 ? page / r : 1) * d->entry_bytes;
		if (d->retention == SRT_RETAIN_ALL)
			sum_all += pb;
		else
			sum_tail += pb;
	}
	double per = sum_all + share * sum_tail;
	for (uint32_t i = 0; i < g->n_pools; i++) {
		const struct srt_pool_decl *d = &g->pools[i];
		if (budget == SRT_RDX_UNBOUNDED) {
			budgets[i] = SRT_RDX_UNBOUNDED;
			continue;
		}
		uint32_t r = d->ratio == SRT_RATIO_PAGE ? (uint32_t)page : d->ratio;
		double pb = (double)d->n_layers * (r && page % r == 0 ? page / r : 1) * d->entry_bytes;
		double pages = (double)budget / per * (d->retention == SRT_RETAIN_ALL ? 1.0 : share);
		budgets[i] = (uint64_t)pages * (uint64_t)pb;
	}
	struct srt_rdx_config cfg = {.page_tokens = (uint32_t)page, .budgets = budgets,
				     .alloc = &srt_rdx_null_allocator};
	if (srt_rdx_cache_create(&cfg, g->pools, g->n_pools, &c, err, sizeof(err))) {
		fprintf(stderr, "replay: model '%s': %s\n", model, err);
		goto out;
	}
	char bb[32];
	fmt_bytes(bb, sizeof(bb), budget);
	printf("replay %s: %zu requests, model %s, page %" PRIu64 " tokens, budget %s, kv %s\n",
	       trace_path, t->n, g->model.name, page, bb, kv ? kv : "bf16");
	fflush(stdout);
	struct srt_replay_opts ro = {.chunk_tokens = chunk, .progress = quiet ? NULL : stderr};
	struct srt_replay_result res;
	if (srt_trace_replay(c, t, &ro, &res, err, sizeof(err))) {
		fprintf(stderr, "replay: %s\n", err);
		goto out;
	}
	double rate = res.input_tokens ? 100.0 * res.hit_tokens / res.input_tokens : 0;
	double ceil = res.input_tokens ? 100.0 * res.ceiling_tokens / res.input_tokens : 0;
	printf("requests        %" PRIu64 " (%" PRIu64 " rejected: budget held by the running request)\n",
	       res.requests, res.rejected);
	printf("input tokens    %" PRIu64 "\n", res.input_tokens);
	printf("output tokens   %" PRIu64 " (decoded, window released as they go)\n", res.output_tokens);
	printf("hit tokens      %" PRIu64 "\n", res.hit_tokens);
	printf("hit rate        %.2f%%\n", rate);
	printf("ceiling         %.2f%% (%" PRIu64 " tokens; infinite cache, whole pages)\n", ceil,
	       res.ceiling_tokens);
	printf("hit / ceiling   %.4f\n", res.ceiling_tokens ? (double)res.hit_tokens / res.ceiling_tokens : 0);
	printf("wall time       %.2f s (%.0f requests/s)\n", res.wall_s,
	       res.wall_s > 0 ? res.requests / res.wall_s : 0);
	struct srt_rdx_stats st;
	srt_rdx_stats(c, &st);
	printf("tree            %" PRIu64 " nodes, %" PRIu64 " pages, %.2f MiB metadata\n", st.nodes,
	       st.tree_pages, st.meta_bytes / 1048576.0);
	printf("%-16s %6s %-9s %12s %12s %12s %10s %10s\n", "pool", "ratio", "retention",
	       "page", "budget", "peak", "evicted", "tombstoned");
	for (uint32_t i = 0; i < srt_rdx_pool_count(c); i++) {
		struct srt_rdx_pool_stats ps;
		srt_rdx_pool_stats(c, i, &ps);
		char pb[32], bud[32], peak[32], ret[16];
		fmt_bytes(pb, sizeof(pb), ps.page_bytes);
		fmt_bytes(bud, sizeof(bud), ps.budget);
		fmt_bytes(peak, sizeof(peak), ps.peak_bytes);
		if (ps.retention == SRT_RETAIN_ALL)
			snprintf(ret, sizeof(ret), "ALL");
		else
			snprintf(ret, sizeof(ret), "TAIL %u", ps.tail_tokens);
		printf("%-16s %6u %-9s %12s %12s %12s %10" PRIu64 " %10" PRIu64 "\n", ps.name,
		       ps.ratio, ret, pb, bud, peak, ps.evicted_pages, ps.tombstoned_pages);
	}
	status = 0;
out:
	srt_rdx_cache_destroy(c);
	srt_rdx_geometry_free(g);
	srt_trace_free(t);
	return status;
}
