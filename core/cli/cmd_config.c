/* shadowrt config: validate the model description and the runtime config, print the result. */
#include <stdio.h>
#include <string.h>

#include <shadowrt/plugin.h>

#include "commands.h"
#include "config/model_config.h"
#include "config/runtime_config.h"
#include "plugin/host.h"
#include "plugin/registry.h"

static void config_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowrt config [--model PRESET|PATH] [--config FILE] [--list-presets]\n"
		"\n"
		"Validate a model description and a runtime configuration and print the effective\n"
		"configuration: the model's sizes and layer schedule (window-only / CSA / HCA layers,\n"
		"hash- vs score-routed MoE), the plugin serving each role, and the cache and tier\n"
		"settings. Exits 1 with a message naming file, line and key when either is invalid.\n"
		"\n"
		"options:\n"
		"  --model PRESET|PATH  built-in preset name (see --list-presets), a .yaml/.json file\n"
		"                       or a checkpoint directory with config.json\n"
		"                       (default: [runtime] model of the runtime config)\n"
		"  --config FILE        runtime config (INI); each key it sets overrides that key\n"
		"                       of the built-in default (conf/default.ini), see README\n"
		"                       \"Runtime configuration\". Default: built-in only\n"
		"  --list-presets       print the built-in model presets and exit\n"
		"  -h, --help           this help\n");
}

static void print_plugin(const char *role, const struct srt_rc_plugin *p, const char *extra,
			 const struct srt_runtime_config *rc)
{
	printf("  %-16s %s%s", role, p->name ? p->name : "none", extra);
	int first = 1;
	for (size_t i = 0; p->section && i < rc->n_entries; i++) {
		const struct srt_rc_entry *e = &rc->entries[i];
		if (strcmp(e->section, p->section) || !strcmp(e->key, "plugin") ||
		    !strcmp(e->key, "budget"))
			continue;
		printf("%s%s=%s", first ? "  (" : ", ", e->key, e->value);
		first = 0;
	}
	printf("%s\n", first ? "" : ")");
}

/* Find a configured plugin in the registry and check its options: 0, or 1 with the reason
 * on stderr. */
static int check_plugin(struct srt_registry *reg, enum srt_kind kind, const char *role,
			const struct srt_rc_plugin *p, const struct srt_runtime_config *rc)
{
	const struct srt_plugin_info *info;
	char why[2048], dym[96];
	if (!p->name)
		return 0;
	if (!srt_registry_find(reg, kind, p->name, &info, why, sizeof(why))) {
		if (!srt_runtime_config_check_options(rc, p->section, info->desc, why, sizeof(why)))
			return 0;
		fprintf(stderr, "shadowrt config: %s\n", why);
		return 1;
	}
	srt_runtime_config_plugin_dym(reg, kind, p->name, dym, sizeof(dym));
	if (p->line)
		fprintf(stderr, "shadowrt config: %s:%d: %s plugin '%s'%s: %s\n", p->file,
			p->line, role, p->name, dym, why);
	else
		fprintf(stderr, "shadowrt config: %s: %s plugin '%s'%s: %s\n",
			p->file ? p->file : "(built-in default)", role, p->name, dym, why);
	return 1;
}

/* Every plugin the config names exists, is usable and is of the right kind. */
static int check_plugins(const struct srt_runtime_config *rc)
{
	struct srt_host *host = NULL;
	struct srt_registry *reg = NULL;
	char why[512];
	int bad = 0;
	if (srt_host_create(1, &host, why, sizeof(why)) ||
	    srt_registry_open(&reg, rc->plugin_dirs, (size_t)rc->n_plugin_dirs, host, 0)) {
		fprintf(stderr, "shadowrt config: cannot search for plugins: %s\n", why);
		srt_host_destroy(host);
		return 1;
	}
	for (int i = 0; i < rc->n_ratios; i++) {
		char role[48];
		snprintf(role, sizeof(role), "attention (ratio %d)", rc->ratios[i].ratio);
		bad |= check_plugin(reg, SRT_KIND_ATTENTION, role, &rc->ratios[i].plugin, rc);
	}
	bad |= check_plugin(reg, SRT_KIND_MOE, "moe", &rc->moe, rc);
	bad |= check_plugin(reg, SRT_KIND_RESIDUAL, "residual", &rc->residual, rc);
	static const char *const tiers[] = {"tier.l1", "tier.l2", "tier.l3"};
	for (int t = 0; t < SRT_TIER_COUNT; t++)
		if (rc->tiers[t].enabled)
			bad |= check_plugin(reg, SRT_KIND_TIER, tiers[t], &rc->tiers[t].plugin, rc);
	srt_registry_close(reg);
	srt_host_destroy(host);
	return bad;
}

