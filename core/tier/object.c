/* L3 object header: encode and validate (layout in object.h). */
#include "tier/object.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tier/key.h"
#include "tier/xxh64.h"

#define OFF_VERSION 4
#define OFF_HDR_SIZE 6
#define OFF_LAYOUT 8
#define OFF_KEY 16
#define OFF_LEN 48
#define OFF_SUM 56

static void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void wr64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t rd(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t checksum(const uint8_t *hdr, const void *payload, size_t len)
{
	return srt_tier_xxh64(payload, len, srt_tier_xxh64(hdr, OFF_SUM, 0));
}

void srt_tier_obj_encode(void *dst, const struct srt_key *key, uint32_t layout_version,
			 const void *payload, size_t len)
{
	uint8_t *h = dst;
	memcpy(h, SRT_TIER_OBJ_MAGIC, 4);
	wr16(h + OFF_VERSION, SRT_TIER_OBJ_VERSION);
	wr16(h + OFF_HDR_SIZE, SRT_TIER_OBJ_HEADER_BYTES);
	wr32(h + OFF_LAYOUT, layout_version);
	wr32(h + 12, 0);
	memcpy(h + OFF_KEY, key->b, SRT_KEY_BYTES);
	wr64(h + OFF_LEN, len);
	if (len)
		memcpy(h + SRT_TIER_OBJ_HEADER_BYTES, payload, len);
	wr64(h + OFF_SUM, checksum(h, h + SRT_TIER_OBJ_HEADER_BYTES, len));
}

#define FAIL(code, ...)                                                                        \
	do {                                                                                   \
		if (why && why_len)                                                            \
			snprintf(why, why_len, __VA_ARGS__);                                   \
		return code;                                                                   \
	} while (0)

int srt_tier_obj_decode(const void *obj, size_t obj_len, const struct srt_key *key,
			uint32_t layout_version, const void **payload, size_t *len, char *why,
			size_t why_len)
{
	const uint8_t *h = obj;
	char want[2 * SRT_KEY_BYTES + 1], got[2 * SRT_KEY_BYTES + 1];

	if (obj_len < SRT_TIER_OBJ_HEADER_BYTES)
		FAIL(SRT_ECORRUPT, "truncated object: %zu bytes, shorter than the %d-byte header",
		     obj_len, SRT_TIER_OBJ_HEADER_BYTES);
	if (memcmp(h, SRT_TIER_OBJ_MAGIC, 4))
		FAIL(SRT_ECORRUPT, "bad magic %02x%02x%02x%02x (expected \"SRTP\")", h[0], h[1],
		     h[2], h[3]);
	uint64_t version = rd(h + OFF_VERSION, 2), hdr_size = rd(h + OFF_HDR_SIZE, 2);
	if (version != SRT_TIER_OBJ_VERSION)
		FAIL(SRT_EVERSION, "object format version %" PRIu64 " (expected %d)", version,
		     SRT_TIER_OBJ_VERSION);
	if (hdr_size != SRT_TIER_OBJ_HEADER_BYTES)
		FAIL(SRT_ECORRUPT, "header size %" PRIu64 " (expected %d)", hdr_size,
		     SRT_TIER_OBJ_HEADER_BYTES);
	uint64_t layout = rd(h + OFF_LAYOUT, 4);
	if (layout != layout_version)
		FAIL(SRT_EVERSION, "cache layout version %" PRIu64 " (expected %" PRIu32 ")", layout,
		     layout_version);
	if (memcmp(h + OFF_KEY, key->b, SRT_KEY_BYTES)) {
		struct srt_key k;
		memcpy(k.b, h + OFF_KEY, SRT_KEY_BYTES);
		FAIL(SRT_ECORRUPT, "foreign object: header key %s, expected %s",
		     srt_tier_key_hex(&k, got), srt_tier_key_hex(key, want));
	}
	uint64_t plen = rd(h + OFF_LEN, 8);
	if (plen > obj_len - SRT_TIER_OBJ_HEADER_BYTES)
		FAIL(SRT_ECORRUPT, "truncated object: header says %" PRIu64 " payload bytes, %zu present",
		     plen, obj_len - SRT_TIER_OBJ_HEADER_BYTES);
	if (plen < obj_len - SRT_TIER_OBJ_HEADER_BYTES)
		FAIL(SRT_ECORRUPT, "object has %zu trailing bytes after its %" PRIu64 "-byte payload",
		     (size_t)(obj_len - SRT_TIER_OBJ_HEADER_BYTES - plen), plen);
	uint64_t sum = rd(h + OFF_SUM, 8), want_sum = checksum(h, h + SRT_TIER_OBJ_HEADER_BYTES, plen);
	if (sum != want_sum)
		FAIL(SRT_ECORRUPT, "checksum mismatch: stored %016" PRIx64 ", computed %016" PRIx64,
		     sum, want_sum);
	*payload = h + SRT_TIER_OBJ_HEADER_BYTES;
	*len = (size_t)plen;
	return 0;
}
