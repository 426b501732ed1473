/*
 * XXH64 for the L3 object checksum: libxxhash's XXH64 (the same function, bit for bit, as the
 * hand-written one it replaced, so objects written before stay valid). Not cryptographic: it
 * detects corruption, not tampering (the key, a SHA-256 chain, is what keeps tenants apart).
 * Pure function, thread safe.
 */
#ifndef SRT_TIER_XXH64_H
#define SRT_TIER_XXH64_H

#include <stddef.h>
#include <stdint.h>

#include <xxhash.h>

static inline uint64_t srt_tier_xxh64(const void *data, size_t len, uint64_t seed)
{
	return (uint64_t)XXH64(data, len, (XXH64_hash_t)seed);
}

#endif
