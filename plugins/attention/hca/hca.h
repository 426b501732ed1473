/*
 * hca attention plugin: the instance and its pool declaration (hca/hca_pools.c).
 * Kernels (forward) come later in their own files; the instance holds what they need.
 */
#ifndef SRT_ATTN_HCA_H
#define SRT_ATTN_HCA_H

#include <shadowrt/shadowrt.h>

struct hca_inst {
	const struct srt_host *host;
	const struct srt_model_config *model; /* borrowed, valid until destroy */
	const struct srt_weights *weights;    /* NULL: created for pool declaration only */
	int32_t *layers;                      /* host->alloc'ed copy */
	uint32_t n_layers;
	uint32_t page_tokens;
	uint64_t kv_bytes;                    /* one KV entry (kv_dtype) */
	uint64_t index_bytes;                 /* one indexer key (csa only) */
	struct srt_pool_decl pools[SRT_MAX_POOLS];
	uint32_t n_pools;
};

/* Fill inst->pools from the model config and the options. 0 or SRT_EINVAL with a reason. */
int hca_declare(struct hca_inst *inst, const struct srt_plugin_args *args, char *why,
		    size_t why_len);

#endif
