/*
 * The L3 writer: takes L3 puts and removes off the request path. One thread drains a bounded
 * FIFO of operations into the store in batches (one store put call per batch of consecutive
 * puts: one SQLite transaction, one Redis pipeline, one file-store sync per batch).
 *
 * Order: operations reach the store in the order they were queued, so a remove queued after a
 * put of the same key wins, and a store's contents are always those of a prefix of the queue;
 * the tier manager's budget therefore holds in the store at every instant, as it did when each
 * call ran inline. A put still queued (not yet handed to the store) is cancelled by a remove of
 * its key.
 *
 * Read-your-writes: a page whose put is queued or in flight is visible to srt_twr_has and can be
 * read with srt_twr_read (a copy of the queued payload), so a lookup or a load between the
 * queueing and the store call still hits.
 *
 * Back-pressure: the queue holds at most queue_bytes of payload (at least one operation). When
 * it is full, SRT_TWR_WAIT makes the producer wait for the writer (counted: waits and the time
 * waited); SRT_TWR_DROP drops the put (counted; srt_twr_put returns 1). Memory is never
 * unbounded either way.
 *
 * Failures: a batch the store refuses (or that is skipped because L3 is down, see `usable`) is
 * removed again best effort, and its keys are handed back through srt_twr_reap so the manager
 * can forget them. Lost puts (failed, skipped, dropped) are logged: the first of a run at once
 * with its reason, then a summary every report_ms while the run lasts, at every flush, and one
 * line when puts succeed again. srt_twr_note_lost lets the caller count puts it skipped itself.
 *
 * Synchronous mode (sync = 1): every call runs inline in the caller's thread, same accounting
 * (the behaviour before the writer existed; for comparisons and tests).
 *
 * Thread safety: every function may be called from any thread; one writer per store.
 */
#ifndef SRT_TIER_WRITER_H
#define SRT_TIER_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/plugin.h>
#include <shadowrt/tier.h>

#include "tier/store.h"

enum srt_twr_full { SRT_TWR_WAIT = 0, SRT_TWR_DROP = 1 };

struct srt_twr_config {
	struct srt_tier_store *store; /* borrowed; outlives the writer */
	const char *name;             /* for logs, e.g. "L3 (file)" */
	const struct srt_host *host;  /* logging; borrowed */
	int sync;                     /* 1: no thread, every call inline */
	uint64_t queue_bytes;         /* payload bytes queued at most (0 = 64 MiB) */
	uint32_t batch;               /* operations per store call at most (0 = 1024) */
	int full;                     /* enum srt_twr_full */
	uint32_t report_ms;           /* summary of lost puts while a run lasts (0 = 60000) */
	/* L3 gate (the manager's outage logic): usable() == 0 skips the batch; result() gets
	 * every store call's status. Both optional. */
	int (*usable)(void *ctx);
	void (*result)(void *ctx, int rc, const char *what);
	void *ctx;
};

struct srt_twr_stats {
	uint64_t puts_queued;     /* puts accepted (queued or, in sync mode, run) */
	uint64_t puts_written;    /* puts the store accepted */
	uint64_t puts_lost;       /* failed + skipped while down + dropped + noted by the caller */
	uint64_t puts_dropped;    /* of which dropped because the queue was full (SRT_TWR_DROP) */
	uint64_t puts_cancelled;  /* queued puts cancelled by a remove before they were written */
	uint64_t removes;         /* removes handed to the store */
	uint64_t batches;         /* store put calls */
	uint64_t waits;           /* producer waits on a full queue (SRT_TWR_WAIT) */
	double wait_s;            /* time producers waited */
	uint64_t read_hits;       /* srt_twr_read served from the queue */
	uint64_t queue_peak;      /* payload bytes queued at most */
	uint64_t queued_now;      /* operations queued or in flight now */
};

struct srt_twr;

/* 0 and *out, SRT_ENOMEM, or SRT_EIO when the thread cannot start (err says so). */
int srt_twr_create(const struct srt_twr_config *cfg, struct srt_twr **out, char *err,
		   size_t errlen);
/* Flush (every queued operation reaches the store), stop the thread, free. NULL is ok. */
void srt_twr_destroy(struct srt_twr *w);

/*
 * Queue a put of payload[0..len) under key (copied; pool is returned by srt_twr_reap). Returns
 * 0 when queued (or written, sync mode), 1 when it was dropped (queue full, SRT_TWR_DROP) or,
 * in sync mode, the store failed; SRT_ENOMEM when no memory for the copy.
 */
int srt_twr_put(struct srt_twr *w, const struct srt_key *key, uint32_t pool, const void *payload,
		size_t len);
/* Queue a remove of key (cancels a queued put of it). */
void srt_twr_remove(struct srt_twr *w, const struct srt_key *key);
/* 1 when a put of key is queued or in flight (not cancelled). */
int srt_twr_has(struct srt_twr *w, const struct srt_key *key);
/* Copy the queued payload of key into buf (cap bytes): 1 and *len, or 0 when none is queued. */
int srt_twr_read(struct srt_twr *w, const struct srt_key *key, void *buf, size_t cap,
		 size_t *len);
/* Count n puts the caller did not queue because L3 was unusable (for the lost-put reports). */
void srt_twr_note_lost(struct srt_twr *w, uint64_t n, const char *why);
/*
 * Keys (and pools) of puts that failed since the last call, up to max; returns how many were
 * written to keys/pools. Call until it returns less than max.
 */
size_t srt_twr_reap(struct srt_twr *w, struct srt_key *keys, uint32_t *pools, size_t max);
/*
 * Wait until every operation queued so far reached the store, then log the puts lost since the
 * last report, if any. Returns the number of puts lost since the writer was created.
 */
uint64_t srt_twr_flush(struct srt_twr *w);
void srt_twr_stats(struct srt_twr *w, struct srt_twr_stats *out);
/* Hold (1) / release (0) the writer before its next batch (tests); flush waits while held. */
void srt_twr_hold(struct srt_twr *w, int hold);

#endif
