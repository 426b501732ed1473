/*
 * srt_tok loader: tokenizer.json (jansson) into the tables of tok_int.h, with a message naming
 * the file and the JSON field for anything malformed or unsupported.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <shadowrt/plugin.h>

#include "tok/tok_int.h"

#define TK_MAX_ID (1u << 24) /* ids above this are refused (no real vocabulary is that big) */

uint64_t tk_hash(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

/* ---- byte-level alphabet (GPT-2's bytes_to_unicode) ---------------------------------- */

/* Code point of byte b in the byte-level alphabet. */
static uint32_t bl_cp_of_byte(unsigned b)
{
	if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae))
		return b;
	/* The other 68 bytes, in increasing order, take 256, 257, ... */
	unsigned n = 0;
	for (unsigned c = 0; c < b; c++)
		if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae)))
			n++;
	return 256 + n;
}

/* Decode one UTF-8 code point of a (valid, NUL-free JSON) string; returns its length. */
static size_t cp_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t sub;
	int l = tk_utf8_next(s, n, &sub);
	if (l <= 0) {
		*cp = 0xFFFFFFFFu;
		return l == 0 ? sub : n;
	}
	uint32_t c = s[0];
	if (l == 2)
		c = ((c & 0x1f) << 6) | (s[1] & 0x3f);
	else if (l == 3)
		c = ((c & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
	else if (l == 4)
		c = ((c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
		    ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
	*cp = c;
	return (size_t)l;
}

/* ---- arena and maps --------------------------------------------------------------------- */

static int arena_add(struct srt_tok *t, const void *p, size_t n, uint32_t *off)
{
	if (t->arena_len + n + 1 > t->arena_cap) {
		size_t cap = t->arena_cap ? t->arena_cap : 1 << 20;
		while (cap < t->arena_len + n + 1)
			cap *= 2;
		if (cap > UINT32_MAX)
			return SRT_ENOMEM;
		char *a = realloc(t->arena, cap);
		if (!a)
			return SRT_ENOMEM;
		t->arena = a;
		t->arena_cap = cap;
	}
	memcpy(t->arena + t->arena_len, p, n);
	*off = (uint32_t)t->arena_len;
	t->arena_len += n;
	return 0;
}

static int map_init(struct tk_map *m, uint32_t n)
{
	uint32_t cap = 16;
	while (cap < n * 2 + 16)
		cap *= 2;
	m->slot = calloc(cap, sizeof(*m->slot));
	m->mask = cap - 1;
	return m->slot ? 0 : SRT_ENOMEM;
}

static bool map_key_eq(const struct srt_tok *t, const struct tk_map *m, uint32_t id,
		       const void *key, size_t len)
{
	const struct tk_token *tk = &t->tokens[id];
	uint32_t off = m->model ? tk->voff : tk->off, l = m->model ? tk->vlen : tk->len;
	return l == len && !memcmp(t->arena + off, key, len);
}

int32_t tk_map_get(const struct srt_tok *t, const struct tk_map *m, const void *key, size_t len)
{
	if (!m->slot)
		return -1;
	uint32_t i = (uint32_t)tk_hash(key, len) & m->mask;
	for (;;) {
		uint32_t v = m->slot[i];
		if (!v)
			return -1;
		if (map_key_eq(t, m, v - 1, key, len))
			return (int32_t)(v - 1);
		i = (i + 1) & m->mask;
	}
}

/* Insert id under its token bytes; returns the id already there, or -1 when inserted. */
static int32_t map_put(struct srt_tok *t, struct tk_map *m, int32_t id, const char *key,
		       size_t len)
{
	uint32_t i = (uint32_t)tk_hash(key, len) & m->mask;
	for (;;) {
		uint32_t v = m->slot[i];
		if (!v) {
			m->slot[i] = (uint32_t)id + 1;
			return -1;
		}
		if (map_key_eq(t, m, v - 1, key, len))
			return (int32_t)(v - 1);
		i = (i + 1) & m->mask;
	}
}

/*
 * Bytes of a byte-level token string: each code point mapped back through the alphabet.
 * Returns true and fills buf (len *n) when every code point is in the alphabet; false when
 * not (the string is then not a byte-level token: HF's decoder emits its UTF-8 verbatim).
 */
static bool bl_bytes(const int16_t *inv, const char *s, size_t len, char *buf, size_t *n)
{
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		i += cp_decode((const unsigned char *)s + i, len - i, &cp);
		if (cp >= 324 || inv[cp] < 0)
			return false;
		buf[o++] = (char)inv[cp];
	}
	*n = o;
	return true;
}

/* ---- trie of added tokens ----------------------------------------------------------------- */

static int trie_add(struct srt_tok *t, struct tk_trie *tr, uint32_t added_idx)
{
	const struct tk_added *a = &t->added[added_idx];
	const unsigned char *s = (const unsigned char *)t->arena + a->off;
	if (!tr->n) {
		tr->cap = 1024;
		tr->n = malloc(tr->cap * sizeof(*tr->n));
		if (!tr->n)
			return SRT_ENOMEM;
		tr->n[0] = (struct tk_trie_node){-1, -1, -1, 0};
		tr->count = 1;
	}
	tr->first[s[0]] = 1;
	int32_t node = 0;
	for (uint32_t i = 0; i < a->len; i++) {
		int32_t c = tr->n[node].child;
		while (c >= 0 && tr->n[c].byte != s[i])
			c = tr->n[c].sibling;
		if (c < 0) {
			if (tr->count == tr->cap) {
				struct tk_trie_node *nn = realloc(tr->n, 2 * tr->cap * sizeof(*nn));
				if (!nn)
					return SRT_ENOMEM;
				tr->n = nn;
				tr->cap *= 2;
			}
			c = (int32_t)tr->count++;
			tr->n[c] = (struct tk_trie_node){-1, tr->n[node].child, -1, s[i]};
			tr->n[node].child = c;
		}
		node = c;
	}
	if (tr->n[node].added < 0)
		tr->n[node].added = (int32_t)added_idx;
	return 0;
}

/* ---- regex translation ------------------------------------------------------------------ */

/*
 * HF compiles Split regexes with Oniguruma (Ruby syntax). PCRE2 (UTF + UCP) reads nearly all
 * of them the same; what is translated here:
 *   - \h / \H (Oniguruma: hex digit; PCRE2: horizontal space), \uHHHH (PCRE2: \x{HHHH});
 *   - general-category classes \p{L}, \p{Lu}, \pL, \p{^L}, \P{L}, and \d: the code points the
 *     category gained between PCRE2's Unicode tables and the reference's (ucd_delta.c) are
 *     added, so a Unicode 16 emoji is \p{S} here as it is there. (A negated category inside a
 *     bracket class cannot be widened and is passed through.)
 * Everything else is passed through.
 */
static bool ucd_needed(void)
{
	char v[32] = "";
	if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, v) < 0)
		return true;
	return atoi(v) < atoi(tk_ucd_delta_version);
}

