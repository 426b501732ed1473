/*
 * ttft_bench: time to first token of one prompt on the executor, (a) computed from scratch,
 * (b) from an L1 prefix hit, (r) from a branch-point hit whose window / carry-state pages are
 * not cached (only the compressed pools are, as L2/L3 keep them with rematerialization): the
 * window is rematerialized, (c) restored from L2 (host) after L1 eviction, (d) restored from
 * L3 by a second engine on the same store: file, sqlite, redis (a loopback redis-server).
 *
 *   ttft_bench [--model PRESET|DIR] [--prompt N] [--threads N]
 *              [--only a,b,r,o,c,file,sqlite,redis]
 *
 * (o) two requests on a fresh engine: Y (another prompt of N/4 + 1 tokens) computed and B (the
 * prompt) an L3 hit, B's load either waited for at once or overlapping Y's compute
 * (srt_engine_seq_begin / _wait); prints how long B blocked on its load and the wall time of
 * both, A/B interleaved, with B's logits compared bitwise.
 *
 * TTFT = seq_start (match, tier lookup, loads, verification) + prefill of what is left, up to
 * the logits of the last prompt position. The engine matches the prompt's first n - 1 tokens,
 * so a hit leaves the last partial page (and at least one token) to compute; the table prints
 * how many tokens were computed. Use n = k * 256 + 1 (the default, 16385) so that a hit leaves
 * exactly one token. One computed run seeds both L2 and the file L3. Every run also decodes
 * DECODE tokens after the prompt; the logits of the last prompt position and of every decode
 * step of each hit run are compared bitwise with the computed run's (the executor promises
 * bitwise equality): any difference is reported and the exit status is 1.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec/engine.h"
#include "radix/radix.h"
#include "tier/manager.h"
#include "tier_util.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (all threads): steadier than wall time on a loaded box */
static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double last_cpu; /* CPU seconds of the last request's TTFT */

static const char *model = "small";
static int threads = -1;
static uint64_t n_prompt = 16385;
static int32_t *prompt;
static float *ref_logits;
static int32_t vocab;
static char tmp[4096];
static int mismatches; /* hit runs whose logits differ from the computed run's */

#define DECODE 4 /* decode steps after the prompt, compared too */

static int write_ini(const char *path, const char *l2, const char *l3)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "[tier.l1]\nplugin = host\nbudget = 8GiB\n");
	fprintf(f, "[tier.l2]\n%s\n", l2 ? l2 : "plugin = none");
	fprintf(f, "[tier.l3]\n%s\n", l3 ? l3 : "plugin = none");
	fprintf(f, "[cache]\npage_size = 256\nwrite_policy = write_through\nprefetch = on\n");
	return fclose(f);
}

static struct srt_engine *open_engine(const char *ini, int tiers)
{
	char err[1024];
	struct srt_engine_opts o = {.config_path = ini, .model = model, .threads = threads,
				    .profile = -1, .chunk = 0, .quiet = 0, .tiers = tiers};
	struct srt_engine *e;
	if (srt_engine_open(&o, &e, err, sizeof(err))) {
		fprintf(stderr, "ttft_bench: %s\n", err);
		exit(1);
	}
	return e;
}

static uint64_t last_remat, last_remat_cost; /* of the last request */

/*
 * One request: returns TTFT in seconds; hit tiers into hit[3]; logits into out: the last
 * prompt position's, then DECODE decode steps' ([1 + DECODE][vocab]).
 */
static double request(struct srt_engine *e, int use_cache, uint64_t hit[3], float *out)
{
	char err[1024];
	struct srt_seq *s;
	double t0 = now_s(), c0 = cpu_s();
	if (srt_engine_seq_start(e, prompt, n_prompt, use_cache, &s, NULL, err, sizeof(err)) ||
	    srt_engine_prefill(e, s, out, 0, err, sizeof(err))) {
		fprintf(stderr, "ttft_bench: %s\n", err);
		exit(1);
	}
	double t = now_s() - t0;
	last_cpu = cpu_s() - c0;
	srt_seq_hit_tiers(s, hit);
	last_remat = srt_seq_remat(s, &last_remat_cost);
	for (int k = 0; k < DECODE; k++) {
		int32_t tok = prompt[k];
		if (srt_engine_decode(e, &s, 1, &tok, out + (size_t)(1 + k) * (size_t)vocab, err,
				      sizeof(err))) {
			fprintf(stderr, "ttft_bench: decode: %s\n", err);
			exit(1);
		}
	}
	if (srt_engine_seq_finish(s, NULL, err, sizeof(err))) {
		fprintf(stderr, "ttft_bench: finish: %s\n", err);
		exit(1);
	}
	srt_engine_seq_free(s);
	return t;
}

