/*
 * The core's side of an L3 keyed store: wraps a tier plugin instance (SRT_CAP_KEYED_STORE) and
 * owns the object format, so callers deal in page payloads, never in headers.
 *
 *  - put   encodes each payload as an object (object.h) and stores it;
 *  - get   fetches objects, validates each against its key and the layout version, and copies
 *          the payload out; an object that fails validation is a miss: it is logged (with the
 *          key and the reason), removed from the store and counted in `rejected`;
 *  - exists is the store's longest-present-run probe, unchanged.
 *
 * The tier manager (L1 -> L2 -> L3 demotion, prefetch on a ShadowRadix match) sits on top of
 * this: one srt_tier_store per L3 tier, keys from key.h (one keyer per pool).
 *
 * Ownership: vt, inst and host are borrowed and must outlive the store value; the store does not
 * destroy the plugin instance. Thread safety: the plugin's keyed methods are thread safe, and
 * these functions only touch the store value to bump atomic counters, so a store may be used
 * from the main thread and the prefetch/write-back thread at once.
 */
#ifndef SRT_TIER_STORE_H
#define SRT_TIER_STORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <shadowrt/plugin.h>
#include <shadowrt/tier.h>

struct srt_tier_store {
	const struct srt_tier_vtable *vt; /* exists, get, put, remove must be non-NULL */
	void *inst;
	const struct srt_host *host; /* for logging */
	const char *name;            /* e.g. "tier.l3 (file)", prefixes log lines */
	uint32_t layout_version;     /* cache layout version written into and required of objects */
	_Atomic uint64_t rejected;   /* objects that failed validation (and were removed) */
};

/* Fill *s; returns SRT_EINVAL (with why) when the vtable lacks a keyed-store method. */
int srt_tier_store_init(struct srt_tier_store *s, const struct srt_tier_vtable *vt, void *inst,
			const struct srt_host *host, const char *name, uint32_t layout_version,
			char *why, size_t why_len);

/*
 * Store n payloads (payloads[i] of lens[i] bytes) under keys[i]. Returns 0 or the store's error
 * (SRT_EIO, SRT_ENOSPC, SRT_ENOMEM); on error some objects may have been stored.
 */
int srt_tier_store_put(struct srt_tier_store *s, const struct srt_key *keys, uint32_t n,
		       const void *const *payloads, const size_t *lens);

/*
 * Fetch n payloads: bufs[i] has room for caps[i] bytes; lens[i] receives the payload length, or
 * 0 for a miss (absent, larger than caps[i], or rejected by validation). Returns 0, or SRT_EIO /
 * SRT_ENOMEM when nothing could be fetched (then every lens[i] is 0).
 */
int srt_tier_store_get(struct srt_tier_store *s, const struct srt_key *keys, uint32_t n,
		       void *const *bufs, const size_t *caps, size_t *lens);

/* Longest run keys[0..k) present in the store (see tier.h). */
int srt_tier_store_exists(struct srt_tier_store *s, const struct srt_key *keys, uint32_t n,
			  uint32_t *n_present);

/* Remove objects (absent ones are fine). Returns 0 or the store's error. */
int srt_tier_store_remove(struct srt_tier_store *s, const struct srt_key *keys, uint32_t n);

#endif