/* Append the gained ranges of category cat (one or two letters) to out. */
static int ucd_append(struct srt_tok_text *out, const char *cat, size_t len)
{
	if (!ucd_needed()) /* cheap; no static state, so loads may run in parallel */
		return 0;
	for (const struct tk_ucd_delta *d = tk_ucd_delta; d->cat; d++) {
		if (len == 1 ? d->cat[0] != cat[0] : (len != 2 || memcmp(d->cat, cat, 2)))
			continue;
		int rc = srt_tok_text_append(out, d->ranges, strlen(d->ranges));
		if (rc)
			return rc;
	}
	return 0;
}

static bool is_gc_name(const char *s, size_t n)
{
	static const char *const one = "CLMNPSZ";
	if (n == 1)
		return strchr(one, s[0]) != NULL;
	if (n == 2 && strchr(one, s[0]))
		return s[1] >= 'a' && s[1] <= 'z';
	return false;
}

static int translate_regex(const char *in, size_t len, struct srt_tok_text *out, char *why,
			   size_t whylen)
{
	bool in_class = false;
	int rc = 0;
	for (size_t i = 0; i < len && !rc; i++) {
		char c = in[i];
		if (c == '\\' && i + 1 < len) {
			char d = in[i + 1];
			if (d == 'h') {
				rc = srt_tok_text_append(out, in_class ? "0-9a-fA-F" : "[0-9a-fA-F]",
							 in_class ? 9 : 11);
				i++;
			} else if (d == 'H') {
				if (in_class) {
					snprintf(why, whylen, "\\H inside a character class (offset %zu)", i);
					return SRT_EINVAL;
				}
				rc = srt_tok_text_append(out, "[^0-9a-fA-F]", 12);
				i++;
			} else if (d == 'u' && i + 6 <= len) {
				char buf[16];
				snprintf(buf, sizeof(buf), "\\x{%.4s}", in + i + 2);
				rc = srt_tok_text_append(out, buf, strlen(buf));
				i += 5;
			} else if (d == 'p' || d == 'P' || d == 'd') {
				/* \p{Name}, \p{^Name}, \P{Name}, \pL, \d */
				const char *name = "Nd";
				size_t nlen = 2, end = i + 2;
				bool neg = d == 'P';
				if (d != 'd') {
					if (i + 2 < len && in[i + 2] == '{') {
						const char *close = memchr(in + i + 3, '}', len - i - 3);
						if (!close) {
							snprintf(why, whylen, "unterminated \\%c{ (offset %zu)", d, i);
							return SRT_EINVAL;
						}
						name = in + i + 3;
						nlen = (size_t)(close - name);
						end = (size_t)(close - in) + 1;
						if (nlen && name[0] == '^') {
							neg = !neg;
							name++;
							nlen--;
						}
					} else if (i + 2 < len) {
						name = in + i + 2;
						nlen = 1;
						end = i + 3;
					}
				}
				if (!is_gc_name(name, nlen) || (neg && in_class)) {
					rc = srt_tok_text_append(out, in + i, end - i);
				} else {
					if (!in_class)
						rc = srt_tok_text_append(out, neg ? "[^" : "[", neg ? 2 : 1);
					if (!rc)
						rc = srt_tok_text_append(out, in + i, end - i);
					if (!rc && neg && d == 'P') {
						/* inside [^...] the class itself is positive */
						out->data[out->len - (end - i) + 1] = 'p';
					} else if (!rc && neg) {
						/* \p{^X} -> \p{X} inside [^...] */
						char tmp[16];
						snprintf(tmp, sizeof(tmp), "\\p{%.*s}", (int)nlen, name);
						out->len -= end - i;
						rc = srt_tok_text_append(out, tmp, strlen(tmp));
					}
					if (!rc)
						rc = ucd_append(out, name, nlen);
					if (!rc && !in_class)
						rc = srt_tok_text_append(out, "]", 1);
				}
				i = end - 1;
			} else {
				rc = srt_tok_text_append(out, in + i, 2);
				i++;
			}
		} else if (c == '[' && !in_class) {
			in_class = true;
			/* a ']' right after '[' or '[^' is a literal */
			rc = srt_tok_text_append(out, &c, 1);
			if (!rc && i + 1 < len && in[i + 1] == '^') {
				rc = srt_tok_text_append(out, "^", 1);
				i++;
			}
			if (!rc && i + 1 < len && in[i + 1] == ']') {
				rc = srt_tok_text_append(out, "]", 1);
				i++;
			}
		} else {
			if (c == ']' && in_class)
				in_class = false;
			rc = srt_tok_text_append(out, &c, 1);
		}
	}
	return rc ? rc : srt_tok_text_append(out, "", 0);
}

