/*
 * The attention forward (spec sections 2 and 9) for window-only, CSA and HCA layers.
 *
 * One call runs in four phases:
 *   0. check   every page the call will read or write is present (nothing is written before
 *              this passes, so a failed call leaves the cache untouched);
 *   A. rows    attn_norm, q path, kv path, compressor projections, indexer query and head
 *              weights: projections split by output features over all rows of the block,
 *              element-wise work per row or per (row, head) (see "phase A" below);
 *   B. write   per sequence, in token order: window KV into the block's window scratch
 *              (a->wscr); compressor rows into the
 *              ring; a block's entry is pooled when its last token arrives and written to the
 *              C4 / C128 (and indexer) pools; the ring is saved into the state entry of a
 *              page at the page's last token and at the call's last token;
 *   C. attend  indexer top-k (csa) and the gather of window + compressed keys per row,
 *              attention with the sink and de-rotation per (row, head), then grouped wo_a
 *              per 8 outputs over all rows (see "phase C" below), so one decode row uses
 *              every thread;
 *   D. wo_b    per row range, in parallel.
 * After C, the block's window rows go into their pages. A window page is a ring of its last
 * W = 128 rows (slot t % 128 of page t / P; the pool declares ratio P / W): during C the rows
 * of the block are read from its scratch (entry()), earlier rows from the rings, whose slots
 * hold exactly the rows a window of the block can reach before the block's own.
 * Phase 0 covers the whole call; A-D run on blocks of ATTN_ROWS rows in row order (a sequence
 * cut by a block boundary continues in the next block as a chunked prefill would), which
 * bounds the scratch memory of a long prefill.
 * Every row's result depends only on its own inputs and on the page contents for positions
 * before it, and every reduction runs in a fixed order (ascending positions / entries, double
 * or sequential float sums, srt_gemm's fixed blocking): results are bitwise independent of
 * chunking, batching and thread count.
 *
 * Speed: the weights' products run once per call for all rows (srt_gemm for the FP8
 * matrices; attn_dot.h's double-accumulated kernels for the bf16 compressor, weights_proj and
 * wo_a weights, kept as tiles), the scratch is kept by the instance between calls.
 *
 * Numerics: `reference` rounds where DeepSeek's reference rounds (tests/reference/README.md
 * lists every point); dot products of activations (q.k, p.v, compressor and indexer
 * projections, grouped wo_a) are accumulated in double and rounded once to float, which is
 * exact for the bf16 operands the reference uses. `f32`: no rounding and no fake-quant; the
 * element-wise math of the compressor, head norm and softmax runs in double, the angles of RoPE
 * are formed in double.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_ix.h"
#include "attn_dot.h"
#include "attn_util.h"
#include "ops/act_n.h"
#include "ops/fp.h"
#include "ops/prof.h"
#include "ops/quant.h"
#include "ops/rope.h"

/*
 * What the caller says a sequence's cache already holds (ABI 1.1, abi/shadowrt/pool.h
 * srt_seq_cached): entries below ro[p] of pool p are read, never written; lo >= 0 for a
 * rematerialization call that started at position lo (window and carry state before lo are
 * not available: the carry starts empty at lo, rows whose window reaches before lo skip their
 * attention).
 */
struct vinfo {
	const uint64_t *ro; /* [n_pools] or NULL */
	int64_t lo;         /* -1: not a rematerialization */
};

#define ATTN_ROWS 256 /* rows per block of a call: bounds the scratch of a long prefill */
#define ATTN_CROWS 8  /* rows per phase C group: bounds the gathered keys */
#define ATTN_IXB 64   /* indexer keys scored per task */
#define ATTN_KGB 32   /* keys decoded and tiled per task (a multiple of the tile, 8, and even
		       * for the value pairs of phase_c1k) */
#define ATTN_RH 16    /* reference profile: query heads of a row per pass over its keys (16:
		       * one thread decodes a row's values once for all of the small preset's
		       * heads, where 8 decoded them twice; two threads still split the heads) */
#define ATTN_VLD (ATTN_KGB + 1) /* pv_blocks: key slots a value panel (a stride of 2 KiB put all
				 * 32 panels of a key in 2 sets of L1) */

/* Reference profile: what phase_c1k found about one block of ATTN_KGB keys of a row (or c1
 * about a row's queries: span, lo, hi). */
struct kblk {
	uint8_t exact;  /* srt_attn_bf16_exact of the keys (of a row's queries: c1, without dp):
			 * the float kernels may fuse */
	uint8_t span;   /* srt_attn_bf16_span accepted them (lo, hi); with dp, value pairs built */
	uint8_t lo, hi;
	uint8_t dp;     /* q·k done by c1k (srt_attn_qk16_bf16, scores in csc; no float tiles) */
};

struct fwd {
	struct srt_attn *a;
	const struct srt_attn_lw *lw;
	uint32_t slot; /* layer slot in the pools */
	const struct srt_batch *b;
	const float *x;
	float *out;
	int64_t N;
	int64_t *rpos;  /* [N] position of the row, -1 if no sequence covers it */
	int32_t *rseq;  /* [N] sequence index */
	float *xa, *qr, *q, *kv, *o, *og;
	/* compressors (attn.h, pending rows): the rows of the tokens whose groups complete in
	 * this block, cN of them (a sequence's pending rows from its state, then its rows of
	 * the block), their attn_norm outputs cx [cN][d] and positions cpos [cN]; their
	 * projections cp [cN][2 cw] (kv, score) and ip [cN][2 icw] (indexer); per sequence of
	 * the block its segment cs and the rows it leaves pending, ctail [n_seqs][CG - 1][d] */
	float *cx, *cp, *ip, *ctail;
	int64_t *cpos, cN;
	struct cseg *cs;
	float *iq, *iw; /* indexer query [N][IH idim], head weights [N][IH] */
	float *rcs;     /* RoPE at each row's position: [N][rd] (rd/2 cosines, then rd/2 sines) */
	/* REFERENCE: quantized xa and q latent, [N][d] + [N][d/128], [N][ql] + [N][ql/128] */
	float *xaq, *xas, *qrq, *qrs;
	/* per-thread scratch */
	size_t tfloats;
	float *tbuf;
	int64_t kmax, kmax8, c4max;
	/* phase C group: rows [cg0, cg0 + n), keys row-major [n][kmax][hd] (with vpan in value
	 * panels; with dp per thread, [nthreads][kthr][hd], decoded only for the float kernels)
	 * and tiled [n][kmax8][hd], key counts [n] */
	int64_t cg0, kthr;
	float *ck, *ckt;
	const uint8_t **csrc; /* the cache entries of each row's keys, [n][kmax] */
	float *dbuf; /* per thread: 4 decoded wo_a tiles, [nthreads][32 * gk] */
	double *isc; /* csa: indexer scores of the group's rows, [ATTN_CROWS][c4max] */
	int64_t *cnk;
	struct kblk *ckx; /* reference profile: per (group row, key block of phase_c1k) */
	/* reference profile with AVX512_BF16 dot products (srt_attn_dp_usable), for the group's
	 * rows: the queries as bf16 pairs, 16 heads in lanes, [n][hg][hd/2][16] (hg = ceil(H /
	 * 16); c1), the scores of the blocks c1k computed [n][hg][kmax][16], the values as pairs
	 * of keys [n][(kmax + 1)/2][hd] (p·v), the span of each row's queries (c1) */
	int dp;
	/* reference profile without dp, srt_attn_pv_panels: c1k scores each block of keys for
	 * every head (csc: [n][H][kmax8] floats; no row-wide tiles or keys, ckt and ck unused),
	 * c2 decodes the values again a block at a time into panels of 16 dims (pv_blocks) for
	 * srt_attn_pv_f32_np */
	int vpan;
	int dpmix; /* SRT_ATTN_DP_MIX=1 (a test knob): odd key blocks and odd heads take the
		    * float kernels, which give the same bits */
	uint32_t *cqp, *cvp;
	float *csc;
	struct kblk cq[ATTN_CROWS];
	int64_t row0; /* first batch row of the block being computed */
	struct vinfo *vi; /* [n_seqs] of f->b */
	int err;
};

/* A sequence's compressor rows in a block: tokens [ts, te) are projected here (comp rows
 * cbase + (t - ts)), in whole groups of SRT_ATTN_CG; tokens [te, end) stay pending. */
struct cseg {
	int64_t ts, te, cbase;
};

/* Phase timings for benchmarks (core/ops/prof.h); one copy per attention plugin module. */
static struct srt_prof attn_prof;

SRT_EXPORT struct srt_prof *srt_plugin_prof(void);
SRT_EXPORT struct srt_prof *srt_plugin_prof(void)
{
	return &attn_prof;
}

struct ipair {
	double s;
	int32_t j;
};

static int cmp_pair(const void *x, const void *y)
{
	const struct ipair *a = x, *b = y;
	if (a->s != b->s)
		return a->s > b->s ? -1 : 1;
	return a->j < b->j ? -1 : a->j > b->j;
}

/* ---- element-wise pieces ------------------------------------------------------------------- */

