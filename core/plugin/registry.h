/*
 * The plugin loader and registry.
 *
 * srt_registry_open scans, in this order:
 *   1. the directories the caller passes (from the runtime config or --plugin-dir);
 *   2. the directories in the environment variable SHADOWRT_PLUGIN_PATH (colon-separated);
 *   3. <directory of the executable>/../lib/shadowrt/plugins (the build tree and any install
 *      prefix have this shape);
 *   4. the install directory compiled in (<CMAKE_INSTALL_PREFIX>/lib/shadowrt/plugins).
 * A directory that appears twice is scanned once; a directory that does not exist is listed in
 * the search path as missing and skipped. In each directory every `*.so` is considered, in
 * byte order of the file names.
 *
 * For each file, before any plugin code other than the side-effect-free entry function runs:
 * dlopen(RTLD_NOW | RTLD_LOCAL), look up srt_plugin_entry, check the descriptor's ABI version
 * (major equal, minor <= the core's, struct_size >= v1), copy it into a zeroed struct of the
 * size the core knows, check the kind, the descriptor's required methods and the kind's
 * vtable (struct_size >= the kind's v1 size, required methods present); then call the plugin's
 * probe. A file that fails any step is kept as a REJECTED entry with a reason that names the
 * file, the failed check and, for version checks, both ABI versions. Files are never
 * dlclose()d.
 *
 * Isolation: all of the above first runs in a child process (fork) per file, with a time limit
 * (SHADOWRT_PLUGIN_PROBE_TIMEOUT seconds, default 60). A file whose loading or probe crashes,
 * calls exit() or blocks is REJECTED with a reason naming the file, the plugin (when its
 * descriptor was read), the stage and the signal, exit status or time limit; the command goes
 * on. A file the child found usable is loaded into this process only when it is asked for:
 * srt_registry_find (the plugins a command uses) or srt_registry_at (listings). Its probe then
 * runs again here (probes are side-effect free). SRT_REGISTRY_IN_PROCESS turns this off.
 *
 * Names: the first usable plugin of a (kind, name) in search order wins; later ones are
 * SHADOWED (and stay loaded, so they can still be requested by path). Rejected plugins do not
 * claim a name.
 *
 * Typical use (the executor, for one role of the runtime config):
 *
 *     struct srt_host *host;            srt_host_create(cfg_threads, &host, why, sizeof(why));
 *     struct srt_registry *reg;         srt_registry_open(&reg, cfg_dirs, n_dirs, host, 0);
 *     const struct srt_plugin_info *p;
 *     if (srt_registry_find(reg, SRT_KIND_ATTENTION, "csa", &p, why, sizeof(why)))
 *             fail(why);                // names the search path or the rejection
 *     struct srt_instance *inst;
 *     if (srt_plugin_instantiate(p, host, &args, &inst, why, sizeof(why)))
 *             fail(why);
 *     const struct srt_attention_vtable *vt = inst->vtable;
 *     vt->forward(inst->ctx, layer, &batch, x, out, why, sizeof(why));
 *     ...
 *     srt_instance_destroy(inst); srt_registry_close(reg); srt_host_destroy(host);
 *
 * Thread safety: a registry is not thread-safe; serialise calls on one registry. The entries
 * and the descriptor/vtable copies they point to stay valid until srt_registry_close.
 */
#ifndef SRT_PLUGIN_REGISTRY_H
#define SRT_PLUGIN_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/plugin.h>

/* The environment variable of search step 2. */
#define SRT_PLUGIN_PATH_ENV "SHADOWRT_PLUGIN_PATH"

/* srt_registry_open flags: leave out search steps (tests, `--only` style tools). */
#define SRT_REGISTRY_NO_ENV (1u << 0)      /* ignore SHADOWRT_PLUGIN_PATH */
#define SRT_REGISTRY_NO_DEFAULTS (1u << 1) /* skip steps 3 and 4 */
/* Load and probe every file in this process, as before isolation (debugging; a crashing
 * plugin then takes the process down). */
#define SRT_REGISTRY_IN_PROCESS (1u << 2)

/* Seconds a child process may take to load and probe one file (default 60). */
#define SRT_PLUGIN_PROBE_TIMEOUT_ENV "SHADOWRT_PLUGIN_PROBE_TIMEOUT"
#define SRT_PLUGIN_PROBE_TIMEOUT_DEFAULT 60.0

enum srt_plugin_state {
	SRT_PLUGIN_OK = 0,       /* usable and the one `find` returns for its (kind, name) */
	SRT_PLUGIN_SHADOWED = 1, /* usable, but an earlier plugin has the same kind and name */
	SRT_PLUGIN_REJECTED = 2, /* failed a check; see code and reason */
};

