/*
 * fp4 — the CPU MoE plugin: DeepSeek-V4's feed-forward sub-layer (spec section 4).
 *
 * Per row (token):
 *   xn = RMSNorm(x; ffn_norm)                                        bf16 in `reference`
 *   logits = W_gate . xn (fp32), s = sqrt(softplus(logits))
 *   experts = top-k of s + bias (ties -> lower index), or tid2eid[token] in hash layers
 *   w = s[experts] / sum(s[experts]) * routed_scaling_factor
 *   y = sum over experts, ascending id, of E_e(xn, w_e)  + E_shared(xn)   (fp32)
 *   out = y                                                          bf16 in `reference`
 * where E(x, w) = W2 . act(w * silu(min(W1 x, L)) * clamp(W3 x, -L, L)).
 *
 * `reference` profile (DeepSeek's kernels): every GEMM input is quantised to FP8 per 128 values
 * (moe_act_quant), GEMM outputs are rounded to bf16, h is rounded to bf16 before W2, products are
 * accumulated in fp32. `f32` profile: weights dequantised exactly, fp32 everywhere, no rounding.
 *
 * Batching: rows are grouped by expert; every weight row is decoded once per call (per chunk of
 * MOE_ROW_CHUNK rows) and applied to all rows routed to it. Each (row, output) value is one
 * moe_dot over that row's own data, and a row's expert outputs are summed in ascending expert
 * id, so a row's result is bitwise independent of the other rows in the batch.
 */
#include <shadowrt/shadowrt.h>

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_num.h"

#define MOE_NAME "fp4"
#define MOE_ROW_CHUNK 1024 /* rows per pass: bounds the scratch memory of a long prefill */

/* A quantised (or plain) weight matrix [rows][cols], borrowed from the checkpoint. */
enum moe_wfmt { MOE_W_FP4 = 0, MOE_W_FP8 = 1, MOE_W_BF16 = 2, MOE_W_F32 = 3 };

struct moe_qw {
	uint32_t fmt;          /* enum moe_wfmt */
	int64_t rows, cols;
	const uint8_t *data;   /* FP4: [rows][cols/2] packed; FP8: [rows][cols]; ... */
	const void *scale;     /* FP4: [rows][cols/32]; FP8: [ceil(rows/128)][ceil(cols/128)] */
	uint32_t scale_dt;     /* SRT_DT_F8_E8M0 or SRT_DT_F32 */
	int64_t scale_cols;
};

struct moe_layer {
	int32_t layer;
	int hash;
	float *norm;              /* [d], owned */
	float *gate;              /* [E][d], owned (fp32 copy of the bf16 router) */
	float *bias;              /* [E], owned; NULL in hash layers */
	const void *tid2eid;      /* [vocab][k], I32 or I64, borrowed; hash layers only */
	uint32_t tid_dt;
	int64_t tid_rows;
	struct moe_qw *experts;   /* [E][3]: w1, w2, w3 */
	struct moe_qw shared[3];  /* w1, w2, w3 */
};

/* One group of rows that go through the same expert. */
struct moe_group {
	const struct moe_qw *w;   /* [3] */
	int32_t first, count;     /* entries [first, first + count) of inst->ent_row / ent_slot */
	int routed;               /* 1: scale h by the routing weight */
};

struct moe_inst {
	const struct srt_host *host;
	int profile;
	int64_t d, inter, n_exp, topk;
	float route_scale, limit, eps;
	int32_t n_layers;
	struct moe_layer *layers;
	int32_t n_slots;          /* size of slot_of */
	int32_t *slot_of;         /* model layer -> index into layers, or -1 */
	float e2m1[16];
	float e4m3[256];

	/* Scratch of one call (one call at a time per instance). */
	size_t cap_rows;
	float *xn, *xa;           /* [chunk][d] normed input, GEMM input (quantised in reference) */
	int32_t *sel;             /* [chunk][k] */
	float *wt;                /* [chunk][k] */
	int32_t *ent_row;         /* [chunk*(k+1)] */
	int32_t *ent_slot;        /* [chunk*(k+1)]: slot in [0,k) or k for the shared expert */
	float *h;                 /* [chunk*(k+1)][inter] */
	float *y;                 /* [chunk][d] */
	int32_t *tok;             /* [n_rows] token id per row */
	size_t cap_tok;
	float *wrow;              /* [nthreads][2][max(d, inter)] decoded weight rows */
	struct moe_group *groups; /* [E + 1] */
	int32_t n_groups;

