/*
 * Attention instances: options, pool declarations, weight loading and the entry codecs
 * (see attn.h). The kernels are in attn_forward.c.
 */
#include "attn.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "attn_dot.h"
#include "attn_util.h"
#include "ops/fp.h"
#include "ops/gemm.h"
#include "ops/quant.h"
#include "ops/rope.h"

void srt_attn_why(char *why, size_t why_len, const char *fmt, ...)
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

/* ---- options and pools ------------------------------------------------------------------ */

static const char *option(const struct srt_plugin_args *a, const char *key)
{
	return a->option ? a->option(a->option_ctx, key) : NULL;
}

/* kv_dtype / index_dtype value -> store; `allow_fp4` for indexer keys. */
static int parse_store(const char *name, const char *key, const char *v, int ref, int allow_fp4,
		       int *out, char *why, size_t why_len)
{
	if (!v || !strcmp(v, "auto"))
		*out = ref ? (allow_fp4 ? SRT_ATTN_ST_FP4 : SRT_ATTN_ST_FP8) : SRT_ATTN_ST_F32;
	else if (!strcmp(v, "bf16"))
		*out = SRT_ATTN_ST_BF16;
	else if (!strcmp(v, "fp8"))
		*out = SRT_ATTN_ST_FP8;
	else if (!strcmp(v, "f32"))
		*out = SRT_ATTN_ST_F32;
	else if (allow_fp4 && !strcmp(v, "fp4"))
		*out = SRT_ATTN_ST_FP4;
	else {
		srt_attn_why(why, why_len, "%s: option %s: '%s' is not one of auto, bf16, fp8, %sf32",
			     name, key, v, allow_fp4 ? "fp4, " : "");
		return SRT_EINVAL;
	}
	return 0;
}

static uint64_t kv_entry_bytes(int st, int w, int rope)
{
	uint64_t nope = (uint64_t)(w - rope);
	switch (st) {
	case SRT_ATTN_ST_BF16:
		return 2u * (uint64_t)w;
	case SRT_ATTN_ST_FP8:
		return (nope + 2u * (uint64_t)rope + nope / 64 + 7) & ~(uint64_t)7;
	default:
		return 4u * (uint64_t)w;
	}
}

static uint64_t ix_entry_bytes(int st, int d)
{
	switch (st) {
	case SRT_ATTN_ST_BF16:
		return 2u * (uint64_t)d;
	case SRT_ATTN_ST_FP8:
		return (uint64_t)d + 4;
	case SRT_ATTN_ST_FP4:
		return (uint64_t)d / 2 + (uint64_t)d / 32;
	default:
		return 4u * (uint64_t)d;
	}
}

static void pool(struct srt_attn *a, const char *suffix, uint32_t ratio, uint32_t retention,
		 uint32_t tail, uint64_t bytes)
{
	struct srt_pool_decl *d = &a->pools[a->n_pools++];
	memset(d, 0, sizeof(*d));
	d->struct_size = sizeof(*d);
	snprintf(d->name, sizeof(d->name), "%s.%s", a->name, suffix);
	d->ratio = ratio;
	d->retention = retention;
	d->tail_tokens = tail;
	d->entry_bytes = bytes;
	d->n_layers = a->n_layers;
	d->layers = a->layers;
}

uint64_t srt_attn_ring_bytes(const struct srt_attn *a, int ratio, int width)
{
	(void)a;
	if (ratio == 4) /* 8 rows of (kv, score), 2 * width each */
		return 8u * 2u * (uint64_t)(2 * width) * 4u;
	return 3u * (uint64_t)width * 4u; /* online (max, sum, weighted kv) per channel */
}

uint64_t srt_attn_pend_off(const struct srt_attn *a)
{
	const struct srt_model_config *m = a->m;
	if (a->ratio == 4)
		return srt_attn_ring_bytes(a, 4, m->head_dim) + srt_attn_ring_bytes(a, 4, m->index_head_dim);
	return srt_attn_ring_bytes(a, a->ratio, m->head_dim);
}

uint64_t srt_attn_pend_bytes(const struct srt_attn *a)
{
	return 2u * sizeof(int64_t) + (uint64_t)(SRT_ATTN_CG - 1) * (uint64_t)a->m->hidden_size * 4u;
}

