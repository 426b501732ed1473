/* shadowrt tokenize / detokenize: text <-> token ids with a checkpoint's tokenizer, for scripts. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "commands.h"
#include "tok/chat.h"
#include "tok_cli.h"

/* Whole stream into memory. */
static int slurp(FILE *f, struct srt_tok_text *out)
{
	char buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		if (srt_tok_text_append(out, buf, n))
			return -1;
	return ferror(f) ? -1 : srt_tok_text_append(out, "", 0);
}

static void tokenize_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt tokenize [options] [TEXT...]\n"
		"\n"
		"Encode text into token ids with a tokenizer.json (HF byte-level BPE; DeepSeek-V4's by\n"
		"default). TEXT arguments are joined with single spaces; without any, stdin is read.\n"
		"No BOS token is added. Invalid UTF-8 is replaced by U+FFFD first.\n"
		"\n"
		"options:\n"
		"  --tokenizer FILE   a tokenizer.json\n"
		"  --model DIR        the tokenizer of a checkpoint directory (DIR/tokenizer.json)\n"
		"                     (default: the DeepSeek-V4 tokenizer shipped with shadowrt)\n"
		"  --file FILE        read the text from FILE instead of stdin\n"
		"  --lines            encode each line (split at \\n, which is not encoded) separately:\n"
		"                     one output line per input line\n"
		"  --no-added         model vocabulary only: added/special token spellings are text\n"
		"  --chat             the input is OpenAI chat requests, one JSON object per line\n"
		"                     (messages, tools, tool_choice, thinking, reasoning_effort,\n"
		"                     response_format): each is rendered with DeepSeek-V4's chat\n"
		"                     encoding and encoded; one JSON line out per request:\n"
		"                     {\"text\": prompt, \"ids\": [...]} or {\"error\": message}\n"
		"  --json             JSON: {\"ids\": [...], \"count\": N}; with --lines one array per line\n");
}

static int emit_ids(FILE *o, const struct srt_tok_ids *ids, size_t from, bool json, bool lines)
{
	if (json && !lines)
		fputs("{\"ids\": [", o);
	else if (json)
		fputc('[', o);
	for (size_t i = from; i < ids->n; i++)
		fprintf(o, i > from ? (json ? ", %d" : " %d") : "%d", ids->ids[i]);
	if (json && !lines)
		fprintf(o, "], \"count\": %zu}\n", ids->n - from);
	else
		fputs(json ? "]\n" : "\n", o);
	return 0;
}

/* One chat request (a JSON line) -> {"text": ..., "ids": [...]} or {"error": ...}. */
static void chat_line(const struct srt_tok *tok, const char *s, size_t n)
{
	char err[1024];
	json_error_t je;
	json_t *q = json_loadb(s, n, 0, &je);
	json_t *o = json_object();
	struct srt_tok_chat chat = {0};
	struct srt_tok_ids ids = {0};
	int rc;
	if (!q) {
		snprintf(err, sizeof(err), "not JSON: %s", je.text);
		rc = -1;
	} else {
		rc = srt_tok_chat_render(q, &chat, err, sizeof(err));
		if (!rc)
			rc = srt_tok_chat_encode(tok, &chat, &ids, err, sizeof(err));
	}
	if (rc) {
		json_object_set_new(o, "error", json_string(err));
	} else {
		json_t *a = json_array();
		for (size_t i = 0; i < ids.n; i++)
			json_array_append_new(a, json_integer(ids.ids[i]));
		json_object_set_new(o, "text", json_stringn(chat.text.data, chat.text.len));
		json_object_set_new(o, "ids", a);
	}
	char *d = json_dumps(o, JSON_COMPACT);
	puts(d ? d : "{\"error\": \"out of memory\"}");
	free(d);
	json_decref(o);
	json_decref(q);
	srt_tok_chat_free(&chat);
	srt_tok_ids_free(&ids);
}

