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
 * and multiplied by srt_gemm_ref (the tilelang fp8/fp4 GEMM's block order, fp32 accumulation);
 * GEMM outputs and h are rounded to bf16 where the reference's tensors are bf16. `f32` profile:
 * srt_gemm_exact on dequantised weights, fp32 everywhere, no rounding.
 *
 * Batching: rows are grouped by expert; each group's rows are gathered and multiplied by the
 * expert's weights in one srt_gemm call per column range, so every weight streams once per call
 * (per chunk of MOE_ROW_CHUNK rows). srt_gemm results do not depend on the number of rows or the
 * column range, and a row's expert outputs are summed in ascending expert id (shared last), so a
 * row's result is bitwise independent of the other rows in the batch. Column ranges are
 * MOE_NCOL wide (MOE_NCOL_BIG from MOE_BIG_ROWS rows, prefill; at decode 1/T of a matrix for T
 * threads, so each thread streams one contiguous block of it), and the parallel tasks are
 * weighted by their group's rows (run_tasks) so both threads get the same work although the
 * shared expert's group holds every row of the chunk. At decode with at least two experts a
 * thread, a task is an expert's whole up_gate or whole down projection instead (whole_experts).
 */
#include <shadowrt/shadowrt.h>

#include <assert.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/act.h"
#include "ops/act_n.h"
#include "ops/fp.h"
#include "ops/gemm.h"
#include "ops/norm.h"
#include "ops/prof.h"

#define MOE_NAME "fp4"
#define MOE_ROW_CHUNK 256 /* rows per pass: bounds the scratch memory of a long prefill */
#define MOE_NCOL 256      /* output columns per parallel task of a batch of up to
			   * MOE_BIG_ROWS rows (decode: moe_forward) */
#define MOE_NCOL_BIG 128  /* the same from MOE_BIG_ROWS rows (prefill): fewer, larger GEMMs */
#define MOE_BIG_ROWS 64
#define MOE_QB 128        /* activation quantisation block */
#define MOE_COMB_COLS 256 /* channels a task of a one-row combine */
#define MOE_ROUTE_COLS 8  /* router logits a task of a one-row route */

/* Phase timings for benchmarks (core/ops/prof.h). */
static struct srt_prof moe_prof;

SRT_EXPORT struct srt_prof *srt_plugin_prof(void);
SRT_EXPORT struct srt_prof *srt_plugin_prof(void)
{
	return &moe_prof;
}

struct moe_layer {
	int32_t layer;
	int hash;
	float *norm;              /* [d], owned */
	struct srt_weight router; /* [E][d] BF16 or F32, a view into the checkpoint */
	float *bias;              /* [E], owned; NULL in hash layers */
	const void *tid2eid;      /* [vocab][k], I32 or I64, borrowed; hash layers only */
	uint32_t tid_dt;
	int64_t tid_rows;
	struct srt_weight *experts; /* [E][3]: w1, w2, w3 (views into the checkpoint) */
	struct srt_weight shared[3];  /* w1, w2, w3 */
	struct srt_fp8_block fp8_block; /* option fp8_layout: the shared expert, paired (gemm.h) */
};

/* One group of rows that go through the same expert. */
struct moe_group {
	const struct srt_weight *w; /* [3] */
	int32_t first, count;     /* entries [first, first + count) of inst->ent_row / ent_slot */
	int routed;               /* 1: scale h by the routing weight */
};

struct moe_inst {
	const struct srt_host *host;
	int profile;
	int fp8_paired, fp8_must; /* option fp8_layout resolved; must: explicit paired */
	int64_t d, inter, n_exp, topk;
	float route_scale, limit, eps;
	int32_t n_layers;
	struct moe_layer *layers;
	int32_t n_slots;          /* size of slot_of */
	int32_t *slot_of;         /* model layer -> index into layers, or -1 */

	/* Scratch of one call (one call at a time per instance). Entries are (row, expert slot)
	 * pairs sorted by expert, then the shared expert's entries (one per row). */
	size_t cap_rows;
	float *xn;                /* [chunk][d] ffn_norm output */
	float *logits;            /* [chunk][E] router logits */
	float *gx, *gs;           /* [ent][d] GEMM input per entry (FP8 code values in reference),
				   * [ent][d/128] its scales */
	float *gate, *up;         /* [ent][inter] */
	float *hq, *hs;           /* [ent][inter] down-projection input, [ent][inter/128] scales */
	float *o;                 /* [ent][d] expert outputs */
	int32_t *sel;             /* [chunk][k] */
	float *wt;                /* [chunk][k] */
	int32_t *ent_row;         /* [ent] chunk row of the entry */
	int32_t *ent_slot;        /* [ent] slot in [0, k), or k for the shared expert */
	int32_t *row_ent;         /* [chunk][k+1] the row's entries in ascending expert id */
	int32_t *tok;             /* [n_rows] token id per row */
	size_t cap_tok;
	struct moe_group *groups; /* [E + 1] */
	int32_t n_groups;
	int64_t n_tasks_per_group_up, n_tasks_per_group_down;
	int64_t ncol_up, ncol_down; /* columns per up_gate / down task (see moe_forward) */
	int64_t task0;            /* first work unit of the up_gate / down call (profiling splits) */
	int64_t spread_n;         /* decode: units of the call dealt round-robin to the threads
				   * (spread()), 0 = in order */
	_Atomic int32_t next_whole; /* decode, whole experts: the next task to take (whole_experts) */
	_Atomic uint8_t *up_done;   /* [E + 1] whole experts: group gi's up_gate and h are written */
	_Atomic uint64_t whole_ns[2]; /* profiling: thread time of the routed [0] and shared [1]
				       * whole-expert tasks */

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
			(*out)[i] = srt_bf16_to_f32(b[i]);
	}
	return 0;
}

