/* The plugin loader and registry (see registry.h). */
#include "plugin/registry.h"

#include <assert.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plugin/host.h"

#include <shadowrt/attention.h>
#include <shadowrt/moe.h>
#include <shadowrt/residual.h>
#include <shadowrt/tier.h>

#ifndef SRT_PLUGIN_REL_DIR /* from the executable's directory; set by CMake */
#define SRT_PLUGIN_REL_DIR "../lib/shadowrt/plugins"
#endif
#ifndef SRT_PLUGIN_INSTALL_DIR_FULL
#define SRT_PLUGIN_INSTALL_DIR_FULL "/usr/local/lib/shadowrt/plugins"
#endif

#define LOG_WHO "plugins"
#define NAME_MAX_LEN 63

union vtable_copy {
	struct srt_attention_vtable attention;
	struct srt_moe_vtable moe;
	struct srt_residual_vtable residual;
	struct srt_tier_vtable tier;
};

struct entry {
	struct srt_plugin_info info; /* first: info pointers are entry pointers */
	char *path;
	char *real; /* realpath, for de-duplication and lookups by path */
	char *reason;
	void *handle;
	struct srt_plugin_desc desc;
	union vtable_copy vt;
	/* Isolated probing: the child's report. deferred = usable in the child, not yet loaded
	 * in this process (desc holds kind, name, version, caps and ABI only). */
	int deferred;
	int report_fd; /* in the child: where load_and_check reports its stage; else -1 */
	char child_name[NAME_MAX_LEN + 1];
	char child_version[64];
};

struct dir {
	struct srt_search_dir pub;
	char *path;
	char *real; /* NULL when missing */
};

struct srt_registry {
	const struct srt_host *host;
	unsigned flags;
	struct entry **entries;
	size_t n_entries, cap_entries;
	struct dir *dirs;
	size_t n_dirs, cap_dirs;
};

/* --- names ---------------------------------------------------------------------------------- */

const char *srt_kind_name(uint32_t kind)
{
	switch (kind) {
	case SRT_KIND_ATTENTION:
		return "attention";
	case SRT_KIND_MOE:
		return "moe";
	case SRT_KIND_RESIDUAL:
		return "residual";
	case SRT_KIND_TIER:
		return "tier";
	default:
		return "unknown";
	}
}

uint32_t srt_kind_parse(const char *s)
{
	for (uint32_t k = SRT_KIND_ATTENTION; k <= SRT_KIND_TIER; k++)
		if (s && !strcmp(s, srt_kind_name(k)))
			return k;
	return 0;
}

const char *srt_origin_name(uint32_t origin)
{
	switch (origin) {
	case SRT_ORIGIN_CONFIG:
		return "config";
	case SRT_ORIGIN_ENV:
		return SRT_PLUGIN_PATH_ENV;
	case SRT_ORIGIN_EXE:
		return "next to the executable";
	case SRT_ORIGIN_INSTALL:
		return "install dir";
	case SRT_ORIGIN_PATH:
		return "by path";
	default:
		return "?";
	}
}

/* --- helpers -------------------------------------------------------------------------------- */