static int declare(struct srt_attn *a, const struct srt_plugin_args *args, char *why,
		   size_t why_len)
{
	const struct srt_model_config *m = a->m;
	int rc = parse_store(a->name, "kv_dtype", option(args, "kv_dtype"), a->ref, 0,
			     &a->kv_store, why, why_len);
	if (!rc && a->ratio == 4) {
		/* index_dtype absent: as an explicit kv_dtype (bf16 / fp8 / f32), else auto */
		const char *ix = option(args, "index_dtype"), *kv = option(args, "kv_dtype");
		if (!ix && kv && strcmp(kv, "auto"))
			ix = kv;
		rc = parse_store(a->name, "index_dtype", ix, a->ref, 1, &a->ix_store, why, why_len);
	}
	if (rc)
		return rc;
	{
		/* auto: paired where it pays, the reference profile on a kernel set that reads
		 * the layout natively (the f32 profile's products would copy rows back) */
		const char *v = option(args, "fp8_layout");
		if (srt_weight_fp8_layout_option(v, a->ref, &a->fp8_paired, &a->fp8_must)) {
			srt_attn_why(why, why_len, "%s: option fp8_layout: '%s' is not one of auto, "
				     "paired, rows", a->name, v);
			return SRT_EINVAL;
		}
	}
	if (m->head_dim <= m->qk_rope_head_dim || (m->head_dim - m->qk_rope_head_dim) % 64 ||
	    m->qk_rope_head_dim % 2 || m->qk_rope_head_dim > 256 || m->head_dim > 1024) {
		srt_attn_why(why, why_len, "%s: head_dim %d with qk_rope_head_dim %d: the nope part "
			     "must be a positive multiple of 64, the rope part even and <= 256, head_dim <= 1024",
			     a->name, m->head_dim, m->qk_rope_head_dim);
		return SRT_EINVAL;
	}
	if (a->ratio == 4 && (m->index_head_dim % 32 || m->index_head_dim < m->qk_rope_head_dim ||
			      (m->index_head_dim & (m->index_head_dim - 1)) || m->index_head_dim > 1024)) {
		srt_attn_why(why, why_len, "%s: index_head_dim %d must be a power of two <= 1024, a "
			     "multiple of 32 and >= qk_rope_head_dim %d", a->name, m->index_head_dim,
			     m->qk_rope_head_dim);
		return SRT_EINVAL;
	}
	/* a declaration-only instance reports any page size; the cache refuses bad ones */
	if (args->weights && (a->P == 0 || (a->ratio && a->P % (uint32_t)a->ratio))) {
		srt_attn_why(why, why_len, "%s: page_tokens %u: must be positive%s", a->name, a->P,
			     a->ratio == 4 ? " and a multiple of 4"
			     : a->ratio == 128 ? " and a multiple of 128" : "");
		return SRT_EINVAL;
	}
	a->kv_bytes = kv_entry_bytes(a->kv_store, m->head_dim, m->qk_rope_head_dim);
	a->pool_win = a->pool_comp = a->pool_ix = a->pool_state = -1;
	a->pool_win = (int)a->n_pools;
	/* window KV: a page keeps a ring of the last W rows of its P tokens (what a resume at
	 * its end reads), declared as ratio P / W so that the core sizes the page W entries;
	 * the rows of a call live in its scratch until its attention is done (attn_forward.c).
	 * A window that does not divide the page size keeps one entry per token. */
	uint32_t W = (uint32_t)m->sliding_window, wr = 1;
	if (a->P && W && a->P % W == 0)
		wr = a->P / W;
	a->win_ring = a->P / wr;
	pool(a, "window", wr, SRT_RETAIN_TAIL, W, a->kv_bytes);
	if (a->ratio == 4) {
		a->ix_bytes = ix_entry_bytes(a->ix_store, m->index_head_dim);
		a->state_bytes = srt_attn_pend_off(a) + srt_attn_pend_bytes(a);
		a->pool_comp = (int)a->n_pools;
		pool(a, "c4_kv", 4, SRT_RETAIN_ALL, 0, a->kv_bytes);
		a->pool_ix = (int)a->n_pools;
		pool(a, "c4_index", 4, SRT_RETAIN_ALL, 0, a->ix_bytes);
		a->pool_state = (int)a->n_pools;
		pool(a, "c4_state", SRT_RATIO_PAGE, SRT_RETAIN_TAIL, 1, a->state_bytes);
	} else if (a->ratio == 128) {
		a->state_bytes = srt_attn_pend_off(a) + srt_attn_pend_bytes(a);
		a->pool_comp = (int)a->n_pools;
		pool(a, "c128_kv", 128, SRT_RETAIN_ALL, 0, a->kv_bytes);
		a->pool_state = (int)a->n_pools;
		pool(a, "c128_state", SRT_RATIO_PAGE, SRT_RETAIN_TAIL, 1, a->state_bytes);
	}
	return 0;
}

