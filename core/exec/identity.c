/* Cache identity (identity.h). */
#include "exec/identity.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config/runtime_config.h"

static void note(struct srt_ident *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct srt_ident *b, const char *fmt, ...)
{
	if (b->len + 1 >= sizeof(b->summary))
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b->summary + b->len, sizeof(b->summary) - b->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		b->len += (size_t)n < sizeof(b->summary) - b->len ? (size_t)n
								   : sizeof(b->summary) - b->len - 1;
}

static void put_u64(struct srt_ident *b, uint64_t v)
{
	uint8_t x[8];
	for (int i = 0; i < 8; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	srt_tier_sha256_update(&b->sha, x, 8);
}

/* label, then length-prefixed bytes */
static void field(struct srt_ident *b, const char *label, const void *data, size_t len)
{
	size_t ll = strlen(label);
	put_u64(b, ll);
	srt_tier_sha256_update(&b->sha, label, ll);
	put_u64(b, len);
	srt_tier_sha256_update(&b->sha, data, len);
}

static void field_str(struct srt_ident *b, const char *label, const char *s)
{
	/* NULL and "" differ: NULL is hashed as a distinct marker */
	if (!s)
		field(b, label, "\xff<null>", 7);
	else
		field(b, label, s, strlen(s));
}

void srt_ident_begin(struct srt_ident *b)
{
	memset(b, 0, sizeof(*b));
	srt_tier_sha256_init(&b->sha);
	field_str(b, "format", "shadowrt/cache-identity/v1");
}

int srt_ident_add_model_config(struct srt_ident *b, const char *path, char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (root) {
		char *canon = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY |
						       JSON_REAL_PRECISION(17));
		size_t keys = json_is_object(root) ? json_object_size(root) : 0;
		json_decref(root);
		if (!canon) {
			snprintf(err, errlen, "cache identity: %s: out of memory", path);
			return SRT_ENOMEM;
		}
		field(b, "model-config/json", canon, strlen(canon));
		note(b, "model config %s (canonical JSON, %zu top-level keys)", path, keys);
		free(canon);
		return 0;
	}
	/* not strict JSON (config.json may be YAML): its raw bytes */
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "cache identity: cannot read %s", path);
		return SRT_EIO;
	}
	char *buf = NULL;
	size_t len = 0, cap = 0, n;
	char tmp[65536];
	while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0) {
		if (len + n > cap) {
			size_t nc = cap ? 2 * cap : 65536;
			while (nc < len + n)
				nc *= 2;
			char *nb = realloc(buf, nc);
			if (!nb) {
				free(buf);
				fclose(f);
				snprintf(err, errlen, "cache identity: %s: out of memory", path);
				return SRT_ENOMEM;
			}
			buf = nb;
			cap = nc;
		}
		memcpy(buf + len, tmp, n);
		len += n;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(buf);
		snprintf(err, errlen, "cache identity: cannot read %s", path);
		return SRT_EIO;
	}
	field(b, "model-config/raw", buf ? buf : "", len);
	note(b, "model config %s (raw bytes: not strict JSON)", path);
	free(buf);
	return 0;
}

void srt_ident_add_weights(struct srt_ident *b, const uint8_t digest[16], uint64_t bytes,
			   uint32_t n_files)
{
	field(b, "weights/xxh3-128", digest, 16);
	put_u64(b, bytes);
	put_u64(b, n_files);
	char hx[33];
	for (int i = 0; i < 16; i++)
		snprintf(hx + 2 * i, 3, "%02x", digest[i]);
	note(b, "; weights xxh3-128 %s (every byte of %u file%s, %llu bytes)", hx, n_files,
	     n_files == 1 ? "" : "s", (unsigned long long)bytes);
}

void srt_ident_add_u64(struct srt_ident *b, const char *label, uint64_t v, const char *words)
{
	put_u64(b, strlen(label));
	srt_tier_sha256_update(&b->sha, label, strlen(label));
	put_u64(b, v);
	note(b, "; %s %s", label, words);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int srt_ident_add_plugin(struct srt_ident *b, const char *role, int32_t ratio,
			 const struct srt_plugin_desc *desc, const struct srt_runtime_config *rc,
			 const char *section, const struct srt_pool_decl *pools, uint32_t n_pools)
{
	field_str(b, "plugin/role", role);
	put_u64(b, (uint64_t)(int64_t)ratio);
	field_str(b, "plugin/name", desc->name);
	field_str(b, "plugin/version", desc->version);
	put_u64(b, desc->abi_major);
	put_u64(b, desc->abi_minor);
	field_str(b, "plugin/layout", desc->layout_id ? desc->layout_id : "derived");
	note(b, "; %s %s %s layout %s", role, desc->name ? desc->name : "?",
	     desc->version ? desc->version : "?", desc->layout_id ? desc->layout_id : "derived");
	/* options of its section as configured: distinct keys, sorted, each with the value the
	 * plugin sees (the first entry, as srt_runtime_config_option returns) */
	const char **keys = NULL;
	size_t nk = 0;
	if (rc && section) {
		keys = calloc(rc->n_entries ? rc->n_entries : 1, sizeof(*keys));
		if (!keys)
			return SRT_ENOMEM;
		for (size_t i = 0; i < rc->n_entries; i++) {
			const struct srt_rc_entry *e = &rc->entries[i];
			if (strcmp(e->section, section))
				continue;
			size_t k;
			for (k = 0; k < nk && strcmp(keys[k], e->key); k++)
				;
			if (k == nk)
				keys[nk++] = e->key;
		}
	}
	if (nk > 1)
		qsort(keys, nk, sizeof(*keys), cmp_str);
	put_u64(b, nk);
	note(b, " options {");
	for (size_t k = 0; k < nk; k++) {
		const char *v = srt_runtime_config_option(rc, section, keys[k]);
		field_str(b, "option/key", keys[k]);
		field_str(b, "option/value", v);
		note(b, "%s%s=%s", k ? " " : "", keys[k], v ? v : "");
	}
	note(b, "}");
	free(keys);
	put_u64(b, n_pools);
	for (uint32_t i = 0; i < n_pools; i++) {
		const struct srt_pool_decl *d = &pools[i];
		field(b, "pool/name", d->name, strnlen(d->name, SRT_POOL_NAME_MAX));
		put_u64(b, d->ratio);
		put_u64(b, d->retention);
		put_u64(b, d->tail_tokens);
		put_u64(b, d->entry_bytes);
		put_u64(b, d->n_layers);
		for (uint32_t l = 0; l < d->n_layers && d->layers; l++)
			put_u64(b, (uint64_t)(int64_t)d->layers[l]);
	}
	if (n_pools)
		note(b, " pools %u", n_pools);
	return 0;
}

void srt_ident_end(struct srt_ident *b)
{
	srt_tier_sha256_final(&b->sha, b->digest);
	for (int i = 0; i < 32; i++)
		snprintf(b->hex + 2 * i, 3, "%02x", b->digest[i]);
}