static int compile_split(struct srt_tok *t, struct tk_split *sp, const char *pat, size_t len,
			 bool literal, const char *field, char *err, size_t errlen)
{
	struct srt_tok_text tr = {0};
	char why[128] = "";
	int rc;
	if (literal)
		rc = srt_tok_text_append(&tr, pat, len);
	else
		rc = translate_regex(pat, len, &tr, why, sizeof(why));
	if (rc) {
		srt_tok_text_free(&tr);
		if (rc == SRT_EINVAL)
			return tk_errf(err, errlen, rc, "%s: %s: unsupported regex: %s", t->name, field,
				       why);
		return tk_errf(err, errlen, rc, "out of memory");
	}
	int ec;
	PCRE2_SIZE eo;
	uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
	sp->re = pcre2_compile((PCRE2_SPTR)tr.data, tr.len, opts, &ec, &eo, NULL);
	srt_tok_text_free(&tr);
	if (!sp->re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(ec, msg, sizeof(msg));
		return tk_errf(err, errlen, SRT_EINVAL, "%s: %s: regex does not compile at offset %zu: %s",
			       t->name, field, (size_t)eo, (const char *)msg);
	}
	sp->jit = pcre2_jit_compile(sp->re, PCRE2_JIT_COMPLETE) == 0;
	uint32_t groups = 0;
	pcre2_pattern_info(sp->re, PCRE2_INFO_CAPTURECOUNT, &groups);
	if (groups + 1 > t->max_groups)
		t->max_groups = groups + 1;
	return 0;
}

/* ---- JSON helpers ------------------------------------------------------------------------ */

