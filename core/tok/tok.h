/*
 * srt_tok: the Hugging Face `tokenizer.json` byte-level BPE tokenizer (DeepSeek-V4's), in C.
 *
 * What it reads. A `tokenizer.json` in the HF format: `model` of type BPE (vocab + merges, as
 * strings "a b" or pairs ["a","b"]; ignore_merges honoured), `added_tokens` (id, content,
 * special, normalized, lstrip, rstrip, single_word), `normalizer` null or an empty Sequence,
 * `pre_tokenizer` a Sequence of Splits (regex or string pattern; Isolated, Removed,
 * MergedWithPrevious, MergedWithNext, Contiguous behaviours; invert) ending in ByteLevel (or a
 * ByteLevel alone: only byte-level BPE is implemented), `decoder` ByteLevel. Regexes come from the file and run on PCRE2 (UTF + UCP, JIT when available);
 * only the spellings PCRE2 reads differently from Oniguruma are translated (see tok.c).
 * Anything else is refused with a message naming the file and the JSON field.
 *
 * Encoding follows HF `tokenizers` (`Tokenizer.encode(text, add_special_tokens=False)`):
 *   1. added tokens are found first, leftmost-longest, and become whole tokens, never split:
 *      non-normalized ones on the raw text, then normalized ones in the pieces between
 *      (lstrip / rstrip / single_word as HF applies them);
 *   2. each remaining piece goes through the pre-tokenizer splits in order (a later regex only
 *      sees one piece of the earlier split, so look-arounds stop at piece edges);
 *   3. each word is BPE-merged (lowest merge rank first, leftmost on ties) over its bytes.
 * Invalid UTF-8 in the input is replaced by U+FFFD per maximal ill-formed subpart, exactly as
 * Python's bytes.decode("utf-8", "replace") (and Rust's from_utf8_lossy) do, which is what a
 * caller of the reference does before it can call it; U+FFFD then encodes byte-level like any
 * character (every byte has a token). SRT_TOK_NO_ADDED encodes text with the model vocabulary
 * only (added-token spellings become plain text), as DeepSeek's prompt encoding does for the
 * text between the special tokens it inserts.
 *
 * Decoding concatenates each token's bytes: a model token's byte-level string mapped back to
 * bytes, an added token's content verbatim (HF's ByteLevel decoder). srt_tok_decode returns
 * those bytes exactly (SRT_TOK_LOSSY: with ill-formed UTF-8 replaced as above, which is what
 * HF's decode returns). The stream decoder (srt_tok_stream_*) emits only well-formed UTF-8
 * and, concatenated, equals the lossy decode of all ids pushed.
 *
 * Ownership. srt_tok_load* allocate a tokenizer; srt_tok_free releases it. Token spellings
 * returned by lookups are borrowed from the tokenizer and live until srt_tok_free. Output
 * buffers (struct srt_tok_ids, struct srt_tok_text) are caller-owned: the functions append to
 * them, growing them with realloc; release them with srt_tok_ids_free / srt_tok_text_free.
 *
 * Thread safety. A loaded tokenizer is immutable except for its internal word cache, which is
 * locked: every function taking `const struct srt_tok *` may be called from several threads at
 * once on one tokenizer. An output buffer or a stream decoder belongs to one thread at a time.
 * srt_tok_free must not race with any other call on the same tokenizer.
 *
 * Errors: functions that can fail return 0 or a negative SRT_E* code (shadowrt/plugin.h) and
 * write a message to err (err may be NULL; errlen its size).
 */
#ifndef SRT_TOK_TOK_H
#define SRT_TOK_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct srt_tok;

/* Upper bound on a tokenizer.json this module reads (the DeepSeek-V4 one is 6.4 MB). */
#define SRT_TOK_MAX_FILE ((size_t)256 << 20)
/* Upper bound on one encode input; larger inputs are refused with SRT_EINVAL. */
#define SRT_TOK_MAX_INPUT ((size_t)1 << 30)

/* Encode flags. */
#define SRT_TOK_NO_ADDED (1u << 0) /* model vocabulary only: added-token spellings are text */
/* Decode flags. */
#define SRT_TOK_SKIP_SPECIAL (1u << 1) /* leave out added tokens marked "special" */
#define SRT_TOK_LOSSY (1u << 2)        /* ill-formed UTF-8 in the result becomes U+FFFD */

/* A growable id array. Zero-initialise; the functions append. */
struct srt_tok_ids {
	int32_t *ids;
	size_t n, cap;
};

/* A growable byte string, always NUL-terminated after a successful append (len excludes it).
 * Zero-initialise; the functions append. */
struct srt_tok_text {
	char *data;
	size_t len, cap;
};

void srt_tok_ids_free(struct srt_tok_ids *ids);
void srt_tok_text_free(struct srt_tok_text *text);
/* Append n ids / len bytes (0 or SRT_ENOMEM). */
int srt_tok_ids_push(struct srt_tok_ids *ids, const int32_t *src, size_t n);
int srt_tok_text_append(struct srt_tok_text *text, const void *src, size_t len);