static void reg_log(const struct srt_registry *reg, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void reg_log(const struct srt_registry *reg, int level, const char *fmt, ...)
{
	if (!reg->host || !SRT_HOST_HAS(reg->host, log))
		return;
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	reg->host->log(level, LOG_WHO, "%s", buf);
}

/* Record a rejection; returns the code. Out of memory for the text keeps a fixed reason. */
static int reject(struct entry *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int reject(struct entry *e, int code, const char *fmt, ...)
{
	va_list ap;
	char *text = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&text, fmt, ap);
	va_end(ap);
	free(e->reason);
	e->reason = n < 0 ? NULL : text;
	e->info.reason = e->reason ? e->reason : "rejected (out of memory for the reason)";
	e->info.state = SRT_PLUGIN_REJECTED;
	e->info.code = code;
	e->info.desc = NULL;
	e->info.vtable = NULL;
	return code;
}

static int ends_with_so(const char *s)
{
	size_t n = strlen(s);
	return n > 3 && !strcmp(s + n - 3, ".so");
}

/* Stages a child process reports (isolated probing, below). */
enum { STAGE_LOAD = 0, STAGE_PROBE = 1, STAGE_DONE = 2 };
static void report_stage(const struct entry *e, uint32_t stage);

/* --- checks ---------------------------------------------------------------------------------- */

/* The kind's vtable: size check, zero-extended copy, required methods. */
static int check_vtable(struct entry *e)
{
	const struct srt_plugin_desc *d = &e->desc;
	const char *kind = srt_kind_name(d->kind);
	size_t v1, known;
	switch (d->kind) {
	case SRT_KIND_ATTENTION:
		v1 = SRT_ATTENTION_VTABLE_V1_SIZE;
		known = sizeof(struct srt_attention_vtable);
		break;
	case SRT_KIND_MOE:
		v1 = SRT_MOE_VTABLE_V1_SIZE;
		known = sizeof(struct srt_moe_vtable);
		break;
	case SRT_KIND_RESIDUAL:
		v1 = SRT_RESIDUAL_VTABLE_V1_SIZE;
		known = sizeof(struct srt_residual_vtable);
		break;
	default:
		v1 = SRT_TIER_VTABLE_V1_SIZE;
		known = sizeof(struct srt_tier_vtable);
		break;
	}
	uint32_t size = *(const uint32_t *)d->vtable;
	if (size < v1)
		return reject(e, SRT_EVERSION,
			      "%s: %s vtable struct_size %u is smaller than the ABI v1 %s vtable (%zu "
			      "bytes); plugin ABI %u.%u, core ABI %d.%d",
			      e->path, kind, size, kind, v1, d->abi_major, d->abi_minor, SRT_ABI_MAJOR,
			      SRT_ABI_MINOR);
	memset(&e->vt, 0, sizeof(e->vt));
	memcpy(&e->vt, d->vtable, size < known ? size : known);

	const char *missing = NULL;
	switch (d->kind) {
	case SRT_KIND_ATTENTION: {
		const struct srt_attention_vtable *v = &e->vt.attention;
		missing = !v->declare_pools ? "declare_pools" : !v->forward ? "forward" : NULL;
		break;
	}
	case SRT_KIND_MOE:
		missing = !e->vt.moe.forward ? "forward" : NULL;
		break;
	case SRT_KIND_RESIDUAL: {
		const struct srt_residual_vtable *v = &e->vt.residual;
		missing = !v->n_streams    ? "n_streams"
			  : !v->mix_floats ? "mix_floats"
			  : !v->embed      ? "embed"
			  : !v->pre        ? "pre"
			  : !v->post       ? "post"
			  : !v->head       ? "head"
					   : NULL;
		break;
	}
	case SRT_KIND_TIER: {
		const struct srt_tier_vtable *v = &e->vt.tier;
		int arena = !!(d->caps & SRT_CAP_PAGE_ARENA);
		int keyed = !!(d->caps & SRT_CAP_KEYED_STORE);
		if (!arena && !keyed)
			return reject(e, SRT_EINVAL,
				      "%s: tier plugin '%s' declares neither SRT_CAP_PAGE_ARENA nor "
				      "SRT_CAP_KEYED_STORE in caps",
				      e->path, d->name);
		if (arena)
			missing = !v->alloc_page       ? "alloc_page (page arena)"
				  : !v->free_page      ? "free_page (page arena)"
				  : !v->copy_from_host ? "copy_from_host (page arena)"
				  : !v->copy_to_host   ? "copy_to_host (page arena)"
						       : NULL;
		if (!missing && keyed)
			missing = !v->exists   ? "exists (keyed store)"
				  : !v->get    ? "get (keyed store)"
				  : !v->put    ? "put (keyed store)"
				  : !v->remove ? "remove (keyed store)"
					       : NULL;
		break;
	}
	}
	if (missing)
		return reject(e, SRT_EINVAL, "%s: %s plugin '%s' is missing required method %s",
			      e->path, kind, d->name, missing);
	return 0;
}

static int name_ok(const char *s)
{
	size_t n = 0;
	for (; s[n]; n++) {
		char c = s[n];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			 c == '-' || c == '_' || c == '.';
		if (!ok || n >= NAME_MAX_LEN)
			return 0;
	}
	return n > 0;
}

/*
 * Load and check one file into e (path set). Every outcome is recorded in e; returns 0 when
 * usable or the rejection code.
 */
static int load_and_check(const struct srt_registry *reg, struct entry *e)
{
	struct stat st;
	if (stat(e->path, &st))
		return reject(e, SRT_ENOENT, "%s: cannot open plugin file: %s", e->path,
			      strerror(errno));
	if (!S_ISREG(st.st_mode))
		return reject(e, SRT_EINVAL, "%s: not a regular file", e->path);

	/* dlopen searches the library path for a name without '/': never let it. */
	char *open_path = NULL;
	if (!strchr(e->path, '/') && asprintf(&open_path, "./%s", e->path) < 0)
		return reject(e, SRT_ENOMEM, "%s: out of memory", e->path);
	dlerror();
	e->handle = dlopen(open_path ? open_path : e->path, RTLD_NOW | RTLD_LOCAL);
	free(open_path);
	if (!e->handle) {
		const char *err = dlerror();
		return reject(e, SRT_EINVAL, "%s: not a loadable shared object: %s", e->path,
			      err ? err : "dlopen failed");
	}

	dlerror();
	void *sym = dlsym(e->handle, SRT_PLUGIN_ENTRY_SYMBOL);
	if (!sym)
		return reject(e, SRT_EINVAL,
			      "%s: no entry symbol %s (not a shadowrt plugin, or it was not "
			      "exported with SRT_EXPORT)",
			      e->path, SRT_PLUGIN_ENTRY_SYMBOL);
	srt_plugin_entry_fn entry;
	memcpy(&entry, &sym, sizeof(entry)); /* object pointer -> function pointer, POSIX style */
	const struct srt_plugin_desc *d = entry();
	if (!d)
		return reject(e, SRT_EINVAL, "%s: %s() returned NULL", e->path,
			      SRT_PLUGIN_ENTRY_SYMBOL);

	/* The version rule, before anything else of the descriptor is read. */
	uint32_t size = d->struct_size;
	e->info.abi_major = d->abi_major;
	e->info.abi_minor = d->abi_minor;
	if (d->abi_major != SRT_ABI_MAJOR)
		return reject(e, SRT_EVERSION,
			      "%s: ABI major version mismatch: plugin built for ABI %u.%u, core is "
			      "ABI %d.%d",
			      e->path, d->abi_major, d->abi_minor, SRT_ABI_MAJOR, SRT_ABI_MINOR);
	if (d->abi_minor > SRT_ABI_MINOR)
		return reject(e, SRT_EVERSION,
			      "%s: plugin needs a newer core: built for ABI %u.%u, core is ABI "
			      "%d.%d (minor %u > %d)",
			      e->path, d->abi_major, d->abi_minor, SRT_ABI_MAJOR, SRT_ABI_MINOR,
			      d->abi_minor, SRT_ABI_MINOR);
	if (size < SRT_PLUGIN_DESC_V1_SIZE)
		return reject(e, SRT_EVERSION,
			      "%s: descriptor struct_size %u is smaller than the ABI v1 descriptor "
			      "(%zu bytes); plugin ABI %u.%u, core ABI %d.%d",
			      e->path, size, (size_t)SRT_PLUGIN_DESC_V1_SIZE, d->abi_major,
			      d->abi_minor, SRT_ABI_MAJOR, SRT_ABI_MINOR);
	memset(&e->desc, 0, sizeof(e->desc));
	memcpy(&e->desc, d, size < sizeof(e->desc) ? size : sizeof(e->desc));
	d = &e->desc;

	if (d->kind < SRT_KIND_ATTENTION || d->kind > SRT_KIND_TIER)
		return reject(e, SRT_EINVAL,
			      "%s: unknown plugin kind %u (known: 1 attention, 2 moe, 3 residual, "
			      "4 tier)",
			      e->path, d->kind);
	if (!d->name || !name_ok(d->name))
		return reject(e, SRT_EINVAL,
			      "%s: descriptor name is %s (expected 1..%d characters of "
			      "[A-Za-z0-9._-])",
			      e->path, d->name ? "invalid" : "NULL", NAME_MAX_LEN);
	/* From here on the entry shows its name and kind even when rejected. */
	const char *missing = !d->create ? "create" : !d->destroy ? "destroy" : !d->vtable ? "vtable" : NULL;
	if (missing) {
		reject(e, SRT_EINVAL, "%s: %s plugin '%s' is missing required descriptor member %s",
		       e->path, srt_kind_name(d->kind), d->name, missing);
		e->info.desc = &e->desc;
		return e->info.code;
	}
	int rc = check_vtable(e);
	if (rc) {
		e->info.desc = &e->desc;
		return rc;
	}

	if (d->probe) {
		char why[512] = "";
		report_stage(e, STAGE_PROBE);
		rc = d->probe(reg->host, why, sizeof(why));
		if (rc) {
			why[sizeof(why) - 1] = '\0';
			reject(e, rc < 0 ? rc : SRT_EINVAL, "%s: %s plugin '%s' probe failed (%d): %s",
			       e->path, srt_kind_name(d->kind), d->name, rc,
			       why[0] ? why : "(the plugin gave no reason)");
			e->info.desc = &e->desc;
			return e->info.code;
		}
	}
	e->info.state = SRT_PLUGIN_OK;
	e->info.code = 0;
	e->info.reason = "";
	e->info.desc = &e->desc;
	e->info.vtable = &e->vt;
	return 0;
}

/* --- isolated probing ------------------------------------------------------------------------ */

/*
 * Each file is first loaded and checked in a child process (fork): a plugin whose static
 * constructors, entry function or probe crash, call exit() or block cannot take the command
 * down. The child reports through a pipe; the parent turns a crash, an exit or a timeout into
 * a rejection that names the file, the plugin (when its descriptor was read) and the stage. A
 * plugin the child found usable is loaded in this process only when it is asked for
 * (srt_registry_find, srt_registry_at), so a command loads just the plugins it uses.
 */

struct probe_report {
	uint32_t stage;
	int32_t code;
	uint32_t state;
	uint32_t kind;
	uint16_t abi_major, abi_minor;
	uint32_t have_desc;
	uint64_t caps;
	char name[NAME_MAX_LEN + 1];
	char version[64];
	char reason[1024];
};
_Static_assert(sizeof(struct probe_report) <= PIPE_BUF, "one atomic pipe write");

static void report_stage(const struct entry *e, uint32_t stage)
{
	if (e->report_fd < 0)
		return;
	struct probe_report r;
	memset(&r, 0, sizeof(r));
	r.stage = stage;
	r.code = e->info.code;
	r.state = e->info.state;
	r.abi_major = e->info.abi_major;
	r.abi_minor = e->info.abi_minor;
	if (e->info.desc || stage == STAGE_PROBE) {
		r.have_desc = 1;
		r.kind = e->desc.kind;
		r.caps = e->desc.caps;
		snprintf(r.name, sizeof(r.name), "%s", e->desc.name ? e->desc.name : "");
		snprintf(r.version, sizeof(r.version), "%s", e->desc.version ? e->desc.version : "");
	}
	if (e->info.reason)
		snprintf(r.reason, sizeof(r.reason), "%s", e->info.reason);
	ssize_t w;
	do
		w = write(e->report_fd, &r, sizeof(r));
	while (w < 0 && errno == EINTR);
}

/* Seconds a child may take (SHADOWRT_PLUGIN_PROBE_TIMEOUT, default 60). */
static double probe_timeout(void)
{
	const char *s = getenv(SRT_PLUGIN_PROBE_TIMEOUT_ENV);
	char *end;
	double t = s ? strtod(s, &end) : 0;
	return s && end != s && !*end && t > 0 && t < 1e6 ? t : SRT_PLUGIN_PROBE_TIMEOUT_DEFAULT;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The child: load and check one file with a host of its own, report, exit. */
static _Noreturn void probe_child(const struct srt_registry *reg, struct entry *e, int fd)
{
	struct srt_registry child = *reg;
	struct srt_host *h = NULL;
	char why[256];
	/* The parent's worker threads do not exist here: a one-thread host runs parallel_for
	 * inline. */
	if (!srt_host_create(1, &h, why, sizeof(why)))
		child.host = h;
	e->report_fd = fd;
	report_stage(e, STAGE_LOAD);
	load_and_check(&child, e);
	report_stage(e, STAGE_DONE);
	_exit(0);
}

/* Read one report (or the end of the pipe) until the deadline: 1 read, 0 EOF, -1 timeout. */
static int read_report(int fd, struct probe_report *r, double deadline)
{
	size_t got = 0;
	while (got < sizeof(*r)) {
		double left = deadline - now_s();
		if (left <= 0)
			return -1;
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int pr = poll(&pfd, 1, left > 3600 ? 3600000 : (int)(left * 1000) + 1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			continue; /* timeout re-checked above */
		ssize_t n = read(fd, (char *)r + got, sizeof(*r) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		got += (size_t)n;
	}
	return 1;
}

static void adopt_report(struct entry *e, const struct probe_report *r)
{
	e->info.abi_major = r->abi_major;
	e->info.abi_minor = r->abi_minor;
	if (!r->have_desc)
		return;
	snprintf(e->child_name, sizeof(e->child_name), "%s", r->name);
	snprintf(e->child_version, sizeof(e->child_version), "%s", r->version);
	memset(&e->desc, 0, sizeof(e->desc));
	e->desc.struct_size = sizeof(e->desc);
	e->desc.abi_major = r->abi_major;
	e->desc.abi_minor = r->abi_minor;
	e->desc.kind = r->kind;
	e->desc.caps = r->caps;
	e->desc.name = e->child_name;
	e->desc.version = e->child_version;
}

/* Load and check e in a child; record the outcome in e (deferred when usable). */
static int probe_isolated(const struct srt_registry *reg, struct entry *e)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC))
		return reject(e, SRT_EIO, "%s: cannot probe in a child process: pipe: %s", e->path,
			      strerror(errno));
	fflush(NULL); /* a plugin's exit() in the child must not write our buffers twice */
	pid_t pid = fork();
	if (pid < 0) {
		int err = errno;
		close(fds[0]);
		close(fds[1]);
		return reject(e, SRT_EIO, "%s: cannot probe in a child process: fork: %s", e->path,
			      strerror(err));
	}
	if (pid == 0) {
		close(fds[0]);
		probe_child(reg, e, fds[1]);
	}
	close(fds[1]);
	double limit = probe_timeout();
	double deadline = now_s() + limit;
	struct probe_report last, r;
	memset(&last, 0, sizeof(last));
	int have = 0, rr, timed_out = 0;
	while ((rr = read_report(fds[0], &r, deadline)) == 1) {
		last = r;
		have = 1;
		if (r.stage == STAGE_DONE)
			break;
	}
	if (rr < 0) {
		timed_out = 1;
		kill(pid, SIGKILL);
	}
	close(fds[0]);
	int st = 0;
	pid_t w;
	do
		w = waitpid(pid, &st, 0);
	while (w < 0 && errno == EINTR);

	if (have)
		adopt_report(e, &last);
	if (have && last.stage == STAGE_DONE && !timed_out) {
		if (last.state == SRT_PLUGIN_REJECTED) {
			reject(e, last.code, "%s", last.reason);
			if (last.have_desc)
				e->info.desc = &e->desc;
			return e->info.code;
		}
		e->deferred = 1;
		e->info.state = SRT_PLUGIN_OK;
		e->info.code = 0;
		e->info.reason = "";
		return 0;
	}
	/* The child died, exited or hung before it finished. */
	char who[160] = "", how[320];
	if (have && last.have_desc)
		snprintf(who, sizeof(who), "%s plugin '%s' ", srt_kind_name(last.kind), last.name);
	const char *stage = have && last.stage == STAGE_PROBE ? "in its probe"
			    : "while being loaded (dlopen, static constructors or "
			      SRT_PLUGIN_ENTRY_SYMBOL ")";
	if (timed_out)
		snprintf(how, sizeof(how), "did not finish within %g s %s (killed; %s sets the limit)",
			 limit, stage, SRT_PLUGIN_PROBE_TIMEOUT_ENV);
	else if (w == pid && WIFSIGNALED(st))
		snprintf(how, sizeof(how), "crashed %s (signal %d, %s)", stage, WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
	else if (w == pid && WIFEXITED(st))
		snprintf(how, sizeof(how), "called exit(%d) %s", WEXITSTATUS(st), stage);
	else
		snprintf(how, sizeof(how), "ended %s without a report", stage);
	reject(e, SRT_EINVAL, "%s: %s%s: not loaded", e->path, who, how);
	if (have && last.have_desc)
		e->info.desc = &e->desc;
	return e->info.code;
}

/* Load a deferred (child-checked) plugin into this process; 0 or the rejection code. */
static int ensure_loaded(const struct srt_registry *reg, struct entry *e)
{
	if (!e->deferred)
		return e->info.state == SRT_PLUGIN_REJECTED ? e->info.code : 0;
	e->deferred = 0;
	uint32_t state = e->info.state;
	char *shadow_reason = e->reason;
	e->reason = NULL;
	int rc = load_and_check(reg, e);
	if (rc) {
		free(shadow_reason);
		reg_log(reg, SRT_LOG_WARN, "rejected %s (it passed in a child process)",
			e->info.reason);
		return rc;
	}
	/* Keep what the scan decided (OK or SHADOWED, with its reason). */
	e->info.state = state;
	e->reason = shadow_reason;
	e->info.reason = shadow_reason ? shadow_reason : "";
	return 0;
}

/* --- entries and directories ----------------------------------------------------------------- */

static void entry_free(struct entry *e)
{
	if (!e)
		return;
	free(e->path);
	free(e->real);
	free(e->reason);
	free(e); /* the handle stays open: plugins are never dlclose()d */
}

static struct entry *entry_by_real(const struct srt_registry *reg, const char *real)
{
	for (size_t i = 0; i < reg->n_entries; i++)
		if (reg->entries[i]->real && !strcmp(reg->entries[i]->real, real))
			return reg->entries[i];
	return NULL;
}

/* Load path (origin) as a new entry at the end; NULL only when out of memory. */
static struct entry *add_file(struct srt_registry *reg, const char *path, uint32_t origin)
{
	if (reg->n_entries == reg->cap_entries) {
		size_t cap = reg->cap_entries ? 2 * reg->cap_entries : 16;
		struct entry **grown = realloc(reg->entries, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		reg->entries = grown;
		reg->cap_entries = cap;
	}
	struct entry *e = calloc(1, sizeof(*e));
	if (!e || !(e->path = strdup(path))) {
		entry_free(e);
		return NULL;
	}
	e->real = realpath(path, NULL);
	e->info.path = e->path;
	e->info.origin = origin;
	e->report_fd = -1;

	int rc = reg->flags & SRT_REGISTRY_IN_PROCESS ? load_and_check(reg, e)
						       : probe_isolated(reg, e);
	if (rc == 0) {
		for (size_t i = 0; i < reg->n_entries; i++) {
			const struct entry *o = reg->entries[i];
			if (o->info.state == SRT_PLUGIN_OK && o->desc.kind == e->desc.kind &&
			    !strcmp(o->desc.name, e->desc.name)) {
				if (asprintf(&e->reason, "%s plugin '%s' is shadowed by %s (earlier in "
					     "the search path)", srt_kind_name(e->desc.kind),
					     e->desc.name, o->path) < 0)
					e->reason = NULL;
				e->info.state = SRT_PLUGIN_SHADOWED;
				e->info.reason = e->reason ? e->reason : "shadowed";
				break;
			}
		}
	}
	if (e->info.state == SRT_PLUGIN_REJECTED)
		reg_log(reg, SRT_LOG_WARN, "rejected %s", e->info.reason);
	else if (e->info.state == SRT_PLUGIN_SHADOWED)
		reg_log(reg, SRT_LOG_INFO, "%s", e->info.reason);
	else
		reg_log(reg, SRT_LOG_DEBUG, "loaded %s plugin '%s' %s (ABI %u.%u) from %s",
			srt_kind_name(e->desc.kind), e->desc.name,
			e->desc.version ? e->desc.version : "?", e->desc.abi_major,
			e->desc.abi_minor, e->path);
	reg->entries[reg->n_entries++] = e;
	return e;
}

static int add_dir(struct srt_registry *reg, const char *path, uint32_t origin)
{
	if (!*path)
		return 0;
	char *real = realpath(path, NULL);
	for (size_t i = 0; i < reg->n_dirs; i++) {
		const struct dir *o = &reg->dirs[i];
		if (real ? (o->real && !strcmp(o->real, real)) : !strcmp(o->path, path)) {
			free(real);
			return 0; /* scanned once, at its first position */
		}
	}
	if (reg->n_dirs == reg->cap_dirs) {
		size_t cap = reg->cap_dirs ? 2 * reg->cap_dirs : 8;
		struct dir *grown = realloc(reg->dirs, cap * sizeof(*grown));
		if (!grown)
			goto out_nomem;
		reg->dirs = grown;
		reg->cap_dirs = cap;
	}
	struct dir *d = &reg->dirs[reg->n_dirs];
	memset(d, 0, sizeof(*d));
	d->real = real;
	d->path = strdup(real ? real : path);
	if (!d->path)
		goto out_nomem;
	struct stat st;
	d->pub.exists = real && !stat(real, &st) && S_ISDIR(st.st_mode) && !access(real, R_OK | X_OK);
	d->pub.path = d->path;
	d->pub.origin = origin;
	reg->n_dirs++;
	return 0;

out_nomem:
	free(real);
	return SRT_ENOMEM;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int scan_dir(struct srt_registry *reg, const struct dir *d)
{
	int rc = 0;
	char **names = NULL;
	size_t n = 0, cap = 0;
	DIR *dp = opendir(d->path);
	if (!dp) {
		reg_log(reg, SRT_LOG_WARN, "cannot read plugin directory %s: %s", d->path,
			strerror(errno));
		return 0;
	}
	struct dirent *de;
	while ((de = readdir(dp))) {
		if (de->d_name[0] == '.' || !ends_with_so(de->d_name))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 32;
			char **grown = realloc(names, cap * sizeof(*grown));
			if (!grown)
				goto out_nomem;
			names = grown;
		}
		if (!(names[n] = strdup(de->d_name)))
			goto out_nomem;
		n++;
	}
	if (n > 1)
		qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		char *path;
		if (asprintf(&path, "%s/%s", d->path, names[i]) < 0)
			goto out_nomem;
		char *real = realpath(path, NULL);
		int seen = real && entry_by_real(reg, real);
		free(real);
		if (seen)
			reg_log(reg, SRT_LOG_DEBUG, "%s: already loaded through another path", path);
		else if (!add_file(reg, path, d->pub.origin)) {
			free(path);
			goto out_nomem;
		}
		free(path);
	}
	goto out;

out_nomem:
	rc = SRT_ENOMEM;
out:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(dp);
	return rc;
}

static int add_exe_dir(struct srt_registry *reg)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len <= 0 || SRT_PLUGIN_REL_DIR[0] == '/')
		return 0;
	exe[len] = '\0';
	char *slash = strrchr(exe, '/');
	if (!slash)
		return 0;
	*slash = '\0';
	char *path;
	if (asprintf(&path, "%s/%s", exe, SRT_PLUGIN_REL_DIR) < 0)
		return SRT_ENOMEM;
	int rc = add_dir(reg, path, SRT_ORIGIN_EXE);
	free(path);
	return rc;
}

