/* OpenAI request parsing and response JSON (api.h). */
#include "serve/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/plugin.h>

#include "tok/chat.h"
#include "tok/tok.h"

static int bad(struct srt_api_error *e, unsigned status, const char *code, const char *param,
	       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int bad(struct srt_api_error *e, unsigned status, const char *code, const char *param,
	       const char *fmt, ...)
{
	e->status = status;
	e->type = status >= 500 ? "server_error" : "invalid_request_error";
	e->code = code;
	e->param = NULL;
	if (param) {
		snprintf(e->param_buf, sizeof(e->param_buf), "%s", param);
		e->param = e->param_buf;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -1;
}

json_t *srt_api_error_json(const struct srt_api_error *e)
{
	return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type",
			 e->type ? e->type : "invalid_request_error", "param",
			 e->param ? json_string(e->param) : json_null(), "code",
			 e->code ? json_string(e->code) : json_null());
}

json_t *srt_api_models(const char *name, long long created)
{
	return json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", name,
			 "object", "model", "created", (json_int_t)created, "owned_by", "shadowrt");
}

/* --- fields ------------------------------------------------------------------------------ */

static int get_number(const json_t *v, const char *k, double lo, double hi, double *out,
		      struct srt_api_error *e)
{
	if (!json_is_number(v))
		return bad(e, 400, "invalid_type", k, "'%s' must be a number", k);
	double x = json_number_value(v);
	if (!(x >= lo && x <= hi))
		return bad(e, 400, "invalid_value", k, "'%s' is %g; it must be in [%g, %g]", k, x,
			   lo, hi);
	*out = x;
	return 0;
}

static int get_int(const json_t *v, const char *k, long long lo, long long hi, long long *out,
		   struct srt_api_error *e)
{
	if (!json_is_integer(v))
		return bad(e, 400, "invalid_type", k, "'%s' must be an integer", k);
	long long x = (long long)json_integer_value(v);
	if (x < lo || x > hi)
		return bad(e, 400, "invalid_value", k, "'%s' is %lld; it must be in [%lld, %lld]",
			   k, x, lo, hi);
	*out = x;
	return 0;
}

static int get_bool(const json_t *v, const char *k, int *out, struct srt_api_error *e)
{
	if (!json_is_boolean(v))
		return bad(e, 400, "invalid_type", k, "'%s' must be true or false", k);
	*out = json_is_true(v);
	return 0;
}

static int add_ids(struct srt_api_req *r, const int32_t *ids, size_t n)
{
	int32_t *p = realloc(r->prompt, sizeof(int32_t) * (r->n_prompt + n + 1));
	if (!p)
		return -1;
	r->prompt = p;
	memcpy(p + r->n_prompt, ids, sizeof(int32_t) * n);
	r->n_prompt += n;
	return 0;
}

