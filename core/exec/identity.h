/*
 * Cache identity: one SHA-256 digest that changes whenever anything that shapes the bytes of a
 * cached page changes. It is the model identity of every L3 key (tier/key.h) and names the
 * engine's L1 cache in logs. It covers, in this order:
 *
 *   - the model config: config.json as canonical JSON (jansson, keys sorted, compact: every
 *     value, including keys the runtime does not read; whitespace and key order do not matter),
 *     or its raw bytes when it is not strict JSON (a YAML config.json);
 *   - the weights: the XXH3-128 fingerprint of every byte of every weight file
 *     (ckpt/fingerprint.h) and their total size;
 *   - the numerics profile and the page size;
 *   - every plugin in the forward path, in forward order (attention per compress ratio, MoE,
 *     residual): role, ratio, name, version, ABI version, the layout id the plugin declares
 *     (srt_plugin_desc.layout_id, ABI 1.1) or "derived" when it has none, every option of its
 *     config section as configured (key = value, sorted by key; this is where kv_dtype and
 *     index_dtype live), and for attention plugins every pool it declares (name, ratio,
 *     retention, tail, entry bytes, layers).
 *
 * Every field is length-prefixed and labelled, so different inputs never encode alike. If in
 * doubt, a value goes in: a miss costs compute, a wrong hit costs correctness.
 *
 * Use: srt_ident_begin, the srt_ident_add_* calls, srt_ident_end. The summary (what it covers,
 * in words) is for the one info line the engine logs at open. Not thread safe per builder.
 */
#ifndef SRT_EXEC_IDENTITY_H
#define SRT_EXEC_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/plugin.h>
#include <shadowrt/pool.h>

#include "tier/sha256.h"

struct srt_runtime_config;

struct srt_ident {
	struct srt_tier_sha256 sha;
	char summary[3072];
	size_t len;
	uint8_t digest[32];
	char hex[65];
};

void srt_ident_begin(struct srt_ident *b);

/* The model config file (config.json). 0, or SRT_EIO/SRT_ENOMEM with the file in err. */
int srt_ident_add_model_config(struct srt_ident *b, const char *path, char *err, size_t errlen);

/* The weights fingerprint (16 bytes) over n_files files of `bytes` bytes. */
void srt_ident_add_weights(struct srt_ident *b, const uint8_t digest[16], uint64_t bytes,
			   uint32_t n_files);

void srt_ident_add_u64(struct srt_ident *b, const char *label, uint64_t v, const char *words);

/*
 * One plugin of the forward path: desc (the registry's zero-extended copy), the options of its
 * config section (rc may be NULL: no options), and its pools (attention; NULL / 0 otherwise).
 * 0, or SRT_ENOMEM (the identity is then incomplete: do not use it).
 */
int srt_ident_add_plugin(struct srt_ident *b, const char *role, int32_t ratio,
			 const struct srt_plugin_desc *desc, const struct srt_runtime_config *rc,
			 const char *section, const struct srt_pool_decl *pools, uint32_t n_pools);

/* Finish: digest and hex; the builder is done. */
void srt_ident_end(struct srt_ident *b);

#endif
