/*
 * c16 — a research attention type, built out of tree against the installed shadowrt SDK:
 * compressed attention over blocks of R tokens (R = the compress ratio of the layers it
 * serves, e.g. 16) plus a raw sliding window, with its own cache pools. It uses only
 * <shadowrt/shadowrt.h> (the plugin ABI) and <shadowrt/ops.h> (libshadowrt-ops: the number
 * formats, RMSNorm, RoPE+YaRN and GEMMs the built-in plugins use), so in the `reference`
 * profile its rounding follows the same rules as the built-ins.
 *
 * Per layer (the HCA recipe of spec §2, at ratio R and written for clarity, not speed):
 *   xa = RMSNorm(x; attn_norm); qr = RMSNorm(wq_a·xa; q_norm); q = wq_b·qr, per-head RMSNorm,
 *   RoPE at the position; kv = RMSNorm(wkv·xa; kv_norm), RoPE, KV fake-quant (reference);
 *   compressor: per channel c a softmax over the block's R tokens of (wgate·xa)[c] + ape[t][c]
 *   weighting (wkv_c·xa)[c]; the pooled entry is normalized, RoPE'd at the block start and
 *   stored when the block completes;
 *   attention of the query at p over the window [p - window + 1, p] and every compressed entry
 *   j < (p + 1) / R, with the head's sink; de-rotation; grouped wo_a, then wo_b.
 *
 * Pools (names unique in the model; page layout of abi/shadowrt/pool.h):
 *   c16.window  ratio 1, TAIL window   one f32 KV vector per token
 *   c16.kv      ratio R, ALL           one f32 compressed KV vector per block of R tokens
 *   c16.state   one per page, TAIL 1   the compressor's running (max, sum, acc) per channel of
 *                                       the block being filled, after the page's last token
 * Because the page size is a multiple of R, a block never straddles a page, so a request that
 * resumes from a cached prefix (always at a page boundary) starts a fresh block.
 *
 * Options ([attention.c16]): window = N (1 .. 4096, default the model's sliding_window).
 * Cache-only create (weights NULL): declares the pools only; forward then fails saying so.
 *
 * Build: make (pkg-config shadowrt-plugin shadowrt-ops); check: shadowrt check-plugin ./c16.so
 * --ratio 16 --model DIR; see the README section "Writing a plugin".
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/ops.h>
#include <shadowrt/shadowrt.h>

#define C16_MAX_LAYERS 64

struct c16_layer {
	const uint16_t *attn_norm, *q_norm, *kv_norm, *c_norm; /* bf16 weights */
	struct srt_weight wq_a, wq_b, wkv, wo_a, wo_b, c_wkv, c_wgate;
	const float *sink, *ape; /* [H], [R][hd] */
};

struct c16 {
	const struct srt_host *host;
	const struct srt_model_config *m;
	int ref;            /* reference profile: bf16 rounding, FP8 act quant, KV fake-quant */
	uint32_t P, R, W;   /* page tokens, compress ratio, window */
	uint32_t n_layers;
	int32_t layers[C16_MAX_LAYERS];
	struct c16_layer lw[C16_MAX_LAYERS]; /* empty when cache-only */
	int cache_only;
	float freqs[128];
	struct srt_pool_decl pools[3];
};

