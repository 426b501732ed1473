/*
 * core/ops/act_isa.h — internal: the vector forms behind act.c's srt_expf_n and srt_silu_n.
 *
 * tab: the 32 table entries act.c computes. Same results as the portable loops (checked by
 * act.c before their first use); the _avx512 forms called only after cpuid showed AVX-512F,
 * the _avx2 forms (8 lanes, act_avx2.c) after it showed AVX2 and FMA.
 */
#ifndef SRT_OPS_ACT_ISA_H
#define SRT_OPS_ACT_ISA_H

#include <stddef.h>

void srt_expf_avx512(const float *x, float *y, size_t n, const double *tab);
void srt_silu_avx512(const float *x, float *y, size_t n, const double *tab);
void srt_expf_avx2(const float *x, float *y, size_t n, const double *tab);
void srt_silu_avx2(const float *x, float *y, size_t n, const double *tab);

#endif
