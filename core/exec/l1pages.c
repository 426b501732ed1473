/* L1 page slabs (l1pages.h). */
#include "exec/l1pages.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <shadowrt/plugin.h>

#include "ops/hugemap.h"
#include "radix/radix.h"

#define L1_ALIGN SRT_HUGE_BYTES /* slab alignment and size unit: one huge page */
#define L1_MAXCLS 64               /* page sizes (the radix cache has at most 64 pools) */
#define L1_MAXK 64                 /* pages a slab of large pages may hold */

struct l1_slab {
	uint8_t *base;
	size_t len;      /* bytes mapped */
	size_t cls;      /* its page size's index */
	size_t npages;   /* pages it holds */
	size_t carved;   /* pages handed out in address order so far */
	size_t used;     /* pages handed out and not freed */
	void *free;      /* freed pages: each holds the next one's address */
};

struct l1_class {
	size_t bytes;         /* page size, a multiple of 64 */
	size_t slab_len;      /* bytes of each of its slabs */
	struct l1_slab *hint; /* a slab of this size with room, or NULL */
};

struct srt_l1_pages {
	struct srt_rdx_allocator a;
	pthread_mutex_t mu; /* the radix cache calls from one thread; cheap insurance */
	int huge;
	struct l1_class cls[L1_MAXCLS];
	size_t ncls;
	struct l1_slab **slabs; /* by base address */
	size_t n, cap;
	size_t mapped, in_use;
};

static size_t round_up(size_t x, size_t a)
{
	return (x + a - 1) / a * a;
}

/* The slab size for pages of `bytes`: one 2 MiB slab when a page is at most 1/16 of it (less
 * than a page left over), else the multiple of 2 MiB holding k <= L1_MAXK pages that leaves
 * the least over per page mapped (at most 1/16 where some k does). */
static size_t slab_len_for(size_t bytes)
{
	if (bytes <= L1_ALIGN / 16)
		return L1_ALIGN;
	size_t best = 0;
	double best_waste = 2.0;
	for (size_t k = 1; k <= L1_MAXK; k++) {
		if (bytes > SIZE_MAX / k - L1_ALIGN)
			break;
		size_t len = round_up(k * bytes, L1_ALIGN);
		double waste = (double)(len - k * bytes) / (double)len;
		if (waste < best_waste) {
			best_waste = waste;
			best = len;
		}
		if (waste <= 1.0 / 16)
			break;
	}
	return best;
}

static int has_room(const struct l1_slab *s)
{
	return s->free || s->carved < s->npages;
}

