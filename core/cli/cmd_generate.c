/* shadowrt generate: one prompt through the executor, greedy or sampled continuation. */
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shadowrt/plugin.h>

#include "commands.h"
#include "config/runtime_config.h"
#include "tok/chat.h"
#include "tok_cli.h"
#include "exec/engine.h"
#include "exec/sampler.h"

static void generate_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt generate [options]\n"
		"\n"
		"Run one prompt through the model (chunked prefill, then token-by-token decode) and\n"
		"print the generated text (token ids with --ids) and the timing: time to first token,\n"
		"prefill and decode tokens/s. Stops after --max-new-tokens or at the model's eos token.\n"
		"Text goes through the checkpoint's tokenizer.json (the presets with the real\n"
		"vocabulary, e.g. tiny-chat, carry DeepSeek-V4's); a checkpoint without one works on\n"
		"token ids and says so. Synthetic checkpoints have random weights: their text is random.\n"
		"\n"
		"options:\n"
		"  --model DIR|PRESET   checkpoint directory, or a preset name whose synthetic\n"
		"                       checkpoint is generated into the model cache when missing\n"
		"                       ($XDG_CACHE_HOME/shadowrt/models or ./shadowrt-models)\n"
		"  --config INI         runtime config over the built-in default\n"
		"  --prompt-tokens L    comma-separated token ids, e.g. 1,2,3\n"
		"  --prompt TEXT        the prompt, encoded with the checkpoint's tokenizer (no BOS is\n"
		"                       added); without a tokenizer, the UTF-8 bytes of TEXT as ids\n"
		"  --chat               TEXT is a user message: DeepSeek-V4's chat encoding (BOS, turn\n"
		"                       tokens, generation prompt) turns it into the prompt\n"
		"  --system TEXT        --chat: a system message before it\n"
		"  --thinking           --chat: thinking mode (default: chat mode, no reasoning)\n"
		"  --request FILE       an OpenAI chat request (JSON: messages, tools, tool_choice,\n"
		"                       thinking, reasoning_effort, response_format) as the prompt,\n"
		"                       through DeepSeek-V4's chat encoding ('-' = stdin)\n"
		"  --ids                print the generated token ids, not the text\n"
		"  --json               one JSON object on stdout: text (with a tokenizer), ids,\n"
		"                       prompt_tokens, ttft_s, prefill and decode tokens/s\n"
		"  --max-new-tokens N   tokens to generate (default: [sampling] max_new_tokens)\n"
		"  --temperature T      0 = greedy (default: [sampling] temperature)\n"
		"  --top-p P            nucleus mass in (0, 1] (default: [sampling] top_p)\n"
		"  --seed S             sampler seed (default: [sampling] seed)\n"
		"  --profile P          reference | f32 (default: [runtime] profile)\n"
		"  --chunk N            prefill chunk in tokens (default: [runtime] prefill_chunk)\n"
		"  --threads N          worker threads, 0 = all cores (default: [runtime] threads)\n"
		"  --logits FILE        write raw little-endian float32 [positions][vocab]: the logits\n"
		"                       of every prompt and generated position\n"
		"  --no-eos             do not stop at the eos token\n"
		"  --cache              use the prefix cache with the config's tiers: resume after\n"
		"                       the longest cached prefix (from L2/L3, e.g. the file L3 a\n"
		"                       previous run wrote) and cache this sequence at the end;\n"
		"                       --logits then holds the computed positions [hit, n) on\n"
		"                       (the hit is printed on stderr)\n"
		"  -q, --quiet          print only the generated token ids\n");
}

static int parse_double(const char *s, double *out)
{
	errno = 0;
	char *end;
	double v = strtod(s, &end);
	if (errno || end == s || *end)
		return -1;
	*out = v;
	return 0;
}

/* "1,2,3" -> malloc'd ids; -1 on a malformed list */
static int parse_tokens(const char *s, int32_t **out, uint64_t *n)
{
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == ',';
	int32_t *t = malloc(sizeof(int32_t) * cap);
	if (!t)
		return -1;
	uint64_t k = 0;
	const char *p = s;
	while (*p) {
		errno = 0;
		char *end;
		long v = strtol(p, &end, 10);
		if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
			free(t);
			return -1;
		}
		t[k++] = (int32_t)v;
		p = *end ? end + 1 : end;
	}
	if (!k) { /* "" */
		free(t);
		return -1;
	}
	*out = t;
	*n = k;
	return 0;
}

