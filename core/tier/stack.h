/*
 * A tier stack: the L2 and L3 plugins a runtime config names ([tier.l2], [tier.l3], [cache]),
 * loaded through the plugin registry, and the tier manager over them. What `replay` and the
 * executor use to get tiers from a config:
 *
 *     struct srt_tier_stack *ts;
 *     struct srt_tier_stack_opts o = {.rc = &rc, .pools = pools, .n_pools = n,
 *                                     .page_tokens = 256, .model_ident = "v4-flash kv=fp8"};
 *     if (srt_tier_stack_open(&o, &ts, err, sizeof(err))) fail(err);
 *     cfg.hooks = srt_tmgr_hooks(srt_tier_stack_manager(ts));  // radix config
 *     srt_rdx_cache_create(&cfg, ...); srt_tmgr_attach(srt_tier_stack_manager(ts), cache);
 *     ... srt_rdx_cache_destroy(cache); srt_tier_stack_close(ts);
 *
 * Overrides (command-line flags) replace single settings of the config; NULL / -1 keep it.
 * The L3 plugin gets its options from the overrides first, then from [tier.l3]. In synthetic
 * mode (payload_bytes > 0) the store's own max_bytes is not set (objects are smaller than the
 * pages they stand for); the manager's L3 budget applies.
 *
 * Errors name the section, the plugin and the reason. Not thread safe; one stack per manager.
 */
#ifndef SRT_TIER_STACK_H
#define SRT_TIER_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "config/runtime_config.h"
#include "tier/manager.h"

#define SRT_TIER_STACK_MAX_OPTS 8

struct srt_tier_overrides {
	const char *l2_plugin; /* "host", "none" */
	uint64_t l2_budget;    /* 0 = keep */
	const char *l3_plugin; /* "file", "sqlite", "redis", "none" */
	uint64_t l3_budget;    /* 0 = keep */
	const char *l3_opts[SRT_TIER_STACK_MAX_OPTS][2]; /* key, value pairs; NULL key ends */
	int write_policy;      /* -1 = keep */
	int prefetch;          /* -1 = keep */
	/* L3 writer (tier/writer.h); 0 = default */
	int write_sync;             /* 1: L3 writes inline on the request path (default async) */
	uint64_t write_queue_bytes; /* write queue bound (default 64 MiB) */
	uint32_t write_batch;       /* puts per store call (default 1024) */
	int write_full;             /* SRT_TWR_WAIT (default) or SRT_TWR_DROP */
	uint32_t l3_report_ms;      /* lost-put summaries (default 60000) */
};

struct srt_tier_stack_opts {
	const struct srt_runtime_config *rc; /* required; borrowed for open only */
	const struct srt_tier_overrides *over; /* may be NULL */
	const char *const *dirs;             /* extra plugin directories (may be NULL) */
	size_t ndirs;
	const struct srt_pool_decl *pools;   /* the radix cache's pools */
	uint32_t n_pools;
	uint32_t page_tokens;
	const char *model_ident;             /* weights + KV dtypes, for the fingerprint */
	uint32_t layout_version;             /* cache layout version (0 = 1) */
	uint32_t payload_bytes;              /* 0 real pages, > 0 synthetic */
	uint32_t l3_retry_ms;                /* 0 = 1000 */
	uint32_t tail_stride;                /* srt_tmgr_config.tail_stride */
};

struct srt_tier_stack;

int srt_tier_stack_open(const struct srt_tier_stack_opts *o, struct srt_tier_stack **out,
			char *err, size_t errlen);
struct srt_tmgr *srt_tier_stack_manager(struct srt_tier_stack *s);
/* One line per tier for printing: "L2 host 16 GiB", "L3 file ./cache 200 GiB". */
const char *srt_tier_stack_describe(const struct srt_tier_stack *s, int level);
void srt_tier_stack_close(struct srt_tier_stack *s);

#endif
