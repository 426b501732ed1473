/*
 * core/ops/prof.h — per-phase wall-clock counters of the CPU plugins, for benchmarks.
 *
 * A plugin that keeps them defines one `struct srt_prof` and exports the function
 * SRT_PROF_SYMBOL ("srt_plugin_prof") returning it. A benchmark that loaded the plugin
 * through the engine finds it with dlopen(path, RTLD_NOLOAD) + dlsym, sets `on`, runs, and
 * reads ns[] / calls[]. With `on` clear (the default) a phase costs one relaxed load.
 * Phases are timed on the thread that calls the plugin (around its parallel_for calls), so
 * ns[] is wall-clock time of that part of a forward pass, whatever the thread count.
 * Not thread-safe across concurrent forward calls of one plugin (benchmarks call one at a
 * time); nothing here changes what the plugins compute.
 */
#ifndef SRT_OPS_PROF_H
#define SRT_OPS_PROF_H

#include <stdint.h>
#include <time.h>

enum srt_prof_phase {
	SRT_PROF_ATTN_PROJ = 0, /* attn_norm, wq_a, wq_b, wkv, compressor and indexer projections */
	SRT_PROF_ATTN_CACHE,    /* KV / compressor / indexer-key writes into the cache pages */
	SRT_PROF_ATTN_INDEXER,  /* the lightning indexer's C4 scoring */
	SRT_PROF_ATTN_CORE,     /* top-k, key gather, scores, softmax, P.V, de-rotation */
	SRT_PROF_ATTN_OUT,      /* grouped wo_a and wo_b */
	SRT_PROF_MOE_ROUTE,     /* ffn_norm, router, expert choice, input quantization */
	SRT_PROF_MOE_EXPERTS,   /* routed experts (FP4) */
	SRT_PROF_MOE_SHARED,    /* shared expert (FP8) */
	SRT_PROF_MOE_COMBINE,   /* sum of the experts' outputs */
	SRT_PROF_RESIDUAL,      /* mHC pre / post / head collapse */
	SRT_PROF_COUNT
};

#define SRT_PROF_SYMBOL "srt_plugin_prof"

struct srt_prof {
	volatile int on;
	uint64_t ns[SRT_PROF_COUNT];
	uint64_t calls[SRT_PROF_COUNT];
};

typedef struct srt_prof *(*srt_prof_fn)(void);

static inline const char *srt_prof_name(int phase)
{
	static const char *const n[SRT_PROF_COUNT] = {
		"attention projections", "attention cache writes", "indexer (C4 scoring)",
		"attention core", "attention wo_a + wo_b", "moe routing", "moe routed experts",
		"moe shared expert", "moe combine", "mHC residual"};
	return phase >= 0 && phase < SRT_PROF_COUNT ? n[phase] : "?";
}

/* Now in ns when profiling is on, else 0 (no clock read). */
static inline uint64_t srt_prof_t0(const struct srt_prof *p)
{
	struct timespec ts;
	if (!p->on)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Adds the time since t0 (from srt_prof_t0) to `phase`; returns now, the next phase's t0. */
static inline uint64_t srt_prof_add(struct srt_prof *p, int phase, uint64_t t0)
{
	uint64_t t1 = srt_prof_t0(p);
	if (t0 && t1) {
		p->ns[phase] += t1 - t0;
		p->calls[phase]++;
	}
	return t1;
}

#endif /* SRT_OPS_PROF_H */