static const char *jstr(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(json_t *o, const char *key, bool def)
{
	json_t *v = json_object_get(o, key);
	return json_is_boolean(v) ? json_is_true(v) : def;
}

static int add_split(struct srt_tok *t, struct tk_split *sp)
{
	struct tk_split *ns = realloc(t->splits, (t->n_splits + 1) * sizeof(*ns));
	if (!ns)
		return SRT_ENOMEM;
	t->splits = ns;
	t->splits[t->n_splits++] = *sp;
	return 0;
}

/* GPT-2's split, which a ByteLevel pre-tokenizer with use_regex applies (HF's built-in). */
static const char bl_gpt2_regex[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int load_pretok_one(struct srt_tok *t, json_t *p, const char *field, bool last,
			   char *err, size_t errlen)
{
	const char *type = jstr(p, "type");
	if (!type)
		return tk_errf(err, errlen, SRT_EINVAL, "%s: %s.type: missing", t->name, field);
	struct tk_split sp = {0};
	char f2[160];
	int rc;
	if (!strcmp(type, "Split")) {
		json_t *pat = json_object_get(p, "pattern");
		const char *rx = jstr(pat, "Regex"), *lit = jstr(pat, "String");
		snprintf(f2, sizeof(f2), "%s.pattern", field);
		if (!rx && !lit)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: %s: expected {\"Regex\": ...} or {\"String\": ...}", t->name, f2);
		const char *beh = jstr(p, "behavior");
		if (!beh)
			return tk_errf(err, errlen, SRT_EINVAL, "%s: %s.behavior: missing", t->name, field);
		if (!strcmp(beh, "Isolated"))
			sp.behavior = TK_ISOLATED;
		else if (!strcmp(beh, "Removed"))
			sp.behavior = TK_REMOVED;
		else if (!strcmp(beh, "MergedWithPrevious"))
			sp.behavior = TK_MERGED_PREV;
		else if (!strcmp(beh, "MergedWithNext"))
			sp.behavior = TK_MERGED_NEXT;
		else if (!strcmp(beh, "Contiguous"))
			sp.behavior = TK_CONTIGUOUS;
		else
			return tk_errf(err, errlen, SRT_EINVAL, "%s: %s.behavior: unknown value '%s'",
				       t->name, field, beh);
		sp.invert = jbool(p, "invert", false);
		const char *s = rx ? rx : lit;
		json_t *sv = json_object_get(pat, rx ? "Regex" : "String");
		if ((rc = compile_split(t, &sp, s, json_string_length(sv), !rx, f2, err, errlen)))
			return rc;
		if ((rc = add_split(t, &sp))) {
			pcre2_code_free(sp.re);
			return rc;
		}
		return 0;
	}
	if (!strcmp(type, "ByteLevel")) {
		if (!last)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: %s: ByteLevel must be the last pre-tokenizer", t->name, field);
		t->byte_level = true;
		bool prefix = jbool(p, "add_prefix_space", false);
		bool use_regex = jbool(p, "use_regex", true);
		if (!use_regex && !prefix)
			return 0;
		snprintf(f2, sizeof(f2), "%s (ByteLevel use_regex)", field);
		if (use_regex) {
			if ((rc = compile_split(t, &sp, bl_gpt2_regex, strlen(bl_gpt2_regex), false, f2,
						err, errlen)))
				return rc;
		}
		sp.behavior = TK_ISOLATED;
		sp.prefix_space = prefix;
		if ((rc = add_split(t, &sp))) {
			pcre2_code_free(sp.re);
			return rc;
		}
		return 0;
	}
	return tk_errf(err, errlen, SRT_EINVAL,
		       "%s: %s.type: '%s' is not supported (Split, ByteLevel, Sequence are)", t->name,
		       field, type);
}

static int load_pretok(struct srt_tok *t, json_t *root, char *err, size_t errlen)
{
	json_t *p = json_object_get(root, "pre_tokenizer");
	if (!p || json_is_null(p))
		return 0;
	if (!json_is_object(p))
		return tk_errf(err, errlen, SRT_EINVAL, "%s: pre_tokenizer: expected an object", t->name);
	const char *type = jstr(p, "type");
	if (type && !strcmp(type, "Sequence")) {
		json_t *arr = json_object_get(p, "pretokenizers");
		if (!json_is_array(arr))
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: pre_tokenizer.pretokenizers: expected an array", t->name);
		size_t n = json_array_size(arr);
		for (size_t i = 0; i < n; i++) {
			char f[64];
			snprintf(f, sizeof(f), "pre_tokenizer.pretokenizers[%zu]", i);
			json_t *e = json_array_get(arr, i);
			if (!json_is_object(e))
				return tk_errf(err, errlen, SRT_EINVAL, "%s: %s: expected an object",
					       t->name, f);
			int rc = load_pretok_one(t, e, f, i + 1 == n, err, errlen);
			if (rc)
				return rc;
		}
		return 0;
	}
	return load_pretok_one(t, p, "pre_tokenizer", true, err, errlen);
}

static int check_normalizer(struct srt_tok *t, json_t *root, char *err, size_t errlen)
{
	json_t *n = json_object_get(root, "normalizer");
	if (!n || json_is_null(n))
		return 0;
	const char *type = jstr(n, "type");
	json_t *list = json_object_get(n, "normalizers");
	if (type && !strcmp(type, "Sequence") && json_is_array(list) && !json_array_size(list))
		return 0;
	return tk_errf(err, errlen, SRT_EINVAL,
		       "%s: normalizer: only null or an empty Sequence is supported (got type '%s')",
		       t->name, type ? type : "?");
}

static int check_decoder(struct srt_tok *t, json_t *root, char *err, size_t errlen)
{
	json_t *d = json_object_get(root, "decoder");
	if (!d || json_is_null(d))
		return 0;
	const char *type = jstr(d, "type");
	if (type && !strcmp(type, "ByteLevel"))
		return 0;
	return tk_errf(err, errlen, SRT_EINVAL,
		       "%s: decoder.type: only ByteLevel is supported (got '%s')", t->name,
		       type ? type : "?");
}

/* ---- model ---------------------------------------------------------------------------------- */

static int grow_ids(struct srt_tok *t, uint32_t n_ids)
{
	if (n_ids <= t->n_ids)
		return 0;
	struct tk_token *nt = realloc(t->tokens, n_ids * sizeof(*nt));
	if (!nt)
		return SRT_ENOMEM;
	memset(nt + t->n_ids, 0, (n_ids - t->n_ids) * sizeof(*nt));
	t->tokens = nt;
	t->n_ids = n_ids;
	return 0;
}

/* Resolve one merge part (a token string) to its id; -2 when it is a vocab token that is not
 * byte-level (unreachable by byte-level BPE), -1 when absent. */
static int32_t merge_part(struct srt_tok *t, const int16_t *inv, json_t *vocab, const char *s,
			  size_t len, char *buf)
{
	size_t n;
	if (bl_bytes(inv, s, len, buf, &n))
		return tk_map_get(t, &t->vocab, buf, n);
	char tmp[512];
	if (len >= sizeof(tmp))
		return -1;
	memcpy(tmp, s, len);
	tmp[len] = 0;
	return json_is_integer(json_object_get(vocab, tmp)) ? -2 : -1;
}

static int load_model(struct srt_tok *t, json_t *root, const int16_t *inv, char *err,
		      size_t errlen)
{
	json_t *m = json_object_get(root, "model");
	if (!json_is_object(m))
		return tk_errf(err, errlen, SRT_EINVAL, "%s: model: missing or not an object", t->name);
	const char *type = jstr(m, "type");
	if (type && strcmp(type, "BPE"))
		return tk_errf(err, errlen, SRT_EINVAL,
			       "%s: model.type: '%s' is not supported (only BPE)", t->name, type);
	json_t *dropout = json_object_get(m, "dropout");
	if (dropout && !json_is_null(dropout))
		return tk_errf(err, errlen, SRT_EINVAL,
			       "%s: model.dropout: must be null (BPE dropout is a training feature)",
			       t->name);
	static const char *const unsup[] = {"continuing_subword_prefix", "end_of_word_suffix"};
	for (size_t i = 0; i < 2; i++) {
		const char *v = jstr(m, unsup[i]);
		if (v && *v)
			return tk_errf(err, errlen, SRT_EINVAL, "%s: model.%s: '%s' is not supported",
				       t->name, unsup[i], v);
	}
	if (jbool(m, "byte_fallback", false))
		return tk_errf(err, errlen, SRT_EINVAL,
			       "%s: model.byte_fallback: true is not supported", t->name);
	t->ignore_merges = jbool(m, "ignore_merges", false);
	t->fuse_unk = jbool(m, "fuse_unk", false);

	json_t *vocab = json_object_get(m, "vocab");
	if (!json_is_object(vocab))
		return tk_errf(err, errlen, SRT_EINVAL, "%s: model.vocab: missing or not an object",
			       t->name);
	size_t nv = json_object_size(vocab);
	uint32_t max_id = 0;
	const char *key;
	json_t *val;
	json_object_foreach(vocab, key, val)
	{
		if (!json_is_integer(val) || json_integer_value(val) < 0 ||
		    json_integer_value(val) >= TK_MAX_ID)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: model.vocab['%s']: expected an id in [0, %u)", t->name, key,
				       TK_MAX_ID);
		if ((uint32_t)json_integer_value(val) > max_id)
			max_id = (uint32_t)json_integer_value(val);
	}
	int rc;
	if ((rc = grow_ids(t, max_id + 1)) || (rc = map_init(&t->vocab, (uint32_t)nv)))
		return tk_errf(err, errlen, SRT_ENOMEM, "out of memory");
	t->vocab.model = true;
	for (int i = 0; i < 256; i++)
		t->byte_id[i] = -1;
	char buf[4096];
	json_object_foreach(vocab, key, val)
	{
		uint32_t id = (uint32_t)json_integer_value(val);
		size_t klen = strlen(key), n;
		if (t->tokens[id].assigned)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: model.vocab['%s']: id %u already used by another token",
				       t->name, key, id);
		bool bl = klen < sizeof(buf) && bl_bytes(inv, key, klen, buf, &n);
		if (!bl)
			n = klen;
		uint32_t off;
		if ((rc = arena_add(t, bl ? buf : key, n, &off)))
			return tk_errf(err, errlen, rc, "out of memory");
		t->tokens[id] = (struct tk_token){off, (uint32_t)n, off, (uint32_t)n, 1, 0, 0};
		if (!bl)
			continue;
		if (map_put(t, &t->vocab, (int32_t)id, t->arena + off, n) >= 0)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: model.vocab['%s']: the same bytes as another token", t->name,
				       key);
		if (n == 1)
			t->byte_id[(unsigned char)buf[0]] = (int32_t)id;
	}
	t->unk_id = -1;
	const char *unk = jstr(m, "unk_token");
	if (unk) {
		json_t *u = json_object_get(vocab, unk);
		if (!json_is_integer(u))
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: model.unk_token: '%s' is not in model.vocab", t->name, unk);
		t->unk_id = (int32_t)json_integer_value(u);
	}

	json_t *merges = json_object_get(m, "merges");
	if (!json_is_array(merges))
		return tk_errf(err, errlen, SRT_EINVAL, "%s: model.merges: missing or not an array",
			       t->name);
	size_t nm = json_array_size(merges);
	uint32_t cap = 16;
	while (cap < nm * 2 + 16)
		cap *= 2;
	t->merges = calloc(cap, sizeof(*t->merges));
	if (!t->merges)
		return tk_errf(err, errlen, SRT_ENOMEM, "out of memory");
	t->merge_mask = cap - 1;
	char pa[1024], pb[1024], bufa[1024], cat[2048];
	for (size_t r = 0; r < nm; r++) {
		json_t *e = json_array_get(merges, r);
		const char *a, *b;
		size_t la, lb;
		if (json_is_string(e)) {
			const char *s = json_string_value(e), *sp = strchr(s, ' ');
			if (!sp || strchr(sp + 1, ' '))
				return tk_errf(err, errlen, SRT_EINVAL,
					       "%s: model.merges[%zu]: '%s' is not two tokens separated by one space",
					       t->name, r, s);
			la = (size_t)(sp - s);
			lb = strlen(sp + 1);
			if (la >= sizeof(pa) || lb >= sizeof(pb))
				return tk_errf(err, errlen, SRT_EINVAL, "%s: model.merges[%zu]: too long",
					       t->name, r);
			memcpy(pa, s, la);
			pa[la] = 0;
			memcpy(pb, sp + 1, lb + 1);
			a = pa;
			b = pb;
		} else if (json_is_array(e) && json_array_size(e) == 2 &&
			   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
			a = json_string_value(json_array_get(e, 0));
			b = json_string_value(json_array_get(e, 1));
			la = strlen(a);
			lb = strlen(b);
			if (la >= sizeof(pa) || lb >= sizeof(pb))
				return tk_errf(err, errlen, SRT_EINVAL, "%s: model.merges[%zu]: too long",
					       t->name, r);
		} else {
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", t->name, r);
		}
		int32_t ia = merge_part(t, inv, vocab, a, la, bufa);
		int32_t ib = merge_part(t, inv, vocab, b, lb, bufa);
		if (ia == -1 || ib == -1)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: model.merges[%zu]: token '%s' is not in model.vocab", t->name, r,
				       ia == -1 ? a : b);
		memcpy(cat, a, la);
		memcpy(cat + la, b, lb);
		cat[la + lb] = 0;
		json_t *res = json_object_get(vocab, cat);
		if (!json_is_integer(res))
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: model.merges[%zu]: merged token '%s' is not in model.vocab",
				       t->name, r, cat);
		if (ia < 0 || ib < 0)
			continue; /* not byte-level: byte-level BPE never meets it */
		uint64_t k = (((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib) + 1;
		uint32_t i = (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & t->merge_mask;
		while (t->merges[i].key && t->merges[i].key != k)
			i = (i + 1) & t->merge_mask;
		if (t->merges[i].key)
			continue; /* a repeated merge keeps its first (lowest) rank, as HF does */
		t->merges[i] = (struct tk_merge){k, (int32_t)r, (int32_t)json_integer_value(res)};
	}
	return 0;
}

static int load_added(struct srt_tok *t, json_t *root, char *err, size_t errlen)
{
	json_t *arr = json_object_get(root, "added_tokens");
	if (!arr || json_is_null(arr))
		return 0;
	if (!json_is_array(arr))
		return tk_errf(err, errlen, SRT_EINVAL, "%s: added_tokens: expected an array", t->name);
	size_t n = json_array_size(arr);
	t->added = calloc(n ? n : 1, sizeof(*t->added));
	if (!t->added || map_init(&t->added_map, (uint32_t)n))
		return tk_errf(err, errlen, SRT_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i);
		json_t *jid = json_object_get(e, "id");
		const char *content = jstr(e, "content");
		if (!json_is_integer(jid) || json_integer_value(jid) < 0 ||
		    json_integer_value(jid) >= TK_MAX_ID)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: added_tokens[%zu].id: expected an id in [0, %u)", t->name, i,
				       TK_MAX_ID);
		if (!content || !*content)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: added_tokens[%zu].content: expected a non-empty string", t->name,
				       i);
		uint32_t id = (uint32_t)json_integer_value(jid);
		size_t len = json_string_length(json_object_get(e, "content"));
		int rc;
		if ((rc = grow_ids(t, id + 1)))
			return tk_errf(err, errlen, rc, "out of memory");
		uint32_t off;
		if ((rc = arena_add(t, content, len, &off)))
			return tk_errf(err, errlen, rc, "out of memory");
		struct tk_added *a = &t->added[t->n_added];
		*a = (struct tk_added){(int32_t)id, off, (uint32_t)len, jbool(e, "special", false),
				       jbool(e, "normalized", !jbool(e, "special", false)),
				       jbool(e, "lstrip", false), jbool(e, "rstrip", false),
				       jbool(e, "single_word", false)};
		/* An added token decodes to its content; it may shadow a model token's id. */
		struct tk_token *tk = &t->tokens[id];
		tk->off = off;
		tk->len = (uint32_t)len;
		tk->assigned = tk->added = 1;
		tk->special = a->special;
		int32_t prev = map_put(t, &t->added_map, (int32_t)id, content, len);
		if (prev >= 0 && prev != (int32_t)id)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "%s: added_tokens[%zu]: content '%s' already has id %d", t->name, i,
				       content, prev);
		if (prev >= 0)
			continue;
		if ((rc = trie_add(t, a->normalized ? &t->trie_norm : &t->trie_raw, t->n_added)))
			return tk_errf(err, errlen, rc, "out of memory");
		t->n_added++;
	}
	return 0;
}

