/* libFuzzer target: the L3 object decoder. Each input is decoded twice, against the key it
 * claims (so the checksum and length paths are reached) and against a fixed key; and its tail
 * is encoded then decoded, which must round-trip. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tier/object.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct srt_key key, fixed;
	memset(&fixed, 0x5a, sizeof(fixed));
	memset(&key, 0, sizeof(key));
	if (size >= 16 + sizeof(key.b))
		memcpy(key.b, data + 16, sizeof(key.b));
	const void *payload;
	size_t len;
	char why[256];
	uint32_t layout = size >= 12 ? (uint32_t)data[8] | (uint32_t)data[9] << 8 |
					       (uint32_t)data[10] << 16 | (uint32_t)data[11] << 24
				     : 1;
	srt_tier_obj_decode(data, size, &key, layout, &payload, &len, why, sizeof(why));
	srt_tier_obj_decode(data, size, &fixed, 1, &payload, &len, why, sizeof(why));

	uint8_t *obj = malloc(srt_tier_obj_size(size));
	if (!obj)
		return 0;
	srt_tier_obj_encode(obj, &fixed, 7, data, size);
	if (srt_tier_obj_decode(obj, srt_tier_obj_size(size), &fixed, 7, &payload, &len, why,
				sizeof(why)) ||
	    len != size || (size && memcmp(payload, data, size)))
		abort(); /* an encoded object must decode to its payload */
	free(obj);
	return 0;
}
