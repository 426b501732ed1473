/*
 * srt_tok decoding: ids to bytes, lossy UTF-8 (maximal-subpart replacement), the streaming
 * decoder, and the growable output buffers.
 */
#include <stdlib.h>
#include <string.h>

#include <shadowrt/plugin.h>

#include "tok/tok_int.h"

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

void srt_tok_ids_free(struct srt_tok_ids *ids)
{
	free(ids->ids);
	*ids = (struct srt_tok_ids){0};
}

void srt_tok_text_free(struct srt_tok_text *text)
{
	free(text->data);
	*text = (struct srt_tok_text){0};
}

int srt_tok_ids_push(struct srt_tok_ids *ids, const int32_t *src, size_t n)
{
	if (!n) /* ids->ids may still be NULL: no pointer arithmetic on it */
		return 0;
	if (ids->n + n > ids->cap) {
		size_t cap = ids->cap ? ids->cap : 64;
		while (cap < ids->n + n)
			cap *= 2;
		int32_t *p = realloc(ids->ids, cap * sizeof(*p));
		if (!p)
			return SRT_ENOMEM;
		ids->ids = p;
		ids->cap = cap;
	}
	memcpy(ids->ids + ids->n, src, n * sizeof(*src));
	ids->n += n;
	return 0;
}

int srt_tok_text_append(struct srt_tok_text *text, const void *src, size_t len)
{
	if (text->len + len + 1 > text->cap) {
		size_t cap = text->cap ? text->cap : 64;
		while (cap < text->len + len + 1)
			cap *= 2;
		char *p = realloc(text->data, cap);
		if (!p)
			return SRT_ENOMEM;
		text->data = p;
		text->cap = cap;
	}
	if (len)
		memcpy(text->data + text->len, src, len);
	text->len += len;
	text->data[text->len] = 0;
	return 0;
}

/* ---- UTF-8 ----------------------------------------------------------------------------------- */

int tk_utf8_next(const unsigned char *s, size_t n, size_t *sub)
{
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	unsigned need, lo = 0x80, hi = 0xBF;
	if (c >= 0xC2 && c <= 0xDF)
		need = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		*sub = 1;
		return 0;
	}
	for (unsigned k = 1; k < need; k++) {
		if (k >= n) {
			*sub = n;
			return -1;
		}
		unsigned b = s[k];
		unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
		if (b < l || b > h) {
			*sub = k;
			return 0;
		}
	}
	return (int)need;
}

bool srt_tok_utf8_valid(const char *src, size_t len)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t i = 0, sub;
	while (i < len) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		int l = tk_utf8_next(s + i, len - i, &sub);
		if (l <= 0)
			return false;
		i += (size_t)l;
	}
	return true;
}

/* Append s[0..len) lossily; with hold, an unfinished character at the end is not replaced but
 * its length returned in *held (the caller keeps those bytes). */
static int lossy(const unsigned char *s, size_t len, bool hold, size_t *held,
		 struct srt_tok_text *out)
{
	size_t i = 0, run = 0, sub;
	int rc;
	if (held)
		*held = 0;
	while (i < len) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		int l = tk_utf8_next(s + i, len - i, &sub);
		if (l > 0) {
			i += (size_t)l;
			continue;
		}
		if ((rc = srt_tok_text_append(out, s + run, i - run)))
			return rc;
		if (l < 0 && hold) {
			*held = sub;
			return 0;
		}
		if ((rc = srt_tok_text_append(out, k_fffd, 3)))
			return rc;
		i += sub;
		run = i;
	}
	if (run == i) /* nothing left (s may be NULL when len is 0) */
		return srt_tok_text_append(out, "", 0);
	return srt_tok_text_append(out, s + run, i - run);
}

int srt_tok_utf8_lossy(const char *src, size_t len, struct srt_tok_text *out)
{
	return lossy((const unsigned char *)src, len, false, NULL, out);
}

bool tk_is_space(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
	       c == 0x205F || c == 0x3000;
}

/* ---- decode ---------------------------------------------------------------------------------- */

