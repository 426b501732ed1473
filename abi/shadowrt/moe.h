/*
 * shadowrt plugin ABI v1 — MoE plugins (kind SRT_KIND_MOE).
 *
 * One instance serves every layer in srt_plugin_args.layers: the feed-forward sub-layer of
 * DeepSeek-V4 (ffn_norm, router — hash routing through tid2eid in the first num_hash_layers
 * layers, score routing after — routed FP4 experts and the shared expert).
 *
 * Thread safety: one call at a time per instance; parallel_for inside a call is fine.
 */
#ifndef SHADOWRT_MOE_H
#define SHADOWRT_MOE_H

#include "plugin.h"
#include "pool.h"

#ifdef __cplusplus
extern "C" {
#endif

struct srt_moe_vtable {
	uint32_t struct_size;
	/*
	 * Required. x is the residual's sub-layer input [batch->n_rows][hidden_size] (before
	 * ffn_norm); out receives the MoE output, same shape. Token ids for hash routing come
	 * from batch->seqs[i].token_ids. Page tables in the batch are empty (n_pools = 0).
	 */
	int (*forward)(void *inst, int32_t layer, const struct srt_batch *batch, const float *x,
		       float *out, char *why, size_t why_len);
};

#define SRT_MOE_VTABLE_V1_SIZE (offsetof(struct srt_moe_vtable, forward) + sizeof(void *))

#ifdef __cplusplus
}
#endif
#endif /* SHADOWRT_MOE_H */
