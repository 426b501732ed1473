/* Tier stack from a runtime config (stack.h). */
#include "tier/stack.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/host.h"
#include "plugin/registry.h"
#include "tier/sha256.h"

struct srt_tier_stack {
	struct srt_host *host;
	struct srt_registry *reg;
	struct srt_instance *inst[SRT_TIER_COUNT];
	struct srt_tmgr *m;
	char desc[SRT_TIER_COUNT][160];
};

/* Option lookup for a tier plugin: overrides, then the config section. */
struct optscope {
	const struct srt_runtime_config *rc;
	const char *section;
	const struct srt_tier_overrides *over; /* only for tier.l3 */
	int synthetic;
	char max_bytes[24]; /* L3 budget handed to the store in real mode ("" = none) */
};

static const char *opt_cb(void *ctx, const char *key)
{
	const struct optscope *s = ctx;
	/* budgets are the manager's: [tier.*] budget is not a plugin option (the host arena would
	 * read it with its own size syntax); the store's own bound follows the L3 budget in real
	 * mode, and is off in synthetic mode, where objects are smaller than the pages they stand
	 * for */
	if (!strcmp(key, "budget"))
		return NULL;
	if (s->synthetic && !strcmp(key, "max_bytes"))
		return NULL;
	if (s->over)
		for (int i = 0; i < SRT_TIER_STACK_MAX_OPTS && s->over->l3_opts[i][0]; i++)
			if (!strcmp(s->over->l3_opts[i][0], key))
				return s->over->l3_opts[i][1];
	const char *v = srt_runtime_config_option(s->rc, s->section, key);
	if (!v && !strcmp(key, "max_bytes") && s->max_bytes[0])
		return s->max_bytes;
	return v;
}

static int load_tier(struct srt_tier_stack *s, const struct srt_tier_stack_opts *o, int level,
		     const char *plugin, uint64_t caps_needed, uint64_t budget, char *err,
		     size_t errlen)
{
	static const char *sections[SRT_TIER_COUNT] = {"tier.l1", "tier.l2", "tier.l3"};
	const struct srt_plugin_info *pi;
	char why[1024];
	int rc = srt_registry_find(s->reg, SRT_KIND_TIER, plugin, &pi, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "[%s] plugin = %s: %s", sections[level], plugin, why);
		return rc;
	}
	if (!(pi->desc->caps & caps_needed)) {
		snprintf(err, errlen, "[%s] plugin = %s: not a %s", sections[level], plugin,
			 caps_needed == SRT_CAP_KEYED_STORE ? "keyed store (L3 needs file, sqlite or "
							      "redis)"
							    : "page arena (L2 needs host)");
		return SRT_EINVAL;
	}
	if (o->rc && (rc = srt_runtime_config_check_options(o->rc, sections[level], pi->desc, err,
							     errlen)))
		return rc;
	struct optscope sc = {o->rc, sections[level], level == SRT_TIER_L3 ? o->over : NULL,
			      o->payload_bytes > 0, ""};
	if (level == SRT_TIER_L3 && !o->payload_bytes && budget && budget != UINT64_MAX)
		snprintf(sc.max_bytes, sizeof(sc.max_bytes), "%" PRIu64, budget);
	struct srt_plugin_args args = {.struct_size = sizeof(args), .page_tokens = o->page_tokens,
				       .option = opt_cb, .option_ctx = &sc,
				       .role = sections[level]};
	rc = srt_plugin_instantiate(pi, s->host, &args, &s->inst[level], why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "[%s] plugin = %s: %s", sections[level], plugin, why);
		return rc;
	}
	/* an arena keeps its mappings within the tier's budget (tier.h, ABI 1.1) */
	const struct srt_tier_vtable *vt = s->inst[level]->vtable;
	if (level != SRT_TIER_L3 && budget && vt->set_budget &&
	    (rc = vt->set_budget(s->inst[level]->ctx, budget))) {
		snprintf(err, errlen, "[%s] plugin = %s: set_budget(%" PRIu64 ") failed (%d)",
			 sections[level], plugin, budget, rc);
		return rc;
	}
	return 0;
}

