/* The HTTP server (serve.h): connections, routing, auth, errors, responses and streams. */
#include "serve/serve.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <jansson.h>
#include <microhttpd.h>

#include <shadowrt/plugin.h>

#include "exec/engine.h"
#include "sched/sched.h"
#include "serve/api.h"
#include "tok/tok.h"

#define MAX_CODES 600

struct srt_serve {
	struct MHD_Daemon *d;
	struct srt_engine *e;
	struct srt_sched *sched;
	struct srt_serve_config cfg;
	char *api_key, *model_name;
	int port;
	int32_t vocab;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	int quiescing;
	int n_suspended;       /* connections parked until the scheduler has output */
	int n_active;          /* connections with a generation request, until completed */
	int n_conns;           /* open connections (MHD's connection notifications) */
	unsigned conn_limit;   /* what MHD accepts: max_connections + the overflow margin */
	uint64_t codes[MAX_CODES];
	uint64_t disconnects;  /* clients gone before their request was done */
	uint64_t next_id;
};

enum route { R_NONE = 0, R_HEALTH, R_METRICS, R_MODELS, R_COMPLETIONS, R_CHAT };

struct conn {
	struct srt_serve *srv;
	struct MHD_Connection *mc;
	enum route route;
	char *body;
	size_t len, cap;
	int too_big, answered;
	int over_limit; /* opened beyond --max-connections: answered 503 and closed */

	pthread_mutex_t mu;
	int suspended; /* under mu */
	struct srt_sched_req *req;
	struct srt_api_req ar;
	char id[48];
	long long created;
	double t0;
	/* stream cursor */
	uint64_t tok_sent;
	size_t text_sent;
	int role_sent, all_queued;
	char *out;
	size_t olen, opos, ocap;
};

/* --- responses -------------------------------------------------------------------------- */

static void count_code(struct srt_serve *s, unsigned status)
{
	pthread_mutex_lock(&s->mu);
	if (status < MAX_CODES)
		s->codes[status]++;
	pthread_mutex_unlock(&s->mu);
}

static enum MHD_Result respond(struct conn *c, unsigned status, const char *ctype, char *body,
			       size_t len)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", ctype);
	if (status == 405)
		MHD_add_response_header(r, "Allow", c->route == R_COMPLETIONS ||
							   c->route == R_CHAT ? "POST" : "GET");
	if (status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	if (status == 503 && c->over_limit) {
		MHD_add_response_header(r, "Retry-After", "1");
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	}
	enum MHD_Result ret = MHD_queue_response(c->mc, status, r);
	MHD_destroy_response(r);
	c->answered = 1;
	count_code(c->srv, status);
	return ret;
}

static enum MHD_Result respond_json(struct conn *c, unsigned status, json_t *j)
{
	char *txt = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!txt)
		return MHD_NO;
	size_t n = strlen(txt);
	char *body = realloc(txt, n + 2);
	if (!body) {
		free(txt);
		return MHD_NO;
	}
	body[n] = '\n';
	body[n + 1] = 0;
	return respond(c, status, "application/json", body, n + 1);
}

static enum MHD_Result respond_error(struct conn *c, const struct srt_api_error *ae)
{
	return respond_json(c, ae->status, srt_api_error_json(ae));
}

