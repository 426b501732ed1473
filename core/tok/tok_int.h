/*
 * Module-internal state of core/tok (not installed, not for other modules): the loaded
 * tokenizer's tables, shared by the loader (tok.c), the encoder (encode.c) and the decoder
 * (decode.c).
 */
#ifndef SRT_TOK_TOK_INT_H
#define SRT_TOK_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "tok/tok.h"

static inline int tk_errf(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline int tk_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* A byte-string -> id open-addressing table (keys borrowed from the tokenizer's arena). */
struct tk_map {
	uint32_t *slot; /* id + 1, 0 = empty */
	uint32_t mask;
	bool model;     /* keys are the ids' model-vocabulary bytes (voff/vlen), else off/len */
};

/* Per-id record. */
struct tk_token {
	uint32_t off, len;   /* decoded bytes in srt_tok.arena */
	uint32_t voff, vlen; /* the model-vocabulary token's bytes (an added token may shadow it) */
	uint8_t assigned;    /* some id maps here */
	uint8_t added;       /* an added token (decodes to its content verbatim) */
	uint8_t special;     /* added and "special": true */
};

struct tk_added {
	int32_t id;
	uint32_t off, len; /* content in arena */
	bool special, normalized, lstrip, rstrip, single_word;
};

/* Trie over the bytes of the added tokens (sibling lists), one per matching pass. */
struct tk_trie_node {
	int32_t child, sibling; /* node indices, -1 none */
	int32_t added;          /* index into srt_tok.added when a token ends here, else -1 */
	uint8_t byte;
};
struct tk_trie {
	struct tk_trie_node *n; /* n[0] is the root */
	uint32_t count, cap;
	uint8_t first[256];     /* a token starts with this byte */
};

enum tk_behavior { TK_ISOLATED, TK_REMOVED, TK_MERGED_PREV, TK_MERGED_NEXT, TK_CONTIGUOUS };

struct tk_split {
	pcre2_code *re;
	bool jit;
	bool invert;
	enum tk_behavior behavior;
	bool prefix_space; /* ByteLevel add_prefix_space: prepend ' ' to pieces lacking one */
};

/* Merge table: (left, right) -> (rank, result), open addressing on the packed pair. */
struct tk_merge {
	uint64_t key; /* (left << 32 | right) + 1; 0 = empty */
	int32_t rank, id;
};

#define TK_CACHE_SHARDS 32
#define TK_CACHE_SLOTS 2048      /* per shard, power of two */
#define TK_CACHE_ARENA (64 << 10) /* bytes per shard */
#define TK_CACHE_MAX_WORD 64      /* longer words are not cached */

struct tk_cache_slot {
	uint64_t h;
	uint32_t off;   /* in the shard arena: word bytes, then padding, then int32 ids */
	uint16_t wlen, nids;
};
struct tk_cache_shard {
	pthread_mutex_t mu;
	uint32_t used, arena_used;
	struct tk_cache_slot slot[TK_CACHE_SLOTS];
	unsigned char arena[TK_CACHE_ARENA];
};

struct srt_tok {
	char *name;                /* file name for messages */
	char *arena;               /* every token's bytes */
	size_t arena_len, arena_cap;
	struct tk_token *tokens;   /* [n_ids] */
	uint32_t n_ids;
	struct tk_map vocab;       /* model tokens by decoded bytes (byte-level tokens only) */
	struct tk_map added_map;   /* added tokens by content */
	int32_t byte_id[256];      /* model token of each single byte, -1 none */
	int32_t unk_id;            /* -1 none */
	bool fuse_unk, ignore_merges;
	struct tk_merge *merges;
	uint32_t merge_mask;
	struct tk_added *added;
	uint32_t n_added;
	struct tk_trie trie_raw, trie_norm; /* non-normalized / normalized added tokens */
	struct tk_split *splits;
	uint32_t n_splits;
	uint32_t max_groups;
	bool byte_level;           /* the pre-tokenizer ends in ByteLevel */
	int32_t bos_id, eos_id;
	struct tk_cache_shard *cache; /* [TK_CACHE_SHARDS] */
};

/* Map helpers (tok.c). */
uint64_t tk_hash(const void *p, size_t n);
int32_t tk_map_get(const struct srt_tok *t, const struct tk_map *m, const void *key, size_t len);

/* The merge of (a, b): rank and result, or rank -1. */
static inline int32_t tk_merge_find(const struct srt_tok *t, int32_t a, int32_t b, int32_t *id)
{
	uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
	uint64_t h = key * 0x9E3779B97F4A7C15ull;
	uint32_t i = (uint32_t)(h >> 32) & t->merge_mask;
	for (;;) {
		const struct tk_merge *m = &t->merges[i];
		if (m->key == key) {
			*id = m->id;
			return m->rank;
		}
		if (!m->key)
			return -1;
		i = (i + 1) & t->merge_mask;
	}
}

/* UTF-8 scanning (decode.c): at s[0..n), n > 0. Returns the length of the well-formed
 * character there (1..4); 0 when ill-formed, with *sub the length of the maximal ill-formed
 * subpart (>= 1); -1 when the bytes there are a well-formed but unfinished prefix that
 * reaches the end of the input (*sub = n). */
int tk_utf8_next(const unsigned char *s, size_t n, size_t *sub);

/* Code points each general category gained from PCRE2's Unicode tables (14.0 on Debian 12)
 * to the reference's (16.0), as a PCRE2 class fragment (ucd_delta.c, generated). */
struct tk_ucd_delta {
	const char *cat;    /* two-letter general category */
	unsigned count;     /* code points */
	const char *ranges; /* "\x{..}-\x{..}..." */
};
extern const struct tk_ucd_delta tk_ucd_delta[];
extern const char tk_ucd_delta_version[];

/* Unicode White_Space (Rust char::is_whitespace), for lstrip / rstrip. */
bool tk_is_space(uint32_t cp);

#endif
