/*
 * shadowrt ab: two configurations over one workload, in one process.
 *
 * Side A and side B are runtime configs (--a FILE / --b FILE over the built-in default, or
 * --config for both) plus overrides (--set for both, --a-set / --b-set per side). The workload
 * is a prompts file, a slice of a Mooncake trace, or the built-in multi-turn chat workload.
 * With --layers the teacher-forced pass also compares every layer's residual-stream rows
 * (plugins/residual/tap records them around each side's residual plugin).
 *
 *  1. Teacher-forced divergence (both engines open, untimed): every request's prompt through A
 *     and through B from position 0, logits of every position compared (check/diverge.h):
 *     KL(A || B), top-1 agreement, max |dlogit|, first divergent position; aggregated per
 *     position along the prompt (the plot).
 *  2. Timed passes, interleaved A B A B ... for --repeats rounds, each a fresh engine with
 *     its L1 cache: every request in order with prefix reuse (prefill of the part not cached,
 *     then --max-new-tokens greedy decode steps, then insert into the cache). Per side: prefill
 *     and decode tokens/s, hit rate, KV bytes per pool; B/A speed ratios per round, reported as
 *     median with min and max. The greedy tokens of round 1 give the free-running agreement.
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "check/diverge.h"
#include "commands.h"
#include "config/runtime_config.h"
#include "exec/engine.h"
#include "plugin/host.h"
#include "plugin/registry.h"
#include "radix/radix.h"
#include "trace/trace.h"

#define AB_MAX_SETS 128
#define AB_MAX_REQS 4096
#define AB_MAX_POOLS 32

static void ab_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt ab [--a FILE] [--b FILE] [--a-set K=V]... [--b-set K=V]... [options]\n"
		"\n"
		"Compare two configurations (two kernels for one layer type, two cache policies, two\n"
		"numerics profiles) over one workload in one process: teacher-forced divergence of\n"
		"the logits per position (KL, top-1 agreement, max |dlogit|, first divergent\n"
		"position), free-running agreement of the greedy tokens, prefill and decode speed\n"
		"ratios over interleaved A/B rounds (median, min, max), hit rates and KV bytes per\n"
		"pool. Text table, or --json; --plot FILE.png draws the divergence along the position\n"
		"(gnuplot).\n"
		"\n"
		"sides:\n"
		"  --a FILE, --b FILE   runtime config of side A / B (default: --config, or the\n"
		"                       built-in default)\n"
		"  --a-set S.K=V        an override for side A only (repeatable); --b-set for B;\n"
		"                       --set applies to both, before the per-side ones\n"
		"  --config FILE        runtime config of both sides unless --a/--b\n"
		"workload (one of; default: the built-in multi-turn chat workload):\n"
		"  --prompts FILE       one prompt per line: token ids (\"1,2,3\" or \"1 2 3\"), or text\n"
		"                       whose UTF-8 bytes are the token ids; '#' lines are comments\n"
		"  --trace FILE         Mooncake trace (JSON lines with hash_ids); token ids folded\n"
		"                       into the model's vocabulary\n"
		"  --trace-slice A:N    requests A .. A+N-1 of the trace (default 0:8)\n"
		"  --conversations N    built-in workload: conversations (default 3)\n"
		"  --turns N            built-in workload: turns per conversation (default 3)\n"
		"options:\n"
		"  --model DIR|PRESET   checkpoint or preset (default: side A's [runtime] model)\n"
		"  --max-prompt N       cut prompts to N tokens (default 2048)\n"
		"  --max-new-tokens N   greedy tokens per request in the timed rounds (default 16)\n"
		"  --repeats N          interleaved A/B rounds (default 3)\n"
		"  --threads N          worker threads of both sides (default: the configs')\n"
		"  --tiers              timed rounds with each config's L2/L3 tiers behind L1 (a fresh\n"
		"                       L3 path per round and side; default: L1 only) to compare cache\n"
		"                       policies; hits are reported by tier\n"
		"  --layers             also the per-layer divergence of the residual stream: each\n"
		"                       layer's attention input (and the head output) of A vs B on\n"
		"                       the same tokens, through the `tap` residual plugin\n"
		"  --json               the report as JSON on stdout (with per-position arrays)\n"
		"  --plot FILE.png      plot KL and max |dlogit| along the prompt position\n"
		"  -q, --quiet          no progress on stderr\n"
		"  -h, --help           this help\n");
}

struct ab_side {
	const char *name;   /* "A" / "B" */
	const char *config; /* NULL = built-in */
	const char *sets[AB_MAX_SETS];
	size_t n_sets;
	/* results */
	double prefill_tps[64], decode_tps[64];
	uint64_t prompt_tokens, hit_tokens, computed;
	uint64_t hit_tier[3]; /* of hit_tokens: from L1, restored from L2, from L3 */
	int32_t *greedy; /* [n_reqs][max_new] of round 1 */
	struct {
		char name[SRT_POOL_NAME_MAX];
		uint64_t bytes, peak, page_bytes;
	} pools[AB_MAX_POOLS];
	uint32_t n_pools;
	char desc[512];
};

struct ab_req {
	int32_t *t;
	uint64_t n;
};

struct ab {
	struct ab_side side[2];
	const char *model;
	int threads, quiet, repeats, max_new;
	int layers;          /* --layers: per-layer divergence through the tap plugin */
	int tiers;           /* --tiers: the configs' L2/L3 in the timed rounds */
	char tmp[4096];      /* scratch directory of --layers */
	struct ab_req *reqs;
	size_t n_reqs;
	char workload[256];
};

/* An engine of side s; tiers = 1: with the config's L2/L3 behind L1, the L3 path replaced by
 * `l3path` (a fresh one per round, so every round starts cold). */
static int open_side_tiers(const struct ab *ab, const struct ab_side *s, int tiers,
			   const char *l3path, struct srt_engine **e, char *err, size_t errlen)
{
	const char *sets[AB_MAX_SETS + 1];
	char l3[4300];
	size_t n = 0;
	for (size_t i = 0; i < s->n_sets; i++)
		sets[n++] = s->sets[i];
	if (tiers && l3path) {
		snprintf(l3, sizeof(l3), "tier.l3.path=%s", l3path);
		sets[n++] = l3;
	}
	int rc = srt_runtime_config_set_overrides(sets, n, err, errlen);
	if (rc)
		return rc;
	struct srt_engine_opts o = {.config_path = s->config, .model = ab->model,
				    .threads = ab->threads, .profile = -1, .quiet = ab->quiet,
				    .tiers = tiers};
	return srt_engine_open(&o, e, err, errlen);
}

