/*
 * shadowrt serve: the OpenAI-compatible HTTP server (serve/serve.h) over the scheduler
 * (sched/sched.h) and the executor. Runs until SIGINT / SIGTERM: then it stops accepting
 * connections, lets the requests in flight finish (a second signal cancels them), stops the
 * HTTP threads and the scheduler, flushes the queued L3 writes and closes the engine.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "commands.h"
#include "config/runtime_config.h"
#include "exec/engine.h"
#include "sched/sched.h"
#include "serve/api.h"
#include "serve/serve.h"
#include "tier/manager.h"
#include "tok/tok.h"

static void serve_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt serve [options]\n"
		"\n"
		"Serve the model over HTTP with an OpenAI-compatible API: POST /v1/completions and\n"
		"/v1/chat/completions (\"stream\": true for server-sent events), GET /v1/models,\n"
		"/health and /metrics (Prometheus text). Requests are batched continuously by the\n"
		"scheduler (decode rows first, chunked prefill, prefix-cache aware admission).\n"
		"Prompts are text when the checkpoint directory has a tokenizer.json, else lists of\n"
		"token ids. Binds 127.0.0.1 unless --host says otherwise. SIGINT / SIGTERM: stop\n"
		"accepting, finish the requests in flight (a second signal cancels them), write the\n"
		"cache tiers out, exit 0.\n"
		"\n"
		"options:\n"
		"  --model DIR|PRESET    checkpoint directory or preset (default: [runtime] model)\n"
		"  --config INI          runtime config over the built-in default\n"
		"  --host ADDR           IPv4 address to bind (default 127.0.0.1)\n"
		"  --port N              TCP port, 0 = any free one (default 8000)\n"
		"  --port-file FILE      write the bound port there once listening (for scripts)\n"
		"  --api-key KEY         require \"Authorization: Bearer KEY\" on /v1 (default: the\n"
		"                        SHADOWRT_API_KEY environment variable; none when unset)\n"
		"  --served-model-name S the model id clients name (default: the model's name)\n"
		"  --threads N           engine worker threads, 0 = all cores\n"
		"  --profile P           reference | f32\n"
		"  --no-tiers            L1 only: no L2/L3 behind the cache\n"
		"  --max-running N       sequences in the batch at once (default 64)\n"
		"  --token-budget N      rows per forward step (default: max(prefill chunk, N))\n"
		"  --max-queue N         waiting requests before 429 (default 4096)\n"
		"  --max-context N       prompt + output tokens (default: the model's)\n"
		"  --max-connections N   open connections (default 1024); up to N/8 more (8..1024)\n"
		"                        are answered 503 too_many_connections, the rest dropped\n"
		"  --max-body BYTES      request body cap (default 8388608)\n"
		"  --idle-timeout S      close idle connections after S seconds (default 60)\n"
		"  --http-threads N      HTTP threads (default 2)\n"
		"  --default-max-tokens N  max_tokens when a request gives none (default 16)\n"
		"  -v, --verbose         one line per request on stderr\n");
}

static int write_port_file(const char *path, int port)
{
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "%d\n", port);
	if (fclose(f) || rename(tmp, path))
		return -1;
	return 0;
}

struct watcher {
	sigset_t set;
	struct srt_sched *sched;
	int stop; /* set by main before it wakes the watcher */
};

/* After the first signal: a second one cancels the requests in flight. */
static void *watch_second_signal(void *arg)
{
	struct watcher *w = arg;
	int sig;
	while (!sigwait(&w->set, &sig)) {
		if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE))
			break;
		if (sig == SIGINT || sig == SIGTERM) {
			fprintf(stderr, "shadowrt serve: second signal: cancelling the requests in "
				"flight\n");
			srt_sched_shutdown(w->sched, 1);
		}
	}
	return NULL;
}

