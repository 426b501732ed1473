/*
 * Runtime configuration loader (see runtime_config.h).
 *
 * Each INI text is read in two steps: a pre-scan of our own (line lengths, indented lines,
 * section headers, and the line of every key, since inih 55 does not give handlers line
 * numbers), then ini_parse_string, whose handler records every key = value with its line.
 * The built-in default, the user's file and the --set list are merged key by key (rc_overlay),
 * then interpreted.
 */
#include "config/runtime_config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include <ini.h>

#include <shadowrt/model.h>
#include <shadowrt/plugin.h>

#include "config/embedded.h"
#include "config/size.h"
#include "plugin/registry.h"

#define RC_MAX_FILE (1u << 20)
#define RC_DEFAULT_ORIGIN "conf/default.ini (built in)"

/* ---------------------------------------------------------------------------------------- */
/* String storage owned by a config.                                                          */

struct rc_store {
	char **strs;
	size_t n, cap;
	bool warned; /* check_model printed its warnings */
};

/* Zeroed block of len bytes owned by the store. */
static void *rc_alloc(struct rc_store *s, size_t len)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		char **p = realloc(s->strs, cap * sizeof(*p));
		if (!p)
			return NULL;
		s->strs = p;
		s->cap = cap;
	}
	char *d = calloc(1, len);
	if (!d)
		return NULL;
	s->strs[s->n++] = d;
	return d;
}

static char *rc_strdup(struct rc_store *s, const char *str, size_t len)
{
	char *d = rc_alloc(s, len + 1);
	if (d)
		memcpy(d, str, len);
	return d;
}

static void rc_store_free(struct rc_store *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->strs[i]);
	free(s->strs);
	free(s);
}

/* ---------------------------------------------------------------------------------------- */
/* Reading one INI text into entries.                                                         */

struct rc_keyline { /* from the pre-scan */
	char section[64];
	char key[64];
	int line;
	bool used;
};

struct rc_section {
	const char *name;
	const char *file;
	int line;
};

struct rc_list {
	struct rc_entry_vec {
		struct srt_rc_entry *v;
		size_t n, cap;
	} e;
	struct rc_section *sec;
	size_t nsec, capsec;
};

struct rc_parse {
	const char *origin;
	struct rc_store *store;
	struct rc_list *list;
	struct rc_keyline *kl;
	size_t nkl;
	char *err;
	size_t errlen;
	int failed; /* a message is in err */
};

static int rc_push_entry(struct rc_list *l, const struct srt_rc_entry *e)
{
	if (l->e.n == l->e.cap) {
		size_t cap = l->e.cap ? 2 * l->e.cap : 32;
		struct srt_rc_entry *p = realloc(l->e.v, cap * sizeof(*p));
		if (!p)
			return SRT_ENOMEM;
		l->e.v = p;
		l->e.cap = cap;
	}
	l->e.v[l->e.n++] = *e;
	return 0;
}

static int rc_push_section(struct rc_list *l, const struct rc_section *s)
{
	if (l->nsec == l->capsec) {
		size_t cap = l->capsec ? 2 * l->capsec : 16;
		struct rc_section *p = realloc(l->sec, cap * sizeof(*p));
		if (!p)
			return SRT_ENOMEM;
		l->sec = p;
		l->capsec = cap;
	}
	l->sec[l->nsec++] = *s;
	return 0;
}

static void rc_trim(const char **b, const char **e)
{
	while (*b < *e && isspace((unsigned char)**b))
		(*b)++;
	while (*e > *b && isspace((unsigned char)(*e)[-1]))
		(*e)--;
}

/* "file:line" or, for lines 0 (the command line), just "file". */
static const char *rc_loc(char *buf, size_t len, const char *file, int line)
{
	if (line > 0)
		snprintf(buf, len, "%s:%d", file, line);
	else
		snprintf(buf, len, "%s", file);
	return buf;
}

/* inih 55 keeps at most 49 bytes of a section name (INI_MAX_SECTION 50) and cuts the rest. */
#define RC_MAX_SECTION 49
#define RC_MAX_KEY 63

/*
 * Pre-scan: reject what inih would silently misread, and note the line of every section and
 * key. Mirrors inih's line grammar: comments start with ';' or '#', sections are [name], keys
 * end at the first '=' or ':'.
 */
