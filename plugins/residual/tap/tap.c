/*
 * tap — a residual-stream plugin that wraps another residual plugin (option `inner`: path of
 * its .so; its own options are passed through) and computes exactly what it computes, and
 * records, for every attention sub-layer and the head, the rows it hands on: the sub-layer
 * input u = pre(X) of each layer and the head output y. `shadowrt ab --layers` puts it in front
 * of each side's residual plugin and compares the records of A and B layer by layer.
 *
 * Record format (option `dump`: a file, truncated at create, appended and flushed per call):
 *   int32 layer (the model layer, or -1 for the head), int32 n_rows, float u[n_rows][hidden]
 * in call order; rows are the batch's rows (tokens) in order.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/shadowrt.h>

struct tap {
	const struct srt_host *host;
	const struct srt_plugin_desc *in_desc;
	const struct srt_residual_vtable *in_vt;
	void *in;
	FILE *dump;
	size_t d;
};

static const char *opt(const struct srt_plugin_args *a, const char *key)
{
	return a->option ? a->option(a->option_ctx, key) : NULL;
}

static int tap_create(const struct srt_host *host, const struct srt_plugin_args *args,
		      void **instance, char *why, size_t why_len)
{
	const char *inner = opt(args, "inner"), *dump = opt(args, "dump");
	if (!inner || !dump || !args->model) {
		snprintf(why, why_len, "tap: options inner=<residual plugin .so> and dump=<file> are "
			 "required");
		return SRT_EINVAL;
	}
	void *h = dlopen(inner, RTLD_NOW | RTLD_LOCAL);
	void *sym = h ? dlsym(h, SRT_PLUGIN_ENTRY_SYMBOL) : NULL;
	if (!sym) {
		snprintf(why, why_len, "tap: cannot load %s: %s", inner, dlerror());
		return SRT_EINVAL;
	}
	srt_plugin_entry_fn entry;
	memcpy(&entry, &sym, sizeof(entry));
	const struct srt_plugin_desc *d = entry();
	if (!d || d->kind != SRT_KIND_RESIDUAL || d->abi_major != SRT_ABI_MAJOR) {
		snprintf(why, why_len, "tap: %s is not a residual plugin of ABI %d", inner,
			 SRT_ABI_MAJOR);
		return SRT_EINVAL;
	}
	struct tap *t = host->alloc(sizeof(*t), 64);
	if (!t)
		return SRT_ENOMEM;
	memset(t, 0, sizeof(*t));
	t->host = host;
	t->in_desc = d;
	t->in_vt = d->vtable;
	t->d = (size_t)args->model->hidden_size;
	if (!(t->dump = fopen(dump, "wb"))) {
		snprintf(why, why_len, "tap: cannot write %s", dump);
		host->free(t);
		return SRT_EIO;
	}
	int rc = d->create(host, args, &t->in, why, why_len);
	if (rc) {
		fclose(t->dump);
		host->free(t);
		return rc;
	}
	*instance = t;
	return 0;
}

static void tap_destroy(void *inst)
{
	struct tap *t = inst;
	t->in_desc->destroy(t->in);
	fclose(t->dump);
	t->host->free(t);
}

static void record(struct tap *t, int32_t layer, int32_t n, const float *rows)
{
	int32_t hdr[2] = {layer, n};
	fwrite(hdr, sizeof(hdr), 1, t->dump);
	fwrite(rows, sizeof(float) * t->d, (size_t)n, t->dump);
	fflush(t->dump);
}

static uint32_t tap_n_streams(void *inst)
{
	struct tap *t = inst;
	return t->in_vt->n_streams(t->in);
}

static uint32_t tap_mix_floats(void *inst)
{
	struct tap *t = inst;
	return t->in_vt->mix_floats(t->in);
}

static int tap_embed(void *inst, int32_t n, const float *h, float *X)
{
	struct tap *t = inst;
	return t->in_vt->embed(t->in, n, h, X);
}

static int tap_pre(void *inst, int32_t layer, uint32_t sub, int32_t n, const float *X, float *u,
		   float *mix)
{
	struct tap *t = inst;
	int rc = t->in_vt->pre(t->in, layer, sub, n, X, u, mix);
	if (!rc && sub == SRT_SUBLAYER_ATTN)
		record(t, layer, n, u);
	return rc;
}

static int tap_post(void *inst, int32_t layer, uint32_t sub, int32_t n, const float *f,
		    const float *mix, float *X)
{
	struct tap *t = inst;
	return t->in_vt->post(t->in, layer, sub, n, f, mix, X);
}

static int tap_head(void *inst, int32_t n, const float *X, float *y)
{
	struct tap *t = inst;
	int rc = t->in_vt->head(t->in, n, X, y);
	if (!rc)
		record(t, -1, n, y);
	return rc;
}

static const struct srt_residual_vtable tap_vtable = {
	.struct_size = sizeof(struct srt_residual_vtable),
	.n_streams = tap_n_streams,
	.mix_floats = tap_mix_floats,
	.embed = tap_embed,
	.pre = tap_pre,
	.post = tap_post,
	.head = tap_head,
};

/* No table: the wrapped plugin's own options pass through unchecked. */
static const struct srt_plugin_desc tap_desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_RESIDUAL,
	.name = "tap",
	.version = "1.0.0",
	.description = "wraps a residual plugin (option inner) and records each layer's input "
		       "(option dump): ab --layers",
	.caps = SRT_CAP_CPU | SRT_CAP_BATCH,
	.create = tap_create,
	.destroy = tap_destroy,
	.vtable = &tap_vtable,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &tap_desc;
}
