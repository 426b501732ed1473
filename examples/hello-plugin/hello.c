/*
 * hello — an out-of-tree shadowrt plugin, built against the installed headers only.
 *
 * It is a residual-stream plugin (abi/shadowrt/residual.h) with one plain stream: the
 * sub-layer input is the stream itself and each sub-layer's output is added back, the
 * residual of a standard transformer. Small, but a complete plugin: a constant descriptor
 * behind the one exported entry symbol, a side-effect-free probe, create/destroy with the
 * host's allocator, and every required method of its kind.
 *
 * Build:   make                  (uses `pkg-config --cflags shadowrt-plugin`)
 * Try:     shadowrt plugins --plugin-dir .
 */
#include <stdio.h>
#include <string.h>

#include <shadowrt/shadowrt.h>

struct hello {
	const struct srt_host *host;
	size_t row_floats; /* hidden_size */
};

static uint32_t hello_n_streams(void *inst)
{
	(void)inst;
	return 1;
}

static uint32_t hello_mix_floats(void *inst)
{
	(void)inst;
	return 0;
}

static int hello_embed(void *inst, int32_t n_rows, const float *h, float *X)
{
	const struct hello *p = inst;
	memcpy(X, h, (size_t)n_rows * p->row_floats * sizeof(float));
	return 0;
}

static int hello_pre(void *inst, int32_t layer, uint32_t sublayer, int32_t n_rows,
		     const float *X, float *u, float *mix)
{
	const struct hello *p = inst;
	(void)layer;
	(void)sublayer;
	(void)mix;
	memcpy(u, X, (size_t)n_rows * p->row_floats * sizeof(float));
	return 0;
}

static int hello_post(void *inst, int32_t layer, uint32_t sublayer, int32_t n_rows,
		      const float *f, const float *mix, float *X)
{
	const struct hello *p = inst;
	(void)layer;
	(void)sublayer;
	(void)mix;
	for (size_t i = 0; i < (size_t)n_rows * p->row_floats; i++)
		X[i] += f[i];
	return 0;
}

static int hello_head(void *inst, int32_t n_rows, const float *X, float *y)
{
	const struct hello *p = inst;
	memcpy(y, X, (size_t)n_rows * p->row_floats * sizeof(float));
	return 0;
}

static const struct srt_residual_vtable hello_vtable = {
	.struct_size = sizeof(struct srt_residual_vtable),
	.n_streams = hello_n_streams,
	.mix_floats = hello_mix_floats,
	.embed = hello_embed,
	.pre = hello_pre,
	.post = hello_post,
	.head = hello_head,
};

static int hello_probe(const struct srt_host *host, char *why, size_t why_len)
{
	(void)host;
	(void)why;
	(void)why_len;
	return 0; /* plain C: runs anywhere */
}

static int hello_create(const struct srt_host *host, const struct srt_plugin_args *args,
			void **instance, char *why, size_t why_len)
{
	if (!args->model || args->model->hidden_size <= 0) {
		snprintf(why, why_len, "hello needs a model with hidden_size > 0");
		return SRT_EINVAL;
	}
	struct hello *p = host->alloc(sizeof(*p), 16);
	if (!p) {
		snprintf(why, why_len, "hello: out of memory");
		return SRT_ENOMEM;
	}
	p->host = host;
	p->row_floats = (size_t)args->model->hidden_size;
	host->log(SRT_LOG_INFO, "hello", "one plain stream of %zu floats", p->row_floats);
	*instance = p;
	return 0;
}

static void hello_destroy(void *instance)
{
	struct hello *p = instance;
	p->host->free(p);
}

/* The options it reads from its config section: none. Declaring the (empty) table makes the
 * core refuse any key a config sets in [residual] for it, naming the plugin (ABI 1.1). */
static const struct srt_plugin_option hello_options[] = {{NULL, NULL, NULL, NULL}};

static const struct srt_plugin_desc hello_desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_RESIDUAL,
	.name = "hello",
	.version = "1.0.0",
	.description = "example out-of-tree plugin: one plain residual stream",
	.caps = SRT_CAP_CPU | SRT_CAP_BATCH,
	.probe = hello_probe,
	.create = hello_create,
	.destroy = hello_destroy,
	.vtable = &hello_vtable,
	.options = hello_options,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &hello_desc;
}
