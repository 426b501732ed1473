/*
 * The plugin conformance checks (`shadowrt check-plugin`): the executable form of the plugin
 * contract of the abi/shadowrt/ headers, run through the real executor (core/exec) on a real
 * checkpoint with the candidate plugin put in place by runtime-config overrides
 * (attention.ratio.R = PLUGIN, moe.plugin = PLUGIN or residual.plugin = PLUGIN).
 *
 * Checks (srt_conf_checks lists the names in order):
 *   pools       attention: a cache-only instance (weights NULL, the layers of ratio R) declares
 *               sane pools: 1..SRT_MAX_POOLS, unique non-empty names also unique against the
 *               other plugins of the model, ratio SRT_RATIO_PAGE or dividing the page size,
 *               a known retention, TAIL with tail_tokens >= 1, entry_bytes in [1, 1 GiB],
 *               layers a non-empty subset of the instance's layers; the same declaration
 *               again on a second call and on the weighted instance (the engine's pools)
 *   chunk       prefill in chunks of 7, 64 and 100 tokens = one-shot prefill, bitwise
 *   decode      token-by-token decode = one-shot prefill, bitwise
 *   resume-l1   a request resuming from a cached prefix (L1) = the same request from scratch,
 *               its prompt logits and 3 decode steps after it, bitwise; the hit must be > 0
 *   resume-l2   the same after every L1 page was evicted to an L2 host tier
 *   resume-l3   the same from a file L3 written by another engine instance
 *   batch       3 sequences in one batched prefill + 2 batched decode steps = each alone
 *   threads     1 worker thread = N worker threads, bitwise
 *   guard       every L1 page fenced by PROT_NONE guard pages and canaries: a run with a
 *               prefix hit and decode steps faults (reported) or damages no canary
 *   divergence  teacher-forced logits against the built-in plugin of the same role (the
 *               config's mapping without the candidate): KL, top-1 agreement, max |Δlogit|;
 *               informational (PASS) unless max_kl >= 0 is exceeded; SKIP when no other
 *               plugin serves that role in the config (none, or the candidate itself by name)
 *
 * Every check runs in a child process (fork), so a plugin that crashes fails its check with
 * the signal instead of ending the run. Deterministic: fixed prompts (srt_div_prompt).
 */
#ifndef SRT_CHECK_CONFORM_H
#define SRT_CHECK_CONFORM_H

#include <stddef.h>
#include <stdint.h>

#include "check/diverge.h"

enum srt_conf_status { SRT_CONF_PASS = 0, SRT_CONF_FAIL = 1, SRT_CONF_SKIP = 2, SRT_CONF_ERROR = 3 };

struct srt_conf_opts {
	uint32_t kind;          /* SRT_KIND_ATTENTION / _MOE / _RESIDUAL */
	const char *plugin;     /* name or path of the candidate */
	const char *name;       /* the candidate's descriptor name (for the divergence check) */
	int32_t ratio;          /* attention: the compress ratio it serves */
	const char *config_path; /* runtime INI (NULL = built-in default) */
	const char *const *sets; /* the user's --set overrides (borrowed) */
	size_t n_sets;
	const char *model;      /* checkpoint dir or preset; NULL = the config's */
	int profile;            /* enum srt_profile, < 0 = the config's */
	int threads;            /* threads of the candidate runs (>= 2 for `threads`) */
	uint64_t tokens;        /* prompt length of chunk/decode/threads/divergence (>= 8) */
	uint64_t seed;
	const char *tmp_dir;    /* scratch directory (L3 files), must exist */
	double max_kl;          /* divergence fails when mean KL exceeds it; < 0 = never */
	int quiet;              /* 1: no progress on stderr */
};

struct srt_conf_result {
	char name[16];
	int status;             /* enum srt_conf_status */
	char detail[640];
	struct srt_div div;     /* divergence (and first difference of the bitwise checks) */
	uint64_t hit;           /* resume checks: the prefix hit */
	double seconds;
};

/* The check names, NULL-terminated, in the order above. */
extern const char *const srt_conf_checks[];

/* Is `name` one of srt_conf_checks? */
int srt_conf_known(const char *name);

/* Run one check in a child process. Fills *r (never fails: errors are SRT_CONF_ERROR). */
void srt_conf_run(const struct srt_conf_opts *o, const char *check, struct srt_conf_result *r);

const char *srt_conf_status_name(int status);

#endif
