/*
 * DeepSeek-V4 chat encoding (see chat.h). The fixed texts below (reasoning-effort preambles,
 * the tool-use instructions, the response-format lines) are the model's prompt protocol: the
 * model was trained on them, so they must match DeepSeek's reference byte for byte
 * (tests/tok/chat_oracle.py checks every one against deepseek-recipe).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/plugin.h>

#include "tok/chat.h"
#include "tok/tok_int.h"

#define SP_BOS "<｜begin▁of▁sentence｜>"
#define SP_EOS "<｜end▁of▁sentence｜>"
#define SP_USER "<｜User｜>"
#define SP_ASSISTANT "<｜Assistant｜>"
#define SP_REMINDER "<｜latest_reminder｜>"
#define SP_THINK "<think>"
#define SP_THINK_END "</think>"
#define SP_DSML "｜DSML｜"

static const char effort_high[] =
	"Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
	"You MUST be very thorough in your thinking and comprehensively decompose the problem to "
	"resolve the root cause, rigorously stress-testing your logic against all potential paths, "
	"edge cases, and adversarial scenarios.\n"
	"Explicitly write out your entire deliberation process, documenting every intermediate "
	"step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is "
	"left unchecked.\n\n";

static const char effort_max[] =
	"Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
	"You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
	"exhaustively decompose the problem into its most fundamental components, trace every causal "
	"chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
	"Do not stop reasoning until you have independently verified the solution from multiple "
	"angles and are certain that no assumption remains unchecked and no error remains "
	"undiscovered.\n\n";

/* In the scaffold texts, SP_DSML, SP_THINK and SP_THINK_END are special tokens. */
static const char tools_head[] =
	"\n\n## Tools\n\nYou have access to a set of tools to help answer the user's question. You "
	"can invoke tools by writing a \"<" SP_DSML "tool_calls>\" block like the following:\n\n"
	"<" SP_DSML "tool_calls>\n"
	"<" SP_DSML "invoke name=\"$TOOL_NAME\">\n"
	"<" SP_DSML "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" SP_DSML
	"parameter>\n...\n"
	"</" SP_DSML "invoke>\n"
	"<" SP_DSML "invoke name=\"$TOOL_NAME2\">\n...\n"
	"</" SP_DSML "invoke>\n"
	"</" SP_DSML "tool_calls>\n\n"
	"String parameters should be specified as is and set `string=\"true\"`. For all other types "
	"(numbers, booleans, arrays, objects), pass the value in JSON format and set "
	"`string=\"false\"`.\n\n"
	"If thinking_mode is enabled (triggered by " SP_THINK "), you MUST output your complete "
	"reasoning inside " SP_THINK "..." SP_THINK_END " BEFORE any tool calls or final response.\n\n"
	"Otherwise, output directly after " SP_THINK_END " with tool calls or final response.\n\n"
	"### Available Tool Schemas\n\n";
static const char tools_tail[] =
	"\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
	"tool calls.\n";
static const char fmt_json_object[] =
	"\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\n"
	"Reply with JSON object ONLY.";
static const char fmt_json_schema[] =
	"\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

struct cx {
	struct srt_tok_chat *out;
	char *err;
	size_t errlen;
};

static int oom(struct cx *c)
{
	return tk_errf(c->err, c->errlen, SRT_ENOMEM, "out of memory");
}

static int txt(struct cx *c, const char *s, size_t n)
{
	return srt_tok_text_append(&c->out->text, s, n) ? oom(c) : 0;
}

static int txts(struct cx *c, const char *s)
{
	return txt(c, s, strlen(s));
}

static int sp(struct cx *c, const char *s)
{
	struct srt_tok_chat *o = c->out;
	if (o->n_spans == o->cap_spans) {
		size_t cap = o->cap_spans ? 2 * o->cap_spans : 32;
		size_t *p = realloc(o->spans, 2 * cap * sizeof(*p));
		if (!p)
			return oom(c);
		o->spans = p;
		o->cap_spans = cap;
	}
	size_t start = o->text.len;
	int rc = txts(c, s);
	if (rc)
		return rc;
	o->spans[2 * o->n_spans] = start;
	o->spans[2 * o->n_spans + 1] = o->text.len;
	o->n_spans++;
	return 0;
}

