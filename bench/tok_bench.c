/*
 * tok_bench: encode throughput of srt_tok on one thread, side by side with HF tokenizers
 * measured in the same run.
 *
 * Generates the tokenizer test corpus (tests/tok/gen_corpus.py, fixed seed) unless --corpus is
 * given, then runs --rounds rounds; each round times shadowrt encoding every line (one
 * srt_tok_encode call per line, fastest of --reps passes after a warm-up) and then HF
 * tokenizers doing the same (bench/tok_bench_hf.py, RAYON_NUM_THREADS=1). Prints per round MB/s,
 * tokens/s and the ratio, then the median ratio. Interleaving makes both sides see the same
 * machine load; on a shared machine read the ratio, not the absolute figures.
 *
 * usage: tok_bench [--tokenizer FILE] [--corpus FILE] [--python PY] [--rounds N] [--reps N]
 *                  [--no-hf]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tok/tok.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	struct srt_tok_text t = {0};
	char buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		if (srt_tok_text_append(&t, buf, n)) {
			fclose(f);
			free(t.data);
			return NULL;
		}
	fclose(f);
	*len = t.len;
	return t.data;
}

/* One pass over every line; returns seconds, *ntok the tokens. */
static double pass(const struct srt_tok *tok, const char *s, size_t len, size_t *ntok)
{
	struct srt_tok_ids ids = {0};
	char err[256];
	size_t total = 0, pos = 0;
	double t0 = now();
	while (pos <= len) {
		const char *nl = memchr(s + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - s) : len;
		ids.n = 0;
		if (srt_tok_encode(tok, s + pos, end - pos, 0, &ids, err, sizeof(err))) {
			fprintf(stderr, "tok_bench: %s\n", err);
			exit(1);
		}
		total += ids.n;
		pos = end + 1;
	}
	double dt = now() - t0;
	srt_tok_ids_free(&ids);
	*ntok = total;
	return dt;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	const char *tpath = SRT_TOK_BENCH_DEFAULT_JSON, *corpus = NULL;
	const char *py = SRT_TOK_BENCH_SOURCE_DIR "/.venv/bin/python";
	int rounds = 5, reps = 3, hf = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--tokenizer") && v)
			tpath = argv[++i];
		else if (!strcmp(a, "--corpus") && v)
			corpus = argv[++i];
		else if (!strcmp(a, "--python") && v)
			py = argv[++i];
		else if (!strcmp(a, "--rounds") && v)
			rounds = atoi(argv[++i]);
		else if (!strcmp(a, "--reps") && v)
			reps = atoi(argv[++i]);
		else if (!strcmp(a, "--no-hf"))
			hf = 0;
		else {
			fprintf(stderr, "usage: tok_bench [--tokenizer FILE] [--corpus FILE] [--python PY] "
					"[--rounds N] [--reps N] [--no-hf]\n");
			return 2;
		}
	}
	if (rounds < 1 || rounds > 100 || reps < 1 || reps > 100) {
		fprintf(stderr, "tok_bench: --rounds and --reps must be in [1, 100]\n");
		return 2;
	}
	char cpath[512], cmd[4096];
	if (!corpus) {
		snprintf(cpath, sizeof(cpath), "/tmp/tok_bench_corpus.%d.txt", (int)getpid());
		snprintf(cmd, sizeof(cmd), "'%s' '%s/tests/tok/gen_corpus.py' '%s' '%s' >&2", py,
			 SRT_TOK_BENCH_SOURCE_DIR, tpath, cpath);
		if (system(cmd)) {
			fprintf(stderr, "tok_bench: generating the corpus failed (%s)\n", cmd);
			return 1;
		}
		corpus = cpath;
	}
	size_t len;
	char *s = slurp(corpus, &len);
	if (!s) {
		fprintf(stderr, "tok_bench: cannot read %s\n", corpus);
		return 1;
	}
	char err[4608];
	struct srt_tok *tok;
	double tl = now();
	if (srt_tok_load(tpath, &tok, err, sizeof(err))) {
		fprintf(stderr, "tok_bench: %s\n", err);
		return 1;
	}
	tl = now() - tl;
	printf("tok_bench: %s, %.2f MB corpus %s, load %.3f s; 1 thread; fastest of %d passes per "
	       "round\n", tpath, (double)len / 1e6, corpus, tl, reps);
	printf("%5s %12s %14s %12s %14s %8s\n", "round", "shadowrt MB/s", "shadowrt tok/s", "HF MB/s",
	       "HF tok/s", "ratio");
	double ratios[100];
	size_t ntok;
	pass(tok, s, len, &ntok); /* warm-up: page faults, word cache */
	for (int r = 0; r < rounds; r++) {
		double best = 1e30;
		for (int k = 0; k < reps; k++) {
			double dt = pass(tok, s, len, &ntok);
			best = dt < best ? dt : best;
		}
		double mbs = (double)len / best / 1e6, tps = (double)ntok / best;
		if (!hf) {
			printf("%5d %12.2f %14.0f\n", r + 1, mbs, tps);
			continue;
		}
		snprintf(cmd, sizeof(cmd),
			 "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false '%s' '%s/bench/tok_bench_hf.py' "
			 "'%s' '%s' --reps %d",
			 py, SRT_TOK_BENCH_SOURCE_DIR, tpath, corpus, reps);
		FILE *p = popen(cmd, "r");
		double hdt = 0;
		size_t htok = 0;
		if (!p || fscanf(p, "%lf %zu", &hdt, &htok) != 2 || pclose(p) || hdt <= 0) {
			fprintf(stderr, "tok_bench: the HF side failed (%s); --no-hf runs without it\n", cmd);
			return 1;
		}
		ratios[r] = hdt / best;
		printf("%5d %12.2f %14.0f %12.2f %14.0f %7.2fx%s\n", r + 1, mbs, tps, (double)len / hdt / 1e6,
		       (double)htok / hdt, ratios[r], htok == ntok ? "" : "  (token counts differ!)");
		fflush(stdout);
	}
	if (hf) {
		qsort(ratios, (size_t)rounds, sizeof(double), cmp_d);
		printf("median speed ratio shadowrt / HF tokenizers: %.2fx over %d rounds\n",
		       ratios[rounds / 2], rounds);
	}
	if (corpus == cpath)
		remove(cpath);
	free(s);
	srt_tok_free(tok);
	return 0;
}