/* Weighted RMSNorm in place (reference: fp32 math with the mean of squares exact, -> bf16). */
static void rmsnorm_w(float *x, const float *w, size_t n, double eps, int ref)
{
	double ss = 0;
	for (size_t i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	if (ref) {
		float var = (float)(ss / (double)n);
		float r = 1.0f / sqrtf(var + (float)eps);
		for (size_t i = 0; i < n; i++)
			x[i] = w[i] * (x[i] * r);
		srt_round_bf16_n(x, n); /* the library's vector loop, same bits */
	} else {
		double r = 1.0 / sqrt(ss / (double)n + eps);
		for (size_t i = 0; i < n; i++)
			x[i] = (float)(w[i] * (x[i] * r));
	}
}

/* Weightless per-head RMSNorm of the query; the reference does it on a bf16 tensor. */
static void head_norm(float *q, size_t n, double eps, int ref)
{
	double ss = 0;
	if (ref) {
		/* bf16(q·q) summed in order (in any order where no sum rounds: vectorised); the
		 * roundings by the library's vector loop */
		float sq[256];
		for (size_t i0 = srt_attn_sumsq_bf16(q, n, &ss) ? n : 0; i0 < n; i0 += 256) {
			const size_t len = n - i0 < 256 ? n - i0 : 256;
			for (size_t i = 0; i < len; i++)
				sq[i] = q[i0 + i] * q[i0 + i];
			srt_round_bf16_n(sq, len);
			for (size_t i = 0; i < len; i++)
				ss += sq[i];
		}
		float mean = srt_round_bf16((float)(ss / (double)n));
		float r = srt_round_bf16(1.0f / sqrtf(srt_round_bf16(mean + (float)eps)));
		srt_attn_scale_bf16(q, n, r);
	} else {
		for (size_t i = 0; i < n; i++)
			ss += (double)q[i] * q[i];
		double r = 1.0 / sqrt(ss / (double)n + eps);
		for (size_t i = 0; i < n; i++)
			q[i] = (float)(q[i] * r);
	}
}

/* The cosines and sines (rd/2 each, at most 128) of RoPE at position pos. */
static void rope_cs(const struct srt_attn *a, int64_t pos, float *c, float *s)
{
	size_t np = (size_t)a->m->qk_rope_head_dim / 2;
	if (a->ref) {
		srt_rope_cos_sin(a->freqs, np, pos, c, s);
	} else {
		for (size_t i = 0; i < np; i++) {
			double ang = (double)pos * (double)a->freqs[i];
			c[i] = (float)cos(ang);
			s[i] = (float)sin(ang);
		}
	}
}

/* RoPE (or its inverse) of the rd dims at x by rope_cs's c, s. */
static void rope_by(const struct srt_attn *a, float *x, const float *c, const float *s,
		    int inverse)
{
	size_t rd = (size_t)a->m->qk_rope_head_dim;
	srt_rope_apply(x, rd, c, s, inverse != 0);
	if (a->ref)
		srt_round_bf16_n(x, rd);
}

/* RoPE (or its inverse) of the rd dims at x for position pos. */
static void rope(const struct srt_attn *a, float *x, int64_t pos, int inverse)
{
	float c[128], s[128];
	rope_cs(a, pos, c, s);
	rope_by(a, x, c, s, inverse);
}

/* The cosines, then the sines, of block row r's position (phase_a3 computes them once). */
static const float *row_cs(const struct fwd *f, int64_t r)
{
	return f->rcs + (size_t)r * (size_t)f->a->m->qk_rope_head_dim;
}

/* RoPE (or its inverse) of the rd dims at x for block row r, by row_cs's values. */
static void rope_row(const struct fwd *f, int64_t r, float *x, int inverse)
{
	const float *c = row_cs(f, r);
	rope_by(f->a, x, c, c + f->a->m->qk_rope_head_dim / 2, inverse);
}

/* Normalized Walsh-Hadamard transform, exact in double then scaled (n <= 1024). */
static void hadamard(float *x, size_t n, int ref)
{
	if (srt_attn_hadamard_d(x, n, ref))
		return;
	double y[1024];
	for (size_t i = 0; i < n; i++)
		y[i] = x[i];
	for (size_t h = 1; h < n; h *= 2)
		for (size_t i = 0; i < n; i += 2 * h)
			for (size_t j = i; j < i + h; j++) {
				double u = y[j], v = y[j + h];
				y[j] = u + v;
				y[j + h] = u - v;
			}
	double sc = pow((double)n, -0.5);
	for (size_t i = 0; i < n; i++)
		x[i] = ref ? (float)y[i] * (float)sc : (float)(y[i] * sc);
	if (ref)
		srt_round_bf16_n(x, n);
}

/* ---- pages -------------------------------------------------------------------------------- */

/* x / d and x % d (d > 0), by a shift and a mask where d is a power of two, as page sizes and
 * compression ratios are: entry() runs for every entry a step selects or attends densely, and
 * its 64-bit divisions (four, one of them page_span's repeat of epp) were most of its time
 * (perf at 64K tokens of context: 0.16 ms a step in entry() on Zen 2). */
static inline uint64_t udiv(uint64_t x, uint64_t d)
{
	return d & (d - 1) ? x / d : x >> __builtin_ctzll(d);
}

static inline uint64_t umod(uint64_t x, uint64_t d)
{
	return d & (d - 1) ? x % d : x & (d - 1);
}

/* Tokens (window pool) or entries (others) of pool p that one page covers. */
static uint64_t page_span(const struct srt_attn *a, int p)
{
	const struct srt_pool_decl *d = &a->pools[p];
	return p == a->pool_win ? a->P : udiv(a->P, d->ratio ? d->ratio : a->P);
}

/*
 * Entry `idx` of pool p for sequence s (NULL if its page is absent). The window pool is a
 * ring: position idx is on page idx / P in slot idx % win_ring, which holds the page's last
 * win_ring positions once the page is complete. While a block's attention runs (a->win_cur
 * set), the window rows of the block itself come from its scratch: their ring slots may
 * still hold rows 128 positions earlier that the block's first rows read (see run_block).
 */
static uint8_t *entry(const struct srt_attn *a, const struct srt_seq_view *s, int p,
		      uint32_t slot, int64_t idx)
{
	if (p == a->pool_win && a->win_cur && idx >= s->pos && idx < s->pos + s->n_tokens)
		return a->win_cur + (size_t)(s->first_row + (idx - s->pos)) * a->kv_bytes;
	const struct srt_pool_decl *d = &a->pools[p];
	uint64_t r = d->ratio ? d->ratio : a->P, epp = udiv(a->P, r);
	uint64_t page = udiv((uint64_t)idx, p == a->pool_win ? a->P : epp); /* page_span */
	const struct srt_page_table *pt = &s->pools[p];
	if (idx < 0 || page >= pt->n_pages || !pt->pages[page])
		return NULL;
	return (uint8_t *)pt->pages[page] + ((uint64_t)slot * epp + umod((uint64_t)idx, epp)) *
						    d->entry_bytes;
}

/* out[i] = entry(a, s, p, slot, idx + i) for i in [0, n), p a compressed pool (not the window
 * ring): one page lookup per page, the entries of a page consecutive. */
static void entry_run(const struct srt_attn *a, const struct srt_seq_view *s, int p,
		      uint32_t slot, int64_t idx, int64_t n, const uint8_t **out)
{
	const size_t eb = a->pools[p].entry_bytes;
	const int64_t span = (int64_t)page_span(a, p);
	for (int64_t i = 0; i < n;) {
		const uint8_t *e = entry(a, s, p, slot, idx + i);
		int64_t run = span - (int64_t)umod((uint64_t)(idx + i), (uint64_t)span);
		run = run < n - i ? run : n - i;
		for (int64_t r = 0; r < run; r++)
			out[i + r] = e ? e + (size_t)r * eb : NULL;
		i += run;
	}
}

/* Is entry idx of pool p read-only for the sequence (it exists in the cache)? */
static int ro_entry(const struct vinfo *v, int p, int64_t idx)
{
	return v->ro && p >= 0 && (uint64_t)idx < v->ro[p];
}

/* The srt_seq_cached facts of sequence i of batch b (none for an ABI 1.0 caller). */
static void read_cached(const struct srt_batch *b, uint32_t i, struct vinfo *out)
{
	const struct srt_seq_cached *c = NULL;
	out->ro = NULL;
	out->lo = -1;
	if (b->struct_size >= offsetof(struct srt_batch, cached) + sizeof(void *) && b->cached)
		c = b->cached[i];
	if (!c || c->struct_size < offsetof(struct srt_seq_cached, ro_entries) + sizeof(void *))
		return;
	out->ro = c->ro_entries;
	if ((c->flags & SRT_SEQ_REMAT) && b->seqs[i].pos > 0)
		out->lo = b->seqs[i].pos;
}

/* Check pool p has entries [lo, hi) for sequence si; error message otherwise. */
static int need(const struct srt_attn *a, const struct srt_seq_view *s, int p, uint32_t slot,
		int64_t lo, int64_t hi, int32_t layer, const char *what, char *why, size_t why_len)
{
	const struct srt_pool_decl *d = &a->pools[p];
	uint64_t epp = page_span(a, p);
	for (int64_t i = lo; i < hi;) {
		if (!entry(a, s, p, slot, i)) {
			uint64_t page = (uint64_t)i / epp;
			srt_attn_why(why, why_len, "%s: layer %d, sequence %llu at position %lld "
				     "(+%d tokens): pool %s has no page %llu (positions %llu..%llu; "
				     "table has %u pages), needed for %s", a->name, layer,
				     (unsigned long long)s->seq_id, (long long)s->pos, s->n_tokens,
				     d->name, (unsigned long long)page,
				     (unsigned long long)(page * a->P),
				     (unsigned long long)((page + 1) * a->P - 1), s->pools[p].n_pages,
				     what);
			return SRT_ENOENT;
		}
		i = (int64_t)(((uint64_t)i / epp + 1) * epp);
	}
	return 0;
}

/* ---- phase A: per-row projections ---------------------------------------------------------- */

/*
 * Phase A runs in five parallel steps over all rows of the block, so that a single decode row
 * still uses every thread and each weight is streamed once per call:
 *   a1 per row:      attn_norm (and the REFERENCE activations' quantization);
 *   a2 per 8 output features of wq_a, wkv, the compressors' wkv / wgate, weights_proj;
 *   a3 per row:      q / kv norms, kv RoPE and fake-quant, quantization of the q latent;
 *   a4 per 8 output features of wq_b and the indexer's wq_b;
 *   a5 per (row, head): head norm and RoPE of q, RoPE / Hadamard / fake-quant of the indexer q.
 * Every value is computed by the same operations in the same order as a per-row loop.
 */
enum { PJ_WQA, PJ_WKV, PJ_CKV, PJ_CG, PJ_IKV, PJ_IG, PJ_IWP, PJ_WQB, PJ_IWQB, PJ_COUNT };

/* Output features of projection job j (0 when the layer has none). */
static size_t pj_features(const struct fwd *f, int j)
{
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	const struct srt_attn_lw *lw = f->lw;
	switch (j) {
	case PJ_WQA:
		return (size_t)m->q_lora_rank;
	case PJ_WKV:
		return (size_t)m->head_dim;
	case PJ_CKV:
	case PJ_CG:
		return a->ratio && f->cN ? (size_t)(lw->comp.coff * lw->comp.width) : 0;
	case PJ_IKV:
	case PJ_IG:
		return a->ratio == 4 && f->cN ? (size_t)(lw->icomp.coff * lw->icomp.width) : 0;
	case PJ_IWP:
		return a->ratio == 4 ? (size_t)m->index_n_heads : 0;
	case PJ_WQB:
		return (size_t)(m->num_attention_heads * m->head_dim);
	case PJ_IWQB:
		return a->ratio == 4 ? (size_t)(m->index_n_heads * m->index_head_dim) : 0;
	}
	return 0;
}

/*
 * Bytes of weight per element of job j: the host splits units into equal contiguous ranges,
 * so a tile of job j counts as this many units and every thread streams about the same bytes.
 */
static int64_t pj_cost(const struct fwd *f, int j)
{
	const struct srt_attn_lw *lw = f->lw;
	const struct srt_attn_tm *t = j == PJ_CKV ? &lw->comp.wkv : j == PJ_CG ? &lw->comp.wgate
				      : j == PJ_IKV ? &lw->icomp.wkv : j == PJ_IG ? &lw->icomp.wgate
				      : j == PJ_IWP ? &lw->iwp : NULL;
	return t ? (t->bf16 ? 2 : 4) : 1; /* srt_gemm jobs: FP8 weights */
}

/* A projection done with srt_gemm: features [n0, n1) of every row of the block. */
static void pj_gemm(struct fwd *f, const struct srt_weight *w, const float *x, const float *xq,
		    const float *xs, float *y, size_t n0, size_t n1)
{
	size_t K = w->cols, N = w->rows, n = (size_t)f->N;
	if (f->a->ref)
		srt_gemm_ref(w, xq, xs, n, K, y, N, n0, n1);
	else
		srt_gemm_exact(w, x, n, K, y, N, n0, n1);
}

#define PJ_RB 64   /* rows per batched product in pj_tiles (reference profile) */
#define PJ_WIDE 64 /* tiles per product for a single row (decode): one long GEMV streams and
		    * prefetches the weights better than many short ones */

/* A double-accumulated projection with tiled weights (compressors, weights_proj): tiles
 * [t0, t1) for every row; four tiles at a time so the weights stay in cache across rows
 * (PJ_WIDE when there is one row). */
static void pj_tiles(struct fwd *f, int j, const struct srt_attn_tm *wt, size_t t0, size_t t1)
{
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	const struct srt_attn_lw *lw = f->lw;
	const struct srt_attn_comp *c = j == PJ_CKV || j == PJ_CG ? &lw->comp : &lw->icomp;
	size_t d = (size_t)m->hidden_size, nf = pj_features(f, j);
	size_t ih = (size_t)m->index_n_heads, idim = (size_t)m->index_head_dim;
	float wsc = (float)(pow((double)idim, -0.5) * pow((double)ih, -0.5));
	double y[PJ_WIDE * 8];
	float y32[PJ_RB * 32];
	_Static_assert(PJ_WIDE * 8 <= PJ_RB * 32, "one row of PJ_WIDE tiles fits y32");
	/* reference profile: the reference's fp32 / bf16 linears accumulate in float32, here
	 * in srt_gemm's fixed order on the stored matrix; f32 profile: double tiles */
	const int f32acc = a->ref && wt->w.data && wt->w.rows == nf && wt->w.cols == d;
	/* the compressors' rows are those of complete groups (f->cx), weights_proj's the block's */
	const int comp = j != PJ_IWP;
	const int64_t nrows = comp ? f->cN : f->N;
	const float *xrows = comp ? f->cx : f->xa;
	/* tiles per product: one product per PJ_RB rows and range of tiles. When every row fits
	 * one product (decode, and the compressors' few complete groups of a decode step), the
	 * weights are read once whatever the range, and wide ranges stream them better (a
	 * product of 4 tiles stops the read-ahead 32 rows into each matrix): as many tiles as
	 * y32 holds for those rows. More rows: 4 tiles, reused from cache by every product. */
	size_t ct = 4;
	if (f32acc && nrows <= PJ_RB) {
		const size_t fit = (size_t)(PJ_RB * 32) / (8 * (size_t)(nrows > 0 ? nrows : 1));
		ct = fit < 4 ? 4 : fit > PJ_WIDE ? PJ_WIDE : fit;
	}
	for (size_t c0 = t0; c0 < t1; c0 += ct) {
		size_t nt = t1 - c0 < ct ? t1 - c0 : ct, o0 = c0 * 8;
		size_t no = nt * 8 < nf - o0 ? nt * 8 : nf - o0;
		const struct srt_weight sub = {
			.type = wt->w.type, .rows = no, .cols = d,
			.data = f32acc ? (const uint8_t *)wt->w.data +
						 o0 * d * (wt->w.type == SRT_WT_BF16 ? 2 : 4)
				       : NULL};
		for (int64_t r = 0; r < nrows; r++) {
			int64_t pos = comp ? f->cpos[r] : f->rpos[r];
			if (f32acc && r % PJ_RB == 0) {
				/* rows [r, r + PJ_RB) in one batched product (srt_gemm's bits do
				 * not depend on the number of rows); rows without a position are
				 * computed and ignored */
				size_t nr = (size_t)(nrows - r < PJ_RB ? nrows - r : PJ_RB);
				srt_gemm_exact(&sub, xrows + (size_t)r * d, nr, d, y32, no, 0, no);
			}
			if (pos < 0)
				continue;
			if (f32acc) {
				for (size_t i = 0; i < no; i++)
					y[i] = (double)y32[(size_t)(r % PJ_RB) * no + i];
			} else {
				srt_attn_tm_dot(wt, xrows + (size_t)r * d, c0, nt, y);
			}
			if (j == PJ_IWP) {
				float *iw = f->iw + (size_t)r * ih + o0;
				for (size_t i = 0; i < no; i++)
					iw[i] = a->ref ? srt_round_bf16(srt_round_bf16((float)y[i]) * wsc)
						       : (float)(y[i] * wsc);
				continue;
			}
			/* compressor: kv [nf] then score [nf] (gate + ape of the position's slot) */
			float *cp = (j == PJ_CKV || j == PJ_CG ? f->cp : f->ip) + (size_t)r * 2 * nf;
			const float *ape = c->ape + (size_t)(pos % c->ratio) * nf + o0;
			if (j == PJ_CKV || j == PJ_IKV)
				for (size_t i = 0; i < no; i++)
					cp[o0 + i] = (float)y[i];
			else
				for (size_t i = 0; i < no; i++)
					cp[nf + o0 + i] = a->ref ? (float)y[i] + ape[i]
								 : (float)(y[i] + ape[i]);
		}
	}
}

/*
 * Units [b, e) of jobs [j0, j1), numbered job after job, pj_cost units per 8-feature tile; a
 * tile belongs to the range holding its first unit.
 */
static void pj_run(struct fwd *f, int j0, int j1, int64_t b, int64_t e)
{
	const struct srt_attn_lw *lw = f->lw;
	int64_t base = 0;
	for (int j = j0; j < j1; j++) {
		size_t nf = pj_features(f, j);
		int64_t w = pj_cost(f, j), nt = (int64_t)(nf + 7) / 8;
		int64_t lo = b > base ? (b - base + w - 1) / w : 0;
		int64_t hi = e < base + nt * w ? (e - base + w - 1) / w : nt;
		if (lo < hi) {
			size_t t0 = (size_t)lo, t1 = (size_t)hi;
			size_t n0 = t0 * 8, n1 = t1 * 8 < nf ? t1 * 8 : nf;
			switch (j) {
			case PJ_WQA:
				pj_gemm(f, &lw->wq_a, f->xa, f->xaq, f->xas, f->qr, n0, n1);
				break;
			case PJ_WKV:
				pj_gemm(f, &lw->wkv, f->xa, f->xaq, f->xas, f->kv, n0, n1);
				break;
			case PJ_CKV:
				pj_tiles(f, j, &lw->comp.wkv, t0, t1);
				break;
			case PJ_CG:
				pj_tiles(f, j, &lw->comp.wgate, t0, t1);
				break;
			case PJ_IKV:
				pj_tiles(f, j, &lw->icomp.wkv, t0, t1);
				break;
			case PJ_IG:
				pj_tiles(f, j, &lw->icomp.wgate, t0, t1);
				break;
			case PJ_IWP:
				pj_tiles(f, j, &lw->iwp, t0, t1);
				break;
			case PJ_WQB:
				pj_gemm(f, &lw->wq_b, f->qr, f->qrq, f->qrs, f->q, n0, n1);
				break;
			case PJ_IWQB:
				pj_gemm(f, &lw->iwq_b, f->qr, f->qrq, f->qrs, f->iq, n0, n1);
				break;
			}
		}
		base += nt * w;
	}
}

static int64_t pj_units(struct fwd *f, int j0, int j1)
{
	int64_t n = 0;
	for (int j = j0; j < j1; j++)
		n += (int64_t)(pj_features(f, j) + 7) / 8 * pj_cost(f, j);
	return n;
}

static void phase_a2(void *ctx, int64_t b, int64_t e, int tid)
{
	(void)tid;
	pj_run(ctx, PJ_WQA, PJ_WQB, b, e);
}

static void phase_a4(void *ctx, int64_t b, int64_t e, int tid)
{
	(void)tid;
	pj_run(ctx, PJ_WQB, PJ_COUNT, b, e);
}

static void phase_a1(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	size_t d = (size_t)m->hidden_size;
	(void)tid;
	for (int64_t r = b; r < e; r++) {
		float *xa = f->xa + r * d;
		memcpy(xa, f->x + r * d, d * sizeof(float));
		if (a->ref)
			srt_round_bf16_n(xa, d);
		rmsnorm_w(xa, f->lw->attn_norm, d, m->rms_norm_eps, a->ref);
		if (a->ref)
			srt_gemm_quant_row(xa, d, f->xaq + r * d, f->xas + r * (d / 128));
	}
}

/* Per (row, part): part 0 the query's latent (bf16, q_norm, its FP8 quantization), part 1
 * the key (bf16, kv_norm, RoPE and its FP8 rounding): two independent halves, so that a
 * decode row's go to two threads. */
static void phase_a3(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	const struct srt_attn_lw *lw = f->lw;
	size_t ql = (size_t)m->q_lora_rank;
	size_t hd = (size_t)m->head_dim, rd = (size_t)m->qk_rope_head_dim, nope = hd - rd;
	double eps = m->rms_norm_eps;
	(void)tid;
	for (int64_t u = b; u < e; u++) {
		const int64_t r = u / 2;
		if (u % 2 == 0) {
			float *qr = f->qr + r * ql;
			if (a->ref)
				srt_round_bf16_n(qr, ql);
			rmsnorm_w(qr, lw->q_norm, ql, eps, a->ref);
			if (a->ref)
				srt_gemm_quant_row(qr, ql, f->qrq + r * ql, f->qrs + r * (ql / 128));
			continue;
		}
		float *kv = f->kv + r * hd;
		int64_t pos = f->rpos[r];
		if (a->ref)
			srt_round_bf16_n(kv, hd);
		rmsnorm_w(kv, lw->kv_norm, hd, eps, a->ref);
		if (pos < 0)
			continue;
		/* the row's cosines and sines, once for its key, queries and outputs */
		float *rc = f->rcs + r * rd, *rs = rc + rd / 2;
		rope_cs(a, pos, rc, rs);
		rope_by(a, kv + nope, rc, rs, 0);
		if (a->ref)
			srt_quant_fp8_fake(kv, kv, nope, SRT_QUANT_KV_BLOCK, true);
	}
}

/* units: rows x (attention heads + indexer heads); within a row the first 2·min(H, ih)
 * units alternate between the two kinds (an indexer head, with its Hadamard transform and
 * FP4 rounding, costs about twice an attention head), so that the host's contiguous ranges
 * give every thread its share of both. */
static size_t a5_head(size_t j, size_t H, size_t ih)
{
	const size_t m = H < ih ? H : ih;
	if (j < 2 * m)
		return j % 2 ? H + j / 2 : j / 2;
	return j - m < H ? j - m : j; /* past the pairs: the rest of the more numerous kind */
}

static void phase_a5(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	size_t H = (size_t)m->num_attention_heads, hd = (size_t)m->head_dim;
	size_t rd = (size_t)m->qk_rope_head_dim, nope = hd - rd;
	size_t ih = a->ratio == 4 ? (size_t)m->index_n_heads : 0;
	size_t idim = (size_t)m->index_head_dim;
	(void)tid;
	for (int64_t u = b; u < e; u++) {
		int64_t r = u / (int64_t)(H + ih), pos = f->rpos[r];
		size_t h = a5_head((size_t)(u % (int64_t)(H + ih)), H, ih);
		if (pos < 0)
			continue;
		if (h < H) {
			float *q = f->q + (size_t)r * H * hd + h * hd;
			if (a->ref)
				srt_round_bf16_n(q, hd);
			head_norm(q, hd, m->rms_norm_eps, a->ref);
			rope_row(f, r, q + nope, 0);
		} else {
			float *iq = f->iq + (size_t)r * ih * idim + (h - H) * idim;
			if (a->ref)
				srt_round_bf16_n(iq, idim);
			rope_row(f, r, iq + idim - rd, 0);
			hadamard(iq, idim, a->ref);
			if (a->ref)
				srt_quant_fp4_fake(iq, iq, idim);
		}
	}
}

/* ---- phase B: KV writes and the compressors ------------------------------------------------ */

/* Pool the CSA block ending at token t from the ring of 8 rows into out[width] (before the
 * norm): per channel a softmax over the previous block's first halves and the current block's
 * second halves, in the reference's order (max, exp, sequential sum, weights, sequential sum). */
#define POOL_CH 64 /* channels pooled at a time (the reference profile's exps in one call) */

static void pool_block(const struct srt_attn_comp *c, const float *rk, const float *rs,
		       int64_t t, float *out, int ref)
{
	size_t w = (size_t)c->width, cw = (size_t)(c->coff * c->width);
	size_t slot[8];
	for (int r = 0; r < 8; r++) {
		int64_t tok = t - 7 + r;
		slot[r] = (size_t)(((tok % 8) + 8) % 8);
	}
	if (ref) {
		/* POOL_CH channels at a time, each channel with the operations of the double
		 * profile's loop below in float (max, exp, sequential sum, weights, sequential
		 * sum), the 8·POOL_CH exps by one srt_expf_n (expf's bits) */
		for (size_t c0 = 0; c0 < w; c0 += POOL_CH) {
			const size_t n = w - c0 < POOL_CH ? w - c0 : POOL_CH;
			float kvv[8][POOL_CH], ev[8][POOL_CH] = {{0}}, mx[POOL_CH], sum[POOL_CH];
			for (int r = 0; r < 8; r++) {
				const size_t off = slot[r] * cw + (r < 4 ? 0 : w) + c0;
				memcpy(kvv[r], rk + off, n * sizeof(float));
				memcpy(ev[r], rs + off, n * sizeof(float));
			}
			for (size_t k = 0; k < n; k++)
				mx[k] = -INFINITY;
			for (int r = 0; r < 8; r++)
				for (size_t k = 0; k < n; k++)
					mx[k] = ev[r][k] > mx[k] ? ev[r][k] : mx[k];
			for (int r = 0; r < 8; r++)
				for (size_t k = 0; k < n; k++)
					ev[r][k] = ev[r][k] - mx[k];
			srt_expf_n(&ev[0][0], &ev[0][0], 8 * POOL_CH);
			for (size_t k = 0; k < n; k++)
				sum[k] = 0.0f;
			for (int r = 0; r < 8; r++)
				for (size_t k = 0; k < n; k++)
					sum[k] += ev[r][k];
			for (size_t k = 0; k < n; k++)
				out[c0 + k] = kvv[0][k] * (ev[0][k] / sum[k]);
			for (int r = 1; r < 8; r++)
				for (size_t k = 0; k < n; k++)
					out[c0 + k] = out[c0 + k] + kvv[r][k] * (ev[r][k] / sum[k]);
		}
		return;
	}
	for (size_t ch = 0; ch < w; ch++) {
		double mx = -INFINITY, sum = 0, acc = 0, ev[8];
		float kvv[8], sc[8];
		for (int r = 0; r < 8; r++) {
			size_t chn = r < 4 ? ch : w + ch;
			kvv[r] = rk[slot[r] * cw + chn];
			sc[r] = rs[slot[r] * cw + chn];
		}
		for (int r = 0; r < 8; r++)
			mx = sc[r] > mx ? sc[r] : mx;
		for (int r = 0; r < 8; r++) {
			ev[r] = exp((double)sc[r] - mx);
			sum += ev[r];
		}
		for (int r = 0; r < 8; r++)
			acc += kvv[r] * (ev[r] / sum);
		out[ch] = (float)acc;
	}
}

/* Online pooling (ratio 128): add one token's row (kv, score) to the running state. */
static void online_add(float *mx, float *sum, float *acc, const float *kv, const float *sc,
		       size_t w)
{
	for (size_t c0 = 0; c0 < w; c0 += POOL_CH) {
		const size_t n = w - c0 < POOL_CH ? w - c0 : POOL_CH;
		float e[POOL_CH];
		/* the exps of the per-channel update below, by one srt_expf_n (expf's bits) */
		for (size_t k = 0; k < n; k++) {
			const size_t c = c0 + k;
			e[k] = sc[c] > mx[c] ? mx[c] - sc[c] : sc[c] - mx[c];
		}
		srt_expf_n(e, e, n);
		for (size_t k = 0; k < n; k++) {
			const size_t c = c0 + k;
			if (sc[c] > mx[c]) {
				/* e[k]: 0 for the empty state (max -inf) */
				sum[c] = sum[c] * e[k] + 1.0f;
				acc[c] = acc[c] * e[k] + kv[c];
				mx[c] = sc[c];
			} else {
				sum[c] += e[k];
				acc[c] += e[k] * kv[c];
			}
		}
	}
}

/* Does the call continue the carry state of page (pos - 1) / P (else it starts empty)? */
static int carry_in(const struct srt_attn *a, const struct srt_seq_view *s, const struct vinfo *vi)
{
	return !(s->pos == 0 || (a->ratio != 4 && s->pos % a->ratio == 0) || vi->lo == s->pos);
}

/*
 * The compressor rows of the block (struct fwd: cx, cpos, cN, cs, ctail), after phase a1:
 * per sequence, the pending rows of its carry state (tokens 4g .. pos - 1 of pos's group),
 * then its rows of the block, those in complete groups into cx, the rest into ctail.
 */
static void comp_rows(struct fwd *f)
{
	const struct srt_attn *a = f->a;
	const size_t d = (size_t)a->m->hidden_size;
	const int64_t CG = SRT_ATTN_CG;
	int64_t nc = 0;
	for (uint32_t i = 0; a->ratio && i < f->b->n_seqs; i++) {
		const struct srt_seq_view *s = &f->b->seqs[i];
		int64_t pos = s->pos, end = pos + s->n_tokens, pt0 = pos;
		const float *prow = NULL;
		if (pos % CG && carry_in(a, s, &f->vi[i])) {
			const uint8_t *e = entry(a, s, a->pool_state, f->slot, (pos - 1) / a->P) +
					   srt_attn_pend_off(a);
			int64_t h[2];
			memcpy(h, e, sizeof h);
			/* rows pos - n .. pos - 1 of pos's group (a rematerialization may have
			 * left fewer: those before its start are unknown, as in the rings) */
			if (h[1] > 0 && h[1] < CG && h[0] >= pos - pos % CG && h[0] + h[1] == pos) {
				pt0 = h[0];
				prow = (const float *)(const void *)(e + 2 * sizeof(int64_t));
			}
		}
		struct cseg *c = &f->cs[i];
		int64_t gend = end - end % CG; /* tokens below it are in complete groups */
		c->ts = pt0;
		c->te = gend > pt0 ? gend : pt0;
		c->cbase = nc;
		for (int64_t t = pt0; t < end; t++) {
			const float *x = t < pos ? prow + (size_t)(t - pt0) * d
						 : f->xa + (size_t)(s->first_row + (t - pos)) * d;
			float *to = t < c->te ? f->cx + (size_t)nc * d
					      : f->ctail + ((size_t)i * (CG - 1) + (size_t)(t - c->te)) * d;
			memcpy(to, x, d * sizeof(float));
			if (t < c->te)
				f->cpos[nc++] = t;
		}
	}
	f->cN = nc;
}

/* The pending rows of the state entry of page t / P, written after token t: those of the
 * block's tail (tokens [te, t]) at the call's last token, none at a page's last token; the
 * unused rows zeroed, so the bytes depend only on the tokens. */
static void save_pending(const struct fwd *f, uint32_t i, int64_t t)
{
	const struct srt_attn *a = f->a;
	const struct srt_seq_view *s = &f->b->seqs[i];
	const size_t d = (size_t)a->m->hidden_size, rows = (size_t)(SRT_ATTN_CG - 1);
	const struct cseg *c = &f->cs[i];
	int64_t h[2] = {c->te, t >= c->te ? t - c->te + 1 : 0};
	if (h[1] == 0)
		h[0] = t + 1;
	uint8_t *e = entry(a, s, a->pool_state, f->slot, t / a->P) + srt_attn_pend_off(a);
	memcpy(e, h, sizeof h);
	float *x = (float *)(void *)(e + sizeof h);
	if (h[1])
		memcpy(x, f->ctail + (size_t)i * rows * d, (size_t)h[1] * d * sizeof(float));
	memset(x + (size_t)h[1] * d, 0, (rows - (size_t)h[1]) * d * sizeof(float));
}

/*
 * Run one compressor over the sequence's complete groups of this block (f->cs[i]). `index`
 * selects the indexer's compressor (Hadamard + FP4, indexer pool) over the main one (FP8,
 * C4/C128 pool). The main one also writes the pending rows of the state entries.
 */
static void run_comp(struct fwd *f, uint32_t i, int index, float *ring)
{
	const struct srt_seq_view *s = &f->b->seqs[i];
	const struct vinfo *vi = &f->vi[i];
	const struct cseg *cs = &f->cs[i];
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	const struct srt_attn_comp *c = index ? &f->lw->icomp : &f->lw->comp;
	size_t w = (size_t)c->width, cw = (size_t)(c->coff * c->width), R = (size_t)c->ring;
	size_t rd = (size_t)m->qk_rope_head_dim;
	size_t off = index ? (size_t)srt_attn_ring_bytes(a, 4, m->head_dim) : 0;
	size_t ring_bytes = (size_t)srt_attn_ring_bytes(a, c->ratio, c->width);
	float *rk = ring, *rs = ring + R * cw, v[1024];
	const float *proj = index ? f->ip : f->cp;
	int64_t pos = s->pos, end = pos + s->n_tokens;
	int pool = index ? a->pool_ix : a->pool_comp;

	if (cs->te == cs->ts && carry_in(a, s, vi) && (pos - 1) / a->P == (end - 1) / a->P) {
		/* no group completes and the state stays in its entry: the ring is unchanged
		 * (a decode step between group ends) */
		if (!index && !ro_entry(vi, a->pool_state, (end - 1) / a->P))
			save_pending(f, i, end - 1);
		return;
	}
	if (!carry_in(a, s, vi)) {
		/* sequence start: kv = 0, score = -inf (ring); the empty state (online). A
		 * rematerialization starts here too: every entry it pools before its rows fill
		 * the ring is read-only, so the unknown state before pos is never used */
		for (size_t k = 0; k < ring_bytes / sizeof(float); k++)
			ring[k] = c->ratio == 4 ? (k < R * cw ? 0.0f : -INFINITY)
						: (k < w ? -INFINITY : 0.0f);
	} else {
		memcpy(ring, entry(a, s, a->pool_state, f->slot, (pos - 1) / a->P) + off, ring_bytes);
	}
	for (int64_t t = cs->ts; t < cs->te; t++) {
		const float *pr = proj + (size_t)(cs->cbase + (t - cs->ts)) * 2 * cw;
		if (c->ratio == 4) {
			size_t slot = (size_t)(t % 8);
			memcpy(rk + slot * cw, pr, cw * sizeof(float));
			memcpy(rs + slot * cw, pr + cw, cw * sizeof(float));
		} else {
			if (t % c->ratio == 0) /* a new block: the empty state */
				for (size_t i = 0; i < w; i++) {
					ring[i] = -INFINITY;
					ring[w + i] = 0.0f;
					ring[2 * w + i] = 0.0f;
				}
			online_add(ring, ring + w, ring + 2 * w, pr, pr + cw, w);
		}
		if (t % c->ratio == c->ratio - 1 && !ro_entry(vi, pool, t / c->ratio)) {
			int64_t j = t / c->ratio;
			if (c->ratio == 4)
				pool_block(c, rk, rs, t, v, a->ref);
			else
				for (size_t i = 0; i < w; i++)
					v[i] = ring[2 * w + i] / ring[w + i];
			if (a->ref)
				srt_round_bf16_n(v, w);
			rmsnorm_w(v, c->norm, w, m->rms_norm_eps, a->ref);
			rope(a, v + w - rd, j * c->ratio, 0);
			if (index) {
				hadamard(v, w, a->ref);
				if (a->ref)
					srt_quant_fp4_fake(v, v, w);
				srt_attn_ix_encode(a, v, entry(a, s, a->pool_ix, f->slot, j));
			} else {
				if (a->ref)
					srt_quant_fp8_fake(v, v, w - rd, SRT_QUANT_KV_BLOCK, true);
				srt_attn_kv_encode(a, v, entry(a, s, a->pool_comp, f->slot, j));
			}
		}
		if (t % a->P == a->P - 1 && !ro_entry(vi, a->pool_state, t / a->P)) {
			memcpy(entry(a, s, a->pool_state, f->slot, t / a->P) + off, ring, ring_bytes);
			if (!index)
				save_pending(f, i, t);
		}
	}
	if (!ro_entry(vi, a->pool_state, (end - 1) / a->P)) {
		memcpy(entry(a, s, a->pool_state, f->slot, (end - 1) / a->P) + off, ring, ring_bytes);
		if (!index)
			save_pending(f, i, end - 1);
	}
}

/* ---- phase C: attention per row ------------------------------------------------------------ */

/* The prepared query's bytes in phase_ix's buffer, rounded to pointer alignment. */
static size_t ix_qbytes(size_t ih, size_t idim)
{
	return (srt_attn_ixq_bytes(ih, idim) + 7) & ~(size_t)7;
}

/* Decode indexer key `e` into v (as srt_attn_ix_decode: the same floats), FP4 vectorised. */
static void ix_key(const struct srt_attn *a, const uint8_t *e, float *v)
{
	size_t d = (size_t)a->m->index_head_dim;
	if (a->ix_store != SRT_ATTN_ST_FP4) {
		srt_attn_ix_decode(a, e, v);
		return;
	}
	srt_attn_fp4_row(e, e + d / 2, d, v);
}

/*
 * Indexer scores, per (row of the group, block of ATTN_IXB keys): I[t, j] = Σ_h w[h] ·
 * ReLU(q[h] · k[j]) for the visible keys j of the row, into f->isc. The q·k products run
 * in double with heads in vector lanes (srt_attn_qk_heads: each head's sum in ascending
 * dims, as the scalar loop), the head sum in ascending heads: each score's bits depend only
 * on its row and key, so splitting keys between threads changes nothing.
 */
static void phase_ix(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	size_t ih = (size_t)m->index_n_heads, idim = (size_t)m->index_head_dim;
	int64_t nblk = (f->c4max + ATTN_IXB - 1) / ATTN_IXB;
	double *qt = (double *)(f->tbuf + (size_t)tid * f->tfloats);
	double *y = qt + ih * idim;
	float *keys = (float *)(y + ATTN_IXB * ih);
	/* the exact FP4 path (attn_ix.h): the prepared query, the keys' entries, their flags */
	void *ixqb = keys + ATTN_IXB * idim;
	const uint8_t **kp = (const uint8_t **)(void *)((char *)ixqb + ix_qbytes(ih, idim));
	const uint8_t **kn = kp + ATTN_IXB; /* the keys of the thread's next block of the row */
	uint8_t *kok = (uint8_t *)(kn + ATTN_IXB);
	const int fast = a->ix_store == SRT_ATTN_ST_FP4 && srt_attn_qk_fp4_ready(ih, idim);
	struct srt_attn_ixq ixq;
	int64_t qrow = -1, prow = -1;
	int qfp4 = 0;

	for (int64_t u = b; u < e; u++) {
		int64_t ur = u / nblk, j0 = (u % nblk) * ATTN_IXB, r = f->cg0 + ur, t = f->rpos[r];
		if (t < 0)
			continue;
		int64_t lo = f->vi[f->rseq[r]].lo; /* a discarded row of a rematerialization */
		if (lo >= 0 && t - m->sliding_window + 1 < lo)
			continue;
		int64_t nvis = (t + 1) / 4, j1 = j0 + ATTN_IXB < nvis ? j0 + ATTN_IXB : nvis;
		if (j0 >= j1)
			continue;
		const struct srt_seq_view *s = &f->b->seqs[f->rseq[r]];
		const float *iq = f->iq + r * (int64_t)(ih * idim), *iw = f->iw + r * (int64_t)ih;
		const size_t nk = (size_t)(j1 - j0);
		double *out = f->isc + ur * f->c4max;
		size_t done = 0;
		if (fast && prow != r) {
			qfp4 = srt_attn_ixq_prepare(iq, ih, idim, ixqb, &ixq);
			prow = r;
		}
		if (fast && qfp4) {
			entry_run(a, s, a->pool_ix, f->slot, j0, (int64_t)nk, kp);
			/* the thread's next block, when it is of this row, read ahead */
			const int64_t n1 = j1 + ATTN_IXB < nvis ? j1 + ATTN_IXB : nvis;
			const size_t nn = u + 1 < e && (u + 1) / nblk == ur && n1 > j1 ? (size_t)(n1 - j1) : 0;
			if (nn)
				entry_run(a, s, a->pool_ix, f->slot, j1, (int64_t)nn, kn);
			/* reference: the scores themselves, 16 keys in the lanes (no q·k rows) */
			done = a->ref ? srt_attn_ix_score_fp4(&ixq, kp, nk, kn, nn, iw, out + j0, kok)
				      : srt_attn_qk_fp4(&ixq, kp, nk, kn, nn, y, kok);
		}
		if (done < nk && qrow != r) { /* the row's query, transposed: [dim][head] */
			for (size_t h = 0; h < ih; h++)
				for (size_t c = 0; c < idim; c++)
					qt[c * ih + h] = (double)iq[h * idim + c];
			qrow = r;
		}
		if (done == 0) {
			for (int64_t j = j0; j < j1; j++)
				ix_key(a, entry(a, s, a->pool_ix, f->slot, j), keys + (size_t)(j - j0) * idim);
			srt_attn_qk_heads(qt, ih, keys, idim, nk, y);
		} else if (done < nk) { /* keys outside the exact range: the double loop */
			for (size_t i = 0; i < nk; i++)
				if (!kok[i]) {
					ix_key(a, kp[i], keys);
					srt_attn_qk_heads(qt, ih, keys, idim, 1, y + i * ih);
					if (a->ref) /* its score (the others are in out already) */
						srt_attn_ix_score_bf16(y + i * ih, iw, ih, 1, out + j0 + (int64_t)i);
				}
		}
		if (a->ref) { /* the per-head terms, summed in ascending heads, keys in lanes */
			if (done == 0) /* else srt_attn_ix_score_fp4 and the loop above scored them */
				srt_attn_ix_score_bf16(y, iw, ih, nk, out + j0);
			continue;
		}
		for (int64_t j = j0; j < j1; j++) {
			const double *qk = y + (size_t)(j - j0) * ih;
			double tot = 0;
			for (size_t h = 0; h < ih; h++)
				tot += (qk[h] > 0 ? qk[h] : 0.0) * iw[h];
			out[j] = tot;
		}
	}
}

/* pairs[0..k) := the k first of pairs[0..n) in cmp_pair order (any order among them):
 * quickselect, O(n); cmp_pair is a total order (distinct j), so the set is that of a sort. */
static void select_top(struct ipair *p, int64_t n, int64_t k)
{
	int64_t lo = 0, hi = n - 1;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		/* median of three to p[hi] */
		if (cmp_pair(&p[mid], &p[lo]) < 0) {
			struct ipair x = p[mid]; p[mid] = p[lo]; p[lo] = x;
		}
		if (cmp_pair(&p[hi], &p[lo]) < 0) {
			struct ipair x = p[hi]; p[hi] = p[lo]; p[lo] = x;
		}
		if (cmp_pair(&p[mid], &p[hi]) < 0) {
			struct ipair x = p[mid]; p[mid] = p[hi]; p[hi] = x;
		}
		const struct ipair piv = p[hi];
		int64_t st = lo;
		for (int64_t i = lo; i < hi; i++)
			if (cmp_pair(&p[i], &piv) < 0) {
				struct ipair x = p[i]; p[i] = p[st]; p[st] = x;
				st++;
			}
		p[hi] = p[st];
		p[st] = piv;
		if (st == k - 1 || st == k)
			return;
		if (st < k)
			lo = st + 1;
		else
			hi = st - 1;
	}
}

