/* Pool geometry from the real attention plugins (geometry.h). */
#include "radix/geometry.h"
#include "radix/rx_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/attention.h>

#include "config/model_config.h"
#include "config/runtime_config.h"
#include "plugin/host.h"
#include "plugin/registry.h"

#define MAX_INST 8

struct geo_priv {
	struct srt_host *host;
	struct srt_registry *reg;
	struct srt_instance *inst[MAX_INST];
	int32_t layers[MAX_INST][SRT_MAX_LAYERS]; /* the layers each instance serves */
	int n_inst;
	const char *kv_dtype, *index_dtype;
	const struct srt_runtime_config *rc;
	const char *section; /* of the plugin being created */
};

static const char *geo_option(void *ctx, const char *key)
{
	struct geo_priv *g = ctx;
	if (!strcmp(key, "kv_dtype") && g->kv_dtype)
		return g->kv_dtype;
	if (!strcmp(key, "index_dtype") && g->index_dtype)
		return g->index_dtype;
	if (g->rc && g->section)
		return srt_runtime_config_option(g->rc, g->section, key);
	return NULL;
}

static const char *plugin_for_ratio(int r)
{
	switch (r) {
	case 0: return "swa";
	case 4: return "csa";
	case 128: return "hca";
	default: return NULL;
	}
}

void srt_rdx_geometry_free(struct srt_rdx_geometry *g)
{
	if (!g)
		return;
	struct geo_priv *p = g->priv_;
	if (p) {
		for (int i = 0; i < p->n_inst; i++)
			srt_instance_destroy(p->inst[i]);
		srt_registry_close(p->reg);
		srt_host_destroy(p->host);
		free(p);
	}
	free(g);
}