static void print_model(const struct srt_model_config *m)
{
	struct srt_model_schedule s;
	srt_model_schedule_count(m, &s);
	printf("model %s\n", m->name);
	printf("  hidden %d, %d layers + %d MTP, %d heads x head_dim %d (rope %d), 1 KV head\n",
	       m->hidden_size, m->num_hidden_layers, m->num_nextn_predict_layers,
	       m->num_attention_heads, m->head_dim, m->qk_rope_head_dim);
	printf("  q_lora %d, o_groups %d x o_lora %d, window %d, indexer %d heads x %d top-%d\n",
	       m->q_lora_rank, m->o_groups, m->o_lora_rank, m->sliding_window, m->index_n_heads,
	       m->index_head_dim, m->index_topk);
	printf("  vocab %d, experts %d (top-%d, %d shared, width %d, %s), mHC %d streams\n",
	       m->vocab_size, m->n_routed_experts, m->num_experts_per_tok, m->n_shared_experts,
	       m->moe_intermediate_size, m->expert_fp4 ? "FP4" : "FP8", m->hc_mult);
	printf("  rope theta %g, compressed %g, YaRN factor %g (orig %lld), max positions %lld\n",
	       m->rope_theta, m->compress_rope_theta, m->rope_factor,
	       (long long)m->rope_original_max_position, (long long)m->max_position_embeddings);
	printf("  layer schedule: %d window-only, %d CSA (ratio 4), %d HCA (ratio 128)",
	       s.window_only, s.csa, s.hca);
	if (s.other)
		printf(", %d other ratio", s.other);
	printf("; MoE: %d hash-routed, %d score-routed\n", s.hash_routed, s.score_routed);
	printf("  compress_ratios:");
	for (int i = 0; i < m->n_compress_ratios; i++)
		printf("%s%d", i ? "," : " ", m->compress_ratios[i]);
	printf("%s\n", s.mtp ? " (last: MTP)" : "");
}

static void print_runtime(const struct srt_runtime_config *rc)
{
	char b[32];
	printf("runtime config %s\n", rc->source);
	printf("  threads %d%s, profile %s, plugin dirs:", rc->threads,
	       rc->threads ? "" : " (all cores)", srt_profile_name(rc->profile));
	if (!rc->n_plugin_dirs)
		printf(" (none; then SHADOWRT_PLUGIN_PATH and the install default)");
	for (int i = 0; i < rc->n_plugin_dirs; i++)
		printf(" %s", rc->plugin_dirs[i]);
	printf("\nplugins\n");
	for (int i = 0; i < rc->n_ratios; i++) {
		char role[48];
		snprintf(role, sizeof(role), "attention r=%d", rc->ratios[i].ratio);
		print_plugin(role, &rc->ratios[i].plugin, "", rc);
	}
	print_plugin("moe", &rc->moe, "", rc);
	print_plugin("residual", &rc->residual, "", rc);
	char wp[48];
	printf("cache\n  page_size %u tokens, write policy %s, prefetch %s, tenant salt %s\n",
	       rc->page_size,
	       srt_write_policy_format(rc->write_policy, rc->write_after_hits, wp, sizeof(wp)),
	       rc->prefetch ? "on" : "off", rc->tenant_salt[0] ? "set" : "(none)");
	static const char *const names[] = {"tier.l1", "tier.l2", "tier.l3"};
	for (int t = 0; t < SRT_TIER_COUNT; t++) {
		const struct srt_rc_tier *tier = &rc->tiers[t];
		char extra[48] = "";
		if (tier->budget)
			snprintf(extra, sizeof(extra), ", budget %s",
				 srt_format_size(tier->budget, b, sizeof(b)));
		print_plugin(names[t], &tier->plugin, extra, rc);
	}
	printf("sampling\n  temperature %g, top_p %g, seed %llu, max_new_tokens %d\n",
	       rc->temperature, rc->top_p, (unsigned long long)rc->seed, rc->max_new_tokens);
}

int srt_cmd_config(int argc, char **argv)
{
	const char *model = NULL, *config = NULL;
	struct srt_runtime_config rc;
	struct srt_model_config m;
	char err[1024];
	int status = 1;

	if (srt_cli_wants_help(argc, argv)) {
		config_usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--list-presets")) {
			for (const char *const *p = srt_model_presets(); *p; p++)
				printf("%s\n", *p);
			return 0;
		}
		if (!strcmp(argv[i], "--model") || !strcmp(argv[i], "--config")) {
			if (i + 1 == argc) {
				fprintf(stderr, "shadowrt config: %s needs a value (see --help)\n",
					argv[i]);
				return 2;
			}
			*(argv[i][2] == 'm' ? &model : &config) = argv[i + 1];
			i++;
			continue;
		}
		fprintf(stderr, "shadowrt config: unexpected argument '%s' (see --help)\n", argv[i]);
		return 2;
	}
	if (srt_runtime_config_load(config, &rc, err, sizeof(err))) {
		fprintf(stderr, "shadowrt config: %s\n", err);
		return 1;
	}
	if (!model)
		model = rc.model;
	if (srt_model_config_load(model, &m, err, sizeof(err)) ||
	    srt_runtime_config_check_model(&rc, &m, err, sizeof(err))) {
		fprintf(stderr, "shadowrt config: %s\n", err);
		goto out;
	}
	if (check_plugins(&rc))
		goto out;
	print_model(&m);
	print_runtime(&rc);
	status = 0;
out:
	srt_runtime_config_free(&rc);
	return status;
}
