/*
 * mhc — Manifold-constrained hyper-connections, DeepSeek-V4's residual (spec section 3).
 *
 * The residual of a token is S = hc_mult streams X[S][d]. Around each sub-layer, with the
 * layer's fn [(2+S)S][S d], base [(2+S)S], scale [3] (hc_attn_* / hc_ffn_*):
 *   r    = 1 / sqrt(mean(x^2) + rms_norm_eps)       over the flattened x = X[0..S)[0..d)
 *   mu   = (fn . x) * r                             split S | S | S*S
 *   pre  = sigmoid(mu_pre * scale0 + base_pre) + hc_eps
 *   post = 2 sigmoid(mu_post * scale1 + base_post)
 *   M    = Sinkhorn(mu_comb * scale2 + base_comb): row softmax + hc_eps, column normalise,
 *          then hc_sinkhorn_iters - 1 rounds of {row, column} normalise (+hc_eps in divisors)
 *   pre():  u = sum_i pre_i X_i                     (bf16 in `reference`)
 *   post(): X'_j = post_j f + sum_i M_ij X_i        (X' = post (x) f + M^T X; bf16 in `reference`)
 * head(): pre from hc_head_* (no Sinkhorn), y = sum_i pre_i X_i (bf16 in `reference`).
 * `f32` profile: the same math without the bf16 roundings.
 *
 * mix (between pre and post) per row: post[S] then M[S][S], row-major (mix_floats = S + S*S).
 * Every row is computed from its own data in a fixed order: results do not depend on the batch.
 */
#include <shadowrt/shadowrt.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ops/prof.h"

/* Phase timings for benchmarks (core/ops/prof.h). */
static struct srt_prof mhc_prof;

SRT_EXPORT struct srt_prof *srt_plugin_prof(void);
SRT_EXPORT struct srt_prof *srt_plugin_prof(void)
{
	return &mhc_prof;
}

#define MHC_NAME "mhc"
#define MHC_MAX_S 16                              /* hc_mult limit (checked in create) */
#define MHC_MAX_MIX ((2 + MHC_MAX_S) * MHC_MAX_S) /* mixes of a sub-layer */
#define MHC_COLS 64 /* channels per task of a one-row post */

struct mhc_sub {
	float *fn;    /* [(2+S)S][S d] */
	float *base;  /* [(2+S)S] */
	float scale[3];
};

struct mhc_inst {
	const struct srt_host *host;
	int profile;
	int64_t d, S;
	int iters;
	float norm_eps, hc_eps;
	int32_t n_slots;
	struct mhc_sub *subs; /* [n_slots][2]: attention, ffn; fn NULL where not served */
	float *head_fn;       /* [S][S d] */
	float *head_base;     /* [S] */
	float head_scale;

