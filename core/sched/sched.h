/*
 * The scheduler: continuous batching of many requests over one executor (exec/engine.h).
 *
 * Requests are submitted from any thread at any time (srt_sched_submit); one scheduler thread,
 * started by srt_sched_create, owns the engine, its ShadowRadix cache and its tier manager and
 * is the only thread that touches them. Each step it builds one batch for srt_engine_forward:
 *
 *   1. a decode row (one token) for every running sequence whose prompt is done: decode is
 *      never starved, it always goes first;
 *   2. prefill chunks of running sequences, then of newly admitted ones, in arrival order,
 *      until the step's token budget (token_budget rows) is spent; a chunk is at most the
 *      engine's prefill chunk (chunked prefill).
 *
 * Admission (waiting -> running) is prefix-aware: a request starts with srt_engine_seq_begin on
 * its whole token history, so a prefix in L1/L2/L3 is not recomputed. When its hit must be
 * loaded from L2/L3 and the step computes other requests, it is admitted without joining this
 * step's batch: the tier manager's thread loads its pages while the forward runs, and the next
 * step waits for them (srt_engine_seq_wait, usually already done) before it joins the batch
 * (counted in overlapped_loads); with nothing else to compute it waits at once. A waiting
 * request that shares at least one page of prefix with a running request which has not yet
 * computed that prefix waits until it has (identical concurrent prefixes are computed once,
 * then hit).
 *
 * Memory. Before a forward the scheduler counts, per pool, the L1 pages the batch will allocate
 * and makes room with srt_rdx_evict (least recently used cached pages first; the tier manager's
 * hook demotes them to L2/L3 as the tier policy says). If the room cannot be made, it takes
 * prefill chunks out of the batch (a request admitted in this step goes back to the front of the
 * queue: it waits for memory, it is not aborted); if even the decode rows do not fit, it
 * preempts the running request admitted last (its sequence is freed; its computed pages stay in
 * the cache; it is queued first and later resumes from the cache with its sampler state, so its
 * tokens do not change). A request is failed for memory only when it cannot fit alone.
 *
 * Tokens are a pure function of (prompt, sampling parameters, seed): the executor's logits do
 * not depend on chunking, batching or prefix resumes (tests/exec), and each request samples
 * with its own seeded generator. So arrival order, batch composition and preemption do not
 * change any request's tokens (tests/sched and tests/serve prove it end to end).
 *
 * Output: each request collects its generated token ids and, when the scheduler has a
 * detokenizer, the UTF-8 text of those tokens with stop strings applied; a reader copies what
 * is new (srt_sched_tokens / srt_sched_text) and learns the state (srt_sched_poll). The
 * request's notify callback runs on the scheduler thread (no scheduler lock held) whenever
 * output or the state changed; srt_sched_wait blocks until then instead.
 *
 * Errors: functions that can fail return 0 or a negative SRT_E* code and write a one-line
 * message into err[errlen].
 *
 * Thread safety: every function may be called from any thread, except that one request handle
 * must not be released while another thread still uses it.
 */
#ifndef SRT_SCHED_SCHED_H
#define SRT_SCHED_SCHED_H

#include <stddef.h>
#include <stdint.h>

struct srt_engine;

/*
 * Detokenizer, optional: turns a request's generated ids into bytes as they come. open makes
 * one decoder state per request; feed appends the bytes of token id (complete UTF-8 only: bytes
 * of a character split across tokens come with the token that completes it) to *buf (grow with
 * realloc; *len and *cap updated) and returns 0 or -1 (out of memory); close frees the state.
 * Called on the scheduler thread only.
 */
struct srt_sched_detok {
	void *ctx;
	void *(*open)(void *ctx);
	int (*feed)(void *state, int32_t id, char **buf, size_t *len, size_t *cap);
	void (*close)(void *state);
};

struct srt_sched_config {
	int token_budget;     /* rows per forward; <= 0: max(engine chunk, max_running) */
	int max_running;      /* sequences running at once; <= 0: 64 */
	int max_waiting;      /* queued requests before submit refuses (SRT_EBUSY); <= 0: 4096 */
	uint64_t max_context; /* prompt + generated tokens; 0: the model's max_position_embeddings */
	const struct srt_sched_detok *detok; /* borrowed; NULL: no text, no stop strings */
};

#define SRT_SCHED_MAX_STOP 8

struct srt_sched_params {
	float temperature;   /* <= 0: greedy */
	float top_p;         /* (0, 1]; 1 = all */
	int32_t top_k;       /* <= 0: all */
	uint64_t seed;
	uint32_t max_tokens; /* >= 1 */
	int ignore_eos;      /* 1: eos does not end the request */
	/* stop strings (need a detokenizer); the text ends before the first match */
	const char *stop[SRT_SCHED_MAX_STOP];
	int n_stop;
	/* stop token ids besides eos (the id is generated and counted, its text is not emitted) */
	const int32_t *stop_ids;
	int n_stop_ids;
	void (*notify)(void *user); /* see the top of the file; may be NULL */
	void *user;
};

enum srt_sched_state { SRT_SCHED_WAITING = 0, SRT_SCHED_RUNNING = 1, SRT_SCHED_DONE = 2 };

enum srt_sched_finish {
	SRT_SCHED_NOT_DONE = 0,
	SRT_SCHED_LENGTH,    /* max_tokens or the context limit reached */
	SRT_SCHED_STOP,      /* eos, a stop id or a stop string */
	SRT_SCHED_CANCELLED, /* srt_sched_cancel / release / shutdown */
	SRT_SCHED_ERROR,     /* the executor failed for this request (message in poll) */
};