int srt_registry_open(struct srt_registry **out, const char *const *dirs, size_t ndirs,
		      const struct srt_host *host, unsigned flags)
{
	assert(out && host && (dirs || !ndirs));
	*out = NULL;
	struct srt_registry *reg = calloc(1, sizeof(*reg));
	if (!reg)
		return SRT_ENOMEM;
	reg->host = host;
	reg->flags = flags;
	int rc = 0;

	for (size_t i = 0; i < ndirs && !rc; i++)
		rc = add_dir(reg, dirs[i], SRT_ORIGIN_CONFIG);
	const char *env = getenv(SRT_PLUGIN_PATH_ENV);
	if (!rc && env && !(flags & SRT_REGISTRY_NO_ENV)) {
		char *copy = strdup(env), *save = NULL;
		if (!copy)
			rc = SRT_ENOMEM;
		for (char *tok = copy ? strtok_r(copy, ":", &save) : NULL; tok && !rc;
		     tok = strtok_r(NULL, ":", &save))
			rc = add_dir(reg, tok, SRT_ORIGIN_ENV);
		free(copy);
	}
	if (!rc && !(flags & SRT_REGISTRY_NO_DEFAULTS)) {
		rc = add_exe_dir(reg);
		if (!rc)
			rc = add_dir(reg, SRT_PLUGIN_INSTALL_DIR_FULL, SRT_ORIGIN_INSTALL);
	}
	for (size_t i = 0; i < reg->n_dirs && !rc; i++)
		if (reg->dirs[i].pub.exists)
			rc = scan_dir(reg, &reg->dirs[i]);
	if (rc) {
		srt_registry_close(reg);
		return rc;
	}
	*out = reg;
	return 0;
}