	/* per-call parameters for the parallel_for bodies */
	const struct mhc_sub *cur;
	int32_t n_rows;
	const float *X, *f, *mix_in;
	float *Xout, *u, *mix;
	/* one row (decode): the fn rows of the call, their count, and the raw dot products
	 * fn_k . x (k < nd) and x . x (k = nd) the parallel step writes */
	const float *dfn;
	int64_t nd;
	float dots[MHC_MAX_MIX + 1];
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

/* Nearest even on the dropped 16 bits, NaN kept; without a branch, so that loops over
 * channels vectorise. */
static inline float bf16_round(float v)
{
	uint32_t u, r;
	memcpy(&u, &v, sizeof(u));
	r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
	r = (u & 0x7fffffffu) > 0x7f800000u ? u : r;
	memcpy(&v, &r, sizeof(v));
	return v;
}

/* The fixed tree that combines dot()'s 8 partial sums. */
static inline float tree8(const float s[8])
{
	return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

/* fp32 dot product in one fixed order (8 interleaved partial sums, fixed tree). */
static inline float dot(const float *a, const float *b, int64_t n)
{
	float s[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += a[i + j] * b[i + j];
	for (; i < n; i++)
		s[i & 7] += a[i] * b[i];
	return tree8(s);
}

/* Eight floats in a GCC vector: the lanes are dot()'s eight partial sums. */
typedef float mhc_v8 __attribute__((vector_size(32)));

/* y[j] = dot(a[j], b, n) for j < R (R <= 8): each with the operations of dot() in its order
 * (lane l of s[j] is its partial sum l), the R interleaved: one load of b for all, R
 * independent chains instead of one. */
static inline __attribute__((always_inline)) void dotr(const float *const *a, const float *b,
							int64_t n, float *y, const int R)
{
	mhc_v8 s[8] = {{0}};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		mhc_v8 bv, av;
		memcpy(&bv, b + i, sizeof bv);
		for (int q = 0; q < R; q++) {
			memcpy(&av, a[q] + i, sizeof av);
			s[q] += av * bv;
		}
	}
	for (int q = 0; q < R; q++) {
		float t[8];
		memcpy(t, &s[q], sizeof t);
		for (int64_t k = i; k < n; k++)
			t[k & 7] += a[q][k] * b[k];
		y[q] = tree8(t);
	}
}

/* The hot loops below also get an AVX2 build (GCC function multi-versioning, picked at load
 * by cpuid): the same operations in the same order, only wider vectors (no FMA: the avx2
 * target does not enable it, so nothing is contracted), hence the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MHC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MHC_CLONES
#endif

static inline float sigmoidf(float v)
{
	return 1.0f / (1.0f + expf(-v));
}

/* An fp32 copy of F32 (or BF16) tensor `name` with exactly n elements and the given shape. */
static int load(const struct mhc_inst *in, const struct srt_weights *w, const char *name,
		int64_t d0, int64_t d1, float **out, char *why, size_t why_len)
{
	struct srt_tensor t;
	int64_t n = d0 * (d1 < 0 ? 1 : d1);
	*out = NULL;
	if (w->get(w->ctx, name, &t) != 0) {
		set_why(why, why_len, "tensor %s: not found in the checkpoint", name);
		return SRT_ENOENT;
	}
	if (t.dtype != SRT_DT_F32 && t.dtype != SRT_DT_BF16) {
		set_why(why, why_len, "tensor %s: expected dtype F32 (or BF16), got dtype code %u",
			name, t.dtype);
		return SRT_EINVAL;
	}
	if ((d1 < 0 && (t.ndim != 1 || t.shape[0] != d0)) ||
	    (d1 >= 0 && (t.ndim != 2 || t.shape[0] != d0 || t.shape[1] != d1))) {
		char want[48], got[96];
		size_t o = 0;
		if (d1 < 0)
			snprintf(want, sizeof(want), "[%lld]", (long long)d0);
		else
			snprintf(want, sizeof(want), "[%lld, %lld]", (long long)d0, (long long)d1);
		o += (size_t)snprintf(got, sizeof(got), "[");
		for (uint32_t i = 0; i < t.ndim && i < SRT_TENSOR_MAX_DIMS && o < sizeof(got); i++)
			o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%lld", i ? ", " : "",
					      (long long)t.shape[i]);
		if (o < sizeof(got))
			snprintf(got + o, sizeof(got) - o, "]");
		set_why(why, why_len, "tensor %s: expected shape %s, got %s", name, want, got);
		return SRT_EINVAL;
	}
	*out = in->host->alloc((size_t)n * sizeof(float), 64);
	if (!*out) {
		set_why(why, why_len, "tensor %s: out of memory", name);
		return SRT_ENOMEM;
	}
	if (t.dtype == SRT_DT_F32) {
		memcpy(*out, t.data, (size_t)n * sizeof(float));
	} else {
		const uint16_t *b = t.data;
		for (int64_t i = 0; i < n; i++) {
			uint32_t u = (uint32_t)b[i] << 16;
			memcpy(&(*out)[i], &u, sizeof(float));
		}
	}
	return 0;
}

/* Load <prefix>_fn / _base / _scale (nmix rows, nscale scales) into fn, base, scale. */
static int load_triplet(const struct mhc_inst *in, const struct srt_weights *w, const char *prefix,
			int64_t nmix, int nscale, float **fn, float **base, float *scale, char *why,
			size_t why_len)
{
	char name[160];
	float *s = NULL;
	int rc;
	snprintf(name, sizeof(name), "%s_fn", prefix);
	if ((rc = load(in, w, name, nmix, in->S * in->d, fn, why, why_len)))
		return rc;
	snprintf(name, sizeof(name), "%s_base", prefix);
	if ((rc = load(in, w, name, nmix, -1, base, why, why_len)))
		return rc;
	snprintf(name, sizeof(name), "%s_scale", prefix);
	if ((rc = load(in, w, name, nscale, -1, &s, why, why_len)))
		return rc;
	memcpy(scale, s, (size_t)nscale * sizeof(float));
	in->host->free(s);
	return 0;
}

static void mhc_destroy(void *instance)
{
	struct mhc_inst *in = instance;
	if (!in)
		return;
	if (in->subs)
		for (int32_t i = 0; i < 2 * in->n_slots; i++) {
			in->host->free(in->subs[i].fn);
			in->host->free(in->subs[i].base);
		}
	in->host->free(in->subs);
	in->host->free(in->head_fn);
	in->host->free(in->head_base);
	in->host->free(in);
}

static int mhc_create(const struct srt_host *host, const struct srt_plugin_args *args,
		      void **instance, char *why, size_t why_len)
{
	const struct srt_model_config *m = args->model;
	struct mhc_inst *in;
	int32_t n_serve;
	int rc = SRT_ENOMEM;

	*instance = NULL;
	if (!m || !args->weights) {
		set_why(why, why_len, "mhc plugin needs a model config and weights");
		return SRT_EINVAL;
	}
	if (args->profile != SRT_PROFILE_REFERENCE && args->profile != SRT_PROFILE_F32) {
		set_why(why, why_len, "unknown numerics profile %u (expected 0 reference or 1 f32)",
			args->profile);
		return SRT_EINVAL;
	}
	if (m->hc_mult < 1 || m->hc_mult > MHC_MAX_S || m->hc_sinkhorn_iters < 1 || m->hidden_size < 1) {
		set_why(why, why_len, "model %s: hc_mult %d must be in [1, 16] and "
			"hc_sinkhorn_iters %d >= 1", m->name, m->hc_mult, m->hc_sinkhorn_iters);
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
	in->S = m->hc_mult;
	in->iters = m->hc_sinkhorn_iters;
	in->norm_eps = (float)m->rms_norm_eps;
	in->hc_eps = (float)m->hc_eps;
	in->n_slots = m->num_hidden_layers + m->num_nextn_predict_layers;
	in->subs = host->alloc((size_t)(in->n_slots > 0 ? in->n_slots : 1) * 2 *
			       sizeof(struct mhc_sub), 64);
	if (!in->subs) {
		set_why(why, why_len, "out of memory");
		goto out_free;
	}
	memset(in->subs, 0, (size_t)in->n_slots * 2 * sizeof(struct mhc_sub));

	n_serve = args->layers ? (int32_t)args->n_layers : m->num_hidden_layers;
	for (int32_t i = 0; i < n_serve; i++) {
		int32_t L = args->layers ? args->layers[i] : i;
		char pre[64];
		if (L < 0 || L >= in->n_slots) {
			set_why(why, why_len, "layer %d out of range [0, %d)", L, in->n_slots);
			rc = SRT_EINVAL;
			goto out_free;
		}
		for (int s = 0; s < 2; s++) {
			struct mhc_sub *sub = &in->subs[2 * L + s];
			if (sub->fn)
				continue;
			if (L < m->num_hidden_layers)
				snprintf(pre, sizeof(pre), "layers.%d.hc_%s", L, s ? "ffn" : "attn");
			else
				snprintf(pre, sizeof(pre), "mtp.%d.hc_%s", L - m->num_hidden_layers,
					 s ? "ffn" : "attn");
			rc = load_triplet(in, args->weights, pre, (2 + in->S) * in->S, 3, &sub->fn,
					  &sub->base, sub->scale, why, why_len);
			if (rc)
				goto out_free;
		}
	}
	rc = load_triplet(in, args->weights, "hc_head", in->S, 1, &in->head_fn, &in->head_base,
			  &in->head_scale, why, why_len);
	if (rc)
		goto out_free;
	*instance = in;
	return 0;

out_free:
	mhc_destroy(in);
	return rc;
}

static uint32_t mhc_n_streams(void *inst)
{
	return (uint32_t)((struct mhc_inst *)inst)->S;
}

static uint32_t mhc_mix_floats(void *inst)
{
	struct mhc_inst *in = inst;
	return (uint32_t)(in->S + in->S * in->S);
}

static int mhc_embed(void *inst, int32_t n_rows, const float *h, float *X)
{
	struct mhc_inst *in = inst;
	for (int64_t i = 0; i < n_rows; i++)
		for (int64_t s = 0; s < in->S; s++)
			memcpy(X + (i * in->S + s) * in->d, h + i * in->d, (size_t)in->d * sizeof(float));
	return 0;
}

/* out[k] = fn_k . x (k < nd) and x . x (k = nd) for k in [begin, end), rows of n floats: each
 * dot()'s operations, 8 or 4 of them in one pass over x (dotr; 8 weight rows streamed at once
 * read 384 KiB in 21 instead of 27 µs), so the same bits in any grouping. */
static inline __attribute__((always_inline)) void dots_range(const float *fn, int64_t nd,
							     const float *x, int64_t n,
							     int64_t begin, int64_t end, float *out)
{
	for (int64_t k = begin; k < end;) {
		if (end - k >= 4) {
			const int R = end - k >= 8 ? 8 : 4;
			const float *a[8];
			for (int j = 0; j < R; j++)
				a[j] = k + j < nd ? fn + (k + j) * n : x;
			if (R == 8)
				dotr(a, x, n, out + k, 8);
			else
				dotr(a, x, n, out + k, 4);
			k += R;
			continue;
		}
		out[k] = dot(k < nd ? fn + k * n : x, x, n);
		k++;
	}
}

/* mu[nmix] = (fn . x) * r for the flattened row x[S d]; with `raw` (one-row calls), the dot
 * products fn_k . x were computed already (raw[k]) and x . x is raw[nmix]. */
MHC_CLONES static void mixes(const struct mhc_inst *in, const float *fn, int64_t nmix,
			     const float *x, const float *raw, float *mu)
{
	int64_t n = in->S * in->d;
	float dots[MHC_MAX_MIX + 1];
	if (!raw) {
		dots_range(fn, nmix, x, n, 0, nmix + 1, dots);
		raw = dots;
	}
	float r = 1.0f / sqrtf(raw[nmix] / (float)n + in->norm_eps);
	for (int64_t k = 0; k < nmix; k++)
		mu[k] = raw[k] * r;
}

/* One-row calls, per task k: in->dots[k] = fn_k . x (k < nd), x . x (k = nd), the same dot
 * products mixes() computes, so the same bits. */
MHC_CLONES static void row_dots(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct mhc_inst *in = ctx;
	(void)tid;
	dots_range(in->dfn, in->nd, in->X, in->S * in->d, begin, end, in->dots);
}

/* collapse for four streams: the same operations per channel in the same order, the streams
 * unrolled so that the channels go through the vector lanes (the loop over a variable stream
 * count stayed scalar: 3.6 us a call). */
MHC_CLONES static void collapse4(const struct mhc_inst *in, const float *pre, const float *x,
				 float *u)
{
	const int64_t d = in->d;
	const int ref = in->profile == SRT_PROFILE_REFERENCE;
	const float p0 = pre[0], p1 = pre[1], p2 = pre[2], p3 = pre[3];
	const float *restrict x0 = x, *restrict x1 = x + d, *restrict x2 = x + 2 * d;
	const float *restrict x3 = x + 3 * d;
	float *restrict uo = u;
	for (int64_t c = 0; c < d; c++) {
		float acc = p0 * x0[c];
		acc += p1 * x1[c];
		acc += p2 * x2[c];
		acc += p3 * x3[c];
		uo[c] = ref ? bf16_round(acc) : acc;
	}
}

/* u[d] = sum_i pre_i X_i, accumulated stream by stream. */
MHC_CLONES static void collapse(const struct mhc_inst *in, const float *pre, const float *x, float *u)
{
	int ref = in->profile == SRT_PROFILE_REFERENCE;
	if (in->S == 4) {
		collapse4(in, pre, x, u);
		return;
	}
	for (int64_t c = 0; c < in->d; c++) {
		float acc = pre[0] * x[c];
		for (int64_t s = 1; s < in->S; s++)
			acc += pre[s] * x[s * in->d + c];
		u[c] = ref ? bf16_round(acc) : acc;
	}
}

static void pre_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct mhc_inst *in = ctx;
	const struct mhc_sub *sub = in->cur;
	int64_t S = in->S, nmix = (2 + S) * S;
	float mu[nmix], pre[S];
	(void)tid;

	for (int64_t i = begin; i < end; i++) {
		const float *x = in->X + i * S * in->d;
		float *post = in->mix + i * (S + S * S), *M = post + S;
		mixes(in, sub->fn, nmix, x, in->n_rows == 1 ? in->dots : NULL, mu);
		for (int64_t s = 0; s < S; s++) {
			pre[s] = sigmoidf(mu[s] * sub->scale[0] + sub->base[s]) + in->hc_eps;
			post[s] = 2.0f * sigmoidf(mu[S + s] * sub->scale[1] + sub->base[S + s]);
		}
		for (int64_t k = 0; k < S * S; k++)
			M[k] = mu[2 * S + k] * sub->scale[2] + sub->base[2 * S + k];
		/* Sinkhorn: row softmax + eps, column normalise, then (iters - 1) x {row, column} */
		for (int64_t a = 0; a < S; a++) {
			float *row = M + a * S, mx = row[0], sum = 0.0f;
			for (int64_t b = 1; b < S; b++)
				mx = fmaxf(mx, row[b]);
			for (int64_t b = 0; b < S; b++)
				sum += (row[b] = expf(row[b] - mx));
			for (int64_t b = 0; b < S; b++)
				row[b] = row[b] / sum + in->hc_eps;
		}
		for (int it = 0; it < in->iters; it++) {
			if (it > 0)
				for (int64_t a = 0; a < S; a++) {
					float sum = 0.0f;
					for (int64_t b = 0; b < S; b++)
						sum += M[a * S + b];
					for (int64_t b = 0; b < S; b++)
						M[a * S + b] /= sum + in->hc_eps;
				}
			for (int64_t b = 0; b < S; b++) {
				float sum = 0.0f;
				for (int64_t a = 0; a < S; a++)
					sum += M[a * S + b];
				for (int64_t a = 0; a < S; a++)
					M[a * S + b] /= sum + in->hc_eps;
			}
		}
		collapse(in, pre, x, in->u + i * in->d);
	}
}

/* post_row for four streams: the same operations per channel in the same order, constant
 * loops over the streams so that the channels go through the vector lanes. */
MHC_CLONES static void post_row4(const struct mhc_inst *in, int64_t i, int64_t c0, int64_t c1)
{
	const int64_t d = in->d;
	const int ref = in->profile == SRT_PROFILE_REFERENCE;
	float *x = in->Xout + i * 4 * d;
	const float *restrict f = in->f + i * d;
	const float *mx = in->mix_in + i * (4 + 16);
	float m[16], p[4]; /* the mixes in locals: the stores below cannot change them */
	memcpy(p, mx, sizeof p);
	memcpy(m, mx + 4, sizeof m);
	float *restrict x0 = x, *restrict x1 = x + d, *restrict x2 = x + 2 * d;
	float *restrict x3 = x + 3 * d;
	for (int64_t c = c0; c < c1; c++) {
		const float a0 = x0[c], a1 = x1[c], a2 = x2[c], a3 = x3[c], fc = f[c];
		float o[4];
		for (int j = 0; j < 4; j++) {
			float v = m[j] * a0;
			v += m[4 + j] * a1;
			v += m[8 + j] * a2;
			v += m[12 + j] * a3;
			const float acc = p[j] * fc + v;
			o[j] = ref ? bf16_round(acc) : acc;
		}
		x0[c] = o[0];
		x1[c] = o[1];
		x2[c] = o[2];
		x3[c] = o[3];
	}
}

/* X' = post * f + comb^T X for channels [c0, c1) of row i. */
MHC_CLONES static void post_row(const struct mhc_inst *in, int64_t i, int64_t c0, int64_t c1)
{
	int64_t S = in->S, d = in->d;
	int ref = in->profile == SRT_PROFILE_REFERENCE;
	if (S == 4) {
		post_row4(in, i, c0, c1);
		return;
	}
	float acc[S];
	float *x = in->Xout + i * S * d;
	const float *f = in->f + i * d;
	const float *post = in->mix_in + i * (S + S * S), *M = post + S;
	for (int64_t c = c0; c < c1; c++) {
		for (int64_t j = 0; j < S; j++) {
			float v = M[j] * x[c]; /* i = 0 */
			for (int64_t s = 1; s < S; s++)
				v += M[s * S + j] * x[s * d + c];
			acc[j] = post[j] * f[c] + v;
		}
		for (int64_t j = 0; j < S; j++)
			x[j * d + c] = ref ? bf16_round(acc[j]) : acc[j];
	}
}

static void post_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct mhc_inst *in = ctx;
	(void)tid;
	for (int64_t i = begin; i < end; i++)
		post_row(in, i, 0, in->d);
}