/*
 * The prompt ids of --prompt TEXT: the tokenizer's encoding (with --chat, of a request with a
 * user message, optionally a system message, in chat or thinking mode), or the UTF-8 bytes
 * when the checkpoint has no tokenizer.
 */
static int make_prompt(const struct srt_tok *tok, const char *text, int chat, const char *system,
		       int thinking, int32_t **out, uint64_t *n)
{
	char err[1024];
	struct srt_tok_ids ids = {0};
	int rc = 0;
	if (!tok) {
		size_t len = strlen(text);
		for (size_t i = 0; i < len && !rc; i++)
			rc = srt_tok_ids_push(&ids, &(int32_t){(unsigned char)text[i]}, 1);
	} else if (!chat) {
		rc = srt_tok_encode(tok, text, strlen(text), 0, &ids, err, sizeof(err));
	} else {
		json_t *q = json_pack("{s:[], s:{s:s}, s:s}", "messages", "thinking", "type",
				      thinking ? "enabled" : "disabled", "reasoning_effort",
				      thinking ? "high" : "low");
		json_t *msgs = json_object_get(q, "messages");
		if (system)
			json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content",
							      system));
		json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", text));
		struct srt_tok_chat c = {0};
		rc = srt_tok_chat_render(q, &c, err, sizeof(err));
		if (!rc)
			rc = srt_tok_chat_encode(tok, &c, &ids, err, sizeof(err));
		srt_tok_chat_free(&c);
		json_decref(q);
	}
	if (!rc && !ids.n) {
		snprintf(err, sizeof(err), "the prompt encodes to no tokens");
		rc = SRT_EINVAL;
	}
	if (rc) {
		fprintf(stderr, "shadowrt generate: --prompt: %s\n", rc == SRT_ENOMEM ? "out of memory" : err);
		srt_tok_ids_free(&ids);
		return -1;
	}
	*out = ids.ids;
	*n = ids.n;
	return 0;
}

/* The prompt ids of --request FILE: an OpenAI chat request through the chat encoding. */
static int request_prompt(const struct srt_tok *tok, const char *path, int32_t **out,
			  uint64_t *n)
{
	char err[1024];
	json_error_t je;
	json_t *q = !strcmp(path, "-") ? json_loadf(stdin, 0, &je) : json_load_file(path, 0, &je);
	if (!q) {
		fprintf(stderr, "shadowrt generate: --request %s:%d:%d: %s\n", path, je.line, je.column,
			je.text);
		return -1;
	}
	struct srt_tok_chat c = {0};
	struct srt_tok_ids ids = {0};
	int rc = srt_tok_chat_render(q, &c, err, sizeof(err));
	if (!rc)
		rc = srt_tok_chat_encode(tok, &c, &ids, err, sizeof(err));
	srt_tok_chat_free(&c);
	json_decref(q);
	if (rc) {
		fprintf(stderr, "shadowrt generate: --request %s: %s\n", path, err);
		srt_tok_ids_free(&ids);
		return -1;
	}
	*out = ids.ids;
	*n = ids.n;
	return 0;
}

static int write_all(FILE *f, const float *x, size_t n)
{
	return fwrite(x, sizeof(float), n, f) == n ? 0 : -1;
}

int srt_cmd_generate(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		generate_usage(stdout);
		return 0;
	}
	struct srt_engine_opts o = {.threads = -1, .profile = -1};
	const char *prompt_tokens = NULL, *prompt_text = NULL, *logits_path = NULL;
	long max_new = -1, v;
	double temp = -1, top_p = -1;
	long long seed = -1;
	int quiet = 0, no_eos = 0, chat = 0, thinking = 0, print_ids = 0, json_out = 0, use_cache = 0;
	const char *system_text = NULL, *request_path = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                                 \
	do {                                                                                   \
		if (!val) {                                                                    \
			fprintf(stderr, "shadowrt generate: %s needs a value\n", a);           \
			return 2;                                                              \
		}                                                                              \
		i++;                                                                           \
	} while (0)
