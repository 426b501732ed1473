/*
 * ShadowRadix: the prefix cache over virtual token pages and the pools plugins declare.
 *
 * Model. Tokens of a sequence sit on virtual pages of P tokens (page_tokens, default 256).
 * The cache is built from pool declarations (abi/shadowrt/pool.h): every pool has a ratio r
 * (tokens per entry, P must be a multiple of it; SRT_RATIO_PAGE means P) and a retention,
 * ALL or TAIL w. A physical page of a pool holds P/r entries for each of its layers:
 *     page_bytes = n_layers * (P / r) * entry_bytes.
 * For every cached virtual page and every pool the cache keeps a location record (the
 * "shadow map"): which tier holds the page and where. Pages are allocated and freed per pool,
 * independently, through an allocator interface.
 *
 * The radix tree matches token ids at page granularity: an edge holds whole pages. A hit may end
 * at page boundary t only where every ALL pool holds the pages of [0, t) and every TAIL w pool
 * holds the pages covering [t - w, t) (ceil(w / P) pages before t; for a ratio-P TAIL-1 pool,
 * the page just before t). The hit is the longest such t.
 *
 * Locks, as SGLang's full_lock_ref / swa_lock_ref: an ALL-class lock pins a node and its path
 * to the root (nothing on it is freed); a TAIL-class lock pins the TAIL-pool pages of the last
 * K = ceil(max_w / P) pages before the lock point. Eviction, per pool, under a byte budget per
 * pool, least recently used first:
 *   - an ALL pool over budget deletes unlocked leaves (all their pools' pages);
 *   - a TAIL pool over budget drops that pool's pages of the LRU node without TAIL lock
 *     ("tombstone": its ALL pages stay matchable); an unlocked leaf is deleted instead, since
 *     no hit can end inside a leaf without its TAIL pages.
 *
 * Requests (srt_rdx_req_*) are what the executor uses: start = match + lock; extend allocates
 * pages as tokens arrive; commit inserts the whole pages computed so far into the tree (call it
 * after each prefill chunk: committed pages are shared and protected by the tree, so window
 * release leaves them alone); release_window frees the request's private TAIL-pool pages that
 * left every window; finish inserts and unlocks; abort frees and unlocks.
 *
 * Errors: functions that can fail return 0 or a negative SRT_E* code (abi/shadowrt/plugin.h)
 * and write a one-line message into err[errlen] (err may be NULL). SRT_ENOMEM from an
 * allocation means the pool's budget is held by locked pages of running requests: the caller
 * queues or aborts a request; the cache never exceeds a budget. Misuse that can be detected
 * (unlock without lock, extend after finish, ...) is SRT_EINVAL, not a crash.
 *
 * Thread safety: none inside. A cache and its requests are used from one thread at a time (the
 * scheduler thread); the caller serialises. Page tables handed to kernels stay valid until the
 * next call on the cache that can allocate, evict, commit or finish.
 */
#ifndef SRT_RADIX_RADIX_H
#define SRT_RADIX_RADIX_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/plugin.h>
#include <shadowrt/pool.h>

#define SRT_RDX_DEFAULT_PAGE 256u
#define SRT_RDX_MAX_POOLS 64u
#define SRT_RDX_UNBOUNDED UINT64_MAX

/* Where a page of one pool lives. ABSENT: never computed, released or tombstoned. */
enum srt_rdx_tier {
	SRT_RDX_ABSENT = 0,
	SRT_RDX_L1 = 1,      /* where kernels read; addr is the page */
	SRT_RDX_L2 = 2,      /* host copy (tier manager); addr is the tier's handle */
	SRT_RDX_L3 = 3,      /* persistent store; key from the prefix hash chain */
	SRT_RDX_LOADING = 4, /* being copied into L1; not readable yet */
};

/* The shadow-map record of one (virtual page, pool). A page counts as present for the match
 * rule in any tier but ABSENT; kernels get addr only for L1. */
struct srt_rdx_loc {
	void *addr;
	uint32_t tier; /* enum srt_rdx_tier */
	uint32_t aux;  /* free for the tier manager (slot, flags) */
};

/*
 * Physical page allocator (L1). alloc returns 0 and a page of `bytes` (all pages of one pool
 * have one size) or SRT_ENOMEM; free gets back the same size. Called from the cache's thread.
 * The tier manager backs this with the `host` tier plugin; the defaults are below.
 */
