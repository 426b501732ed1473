/* The L3 writer thread (writer.h). */
#include "tier/writer.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_OPS (1u << 16)      /* queued operations at most, whatever their size */
#define BATCH_BYTES (16u << 20) /* payload bytes per store call at most (one op may exceed) */
#define IDX_BUCKETS 16384u      /* puts by key; MAX_OPS / IDX_BUCKETS = 4 per chain at most */

struct wop {
	struct wop *next;  /* FIFO, then the writer's batch */
	struct wop *hnext; /* index of puts by key */
	struct srt_key key;
	uint32_t pool;
	uint8_t remove;  /* a remove, else a put */
	uint8_t dead;    /* a put cancelled by a remove before it was taken */
	uint8_t indexed; /* in the index (puts until written or cancelled) */
	size_t len;
	size_t cap; /* payload bytes allocated */
	uint8_t data[];
};

#define SPARE_BYTES (4u << 20) /* written operations kept for reuse, payload bytes at most */

struct srt_twr {
	struct srt_twr_config cfg;
	pthread_t thr;
	int thr_on;
	pthread_mutex_t mu;
	pthread_cond_t work, space, idle;
	struct wop *head, *tail; /* queued, not yet taken by the writer */
	struct wop *spare;       /* written operations for reuse (a malloc and a cross-thread
				  * free per put were a tenth of a tiered replay's allocator time) */
	uint64_t spare_bytes;
	struct wop *idx[IDX_BUCKETS];
	_Atomic uint64_t n_indexed; /* puts in the index: srt_twr_has skips the lock at 0 */
	uint64_t bytes; /* charged bytes of operations queued or in flight */
	uint64_t ops;   /* operations queued or in flight */
	int stop, hold;
	int sleeping; /* the writer waits for work (an empty queue): a put must wake it */
	int flushing; /* a flush waits: no group-commit delay */
	struct srt_key *fkeys; /* failed puts for srt_twr_reap */
	uint32_t *fpools;
	size_t fn, fcap;
	uint64_t lost_run;        /* puts lost since the last success */
	uint64_t lost_unreported; /* of which not in a log line yet */
	double last_report;
	char reason[160];
	struct srt_twr_stats st;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define LOG(w, lvl, ...)                                                                       \
	do {                                                                                   \
		if ((w)->cfg.host && (w)->cfg.host->log)                                       \
			(w)->cfg.host->log((lvl), "tier", __VA_ARGS__);                        \
	} while (0)

static const char *rc_text(int rc)
{
	switch (rc) {
	case SRT_EIO: return "I/O error or store unreachable";
	case SRT_ENOSPC: return "store full";
	case SRT_ENOMEM: return "out of memory";
	default: return "store error";
	}
}

static size_t bucket(const struct srt_key *k)
{
	uint64_t h;
	memcpy(&h, k->b, sizeof(h)); /* keys are SHA-256 outputs */
	return (size_t)(h & (IDX_BUCKETS - 1));
}

static struct wop *idx_find(struct srt_twr *w, const struct srt_key *k)
{
	for (struct wop *o = w->idx[bucket(k)]; o; o = o->hnext)
		if (!o->dead && !memcmp(o->key.b, k->b, SRT_KEY_BYTES))
			return o;
	return NULL;
}

static void idx_del(struct srt_twr *w, struct wop *o)
{
	if (!o->indexed)
		return;
	struct wop **pp = &w->idx[bucket(&o->key)];
	while (*pp != o)
		pp = &(*pp)->hnext;
	*pp = o->hnext;
	o->indexed = 0;
	atomic_fetch_sub(&w->n_indexed, 1);
}

static uint64_t charge(const struct wop *o)
{
	return sizeof(*o) + o->len;
}

/* --- lost-put reports (under mu) ---------------------------------------------------------- */

static void note_lost(struct srt_twr *w, uint64_t n, const char *why)
{
	if (!n)
		return;
	double now = now_s();
	w->st.puts_lost += n;
	snprintf(w->reason, sizeof(w->reason), "%s", why);
	if (!w->lost_run) {
		w->lost_run = n;
		w->lost_unreported = n - 1;
		w->last_report = now;
		LOG(w, SRT_LOG_WARN,
		    "%s: put not stored (%s); further lost puts are summarised every %u s and at "
		    "flush until puts succeed again",
		    w->cfg.name, why, w->cfg.report_ms / 1000);
		return;
	}
	w->lost_run += n;
	w->lost_unreported += n;
	if ((now - w->last_report) * 1000.0 >= w->cfg.report_ms) {
		LOG(w, SRT_LOG_WARN,
		    "%s: %" PRIu64 " puts not stored in the last %.0f s (%" PRIu64
		    " since the last success; last reason: %s)",
		    w->cfg.name, w->lost_unreported, now - w->last_report, w->lost_run, w->reason);
		w->lost_unreported = 0;
		w->last_report = now;
	}
}

static void note_stored(struct srt_twr *w)
{
	if (!w->lost_run)
		return;
	LOG(w, SRT_LOG_WARN, "%s: puts are stored again after %" PRIu64 " were lost", w->cfg.name,
	    w->lost_run);
	w->lost_run = w->lost_unreported = 0;
}

static void report_at_flush(struct srt_twr *w)
{
	if (!w->lost_unreported)
		return;
	LOG(w, SRT_LOG_WARN,
	    "%s: %" PRIu64 " puts not stored since the last report (%" PRIu64
	    " since the last success, %" PRIu64 " in all; last reason: %s)%s",
	    w->cfg.name, w->lost_unreported, w->lost_run, w->st.puts_lost, w->reason,
	    w->lost_run ? "; L3 has not recovered" : "");
	w->lost_unreported = 0;
	w->last_report = now_s();
}

static void push_failed(struct srt_twr *w, const struct wop *o)
{
	if (w->fn == w->fcap) {
		size_t cap = w->fcap ? 2 * w->fcap : 256;
		struct srt_key *k = realloc(w->fkeys, cap * sizeof(*k));
		if (k)
			w->fkeys = k;
		uint32_t *p = k ? realloc(w->fpools, cap * sizeof(*p)) : NULL;
		if (p)
			w->fpools = p;
		if (!k || !p)
			return; /* the manager keeps a stale index entry: a later load misses */
		w->fcap = cap;
	}
	w->fkeys[w->fn] = o->key;
	w->fpools[w->fn++] = o->pool;
}

/* --- running a batch ------------------------------------------------------------------------ */

/* Run ops[0..n) (all puts or all removes) against the store; no lock held. */
static int run_batch(struct srt_twr *w, struct wop **ops, uint32_t n, int *skipped)
{
	*skipped = 0;
	if (w->cfg.usable && !w->cfg.usable(w->cfg.ctx)) {
		*skipped = 1;
		return SRT_EIO;
	}
	struct srt_key *keys = malloc(n * sizeof(*keys));
	const void **bufs = malloc(n * sizeof(*bufs));
	size_t *lens = malloc(n * sizeof(*lens));
	int rc = SRT_ENOMEM;
	if (!keys || !bufs || !lens)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		keys[i] = ops[i]->key;
		bufs[i] = ops[i]->data;
		lens[i] = ops[i]->len;
	}
	if (ops[0]->remove) {
		rc = srt_tier_store_remove(w->cfg.store, keys, n);
		if (w->cfg.result)
			w->cfg.result(w->cfg.ctx, rc, "remove");
		goto out;
	}
	rc = srt_tier_store_put(w->cfg.store, keys, n, bufs, lens);
	if (w->cfg.result)
		w->cfg.result(w->cfg.ctx, rc == SRT_EIO ? SRT_EIO : 0, "put");
	if (rc && rc != SRT_EIO)
		srt_tier_store_remove(w->cfg.store, keys, n); /* some may be stored: not accounted */
out:
	free(lens);
	free(bufs);
	free(keys);
	return rc;
}

