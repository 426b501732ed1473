/* shadowrt — entry point: dispatch to a subcommand (see commands.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"

#ifndef SRT_VERSION
#define SRT_VERSION "dev"
#endif

/* Subcommands, one per cmd_<name>.c. Add a line here when a command lands. */
const struct srt_command srt_commands[] = {
	{"plugins", "list the plugins found, with versions, and those rejected and why", srt_cmd_plugins},
	{"config", "validate the model and runtime configuration and print the effective settings", srt_cmd_config},
	{"gen-model", "write a deterministic synthetic checkpoint of a preset, or --check one", srt_cmd_gen_model},
	{"replay", "cache-only replay of a request trace through ShadowRadix: hit rate vs ceiling", srt_cmd_replay},
	{"generate", "run one prompt through the model: generated tokens, TTFT, tokens/s, --logits", srt_cmd_generate},
	{"run", "the main job: a built-in multi-turn chat workload, batched decode, prefix hits, KV per pool", srt_cmd_run},
	{"chat", "an interactive multi-turn conversation in the terminal, streamed, with the prefix-cache hit per turn", srt_cmd_chat},
	{"tokenize", "encode text into token ids with the model's tokenizer (--json for scripts)", srt_cmd_tokenize},
	{"detokenize", "decode token ids into text with the model's tokenizer (--json for scripts)", srt_cmd_detokenize},
	{"serve", "OpenAI-compatible HTTP server: completions, chat, streaming, /metrics", srt_cmd_serve},
	{NULL, NULL, NULL},
};

int srt_cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return 1;
	}
	return 0;
}

double srt_cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int srt_cli_parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

int srt_cli_parse_int(const char *s, int lo, int hi, int *out)
{
	long v;
	if (srt_cli_parse_long(s, lo, hi, &v))
		return -1;
	*out = (int)v;
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt <command> [options]\n"
		"\n"
		"shadowrt serves DeepSeek-V4-architecture models on a plugin core with the ShadowRadix\n"
		"prefix cache. Every command takes --help.\n"
		"\n"
		"commands:\n");
	for (const struct srt_command *c = srt_commands; c->name; c++)
		fprintf(out, "  %-12s %s\n", c->name, c->summary);
	fprintf(out, "\noptions:\n"
		     "  -h, --help     this help\n"
		     "  --version      print the version and the plugin ABI version\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("shadowrt %s (plugin ABI %d.%d)\n", SRT_VERSION, 1, 0);
		return 0;
	}
	for (const struct srt_command *c = srt_commands; c->name; c++)
		if (!strcmp(argv[1], c->name))
			return c->run(argc - 1, argv + 1);
	fprintf(stderr, "shadowrt: unknown command '%s' (see shadowrt --help)\n", argv[1]);
	return 2;
}
