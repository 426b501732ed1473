/* shadowrt replay: cache-only replay of a request trace through ShadowRadix. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "radix/geometry.h"
#include "config/runtime_config.h"
#include "config/size.h"
#include "radix/radix.h"
#include "radix/remat.h"
#include "tier/manager.h"
#include "tier/stack.h"
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
		"finished. Prints the hit rate against the infinite-cache ceiling (whole pages),\n"
		"evictions and peak bytes per pool, wall time. A request that does not fit the budget\n"
		"even alone is an error naming the request and the pool (exit 1).\n"
		"\n"
		"Time: --mode sequential (default) runs the requests one after another in trace order.\n"
		"--mode concurrent runs a discrete-event model on a simulated clock (nothing sleeps):\n"
		"request i arrives at (timestamp_i - timestamp_0) x --time-scale seconds and is admitted\n"
		"in arrival order when fewer than --max-running requests run and its pages fit beside\n"
		"theirs (else it waits for the next completion). Admission matches, loads from the tiers,\n"
		"prefills and decodes on the cache at once (later arrivals hit its prefix); the request\n"
		"then holds every page it locked for (input - hit) / --prefill-tps + output / --decode-tps\n"
		"seconds before it finishes, so running requests contend for L1. Tier I/O takes no\n"
		"simulated time.\n"
		"\n"
		"options:\n"
		"  --model NAME       model preset or config path (default deepseek-v4-flash)\n"
		"  --budget B         total L1 KV bytes or 'unbounded' (default), split over the pools\n"
		"                     so that TAIL pools (windows, carry state) get --tail-share pages\n"
		"                     per page of the ALL pools. Sizes (every size option): B; KB, MB,\n"
		"                     GB, TB = 10^3..10^12; KiB, MiB, GiB, TiB (or K, M, G, T) =\n"
		"                     2^10..2^40; whole bytes, at most 8 EiB\n"
		"  --tail-share F     TAIL-pool pages per ALL-pool page under a budget (default 0.1)\n"
		"  --page-size N      tokens per page, a multiple of every pool ratio (default 256)\n"
		"  --limit N          replay only the first N requests\n"
		"  --chunk N          prefill chunk in tokens (default 8192)\n"
		"  --kv-dtype T       KV entry layout: bf16 (default), fp8, f32\n"
		"  --index-dtype T    indexer key layout: bf16, fp8, fp4, f32 (default: as kv)\n"
		"  --plugin-dir DIR   search DIR for plugins first\n"
		"  --mode M           sequential (default) or concurrent (see Time above)\n"
		"  --time-scale F     concurrent: simulated seconds per trace second (default 1;\n"
		"                     0.5 = arrivals twice as dense)\n"
		"  --prefill-tps N    concurrent: prefill tokens/s per request (default 10000)\n"
		"  --decode-tps N     concurrent: decode tokens/s per request (default 30)\n"
		"  --max-running N    concurrent: requests running at once at most (default 64)\n"
		"\n"
		"tiers (L2 host memory, L3 file/sqlite/redis; off unless one of these is given):\n"
		"  --config INI       runtime config: [tier.l1] budget (unless --budget), [tier.l2],\n"
		"                     [tier.l3] plugin/budget/options, [cache] write_policy, prefetch,\n"
		"                     tenant_salt; the flags below override it\n"
		"  --l2 B|none        host L2 of B bytes\n"
		"  --l3 NAME|none     L3 store plugin: file, sqlite, redis\n"
		"  --l3-path P        L3 location (file: directory, sqlite: database file)\n"
		"  --l3-budget B      L3 bytes (default unbounded)\n"
		"  --l3-opt K=V       another L3 plugin option (host=, port=, fsync=off, layout=files\n"
		"                     for the file store's one-file-per-object tree that several\n"
		"                     processes share; with --l3 file a replay, one process, uses\n"
		"                     layout=segments unless told), repeatable\n"
		"  --write-policy P   write_through | write_through_after_2 | write_back\n"
		"  --prefetch on|off  L3 loads in a background thread (default on)\n"
		"  --remat on|off     window rematerialization (default on, as in the engine): a\n"
		"                     request may resume where only the ALL pools (compressed KV,\n"
		"                     indexer keys) are cached,\n"
		"                     paying a recompute of ~64 L^2 token-layers (core/radix/remat.h)\n"
		"                     when that is less than computing from the ordinary hit. Prints\n"
		"                     the ordinary hit next to it, the recompute and compute saved /\n"
		"                     ceiling (token-layers)\n"
		"  --remat-tail resume|none  with --remat on: L2/L3 keep window/carry pages at resume\n"
		"                     points (default resume), or none at all\n"
		"  --l3-writes M      async (default): L3 writes go through a bounded queue that a\n"
		"                     writer thread stores in batches; sync: inline, one by one\n"
		"  --write-queue B    bound of the L3 write queue (default 64MiB)\n"
		"  --write-batch N    puts per store call (default 1024)\n"
		"  --write-full P     when the queue is full: wait (default; counted) or drop (counted)\n"
		"  --tail-stride N    also keep window/carry (TAIL) pages before every N-th page\n"
		"                     (default 0: only before resume points)\n"
		"  --payload-bytes N  bytes stored per page (default 64): pages carry no KV in a replay;\n"
		"                     each stores N bytes derived from its key, checked on every load,\n"
		"                     while budgets and bytes moved count the real page size\n"
		"  -q, --quiet        no progress on stderr\n");
}

static uint64_t remat_cost(void *ctx, uint64_t t)
{
	return srt_remat_cost(ctx, t);
}

/* --budget: "unbounded" or a size (config/size.h); err says why not */
static int parse_budget(const char *s, uint64_t *out, char *err, size_t errlen)
{
	if (!strcmp(s, "unbounded")) {
		*out = SRT_RDX_UNBOUNDED;
		return 0;
	}
	return srt_size_parse(s, out, err, errlen);
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

static void print_tiers(struct srt_tmgr *tm, const struct srt_replay_result *res)
{
	struct srt_tmgr_stats ts;
	srt_tmgr_stats(tm, &ts);
	static const char *names[3] = {"L1", "L2", "L3"};
	for (int i = 0; i < 3; i++)
		printf("hit %s          %" PRIu64 " tokens (%.2f%% of input)\n", names[i],
		       ts.hit_tokens[i],
		       res->input_tokens ? 100.0 * ts.hit_tokens[i] / res->input_tokens : 0.0);
	char a[32], b[32], cc[32], d[32], e[32];
	fmt_bytes(a, sizeof(a), ts.bytes_l1_to_l2);
	fmt_bytes(b, sizeof(b), ts.bytes_l2_to_l3);
	fmt_bytes(cc, sizeof(cc), ts.bytes_l1_to_l3);
	printf("moved down      L1->L2 %s (%" PRIu64 " pages), L2->L3 %s (%" PRIu64
	       " pages), L1->L3 %s (%" PRIu64 " pages)\n",
	       a, ts.pages_l1_to_l2, b, ts.pages_l2_to_l3, cc, ts.pages_l1_to_l3);
	fmt_bytes(a, sizeof(a), ts.bytes_l2_to_l1);
	fmt_bytes(b, sizeof(b), ts.bytes_l3_to_l1);
	printf("moved up        L2->L1 %s (%" PRIu64 " pages), L3->L1 %s (%" PRIu64
	       " pages, %" PRIu64 " payloads verified)\n",
	       a, ts.pages_l2_to_l1, b, ts.pages_l3_to_l1, ts.pages_verified);
	fmt_bytes(a, sizeof(a), ts.l2_peak);
	fmt_bytes(b, sizeof(b), ts.l2_budget);
	fmt_bytes(cc, sizeof(cc), ts.l3_peak);
	fmt_bytes(d, sizeof(d), ts.l3_budget);
	fmt_bytes(e, sizeof(e), ts.l3_bytes);
	printf("tier bytes      L2 peak %s of %s (%" PRIu64 " evicted), L3 peak %s of %s, now %s in"
	       " %" PRIu64 " objects (%" PRIu64 " evicted)\n",
	       a, b, ts.l2_evicted, cc, d, e, ts.l3_objects, ts.l3_evicted);
	printf("tier faults     %" PRIu64 " loads failed, %" PRIu64 " L3 objects rejected, %" PRIu64
	       " L3 outages (%" PRIu64 " ops skipped), %" PRIu64 " TAIL pages not kept\n",
	       ts.loads_failed, ts.l3_rejected, ts.l3_outages, ts.l3_skipped,
	       ts.skipped_tail_pages);
	fmt_bytes(a, sizeof(a), ts.l3_queue_peak);
	printf("L3 writes       %" PRIu64 " puts queued, %" PRIu64 " written in %" PRIu64
	       " batches, %" PRIu64 " lost (%" PRIu64 " dropped on a full queue); queue peak %s,"
	       " %" PRIu64 " waits for space (%.2f s), %" PRIu64 " loads served from the queue\n",
	       ts.l3_puts_queued, ts.l3_puts_written, ts.l3_write_batches, ts.l3_puts_lost,
	       ts.l3_puts_dropped, a, ts.l3_write_waits, ts.l3_write_wait_s, ts.l3_queue_reads);
	char why[256];
	if (srt_tmgr_check(tm, why, sizeof(why)))
		printf("tier check      FAILED: %s\n", why);
}

int srt_cmd_replay(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		replay_usage(stdout);
		return 0;
	}
	const char *trace_path = NULL, *model = "deepseek-v4-flash", *kv = "bf16", *ix = NULL;
	const char *plugin_dir = NULL;
	uint64_t budget = SRT_RDX_UNBOUNDED, page = 256, limit = 0, chunk = 8192;
	double share = 0.1;
	int quiet = 0;
	const char *config = NULL;
	int budget_given = 0, tiers_on = 0, remat = 1, remat_tail = 1;
	uint64_t payload = 64, stride = 0;
	int n_l3opt = 0;
	int concurrent = 0;
	double time_scale = 1, prefill_tps = 10000, decode_tps = 30;
	uint64_t max_running = 64;
	struct srt_tier_overrides ov = {.write_policy = -1, .prefetch = -1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;
		char why[256] = "";
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
			bad = parse_budget(v, &budget, why, sizeof(why)), budget_given = 1;
		else if (!strcmp(a, "--config"))
			config = v, tiers_on = 1;
		else if (!strcmp(a, "--l2")) {
			tiers_on = 1;
			if (!strcmp(v, "none"))
				ov.l2_plugin = "none";
			else
				bad = srt_size_parse(v, &ov.l2_budget, why, sizeof(why)) ||
				      (!ov.l2_budget && snprintf(why, sizeof(why), "a zero L2 (use none)")),
				ov.l2_plugin = "host";
		} else if (!strcmp(a, "--l3"))
			ov.l3_plugin = v, tiers_on = 1;
		else if (!strcmp(a, "--l3-budget"))
			bad = srt_size_parse(v, &ov.l3_budget, why, sizeof(why)) ||
			      (!ov.l3_budget && snprintf(why, sizeof(why), "a zero L3 budget"));
		else if (!strcmp(a, "--l3-path") || !strcmp(a, "--l3-opt")) {
			const char *k = "path", *val = v;
			char *eq = strchr(v, '=');
			if (a[5] == 'o') {
				bad = !eq || eq == v;
				if (!bad) {
					*eq = 0;
					k = v;
					val = eq + 1;
				}
			}
			if (n_l3opt >= SRT_TIER_STACK_MAX_OPTS - 1)
				bad = 1;
			if (!bad) {
				ov.l3_opts[n_l3opt][0] = k;
				ov.l3_opts[n_l3opt++][1] = val;
			}
		} else if (!strcmp(a, "--write-policy")) {
			ov.write_policy = !strcmp(v, "write_through")	      ? SRT_TMGR_WRITE_THROUGH
					  : !strcmp(v, "write_through_after_2") ? SRT_TMGR_WRITE_AFTER_HITS
					  : !strcmp(v, "write_back")	      ? SRT_TMGR_WRITE_BACK
										      : -1;
			bad = ov.write_policy < 0;
		} else if (!strcmp(a, "--prefetch")) {
			ov.prefetch = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -1;
			bad = ov.prefetch < 0;
		} else if (!strcmp(a, "--remat-tail")) {
			remat_tail = !strcmp(v, "resume") ? 1 : !strcmp(v, "none") ? 0 : -1;
			bad = remat_tail < 0;
		} else if (!strcmp(a, "--remat")) {
			remat = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -1;
			bad = remat < 0;
		} else if (!strcmp(a, "--l3-writes")) {
			ov.write_sync = !strcmp(v, "sync") ? 1 : !strcmp(v, "async") ? 0 : -1;
			bad = ov.write_sync < 0;
		} else if (!strcmp(a, "--write-queue")) {
			bad = srt_size_parse(v, &ov.write_queue_bytes, why, sizeof(why)) ||
			      (!ov.write_queue_bytes && snprintf(why, sizeof(why), "a zero queue"));
		} else if (!strcmp(a, "--write-batch")) {
			uint64_t wb;
			bad = parse_u64(v, &wb) || !wb || wb > 4096;
			ov.write_batch = (uint32_t)wb;
		} else if (!strcmp(a, "--write-full")) {
			ov.write_full = !strcmp(v, "wait") ? SRT_TWR_WAIT : !strcmp(v, "drop") ? SRT_TWR_DROP : -1;
			bad = ov.write_full < 0;
		} else if (!strcmp(a, "--mode")) {
			concurrent = !strcmp(v, "concurrent") ? 1 : !strcmp(v, "sequential") ? 0 : -1;
			bad = concurrent < 0;
		} else if (!strcmp(a, "--time-scale") || !strcmp(a, "--prefill-tps") ||
			   !strcmp(a, "--decode-tps")) {
			char *end;
			double d = strtod(v, &end);
			bad = *end || end == v || !(d > 0 && d < 1e12);
			*(a[2] == 't' ? &time_scale : a[2] == 'p' ? &prefill_tps : &decode_tps) = d;
		} else if (!strcmp(a, "--max-running"))
			bad = parse_u64(v, &max_running) || !max_running || max_running > 65536;
		else if (!strcmp(a, "--tail-stride"))
			bad = parse_u64(v, &stride) || stride > (1u << 20);
		else if (!strcmp(a, "--payload-bytes"))
			bad = parse_u64(v, &payload) || !payload || payload > (64u << 20);
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
		if (bad && why[0]) {
			fprintf(stderr, "replay: option %s: %s\n", a, why);
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
	struct srt_runtime_config rc = {0};
	struct srt_tier_stack *ts = NULL;
	struct srt_tmgr *tm = NULL;
	const char *dirs[1] = {plugin_dir};
	struct srt_rdx_geometry_opts go = {.page_tokens = (uint32_t)page, .kv_dtype = kv,
					   .index_dtype = ix, .dirs = plugin_dir ? dirs : NULL,
					   .ndirs = plugin_dir ? 1 : 0};
	/* the attention plugins (and their options) come from the runtime config and --set */
	struct srt_runtime_config arc = {0};
	if (srt_runtime_config_load(config, &arc, err, sizeof(err))) {
		fprintf(stderr, "replay: %s\n", err);
		goto out;
	}
	go.rc = &arc;
	if (srt_rdx_geometry_load(model, &go, &g, err, sizeof(err))) {
		fprintf(stderr, "replay: %s\n", err);
		goto out;
	}
	if (srt_trace_load(trace_path, (size_t)limit, &t, err, sizeof(err))) {
		fprintf(stderr, "replay: %s\n", err);
		goto out;
	}
	if (tiers_on) {
		/* without --config the tiers come from the flags alone: no default L2/L3 */
		const char *base = "[tier.l2]\nplugin = none\n[tier.l3]\nplugin = none\n";
		int st = config ? srt_runtime_config_load(config, &rc, err, sizeof(err))
				: srt_runtime_config_load_text(base, "<replay flags>", &rc, err,
							       sizeof(err));
		if (st) {
			fprintf(stderr, "replay: %s\n", err);
			goto out;
		}
		if (config && !budget_given && rc.tiers[SRT_TIER_L1].enabled &&
		    rc.tiers[SRT_TIER_L1].budget)
			budget = rc.tiers[SRT_TIER_L1].budget;
		char ident[256];
		snprintf(ident, sizeof(ident), "%s kv=%s index=%s replay-synthetic", g->model.name,
			 kv ? kv : "bf16", ix ? ix : (kv ? kv : "bf16"));
		struct srt_tier_stack_opts so = {.rc = &rc, .over = &ov,
						 .dirs = plugin_dir ? dirs : NULL,
						 .ndirs = plugin_dir ? 1 : 0, .pools = g->pools,
						 .n_pools = g->n_pools, .page_tokens = (uint32_t)page,
						 .model_ident = ident, .payload_bytes = (uint32_t)payload,
						 .tail_stride = (uint32_t)stride};
		/* --l3 file: a replay is one process, so the file store's appended segment logs
		 * (one write + one fdatasync per batch) unless a layout was asked for */
		int has_layout = 0;
		for (int k = 0; k < n_l3opt; k++)
			has_layout |= !strcmp(ov.l3_opts[k][0], "layout");
		if (ov.l3_plugin && !strcmp(ov.l3_plugin, "file") && !has_layout &&
		    n_l3opt < SRT_TIER_STACK_MAX_OPTS - 1) {
			ov.l3_opts[n_l3opt][0] = "layout";
			ov.l3_opts[n_l3opt++][1] = "segments";
		}
		if (srt_tier_stack_open(&so, &ts, err, sizeof(err))) {
			fprintf(stderr, "replay: %s\n", err);
			goto out;
		}
		tm = srt_tier_stack_manager(ts);
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
				     .alloc = &srt_rdx_null_allocator,
				     .hooks = tm ? srt_tmgr_hooks(tm) : NULL, .remat = remat};
	if (srt_rdx_cache_create(&cfg, g->pools, g->n_pools, &c, err, sizeof(err))) {
		fprintf(stderr, "replay: model '%s': %s\n", model, err);
		goto out;
	}
	if (tm)
		srt_tmgr_attach(tm, c);
	/* the rematerialization trapezoid of this model: every layer has the window */
	struct srt_remat_geom rg = {.layers = (uint32_t)g->model.num_hidden_layers,
				    .window = (uint32_t)g->model.sliding_window,
				    .page_tokens = (uint32_t)page, .tail_pages = 0};
	for (uint32_t i = 0; i < g->n_pools; i++)
		if (g->pools[i].retention == SRT_RETAIN_TAIL &&
		    (g->pools[i].tail_tokens + page - 1) / page > rg.tail_pages)
			rg.tail_pages = (uint32_t)((g->pools[i].tail_tokens + page - 1) / page);
	struct srt_rdx_remat_policy rpol = {.cost = remat_cost, .ctx = &rg,
					    .token_cost = rg.layers};
	if (remat && tm)
		srt_tmgr_set_remat(tm, &rpol, remat_tail);
	char bb[32], wp[48];
	fmt_bytes(bb, sizeof(bb), budget);
	printf("replay %s: %zu requests, model %s, page %" PRIu64 " tokens, budget %s, kv %s\n",
	       trace_path, t->n, g->model.name, page, bb, kv ? kv : "bf16");
	fflush(stdout);
	if (tm)
		printf("tiers           L1 %s; %s; %s; %s, prefetch %s, %" PRIu64
		       " B synthetic payload per page (checked on load)\n",
		       bb, srt_tier_stack_describe(ts, SRT_TIER_L2),
		       srt_tier_stack_describe(ts, SRT_TIER_L3),
		       srt_write_policy_format(ov.write_policy >= 0 ? ov.write_policy : rc.write_policy,
					       rc.write_after_hits, wp, sizeof(wp)),
		       (ov.prefetch >= 0 ? ov.prefetch : rc.prefetch) ? "on" : "off", payload);
	struct srt_replay_opts ro = {.chunk_tokens = chunk, .progress = quiet ? NULL : stderr,
				     .tiers = tm, .concurrent = concurrent, .time_scale = time_scale,
				     .prefill_tps = prefill_tps, .decode_tps = decode_tps,
				     .max_running = (uint32_t)max_running,
				     .remat = remat ? &rpol : NULL};
	if (concurrent)
		printf("mode            concurrent: arrivals at trace time x %g, prefill %g tokens/s, "
		       "decode %g tokens/s per request, at most %" PRIu64 " running\n",
		       time_scale, prefill_tps, decode_tps, max_running);
	struct srt_replay_result res;
	if (srt_trace_replay(c, t, &ro, &res, err, sizeof(err))) {
		fprintf(stderr, "replay: %s\n", err);
		goto out;
	}
	double rate = res.input_tokens ? 100.0 * res.hit_tokens / res.input_tokens : 0;
	double ceil = res.input_tokens ? 100.0 * res.ceiling_tokens / res.input_tokens : 0;
	printf("requests        %" PRIu64 "\n", res.requests);
	if (concurrent)
		printf("concurrency     peak %u running, %zu waiting; %" PRIu64 " waited for memory held by "
		       "running requests; wait mean %.2f s, max %.2f s; %.0f s simulated\n",
		       res.peak_running, res.peak_waiting, res.deferred, res.mean_wait_s,
		       res.max_wait_s, res.sim_s);
	printf("input tokens    %" PRIu64 "\n", res.input_tokens);
	printf("output tokens   %" PRIu64 " (decoded, window released as they go)\n", res.output_tokens);
	printf("hit tokens      %" PRIu64 "\n", res.hit_tokens);
	printf("hit rate        %.2f%%\n", rate);
	printf("ceiling         %.2f%% (%" PRIu64 " tokens; infinite cache, whole pages)\n", ceil,
	       res.ceiling_tokens);
	printf("hit / ceiling   %.4f\n", res.ceiling_tokens ? (double)res.hit_tokens / res.ceiling_tokens : 0);
	if (remat) {
		double L = rg.layers, saved = (double)res.hit_tokens * L - (double)res.remat_token_layers;
		/* from this many pages on the trapezoid is whole (its cost no longer grows) */
		uint64_t full = ((uint64_t)(rg.window - 1) * (rg.layers - 1) +
				 (uint64_t)rg.tail_pages * page + page - 1) / page;
		printf("hit, window rule %.2f%% (%" PRIu64 " tokens: resumes that need cached window "
		       "pages, same run)\n",
		       res.input_tokens ? 100.0 * res.strict_hit_tokens / res.input_tokens : 0.0,
		       res.strict_hit_tokens);
		printf("remat           %" PRIu64 " requests resumed by rematerialization (%" PRIu64
		       " past L1); trapezoid %" PRIu64 " token-layers per resume (t >= %u pages)\n",
		       res.remat_requests, res.remat_lower_requests, srt_remat_cost(&rg, full * page),
		       (unsigned)full);
		printf("recompute       %" PRIu64 " token-layers (%.0f token equivalents, %.3f%% of the "
		       "hit tokens)\n", res.remat_token_layers, res.remat_token_layers / L,
		       res.hit_tokens ? 100.0 * res.remat_token_layers / L / res.hit_tokens : 0.0);
		printf("compute saved   %.4g token-layers (hit x %u layers - recompute); saved / "
		       "ceiling %.4f\n", saved, rg.layers,
		       res.ceiling_tokens ? saved / ((double)res.ceiling_tokens * L) : 0.0);
	}
	printf("wall time       %.2f s (%.0f requests/s)\n", res.wall_s,
	       res.wall_s > 0 ? res.requests / res.wall_s : 0);
	printf("cpu time        %.2f s (user + system, every thread, same span as the wall time)\n",
	       res.cpu_s);
	if (tm)
		print_tiers(tm, &res);
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
	srt_tier_stack_close(ts);
	srt_runtime_config_free(&rc);
	srt_rdx_geometry_free(g);
	srt_runtime_config_free(&arc);
	srt_trace_free(t);
	return status;
}
