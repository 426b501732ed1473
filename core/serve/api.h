/*
 * The OpenAI request and response bodies of the server (serve.h): parsing and validating a
 * completions / chat request into a prompt and scheduler parameters, and building response,
 * stream-chunk, model-list and error JSON. No I/O; used by the HTTP layer and its tests.
 *
 * Validation follows OpenAI's API: unknown fields are refused ("Unrecognized request
 * argument"), wrong JSON types name the field, unsupported values of known fields (n > 1,
 * logprobs, echo, penalties other than 0) are refused rather than silently ignored.
 */
#ifndef SRT_SERVE_API_H
#define SRT_SERVE_API_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sched/sched.h"

struct srt_tok;

struct srt_api_ctx {
	const struct srt_tok *tok; /* NULL: token-id prompts only */
	int32_t vocab;
	const char *model_name;
	uint32_t default_max_tokens;
};

struct srt_api_error {
	unsigned status;   /* HTTP status */
	const char *type;  /* "invalid_request_error", "server_error", ... (static) */
	const char *code;  /* static or NULL */
	const char *param; /* NULL or param_buf */
	char param_buf[64];
	char message[512];
};

struct srt_api_req {
	int chat, stream, include_usage, has_seed;
	int32_t *prompt;
	uint64_t n_prompt;
	struct srt_sched_params params; /* stop strings point into stop_store */
	char *stop_store[SRT_SCHED_MAX_STOP];
};

/* Parse body[0..len) of a completions (chat = 0) or chat request. 0, or -1 with *e filled. */
int srt_api_parse(const struct srt_api_ctx *ctx, int chat, const char *body, size_t len,
		  struct srt_api_req *out, struct srt_api_error *e);
void srt_api_req_free(struct srt_api_req *r);

json_t *srt_api_error_json(const struct srt_api_error *e);
json_t *srt_api_models(const char *name, long long created);

struct srt_api_out {
	const char *id, *model;
	long long created;
	int chat;
	int role_chunk;          /* chat stream: the first chunk, {"role":"assistant"} */
	const int32_t *ids;      /* generated ids (this chunk's, or all) */
	size_t n_ids;
	const char *text;        /* UTF-8 text (this chunk's, or all) */
	size_t text_len;
	const char *finish;      /* finish_reason, or NULL (null) */
	const struct srt_sched_info *usage; /* chunk: the final usage chunk (no choices) */
};
/* A stream chunk (object "text_completion" / "chat.completion.chunk"). */
json_t *srt_api_chunk(const struct srt_api_out *o);
/* A whole response (object "text_completion" / "chat.completion") with usage. */
json_t *srt_api_full(const struct srt_api_out *o);

/* The scheduler's detokenizer over tok's stream decoder (special tokens left out). */
void srt_api_detok(const struct srt_tok *tok, struct srt_sched_detok *out);

#endif /* SRT_SERVE_API_H */