/*
 * The candidates for the k first of score[0..n) in cmp_pair order, to pairs: those with a score
 * of at least P, where P is a sample's score chosen so that about 2k to 3k scores reach it.
 * If at least k do, the k-th score s_k is >= P, so every one of the k first (scores >= s_k) is
 * a candidate and selecting among the candidates gives the same set. Returns their number,
 * or -1 when fewer than k reach P or a score is NaN (no order): then select among all.
 */
#define ATTN_SAMPLES 256
static int64_t prefilter(const double *score, int64_t n, int64_t k, struct ipair *pairs)
{
	struct ipair smp[ATTN_SAMPLES];
	int64_t r = 2 * (k * ATTN_SAMPLES / n) + 8; /* P: the (r+1)-th largest sample */
	if (r >= ATTN_SAMPLES)
		return -1;
	for (int64_t i = 0; i < ATTN_SAMPLES; i++) {
		smp[i].s = score[i * n / ATTN_SAMPLES];
		smp[i].j = (int32_t)i;
		if (smp[i].s != smp[i].s)
			return -1;
	}
	select_top(smp, ATTN_SAMPLES, r + 1);
	double P = smp[0].s;
	for (int64_t i = 1; i <= r; i++)
		P = smp[i].s < P ? smp[i].s : P;
	/* the candidates' indices into the last quarter of the scratch (n · 16 bytes), then
	 * their pairs from the front: pairs[i] covers bytes below 16i + 16 <= 12n + 4(i + 1),
	 * which hold only indices up to i, read before it */
	int32_t *idx = (int32_t *)(void *)((char *)pairs + 12 * (size_t)n);
	int64_t c = srt_attn_ge_indices(score, n, P, idx);
	if (c < k) /* also -1: a NaN */
		return -1;
	for (int64_t i = 0; i < c; i++) {
		const int32_t j = idx[i];
		pairs[i].s = score[j];
		pairs[i].j = j;
	}
	return c;
}