#define BAD(what)                                                                              \
	do {                                                                                   \
		fprintf(stderr, "shadowrt generate: %s '%s': expected %s\n", a, val, what);    \
		return 2;                                                                      \
	} while (0)
		const char *expect = NULL;
		if (srt_cli_is_engine_option(a)) {
			NEED();
			if (srt_cli_engine_option(a, val, &o, &expect) < 0)
				BAD(expect);
		} else if (!strcmp(a, "--prompt-tokens")) {
			NEED();
			prompt_tokens = val;
		} else if (!strcmp(a, "--prompt")) {
			NEED();
			prompt_text = val;
		} else if (!strcmp(a, "--max-new-tokens")) {
			NEED();
			if (srt_cli_parse_long(val, 0, 1 << 24, &max_new))
				BAD("an integer in [0, 16777216]");
		} else if (!strcmp(a, "--temperature")) {
			NEED();
			if (parse_double(val, &temp) || !isfinite(temp) || temp < 0)
				BAD("a finite number >= 0");
		} else if (!strcmp(a, "--top-p")) {
			NEED();
			if (parse_double(val, &top_p) || !(top_p > 0 && top_p <= 1))
				BAD("a number in (0, 1]");
		} else if (!strcmp(a, "--seed")) {
			NEED();
			if (srt_cli_parse_long(val, 0, LONG_MAX, &v))
				BAD("a non-negative integer");
			seed = v;
		} else if (!strcmp(a, "--chunk")) {
			NEED();
			if (srt_cli_parse_long(val, 1, 1 << 20, &v))
				BAD("an integer in [1, 1048576]");
			o.chunk = (int)v;
		} else if (!strcmp(a, "--logits")) {
			NEED();
			logits_path = val;
		} else if (!strcmp(a, "--chat")) {
			chat = 1;
		} else if (!strcmp(a, "--thinking")) {
			thinking = 1;
		} else if (!strcmp(a, "--ids")) {
			print_ids = 1;
		} else if (!strcmp(a, "--json")) {
			json_out = 1;
		} else if (!strcmp(a, "--request")) {
			NEED();
			request_path = val;
		} else if (!strcmp(a, "--system")) {
			NEED();
			system_text = val;
		} else if (!strcmp(a, "--no-eos")) {
			no_eos = 1;
		} else if (!strcmp(a, "--cache")) {
			use_cache = 1;
		} else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
			quiet = 1;
		} else {
			fprintf(stderr, "shadowrt generate: unknown option '%s' (see --help)\n", a);
			return 2;
		}
