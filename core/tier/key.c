/* L3 key chain (see key.h for the exact byte encoding), SHA-256 from libcrypto. */
#include "tier/key.h"

#include <pthread.h>
#include <string.h>

#include <openssl/evp.h>

/* SHA-256 fetched once (an implicit fetch per digest costs more than the digest itself), and
 * one digest context per thread, freed when the thread exits. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static EVP_MD *sha256_md;
static pthread_key_t ctx_key;
static int ctx_key_ok;

static void free_ctx(void *p)
{
	EVP_MD_CTX_free(p);
}

static void init_once(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
	ctx_key_ok = pthread_key_create(&ctx_key, free_ctx) == 0;
}

/* This thread's context, initialised for a new SHA-256; NULL when libcrypto failed. */
static EVP_MD_CTX *begin(void)
{
	pthread_once(&once, init_once);
	if (!sha256_md || !ctx_key_ok)
		return NULL;
	EVP_MD_CTX *c = pthread_getspecific(ctx_key);
	if (!c) {
		if (!(c = EVP_MD_CTX_new()))
			return NULL;
		if (pthread_setspecific(ctx_key, c)) {
			EVP_MD_CTX_free(c);
			return NULL;
		}
	}
	return EVP_DigestInit_ex2(c, sha256_md, NULL) ? c : NULL;
}

static int upd(EVP_MD_CTX *c, const void *p, size_t n)
{
	return EVP_DigestUpdate(c, p, n) ? 0 : SRT_ENOMEM;
}

static int upd_u32(EVP_MD_CTX *c, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	return upd(c, b, 4);
}

static int fin(EVP_MD_CTX *c, uint8_t out[32])
{
	return EVP_DigestFinal_ex(c, out, NULL) ? 0 : SRT_ENOMEM;
}

int srt_tier_keyer_init(struct srt_tier_keyer *k, const struct srt_tier_key_scope *scope)
{
	static const char tag[] = "shadowrt/l3-scope/v2"; /* hashed with its NUL */
	EVP_MD_CTX *c = begin();
	if (!c || upd(c, tag, sizeof(tag)) || upd(c, scope->model_fp, sizeof(scope->model_fp)) ||
	    upd_u32(c, scope->layout_version) ||
	    upd(c, scope->tenant_salt, sizeof(scope->tenant_salt)) || fin(c, k->scope))
		return SRT_ENOMEM;
	return 0;
}

int srt_tier_pool_tag(const char *pool, struct srt_tier_pool_tag *out)
{
	static const char tag[] = "shadowrt/l3-pool/v2";
	size_t len = strlen(pool);
	uint8_t d[32];
	EVP_MD_CTX *c = begin();
	if (!c || upd(c, tag, sizeof(tag)) || upd_u32(c, (uint32_t)len) || upd(c, pool, len) ||
	    fin(c, d))
		return SRT_ENOMEM;
	memcpy(out->b, d, sizeof(out->b));
	return 0;
}

int srt_tier_key_chain_next(const struct srt_tier_keyer *k, const struct srt_key *prev,
			    const int32_t *tokens, uint32_t n, struct srt_key *chain)
{
	static const char tag[] = "shadowrt/l3-chain/v2";
	static const uint8_t zeros[SRT_KEY_BYTES];
	uint8_t has_prev = prev != NULL;
	EVP_MD_CTX *c = begin();
	if (!c || upd(c, tag, sizeof(tag)) || upd(c, k->scope, sizeof(k->scope)) ||
	    upd(c, &has_prev, 1) || upd(c, prev ? prev->b : zeros, SRT_KEY_BYTES) ||
	    upd_u32(c, n))
		return SRT_ENOMEM;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (upd(c, tokens, (size_t)n * sizeof(*tokens)))
		return SRT_ENOMEM;
#else
	for (uint32_t i = 0; i < n; i++)
		if (upd_u32(c, (uint32_t)tokens[i]))
			return SRT_ENOMEM;
#endif
	return fin(c, chain->b);
}

int srt_tier_key_pool(const struct srt_key *chain, const struct srt_tier_pool_tag *tag,
		      struct srt_key *out)
{
	uint8_t in[SRT_KEY_BYTES + SRT_TIER_POOL_TAG_BYTES];
	memcpy(in, chain->b, SRT_KEY_BYTES);
	memcpy(in + SRT_KEY_BYTES, tag->b, SRT_TIER_POOL_TAG_BYTES);
	EVP_MD_CTX *c = begin();
	if (!c || upd(c, in, sizeof(in)))
		return SRT_ENOMEM;
	return fin(c, out->b);
}

int srt_tier_key_pages(const struct srt_tier_keyer *k, const struct srt_key *prev,
		       const int32_t *tokens, uint32_t n_pages, uint32_t page_tokens,
		       const struct srt_tier_pool_tag *tags, uint32_t n_pools,
		       struct srt_key *chains, struct srt_key *const *keys)
{
	for (uint32_t i = 0; i < n_pages; i++) {
		int rc = srt_tier_key_chain_next(k, i ? &chains[i - 1] : prev,
						 tokens + (size_t)i * page_tokens, page_tokens,
						 &chains[i]);
		for (uint32_t p = 0; !rc && p < n_pools; p++)
			rc = srt_tier_key_pool(&chains[i], &tags[p], &keys[p][i]);
		if (rc)
			return rc;
	}
	return 0;
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