/* sel[0 .. k) ascending: distinct indices below n, sorted by their bytes, least significant
 * first (one pass per byte of n - 1), through tmp[k]. */
static void sort_indices(int32_t *sel, int64_t k, int64_t n, int32_t *tmp)
{
	int32_t *a = sel, *b = tmp;
	for (int sh = 0; sh < 32 && (uint64_t)(n - 1) >> sh; sh += 8) {
		int64_t at[257] = {0};
		for (int64_t i = 0; i < k; i++)
			at[((uint32_t)a[i] >> sh & 255u) + 1]++;
		for (int d = 0; d < 256; d++)
			at[d + 1] += at[d];
		for (int64_t i = 0; i < k; i++)
			b[at[(uint32_t)a[i] >> sh & 255u]++] = a[i];
		int32_t *t = a;
		a = b;
		b = t;
	}
	if (a != sel)
		memcpy(sel, a, (size_t)k * sizeof(*sel));
}

int64_t srt_attn_topk(const double *score, int64_t n, int64_t k, void *scratch, int32_t *sel)
{
	struct ipair *pairs = scratch;
	int64_t c = -1;
	k = k < n ? k : n;
	if (k < n / 8)
		c = prefilter(score, n, k, pairs);
	if (c < 0) { /* all of them */
		for (int64_t j = 0; j < n; j++) {
			pairs[j].s = score[j];
			pairs[j].j = (int32_t)j;
		}
		c = n;
	}
	if (k < c)
		select_top(pairs, c, k);
	for (int64_t i = 0; i < k; i++)
		sel[i] = pairs[i].j;
	sort_indices(sel, k, n, (int32_t *)(void *)pairs); /* the pairs are read: tmp */
	return k;
}

