/*
 * A guard-page L1 page allocator (srt_rdx_allocator) for conformance checks: every page is
 * its own mapping, placed so that its last byte (rounded up to 64) touches a PROT_NONE page,
 * with another PROT_NONE page before it and a canary pattern in the slack between the leading
 * guard and the page (and in the 0..63 bytes of rounding after it). A kernel that writes past
 * the end of a page faults at once (the caller runs it in a child process and reports the
 * signal); a write before the start or into the rounding is found by the canary check when the
 * page is freed or at srt_guard_verify.
 *
 * Pages are zeroed and 64-byte aligned, like the engine's own. Not thread-safe beyond what the
 * cache needs (the cache calls the allocator from one thread).
 */
#ifndef SRT_CHECK_GUARD_H
#define SRT_CHECK_GUARD_H

#include <stddef.h>
#include <stdint.h>

#include "radix/radix.h"

struct srt_guard;

/* 0 and *out (free with srt_guard_destroy), or SRT_ENOMEM. */
int srt_guard_create(struct srt_guard **out);
/* The allocator to hand to srt_engine_opts.page_alloc; valid while the guard lives. */
const struct srt_rdx_allocator *srt_guard_allocator(struct srt_guard *g);
/* Check the canaries of every live page; returns the number of damaged pages so far (freed
 * ones included) and describes the first in msg. */
uint64_t srt_guard_verify(struct srt_guard *g, char *msg, size_t len);
/* Pages handed out so far. */
uint64_t srt_guard_pages(const struct srt_guard *g);
/* Unmaps pages still live (after the engine is closed there are none). */
void srt_guard_destroy(struct srt_guard *g);

/*
 * 1 when addr lies in a guard page of g (for a SIGSEGV handler's message); async-signal-safe
 * only in the sense that it reads plain memory.
 */
int srt_guard_is_guard(const struct srt_guard *g, const void *addr);

#endif