int srt_rdx_geometry_load(const char *model, const struct srt_rdx_geometry_opts *opts,
			  struct srt_rdx_geometry **out, char *err, size_t errlen)
{
	char why[1024];
	int rc;
	*out = NULL;
	struct srt_rdx_geometry *g = calloc(1, sizeof(*g));
	struct geo_priv *p = calloc(1, sizeof(*p));
	if (!g || !p) {
		free(g), free(p);
		seterr(err, errlen, "out of memory");
		return SRT_ENOMEM;
	}
	g->priv_ = p;
	p->kv_dtype = opts ? opts->kv_dtype : NULL;
	p->index_dtype = opts ? opts->index_dtype : NULL;
	uint32_t P = opts && opts->page_tokens ? opts->page_tokens : SRT_RDX_DEFAULT_PAGE;
	if ((rc = srt_model_config_load(model, &g->model, why, sizeof(why)))) {
		seterr(err, errlen, "model '%s': %s", model, why);
		goto fail;
	}
	if ((rc = srt_host_create(1, &p->host, why, sizeof(why)))) {
		seterr(err, errlen, "plugin host: %s", why);
		goto fail;
	}
	p->rc = opts ? opts->rc : NULL;
	const char *dirs[64];
	size_t nd = 0;
	for (size_t i = 0; opts && i < opts->ndirs && nd < 64; i++)
		dirs[nd++] = opts->dirs[i];
	for (int i = 0; p->rc && i < p->rc->n_plugin_dirs && nd < 64; i++)
		dirs[nd++] = p->rc->plugin_dirs[i];
	if ((rc = srt_registry_open(&p->reg, nd ? dirs : NULL, nd, p->host, 0))) {
		seterr(err, errlen, "plugin registry: cannot open (code %d)", rc);
		goto fail;
	}
	/* one instance per distinct ratio, in order 0, 4, 128, then others (refused) */
	int ratios[SRT_MAX_LAYERS], nr = 0;
	for (int l = 0; l < g->model.n_compress_ratios; l++) {
		int r = g->model.compress_ratios[l], seen = 0;
		for (int i = 0; i < nr; i++)
			seen |= ratios[i] == r;
		if (!seen)
			ratios[nr++] = r;
	}
	for (int i = 1; i < nr; i++) /* sort ascending */
		for (int j = i; j > 0 && ratios[j - 1] > ratios[j]; j--) {
			int t = ratios[j];
			ratios[j] = ratios[j - 1];
			ratios[j - 1] = t;
		}
	for (int i = 0; i < nr; i++) {
		const char *name = plugin_for_ratio(ratios[i]);
		p->section = NULL;
		if (p->rc) {
			const struct srt_rc_plugin *rp = srt_runtime_config_attention(p->rc, ratios[i]);
			name = rp ? rp->name : NULL;
			p->section = rp ? rp->section : NULL;
		}
		if (!name) {
			seterr(err, errlen, "model '%s': no attention plugin serves compress ratio %d "
			       "(%s)", model, ratios[i], p->rc ? "add ratio.N = <plugin> to [attention] "
			       "of the runtime config, or --set attention.ratio.N=<plugin>"
			       : "known: 0 swa, 4 csa, 128 hca");
			rc = SRT_ENOTSUP;
			goto fail;
		}
		if (p->n_inst == MAX_INST) {
			seterr(err, errlen, "model '%s': more than %d attention types", model, MAX_INST);
			rc = SRT_ENOTSUP;
			goto fail;
		}
		int32_t *lay = p->layers[p->n_inst];
		uint32_t nl = 0;
		/* every layer of the ratio, the MTP layer included (its KV is cached too) */
		for (int l = 0; l < g->model.n_compress_ratios; l++)
			if (g->model.compress_ratios[l] == ratios[i])
				lay[nl++] = l;
		const struct srt_plugin_info *info;
		if ((rc = srt_registry_find(p->reg, SRT_KIND_ATTENTION, name, &info, why, sizeof(why)))) {
			seterr(err, errlen, "attention plugin '%s': %s", name, why);
			goto fail;
		}
		struct srt_plugin_args args = {
			.struct_size = sizeof(args), .model = &g->model, .weights = NULL,
			.layers = lay, .n_layers = nl, .page_tokens = P,
			.profile = SRT_PROFILE_REFERENCE, .option = geo_option, .option_ctx = p,
			.role = name,
		};
		struct srt_instance *inst;
		if ((rc = srt_plugin_instantiate(info, p->host, &args, &inst, why, sizeof(why)))) {
			seterr(err, errlen, "%s", why); /* names the plugin and its file */
			goto fail;
		}
		p->inst[p->n_inst++] = inst;
		const struct srt_attention_vtable *vt = inst->vtable;
		const struct srt_pool_decl *decl;
		uint32_t n;
		if ((rc = vt->declare_pools(inst->ctx, &decl, &n))) {
			seterr(err, errlen, "attention plugin '%s': declare_pools failed (%d)", name, rc);
			goto fail;
		}
		if (g->n_pools + n > SRT_RDX_MAX_POOLS) {
			seterr(err, errlen, "more than %u pools declared", SRT_RDX_MAX_POOLS);
			rc = SRT_EINVAL;
			goto fail;
		}
		for (uint32_t k = 0; k < n; k++) {
			/* read min(struct_size, known) into a zeroed copy */
			struct srt_pool_decl d;
			memset(&d, 0, sizeof(d));
			size_t sz = decl[k].struct_size < sizeof(d) ? decl[k].struct_size : sizeof(d);
			memcpy(&d, &decl[k], sz);
			g->pools[g->n_pools++] = d;
		}
	}
	*out = g;
	return 0;
fail:
	srt_rdx_geometry_free(g);
	return rc;
}

uint64_t srt_rdx_geometry_seq_bytes(const struct srt_rdx_geometry *g, uint32_t P, uint64_t n,
				    uint64_t *all_bytes, uint64_t *tail_bytes)
{
	uint64_t a = 0, t = 0, pages = (n + P - 1) / P;
	for (uint32_t i = 0; i < g->n_pools; i++) {
		const struct srt_pool_decl *d = &g->pools[i];
		uint32_t r = d->ratio == SRT_RATIO_PAGE ? P : d->ratio;
		uint64_t page = (uint64_t)d->n_layers * (P / r) * d->entry_bytes;
		if (d->retention == SRT_RETAIN_ALL) {
			a += pages * page;
		} else {
			uint64_t k = (d->tail_tokens + P - 1) / P;
			t += (k < pages ? k : pages) * page;
		}
	}
	if (all_bytes)
		*all_bytes = a;
	if (tail_bytes)
		*tail_bytes = t;
	return a + t;
}
