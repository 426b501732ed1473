/* The host API table: logging, aligned allocation, the thread pool (see host.h). */
#include "plugin/host.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define HOST_MAX_THREADS 4096

/* --- logging ------------------------------------------------------------------------------ */

static atomic_int log_level = SRT_LOG_WARN;
static _Atomic(FILE *) log_stream;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void log_init_from_env(void)
{
	const char *s = getenv("SHADOWRT_LOG_LEVEL");
	if (!s || !*s)
		return;
	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(s, level_names[i]) || (s[0] == '0' + i && !s[1])) {
			atomic_store(&log_level, i);
			return;
		}
	}
}

void srt_log_set_level(int level)
{
	pthread_once(&log_once, log_init_from_env);
	if (level < SRT_LOG_ERROR)
		level = SRT_LOG_ERROR;
	if (level > SRT_LOG_DEBUG)
		level = SRT_LOG_DEBUG;
	atomic_store(&log_level, level);
}

int srt_log_get_level(void)
{
	pthread_once(&log_once, log_init_from_env);
	return atomic_load(&log_level);
}

void srt_log_set_stream(FILE *stream)
{
	atomic_store(&log_stream, stream);
}

void srt_vlog(int level, const char *who, const char *fmt, va_list ap)
{
	if (level > srt_log_get_level())
		return;
	if (level < SRT_LOG_ERROR)
		level = SRT_LOG_ERROR;
	if (level > SRT_LOG_DEBUG)
		level = SRT_LOG_DEBUG;

	char prefix[96];
	if (who && *who)
		snprintf(prefix, sizeof(prefix), "shadowrt[%.64s] %s: ", who, level_names[level]);
	else
		snprintf(prefix, sizeof(prefix), "shadowrt %s: ", level_names[level]);

	/* Build the whole line first so that one fputs writes it: lines never interleave. */
	char stackbuf[1024];
	char *line = stackbuf;
	size_t plen = strlen(prefix);
	va_list ap2;
	va_copy(ap2, ap);
	int mlen = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (mlen < 0)
		mlen = 0;
	size_t need = plen + (size_t)mlen + 2;
	if (need > sizeof(stackbuf)) {
		line = malloc(need);
		if (!line) {
			line = stackbuf;
			need = sizeof(stackbuf);
		}
	}
	memcpy(line, prefix, plen);
	vsnprintf(line + plen, need - plen - 1, fmt, ap);
	size_t len = strlen(line);
	while (len > plen && line[len - 1] == '\n')
		len--;
	line[len++] = '\n';
	line[len] = '\0';

	FILE *out = atomic_load(&log_stream);
	if (!out)
		out = stderr;
	fputs(line, out);
	fflush(out);
	if (line != stackbuf)
		free(line);
}

void srt_log(int level, const char *who, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	srt_vlog(level, who, fmt, ap);
	va_end(ap);
}

/* --- allocation --------------------------------------------------------------------------- */

static void *host_alloc(size_t size, size_t align)
{
	if (align < sizeof(void *) || (align & (align - 1)))
		return NULL;
	void *p = NULL;
	if (posix_memalign(&p, align, size ? size : 1))
		return NULL;
	return p;
}

static void host_free(void *p)
{
	free(p);
}

/* --- thread pool -------------------------------------------------------------------------- */

/*
 * Hand-off without sleeping between the parallel regions of a forward pass: the submitter
 * publishes a job by bumping `gen`; workers that finished the last job spin on it (pause
 * loop) for up to spin_ns, then sleep on work_cv. The submitter runs range 0, then spins on
 * `pending` for up to spin_ns, then sleeps on done_cv. A sleeper announces itself (sleepers,
 * waiter) before its last check of the condition, under mu; the other side changes the
 * condition and then reads the announcement (both sequentially consistent), so at least one
 * of them sees the other's write and no wake-up is lost. Every worker acknowledges every job
 * it sees (pending = nthreads - 1), even with an empty range, so the job's fields are never
 * rewritten while a worker may still read them; a job of one range runs inline and posts
 * nothing. Past the first ~1024 pauses a spinner also yields its core (spin_step), and the
 * budget adapts to how often spins pay off (spin_done).
 */
#define POOL_SPIN_US_DEFAULT 200   /* spin budget before sleeping (env SRT_POOL_SPIN_US) */
#define POOL_SPIN_US_MAX 1000000
#define SPIN_YIELD_AFTER 1024      /* pauses before a spinner also yields its core */

