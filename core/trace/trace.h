/*
 * Request traces in the Mooncake format (/work/shared/traces/README.md): one JSON object per
 * line with `timestamp` (ms), `input_length`, `output_length` and `hash_ids` (one id per
 * 512-token block of the input; the last block may be partial). Other keys are ignored.
 *
 * Tokens: block id h becomes SRT_TRACE_BLOCK deterministic token ids from a PRNG seeded by h
 * (srt_trace_block_tokens), so equal ids give equal tokens; the input is those blocks in order,
 * cut to input_length.
 *
 * Thread safety: a loaded trace is read-only; everything here is reentrant.
 */
#ifndef SRT_TRACE_TRACE_H
#define SRT_TRACE_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SRT_TRACE_BLOCK 512u
#define SRT_TRACE_VOCAB 129280u /* token ids are drawn in [0, vocab) */
/* input_length and output_length above this are refused (16 x the longest context, 1M). */
#define SRT_TRACE_MAX_TOKENS (1ull << 24)
#define SRT_TRACE_MAX_TOKENS_STR "16777216"
/* A line longer than this is refused: the longest valid line (32768 hash ids of up to 20
 * digits) is under 700 KB. Bounds the reader's memory (`replay /dev/zero` fails at once). */
#define SRT_TRACE_MAX_LINE ((size_t)1 << 20)
#define SRT_TRACE_MAX_LINE_STR "1048576"

struct srt_trace_req {
	int64_t timestamp_ms;
	uint64_t input_length, output_length;
	uint32_t n_hash;
	const uint64_t *hash_ids; /* [n_hash], n_hash == ceil(input_length / 512) */
};

struct srt_trace {
	size_t n;
	struct srt_trace_req *reqs;
	uint64_t input_tokens; /* sum of input_length */
	uint64_t *ids_;        /* storage of every hash_ids array */
};

/*
 * Read up to `limit` requests (0 = all) from path. Returns 0 and *out (free with
 * srt_trace_free), SRT_EIO (cannot open/read) or SRT_EINVAL with "path:line: key 'k': what is
 * wrong" (missing or repeated key, not a non-negative integer, a length over
 * SRT_TRACE_MAX_TOKENS, hash_ids count not ceil(input/512), text after the object, NUL bytes,
 * a line longer than SRT_TRACE_MAX_LINE, invalid JSON as jansson reports it). A failed read
 * (EIO, ENOMEM, ...) is SRT_EIO naming the line, never a silent end of the trace.
 */
int srt_trace_load(const char *path, size_t limit, struct srt_trace **out, char *err,
		   size_t errlen);
/* The same from an open stream (borrowed, not closed); path names it in messages. */
int srt_trace_load_stream(FILE *f, const char *path, size_t limit, struct srt_trace **out,
			  char *err, size_t errlen);
void srt_trace_free(struct srt_trace *t);

/* The 512 token ids of block id h. */
void srt_trace_block_tokens(uint64_t h, int32_t out[SRT_TRACE_BLOCK]);
/* The input_length token ids of a request into out[input_length]. */
void srt_trace_input_tokens(const struct srt_trace_req *r, int32_t *out);

#endif