/* One-row post, per task: MHC_COLS channels (each channel's values depend on it alone). */
static void post_cols(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct mhc_inst *in = ctx;
	int64_t c1 = end * MHC_COLS < in->d ? end * MHC_COLS : in->d;
	(void)tid;
	post_row(in, 0, begin * MHC_COLS, c1);
}

static void head_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct mhc_inst *in = ctx;
	int64_t S = in->S;
	float mu[S], pre[S];
	(void)tid;
	for (int64_t i = begin; i < end; i++) {
		const float *x = in->X + i * S * in->d;
		mixes(in, in->head_fn, S, x, in->n_rows == 1 ? in->dots : NULL, mu);
		for (int64_t s = 0; s < S; s++)
			pre[s] = sigmoidf(mu[s] * in->head_scale + in->head_base[s]) + in->hc_eps;
		collapse(in, pre, x, in->u + i * in->d);
	}
}

static const struct mhc_sub *sub_of(const struct mhc_inst *in, int32_t layer, uint32_t sublayer)
{
	if (layer < 0 || layer >= in->n_slots || sublayer > SRT_SUBLAYER_FFN)
		return NULL;
	return in->subs[2 * layer + sublayer].fn ? &in->subs[2 * layer + sublayer] : NULL;
}

static int mhc_pre(void *inst, int32_t layer, uint32_t sublayer, int32_t n_rows, const float *X,
		   float *u, float *mix)
{
	struct mhc_inst *in = inst;
	const struct mhc_sub *sub = sub_of(in, layer, sublayer);
	if (!sub) {
		in->host->log(SRT_LOG_ERROR, MHC_NAME, "pre: layer %d sub-layer %u not served", layer,
			      sublayer);
		return SRT_EINVAL;
	}
	if (n_rows <= 0)
		return n_rows < 0 ? SRT_EINVAL : 0;
	in->cur = sub;
	in->X = X;
	in->u = u;
	in->mix = mix;
	in->n_rows = n_rows;
	uint64_t t0 = srt_prof_t0(&mhc_prof);
	if (n_rows == 1) { /* decode: the row's dot products over the threads first */
		in->dfn = sub->fn;
		in->nd = (2 + in->S) * in->S;
		in->host->parallel_for(in->host, in->nd + 1, row_dots, in);
	}
	in->host->parallel_for(in->host, n_rows, pre_rows, in);
	srt_prof_add(&mhc_prof, SRT_PROF_RESIDUAL, t0);
	return 0;
}