/* Account for a finished batch (the caller frees the operations); under mu. */
static void finish_batch(struct srt_twr *w, struct wop **ops, uint32_t n, int rc, int skipped)
{
	int puts = !ops[0]->remove;
	if (puts) {
		w->st.batches += !skipped;
		if (rc) {
			char why[160];
			snprintf(why, sizeof(why), "%s", skipped ? "L3 unavailable" : rc_text(rc));
			note_lost(w, n, why);
		} else {
			w->st.puts_written += n;
			note_stored(w);
		}
	} else {
		w->st.removes += skipped ? 0 : n;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct wop *o = ops[i];
		if (puts && rc)
			push_failed(w, o);
		idx_del(w, o);
		w->bytes -= charge(o);
		w->ops--;
	}
	pthread_cond_broadcast(&w->space);
	if (!w->ops)
		pthread_cond_broadcast(&w->idle);
}

static void *writer_main(void *arg)
{
	struct srt_twr *w = arg;
	struct wop *one[1];
	uint32_t cap = w->cfg.batch;
	struct wop **batch = malloc(cap * sizeof(*batch));
	if (!batch) { /* out of memory for the array: one operation at a time */
		batch = one;
		cap = 1;
	}
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while ((!w->head || w->hold) && !w->stop) {
			w->sleeping = 1;
			pthread_cond_wait(&w->work, &w->mu);
			w->sleeping = 0;
		}
		if (!w->head)
			break;
		/* group commit: when little is queued, give the producer up to 1 ms to add more, so
		 * one store call (one fdatasync, one transaction) covers more puts */
		if (w->ops < cap / 4 && !w->stop && !w->flushing) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&w->work, &w->mu, &ts);
		}
		uint32_t n = 0;
		uint64_t bytes = 0;
		int kind = -1;
		while (w->head && n < cap) {
			struct wop *o = w->head;
			if (o->dead) { /* cancelled while queued */
				w->head = o->next;
				w->bytes -= charge(o);
				w->ops--;
				w->st.puts_cancelled++;
				free(o);
				continue;
			}
			if ((kind >= 0 && o->remove != kind) || (n && bytes + o->len > BATCH_BYTES))
				break;
			kind = o->remove;
			w->head = o->next;
			bytes += o->len;
			batch[n++] = o;
		}
		if (!w->head)
			w->tail = NULL;
		if (!n) {
			pthread_cond_broadcast(&w->space);
			if (!w->ops)
				pthread_cond_broadcast(&w->idle);
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		int skipped;
		int rc = run_batch(w, batch, n, &skipped);
		pthread_mutex_lock(&w->mu);
		finish_batch(w, batch, n, rc, skipped);
		uint32_t kept = 0;
		for (uint32_t i = 0; i < n; i++) {
			struct wop *o = batch[i];
			if (w->spare_bytes + o->cap <= SPARE_BYTES) {
				o->next = w->spare;
				w->spare = o;
				w->spare_bytes += o->cap;
			} else {
				batch[kept++] = o;
			}
		}
		pthread_mutex_unlock(&w->mu);
		for (uint32_t i = 0; i < kept; i++) /* outside the lock: the producer goes on */
			free(batch[i]);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	if (batch != one)
		free(batch);
	return NULL;
}

