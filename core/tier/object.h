/*
 * The L3 object format: every object a keyed store holds is a 64-byte header + the payload
 * (one page of one pool, opaque bytes). All integers little endian.
 *
 *   offset size  field
 *        0    4  magic "SRTP"
 *        4    2  format version (SRT_TIER_OBJ_VERSION)
 *        6    2  header size (64)
 *        8    4  cache layout version (the caller's; a different layout is a miss)
 *       12    4  reserved, zero
 *       16   32  the object's key
 *       48    8  payload length
 *       56    8  checksum = XXH64(payload, seed = XXH64(header bytes [0, 56), 0))
 *
 * The checksum covers the header fields too, so a flipped length, key or version byte is caught
 * even when the payload is intact. Stores treat objects as bytes; only this module reads them.
 * Pure functions, thread safe.
 */
#ifndef SRT_TIER_OBJECT_H
#define SRT_TIER_OBJECT_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/tier.h>

#define SRT_TIER_OBJ_MAGIC "SRTP"
#define SRT_TIER_OBJ_VERSION 1
#define SRT_TIER_OBJ_HEADER_BYTES 64

/* Bytes of the encoded object for a payload of len bytes. */
static inline size_t srt_tier_obj_size(size_t len)
{
	return SRT_TIER_OBJ_HEADER_BYTES + len;
}

/*
 * Encode: writes srt_tier_obj_size(len) bytes to dst (caller-owned; may not overlap payload).
 */
void srt_tier_obj_encode(void *dst, const struct srt_key *key, uint32_t layout_version,
			 const void *payload, size_t len);

/*
 * Validate obj[0..obj_len) as the object for `key` in `layout_version`. On success returns 0
 * and points *payload (into obj, borrowed) and *len at the payload. Otherwise returns
 *   SRT_ECORRUPT  truncated, bad magic, foreign key, length mismatch or checksum mismatch;
 *   SRT_EVERSION  another object format version or another cache layout version;
 * and writes the reason (naming the field, expected vs got) into why[why_len] when why != NULL.
 * The caller treats every failure as a miss, logs it and removes the object.
 */
int srt_tier_obj_decode(const void *obj, size_t obj_len, const struct srt_key *key,
			uint32_t layout_version, const void **payload, size_t *len, char *why,
			size_t why_len);

#endif
