/*
 * shadowrt plugin ABI v1 — residual-stream plugins (kind SRT_KIND_RESIDUAL).
 *
 * The residual state of a token is S streams of hidden_size floats, X[S][d] (S = 4 for mHC,
 * 1 for a plain residual). Around every sub-layer F (attention, then MoE) the executor calls
 *     pre(X) -> u;  F(u) -> f;  post(f, X) -> X
 * and before the LM head head(X) -> y. Between pre and post the plugin may keep per-row
 * mixing coefficients in a caller-provided buffer of mix_floats() floats per row.
 * Activations are host fp32 buffers; rows are tokens.
 *
 * Thread safety: one call at a time per instance; parallel_for inside a call is fine.
 */
#ifndef SHADOWRT_RESIDUAL_H
#define SHADOWRT_RESIDUAL_H

#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

enum srt_sublayer { SRT_SUBLAYER_ATTN = 0, SRT_SUBLAYER_FFN = 1 };

struct srt_residual_vtable {
	uint32_t struct_size;
	/* Required. Streams per token (S). */
	uint32_t (*n_streams)(void *inst);
	/* Required. Floats per row the plugin needs between pre and post. */
	uint32_t (*mix_floats)(void *inst);
	/* Required. h[n][d] (token embeddings) -> X[n][S][d]. */
	int (*embed)(void *inst, int32_t n_rows, const float *h, float *X);
	/* Required. X[n][S][d] -> u[n][d] (sub-layer input), mix[n][mix_floats]. */
	int (*pre)(void *inst, int32_t layer, uint32_t sublayer, int32_t n_rows, const float *X,
		   float *u, float *mix);
	/* Required. X <- combine(X, f[n][d]) with the mix from pre. */
	int (*post)(void *inst, int32_t layer, uint32_t sublayer, int32_t n_rows, const float *f,
		    const float *mix, float *X);
	/* Required. X[n][S][d] -> y[n][d], before the final norm and the LM head. */
	int (*head)(void *inst, int32_t n_rows, const float *X, float *y);
};

#define SRT_RESIDUAL_VTABLE_V1_SIZE (offsetof(struct srt_residual_vtable, head) + sizeof(void *))

#ifdef __cplusplus
}
#endif
#endif /* SHADOWRT_RESIDUAL_H */
