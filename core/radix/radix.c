/* ShadowRadix: tree, shadow maps, per-pool LRU eviction and the request lifecycle. */
#include "radix/radix.h"
#include "radix/rx_util.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lru_link {
	struct srt_rdx_node *prev, *next;
};

struct srt_rdx_node {
	struct srt_rdx_node *parent;
	struct srt_rdx_node *hnext;                /* hash-index chain */
	struct srt_rdx_node *child, *sib_prev, *sib_next;
	uint64_t hkey;                             /* hash of (parent, first page ids) */
	uint64_t start_page;                       /* pages from the root to this node's start */
	uint32_t n_pages, cap_pages;
	uint32_t all_lock;                         /* ALL-class lock count */
	uint64_t tail_lock_sum;                    /* sum of tail_lock[] */
	int32_t *tokens;                           /* [cap_pages * P] */
	uint32_t *tail_lock;                       /* [cap_pages] TAIL-class lock per page */
	struct srt_rdx_loc *loc;                   /* [cap_pages][n_pools] */
	/*
	 * Followed by 2 * n_pools counts. Lists and counts are indexed by L: L = p for the L1
	 * pages of pool p; L = n_pools + p for the "interior" L1 pages of TAIL pool p, those
	 * not among the node's last tail_pages pages (no hit ending at the node's end needs
	 * them, so they are dropped first).
	 */
	struct lru_link lru[];
};

struct rdx_pool {
	char name[SRT_POOL_NAME_MAX];
	uint32_t ratio, retention, tail_tokens, tail_pages, n_layers;
	uint64_t entry_bytes, page_bytes, budget;
	uint64_t bytes, peak, pages, evicted, tombstoned, released;
};

enum { REQ_RUNNING = 0, REQ_FINISHED = 1, REQ_ABORTED = 2 };

struct srt_rdx_req {
	struct srt_rdx_cache *c;
	struct srt_rdx_req *prev, *next;
	int state;
	int tail_locked;
	int32_t *tokens;
	uint64_t len, cap;
	uint64_t tree_pages;       /* pages [0, tree_pages) are tree pages locked by this request */
	struct srt_rdx_node *node; /* node ending at tree_pages (root when 0) */
	struct srt_rdx_loc *priv;  /* [priv_cap][n_pools], page v at (v - tree_pages) */
	uint64_t priv_pages, priv_cap;
	uint64_t *rel;             /* [n_pools] release watermark (virtual page) */
	/* rematerialization: TAIL-pool pages being rebuilt for pages [remat/P - K, remat/P),
	 * [K][n_pools] (ABSENT for ALL pools and pages outside a pool's window) */
	uint64_t remat;
	struct srt_rdx_loc *rloc;
	uint64_t strict; /* the ordinary hit at start (rule with TAIL pages) */
};

struct srt_rdx_cache {
	uint32_t P, n_pools, mem;
	uint32_t max_tail_pages, max_tail_tokens;
	struct rdx_pool *pools;
	struct lru_link *heads; /* [2 * n_pools]; next = least recently used, prev = newest */
	struct srt_rdx_allocator alloc;
	struct srt_rdx_hooks hooks;
	int has_hooks;
	int remat; /* srt_rdx_config.remat */
	struct srt_rdx_node *root;
	struct srt_rdx_node **buckets;
	uint64_t n_buckets, nodes, tree_pages, meta_bytes;
	struct srt_rdx_req *reqs;
	uint64_t live_reqs;
	int64_t ext_locks; /* locks taken through srt_rdx_lock */
	uint64_t null_next;
};

/* --- allocators --------------------------------------------------------------------------- */

static int malloc_alloc(void *ctx, uint32_t pool, size_t bytes, void **page)
{
	(void)ctx, (void)pool;
	size_t sz = (bytes + 63) & ~(size_t)63;
	*page = aligned_alloc(64, sz ? sz : 64);
	return *page ? 0 : SRT_ENOMEM;
}
static void malloc_free(void *ctx, uint32_t pool, void *page, size_t bytes)
{
	(void)ctx, (void)pool, (void)bytes;
	free(page);
}
const struct srt_rdx_allocator srt_rdx_malloc_allocator = {NULL, malloc_alloc, malloc_free};

static uint64_t null_counter; /* process-wide, atomic: addresses only need to be distinct */
static int null_alloc(void *ctx, uint32_t pool, size_t bytes, void **page)
{
	(void)ctx, (void)pool, (void)bytes;
	*page = (void *)(uintptr_t)(__atomic_add_fetch(&null_counter, 1, __ATOMIC_RELAXED) << 6);
	return 0;
}
static void null_free(void *ctx, uint32_t pool, void *page, size_t bytes)
{
	(void)ctx, (void)pool, (void)page, (void)bytes;
}
const struct srt_rdx_allocator srt_rdx_null_allocator = {NULL, null_alloc, null_free};

/* --- node helpers ------------------------------------------------------------------------- */

static inline uint32_t *node_present(const struct srt_rdx_cache *c, const struct srt_rdx_node *n)
{
	return (uint32_t *)(void *)((char *)(uintptr_t)n + sizeof(*n) +
				    2u * c->n_pools * sizeof(struct lru_link));
}
static inline struct srt_rdx_loc *node_loc(const struct srt_rdx_cache *c,
					   const struct srt_rdx_node *n, uint32_t j)
{
	return n->loc + (size_t)j * c->n_pools;
}
static inline uint64_t node_end(const struct srt_rdx_node *n)
{
	return n->start_page + n->n_pages;
}
static size_t node_size(const struct srt_rdx_cache *c)
{
	return sizeof(struct srt_rdx_node) +
	       2u * c->n_pools * (sizeof(struct lru_link) + sizeof(uint32_t));
}
static size_t page_meta(const struct srt_rdx_cache *c)
{
	return (size_t)c->P * sizeof(int32_t) + sizeof(uint32_t) +
	       c->n_pools * sizeof(struct srt_rdx_loc);
}

