/* The executor (engine.h). */
#include "exec/engine.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shadowrt/attention.h>
#include <shadowrt/moe.h>
#include <shadowrt/residual.h>

#include "ckpt/dsv4_tensors.h"
#include "ckpt/fingerprint.h"
#include "ckpt/safetensors.h"
#include "ckpt/synth.h"
#include "config/model_config.h"
#include "config/runtime_config.h"
#include "exec/identity.h"
#include "exec/l1pages.h"
#include "ops/fp.h"
#include "ops/gemm.h"
#include "ops/norm.h"
#include "ops/prof.h"
#include "plugin/host.h"
#include "plugin/registry.h"
#include "radix/radix.h"
#include "radix/remat.h"
#include "tier/manager.h"
#include "tier/stack.h"

#define MAX_ATTN 8

struct attn_inst {
	int32_t ratio;
	struct srt_instance *inst;
	struct srt_rc_scope scope;
	int32_t *layers;
	uint32_t n_layers;
	uint32_t pool_off, pool_n; /* its pools in the cache's pool list */
};

struct srt_engine {
	struct srt_runtime_config rc;
	struct srt_model_config model;
	char path[4096];
	struct srt_ckpt *ck;
	struct srt_weights weights;
	struct srt_host *host;
	struct srt_registry *reg;
	struct attn_inst attn[MAX_ATTN];
	int n_attn;
	int layer_attn[SRT_MAX_LAYERS]; /* index into attn[] per main layer */
	struct srt_instance *moe, *res;
	struct srt_rc_scope moe_scope, res_scope;
	int32_t *all_layers;
	const struct srt_attention_vtable *attn_vt[MAX_ATTN];
	const struct srt_moe_vtable *moe_vt;
	const struct srt_residual_vtable *res_vt;
	struct srt_rdx_cache *cache;
	struct srt_tier_stack *tiers; /* NULL: L1 only */
	struct srt_tmgr *tmgr;
	int use_tiers;
	const struct srt_rdx_allocator *page_alloc; /* opts.page_alloc, or NULL */
	struct srt_l1_pages *l1; /* without page_alloc and with [cache] l1_pages = hugepages */
	uint32_t n_pools;
	uint32_t P;
	int profile, chunk, threads;
	int32_t d, vocab, S, mixf;
	const uint16_t *embed, *head, *norm_w;
	uint64_t next_seq_id;
	struct srt_seq *live; /* list of sequences not yet freed */
	int quiet;
	uint8_t identity[32]; /* cache identity (exec/identity.h) */
	char identity_hex[65];
	int remat;                /* 1: prefix hits may rematerialize windows */
	struct srt_remat_geom rg; /* the trapezoid's geometry */
	struct srt_rdx_remat_policy rpol;
	uint64_t waits; /* srt_engine_seq_wait calls that waited for a sequence's tier loads */
};

struct srt_seq {
	struct srt_engine *e;
	struct srt_rdx_req *req;    /* the radix request (owned by treq when tiers are on) */
	struct srt_tmgr_req *treq; /* NULL: L1 only */
	struct srt_tmgr_hit thit;
	uint64_t id, hit;
	uint64_t remat, remat_cost; /* rematerialized at start: position, token-layers */
	int32_t *prompt;
	uint64_t n_prompt, done; /* prompt tokens computed (from 0, hit included) */
	int finished, broken;
	int loading; /* begun, its tier loads not yet waited for (srt_engine_seq_wait) */
	struct srt_seq *prev, *next;
};