struct srt_rdx_allocator {
	void *ctx;
	int (*alloc)(void *ctx, uint32_t pool, size_t bytes, void **page);
	void (*free)(void *ctx, uint32_t pool, void *page, size_t bytes);
};
/* 64-byte aligned malloc. */
extern const struct srt_rdx_allocator srt_rdx_malloc_allocator;
/* Accounting only: hands out distinct non-NULL addresses that must never be dereferenced
 * (cache-only replay of traces, geometry reports). */
extern const struct srt_rdx_allocator srt_rdx_null_allocator;

enum srt_rdx_drop { SRT_RDX_DROP_TOMBSTONE = 0, SRT_RDX_DROP_DELETE = 1 };

/*
 * Hooks for the tier manager. on_drop is called for every L1 page of a TREE node just before
 * the cache frees it (eviction or tombstone; not for a request's private pages), with the bytes
 * still readable: the place to write a page back to L2/L3. `tokens` are the P token ids of the
 * page (borrowed for the call), vpage its virtual page number (position / P). May be NULL.
 */
struct srt_rdx_hooks {
	void *ctx;
	void (*on_drop)(void *ctx, uint32_t pool, uint64_t vpage, const int32_t *tokens,
			const struct srt_rdx_loc *loc, size_t bytes, int why /* srt_rdx_drop */);
};

struct srt_rdx_config {
	uint32_t page_tokens;                  /* P; 0 = SRT_RDX_DEFAULT_PAGE */
	const uint64_t *budgets;               /* [n_pools] L1 bytes per pool; NULL = unbounded */
	const struct srt_rdx_allocator *alloc; /* NULL = srt_rdx_malloc_allocator; borrowed */
	const struct srt_rdx_hooks *hooks;     /* NULL = none; borrowed */
	uint32_t mem;                          /* enum srt_mem of the pages, for page tables */
	/* 1: the caller rematerializes windows (srt_rdx_req_start_remat): TAIL pools over budget
	 * only tombstone, never delete a leaf, and a leaf without TAIL pages is kept (its ALL
	 * pages still give rematerialized hits) */
	int remat;
};

struct srt_rdx_cache;
struct srt_rdx_node;
struct srt_rdx_req;

/*
 * Make a cache for pools[0..n_pools) (the concatenated declarations of every attention plugin,
 * in the order page tables will be indexed; copied, `layers` is not kept). Refuses, with a
 * message naming the pool, a page size that is not a multiple of a ratio, a ratio above P,
 * zero entry bytes or layers, a TAIL pool with w == 0, an unknown retention, duplicate names.
 * Returns 0 and *out (free with srt_rdx_cache_destroy), SRT_EINVAL or SRT_ENOMEM.
 */
int srt_rdx_cache_create(const struct srt_rdx_config *cfg, const struct srt_pool_decl *pools,
			 uint32_t n_pools, struct srt_rdx_cache **out, char *err, size_t errlen);

/* Free the tree and every page. Live requests are aborted and freed first. NULL is ok. */
void srt_rdx_cache_destroy(struct srt_rdx_cache *c);

uint32_t srt_rdx_page_tokens(const struct srt_rdx_cache *c);
uint32_t srt_rdx_pool_count(const struct srt_rdx_cache *c);
/* Index of the pool called name, or -1. */
int srt_rdx_pool_find(const struct srt_rdx_cache *c, const char *name);

struct srt_rdx_pool_stats {
	const char *name;      /* borrowed from the cache */
	uint32_t ratio;        /* resolved (SRT_RATIO_PAGE -> P) */
	uint32_t retention;    /* enum srt_retention */
	uint32_t tail_tokens;  /* w */
	uint32_t tail_pages;   /* ceil(w / P) for TAIL, 0 for ALL */
	uint32_t n_layers;
	uint64_t entry_bytes;
	uint64_t page_bytes;
	uint64_t budget;       /* SRT_RDX_UNBOUNDED when none */
	uint64_t bytes;        /* L1 bytes allocated now (tree + private) */
	uint64_t peak_bytes;
	uint64_t pages;        /* L1 pages allocated now */
	uint64_t evicted_pages;    /* tree pages freed by eviction (tombstone or delete) */
	uint64_t tombstoned_pages; /* of which by tombstoning */
	uint64_t released_pages;   /* private pages freed by release_window */
};
void srt_rdx_pool_stats(const struct srt_rdx_cache *c, uint32_t pool,
			struct srt_rdx_pool_stats *out);