static double base_cpu;

/*
 * (o) Two requests on a fresh engine whose store holds the prompt's prefix: Y (another prompt
 * of ny tokens, computed) and B (the prompt, an L2/L3 hit). overlapped = 0: B starts and waits
 * for its load (srt_engine_seq_start), then Y computes, then B's rest; 1: B begins (its load
 * runs in the tier manager's thread), Y computes, then B waits (srt_engine_seq_wait) and
 * computes its rest. *wait = the seconds B's start/wait blocked on the load; returns the wall
 * time of the whole (both requests' prompts). B's logits (last position + DECODE) into out.
 */
static double pair(struct srt_engine *e, const int32_t *y, uint64_t ny, int overlapped,
		   double *wait, uint64_t hit[3], float *out)
{
	char err[1024];
	struct srt_seq *b = NULL, *sy = NULL;
	double t0 = now_s(), w0 = t0;
	int rc = overlapped
			 ? srt_engine_seq_begin(e, prompt, n_prompt, 1, &b, NULL, err, sizeof(err))
			 : srt_engine_seq_start(e, prompt, n_prompt, 1, &b, NULL, err, sizeof(err));
	*wait = overlapped ? 0 : now_s() - w0;
	if (!rc)
		rc = srt_engine_seq_start(e, y, ny, 0, &sy, NULL, err, sizeof(err));
	if (!rc)
		rc = srt_engine_prefill(e, sy, NULL, 0, err, sizeof(err));
	if (!rc && overlapped) {
		w0 = now_s();
		rc = srt_engine_seq_wait(b, NULL, err, sizeof(err));
		*wait = now_s() - w0;
	}
	if (!rc)
		rc = srt_engine_prefill(e, b, out, 0, err, sizeof(err));
	double t = now_s() - t0;
	if (rc) {
		fprintf(stderr, "ttft_bench: (o): %s\n", err);
		exit(1);
	}
	srt_seq_hit_tiers(b, hit);
	for (int k = 0; k < DECODE && !rc; k++) {
		int32_t tok = prompt[k];
		rc = srt_engine_decode(e, &b, 1, &tok, out + (size_t)(1 + k) * (size_t)vocab, err,
				       sizeof(err));
	}
	if (rc) {
		fprintf(stderr, "ttft_bench: (o) decode: %s\n", err);
		exit(1);
	}
	srt_engine_seq_free(sy);
	srt_engine_seq_free(b);
	return t;
}

static void row(const char *what, double t, const uint64_t hit[3], const float *lg, double base)
{
	uint64_t h = hit[0] + hit[1] + hit[2];
	size_t nl = (size_t)(1 + DECODE) * (size_t)vocab;
	int same = !ref_logits || !memcmp(lg, ref_logits, nl * sizeof(float));
	mismatches += !same;
	printf("%-22s %10.3f s %9.1fx %9.3f s %8.1fx %8llu %8llu %8llu %8llu   %s\n", what, t,
	       base > 0 ? base / t : 1.0, last_cpu, base > 0 && last_cpu > 0 ? base_cpu / last_cpu
	       : 1.0, (unsigned long long)hit[0], (unsigned long long)hit[1],
	       (unsigned long long)hit[2], (unsigned long long)(n_prompt - h),
	       ref_logits ? (same ? "bitwise equal" : "DIFFERENT") : "(reference)");
	fflush(stdout);
}

/*
 * Keep only the compressed (ALL) pools of the cached prompt: drop its window and carry-state
 * (TAIL) pages, as a branch point looks when L2/L3 keep no TAIL pages. The path is ALL-locked
 * while evicting so that its nodes are tombstoned, not deleted.
 */
static void drop_tail_pages(struct srt_engine *e)
{
	char err[256];
	struct srt_rdx_cache *c = srt_engine_cache(e);
	struct srt_rdx_match m;
	if (srt_rdx_match(c, prompt, n_prompt, &m) ||
	    srt_rdx_lock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err))) {
		fprintf(stderr, "ttft_bench: cannot lock the cached prompt\n");
		exit(1);
	}
	for (uint32_t p = 0; p < srt_rdx_pool_count(c); p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(c, p, &st);
		if (st.retention == SRT_RETAIN_TAIL)
			srt_rdx_evict(c, p, 0, NULL);
	}
	srt_rdx_unlock(c, m.node, SRT_RDX_LOCK_ALL, err, sizeof(err));
}

static void evict_l1(struct srt_engine *e)
{
	struct srt_rdx_cache *c = srt_engine_cache(e);
	for (uint32_t p = 0; p < srt_rdx_pool_count(c); p++)
		srt_rdx_evict(c, p, 0, NULL);
}

