/* libFuzzer target: the shipped DeepSeek-V4 tokenizer on arbitrary bytes. Byte-level BPE
 * loses nothing: decode(encode(x)) must give back x exactly (model vocabulary only; ill-formed
 * UTF-8 is read as U+FFFD), and the streaming decoder must agree with the whole decode. */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok.h"

static struct srt_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	char dir[4096], err[512];
	if (srt_tok_shipped_dir(dir, sizeof(dir)) || srt_tok_load_dir(dir, &tok, err, sizeof(err))) {
		fprintf(stderr, "fuzz_tok_encode: no shipped tokenizer in %s\n", dir);
		abort();
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	struct srt_tok_ids ids = {0};
	struct srt_tok_text txt = {0}, streamed = {0};
	if (srt_tok_encode(tok, (const char *)data, size, SRT_TOK_NO_ADDED, &ids, err, sizeof(err)))
		abort(); /* any bytes are encodable */
	/* The encoder reads text: ill-formed UTF-8 is taken as U+FFFD (as the HF tokenizer's
	 * Python str input would be), so the round trip gives back the lossy reading of x. */
	struct srt_tok_text want = {0};
	if (srt_tok_utf8_lossy((const char *)data, size, &want))
		abort();
	int rc = srt_tok_decode(tok, ids.ids, ids.n, 0, &txt, err, sizeof(err));
	if (rc || txt.len != want.len || (want.len && memcmp(txt.data, want.data, want.len))) {
		fprintf(stderr, "decode(encode(x)) != lossy(x): rc %d (%s), %zu bytes, want %zu\n",
			rc, rc ? err : "", txt.len, want.len);
		abort(); /* byte-level BPE round-trips every (well-formed) text */
	}
	srt_tok_text_free(&want);
	struct srt_tok_stream s;
	srt_tok_stream_init(&s, tok, 0);
	for (size_t i = 0; i < ids.n; i++)
		if (srt_tok_stream_push(&s, ids.ids[i], &streamed, err, sizeof(err)))
			abort();
	srt_tok_stream_finish(&s, &streamed);
	struct srt_tok_text lossy = {0};
	srt_tok_decode(tok, ids.ids, ids.n, SRT_TOK_LOSSY, &lossy, err, sizeof(err));
	if (streamed.len != lossy.len || (lossy.len && memcmp(streamed.data, lossy.data, lossy.len)))
		abort(); /* the stream decoder's pieces add up to the lossy decode */
	srt_tok_text_free(&lossy);
	srt_tok_text_free(&streamed);
	srt_tok_text_free(&txt);
	srt_tok_ids_free(&ids);
	return 0;
}
