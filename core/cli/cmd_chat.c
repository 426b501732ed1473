/*
 * shadowrt chat: an interactive multi-turn session in the terminal. Each turn resends the
 * whole conversation through DeepSeek-V4's chat encoding, so the engine's prefix cache serves
 * what earlier turns computed (the hit is shown per turn), and streams the reply as it is
 * decoded.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "commands.h"
#include "config/runtime_config.h"
#include "exec/engine.h"
#include "exec/sampler.h"
#include "tok/chat.h"
#include "tok_cli.h"

static void chat_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt chat [options]\n"
		"\n"
		"An interactive conversation with the model: type a message and press Enter; the reply\n"
		"streams as it is decoded. Every turn resends the whole history (DeepSeek-V4's chat\n"
		"encoding), and the prefix cache serves what earlier turns computed: after each reply a\n"
		"line shows the prompt tokens, the cache hit and the decode rate. Works with a pipe:\n"
		"each stdin line is one user message. /reset starts over, /quit (or end of input)\n"
		"leaves. The checkpoint needs a tokenizer.json (tiny-chat and the real-vocabulary\n"
		"presets have DeepSeek-V4's); synthetic checkpoints have random weights, so the\n"
		"replies are random text.\n"
		"\n"
		"options:\n"
		"  --model DIR|PRESET   checkpoint directory or preset (default: [runtime] model)\n"
		"  --config INI         runtime config over the built-in default\n"
		"  --system TEXT        a system message at the start of the conversation\n"
		"  --thinking           thinking mode (the model reasons first; earlier reasoning is\n"
		"                       dropped from the history, as the reference encoding does)\n"
		"  --max-new-tokens N   reply length limit (default: [sampling] max_new_tokens)\n"
		"  --temperature T      0 = greedy (default: [sampling] temperature)\n"
		"  --top-p P            nucleus mass (default: [sampling] top_p)\n"
		"  --seed S             sampler seed (default: [sampling] seed)\n"
		"  --threads N          worker threads, 0 = all cores (default: [runtime] threads)\n"
		"  --profile P          reference | f32 (default: [runtime] profile)\n"
		"  -q, --quiet          no banner and no per-turn statistics line\n");
}

struct session {
	struct srt_engine *e;
	struct srt_tok *tok;
	json_t *req; /* {"messages": [...], "thinking": {...}} */
	struct srt_sampler smp;
	long max_new;
	bool thinking, quiet;
	float *logits, *scratch;
	size_t V;
	int32_t eos, think_end;
};

static bool is_tty_out(void)
{
	return isatty(1);
}

