/*
 * srt_tok_chat: DeepSeek-V4's chat encoding — an OpenAI-style chat request (messages, tools,
 * tool_choice, reasoning_effort, thinking, response_format) rendered into the prompt the model
 * was trained on, and encoded into token ids.
 *
 * The reference is DeepSeek's own encoder, `deepseek-recipe` (PyPI; Rust with Python bindings):
 * ChatCompletionRequest(body).convert(ConversionOptions()) then DeepseekV4Encoding's
 * render_conversation / encode. tests/tok/chat_oracle.py compares this module with it string for
 * string and id for id. What the encoding does (V4):
 *   - BOS; in thinking mode a reasoning-effort preamble (none for "low", the "high" text for
 *     medium / high / xhigh and when unset, the "max" text for "max");
 *   - one system block at the start: every system message's content (wherever it stands),
 *     joined by blank lines, then the tool schemas (when tools are given and tool_choice is not
 *     "none") and the response format (json_object / json_schema);
 *   - "<｜User｜>" + the user text; consecutive user and tool messages merge into one user turn:
 *     the tool results (<tool_result>...</tool_result>, ordered by tool_call id, as the
 *     reference orders the calls themselves), then the user messages after them merged into
 *     one text (empty ones skipped), parts joined by blank lines;
 *   - "<｜latest_reminder｜>" + text for role latest_reminder;
 *   - "<｜Assistant｜>" + thinking part + content + DSML tool calls (by id; arguments that are
 *     a JSON object become one parameter per key, anything else one string parameter
 *     "arguments") + EOS for each assistant
 *     message; the thinking part is "</think>" in chat mode and for earlier turns in thinking
 *     mode without tools (reasoning dropped), "<think>reasoning</think>" in thinking mode when
 *     tools are active (kept) and for a final "prefix": true assistant message (continued, no
 *     EOS);
 *   - the generation prompt "<｜Assistant｜>" + "<think>" (thinking) or "</think>" (chat), plus
 *     the opening of a DSML tool-call block when tool_choice is "required" or names a tool.
 * The special tokens are those the scaffold writes; message text (even one that spells a
 * special token) is encoded with the model vocabulary only (SRT_TOK_NO_ADDED), as the reference
 * does.
 *
 * Not supported (refused with a message): image content parts, "strict": true tools (the
 * reference rewrites their schemas), the "developer" role (the reference refuses it too).
 * Parsing the model's reply back into content / reasoning / tool calls is not here.
 *
 * Ownership: the caller owns the request (borrowed for the call) and the output struct (free it
 * with srt_tok_chat_free). Thread safety: reentrant; no global state.
 * Errors: SRT_EINVAL with a message naming the request field (e.g. "messages[3].tool_call_id:
 * 'x' answers no tool call of the preceding assistant message"), SRT_ENOMEM.
 */
#ifndef SRT_TOK_CHAT_H
#define SRT_TOK_CHAT_H

#include <jansson.h>

#include "tok/tok.h"

/* The rendered prompt: text plus the byte ranges of `text` that are special tokens. */
struct srt_tok_chat {
	struct srt_tok_text text;
	size_t *spans; /* [2 * n_spans]: start, end (exclusive) of each special token, ascending */
	size_t n_spans, cap_spans;
	bool thinking; /* the mode the request resolved to */
};

/* Limits on a request (beyond them: SRT_EINVAL naming the field). */
#define SRT_TOK_CHAT_MAX_MESSAGES 100000

/*
 * Render an OpenAI chat-completions request body (a JSON object; "model" and sampling fields
 * are ignored). "thinking": {"type": "enabled" | "disabled"} selects the mode (enabled when
 * absent, as the reference's defaults). Appends to *out (zero-initialise it first).
 */
int srt_tok_chat_render(const json_t *request, struct srt_tok_chat *out, char *err,
			size_t errlen);

/* Token ids of a rendered prompt: special spans as their added-token ids, the text between
 * them with the model vocabulary only. Appends to *ids. SRT_EINVAL when a special spelling is
 * not a token of tok (a tokenizer that is not DeepSeek-V4's). */
int srt_tok_chat_encode(const struct srt_tok *tok, const struct srt_tok_chat *chat,
			struct srt_tok_ids *ids, char *err, size_t errlen);

void srt_tok_chat_free(struct srt_tok_chat *chat);

/*
 * JSON text of v the way the reference writes JSON inside prompts (serde_json style: ", " and
 * ": " separators, key order kept, non-ASCII verbatim, shortest round-trip floats with
 * "1e+16" / "1e-7" exponents). Appends to *out. 0 or SRT_ENOMEM / SRT_EINVAL (NaN).
 */
int srt_tok_chat_json(const json_t *v, struct srt_tok_text *out);

#endif