void srt_registry_close(struct srt_registry *reg)
{
	if (!reg)
		return;
	for (size_t i = 0; i < reg->n_entries; i++)
		entry_free(reg->entries[i]);
	free(reg->entries);
	for (size_t i = 0; i < reg->n_dirs; i++) {
		free(reg->dirs[i].path);
		free(reg->dirs[i].real);
	}
	free(reg->dirs);
	free(reg);
}

size_t srt_registry_count(const struct srt_registry *reg)
{
	return reg->n_entries;
}

const struct srt_plugin_info *srt_registry_at(const struct srt_registry *reg, size_t i)
{
	assert(i < reg->n_entries);
	ensure_loaded(reg, reg->entries[i]);
	return &reg->entries[i]->info;
}

size_t srt_registry_dir_count(const struct srt_registry *reg)
{
	return reg->n_dirs;
}

const struct srt_search_dir *srt_registry_dir_at(const struct srt_registry *reg, size_t i)
{
	assert(i < reg->n_dirs);
	return &reg->dirs[i].pub;
}

/* --- lookups --------------------------------------------------------------------------------- */

/* Append printf output to buf[len] at *pos, truncating quietly. */
static void cat(char *buf, size_t len, size_t *pos, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void cat(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
	if (!buf || *pos + 1 >= len)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *pos, len - *pos, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos = *pos + (size_t)n < len ? *pos + (size_t)n : len - 1;
}

/* The file name without directory and ".so", compared with name. */
static int stem_is(const char *path, const char *name)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	size_t n = strlen(name);
	return !strncmp(base, name, n) && !strcmp(base + n, ".so");
}

