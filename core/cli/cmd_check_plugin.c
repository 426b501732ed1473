/*
 * shadowrt check-plugin: the conformance suite for an attention, MoE or residual plugin,
 * installed or out of tree (core/check/conform.h runs the checks).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "check/conform.h"
#include "commands.h"
#include "config/model_config.h"
#include "config/runtime_config.h"
#include "plugin/host.h"
#include "plugin/registry.h"

static void cp_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt check-plugin PLUGIN [options]\n"
		"\n"
		"Run the conformance suite on an attention, MoE or residual plugin: PLUGIN is a name\n"
		"found in the plugin search path or a path to a .so (built out of tree). The plugin\n"
		"is put in place of the built-in one of its role (attention.ratio.R, moe.plugin or\n"
		"residual.plugin) on a real checkpoint, and every check runs in its own process:\n"
		"  pools       attention: sane pool declarations; cache-only create (no weights) works\n"
		"  chunk       chunked prefill (7, 64, 100 tokens) = one shot, bitwise\n"
		"  decode      token-by-token decode = one-shot prefill, bitwise\n"
		"  resume-l1   resume from a cached prefix in L1 = from scratch, bitwise\n"
		"  resume-l2   ... after the prefix was evicted to L2 (host)\n"
		"  resume-l3   ... from a file L3 written by another engine instance\n"
		"  batch       a batch of 3 sequences = each alone, bitwise (prefill and decode)\n"
		"  threads     1 thread = N threads, bitwise\n"
		"  guard       KV pages fenced by guard pages + canaries: no access outside them\n"
		"  divergence  teacher-forced logits vs the built-in plugin of the role (KL, top-1,\n"
		"              max |dlogit|); informational unless --max-kl\n"
		"Exit status: 0 when no check fails, 1 when one fails or errs, 2 on usage errors.\n"
		"\n"
		"options:\n"
		"  --kind K           attention | moe | residual (default: the plugin's own kind)\n"
		"  --ratio N          attention: the compress ratio it serves (default: the ratio the\n"
		"                     config maps to a plugin of the same name)\n"
		"  --model DIR|PRESET checkpoint directory or preset (default: [runtime] model); it\n"
		"                     must have layers of the plugin's ratio\n"
		"  --config FILE      runtime config over the built-in default\n"
		"  --profile P        reference | f32 (default: the config's)\n"
		"  --threads N        threads of the runs, and N of the threads check (default 2)\n"
		"  --tokens N         prompt length of the chunk/decode/threads/divergence checks\n"
		"                     (default 300: past a 256-token page and the 128-token window)\n"
		"  --only LIST        run only these checks (comma-separated names)\n"
		"  --skip LIST        leave these checks out\n"
		"  --max-kl X         fail `divergence` when the mean KL exceeds X\n"
		"  --json             print the report as JSON on stdout\n"
		"  -q, --quiet        no progress on stderr\n"
		"  -h, --help         this help\n");
}

static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *s = list; s && *s;) {
		const char *c = strchr(s, ',');
		size_t len = c ? (size_t)(c - s) : strlen(s);
		if (len == n && !strncmp(s, name, n))
			return 1;
		s = c ? c + 1 : s + len;
	}
	return 0;
}

static int bad_list(const char *list, char *bad, size_t len)
{
	for (const char *s = list; s && *s;) {
		const char *c = strchr(s, ',');
		size_t l = c ? (size_t)(c - s) : strlen(s);
		snprintf(bad, len, "%.*s", (int)l, s);
		if (!srt_conf_known(bad))
			return 1;
		s = c ? c + 1 : s + l;
	}
	return 0;
}

/* The plugin's kind (the one asked for, or whichever it has), its name, and for attention
 * the default ratio. 0, or 1 with a message. */
