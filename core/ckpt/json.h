/*
 * A small strict JSON parser for checkpoint headers (safetensors headers, the shard index,
 * config.json). Internal to the ckpt module.
 *
 * Strict: RFC 8259 only (no comments, no trailing commas, no NaN), UTF-8 validated, depth at
 * most SRT_CJ_MAX_DEPTH, input at most SRT_CJ_MAX_INPUT bytes. Duplicate object keys are kept
 * as parsed (callers that care check them). Integers that fit int64 are kept exactly.
 *
 * The parse result is one allocation-owning document; node pointers stay valid until
 * srt_cj_free(). Not thread safe per document; distinct documents are independent.
 */
#ifndef SRT_CKPT_JSON_H
#define SRT_CKPT_JSON_H

#include <stddef.h>
#include <stdint.h>

#define SRT_CJ_MAX_DEPTH 32
#define SRT_CJ_MAX_INPUT ((size_t)1 << 30) /* 1 GiB */

enum srt_cj_type { SRT_CJ_NULL, SRT_CJ_BOOL, SRT_CJ_NUM, SRT_CJ_STR, SRT_CJ_ARR, SRT_CJ_OBJ };

struct srt_cj_node {
	enum srt_cj_type type;
	uint32_t count;      /* children of an array or object */
	uint32_t child;      /* index of the first child (0 = none; node 0 is always the root) */
	uint32_t next;       /* index of the next sibling (0 = none) */
	const char *key;     /* member name when the parent is an object, else NULL */
	size_t key_len;
	const char *str;     /* SRT_CJ_STR: decoded, NUL-terminated (may contain \0 via \u0000) */
	size_t str_len;
	int is_int;          /* SRT_CJ_NUM: literal was an integer that fits int64 */
	int64_t i;           /* SRT_CJ_NUM with is_int */
	double d;            /* SRT_CJ_NUM: value as double; SRT_CJ_BOOL: 0 or 1 */
	size_t pos;          /* byte offset of the value in the input, for messages */
};

struct srt_cj_doc {
	struct srt_cj_node *nodes; /* nodes[0] is the root */
	uint32_t n_nodes;
	char *strings;             /* owns every decoded string */
};

/*
 * Parse len bytes at text. 0 and *doc filled, or SRT_EINVAL with a message in err naming the
 * byte offset and what was expected (err may be NULL). On error *doc is left empty.
 */
int srt_cj_parse(const char *text, size_t len, struct srt_cj_doc *doc, char *err, size_t errlen);
void srt_cj_free(struct srt_cj_doc *doc);

/* Navigation helpers; NULL when absent. */
const struct srt_cj_node *srt_cj_first(const struct srt_cj_doc *doc, const struct srt_cj_node *n);
const struct srt_cj_node *srt_cj_next(const struct srt_cj_doc *doc, const struct srt_cj_node *n);
/* Member of an object by key (the first one if a key repeats). */
const struct srt_cj_node *srt_cj_get(const struct srt_cj_doc *doc, const struct srt_cj_node *obj,
				     const char *key);
const char *srt_cj_type_name(enum srt_cj_type t);

#endif