/* --- API ------------------------------------------------------------------------------------ */

int srt_twr_create(const struct srt_twr_config *cfg, struct srt_twr **out, char *err,
		   size_t errlen)
{
	*out = NULL;
	struct srt_twr *w = calloc(1, sizeof(*w));
	if (!w) {
		snprintf(err, errlen, "L3 writer: out of memory");
		return SRT_ENOMEM;
	}
	w->cfg = *cfg;
	if (!w->cfg.name)
		w->cfg.name = "L3";
	if (!w->cfg.queue_bytes)
		w->cfg.queue_bytes = 64ull << 20;
	if (!w->cfg.batch)
		w->cfg.batch = 1024;
	if (w->cfg.batch > 4096)
		w->cfg.batch = 4096;
	if (!w->cfg.report_ms)
		w->cfg.report_ms = 60000;
	atomic_init(&w->n_indexed, 0);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->space, NULL);
	pthread_cond_init(&w->idle, NULL);
	if (!w->cfg.sync) {
		if (pthread_create(&w->thr, NULL, writer_main, w)) {
			snprintf(err, errlen, "L3 writer: cannot start the writer thread");
			srt_twr_destroy(w);
			return SRT_EIO;
		}
		w->thr_on = 1;
	}
	*out = w;
	return 0;
}

