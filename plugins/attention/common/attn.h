/*
 * plugins/attention/common — the CPU attention kernels shared by the swa, csa and hca plugins
 * (spec sections 2, 7, 9). A static library (srt_attn_common) that each plugin links; the
 * plugins themselves only hold their descriptor.
 *
 * One `struct srt_attn` serves every model layer of one compress ratio: 0 (swa: window only),
 * 4 (csa: window + the lightning indexer's top-k of the C4 entries) or 128 (hca: window + every
 * visible C128 entry). It declares its pools once and keeps no per-sequence state: KV, indexer
 * keys and the compressors' carry state live only in the pages of the batch's page tables.
 *
 * Pools, in declaration order (P = page tokens, w = head_dim, wi = index_head_dim):
 *   <name>.window     ratio 1,   TAIL sliding_window   one KV entry per token (kv_dtype)
 *   csa.c4_kv         ratio 4,   ALL                   one KV entry per complete 4-block
 *   csa.c4_index      ratio 4,   ALL                   one indexer key per 4-block (index_dtype)
 *   csa.c4_state      ratio P,   TAIL 1                compressor rings, see below
 *   hca.c128_kv       ratio 128, ALL
 *   hca.c128_state    ratio P,   TAIL 1
 * Carry state entry of a page: the state after the last token written into that page.
 *  - ratio 4 (main and indexer compressor, overlapping windows of 8): a ring of the raw rows of
 *    the last 8 tokens, slot = position mod 8, each row the token's projections (kv [2w]
 *    floats, score + ape [2w] floats): kv rows [8][2w] then score rows [8][2w]. csa appends the
 *    indexer compressor's ring (2 wi wide) after the main one. A block is pooled from the ring
 *    when its last token arrives, by the reference's own order (max, exp, sequential sums).
 *  - ratio 128: the online form of the per-channel softmax pooling of the block being filled:
 *    running max [w], sum [w], weighted kv [w] (fp32), reset at every block start and updated
 *    token by token (rescaling by exp(old max - new max) when the max grows); the entry is
 *    kv / sum. With P a multiple of 128 the state at a page end is always the empty one.
 *    This is not the reference's summation order (max first, then one pass): an entry may
 *    differ from it in the last float bit before its bf16 rounding (bitwise on the tiny
 *    model's tests); 6 KiB instead of 512 KiB of raw rows per page and layer at w = 512.
 * Both are updated one token at a time in position order by the same code for prefill, chunked
 * prefill and decode, so every chunking gives the same bits (in the outputs and the pages).
 *  - Pending rows (both ratios, after the rings): the compressors' projections of a token are
 *    computed when its group of SRT_ATTN_CG = 4 tokens (positions 4g .. 4g + 3) is complete,
 *    for the group's rows together, so a decode step streams the bf16 compressor matrices
 *    once per 4 tokens instead of once per token. Until then the rows of the group's tokens
 *    seen so far wait in the state: int64 first token, int64 count, then up to 3 rows of
 *    attn_norm's output (hidden_size floats each). The rings and online sums above hold the
 *    tokens of the complete groups only. Groups never straddle a block of either ratio or a
 *    page (P is a multiple of 4), so a page's last state has no pending rows. The
 *    projections do not depend on how many rows are computed together (srt_gemm), so the
 *    bits are those of one token at a time.
 *
 * Entry layouts (option kv_dtype; "auto" = fp8 in the reference profile, f32 in f32):
 *   bf16: w bf16 values;  f32: w floats;
 *   fp8:  (w - rope) E4M3 codes, rope dims as bf16, one UE8M0 scale per 64 nope dims, padded
 *         to a multiple of 8 bytes (584 B at w = 512). Lossless in the reference profile (the
 *         fake-quantized nope dims are E4M3 x 2^k, the rope dims bf16; so is bf16).
 * Indexer keys (option index_dtype; "auto" = fp4 in reference, f32 in f32; when absent it
 * follows an explicit kv_dtype of bf16 / fp8 / f32, else auto):
 *   fp4: wi/2 packed E2M1 + wi/32 UE8M0 (lossless after the reference's FP4 fake-quant);
 *   fp8: wi E4M3 + one fp32 power-of-two scale; bf16: 2 wi bytes; f32: 4 wi bytes.
 *
 * Thread safety: one call at a time per instance (attention.h); calls use host->parallel_for.
 */
