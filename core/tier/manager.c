/* The tier manager (manager.h). */
#include "tier/manager.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "tier/object.h"
#include "tier/sha256.h"
#include "tier/store.h"
#include "tier/writer.h"
#include "tier/xxh64.h"

#define LOGNAME "tier"

/* --- small helpers ------------------------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t key_hash(const struct srt_key *k)
{
	uint64_t h;
	memcpy(&h, k->b, sizeof(h)); /* the key is a SHA-256: its bytes are uniform */
	return h;
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void srt_tmgr_synth_payload(const struct srt_key *key, void *buf, size_t n)
{
	uint64_t s = key_hash(key) ^ srt_tier_xxh64(key->b, sizeof(key->b), 0x5a17);
	uint8_t *p = buf;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = mix64(s + i);
		size_t k = n - i < 8 ? n - i : 8;
		memcpy(p + i, &v, k);
	}
}

static void put_u32(struct srt_tier_sha256 *s, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	srt_tier_sha256_update(s, b, 4);
}

void srt_tmgr_fingerprint(const char *ident, uint32_t page_tokens,
			  const struct srt_pool_decl *pools, uint32_t n_pools, uint8_t out[32])
{
	struct srt_tier_sha256 s;
	srt_tier_sha256_init(&s);
	srt_tier_sha256_update(&s, "shadowrt/model-fp/v1", 21);
	size_t il = ident ? strlen(ident) : 0;
	put_u32(&s, (uint32_t)il);
	srt_tier_sha256_update(&s, ident ? ident : "", il);
	put_u32(&s, page_tokens);
	put_u32(&s, n_pools);
	for (uint32_t i = 0; i < n_pools; i++) {
		const struct srt_pool_decl *d = &pools[i];
		size_t nl = strnlen(d->name, SRT_POOL_NAME_MAX);
		put_u32(&s, (uint32_t)nl);
		srt_tier_sha256_update(&s, d->name, nl);
		put_u32(&s, d->ratio);
		put_u32(&s, d->retention);
		put_u32(&s, d->tail_tokens);
		put_u32(&s, (uint32_t)d->entry_bytes);
		put_u32(&s, (uint32_t)(d->entry_bytes >> 32));
		put_u32(&s, d->n_layers);
		for (uint32_t l = 0; l < d->n_layers && d->layers; l++)
			put_u32(&s, (uint32_t)d->layers[l]);
	}
	srt_tier_sha256_final(&s, out);
}

/* --- indexes ------------------------------------------------------------------------------- */

/* A page known to L2 or L3, by key. L2 entries own an arena page holding the payload. */
struct kent {
	struct srt_key key;
	struct kent *prev, *next; /* LRU: head = most recent */
	void *page;               /* L2: arena page */
	uint64_t bytes;           /* accounted bytes */
	uint32_t pool;
	uint32_t pins;   /* L2: loads in progress read it; not evictable */
	uint8_t in_l3;   /* L2: known to be in L3 as well */
};

/*
 * Open addressing (linear probing, at most half full) with each key's hash beside its entry:
 * a lookup reads one slot run, and touches an entry only when the full 64-bit hash matches.
 * The L3 index holds hundreds of thousands of pages, so chained buckets cost a cache miss per
 * entry on the chain; an absent key now costs about one.
 */
struct kslot {
	uint64_t h;
	struct kent *e; /* NULL = empty */
};

struct ktab {
	struct kslot *b;
	size_t cap, n;
	struct kent *head, *tail;
	uint64_t bytes, peak, budget;
};

static struct kent *kt_find(const struct ktab *t, const struct srt_key *k)
{
	if (!t->cap)
		return NULL;
	uint64_t h = key_hash(k);
	for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
		const struct kslot *sl = &t->b[i];
		if (!sl->e)
			return NULL;
		if (sl->h == h && !memcmp(sl->e->key.b, k->b, SRT_KEY_BYTES))
			return sl->e;
	}
}