/* Index of the first slab whose base is above p. */
static size_t slab_upper(const struct srt_l1_pages *lp, const void *p)
{
	size_t lo = 0, hi = lp->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if ((const uint8_t *)p < lp->slabs[mid]->base)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static struct l1_slab *slab_map(struct srt_l1_pages *lp, size_t ci)
{
	const struct l1_class *c = &lp->cls[ci];
	if (lp->n == lp->cap) {
		size_t cap = lp->cap ? 2 * lp->cap : 16;
		struct l1_slab **v = realloc(lp->slabs, cap * sizeof(*v));
		if (!v)
			return NULL;
		lp->slabs = v;
		lp->cap = cap;
	}
	struct l1_slab *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	/* advised onto huge pages (a hint), reserved: no memory -> SRT_ENOMEM here */
	uint8_t *a = srt_map_huge_aligned(c->slab_len, lp->huge, 1);
	if (!a) {
		free(s);
		return NULL;
	}
	*s = (struct l1_slab){.base = a, .len = c->slab_len, .cls = ci,
			      .npages = c->slab_len / c->bytes};
	size_t at = slab_upper(lp, a);
	memmove(lp->slabs + at + 1, lp->slabs + at, (lp->n - at) * sizeof(*lp->slabs));
	lp->slabs[at] = s;
	lp->n++;
	lp->mapped += s->len;
	return s;
}

static void slab_unmap(struct srt_l1_pages *lp, size_t at)
{
	struct l1_slab *s = lp->slabs[at];
	if (lp->cls[s->cls].hint == s)
		lp->cls[s->cls].hint = NULL;
	munmap(s->base, s->len);
	lp->mapped -= s->len;
	memmove(lp->slabs + at, lp->slabs + at + 1, (lp->n - at - 1) * sizeof(*lp->slabs));
	lp->n--;
	free(s);
}

static int alloc_locked(struct srt_l1_pages *lp, size_t bytes, void **page)
{
	if (bytes > SIZE_MAX / 2)
		return SRT_ENOMEM;
	const size_t sz = round_up(bytes ? bytes : 1, 64);
	size_t ci = 0;
	while (ci < lp->ncls && lp->cls[ci].bytes != sz)
		ci++;
	if (ci == lp->ncls) {
		if (lp->ncls == L1_MAXCLS)
			return SRT_ENOMEM;
		size_t len = slab_len_for(sz);
		if (!len)
			return SRT_ENOMEM;
		lp->cls[lp->ncls++] = (struct l1_class){.bytes = sz, .slab_len = len};
	}
	struct l1_class *c = &lp->cls[ci];
	struct l1_slab *s = c->hint;
	if (!s || !has_room(s)) {
		s = NULL;
		for (size_t i = 0; i < lp->n && !s; i++)
			if (lp->slabs[i]->cls == ci && has_room(lp->slabs[i]))
				s = lp->slabs[i];
		if (!s && !(s = slab_map(lp, ci)))
			return SRT_ENOMEM;
		c->hint = s;
	}
	void *p;
	if (s->free) { /* a page used before: zeroed again */
		p = s->free;
		memcpy(&s->free, p, sizeof(s->free));
		memset(p, 0, sz);
	} else { /* never touched: zero as mapped */
		p = s->base + s->carved++ * sz;
	}
	s->used++;
	lp->in_use++;
	*page = p;
	return 0;
}

static void free_locked(struct srt_l1_pages *lp, void *page)
{
	size_t at = slab_upper(lp, page);
	assert(at > 0 && (uint8_t *)page < lp->slabs[at - 1]->base + lp->slabs[at - 1]->len);
	if (at == 0)
		return; /* not ours: never happens with the radix cache */
	struct l1_slab *s = lp->slabs[at - 1];
	memcpy(page, &s->free, sizeof(s->free));
	s->free = page;
	s->used--;
	lp->in_use--;
	if (s->used > 0)
		return;
	/* all free: unmapped unless it is its size's only slab with room */
	for (size_t i = 0; i < lp->n; i++) {
		struct l1_slab *o = lp->slabs[i];
		if (o != s && o->cls == s->cls && has_room(o)) {
			slab_unmap(lp, at - 1);
			return;
		}
	}
}

static int l1_alloc(void *ctx, uint32_t pool, size_t bytes, void **page)
{
	struct srt_l1_pages *lp = ctx;
	(void)pool;
	pthread_mutex_lock(&lp->mu);
	int rc = alloc_locked(lp, bytes, page);
	pthread_mutex_unlock(&lp->mu);
	return rc;
}

static void l1_free(void *ctx, uint32_t pool, void *page, size_t bytes)
{
	struct srt_l1_pages *lp = ctx;
	(void)pool, (void)bytes;
	if (!page)
		return;
	pthread_mutex_lock(&lp->mu);
	free_locked(lp, page);
	pthread_mutex_unlock(&lp->mu);
}

struct srt_l1_pages *srt_l1_pages_create(int huge)
{
	struct srt_l1_pages *lp = calloc(1, sizeof(*lp));
	if (!lp)
		return NULL;
	pthread_mutex_init(&lp->mu, NULL);
	lp->huge = huge;
	lp->a = (struct srt_rdx_allocator){lp, l1_alloc, l1_free};
	return lp;
}

void srt_l1_pages_destroy(struct srt_l1_pages *lp)
{
	if (!lp)
		return;
	while (lp->n)
		slab_unmap(lp, lp->n - 1);
	free(lp->slabs);
	pthread_mutex_destroy(&lp->mu);
	free(lp);
}

const struct srt_rdx_allocator *srt_l1_pages_allocator(struct srt_l1_pages *lp)
{
	return &lp->a;
}

void srt_l1_pages_stats(struct srt_l1_pages *lp, struct srt_l1_pages_stats *st)
{
	pthread_mutex_lock(&lp->mu);
	*st = (struct srt_l1_pages_stats){.mapped = lp->mapped, .slabs = lp->n,
					  .in_use = lp->in_use, .classes = lp->ncls};
	pthread_mutex_unlock(&lp->mu);
}