int srt_cmd_serve(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		serve_usage(stdout);
		return 0;
	}
	struct srt_engine_opts o = {.threads = -1, .profile = -1, .tiers = 1};
	struct srt_serve_config sc = {.port = 8000};
	struct srt_sched_config qc = {0};
	const char *port_file = NULL;
	long max_ctx = 0, max_body = 0;
	int v = 0;
	sc.api_key = getenv("SHADOWRT_API_KEY");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;
		if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
			sc.verbose = 1;
			continue;
		}
		if (!strcmp(a, "--no-tiers")) {
			o.tiers = 0;
			continue;
		}
		if (!val) {
			fprintf(stderr, "shadowrt serve: %s: %s\n", a,
				a[0] == '-' ? "needs a value (see --help)" : "unexpected argument");
			return 2;
		}
		i++;
		const char *expect = NULL;
		if ((bad = srt_cli_engine_option(a, val, &o, &expect)))
			bad = bad < 0;
		else if (!strcmp(a, "--host"))
			sc.host = val;
		else if (!strcmp(a, "--port"))
			bad = srt_cli_parse_int(val, 0, 65535, &sc.port);
		else if (!strcmp(a, "--port-file"))
			port_file = val;
		else if (!strcmp(a, "--api-key"))
			sc.api_key = val;
		else if (!strcmp(a, "--served-model-name"))
			sc.model_name = val;
		else if (!strcmp(a, "--max-running"))
			bad = srt_cli_parse_int(val, 1, 4096, &qc.max_running);
		else if (!strcmp(a, "--token-budget"))
			bad = srt_cli_parse_int(val, 1, 1 << 20, &qc.token_budget);
		else if (!strcmp(a, "--max-queue"))
			bad = srt_cli_parse_int(val, 1, 1 << 20, &qc.max_waiting);
		else if (!strcmp(a, "--max-context"))
			bad = srt_cli_parse_long(val, 2, 1L << 40, &max_ctx);
		else if (!strcmp(a, "--max-connections")) {
			bad = srt_cli_parse_int(val, 1, 1 << 20, &v);
			sc.max_connections = (unsigned)v;
		} else if (!strcmp(a, "--max-body"))
			bad = srt_cli_parse_long(val, 1024, 1L << 32, &max_body);
		else if (!strcmp(a, "--idle-timeout")) {
			bad = srt_cli_parse_int(val, 1, 86400, &v);
			sc.idle_timeout_s = (unsigned)v;
		} else if (!strcmp(a, "--http-threads")) {
			bad = srt_cli_parse_int(val, 1, 64, &v);
			sc.threads = (unsigned)v;
		} else if (!strcmp(a, "--default-max-tokens")) {
			bad = srt_cli_parse_int(val, 1, 1 << 30, &v);
			sc.default_max_tokens = (uint32_t)v;
		} else {
			fprintf(stderr, "shadowrt serve: unknown option '%s' (see --help)\n", a);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "shadowrt serve: %s '%s': %s%s\n", a, val,
				expect ? "expected " : "", expect ? expect : "out of range or not a valid value");
			return 2;
		}
	}
	qc.max_context = (uint64_t)max_ctx;
	sc.max_body = (size_t)max_body;

	/* every thread started from here on inherits the blocked signals: main waits for them */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* many connections need many descriptors: take the hard limit */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}

	char err[2048];
	int status = 1;
	struct srt_engine *e = NULL;
	struct srt_tok *tok = NULL;
	struct srt_sched *sched = NULL;
	struct srt_serve *srv = NULL;
	if (srt_cli_engine_open(&o, &e, "shadowrt serve", "serving"))
		goto out;
	const struct srt_model_config *m = srt_engine_model(e);
	int rc = srt_tok_load_dir(srt_engine_model_path(e), &tok, err, sizeof(err));
	if (rc && rc != SRT_ENOENT) {
		fprintf(stderr, "shadowrt serve: tokenizer: %s\n", err);
		goto out;
	}
	if (tok && srt_tok_vocab_size(tok) > (uint32_t)m->vocab_size) {
		fprintf(stderr, "shadowrt serve: the tokenizer has %u ids, the model only %d\n",
			srt_tok_vocab_size(tok), m->vocab_size);
		goto out;
	}
	struct srt_sched_detok dt;
	if (tok) {
		srt_api_detok(tok, &dt);
		qc.detok = &dt;
	}
	if (srt_sched_create(e, &qc, &sched, err, sizeof(err))) {
		fprintf(stderr, "shadowrt serve: %s\n", err);
		goto out;
	}
	if (!sc.model_name)
		sc.model_name = m->name;
	sc.tok = tok;
	if (srt_serve_start(e, sched, &sc, &srv, err, sizeof(err))) {
		fprintf(stderr, "shadowrt serve: %s\n", err);
		goto out;
	}
	printf("shadowrt serve: model %s (%s), %s, profile %s, %d threads\n", sc.model_name,
	       srt_engine_model_path(e), tok ? "text and token-id prompts" : "token-id prompts only",
	       srt_profile_name(srt_engine_profile(e)), srt_engine_threads(e));
	for (int lv = 1; lv <= 2; lv++)
		if (srt_engine_tier_describe(e, lv))
			printf("tier %s\n", srt_engine_tier_describe(e, lv));
	printf("listening on http://%s:%d%s\n", sc.host ? sc.host : "127.0.0.1",
	       srt_serve_port(srv), sc.api_key && *sc.api_key ? " (API key required)" : "");
	fflush(stdout);
	if (port_file && write_port_file(port_file, srt_serve_port(srv))) {
		fprintf(stderr, "shadowrt serve: cannot write %s: %s\n", port_file, strerror(errno));
		goto out;
	}

	int sig = 0;
	do {
		if (sigwait(&set, &sig))
			break;
	} while (sig == SIGUSR1);
	fprintf(stderr, "shadowrt serve: %s: no new connections; finishing the requests in "
		"flight (signal again to cancel them)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
	srt_serve_quiesce(srv);
	srt_sched_shutdown(sched, 0);
	struct watcher w = {.set = set, .sched = sched};
	pthread_t wt;
	int have_watcher = !pthread_create(&wt, NULL, watch_second_signal, &w);
	srt_sched_drain(sched);
	srt_serve_stop(srv);
	srv = NULL;
	if (have_watcher) {
		__atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
		pthread_kill(wt, SIGUSR1);
		pthread_join(wt, NULL);
	}
	struct srt_sched_stats st;
	srt_sched_stats(sched, &st);
	/* the scheduler thread has ended: this thread may use the tier manager now */
	srt_sched_destroy(sched);
	sched = NULL;
	if (srt_engine_tiers(e)) {
		uint64_t lost = srt_tmgr_flush(srt_engine_tiers(e));
		fprintf(stderr, "shadowrt serve: L3 writes flushed (%llu puts lost in all)\n",
			(unsigned long long)lost);
	}
	fprintf(stderr, "shadowrt serve: stopped after %llu requests (%llu prompt tokens, %llu "
		"generated)\n", (unsigned long long)st.submitted,
		(unsigned long long)st.prompt_tokens, (unsigned long long)st.generated_tokens);
	status = 0;
out:
	srt_serve_stop(srv);
	srt_sched_destroy(sched);
	srt_tok_free(tok);
	srt_engine_close(e); /* the tier manager flushes again as it is destroyed */
	return status;
}
