/* Mooncake-format trace reader (trace.h): bounded lines, each parsed by jansson. */
#include "trace/trace.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <shadowrt/plugin.h>

static void seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t len, const char *fmt, ...)
{
	if (!err || !len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void srt_trace_block_tokens(uint64_t h, int32_t out[SRT_TRACE_BLOCK])
{
	uint64_t s = h * 0xd1b54a32d192ed03ull + 0x5eed;
	for (uint32_t i = 0; i < SRT_TRACE_BLOCK; i++)
		out[i] = (int32_t)(splitmix(&s) % SRT_TRACE_VOCAB);
}

void srt_trace_input_tokens(const struct srt_trace_req *r, int32_t *out)
{
	int32_t blk[SRT_TRACE_BLOCK];
	for (uint32_t b = 0; b < r->n_hash; b++) {
		uint64_t at = (uint64_t)b * SRT_TRACE_BLOCK;
		uint64_t n = r->input_length - at < SRT_TRACE_BLOCK ? r->input_length - at
								    : SRT_TRACE_BLOCK;
		srt_trace_block_tokens(r->hash_ids[b], blk);
		memcpy(out + at, blk, n * sizeof(int32_t));
	}
}

/* num(): a valid integer above the bound (the caller words the message). */
#define TR_RANGE 1

struct lp {
	const char *path;
	size_t line;
	char *err;
	size_t errlen;
};

static int fail(struct lp *p, const char *key, const char *what)
{
	seterr(p->err, p->errlen, "%s:%zu: %s%s%s%s", p->path, p->line, key ? "key '" : "",
	       key ? key : "", key ? "': " : "", what);
	return SRT_EINVAL;
}

/* A JSON integer in [0, max]. */
static int num(struct lp *p, const char *key, const json_t *v, uint64_t max, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return fail(p, key, "expected a non-negative integer");
	if ((uint64_t)json_integer_value(v) > max)
		return TR_RANGE;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

struct ids {
	uint64_t *v;
	size_t n, cap;
};
static int ids_push(struct ids *a, uint64_t x)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 1 << 16;
		uint64_t *v = realloc(a->v, cap * sizeof(*v));
		if (!v)
			return SRT_ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = x;
	return 0;
}

/* Parse one line (len bytes, jansson) into r (hash ids appended to ids; r->hash_ids set
 * later). */
static int parse_line(struct lp *p, const char *line, size_t len, struct srt_trace_req *r,
		      struct ids *ids, size_t *first_id)
{
	json_error_t je;
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
	if (!o) {
		char what[220];
		/* jansson's "duplicate object key" names no key: find it for the message. */
		snprintf(what, sizeof(what), "%s (column %d)", je.text, je.column);
		return fail(p, NULL, what);
	}
	int rc = 0;
	*first_id = ids->n;
	if (!json_is_object(o)) {
		rc = fail(p, NULL, "expected a JSON object");
		goto out;
	}
	static const char *const keys[] = {"timestamp", "input_length", "output_length",
					   "hash_ids"};
	for (size_t k = 0; k < 4; k++)
		if (!json_object_get(o, keys[k])) {
			rc = fail(p, keys[k], "missing");
			goto out;
		}
	uint64_t ts;
	/* jansson refuses integers above 2^63 - 1 ("too big integer"): no range check here. */
	if ((rc = num(p, "timestamp", json_object_get(o, "timestamp"), INT64_MAX, &ts)))
		goto out;
	r->timestamp_ms = (int64_t)ts;
	for (int k = 0; k < 2; k++) {
		const char *key = k ? "output_length" : "input_length";
		uint64_t *len_out = k ? &r->output_length : &r->input_length;
		rc = num(p, key, json_object_get(o, key), SRT_TRACE_MAX_TOKENS, len_out);
		if (rc == TR_RANGE)
			rc = fail(p, key, "more than " SRT_TRACE_MAX_TOKENS_STR
				  " tokens (longer than any model's context)");
		if (rc)
			goto out;
	}
	const json_t *h = json_object_get(o, "hash_ids");
	if (!json_is_array(h)) {
		rc = fail(p, "hash_ids", "expected an array of block ids");
		goto out;
	}
	size_t i;
	const json_t *v;
	json_array_foreach(h, i, v) {
		uint64_t id;
		if ((rc = num(p, "hash_ids", v, INT64_MAX, &id)))
			goto out;
		if (ids_push(ids, id)) {
			rc = fail(p, "hash_ids", "out of memory");
			goto out;
		}
	}
	size_t n = ids->n - *first_id;
	size_t want = (r->input_length + SRT_TRACE_BLOCK - 1) / SRT_TRACE_BLOCK;
	if (n != want) {
		char what[128];
		snprintf(what, sizeof(what), "has %zu ids, expected ceil(input_length %llu / 512) = %zu",
			 n, (unsigned long long)r->input_length, want);
		rc = fail(p, "hash_ids", what);
		goto out;
	}
	r->n_hash = (uint32_t)n;
out:
	json_decref(o);
	return rc;
}

/*
 * Read one line (without its '\n') into buf[cap]: 1 and *len, 0 at end of file, or a negative
 * code: SRT_EINVAL when the line is longer than cap - 1 bytes, SRT_EIO when the read failed
 * (errno kept). A failed read is never taken for the end of the file.
 */
static int read_line(FILE *f, char *buf, size_t cap, size_t *len)
{
	size_t n = 0;
	int c;
	errno = 0;
	while ((c = getc_unlocked(f)) != EOF) {
		if (c == '\n') {
			*len = n;
			return 1;
		}
		if (n + 1 >= cap)
			return SRT_EINVAL;
		buf[n++] = (char)c;
	}
	if (ferror(f))
		return SRT_EIO;
	*len = n;
	return n ? 1 : 0;
}

int srt_trace_load_stream(FILE *f, const char *path, size_t limit, struct srt_trace **out,
			  char *err, size_t errlen)
{
	*out = NULL;
	struct srt_trace *t = calloc(1, sizeof(*t));
	struct ids ids = {0};
	size_t *first = NULL, cap = 0;
	char *line = malloc(SRT_TRACE_MAX_LINE + 1);
	size_t len = 0, lineno = 0;
	int rc = t && line ? 0 : SRT_ENOMEM;
	while (!rc && (!limit || t->n < limit)) {
		int got = read_line(f, line, SRT_TRACE_MAX_LINE + 1, &len);
		if (got == 0)
			break;
		lineno++;
		struct lp p = {path, lineno, err, errlen};
		if (got == SRT_EIO) {
			seterr(err, errlen, "%s:%zu: read error: %s", path, lineno,
			       strerror(errno ? errno : EIO));
			rc = SRT_EIO;
			break;
		}
		if (got == SRT_EINVAL) {
			rc = fail(&p, NULL, "line longer than " SRT_TRACE_MAX_LINE_STR " bytes (not a "
				  "trace line: its longest, 32768 hash ids, takes under 700 KB)");
			break;
		}
		if (memchr(line, 0, len)) {
			rc = fail(&p, NULL, "contains a NUL byte: not a JSON-lines text file");
			break;
		}
		size_t k = 0;
		while (k < len && isspace((unsigned char)line[k]))
			k++;
		if (k == len)
			continue; /* blank line */
		if (t->n == cap) {
			cap = cap ? 2 * cap : 4096;
			struct srt_trace_req *r = realloc(t->reqs, cap * sizeof(*r));
			size_t *fi = realloc(first, cap * sizeof(*fi));
			if (r)
				t->reqs = r;
			if (fi)
				first = fi;
			if (!r || !fi) {
				rc = SRT_ENOMEM;
				break;
			}
		}
		struct srt_trace_req *r = &t->reqs[t->n];
		memset(r, 0, sizeof(*r));
		rc = parse_line(&p, line, len, r, &ids, &first[t->n]);
		if (!rc) {
			t->input_tokens += r->input_length;
			t->n++;
		}
	}
	if (rc == SRT_ENOMEM)
		seterr(err, errlen, "%s: out of memory at line %zu", path, lineno);
	free(line);
	if (rc) {
		free(first);
		free(ids.v);
		if (t)
			free(t->reqs);
		free(t);
		return rc;
	}
	t->ids_ = ids.v;
	for (size_t i = 0; i < t->n; i++)
		t->reqs[i].hash_ids = ids.v ? ids.v + first[i] : NULL; /* NULL: no ids at all */
	free(first);
	*out = t;
	return 0;
}

int srt_trace_load(const char *path, size_t limit, struct srt_trace **out, char *err,
		   size_t errlen)
{
	*out = NULL;
	FILE *f = fopen(path, "re");
	if (!f) {
		seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return SRT_EIO;
	}
	int rc = srt_trace_load_stream(f, path, limit, out, err, errlen);
	fclose(f);
	return rc;
}

void srt_trace_free(struct srt_trace *t)
{
	if (!t)
		return;
	free(t->ids_);
	free(t->reqs);
	free(t);
}