/* The layers served: args->layers (each of this ratio) or every layer of this ratio. */
static int pick_layers(struct srt_attn *a, const struct srt_plugin_args *args, char *why,
		       size_t why_len)
{
	const struct srt_model_config *m = a->m;
	uint32_t cnt = 0;
	if (args->layers) {
		for (uint32_t i = 0; i < args->n_layers; i++) {
			int32_t l = args->layers[i];
			int r = l >= 0 && l < m->n_compress_ratios ? m->compress_ratios[l] : -1;
			if (r != a->ratio) {
				srt_attn_why(why, why_len, "%s: layer %d has compress ratio %d, this "
					     "plugin serves ratio %d", a->name, l, r, a->ratio);
				return SRT_EINVAL;
			}
		}
		cnt = args->n_layers;
	} else {
		for (int32_t l = 0; l < m->n_compress_ratios; l++)
			cnt += m->compress_ratios[l] == a->ratio;
	}
	if (!cnt) {
		srt_attn_why(why, why_len, "%s: no layer of compress ratio %d to serve", a->name,
			     a->ratio);
		return SRT_EINVAL;
	}
	a->layers = a->host->alloc(cnt * sizeof(int32_t), 16);
	if (!a->layers) {
		srt_attn_why(why, why_len, "%s: out of memory", a->name);
		return SRT_ENOMEM;
	}
	if (args->layers) {
		memcpy(a->layers, args->layers, cnt * sizeof(int32_t));
	} else {
		uint32_t k = 0;
		for (int32_t l = 0; l < m->n_compress_ratios; l++)
			if (m->compress_ratios[l] == a->ratio)
				a->layers[k++] = l;
	}
	a->n_layers = cnt;
	return 0;
}

/* ---- weights ------------------------------------------------------------------------------- */

struct loader {
	struct srt_attn *a;
	const struct srt_weights *w;
	char prefix[64]; /* "layers.L.attn." or "mtp.J.attn." */
	char *why;
	size_t why_len;
};

static int get(struct loader *ld, const char *name, const uint32_t *dts, int ndt, int64_t d0,
	       int64_t d1, struct srt_tensor *t)
{
	int ok = 0;
	if (ld->w->get(ld->w->ctx, name, t) != 0) {
		srt_attn_why(ld->why, ld->why_len, "%s: tensor %s: not found in the checkpoint",
			     ld->a->name, name);
		return SRT_ENOENT;
	}
	for (int i = 0; i < ndt; i++)
		ok |= t->dtype == dts[i];
	if (!ok) {
		srt_attn_why(ld->why, ld->why_len, "%s: tensor %s: expected dtype %s%s%s, got %s",
			     ld->a->name, name, dt_name(dts[0]), ndt > 1 ? " or " : "",
			     ndt > 1 ? dt_name(dts[1]) : "", dt_name(t->dtype));
		return SRT_EINVAL;
	}
	if ((d1 < 0 && (t->ndim != 1 || t->shape[0] != d0)) ||
	    (d1 >= 0 && (t->ndim != 2 || t->shape[0] != d0 || t->shape[1] != d1))) {
		srt_attn_why(ld->why, ld->why_len, "%s: tensor %s: expected shape [%lld%s%lld], got "
			     "%u dims [%lld, %lld]", ld->a->name, name, (long long)d0,
			     d1 < 0 ? "" : ", ", d1 < 0 ? 0LL : (long long)d1, t->ndim,
			     (long long)t->shape[0], t->ndim > 1 ? (long long)t->shape[1] : 0LL);
		return SRT_EINVAL;
	}
	return 0;
}

/* fp32 copy of BF16/F32 tensor prefix+sub, [d0] (d1 < 0) or [d0][d1]. */
static int load_f32(struct loader *ld, const char *sub, int64_t d0, int64_t d1, float **out)
{
	static const uint32_t dts[] = {SRT_DT_BF16, SRT_DT_F32};
	char name[160];
	struct srt_tensor t;
	int64_t n = d0 * (d1 < 0 ? 1 : d1);
	snprintf(name, sizeof(name), "%s%s", ld->prefix, sub);
	int rc = get(ld, name, dts, 2, d0, d1, &t);
	if (rc)
		return rc;
	*out = ld->a->host->alloc((size_t)n * sizeof(float), 64);
	if (!*out) {
		srt_attn_why(ld->why, ld->why_len, "%s: tensor %s: out of memory", ld->a->name, name);
		return SRT_ENOMEM;
	}
	if (t.dtype == SRT_DT_F32)
		memcpy(*out, t.data, (size_t)n * sizeof(float));
	else
		srt_bf16_to_f32_n(t.data, *out, (size_t)n);
	return 0;
}