/* ---- public -------------------------------------------------------------------------------- */

int srt_tok_load_buffer(const char *json, size_t len, const char *name, struct srt_tok **out,
			char *err, size_t errlen)
{
	*out = NULL;
	if (len > SRT_TOK_MAX_FILE)
		return tk_errf(err, errlen, SRT_EINVAL, "%s: %zu bytes is over the %zu-byte limit", name,
			       len, SRT_TOK_MAX_FILE);
	struct srt_tok *t = calloc(1, sizeof(*t));
	if (!t || !(t->name = strdup(name))) {
		free(t);
		return tk_errf(err, errlen, SRT_ENOMEM, "out of memory");
	}
	t->bos_id = t->eos_id = -1;
	json_error_t je;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	int rc;
	if (!root) {
		rc = tk_errf(err, errlen, SRT_EINVAL, "%s:%d:%d: not valid JSON: %s", name, je.line,
			     je.column, je.text);
		goto out_free;
	}
	if (!json_is_object(root)) {
		rc = tk_errf(err, errlen, SRT_EINVAL, "%s: expected a JSON object at the top", name);
		goto out_json;
	}
	int16_t inv[324];
	for (int i = 0; i < 324; i++)
		inv[i] = -1;
	for (unsigned b = 0; b < 256; b++)
		inv[bl_cp_of_byte(b)] = (int16_t)b;
	if ((rc = check_normalizer(t, root, err, errlen)) || (rc = check_decoder(t, root, err, errlen)) ||
	    (rc = load_model(t, root, inv, err, errlen)) || (rc = load_added(t, root, err, errlen)) ||
	    (rc = load_pretok(t, root, err, errlen)))
		goto out_json;
	if (!t->byte_level) {
		rc = tk_errf(err, errlen, SRT_EINVAL,
			     "%s: pre_tokenizer: no ByteLevel step: only byte-level BPE tokenizers are "
			     "supported",
			     name);
		goto out_json;
	}
	t->cache = calloc(TK_CACHE_SHARDS, sizeof(*t->cache));
	if (!t->cache) {
		rc = tk_errf(err, errlen, SRT_ENOMEM, "out of memory");
		goto out_json;
	}
	for (int i = 0; i < TK_CACHE_SHARDS; i++)
		pthread_mutex_init(&t->cache[i].mu, NULL);
	json_decref(root);
	*out = t;
	return 0;
out_json:
	json_decref(root);
out_free:
	srt_tok_free(t);
	return rc;
}

