/*
 * L3 page keys: one SHA-256 hash chain per page sequence, shared by every cache pool, and a
 * cheap per-pool key derived from it (format v2).
 *
 *   scope    = SHA-256( "shadowrt/l3-scope/v2" NUL, model identity (32 B),
 *                       cache layout version (u32 LE), tenant salt (32 B) )
 *   chain_i  = SHA-256( "shadowrt/l3-chain/v2" NUL, scope (32 B),
 *                       has_prev (1 B), chain_{i-1} (32 B, zeros for the first page),
 *                       token count (u32 LE), token ids (u32 LE each) )
 *   tag(p)   = first 16 bytes of SHA-256( "shadowrt/l3-pool/v2" NUL, name length (u32 LE),
 *                                         pool name bytes )
 *   key(p,i) = SHA-256( chain_i (32 B), tag(p) (16 B) )     -- 48 bytes: one SHA-256 block
 *
 * Every field has a fixed size or a length prefix, so two different inputs never encode to the
 * same byte string. chain_i covers chain_{i-1}, so it names the whole prefix up to and including
 * page i; a pool's key adds the pool. Equal keys mean equal prefixes (same model identity,
 * layout, tenant and pool). The token bytes, the long part, are hashed once per page for all
 * pools; each pool then costs one SHA-256 compression.
 *
 * The model identity must cover everything that shapes a page's bytes (see exec/identity.h):
 * a changed model, plugin or option never reads stale KV. The tenant salt (a secret per tenant,
 * e.g. SHA-256 of a tenant token) keeps one tenant from hitting or probing another's prefixes.
 *
 * Keyers and tags are plain values, read-only after init: several threads may derive keys at
 * once. The functions use a per-thread libcrypto context; they fail (SRT_ENOMEM) only when
 * libcrypto cannot allocate it.
 */
#ifndef SRT_TIER_KEY_H
#define SRT_TIER_KEY_H

#include <stdint.h>

#include <shadowrt/tier.h>

/* Everything one cache namespace's keys share. */
struct srt_tier_key_scope {
	uint8_t model_fp[32];    /* the model identity digest (weights, config, plugins, dtypes) */
	uint32_t layout_version; /* cache layout version (entry layouts, page size) */
	uint8_t tenant_salt[32]; /* all zero = the shared, untenanted namespace */
};

struct srt_tier_keyer {
	uint8_t scope[32]; /* SHA-256 of the scope */
};

#define SRT_TIER_POOL_TAG_BYTES 16
struct srt_tier_pool_tag {
	uint8_t b[SRT_TIER_POOL_TAG_BYTES];
};

/* Prepare key derivation for one scope: 0 or SRT_ENOMEM. */
int srt_tier_keyer_init(struct srt_tier_keyer *k, const struct srt_tier_key_scope *scope);

/* The tag of a pool (NUL-terminated name, e.g. "c4"): 0 or SRT_ENOMEM. */
int srt_tier_pool_tag(const char *pool, struct srt_tier_pool_tag *out);

/* chain value of the page holding tokens[0..n) after the page whose chain is `prev` (NULL for
 * the first page). 0 or SRT_ENOMEM. */
int srt_tier_key_chain_next(const struct srt_tier_keyer *k, const struct srt_key *prev,
			    const int32_t *tokens, uint32_t n, struct srt_key *chain);

/* The key of one pool's page from the page's chain value. 0 or SRT_ENOMEM. */
int srt_tier_key_pool(const struct srt_key *chain, const struct srt_tier_pool_tag *tag,
		      struct srt_key *out);

/*
 * Chains of n_pages consecutive full pages of page_tokens tokens each, starting at tokens[0]
 * after the page whose chain is prev (NULL: tokens[0] starts the sequence), into chains[], and,
 * for each pool p < n_pools, keys[p][0..n_pages) (keys may be NULL when n_pools is 0).
 * 0 or SRT_ENOMEM.
 */
int srt_tier_key_pages(const struct srt_tier_keyer *k, const struct srt_key *prev,
		       const int32_t *tokens, uint32_t n_pages, uint32_t page_tokens,
		       const struct srt_tier_pool_tag *tags, uint32_t n_pools,
		       struct srt_key *chains, struct srt_key *const *keys);

/* Lower-case hex of a key into out[65] (NUL-terminated); returns out. For logs and file names. */
char *srt_tier_key_hex(const struct srt_key *key, char out[2 * SRT_KEY_BYTES + 1]);

#endif