static int parse_prompt(const struct srt_api_ctx *ctx, const json_t *v, struct srt_api_req *r,
			struct srt_api_error *e)
{
	if (json_is_array(v) && json_array_size(v) == 1 &&
	    (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
		v = json_array_get(v, 0); /* ["text"] or [[ids]] */
	if (json_is_string(v)) {
		if (!ctx->tok)
			return bad(e, 400, "invalid_value", "prompt",
				   "this model has no tokenizer (no tokenizer.json in its "
				   "directory): send 'prompt' as a list of token ids");
		struct srt_tok_ids ids = {0};
		char err[256];
		int32_t bos = srt_tok_bos_id(ctx->tok);
		if (bos >= 0 && srt_tok_ids_push(&ids, &bos, 1))
			return bad(e, 500, "out_of_memory", NULL, "out of memory");
		if (srt_tok_encode(ctx->tok, json_string_value(v), json_string_length(v), 0, &ids,
				   err, sizeof(err))) {
			srt_tok_ids_free(&ids);
			return bad(e, 400, "invalid_value", "prompt", "prompt: %s", err);
		}
		int rc = add_ids(r, ids.ids, ids.n);
		srt_tok_ids_free(&ids);
		if (rc)
			return bad(e, 500, "out_of_memory", NULL, "out of memory");
		if (!r->n_prompt)
			return bad(e, 400, "invalid_value", "prompt", "'prompt' is empty");
		return 0;
	}
	if (!json_is_array(v))
		return bad(e, 400, "invalid_type", "prompt",
			   "'prompt' must be a string, a list of token ids, or a list of one of "
			   "those");
	size_t n = json_array_size(v);
	if (n == 0)
		return bad(e, 400, "invalid_value", "prompt", "'prompt' is empty");
	for (size_t i = 0; i < n; i++) {
		const json_t *x = json_array_get(v, i);
		if (json_is_string(x) || json_is_array(x))
			return bad(e, 400, "invalid_value", "prompt",
				   "only one prompt per request is supported (got a list of %zu)",
				   n);
		if (!json_is_integer(x))
			return bad(e, 400, "invalid_type", "prompt",
				   "prompt[%zu] must be an integer token id", i);
		json_int_t t = json_integer_value(x);
		if (t < 0 || t >= ctx->vocab)
			return bad(e, 400, "invalid_value", "prompt",
				   "prompt[%zu] = %lld is outside the vocabulary [0, %d)", i,
				   (long long)t, ctx->vocab);
	}
	r->prompt = malloc(sizeof(int32_t) * n);
	if (!r->prompt)
		return bad(e, 500, "out_of_memory", NULL, "out of memory");
	for (size_t i = 0; i < n; i++)
		r->prompt[i] = (int32_t)json_integer_value(json_array_get(v, i));
	r->n_prompt = n;
	return 0;
}

static int parse_chat(const struct srt_api_ctx *ctx, const json_t *root, struct srt_api_req *r,
		      struct srt_api_error *e)
{
	const json_t *m = json_object_get(root, "messages");
	if (!m)
		return bad(e, 400, "missing_required_parameter", "messages",
			   "'messages' is required");
	if (!json_is_array(m) || json_array_size(m) == 0)
		return bad(e, 400, "invalid_type", "messages",
			   "'messages' must be a non-empty list of messages");
	if (!ctx->tok)
		return bad(e, 400, "invalid_value", "messages",
			   "this model has no tokenizer (no tokenizer.json in its directory): use "
			   "/v1/completions with token ids");
	struct srt_tok_chat chat = {0};
	struct srt_tok_ids ids = {0};
	char err[512];
	if (srt_tok_chat_render(root, &chat, err, sizeof(err)) ||
	    srt_tok_chat_encode(ctx->tok, &chat, &ids, err, sizeof(err))) {
		srt_tok_chat_free(&chat);
		srt_tok_ids_free(&ids);
		return bad(e, 400, "invalid_value", "messages", "%s", err);
	}
	srt_tok_chat_free(&chat);
	int rc = add_ids(r, ids.ids, ids.n);
	srt_tok_ids_free(&ids);
	if (rc)
		return bad(e, 500, "out_of_memory", NULL, "out of memory");
	return 0;
}

static int parse_stop(const json_t *v, struct srt_api_req *r, struct srt_api_error *e)
{
	if (json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		if (!(r->stop_store[0] = strdup(json_string_value(v))))
			return bad(e, 500, "out_of_memory", NULL, "out of memory");
		r->params.n_stop = 1;
	} else if (json_is_array(v)) {
		size_t n = json_array_size(v);
		if (n > 4)
			return bad(e, 400, "invalid_value", "stop", "at most 4 stop sequences");
		for (size_t i = 0; i < n; i++) {
			const json_t *x = json_array_get(v, i);
			if (!json_is_string(x))
				return bad(e, 400, "invalid_type", "stop",
					   "stop[%zu] must be a string", i);
			if (!(r->stop_store[i] = strdup(json_string_value(x))))
				return bad(e, 500, "out_of_memory", NULL, "out of memory");
			r->params.n_stop = (int)i + 1;
		}
	} else {
		return bad(e, 400, "invalid_type", "stop",
			   "'stop' must be a string or a list of strings");
	}
	for (int i = 0; i < r->params.n_stop; i++) {
		size_t l = strlen(r->stop_store[i]);
		if (l == 0 || l > 256)
			return bad(e, 400, "invalid_value", "stop",
				   "stop sequences must be 1 to 256 bytes");
		r->params.stop[i] = r->stop_store[i];
	}
	return 0;
}

/* fields the chat encoding reads (validated there) */
static int chat_field(const char *k)
{
	static const char *const f[] = {"messages", "tools", "tool_choice", "reasoning_effort",
					"thinking", "response_format", "parallel_tool_calls"};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (!strcmp(k, f[i]))
			return 1;
	return 0;
}

int srt_api_parse(const struct srt_api_ctx *ctx, int chat, const char *body, size_t len,
		  struct srt_api_req *r, struct srt_api_error *e)
{
	memset(r, 0, sizeof(*r));
	r->chat = chat;
	r->params.temperature = 1.0f;
	r->params.top_p = 1.0f;
	r->params.max_tokens = ctx->default_max_tokens;
	json_error_t je;
	json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return bad(e, 400, "invalid_json", NULL,
			   "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
			   je.column);
	int rc = -1;
	if (!json_is_object(root)) {
		bad(e, 400, "invalid_json", NULL, "the body must be a JSON object");
		goto out;
	}
	const char *k;
	json_t *v;
	int have_prompt = 0;
	json_object_foreach(root, k, v) {
		double d = 0; /* set by get_number before use; GCC -O3 cannot see it */
		long long i = 0;
		if (!strcmp(k, "model")) {
			if (!json_is_string(v)) {
				bad(e, 400, "invalid_type", "model", "'model' must be a string");
				goto out;
			}
			if (strcmp(json_string_value(v), ctx->model_name)) {
				bad(e, 404, "model_not_found", "model",
				    "the model '%.200s' does not exist; this server serves '%.200s'",
				    json_string_value(v), ctx->model_name);
				goto out;
			}
		} else if (!chat && !strcmp(k, "prompt")) {
			have_prompt = 1;
			if (parse_prompt(ctx, v, r, e))
				goto out;
		} else if (chat && chat_field(k)) {
			/* rendered below */
		} else if (json_is_null(v)) {
			/* an optional field left at its default (OpenAI clients send null) */
			if (strcmp(k, "max_tokens") && strcmp(k, "max_completion_tokens") &&
			    strcmp(k, "temperature") && strcmp(k, "top_p") && strcmp(k, "top_k") &&
			    strcmp(k, "seed") && strcmp(k, "stop") && strcmp(k, "stream") &&
			    strcmp(k, "stream_options") && strcmp(k, "user") && strcmp(k, "n") &&
			    strcmp(k, "logprobs") && strcmp(k, "top_logprobs") && strcmp(k, "echo") &&
			    strcmp(k, "suffix") && strcmp(k, "logit_bias") &&
			    strcmp(k, "presence_penalty") && strcmp(k, "frequency_penalty") &&
			    strcmp(k, "best_of") && strcmp(k, "ignore_eos")) {
				bad(e, 400, "unknown_parameter", NULL,
				    "Unrecognized request argument supplied: %.200s", k);
				goto out;
			}
		} else if (!strcmp(k, "max_tokens") || (chat && !strcmp(k, "max_completion_tokens"))) {
			if (get_int(v, "max_tokens", 1, 1 << 30, &i, e))
				goto out;
			r->params.max_tokens = (uint32_t)i;
		} else if (!strcmp(k, "temperature")) {
			if (get_number(v, "temperature", 0, 2, &d, e))
				goto out;
			r->params.temperature = (float)d;
		} else if (!strcmp(k, "top_p")) {
			if (get_number(v, "top_p", 0, 1, &d, e))
				goto out;
			if (d == 0) {
				bad(e, 400, "invalid_value", "top_p", "'top_p' must be above 0");
				goto out;
			}
			r->params.top_p = (float)d;
		} else if (!strcmp(k, "top_k")) {
			if (get_int(v, "top_k", -1, 1 << 30, &i, e))
				goto out;
			r->params.top_k = (int32_t)(i < 0 ? 0 : i);
		} else if (!strcmp(k, "seed")) {
			if (!json_is_integer(v)) {
				bad(e, 400, "invalid_type", "seed", "'seed' must be an integer");
				goto out;
			}
			r->params.seed = (uint64_t)json_integer_value(v);
			r->has_seed = 1;
		} else if (!strcmp(k, "stop")) {
			if (parse_stop(v, r, e))
				goto out;
		} else if (!strcmp(k, "stream")) {
			if (get_bool(v, "stream", &r->stream, e))
				goto out;
		} else if (!strcmp(k, "stream_options")) {
			if (!json_is_object(v)) {
				bad(e, 400, "invalid_type", "stream_options",
				    "'stream_options' must be an object");
				goto out;
			}
			const char *k2;
			json_t *v2;
			json_object_foreach(v, k2, v2) {
				if (strcmp(k2, "include_usage")) {
					bad(e, 400, "unknown_parameter", "stream_options",
					    "Unrecognized stream option: %.200s", k2);
					goto out;
				}
				if (get_bool(v2, "stream_options.include_usage", &r->include_usage,
					     e))
					goto out;
			}
		} else if (!strcmp(k, "ignore_eos")) {
			if (get_bool(v, "ignore_eos", &r->params.ignore_eos, e))
				goto out;
		} else if (!strcmp(k, "user")) {
			if (!json_is_string(v)) {
				bad(e, 400, "invalid_type", "user", "'user' must be a string");
				goto out;
			}
		} else if (!strcmp(k, "n") || !strcmp(k, "best_of")) {
			if (get_int(v, k, 1, 1, &i, e)) {
				snprintf(e->message, sizeof(e->message),
					 "'%s' must be 1 (one choice per request)", k);
				goto out;
			}
		} else if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
			if (get_number(v, k, 0, 0, &d, e)) {
				snprintf(e->message, sizeof(e->message),
					 "'%s' is not supported (only 0)", k);
				goto out;
			}
		} else if (!strcmp(k, "logprobs") || !strcmp(k, "echo")) {
			if (!json_is_false(v)) {
				bad(e, 400, "invalid_value", NULL, "'%s' is not supported", k);
				goto out;
			}
		} else if (!strcmp(k, "logit_bias")) {
			if (!json_is_object(v) || json_object_size(v)) {
				bad(e, 400, "invalid_value", "logit_bias",
				    "'logit_bias' is not supported");
				goto out;
			}
		} else {
			bad(e, 400, "unknown_parameter", NULL,
			    "Unrecognized request argument supplied: %.200s", k);
			goto out;
		}
	}
	if (chat) {
		if (parse_chat(ctx, root, r, e))
			goto out;
	} else if (!have_prompt) {
		bad(e, 400, "missing_required_parameter", "prompt", "'prompt' is required");
		goto out;
	}
	if (r->params.temperature == 0.0f)
		r->params.top_k = 0;
	rc = 0;
out:
	json_decref(root);
	return rc;
}

void srt_api_req_free(struct srt_api_req *r)
{
	free(r->prompt);
	for (int i = 0; i < SRT_SCHED_MAX_STOP; i++)
		free(r->stop_store[i]);
	memset(r, 0, sizeof(*r));
}

/* --- responses ---------------------------------------------------------------------------- */

static json_t *ids_json(const int32_t *ids, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n && a; i++)
		json_array_append_new(a, json_integer(ids[i]));
	return a;
}

