/*
 * core/ops/fp.h — the number formats of DeepSeek-V4 checkpoints and caches.
 *
 * bf16, FP8 E4M3 (`float8_e4m3fn`), UE8M0 scales (`float8_e8m0fnu`) and FP4 E2M1
 * (`float4_e2m1fn`, two per byte). Every encoder rounds to nearest, ties to even, exactly as
 * PyTorch's casts from float32 do; every decoder is exact. All functions are pure and
 * thread-safe; none allocates.
 *
 * Bit layouts:
 *   bf16  : the top 16 bits of an IEEE float32.
 *   E4M3  : s eeee mmm, bias 7, no infinities; 0x7F / 0xFF are NaN; max finite ±448;
 *           subnormals m·2^-9.
 *   UE8M0 : eeeeeeee, value 2^(e-127); 0xFF is NaN; no zero, no sign.
 *   E2M1  : s ee m, bias 1; values {0, 0.5, 1, 1.5, 2, 3, 4, 6}, codes 8..15 negative
 *           (code 8 is -0). No NaN, no infinity.
 *   Packed FP4: element 2i in the LOW nibble of byte i, element 2i+1 in the high nibble.
 */
#ifndef SRT_OPS_FP_H
#define SRT_OPS_FP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- bf16 ---------------------------------------------------------------------------------- */

/* float32 -> bf16 bits, round to nearest even. Any NaN becomes the quiet NaN 0x7FC0 (PyTorch
 * drops the sign and payload too); ±inf stay ±inf; values that round past the largest finite
 * bf16 become ±inf. */
uint16_t srt_bf16_from_f32(float x);
/* bf16 bits -> float32 (exact). */
float srt_bf16_to_f32(uint16_t h);
/* x rounded to the nearest bf16 and back to float32: what `x.to(torch.bfloat16).float()` gives.
 * NaN stays NaN. */
float srt_round_bf16(float x);
/* Array forms. `src` and `dst` may be the same array for srt_round_bf16_n only. */
void srt_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void srt_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);
void srt_round_bf16_n(float *x, size_t n);

/* ---- FP8 E4M3 (float8_e4m3fn) ----------------------------------------------------------------- */

#define SRT_FP8_E4M3_MAX 448.0f
#define SRT_FP8_E4M3_NAN 0x7Fu

/* Decode table: srt_fp8_e4m3_table[c] is the value of code c (NaN for 0x7F and 0xFF). */
extern const float srt_fp8_e4m3_table[256];

/* RAW cast, exactly PyTorch's `x.to(torch.float8_e4m3fn)` (and ml_dtypes'): round to nearest
 * even; a magnitude above 464 (the midpoint between 448 and the missing 480, which would round
 * beyond 448), ±inf and NaN all give NaN (0x7F, or 0xFF for a negative sign bit). 464 itself
 * rounds to ±448 (tie to the even code). */
uint8_t srt_fp8_e4m3_from_f32(float x);
/* SATURATING cast, what the reference quantizers do (`x.clamp(-448, 448)` before the cast):
 * |x| > 448 and ±inf give ±448; NaN still gives NaN (0x7F, sign kept). Otherwise identical to
 * the raw cast. */
uint8_t srt_fp8_e4m3_from_f32_sat(float x);
/* Code -> float32 (exact; NaN codes give NaN). */
static inline float srt_fp8_e4m3_to_f32(uint8_t c) { return srt_fp8_e4m3_table[c]; }
static inline bool srt_fp8_e4m3_is_nan(uint8_t c) { return (c & 0x7Fu) == 0x7Fu; }
/* Array decode. */
void srt_fp8_e4m3_to_f32_n(const uint8_t *src, float *dst, size_t n);

/* ---- UE8M0 scales (float8_e8m0fnu) ------------------------------------------------------------ */

#define SRT_E8M0_NAN 0xFFu

/* Code -> 2^(e-127) as float32 (e = 0 gives the float32 subnormal 2^-127); 0xFF gives NaN. */
float srt_e8m0_to_f32(uint8_t e);
/* Exact encode of a power of two s in [2^-127, 2^127]. Asserts that s is such a power of two
 * (a programmer error otherwise: use srt_e8m0_ceil for arbitrary positive values). */
uint8_t srt_e8m0_from_pow2(float s);
/* The smallest power of two >= x as a UE8M0 code, computed as DeepSeek's kernels do
 * (`fast_log2_ceil`: float32 exponent, plus one if any mantissa bit is set). Requires a
 * positive NORMAL float32 x with x <= 2^127 (asserted); the quantizers guarantee this through
 * their amax floors. */
uint8_t srt_e8m0_ceil(float x);
/* 2^ceil(log2(x)) as float32 by the same rule: srt_e8m0_to_f32(srt_e8m0_ceil(x)). */
float srt_pow2_ceil(float x);

/* ---- FP4 E2M1 ------------------------------------------------------------------------------------ */

#define SRT_FP4_E2M1_MAX 6.0f

/* Decode table: srt_fp4_e2m1_table[c] for the 16 codes (code 8 is -0.0f). */
extern const float srt_fp4_e2m1_table[16];

/* float32 -> 4-bit code (in the low nibble), round to nearest even, SATURATING: |x| > 6 and
 * ±inf give ±6 (as the CUDA `satfinite` conversion the reference kernels use, and ml_dtypes).
 * NaN has no E2M1 encoding: it gives 0x7 (+6) as CUDA's satfinite conversion does (ml_dtypes
 * gives -0 instead); callers that can see NaN must check for it themselves. -0.0 and negative
 * values that round to zero keep their sign (code 8). */
uint8_t srt_fp4_e2m1_from_f32(float x);
static inline float srt_fp4_e2m1_to_f32(uint8_t code) { return srt_fp4_e2m1_table[code & 0xFu]; }

/* Packed access: element i of a packed FP4 array (low nibble = even index). */
static inline uint8_t srt_fp4_get(const uint8_t *packed, size_t i)
{
	return (uint8_t)((packed[i >> 1] >> ((i & 1u) * 4u)) & 0xFu);
}
static inline void srt_fp4_set(uint8_t *packed, size_t i, uint8_t code)
{
	unsigned shift = (unsigned)(i & 1u) * 4u;
	packed[i >> 1] = (uint8_t)((packed[i >> 1] & ~(0xFu << shift)) | ((code & 0xFu) << shift));
}
/* Decode n elements (n even) of a packed array into floats (codes' values, no scale). */
void srt_fp4_unpack(const uint8_t *packed, float *dst, size_t n);

#endif /* SRT_OPS_FP_H */
