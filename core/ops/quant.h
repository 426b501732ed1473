/*
 * core/ops/quant.h — the quantizers of spec §7 (activation, KV and indexer fake-quant) and the
 * weight quantizers used by the synthetic-checkpoint generator.
 *
 * Rounding rules (checked against DeepSeek's inference/kernel.py):
 *  - FP8 activations, per block of B channels (B = 128 for GEMM inputs, 64 for KV):
 *      amax  = max(max|x|, 1e-4)
 *      scale = amax / 448, then (pow2 mode, the `scale_fmt = "ue8m0"` of the checkpoints)
 *              rounded UP to a power of two by srt_pow2_ceil
 *      q     = clamp(x / scale, -448, 448) computed in float32, cast to E4M3 (round to nearest
 *              even; the clamp makes it the saturating cast)
 *      fake-quant output = q_value * scale (exact in float32 for power-of-two scales)
 *  - FP4 (indexer q/k, E2M1), per block of 32:
 *      amax  = max(max|x|, 6 * 2^-126); scale = srt_pow2_ceil(amax / 6)
 *      q     = clamp(x / scale, -6, 6) cast to E2M1 (round to nearest even)
 *  - Weights: FP8 E4M3 with one UE8M0 scale per 128x128 block, FP4 E2M1 with one UE8M0 scale
 *    per 32 along K; scale = pow2_ceil(amax / max_code) with the same amax floors, so every
 *    weight fits without clipping and dequantizes as code_value * 2^(e-127).
 *
 * Inputs are float32 arrays; the reference's inputs are bf16 tensors, so a caller that follows
 * the reference passes bf16-rounded values (srt_round_bf16). Fake-quant outputs with
 * power-of-two scales are exactly representable in bf16, so no further rounding is needed.
 * Block sizes must divide n (asserted: a programmer error). NaN inputs propagate as NaN.
 * All functions are pure, thread-safe and allocate nothing; `x` and `y` may alias in the
 * fake-quant forms.
 */
#ifndef SRT_OPS_QUANT_H
#define SRT_OPS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRT_QUANT_ACT_BLOCK 128   /* activation block along K for FP8/FP4 GEMMs */
#define SRT_QUANT_KV_BLOCK 64     /* FP8 fake-quant block of the KV nope dims */
#define SRT_QUANT_FP4_BLOCK 32    /* FP4 block (indexer fake-quant, expert weights along K) */
#define SRT_QUANT_W_BLOCK 128     /* FP8 weight block (128 x 128) */
#define SRT_QUANT_FP8_AMAX_FLOOR 1e-4f
#define SRT_QUANT_FP4_AMAX_FLOOR (6.0f * 0x1p-126f)

/* The FP8 scale of one block: amax (floored at 1e-4) / 448, rounded up to a power of two when
 * `pow2`. Exposed so tests and kernels share one rule. */
float srt_quant_fp8_scale(const float *x, size_t n, bool pow2);
/* The FP4 scale of one block: pow2_ceil(max(amax, 6*2^-126) / 6). */
float srt_quant_fp4_scale(const float *x, size_t n);

/* FP8 quantization of x[0..n) in blocks of `block` (block divides n): writes n E4M3 codes and
 * n/block float32 scales. `pow2` selects power-of-two scales (what V4 uses). */
void srt_quant_fp8(const float *x, size_t n, size_t block, bool pow2, uint8_t *codes,
		   float *scales);
/* Same with power-of-two scales stored as UE8M0 codes (n/block bytes). */
void srt_quant_fp8_ue8m0(const float *x, size_t n, size_t block, uint8_t *codes,
			 uint8_t *scales);
/* Fused quantize + dequantize (the reference's `act_quant(..., inplace=True)`): y = q * scale. */
void srt_quant_fp8_fake(const float *x, float *y, size_t n, size_t block, bool pow2);

/* Activation quantization for FP8/FP4 GEMMs: srt_quant_fp8 with block 128 and power-of-two
 * scales (n a multiple of 128). */
void srt_quant_act(const float *x, size_t n, uint8_t *codes, float *scales);
void srt_quant_act_fake(const float *x, float *y, size_t n);

/* KV fake-quant of one head vector of `head_dim` floats whose last `rope_dim` dims carry RoPE:
 * dims [0, head_dim - rope_dim) are FP8 fake-quantized in blocks of 64 with power-of-two
 * scales, the RoPE dims are rounded to bf16. (head_dim - rope_dim) must be a multiple of 64.
 * In place. V4: head_dim 512, rope_dim 64. */
void srt_quant_kv_fake(float *x, size_t head_dim, size_t rope_dim);

/* FP4 quantization in blocks of 32: `packed` receives n/2 bytes (low nibble = even index),
 * `scales` n/32 UE8M0 codes. n a multiple of 32. */
void srt_quant_fp4(const float *x, size_t n, uint8_t *packed, uint8_t *scales);
/* FP4 fake-quant in blocks of 32 (the indexer's `fp4_act_quant(..., inplace=True)`). */
void srt_quant_fp4_fake(const float *x, float *y, size_t n);

/* Weight quantizers for checkpoint generation. `w` is row-major [rows][cols] (rows = output
 * features N, cols = input features K).
 * FP8: codes [rows][cols]; scales [ceil(rows/128)][ceil(cols/128)] UE8M0 (partial edge blocks
 *      use the amax of the part that exists).
 * FP4: cols a multiple of 32; packed [rows][cols/2]; scales [rows][cols/32] UE8M0. */
void srt_quant_weight_fp8(const float *w, size_t rows, size_t cols, uint8_t *codes,
			  uint8_t *scales);
void srt_quant_weight_fp4(const float *w, size_t rows, size_t cols, uint8_t *packed,
			  uint8_t *scales);

#endif /* SRT_OPS_QUANT_H */
