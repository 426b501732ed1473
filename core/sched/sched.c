/* The scheduler (sched.h): queues, batch building, memory, sampling and output. */
#include "sched/sched.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shadowrt/plugin.h>

#include "exec/engine.h"
#include "exec/sampler.h"
#include "radix/radix.h"
#include "tier/manager.h"

const double srt_sched_buckets[SRT_SCHED_NBUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
};

struct srt_sched_req {
	struct srt_sched *s;
	int refs;       /* under s->mu: the client's and the scheduler's */
	int client;     /* 1 while the client holds its handle */
	uint64_t id;
	struct srt_sched_params p; /* stop strings point into stop_buf, stop_ids into own copy */
	char *stop_buf;
	int32_t *stop_ids;
	size_t max_stop;           /* longest stop string */
	struct srt_sampler smp;

	/* prompt + generated ids: written by the scheduler thread under mu */
	int32_t *toks;
	uint64_t ntoks, cap, n_prompt;
	/* scheduler thread only */
	struct srt_seq *seq;
	uint64_t computed, admitted;
	void *dstate;
	int cancel_seen; /* cancel as read at the start of the step */
	int loading;     /* admitted, its L2/L3 loads not yet waited for (runs next step) */

	/* under mu */
	int state, finish, cancel;
	char error[256];
	char *text;
	size_t tlen, tcap, emit;
	uint64_t cached, cached_tier[3];
	int started;
	uint32_t preemptions;
	double t_submit, t_first, t_last;

	struct srt_sched_req *next; /* waiting queue (under mu) */
};

struct pool_info {
	uint64_t page_bytes, budget;
	uint32_t retention, tail_pages;
};

struct item {
	struct srt_sched_req *r;
	int32_t n;
	int fresh; /* admitted in this step */
};

struct srt_sched {
	struct srt_engine *e;
	struct srt_rdx_cache *cache;
	int token_budget, max_running, max_waiting, chunk;
	uint64_t max_context;
	int32_t vocab, eos;
	uint32_t P, n_pools;
	struct pool_info pools[SRT_RDX_MAX_POOLS];
	struct srt_sched_detok detok;
	int has_detok;

	pthread_t thread;
	int thread_started;
	pthread_mutex_t mu;
	pthread_cond_t cv_work; /* the scheduler waits for work */
	pthread_cond_t cv_out;  /* clients wait for output */
	pthread_mutex_t notify_mu;

	/* under mu */
	struct srt_sched_req *wait_head, *wait_tail;
	uint64_t n_waiting;
	int shutdown, cancel_all;
	uint64_t next_id;
	struct srt_sched_stats st;

	/* scheduler thread only */
	struct srt_sched_req **running;
	int n_running;
	uint64_t admit_seq;
	struct item *batch;
	float *logits;
	void *scratch;
	float *masked;
	struct srt_sched_req **notify;
	int n_notify, cap_notify;
	struct srt_sched_req **back; /* going back to the queue this step (2 * max_running) */
	int n_back;
	struct srt_sched_req **cand; /* admission candidates (max_running) */
	const int32_t **fw_toks;
	int32_t *fw_n;
	struct srt_seq **fw_seqs;
	int32_t *sampled;
	int idle;
};

