/*
 * exec_bench: prefill and decode tokens/s of the executor (default: the `small` preset) for
 * several thread counts and context depths, the bytes one decode step reads (weights + the
 * sequence's KV) as a share of this machine's read bandwidth measured in the same run, and
 * with --profile a per-phase profile of a decode step. `exec_bench --help` lists the options.
 *
 * Measurement: one engine per thread count, all open at once; every repeat ("round") runs
 * each thread count in turn (interleaved, so load changes hit all of them alike): a prefill
 * of a new --prompt-token prompt (the prefix cache never hits), --steps decode steps on it
 * ("short" depth), then --steps more decode steps on each --depths sequence (prefilled once
 * before the rounds, never freed). Best and median over the rounds are printed; the machine
 * may be shared, so the median is the figure to compare and the best what the code can do.
 *
 * The read bandwidth is the best of 5 passes of each thread count over a 512 MiB buffer, for
 * each of three read patterns (read_bandwidth), measured before and after the rounds (best of
 * both). Bytes per decode step = the weights a decode step streams on average
 * (srt_engine_decode_weight_bytes: the compressors' projections, which run once per 4 tokens,
 * count a quarter) + the KV entries attention reads at
 * that depth (kv_read_bytes: per pool and layer, the window's rows, every entry of a
 * compressed pool, but only index_topk entries of a c4_kv pool, whose entries the lightning
 * indexer picks). The KV the sequence holds is printed too; it grows with the
 * depth, while most of it is not read by a decode step.
 *
 * --profile reads the per-phase wall-clock counters of the attention, MoE and mHC plugins
 * (core/ops/prof.h, found in the loaded plugin modules with dlsym) over --steps decode steps
 * at the short depth and at each --depths depth; "engine rest" is the step time minus the plugins' phases (embedding,
 * hc_head, final norm, LM head, scheduling). Each phase also shows the weights it streams
 * (srt_engine_decode_weight_phases) over its time: a phase well below the read bandwidth is
 * bound by its compute. While profiling, the MoE runs its routed and
 * shared experts as two parallel steps so they can be told apart.
 */
#include <dlfcn.h>
#include <jansson.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/runtime_config.h"
#include "exec/engine.h"
#include "ops/prof.h"
#include "radix/radix.h"

#define MAXT 8  /* thread counts */
#define MAXD 8  /* depths */
#define MAXR 64 /* rounds */

/* Clock of the prefill/decode timings: wall time, or with --clock cpu this process's CPU
 * time (all threads: with 1 thread, a rate that other processes on the cores barely move;
 * with more, tokens per CPU-second). The bandwidth passes always use wall time. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

/* The text report: stdout, or stderr with --json (stdout then carries the JSON object). */
static FILE *tout;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(bench_clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- memory bandwidth: each thread reads its share of a large buffer ---------------------
 * The reference for "share of the read bandwidth" is the fastest of a few read patterns: on
 * the 2-core Zen 3 VM of 2026-12-02 one scalar stream per thread reached 9-10 GB/s at 1
 * thread where 32-byte loads over 2 or 4 streams reached 12-14, so a scalar pass alone
 * overstated every share by a third. */

struct bw_job {
	const uint64_t *p;
	size_t n; /* uint64 words */
	int streams; /* 0: one scalar stream; 2, 4: that many 32-byte-load streams (AVX2) */
	uint64_t sum;
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BW_AVX2 1
/* j->streams equal parts of the share read side by side, 64 bytes of each a step */
__attribute__((target("avx2"))) static uint64_t bw_read_avx2(const struct bw_job *j)
{
	const size_t S = (size_t)j->streams, per = j->n / 4 / S / 2 * 2; /* 32-byte vectors */
	const __m256i *q = (const __m256i *)(const void *)j->p;
	__m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
			  _mm256_setzero_si256()};
	for (size_t i = 0; i < per; i += 2)
		for (size_t k = 0; k < S; k++)
			acc[k] = _mm256_xor_si256(acc[k],
						  _mm256_xor_si256(_mm256_loadu_si256(q + k * per + i),
								   _mm256_loadu_si256(q + k * per + i + 1)));
	const __m256i a = _mm256_xor_si256(_mm256_xor_si256(acc[0], acc[1]),
					   _mm256_xor_si256(acc[2], acc[3]));
	return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}
#endif

static void *bw_read(void *arg)
{
	struct bw_job *j = arg;
#ifdef BW_AVX2
	if (j->streams) {
		j->sum = bw_read_avx2(j);
		return NULL;
	}
#endif
	uint64_t a = 0, b = 0, c = 0, d = 0;
	for (size_t i = 0; i + 4 <= j->n; i += 4) {
		a += j->p[i];
		b ^= j->p[i + 1];
		c += j->p[i + 2];
		d ^= j->p[i + 3];
	}
	j->sum = a + b + c + d;
	return NULL;
}

/* The best of 5 passes over a 512 MiB buffer for each read pattern (one scalar stream per
 * thread; with AVX2 also 2 and 4 streams of 32-byte loads), bytes/s. */
static double read_bandwidth(int threads)
{
	size_t bytes = (size_t)512 << 20, n = bytes / 8;
	uint64_t *buf = malloc(bytes);
	if (!buf)
		return 0;
	for (size_t i = 0; i < n; i++)
		buf[i] = i * 0x9E3779B97F4A7C15ull;
	int patterns[3] = {0}, np = 1;
#ifdef BW_AVX2
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2")) {
		patterns[np++] = 2;
		patterns[np++] = 4;
	}
#endif
	double best = 1e30;
	uint64_t sink = 0;
	for (int rep = 0; rep < 5; rep++)
		for (int pi = 0; pi < np; pi++) {
			pthread_t th[64];
			struct bw_job jobs[64];
			double t0 = wall_s();
			for (int t = 0; t < threads; t++) {
				jobs[t].p = buf + n * (size_t)t / (size_t)threads;
				jobs[t].n = n / (size_t)threads;
				jobs[t].streams = patterns[pi];
				pthread_create(&th[t], NULL, bw_read, &jobs[t]);
			}
			for (int t = 0; t < threads; t++) {
				pthread_join(th[t], NULL);
				sink += jobs[t].sum;
			}
			double dt = wall_s() - t0;
			if (dt < best)
				best = dt;
		}
	free(buf);
	if (sink == 42) /* keep the sums alive */
		fputc(' ', stderr);
	return (double)bytes / best;
}

