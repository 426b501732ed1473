/* libFuzzer target: a tokenizer.json (jansson, then the BPE tables and the pre-tokenizer
 * regexes compiled by PCRE2), as srt_tok_load reads a checkpoint's file. */
#include <stdint.h>

#include "tok/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct srt_tok *t = NULL;
	char err[512];
	if (srt_tok_load_buffer((const char *)data, size, "fuzz.json", &t, err, sizeof(err)) == 0) {
		/* a loaded tokenizer must encode and decode its own spelling of the input */
		struct srt_tok_ids ids = {0};
		if (srt_tok_encode(t, (const char *)data, size < 256 ? size : 256, 0, &ids, err,
				   sizeof(err)) == 0) {
			struct srt_tok_text txt = {0};
			srt_tok_decode(t, ids.ids, ids.n, SRT_TOK_LOSSY, &txt, err, sizeof(err));
			srt_tok_text_free(&txt);
		}
		srt_tok_ids_free(&ids);
		srt_tok_free(t);
	}
	return 0;
}