/* FP8 E4M3 weight prefix+sub (.weight [rows][cols], .scale UE8M0 128x128 blocks). */
static int load_fp8(struct loader *ld, const char *sub, int64_t rows, int64_t cols,
		    struct srt_weight *q)
{
	static const uint32_t wdt = SRT_DT_F8_E4M3, sdt = SRT_DT_F8_E8M0;
	char name[160];
	struct srt_tensor t, s;
	snprintf(name, sizeof(name), "%s%s.weight", ld->prefix, sub);
	int rc = get(ld, name, &wdt, 1, rows, cols, &t);
	if (rc)
		return rc;
	snprintf(name, sizeof(name), "%s%s.scale", ld->prefix, sub);
	if ((rc = get(ld, name, &sdt, 1, (rows + 127) / 128, (cols + 127) / 128, &s)))
		return rc;
	if (cols % 128) {
		srt_attn_why(ld->why, ld->why_len, "%s: tensor %s%s.weight: %lld input features, "
			     "expected a multiple of 128", ld->a->name, ld->prefix, sub,
			     (long long)cols);
		return SRT_EINVAL;
	}
	memset(q, 0, sizeof(*q));
	q->type = SRT_WT_FP8;
	q->rows = (size_t)rows;
	q->cols = (size_t)cols;
	q->data = t.data;
	q->scales = s.data;
	return 0;
}

/* Tensor prefix+sub [n][k] (BF16 or F32) as a tiled matrix (attn_dot.h). */
static int load_tm(struct loader *ld, const char *sub, int64_t n, int64_t k,
		   struct srt_attn_tm *m)
{
	float *w;
	int rc = load_f32(ld, sub, n, k, &w);
	if (rc)
		return rc;
	rc = srt_attn_tm_make(ld->a->host, w, (size_t)n, (size_t)k, m);
	ld->a->host->free(w);
	if (rc) {
		srt_attn_why(ld->why, ld->why_len, "%s: tensor %s%s: out of memory", ld->a->name,
			     ld->prefix, sub);
		return rc;
	}
	/* the stored tensor too (load_f32 checked its name, dtype and shape) */
	char name[160];
	struct srt_tensor t;
	snprintf(name, sizeof(name), "%s%s", ld->prefix, sub);
	if (ld->w->get(ld->w->ctx, name, &t) == 0)
		m->w = (struct srt_weight){.type = t.dtype == SRT_DT_BF16 ? SRT_WT_BF16 : SRT_WT_F32,
					   .rows = (size_t)n, .cols = (size_t)k, .data = t.data};
	return 0;
}

static int load_comp(struct loader *ld, const char *sub, int ratio, int width,
		     struct srt_attn_comp *c)
{
	char n[96];
	int64_t d = ld->a->m->hidden_size;
	int rc;
	c->ratio = ratio;
	c->coff = ratio == 4 ? 2 : 1;
	c->width = width;
	c->ring = ratio == 4 ? 8 : 1;
	snprintf(n, sizeof(n), "%swkv.weight", sub);
	if ((rc = load_tm(ld, n, c->coff * width, d, &c->wkv)))
		return rc;
	snprintf(n, sizeof(n), "%swgate.weight", sub);
	if ((rc = load_tm(ld, n, c->coff * width, d, &c->wgate)))
		return rc;
	snprintf(n, sizeof(n), "%sape", sub);
	if ((rc = load_f32(ld, n, ratio, c->coff * width, &c->ape)))
		return rc;
	snprintf(n, sizeof(n), "%snorm.weight", sub);
	return load_f32(ld, n, width, -1, &c->norm);
}

static int load_layer(struct srt_attn *a, const struct srt_weights *w, int32_t L,
		      struct srt_attn_lw *lw, char *why, size_t why_len)
{
	const struct srt_model_config *m = a->m;
	struct loader ld = {.a = a, .w = w, .why = why, .why_len = why_len};
	int64_t d = m->hidden_size, H = m->num_attention_heads, hd = m->head_dim;
	int64_t g = m->o_groups, ol = m->o_lora_rank, ql = m->q_lora_rank;
	struct srt_weight wo_a;
	int rc;