static int rc_prescan(struct rc_parse *p, const char *text)
{
	char section[64] = "";
	int line = 0;
	size_t cap = 0;
	const char *s = text;

	if (!strncmp(s, "\xEF\xBB\xBF", 3))
		s += 3;
	while (*s) {
		const char *nl = strchr(s, '\n');
		const char *end = nl ? nl : s + strlen(s);
		const char *next = nl ? nl + 1 : end;
		size_t len = (size_t)(end - s);
		line++;
		if (len && s[len - 1] == '\r')
			len--;
		if (len > SRT_RC_MAX_LINE) {
			snprintf(p->err, p->errlen, "%s:%d: line is %zu bytes long; at most %d are "
				 "allowed (inih would silently cut it): shorten the value",
				 p->origin, line, len, SRT_RC_MAX_LINE);
			return SRT_EINVAL;
		}
		const char *b = s, *e = s + len;
		rc_trim(&b, &e);
		if (b == e || *b == ';' || *b == '#') {
			s = next;
			continue;
		}
		if (b != s) {
			snprintf(p->err, p->errlen, "%s:%d: indented line: inih would read it as a "
				 "continuation of the previous value; remove the leading whitespace",
				 p->origin, line);
			return SRT_EINVAL;
		}
		if (*b == '[') {
			const char *close = memchr(b, ']', (size_t)(e - b));
			if (!close) {
				snprintf(p->err, p->errlen, "%s:%d: section header without ']'",
					 p->origin, line);
				return SRT_EINVAL;
			}
			const char *nb = b + 1, *ne = close;
			rc_trim(&nb, &ne);
			if (ne == nb || (size_t)(ne - nb) > RC_MAX_SECTION) {
				snprintf(p->err, p->errlen, "%s:%d: %s section name (at most %d bytes)",
					 p->origin, line, ne == nb ? "empty" : "too long",
					 RC_MAX_SECTION);
				return SRT_EINVAL;
			}
			snprintf(section, sizeof(section), "%.*s", (int)(ne - nb), nb);
			for (size_t i = 0; i < p->list->nsec; i++)
				if (!strcmp(p->list->sec[i].name, section)) {
					snprintf(p->err, p->errlen, "%s:%d: section [%s] appears again "
						 "(first at line %d); write each section once",
						 p->origin, line, section, p->list->sec[i].line);
					return SRT_EINVAL;
				}
			struct rc_section sec = {rc_strdup(p->store, section, strlen(section)),
						 p->origin, line};
			if (!sec.name || rc_push_section(p->list, &sec))
				return SRT_ENOMEM;
		} else {
			const char *sep = b;
			while (sep < e && *sep != '=' && *sep != ':')
				sep++;
			if (sep == e) {
				int shown = (int)(e - b < 40 ? e - b : 40); /* this line only */
				snprintf(p->err, p->errlen, "%s:%d: expected 'key = value' or "
					 "'[section]', got '%.*s'", p->origin, line, shown, b);
				return SRT_EINVAL;
			}
			if (!section[0]) {
				snprintf(p->err, p->errlen, "%s:%d: key outside any section (start "
					 "the file with a [section] header)", p->origin, line);
				return SRT_EINVAL;
			}
			const char *kb = b, *ke = sep;
			rc_trim(&kb, &ke);
			if (kb == ke || (size_t)(ke - kb) > RC_MAX_KEY) {
				snprintf(p->err, p->errlen, "%s:%d: %s key (at most %d bytes before "
					 "'=')", p->origin, line, kb == ke ? "empty" : "too long",
					 RC_MAX_KEY);
				return SRT_EINVAL;
			}
			if (p->nkl == cap) {
				cap = cap ? 2 * cap : 32;
				struct rc_keyline *n = realloc(p->kl, cap * sizeof(*n));
				if (!n)
					return SRT_ENOMEM;
				p->kl = n;
			}
			struct rc_keyline *k = &p->kl[p->nkl++];
			snprintf(k->section, sizeof(k->section), "%s", section);
			snprintf(k->key, sizeof(k->key), "%.*s", (int)(ke - kb), kb);
			k->line = line;
			k->used = false;
		}
		s = next;
	}
	return 0;
}

/* inih handler: returns nonzero for success. */
static int rc_handler(void *user, const char *section, const char *name, const char *value)
{
	struct rc_parse *p = user;
	int line = 0;
	if (p->failed)
		return 0;
	/* inih hands "[ runtime ]" over as " runtime ": the pre-scan trimmed it, so trim too */
	char secbuf[RC_MAX_SECTION + 1];
	const char *sb = section, *se = section + strlen(section);
	rc_trim(&sb, &se);
	snprintf(secbuf, sizeof(secbuf), "%.*s", (int)(se - sb), sb);
	section = secbuf;
	for (size_t i = 0; i < p->nkl; i++)
		if (!p->kl[i].used && !strcmp(p->kl[i].section, section) &&
		    !strcmp(p->kl[i].key, name)) {
			p->kl[i].used = true;
			line = p->kl[i].line;
			break;
		}
	for (size_t i = 0; i < p->list->e.n; i++) {
		const struct srt_rc_entry *e = &p->list->e.v[i];
		if (e->file == p->origin && !strcmp(e->section, section) && !strcmp(e->key, name)) {
			snprintf(p->err, p->errlen, "%s:%d: key '%s' in [%s] is given twice (first "
				 "at line %d)", p->origin, line, name, section, e->line);
			p->failed = 1;
			return 0;
		}
	}
	struct srt_rc_entry e = {
		.section = rc_strdup(p->store, section, strlen(section)),
		.key = rc_strdup(p->store, name, strlen(name)),
		.value = rc_strdup(p->store, value, strlen(value)),
		.file = p->origin,
		.line = line,
	};
	if (!e.section || !e.key || !e.value || rc_push_entry(p->list, &e)) {
		snprintf(p->err, p->errlen, "%s: out of memory", p->origin);
		p->failed = 1;
		return 0;
	}
	return 1;
}

static int rc_read_text(struct rc_store *store, struct rc_list *list, const char *text,
			const char *origin, char *err, size_t errlen)
{
	struct rc_parse p = {
		.origin = origin, .store = store, .list = list, .err = err, .errlen = errlen,
	};
	int rc = rc_prescan(&p, text);
	if (rc) {
		if (rc == SRT_ENOMEM)
			snprintf(err, errlen, "%s: out of memory", origin);
		goto out;
	}
	int r = ini_parse_string(text, rc_handler, &p);
	if (r != 0) {
		if (!p.failed)
			snprintf(err, errlen, "%s:%d: syntax error (expected '[section]' or "
				 "'key = value')", origin, r);
		rc = SRT_EINVAL;
	}
out:
	free(p.kl);
	return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Interpreting entries.                                                                      */

#define RC_FAIL(e, ...)                                                                        \
	do {                                                                                   \
		char l_[256];                                                                  \
		int n_ = snprintf(err, errlen, "%s: [%s] %s: ",                                \
				  rc_loc(l_, sizeof(l_), (e)->file, (e)->line), (e)->section,  \
				  (e)->key);                                                   \
		if (n_ >= 0 && (size_t)n_ < errlen)                                            \
			snprintf(err + n_, errlen - (size_t)n_, __VA_ARGS__);                  \
		return SRT_EINVAL;                                                             \
	} while (0)

/* Edit distance with adjacent transpositions ("cas" -> "csa" is 1), case-insensitive; words
 * longer than 64 bytes are never close. */
static size_t rc_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), d[65][65];
	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			int ai = tolower((unsigned char)a[i - 1]), bj = tolower((unsigned char)b[j - 1]);
			size_t v = d[i - 1][j - 1] + (ai != bj);
			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == bj && d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[la][lb];
}

const char *srt_suggest(const char *word, const char *const *cands, size_t n)
{
	const char *best = NULL;
	size_t bd = SIZE_MAX, len = strlen(word);
	size_t limit = len < 4 ? 1 : len < 9 ? 2 : 3;
	for (size_t i = 0; i < n; i++) {
		if (!cands[i])
			continue;
		size_t d = rc_distance(word, cands[i]);
		if (d < bd) {
			bd = d;
			best = cands[i];
		}
	}
	return bd <= limit && bd > 0 ? best : NULL;
}