/* A scaffold text: its special spellings become special tokens. */
static int scaffold(struct cx *c, const char *s)
{
	static const char *const sps[] = {SP_DSML, SP_THINK_END, SP_THINK};
	while (*s) {
		const char *best = NULL, *which = NULL;
		for (size_t k = 0; k < 3; k++) {
			const char *p = strstr(s, sps[k]);
			if (p && (!best || p < best))
				best = p, which = sps[k];
		}
		if (!best)
			return txts(c, s);
		int rc = txt(c, s, (size_t)(best - s));
		if (!rc)
			rc = sp(c, which);
		if (rc)
			return rc;
		s = best + strlen(which);
	}
	return 0;
}

/* ---- JSON as the reference writes it ------------------------------------------------------ */

/* Shortest round-trip decimal digits of |v| (> 0) and the exponent of its first digit. */
static void shortest(double v, char *digits, int *exp10)
{
	char buf[40];
	for (int p = 1; p <= 17; p++) {
		snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	/* buf: d[.ddd]e[+-]xx */
	size_t o = 0;
	const char *q = buf;
	for (; *q && *q != 'e'; q++)
		if (*q != '.')
			digits[o++] = *q;
	while (o > 1 && digits[o - 1] == '0')
		o--;
	digits[o] = 0;
	*exp10 = atoi(q + 1);
}

static int real_fmt(double v, struct srt_tok_text *out)
{
	char s[64], d[24];
	size_t o = 0;
	if (!isfinite(v))
		return SRT_EINVAL;
	if (signbit(v))
		s[o++] = '-';
	v = fabs(v);
	if (v == 0) {
		memcpy(s + o, "0.0", 4);
		return srt_tok_text_append(out, s, strlen(s));
	}
	int e;
	shortest(v, d, &e);
	int n = (int)strlen(d), kk = e + 1;
	if (kk >= n && kk <= 16) {
		o += (size_t)snprintf(s + o, sizeof(s) - o, "%s%.*s.0", d, kk - n, "0000000000000000");
	} else if (kk > 0 && kk <= 16) {
		o += (size_t)snprintf(s + o, sizeof(s) - o, "%.*s.%s", kk, d, d + kk);
	} else if (kk > -5 && kk <= 0) {
		o += (size_t)snprintf(s + o, sizeof(s) - o, "0.%.*s%s", -kk, "00000", d);
	} else if (n == 1) {
		o += (size_t)snprintf(s + o, sizeof(s) - o, "%se%s%d", d, kk - 1 > 0 ? "+" : "", kk - 1);
	} else {
		o += (size_t)snprintf(s + o, sizeof(s) - o, "%c.%se%s%d", d[0], d + 1, kk - 1 > 0 ? "+" : "",
				      kk - 1);
	}
	return srt_tok_text_append(out, s, o);
}

static int json_str(const char *s, size_t n, struct srt_tok_text *out)
{
	int rc = srt_tok_text_append(out, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		unsigned char ch = (unsigned char)s[i];
		const char *esc = NULL;
		char u[8];
		if (ch == '"')
			esc = "\\\"";
		else if (ch == '\\')
			esc = "\\\\";
		else if (ch == '\n')
			esc = "\\n";
		else if (ch == '\r')
			esc = "\\r";
		else if (ch == '\t')
			esc = "\\t";
		else if (ch == '\b')
			esc = "\\b";
		else if (ch == '\f')
			esc = "\\f";
		else if (ch < 0x20) {
			snprintf(u, sizeof(u), "\\u%04x", ch);
			esc = u;
		}
		if (!esc)
			continue;
		rc = srt_tok_text_append(out, s + run, i - run);
		if (!rc)
			rc = srt_tok_text_append(out, esc, strlen(esc));
		run = i + 1;
	}
	if (!rc)
		rc = srt_tok_text_append(out, s + run, n - run);
	return rc ? rc : srt_tok_text_append(out, "\"", 1);
}

int srt_tok_chat_json(const json_t *v, struct srt_tok_text *out)
{
	int rc = 0;
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		const char *k;
		json_t *x;
		bool first = true;
		rc = srt_tok_text_append(out, "{", 1);
		json_object_foreach((json_t *)v, k, x)
		{
			if (!rc && !first)
				rc = srt_tok_text_append(out, ", ", 2);
			if (!rc)
				rc = json_str(k, strlen(k), out);
			if (!rc)
				rc = srt_tok_text_append(out, ": ", 2);
			if (!rc)
				rc = srt_tok_chat_json(x, out);
			first = false;
		}
		return rc ? rc : srt_tok_text_append(out, "}", 1);
	}
	case JSON_ARRAY:
		rc = srt_tok_text_append(out, "[", 1);
		for (size_t i = 0; i < json_array_size(v) && !rc; i++) {
			if (i)
				rc = srt_tok_text_append(out, ", ", 2);
			if (!rc)
				rc = srt_tok_chat_json(json_array_get(v, i), out);
		}
		return rc ? rc : srt_tok_text_append(out, "]", 1);
	case JSON_STRING:
		return json_str(json_string_value(v), json_string_length(v), out);
	case JSON_INTEGER: {
		char b[32];
		int n = snprintf(b, sizeof(b), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return srt_tok_text_append(out, b, (size_t)n);
	}
	case JSON_REAL:
		return real_fmt(json_real_value(v), out);
	case JSON_TRUE:
		return srt_tok_text_append(out, "true", 4);
	case JSON_FALSE:
		return srt_tok_text_append(out, "false", 5);
	case JSON_NULL:
	default:
		return srt_tok_text_append(out, "null", 4);
	}
}

