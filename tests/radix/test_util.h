/* Shared helpers of the radix tests: a checking page allocator and token generators. */
#ifndef SRT_TEST_RADIX_UTIL_H
#define SRT_TEST_RADIX_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "radix/radix.h"

static inline uint64_t tu_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * Allocator that checks: every page has a header (magic, pool), frees of dead or foreign
 * pages are counted as errors, freed pages are poisoned and kept (quarantine) so reading a
 * freed page is defined and detectable. Live bytes are counted per pool independently of the
 * cache.
 */
#define TU_LIVE 0x4c4956454c495645ull
#define TU_DEAD 0xdeaddeaddeaddeadull
struct tu_hdr {
	uint64_t magic;
	uint32_t pool, pad;
	uint64_t bytes, pad2;
};
struct tu_alloc {
	uint64_t live_bytes[SRT_RDX_MAX_POOLS];
	uint64_t live_pages, errors;
	void **quarantine;
	size_t nq, capq;
};
static int tu_alloc_fn(void *ctx, uint32_t pool, size_t bytes, void **page)
{
	struct tu_alloc *a = ctx;
	struct tu_hdr *h = malloc(sizeof(*h) + (bytes < 8 ? 8 : bytes));
	if (!h)
		return SRT_ENOMEM;
	h->magic = TU_LIVE;
	h->pool = pool;
	h->bytes = bytes;
	memset(h + 1, 0, bytes);
	a->live_bytes[pool] += bytes;
	a->live_pages++;
	*page = h + 1;
	return 0;
}
static void tu_free_fn(void *ctx, uint32_t pool, void *page, size_t bytes)
{
	struct tu_alloc *a = ctx;
	struct tu_hdr *h = (struct tu_hdr *)page - 1;
	if (h->magic != TU_LIVE || h->pool != pool || h->bytes != bytes) {
		a->errors++;
		return;
	}
	h->magic = TU_DEAD;
	uint64_t poison = TU_DEAD;
	memcpy(page, &poison, sizeof(poison));
	a->live_bytes[pool] -= bytes;
	a->live_pages--;
	if (a->nq == a->capq) {
		a->capq = a->capq ? 2 * a->capq : 1024;
		a->quarantine = realloc(a->quarantine, a->capq * sizeof(void *));
	}
	a->quarantine[a->nq++] = h;
}
static inline int tu_is_live(const void *page)
{
	return ((const struct tu_hdr *)page - 1)->magic == TU_LIVE;
}
static inline void tu_alloc_done(struct tu_alloc *a)
{
	for (size_t i = 0; i < a->nq; i++)
		free(a->quarantine[i]);
	free(a->quarantine);
	a->quarantine = NULL;
	a->nq = a->capq = 0;
}
static inline struct srt_rdx_allocator tu_allocator(struct tu_alloc *a)
{
	struct srt_rdx_allocator al = {a, tu_alloc_fn, tu_free_fn};
	return al;
}

static inline struct srt_pool_decl tu_pool(const char *name, uint32_t ratio, uint32_t retention,
					   uint32_t tail, uint64_t entry_bytes, uint32_t n_layers)
{
	struct srt_pool_decl d;
	memset(&d, 0, sizeof(d));
	d.struct_size = sizeof(d);
	strncpy(d.name, name, SRT_POOL_NAME_MAX - 1);
	d.ratio = ratio;
	d.retention = retention;
	d.tail_tokens = tail;
	d.entry_bytes = entry_bytes;
	d.n_layers = n_layers;
	return d;
}

#endif