static void lru_unlink(struct ktab *t, struct kent *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		t->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		t->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_front(struct ktab *t, struct kent *e)
{
	e->prev = NULL;
	e->next = t->head;
	if (t->head)
		t->head->prev = e;
	t->head = e;
	if (!t->tail)
		t->tail = e;
}

static void kt_touch(struct ktab *t, struct kent *e)
{
	if (t->head == e)
		return;
	lru_unlink(t, e);
	lru_front(t, e);
}

static void kt_place(struct kslot *b, size_t cap, uint64_t h, struct kent *e)
{
	size_t i = h & (cap - 1);
	while (b[i].e)
		i = (i + 1) & (cap - 1);
	b[i].h = h;
	b[i].e = e;
}

/*
 * A zeroed slot array. Large ones (the L3 index reaches many MiB) are 2 MiB aligned and asked
 * for transparent huge pages: lookups are random, and with 4 KiB pages each one also missed
 * the TLB (whole-trace replay with three tiers: ~10 % less CPU).
 */
static struct kslot *kt_slots(size_t cap)
{
	size_t bytes = cap * sizeof(struct kslot), huge = 2u << 20;
	if (bytes < huge)
		return calloc(cap, sizeof(struct kslot));
	void *p = NULL;
	if (posix_memalign(&p, huge, bytes))
		return NULL;
#ifdef MADV_HUGEPAGE
	madvise(p, bytes, MADV_HUGEPAGE); /* advice only: without THP it stays 4 KiB pages */
#endif
	memset(p, 0, bytes);
	return p;
}

static int kt_insert(struct ktab *t, struct kent *e)
{
	if ((t->n + 1) * 2 > t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 1024;
		struct kslot *b = kt_slots(cap);
		if (!b)
			return SRT_ENOMEM;
		for (size_t i = 0; i < t->cap; i++)
			if (t->b[i].e)
				kt_place(b, cap, t->b[i].h, t->b[i].e);
		free(t->b);
		t->b = b;
		t->cap = cap;
	}
	kt_place(t->b, t->cap, key_hash(&e->key), e);
	t->n++;
	t->bytes += e->bytes;
	if (t->bytes > t->peak)
		t->peak = t->bytes;
	lru_front(t, e);
	return 0;
}

/* Remove e (which is in t): backward-shift deletion keeps every probe run unbroken. */
static void kt_remove(struct ktab *t, struct kent *e)
{
	size_t mask = t->cap - 1, i = key_hash(&e->key) & mask;
	while (t->b[i].e != e)
		i = (i + 1) & mask;
	for (size_t j = i;;) {
		j = (j + 1) & mask;
		if (!t->b[j].e)
			break;
		size_t home = t->b[j].h & mask;
		/* the entry at j may move to i unless its home lies cyclically in (i, j] */
		if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
			continue;
		t->b[i] = t->b[j];
		i = j;
	}
	t->b[i].e = NULL;
	t->b[i].h = 0;
	t->n--;
	t->bytes -= e->bytes;
	lru_unlink(t, e);
}

/* An L1 tree page the manager knows: its key, hit count and flags, by (pool, address). */
struct l1ent {
	void *addr;
	struct l1ent *hnext;
	struct srt_key key;
	uint32_t pool;
	uint32_t hits;
	uint8_t resume;  /* TAIL pool: covers the window before a commit point */
	uint8_t written; /* eager copy done (write policy) */
};

struct l1tab {
	struct l1ent **b;
	size_t cap, n;
};

static size_t l1_slot(const struct l1tab *t, uint32_t pool, const void *addr)
{
	return mix64((uint64_t)(uintptr_t)addr * 64 + pool) & (t->cap - 1);
}

static struct l1ent *l1_find(const struct l1tab *t, uint32_t pool, const void *addr)
{
	if (!t->cap)
		return NULL;
	for (struct l1ent *e = t->b[l1_slot(t, pool, addr)]; e; e = e->hnext)
		if (e->addr == addr && e->pool == pool)
			return e;
	return NULL;
}

static int l1_insert(struct l1tab *t, struct l1ent *e)
{
	if ((t->n + 1) * 4 > t->cap * 3) {
		size_t cap = t->cap ? 2 * t->cap : 1024;
		struct l1ent **b = calloc(cap, sizeof(*b));
		if (!b)
			return SRT_ENOMEM;
		struct l1tab nt = {b, cap, 0};
		for (size_t i = 0; i < t->cap; i++)
			for (struct l1ent *x = t->b[i], *nx; x; x = nx) {
				nx = x->hnext;
				size_t j = l1_slot(&nt, x->pool, x->addr);
				x->hnext = b[j];
				b[j] = x;
			}
		free(t->b);
		t->b = b;
		t->cap = cap;
	}
	size_t j = l1_slot(t, e->pool, e->addr);
	e->hnext = t->b[j];
	t->b[j] = e;
	t->n++;
	return 0;
}

static void l1_remove(struct l1tab *t, struct l1ent *e)
{
	struct l1ent **pp = &t->b[l1_slot(t, e->pool, e->addr)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	t->n--;
}

/* --- the manager --------------------------------------------------------------------------- */

struct pinfo {
	char name[SRT_POOL_NAME_MAX + 1];
	uint32_t retention;
	uint32_t tail_pages; /* K = ceil(w / P) for TAIL pools */
	uint64_t page_bytes;
	uint64_t payload;    /* bytes actually stored per page */
	struct srt_tier_pool_tag tag; /* derives the pool's L3 keys from a page's chain */
};

/* One page to fetch from L3 (or copy from L2) for a loading request. */
struct item {
	struct srt_key key;
	uint32_t pool;
	void *dst;   /* L1 page (real mode) or NULL (synthetic: verify only) */
	struct kent *l2; /* a pinned L2 page to copy (in the prefetch thread), else L3 */
	uint64_t page;   /* page index in the request */
	int ok;
};

struct srt_tmgr_req {
	struct srt_tmgr *m;
	struct srt_rdx_req *r;
	int32_t *tokens; /* the start tokens [0, n) */
	uint64_t n;
	struct srt_key **keys; /* [pool][page] for pages [0, nkeys); keys[np] = the chain */
	uint64_t nkeys, keys_cap;
	uint64_t recorded; /* tree pages [0, recorded) are in the L1 index */
	struct srt_tmgr_hit hit;
	/* load in flight */
	struct item *items;
	uint32_t n_items;
	int queued;          /* in the prefetch queue or being loaded */
	_Atomic int done;    /* the thread finished the items */
	int pending;         /* loaded pages not yet verified / committed */
	struct srt_tmgr_req *qnext;
	int finished;
	int counted; /* hit added to the stats */
	int branch_done;
	uint64_t hit_pages; /* pages [0, hit_pages) were a hit: a resume point */
	uint64_t lower_run; /* end of the ALL pools' run in L2/L3: where an older prefix left off */
	/* pages just loaded from L3 ([pool * l3k_n + page] = 1): their write-through copy need
	 * not look the L3 index up again (set at wait, used by the next req_record) */
	uint8_t *l3k;
	uint64_t l3k_n;
	uint32_t attempts;  /* loads that failed and were looked up again */
	/* shared loads: a request loading pages [load_from, load_to) from L3 is a "loader" (on the
	 * manager's list); a later request whose lookup starts inside that range follows it: it
	 * loads nothing, and at its wait it waits for the loader, then matches its pages in L1 */
	uint64_t load_from, load_to;
	struct srt_tmgr_req *lprev, *lnext;  /* loaders list */
	struct srt_tmgr_req *follow;         /* the loader followed (NULL once it is gone) */
	int following;
	struct srt_tmgr_req *followers, *fnext; /* requests following this one */
};

struct srt_tmgr {
	struct srt_tmgr_config cfg;
	uint32_t P, np;
	struct pinfo *pools;
	struct srt_tier_keyer keyer; /* L3 key chain of the scope */
	struct srt_rdx_cache *c;
	struct srt_rdx_hooks hooks;
	struct l1tab l1;
	struct ktab l2, l3;
	int has_l2, has_l3;
	struct srt_tier_store store;
	struct srt_twr *w; /* L3 writes and removes (writer.h) */
	pthread_mutex_t l2mu; /* arena calls: the prefetch thread copies L2 pages too */
	uint8_t *scratch; /* payload buffer (main thread) */
	size_t scratch_len;
	/* L3 availability */
	pthread_mutex_t l3mu;
	int l3_down;
	double l3_retry_at;
	/* prefetch thread */
	pthread_t thr;
	int thr_on;
	pthread_mutex_t mu;
	pthread_cond_t cv, done_cv;
	struct srt_tmgr_req *qhead, *qtail;
	int stop, hold;
	uint8_t *tscratch; /* payload buffer (prefetch thread) */
	uint8_t *wscratch; /* payload buffer (a waiter loading its own queued request) */
	struct srt_tmgr_stats st;
	struct srt_tmgr_req *loaders; /* requests with L3 loads not yet waited for */
	_Atomic uint64_t verified, skipped;
	int warned_l2_small;
	const struct srt_rdx_remat_policy *remat; /* srt_tmgr_set_remat; NULL = off */
	int remat_keep_tail; /* 1: TAIL pages still stored at resume points */
};

#define LOG(m, lvl, ...)                                                                       \
	do {                                                                                   \
		if ((m)->cfg.host && (m)->cfg.host->log)                                       \
			(m)->cfg.host->log((lvl), LOGNAME, __VA_ARGS__);                       \
	} while (0)

/* L3 gate: 1 when L3 may be used now. */
static int l3_usable(struct srt_tmgr *m)
{
	if (!m->has_l3)
		return 0;
	pthread_mutex_lock(&m->l3mu);
	int ok = !m->l3_down || now_s() >= m->l3_retry_at;
	pthread_mutex_unlock(&m->l3mu);
	if (!ok)
		atomic_fetch_add(&m->skipped, 1);
	return ok;
}

/* Record the outcome of an L3 call (rc of the store). */
static void l3_result(struct srt_tmgr *m, int rc, const char *what)
{
	pthread_mutex_lock(&m->l3mu);
	if (rc == SRT_EIO) {
		if (!m->l3_down) {
			m->st.l3_outages++;
			LOG(m, SRT_LOG_WARN,
			    "L3 (%s) unavailable (%s failed): continuing without L3, retrying every %u ms",
			    m->cfg.l3_name ? m->cfg.l3_name : "store", what, m->cfg.l3_retry_ms);
		}
		m->l3_down = 1;
		m->l3_retry_at = now_s() + m->cfg.l3_retry_ms / 1000.0;
	} else if (rc == 0 && m->l3_down) {
		m->l3_down = 0;
		LOG(m, SRT_LOG_WARN, "L3 (%s) is back: using it again",
		    m->cfg.l3_name ? m->cfg.l3_name : "store");
	}
	pthread_mutex_unlock(&m->l3mu);
}

/* Bytes a stored page accounts for in L3. */
static uint64_t l3_acct(const struct srt_tmgr *m, uint32_t pool)
{
	return m->pools[pool].page_bytes + SRT_TIER_OBJ_HEADER_BYTES;
}

/* Note that key is in L3 (written or found); evicts LRU objects to stay within the budget. */
static void l3_note_new(struct srt_tmgr *m, const struct srt_key *key, uint32_t pool);

static void l3_note(struct srt_tmgr *m, const struct srt_key *key, uint32_t pool)
{
	struct kent *e = kt_find(&m->l3, key);
	if (e) {
		kt_touch(&m->l3, e);
		return;
	}
	l3_note_new(m, key, pool);
}

/* l3_note of a key the caller knows is not in the L3 index. */
static void l3_note_new(struct srt_tmgr *m, const struct srt_key *key, uint32_t pool)
{
	struct kent *e;
	uint64_t b = l3_acct(m, pool);
	while (m->l3.bytes + b > m->l3.budget && m->l3.tail) {
		struct kent *v = m->l3.tail;
		kt_remove(&m->l3, v);
		srt_twr_remove(m->w, &v->key);
		struct kent *l2e = kt_find(&m->l2, &v->key);
		if (l2e)
			l2e->in_l3 = 0;
		m->st.l3_evicted++;
		free(v);
	}
	if (m->l3.bytes + b > m->l3.budget)
		return; /* larger than the whole budget: put refused it already */
	e = calloc(1, sizeof(*e));
	if (!e)
		return;
	e->key = *key;
	e->pool = pool;
	e->bytes = b;
	if (kt_insert(&m->l3, e))
		free(e);
}

/* Forget key in L3 (it was found absent or corrupt). */
static void l3_forget(struct srt_tmgr *m, const struct srt_key *key)
{
	struct kent *e = kt_find(&m->l3, key);
	if (e) {
		kt_remove(&m->l3, e);
		free(e);
	}
	struct kent *l2e = kt_find(&m->l2, key);
	if (l2e)
		l2e->in_l3 = 0;
}

/* Forget the keys of L3 puts that failed in the writer (main thread). */
static void l3_reap(struct srt_tmgr *m)
{
	if (!m->w)
		return;
	struct srt_key keys[64];
	uint32_t pools[64];
	size_t n;
	do {
		n = srt_twr_reap(m->w, keys, pools, 64);
		for (size_t i = 0; i < n; i++)
			l3_forget(m, &keys[i]);
	} while (n == 64);
}

static int l3_put_new(struct srt_tmgr *m, uint32_t pool, const struct srt_key *key,
		      const void *payload);

/*
 * Queue one payload for L3 (budget first: older objects are removed ahead of it, in the same
 * queue). Returns 1 when queued (the page counts as in L3 from now on: lookups and loads see
 * the queued copy until the store has it), 2 when L3 has it already, 0 when not stored.
 */
static int l3_put(struct srt_tmgr *m, uint32_t pool, const struct srt_key *key, const void *payload)
{
	l3_reap(m);
	if (kt_find(&m->l3, key))
		return 2;
	return l3_put_new(m, pool, key, payload);
}

/* l3_put of a key the caller found absent from the L3 index after l3_reap. */
static int l3_put_new(struct srt_tmgr *m, uint32_t pool, const struct srt_key *key,
		      const void *payload)
{
	if (!l3_usable(m)) {
		srt_twr_note_lost(m->w, 1, "L3 unavailable");
		return 0;
	}
	if (l3_acct(m, pool) > m->l3.budget)
		return 0;
	/* make room before writing so the budget holds at every instant */
	uint64_t b = l3_acct(m, pool);
	while (m->l3.bytes + b > m->l3.budget && m->l3.tail) {
		struct kent *v = m->l3.tail;
		kt_remove(&m->l3, v);
		srt_twr_remove(m->w, &v->key);
		struct kent *l2e = kt_find(&m->l2, &v->key);
		if (l2e)
			l2e->in_l3 = 0;
		m->st.l3_evicted++;
		free(v);
	}
	if (srt_twr_put(m->w, key, pool, payload, (size_t)m->pools[pool].payload))
		return 0; /* dropped (queue full) or failed (sync mode): counted and logged there */
	l3_note_new(m, key, pool);
	return 1;
}

/* Free L2 entries (LRU, unpinned) until `need` more bytes fit; write-back to L3 first. */
static int l2_make_room(struct srt_tmgr *m, uint64_t need)
{
	struct kent *v = m->l2.tail;
	while (m->l2.bytes + need > m->l2.budget && v) {
		struct kent *prev = v->prev;
		if (v->pins) {
			v = prev;
			continue;
		}
		if (!v->in_l3 && m->has_l3 && l3_put(m, v->pool, &v->key, v->page) == 1) {
			m->st.pages_l2_to_l3++;
			m->st.bytes_l2_to_l3 += m->pools[v->pool].page_bytes;
		}
		kt_remove(&m->l2, v);
		pthread_mutex_lock(&m->l2mu);
		m->cfg.l2_vt->free_page(m->cfg.l2_inst, v->page, m->pools[v->pool].payload);
		pthread_mutex_unlock(&m->l2mu);
		m->st.l2_evicted++;
		free(v);
		v = prev;
	}
	return m->l2.bytes + need <= m->l2.budget;
}

/* Copy a payload into L2 under key. Returns 1 when stored (or already there). */
static int l2_put(struct srt_tmgr *m, uint32_t pool, const struct srt_key *key, const void *payload,
		  int in_l3, int *had)
{
	struct kent *e = kt_find(&m->l2, key);
	*had = e != NULL;
	if (e) {
		kt_touch(&m->l2, e);
		e->in_l3 |= (uint8_t)in_l3;
		return 1;
	}
	uint64_t pb = m->pools[pool].page_bytes;
	if (pb > m->l2.budget) {
		if (!m->warned_l2_small)
			LOG(m, SRT_LOG_WARN,
			    "L2 budget %" PRIu64 " B is smaller than one page of pool %s (%" PRIu64
			    " B): its pages skip L2",
			    m->l2.budget, m->pools[pool].name, pb);
		m->warned_l2_small = 1;
		return 0;
	}
	if (!l2_make_room(m, pb))
		return 0;
	e = calloc(1, sizeof(*e));
	if (!e)
		return 0;
	size_t len = (size_t)m->pools[pool].payload;
	pthread_mutex_lock(&m->l2mu);
	int arc = m->cfg.l2_vt->alloc_page(m->cfg.l2_inst, len, &e->page);
	if (!arc && m->cfg.l2_vt->copy_from_host(m->cfg.l2_inst, e->page, payload, len)) {
		m->cfg.l2_vt->free_page(m->cfg.l2_inst, e->page, len);
		arc = SRT_EIO;
	}
	pthread_mutex_unlock(&m->l2mu);
	if (arc) {
		free(e);
		return 0;
	}
	e->key = *key;
	e->pool = pool;
	e->bytes = pb;
	e->in_l3 = (uint8_t)in_l3;
	if (kt_insert(&m->l2, e)) {
		pthread_mutex_lock(&m->l2mu);
		m->cfg.l2_vt->free_page(m->cfg.l2_inst, e->page, len);
		pthread_mutex_unlock(&m->l2mu);
		free(e);
		return 0;
	}
	return 1;
}

/* The payload of an L1 page: its bytes (real) or the synthetic bytes of its key. */
static const void *l1_payload(struct srt_tmgr *m, uint32_t pool, const struct srt_key *key,
			      const void *addr)
{
	if (!m->cfg.payload_bytes)
		return addr;
	srt_tmgr_synth_payload(key, m->scratch, (size_t)m->pools[pool].payload);
	return m->scratch;
}

/* Copy one L1 page to the lower tiers: L2 (and L3 when `to_l3`). */
static void copy_down(struct srt_tmgr *m, uint32_t pool, const struct srt_key *key,
		      const void *addr, int to_l3, int known_l3)
{
	const void *pl = l1_payload(m, pool, key, addr);
	uint64_t pb = m->pools[pool].page_bytes;
	/*
	 * One index lookup per tier and page (the L3 index is large: each lookup is a cache
	 * miss). in_l3 is a hint for L2's write-back (l3_put checks again), so a drop (to_l3 = 0)
	 * does not look L3 up: a page already there is found when L2 evicts it.
	 */
	int in_l3 = 0;
	if (to_l3 && m->has_l3 && known_l3) {
		in_l3 = 1; /* loaded from L3 and noted just now */
	} else if (to_l3 && m->has_l3) {
		l3_reap(m);
		if (kt_find(&m->l3, key)) {
			in_l3 = 1;
		} else if (l3_put_new(m, pool, key, pl)) {
			in_l3 = 1;
			m->st.pages_l1_to_l3++;
			m->st.bytes_l1_to_l3 += pb;
		}
	}
	if (m->has_l2) {
		int had;
		if (l2_put(m, pool, key, pl, in_l3, &had)) {
			if (!had) {
				m->st.pages_l1_to_l2++;
				m->st.bytes_l1_to_l2 += pb;
			}
			return;
		}
	}
	/* no L2 (or it is full of pinned pages): straight to L3 */
	if (!in_l3 && m->has_l3 && l3_put(m, pool, key, pl) == 1) {
		m->st.pages_l1_to_l3++;
		m->st.bytes_l1_to_l3 += pb;
	}
}

static void on_drop(void *ctx, uint32_t pool, uint64_t vpage, const int32_t *tokens,
		    const struct srt_rdx_loc *loc, size_t bytes, int why)
{
	(void)vpage, (void)tokens, (void)bytes, (void)why;
	struct srt_tmgr *m = ctx;
	struct l1ent *e = l1_find(&m->l1, pool, loc->addr);
	if (!e)
		return; /* a page committed without the manager: nothing known about it */
	l1_remove(&m->l1, e);
	if (m->pools[pool].retention == SRT_RETAIN_ALL || e->resume)
		copy_down(m, pool, &e->key, loc->addr, 0, 0);
	else
		m->st.skipped_tail_pages++;
	free(e);
}

/* --- prefetch thread ------------------------------------------------------------------------ */

#define LOAD_BATCH 256u              /* L3 objects per store get at most */
#define LOAD_BATCH_BYTES (16u << 20) /* and payload bytes (one object may exceed) */

/* Check a fetched payload of `it` (len bytes at got; want: pl bytes of scratch). */
static void load_check(struct srt_tmgr *m, struct item *it, const void *got, size_t len,
		       uint8_t *want)
{
	size_t pl = (size_t)m->pools[it->pool].payload;
	if (len != pl)
		return;
	if (m->cfg.payload_bytes) {
		srt_tmgr_synth_payload(&it->key, want, pl);
		if (memcmp(got, want, pl)) {
			LOG(m, SRT_LOG_ERROR, "L3 page of pool %s: payload differs from its key's",
			    m->pools[it->pool].name);
			return;
		}
		atomic_fetch_add(&m->verified, 1);
	}
	it->ok = 1;
}

/* Fetch items idx[0..k) of r from the store in one get (one transaction, one pipeline). */
static void load_batch(struct srt_tmgr *m, struct srt_tmgr_req *r, const uint32_t *idx,
		       uint32_t k, uint8_t *want)
{
	struct srt_key keys[LOAD_BATCH];
	void *bufs[LOAD_BATCH];
	size_t caps[LOAD_BATCH], lens[LOAD_BATCH];
	uint8_t *area = NULL;
	if (!l3_usable(m))
		return;
	if (m->cfg.payload_bytes) { /* synthetic: fetched into one area, then compared */
		area = malloc((size_t)k * m->cfg.payload_bytes);
		if (!area)
			return;
	}
	for (uint32_t j = 0; j < k; j++) {
		const struct item *it = &r->items[idx[j]];
		keys[j] = it->key;
		caps[j] = (size_t)m->pools[it->pool].payload;
		bufs[j] = area ? area + (size_t)j * m->cfg.payload_bytes : it->dst;
	}
	int rc = srt_tier_store_get(&m->store, keys, k, bufs, caps, lens);
	l3_result(m, rc, "get");
	for (uint32_t j = 0; j < k && !rc; j++)
		load_check(m, &r->items[idx[j]], bufs[j], lens[j], want);
	free(area);
}

/*
 * Fetch and check the items of r (prefetch thread or inline). Touches only r and the store.
 * Each page is looked for in the write queue first and only then in the store (a put leaves
 * the queue after the store has it); the pages not queued are fetched in batched gets.
 */
static void load_items(struct srt_tmgr *m, struct srt_tmgr_req *r, uint8_t *buf)
{
	uint32_t idx[LOAD_BATCH], k = 0;
	uint64_t kb = 0;
	for (uint32_t i = 0; i < r->n_items; i++) {
		struct item *it = &r->items[i];
		it->ok = 0;
		size_t pl = (size_t)m->pools[it->pool].payload;
		if (it->l2) { /* an L2 page: the copy overlaps whatever the scheduler does */
			pthread_mutex_lock(&m->l2mu);
			it->ok = !m->cfg.l2_vt->copy_to_host(m->cfg.l2_inst, it->dst, it->l2->page, pl);
			pthread_mutex_unlock(&m->l2mu);
			continue;
		}
		void *dst = m->cfg.payload_bytes ? buf : it->dst;
		size_t len = 0;
		/* a page whose put is still queued is read from the queue (read-your-writes) */
		if (m->w && srt_twr_read(m->w, &it->key, dst, pl, &len)) {
			load_check(m, it, dst, len, buf + pl);
			continue;
		}
		if (k == LOAD_BATCH || (k && kb + pl > LOAD_BATCH_BYTES)) {
			load_batch(m, r, idx, k, buf + m->cfg.payload_bytes);
			k = 0;
			kb = 0;
		}
		idx[k++] = i;
		kb += pl;
	}
	if (k)
		load_batch(m, r, idx, k, buf + m->cfg.payload_bytes);
}

static void *prefetch_main(void *arg)
{
	struct srt_tmgr *m = arg;
	pthread_mutex_lock(&m->mu);
	for (;;) {
		while (!m->stop && (!m->qhead || m->hold))
			pthread_cond_wait(&m->cv, &m->mu);
		if (m->stop && !m->qhead)
			break;
		if (m->hold && !m->stop)
			continue;
		struct srt_tmgr_req *r = m->qhead;
		m->qhead = r->qnext;
		if (!m->qhead)
			m->qtail = NULL;
		pthread_mutex_unlock(&m->mu);
		load_items(m, r, m->tscratch);
		pthread_mutex_lock(&m->mu);
		atomic_store(&r->done, 1);
		pthread_cond_broadcast(&m->done_cv);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

void srt_tmgr_hold_prefetch(struct srt_tmgr *m, int hold)
{
	pthread_mutex_lock(&m->mu);
	m->hold = hold;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

/* --- the L3 index across runs ----------------------------------------------------------------- */

/*
 * The manager's L3 index (which pages it accounts in L3, least recent first) is saved as objects
 * of the store itself at flush and shutdown and read back at create, so the L3 budget bounds the
 * store across runs, also in synthetic mode where the store has no byte bound of its own. Chunk c
 * is an object under a key derived from the scope (model, layout, tenant) and c:
 *     "SRTL3IX1" | u32 chunk | u32 chunks | u64 entries | u32 n | u32 0 | n x (key, u32 pool)
 */
#define IDX_MAGIC "SRTL3IX1"
#define IDX_HDR 32u
#define IDX_ENT 36u
#define IDX_PER_CHUNK 16384u

static void idx_key(const struct srt_tmgr *m, uint32_t chunk, struct srt_key *out)
{
	struct srt_tier_sha256 s;
	srt_tier_sha256_init(&s);
	srt_tier_sha256_update(&s, "shadowrt/l3-index/v1", 20);
	srt_tier_sha256_update(&s, &m->cfg.scope, sizeof(m->cfg.scope));
	put_u32(&s, chunk);
	srt_tier_sha256_final(&s, out->b);
}

static void idx_save(struct srt_tmgr *m)
{
	if (!m->has_l3 || !l3_usable(m))
		return;
	uint64_t total = m->l3.n;
	uint32_t chunks = (uint32_t)((total + IDX_PER_CHUNK - 1) / IDX_PER_CHUNK);
	if (!chunks)
		chunks = 1;
	uint8_t *buf = malloc(IDX_HDR + (size_t)IDX_PER_CHUNK * IDX_ENT);
	if (!buf)
		return;
	const struct kent *e = m->l3.tail; /* least recent first */
	for (uint32_t c = 0; c < chunks; c++) {
		uint32_t n = 0;
		for (; e && n < IDX_PER_CHUNK; e = e->prev, n++) {
			memcpy(buf + IDX_HDR + (size_t)n * IDX_ENT, e->key.b, SRT_KEY_BYTES);
			memcpy(buf + IDX_HDR + (size_t)n * IDX_ENT + SRT_KEY_BYTES, &e->pool, 4);
		}
		memcpy(buf, IDX_MAGIC, 8);
		memcpy(buf + 8, &c, 4);
		memcpy(buf + 12, &chunks, 4);
		memcpy(buf + 16, &total, 8);
		memcpy(buf + 24, &n, 4);
		memset(buf + 28, 0, 4);
		struct srt_key k;
		idx_key(m, c, &k);
		const void *bufs[1] = {buf};
		size_t len = IDX_HDR + (size_t)n * IDX_ENT;
		int rc = srt_tier_store_put(&m->store, &k, 1, bufs, &len);
		if (rc) {
			LOG(m, SRT_LOG_WARN, "L3 (%s): saving the L3 index failed (%d): the next run "
			    "accounts only what it finds", m->cfg.l3_name ? m->cfg.l3_name : "store", rc);
			break;
		}
	}
	free(buf);
}

static void idx_load(struct srt_tmgr *m)
{
	size_t cap = IDX_HDR + (size_t)IDX_PER_CHUNK * IDX_ENT, len = 0;
	uint8_t *buf = malloc(cap);
	if (!buf)
		return;
	uint32_t chunks = 1;
	uint64_t loaded = 0;
	for (uint32_t c = 0; c < chunks; c++) {
		struct srt_key k;
		idx_key(m, c, &k);
		void *bufs[1] = {buf};
		if (srt_tier_store_get(&m->store, &k, 1, bufs, &cap, &len) || len < IDX_HDR ||
		    memcmp(buf, IDX_MAGIC, 8))
			break;
		uint32_t cc, cn, n;
		memcpy(&cc, buf + 8, 4);
		memcpy(&cn, buf + 12, 4);
		memcpy(&n, buf + 24, 4);
		if (cc != c || (c == 0 ? !cn || cn > (1u << 20) : cn != chunks) ||
		    len != IDX_HDR + (size_t)n * IDX_ENT)
			break; /* a chunk of another save: stop, keep what is consistent */
		chunks = cn;
		for (uint32_t i = 0; i < n; i++) {
			struct srt_key key;
			uint32_t pool;
			memcpy(key.b, buf + IDX_HDR + (size_t)i * IDX_ENT, SRT_KEY_BYTES);
			memcpy(&pool, buf + IDX_HDR + (size_t)i * IDX_ENT + SRT_KEY_BYTES, 4);
			if (pool >= m->np || kt_find(&m->l3, &key))
				continue;
			struct kent *e = calloc(1, sizeof(*e));
			if (!e)
				break;
			e->key = key;
			e->pool = pool;
			e->bytes = l3_acct(m, pool);
			if (kt_insert(&m->l3, e)) { /* at the front: read oldest first */
				free(e);
				break;
			}
			loaded++;
		}
	}
	free(buf);
	/* a smaller budget than the last run's: evict down to it now */
	while (m->l3.bytes > m->l3.budget && m->l3.tail) {
		struct kent *v = m->l3.tail;
		kt_remove(&m->l3, v);
		srt_twr_remove(m->w, &v->key);
		m->st.l3_evicted++;
		free(v);
	}
	m->l3.peak = m->l3.bytes;
	if (loaded)
		LOG(m, SRT_LOG_INFO, "L3 (%s): %" PRIu64 " pages of earlier runs accounted (%" PRIu64
		    " bytes of a %" PRIu64 " byte budget)", m->cfg.l3_name ? m->cfg.l3_name : "store",
		    loaded, m->l3.bytes, m->l3.budget);
}

/* --- create / destroy ---------------------------------------------------------------------- */

/* The writer's L3 gate: the manager's outage logic. */
static int twr_usable(void *ctx)
{
	return l3_usable(ctx);
}

static void twr_result(void *ctx, int rc, const char *what)
{
	l3_result(ctx, rc, what);
}

void srt_tmgr_hold_writes(struct srt_tmgr *m, int hold)
{
	if (m->w)
		srt_twr_hold(m->w, hold);
}

void srt_tmgr_write_stats(struct srt_tmgr *m, struct srt_twr_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (m->w)
		srt_twr_stats(m->w, out);
}

uint64_t srt_tmgr_flush(struct srt_tmgr *m)
{
	if (!m->w)
		return 0;
	uint64_t lost = srt_twr_flush(m->w);
	l3_reap(m);
	return lost;
}

int srt_tmgr_create(const struct srt_tmgr_config *cfg, struct srt_tmgr **out, char *err,
		    size_t errlen)
{
	*out = NULL;
	uint32_t P = cfg->page_tokens ? cfg->page_tokens : SRT_RDX_DEFAULT_PAGE;
	if (!cfg->n_pools || !cfg->pools) {
		snprintf(err, errlen, "tier manager: no pools");
		return SRT_EINVAL;
	}
	if (cfg->l2_vt && (!cfg->l2_vt->alloc_page || !cfg->l2_vt->free_page ||
			   !cfg->l2_vt->copy_from_host || !cfg->l2_vt->copy_to_host)) {
		snprintf(err, errlen, "tier manager: the L2 plugin is not a page arena "
				      "(alloc_page/free_page/copy_from_host/copy_to_host missing)");
		return SRT_EINVAL;
	}
	if (cfg->l2_vt && !cfg->l2_budget) {
		snprintf(err, errlen, "tier manager: L2 needs a byte budget");
		return SRT_EINVAL;
	}
	struct srt_tmgr *m = calloc(1, sizeof(*m));
	if (!m)
		goto nomem;
	m->cfg = *cfg;
	m->cfg.pools = NULL;
	if (!m->cfg.write_after_hits)
		m->cfg.write_after_hits = 2;
	if (!m->cfg.l3_retry_ms)
		m->cfg.l3_retry_ms = 1000;
	m->P = P;
	m->np = cfg->n_pools;
	pthread_mutex_init(&m->l3mu, NULL);
	pthread_mutex_init(&m->l2mu, NULL);
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	pthread_cond_init(&m->done_cv, NULL);
	m->pools = calloc(m->np, sizeof(*m->pools));
	if (!m->pools)
		goto nomem;
	uint64_t maxpl = 0;
	for (uint32_t i = 0; i < m->np; i++) {
		const struct srt_pool_decl *d = &cfg->pools[i];
		struct pinfo *pi = &m->pools[i];
		uint32_t r = d->ratio == SRT_RATIO_PAGE ? P : d->ratio;
		if (!r || P % r) {
			snprintf(err, errlen, "tier manager: pool %.32s: page size %u is not a multiple "
					      "of its ratio %u", d->name, P, r);
			srt_tmgr_destroy(m);
			return SRT_EINVAL;
		}
		memcpy(pi->name, d->name, SRT_POOL_NAME_MAX);
		pi->retention = d->retention;
		pi->tail_pages = d->retention == SRT_RETAIN_TAIL ? (d->tail_tokens + P - 1) / P : 0;
		pi->page_bytes = (uint64_t)d->n_layers * (P / r) * d->entry_bytes;
		pi->payload = cfg->payload_bytes ? cfg->payload_bytes : pi->page_bytes;
		if (pi->payload > maxpl)
			maxpl = pi->payload;
		if (srt_tier_pool_tag(pi->name, &pi->tag))
			goto nomem;
	}
	if (srt_tier_keyer_init(&m->keyer, &cfg->scope))
		goto nomem;
	m->scratch_len = (size_t)maxpl;
	m->scratch = malloc(2 * m->scratch_len + 64);
	m->tscratch = malloc(2 * m->scratch_len + 64);
	m->wscratch = malloc(2 * m->scratch_len + 64);
	if (!m->scratch || !m->tscratch || !m->wscratch)
		goto nomem;
	m->has_l2 = cfg->l2_vt != NULL;
	m->l2.budget = cfg->l2_budget;
	m->l3.budget = cfg->l3_budget ? cfg->l3_budget : UINT64_MAX;
	if (cfg->l3_vt) {
		char why[256];
		if (srt_tier_store_init(&m->store, cfg->l3_vt, cfg->l3_inst, cfg->host,
					cfg->l3_name ? cfg->l3_name : "tier.l3",
					cfg->scope.layout_version, why, sizeof(why))) {
			snprintf(err, errlen, "tier manager: L3: %s", why);
			srt_tmgr_destroy(m);
			return SRT_EINVAL;
		}
		m->has_l3 = 1;
		char name[96];
		snprintf(name, sizeof(name), "L3 (%s)", cfg->l3_name ? cfg->l3_name : "store");
		struct srt_twr_config wc = {
			.store = &m->store, .name = name, .host = cfg->host,
			.sync = cfg->write_sync, .queue_bytes = cfg->write_queue_bytes,
			.batch = cfg->write_batch, .full = cfg->write_full,
			.report_ms = cfg->l3_report_ms, .usable = twr_usable, .result = twr_result,
			.ctx = m};
		int wrc = srt_twr_create(&wc, &m->w, err, errlen);
		if (wrc) {
			srt_tmgr_destroy(m);
			return wrc;
		}
		idx_load(m);
	}
	/* the loading thread: L3 gets and, in real mode, L2 -> L1 copies */
	if (cfg->prefetch && (m->has_l3 || m->has_l2)) {
		if (pthread_create(&m->thr, NULL, prefetch_main, m)) {
			snprintf(err, errlen, "tier manager: cannot start the prefetch thread");
			srt_tmgr_destroy(m);
			return SRT_EIO;
		}
		m->thr_on = 1;
	}
	m->hooks.ctx = m;
	m->hooks.on_drop = on_drop;
	*out = m;
	return 0;
nomem:
	snprintf(err, errlen, "tier manager: out of memory");
	srt_tmgr_destroy(m);
	return SRT_ENOMEM;
}

void srt_tmgr_set_remat(struct srt_tmgr *m, const struct srt_rdx_remat_policy *pol,
			int keep_tail)
{
	m->remat = pol;
	m->remat_keep_tail = keep_tail;
}

/* srt_rdx_req_start, rematerializing L1 hits when set; fills l1_tokens and the remat fields */
static int rdx_start(struct srt_tmgr *m, struct srt_tmgr_req *r, const int32_t *tokens,
		     uint64_t n, uint64_t *h1, struct srt_tmgr_hit *hit, char *err, size_t errlen)
{
	uint64_t rt = 0;
	int rc = srt_rdx_req_start_remat(m->c, tokens, n, m->remat, &r->r, h1, &rt, err, errlen);
	hit->l1_tokens = rc ? 0 : *h1;
	hit->remat_tokens = rt;
	hit->remat_cost = rt ? m->remat->cost(m->remat->ctx, rt) : 0;
	hit->strict_tokens = rc ? 0 : srt_rdx_req_strict_hit(r->r);
	return rc;
}

const struct srt_rdx_hooks *srt_tmgr_hooks(struct srt_tmgr *m)
{
	return &m->hooks;
}

void srt_tmgr_attach(struct srt_tmgr *m, struct srt_rdx_cache *c)
{
	assert(srt_rdx_page_tokens(c) == m->P && srt_rdx_pool_count(c) == m->np);
	m->c = c;
}

void srt_tmgr_destroy(struct srt_tmgr *m)
{
	if (!m)
		return;
	if (m->thr_on) {
		pthread_mutex_lock(&m->mu);
		m->stop = 1;
		m->hold = 0;
		pthread_cond_broadcast(&m->cv);
		pthread_mutex_unlock(&m->mu);
		pthread_join(m->thr, NULL);
	}
	if (m->w) {
		srt_twr_flush(m->w); /* every queued write reaches the store */
		l3_reap(m);
		idx_save(m);
	}
	srt_twr_destroy(m->w);
	for (size_t i = 0; i < m->l1.cap; i++)
		for (struct l1ent *e = m->l1.b[i], *n; e; e = n) {
			n = e->hnext;
			free(e);
		}
	free(m->l1.b);
	for (struct kent *e = m->l2.head, *n; e; e = n) {
		n = e->next;
		m->cfg.l2_vt->free_page(m->cfg.l2_inst, e->page, m->pools[e->pool].payload);
		free(e);
	}
	free(m->l2.b);
	for (struct kent *e = m->l3.head, *n; e; e = n) {
		n = e->next;
		free(e);
	}
	free(m->l3.b);
	free(m->pools);
	free(m->scratch);
	free(m->tscratch);
	free(m->wscratch);
	pthread_mutex_destroy(&m->l3mu);
	pthread_mutex_destroy(&m->l2mu);
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
	pthread_cond_destroy(&m->done_cv);
	free(m);
}

/* --- requests ------------------------------------------------------------------------------ */

/* Make sure keys of pages [0, np) are computed from the tokens t (length >= np * P). */
static int req_keys(struct srt_tmgr_req *r, const int32_t *t, uint64_t np)
{
	struct srt_tmgr *m = r->m;
	if (np <= r->nkeys)
		return 0;
	if (np > r->keys_cap) {
		uint64_t cap = np > 2 * r->keys_cap ? np : 2 * r->keys_cap;
		for (uint32_t p = 0; p <= m->np; p++) {
			struct srt_key *k = realloc(r->keys[p], cap * sizeof(*k));
			if (!k)
				return SRT_ENOMEM;
			r->keys[p] = k;
		}
		r->keys_cap = cap;
	}
	/* one chain hash per page over its tokens, then one short hash per pool (key.h) */
	struct srt_key *chain = r->keys[m->np];
	for (uint64_t j = r->nkeys; j < np; j++) {
		if (srt_tier_key_chain_next(&m->keyer, j ? &chain[j - 1] : NULL, t + j * m->P,
					    m->P, &chain[j]))
			return SRT_ENOMEM;
		for (uint32_t p = 0; p < m->np; p++)
			if (srt_tier_key_pool(&chain[j], &m->pools[p].tag, &r->keys[p][j]))
				return SRT_ENOMEM;
	}
	r->nkeys = np;
	return 0;
}

/* Record the tree pages [recorded, tree) in the L1 index; apply the write policy. */
/* Is page j in the TAIL window (K pages) before one of the resume points pts[0..n)? */
static int in_window(uint64_t j, const uint64_t *pts, int n, uint32_t K)
{
	for (int i = 0; i < n; i++)
		if (pts[i] && j < pts[i] && j + K >= pts[i])
			return 1;
	return 0;
}

/*
 * Record the tree pages [recorded, tree) in the L1 index and apply the write policy. TAIL-pool
 * pages are kept (flag resume) only in the windows before resume points: this commit point,
 * and `extra` (the request's hit and the point where it left the tree: branch points, where
 * the next requests sharing this prefix resume).
 */
static int req_record(struct srt_tmgr_req *r, uint64_t extra0, uint64_t extra1)
{
	struct srt_tmgr *m = r->m;
	uint64_t tree = srt_rdx_req_tree_tokens(r->r) / m->P;
	if (req_keys(r, srt_rdx_req_tokens(r->r), tree))
		return SRT_ENOMEM;
	uint64_t n = (srt_rdx_req_len(r->r) + m->P - 1) / m->P;
	void **buf = malloc((n ? n : 1) * sizeof(void *));
	if (!buf)
		return SRT_ENOMEM;
	for (uint32_t p = 0; p < m->np; p++) {
		struct srt_page_table pt;
		if (srt_rdx_req_page_table(r->r, p, buf, (uint32_t)n, &pt))
			continue;
		const struct pinfo *pi = &m->pools[p];
		/* new tree pages, and for TAIL pools the window before this commit point */
		uint64_t pts[4] = {tree, extra0 <= tree ? extra0 : 0, extra1 <= tree ? extra1 : 0,
				   r->lower_run <= tree ? r->lower_run : 0};
		uint64_t from = r->recorded;
		for (int i = 0; i < 4 && pi->retention == SRT_RETAIN_TAIL; i++)
			if (pts[i] && pts[i] - (pts[i] > pi->tail_pages ? pi->tail_pages : pts[i]) < from)
				from = pts[i] - (pts[i] > pi->tail_pages ? pi->tail_pages : pts[i]);
		for (uint64_t j = from; j < tree; j++) {
			void *a = buf[j];
			int win = pi->retention == SRT_RETAIN_TAIL && (!m->remat || m->remat_keep_tail) &&
				  (in_window(j, pts, 4, pi->tail_pages) ||
				   (m->cfg.tail_stride &&
				    j + pi->tail_pages >= (j / m->cfg.tail_stride + 1) * m->cfg.tail_stride));
			if (!a || (j < r->recorded && !win))
				continue;
			struct l1ent *e = l1_find(&m->l1, p, a);
			if (e && memcmp(e->key.b, r->keys[p][j].b, SRT_KEY_BYTES)) {
				l1_remove(&m->l1, e); /* a stale record of a reused address */
				free(e);
				e = NULL;
			}
			if (!e) {
				e = calloc(1, sizeof(*e));
				if (!e) {
					free(buf);
					return SRT_ENOMEM;
				}
				e->addr = a;
				e->pool = p;
				e->key = r->keys[p][j];
				if (l1_insert(&m->l1, e)) {
					free(e);
					free(buf);
					return SRT_ENOMEM;
				}
			}
			if (win)
				e->resume = 1;
			int eligible = pi->retention == SRT_RETAIN_ALL || e->resume;
			if (eligible && !e->written && m->cfg.write_policy == SRT_TMGR_WRITE_THROUGH &&
			    (m->has_l2 || m->has_l3)) {
				int known = r->l3k && j < r->l3k_n && r->l3k[p * r->l3k_n + j];
				copy_down(m, p, &e->key, a, 1, known);
				e->written = 1;
			}
		}
	}
	free(buf);
	if (tree > r->recorded)
		r->recorded = tree;
	return 0;
}

/* Count an L1 hit on pages [0, hit) for the write-after-N policy. */
static void req_count_hits(struct srt_tmgr_req *r, uint64_t hit_pages)
{
	struct srt_tmgr *m = r->m;
	if (!hit_pages || m->cfg.write_policy != SRT_TMGR_WRITE_AFTER_HITS ||
	    !(m->has_l2 || m->has_l3))
		return;
	void **buf = malloc(hit_pages * sizeof(void *));
	if (!buf)
		return;
	for (uint32_t p = 0; p < m->np; p++) {
		struct srt_page_table pt;
		if (srt_rdx_req_page_table(r->r, p, buf, (uint32_t)hit_pages, &pt))
			continue;
		for (uint64_t j = 0; j < hit_pages; j++) {
			struct l1ent *e = buf[j] ? l1_find(&m->l1, p, buf[j]) : NULL;
			if (!e)
				continue;
			e->hits++;
			int eligible = m->pools[p].retention == SRT_RETAIN_ALL || e->resume;
			if (eligible && !e->written && e->hits >= m->cfg.write_after_hits) {
				copy_down(m, p, &e->key, buf[j], 1, 0);
				e->written = 1;
			}
		}
	}
	free(buf);
}

/* Is page j of pool p in L2 or L3 (for the lookup)? l3run[p] caches exists() answers. */
/*
 * Is key in L3 as far as this manager knows, without asking the store? Every put this manager
 * queues is in its L3 index from its queueing until it is removed (an eviction queues a remove
 * that cancels a queued put; a failed put is forgotten when reaped, and a page that is gone after
 * all fails to load, which falls back to the longest verified prefix), so the index answers for
 * the write queue without taking the queue's lock, and for this process's stored pages without
 * a store call. While L3 is down only the queue can serve a load.
 */
static int l3_known(struct srt_tmgr *m, const struct srt_key *k, int usable)
{
	if (!m->has_l3)
		return 0;
	if (!usable)
		return srt_twr_has(m->w, k);
	return kt_find(&m->l3, k) != NULL;
}

static int lower_has(struct srt_tmgr *m, struct srt_tmgr_req *r, uint32_t p, uint64_t j)
{
	if (kt_find(&m->l2, &r->keys[p][j]))
		return 1;
	int usable = l3_usable(m);
	if (l3_known(m, &r->keys[p][j], usable))
		return 1;
	if (!usable)
		return 0;
	uint32_t got = 0;
	int rc = srt_tier_store_exists(&m->store, &r->keys[p][j], 1, &got);
	l3_result(m, rc, "exists");
	return !rc && got == 1;
}

/*
 * Longest t (pages) in (h, np] at which the match rule holds over L2 + L3; h if none. Sets
 * r->lower_run to where the ALL pools' run ends: a request that computes past it stores its
 * TAIL pages there, since later requests sharing the same prefix resume there too.
 */
static uint64_t lower_lookup(struct srt_tmgr *m, struct srt_tmgr_req *r, uint64_t h, uint64_t np,
			     int *remat)
{
	uint64_t A = np;
	int usable = l3_usable(m);
	for (uint32_t p = 0; p < m->np && A > h; p++) {
		if (m->pools[p].retention != SRT_RETAIN_ALL)
			continue;
		uint64_t a = h;
		while (a < A) {
			while (a < A && kt_find(&m->l2, &r->keys[p][a]))
				a++;
			if (a >= A)
				break;
			/*
			 * What this manager queued or stored (its L3 index) before the store, page
			 * by page: a page of it that is not stored yet is queued. Asking the store
			 * first and the write queue second raced with the writer: the store said
			 * absent, the writer stored and dequeued the page, and the queue said absent
			 * too (a miss of a page that was in L3 throughout).
			 */
			if (l3_known(m, &r->keys[p][a], usable)) {
				a++;
				continue;
			}
			uint32_t got = 0;
			if (usable) {
				int rc = srt_tier_store_exists(&m->store, &r->keys[p][a],
							       (uint32_t)(A - a), &got);
				l3_result(m, rc, "exists");
				if (rc)
					got = 0;
			}
			a += got;
			if (!got)
				break;
		}
		A = a;
	}
	r->lower_run = A > h ? A : 0;
	*remat = 0;
	uint64_t ts = h; /* the longest t with the TAIL pages stored below L1 */
	if (m->remat && !m->remat_keep_tail)
		goto remat; /* none is stored */
	/* TAIL pools: the window before t; try the longest t first, a bounded number of times */
	int tries = 0;
	for (uint64_t t = A; t > h && tries < 64; t--, tries++) {
		int ok = 1;
		for (uint32_t p = 0; p < m->np && ok; p++) {
			const struct pinfo *pi = &m->pools[p];
			if (pi->retention != SRT_RETAIN_TAIL)
				continue;
			uint64_t lo = t > pi->tail_pages ? t - pi->tail_pages : 0;
			if (lo < h)
				lo = h; /* pages before the L1 hit are in L1, locked */
			for (uint64_t j = lo; j < t && ok; j++)
				ok = lower_has(m, r, p, j);
		}
		if (ok) {
			ts = t;
			break;
		}
	}
remat:
	/* rematerialize at A instead when that costs less than computing [ts, A) */
	if (m->remat && A > ts &&
	    m->remat->cost(m->remat->ctx, A * m->P) < (A - ts) * m->P * m->remat->token_cost) {
		*remat = 1;
		return A;
	}
	return ts;
}

static void req_free_load(struct srt_tmgr_req *r)
{
	for (uint32_t i = 0; i < r->n_items; i++)
		if (r->items[i].l2)
			r->items[i].l2->pins--;
	free(r->items);
	r->items = NULL;
	r->n_items = 0;
}

static void loader_unlink(struct srt_tmgr_req *r)
{
	struct srt_tmgr *m = r->m;
	if (!r->load_to)
		return;
	if (r->lprev)
		r->lprev->lnext = r->lnext;
	else
		m->loaders = r->lnext;
	if (r->lnext)
		r->lnext->lprev = r->lprev;
	r->lprev = r->lnext = NULL;
	r->load_to = 0;
	for (struct srt_tmgr_req *f = r->followers; f; f = f->fnext)
		f->follow = NULL; /* they look up again at their wait */
	r->followers = NULL;
}

static void follower_unlink(struct srt_tmgr_req *r)
{
	if (!r->follow)
		return;
	struct srt_tmgr_req **pp = &r->follow->followers;
	while (*pp != r)
		pp = &(*pp)->fnext;
	*pp = r->fnext;
	r->follow = NULL;
	r->fnext = NULL;
}

/* A request loading page j of this prefix (same key chain) from L3, or NULL. */
static struct srt_tmgr_req *find_loader(struct srt_tmgr *m, const struct srt_tmgr_req *r,
					uint64_t j)
{
	for (struct srt_tmgr_req *a = m->loaders; a; a = a->lnext)
		if (a != r && a->load_from <= j && j < a->load_to && a->nkeys > j &&
		    !memcmp(a->keys[0][j].b, r->keys[0][j].b, SRT_KEY_BYTES))
			return a;
	return NULL;
}

/*
 * Match L1, look the following pages up in L2 / L3 and start loading them (the request's rdx
 * request is new). Used at start and again when a load failed (see srt_tmgr_req_wait).
 */
static int req_begin(struct srt_tmgr_req *r, struct srt_tmgr_hit *hit, char *err, size_t errlen)
{
	struct srt_tmgr *m = r->m;
	const int32_t *tokens = r->tokens;
	uint64_t n = r->n, h1;
	memset(hit, 0, sizeof(*hit));
	atomic_store(&r->done, 0);
	int rc = rdx_start(m, r, tokens, n, &h1, hit, err, errlen);
	if (rc)
		return rc;
	uint64_t P = m->P, hp = h1 / P, np = n / P;
	r->recorded = hp;
	if ((rc = req_keys(r, tokens, np > hp ? np : hp)))
		goto fail;
	if (!r->attempts)
		req_count_hits(r, hp);
	if (!(m->has_l2 || m->has_l3) || np <= hp)
		goto done;
	int remat_lower = 0;
	uint64_t t = lower_lookup(m, r, hp, np, &remat_lower);
	if (t <= hp)
		goto done;
	if (hit->remat_tokens) { /* the L1 rematerialization point moves on to t */
		srt_rdx_req_remat_done(r->r, 0);
		hit->remat_tokens = hit->remat_cost = 0;
	}
	/* (a rematerialized hit loads no TAIL page: it does not share another's load) */
	struct srt_tmgr_req *lead = remat_lower ? NULL : find_loader(m, r, hp);
	if (lead) { /* the same pages are on their way for another request: share them */
		r->follow = lead;
		r->following = 1;
		r->fnext = lead->followers;
		lead->followers = r;
		r->pending = 1;
		m->st.loads_shared++;
		uint64_t upto = lead->load_to < t ? lead->load_to : t;
		hit->l3_tokens = (upto - hp) * P;
		goto done;
	}
	/* pin the L2 pages we will read, so that the eviction inside extend cannot drop them;
	 * each page is looked up once (pinned entries stay), and only the pages the hit reads:
	 * a TAIL pool's window before t, none of it when rematerialized */
	uint64_t span = t - hp;
	struct kent **l2e = calloc(span * m->np, sizeof(*l2e));
	if (!l2e) {
		rc = SRT_ENOMEM;
		snprintf(err, errlen, "tier manager: out of memory");
		goto fail;
	}
	for (uint32_t p = 0; p < m->np && m->has_l2; p++) {
		const struct pinfo *pi = &m->pools[p];
		uint64_t j0 = hp;
		if (pi->retention == SRT_RETAIN_TAIL)
			j0 = remat_lower ? t : t > hp + pi->tail_pages ? t - pi->tail_pages : hp;
		for (uint64_t j = j0; j < t; j++) {
			struct kent *e = kt_find(&m->l2, &r->keys[p][j]);
			if (e)
				e->pins++;
			l2e[p * span + (j - hp)] = e;
		}
	}
	char why[256];
	/* page by page, releasing window pages behind: a long tier hit then holds the TAIL
	 * pages of its last window in L1, not one per page of the hit */
	for (uint64_t j = hp; j < t && !rc; j++) {
		rc = srt_rdx_req_extend(r->r, tokens + j * P, P, why, sizeof(why));
		if (!rc)
			rc = srt_rdx_req_release_window(r->r, NULL, why, sizeof(why));
	}
	void **buf = NULL;
	if (!rc && !(buf = malloc(t * sizeof(void *))))
		rc = SRT_ENOMEM;
	uint32_t cap = 0;
	uint8_t *from_l3 = rc ? NULL : calloc(t, 1);
	if (!rc && !from_l3)
		rc = SRT_ENOMEM;
	for (uint32_t p = 0; p < m->np; p++) {
		struct srt_page_table pt;
		int ok = !rc && !srt_rdx_req_page_table(r->r, p, buf, (uint32_t)t, &pt);
		const struct pinfo *pi = &m->pools[p];
		for (uint64_t j = hp; j < t; j++) {
			struct kent *e = l2e[p * span + (j - hp)];
			if (e)
				e->pins--;
			if (pi->retention == SRT_RETAIN_TAIL && (j + pi->tail_pages < t || remat_lower))
				continue; /* out of the window, or rebuilt by rematerialization */
			if (!ok || !buf[j])
				continue;
			int async_l2 = e && !m->cfg.payload_bytes && m->thr_on;
			if (e) {
				if (!m->cfg.payload_bytes && !async_l2) {
					pthread_mutex_lock(&m->l2mu);
					m->cfg.l2_vt->copy_to_host(m->cfg.l2_inst, buf[j], e->page,
								   (size_t)pi->payload);
					pthread_mutex_unlock(&m->l2mu);
				}
				kt_touch(&m->l2, e);
				m->st.pages_l2_to_l1++;
				m->st.bytes_l2_to_l1 += pi->page_bytes;
				if (!async_l2)
					continue;
			}
			if (r->n_items == cap) {
				cap = cap ? 2 * cap : 64;
				struct item *it = realloc(r->items, cap * sizeof(*it));
				if (!it) {
					rc = SRT_ENOMEM;
					ok = 0;
					continue;
				}
				r->items = it;
			}
			r->items[r->n_items++] = (struct item){.key = r->keys[p][j], .pool = p,
							       .dst = m->cfg.payload_bytes ? NULL : buf[j],
							       .page = j,
							       .l2 = async_l2 ? e : NULL};
			if (async_l2) {
				e->pins++; /* until the copy is waited for (req_free_load) */
				continue;
			}
			from_l3[j] = 1;
		}
	}
	free(buf);
	free(l2e);
	if (rc) {
		/* no room in L1 (or memory): forget the tier hit, keep the L1 hit */
		free(from_l3);
		req_free_load(r);
		srt_rdx_req_abort(r->r, NULL, 0);
		srt_rdx_req_free(r->r);
		r->r = NULL;
		rc = rdx_start(m, r, tokens, n, &h1, hit, err, errlen);
		if (rc)
			goto fail;
		r->recorded = h1 / P;
		goto done;
	}
	if (remat_lower) {
		hit->remat_tokens = t * P;
		hit->remat_cost = m->remat->cost(m->remat->ctx, t * P);
	}
	for (uint64_t j = hp; j < t; j++) {
		if (from_l3[j])
			hit->l3_tokens += P;
		else
			hit->l2_tokens += P;
	}
	free(from_l3);
	r->pending = 1;
	if (r->n_items) { /* a loader: later requests of this prefix follow it */
		r->load_from = hp;
		r->load_to = t;
		r->lprev = NULL;
		r->lnext = m->loaders;
		if (m->loaders)
			m->loaders->lprev = r;
		m->loaders = r;
	}
	if (r->n_items && m->thr_on) {
		r->queued = 1;
		r->qnext = NULL;
		pthread_mutex_lock(&m->mu);
		if (m->qtail)
			m->qtail->qnext = r;
		else
			m->qhead = r;
		m->qtail = r;
		pthread_cond_broadcast(&m->cv);
		pthread_mutex_unlock(&m->mu);
	} else if (r->n_items) {
		load_items(m, r, m->tscratch);
		atomic_store(&r->done, 1);
	} else {
		atomic_store(&r->done, 1);
	}
done:
	if (!m->remat)
		hit->strict_tokens = hit->l1_tokens + hit->l2_tokens + hit->l3_tokens;
	r->hit = *hit;
	r->hit_pages = (hit->l1_tokens + hit->l2_tokens + hit->l3_tokens) / P;
	return 0;
fail:
	return rc;
}


int srt_tmgr_req_start(struct srt_tmgr *m, const int32_t *tokens, uint64_t n,
		       struct srt_tmgr_req **out, struct srt_tmgr_hit *hit, char *err,
		       size_t errlen)
{
	assert(m->c);
	*out = NULL;
	memset(hit, 0, sizeof(*hit));
	struct srt_tmgr_req *r = calloc(1, sizeof(*r));
	if (!r || !(r->keys = calloc(m->np + 1, sizeof(*r->keys))) ||
	    !(r->tokens = malloc((n ? n : 1) * sizeof(int32_t)))) {
		if (r)
			free(r->keys);
		free(r);
		snprintf(err, errlen, "tier manager: out of memory");
		return SRT_ENOMEM;
	}
	r->m = m;
	l3_reap(m);
	memcpy(r->tokens, tokens, n * sizeof(int32_t));
	r->n = n;
	int rc = req_begin(r, hit, err, errlen);
	if (rc) {
		srt_tmgr_req_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

int srt_tmgr_req_ready(const struct srt_tmgr_req *r)
{
	return !r->pending;
}

static void wait_done(struct srt_tmgr_req *r)
{
	struct srt_tmgr *m = r->m;
	if (!r->queued)
		return;
	pthread_mutex_lock(&m->mu);
	/* still in the queue (the thread has not taken it, and is not held): load it here rather
	 * than sleep until the thread gets to it (in a sequential replay every load was two
	 * context switches on the request path) */
	if (!m->hold && !atomic_load(&r->done)) {
		struct srt_tmgr_req **pp = &m->qhead, *prev = NULL;
		while (*pp && *pp != r) {
			prev = *pp;
			pp = &(*pp)->qnext;
		}
		if (*pp == r) {
			*pp = r->qnext;
			if (m->qtail == r)
				m->qtail = prev;
			r->qnext = NULL;
			pthread_mutex_unlock(&m->mu);
			load_items(m, r, m->wscratch);
			pthread_mutex_lock(&m->mu);
			atomic_store(&r->done, 1);
		}
	}
	while (!atomic_load(&r->done))
		pthread_cond_wait(&m->done_cv, &m->mu);
	pthread_mutex_unlock(&m->mu);
	r->queued = 0;
}

int srt_tmgr_req_wait(struct srt_tmgr_req *r, struct srt_tmgr_hit *hit, char *err,
		      size_t errlen)
{
	struct srt_tmgr *m = r->m;
	if (!r->pending) {
		if (!r->counted) {
			m->st.hit_tokens[0] += r->hit.l1_tokens;
			r->counted = 1;
		}
		if (hit)
			*hit = r->hit;
		return 0;
	}
	if (r->following) {
		/* wait for the loader, which commits the shared pages to the tree, then match
		 * again: they are an L1 hit now (or, if the loader went away, found again below) */
		struct srt_tmgr_req *lead = r->follow;
		follower_unlink(r);
		r->following = 0;
		r->pending = 0;
		if (lead) {
			char why[256];
			srt_tmgr_req_wait(lead, NULL, why, sizeof(why));
		}
		srt_rdx_req_abort(r->r, NULL, 0);
		srt_rdx_req_free(r->r);
		r->r = NULL;
		struct srt_tmgr_hit h2;
		int rc = req_begin(r, &h2, err, errlen);
		if (rc)
			return rc;
		return srt_tmgr_req_wait(r, hit, err, errlen);
	}
	wait_done(r);
	loader_unlink(r);
	r->pending = 0;
	int failed = 0;
	for (uint32_t i = 0; i < r->n_items; i++) {
		struct item *it = &r->items[i];
		if (it->l2) {
			failed |= !it->ok;
			continue;
		}
		if (it->ok) {
			l3_note(m, &it->key, it->pool);
			m->st.pages_l3_to_l1++;
			m->st.bytes_l3_to_l1 += m->pools[it->pool].page_bytes;
		} else {
			failed = 1;
			l3_forget(m, &it->key);
		}
	}
	if (!failed && r->n_items && !r->l3k && (r->l3k = calloc(m->np * r->nkeys, 1))) {
		r->l3k_n = r->nkeys;
		for (uint32_t i = 0; i < r->n_items; i++) {
			const struct item *it = &r->items[i];
			if (!it->l2 && it->page < r->l3k_n)
				r->l3k[it->pool * r->l3k_n + it->page] = 1;
		}
	}
	req_free_load(r);
	int rc = 0;
	if (failed && !r->attempts) {
		/* the pages that failed are gone from the store (a corrupt object is removed, an
		 * absent one is absent): a second lookup finds the longest prefix that L1 + L2 + L3
		 * can still serve, which is what this request falls back to */
		uint64_t had = r->hit.l2_tokens + r->hit.l3_tokens;
		m->st.loads_failed++;
		m->st.loads_retried++;
		srt_rdx_req_abort(r->r, NULL, 0);
		srt_rdx_req_free(r->r);
		r->r = NULL;
		r->attempts++;
		struct srt_tmgr_hit h2;
		rc = req_begin(r, &h2, err, errlen);
		if (rc)
			return rc;
		LOG(m, SRT_LOG_INFO, "a tier hit of %" PRIu64 " tokens failed to load: falling back "
		    "to the longest prefix still held (%" PRIu64 " tokens from L2/L3)", had,
		    h2.l2_tokens + h2.l3_tokens);
		return srt_tmgr_req_wait(r, hit, err, errlen);
	}
	if (failed) {
		m->st.loads_failed++;
		LOG(m, SRT_LOG_INFO, "a tier hit of %" PRIu64 " tokens failed to load: recomputing",
		    r->hit.l2_tokens + r->hit.l3_tokens);
		srt_rdx_req_abort(r->r, NULL, 0);
		srt_rdx_req_free(r->r);
		r->r = NULL;
		uint64_t h1;
		memset(&r->hit, 0, sizeof(r->hit));
		rc = rdx_start(m, r, r->tokens, r->n, &h1, &r->hit, err, errlen);
		r->hit_pages = r->hit.l1_tokens / m->P;
		r->recorded = h1 / m->P;
	} else {
		rc = srt_rdx_req_commit(r->r, NULL, err, errlen);
		if (!rc)
			rc = req_record(r, 0, 0);
	}
	free(r->l3k);
	r->l3k = NULL;
	if (!rc) {
		r->counted = 1;
		m->st.hit_tokens[0] += r->hit.l1_tokens;
		m->st.hit_tokens[1] += r->hit.l2_tokens;
		m->st.hit_tokens[2] += r->hit.l3_tokens;
	}
	if (hit)
		*hit = r->hit;
	return rc;
}

struct srt_rdx_req *srt_tmgr_req_rdx(struct srt_tmgr_req *r)
{
	return r->r;
}

int srt_tmgr_req_commit(struct srt_tmgr_req *r, uint64_t *cached_tokens, char *err,
			size_t errlen)
{
	assert(!r->pending);
	uint64_t cached = 0;
	int rc = srt_rdx_req_commit(r->r, &cached, err, errlen);
	if (cached_tokens)
		*cached_tokens = cached;
	uint64_t branch = 0;
	if (!rc && !r->branch_done) {
		branch = cached / r->m->P; /* where this request left the tree */
		r->branch_done = 1;
	}
	if (!rc && (rc = req_record(r, branch, r->hit_pages)))
		snprintf(err, errlen, "tier manager: out of memory");
	return rc;
}

int srt_tmgr_req_finish(struct srt_tmgr_req *r, uint64_t *cached_tokens, char *err,
			size_t errlen)
{
	assert(!r->pending);
	int rc = srt_tmgr_req_commit(r, cached_tokens, err, errlen);
	if (!rc)
		rc = srt_rdx_req_finish(r->r, NULL, err, errlen);
	if (!rc)
		r->finished = 1;
	return rc;
}

int srt_tmgr_req_abort(struct srt_tmgr_req *r, char *err, size_t errlen)
{
	wait_done(r);
	loader_unlink(r);
	follower_unlink(r);
	r->following = 0;
	r->pending = 0;
	req_free_load(r);
	return srt_rdx_req_abort(r->r, err, errlen);
}

void srt_tmgr_req_free(struct srt_tmgr_req *r)
{
	if (!r)
		return;
	wait_done(r);
	loader_unlink(r);
	follower_unlink(r);
	req_free_load(r);
	if (r->r)
		srt_rdx_req_free(r->r);
	if (r->keys)
		for (uint32_t p = 0; p <= r->m->np; p++)
			free(r->keys[p]);
	free(r->keys);
	free(r->tokens);
	free(r);
}

int srt_tmgr_page_key(const struct srt_tmgr *m, uint32_t pool, const int32_t *tokens,
		      uint64_t page, struct srt_key *out)
{
	if (pool >= m->np)
		return SRT_EINVAL;
	struct srt_key chain, prev;
	for (uint64_t j = 0; j <= page; j++) {
		if (srt_tier_key_chain_next(&m->keyer, j ? &prev : NULL, tokens + j * m->P, m->P,
					    &chain))
			return SRT_ENOMEM;
		prev = chain;
	}
	return srt_tier_key_pool(&chain, &m->pools[pool].tag, out) ? SRT_ENOMEM : 0;
}

/* --- stats and checks --------------------------------------------------------------------- */

void srt_tmgr_stats(const struct srt_tmgr *m, struct srt_tmgr_stats *out)
{
	*out = m->st;
	out->l2_bytes = m->l2.bytes;
	out->l2_peak = m->l2.peak;
	out->l2_budget = m->has_l2 ? m->l2.budget : 0;
	out->l2_pages = m->l2.n;
	out->l3_bytes = m->l3.bytes;
	out->l3_peak = m->l3.peak;
	out->l3_budget = m->has_l3 ? m->l3.budget : 0;
	out->l3_objects = m->l3.n;
	out->pages_verified = atomic_load(&((struct srt_tmgr *)m)->verified);
	out->l3_skipped = atomic_load(&((struct srt_tmgr *)m)->skipped);
	out->l3_rejected = m->has_l3 ? atomic_load(&((struct srt_tmgr *)m)->store.rejected) : 0;
	if (m->w) {
		struct srt_twr_stats ws;
		srt_twr_stats(m->w, &ws);
		out->l3_puts_queued = ws.puts_queued;
		out->l3_puts_written = ws.puts_written;
		out->l3_puts_lost = ws.puts_lost;
		out->l3_puts_dropped = ws.puts_dropped;
		out->l3_write_batches = ws.batches;
		out->l3_write_waits = ws.waits;
		out->l3_write_wait_s = ws.wait_s;
		out->l3_queue_peak = ws.queue_peak;
		out->l3_queue_reads = ws.read_hits;
		out->l3_queued_now = ws.queued_now;
	}
}

int srt_tmgr_check(const struct srt_tmgr *m, char *err, size_t errlen)
{
	const struct ktab *ts[2] = {&m->l2, &m->l3};
	const char *names[2] = {"L2", "L3"};
	for (int k = 0; k < 2; k++) {
		const struct ktab *t = ts[k];
		uint64_t b = 0, n = 0, used = 0;
		for (const struct kent *e = t->head; e; e = e->next) {
			b += e->bytes;
			n++;
			if (kt_find(t, &e->key) != e) {
				snprintf(err, errlen, "%s index: entry %" PRIu64 " of the LRU list is "
						      "not found by its key", names[k], n);
				return SRT_ECORRUPT;
			}
		}
		for (size_t i = 0; i < t->cap; i++)
			used += t->b[i].e != NULL;
		if (used != n) {
			snprintf(err, errlen, "%s index: %" PRIu64 " slots used for %" PRIu64
					      " entries", names[k], used, n);
			return SRT_ECORRUPT;
		}
		if (b != t->bytes || n != t->n) {
			snprintf(err, errlen, "%s index: %" PRIu64 " bytes in %" PRIu64
					      " entries, counted %" PRIu64 " in %zu",
				 names[k], b, n, t->bytes, t->n);
			return SRT_ECORRUPT;
		}
		if (t->bytes > t->budget || t->peak > t->budget) {
			snprintf(err, errlen, "%s holds %" PRIu64 " bytes (peak %" PRIu64
					      ") over its budget %" PRIu64,
				 names[k], t->bytes, t->peak, t->budget);
			return SRT_ECORRUPT;
		}
	}
	return 0;
}
