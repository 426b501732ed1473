/*
 * srt_tok encoding: added tokens, the pre-tokenizer splits (PCRE2), byte-level BPE with a word
 * cache. See tok.h for the semantics (HF tokenizers').
 */
#include <stdlib.h>
#include <string.h>

#include <shadowrt/plugin.h>

#include "tok/tok_int.h"

/* Words up to this many bytes merge by rescanning (quadratic but tiny); longer ones use a heap
 * (n log n), so no input makes BPE quadratic. */
#define TK_SMALL_WORD 96

struct enc {
	const struct srt_tok *t;
	struct srt_tok_ids *out;
	pcre2_match_data *md;
	pcre2_match_context *mctx; /* with a big JIT stack, made on first need */
	pcre2_jit_stack *jstack;
	char *err;
	size_t errlen;
	int32_t *sym; /* BPE scratch */
	size_t sym_cap;
};

/* ---- BPE ----------------------------------------------------------------------------------- */

struct heap_e {
	int32_t rank;
	uint32_t pos;
};

static bool heap_less(struct heap_e a, struct heap_e b)
{
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(struct heap_e *h, size_t *n, struct heap_e e)
{
	size_t i = (*n)++;
	while (i) {
		size_t p = (i - 1) / 2;
		if (!heap_less(e, h[p]))
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = e;
}

static struct heap_e heap_pop(struct heap_e *h, size_t *n)
{
	struct heap_e top = h[0], last = h[--(*n)];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && heap_less(h[c + 1], h[c]))
			c++;
		if (!heap_less(h[c], last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = last;
	return top;
}

/* Merge sym[0..n) in place; returns the new count. Long words: linked list + heap. */
static int bpe_long(const struct srt_tok *t, int32_t *sym, size_t n, size_t *out_n)
{
	uint32_t *next = malloc(n * sizeof(*next));
	uint32_t *prev = malloc(n * sizeof(*prev));
	struct heap_e *h = malloc(2 * n * sizeof(*h));
	if (!next || !prev || !h) {
		free(next);
		free(prev);
		free(h);
		return SRT_ENOMEM;
	}
	const uint32_t NONE = UINT32_MAX;
	size_t hn = 0;
	int32_t id;
	for (size_t i = 0; i < n; i++) {
		next[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
		prev[i] = i ? (uint32_t)(i - 1) : NONE;
		if (i + 1 < n) {
			int32_t r = tk_merge_find(t, sym[i], sym[i + 1], &id);
			if (r >= 0)
				heap_push(h, &hn, (struct heap_e){r, (uint32_t)i});
		}
	}
	/* A heap entry is stale when its pair no longer has that rank (a side was merged): ranks
	 * are unique per pair, so re-reading the rank of the current pair checks it. The heap holds
	 * at most n - 1 initial entries plus two per merge minus one per pop: under 2n. */
	while (hn) {
		struct heap_e e = heap_pop(h, &hn);
		uint32_t i = e.pos;
		if (sym[i] < 0 || next[i] == NONE)
			continue;
		uint32_t j = next[i];
		int32_t r = tk_merge_find(t, sym[i], sym[j], &id);
		if (r != e.rank)
			continue;
		sym[i] = id;
		sym[j] = -1;
		next[i] = next[j];
		if (next[j] != NONE)
			prev[next[j]] = i;
		if (prev[i] != NONE) {
			int32_t r2 = tk_merge_find(t, sym[prev[i]], sym[i], &id);
			if (r2 >= 0)
				heap_push(h, &hn, (struct heap_e){r2, prev[i]});
		}
		if (next[i] != NONE) {
			int32_t r2 = tk_merge_find(t, sym[i], sym[next[i]], &id);
			if (r2 >= 0)
				heap_push(h, &hn, (struct heap_e){r2, i});
		}
	}
	size_t o = 0;
	for (uint32_t i = 0; i != NONE; i = next[i])
		sym[o++] = sym[i];
	*out_n = o;
	free(next);
	free(prev);
	free(h);
	return 0;
}

static size_t bpe_small(const struct srt_tok *t, int32_t *sym, size_t n)
{
	/* rank[i]: the merge rank of the pair (sym[i], sym[i + 1]), INT32_MAX when none; a merge
	 * only changes the ranks of its two neighbouring pairs */
	int32_t rank[TK_SMALL_WORD], res[TK_SMALL_WORD], id = 0;
	for (size_t i = 0; i + 1 < n; i++) {
		int32_t r = tk_merge_find(t, sym[i], sym[i + 1], &id);
		rank[i] = r >= 0 ? r : INT32_MAX;
		res[i] = id;
	}
	while (n > 1) {
		int32_t best = INT32_MAX;
		size_t at = 0;
		for (size_t i = 0; i + 1 < n; i++)
			if (rank[i] < best) {
				best = rank[i];
				at = i;
			}
		if (best == INT32_MAX)
			break;
		sym[at] = res[at];
		memmove(sym + at + 1, sym + at + 2, (n - at - 2) * sizeof(*sym));
		if (at + 2 < n) {
			memmove(rank + at + 1, rank + at + 2, (n - at - 3) * sizeof(*rank));
			memmove(res + at + 1, res + at + 2, (n - at - 3) * sizeof(*res));
		}
		n--;
		if (at + 1 < n) {
			int32_t r = tk_merge_find(t, sym[at], sym[at + 1], &id);
			rank[at] = r >= 0 ? r : INT32_MAX;
			res[at] = id;
		}
		if (at > 0) {
			int32_t r = tk_merge_find(t, sym[at - 1], sym[at], &id);
			rank[at - 1] = r >= 0 ? r : INT32_MAX;
			res[at - 1] = id;
		}
	}
	return n;
}

static int cache_get(const struct srt_tok *t, const char *w, size_t n, uint64_t h,
		     struct srt_tok_ids *out, bool *hit)
{
	struct tk_cache_shard *sh = &t->cache[h % TK_CACHE_SHARDS];
	uint32_t i = (uint32_t)(h >> 20) & (TK_CACHE_SLOTS - 1);
	int rc = 0;
	*hit = false;
	pthread_mutex_lock(&sh->mu);
	for (;;) {
		struct tk_cache_slot *s = &sh->slot[i];
		if (!s->wlen)
			break;
		if (s->h == h && s->wlen == n && !memcmp(sh->arena + s->off, w, n)) {
			int32_t ids[TK_CACHE_MAX_WORD];
			memcpy(ids, sh->arena + s->off + ((n + 3) & ~(size_t)3), s->nids * sizeof(int32_t));
			pthread_mutex_unlock(&sh->mu);
			*hit = true;
			return srt_tok_ids_push(out, ids, s->nids);
		}
		i = (i + 1) & (TK_CACHE_SLOTS - 1);
	}
	pthread_mutex_unlock(&sh->mu);
	return rc;
}

static void cache_put(const struct srt_tok *t, const char *w, size_t n, uint64_t h,
		      const int32_t *ids, size_t nids)
{
	struct tk_cache_shard *sh = &t->cache[h % TK_CACHE_SHARDS];
	size_t need = ((n + 3) & ~(size_t)3) + nids * sizeof(int32_t);
	pthread_mutex_lock(&sh->mu);
	if (sh->used >= TK_CACHE_SLOTS * 3 / 4 || sh->arena_used + need > TK_CACHE_ARENA) {
		/* full: start over (bounded memory, no eviction bookkeeping) */
		memset(sh->slot, 0, sizeof(sh->slot));
		sh->used = sh->arena_used = 0;
	}
	uint32_t i = (uint32_t)(h >> 20) & (TK_CACHE_SLOTS - 1);
	while (sh->slot[i].wlen) {
		if (sh->slot[i].h == h && sh->slot[i].wlen == n &&
		    !memcmp(sh->arena + sh->slot[i].off, w, n)) {
			pthread_mutex_unlock(&sh->mu);
			return;
		}
		i = (i + 1) & (TK_CACHE_SLOTS - 1);
	}
	uint32_t off = sh->arena_used;
	memcpy(sh->arena + off, w, n);
	memcpy(sh->arena + off + ((n + 3) & ~(size_t)3), ids, nids * sizeof(int32_t));
	sh->arena_used += (uint32_t)need;
	sh->slot[i] = (struct tk_cache_slot){h, off, (uint16_t)n, (uint16_t)nids};
	sh->used++;
	pthread_mutex_unlock(&sh->mu);
}

/* One pre-tokenized word (bytes) through BPE, ids appended. */
static int bpe_word(struct enc *e, const char *w, size_t n)
{
	const struct srt_tok *t = e->t;
	if (!n)
		return 0;
	if (n == 1 && t->byte_id[(unsigned char)w[0]] >= 0)
		return srt_tok_ids_push(e->out, &t->byte_id[(unsigned char)w[0]], 1);
	if (t->ignore_merges) {
		int32_t id = tk_map_get(t, &t->vocab, w, n);
		if (id >= 0)
			return srt_tok_ids_push(e->out, &id, 1);
	}
	uint64_t h = 0;
	bool cacheable = n <= TK_CACHE_MAX_WORD;
	int rc;
	if (cacheable) {
		bool hit;
		h = tk_hash(w, n);
		if ((rc = cache_get(t, w, n, h, e->out, &hit)) || hit)
			return rc;
	}
	if (n > e->sym_cap) {
		size_t cap = n < 256 ? 256 : n;
		int32_t *s = realloc(e->sym, cap * sizeof(*s));
		if (!s)
			return SRT_ENOMEM;
		e->sym = s;
		e->sym_cap = cap;
	}
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t id = t->byte_id[(unsigned char)w[i]];
		if (id < 0) {
			/* no token for this byte: the unknown token, or nothing (as HF does) */
			if (t->unk_id < 0)
				continue;
			if (t->fuse_unk && m && e->sym[m - 1] == t->unk_id)
				continue;
			id = t->unk_id;
		}
		e->sym[m++] = id;
	}
	if (m > TK_SMALL_WORD) {
		if ((rc = bpe_long(t, e->sym, m, &m)))
			return rc;
	} else {
		m = bpe_small(t, e->sym, m);
	}
	if (cacheable)
		cache_put(t, w, n, h, e->sym, m);
	return srt_tok_ids_push(e->out, e->sym, m);
}

/* ---- pre-tokenizer splits --------------------------------------------------------------------- */

static int words(struct enc *e, uint32_t stage, const char *p, size_t n);

/* Next match of split sp in p[0..n) at or after *from: 1 and [*ms, *me), 0 none, <0 error. */
static int next_match(struct enc *e, const struct tk_split *sp, const char *p, size_t n,
		      size_t from, size_t *ms, size_t *me)
{
	for (;;) {
		int rc;
		if (sp->jit && !e->mctx)
			rc = pcre2_jit_match(sp->re, (PCRE2_SPTR)p, n, from, 0, e->md, NULL);
		else
			rc = pcre2_match(sp->re, (PCRE2_SPTR)p, n, from, PCRE2_NO_UTF_CHECK, e->md,
					 e->mctx);
		if (rc == PCRE2_ERROR_NOMATCH)
			return 0;
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !e->mctx) {
			e->mctx = pcre2_match_context_create(NULL);
			e->jstack = pcre2_jit_stack_create(64 << 10, 64 << 20, NULL);
			if (!e->mctx || !e->jstack)
				return SRT_ENOMEM;
			pcre2_jit_stack_assign(e->mctx, NULL, e->jstack);
			continue;
		}
		if (rc < 0) {
			PCRE2_UCHAR msg[160];
			pcre2_get_error_message(rc, msg, sizeof(msg));
			return tk_errf(e->err, e->errlen, SRT_EINVAL,
				       "%s: pre-tokenizer regex failed on a %zu-byte piece: %s",
				       e->t->name, n, (const char *)msg);
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
		*ms = ov[0];
		*me = ov[1];
		return 1;
	}
}

/* Emit a piece [s, t) (non-empty) to the next stage. */
static int emit(struct enc *e, uint32_t stage, const char *p, size_t s, size_t t)
{
	return t > s ? words(e, stage + 1, p + s, t - s) : 0;
}

/* The parts of piece p[0..n) under split `stage`, as HF's Split with its behaviour. */
static int split_piece(struct enc *e, uint32_t stage, const char *p, size_t n)
{
	const struct tk_split *sp = &e->t->splits[stage];
	if (!sp->re)
		return words(e, stage + 1, p, n);
	/* Parts are produced left to right; a behaviour that joins parts keeps one pending. */
	size_t pend_s = 0, pend_e = 0;
	bool have_pend = false, pend_match = false;
	size_t pos = 0, from = 0;
	int rc;
	for (;;) {
		size_t ms = 0, me = 0;
		int m = from <= n ? next_match(e, sp, p, n, from, &ms, &me) : 0;
		if (m < 0)
			return m;
		size_t parts[2][2];
		bool is_m[2];
		int np = 0;
		if (!m) {
			if (pos < n) {
				parts[np][0] = pos, parts[np][1] = n, is_m[np++] = false;
			}
		} else {
			if (ms > pos)
				parts[np][0] = pos, parts[np][1] = ms, is_m[np++] = false;
			parts[np][0] = ms, parts[np][1] = me, is_m[np++] = true;
			pos = me;
			if (me == ms) {
				/* empty match: step one character */
				size_t sub;
				int l = me < n ? tk_utf8_next((const unsigned char *)p + me, n - me, &sub) : 1;
				from = me + (size_t)(l > 0 ? l : 1);
			} else {
				from = me;
			}
		}
		for (int k = 0; k < np; k++) {
			bool im = is_m[k] != sp->invert;
			size_t s = parts[k][0], t = parts[k][1];
			switch (sp->behavior) {
			case TK_ISOLATED:
				rc = emit(e, stage, p, s, t);
				break;
			case TK_REMOVED:
				rc = im ? 0 : emit(e, stage, p, s, t);
				break;
			case TK_MERGED_PREV:
				/* a match joins the part before it unless that part was a match */
				if (im && have_pend && !pend_match) {
					pend_e = t;
					pend_match = true;
					rc = 0;
					break;
				}
				rc = have_pend ? emit(e, stage, p, pend_s, pend_e) : 0;
				pend_s = s, pend_e = t, have_pend = true, pend_match = im;
				break;
			case TK_CONTIGUOUS:
				/* consecutive parts of the same kind join (HF: is_match == previous) */
				if (have_pend && im == pend_match) {
					pend_e = t;
					rc = 0;
					break;
				}
				rc = have_pend ? emit(e, stage, p, pend_s, pend_e) : 0;
				pend_s = s, pend_e = t, have_pend = true, pend_match = im;
				break;
			case TK_MERGED_NEXT:
			default:
				/* a match joins the part after it unless that part is a match: hold
				 * the match; the next part absorbs it when it is not a match */
				if (have_pend && pend_match && !im) {
					pend_e = t;
					pend_match = false;
					rc = emit(e, stage, p, pend_s, pend_e);
					have_pend = false;
					break;
				}
				rc = have_pend ? emit(e, stage, p, pend_s, pend_e) : 0;
				have_pend = false;
				if (!rc) {
					if (im) {
						pend_s = s, pend_e = t, have_pend = true, pend_match = true;
					} else {
						rc = emit(e, stage, p, s, t);
					}
				}
				break;
			}
			if (rc)
				return rc;
		}
		if (!m)
			break;
	}
	return have_pend ? emit(e, stage, p, pend_s, pend_e) : 0;
}

/* Piece p[0..n) at split `stage` (stage == n_splits: a word for BPE). */
static int words(struct enc *e, uint32_t stage, const char *p, size_t n)
{
	const struct srt_tok *t = e->t;
	if (!n)
		return 0;
	if (stage == t->n_splits)
		return bpe_word(e, p, n);
	if (t->splits[stage].prefix_space && p[0] != ' ') {
		char *b = malloc(n + 1);
		if (!b)
			return SRT_ENOMEM;
		b[0] = ' ';
		memcpy(b + 1, p, n);
		int rc = split_piece(e, stage, b, n + 1);
		free(b);
		return rc;
	}
	return split_piece(e, stage, p, n);
}

/* ---- added tokens ---------------------------------------------------------------------------- */

static uint32_t cp_at(const unsigned char *s, size_t n)
{
	size_t sub;
	int l = tk_utf8_next(s, n, &sub);
	if (l <= 1)
		return s[0];
	uint32_t c = s[0] & (0x7f >> l);
	for (int k = 1; k < l; k++)
		c = (c << 6) | (s[k] & 0x3f);
	return c;
}

/* Start of the last code point before s+n (s[0..n) well-formed). */
static size_t cp_back(const unsigned char *s, size_t n)
{
	size_t i = n - 1;
	while (i && (s[i] & 0xC0) == 0x80)
		i--;
	return i;
}

static bool is_word_cp(uint32_t c)
{
	/* Rust char::is_alphanumeric, approximated by ASCII/Latin letters and digits plus any
	 * non-space code point above U+00FF that is not punctuation-like (single_word only) */
	if (c < 0x80)
		return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
	return !tk_is_space(c) && !(c >= 0x2000 && c <= 0x206F) && !(c >= 0x3000 && c <= 0x303F);
}

/* Leftmost-longest added-token match in s[from..n): 1 with [*ms, *me) and *ai, or 0. */
static int trie_find(const struct srt_tok *t, const struct tk_trie *tr, const unsigned char *s,
		     size_t n, size_t from, size_t *ms, size_t *me, int32_t *ai)
{
	if (!tr->n)
		return 0;
	for (size_t i = from; i < n; i++) {
		if (!tr->first[s[i]])
			continue;
		int32_t node = 0, best = -1;
		size_t best_end = 0;
		for (size_t j = i; j < n; j++) {
			int32_t c = tr->n[node].child;
			while (c >= 0 && tr->n[c].byte != s[j])
				c = tr->n[c].sibling;
			if (c < 0)
				break;
			node = c;
			if (tr->n[node].added >= 0) {
				best = tr->n[node].added;
				best_end = j + 1;
			}
		}
		if (best >= 0) {
			*ms = i;
			*me = best_end;
			*ai = best;
			return 1;
		}
	}
	(void)t;
	return 0;
}

/* Split s[0..n) on the added tokens of trie `tr`; gaps go to `next_pass` (the normalized
 * trie) or, after the last pass, to the pre-tokenizer. */
static int added_pass(struct enc *e, const struct tk_trie *tr, const char *p, size_t n)
{
	const struct srt_tok *t = e->t;
	const unsigned char *s = (const unsigned char *)p;
	size_t done = 0, from = 0, ms, me;
	int32_t ai;
	int rc;
	bool last = tr == &t->trie_norm;
	while (from < n && trie_find(t, tr, s, n, from, &ms, &me, &ai)) {
		const struct tk_added *a = &t->added[ai];
		from = me;
		if (ms < done)
			continue;
		if (a->single_word) {
			bool left_ok = ms == 0 || !is_word_cp(cp_at(s + cp_back(s, ms), ms - cp_back(s, ms)));
			bool right_ok = me == n || !is_word_cp(cp_at(s + me, n - me));
			if (!left_ok || !right_ok)
				continue;
		}
		if (a->lstrip) {
			size_t k = ms;
			while (k > done) {
				size_t b = cp_back(s, k);
				if (!tk_is_space(cp_at(s + b, k - b)))
					break;
				k = b;
			}
			ms = k;
		}
		if (a->rstrip) {
			while (me < n) {
				size_t sub;
				int l = tk_utf8_next(s + me, n - me, &sub);
				if (!tk_is_space(cp_at(s + me, n - me)))
					break;
				me += (size_t)(l > 0 ? l : 1);
			}
			from = me;
		}
		if (ms > done) {
			rc = last ? words(e, 0, p + done, ms - done)
				  : added_pass(e, &t->trie_norm, p + done, ms - done);
			if (rc)
				return rc;
		}
		if ((rc = srt_tok_ids_push(e->out, &a->id, 1)))
			return rc;
		done = me;
	}
	if (done < n)
		return last ? words(e, 0, p + done, n - done)
			    : added_pass(e, &t->trie_norm, p + done, n - done);
	return 0;
}

/* ---- public -------------------------------------------------------------------------------- */

int srt_tok_encode(const struct srt_tok *t, const char *text, size_t len, unsigned flags,
		   struct srt_tok_ids *out, char *err, size_t errlen)
{
	if (len > SRT_TOK_MAX_INPUT)
		return tk_errf(err, errlen, SRT_EINVAL, "input of %zu bytes is over the %zu-byte limit",
			       len, SRT_TOK_MAX_INPUT);
	struct srt_tok_text clean = {0};
	int rc;
	if (!srt_tok_utf8_valid(text, len)) {
		if ((rc = srt_tok_utf8_lossy(text, len, &clean)))
			return tk_errf(err, errlen, rc, "out of memory");
		text = clean.data;
		len = clean.len;
	}
	struct enc e = {.t = t, .out = out, .err = err, .errlen = errlen};
	e.md = pcre2_match_data_create(t->max_groups ? t->max_groups : 1, NULL);
	if (!e.md) {
		srt_tok_text_free(&clean);
		return tk_errf(err, errlen, SRT_ENOMEM, "out of memory");
	}
	if (flags & SRT_TOK_NO_ADDED)
		rc = words(&e, 0, text, len);
	else
		rc = added_pass(&e, &t->trie_raw, text, len);
	if (rc == SRT_ENOMEM)
		tk_errf(err, errlen, rc, "out of memory");
	pcre2_match_data_free(e.md);
	pcre2_match_context_free(e.mctx);
	if (e.jstack)
		pcre2_jit_stack_free(e.jstack);
	free(e.sym);
	srt_tok_text_free(&clean);
	return rc;
}
