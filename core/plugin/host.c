/* The host API table: logging, aligned allocation, the thread pool (see host.h). */
#include "plugin/host.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

struct pool {
	int nthreads;
	int nworkers_started;
	pthread_t *threads;
	pthread_mutex_t submit; /* one job at a time */
	pthread_mutex_t mu;     /* guards everything below */
	pthread_cond_t work_cv;
	pthread_cond_t done_cv;
	uint64_t generation;
	int stop;
	int64_t n;
	srt_range_fn fn;
	void *ctx;
	int nchunks;
	int pending;
};

struct worker_arg {
	struct pool *pool;
	int tid;
};

/* The pool and tid of the job this thread is running a range of, for nested calls. */
static _Thread_local struct pool *tl_pool;
static _Thread_local int tl_tid;

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

static void *worker_main(void *argp)
{
	struct worker_arg arg = *(struct worker_arg *)argp;
	free(argp);
	struct pool *p = arg.pool;
	uint64_t seen = 0; /* generation starts at 0: a job posted before we got here is seen */

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->generation == seen)
			pthread_cond_wait(&p->work_cv, &p->mu);
		if (p->stop)
			break;
		seen = p->generation;
		if (arg.tid >= p->nchunks)
			continue;
		int64_t n = p->n;
		srt_range_fn fn = p->fn;
		void *ctx = p->ctx;
		int nchunks = p->nchunks;
		pthread_mutex_unlock(&p->mu);
		run_chunk(p, n, fn, ctx, nchunks, arg.tid);
		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done_cv);
	}
	pthread_mutex_unlock(&p->mu);
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
	if (p->nthreads == 1) {
		run_chunk(p, n, fn, ctx, 1, 0);
		return;
	}
	int nchunks = n < p->nthreads ? (int)n : p->nthreads;

	pthread_mutex_lock(&p->submit);
	pthread_mutex_lock(&p->mu);
	p->n = n;
	p->fn = fn;
	p->ctx = ctx;
	p->nchunks = nchunks;
	p->pending = nchunks - 1;
	p->generation++;
	if (nchunks > 1)
		pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);

	run_chunk(p, n, fn, ctx, nchunks, 0);

	pthread_mutex_lock(&p->mu);
	while (p->pending > 0)
		pthread_cond_wait(&p->done_cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
	pthread_mutex_unlock(&p->submit);
}

static void pool_stop(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
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

static int pool_start(struct pool *p, int nthreads, char *why, size_t why_len)
{
	memset(p, 0, sizeof(*p));
	p->nthreads = nthreads;
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

void srt_host_destroy(struct srt_host *host)
{
	if (!host)
		return;
	struct host_impl *h = (struct host_impl *)host;
	pool_stop(&h->pool);
	free(h);
}
