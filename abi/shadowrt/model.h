/*
 * shadowrt plugin ABI v1 — the model description and weight access handed to compute plugins.
 *
 * srt_model_config carries the DeepSeek-V4 `config.json` keys (spec section 1) that kernels need,
 * already validated by the core. srt_weights gives read-only access to the checkpoint's tensors
 * by their real names ("layers.3.attn.wq_a.weight"), memory-mapped: the data pointers stay valid
 * until the plugin instance is destroyed. Both are thread-safe (read-only).
 */
#ifndef SHADOWRT_MODEL_H
#define SHADOWRT_MODEL_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SRT_MAX_LAYERS 256 /* compress_ratios holds num_hidden_layers + 1 entries (MTP last) */

struct srt_model_config {
	uint32_t struct_size;
	char name[64]; /* preset or directory name, informational */

	int32_t hidden_size;
	int32_t num_hidden_layers;
	int32_t num_attention_heads;
	int32_t num_key_value_heads;
	int32_t head_dim;          /* shared K = V width */
	int32_t qk_rope_head_dim;  /* RoPE'd tail of head_dim */
	int32_t q_lora_rank;
	int32_t o_groups;
	int32_t o_lora_rank;
	int32_t sliding_window;
	int32_t n_compress_ratios; /* = num_hidden_layers + num_nextn_predict_layers */
	int32_t compress_ratios[SRT_MAX_LAYERS]; /* 0 = window only, 4 = CSA, 128 = HCA */
	int32_t index_n_heads;
	int32_t index_head_dim;
	int32_t index_topk;
	int32_t vocab_size;
	int32_t n_routed_experts;
	int32_t num_experts_per_tok;
	int32_t n_shared_experts;
	int32_t moe_intermediate_size;
	int32_t num_hash_layers;
	double routed_scaling_factor;
	double swiglu_limit;
	int32_t hc_mult;
	int32_t hc_sinkhorn_iters;
	double hc_eps;
	double rms_norm_eps;
	double rope_theta;
	double compress_rope_theta;
	/* YaRN (rope_scaling): factor <= 1 means none. */
	double rope_factor;
	int64_t rope_original_max_position;
	double rope_beta_fast;
	double rope_beta_slow;
	int64_t max_position_embeddings;
	int32_t num_nextn_predict_layers;
	int32_t bos_token_id;
	int32_t eos_token_id;
	int32_t tie_word_embeddings;
	int32_t expert_fp4;        /* 1: routed experts are packed FP4 (expert_dtype: fp4) */
	int32_t weight_block_size; /* FP8 weight block (128) */
};

/* Element types of checkpoint tensors (safetensors dtype strings in comments). */
enum srt_dtype {
	SRT_DT_F32 = 0,     /* "F32" */
	SRT_DT_BF16 = 1,    /* "BF16" */
	SRT_DT_F16 = 2,     /* "F16" */
	SRT_DT_F8_E4M3 = 3, /* "F8_E4M3" (float8_e4m3fn) */
	SRT_DT_F8_E8M0 = 4, /* "F8_E8M0" (UE8M0 scale, value 2^(e-127)) */
	SRT_DT_I8 = 5,      /* "I8"; routed FP4 experts: two E2M1 per byte, low nibble = even index */
	SRT_DT_I32 = 6,     /* "I32" */
	SRT_DT_I64 = 7,     /* "I64" */
	SRT_DT_U8 = 8,      /* "U8" */
	SRT_DT_F64 = 9,     /* "F64" */
	SRT_DT_COUNT
};

#define SRT_TENSOR_MAX_DIMS 4

/* A read-only view of one tensor. data is host memory, row-major. */
struct srt_tensor {
	const char *name;
	uint32_t dtype; /* enum srt_dtype */
	uint32_t ndim;
	int64_t shape[SRT_TENSOR_MAX_DIMS];
	const void *data;
	size_t nbytes;
};

/*
 * Tensor access. Names are the checkpoint's (spec §6): "embed.weight", "head.weight",
 * "norm.weight", "layers.<L>.attn_norm.weight", "layers.<L>.attn.wq_a.weight" with its block
 * scales "layers.<L>.attn.wq_a.scale", "layers.<L>.ffn.experts.<E>.w1.weight", "hc_attn_fn",
 * ... and "mtp.<J>.*" for the MTP block. FP8 weights are F8_E4M3 [N][K] with F8_E8M0 scales
 * [ceil(N/128)][ceil(K/128)]; FP4 experts are I8 [N][K/2] (two E2M1 per byte, low nibble
 * first) with F8_E8M0 scales [N][K/32]. Data is read-only and stays mapped until the instance
 * is destroyed; get may be called from any thread.
 */
struct srt_weights {
	uint32_t struct_size;
	void *ctx;
	/* Look a tensor up by name: 0 and *out filled, or SRT_ENOENT. */
	int (*get)(void *ctx, const char *name, struct srt_tensor *out);
	/* Optional: a stable fingerprint of the weights (hex string), for cache keys. */
	const char *fingerprint;
};

#ifdef __cplusplus
}
#endif
#endif /* SHADOWRT_MODEL_H */