static enum MHD_Result error_now(struct conn *c, unsigned status, const char *type,
				 const char *code, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
static enum MHD_Result error_now(struct conn *c, unsigned status, const char *type,
				 const char *code, const char *param, const char *fmt, ...)
{
	struct srt_api_error ae = {.status = status, .type = type, .code = code};
	if (param) {
		snprintf(ae.param_buf, sizeof(ae.param_buf), "%s", param);
		ae.param = ae.param_buf;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ae.message, sizeof(ae.message), fmt, ap);
	va_end(ap);
	return respond_error(c, &ae);
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

/* --- the scheduler side: suspend / resume ---------------------------------------------- */

/* caller holds c->mu */
static void park(struct conn *c)
{
	c->suspended = 1;
	pthread_mutex_lock(&c->srv->mu);
	c->srv->n_suspended++;
	pthread_mutex_unlock(&c->srv->mu);
	MHD_suspend_connection(c->mc);
}

/* the scheduler's notify callback (scheduler thread) */
static void on_output(void *user)
{
	struct conn *c = user;
	pthread_mutex_lock(&c->mu);
	if (c->suspended) {
		c->suspended = 0;
		MHD_resume_connection(c->mc);
		pthread_mutex_lock(&c->srv->mu);
		c->srv->n_suspended--;
		pthread_cond_broadcast(&c->srv->cv);
		pthread_mutex_unlock(&c->srv->mu);
	}
	pthread_mutex_unlock(&c->mu);
}

/* --- streaming ------------------------------------------------------------------------ */

static int out_append(struct conn *c, const char *s, size_t n)
{
	if (c->olen + n > c->ocap) {
		size_t cap = (c->olen + n) * 2 + 256;
		char *o = realloc(c->out, cap);
		if (!o)
			return -1;
		c->out = o;
		c->ocap = cap;
	}
	memcpy(c->out + c->olen, s, n);
	c->olen += n;
	return 0;
}

static int out_event(struct conn *c, json_t *j)
{
	char *txt = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!txt)
		return -1;
	int rc = out_append(c, "data: ", 6) || out_append(c, txt, strlen(txt)) ||
		 out_append(c, "\n\n", 2);
	free(txt);
	return rc;
}

/* Queue the SSE events for what the scheduler produced since the last call (caller holds
 * c->mu). Sets all_queued after [DONE]. */
static int stream_fill(struct conn *c)
{
	struct srt_sched_info in;
	srt_sched_poll(c->req, &in);
	struct srt_api_out o = {.id = c->id, .created = c->created, .model = c->srv->model_name,
				.chat = c->ar.chat};
	int32_t ids[256];
	char text[4096];
	int any = 0;
	if (c->ar.chat && !c->role_sent) {
		c->role_sent = 1;
		o.role_chunk = 1;
		if (out_event(c, srt_api_chunk(&o)))
			return -1;
		o.role_chunk = 0;
	}
	for (;;) {
		size_t nt = srt_sched_tokens(c->req, c->tok_sent, ids, 256);
		size_t nx = srt_sched_text(c->req, c->text_sent, text, sizeof(text));
		if (!nt && !nx)
			break;
		o.ids = ids;
		o.n_ids = nt;
		o.text = text;
		o.text_len = nx;
		if (out_event(c, srt_api_chunk(&o)))
			return -1;
		c->tok_sent += nt;
		c->text_sent += nx;
		any = 1;
	}
	(void)any;
	if (in.state != SRT_SCHED_DONE || c->tok_sent < in.generated || c->text_sent < in.text_len)
		return 0;
	if (in.finish == SRT_SCHED_ERROR || in.finish == SRT_SCHED_CANCELLED) {
		struct srt_api_error ae = {.status = 500, .type = "server_error",
					   .code = in.finish == SRT_SCHED_ERROR ? "internal_error"
										 : "cancelled"};
		snprintf(ae.message, sizeof(ae.message), "%s",
			 in.finish == SRT_SCHED_ERROR ? in.error
						      : "the request was cancelled (server "
							"shutting down)");
		if (out_event(c, srt_api_error_json(&ae)))
			return -1;
	} else {
		o.finish = srt_sched_finish_name(in.finish);
		o.n_ids = 0;
		o.text_len = 0;
		if (out_event(c, srt_api_chunk(&o)))
			return -1;
		o.finish = NULL;
		o.usage = &in;
		if (out_event(c, srt_api_chunk(&o)))
			return -1;
	}
	if (out_append(c, "data: [DONE]\n\n", 14))
		return -1;
	c->all_queued = 1;
	return 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct conn *c = cls;
	(void)pos;
	pthread_mutex_lock(&c->mu);
	if (c->opos == c->olen) {
		c->opos = c->olen = 0;
		if (!c->all_queued && stream_fill(c)) {
			pthread_mutex_unlock(&c->mu);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (c->olen == 0) {
			if (c->all_queued) {
				pthread_mutex_unlock(&c->mu);
				return MHD_CONTENT_READER_END_OF_STREAM;
			}
			park(c); /* the scheduler's next output resumes us */
			pthread_mutex_unlock(&c->mu);
			return 0;
		}
	}
	size_t n = c->olen - c->opos < max ? c->olen - c->opos : max;
	memcpy(buf, c->out + c->opos, n);
	c->opos += n;
	pthread_mutex_unlock(&c->mu);
	return (ssize_t)n;
}

/* --- generation requests ---------------------------------------------------------------- */

static enum MHD_Result finish_blocking(struct conn *c)
{
	struct srt_sched_info in;
	pthread_mutex_lock(&c->mu);
	srt_sched_poll(c->req, &in);
	if (in.state != SRT_SCHED_DONE) {
		park(c);
		pthread_mutex_unlock(&c->mu);
		return MHD_YES;
	}
	pthread_mutex_unlock(&c->mu);
	if (in.finish == SRT_SCHED_ERROR)
		return error_now(c, 500, "server_error", "internal_error", NULL, "%s", in.error);
	if (in.finish == SRT_SCHED_CANCELLED)
		return error_now(c, 503, "server_error", "cancelled", NULL,
				 "the request was cancelled: the server is shutting down");
	size_t n = (size_t)in.generated;
	int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
	char *text = malloc(in.text_len + 1);
	if (!ids || !text) {
		free(ids);
		free(text);
		return error_now(c, 500, "server_error", "out_of_memory", NULL, "out of memory");
	}
	srt_sched_tokens(c->req, 0, ids, n);
	srt_sched_text(c->req, 0, text, in.text_len);
	struct srt_api_out o = {.id = c->id, .created = c->created, .model = c->srv->model_name,
				.chat = c->ar.chat, .ids = ids, .n_ids = n, .text = text,
				.text_len = in.text_len, .finish = srt_sched_finish_name(in.finish),
				.usage = &in};
	json_t *j = srt_api_full(&o);
	free(ids);
	free(text);
	if (c->srv->cfg.verbose)
		fprintf(stderr, "serve: %s %s: %llu prompt (%llu cached) + %llu tokens, %s, %.3f s\n",
			c->ar.chat ? "chat" : "completion", c->id,
			(unsigned long long)in.prompt_tokens, (unsigned long long)in.cached_tokens,
			(unsigned long long)in.generated, srt_sched_finish_name(in.finish),
			in.t_last - in.t_submit);
	return respond_json(c, 200, j);
}

static enum MHD_Result start_generation(struct conn *c)
{
	struct srt_serve *s = c->srv;
	struct srt_api_error ae = {0};
	struct srt_api_ctx ctx = {.tok = s->cfg.tok, .vocab = s->vocab,
				  .model_name = s->model_name,
				  .default_max_tokens = s->cfg.default_max_tokens};
	if (srt_api_parse(&ctx, c->route == R_CHAT, c->body, c->len, &c->ar, &ae))
		return respond_error(c, &ae);
	pthread_mutex_lock(&s->mu);
	uint64_t id = ++s->next_id;
	pthread_mutex_unlock(&s->mu);
	snprintf(c->id, sizeof(c->id), "%s-%016" PRIx64, c->ar.chat ? "chatcmpl" : "cmpl",
		 (uint64_t)(id * 0x9E3779B97F4A7C15ull));
	c->created = (long long)time(NULL);
	c->ar.params.notify = on_output;
	c->ar.params.user = c;
	if (!c->ar.has_seed)
		c->ar.params.seed = id * 0xD1B54A32D192ED03ull;
	char err[512];
	int rc = srt_sched_submit(s->sched, c->ar.prompt, c->ar.n_prompt, &c->ar.params, &c->req,
				  err, sizeof(err));
	if (rc == SRT_EBUSY)
		return error_now(c, strstr(err, "shutting down") ? 503 : 429,
				 strstr(err, "shutting down") ? "server_error" : "rate_limit_error",
				 strstr(err, "shutting down") ? "shutting_down" : "queue_full", NULL,
				 "%s", err);
	if (rc == SRT_ENOMEM && strstr(err, "KV"))
		return error_now(c, 400, "invalid_request_error", "context_length_exceeded",
				 "max_tokens", "%s", err);
	if (rc == SRT_EINVAL) {
		const char *param = strstr(err, "context") ? "max_tokens"
				    : strstr(err, "prompt") ? "prompt" : NULL;
		return error_now(c, 400, "invalid_request_error",
				 strstr(err, "context") ? "context_length_exceeded"
							: "invalid_value",
				 param, "%s", err);
	}
	if (rc)
		return error_now(c, 500, "server_error", "internal_error", NULL, "%s", err);
	pthread_mutex_lock(&s->mu);
	s->n_active++;
	pthread_mutex_unlock(&s->mu);
	if (!c->ar.stream)
		return finish_blocking(c);
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
								    stream_reader, c, NULL);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	enum MHD_Result ret = MHD_queue_response(c->mc, 200, r);
	MHD_destroy_response(r);
	c->answered = 1;
	count_code(s, 200);
	return ret;
}

/* --- routing ------------------------------------------------------------------------------ */

static int auth_ok(struct srt_serve *s, struct MHD_Connection *mc)
{
	if (!s->api_key)
		return 1;
	const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
	if (!h || strncasecmp(h, "Bearer ", 7))
		return 0;
	h += 7;
	size_t a = strlen(h), b = strlen(s->api_key);
	unsigned diff = (unsigned)(a ^ b);
	for (size_t i = 0; i < a; i++)
		diff |= (unsigned char)h[i] ^ (unsigned char)s->api_key[i % (b ? b : 1)];
	return diff == 0;
}

static enum route route_of(const char *url)
{
	static const struct {
		const char *path;
		enum route r;
	} table[] = {
		{"/health", R_HEALTH},           {"/metrics", R_METRICS},
		{"/v1/models", R_MODELS},        {"/v1/completions", R_COMPLETIONS},
		{"/v1/chat/completions", R_CHAT},
	};
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (!strcmp(url, table[i].path))
			return table[i].r;
	return R_NONE;
}

static enum MHD_Result handle(struct conn *c, const char *url, const char *method)
{
	struct srt_serve *s = c->srv;
	int post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
	if (c->route == R_NONE)
		return error_now(c, 404, "invalid_request_error", "not_found", NULL,
				 "no route %s %s (endpoints: /v1/completions, /v1/chat/completions, "
				 "/v1/models, /health, /metrics)", method, url);
	int gen = c->route == R_COMPLETIONS || c->route == R_CHAT;
	if ((gen && !post) || (!gen && !get))
		return error_now(c, 405, "invalid_request_error", "method_not_allowed", NULL,
				 "%s %s: use %s", method, url, gen ? "POST" : "GET");
	if (!strncmp(url, "/v1/", 4) && !auth_ok(s, c->mc))
		return error_now(c, 401, "invalid_request_error", "invalid_api_key", NULL,
				 "missing or incorrect API key (send Authorization: Bearer <key>)");
	switch (c->route) {
	case R_HEALTH: {
		pthread_mutex_lock(&s->mu);
		int q = s->quiescing;
		pthread_mutex_unlock(&s->mu);
		char *b = xstrdup(q ? "shutting down\n" : "ok\n");
		return b ? respond(c, q ? 503 : 200, "text/plain", b, strlen(b)) : MHD_NO;
	}
	case R_METRICS: {
		struct srt_sched_stats st;
		srt_sched_stats(s->sched, &st);
		char *b = srt_serve_metrics(s, &st);
		return b ? respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b, strlen(b))
			 : MHD_NO;
	}
	case R_MODELS:
		return respond_json(c, 200, srt_api_models(s->model_name, (long long)time(NULL)));
	default:
		return start_generation(c);
	}
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct srt_serve *s = cls;
	struct conn *c = *con_cls;
	(void)version;
	if (!c) {
		if (!(c = calloc(1, sizeof(*c))))
			return MHD_NO;
		c->srv = s;
		c->mc = mc;
		c->route = route_of(url);
		pthread_mutex_init(&c->mu, NULL);
		*con_cls = c;
		pthread_mutex_lock(&s->mu);
		int open = s->n_conns;
		pthread_mutex_unlock(&s->mu);
		if (open > (int)s->cfg.max_connections) {
			c->over_limit = 1;
			return error_now(c, 503, "server_error", "too_many_connections", NULL,
					 "%d connections are open, over the limit of %u (--max-connections); "
					 "retry later", open, s->cfg.max_connections);
		}
		const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
							     "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body)
			return error_now(c, 413, "invalid_request_error", "request_too_large", NULL,
					 "request body of %s bytes is over the limit of %zu bytes",
					 cl, s->cfg.max_body);
		return MHD_YES;
	}
	if (c->answered) { /* an early error; discard the rest of the body */
		*upload_size = 0;
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (c->too_big || c->len + n > s->cfg.max_body) {
			c->too_big = 1;
			return MHD_YES;
		}
		if (c->len + n + 1 > c->cap) {
			size_t cap = (c->len + n + 1) * 2;
			if (cap > s->cfg.max_body + 1)
				cap = s->cfg.max_body + 1;
			char *b = realloc(c->body, cap);
			if (!b)
				return MHD_NO;
			c->body = b;
			c->cap = cap;
		}
		memcpy(c->body + c->len, upload, n);
		c->len += n;
		return MHD_YES;
	}
	if (c->req) /* resumed: the scheduler has news */
		return c->ar.stream ? MHD_YES : finish_blocking(c);
	if (c->too_big)
		return error_now(c, 413, "invalid_request_error", "request_too_large", NULL,
				 "request body is over the limit of %zu bytes", s->cfg.max_body);
	return handle(c, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct srt_serve *s = cls;
	struct conn *c = *con_cls;
	(void)mc;
	if (!c)
		return;
	*con_cls = NULL;
	if (c->req) {
		struct srt_sched_info in;
		srt_sched_poll(c->req, &in);
		if (in.state != SRT_SCHED_DONE || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
			pthread_mutex_lock(&s->mu);
			s->disconnects += in.state != SRT_SCHED_DONE;
			pthread_mutex_unlock(&s->mu);
		}
		/* cancels a request not done; no notify callback runs after this */
		srt_sched_release(c->req);
		pthread_mutex_lock(&s->mu);
		s->n_active--;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
	srt_api_req_free(&c->ar);
	pthread_mutex_destroy(&c->mu);
	free(c->body);
	free(c->out);
	free(c);
}

/* MHD accepts up to conn_limit connections; those beyond --max-connections get a 503 for their
 * first request (with Connection: close) instead of being dropped without a word. */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct srt_serve *s = cls;
	(void)mc;
	(void)socket_context;
	pthread_mutex_lock(&s->mu);
	s->n_conns += toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1;
	pthread_mutex_unlock(&s->mu);
}

/* --- start / stop ------------------------------------------------------------------------ */

int srt_serve_start(struct srt_engine *e, struct srt_sched *sched,
		    const struct srt_serve_config *cfg, struct srt_serve **out, char *err,
		    size_t errlen)
{
	*out = NULL;
	struct srt_serve *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return SRT_ENOMEM;
	}
	s->e = e;
	s->sched = sched;
	s->cfg = *cfg;
	if (!s->cfg.max_body)
		s->cfg.max_body = (size_t)8 << 20;
	if (!s->cfg.max_connections)
		s->cfg.max_connections = 1024;
	/* room to answer the overflow with a 503: an eighth more, at least 8, at most 1024 */
	unsigned margin = s->cfg.max_connections / 8;
	s->conn_limit = s->cfg.max_connections + (margin < 8 ? 8 : margin > 1024 ? 1024 : margin);
	if (!s->cfg.threads)
		s->cfg.threads = 2;
	if (!s->cfg.idle_timeout_s)
		s->cfg.idle_timeout_s = 60;
	if (!s->cfg.default_max_tokens)
		s->cfg.default_max_tokens = 16;
	s->vocab = srt_engine_model(e)->vocab_size;
	s->model_name = xstrdup(cfg->model_name ? cfg->model_name : "shadowrt");
	if (cfg->api_key && *cfg->api_key)
		s->api_key = xstrdup(cfg->api_key);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
	const char *host = cfg->host ? cfg->host : "127.0.0.1";
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		snprintf(err, errlen, "--host '%s': not an IPv4 address", host);
		srt_serve_stop(s);
		return SRT_EINVAL;
	}
	/* poll(2), not epoll: with epoll, libmicrohttpd 0.9.75's MHD_quiesce_daemon removes the
	 * listen socket from each worker's epoll set while a busy worker, having seen the quiesce
	 * flag, may remove it first; the second removal fails and the library aborts ("Failed to
	 * remove listen FD from epoll set": a SIGTERM with a stream in flight, 1 test run in 6 on a
	 * loaded machine). With poll the quiesce only wakes the workers. */
	s->d = MHD_start_daemon(
		MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
			(cfg->verbose ? MHD_USE_ERROR_LOG : 0),
		0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
		MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.threads,
		/* MHD divides its limit among the pool's threads, and whichever thread wins
		 * an accept takes the connection: one that reached its share closed new ones
		 * without a status while the other had room (a flaky 503 test). Each thread may
		 * hold all of them; n_conns (on_connection) enforces the real limit. */
		MHD_OPTION_CONNECTION_LIMIT, s->conn_limit * s->cfg.threads,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.idle_timeout_s,
		MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
	if (!s->d) {
		snprintf(err, errlen, "cannot listen on %s:%d (address in use, or not allowed)",
			 host, cfg->port);
		srt_serve_stop(s);
		return SRT_EIO;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : cfg->port;
	*out = s;
	return 0;
}

int srt_serve_port(const struct srt_serve *s)
{
	return s->port;
}

void srt_serve_quiesce(struct srt_serve *s)
{
	pthread_mutex_lock(&s->mu);
	s->quiescing = 1;
	pthread_mutex_unlock(&s->mu);
	if (s->d) {
		MHD_socket fd = MHD_quiesce_daemon(s->d);
		if (fd != MHD_INVALID_SOCKET)
			close(fd);
	}
}

void srt_serve_stop(struct srt_serve *s)
{
	if (!s)
		return;
	if (s->d) {
		/* suspended connections must be resumed before the daemon stops (the scheduler
		 * resumes each when its request ends: the caller drained or cancelled them), and
		 * the answers of ended requests must be sent out first (a client that stops reading
		 * is closed by the idle timeout) */
		pthread_mutex_lock(&s->mu);
		while (s->n_suspended > 0 || s->n_active > 0)
			pthread_cond_wait(&s->cv, &s->mu);
		pthread_mutex_unlock(&s->mu);
		MHD_stop_daemon(s->d);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s->api_key);
	free(s->model_name);
	free(s);
}

/* --- metrics ------------------------------------------------------------------------------- */

struct buf {
	char *p;
	size_t n, cap;
	int oom;
};

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(struct buf *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
		va_end(ap);
		if (k < 0) {
			b->oom = 1;
			return;
		}
		if ((size_t)k < b->cap - b->n) {
			b->n += (size_t)k;
			return;
		}
		size_t cap = b->cap * 2 + (size_t)k + 1;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

static void metric(struct buf *b, const char *name, const char *type, const char *help)
{
	bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void histogram(struct buf *b, const char *name, const char *help,
		      const struct srt_sched_hist *h)
{
	metric(b, name, "histogram", help);
	uint64_t cum = 0;
	for (int i = 0; i < SRT_SCHED_NBUCKETS; i++) {
		cum += h->count[i];
		bprintf(b, "%s_bucket{le=\"%g\"} %llu\n", name, srt_sched_buckets[i],
			(unsigned long long)cum);
	}
	cum += h->count[SRT_SCHED_NBUCKETS];
	bprintf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
		(unsigned long long)cum, name, h->sum, name, (unsigned long long)h->n);
}

char *srt_serve_metrics(struct srt_serve *s, const struct srt_sched_stats *st)
{
	struct buf b = {.cap = 8192};
	if (!(b.p = malloc(b.cap)))
		return NULL;
	b.p[0] = 0;
	uint64_t codes[MAX_CODES], disc;
	int conns;
	pthread_mutex_lock(&s->mu);
	memcpy(codes, s->codes, sizeof(codes));
	disc = s->disconnects;
	conns = s->n_conns;
	pthread_mutex_unlock(&s->mu);

	metric(&b, "shadowrt_requests_total", "counter",
	       "Generation requests that ended, by how (length, stop, cancelled, error), and "
	       "those refused at submission (rejected).");
	for (int f = SRT_SCHED_LENGTH; f <= SRT_SCHED_ERROR; f++)
		bprintf(&b, "shadowrt_requests_total{result=\"%s\"} %llu\n",
			srt_sched_finish_name(f), (unsigned long long)st->finished[f]);
	bprintf(&b, "shadowrt_requests_total{result=\"rejected\"} %llu\n",
		(unsigned long long)st->rejected);
	metric(&b, "shadowrt_requests_submitted_total", "counter",
	       "Generation requests accepted by the scheduler.");
	bprintf(&b, "shadowrt_requests_submitted_total %llu\n", (unsigned long long)st->submitted);
	metric(&b, "shadowrt_http_responses_total", "counter", "HTTP responses by status code.");
	for (int i = 100; i < MAX_CODES; i++)
		if (codes[i])
			bprintf(&b, "shadowrt_http_responses_total{code=\"%d\"} %llu\n", i,
				(unsigned long long)codes[i]);
	metric(&b, "shadowrt_client_disconnects_total", "counter",
	       "Clients that went away before their request was done (request cancelled).");
	bprintf(&b, "shadowrt_client_disconnects_total %llu\n", (unsigned long long)disc);
	metric(&b, "shadowrt_http_open_connections", "gauge",
	       "Open HTTP connections (those beyond --max-connections are answered 503).");
	bprintf(&b, "shadowrt_http_open_connections %d\n", conns);
	metric(&b, "shadowrt_queue_depth", "gauge", "Requests waiting for admission.");
	bprintf(&b, "shadowrt_queue_depth %llu\n", (unsigned long long)st->waiting);
	metric(&b, "shadowrt_running_sequences", "gauge", "Sequences running in the batch.");
	bprintf(&b, "shadowrt_running_sequences %llu\n", (unsigned long long)st->running);
	metric(&b, "shadowrt_prompt_tokens_total", "counter", "Prompt tokens submitted.");
	bprintf(&b, "shadowrt_prompt_tokens_total %llu\n", (unsigned long long)st->prompt_tokens);
	metric(&b, "shadowrt_generated_tokens_total", "counter", "Tokens generated.");
	bprintf(&b, "shadowrt_generated_tokens_total %llu\n",
		(unsigned long long)st->generated_tokens);
	metric(&b, "shadowrt_computed_tokens_total", "counter",
	       "Token positions run through the model (prefill and decode rows).");
	bprintf(&b, "shadowrt_computed_tokens_total %llu\n",
		(unsigned long long)st->computed_tokens);
	metric(&b, "shadowrt_prefix_hit_tokens_total", "counter",
	       "Prompt tokens served from the prefix cache, by the tier they came from.");
	static const char *const tier[3] = {"L1", "L2", "L3"};
	for (int t = 0; t < 3; t++)
		bprintf(&b, "shadowrt_prefix_hit_tokens_total{tier=\"%s\"} %llu\n", tier[t],
			(unsigned long long)st->hit_tokens[t]);
	metric(&b, "shadowrt_preemptions_total", "counter",
	       "Running sequences preempted for memory (resumed later from the cache).");
	bprintf(&b, "shadowrt_preemptions_total %llu\n", (unsigned long long)st->preemptions);
	metric(&b, "shadowrt_scheduler_steps_total", "counter", "Batched forward steps.");
	bprintf(&b, "shadowrt_scheduler_steps_total %llu\n", (unsigned long long)st->steps);
	histogram(&b, "shadowrt_time_to_first_token_seconds",
		  "Time from submission to the first generated token.", &st->ttft);
	histogram(&b, "shadowrt_inter_token_latency_seconds",
		  "Time between consecutive generated tokens of a request.", &st->itl);
	histogram(&b, "shadowrt_request_duration_seconds",
		  "Time from submission to the end of a request that finished.", &st->e2e);
	metric(&b, "shadowrt_kv_bytes", "gauge",
	       "KV cache bytes held, per pool and tier (L2/L3 are counted over all pools).");
	for (uint32_t p = 0; p < st->n_pools; p++)
		bprintf(&b, "shadowrt_kv_bytes{pool=\"%s\",tier=\"L1\"} %llu\n", st->pools[p].name,
			(unsigned long long)st->pools[p].bytes);
	if (st->has_tiers) {
		bprintf(&b, "shadowrt_kv_bytes{pool=\"all\",tier=\"L2\"} %llu\n",
			(unsigned long long)st->l2_bytes);
		bprintf(&b, "shadowrt_kv_bytes{pool=\"all\",tier=\"L3\"} %llu\n",
			(unsigned long long)st->l3_bytes);
	}
	metric(&b, "shadowrt_kv_budget_bytes", "gauge", "L1 KV cache budget per pool.");
	for (uint32_t p = 0; p < st->n_pools; p++)
		if (st->pools[p].budget != UINT64_MAX)
			bprintf(&b, "shadowrt_kv_budget_bytes{pool=\"%s\",tier=\"L1\"} %llu\n",
				st->pools[p].name, (unsigned long long)st->pools[p].budget);
	metric(&b, "shadowrt_kv_evicted_pages_total", "counter",
	       "Cached L1 pages evicted (demoted to L2/L3 when the tiers are on), per pool.");
	for (uint32_t p = 0; p < st->n_pools; p++)
		bprintf(&b, "shadowrt_kv_evicted_pages_total{pool=\"%s\"} %llu\n",
			st->pools[p].name, (unsigned long long)st->pools[p].evicted_pages);
	if (st->has_tiers) {
		metric(&b, "shadowrt_tier_pages_moved_total", "counter",
		       "Pages copied between tiers (demotions and write-through copies, "
		       "promotions).");
		const struct {
			const char *from, *to;
			uint64_t v;
		} mv[] = {{"L1", "L2", st->demoted_l1_l2}, {"L1", "L3", st->demoted_l1_l3},
			  {"L2", "L3", st->demoted_l2_l3}, {"L2", "L1", st->promoted_l2_l1},
			  {"L3", "L1", st->promoted_l3_l1}};
		for (size_t i = 0; i < sizeof(mv) / sizeof(mv[0]); i++)
			bprintf(&b, "shadowrt_tier_pages_moved_total{from=\"%s\",to=\"%s\"} %llu\n",
				mv[i].from, mv[i].to, (unsigned long long)mv[i].v);
		metric(&b, "shadowrt_l3_objects", "gauge", "Objects in the L3 store.");
		bprintf(&b, "shadowrt_l3_objects %llu\n", (unsigned long long)st->l3_objects);
	}
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}
