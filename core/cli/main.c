/* shadowrt — entry point: dispatch to a subcommand (see commands.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shadowrt/plugin.h>

#include "commands.h"
#include "exec/engine.h"
#include "config/runtime_config.h"

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
	{"ab", "compare two configurations over one workload: divergence, agreement, speed ratios", srt_cmd_ab},
	{"check-plugin", "conformance suite for an attention, MoE or residual plugin (.so or name)", srt_cmd_check_plugin},
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

int srt_cli_engine_open(struct srt_engine_opts *o, struct srt_engine **e, const char *cmd,
			const char *verb)
{
	char err[2048];
	if (!srt_engine_open(o, e, err, sizeof(err)))
		return 0;
	if (o->tiers && strstr(err, "[tier.")) {
		fprintf(stderr, "%s: warning: tiers unavailable, %s with L1 only (--no-tiers): %s\n",
			cmd, verb, err);
		o->tiers = 0;
		if (!srt_engine_open(o, e, err, sizeof(err)))
			return 0;
	}
	fprintf(stderr, "%s: %s\n", cmd, err);
	return -1;
}

int srt_cli_is_engine_option(const char *a)
{
	return !strcmp(a, "--model") || !strcmp(a, "--config") || !strcmp(a, "--threads") ||
	       !strcmp(a, "--profile");
}

int srt_cli_engine_option(const char *a, const char *val, struct srt_engine_opts *o,
			  const char **expect)
{
	if (!srt_cli_is_engine_option(a))
		return 0;
	if (!strcmp(a, "--model")) {
		o->model = val;
	} else if (!strcmp(a, "--config")) {
		o->config_path = val;
	} else if (!strcmp(a, "--threads")) {
		if (srt_cli_parse_int(val, 0, 4096, &o->threads)) {
			*expect = "an integer in [0, 4096]";
			return -1;
		}
	} else if (!strcmp(val, "reference") || !strcmp(val, "f32")) {
		o->profile = !strcmp(val, "f32");
	} else {
		*expect = "reference or f32";
		return -1;
	}
	return 1;
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
		     "  --version      print the version and the plugin ABI version\n"
		     "\n%s", srt_cli_set_help);
}

const char srt_cli_set_help[] =
	"every command also takes:\n"
	"  --set SECTION.KEY=VALUE  override one runtime-config key over the built-in default\n"
	"                           and --config (repeatable; a later one wins), e.g.\n"
	"                           --set attention.ratio.4=mycsa --set tier.l3.budget=64GiB\n"
	"                           --set attention.csa.kv_dtype=fp8\n";

int srt_cli_take_sets(int *argc, char **argv, const char *cmd)
{
	const char *sets[256];
	size_t n = 0;
	int k = 1;
	char err[512];
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i], *v = NULL;
		if (!strcmp(a, "--")) {
			while (i < *argc)
				argv[k++] = argv[i++];
			break;
		}
		if (!strcmp(a, "--set")) {
			if (i + 1 == *argc) {
				fprintf(stderr, "shadowrt %s: --set needs SECTION.KEY=VALUE\n", cmd);
				return 2;
			}
			v = argv[++i];
		} else if (!strncmp(a, "--set=", 6)) {
			v = a + 6;
		} else {
			argv[k++] = argv[i];
			continue;
		}
		if (n == sizeof(sets) / sizeof(sets[0])) {
			fprintf(stderr, "shadowrt %s: more than %zu --set options\n", cmd, n);
			return 2;
		}
		sets[n++] = v;
	}
	argv[k] = NULL;
	*argc = k;
	if (srt_runtime_config_set_overrides(sets, n, err, sizeof(err))) {
		fprintf(stderr, "shadowrt %s: %s\n", cmd, err);
		return 2;
	}
	return 0;
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
		printf("shadowrt %s (plugin ABI %d.%d)\n", SRT_VERSION, SRT_ABI_MAJOR, SRT_ABI_MINOR);
		return 0;
	}
	for (const struct srt_command *c = srt_commands; c->name; c++) {
		if (strcmp(argv[1], c->name))
			continue;
		int sub_argc = argc - 1, st;
		char **sub = argv + 1;
		int help = srt_cli_wants_help(sub_argc, sub);
		if ((st = srt_cli_take_sets(&sub_argc, sub, c->name)))
			return st;
		int had_sets = sub_argc != argc - 1;
		st = c->run(sub_argc, sub);
		if (help)
			printf("\n%s", srt_cli_set_help);
		else if (had_sets && srt_runtime_config_load_count() == 0)
			fprintf(stderr, "shadowrt %s: warning: --set had no effect: this command "
				"reads no runtime config\n", c->name);
		return st;
	}
	const char *names[64];
	size_t n = 0;
	for (const struct srt_command *c = srt_commands; c->name && n < 64; c++)
		names[n++] = c->name;
	const char *s = srt_suggest(argv[1], names, n);
	fprintf(stderr, "shadowrt: unknown command '%s'%s%s%s (see shadowrt --help)\n", argv[1],
		s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
	return 2;
}