struct pool {
	int nthreads;
	int nworkers_started;
	pthread_t *threads;
	uint64_t spin_ns;       /* 0: sleep at once, as a plain condvar pool */
	atomic_ullong spin_cur; /* the adaptive budget now, in [spin_ns / 64, spin_ns] */
	pthread_mutex_t submit; /* one job at a time */
	pthread_mutex_t mu;     /* for the condvars only */
	pthread_cond_t work_cv;
	pthread_cond_t done_cv;
	_Atomic uint64_t gen;   /* job number, bumped to post one */
	atomic_int stop;
	atomic_int pending;     /* workers yet to acknowledge the current job */
	atomic_int sleepers;    /* workers in (or about to enter) work_cv */
	atomic_int waiter;      /* the submitter is in (or about to enter) done_cv */
	atomic_llong sleeps;    /* times a worker went to sleep (tests, stats) */
	/* one-thread time (srt_host_pool_timing), kept by the thread that submits jobs */
	atomic_int timing;
	_Atomic uint64_t one_ns, last_end;
	/* the job: written before gen is bumped, read after it is seen */
	int64_t n;
	srt_range_fn fn;
	void *ctx;
	int nchunks;
};

struct worker_arg {
	struct pool *pool;
	int tid;
};

/* The pool and tid of the job this thread is running a range of, for nested calls. */
static _Thread_local struct pool *tl_pool;
static _Thread_local int tl_tid;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void run_chunk(struct pool *p, int64_t n, srt_range_fn fn, void *ctx, int nchunks,
		      int k)
{
	int64_t begin = (int64_t)((__int128)n * k / nchunks);
	int64_t end = (int64_t)((__int128)n * (k + 1) / nchunks);
	struct pool *saved_pool = tl_pool;
	int saved_tid = tl_tid;
	tl_pool = p;
	tl_tid = k;
	if (end > begin)
		fn(ctx, begin, end, k);
	tl_pool = saved_pool;
	tl_tid = saved_tid;
}

/* A spin's clock reads, and whether it lost its core: two reads (64 pauses apart, a
 * microsecond or two of spinning) SPIN_GAP_NS or more apart mean that the spinner was
 * descheduled, by its own sched_yield or by the kernel. */
#define SPIN_GAP_NS 20000u
struct spin {
	uint64_t t0, last;
	bool lost;
};

/* One step of a spin loop: a pause; every 64 steps a clock read (true when the budget is
 * spent), and after the first 1024 steps a sched_yield, so that on an oversubscribed
 * machine a spinning thread gives its core to the thread it waits for. */
static inline bool spin_step(uint64_t budget, unsigned i, struct spin *s)
{
	cpu_relax();
	if ((i & 63) != 63)
		return false;
	uint64_t t = mono_ns();
	if (!s->t0) {
		s->t0 = t;
	} else {
		s->lost |= t - s->last >= SPIN_GAP_NS;
		if (t - s->t0 >= budget)
			return true;
	}
	s->last = t;
	if (i >= SPIN_YIELD_AFTER)
		sched_yield();
	return false;
}

/*
 * The budget adapts: a spin that sees the event without having lost its core doubles it (up
 * to spin_ns); one that runs out, or that lost its core on the way (to its own sched_yield
 * or to the kernel: the cores are oversubscribed, and the awaited thread may have needed that
 * core), halves it (down to spin_ns / 64). On a quiet machine the regions of a step follow
 * each other within microseconds, or after a serial stretch of one thread (a decode row's
 * norms, its routing) of tens of them, and the budget stays full; when the cores are
 * oversubscribed, spins keep losing their core or running out, and the pool falls back to
 * sleeping at once instead of burning its share of the CPU on waits.
 *
 * Losing the core is measured, not assumed from the number of pauses: a spin that merely
 * lasted past the first sched_yield (about 20 µs of pauses) on idle cores used to count as
 * unpaid, so a step's serial stretches of 20-100 µs drove the budget down to 1/64, the
 * workers slept through each of them, and each wake-up cost 50-100 µs on a virtual machine.
 */
static uint64_t spin_budget(const struct pool *p)
{
	return atomic_load_explicit(&((struct pool *)p)->spin_cur, memory_order_relaxed);
}

static bool spin_done(const struct pool *p, uint64_t budget, bool hit, bool paid)
{
	uint64_t nb = paid ? (budget * 2 < p->spin_ns ? budget * 2 : p->spin_ns)
			   : (budget / 2 > p->spin_ns / 64 ? budget / 2 : p->spin_ns / 64);
	if (nb != budget)
		atomic_store_explicit(&((struct pool *)p)->spin_cur, nb, memory_order_relaxed);
	return hit;
}

/* Spin up to the pool's budget until *a != v (or stop, when `stop` is given); returns
 * whether it changed. The clock is read every 64 pauses. */
