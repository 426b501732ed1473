/*
 * core/ops/norm.h — RMSNorm in float32.
 *
 * y[i] = w[i] * (x[i] * rsqrt(mean(x^2) + eps)), as the reference's RMSNorm computes it in
 * float32 (the weight, stored in bf16, is widened to float32). The sum of squares is taken in a
 * fixed order (8 interleaved float32 partial sums, then combined pairwise), so results do not
 * depend on the caller's batching. The reference then casts to bf16: callers do that with
 * srt_round_bf16_n where the reference does. Pure, thread-safe; x and y may alias.
 */
#ifndef SRT_OPS_NORM_H
#define SRT_OPS_NORM_H

#include <stddef.h>
#include <stdint.h>

/* Sum of squares of x[0..n) in the fixed order described above. */
float srt_sumsq(const float *x, size_t n);
/* Weightless RMSNorm (the per-head q normalisation, mHC's flattened-stream norm). */
void srt_rmsnorm(const float *x, float *y, size_t n, float eps);
/* RMSNorm with a float32 weight. */
void srt_rmsnorm_f32w(const float *x, float *y, size_t n, const float *w, float eps);
/* RMSNorm with a bf16 weight (as stored in checkpoints). */
void srt_rmsnorm_bf16w(const float *x, float *y, size_t n, const uint16_t *w, float eps);

#endif /* SRT_OPS_NORM_H */
