/*
 * The executor: one model, its plugins and its ShadowRadix cache, running batched forward
 * passes for sequences (chunked prefill and decode) and producing logits.
 *
 * Open: load the runtime config (INI over the built-in default), the model (a checkpoint
 * directory, or a preset name whose synthetic checkpoint is generated into a cache directory
 * when missing; see srt_engine_model_dir), validate the checkpoint against the model config
 * (srt_ck_dsv4_check), start the plugin host, instantiate one attention plugin per compress
 * ratio the model uses (serving exactly the layers of that ratio, options from its
 * [attention.<name>] section), the MoE and residual plugins, and build the ShadowRadix cache
 * from the attention instances' pool declarations (concatenated in ratio order; the [tier.l1]
 * budget is split between pools in proportion to their page sizes; pages come from the
 * engine's 64-byte aligned, zeroed allocator) and, when asked (opts.tiers), the L2/L3 tier
 * stack of the config behind it: pages evicted from L1 are demoted, a prompt's pages found in
 * L2/L3 are restored (and verified) before the request computes.
 *
 * Forward pass per batch (rows = tokens of every sequence, one after another):
 *   embedding (bf16 rows of embed.weight) -> residual embed;
 *   per main layer: pre -> attention -> post -> pre -> moe -> post (one plugin call per
 *   layer for the whole batch);
 *   head on the rows whose logits are wanted: residual head -> [reference: bf16] -> final
 *   RMSNorm (norm.weight) -> [reference: bf16] -> logits = head.weight (bf16) . y in fp32.
 *
 * Sequences follow the ShadowRadix lifecycle: start = match the prompt (all but its last
 * token, so at least one position is computed) and lock the hit; prefill extends the request
 * chunk by chunk from the hit; every forward commits the whole pages it completed and
 * releases window pages that left every window; finish inserts the rest and unlocks.
 *
 * Determinism: with the CPU plugins, logits do not depend on the chunk size, on batching with
 * other sequences or on resuming from a prefix hit (tests/exec proves it bitwise).
 *
 * Errors: functions that can fail return 0 or a negative SRT_E* code and write a one-line
 * message naming what failed (file, tensor, plugin, request) into err[errlen].
 *
 * Thread safety: an engine and its sequences are used from one thread at a time; the engine
 * uses its host's worker threads inside a call.
 */
#ifndef SRT_EXEC_ENGINE_H
#define SRT_EXEC_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/model.h>

struct srt_runtime_config;
struct srt_rdx_cache;
struct srt_rdx_allocator;
struct srt_tmgr;

struct srt_engine_opts {
	const char *config_path; /* runtime INI over the built-in default; NULL = default only */
	const char *model;       /* checkpoint dir or preset name; NULL = the config's model */
	const char *model_cache; /* where presets are generated; NULL = srt_engine_cache_dir() */
	int threads;             /* worker threads; < 0 = the config's (0 = all cores) */
	int profile;             /* enum srt_profile; < 0 = the config's */
	int chunk;               /* prefill chunk tokens; <= 0 = the config's prefill_chunk */
	int quiet;               /* 1: no "generating checkpoint" note on stderr */
	/* 1: the L2/L3 tiers of the config ([tier.l2], [tier.l3], [cache]) behind the L1 cache
	 * (tier/stack.h); 0: L1 only (deterministic hits, nothing written outside memory) */
	int tiers;
	/* L1 page allocator (borrowed; must hand out zeroed, 64-byte aligned pages); NULL = the
	 * engine's own. `check-plugin` passes one that fences every page with guard pages. */
	const struct srt_rdx_allocator *page_alloc;
	/* 1: never rematerialize windows (a prefix hit then needs its TAIL pages cached); 0: the
	 * executor decides per hit (see srt_engine_seq_start) */
	int no_remat;
};

struct srt_engine;
struct srt_seq;

/*
 * The default directory for generated preset checkpoints: $XDG_CACHE_HOME/shadowrt/models
 * when XDG_CACHE_HOME is set, else ./shadowrt-models. Static storage or buf.
 */
const char *srt_engine_cache_dir(char *buf, size_t len);