static uint64_t page_hash(const int32_t *t, uint32_t P)
{
	uint64_t h = 0x9e3779b97f4a7c15ull;
	for (uint32_t i = 0; i < P; i++) {
		h ^= (uint32_t)t[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	return h;
}
static uint64_t hkey_of(const struct srt_rdx_node *parent, uint64_t ph)
{
	uint64_t k = (uint64_t)(uintptr_t)parent * 0xc4ceb9fe1a85ec53ull ^ ph;
	k ^= k >> 29;
	return k * 0x94d049bb133111ebull;
}

static int node_reserve(struct srt_rdx_cache *c, struct srt_rdx_node *n, uint32_t cap)
{
	if (cap <= n->cap_pages)
		return 0;
	int32_t *t = realloc(n->tokens, (size_t)cap * c->P * sizeof(int32_t));
	if (!t)
		return SRT_ENOMEM;
	n->tokens = t;
	uint32_t *tl = realloc(n->tail_lock, (size_t)cap * sizeof(uint32_t));
	if (!tl)
		return SRT_ENOMEM;
	n->tail_lock = tl;
	struct srt_rdx_loc *l = realloc(n->loc, (size_t)cap * c->n_pools * sizeof(*l));
	if (!l)
		return SRT_ENOMEM;
	n->loc = l;
	c->meta_bytes += (uint64_t)(cap - n->cap_pages) * page_meta(c);
	n->cap_pages = cap;
	return 0;
}

static struct srt_rdx_node *node_new(struct srt_rdx_cache *c, uint32_t cap)
{
	struct srt_rdx_node *n = calloc(1, node_size(c));
	if (!n)
		return NULL;
	c->meta_bytes += node_size(c);
	if (cap && node_reserve(c, n, cap)) {
		free(n->tokens), free(n->tail_lock), free(n->loc);
		c->meta_bytes -= node_size(c);
		free(n);
		return NULL;
	}
	return n;
}

static void node_free_mem(struct srt_rdx_cache *c, struct srt_rdx_node *n)
{
	c->meta_bytes -= node_size(c) + (uint64_t)n->cap_pages * page_meta(c);
	free(n->tokens), free(n->tail_lock), free(n->loc);
	free(n);
}

/* hash index ------------------------------------------------------------------------------- */
static int hash_grow(struct srt_rdx_cache *c)
{
	uint64_t nb = c->n_buckets ? c->n_buckets * 2 : 1024;
	struct srt_rdx_node **b = calloc(nb, sizeof(*b));
	if (!b)
		return SRT_ENOMEM;
	for (uint64_t i = 0; i < c->n_buckets; i++) {
		struct srt_rdx_node *n = c->buckets[i], *nx;
		for (; n; n = nx) {
			nx = n->hnext;
			n->hnext = b[n->hkey & (nb - 1)];
			b[n->hkey & (nb - 1)] = n;
		}
	}
	c->meta_bytes += (nb - c->n_buckets) * sizeof(*b);
	free(c->buckets);
	c->buckets = b;
	c->n_buckets = nb;
	return 0;
}
static void hash_add(struct srt_rdx_cache *c, struct srt_rdx_node *n)
{
	n->hkey = hkey_of(n->parent, page_hash(n->tokens, c->P));
	struct srt_rdx_node **b = &c->buckets[n->hkey & (c->n_buckets - 1)];
	n->hnext = *b;
	*b = n;
}
static void hash_del(struct srt_rdx_cache *c, struct srt_rdx_node *n)
{
	struct srt_rdx_node **p = &c->buckets[n->hkey & (c->n_buckets - 1)];
	while (*p != n) {
		assert(*p);
		p = &(*p)->hnext;
	}
	*p = n->hnext;
}
static struct srt_rdx_node *child_find(const struct srt_rdx_cache *c,
				       const struct srt_rdx_node *parent, const int32_t *page)
{
	uint64_t k = hkey_of(parent, page_hash(page, c->P));
	for (struct srt_rdx_node *n = c->buckets[k & (c->n_buckets - 1)]; n; n = n->hnext)
		if (n->hkey == k && n->parent == parent &&
		    !memcmp(n->tokens, page, c->P * sizeof(int32_t)))
			return n;
	return NULL;
}

/* children lists --------------------------------------------------------------------------- */
static void child_link(struct srt_rdx_node *parent, struct srt_rdx_node *n)
{
	n->parent = parent;
	n->sib_prev = NULL;
	n->sib_next = parent->child;
	if (parent->child)
		parent->child->sib_prev = n;
	parent->child = n;
}
static void child_unlink(struct srt_rdx_node *n)
{
	if (n->sib_prev)
		n->sib_prev->sib_next = n->sib_next;
	else
		n->parent->child = n->sib_next;
	if (n->sib_next)
		n->sib_next->sib_prev = n->sib_prev;
	n->sib_prev = n->sib_next = NULL;
}

/* LRU lists, one per pool, of nodes with >= 1 present L1 page in that pool ------------------ */
static void lru_unlink(struct srt_rdx_cache *c, struct srt_rdx_node *n, uint32_t L)
{
	struct lru_link *l = &n->lru[L], *h = &c->heads[L];
	if (l->prev)
		l->prev->lru[L].next = l->next;
	else
		h->next = l->next;
	if (l->next)
		l->next->lru[L].prev = l->prev;
	else
		h->prev = l->prev;
	l->prev = l->next = NULL;
}
static void lru_push_newest(struct srt_rdx_cache *c, struct srt_rdx_node *n, uint32_t L)
{
	struct lru_link *h = &c->heads[L];
	n->lru[L].next = NULL;
	n->lru[L].prev = h->prev;
	if (h->prev)
		h->prev->lru[L].next = n;
	else
		h->next = n;
	h->prev = n;
}
/* Insert n just before `before` (which is in list L). */
static void lru_insert_before(struct srt_rdx_cache *c, struct srt_rdx_node *n,
			      struct srt_rdx_node *before, uint32_t L)
{
	n->lru[L].next = before;
	n->lru[L].prev = before->lru[L].prev;
	if (before->lru[L].prev)
		before->lru[L].prev->lru[L].next = n;
	else
		c->heads[L].next = n;
	before->lru[L].prev = n;
}
static void touch(struct srt_rdx_cache *c, struct srt_rdx_node *n)
{
	uint32_t *cnt = node_present(c, n);
	for (uint32_t L = 0; L < 2 * c->n_pools; L++)
		if (cnt[L]) {
			lru_unlink(c, n, L);
			lru_push_newest(c, n, L);
		}
}

/* Is page j of n an interior page of pool p (see struct srt_rdx_node)? */
static inline int is_interior(const struct srt_rdx_cache *c, const struct srt_rdx_node *n,
			      uint32_t p, uint32_t j)
{
	const struct rdx_pool *pl = &c->pools[p];
	return pl->retention == SRT_RETAIN_TAIL && j + pl->tail_pages < n->n_pages;
}

/*
 * Recount pool p's lists of n from its records and fix list membership; a node that joins a
 * list goes just before `before` (when given and in that list) or to the newest end.
 */
static void recount(struct srt_rdx_cache *c, struct srt_rdx_node *n, uint32_t p,
		    struct srt_rdx_node *before)
{
	uint32_t pres = 0, inter = 0, np = c->n_pools;
	for (uint32_t j = 0; j < n->n_pages; j++)
		if (node_loc(c, n, j)[p].tier == SRT_RDX_L1) {
			pres++;
			inter += is_interior(c, n, p, j);
		}
	uint32_t *cnt = node_present(c, n);
	uint32_t want[2] = {pres, inter}, L[2] = {p, np + p};
	for (int k = 0; k < 2; k++) {
		if (cnt[L[k]] && !want[k])
			lru_unlink(c, n, L[k]);
		else if (!cnt[L[k]] && want[k]) {
			if (before && node_present(c, before)[L[k]])
				lru_insert_before(c, n, before, L[k]);
			else
				lru_push_newest(c, n, L[k]);
		}
		cnt[L[k]] = want[k];
	}
}

/* --- pages ------------------------------------------------------------------------------- */

static void pool_free_page(struct srt_rdx_cache *c, uint32_t p, struct srt_rdx_loc *l)
{
	struct rdx_pool *pl = &c->pools[p];
	assert(l->tier == SRT_RDX_L1);
	c->alloc.free(c->alloc.ctx, p, l->addr, pl->page_bytes);
	pl->bytes -= pl->page_bytes;
	pl->pages--;
	l->addr = NULL;
	l->tier = SRT_RDX_ABSENT;
	l->aux = 0;
}

/* Drop pool p's L1 pages of tree node n (hook first). Returns pages freed. */
static uint64_t node_drop_pool(struct srt_rdx_cache *c, struct srt_rdx_node *n, uint32_t p,
			       int why)
{
	uint64_t k = 0;
	if (!node_present(c, n)[p])
		return 0;
	for (uint32_t j = n->n_pages; j-- > 0;) { /* deepest page first */
		struct srt_rdx_loc *l = &node_loc(c, n, j)[p];
		if (l->tier != SRT_RDX_L1)
			continue;
		if (c->has_hooks && c->hooks.on_drop)
			c->hooks.on_drop(c->hooks.ctx, p, n->start_page + j, n->tokens + (size_t)j * c->P,
					 l, c->pools[p].page_bytes, why);
		pool_free_page(c, p, l);
		k++;
	}
	recount(c, n, p, NULL);
	c->pools[p].evicted += k;
	if (why == SRT_RDX_DROP_TOMBSTONE)
		c->pools[p].tombstoned += k;
	return k;
}

/* Tombstone pool p's unlocked interior L1 pages of n. Returns pages freed. */
static uint64_t node_drop_interior(struct srt_rdx_cache *c, struct srt_rdx_node *n, uint32_t p)
{
	uint64_t k = 0;
	for (uint32_t j = 0; j < n->n_pages; j++) {
		struct srt_rdx_loc *l = &node_loc(c, n, j)[p];
		if (l->tier != SRT_RDX_L1 || !is_interior(c, n, p, j) || n->tail_lock[j])
			continue;
		if (c->has_hooks && c->hooks.on_drop)
			c->hooks.on_drop(c->hooks.ctx, p, n->start_page + j, n->tokens + (size_t)j * c->P,
					 l, c->pools[p].page_bytes, SRT_RDX_DROP_TOMBSTONE);
		pool_free_page(c, p, l);
		k++;
	}
	if (k) {
		recount(c, n, p, NULL);
		c->pools[p].evicted += k;
		c->pools[p].tombstoned += k;
	}
	return k;
}

static int node_is_leaf(const struct srt_rdx_node *n)
{
	return n->child == NULL;
}

static void node_delete(struct srt_rdx_cache *c, struct srt_rdx_node *n)
{
	assert(n != c->root && node_is_leaf(n) && !n->all_lock && !n->tail_lock_sum);
	for (uint32_t p = 0; p < c->n_pools; p++)
		node_drop_pool(c, n, p, SRT_RDX_DROP_DELETE);
	hash_del(c, n);
	child_unlink(n);
	c->nodes--;
	c->tree_pages -= n->n_pages;
	node_free_mem(c, n);
}

/* A leaf no hit can end in: some TAIL pool holds none of its pages. */
static int leaf_is_dead(const struct srt_rdx_cache *c, const struct srt_rdx_node *n)
{
	if (c->remat) /* its ALL pages still give a rematerialized hit */
		return 0;
	for (uint32_t p = 0; p < c->n_pools; p++) {
		if (c->pools[p].retention != SRT_RETAIN_TAIL)
			continue;
		int any = 0;
		for (uint32_t j = 0; j < n->n_pages && !any; j++)
			any = node_loc(c, n, j)[p].tier != SRT_RDX_ABSENT;
		if (!any)
			return 1;
	}
	return 0;
}

static void delete_with_dead_parents(struct srt_rdx_cache *c, struct srt_rdx_node *n)
{
	struct srt_rdx_node *parent = n->parent;
	node_delete(c, n);
	while (parent != c->root && node_is_leaf(parent) && !parent->all_lock &&
	       !parent->tail_lock_sum && leaf_is_dead(c, parent)) {
		struct srt_rdx_node *up = parent->parent;
		node_delete(c, parent);
		parent = up;
	}
}

/* Free some of pool p's L1 bytes, least recently used first. 1 if something was freed. */
static int evict_one(struct srt_rdx_cache *c, uint32_t p)
{
	struct rdx_pool *pl = &c->pools[p];
	if (pl->retention == SRT_RETAIN_TAIL) /* interior pages first: no node-end hit needs them */
		for (struct srt_rdx_node *n = c->heads[c->n_pools + p].next; n;
		     n = n->lru[c->n_pools + p].next)
			if (node_drop_interior(c, n, p))
				return 1;
	for (struct srt_rdx_node *n = c->heads[p].next; n; n = n->lru[p].next) {
		if (n->tail_lock_sum)
			continue;
		int deletable = node_is_leaf(n) && !n->all_lock;
		if (pl->retention == SRT_RETAIN_ALL) {
			if (!deletable)
				continue;
			delete_with_dead_parents(c, n);
			return 1;
		}
		if (deletable && !c->remat)
			delete_with_dead_parents(c, n);
		else
			node_drop_pool(c, n, p, SRT_RDX_DROP_TOMBSTONE);
		return 1;
	}
	return 0;
}

int srt_rdx_evict(struct srt_rdx_cache *c, uint32_t pool, uint64_t target, uint64_t *freed)
{
	assert(pool < c->n_pools);
	uint64_t before = c->pools[pool].bytes;
	while (c->pools[pool].bytes > target && evict_one(c, pool))
		;
	if (freed)
		*freed = before - c->pools[pool].bytes;
	return c->pools[pool].bytes <= target ? 0 : SRT_ENOMEM;
}

static int pool_alloc_page(struct srt_rdx_cache *c, uint32_t p, struct srt_rdx_loc *l, char *err,
			   size_t errlen)
{
	struct rdx_pool *pl = &c->pools[p];
	if (pl->budget != SRT_RDX_UNBOUNDED) {
		if (pl->page_bytes > pl->budget) {
			seterr(err, errlen,
			       "pool '%s': budget of %llu bytes is smaller than one page (%llu bytes): "
			       "no request can run; raise the budget", pl->name,
			       (unsigned long long)pl->budget, (unsigned long long)pl->page_bytes);
			return SRT_ENOMEM;
		}
		if (srt_rdx_evict(c, p, pl->budget - pl->page_bytes, NULL)) {
			seterr(err, errlen,
			       "pool '%s': budget of %llu bytes reached (%llu bytes in use, page %llu "
			       "bytes); the rest is locked by running requests",
			       pl->name, (unsigned long long)pl->budget,
			       (unsigned long long)pl->bytes, (unsigned long long)pl->page_bytes);
			return SRT_ENOMEM;
		}
	}
	void *page = NULL;
	int rc = c->alloc.alloc(c->alloc.ctx, p, pl->page_bytes, &page);
	if (rc || !page) {
		seterr(err, errlen, "pool '%s': page allocator failed for %llu bytes", pl->name,
		       (unsigned long long)pl->page_bytes);
		return rc ? rc : SRT_ENOMEM;
	}
	l->addr = page;
	l->tier = SRT_RDX_L1;
	l->aux = 0;
	pl->bytes += pl->page_bytes;
	pl->pages++;
	if (pl->bytes > pl->peak)
		pl->peak = pl->bytes;
	return 0;
}

/* --- cache ------------------------------------------------------------------------------- */

int srt_rdx_cache_create(const struct srt_rdx_config *cfg, const struct srt_pool_decl *pools,
			 uint32_t n_pools, struct srt_rdx_cache **out, char *err, size_t errlen)
{
	*out = NULL;
	uint32_t P = cfg && cfg->page_tokens ? cfg->page_tokens : SRT_RDX_DEFAULT_PAGE;
	if (n_pools == 0 || n_pools > SRT_RDX_MAX_POOLS) {
		seterr(err, errlen, "cache needs 1..%u pools, got %u", SRT_RDX_MAX_POOLS, n_pools);
		return SRT_EINVAL;
	}
	for (uint32_t i = 0; i < n_pools; i++) {
		const struct srt_pool_decl *d = &pools[i];
		uint32_t r = d->ratio == SRT_RATIO_PAGE ? P : d->ratio;
		if (!d->name[0] || !memchr(d->name, 0, SRT_POOL_NAME_MAX)) {
			seterr(err, errlen, "pool %u: empty or unterminated name", i);
			return SRT_EINVAL;
		}
		for (uint32_t k = 0; k < i; k++)
			if (!strcmp(pools[k].name, d->name)) {
				seterr(err, errlen, "pool '%s' is declared twice (pools %u and %u)",
				       d->name, k, i);
				return SRT_EINVAL;
			}
		if (r > P || P % r) {
			seterr(err, errlen,
			       "pool '%s': page size %u tokens is not a multiple of its ratio %u "
			       "(choose a page size that every pool ratio divides)",
			       d->name, P, r);
			return SRT_EINVAL;
		}
		if (!d->entry_bytes || !d->n_layers) {
			seterr(err, errlen, "pool '%s': entry_bytes %llu and n_layers %u must be > 0",
			       d->name, (unsigned long long)d->entry_bytes, d->n_layers);
			return SRT_EINVAL;
		}
		if (d->retention != SRT_RETAIN_ALL && d->retention != SRT_RETAIN_TAIL) {
			seterr(err, errlen, "pool '%s': unknown retention %u (expected ALL=0 or TAIL=1)",
			       d->name, d->retention);
			return SRT_EINVAL;
		}
		if (d->retention == SRT_RETAIN_TAIL && !d->tail_tokens) {
			seterr(err, errlen, "pool '%s': TAIL retention needs tail_tokens > 0", d->name);
			return SRT_EINVAL;
		}
	}
	struct srt_rdx_cache *c = calloc(1, sizeof(*c));
	if (!c)
		goto nomem;
	c->P = P;
	c->n_pools = n_pools;
	c->mem = cfg ? cfg->mem : SRT_MEM_HOST;
	c->remat = cfg ? cfg->remat : 0;
	c->alloc = cfg && cfg->alloc ? *cfg->alloc : srt_rdx_malloc_allocator;
	if (cfg && cfg->hooks) {
		c->hooks = *cfg->hooks;
		c->has_hooks = 1;
	}
	c->pools = calloc(n_pools, sizeof(*c->pools));
	c->heads = calloc(2u * n_pools, sizeof(*c->heads));
	if (!c->pools || !c->heads)
		goto nomem_c;
	for (uint32_t i = 0; i < n_pools; i++) {
		const struct srt_pool_decl *d = &pools[i];
		struct rdx_pool *pl = &c->pools[i];
		memcpy(pl->name, d->name, SRT_POOL_NAME_MAX);
		pl->ratio = d->ratio == SRT_RATIO_PAGE ? P : d->ratio;
		pl->retention = d->retention;
		pl->tail_tokens = d->retention == SRT_RETAIN_TAIL ? d->tail_tokens : 0;
		pl->tail_pages = d->retention == SRT_RETAIN_TAIL ? (d->tail_tokens + P - 1) / P : 0;
		pl->n_layers = d->n_layers;
		pl->entry_bytes = d->entry_bytes;
		pl->page_bytes = (uint64_t)d->n_layers * (P / pl->ratio) * d->entry_bytes;
		pl->budget = cfg && cfg->budgets ? cfg->budgets[i] : SRT_RDX_UNBOUNDED;
		if (pl->tail_pages > c->max_tail_pages)
			c->max_tail_pages = pl->tail_pages;
		if (pl->tail_tokens > c->max_tail_tokens)
			c->max_tail_tokens = pl->tail_tokens;
	}
	c->root = node_new(c, 0);
	if (!c->root || hash_grow(c))
		goto nomem_c;
	*out = c;
	return 0;
nomem_c:
	srt_rdx_cache_destroy(c);
nomem:
	seterr(err, errlen, "out of memory creating the cache");
	return SRT_ENOMEM;
}

static void free_subtree(struct srt_rdx_cache *c, struct srt_rdx_node *n)
{
	/* iterative post-order: descend to a leaf, free it, repeat */
	while (n) {
		if (n->child) {
			n = n->child;
			continue;
		}
		struct srt_rdx_node *up = n->parent;
		for (uint32_t p = 0; p < c->n_pools; p++)
			for (uint32_t j = 0; j < n->n_pages; j++)
				if (node_loc(c, n, j)[p].tier == SRT_RDX_L1)
					pool_free_page(c, p, &node_loc(c, n, j)[p]);
		if (up)
			child_unlink(n);
		node_free_mem(c, n);
		n = up;
	}
}

void srt_rdx_cache_destroy(struct srt_rdx_cache *c)
{
	if (!c)
		return;
	while (c->reqs)
		srt_rdx_req_free(c->reqs);
	if (c->root)
		free_subtree(c, c->root);
	free(c->buckets);
	free(c->pools);
	free(c->heads);
	free(c);
}

uint32_t srt_rdx_page_tokens(const struct srt_rdx_cache *c)
{
	return c->P;
}
uint32_t srt_rdx_pool_count(const struct srt_rdx_cache *c)
{
	return c->n_pools;
}
int srt_rdx_pool_find(const struct srt_rdx_cache *c, const char *name)
{
	for (uint32_t p = 0; p < c->n_pools; p++)
		if (!strcmp(c->pools[p].name, name))
			return (int)p;
	return -1;
}

void srt_rdx_pool_stats(const struct srt_rdx_cache *c, uint32_t p, struct srt_rdx_pool_stats *o)
{
	assert(p < c->n_pools);
	const struct rdx_pool *pl = &c->pools[p];
	*o = (struct srt_rdx_pool_stats){
		.name = pl->name, .ratio = pl->ratio, .retention = pl->retention,
		.tail_tokens = pl->tail_tokens, .tail_pages = pl->tail_pages,
		.n_layers = pl->n_layers, .entry_bytes = pl->entry_bytes,
		.page_bytes = pl->page_bytes, .budget = pl->budget, .bytes = pl->bytes,
		.peak_bytes = pl->peak, .pages = pl->pages, .evicted_pages = pl->evicted,
		.tombstoned_pages = pl->tombstoned, .released_pages = pl->released,
	};
}

void srt_rdx_stats(const struct srt_rdx_cache *c, struct srt_rdx_stats *o)
{
	o->nodes = c->nodes;
	o->tree_pages = c->tree_pages;
	o->live_requests = c->live_reqs;
	o->meta_bytes = c->meta_bytes + sizeof(*c) + c->n_pools * sizeof(struct rdx_pool);
}

/* --- split, match, locks ------------------------------------------------------------------ */

/* Split n so that its first k pages (0 < k < n_pages) become a new parent. Returns the parent. */
static struct srt_rdx_node *node_split(struct srt_rdx_cache *c, struct srt_rdx_node *n, uint32_t k)
{
	assert(k > 0 && k < n->n_pages);
	if (c->nodes + 1 > c->n_buckets && hash_grow(c))
		return NULL;
	struct srt_rdx_node *u = node_new(c, k);
	if (!u)
		return NULL;
	uint32_t np = c->n_pools, P = c->P;
	memcpy(u->tokens, n->tokens, (size_t)k * P * sizeof(int32_t));
	memcpy(u->tail_lock, n->tail_lock, (size_t)k * sizeof(uint32_t));
	memcpy(u->loc, n->loc, (size_t)k * np * sizeof(struct srt_rdx_loc));
	u->n_pages = k;
	u->start_page = n->start_page;
	u->all_lock = n->all_lock;
	uint32_t rest = n->n_pages - k;
	hash_del(c, n);
	memmove(n->tokens, n->tokens + (size_t)k * P, (size_t)rest * P * sizeof(int32_t));
	memmove(n->tail_lock, n->tail_lock + k, (size_t)rest * sizeof(uint32_t));
	memmove(n->loc, n->loc + (size_t)k * np, (size_t)rest * np * sizeof(struct srt_rdx_loc));
	n->n_pages = rest;
	n->start_page += k;
	u->tail_lock_sum = 0;
	for (uint32_t j = 0; j < k; j++)
		u->tail_lock_sum += u->tail_lock[j];
	n->tail_lock_sum -= u->tail_lock_sum;
	struct srt_rdx_node *parent = n->parent;
	child_unlink(n);
	child_link(parent, u);
	child_link(u, n);
	hash_add(c, u);
	hash_add(c, n);
	c->nodes++;
	for (uint32_t p = 0; p < np; p++) {
		recount(c, u, p, n); /* u takes n's place in every list, just before it */
		recount(c, n, p, NULL);
	}
	return u;
}

struct walk {
	uint64_t hit, matched;
	struct srt_rdx_node *hit_node; /* node containing the hit end (root when 0) */
	uint32_t hit_off;              /* pages of hit_node inside the hit */
	uint64_t all;                  /* ALL pools in L1 over [0, all) (any TAIL pages) */
	struct srt_rdx_node *all_node;
	uint32_t all_off;
};

static void walk_tree(const struct srt_rdx_cache *c, const struct srt_rdx_node *start,
		      uint64_t start_page, const int32_t *tokens, uint64_t nq, struct walk *w)
{
	uint32_t run[SRT_RDX_MAX_POOLS];
	uint32_t np = c->n_pools, P = c->P;
	for (uint32_t p = 0; p < np; p++)
		run[p] = 0;
	w->hit = w->matched = w->all = start_page;
	w->hit_node = w->all_node = (struct srt_rdx_node *)(uintptr_t)start;
	w->hit_off = w->all_off = start->n_pages;
	const struct srt_rdx_node *n = start;
	uint64_t page = start_page;
	int all_ok = 1, all_l1 = 1;
	while (page < nq && all_ok) {
		struct srt_rdx_node *ch = child_find(c, n, tokens + page * P);
		if (!ch)
			break;
		uint32_t j = 0;
		for (; j < ch->n_pages && page < nq; j++) {
			if (j && memcmp(ch->tokens + (size_t)j * P, tokens + page * P, P * sizeof(int32_t)))
				break;
			const struct srt_rdx_loc *l = node_loc(c, ch, j);
			for (uint32_t p = 0; p < np; p++) {
				int present = l[p].tier != SRT_RDX_ABSENT;
				if (c->pools[p].retention == SRT_RETAIN_ALL) {
					all_ok &= present;
					all_l1 &= l[p].tier == SRT_RDX_L1;
				} else
					run[p] = present ? run[p] + 1 : 0;
			}
			page++;
			w->matched = page;
			if (!all_ok)
				break;
			if (all_l1) {
				w->all = page;
				w->all_node = ch;
				w->all_off = j + 1;
			}
			int ok = 1;
			for (uint32_t p = 0; p < np && ok; p++) {
				const struct rdx_pool *pl = &c->pools[p];
				if (pl->retention == SRT_RETAIN_TAIL) {
					uint64_t need = pl->tail_pages < page ? pl->tail_pages : page;
					ok = run[p] >= need;
				}
			}
			if (ok) {
				w->hit = page;
				w->hit_node = ch;
				w->hit_off = j + 1;
			}
		}
		if (j < ch->n_pages)
			break;
		n = ch;
	}
	w->hit *= P;
	w->matched *= P;
	w->all *= P;
	if (w->all < w->hit) { /* the hit's ALL pages are somewhere, not all in L1 */
		w->all = w->hit;
		w->all_node = w->hit_node;
		w->all_off = w->hit_off;
	}
}

static void touch_path(struct srt_rdx_cache *c, struct srt_rdx_node *n)
{
	for (; n != c->root; n = n->parent)
		touch(c, n);
}

/*
 * Match under the match rule; with pol, position the result at all_tokens instead when the
 * rematerialization there costs less than computing from the hit (*remat = 1).
 */
static int match_internal(struct srt_rdx_cache *c, const int32_t *tokens, uint64_t n,
			  const struct srt_rdx_remat_policy *pol, struct srt_rdx_match *m,
			  int *remat, uint64_t *strict)
{
	struct walk w;
	walk_tree(c, c->root, 0, tokens, n / c->P, &w);
	int use_all = pol && pol->cost && w.all > w.hit &&
		      pol->cost(pol->ctx, w.all) < (w.all - w.hit) * pol->token_cost;
	uint64_t end = use_all ? w.all : w.hit;
	struct srt_rdx_node *node = use_all ? w.all_node : w.hit_node;
	uint32_t off = use_all ? w.all_off : w.hit_off;
	if (end && off < node->n_pages) {
		node = node_split(c, node, off);
		if (!node)
			return SRT_ENOMEM;
	}
	m->hit_tokens = end;
	m->matched_tokens = w.matched;
	m->all_tokens = w.all;
	m->node = end ? node : c->root;
	touch_path(c, m->node);
	if (remat)
		*remat = use_all;
	if (strict)
		*strict = w.hit;
	return 0;
}

int srt_rdx_match(struct srt_rdx_cache *c, const int32_t *tokens, uint64_t n,
		  struct srt_rdx_match *m)
{
	return match_internal(c, tokens, n, NULL, m, NULL, NULL);
}

static uint64_t tail_lo(const struct srt_rdx_cache *c, const struct srt_rdx_node *node)
{
	uint64_t e = node_end(node);
	return e > c->max_tail_pages ? e - c->max_tail_pages : 0;
}

/* Add delta (+1 / -1) to the TAIL lock of pages [e - K, e) before node's end. */
static void tail_apply(struct srt_rdx_cache *c, struct srt_rdx_node *node, int delta)
{
	uint64_t lo = tail_lo(c, node);
	for (struct srt_rdx_node *n = node; n != c->root && node_end(n) > lo; n = n->parent)
		for (uint32_t j = 0; j < n->n_pages; j++)
			if (n->start_page + j >= lo) {
				n->tail_lock[j] += (uint32_t)delta;
				n->tail_lock_sum += (uint64_t)(int64_t)delta;
			}
}
static int tail_can_unlock(const struct srt_rdx_cache *c, const struct srt_rdx_node *node)
{
	uint64_t lo = tail_lo(c, node);
	for (const struct srt_rdx_node *n = node; n != c->root && node_end(n) > lo; n = n->parent)
		for (uint32_t j = 0; j < n->n_pages; j++)
			if (n->start_page + j >= lo && !n->tail_lock[j])
				return 0;
	return 1;
}
static void all_apply(struct srt_rdx_cache *c, struct srt_rdx_node *node, int delta)
{
	for (struct srt_rdx_node *n = node; n != c->root; n = n->parent)
		n->all_lock += (uint32_t)delta;
}
static int all_can_unlock(const struct srt_rdx_cache *c, const struct srt_rdx_node *node)
{
	for (const struct srt_rdx_node *n = node; n != c->root; n = n->parent)
		if (!n->all_lock)
			return 0;
	return 1;
}

int srt_rdx_lock(struct srt_rdx_cache *c, struct srt_rdx_node *node, int cls, char *err,
		 size_t errlen)
{
	if (cls != SRT_RDX_LOCK_ALL && cls != SRT_RDX_LOCK_TAIL) {
		seterr(err, errlen, "lock: unknown class %d", cls);
		return SRT_EINVAL;
	}
	if (node == c->root)
		return 0;
	if (cls == SRT_RDX_LOCK_ALL)
		all_apply(c, node, +1);
	else
		tail_apply(c, node, +1);
	c->ext_locks++;
	return 0;
}

int srt_rdx_unlock(struct srt_rdx_cache *c, struct srt_rdx_node *node, int cls, char *err,
		   size_t errlen)
{
	if (cls != SRT_RDX_LOCK_ALL && cls != SRT_RDX_LOCK_TAIL) {
		seterr(err, errlen, "unlock: unknown class %d", cls);
		return SRT_EINVAL;
	}
	if (node == c->root)
		return 0;
	int ok = cls == SRT_RDX_LOCK_ALL ? all_can_unlock(c, node) : tail_can_unlock(c, node);
	if (!ok || c->ext_locks <= 0) {
		seterr(err, errlen, "unlock without lock: %s lock of the node ending at token %llu "
		       "is not held", cls == SRT_RDX_LOCK_ALL ? "ALL" : "TAIL",
		       (unsigned long long)node_end(node) * c->P);
		return SRT_EINVAL;
	}
	if (cls == SRT_RDX_LOCK_ALL)
		all_apply(c, node, -1);
	else
		tail_apply(c, node, -1);
	c->ext_locks--;
	return 0;
}

/* --- requests ------------------------------------------------------------------------------ */

static int req_check_running(const struct srt_rdx_req *r, const char *op, char *err, size_t len)
{
	if (r->state == REQ_RUNNING)
		return 0;
	seterr(err, len, "%s: the request was already %s", op,
	       r->state == REQ_FINISHED ? "finished" : "aborted");
	return SRT_EINVAL;
}

static inline struct srt_rdx_loc *priv_loc(const struct srt_rdx_req *r, uint64_t vpage)
{
	assert(vpage >= r->tree_pages && vpage - r->tree_pages < r->priv_pages);
	return r->priv + (size_t)(vpage - r->tree_pages) * r->c->n_pools;
}

static int tokens_reserve(struct srt_rdx_req *r, uint64_t n)
{
	if (n <= r->cap)
		return 0;
	uint64_t cap = r->cap ? r->cap : 1024;
	while (cap < n)
		cap *= 2;
	int32_t *t = realloc(r->tokens, cap * sizeof(int32_t));
	if (!t)
		return SRT_ENOMEM;
	r->tokens = t;
	r->cap = cap;
	return 0;
}
static int priv_reserve(struct srt_rdx_req *r, uint64_t n)
{
	if (n <= r->priv_cap)
		return 0;
	uint64_t cap = r->priv_cap ? r->priv_cap : 8;
	while (cap < n)
		cap *= 2;
	struct srt_rdx_loc *p = realloc(r->priv, cap * r->c->n_pools * sizeof(*p));
	if (!p)
		return SRT_ENOMEM;
	r->priv = p;
	r->priv_cap = cap;
	return 0;
}

static int req_needs_tail_lock(const struct srt_rdx_req *r)
{
	return r->tree_pages &&
	       r->tree_pages * r->c->P + r->c->max_tail_tokens > r->len;
}

/* The pages of TAIL pool p rebuilt for a remat at page tp: [tp - tail_pages, tp). */
static int remat_covers(const struct srt_rdx_cache *c, uint32_t p, uint64_t tp, uint64_t v)
{
	const struct rdx_pool *pl = &c->pools[p];
	return pl->retention == SRT_RETAIN_TAIL && v < tp && v + pl->tail_pages >= tp;
}

static uint64_t remat_first(const struct srt_rdx_cache *c, uint64_t tp)
{
	return tp > c->max_tail_pages ? tp - c->max_tail_pages : 0;
}

static void remat_free(struct srt_rdx_req *r)
{
	struct srt_rdx_cache *c = r->c;
	if (!r->remat)
		return;
	uint64_t tp = r->remat / c->P, v0 = remat_first(c, tp);
	for (uint64_t v = v0; v < tp; v++)
		for (uint32_t p = 0; p < c->n_pools; p++) {
			struct srt_rdx_loc *l = &r->rloc[(v - v0) * c->n_pools + p];
			if (l->tier == SRT_RDX_L1)
				pool_free_page(c, p, l);
		}
	free(r->rloc);
	r->rloc = NULL;
	r->remat = 0;
}

/* Allocate the pending TAIL pages of a remat at t. 0 or SRT_ENOMEM (nothing kept). */
static int remat_alloc(struct srt_rdx_req *r, uint64_t t, char *err, size_t errlen)
{
	struct srt_rdx_cache *c = r->c;
	uint64_t tp = t / c->P, v0 = remat_first(c, tp);
	r->rloc = calloc((size_t)(tp - v0) * c->n_pools + 1, sizeof(*r->rloc));
	if (!r->rloc) {
		seterr(err, errlen, "out of memory starting a rematerialization");
		return SRT_ENOMEM;
	}
	r->remat = t;
	for (uint64_t v = v0; v < tp; v++)
		for (uint32_t p = 0; p < c->n_pools; p++) {
			if (!remat_covers(c, p, tp, v))
				continue;
			int rc = pool_alloc_page(c, p, &r->rloc[(v - v0) * c->n_pools + p], err,
						 errlen);
			if (rc) {
				remat_free(r);
				return rc;
			}
		}
	return 0;
}

static int req_start(struct srt_rdx_cache *c, const int32_t *tokens, uint64_t n,
		     const struct srt_rdx_remat_policy *pol, struct srt_rdx_req **out,
		     uint64_t *hit_tokens, uint64_t *remat_tokens, char *err, size_t errlen)
{
	*out = NULL;
	if (remat_tokens)
		*remat_tokens = 0;
	struct srt_rdx_req *r = calloc(1, sizeof(*r));
	if (!r)
		goto nomem;
	r->c = c;
	r->rel = calloc(c->n_pools, sizeof(*r->rel));
	if (!r->rel)
		goto nomem_r;
	struct srt_rdx_match m;
	int remat = 0;
	if (match_internal(c, tokens, n, pol, &m, &remat, &r->strict))
		goto nomem_r;
	if (tokens_reserve(r, m.hit_tokens))
		goto nomem_r;
	if (m.hit_tokens)
		memcpy(r->tokens, tokens, m.hit_tokens * sizeof(int32_t));
	r->len = m.hit_tokens;
	r->tree_pages = m.hit_tokens / c->P;
	r->node = m.node;
	if (r->node != c->root) {
		all_apply(c, r->node, +1);
		if (req_needs_tail_lock(r)) {
			tail_apply(c, r->node, +1);
			r->tail_locked = 1;
		}
	}
	r->next = c->reqs;
	if (c->reqs)
		c->reqs->prev = r;
	c->reqs = r;
	c->live_reqs++;
	if (remat && remat_alloc(r, m.hit_tokens, NULL, 0)) {
		/* no room for the pages to rebuild: the ordinary hit */
		srt_rdx_req_free(r);
		return req_start(c, tokens, n, NULL, out, hit_tokens, remat_tokens, err, errlen);
	}
	if (hit_tokens)
		*hit_tokens = m.hit_tokens;
	if (remat_tokens)
		*remat_tokens = r->remat;
	*out = r;
	return 0;
nomem_r:
	free(r->rel);
	free(r->tokens);
	free(r);
nomem:
	seterr(err, errlen, "out of memory starting a request");
	return SRT_ENOMEM;
}

int srt_rdx_req_start(struct srt_rdx_cache *c, const int32_t *tokens, uint64_t n,
		      struct srt_rdx_req **out, uint64_t *hit_tokens, char *err, size_t errlen)
{
	return req_start(c, tokens, n, NULL, out, hit_tokens, NULL, err, errlen);
}

int srt_rdx_req_start_remat(struct srt_rdx_cache *c, const int32_t *tokens, uint64_t n,
			    const struct srt_rdx_remat_policy *pol, struct srt_rdx_req **out,
			    uint64_t *hit_tokens, uint64_t *remat_tokens, char *err,
			    size_t errlen)
{
	return req_start(c, tokens, n, pol, out, hit_tokens, remat_tokens, err, errlen);
}

uint64_t srt_rdx_req_remat_pending(const struct srt_rdx_req *r)
{
	return r->remat;
}

void srt_rdx_req_drop_tail(struct srt_rdx_req *r)
{
	struct srt_rdx_cache *c = r->c;
	uint64_t tp = r->tree_pages, v0 = remat_first(c, tp);
	for (struct srt_rdx_node *n = r->node; n != c->root && node_end(n) > v0; n = n->parent)
		for (uint32_t p = 0; p < c->n_pools; p++) {
			int k = 0;
			for (uint32_t j = 0; j < n->n_pages; j++) {
				struct srt_rdx_loc *l = &node_loc(c, n, j)[p];
				if (remat_covers(c, p, tp, n->start_page + j) && l->tier == SRT_RDX_L1) {
					pool_free_page(c, p, l);
					k = 1;
				}
			}
			if (k)
				recount(c, n, p, NULL);
		}
}

uint64_t srt_rdx_req_strict_hit(const struct srt_rdx_req *r)
{
	return r->strict;
}

void srt_rdx_req_remat_done(struct srt_rdx_req *r, int ok)
{
	struct srt_rdx_cache *c = r->c;
	if (!r->remat)
		return;
	if (ok) {
		uint64_t tp = r->remat / c->P, v0 = remat_first(c, tp);
		for (struct srt_rdx_node *n = r->node; n != c->root && node_end(n) > v0;
		     n = n->parent)
			for (uint32_t j = 0; j < n->n_pages; j++) {
				uint64_t v = n->start_page + j;
				if (v < v0 || v >= tp)
					continue;
				int moved = 0;
				for (uint32_t p = 0; p < c->n_pools; p++) {
					struct srt_rdx_loc *src = &r->rloc[(v - v0) * c->n_pools + p];
					struct srt_rdx_loc *dst = &node_loc(c, n, j)[p];
					if (src->tier != SRT_RDX_L1 || dst->tier != SRT_RDX_ABSENT)
						continue;
					*dst = *src;
					*src = (struct srt_rdx_loc){0};
					moved = 1;
				}
				if (moved)
					for (uint32_t p = 0; p < c->n_pools; p++)
						recount(c, n, p, NULL);
			}
	}
	remat_free(r);
}

static void priv_free_from(struct srt_rdx_req *r, uint64_t keep)
{
	struct srt_rdx_cache *c = r->c;
	for (uint64_t i = keep; i < r->priv_pages; i++)
		for (uint32_t p = 0; p < c->n_pools; p++) {
			struct srt_rdx_loc *l = r->priv + i * c->n_pools + p;
			if (l->tier == SRT_RDX_L1)
				pool_free_page(c, p, l);
		}
	if (keep < r->priv_pages)
		r->priv_pages = keep;
}

int srt_rdx_req_extend(struct srt_rdx_req *r, const int32_t *tokens, uint64_t n, char *err,
		       size_t errlen)
{
	int rc = req_check_running(r, "extend", err, errlen);
	if (rc)
		return rc;
	struct srt_rdx_cache *c = r->c;
	uint64_t new_len = r->len + n;
	uint64_t need_pages = (new_len + c->P - 1) / c->P - r->tree_pages;
	uint64_t old_priv = r->priv_pages;
	if (tokens_reserve(r, new_len) || priv_reserve(r, need_pages)) {
		seterr(err, errlen, "extend: out of memory for %llu tokens",
		       (unsigned long long)new_len);
		return SRT_ENOMEM;
	}
	for (uint64_t i = old_priv; i < need_pages; i++) {
		struct srt_rdx_loc *l = r->priv + i * c->n_pools;
		memset(l, 0, c->n_pools * sizeof(*l));
		r->priv_pages = i + 1;
		for (uint32_t p = 0; p < c->n_pools; p++) {
			rc = pool_alloc_page(c, p, &l[p], err, errlen);
			if (rc) {
				priv_free_from(r, old_priv);
				return rc;
			}
		}
	}
	if (n)
		memcpy(r->tokens + r->len, tokens, n * sizeof(int32_t));
	r->len = new_len;
	return 0;
}

int srt_rdx_req_release_window(struct srt_rdx_req *r, uint64_t *released, char *err,
			       size_t errlen)
{
	int rc = req_check_running(r, "release_window", err, errlen);
	if (rc)
		return rc;
	struct srt_rdx_cache *c = r->c;
	uint64_t k = 0;
	for (uint32_t p = 0; p < c->n_pools; p++) {
		struct rdx_pool *pl = &c->pools[p];
		if (pl->retention != SRT_RETAIN_TAIL || r->len < pl->tail_tokens)
			continue;
		uint64_t lim = (r->len - pl->tail_tokens) / c->P; /* pages wholly before len - w */
		uint64_t v = r->rel[p] > r->tree_pages ? r->rel[p] : r->tree_pages;
		for (; v < lim && v < r->tree_pages + r->priv_pages; v++) {
			struct srt_rdx_loc *l = &priv_loc(r, v)[p];
			if (l->tier == SRT_RDX_L1) {
				pool_free_page(c, p, l);
				pl->released++;
				k++;
			}
		}
		if (lim > r->rel[p])
			r->rel[p] = lim;
	}
	if (r->tail_locked && !req_needs_tail_lock(r)) {
		tail_apply(c, r->node, -1);
		r->tail_locked = 0;
	}
	if (released)
		*released = k;
	return 0;
}

/* New leaf under parent with request pages [from, to) (ownership of the pages moves). */
static struct srt_rdx_node *leaf_from_req(struct srt_rdx_req *r, struct srt_rdx_node *parent,
					  uint64_t from, uint64_t to)
{
	struct srt_rdx_cache *c = r->c;
	uint32_t k = (uint32_t)(to - from);
	if (c->nodes + 1 > c->n_buckets && hash_grow(c))
		return NULL;
	struct srt_rdx_node *n = node_new(c, k);
	if (!n)
		return NULL;
	n->n_pages = k;
	n->start_page = from;
	memcpy(n->tokens, r->tokens + from * c->P, (size_t)k * c->P * sizeof(int32_t));
	memset(n->tail_lock, 0, (size_t)k * sizeof(uint32_t));
	for (uint32_t j = 0; j < k; j++) {
		struct srt_rdx_loc *src = priv_loc(r, from + j), *dst = node_loc(c, n, j);
		for (uint32_t p = 0; p < c->n_pools; p++) {
			dst[p] = src[p];
			src[p] = (struct srt_rdx_loc){0};
		}
	}
	child_link(parent, n);
	hash_add(c, n);
	c->nodes++;
	c->tree_pages += k;
	for (uint32_t p = 0; p < c->n_pools; p++)
		recount(c, n, p, NULL);
	return n;
}

/* Merge request page v into tree page j of node n: fill what the tree lacks, free duplicates. */
static void merge_page(struct srt_rdx_req *r, struct srt_rdx_node *n, uint32_t j, uint64_t v)
{
	struct srt_rdx_cache *c = r->c;
	struct srt_rdx_loc *src = priv_loc(r, v), *dst = node_loc(c, n, j);
	uint32_t *cnt = node_present(c, n), np = c->n_pools;
	for (uint32_t p = 0; p < np; p++) {
		if (src[p].tier == SRT_RDX_ABSENT)
			continue;
		if (dst[p].tier == SRT_RDX_ABSENT) {
			dst[p] = src[p];
			if (!cnt[p]++)
				lru_push_newest(c, n, p);
			if (is_interior(c, n, p, j) && !cnt[np + p]++)
				lru_push_newest(c, n, np + p);
		} else {
			pool_free_page(c, p, &src[p]);
		}
		src[p] = (struct srt_rdx_loc){0};
	}
}

int srt_rdx_req_commit(struct srt_rdx_req *r, uint64_t *cached_tokens, char *err, size_t errlen)
{
	int rc = req_check_running(r, "commit", err, errlen);
	if (rc)
		return rc;
	struct srt_rdx_cache *c = r->c;
	uint64_t target = r->len / c->P, page = r->tree_pages, cached = page;
	int fresh = 0;
	struct srt_rdx_node *node = r->node;
	if (target <= page)
		goto done;
	while (page < target) {
		struct srt_rdx_node *ch = fresh ? NULL : child_find(c, node, r->tokens + page * c->P);
		if (!ch) {
			struct srt_rdx_node *leaf = leaf_from_req(r, node, page, target);
			if (!leaf)
				goto nomem;
			node = leaf;
			page = target;
			break;
		}
		uint32_t j = 0;
		for (; j < ch->n_pages && page < target; j++, page++) {
			if (j && memcmp(ch->tokens + (size_t)j * c->P, r->tokens + page * c->P,
					c->P * sizeof(int32_t)))
				break;
			merge_page(r, ch, j, page);
		}
		if (!fresh)
			cached = page;
		if (j < ch->n_pages) {
			struct srt_rdx_node *u = node_split(c, ch, j);
			if (!u)
				goto nomem;
			node = u;
			fresh = 1; /* the rest diverges (or ends) here */
			continue;
		}
		node = ch;
	}
	/* lock the new path before unlocking the old one, then shift the private pages */
	all_apply(c, node, +1);
	if (r->node != c->root)
		all_apply(c, r->node, -1);
	if (r->tail_locked)
		tail_apply(c, r->node, -1);
	uint64_t moved = target - r->tree_pages;
	memmove(r->priv, r->priv + moved * c->n_pools,
		(r->priv_pages - moved) * c->n_pools * sizeof(*r->priv));
	r->priv_pages -= moved;
	r->tree_pages = target;
	r->node = node;
	r->tail_locked = req_needs_tail_lock(r);
	if (r->tail_locked)
		tail_apply(c, r->node, +1);
	touch_path(c, node);
done:
	if (cached_tokens)
		*cached_tokens = cached * c->P;
	return 0;
nomem:
	seterr(err, errlen, "commit: out of memory growing the tree");
	return SRT_ENOMEM;
}

static void req_unlock_all(struct srt_rdx_req *r)
{
	struct srt_rdx_cache *c = r->c;
	if (r->node != c->root) {
		if (r->tail_locked)
			tail_apply(c, r->node, -1);
		all_apply(c, r->node, -1);
	}
	r->tail_locked = 0;
	r->node = c->root;
	r->tree_pages = 0;
}

static void req_unlink(struct srt_rdx_req *r)
{
	struct srt_rdx_cache *c = r->c;
	if (r->prev)
		r->prev->next = r->next;
	else
		c->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
	c->live_reqs--;
}

int srt_rdx_req_finish(struct srt_rdx_req *r, uint64_t *cached_tokens, char *err, size_t errlen)
{
	int rc = srt_rdx_req_commit(r, cached_tokens, err, errlen);
	if (rc)
		return rc;
	remat_free(r);
	priv_free_from(r, 0);
	req_unlock_all(r);
	req_unlink(r);
	r->state = REQ_FINISHED;
	return 0;
}

int srt_rdx_req_abort(struct srt_rdx_req *r, char *err, size_t errlen)
{
	int rc = req_check_running(r, "abort", err, errlen);
	if (rc)
		return rc;
	remat_free(r);
	priv_free_from(r, 0);
	req_unlock_all(r);
	req_unlink(r);
	r->state = REQ_ABORTED;
	return 0;
}

void srt_rdx_req_free(struct srt_rdx_req *r)
{
	if (!r)
		return;
	if (r->state == REQ_RUNNING)
		srt_rdx_req_abort(r, NULL, 0);
	free(r->tokens);
	free(r->priv);
	free(r->rel);
	free(r);
}

uint64_t srt_rdx_req_len(const struct srt_rdx_req *r)
{
	return r->len;
}
uint64_t srt_rdx_req_tree_tokens(const struct srt_rdx_req *r)
{
	return r->tree_pages * r->c->P;
}
const int32_t *srt_rdx_req_tokens(const struct srt_rdx_req *r)
{
	return r->tokens;
}

int srt_rdx_req_page_table(const struct srt_rdx_req *r, uint32_t pool, void **buf, uint32_t cap,
			   struct srt_page_table *out)
{
	const struct srt_rdx_cache *c = r->c;
	if (pool >= c->n_pools || r->state != REQ_RUNNING)
		return SRT_EINVAL;
	uint64_t n = (r->len + c->P - 1) / c->P;
	if (cap < n)
		return SRT_EINVAL;
	for (const struct srt_rdx_node *nd = r->node; nd != c->root; nd = nd->parent)
		for (uint32_t j = 0; j < nd->n_pages; j++) {
			const struct srt_rdx_loc *l = &node_loc(c, nd, j)[pool];
			buf[nd->start_page + j] = l->tier == SRT_RDX_L1 ? l->addr : NULL;
		}
	for (uint64_t v = r->tree_pages; v < n; v++) {
		const struct srt_rdx_loc *l = &priv_loc(r, v)[pool];
		buf[v] = l->tier == SRT_RDX_L1 ? l->addr : NULL;
	}
	if (r->remat) {
		uint64_t tp = r->remat / c->P, v0 = remat_first(c, tp);
		for (uint64_t v = v0; v < tp && v < n; v++) {
			const struct srt_rdx_loc *l = &r->rloc[(v - v0) * c->n_pools + pool];
			if (l->tier == SRT_RDX_L1)
				buf[v] = l->addr;
		}
	}
	out->n_pages = (uint32_t)n;
	out->mem = c->mem;
	out->pages = buf;
	return 0;
}

/* --- invariant check ---------------------------------------------------------------------- */

#define CHK(cond, ...)                                                                         \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			seterr(err, errlen, __VA_ARGS__);                                      \
			rc = SRT_ECORRUPT;                                                     \
			goto out;                                                              \
		}                                                                              \
	} while (0)

