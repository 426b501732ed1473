/*
 * L3 page keys: a SHA-256 hash chain, one chain per cache pool.
 *
 *   key_i = SHA-256( "shadowrt/l3-key/v1" NUL, model fingerprint (32 B),
 *                    cache layout version (u32 LE), tenant salt (32 B),
 *                    pool name length (u32 LE), pool name bytes,
 *                    has_prev (1 B), key_{i-1} (32 B, zeros for the first page),
 *                    token count (u32 LE), token ids (u32 LE each) )
 *
 * Every field has a fixed size or a length prefix, so two different inputs never encode to the
 * same byte string. Because key_i covers key_{i-1}, a key names the whole prefix up to and
 * including page i: equal keys mean equal prefixes (same model, layout, tenant and pool).
 * The model fingerprint must cover the weights and the KV dtypes, so a changed model never
 * reads stale KV; the tenant salt (a secret per tenant, e.g. SHA-256 of a tenant token) keeps one
 * tenant from hitting or probing another's prefixes.
 *
 * A keyer is a plain value (the hash of the constant part, computed once); it is read-only
 * after init, so several threads may derive keys from one keyer at once.
 */
#ifndef SRT_TIER_KEY_H
#define SRT_TIER_KEY_H

#include <stdint.h>

#include <shadowrt/tier.h>

#include "tier/sha256.h"

/* Everything one cache namespace's keys share. */
struct srt_tier_key_scope {
	uint8_t model_fp[32];    /* fingerprint of weights + KV dtypes */
	uint32_t layout_version; /* cache layout version (entry layouts, page size) */
	uint8_t tenant_salt[32]; /* all zero = the shared, untenanted namespace */
};

struct srt_tier_keyer {
	struct srt_tier_sha256 mid; /* state after the scope and the pool name */
};

/* Prepare key derivation for one pool (pool is a NUL-terminated name, e.g. "c4"). */
void srt_tier_keyer_init(struct srt_tier_keyer *k, const struct srt_tier_key_scope *scope,
			 const char *pool);

/* key of the page holding tokens[0..n) after the page keyed `prev` (NULL for the first page). */
void srt_tier_key_next(const struct srt_tier_keyer *k, const struct srt_key *prev,
		       const int32_t *tokens, uint32_t n, struct srt_key *out);

/* Keys of n_pages consecutive full pages of page_tokens tokens each, starting at tokens[0]. */
void srt_tier_key_chain(const struct srt_tier_keyer *k, const int32_t *tokens, uint32_t n_pages,
			uint32_t page_tokens, struct srt_key *keys);

/* Lower-case hex of a key into out[65] (NUL-terminated); returns out. For logs and file names. */
char *srt_tier_key_hex(const struct srt_key *key, char out[2 * SRT_KEY_BYTES + 1]);

#endif
