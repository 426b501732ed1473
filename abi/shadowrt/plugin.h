/*
 * shadowrt plugin ABI, version 1 — the descriptor, the version rule and the host API.
 *
 * This directory (abi/shadowrt/) holds the only headers a plugin includes. They are installed
 * with the runtime (`cmake --install`) and found through pkg-config (`shadowrt-plugin`).
 *
 * A plugin is a shared object that exports exactly one entry symbol:
 *
 *     SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void);
 *
 * The function must have no side effects: it returns a pointer to a static, constant
 * descriptor. No CUDA initialisation, no ISA-specific code, no allocation.
 *
 * Version rule (checked by the core before any other plugin code runs):
 *   - desc->abi_major must equal SRT_ABI_MAJOR of the core;
 *   - desc->abi_minor must be <= the core's SRT_ABI_MINOR;
 *   - desc->struct_size must be >= SRT_PLUGIN_DESC_V1_SIZE (the size of the v1 struct).
 * Structs only ever grow at the end. Every struct in this ABI starts with a uint32_t
 * struct_size; the reader copies min(struct_size, sizeof what it knows) into a zeroed copy,
 * so fields a plugin does not know read as zero/NULL. Methods documented as optional may be
 * NULL; the caller checks before calling.
 *
 * Lifetime: plugins are never dlclose()d while the process runs. `probe` may be called any
 * number of times; `create` once per instance; `destroy` once per created instance.
 *
 * Errors: functions that can fail return 0 on success or a negative SRT_E* code, and may
 * write a human-readable reason into a caller-supplied buffer.
 *
 * Logging: srt_host.log prints "shadowrt[<plugin>] <level>: ..." on stderr for messages at or
 * below the process level: SRT_LOG_WARN unless the environment variable SHADOWRT_LOG_LEVEL
 * says error, warn, info or debug (or 0..3).
 *
 * The numerics SDK: <shadowrt/ops.h> (libshadowrt-ops.so.1, `pkg-config shadowrt-ops`) holds
 * the ops the built-in CPU plugins compute with, so an out-of-tree plugin computes exactly
 * what they compute. `shadowrt check-plugin PLUGIN.so` runs the conformance suite.
 */
#ifndef SHADOWRT_PLUGIN_H
#define SHADOWRT_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SRT_ABI_MAJOR 1
#define SRT_ABI_MINOR 1

/* Name of the one symbol every plugin exports. */
#define SRT_PLUGIN_ENTRY_SYMBOL "srt_plugin_entry"

#if defined(__GNUC__)
#define SRT_EXPORT __attribute__((visibility("default")))
#else
#define SRT_EXPORT
#endif

/* Status codes: 0 or a negative errno-style value. */
enum srt_status {
	SRT_OK = 0,
	SRT_ENOENT = -2,   /* not found / absent */
	SRT_EIO = -5,      /* I/O failed (backend, disk, network) */
	SRT_ENOMEM = -12,  /* allocation failed or a memory budget was reached */
	SRT_EBUSY = -16,   /* resource is locked / in use */
	SRT_EINVAL = -22,  /* invalid argument or configuration */
	SRT_ENOSPC = -28,  /* storage full */
	SRT_ENOTSUP = -95, /* operation not supported by this plugin */
	SRT_ECORRUPT = -1000, /* stored data failed validation */
	SRT_EVERSION = -1001, /* ABI or format version mismatch */
};

/* Plugin kinds. Each kind has its own vtable header. */
enum srt_kind {
	SRT_KIND_ATTENTION = 1, /* abi/shadowrt/attention.h */
	SRT_KIND_MOE = 2,       /* abi/shadowrt/moe.h */
	SRT_KIND_RESIDUAL = 3,  /* abi/shadowrt/residual.h */
	SRT_KIND_TIER = 4,      /* abi/shadowrt/tier.h */
};