static int find_by_path(struct srt_registry *reg, enum srt_kind kind, const char *path,
			const struct srt_plugin_info **out, char *why, size_t why_len)
{
	char *real = realpath(path, NULL);
	if (!real) {
		snprintf(why, why_len, "plugin file %s: %s", path, strerror(errno));
		return SRT_ENOENT;
	}
	struct entry *e = entry_by_real(reg, real);
	free(real);
	if (!e && !(e = add_file(reg, path, SRT_ORIGIN_PATH))) {
		snprintf(why, why_len, "plugin file %s: out of memory", path);
		return SRT_ENOMEM;
	}
	ensure_loaded(reg, e);
	if (e->info.state == SRT_PLUGIN_REJECTED) {
		snprintf(why, why_len, "%s", e->info.reason);
		return e->info.code;
	}
	if (e->desc.kind != (uint32_t)kind) {
		snprintf(why, why_len, "%s: plugin '%s' is a %s plugin, a %s plugin was requested",
			 e->path, e->desc.name, srt_kind_name(e->desc.kind), srt_kind_name(kind));
		return SRT_EINVAL;
	}
	*out = &e->info;
	return 0;
}

int srt_registry_find(struct srt_registry *reg, enum srt_kind kind, const char *name_or_path,
		      const struct srt_plugin_info **out, char *why, size_t why_len)
{
	assert(reg && name_or_path && out);
	*out = NULL;
	if (why && why_len)
		why[0] = '\0';
	if (strchr(name_or_path, '/') || ends_with_so(name_or_path))
		return find_by_path(reg, kind, name_or_path, out, why, why_len);

	const struct entry *other_kind = NULL;
	for (size_t i = 0; i < reg->n_entries; i++) {
		const struct entry *e = reg->entries[i];
		if (e->info.state != SRT_PLUGIN_OK || strcmp(e->desc.name, name_or_path))
			continue;
		if (e->desc.kind == (uint32_t)kind) {
			struct entry *me = reg->entries[i];
			int rc = ensure_loaded(reg, me);
			if (rc) {
				snprintf(why, why_len, "%s", me->info.reason);
				return rc;
			}
			*out = &me->info;
			return 0;
		}
		if (!other_kind)
			other_kind = e;
	}
	if (other_kind) {
		snprintf(why, why_len, "plugin '%s' (%s) is a %s plugin, a %s plugin was requested",
			 name_or_path, other_kind->path, srt_kind_name(other_kind->desc.kind),
			 srt_kind_name(kind));
		return SRT_EINVAL;
	}

	/* Not found: say where we looked and what was refused that might have been it. */
	char msg[4096];
	size_t pos = 0;
	cat(msg, sizeof(msg), &pos, "no %s plugin named '%s' in the search path:",
	    srt_kind_name(kind), name_or_path);
	for (size_t i = 0; i < reg->n_dirs; i++)
		cat(msg, sizeof(msg), &pos, "%s %s (%s%s)", i ? ";" : "", reg->dirs[i].path,
		    srt_origin_name(reg->dirs[i].pub.origin),
		    reg->dirs[i].pub.exists ? "" : ", missing");
	if (!reg->n_dirs)
		cat(msg, sizeof(msg), &pos, " (empty)");
	for (size_t i = 0; i < reg->n_entries; i++) {
		const struct entry *e = reg->entries[i];
		if (e->info.state != SRT_PLUGIN_REJECTED)
			continue;
		if ((e->info.desc && !strcmp(e->desc.name, name_or_path)) ||
		    stem_is(e->path, name_or_path))
			cat(msg, sizeof(msg), &pos, "; rejected: %s", e->info.reason);
	}
	/* the caller reports `why`; logging it as an error too printed every such message twice */
	reg_log(reg, SRT_LOG_DEBUG, "%s", msg);
	snprintf(why, why_len, "%s", msg);
	return SRT_ENOENT;
}