	lw->layer = L;
	if (L < m->num_hidden_layers)
		snprintf(ld.prefix, sizeof(ld.prefix), "layers.%d.", L);
	else
		snprintf(ld.prefix, sizeof(ld.prefix), "mtp.%d.", L - m->num_hidden_layers);
	if ((rc = load_f32(&ld, "attn_norm.weight", d, -1, &lw->attn_norm)))
		return rc;
	strcat(ld.prefix, "attn.");
	if ((rc = load_fp8(&ld, "wq_a", ql, d, &lw->wq_a)) ||
	    (rc = load_f32(&ld, "q_norm.weight", ql, -1, &lw->q_norm)) ||
	    (rc = load_fp8(&ld, "wq_b", H * hd, ql, &lw->wq_b)) ||
	    (rc = load_fp8(&ld, "wkv", hd, d, &lw->wkv)) ||
	    (rc = load_f32(&ld, "kv_norm.weight", hd, -1, &lw->kv_norm)) ||
	    (rc = load_fp8(&ld, "wo_a", g * ol, H * hd / g, &wo_a)) ||
	    (rc = load_fp8(&ld, "wo_b", d, g * ol, &lw->wo_b)) ||
	    (rc = load_f32(&ld, "attn_sink", H, -1, &lw->sink)))
		return rc;
	/* convert.py: wo_a dequantized to bf16 (exact: E4M3 x 2^k fits bf16) */
	size_t n = (size_t)(g * ol), k = (size_t)(H * hd / g);
	float *woa = a->host->alloc(n * k * sizeof(float), 64);
	lw->wo_a = a->host->alloc((size_t)g * sizeof(*lw->wo_a), 64);
	if (lw->wo_a)
		memset(lw->wo_a, 0, (size_t)g * sizeof(*lw->wo_a));
	if (!woa || !lw->wo_a) {
		a->host->free(woa);
		srt_attn_why(why, why_len, "%s: layer %d: out of memory for wo_a", a->name, L);
		return SRT_ENOMEM;
	}
	{
		const uint8_t *q = wo_a.data;
		size_t sc = (k + 127) / 128;
		for (size_t r = 0; r < n; r++)
			for (size_t c = 0; c < k; c++)
				woa[r * k + c] = srt_round_bf16(
					srt_fp8_e4m3_to_f32(q[r * k + c]) *
					srt_e8m0_to_f32(wo_a.scales[(r / 128) * sc + c / 128]));
	}
	for (size_t gi = 0; gi < (size_t)g && !rc; gi++)
		rc = srt_attn_tm_make_fp8(a->host, wo_a.data, wo_a.scales, (k + 127) / 128,
					  gi * (size_t)ol, (size_t)ol, k, woa + gi * (size_t)ol * k,
					  &lw->wo_a[gi]);
	a->host->free(woa);
	if (rc) {
		srt_attn_why(why, why_len, "%s: layer %d: out of memory for wo_a", a->name, L);
		return rc;
	}
	/* the float32 path reads the E4M3 codes in 128-row scale blocks per group */
	lw->wo_a8 = wo_a;
	lw->wo_a8_ok = a->ref && ol % 128 == 0 && k % 128 == 0;
	for (size_t gi = 0; gi < (size_t)g; gi++)
		lw->wo_a8_ok = lw->wo_a8_ok && lw->wo_a[gi].fp8;
	if (a->ratio && (rc = load_comp(&ld, "compressor.", a->ratio, (int)hd, &lw->comp)))
		return rc;
	if (a->ratio == 4) {
		int64_t ih = m->index_n_heads, idim = m->index_head_dim;
		if ((rc = load_fp8(&ld, "indexer.wq_b", ih * idim, ql, &lw->iwq_b)) ||
		    (rc = load_tm(&ld, "indexer.weights_proj.weight", ih, d, &lw->iwp)) ||
		    (rc = load_comp(&ld, "indexer.compressor.", 4, (int)idim, &lw->icomp)))
			return rc;
	}
	if (a->fp8_paired) {
		/* iwq_b is all zeros (no FP8 weight) outside CSA; wo_a8 only where its per-group
		 * views (attn_forward.c's woa_f32) stay whole groups of 16 rows */
		struct srt_weight *ws[6] = {&lw->wq_a, &lw->wq_b, &lw->wkv, &lw->wo_b, &lw->iwq_b,
					    &lw->wo_a8};
		const size_t nw = lw->wo_a8_ok && ol % 16 == 0 ? 6 : 5;
		/* no memory for the copy: auto keeps the checkpoint's views (same bits) */
		if (srt_weight_fp8_pair_all(ws, nw, &lw->fp8_block) && a->fp8_must) {
			srt_attn_why(why, why_len, "%s: layer %d: out of memory for the paired FP8 "
				     "weights (option fp8_layout = rows avoids the copy)", a->name, L);
			return SRT_ENOMEM;
		}
	}
	return 0;
}