static void c16_why(char *why, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void c16_why(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

static const char *opt(const struct srt_plugin_args *a, const char *key)
{
	return a->option ? a->option(a->option_ctx, key) : NULL;
}

/* ---- weights ----------------------------------------------------------------------------- */

static int tensor(const struct srt_weights *w, int L, const char *name, uint32_t dtype,
		  int64_t rows, int64_t cols, struct srt_tensor *t, char *why, size_t len)
{
	char full[128];
	snprintf(full, sizeof(full), "layers.%d.%s", L, name);
	if (w->get(w->ctx, full, t)) {
		c16_why(why, len, "c16: tensor '%s' is missing", full);
		return SRT_EINVAL;
	}
	int ok = t->dtype == dtype && t->shape[0] == rows &&
		 (cols < 0 ? t->ndim == 1 : t->ndim == 2 && t->shape[1] == cols);
	if (!ok) {
		c16_why(why, len, "c16: tensor '%s' has dtype %u shape [%lld, %lld], expected dtype "
			"%u [%lld, %lld]", full, t->dtype, (long long)t->shape[0],
			(long long)(t->ndim > 1 ? t->shape[1] : 0), dtype, (long long)rows,
			(long long)cols);
		return SRT_EINVAL;
	}
	return 0;
}

static int fp8(const struct srt_weights *w, int L, const char *name, int64_t rows, int64_t cols,
	       struct srt_weight *out, char *why, size_t len)
{
	char n[96];
	struct srt_tensor t, s;
	snprintf(n, sizeof(n), "%s.weight", name);
	int rc = tensor(w, L, n, SRT_DT_F8_E4M3, rows, cols, &t, why, len);
	snprintf(n, sizeof(n), "%s.scale", name);
	if (!rc)
		rc = tensor(w, L, n, SRT_DT_F8_E8M0, (rows + 127) / 128, (cols + 127) / 128, &s, why,
			    len);
	if (!rc)
		*out = (struct srt_weight){SRT_WT_FP8, (size_t)rows, (size_t)cols, t.data, s.data};
	return rc;
}

static int bf16(const struct srt_weights *w, int L, const char *name, int64_t rows,
		int64_t cols, const void **out, struct srt_weight *wt, char *why, size_t len)
{
	struct srt_tensor t;
	int rc = tensor(w, L, name, SRT_DT_BF16, rows, cols, &t, why, len);
	if (rc)
		return rc;
	if (out)
		*out = t.data;
	if (wt)
		*wt = (struct srt_weight){SRT_WT_BF16, (size_t)rows, (size_t)cols, t.data, NULL};
	return 0;
}

static int f32(const struct srt_weights *w, int L, const char *name, int64_t rows, int64_t cols,
	       const float **out, char *why, size_t len)
{
	struct srt_tensor t;
	int rc = tensor(w, L, name, SRT_DT_F32, rows, cols, &t, why, len);
	if (!rc)
		*out = t.data;
	return rc;
}

static int load_layer(struct c16 *c, const struct srt_weights *w, int L, struct c16_layer *l,
		      char *why, size_t len)
{
	const struct srt_model_config *m = c->m;
	int64_t d = m->hidden_size, H = m->num_attention_heads, hd = m->head_dim;
	int64_t ql = m->q_lora_rank, G = m->o_groups, ol = m->o_lora_rank;
	const void *p;
	int rc;
	if ((rc = bf16(w, L, "attn_norm.weight", d, -1, &p, NULL, why, len)))
		return rc;
	l->attn_norm = p;
	if ((rc = fp8(w, L, "attn.wq_a", ql, d, &l->wq_a, why, len)) ||
	    (rc = bf16(w, L, "attn.q_norm.weight", ql, -1, &p, NULL, why, len)))
		return rc;
	l->q_norm = p;
	if ((rc = fp8(w, L, "attn.wq_b", H * hd, ql, &l->wq_b, why, len)) ||
	    (rc = fp8(w, L, "attn.wkv", hd, d, &l->wkv, why, len)) ||
	    (rc = bf16(w, L, "attn.kv_norm.weight", hd, -1, &p, NULL, why, len)))
		return rc;
	l->kv_norm = p;
	if ((rc = fp8(w, L, "attn.wo_a", G * ol, H * hd / G, &l->wo_a, why, len)) ||
	    (rc = fp8(w, L, "attn.wo_b", d, G * ol, &l->wo_b, why, len)) ||
	    (rc = f32(w, L, "attn.attn_sink", H, -1, &l->sink, why, len)) ||
	    (rc = bf16(w, L, "attn.compressor.wkv.weight", hd, d, NULL, &l->c_wkv, why, len)) ||
	    (rc = bf16(w, L, "attn.compressor.wgate.weight", hd, d, NULL, &l->c_wgate, why, len)) ||
	    (rc = f32(w, L, "attn.compressor.ape", c->R, hd, &l->ape, why, len)) ||
	    (rc = bf16(w, L, "attn.compressor.norm.weight", hd, -1, &p, NULL, why, len)))
		return rc;
	l->c_norm = p;
	return 0;
}

/* ---- create / destroy / pools ------------------------------------------------------------- */

static int c16_create(const struct srt_host *host, const struct srt_plugin_args *args,
		      void **instance, char *why, size_t why_len)
{
	const struct srt_model_config *m = args->model;
	if (!m || !args->n_layers || args->n_layers > C16_MAX_LAYERS) {
		c16_why(why, why_len, "c16: needs a model and 1..%d layers", C16_MAX_LAYERS);
		return SRT_EINVAL;
	}
	int R = m->compress_ratios[args->layers[0]];
	for (uint32_t i = 0; i < args->n_layers; i++)
		if (m->compress_ratios[args->layers[i]] != R) {
			c16_why(why, why_len, "c16: layers of different ratios (%d and %d)", R,
				m->compress_ratios[args->layers[i]]);
			return SRT_EINVAL;
		}
	if (R < 8 || (R & (R - 1)) || args->page_tokens % (uint32_t)R) {
		c16_why(why, why_len, "c16: serves non-overlapping compressed layers of a power-of-two "
			"ratio >= 8 dividing the page (%u); got ratio %d", args->page_tokens, R);
		return SRT_EINVAL;
	}
	if (m->qk_rope_head_dim > 256 || m->head_dim <= m->qk_rope_head_dim ||
	    (m->head_dim - m->qk_rope_head_dim) % 64) {
		c16_why(why, why_len, "c16: head_dim %d / rope %d unsupported", m->head_dim,
			m->qk_rope_head_dim);
		return SRT_EINVAL;
	}
	long window = m->sliding_window;
	const char *v = opt(args, "window");
	if (v) {
		char *end;
		window = strtol(v, &end, 10);
		if (*end || window < 1 || window > 4096) {
			c16_why(why, why_len, "c16: option window = '%s': expected 1 .. 4096", v);
			return SRT_EINVAL;
		}
	}
	struct c16 *c = host->alloc(sizeof(*c), 64);
	if (!c)
		return SRT_ENOMEM;
	memset(c, 0, sizeof(*c));
	c->host = host;
	c->m = m;
	c->ref = args->profile == SRT_PROFILE_REFERENCE;
	c->P = args->page_tokens;
	c->R = (uint32_t)R;
	c->W = (uint32_t)window;
	c->n_layers = args->n_layers;
	memcpy(c->layers, args->layers, sizeof(int32_t) * args->n_layers);
	c->cache_only = args->weights == NULL;
	struct srt_rope_yarn y = {m->rope_factor, m->rope_original_max_position, m->rope_beta_fast,
				  m->rope_beta_slow};
	srt_rope_freqs(c->freqs, (size_t)m->qk_rope_head_dim, m->compress_rope_theta,
		       m->rope_factor > 1 ? &y : NULL);
	for (uint32_t i = 0; !c->cache_only && i < c->n_layers; i++) {
		int rc = load_layer(c, args->weights, c->layers[i], &c->lw[i], why, why_len);
		if (rc) {
			host->free(c);
			return rc;
		}
	}
	uint64_t hd = (uint64_t)m->head_dim;
	static const char *const names[3] = {"c16.window", "c16.kv", "c16.state"};
	const uint32_t ratio[3] = {1, c->R, SRT_RATIO_PAGE};
	const uint32_t ret[3] = {SRT_RETAIN_TAIL, SRT_RETAIN_ALL, SRT_RETAIN_TAIL};
	const uint32_t tail[3] = {c->W, 0, 1};
	const uint64_t bytes[3] = {hd * 4, hd * 4, 3 * hd * 4};
	for (int k = 0; k < 3; k++) {
		struct srt_pool_decl *d = &c->pools[k];
		d->struct_size = sizeof(*d);
		snprintf(d->name, sizeof(d->name), "%s", names[k]);
		d->ratio = ratio[k];
		d->retention = ret[k];
		d->tail_tokens = tail[k];
		d->entry_bytes = bytes[k];
		d->n_layers = c->n_layers;
		d->layers = c->layers;
	}
	*instance = c;
	return 0;
}

static void c16_destroy(void *inst)
{
	struct c16 *c = inst;
	c->host->free(c);
}

static int c16_declare(void *inst, const struct srt_pool_decl **pools, uint32_t *n)
{
	struct c16 *c = inst;
	*pools = c->pools;
	*n = 3;
	return 0;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* entry `e` (in tokens / ratio units) of layer slot `slot` in pool k of sequence s, or NULL */
static float *entry(const struct c16 *c, const struct srt_seq_view *s, int k, uint32_t slot,
		    uint64_t e)
{
	uint32_t r = k == 2 ? c->P : k == 1 ? c->R : 1;
	uint64_t per_page = c->P / r, vpage = e / per_page;
	if (vpage >= s->pools[k].n_pages || !s->pools[k].pages[vpage])
		return NULL;
	uint8_t *page = s->pools[k].pages[vpage];
	return (float *)(page + (slot * per_page + e % per_page) * c->pools[k].entry_bytes);
}

static void round_n(const struct c16 *c, float *x, size_t n)
{
	if (c->ref)
		srt_round_bf16_n(x, n);
}

/* y[n][w.rows] = x[n][w.cols] · wᵀ, the reference GEMM for FP8 weights in that profile */
static int gemm(const struct c16 *c, const struct srt_weight *w, const float *x, size_t n,
		size_t ldx, float *y, size_t ldy, size_t n0, size_t n1, int exact)
{
	return srt_gemm(w, x, n, ldx, y, ldy, n0, n1,
			c->ref && !exact ? SRT_GEMM_REFERENCE : SRT_GEMM_EXACT);
}

static int c16_forward(void *inst, int32_t layer, const struct srt_batch *b, const float *x,
		       float *out, char *why, size_t why_len)
{
	struct c16 *c = inst;
	const struct srt_model_config *m = c->m;
	if (c->cache_only) {
		c16_why(why, why_len, "c16: this instance was created without weights (cache-only)");
		return SRT_EINVAL;
	}
	uint32_t slot = 0;
	while (slot < c->n_layers && c->layers[slot] != layer)
		slot++;
	if (slot == c->n_layers || b->mem != SRT_MEM_HOST) {
		c16_why(why, why_len, "c16: layer %d is not one this instance serves", layer);
		return SRT_EINVAL;
	}
	const struct c16_layer *l = &c->lw[slot];
	const size_t n = (size_t)b->n_rows, d = (size_t)m->hidden_size, ql = (size_t)m->q_lora_rank;
	const size_t H = (size_t)m->num_attention_heads, hd = (size_t)m->head_dim;
	const size_t rd = (size_t)m->qk_rope_head_dim, G = (size_t)m->o_groups;
	const size_t ol = (size_t)m->o_lora_rank, R = c->R;
	const float eps = (float)m->rms_norm_eps, scale = 1.0f / sqrtf((float)hd);
	size_t floats = n * (d + ql + 2 * H * hd + 3 * hd + G * ol) + 2 * hd + 4096;
	float *buf = c->host->alloc(floats * sizeof(float), 64);
	if (!buf)
		return SRT_ENOMEM;
	float *xa = buf, *qr = xa + n * d, *q = qr + n * ql, *kv = q + n * H * hd;
	float *cv = kv + n * hd, *cz = cv + n * hd, *o = cz + n * hd, *og = o + n * H * hd;
	float *tmp = og + n * G * ol, *sc = tmp + 2 * hd;
	int rc = 0;

	/* projections of every row (row-independent: chunking and batching do not matter) */
	for (size_t i = 0; i < n; i++) {
		srt_rmsnorm_bf16w(x + i * d, xa + i * d, d, l->attn_norm, eps);
		round_n(c, xa + i * d, d);
	}
	if ((rc = gemm(c, &l->wq_a, xa, n, d, qr, ql, 0, ql, 0)) ||
	    (rc = gemm(c, &l->wkv, xa, n, d, kv, hd, 0, hd, 0)) ||
	    (rc = gemm(c, &l->c_wkv, xa, n, d, cv, hd, 0, hd, 1)) ||
	    (rc = gemm(c, &l->c_wgate, xa, n, d, cz, hd, 0, hd, 1)))
		goto out;
	for (size_t i = 0; i < n; i++) {
		round_n(c, qr + i * ql, ql);
		srt_rmsnorm_bf16w(qr + i * ql, qr + i * ql, ql, l->q_norm, eps);
		round_n(c, qr + i * ql, ql);
		round_n(c, kv + i * hd, hd);
		srt_rmsnorm_bf16w(kv + i * hd, kv + i * hd, hd, l->kv_norm, eps);
		round_n(c, kv + i * hd, hd);
	}
	if ((rc = gemm(c, &l->wq_b, qr, n, ql, q, H * hd, 0, H * hd, 0)))
		goto out;

	for (uint32_t si = 0; si < b->n_seqs; si++) {
		const struct srt_seq_view *s = &b->seqs[si];
		for (int32_t k = 0; k < s->n_tokens; k++) {
			size_t row = (size_t)(s->first_row + k);
			int64_t p = s->pos + k;
			/* query heads: weightless RMSNorm, RoPE */
			float *qh = q + row * H * hd;
			round_n(c, qh, H * hd);
			for (size_t h = 0; h < H; h++) {
				srt_rmsnorm(qh + h * hd, qh + h * hd, hd, eps);
				srt_rope_apply_pos(qh + h * hd + hd - rd, rd, c->freqs, p, false);
				round_n(c, qh + h * hd, hd);
			}
			/* this token's window KV */
			float *w = entry(c, s, 0, slot, (uint64_t)p);
			float *st = entry(c, s, 2, slot, (uint64_t)p / c->P);
			if (!w || !st) {
				c16_why(why, why_len, "c16: layer %d: no page for position %lld", layer,
					(long long)p);
				rc = SRT_EINVAL;
				goto out;
			}
			memcpy(w, kv + row * hd, hd * sizeof(float));
			srt_rope_apply_pos(w + hd - rd, rd, c->freqs, p, false);
			if (c->ref)
				srt_quant_kv_fake(w, hd, rd);
			/* compressor: online softmax per channel over the block's tokens */
			float *mx = st, *sum = st + hd, *acc = st + 2 * hd;
			if (p % (int64_t)R == 0)
				for (size_t ch = 0; ch < hd; ch++)
					mx[ch] = -INFINITY, sum[ch] = 0, acc[ch] = 0;
			const float *ape = l->ape + (size_t)(p % (int64_t)R) * hd;
			for (size_t ch = 0; ch < hd; ch++) {
				float z = cz[row * hd + ch] + ape[ch], val = cv[row * hd + ch];
				if (z > mx[ch]) {
					float f = expf(mx[ch] - z);
					sum[ch] = sum[ch] * f + 1.0f;
					acc[ch] = acc[ch] * f + val;
					mx[ch] = z;
				} else {
					float e = expf(z - mx[ch]);
					sum[ch] += e;
					acc[ch] += e * val;
				}
			}
			if ((p + 1) % (int64_t)R == 0) {
				float *ce = entry(c, s, 1, slot, (uint64_t)p / R);
				if (!ce) {
					c16_why(why, why_len, "c16: layer %d: no kv page at %lld", layer,
						(long long)p);
					rc = SRT_EINVAL;
					goto out;
				}
				for (size_t ch = 0; ch < hd; ch++)
					tmp[ch] = acc[ch] / sum[ch];
				round_n(c, tmp, hd);
				srt_rmsnorm_bf16w(tmp, ce, hd, l->c_norm, eps);
				srt_rope_apply_pos(ce + hd - rd, rd, c->freqs, p + 1 - (int64_t)R, false);
				if (c->ref)
					srt_quant_kv_fake(ce, hd, rd);
			}
			/* attention: window [p - W + 1, p] and compressed entries j < (p + 1) / R */
			int64_t w0 = p - (int64_t)c->W + 1 < 0 ? 0 : p - (int64_t)c->W + 1;
			uint64_t nc = (uint64_t)(p + 1) / R, nk = (uint64_t)(p - w0 + 1) + nc;
			if (nk > 4096) {
				c16_why(why, why_len, "c16: %llu keys at position %lld exceed the "
					"example's 4096", (unsigned long long)nk, (long long)p);
				rc = SRT_ENOTSUP;
				goto out;
			}
			for (size_t h = 0; h < H; h++) {
				const float *qv = qh + h * hd;
				float mxs = l->sink[h];
				for (uint64_t j = 0; j < nk; j++) {
					const float *kvj = j < nc ? entry(c, s, 1, slot, j)
								  : entry(c, s, 0, slot,
									  (uint64_t)w0 + (j - nc));
					if (!kvj) {
						c16_why(why, why_len, "c16: layer %d: a key page of "
							"position %lld is absent", layer, (long long)p);
						rc = SRT_EINVAL;
						goto out;
					}
					float dot = 0;
					for (size_t e = 0; e < hd; e++)
						dot += qv[e] * kvj[e];
					sc[j] = dot * scale;
					if (sc[j] > mxs)
						mxs = sc[j];
				}
				float den = expf(l->sink[h] - mxs);
				float *oh = o + row * H * hd + h * hd;
				memset(oh, 0, hd * sizeof(float));
				for (uint64_t j = 0; j < nk; j++) {
					const float *kvj = j < nc ? entry(c, s, 1, slot, j)
								  : entry(c, s, 0, slot,
									  (uint64_t)w0 + (j - nc));
					float e = expf(sc[j] - mxs);
					den += e;
					for (size_t ch = 0; ch < hd; ch++)
						oh[ch] += e * kvj[ch];
				}
				for (size_t ch = 0; ch < hd; ch++)
					oh[ch] /= den;
				srt_rope_apply_pos(oh + hd - rd, rd, c->freqs, p, true);
				round_n(c, oh, hd);
			}
		}
	}
	/* grouped output projection: group g of the heads -> rows [g*ol, (g+1)*ol) of wo_a
	 * (dequantized weights times f32, as bf16 weights would be), then wo_b */
	for (size_t g = 0; g < G; g++)
		if ((rc = gemm(c, &l->wo_a, o + g * (H * hd / G), n, H * hd, og, G * ol, g * ol,
			       (g + 1) * ol, 1)))
			goto out;
	round_n(c, og, n * G * ol);
	if ((rc = gemm(c, &l->wo_b, og, n, G * ol, out, d, 0, d, 0)))
		goto out;
	round_n(c, out, n * d);
out:
	c->host->free(buf);
	if (rc == SRT_ENOMEM)
		c16_why(why, why_len, "c16: out of memory");
	return rc;
}

static const struct srt_attention_vtable c16_vtable = {
	.struct_size = sizeof(struct srt_attention_vtable),
	.declare_pools = c16_declare,
	.forward = c16_forward,
};

static const struct srt_plugin_option c16_options[] = {
	{"window", "int 1..4096", "sliding_window", "raw tokens each query attends besides the "
						    "compressed entries"},
	{NULL, NULL, NULL, NULL},
};

static const struct srt_plugin_desc c16_desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_ATTENTION,
	.name = "c16",
	.version = "0.1.0",
	.description = "research example: ratio-R compressed attention + window, own pools (SDK)",
	.caps = SRT_CAP_CPU | SRT_CAP_BATCH,
	.create = c16_create,
	.destroy = c16_destroy,
	.vtable = &c16_vtable,
	.options = c16_options,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &c16_desc;
}