static int mhc_post(void *inst, int32_t layer, uint32_t sublayer, int32_t n_rows, const float *f,
		    const float *mix, float *X)
{
	struct mhc_inst *in = inst;
	if (!sub_of(in, layer, sublayer)) {
		in->host->log(SRT_LOG_ERROR, MHC_NAME, "post: layer %d sub-layer %u not served",
			      layer, sublayer);
		return SRT_EINVAL;
	}
	if (n_rows <= 0)
		return n_rows < 0 ? SRT_EINVAL : 0;
	in->f = f;
	in->mix_in = mix;
	in->Xout = X;
	uint64_t t0 = srt_prof_t0(&mhc_prof);
	if (n_rows == 1) /* decode: split by channels */
		in->host->parallel_for(in->host, (in->d + MHC_COLS - 1) / MHC_COLS, post_cols, in);
	else
		in->host->parallel_for(in->host, n_rows, post_rows, in);
	srt_prof_add(&mhc_prof, SRT_PROF_RESIDUAL, t0);
	return 0;
}

static int mhc_head(void *inst, int32_t n_rows, const float *X, float *y)
{
	struct mhc_inst *in = inst;
	if (n_rows <= 0)
		return n_rows < 0 ? SRT_EINVAL : 0;
	in->X = X;
	in->u = y;
	in->n_rows = n_rows;
	uint64_t t0 = srt_prof_t0(&mhc_prof);
	if (n_rows == 1) {
		in->dfn = in->head_fn;
		in->nd = in->S;
		in->host->parallel_for(in->host, in->nd + 1, row_dots, in);
	}
	in->host->parallel_for(in->host, n_rows, head_rows, in);
	srt_prof_add(&mhc_prof, SRT_PROF_RESIDUAL, t0);
	return 0;
}

static const struct srt_residual_vtable mhc_vtable = {
	.struct_size = sizeof(struct srt_residual_vtable),
	.n_streams = mhc_n_streams,
	.mix_floats = mhc_mix_floats,
	.embed = mhc_embed,
	.pre = mhc_pre,
	.post = mhc_post,
	.head = mhc_head,
};

/* Options read from the plugin's runtime-config section (srt_plugin_desc.options). */
static const struct srt_plugin_option mhc_options[] = {
	{NULL, NULL, NULL, NULL},
};

static const struct srt_plugin_desc mhc_desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_RESIDUAL,
	.name = MHC_NAME,
	.version = "1.0.0",
	.description = "CPU mHC residual: hc_mult streams, Sinkhorn-mixed (DeepSeek-V4)",
	.caps = SRT_CAP_CPU | SRT_CAP_BATCH,
	.probe = NULL,
	.create = mhc_create,
	.destroy = mhc_destroy,
	.vtable = &mhc_vtable,
	.options = mhc_options,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &mhc_desc;
}
