/* Strict bounded JSON parser: see json.h. */
#include "ckpt/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/plugin.h>

struct parser {
	const char *s;
	size_t len;
	size_t pos;
	struct srt_cj_doc *doc;
	uint32_t cap;
	char *sbuf;   /* decoded strings */
	size_t sused;
	char *err;
	size_t errlen;
	int failed;
};

static int fail(struct parser *p, const char *fmt, ...)
{
	if (!p->failed && p->err && p->errlen) {
		int n = snprintf(p->err, p->errlen, "JSON byte %zu: ", p->pos);
		if (n >= 0 && (size_t)n < p->errlen) {
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	p->failed = 1;
	return SRT_EINVAL;
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len) {
		char c = p->s[p->pos];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

static const char *describe(struct parser *p)
{
	static _Thread_local char buf[24];
	if (p->pos >= p->len)
		return "end of input";
	unsigned char c = (unsigned char)p->s[p->pos];
	if (c >= 0x20 && c < 0x7f)
		snprintf(buf, sizeof(buf), "'%c'", c);
	else
		snprintf(buf, sizeof(buf), "byte 0x%02x", c);
	return buf;
}

static int new_node(struct parser *p, enum srt_cj_type t, uint32_t *idx)
{
	struct srt_cj_doc *d = p->doc;
	if (d->n_nodes == p->cap) {
		uint32_t ncap = p->cap ? p->cap * 2 : 64;
		if (ncap < p->cap) /* overflow */
			return fail(p, "too many values");
		struct srt_cj_node *nn = realloc(d->nodes, (size_t)ncap * sizeof(*nn));
		if (!nn) {
			fail(p, "out of memory");
			return SRT_ENOMEM;
		}
		d->nodes = nn;
		p->cap = ncap;
	}
	*idx = d->n_nodes++;
	struct srt_cj_node *n = &d->nodes[*idx];
	memset(n, 0, sizeof(*n));
	n->type = t;
	n->pos = p->pos;
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int read_hex4(struct parser *p, uint32_t *out)
{
	if (p->len - p->pos < 4)
		return fail(p, "truncated \\u escape");
	uint32_t v = 0;
	for (int k = 0; k < 4; k++) {
		int h = hexval(p->s[p->pos + (size_t)k]);
		if (h < 0)
			return fail(p, "bad hex digit in \\u escape");
		v = v * 16 + (uint32_t)h;
	}
	p->pos += 4;
	*out = v;
	return 0;
}

static void put_utf8(struct parser *p, uint32_t cp)
{
	char *o = p->sbuf + p->sused;
	if (cp < 0x80) {
		o[0] = (char)cp;
		p->sused += 1;
	} else if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		p->sused += 2;
	} else if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		p->sused += 3;
	} else {
		o[0] = (char)(0xf0 | (cp >> 18));
		o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[3] = (char)(0x80 | (cp & 0x3f));
		p->sused += 4;
	}
}

/* Length of a valid UTF-8 sequence starting at s[0] (at most avail bytes), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t avail)
{
	unsigned char c = s[0];
	size_t n;
	uint32_t cp;
	if (c < 0x80)
		return 1;
	if ((c & 0xe0) == 0xc0) {
		n = 2;
		cp = c & 0x1f;
	} else if ((c & 0xf0) == 0xe0) {
		n = 3;
		cp = c & 0x0f;
	} else if ((c & 0xf8) == 0xf0) {
		n = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (avail < n)
		return 0;
	for (size_t k = 1; k < n; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[k] & 0x3f);
	}
	if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* Parses a string literal at p->pos (which is '"'); decoded text goes to sbuf. */
static int parse_string(struct parser *p, const char **out, size_t *out_len)
{
	p->pos++; /* opening quote */
	size_t start = p->sused;
	for (;;) {
		if (p->pos >= p->len)
			return fail(p, "unterminated string");
		unsigned char c = (unsigned char)p->s[p->pos];
		if (c == '"') {
			p->pos++;
			break;
		}
		if (c < 0x20)
			return fail(p, "control character 0x%02x in string", c);
		if (c == '\\') {
			p->pos++;
			if (p->pos >= p->len)
				return fail(p, "unterminated escape");
			char e = p->s[p->pos++];
			switch (e) {
			case '"': p->sbuf[p->sused++] = '"'; break;
			case '\\': p->sbuf[p->sused++] = '\\'; break;
			case '/': p->sbuf[p->sused++] = '/'; break;
			case 'b': p->sbuf[p->sused++] = '\b'; break;
			case 'f': p->sbuf[p->sused++] = '\f'; break;
			case 'n': p->sbuf[p->sused++] = '\n'; break;
			case 'r': p->sbuf[p->sused++] = '\r'; break;
			case 't': p->sbuf[p->sused++] = '\t'; break;
			case 'u': {
				uint32_t cp;
				if (read_hex4(p, &cp))
					return SRT_EINVAL;
				if (cp >= 0xd800 && cp <= 0xdbff) {
					uint32_t lo;
					if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
						return fail(p, "unpaired UTF-16 surrogate");
					p->pos += 2;
					if (read_hex4(p, &lo))
						return SRT_EINVAL;
					if (lo < 0xdc00 || lo > 0xdfff)
						return fail(p, "bad UTF-16 low surrogate");
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				} else if (cp >= 0xdc00 && cp <= 0xdfff) {
					return fail(p, "unpaired UTF-16 surrogate");
				}
				put_utf8(p, cp);
				break;
			}
			default:
				p->pos--;
				return fail(p, "bad escape '\\%c'", e);
			}
			continue;
		}
		size_t n = utf8_seq((const unsigned char *)p->s + p->pos, p->len - p->pos);
		if (!n)
			return fail(p, "invalid UTF-8 in string");
		memcpy(p->sbuf + p->sused, p->s + p->pos, n);
		p->sused += n;
		p->pos += n;
	}
	p->sbuf[p->sused++] = '\0';
	/* sbuf may not move: it was sized for the whole input up front. */
	*out = p->sbuf + start;
	*out_len = p->sused - start - 1;
	return 0;
}

static int parse_number(struct parser *p, struct srt_cj_node *n)
{
	size_t b = p->pos;
	size_t i = p->pos;
	int integral = 1;
	if (i < p->len && p->s[i] == '-')
		i++;
	if (i >= p->len || p->s[i] < '0' || p->s[i] > '9')
		return fail(p, "expected a digit");
	if (p->s[i] == '0') {
		i++;
	} else {
		while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
			i++;
	}
	if (i < p->len && p->s[i] == '.') {
		integral = 0;
		i++;
		if (i >= p->len || p->s[i] < '0' || p->s[i] > '9') {
			p->pos = i;
			return fail(p, "expected a digit after '.'");
		}
		while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
			i++;
	}
	if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
		integral = 0;
		i++;
		if (i < p->len && (p->s[i] == '+' || p->s[i] == '-'))
			i++;
		if (i >= p->len || p->s[i] < '0' || p->s[i] > '9') {
			p->pos = i;
			return fail(p, "expected a digit in exponent");
		}
		while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
			i++;
	}
	size_t nl = i - b;
	if (nl > 400)
		return fail(p, "number literal too long");
	char tmp[401];
	memcpy(tmp, p->s + b, nl);
	tmp[nl] = '\0';
	n->d = strtod(tmp, NULL);
	if (integral) {
		errno = 0;
		long long v = strtoll(tmp, NULL, 10);
		if (errno == 0) {
			n->is_int = 1;
			n->i = (int64_t)v;
		}
	}
	p->pos = i;
	return 0;
}

static int match_lit(struct parser *p, const char *lit)
{
	size_t l = strlen(lit);
	if (p->len - p->pos < l || memcmp(p->s + p->pos, lit, l))
		return fail(p, "unexpected %s", describe(p));
	p->pos += l;
	return 0;
}

static int parse_value(struct parser *p, int depth, uint32_t *out);

static int parse_container(struct parser *p, int depth, uint32_t self, int is_obj)
{
	char close = is_obj ? '}' : ']';
	p->pos++; /* opening bracket */
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
		return 0;
	}
	uint32_t prev = 0;
	for (;;) {
		const char *key = NULL;
		size_t key_len = 0;
		skip_ws(p);
		if (is_obj) {
			if (p->pos >= p->len || p->s[p->pos] != '"')
				return fail(p, "expected a '\"' to start an object key, got %s", describe(p));
			if (parse_string(p, &key, &key_len))
				return SRT_EINVAL;
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':')
				return fail(p, "expected ':' after object key, got %s", describe(p));
			p->pos++;
		}
		uint32_t child;
		int rc = parse_value(p, depth + 1, &child);
		if (rc)
			return rc;
		struct srt_cj_node *c = &p->doc->nodes[child];
		c->key = key;
		c->key_len = key_len;
		struct srt_cj_node *s = &p->doc->nodes[self];
		if (s->count == UINT32_MAX)
			return fail(p, "too many members");
		s->count++;
		if (prev)
			p->doc->nodes[prev].next = child;
		else
			s->child = child;
		prev = child;
		skip_ws(p);
		if (p->pos < p->len && p->s[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (p->pos < p->len && p->s[p->pos] == close) {
			p->pos++;
			return 0;
		}
		return fail(p, "expected ',' or '%c', got %s", close, describe(p));
	}
}

static int parse_value(struct parser *p, int depth, uint32_t *out)
{
	if (depth > SRT_CJ_MAX_DEPTH)
		return fail(p, "nesting deeper than %d", SRT_CJ_MAX_DEPTH);
	skip_ws(p);
	if (p->pos >= p->len)
		return fail(p, "expected a value, got end of input");
	char c = p->s[p->pos];
	uint32_t idx;
	int rc;
	switch (c) {
	case '{':
	case '[':
		if ((rc = new_node(p, c == '{' ? SRT_CJ_OBJ : SRT_CJ_ARR, &idx)))
			return rc;
		*out = idx;
		return parse_container(p, depth, idx, c == '{');
	case '"': {
		if ((rc = new_node(p, SRT_CJ_STR, &idx)))
			return rc;
		const char *s;
		size_t l;
		if (parse_string(p, &s, &l))
			return SRT_EINVAL;
		p->doc->nodes[idx].str = s;
		p->doc->nodes[idx].str_len = l;
		*out = idx;
		return 0;
	}
	case 't':
	case 'f':
		if ((rc = new_node(p, SRT_CJ_BOOL, &idx)))
			return rc;
		p->doc->nodes[idx].d = c == 't';
		*out = idx;
		return match_lit(p, c == 't' ? "true" : "false");
	case 'n':
		if ((rc = new_node(p, SRT_CJ_NULL, &idx)))
			return rc;
		*out = idx;
		return match_lit(p, "null");
	default:
		if (c == '-' || (c >= '0' && c <= '9')) {
			if ((rc = new_node(p, SRT_CJ_NUM, &idx)))
				return rc;
			*out = idx;
			return parse_number(p, &p->doc->nodes[idx]);
		}
		return fail(p, "expected a value, got %s", describe(p));
	}
}

int srt_cj_parse(const char *text, size_t len, struct srt_cj_doc *doc, char *err, size_t errlen)
{
	memset(doc, 0, sizeof(*doc));
	if (err && errlen)
		err[0] = '\0';
	if (len > SRT_CJ_MAX_INPUT) {
		if (err && errlen)
			snprintf(err, errlen, "JSON text of %zu bytes exceeds the %zu-byte limit", len,
				 SRT_CJ_MAX_INPUT);
		return SRT_EINVAL;
	}
	struct parser p = {.s = text, .len = len, .doc = doc, .err = err, .errlen = errlen};
	/* Decoded strings never outgrow their literal (quotes included), so len + 1 suffices. */
	p.sbuf = malloc(len + 1);
	if (!p.sbuf) {
		if (err && errlen)
			snprintf(err, errlen, "out of memory for a %zu-byte JSON text", len);
		return SRT_ENOMEM;
	}
	doc->strings = p.sbuf;
	uint32_t root;
	int rc = parse_value(&p, 0, &root);
	if (!rc) {
		skip_ws(&p);
		if (p.pos != p.len)
			rc = fail(&p, "trailing %s after the top-level value", describe(&p));
	}
	if (rc) {
		srt_cj_free(doc);
		return rc == SRT_ENOMEM ? rc : SRT_EINVAL;
	}
	return 0;
}

void srt_cj_free(struct srt_cj_doc *doc)
{
	free(doc->nodes);
	free(doc->strings);
	memset(doc, 0, sizeof(*doc));
}

const struct srt_cj_node *srt_cj_first(const struct srt_cj_doc *doc, const struct srt_cj_node *n)
{
	if (!n || (n->type != SRT_CJ_ARR && n->type != SRT_CJ_OBJ) || !n->count)
		return NULL;
	return &doc->nodes[n->child];
}

const struct srt_cj_node *srt_cj_next(const struct srt_cj_doc *doc, const struct srt_cj_node *n)
{
	if (!n || !n->next)
		return NULL;
	return &doc->nodes[n->next];
}

const struct srt_cj_node *srt_cj_get(const struct srt_cj_doc *doc, const struct srt_cj_node *obj,
				     const char *key)
{
	if (!obj || obj->type != SRT_CJ_OBJ)
		return NULL;
	size_t kl = strlen(key);
	for (const struct srt_cj_node *c = srt_cj_first(doc, obj); c; c = srt_cj_next(doc, c))
		if (c->key_len == kl && !memcmp(c->key, key, kl))
			return c;
	return NULL;
}

const char *srt_cj_type_name(enum srt_cj_type t)
{
	switch (t) {
	case SRT_CJ_NULL: return "null";
	case SRT_CJ_BOOL: return "a boolean";
	case SRT_CJ_NUM: return "a number";
	case SRT_CJ_STR: return "a string";
	case SRT_CJ_ARR: return "an array";
	case SRT_CJ_OBJ: return "an object";
	}
	return "?";
}
