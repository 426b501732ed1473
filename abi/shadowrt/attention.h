/*
 * shadowrt plugin ABI v1 — attention plugins (kind SRT_KIND_ATTENTION).
 *
 * One instance serves every model layer listed in srt_plugin_args.layers (for DeepSeek-V4 the
 * runtime config maps compress ratio 0 / 4 / 128 to a plugin each: "swa", "csa", "hca").
 * The instance declares its cache pools once; the core builds ShadowRadix shadow maps for them
 * and hands every forward call, per sequence, one page table per declared pool, in declaration
 * order. KV lives only in those pages: an instance keeps no per-sequence state of its own, so a
 * sequence can resume from any cached prefix the core restores.
 *
 * Per-sequence state that is not KV (a compressor's rows for a block still being filled) lives
 * in a pool too, typically ratio SRT_RATIO_PAGE, retention TAIL 1: the entry of the page being
 * written holds the state after the last token written into that page.
 *
 * Read-only entries and rematerialization (ABI 1.1): batch->cached (pool.h, srt_seq_cached)
 * says, per sequence and pool, which entries already exist and must be read, not written, and
 * marks calls that rebuild a cached prefix's window and carry state. An instance built for
 * ABI 1.0 never gets either (the executor checks abi_minor), so it simply gets no
 * rematerialized prefix hits.
 *
 * Thread safety: the core calls one instance from one thread at a time; the instance may use
 * srt_host.parallel_for inside a call.
 */
#ifndef SHADOWRT_ATTENTION_H
#define SHADOWRT_ATTENTION_H

#include "plugin.h"
#include "pool.h"

#ifdef __cplusplus
extern "C" {
#endif

struct srt_attention_vtable {
	uint32_t struct_size;

	/*
	 * Required. The pools this instance needs. *pools points to an array owned by the
	 * instance (valid until destroy) of *n_pools <= SRT_MAX_POOLS declarations. Entry sizes
	 * follow from the model config and the KV dtype.
	 */
	int (*declare_pools)(void *inst, const struct srt_pool_decl **pools, uint32_t *n_pools);

	/*
	 * Required. One attention sub-layer for a batch: x is the residual's sub-layer input
	 * [batch->n_rows][hidden_size] (before attn_norm, which the plugin applies), out receives
	 * the attention output after the output projection, same shape. Reads and writes KV only
	 * through the batch's page tables. Tokens of one sequence are causal among themselves.
	 * Returns 0, or a negative code with a reason in why.
	 */
	int (*forward)(void *inst, int32_t layer, const struct srt_batch *batch, const float *x,
		       float *out, char *why, size_t why_len);
};

#define SRT_ATTENTION_VTABLE_V1_SIZE                                                          \
	(offsetof(struct srt_attention_vtable, forward) + sizeof(void *))

#ifdef __cplusplus
}
#endif
#endif /* SHADOWRT_ATTENTION_H */