static json_t *text_json(const char *s, size_t n)
{
	json_t *t = json_stringn(s ? s : "", s ? n : 0);
	if (!t) { /* not UTF-8: never expected from the stream decoder; replace */
		struct srt_tok_text lossy = {0};
		if (!srt_tok_utf8_lossy(s, n, &lossy))
			t = json_stringn(lossy.data ? lossy.data : "", lossy.len);
		srt_tok_text_free(&lossy);
	}
	return t ? t : json_string("");
}

static json_t *usage_json(const struct srt_sched_info *in)
{
	return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)in->prompt_tokens,
			 "completion_tokens", (json_int_t)in->generated, "total_tokens",
			 (json_int_t)(in->prompt_tokens + in->generated), "prompt_tokens_details",
			 "cached_tokens", (json_int_t)in->cached_tokens);
}

static json_t *envelope(const struct srt_api_out *o, const char *object)
{
	return json_pack("{s:s,s:s,s:I,s:s}", "id", o->id, "object", object, "created",
			 (json_int_t)o->created, "model", o->model);
}

json_t *srt_api_chunk(const struct srt_api_out *o)
{
	json_t *j = envelope(o, o->chat ? "chat.completion.chunk" : "text_completion");
	if (!j)
		return NULL;
	if (o->usage) {
		json_object_set_new(j, "choices", json_array());
		json_object_set_new(j, "usage", usage_json(o->usage));
		return j;
	}
	json_t *c = json_pack("{s:i,s:o,s:o}", "index", 0, "logprobs", json_null(), "finish_reason",
			      o->finish ? json_string(o->finish) : json_null());
	if (o->chat) {
		json_t *delta = json_object();
		if (o->role_chunk) {
			json_object_set_new(delta, "role", json_string("assistant"));
			json_object_set_new(delta, "content", json_string(""));
		} else if (!o->finish) {
			json_object_set_new(delta, "content", text_json(o->text, o->text_len));
		}
		json_object_set_new(c, "delta", delta);
	} else {
		json_object_set_new(c, "text", text_json(o->text, o->text_len));
	}
	json_object_set_new(c, "token_ids", ids_json(o->ids, o->n_ids));
	json_object_set_new(j, "choices", json_pack("[o]", c));
	json_object_set_new(j, "usage", json_null());
	return j;
}

