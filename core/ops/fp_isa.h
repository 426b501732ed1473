/*
 * core/ops/fp_isa.h — internal: the AVX-512 forms behind fp.c's srt_round_bf16_n and quant.c's
 * srt_quant_fp4_fake (fp_avx512.c). The same bits as the scalar loops; called only after
 * cpuid showed AVX-512F and AVX-512BW (srt_gemm_isa_current() >= SRT_GEMM_ISA_AVX512).
 */
#ifndef SRT_OPS_FP_ISA_H
#define SRT_OPS_FP_ISA_H

#include <stddef.h>

/* srt_round_bf16_n */
void srt_round_bf16_avx512(float *x, size_t n);
/* max |x[i]|, NaN if any x[i] is NaN (quant.c's block_amax) */
float srt_amax_avx512(const float *x, size_t n);
/* y[i] := E2M1(x[i] / s) · s, NaN everywhere for a NaN s (srt_quant_fp4_fake's element step) */
void srt_fp4_fake_avx512(const float *x, float *y, size_t n, float s);

#endif /* SRT_OPS_FP_ISA_H */