/* --- instances ------------------------------------------------------------------------------- */

struct instance_impl {
	struct srt_instance pub; /* first */
	struct srt_plugin_desc desc;
	union vtable_copy vt;
};

int srt_plugin_instantiate(const struct srt_plugin_info *plugin, const struct srt_host *host,
			   const struct srt_plugin_args *args, struct srt_instance **out,
			   char *why, size_t why_len)
{
	assert(plugin && out && args);
	assert(plugin->state != SRT_PLUGIN_REJECTED && plugin->desc && plugin->vtable);
	*out = NULL;
	const struct entry *e = (const struct entry *)plugin;
	struct instance_impl *inst = calloc(1, sizeof(*inst));
	if (!inst) {
		snprintf(why, why_len, "%s plugin '%s': out of memory", srt_kind_name(e->desc.kind),
			 e->desc.name);
		return SRT_ENOMEM;
	}
	inst->desc = e->desc;
	inst->vt = e->vt;
	inst->pub.desc = &inst->desc;
	inst->pub.vtable = &inst->vt;

	struct srt_plugin_args a = *args;
	if (!a.struct_size)
		a.struct_size = sizeof(a);
	char reason[512] = "";
	void *ctx = NULL;
	int rc = inst->desc.create(host, &a, &ctx, reason, sizeof(reason));
	if (rc) {
		reason[sizeof(reason) - 1] = '\0';
		snprintf(why, why_len, "%s plugin '%s' (%s): create failed (%d): %s",
			 srt_kind_name(e->desc.kind), e->desc.name, e->path, rc,
			 reason[0] ? reason : "(the plugin gave no reason)");
		free(inst);
		return rc < 0 ? rc : SRT_EINVAL;
	}
	inst->pub.ctx = ctx;
	*out = &inst->pub;
	return 0;
}

void srt_instance_destroy(struct srt_instance *inst)
{
	if (!inst)
		return;
	inst->desc->destroy(inst->ctx);
	free(inst);
}