/*
 * Load a tokenizer.json file. 0 and *out, or SRT_ENOENT (cannot open), SRT_EINVAL (malformed or
 * unsupported: the message names the file and the field, e.g. "tok.json: model.merges[17]:
 * token 'ab' not in model.vocab"), SRT_ENOMEM.
 */
int srt_tok_load(const char *path, struct srt_tok **out, char *err, size_t errlen);
/* The same from memory; name is used in messages only (e.g. "<embedded>"). */
int srt_tok_load_buffer(const char *json, size_t len, const char *name, struct srt_tok **out,
			char *err, size_t errlen);
/*
 * Load <dir>/tokenizer.json and, when present, <dir>/tokenizer_config.json (bos_token /
 * eos_token, as a string or an AddedToken object). SRT_ENOENT when the directory has no
 * tokenizer.json (callers then work on token ids).
 */
int srt_tok_load_dir(const char *dir, struct srt_tok **out, char *err, size_t errlen);
void srt_tok_free(struct srt_tok *tok);

/* Vocabulary size of the DeepSeek-V4 tokenizer shipped with shadowrt (conf/tokenizers/). */
#define SRT_TOK_DSV4_VOCAB 129280

/*
 * The directory of the DeepSeek-V4 tokenizer shipped with shadowrt: $SHADOWRT_TOKENIZER_DIR
 * when set, else <directory of the running executable>/../share/shadowrt/tokenizers/deepseek-v4
 * (the build tree and the install tree have the same layout). Written to buf; 0, or SRT_ENOENT
 * when there is no readable tokenizer.json there (buf still holds the place looked at).
 */
int srt_tok_shipped_dir(char *buf, size_t len);

/* Largest id + 1 over the model vocabulary and the added tokens (129,280 for DeepSeek-V4). */
uint32_t srt_tok_vocab_size(const struct srt_tok *tok);
/* BOS / EOS ids from tokenizer_config.json, or -1 when unknown. */
int32_t srt_tok_bos_id(const struct srt_tok *tok);
int32_t srt_tok_eos_id(const struct srt_tok *tok);
/* The id of the added token spelled exactly text[0..len), or -1. */
int32_t srt_tok_added_id(const struct srt_tok *tok, const char *text, size_t len);
/* The id of the model-vocabulary token whose bytes are exactly text[0..len), or -1. */
int32_t srt_tok_vocab_id(const struct srt_tok *tok, const char *bytes, size_t len);
/* True when id is an added token marked special. */
bool srt_tok_is_special(const struct srt_tok *tok, int32_t id);
/*
 * The bytes token id decodes to (borrowed; not NUL-terminated; *len set), or NULL when the
 * id is out of range or unassigned.
 */
const char *srt_tok_token_bytes(const struct srt_tok *tok, int32_t id, size_t *len);

/*
 * Encode len bytes of text, appending the ids to *out. Flags: SRT_TOK_NO_ADDED. No BOS is
 * added (callers or the chat encoding add it). 0, or SRT_EINVAL (input over SRT_TOK_MAX_INPUT
 * or a regex engine failure, with a message), SRT_ENOMEM. On error *out may hold a prefix.
 */
int srt_tok_encode(const struct srt_tok *tok, const char *text, size_t len, unsigned flags,
		   struct srt_tok_ids *out, char *err, size_t errlen);

/*
 * Decode n ids, appending the bytes to *out. Flags: SRT_TOK_SKIP_SPECIAL, SRT_TOK_LOSSY.
 * 0, or SRT_EINVAL for an id outside the vocabulary (message names its position), SRT_ENOMEM.
 */
int srt_tok_decode(const struct srt_tok *tok, const int32_t *ids, size_t n, unsigned flags,
		   struct srt_tok_text *out, char *err, size_t errlen);

/*
 * Incremental decoder for streaming: push ids as they are generated; each push appends the
 * text that is complete so far (well-formed UTF-8 only; bytes of a character not yet complete
 * are held back, at most 3). srt_tok_stream_finish appends what is held as U+FFFD. The
 * concatenation of all appends equals srt_tok_decode(all ids, flags | SRT_TOK_LOSSY).
 * The struct is plain data: zero it with srt_tok_stream_init, no release needed.
 */
struct srt_tok_stream {
	const struct srt_tok *tok;
	unsigned flags;       /* SRT_TOK_SKIP_SPECIAL or 0 */
	unsigned char held[4];
	unsigned n_held;
};
void srt_tok_stream_init(struct srt_tok_stream *s, const struct srt_tok *tok, unsigned flags);
int srt_tok_stream_push(struct srt_tok_stream *s, int32_t id, struct srt_tok_text *out,
			char *err, size_t errlen);
int srt_tok_stream_finish(struct srt_tok_stream *s, struct srt_tok_text *out);

/*
 * Append src[0..len) to out with ill-formed UTF-8 replaced by U+FFFD per maximal subpart
 * (the W3C/Unicode practice Python and Rust follow). 0 or SRT_ENOMEM.
 */
int srt_tok_utf8_lossy(const char *src, size_t len, struct srt_tok_text *out);
/* True when src[0..len) is well-formed UTF-8. */
bool srt_tok_utf8_valid(const char *src, size_t len);

#endif