/* --- statistics ---------------------------------------------------------------------------- */

static int cmp_dbl(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

static double median(const double *v, int n)
{
	double s[MAXR];
	memcpy(s, v, sizeof(double) * (size_t)n);
	qsort(s, (size_t)n, sizeof(*s), cmp_dbl);
	return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static double best(const double *v, int n)
{
	double b = v[0];
	for (int i = 1; i < n; i++)
		b = v[i] > b ? v[i] : b;
	return b;
}

/* {"best", "median", "rounds": [...]} of n round figures. */
static json_t *stats_json(const double *v, int n)
{
	json_t *r = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(r, json_real(v[i]));
	return json_pack("{s:f, s:f, s:o}", "best", best(v, n), "median", median(v, n), "rounds", r);
}

/* --- options --------------------------------------------------------------------------- */

#define MAXSETS 64

struct opts {
	const char *model;
	const char *sets[MAXSETS]; /* --set SECTION.KEY=VALUE */
	int nsets;
	/* --ab SECTION.KEY=A,B: "SECTION.KEY=A" and "SECTION.KEY=B", one engine of each per
	 * thread count (nvar = 2), else nvar = 1 */
	char ab[2][512];
	int nvar;
	int prompt, steps, runs, warmup, batch, profile, json;
	int threads[MAXT], nthreads;
	int depths[MAXD], ndepths;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: exec_bench [options]\n"
		"Prefill and decode tokens/s of the executor, interleaved over thread counts,\n"
		"decode at several context depths, the bytes a decode step reads as a share of\n"
		"this machine's read bandwidth (measured in the same run), best and median.\n"
		"\n"
		"  --model DIR|PRESET  checkpoint directory or preset (default: small, generated\n"
		"                      once into <build>/models/small)\n"
		"  --prompt N          prefill prompt tokens, also the \"short\" decode depth (256)\n"
		"  --steps N           decode steps per measurement (8)\n"
		"  --threads LIST      thread counts, comma-separated (1,2)\n"
		"  --threads-max N     same as --threads 1,2,...,N\n"
		"  --depths LIST       extra decode depths in tokens, comma-separated, each > --prompt\n"
		"                      (2048); each is prefilled once per thread count before the\n"
		"                      rounds (16384 takes minutes on 2 cores); 'none' for none\n"
		"  --runs N            interleaved rounds (3)\n"
		"  --warmup N          untimed decode steps per engine before the rounds (4)\n"
		"  --batch N           decode N short sequences together (1); tokens/s counts the\n"
		"                      whole batch, the weights count once per step\n"
		"  --clock wall|cpu    time prefill and decode by wall clock (default) or by this\n"
		"                      process's CPU time (1 thread on a shared machine; with more\n"
		"                      threads it gives tokens per CPU-second)\n"
		"  --profile           per-phase profile of a decode step at each depth and thread\n"
		"                      count (plugin counters, core/ops/prof.h), with the weights\n"
		"                      each phase streams per step and their GB/s over its time,\n"
		"                      how often a worker of the thread pool slept a step, and the\n"
		"                      time one thread worked while the others waited\n"
		"  --set SECTION.KEY=VALUE  a runtime-config key over the built-in default, as\n"
		"                      shadowrt's --set (repeatable; e.g. A/B a plugin option:\n"
		"                      --set attention.csa.fp8_layout=rows)\n"
		"  --ab SECTION.KEY=A,B  A/B in one run: an engine with the key at A and one at B\n"
		"                      for each thread count (over the --set keys), their rounds\n"
		"                      interleaved (B first in every other round), and B/A of\n"
		"                      every decode rate: the median of the per-round ratios (a\n"
		"                      paired comparison, load shifts hit both) and of the rates\n"
		"                      (e.g. --ab cache.l1_pages=heap,hugepages)\n"
		"  --json              one JSON object on stdout with every figure (rounds, best,\n"
		"                      median, bytes, ratios, profiles); the text goes to stderr\n"
		"  --help              this text\n");
}

static int parse_list(const char *s, int *out, int max, int lo)
{
	int n = 0;
	if (!strcmp(s, "none"))
		return 0;
	for (const char *p = s; *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < lo || v > 1 << 24 || n == max)
			return -1;
		out[n++] = (int)v;
		p = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return n;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.prompt = 256, .steps = 8, .runs = 3, .warmup = 4, .batch = 1, .nvar = 1,
			   .threads = {1, 2}, .nthreads = 2, .depths = {2048}, .ndepths = 1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int takes = 1;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 1;
		} else if (!strcmp(a, "--profile")) {
			o->profile = 1;
			takes = 0;
		} else if (!strcmp(a, "--json")) {
			o->json = 1;
			takes = 0;
		} else if (!v || strncmp(a, "--", 2)) {
			fprintf(stderr, "exec_bench: %s: %s (see --help)\n", a,
				strncmp(a, "--", 2) ? "not an option" : "missing value or unknown option");
			return -1;
		} else if (!strcmp(a, "--clock")) {
			if (!strcmp(v, "cpu")) {
				bench_clock = CLOCK_PROCESS_CPUTIME_ID;
			} else if (strcmp(v, "wall")) {
				fprintf(stderr, "exec_bench: --clock %s: expected wall or cpu\n", v);
				return -1;
			}
		} else if (!strcmp(a, "--set")) {
			if (o->nsets == MAXSETS) {
				fprintf(stderr, "exec_bench: more than %d --set options\n", MAXSETS);
				return -1;
			}
			o->sets[o->nsets++] = v;
		} else if (!strcmp(a, "--ab")) {
			const char *eq = strchr(v, '='), *comma = eq ? strchr(eq, ',') : NULL;
			if (!eq || eq == v || !comma || comma == eq + 1 || !comma[1] ||
			    strlen(v) >= sizeof(o->ab[0]) - 1) {
				fprintf(stderr, "exec_bench: --ab %s: expected SECTION.KEY=A,B\n", v);
				return -1;
			}
			snprintf(o->ab[0], sizeof(o->ab[0]), "%.*s", (int)(comma - v), v);
			snprintf(o->ab[1], sizeof(o->ab[1]), "%.*s%s", (int)(eq + 1 - v), v, comma + 1);
			o->nvar = 2;
		} else if (!strcmp(a, "--model")) {
			o->model = v;
		} else if (!strcmp(a, "--prompt")) {
			o->prompt = atoi(v);
		} else if (!strcmp(a, "--steps")) {
			o->steps = atoi(v);
		} else if (!strcmp(a, "--runs")) {
			o->runs = atoi(v);
		} else if (!strcmp(a, "--warmup")) {
			o->warmup = atoi(v);
		} else if (!strcmp(a, "--batch")) {
			o->batch = atoi(v);
		} else if (!strcmp(a, "--threads-max")) {
			int n = atoi(v);
			if (n < 1 || n > MAXT) {
				fprintf(stderr, "exec_bench: --threads-max %s: expected 1..%d\n", v, MAXT);
				return -1;
			}
			for (int t = 0; t < n; t++)
				o->threads[t] = t + 1;
			o->nthreads = n;
		} else if (!strcmp(a, "--threads")) {
			if ((o->nthreads = parse_list(v, o->threads, MAXT, 1)) < 1) {
				fprintf(stderr, "exec_bench: --threads %s: expected 1 to %d counts >= 1, "
					"comma-separated\n", v, MAXT);
				return -1;
			}
		} else if (!strcmp(a, "--depths")) {
			if ((o->ndepths = parse_list(v, o->depths, MAXD, 1)) < 0) {
				fprintf(stderr, "exec_bench: --depths %s: expected up to %d token counts, "
					"comma-separated, or 'none'\n", v, MAXD);
				return -1;
			}
		} else {
			fprintf(stderr, "exec_bench: unknown option %s (see --help)\n", a);
			return -1;
		}
		i += takes;
	}
	if (o->nvar == 2 && o->nsets == MAXSETS) {
		fprintf(stderr, "exec_bench: --ab needs room for one more --set\n");
		return -1;
	}
	if (o->prompt < 1 || o->steps < 1 || o->runs < 1 || o->runs > MAXR || o->warmup < 0 ||
	    o->batch < 1 || o->batch > 16) {
		fprintf(stderr, "exec_bench: --prompt, --steps >= 1, --runs in [1, %d], --warmup >= 0, "
			"--batch in [1, 16]\n", MAXR);
		return -1;
	}
	for (int d = 0; d < o->ndepths; d++)
		if (o->depths[d] <= o->prompt) {
			fprintf(stderr, "exec_bench: depth %d is not above --prompt %d (the short depth)\n",
				o->depths[d], o->prompt);
			return -1;
		}
	return 0;
}

