/*
 * bench_gemv — decode-shaped GEMV throughput of srt_ops against this machine's memory
 * bandwidth, measured in the same run. Not a test: prints figures.
 *
 *   build-x/bin/srt_bench_gemv [N K reps]     (default 4096 4096 20)
 *
 * For each weight type it reports GB/s of weight bytes streamed (data + scales) and the ratio
 * to a memcpy of a buffer of the same size (read + write counted as 2x bytes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/fp.h"
#include "ops/gemm.h"
#include "ops/quant.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	size_t N = argc > 1 ? strtoul(argv[1], NULL, 10) : 4096;
	size_t K = argc > 2 ? strtoul(argv[2], NULL, 10) : 4096;
	int reps = argc > 3 ? atoi(argv[3]) : 20;
	if (N == 0 || K == 0 || K % 128 || reps <= 0) {
		fprintf(stderr, "usage: %s [N K reps]  (K a multiple of 128)\n", argv[0]);
		return 2;
	}
	float *src = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * K);
	float *y = malloc(sizeof(float) * N);
	if (!src || !x || !y)
		return 1;
	for (size_t i = 0; i < N * K; i++)
		src[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	for (size_t k = 0; k < K; k++)
		x[k] = (float)(k % 17) - 8.0f;

	/* memory bandwidth baseline: memcpy of the FP8 weight size, best of reps */
	size_t mb = N * K;
	char *a = malloc(mb), *b = malloc(mb);
	memset(a, 1, mb);
	memset(b, 2, mb);
	double best = 1e9;
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		memcpy(b, a, mb);
		double t = now() - t0;
		best = t < best ? t : best;
	}
	double bw = 2.0 * (double)mb / best / 1e9;
	printf("memcpy bandwidth: %.2f GB/s (read+write, %zu MiB)\n", bw, mb >> 20);

	static const char *names[] = {"f32", "bf16", "fp8", "fp4"};
	for (int type = 0; type < 4; type++) {
		size_t db = srt_weight_data_bytes(type, N, K), sb = srt_weight_scale_bytes(type, N, K);
		void *data = malloc(db);
		uint8_t *scales = malloc(sb + 1);
		if (type == SRT_WT_F32)
			memcpy(data, src, db);
		else if (type == SRT_WT_BF16)
			srt_f32_to_bf16_n(src, data, N * K);
		else if (type == SRT_WT_FP8)
			srt_quant_weight_fp8(src, N, K, data, scales);
		else
			srt_quant_weight_fp4(src, N, K, data, scales);
		struct srt_weight w = {type, N, K, data, type >= SRT_WT_FP8 ? scales : NULL};
		for (int mode = 0; mode < 2; mode++) {
			if (mode == 1 && type < SRT_WT_FP8)
				continue;
			double bt = 1e9;
			for (int r = 0; r < reps; r++) {
				double t0 = now();
				srt_gemm(&w, x, 1, K, y, N, 0, N, mode);
				double t = now() - t0;
				bt = t < bt ? t : bt;
			}
			double gbs = (double)(db + sb) / bt / 1e9;
			printf("%-4s %-9s N=%zu K=%zu: %8.3f ms  %6.2f GB/s weights  %.2fx memcpy  %.2f GFLOP/s\n",
			       names[type], mode ? "reference" : "exact", N, K, bt * 1e3, gbs, gbs / bw,
			       2.0 * (double)N * (double)K / bt / 1e9);
		}
		free(data);
		free(scales);
	}
	free(a);
	free(b);
	free(src);
	free(x);
	free(y);
	return 0;
}