static int open_side(const struct ab *ab, const struct ab_side *s, struct srt_engine **e,
		     char *err, size_t errlen)
{
	return open_side_tiers(ab, s, 0, NULL, e, err, errlen);
}

/* ---------------------------------------------------------------------------------------- */
/* Workloads.                                                                                 */

static int push_req(struct ab *ab, int32_t *t, uint64_t n)
{
	if (ab->n_reqs == AB_MAX_REQS || !n) {
		free(t);
		return ab->n_reqs == AB_MAX_REQS ? -1 : 0;
	}
	ab->reqs[ab->n_reqs].t = t;
	ab->reqs[ab->n_reqs].n = n;
	ab->n_reqs++;
	return 0;
}

/* Built-in: conversations share a system prompt; turn t of a conversation sends the system
 * prompt and the whole history (user messages and fixed replies) so far. Deterministic, and
 * the same tokens for both sides. */
static int builtin_workload(struct ab *ab, int conv, int turns, int32_t vocab)
{
	enum { SYS = 300, USER = 40, REPLY = 24 };
	for (int c = 0; c < conv; c++)
		for (int t = 0; t < turns; t++) {
			uint64_t n = SYS + (uint64_t)(t + 1) * USER + (uint64_t)t * REPLY;
			int32_t *p = malloc(sizeof(int32_t) * n);
			if (!p)
				return -1;
			srt_div_prompt(p, SYS, vocab, 1000);
			uint64_t k = SYS;
			for (int u = 0; u <= t; u++) {
				srt_div_prompt(p + k, USER, vocab, 2000 + (uint64_t)c * 100 + (uint64_t)u);
				k += USER;
				if (u < t) {
					srt_div_prompt(p + k, REPLY, vocab,
						       3000 + (uint64_t)c * 100 + (uint64_t)u);
					k += REPLY;
				}
			}
			if (push_req(ab, p, n))
				return -1;
		}
	snprintf(ab->workload, sizeof(ab->workload), "built-in multi-turn: %d conversations x %d "
		 "turns, shared 300-token system prompt", conv, turns);
	return 0;
}

static int prompts_workload(struct ab *ab, const char *path, int32_t vocab, uint64_t max_prompt,
			    char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: cannot open: %m", path);
		return -1;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int lineno = 0, rc = 0;
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		if (!len || line[0] == '#')
			continue;
		int32_t *t = malloc(sizeof(int32_t) * ((size_t)len + 1));
		uint64_t n = 0;
		if (!t) {
			rc = -1;
			break;
		}
		int ids = strspn(line, "0123456789, ") == (size_t)len;
		if (ids) {
			for (char *s = line; *s && n < max_prompt;) {
				char *end;
				long v = strtol(s, &end, 10);
				if (end == s) {
					s++;
					continue;
				}
				if (v < 0 || v >= vocab) {
					snprintf(err, errlen, "%s:%d: token id %ld is outside the "
						 "model's vocabulary [0, %d)", path, lineno, v, vocab);
					free(t);
					rc = -1;
					goto done;
				}
				t[n++] = (int32_t)v;
				s = end;
			}
		} else {
			for (ssize_t i = 0; i < len && n < max_prompt; i++) {
				unsigned char b = (unsigned char)line[i];
				if (b >= vocab) {
					snprintf(err, errlen, "%s:%d: byte %u is not a token id of a "
						 "%d-token vocabulary", path, lineno, b, vocab);
					free(t);
					rc = -1;
					goto done;
				}
				t[n++] = b;
			}
		}
		if (push_req(ab, t, n)) {
			snprintf(err, errlen, "%s: more than %d prompts", path, AB_MAX_REQS);
			rc = -1;
			break;
		}
	}
done:
	free(line);
	fclose(f);
	if (!rc && !ab->n_reqs) {
		snprintf(err, errlen, "%s: no prompt in the file", path);
		rc = -1;
	}
	snprintf(ab->workload, sizeof(ab->workload), "prompts of %s", path);
	return rc;
}

static int trace_workload(struct ab *ab, const char *path, size_t first, size_t count,
			  int32_t vocab, uint64_t max_prompt, char *err, size_t errlen)
{
	struct srt_trace *tr;
	if (srt_trace_load(path, first + count, &tr, err, errlen))
		return -1;
	int rc = 0;
	for (size_t i = first; i < tr->n && i < first + count; i++) {
		const struct srt_trace_req *r = &tr->reqs[i];
		int32_t *all = malloc(sizeof(int32_t) * (r->input_length ? r->input_length : 1));
		if (!all) {
			rc = -1;
			break;
		}
		srt_trace_input_tokens(r, all);
		uint64_t n = r->input_length < max_prompt ? r->input_length : max_prompt;
		for (uint64_t k = 0; k < n; k++) /* fold into [2, vocab): no bos/eos */
			all[k] = 2 + (int32_t)((uint32_t)all[k] % (uint32_t)(vocab - 2));
		if (push_req(ab, all, n)) {
			rc = -1;
			break;
		}
	}
	srt_trace_free(tr);
	if (!rc && !ab->n_reqs) {
		snprintf(err, errlen, "%s: no request in slice %zu:%zu", path, first, count);
		rc = -1;
	}
	snprintf(ab->workload, sizeof(ab->workload), "trace %s, requests %zu..%zu", path, first,
		 first + ab->n_reqs - 1);
	return rc;
}