int srt_rdx_cache_check(const struct srt_rdx_cache *c, char *err, size_t errlen)
{
	int rc = 0;
	uint32_t np = c->n_pools;
	uint64_t pages[SRT_RDX_MAX_POOLS] = {0};
	uint64_t nodes = 0, tpages = 0, want_present[SRT_RDX_MAX_POOLS] = {0};
	uint64_t want_inter[SRT_RDX_MAX_POOLS] = {0};
	/* expected locks: recompute from live requests into scratch fields */
	int64_t ext = c->ext_locks;
	/* walk the tree (iterative pre-order) */
	const struct srt_rdx_node *n = c->root;
	while (n) {
		if (n != c->root) {
			nodes++;
			tpages += n->n_pages;
			CHK(n->n_pages > 0, "node with 0 pages");
			uint64_t want_start = n->parent == c->root ? 0 : node_end(n->parent);
			CHK(n->start_page == want_start, "node start_page %llu, parent ends at %llu",
			    (unsigned long long)n->start_page, (unsigned long long)want_start);
			CHK(child_find(c, n->parent, n->tokens) == n, "hash index misses a node");
			uint64_t sum = 0;
			for (uint32_t j = 0; j < n->n_pages; j++)
				sum += n->tail_lock[j];
			CHK(sum == n->tail_lock_sum, "tail lock sum mismatch");
			for (const struct srt_rdx_node *ch = n->child; ch; ch = ch->sib_next)
				CHK(ch->all_lock <= n->all_lock, "child ALL lock %u above parent's %u",
				    ch->all_lock, n->all_lock);
			const uint32_t *pr = node_present(c, n);
			for (uint32_t p = 0; p < np; p++) {
				uint32_t cnt = 0;
				for (uint32_t j = 0; j < n->n_pages; j++)
					cnt += node_loc(c, n, j)[p].tier == SRT_RDX_L1;
				CHK(cnt == pr[p], "pool '%s': node present count %u, pages say %u",
				    c->pools[p].name, pr[p], cnt);
				uint32_t inter = 0;
				for (uint32_t j = 0; j < n->n_pages; j++)
					inter += node_loc(c, n, j)[p].tier == SRT_RDX_L1 &&
						 is_interior(c, n, p, j);
				CHK(inter == pr[np + p], "pool '%s': interior count %u, pages say %u",
				    c->pools[p].name, pr[np + p], inter);
				want_inter[p] += inter > 0;
				pages[p] += cnt;
				want_present[p] += cnt > 0;
				if (c->pools[p].retention == SRT_RETAIN_ALL)
					for (uint32_t j = 0; j < n->n_pages; j++)
						CHK(node_loc(c, n, j)[p].tier != SRT_RDX_ABSENT,
						    "ALL pool '%s' has a hole at page %llu",
						    c->pools[p].name,
						    (unsigned long long)(n->start_page + j));
			}
		}
		if (n->child) {
			n = n->child;
			continue;
		}
		while (n && n != c->root && !n->sib_next)
			n = n->parent;
		n = (n && n != c->root) ? n->sib_next : NULL;
	}
	CHK(nodes == c->nodes, "node count %llu, tree has %llu", (unsigned long long)c->nodes,
	    (unsigned long long)nodes);
	CHK(tpages == c->tree_pages, "tree page count mismatch");
	for (uint32_t L = 0; L < 2 * np; L++) {
		uint32_t p = L % np;
		uint64_t cnt = 0, want = L < np ? want_present[p] : want_inter[p];
		const struct srt_rdx_node *prev = NULL;
		for (const struct srt_rdx_node *x = c->heads[L].next; x; x = x->lru[L].next) {
			cnt++;
			CHK(node_present(c, x)[L] > 0, "pool '%s': LRU list %u holds a node without "
			    "pages", c->pools[p].name, L);
			CHK(x->lru[L].prev == prev, "pool '%s': LRU list %u broken", c->pools[p].name, L);
			CHK(cnt <= nodes, "pool '%s': LRU list loops", c->pools[p].name);
			prev = x;
		}
		CHK(c->heads[L].prev == prev, "pool '%s': LRU list %u tail wrong", c->pools[p].name, L);
		CHK(cnt == want, "pool '%s': LRU list %u has %llu nodes, expected %llu",
		    c->pools[p].name, L, (unsigned long long)cnt, (unsigned long long)want);
	}
	uint64_t live = 0;
	for (const struct srt_rdx_req *r = c->reqs; r; r = r->next) {
		live++;
		CHK(r->state == REQ_RUNNING, "finished request still listed");
		CHK((r->node == c->root ? 0 : node_end(r->node)) == r->tree_pages,
		    "request lock point %llu is not a node end", (unsigned long long)r->tree_pages);
		CHK(r->tree_pages + r->priv_pages == (r->len + c->P - 1) / c->P,
		    "request pages do not cover its %llu tokens", (unsigned long long)r->len);
		for (uint64_t i = 0; i < r->priv_pages; i++)
			for (uint32_t p = 0; p < np; p++)
				pages[p] += r->priv[i * np + p].tier == SRT_RDX_L1;
		if (r->remat) {
			uint64_t tp = r->remat / c->P, v0 = remat_first(c, tp);
			for (uint64_t i = 0; i < (tp - v0) * np; i++)
				pages[i % np] += r->rloc[i].tier == SRT_RDX_L1;
		}
	}
	CHK(live == c->live_reqs, "live request count mismatch");
	for (uint32_t p = 0; p < np; p++) {
		const struct rdx_pool *pl = &c->pools[p];
		CHK(pages[p] == pl->pages, "pool '%s': %llu pages counted, %llu found", pl->name,
		    (unsigned long long)pl->pages, (unsigned long long)pages[p]);
		CHK(pl->bytes == pl->pages * pl->page_bytes, "pool '%s': bytes != pages * page_bytes",
		    pl->name);
		CHK(pl->budget == SRT_RDX_UNBOUNDED || pl->bytes <= pl->budget,
		    "pool '%s': %llu bytes over the budget %llu", pl->name,
		    (unsigned long long)pl->bytes, (unsigned long long)pl->budget);
	}
	/* locks: with no external locks, every count must come from live requests */
	if (ext == 0) {
		n = c->root->child;
		/* sum of request locks per node: count requests whose path passes through */
		const struct srt_rdx_node *x = c->root;
		while (x) {
			if (x != c->root) {
				uint32_t want_all = 0;
				for (const struct srt_rdx_req *r = c->reqs; r; r = r->next)
					for (const struct srt_rdx_node *y = r->node; y != c->root;
					     y = y->parent)
						if (y == x) {
							want_all++;
							break;
						}
				CHK(want_all == x->all_lock, "node at page %llu: ALL lock %u, requests "
				    "hold %u", (unsigned long long)x->start_page, x->all_lock, want_all);
				for (uint32_t j = 0; j < x->n_pages; j++) {
					uint32_t want = 0;
					uint64_t v = x->start_page + j;
					for (const struct srt_rdx_req *r = c->reqs; r; r = r->next) {
						if (!r->tail_locked)
							continue;
						uint64_t lo = tail_lo(c, r->node);
						if (v < lo || v >= r->tree_pages)
							continue;
						for (const struct srt_rdx_node *y = r->node; y != c->root;
						     y = y->parent)
							if (y == x) {
								want++;
								break;
							}
					}
					CHK(want == x->tail_lock[j], "page %llu: TAIL lock %u, requests "
					    "hold %u", (unsigned long long)v, x->tail_lock[j], want);
				}
			}
			if (x->child) {
				x = x->child;
				continue;
			}
			while (x && x != c->root && !x->sib_next)
				x = x->parent;
			x = (x && x != c->root) ? x->sib_next : NULL;
		}
		(void)n;
	}
out:
	return rc;
}
