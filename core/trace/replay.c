/* Cache-only trace replay (replay.h). */
#include "trace/replay.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "tier/manager.h"

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* open-addressing set of non-zero 64-bit keys */
struct kset {
	uint64_t *v;
	size_t cap, n;
};
static int kset_has_or_add(struct kset *s, uint64_t k, int add)
{
	k |= 1; /* never 0 */
	if (add && (s->n + 1) * 2 > s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 1 << 16;
		uint64_t *v = calloc(cap, sizeof(*v));
		if (!v)
			return -1;
		for (size_t i = 0; i < s->cap; i++)
			if (s->v[i])
				for (size_t j = mix(s->v[i]) & (cap - 1);; j = (j + 1) & (cap - 1))
					if (!v[j]) {
						v[j] = s->v[i];
						break;
					}
		free(s->v);
		s->v = v;
		s->cap = cap;
	}
	if (!s->cap)
		return 0;
	for (size_t j = mix(k) & (s->cap - 1);; j = (j + 1) & (s->cap - 1)) {
		if (s->v[j] == k)
			return 1;
		if (!s->v[j]) {
			if (add) {
				s->v[j] = k;
				s->n++;
			}
			return 0;
		}
	}
}

uint64_t srt_trace_ceiling(const struct srt_trace *t, size_t n, uint32_t P)
{
	struct kset seen = {0};
	uint64_t total = 0;
	uint64_t *chain = NULL;
	size_t chain_cap = 0;
	for (size_t i = 0; i < n && i < t->n; i++) {
		const struct srt_trace_req *r = &t->reqs[i];
		if (r->n_hash > chain_cap) {
			chain_cap = r->n_hash;
			chain = realloc(chain, chain_cap * sizeof(*chain));
		}
		uint64_t h = 0x5eed;
		for (uint32_t b = 0; b < r->n_hash; b++)
			chain[b] = h = mix(h ^ mix(r->hash_ids[b] + 1));
		uint64_t pages = r->input_length / P, hit = 0;
		int run = 1;
		for (uint64_t p = 0; p < pages; p++) {
			uint64_t last_block = ((p + 1) * P - 1) / SRT_TRACE_BLOCK;
			uint64_t key = mix(chain[last_block] ^ mix(p * 0x2545f4914f6cdd1dull));
			if (run && kset_has_or_add(&seen, key, 0))
				hit = p + 1;
			else
				run = 0;
			kset_has_or_add(&seen, key, 1);
		}
		total += hit * P;
	}
	free(chain);
	free(seen.v);
	return total;
}

