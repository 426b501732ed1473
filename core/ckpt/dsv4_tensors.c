/* DeepSeek-V4 checkpoint tensor list and validation: see dsv4_tensors.h. */
#include "ckpt/dsv4_tensors.h"
#include "ckpt/ck_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WBLOCK 128 /* FP8 weight block */
#define FP4_BLOCK 32

const char *srt_ck_role_name(uint32_t role)
{
	static const char *const names[SRT_CK_ROLE_COUNT] = {
		"embedding", "lm head", "rmsnorm weight", "bf16 linear", "fp8 weight",
		"fp8 block scale", "fp4 weight", "fp4 scale", "mHC fn", "mHC base", "mHC scale",
		"attention sink", "compressor ape", "router bias", "hash routing table",
	};
	return role < SRT_CK_ROLE_COUNT ? names[role] : "?";
}

struct list {
	struct srt_ck_spec *v;
	size_t n, cap;
	int oom;
	int32_t layer;
	const char *prefix; /* "", "layers.3.", "mtp.0." */
};

static struct srt_ck_spec *add(struct list *l, uint32_t role, uint32_t dtype, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static struct srt_ck_spec *add(struct list *l, uint32_t role, uint32_t dtype, const char *fmt, ...)
{
	static struct srt_ck_spec dummy;
	if (l->oom)
		return &dummy;
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 256;
		struct srt_ck_spec *nv = realloc(l->v, nc * sizeof(*nv));
		if (!nv) {
			l->oom = 1;
			return &dummy;
		}
		l->v = nv;
		l->cap = nc;
	}
	struct srt_ck_spec *s = &l->v[l->n++];
	memset(s, 0, sizeof(*s));
	int o = snprintf(s->name, sizeof(s->name), "%s", l->prefix);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->name + o, sizeof(s->name) - (size_t)o, fmt, ap);
	va_end(ap);
	s->dtype = s->alt_dtype = dtype;
	s->role = role;
	s->layer = l->layer;
	return s;
}

static void shape1(struct srt_ck_spec *s, int64_t a)
{
	s->ndim = 1;
	s->shape[0] = a;
	s->rows = a;
	s->cols = 1;
}

static void shape2(struct srt_ck_spec *s, int64_t a, int64_t b)
{
	s->ndim = 2;
	s->shape[0] = a;
	s->shape[1] = b;
	s->rows = a;
	s->cols = b;
}

static int64_t cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static void vec(struct list *l, uint32_t role, uint32_t dtype, int64_t n, const char *name)
{
	shape1(add(l, role, dtype, "%s", name), n);
}

static void bf16_linear(struct list *l, const char *name, int64_t out, int64_t in)
{
	shape2(add(l, SRT_CK_LINEAR, SRT_DT_BF16, "%s.weight", name), out, in);
}

static void fp8_linear(struct list *l, const char *name, int64_t out, int64_t in)
{
	shape2(add(l, SRT_CK_FP8_W, SRT_DT_F8_E4M3, "%s.weight", name), out, in);
	struct srt_ck_spec *s = add(l, SRT_CK_FP8_S, SRT_DT_F8_E8M0, "%s.scale", name);
	shape2(s, cdiv(out, WBLOCK), cdiv(in, WBLOCK));
	s->rows = out;
	s->cols = in;
}

static void fp4_linear(struct list *l, const char *name, int64_t out, int64_t in)
{
	struct srt_ck_spec *w = add(l, SRT_CK_FP4_W, SRT_DT_I8, "%s.weight", name);
	shape2(w, out, in / 2);
	w->cols = in;
	struct srt_ck_spec *s = add(l, SRT_CK_FP4_S, SRT_DT_F8_E8M0, "%s.scale", name);
	shape2(s, out, in / FP4_BLOCK);
	s->cols = in;
}

static void norm(struct list *l, const char *name, int64_t n)
{
	shape1(add(l, SRT_CK_NORM, SRT_DT_BF16, "%s.weight", name), n);
}

static void compressor(struct list *l, const char *name, const struct srt_model_config *c,
		       int ratio, int64_t head_dim)
{
	int64_t coff = ratio == 4 ? 2 : 1; /* ratio 4 overlaps: two halves */
	char n[SRT_CK_NAME_MAX];
	shape2(add(l, SRT_CK_APE, SRT_DT_F32, "%s.ape", name), ratio, coff * head_dim);
	snprintf(n, sizeof(n), "%s.wkv", name);
	bf16_linear(l, n, coff * head_dim, c->hidden_size);
	snprintf(n, sizeof(n), "%s.wgate", name);
	bf16_linear(l, n, coff * head_dim, c->hidden_size);
	snprintf(n, sizeof(n), "%s.norm", name);
	norm(l, n, head_dim);
}

