/*
 * SHA-256 (FIPS 180-4), written for shadowrt's L3 page keys.
 *
 * Streaming use: srt_tier_sha256_init, any number of srt_tier_sha256_update, then
 * srt_tier_sha256_final. A context is a plain value: copying it forks the hash (the key chain
 * uses this to hash a constant prefix once). No allocation; thread safe per context.
 */
#ifndef SRT_TIER_SHA256_H
#define SRT_TIER_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SRT_TIER_SHA256_BYTES 32

struct srt_tier_sha256 {
	uint32_t h[8];
	uint64_t total;    /* bytes hashed so far */
	uint8_t buf[64];   /* pending partial block */
	uint32_t buf_len;
};

void srt_tier_sha256_init(struct srt_tier_sha256 *s);
void srt_tier_sha256_update(struct srt_tier_sha256 *s, const void *data, size_t len);
/* Writes the 32-byte digest; the context must be re-initialised before reuse. */
void srt_tier_sha256_final(struct srt_tier_sha256 *s, uint8_t out[SRT_TIER_SHA256_BYTES]);
/* One-shot convenience. */
void srt_tier_sha256(const void *data, size_t len, uint8_t out[SRT_TIER_SHA256_BYTES]);

#endif