#undef NEED
#undef BAD
	}
	if (!!prompt_tokens + !!prompt_text + !!request_path != 1) {
		fprintf(stderr, "shadowrt generate: give exactly one of --prompt-tokens, --prompt and "
			"--request\n");
		return 2;
	}
	if (chat && !prompt_text) {
		fprintf(stderr, "shadowrt generate: --chat needs --prompt TEXT (the user message)\n");
		return 2;
	}
	int32_t *prompt = NULL;
	uint64_t n = 0;
	if (prompt_tokens) {
		if (parse_tokens(prompt_tokens, &prompt, &n)) {
			fprintf(stderr, "shadowrt generate: --prompt-tokens '%s': expected comma-separated "
				"non-negative integers\n", prompt_tokens);
			return 2;
		}
	} else if (prompt_text && !*prompt_text && !chat) {
		fprintf(stderr, "shadowrt generate: --prompt is empty\n");
		return 2;
	}
	o.quiet = quiet;
	o.tiers = use_cache; /* --cache: the config's L2/L3 tiers behind L1 */

	char err[2048];
	int status = 1;
	struct srt_engine *e = NULL;
	struct srt_seq *s = NULL;
	float *logits = NULL, *all = NULL;
	void *scratch = NULL;
	int32_t *gen = NULL;
	FILE *lf = NULL;
	struct srt_tok *tok = NULL;
	struct srt_tok_stream ts;
	struct srt_tok_text piece = {0};
	double t0 = srt_cli_now();
	if (srt_engine_open(&o, &e, err, sizeof(err))) {
		fprintf(stderr, "shadowrt generate: %s\n", err);
		goto out;
	}
	double t_open = srt_cli_now() - t0;
	const struct srt_model_config *m = srt_engine_model(e);
	const char *dir = srt_engine_model_path(e);
	if (srt_cli_model_tokenizer(dir, (uint32_t)m->vocab_size, &tok, "shadowrt generate"))
		goto out;
	if ((chat || request_path) && !tok) {
		fprintf(stderr, "shadowrt generate: --chat needs a checkpoint with a tokenizer "
			"(e.g. --model tiny-chat)\n");
		goto out;
	}
	if (prompt_text && make_prompt(tok, prompt_text, chat, system_text, thinking, &prompt, &n))
		goto out;
	if (request_path && request_prompt(tok, request_path, &prompt, &n))
		goto out;
	if (!quiet && tok && srt_cli_synthetic_weights(dir))
		fprintf(stderr, "shadowrt generate: note: %s holds random (synthetic) weights: the "
			"generated text is random\n", dir);
	const struct srt_runtime_config *rc = srt_engine_runtime(e);
	size_t V = (size_t)m->vocab_size;
	if (max_new < 0)
		max_new = rc->max_new_tokens;
	struct srt_sampler smp;
	srt_sampler_init(&smp, (float)(temp >= 0 ? temp : rc->temperature),
			 (float)(top_p > 0 ? top_p : rc->top_p),
			 seed >= 0 ? (uint64_t)seed : rc->seed);
	logits = malloc(sizeof(float) * V * 2);
	scratch = malloc(sizeof(float) * V * 2);
	gen = malloc(sizeof(int32_t) * ((size_t)max_new + 1));
	if (logits_path)
		all = malloc(sizeof(float) * V * n);
	if (!logits || !scratch || !gen || (logits_path && !all)) {
		fprintf(stderr, "shadowrt generate: out of memory\n");
		goto out;
	}
	if (logits_path && !(lf = fopen(logits_path, "wb"))) {
		fprintf(stderr, "shadowrt generate: cannot open --logits file '%s': %s\n",
			logits_path, strerror(errno));
		goto out;
	}
	uint64_t hit = 0, hit_tiers[3] = {0, 0, 0};
	if (srt_engine_seq_start(e, prompt, n, use_cache, &s, &hit, err, sizeof(err))) {
		fprintf(stderr, "shadowrt generate: %s\n", err);
		goto out;
	}
	double t1 = srt_cli_now();
	if (srt_engine_prefill(e, s, all ? all : logits, all != NULL, err, sizeof(err))) {
		fprintf(stderr, "shadowrt generate: prefill: %s\n", err);
		goto out;
	}
	const float *last = all ? all + (n - 1) * V : logits;
	if (use_cache)
		srt_seq_hit_tiers(s, hit_tiers);
	if (hit && all)
		last = all + (n - hit - 1) * V; /* all holds the computed positions [hit, n) */
	if (lf && write_all(lf, all, V * (n - hit)))
		goto write_fail;
	double t_prefill = srt_cli_now() - t1;
	long n_gen = 0, steps = 0;
	double t2 = srt_cli_now();
	bool text_out = tok && !print_ids && !json_out;
	if (text_out)
		srt_tok_stream_init(&ts, tok, SRT_TOK_SKIP_SPECIAL);
	while (n_gen < max_new) {
		int32_t id = srt_sample(&smp, last, (int32_t)V, scratch);
		gen[n_gen++] = id;
		if (text_out && (uint32_t)id < srt_tok_vocab_size(tok) &&
		    srt_tok_token_bytes(tok, id, &(size_t){0})) {
			/* stream the text as it comes (whole characters only) */
			piece.len = 0;
			if (!srt_tok_stream_push(&ts, id, &piece, err, sizeof(err)) && piece.len) {
				fwrite(piece.data, 1, piece.len, stdout);
				fflush(stdout);
			}
		}
		int stop = n_gen == max_new || (!no_eos && id == m->eos_token_id);
		if (stop && !lf)
			break;
		/* the next logits; with --logits also those of the last generated token */
		if (srt_engine_decode(e, &s, 1, &id, logits, err, sizeof(err))) {
			fprintf(stderr, "shadowrt generate: decode: %s\n", err);
			goto out;
		}
		steps++;
		last = logits;
		if (lf && write_all(lf, logits, V))
			goto write_fail;
		if (stop)
			break;
	}
	double t_decode = srt_cli_now() - t2;
	if (lf) {
		if (fclose(lf)) {
			lf = NULL;
			goto write_fail;
		}
		lf = NULL;
	}
	/* --cache: the prompt and the tokens are inserted (written through to L2/L3 as the
	 * config says), so the next run with the same prefix resumes after it */
	if (use_cache && srt_engine_seq_finish(s, NULL, err, sizeof(err))) {
		fprintf(stderr, "shadowrt generate: caching the sequence: %s\n", err);
		goto out;
	}
	if (json_out) {
		json_t *o = json_object(), *a = json_array();
		for (long i = 0; i < n_gen; i++)
			json_array_append_new(a, json_integer(gen[i]));
		if (tok) {
			piece.len = 0;
			srt_tok_decode(tok, gen, (size_t)n_gen, SRT_TOK_LOSSY | SRT_TOK_SKIP_SPECIAL, &piece,
				       err, sizeof(err));
			json_object_set_new(o, "text", json_stringn(piece.data ? piece.data : "", piece.len));
		}
		json_object_set_new(o, "ids", a);
		json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)n));
		json_object_set_new(o, "ttft_s", json_real(t_prefill));
		json_object_set_new(o, "prefill_tokens_per_s",
				    json_real(t_prefill > 0 ? (double)n / t_prefill : 0.0));
		json_object_set_new(o, "decode_tokens_per_s",
				    json_real(t_decode > 0 && steps > 0 ? (double)steps / t_decode : 0.0));
		char *d = json_dumps(o, JSON_COMPACT);
		puts(d ? d : "{}");
		free(d);
		json_decref(o);
	} else if (text_out) {
		piece.len = 0;
		srt_tok_stream_finish(&ts, &piece);
		fwrite(piece.data ? piece.data : "", 1, piece.len, stdout);
		printf("\n");
	} else {
		for (long i = 0; i < n_gen; i++)
			printf("%s%d", i ? "," : "", gen[i]);
		printf("\n");
	}
	fflush(stdout);
	if (!quiet) {
		fprintf(stderr,
			"model %s (%s), profile %s, %d threads, chunk %d\n"
			"prompt %llu tokens, generated %ld\n"
			"open %.3f s, prefill %.3f s (%.1f tokens/s), time to first token %.3f s\n"
			"decode %.3f s (%.1f tokens/s)\n",
			m->name, srt_engine_model_path(e), srt_profile_name(srt_engine_profile(e)),
			srt_engine_threads(e), srt_engine_chunk(e), (unsigned long long)n, n_gen,
			t_open, t_prefill, t_prefill > 0 ? (double)n / t_prefill : 0.0, t_prefill,
			t_decode, t_decode > 0 && steps > 0 ? (double)steps / t_decode : 0.0);
		if (use_cache)
			fprintf(stderr, "prefix cache hit %llu of %llu prompt tokens (L1 %llu, L2 %llu, "
				"L3 %llu)\n", (unsigned long long)hit, (unsigned long long)n,
				(unsigned long long)hit_tiers[0], (unsigned long long)hit_tiers[1],
				(unsigned long long)hit_tiers[2]);
	}
	status = 0;
	goto out;
write_fail:
	fprintf(stderr, "shadowrt generate: writing --logits file '%s': %s\n", logits_path,
		strerror(errno));
out:
	if (lf)
		fclose(lf);
	srt_engine_seq_free(s);
	srt_engine_close(e);
	free(prompt);
	free(logits);
	free(all);
	free(scratch);
	free(gen);
	srt_tok_text_free(&piece);
	srt_tok_free(tok);
	return status;
}