static bool spin_until_changed(const struct pool *p, const _Atomic uint64_t *a, uint64_t v,
			       const atomic_int *stop)
{
	if (!p->spin_ns)
		return atomic_load(a) != v || (stop && atomic_load(stop));
	const uint64_t budget = spin_budget(p);
	struct spin sp = {0, 0, false};
	for (unsigned i = 0;; i++) {
		if (atomic_load_explicit(a, memory_order_acquire) != v ||
		    (stop && atomic_load_explicit(stop, memory_order_acquire)))
			return spin_done(p, budget, true, !sp.lost);
		if (spin_step(budget, i, &sp))
			return spin_done(p, budget, false, false);
	}
}

static bool spin_until_zero(const struct pool *p, const atomic_int *a)
{
	if (!p->spin_ns)
		return atomic_load(a) == 0;
	const uint64_t budget = spin_budget(p);
	struct spin sp = {0, 0, false};
	for (unsigned i = 0;; i++) {
		if (atomic_load_explicit(a, memory_order_acquire) == 0)
			return spin_done(p, budget, true, !sp.lost);
		if (spin_step(budget, i, &sp))
			return spin_done(p, budget, false, false);
	}
}

static void *worker_main(void *argp)
{
	struct worker_arg arg = *(struct worker_arg *)argp;
	free(argp);
	struct pool *p = arg.pool;
	uint64_t seen = 0; /* gen starts at 0: a job posted before we got here is seen */

	for (;;) {
		if (!spin_until_changed(p, &p->gen, seen, &p->stop)) {
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			atomic_fetch_add_explicit(&p->sleeps, 1, memory_order_relaxed);
			while (!atomic_load(&p->stop) && atomic_load(&p->gen) == seen)
				pthread_cond_wait(&p->work_cv, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			pthread_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->stop))
			break;
		seen = atomic_load(&p->gen);
		if (arg.tid < p->nchunks)
			run_chunk(p, p->n, p->fn, p->ctx, p->nchunks, arg.tid);
		if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->waiter)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done_cv);
			pthread_mutex_unlock(&p->mu);
		}
	}
	return NULL;
}

static void pool_run(struct pool *p, int64_t n, srt_range_fn fn, void *ctx)
{
	assert(fn);
	if (n <= 0)
		return;
	if (tl_pool == p) { /* nested: run inline on this thread */
		fn(ctx, 0, n, tl_tid);
		return;
	}
	/* timing: the caller's time since its previous job, and a job it runs alone, is time
	 * the other threads wait */
	const bool timed = atomic_load_explicit(&p->timing, memory_order_relaxed);
	uint64_t t0 = 0;
	if (timed) {
		t0 = mono_ns();
		const uint64_t le = atomic_load_explicit(&p->last_end, memory_order_relaxed);
		if (le)
			atomic_fetch_add_explicit(&p->one_ns, t0 - le, memory_order_relaxed);
	}
	if (p->nthreads == 1 || n == 1) {
		run_chunk(p, n, fn, ctx, 1, 0);
		if (timed) {
			const uint64_t t1 = mono_ns();
			atomic_fetch_add_explicit(&p->one_ns, t1 - t0, memory_order_relaxed);
			atomic_store_explicit(&p->last_end, t1, memory_order_relaxed);
		}
		return;
	}
	int nchunks = n < p->nthreads ? (int)n : p->nthreads;

	pthread_mutex_lock(&p->submit);
	p->n = n;
	p->fn = fn;
	p->ctx = ctx;
	p->nchunks = nchunks;
	atomic_store(&p->pending, p->nthreads - 1);
	atomic_fetch_add(&p->gen, 1);
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->work_cv);
		pthread_mutex_unlock(&p->mu);
	}

	run_chunk(p, n, fn, ctx, nchunks, 0);

	if (!spin_until_zero(p, &p->pending)) {
		pthread_mutex_lock(&p->mu);
		atomic_store(&p->waiter, 1);
		while (atomic_load(&p->pending) > 0)
			pthread_cond_wait(&p->done_cv, &p->mu);
		atomic_store(&p->waiter, 0);
		pthread_mutex_unlock(&p->mu);
	}
	pthread_mutex_unlock(&p->submit);
	if (timed)
		atomic_store_explicit(&p->last_end, mono_ns(), memory_order_relaxed);
}

static void pool_stop(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	atomic_store(&p->stop, 1);
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nworkers_started; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	pthread_cond_destroy(&p->done_cv);
	pthread_cond_destroy(&p->work_cv);
	pthread_mutex_destroy(&p->mu);
	pthread_mutex_destroy(&p->submit);
}

/* SRT_POOL_SPIN_US: the spin budget in microseconds, 0..1000000; unset or empty: the default;
 * anything else is reported in why and refused. */
static int spin_from_env(uint64_t *ns, char *why, size_t why_len)
{
	const char *s = getenv("SRT_POOL_SPIN_US");
	*ns = (uint64_t)POOL_SPIN_US_DEFAULT * 1000u;
	if (!s || !*s)
		return 0;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < 0 || v > POOL_SPIN_US_MAX) {
		snprintf(why, why_len, "host: SRT_POOL_SPIN_US='%.40s' is not a number of "
			 "microseconds in [0, %d]", s, POOL_SPIN_US_MAX);
		return SRT_EINVAL;
	}
	*ns = (uint64_t)v * 1000u;
	return 0;
}