/* One turn: the user's text in, the reply streamed out, the history extended. */
static int turn(struct session *ss, const char *user, int turn_no)
{
	char err[2048];
	json_t *msgs = json_object_get(ss->req, "messages");
	json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", user));
	struct srt_tok_chat chat = {0};
	struct srt_tok_ids ids = {0}, reply = {0};
	struct srt_tok_text piece = {0}, text = {0};
	struct srt_seq *s = NULL;
	int rc = srt_tok_chat_render(ss->req, &chat, err, sizeof(err));
	if (!rc)
		rc = srt_tok_chat_encode(ss->tok, &chat, &ids, err, sizeof(err));
	uint64_t hit = 0;
	if (!rc)
		rc = srt_engine_seq_start(ss->e, ids.ids, ids.n, 1, &s, &hit, err, sizeof(err));
	double t0 = srt_cli_now(), t_first = 0;
	if (!rc)
		rc = srt_engine_prefill(ss->e, s, ss->logits, 0, err, sizeof(err));
	double t_prefill = srt_cli_now() - t0;
	struct srt_tok_stream st;
	srt_tok_stream_init(&st, ss->tok, SRT_TOK_SKIP_SPECIAL);
	if (!rc && is_tty_out())
		fputs(ss->thinking ? "\033[1mmodel>\033[0m \033[2m" : "\033[1mmodel>\033[0m ", stdout);
	else if (!rc)
		fputs(ss->thinking ? "model> (thinking) " : "model> ", stdout);
	double t1 = srt_cli_now();
	long steps = 0;
	while (!rc && (long)reply.n < ss->max_new) {
		int32_t id = srt_sample(&ss->smp, ss->logits, (int32_t)ss->V, ss->scratch);
		if (!reply.n)
			t_first = srt_cli_now() - t0;
		if (id == ss->eos)
			break;
		if ((rc = srt_tok_ids_push(&reply, &id, 1)))
			break;
		if (ss->thinking && id == ss->think_end) /* reasoning ends: the answer follows */
			fputs(is_tty_out() ? "\033[0m\n" : "\n(answer) ", stdout);
		if ((uint32_t)id < srt_tok_vocab_size(ss->tok)) {
			piece.len = 0;
			if (!srt_tok_stream_push(&st, id, &piece, err, sizeof(err)) && piece.len) {
				fwrite(piece.data, 1, piece.len, stdout);
				fflush(stdout);
			}
		}
		if ((long)reply.n == ss->max_new)
			break;
		rc = srt_engine_decode(ss->e, &s, 1, &id, ss->logits, err, sizeof(err));
		steps++;
	}
	double t_decode = srt_cli_now() - t1;
	piece.len = 0;
	srt_tok_stream_finish(&st, &piece);
	if (piece.len)
		fwrite(piece.data, 1, piece.len, stdout);
	fputs(ss->thinking && is_tty_out() ? "\033[0m\n" : "\n", stdout);
	fflush(stdout);
	uint64_t cached = 0;
	if (!rc)
		rc = srt_engine_seq_finish(s, &cached, err, sizeof(err));
	srt_engine_seq_free(s);
	if (rc) {
		fprintf(stderr, "shadowrt chat: turn %d: %s\n", turn_no, err);
		json_array_remove(msgs, json_array_size(msgs) - 1);
		goto out;
	}
	/* the reply joins the history: in thinking mode the part before </think> is reasoning */
	size_t split = reply.n;
	for (size_t i = 0; ss->thinking && i < reply.n; i++)
		if (reply.ids[i] == ss->think_end) {
			split = i;
			break;
		}
	struct srt_tok_text reasoning = {0};
	if (ss->thinking && split < reply.n) {
		srt_tok_decode(ss->tok, reply.ids, split, SRT_TOK_LOSSY | SRT_TOK_SKIP_SPECIAL,
			       &reasoning, err, sizeof(err));
		srt_tok_decode(ss->tok, reply.ids + split + 1, reply.n - split - 1,
			       SRT_TOK_LOSSY | SRT_TOK_SKIP_SPECIAL, &text, err, sizeof(err));
	} else {
		srt_tok_decode(ss->tok, reply.ids, reply.n, SRT_TOK_LOSSY | SRT_TOK_SKIP_SPECIAL, &text,
			       err, sizeof(err));
	}
	json_t *a = json_pack("{s:s, s:s%}", "role", "assistant", "content",
			      text.data ? text.data : "", text.len);
	if (reasoning.len)
		json_object_set_new(a, "reasoning_content", json_stringn(reasoning.data, reasoning.len));
	json_array_append_new(msgs, a);
	srt_tok_text_free(&reasoning);
	if (!ss->quiet)
		fprintf(stderr,
			"[turn %d: prompt %zu tokens, prefix cache hit %llu (%.0f%%), prefill %.3f s, "
			"first token %.3f s, %zu tokens at %.1f tokens/s]\n",
			turn_no, ids.n, (unsigned long long)hit, ids.n ? 100.0 * (double)hit / (double)ids.n : 0.0,
			t_prefill, t_first, reply.n, t_decode > 0 && steps ? (double)steps / t_decode : 0.0);
out:
	srt_tok_chat_free(&chat);
	srt_tok_ids_free(&ids);
	srt_tok_ids_free(&reply);
	srt_tok_text_free(&piece);
	srt_tok_text_free(&text);
	return rc;
}

static int parse_num(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end)
		return -1;
	*out = v;
	return 0;
}