static int jtxt(struct cx *c, const json_t *v)
{
	int rc = srt_tok_chat_json(v, &c->out->text);
	if (rc == SRT_ENOMEM)
		return oom(c);
	if (rc)
		return tk_errf(c->err, c->errlen, rc, "a number in the request is not finite");
	return 0;
}

/* ---- request parsing ------------------------------------------------------------------------ */

enum role { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL, R_REMINDER };

struct msg {
	enum role role;
	json_t *j;
	struct srt_tok_text content; /* text parts joined */
	bool has_content;
	const char *reasoning;       /* NULL: absent */
	json_t *tool_calls;          /* non-empty array or NULL */
	const char *tool_call_id;
	bool prefix;
	int call_order;              /* tool: rank of its call id in the answered assistant message */
	size_t *by_id;               /* assistant: tool_calls indices sorted by id (render order) */
};

/* Content: a string, or an array of {"type": "text", "text": ...} joined by blank lines. */
static int get_content(struct cx *c, json_t *m, size_t i, struct msg *out)
{
	json_t *v = json_object_get(m, "content");
	if (!v || json_is_null(v))
		return 0;
	out->has_content = true;
	if (json_is_string(v))
		return srt_tok_text_append(&out->content, json_string_value(v), json_string_length(v)) ? oom(c) : 0;
	if (!json_is_array(v))
		return tk_errf(c->err, c->errlen, SRT_EINVAL,
			       "messages[%zu].content: expected a string or an array of text parts", i);
	for (size_t k = 0; k < json_array_size(v); k++) {
		json_t *p = json_array_get(v, k);
		const char *type = json_string_value(json_object_get(p, "type"));
		json_t *t = json_object_get(p, "text");
		if (!type || strcmp(type, "text") || !json_is_string(t))
			return tk_errf(c->err, c->errlen, SRT_EINVAL,
				       "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": "
				       "\"...\"} parts are supported",
				       i, k);
		if ((k && srt_tok_text_append(&out->content, "\n\n", 2)) ||
		    srt_tok_text_append(&out->content, json_string_value(t), json_string_length(t)))
			return oom(c);
	}
	return srt_tok_text_append(&out->content, "", 0) ? oom(c) : 0;
}

static int parse_role(struct cx *c, json_t *m, size_t i, enum role *r)
{
	const char *s = json_string_value(json_object_get(m, "role"));
	static const char *const names[] = {"system", "user", "assistant", "tool", "latest_reminder"};
	for (int k = 0; s && k < 5; k++)
		if (!strcmp(s, names[k])) {
			*r = (enum role)k;
			return 0;
		}
	return tk_errf(c->err, c->errlen, SRT_EINVAL,
		       "messages[%zu].role: %s%s%s is not one of system, user, assistant, tool, "
		       "latest_reminder",
		       i, s ? "'" : "", s ? s : "missing", s ? "'" : "");
}

struct req {
	struct msg *m;
	size_t n;
	bool thinking;
	const char *effort_text;
	json_t *tools;       /* non-empty array or NULL */
	bool tools_active;   /* rendered: tools given and tool_choice != "none" */
	bool force_call;     /* tool_choice "required" or a named function */
	const char *only;    /* tool_choice names this function: only it is rendered */
	int fmt;             /* 0 text, 1 json_object, 2 json_schema */
	json_t *schema;
};

static void req_free(struct req *r)
{
	for (size_t i = 0; i < r->n; i++) {
		srt_tok_text_free(&r->m[i].content);
		free(r->m[i].by_id);
	}
	free(r->m);
}