/* Capability flags (desc->caps). */
#define SRT_CAP_CPU (1u << 0)          /* computes on / stores in host memory */
#define SRT_CAP_CUDA (1u << 1)         /* computes on / stores in CUDA device memory */
#define SRT_CAP_BATCH (1u << 2)        /* accepts batches of several sequences */
#define SRT_CAP_KEYED_STORE (1u << 3)  /* tier: exists/get/put by key (L3) */
#define SRT_CAP_PAGE_ARENA (1u << 4)   /* tier: alloc/free page arenas (L1/L2) */

/* Log levels for srt_host.log. */
enum srt_log_level { SRT_LOG_ERROR = 0, SRT_LOG_WARN = 1, SRT_LOG_INFO = 2, SRT_LOG_DEBUG = 3 };

/* Memory spaces an activation or page pointer may live in. */
enum srt_mem { SRT_MEM_HOST = 0, SRT_MEM_CUDA = 1 };

/* Numerics profiles (see README / DESIGN.md "Execution"). */
enum srt_profile {
	SRT_PROFILE_REFERENCE = 0, /* DeepSeek's rounding: bf16 activations, FP8/FP4 fake-quant */
	SRT_PROFILE_F32 = 1,       /* fp32 throughout, no rounding, no fake-quant */
};

/*
 * Work split for srt_host.parallel_for: fn is called with disjoint [begin, end) ranges that
 * cover [0, n); tid is in [0, nthreads). Calls return after every range is done. Call it as
 * host->parallel_for(host, n, fn, ctx).
 */