/*
 * Resolve a model argument to a checkpoint directory in out[len]: a directory holding
 * config.json is used as is; a preset name ("tiny", "small") maps to <cache_dir>/<name>,
 * where the synthetic checkpoint is written first when its config.json is missing (the
 * directories are created). Returns 0, or SRT_ENOENT (neither a directory nor a preset),
 * SRT_EIO (cannot create/write), SRT_EINVAL.
 */
int srt_engine_model_dir(const char *model, const char *cache_dir, int quiet, char *out,
			 size_t len, char *err, size_t errlen);

/* Open an engine (see the top of this file). Returns 0 and *out (close with
 * srt_engine_close), or the failing step's code with its message. */
int srt_engine_open(const struct srt_engine_opts *opts, struct srt_engine **out, char *err,
		    size_t errlen);
/* Free sequences still alive, the cache, the plugins, the host, the checkpoint. NULL ok. */
void srt_engine_close(struct srt_engine *e);

const struct srt_model_config *srt_engine_model(const struct srt_engine *e);
const struct srt_runtime_config *srt_engine_runtime(const struct srt_engine *e);
/* The cache (borrowed): stats, and eviction in tests. */
struct srt_rdx_cache *srt_engine_cache(struct srt_engine *e);
/* The tier manager (borrowed; srt_tmgr_stats), NULL when opened with tiers = 0 or none set. */
struct srt_tmgr *srt_engine_tiers(struct srt_engine *e);
/* "L2 host 8 GiB" style line for level 1 (L2) or 2 (L3), or NULL without tiers. */
const char *srt_engine_tier_describe(const struct srt_engine *e, int level);
const char *srt_engine_model_path(const struct srt_engine *e); /* checkpoint directory */
/* The cache identity (32 bytes, exec/identity.h): every cached page's L3 key covers it. */
const uint8_t *srt_engine_identity(const struct srt_engine *e);
int srt_engine_profile(const struct srt_engine *e);
int srt_engine_threads(const struct srt_engine *e);
int srt_engine_chunk(const struct srt_engine *e);
void srt_engine_set_chunk(struct srt_engine *e, int chunk); /* asserts chunk >= 1 */
/* Bytes of weights one decode step of one sequence reads, on average: every dense tensor of
 * the main layers and the head, the routed experts of num_experts_per_tok experts per layer,
 * the compressors' projections once per 4 tokens; not the embedding, hash tables or MTP. */
uint64_t srt_engine_decode_weight_bytes(const struct srt_engine *e);
/* The same bytes split by the profile phase that reads them (ops/prof.h's enum srt_prof_phase;
 * bytes[SRT_PROF_COUNT]: the engine's own, the head and final norms); they add up to
 * srt_engine_decode_weight_bytes. */
void srt_engine_decode_weight_phases(const struct srt_engine *e, uint64_t *bytes);
/* Times a worker of the engine's thread pool went to sleep since the engine was opened
 * (srt_host_pool_sleeps): a sleeping worker is woken at its next job, which costs tens of
 * microseconds on a virtual machine. */
long long srt_engine_pool_sleeps(const struct srt_engine *e);
/* The pool's one-thread time (srt_host_pool_timing / srt_host_pool_one_thread_ns): switch the
 * timing on or off (on resets it), and the ns the other threads waited since it was on. */
void srt_engine_pool_timing(const struct srt_engine *e, int on);
long long srt_engine_pool_one_thread_ns(const struct srt_engine *e);

/*
 * Start a sequence whose prompt is tokens[0..n) (n >= 1, copied). use_cache = 1: match the
 * prompt's first n - 1 tokens in the cache and resume after the hit (*hit, may be NULL, gets
 * its length, a multiple of the page size); 0: compute from position 0. Returns 0 and *out,
 * or SRT_EINVAL (empty prompt, token id out of range), SRT_ENOMEM.
 *
 * Window rematerialization (L1 cache, every attention plugin of ABI >= 1.1, not no_remat):
 * when the compressed (ALL) pools hold a longer prefix t than the ordinary hit h, the
 * executor resumes at t if rebuilding t's window KV and carry state (core/radix/remat.h: the
 * trapezoid of layer l over [lo(l), t), compressed entries read from the cache, never
 * written) costs fewer token-layers than computing [h, t); else it resumes at h. The rebuilt
 * pages are bitwise those of a computation from 0 and join the cache.
 */
int srt_engine_seq_start(struct srt_engine *e, const int32_t *tokens, uint64_t n, int use_cache,
			 struct srt_seq **out, uint64_t *hit, char *err, size_t errlen);

