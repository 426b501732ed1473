/*
 * The lightning indexer's q·k for FP4 queries against FP4 keys (the reference profile) by
 * exact integer block sums.
 *
 * In the reference profile both sides are E2M1 values times a power of two per 32 dims, so
 * over one block every product is a small integer (2·E2M1 in [-12, 12] on each side) times
 * one power of two, and the block's sum Σ q·k is an exact integer I (|I| <= 4608) times that
 * power. srt_attn_qk_heads (attn_dot.h) defines the bits: the double sum of the products in
 * ascending dims. When none of that loop's partial sums rounds, its result is the exact sum,
 * and so is ((B0 + B1) + B2) + ... of the exact block values B = I·2^e: the same double. A
 * partial sum cannot round when the block exponents of a (head, key) pair span at most 38
 * binades (every partial sum is below 2^15 of the largest block unit and a multiple of the
 * smallest); srt_attn_qk_fp4 checks that per key and leaves the keys outside it to the
 * caller (the double loop), so its outputs are always that loop's bits.
 *
 * The block sums run as int8 dot products: AVX-512 VNNI (VPDPBUSD, 64 products per
 * instruction) where the CPU has it, else AVX2 (VPMADDUBSW pair sums added in 16 bits, then
 * VPMADDWD); both give the same integers, so the same bits. Without AVX2
 * srt_attn_qk_fp4_ready says no and callers keep the double loop. SRT_GEMM_ISA=avx2 takes the
 * AVX2 kernels on a VNNI CPU, SRT_GEMM_ISA=generic turns the path off (tests of the portable
 * paths).
 */
#ifndef SRT_ATTN_IX_H
#define SRT_ATTN_IX_H

#include <stddef.h>
#include <stdint.h>

/* One row's query heads, prepared (the layout is private to attn_ix.c). */
struct srt_attn_ixq {
	size_t nh, d;
	/* per 16 heads (nh / 16 of each), so that one pass's operands are contiguous; nb4 = d / 32
	 * rounded up to a multiple of 4, the extra blocks zero */
	int8_t *q;     /* [nh/16][nb4][8][16][4] 2·E2M1 values, dims in the key bytes' order */
	int32_t *corr; /* [nh/16][nb4][16] -12·Σ q over the block (the key bytes carry +12) */
	int32_t *corw; /* [nh/16][nb4][16] corr as the AVX2 kernels' 16-bit pair: low half corr, high 0 */
	double *qs;    /* [nh/16][d/32][16] the unit 2^(e-128) of the block, 0 if all zero */
	int32_t *qsh;  /* [nh/16][d/32][16] e - qe0 of the head, 0 if the block is all zero */
	int32_t *qe0;  /* [nh] the least code e of the head's nonzero blocks (qe_lo if none) */
	int qe_lo, qe_hi; /* the least and greatest qe0 of the heads with a nonzero block */
	int spread;    /* max over heads of the span of its nonzero blocks' exponent codes */
	int span;      /* the binades a key's block exponents may span with this query on the exact
			* path (SRT_IX_SPAN, read here once a query, not once a batch of keys) */
};

/* True when this CPU and build run srt_attn_qk_fp4 for nh heads of d dims (nh a multiple
 * of 16, d a multiple of 32 up to 512, AVX-512 VNNI or AVX2, not steered off by
 * SRT_GEMM_ISA). */
int srt_attn_qk_fp4_ready(size_t nh, size_t d);

/* Bytes of the buffer srt_attn_ixq_prepare lays the query out in. */
size_t srt_attn_ixq_bytes(size_t nh, size_t d);

/*
 * Prepare the query iq [nh][d] (floats) in buf (srt_attn_ixq_bytes, 8-byte aligned). Returns
 * 1 when nh is a multiple of 16 and every 32-dim block of every head is exactly an E2M1 code
 * times a UE8M0 power of two (what srt_quant_fp4_fake writes) with finite values, else 0: then
 * use the double loop.
 */
int srt_attn_ixq_prepare(const float *iq, size_t nh, size_t d, void *buf,
			 struct srt_attn_ixq *q);

/*
 * y[e·nh + h] = the q·k of head h and key e, bitwise srt_attn_qk_heads of the decoded floats,
 * for the keys e in [0, ne) with ok[e] = 1; keys is an array of ne pointers to FP4 keys (d/2
 * packed E2M1 bytes, low nibble first, then d/32 UE8M0 scale codes). A key whose scales fall
 * outside the exact range gets ok[e] = 0 and its outputs are not written. Returns the number
 * of keys done. Only when srt_attn_qk_fp4_ready(q->nh, q->d).
 */
size_t srt_attn_qk_fp4(const struct srt_attn_ixq *q, const uint8_t *const *keys, size_t ne,
		       const uint8_t *const *next, size_t nnext, double *y, uint8_t *ok);

/*
 * out[e] = the reference index score of key e against the prepared query: the bits of
 * srt_attn_ix_score_bf16 (attn_dot.h) on its srt_attn_qk_fp4 row with the heads' weights w
 * [nh], for the keys with ok[e] = 1 (the same keys as srt_attn_qk_fp4's), computed 16 keys
 * at a time with the keys in the vector lanes and no q·k row written. Returns the number of
 * keys done. Only when srt_attn_qk_fp4_ready(q->nh, q->d).
 *
 * Both take the nnext keys the caller scores next (next: NULL and 0 for none), read into the
 * caches while these are scored: a run of keys spans pages that the hardware prefetcher does
 * not follow from one to the next.
 */
size_t srt_attn_ix_score_fp4(const struct srt_attn_ixq *q, const uint8_t *const *keys,
			     size_t ne, const uint8_t *const *next, size_t nnext, const float *w,
			     double *out, uint8_t *ok);

#endif
