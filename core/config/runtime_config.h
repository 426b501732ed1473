/*
 * Runtime configuration (INI, read with inih): which plugin serves each role, plugin search
 * directories, cache and tier settings, threads, numerics profile, sampling.
 *
 *   [runtime]   plugin_dirs = a:b   threads = 0 (all cores)   profile = reference|f32
 *               model = tiny (preset name or path)   prefill_chunk = 256
 *   [attention] ratio.0 = swa   ratio.4 = csa   ratio.128 = hca     (ratio.N = plugin)
 *   [attention.<plugin>]  free options handed to that attention plugin
 *   [moe]       plugin = fp4       + free options
 *   [residual]  plugin = mhc       + free options
 *   [tier.l1] [tier.l2] [tier.l3]  plugin = host|file|sqlite|redis|none, budget = 4GiB
 *               + free options (path, host, port, max_bytes, ...)
 *   [cache]     page_size = 256   write_policy = write_through|write_through_after_N|write_back
 *               (write_through_after_N: N >= 1 hits before the copy; _after_2 is the usual one)
 *               prefetch = on|off   tenant_salt = <string>   l1_pages = hugepages|heap
 *   [sampling]  temperature = 0.7   top_p = 0.95   seed = 42   max_new_tokens = 128
 *
 * A plugin is named by its bare name ("csa": found in the plugin directories) or by a path to
 * a .so (contains '/' or ends in ".so").
 *
 * Layering, key by key: the built-in default (conf/default.ini, compiled in), then the file
 * (--config), then the command line's --set section.key=value overrides (in order; a later
 * one wins). An upper layer's key replaces the same key of a lower one and nothing else: a
 * file with [attention] ratio.4 = mycsa keeps the default's ratio.0 and ratio.128. Two rules
 * keep that safe: when an upper layer names another plugin for [moe], [residual] or
 * [tier.lN] (plugin = redis over the default's file), the lower layers' options of that
 * section go with the old plugin (budget stays); `ratio.N = none` removes a lower layer's
 * mapping of ratio N.
 *
 * Errors (unknown section or key, with a "did you mean" when one is close; wrong type, out of
 * range, duplicate key or section, a line longer than SRT_RC_MAX_LINE, a section name longer
 * than 49 bytes or a key longer than 63, an indented line that inih would glue to the previous
 * value, a plugin_dirs directory that does not exist) name file:line (or the --set argument)
 * and what was expected. "[ runtime ]" is the same section as "[runtime]".
 *
 * Thread safety: load/free are reentrant; a loaded config is read-only and may be shared.
 */
#ifndef SRT_CONFIG_RUNTIME_CONFIG_H
#define SRT_CONFIG_RUNTIME_CONFIG_H

#include <stddef.h>
#include <stdint.h>

struct srt_model_config;

/* inih 55 cuts lines silently at 200 bytes including "\r\n\0": longer lines are rejected. */
#define SRT_RC_MAX_LINE 197
#define SRT_RC_MAX_RATIOS 16

enum srt_write_policy {
	SRT_WRITE_THROUGH = 0,         /* every page goes to the next tier at once */
	SRT_WRITE_THROUGH_AFTER_2 = 1, /* ... once it has been hit write_after_hits times */
	SRT_WRITE_BACK = 2,            /* only when evicted */
};

enum srt_tier_level { SRT_TIER_L1 = 0, SRT_TIER_L2 = 1, SRT_TIER_L3 = 2, SRT_TIER_COUNT = 3 };

/* One role's plugin. Strings are owned by the config. */
struct srt_rc_plugin {
	const char *name;    /* as written: bare name or path to a .so; NULL = none */
	const char *section; /* section holding its options ("attention.csa", "moe", "tier.l3") */
	const char *role;    /* role string for srt_plugin_args.role ("attention.csa", "moe") */
	int line;            /* where it was set (line of `file`; 0 for a --set) */
	const char *file;    /* where it was set: the config file, "--set ..." or the default */
};

struct srt_rc_ratio {
	int32_t ratio; /* compress ratio: 0 window only, 4 CSA, 128 HCA, ... */
	struct srt_rc_plugin plugin;
};

