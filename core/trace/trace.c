/* Mooncake-format trace reader (trace.h). A small parser for this one flat JSON shape. */
#include "trace/trace.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

struct lp {
	const char *s, *path;
	size_t line;
	char *err;
	size_t errlen;
};

static void ws(struct lp *p)
{
	while (*p->s && isspace((unsigned char)*p->s))
		p->s++;
}
static int fail(struct lp *p, const char *key, const char *what)
{
	seterr(p->err, p->errlen, "%s:%zu: %s%s%s%s", p->path, p->line, key ? "key '" : "",
	       key ? key : "", key ? "': " : "", what);
	return SRT_EINVAL;
}
static int num(struct lp *p, const char *key, uint64_t *v)
{
	ws(p);
	if (!isdigit((unsigned char)*p->s))
		return fail(p, key, "expected a non-negative integer");
	errno = 0;
	char *end;
	unsigned long long x = strtoull(p->s, &end, 10);
	if (errno || *end == '.' || *end == 'e' || *end == 'E')
		return fail(p, key, "expected a non-negative integer");
	p->s = end;
	*v = x;
	return 0;
}
/* Skip any JSON value (for keys we ignore). */
static int skip_value(struct lp *p, const char *key)
{
	ws(p);
	int depth = 0, instr = 0;
	do {
		char ch = *p->s;
		if (!ch)
			return fail(p, key, "value runs past the end of the line");
		if (instr) {
			if (ch == '\\' && p->s[1])
				p->s++;
			else if (ch == '"')
				instr = 0;
		} else if (ch == '"') {
			instr = 1;
		} else if (ch == '[' || ch == '{') {
			depth++;
		} else if (ch == ']' || ch == '}') {
			if (!depth)
				return 0;
			depth--;
		} else if (ch == ',' && !depth) {
			return 0;
		}
		p->s++;
	} while (depth || instr || (*p->s != ',' && *p->s != '}'));
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

/* Parse one line into r (hash ids appended to ids; r->hash_ids set later). */
static int parse_line(struct lp *p, struct srt_trace_req *r, struct ids *ids, size_t *first_id)
{
	int have_ts = 0, have_in = 0, have_out = 0, have_h = 0;
	ws(p);
	if (*p->s != '{')
		return fail(p, NULL, "expected a JSON object");
	p->s++;
	*first_id = ids->n;
	for (;;) {
		ws(p);
		if (*p->s == '}')
			break;
		if (*p->s != '"')
			return fail(p, NULL, "expected a key");
		const char *k = ++p->s;
		while (*p->s && *p->s != '"')
			p->s++;
		if (!*p->s)
			return fail(p, NULL, "unterminated key");
		char key[64];
		snprintf(key, sizeof(key), "%.*s", (int)(p->s - k), k);
		p->s++;
		ws(p);
		if (*p->s != ':')
			return fail(p, key, "expected ':'");
		p->s++;
		uint64_t v;
		int rc = 0;
		int *have = !strcmp(key, "timestamp")	   ? &have_ts
			    : !strcmp(key, "input_length")  ? &have_in
			    : !strcmp(key, "output_length") ? &have_out
			    : !strcmp(key, "hash_ids")	   ? &have_h
							   : NULL;
		if (have && *have)
			return fail(p, key, "given twice");
		if (!strcmp(key, "timestamp")) {
			rc = num(p, key, &v);
			if (!rc && v > INT64_MAX)
				return fail(p, key, "larger than 2^63 - 1 ms");
			r->timestamp_ms = (int64_t)v;
			have_ts = 1;
		} else if (!strcmp(key, "input_length") || !strcmp(key, "output_length")) {
			uint64_t *len = key[0] == 'i' ? &r->input_length : &r->output_length;
			rc = num(p, key, len);
			if (!rc && *len > SRT_TRACE_MAX_TOKENS)
				return fail(p, key, "more than " SRT_TRACE_MAX_TOKENS_STR
					    " tokens (longer than any model's context)");
			*have = 1;
		} else if (!strcmp(key, "hash_ids")) {
			ws(p);
			if (*p->s != '[')
				return fail(p, key, "expected an array of block ids");
			p->s++;
			ws(p);
			while (*p->s != ']') {
				if ((rc = num(p, key, &v)))
					return rc;
				if (ids_push(ids, v))
					return fail(p, key, "out of memory");
				ws(p);
				if (*p->s == ',')
					p->s++;
				else if (*p->s != ']')
					return fail(p, key, "expected ',' or ']'");
			}
			p->s++;
			have_h = 1;
		} else {
			rc = skip_value(p, key);
		}
		if (rc)
			return rc;
		ws(p);
		if (*p->s == ',')
			p->s++;
		else if (*p->s != '}')
			return fail(p, key, "expected ',' or '}' after the value");
	}
	p->s++;
	ws(p);
	if (*p->s)
		return fail(p, NULL, "unexpected text after the JSON object");
	if (!have_ts || !have_in || !have_out || !have_h)
		return fail(p, !have_ts ? "timestamp" : !have_in ? "input_length"
					: !have_out ? "output_length" : "hash_ids",
			    "missing");
	size_t n = ids->n - *first_id;
	size_t want = (r->input_length + SRT_TRACE_BLOCK - 1) / SRT_TRACE_BLOCK;
	if (n != want) {
		char what[128];
		snprintf(what, sizeof(what), "has %zu ids, expected ceil(input_length %llu / 512) = %zu",
			 n, (unsigned long long)r->input_length, want);
		return fail(p, "hash_ids", what);
	}
	r->n_hash = (uint32_t)n;
	return 0;
}

int srt_trace_load(const char *path, size_t limit, struct srt_trace **out, char *err,
		   size_t errlen)
{
	*out = NULL;
	FILE *f = fopen(path, "r");
	if (!f) {
		seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return SRT_EIO;
	}
	struct srt_trace *t = calloc(1, sizeof(*t));
	struct ids ids = {0};
	size_t *first = NULL, cap = 0;
	char *line = NULL;
	size_t lcap = 0, lineno = 0;
	int rc = t ? 0 : SRT_ENOMEM;
	ssize_t got;
	while (!rc && (!limit || t->n < limit) && (got = getline(&line, &lcap, f)) >= 0) {
		lineno++;
		struct lp p = {line, path, lineno, err, errlen};
		if (memchr(line, 0, (size_t)got)) {
			rc = fail(&p, NULL, "contains a NUL byte: not a JSON-lines text file");
			break;
		}
		ws(&p);
		if (!*p.s)
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
		rc = parse_line(&p, r, &ids, &first[t->n]);
		if (!rc) {
			t->input_tokens += r->input_length;
			t->n++;
		}
	}
	if (!rc && ferror(f)) {
		seterr(err, errlen, "%s: read error after line %zu", path, lineno);
		rc = SRT_EIO;
	}
	if (rc == SRT_ENOMEM)
		seterr(err, errlen, "%s: out of memory at line %zu", path, lineno);
	fclose(f);
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
		t->reqs[i].hash_ids = ids.v + first[i];
	free(first);
	*out = t;
	return 0;
}

void srt_trace_free(struct srt_trace *t)
{
	if (!t)
		return;
	free(t->ids_);
	free(t->reqs);
	free(t);
}