int srt_cmd_tokenize(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		tokenize_usage(stdout);
		return 0;
	}
	const char *tpath = NULL, *mdir = NULL, *file = NULL;
	bool lines = false, json = false, chat = false;
	unsigned flags = 0;
	int first_text = argc;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool more = i + 1 < argc;
		if (!strcmp(a, "--tokenizer") && more)
			tpath = argv[++i];
		else if (!strcmp(a, "--model") && more)
			mdir = argv[++i];
		else if (!strcmp(a, "--file") && more)
			file = argv[++i];
		else if (!strcmp(a, "--lines"))
			lines = true;
		else if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "--no-added"))
			flags |= SRT_TOK_NO_ADDED;
		else if (!strcmp(a, "--chat"))
			chat = lines = true;
		else if (!strcmp(a, "--")) {
			first_text = i + 1;
			break;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "shadowrt tokenize: unknown or incomplete option '%s' (see --help)\n", a);
			return 2;
		} else {
			first_text = i;
			break;
		}
	}
	char err[4608];
	struct srt_tok *tok;
	int rc = srt_cli_open_tokenizer(tpath, mdir, &tok, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "shadowrt tokenize: %s\n", err);
		return 1;
	}
	struct srt_tok_text in = {0};
	if (first_text < argc) {
		for (int i = first_text; i < argc; i++)
			if ((i > first_text && srt_tok_text_append(&in, " ", 1)) ||
			    srt_tok_text_append(&in, argv[i], strlen(argv[i])))
				goto oom;
	} else {
		FILE *f = file ? fopen(file, "rb") : stdin;
		if (!f) {
			fprintf(stderr, "shadowrt tokenize: %s: cannot open: %s\n", file, strerror(errno));
			srt_tok_free(tok);
			return 1;
		}
		int r = slurp(f, &in);
		if (file)
			fclose(f);
		if (r) {
			fprintf(stderr, "shadowrt tokenize: reading %s failed\n", file ? file : "stdin");
			srt_tok_text_free(&in);
			srt_tok_free(tok);
			return 1;
		}
	}
	struct srt_tok_ids ids = {0};
	rc = 0;
	if (!lines) {
		rc = srt_tok_encode(tok, in.data ? in.data : "", in.len, flags, &ids, err, sizeof(err));
		if (!rc)
			emit_ids(stdout, &ids, 0, json, false);
	} else {
		size_t pos = 0, lineno = 0;
		while (pos < in.len && !rc) {
			const char *nl = memchr(in.data + pos, '\n', in.len - pos);
			size_t end = nl ? (size_t)(nl - in.data) : in.len;
			ids.n = 0;
			lineno++;
			if (chat) {
				chat_line(tok, in.data + pos, end - pos);
				pos = end + 1;
				continue;
			}
			rc = srt_tok_encode(tok, in.data + pos, end - pos, flags, &ids, err, sizeof(err));
			if (!rc)
				emit_ids(stdout, &ids, 0, json, true);
			else
				fprintf(stderr, "shadowrt tokenize: line %zu: ", lineno);
			pos = end + 1;
		}
	}
	if (rc)
		fprintf(stderr, "shadowrt tokenize: %s\n", err);
	srt_tok_ids_free(&ids);
	srt_tok_text_free(&in);
	srt_tok_free(tok);
	if (fflush(stdout)) {
		fprintf(stderr, "shadowrt tokenize: writing the output failed\n");
		return 1;
	}
	return rc ? 1 : 0;
oom:
	fprintf(stderr, "shadowrt tokenize: out of memory\n");
	srt_tok_text_free(&in);
	srt_tok_free(tok);
	return 1;
}

static void detokenize_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt detokenize [options] [ID...]\n"
		"\n"
		"Decode token ids into text. Ids are separated by spaces or commas (a JSON array such\n"
		"as [1, 2] also parses); without ID arguments, stdin is read.\n"
		"\n"
		"options:\n"
		"  --tokenizer FILE   a tokenizer.json\n"
		"  --model DIR        the tokenizer of a checkpoint directory\n"
		"  --lines            decode each stdin line separately (use with --json)\n"
		"  --skip-special     leave out special tokens\n"
		"  --lossy            replace ill-formed UTF-8 by U+FFFD (always on with --json)\n"
		"  --json             JSON: {\"text\": \"...\"}; with --lines one JSON string per line\n");
}

