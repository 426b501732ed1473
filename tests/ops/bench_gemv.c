/*
 * bench_gemv — GEMV/GEMM throughput of srt_ops against this machine's memory bandwidth,
 * measured in the same run. Not a test: prints figures.
 *
 *   build-x/bin/srt_bench_gemv [N K reps [big_MiB]]     (default 4096 4096 20 1024)
 *   SRT_BENCH_CLOCK=cpu   time 1-thread figures by thread CPU time (shared, busy machines)
 *   SRT_GEMM_ISA=avx2     measure only the kernel sets up to this one
 *
 * Bandwidth baselines, each timed `reps` times (best and median printed):
 *  - read: a sum-reduction over a buffer (64-bit integer adds, 8 independent accumulators,
 *    load-bound), by 1 thread and by 2 threads (each half),
 *    at the size of each weight matrix (same cache level as the GEMV) and at big_MiB (DRAM);
 *  - memcpy of a buffer the size of the FP8 weights (read + write counted, 2x bytes).
 * Then for each kernel set this CPU has (generic, avx2, avx512) and each weight type, M = 1
 * (decode): weight bytes streamed per second (data + scales; best and median of reps) on 1
 * thread, with its ratio to the 1-thread read bandwidth at that size and to memcpy, and on 2
 * threads (each half of the output features), with its ratio to the 2-thread read; and the
 * GFLOP/s of prefill-shaped M = 8 and 32 on 1 thread (weights reused across rows).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/fp.h"
#include "ops/gemm.h"
#include "ops/quant.h"

#define MAXREPS 1000

/* Clock of the 1-thread timings: wall time, or with SRT_BENCH_CLOCK=cpu this thread's CPU
 * time (robust when other processes share the cores; still sensitive to shared caches and
 * memory). 2-thread timings always use wall time (now2). */
static clockid_t clk1 = CLOCK_MONOTONIC;