static void free_comp(const struct srt_host *h, struct srt_attn_comp *c)
{
	srt_attn_tm_free(h, &c->wkv);
	srt_attn_tm_free(h, &c->wgate);
	h->free(c->ape);
	h->free(c->norm);
}

void srt_attn_destroy(struct srt_attn *a)
{
	if (!a)
		return;
	const struct srt_host *h = a->host;
	if (a->lw) {
		for (uint32_t i = 0; i < a->n_layers; i++) {
			struct srt_attn_lw *l = &a->lw[i];
			h->free(l->attn_norm);
			h->free(l->q_norm);
			h->free(l->kv_norm);
			h->free(l->sink);
			if (l->wo_a)
				for (int g = 0; g < a->m->o_groups; g++)
					srt_attn_tm_free(h, &l->wo_a[g]);
			h->free(l->wo_a);
			srt_attn_tm_free(h, &l->iwp);
			srt_fp8_block_free(&l->fp8_block);
			free_comp(h, &l->comp);
			free_comp(h, &l->icomp);
		}
		h->free(a->lw);
	}
	h->free(a->scratch);
	h->free(a->wscr);
	h->free(a->freqs);
	h->free(a->layers);
	h->free(a);
}

int srt_attn_create(const struct srt_host *host, const struct srt_plugin_args *args, int ratio,
		    const char *name, struct srt_attn **out, char *why, size_t why_len)
{
	struct srt_attn *a;
	int rc;
	*out = NULL;
	if (!args->model) {
		srt_attn_why(why, why_len, "%s: needs a model config", name);
		return SRT_EINVAL;
	}
	if (args->profile != SRT_PROFILE_REFERENCE && args->profile != SRT_PROFILE_F32) {
		srt_attn_why(why, why_len, "%s: unknown numerics profile %u", name, args->profile);
		return SRT_EINVAL;
	}
	a = host->alloc(sizeof(*a), 64);
	if (!a) {
		srt_attn_why(why, why_len, "%s: out of memory", name);
		return SRT_ENOMEM;
	}
	memset(a, 0, sizeof(*a));
	a->host = host;
	a->m = args->model;
	a->name = name;
	a->ratio = ratio;
	a->ref = args->profile == SRT_PROFILE_REFERENCE;
	a->P = args->page_tokens;
	if ((rc = pick_layers(a, args, why, why_len)) || (rc = declare(a, args, why, why_len)))
		goto fail;
	if (!args->weights) /* declaration only */
		goto done;
	{
		const struct srt_model_config *m = a->m;
		size_t rd = (size_t)m->qk_rope_head_dim;
		struct srt_rope_yarn y = {.factor = m->rope_factor,
					  .original_max_pos = m->rope_original_max_position,
					  .beta_fast = m->rope_beta_fast,
					  .beta_slow = m->rope_beta_slow};
		if (m->o_groups <= 0 || m->num_attention_heads % m->o_groups ||
		    m->sliding_window <= 0 || m->hidden_size % 128 || m->q_lora_rank % 128) {
			srt_attn_why(why, why_len, "%s: unsupported shapes: heads %d, o_groups %d, "
				     "sliding_window %d, hidden %d, q_lora_rank %d (hidden and "
				     "q_lora_rank must be multiples of 128)", name,
				     m->num_attention_heads, m->o_groups, m->sliding_window,
				     m->hidden_size, m->q_lora_rank);
			rc = SRT_EINVAL;
			goto fail;
		}
		a->freqs = host->alloc(rd / 2 * sizeof(float), 64);
		a->lw = host->alloc(a->n_layers * sizeof(*a->lw), 64);
		if (!a->freqs || !a->lw) {
			srt_attn_why(why, why_len, "%s: out of memory", name);
			rc = SRT_ENOMEM;
			goto fail;
		}
		memset(a->lw, 0, a->n_layers * sizeof(*a->lw));
		/* compressed layers: compress_rope_theta with YaRN; window-only: rope_theta */
		if (ratio)
			srt_rope_freqs(a->freqs, rd, m->compress_rope_theta,
				       m->rope_factor > 1 ? &y : NULL);
		else
			srt_rope_freqs(a->freqs, rd, m->rope_theta, NULL);
		for (uint32_t i = 0; i < a->n_layers; i++)
			if ((rc = load_layer(a, args->weights, a->layers[i], &a->lw[i], why,
					     why_len)))
				goto fail;
	}
done:
	*out = a;
	return 0;
fail:
	srt_attn_destroy(a);
	return rc;
}