static void hc(struct list *l, const char *which, const struct srt_model_config *c, int64_t mix,
	       int64_t nscale)
{
	int64_t hcd = (int64_t)c->hc_mult * c->hidden_size;
	shape2(add(l, SRT_CK_HC_FN, SRT_DT_F32, "hc_%s_fn", which), mix, hcd);
	shape1(add(l, SRT_CK_HC_BASE, SRT_DT_F32, "hc_%s_base", which), mix);
	shape1(add(l, SRT_CK_HC_SCALE, SRT_DT_F32, "hc_%s_scale", which), nscale);
}

static void block(struct list *l, const struct srt_model_config *c, int layer, int ratio,
		  int hash_routed)
{
	const int64_t d = c->hidden_size, H = c->num_attention_heads, hd = c->head_dim;
	const int64_t G = c->o_groups, inter = c->moe_intermediate_size;
	const int64_t mix = (2 + (int64_t)c->hc_mult) * c->hc_mult;

	vec(l, SRT_CK_SINK, SRT_DT_F32, H, "attn.attn_sink");
	fp8_linear(l, "attn.wq_a", c->q_lora_rank, d);
	norm(l, "attn.q_norm", c->q_lora_rank);
	fp8_linear(l, "attn.wq_b", H * hd, c->q_lora_rank);
	fp8_linear(l, "attn.wkv", hd, d);
	norm(l, "attn.kv_norm", hd);
	fp8_linear(l, "attn.wo_a", G * c->o_lora_rank, H * hd / G);
	fp8_linear(l, "attn.wo_b", d, G * c->o_lora_rank);
	if (ratio) {
		compressor(l, "attn.compressor", c, ratio, hd);
		if (ratio == 4) {
			fp8_linear(l, "attn.indexer.wq_b", (int64_t)c->index_n_heads * c->index_head_dim,
				   c->q_lora_rank);
			bf16_linear(l, "attn.indexer.weights_proj", c->index_n_heads, d);
			compressor(l, "attn.indexer.compressor", c, 4, c->index_head_dim);
		}
	}
	bf16_linear(l, "ffn.gate", c->n_routed_experts, d);
	if (hash_routed) {
		struct srt_ck_spec *t = add(l, SRT_CK_TID2EID, SRT_DT_I64, "ffn.gate.tid2eid");
		shape2(t, c->vocab_size, c->num_experts_per_tok);
		t->alt_dtype = SRT_DT_I32;
	} else {
		vec(l, SRT_CK_GATE_BIAS, SRT_DT_F32, c->n_routed_experts, "ffn.gate.bias");
	}
	for (int e = 0; e < c->n_routed_experts; e++) {
		static const char *const w[3] = {"w1", "w2", "w3"};
		for (int k = 0; k < 3; k++) {
			char n[SRT_CK_NAME_MAX];
			snprintf(n, sizeof(n), "ffn.experts.%d.%s", e, w[k]);
			int64_t out = k == 1 ? d : inter, in = k == 1 ? inter : d;
			if (c->expert_fp4)
				fp4_linear(l, n, out, in);
			else
				fp8_linear(l, n, out, in);
		}
	}
	int64_t sinter = inter * c->n_shared_experts;
	if (sinter) {
		fp8_linear(l, "ffn.shared_experts.w1", sinter, d);
		fp8_linear(l, "ffn.shared_experts.w2", d, sinter);
		fp8_linear(l, "ffn.shared_experts.w3", sinter, d);
	}
	norm(l, "attn_norm", d);
	norm(l, "ffn_norm", d);
	hc(l, "attn", c, mix, 3);
	hc(l, "ffn", c, mix, 3);
	(void)layer;
}

