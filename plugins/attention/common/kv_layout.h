/*
 * Shared by the attention plugins (swa, csa, hca): KV entry layouts and the pool-declaration
 * helpers. Header-only (static inline), so each plugin .so stays self-contained.
 *
 * KV entry of one token (window) or one compressed block (C4, C128), head_dim wide, option
 * `kv_dtype`:
 *   bf16 (default): 2 * head_dim bytes                       (spec section 8, bf16 layout)
 *   fp8:  FlashMLA layout: (head_dim - rope) E4M3 bytes + rope dims bf16 + one UE8M0 scale per
 *         64 nope dims, padded to a multiple of 8 (584 B at head_dim 512, rope 64)
 *   f32:  4 * head_dim bytes
 * Indexer key (CSA), index_head_dim wide, option `index_dtype` (default: kv_dtype):
 *   bf16 2 * d; fp8 d + 4 (fp32 scale); fp4 d / 2 + d / 32 (UE8M0 per 32); f32 4 * d.
 */
#ifndef SRT_ATTN_KV_LAYOUT_H
#define SRT_ATTN_KV_LAYOUT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/shadowrt.h>

static inline const char *srt_attn_option(const struct srt_plugin_args *a, const char *key)
{
	return a->option ? a->option(a->option_ctx, key) : NULL;
}

static inline int srt_attn_kv_bytes(const char *dtype, int head_dim, int rope, uint64_t *out,
				    char *why, size_t why_len)
{
	if (!dtype || !strcmp(dtype, "bf16")) {
		*out = 2u * (uint64_t)head_dim;
	} else if (!strcmp(dtype, "fp8")) {
		uint64_t nope = (uint64_t)(head_dim - rope);
		uint64_t b = nope + 2u * (uint64_t)rope + (nope + 63) / 64;
		*out = (b + 7) & ~(uint64_t)7;
	} else if (!strcmp(dtype, "f32")) {
		*out = 4u * (uint64_t)head_dim;
	} else {
		snprintf(why, why_len, "option kv_dtype: '%s' is not one of bf16, fp8, f32", dtype);
		return SRT_EINVAL;
	}
	return 0;
}

static inline int srt_attn_index_bytes(const char *dtype, int d, uint64_t *out, char *why,
				       size_t why_len)
{
	if (!dtype || !strcmp(dtype, "bf16"))
		*out = 2u * (uint64_t)d;
	else if (!strcmp(dtype, "fp8"))
		*out = (uint64_t)d + 4;
	else if (!strcmp(dtype, "fp4"))
		*out = (uint64_t)d / 2 + (uint64_t)d / 32;
	else if (!strcmp(dtype, "f32"))
		*out = 4u * (uint64_t)d;
	else {
		snprintf(why, why_len, "option index_dtype: '%s' is not one of bf16, fp8, fp4, f32",
			 dtype);
		return SRT_EINVAL;
	}
	return 0;
}

/*
 * The layers an instance serves: args->layers when given (each must have compress ratio
 * `ratio` in the model), else every layer of the model (MTP blocks included) with that ratio.
 * *out is allocated with host->alloc (free with host->free).
 */
static inline int srt_attn_layers(const struct srt_host *host, const struct srt_plugin_args *a,
				  int ratio, const char *plugin, int32_t **out, uint32_t *n,
				  char *why, size_t why_len)
{
	const struct srt_model_config *m = a->model;
	*out = NULL;
	*n = 0;
	if (!m) {
		snprintf(why, why_len, "%s: needs a model config", plugin);
		return SRT_EINVAL;
	}
	uint32_t cnt = 0;
	if (a->layers) {
		for (uint32_t i = 0; i < a->n_layers; i++) {
			int32_t l = a->layers[i];
			if (l < 0 || l >= m->n_compress_ratios || m->compress_ratios[l] != ratio) {
				snprintf(why, why_len,
					 "%s: layer %d has compress ratio %d, this plugin serves "
					 "ratio %d", plugin, l,
					 l >= 0 && l < m->n_compress_ratios ? m->compress_ratios[l] : -1,
					 ratio);
				return SRT_EINVAL;
			}
		}
		cnt = a->n_layers;
	} else {
		for (int32_t l = 0; l < m->n_compress_ratios; l++)
			cnt += m->compress_ratios[l] == ratio;
	}
	if (!cnt) {
		snprintf(why, why_len, "%s: no layer of compress ratio %d to serve", plugin, ratio);
		return SRT_EINVAL;
	}
	int32_t *l = host->alloc(cnt * sizeof(int32_t), 16);
	if (!l) {
		snprintf(why, why_len, "%s: out of memory", plugin);
		return SRT_ENOMEM;
	}
	if (a->layers) {
		memcpy(l, a->layers, cnt * sizeof(int32_t));
	} else {
		uint32_t k = 0;
		for (int32_t i = 0; i < m->n_compress_ratios; i++)
			if (m->compress_ratios[i] == ratio)
				l[k++] = i;
	}
	*out = l;
	*n = cnt;
	return 0;
}

static inline void srt_attn_pool(struct srt_pool_decl *d, const char *name, uint32_t ratio,
				 uint32_t retention, uint32_t tail, uint64_t entry_bytes,
				 const int32_t *layers, uint32_t n_layers)
{
	memset(d, 0, sizeof(*d));
	d->struct_size = sizeof(*d);
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->ratio = ratio;
	d->retention = retention;
	d->tail_tokens = tail;
	d->entry_bytes = entry_bytes;
	d->n_layers = n_layers;
	d->layers = layers;
}

#endif