/* " (did you mean 'x'?)" or "" into buf. */
static const char *rc_dym(char *buf, size_t len, const char *word, const char *const *cands,
			  size_t n)
{
	const char *s = srt_suggest(word, cands, n);
	if (s)
		snprintf(buf, len, " (did you mean '%s'?)", s);
	else
		buf[0] = 0;
	return buf;
}

#define RC_NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *const rc_sections[] = {"runtime", "attention", "moe",     "residual",
					  "tier.l1", "tier.l2",   "tier.l3", "cache",
					  "sampling"};
static const char *const rc_runtime_keys[] = {"plugin_dirs", "threads", "profile", "model",
					      "prefill_chunk", "weights"};
static const char *const rc_cache_keys[] = {"page_size", "write_policy", "prefetch",
					    "tenant_salt", "l1_pages"};
static const char *const rc_sampling_keys[] = {"temperature", "top_p", "seed",
					       "max_new_tokens"};

static bool rc_int(const char *s, long long lo, long long hi, long long *out)
{
	char *end;
	if (!*s || isspace((unsigned char)*s))
		return false;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (*end || errno || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

static bool rc_double(const char *s, double *out)
{
	char *end;
	if (!*s || isspace((unsigned char)*s))
		return false;
	errno = 0;
	double v = strtod(s, &end);
	if (*end || errno || v != v)
		return false;
	*out = v;
	return true;
}

/* on/off and friends; -1 when not a boolean word */
static int rc_bool(const char *s)
{
	static const char *const yes[] = {"on", "true", "yes", "1", NULL};
	static const char *const no[] = {"off", "false", "no", "0", NULL};
	for (int i = 0; yes[i]; i++)
		if (!strcasecmp(s, yes[i]))
			return 1;
	for (int i = 0; no[i]; i++)
		if (!strcasecmp(s, no[i]))
			return 0;
	return -1;
}

/* A plugin reference: a bare name [A-Za-z0-9_-]+ or a path (contains '/' or ends in .so). */
static bool rc_is_path(const char *s)
{
	size_t n = strlen(s);
	return strchr(s, '/') || (n > 3 && !strcmp(s + n - 3, ".so"));
}

static bool rc_plugin_name_ok(const char *s)
{
	if (!*s)
		return false;
	if (rc_is_path(s))
		return true;
	for (const char *c = s; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
			return false;
	return true;
}

/* The short name of a plugin reference: itself, or a path's file name without ".so". */
static void rc_plugin_stem(const char *s, char *out, size_t len)
{
	const char *base = strrchr(s, '/');
	base = base ? base + 1 : s;
	size_t n = strlen(base);
	if (n > 3 && !strcmp(base + n - 3, ".so"))
		n -= 3;
	snprintf(out, len, "%.*s", (int)n, base);
}

static int rc_set_plugin(struct rc_store *st, struct srt_rc_plugin *p,
			 const struct srt_rc_entry *e, const char *section, const char *role,
			 char *err, size_t errlen)
{
	if (!rc_plugin_name_ok(e->value))
		RC_FAIL(e, "'%s' is not a plugin name (letters, digits, '_' or '-') nor a path to "
			"a .so", e->value);
	p->name = e->value;
	p->section = rc_strdup(st, section, strlen(section));
	p->role = rc_strdup(st, role, strlen(role));
	p->line = e->line;
	p->file = e->file;
	if (!p->section || !p->role) {
		snprintf(err, errlen, "out of memory");
		return SRT_ENOMEM;
	}
	return 0;
}

static int rc_split_dirs(struct rc_store *st, struct srt_runtime_config *c,
			 const struct srt_rc_entry *e, char *err, size_t errlen)
{
	const char *v = e->value;
	size_t n = 0, k = 0;
	for (const char *s = v; *s; s++)
		n += *s == ':';
	const char **dirs = rc_alloc(st, (n + 2) * sizeof(char *));
	if (!dirs)
		goto oom;
	for (const char *s = v; *s;) {
		const char *colon = strchr(s, ':');
		size_t len = colon ? (size_t)(colon - s) : strlen(s);
		if (len) {
			dirs[k] = rc_strdup(st, s, len);
			if (!dirs[k])
				goto oom;
			struct stat sb;
			int st_rc = stat(dirs[k], &sb), en = errno;
			if (st_rc || !S_ISDIR(sb.st_mode))
				RC_FAIL(e, "'%s': %s (a plugin directory must exist; relative paths "
					"are from the current directory)", dirs[k],
					st_rc ? strerror(en) : "not a directory");
			k++;
		}
		s += len + (colon ? 1 : 0);
	}
	dirs[k] = NULL;
	c->plugin_dirs = dirs;
	c->n_plugin_dirs = (int)k;
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return SRT_ENOMEM;
}

static int rc_tier_index(const char *section)
{
	if (!strcmp(section, "tier.l1"))
		return SRT_TIER_L1;
	if (!strcmp(section, "tier.l2"))
		return SRT_TIER_L2;
	if (!strcmp(section, "tier.l3"))
		return SRT_TIER_L3;
	return -1;
}

static int rc_apply(struct rc_store *st, struct srt_runtime_config *c,
		    const struct srt_rc_entry *e, char *err, size_t errlen)
{
	const char *s = e->section, *k = e->key, *v = e->value;
	char loc[256], dym[96];
	long long iv;
	double dv;
	int rc;

	if (!strcmp(s, "runtime")) {
		if (!strcmp(k, "plugin_dirs"))
			return rc_split_dirs(st, c, e, err, errlen);
		if (!strcmp(k, "threads")) {
			if (!rc_int(v, 0, 4096, &iv))
				RC_FAIL(e, "'%s' is not an integer in [0, 4096] (0 = all cores)", v);
			c->threads = (int)iv;
			return 0;
		}
		if (!strcmp(k, "profile")) {
			if (!strcmp(v, "reference"))
				c->profile = SRT_PROFILE_REFERENCE;
			else if (!strcmp(v, "f32"))
				c->profile = SRT_PROFILE_F32;
			else
				RC_FAIL(e, "'%s' is not a profile (expected reference or f32)", v);
			return 0;
		}
		if (!strcmp(k, "model")) {
			if (!*v)
				RC_FAIL(e, "empty (expected a preset name or a path)");
			c->model = v;
			return 0;
		}
		if (!strcmp(k, "prefill_chunk")) {
			if (!rc_int(v, 1, 1 << 20, &iv))
				RC_FAIL(e, "'%s' is not an integer in [1, 1048576] (tokens per prefill "
					"chunk)", v);
			c->prefill_chunk = (int32_t)iv;
			return 0;
		}
		if (!strcmp(k, "weights")) {
			if (!strcmp(v, "hugepages"))
				c->weights_huge = 1;
			else if (!strcmp(v, "mmap"))
				c->weights_huge = 0;
			else
				RC_FAIL(e, "'%s' is not a way to hold the weights (expected hugepages or "
					"mmap)", v);
			return 0;
		}
		RC_FAIL(e, "unknown key%s (expected plugin_dirs, threads, profile, model, "
			"prefill_chunk or weights)", rc_dym(dym, sizeof(dym), k, rc_runtime_keys,
						 RC_NELEM(rc_runtime_keys)));
	}
	if (!strcmp(s, "attention")) {
		if (strncmp(k, "ratio.", 6) || !rc_int(k + 6, 0, 1 << 20, &iv) ||
		    (iv && (iv & (iv - 1))))
			RC_FAIL(e, "unknown key%s (expected ratio.N = plugin, N = 0 for "
				"window-only layers or a power of two: ratio.4, ratio.128)",
				strncmp(k, "ratio", 5) && rc_distance(k, "ratio.") <= 2
					? " (did you mean 'ratio.N'?)" : "");
		for (int i = 0; i < c->n_ratios; i++)
			if (c->ratios[i].ratio == iv)
				RC_FAIL(e, "ratio %lld is mapped twice (also at line %d)", iv,
					c->ratios[i].plugin.line);
		if (!strcmp(v, "none"))
			return 0; /* removes the mapping of a lower layer (merged away already) */
		if (c->n_ratios == SRT_RC_MAX_RATIOS)
			RC_FAIL(e, "more than %d ratios", SRT_RC_MAX_RATIOS);
		char stem[64], sec[80];
		rc_plugin_stem(v, stem, sizeof(stem));
		snprintf(sec, sizeof(sec), "attention.%s", stem);
		struct srt_rc_ratio *r = &c->ratios[c->n_ratios];
		r->ratio = (int32_t)iv;
		if ((rc = rc_set_plugin(st, &r->plugin, e, sec, sec, err, errlen)))
			return rc;
		c->n_ratios++;
		return 0;
	}
	if (!strncmp(s, "attention.", 10))
		return 0; /* free options; checked against the mapped plugins afterwards */
	if (!strcmp(s, "moe") || !strcmp(s, "residual")) {
		if (!strcmp(k, "plugin"))
			return rc_set_plugin(st, !strcmp(s, "moe") ? &c->moe : &c->residual, e, s, s,
					     err, errlen);
		return 0; /* free option */
	}
	int t = rc_tier_index(s);
	if (t >= 0) {
		struct srt_rc_tier *tier = &c->tiers[t];
		if (!strcmp(k, "plugin")) {
			if (!strcmp(v, "none")) {
				tier->enabled = 0;
				tier->plugin.name = NULL;
				tier->plugin.line = e->line;
				tier->plugin.file = e->file;
				return 0;
			}
			tier->enabled = 1;
			return rc_set_plugin(st, &tier->plugin, e, s, s, err, errlen);
		}
		if (!strcmp(k, "budget")) {
			uint64_t b;
			char why[256];
			if (srt_size_parse(v, &b, why, sizeof(why)))
				RC_FAIL(e, "%s (a size: 64GiB = 64 * 2^30 bytes, 64GB = 64 * 10^9, 512M, "
					"1048576)", why);
			tier->budget = b;
			return 0;
		}
		return 0; /* free option */
	}
	if (!strncmp(s, "tier.", 5)) {
		snprintf(err, errlen, "%s: unknown section [%s]%s (tiers are [tier.l1], [tier.l2] "
			 "and [tier.l3])", rc_loc(loc, sizeof(loc), e->file, e->line), s,
			 rc_dym(dym, sizeof(dym), s, rc_sections, RC_NELEM(rc_sections)));
		return SRT_EINVAL;
	}
	if (!strcmp(s, "cache")) {
		if (!strcmp(k, "page_size")) {
			if (!rc_int(v, 1, 1 << 20, &iv))
				RC_FAIL(e, "'%s' is not an integer in [1, 1048576] (tokens per page)", v);
			c->page_size = (uint32_t)iv;
			return 0;
		}
		if (!strcmp(k, "write_policy")) {
			if (!strcmp(v, "write_through"))
				c->write_policy = SRT_WRITE_THROUGH;
			else if (!strncmp(v, "write_through_after_", 20)) {
				if (!rc_int(v + 20, 1, 1000000, &iv))
					RC_FAIL(e, "'%s': expected write_through_after_N with N an "
						"integer in [1, 1000000] (hits before the copy)", v);
				c->write_policy = SRT_WRITE_THROUGH_AFTER_2;
				c->write_after_hits = (uint32_t)iv;
			} else if (!strcmp(v, "write_back"))
				c->write_policy = SRT_WRITE_BACK;
			else
				RC_FAIL(e, "'%s' is not a policy (expected write_through, "
					"write_through_after_N or write_back)", v);
			return 0;
		}
		if (!strcmp(k, "prefetch")) {
			int b = rc_bool(v);
			if (b < 0)
				RC_FAIL(e, "'%s' is not on or off", v);
			c->prefetch = b;
			return 0;
		}
		if (!strcmp(k, "tenant_salt")) {
			c->tenant_salt = v;
			return 0;
		}
		if (!strcmp(k, "l1_pages")) {
			if (!strcmp(v, "hugepages"))
				c->l1_huge = 1;
			else if (!strcmp(v, "heap"))
				c->l1_huge = 0;
			else
				RC_FAIL(e, "'%s' is not a way to hold the L1 cache pages (expected "
					"hugepages or heap)", v);
			return 0;
		}
		RC_FAIL(e, "unknown key%s (expected page_size, write_policy, prefetch, "
			"tenant_salt or l1_pages)", rc_dym(dym, sizeof(dym), k, rc_cache_keys,
					       RC_NELEM(rc_cache_keys)));
	}
	if (!strcmp(s, "sampling")) {
		if (!strcmp(k, "temperature")) {
			if (!rc_double(v, &dv) || dv < 0 || dv > 100)
				RC_FAIL(e, "'%s' is not a number in [0, 100] (0 = greedy)", v);
			c->temperature = dv;
			return 0;
		}
		if (!strcmp(k, "top_p")) {
			if (!rc_double(v, &dv) || !(dv > 0 && dv <= 1))
				RC_FAIL(e, "'%s' is not a number in (0, 1]", v);
			c->top_p = dv;
			return 0;
		}
		if (!strcmp(k, "seed")) {
			char *end;
			errno = 0;
			unsigned long long u = strtoull(v, &end, 10);
			if (!*v || *v == '-' || *end || errno)
				RC_FAIL(e, "'%s' is not an unsigned 64-bit integer", v);
			c->seed = u;
			return 0;
		}
		if (!strcmp(k, "max_new_tokens")) {
			if (!rc_int(v, 1, 1 << 24, &iv))
				RC_FAIL(e, "'%s' is not an integer in [1, 16777216]", v);
			c->max_new_tokens = (int32_t)iv;
			return 0;
		}
		RC_FAIL(e, "unknown key%s (expected temperature, top_p, seed or max_new_tokens)",
			rc_dym(dym, sizeof(dym), k, rc_sampling_keys, RC_NELEM(rc_sampling_keys)));
	}
	snprintf(err, errlen, "%s: unknown section [%s]%s (expected runtime, attention, "
		 "attention.<plugin>, moe, residual, tier.l1, tier.l2, tier.l3, cache or sampling)",
		 rc_loc(loc, sizeof(loc), e->file, e->line), s,
		 rc_dym(dym, sizeof(dym), s, rc_sections, RC_NELEM(rc_sections)));
	return SRT_EINVAL;
}

static const struct rc_section *rc_find_section(const struct rc_list *l, const char *name)
{
	for (size_t i = 0; i < l->nsec; i++)
		if (!strcmp(l->sec[i].name, name))
			return &l->sec[i];
	return NULL;
}

static const char *rc_section_file(const struct rc_list *l, const char *name)
{
	const struct rc_section *s = rc_find_section(l, name);
	return s ? s->file : "(no such section)";
}

static int rc_section_line(const struct rc_list *l, const char *name)
{
	const struct rc_section *s = rc_find_section(l, name);
	return s ? s->line : 0;
}

/* Whole-config rules, after every entry is applied. */
static int rc_finish(const struct srt_runtime_config *c, const struct rc_list *l, char *err,
		     size_t errlen)
{
#define SEC_AT(name) rc_section_file(l, name), rc_section_line(l, name)
	for (size_t i = 0; i < l->nsec; i++) {
		const char *n = l->sec[i].name;
		if (strncmp(n, "attention.", 10))
			continue;
		bool mapped = false;
		for (int r = 0; r < c->n_ratios; r++)
			mapped |= !strcmp(c->ratios[r].plugin.section, n);
		if (!mapped) {
			char loc[256];
			snprintf(err, errlen, "%s: section [%s] configures no plugin: no "
				 "ratio.N in [attention] names '%s'",
				 rc_loc(loc, sizeof(loc), l->sec[i].file, l->sec[i].line), n, n + 10);
			return SRT_EINVAL;
		}
	}
	if (c->n_ratios == 0) {
		snprintf(err, errlen, "%s:%d: [attention] maps no ratio to a plugin (expected e.g. "
			 "ratio.0 = swa, ratio.4 = csa, ratio.128 = hca)", SEC_AT("attention"));
		return SRT_EINVAL;
	}
	if (!c->moe.name) {
		snprintf(err, errlen, "%s:%d: [moe] has no 'plugin = ...' key", SEC_AT("moe"));
		return SRT_EINVAL;
	}
	if (!c->residual.name) {
		snprintf(err, errlen, "%s:%d: [residual] has no 'plugin = ...' key",
			 SEC_AT("residual"));
		return SRT_EINVAL;
	}
	static const char *const tier_names[] = {"tier.l1", "tier.l2", "tier.l3"};
	for (int t = 0; t < SRT_TIER_COUNT; t++) {
		if (!c->tiers[t].plugin.file && !c->tiers[t].enabled) {
			snprintf(err, errlen, "%s:%d: [%s] has no 'plugin = ...' key (expected "
				 "host, file, sqlite, redis, none or a path)", SEC_AT(tier_names[t]),
				 tier_names[t]);
			return SRT_EINVAL;
		}
	}
	if (!c->tiers[SRT_TIER_L1].enabled) {
		snprintf(err, errlen, "%s:%d: [tier.l1] plugin = none: L1 is where the kernels "
			 "read the cache, it cannot be disabled", SEC_AT("tier.l1"));
		return SRT_EINVAL;
	}
#undef SEC_AT
	return 0;
}

static int rc_cmp_ratio(const void *a, const void *b)
{
	const struct srt_rc_ratio *x = a, *y = b;
	return (x->ratio > y->ratio) - (x->ratio < y->ratio);
}

static void rc_defaults(struct srt_runtime_config *c)
{
	c->threads = 0;
	c->profile = SRT_PROFILE_REFERENCE;
	c->model = "tiny";
	c->prefill_chunk = 256;
	c->weights_huge = 1;
	c->page_size = 256;
	c->write_policy = SRT_WRITE_THROUGH;
	c->write_after_hits = 2;
	c->prefetch = 1;
	c->l1_huge = 1;
	c->tenant_salt = "";
	c->temperature = 0;
	c->top_p = 1;
	c->seed = 0;
	c->max_new_tokens = 128;
	static const char *const none[] = {NULL};
	c->plugin_dirs = none;
}

/* ---------------------------------------------------------------------------------------- */
/* Layers: default < file < --set, merged key by key.                                         */

static bool rc_plugin_section(const char *sec)
{
	return !strcmp(sec, "moe") || !strcmp(sec, "residual") || rc_tier_index(sec) >= 0;
}

/*
 * Overlay `up` on `all`, key by key: an upper key replaces the lower one of the same section
 * and key. When an upper layer names another plugin (`plugin = ...` of [moe], [residual],
 * [tier.*]), the lower layer's options for the old plugin are dropped with it (budget stays).
 */
static int rc_overlay(struct rc_list *all, const struct rc_list *up)
{
	for (size_t i = 0; i < up->nsec; i++) {
		/* the upper layer's header is where messages about the section point */
		struct rc_section *have = (struct rc_section *)rc_find_section(all, up->sec[i].name);
		if (have)
			*have = up->sec[i];
		else if (rc_push_section(all, &up->sec[i]))
			return SRT_ENOMEM;
	}
	for (size_t i = 0; i < up->e.n; i++) {
		const struct srt_rc_entry *u = &up->e.v[i];
		bool new_plugin = false;
		if (!strcmp(u->key, "plugin") && rc_plugin_section(u->section))
			for (size_t j = 0; j < all->e.n; j++) {
				const struct srt_rc_entry *l = &all->e.v[j];
				if (!strcmp(l->section, u->section) && !strcmp(l->key, "plugin"))
					new_plugin = strcmp(l->value, u->value) != 0;
			}
		size_t k = 0;
		for (size_t j = 0; j < all->e.n; j++) {
			const struct srt_rc_entry *l = &all->e.v[j];
			bool same_sec = !strcmp(l->section, u->section);
			if (same_sec && (!strcmp(l->key, u->key) ||
					 (new_plugin && strcmp(l->key, "budget"))))
				continue;
			all->e.v[k++] = *l;
		}
		all->e.n = k;
		if (rc_push_entry(all, u))
			return SRT_ENOMEM;
	}
	return 0;
}

/* Process-wide --set list (srt_runtime_config_set_overrides). */
static struct {
	char **sets;
	size_t n;
	unsigned long loads;
} rc_global;

int srt_runtime_config_split_set(const char *arg, char *section, size_t seclen, char *key,
				 size_t keylen, const char **value, char *err, size_t errlen)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg) {
		snprintf(err, errlen, "--set '%s': expected section.key=value (e.g. "
			 "attention.ratio.4=csa, tier.l3.budget=64GiB, cache.page_size=512)", arg);
		return SRT_EINVAL;
	}
	size_t n = (size_t)(eq - arg);
	/* section: [attention.<plugin>] and [tier.lN] have a dot of their own; ratio.N is a key */
	size_t cut;
	const char *d1 = memchr(arg, '.', n);
	if (!d1) {
		snprintf(err, errlen, "--set '%s': '%.*s' has no '.' between section and key "
			 "(expected section.key=value)", arg, (int)n, arg);
		return SRT_EINVAL;
	}
	cut = (size_t)(d1 - arg);
	bool two = (!strncmp(arg, "tier.", 5) && cut == 4) ||
		   (!strncmp(arg, "attention.", 10) && cut == 9 && strncmp(arg + 10, "ratio.", 6));
	if (two) {
		const char *d2 = memchr(d1 + 1, '.', n - cut - 1);
		if (!d2) {
			snprintf(err, errlen, "--set '%s': expected %.*s.<key>=value", arg, (int)n,
				 arg);
			return SRT_EINVAL;
		}
		cut = (size_t)(d2 - arg);
	}
	if (cut == 0 || cut >= seclen || cut > RC_MAX_SECTION || n - cut - 1 == 0 ||
	    n - cut - 1 >= keylen || n - cut - 1 > RC_MAX_KEY) {
		snprintf(err, errlen, "--set '%s': empty or too long section or key", arg);
		return SRT_EINVAL;
	}
	snprintf(section, seclen, "%.*s", (int)cut, arg);
	snprintf(key, keylen, "%.*s", (int)(n - cut - 1), arg + cut + 1);
	*value = eq + 1;
	while (**value == ' ')
		(*value)++;
	return 0;
}

int srt_runtime_config_set_overrides(const char *const *sets, size_t n, char *err,
				     size_t errlen)
{
	char sec[64], key[64];
	const char *v;
	for (size_t i = 0; i < n; i++)
		if (srt_runtime_config_split_set(sets[i], sec, sizeof(sec), key, sizeof(key), &v, err,
						errlen))
			return SRT_EINVAL;
	char **copy = n ? calloc(n, sizeof(*copy)) : NULL;
	if (n && !copy)
		goto oom;
	for (size_t i = 0; i < n; i++)
		if (!(copy[i] = strdup(sets[i]))) {
			for (size_t j = 0; j < i; j++)
				free(copy[j]);
			free(copy);
			goto oom;
		}
	for (size_t i = 0; i < rc_global.n; i++)
		free(rc_global.sets[i]);
	free(rc_global.sets);
	rc_global.sets = copy;
	rc_global.n = n;
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return SRT_ENOMEM;
}

const char *const *srt_runtime_config_overrides(size_t *n)
{
	*n = rc_global.n;
	return (const char *const *)rc_global.sets;
}

unsigned long srt_runtime_config_load_count(void)
{
	return rc_global.loads;
}

/* --set arguments as a layer: origin "--set <arg>", line 0; a later one wins. */
static int rc_read_sets(struct rc_store *st, struct rc_list *l, const char *const *sets,
			size_t n, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		char sec[64], key[64], org[300];
		const char *v;
		int rc = srt_runtime_config_split_set(sets[i], sec, sizeof(sec), key, sizeof(key),
						      &v, err, errlen);
		if (rc)
			return rc;
		snprintf(org, sizeof(org), "--set %s", sets[i]);
		struct srt_rc_entry e = {rc_strdup(st, sec, strlen(sec)),
					 rc_strdup(st, key, strlen(key)), rc_strdup(st, v, strlen(v)),
					 rc_strdup(st, org, strlen(org)), 0};
		if (!e.section || !e.key || !e.value || !e.file)
			return SRT_ENOMEM;
		struct rc_list one = {0};
		struct rc_section s = {e.section, e.file, 0};
		if (rc_push_section(&one, &s) || rc_push_entry(&one, &e) || rc_overlay(l, &one)) {
			free(one.e.v);
			free(one.sec);
			return SRT_ENOMEM;
		}
		free(one.e.v);
		free(one.sec);
	}
	return 0;
}

