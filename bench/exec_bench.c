/*
 * exec_bench: prefill and decode tokens/s of the executor on the `small` preset with 1 and 2
 * threads, the bytes of weights and KV one decode step reads, and the achieved decode byte
 * rate as a ratio of this machine's memory read bandwidth measured in the same run.
 *
 *   exec_bench [--model DIR|PRESET] [--prompt N] [--steps N] [--threads-max N] [--runs N]
 *              [--batch N]
 *
 * --batch N decodes N sequences together (each prefilled alone first); decode tokens/s then
 * counts the tokens of the whole batch, and the byte rate counts the weights once per step.
 *
 * Each thread count runs --runs times (a new prompt each time, so the prefix cache never
 * hits) and prints every run, then the best and the median of prefill and decode tokens/s
 * and of the decode byte rate as a share of the read bandwidth (the machine is shared: the
 * median is the figure to compare, the best what the code can do).
 *
 * The small checkpoint is generated once into <build>/models/small (next to bin/).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/runtime_config.h"
#include "exec/engine.h"
#include "radix/radix.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- memory bandwidth: each thread sums its share of a large buffer -------------------- */

struct bw_job {
	const uint64_t *p;
	size_t n;
	uint64_t sum;
};

static void *bw_read(void *arg)
{
	struct bw_job *j = arg;
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

/* best of 5 passes over a 512 MiB buffer, bytes/s */
static double read_bandwidth(int threads)
{
	size_t bytes = (size_t)512 << 20, n = bytes / 8;
	uint64_t *buf = malloc(bytes);
	if (!buf)
		return 0;
	for (size_t i = 0; i < n; i++)
		buf[i] = i * 0x9E3779B97F4A7C15ull;
	double best = 1e30;
	uint64_t sink = 0;
	for (int rep = 0; rep < 5; rep++) {
		pthread_t th[64];
		struct bw_job jobs[64];
		double t0 = now_s();
		for (int t = 0; t < threads; t++) {
			jobs[t].p = buf + n * (size_t)t / (size_t)threads;
			jobs[t].n = n / (size_t)threads;
			pthread_create(&th[t], NULL, bw_read, &jobs[t]);
		}
		for (int t = 0; t < threads; t++) {
			pthread_join(th[t], NULL);
			sink += jobs[t].sum;
		}
		double dt = now_s() - t0;
		if (dt < best)
			best = dt;
	}
	free(buf);
	if (sink == 42) /* keep the sums alive */
		fputc(' ', stderr);
	return (double)bytes / best;
}

/* --- the engine -------------------------------------------------------------------------- */

static int32_t *make_prompt(int n, int32_t vocab, int run)
{
	int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
	uint64_t s = 88172645463325252ull + 0x9E3779B97F4A7C15ull * (uint64_t)run;
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

static int cmp_dbl(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double best(const double *v, int n)
{
	double b = v[0];
	for (int i = 1; i < n; i++)
		b = v[i] > b ? v[i] : b;
	return b;
}

/*
 * `batch` sequences (prompts of run `run`), each prefilled alone (prefill tokens/s of the
 * first), then `steps` batched decode steps; decode tokens/s over the batch and the KV bytes
 * the batch's sequences hold.
 */
static int run_once(struct srt_engine *e, int prompt, int steps, int batch, int run, double *pf,
		    double *dc, uint64_t *kvb)
{
	char err[2048] = "";
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	int32_t *t[16] = {NULL}, tok[16];
	struct srt_seq *s[16] = {NULL};
	float *lg = malloc(sizeof(float) * V * (size_t)batch);
	int rc = 1;
	uint64_t kv0 = kv_bytes(e); /* pages earlier runs left in the cache */
	for (int b = 0; b < batch; b++)
		if (!(t[b] = make_prompt(prompt + steps, (int32_t)V, run * 16 + b)))
			lg = (free(lg), NULL);
	if (!lg) {
		fprintf(stderr, "exec_bench: out of memory\n");
		goto out;
	}
	for (int b = 0; b < batch; b++) {
		if (srt_engine_seq_start(e, t[b], (uint64_t)prompt, 0, &s[b], NULL, err, sizeof(err)))
			goto fail;
		double t0 = now_s();
		if (srt_engine_prefill(e, s[b], lg, 0, err, sizeof(err)))
			goto fail;
		if (b == 0)
			*pf = prompt / (now_s() - t0);
	}
	*kvb = kv_bytes(e) - kv0;
	double t0 = now_s();
	for (int k = 0; k < steps; k++) {
		for (int b = 0; b < batch; b++)
			tok[b] = t[b][prompt + k];
		if (srt_engine_decode(e, s, (uint32_t)batch, tok, lg, err, sizeof(err)))
			goto fail;
	}
	*dc = (double)steps * batch / (now_s() - t0);
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "exec_bench: %s\n", err);
out:
	for (int b = 0; b < batch; b++) {
		srt_engine_seq_free(s[b]);
		free(t[b]);
	}
	free(lg);
	return rc;
}

static int bench(const char *model, int threads, int prompt, int steps, int runs, int batch,
		 double bw)
{
	char err[2048];
	struct srt_engine_opts o = {.model = model, .threads = threads, .profile = -1, .quiet = 0};
	struct srt_engine *e;
	double pf[64], dc[64], ratio[64];
	uint64_t kv = 0;
	if (srt_engine_open(&o, &e, err, sizeof(err))) {
		fprintf(stderr, "exec_bench: %s\n", err);
		return 1;
	}
	uint64_t wb = srt_engine_decode_weight_bytes(e);
	printf("threads %d (%s profile, chunk %d), read bandwidth %.2f GB/s (best of 5 passes)\n",
	       srt_engine_threads(e), srt_profile_name(srt_engine_profile(e)), srt_engine_chunk(e),
	       bw / 1e9);
	for (int r = 0; r < runs; r++) {
		if (run_once(e, prompt, steps, batch, r, &pf[r], &dc[r], &kv)) {
			srt_engine_close(e);
			return 1;
		}
		/* a batched step reads the weights once and every sequence's KV */
		double steps_s = dc[r] / batch;
		ratio[r] = steps_s * (double)(wb + kv) / bw;
		printf("  run %d: prefill %d tokens %.1f tokens/s; decode batch %d, %d steps %.2f "
		       "tokens/s = %.2f GB/s = %.1f%% of the read bandwidth\n", r + 1, prompt, pf[r],
		       batch, steps, dc[r], steps_s * (double)(wb + kv) / 1e9, 100.0 * ratio[r]);
	}
	printf("  per decode step: weights %.1f MiB + KV held by the batch's sequences %.2f MiB "
	       "(upper bound of what a step reads)\n", (double)wb / 1048576.0,
	       (double)kv / 1048576.0);
	printf("  threads %d best / median of %d: prefill %.1f / %.1f tokens/s; decode (batch %d) "
	       "%.2f / %.2f tokens/s = %.1f%% / %.1f%% of the read bandwidth\n",
	       srt_engine_threads(e), runs, best(pf, runs), median(pf, runs), batch,
	       best(dc, runs), median(dc, runs), 100.0 * best(ratio, runs),
	       100.0 * median(ratio, runs));
	srt_engine_close(e);
	return 0;
}

int main(int argc, char **argv)
{
	const char *model = NULL;
	int prompt = 256, steps = 8, tmax = 2, runs = 3, batch = 1;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--model"))
			model = argv[i + 1];
		else if (!strcmp(argv[i], "--prompt"))
			prompt = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--steps"))
			steps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads-max"))
			tmax = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--runs"))
			runs = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--batch"))
			batch = atoi(argv[i + 1]);
		else {
			fprintf(stderr, "usage: exec_bench [--model DIR|PRESET] [--prompt N] [--steps N] "
				"[--threads-max N] [--runs N] [--batch N]\n");
			return 2;
		}
	}
	if (prompt < 1 || steps < 1 || tmax < 1 || tmax > 64 || runs < 1 || runs > 64 ||
	    batch < 1 || batch > 16) {
		fprintf(stderr, "exec_bench: --prompt, --steps >= 1, --threads-max and --runs in "
			"[1, 64], --batch in [1, 16]\n");
		return 2;
	}
	char dir[4096], exe[4096], err[2048];
	if (!model) {
		/* <build>/bin/exec_bench -> <build>/models/small */
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		exe[n > 0 ? n : 0] = 0;
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		char cache[4200];
		snprintf(cache, sizeof(cache), "%s/../models", exe);
		double t0 = now_s();
		if (srt_engine_model_dir("small", cache, 0, dir, sizeof(dir), err, sizeof(err))) {
			fprintf(stderr, "exec_bench: %s\n", err);
			return 1;
		}
		fprintf(stderr, "model small in %s (%.1f s)\n", dir, now_s() - t0);
		model = dir;
	}
	for (int t = 1; t <= tmax; t++) {
		double bw = read_bandwidth(t);
		if (bench(model, t, prompt, steps, runs, batch, bw))
			return 1;
	}
	return 0;
}