struct srt_rdx_stats {
	uint64_t nodes;        /* tree nodes, root excluded */
	uint64_t tree_pages;   /* virtual pages held by the tree */
	uint64_t live_requests;
	uint64_t meta_bytes;   /* heap bytes of the tree's own bookkeeping (ids, records, nodes) */
};
void srt_rdx_stats(const struct srt_rdx_cache *c, struct srt_rdx_stats *out);

/*
 * Check every invariant: each pool's byte count equals its allocated pages (tree and private),
 * no budget exceeded, lock counts equal the sum of what live requests (and srt_rdx_lock
 * callers) hold, LRU lists and hash index agree with the tree. 0 or SRT_ECORRUPT with the first
 * violation in err. O(size of the cache): for tests and debugging.
 */
int srt_rdx_cache_check(const struct srt_rdx_cache *c, char *err, size_t errlen);

/* --- tree level (tests, tier manager) --------------------------------------------------- */

struct srt_rdx_match {
	uint64_t hit_tokens;        /* longest usable prefix, a multiple of P */
	uint64_t matched_tokens;    /* pages whose ids are in the tree (>= hit_tokens) */
	struct srt_rdx_node *node;  /* node ending exactly at hit_tokens (the root when 0) */
	/* longest t at which every ALL pool holds [0, t) in L1, whatever the TAIL pools hold
	 * (>= hit_tokens, <= matched_tokens): a resume there needs its TAIL pages rebuilt by
	 * window rematerialization (remat.h) */
	uint64_t all_tokens;
};

/*
 * Match tokens[0..n) (whole pages only) against the tree under the match rule. When the hit
 * ends inside a node, the node is split there so m->node ends exactly at the hit. Touches the
 * LRU order of the hit path. Returns 0 (a miss is a hit of 0).
 */
int srt_rdx_match(struct srt_rdx_cache *c, const int32_t *tokens, uint64_t n,
		  struct srt_rdx_match *m);

enum srt_rdx_lock_class { SRT_RDX_LOCK_ALL = 0, SRT_RDX_LOCK_TAIL = 1 };
/*
 * Lock / unlock node (as returned in srt_rdx_match.node) for one retention class. ALL: the path
 * root..node. TAIL: the TAIL-pool pages of the last K pages before the node's end. Unlocking
 * what is not locked is SRT_EINVAL and changes nothing. Locking the root is a no-op.
 */
int srt_rdx_lock(struct srt_rdx_cache *c, struct srt_rdx_node *node, int cls, char *err,
		 size_t errlen);
int srt_rdx_unlock(struct srt_rdx_cache *c, struct srt_rdx_node *node, int cls, char *err,
		   size_t errlen);

/*
 * Evict from pool until its L1 bytes are <= target_bytes (or nothing evictable remains).
 * *freed (may be NULL) gets the pool's bytes freed. Returns 0, or SRT_ENOMEM when the target
 * could not be reached.
 */
int srt_rdx_evict(struct srt_rdx_cache *c, uint32_t pool, uint64_t target_bytes,
		  uint64_t *freed);

/* --- requests (the executor's API) -------------------------------------------------------- */

/*
 * Start a request whose prompt begins with tokens[0..n) (copied as far as the hit): match,
 * lock the hit (both classes) and return the request positioned at *hit_tokens; the caller
 * then extends it with the prompt tokens from *hit_tokens on. Pass n - 1 to leave one token to
 * compute when the last logits are needed. Returns 0, or SRT_ENOMEM.
 */
int srt_rdx_req_start(struct srt_rdx_cache *c, const int32_t *tokens, uint64_t n,
		      struct srt_rdx_req **out, uint64_t *hit_tokens, char *err, size_t errlen);

/*
 * Rematerialization policy for srt_rdx_req_start_remat: cost(ctx, t) is the token-layers of
 * rebuilding the TAIL pages before page boundary t (srt_remat_cost), token_cost the
 * token-layers of computing one token (the model's layer count).
 */
struct srt_rdx_remat_policy {
	uint64_t (*cost)(void *ctx, uint64_t t);
	void *ctx;
	uint64_t token_cost;
};

