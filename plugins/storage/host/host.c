/*
 * Tier plugin "host": page arenas in host memory, for L1 on CPU runs and for L2.
 *
 * Pages of one size come from slabs of that size class: a slab is one mmap of many pages.
 * Mapping is lazy: a new slab is not touched; its pages are carved off in address order as they
 * are handed out, so only pages that were allocated ever become resident. Pages freed back sit
 * on an intrusive free list (they were touched already). The budget (set_budget, ABI 1.1, which
 * the core calls with the tier's budget; else option `budget`, bytes; default unlimited) bounds
 * the bytes of all slabs mapped, and so the resident memory: an allocation that would need a
 * slab beyond it first unmaps completely free slabs of every class, then gets a smaller slab
 * that fits, and fails with SRT_ENOMEM when not even one page fits. A slab is at most an eighth
 * of the budget (at least one page), so several page sizes share a small budget. Option
 * `hugepages = on` makes slabs 2 MiB aligned multiples of 2 MiB and asks for transparent huge
 * pages (madvise MADV_HUGEPAGE) where at least 2 MiB of budget is left; smaller slabs use base
 * pages. Option `slab_bytes` sets the preferred slab size (default 32 MiB).
 *
 * Thread safety: the arena methods are called from one thread at a time (tier.h); `usage` may
 * be read from any thread (counters are atomic).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <shadowrt/plugin.h>
#include <shadowrt/tier.h>

#define NAME "host"
#define HUGE_BYTES ((size_t)2 << 20)
#define STRIDE_ALIGN 64

struct slab {
	uint8_t *base;   /* first page */
	size_t map_len;  /* bytes mapped from base (the budget counts these) */
	uint32_t n_pages, n_used;
	uint32_t n_carved; /* pages [0, n_carved) were handed out at least once (touched) */
};

struct size_class {
	size_t bytes, stride;
	struct slab *slabs; /* sorted by base */
	uint32_t n_slabs, cap_slabs;
	void *free_list;    /* freed pages; each holds the pointer to the next */
	uint32_t carve_from; /* a slab that may still have uncarved pages (hint) */
};

struct host_arena {
	const struct srt_host *host;
	size_t budget, slab_bytes;
	int hugepages;
	size_t mapped;
	struct size_class *classes;
	uint32_t n_classes, cap_classes;
	_Atomic uint64_t used_bytes, used_pages;
};

static int parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	else if (*end == 'g' || *end == 'G')
		v <<= 30, end++;
	if (*end)
		return -1;
	*out = (size_t)v;
	return 0;
}

static const char *opt(const struct srt_plugin_args *a, const char *key)
{
	return a->option ? a->option(a->option_ctx, key) : NULL;
}

static int host_create(const struct srt_host *host, const struct srt_plugin_args *args,
		       void **instance, char *why, size_t why_len)
{
	struct host_arena *a = calloc(1, sizeof(*a));
	const char *v;

	if (!a) {
		snprintf(why, why_len, "out of memory");
		return SRT_ENOMEM;
	}
	a->host = host;
	a->budget = SIZE_MAX;
	a->slab_bytes = (size_t)32 << 20;
	if ((v = opt(args, "budget")) && parse_size(v, &a->budget)) {
		snprintf(why, why_len, "option budget = '%s': expected bytes (e.g. 1073741824 or 1G)", v);
		goto fail;
	}
	if ((v = opt(args, "slab_bytes")) && (parse_size(v, &a->slab_bytes) || !a->slab_bytes)) {
		snprintf(why, why_len, "option slab_bytes = '%s': expected a positive byte count", v);
		goto fail;
	}
	if ((v = opt(args, "hugepages"))) {
		if (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "1"))
			a->hugepages = 1;
		else if (strcmp(v, "off") && strcmp(v, "false") && strcmp(v, "0")) {
			snprintf(why, why_len, "option hugepages = '%s': expected on or off", v);
			goto fail;
		}
	}
	*instance = a;
	return 0;
fail:
	free(a);
	return SRT_EINVAL;
}

static void host_destroy(void *inst)
{
	struct host_arena *a = inst;
	for (uint32_t c = 0; c < a->n_classes; c++) {
		struct size_class *sc = &a->classes[c];
		for (uint32_t i = 0; i < sc->n_slabs; i++)
			munmap(sc->slabs[i].base, sc->slabs[i].map_len);
		free(sc->slabs);
	}
	free(a->classes);
	free(a);
}