static int pool_start(struct pool *p, int nthreads, char *why, size_t why_len)
{
	memset(p, 0, sizeof(*p));
	p->nthreads = nthreads;
	int src = spin_from_env(&p->spin_ns, why, why_len);
	if (src)
		return src;
	atomic_store(&p->spin_cur, p->spin_ns);
	pthread_mutex_init(&p->submit, NULL);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	if (nthreads == 1)
		return 0;
	p->threads = calloc((size_t)nthreads - 1, sizeof(*p->threads));
	if (!p->threads) {
		snprintf(why, why_len, "host: out of memory for %d worker threads", nthreads - 1);
		pool_stop(p);
		return SRT_ENOMEM;
	}
	for (int i = 1; i < nthreads; i++) {
		struct worker_arg *arg = malloc(sizeof(*arg));
		int err = arg ? 0 : ENOMEM;
		if (arg) {
			arg->pool = p;
			arg->tid = i;
			err = pthread_create(&p->threads[i - 1], NULL, worker_main, arg);
			if (err)
				free(arg);
		}
		if (err) {
			snprintf(why, why_len, "host: cannot start worker thread %d of %d: %s", i,
				 nthreads - 1, strerror(err));
			pool_stop(p);
			return err == ENOMEM ? SRT_ENOMEM : SRT_EIO;
		}
		p->nworkers_started++;
	}
	return 0;
}

/* --- the host table ----------------------------------------------------------------------- */

struct host_impl {
	struct srt_host pub; /* first: a struct srt_host * is a struct host_impl * */
	struct pool pool;
};

static void host_parallel_for(const struct srt_host *host, int64_t n, srt_range_fn fn, void *ctx)
{
	struct host_impl *h = (struct host_impl *)host;
	pool_run(&h->pool, n, fn, ctx);
}

int srt_host_create(int nthreads, struct srt_host **out, char *why, size_t why_len)
{
	assert(out);
	*out = NULL;
	if (nthreads < 0 || nthreads > HOST_MAX_THREADS) {
		snprintf(why, why_len, "host: threads = %d is out of range (expected 0..%d, 0 = all CPUs)",
			 nthreads, HOST_MAX_THREADS);
		return SRT_EINVAL;
	}
	if (nthreads == 0) {
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		nthreads = ncpu < 1 ? 1 : ncpu > HOST_MAX_THREADS ? HOST_MAX_THREADS : (int)ncpu;
	}

	struct host_impl *h = calloc(1, sizeof(*h));
	if (!h) {
		snprintf(why, why_len, "host: out of memory");
		return SRT_ENOMEM;
	}
	int rc = pool_start(&h->pool, nthreads, why, why_len);
	if (rc) {
		free(h);
		return rc;
	}

	h->pub.struct_size = sizeof(struct srt_host);
	h->pub.abi_major = SRT_ABI_MAJOR;
	h->pub.abi_minor = SRT_ABI_MINOR;
	h->pub.log = srt_log;
	h->pub.alloc = host_alloc;
	h->pub.free = host_free;
	h->pub.nthreads = nthreads;
	h->pub.parallel_for = host_parallel_for;
	*out = &h->pub;
	return 0;
}

int srt_host_pool_sleeping(const struct srt_host *host)
{
	const struct host_impl *h = (const struct host_impl *)host;
	return atomic_load(&((struct host_impl *)h)->pool.sleepers);
}

long long srt_host_pool_sleeps(const struct srt_host *host)
{
	const struct host_impl *h = (const struct host_impl *)host;
	return atomic_load(&((struct host_impl *)h)->pool.sleeps);
}

void srt_host_pool_timing(const struct srt_host *host, int on)
{
	struct pool *p = &((struct host_impl *)host)->pool;
	atomic_store(&p->timing, 0);
	atomic_store(&p->one_ns, 0);
	atomic_store(&p->last_end, on ? mono_ns() : 0);
	atomic_store(&p->timing, on != 0);
}

long long srt_host_pool_one_thread_ns(const struct srt_host *host)
{
	struct pool *p = &((struct host_impl *)host)->pool;
	uint64_t ns = atomic_load(&p->one_ns);
	const uint64_t le = atomic_load(&p->last_end);
	if (atomic_load(&p->timing) && le) /* the stretch since the last job */
		ns += mono_ns() - le;
	return (long long)ns;
}

void srt_host_destroy(struct srt_host *host)
{
	if (!host)
		return;
	struct host_impl *h = (struct host_impl *)host;
	pool_stop(&h->pool);
	free(h);
}