static int resolve(const char *plugin, uint32_t want, const struct srt_runtime_config *rc,
		   uint32_t *kind, char *name, size_t nlen, char *ver, size_t vlen)
{
	struct srt_host *host = NULL;
	struct srt_registry *reg = NULL;
	char why[4096];
	int bad = 1;
	if (srt_host_create(1, &host, why, sizeof(why)) ||
	    srt_registry_open(&reg, rc->plugin_dirs, (size_t)rc->n_plugin_dirs, host, 0)) {
		fprintf(stderr, "shadowrt check-plugin: cannot search for plugins: %s\n", why);
		goto out;
	}
	static const uint32_t kinds[] = {SRT_KIND_ATTENTION, SRT_KIND_MOE, SRT_KIND_RESIDUAL};
	const struct srt_plugin_info *info = NULL;
	for (int i = 0; i < 3 && !info; i++) {
		if (want && kinds[i] != want)
			continue;
		if (srt_registry_find(reg, kinds[i], plugin, &info, why, sizeof(why)))
			info = NULL;
	}
	if (!info) {
		uint32_t k = want ? want : SRT_KIND_ATTENTION;
		char dym[96];
		srt_registry_find(reg, k, plugin, &info, why, sizeof(why));
		srt_runtime_config_plugin_dym(reg, k, plugin, dym, sizeof(dym));
		if (!dym[0] && !want)
			srt_runtime_config_plugin_dym(reg, SRT_KIND_MOE, plugin, dym, sizeof(dym));
		if (!dym[0] && !want)
			srt_runtime_config_plugin_dym(reg, SRT_KIND_RESIDUAL, plugin, dym, sizeof(dym));
		fprintf(stderr, "shadowrt check-plugin: '%s'%s: %s\n", plugin, dym, why);
		goto out;
	}
	*kind = info->desc->kind;
	snprintf(name, nlen, "%s", info->desc->name);
	snprintf(ver, vlen, "%s (ABI %u.%u, %s)", info->desc->version ? info->desc->version : "?",
		 info->abi_major, info->abi_minor, info->path);
	bad = 0;
out:
	srt_registry_close(reg);
	srt_host_destroy(host);
	return bad;
}

