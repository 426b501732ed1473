/* L3 key chain (see key.h for the exact byte encoding). */
#include "tier/key.h"

#include <string.h>

static void put_u32(struct srt_tier_sha256 *s, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	srt_tier_sha256_update(s, b, 4);
}

void srt_tier_keyer_init(struct srt_tier_keyer *k, const struct srt_tier_key_scope *scope,
			 const char *pool)
{
	static const char tag[] = "shadowrt/l3-key/v1"; /* hashed with its NUL */
	size_t pool_len = strlen(pool);

	srt_tier_sha256_init(&k->mid);
	srt_tier_sha256_update(&k->mid, tag, sizeof(tag));
	srt_tier_sha256_update(&k->mid, scope->model_fp, sizeof(scope->model_fp));
	put_u32(&k->mid, scope->layout_version);
	srt_tier_sha256_update(&k->mid, scope->tenant_salt, sizeof(scope->tenant_salt));
	put_u32(&k->mid, (uint32_t)pool_len);
	srt_tier_sha256_update(&k->mid, pool, pool_len);
}

void srt_tier_key_next(const struct srt_tier_keyer *k, const struct srt_key *prev,
		       const int32_t *tokens, uint32_t n, struct srt_key *out)
{
	static const uint8_t zeros[SRT_KEY_BYTES];
	struct srt_tier_sha256 s = k->mid;
	uint8_t has_prev = prev != NULL;

	srt_tier_sha256_update(&s, &has_prev, 1);
	srt_tier_sha256_update(&s, prev ? prev->b : zeros, SRT_KEY_BYTES);
	put_u32(&s, n);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	srt_tier_sha256_update(&s, tokens, (size_t)n * sizeof(*tokens));
#else
	for (uint32_t i = 0; i < n; i++)
		put_u32(&s, (uint32_t)tokens[i]);
#endif
	srt_tier_sha256_final(&s, out->b);
}

void srt_tier_key_chain(const struct srt_tier_keyer *k, const int32_t *tokens, uint32_t n_pages,
			uint32_t page_tokens, struct srt_key *keys)
{
	for (uint32_t i = 0; i < n_pages; i++)
		srt_tier_key_next(k, i ? &keys[i - 1] : NULL, tokens + (size_t)i * page_tokens,
				  page_tokens, &keys[i]);
}

char *srt_tier_key_hex(const struct srt_key *key, char out[2 * SRT_KEY_BYTES + 1])
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < SRT_KEY_BYTES; i++) {
		out[2 * i] = digits[key->b[i] >> 4];
		out[2 * i + 1] = digits[key->b[i] & 15];
	}
	out[2 * SRT_KEY_BYTES] = '\0';
	return out;
}
