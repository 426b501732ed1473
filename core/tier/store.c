/* L3 store client: object encoding on put, validation (and removal of bad objects) on get. */
#include "tier/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tier/key.h"
#include "tier/object.h"

int srt_tier_store_init(struct srt_tier_store *s, const struct srt_tier_vtable *vt, void *inst,
			const struct srt_host *host, const char *name, uint32_t layout_version,
			char *why, size_t why_len)
{
	if (!vt || !vt->exists || !vt->get || !vt->put || !vt->remove) {
		snprintf(why, why_len, "%s: not a keyed store (exists/get/put/remove missing)", name);
		return SRT_EINVAL;
	}
	s->vt = vt;
	s->inst = inst;
	s->host = host;
	s->name = name;
	s->layout_version = layout_version;
	atomic_init(&s->rejected, 0);
	return 0;
}

int srt_tier_store_put(struct srt_tier_store *s, const struct srt_key *keys, uint32_t n,
		       const void *const *payloads, const size_t *lens)
{
	size_t total = 0;
	int rc = SRT_ENOMEM;

	if (!n)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		total += srt_tier_obj_size(lens[i]);
	uint8_t *scratch = malloc(total);
	const void **objs = malloc(n * sizeof(*objs));
	size_t *obj_lens = malloc(n * sizeof(*obj_lens));
	if (!scratch || !objs || !obj_lens)
		goto out;
	uint8_t *p = scratch;
	for (uint32_t i = 0; i < n; i++) {
		srt_tier_obj_encode(p, &keys[i], s->layout_version, payloads[i], lens[i]);
		objs[i] = p;
		obj_lens[i] = srt_tier_obj_size(lens[i]);
		p += obj_lens[i];
	}
	rc = s->vt->put(s->inst, keys, n, objs, obj_lens);
out:
	free(obj_lens);
	free(objs);
	free(scratch);
	return rc;
}

int srt_tier_store_get(struct srt_tier_store *s, const struct srt_key *keys, uint32_t n,
		       void *const *bufs, const size_t *caps, size_t *lens)
{
	size_t total = 0;
	int rc = SRT_ENOMEM;

	for (uint32_t i = 0; i < n; i++)
		lens[i] = 0;
	if (!n)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		total += srt_tier_obj_size(caps[i]);
	uint8_t *scratch = malloc(total);
	void **objs = malloc(n * sizeof(*objs));
	size_t *obj_caps = malloc(n * sizeof(*obj_caps));
	size_t *obj_lens = calloc(n, sizeof(*obj_lens));
	if (!scratch || !objs || !obj_caps || !obj_lens)
		goto out;
	uint8_t *p = scratch;
	for (uint32_t i = 0; i < n; i++) {
		objs[i] = p;
		obj_caps[i] = srt_tier_obj_size(caps[i]);
		p += obj_caps[i];
	}
	rc = s->vt->get(s->inst, keys, n, objs, obj_caps, obj_lens);
	if (rc)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		const void *payload;
		size_t len;
		char why[256], hex[2 * SRT_KEY_BYTES + 1];

		if (!obj_lens[i])
			continue;
		int vrc = srt_tier_obj_decode(objs[i], obj_lens[i], &keys[i], s->layout_version,
					      &payload, &len, why, sizeof(why));
		if (vrc) {
			atomic_fetch_add(&s->rejected, 1);
			s->host->log(SRT_LOG_WARN, s->name, "object %s rejected, removing it: %s",
				     srt_tier_key_hex(&keys[i], hex), why);
			int rrc = s->vt->remove(s->inst, &keys[i], 1);
			if (rrc)
				s->host->log(SRT_LOG_WARN, s->name, "removing object %s failed (%d)",
					     hex, rrc);
			continue;
		}
		memcpy(bufs[i], payload, len);
		lens[i] = len;
	}
out:
	free(obj_lens);
	free(obj_caps);
	free(objs);
	free(scratch);
	return rc;
}

int srt_tier_store_exists(struct srt_tier_store *s, const struct srt_key *keys, uint32_t n,
			  uint32_t *n_present)
{
	*n_present = 0;
	if (!n)
		return 0;
	return s->vt->exists(s->inst, keys, n, n_present);
}

int srt_tier_store_remove(struct srt_tier_store *s, const struct srt_key *keys, uint32_t n)
{
	if (!n)
		return 0;
	return s->vt->remove(s->inst, keys, n);
}