int srt_cmd_check_plugin(int argc, char **argv)
{
	const char *plugin = NULL, *model = NULL, *config = NULL, *only = NULL, *skip = NULL;
	int json = 0, quiet = 0, profile = -1, threads = 2, ratio = -1;
	long tokens = 300;
	double max_kl = -1;
	uint32_t want = 0;
	char err[2048];

	if (srt_cli_wants_help(argc, argv)) {
		cp_usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--json")) {
			json = 1;
			continue;
		}
		if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
			quiet = 1;
			continue;
		}
		if (a[0] != '-') {
			if (plugin) {
				fprintf(stderr, "shadowrt check-plugin: one plugin at a time ('%s' and "
					"'%s')\n", plugin, a);
				return 2;
			}
			plugin = a;
			continue;
		}
		if (i + 1 == argc) {
			fprintf(stderr, "shadowrt check-plugin: %s needs a value (see --help)\n", a);
			return 2;
		}
		const char *v = argv[++i];
		int bad = 0;
		if (!strcmp(a, "--kind"))
			bad = !(want = srt_kind_parse(v)) || want == SRT_KIND_TIER;
		else if (!strcmp(a, "--ratio"))
			bad = srt_cli_parse_int(v, 0, 1 << 20, &ratio) != 0;
		else if (!strcmp(a, "--model"))
			model = v;
		else if (!strcmp(a, "--config"))
			config = v;
		else if (!strcmp(a, "--profile"))
			bad = (profile = !strcmp(v, "reference") ? SRT_PROFILE_REFERENCE
					 : !strcmp(v, "f32")     ? SRT_PROFILE_F32
								 : -1) < 0;
		else if (!strcmp(a, "--threads"))
			bad = srt_cli_parse_int(v, 1, 256, &threads) != 0;
		else if (!strcmp(a, "--tokens"))
			bad = srt_cli_parse_long(v, 8, 1 << 16, &tokens) != 0;
		else if (!strcmp(a, "--only"))
			only = v;
		else if (!strcmp(a, "--skip"))
			skip = v;
		else if (!strcmp(a, "--max-kl")) {
			char *end;
			max_kl = strtod(v, &end);
			bad = *end || !(max_kl >= 0);
		} else {
			fprintf(stderr, "shadowrt check-plugin: unknown option '%s' (see --help)\n", a);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "shadowrt check-plugin: %s: invalid value '%s' (see --help)\n", a,
				v);
			return 2;
		}
	}
	if (!plugin) {
		fprintf(stderr, "shadowrt check-plugin: which plugin? (a name or a path to a .so; see "
			"--help)\n");
		return 2;
	}
	char badname[64];
	if ((only && bad_list(only, badname, sizeof(badname))) ||
	    (skip && bad_list(skip, badname, sizeof(badname)))) {
		const char *s = srt_suggest(badname, srt_conf_checks, 10);
		fprintf(stderr, "shadowrt check-plugin: unknown check '%s'%s%s%s\n", badname,
			s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
		return 2;
	}

	/* the user's config and --set list (copied: the checks replace the process-wide one) */
	size_t n_sets = 0;
	const char *const *gs = srt_runtime_config_overrides(&n_sets);
	char **sets = calloc(n_sets + 1, sizeof(char *));
	for (size_t i = 0; sets && i < n_sets; i++)
		sets[i] = strdup(gs[i]);
	struct srt_runtime_config rc;
	struct srt_model_config m;
	int status = 1;
	char tmp[4096] = "";
	json_t *report = NULL;
	/* first without the [attention.<plugin>] options (the candidate is not mapped yet) */
	const char **early = calloc(n_sets + 1, sizeof(char *));
	size_t n_early = 0;
	for (size_t i = 0; early && i < n_sets; i++)
		if (strncmp(sets[i], "attention.", 10) || !strncmp(sets[i], "attention.ratio.", 16))
			early[n_early++] = sets[i];
	int lrc = srt_runtime_config_load_ex(config, early, n_early, &rc, err, sizeof(err));
	free(early);
	if (lrc) {
		fprintf(stderr, "shadowrt check-plugin: %s\n", err);
		for (size_t i = 0; sets && i < n_sets; i++)
			free(sets[i]);
		free(sets);
		return 1;
	}
	uint32_t kind = 0;
	char name[128], version[4400];
	if (resolve(plugin, want, &rc, &kind, name, sizeof(name), version, sizeof(version)))
		goto out;
	if (kind == SRT_KIND_ATTENTION && ratio < 0) {
		for (int i = 0; i < rc.n_ratios; i++) {
			char stem[128];
			const char *b = strrchr(rc.ratios[i].plugin.name, '/');
			snprintf(stem, sizeof(stem), "%s", b ? b + 1 : rc.ratios[i].plugin.name);
			char *dot = strstr(stem, ".so");
			if (dot)
				*dot = 0;
			if (!strcmp(stem, name))
				ratio = rc.ratios[i].ratio;
		}
		if (ratio < 0) {
			fprintf(stderr, "shadowrt check-plugin: which ratio does attention plugin '%s' "
				"serve? The config maps none to it: pass --ratio N\n", name);
			goto out;
		}
	}
	if (srt_model_config_load(model ? model : rc.model, &m, err, sizeof(err))) {
		fprintf(stderr, "shadowrt check-plugin: %s\n", err);
		goto out;
	}
	if (kind == SRT_KIND_ATTENTION) {
		int used = 0;
		for (int l = 0; l < m.num_hidden_layers; l++)
			used += m.compress_ratios[l] == ratio;
		if (!used) {
			fprintf(stderr, "shadowrt check-plugin: model '%s' has no layer of compress "
				"ratio %d, so the plugin would never run: pass --model with such layers\n",
				m.name, ratio);
			goto out;
		}
	}
	{
		/* the whole config, with the candidate in place, must load */
		char cand[4200];
		if (kind == SRT_KIND_ATTENTION)
			snprintf(cand, sizeof(cand), "attention.ratio.%d=%s", ratio, plugin);
		else
			snprintf(cand, sizeof(cand), "%s.plugin=%s",
				 kind == SRT_KIND_MOE ? "moe" : "residual", plugin);
		const char **all = calloc(n_sets + 2, sizeof(char *));
		struct srt_runtime_config full;
		if (!all) {
			fprintf(stderr, "shadowrt check-plugin: out of memory\n");
			goto out;
		}
		for (size_t i = 0; i < n_sets; i++)
			all[i] = sets[i];
		all[n_sets] = cand;
		lrc = srt_runtime_config_load_ex(config, all, n_sets + 1, &full, err, sizeof(err));
		free(all);
		if (lrc) {
			fprintf(stderr, "shadowrt check-plugin: %s\n", err);
			goto out;
		}
		srt_runtime_config_free(&full);
	}
	snprintf(tmp, sizeof(tmp), "%s/srt-check-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR")
									    : "/tmp");
	if (!mkdtemp(tmp)) {
		perror("shadowrt check-plugin: mkdtemp");
		tmp[0] = 0;
		goto out;
	}
	struct srt_conf_opts o = {.kind = kind, .plugin = plugin, .name = name, .ratio = ratio,
				  .config_path = config, .sets = (const char *const *)sets,
				  .n_sets = n_sets, .model = model, .profile = profile,
				  .threads = threads, .tokens = (uint64_t)tokens, .seed = 13,
				  .tmp_dir = tmp, .max_kl = max_kl, .quiet = quiet};
	char role[64];
	if (kind == SRT_KIND_ATTENTION)
		snprintf(role, sizeof(role), "attention ratio %d", ratio);
	else
		snprintf(role, sizeof(role), "%s", srt_kind_name(kind));
	if (!json)
		printf("check-plugin %s %s as %s on model %s (%s profile)\n", name, version, role,
		       m.name, srt_profile_name(profile >= 0 ? profile : rc.profile));
	report = json_object();
	json_t *checks = json_array();
	json_object_set_new(report, "plugin", json_string(name));
	json_object_set_new(report, "path", json_string(plugin));
	json_object_set_new(report, "kind", json_string(srt_kind_name(kind)));
	if (kind == SRT_KIND_ATTENTION)
		json_object_set_new(report, "ratio", json_integer(ratio));
	json_object_set_new(report, "model", json_string(m.name));
	json_object_set_new(report, "checks", checks);
	int failed = 0, ran = 0;
	for (int i = 0; srt_conf_checks[i]; i++) {
		const char *c = srt_conf_checks[i];
		if ((only && !in_list(only, c)) || (skip && in_list(skip, c)))
			continue;
		if (!quiet)
			fprintf(stderr, "[check-plugin] %s ...\n", c);
		struct srt_conf_result r;
		srt_conf_run(&o, c, &r);
		ran++;
		failed += r.status == SRT_CONF_FAIL || r.status == SRT_CONF_ERROR;
		if (!json) {
			printf("  %-11s %-5s %6.1fs  %s\n", c, srt_conf_status_name(r.status),
			       r.seconds, r.detail);
			fflush(stdout);
		}
		json_t *j = json_pack("{s:s, s:s, s:s, s:f}", "name", c, "status",
				      srt_conf_status_name(r.status), "detail", r.detail, "seconds",
				      r.seconds);
		if (!strcmp(c, "divergence") && r.status != SRT_CONF_SKIP &&
		    r.status != SRT_CONF_ERROR)
			json_object_set_new(j, "divergence",
					    json_pack("{s:f, s:f, s:f, s:f, s:I, s:I, s:b}", "kl_mean",
						      r.div.kl_mean, "kl_max", r.div.kl_max,
						      "top1_agreement", r.div.top1_agree, "max_abs_logit",
						      r.div.max_abs, "first_diff",
						      (json_int_t)r.div.first_diff, "first_top1_diff",
						      (json_int_t)r.div.first_top1, "bitwise_equal",
						      r.div.bitwise_equal));
		if (!strncmp(c, "resume", 6))
			json_object_set_new(j, "hit_tokens", json_integer((json_int_t)r.hit));
		json_array_append_new(checks, j);
	}
	json_object_set_new(report, "passed", json_boolean(!failed));
	if (json) {
		char *s = json_dumps(report, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (s)
			printf("%s\n", s);
		free(s);
	} else {
		printf("%s: %d of %d checks failed\n", failed ? "FAILED" : "passed", failed, ran);
	}
	status = failed ? 1 : 0;
out:
	json_decref(report);
	if (tmp[0]) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
		if (system(cmd)) {
			/* scratch left in TMPDIR */
		}
	}
	srt_runtime_config_free(&rc);
	for (size_t i = 0; sets && i < n_sets; i++)
		free(sets[i]);
	free(sets);
	return status;
}
