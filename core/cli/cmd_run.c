/*
 * shadowrt run: the main job. A built-in multi-turn chat workload through the scheduler
 * (sched/sched.h): several conversations submitted together each turn (the scheduler batches
 * their prefill chunks and decode rows), each turn resending the whole history plus a new user
 * message, so ShadowRadix serves the history from cache. Prints per turn the prompt size, the prefix hit, TTFT and decode rate; at the end the
 * throughput, the hit rate and the KV bytes per pool.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "config/runtime_config.h"
#include "ckpt/safetensors.h"
#include "exec/engine.h"
#include "exec/sampler.h"
#include "radix/radix.h"
#include "sched/sched.h"
#include "tier/manager.h"
#include "tok_cli.h"

/* --logits-dir: DIR/turnT-convC.<ext> */
static FILE *logits_file(const char *dir, int t, int c, const char *ext, const char *mode)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/turn%d-conv%d.%s", dir, t, c, ext);
	FILE *f = fopen(path, mode);
	if (!f)
		fprintf(stderr, "shadowrt run: cannot write %s: %s\n", path, strerror(errno));
	return f;
}

/*
 * --logits-dir, after the workload (the scheduler is gone, the engine is this thread's): each
 * reply again, teacher-forced from the cache: prompt + reply[0 .. reply-1) from the longest
 * cached prefix; the logits of positions prompt-1 .. prompt+reply-2 are the ones each reply
 * token was sampled from (the executor's logits do not depend on chunking, batching or
 * resumes: tests/exec), written as DIR/turnT-convC.f32 [reply][vocab], the tokens as
 * DIR/turnT-convC.tokens. 0 or -1 with a message.
 */
static int write_logits(struct srt_engine *e, const char *dir, int t, int c, const int32_t *hist,
			size_t prompt, size_t reply)
{
	size_t V = (size_t)srt_engine_model(e)->vocab_size, n = prompt + reply - 1;
	char err[2048];
	struct srt_seq *s = NULL;
	uint64_t hit = 0;
	float *lg = malloc(sizeof(float) * V * n);
	FILE *f = NULL, *tf = NULL;
	int rc = -1;
	int st = lg ? srt_engine_seq_start(e, hist, n, 1, &s, &hit, err, sizeof(err)) : -1;
	if (!st && hit > prompt - 1) { /* the hit covers a wanted position: from scratch */
		srt_engine_seq_free(s);
		s = NULL;
		hit = 0;
		st = srt_engine_seq_start(e, hist, n, 0, &s, NULL, err, sizeof(err));
	}
	if (st || srt_engine_prefill(e, s, lg, 1, err, sizeof(err))) {
		fprintf(stderr, "shadowrt run: --logits-dir turn %d conversation %d: %s\n", t, c,
			lg ? err : "out of memory");
		goto out;
	}
	if (!(f = logits_file(dir, t, c, "f32", "wb")) || !(tf = logits_file(dir, t, c, "tokens", "w")))
		goto out;
	/* rows of lg are positions [hit, n); the first wanted is prompt - 1 (hit < prompt) */
	if (fwrite(lg + (prompt - 1 - hit) * V, sizeof(float) * V, reply, f) != reply)
		goto out;
	for (size_t k = 0; k < reply; k++)
		fprintf(tf, "%s%d", k ? "," : "", hist[prompt + k]);
	rc = 0;
out:
	if (f && fclose(f))
		rc = -1;
	if (tf && fclose(tf))
		rc = -1;
	srt_engine_seq_free(s);
	free(lg);
	return rc;
}

