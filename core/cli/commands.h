/*
 * The `shadowrt` command line: one function per subcommand, each in its own cmd_<name>.c.
 * A command gets argv with argv[0] = the subcommand name, prints its own --help, and returns
 * the process exit status (0 ok, 1 runtime error, 2 usage error).
 */
#ifndef SRT_CLI_COMMANDS_H
#define SRT_CLI_COMMANDS_H

struct srt_command {
	const char *name;
	const char *summary; /* one line for `shadowrt --help` */
	int (*run)(int argc, char **argv);
};

/* The table, in the order `shadowrt --help` lists it; ends with a NULL name. */
extern const struct srt_command srt_commands[];

/* True when argv holds -h or --help (commands use it before parsing anything else). */
int srt_cli_wants_help(int argc, char **argv);

/* Seconds on the monotonic clock (for durations). */
double srt_cli_now(void);

/* A whole decimal number in [lo, hi]: 0 and *out, or -1 (nothing set) on anything else. */
int srt_cli_parse_long(const char *s, long lo, long hi, long *out);
int srt_cli_parse_int(const char *s, int lo, int hi, int *out);

/*
 * Take every "--set SECTION.KEY=VALUE" (and "--set=...") out of argv (up to "--"), shifting
 * the rest down, and install them as the process-wide runtime-config overrides
 * (srt_runtime_config_set_overrides). main() calls it for every command before the command
 * runs, so each command sees its own options only. 0, or 2 with a message on a malformed one.
 */
int srt_cli_take_sets(int *argc, char **argv, const char *cmd);
/* The --set paragraph main() appends to every command's --help. */
extern const char srt_cli_set_help[];

struct srt_engine_opts;
struct srt_engine;
/* srt_engine_open for a long-running command: when the L2/L3 tiers of the config cannot be
 * opened, warn ("<cmd>: warning: tiers unavailable, <verb> with L1 only") and open with L1
 * only; any other failure is printed. 0, or -1 after printing (o->tiers may be cleared). */
int srt_cli_engine_open(struct srt_engine_opts *o, struct srt_engine **e, const char *cmd,
			const char *verb);

/* The engine options every model-running command takes (run, serve, generate, chat), each with
 * a value: --model DIR|PRESET, --config FILE, --threads N (0..4096; 0 = all cores),
 * --profile reference|f32. srt_cli_is_engine_option: whether `a` is one of them.
 * srt_cli_engine_option: 0 when `a` is not one; 1 when it is and `val` was stored in *o; -1
 * when `val` is not valid, with *expect set to what was expected (for the error message). */
int srt_cli_is_engine_option(const char *a);
int srt_cli_engine_option(const char *a, const char *val, struct srt_engine_opts *o,
			  const char **expect);

/* The commands (one cmd_<name>.c each). */
int srt_cmd_plugins(int argc, char **argv);
int srt_cmd_config(int argc, char **argv);
int srt_cmd_gen_model(int argc, char **argv);
int srt_cmd_replay(int argc, char **argv);
int srt_cmd_generate(int argc, char **argv);
int srt_cmd_run(int argc, char **argv);
int srt_cmd_serve(int argc, char **argv);
int srt_cmd_tokenize(int argc, char **argv);
int srt_cmd_chat(int argc, char **argv);
int srt_cmd_detokenize(int argc, char **argv);
int srt_cmd_check_plugin(int argc, char **argv);
int srt_cmd_ab(int argc, char **argv);

#endif