static int rc_load_layers(const char *text, const char *origin, const char *const *sets,
			  size_t nsets, struct srt_runtime_config *out, char *err, size_t errlen)
{
	struct rc_store *st = calloc(1, sizeof(*st));
	struct rc_list def, usr, cli, all;
	int rc = 0;

	assert(out);
	memset(out, 0, sizeof(*out));
	memset(&def, 0, sizeof(def));
	memset(&usr, 0, sizeof(usr));
	memset(&cli, 0, sizeof(cli));
	memset(&all, 0, sizeof(all));
	rc_global.loads++;
	if (!st) {
		snprintf(err, errlen, "out of memory");
		return SRT_ENOMEM;
	}
	rc = rc_read_text(st, &def, srt_cfg_default_ini.data, RC_DEFAULT_ORIGIN, err, errlen);
	if (rc)
		goto fail;
	const char *src = "<built-in default.ini>";
	if (text) {
		src = rc_strdup(st, origin ? origin : "<text>", strlen(origin ? origin : "<text>"));
		if (!src) {
			rc = SRT_ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		rc = rc_read_text(st, &usr, text, src, err, errlen);
		if (rc)
			goto fail;
	}
	if ((rc = rc_read_sets(st, &cli, sets, nsets, err, errlen))) {
		if (rc == SRT_ENOMEM)
			goto oom;
		goto fail;
	}
	/* Merge key by key: default, then the file, then --set. */
	if ((rc = rc_overlay(&all, &def)) || (rc = rc_overlay(&all, &usr)) ||
	    (rc = rc_overlay(&all, &cli)))
		goto oom;

	out->priv_ = st;
	out->source = src;
	rc_defaults(out);
	/* Unknown sections first, reported at their header line. */
	for (size_t i = 0; i < all.nsec; i++) {
		struct srt_rc_entry probe = {all.sec[i].name, "", "", all.sec[i].file, all.sec[i].line};
		const char *n = probe.section;
		if (!strcmp(n, "runtime") || !strcmp(n, "attention") || !strcmp(n, "moe") ||
		    !strcmp(n, "residual") || !strcmp(n, "cache") || !strcmp(n, "sampling") ||
		    !strncmp(n, "attention.", 10) || rc_tier_index(n) >= 0)
			continue;
		rc = rc_apply(st, out, &probe, err, errlen);
		assert(rc);
		goto fail;
	}
	for (size_t i = 0; i < all.e.n; i++)
		if ((rc = rc_apply(st, out, &all.e.v[i], err, errlen)))
			goto fail;
	if ((rc = rc_finish(out, &all, err, errlen)))
		goto fail;
	qsort(out->ratios, (size_t)out->n_ratios, sizeof(out->ratios[0]), rc_cmp_ratio);
	out->entries = all.e.v;
	out->n_entries = all.e.n;
	all.e.v = NULL;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
	rc = SRT_ENOMEM;
fail:
	memset(out, 0, sizeof(*out));
	rc_store_free(st);
out:
	free(def.e.v);
	free(def.sec);
	free(usr.e.v);
	free(usr.sec);
	free(cli.e.v);
	free(cli.sec);
	free(all.e.v);
	free(all.sec);
	return rc;
}

int srt_runtime_config_load_text(const char *text, const char *origin,
				 struct srt_runtime_config *out, char *err, size_t errlen)
{
	return rc_load_layers(text, origin, (const char *const *)rc_global.sets, rc_global.n, out,
			      err, errlen);
}

int srt_runtime_config_load(const char *path, struct srt_runtime_config *out, char *err,
			    size_t errlen)
{
	return srt_runtime_config_load_ex(path, (const char *const *)rc_global.sets, rc_global.n,
					  out, err, errlen);
}

int srt_runtime_config_load_ex(const char *path, const char *const *sets, size_t nsets,
			       struct srt_runtime_config *out, char *err, size_t errlen)
{
	if (!path)
		return rc_load_layers(NULL, NULL, sets, nsets, out, err, errlen);
	memset(out, 0, sizeof(*out));
	FILE *f = fopen(path, "rb");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
		return e == ENOENT ? SRT_ENOENT : SRT_EIO;
	}
	char *buf = malloc(RC_MAX_FILE + 1);
	int rc = 0;
	if (!buf) {
		fclose(f);
		snprintf(err, errlen, "%s: out of memory", path);
		return SRT_ENOMEM;
	}
	size_t n = fread(buf, 1, RC_MAX_FILE + 1, f);
	if (ferror(f)) {
		snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
		rc = SRT_EIO;
	} else if (n > RC_MAX_FILE) {
		snprintf(err, errlen, "%s: larger than %u bytes: not a runtime config", path,
			 RC_MAX_FILE);
		rc = SRT_EINVAL;
	} else if (memchr(buf, 0, n)) {
		snprintf(err, errlen, "%s: contains NUL bytes: not a text file", path);
		rc = SRT_EINVAL;
	}
	fclose(f);
	if (!rc) {
		buf[n] = 0;
		rc = rc_load_layers(buf, path, sets, nsets, out, err, errlen);
	}
	free(buf);
	return rc;
}