static void seterr(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t len, const char *fmt, ...)
{
	if (!err || !len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *srt_sched_finish_name(int finish)
{
	switch (finish) {
	case SRT_SCHED_LENGTH: return "length";
	case SRT_SCHED_STOP: return "stop";
	case SRT_SCHED_CANCELLED: return "cancelled";
	case SRT_SCHED_ERROR: return "error";
	default: return NULL;
	}
}

static void hist_add(struct srt_sched_hist *h, double v)
{
	int b = 0;
	while (b < SRT_SCHED_NBUCKETS && v > srt_sched_buckets[b])
		b++;
	h->count[b]++;
	h->sum += v;
	h->n++;
}

/* --- requests: lifetime --------------------------------------------------------------- */

static void req_free(struct srt_sched_req *r)
{
	free(r->stop_buf);
	free(r->stop_ids);
	free(r->toks);
	free(r->text);
	free(r);
}

/* drop one reference (caller holds mu); returns 1 when the caller must free r (after unlock) */
static int req_unref_locked(struct srt_sched_req *r)
{
	return --r->refs == 0;
}

/* --- sampling --------------------------------------------------------------------------- */

/* k-th largest value of v[0..n) (1 <= k <= n), by quickselect on a copy in tmp */
static float kth_largest(const float *v, int32_t n, int32_t k, float *tmp)
{
	int32_t m = 0;
	for (int32_t i = 0; i < n; i++)
		tmp[m++] = isnan(v[i]) ? -INFINITY : v[i];
	int32_t lo = 0, hi = m - 1, want = k - 1; /* index in descending order */
	while (lo < hi) {
		float piv = tmp[lo + (hi - lo) / 2];
		int32_t i = lo, j = hi;
		while (i <= j) {
			while (tmp[i] > piv)
				i++;
			while (tmp[j] < piv)
				j--;
			if (i <= j) {
				float t = tmp[i];
				tmp[i] = tmp[j];
				tmp[j] = t;
				i++;
				j--;
			}
		}
		if (want <= j)
			hi = j;
		else if (want >= i)
			lo = i;
		else
			break;
	}
	return tmp[want];
}

static int32_t sample(struct srt_sched *s, struct srt_sched_req *r, const float *logits)
{
	int32_t V = s->vocab, k = r->p.top_k;
	if (r->smp.temperature <= 0.0f || k <= 0 || k >= V)
		return srt_sample(&r->smp, logits, V, s->scratch);
	/* top-k: keep the k largest logits (ties toward the lower id), the rest become -inf */
	float *m = s->masked, thr = kth_largest(logits, V, k, m);
	int32_t above = 0;
	for (int32_t i = 0; i < V; i++)
		if (logits[i] > thr)
			above++;
	int32_t ties = k - above;
	for (int32_t i = 0; i < V; i++) {
		float x = logits[i];
		if (x > thr)
			m[i] = x;
		else if (x == thr && ties > 0) {
			m[i] = x;
			ties--;
		} else
			m[i] = -INFINITY;
	}
	return srt_sample(&r->smp, m, V, s->scratch);
}

/* --- submit / client side --------------------------------------------------------------- */

static int fits_alone(const struct srt_sched *s, uint64_t total, char *err, size_t errlen)
{
	uint64_t pages = (total + s->P - 1) / s->P;
	uint64_t chunk_pages = ((uint64_t)s->chunk + s->P - 1) / s->P;
	for (uint32_t i = 0; i < s->n_pools; i++) {
		const struct pool_info *pi = &s->pools[i];
		if (pi->budget == SRT_RDX_UNBOUNDED)
			continue;
		uint64_t n = pages;
		if (pi->retention != SRT_RETAIN_ALL && n > pi->tail_pages + chunk_pages + 2)
			n = pi->tail_pages + chunk_pages + 2;
		if (n * pi->page_bytes > pi->budget) {
			seterr(err, errlen,
			       "%llu tokens need %llu bytes of L1 KV cache in pool %u, over its "
			       "budget of %llu bytes",
			       (unsigned long long)total, (unsigned long long)(n * pi->page_bytes), i,
			       (unsigned long long)pi->budget);
			return SRT_ENOMEM;
		}
	}
	return 0;
}

int srt_sched_submit(struct srt_sched *s, const int32_t *prompt, uint64_t n,
		     const struct srt_sched_params *p, struct srt_sched_req **out, char *err,
		     size_t errlen)
{
	*out = NULL;
	if (n == 0) {
		seterr(err, errlen, "empty prompt");
		return SRT_EINVAL;
	}
	for (uint64_t i = 0; i < n; i++)
		if (prompt[i] < 0 || prompt[i] >= s->vocab) {
			seterr(err, errlen, "token id %d at prompt index %llu is outside the "
			       "vocabulary [0, %d)", prompt[i], (unsigned long long)i, s->vocab);
			return SRT_EINVAL;
		}
	if (p->max_tokens < 1) {
		seterr(err, errlen, "max_tokens must be at least 1");
		return SRT_EINVAL;
	}
	if (n >= s->max_context || (uint64_t)p->max_tokens > s->max_context - n) {
		seterr(err, errlen, "this model's context is %llu tokens; the prompt has %llu and "
		       "max_tokens asks for %u more", (unsigned long long)s->max_context,
		       (unsigned long long)n, p->max_tokens);
		return SRT_EINVAL;
	}
	if (!(p->temperature >= 0.0f) || !isfinite(p->temperature) || !(p->top_p > 0.0f) ||
	    p->top_p > 1.0f) {
		seterr(err, errlen, "temperature must be >= 0 and top_p in (0, 1]");
		return SRT_EINVAL;
	}
	if (p->n_stop < 0 || p->n_stop > SRT_SCHED_MAX_STOP || p->n_stop_ids < 0 ||
	    p->n_stop_ids > 4096) {
		seterr(err, errlen, "at most %d stop strings and 4096 stop ids", SRT_SCHED_MAX_STOP);
		return SRT_EINVAL;
	}
	if (p->n_stop && !s->has_detok) {
		seterr(err, errlen, "stop strings need a tokenizer; this model has none");
		return SRT_EINVAL;
	}
	int rc = fits_alone(s, n + p->max_tokens, err, errlen);
	if (rc)
		return rc;
	struct srt_sched_req *r = calloc(1, sizeof(*r));
	if (!r)
		goto oom;
	r->s = s;
	r->p = *p;
	r->cap = n + (p->max_tokens < 64 ? p->max_tokens : 64);
	if (!(r->toks = malloc(sizeof(int32_t) * r->cap)))
		goto oom;
	memcpy(r->toks, prompt, sizeof(int32_t) * n);
	r->ntoks = r->n_prompt = n;
	size_t sbytes = 0;
	for (int i = 0; i < p->n_stop; i++) {
		size_t l = strlen(p->stop[i]);
		if (l == 0 || l > 256) {
			free(r->toks);
			free(r);
			seterr(err, errlen, "stop string %d: must be 1 to 256 bytes", i);
			return SRT_EINVAL;
		}
		sbytes += l + 1;
		if (l > r->max_stop)
			r->max_stop = l;
	}
	if (sbytes) {
		if (!(r->stop_buf = malloc(sbytes)))
			goto oom;
		char *q = r->stop_buf;
		for (int i = 0; i < p->n_stop; i++) {
			size_t l = strlen(p->stop[i]) + 1;
			memcpy(q, p->stop[i], l);
			r->p.stop[i] = q;
			q += l;
		}
	}
	if (p->n_stop_ids) {
		if (!(r->stop_ids = malloc(sizeof(int32_t) * (size_t)p->n_stop_ids)))
			goto oom;
		memcpy(r->stop_ids, p->stop_ids, sizeof(int32_t) * (size_t)p->n_stop_ids);
	}
	r->p.stop_ids = r->stop_ids;
	srt_sampler_init(&r->smp, p->temperature, p->top_p, p->seed);
	r->refs = 2;
	r->client = 1;
	r->t_submit = now();
	pthread_mutex_lock(&s->mu);
	if (s->shutdown || s->n_waiting >= (uint64_t)s->max_waiting) {
		int down = s->shutdown;
		s->st.rejected++;
		pthread_mutex_unlock(&s->mu);
		req_free(r);
		seterr(err, errlen, down ? "the server is shutting down"
					 : "too many requests queued (%d); try again later",
		       s->max_waiting);
		return SRT_EBUSY;
	}
	r->id = ++s->next_id;
	if (s->wait_tail)
		s->wait_tail->next = r;
	else
		s->wait_head = r;
	s->wait_tail = r;
	s->n_waiting++;
	s->idle = 0;
	s->st.submitted++;
	s->st.prompt_tokens += n;
	s->st.waiting = s->n_waiting;
	pthread_cond_signal(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
	*out = r;
	return 0;
oom:
	if (r) {
		free(r->stop_buf);
		free(r->toks);
		free(r);
	}
	seterr(err, errlen, "out of memory");
	return SRT_ENOMEM;
}

void srt_sched_cancel(struct srt_sched_req *r)
{
	if (!r)
		return;
	struct srt_sched *s = r->s;
	pthread_mutex_lock(&s->mu);
	if (r->state != SRT_SCHED_DONE) {
		r->cancel = 1;
		pthread_cond_signal(&s->cv_work);
	}
	pthread_mutex_unlock(&s->mu);
}

void srt_sched_release(struct srt_sched_req *r)
{
	if (!r)
		return;
	struct srt_sched *s = r->s;
	/* after this no notify callback is running or will run for r */
	pthread_mutex_lock(&s->notify_mu);
	pthread_mutex_lock(&s->mu);
	r->p.notify = NULL;
	r->client = 0;
	pthread_mutex_unlock(&s->notify_mu);
	if (r->state != SRT_SCHED_DONE) {
		r->cancel = 1;
		pthread_cond_signal(&s->cv_work);
	}
	int last = req_unref_locked(r);
	pthread_mutex_unlock(&s->mu);
	if (last)
		req_free(r);
}

static void info_locked(const struct srt_sched_req *r, struct srt_sched_info *o)
{
	o->state = r->state;
	o->finish = r->finish;
	o->prompt_tokens = r->n_prompt;
	o->generated = r->ntoks - r->n_prompt;
	o->text_len = r->emit;
	o->cached_tokens = r->cached;
	memcpy(o->cached_tier, r->cached_tier, sizeof(o->cached_tier));
	o->preemptions = r->preemptions;
	o->t_submit = r->t_submit;
	o->t_first = r->t_first;
	o->t_last = r->t_last;
	memcpy(o->error, r->error, sizeof(o->error));
}

void srt_sched_poll(struct srt_sched_req *r, struct srt_sched_info *out)
{
	pthread_mutex_lock(&r->s->mu);
	info_locked(r, out);
	pthread_mutex_unlock(&r->s->mu);
}

size_t srt_sched_tokens(struct srt_sched_req *r, uint64_t from, int32_t *buf, size_t cap)
{
	size_t n = 0;
	pthread_mutex_lock(&r->s->mu);
	uint64_t gen = r->ntoks - r->n_prompt;
	if (from < gen) {
		n = (size_t)(gen - from) < cap ? (size_t)(gen - from) : cap;
		memcpy(buf, r->toks + r->n_prompt + from, sizeof(int32_t) * n);
	}
	pthread_mutex_unlock(&r->s->mu);
	return n;
}

size_t srt_sched_text(struct srt_sched_req *r, size_t from, char *buf, size_t cap)
{
	size_t n = 0;
	pthread_mutex_lock(&r->s->mu);
	if (from < r->emit) {
		n = r->emit - from < cap ? r->emit - from : cap;
		memcpy(buf, r->text + from, n);
	}
	pthread_mutex_unlock(&r->s->mu);
	return n;
}

void srt_sched_wait(struct srt_sched_req *r, uint64_t generated, size_t text_len,
		    struct srt_sched_info *out)
{
	struct srt_sched *s = r->s;
	pthread_mutex_lock(&s->mu);
	while (r->state != SRT_SCHED_DONE && r->ntoks - r->n_prompt <= generated &&
	       r->emit <= text_len)
		pthread_cond_wait(&s->cv_out, &s->mu);
	info_locked(r, out);
	pthread_mutex_unlock(&s->mu);
}

void srt_sched_stats(struct srt_sched *s, struct srt_sched_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = s->st;
	pthread_mutex_unlock(&s->mu);
}

/* --- the scheduler thread --------------------------------------------------------------- */

/* Ask for r's notify callback after this step (caller holds mu; the list holds a ref). */
static void want_notify(struct srt_sched *s, struct srt_sched_req *r)
{
	for (int i = 0; i < s->n_notify; i++)
		if (s->notify[i] == r)
			return;
	if (s->n_notify == s->cap_notify) {
		int cap = s->cap_notify ? s->cap_notify * 2 : 64;
		struct srt_sched_req **n = realloc(s->notify, sizeof(*n) * (size_t)cap);
		if (!n)
			return; /* clients still wake on cv_out; only the callback is lost */
		s->notify = n;
		s->cap_notify = cap;
	}
	r->refs++;
	s->notify[s->n_notify++] = r;
}

/* Mark r done (caller holds mu); frees nothing of the engine's. */
static void done_locked(struct srt_sched *s, struct srt_sched_req *r, int finish, const char *msg)
{
	if (r->state == SRT_SCHED_DONE)
		return;
	r->emit = r->tlen; /* a stop string cut tlen already */
	if (msg)
		snprintf(r->error, sizeof(r->error), "%s", msg);
	r->state = SRT_SCHED_DONE;
	r->finish = finish;
	s->st.finished[finish]++;
	if (finish == SRT_SCHED_LENGTH || finish == SRT_SCHED_STOP)
		hist_add(&s->st.e2e, now() - r->t_submit);
	want_notify(s, r);
}

/* Free the request's engine sequence (scheduler thread). finish = 1 inserts its pages. */
static void drop_seq(struct srt_sched *s, struct srt_sched_req *r, int finish)
{
	(void)s;
	if (!r->seq)
		return;
	if (finish) {
		char err[512];
		/* a failed insert only loses cache entries; the tokens are already out */
		(void)srt_engine_seq_finish(r->seq, NULL, err, sizeof(err));
	}
	srt_engine_seq_free(r->seq);
	r->seq = NULL;
	r->computed = 0;
	r->loading = 0;
}

static void remove_running(struct srt_sched *s, struct srt_sched_req *r)
{
	for (int i = 0; i < s->n_running; i++)
		if (s->running[i] == r) {
			memmove(&s->running[i], &s->running[i + 1],
				sizeof(*s->running) * (size_t)(s->n_running - i - 1));
			s->n_running--;
			return;
		}
}

/* The scheduler's reference is dropped; frees r if the client released it already. */
static void sched_unref(struct srt_sched *s, struct srt_sched_req *r)
{
	if (r->dstate) {
		s->detok.close(r->dstate);
		r->dstate = NULL;
	}
	pthread_mutex_lock(&s->mu);
	int last = req_unref_locked(r);
	pthread_mutex_unlock(&s->mu);
	if (last)
		req_free(r);
}

/* Finish a running request: insert its pages, mark it done, drop it. */
static void finish_running(struct srt_sched *s, struct srt_sched_req *r, int finish, int insert,
			   const char *msg)
{
	drop_seq(s, r, insert);
	remove_running(s, r);
	pthread_mutex_lock(&s->mu);
	done_locked(s, r, finish, msg);
	pthread_mutex_unlock(&s->mu);
}

static int by_id(const void *a, const void *b)
{
	const struct srt_sched_req *x = *(struct srt_sched_req *const *)a;
	const struct srt_sched_req *y = *(struct srt_sched_req *const *)b;
	return (x->id > y->id) - (x->id < y->id);
}

/* Put s->back[0..n_back) at the front of the waiting queue, oldest first (arrival order is
 * the queue's order, so a preempted request goes before the ones that came after it). */
static void requeue_back(struct srt_sched *s)
{
	if (!s->n_back)
		return;
	qsort(s->back, (size_t)s->n_back, sizeof(*s->back), by_id);
	pthread_mutex_lock(&s->mu);
	for (int i = s->n_back - 1; i >= 0; i--) {
		struct srt_sched_req *r = s->back[i];
		r->state = SRT_SCHED_WAITING;
		r->next = s->wait_head;
		s->wait_head = r;
		if (!s->wait_tail)
			s->wait_tail = r;
		s->n_waiting++;
	}
	pthread_mutex_unlock(&s->mu);
	s->n_back = 0;
}

/* Preempt r: free its sequence (its committed pages stay cached); it goes back to the queue. */
static void preempt(struct srt_sched *s, struct srt_sched_req *r)
{
	drop_seq(s, r, 0);
	remove_running(s, r);
	pthread_mutex_lock(&s->mu);
	r->preemptions++;
	s->st.preemptions++;
	pthread_mutex_unlock(&s->mu);
	s->back[s->n_back++] = r;
}

static uint64_t lcp(const int32_t *a, uint64_t na, const int32_t *b, uint64_t nb)
{
	uint64_t n = na < nb ? na : nb, i = 0;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* 1 when a running request is computing a prefix of at least one page that w shares */
static int shares_inflight_prefix(const struct srt_sched *s, const struct srt_sched_req *w)
{
	uint64_t P = s->P, wmax = (w->ntoks - 1) / P * P;
	if (wmax < P)
		return 0;
	for (int i = 0; i < s->n_running; i++) {
		const struct srt_sched_req *r = s->running[i];
		if (r->computed >= r->ntoks - 1)
			continue;
		uint64_t c = lcp(w->toks, w->ntoks, r->toks, r->ntoks) / P * P;
		if (c > wmax)
			c = wmax;
		if (c >= P && r->computed < c)
			return 1;
	}
	return 0;
}

/* L1 pages [len, len + n) allocates beyond the pages already held */
static uint64_t new_pages(uint32_t P, uint64_t len, uint64_t n)
{
	return (len + n + P - 1) / P - (len + P - 1) / P;
}

/* Make room in every pool for the batch; 0 or SRT_ENOMEM (room could not be made). */
static int make_room(struct srt_sched *s, int nb)
{
	uint64_t pages = 0;
	for (int i = 0; i < nb; i++)
		pages += new_pages(s->P, s->batch[i].r->computed, (uint64_t)s->batch[i].n);
	if (!pages)
		return 0;
	for (uint32_t p = 0; p < s->n_pools; p++) {
		const struct pool_info *pi = &s->pools[p];
		if (pi->budget == SRT_RDX_UNBOUNDED)
			continue;
		uint64_t need = pages * pi->page_bytes;
		if (need > pi->budget)
			return SRT_ENOMEM;
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(s->cache, p, &st);
		if (st.bytes + need <= pi->budget)
			continue;
		if (srt_rdx_evict(s->cache, p, pi->budget - need, NULL))
			return SRT_ENOMEM;
	}
	return 0;
}

static void snapshot_stats(struct srt_sched *s)
{
	struct srt_sched_stats *st = &s->st;
	struct srt_tmgr *tm = srt_engine_tiers(s->e);
	struct srt_tmgr_stats ts;
	if (tm)
		srt_tmgr_stats(tm, &ts);
	struct srt_rdx_pool_stats ps[SRT_SCHED_MAX_POOLS];
	uint32_t np = s->n_pools < SRT_SCHED_MAX_POOLS ? s->n_pools : SRT_SCHED_MAX_POOLS;
	for (uint32_t p = 0; p < np; p++)
		srt_rdx_pool_stats(s->cache, p, &ps[p]);
	pthread_mutex_lock(&s->mu);
	st->n_pools = np;
	for (uint32_t p = 0; p < np; p++) {
		snprintf(st->pools[p].name, sizeof(st->pools[p].name), "%s", ps[p].name);
		st->pools[p].bytes = ps[p].bytes;
		st->pools[p].budget = ps[p].budget;
		st->pools[p].peak = ps[p].peak_bytes;
		st->pools[p].evicted_pages = ps[p].evicted_pages;
	}
	st->has_tiers = tm != NULL;
	if (tm) {
		st->l2_bytes = ts.l2_bytes;
		st->l3_bytes = ts.l3_bytes;
		st->l3_objects = ts.l3_objects;
		memcpy(st->tier_hit_tokens, ts.hit_tokens, sizeof(st->tier_hit_tokens));
		st->demoted_l1_l2 = ts.pages_l1_to_l2;
		st->demoted_l1_l3 = ts.pages_l1_to_l3;
		st->demoted_l2_l3 = ts.pages_l2_to_l3;
		st->promoted_l2_l1 = ts.pages_l2_to_l1;
		st->promoted_l3_l1 = ts.pages_l3_to_l1;
	}
	st->running = (uint64_t)s->n_running;
	st->waiting = s->n_waiting;
	pthread_mutex_unlock(&s->mu);
}

/* Append the sampled token to r, update its text, decide whether it is finished. Caller holds
 * mu. Returns the finish reason or SRT_SCHED_NOT_DONE. */
static int take_token_locked(struct srt_sched *s, struct srt_sched_req *r, int32_t tok, double t)
{
	if (r->ntoks == r->cap) {
		uint64_t cap = r->cap * 2;
		int32_t *n = realloc(r->toks, sizeof(int32_t) * cap);
		if (!n) {
			snprintf(r->error, sizeof(r->error), "out of memory (output tokens)");
			return SRT_SCHED_ERROR;
		}
		r->toks = n;
		r->cap = cap;
	}
	r->toks[r->ntoks++] = tok;
	uint64_t gen = r->ntoks - r->n_prompt;
	s->st.generated_tokens++;
	if (gen == 1) {
		r->t_first = t;
		hist_add(&s->st.ttft, t - r->t_submit);
	} else {
		hist_add(&s->st.itl, t - r->t_last);
	}
	r->t_last = t;
	int is_stop_id = !r->p.ignore_eos && tok == s->eos;
	for (int i = 0; i < r->p.n_stop_ids && !is_stop_id; i++)
		is_stop_id = tok == r->stop_ids[i];
	if (is_stop_id)
		return SRT_SCHED_STOP;
	if (r->dstate) {
		size_t old = r->tlen;
		if (s->detok.feed(r->dstate, tok, &r->text, &r->tlen, &r->tcap)) {
			snprintf(r->error, sizeof(r->error), "out of memory (output text)");
			return SRT_SCHED_ERROR;
		}
		for (int i = 0; i < r->p.n_stop; i++) {
			size_t l = strlen(r->p.stop[i]);
			if (r->tlen < l)
				continue;
			size_t from = old >= l - 1 ? old - (l - 1) : 0;
			for (size_t k = from; k + l <= r->tlen; k++)
				if (!memcmp(r->text + k, r->p.stop[i], l)) {
					r->tlen = k; /* the text ends before the stop string */
					if (r->emit > k)
						r->emit = k; /* cannot happen: held back below */
					return SRT_SCHED_STOP;
				}
		}
		/* emit all but what could be the start of a stop string, on a UTF-8 boundary */
		size_t hold = r->max_stop ? r->max_stop - 1 : 0;
		size_t e = r->tlen > hold ? r->tlen - hold : 0;
		while (e > r->emit && e < r->tlen && ((unsigned char)r->text[e] & 0xC0) == 0x80)
			e--;
		if (e > r->emit)
			r->emit = e;
	}
	if (gen >= r->p.max_tokens || r->ntoks >= s->max_context)
		return SRT_SCHED_LENGTH;
	return SRT_SCHED_NOT_DONE;
}

/* Fail r (any state but in a list of the caller's) with msg and drop the scheduler's ref. */
static void fail(struct srt_sched *s, struct srt_sched_req *r, const char *msg)
{
	drop_seq(s, r, 0);
	remove_running(s, r);
	pthread_mutex_lock(&s->mu);
	done_locked(s, r, SRT_SCHED_ERROR, msg);
	pthread_mutex_unlock(&s->mu);
	sched_unref(s, r);
}

static void add_item(struct srt_sched *s, int *nb, struct srt_sched_req *r, int32_t n, int fresh)
{
	s->batch[*nb].r = r;
	s->batch[*nb].n = n;
	s->batch[*nb].fresh = fresh;
	(*nb)++;
}

static void remove_item(struct srt_sched *s, int *nb, int i)
{
	memmove(&s->batch[i], &s->batch[i + 1], sizeof(*s->batch) * (size_t)(*nb - i - 1));
	(*nb)--;
}

/* Wake waiters and run the notify callbacks of this step's changes. */
static void publish(struct srt_sched *s)
{
	snapshot_stats(s);
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->cv_out);
	pthread_mutex_unlock(&s->mu);
	if (!s->n_notify)
		return;
	pthread_mutex_lock(&s->notify_mu);
	for (int i = 0; i < s->n_notify; i++) {
		struct srt_sched_req *r = s->notify[i];
		pthread_mutex_lock(&s->mu);
		void (*cb)(void *) = r->p.notify;
		void *user = r->p.user;
		pthread_mutex_unlock(&s->mu);
		if (cb)
			cb(user);
	}
	pthread_mutex_unlock(&s->notify_mu);
	for (int i = 0; i < s->n_notify; i++) {
		struct srt_sched_req *r = s->notify[i];
		pthread_mutex_lock(&s->mu);
		int last = req_unref_locked(r);
		pthread_mutex_unlock(&s->mu);
		if (last)
			req_free(r);
	}
	s->n_notify = 0;
}

/* One step; returns 0 to go on, 1 when the thread should exit. */
/* r's sequence is ready at its hit: computed = hit, the hit counted at its first start */
static void took_hit(struct srt_sched *s, struct srt_sched_req *r, uint64_t hit)
{
	uint64_t tiers[3];
	srt_seq_hit_tiers(r->seq, tiers);
	r->computed = hit;
	pthread_mutex_lock(&s->mu);
	if (!r->started) {
		r->started = 1;
		r->cached = hit;
		memcpy(r->cached_tier, tiers, sizeof(tiers));
		for (int t = 0; t < 3; t++)
			s->st.hit_tokens[t] += tiers[t];
	}
	pthread_mutex_unlock(&s->mu);
}

/*
 * Wait for the loads of the requests admitted while their L2/L3 pages were loading (they
 * overlapped the previous step's forward). A request whose wait fails is failed; its hit may
 * have fallen back to a shorter prefix (tier/manager.h), which is where it resumes.
 */
static void finish_loads(struct srt_sched *s)
{
	char err[1024];
	for (int i = 0; i < s->n_running;) {
		struct srt_sched_req *r = s->running[i];
		if (!r->loading) {
			i++;
			continue;
		}
		uint64_t hit = 0;
		r->loading = 0;
		pthread_mutex_lock(&s->mu);
		s->st.overlapped_loads++;
		pthread_mutex_unlock(&s->mu);
		if (srt_engine_seq_wait(r->seq, &hit, err, sizeof(err))) {
			fail(s, r, err); /* leaves running[] */
			continue;
		}
		took_hit(s, r, hit);
		i++;
	}
}

static int step(struct srt_sched *s)
{
	char err[1024];
	struct srt_sched_req *dead = NULL;
	int n_cand = 0;

	/* 1. cancellations, shutdown, and the candidates for admission */
	pthread_mutex_lock(&s->mu);
	for (;;) {
		if (s->cancel_all) {
			for (struct srt_sched_req *w = s->wait_head; w; w = w->next)
				w->cancel = 1;
			for (int i = 0; i < s->n_running; i++)
				s->running[i]->cancel = 1;
		}
		struct srt_sched_req **pp = &s->wait_head, *last = NULL;
		while (*pp) {
			struct srt_sched_req *w = *pp;
			if (w->cancel) {
				*pp = w->next;
				s->n_waiting--;
				done_locked(s, w, SRT_SCHED_CANCELLED, NULL);
				w->next = dead;
				dead = w;
				continue;
			}
			last = w;
			pp = &w->next;
		}
		s->wait_tail = last;
		int any_cancel = 0;
		for (int i = 0; i < s->n_running; i++)
			any_cancel |= s->running[i]->cancel_seen = s->running[i]->cancel;
		if (s->n_running || s->n_waiting || dead)
			break;
		s->st.waiting = 0;
		s->st.running = 0;
		s->idle = 1;
		pthread_cond_broadcast(&s->cv_out);
		if (s->shutdown) {
			pthread_mutex_unlock(&s->mu);
			return 1;
		}
		pthread_cond_wait(&s->cv_work, &s->mu);
		s->idle = 0;
		(void)any_cancel;
	}
	int room = s->max_running - s->n_running;
	for (int i = 0; i < s->n_running; i++)
		room += s->running[i]->cancel_seen; /* cancelled ones leave now */
	while (n_cand < room && s->wait_head) {
		struct srt_sched_req *w = s->wait_head;
		s->wait_head = w->next;
		w->next = NULL;
		s->n_waiting--;
		s->cand[n_cand++] = w;
	}
	if (!s->wait_head)
		s->wait_tail = NULL;
	pthread_mutex_unlock(&s->mu);

	while (dead) {
		struct srt_sched_req *w = dead;
		dead = w->next;
		sched_unref(s, w);
	}
	for (int i = 0; i < s->n_running;) {
		struct srt_sched_req *r = s->running[i];
		if (!r->cancel_seen) {
			i++;
			continue;
		}
		r->cancel_seen = 0;
		finish_running(s, r, SRT_SCHED_CANCELLED, 0, NULL);
		sched_unref(s, r);
	}

	/* 2. the batch: decode rows, running prefills, then admissions */
	finish_loads(s);
	int nb = 0, left = s->token_budget, mem_blocked = 0;
	for (int i = 0; i < s->n_running; i++) {
		struct srt_sched_req *r = s->running[i];
		if (r->ntoks - r->computed == 1) {
			add_item(s, &nb, r, 1, 0);
			left--;
		}
	}
	for (int i = 0; i < s->n_running && left > 0; i++) {
		struct srt_sched_req *r = s->running[i];
		uint64_t pend = r->ntoks - r->computed;
		if (pend <= 1)
			continue;
		int32_t c = (int32_t)(pend < (uint64_t)s->chunk ? pend : (uint64_t)s->chunk);
		if (c > left)
			c = left;
		add_item(s, &nb, r, c, 0);
		left -= c;
	}
	for (int k = 0; k < n_cand; k++) {
		struct srt_sched_req *w = s->cand[k];
		if (mem_blocked || left <= 0 || s->n_running >= s->max_running) {
			s->back[s->n_back++] = w;
			continue;
		}
		if (shares_inflight_prefix(s, w)) {
			pthread_mutex_lock(&s->mu);
			s->st.deferred_for_prefix++;
			pthread_mutex_unlock(&s->mu);
			s->back[s->n_back++] = w;
			continue;
		}
		uint64_t hit = 0;
		/* begin: a hit in L2/L3 loads in the tier manager's thread from here on */
		int rc = srt_engine_seq_begin(s->e, w->toks, w->ntoks, 1, &w->seq, &hit, err,
					      sizeof(err));
		if (rc == SRT_ENOMEM) {
			mem_blocked = 1;
			s->back[s->n_back++] = w;
			continue;
		}
		if (rc) {
			fail(s, w, err);
			continue;
		}
		if (s->has_detok && !w->dstate && !(w->dstate = s->detok.open(s->detok.ctx))) {
			fail(s, w, "out of memory (detokenizer)");
			continue;
		}
		w->admitted = ++s->admit_seq;
		s->running[s->n_running++] = w;
		pthread_mutex_lock(&s->mu);
		w->state = SRT_SCHED_RUNNING;
		pthread_mutex_unlock(&s->mu);
		if (srt_seq_loading(w->seq)) {
			if (nb > 0) {
				/* this step computes others: the load overlaps that forward, and the
				 * request joins the batch at the next step (finish_loads) */
				w->loading = 1;
				continue;
			}
			/* nothing else to compute: nothing to overlap, wait now */
			if ((rc = srt_engine_seq_wait(w->seq, &hit, err, sizeof(err)))) {
				fail(s, w, err);
				continue;
			}
		}
		took_hit(s, w, hit);
		uint64_t pend = w->ntoks - w->computed;
		int32_t c = (int32_t)(pend < (uint64_t)s->chunk ? pend : (uint64_t)s->chunk);
		if (c > left)
			c = left;
		add_item(s, &nb, w, c, 1);
		left -= c;
	}

	/* 3. memory: make room, else shrink the batch, else preempt */
	while (nb > 0 && make_room(s, nb)) {
		struct item *it = &s->batch[nb - 1];
		mem_blocked = 1;
		if (it->fresh) {
			struct srt_sched_req *r = it->r;
			drop_seq(s, r, 0);
			remove_running(s, r);
			s->back[s->n_back++] = r;
			nb--;
			continue;
		}
		if (it->r->ntoks - it->r->computed > 1 && nb > 1) {
			nb--; /* a running prefill waits for the next step */
			continue;
		}
		/* only decode rows or one prefill: preempt the request admitted last */
		struct srt_sched_req *v = s->running[0];
		for (int i = 1; i < s->n_running; i++)
			if (s->running[i]->admitted > v->admitted)
				v = s->running[i];
		for (int i = 0; i < nb; i++)
			if (s->batch[i].r == v) {
				remove_item(s, &nb, i);
				break;
			}
		preempt(s, v);
	}
	if (nb == 0 && s->n_running == 0 && mem_blocked && s->n_back) {
		/* nothing runs and the oldest request still does not fit: it never will */
		qsort(s->back, (size_t)s->n_back, sizeof(*s->back), by_id);
		struct srt_sched_req *r = s->back[0];
		memmove(&s->back[0], &s->back[1], sizeof(*s->back) * (size_t)(s->n_back - 1));
		s->n_back--;
		fail(s, r, "the request needs more KV cache than the L1 budget holds");
	}
	requeue_back(s);
	if (nb == 0) {
		publish(s);
		return 0;
	}

	/* 4. the forward */
	for (int i = 0; i < nb; i++) {
		struct srt_sched_req *r = s->batch[i].r;
		s->fw_seqs[i] = r->seq;
		s->fw_toks[i] = r->toks + r->computed;
		s->fw_n[i] = s->batch[i].n;
	}
	int rc = srt_engine_forward(s->e, s->fw_seqs, (uint32_t)nb, s->fw_toks, s->fw_n,
				    s->logits, 0, err, sizeof(err));
	if (rc) {
		int alone = nb == 1 && s->n_running == 1;
		for (int i = 0; i < nb; i++) {
			struct srt_sched_req *r = s->batch[i].r;
			if (rc == SRT_ENOMEM && !alone)
				preempt(s, r); /* resumes from the cache later */
			else
				fail(s, r, err);
		}
		requeue_back(s);
		publish(s);
		return 0;
	}
	uint64_t rows = 0;
	for (int i = 0; i < nb; i++) {
		struct srt_sched_req *r = s->batch[i].r;
		r->computed += (uint64_t)s->batch[i].n;
		rows += (uint64_t)s->batch[i].n;
		s->sampled[i] = -1;
		if (r->computed == r->ntoks)
			s->sampled[i] = sample(s, r, s->logits + (size_t)i * (size_t)s->vocab);
	}

	/* 5. outputs */
	double t = now();
	for (int i = 0; i < nb; i++) {
		struct srt_sched_req *r = s->batch[i].r;
		if (s->sampled[i] < 0)
			continue;
		pthread_mutex_lock(&s->mu);
		int fin = take_token_locked(s, r, s->sampled[i], t);
		want_notify(s, r);
		pthread_mutex_unlock(&s->mu);
		if (fin) {
			finish_running(s, r, fin, fin != SRT_SCHED_ERROR, NULL);
			sched_unref(s, r);
		}
	}
	pthread_mutex_lock(&s->mu);
	s->st.steps++;
	s->st.computed_tokens += rows;
	pthread_mutex_unlock(&s->mu);
	publish(s);
	return 0;
}

static void *thread_main(void *arg)
{
	struct srt_sched *s = arg;
	while (!step(s))
		;
	return NULL;
}

int srt_sched_create(struct srt_engine *e, const struct srt_sched_config *cfg,
		     struct srt_sched **out, char *err, size_t errlen)
{
	*out = NULL;
	struct srt_sched *s = calloc(1, sizeof(*s));
	if (!s)
		goto oom;
	const struct srt_model_config *m = srt_engine_model(e);
	s->e = e;
	s->cache = srt_engine_cache(e);
	s->chunk = srt_engine_chunk(e);
	s->vocab = m->vocab_size;
	s->eos = m->eos_token_id;
	s->P = srt_rdx_page_tokens(s->cache);
	s->n_pools = srt_rdx_pool_count(s->cache);
	s->max_running = cfg && cfg->max_running > 0 ? cfg->max_running : 64;
	s->max_waiting = cfg && cfg->max_waiting > 0 ? cfg->max_waiting : 4096;
	s->token_budget = cfg && cfg->token_budget > 0 ? cfg->token_budget
			  : (s->chunk > s->max_running ? s->chunk : s->max_running);
	s->max_context = cfg && cfg->max_context ? cfg->max_context
			 : (uint64_t)(m->max_position_embeddings > 0 ? m->max_position_embeddings
								     : INT64_MAX);
	if (cfg && cfg->detok) {
		if (!cfg->detok->open || !cfg->detok->feed || !cfg->detok->close) {
			free(s);
			seterr(err, errlen, "scheduler: detokenizer without open/feed/close");
			return SRT_EINVAL;
		}
		s->detok = *cfg->detok;
		s->has_detok = 1;
	}
	for (uint32_t p = 0; p < s->n_pools && p < SRT_RDX_MAX_POOLS; p++) {
		struct srt_rdx_pool_stats st;
		srt_rdx_pool_stats(s->cache, p, &st);
		s->pools[p].page_bytes = st.page_bytes;
		s->pools[p].budget = st.budget;
		s->pools[p].retention = st.retention;
		s->pools[p].tail_pages = st.tail_pages;
	}
	size_t V = (size_t)s->vocab, R = (size_t)s->max_running;
	s->running = calloc(R, sizeof(*s->running));
	s->cand = calloc(R, sizeof(*s->cand));
	s->back = calloc(2 * R, sizeof(*s->back));
	s->batch = calloc(R, sizeof(*s->batch));
	s->fw_seqs = calloc(R, sizeof(*s->fw_seqs));
	s->fw_toks = calloc(R, sizeof(*s->fw_toks));
	s->fw_n = calloc(R, sizeof(*s->fw_n));
	s->sampled = calloc(R, sizeof(*s->sampled));
	s->logits = malloc(sizeof(float) * V * R);
	s->scratch = malloc(sizeof(float) * V * 2 + 64);
	s->masked = malloc(sizeof(float) * V);
	if (!s->running || !s->cand || !s->back || !s->batch || !s->fw_seqs || !s->fw_toks ||
	    !s->fw_n || !s->sampled || !s->logits || !s->scratch || !s->masked)
		goto oom;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->notify_mu, NULL);
	pthread_cond_init(&s->cv_work, NULL);
	pthread_cond_init(&s->cv_out, NULL);
	int rc = pthread_create(&s->thread, NULL, thread_main, s);
	if (rc) {
		seterr(err, errlen, "scheduler: cannot start its thread: %s", strerror(rc));
		s->thread_started = 0;
		srt_sched_destroy(s);
		return SRT_EIO;
	}
	s->thread_started = 1;
	*out = s;
	return 0;
oom:
	if (s) {
		free(s->running), free(s->cand), free(s->back), free(s->batch);
		free(s->fw_seqs), free(s->fw_toks), free(s->fw_n), free(s->sampled);
		free(s->logits), free(s->scratch), free(s->masked);
		free(s);
	}
	seterr(err, errlen, "out of memory (scheduler)");
	return SRT_ENOMEM;
}

void srt_sched_shutdown(struct srt_sched *s, int cancel)
{
	pthread_mutex_lock(&s->mu);
	s->shutdown = 1;
	if (cancel)
		s->cancel_all = 1;
	pthread_cond_signal(&s->cv_work);
	pthread_mutex_unlock(&s->mu);
}

void srt_sched_drain(struct srt_sched *s)
{
	pthread_mutex_lock(&s->mu);
	while (!s->idle || s->n_waiting)
		pthread_cond_wait(&s->cv_out, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

void srt_sched_destroy(struct srt_sched *s)
{
	if (!s)
		return;
	if (s->thread_started) {
		srt_sched_shutdown(s, 1);
		pthread_join(s->thread, NULL);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->notify_mu);
	pthread_cond_destroy(&s->cv_work);
	pthread_cond_destroy(&s->cv_out);
	free(s->running), free(s->cand), free(s->back), free(s->batch);
	free(s->fw_seqs), free(s->fw_toks), free(s->fw_n), free(s->sampled);
	free(s->logits), free(s->scratch), free(s->masked), free(s->notify);
	free(s);
}
