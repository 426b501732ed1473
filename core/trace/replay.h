/*
 * Cache-only replay: run a trace's requests through a real ShadowRadix cache, no model compute.
 *
 * Per request, in arrival order: start (match + lock) on the input tokens; prefill the rest in
 * chunks of chunk_tokens (extend, commit, release_window after each chunk, as a chunked-prefill
 * executor does); decode output_length tokens one by one (extend + release_window); finish.
 * A request that does not fit the budget (SRT_ENOMEM: running requests hold it) is aborted and
 * counted as rejected. Decode token ids come from a PRNG seeded by the request's index, so they
 * never repeat a prompt page.
 *
 * The ceiling is computed independently of the cache: a set of whole pages seen so far, each
 * named by the hash chain of the trace's block ids up to the page and its page index; a
 * request's ceiling is its leading run of whole input pages already in the set.
 */
#ifndef SRT_TRACE_REPLAY_H
#define SRT_TRACE_REPLAY_H

#include <stdint.h>
#include <stdio.h>

#include "radix/radix.h"
#include "trace/trace.h"

struct srt_tmgr;

struct srt_replay_opts {
	uint64_t chunk_tokens; /* prefill chunk (0 = 8192) */
	size_t limit;          /* requests to run (0 = all in the trace) */
	FILE *progress;        /* progress lines (NULL = none) */
	/* Tier manager attached to the cache (NULL = L1 only): requests start, commit and finish
	 * through it, so evicted pages move down the tiers and come back on a hit; the hit
	 * counted is L1 + L2 + L3 (per tier in srt_tmgr_stats). */
	struct srt_tmgr *tiers;
	/* Window rematerialization (core/radix/remat.h; NULL = off): a request may resume where
	 * only the ALL pools are cached when the policy's recompute costs less than computing
	 * from the ordinary hit; the rebuilt TAIL pages join the cache. With tiers, set the same
	 * policy on the manager (srt_tmgr_set_remat). */
	const struct srt_rdx_remat_policy *remat;
};

struct srt_replay_result {
	uint64_t requests, rejected;
	uint64_t input_tokens, hit_tokens, ceiling_tokens, output_tokens;
	double wall_s;
	/* rematerialization: hit tokens the ordinary rule (TAIL pages cached) gave, requests
	 * resumed by rematerialization (in L1 / past L1) and their recompute in token-layers */
	uint64_t strict_hit_tokens;
	uint64_t remat_requests, remat_lower_requests, remat_token_layers;
};

/* Run; 0, or a negative code with a message when the cache fails other than by budget. */
int srt_trace_replay(struct srt_rdx_cache *c, const struct srt_trace *t,
		     const struct srt_replay_opts *o, struct srt_replay_result *res, char *err,
		     size_t errlen);

/* Infinite-cache ceiling of requests [0, n) at page size P, in tokens. */
uint64_t srt_trace_ceiling(const struct srt_trace *t, size_t n, uint32_t page_tokens);

#endif
