/*
 * SHA-256 for shadowrt's L3 page keys and fingerprints: a thin wrapper over OpenSSL's libcrypto
 * (EVP), so callers keep a three-call streaming interface and one-shot helper.
 *
 * Streaming use: srt_tier_sha256_init, any number of srt_tier_sha256_update, then
 * srt_tier_sha256_final, which releases the context. A context owns an EVP_MD_CTX: do not copy
 * it (a copy would share the OpenSSL state). Thread safe per context. libcrypto failing to
 * allocate a digest context (out of memory) is fatal: the process aborts with a message, as a
 * key computed from a half-initialised context would name the wrong bytes.
 */
#ifndef SRT_TIER_SHA256_H
#define SRT_TIER_SHA256_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <openssl/evp.h>

#define SRT_TIER_SHA256_BYTES 32

struct srt_tier_sha256 {
	EVP_MD_CTX *ctx;
};

static inline void srt_tier_sha256_fatal_(const char *what)
{
	fprintf(stderr, "shadowrt: fatal: libcrypto SHA-256 %s failed (out of memory?)\n", what);
	abort();
}

static inline void srt_tier_sha256_init(struct srt_tier_sha256 *s)
{
	s->ctx = EVP_MD_CTX_new();
	if (!s->ctx || !EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL))
		srt_tier_sha256_fatal_("init");
}

static inline void srt_tier_sha256_update(struct srt_tier_sha256 *s, const void *data, size_t len)
{
	if (len && !EVP_DigestUpdate(s->ctx, data, len))
		srt_tier_sha256_fatal_("update");
}

/* Writes the 32-byte digest and frees the context; init again before reuse. */
static inline void srt_tier_sha256_final(struct srt_tier_sha256 *s,
					 uint8_t out[SRT_TIER_SHA256_BYTES])
{
	if (!EVP_DigestFinal_ex(s->ctx, out, NULL))
		srt_tier_sha256_fatal_("final");
	EVP_MD_CTX_free(s->ctx);
	s->ctx = NULL;
}

/* One-shot convenience. */
static inline void srt_tier_sha256(const void *data, size_t len,
				   uint8_t out[SRT_TIER_SHA256_BYTES])
{
	struct srt_tier_sha256 s;
	srt_tier_sha256_init(&s);
	srt_tier_sha256_update(&s, data, len);
	srt_tier_sha256_final(&s, out);
}

#endif