static int check_cfg(const struct srt_model_config *c, char *err, size_t errlen)
{
	const struct {
		const char *key;
		int64_t v;
	} pos[] = {
		{"hidden_size", c->hidden_size},
		{"num_hidden_layers", c->num_hidden_layers},
		{"num_attention_heads", c->num_attention_heads},
		{"head_dim", c->head_dim},
		{"q_lora_rank", c->q_lora_rank},
		{"o_groups", c->o_groups},
		{"o_lora_rank", c->o_lora_rank},
		{"vocab_size", c->vocab_size},
		{"n_routed_experts", c->n_routed_experts},
		{"num_experts_per_tok", c->num_experts_per_tok},
		{"moe_intermediate_size", c->moe_intermediate_size},
		{"hc_mult", c->hc_mult},
	};
	for (size_t i = 0; i < sizeof(pos) / sizeof(pos[0]); i++)
		if (pos[i].v <= 0)
			return errf(err, errlen, SRT_EINVAL, "key '%s': %lld, expected a positive value",
				    pos[i].key, (long long)pos[i].v);
	if (c->n_shared_experts < 0 || c->num_hash_layers < 0 || c->num_nextn_predict_layers < 0)
		return errf(err, errlen, SRT_EINVAL, "key 'n_shared_experts', 'num_hash_layers' or "
			    "'num_nextn_predict_layers' is negative");
	if ((int64_t)c->num_attention_heads * c->head_dim % c->o_groups)
		return errf(err, errlen, SRT_EINVAL, "key 'o_groups': %d does not divide "
			    "num_attention_heads x head_dim = %lld", c->o_groups,
			    (long long)c->num_attention_heads * c->head_dim);
	if (c->expert_fp4 && (c->hidden_size % FP4_BLOCK || c->moe_intermediate_size % FP4_BLOCK))
		return errf(err, errlen, SRT_EINVAL, "keys 'hidden_size' (%d) and "
			    "'moe_intermediate_size' (%d) must be multiples of %d for FP4 experts",
			    c->hidden_size, c->moe_intermediate_size, FP4_BLOCK);
	int nblocks = c->num_hidden_layers + c->num_nextn_predict_layers;
	if (nblocks > SRT_MAX_LAYERS || c->n_compress_ratios != nblocks)
		return errf(err, errlen, SRT_EINVAL, "key 'compress_ratios': %d entries, expected "
			    "num_hidden_layers + num_nextn_predict_layers = %d (at most %d)",
			    c->n_compress_ratios, nblocks, SRT_MAX_LAYERS);
	for (int i = 0; i < nblocks; i++) {
		int r = c->compress_ratios[i];
		if (r < 0 || (r & (r - 1)) || r == 1)
			return errf(err, errlen, SRT_EINVAL, "key 'compress_ratios'[%d]: %d, expected 0 "
				    "or a power of two >= 2", i, r);
		if (r == 4 && (c->index_n_heads <= 0 || c->index_head_dim <= 0))
			return errf(err, errlen, SRT_EINVAL, "keys 'index_n_heads' / 'index_head_dim' "
				    "must be positive: layer %d is a ratio-4 (CSA) layer", i);
	}
	return 0;
}

int srt_ck_dsv4_specs(const struct srt_model_config *cfg, struct srt_ck_spec **out, size_t *n,
		      char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	int rc = check_cfg(cfg, err, errlen);
	if (rc)
		return rc;
	const int64_t d = cfg->hidden_size, hcm = cfg->hc_mult;
	struct list l = {.layer = -1, .prefix = ""};
	shape2(add(&l, SRT_CK_EMBED, SRT_DT_BF16, "embed.weight"), cfg->vocab_size, d);
	if (!cfg->tie_word_embeddings)
		shape2(add(&l, SRT_CK_HEAD, SRT_DT_BF16, "head.weight"), cfg->vocab_size, d);
	norm(&l, "norm", d);
	hc(&l, "head", cfg, hcm, 1);
	char prefix[32];
	for (int i = 0; i < cfg->num_hidden_layers; i++) {
		snprintf(prefix, sizeof(prefix), "layers.%d.", i);
		l.prefix = prefix;
		l.layer = i;
		block(&l, cfg, i, cfg->compress_ratios[i], i < cfg->num_hash_layers);
	}
	for (int i = 0; i < cfg->num_nextn_predict_layers; i++) {
		int layer = cfg->num_hidden_layers + i;
		snprintf(prefix, sizeof(prefix), "mtp.%d.", i);
		l.prefix = prefix;
		l.layer = layer;
		block(&l, cfg, layer, cfg->compress_ratios[layer], 0);
		fp8_linear(&l, "e_proj", d, d);
		fp8_linear(&l, "h_proj", d, d);
		norm(&l, "enorm", d);
		norm(&l, "hnorm", d);
		norm(&l, "norm", d);
		hc(&l, "head", cfg, hcm, 1);
	}
	if (l.oom) {
		free(l.v);
		return errf(err, errlen, SRT_ENOMEM, "out of memory for the tensor list");
	}
	*out = l.v;
	*n = l.n;
	return 0;
}

/* ---- validation ------------------------------------------------------------------------------ */

static void default_warn(void *user, const char *msg)
{
	(void)user;
	fprintf(stderr, "shadowrt: warning: %s\n", msg);
}

struct checker {
	char *err;
	size_t errlen;
	size_t problems;
};

static void problem(struct checker *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct checker *k, const char *fmt, ...)
{
	if (!k->problems++ && k->err && k->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(k->err, k->errlen, fmt, ap);
		va_end(ap);
	}
}