static void run_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt run [options]\n"
		"\n"
		"Serve a built-in multi-turn chat workload: --conversations conversations share a\n"
		"system prompt; in each of --turns turns every conversation sends its whole history\n"
		"plus a new user message; the scheduler admits them from the longest cached prefix\n"
		"and batches their prefill chunks and decode rows (one forward per step) until each\n"
		"has --reply-tokens tokens (eos does not stop a reply). With no options this runs the\n"
		"embedded default: the\n"
		"synthetic tiny model (generated under $XDG_CACHE_HOME/shadowrt/models or\n"
		"./shadowrt-models when missing), CPU plugins. Prints per turn and conversation the\n"
		"prompt tokens, prefix-hit tokens and rate, time to first token (from the start of the\n"
		"turn) and its decode rate; at the end the throughput, the overall hit rate and\n"
		"the KV bytes per cache pool. The L2/L3 tiers of the config sit behind the L1 cache\n"
		"(default: host L2, file L3 in ./shadowrt-cache): a second run finds the shared\n"
		"prefixes in L3. A progress bar goes to stderr when it is a terminal.\n"
		"\n"
		"options:\n"
		"  --model DIR|PRESET   checkpoint directory or preset (default: [runtime] model)\n"
		"  --config INI         runtime config over the built-in default\n"
		"  --turns N            turns per conversation (default 3)\n"
		"  --conversations N    conversations, interleaved (default 4)\n"
		"  --reply-tokens N     tokens per assistant reply (default 24)\n"
		"  --threads N          worker threads, 0 = all cores (default: [runtime] threads)\n"
		"  --profile P          reference | f32 (default: [runtime] profile)\n"
		"  --no-tiers           L1 only: no L2/L3 ([tier.l2], [tier.l3]) behind the cache\n"
		"  --logits-dir DIR     write each reply's tokens (DIR/turnT-convC.tokens, comma-\n"
		"                       separated ids) and the logits each was sampled from\n"
		"                       (DIR/turnT-convC.f32, float32 [reply-tokens][vocab];\n"
		"                       recomputed from the cache after the run, bitwise the same)\n"
		"  --json               print a JSON report on stdout (the table goes to stderr)\n"
		"  -q, --quiet          no progress bar\n");
}

static const char system_prompt[] =
	"You are the shadowrt demo assistant. You answer questions about serving large language "
	"models: prefix caching, sliding-window attention, compressed sparse attention, heavily "
	"compressed attention, mixture-of-experts layers with FP4 weights and the residual "
	"streams of mHC. Keep answers short and precise, cite the relevant section of the design "
	"when you can, and say so when you do not know. The user is an engineer.\n";

static const char *const user_msgs[] = {
	"What does ShadowRadix store for a cached prefix?",
	"Why can a window page be dropped while C4 entries stay matchable?",
	"How is the L1 budget split between the pools?",
	"What happens to a request when a pool is over budget?",
	"Explain the match rule for TAIL pools in one sentence.",
	"How many tokens does one C128 entry cover?",
	"Which tier does the kernel read from on a CPU run?",
	"What is the tenant salt for?",
	"Summarise our conversation so far.",
	"Thanks. One more: how does batched decode help throughput?",
};
#define N_MSGS (sizeof(user_msgs) / sizeof(user_msgs[0]))

struct conv {
	int32_t *hist;
	size_t n, cap;
	struct srt_sched_req *req;
};

static int push(struct conv *c, const int32_t *t, size_t n)
{
	if (c->n + n > c->cap) {
		size_t cap = (c->n + n) * 2;
		int32_t *h = realloc(c->hist, sizeof(int32_t) * cap);
		if (!h)
			return -1;
		c->hist = h;
		c->cap = cap;
	}
	memcpy(c->hist + c->n, t, sizeof(int32_t) * n);
	c->n += n;
	return 0;
}

/* The checkpoint's tokenizer when it has one: the replies are shown as text. */
static struct srt_tok *run_tok;

static int push_text(struct conv *c, const char *s, int32_t vocab)
{
	for (; *s; s++) {
		int32_t t = (unsigned char)*s % vocab;
		if (push(c, &t, 1))
			return -1;
	}
	return 0;
}

static void progress(int on, int done, int total, const char *what)
{
	if (!on)
		return;
	int w = 30, k = total ? done * w / total : w;
	fprintf(stderr, "\r[");
	for (int i = 0; i < w; i++)
		fputc(i < k ? '#' : '.', stderr);
	fprintf(stderr, "] %3d%% %-28s", total ? done * 100 / total : 100, what);
	fflush(stderr);
}

static void progress_clear(int on)
{
	if (on)
		fprintf(stderr, "\r%70s\r", "");
}