/* Where a search directory (or a plugin) came from. */
enum srt_plugin_origin {
	SRT_ORIGIN_CONFIG = 0,  /* directories passed to srt_registry_open */
	SRT_ORIGIN_ENV = 1,     /* SHADOWRT_PLUGIN_PATH */
	SRT_ORIGIN_EXE = 2,     /* next to the executable */
	SRT_ORIGIN_INSTALL = 3, /* compiled-in install directory */
	SRT_ORIGIN_PATH = 4,    /* requested by path through srt_registry_find */
};

struct srt_search_dir {
	const char *path;
	uint32_t origin; /* enum srt_plugin_origin */
	int exists;      /* 1 if it is a readable directory */
};

struct srt_plugin_info {
	const char *path;   /* the file, as found (dir/name.so) or as requested */
	uint32_t origin;    /* enum srt_plugin_origin */
	uint32_t state;     /* enum srt_plugin_state */
	int code;           /* 0, or the SRT_E* code of the rejection */
	const char *reason; /* why rejected / which file shadows it; "" when OK */
	/* The ABI version the plugin declared; 0.0 when rejected before the descriptor was read. */
	uint16_t abi_major, abi_minor;
	/*
	 * Zero-extended copy of the descriptor (sizeof(struct srt_plugin_desc) bytes), or NULL
	 * when rejected before it could be trusted (no entry, version mismatch, struct too small).
	 * Use `vtable` below, not desc->vtable.
	 */
	const struct srt_plugin_desc *desc;
	/* Zero-extended copy of the kind's vtable (the core's struct size); NULL when rejected. */
	const void *vtable;
};

struct srt_registry;

/*
 * Scan the search path (see the top of this file) and load what is there. dirs[0..ndirs) are
 * the caller's directories (may be NULL when ndirs is 0); host (required) is borrowed and must
 * outlive the registry (probe gets it). Rejected plugins do not make this fail: they are
 * entries. Returns 0 and *out, or SRT_ENOMEM. The caller frees with srt_registry_close.
 */
int srt_registry_open(struct srt_registry **out, const char *const *dirs, size_t ndirs,
		      const struct srt_host *host, unsigned flags);

/* Free the registry. Loaded plugins stay mapped (never dlclose()d). NULL is ok. */
void srt_registry_close(struct srt_registry *reg);

/* Entries in scan order (plugins loaded later by path are appended). */
size_t srt_registry_count(const struct srt_registry *reg);
const struct srt_plugin_info *srt_registry_at(const struct srt_registry *reg, size_t i);

/* The search path, in order, with each directory's origin and whether it exists. */
size_t srt_registry_dir_count(const struct srt_registry *reg);
const struct srt_search_dir *srt_registry_dir_at(const struct srt_registry *reg, size_t i);

/*
 * Find a usable plugin of `kind`. name_or_path is a plugin name ("csa") or, when it contains
 * a '/' or ends in ".so", a path to a shared object, which is loaded and checked like a
 * scanned file if it is not loaded yet. Returns 0 and *out (owned by the registry), or
 *   SRT_ENOENT   no usable plugin of that name (why lists the whole search path; logged at
 *                debug level only, the caller reports why), or the path does not exist;
 *   SRT_EINVAL   the plugin exists but is of another kind;
 *   SRT_EVERSION / SRT_EINVAL / SRT_ENOTSUP / ...  the file at that path was rejected (the
 *                rejection's code; why holds its reason).
 */
int srt_registry_find(struct srt_registry *reg, enum srt_kind kind, const char *name_or_path,
		      const struct srt_plugin_info **out, char *why, size_t why_len);

/* "attention", "moe", "residual", "tier", or "unknown". */
const char *srt_kind_name(uint32_t kind);
/* The kind named s ("attention", ...), or 0 when s names none. */
uint32_t srt_kind_parse(const char *s);
/* "config", "SHADOWRT_PLUGIN_PATH", "next to the executable", "install dir", "by path". */
const char *srt_origin_name(uint32_t origin);

/* --- instances ------------------------------------------------------------------------------ */

/*
 * A created plugin instance. desc and vtable are the instance's own zero-extended copies (they
 * do not depend on the registry); ctx is what the plugin's create returned. Call methods as
 * ((const struct srt_attention_vtable *)inst->vtable)->forward(inst->ctx, ...).
 */
struct srt_instance {
	const struct srt_plugin_desc *desc;
	const void *vtable;
	void *ctx;
};

/*
 * Call the plugin's create with args (struct_size is filled in if 0). plugin must be OK or
 * SHADOWED. host is borrowed and must outlive the instance. Returns 0 and *out, or the
 * plugin's negative code (or SRT_ENOMEM) with a reason in why that names the plugin.
 */
int srt_plugin_instantiate(const struct srt_plugin_info *plugin, const struct srt_host *host,
			   const struct srt_plugin_args *args, struct srt_instance **out,
			   char *why, size_t why_len);

/* Call the plugin's destroy and free the instance. NULL is ok. */
void srt_instance_destroy(struct srt_instance *inst);

#endif /* SRT_PLUGIN_REGISTRY_H */