static bool contains_json_word(const struct req *r)
{
	for (size_t i = 0; i < r->n; i++) {
		const char *s = r->m[i].content.data;
		for (size_t k = 0; s && k + 4 <= r->m[i].content.len; k++)
			if (tolower((unsigned char)s[k]) == 'j' && !strncasecmp(s + k, "json", 4))
				return true;
	}
	return false;
}

static int parse_options(struct cx *c, const json_t *q, struct req *r)
{
	json_t *th = json_object_get(q, "thinking");
	json_t *ef = json_object_get(q, "reasoning_effort");
	const char *e = NULL;
	if (ef && !json_is_null(ef)) {
		e = json_string_value(ef);
		static const char *const ok[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
		bool known = false;
		for (size_t k = 0; e && k < 7; k++)
			known = known || !strcmp(e, ok[k]);
		if (!known)
			return tk_errf(c->err, c->errlen, SRT_EINVAL,
				       "reasoning_effort: expected none, minimal, low, medium, high, xhigh or max");
	}
	/* thinking unless disabled; reasoning_effort "none" disables it when "thinking" is absent */
	r->thinking = !(e && !strcmp(e, "none"));
	if (th && !json_is_null(th)) {
		const char *t = json_string_value(json_object_get(th, "type"));
		if (!t || (strcmp(t, "enabled") && strcmp(t, "disabled")))
			return tk_errf(c->err, c->errlen, SRT_EINVAL,
				       "thinking: expected {\"type\": \"enabled\"} or {\"type\": \"disabled\"}");
		r->thinking = !strcmp(t, "enabled");
	}
	/* the preamble: none for low (and minimal), the "max" text for max, else the "high" one */
	r->effort_text = effort_high;
	if (e && (!strcmp(e, "low") || !strcmp(e, "minimal")))
		r->effort_text = "";
	else if (e && !strcmp(e, "max"))
		r->effort_text = effort_max;
	json_t *tools = json_object_get(q, "tools");
	if (tools && !json_is_null(tools)) {
		if (!json_is_array(tools))
			return tk_errf(c->err, c->errlen, SRT_EINVAL, "tools: expected an array");
		for (size_t i = 0; i < json_array_size(tools); i++) {
			json_t *t = json_array_get(tools, i), *f = json_object_get(t, "function");
			const char *type = json_string_value(json_object_get(t, "type"));
			if (!type || strcmp(type, "function") || !json_is_object(f) ||
			    !json_is_string(json_object_get(f, "name")))
				return tk_errf(c->err, c->errlen, SRT_EINVAL,
					       "tools[%zu]: expected {\"type\": \"function\", \"function\": "
					       "{\"name\": ...}}",
					       i);
			json_t *d = json_object_get(f, "description");
			if (d && !json_is_null(d) && !json_is_string(d))
				return tk_errf(c->err, c->errlen, SRT_EINVAL,
					       "tools[%zu].function.description: expected a string", i);
			json_t *p = json_object_get(f, "parameters");
			if (p && !json_is_null(p)) {
				const char *pt = json_string_value(json_object_get(p, "type"));
				if (!json_is_object(p) || !pt || strcmp(pt, "object"))
					return tk_errf(c->err, c->errlen, SRT_EINVAL,
						       "tools[%zu].function.parameters: expected a JSON Schema "
						       "with \"type\": \"object\"",
						       i);
			}
			if (json_is_true(json_object_get(f, "strict")))
				return tk_errf(c->err, c->errlen, SRT_EINVAL,
					       "tools[%zu].function.strict: true is not supported (the "
					       "reference rewrites strict schemas)",
					       i);
		}
		if (json_array_size(tools))
			r->tools = tools;
	}
	json_t *ch = json_object_get(q, "tool_choice");
	bool none = false;
	if (ch && !json_is_null(ch)) {
		const char *s = json_string_value(ch);
		if (s && !strcmp(s, "none"))
			none = true;
		else if (s && !strcmp(s, "required"))
			r->force_call = true;
		else if (s && !strcmp(s, "auto"))
			;
		else if (json_is_object(ch) &&
			 json_is_string(json_object_get(json_object_get(ch, "function"), "name"))) {
			r->force_call = true;
			r->only = json_string_value(json_object_get(json_object_get(ch, "function"), "name"));
			bool found = false;
			for (size_t k = 0; r->tools && k < json_array_size(r->tools); k++)
				found = found || !strcmp(r->only, json_string_value(json_object_get(
					json_object_get(json_array_get(r->tools, k), "function"), "name")));
			if (!found)
				return tk_errf(c->err, c->errlen, SRT_EINVAL,
					       "tool_choice.function.name: '%s' is not one of the tools", r->only);
		}
		else
			return tk_errf(c->err, c->errlen, SRT_EINVAL,
				       "tool_choice: expected \"auto\", \"none\", \"required\" or "
				       "{\"type\": \"function\", \"function\": {\"name\": ...}}");
	}
	r->tools_active = r->tools && !none;
	r->force_call = r->force_call && r->tools_active;
	if (r->force_call && r->thinking)
		return tk_errf(c->err, c->errlen, SRT_EINVAL,
			       "tool_choice: \"required\" or a named function is not supported in thinking "
			       "mode (as the reference refuses it)");
	json_t *rf = json_object_get(q, "response_format");
	if (rf && !json_is_null(rf)) {
		const char *t = json_string_value(json_object_get(rf, "type"));
		if (t && !strcmp(t, "text"))
			r->fmt = 0;
		else if (t && !strcmp(t, "json_object"))
			r->fmt = 1;
		else if (t && !strcmp(t, "json_schema")) {
			r->schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
			if (!json_is_object(r->schema))
				return tk_errf(c->err, c->errlen, SRT_EINVAL,
					       "response_format.json_schema.schema: expected an object");
			r->fmt = 2;
		} else
			return tk_errf(c->err, c->errlen, SRT_EINVAL,
				       "response_format.type: expected text, json_object or json_schema");
	}
	return 0;
}

static int parse_messages(struct cx *c, const json_t *q, struct req *r)
{
	json_t *ms = json_object_get(q, "messages");
	if (!json_is_array(ms))
		return tk_errf(c->err, c->errlen, SRT_EINVAL, "messages: expected an array");
	size_t n = json_array_size(ms);
	if (n > SRT_TOK_CHAT_MAX_MESSAGES)
		return tk_errf(c->err, c->errlen, SRT_EINVAL, "messages: %zu is over the limit of %d", n,
			       SRT_TOK_CHAT_MAX_MESSAGES);
	r->m = calloc(n ? n : 1, sizeof(*r->m));
	if (!r->m)
		return oom(c);
	r->n = n;
	json_t *pending = NULL; /* tool_calls of the assistant message being answered */
	const struct msg *pending_msg = NULL;
	bool any_calls = false;
	size_t pending_at = 0, answered = 0;
	int rc;
	for (size_t i = 0; i < n; i++) {
		json_t *j = json_array_get(ms, i);
		struct msg *m = &r->m[i];
		m->j = j;
		if (!json_is_object(j))
			return tk_errf(c->err, c->errlen, SRT_EINVAL, "messages[%zu]: expected an object", i);
		if ((rc = parse_role(c, j, i, &m->role)) || (rc = get_content(c, j, i, m)))
			return rc;
		if (m->role != R_TOOL && pending && answered < json_array_size(pending))
			return tk_errf(c->err, c->errlen, SRT_EINVAL,
				       "messages[%zu]: the tool calls of messages[%zu] are not all answered "
				       "by tool messages before it",
				       i, pending_at);
		if (m->role != R_TOOL)
			pending = NULL;
		m->prefix = json_is_true(json_object_get(j, "prefix"));
		if (m->prefix && (m->role != R_ASSISTANT || i + 1 != n))
			return tk_errf(c->err, c->errlen, SRT_EINVAL,
				       "messages[%zu].prefix: only the last message, an assistant one, may "
				       "be a prefix to continue",
				       i);
		if (m->prefix && (r->tools || r->fmt == 1 || any_calls))
			return tk_errf(c->err, c->errlen, SRT_EINVAL,
				       "messages[%zu].prefix: not allowed together with %s", i,
				       r->fmt == 1 ? "response_format json_object" : "tools or tool calls");
		if (m->role == R_ASSISTANT) {
			json_t *rc_ = json_object_get(j, "reasoning_content");
			if (json_is_string(rc_))
				m->reasoning = json_string_value(rc_);
			json_t *tc = json_object_get(j, "tool_calls");
			if (tc && !json_is_null(tc)) {
				if (!json_is_array(tc))
					return tk_errf(c->err, c->errlen, SRT_EINVAL,
						       "messages[%zu].tool_calls: expected an array", i);
				for (size_t k = 0; k < json_array_size(tc); k++) {
					json_t *f = json_object_get(json_array_get(tc, k), "function");
					if (!json_is_string(json_object_get(f, "name")) ||
					    !json_is_string(json_object_get(f, "arguments")))
						return tk_errf(c->err, c->errlen, SRT_EINVAL,
							       "messages[%zu].tool_calls[%zu].function: expected "
							       "\"name\" and \"arguments\" strings",
							       i, k);
				}
				size_t nc = json_array_size(tc);
				if (nc) {
					/* the reference renders calls (and orders their results) by id */
					m->by_id = malloc(nc * sizeof(*m->by_id));
					if (!m->by_id)
						return oom(c);
					for (size_t k = 0; k < nc; k++) {
						const char *id = json_string_value(
							json_object_get(json_array_get(tc, k), "id"));
						if (!id)
							return tk_errf(c->err, c->errlen, SRT_EINVAL,
								       "messages[%zu].tool_calls[%zu].id: missing", i, k);
						size_t b = k;
						for (; b > 0; b--) {
							const char *o = json_string_value(json_object_get(
								json_array_get(tc, m->by_id[b - 1]), "id"));
							int cmp = strcmp(o, id);
							if (!cmp)
								return tk_errf(c->err, c->errlen, SRT_EINVAL,
									       "messages[%zu].tool_calls[%zu].id: '%s' "
									       "repeats",
									       i, k, id);
							if (cmp < 0)
								break;
							m->by_id[b] = m->by_id[b - 1];
						}
						m->by_id[b] = k;
					}
					m->tool_calls = tc;
					any_calls = true;
					pending_msg = m;
					pending = tc;
					pending_at = i;
					answered = 0;
				}
			}
			if (!m->has_content && !m->tool_calls)
				return tk_errf(c->err, c->errlen, SRT_EINVAL,
					       "messages[%zu]: an assistant message needs content or tool_calls",
					       i);
			if (m->prefix && m->tool_calls)
				return tk_errf(c->err, c->errlen, SRT_EINVAL,
					       "messages[%zu]: a prefix message cannot hold tool_calls", i);
		} else if (m->role == R_TOOL) {
			const char *id = json_string_value(json_object_get(j, "tool_call_id"));
			if (!pending)
				return tk_errf(c->err, c->errlen, SRT_EINVAL,
					       "messages[%zu]: a tool message must answer the tool_calls of "
					       "the assistant message before it",
					       i);
			m->call_order = -1;
			for (size_t k = 0; k < json_array_size(pending); k++) {
				const char *cid = json_string_value(
					json_object_get(json_array_get(pending, pending_msg->by_id[k]), "id"));
				if (id && cid && !strcmp(id, cid))
					m->call_order = (int)k;
			}
			if (m->call_order < 0)
				return tk_errf(c->err, c->errlen, SRT_EINVAL,
					       "messages[%zu].tool_call_id: '%s' answers no tool call of "
					       "messages[%zu]",
					       i, id ? id : "(missing)", pending_at);
			answered++;
			m->tool_call_id = id;
		} else if (!m->has_content) {
			return tk_errf(c->err, c->errlen, SRT_EINVAL, "messages[%zu].content: missing", i);
		}
	}
	if (pending && answered < json_array_size(pending))
		return tk_errf(c->err, c->errlen, SRT_EINVAL,
			       "messages: the tool calls of messages[%zu] are not all answered", pending_at);
	if (r->fmt == 1 && !contains_json_word(r))
		return tk_errf(c->err, c->errlen, SRT_EINVAL,
			       "response_format json_object: the messages must mention 'json' (as the "
			       "reference requires)");
	return 0;
}

/* ---- rendering ------------------------------------------------------------------------------ */

static int render_tool_calls(struct cx *c, json_t *calls, const size_t *by_id)
{
	int rc = txts(c, "\n\n");
	if (!rc)
		rc = scaffold(c, "<" SP_DSML "tool_calls>\n");
	for (size_t k = 0; k < json_array_size(calls) && !rc; k++) {
		json_t *f = json_object_get(json_array_get(calls, by_id[k]), "function");
		const char *name = json_string_value(json_object_get(f, "name"));
		json_t *a = json_object_get(f, "arguments");
		if (k)
			rc = txts(c, "\n");
		if (!rc)
			rc = scaffold(c, "<" SP_DSML "invoke name=\"");
		if (!rc)
			rc = txts(c, name);
		if (!rc)
			rc = txts(c, "\">\n");
		json_t *args = json_loadb(json_string_value(a), json_string_length(a),
					  JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		if (!json_is_object(args)) {
			/* not a JSON object: passed as one string parameter "arguments" */
			json_decref(args);
			args = json_pack("{s:O}", "arguments", a);
			if (!args)
				return oom(c);
		}
		const char *key;
		json_t *v;
		json_object_foreach(args, key, v)
		{
			if (rc)
				break;
			rc = scaffold(c, "<" SP_DSML "parameter name=\"");
			if (!rc)
				rc = txts(c, key);
			if (!rc)
				rc = txts(c, json_is_string(v) ? "\" string=\"true\">" : "\" string=\"false\">");
			if (!rc)
				rc = json_is_string(v) ? txt(c, json_string_value(v), json_string_length(v))
						       : jtxt(c, v);
			if (!rc)
				rc = scaffold(c, "</" SP_DSML "parameter>\n");
		}
		json_decref(args);
		if (!rc)
			rc = scaffold(c, "</" SP_DSML "invoke>");
	}
	if (!rc)
		rc = txts(c, "\n");
	return rc ? rc : scaffold(c, "</" SP_DSML "tool_calls>");
}

static int render_system(struct cx *c, const struct req *r)
{
	bool any = false;
	int rc = 0;
	for (size_t i = 0; i < r->n && !rc; i++) {
		if (r->m[i].role != R_SYSTEM || !r->m[i].content.len)
			continue;
		if (any)
			rc = txts(c, "\n\n");
		if (!rc)
			rc = txt(c, r->m[i].content.data ? r->m[i].content.data : "", r->m[i].content.len);
		any = true;
	}
	if (!rc && r->tools_active) {
		rc = scaffold(c, tools_head);
		bool first = true;
		for (size_t k = 0; k < json_array_size(r->tools) && !rc; k++) {
			json_t *f = json_object_get(json_array_get(r->tools, k), "function");
			json_t *d = json_object_get(f, "description"), *p = json_object_get(f, "parameters");
			if (r->only && strcmp(r->only, json_string_value(json_object_get(f, "name"))))
				continue;
			json_t *o = json_object();
			if (!o)
				return oom(c);
			json_object_set(o, "name", json_object_get(f, "name"));
			json_object_set_new(o, "description", json_is_string(d) ? json_copy(d) : json_string(""));
			json_object_set_new(o, "parameters", json_is_object(p) ? json_copy(p) : json_object());
			if (!first)
				rc = txts(c, "\n");
			first = false;
			if (!rc)
				rc = jtxt(c, o);
			json_decref(o);
		}
		if (!rc)
			rc = txts(c, tools_tail);
	}
	if (!rc && r->fmt == 1)
		rc = txts(c, fmt_json_object);
	if (!rc && r->fmt == 2) {
		rc = txts(c, fmt_json_schema);
		if (!rc)
			rc = jtxt(c, r->schema);
	}
	return rc;
}

/*
 * One user turn: tool results (ms[0..nt), tool messages, ordered by call id), then the user
 * messages after them merged into one text (empty ones skipped, the rest joined by blank lines),
 * which follows the results as one more part even when empty.
 */
static int render_user_turn(struct cx *c, const struct msg *const *ms, size_t n)
{
	int rc = sp(c, SP_USER);
	size_t nt = 0;
	while (nt < n && ms[nt]->role == R_TOOL)
		nt++;
	const struct msg **tools = malloc((nt ? nt : 1) * sizeof(*tools));
	if (!tools)
		return oom(c);
	memcpy(tools, ms, nt * sizeof(*tools));
	for (size_t a = 1; a < nt; a++) /* stable insertion sort by call rank */
		for (size_t b = a; b > 0 && tools[b - 1]->call_order > tools[b]->call_order; b--) {
			const struct msg *t = tools[b];
			tools[b] = tools[b - 1];
			tools[b - 1] = t;
		}
	for (size_t i = 0; i < nt && !rc; i++) {
		if (i)
			rc = txts(c, "\n\n");
		if (!rc)
			rc = txts(c, "<tool_result>");
		if (!rc)
			rc = txt(c, tools[i]->content.data ? tools[i]->content.data : "",
				 tools[i]->content.len);
		if (!rc)
			rc = txts(c, "</tool_result>");
	}
	free(tools);
	if (!rc && n > nt && nt)
		rc = txts(c, "\n\n");
	bool first = true;
	for (size_t i = nt; i < n && !rc; i++) {
		if (ms[i]->role != R_USER || !ms[i]->content.len)
			continue;
		if (!first)
			rc = txts(c, "\n\n");
		first = false;
		if (!rc)
			rc = txt(c, ms[i]->content.data, ms[i]->content.len);
	}
	return rc;
}

static int render_assistant(struct cx *c, const struct req *r, const struct msg *m)
{
	int rc = sp(c, SP_ASSISTANT);
	const char *reasoning = m->reasoning ? m->reasoning : "";
	if (!rc && r->thinking && m->prefix) {
		rc = sp(c, SP_THINK);
		if (!rc)
			rc = txts(c, reasoning);
		if (!rc && (m->content.len || m->tool_calls))
			rc = sp(c, SP_THINK_END);
	} else if (!rc && r->thinking && r->tools_active) {
		rc = sp(c, SP_THINK);
		if (!rc)
			rc = txts(c, reasoning);
		if (!rc)
			rc = sp(c, SP_THINK_END);
	} else if (!rc) {
		rc = sp(c, SP_THINK_END);
	}
	if (!rc)
		rc = txt(c, m->content.data ? m->content.data : "", m->content.len);
	if (!rc && m->tool_calls)
		rc = render_tool_calls(c, m->tool_calls, m->by_id);
	if (!rc && !m->prefix)
		rc = sp(c, SP_EOS);
	return rc;
}

int srt_tok_chat_render(const json_t *q, struct srt_tok_chat *out, char *err, size_t errlen)
{
	struct cx c = {out, err, errlen};
	struct req r = {0};
	if (!json_is_object(q))
		return tk_errf(err, errlen, SRT_EINVAL, "request: expected a JSON object");
	int rc = parse_options(&c, q, &r);
	if (!rc)
		rc = parse_messages(&c, q, &r);
	out->thinking = r.thinking;
	if (!rc)
		rc = sp(&c, SP_BOS);
	if (!rc && r.thinking)
		rc = txts(&c, r.effort_text);
	if (!rc)
		rc = render_system(&c, &r);
	/* system messages were hoisted into the system block: walk the others; consecutive
	 * user and tool messages form one user turn */
	const struct msg **ms = malloc((r.n ? r.n : 1) * sizeof(*ms));
	size_t n = 0;
	if (!ms && !rc)
		rc = oom(&c);
	for (size_t i = 0; i < r.n && ms; i++)
		if (r.m[i].role != R_SYSTEM)
			ms[n++] = &r.m[i];
	for (size_t i = 0; i < n && !rc;) {
		const struct msg *m = ms[i];
		if (m->role == R_USER || m->role == R_TOOL) {
			size_t j = i + 1;
			while (j < n && (ms[j]->role == R_USER || ms[j]->role == R_TOOL))
				j++;
			rc = render_user_turn(&c, ms + i, j - i);
			i = j;
		} else if (m->role == R_REMINDER) {
			rc = sp(&c, SP_REMINDER);
			if (!rc)
				rc = txt(&c, m->content.data ? m->content.data : "", m->content.len);
			i++;
		} else {
			rc = render_assistant(&c, &r, m);
			i++;
		}
	}
	free(ms);
	if (!rc && !(r.n && r.m[r.n - 1].prefix)) {
		rc = sp(&c, SP_ASSISTANT);
		if (!rc)
			rc = sp(&c, r.thinking ? SP_THINK : SP_THINK_END);
		if (!rc && r.force_call)
			rc = txts(&c, "\n\n");
		if (!rc && r.force_call)
			rc = scaffold(&c, "<" SP_DSML "tool_calls>\n");
	}
	req_free(&r);
	return rc;
}

int srt_tok_chat_encode(const struct srt_tok *tok, const struct srt_tok_chat *chat,
			struct srt_tok_ids *ids, char *err, size_t errlen)
{
	size_t pos = 0;
	const char *s = chat->text.data ? chat->text.data : "";
	for (size_t k = 0; k <= chat->n_spans; k++) {
		size_t a = k < chat->n_spans ? chat->spans[2 * k] : chat->text.len;
		if (a > pos) {
			int rc = srt_tok_encode(tok, s + pos, a - pos, SRT_TOK_NO_ADDED, ids, err, errlen);
			if (rc)
				return rc;
		}
		if (k == chat->n_spans)
			break;
		size_t b = chat->spans[2 * k + 1];
		int32_t id = srt_tok_added_id(tok, s + a, b - a);
		if (id < 0)
			return tk_errf(err, errlen, SRT_EINVAL,
				       "special token '%.*s' is not in this tokenizer (not DeepSeek-V4's?)",
				       (int)(b - a), s + a);
		if (srt_tok_ids_push(ids, &id, 1))
			return tk_errf(err, errlen, SRT_ENOMEM, "out of memory");
		pos = b;
	}
	return 0;
}

void srt_tok_chat_free(struct srt_tok_chat *chat)
{
	srt_tok_text_free(&chat->text);
	free(chat->spans);
	memset(chat, 0, sizeof(*chat));
}
