/*
 * The tensors of a DeepSeek-V4 checkpoint for a given struct srt_model_config (spec section 6,
 * names and shapes as in DeepSeek's inference/model.py), and the validation of an open
 * checkpoint against that list.
 *
 * Names: top level embed.weight, head.weight, norm.weight, hc_head_{fn,base,scale}; per main
 * block "layers.L." and per MTP block "mtp.I." the attention (attn.*), MoE (ffn.*), norms and
 * mHC (hc_attn_*, hc_ffn_*) tensors; MTP blocks add e_proj, h_proj, enorm, hnorm, norm and
 * hc_head_*. FP8 linears are `.weight` F8_E4M3 [out, in] + `.scale` F8_E8M0 [ceil(out/128),
 * ceil(in/128)]; FP4 routed experts are `.weight` I8 [out, in/2] (two E2M1 per byte) + `.scale`
 * F8_E8M0 [out, in/32]. Hash-routed blocks carry ffn.gate.tid2eid I64 [vocab, experts_per_tok]
 * (model.py declares int32; I32 is accepted too), score-routed ones ffn.gate.bias F32 [experts].
 *
 * Thread safety: pure functions of their arguments.
 */
#ifndef SRT_CKPT_DSV4_TENSORS_H
#define SRT_CKPT_DSV4_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/model.h>

#include "ckpt/safetensors.h"

#define SRT_CK_NAME_MAX 96

/* What a tensor is, for generators and for messages. */
enum srt_ck_role {
	SRT_CK_EMBED,     /* embed.weight [vocab, dim] */
	SRT_CK_HEAD,      /* head.weight [vocab, dim] */
	SRT_CK_NORM,      /* RMSNorm weight [n] */
	SRT_CK_LINEAR,    /* bf16 linear [out, in]: router, compressor, indexer weights_proj */
	SRT_CK_FP8_W,     /* F8_E4M3 linear weight [out, in] */
	SRT_CK_FP8_S,     /* its UE8M0 128x128 block scales */
	SRT_CK_FP4_W,     /* packed FP4 expert weight [out, in/2] */
	SRT_CK_FP4_S,     /* its UE8M0 per-32 scales [out, in/32] */
	SRT_CK_HC_FN,     /* mHC mixing projection [(2+hc)*hc or hc, hc*dim] */
	SRT_CK_HC_BASE,   /* mHC bias */
	SRT_CK_HC_SCALE,  /* mHC scales [3] or [1] */
	SRT_CK_SINK,      /* attention sink logits [heads] */
	SRT_CK_APE,       /* compressor positional bias [ratio, width] */
	SRT_CK_GATE_BIAS, /* router selection bias [experts] */
	SRT_CK_TID2EID,   /* hash routing table [vocab, experts_per_tok] */
	SRT_CK_ROLE_COUNT
};

struct srt_ck_spec {
	char name[SRT_CK_NAME_MAX];
	uint32_t dtype;     /* enum srt_dtype, what gen-model writes */
	uint32_t alt_dtype; /* also accepted by the validator (== dtype when there is none) */
	uint32_t ndim;
	int64_t shape[SRT_TENSOR_MAX_DIMS];
	uint32_t role;      /* enum srt_ck_role */
	int32_t layer;      /* block index (MTP block i: num_hidden_layers + i); -1 top level */
	/* Logical [out, in] of the linear for *_W / *_S / LINEAR / EMBED / HEAD roles (FP4 `in` is
	 * the unpacked width); for other roles rows = shape[0], cols = shape[1] or 1. */
	int64_t rows, cols;
};

/*
 * The full list, in module order (top level, then each block, then MTP). On success *out is a
 * malloc'd array of *n specs (free() it). Fails with SRT_EINVAL naming the config key when a
 * shape cannot be formed (e.g. hidden_size not a multiple of 32 with FP4 experts, heads x
 * head_dim not divisible by o_groups, a compress ratio other than 0 or a power of two).
 */
int srt_ck_dsv4_specs(const struct srt_model_config *cfg, struct srt_ck_spec **out, size_t *n,
		      char *err, size_t errlen);

/* Result of a validation beyond pass/fail. */
struct srt_ck_check {
	size_t expected;   /* tensors the config asks for */
	size_t problems;   /* missing + wrong dtype/shape + bad values */
	size_t extra;      /* tensors the config does not know (warned, not an error) */
};

/*
 * Validate an open checkpoint against cfg: every expected tensor present with the right dtype
 * and shape, tid2eid entries within [0, n_routed_experts). Returns 0, or SRT_ECORRUPT with the
 * first problem in err ("tensor 'layers.0.attn.wq_a.weight' (file x): shape [..], expected
 * [..]") and "(and N more problems)" when there are several. Each extra tensor is passed to
 * warn (NULL: stderr), at most 8 of them, then a count. stats may be NULL.
 */
int srt_ck_dsv4_check(const struct srt_ckpt *ck, const struct srt_model_config *cfg,
		      srt_ck_warn_fn warn, void *user, struct srt_ck_check *stats, char *err,
		      size_t errlen);

const char *srt_ck_role_name(uint32_t role);

#endif