/* The indexer's selection for the row at position t from its scores (phase_ix): sel[0..k)
 * ascending; returns k. */
static int64_t select_c4(struct fwd *f, int64_t t, const double *score, struct ipair *pairs,
			 int32_t *sel)
{
	return srt_attn_topk(score, (t + 1) / 4, f->a->m->index_topk, pairs, sel);
}

/*
 * Phase C runs on groups of up to ATTN_CROWS rows in four parallel steps, so that one decode
 * row still uses every thread:
 *   c1 per row:            indexer selection, the cache entries of the row's keys listed;
 *   c1k per (row, 32 keys): those keys decoded row-major and in tiles of 8 (with AVX512_BF16
 *                          dot products, f->dp: as bf16 pairs, and their scores for all heads;
 *                          with f->vpan: their scores for all heads, values in panels);
 *   c2 per (row, head):    scores, softmax with the sink, P.V, de-rotation (with f->dp per
 *                          (row, 8 heads), phase_c2_dp);
 *   c3 per (group, 8 outputs of wo_a), after all groups, for every row of the block.
 * Each value is computed by the same operations in the same order as a per-row loop would.
 */
static void phase_c1(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	int64_t W = m->sliding_window;
	float *tb = f->tbuf + (size_t)tid * f->tfloats;
	double *sc = (double *)tb;
	struct ipair *pairs = (struct ipair *)(sc + f->kmax);
	int32_t *sel = (int32_t *)(pairs + f->c4max);

	for (int64_t u = b; u < e; u++) {
		int64_t r = f->cg0 + u, t = f->rpos[r], nk = 0, ns = 0;
		const uint8_t **src = f->csrc + (size_t)u * (size_t)f->kmax;
		f->cnk[u] = 0;
		if (t < 0)
			continue;
		const size_t H = (size_t)m->num_attention_heads, hd = (size_t)m->head_dim;
		const float *q = f->q + (size_t)r * H * hd; /* the row's queries */
		if (f->vpan) /* once here, not by each of c1k's blocks (SRT_ATTN_X_EXACT) */
			f->cq[u].exact = (uint8_t)srt_attn_bf16_exact(q, H * hd);
		if (f->dp) {
			size_t hg = (H + 15) / 16;
			uint32_t *qp = f->cqp + (size_t)u * hg * 8 * hd;
			struct kblk *cq = &f->cq[u];
			cq->span = (uint8_t)srt_attn_bf16_span(q, H * hd, &cq->lo, &cq->hi);
			for (size_t g = 0; cq->span && g < hg; g++)
				srt_attn_bf16_qpairs(q + 16 * g * hd, H - 16 * g < 16 ? H - 16 * g : 16,
						     hd, qp + g * 8 * hd);
		}
		const struct srt_seq_view *s = &f->b->seqs[f->rseq[r]];
		int64_t lo = f->vi[f->rseq[r]].lo;
		if (lo >= 0 && t - W + 1 < lo) {
			f->cnk[u] = -1; /* rematerialization: window incomplete, output discarded */
			continue;
		}
		for (int64_t p = t - W + 1 < 0 ? 0 : t - W + 1; p <= t; p++)
			src[nk++] = entry(a, s, a->pool_win, f->slot, p);
		if (a->ratio == 128) {
			entry_run(a, s, a->pool_comp, f->slot, 0, (t + 1) / 128, src + nk);
			nk += (t + 1) / 128;
		} else if (a->ratio == 4) {
			ns = select_c4(f, t, f->isc + u * f->c4max, pairs, sel);
			for (int64_t i = 0; i < ns; i++)
				src[nk++] = entry(a, s, a->pool_comp, f->slot, sel[i]);
			if (a->dbg_sel) {
				int32_t *ds = a->dbg_sel + (f->row0 + r) * m->index_topk;
				for (int64_t i = 0; i < m->index_topk; i++)
					ds[i] = i < ns ? sel[i] : -1;
			}
		}
		f->cnk[u] = nk;
	}
}

/* Phase c1k, per (row of the group, block of ATTN_KGB keys): the keys c1 listed, decoded
 * row-major and tiled (a block starts on a tile boundary, so the tiles are those of one
 * srt_attn_tile call over all the row's keys). With f->dp, the block's keys go from their
 * cache entries straight into both pair layouts (srt_attn_kv_keys; FP8 entries never become
 * floats); a block whose keys and the row's queries fit the AVX512_BF16 kernels
 * (srt_attn_dp_fits) gets its scores for every head here (the keys' pairs still in cache),
 * any other block is decoded into the thread's floats and tiled, and the values of every
 * block of normal bf16 keys are stored as pairs of keys (a block starts on an even key).
 * phase_c2_dp decodes a row's keys again only for a head whose p·v takes the float kernels.
 * With f->vpan, a block is tiled into the thread's scratch and scored for every head by the
 * float tile kernels (the same sums phase_c2 would make from the row's tiles); its values are
 * left in the cache for phase_c2 (pv_blocks). */
static void phase_c1k(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	size_t hd = (size_t)a->m->head_dim;
	int64_t nblk = (f->kmax + ATTN_KGB - 1) / ATTN_KGB;
	size_t hg = ((size_t)a->m->num_attention_heads + 15) / 16;
	uint32_t *kp = (uint32_t *)(void *)(f->tbuf + (size_t)tid * f->tfloats); /* [KGB][hd/2] */
	for (int64_t u = b; u < e; u++) {
		int64_t gr = u / nblk, k0 = (u % nblk) * ATTN_KGB, nk = f->cnk[gr];
		if (nk <= k0)
			continue;
		int64_t k1 = k0 + ATTN_KGB < nk ? k0 + ATTN_KGB : nk;
		const uint8_t *const *src = f->csrc + (size_t)gr * (size_t)f->kmax;
		float *kt = f->ckt + (size_t)gr * (size_t)f->kmax8 * hd;
		struct kblk *kb = &f->ckx[u];
		if (f->dp) {
			const struct kblk *cq = &f->cq[gr];
			uint32_t *vp = f->cvp + ((size_t)gr * (size_t)((f->kmax + 1) / 2) +
						 (size_t)k0 / 2) * hd;
			float *kf = f->ck + (size_t)tid * (size_t)f->kthr * hd;
			/* both pair layouts straight from the entries, used only when the span
			 * allows */
			kb->span = (uint8_t)srt_attn_kv_keys(a, src + k0, (size_t)(k1 - k0), kf, kp, vp,
							     &kb->lo, &kb->hi);
			/* srt_attn_bf16_exact from the span: bf16 values and the nonzero ones'
			 * exponents in [67, 187] (a failed span has a low bit set, or a nonzero
			 * exponent 0 or 255: not exact either) */
			kb->exact = kb->span && (kb->lo > kb->hi || (kb->lo >= 67 && kb->hi <= 187));
			kb->dp = kb->span && cq->span && !(f->dpmix && k0 / ATTN_KGB % 2) &&
				 srt_attn_dp_fits(cq->lo, cq->hi, kb->lo, kb->hi, hd);
			for (size_t g = 0; kb->dp && g < hg; g++)
				srt_attn_qk16_bf16(f->cqp + ((size_t)gr * hg + g) * 8 * hd, kp, hd,
						   (size_t)(k1 - k0),
						   f->csc + (((size_t)gr * hg + g) * (size_t)f->kmax +
							     (size_t)k0) * 16);
			if (kb->dp)
				continue;
			/* the float tiles of a block outside the dot products' range */
			srt_attn_kv_decode_n(a, src + k0, (size_t)(k1 - k0), kf, 0);
			srt_attn_tile(kf, (size_t)(k1 - k0), hd, hd, kt + (size_t)k0 * hd);
			continue;
		}
		if (f->vpan) {
			/* tiled into the thread's scratch (FP8 entries straight from their codes,
			 * srt_attn_kv_tiles) and scored for every head while the block is in L1 /
			 * L2: only the scores are stored (the row-wide tiles were written cold and
			 * read back cold; phase_c2 decodes the values again, a block at a time) */
			const size_t nb = (size_t)(k1 - k0), H = (size_t)a->m->num_attention_heads;
			const int64_t r = f->cg0 + gr;
			float *kf = f->tbuf + (size_t)tid * f->tfloats; /* room for 8 keys' rows */
			float *ktb = kf + (size_t)ATTN_KGB * hd;        /* the block's tiles */
			kb->exact = (uint8_t)srt_attn_kv_tiles(a, src + k0, nb, ktb, kf, a->ref);
			for (size_t h = 0; h < H; h += ATTN_RH) {
				const size_t nh = H - h < ATTN_RH ? H - h : ATTN_RH;
				const float *qh[ATTN_RH];
				float *sh[ATTN_RH];
				for (size_t i = 0; i < nh; i++) {
					qh[i] = f->q + ((size_t)r * H + h + i) * hd;
					sh[i] = f->csc + ((size_t)gr * H + h + i) * (size_t)f->kmax8 +
						(size_t)k0;
				}
				srt_attn_dot_tiles_f32_n(nh, qh, ktb, hd, (nb + 7) / 8, sh,
							 kb->exact | (f->cq[gr].exact ? SRT_ATTN_X_EXACT : 0));
			}
			continue;
		}
		float *kf = f->ck + ((size_t)gr * (size_t)f->kmax + (size_t)k0) * hd;
		kb->exact =
			(uint8_t)srt_attn_kv_decode_n(a, src + k0, (size_t)(k1 - k0), kf, a->ref);
		srt_attn_tile(kf, (size_t)(k1 - k0), hd, hd, kt + (size_t)k0 * hd);
	}
}

/*
 * Reference profile: the scores sf[i][0 .. nk) (float32 q·k) of nh <= ATTN_RH heads into their
 * bf16-rounded probabilities, max-subtracted; den[i] := head i's denominator with its sink.
 * Each head's values are the scalar loop's: the scores times scale_f, their max (NaN never
 * taken), expf of each score less the max, the sum of those in double in ascending keys, plus
 * expf(sink - max). The max runs as 8 interleaved maxima combined at the end: the same number
 * (only a zero max's sign could differ, and no difference below depends on it: x - (±0) is x
 * but for x = ±0, whose expf is 1 either way); the heads' sums advance side by side, each in
 * its own order.
 */
static void ref_softmax_n(float *const *sf, size_t nh, int64_t nk, float scale_f,
			  const float *sink, float *den)
{
	float mx[ATTN_RH];
	double d[ATTN_RH];
	for (size_t i = 0; i < nh; i++) {
		float *s = sf[i], m8[8], m = -INFINITY;
		for (int64_t k = 0; k < nk; k++)
			s[k] = s[k] * scale_f;
		for (int j = 0; j < 8; j++)
			m8[j] = -INFINITY;
		int64_t k = 0;
		for (; k + 8 <= nk; k += 8)
			for (int j = 0; j < 8; j++)
				m8[j] = s[k + j] > m8[j] ? s[k + j] : m8[j];
		for (; k < nk; k++)
			m = s[k] > m ? s[k] : m;
		for (int j = 0; j < 8; j++)
			m = m8[j] > m ? m8[j] : m;
		mx[i] = m;
		for (k = 0; k < nk; k++)
			s[k] -= m;
		srt_expf_n(s, s, (size_t)nk); /* expf's bits, vectorised */
		d[i] = 0;
	}
	for (int64_t k = 0; k < nk; k++)
		for (size_t i = 0; i < nh; i++)
			d[i] += sf[i][k];
	for (size_t i = 0; i < nh; i++) {
		srt_round_bf16_n(sf[i], (size_t)nk); /* the library's vector loop */
		den[i] = (float)d[i] + expf(sink[i] - mx[i]);
	}
}