#ifndef SRT_ATTN_COMMON_H
#define SRT_ATTN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/shadowrt.h>

#include "attn_dot.h"
#include "ops/gemm.h"

/* Tokens per group of the compressors' projections (pending rows, above). */
#define SRT_ATTN_CG 4

enum srt_attn_store { SRT_ATTN_ST_BF16 = 0, SRT_ATTN_ST_FP8 = 1, SRT_ATTN_ST_FP4 = 2,
		      SRT_ATTN_ST_F32 = 3 };

/* One compressor's weights (fp32 copies). */
struct srt_attn_comp {
	int ratio, coff, width, ring; /* coff 2 with overlap (ratio 4), else 1; ring 8 or 1 */
	struct srt_attn_tm wkv, wgate; /* [coff*width][dim], tiled (bf16 as in the checkpoint) */
	float *ape;                   /* [ratio][coff*width] */
	float *norm;                  /* [width] */
};

/* Weights of one served layer. FP8 matrices are borrowed views into the checkpoint. */
struct srt_attn_lw {
	int32_t layer;
	float *attn_norm, *q_norm, *kv_norm, *sink;
	struct srt_weight wq_a, wq_b, wkv, wo_b;
	/* wo_a dequantized to bf16 as convert.py does (exact), one tiled [o_lora][H * hd / o_groups]
	 * matrix per group: [o_groups] */
	struct srt_attn_tm *wo_a;
	/* reference profile: wo_a as stored (E4M3 + UE8M0 view into the checkpoint), for the
	 * float32-accumulated grouped product when every group's tiles are E4M3 (decode exact) */
	struct srt_weight wo_a8;
	int wo_a8_ok;
	struct srt_attn_comp comp;   /* ratio 4 / 128 */
	struct srt_attn_comp icomp;  /* ratio 4: the indexer's compressor */
	struct srt_weight iwq_b;     /* ratio 4: indexer query projection */
	struct srt_attn_tm iwp;      /* ratio 4: weights_proj [index_n_heads][dim], tiled */
	/* option fp8_layout: the layer's FP8 matrices (wq_a, wq_b, wkv, wo_a8, wo_b, iwq_b) paired
	 * for the decode GEMV (gemm.h's SRT_WT_FP8_PAIRED) in this block, in place of views into
	 * the checkpoint; NULL when they stay row-major */
	struct srt_fp8_block fp8_block;
};

struct srt_attn {
	const struct srt_host *host;
	const struct srt_model_config *m; /* borrowed */
	const char *name;                 /* "swa", "csa", "hca" (static) */
	int ratio;
	int ref;                          /* 1: reference profile, 0: f32 */
	int fp8_paired;                   /* option fp8_layout resolved: pair the FP8 matrices */
	int fp8_must;                     /* ... and fail without memory for it (explicit paired) */
	uint32_t P;                       /* page tokens */
	int32_t *layers;                  /* [n_layers], host->alloc'ed */
	uint32_t n_layers;
	int kv_store, ix_store;           /* enum srt_attn_store */
	uint64_t kv_bytes, ix_bytes, state_bytes;
	struct srt_pool_decl pools[4];
	uint32_t n_pools;
	int pool_win, pool_comp, pool_ix, pool_state; /* index in pools, -1 if none */
	/* window entries per page: a ring of the page's last win_ring rows (P / the window
	 * pool's declared ratio; = P when the window does not divide P) */
	uint32_t win_ring;
	struct srt_attn_lw *lw;           /* [n_layers]; NULL when created without weights */
	float *freqs;                     /* [rope/2] RoPE frequencies of this layer type */
	/*
	 * Test hook, NULL by default: when set, forward writes each row's indexer selection here,
	 * [n_rows][index_topk] ascending entry numbers, -1 padded (csa only).
	 */
	int32_t *dbg_sel;
	/* forward's scratch, kept between calls (grown on demand; one call at a time) */
	uint8_t *scratch;
	size_t scratch_bytes;
	/* the window rows of a block of forward, encoded as in the pages ([rows][kv_bytes]; grown
	 * on demand), and while its attention runs, that buffer: entry() then gives the rows of
	 * the block from it instead of from the pages' rings (attn_forward.c) */
	uint8_t *wscr, *win_cur;
	size_t wscr_bytes;
};

