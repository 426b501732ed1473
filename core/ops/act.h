/*
 * core/ops/act.h — scalar activation functions in float32, inline.
 *
 * Match PyTorch's float32 definitions: sigmoid(x) = 1/(1+exp(-x)); silu(x) = x*sigmoid(x);
 * softplus(x) = log1p(exp(x)) for x <= 20 and x above (PyTorch's default threshold 20).
 * Pure and thread-safe.
 */
#ifndef SRT_OPS_ACT_H
#define SRT_OPS_ACT_H

#include <math.h>

static inline float srt_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float srt_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float srt_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

#endif /* SRT_OPS_ACT_H */
