/*
 * XXH64 (Yann Collet's 64-bit xxHash, per its published algorithm description), written here
 * for the L3 object checksum. Not cryptographic: it detects corruption, not tampering (the key,
 * a SHA-256 chain, is what keeps tenants apart). Pure function, thread safe.
 */
#ifndef SRT_TIER_XXH64_H
#define SRT_TIER_XXH64_H

#include <stddef.h>
#include <stdint.h>

uint64_t srt_tier_xxh64(const void *data, size_t len, uint64_t seed);

#endif
