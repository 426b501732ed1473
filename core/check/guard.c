/* Guard-page page allocator (see guard.h). */
#include "check/guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#define CANARY 0xA5u

struct gpage {
	uint8_t *map;   /* the whole mapping */
	size_t map_len;
	uint8_t *page;  /* what the cache got */
	size_t bytes;   /* its size */
	size_t rounded; /* bytes rounded up to 64 */
	uint32_t pool;
};

struct srt_guard {
	struct srt_rdx_allocator alloc;
	struct gpage *v;
	size_t n, cap;
	uint64_t handed, damaged;
	char first[256];
};

static size_t pagesz(void)
{
	long p = sysconf(_SC_PAGESIZE);
	return p > 0 ? (size_t)p : 4096;
}

static int canary_ok(const struct gpage *p, char *why, size_t len)
{
	size_t ps = pagesz();
	const uint8_t *lead = p->map + ps;
	for (const uint8_t *c = lead; c < p->page; c++)
		if (*c != CANARY) {
			snprintf(why, len, "pool %u: a write %td bytes before the start of a %zu-byte "
				 "page", p->pool, p->page - c, p->bytes);
			return 0;
		}
	for (size_t i = p->bytes; i < p->rounded; i++)
		if (p->page[i] != CANARY) {
			snprintf(why, len, "pool %u: a write %zu bytes past the end of a %zu-byte page",
				 p->pool, i - p->bytes + 1, p->bytes);
			return 0;
		}
	return 1;
}

static int g_alloc(void *ctx, uint32_t pool, size_t bytes, void **page)
{
	struct srt_guard *g = ctx;
	size_t ps = pagesz();
	size_t rounded = (bytes + 63) & ~(size_t)63;
	size_t body = (rounded + ps - 1) / ps * ps;
	size_t len = body + 2 * ps;
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 256;
		struct gpage *nv = realloc(g->v, cap * sizeof(*nv));
		if (!nv)
			return SRT_ENOMEM;
		g->v = nv;
		g->cap = cap;
	}
	uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return SRT_ENOMEM;
	if (mprotect(m, ps, PROT_NONE) || mprotect(m + ps + body, ps, PROT_NONE)) {
		munmap(m, len);
		return SRT_ENOMEM;
	}
	struct gpage *p = &g->v[g->n++];
	p->map = m;
	p->map_len = len;
	p->page = m + ps + body - rounded;
	p->bytes = bytes;
	p->rounded = rounded;
	p->pool = pool;
	memset(m + ps, CANARY, body - rounded);
	memset(p->page + bytes, CANARY, rounded - bytes);
	g->handed++;
	*page = p->page;
	return 0;
}

static void g_free(void *ctx, uint32_t pool, void *page, size_t bytes)
{
	struct srt_guard *g = ctx;
	(void)pool, (void)bytes;
	for (size_t i = 0; i < g->n; i++) {
		if (g->v[i].page != page)
			continue;
		char why[256];
		if (!canary_ok(&g->v[i], why, sizeof(why)) && !g->damaged++)
			snprintf(g->first, sizeof(g->first), "%s", why);
		munmap(g->v[i].map, g->v[i].map_len);
		g->v[i] = g->v[--g->n];
		return;
	}
}

int srt_guard_create(struct srt_guard **out)
{
	struct srt_guard *g = calloc(1, sizeof(*g));
	if (!g)
		return SRT_ENOMEM;
	g->alloc.ctx = g;
	g->alloc.alloc = g_alloc;
	g->alloc.free = g_free;
	*out = g;
	return 0;
}

const struct srt_rdx_allocator *srt_guard_allocator(struct srt_guard *g)
{
	return &g->alloc;
}

uint64_t srt_guard_verify(struct srt_guard *g, char *msg, size_t len)
{
	uint64_t bad = g->damaged;
	for (size_t i = 0; i < g->n; i++) {
		char why[256];
		if (!canary_ok(&g->v[i], why, sizeof(why)) && !bad++)
			snprintf(g->first, sizeof(g->first), "%s", why);
	}
	snprintf(msg, len, "%s", bad ? g->first : "");
	return bad;
}

uint64_t srt_guard_pages(const struct srt_guard *g)
{
	return g->handed;
}

int srt_guard_is_guard(const struct srt_guard *g, const void *addr)
{
	size_t ps = pagesz();
	const uint8_t *a = addr;
	for (size_t i = 0; i < g->n; i++) {
		const struct gpage *p = &g->v[i];
		if ((a >= p->map && a < p->map + ps) ||
		    (a >= p->map + p->map_len - ps && a < p->map + p->map_len))
			return 1;
	}
	return 0;
}

void srt_guard_destroy(struct srt_guard *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n; i++)
		munmap(g->v[i].map, g->v[i].map_len);
	free(g->v);
	free(g);
}