/* CPU time of the process (every thread: the L3 writer and loader included), seconds. */
static double cpu_s(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* What one replay needs while it runs. */
struct rctx {
	struct srt_rdx_cache *c;
	const struct srt_trace *t;
	struct srt_tmgr *tm;
	uint64_t chunk;
	int32_t *tok;
	struct srt_replay_result *res;
	const struct srt_rdx_remat_policy *remat;
};

/* A request that is running (concurrent mode): it holds its pages until `end`. */
struct running {
	struct srt_tmgr_req *tr;
	struct srt_rdx_req *r;
	size_t idx;
	double end;
	/* rematerialization: the ordinary hit; where the window was rebuilt (0: none), past L1
	 * or not, and its cost in token-layers */
	uint64_t strict, remat, remat_cost;
	int remat_lower;
};

/*
 * Start request i and do its whole work on the cache: match (and tier loads), prefill in chunks
 * (extend, commit, release_window), decode output_length tokens. On success the request holds
 * its pages (locked) in *out until finish(). SRT_ENOMEM: it did not fit beside the running
 * requests; it was aborted and freed (why says which pool). Other errors are fatal.
 */
static int admit(struct rctx *x, size_t i, struct running *out, uint64_t *hit_out, char *why,
		 size_t whylen)
{
	const struct srt_trace_req *q = &x->t->reqs[i];
	int32_t *tok = x->tok;
	srt_trace_input_tokens(q, tok);
	struct srt_rdx_req *r = NULL;
	struct srt_tmgr_req *tr = NULL;
	uint64_t hit, strict, rt = 0, rcost = 0;
	int rc, lower = 0;
	if (x->tm) {
		struct srt_tmgr_hit th;
		rc = srt_tmgr_req_start(x->tm, tok, q->input_length, &tr, &th, why, whylen);
		if (!rc)
			rc = srt_tmgr_req_wait(tr, &th, why, whylen);
		if (rc) {
			srt_tmgr_req_free(tr);
			return rc == SRT_ENOMEM ? SRT_EIO : rc; /* a lock failure here is not a budget miss */
		}
		r = srt_tmgr_req_rdx(tr);
		hit = th.l1_tokens + th.l2_tokens + th.l3_tokens;
		strict = th.strict_tokens;
		rt = th.remat_tokens;
		rcost = th.remat_cost;
		lower = rt > th.l1_tokens;
	} else {
		if ((rc = srt_rdx_req_start_remat(x->c, tok, q->input_length, x->remat, &r, &hit, &rt,
						  why, whylen)))
			return rc == SRT_ENOMEM ? SRT_EIO : rc;
		strict = srt_rdx_req_strict_hit(r);
		rcost = rt ? x->remat->cost(x->remat->ctx, rt) : 0;
	}
	/* cache-only: the TAIL pages "rebuilt" by rematerialization join the cache */
	srt_rdx_req_remat_done(r, 1);
	int step = 0;
	for (uint64_t pos = hit; pos < q->input_length && !step; pos += x->chunk) {
		uint64_t k = q->input_length - pos < x->chunk ? q->input_length - pos : x->chunk;
		step = srt_rdx_req_extend(r, tok + pos, k, why, whylen);
		if (!step)
			step = tr ? srt_tmgr_req_commit(tr, NULL, why, whylen)
				  : srt_rdx_req_commit(r, NULL, why, whylen);
		if (!step)
			step = srt_rdx_req_release_window(r, NULL, why, whylen);
	}
	uint64_t s = mix(i | (1ull << 62));
	for (uint64_t d = 0; d < q->output_length && !step; d++) {
		int32_t tk = (int32_t)(mix(s + d) % SRT_TRACE_VOCAB);
		step = srt_rdx_req_extend(r, &tk, 1, why, whylen);
		if (!step)
			step = srt_rdx_req_release_window(r, NULL, why, whylen);
	}
	if (step) {
		srt_rdx_req_abort(r, NULL, 0);
		if (tr)
			srt_tmgr_req_free(tr);
		else
			srt_rdx_req_free(r);
		return step;
	}
	*out = (struct running){.tr = tr, .r = r, .idx = i, .strict = strict, .remat = rt,
				.remat_cost = rcost, .remat_lower = lower};
	*hit_out = hit;
	return 0;
}

/* Finish a running request (commit, unlock) and free it. */
static int finish(struct rctx *x, struct running *run, char *why, size_t whylen)
{
	int rc = run->tr ? srt_tmgr_req_finish(run->tr, NULL, why, whylen)
			 : srt_rdx_req_finish(run->r, NULL, why, whylen);
	if (run->tr)
		srt_tmgr_req_free(run->tr);
	else
		srt_rdx_req_free(run->r);
	if (!rc)
		x->res->output_tokens += x->t->reqs[run->idx].output_length;
	return rc;
}

static void count_start(struct rctx *x, size_t i, uint64_t hit, const struct running *run)
{
	x->res->requests++;
	x->res->input_tokens += x->t->reqs[i].input_length;
	x->res->hit_tokens += hit;
	x->res->strict_hit_tokens += run->strict;
	if (run->remat) {
		x->res->remat_requests++;
		x->res->remat_lower_requests += (uint64_t)run->remat_lower;
		x->res->remat_token_layers += run->remat_cost;
	}
}

/* The error for a request that does not fit the budget even with nothing else running. */
static int too_big(size_t i, const struct srt_trace_req *q, const char *why, char *err,
		   size_t errlen)
{
	snprintf(err, errlen,
		 "request %zu (trace line %zu: %llu input + %llu output tokens) does not fit the L1 "
		 "budget even with no other request running: %s; raise --budget (or lower --chunk)",
		 i, i + 1, (unsigned long long)q->input_length,
		 (unsigned long long)q->output_length, why);
	return SRT_ENOMEM;
}

/* Seconds request i holds its pages in the concurrent model. */
static double service_s(const struct srt_replay_opts *o, const struct srt_trace_req *q,
			uint64_t hit)
{
	return (double)(q->input_length - hit) / o->prefill_tps +
	       (double)q->output_length / o->decode_tps;
}

int srt_trace_replay(struct srt_rdx_cache *c, const struct srt_trace *t,
		     const struct srt_replay_opts *o, struct srt_replay_result *res, char *err,
		     size_t errlen)
{
	memset(res, 0, sizeof(*res));
	if (errlen)
		err[0] = 0;
	struct srt_replay_opts dflt = {0};
	if (!o)
		o = &dflt;
	size_t n = o->limit && o->limit < t->n ? o->limit : t->n;
	FILE *prog = o->progress;
	int tty = prog && isatty(fileno(prog));
	uint64_t maxin = 0;
	for (size_t i = 0; i < n; i++)
		if (t->reqs[i].input_length > maxin)
			maxin = t->reqs[i].input_length;
	struct rctx x = {.c = c, .t = t, .tm = o->tiers,
			 .chunk = o->chunk_tokens ? o->chunk_tokens : 8192, .res = res,
			 .remat = o->remat};
	x.tok = malloc((maxin + 1) * sizeof(int32_t));
	uint32_t maxrun = o->concurrent ? (o->max_running ? o->max_running : 64) : 1;
	struct running *run = calloc(maxrun, sizeof(*run));
	size_t *waiting = o->concurrent ? malloc((n ? n : 1) * sizeof(*waiting)) : NULL;
	if (!x.tok || !run || (o->concurrent && !waiting)) {
		free(x.tok);
		free(run);
		free(waiting);
		snprintf(err, errlen, "out of memory for %llu tokens", (unsigned long long)maxin);
		return SRT_ENOMEM;
	}
	struct srt_replay_opts co = *o;
	if (co.time_scale <= 0)
		co.time_scale = 1;
	if (co.prefill_tps <= 0)
		co.prefill_tps = 10000;
	if (co.decode_tps <= 0)
		co.decode_tps = 30;
	char why[512];
	int rc = 0;
	double t0 = now_s(), last = t0, c0 = cpu_s();
	size_t next_pct = 1, done = 0;
	/* concurrent mode state: arrivals [next, n) to come, waiting[wh, wt), running[0, nrun) */
	size_t next = 0, wh = 0, wt = 0;
	uint32_t nrun = 0;
	double now = 0, first_ts = n ? (double)t->reqs[0].timestamp_ms : 0;
	double wait_sum = 0;
	uint8_t *deferred = o->concurrent ? calloc(n ? n : 1, 1) : NULL;
	if (o->concurrent && !deferred)
		rc = SRT_ENOMEM, snprintf(why, sizeof(why), "out of memory");
	while (!rc && (o->concurrent ? (next < n || wh < wt || nrun) : next < n)) {
		if (!o->concurrent) { /* sequential: one request at a time, in arrival order */
			size_t i = next++;
			uint64_t hit;
			struct running one;
			rc = admit(&x, i, &one, &hit, why, sizeof(why));
			if (rc == SRT_ENOMEM) {
				rc = too_big(i, &t->reqs[i], why, err, errlen);
				break;
			}
			if (!rc) {
				count_start(&x, i, hit, &one);
				rc = finish(&x, &one, why, sizeof(why));
			}
			done++;
		} else {
			/* next event: the earliest end of a running request, or the next arrival */
			uint32_t first = 0;
			for (uint32_t k = 1; k < nrun; k++)
				if (run[k].end < run[first].end)
					first = k;
			double arrive = next < n ? ((double)t->reqs[next].timestamp_ms - first_ts) /
							   1000.0 * co.time_scale
						 : 0;
			if (nrun && (next >= n || run[first].end <= arrive)) {
				now = run[first].end > now ? run[first].end : now;
				rc = finish(&x, &run[first], why, sizeof(why));
				run[first] = run[--nrun];
				done++;
			} else if (next < n) {
				now = arrive > now ? arrive : now;
				waiting[wt++] = next++;
			}
			/* admit waiting requests in order while there are slots and memory */
			while (!rc && wh < wt && nrun < maxrun) {
				size_t i = waiting[wh];
				uint64_t hit;
				int a = admit(&x, i, &run[nrun], &hit, why, sizeof(why));
				if (a == SRT_ENOMEM && !nrun) {
					rc = too_big(i, &t->reqs[i], why, err, errlen);
					break;
				}
				if (a == SRT_ENOMEM) { /* memory held by running requests: wait */
					if (!deferred[i])
						res->deferred++;
					deferred[i] = 1;
					break;
				}
				if ((rc = a))
					break;
				wh++;
				count_start(&x, i, hit, &run[nrun]);
				double at = ((double)t->reqs[i].timestamp_ms - first_ts) / 1000.0 *
					    co.time_scale;
				wait_sum += now - at;
				if (now - at > res->max_wait_s)
					res->max_wait_s = now - at;
				run[nrun].end = now + service_s(&co, &t->reqs[i], hit);
				nrun++;
				if (nrun > res->peak_running)
					res->peak_running = nrun;
			}
			if (wt - wh > res->peak_waiting)
				res->peak_waiting = wt - wh;
		}
		double tn = now_s();
		if (prog && ((tty && tn - last > 0.2) || (!tty && done * 10 >= next_pct * n))) {
			fprintf(prog, "%sreplay: %zu/%zu requests, hit %.2f%%%s", tty ? "\r" : "",
				done, n,
				res->input_tokens ? 100.0 * res->hit_tokens / res->input_tokens : 0.0,
				tty ? "" : "\n");
			fflush(prog);
			last = tn;
			while (next_pct * n <= done * 10)
				next_pct++;
		}
	}
	/* an error leaves requests running: free them (the cache aborts what is left) */
	for (uint32_t k = 0; k < nrun; k++) {
		if (run[k].tr)
			srt_tmgr_req_free(run[k].tr);
		else
			srt_rdx_req_free(run[k].r);
	}
	if (prog && tty)
		fprintf(prog, "\n");
	if (x.tm) /* the wall time includes writing every queued L3 page */
		srt_tmgr_flush(x.tm);
	res->wall_s = now_s() - t0;
	res->cpu_s = cpu_s() - c0;
	res->sim_s = now;
	res->mean_wait_s = res->requests ? wait_sum / (double)res->requests : 0;
	free(deferred);
	free(waiting);
	free(run);
	free(x.tok);
	if (rc) {
		if (rc != SRT_ENOMEM || !err[0])
			snprintf(err, errlen, "request %zu: %s", done, why);
		return rc;
	}
	res->ceiling_tokens = srt_trace_ceiling(t, n, srt_rdx_page_tokens(c));
	return 0;
}
