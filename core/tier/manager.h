/*
 * The tier manager (HiCache): moves ShadowRadix pages L1 -> L2 -> L3 on eviction and back on a
 * hit, per pool, under byte budgets, with a write policy and background prefetch from L3.
 *
 * Tiers. L1 is the radix cache's own pages (its per-pool budgets, its eviction). L2 is a page
 * arena plugin (SRT_CAP_PAGE_ARENA, normally "host") holding page payloads, indexed by page key.
 * L3 is a keyed store plugin (file, sqlite, redis) behind srt_tier_store (object header, checksum).
 * Every page of every pool is named by its L3 key (key.h: one hash chain per pool); L2 and L3 are
 * indexed by that key, so a page found in either is the page of exactly that prefix.
 *
 * Movement.
 *  - Demotion: the radix cache calls the manager's on_drop hook before it frees a tree page;
 *    the page goes to L2 (or to L3 when there is no L2 or L2 is full of pinned pages). When
 *    L2 evicts (least recently used first, to stay within its budget) a page that L3 lacks,
 *    the page is written to L3 first ("write-back").
 *  - Write policy (eager copies at commit): SRT_TMGR_WRITE_THROUGH copies every newly committed
 *    page to L2 and L3 at once; SRT_TMGR_WRITE_AFTER_HITS does it once the page has been part of
 *    `write_after_hits` L1 hits; SRT_TMGR_WRITE_BACK only copies on eviction (above).
 *  - TAIL pools (sliding window, carry state) are only stored where a resume point needs them:
 *    the last ceil(w / P) pages before each commit point of a request (chunk ends and the
 *    request end), before its hit and before the points where it left the tree or the lower
 *    tiers' run (branch points, where the next requests sharing the prefix resume), and,
 *    with tail_stride s, before every s-th page. ALL pools store every page.
 *  - Promotion: srt_tmgr_req_start matches L1 first; past the L1 hit it looks the prompt's
 *    following pages up in L2, then asks L3 for the longest present run (batched exists), and
 *    takes the longest page boundary t at which the match rule holds over L1 + L2 + L3 (every
 *    ALL pool has pages [hit, t), every TAIL pool the pages of its window before t). It then
 *    allocates the request's L1 pages up to t, copies the L2 pages in at once and fetches the L3
 *    pages, in a background thread when prefetch is on (which, with real pages, also does the
 *    L2 -> L1 copies, so they overlap whatever the scheduler does between srt_tmgr_req_start
 *    and srt_tmgr_req_wait; L2 arena calls are serialised by a mutex). The loaded pages are private to the
 *    request until srt_tmgr_req_wait has seen every page arrive and verified it; only then are
 *    they committed to the tree, where other requests can hit them. A page that fails to load
 *    (absent after all, corrupt, store down) is gone from the store afterwards (corrupt objects
 *    are removed), so srt_tmgr_req_wait looks the request up once more and loads the longest
 *    prefix that L1 + L2 + L3 still hold and verify; only if that fails too does it fall back
 *    to the L1 hit. L2 copies stay after promotion (inclusive). A request whose lookup starts
 *    inside the pages another request is still loading from L3 (same prefix) loads nothing
 *    itself: its srt_tmgr_req_wait waits for that load (committing it), then matches those
 *    pages in L1 (loads_shared counts them).
 *
 * Budgets are hard: L1 per pool (the radix cache), L2 and L3 in bytes, counted in page bytes
 * (payload + the 64-byte object header for L3). L3 accounting covers the objects this process
 * wrote or found; with real payloads the store's own `max_bytes` option should be set to the
 * same budget so objects of other processes are bounded too.
 *
 * Payloads. Real mode (payload_bytes 0): L1 pages are host memory of page_bytes each and are
 * copied as they are. Synthetic mode (payload_bytes > 0, cache-only replay): L1 pages carry no
 * bytes (the null allocator); every page's payload is payload_bytes bytes derived from its key
 * (srt_tmgr_synth_payload), written to L2/L3 and checked byte for byte when it comes back, while
 * budgets and "bytes moved" still count the real page size.
 *
 * L3 writes are asynchronous (core/tier/writer.h): puts and the removes of L3 evictions go into a
 * bounded FIFO that one writer thread drains into the store in batches (one store call per run
 * of up to write_batch puts: one SQLite transaction, one Redis pipeline, one file-store sync).
 * A page counts as in L3 from the moment its put is queued: lookups see queued puts and loads
 * read the queued copy, so a hit never waits for the disk. The queue holds at most
 * write_queue_bytes; when it is full the request path waits (write_full = SRT_TWR_WAIT, the
 * default, counted in l3_write_waits / l3_write_wait_s) or the put is dropped (SRT_TWR_DROP,
 * counted in l3_puts_dropped). Order is kept, so the store's contents are always those of a
 * prefix of the queue and the L3 budget holds in the store at every instant. A put the store
 * refuses is removed again and forgotten (the page is a miss later, never served wrong).
 * write_sync = 1 runs every write inline instead (the old behaviour, for comparisons).
 *
 * L3 accounting across runs: srt_tmgr_destroy saves the L3 index (the pages this manager
 * accounts in L3, in LRU order) as a few objects of the store itself, under keys derived from the
 * scope; srt_tmgr_create reads them back (and evicts down to a smaller budget), so the L3 budget
 * bounds the store across runs and restarts, also in synthetic mode where the store itself has no
 * byte bound. Processes sharing one store at once each save their own view (the last one wins).
 *
 * L3 faults: a store call that fails with SRT_EIO marks L3 down (logged once); while down the
 * manager runs without L3 (misses, no writes) and tries again after l3_retry_ms; the first call
 * that succeeds logs that L3 is back. Puts that are not stored (failed, skipped while L3 is
 * down, dropped) are logged: the first at once with its reason, then a summary every
 * l3_report_ms while it lasts and at every srt_tmgr_flush (so an L3 that never recovers is
 * reported at shutdown), and one line when puts succeed again.
 *
 * Thread safety: one manager and its requests are used from one thread (the scheduler thread,
 * the same one that uses the radix cache). The manager's prefetch thread only touches L3, the
 * write queue (read only) and the L1 pages of requests it is loading; the writer thread only
 * touches the write queue and the L3 store.
 *
 * Shutdown: call srt_tmgr_flush (graceful shutdown: every queued L3 write reaches the store, and
 * lost puts are reported), then free the requests, destroy the radix cache and the manager.
 * srt_tmgr_destroy flushes as well.
 */