static struct size_class *find_class(struct host_arena *a, size_t bytes, int create)
{
	for (uint32_t c = 0; c < a->n_classes; c++)
		if (a->classes[c].bytes == bytes)
			return &a->classes[c];
	if (!create)
		return NULL;
	if (a->n_classes == a->cap_classes) {
		uint32_t cap = a->cap_classes ? 2 * a->cap_classes : 4;
		struct size_class *nc = realloc(a->classes, cap * sizeof(*nc));
		if (!nc)
			return NULL;
		a->classes = nc;
		a->cap_classes = cap;
	}
	struct size_class *sc = &a->classes[a->n_classes++];
	memset(sc, 0, sizeof(*sc));
	sc->bytes = bytes;
	sc->stride = (bytes + STRIDE_ALIGN - 1) / STRIDE_ALIGN * STRIDE_ALIGN;
	return sc;
}

/* Index of the slab holding p, or -1. */
static int32_t slab_of(const struct size_class *sc, const void *p)
{
	uint32_t lo = 0, hi = sc->n_slabs;
	const uint8_t *q = p;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		const struct slab *s = &sc->slabs[mid];
		if (q < s->base)
			hi = mid;
		else if (q >= s->base + (size_t)s->n_pages * sc->stride)
			lo = mid + 1;
		else
			return (int32_t)mid;
	}
	return -1;
}

/* Drop slab i of sc (all its pages are free): unlink its pages from the free list, unmap it. */
static void release_slab(struct host_arena *a, struct size_class *sc, uint32_t i)
{
	struct slab *s = &sc->slabs[i];
	uint8_t *lo = s->base, *hi = s->base + (size_t)s->n_pages * sc->stride;
	void **link = &sc->free_list;
	while (*link) {
		uint8_t *p = *link;
		if (p >= lo && p < hi)
			*link = *(void **)p;
		else
			link = (void **)p;
	}
	munmap(s->base, s->map_len);
	a->mapped -= s->map_len;
	memmove(s, s + 1, (sc->n_slabs - i - 1) * sizeof(*s));
	sc->n_slabs--;
}

static void release_free_slabs(struct host_arena *a)
{
	for (uint32_t c = 0; c < a->n_classes; c++) {
		struct size_class *sc = &a->classes[c];
		for (uint32_t i = sc->n_slabs; i-- > 0;)
			if (!sc->slabs[i].n_used)
				release_slab(a, sc, i);
	}
}

static size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

/* Map a new slab for sc within the budget; 0 or SRT_ENOMEM. */
static int grow(struct host_arena *a, struct size_class *sc)
{
	size_t pref = a->slab_bytes;
	if (a->budget != SIZE_MAX && pref > a->budget / 8)
		pref = a->budget / 8; /* several classes share the budget */
	if (pref < sc->stride)
		pref = sc->stride;
	size_t room = a->budget > a->mapped ? a->budget - a->mapped : 0;
	if (room < round_up(pref, 4096))
		release_free_slabs(a);
	room = a->budget > a->mapped ? a->budget - a->mapped : 0;
	/* huge pages only where a whole 2 MiB unit of budget is left for them */
	int huge = a->hugepages && room >= round_up(sc->stride, HUGE_BYTES);
	size_t unit = huge ? HUGE_BYTES : 4096;
	size_t want = round_up(pref, unit);
	size_t min = round_up(sc->stride, unit);
	if (want > room)
		want = room / unit * unit;
	if (want < min)
		return SRT_ENOMEM;
	if (sc->n_slabs == sc->cap_slabs) {
		uint32_t cap = sc->cap_slabs ? 2 * sc->cap_slabs : 8;
		struct slab *ns = realloc(sc->slabs, cap * sizeof(*ns));
		if (!ns)
			return SRT_ENOMEM;
		sc->slabs = ns;
		sc->cap_slabs = cap;
	}
	/* Huge pages: over-map by 2 MiB and align the slab inside the mapping. */
	size_t map_len = want + (huge ? HUGE_BYTES : 0);
	void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		a->host->log(SRT_LOG_WARN, NAME, "mmap of a %zu-byte slab failed: %s", map_len,
			     strerror(errno));
		return SRT_ENOMEM;
	}
	uint8_t *base = m;
	if (huge) {
		/* Trim the unaligned head and the tail so exactly `want` bytes stay mapped. */
		base = (uint8_t *)round_up((uintptr_t)m, HUGE_BYTES);
		if (base > (uint8_t *)m)
			munmap(m, (size_t)(base - (uint8_t *)m));
		if ((uint8_t *)m + map_len > base + want)
			munmap(base + want, (size_t)((uint8_t *)m + map_len - (base + want)));
		if (madvise(base, want, MADV_HUGEPAGE))
			a->host->log(SRT_LOG_INFO, NAME, "madvise(MADV_HUGEPAGE) refused: %s",
				     strerror(errno));
	}
	struct slab s = {.base = base, .map_len = want,
			 .n_pages = (uint32_t)(want / sc->stride), .n_used = 0, .n_carved = 0};
	a->mapped += want;
	/* Keep slabs sorted by address for slab_of. */
	uint32_t at = 0;
	while (at < sc->n_slabs && sc->slabs[at].base < base)
		at++;
	memmove(&sc->slabs[at + 1], &sc->slabs[at], (sc->n_slabs - at) * sizeof(s));
	sc->slabs[at] = s;
	sc->n_slabs++;
	sc->carve_from = at; /* untouched: its pages are carved as they are handed out */
	return 0;
}

