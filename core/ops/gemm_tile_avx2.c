/*
 * core/ops/gemm_tile_avx2.c — the M > 1 (prefill) GEMM kernel for x86-64 AVX2 + F16C
 * (compiled like gemm_avx2.c, never -mfma). Not written yet: returns false, so gemm.c runs
 * srt_gemmk_avx2.
 */
#include "ops/gemm_isa.h"

bool srt_gemmt_avx2(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)
{
	(void)w, (void)x, (void)xs, (void)m, (void)ldx, (void)y, (void)ldy, (void)n0, (void)n1;
	return false;
}