int srt_cmd_run(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		run_usage(stdout);
		return 0;
	}
	struct srt_engine_opts o = {.threads = -1, .profile = -1, .tiers = 1};
	int turns = 3, nconv = 4, reply = 24, quiet = 0, json = 0;
	const char *logits_dir = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;
		if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
			quiet = 1;
			continue;
		}
		if (!strcmp(a, "--no-tiers")) {
			o.tiers = 0;
			continue;
		}
		if (!strcmp(a, "--json")) {
			json = 1;
			continue;
		}
		if (!val) {
			fprintf(stderr, "shadowrt run: %s: %s\n", a,
				a[0] == '-' ? "needs a value (see --help)" : "unexpected argument");
			return 2;
		}
		i++;
		const char *expect = NULL;
		if ((bad = srt_cli_engine_option(a, val, &o, &expect)))
			bad = bad < 0;
		else if (!strcmp(a, "--logits-dir"))
			logits_dir = val;
		else if (!strcmp(a, "--turns"))
			bad = srt_cli_parse_int(val, 1, 1000, &turns);
		else if (!strcmp(a, "--conversations"))
			bad = srt_cli_parse_int(val, 1, 4096, &nconv);
		else if (!strcmp(a, "--reply-tokens"))
			bad = srt_cli_parse_int(val, 1, 1 << 20, &reply);
		else {
			fprintf(stderr, "shadowrt run: unknown option '%s' (see --help)\n", a);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "shadowrt run: %s '%s': %s%s\n", a, val,
				expect ? "expected " : "", expect ? expect : "out of range or not a valid value");
			return 2;
		}
	}
	int bar = !quiet && isatty(2);
	FILE *tab = json ? stderr : stdout; /* the human table */
	json_t *jreqs = json ? json_array() : NULL;
	size_t *plen = calloc((size_t)turns * (size_t)nconv, sizeof(size_t)); /* prompt sizes */
	if (!plen || (logits_dir && srt_ck_mkdir_p(logits_dir))) {
		fprintf(stderr, "shadowrt run: --logits-dir %s: %s\n", logits_dir ? logits_dir : "",
			plen ? strerror(errno) : "out of memory");
		free(plen);
		json_decref(jreqs);
		return 1;
	}
	char err[2048];
	int status = 1;
	struct srt_engine *e = NULL;
	struct srt_sched *sched = NULL;
	struct srt_tok_text reply0 = {0};
	struct conv *cv = calloc((size_t)nconv, sizeof(*cv));
	if (!cv)
		goto oom;
	/* a broken L2/L3 setting must not stop the main job: say so, run on L1 */
	if (srt_cli_engine_open(&o, &e, "shadowrt run", "running"))
		goto out;
	const struct srt_model_config *m = srt_engine_model(e);
	const struct srt_runtime_config *rc = srt_engine_runtime(e);
	struct srt_sched_config qc = {.max_running = nconv};
	if (srt_sched_create(e, &qc, &sched, err, sizeof(err))) {
		fprintf(stderr, "shadowrt run: %s\n", err);
		goto out;
	}
	if (srt_cli_model_tokenizer(srt_engine_model_path(e), (uint32_t)m->vocab_size, &run_tok,
				    "shadowrt run"))
		goto out;
	fprintf(tab, "shadowrt run: model %s (%s), profile %s, %d threads, page %u, chunk %d\n"
	       "workload: %d conversations x %d turns, replies of %d tokens, shared system "
	       "prompt\n",
	       m->name, srt_engine_model_path(e), srt_profile_name(srt_engine_profile(e)),
	       srt_engine_threads(e), srt_rdx_page_tokens(srt_engine_cache(e)),
	       srt_engine_chunk(e), nconv, turns, reply);
	for (int lv = 1; lv <= 2; lv++)
		if (srt_engine_tier_describe(e, lv))
			fprintf(tab, "tier %s\n", srt_engine_tier_describe(e, lv));
	fprintf(tab, "\n%4s %4s %8s %8s %6s %7s %7s %9s %12s\n", "turn", "conv", "prompt", "hit", "hit%",
	       "fromL2", "fromL3", "TTFT ms", "decode tok/s");
	for (int c = 0; c < nconv; c++)
		if (push_text(&cv[c], system_prompt, m->vocab_size))
			goto oom;
	uint64_t tot_prompt = 0, tot_hit = 0, tot_decoded = 0, tot_computed = 0;
	double t_all = srt_cli_now(), t_first_all = 0;
	int work = turns * nconv, done = 0;
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)reply);
	if (!ids)
		goto oom;
	for (int t = 0; t < turns; t++) {
		double t0 = srt_cli_now(), last_first = t0;
		for (int c = 0; c < nconv; c++) {
			char msg[256];
			snprintf(msg, sizeof(msg), "\nUser %d: %s\nAssistant:", c,
				 user_msgs[(size_t)(t * 3 + c) % N_MSGS]);
			if (push_text(&cv[c], msg, m->vocab_size))
				goto oom;
			struct srt_sched_params p = {
				.temperature = (float)rc->temperature, .top_p = (float)rc->top_p,
				.seed = rc->seed + (uint64_t)c * 1000003u + (uint64_t)t,
				.max_tokens = (uint32_t)reply, .ignore_eos = 1};
			plen[(size_t)t * (size_t)nconv + (size_t)c] = cv[c].n;
			if (srt_sched_submit(sched, cv[c].hist, cv[c].n, &p, &cv[c].req, err,
					     sizeof(err))) {
				progress_clear(bar);
				fprintf(stderr, "shadowrt run: turn %d conversation %d: %s\n", t + 1, c,
					err);
				goto out;
			}
		}
		for (int c = 0; c < nconv; c++) {
			struct srt_sched_info in;
			srt_sched_wait(cv[c].req, UINT64_MAX - 1, SIZE_MAX - 1, &in);
			if (in.finish == SRT_SCHED_ERROR) {
				progress_clear(bar);
				fprintf(stderr, "shadowrt run: turn %d conversation %d: %s\n", t + 1, c,
					in.error);
				goto out;
			}
			size_t n = srt_sched_tokens(cv[c].req, 0, ids, (size_t)reply);
			if (push(&cv[c], ids, n))
				goto oom;
			if (run_tok && c == 0) { /* conversation 0's reply as text */
				srt_tok_text_free(&reply0);
				srt_tok_decode(run_tok, ids, n, SRT_TOK_LOSSY | SRT_TOK_SKIP_SPECIAL, &reply0,
					       err, sizeof(err));
			}
			double ttft = in.t_first - t0;
			double rate = in.t_last > in.t_first
					      ? (double)(in.generated - 1) / (in.t_last - in.t_first)
					      : 0.0;
			if (in.t_first > last_first)
				last_first = in.t_first;
			progress_clear(bar);
			fprintf(tab, "%4d %4d %8llu %8llu %5.1f%% %7llu %7llu %9.1f %12.1f\n", t + 1, c,
			       (unsigned long long)in.prompt_tokens,
			       (unsigned long long)in.cached_tokens,
			       100.0 * (double)in.cached_tokens / (double)in.prompt_tokens,
			       (unsigned long long)in.cached_tier[1],
			       (unsigned long long)in.cached_tier[2], ttft * 1e3, rate);
			if (jreqs) {
				json_t *r = json_pack("{s:i, s:i, s:I, s:I, s:I, s:I, s:f}", "turn", t + 1,
						      "conversation", c, "prompt",
						      (json_int_t)in.prompt_tokens, "hit",
						      (json_int_t)in.cached_tokens, "hit_l2",
						      (json_int_t)in.cached_tier[1], "hit_l3",
						      (json_int_t)in.cached_tier[2], "ttft_ms", ttft * 1e3);
				json_t *rep = json_array();
				for (size_t k = 0; k < n; k++)
					json_array_append_new(rep, json_integer(ids[k]));
				json_object_set_new(r, "reply", rep);
				json_array_append_new(jreqs, r);
			}
			tot_prompt += in.prompt_tokens;
			tot_hit += in.cached_tokens;
			tot_decoded += in.generated;
			srt_sched_release(cv[c].req);
			cv[c].req = NULL;
			progress(bar, ++done, work, "turns");
		}
		t_first_all += last_first - t0;
		if (run_tok)
			fprintf(tab, "     conversation 0 replied (random weights, random text): %.*s\n",
			       (int)reply0.len, reply0.data ? reply0.data : "");
		fflush(stdout);
	}
	free(ids);
	double wall = srt_cli_now() - t_all;
	struct srt_sched_stats st;
	srt_sched_stats(sched, &st);
	tot_computed = st.computed_tokens;
	progress_clear(bar);
	fprintf(tab, "\nwall %.2f s: %llu prompt tokens, %llu computed (prefill + decode rows) in %llu "
	       "batched steps, %llu tokens generated: %.1f generated tokens/s, %.1f computed "
	       "tokens/s; time to the turn's last first token %.2f s in all\n",
	       wall, (unsigned long long)tot_prompt, (unsigned long long)tot_computed,
	       (unsigned long long)st.steps, (unsigned long long)tot_decoded,
	       wall > 0 ? (double)tot_decoded / wall : 0.0,
	       wall > 0 ? (double)tot_computed / wall : 0.0, t_first_all);
	fprintf(tab, "prompt tokens %llu, served from cache %llu: hit rate %.1f%%\n",
	       (unsigned long long)tot_prompt, (unsigned long long)tot_hit,
	       tot_prompt ? 100.0 * (double)tot_hit / (double)tot_prompt : 0.0);
	/* the scheduler is idle: the engine's cache and tiers can be read from here */
	srt_sched_destroy(sched);
	sched = NULL;
	for (int t = 0; logits_dir && t < turns; t++)
		for (int c = 0; c < nconv; c++)
			if (write_logits(e, logits_dir, t + 1, c, cv[c].hist,
					 plen[(size_t)t * (size_t)nconv + (size_t)c], (size_t)reply))
				goto out;
	struct srt_tmgr *tm = srt_engine_tiers(e);
	if (tm) {
		struct srt_tmgr_stats ts;
		char b1[32], b2[32], b3[32];
		srt_tmgr_stats(tm, &ts);
		fprintf(tab, "hits by tier: L1 %llu, L2 %llu, L3 %llu tokens; pages demoted L1->L2 %llu, "
		       "L1->L3 %llu, L2->L3 %llu, promoted L2->L1 %llu, L3->L1 %llu\n"
		       "L2 holds %s (peak %s), L3 %s in %llu objects\n",
		       (unsigned long long)ts.hit_tokens[0], (unsigned long long)ts.hit_tokens[1],
		       (unsigned long long)ts.hit_tokens[2], (unsigned long long)ts.pages_l1_to_l2,
		       (unsigned long long)ts.pages_l1_to_l3, (unsigned long long)ts.pages_l2_to_l3,
		       (unsigned long long)ts.pages_l2_to_l1, (unsigned long long)ts.pages_l3_to_l1,
		       srt_format_size(ts.l2_bytes, b1, sizeof(b1)),
		       srt_format_size(ts.l2_peak, b2, sizeof(b2)),
		       srt_format_size(ts.l3_bytes, b3, sizeof(b3)),
		       (unsigned long long)ts.l3_objects);
	}
	struct srt_rdx_cache *cache = srt_engine_cache(e);
	fprintf(tab, "KV cache per pool (L1):\n%-14s %6s %10s %10s %8s %8s\n", "pool", "ratio", "now",
	       "peak", "pages", "evicted");
	for (uint32_t p = 0; p < srt_rdx_pool_count(cache); p++) {
		struct srt_rdx_pool_stats st;
		char b1[32], b2[32];
		srt_rdx_pool_stats(cache, p, &st);
		fprintf(tab, "%-14s %6u %10s %10s %8llu %8llu\n", st.name, st.ratio,
		       srt_format_size(st.bytes, b1, sizeof(b1)),
		       srt_format_size(st.peak_bytes, b2, sizeof(b2)),
		       (unsigned long long)st.pages, (unsigned long long)st.evicted_pages);
	}
	if (jreqs) {
		json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:f}", "model", m->name,
				      "prompt_tokens", (json_int_t)tot_prompt, "hit_tokens",
				      (json_int_t)tot_hit, "computed_tokens", (json_int_t)tot_computed,
				      "generated_tokens", (json_int_t)tot_decoded, "wall_s", wall);
		json_t *pools = json_array();
		for (uint32_t p = 0; p < srt_rdx_pool_count(cache); p++) {
			struct srt_rdx_pool_stats ps;
			srt_rdx_pool_stats(cache, p, &ps);
			json_array_append_new(pools, json_pack("{s:s, s:i, s:I, s:I}", "name", ps.name,
							       "ratio", (int)ps.ratio, "bytes",
							       (json_int_t)ps.bytes, "peak_bytes",
							       (json_int_t)ps.peak_bytes));
		}
		json_object_set_new(j, "pools", pools);
		json_object_set(j, "requests", jreqs);
		char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (txt)
			printf("%s\n", txt);
		free(txt);
		json_decref(j);
	}
	status = 0;
	goto out;
oom:
	progress_clear(bar);
	fprintf(stderr, "shadowrt run: out of memory\n");
out:
	if (cv)
		for (int c = 0; c < nconv; c++) {
			srt_sched_release(cv[c].req);
			free(cv[c].hist);
		}
	srt_sched_destroy(sched);
	srt_engine_close(e);
	srt_tok_free(run_tok);
	run_tok = NULL;
	srt_tok_text_free(&reply0);
	free(cv);
	free(plen);
	json_decref(jreqs);
	return status;
}