static int read_file(const char *path, char **buf, size_t *len, size_t max, char *err,
		     size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return tk_errf(err, errlen, errno == ENOENT ? SRT_ENOENT : SRT_EIO, "%s: cannot open: %s",
			       path, strerror(errno));
	struct stat st;
	if (fstat(fileno(f), &st) || st.st_size < 0 || (size_t)st.st_size > max) {
		fclose(f);
		return tk_errf(err, errlen, SRT_EINVAL, "%s: not a regular file of at most %zu bytes",
			       path, max);
	}
	*len = (size_t)st.st_size;
	*buf = malloc(*len + 1);
	if (!*buf) {
		fclose(f);
		return tk_errf(err, errlen, SRT_ENOMEM, "out of memory");
	}
	size_t got = fread(*buf, 1, *len, f);
	fclose(f);
	if (got != *len) {
		free(*buf);
		return tk_errf(err, errlen, SRT_EIO, "%s: short read", path);
	}
	(*buf)[*len] = 0;
	return 0;
}

int srt_tok_load(const char *path, struct srt_tok **out, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	*out = NULL;
	int rc = read_file(path, &buf, &len, SRT_TOK_MAX_FILE, err, errlen);
	if (rc)
		return rc;
	rc = srt_tok_load_buffer(buf, len, path, out, err, errlen);
	free(buf);
	return rc;
}