static int cmp_spec_name(const void *a, const void *b)
{
	return strcmp(((const struct srt_ck_spec *)a)->name, ((const struct srt_ck_spec *)b)->name);
}

static void check_tid2eid(struct checker *k, const struct srt_ckpt *ck, const struct srt_tensor *t,
			  int64_t n_experts)
{
	size_t n = t->nbytes / srt_ck_dtype_size(t->dtype);
	for (size_t i = 0; i < n; i++) {
		int64_t v;
		if (t->dtype == SRT_DT_I64)
			memcpy(&v, (const char *)t->data + 8 * i, 8);
		else {
			int32_t v32;
			memcpy(&v32, (const char *)t->data + 4 * i, 4);
			v = v32;
		}
		if (v < 0 || v >= n_experts) {
			problem(k, "tensor '%s' (%s): entry [%lld][%lld] = %lld, expected an expert index "
				"in [0, %lld)", t->name, srt_ck_tensor_file(ck, t),
				(long long)(i / (size_t)t->shape[1]), (long long)(i % (size_t)t->shape[1]),
				(long long)v, (long long)n_experts);
			return;
		}
	}
}

int srt_ck_dsv4_check(const struct srt_ckpt *ck, const struct srt_model_config *cfg,
		      srt_ck_warn_fn warn, void *user, struct srt_ck_check *stats, char *err,
		      size_t errlen)
{
	struct srt_ck_spec *specs;
	size_t n;
	int rc = srt_ck_dsv4_specs(cfg, &specs, &n, err, errlen);
	if (rc)
		return rc;
	if (!warn)
		warn = default_warn;
	struct checker k = {.err = err, .errlen = errlen};
	for (size_t i = 0; i < n; i++) {
		const struct srt_ck_spec *s = &specs[i];
		const struct srt_tensor *t = srt_ck_find(ck, s->name);
		char want[96], got[96];
		fmt_shape(want, sizeof(want), s->ndim, s->shape);
		if (!t) {
			problem(&k, "tensor '%s' (%s %s %s) is missing", s->name,
				srt_ck_role_name(s->role), srt_ck_dtype_name(s->dtype), want);
			continue;
		}
		if (t->dtype != s->dtype && t->dtype != s->alt_dtype) {
			problem(&k, "tensor '%s' (%s): dtype %s, expected %s%s%s", s->name,
				srt_ck_tensor_file(ck, t), srt_ck_dtype_name(t->dtype),
				srt_ck_dtype_name(s->dtype), s->alt_dtype != s->dtype ? " or " : "",
				s->alt_dtype != s->dtype ? srt_ck_dtype_name(s->alt_dtype) : "");
			continue;
		}
		int same = t->ndim == s->ndim;
		for (uint32_t d = 0; same && d < s->ndim; d++)
			same = t->shape[d] == s->shape[d];
		if (!same) {
			fmt_shape(got, sizeof(got), t->ndim, t->shape);
			problem(&k, "tensor '%s' (%s): shape %s, expected %s", s->name,
				srt_ck_tensor_file(ck, t), got, want);
			continue;
		}
		if (s->role == SRT_CK_TID2EID)
			check_tid2eid(&k, ck, t, cfg->n_routed_experts);
	}
	/* Extra tensors: warn. */
	qsort(specs, n, sizeof(*specs), cmp_spec_name);
	size_t extra = 0;
	for (size_t i = 0; i < srt_ck_count(ck); i++) {
		const struct srt_tensor *t = srt_ck_tensor(ck, i);
		struct srt_ck_spec key;
		snprintf(key.name, sizeof(key.name), "%s", t->name);
		if (strlen(t->name) < sizeof(key.name) &&
		    bsearch(&key, specs, n, sizeof(*specs), cmp_spec_name))
			continue;
		if (extra++ < 8) {
			char msg[SRT_CK_NAME_MAX + 160];
			snprintf(msg, sizeof(msg), "%s: tensor '%s' is not part of a DeepSeek-V4 model of "
				 "this config; ignored", srt_ck_tensor_file(ck, t), t->name);
			warn(user, msg);
		}
	}
	if (extra > 8) {
		char msg[96];
		snprintf(msg, sizeof(msg), "%zu more unexpected tensors ignored", extra - 8);
		warn(user, msg);
	}
	if (stats) {
		stats->expected = n;
		stats->problems = k.problems;
		stats->extra = extra;
	}
	free(specs);
	if (k.problems > 1 && err && errlen) {
		size_t l = strlen(err);
		if (l < errlen)
			snprintf(err + l, errlen - l, " (and %zu more problems)", k.problems - 1);
	}
	return k.problems ? SRT_ECORRUPT : 0;
}