/* ---- entry codecs ------------------------------------------------------------------------- */

void srt_attn_kv_encode(const struct srt_attn *a, const float *v, uint8_t *e)
{
	size_t w = (size_t)a->m->head_dim, rd = (size_t)a->m->qk_rope_head_dim, nope = w - rd;
	uint16_t h;
	switch (a->kv_store) {
	case SRT_ATTN_ST_BF16:
		for (size_t i = 0; i < w; i++) {
			h = srt_bf16_from_f32(v[i]);
			memcpy(e + 2 * i, &h, 2);
		}
		break;
	case SRT_ATTN_ST_FP8:
		srt_quant_fp8_ue8m0(v, nope, 64, e, e + nope + 2 * rd);
		for (size_t i = 0; i < rd; i++) {
			h = srt_bf16_from_f32(v[nope + i]);
			memcpy(e + nope + 2 * i, &h, 2);
		}
		break;
	default:
		memcpy(e, v, w * sizeof(float));
	}
}

/* One FP8 entry (nope E4M3 codes, rd bf16 rope words, nope/64 scale codes) into v; returns
 * srt_attn_fp8_row's proof that the nope floats pass srt_attn_bf16_exact. */
static int kv_decode_fp8(const uint8_t *e, size_t nope, size_t rd, float *v)
{
	const int proven = srt_attn_fp8_row(e, e + nope + 2 * rd, nope, v); /* vectorised */
	srt_attn_bf16_row(e + nope, rd, v + nope);
	return proven;
}

void srt_attn_kv_decode(const struct srt_attn *a, const uint8_t *e, float *v)
{
	size_t w = (size_t)a->m->head_dim, rd = (size_t)a->m->qk_rope_head_dim, nope = w - rd;
	switch (a->kv_store) {
	case SRT_ATTN_ST_BF16:
		srt_attn_bf16_row(e, w, v); /* vectorised, the same floats */
		break;
	case SRT_ATTN_ST_FP8:
		kv_decode_fp8(e, nope, rd, v);
		break;
	default:
		memcpy(v, e, w * sizeof(float));
	}
}

int srt_attn_kv_decode_n(const struct srt_attn *a, const uint8_t *const *e, size_t n, float *v,
			 int exact)
{
	const size_t w = (size_t)a->m->head_dim, rd = (size_t)a->m->qk_rope_head_dim, nope = w - rd;
	if (!exact || a->kv_store != SRT_ATTN_ST_FP8) {
		for (size_t k = 0; k < n; k++)
			srt_attn_kv_decode(a, e[k], v + k * w);
		return exact && srt_attn_bf16_exact(v, n * w);
	}
	int ex = 1;
	for (size_t k = 0; k < n; k++) {
		float *vk = v + k * w;
		const int proven = kv_decode_fp8(e[k], nope, rd, vk);
		ex = ex && (proven || srt_attn_bf16_exact(vk, nope)) &&
		     srt_attn_bf16_exact(vk + nope, rd);
	}
	return ex;
}