typedef void (*srt_range_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/*
 * The table of services the core hands every plugin. Borrowed: valid from `create` until
 * after `destroy`. Plugins link nothing from the core binary; they use these pointers.
 * All members are thread-safe.
 */
struct srt_host {
	uint32_t struct_size;
	uint16_t abi_major, abi_minor; /* the core's ABI version */

	/* printf-style logging, prefixed by the core with the plugin name. */
	void (*log)(int level, const char *plugin, const char *fmt, ...)
#if defined(__GNUC__)
		__attribute__((format(printf, 3, 4)))
#endif
		;
	/* Aligned host allocation (align is a power of two >= sizeof(void *)); NULL on failure. */
	void *(*alloc)(size_t size, size_t align);
	void (*free)(void *p);

	/* Worker threads the plugin may use through parallel_for (>= 1). */
	int nthreads;
	void (*parallel_for)(const struct srt_host *host, int64_t n, srt_range_fn fn, void *ctx);
};

/* Only reads after checking struct_size: the table grows at the end. */
#define SRT_HOST_HAS(host, member)                                                             \
	((host)->struct_size >= offsetof(struct srt_host, member) + sizeof((host)->member) &&  \
	 (host)->member != NULL)

struct srt_model_config; /* model.h */
struct srt_weights;      /* model.h */

/*
 * Arguments to create. Borrowed for the duration of `create`; pointers inside (model,
 * weights, layers) stay valid until the instance is destroyed.
 *
 * Cache-only create (attention plugins): `weights` is NULL when the core only needs the pool
 * declarations — `shadowrt replay` (cache-only trace replay), geometry reports, the pools
 * check of check-plugin. model, layers (the layers of the plugin's ratio, MTP included) and
 * page_tokens are set as usual. Such an instance must declare exactly the pools it would
 * declare with weights, and may fail forward (saying so); it must not fail create for lack of
 * weights.
 */
struct srt_plugin_args {
	uint32_t struct_size;
	const struct srt_model_config *model; /* NULL for tier plugins */
	const struct srt_weights *weights;    /* NULL for tier plugins */
	const int32_t *layers;                /* model layers this instance serves (may be NULL) */
	uint32_t n_layers;
	uint32_t page_tokens;                 /* ShadowRadix page size P */
	uint32_t profile;                     /* enum srt_profile */
	/*
	 * Plugin-specific options from the runtime config section that named this plugin
	 * ([attention.csa], [tier.l3], ...). Returns NULL when the key is absent. The string is
	 * borrowed until create returns.
	 */
	const char *(*option)(void *ctx, const char *key);
	void *option_ctx;
	const char *role; /* the role this instance serves, e.g. "attention.csa", "tier.l3" */
};

/*
 * The descriptor. Returned by srt_plugin_entry(); must be static and constant.
 */
struct srt_plugin_desc {
	uint32_t struct_size;          /* sizeof(struct srt_plugin_desc) the plugin was built with */
	uint16_t abi_major, abi_minor; /* SRT_ABI_MAJOR / SRT_ABI_MINOR the plugin was built with */
	uint32_t kind;                 /* enum srt_kind */
	const char *name;              /* short unique name, e.g. "csa", "host", "redis" */
	const char *version;           /* the plugin's own version string */
	const char *description;       /* one line for `shadowrt plugins` */
	uint64_t caps;                 /* SRT_CAP_* */

	/*
	 * Optional. Side-effect free check whether this plugin can run here (CPU features,
	 * a device, a library). Returns 0 if usable; otherwise a negative code and a reason in
	 * why[why_len]. Must not initialise CUDA or execute ISA-specific instructions before it
	 * has checked for them.
	 */
	int (*probe)(const struct srt_host *host, char *why, size_t why_len);

	/* Required. Make an instance; 0 and *instance set, or a negative code and a reason. */
	int (*create)(const struct srt_host *host, const struct srt_plugin_args *args,
		      void **instance, char *why, size_t why_len);
	/* Required. Release everything the instance owns. */
	void (*destroy)(void *instance);

	/* Required. The kind's vtable (starts with uint32_t struct_size); static and constant. */
	const void *vtable;

	/* --- ABI 1.1 ------------------------------------------------------------------------ */

	/*
	 * Optional. The options this plugin reads from its config section through
	 * srt_plugin_args.option, ended by an entry whose name is NULL. The core refuses a config
	 * that sets any other key in the plugin's section (naming the plugin, the key, the
	 * file:line and the valid options), before create runs. NULL: the plugin declares nothing
	 * and its section is not checked (ABI 1.0 plugins read as NULL). A plugin that takes no
	 * option declares a table holding only the terminator.
	 */
	const struct srt_plugin_option *options;

	/*
	 * Optional (ABI 1.1; NULL when absent, and for plugins built against ABI 1.0). Names the
	 * layout and meaning of the bytes this plugin writes into cache pages, e.g.
	 * "swa-kv/bf16-e4m3/2". Change it whenever the same inputs would produce different page
	 * bytes. The core puts it into every cached page's identity (with name, version and
	 * options); without it the core derives one from the name, the version and the declared
	 * pools.
	 */
	const char *layout_id;
};

/*
 * One option a plugin reads from its runtime-config section (srt_plugin_desc.options). All
 * strings are static. `type` and `default_value` are informational (shown by `shadowrt
 * plugins --options` and in error messages); the plugin still parses and validates the value
 * in create and fails with a message when it is wrong.
 */
struct srt_plugin_option {
	const char *name;          /* key, e.g. "kv_dtype" */
	const char *type;          /* "bf16|fp8|f32|auto", "size", "int", "bool", "path", ... */
	const char *default_value; /* what absent means, e.g. "auto"; NULL = no default */
	const char *help;          /* one line */
};

#define SRT_PLUGIN_DESC_V1_SIZE (offsetof(struct srt_plugin_desc, vtable) + sizeof(const void *))
/* A descriptor at least this big has the 1.1 member `options`. */
#define SRT_PLUGIN_DESC_V1_1_SIZE                                                              \
	(offsetof(struct srt_plugin_desc, options) + sizeof(const struct srt_plugin_option *))

/* Signature of the entry symbol. */
typedef const struct srt_plugin_desc *(*srt_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* SHADOWRT_PLUGIN_H */