void srt_runtime_config_free(struct srt_runtime_config *c)
{
	if (!c)
		return;
	if (c->priv_)
		rc_store_free(c->priv_);
	free(c->entries);
	memset(c, 0, sizeof(*c));
}

const char *srt_runtime_config_option(const struct srt_runtime_config *c, const char *section,
				      const char *key)
{
	assert(c && section && key);
	for (size_t i = 0; i < c->n_entries; i++)
		if (!strcmp(c->entries[i].section, section) && !strcmp(c->entries[i].key, key))
			return c->entries[i].value;
	return NULL;
}

const char *srt_runtime_config_option_cb(void *scope, const char *key)
{
	const struct srt_rc_scope *s = scope;
	return srt_runtime_config_option(s->config, s->section, key);
}

const char *srt_runtime_config_plugin_dym(struct srt_registry *reg, uint32_t kind,
					  const char *name, char *buf, size_t len)
{
	const char *names[128];
	size_t n = 0;
	buf[0] = 0;
	for (size_t i = 0; reg && i < srt_registry_count(reg) && n < 128; i++) {
		const struct srt_plugin_info *pi = srt_registry_at(reg, i);
		if (pi->desc && pi->state == SRT_PLUGIN_OK && pi->desc->kind == kind)
			names[n++] = pi->desc->name;
	}
	const char *s = srt_suggest(name, names, n);
	if (s)
		snprintf(buf, len, " (did you mean '%s'?)", s);
	return buf;
}