static double now(void)
{
	struct timespec ts;
	clock_gettime(clk1, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now2(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* best (min) and median of n times */
static void stats(double *t, int n, double *best, double *med)
{
	qsort(t, (size_t)n, sizeof *t, cmp_d);
	*best = t[0];
	*med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

struct rd {
	const uint64_t *p;
	size_t n; /* 64-bit words, a multiple of 8 */
	uint64_t sum;
};

/* Integer sum over the buffer with 8 independent accumulators: one add per 8 bytes loaded,
 * no dependency chain through memory, so the loop is bound by the loads. */
static void *read_sum(void *arg)
{
	struct rd *r = arg;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
	for (size_t i = 0; i < r->n; i += 8) {
		s0 += r->p[i];
		s1 += r->p[i + 1];
		s2 += r->p[i + 2];
		s3 += r->p[i + 3];
		s4 += r->p[i + 4];
		s5 += r->p[i + 5];
		s6 += r->p[i + 6];
		s7 += r->p[i + 7];
	}
	r->sum = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
	return NULL;
}

/* Read bandwidth (GB/s, best and median) of `bytes` with 1 or 2 threads. */
static void read_bw(const void *buf, size_t bytes, int threads, int reps, double *best,
		    double *med, uint64_t *sink)
{
	double t[MAXREPS];
	const size_t n = bytes / 64 * 8, half = n / 16 * 8;
	for (int r = 0; r < reps; r++) {
		struct rd a[2] = {{buf, n, 0}, {(const uint64_t *)buf + half, n - half, 0}};
		pthread_t th;
		int two = threads == 2;
		double t0 = two ? now2() : now();
		if (two && pthread_create(&th, NULL, read_sum, &a[1]) == 0) {
			a[0].n = half;
			read_sum(&a[0]);
			pthread_join(th, NULL);
		} else {
			a[1].sum = 0;
			read_sum(&a[0]);
		}
		t[r] = (two ? now2() : now()) - t0;
		*sink += a[0].sum + a[1].sum;
	}
	double b, m;
	stats(t, reps, &b, &m);
	*best = (double)n * 8 / b / 1e9;
	*med = (double)n * 8 / m / 1e9;
}

struct gv {
	const struct srt_weight *w;
	const float *x;
	float *y;
	size_t n0, n1;
	int mode;
};

static void *gemv_part(void *arg)
{
	struct gv *g = arg;
	srt_gemm(g->w, g->x, 1, g->w->cols, g->y, g->w->rows, g->n0, g->n1, g->mode);
	return NULL;
}

/* M = 1 on 2 threads, each half of the output features (a decode step's split). */
static void gemv_2t(const struct srt_weight *w, const float *x, float *y, int mode)
{
	const size_t h = w->rows / 16 * 8;
	struct gv a = {w, x, y, 0, h, mode}, b = {w, x, y, h, w->rows, mode};
	pthread_t th;
	if (pthread_create(&th, NULL, gemv_part, &b) != 0) {
		a.n1 = w->rows;
		gemv_part(&a);
		return;
	}
	gemv_part(&a);
	pthread_join(th, NULL);
}

int main(int argc, char **argv)
{
	size_t N = argc > 1 ? strtoul(argv[1], NULL, 10) : 4096;
	size_t K = argc > 2 ? strtoul(argv[2], NULL, 10) : 4096;
	int reps = argc > 3 ? atoi(argv[3]) : 20;
	size_t big = (argc > 4 ? strtoul(argv[4], NULL, 10) : 1024) << 20;
	if (N == 0 || K == 0 || K % 128 || reps <= 0 || reps > MAXREPS || big == 0) {
		fprintf(stderr, "usage: %s [N K reps [big_MiB]]  (K a multiple of 128, reps <= %d)\n",
			argv[0], MAXREPS);
		return 2;
	}
	const char *ck = getenv("SRT_BENCH_CLOCK");
	if (ck && strcmp(ck, "cpu") == 0)
		clk1 = CLOCK_THREAD_CPUTIME_ID;
	const size_t MMAX = 32;
	size_t rbytes = big > N * K * 4 ? big : N * K * 4;
	float *src = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * K * MMAX);
	float *y = malloc(sizeof(float) * N * MMAX), *rbuf = malloc(rbytes);
	char *a = malloc(N * K), *b = malloc(N * K);
	if (!src || !x || !y || !rbuf || !a || !b) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < N * K; i++)
		src[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	for (size_t k = 0; k < K * MMAX; k++)
		x[k] = (float)(k % 17) - 8.0f;
	for (size_t i = 0; i < rbytes / sizeof(float); i++)
		rbuf[i] = (float)(i & 7);
	uint64_t sink = 0;
	double t[MAXREPS], bb, bm;

	printf("srt_bench_gemv N=%zu K=%zu reps=%d; figures are best / median of the reps; 1-thread"
	       " clock: %s\n", N, K, reps, clk1 == CLOCK_MONOTONIC ? "wall" : "thread CPU time");
	double rd1, rd1m, rd2, rd2m;
	read_bw(rbuf, big, 1, reps < 5 ? reps : 5, &rd1, &rd1m, &sink);
	read_bw(rbuf, big, 2, reps < 5 ? reps : 5, &rd2, &rd2m, &sink);
	printf("read bandwidth, %zu MiB buffer: 1 thread %.2f / %.2f GB/s, 2 threads %.2f / %.2f GB/s\n",
	       big >> 20, rd1, rd1m, rd2, rd2m);
	memset(a, 1, N * K);
	memset(b, 2, N * K);
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		memcpy(b, a, N * K);
		t[r] = now() - t0;
	}
	stats(t, reps, &bb, &bm);
	const double cpy = 2.0 * (double)(N * K) / bb / 1e9;
	printf("memcpy bandwidth, %zu MiB: %.2f / %.2f GB/s (read+write)\n", (N * K) >> 20, cpy,
	       2.0 * (double)(N * K) / bm / 1e9);

	static const char *names[] = {"f32", "bf16", "fp8", "fp4"};
	const enum srt_gemm_isa best_isa = srt_gemm_isa_best();
	for (int type = 0; type < 4; type++) {
		size_t db = srt_weight_data_bytes(type, N, K), sb = srt_weight_scale_bytes(type, N, K);
		void *data = malloc(db);
		uint8_t *scales = malloc(sb + 1);
		if (!data || !scales) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
		if (type == SRT_WT_F32)
			memcpy(data, src, db);
		else if (type == SRT_WT_BF16)
			srt_f32_to_bf16_n(src, data, N * K);
		else if (type == SRT_WT_FP8)
			srt_quant_weight_fp8(src, N, K, data, scales);
		else
			srt_quant_weight_fp4(src, N, K, data, scales);
		struct srt_weight w = {type, N, K, data, type >= SRT_WT_FP8 ? scales : NULL};
		double r1, r1m, r2, r2m;
		read_bw(rbuf, db + sb, 1, reps, &r1, &r1m, &sink);
		read_bw(rbuf, db + sb, 2, reps, &r2, &r2m, &sink);
		printf("\n%s weights, %.1f MiB: read bandwidth at this size 1T %.2f GB/s, 2T %.2f GB/s (best)\n",
		       names[type], (double)(db + sb) / 1048576.0, r1, r2);
		for (int isa = SRT_GEMM_ISA_GENERIC; isa <= (int)best_isa; isa++) {
			srt_gemm_set_isa((enum srt_gemm_isa)isa);
			for (int mode = 0; mode < 2; mode++) {
				if (mode == 1 && type < SRT_WT_FP8)
					continue;
				for (int r = 0; r < reps; r++) {
					double t0 = now();
					srt_gemm(&w, x, 1, K, y, N, 0, N, mode);
					t[r] = now() - t0;
				}
				stats(t, reps, &bb, &bm);
				double gbs = (double)(db + sb) / bb / 1e9, gbm = (double)(db + sb) / bm / 1e9;
				for (int r = 0; r < reps; r++) {
					double t0 = now2();
					gemv_2t(&w, x, y, mode);
					t[r] = now2() - t0;
				}
				stats(t, reps, &bb, &bm);
				double g2 = (double)(db + sb) / bb / 1e9, g2m = (double)(db + sb) / bm / 1e9;
				double gf[2];
				const size_t ms[2] = {8, MMAX};
				for (int mi = 0; mi < 2; mi++) {
					int rr = reps < 3 ? reps : 3;
					for (int r = 0; r < rr; r++) {
						double t0 = now();
						srt_gemm(&w, x, ms[mi], K, y, N, 0, N, mode);
						t[r] = now() - t0;
					}
					stats(t, rr, &bb, &bm);
					gf[mi] = 2.0 * (double)N * (double)K * (double)ms[mi] / bb / 1e9;
				}
				printf("  %-7s %-9s M=1 1T: %6.2f / %6.2f GB/s = %.2fx read-1T %.2fx memcpy;"
				       " 2T: %6.2f / %6.2f GB/s = %.2fx read-2T | M=8 %5.1f, M=32 %5.1f GFLOP/s\n",
				       srt_gemm_isa_name((enum srt_gemm_isa)isa), mode ? "reference" : "exact",
				       gbs, gbm, gbs / r1, gbs / cpy, g2, g2m, g2 / r2, gf[0], gf[1]);
			}
		}
		srt_gemm_set_isa(best_isa);
		free(data);
		free(scales);
	}
	free(a);
	free(b);
	free(src);
	free(x);
	free(y);
	free(rbuf);
	return sink == 12345u; /* keeps the reductions alive */
}
