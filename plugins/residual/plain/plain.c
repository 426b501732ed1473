/*
 * plain — the ordinary pre-norm residual, one stream, for A/B runs against mhc.
 *
 *   embed: X = h;  pre: u = X;  post: X = X + f;  head: y = X.
 * In the `reference` profile the sum X + f is rounded to bf16 (the residual stream's dtype, as
 * mhc rounds its streams); `f32` keeps it in fp32. No weights, no mix floats.
 */
#include <shadowrt/shadowrt.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct plain_inst {
	const struct srt_host *host;
	int profile;
	int64_t d;
};

static inline float bf16_round(float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof(u));
	if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
		return v;
	u += 0x7fffu + ((u >> 16) & 1u);
	u &= 0xffff0000u;
	memcpy(&v, &u, sizeof(v));
	return v;
}

static int plain_create(const struct srt_host *host, const struct srt_plugin_args *args,
			void **instance, char *why, size_t why_len)
{
	struct plain_inst *in;
	*instance = NULL;
	if (!args->model || args->model->hidden_size < 1) {
		snprintf(why, why_len, "plain residual needs a model config with hidden_size >= 1");
		return SRT_EINVAL;
	}
	if (args->profile != SRT_PROFILE_REFERENCE && args->profile != SRT_PROFILE_F32) {
		snprintf(why, why_len, "unknown numerics profile %u (expected 0 reference or 1 f32)",
			 args->profile);
		return SRT_EINVAL;
	}
	in = host->alloc(sizeof(*in), 64);
	if (!in) {
		snprintf(why, why_len, "out of memory");
		return SRT_ENOMEM;
	}
	in->host = host;
	in->profile = (int)args->profile;
	in->d = args->model->hidden_size;
	*instance = in;
	return 0;
}

static void plain_destroy(void *instance)
{
	struct plain_inst *in = instance;
	if (in)
		in->host->free(in);
}

static uint32_t plain_n_streams(void *inst)
{
	(void)inst;
	return 1;
}

static uint32_t plain_mix_floats(void *inst)
{
	(void)inst;
	return 0;
}

static int plain_copy(void *inst, int32_t n_rows, const float *src, float *dst)
{
	struct plain_inst *in = inst;
	if (n_rows < 0)
		return SRT_EINVAL;
	if (n_rows > 0 && src != dst)
		memmove(dst, src, (size_t)n_rows * (size_t)in->d * sizeof(float));
	return 0;
}

static int plain_pre(void *inst, int32_t layer, uint32_t sublayer, int32_t n_rows, const float *X,
		     float *u, float *mix)
{
	(void)layer;
	(void)sublayer;
	(void)mix;
	return plain_copy(inst, n_rows, X, u);
}

static int plain_post(void *inst, int32_t layer, uint32_t sublayer, int32_t n_rows, const float *f,
		      const float *mix, float *X)
{
	struct plain_inst *in = inst;
	int64_t n = (int64_t)n_rows * in->d;
	(void)layer;
	(void)sublayer;
	(void)mix;
	if (n_rows < 0)
		return SRT_EINVAL;
	if (in->profile == SRT_PROFILE_REFERENCE)
		for (int64_t i = 0; i < n; i++)
			X[i] = bf16_round(X[i] + f[i]);
	else
		for (int64_t i = 0; i < n; i++)
			X[i] = X[i] + f[i];
	return 0;
}

static int plain_head(void *inst, int32_t n_rows, const float *X, float *y)
{
	return plain_copy(inst, n_rows, X, y);
}

static const struct srt_residual_vtable plain_vtable = {
	.struct_size = sizeof(struct srt_residual_vtable),
	.n_streams = plain_n_streams,
	.mix_floats = plain_mix_floats,
	.embed = plain_copy,
	.pre = plain_pre,
	.post = plain_post,
	.head = plain_head,
};

/* Options read from the plugin's runtime-config section (srt_plugin_desc.options). */
static const struct srt_plugin_option plain_options[] = {
	{NULL, NULL, NULL, NULL},
};

static const struct srt_plugin_desc plain_desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_RESIDUAL,
	.name = "plain",
	.version = "1.0.0",
	.description = "CPU plain residual: one stream, X + f (A/B baseline for mhc)",
	.caps = SRT_CAP_CPU | SRT_CAP_BATCH,
	.probe = NULL,
	.create = plain_create,
	.destroy = plain_destroy,
	.vtable = &plain_vtable,
	.options = plain_options,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &plain_desc;
}