/* Ids in s[0..n): integers separated by anything that is not a digit or '-'. */
static int parse_ids(const char *s, size_t n, struct srt_tok_ids *ids, char *err, size_t errlen)
{
	size_t i = 0;
	while (i < n) {
		if (!(s[i] >= '0' && s[i] <= '9') && s[i] != '-') {
			if (!strchr(" \t\r\n,[]", s[i]))
				return snprintf(err, errlen, "unexpected '%c' at byte %zu", s[i], i), -1;
			i++;
			continue;
		}
		size_t j = i + (s[i] == '-');
		long long v = 0;
		if (j >= n || s[j] < '0' || s[j] > '9')
			return snprintf(err, errlen, "malformed number at byte %zu", i), -1;
		while (j < n && s[j] >= '0' && s[j] <= '9' && v <= INT32_MAX)
			v = v * 10 + (s[j++] - '0');
		if (v > INT32_MAX)
			return snprintf(err, errlen, "id out of range at byte %zu", i), -1;
		int32_t id = (int32_t)(s[i] == '-' ? -v : v);
		if (srt_tok_ids_push(ids, &id, 1))
			return snprintf(err, errlen, "out of memory"), -1;
		i = j;
	}
	return 0;
}

static void print_json_string(const char *s, size_t n)
{
	json_t *j = json_stringn(s, n);
	char *d = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
	fputs(d ? d : "null", stdout);
	free(d);
	json_decref(j);
}

int srt_cmd_detokenize(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		detokenize_usage(stdout);
		return 0;
	}
	const char *tpath = NULL, *mdir = NULL;
	bool lines = false, json = false;
	unsigned flags = 0;
	int first_id = argc;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool more = i + 1 < argc;
		if (!strcmp(a, "--tokenizer") && more)
			tpath = argv[++i];
		else if (!strcmp(a, "--model") && more)
			mdir = argv[++i];
		else if (!strcmp(a, "--lines"))
			lines = true;
		else if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "--skip-special"))
			flags |= SRT_TOK_SKIP_SPECIAL;
		else if (!strcmp(a, "--lossy"))
			flags |= SRT_TOK_LOSSY;
		else if (a[0] == '-' && a[1] && !(a[1] >= '0' && a[1] <= '9')) {
			fprintf(stderr, "shadowrt detokenize: unknown or incomplete option '%s' (see --help)\n", a);
			return 2;
		} else {
			first_id = i;
			break;
		}
	}
	if (json)
		flags |= SRT_TOK_LOSSY;
	char err[4608];
	struct srt_tok *tok;
	int rc = srt_cli_open_tokenizer(tpath, mdir, &tok, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "shadowrt detokenize: %s\n", err);
		return 1;
	}
	struct srt_tok_text in = {0}, out = {0};
	struct srt_tok_ids ids = {0};
	if (first_id < argc) {
		for (int i = first_id; i < argc; i++)
			if (srt_tok_text_append(&in, argv[i], strlen(argv[i])) ||
			    srt_tok_text_append(&in, " ", 1))
				rc = -1;
	} else if (slurp(stdin, &in)) {
		rc = -1;
	}
	if (rc) {
		fprintf(stderr, "shadowrt detokenize: reading the input failed\n");
		goto out;
	}
	size_t pos = 0, lineno = 0;
	while (pos < in.len || (!lines && !lineno)) {
		const char *nl = lines ? memchr(in.data + pos, '\n', in.len - pos) : NULL;
		size_t end = nl ? (size_t)(nl - in.data) : in.len;
		lineno++;
		ids.n = 0;
		out.len = 0;
		if (parse_ids(in.data ? in.data + pos : "", end - pos, &ids, err, sizeof(err)) ||
		    srt_tok_decode(tok, ids.ids, ids.n, flags, &out, err, sizeof(err))) {
			if (lines)
				fprintf(stderr, "shadowrt detokenize: line %zu: %s\n", lineno, err);
			else
				fprintf(stderr, "shadowrt detokenize: %s\n", err);
			rc = 1;
			goto out;
		}
		if (json && !lines) {
			fputs("{\"text\": ", stdout);
			print_json_string(out.data ? out.data : "", out.len);
			fputs("}\n", stdout);
		} else if (json) {
			print_json_string(out.data ? out.data : "", out.len);
			fputc('\n', stdout);
		} else {
			fwrite(out.data, 1, out.len, stdout);
			if (lines)
				fputc('\n', stdout);
		}
		pos = end + 1;
	}
out:
	srt_tok_ids_free(&ids);
	srt_tok_text_free(&in);
	srt_tok_text_free(&out);
	srt_tok_free(tok);
	if (fflush(stdout))
		rc = 1;
	return rc ? 1 : 0;
}