/* "length", "stop", "cancelled", "error" or NULL */
const char *srt_sched_finish_name(int finish);

struct srt_sched_info {
	int state;              /* enum srt_sched_state */
	int finish;             /* enum srt_sched_finish */
	uint64_t prompt_tokens;
	uint64_t generated;     /* tokens generated so far */
	size_t text_len;        /* bytes of text that may be emitted now */
	uint64_t cached_tokens; /* prefix served from cache at the first start */
	uint64_t cached_tier[3]; /* of which from L1, L2, L3 */
	uint32_t preemptions;
	double t_submit, t_first, t_last; /* CLOCK_MONOTONIC seconds; 0 = not yet */
	char error[256];        /* with SRT_SCHED_ERROR */
};

struct srt_sched;
struct srt_sched_req;

/*
 * Start a scheduler (and its thread) on an open engine, borrowed until srt_sched_destroy.
 * Returns 0 and *out, SRT_EINVAL (bad config) or SRT_ENOMEM / SRT_EIO (thread).
 */
int srt_sched_create(struct srt_engine *e, const struct srt_sched_config *cfg,
		     struct srt_sched **out, char *err, size_t errlen);

/*
 * Stop taking requests (submit fails with SRT_EBUSY from now on). cancel = 0: the requests
 * already submitted run to their end; 1: they are cancelled at the next step.
 */
void srt_sched_shutdown(struct srt_sched *s, int cancel);
/* Shut down (cancelling), join the thread, free. Request handles must be released before.
 * The engine stays open. NULL is ok. */
void srt_sched_destroy(struct srt_sched *s);
/* Block until nothing is waiting or running (after srt_sched_shutdown(s, 0) to drain). */
void srt_sched_drain(struct srt_sched *s);

/*
 * Submit a request: prompt[0..n) (copied; ids checked against the vocabulary), sampling p
 * (copied, stop strings included). Returns 0 and a handle (release with srt_sched_release), or
 * SRT_EINVAL (empty prompt, id out of range, prompt + max_tokens over the context, bad
 * parameter, stop strings without a detokenizer), SRT_ENOMEM (the request's KV cannot fit in L1
 * even alone, or out of memory), SRT_EBUSY (queue full or shutting down). The message says
 * which.
 */
int srt_sched_submit(struct srt_sched *s, const int32_t *prompt, uint64_t n,
		     const struct srt_sched_params *p, struct srt_sched_req **out, char *err,
		     size_t errlen);

/* Ask the scheduler to stop the request at its next step (finish = CANCELLED, everything it
 * holds freed). No effect once done. */
void srt_sched_cancel(struct srt_sched_req *r);
/* Drop the caller's handle; a request not done is cancelled. NULL is ok. */
void srt_sched_release(struct srt_sched_req *r);

/* Snapshot of the request's state. */
void srt_sched_poll(struct srt_sched_req *r, struct srt_sched_info *out);
/* Copy generated ids [from, from + cap) that exist; returns how many were copied. */
size_t srt_sched_tokens(struct srt_sched_req *r, uint64_t from, int32_t *buf, size_t cap);
/* Copy emittable text bytes [from, from + cap); returns how many were copied. */
size_t srt_sched_text(struct srt_sched_req *r, size_t from, char *buf, size_t cap);
/* Block until the request has more than `generated` tokens, more than text_len text, or is done;
 * then fill *out. */
void srt_sched_wait(struct srt_sched_req *r, uint64_t generated, size_t text_len,
		    struct srt_sched_info *out);

/* Latency histograms: upper bounds in seconds (cumulative counts as Prometheus wants). */
#define SRT_SCHED_NBUCKETS 14
extern const double srt_sched_buckets[SRT_SCHED_NBUCKETS];

#define SRT_SCHED_MAX_POOLS 16

struct srt_sched_hist {
	uint64_t count[SRT_SCHED_NBUCKETS + 1]; /* per bucket (not cumulative); last = +Inf */
	double sum;
	uint64_t n;
};

struct srt_sched_stats {
	uint64_t submitted, rejected;
	uint64_t finished[5];        /* by enum srt_sched_finish (index 0 unused) */
	uint64_t waiting, running;
	uint64_t prompt_tokens, generated_tokens, computed_tokens;
	uint64_t hit_tokens[3];      /* prefix tokens served from L1, L2, L3 (first starts) */
	uint64_t preemptions, steps, deferred_for_prefix;
	uint64_t overlapped_loads;   /* admissions whose L2/L3 loads ran during another forward */
	struct srt_sched_hist ttft, itl, e2e;
	uint32_t n_pools;
	struct {
		char name[32];
		uint64_t bytes, budget, peak, evicted_pages;
	} pools[SRT_SCHED_MAX_POOLS];
	int has_tiers;
	uint64_t l2_bytes, l3_bytes, l3_objects;
	uint64_t tier_hit_tokens[3];  /* the tier manager's own count */
	uint64_t demoted_l1_l2, demoted_l1_l3, demoted_l2_l3, promoted_l2_l1, promoted_l3_l1;
};

/* Consistent snapshot (cache figures as of the end of the last step). */
void srt_sched_stats(struct srt_sched *s, struct srt_sched_stats *out);

#endif /* SRT_SCHED_SCHED_H */