/* Reference profile: one head's output oh from its p·v sums and denominator, rounded to bf16,
 * the rope dims de-rotated by rope_cs's rc, rs of the row's position (computed once for all
 * of the row's heads). */
static void ref_out(const struct srt_attn *a, float *oh, const float *pvf, float denf,
		    const float *rc, const float *rs)
{
	size_t hd = (size_t)a->m->head_dim, nope = hd - (size_t)a->m->qk_rope_head_dim;
	srt_attn_div_bf16(pvf, denf, hd, oh); /* oh[c] = bf16(pvf[c] / denf), vectorised */
	rope_by(a, oh + nope, rc, rs, 1);
}

/* Reference profile with f->vpan: p·v of nh heads of group row gr over its nk keys, a block of
 * ATTN_KGB keys at a time: the block's values decoded from their cache entries (c1's list)
 * into value panels in this thread's scratch (tb past the heads' sums, which stay in L2), each
 * head's sums continuing over the blocks in key order (srt_attn_pv_f32_np's cont): the bits of
 * one call over the row's values, without a row-wide copy of them written and read back cold. */
static void pv_blocks(const struct fwd *f, int64_t gr, size_t nh, const float *const *p,
		      int64_t nk, float *const *y, int v_exact, float *tb)
{
	const struct srt_attn *a = f->a;
	const size_t hd = (size_t)a->m->head_dim;
	const uint8_t *const *src = f->csrc + (size_t)gr * (size_t)f->kmax;
	float *vp = tb + ATTN_RH * hd;    /* [hd / 16][ATTN_VLD][16] */
	float *v1 = vp + ATTN_VLD * hd;   /* one key's values */
	for (int64_t k0 = 0; k0 == 0 || k0 < nk; k0 += ATTN_KGB) { /* no key: the sums are 0 */
		const size_t nb = (size_t)(nk - k0 < ATTN_KGB ? nk - k0 : ATTN_KGB);
		const float *pb[ATTN_RH];
		srt_attn_kv_panels(a, src + k0, nb, ATTN_VLD, vp, v1);
		for (size_t i = 0; i < nh; i++)
			pb[i] = p[i] + k0;
		srt_attn_pv_f32_np(nh, pb, vp, ATTN_VLD, hd, nb, y, v_exact, k0 > 0);
	}
}

static void phase_c2(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	const struct srt_attn_lw *lw = f->lw;
	size_t H = (size_t)m->num_attention_heads, hd = (size_t)m->head_dim;
	size_t rd = (size_t)m->qk_rope_head_dim, nope = hd - rd;
	double *tb = (double *)(f->tbuf + (size_t)tid * f->tfloats);
	double *sc = tb, *pv = tb + f->kmax8;
	float scale_f = (float)pow((double)hd, -0.5);
	double scale_d = pow((double)hd, -0.5);

	for (int64_t u = b; u < e; u++) {
		int64_t gr = u / (int64_t)H, r = f->cg0 + gr, t = f->rpos[r], nk = f->cnk[gr];
		size_t h = (size_t)(u % (int64_t)H);
		/* reference profile: up to ATTN_RH heads h, h + 1, ... of the row together when
		 * they are in this range (each key loaded once for all; every value as for one
		 * head) */
		size_t nh = 1;
		if (a->ref) {
			nh = H - h < ATTN_RH ? H - h : ATTN_RH;
			if ((int64_t)nh > e - u)
				nh = (size_t)(e - u);
		}
		const float *keys = f->ck + (size_t)gr * (size_t)f->kmax * hd;
		const float *kt = f->ckt + (size_t)gr * (size_t)f->kmax8 * hd;
		u += (int64_t)nh - 1;
		if (t < 0)
			continue;
		if (nk < 0) { /* a discarded row of a rematerialization */
			memset(f->o + r * H * hd + h * hd, 0, nh * hd * sizeof(float));
			continue;
		}
		if (a->ref) {
			/* the reference accumulates q.k and p.v in float32 (tilelang sparse_attn):
			 * float32 sums in ascending key dims / keys, a fixed order; head i's
			 * scores and sums in the scratch at i·kmax8 and nh·kmax8 + i·hd floats */
			float *scf[ATTN_RH], *pvf[ATTN_RH];
			const float *qh[ATTN_RH];
			float denf[ATTN_RH];
			const float *q = f->q + r * H * hd + h * hd;
			for (size_t i = 0; i < nh; i++) {
				/* with vpan, c1k's scores, turned into probabilities in place */
				scf[i] = f->vpan ? f->csc + ((size_t)gr * H + h + i) * (size_t)f->kmax8
						 : (float *)tb + i * (size_t)f->kmax8;
				pvf[i] = (float *)tb + (f->vpan ? 0 : nh * (size_t)f->kmax8) + i * hd;
				qh[i] = q + i * hd;
			}
			/* the row's keys allow fused multiply-adds (attn_dot.h) when all blocks do */
			const int64_t nkb = (f->kmax + ATTN_KGB - 1) / ATTN_KGB;
			int kx = 1;
			for (int64_t kb = 0; kb * ATTN_KGB < nk; kb++)
				kx &= f->ckx[gr * nkb + kb].exact;
			if (!f->vpan)
				srt_attn_dot_tiles_f32_n(nh, qh, kt, hd, (size_t)(nk + 7) / 8, scf,
							 kx);
			ref_softmax_n(scf, nh, nk, scale_f, lw->sink + h, denf);
			if (f->vpan)
				pv_blocks(f, gr, nh, (const float *const *)scf, nk, pvf, kx, (float *)tb);
			else
				srt_attn_pv_f32_n(nh, (const float *const *)scf, keys, hd, hd,
						  (size_t)nk, pvf, kx);
			const float *rc = row_cs(f, r), *rs = rc + rd / 2;
			for (size_t i = 0; i < nh; i++)
				ref_out(a, f->o + r * H * hd + (h + i) * hd, pvf[i], denf[i], rc, rs);
		} else {
			const float *q = f->q + r * H * hd + h * hd;
			float *oh = f->o + r * H * hd + h * hd;
			double mx = -INFINITY, den = 0;
			srt_attn_dot_tiles(q, kt, hd, (size_t)(nk + 7) / 8, sc);
			for (int64_t k = 0; k < nk; k++) {
				sc[k] = sc[k] * scale_d;
				mx = sc[k] > mx ? sc[k] : mx;
			}
			for (int64_t k = 0; k < nk; k++) {
				sc[k] = exp(sc[k] - mx);
				den += sc[k];
			}
			den += exp((double)lw->sink[h] - mx);
			srt_attn_pv(sc, keys, hd, hd, (size_t)nk, pv);
			for (size_t i = 0; i < hd; i++)
				oh[i] = (float)(pv[i] / den);
			rope_row(f, r, oh + nope, 1);
		}
	}
}

/*
 * Phase c2 of the reference profile with AVX512_BF16 dot products (f->dp), per (row of the
 * group, 8 heads): the scores c1k computed for its key blocks by srt_attn_qk16_bf16, the float
 * tile kernels for the other blocks; the softmax of phase_c2; p·v by
 * srt_attn_pv_bf16 for each head whose probabilities fit with the row's keys
 * (srt_attn_dp_fits), the float kernels for the others. Every value gets the bits of
 * phase_c2's float path whichever kernel computes it (attn_dot.h), so the choices (per block,
 * per head) change nothing but the speed.
 */
static void phase_c2_dp(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	size_t H = (size_t)m->num_attention_heads, hd = (size_t)m->head_dim;
	size_t HG = (H + 7) / 8, hg = (H + 15) / 16, kmax = (size_t)f->kmax;
	size_t kmax8 = (size_t)f->kmax8;
	const int64_t nkb = (f->kmax + ATTN_KGB - 1) / ATTN_KGB;
	float scale_f = (float)pow((double)hd, -0.5);
	/* thread scratch: probabilities [8][kmax8], their pairs [8][kmax8/2], p·v sums [8][hd] */
	float *sfb = f->tbuf + (size_t)tid * f->tfloats;
	uint32_t *ppb = (uint32_t *)(void *)(sfb + 8 * kmax8);
	float *pvb = (float *)(void *)(ppb + 4 * kmax8);

	for (int64_t u = b; u < e; u++) {
		int64_t gr = u / (int64_t)HG, r = f->cg0 + gr, t = f->rpos[r], nk = f->cnk[gr];
		size_t h0 = (size_t)(u % (int64_t)HG) * 8, nh = H - h0 < 8 ? H - h0 : 8;
		if (t < 0)
			continue;
		if (nk < 0) { /* a discarded row of a rematerialization */
			memset(f->o + r * H * hd + h0 * hd, 0, nh * hd * sizeof(float));
			continue;
		}
		const float *q = f->q + r * H * hd + h0 * hd;
		const float *kt = f->ckt + (size_t)gr * kmax8 * hd;
		const struct kblk *kbs = f->ckx + gr * nkb;
		float *sf[8], *pvf[8], denf[8];
		const float *qh[8];
		for (size_t i = 0; i < nh; i++) {
			sf[i] = sfb + i * kmax8;
			pvf[i] = pvb + i * hd;
			qh[i] = q + i * hd;
		}
		int kx = 1, vok = 1;
		uint8_t klo = 255, khi = 0;
		for (int64_t j = 0; j * ATTN_KGB < nk; j++) {
			const struct kblk *kb = &kbs[j];
			int64_t k0 = j * ATTN_KGB, k1 = k0 + ATTN_KGB < nk ? k0 + ATTN_KGB : nk;
			kx &= kb->exact;
			vok &= kb->span;
			klo = kb->lo < klo ? kb->lo : klo;
			khi = kb->hi > khi ? kb->hi : khi;
			if (kb->dp) {
				for (size_t i = 0; i < nh; i++) {
					size_t h = h0 + i;
					const float *sc = f->csc + ((size_t)gr * hg + h / 16) * kmax * 16 +
							  h % 16;
					for (int64_t k = k0; k < k1; k++)
						sf[i][k] = sc[16 * (size_t)k];
				}
			} else {
				float *y[8];
				for (size_t i = 0; i < nh; i++)
					y[i] = sf[i] + k0;
				srt_attn_dot_tiles_f32_n(nh, qh, kt + (size_t)k0 * hd, hd,
							 (size_t)(k1 - k0 + 7) / 8, y, kb->exact);
			}
		}
		ref_softmax_n(sf, nh, nk, scale_f, f->lw->sink + h0, denf);
		const uint32_t *pp[8];
		const float *pf[8];
		float *ydp[8], *yf[8];
		size_t ndp = 0, nf = 0;
		for (size_t i = 0; i < nh; i++) {
			uint8_t lo, hi;
			if (!(f->dpmix && (h0 + i) % 2) && vok &&
			    srt_attn_bf16_span(sf[i], (size_t)nk, &lo, &hi) &&
			    srt_attn_dp_fits(lo, hi, klo, khi, (size_t)nk)) {
				uint32_t *w = ppb + i * (kmax8 / 2);
				srt_attn_bf16_pairs(sf[i], (size_t)nk, w, 1);
				pp[ndp] = w;
				ydp[ndp++] = pvf[i];
			} else {
				pf[nf] = sf[i];
				yf[nf++] = pvf[i];
			}
		}
		if (ndp)
			srt_attn_pv_bf16(ndp, pp, f->cvp + (size_t)gr * ((kmax + 1) / 2) * hd, hd,
					 (size_t)(nk + 1) / 2, ydp);
		if (nf) { /* the float kernels: the row's keys decoded into the thread's buffer */
			float *kf = f->ck + (size_t)tid * (size_t)f->kthr * hd;
			const uint8_t *const *src = f->csrc + (size_t)gr * kmax;
			srt_attn_kv_decode_n(a, src, (size_t)nk, kf, 0);
			srt_attn_pv_f32_n(nf, pf, kf, hd, hd, (size_t)nk, yf, kx);
		}
		const float *rc = row_cs(f, r), *rs = rc + m->qk_rope_head_dim / 2;
		for (size_t i = 0; i < nh; i++)
			ref_out(a, f->o + r * H * hd + (h0 + i) * hd, pvf[i], denf[i], rc, rs);
	}
}

/*
 * Reference profile: outputs [n0, n1) of group g's wo_a product for every row, float32
 * accumulation in srt_gemm's fixed blocked order (REFERENCE on the bf16 activations with
 * scales 1) on the stored E4M3 weights (whose values are
 * the bf16 weights convert.py makes, exactly), rounded to bf16. The reference's bf16 einsum
 * accumulates in float32 too; the order is fixed, so rows, chunks and threads do not change a
 * bit. (The f32 profile keeps the double-accumulated tiles: its 1e-5 bound on the logits.)
 */
static void woa_f32(struct fwd *f, size_t g, size_t n0, size_t n1, float *ones)
{
	const struct srt_model_config *m = f->a->m;
	size_t H = (size_t)m->num_attention_heads, hd = (size_t)m->head_dim;
	size_t G = (size_t)m->o_groups, ol = (size_t)m->o_lora_rank, gk = H * hd / G;
	const struct srt_weight *w8 = &f->lw->wo_a8;
	const struct srt_weight wg = { /* FP8, or paired (attn.c; whole pairs: ol % 16 == 0) */
		.type = w8->type, .rows = ol, .cols = gk,
		.data = (const uint8_t *)w8->data + g * ol * gk,
		.scales = w8->scales + (g * ol / 128) * (gk / 128)};
	/* srt_gemm_ref with activation scales of 1 (in the thread's unused tile buffer): per
	 * 128 block (Σ o·code)·s, whatever the number of rows */
	for (size_t i = 0; i < (size_t)f->N * (gk / 128); i++)
		ones[i] = 1.0f;
	for (int64_t r = 0; r < f->N;) {
		int64_t r1 = r;
		while (r1 < f->N && f->rpos[r1] >= 0)
			r1++;
		if (r1 > r) {
			float *y = f->og + (size_t)r * G * ol + g * ol;
			srt_gemm_ref(&wg, f->o + (size_t)r * H * hd + g * gk, ones, (size_t)(r1 - r),
				     H * hd, y, G * ol, n0, n1);
			for (int64_t i = 0; i < r1 - r; i++)
				srt_round_bf16_n(y + (size_t)i * G * ol + n0, n1 - n0);
		}
		r = r1 + 1;
	}
}

