/*
 * shadowrt plugin ABI v1 — cache tier plugins (kind SRT_KIND_TIER).
 *
 * A tier stores ShadowRadix pages as opaque bytes. Two families, told apart by caps:
 *  - page arenas (SRT_CAP_PAGE_ARENA): L1 (where kernels read) and L2 (host memory).
 *    Pages are addressed by pointer: alloc_page / free_page / copy in and out.
 *  - keyed stores (SRT_CAP_KEYED_STORE): L3 (file, sqlite, redis). Objects are addressed by a
 *    32-byte key (a hash chain the core computes) and carry a header the core writes and
 *    validates (magic, layout version, key, length, checksum); the store treats them as bytes.
 *
 * Budgets: the core never asks an arena for more than its budget, and tells the arena that
 * budget (set_budget, ABI 1.1) so its mappings stay within it; a keyed store that is
 * size-bounded (option "max_bytes") evicts its own least recently used objects.
 *
 * Thread safety: arena methods are called from one thread at a time; keyed-store methods may be
 * called concurrently from the core's prefetch/write-back thread and the main thread, and must
 * be safe for that.
 */
#ifndef SHADOWRT_TIER_H
#define SHADOWRT_TIER_H

#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SRT_KEY_BYTES 32
struct srt_key {
	uint8_t b[SRT_KEY_BYTES];
};

struct srt_tier_vtable {
	uint32_t struct_size;

	/* --- page arenas (SRT_CAP_PAGE_ARENA) ---------------------------------------------- */
	/* Allocate one page of `bytes` (all pages of one pool have one size); 0 or SRT_ENOMEM. */
	int (*alloc_page)(void *inst, size_t bytes, void **page);
	void (*free_page)(void *inst, void *page, size_t bytes);
	/* Copy between a page of this tier and host memory. */
	int (*copy_from_host)(void *inst, void *page, const void *src, size_t bytes);
	int (*copy_to_host)(void *inst, void *dst, const void *page, size_t bytes);

	/* --- keyed stores (SRT_CAP_KEYED_STORE) -------------------------------------------- */
	/* Length of the longest run keys[0..k) that are all present; 0 if keys[0] is absent. */
	int (*exists)(void *inst, const struct srt_key *keys, uint32_t n, uint32_t *n_present);
	/*
	 * Fetch n objects: for each i, bufs[i] has room for caps[i] bytes; lens[i] receives the
	 * object length, or 0 when absent or larger than caps[i]. Returns 0 unless the store
	 * itself failed (then SRT_EIO: treat everything as absent).
	 */
	int (*get)(void *inst, const struct srt_key *keys, uint32_t n, void *const *bufs,
		   const size_t *caps, size_t *lens);
	/* Store n objects atomically each (a crash loses at most the object being written). */
	int (*put)(void *inst, const struct srt_key *keys, uint32_t n, const void *const *bufs,
		   const size_t *lens);
	/* Remove objects (absent ones are fine). */
	int (*remove)(void *inst, const struct srt_key *keys, uint32_t n);
	/* Optional. Bytes and objects currently stored. */
	int (*usage)(void *inst, uint64_t *bytes, uint64_t *objects);

	/* --- ABI 1.1 --------------------------------------------------------------------- */
	/*
	 * Optional (page arenas). The tier's byte budget, called once by the core right after
	 * create, before any alloc_page: the arena must keep the memory it maps (and so its
	 * resident memory) within it, apart from a small constant of bookkeeping. 0 or a negative
	 * code. Without it an arena only knows what its options say.
	 */
	int (*set_budget)(void *inst, uint64_t bytes);
};

#define SRT_TIER_VTABLE_V1_SIZE (offsetof(struct srt_tier_vtable, usage) + sizeof(void *))

#ifdef __cplusplus
}
#endif
#endif /* SHADOWRT_TIER_H */