/* --- the engine -------------------------------------------------------------------------- */

static int32_t *make_prompt(int n, int32_t vocab, int seed)
{
	int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
	uint64_t s = 88172645463325252ull + 0x9E3779B97F4A7C15ull * (uint64_t)(seed + 1);
	for (int i = 0; t && i < n; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		t[i] = 2 + (int32_t)(s % (uint64_t)(vocab - 2));
	}
	return t;
}

static uint64_t kv_bytes(struct srt_engine *e)
{
	struct srt_rdx_cache *c = srt_engine_cache(e);
	uint64_t b = 0;
	for (uint32_t p = 0; p < srt_rdx_pool_count(c); p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(c, p, &st);
		b += st.bytes;
	}
	return b;
}

/* True when s ends with suffix. */
static int ends_with(const char *s, const char *suffix)
{
	const size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

/* The KV bytes one decode step at `depth` tokens reads, from the pools' declarations and the
 * in-tree attention's read pattern: a pool that keeps everything, its depth / ratio entries
 * (a CSA "c4_kv" pool only the index_topk of them the indexer selects); a tail pool, the
 * entries of its last min(depth, w) tokens (a state pool: its one entry); a "window" pool,
 * min(depth, w) rows (it is declared at ratio P / w only to size its pages' rings, and
 * attention reads every row of the window). Every layer of a pool reads its own. */
static uint64_t kv_read_bytes(struct srt_engine *e, uint64_t depth)
{
	struct srt_rdx_cache *c = srt_engine_cache(e);
	const uint64_t topk = (uint64_t)srt_engine_model(e)->index_topk;
	uint64_t b = 0;
	for (uint32_t p = 0; p < srt_rdx_pool_count(c); p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(c, p, &st);
		const uint64_t r = st.ratio ? st.ratio : 1;
		uint64_t n;
		if (st.retention == SRT_RETAIN_TAIL) {
			const uint64_t w = depth < st.tail_tokens ? depth : st.tail_tokens;
			n = ends_with(st.name, ".window") ? w : (w + r - 1) / r;
		} else {
			n = depth / r;
			if (ends_with(st.name, ".c4_kv") && n > topk)
				n = topk;
		}
		b += n * st.entry_bytes * st.n_layers;
	}
	return b;
}

/* A sequence that stays open: its tokens, how many were fed, its KV bytes. */
struct live {
	struct srt_seq *s;
	int32_t *tok;
	int ntok, fed;
	uint64_t kv;
};

/* Start and prefill `n` tokens of a new sequence (seed picks the prompt), room for `more`
 * decode tokens; *pf = prefill tokens/s. */
static int live_open(struct srt_engine *e, struct live *l, int n, int more, int seed, double *pf,
		     float *lg)
{
	char err[2048] = "";
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	memset(l, 0, sizeof(*l));
	l->ntok = n + more;
	if (!(l->tok = make_prompt(l->ntok, (int32_t)V, seed))) {
		fprintf(stderr, "exec_bench: out of memory\n");
		return 1;
	}
	uint64_t kv0 = kv_bytes(e);
	if (srt_engine_seq_start(e, l->tok, (uint64_t)n, 0, &l->s, NULL, err, sizeof(err)))
		goto fail;
	double t0 = now_s();
	if (srt_engine_prefill(e, l->s, lg, 0, err, sizeof(err)))
		goto fail;
	*pf = n / (now_s() - t0);
	l->fed = n;
	l->kv = kv_bytes(e) - kv0;
	return 0;
fail:
	fprintf(stderr, "exec_bench: %s\n", err);
	return 1;
}

static void live_close(struct live *l)
{
	srt_engine_seq_free(l->s);
	free(l->tok);
	memset(l, 0, sizeof(*l));
}

/* `steps` decode steps of the nb sequences together; tokens/s over the batch. */
static int decode_steps(struct srt_engine *e, struct live *ls, int nb, int steps, float *lg,
			double *rate)
{
	char err[2048] = "";
	struct srt_seq *s[16];
	int32_t tok[16];
	for (int b = 0; b < nb; b++)
		s[b] = ls[b].s;
	double t0 = now_s();
	for (int k = 0; k < steps; k++) {
		for (int b = 0; b < nb; b++) {
			if (ls[b].fed >= ls[b].ntok) {
				fprintf(stderr, "exec_bench: internal: sequence out of tokens\n");
				return 1;
			}
			tok[b] = ls[b].tok[ls[b].fed++];
		}
		if (srt_engine_decode(e, s, (uint32_t)nb, tok, lg, err, sizeof(err))) {
			fprintf(stderr, "exec_bench: %s\n", err);
			return 1;
		}
	}
	*rate = (double)steps * nb / (now_s() - t0);
	return 0;
}

/* --- plugin phase counters (core/ops/prof.h) ------------------------------------------------ */

#define MAXP 16
static struct srt_prof *profs[MAXP];
static int nprofs;

static int find_prof(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size, (void)data;
	if (!info->dlpi_name || !strstr(info->dlpi_name, "/srt_") || nprofs == MAXP)
		return 0;
	void *h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return 0;
	srt_prof_fn fn = (srt_prof_fn)(uintptr_t)dlsym(h, SRT_PROF_SYMBOL);
	if (fn) {
		struct srt_prof *p = fn();
		int seen = 0;
		for (int i = 0; i < nprofs; i++)
			seen |= profs[i] == p;
		if (!seen)
			profs[nprofs++] = p;
	}
	dlclose(h); /* the engine keeps its own reference */
	return 0;
}

static void prof_reset(int on)
{
	for (int i = 0; i < nprofs; i++) {
		profs[i]->on = 0;
		memset(profs[i]->ns, 0, sizeof(profs[i]->ns));
		memset(profs[i]->calls, 0, sizeof(profs[i]->calls));
		profs[i]->on = on;
	}
}

/* Phase profile of `steps` decode steps of l (which must have that many tokens left). */
static int profile(struct srt_engine *e, struct live *l, int depth, int steps, float *lg,
		   json_t *jout)
{
	double rate;
	prof_reset(1);
	const long long sleeps0 = srt_engine_pool_sleeps(e);
	srt_engine_pool_timing(e, 1);
	double t0 = wall_s();
	if (decode_steps(e, l, 1, steps, lg, &rate))
		return 1;
	double step = (wall_s() - t0) / steps;
	const double one_ms = (double)srt_engine_pool_one_thread_ns(e) * 1e-6 / steps;
	srt_engine_pool_timing(e, 0);
	const double sleeps = (double)(srt_engine_pool_sleeps(e) - sleeps0) / steps;
	uint64_t ns[SRT_PROF_COUNT] = {0};
	for (int i = 0; i < nprofs; i++)
		for (int p = 0; p < SRT_PROF_COUNT; p++)
			ns[p] += profs[i]->ns[p];
	prof_reset(0);
	fprintf(tout, "  profile of a decode step, threads %d, depth %d (%d steps, %.2f ms/step; weights: "
		      "MiB a step reads on average, and that over the phase's time):\n",
	       srt_engine_threads(e), depth, steps, step * 1e3);
	uint64_t wb[SRT_PROF_COUNT + 1];
	srt_engine_decode_weight_phases(e, wb);
	double sum = 0;
	json_t *ph = json_object(), *phw = json_object();
	for (int p = 0; p <= SRT_PROF_COUNT; p++) {
		const char *name = p < SRT_PROF_COUNT ? srt_prof_name(p) : "engine rest (head, embed)";
		/* the engine's rest is the step minus the plugins' phases */
		double ms = p < SRT_PROF_COUNT ? (double)ns[p] * 1e-6 / steps : step * 1e3 - sum;
		sum += ms;
		fprintf(tout, "    %-26s %8.3f ms  %5.1f %%", name, ms, 100.0 * ms / (step * 1e3));
		if (wb[p] && ms > 0)
			fprintf(tout, "  weights %7.2f MiB  %6.2f GB/s", (double)wb[p] / 1048576.0,
				(double)wb[p] / (ms * 1e-3) / 1e9);
		fputc('\n', tout);
		json_object_set_new(ph, name, json_real(ms));
		json_object_set_new(phw, name, json_integer((json_int_t)wb[p]));
	}
	/* a worker that slept through a serial stretch is woken at the next region; the
	 * stretches themselves are the time the other threads wait */
	if (srt_engine_threads(e) > 1) {
		fprintf(tout, "    thread pool: %.2f worker sleeps a step (each woken at its next job; "
			      "SRT_POOL_SPIN_US)\n", sleeps);
		fprintf(tout, "    one thread at work, the others waiting: %.3f ms a step (%.1f %%)\n",
			one_ms, 100.0 * one_ms / (step * 1e3));
	}
	json_array_append_new(jout, json_pack("{s:i, s:i, s:i, s:f, s:o, s:o, s:f, s:f}", "threads",
					      srt_engine_threads(e), "depth", depth, "steps", steps,
					      "step_ms", step * 1e3, "phases_ms", ph,
					      "phases_weight_bytes", phw, "pool_sleeps_per_step",
					      sleeps, "one_thread_ms_per_step", one_ms));
	if (!nprofs)
		fprintf(tout, "    (no plugin exports %s: no phase counters)\n", SRT_PROF_SYMBOL);
	return 0;
}

/* --- the rounds ------------------------------------------------------------------------------ */

struct tstate {
	struct srt_engine *e;
	int threads, var; /* its thread count, its --ab variant (0 without --ab) */
	char label[600];  /* "threads N" or "threads N [SECTION.KEY=V]" */
	double bw;
	uint64_t wb;
	struct live deep[MAXD];
	double deep_pf[MAXD];
	double pf[MAXR], dc[MAXD + 1][MAXR], ratio[MAXD + 1][MAXR];
	uint64_t kv_short;              /* KV held by the short sequences */
	uint64_t kvr_short, kvr[MAXD];  /* KV read per decode step (kv_read_bytes) */
};

/* Open engine i of run(): thread count o->threads[i % nthreads], --ab variant i / nthreads
 * (its SECTION.KEY=V after the --set keys). */
static int open_engine(const struct opts *o, const char *model, int i, struct tstate *s)
{
	char err[2048];
	s->threads = o->threads[i % o->nthreads];
	s->var = i / o->nthreads;
	if (o->nvar == 2) {
		const char *sets[MAXSETS + 1];
		for (int k = 0; k < o->nsets; k++)
			sets[k] = o->sets[k];
		sets[o->nsets] = o->ab[s->var];
		if (srt_runtime_config_set_overrides(sets, (size_t)o->nsets + 1, err, sizeof(err))) {
			fprintf(stderr, "exec_bench: --ab %s: %s\n", o->ab[s->var], err);
			return -1;
		}
		snprintf(s->label, sizeof(s->label), "threads %d [%s]", s->threads, o->ab[s->var]);
	} else {
		snprintf(s->label, sizeof(s->label), "threads %d", s->threads);
	}
	struct srt_engine_opts eo = {.model = model, .threads = s->threads, .profile = -1};
	if (srt_engine_open(&eo, &s->e, err, sizeof(err))) {
		fprintf(stderr, "exec_bench: %s\n", err);
		return -1;
	}
	s->wb = srt_engine_decode_weight_bytes(s->e);
	s->kvr_short = (uint64_t)o->batch * kv_read_bytes(s->e, (uint64_t)o->prompt);
	for (int d = 0; d < o->ndepths; d++)
		s->kvr[d] = kv_read_bytes(s->e, (uint64_t)o->depths[d]);
	return 0;
}

/* --ab: B / A of each thread count's decode rates (median of the per-round ratios, and the
 * ratio of the medians), printed and as JSON. */
static json_t *ab_summary(const struct opts *o, const struct tstate *ts)
{
	json_t *jr = json_array();
	fprintf(tout, "\nA/B: B = [%s] over A = [%s], decode tokens/s:\n", o->ab[1], o->ab[0]);
	for (int t = 0; t < o->nthreads; t++) {
		const struct tstate *A = &ts[t], *B = &ts[o->nthreads + t];
		for (int d = 0; d <= o->ndepths; d++) {
			double r[MAXR];
			for (int k = 0; k < o->runs; k++)
				r[k] = B->dc[d][k] / A->dc[d][k];
			const double mr = median(r, o->runs);
			const double rm = median(B->dc[d], o->runs) / median(A->dc[d], o->runs);
			int wins = 0;
			for (int k = 0; k < o->runs; k++)
				wins += r[k] > 1.0;
			const int depth = d ? o->depths[d - 1] : o->prompt;
			fprintf(tout, "  threads %d, depth %6d%s: B/A %.3f (median of %d rounds; B faster "
				"in %d), medians %.2f / %.2f = %.3f\n", A->threads, depth,
				d ? "" : " (short)", mr, o->runs, wins, median(B->dc[d], o->runs),
				median(A->dc[d], o->runs), rm);
			json_t *jrounds = json_array();
			for (int k = 0; k < o->runs; k++)
				json_array_append_new(jrounds, json_real(r[k]));
			json_array_append_new(jr, json_pack("{s:i, s:i, s:f, s:f, s:o}", "threads",
							    A->threads, "depth", depth,
							    "median_round_ratio", mr, "ratio_of_medians",
							    rm, "round_ratios", jrounds));
		}
	}
	return json_pack("{s:s, s:s, s:o}", "a", o->ab[0], "b", o->ab[1], "decode", jr);
}

static int run(const struct opts *o, const char *model)
{
	const int ne = o->nthreads * o->nvar; /* engines: [variant][thread count] */
	struct tstate *ts = calloc((size_t)ne, sizeof(*ts));
	float *lg = NULL;
	json_t *jth = NULL, *jprof = NULL, *jab = NULL; /* --json: threads, profiles, A/B */
	int rc = 1;
	if (!ts)
		return 1;
	for (int i = 0; i < ne; i++)
		if (open_engine(o, model, i, &ts[i]))
			goto out;
	size_t V = (size_t)srt_engine_model(ts[0].e)->vocab_size;
	if (!(lg = malloc(sizeof(float) * V * 16)))
		goto out;
	fprintf(tout, "model %s, %s profile, prefill chunk %d; decode weights %.1f MiB per step; %s "
	       "clock\n", model, srt_profile_name(srt_engine_profile(ts[0].e)),
	       srt_engine_chunk(ts[0].e), (double)ts[0].wb / 1048576.0,
	       bench_clock == CLOCK_MONOTONIC ? "wall" : "process CPU-time");
	for (int i = 0; i < ne; i++) /* per thread count; the variants share it */
		ts[i].bw = i < o->nthreads ? read_bandwidth(ts[i].threads) : ts[i % o->nthreads].bw;

	/* the deep sequences, prefilled once per engine */
	int more = o->steps * (o->runs + 2) + o->warmup;
	for (int d = 0; d < o->ndepths; d++)
		for (int i = 0; i < ne; i++) {
			fprintf(stderr, "exec_bench: prefilling depth %d, %s...\n", o->depths[d],
				ts[i].label);
			if (live_open(ts[i].e, &ts[i].deep[d], o->depths[d], more, 1000 + d,
				      &ts[i].deep_pf[d], lg))
				goto out;
			fprintf(tout, "%s: prefill of the depth-%d sequence %.1f tokens/s, KV %.2f MiB\n",
			       ts[i].label, o->depths[d], ts[i].deep_pf[d],
			       (double)ts[i].deep[d].kv / 1048576.0);
		}
	/* warm-up: decode steps on each engine (first-touch of weights, scratch growth) */
	for (int i = 0; i < ne && o->warmup > 0; i++) {
		struct live l;
		double pf, r;
		if (live_open(ts[i].e, &l, o->prompt, o->warmup, 999, &pf, lg) ||
		    decode_steps(ts[i].e, &l, 1, o->warmup, lg, &r)) {
			live_close(&l);
			goto out;
		}
		for (int d = 0; d < o->ndepths; d++)
			if (decode_steps(ts[i].e, &ts[i].deep[d], 1, 1, lg, &r)) {
				live_close(&l);
				goto out;
			}
		live_close(&l);
	}

	for (int r = 0; r < o->runs; r++) {
		for (int k = 0; k < ne; k++) {
			/* with --ab, variant B goes first in odd rounds */
			struct tstate *s = &ts[o->nvar == 2 && r % 2 ? (k + o->nthreads) % ne : k];
			struct live sh[16];
			double rate;
			memset(sh, 0, sizeof(sh));
			uint64_t kv = 0;
			for (int b = 0; b < o->batch; b++) {
				double pf;
				if (live_open(s->e, &sh[b], o->prompt, o->steps, r * 16 + b, &pf, lg)) {
					for (int c = 0; c < b; c++)
						live_close(&sh[c]);
					goto out;
				}
				if (b == 0)
					s->pf[r] = pf;
				kv += sh[b].kv;
			}
			int bad = decode_steps(s->e, sh, o->batch, o->steps, lg, &rate);
			for (int b = 0; b < o->batch; b++)
				live_close(&sh[b]);
			if (bad)
				goto out;
			s->kv_short = kv;
			s->dc[0][r] = rate;
			/* a batched step reads the weights once and every sequence's KV */
			s->ratio[0][r] = rate / o->batch * (double)(s->wb + s->kvr_short) / s->bw;
			fprintf(tout, "round %d %s: prefill %d tokens %.1f tokens/s; decode depth %d "
			       "(batch %d) %.2f tokens/s", r + 1, s->label, o->prompt, s->pf[r],
			       o->prompt, o->batch, rate);
			for (int d = 0; d < o->ndepths; d++) {
				if (decode_steps(s->e, &s->deep[d], 1, o->steps, lg, &rate))
					goto out;
				s->dc[d + 1][r] = rate;
				s->ratio[d + 1][r] = rate * (double)(s->wb + s->kvr[d]) / s->bw;
				fprintf(tout, "; depth %d %.2f tokens/s", o->depths[d], rate);
			}
			fprintf(tout, "\n");
			fflush(tout);
		}
	}
	for (int t = 0; t < o->nthreads; t++) {
		double bw = read_bandwidth(o->threads[t]);
		for (int i = t; i < ne; i += o->nthreads) {
			if (bw > ts[i].bw) { /* the best read rate seen: the ratios only get smaller */
				for (int d = 0; d <= o->ndepths; d++)
					for (int r = 0; r < o->runs; r++)
						ts[i].ratio[d][r] *= ts[i].bw / bw;
				ts[i].bw = bw;
			}
		}
	}

	jth = json_array();
	fprintf(tout, "\nsummary, best / median of %d interleaved rounds:\n", o->runs);
	for (int i = 0; i < ne; i++) {
		struct tstate *s = &ts[i];
		json_t *jdec = json_array(), *jdeep = json_array();
		for (int d = 0; d < o->ndepths; d++)
			json_array_append_new(jdeep, json_pack("{s:i, s:f, s:I}", "depth", o->depths[d],
							       "tokens_per_s", s->deep_pf[d],
							       "kv_held_bytes", (json_int_t)s->deep[d].kv));
		json_t *jt = json_pack("{s:i, s:f, s:{s:i, s:o}, s:o, s:o}", "threads", s->threads,
				       "read_bandwidth_bytes_per_s", s->bw, "prefill", "tokens",
				       o->prompt, "tokens_per_s", stats_json(s->pf, o->runs),
				       "deep_prefill", jdeep, "decode", jdec);
		if (o->nvar == 2)
			json_object_set_new(jt, "variant", json_string(o->ab[s->var]));
		json_array_append_new(jth, jt);
		fprintf(tout,
			"%s (read bandwidth %.2f GB/s, best read pattern and pass, before and "
			"after):\n",
			s->label, s->bw / 1e9);
		fprintf(tout, "  prefill %d tokens: %.1f / %.1f tokens/s\n", o->prompt, best(s->pf, o->runs),
		       median(s->pf, o->runs));
		for (int d = 0; d <= o->ndepths; d++) {
			int depth = d ? o->depths[d - 1] : o->prompt;
			uint64_t kv = d ? s->deep[d - 1].kv : s->kv_short;
			uint64_t kvr = d ? s->kvr[d - 1] : s->kvr_short;
			double md = median(s->dc[d], o->runs), m0 = median(s->dc[0], o->runs);
			fprintf(tout, "  decode depth %6d%s: %.2f / %.2f tokens/s, %.1f MiB weights + %.2f MiB "
			       "KV read per step (of %.2f MiB held) = %.1f%% / %.1f%% of the read bandwidth",
			       depth, d ? "" : " (short)", best(s->dc[d], o->runs), md,
			       (double)s->wb / 1048576.0, (double)kvr / 1048576.0, (double)kv / 1048576.0,
			       100.0 * best(s->ratio[d], o->runs), 100.0 * median(s->ratio[d], o->runs));
			if (d)
				fprintf(tout, "; median %.1f%% of the short-depth rate", 100.0 * md / m0);
			fprintf(tout, "\n");
			json_t *jd = json_pack("{s:i, s:b, s:o, s:I, s:I, s:o}", "depth", depth,
					       "short", d == 0, "tokens_per_s",
					       stats_json(s->dc[d], o->runs), "kv_read_bytes_per_step",
					       (json_int_t)kvr, "kv_held_bytes", (json_int_t)kv,
					       "bandwidth_share", stats_json(s->ratio[d], o->runs));
			if (d)
				json_object_set_new(jd, "of_short_median", json_real(md / m0));
			json_array_append_new(jdec, jd);
		}
		if (i % o->nthreads > 0) { /* against the first thread count of its variant */
			const struct tstate *f = &ts[i - i % o->nthreads];
			const double xp = median(s->pf, o->runs) / median(f->pf, o->runs);
			const double xd = median(s->dc[0], o->runs) / median(f->dc[0], o->runs);
			fprintf(tout, "  threads %d / threads %d (medians): prefill %.2fx, short decode %.2fx\n",
				s->threads, f->threads, xp, xd);
			json_object_set_new(jt, "vs_first_medians",
					    json_pack("{s:i, s:f, s:f}", "threads", f->threads,
						      "prefill", xp, "short_decode", xd));
		}
	}
	if (o->nvar == 2)
		jab = ab_summary(o, ts);
	jprof = json_array();
	if (o->profile) {
		nprofs = 0;
		dl_iterate_phdr(find_prof, NULL);
		fprintf(tout, "\n");
		for (int i = 0; i < ne; i++) {
			struct live l;
			double pf, r;
			if (o->nvar == 2)
				fprintf(tout, "  [%s]\n", o->ab[ts[i].var]);
			if (live_open(ts[i].e, &l, o->prompt, o->steps + 1, 2000 + i, &pf, lg) ||
			    decode_steps(ts[i].e, &l, 1, 1, lg, &r) ||
			    profile(ts[i].e, &l, o->prompt, o->steps, lg, jprof)) {
				live_close(&l);
				goto out;
			}
			live_close(&l);
			for (int d = 0; d < o->ndepths; d++)
				if (profile(ts[i].e, &ts[i].deep[d], o->depths[d], o->steps, lg, jprof))
					goto out;
		}
	}
	if (o->json) {
		json_t *root = json_pack(
			"{s:s, s:s, s:i, s:s, s:I, s:i, s:i, s:i, s:i, s:o, s:o}", "model", model,
			"numerics", srt_profile_name(srt_engine_profile(ts[0].e)), "prefill_chunk",
			srt_engine_chunk(ts[0].e), "clock",
			bench_clock == CLOCK_MONOTONIC ? "wall" : "cpu", "weights_bytes_per_step",
			(json_int_t)ts[0].wb, "prompt", o->prompt, "steps", o->steps, "runs", o->runs,
			"batch", o->batch, "threads", jth, "profiles", jprof);
		jth = jprof = NULL;
		if (root && jab) {
			json_object_set_new(root, "ab", jab);
			jab = NULL;
		}
		if (!root || json_dumpf(root, stdout, JSON_INDENT(2)) || fputc('\n', stdout) == EOF) {
			fprintf(stderr, "exec_bench: could not write the JSON report\n");
			json_decref(root);
			goto out;
		}
		json_decref(root);
	}
	rc = 0;
out:
	json_decref(jth);
	json_decref(jprof);
	json_decref(jab);
	for (int i = 0; i < ne; i++) {
		for (int d = 0; d < o->ndepths; d++)
			if (ts[i].deep[d].s || ts[i].deep[d].tok)
				live_close(&ts[i].deep[d]);
		if (ts[i].e)
			srt_engine_close(ts[i].e);
	}
	free(ts);
	free(lg);
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o;
	tout = stdout;
	int prc = parse_args(argc, argv, &o);
	if (prc)
		return prc > 0 ? 0 : 2;
	if (o.json)
		tout = stderr;
	const char *model = o.model;
	char dir[4096], exe[4096], err[2048];
	if (srt_runtime_config_set_overrides(o.sets, (size_t)o.nsets, err, sizeof(err))) {
		fprintf(stderr, "exec_bench: %s\n", err);
		return 2;
	}
	if (!model) {
		/* <build>/bin/exec_bench -> <build>/models/small */
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		exe[n > 0 ? n : 0] = 0;
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		char cache[4200];
		snprintf(cache, sizeof(cache), "%s/../models", exe);
		double t0 = wall_s();
		if (srt_engine_model_dir("small", cache, 0, dir, sizeof(dir), err, sizeof(err))) {
			fprintf(stderr, "exec_bench: %s\n", err);
			return 1;
		}
		fprintf(stderr, "model small in %s (%.1f s)\n", dir, wall_s() - t0);
		model = dir;
	}
	return run(&o, model);
}
