/*
 * Cache-only replay: run a trace's requests through a real ShadowRadix cache, no model compute.
 *
 * Per request: start (match + lock, and the tier loads) on the input tokens; prefill the rest in
 * chunks of chunk_tokens (extend, commit, release_window after each chunk, as a chunked-prefill
 * executor does); decode output_length tokens one by one (extend + release_window); finish.
 * Decode token ids come from a PRNG seeded by the request's index, so they never repeat a prompt
 * page.
 *
 * Sequential mode (default): one request at a time in trace order, each finished before the next
 * starts. A request that does not fit the budget alone is an error naming the request and the
 * pool (SRT_ENOMEM).
 *
 * Concurrent mode (`concurrent`): a discrete-event model on a simulated clock (no sleeping).
 * Request i arrives at (timestamp_i - timestamp_0) * time_scale seconds. It is admitted when a
 * slot is free (at most max_running at once) and its pages fit beside those of the running
 * requests, in arrival order (a request that does not fit waits for the next completion:
 * counted in `deferred`); at admission its match, tier loads, prefill and decode happen on the
 * cache at once, so later arrivals hit its prefix, and it then holds every page it locked
 * (its prefix and its own pages) for its service time
 *     (input_length - hit) / prefill_tps + output_length / decode_tps   seconds
 * after which it finishes (commit + unlock) and its pages become evictable. Running requests
 * thus contend for L1 as in a serving system. Tier I/O takes no simulated time.
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
	/* concurrent mode (see above); 0 = the defaults in brackets */
	int concurrent;
	double time_scale;     /* simulated seconds per trace second [1] */
	double prefill_tps;    /* prefill tokens per second per request [10000] */
	double decode_tps;     /* decode tokens per second per request [30] */
	uint32_t max_running;  /* requests running at once at most [64] */
};

struct srt_replay_result {
	uint64_t requests;
	uint64_t rejected; /* always 0: a request that cannot fit alone is an error (kept for callers) */
	uint64_t input_tokens, hit_tokens, ceiling_tokens, output_tokens;
	double wall_s;
	double cpu_s; /* process CPU time (user + system, all threads) over the same span */
	/* rematerialization: hit tokens the ordinary rule (TAIL pages cached) gave, requests
	 * resumed by rematerialization (in L1 / past L1) and their recompute in token-layers */
	uint64_t strict_hit_tokens;
	uint64_t remat_requests, remat_lower_requests, remat_token_layers;
	/* concurrent mode */
	uint64_t deferred;           /* requests that waited for memory held by running ones */
	uint32_t peak_running;       /* requests running at once at most */
	size_t peak_waiting;         /* requests waiting at most */
	double sim_s;                /* simulated time at the last event */
	double mean_wait_s, max_wait_s; /* arrival to admission */
};

/* Run; 0, or a code with a message (SRT_ENOMEM: a request does not fit the budget alone). */
int srt_trace_replay(struct srt_rdx_cache *c, const struct srt_trace *t,
		     const struct srt_replay_opts *o, struct srt_replay_result *res, char *err,
		     size_t errlen);

/* Infinite-cache ceiling of requests [0, n) at page size P, in tokens. */
uint64_t srt_trace_ceiling(const struct srt_trace *t, size_t n, uint32_t page_tokens);

#endif