json_t *srt_api_full(const struct srt_api_out *o)
{
	json_t *j = envelope(o, o->chat ? "chat.completion" : "text_completion");
	if (!j)
		return NULL;
	json_t *c = json_pack("{s:i,s:o,s:o}", "index", 0, "logprobs", json_null(), "finish_reason",
			      o->finish ? json_string(o->finish) : json_null());
	if (o->chat)
		json_object_set_new(c, "message",
				    json_pack("{s:s,s:o}", "role", "assistant", "content",
					      text_json(o->text, o->text_len)));
	else
		json_object_set_new(c, "text", text_json(o->text, o->text_len));
	json_object_set_new(c, "token_ids", ids_json(o->ids, o->n_ids));
	json_object_set_new(j, "choices", json_pack("[o]", c));
	if (o->usage)
		json_object_set_new(j, "usage", usage_json(o->usage));
	return j;
}

/* --- detokenizer ----------------------------------------------------------------------------- */

static void *detok_open(void *ctx)
{
	struct srt_tok_stream *st = malloc(sizeof(*st));
	if (st)
		srt_tok_stream_init(st, ctx, SRT_TOK_SKIP_SPECIAL);
	return st;
}

static int detok_feed(void *state, int32_t id, char **buf, size_t *len, size_t *cap)
{
	struct srt_tok_text t = {.data = *buf, .len = *len, .cap = *cap};
	int rc = srt_tok_stream_push(state, id, &t, NULL, 0);
	*buf = t.data;
	*len = t.len;
	*cap = t.cap;
	return rc == SRT_ENOMEM ? -1 : 0; /* an unknown id decodes to nothing */
}

static void detok_close(void *state)
{
	free(state);
}

void srt_api_detok(const struct srt_tok *tok, struct srt_sched_detok *out)
{
	out->ctx = (void *)tok;
	out->open = detok_open;
	out->feed = detok_feed;
	out->close = detok_close;
}