int srt_cmd_chat(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		chat_usage(stdout);
		return 0;
	}
	struct srt_engine_opts o = {.threads = -1, .profile = -1, .quiet = 0};
	const char *system_text = NULL;
	bool thinking = false, quiet = false;
	long max_new = -1, v;
	double temp = -1, top_p = -1;
	long long seed = -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		bool takes = srt_cli_is_engine_option(a) || !strcmp(a, "--system") ||
			     !strcmp(a, "--max-new-tokens") || !strcmp(a, "--temperature") ||
			     !strcmp(a, "--top-p") || !strcmp(a, "--seed");
		if (takes && !val) {
			fprintf(stderr, "shadowrt chat: %s needs a value\n", a);
			return 2;
		}
		int bad = 0;
		if (takes)
			i++;
		const char *expect = NULL;
		if ((bad = srt_cli_engine_option(a, val, &o, &expect)))
			bad = bad < 0;
		else if (!strcmp(a, "--system"))
			system_text = val;
		else if (!strcmp(a, "--max-new-tokens"))
			bad = srt_cli_parse_long(val, 1, 1 << 20, &max_new);
		else if (!strcmp(a, "--temperature"))
			bad = parse_num(val, &temp) || temp < 0;
		else if (!strcmp(a, "--top-p"))
			bad = parse_num(val, &top_p) || top_p <= 0 || top_p > 1;
		else if (!strcmp(a, "--seed")) {
			bad = srt_cli_parse_long(val, 0, 1L << 62, &v);
			seed = v;
		} else if (!strcmp(a, "--thinking"))
			thinking = true;
		else if (!strcmp(a, "-q") || !strcmp(a, "--quiet"))
			quiet = true;
		else {
			fprintf(stderr, "shadowrt chat: unknown option '%s' (see --help)\n", a);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "shadowrt chat: %s '%s': %s%s\n", a, val,
				expect ? "expected " : "", expect ? expect : "out of range or not a valid value");
			return 2;
		}
	}
	char err[2048];
	struct session ss = {.thinking = thinking, .quiet = quiet};
	int status = 1;
	o.quiet = quiet;
	if (srt_engine_open(&o, &ss.e, err, sizeof(err))) {
		fprintf(stderr, "shadowrt chat: %s\n", err);
		return 1;
	}
	const struct srt_model_config *m = srt_engine_model(ss.e);
	const struct srt_runtime_config *rc = srt_engine_runtime(ss.e);
	const char *dir = srt_engine_model_path(ss.e);
	if (srt_cli_model_tokenizer(dir, (uint32_t)m->vocab_size, &ss.tok, "shadowrt chat"))
		goto out;
	if (!ss.tok) {
		fprintf(stderr, "shadowrt chat: a conversation needs text: use a checkpoint with a "
			"tokenizer (e.g. --model tiny-chat)\n");
		goto out;
	}
	ss.V = (size_t)m->vocab_size;
	ss.max_new = max_new > 0 ? max_new : rc->max_new_tokens;
	ss.eos = srt_tok_eos_id(ss.tok) >= 0 ? srt_tok_eos_id(ss.tok) : m->eos_token_id;
	ss.think_end = srt_tok_added_id(ss.tok, "</think>", 8);
	srt_sampler_init(&ss.smp, (float)(temp >= 0 ? temp : rc->temperature),
			 (float)(top_p > 0 ? top_p : rc->top_p), seed >= 0 ? (uint64_t)seed : rc->seed);
	ss.logits = malloc(sizeof(float) * ss.V);
	ss.scratch = malloc(sizeof(float) * ss.V * 2);
	ss.req = json_pack("{s:[], s:{s:s}, s:s}", "messages", "thinking", "type",
			   thinking ? "enabled" : "disabled", "reasoning_effort", thinking ? "high" : "low");
	if (!ss.logits || !ss.scratch || !ss.req) {
		fprintf(stderr, "shadowrt chat: out of memory\n");
		goto out;
	}
	if (system_text)
		json_array_append_new(json_object_get(ss.req, "messages"),
				      json_pack("{s:s, s:s}", "role", "system", "content", system_text));
	if (!quiet) {
		fprintf(stderr, "shadowrt chat: model %s (%s), %s mode, replies up to %ld tokens. "
			"/reset starts over, /quit leaves.\n", m->name, dir,
			thinking ? "thinking" : "chat", ss.max_new);
		if (srt_cli_synthetic_weights(dir))
			fprintf(stderr, "shadowrt chat: note: random (synthetic) weights: the replies are "
				"random text\n");
	}
	char *line = NULL;
	size_t cap = 0;
	int turn_no = 0;
	bool tty_in = isatty(0);
	for (;;) {
		if (tty_in)
			fputs(is_tty_out() ? "\033[1myou>\033[0m " : "you> ", stdout);
		fflush(stdout);
		ssize_t n = getline(&line, &cap, stdin);
		if (n < 0)
			break;
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		if (!n)
			continue;
		if (!strcmp(line, "/quit") || !strcmp(line, "/exit"))
			break;
		if (!strcmp(line, "/reset")) {
			json_t *msgs = json_object_get(ss.req, "messages");
			json_array_clear(msgs);
			if (system_text)
				json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system",
								      "content", system_text));
			turn_no = 0;
			fprintf(stderr, "shadowrt chat: conversation reset\n");
			continue;
		}
		if (!tty_in)
			printf("you> %s\n", line);
		if (turn(&ss, line, ++turn_no)) {
			free(line);
			goto out;
		}
	}
	free(line);
	status = 0;
out:
	json_decref(ss.req);
	free(ss.logits);
	free(ss.scratch);
	srt_tok_free(ss.tok);
	srt_engine_close(ss.e);
	return status;
}
