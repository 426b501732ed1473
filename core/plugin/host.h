/*
 * The host API: the `struct srt_host` table (abi/shadowrt/plugin.h) the core hands every
 * plugin — logging, aligned allocation and a thread pool.
 *
 * Logging is process-wide: one verbosity and one output stream for the whole process, so that
 * core modules and plugins interleave in one readable log. Lines look like
 *     shadowrt[csa] warn: message
 * Each line is written with a single fputs, so concurrent lines never mix.
 *
 * Thread pool: srt_host_create starts nthreads - 1 worker threads once; the calling thread of
 * parallel_for works as thread 0. parallel_for splits [0, n) into min(n, nthreads) contiguous
 * ranges, range k = [n*k/T, n*(k+1)/T), and runs range k on thread k; it returns when every
 * range is done. Calls from different threads are serialised (one job runs at a time); a
 * parallel_for issued from inside a worker runs the whole range inline on that worker, with
 * that worker's tid, so nesting never deadlocks. A job of one range (n == 1) runs inline on
 * the caller and wakes nobody.
 *
 * Hand-off: a worker that finished a job spins (pause loop) for up to SRT_POOL_SPIN_US
 * microseconds (environment, read by srt_host_create; default 200, 0 = never spin, at most
 * 1000000) waiting for the next one before it sleeps on a condition variable, and the caller
 * of parallel_for spins as long for the workers to finish before it sleeps: the ~20 parallel
 * regions of a decode layer hand work over without a sleep and a wake-up each, and an idle
 * pool costs no CPU after the budget. The budget adapts between 1/64 of that and all of it:
 * spins that see their event double it, spins that run out or lose their core on the way
 * (descheduled for 20 µs or more) halve it, so on oversubscribed cores the pool soon sleeps
 * at once.
 */
#ifndef SRT_PLUGIN_HOST_H
#define SRT_PLUGIN_HOST_H

#include <stdio.h>

#include <shadowrt/plugin.h>

/*
 * Make a host table with a pool of nthreads threads (0 = number of online CPUs; the calling
 * thread counts as one). Returns 0 and *out, or SRT_EINVAL (nthreads < 0 or > 4096),
 * SRT_ENOMEM or SRT_EIO (pthread_create failed),
 * with a reason in why. The caller owns *out and frees it with srt_host_destroy.
 */
int srt_host_create(int nthreads, struct srt_host **out, char *why, size_t why_len);

/*
 * Stop the workers and free the table. Every plugin instance created with this host must be
 * destroyed first. Must not be called while a parallel_for on this host is running. NULL is ok.
 */
void srt_host_destroy(struct srt_host *host);

/* Workers of host's pool asleep now (after their spin budget ran out), and the times a worker
 * went to sleep since srt_host_create: for tests and statistics. */
int srt_host_pool_sleeping(const struct srt_host *host);
long long srt_host_pool_sleeps(const struct srt_host *host);

/* One-thread time of host's pool, for statistics: with timing on, the submitting thread's
 * time outside parallel_for calls plus the calls it runs alone (one unit, or a one-thread
 * pool), i.e. the time the other threads of the pool wait, in ns since timing was switched
 * on (which resets it; srt_host_pool_one_thread_ns counts up to now). Costs two clock reads
 * a parallel_for while on. Call both from the thread that calls parallel_for, between calls. */
void srt_host_pool_timing(const struct srt_host *host, int on);
long long srt_host_pool_one_thread_ns(const struct srt_host *host);

/* --- process-wide logging, usable by the core as well ------------------------------------ */

/* Messages with level <= this are printed. Default SRT_LOG_WARN; env SHADOWRT_LOG_LEVEL
 * (0..3 or error/warn/info/debug) sets the initial value. Thread-safe. */
void srt_log_set_level(int level);
int srt_log_get_level(void);
/* Where lines go (default stderr). The stream is borrowed; NULL restores stderr. */
void srt_log_set_stream(FILE *stream);

/* The function srt_host.log points to; `who` is the plugin or module name (may be NULL). */
void srt_log(int level, const char *who, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void srt_vlog(int level, const char *who, const char *fmt, va_list ap);

#endif /* SRT_PLUGIN_HOST_H */