struct srt_rc_tier {
	int enabled;               /* plugin != none */
	struct srt_rc_plugin plugin;
	uint64_t budget;           /* bytes; 0 = not set (the plugin decides) */
};

/* A key = value as read, in file order (defaults first). */
struct srt_rc_entry {
	const char *section, *key, *value;
	const char *file; /* origin for messages */
	int line;
};

struct srt_runtime_config {
	const char *source; /* the file read over the default, or "<built-in default.ini>" */

	/* [runtime] */
	const char *const *plugin_dirs; /* NULL-terminated */
	int n_plugin_dirs;
	int threads;    /* 0 = all cores */
	int profile;    /* enum srt_profile */
	const char *model;

	/* [attention] sorted by ratio */
	int n_ratios;
	struct srt_rc_ratio ratios[SRT_RC_MAX_RATIOS];
	struct srt_rc_plugin moe, residual;
	struct srt_rc_tier tiers[SRT_TIER_COUNT];

	/* [cache] */
	uint32_t page_size;
	int write_policy; /* enum srt_write_policy */
	uint32_t write_after_hits; /* N of write_through_after_N (2 unless set) */
	int prefetch;     /* 0/1 */
	const char *tenant_salt; /* "" when not set */
	/* l1_pages: hugepages (1, default) = the engine's L1 KV pages from 2 MiB slabs on
	 * transparent huge pages (exec/l1pages.h); heap (0) = one malloc per page */
	int l1_huge;

	/* [sampling] */
	double temperature; /* >= 0; 0 = greedy */
	double top_p;       /* (0, 1] */
	uint64_t seed;
	int32_t max_new_tokens;

	/* [runtime] prefill_chunk: tokens per prefill forward call (default 256). */
	int32_t prefill_chunk;
	/* [runtime] weights: hugepages (1, default) = the checkpoint copied into anonymous memory
	 * on transparent huge pages when it fits (srt_ck_to_hugepages); mmap (0) = read through
	 * the file mapping. */
	int weights_huge;

	/* Every entry, for srt_runtime_config_option. */
	size_t n_entries;
	struct srt_rc_entry *entries;

	void *priv_; /* string storage */
};

/*
 * Load `path` over the built-in default (path NULL: the default alone). On success *out owns
 * everything it points to; release with srt_runtime_config_free. Returns 0, SRT_ENOENT/SRT_EIO
 * (cannot read the file), SRT_EINVAL (with "file:line: ..." in err), SRT_ENOMEM. On error
 * *out is left empty (freeing it is allowed and does nothing).
 */
int srt_runtime_config_load(const char *path, struct srt_runtime_config *out, char *err,
			    size_t errlen);

/* Same, from INI text in memory; `origin` names it in messages. */
int srt_runtime_config_load_text(const char *text, const char *origin,
				 struct srt_runtime_config *out, char *err, size_t errlen);

/*
 * Same as srt_runtime_config_load with an explicit --set list (sets[i] = "section.key=value",
 * borrowed) instead of the process-wide one: `ab` loads its two sides this way.
 */
int srt_runtime_config_load_ex(const char *path, const char *const *sets, size_t nsets,
			       struct srt_runtime_config *out, char *err, size_t errlen);

/*
 * The process-wide --set list that srt_runtime_config_load and _load_text apply over the file
 * (the CLI sets it once, before any command runs, from every --set argument). The strings
 * are copied; n = 0 clears. Checks the syntax only (values are checked when a config loads).
 * Not thread-safe: call before loading configs on other threads. 0, SRT_EINVAL (message),
 * SRT_ENOMEM.
 */
int srt_runtime_config_set_overrides(const char *const *sets, size_t n, char *err,
				     size_t errlen);

/* The process-wide --set list (borrowed until the next set_overrides); *n gets its length. */
const char *const *srt_runtime_config_overrides(size_t *n);

/* Configs loaded so far in this process (the CLI warns when --set was given and none was). */
unsigned long srt_runtime_config_load_count(void);

