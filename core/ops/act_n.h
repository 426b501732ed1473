/*
 * core/ops/act_n.h — internal: array forms of act.h's expf and SiLU, vectorised, same bits.
 *
 * srt_expf_n gives, for every input, the float the C library's expf returns; srt_silu_n
 * gives srt_silu's. On an AVX-512 CPU whose C library is glibc's (2.28 or later: the
 * algorithm act_avx512.c repeats), 16 lanes at a time; on an AVX2 CPU with FMA, 8
 * (act_avx2.c); act.c compares each set with the library on a sample of inputs once and
 * keeps the library loop where it differs, or where the kernel choice (srt_gemm_isa_current,
 * SRT_GEMM_ISA) is below the set. So a caller may replace a loop of
 * expf or srt_silu with these and no result changes. x and y may be the same array.
 * Reentrant; the first call runs the comparison (about a millisecond).
 */
#ifndef SRT_OPS_ACT_N_H
#define SRT_OPS_ACT_N_H

#include <stdbool.h>
#include <stddef.h>

void srt_expf_n(const float *x, float *y, size_t n);
void srt_silu_n(const float *x, float *y, size_t n);

/* Whether srt_expf_n and srt_silu_n take the vector kernels now (tests). */
bool srt_expf_vector(void);

#endif
