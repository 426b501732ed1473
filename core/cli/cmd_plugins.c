/* `shadowrt plugins`: list the plugins the loader finds, with versions, and what it refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "plugin/host.h"
#include "plugin/registry.h"

#define MAX_DIRS 64

static void plugins_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt plugins [--plugin-dir DIR]... [-v]\n"
		"\n"
		"Load every plugin on the search path and list what was found (kind, name, plugin\n"
		"version, plugin ABI version, file, description), what was shadowed by an earlier\n"
		"plugin of the same kind and name, and what was rejected and why. Exits 0 even when\n"
		"plugins were rejected.\n"
		"\n"
		"Search order (the first usable plugin of a kind and name wins):\n"
		"  1. each --plugin-dir DIR, in the order given\n"
		"  2. the directories in $%s (colon-separated)\n"
		"  3. <directory of this executable>/../lib/shadowrt/plugins\n"
		"  4. the install directory compiled in\n"
		"\n"
		"options:\n"
		"  --plugin-dir DIR  scan DIR first (repeatable)\n"
		"  -v, --verbose     also show capabilities, struct sizes and the loader's log\n"
		"Each plugin is listed with the options it reads from its config section (ABI 1.1);\n"
		"a config that sets another key in that section is refused.\n"
		"  -h, --help        this help\n",
		SRT_PLUGIN_PATH_ENV);
}

static void print_caps(uint64_t caps)
{
	static const char *const names[] = {"cpu", "cuda", "batch", "keyed-store", "page-arena"};
	int any = 0;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (caps & (1ull << i)) {
			printf("%s%s", any ? "," : "", names[i]);
			any = 1;
		}
	}
	if (!any)
		printf("-");
}

static void print_plugin(const struct srt_plugin_info *p, int verbose)
{
	const struct srt_plugin_desc *d = p->desc;
	printf("  %-10s %-16s %-10s %u.%-4u %s\n", srt_kind_name(d->kind), d->name,
	       d->version ? d->version : "?", p->abi_major, p->abi_minor, p->path);
	if (d->description && *d->description)
		printf("  %-10s %s\n", "", d->description);
	if (verbose) {
		printf("  %-10s caps ", "");
		print_caps(d->caps);
		printf("; descriptor %u bytes, vtable %u bytes; found via %s\n", d->struct_size,
		       *(const uint32_t *)d->vtable, srt_origin_name(p->origin));
	}
	/* the options it reads from its config section (ABI 1.1) */
	if (d->struct_size >= SRT_PLUGIN_DESC_V1_1_SIZE && d->options) {
		if (!d->options[0].name)
			printf("  %-10s options: none\n", "");
		for (const struct srt_plugin_option *o = d->options; o->name; o++)
			printf("  %-10s option %s = %s%s%s%s%s%s\n", "", o->name,
			       o->type ? o->type : "?", o->default_value ? " (default " : "",
			       o->default_value ? o->default_value : "", o->default_value ? ")" : "",
			       o->help && *o->help ? ": " : "", o->help ? o->help : "");
	} else if (verbose) {
		printf("  %-10s options: not declared (ABI 1.0 descriptor): not checked\n", "");
	}
}

int srt_cmd_plugins(int argc, char **argv)
{
	if (srt_cli_wants_help(argc, argv)) {
		plugins_usage(stdout);
		return 0;
	}
	const char *dirs[MAX_DIRS];
	size_t ndirs = 0;
	int verbose = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
			verbose = 1;
		} else if (!strcmp(a, "--plugin-dir") || !strncmp(a, "--plugin-dir=", 13)) {
			const char *dir = a[12] == '=' ? a + 13 : (i + 1 < argc ? argv[++i] : NULL);
			if (!dir || !*dir) {
				fprintf(stderr, "shadowrt plugins: --plugin-dir needs a directory\n");
				return 2;
			}
			if (ndirs == MAX_DIRS) {
				fprintf(stderr, "shadowrt plugins: more than %d --plugin-dir\n", MAX_DIRS);
				return 2;
			}
			dirs[ndirs++] = dir;
		} else {
			fprintf(stderr, "shadowrt plugins: unknown argument '%s' (see --help)\n", a);
			return 2;
		}
	}
	/* The listing shows every rejection; the log repeats them only in verbose mode. */
	srt_log_set_level(verbose ? SRT_LOG_DEBUG : SRT_LOG_ERROR);

	char why[512] = "";
	struct srt_host *host = NULL;
	int rc = srt_host_create(1, &host, why, sizeof(why));
	if (rc) {
		fprintf(stderr, "shadowrt plugins: %s\n", why);
		return 1;
	}
	struct srt_registry *reg = NULL;
	rc = srt_registry_open(&reg, dirs, ndirs, host, 0);
	if (rc) {
		fprintf(stderr, "shadowrt plugins: cannot scan the plugin directories: out of memory\n");
		srt_host_destroy(host);
		return 1;
	}

	printf("plugin ABI %d.%d; search path:\n", SRT_ABI_MAJOR, SRT_ABI_MINOR);
	for (size_t i = 0; i < srt_registry_dir_count(reg); i++) {
		const struct srt_search_dir *d = srt_registry_dir_at(reg, i);
		printf("  %zu. %s (%s)%s\n", i + 1, d->path, srt_origin_name(d->origin),
		       d->exists ? "" : " [missing]");
	}

	size_t n = srt_registry_count(reg), n_ok = 0, n_shadowed = 0, n_rejected = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t s = srt_registry_at(reg, i)->state;
		n_ok += s == SRT_PLUGIN_OK;
		n_shadowed += s == SRT_PLUGIN_SHADOWED;
		n_rejected += s == SRT_PLUGIN_REJECTED;
	}

	printf("\nfound %zu plugin%s:\n", n_ok, n_ok == 1 ? "" : "s");
	if (n_ok)
		printf("  %-10s %-16s %-10s %-6s %s\n", "KIND", "NAME", "VERSION", "ABI", "PATH");
	for (uint32_t kind = SRT_KIND_ATTENTION; kind <= SRT_KIND_TIER; kind++)
		for (size_t i = 0; i < n; i++) {
			const struct srt_plugin_info *p = srt_registry_at(reg, i);
			if (p->state == SRT_PLUGIN_OK && p->desc->kind == kind)
				print_plugin(p, verbose);
		}
	if (n_shadowed) {
		printf("\nshadowed %zu:\n", n_shadowed);
		for (size_t i = 0; i < n; i++) {
			const struct srt_plugin_info *p = srt_registry_at(reg, i);
			if (p->state == SRT_PLUGIN_SHADOWED) {
				print_plugin(p, verbose);
				printf("  %-10s %s\n", "", p->reason);
			}
		}
	}
	if (n_rejected) {
		printf("\nrejected %zu:\n", n_rejected);
		for (size_t i = 0; i < n; i++) {
			const struct srt_plugin_info *p = srt_registry_at(reg, i);
			if (p->state == SRT_PLUGIN_REJECTED)
				printf("  %s\n", p->reason);
		}
	}
	srt_registry_close(reg);
	srt_host_destroy(host);
	return 0;
}