/*
 * Start a sequence without waiting for its tier loads: srt_engine_seq_start up to the tier
 * manager's lookup (tier/manager.h). The L2 -> L1 copies and L3 loads of its hit then run in
 * the manager's prefetch thread while the caller computes other sequences (the scheduler
 * admits the next requests this way before the step that computes the running ones). *hit is
 * the hit the lookup found; it is final once srt_engine_seq_wait returns (a load that fails
 * falls back to the longest prefix the tiers still verify). Without tiers, or with nothing to
 * load (srt_seq_loading is then 0), this is srt_engine_seq_start. Errors as
 * srt_engine_seq_start.
 */
int srt_engine_seq_begin(struct srt_engine *e, const int32_t *tokens, uint64_t n, int use_cache,
			 struct srt_seq **out, uint64_t *hit, char *err, size_t errlen);
/*
 * Wait for a begun sequence's tier loads, verify and commit them, rebuild its window when the
 * hit is rematerialized, and give the final hit (*hit, may be NULL). Called by whatever first
 * needs the pages: srt_engine_prefill, srt_engine_forward (which refuses, SRT_EINVAL, a
 * sequence whose hit moved from the one begin gave, since the caller's tokens were placed
 * after it), srt_engine_seq_finish. A no-op (0) when nothing is loading. On an error the
 * sequence is broken: free it.
 */
int srt_engine_seq_wait(struct srt_seq *s, uint64_t *hit, char *err, size_t errlen);
/* 1 while a begun sequence's tier loads have not been waited for. */
int srt_seq_loading(const struct srt_seq *s);
/* How many sequences had L2/L3 loads waited for by srt_engine_seq_wait (tests, benchmarks). */
uint64_t srt_engine_seq_waits(const struct srt_engine *e);

/*
 * Run the sequence's pending prompt tokens in chunks of srt_engine_chunk(). logits (may be
 * NULL) receives, with all = 1, [n - hit][vocab] (every computed prompt position), else
 * [vocab] for the last prompt position. Returns 0 or the code of the failing plugin call /
 * allocation (the sequence is then unusable: free it).
 */
int srt_engine_prefill(struct srt_engine *e, struct srt_seq *s, float *logits, int all,
		       char *err, size_t errlen);

/*
 * One batched forward over n sequences: sequence i appends toks[i][0..ntoks[i]) (ntoks[i] >= 1)
 * after its current length. logits (may be NULL) receives [Σ ntoks][vocab] with all = 1,
 * else [n][vocab] (the last row of each sequence). A sequence may appear once per call.
 * Decode is this with ntoks[i] = 1.
 */
int srt_engine_forward(struct srt_engine *e, struct srt_seq *const *seqs, uint32_t n,
		       const int32_t *const *toks, const int32_t *ntoks, float *logits, int all,
		       char *err, size_t errlen);

/* Convenience: one decode step, token tokens[i] appended to seqs[i]; logits [n][vocab]. */
int srt_engine_decode(struct srt_engine *e, struct srt_seq *const *seqs, uint32_t n,
		      const int32_t *tokens, float *logits, char *err, size_t errlen);

uint64_t srt_seq_len(const struct srt_seq *s);     /* tokens computed so far */
uint64_t srt_seq_pending(const struct srt_seq *s); /* prompt tokens not yet computed */
uint64_t srt_seq_hit(const struct srt_seq *s);     /* prefix hit at start */
/* The position whose window was rematerialized at start (0: none) and its cost in
 * token-layers. */
uint64_t srt_seq_remat(const struct srt_seq *s, uint64_t *token_layers);
/* The hit by tier: out[0] L1 tokens, out[1] restored from L2, out[2] from L3. */
void srt_seq_hit_tiers(const struct srt_seq *s, uint64_t out[3]);

/* Insert the sequence's pages into the cache and unlock (*cached, may be NULL: the prefix that
 * was already cached). The sequence cannot run afterwards. */
int srt_engine_seq_finish(struct srt_seq *s, uint64_t *cached, char *err, size_t errlen);
/* Free a sequence (aborted first when not finished). NULL is ok. */
void srt_engine_seq_free(struct srt_seq *s);

#endif /* SRT_EXEC_ENGINE_H */
