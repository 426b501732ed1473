/*
 * The HTTP server: an OpenAI-compatible API over the scheduler (sched/sched.h), on
 * libmicrohttpd, JSON by jansson.
 *
 * Endpoints:
 *   POST /v1/completions        prompt: a string (needs a tokenizer), a list of token ids, or a
 *                               one-element list of either; stream: true = SSE chunks, a final
 *                               usage chunk, then "data: [DONE]"
 *   POST /v1/chat/completions   messages encoded with the model's chat encoding (needs one);
 *                               stream as above
 *   GET  /v1/models             the one model served
 *   GET  /health                200 "ok" while serving, 503 while shutting down
 *   GET  /metrics               Prometheus text format (srt_serve_metrics)
 * Every error is an HTTP status with an OpenAI-style body
 *   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}.
 * Choices carry the generated ids as "token_ids" besides the text (an extension).
 *
 * Connections are handled by libmicrohttpd's epoll threads; a request waiting for tokens is
 * suspended (no thread blocks on it) and resumed by the scheduler's notify callback. A client
 * that goes away mid-stream is noticed at the next write: its request is cancelled and its
 * sequence freed.
 *
 * Thread safety: srt_serve_start / srt_serve_quiesce / srt_serve_stop from one thread.
 */
#ifndef SRT_SERVE_SERVE_H
#define SRT_SERVE_SERVE_H

#include <stddef.h>
#include <stdint.h>

struct srt_engine;
struct srt_sched;
struct srt_sched_stats;
struct srt_tok;

struct srt_serve_config {
	const char *host;        /* IPv4 address to bind; NULL = 127.0.0.1 */
	int port;                /* 0 = any free port (srt_serve_port tells which) */
	const char *api_key;     /* NULL or "" = no key; else the /v1 routes need "Bearer KEY" */
	const char *model_name;  /* the id /v1/models lists and requests may name */
	size_t max_body;         /* request body cap in bytes; 0 = 8 MiB */
	unsigned max_connections; /* 0 = 1024 */
	unsigned threads;        /* HTTP threads; 0 = 2 */
	unsigned idle_timeout_s; /* close a connection idle this long (slow clients); 0 = 60 */
	uint32_t default_max_tokens; /* when a request gives none; 0 = 16 (the OpenAI default) */
	const struct srt_tok *tok;   /* borrowed; NULL = token ids only, no chat */
	int verbose;             /* 1: one line per request on stderr */
};

struct srt_serve;

/*
 * Start serving on the open scheduler and engine (borrowed until srt_serve_stop).
 * Returns 0 and *out, or SRT_EIO (cannot bind: the message names the address),
 * SRT_EINVAL (bad host), SRT_ENOMEM.
 */
int srt_serve_start(struct srt_engine *e, struct srt_sched *sched,
		    const struct srt_serve_config *cfg, struct srt_serve **out, char *err,
		    size_t errlen);
int srt_serve_port(const struct srt_serve *s);
/* Stop accepting connections; requests in flight go on. /health answers 503 from now on. */
void srt_serve_quiesce(struct srt_serve *s);
/* Wait until every generation request's answer has been sent or its connection closed (call
 * it after the scheduler has drained or cancelled everything), then stop the HTTP threads and
 * free. NULL is ok. */
void srt_serve_stop(struct srt_serve *s);

/* The Prometheus text of st plus the server's own counters (malloc'd, NUL-terminated). */
char *srt_serve_metrics(struct srt_serve *s, const struct srt_sched_stats *st);

#endif /* SRT_SERVE_SERVE_H */
