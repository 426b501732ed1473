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

#include "ops/fp.h"
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

/* s[q][t] = the UE8M0 scale of output feature n + t (t < 8) for K block b, as a float:
 * FP8 one per 128x128 block (q = 0), FP4 one per 32-wide sub-block q < 4 (gemm.c's order of
 * the reference's C += acc·sa·sb). Portable C, for the tile kernels' vector epilogues. */
static inline void srt_gemm_tile8_scales(const struct srt_weight *w, size_t n, size_t b,
					 float s[4][8])
{
	const size_t K = w->cols, nb = (K + 127) / 128;
	for (size_t t = 0; t < 8; t++) {
		if (w->type == SRT_WT_FP8) {
			s[0][t] = srt_e8m0_to_f32(w->scales[((n + t) / 128) * nb + b]);
		} else {
			const uint8_t *sc = w->scales + (n + t) * (K / 32) + b * 4;
			for (int q = 0; q < 4; q++)
				s[q][t] = srt_e8m0_to_f32(sc[q]);
		}
	}
}

/* Byte pos (< 64) of a SRT_WT_FP8_PAIRED group (gemm.h) holds byte srt_fp8_pair_src(pos) of
 * [the pair's first row's 32 codes | the second row's 32]. */
static inline unsigned srt_fp8_pair_src(unsigned pos)
{
	const unsigned l = pos / 16, u = (pos / 8) % 2, w = pos % 8;
	return 32u * (l / 2) + 16u * u + 4u * (l % 2) + w / 2 + (w % 2 ? 0u : 8u);
}

/* True when the CPU has AVX512_BF16, AVX512_VBMI and AVX512VL and VDPBF16PS rounds as the
 * SDM says (a known-answer test, run once; gemm_avx512_bf16.c). Thread-safe, cached. Call
 * only after cpuid showed AVX-512F. */
bool srt_gemm_bf16dp_usable(void);

/* M = 1, REFERENCE mode, FP8 (also SRT_WT_FP8_PAIRED from an even n0) or FP4 weights: rows
 * [n0, n0 + 8·ntiles) by AVX512_BF16 dot
 * products (gemm_avx512_bf16.c). False, touching nothing, unless the CPU has AVX512_BF16 and
 * AVX512_VBMI with the SDM's rounding, K % 128 == 0, K <= 8192 and every activation block
 * passes x_exact_products. */
bool srt_gemv_ref_avx512bf16(const struct srt_weight *w, const float *xq, const float *xs,
			     float *y, size_t n0, size_t ntiles);

/* 1 <= M <= 7, EXACT mode, bf16 weights, activations that are bf16 values: rows [n0, n0 +
 * 8·ntiles) by AVX512_BF16 dot products (gemm_avx512_bf16.c), same bits as the float kernels.
 * SIZE_MAX, touching nothing, unless the CPU has AVX512_BF16 with the SDM's rounding, K % 128
 * == 0, K <= 8192 and every activation is a bf16 value of magnitude 2^-56 .. 2^56 or zero.
 * Else the number of tiles done, in order: fewer than ntiles when the next tile holds a
 * weight outside that range (its y untouched; the caller computes it and goes on). */
size_t srt_gemv_bf16_avx512bf16(const struct srt_weight *w, const float *x, size_t m, size_t ldx,
				float *y, size_t ldy, size_t n0, size_t ntiles);

/* M >= 8 (SRT_WT_FP8_PAIRED: M >= 2, n0 even), REFERENCE mode, FP8 or FP4 weights:
 * gemm_tile_avx512.c's transposed kernel by
 * AVX512_BF16 dot products (gemm_tile_avx512_bf16.c), features [n0, n1), n1 - n0 a multiple
 * of 16. False, touching nothing, unless the CPU has AVX512_BF16, AVX512_VBMI and AVX512VL
 * with the SDM's rounding, K % 128 == 0 and K <= 16384. Blocks failing x_exact_products use
 * float multiply-then-add inside (same bits). */
bool srt_gemmt_ref_avx512bf16(const struct srt_weight *w, const float *xq, const float *xs,
			      size_t m, size_t ldx, float *y, size_t ldy, size_t n0, size_t n1);

/* One 128 block of srt_gemm_quant_row (same floats); false for a block with NaN or inf. */
bool srt_gemm_quant_blk_avx512(const float *x, float *xq, float *xs);
bool srt_gemm_quant_blk_avx2(const float *x, float *xq, float *xs);

/*
 * Defines `static bool name(w, ref, x, xs, m, ldx, y, ldy, n0, n1)` that calls a kernel
 * file's always-inline driver run(w, type, ref, x, xs, m, ldx, y, ldy, n0, n1) with the
 * weight type and the mode as compile-time constants (one instantiation per type and mode,
 * no switch in the loops); false, touching nothing, for a type it does not know. One
 * dispatch shared by the kernel files instead of a copy of this switch in each.
 */
#define SRT_GEMM_RUN_BY_TYPE_1(run, T, ref, x, xs, m, ldx, y, ldy, n0, n1)                 \
	case T:                                                                             \
		if (ref)                                                                    \
			run(w, T, true, x, xs, m, ldx, y, ldy, n0, n1);                     \
		else                                                                        \
			run(w, T, false, x, xs, m, ldx, y, ldy, n0, n1);                    \
		return true;
#define SRT_GEMM_DEFINE_RUN_BY_TYPE(name, run)                                              \
	static bool name(const struct srt_weight *w, bool ref, const float *x, const float *xs, \
			 size_t m, size_t ldx, float *y, size_t ldy, size_t n0, size_t n1)      \
	{                                                                                       \
		switch (w->type) {                                                              \
			SRT_GEMM_RUN_BY_TYPE_1(run, SRT_WT_F32, ref, x, xs, m, ldx, y, ldy, n0, n1)  \
			SRT_GEMM_RUN_BY_TYPE_1(run, SRT_WT_BF16, ref, x, xs, m, ldx, y, ldy, n0, n1) \
			SRT_GEMM_RUN_BY_TYPE_1(run, SRT_WT_FP8, ref, x, xs, m, ldx, y, ldy, n0, n1)  \
			SRT_GEMM_RUN_BY_TYPE_1(run, SRT_WT_FP4, ref, x, xs, m, ldx, y, ldy, n0, n1)  \
		case SRT_WT_FP8_PAIRED: /* gemm.c's gemm_paired */                              \
			break;                                                                  \
		}                                                                               \
		return false;                                                                   \
	}

#endif /* SRT_OPS_GEMM_ISA_H */