/* View the router `name` [rows][cols], BF16 or F32: its logits are EXACT products (gemm.h),
 * the same bits from a bf16 view as from a float copy, and half the bytes a step reads
 * while the other threads wait (routing runs on one). */
static int view_router(const struct srt_weights *w, const char *name, int64_t rows, int64_t cols,
		       struct srt_weight *q, char *why, size_t why_len)
{
	static const uint32_t dts[] = {SRT_DT_BF16, SRT_DT_F32};
	struct srt_tensor t;
	int rc = get_tensor(w, name, dts, 2, rows, cols, &t, why, why_len);
	if (rc)
		return rc;
	*q = (struct srt_weight){.type = t.dtype == SRT_DT_BF16 ? SRT_WT_BF16 : SRT_WT_F32,
				 .rows = (size_t)rows, .cols = (size_t)cols, .data = t.data};
	return 0;
}

/*
 * View the weight `<prefix>.weight` of logical shape [rows][cols] and its `<prefix>.scale`:
 * packed FP4 (I8/U8 [rows][cols/2] + UE8M0 [rows][cols/32]), FP8 E4M3 ([rows][cols] + UE8M0
 * [ceil(rows/128)][ceil(cols/128)]), or BF16 / F32 (no scale).
 */
static int load_qw(const struct srt_weights *w, const char *prefix, int64_t rows, int64_t cols,
		   struct srt_weight *q, char *why, size_t why_len)
{
	static const uint32_t sdt = SRT_DT_F8_E8M0;
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
	q->rows = (size_t)rows;
	q->cols = (size_t)cols;
	dt = t.dtype;
	switch (dt) {
	case SRT_DT_I8:
	case SRT_DT_U8:
		q->type = SRT_WT_FP4;
		srows = rows;
		scols = cols / 32;
		rc = get_tensor(w, name, &dt, 1, rows, cols / 2, &t, why, why_len);
		break;
	case SRT_DT_F8_E4M3:
		q->type = SRT_WT_FP8;
		srows = (rows + 127) / 128;
		scols = (cols + 127) / 128;
		rc = get_tensor(w, name, &dt, 1, rows, cols, &t, why, why_len);
		break;
	case SRT_DT_BF16:
	case SRT_DT_F32:
		q->type = dt == SRT_DT_BF16 ? SRT_WT_BF16 : SRT_WT_F32;
		rc = get_tensor(w, name, &dt, 1, rows, cols, &t, why, why_len);
		q->data = t.data;
		return rc;
	default:
		shape_str(got, sizeof(got), &t);
		set_why(why, why_len,
			"tensor %s: expected packed FP4 (I8), F8_E4M3, BF16 or F32, got %s %s", name,
			dt_name(t.dtype), got);
		return SRT_EINVAL;
	}
	if (rc)
		return rc;
	q->data = t.data;
	snprintf(name, sizeof(name), "%s.scale", prefix);
	if ((rc = get_tensor(w, name, &sdt, 1, srows, scols, &s, why, why_len)))
		return rc;
	q->scales = s.data;
	return 0;
}

