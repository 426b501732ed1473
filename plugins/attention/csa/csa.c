/*
 * csa attention plugin: descriptor, create/destroy, pool declaration; the kernel is not built
 * yet (forward returns SRT_ENOTSUP).
 *
 * create accepts weights == NULL: such an instance serves pool declaration only (geometry
 * reports, cache-only replay); forward on it is an error.
 */
#include <stdio.h>
#include <string.h>

#include "csa.h"
#include "../common/kv_layout.h"

static int csa_create(const struct srt_host *host, const struct srt_plugin_args *args,
			 void **instance, char *why, size_t why_len)
{
	struct csa_inst *s = host->alloc(sizeof(*s), 16);
	if (!s) {
		snprintf(why, why_len, "csa: out of memory");
		return SRT_ENOMEM;
	}
	memset(s, 0, sizeof(*s));
	s->host = host;
	s->model = args->model;
	s->weights = args->weights;
	s->page_tokens = args->page_tokens;
	int rc = srt_attn_layers(host, args, 4, "csa", &s->layers, &s->n_layers, why, why_len);
	if (!rc)
		rc = csa_declare(s, args, why, why_len);
	if (rc) {
		if (s->layers)
			host->free(s->layers);
		host->free(s);
		return rc;
	}
	*instance = s;
	return 0;
}

static void csa_destroy(void *instance)
{
	struct csa_inst *s = instance;
	if (!s)
		return;
	const struct srt_host *host = s->host;
	host->free(s->layers);
	host->free(s);
}

static int csa_declare_pools(void *inst, const struct srt_pool_decl **pools, uint32_t *n_pools)
{
	struct csa_inst *s = inst;
	*pools = s->pools;
	*n_pools = s->n_pools;
	return 0;
}

static int csa_forward(void *inst, int32_t layer, const struct srt_batch *batch,
			  const float *x, float *out, char *why, size_t why_len)
{
	(void)inst, (void)batch, (void)x, (void)out;
	snprintf(why, why_len, "csa: layer %d: kernel not built yet", layer);
	return SRT_ENOTSUP;
}

static const struct srt_attention_vtable csa_vtable = {
	.struct_size = sizeof(struct srt_attention_vtable),
	.declare_pools = csa_declare_pools,
	.forward = csa_forward,
};

static const struct srt_plugin_desc csa_desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_ATTENTION,
	.name = "csa",
	.version = "0.1.0",
	.description = "compressed sparse attention (ratio 4, lightning indexer); CPU, pools only so far",
	.caps = SRT_CAP_CPU | SRT_CAP_BATCH,
	.probe = NULL,
	.create = csa_create,
	.destroy = csa_destroy,
	.vtable = &csa_vtable,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &csa_desc;
}