/*
 * Grouped wo_a (bf16 weights, as convert.py leaves it) for every row of the block; units =
 * (group, tile of 8 outputs); four tiles at a time, rows inner, so each weight is read once.
 */
static void phase_c3(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	const struct srt_model_config *m = a->m;
	size_t H = (size_t)m->num_attention_heads, hd = (size_t)m->head_dim;
	size_t G = (size_t)m->o_groups, ol = (size_t)m->o_lora_rank, gk = H * hd / G;
	size_t tg = (ol + 7) / 8;
	double y[32];
	float *dec = f->dbuf + (size_t)tid * 32 * gk;
	int64_t nrows = 0;
	for (int64_t r = 0; r < f->N; r++)
		nrows += f->rpos[r] >= 0;
	for (int64_t u = b; u < e;) {
		size_t g = (size_t)u / tg, j0 = (size_t)u % tg, nt = tg - j0;
		if ((int64_t)nt > e - u)
			nt = (size_t)(e - u);
		if (nt > 4 && !f->lw->wo_a8_ok)
			nt = 4; /* the tiles decoded at once below; srt_gemm takes the whole range */
		u += (int64_t)nt;
		if (f->lw->wo_a8_ok) {
			woa_f32(f, g, j0 * 8, (j0 + nt) * 8 < ol ? (j0 + nt) * 8 : ol, dec);
			continue;
		}
		/* many rows (prefill): decode the tiles once (same floats, same results) */
		if (nrows >= 8)
			srt_attn_tm_decode(&f->lw->wo_a[g], j0, nt, dec);
		for (int64_t r = 0; r < f->N; r++) {
			const float *o = f->o + (size_t)r * H * hd + g * gk;
			if (f->rpos[r] < 0)
				continue;
			if (nrows >= 8)
				srt_attn_dot_tiles(o, dec, gk, nt, y);
			else
				srt_attn_tm_dot(&f->lw->wo_a[g], o, j0, nt, y);
			for (size_t i = 0; i < nt * 8 && j0 * 8 + i < ol; i++) {
				float v = (float)y[i];
				f->og[(size_t)r * G * ol + g * ol + j0 * 8 + i] =
					a->ref ? srt_round_bf16(v) : v;
			}
		}
	}
}

static void phase_d(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	size_t d = (size_t)a->m->hidden_size, gol = (size_t)(a->m->o_groups * a->m->o_lora_rank);
	(void)tid;
	if (srt_gemm(&f->lw->wo_b, f->og + b * gol, (size_t)(e - b), gol, f->out + b * d, d, 0, d,
		     a->ref ? SRT_GEMM_REFERENCE : SRT_GEMM_EXACT))
		__atomic_store_n(&f->err, SRT_ENOMEM, __ATOMIC_RELAXED);
	for (int64_t r = b; r < e; r++) {
		if (f->rpos[r] < 0)
			memset(f->out + r * d, 0, d * sizeof(float));
		else if (a->ref)
			srt_round_bf16_n(f->out + r * d, d);
	}
}

/*
 * wo_b for a block of fewer rows than threads (decode): thread u computes output features
 * [u·d/n, (u+1)·d/n) (multiples of 8) of every row; srt_gemm's results do not depend on the
 * column range, so the bits are those of phase_d.
 */
static void phase_d_cols(void *ctx, int64_t b, int64_t e, int tid)
{
	struct fwd *f = ctx;
	const struct srt_attn *a = f->a;
	size_t d = (size_t)a->m->hidden_size, gol = (size_t)(a->m->o_groups * a->m->o_lora_rank);
	size_t nu = (size_t)a->host->nthreads, t8 = (d + 7) / 8;
	(void)tid;
	for (int64_t u = b; u < e; u++) {
		size_t n0 = t8 * (size_t)u / nu * 8, n1 = t8 * (size_t)(u + 1) / nu * 8;
		n1 = n1 < d ? n1 : d;
		if (n0 >= n1)
			continue;
		if (srt_gemm(&f->lw->wo_b, f->og, (size_t)f->N, gol, f->out, d, n0, n1,
			     a->ref ? SRT_GEMM_REFERENCE : SRT_GEMM_EXACT))
			__atomic_store_n(&f->err, SRT_ENOMEM, __ATOMIC_RELAXED);
		for (int64_t r = 0; r < f->N; r++) {
			if (f->rpos[r] < 0)
				memset(f->out + r * d + n0, 0, (n1 - n0) * sizeof(float));
			else if (a->ref)
				srt_round_bf16_n(f->out + r * d + n0, n1 - n0);
		}
	}
}

/* ---- the call ------------------------------------------------------------------------------- */

static int check_batch(struct fwd *f, int32_t layer, char *why, size_t why_len)
{
	struct srt_attn *a = f->a;
	const struct srt_batch *b = f->b;
	int64_t W = a->m->sliding_window;
	int rc;
	if (b->mem != SRT_MEM_HOST) {
		srt_attn_why(why, why_len, "%s: layer %d: activations must be in host memory",
			     a->name, layer);
		return SRT_EINVAL;
	}
	for (int64_t r = 0; r < f->N; r++)
		f->rpos[r] = -1;
	for (uint32_t i = 0; i < b->n_seqs; i++) {
		const struct srt_seq_view *s = &b->seqs[i];
		int64_t end = s->pos + s->n_tokens;
		if (s->n_pools != a->n_pools || !s->pools) {
			srt_attn_why(why, why_len, "%s: layer %d, sequence %llu: %u page tables, the "
				     "plugin declared %u pools", a->name, layer,
				     (unsigned long long)s->seq_id, s->n_pools, a->n_pools);
			return SRT_EINVAL;
		}
		if (s->n_tokens < 1 || s->pos < 0 || s->first_row < 0 ||
		    (int64_t)s->first_row + s->n_tokens > f->N) {
			srt_attn_why(why, why_len, "%s: layer %d, sequence %llu: rows [%d, %lld) at "
				     "position %lld do not fit a batch of %lld rows (n_tokens >= 1, "
				     "pos >= 0)", a->name, layer, (unsigned long long)s->seq_id,
				     s->first_row, (long long)s->first_row + s->n_tokens,
				     (long long)s->pos, (long long)f->N);
			return SRT_EINVAL;
		}
		for (uint32_t p = 0; p < a->n_pools; p++)
			if (s->pools[p].mem != SRT_MEM_HOST) {
				srt_attn_why(why, why_len, "%s: layer %d, sequence %llu: pool %s pages "
					     "are not in host memory", a->name, layer,
					     (unsigned long long)s->seq_id, a->pools[p].name);
				return SRT_EINVAL;
			}
		for (int32_t k = 0; k < s->n_tokens; k++) {
			int64_t r = s->first_row + k;
			if (f->rpos[r] >= 0) {
				srt_attn_why(why, why_len, "%s: layer %d: row %lld belongs to two "
					     "sequences", a->name, layer, (long long)r);
				return SRT_EINVAL;
			}
			f->rpos[r] = s->pos + k;
			f->rseq[r] = (int32_t)i;
		}
		read_cached(b, i, &f->vi[i]);
		int64_t wlo = f->vi[i].lo >= 0 ? s->pos : s->pos - W + 1;
		if ((rc = need(a, s, a->pool_win, f->slot, wlo < 0 ? 0 : wlo, end, layer,
			       "the sliding window", why, why_len)))
			return rc;
		if (!a->ratio)
			continue;
		if ((rc = need(a, s, a->pool_comp, f->slot, 0, end / a->ratio, layer,
			       "the compressed entries", why, why_len)))
			return rc;
		if (a->ratio == 4 && (rc = need(a, s, a->pool_ix, f->slot, 0, end / 4, layer,
						"the indexer keys", why, why_len)))
			return rc;
		if ((s->pos > 0 && f->vi[i].lo < 0 && (a->ratio == 4 || s->pos % a->ratio)) &&
		    (rc = need(a, s, a->pool_state, f->slot, (s->pos - 1) / a->P, (s->pos - 1) / a->P + 1,
			       layer, "the compressor carry state before the first token", why,
			       why_len)))
			return rc;
		if ((rc = need(a, s, a->pool_state, f->slot, s->pos / a->P, (end - 1) / a->P + 1,
			       layer, "the compressor state written by this call", why, why_len)))
			return rc;
	}
	return 0;
}

/* Per-row positions and sequences of a (sub-)batch whose rows are [0, f->N). */
static void map_rows(struct fwd *f)
{
	for (int64_t r = 0; r < f->N; r++)
		f->rpos[r] = -1;
	for (uint32_t i = 0; i < f->b->n_seqs; i++) {
		const struct srt_seq_view *s = &f->b->seqs[i];
		for (int32_t k = 0; k < s->n_tokens; k++) {
			f->rpos[s->first_row + k] = s->pos + k;
			f->rseq[s->first_row + k] = (int32_t)i;
		}
	}
}

/* Phases A-D on the sub-batch in f (rows [0, f->N), pages already checked). */
static int run_block(struct fwd *f, float *ringbuf, int32_t layer, char *why, size_t why_len)
{
	struct srt_attn *a = f->a;
	const struct srt_host *h = a->host;
	size_t hd = (size_t)a->m->head_dim;
	uint64_t t0 = srt_prof_t0(&attn_prof);
	map_rows(f);
	{
		size_t H = (size_t)a->m->num_attention_heads;
		size_t ih = a->ratio == 4 ? (size_t)a->m->index_n_heads : 0;
		h->parallel_for(h, f->N, phase_a1, f);
		comp_rows(f);
		h->parallel_for(h, pj_units(f, PJ_WQA, PJ_WQB), phase_a2, f);
		h->parallel_for(h, 2 * f->N, phase_a3, f);
		h->parallel_for(h, pj_units(f, PJ_WQB, PJ_COUNT), phase_a4, f);
		h->parallel_for(h, f->N * (int64_t)(H + ih), phase_a5, f);
	}
	t0 = srt_prof_add(&attn_prof, SRT_PROF_ATTN_PROJ, t0);
	for (uint32_t i = 0; i < f->b->n_seqs; i++) {
		const struct srt_seq_view *s = &f->b->seqs[i];
		const struct vinfo *vi = &f->vi[i];
		for (int32_t k = 0; k < s->n_tokens; k++) {
			/* the block's window rows into its scratch; zeroed first: the encoding may
			 * leave padding bytes, and pages start zeroed. A read-only row is the page's. */
			uint8_t *we = a->wscr + (size_t)(s->first_row + k) * a->kv_bytes;
			if (ro_entry(vi, a->pool_win, s->pos + k)) {
				memcpy(we, entry(a, s, a->pool_win, f->slot, s->pos + k), a->kv_bytes);
				continue;
			}
			memset(we, 0, a->kv_bytes);
			srt_attn_kv_encode(a, f->kv + (size_t)(s->first_row + k) * hd, we);
		}
		if (a->ratio)
			run_comp(f, i, 0, ringbuf);
		if (a->ratio == 4)
			run_comp(f, i, 1, ringbuf);
	}
	t0 = srt_prof_add(&attn_prof, SRT_PROF_ATTN_CACHE, t0);
	a->win_cur = a->wscr; /* attention reads the block's own window rows from there */
	{
		size_t H = (size_t)a->m->num_attention_heads, G = (size_t)a->m->o_groups;
		size_t tg = ((size_t)a->m->o_lora_rank + 7) / 8;
		for (int64_t g0 = 0; g0 < f->N; g0 += ATTN_CROWS) {
			int64_t n = f->N - g0 < ATTN_CROWS ? f->N - g0 : ATTN_CROWS;
			f->cg0 = g0;
			if (a->ratio == 4) {
				h->parallel_for(h, n * ((f->c4max + ATTN_IXB - 1) / ATTN_IXB), phase_ix,
						f);
				t0 = srt_prof_add(&attn_prof, SRT_PROF_ATTN_INDEXER, t0);
			}
			h->parallel_for(h, n, phase_c1, f);
			/* one row (decode): only the blocks that hold its keys, dealt evenly (the
			 * others have nothing to do, and a thread given those would idle) */
			h->parallel_for(h, n == 1 ? (f->cnk[0] + ATTN_KGB - 1) / ATTN_KGB
						  : n * ((f->kmax + ATTN_KGB - 1) / ATTN_KGB),
					phase_c1k, f);
			if (f->dp) /* units of 8 heads: two per row of 16 heads */
				h->parallel_for(h, n * (int64_t)((H + 7) / 8), phase_c2_dp, f);
			else
				h->parallel_for(h, n * (int64_t)H, phase_c2, f);
			t0 = srt_prof_add(&attn_prof, SRT_PROF_ATTN_CORE, t0);
		}
		h->parallel_for(h, (int64_t)(G * tg), phase_c3, f);
	}
	a->win_cur = NULL;
	/* the window rows into their pages' rings, each page keeping its last win_ring rows
	 * (a row that a later row of this block overwrites is skipped) */
	for (uint32_t i = 0; i < f->b->n_seqs; i++) {
		const struct srt_seq_view *s = &f->b->seqs[i];
		int64_t R = (int64_t)a->win_ring, end = s->pos + s->n_tokens;
		for (int32_t k = 0; k < s->n_tokens; k++) {
			int64_t t = s->pos + k;
			if (ro_entry(&f->vi[i], a->pool_win, t) ||
			    (t + R < end && (t + R) / a->P == t / a->P))
				continue;
			memcpy(entry(a, s, a->pool_win, f->slot, t),
			       a->wscr + (size_t)(s->first_row + k) * a->kv_bytes, a->kv_bytes);
		}
	}
	if (f->N < h->nthreads)
		h->parallel_for(h, h->nthreads, phase_d_cols, f);
	else
		h->parallel_for(h, f->N, phase_d, f);
	srt_prof_add(&attn_prof, SRT_PROF_ATTN_OUT, t0);
	if (f->err) {
		srt_attn_why(why, why_len, "%s: layer %d: out of memory in wo_b", a->name, layer);
		return f->err;
	}
	return 0;
}

