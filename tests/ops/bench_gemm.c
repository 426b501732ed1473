/*
 * bench_gemm — prefill-shaped (M > 1) GEMM throughput of srt_ops, 1 thread, by this thread's
 * CPU time (robust on a shared machine). Not a test: prints figures.
 *
 *   build/bin/srt_bench_gemm [reps]        (default 5; best and median of reps)
 *   SRT_GEMM_ISA=generic|avx2|avx512        kernel set to measure (default: the best)
 *
 * Links the SDK library (libshadowrt-ops.so.1), so the same binary measures another build's
 * kernels with LD_LIBRARY_PATH=<that build>/lib: an A/B of two builds in one run.
 * Shapes are those of the `small` preset's prefill: FP8 attention projections (REFERENCE),
 * FP4 routed experts with ~48 rows per expert (REFERENCE), bf16 projections (EXACT).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/fp.h"
#include "ops/gemm.h"
#include "ops/quant.h"

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct shape {
	const char *name;
	enum srt_wtype type;
	enum srt_gemm_mode mode;
	size_t m, n, k;
};

int main(int argc, char **argv)
{
	int reps = 5;
	if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: srt_bench_gemm [reps]\nM > 1 GEMM GFLOP/s by thread CPU time, best / "
		       "median of reps (default 5); SRT_GEMM_ISA picks the kernel set.\n");
		return 0;
	}
	if (argc > 1) {
		char *end;
		long r = strtol(argv[1], &end, 10);
		if (*end || r < 1 || r > 1000) {
			fprintf(stderr, "srt_bench_gemm: reps '%s' must be an integer in [1, 1000]\n",
				argv[1]);
			return 2;
		}
		reps = (int)r;
	}
	static const struct shape shapes[] = {
		{"fp8 ref  wq_b-like", SRT_WT_FP8, SRT_GEMM_REFERENCE, 256, 2048, 512},
		{"fp8 ref  wo-like  ", SRT_WT_FP8, SRT_GEMM_REFERENCE, 256, 1024, 1024},
		{"fp8 ref  shared   ", SRT_WT_FP8, SRT_GEMM_REFERENCE, 256, 512, 1024},
		{"fp4 ref  expert up", SRT_WT_FP4, SRT_GEMM_REFERENCE, 48, 512, 1024},
		{"fp4 ref  expert dn", SRT_WT_FP4, SRT_GEMM_REFERENCE, 48, 1024, 512},
		{"bf16 ex  proj     ", SRT_WT_BF16, SRT_GEMM_EXACT, 256, 512, 1024},
		{"fp8 ex   proj     ", SRT_WT_FP8, SRT_GEMM_EXACT, 256, 1024, 1024},
		{"fp4 ex   expert up", SRT_WT_FP4, SRT_GEMM_EXACT, 48, 512, 1024},
	};
	printf("kernel set %s, 1 thread, thread CPU time, %d reps\n",
	       srt_gemm_isa_name(srt_gemm_isa_current()), reps);
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const struct shape *s = &shapes[si];
		const size_t M = s->m, N = s->n, K = s->k;
		float *src = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * M * K);
		float *xq = malloc(sizeof(float) * M * K), *xs = malloc(sizeof(float) * M * (K / 128));
		float *y = malloc(sizeof(float) * M * N);
		void *data = malloc(srt_weight_data_bytes(s->type, N, K));
		uint8_t *scales = malloc(srt_weight_scale_bytes(s->type, N, K) + 1);
		if (!src || !x || !xq || !xs || !y || !data || !scales) {
			fprintf(stderr, "srt_bench_gemm: out of memory for shape %s\n", s->name);
			return 1;
		}
		for (size_t i = 0; i < N * K; i++)
			src[i] = frand() * 0.2f;
		for (size_t i = 0; i < M * K; i++)
			x[i] = frand() * 4.0f;
		switch (s->type) {
		case SRT_WT_BF16:
			srt_f32_to_bf16_n(src, data, N * K);
			break;
		case SRT_WT_FP8:
			srt_quant_weight_fp8(src, N, K, data, scales);
			break;
		case SRT_WT_FP4:
			srt_quant_weight_fp4(src, N, K, data, scales);
			break;
		default:
			memcpy(data, src, sizeof(float) * N * K);
		}
		const struct srt_weight w = {s->type, N, K, data,
					     s->type >= SRT_WT_FP8 ? scales : NULL};
		for (size_t i = 0; i < M; i++)
			srt_gemm_quant_row(x + i * K, K, xq + i * K, xs + i * (K / 128));
		double t[1000];
		for (int r = 0; r < reps; r++) {
			const double t0 = cpu_now();
			if (s->mode == SRT_GEMM_REFERENCE)
				srt_gemm_ref(&w, xq, xs, M, K, y, N, 0, N);
			else
				srt_gemm_exact(&w, x, M, K, y, N, 0, N);
			t[r] = cpu_now() - t0;
		}
		qsort(t, (size_t)reps, sizeof(double), cmp_d);
		const double flop = 2.0 * (double)M * (double)N * (double)K;
		uint32_t h = 0;
		for (size_t i = 0; i < M * N; i++) {
			uint32_t u;
			memcpy(&u, &y[i], 4);
			h = h * 31u + u;
		}
		printf("%s M %4zu N %5zu K %5zu: %6.1f / %6.1f GFLOP/s  (y hash %08x)\n", s->name, M, N,
		       K, flop / t[0] * 1e-9, flop / t[reps / 2] * 1e-9, h);
		free(src);
		free(x);
		free(xq);
		free(xs);
		free(y);
		free(data);
		free(scales);
	}
	return 0;
}