/*
 * srt_rdx_req_start with the match rule "every ALL pool holds [0, t)" as well: when the
 * longest such t (srt_rdx_match.all_tokens) lies past the ordinary hit h and
 * cost(t) < (t - h) * token_cost, the request is positioned at t instead (*hit_tokens = t,
 * *remat_tokens = t; else *remat_tokens = 0). Its path is locked as for a hit, and it holds
 * freshly allocated pages of every TAIL pool for the pages of that pool's window before t
 * ("pending" pages; page tables show them in place of the tree's absent ones). The caller
 * must rebuild them (the executor's rematerialization) and then call
 * srt_rdx_req_remat_done before anything else on the request. If the pending pages cannot be
 * allocated, the request falls back to the ordinary hit. pol NULL = srt_rdx_req_start.
 */
int srt_rdx_req_start_remat(struct srt_rdx_cache *c, const int32_t *tokens, uint64_t n,
			    const struct srt_rdx_remat_policy *pol, struct srt_rdx_req **out,
			    uint64_t *hit_tokens, uint64_t *remat_tokens, char *err,
			    size_t errlen);

/*
 * End a rematerialization. ok = 1: the pending pages hold the rebuilt bytes; they move into
 * the tree where its page is absent (so later requests hit them), the rest is freed. ok = 0:
 * they are freed (the request should then be aborted: its TAIL pages are missing). No-op
 * without pending pages.
 */
void srt_rdx_req_remat_done(struct srt_rdx_req *r, int ok);
/* Position whose TAIL pages are pending (0 = none). */
uint64_t srt_rdx_req_remat_pending(const struct srt_rdx_req *r);
/*
 * Free, without hooks, the TAIL-pool pages of the window before the request's tree end (the
 * pages a rematerialization rebuilds) wherever they are L1 tree pages: the caller failed to
 * rebuild pages that a tier load had placed there (never serve them). The request should then
 * be aborted.
 */
void srt_rdx_req_drop_tail(struct srt_rdx_req *r);
/* The hit the ordinary match rule gave at start (<= the request's hit). */
uint64_t srt_rdx_req_strict_hit(const struct srt_rdx_req *r);

/*
 * Append tokens[0..n) and allocate, in every pool, the pages that cover them (a partial last
 * page included), evicting per pool as budgets require. All or nothing: on SRT_ENOMEM the
 * request is as before. SRT_EINVAL after finish/abort.
 */
int srt_rdx_req_extend(struct srt_rdx_req *r, const int32_t *tokens, uint64_t n, char *err,
		       size_t errlen);

/*
 * Free the request's private pages of TAIL w pools that lie wholly before len - w, and drop the
 * request's TAIL lock on the tree once the locked pages left every window. *released (may be
 * NULL) gets the number of pages freed. SRT_EINVAL after finish/abort.
 */
int srt_rdx_req_release_window(struct srt_rdx_req *r, uint64_t *released, char *err,
			       size_t errlen);

/*
 * Insert the request's whole pages so far into the tree; they become shared and stay locked
 * by the request. Pages the tree already holds are kept and the request's copies freed; tree
 * pages a TAIL pool had dropped are filled from the request's. *cached_tokens (may be NULL)
 * gets the length of the prefix that was in the tree before the call.
 */
int srt_rdx_req_commit(struct srt_rdx_req *r, uint64_t *cached_tokens, char *err,
		       size_t errlen);

/* Commit, free the partial last page, unlock. The handle stays for srt_rdx_req_free. */
int srt_rdx_req_finish(struct srt_rdx_req *r, uint64_t *cached_tokens, char *err,
		       size_t errlen);
/* Free every private page, unlock. SRT_EINVAL if already finished/aborted. */
int srt_rdx_req_abort(struct srt_rdx_req *r, char *err, size_t errlen);
/* Free the handle (aborts first if still running). NULL is ok. */
void srt_rdx_req_free(struct srt_rdx_req *r);

uint64_t srt_rdx_req_len(const struct srt_rdx_req *r);        /* tokens so far */
uint64_t srt_rdx_req_tree_tokens(const struct srt_rdx_req *r); /* in the tree, locked */
/* The request's token ids [0, len) (borrowed, valid until the next extend/free). */
const int32_t *srt_rdx_req_tokens(const struct srt_rdx_req *r);

/*
 * Fill buf[0..n) with the request's pages of `pool`, n = ceil(len / P): the L1 page, or NULL
 * where absent / not in L1. *out points at buf. SRT_EINVAL when cap < n.
 */
int srt_rdx_req_page_table(const struct srt_rdx_req *r, uint32_t pool, void **buf,
			   uint32_t cap, struct srt_page_table *out);

#endif /* SRT_RADIX_RADIX_H */