#ifndef SRT_TIER_MANAGER_H
#define SRT_TIER_MANAGER_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/plugin.h>
#include <shadowrt/pool.h>
#include <shadowrt/tier.h>

#include "radix/radix.h"
#include "tier/key.h"
#include "tier/writer.h"

/* Same values as enum srt_write_policy of config/runtime_config.h. */
enum srt_tmgr_write {
	SRT_TMGR_WRITE_THROUGH = 0,
	SRT_TMGR_WRITE_AFTER_HITS = 1,
	SRT_TMGR_WRITE_BACK = 2,
};

struct srt_tmgr_config {
	uint32_t page_tokens; /* P; must equal the radix cache's */
	/* The radix cache's pools, in its order (copied; layers not kept). */
	const struct srt_pool_decl *pools;
	uint32_t n_pools;
	struct srt_tier_key_scope scope; /* model fingerprint, layout version, tenant salt */
	int write_policy;                /* enum srt_tmgr_write */
	uint32_t write_after_hits;       /* N for SRT_TMGR_WRITE_AFTER_HITS (0 = 2) */
	int prefetch;                    /* 1: L3 loads in the background thread */
	uint32_t payload_bytes;          /* 0 = real pages; > 0 = synthetic payloads of this size */
	/* TAIL pools: also keep the window before every multiple of this many pages (0 = only at
	 * resume points), so a first-time divergence loses less than a stride */
	uint32_t tail_stride;
	/* L2 page arena (vt/inst NULL = no L2), borrowed. */
	const struct srt_tier_vtable *l2_vt;
	void *l2_inst;
	uint64_t l2_budget; /* bytes; required when L2 is set */
	/* L3 keyed store (vt/inst NULL = no L3), borrowed. */
	const struct srt_tier_vtable *l3_vt;
	void *l3_inst;
	const char *l3_name;  /* for logs, e.g. "file" */
	uint64_t l3_budget;   /* bytes; UINT64_MAX = unbounded */
	uint32_t l3_retry_ms; /* after an L3 failure (0 = 1000) */
	uint32_t l3_report_ms; /* summary of lost L3 puts while they go on (0 = 60000) */
	/* L3 writer (writer.h) */
	int write_sync;             /* 1: every L3 write inline on the request path */
	uint64_t write_queue_bytes; /* queued payload bytes at most (0 = 64 MiB) */
	uint32_t write_batch;       /* puts per store call at most (0 = 1024) */
	int write_full;             /* enum srt_twr_full: SRT_TWR_WAIT (0) or SRT_TWR_DROP (1) */
	const struct srt_host *host; /* logging; borrowed */
};

struct srt_tmgr;
struct srt_tmgr_req;

