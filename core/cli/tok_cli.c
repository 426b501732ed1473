/* Tokenizer helpers of the command line (tok_cli.h). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <shadowrt/plugin.h>

#include "ckpt/safetensors.h"
#include "tok_cli.h"

int srt_cli_shipped_tokenizer(char *buf, size_t len)
{
	return srt_tok_shipped_dir(buf, len) ? -1 : 0;
}

int srt_cli_open_tokenizer(const char *path, const char *model_dir, struct srt_tok **out,
			   char *err, size_t errlen)
{
	if (path)
		return srt_tok_load(path, out, err, errlen);
	if (model_dir)
		return srt_tok_load_dir(model_dir, out, err, errlen);
	char dir[PATH_MAX];
	if (srt_cli_shipped_tokenizer(dir, sizeof(dir))) {
		snprintf(err, errlen,
			 "no tokenizer given and the shipped one is missing (looked in %s; set "
			 "SHADOWRT_TOKENIZER_DIR or pass --tokenizer FILE)",
			 dir);
		return SRT_ENOENT;
	}
	return srt_tok_load_dir(dir, out, err, errlen);
}

int srt_cli_model_tokenizer(const char *dir, uint32_t model_vocab, struct srt_tok **out,
			    const char *cmd)
{
	char err[4608];
	*out = NULL;
	int rc = srt_tok_load_dir(dir, out, err, sizeof(err));
	if (rc == SRT_ENOENT) {
		fprintf(stderr,
			"%s: note: checkpoint %s has no tokenizer.json: working on token ids (text is "
			"taken as its UTF-8 bytes, output printed as ids)\n",
			cmd, dir);
		return 0;
	}
	if (rc) {
		fprintf(stderr, "%s: %s\n", cmd, err);
		return -1;
	}
	if (srt_tok_vocab_size(*out) > model_vocab) {
		fprintf(stderr,
			"%s: %s/tokenizer.json has %u token ids but the model only %u (vocab_size in "
			"config.json): they do not belong together\n",
			cmd, dir, srt_tok_vocab_size(*out), model_vocab);
		srt_tok_free(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

bool srt_cli_synthetic_weights(const char *dir)
{
	struct srt_ckpt *ck;
	char err[256];
	if (srt_ck_open(dir, &ck, err, sizeof(err)))
		return false;
	const char *g = srt_ck_metadata(ck, 0, "generator");
	bool syn = g && strstr(g, "shadowrt gen-model");
	srt_ck_close(ck);
	return syn;
}