static void seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t len, const char *fmt, ...)
{
	if (!err || !len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* --- model location --------------------------------------------------------------------- */

const char *srt_engine_cache_dir(char *buf, size_t len)
{
	const char *x = getenv("XDG_CACHE_HOME");
	if (x && *x) {
		snprintf(buf, len, "%s/shadowrt/models", x);
		return buf;
	}
	return "./shadowrt-models";
}

static int is_file(const char *dir, const char *name)
{
	char p[4200];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void rm_tree_flat(const char *dir)
{
	/* the generator writes only plain files into dir: config.json and *.safetensors */
	static const char *const names[] = {"config.json", "model.safetensors",
					    "model.safetensors.index.json", NULL};
	char p[4300];
	for (int i = 0; names[i]; i++) {
		snprintf(p, sizeof(p), "%.4096s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
}

int srt_engine_model_dir(const char *model, const char *cache_dir, int quiet, char *out,
			 size_t len, char *err, size_t errlen)
{
	char why[1024], buf[4096];
	struct stat st;
	if (!model || !*model) {
		seterr(err, errlen, "no model given (expected a checkpoint directory or a preset)");
		return SRT_EINVAL;
	}
	if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
		if (!is_file(model, "config.json")) {
			seterr(err, errlen, "model directory '%s' has no config.json", model);
			return SRT_ENOENT;
		}
		snprintf(out, len, "%s", model);
		return 0;
	}
	if (strchr(model, '/') || strchr(model, '.')) {
		seterr(err, errlen, "model '%s': not a checkpoint directory", model);
		return SRT_ENOENT;
	}
	struct srt_model_config cfg;
	int rc = srt_model_config_load(model, &cfg, why, sizeof(why));
	if (rc) {
		seterr(err, errlen, "model '%s': %s", model, why);
		return rc;
	}
	if (!cache_dir)
		cache_dir = srt_engine_cache_dir(buf, sizeof(buf));
	if (snprintf(out, len, "%s/%s", cache_dir, model) >= (int)len) {
		seterr(err, errlen, "model cache path too long");
		return SRT_EINVAL;
	}
	if (is_file(out, "config.json"))
		return 0;
	if (srt_ck_mkdir_p(cache_dir)) {
		seterr(err, errlen, "cannot create model cache directory '%s': %s", cache_dir,
		       strerror(errno));
		return SRT_EIO;
	}
	/* generate into a private directory, then rename: concurrent users see all or nothing;
	 * private directories of generations that were killed are removed first */
	srt_ck_remove_stale_tmp(cache_dir, model);
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", out, (long)getpid());
	if (mkdir(tmp, 0755) && errno != EEXIST) {
		seterr(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
		return SRT_EIO;
	}
	if (!quiet)
		fprintf(stderr, "shadowrt: generating the synthetic '%s' checkpoint in %s\n", model,
			out);
	struct srt_ck_synth_opts o = {.seed = SRT_CK_SYNTH_SEED, .shard_bytes = 0};
	if ((rc = srt_ck_synth_write(&cfg, tmp, &o, why, sizeof(why)))) {
		rm_tree_flat(tmp);
		seterr(err, errlen, "generating '%s' in %s: %s", model, tmp, why);
		return rc;
	}
	if (rename(tmp, out)) {
		int en = errno;
		rm_tree_flat(tmp);
		if (is_file(out, "config.json")) /* somebody else won the race */
			return 0;
		seterr(err, errlen, "cannot rename '%s' to '%s': %s", tmp, out, strerror(en));
		return SRT_EIO;
	}
	return 0;
}

/* --- open / close ----------------------------------------------------------------------- */

static uint64_t remat_cost_cb(void *ctx, uint64_t t)
{
	return srt_remat_cost(ctx, t);
}

static void ck_warn(void *user, const char *msg)
{
	(void)user;
	srt_log(SRT_LOG_WARN, "exec", "%s", msg);
}

static int bf16_tensor(struct srt_engine *e, const char *name, int64_t rows, int64_t cols,
		       const uint16_t **out, char *err, size_t errlen)
{
	const struct srt_tensor *t = srt_ck_find(e->ck, name);
	if (!t || t->dtype != SRT_DT_BF16 || t->shape[0] != rows ||
	    (cols > 0 && (t->ndim != 2 || t->shape[1] != cols))) {
		seterr(err, errlen, "checkpoint %s: tensor '%s' missing or not bf16 [%lld%s%lld]",
		       e->path, name, (long long)rows, cols > 0 ? ", " : "",
		       (long long)(cols > 0 ? cols : 0));
		return SRT_ECORRUPT;
	}
	*out = t->data;
	return 0;
}

static int instantiate(struct srt_engine *e, enum srt_kind kind, const struct srt_rc_plugin *p,
		       const int32_t *layers, uint32_t n_layers, struct srt_rc_scope *scope,
		       struct srt_instance **out, char *err, size_t errlen)
{
	char why[1024];
	const struct srt_plugin_info *info;
	int rc = srt_registry_find(e->reg, kind, p->name, &info, why, sizeof(why));
	if (rc) {
		char dym[96];
		seterr(err, errlen, "%s plugin '%s'%s: %s", p->role, p->name,
		       srt_runtime_config_plugin_dym(e->reg, kind, p->name, dym, sizeof(dym)), why);
		return rc;
	}
	if ((rc = srt_runtime_config_check_options(&e->rc, p->section, info->desc, err, errlen)))
		return rc;
	scope->config = &e->rc;
	scope->section = p->section;
	struct srt_plugin_args args = {
		.struct_size = sizeof(args), .model = &e->model, .weights = &e->weights,
		.layers = layers, .n_layers = n_layers, .page_tokens = e->P,
		.profile = (uint32_t)e->profile, .option = srt_runtime_config_option_cb,
		.option_ctx = scope, .role = p->role,
	};
	if ((rc = srt_plugin_instantiate(info, e->host, &args, out, why, sizeof(why)))) {
		seterr(err, errlen, "%s plugin '%s': %s", p->role, p->name, why);
		return rc;
	}
	return 0;
}

/*
 * L1 pages: 64-byte aligned and zeroed, so the bytes a kernel never writes (entries of a page
 * not reached yet, padding) are defined when the tier manager copies whole pages to L2/L3.
 */
static int zero_alloc(void *ctx, uint32_t pool, size_t bytes, void **page)
{
	(void)ctx, (void)pool;
	void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (!p)
		return SRT_ENOMEM;
	memset(p, 0, bytes);
	*page = p;
	return 0;
}

static void zero_free(void *ctx, uint32_t pool, void *page, size_t bytes)
{
	(void)ctx, (void)pool, (void)bytes;
	free(page);
}

static const struct srt_rdx_allocator zero_allocator = {NULL, zero_alloc, zero_free};

static void wfp_log(void *user, int level, const char *msg)
{
	(void)user;
	srt_log(level, "exec", "%s", msg);
}

/* The cache identity of this engine (exec/identity.h), logged once at info level. */
static int compute_identity(struct srt_engine *e, const struct srt_pool_decl *pools, char *err,
			    size_t errlen)
{
	char why[1024], path[4200];
	struct srt_ck_wfp w;
	struct srt_ck_wfp_opts wo = {.threads = e->threads, .quiet = e->quiet, .log = wfp_log};
	int rc = srt_ck_weights_fingerprint(e->ck, &wo, &w, why, sizeof(why));
	if (rc) {
		seterr(err, errlen, "checkpoint %s: %s", e->path, why);
		return rc;
	}
	struct srt_ident b;
	srt_ident_begin(&b);
	snprintf(path, sizeof(path), "%s/config.json", e->path);
	if ((rc = srt_ident_add_model_config(&b, path, err, errlen))) {
		srt_ident_end(&b);
		return rc;
	}
	srt_ident_add_weights(&b, w.digest, w.bytes, w.n_files);
	srt_ident_add_u64(&b, "profile", (uint64_t)e->profile, srt_profile_name(e->profile));
	char pw[32];
	snprintf(pw, sizeof(pw), "%u tokens", e->P);
	srt_ident_add_u64(&b, "page", e->P, pw);
	for (int i = 0; i < e->n_attn && !rc; i++) {
		const struct attn_inst *a = &e->attn[i];
		rc = srt_ident_add_plugin(&b, "attention", a->ratio, a->inst->desc, &e->rc,
					  a->scope.section, pools + a->pool_off, a->pool_n);
	}
	if (!rc)
		rc = srt_ident_add_plugin(&b, "moe", -1, e->moe->desc, &e->rc, e->moe_scope.section,
					  NULL, 0);
	if (!rc)
		rc = srt_ident_add_plugin(&b, "residual", -1, e->res->desc, &e->rc,
					  e->res_scope.section, NULL, 0);
	srt_ident_end(&b);
	if (rc) {
		seterr(err, errlen, "cache identity: out of memory");
		return rc;
	}
	memcpy(e->identity, b.digest, sizeof(e->identity));
	memcpy(e->identity_hex, b.hex, sizeof(e->identity_hex));
	srt_log(SRT_LOG_INFO, "exec", "cache identity %s covers: %s; weights %s%s", b.hex,
		b.summary, w.hashed_files ? "hashed now" : "from the sidecar",
		w.sidecar[0] ? "" : " (not remembered)");
	if (w.sidecar[0])
		srt_log(SRT_LOG_INFO, "exec", "weights fingerprint sidecar: %s%s", w.sidecar,
			w.fallback ? " (checkpoint directory not writable)" : "");
	return 0;
}

static int open_plugins(struct srt_engine *e, char *err, size_t errlen)
{
	int rc, L = e->model.num_hidden_layers;
	struct srt_pool_decl pools[SRT_RDX_MAX_POOLS];
	uint32_t np = 0;

	e->all_layers = malloc(sizeof(int32_t) * (size_t)L);
	if (!e->all_layers)
		return SRT_ENOMEM;
	for (int l = 0; l < L; l++)
		e->all_layers[l] = l;
	/* attention: one instance per ratio, ascending, serving the main layers of that ratio */
	for (int l = 0; l < L; l++) {
		int r = srt_model_layer_ratio(&e->model, l), k;
		for (k = 0; k < e->n_attn && e->attn[k].ratio != r; k++)
			;
		if (k == e->n_attn) {
			if (e->n_attn == MAX_ATTN) {
				seterr(err, errlen, "model uses more than %d compress ratios", MAX_ATTN);
				return SRT_ENOTSUP;
			}
			e->attn[e->n_attn].ratio = r;
			e->attn[e->n_attn].layers = calloc((size_t)L, sizeof(int32_t));
			if (!e->attn[e->n_attn].layers)
				return SRT_ENOMEM;
			e->n_attn++;
		}
		e->attn[k].layers[e->attn[k].n_layers++] = l;
	}
	for (int i = 1; i < e->n_attn; i++) /* ratio order: pools in a stable order */
		for (int j = i; j > 0 && e->attn[j - 1].ratio > e->attn[j].ratio; j--) {
			struct attn_inst t = e->attn[j];
			e->attn[j] = e->attn[j - 1];
			e->attn[j - 1] = t;
		}
	for (int i = 0; i < e->n_attn; i++) {
		struct attn_inst *a = &e->attn[i];
		for (uint32_t k = 0; k < a->n_layers; k++)
			e->layer_attn[a->layers[k]] = i;
		const struct srt_rc_plugin *p = srt_runtime_config_attention(&e->rc, a->ratio);
		if (!p || !p->name) {
			seterr(err, errlen, "runtime config %s: no attention plugin for compress ratio "
			       "%d (set [attention] ratio.%d = <plugin>)", e->rc.source, a->ratio,
			       a->ratio);
			return SRT_EINVAL;
		}
		if ((rc = instantiate(e, SRT_KIND_ATTENTION, p, a->layers, a->n_layers, &a->scope,
				      &a->inst, err, errlen)))
			return rc;
		e->attn_vt[i] = a->inst->vtable;
		const struct srt_pool_decl *decl;
		uint32_t n;
		if ((rc = e->attn_vt[i]->declare_pools(a->inst->ctx, &decl, &n))) {
			seterr(err, errlen, "attention plugin '%s': declare_pools failed (%d)", p->name,
			       rc);
			return rc;
		}
		if (np + n > SRT_RDX_MAX_POOLS) {
			seterr(err, errlen, "attention plugins declare more than %u pools",
			       SRT_RDX_MAX_POOLS);
			return SRT_EINVAL;
		}
		a->pool_off = np;
		a->pool_n = n;
		for (uint32_t k = 0; k < n; k++) {
			memset(&pools[np], 0, sizeof(pools[np]));
			size_t sz = decl[k].struct_size < sizeof(pools[np]) ? decl[k].struct_size
									    : sizeof(pools[np]);
			memcpy(&pools[np], &decl[k], sz);
			np++;
		}
	}
	if ((rc = instantiate(e, SRT_KIND_MOE, &e->rc.moe, e->all_layers, (uint32_t)L,
			      &e->moe_scope, &e->moe, err, errlen)))
		return rc;
	e->moe_vt = e->moe->vtable;
	if ((rc = instantiate(e, SRT_KIND_RESIDUAL, &e->rc.residual, e->all_layers, (uint32_t)L,
			      &e->res_scope, &e->res, err, errlen)))
		return rc;
	e->res_vt = e->res->vtable;
	e->S = (int32_t)e->res_vt->n_streams(e->res->ctx);
	e->mixf = (int32_t)e->res_vt->mix_floats(e->res->ctx);
	if ((rc = compute_identity(e, pools, err, errlen)))
		return rc;

	/* the cache: the L1 budget split in proportion to page sizes */
	uint64_t budgets[SRT_RDX_MAX_POOLS], total_page = 0;
	for (uint32_t i = 0; i < np; i++) {
		uint32_t r = pools[i].ratio == SRT_RATIO_PAGE ? e->P : pools[i].ratio;
		total_page += (uint64_t)pools[i].n_layers * (e->P / (r ? r : 1)) *
			      pools[i].entry_bytes;
	}
	uint64_t l1 = e->rc.tiers[SRT_TIER_L1].budget;
	for (uint32_t i = 0; i < np; i++) {
		uint32_t r = pools[i].ratio == SRT_RATIO_PAGE ? e->P : pools[i].ratio;
		uint64_t pb = (uint64_t)pools[i].n_layers * (e->P / (r ? r : 1)) *
			      pools[i].entry_bytes;
		budgets[i] = l1 && total_page ? (uint64_t)((double)l1 * pb / total_page)
					      : SRT_RDX_UNBOUNDED;
	}
	/* rematerialization: every attention plugin must know read-only entries (ABI 1.1) */
	e->rg = (struct srt_remat_geom){.layers = (uint32_t)L, .window = 0, .page_tokens = e->P,
					.tail_pages = 0};
	/* e->remat holds !opts->no_remat here */
	for (int i = 0; i < e->n_attn; i++)
		if (e->attn[i].inst->desc->abi_minor < 1)
			e->remat = 0;
	for (uint32_t i = 0; i < np; i++) {
		if (pools[i].retention != SRT_RETAIN_TAIL)
			continue;
		uint32_t k = (pools[i].tail_tokens + e->P - 1) / e->P;
		if (k > e->rg.tail_pages)
			e->rg.tail_pages = k;
		/* window pools: ratio 1, or a ring of P / ratio entries per page (ratio < P); the
		 * carry state has one entry per page */
		if (pools[i].ratio != SRT_RATIO_PAGE && pools[i].ratio < e->P &&
		    pools[i].tail_tokens > e->rg.window)
			e->rg.window = pools[i].tail_tokens;
	}
	if (!e->rg.window || !e->rg.tail_pages)
		e->remat = 0;
	if (e->remat)
		e->rpol = (struct srt_rdx_remat_policy){.cost = remat_cost_cb, .ctx = &e->rg,
							.token_cost = e->rg.layers};
	const struct srt_rdx_allocator *alloc = e->page_alloc ? e->page_alloc : &zero_allocator;
	if (!e->page_alloc && e->rc.l1_huge) {
		if (!(e->l1 = srt_l1_pages_create(1))) {
			seterr(err, errlen, "out of memory (L1 page slabs)");
			return SRT_ENOMEM;
		}
		alloc = srt_l1_pages_allocator(e->l1);
	}
	struct srt_rdx_config cc = {.page_tokens = e->P, .budgets = budgets,
				    .alloc = alloc,
				    .mem = SRT_MEM_HOST, .remat = e->remat};
	char why[1024];
	if (e->use_tiers && (e->rc.tiers[SRT_TIER_L2].enabled || e->rc.tiers[SRT_TIER_L3].enabled)) {
		/* the cache identity covers everything that shapes a page's bytes (identity.h);
		 * the manager adds the pools and the page size again */
		char ident[128];
		snprintf(ident, sizeof(ident), "shadowrt/cache-identity/v1 %s", e->identity_hex);
		struct srt_tier_stack_opts so = {
			.rc = &e->rc, .dirs = e->rc.plugin_dirs, .ndirs = (size_t)e->rc.n_plugin_dirs,
			.pools = pools, .n_pools = np, .page_tokens = e->P, .model_ident = ident,
		};
		if ((rc = srt_tier_stack_open(&so, &e->tiers, err, errlen)))
			return rc;
		e->tmgr = srt_tier_stack_manager(e->tiers);
		cc.hooks = srt_tmgr_hooks(e->tmgr);
	}
	if ((rc = srt_rdx_cache_create(&cc, pools, np, &e->cache, why, sizeof(why)))) {
		seterr(err, errlen, "ShadowRadix cache: %s", why);
		return rc;
	}
	if (e->tmgr)
		srt_tmgr_attach(e->tmgr, e->cache);
	e->n_pools = np;
	return 0;
}

int srt_engine_open(const struct srt_engine_opts *opts, struct srt_engine **out, char *err,
		    size_t errlen)
{
	static const struct srt_engine_opts none = {.threads = -1, .profile = -1};
	char why[1024];
	int rc;
	if (!opts)
		opts = &none;
	*out = NULL;
	struct srt_engine *e = calloc(1, sizeof(*e));
	if (!e) {
		seterr(err, errlen, "out of memory");
		return SRT_ENOMEM;
	}
	if ((rc = srt_runtime_config_load(opts->config_path, &e->rc, why, sizeof(why)))) {
		seterr(err, errlen, "runtime config %s: %s",
		       opts->config_path ? opts->config_path : "<built-in>", why);
		goto fail;
	}
	e->profile = opts->profile >= 0 ? opts->profile : e->rc.profile;
	e->threads = opts->threads >= 0 ? opts->threads : e->rc.threads;
	e->chunk = opts->chunk > 0 ? opts->chunk : (e->rc.prefill_chunk > 0 ? e->rc.prefill_chunk
									   : 256);
	e->P = e->rc.page_size ? e->rc.page_size : SRT_RDX_DEFAULT_PAGE;
	e->use_tiers = opts->tiers;
	e->quiet = opts->quiet;
	e->page_alloc = opts->page_alloc;
	e->remat = !opts->no_remat;
	if ((rc = srt_engine_model_dir(opts->model ? opts->model : e->rc.model, opts->model_cache,
				       opts->quiet, e->path, sizeof(e->path), err, errlen)))
		goto fail;
	if ((rc = srt_model_config_load(e->path, &e->model, why, sizeof(why)))) {
		seterr(err, errlen, "model %s: %s", e->path, why);
		goto fail;
	}
	if ((rc = srt_runtime_config_check_model(&e->rc, &e->model, why, sizeof(why)))) {
		seterr(err, errlen, "runtime config %s vs model %s: %s", e->rc.source, e->path, why);
		goto fail;
	}
	if ((rc = srt_ck_open(e->path, &e->ck, why, sizeof(why)))) {
		seterr(err, errlen, "checkpoint %s: %s", e->path, why);
		goto fail;
	}
	if ((rc = srt_ck_dsv4_check(e->ck, &e->model, ck_warn, NULL, NULL, why, sizeof(why)))) {
		seterr(err, errlen, "checkpoint %s: %s", e->path, why);
		goto fail;
	}
	if (e->rc.weights_huge) {
		srt_ck_to_hugepages(e->ck, why, sizeof(why));
		if (!opts->quiet)
			srt_log(SRT_LOG_INFO, "exec", "%s", why);
	}
	srt_ck_weights(e->ck, &e->weights);
	e->d = e->model.hidden_size;
	e->vocab = e->model.vocab_size;
	if ((rc = bf16_tensor(e, "embed.weight", e->vocab, e->d, &e->embed, err, errlen)) ||
	    (rc = bf16_tensor(e, e->model.tie_word_embeddings ? "embed.weight" : "head.weight",
			      e->vocab, e->d, &e->head, err, errlen)) ||
	    (rc = bf16_tensor(e, "norm.weight", e->d, 0, &e->norm_w, err, errlen)))
		goto fail;
	if ((rc = srt_host_create(e->threads, &e->host, why, sizeof(why)))) {
		seterr(err, errlen, "plugin host: %s", why);
		goto fail;
	}
	e->threads = e->host->nthreads;
	if ((rc = srt_registry_open(&e->reg, e->rc.plugin_dirs, (size_t)e->rc.n_plugin_dirs,
				    e->host, 0))) {
		seterr(err, errlen, "plugin registry: cannot open (code %d)", rc);
		goto fail;
	}
	if ((rc = open_plugins(e, err, errlen))) {
		if (rc == SRT_ENOMEM && err && !*err)
			seterr(err, errlen, "out of memory");
		goto fail;
	}
	if (e->remat && e->tmgr) /* TAIL pages in L2/L3 at resume points only; else rebuilt */
		srt_tmgr_set_remat(e->tmgr, &e->rpol, 1);
	*out = e;
	return 0;
fail:
	srt_engine_close(e);
	return rc;
}

void srt_engine_close(struct srt_engine *e)
{
	if (!e)
		return;
	while (e->live)
		srt_engine_seq_free(e->live);
	srt_rdx_cache_destroy(e->cache);
	srt_tier_stack_close(e->tiers);
	srt_l1_pages_destroy(e->l1); /* after the cache and the tiers: they free pages */
	for (int i = 0; i < e->n_attn; i++) {
		srt_instance_destroy(e->attn[i].inst);
		free(e->attn[i].layers);
	}
	srt_instance_destroy(e->moe);
	srt_instance_destroy(e->res);
	free(e->all_layers);
	srt_registry_close(e->reg);
	srt_host_destroy(e->host);
	srt_ck_close(e->ck);
	srt_runtime_config_free(&e->rc);
	free(e);
}

const struct srt_model_config *srt_engine_model(const struct srt_engine *e) { return &e->model; }
const struct srt_runtime_config *srt_engine_runtime(const struct srt_engine *e) { return &e->rc; }
struct srt_rdx_cache *srt_engine_cache(struct srt_engine *e) { return e->cache; }
struct srt_tmgr *srt_engine_tiers(struct srt_engine *e) { return e->tmgr; }

const char *srt_engine_tier_describe(const struct srt_engine *e, int level)
{
	return e->tiers ? srt_tier_stack_describe(e->tiers, level) : NULL;
}
const char *srt_engine_model_path(const struct srt_engine *e) { return e->path; }
const uint8_t *srt_engine_identity(const struct srt_engine *e) { return e->identity; }
int srt_engine_profile(const struct srt_engine *e) { return e->profile; }
int srt_engine_threads(const struct srt_engine *e) { return e->threads; }
long long srt_engine_pool_sleeps(const struct srt_engine *e) { return srt_host_pool_sleeps(e->host); }
void srt_engine_pool_timing(const struct srt_engine *e, int on) { srt_host_pool_timing(e->host, on); }
long long srt_engine_pool_one_thread_ns(const struct srt_engine *e)
{
	return srt_host_pool_one_thread_ns(e->host);
}
int srt_engine_chunk(const struct srt_engine *e) { return e->chunk; }

void srt_engine_set_chunk(struct srt_engine *e, int chunk)
{
	assert(chunk >= 1);
	e->chunk = chunk;
}

/*
 * Where a decode step reads a tensor: the profile phase (ops/prof.h) whose work streams it,
 * SRT_PROF_COUNT for the engine's own (head, final norm, hc_head), or -1 for none of a step's
 * reads (the embedding: one row per token; the hash tables; the MTP block). *num / *den: the
 * share of steps that read it. Routed experts: num_experts_per_tok of n_routed_experts per
 * layer. Compressors (`.compressor.`, the KV and indexer ones): the attention plugins project
 * a compressor's rows once per group of DECODE_COMP_GROUP tokens (SRT_ATTN_CG of
 * plugins/attention/common/attn.h), so one decode step in that many reads them.
 */
#define DECODE_COMP_GROUP 4

static int decode_weight_phase(const struct srt_engine *e, const char *name, uint64_t *num,
			       uint64_t *den)
{
	*num = *den = 1;
	if (!strcmp(name, "embed.weight") || !strncmp(name, "mtp.", 4) || strstr(name, "tid2eid"))
		return -1;
	if (strstr(name, ".ffn.experts.")) {
		*num = (uint64_t)e->model.num_experts_per_tok;
		*den = (uint64_t)e->model.n_routed_experts;
		return SRT_PROF_MOE_EXPERTS;
	}
	if (strstr(name, ".ffn.shared_experts."))
		return SRT_PROF_MOE_SHARED;
	if (strstr(name, ".ffn.gate.") || strstr(name, ".ffn_norm."))
		return SRT_PROF_MOE_ROUTE;
	if (strstr(name, ".attn.wo_a.") || strstr(name, ".attn.wo_b."))
		return SRT_PROF_ATTN_OUT;
	if (strstr(name, ".compressor.")) {
		*den = DECODE_COMP_GROUP;
		return SRT_PROF_ATTN_PROJ;
	}
	if (strstr(name, ".attn.") || strstr(name, ".attn_norm."))
		return SRT_PROF_ATTN_PROJ;
	if (strstr(name, ".hc_attn_") || strstr(name, ".hc_ffn_"))
		return SRT_PROF_RESIDUAL;
	return SRT_PROF_COUNT;
}

void srt_engine_decode_weight_phases(const struct srt_engine *e, uint64_t *bytes)
{
	memset(bytes, 0, (SRT_PROF_COUNT + 1) * sizeof(bytes[0]));
	size_t n = srt_ck_count(e->ck);
	for (size_t i = 0; i < n; i++) {
		const struct srt_tensor *t = srt_ck_tensor(e->ck, i);
		uint64_t num, den;
		const int p = decode_weight_phase(e, t->name, &num, &den);
		if (p >= 0)
			bytes[p] += t->nbytes * num / den;
	}
}

uint64_t srt_engine_decode_weight_bytes(const struct srt_engine *e)
{
	uint64_t bytes[SRT_PROF_COUNT + 1], sum = 0;
	srt_engine_decode_weight_phases(e, bytes);
	for (int p = 0; p <= SRT_PROF_COUNT; p++)
		sum += bytes[p];
	return sum;
}

/* --- sequences -------------------------------------------------------------------------- */

static int remat_run(struct srt_engine *e, struct srt_seq *s, uint64_t t, char *err,
		     size_t errlen);


static int check_tokens(const struct srt_engine *e, const int32_t *t, uint64_t n, char *err,
			size_t errlen)
{
	for (uint64_t i = 0; i < n; i++)
		if (t[i] < 0 || t[i] >= e->vocab) {
			seterr(err, errlen, "token %d at index %llu is outside the vocabulary [0, %d)",
			       t[i], (unsigned long long)i, e->vocab);
			return SRT_EINVAL;
		}
	return 0;
}

/* Link s into the engine's list of live sequences. */
static void seq_link(struct srt_engine *e, struct srt_seq *s)
{
	s->next = e->live;
	if (e->live)
		e->live->prev = s;
	e->live = s;
}

int srt_engine_seq_begin(struct srt_engine *e, const int32_t *tokens, uint64_t n, int use_cache,
			 struct srt_seq **out, uint64_t *hit, char *err, size_t errlen)
{
	char why[512];
	int rc;
	*out = NULL;
	if (n == 0) {
		seterr(err, errlen, "empty prompt");
		return SRT_EINVAL;
	}
	if ((rc = check_tokens(e, tokens, n, err, errlen)))
		return rc;
	struct srt_seq *s = calloc(1, sizeof(*s));
	if (!s || !(s->prompt = malloc(sizeof(int32_t) * n))) {
		free(s);
		seterr(err, errlen, "out of memory");
		return SRT_ENOMEM;
	}
	memcpy(s->prompt, tokens, sizeof(int32_t) * n);
	s->n_prompt = n;
	s->e = e;
	s->id = ++e->next_seq_id;
	uint64_t h = 0;
	if (e->tmgr) {
		/* L1 match, then L2/L3: the loads run in the tier manager's prefetch thread until
		 * srt_engine_seq_wait (called by whatever first needs the pages) */
		if ((rc = srt_tmgr_req_start(e->tmgr, tokens, use_cache ? n - 1 : 0, &s->treq,
					     &s->thit, why, sizeof(why)))) {
			seterr(err, errlen, "ShadowRadix/tier start: %s", why);
			srt_tmgr_req_free(s->treq);
			free(s->prompt);
			free(s);
			return rc;
		}
		s->loading = 1;
		h = s->thit.l1_tokens + s->thit.l2_tokens + s->thit.l3_tokens;
		if (s->thit.remat_tokens > h)
			h = s->thit.remat_tokens;
	} else {
		uint64_t rt = 0;
		if ((rc = srt_rdx_req_start_remat(e->cache, tokens, use_cache ? n - 1 : 0,
						  e->remat ? &e->rpol : NULL, &s->req, &h, &rt, why,
						  sizeof(why)))) {
			seterr(err, errlen, "ShadowRadix start: %s", why);
			free(s->prompt);
			free(s);
			return rc;
		}
		if (rt) {
			rc = remat_run(e, s, rt, err, errlen);
			srt_rdx_req_remat_done(s->req, rc == 0);
			if (rc) {
				srt_rdx_req_free(s->req);
				free(s->prompt);
				free(s);
				return rc;
			}
			s->remat = rt;
			s->remat_cost = srt_remat_cost(&e->rg, rt);
		}
		s->thit.l1_tokens = h;
	}
	s->hit = s->done = h;
	seq_link(e, s);
	/* nothing to load (an L1 hit, perhaps rematerialized): finish the start now */
	if (s->loading && srt_tmgr_req_ready(s->treq) &&
	    (rc = srt_engine_seq_wait(s, &h, err, errlen))) {
		srt_engine_seq_free(s);
		return rc;
	}
	if (hit)
		*hit = h;
	*out = s;
	return 0;
}

int srt_engine_seq_wait(struct srt_seq *s, uint64_t *hit, char *err, size_t errlen)
{
	char why[512];
	struct srt_engine *e = s->e;
	int rc;
	if (s->broken) {
		seterr(err, errlen, "sequence %llu is broken by an earlier error",
		       (unsigned long long)s->id);
		return SRT_EINVAL;
	}
	if (!s->loading) {
		if (hit)
			*hit = s->hit;
		return 0;
	}
	s->loading = 0;
	e->waits += !srt_tmgr_req_ready(s->treq);
	/* the loads are verified and committed here; a failed one falls back to the longest
	 * prefix the tiers still hold (tier/manager.h), so the hit may move */
	if ((rc = srt_tmgr_req_wait(s->treq, &s->thit, why, sizeof(why)))) {
		seterr(err, errlen, "ShadowRadix/tier wait: %s", why);
		s->broken = 1;
		return rc;
	}
	s->req = srt_tmgr_req_rdx(s->treq);
	uint64_t h = srt_rdx_req_len(s->req);
	if (s->thit.remat_tokens) {
		/* the TAIL pages before the hit: pending pages (an L1 rematerialization) or
		 * pages the tier load placed in the tree unfilled (a lower-tier one) */
		uint64_t rt = s->thit.remat_tokens;
		int pending = srt_rdx_req_remat_pending(s->req) != 0;
		rc = rt == h ? remat_run(e, s, rt, err, errlen) : SRT_EINVAL;
		if (rc == SRT_EINVAL && rt != h)
			seterr(err, errlen, "tier manager: rematerialization at %llu, hit %llu",
			       (unsigned long long)rt, (unsigned long long)h);
		if (pending)
			srt_rdx_req_remat_done(s->req, rc == 0);
		else if (rc)
			srt_rdx_req_drop_tail(s->req);
		if (rc) {
			s->broken = 1;
			return rc;
		}
		s->remat = rt;
		s->remat_cost = s->thit.remat_cost;
	}
	s->hit = s->done = h;
	if (hit)
		*hit = h;
	return 0;
}

int srt_engine_seq_start(struct srt_engine *e, const int32_t *tokens, uint64_t n, int use_cache,
			 struct srt_seq **out, uint64_t *hit, char *err, size_t errlen)
{
	struct srt_seq *s;
	int rc = srt_engine_seq_begin(e, tokens, n, use_cache, &s, NULL, err, errlen);
	if (rc)
		return rc;
	if ((rc = srt_engine_seq_wait(s, hit, err, errlen))) {
		srt_engine_seq_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int srt_seq_loading(const struct srt_seq *s) { return s->loading; }

uint64_t srt_engine_seq_waits(const struct srt_engine *e) { return e->waits; }

uint64_t srt_seq_len(const struct srt_seq *s)
{
	return s->loading ? s->hit : srt_rdx_req_len(s->req);
}
uint64_t srt_seq_pending(const struct srt_seq *s) { return s->n_prompt - s->done; }
uint64_t srt_seq_hit(const struct srt_seq *s) { return s->hit; }

uint64_t srt_seq_remat(const struct srt_seq *s, uint64_t *token_layers)
{
	if (token_layers)
		*token_layers = s->remat_cost;
	return s->remat;
}

void srt_seq_hit_tiers(const struct srt_seq *s, uint64_t out[3])
{
	out[0] = s->thit.l1_tokens;
	out[1] = s->thit.l2_tokens;
	out[2] = s->thit.l3_tokens;
}

int srt_engine_seq_finish(struct srt_seq *s, uint64_t *cached, char *err, size_t errlen)
{
	char why[512];
	if (s->finished) {
		seterr(err, errlen, "sequence %llu already finished", (unsigned long long)s->id);
		return SRT_EINVAL;
	}
	if (s->loading) { /* its loaded pages are inserted like computed ones */
		int wr = srt_engine_seq_wait(s, NULL, err, errlen);
		if (wr)
			return wr;
	}
	int rc = s->treq ? srt_tmgr_req_finish(s->treq, cached, why, sizeof(why))
			 : srt_rdx_req_finish(s->req, cached, why, sizeof(why));
	s->finished = 1;
	if (rc)
		seterr(err, errlen, "ShadowRadix finish: %s", why);
	return rc;
}

void srt_engine_seq_free(struct srt_seq *s)
{
	if (!s)
		return;
	struct srt_engine *e = s->e;
	if (s->treq)
		srt_tmgr_req_free(s->treq);
	else
		srt_rdx_req_free(s->req);
	if (s->prev)
		s->prev->next = s->next;
	else
		e->live = s->next;
	if (s->next)
		s->next->prev = s->prev;
	free(s->prompt);
	free(s);
}

/* --- the forward pass ------------------------------------------------------------------- */

struct head_job {
	const struct srt_weight *w;
	const float *y;
	size_t m, d;
	float *logits;
	size_t vocab;
};

#define HEAD_BLOCK 8 /* vocabulary rows per head task: threads split at multiples of 8, which
		      * keeps srt_gemm's full tiles (results never depend on the split) */

/* tasks [begin, end) = vocabulary rows [begin, end) * HEAD_BLOCK, the last one clipped */
static void head_range(void *ctx, int64_t begin, int64_t end, int tid)
{
	struct head_job *j = ctx;
	size_t n0 = (size_t)begin * HEAD_BLOCK, n1 = (size_t)end * HEAD_BLOCK;
	(void)tid;
	if (n1 > j->vocab)
		n1 = j->vocab;
	srt_gemm_exact(j->w, j->y, j->m, j->d, j->logits, j->vocab, n0, n1);
}

/* rows of X[n_rows][S][d] -> logits[n_sel][vocab] for the selected rows sel[0..n_sel) */
static int head(struct srt_engine *e, const float *X, const int32_t *sel, int32_t n_sel,
		float *logits, char *err, size_t errlen)
{
	size_t d = (size_t)e->d, sd = (size_t)e->S * d;
	float *Xs = calloc(sd * (size_t)n_sel, sizeof(float));
	float *y = malloc(sizeof(float) * d * (size_t)n_sel);
	int rc = 0;
	if (!Xs || !y) {
		seterr(err, errlen, "out of memory (head, %d rows)", n_sel);
		rc = SRT_ENOMEM;
		goto out;
	}
	for (int32_t i = 0; i < n_sel; i++)
		memcpy(Xs + (size_t)i * sd, X + (size_t)sel[i] * sd, sizeof(float) * sd);
	if ((rc = e->res_vt->head(e->res->ctx, n_sel, Xs, y))) {
		seterr(err, errlen, "residual plugin '%s': head failed (%d)", e->res->desc->name, rc);
		goto out;
	}
	int ref = e->profile == SRT_PROFILE_REFERENCE;
	float eps = (float)e->model.rms_norm_eps;
	for (int32_t i = 0; i < n_sel; i++) {
		float *r = y + (size_t)i * d;
		if (ref)
			srt_round_bf16_n(r, d);
		srt_rmsnorm_bf16w(r, r, d, e->norm_w, eps);
		if (ref)
			srt_round_bf16_n(r, d);
	}
	struct srt_weight w = {.type = SRT_WT_BF16, .rows = (size_t)e->vocab, .cols = d,
			       .data = e->head, .scales = NULL};
	struct head_job j = {.w = &w, .y = y, .m = (size_t)n_sel, .d = d, .logits = logits,
			     .vocab = (size_t)e->vocab};
	e->host->parallel_for(e->host, (e->vocab + HEAD_BLOCK - 1) / HEAD_BLOCK, head_range, &j);
out:
	free(Xs);
	free(y);
	return rc;
}

int srt_engine_forward(struct srt_engine *e, struct srt_seq *const *seqs, uint32_t n,
		       const int32_t *const *toks, const int32_t *ntoks, float *logits, int all,
		       char *err, size_t errlen)
{
	char why[1024];
	int rc = 0;
	uint32_t np = e->n_pools, P = e->P;
	int32_t rows = 0, row = 0, n_sel = 0;
	uint32_t extended = 0;
	size_t d = (size_t)e->d, sd = (size_t)e->S * d;

	for (uint32_t i = 0; i < n; i++) {
		if (seqs[i]->finished || seqs[i]->broken) {
			seterr(err, errlen, "sequence %llu is %s", (unsigned long long)seqs[i]->id,
			       seqs[i]->finished ? "finished" : "broken by an earlier error");
			return SRT_EINVAL;
		}
		if (ntoks[i] < 1) {
			seterr(err, errlen, "sequence %llu: %d tokens in a forward call",
			       (unsigned long long)seqs[i]->id, ntoks[i]);
			return SRT_EINVAL;
		}
		if (seqs[i]->loading) {
			/* the pages are needed now: wait for the sequence's tier loads. The caller
			 * placed toks after the hit srt_engine_seq_begin gave; a load that failed
			 * moved it, and those tokens would land at the wrong position */
			uint64_t was = seqs[i]->hit, got;
			if ((rc = srt_engine_seq_wait(seqs[i], &got, err, errlen)))
				return rc;
			if (got != was) {
				seterr(err, errlen, "sequence %llu: its tier load fell back from a hit of "
				       "%llu to %llu tokens; call srt_engine_seq_wait before forward to "
				       "learn the hit", (unsigned long long)seqs[i]->id,
				       (unsigned long long)was, (unsigned long long)got);
				return SRT_EINVAL;
			}
		}
		if ((rc = check_tokens(e, toks[i], (uint64_t)ntoks[i], err, errlen)))
			return rc;
		uint64_t end = srt_rdx_req_len(seqs[i]->req) + (uint64_t)ntoks[i];
		if (e->model.max_position_embeddings > 0 &&
		    end > (uint64_t)e->model.max_position_embeddings) {
			seterr(err, errlen, "sequence %llu: %llu tokens exceed max_position_embeddings "
			       "%lld", (unsigned long long)seqs[i]->id, (unsigned long long)end,
			       (long long)e->model.max_position_embeddings);
			return SRT_EINVAL;
		}
		rows += ntoks[i];
	}
	int64_t *pos = calloc(n, sizeof(int64_t));
	struct srt_seq_view *views = calloc((size_t)n * (size_t)(e->n_attn + 1), sizeof(*views));
	struct srt_page_table *pts = calloc((size_t)n * np + 1, sizeof(*pts));
	void ***bufs = calloc((size_t)n * np + 1, sizeof(void **));
	float *h = malloc(sizeof(float) * d * (size_t)rows);
	float *X = malloc(sizeof(float) * sd * (size_t)rows);
	float *u = malloc(sizeof(float) * d * (size_t)rows);
	float *f = malloc(sizeof(float) * d * (size_t)rows);
	float *mix = malloc(sizeof(float) * ((size_t)e->mixf * (size_t)rows + 1));
	int32_t *sel = calloc((size_t)rows, sizeof(int32_t));
	if (!pos || !views || !pts || !bufs || !h || !X || !u || !f || !mix || !sel) {
		seterr(err, errlen, "out of memory (forward of %d rows)", rows);
		rc = SRT_ENOMEM;
		goto out;
	}
	/* extend every request (allocates the pages of the new tokens) */
	for (uint32_t i = 0; i < n; i++, extended++) {
		pos[i] = (int64_t)srt_rdx_req_len(seqs[i]->req);
		if ((rc = srt_rdx_req_extend(seqs[i]->req, toks[i], (uint64_t)ntoks[i], why,
					     sizeof(why)))) {
			seterr(err, errlen, "sequence %llu: ShadowRadix extend by %d tokens: %s",
			       (unsigned long long)seqs[i]->id, ntoks[i], why);
			goto out;
		}
	}
	/* page tables, after every extend (an extend may evict) */
	for (uint32_t i = 0; i < n; i++) {
		uint64_t len = srt_rdx_req_len(seqs[i]->req);
		uint32_t npg = (uint32_t)((len + P - 1) / P);
		for (uint32_t p = 0; p < np; p++) {
			void **b = malloc(sizeof(void *) * (npg ? npg : 1));
			bufs[(size_t)i * np + p] = b;
			if (!b) {
				seterr(err, errlen, "out of memory (page tables)");
				rc = SRT_ENOMEM;
				goto out;
			}
			if ((rc = srt_rdx_req_page_table(seqs[i]->req, p, b, npg,
							 &pts[(size_t)i * np + p]))) {
				seterr(err, errlen, "sequence %llu: page table of pool %u failed",
				       (unsigned long long)seqs[i]->id, p);
				goto out;
			}
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		for (int k = 0; k <= e->n_attn; k++) {
			struct srt_seq_view *v = &views[(size_t)k * n + i];
			v->seq_id = seqs[i]->id;
			v->pos = pos[i];
			v->n_tokens = ntoks[i];
			v->first_row = row;
			v->token_ids = toks[i];
			if (k < e->n_attn) {
				v->pools = &pts[(size_t)i * np + e->attn[k].pool_off];
				v->n_pools = e->attn[k].pool_n;
			}
		}
		for (int32_t t = 0; t < ntoks[i]; t++) {
			const uint16_t *er = e->embed + (size_t)toks[i][t] * d;
			srt_bf16_to_f32_n(er, h + (size_t)(row + t) * d, d);
		}
		row += ntoks[i];
	}
	if ((rc = e->res_vt->embed(e->res->ctx, rows, h, X))) {
		seterr(err, errlen, "residual plugin '%s': embed failed (%d)", e->res->desc->name, rc);
		goto out;
	}
	for (int32_t l = 0; l < e->model.num_hidden_layers; l++) {
		int k = e->layer_attn[l];
		struct srt_batch ba = {.struct_size = sizeof(ba), .n_seqs = n,
				       .seqs = &views[(size_t)k * n], .n_rows = rows,
				       .mem = SRT_MEM_HOST};
		struct srt_batch bm = ba;
		bm.seqs = &views[(size_t)e->n_attn * n];
		const char *stage = "pre(attn)";
		if ((rc = e->res_vt->pre(e->res->ctx, l, SRT_SUBLAYER_ATTN, rows, X, u, mix)))
			goto plugin_fail;
		why[0] = 0;
		if ((rc = e->attn_vt[k]->forward(e->attn[k].inst->ctx, l, &ba, u, f, why,
						 sizeof(why)))) {
			seterr(err, errlen, "layer %d: attention plugin '%s': %s (%d)", l,
			       e->attn[k].inst->desc->name, why[0] ? why : "forward failed", rc);
			goto out;
		}
		stage = "post(attn)";
		if ((rc = e->res_vt->post(e->res->ctx, l, SRT_SUBLAYER_ATTN, rows, f, mix, X)))
			goto plugin_fail;
		stage = "pre(ffn)";
		if ((rc = e->res_vt->pre(e->res->ctx, l, SRT_SUBLAYER_FFN, rows, X, u, mix)))
			goto plugin_fail;
		why[0] = 0;
		if ((rc = e->moe_vt->forward(e->moe->ctx, l, &bm, u, f, why, sizeof(why)))) {
			seterr(err, errlen, "layer %d: moe plugin '%s': %s (%d)", l,
			       e->moe->desc->name, why[0] ? why : "forward failed", rc);
			goto out;
		}
		stage = "post(ffn)";
		if ((rc = e->res_vt->post(e->res->ctx, l, SRT_SUBLAYER_FFN, rows, f, mix, X)))
			goto plugin_fail;
		continue;
plugin_fail:
		seterr(err, errlen, "layer %d: residual plugin '%s': %s failed (%d)", l,
		       e->res->desc->name, stage, rc);
		goto out;
	}
	if (logits) {
		row = 0;
		for (uint32_t i = 0; i < n; i++) {
			if (all)
				for (int32_t t = 0; t < ntoks[i]; t++)
					sel[n_sel++] = row + t;
			else
				sel[n_sel++] = row + ntoks[i] - 1;
			row += ntoks[i];
		}
		if ((rc = head(e, X, sel, n_sel, logits, err, errlen)))
			goto out;
	}
	/* cache bookkeeping: share completed pages, drop window pages out of every window */
	for (uint32_t i = 0; i < n; i++) {
		uint64_t len = srt_rdx_req_len(seqs[i]->req);
		if (len / P > (uint64_t)pos[i] / P &&
		    (rc = seqs[i]->treq ? srt_tmgr_req_commit(seqs[i]->treq, NULL, why, sizeof(why))
					: srt_rdx_req_commit(seqs[i]->req, NULL, why, sizeof(why)))) {
			seterr(err, errlen, "sequence %llu: ShadowRadix commit: %s",
			       (unsigned long long)seqs[i]->id, why);
			goto out;
		}
		if ((rc = srt_rdx_req_release_window(seqs[i]->req, NULL, why, sizeof(why)))) {
			seterr(err, errlen, "sequence %llu: ShadowRadix release_window: %s",
			       (unsigned long long)seqs[i]->id, why);
			goto out;
		}
	}
out:
	if (rc)
		for (uint32_t i = 0; i < extended; i++)
			seqs[i]->broken = 1;
	if (bufs)
		for (size_t i = 0; i < (size_t)n * np; i++)
			free(bufs[i]);
	free(bufs);
	free(pts);
	free(views);
	free(pos);
	free(h);
	free(X);
	free(u);
	free(f);
	free(mix);
	free(sel);
	return rc;
}

/*
 * Rebuild the TAIL pages (window KV, carry state) of the pending pages before t of a request
 * positioned at t by srt_rdx_req_start_remat: the trapezoid of core/radix/remat.h. Layer l
 * runs attention over positions [lo(l), t) (the plugins read the compressed entries of [0, t)
 * from the cache and never write them, start the carry empty at lo(l) and skip the attention
 * of rows whose window reaches before lo(l)); its residual and MoE run only over [lo(l + 1), t),
 * the rows the next layer reads. Window and carry pages before the pending ones are scratch.
 */
static int remat_run(struct srt_engine *e, struct srt_seq *s, uint64_t t, char *err,
		     size_t errlen)
{
	char why[1024];
	int rc = 0;
	const struct srt_remat_geom *g = &e->rg;
	uint32_t L = g->layers, np = e->n_pools, P = e->P, npg = (uint32_t)(t / P);
	uint64_t s0 = srt_remat_lo(g, t, 0);
	int32_t rows = (int32_t)(t - s0);
	size_t d = (size_t)e->d, sd = (size_t)e->S * d, mf = (size_t)e->mixf;
	const int32_t *tok = srt_rdx_req_tokens(s->req);
	struct srt_rdx_pool_stats st;
	struct srt_page_table *pts = calloc(np, sizeof(*pts));
	void **bufs = calloc((size_t)np * npg + 1, sizeof(void *));
	uint8_t *scr = calloc((size_t)np * npg + 1, 1); /* 1: bufs entry is our scratch page */
	uint64_t *ro = calloc(np, sizeof(uint64_t));
	struct srt_seq_cached *cached = calloc((size_t)e->n_attn, sizeof(*cached));
	const struct srt_seq_cached **cptr = calloc((size_t)e->n_attn, sizeof(*cptr));
	float *h = malloc(sizeof(float) * d * (size_t)rows);
	float *X = malloc(sizeof(float) * sd * (size_t)rows);
	float *u = malloc(sizeof(float) * d * (size_t)rows);
	float *f = malloc(sizeof(float) * d * (size_t)rows);
	float *mix = malloc(sizeof(float) * (mf * (size_t)rows + 1));
	if (!pts || !bufs || !scr || !ro || !cached || !cptr || !h || !X || !u || !f || !mix) {
		seterr(err, errlen, "out of memory (rematerialization of %d rows)", rows);
		rc = SRT_ENOMEM;
		goto out;
	}
	for (uint32_t p = 0; p < np; p++) {
		void **b = bufs + (size_t)p * npg;
		srt_rdx_pool_stats(e->cache, p, &st);
		if ((rc = srt_rdx_req_page_table(s->req, p, b, npg, &pts[p]))) {
			seterr(err, errlen, "sequence %llu: page table of pool %u failed",
			       (unsigned long long)s->id, p);
			goto out;
		}
		if (st.retention == SRT_RETAIN_ALL) {
			ro[p] = t / st.ratio;
			continue;
		}
		/* window / carry pages of the trapezoid before the pages being rebuilt */
		for (uint32_t v = (uint32_t)(s0 / P); v < npg; v++) {
			if (b[v])
				continue;
			if (zero_alloc(NULL, p, (size_t)st.page_bytes, &b[v])) {
				seterr(err, errlen, "out of memory (rematerialization scratch)");
				rc = SRT_ENOMEM;
				goto out;
			}
			scr[(size_t)p * npg + v] = 1;
		}
	}
	for (int k = 0; k < e->n_attn; k++) {
		cached[k] = (struct srt_seq_cached){.struct_size = sizeof(cached[k]),
						    .flags = SRT_SEQ_REMAT,
						    .ro_entries = ro + e->attn[k].pool_off};
		cptr[k] = &cached[k];
	}
	for (int32_t r = 0; r < rows; r++)
		srt_bf16_to_f32_n(e->embed + (size_t)tok[s0 + (uint64_t)r] * d, h + (size_t)r * d, d);
	if ((rc = e->res_vt->embed(e->res->ctx, rows, h, X))) {
		seterr(err, errlen, "residual plugin '%s': embed failed (%d)", e->res->desc->name, rc);
		goto out;
	}
	for (uint32_t l = 0; l < L; l++) {
		int k = e->layer_attn[l];
		uint64_t cl = srt_remat_lo(g, t, l), cn = l + 1 < L ? srt_remat_lo(g, t, l + 1) : t;
		size_t o1 = (size_t)(cl - s0), o2 = (size_t)(cn - s0);
		int32_t n1 = (int32_t)(t - cl), n2 = (int32_t)(t - cn);
		struct srt_seq_view va = {.seq_id = s->id, .pos = (int64_t)cl, .n_tokens = n1,
					  .first_row = 0, .token_ids = tok + cl,
					  .pools = &pts[e->attn[k].pool_off],
					  .n_pools = e->attn[k].pool_n};
		struct srt_seq_view vm = {.seq_id = s->id, .pos = (int64_t)cn, .n_tokens = n2,
					  .first_row = 0, .token_ids = tok + cn};
		struct srt_batch ba = {.struct_size = sizeof(ba), .n_seqs = 1, .seqs = &va,
				       .n_rows = n1, .mem = SRT_MEM_HOST, .cached = &cptr[k]};
		struct srt_batch bm = {.struct_size = sizeof(bm), .n_seqs = 1, .seqs = &vm,
				       .n_rows = n2, .mem = SRT_MEM_HOST};
		const char *stage = "pre(attn)";
		if ((rc = e->res_vt->pre(e->res->ctx, (int32_t)l, SRT_SUBLAYER_ATTN, n1, X + o1 * sd,
					 u + o1 * d, mix + o1 * mf)))
			goto plugin_fail;
		why[0] = 0;
		if ((rc = e->attn_vt[k]->forward(e->attn[k].inst->ctx, (int32_t)l, &ba, u + o1 * d,
						 f + o1 * d, why, sizeof(why)))) {
			seterr(err, errlen, "rematerialization at %llu, layer %u: attention plugin "
			       "'%s': %s (%d)", (unsigned long long)t, l, e->attn[k].inst->desc->name,
			       why[0] ? why : "forward failed", rc);
			goto out;
		}
		if (l + 1 == L) /* the last layer's output is not needed: its window is built */
			break;
		stage = "post(attn)";
		if ((rc = e->res_vt->post(e->res->ctx, (int32_t)l, SRT_SUBLAYER_ATTN, n2, f + o2 * d,
					  mix + o2 * mf, X + o2 * sd)))
			goto plugin_fail;
		stage = "pre(ffn)";
		if ((rc = e->res_vt->pre(e->res->ctx, (int32_t)l, SRT_SUBLAYER_FFN, n2, X + o2 * sd,
					 u + o2 * d, mix + o2 * mf)))
			goto plugin_fail;
		why[0] = 0;
		if ((rc = e->moe_vt->forward(e->moe->ctx, (int32_t)l, &bm, u + o2 * d, f + o2 * d, why,
					     sizeof(why)))) {
			seterr(err, errlen, "rematerialization at %llu, layer %u: moe plugin '%s': %s "
			       "(%d)", (unsigned long long)t, l, e->moe->desc->name,
			       why[0] ? why : "forward failed", rc);
			goto out;
		}
		stage = "post(ffn)";
		if ((rc = e->res_vt->post(e->res->ctx, (int32_t)l, SRT_SUBLAYER_FFN, n2, f + o2 * d,
					  mix + o2 * mf, X + o2 * sd)))
			goto plugin_fail;
		continue;
plugin_fail:
		seterr(err, errlen, "rematerialization at %llu, layer %u: residual plugin '%s': %s "
		       "failed (%d)", (unsigned long long)t, l, e->res->desc->name, stage, rc);
		goto out;
	}
out:
	if (bufs && scr)
		for (size_t i = 0; i < (size_t)np * npg; i++)
			if (scr[i])
				free(bufs[i]);
	free(pts), free(bufs), free(scr), free(ro), free(cached), free(cptr);
	free(h), free(X), free(u), free(f), free(mix);
	return rc;
}

int srt_engine_decode(struct srt_engine *e, struct srt_seq *const *seqs, uint32_t n,
		      const int32_t *tokens, float *logits, char *err, size_t errlen)
{
	const int32_t **toks = malloc(sizeof(*toks) * (n ? n : 1));
	int32_t *ntoks = malloc(sizeof(*ntoks) * (n ? n : 1));
	int rc;
	if (!toks || !ntoks) {
		free(toks), free(ntoks);
		seterr(err, errlen, "out of memory");
		return SRT_ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		toks[i] = &tokens[i];
		ntoks[i] = 1;
	}
	rc = srt_engine_forward(e, seqs, n, toks, ntoks, logits, 0, err, errlen);
	free(toks);
	free(ntoks);
	return rc;
}

int srt_engine_prefill(struct srt_engine *e, struct srt_seq *s, float *logits, int all,
		       char *err, size_t errlen)
{
	size_t V = (size_t)e->vocab;
	float *out = logits;
	if (s->loading) {
		/* logits with all = 1 hold n - hit rows of the hit the caller was given */
		uint64_t was = s->hit, got;
		int wr = srt_engine_seq_wait(s, &got, err, errlen);
		if (wr)
			return wr;
		if (got != was && logits && all) {
			seterr(err, errlen, "sequence %llu: its tier load fell back from a hit of %llu "
			       "to %llu tokens, so the logits need %llu rows, not %llu; call "
			       "srt_engine_seq_wait before prefill", (unsigned long long)s->id,
			       (unsigned long long)was, (unsigned long long)got,
			       (unsigned long long)(s->n_prompt - got),
			       (unsigned long long)(s->n_prompt - was));
			return SRT_EINVAL;
		}
	}
	while (s->done < s->n_prompt) {
		uint64_t left = s->n_prompt - s->done;
		int32_t c = (int32_t)(left < (uint64_t)e->chunk ? left : (uint64_t)e->chunk);
		const int32_t *t = s->prompt + s->done;
		int last = (uint64_t)c == left;
		float *lg = NULL;
		if (logits && all)
			lg = out;
		else if (logits && last)
			lg = logits;
		int rc = srt_engine_forward(e, &s, 1, &t, &c, lg, all, err, errlen);
		if (rc)
			return rc;
		if (logits && all)
			out += (size_t)c * V;
		s->done += (uint64_t)c;
	}
	return 0;
}