/*
 * Create a manager. Refuses (SRT_EINVAL, with a message) a missing keyed method on L3, a
 * missing arena method on L2, an L2 without a budget, P not a multiple of a pool ratio.
 * Returns 0 and *out, SRT_ENOMEM or SRT_EIO (thread start).
 */
int srt_tmgr_create(const struct srt_tmgr_config *cfg, struct srt_tmgr **out, char *err,
		    size_t errlen);
/*
 * The hooks to give the radix cache (srt_rdx_config.hooks) and then the cache itself. The cache
 * must be created with these hooks and attached before any request; it must be destroyed
 * before the manager (its destroy frees pages without hooks, which is fine).
 */
const struct srt_rdx_hooks *srt_tmgr_hooks(struct srt_tmgr *m);
void srt_tmgr_attach(struct srt_tmgr *m, struct srt_rdx_cache *c);
/* Wait for the prefetch thread, free L2 pages and every index. Requests must be freed. */
void srt_tmgr_destroy(struct srt_tmgr *m);

/*
 * Wait until every L3 write queued so far has reached the store (or failed), forget the pages
 * whose puts failed, and log the puts lost since the last report (an L3 that never came back
 * is reported here). The `serve` command calls it on graceful shutdown, before freeing the
 * requests and destroying the cache; it may be called at any time from the manager's thread.
 * Returns the number of L3 puts lost since the manager was created (0 without L3).
 */
uint64_t srt_tmgr_flush(struct srt_tmgr *m);

/* Hold / release the L3 writer before its next batch (tests); srt_tmgr_flush waits while held. */
void srt_tmgr_hold_writes(struct srt_tmgr *m, int hold);
/* The L3 writer's counters; thread safe (any thread may poll them). Zeros without L3. */
void srt_tmgr_write_stats(struct srt_tmgr *m, struct srt_twr_stats *out);

/* Hold / release the prefetch thread before it starts the next load (tests, maintenance). */
void srt_tmgr_hold_prefetch(struct srt_tmgr *m, int hold);

struct srt_tmgr_hit {
	uint64_t l1_tokens; /* prefix served by L1 */
	uint64_t l2_tokens; /* following pages restored from L2 (no page of them from L3) */
	uint64_t l3_tokens; /* following pages of which at least one pool's page came from L3 */
	/* with srt_tmgr_set_remat: the hit end whose TAIL pages must be rebuilt by window
	 * rematerialization (0 = none), its cost in token-layers, and the ordinary hit (the
	 * match rule with TAIL pages) the request would have had */
	uint64_t remat_tokens, remat_cost, strict_tokens;
};

/*
 * Window rematerialization (core/radix/remat.h), pol borrowed until destroy, NULL = off. On, a
 * start may end its hit where only the ALL pools are cached (in L1, or L1 + L2 + L3), when
 * pol's cost is lower than computing from the ordinary hit (the match rule with TAIL pages).
 * The caller then rebuilds the TAIL pages before hit->remat_tokens (pending pages of the radix
 * request, or its private pages) and calls srt_rdx_req_remat_done (a no-op when none is
 * pending). keep_tail = 1: TAIL pages are still stored in L2/L3 at resume points (a next turn
 * resuming a few pages later computes them instead of paying a whole trapezoid); 0: never
 * (every lower-tier hit is rematerialized). Set before any request.
 */
void srt_tmgr_set_remat(struct srt_tmgr *m, const struct srt_rdx_remat_policy *pol,
			int keep_tail);

/*
 * Start a request on tokens[0..n): srt_rdx_req_start, then the lower-tier lookup above.
 * *hit says where the hit comes from (tokens may move to a miss at srt_tmgr_req_wait if a
 * load fails). The request is ready when srt_tmgr_req_ready says so; call srt_tmgr_req_wait
 * before computing or reading its pages. Errors as srt_rdx_req_start.
 */
int srt_tmgr_req_start(struct srt_tmgr *m, const int32_t *tokens, uint64_t n,
		       struct srt_tmgr_req **out, struct srt_tmgr_hit *hit, char *err,
		       size_t errlen);
/* 1 when every page of the hit is in L1 and committed (nothing loading), else 0. */
int srt_tmgr_req_ready(const struct srt_tmgr_req *r);
/*
 * Wait for the request's loads, verify them and commit them to the tree. If a page failed,
 * the request looks the lower tiers up again and waits for the longest prefix still held (if
 * that fails as well it restarts at its L1 hit); *hit is updated. Returns 0 or
 * a radix error (SRT_ENOMEM when restarting could not lock, with a message).
 */