const struct srt_rc_plugin *srt_runtime_config_attention(const struct srt_runtime_config *c,
							 int ratio)
{
	for (int i = 0; i < c->n_ratios; i++)
		if (c->ratios[i].ratio == ratio)
			return &c->ratios[i].plugin;
	return NULL;
}

/* Print a warning on stderr unless this process printed the same text before (commands
 * such as `ab` load the same config many times). */
static void rc_warn_once(const char *msg)
{
	static uint64_t seen[64];
	static unsigned n;
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (const char *c = msg; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ull;
	for (unsigned i = 0; i < n; i++)
		if (seen[i] == h)
			return;
	if (n < 64)
		seen[n++] = h;
	fputs(msg, stderr);
}

int srt_runtime_config_check_model(const struct srt_runtime_config *c,
				   const struct srt_model_config *m, char *err, size_t errlen)
{
	for (int i = 0; i < m->n_compress_ratios; i++) {
		int r = m->compress_ratios[i];
		if (!srt_runtime_config_attention(c, r)) {
			snprintf(err, errlen, "%s: [attention] maps no plugin to ratio %d, which "
				 "model '%s' uses in layer %d (add ratio.%d = <plugin>)", c->source,
				 r, m->name, i, r);
			return SRT_EINVAL;
		}
		if (r > 0 && c->page_size % (uint32_t)r) {
			snprintf(err, errlen, "%s: [cache] page_size %u is not a multiple of ratio %d "
				 "used by model '%s' (layer %d)", c->source, c->page_size, r, m->name, i);
			return SRT_EINVAL;
		}
	}
	struct rc_store *st = c->priv_;
	if (st && st->warned)
		return 0;
	for (int k = 0; k < c->n_ratios; k++) {
		const struct srt_rc_ratio *r = &c->ratios[k];
		bool used = false;
		for (int i = 0; i < m->n_compress_ratios && !used; i++)
			used = m->compress_ratios[i] == r->ratio;
		if (used)
			continue;
		/* user-written mappings only: the default maps 0/4/128 whatever the model */
		const char *file = r->plugin.file;
		if (!file || !strcmp(file, RC_DEFAULT_ORIGIN))
			continue;
		char loc[256], list[256] = "";
		size_t n = 0;
		for (int i = 0; i < m->n_compress_ratios; i++) {
			bool seen = false;
			for (int j = 0; j < i; j++)
				seen |= m->compress_ratios[j] == m->compress_ratios[i];
			if (!seen && n < sizeof(list))
				n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", n ? ", " : "",
						      m->compress_ratios[i]);
		}
		char msg[1024];
		snprintf(msg, sizeof(msg), "shadowrt: warning: %s: [attention] ratio.%d = %s serves no "
			 "layer of model '%s' (its ratios: %s)\n", rc_loc(loc, sizeof(loc), file,
									 r->plugin.line),
			 (int)r->ratio, r->plugin.name, m->name, list);
		rc_warn_once(msg);
	}
	if (st)
		st->warned = true;
	return 0;
}