/*
 * Make an instance for `ratio` (0, 4 or 128) named `name`. args->weights may be NULL: the
 * instance then only declares pools (geometry reports) and forward fails saying so.
 * Options: kv_dtype, index_dtype (see above). 0, or a negative SRT_E* code with a reason.
 */
int srt_attn_create(const struct srt_host *host, const struct srt_plugin_args *args, int ratio,
		    const char *name, struct srt_attn **out, char *why, size_t why_len);
void srt_attn_destroy(struct srt_attn *a);

/* The attention vtable's forward (attention.h). */
int srt_attn_forward(struct srt_attn *a, int32_t layer, const struct srt_batch *batch,
		     const float *x, float *out, char *why, size_t why_len);

/* Entry codecs (exposed for tests): encode w (or wi) floats into an entry, decode back. */
/*
 * The indexer's top-k: sel[0..k) := the indices of the k first of score[0..n) by descending
 * score, ties to the lower index (all of them when n <= k), in ascending order; returns k.
 * scratch: n · 16 bytes (8-byte aligned). Scores must not be NaN (no order among them).
 */
int64_t srt_attn_topk(const double *score, int64_t n, int64_t k, void *scratch, int32_t *sel);

void srt_attn_kv_encode(const struct srt_attn *a, const float *v, uint8_t *e);
void srt_attn_kv_decode(const struct srt_attn *a, const uint8_t *e, float *v);
/* srt_attn_kv_decode of entries e[0 .. n) into v[k · head_dim ...], one key after another.
 * With `exact`, returns srt_attn_bf16_exact of all n · head_dim floats (for FP8 entries mostly
 * from their scale codes, without a pass over the floats), else 0. */
int srt_attn_kv_decode_n(const struct srt_attn *a, const uint8_t *const *e, size_t n, float *v,
			 int exact);
/* srt_attn_kv_tiles: FP8 entries of at most this many bytes take its tile path. */
#define SRT_ATTN_ZERO_ENTRY 4096
/* srt_attn_tile of the n keys srt_attn_kv_decode_n decodes from entries e[0 .. n) (n a
 * multiple of 8 or the last tile partial; t: ceil(n / 8) tiles of head_dim), FP8 entries a
 * tile at a time straight from their codes (srt_attn_fp8_tile). Returns what
 * srt_attn_kv_decode_n returns with `exact`; tmp: 8 · head_dim floats of room. */
int srt_attn_kv_tiles(const struct srt_attn *a, const uint8_t *const *e, size_t n, float *t,
		      float *tmp, int exact);
/* srt_attn_kv_decode of entries e[0 .. n) as value panels (srt_attn_v_panels(v, n, head_dim,
 * 0, ldk, vp) of the decoded rows: the same floats), FP8 entries straight from their codes;
 * tmp: head_dim floats of room. head_dim a multiple of 16. */
void srt_attn_kv_panels(const struct srt_attn *a, const uint8_t *const *e, size_t n, size_t ldk,
			float *vp, float *tmp);
/* srt_attn_bf16_keys (attn_dot.h) of the nk keys that srt_attn_kv_decode gives for entries
 * e[0 .. nk), FP8 entries without their floats (srt_attn_fp8_keys); tmp: nk · head_dim floats
 * of room. */
int srt_attn_kv_keys(const struct srt_attn *a, const uint8_t *const *e, size_t nk, float *tmp,
		     uint32_t *kp, uint32_t *vp, uint8_t *lo, uint8_t *hi);
void srt_attn_ix_encode(const struct srt_attn *a, const float *v, uint8_t *e);
void srt_attn_ix_decode(const struct srt_attn *a, const uint8_t *e, float *v);

#endif /* SRT_ATTN_COMMON_H */
