/*
 * Pool geometry of a model: load the model config, load the attention plugins through the
 * plugin registry, create one instance per attention type with weights == NULL (pool
 * declaration only) and collect their pool declarations, ready for srt_rdx_cache_create.
 *
 * Compress ratio -> plugin: the runtime config's [attention] ratio.N (opts.rc), with the options
 * of its [attention.<plugin>] section; without opts.rc the built-in 0 -> "swa", 4 -> "csa",
 * 128 -> "hca". A ratio no plugin serves is refused with a message naming it. Each instance is
 * created cache-only (weights NULL, see abi/shadowrt/plugin.h) for the model's main layers of
 * its ratio.
 *
 * Thread safety: a geometry is read-only after load. Not reentrant while loading (the registry
 * and the host are per geometry, but dlopen and logging are process-wide).
 */
#ifndef SRT_RADIX_GEOMETRY_H
#define SRT_RADIX_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/model.h>
#include <shadowrt/pool.h>

#include "radix/radix.h"

struct srt_runtime_config;

struct srt_rdx_geometry {
	struct srt_model_config model;
	uint32_t n_pools;
	/* Declarations of every instance, in plugin order swa, csa, hca (those the model uses).
	 * `layers` pointers stay valid until srt_rdx_geometry_free. */
	struct srt_pool_decl pools[SRT_RDX_MAX_POOLS];
	void *priv_; /* host, registry, instances */
};

struct srt_rdx_geometry_opts {
	uint32_t page_tokens;        /* P handed to the plugins (0 = 256) */
	const char *kv_dtype;        /* plugin option kv_dtype (NULL = the plugin's default) */
	const char *index_dtype;     /* plugin option index_dtype (NULL = plugin default) */
	const char *const *dirs;     /* extra plugin directories searched first (may be NULL) */
	size_t ndirs;
	/* runtime config (borrowed, may be NULL): attention plugin per ratio, their options and
	 * plugin_dirs (searched after dirs); kv_dtype/index_dtype above win over its options */
	const struct srt_runtime_config *rc;
};

/*
 * Load `model` (a preset name or a path, see srt_model_config_load). Returns 0 and *out (free
 * with srt_rdx_geometry_free), or the failing step's code with a message naming the model, the
 * plugin or the option.
 */
int srt_rdx_geometry_load(const char *model, const struct srt_rdx_geometry_opts *opts,
			  struct srt_rdx_geometry **out, char *err, size_t errlen);
void srt_rdx_geometry_free(struct srt_rdx_geometry *g);

/* Bytes the pools hold for one sequence of n tokens with nothing released (ALL pools: every
 * page; TAIL pools: only the pages covering the window before n). */
uint64_t srt_rdx_geometry_seq_bytes(const struct srt_rdx_geometry *g, uint32_t page_tokens,
				    uint64_t n_tokens, uint64_t *all_bytes, uint64_t *tail_bytes);

#endif