int srt_tok_decode(const struct srt_tok *t, const int32_t *ids, size_t n, unsigned flags,
		   struct srt_tok_text *out, char *err, size_t errlen)
{
	struct srt_tok_text raw = {0}, *dst = (flags & SRT_TOK_LOSSY) ? &raw : out;
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		if (id < 0 || (uint32_t)id >= t->n_ids || !t->tokens[id].assigned) {
			rc = tk_errf(err, errlen, SRT_EINVAL,
				     "token id %d at position %zu is not in the vocabulary (size %u)", id,
				     i, t->n_ids);
			goto out;
		}
		const struct tk_token *tk = &t->tokens[id];
		if ((flags & SRT_TOK_SKIP_SPECIAL) && tk->special)
			continue;
		if ((rc = srt_tok_text_append(dst, t->arena + tk->off, tk->len)))
			goto out;
	}
	if (dst == &raw)
		rc = lossy((const unsigned char *)raw.data, raw.len, false, NULL, out);
	else
		rc = srt_tok_text_append(out, "", 0);
out:
	if (rc == SRT_ENOMEM)
		tk_errf(err, errlen, rc, "out of memory");
	srt_tok_text_free(&raw);
	return rc;
}

void srt_tok_stream_init(struct srt_tok_stream *s, const struct srt_tok *tok, unsigned flags)
{
	memset(s, 0, sizeof(*s));
	s->tok = tok;
	s->flags = flags & SRT_TOK_SKIP_SPECIAL;
}

int srt_tok_stream_push(struct srt_tok_stream *s, int32_t id, struct srt_tok_text *out,
			char *err, size_t errlen)
{
	const struct srt_tok *t = s->tok;
	if (id < 0 || (uint32_t)id >= t->n_ids || !t->tokens[id].assigned)
		return tk_errf(err, errlen, SRT_EINVAL, "token id %d is not in the vocabulary (size %u)",
			       id, t->n_ids);
	const struct tk_token *tk = &t->tokens[id];
	if ((s->flags & SRT_TOK_SKIP_SPECIAL) && tk->special)
		return srt_tok_text_append(out, "", 0);
	const unsigned char *b = (const unsigned char *)t->arena + tk->off;
	size_t len = tk->len, held;
	int rc;
	if (!s->n_held) {
		if ((rc = lossy(b, len, true, &held, out)))
			return rc;
		memcpy(s->held, b + len - held, held);
		s->n_held = (unsigned)held;
		return 0;
	}
	/* Complete the held character with the first bytes of this token (at most 3 more). */
	unsigned char tmp[8];
	size_t k = 4 - s->n_held < len ? 4 - s->n_held : len;
	memcpy(tmp, s->held, s->n_held);
	memcpy(tmp + s->n_held, b, k);
	size_t tn = s->n_held + k, sub;
	int l = tk_utf8_next(tmp, tn, &sub);
	size_t used; /* bytes of tmp consumed */
	if (l < 0) {
		/* still unfinished: the whole token was absorbed (len < what was missing) */
		memcpy(s->held, tmp, tn);
		s->n_held = (unsigned)tn;
		return srt_tok_text_append(out, "", 0);
	}
	if (l > 0) {
		rc = srt_tok_text_append(out, tmp, (size_t)l);
		used = (size_t)l;
	} else {
		rc = srt_tok_text_append(out, k_fffd, 3);
		used = sub;
	}
	if (rc)
		return rc;
	/* used >= n_held always (the held prefix was well-formed), so the rest starts in b */
	size_t from = used - s->n_held;
	s->n_held = 0;
	if ((rc = lossy(b + from, len - from, true, &held, out)))
		return rc;
	memcpy(s->held, b + len - held, held);
	s->n_held = (unsigned)held;
	return 0;
}

int srt_tok_stream_finish(struct srt_tok_stream *s, struct srt_tok_text *out)
{
	int rc = s->n_held ? srt_tok_text_append(out, k_fffd, 3) : srt_tok_text_append(out, "", 0);
	s->n_held = 0;
	return rc;
}