void srt_twr_destroy(struct srt_twr *w)
{
	if (!w)
		return;
	srt_twr_flush(w);
	if (w->thr_on) {
		pthread_mutex_lock(&w->mu);
		w->stop = 1;
		w->hold = 0;
		pthread_cond_broadcast(&w->work);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->thr, NULL);
	}
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->space);
	pthread_cond_destroy(&w->idle);
	for (struct wop *o = w->spare, *nx; o; o = nx) {
		nx = o->next;
		free(o);
	}
	free(w->fkeys);
	free(w->fpools);
	free(w);
}

static struct wop *new_op(struct srt_twr *w, const struct srt_key *key, uint32_t pool,
			  const void *payload, size_t len, int remove)
{
	struct wop *o = NULL;
	if (len) { /* the most recent spare, when it is large enough */
		pthread_mutex_lock(&w->mu);
		if (w->spare && w->spare->cap >= len) {
			o = w->spare;
			w->spare = o->next;
			w->spare_bytes -= o->cap;
		}
		pthread_mutex_unlock(&w->mu);
	}
	size_t cap = o ? o->cap : len;
	if (!o && !(o = malloc(sizeof(*o) + len)))
		return NULL;
	memset(o, 0, sizeof(*o));
	o->cap = cap;
	o->key = *key;
	o->pool = pool;
	o->remove = (uint8_t)remove;
	o->len = len;
	if (len)
		memcpy(o->data, payload, len);
	return o;
}

/* Append o to the queue (and the index for puts); under mu. */
static void enqueue(struct srt_twr *w, struct wop *o)
{
	if (w->tail)
		w->tail->next = o;
	else
		w->head = o;
	w->tail = o;
	if (!o->remove) {
		size_t b = bucket(&o->key);
		o->hnext = w->idx[b];
		w->idx[b] = o;
		o->indexed = 1;
		atomic_fetch_add(&w->n_indexed, 1);
	}
	w->bytes += charge(o);
	w->ops++;
	if (w->bytes > w->st.queue_peak)
		w->st.queue_peak = w->bytes;
	/* wake the writer when it waits for work, or, during its group-commit pause, once a
	 * quarter batch is queued; not on every put (a futex wake per put on the request path,
	 * and each one cut the pause short, so batches stayed small) */
	if (w->sleeping || w->ops == w->cfg.batch / 4)
		pthread_cond_signal(&w->work);
}

/* Sync mode: run one operation inline with the same accounting. */
static int run_inline(struct srt_twr *w, struct wop *o)
{
	pthread_mutex_lock(&w->mu);
	w->bytes += charge(o);
	w->ops++;
	pthread_mutex_unlock(&w->mu);
	int skipped;
	int rc = run_batch(w, &o, 1, &skipped);
	pthread_mutex_lock(&w->mu);
	finish_batch(w, &o, 1, rc, skipped);
	pthread_mutex_unlock(&w->mu);
	free(o);
	return rc ? 1 : 0;
}

