/* libFuzzer target: the body of an OpenAI request to `shadowrt serve` (/v1/completions when the
 * first byte is even, /v1/chat/completions when odd): jansson, field validation, the chat
 * encoding and tokenization with the shipped DeepSeek-V4 tokenizer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "serve/api.h"
#include "tok/tok.h"

static struct srt_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	char dir[4096], err[512];
	if (srt_tok_shipped_dir(dir, sizeof(dir)) || srt_tok_load_dir(dir, &tok, err, sizeof(err))) {
		fprintf(stderr, "fuzz_serve_request: no shipped tokenizer in %s\n", dir);
		abort();
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	struct srt_api_ctx ctx = {.tok = tok, .vocab = (int32_t)srt_tok_vocab_size(tok),
				  .model_name = "fuzz", .default_max_tokens = 16};
	struct srt_api_req req = {0};
	struct srt_api_error e;
	if (srt_api_parse(&ctx, data[0] & 1, (const char *)data + 1, size - 1, &req, &e))
		json_decref(srt_api_error_json(&e));
	srt_api_req_free(&req); /* the caller frees the request in every case, as serve.c does */
	return 0;
}
