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
 *
 * The forward contract (what the built-in swa/csa/hca compute; spec §2 and §9 steps 1-8):
 *   x    [n_rows][hidden_size] floats, host memory (batch->mem): the residual plugin's sub-layer
 *        input u for this layer (after mHC-pre, before any norm), one row per token of the
 *        batch, sequences one after another (seqs[i].first_row). In the `reference` profile
 *        its values are already bf16-representable.
 *   out  [n_rows][hidden_size] floats the plugin overwrites completely: the attention output
 *        after the output projection (wo_b), which the residual plugin adds back (mHC-post).
 *        In `reference` round it to bf16 as the reference does.
 *   In between, the plugin does all of it: attn_norm, the query (wq_a, q_norm, wq_b, per-head
 *   RMSNorm, RoPE), the KV (wkv, kv_norm, RoPE, KV fake-quant), compressors and indexer, the
 *   attention with the head's sink, de-rotation, wo_a (per group) and wo_b.
 *   Causality: the token at position p sees positions <= p of its own sequence only: the cache
 *   ([0, pos) of the sequence, through its page tables) and the earlier rows of the same call.
 *   Results must not depend on how a sequence is cut into calls (chunked prefill = one shot =
 *   token-by-token decode), on the other sequences of the batch, on the thread count, or on
 *   whether [0, pos) was computed in this process or restored from a cached prefix:
 *   `shadowrt check-plugin` tests exactly that, bitwise.
 *   Weights: through srt_plugin_args.weights (model.h), by the checkpoint's own names:
 *     layers.<L>.attn_norm.weight                               bf16 [hidden]
 *     layers.<L>.attn.{wq_a,wq_b,wkv,wo_a,wo_b}.weight / .scale  FP8 E4M3 + UE8M0 128x128 scales
 *     layers.<L>.attn.{q_norm,kv_norm}.weight                   bf16
 *     layers.<L>.attn.attn_sink                                 f32 [num_attention_heads]
 *     layers.<L>.attn.compressor.{wkv,wgate}.weight             bf16 (compressed layers)
 *     layers.<L>.attn.compressor.{ape, norm.weight}             f32 [ratio][w], bf16 [head_dim]
 *     layers.<L>.attn.indexer.{wq_b, weights_proj, compressor.*} (ratio-4 layers)
 *   (<L> the model layer index; the MTP block's are mtp.<J>.*). The numerics that make a plugin
 *   match the built-ins (formats, quantizers, RoPE+YaRN, RMSNorm, Hadamard, GEMM in both
 *   profiles) are installed as <shadowrt/ops.h> (libshadowrt-ops, pkg-config shadowrt-ops).
 *   Options: the built-ins read kv_dtype (auto|bf16|fp8|f32: the layout of window and
 *   compressed KV entries; auto = fp8 in `reference`, where it is lossless, f32 in `f32`) and,
 *   for csa, index_dtype (auto|bf16|fp8|fp4|f32: the indexer key layout; auto = fp4 in
 *   `reference`) from [attention.<plugin>]; any plugin declares its own (plugin.h options).
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