/*
 * Split "section.key=value" into section and key (copied into the buffers) and *value
 * (pointing into arg). The section is the first dotted word, or the first two for
 * [tier.lN] and [attention.<plugin>]; "attention.ratio.16=x" is key ratio.16 of [attention].
 * 0 or SRT_EINVAL with a message.
 */
int srt_runtime_config_split_set(const char *arg, char *section, size_t seclen, char *key,
				 size_t keylen, const char **value, char *err, size_t errlen);

void srt_runtime_config_free(struct srt_runtime_config *c);

/*
 * Value of `key` in `section` ("tier.l3", "path"), or NULL. Covers every key of every section,
 * typed or free. The string lives as long as the config.
 */
const char *srt_runtime_config_option(const struct srt_runtime_config *c, const char *section,
				      const char *key);

/*
 * Adapter for srt_plugin_args.option / option_ctx: pass &scope as option_ctx, where scope is a
 * struct srt_rc_scope naming the config and the plugin's section.
 */
struct srt_rc_scope {
	const struct srt_runtime_config *config;
	const char *section;
};
const char *srt_runtime_config_option_cb(void *scope, const char *key);

struct srt_plugin_desc;

/*
 * The plugin options in `section` against what the plugin declares (desc->options, ABI 1.1):
 * every key of the section except the runtime's own (plugin, budget) must be a declared
 * option. 0, or SRT_EINVAL with "FILE:LINE: [section] key: plugin 'csa' has no option 'key'
 * (did you mean 'kv_dtype'?); its options: kv_dtype, index_dtype". A plugin that declares no
 * table (options NULL, ABI 1.0) is not checked.
 */
int srt_runtime_config_check_options(const struct srt_runtime_config *c, const char *section,
				     const struct srt_plugin_desc *desc, char *err,
				     size_t errlen);

/*
 * The closest of cands[0..n) to word (case-insensitive edit distance, at most 1 for words of
 * up to 3 bytes, 2 up to 8, else 3; NULL entries skipped), or NULL when none is close or word
 * is one of them. For "did you mean" messages.
 */
const char *srt_suggest(const char *word, const char *const *cands, size_t n);

struct srt_registry;

/*
 * " (did you mean 'csa'?)" naming the usable plugin of `kind` in reg closest to `name`, or ""
 * when none is close. Into buf; returns buf. For "no plugin named X" messages.
 */
const char *srt_runtime_config_plugin_dym(struct srt_registry *reg, uint32_t kind,
					  const char *name, char *buf, size_t len);

/* The attention plugin for compress ratio `ratio`, or NULL when no plugin is mapped to it. */
const struct srt_rc_plugin *srt_runtime_config_attention(const struct srt_runtime_config *c,
							 int ratio);

/*
 * Cross-check with a model: every compress ratio the model uses has an attention plugin, and
 * the page size is a multiple of every ratio. 0 or SRT_EINVAL with a message. A mapping the
 * user wrote (file or --set) for a ratio no layer of the model uses is a warning, printed on
 * stderr once per process ("shadowrt: warning: FILE:LINE: [attention] ratio.16 = x
 * serves no layer of model 'tiny' (its ratios: 0, 4, 128)").
 */
int srt_runtime_config_check_model(const struct srt_runtime_config *c,
				   const struct srt_model_config *m, char *err, size_t errlen);

/* Sizes ([tier.*] budget) are read by srt_size_parse (config/size.h): 4GB = 4 * 10^9 bytes,
 * 4GiB = 4 * 2^30, a bare 4G binary. */

/* Format bytes as "4 GiB", "1.5 MiB", "512 B" into buf. Returns buf. */
const char *srt_format_size(uint64_t bytes, char *buf, size_t len);

/* Names for printing. */
const char *srt_write_policy_name(int policy);
/* The policy as written in the config ("write_through_after_3") into buf. Returns buf. */
const char *srt_write_policy_format(int policy, uint32_t after_hits, char *buf, size_t len);
const char *srt_profile_name(int profile);

#endif /* SRT_CONFIG_RUNTIME_CONFIG_H */