int srt_attn_kv_tiles(const struct srt_attn *a, const uint8_t *const *e, size_t n, float *t,
		      float *tmp, int exact)
{
	const size_t w = (size_t)a->m->head_dim, rd = (size_t)a->m->qk_rope_head_dim, nope = w - rd;
	int ex = exact;
	for (size_t j = 0; j < n; j += 8) {
		const size_t nt = n - j < 8 ? n - j : 8;
		float *tj = t + j * w;
		const size_t eb = nope + 2 * rd + nope / 64;
		if (a->kv_store == SRT_ATTN_ST_FP8 && eb <= SRT_ATTN_ZERO_ENTRY) {
			/* a partial tile's rows past its keys from an entry of zero codes and
			 * words under scale code 127: +0, as srt_attn_tile writes them */
			_Alignas(32) uint8_t z[SRT_ATTN_ZERO_ENTRY];
			const uint8_t *e8[8];
			int proven = 0;
			if (nt < 8) {
				memset(z, 0, nope + 2 * rd);
				memset(z + nope + 2 * rd, 127, nope / 64);
			}
			for (size_t l = 0; l < 8; l++)
				e8[l] = l < nt ? e[j + l] : z;
			if (srt_attn_fp8_tile(e8, nope, rd, tj, &proven)) {
				/* srt_attn_kv_decode_n's answer: proven keys pass; else the floats
				 * (a padding row's zeros pass) */
				if (ex)
					ex = (proven || srt_attn_bf16_exact(tj, 8 * nope)) &&
					     srt_attn_bf16_exact(tj + 8 * nope, 8 * rd);
				continue;
			}
		}
		const int ej = srt_attn_kv_decode_n(a, e + j, nt, tmp, ex);
		ex = ex && ej;
		srt_attn_tile(tmp, nt, w, w, tj);
	}
	return ex;
}

void srt_attn_kv_panels(const struct srt_attn *a, const uint8_t *const *e, size_t n, size_t ldk,
			float *vp, float *tmp)
{
	const size_t w = (size_t)a->m->head_dim, rd = (size_t)a->m->qk_rope_head_dim, nope = w - rd;
	for (size_t k = 0; k < n; k++) {
		if (a->kv_store == SRT_ATTN_ST_FP8 &&
		    srt_attn_fp8_panels(e[k], e[k] + nope + 2 * rd, nope, e[k] + nope, rd, vp + k * 16, ldk))
			continue;
		srt_attn_kv_decode(a, e[k], tmp);
		srt_attn_v_panels(tmp, 1, w, k, ldk, vp);
	}
}

int srt_attn_kv_keys(const struct srt_attn *a, const uint8_t *const *e, size_t nk, float *tmp,
		     uint32_t *kp, uint32_t *vp, uint8_t *lo, uint8_t *hi)
{
	size_t w = (size_t)a->m->head_dim, rd = (size_t)a->m->qk_rope_head_dim;
	if (a->kv_store == SRT_ATTN_ST_FP8)
		return srt_attn_fp8_keys(e, nk, w - rd, rd, tmp, kp, vp, lo, hi);
	srt_attn_kv_decode_n(a, e, nk, tmp, 0);
	return srt_attn_bf16_keys(tmp, nk, w, kp, vp, lo, hi);
}

void srt_attn_ix_encode(const struct srt_attn *a, const float *v, uint8_t *e)
{
	size_t d = (size_t)a->m->index_head_dim;
	uint16_t h;
	float s;
	switch (a->ix_store) {
	case SRT_ATTN_ST_BF16:
		for (size_t i = 0; i < d; i++) {
			h = srt_bf16_from_f32(v[i]);
			memcpy(e + 2 * i, &h, 2);
		}
		break;
	case SRT_ATTN_ST_FP8:
		srt_quant_fp8(v, d, d, true, e, &s);
		memcpy(e + d, &s, 4);
		break;
	case SRT_ATTN_ST_FP4:
		srt_quant_fp4(v, d, e, e + d / 2);
		break;
	default:
		memcpy(e, v, d * sizeof(float));
	}
}

void srt_attn_ix_decode(const struct srt_attn *a, const uint8_t *e, float *v)
{
	size_t d = (size_t)a->m->index_head_dim;
	uint16_t h;
	float s;
	switch (a->ix_store) {
	case SRT_ATTN_ST_BF16:
		for (size_t i = 0; i < d; i++) {
			memcpy(&h, e + 2 * i, 2);
			v[i] = srt_bf16_to_f32(h);
		}
		break;
	case SRT_ATTN_ST_FP8:
		memcpy(&s, e + d, 4);
		for (size_t i = 0; i < d; i++)
			v[i] = srt_fp8_e4m3_to_f32(e[i]) * s;
		break;
	case SRT_ATTN_ST_FP4:
		for (size_t i = 0; i < d; i++)
			v[i] = srt_fp4_e2m1_to_f32(srt_fp4_get(e, i)) *
			       srt_e8m0_to_f32(e[d / 2 + i / 32]);
		break;
	default:
		memcpy(v, e, d * sizeof(float));
	}
}