static int want(const char *only, const char *name)
{
	if (!only)
		return 1;
	size_t n = strlen(name);
	for (const char *p = only; (p = strstr(p, name)); p += n)
		if ((p == only || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	const char *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: ttft_bench [--model PRESET|DIR] [--prompt N] [--threads N] "
			       "[--only a,b,r,o,c,file,sqlite,redis]\n"
			       "Time to first token of one prompt: computed, L1 hit, branch-point hit "
			       "with the window rematerialized, L2 hit, L3 hit (file, sqlite, redis)\n"
			       "on the executor; (o) two requests, an L3 hit whose load overlaps the "
			       "other's compute, or not.\nLogits of each hit run (last prompt position and %d "
			       "decode steps) are compared\nbitwise with the computed run's; exit "
			       "status 1 if any differs.\n", DECODE);
			return 0;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "ttft_bench: %s needs a value\n", argv[i]);
			return 2;
		}
		if (!strcmp(argv[i], "--model"))
			model = argv[++i];
		else if (!strcmp(argv[i], "--prompt"))
			n_prompt = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--threads"))
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--only"))
			only = argv[++i];
		else {
			fprintf(stderr, "ttft_bench: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	char mdir[4096], exe[4096], err[2048];
	if (!strcmp(model, "small")) {
		/* <build>/bin/ttft_bench -> <build>/models/small, shared with exec_bench */
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		exe[n > 0 ? n : 0] = 0;
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		char cache[4200];
		snprintf(cache, sizeof(cache), "%s/../models", exe);
		if (srt_engine_model_dir("small", cache, 0, mdir, sizeof(mdir), err, sizeof(err))) {
			fprintf(stderr, "ttft_bench: %s\n", err);
			return 1;
		}
		model = mdir;
	}
	char *dir = tu_tmpdir("ttft");
	snprintf(tmp, sizeof(tmp), "%s", dir);
	char ini[4200];
	snprintf(ini, sizeof(ini), "%s/l1.ini", tmp);
	write_ini(ini, NULL, NULL);

	struct srt_engine *e = open_engine(ini, 0);
	vocab = srt_engine_model(e)->vocab_size;
	prompt = malloc(n_prompt * sizeof(int32_t));
	float *lg = malloc((size_t)(1 + DECODE) * (size_t)vocab * sizeof(float));
	ref_logits = NULL;
	float *ref = malloc((size_t)(1 + DECODE) * (size_t)vocab * sizeof(float));
	for (uint64_t i = 0; i < n_prompt; i++)
		prompt[i] = (int32_t)((i * 2654435761u + 12345) % (uint64_t)vocab);
	printf("ttft_bench: model %s, prompt %llu tokens, %d threads, chunk %d\n",
	       srt_engine_model_path(e), (unsigned long long)n_prompt, srt_engine_threads(e),
	       srt_engine_chunk(e));
	printf("%-22s %12s %10s %11s %9s %8s %8s %8s %8s   %s\n", "case", "TTFT", "speedup",
	       "TTFT CPU", "speedup", "L1 hit", "L2 hit", "L3 hit", "computed",
	       "logits vs computed");
	uint64_t hit[3];
	double base = request(e, 0, hit, ref);
	base_cpu = last_cpu;
	row("(a) computed", base, hit, ref, 0);
	ref_logits = ref;
	if (want(only, "b")) {
		double t = request(e, 1, hit, lg);
		row("(b) L1 hit", t, hit, lg, base);
	}
	if (want(only, "r")) {
		drop_tail_pages(e);
		double t = request(e, 1, hit, lg);
		row("(r) remat branch hit", t, hit, lg, base);
		printf("%-22s window rematerialized at %llu: %llu token-layers = %.0f tokens of "
		       "compute (the prefix: %llu)\n", "", (unsigned long long)last_remat,
		       (unsigned long long)last_remat_cost,
		       (double)last_remat_cost / srt_engine_model(e)->num_hidden_layers,
		       (unsigned long long)last_remat);
		if (!last_remat) {
			printf("(r) was not rematerialized (prompt too short for it to pay?)\n");
			mismatches++;
		}
	}
	srt_engine_close(e);

	if (want(only, "o")) {
		/* a file L3 seeded by one engine; every pair runs on a fresh engine (empty L1) */
		char l3[4200];
		snprintf(l3, sizeof(l3), "plugin = file\npath = %s/l3overlap", tmp);
		snprintf(ini, sizeof(ini), "%s/l3-overlap.ini", tmp);
		write_ini(ini, NULL, l3);
		e = open_engine(ini, 1);
		request(e, 0, hit, lg);
		srt_engine_close(e);
		uint64_t ny = n_prompt / 4 + 1;
		int32_t *y = malloc(ny * sizeof(int32_t));
		for (uint64_t i = 0; i < ny; i++)
			y[i] = (int32_t)((i * 40503u + 777) % (uint64_t)vocab);
		double best[2] = {1e30, 1e30}, wsum[2] = {0, 0}, tsum[2] = {0, 0};
		enum { REPS = 3 };
		for (int rep = 0; rep < REPS; rep++)
			for (int ov = 0; ov < 2; ov++) { /* interleaved A/B */
				double w;
				e = open_engine(ini, 1);
				double t = pair(e, y, ny, ov, &w, hit, lg);
				srt_engine_close(e);
				size_t nl = (size_t)(1 + DECODE) * (size_t)vocab;
				if (memcmp(lg, ref_logits, nl * sizeof(float))) {
					printf("(o) pair, overlapped %d: B's logits DIFFERENT\n", ov);
					mismatches++;
				}
				wsum[ov] += w, tsum[ov] += t;
				if (t < best[ov])
					best[ov] = t;
			}
		printf("(o) two requests, fresh engine each: Y computes %llu tokens, B hits %llu "
		       "(L3 file %llu), %d interleaved repeats, wall clock:\n",
		       (unsigned long long)ny, (unsigned long long)(hit[0] + hit[1] + hit[2]),
		       (unsigned long long)hit[2], REPS);
		const char *nm[2] = {"B's load waited at once", "B's load overlaps Y"};
		for (int ov = 0; ov < 2; ov++)
			printf("    %-26s B blocked on its load %8.4f s (mean)   both prompts %8.3f s "
			       "mean, %8.3f s best   B's logits %s\n", nm[ov], wsum[ov] / REPS,
			       tsum[ov] / REPS, best[ov], mismatches ? "see above" : "bitwise equal");
		printf("    load hidden: %.1f%% of B's load time; both prompts %.3fx the serial "
		       "time (mean)\n",
		       wsum[0] > 0 ? 100.0 * (1.0 - wsum[1] / wsum[0]) : 0.0,
		       tsum[0] > 0 ? tsum[1] / tsum[0] : 0.0);
		free(y);
	}

	const char *stores[3] = {"file", "sqlite", "redis"};
	pid_t redis = 0;
	for (int k = 0; k < 3; k++) {
		if (!want(only, stores[k]) && !(k == 0 && want(only, "c")))
			continue;
		int with_l2 = k == 0 && want(only, "c"); /* one compute seeds L2 and the file L3 */
		char l3[4200];
		if (k == 0)
			snprintf(l3, sizeof(l3), "plugin = file\npath = %s/l3file", tmp);
		else if (k == 1)
			snprintf(l3, sizeof(l3), "plugin = sqlite\npath = %s/l3.db", tmp);
		else {
			if (!tu_redis_server()) {
				printf("(d) L3 hit (redis)      skipped: redis-server not installed\n");
				continue;
			}
			int port = tu_free_port();
			redis = tu_redis_start(port);
			if (redis <= 0) {
				printf("(d) L3 hit (redis)      skipped: redis-server did not start\n");
				continue;
			}
			snprintf(l3, sizeof(l3), "plugin = redis\nhost = 127.0.0.1\nport = %d", port);
		}
		snprintf(ini, sizeof(ini), "%s/l2-l3-%s.ini", tmp, stores[k]);
		write_ini(ini, with_l2 ? "plugin = host\nbudget = 8G" : NULL, l3);
		e = open_engine(ini, 1);
		request(e, 0, hit, lg); /* the first engine computes and writes through */
		if (with_l2) {
			evict_l1(e); /* L1 pages leave; their copies stay in L2 */
			double t = request(e, 1, hit, lg);
			row("(c) L2 hit (host)", t, hit, lg, base);
		}
		srt_engine_close(e);
		snprintf(ini, sizeof(ini), "%s/l3-%s.ini", tmp, stores[k]);
		write_ini(ini, NULL, l3);
		if (!want(only, stores[k])) {
			if (redis > 0)
				tu_redis_stop(redis);
			continue;
		}
		e = open_engine(ini, 1); /* a second engine on the same store */
		double t = request(e, 1, hit, lg);
		char what[64];
		snprintf(what, sizeof(what), "(d) L3 hit (%s)", stores[k]);
		row(what, t, hit, lg, base);
		srt_engine_close(e);
		if (redis > 0)
			tu_redis_stop(redis);
		redis = 0;
	}
	tu_rmrf(tmp);
	free(dir);
	free(prompt);
	free(lg);
	free(ref);
	if (mismatches) {
		fprintf(stderr, "ttft_bench: %d run(s) differ from the computed run\n", mismatches);
		return 1;
	}
	return 0;
}
