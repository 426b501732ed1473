/*
 * The descriptor of an attention plugin built on srt_attn_common: each plugin's only source
 * file is SRT_ATTN_PLUGIN(name, ratio, description) (see swa/swa.c, csa/csa.c, hca/hca.c).
 * create accepts weights == NULL: such an instance only declares its pools (geometry reports,
 * cache-only replay); forward on it fails saying so.
 */
#ifndef SRT_ATTN_PLUGIN_H
#define SRT_ATTN_PLUGIN_H

#include "attn.h"

#define SRT_ATTN_PLUGIN(NAME, RATIO, DESCRIPTION)                                              \
	static int attn_create(const struct srt_host *host, const struct srt_plugin_args *args,  \
			       void **instance, char *why, size_t why_len)                        \
	{                                                                                        \
		struct srt_attn *a = NULL;                                                       \
		int rc = srt_attn_create(host, args, RATIO, NAME, &a, why, why_len);             \
		*instance = a;                                                                   \
		return rc;                                                                       \
	}                                                                                        \
	static void attn_destroy(void *instance) { srt_attn_destroy(instance); }                 \
	static int attn_declare_pools(void *inst, const struct srt_pool_decl **pools,            \
				      uint32_t *n_pools)                                         \
	{                                                                                        \
		struct srt_attn *a = inst;                                                       \
		*pools = a->pools;                                                               \
		*n_pools = a->n_pools;                                                           \
		return 0;                                                                        \
	}                                                                                        \
	static int attn_forward(void *inst, int32_t layer, const struct srt_batch *batch,        \
				const float *x, float *out, char *why, size_t why_len)           \
	{                                                                                        \
		return srt_attn_forward(inst, layer, batch, x, out, why, why_len);               \
	}                                                                                        \
	static const struct srt_attention_vtable attn_vtable = {                                 \
		.struct_size = sizeof(struct srt_attention_vtable),                              \
		.declare_pools = attn_declare_pools,                                             \
		.forward = attn_forward,                                                         \
	};                                                                                       \
	static const struct srt_plugin_option attn_opts_kv[] = {                                 \
		{"kv_dtype", "auto|bf16|fp8|f32", "auto",                                        \
		 "KV entry format (auto: fp8 in the reference profile, f32 in f32)"},            \
		{"fp8_layout", "auto|paired|rows", "auto",                                       \
		 "FP8 weights copied into the decode GEMV's layout (auto: reference on AVX512_BF16)"}, \
		{NULL, NULL, NULL, NULL},                                                        \
	};                                                                                       \
	static const struct srt_plugin_option attn_opts_csa[] = {                                \
		{"kv_dtype", "auto|bf16|fp8|f32", "auto",                                        \
		 "KV entry format (auto: fp8 in the reference profile, f32 in f32)"},            \
		{"index_dtype", "auto|bf16|fp8|fp4|f32", "auto",                                 \
		 "indexer key format (auto: fp4 in reference, f32 in f32; else kv_dtype)"},       \
		{"fp8_layout", "auto|paired|rows", "auto",                                       \
		 "FP8 weights copied into the decode GEMV's layout (auto: reference on AVX512_BF16)"}, \
		{NULL, NULL, NULL, NULL},                                                        \
	};                                                                                       \
	static const struct srt_plugin_desc attn_desc = {                                        \
		.struct_size = sizeof(struct srt_plugin_desc),                                   \
		.abi_major = SRT_ABI_MAJOR,                                                      \
		.abi_minor = SRT_ABI_MINOR,                                                      \
		.kind = SRT_KIND_ATTENTION,                                                      \
		.name = NAME,                                                                    \
		.version = "1.0.0",                                                              \
		.description = DESCRIPTION,                                                      \
		.caps = SRT_CAP_CPU | SRT_CAP_BATCH,                                             \
		.probe = NULL,                                                                   \
		.create = attn_create,                                                           \
		.destroy = attn_destroy,                                                         \
		.vtable = &attn_vtable,                                                          \
		.options = (RATIO) == 4 ? attn_opts_csa : attn_opts_kv,                          \
		/* bump when the bytes written into cache pages change (cache identity) */       \
		.layout_id = NAME "-pages/3",                                                    \
	};                                                                                       \
	SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void) { return &attn_desc; }

#endif