/* Put a formatted prefix in front of the message in err (cut to errlen). */
static void prefix_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void prefix_err(char *err, size_t errlen, const char *fmt, ...)
{
	char pre[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	size_t pl = n < 0 ? 0 : (size_t)n < sizeof(pre) ? (size_t)n : sizeof(pre) - 1;
	size_t ml = strnlen(err, errlen);
	if (pl >= errlen)
		return;
	if (pl + ml >= errlen)
		ml = errlen - pl - 1;
	memmove(err + pl, err, ml);
	memcpy(err, pre, pl);
	err[pl + ml] = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* 1. Teacher-forced divergence.                                                              */

struct ab_div {
	uint64_t max_len;
	double *kl_sum, *maxabs; /* per position */
	uint64_t *top1, *count;
	struct srt_div all;      /* over every position of every request */
	int64_t first_req, first_pos, first_top1_req, first_top1_pos;
	double kl_sum_all;
	uint64_t top1_all, positions;
};

/* --layers: per model layer (and the head, last), A vs B on the rows the tap recorded */
struct ab_layer {
	double rel_sum;   /* sum over rows of ||a - b|| / ||a|| */
	double max_abs;
	uint64_t rows, diff_rows;
};

struct ab_tap {
	char sets[2][3][4300]; /* per side: residual.plugin, residual.inner, residual.dump */
	char dump[2][4200];
	long off[2];
	int n_layers;          /* model layers; index n_layers is the head */
	struct ab_layer *st;
};

/* Put the tap plugin in front of each side's residual plugin (paths from the registry). */
static int tap_setup(struct ab *ab, struct ab_tap *tp, char *err, size_t errlen)
{
	for (int s = 0; s < 2; s++) {
		struct srt_runtime_config rc;
		struct srt_host *host = NULL;
		struct srt_registry *reg = NULL;
		const struct srt_plugin_info *in, *tap;
		int st = srt_runtime_config_load_ex(ab->side[s].config, ab->side[s].sets,
						    ab->side[s].n_sets, &rc, err, errlen);
		if (st)
			return st;
		char why[2048];
		st = srt_host_create(1, &host, why, sizeof(why));
		if (!st)
			st = srt_registry_open(&reg, rc.plugin_dirs, (size_t)rc.n_plugin_dirs, host, 0);
		if (!st)
			st = srt_registry_find(reg, SRT_KIND_RESIDUAL, rc.residual.name, &in, why,
					       sizeof(why));
		if (!st)
			st = srt_registry_find(reg, SRT_KIND_RESIDUAL, "tap", &tap, why, sizeof(why));
		if (!st) {
			snprintf(tp->sets[s][0], sizeof(tp->sets[s][0]), "residual.plugin=%s", tap->path);
			snprintf(tp->sets[s][1], sizeof(tp->sets[s][1]), "residual.inner=%s", in->path);
			snprintf(tp->dump[s], sizeof(tp->dump[s]), "%s/layers-%c.bin", ab->tmp, 'A' + s);
			snprintf(tp->sets[s][2], sizeof(tp->sets[s][2]), "residual.dump=%s", tp->dump[s]);
		} else {
			snprintf(err, errlen, "%.1900s", why);
			prefix_err(err, errlen, "--layers, side %s: ", ab->side[s].name);
		}
		srt_registry_close(reg);
		srt_host_destroy(host);
		srt_runtime_config_free(&rc);
		if (st)
			return st;
		if (ab->side[s].n_sets + 3 > AB_MAX_SETS) {
			snprintf(err, errlen, "too many --set options");
			return SRT_EINVAL;
		}
		for (int k = 0; k < 3; k++)
			ab->side[s].sets[ab->side[s].n_sets++] = tp->sets[s][k];
	}
	return 0;
}

/* The records a side's tap wrote since the last call, as per-layer row arrays. */
static int tap_read(struct ab_tap *tp, int s, size_t d, float **rows, uint64_t *n)
{
	FILE *f = fopen(tp->dump[s], "rb");
	if (!f || fseek(f, tp->off[s], SEEK_SET)) {
		if (f)
			fclose(f);
		return -1;
	}
	int32_t hdr[2];
	int rc = 0;
	while (fread(hdr, sizeof(hdr), 1, f) == 1) {
		int li = hdr[0] < 0 ? tp->n_layers : hdr[0];
		if (li > tp->n_layers || hdr[1] < 0) {
			rc = -1;
			break;
		}
		float *r = realloc(rows[li], sizeof(float) * d * (n[li] + (uint64_t)hdr[1]));
		if (!r) {
			rc = -1;
			break;
		}
		rows[li] = r;
		if (fread(r + n[li] * d, sizeof(float) * d, (size_t)hdr[1], f) != (size_t)hdr[1]) {
			rc = -1;
			break;
		}
		n[li] += (uint64_t)hdr[1];
	}
	tp->off[s] = ftell(f);
	fclose(f);
	return rc;
}

/* Compare the rows A and B recorded for one request into the per-layer statistics. */
static int tap_compare(struct ab_tap *tp, size_t d)
{
	int L = tp->n_layers + 1, rc = 0;
	float **rows[2];
	uint64_t *n[2];
	for (int s = 0; s < 2; s++) {
		rows[s] = calloc((size_t)L, sizeof(float *));
		n[s] = calloc((size_t)L, sizeof(uint64_t));
		if (!rows[s] || !n[s] || tap_read(tp, s, d, rows[s], n[s]))
			rc = -1;
	}
	for (int l = 0; !rc && l < L; l++) {
		uint64_t m = n[0][l] < n[1][l] ? n[0][l] : n[1][l];
		for (uint64_t r = 0; r < m; r++) {
			const float *a = rows[0][l] + r * d, *b = rows[1][l] + r * d;
			double na = 0, nd = 0, mx = 0;
			for (size_t k = 0; k < d; k++) {
				double x = (double)a[k] - (double)b[k];
				na += (double)a[k] * a[k];
				nd += x * x;
				if (fabs(x) > mx)
					mx = fabs(x);
			}
			struct ab_layer *st = &tp->st[l];
			st->rel_sum += na > 0 ? sqrt(nd / na) : sqrt(nd);
			if (mx > st->max_abs)
				st->max_abs = mx;
			st->diff_rows += memcmp(a, b, sizeof(float) * d) != 0;
			st->rows++;
		}
	}
	for (int s = 0; s < 2; s++) {
		for (int l = 0; rows[s] && l < L; l++)
			free(rows[s][l]);
		free(rows[s]);
		free(n[s]);
	}
	return rc;
}

static int teacher_forced(struct ab *ab, struct ab_div *d, struct ab_tap *tp, char *err,
			  size_t errlen)
{
	struct srt_engine *e[2] = {NULL, NULL};
	float *lg[2] = {NULL, NULL};
	double *kl = NULL, *ma = NULL;
	uint8_t *t1 = NULL;
	int rc = -1;
	for (int s = 0; s < 2; s++)
		if (open_side(ab, &ab->side[s], &e[s], err, errlen)) {
			prefix_err(err, errlen, "side %s: ", ab->side[s].name);
			goto out;
		}
	int32_t V = srt_engine_model(e[0])->vocab_size;
	if (srt_engine_model(e[1])->vocab_size != V) {
		snprintf(err, errlen, "the two sides load models of different vocabularies");
		goto out;
	}
	d->max_len = 0;
	for (size_t i = 0; i < ab->n_reqs; i++)
		if (ab->reqs[i].n > d->max_len)
			d->max_len = ab->reqs[i].n;
	d->kl_sum = calloc(d->max_len, sizeof(double));
	d->maxabs = calloc(d->max_len, sizeof(double));
	d->top1 = calloc(d->max_len, sizeof(uint64_t));
	d->count = calloc(d->max_len, sizeof(uint64_t));
	kl = malloc(sizeof(double) * d->max_len);
	ma = malloc(sizeof(double) * d->max_len);
	t1 = malloc(d->max_len);
	for (int s = 0; s < 2; s++)
		lg[s] = malloc(sizeof(float) * (size_t)V * d->max_len);
	if (!d->kl_sum || !d->maxabs || !d->top1 || !d->count || !kl || !ma || !t1 || !lg[0] ||
	    !lg[1]) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	d->first_req = d->first_pos = d->first_top1_req = d->first_top1_pos = -1;
	memset(&d->all, 0, sizeof(d->all));
	for (size_t i = 0; i < ab->n_reqs; i++) {
		const struct ab_req *r = &ab->reqs[i];
		for (int s = 0; s < 2; s++) {
			struct srt_seq *q = NULL;
			int st = srt_engine_seq_start(e[s], r->t, r->n, 0, &q, NULL, err, errlen);
			if (!st)
				st = srt_engine_prefill(e[s], q, lg[s], 1, err, errlen);
			srt_engine_seq_free(q);
			if (st) {
				prefix_err(err, errlen, "side %s, request %zu: ", ab->side[s].name, i);
				goto out;
			}
		}
		if (tp && tap_compare(tp, (size_t)srt_engine_model(e[0])->hidden_size)) {
			snprintf(err, errlen, "--layers: cannot read the tap records in %.1900s",
				 ab->tmp);
			goto out;
		}
		struct srt_div one;
		srt_div_compare(lg[0], lg[1], r->n, V, &one, kl, ma, t1);
		for (uint64_t p = 0; p < r->n; p++) {
			d->kl_sum[p] += kl[p];
			if (ma[p] > d->maxabs[p])
				d->maxabs[p] = ma[p];
			d->top1[p] += t1[p];
			d->count[p]++;
		}
		if (one.first_diff >= 0 &&
		    (d->first_req < 0 || one.first_diff < d->first_pos)) {
			d->first_req = (int64_t)i;
			d->first_pos = one.first_diff;
		}
		if (one.first_top1 >= 0 &&
		    (d->first_top1_req < 0 || one.first_top1 < d->first_top1_pos)) {
			d->first_top1_req = (int64_t)i;
			d->first_top1_pos = one.first_top1;
		}
		d->kl_sum_all += one.kl_mean * (double)r->n;
		d->top1_all += (uint64_t)llround(one.top1_agree * (double)r->n);
		d->positions += r->n;
		if (one.kl_max > d->all.kl_max)
			d->all.kl_max = one.kl_max;
		if (one.max_abs > d->all.max_abs)
			d->all.max_abs = one.max_abs;
		if (!ab->quiet)
			fprintf(stderr, "\r[ab] teacher-forced: request %zu/%zu", i + 1, ab->n_reqs);
	}
	if (!ab->quiet)
		fprintf(stderr, "\n");
	d->all.positions = d->positions;
	d->all.kl_mean = d->positions ? d->kl_sum_all / (double)d->positions : 0;
	d->all.top1_agree = d->positions ? (double)d->top1_all / (double)d->positions : 1;
	d->all.first_diff = d->first_pos;
	d->all.bitwise_equal = d->first_req < 0;
	rc = 0;
out:
	free(kl), free(ma), free(t1), free(lg[0]), free(lg[1]);
	srt_engine_close(e[0]);
	srt_engine_close(e[1]);
	return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* 2. Timed rounds.                                                                           */

static int timed_round(struct ab *ab, struct ab_side *s, int round, char *err, size_t errlen)
{
	struct srt_engine *e = NULL;
	float *logits = NULL;
	char l3[4200] = "";
	if (ab->tiers) {
		if (!ab->tmp[0]) {
			snprintf(ab->tmp, sizeof(ab->tmp), "%s/srt-ab-XXXXXX",
				 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
			if (!mkdtemp(ab->tmp)) {
				ab->tmp[0] = 0;
				snprintf(err, errlen, "--tiers: cannot make a scratch directory");
				return SRT_EIO;
			}
		}
		snprintf(l3, sizeof(l3), "%s/l3-%s-%d", ab->tmp, s->name, round);
	}
	int rc = open_side_tiers(ab, s, ab->tiers, ab->tiers ? l3 : NULL, &e, err, errlen);
	if (rc)
		return rc;
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	logits = malloc(sizeof(float) * V);
	if (!logits) {
		srt_engine_close(e);
		snprintf(err, errlen, "out of memory");
		return SRT_ENOMEM;
	}
	double t_prefill = 0, t_decode = 0;
	uint64_t computed = 0, decoded = 0, prompt = 0, hit_all = 0, tier_hits[3] = {0, 0, 0};
	for (size_t i = 0; i < ab->n_reqs && !rc; i++) {
		const struct ab_req *r = &ab->reqs[i];
		struct srt_seq *q = NULL;
		uint64_t hit = 0;
		double t0 = srt_cli_now();
		rc = srt_engine_seq_start(e, r->t, r->n, 1, &q, &hit, err, errlen);
		if (!rc)
			rc = srt_engine_prefill(e, q, logits, 0, err, errlen);
		double t1 = srt_cli_now();
		t_prefill += t1 - t0;
		computed += r->n - hit;
		prompt += r->n;
		hit_all += hit;
		if (!rc) {
			uint64_t ht[3];
			srt_seq_hit_tiers(q, ht);
			for (int k = 0; k < 3; k++)
				tier_hits[k] += ht[k];
		}
		for (int k = 0; !rc && k < ab->max_new; k++) {
			int32_t tok = srt_div_argmax(logits, (int32_t)V);
			if (round == 0)
				s->greedy[i * (size_t)ab->max_new + (size_t)k] = tok;
			if (k + 1 < ab->max_new) {
				double d0 = srt_cli_now();
				rc = srt_engine_decode(e, &q, 1, &tok, logits, err, errlen);
				t_decode += srt_cli_now() - d0;
				decoded++;
			}
		}
		if (!rc)
			rc = srt_engine_seq_finish(q, NULL, err, errlen);
		srt_engine_seq_free(q);
	}
	if (!rc) {
		s->prefill_tps[round] = t_prefill > 0 ? (double)computed / t_prefill : 0;
		s->decode_tps[round] = t_decode > 0 ? (double)decoded / t_decode : 0;
		s->prompt_tokens = prompt;
		s->hit_tokens = hit_all;
		memcpy(s->hit_tier, tier_hits, sizeof(tier_hits));
		s->computed = computed;
		struct srt_rdx_cache *c = srt_engine_cache(e);
		s->n_pools = 0;
		for (uint32_t p = 0; p < srt_rdx_pool_count(c) && p < AB_MAX_POOLS; p++) {
			struct srt_rdx_pool_stats ps;
			srt_rdx_pool_stats(c, p, &ps);
			snprintf(s->pools[p].name, sizeof(s->pools[p].name), "%s", ps.name);
			s->pools[p].bytes = ps.bytes;
			s->pools[p].peak = ps.peak_bytes;
			s->pools[p].page_bytes = ps.page_bytes;
			s->n_pools++;
		}
		int n = snprintf(s->desc, sizeof(s->desc), "%s", s->config ? s->config : "built-in");
		for (size_t k = 0; k < s->n_sets && n < (int)sizeof(s->desc); k++)
			n += snprintf(s->desc + n, sizeof(s->desc) - (size_t)n, " %s", s->sets[k]);
	}
	free(logits);
	srt_engine_close(e);
	return rc;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct spread {
	double median, min, max;
};

static struct spread spread_of(const double *v, int n)
{
	double s[64];
	memcpy(s, v, sizeof(double) * (size_t)n);
	qsort(s, (size_t)n, sizeof(double), cmp_d);
	struct spread r = {n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]), s[0], s[n - 1]};
	return r;
}

/* ---------------------------------------------------------------------------------------- */
/* Report.                                                                                    */

static int plot(const char *png, const struct ab_div *d, char *err, size_t errlen)
{
	char dat[] = "/tmp/srt-ab-XXXXXX";
	int fd = mkstemp(dat);
	if (fd < 0) {
		snprintf(err, errlen, "plot: mkstemp: %m");
		return -1;
	}
	FILE *f = fdopen(fd, "w");
	for (uint64_t p = 0; p < d->max_len; p++)
		if (d->count[p])
			fprintf(f, "%llu %.9g %.9g %.9g\n", (unsigned long long)p,
				d->kl_sum[p] / (double)d->count[p], d->maxabs[p],
				(double)d->top1[p] / (double)d->count[p]);
	fclose(f);
	FILE *g = popen("gnuplot 2>&1", "w");
	if (!g) {
		unlink(dat);
		snprintf(err, errlen, "plot: cannot run gnuplot (install gnuplot-nox, see "
			 "scripts/deps.sh)");
		return -1;
	}
	fprintf(g,
		"set terminal png size 1000,560\n"
		"set output '%s'\n"
		"set title 'A/B teacher-forced divergence along the prompt'\n"
		"set xlabel 'position'\n"
		"set ylabel 'KL(A||B) mean, max |dlogit|'\n"
		"set y2label 'top-1 agreement'\n"
		"set y2range [0:1.05]\n"
		"set ytics nomirror\n"
		"set y2tics\n"
		"set key outside bottom center horizontal\n"
		"plot '%s' using 1:4 axes x1y2 with points pt 7 ps 0.35 lc rgb '#9aa7d6' "
		"title 'top-1 agreement (right axis)', "
		"'' using 1:3 with lines lw 1 lc rgb '#1a8a5a' title 'max |dlogit|', "
		"'' using 1:2 with lines lw 2 lc rgb '#b01040' title 'KL(A||B) mean'\n",
		png, dat);
	int st = pclose(g);
	unlink(dat);
	if (st != 0) {
		snprintf(err, errlen, "plot: gnuplot failed (status %d; is gnuplot-nox installed? see "
			 "scripts/deps.sh)", st);
		return -1;
	}
	FILE *chk = fopen(png, "rb");
	unsigned char sig[8] = {0};
	size_t got = chk ? fread(sig, 1, 8, chk) : 0;
	if (chk)
		fclose(chk);
	if (got != 8 || memcmp(sig, "\x89PNG\r\n\x1a\n", 8)) {
		snprintf(err, errlen, "plot: gnuplot wrote no PNG to %s", png);
		return -1;
	}
	return 0;
}

static json_t *spread_json(struct spread s)
{
	return json_pack("{s:f, s:f, s:f}", "median", s.median, "min", s.min, "max", s.max);
}

static json_t *side_json(const struct ab *ab, const struct ab_side *s)
{
	json_t *j = json_object(), *sets = json_array(), *pools = json_array();
	json_t *pf = json_array(), *dc = json_array();
	json_object_set_new(j, "config", s->config ? json_string(s->config) : json_null());
	for (size_t k = 0; k < s->n_sets; k++)
		json_array_append_new(sets, json_string(s->sets[k]));
	json_object_set_new(j, "sets", sets);
	for (int r = 0; r < ab->repeats; r++) {
		json_array_append_new(pf, json_real(s->prefill_tps[r]));
		json_array_append_new(dc, json_real(s->decode_tps[r]));
	}
	json_object_set_new(j, "prefill_tok_s", pf);
	json_object_set_new(j, "decode_tok_s", dc);
	json_object_set_new(j, "prompt_tokens", json_integer((json_int_t)s->prompt_tokens));
	json_object_set_new(j, "hit_tokens", json_integer((json_int_t)s->hit_tokens));
	json_object_set_new(j, "hit_tokens_by_tier",
			    json_pack("{s:I, s:I, s:I}", "l1", (json_int_t)s->hit_tier[0], "l2",
				      (json_int_t)s->hit_tier[1], "l3", (json_int_t)s->hit_tier[2]));
	json_object_set_new(j, "hit_rate", json_real(s->prompt_tokens ? (double)s->hit_tokens /
								 (double)s->prompt_tokens : 0));
	for (uint32_t p = 0; p < s->n_pools; p++)
		json_array_append_new(pools, json_pack("{s:s, s:I, s:I, s:I}", "name",
						       s->pools[p].name, "bytes",
						       (json_int_t)s->pools[p].bytes, "peak_bytes",
						       (json_int_t)s->pools[p].peak, "page_bytes",
						       (json_int_t)s->pools[p].page_bytes));
	json_object_set_new(j, "pools", pools);
	return j;
}

static int parse_slice(const char *v, size_t *a, size_t *n)
{
	char *end;
	unsigned long x = strtoul(v, &end, 10);
	if (end == v || *end != ':')
		return -1;
	const char *s = end + 1;
	unsigned long y = strtoul(s, &end, 10);
	if (end == s || *end || !y || y > AB_MAX_REQS)
		return -1;
	*a = x;
	*n = y;
	return 0;
}

int srt_cmd_ab(int argc, char **argv)
{
	struct ab ab;
	memset(&ab, 0, sizeof(ab));
	ab.side[0].name = "A";
	ab.side[1].name = "B";
	ab.threads = -1;
	ab.repeats = 3;
	ab.max_new = 16;
	const char *config = NULL, *prompts = NULL, *trace = NULL, *png = NULL;
	size_t slice_a = 0, slice_n = 8;
	int conv = 3, turns = 3, json = 0, status = 1;
	long max_prompt = 2048;
	char err[2048];
	const char *a_sets[AB_MAX_SETS], *b_sets[AB_MAX_SETS];
	size_t n_a = 0, n_b = 0;

	if (srt_cli_wants_help(argc, argv)) {
		ab_usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--json")) {
			json = 1;
			continue;
		}
		if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
			ab.quiet = 1;
			continue;
		}
		if (!strcmp(a, "--layers")) {
			ab.layers = 1;
			continue;
		}
		if (!strcmp(a, "--tiers")) {
			ab.tiers = 1;
			continue;
		}
		if (i + 1 == argc) {
			fprintf(stderr, "shadowrt ab: %s needs a value (see --help)\n", a);
			return 2;
		}
		const char *v = argv[++i];
		int bad = 0;
		if (!strcmp(a, "--a"))
			ab.side[0].config = v;
		else if (!strcmp(a, "--b"))
			ab.side[1].config = v;
		else if (!strcmp(a, "--config"))
			config = v;
		else if (!strcmp(a, "--a-set") || !strcmp(a, "--b-set")) {
			size_t *n = a[2] == 'a' ? &n_a : &n_b;
			if (*n == AB_MAX_SETS / 2) {
				fprintf(stderr, "shadowrt ab: too many %s\n", a);
				return 2;
			}
			(a[2] == 'a' ? a_sets : b_sets)[(*n)++] = v;
			char sec[64], key[64];
			const char *val;
			bad = srt_runtime_config_split_set(v, sec, sizeof(sec), key, sizeof(key), &val,
							   err, sizeof(err)) != 0;
			if (bad) {
				fprintf(stderr, "shadowrt ab: %s\n", err);
				return 2;
			}
		} else if (!strcmp(a, "--prompts"))
			prompts = v;
		else if (!strcmp(a, "--trace"))
			trace = v;
		else if (!strcmp(a, "--trace-slice"))
			bad = parse_slice(v, &slice_a, &slice_n);
		else if (!strcmp(a, "--conversations"))
			bad = srt_cli_parse_int(v, 1, 64, &conv);
		else if (!strcmp(a, "--turns"))
			bad = srt_cli_parse_int(v, 1, 64, &turns);
		else if (!strcmp(a, "--model"))
			ab.model = v;
		else if (!strcmp(a, "--max-prompt"))
			bad = srt_cli_parse_long(v, 2, 1 << 20, &max_prompt);
		else if (!strcmp(a, "--max-new-tokens"))
			bad = srt_cli_parse_int(v, 1, 4096, &ab.max_new);
		else if (!strcmp(a, "--repeats"))
			bad = srt_cli_parse_int(v, 1, 64, &ab.repeats);
		else if (!strcmp(a, "--threads"))
			bad = srt_cli_parse_int(v, 0, 4096, &ab.threads);
		else if (!strcmp(a, "--plot"))
			png = v;
		else {
			fprintf(stderr, "shadowrt ab: unknown option '%s' (see --help)\n", a);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "shadowrt ab: %s: invalid value '%s' (see --help)\n", a, v);
			return 2;
		}
	}
	if (prompts && trace) {
		fprintf(stderr, "shadowrt ab: --prompts and --trace: choose one workload\n");
		return 2;
	}
	/* sides: --set for both, then the side's own; config: --a/--b, else --config */
	size_t n_g = 0;
	const char *const *g = srt_runtime_config_overrides(&n_g);
	char **gcopy = calloc(n_g + 1, sizeof(char *));
	ab.reqs = calloc(AB_MAX_REQS, sizeof(*ab.reqs));
	if (!gcopy || !ab.reqs)
		goto oom;
	for (size_t k = 0; k < n_g; k++)
		if (!(gcopy[k] = strdup(g[k])))
			goto oom;
	for (int s = 0; s < 2; s++) {
		struct ab_side *sd = &ab.side[s];
		if (!sd->config)
			sd->config = config;
		for (size_t k = 0; k < n_g; k++)
			sd->sets[sd->n_sets++] = gcopy[k];
		for (size_t k = 0; k < (s ? n_b : n_a); k++)
			sd->sets[sd->n_sets++] = (s ? b_sets : a_sets)[k];
	}

	/* the model's vocabulary for the workload: open side A once (also validates it) */
	struct srt_engine *probe = NULL;
	if (open_side(&ab, &ab.side[0], &probe, err, sizeof(err))) {
		fprintf(stderr, "shadowrt ab: side A: %s\n", err);
		goto out;
	}
	int32_t vocab = srt_engine_model(probe)->vocab_size;
	int n_layers = srt_engine_model(probe)->num_hidden_layers;
	char model_name[64];
	snprintf(model_name, sizeof(model_name), "%s", srt_engine_model(probe)->name);
	srt_engine_close(probe);
	int wl = prompts ? prompts_workload(&ab, prompts, vocab, (uint64_t)max_prompt, err,
					    sizeof(err))
		 : trace ? trace_workload(&ab, trace, slice_a, slice_n, vocab, (uint64_t)max_prompt,
					  err, sizeof(err))
			 : builtin_workload(&ab, conv, turns, vocab);
	if (wl) {
		fprintf(stderr, "shadowrt ab: %s\n", err);
		goto out;
	}
	for (int s = 0; s < 2; s++) {
		ab.side[s].greedy = calloc(ab.n_reqs * (size_t)ab.max_new, sizeof(int32_t));
		if (!ab.side[s].greedy)
			goto oom;
	}
	struct ab_div d;
	memset(&d, 0, sizeof(d));
	struct ab_tap tap;
	memset(&tap, 0, sizeof(tap));
	size_t saved_sets[2] = {ab.side[0].n_sets, ab.side[1].n_sets};
	if (ab.layers) {
		snprintf(ab.tmp, sizeof(ab.tmp), "%s/srt-ab-XXXXXX",
			 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		tap.n_layers = n_layers;
		tap.st = calloc((size_t)n_layers + 1, sizeof(*tap.st));
		if (!tap.st || !mkdtemp(ab.tmp)) {
			fprintf(stderr, "shadowrt ab: --layers: cannot make a scratch directory\n");
			ab.tmp[0] = 0;
			goto out_div;
		}
		if (tap_setup(&ab, &tap, err, sizeof(err))) {
			fprintf(stderr, "shadowrt ab: %s\n", err);
			goto out_div;
		}
	}
	int tf = teacher_forced(&ab, &d, ab.layers ? &tap : NULL, err, sizeof(err));
	ab.side[0].n_sets = saved_sets[0]; /* the timed rounds run without the tap */
	ab.side[1].n_sets = saved_sets[1];
	if (tf) {
		fprintf(stderr, "shadowrt ab: teacher-forced pass: %s\n", err);
		goto out_div;
	}
	for (int r = 0; r < ab.repeats; r++)
		for (int s = 0; s < 2; s++) {
			if (!ab.quiet)
				fprintf(stderr, "\r[ab] timed round %d/%d: side %s", r + 1, ab.repeats,
					ab.side[s].name);
			if (timed_round(&ab, &ab.side[s], r, err, sizeof(err))) {
				fprintf(stderr, "\nshadowrt ab: side %s, round %d: %s\n",
					ab.side[s].name, r + 1, err);
				goto out_div;
			}
		}
	if (!ab.quiet)
		fprintf(stderr, "\n");
	/* free-running agreement of the greedy tokens */
	uint64_t same_tok = 0, total_tok = 0, same_req = 0;
	double first_mis_sum = 0;
	for (size_t i = 0; i < ab.n_reqs; i++) {
		int k0 = -1;
		for (int k = 0; k < ab.max_new; k++) {
			size_t at = i * (size_t)ab.max_new + (size_t)k;
			int eq = ab.side[0].greedy[at] == ab.side[1].greedy[at];
			same_tok += (uint64_t)eq;
			total_tok++;
			if (!eq && k0 < 0)
				k0 = k;
		}
		same_req += k0 < 0;
		first_mis_sum += k0 < 0 ? ab.max_new : k0;
	}
	double ratio_p[64], ratio_d[64];
	for (int r = 0; r < ab.repeats; r++) {
		ratio_p[r] = ab.side[0].prefill_tps[r] > 0
				     ? ab.side[1].prefill_tps[r] / ab.side[0].prefill_tps[r] : 0;
		ratio_d[r] = ab.side[0].decode_tps[r] > 0
				     ? ab.side[1].decode_tps[r] / ab.side[0].decode_tps[r] : 0;
	}
	struct spread sp = spread_of(ratio_p, ab.repeats), sdc = spread_of(ratio_d, ab.repeats);
	struct spread pa = spread_of(ab.side[0].prefill_tps, ab.repeats),
		      pb = spread_of(ab.side[1].prefill_tps, ab.repeats),
		      da = spread_of(ab.side[0].decode_tps, ab.repeats),
		      db = spread_of(ab.side[1].decode_tps, ab.repeats);
	uint64_t tf_positions = d.positions;
	if (png && plot(png, &d, err, sizeof(err))) {
		fprintf(stderr, "shadowrt ab: %s\n", err);
		goto out_div;
	}
	if (json) {
		json_t *j = json_object(), *pp = json_array();
		json_object_set_new(j, "model", json_string(model_name));
		json_object_set_new(j, "workload", json_pack("{s:s, s:I}", "description", ab.workload,
							     "requests", (json_int_t)ab.n_reqs));
		json_object_set_new(j, "a", side_json(&ab, &ab.side[0]));
		json_object_set_new(j, "b", side_json(&ab, &ab.side[1]));
		json_object_set_new(j, "teacher_forced",
				    json_pack("{s:I, s:f, s:f, s:f, s:f, s:b, s:{s:I, s:I}, "
					      "s:{s:I, s:I}}",
					      "positions", (json_int_t)tf_positions, "kl_mean",
					      d.all.kl_mean, "kl_max", d.all.kl_max,
					      "top1_agreement", d.all.top1_agree, "max_abs_logit",
					      d.all.max_abs, "bitwise_equal", d.all.bitwise_equal,
					      "first_divergent", "request", (json_int_t)d.first_req,
					      "position", (json_int_t)d.first_pos, "first_top1_change",
					      "request", (json_int_t)d.first_top1_req, "position",
					      (json_int_t)d.first_top1_pos));
		for (uint64_t p = 0; p < d.max_len; p++)
			if (d.count[p])
				json_array_append_new(
					pp, json_pack("{s:I, s:f, s:f, s:f, s:I}", "position",
						      (json_int_t)p, "kl_mean",
						      d.kl_sum[p] / (double)d.count[p], "max_abs_logit",
						      d.maxabs[p], "top1_agreement",
						      (double)d.top1[p] / (double)d.count[p], "requests",
						      (json_int_t)d.count[p]));
		json_object_set_new(j, "per_position", pp);
		json_object_set_new(j, "free_running",
				    json_pack("{s:i, s:f, s:I, s:f}", "tokens_per_request", ab.max_new,
					      "token_agreement",
					      total_tok ? (double)same_tok / (double)total_tok : 1,
					      "identical_requests", (json_int_t)same_req,
					      "mean_first_mismatch", first_mis_sum / (double)ab.n_reqs));
		json_object_set_new(j, "speed",
				    json_pack("{s:i, s:s, s:o, s:o}", "repeats", ab.repeats, "order",
					      "A B A B ...", "prefill_ratio_b_over_a", spread_json(sp),
					      "decode_ratio_b_over_a", spread_json(sdc)));
		if (ab.layers) {
			json_t *pl = json_array();
			for (int l = 0; l <= n_layers; l++) {
				const struct ab_layer *st = &tap.st[l];
				json_t *o = json_pack("{s:f, s:f, s:I, s:I}", "rel_l2_mean",
						      st->rows ? st->rel_sum / (double)st->rows : 0,
						      "max_abs", st->max_abs, "rows", (json_int_t)st->rows,
						      "rows_differing", (json_int_t)st->diff_rows);
				json_object_set_new(o, "layer", l < n_layers ? json_integer(l)
									   : json_string("head"));
				json_array_append_new(pl, o);
			}
			json_object_set_new(j, "per_layer_divergence", pl);
		} else {
			json_object_set_new(j, "per_layer_divergence", json_null());
		}
		char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (s)
			printf("%s\n", s);
		free(s);
		json_decref(j);
	} else {
		printf("ab: model %s; workload %s (%zu requests)\n", model_name, ab.workload,
		       ab.n_reqs);
		printf("  A: %s\n  B: %s\n", ab.side[0].desc, ab.side[1].desc);
		printf("\nteacher-forced (%llu positions, logits of A vs B on the same tokens)\n",
		       (unsigned long long)tf_positions);
		printf("  KL(A||B) mean %.4g, max %.4g; top-1 agreement %.4f; max |dlogit| %.4g\n",
		       d.all.kl_mean, d.all.kl_max, d.all.top1_agree, d.all.max_abs);
		if (d.first_req >= 0)
			printf("  first divergent position %lld (request %lld); first top-1 change %s",
			       (long long)d.first_pos, (long long)d.first_req,
			       d.first_top1_req >= 0 ? "" : "none\n");
		else
			printf("  bitwise identical logits at every position\n");
		if (d.first_req >= 0 && d.first_top1_req >= 0)
			printf("%lld (request %lld)\n", (long long)d.first_top1_pos,
			       (long long)d.first_top1_req);
		printf("  %8s %12s %12s %8s\n", "position", "KL mean", "max|dlogit|", "top-1");
		uint64_t step = d.max_len > 16 ? d.max_len / 16 : 1;
		for (uint64_t p = 0; p < d.max_len; p += step)
			if (d.count[p])
				printf("  %8llu %12.4g %12.4g %8.3f\n", (unsigned long long)p,
				       d.kl_sum[p] / (double)d.count[p], d.maxabs[p],
				       (double)d.top1[p] / (double)d.count[p]);
		printf("\nfree-running (greedy, %d tokens per request)\n", ab.max_new);
		printf("  token agreement %.4f; identical continuations %llu of %zu; mean first "
		       "mismatch at step %.1f\n", total_tok ? (double)same_tok / (double)total_tok : 1,
		       (unsigned long long)same_req, ab.n_reqs, first_mis_sum / (double)ab.n_reqs);
		printf("\nspeed (%d rounds interleaved A B A B ..., fresh L1 cache each; median "
		       "[min, max])\n", ab.repeats);
		printf("  prefill tok/s  A %.1f [%.1f, %.1f]  B %.1f [%.1f, %.1f]  B/A %.3f [%.3f, "
		       "%.3f]\n", pa.median, pa.min, pa.max, pb.median, pb.min, pb.max, sp.median,
		       sp.min, sp.max);
		printf("  decode tok/s   A %.1f [%.1f, %.1f]  B %.1f [%.1f, %.1f]  B/A %.3f [%.3f, "
		       "%.3f]\n", da.median, da.min, da.max, db.median, db.min, db.max, sdc.median,
		       sdc.min, sdc.max);
		printf("\ncache\n");
		for (int s = 0; s < 2; s++) {
			const struct ab_side *sd = &ab.side[s];
			printf("  %s: hit rate %.3f (%llu of %llu prompt tokens from the prefix cache: L1 "
			       "%llu, L2 %llu, L3 %llu)\n", sd->name,
			       sd->prompt_tokens ? (double)sd->hit_tokens / (double)sd->prompt_tokens : 0,
			       (unsigned long long)sd->hit_tokens, (unsigned long long)sd->prompt_tokens,
			       (unsigned long long)sd->hit_tier[0], (unsigned long long)sd->hit_tier[1],
			       (unsigned long long)sd->hit_tier[2]);
		}
		printf("  KV bytes per pool at the end of a round (peak):\n");
		for (int s = 0; s < 2; s++)
			for (uint32_t p = 0; p < ab.side[s].n_pools; p++)
				printf("    %s %-16s %12llu (%llu)\n", ab.side[s].name,
				       ab.side[s].pools[p].name,
				       (unsigned long long)ab.side[s].pools[p].bytes,
				       (unsigned long long)ab.side[s].pools[p].peak);
		if (ab.layers) {
			printf("\nper layer (residual stream: each layer's attention input, then the head "
			       "output; A vs B on the same tokens)\n  %6s %14s %12s %16s\n", "layer",
			       "rel L2 mean", "max |diff|", "rows differing");
			for (int l = 0; l <= n_layers; l++) {
				const struct ab_layer *st = &tap.st[l];
				char name[16];
				snprintf(name, sizeof(name), l < n_layers ? "%d" : "head", l);
				printf("  %6s %14.4g %12.4g %8llu of %llu\n", name,
				       st->rows ? st->rel_sum / (double)st->rows : 0, st->max_abs,
				       (unsigned long long)st->diff_rows, (unsigned long long)st->rows);
			}
		}
		if (png)
			printf("\nplot: %s\n", png);
	}
	status = 0;
out_div:
	free(d.kl_sum), free(d.maxabs), free(d.top1), free(d.count);
	free(tap.st);
	if (ab.tmp[0]) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ab.tmp);
		if (system(cmd)) {
			/* scratch left in TMPDIR */
		}
	}
	goto out;
oom:
	fprintf(stderr, "shadowrt ab: out of memory\n");
out:
	for (size_t i = 0; ab.reqs && i < ab.n_reqs; i++)
		free(ab.reqs[i].t);
	free(ab.reqs);
	free(ab.side[0].greedy), free(ab.side[1].greedy);
	for (size_t k = 0; gcopy && k < n_g; k++)
		free(gcopy[k]);
	free(gcopy);
	return status;
}