/* A never-used page of some slab of sc, or NULL; touches nothing. */
static void *carve(struct size_class *sc)
{
	for (uint32_t k = 0; k < sc->n_slabs; k++) {
		uint32_t i = (sc->carve_from + k) % sc->n_slabs;
		struct slab *s = &sc->slabs[i];
		if (s->n_carved < s->n_pages) {
			sc->carve_from = i;
			return s->base + (size_t)s->n_carved++ * sc->stride;
		}
	}
	return NULL;
}

static int host_alloc_page(void *inst, size_t bytes, void **page)
{
	struct host_arena *a = inst;
	*page = NULL;
	if (bytes < sizeof(void *))
		bytes = sizeof(void *);
	struct size_class *sc = find_class(a, bytes, 1);
	if (!sc)
		return SRT_ENOMEM;
	void *p = sc->free_list;
	if (p) {
		sc->free_list = *(void **)p;
	} else {
		if (!(p = carve(sc))) {
			int rc = grow(a, sc);
			if (rc)
				return rc;
			p = carve(sc);
		}
	}
	sc->slabs[slab_of(sc, p)].n_used++;
	atomic_fetch_add(&a->used_bytes, bytes);
	atomic_fetch_add(&a->used_pages, 1);
	*page = p;
	return 0;
}

static void host_free_page(void *inst, void *page, size_t bytes)
{
	struct host_arena *a = inst;
	if (!page)
		return;
	if (bytes < sizeof(void *))
		bytes = sizeof(void *);
	struct size_class *sc = find_class(a, bytes, 0);
	int32_t i = sc ? slab_of(sc, page) : -1;
	if (i < 0) {
		a->host->log(SRT_LOG_ERROR, NAME, "free_page(%p, %zu): not a page of this arena",
			     page, bytes);
		return;
	}
	sc->slabs[i].n_used--;
	*(void **)page = sc->free_list;
	sc->free_list = page;
	atomic_fetch_sub(&a->used_bytes, bytes);
	atomic_fetch_sub(&a->used_pages, 1);
}

static int host_copy_from_host(void *inst, void *page, const void *src, size_t bytes)
{
	(void)inst;
	memcpy(page, src, bytes);
	return 0;
}

static int host_copy_to_host(void *inst, void *dst, const void *page, size_t bytes)
{
	(void)inst;
	memcpy(dst, page, bytes);
	return 0;
}

static int host_set_budget(void *inst, uint64_t bytes)
{
	struct host_arena *a = inst;
	if (a->mapped) /* the core calls it before the first allocation */
		return SRT_EINVAL;
	a->budget = bytes >= SIZE_MAX ? SIZE_MAX : (size_t)bytes;
	return 0;
}

static int host_usage(void *inst, uint64_t *bytes, uint64_t *objects)
{
	struct host_arena *a = inst;
	*bytes = atomic_load(&a->used_bytes);
	*objects = atomic_load(&a->used_pages);
	return 0;
}

static const struct srt_tier_vtable vtable = {
	.struct_size = sizeof(struct srt_tier_vtable),
	.alloc_page = host_alloc_page,
	.free_page = host_free_page,
	.copy_from_host = host_copy_from_host,
	.copy_to_host = host_copy_to_host,
	.usage = host_usage,
	.set_budget = host_set_budget,
};

/* Options read from the plugin's runtime-config section (srt_plugin_desc.options). */
static const struct srt_plugin_option host_options[] = {
	{"budget", "size", NULL, "arena bytes (the tier's budget; set by the runtime)"},
	{"slab_bytes", "size", NULL, "bytes per slab allocation"},
	{"hugepages", "on|off", "off", "back slabs with huge pages"},
	{NULL, NULL, NULL, NULL},
};

static const struct srt_plugin_desc desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_TIER,
	.name = NAME,
	.version = "1.1",
	.description = "host-memory page arenas (L1 for CPU runs, L2): slabs per page size, budget, huge pages",
	.caps = SRT_CAP_CPU | SRT_CAP_PAGE_ARENA,
	.create = host_create,
	.destroy = host_destroy,
	.vtable = &vtable,
	.options = host_options,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &desc;
}