int srt_tmgr_req_wait(struct srt_tmgr_req *r, struct srt_tmgr_hit *hit, char *err,
		      size_t errlen);
/* The radix request, for extend / release_window / page tables (after srt_tmgr_req_wait). */
struct srt_rdx_req *srt_tmgr_req_rdx(struct srt_tmgr_req *r);
/* srt_rdx_req_commit / _finish plus key bookkeeping and the write policy. */
int srt_tmgr_req_commit(struct srt_tmgr_req *r, uint64_t *cached_tokens, char *err,
			size_t errlen);
int srt_tmgr_req_finish(struct srt_tmgr_req *r, uint64_t *cached_tokens, char *err,
			size_t errlen);
/* Abort (waits for a load in flight first). */
int srt_tmgr_req_abort(struct srt_tmgr_req *r, char *err, size_t errlen);
/* Free (aborts first if still running; waits for a load in flight). NULL is ok. */
void srt_tmgr_req_free(struct srt_tmgr_req *r);

struct srt_tmgr_stats {
	uint64_t hit_tokens[3];   /* by tier L1, L2, L3 (after failed loads were taken back) */
	uint64_t pages_l1_to_l2, pages_l1_to_l3, pages_l2_to_l3; /* demotions and eager copies */
	uint64_t pages_l2_to_l1, pages_l3_to_l1;                 /* promotions */
	uint64_t bytes_l1_to_l2, bytes_l1_to_l3, bytes_l2_to_l3; /* page bytes */
	uint64_t bytes_l2_to_l1, bytes_l3_to_l1;
	uint64_t l2_bytes, l2_peak, l2_budget, l2_pages, l2_evicted;
	uint64_t l3_bytes, l3_peak, l3_budget, l3_objects, l3_evicted;
	uint64_t loads_failed;     /* tier hits that failed to load at wait */
	uint64_t loads_retried;    /* of which looked up again: the longest prefix still held */
	uint64_t loads_shared;     /* requests that waited for another request's load of the same
				    * pages instead of loading them again */
	uint64_t pages_verified;   /* loaded payloads checked byte for byte (synthetic mode) */
	uint64_t l3_rejected;      /* corrupt / foreign objects seen (removed, not served) */
	uint64_t l3_outages;       /* times L3 went down */
	uint64_t l3_skipped;       /* L3 operations skipped while it was down */
	uint64_t skipped_tail_pages; /* TAIL pages dropped without a copy (no resume point) */
	/* L3 writer (writer.h) */
	uint64_t l3_puts_queued;   /* puts accepted by the writer */
	uint64_t l3_puts_written;  /* puts the store accepted */
	uint64_t l3_puts_lost;     /* failed, skipped while L3 was down, dropped */
	uint64_t l3_puts_dropped;  /* of which dropped on a full queue (SRT_TWR_DROP) */
	uint64_t l3_write_batches; /* store put calls */
	uint64_t l3_write_waits;   /* times the request path waited for queue space */
	double l3_write_wait_s;    /* and for how long in all */
	uint64_t l3_queue_peak;    /* bytes queued at most */
	uint64_t l3_queue_reads;   /* loads served from queued puts */
	uint64_t l3_queued_now;    /* operations not yet in the store */
};
void srt_tmgr_stats(const struct srt_tmgr *m, struct srt_tmgr_stats *out);

/* 0 when L2 and L3 byte counts are within budget and L2's index matches its byte count. */
int srt_tmgr_check(const struct srt_tmgr *m, char *err, size_t errlen);

/*
 * The L2/L3 key of page `page` (tokens [page * P, (page + 1) * P)) of pool `pool` for a prefix
 * whose tokens are tokens[0 .. (page + 1) * P): which object holds that page (tools, tests).
 * 0, SRT_EINVAL (no such pool) or SRT_ENOMEM.
 */
int srt_tmgr_page_key(const struct srt_tmgr *m, uint32_t pool, const int32_t *tokens,
		      uint64_t page, struct srt_key *out);

/* The synthetic payload of a page: n bytes derived from its key. */
void srt_tmgr_synth_payload(const struct srt_key *key, void *buf, size_t n);

/*
 * Model fingerprint for srt_tier_key_scope.model_fp: SHA-256 over `ident` (what names the
 * weights and the KV dtypes, e.g. "deepseek-v4-flash kv=fp8 index=fp4 weights=<hash>"), the
 * page size and every pool declaration (name, ratio, retention, tail, entry bytes, layers).
 */
void srt_tmgr_fingerprint(const char *ident, uint32_t page_tokens,
			  const struct srt_pool_decl *pools, uint32_t n_pools, uint8_t out[32]);

#endif