	/* Per-call parameters read by the parallel_for bodies. */
	const struct moe_layer *cur;
	const float *x;
	float *out;
	int64_t row0, m;
};

static void set_why(char *why, size_t why_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_why(char *why, size_t why_len, const char *fmt, ...)
{
	va_list ap;
	if (!why || !why_len)
		return;
	va_start(ap, fmt);
	vsnprintf(why, why_len, fmt, ap);
	va_end(ap);
}

static const char *dt_name(uint32_t dt)
{
	static const char *n[] = {"F32", "BF16", "F16", "F8_E4M3", "F8_E8M0",
				  "I8",  "I32",  "I64", "U8",      "F64"};
	return dt < SRT_DT_COUNT ? n[dt] : "?";
}

static void shape_str(char *buf, size_t len, const struct srt_tensor *t)
{
	size_t o = 0;
	o += (size_t)snprintf(buf + o, len - o, "[");
	for (uint32_t i = 0; i < t->ndim && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

/*
 * Look up `name` and check its dtype (one of the `ndt` in `dts`) and 1-D/2-D shape (d1 < 0:
 * 1-D). 0, or SRT_ENOENT / SRT_EINVAL with a message naming the tensor.
 */
static int get_tensor(const struct srt_weights *w, const char *name, const uint32_t *dts, int ndt,
		      int64_t d0, int64_t d1, struct srt_tensor *t, char *why, size_t why_len)
{
	char got[96];
	int ok = 0;
	if (w->get(w->ctx, name, t) != 0) {
		set_why(why, why_len, "tensor %s: not found in the checkpoint", name);
		return SRT_ENOENT;
	}
	for (int i = 0; i < ndt; i++)
		ok |= t->dtype == dts[i];
	if (!ok) {
		set_why(why, why_len, "tensor %s: expected dtype %s%s%s, got %s", name,
			dt_name(dts[0]), ndt > 1 ? " or " : "", ndt > 1 ? dt_name(dts[1]) : "",
			dt_name(t->dtype));
		return SRT_EINVAL;
	}
	if ((d1 < 0 && (t->ndim != 1 || t->shape[0] != d0)) ||
	    (d1 >= 0 && (t->ndim != 2 || t->shape[0] != d0 || t->shape[1] != d1))) {
		shape_str(got, sizeof(got), t);
		if (d1 < 0)
			set_why(why, why_len, "tensor %s: expected shape [%lld], got %s", name,
				(long long)d0, got);
		else
			set_why(why, why_len, "tensor %s: expected shape [%lld, %lld], got %s", name,
				(long long)d0, (long long)d1, got);
		return SRT_EINVAL;
	}
	return 0;
}

/* An fp32 copy of a BF16 or F32 tensor (1-D [d0] or 2-D [d0][d1]); *out from host->alloc. */
static int load_f32(const struct moe_inst *in, const struct srt_weights *w, const char *name,
		    int64_t d0, int64_t d1, float **out, char *why, size_t why_len)
{
	static const uint32_t dts[] = {SRT_DT_BF16, SRT_DT_F32};
	struct srt_tensor t;
	int64_t n = d0 * (d1 < 0 ? 1 : d1);
	int rc = get_tensor(w, name, dts, 2, d0, d1, &t, why, why_len);
	if (rc)
		return rc;
	*out = in->host->alloc((size_t)n * sizeof(float), 64);
	if (!*out) {
		set_why(why, why_len, "tensor %s: out of memory for %lld floats", name, (long long)n);
		return SRT_ENOMEM;
	}
	if (t.dtype == SRT_DT_F32) {
		memcpy(*out, t.data, (size_t)n * sizeof(float));
	} else {
		const uint16_t *b = t.data;
		for (int64_t i = 0; i < n; i++)
			(*out)[i] = moe_bf16_to_f32(b[i]);
	}
	return 0;
}

/*
 * Load the weight `<prefix>.weight` of logical shape [rows][cols] and its `<prefix>.scale`.
 * Accepted: packed FP4 (I8/U8 [rows][cols/2] + UE8M0 or F32 scale [rows][cols/32]), FP8 E4M3
 * ([rows][cols] + scale [ceil(rows/128)][ceil(cols/128)]), BF16 or F32 (no scale).
 */
static int load_qw(const struct srt_weights *w, const char *prefix, int64_t rows, int64_t cols,
		   struct moe_qw *q, char *why, size_t why_len)
{
	static const uint32_t sdts[] = {SRT_DT_F8_E8M0, SRT_DT_F32};
	char name[192], got[96];
	struct srt_tensor t, s;
	int64_t srows, scols;
	uint32_t dt;
	int rc;

	snprintf(name, sizeof(name), "%s.weight", prefix);
	if (w->get(w->ctx, name, &t) != 0) {
		set_why(why, why_len, "tensor %s: not found in the checkpoint", name);
		return SRT_ENOENT;
	}
	memset(q, 0, sizeof(*q));
	q->rows = rows;
	q->cols = cols;
	q->data = t.data;
	dt = t.dtype;
	switch (dt) {
	case SRT_DT_I8:
	case SRT_DT_U8:
		q->fmt = MOE_W_FP4;
		srows = rows;
		scols = cols / MOE_FP4_BLOCK;
		if (cols % MOE_FP4_BLOCK) {
			set_why(why, why_len, "tensor %s: FP4 width %lld is not a multiple of %d",
				name, (long long)cols, MOE_FP4_BLOCK);
			return SRT_EINVAL;
		}
		rc = get_tensor(w, name, &dt, 1, rows, cols / 2, &t, why, why_len);
		break;
	case SRT_DT_F8_E4M3:
		q->fmt = MOE_W_FP8;
		srows = (rows + 127) / 128;
		scols = (cols + 127) / 128;
		rc = get_tensor(w, name, &dt, 1, rows, cols, &t, why, why_len);
		break;
	case SRT_DT_BF16:
	case SRT_DT_F32:
		q->fmt = t.dtype == SRT_DT_BF16 ? MOE_W_BF16 : MOE_W_F32;
		return get_tensor(w, name, &dt, 1, rows, cols, &t, why, why_len);
	default:
		shape_str(got, sizeof(got), &t);
		set_why(why, why_len,
			"tensor %s: expected packed FP4 (I8), F8_E4M3, BF16 or F32, got %s %s", name,
			dt_name(t.dtype), got);
		return SRT_EINVAL;
	}
	if (rc)
		return rc;
	snprintf(name, sizeof(name), "%s.scale", prefix);
	rc = get_tensor(w, name, sdts, 2, srows, scols, &s, why, why_len);
	if (rc)
		return rc;
	q->scale = s.data;
	q->scale_dt = s.dtype;
	q->scale_cols = scols;
	return 0;
}

static inline float scale_at(const struct moe_qw *q, int64_t i)
{
	if (q->scale_dt == SRT_DT_F32)
		return ((const float *)q->scale)[i];
	return moe_e8m0_to_f32(((const uint8_t *)q->scale)[i]);
}

/* Decode row r of q into dst[q->cols] as exact fp32 values. */
static void decode_row(const struct moe_inst *in, const struct moe_qw *q, int64_t r, float *dst)
{
	int64_t K = q->cols;
	switch (q->fmt) {
	case MOE_W_FP4: {
		const uint8_t *p = q->data + r * (K / 2);
		for (int64_t b = 0; b < K / MOE_FP4_BLOCK; b++) {
			float s = scale_at(q, r * q->scale_cols + b);
			for (int j = 0; j < MOE_FP4_BLOCK / 2; j++) {
				uint8_t v = p[b * (MOE_FP4_BLOCK / 2) + j];
				dst[b * MOE_FP4_BLOCK + 2 * j] = in->e2m1[v & 15] * s;
				dst[b * MOE_FP4_BLOCK + 2 * j + 1] = in->e2m1[v >> 4] * s;
			}
		}
		break;
	}
	case MOE_W_FP8: {
		const uint8_t *p = q->data + r * K;
		for (int64_t b = 0; b < K; b += 128) {
			float s = scale_at(q, (r / 128) * q->scale_cols + b / 128);
			int64_t end = b + 128 < K ? b + 128 : K;
			for (int64_t k = b; k < end; k++)
				dst[k] = in->e4m3[p[k]] * s;
		}
		break;
	}
	case MOE_W_BF16: {
		const uint16_t *p = (const uint16_t *)q->data + r * K;
		for (int64_t k = 0; k < K; k++)
			dst[k] = moe_bf16_to_f32(p[k]);
		break;
	}
	default:
		memcpy(dst, (const float *)q->data + r * K, (size_t)K * sizeof(float));
		break;
	}
}

static void free_layer(const struct srt_host *host, struct moe_layer *l)
{
	host->free(l->norm);
	host->free(l->gate);
	host->free(l->bias);
	host->free(l->experts);
}

static void free_scratch(struct moe_inst *in)
{
	const struct srt_host *h = in->host;
	h->free(in->xn);
	h->free(in->xa);
	h->free(in->sel);
	h->free(in->wt);
	h->free(in->ent_row);
	h->free(in->ent_slot);
	h->free(in->h);
	h->free(in->y);
	in->xn = in->xa = in->wt = in->h = in->y = NULL;
	in->sel = in->ent_row = in->ent_slot = NULL;
	in->cap_rows = 0;
}

static void moe_destroy(void *instance)
{
	struct moe_inst *in = instance;
	if (!in)
		return;
	for (int32_t i = 0; i < in->n_layers; i++)
		free_layer(in->host, &in->layers[i]);
	free_scratch(in);
	in->host->free(in->tok);
	in->host->free(in->wrow);
	in->host->free(in->groups);
	in->host->free(in->layers);
	in->host->free(in->slot_of);
	in->host->free(in);
}

/* Tensor name prefix of model layer L: "layers.L" for the main stack, "mtp.J" after it. */
static void layer_prefix(const struct srt_model_config *m, int32_t L, char *buf, size_t len)
{
	if (L < m->num_hidden_layers)
		snprintf(buf, len, "layers.%d", L);
	else
		snprintf(buf, len, "mtp.%d", L - m->num_hidden_layers);
}

static int load_layer(struct moe_inst *in, const struct srt_plugin_args *args, int32_t L,
		      struct moe_layer *l, char *why, size_t why_len)
{
	static const uint32_t tid_dts[] = {SRT_DT_I32, SRT_DT_I64};
	static const char *wn[3] = {"w1", "w2", "w3"};
	const struct srt_weights *w = args->weights;
	char pre[32], name[192];
	struct srt_tensor t;
	int rc;

	memset(l, 0, sizeof(*l));
	l->layer = L;
	l->hash = L < args->model->num_hash_layers;
	layer_prefix(args->model, L, pre, sizeof(pre));

	snprintf(name, sizeof(name), "%s.ffn_norm.weight", pre);
	if ((rc = load_f32(in, w, name, in->d, -1, &l->norm, why, why_len)))
		return rc;
	snprintf(name, sizeof(name), "%s.ffn.gate.weight", pre);
	if ((rc = load_f32(in, w, name, in->n_exp, in->d, &l->gate, why, why_len)))
		return rc;
	if (l->hash) {
		snprintf(name, sizeof(name), "%s.ffn.gate.tid2eid", pre);
		if (w->get(w->ctx, name, &t) != 0) {
			set_why(why, why_len, "tensor %s: not found (layer %d is hash-routed: "
				"num_hash_layers = %d)", name, L, args->model->num_hash_layers);
			return SRT_ENOENT;
		}
		rc = get_tensor(w, name, tid_dts, 2, t.shape[0], in->topk, &t, why, why_len);
		if (rc)
			return rc;
		l->tid2eid = t.data;
		l->tid_dt = t.dtype;
		l->tid_rows = t.shape[0];
	} else {
		snprintf(name, sizeof(name), "%s.ffn.gate.bias", pre);
		if ((rc = load_f32(in, w, name, in->n_exp, -1, &l->bias, why, why_len)))
			return rc;
	}

	l->experts = in->host->alloc((size_t)in->n_exp * 3 * sizeof(struct moe_qw), 64);
	if (!l->experts) {
		set_why(why, why_len, "layer %d: out of memory for the expert table", L);
		return SRT_ENOMEM;
	}
	for (int64_t e = 0; e < in->n_exp; e++) {
		for (int j = 0; j < 3; j++) {
			int64_t rows = j == 1 ? in->d : in->inter, cols = j == 1 ? in->inter : in->d;
			snprintf(name, sizeof(name), "%s.ffn.experts.%lld.%s", pre, (long long)e, wn[j]);
			rc = load_qw(w, name, rows, cols, &l->experts[e * 3 + j], why, why_len);
			if (rc)
				return rc;
		}
	}
	for (int j = 0; j < 3; j++) {
		int64_t rows = j == 1 ? in->d : in->inter, cols = j == 1 ? in->inter : in->d;
		snprintf(name, sizeof(name), "%s.ffn.shared_experts.%s", pre, wn[j]);
		if ((rc = load_qw(w, name, rows, cols, &l->shared[j], why, why_len)))
			return rc;
	}
	return 0;
}

static int moe_create(const struct srt_host *host, const struct srt_plugin_args *args,
		      void **instance, char *why, size_t why_len)
{
	const struct srt_model_config *m = args->model;
	struct moe_inst *in;
	int32_t all_layers;
	int rc = SRT_ENOMEM;

	*instance = NULL;
	if (!m || !args->weights) {
		set_why(why, why_len, "moe plugin needs a model config and weights");
		return SRT_EINVAL;
	}
	if (args->profile != SRT_PROFILE_REFERENCE && args->profile != SRT_PROFILE_F32) {
		set_why(why, why_len, "unknown numerics profile %u (expected 0 reference or 1 f32)",
			args->profile);
		return SRT_EINVAL;
	}
	if (m->hidden_size <= 0 || m->hidden_size % MOE_ACT_BLOCK ||
	    m->moe_intermediate_size <= 0 || m->moe_intermediate_size % MOE_ACT_BLOCK) {
		set_why(why, why_len, "model %s: hidden_size %d and moe_intermediate_size %d must be "
			"positive multiples of %d (activation quantisation blocks)", m->name,
			m->hidden_size, m->moe_intermediate_size, MOE_ACT_BLOCK);
		return SRT_EINVAL;
	}
	if (m->n_routed_experts <= 0 || m->num_experts_per_tok <= 0 ||
	    m->num_experts_per_tok > m->n_routed_experts) {
		set_why(why, why_len, "model %s: num_experts_per_tok %d must be in [1, "
			"n_routed_experts = %d]", m->name, m->num_experts_per_tok,
			m->n_routed_experts);
		return SRT_EINVAL;
	}
	if (m->n_shared_experts != 1) {
		set_why(why, why_len, "model %s: n_shared_experts is %d, this plugin supports 1",
			m->name, m->n_shared_experts);
		return SRT_EINVAL;
	}

	in = host->alloc(sizeof(*in), 64);
	if (!in) {
		set_why(why, why_len, "out of memory");
		return SRT_ENOMEM;
	}
	memset(in, 0, sizeof(*in));
	in->host = host;
	in->profile = (int)args->profile;
	in->d = m->hidden_size;
	in->inter = m->moe_intermediate_size;
	in->n_exp = m->n_routed_experts;
	in->topk = m->num_experts_per_tok;
	in->route_scale = (float)m->routed_scaling_factor;
	in->limit = (float)m->swiglu_limit;
	in->eps = (float)m->rms_norm_eps;
	for (int i = 0; i < 16; i++) {
		static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
		in->e2m1[i] = i < 8 ? mag[i] : -mag[i - 8];
	}
	for (int i = 0; i < 256; i++)
		in->e4m3[i] = moe_e4m3_to_f32((uint8_t)i);

	all_layers = m->num_hidden_layers + m->num_nextn_predict_layers;
	in->n_slots = all_layers;
	in->slot_of = host->alloc((size_t)(all_layers > 0 ? all_layers : 1) * sizeof(int32_t), 64);
	in->n_layers = args->layers ? (int32_t)args->n_layers : m->num_hidden_layers;
	in->layers = host->alloc((size_t)(in->n_layers > 0 ? in->n_layers : 1) *
				 sizeof(struct moe_layer), 64);
	if (!in->slot_of || !in->layers) {
		set_why(why, why_len, "out of memory");
		goto out_free;
	}
	memset(in->layers, 0, (size_t)in->n_layers * sizeof(struct moe_layer));
	for (int32_t i = 0; i < all_layers; i++)
		in->slot_of[i] = -1;
	for (int32_t i = 0; i < in->n_layers; i++) {
		int32_t L = args->layers ? args->layers[i] : i;
		if (L < 0 || L >= all_layers) {
			set_why(why, why_len, "layer %d out of range [0, %d)", L, all_layers);
			rc = SRT_EINVAL;
			goto out_free;
		}
		if (in->slot_of[L] >= 0) {
			set_why(why, why_len, "layer %d listed twice", L);
			rc = SRT_EINVAL;
			goto out_free;
		}
		in->slot_of[L] = i;
		if ((rc = load_layer(in, args, L, &in->layers[i], why, why_len)))
			goto out_free;
	}
	{
		int64_t wmax = in->d > in->inter ? in->d : in->inter;
		int nt = host->nthreads > 0 ? host->nthreads : 1;
		in->wrow = host->alloc((size_t)nt * 2 * (size_t)wmax * sizeof(float), 64);
		in->groups = host->alloc((size_t)(in->n_exp + 1) * sizeof(struct moe_group), 64);
		if (!in->wrow || !in->groups) {
			set_why(why, why_len, "out of memory");
			rc = SRT_ENOMEM;
			goto out_free;
		}
	}
	*instance = in;
	return 0;

out_free:
	moe_destroy(in);
	return rc;
}

/* Grow the per-call scratch to hold `rows` rows. */
static int ensure_scratch(struct moe_inst *in, size_t rows)
{
	const struct srt_host *h = in->host;
	size_t ent = rows * (size_t)(in->topk + 1);
	if (rows <= in->cap_rows)
		return 0;
	free_scratch(in);
	in->xn = h->alloc(rows * (size_t)in->d * sizeof(float), 64);
	in->xa = h->alloc(rows * (size_t)in->d * sizeof(float), 64);
	in->y = h->alloc(rows * (size_t)in->d * sizeof(float), 64);
	in->sel = h->alloc(rows * (size_t)in->topk * sizeof(int32_t), 64);
	in->wt = h->alloc(rows * (size_t)in->topk * sizeof(float), 64);
	in->ent_row = h->alloc(ent * sizeof(int32_t), 64);
	in->ent_slot = h->alloc(ent * sizeof(int32_t), 64);
	in->h = h->alloc(ent * (size_t)in->inter * sizeof(float), 64);
	if (!in->xn || !in->xa || !in->y || !in->sel || !in->wt || !in->ent_row ||
	    !in->ent_slot || !in->h) {
		free_scratch(in);
		return SRT_ENOMEM;
	}
	in->cap_rows = rows;
	return 0;
}

static inline float softplus_sqrt(float l)
{
	/* torch.nn.functional.softplus (beta 1, threshold 20), then sqrt */
	return sqrtf(l > 20.0f ? l : log1pf(expf(l)));
}

/* Phase 1, per row: ffn_norm, GEMM input, router. */
static void route_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	const struct moe_layer *l = in->cur;
	int64_t d = in->d, E = in->n_exp, k = in->topk;
	int ref = in->profile == SRT_PROFILE_REFERENCE;
	float scores[E], biased[E];
	char taken[E];
	(void)tid;

	for (int64_t i = begin; i < end; i++) {
		const float *x = in->x + (in->row0 + i) * d;
		float *xn = in->xn + i * d, *xa = in->xa + i * d;
		int32_t *sel = in->sel + i * k;
		float *wt = in->wt + i * k, sum = 0.0f;

		float r = 1.0f / sqrtf(moe_dot(x, x, d) / (float)d + in->eps);
		for (int64_t j = 0; j < d; j++) {
			float v = l->norm[j] * (x[j] * r);
			xn[j] = ref ? moe_bf16_round(v) : v;
		}
		memcpy(xa, xn, (size_t)d * sizeof(float));
		if (ref)
			moe_act_quant(xa, d);

		for (int64_t e = 0; e < E; e++) {
			scores[e] = softplus_sqrt(moe_dot(xn, l->gate + e * d, d));
			biased[e] = l->bias ? scores[e] + l->bias[e] : scores[e];
		}
		if (l->hash) {
			int64_t t = in->tok[in->row0 + i];
			for (int64_t j = 0; j < k; j++)
				sel[j] = l->tid_dt == SRT_DT_I32
						 ? ((const int32_t *)l->tid2eid)[t * k + j]
						 : (int32_t)((const int64_t *)l->tid2eid)[t * k + j];
		} else {
			/* top-k, descending; equal values keep the lower expert index first, NaN last */
			for (int64_t e = 0; e < E; e++)
				taken[e] = 0;
			for (int64_t j = 0; j < k; j++) {
				int64_t best = -1;
				for (int64_t e = 0; e < E; e++) {
					if (taken[e])
						continue;
					if (best < 0 || biased[e] > biased[best] ||
					    (isnan(biased[best]) && !isnan(biased[e])))
						best = e;
				}
				sel[j] = (int32_t)best;
				taken[best] = 1;
			}
		}
		for (int64_t j = 0; j < k; j++)
			sum += scores[sel[j]];
		for (int64_t j = 0; j < k; j++)
			wt[j] = scores[sel[j]] / sum * in->route_scale;
	}
}

/* Locate flat index j in [0, n_groups * per) as (group, index within the group). */
static inline const struct moe_group *group_of(const struct moe_inst *in, int64_t j, int64_t per,
					       int64_t *idx)
{
	*idx = j % per;
	return &in->groups[j / per];
}

/* Phase 2, per (group, inner channel n): h = routing weight * silu(gate) * up. */
static void up_gate(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	int64_t d = in->d, I = in->inter, wmax = d > I ? d : I;
	int ref = in->profile == SRT_PROFILE_REFERENCE;
	float L = in->limit;
	float *w1 = in->wrow + (size_t)tid * 2 * wmax, *w3 = w1 + wmax;

	for (int64_t j = begin; j < end; j++) {
		int64_t n;
		const struct moe_group *g = group_of(in, j, I, &n);
		decode_row(in, &g->w[0], n, w1);
		decode_row(in, &g->w[2], n, w3);
		for (int32_t e = g->first; e < g->first + g->count; e++) {
			int32_t row = in->ent_row[e];
			const float *a = in->xa + (int64_t)row * d;
			float gt = moe_dot(a, w1, d), up = moe_dot(a, w3, d), hv;
			if (ref) {
				gt = moe_bf16_round(gt);
				up = moe_bf16_round(up);
			}
			if (L > 0.0f) {
				up = fminf(fmaxf(up, -L), L);
				gt = fminf(gt, L);
			}
			hv = gt / (1.0f + expf(-gt)) * up;
			if (g->routed)
				hv = in->wt[(int64_t)row * in->topk + in->ent_slot[e]] * hv;
			in->h[(int64_t)e * I + n] = hv;
		}
	}
}

/* Phase 3, per entry (reference only): h rounded to bf16, then FP8-quantised per 128. */
static void quant_h(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	int64_t I = in->inter;
	(void)tid;
	for (int64_t e = begin; e < end; e++) {
		float *h = in->h + e * I;
		for (int64_t n = 0; n < I; n++)
			h[n] = moe_bf16_round(h[n]);
		moe_act_quant(h, I);
	}
}

/*
 * Phase 4, per output channel n: y[row][n] = sum over the row's groups in ascending expert id
 * (shared last) of W2[n] . h, then the output rounding.
 */
static void down(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	int64_t d = in->d, I = in->inter, wmax = d > I ? d : I;
	int ref = in->profile == SRT_PROFILE_REFERENCE;
	float *w2 = in->wrow + (size_t)tid * 2 * wmax;

	for (int64_t n = begin; n < end; n++) {
		for (int64_t i = 0; i < in->m; i++)
			in->y[i * d + n] = 0.0f;
		for (int32_t gi = 0; gi < in->n_groups; gi++) {
			const struct moe_group *g = &in->groups[gi];
			decode_row(in, &g->w[1], n, w2);
			for (int32_t e = g->first; e < g->first + g->count; e++) {
				float v = moe_dot(in->h + (int64_t)e * I, w2, I);
				in->y[(int64_t)in->ent_row[e] * d + n] += ref ? moe_bf16_round(v) : v;
			}
		}
		for (int64_t i = 0; i < in->m; i++) {
			float v = in->y[i * d + n];
			in->out[(in->row0 + i) * d + n] = ref ? moe_bf16_round(v) : v;
		}
	}
}

/* Bucket the rows of the chunk by expert (ascending id), then the shared expert. */
static void build_groups(struct moe_inst *in)
{
	int64_t E = in->n_exp, k = in->topk, m = in->m;
	int32_t pos = 0;
	in->n_groups = 0;
	for (int64_t e = 0; e < E; e++) {
		int32_t first = pos;
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < k; j++)
				if (in->sel[i * k + j] == e) {
					in->ent_row[pos] = (int32_t)i;
					in->ent_slot[pos] = (int32_t)j;
					pos++;
				}
		if (pos > first)
			in->groups[in->n_groups++] = (struct moe_group){
				.w = &in->cur->experts[e * 3], .first = first,
				.count = pos - first, .routed = 1};
	}
	in->groups[in->n_groups++] = (struct moe_group){
		.w = in->cur->shared, .first = pos, .count = (int32_t)m, .routed = 0};
	for (int64_t i = 0; i < m; i++) {
		in->ent_row[pos] = (int32_t)i;
		in->ent_slot[pos] = (int32_t)k;
		pos++;
	}
}

/* Token id of every row, checked against tid2eid and the batch layout. */
static int gather_tokens(struct moe_inst *in, const struct moe_layer *l,
			 const struct srt_batch *b, char *why, size_t why_len)
{
	int64_t n = b->n_rows;
	if ((size_t)n > in->cap_tok) {
		in->host->free(in->tok);
		in->tok = in->host->alloc((size_t)n * sizeof(int32_t), 64);
		in->cap_tok = in->tok ? (size_t)n : 0;
		if (!in->tok) {
			set_why(why, why_len, "out of memory for %lld token ids", (long long)n);
			return SRT_ENOMEM;
		}
	}
	for (int64_t i = 0; i < n; i++)
		in->tok[i] = -1;
	for (uint32_t s = 0; s < b->n_seqs; s++) {
		const struct srt_seq_view *sv = &b->seqs[s];
		if (sv->first_row < 0 || sv->n_tokens < 0 || sv->first_row + sv->n_tokens > n ||
		    (sv->n_tokens > 0 && !sv->token_ids)) {
			set_why(why, why_len, "batch sequence %u: rows [%d, %d) outside the batch's %lld "
				"rows or no token ids", s, sv->first_row,
				sv->first_row + sv->n_tokens, (long long)n);
			return SRT_EINVAL;
		}
		for (int32_t t = 0; t < sv->n_tokens; t++)
			in->tok[sv->first_row + t] = sv->token_ids[t];
	}
	for (int64_t i = 0; i < n; i++) {
		int64_t t = in->tok[i];
		if (t < 0 || t >= l->tid_rows) {
			set_why(why, why_len, "layer %d (hash-routed): row %lld has token id %lld, "
				"expected one in [0, %lld) from the batch's sequences", l->layer,
				(long long)i, (long long)t, (long long)l->tid_rows);
			return SRT_EINVAL;
		}
		for (int64_t j = 0; j < in->topk; j++) {
			int64_t e = l->tid_dt == SRT_DT_I32
					    ? ((const int32_t *)l->tid2eid)[t * in->topk + j]
					    : ((const int64_t *)l->tid2eid)[t * in->topk + j];
			if (e < 0 || e >= in->n_exp) {
				set_why(why, why_len, "layer %d: ffn.gate.tid2eid[%lld][%lld] = %lld, "
					"expected an expert in [0, %lld)", l->layer, (long long)t,
					(long long)j, (long long)e, (long long)in->n_exp);
				return SRT_ECORRUPT;
			}
		}
	}
	return 0;
}

static int moe_forward(void *inst, int32_t layer, const struct srt_batch *batch, const float *x,
		       float *out, char *why, size_t why_len)
{
	struct moe_inst *in = inst;
	const struct moe_layer *l;
	int64_t n;
	int rc;

	if (layer < 0 || layer >= in->n_slots || in->slot_of[layer] < 0) {
		set_why(why, why_len, "layer %d is not served by this moe instance", layer);
		return SRT_EINVAL;
	}
	if (!batch || batch->n_rows < 0 || (batch->n_rows > 0 && (!x || !out))) {
		set_why(why, why_len, "layer %d: invalid batch or NULL activations", layer);
		return SRT_EINVAL;
	}
	if (batch->mem != SRT_MEM_HOST) {
		set_why(why, why_len, "layer %d: activations must be in host memory (cpu plugin)",
			layer);
		return SRT_ENOTSUP;
	}
	l = &in->layers[in->slot_of[layer]];
	n = batch->n_rows;
	if (n == 0)
		return 0;
	if (l->hash && (rc = gather_tokens(in, l, batch, why, why_len)))
		return rc;
	if (ensure_scratch(in, (size_t)(n < MOE_ROW_CHUNK ? n : MOE_ROW_CHUNK))) {
		set_why(why, why_len, "layer %d: out of memory for the scratch of %lld rows", layer,
			(long long)n);
		return SRT_ENOMEM;
	}
	in->cur = l;
	in->x = x;
	in->out = out;
	for (int64_t r0 = 0; r0 < n; r0 += MOE_ROW_CHUNK) {
		in->row0 = r0;
		in->m = n - r0 < MOE_ROW_CHUNK ? n - r0 : MOE_ROW_CHUNK;
		in->host->parallel_for(in->m, route_rows, in);
		build_groups(in);
		in->host->parallel_for((int64_t)in->n_groups * in->inter, up_gate, in);
		if (in->profile == SRT_PROFILE_REFERENCE)
			in->host->parallel_for(in->m * (in->topk + 1), quant_h, in);
		in->host->parallel_for(in->d, down, in);
	}
	return 0;
}

static const struct srt_moe_vtable moe_vtable = {
	.struct_size = sizeof(struct srt_moe_vtable),
	.forward = moe_forward,
};

static const struct srt_plugin_desc moe_desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_MOE,
	.name = MOE_NAME,
	.version = "1.0.0",
	.description = "CPU MoE: FP4 routed experts (FP8 activations) + FP8 shared expert, "
		       "hash and score routing",
	.caps = SRT_CAP_CPU | SRT_CAP_BATCH,
	.probe = NULL,
	.create = moe_create,
	.destroy = moe_destroy,
	.vtable = &moe_vtable,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &moe_desc;
}