static void free_layer(const struct srt_host *host, struct moe_layer *l)
{
	host->free(l->norm);
	host->free(l->bias);
	host->free(l->experts);
	srt_fp8_block_free(&l->fp8_block);
}

static void free_scratch(struct moe_inst *in)
{
	void **p[] = {(void **)&in->xn,      (void **)&in->logits,   (void **)&in->gx,
		      (void **)&in->gs,      (void **)&in->gate,     (void **)&in->up,
		      (void **)&in->hq,      (void **)&in->hs,       (void **)&in->o,
		      (void **)&in->sel,     (void **)&in->wt,       (void **)&in->ent_row,
		      (void **)&in->ent_slot, (void **)&in->row_ent};
	for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
		in->host->free(*p[i]);
		*p[i] = NULL;
	}
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
	in->host->free(in->groups);
	in->host->free(in->up_done);
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
	if ((rc = view_router(w, name, in->n_exp, in->d, &l->router, why, why_len)))
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

	l->experts = in->host->alloc((size_t)in->n_exp * 3 * sizeof(struct srt_weight), 64);
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
	/* the shared expert runs for every token: its FP8 matrices in the decode GEMV's layout
	 * (the routed experts stay views: a copy of them all would double their memory) */
	struct srt_weight *ws[3] = {&l->shared[0], &l->shared[1], &l->shared[2]};
	/* no memory for the copy: auto keeps the checkpoint's views (same bits) */
	if (in->fp8_paired && srt_weight_fp8_pair_all(ws, 3, &l->fp8_block) && in->fp8_must) {
		set_why(why, why_len, "layer %d: out of memory for the paired FP8 shared expert "
			"(option fp8_layout = rows avoids the copy)", L);
		return SRT_ENOMEM;
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
	if (m->hidden_size <= 0 || m->hidden_size % MOE_QB ||
	    m->moe_intermediate_size <= 0 || m->moe_intermediate_size % MOE_QB) {
		set_why(why, why_len, "model %s: hidden_size %d and moe_intermediate_size %d must be "
			"positive multiples of %d (activation quantisation blocks)", m->name,
			m->hidden_size, m->moe_intermediate_size, MOE_QB);
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
	{
		const char *v = args->option ? args->option(args->option_ctx, "fp8_layout") : NULL;
		if (srt_weight_fp8_layout_option(v, in->profile == SRT_PROFILE_REFERENCE,
						 &in->fp8_paired, &in->fp8_must)) {
			set_why(why, why_len, "option fp8_layout: '%s' is not one of auto, paired, rows",
				v);
			rc = SRT_EINVAL;
			goto out_free;
		}
	}
	in->d = m->hidden_size;
	in->inter = m->moe_intermediate_size;
	in->n_exp = m->n_routed_experts;
	in->topk = m->num_experts_per_tok;
	in->route_scale = (float)m->routed_scaling_factor;
	in->limit = (float)m->swiglu_limit;
	in->eps = (float)m->rms_norm_eps;
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
	in->groups = host->alloc((size_t)(in->n_exp + 1) * sizeof(struct moe_group), 64);
	in->up_done = host->alloc((size_t)(in->n_exp + 1) * sizeof(*in->up_done), 64);
	if (!in->groups || !in->up_done) {
		set_why(why, why_len, "out of memory");
		rc = SRT_ENOMEM;
		goto out_free;
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
	size_t k1 = (size_t)in->topk + 1, ent = rows * k1, d = (size_t)in->d, I = (size_t)in->inter;
	if (rows <= in->cap_rows)
		return 0;
	free_scratch(in);
	in->xn = h->alloc(rows * d * sizeof(float), 64);
	in->logits = h->alloc(rows * (size_t)in->n_exp * sizeof(float), 64);
	in->gx = h->alloc(ent * d * sizeof(float), 64);
	in->gs = h->alloc(ent * (d / MOE_QB) * sizeof(float), 64);
	in->gate = h->alloc(ent * I * sizeof(float), 64);
	in->up = h->alloc(ent * I * sizeof(float), 64);
	in->hq = h->alloc(ent * I * sizeof(float), 64);
	in->hs = h->alloc(ent * (I / MOE_QB) * sizeof(float), 64);
	in->o = h->alloc(ent * d * sizeof(float), 64);
	in->sel = h->alloc(rows * (size_t)in->topk * sizeof(int32_t), 64);
	in->wt = h->alloc(rows * (size_t)in->topk * sizeof(float), 64);
	in->ent_row = h->alloc(ent * sizeof(int32_t), 64);
	in->ent_slot = h->alloc(ent * sizeof(int32_t), 64);
	in->row_ent = h->alloc(ent * sizeof(int32_t), 64);
	if (!in->xn || !in->logits || !in->gx || !in->gs || !in->gate || !in->up || !in->hq ||
	    !in->hs || !in->o || !in->sel || !in->wt || !in->ent_row || !in->ent_slot || !in->row_ent) {
		free_scratch(in);
		return SRT_ENOMEM;
	}
	in->cap_rows = rows;
	return 0;
}

/* Phase 1a, row i: ffn_norm (bf16 in reference) into xn. */
static void route_norm(struct moe_inst *in, int64_t i)
{
	const int64_t d = in->d;
	float *xn = in->xn + i * d;
	srt_rmsnorm_f32w(in->x + (in->row0 + i) * d, xn, (size_t)d, in->cur->norm, in->eps);
	if (in->profile == SRT_PROFILE_REFERENCE)
		srt_round_bf16_n(xn, (size_t)d);
}

/* Phase 1b, rows x logits [n0, n1): the router's logits in fp32 from the bf16 (or f32)
 * router, each logit its own dot product (any split of them gives the same bits). */
static void route_logits(struct moe_inst *in, int64_t i, size_t n0, size_t n1)
{
	const size_t E = (size_t)in->n_exp;
	srt_gemm_exact(&in->cur->router, in->xn + i * in->d, 1, (size_t)in->d,
		       in->logits + i * (int64_t)E, E, n0, n1);
}

/* Phase 1c, row i: its scores from the logits and the expert choice. */
static void route_pick(struct moe_inst *in, int64_t i)
{
	const struct moe_layer *l = in->cur;
	const int64_t E = in->n_exp, k = in->topk;
	float scores[E], biased[E], sum = 0.0f;
	char taken[E];
	const float *lg = in->logits + i * E;
	int32_t *sel = in->sel + i * k;
	float *wt = in->wt + i * k;
	for (int64_t e = 0; e < E; e++) {
		scores[e] = sqrtf(srt_softplus(lg[e]));
		biased[e] = l->bias ? scores[e] + l->bias[e] : scores[e];
	}
	if (l->hash) {
		int64_t t = in->tok[in->row0 + i];
		for (int64_t j = 0; j < k; j++)
			sel[j] = l->tid_dt == SRT_DT_I32 ? ((const int32_t *)l->tid2eid)[t * k + j]
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

/* Phase 1, per row: norm, logits and expert choice. */
static void route_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	(void)tid;
	for (int64_t i = begin; i < end; i++) {
		route_norm(in, i);
		route_logits(in, i, 0, (size_t)in->n_exp);
		route_pick(in, i);
	}
}

/* Phase 1b of a one-row chunk (decode), per task: MOE_ROUTE_COLS logits. */
static void route_cols(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	(void)tid;
	const int64_t n1 = end * MOE_ROUTE_COLS < in->n_exp ? end * MOE_ROUTE_COLS : in->n_exp;
	route_logits(in, 0, (size_t)(begin * MOE_ROUTE_COLS), (size_t)n1);
}

/*
 * Bucket the chunk's (row, slot) pairs by expert (ascending id), then one shared-expert entry
 * per row; row_ent lists each row's entries in that (ascending expert) order.
 */
static void build_groups(struct moe_inst *in)
{
	const int64_t E = in->n_exp, k = in->topk, m = in->m;
	int32_t pos = 0, fill[MOE_ROW_CHUNK] = {0};
	in->n_groups = 0;
	for (int64_t e = 0; e < E; e++) {
		int32_t first = pos;
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < k; j++)
				if (in->sel[i * k + j] == e) {
					in->ent_row[pos] = (int32_t)i;
					in->ent_slot[pos] = (int32_t)j;
					in->row_ent[i * (k + 1) + fill[i]++] = pos;
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
		in->row_ent[i * (k + 1) + fill[i]++] = pos;
		pos++;
	}
}

/* Phase 2, per entry: the GEMM input of its row (FP8 codes + scales in reference). */
static void gather_inputs(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	const int64_t d = in->d;
	(void)tid;
	for (int64_t e = begin; e < end; e++) {
		const float *xn = in->xn + (int64_t)in->ent_row[e] * d;
		if (in->profile == SRT_PROFILE_REFERENCE)
			srt_gemm_quant_row(xn, (size_t)d, in->gx + e * d, in->gs + e * (d / MOE_QB));
		else
			memcpy(in->gx + e * d, xn, (size_t)d * sizeof(float));
	}
}

/* y[first..first+count)[n0, n1) = X . W^T in the instance's profile. */
static void gemm(const struct moe_inst *in, const struct srt_weight *w, const float *x,
		 const float *xs, int32_t count, float *y, size_t ldy, size_t n0, size_t n1)
{
	if (in->profile == SRT_PROFILE_REFERENCE)
		srt_gemm_ref(w, x, xs, (size_t)count, w->cols, y, ldy, n0, n1);
	else
		srt_gemm_exact(w, x, (size_t)count, w->cols, y, ldy, n0, n1);
}

/*
 * Work units of the up_gate / down steps: task (group g, column block q) of a step with `per`
 * blocks per group is worth the group's row count, so its first unit is per·first_g +
 * q·count_g (groups hold consecutive entries) and a step has per·(entries) units. The host
 * splits units into equal contiguous ranges; a range runs the tasks whose first unit it holds,
 * so threads get about the same rows x columns even though the shared expert's group has
 * every row of the chunk and a routed group a few. Calls fn for those tasks of units
 * [in->task0 + begin, in->task0 + end).
 */
static void run_tasks(struct moe_inst *in, int64_t per, int64_t ncol, int64_t begin, int64_t end,
		      void (*fn)(struct moe_inst *in, const struct moe_group *g, size_t n0))
{
	const int64_t lo = in->task0 + begin, hi = in->task0 + end;
	for (int32_t gi = 0; gi < in->n_groups; gi++) {
		const struct moe_group *g = &in->groups[gi];
		const int64_t c = g->count, u0 = per * g->first;
		if (c <= 0 || u0 + per * c <= lo)
			continue;
		if (u0 >= hi)
			break;
		int64_t q0 = lo > u0 ? (lo - u0 + c - 1) / c : 0;
		int64_t q1 = (hi - u0 + c - 1) / c;
		for (int64_t q = q0; q < (q1 < per ? q1 : per); q++)
			fn(in, g, (size_t)(q * ncol));
	}
}

/* Phase 3 task: group g, inner channels [n0, n0 + ncol): h = weight * silu(gate) * up. */
static void up_gate_task(struct moe_inst *in, const struct moe_group *g, size_t n0)
{
	const int64_t d = in->d, I = in->inter;
	const int ref = in->profile == SRT_PROFILE_REFERENCE;
	const float L = in->limit;
	size_t n1 = n0 + (size_t)in->ncol_up;
	const int64_t xe = in->m == 1 ? 0 : g->first; /* a one-row chunk's input: entry 0's */
	const float *x = in->gx + xe * d;
	const float *xs = in->gs + xe * (d / MOE_QB);
	if (n1 > (size_t)I)
		n1 = (size_t)I;
	gemm(in, &g->w[0], x, xs, g->count, in->gate + (int64_t)g->first * I, (size_t)I, n0,
	     n1);
	gemm(in, &g->w[2], x, xs, g->count, in->up + (int64_t)g->first * I, (size_t)I, n0,
	     n1);
	for (int32_t e = g->first; e < g->first + g->count; e++) {
		if (ref) { /* w1(x), w3(x) return bf16 tensors (the library's vector loop) */
			srt_round_bf16_n(in->gate + (int64_t)e * I + (int64_t)n0, n1 - n0);
			srt_round_bf16_n(in->up + (int64_t)e * I + (int64_t)n0, n1 - n0);
		}
		float *gate = in->gate + (int64_t)e * I, *up = in->up + (int64_t)e * I;
		if (L > 0.0f)
			for (size_t n = n0; n < n1; n++) {
				/* fminf / fmaxf against a number (a NaN gives the bound), as
				 * comparisons: inlined instead of library calls */
				float u = up[n] > -L ? up[n] : -L;
				up[n] = u < L ? u : L;
				gate[n] = gate[n] < L ? gate[n] : L;
			}
		srt_silu_n(gate + n0, gate + n0, n1 - n0); /* srt_silu's bits, vectorised */
		float *hq = in->hq + (int64_t)e * I;
		if (g->routed) {
			const float wt = in->wt[(int64_t)in->ent_row[e] * in->topk + in->ent_slot[e]];
			for (size_t n = n0; n < n1; n++)
				hq[n] = wt * (gate[n] * up[n]);
		} else {
			for (size_t n = n0; n < n1; n++)
				hq[n] = gate[n] * up[n];
		}
	}
}

/*
 * Decode (one row, so every group has one entry and a unit is one task): the host hands
 * thread k a contiguous range of units, but the tasks are not equal (the shared expert's FP8
 * columns are twice the bytes of a routed FP4 group's, and all come last), so position p of a
 * call of n units runs unit spread(p): the units in the order (unit mod T, unit), which gives
 * each thread every T-th task, an even mix. Every task writes its own outputs: the order
 * changes no result.
 */
static int64_t spread(const struct moe_inst *in, int64_t p)
{
	const int64_t n = in->spread_n, T = in->host->nthreads;
	if (!n || T < 2)
		return p;
	int64_t acc = 0;
	for (int64_t c = 0; c < T && c < n; c++) {
		int64_t sz = (n - c + T - 1) / T; /* units c, c + T, ... below n */
		if (p < acc + sz)
			return c + (p - acc) * T;
		acc += sz;
	}
	return p; /* not reached: the classes cover [0, n) */
}

/* run_tasks over units [begin, end) of the call, one unit at a time in spread() order at
 * decode. */
static void run_units(struct moe_inst *in, int64_t per, int64_t ncol, int64_t begin, int64_t end,
		      void (*fn)(struct moe_inst *in, const struct moe_group *g, size_t n0))
{
	if (!in->spread_n) {
		run_tasks(in, per, ncol, begin, end, fn);
		return;
	}
	for (int64_t p = begin; p < end; p++) {
		const int64_t u = spread(in, p);
		run_tasks(in, per, ncol, u, u + 1, fn);
	}
}

/* parallel_for of n up_gate / down units, dealt round-robin at decode (spread()). */
static void par_units(struct moe_inst *in, int64_t n, srt_range_fn fn)
{
	in->spread_n = in->m == 1 ? n : 0;
	in->host->parallel_for(in->host, n, fn, in);
	in->spread_n = 0;
}

static void up_gate(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	(void)tid;
	run_units(in, in->n_tasks_per_group_up, in->ncol_up, begin, end, up_gate_task);
}

/* Phase 4, per entry (reference only): h rounded to bf16, then quantised to FP8 per 128. */
static void quant_h(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	const int64_t I = in->inter;
	(void)tid;
	for (int64_t e = begin; e < end; e++) {
		float *h = in->hq + e * I;
		srt_round_bf16_n(h, (size_t)I);
		srt_gemm_quant_row(h, (size_t)I, h, in->hs + e * (I / MOE_QB));
	}
}

/* Phase 5 task: group g, output channels [n0, n0 + ncol): o = W2 . h. */
static void down_task(struct moe_inst *in, const struct moe_group *g, size_t n0)
{
	const int64_t d = in->d, I = in->inter;
	size_t n1 = n0 + (size_t)in->ncol_down;
	if (n1 > (size_t)d)
		n1 = (size_t)d;
	gemm(in, &g->w[1], in->hq + (int64_t)g->first * I,
	     in->hs + (int64_t)g->first * (I / MOE_QB), g->count, in->o + (int64_t)g->first * d,
	     (size_t)d, n0, n1);
	if (in->profile == SRT_PROFILE_REFERENCE) /* each expert returns bf16 (used by combine) */
		for (int32_t e = g->first; e < g->first + g->count; e++)
			srt_round_bf16_n(in->o + (int64_t)e * d + (int64_t)n0, n1 - n0);
}

static void down(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	(void)tid;
	run_units(in, in->n_tasks_per_group_down, in->ncol_down, begin, end, down_task);
}

/*
 * Decode with few threads (moe_forward): each expert of the row is two tasks, its up_gate with
 * its h quantized, and its down projection, each by one thread, the threads taking the tasks
 * in turn from a shared counter: every up task first (expert 0, the shared one, leading: its
 * FP8 weights are the most bytes), then the down tasks in the same order, a third of the bytes
 * each, so that the last tasks are the small ones. A down task whose up task has not ended
 * waits for it (taken earlier, by a thread that waits on nothing, so the wait ends). Whole
 * experts as single tasks had left the last expert's three matrices to one thread while the
 * other waited: 2 threads, the threads' ends 70 us apart per layer on average, 15 now, the
 * down tasks' waits 1.5 us (`small`, 300 decode steps). Each task writes only its entry's
 * outputs with the operations of the column-split path, so the results do not depend on which
 * thread ran what.
 */
static void whole_experts(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	const int32_t n = in->n_groups;
	(void)begin, (void)end, (void)tid;
	for (int32_t i; (i = atomic_fetch_add(&in->next_whole, 1)) < 2 * n;) {
		/* tasks 0 .. n - 1: up(i); then n .. 2n - 1: down(i - n) */
		const int down = i >= n;
		const int32_t j = down ? i - n : i;
		const int32_t gi = j == 0 ? n - 1 : j - 1; /* the shared group is the last */
		const struct moe_group *g = &in->groups[gi];
		const uint64_t t0 = srt_prof_t0(&moe_prof);
		if (!down) {
			up_gate_task(in, g, 0);
			if (in->profile == SRT_PROFILE_REFERENCE)
				quant_h(in, g->first, g->first + g->count, 0);
			atomic_store_explicit(&in->up_done[gi], 1, memory_order_release);
		} else {
			for (unsigned w = 0;
			     !atomic_load_explicit(&in->up_done[gi], memory_order_acquire); w++) {
#if defined(__x86_64__) || defined(__i386__)
				__builtin_ia32_pause();
#endif
				if (w >= 4096)
					sched_yield(); /* its thread may have lost its core */
			}
			down_task(in, g, 0);
		}
		if (t0)
			atomic_fetch_add(&in->whole_ns[gi == n - 1], srt_prof_t0(&moe_prof) - t0);
	}
}

/* Phase 6: channels [c0, c1) of row i, the sum of its experts' outputs in ascending expert
 * id, shared last: 0 + o_0 + o_1 + ... per channel (each channel's own chain, so any split
 * of the channels gives the same bits), then bf16 in reference (down_task). */
static void combine_row(const struct moe_inst *in, int64_t i, int64_t c0, int64_t c1)
{
	const int64_t d = in->d, k1 = in->topk + 1;
	float *restrict out = in->out + (in->row0 + i) * d;
	const int32_t *ents = in->row_ent + i * k1;
	const float *restrict o0 = in->o + (int64_t)ents[0] * d;
	for (int64_t c = c0; c < c1; c++)
		out[c] = 0.0f + o0[c];
	for (int64_t j = 1; j < k1; j++) {
		const float *restrict oj = in->o + (int64_t)ents[j] * d;
		for (int64_t c = c0; c < c1; c++)
			out[c] += oj[c];
	}
	if (in->profile == SRT_PROFILE_REFERENCE)
		srt_round_bf16_n(out + c0, (size_t)(c1 - c0));
}

/* Phase 6 per row. */
static void combine(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	(void)tid;
	for (int64_t i = begin; i < end; i++)
		combine_row(in, i, 0, in->d);
}

/* Phase 6 of a one-row chunk (decode), per task: MOE_COMB_COLS channels of the row. */
static void combine_cols(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct moe_inst *in = ctx;
	(void)tid;
	const int64_t c1 = end * MOE_COMB_COLS < in->d ? end * MOE_COMB_COLS : in->d;
	combine_row(in, 0, begin * MOE_COMB_COLS, c1);
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
	const struct srt_host *h = in->host;
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
	in->ncol_up = in->ncol_down = n >= MOE_BIG_ROWS ? MOE_NCOL_BIG : MOE_NCOL;
	const int64_t T = in->host->nthreads > 0 ? in->host->nthreads : 1;
	/* decode with at least two experts a thread: whole experts (whole_experts) */
	const int whole = n == 1 && 2 * T <= in->topk + 1;
	if (n == 1) {
		/* decode: each thread one contiguous block of each matrix (whole matrices for
		 * whole experts), one stream front to back; spread() deals block t of every
		 * group to thread t. Jumping between column blocks of the gate, up and down
		 * matrices cost 8% of a one-thread decode step. */
		const int64_t P = whole ? 1 : T;
		in->ncol_up = ((in->inter + P - 1) / P + 7) / 8 * 8;
		in->ncol_down = ((in->d + P - 1) / P + 7) / 8 * 8;
	}
	in->n_tasks_per_group_up = (in->inter + in->ncol_up - 1) / in->ncol_up;
	in->n_tasks_per_group_down = (in->d + in->ncol_down - 1) / in->ncol_down;
	for (int64_t r0 = 0; r0 < n; r0 += MOE_ROW_CHUNK) {
		int64_t n_ent;
		in->row0 = r0;
		in->m = n - r0 < MOE_ROW_CHUNK ? n - r0 : MOE_ROW_CHUNK;
		n_ent = in->m * (in->topk + 1);
		uint64_t t0 = srt_prof_t0(&moe_prof);
		if (in->m == 1) { /* decode: the router's logits over the threads */
			route_norm(in, 0);
			h->parallel_for(h, (in->n_exp + MOE_ROUTE_COLS - 1) / MOE_ROUTE_COLS,
					route_cols, in);
			route_pick(in, 0);
		} else {
			h->parallel_for(h, in->m, route_rows, in);
		}
		build_groups(in);
		if (in->m == 1) { /* decode: every entry is the one row, quantized once (entry 0's
				   * input serves them all: up_gate_task) */
			gather_inputs(in, 0, 1, 0);
		} else {
			h->parallel_for(h, n_ent, gather_inputs, in);
		}
		t0 = srt_prof_add(&moe_prof, SRT_PROF_MOE_ROUTE, t0);
		in->task0 = 0;
		if (whole) {
			atomic_store(&in->next_whole, 0);
			for (int32_t gi = 0; gi < in->n_groups; gi++)
				atomic_store_explicit(&in->up_done[gi], 0, memory_order_relaxed);
			atomic_store(&in->whole_ns[0], 0);
			atomic_store(&in->whole_ns[1], 0);
			h->parallel_for(h, T, whole_experts, in);
			if (t0) {
				/* the routed and shared tasks ran side by side: the phase's time
				 * split between them by their share of the threads' time */
				const uint64_t t1 = srt_prof_t0(&moe_prof), r = in->whole_ns[0];
				const uint64_t sh = in->whole_ns[1], all = r + sh ? r + sh : 1;
				const uint64_t tr = (t1 - t0) * r / all;
				moe_prof.ns[SRT_PROF_MOE_EXPERTS] += tr;
				moe_prof.ns[SRT_PROF_MOE_SHARED] += (t1 - t0) - tr;
				moe_prof.calls[SRT_PROF_MOE_EXPERTS]++;
				moe_prof.calls[SRT_PROF_MOE_SHARED]++;
				t0 = t1;
			}
		} else if (t0) {
			/* profiling: the routed groups, then the shared one (the last group) */
			/* units: routed entries first, the shared group's m entries last */
			const int64_t nr = n_ent - in->m, pu = in->n_tasks_per_group_up;
			const int64_t pd = in->n_tasks_per_group_down;
			par_units(in, nr * pu, up_gate);
			if (in->profile == SRT_PROFILE_REFERENCE)
				h->parallel_for(h, n_ent - in->m, quant_h, in);
			par_units(in, nr * pd, down);
			t0 = srt_prof_add(&moe_prof, SRT_PROF_MOE_EXPERTS, t0);
			in->task0 = nr * pu;
			par_units(in, pu * in->m, up_gate);
			in->task0 = 0;
			if (in->profile == SRT_PROFILE_REFERENCE)
				quant_h(in, n_ent - in->m, n_ent, 0);
			in->task0 = nr * pd;
			par_units(in, pd * in->m, down);
			in->task0 = 0;
			t0 = srt_prof_add(&moe_prof, SRT_PROF_MOE_SHARED, t0);
		} else {
			par_units(in, n_ent * in->n_tasks_per_group_up, up_gate);
			if (in->profile == SRT_PROFILE_REFERENCE)
				h->parallel_for(h, n_ent, quant_h, in);
			par_units(in, n_ent * in->n_tasks_per_group_down, down);
		}
		if (in->m == 1)
			h->parallel_for(h, (in->d + MOE_COMB_COLS - 1) / MOE_COMB_COLS, combine_cols, in);
		else
			h->parallel_for(h, in->m, combine, in);
		srt_prof_add(&moe_prof, SRT_PROF_MOE_COMBINE, t0);
	}
	return 0;
}

static const struct srt_moe_vtable moe_vtable = {
	.struct_size = sizeof(struct srt_moe_vtable),
	.forward = moe_forward,
};

/* Options read from the plugin's runtime-config section (srt_plugin_desc.options). */
static const struct srt_plugin_option moe_options[] = {
	{"fp8_layout", "auto|paired|rows", "auto",
	 "the shared expert's FP8 weights copied into the decode GEMV's layout (auto: reference "
	 "profile on AVX512_BF16)"},
	{NULL, NULL, NULL, NULL},
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
	.options = moe_options,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &moe_desc;
}
