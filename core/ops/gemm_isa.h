/*
 * core/ops/gemm_isa.h — internal: the ISA-specific GEMM kernels behind gemm.c's dispatch.
 *
 * Each kernel computes srt_gemm_exact (xs == NULL) or srt_gemm_ref (xs != NULL) with the
 * arguments already checked by gemm.c, and produces the same bits as the portable code. It
 * returns false, touching nothing, for a shape it does not handle (the caller then runs the
 * portable code). Kernels are compiled with ISA flags (gemm_avx2.c, gemm_avx512.c) and may
 * only be called after gemm.c has checked the CPU supports them. Reentrant.
 */
#ifndef SRT_OPS_GEMM_ISA_H
#define SRT_OPS_GEMM_ISA_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/gemm.h"

typedef bool (*srt_gemmk_fn)(const struct srt_weight *w, const float *x, const float *xs,
			     size_t m, size_t ldx, float *y, size_t ldy, size_t n0, size_t n1);

bool srt_gemmk_avx2(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1);
bool srt_gemmk_avx512(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		      size_t ldx, float *y, size_t ldy, size_t n0, size_t n1);

/* M >= 2 (prefill) on AVX-512: register-blocked rows against decoded weight tiles
 * (gemm_tile_avx512.c). Same contract; false for M < 2, fewer than 8 output features or
 * f32/bf16 K % 8 != 0. */
bool srt_gemmt_avx512(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		      size_t ldx, float *y, size_t ldy, size_t n0, size_t n1);

/* M >= 2 (prefill) on AVX2 + F16C (FMA only where the CPU has it, checked inside):
 * register-blocked rows against decoded weight tiles (gemm_tile_avx2.c). Same contract;
 * false for a shape it does not handle (the caller then runs srt_gemmk_avx2). */
bool srt_gemmt_avx2(const struct srt_weight *w, const float *x, const float *xs, size_t m,
		    size_t ldx, float *y, size_t ldy, size_t n0, size_t n1);

/* True when the CPU has AVX512_BF16, AVX512_VBMI and AVX512VL and VDPBF16PS rounds as the
 * SDM says (a known-answer test, run once; gemm_avx512_bf16.c). Thread-safe, cached. Call
 * only after cpuid showed AVX-512F. */
bool srt_gemm_bf16dp_usable(void);

/* M = 1, REFERENCE mode, FP8 or FP4 weights: rows [n0, n0 + 8·ntiles) by AVX512_BF16 dot
 * products (gemm_avx512_bf16.c). False, touching nothing, unless the CPU has AVX512_BF16 and
 * AVX512_VBMI with the SDM's rounding, K % 128 == 0, K <= 8192 and every activation block
 * passes x_exact_products. */
bool srt_gemv_ref_avx512bf16(const struct srt_weight *w, const float *xq, const float *xs,
			     float *y, size_t n0, size_t ntiles);

/* M >= 8, REFERENCE mode, FP8 or FP4 weights: gemm_tile_avx512.c's transposed kernel by
 * AVX512_BF16 dot products (gemm_tile_avx512_bf16.c), features [n0, n1), n1 - n0 a multiple
 * of 16. False, touching nothing, unless the CPU has AVX512_BF16, AVX512_VBMI and AVX512VL
 * with the SDM's rounding, K % 128 == 0 and K <= 16384. Blocks failing x_exact_products use
 * float multiply-then-add inside (same bits). */
bool srt_gemmt_ref_avx512bf16(const struct srt_weight *w, const float *xq, const float *xs,
			      size_t m, size_t ldx, float *y, size_t ldy, size_t n0, size_t n1);

/* One 128 block of srt_gemm_quant_row (same floats); false for a block with NaN or inf. */
bool srt_gemm_quant_blk_avx512(const float *x, float *xq, float *xs);
bool srt_gemm_quant_blk_avx2(const float *x, float *xq, float *xs);

#endif /* SRT_OPS_GEMM_ISA_H */
