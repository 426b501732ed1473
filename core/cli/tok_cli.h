/*
 * Command-line helpers around core/tok shared by generate, chat, tokenize and detokenize
 * (tok_cli.c).
 */
#ifndef SRT_CLI_TOK_CLI_H
#define SRT_CLI_TOK_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/tok.h"

/*
 * The directory of the DeepSeek-V4 tokenizer shipped with shadowrt: $SHADOWRT_TOKENIZER_DIR
 * when set, else <dir of the executable>/../share/shadowrt/tokenizers/deepseek-v4. Written to
 * buf; 0, or -1 when it has no tokenizer.json there.
 */
int srt_cli_shipped_tokenizer(char *buf, size_t len);

/*
 * Open the tokenizer a command uses: the file `path` when given, else <model_dir>/ when given,
 * else the shipped one. 0 and *out; SRT_ENOENT when model_dir has none (message in err: the
 * caller decides whether token ids are enough); other errors with a message.
 */
int srt_cli_open_tokenizer(const char *path, const char *model_dir, struct srt_tok **out,
			   char *err, size_t errlen);

/*
 * The tokenizer of checkpoint directory dir for command cmd: 0 and *out (NULL, after a note on
 * stderr, when dir has no tokenizer.json: the command then works on token ids); -1 after an
 * error message (malformed tokenizer, or more token ids than the model's vocabulary).
 */
int srt_cli_model_tokenizer(const char *dir, uint32_t model_vocab, struct srt_tok **out,
			    const char *cmd);

/* True when dir's weights were written by `shadowrt gen-model` (random weights). */
bool srt_cli_synthetic_weights(const char *dir);

#endif
