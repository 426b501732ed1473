/*
 * shadowrt run: the main job. A built-in multi-turn chat workload on the executor: several
 * conversations interleaved (their decode steps batched into one forward call), each turn
 * resending the whole history plus a new user message, so ShadowRadix serves the history from
 * cache. Prints per turn the prompt size, the prefix hit, TTFT and decode rate; at the end the
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
#include "exec/engine.h"
#include "exec/sampler.h"
#include "radix/radix.h"
#include "tier/manager.h"

/* mkdir -p; 0 or -1 with errno */
static int mkdir_p(const char *dir)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s", dir);
	for (char *c = p + 1; *c; c++)
		if (*c == '/') {
			*c = 0;
			if (mkdir(p, 0755) && errno != EEXIST)
				return -1;
			*c = '/';
		}
	return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

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

static void run_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt run [options]\n"
		"\n"
		"Serve a built-in multi-turn chat workload: --conversations conversations share a\n"
		"system prompt; in each of --turns turns every conversation sends its whole history\n"
		"plus a new user message (prefilled from the longest cached prefix, in chunks), then\n"
		"all conversations decode --reply-tokens tokens together, one batched forward per step\n"
		"(eos does not stop a reply). With no options this runs the embedded default: the\n"
		"synthetic tiny model (generated under $XDG_CACHE_HOME/shadowrt/models or\n"
		"./shadowrt-models when missing), CPU plugins. Prints per turn and conversation the\n"
		"prompt tokens, prefix-hit tokens and rate, time to first token (from the start of the\n"
		"turn) and the batched decode rate; at the end the throughput, the overall hit rate and\n"
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
		"                       (DIR/turnT-convC.f32, float32 [reply-tokens][vocab])\n"
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
	struct srt_seq *seq;
	int32_t next; /* token to feed at the next decode step */
	struct srt_sampler smp;
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
		if (!strcmp(a, "--model"))
			o.model = val;
		else if (!strcmp(a, "--config"))
			o.config_path = val;
		else if (!strcmp(a, "--logits-dir"))
			logits_dir = val;
		else if (!strcmp(a, "--turns"))
			bad = srt_cli_parse_int(val, 1, 1000, &turns);
		else if (!strcmp(a, "--conversations"))
			bad = srt_cli_parse_int(val, 1, 4096, &nconv);
		else if (!strcmp(a, "--reply-tokens"))
			bad = srt_cli_parse_int(val, 1, 1 << 20, &reply);
		else if (!strcmp(a, "--threads"))
			bad = srt_cli_parse_int(val, 0, 4096, &o.threads);
		else if (!strcmp(a, "--profile")) {
			if (!strcmp(val, "reference"))
				o.profile = 0;
			else if (!strcmp(val, "f32"))
				o.profile = 1;
			else
				bad = 1;
		} else {
			fprintf(stderr, "shadowrt run: unknown option '%s' (see --help)\n", a);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "shadowrt run: %s '%s': out of range or not a valid value\n", a,
				val);
			return 2;
		}
	}
	int bar = !quiet && isatty(2);
	FILE *tab = json ? stderr : stdout; /* the human table */
	json_t *jreqs = json ? json_array() : NULL;
	FILE **lf = logits_dir ? calloc((size_t)nconv, sizeof(FILE *)) : NULL;
	if (logits_dir && (!lf || mkdir_p(logits_dir))) {
		fprintf(stderr, "shadowrt run: --logits-dir %s: %s\n", logits_dir,
			lf ? strerror(errno) : "out of memory");
		free(lf);
		return 1;
	}
	char err[2048];
	int status = 1;
	struct srt_engine *e = NULL;
	struct conv *cv = calloc((size_t)nconv, sizeof(*cv));
	struct srt_seq **seqs = calloc((size_t)nconv, sizeof(*seqs));
	int32_t *toks = calloc((size_t)nconv, sizeof(int32_t));
	float *logits = NULL;
	void *scratch = NULL;
	if (!cv || !seqs || !toks)
		goto oom;
	if (srt_engine_open(&o, &e, err, sizeof(err))) {
		if (!o.tiers || !strstr(err, "[tier.")) {
			fprintf(stderr, "shadowrt run: %s\n", err);
			goto out;
		}
		/* a broken L2/L3 setting must not stop the main job: say so, run on L1 */
		fprintf(stderr, "shadowrt run: warning: tiers unavailable, running with L1 only "
			"(--no-tiers): %s\n", err);
		o.tiers = 0;
		if (srt_engine_open(&o, &e, err, sizeof(err))) {
			fprintf(stderr, "shadowrt run: %s\n", err);
			goto out;
		}
	}
	const struct srt_model_config *m = srt_engine_model(e);
	const struct srt_runtime_config *rc = srt_engine_runtime(e);
	size_t V = (size_t)m->vocab_size;
	logits = malloc(sizeof(float) * V * (size_t)nconv);
	scratch = malloc(sizeof(float) * V * 2);
	if (!logits || !scratch)
		goto oom;
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
	for (int c = 0; c < nconv; c++) {
		srt_sampler_init(&cv[c].smp, (float)rc->temperature, (float)rc->top_p,
				 rc->seed + (uint64_t)c);
		if (push_text(&cv[c], system_prompt, m->vocab_size))
			goto oom;
	}
	uint64_t tot_prompt = 0, tot_hit = 0, tot_computed = 0, tot_decoded = 0;
	double t_all = srt_cli_now(), t_prefill_all = 0, t_decode_all = 0;
	int work = turns * (nconv + reply), done = 0;
	for (int t = 0; t < turns; t++) {
		double t0 = srt_cli_now();
		double ttft[4096];
		uint64_t hits[4096], tiers[4096][3];
		for (int c = 0; c < nconv; c++) {
			char msg[256];
			snprintf(msg, sizeof(msg), "\nUser %d: %s\nAssistant:", c,
				 user_msgs[(size_t)(t * 3 + c) % N_MSGS]);
			if (push_text(&cv[c], msg, m->vocab_size))
				goto oom;
			if (srt_engine_seq_start(e, cv[c].hist, cv[c].n, 1, &cv[c].seq, &hits[c], err,
						 sizeof(err)) ||
			    srt_engine_prefill(e, cv[c].seq, logits + (size_t)c * V, 0, err,
					       sizeof(err))) {
				progress_clear(bar);
				fprintf(stderr, "shadowrt run: turn %d conversation %d: %s\n", t + 1, c,
					err);
				goto out;
			}
			srt_seq_hit_tiers(cv[c].seq, tiers[c]);
			cv[c].next = srt_sample(&cv[c].smp, logits + (size_t)c * V, (int32_t)V,
						scratch);
			if (lf && (!(lf[c] = logits_file(logits_dir, t + 1, c, "f32", "wb")) ||
				   fwrite(logits + (size_t)c * V, sizeof(float), V, lf[c]) != V))
				goto out;
			ttft[c] = srt_cli_now() - t0;
			seqs[c] = cv[c].seq;
			tot_prompt += cv[c].n;
			tot_hit += hits[c];
			tot_computed += cv[c].n - hits[c];
			progress(bar, ++done, work, "prefill");
		}
		double t_pre = srt_cli_now() - t0;
		t_prefill_all += t_pre;
		double t1 = srt_cli_now();
		for (int k = 0; k < reply; k++) {
			for (int c = 0; c < nconv; c++) {
				toks[c] = cv[c].next;
				if (push(&cv[c], &toks[c], 1))
					goto oom;
			}
			if (k == reply - 1)
				break; /* the last reply token is part of the next prompt */
			if (srt_engine_decode(e, seqs, (uint32_t)nconv, toks, logits, err,
					      sizeof(err))) {
				progress_clear(bar);
				fprintf(stderr, "shadowrt run: turn %d decode step %d: %s\n", t + 1, k,
					err);
				goto out;
			}
			for (int c = 0; c < nconv; c++) {
				cv[c].next = srt_sample(&cv[c].smp, logits + (size_t)c * V, (int32_t)V,
							scratch);
				if (lf && fwrite(logits + (size_t)c * V, sizeof(float), V, lf[c]) != V) {
					fprintf(stderr, "shadowrt run: --logits-dir: write failed\n");
					goto out;
				}
			}
			tot_decoded += (uint64_t)nconv;
			progress(bar, ++done, work, "decode");
		}
		done = (t + 1) * (nconv + reply);
		double t_dec = srt_cli_now() - t1;
		t_decode_all += t_dec;
		double rate = t_dec > 0 ? (double)(reply - 1) * nconv / t_dec : 0;
		progress_clear(bar);
		for (int c = 0; c < nconv; c++) {
			uint64_t plen = srt_seq_len(cv[c].seq) - (uint64_t)(reply - 1);
			fprintf(tab, "%4d %4d %8llu %8llu %5.1f%% %7llu %7llu %9.1f %12.1f\n", t + 1, c,
			       (unsigned long long)plen, (unsigned long long)hits[c],
			       100.0 * (double)hits[c] / (double)plen,
			       (unsigned long long)tiers[c][1], (unsigned long long)tiers[c][2],
			       ttft[c] * 1e3, rate);
			const int32_t *rep = cv[c].hist + cv[c].n - (size_t)reply;
			if (lf) {
				FILE *tf = logits_file(logits_dir, t + 1, c, "tokens", "w");
				int bad = !tf || fclose(lf[c]);
				lf[c] = NULL;
				for (int k = 0; tf && k < reply; k++)
					fprintf(tf, "%s%d", k ? "," : "", rep[k]);
				if (bad || (tf && fclose(tf)))
					goto out;
			}
			if (jreqs) {
				json_t *r = json_pack("{s:i, s:i, s:I, s:I, s:I, s:I, s:f}", "turn", t + 1,
						      "conversation", c, "prompt", (json_int_t)plen,
						      "hit", (json_int_t)hits[c], "hit_l2",
						      (json_int_t)tiers[c][1], "hit_l3",
						      (json_int_t)tiers[c][2], "ttft_ms", ttft[c] * 1e3);
				json_t *ids = json_array();
				for (int k = 0; k < reply; k++)
					json_array_append_new(ids, json_integer(rep[k]));
				json_object_set_new(r, "reply", ids);
				json_array_append_new(jreqs, r);
			}
			if (srt_engine_seq_finish(cv[c].seq, NULL, err, sizeof(err))) {
				fprintf(stderr, "shadowrt run: turn %d conversation %d: %s\n", t + 1, c,
					err);
				goto out;
			}
			srt_engine_seq_free(cv[c].seq);
			cv[c].seq = NULL;
		}
		fflush(stdout);
	}
	double wall = srt_cli_now() - t_all;
	progress_clear(bar);
	fprintf(tab, "\nwall %.2f s: prefill %.2f s (%llu tokens computed, %.1f tokens/s), decode %.2f s "
	       "(%llu tokens, %.1f tokens/s over %d sequences)\n",
	       wall, t_prefill_all, (unsigned long long)tot_computed,
	       t_prefill_all > 0 ? (double)tot_computed / t_prefill_all : 0.0, t_decode_all,
	       (unsigned long long)tot_decoded,
	       t_decode_all > 0 ? (double)tot_decoded / t_decode_all : 0.0, nconv);
	fprintf(tab, "prompt tokens %llu, served from cache %llu: hit rate %.1f%%\n",
	       (unsigned long long)tot_prompt, (unsigned long long)tot_hit,
	       tot_prompt ? 100.0 * (double)tot_hit / (double)tot_prompt : 0.0);
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
		json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "model", m->name,
				      "prompt_tokens", (json_int_t)tot_prompt, "hit_tokens",
				      (json_int_t)tot_hit, "computed_tokens", (json_int_t)tot_computed,
				      "decoded_tokens", (json_int_t)tot_decoded, "wall_s", wall,
				      "prefill_tok_s", t_prefill_all > 0 ? (double)tot_computed /
									  t_prefill_all : 0.0,
				      "decode_tok_s", t_decode_all > 0 ? (double)tot_decoded /
									t_decode_all : 0.0);
		json_t *pools = json_array();
		for (uint32_t p = 0; p < srt_rdx_pool_count(cache); p++) {
			struct srt_rdx_pool_stats st;
			srt_rdx_pool_stats(cache, p, &st);
			json_array_append_new(pools, json_pack("{s:s, s:i, s:I, s:I}", "name", st.name,
							       "ratio", (int)st.ratio, "bytes",
							       (json_int_t)st.bytes, "peak_bytes",
							       (json_int_t)st.peak_bytes));
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
			srt_engine_seq_free(cv[c].seq);
			free(cv[c].hist);
		}
	srt_engine_close(e);
	for (int c = 0; lf && c < nconv; c++)
		if (lf[c])
			fclose(lf[c]);
	free(lf);
	json_decref(jreqs);
	free(cv);
	free(seqs);
	free(toks);
	free(logits);
	free(scratch);
	return status;
}
