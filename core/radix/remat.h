/*
 * Window rematerialization: the shape and the cost of rebuilding a cached prefix's TAIL pages.
 *
 * A prefix [0, t) whose ALL-pool pages (compressed KV, indexer keys) are cached but whose
 * window / carry-state pages before t are not can still be resumed at t: recompute, layer by
 * layer, only the positions whose hidden states the window KV and carry state of the last K
 * pages before t depend on. Window KV of layer l at position p depends on layer l's input at p;
 * a row p of layer l is exact when its window [p - W + 1, p] of layer l is (the compressed
 * entries it reads come from the cache). So, with top = t - K * P the first position to
 * rebuild exactly, layer l recomputes positions [lo(l), t) with
 *
 *     lo(l) = max(0, top - (W - 1) * (L - 1 - l)),
 *
 * a trapezoid of about K*P*L + (W - 1) * L * (L - 1) / 2 token-layers (~64 L^2 for W = 128),
 * instead of t * L for computing the prefix. Rows of layer l below lo(l + 1) are only needed
 * for their window KV: their own attention is skipped and their outputs discarded.
 *
 * Pure arithmetic, shared by the executor (which runs it) and the trace replay (which counts
 * it). No state, thread safe.
 */
#ifndef SRT_RADIX_REMAT_H
#define SRT_RADIX_REMAT_H

#include <stdint.h>

struct srt_remat_geom {
	uint32_t layers;      /* L: attention layers, each with a window */
	uint32_t window;      /* W: sliding window in tokens (the ratio-1 TAIL pool's w) */
	uint32_t page_tokens; /* P */
	uint32_t tail_pages;  /* K: pages before t whose TAIL pages are rebuilt (ceil(max w / P)) */
};

/* First position of the trapezoid's first rebuilt page: max(0, t - K * P). */
uint64_t srt_remat_top(const struct srt_remat_geom *g, uint64_t t);

/* lo(l): layer l recomputes positions [lo(l), t) (l < layers). */
uint64_t srt_remat_lo(const struct srt_remat_geom *g, uint64_t t, uint32_t l);

/* Token-layers of the trapezoid for a resume at t: sum over l of t - lo(l). */
uint64_t srt_remat_cost(const struct srt_remat_geom *g, uint64_t t);

#endif