int srt_tier_stack_open(const struct srt_tier_stack_opts *o, struct srt_tier_stack **out,
			char *err, size_t errlen)
{
	*out = NULL;
	const struct srt_runtime_config *rc = o->rc;
	const struct srt_tier_overrides *ov = o->over;
	struct srt_tier_stack *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "tier stack: out of memory");
		return SRT_ENOMEM;
	}
	char why[512];
	int st = srt_host_create(1, &s->host, why, sizeof(why));
	if (st) {
		snprintf(err, errlen, "tier stack: %s", why);
		goto fail;
	}
	/* config plugin directories, then the caller's */
	const char *dirs[64];
	size_t nd = 0;
	for (int i = 0; i < rc->n_plugin_dirs && nd < 32; i++)
		dirs[nd++] = rc->plugin_dirs[i];
	for (size_t i = 0; i < o->ndirs && nd < 64; i++)
		dirs[nd++] = o->dirs[i];
	if ((st = srt_registry_open(&s->reg, dirs, nd, s->host, 0))) {
		snprintf(err, errlen, "tier stack: cannot open the plugin registry");
		goto fail;
	}
	const char *l2p = ov && ov->l2_plugin ? ov->l2_plugin
			  : rc->tiers[SRT_TIER_L2].enabled ? rc->tiers[SRT_TIER_L2].plugin.name
							   : "none";
	const char *l3p = ov && ov->l3_plugin ? ov->l3_plugin
			  : rc->tiers[SRT_TIER_L3].enabled ? rc->tiers[SRT_TIER_L3].plugin.name
							   : "none";
	uint64_t l2b = ov && ov->l2_budget ? ov->l2_budget : rc->tiers[SRT_TIER_L2].budget;
	uint64_t l3b = ov && ov->l3_budget ? ov->l3_budget : rc->tiers[SRT_TIER_L3].budget;
	int use_l2 = l2p && strcmp(l2p, "none");
	int use_l3 = l3p && strcmp(l3p, "none");
	if (use_l2 && !l2b) {
		snprintf(err, errlen, "[tier.l2] plugin = %s needs a budget (bytes)", l2p);
		st = SRT_EINVAL;
		goto fail;
	}
	if (use_l2 && (st = load_tier(s, o, SRT_TIER_L2, l2p, SRT_CAP_PAGE_ARENA, l2b, err, errlen)))
		goto fail;
	if (use_l3 && (st = load_tier(s, o, SRT_TIER_L3, l3p, SRT_CAP_KEYED_STORE, l3b, err,
					       errlen)))
		goto fail;

	struct srt_tmgr_config mc = {
		.page_tokens = o->page_tokens,
		.pools = o->pools,
		.n_pools = o->n_pools,
		.write_policy = ov && ov->write_policy >= 0 ? ov->write_policy : rc->write_policy,
		.write_after_hits = rc->write_after_hits,
		.prefetch = ov && ov->prefetch >= 0 ? ov->prefetch : rc->prefetch,
		.payload_bytes = o->payload_bytes,
		.tail_stride = o->tail_stride,
		.l2_budget = l2b,
		.l3_name = use_l3 ? l3p : NULL,
		.l3_budget = l3b ? l3b : UINT64_MAX,
		.l3_retry_ms = o->l3_retry_ms,
		.host = s->host,
	};
	if (ov) {
		mc.write_sync = ov->write_sync;
		mc.write_queue_bytes = ov->write_queue_bytes;
		mc.write_batch = ov->write_batch;
		mc.write_full = ov->write_full;
		mc.l3_report_ms = ov->l3_report_ms;
	}
	mc.scope.layout_version = o->layout_version ? o->layout_version : 1;
	srt_tmgr_fingerprint(o->model_ident, o->page_tokens, o->pools, o->n_pools,
			     mc.scope.model_fp);
	if (rc->tenant_salt && rc->tenant_salt[0])
		srt_tier_sha256(rc->tenant_salt, strlen(rc->tenant_salt), mc.scope.tenant_salt);
	if (use_l2) {
		mc.l2_vt = s->inst[SRT_TIER_L2]->vtable;
		mc.l2_inst = s->inst[SRT_TIER_L2]->ctx;
	}
	if (use_l3) {
		mc.l3_vt = s->inst[SRT_TIER_L3]->vtable;
		mc.l3_inst = s->inst[SRT_TIER_L3]->ctx;
	}
	if ((st = srt_tmgr_create(&mc, &s->m, err, errlen)))
		goto fail;
	char b[32];
	snprintf(s->desc[SRT_TIER_L2], sizeof(s->desc[0]), "L2 %s%s%s", use_l2 ? l2p : "none",
		 use_l2 ? " " : "", use_l2 ? srt_format_size(l2b, b, sizeof(b)) : "");
	if (use_l3) {
		const char *where = opt_cb(&(struct optscope){rc, "tier.l3", ov, 0, ""}, "path");
		const char *host = opt_cb(&(struct optscope){rc, "tier.l3", ov, 0, ""}, "host");
		const char *port = opt_cb(&(struct optscope){rc, "tier.l3", ov, 0, ""}, "port");
		char loc[96];
		if (where)
			snprintf(loc, sizeof(loc), "%s", where);
		else
			snprintf(loc, sizeof(loc), "%s:%s", host ? host : "127.0.0.1",
				 port ? port : "6379");
		snprintf(s->desc[SRT_TIER_L3], sizeof(s->desc[0]), "L3 %s %s %s", l3p, loc,
			 l3b ? srt_format_size(l3b, b, sizeof(b)) : "unbounded");
	} else {
		snprintf(s->desc[SRT_TIER_L3], sizeof(s->desc[0]), "L3 none");
	}
	*out = s;
	return 0;
fail:
	srt_tier_stack_close(s);
	return st ? st : SRT_EINVAL;
}

struct srt_tmgr *srt_tier_stack_manager(struct srt_tier_stack *s)
{
	return s->m;
}

const char *srt_tier_stack_describe(const struct srt_tier_stack *s, int level)
{
	return level > 0 && level < SRT_TIER_COUNT ? s->desc[level] : "";
}

void srt_tier_stack_close(struct srt_tier_stack *s)
{
	if (!s)
		return;
	srt_tmgr_destroy(s->m);
	for (int i = 0; i < SRT_TIER_COUNT; i++)
		srt_instance_destroy(s->inst[i]);
	srt_registry_close(s->reg);
	srt_host_destroy(s->host);
	free(s);
}
