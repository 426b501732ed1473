/* Array forms of expf and SiLU with the scalar bits (act_n.h). */
#include "ops/act_n.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "ops/act.h"
#include "ops/gemm.h"

#if defined(SRT_OPS_X86)
#include "ops/act_isa.h"

/* 2^(i/32) with i << 47 off its bits (act_avx512.c) */
static double exp_tab[32];
/* the 16- and 8-lane kernels gave the library's bits on the sample */
static bool same512, same2;
static pthread_once_t once = PTHREAD_ONCE_INIT;

typedef void (*act_fn)(const float *x, float *y, size_t n, const double *tab);

/* A sample of both signs below the library lanes' threshold and past it: 68,608 floats of
 * magnitude below 2^7 (about every 2^14-th, odd ones negated), for both functions. */
static bool sample_same(act_fn ex, act_fn si)
{
	enum { NS = 512 };
	float x[NS], y[NS], s[NS];
	bool same = true;
	for (uint32_t base = 0; same && base < 0x43000000u; base += NS << 14) {
		for (uint32_t i = 0; i < NS; i++) {
			const uint32_t b = (base + (i << 14) + i * 7u) ^ (i & 1u ? 0x80000000u : 0u);
			memcpy(&x[i], &b, sizeof b);
		}
		ex(x, y, NS, exp_tab);
		si(x, s, NS, exp_tab);
		for (size_t i = 0; i < NS; i++) {
			const float e = expf(x[i]), v = srt_silu(x[i]);
			same &= memcmp(&e, &y[i], sizeof e) == 0 && memcmp(&v, &s[i], sizeof v) == 0;
		}
	}
	return same;
}

static void check_once(void)
{
	for (int i = 0; i < 32; i++) {
		const double v = exp2(i / 32.0);
		uint64_t u;
		memcpy(&u, &v, sizeof u);
		u -= (uint64_t)i << 47;
		memcpy(&exp_tab[i], &u, sizeof u);
	}
	const enum srt_gemm_isa best = srt_gemm_isa_best();
	if (best >= SRT_GEMM_ISA_AVX512)
		same512 = sample_same(srt_expf_avx512, srt_silu_avx512);
	__builtin_cpu_init();
	if (best >= SRT_GEMM_ISA_AVX2 && __builtin_cpu_supports("fma"))
		same2 = sample_same(srt_expf_avx2, srt_silu_avx2);
}

/* The checked kernels of the kernel set in use: 2 (16 lanes), 1 (8 lanes) or 0 (none). */
static int vec_kind(void)
{
	pthread_once(&once, check_once);
	const enum srt_gemm_isa isa = srt_gemm_isa_current();
	return isa >= SRT_GEMM_ISA_AVX512 && same512 ? 2 : isa >= SRT_GEMM_ISA_AVX2 && same2 ? 1 : 0;
}

bool srt_expf_vector(void)
{
	return vec_kind() != 0;
}
#else
bool srt_expf_vector(void)
{
	return false;
}
#endif

void srt_expf_n(const float *x, float *y, size_t n)
{
#if defined(SRT_OPS_X86)
	const int k = vec_kind();
	if (k) {
		(k == 2 ? srt_expf_avx512 : srt_expf_avx2)(x, y, n, exp_tab);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		y[i] = expf(x[i]);
}

void srt_silu_n(const float *x, float *y, size_t n)
{
#if defined(SRT_OPS_X86)
	const int k = vec_kind();
	if (k) {
		(k == 2 ? srt_silu_avx512 : srt_silu_avx2)(x, y, n, exp_tab);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		y[i] = srt_silu(x[i]);
}