int srt_runtime_config_check_options(const struct srt_runtime_config *c, const char *section,
				     const struct srt_plugin_desc *desc, char *err,
				     size_t errlen)
{
	if (!desc || desc->struct_size < SRT_PLUGIN_DESC_V1_1_SIZE || !desc->options)
		return 0;
	bool tier = rc_tier_index(section) >= 0, plug = rc_plugin_section(section);
	for (size_t i = 0; i < c->n_entries; i++) {
		const struct srt_rc_entry *e = &c->entries[i];
		if (strcmp(e->section, section) || (plug && !strcmp(e->key, "plugin")) ||
		    (tier && !strcmp(e->key, "budget")))
			continue;
		const char *names[64];
		size_t n = 0;
		bool ok = false;
		for (const struct srt_plugin_option *o = desc->options; o->name && n < 64; o++) {
			names[n++] = o->name;
			ok |= !strcmp(o->name, e->key);
		}
		if (ok)
			continue;
		char list[512] = "", dym[96];
		size_t len = 0;
		for (size_t j = 0; j < n && len < sizeof(list); j++)
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", j ? ", " : "",
						names[j]);
		if (n)
			RC_FAIL(e, "plugin '%s' has no option '%s'%s; its options: %s", desc->name,
				e->key, rc_dym(dym, sizeof(dym), e->key, names, n), list);
		RC_FAIL(e, "plugin '%s' has no option '%s': it takes no options", desc->name, e->key);
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Sizes.                                                                                     */

const char *srt_format_size(uint64_t b, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	int u = 0;
	double v = (double)b;
	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	if (u == 0 || v == (double)(uint64_t)v)
		snprintf(buf, len, "%.0f %s", v, units[u]);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

const char *srt_write_policy_name(int p)
{
	switch (p) {
	case SRT_WRITE_THROUGH: return "write_through";
	case SRT_WRITE_THROUGH_AFTER_2: return "write_through_after_2";
	case SRT_WRITE_BACK: return "write_back";
	}
	return "?";
}

const char *srt_write_policy_format(int p, uint32_t after_hits, char *buf, size_t len)
{
	if (p == SRT_WRITE_THROUGH_AFTER_2)
		snprintf(buf, len, "write_through_after_%u", after_hits ? after_hits : 2);
	else
		snprintf(buf, len, "%s", srt_write_policy_name(p));
	return buf;
}

const char *srt_profile_name(int p)
{
	return p == SRT_PROFILE_F32 ? "f32" : p == SRT_PROFILE_REFERENCE ? "reference" : "?";
}