/* bos_token / eos_token of tokenizer_config.json: a string or {"content": ...}. */
static int config_token(struct srt_tok *t, json_t *cfg, const char *key, const char *path,
			int32_t *id, char *err, size_t errlen)
{
	json_t *v = json_object_get(cfg, key);
	if (!v || json_is_null(v))
		return 0;
	const char *s = json_is_string(v) ? json_string_value(v) : jstr(v, "content");
	if (!s)
		return tk_errf(err, errlen, SRT_EINVAL,
			       "%s: %s: expected a string or an object with \"content\"", path, key);
	int32_t i = srt_tok_added_id(t, s, strlen(s));
	if (i < 0)
		i = srt_tok_vocab_id(t, s, strlen(s));
	if (i < 0)
		return tk_errf(err, errlen, SRT_EINVAL, "%s: %s: '%s' is not a token of the tokenizer",
			       path, key, s);
	*id = i;
	return 0;
}

int srt_tok_load_dir(const char *dir, struct srt_tok **out, char *err, size_t errlen)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	int rc = srt_tok_load(path, out, err, errlen);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	char *buf = NULL;
	size_t len = 0;
	char e2[4096 + 512];
	rc = read_file(path, &buf, &len, 16 << 20, e2, sizeof(e2));
	if (rc == SRT_ENOENT)
		return 0;
	if (rc)
		goto fail_msg;
	json_error_t je;
	json_t *cfg = json_loadb(buf, len, 0, &je);
	free(buf);
	if (!cfg || !json_is_object(cfg)) {
		snprintf(e2, sizeof(e2), "%s:%d:%d: not a JSON object: %s", path, je.line, je.column,
			 cfg ? "" : je.text);
		json_decref(cfg);
		rc = SRT_EINVAL;
		goto fail_msg;
	}
	rc = config_token(*out, cfg, "bos_token", path, &(*out)->bos_id, e2, sizeof(e2));
	if (!rc)
		rc = config_token(*out, cfg, "eos_token", path, &(*out)->eos_id, e2, sizeof(e2));
	json_decref(cfg);
	if (!rc)
		return 0;