int srt_twr_put(struct srt_twr *w, const struct srt_key *key, uint32_t pool, const void *payload,
		size_t len)
{
	struct wop *o = new_op(w, key, pool, payload, len, 0);
	if (!o)
		return SRT_ENOMEM;
	pthread_mutex_lock(&w->mu);
	w->st.puts_queued++;
	pthread_mutex_unlock(&w->mu);
	if (w->cfg.sync)
		return run_inline(w, o);
	pthread_mutex_lock(&w->mu);
	uint64_t c = charge(o);
	int full = w->ops && (w->bytes + c > w->cfg.queue_bytes || w->ops >= MAX_OPS);
	if (full && w->cfg.full == SRT_TWR_DROP) {
		w->st.puts_dropped++;
		note_lost(w, 1, "write queue full (policy drop)");
		pthread_mutex_unlock(&w->mu);
		free(o);
		return 1;
	}
	if (full) {
		double t0 = now_s();
		w->st.waits++;
		while (w->ops && (w->bytes + c > w->cfg.queue_bytes || w->ops >= MAX_OPS))
			pthread_cond_wait(&w->space, &w->mu);
		w->st.wait_s += now_s() - t0;
	}
	enqueue(w, o);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

void srt_twr_remove(struct srt_twr *w, const struct srt_key *key)
{
	struct wop *o = new_op(w, key, 0, NULL, 0, 1);
	pthread_mutex_lock(&w->mu);
	/* cancel queued puts of key; one in flight is overtaken by this remove */
	for (struct wop *p; (p = idx_find(w, key));) {
		p->dead = 1;
		idx_del(w, p);
	}
	pthread_mutex_unlock(&w->mu);
	if (!o) { /* no memory to queue it: run it inline (order still holds: puts are dead) */
		srt_twr_flush(w);
		srt_tier_store_remove(w->cfg.store, key, 1);
		return;
	}
	if (w->cfg.sync) {
		run_inline(w, o);
		return;
	}
	pthread_mutex_lock(&w->mu);
	enqueue(w, o); /* removes are not held back by a full queue: they carry no payload */
	pthread_mutex_unlock(&w->mu);
}

int srt_twr_has(struct srt_twr *w, const struct srt_key *key)
{
	if (!atomic_load(&w->n_indexed))
		return 0;
	pthread_mutex_lock(&w->mu);
	int has = idx_find(w, key) != NULL;
	pthread_mutex_unlock(&w->mu);
	return has;
}

int srt_twr_read(struct srt_twr *w, const struct srt_key *key, void *buf, size_t cap,
		 size_t *len)
{
	if (!atomic_load(&w->n_indexed))
		return 0;
	pthread_mutex_lock(&w->mu);
	struct wop *o = idx_find(w, key);
	int ok = o && o->len <= cap;
	if (ok) {
		memcpy(buf, o->data, o->len);
		*len = o->len;
		w->st.read_hits++;
	}
	pthread_mutex_unlock(&w->mu);
	return ok;
}

void srt_twr_note_lost(struct srt_twr *w, uint64_t n, const char *why)
{
	pthread_mutex_lock(&w->mu);
	note_lost(w, n, why);
	pthread_mutex_unlock(&w->mu);
}

size_t srt_twr_reap(struct srt_twr *w, struct srt_key *keys, uint32_t *pools, size_t max)
{
	pthread_mutex_lock(&w->mu);
	size_t n = w->fn < max ? w->fn : max;
	if (n) {
		memcpy(keys, w->fkeys + (w->fn - n), n * sizeof(*keys));
		memcpy(pools, w->fpools + (w->fn - n), n * sizeof(*pools));
		w->fn -= n;
	}
	pthread_mutex_unlock(&w->mu);
	return n;
}

uint64_t srt_twr_flush(struct srt_twr *w)
{
	pthread_mutex_lock(&w->mu);
	w->flushing++;
	pthread_cond_broadcast(&w->work);
	while (w->ops && w->thr_on)
		pthread_cond_wait(&w->idle, &w->mu);
	w->flushing--;
	report_at_flush(w);
	uint64_t lost = w->st.puts_lost;
	pthread_mutex_unlock(&w->mu);
	return lost;
}

void srt_twr_stats(struct srt_twr *w, struct srt_twr_stats *out)
{
	pthread_mutex_lock(&w->mu);
	*out = w->st;
	out->queued_now = w->ops;
	pthread_mutex_unlock(&w->mu);
}

void srt_twr_hold(struct srt_twr *w, int hold)
{
	pthread_mutex_lock(&w->mu);
	w->hold = hold;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->mu);
}