int srt_attn_forward(struct srt_attn *a, int32_t layer, const struct srt_batch *batch,
		     const float *x, float *out, char *why, size_t why_len)
{
	const struct srt_host *h = a->host;
	const struct srt_model_config *m = a->m;
	struct fwd f;
	struct srt_batch sub;
	struct srt_seq_view *views = NULL;
	int rc = 0;
	uint32_t slot = a->n_layers;
	for (uint32_t i = 0; i < a->n_layers; i++)
		if (a->layers[i] == layer)
			slot = i;
	if (slot == a->n_layers) {
		srt_attn_why(why, why_len, "%s: layer %d is not served by this instance (compress "
			     "ratio %d)", a->name, layer,
			     layer >= 0 && layer < m->n_compress_ratios ? m->compress_ratios[layer] : -1);
		return SRT_EINVAL;
	}
	if (!a->lw) {
		srt_attn_why(why, why_len, "%s: layer %d: instance created without weights (pool "
			     "declarations only): forward is not available", a->name, layer);
		return SRT_EINVAL;
	}
	if (!batch || !x || !out || batch->n_rows < 0 || (batch->n_seqs && !batch->seqs)) {
		srt_attn_why(why, why_len, "%s: layer %d: NULL batch, input or output", a->name,
			     layer);
		return SRT_EINVAL;
	}
	if (batch->n_rows == 0)
		return 0;
	memset(&f, 0, sizeof(f));
	f.a = a;
	f.lw = &a->lw[slot];
	f.slot = slot;
	f.dp = a->ref && m->head_dim % 64 == 0 && srt_attn_dp_usable();
	f.vpan = a->ref && !f.dp && m->head_dim % 16 == 0 && srt_attn_pv_panels();
	const char *mix = getenv("SRT_ATTN_DP_MIX");
	f.dpmix = f.dp && mix && !strcmp(mix, "1");

	size_t N = (size_t)batch->n_rows, B = N < ATTN_ROWS ? N : ATTN_ROWS;
	size_t d = (size_t)m->hidden_size, H = (size_t)m->num_attention_heads;
	size_t hd = (size_t)m->head_dim, ql = (size_t)m->q_lora_rank;
	size_t gol = (size_t)(m->o_groups * m->o_lora_rank);
	size_t cw = a->ratio ? (size_t)(f.lw->comp.coff * f.lw->comp.width) : 0;
	size_t icw = a->ratio == 4 ? (size_t)(2 * m->index_head_dim) : 0;
	size_t ih = a->ratio == 4 ? (size_t)m->index_n_heads : 0;
	size_t idim = (size_t)m->index_head_dim;
	int64_t maxend = 0;
	for (uint32_t i = 0; i < batch->n_seqs; i++)
		if (batch->seqs[i].pos + batch->seqs[i].n_tokens > maxend)
			maxend = batch->seqs[i].pos + batch->seqs[i].n_tokens;
	f.c4max = a->ratio == 4 ? maxend / 4 + 1 : 1;
	f.kmax = m->sliding_window + (a->ratio == 128 ? maxend / 128 + 1
				      : a->ratio == 4 ? m->index_topk : 0);
	f.kmax8 = (f.kmax + 7) / 8 * 8;
	f.kthr = f.kmax > ATTN_KGB ? f.kmax : ATTN_KGB;
	/* phase_c2: kmax8 + hd doubles, or the floats of ATTN_RH heads */
	f.tfloats = (ATTN_RH > 2 ? ATTN_RH : 2) * ((size_t)f.kmax8 + hd) +
		    4 * (size_t)f.c4max /* pairs */ + (size_t)(m->index_topk > 0 ? m->index_topk : 1) +
		    idim + 16;
	size_t ixf = 2 * (ih * idim + ATTN_IXB * ih) + ATTN_IXB * idim + /* phase_ix */
		     (ix_qbytes(ih, idim) + ATTN_IXB * (2 * sizeof(void *) + 1)) / sizeof(float) + 1;
	if (a->ratio == 4 && f.tfloats < ixf)
		f.tfloats = ixf;
	if (f.dp && f.tfloats < 12 * (size_t)f.kmax8 + 8 * hd) /* phase_c2_dp */
		f.tfloats = 12 * (size_t)f.kmax8 + 8 * hd;
	if (f.dp && f.tfloats < ATTN_KGB * hd / 2) /* phase_c1k: a block's key pairs */
		f.tfloats = ATTN_KGB * hd / 2;
	if (f.vpan && f.tfloats < 2 * ATTN_KGB * hd) /* phase_c1k: a block's keys and tiles */
		f.tfloats = 2 * ATTN_KGB * hd;
	if (f.vpan && f.tfloats < (ATTN_RH + ATTN_VLD + 1) * hd) /* pv_blocks */
		f.tfloats = (ATTN_RH + ATTN_VLD + 1) * hd;
	f.tfloats = (f.tfloats + 15) & ~(size_t)15;

	size_t ring = a->ratio ? (size_t)(srt_attn_ring_bytes(a, a->ratio, m->head_dim) / 4) : 0;
	if (a->ratio == 4 && srt_attn_ring_bytes(a, 4, m->index_head_dim) / 4 > ring)
		ring = (size_t)(srt_attn_ring_bytes(a, 4, m->index_head_dim) / 4);
	size_t nfl = B * (d + ql + H * hd + hd + H * hd + gol + ih * idim + ih +
			  d + d / 128 + ql + ql / 128 + (size_t)m->qk_rope_head_dim);
	/* one scratch block kept by the instance between calls (grown when a call needs more) */
	size_t gk = H * hd / (size_t)m->o_groups;
	size_t hg = (H + 15) / 16;
	/* compressor rows: the block's, and up to CG - 1 pending ones per sequence */
	size_t nsq = batch->n_seqs < B ? batch->n_seqs : B, CGp = SRT_ATTN_CG - 1;
	size_t Bc = a->ratio ? B + CGp * nsq : 0;
	size_t sz[22] = {nfl * sizeof(float), (ring + 16) * sizeof(float),
			(size_t)h->nthreads * f.tfloats * sizeof(float), N * sizeof(int64_t),
			N * sizeof(int32_t),
			f.vpan ? 0
			       : (f.dp ? (size_t)h->nthreads * (size_t)f.kthr : ATTN_CROWS * (size_t)f.kmax) *
					 hd * sizeof(float),
			f.vpan ? 0 : ATTN_CROWS * (size_t)f.kmax8 * hd * sizeof(float),
			ATTN_CROWS * sizeof(int64_t), (batch->n_seqs + 1) * sizeof(*views),
			(size_t)h->nthreads * 32 * gk * sizeof(float),
			ATTN_CROWS * (size_t)f.c4max * sizeof(double),
			2 * (batch->n_seqs + 1) * sizeof(struct vinfo),
			ATTN_CROWS * (size_t)f.kmax * sizeof(const uint8_t *),
			ATTN_CROWS * (size_t)((f.kmax + ATTN_KGB - 1) / ATTN_KGB) * sizeof(struct kblk),
			f.dp     ? ATTN_CROWS * hg * (size_t)f.kmax * 16 * sizeof(float)
			: f.vpan ? ATTN_CROWS * H * (size_t)f.kmax8 * sizeof(float)
				 : 0,
			f.dp ? ATTN_CROWS * (size_t)((f.kmax + 1) / 2) * hd * 4 : 0,
			f.dp ? ATTN_CROWS * hg * 8 * hd * 4 : 0,
			Bc * d * sizeof(float), Bc * sizeof(int64_t), Bc * (2 * cw + 2 * icw) * sizeof(float),
			a->ratio ? nsq * CGp * d * sizeof(float) : 0, nsq * sizeof(struct cseg)};
	size_t off[22], total = 0;
	for (int i = 0; i < 22; i++) {
		off[i] = total;
		total += (sz[i] + 63) & ~(size_t)63;
	}
	if (total > a->scratch_bytes) {
		h->free(a->scratch);
		a->scratch = h->alloc(total, 64);
		a->scratch_bytes = a->scratch ? total : 0;
	}
	if (!a->scratch) {
		srt_attn_why(why, why_len, "%s: layer %d: out of memory for the scratch of %zu rows",
			     a->name, layer, B);
		return SRT_ENOMEM;
	}
	float *buf = (float *)(a->scratch + off[0]);
	float *ringbuf = a->ratio ? (float *)(a->scratch + off[1]) : NULL;
	f.tbuf = (float *)(a->scratch + off[2]);
	f.rpos = (int64_t *)(void *)(a->scratch + off[3]);
	f.rseq = (int32_t *)(void *)(a->scratch + off[4]);
	f.ck = (float *)(a->scratch + off[5]);
	f.ckt = (float *)(a->scratch + off[6]);
	f.cnk = (int64_t *)(void *)(a->scratch + off[7]);
	views = (struct srt_seq_view *)(void *)(a->scratch + off[8]);
	f.dbuf = (float *)(a->scratch + off[9]);
	f.isc = (double *)(void *)(a->scratch + off[10]);
	struct vinfo *vi0 = (struct vinfo *)(void *)(a->scratch + off[11]);
	f.csrc = (const uint8_t **)(void *)(a->scratch + off[12]);
	f.ckx = (struct kblk *)(void *)(a->scratch + off[13]);
	f.csc = (float *)(void *)(a->scratch + off[14]);
	f.cvp = (uint32_t *)(void *)(a->scratch + off[15]);
	f.cqp = (uint32_t *)(void *)(a->scratch + off[16]);
	f.cx = (float *)(void *)(a->scratch + off[17]);
	f.cpos = (int64_t *)(void *)(a->scratch + off[18]);
	f.cp = (float *)(void *)(a->scratch + off[19]);
	f.ip = f.cp + Bc * 2 * cw;
	f.ctail = (float *)(void *)(a->scratch + off[20]);
	f.cs = (struct cseg *)(void *)(a->scratch + off[21]);
	struct vinfo *vis = vi0 + batch->n_seqs + 1;
	f.xa = buf;
	f.qr = f.xa + B * d;
	f.q = f.qr + B * ql;
	f.kv = f.q + B * H * hd;
	f.o = f.kv + B * hd;
	f.og = f.o + B * H * hd;
	f.iq = f.og + B * gol;
	f.iw = f.iq + B * ih * idim;
	f.xaq = f.iw + B * ih;
	f.xas = f.xaq + B * d;
	f.qrq = f.xas + B * (d / 128);
	f.qrs = f.qrq + B * ql;
	f.rcs = f.qrs + B * (ql / 128);

	/* the block's window rows (entry(), run_block) */
	if (B * (size_t)a->kv_bytes > a->wscr_bytes) {
		h->free(a->wscr);
		a->wscr = h->alloc(B * (size_t)a->kv_bytes, 64);
		a->wscr_bytes = a->wscr ? B * (size_t)a->kv_bytes : 0;
		if (!a->wscr) {
			srt_attn_why(why, why_len, "%s: layer %d: out of memory for the window rows "
				     "of %zu rows", a->name, layer, B);
			return SRT_ENOMEM;
		}
	}
	a->win_cur = NULL;

	/* every page of the whole call first: a failed call writes nothing */
	f.b = batch;
	f.N = (int64_t)N;
	f.vi = vi0;
	if ((rc = check_batch(&f, layer, why, why_len)))
		goto out;
	/*
	 * Blocks of ATTN_ROWS rows, in row order: a sequence cut by a block boundary continues in
	 * the next block exactly as a chunked prefill would (same bits, see the file comment).
	 */
	for (size_t r0 = 0; r0 < N; r0 += B) {
		size_t r1 = r0 + B < N ? r0 + B : N;
		uint32_t nv = 0;
		for (uint32_t i = 0; i < batch->n_seqs; i++) {
			const struct srt_seq_view *s = &batch->seqs[i];
			int64_t lo = s->first_row > (int64_t)r0 ? s->first_row : (int64_t)r0;
			int64_t hi = s->first_row + s->n_tokens < (int64_t)r1
					     ? s->first_row + s->n_tokens : (int64_t)r1;
			if (lo >= hi)
				continue;
			views[nv] = *s;
			vis[nv] = vi0[i];
			views[nv].pos = s->pos + (lo - s->first_row);
			views[nv].n_tokens = (int32_t)(hi - lo);
			views[nv].first_row = (int32_t)(lo - (int64_t)r0);
			if (s->token_ids)
				views[nv].token_ids = s->token_ids + (lo - s->first_row);
			nv++;
		}
		sub = *batch;
		sub.n_seqs = nv;
		sub.seqs = views;
		sub.n_rows = (int32_t)(r1 - r0);
		f.b = &sub;
		f.vi = vis;
		f.x = x + r0 * d;
		f.out = out + r0 * d;
		f.N = (int64_t)(r1 - r0);
		f.row0 = (int64_t)r0;
		if ((rc = run_block(&f, ringbuf, layer, why, why_len)))
			goto out;
	}
out:
	return rc;
}