fail_msg:
	srt_tok_free(*out);
	*out = NULL;
	return tk_errf(err, errlen, rc, "%s", e2);
}

void srt_tok_free(struct srt_tok *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->n_splits; i++)
		pcre2_code_free(t->splits[i].re);
	if (t->cache)
		for (int i = 0; i < TK_CACHE_SHARDS; i++)
			pthread_mutex_destroy(&t->cache[i].mu);
	free(t->cache);
	free(t->splits);
	free(t->trie_raw.n);
	free(t->trie_norm.n);
	free(t->added);
	free(t->added_map.slot);
	free(t->merges);
	free(t->vocab.slot);
	free(t->tokens);
	free(t->arena);
	free(t->name);
	free(t);
}

uint32_t srt_tok_vocab_size(const struct srt_tok *t)
{
	return t->n_ids;
}

int32_t srt_tok_bos_id(const struct srt_tok *t)
{
	return t->bos_id;
}

int32_t srt_tok_eos_id(const struct srt_tok *t)
{
	return t->eos_id;
}

int32_t srt_tok_added_id(const struct srt_tok *t, const char *text, size_t len)
{
	return tk_map_get(t, &t->added_map, text, len);
}

int32_t srt_tok_vocab_id(const struct srt_tok *t, const char *bytes, size_t len)
{
	return tk_map_get(t, &t->vocab, bytes, len);
}

bool srt_tok_is_special(const struct srt_tok *t, int32_t id)
{
	return id >= 0 && (uint32_t)id < t->n_ids && t->tokens[id].special;
}

const char *srt_tok_token_bytes(const struct srt_tok *t, int32_t id, size_t *len)
{
	if (id < 0 || (uint32_t)id >= t->n_ids || !t->tokens[id].assigned)
		return NULL;
	*len = t->tokens[id].len;
	return t->arena + t->tokens[id].off;
}

int srt_tok_shipped_dir(char *buf, size_t len)
{
	const char *env = getenv("SHADOWRT_TOKENIZER_DIR");
	if (env && *env) {
		snprintf(buf, len, "%s", env);
	} else {
		char exe[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		char *slash = n > 0 ? (exe[n] = 0, strrchr(exe, '/')) : NULL;
		if (!slash) {
			snprintf(buf, len, "(the executable's directory is unknown)");
			return SRT_ENOENT;
		}
		*slash = 0;
		snprintf(buf, len, "%s/../share/shadowrt/tokenizers/deepseek-v4", exe);
	}
	char probe[PATH_MAX + 32];
	snprintf(probe, sizeof(probe), "%s/tokenizer.json", buf);
	return access(probe, R_OK) ? SRT_ENOENT : 0;
}
