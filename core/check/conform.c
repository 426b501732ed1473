/* Plugin conformance checks through the executor (see conform.h). */
#include "check/conform.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shadowrt/attention.h>
#include <shadowrt/plugin.h>

#include "check/guard.h"
#include "config/model_config.h"
#include "config/runtime_config.h"
#include "exec/engine.h"
#include "plugin/host.h"
#include "plugin/registry.h"
#include "radix/radix.h"

const char *const srt_conf_checks[] = {"pools",     "chunk",     "decode", "resume-l1",
				       "resume-l2", "resume-l3", "batch",  "threads",
				       "guard",     "divergence", NULL};

int srt_conf_known(const char *name)
{
	for (int i = 0; srt_conf_checks[i]; i++)
		if (!strcmp(srt_conf_checks[i], name))
			return 1;
	return 0;
}

const char *srt_conf_status_name(int s)
{
	switch (s) {
	case SRT_CONF_PASS: return "pass";
	case SRT_CONF_FAIL: return "FAIL";
	case SRT_CONF_SKIP: return "skip";
	default: return "ERROR";
	}
}

static void set(struct srt_conf_result *r, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set(struct srt_conf_result *r, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	r->status = status;
	vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
	va_end(ap);
}

/* ---------------------------------------------------------------------------------------- */
/* Engines with the candidate in place.                                                       */

#define MAX_SETS 300

struct side {
	const char *sets[MAX_SETS];
	size_t n;
	char cand[4200];
};

/* the user's --set list, the candidate's mapping (cand = 1), then extra */
static int side_sets(const struct srt_conf_opts *o, int cand, const char *const *extra,
		     size_t n_extra, struct side *s, char *err, size_t errlen)
{
	s->n = 0;
	if (o->n_sets + n_extra + 1 > MAX_SETS) {
		snprintf(err, errlen, "too many --set overrides");
		return SRT_EINVAL;
	}
	/* the reference side leaves out the candidate's own [attention.<stem>] options */
	char own[160] = "";
	if (!cand && o->kind == SRT_KIND_ATTENTION) {
		const char *b = strrchr(o->plugin, '/');
		snprintf(own, sizeof(own), "attention.%s", b ? b + 1 : o->plugin);
		size_t l = strlen(own);
		if (l > 3 && !strcmp(own + l - 3, ".so"))
			own[l - 3] = 0;
		strcat(own, ".");
	}
	for (size_t i = 0; i < o->n_sets; i++)
		if (!own[0] || strncmp(o->sets[i], own, strlen(own)))
			s->sets[s->n++] = o->sets[i];
	if (cand) {
		if (o->kind == SRT_KIND_ATTENTION)
			snprintf(s->cand, sizeof(s->cand), "attention.ratio.%d=%s", (int)o->ratio,
				 o->plugin);
		else
			snprintf(s->cand, sizeof(s->cand), "%s.plugin=%s",
				 o->kind == SRT_KIND_MOE ? "moe" : "residual", o->plugin);
		s->sets[s->n++] = s->cand;
	}
	for (size_t i = 0; i < n_extra; i++)
		s->sets[s->n++] = extra[i];
	return srt_runtime_config_set_overrides(s->sets, s->n, err, errlen);
}

static int open_engine(const struct srt_conf_opts *o, int cand, const char *const *extra,
		       size_t n_extra, int threads, int tiers,
		       const struct srt_rdx_allocator *alloc, struct srt_engine **e, char *err,
		       size_t errlen)
{
	struct side s;
	int rc = side_sets(o, cand, extra, n_extra, &s, err, errlen);
	if (rc)
		return rc;
	struct srt_engine_opts eo = {.config_path = o->config_path, .model = o->model,
				     .threads = threads, .profile = o->profile, .quiet = 1,
				     .tiers = tiers, .page_alloc = alloc};
	rc = srt_engine_open(&eo, e, err, errlen);
	srt_runtime_config_set_overrides(NULL, 0, err, 0);
	return rc;
}

/* all prompt logits from one prefill (from position 0, no cache) */
static int prefill_all(struct srt_engine *e, const int32_t *t, uint64_t n, float **out,
		       char *err, size_t errlen)
{
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	float *lg = malloc(sizeof(float) * V * n);
	struct srt_seq *s = NULL;
	int rc = lg ? 0 : SRT_ENOMEM;
	if (!rc)
		rc = srt_engine_seq_start(e, t, n, 0, &s, NULL, err, errlen);
	if (!rc)
		rc = srt_engine_prefill(e, s, lg, 1, err, errlen);
	srt_engine_seq_free(s);
	if (rc) {
		free(lg);
		return rc;
	}
	*out = lg;
	return 0;
}

/* token by token: the first token by prefill, then one decode step per token */
static int decode_all(struct srt_engine *e, const int32_t *t, uint64_t n, float **out,
		      char *err, size_t errlen)
{
	size_t V = (size_t)srt_engine_model(e)->vocab_size;
	float *lg = malloc(sizeof(float) * V * n);
	struct srt_seq *s = NULL;
	int rc = lg ? 0 : SRT_ENOMEM;
	if (!rc)
		rc = srt_engine_seq_start(e, t, 1, 0, &s, NULL, err, errlen);
	if (!rc)
		rc = srt_engine_prefill(e, s, lg, 0, err, errlen);
	for (uint64_t i = 1; !rc && i < n; i++)
		rc = srt_engine_decode(e, &s, 1, &t[i], lg + i * V, err, errlen);
	srt_engine_seq_free(s);
	if (rc) {
		free(lg);
		return rc;
	}
	*out = lg;
	return 0;
}

/* bitwise comparison into r; 1 when equal */
static int same(struct srt_conf_result *r, const float *a, const float *b, uint64_t n,
		int32_t V, const char *what)
{
	srt_div_compare(a, b, n, V, &r->div, NULL, NULL, NULL);
	if (r->div.bitwise_equal)
		return 1;
	set(r, SRT_CONF_FAIL, "%s: logits differ first at position %lld (max |diff| %.3g, top-1 "
	    "agreement %.4f)", what, (long long)r->div.first_diff, r->div.max_abs,
	    r->div.top1_agree);
	return 0;
}

static int32_t *prompt(struct srt_engine *e, uint64_t n, uint64_t seed)
{
	int32_t *t = malloc(sizeof(int32_t) * n);
	if (t)
		srt_div_prompt(t, n, srt_engine_model(e)->vocab_size, seed);
	return t;
}

/* ---------------------------------------------------------------------------------------- */
/* The checks. Each returns with r->status set (PASS by default).                             */

#define TRY(call)                                                                              \
	do {                                                                                   \
		int rc_ = (call);                                                              \
		if (rc_) {                                                                     \
			set(r, SRT_CONF_ERROR, "%s", err);                                     \
			goto out;                                                              \
		}                                                                              \
	} while (0)

static void check_chunk(const struct srt_conf_opts *o, struct srt_conf_result *r, int decode)
{
	char err[2048] = "";
	struct srt_engine *e = NULL;
	float *one = NULL, *lg = NULL;
	int32_t *t = NULL;
	TRY(open_engine(o, 1, NULL, 0, o->threads, 0, NULL, &e, err, sizeof(err)));
	int32_t V = srt_engine_model(e)->vocab_size;
	uint64_t n = o->tokens;
	t = prompt(e, n, o->seed);
	srt_engine_set_chunk(e, (int)n);
	TRY(prefill_all(e, t, n, &one, err, sizeof(err)));
	if (decode) {
		TRY(decode_all(e, t, n, &lg, err, sizeof(err)));
		if (same(r, lg, one, n, V, "token-by-token decode vs one-shot prefill"))
			set(r, SRT_CONF_PASS, "%llu positions decoded one token at a time = one "
			    "prefill, bitwise", (unsigned long long)n);
		goto out;
	}
	static const int chunks[] = {7, 64, 100};
	for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
		srt_engine_set_chunk(e, chunks[k]);
		TRY(prefill_all(e, t, n, &lg, err, sizeof(err)));
		char what[64];
		snprintf(what, sizeof(what), "chunks of %d vs one shot", chunks[k]);
		if (!same(r, lg, one, n, V, what))
			goto out;
		free(lg);
		lg = NULL;
	}
	set(r, SRT_CONF_PASS, "%llu positions in chunks of 7, 64 and 100 = one shot, bitwise",
	    (unsigned long long)n);
out:
	free(t), free(one), free(lg);
	srt_engine_close(e);
}

/* prefill + finish a into the cache */
static int finish_prompt(struct srt_engine *e, const int32_t *a, uint64_t n, char *err,
			 size_t errlen)
{
	struct srt_seq *s = NULL;
	int rc = srt_engine_seq_start(e, a, n, 1, &s, NULL, err, errlen);
	if (!rc)
		rc = srt_engine_prefill(e, s, NULL, 0, err, errlen);
	if (!rc)
		rc = srt_engine_seq_finish(s, NULL, err, errlen);
	srt_engine_seq_free(s);
	return rc;
}

/* b with the cache of e vs b from scratch in fresh: prompt logits after the hit and 3
 * decode steps; 1 when equal (r says why not) */
static int resume_vs_scratch(struct srt_engine *e, struct srt_engine *fresh, const int32_t *b,
			     uint64_t nb, uint64_t tiers[3], struct srt_conf_result *r,
			     char *err, size_t errlen)
{
	int32_t V = srt_engine_model(e)->vocab_size;
	struct srt_seq *s = NULL, *f = NULL;
	float *lg = malloc(sizeof(float) * (size_t)V * nb), *full = malloc(sizeof(float) * (size_t)V * nb);
	float *dl = malloc(sizeof(float) * (size_t)V * 3), *fl = malloc(sizeof(float) * (size_t)V * 3);
	int ok = 0, rc = lg && full && dl && fl ? 0 : SRT_ENOMEM;
	uint64_t hit = 0;
	if (!rc)
		rc = srt_engine_seq_start(e, b, nb, 1, &s, &hit, err, errlen);
	if (!rc) {
		srt_seq_hit_tiers(s, tiers);
		rc = srt_engine_prefill(e, s, lg, 1, err, errlen);
	}
	for (int k = 0; !rc && k < 3; k++)
		rc = srt_engine_decode(e, &s, 1, &b[k], dl + (size_t)k * V, err, errlen);
	if (!rc)
		rc = srt_engine_seq_start(fresh, b, nb, 0, &f, NULL, err, errlen);
	if (!rc)
		rc = srt_engine_prefill(fresh, f, full, 1, err, errlen);
	for (int k = 0; !rc && k < 3; k++)
		rc = srt_engine_decode(fresh, &f, 1, &b[k], fl + (size_t)k * V, err, errlen);
	r->hit = hit;
	if (rc) {
		set(r, SRT_CONF_ERROR, "%s", err);
	} else if (!hit) {
		set(r, SRT_CONF_FAIL, "no prefix hit: the cached prefix was not matched (are the "
		    "plugin's pools complete at page boundaries?)");
	} else if (same(r, lg, full + hit * (size_t)V, nb - hit, V, "resumed prompt vs scratch") &&
		   same(r, dl, fl, 3, V, "decode after the resume vs scratch")) {
		ok = 1;
	}
	srt_engine_seq_free(s);
	srt_engine_seq_free(f);
	free(lg), free(full), free(dl), free(fl);
	return ok;
}

static void check_resume(const struct srt_conf_opts *o, struct srt_conf_result *r, int level)
{
	char err[2048] = "", l3path[4200], l3set[4300];
	struct srt_engine *e = NULL, *fresh = NULL;
	int32_t *a = NULL, *b = NULL;
	const char *l2[] = {"tier.l2.plugin=host", "tier.l2.budget=256MiB", "tier.l3.plugin=none"};
	snprintf(l3path, sizeof(l3path), "%s/l3-%d", o->tmp_dir, (int)getpid());
	snprintf(l3set, sizeof(l3set), "tier.l3.path=%s", l3path);
	const char *l3[] = {"tier.l2.plugin=none", "tier.l3.plugin=file", l3set,
			    "tier.l3.budget=1GiB"};
	const char *const *extra = level == 1 ? l2 : level == 2 ? l3 : NULL;
	size_t n_extra = level == 1 ? 3 : level == 2 ? 4 : 0;
	TRY(open_engine(o, 1, extra, n_extra, o->threads, level > 0, NULL, &e, err, sizeof(err)));
	TRY(open_engine(o, 1, NULL, 0, o->threads, 0, NULL, &fresh, err, sizeof(err)));
	const struct srt_runtime_config *rc = srt_engine_runtime(e);
	uint64_t P = rc->page_size;
	uint64_t na = 2 * P + 88, nb = 2 * P + 100;
	a = prompt(e, na, o->seed + 1);
	b = prompt(e, nb, o->seed + 2);
	memcpy(b, a, sizeof(int32_t) * (2 * P + 40)); /* b shares 2P + 40 tokens with a */
	TRY(finish_prompt(e, a, na, err, sizeof(err)));
	if (level == 1) {
		struct srt_rdx_cache *c = srt_engine_cache(e);
		for (uint32_t p = 0; p < srt_rdx_pool_count(c); p++)
			srt_rdx_evict(c, p, 0, NULL); /* everything down to L2 */
	} else if (level == 2) {
		srt_engine_close(e); /* another instance reads what this one wrote */
		e = NULL;
		TRY(open_engine(o, 1, extra, n_extra, o->threads, 1, NULL, &e, err, sizeof(err)));
	}
	uint64_t t[3] = {0, 0, 0};
	if (!resume_vs_scratch(e, fresh, b, nb, t, r, err, sizeof(err)))
		goto out;
	if (t[level] == 0) {
		set(r, SRT_CONF_FAIL, "hit %llu tokens, but none from L%d (L1 %llu, L2 %llu, L3 "
		    "%llu)", (unsigned long long)r->hit, level + 1, (unsigned long long)t[0],
		    (unsigned long long)t[1], (unsigned long long)t[2]);
		goto out;
	}
	set(r, SRT_CONF_PASS, "resumed after %llu cached tokens (%llu from L%d) = from scratch, "
	    "bitwise, prompt and 3 decode steps", (unsigned long long)r->hit,
	    (unsigned long long)t[level], level + 1);
out:
	free(a), free(b);
	srt_engine_close(e);
	srt_engine_close(fresh);
	if (level == 2) {
		char cmd[4400];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", l3path);
		if (system(cmd)) {
			/* scratch left behind; the caller's tmp_dir is removed anyway */
		}
	}
}

static void check_batch(const struct srt_conf_opts *o, struct srt_conf_result *r)
{
	char err[2048] = "";
	struct srt_engine *e = NULL;
	enum { NS = 3, STEPS = 2 };
	int32_t len[NS] = {(int32_t)o->tokens, (int32_t)(o->tokens / 2 + 3), 40};
	int32_t *p[NS] = {NULL, NULL, NULL};
	struct srt_seq *s[NS] = {NULL, NULL, NULL}, *a = NULL;
	float *bl = NULL, *bd = NULL, *al = NULL, *ad = NULL;
	TRY(open_engine(o, 1, NULL, 0, o->threads, 0, NULL, &e, err, sizeof(err)));
	size_t V = (size_t)srt_engine_model(e)->vocab_size, rows = 0;
	for (int i = 0; i < NS; i++) {
		p[i] = prompt(e, (uint64_t)len[i] + STEPS, o->seed + 10 + (uint64_t)i);
		rows += (size_t)len[i];
		TRY(srt_engine_seq_start(e, p[i], (uint64_t)len[i], 0, &s[i], NULL, err,
					 sizeof(err)));
	}
	bl = malloc(sizeof(float) * V * rows);
	bd = malloc(sizeof(float) * V * NS * STEPS);
	al = malloc(sizeof(float) * V * (size_t)len[0]);
	ad = malloc(sizeof(float) * V);
	const int32_t *toks[NS] = {p[0], p[1], p[2]};
	TRY(srt_engine_forward(e, s, NS, toks, len, bl, 1, err, sizeof(err)));
	for (int k = 0; k < STEPS; k++) {
		int32_t tk[NS];
		for (int i = 0; i < NS; i++)
			tk[i] = p[i][len[i] + k];
		TRY(srt_engine_decode(e, s, NS, tk, bd + (size_t)k * NS * V, err, sizeof(err)));
	}
	size_t off = 0;
	for (int i = 0; i < NS; i++) {
		TRY(srt_engine_seq_start(e, p[i], (uint64_t)len[i], 0, &a, NULL, err, sizeof(err)));
		TRY(srt_engine_prefill(e, a, al, 1, err, sizeof(err)));
		if (!same(r, bl + off * V, al, (uint64_t)len[i], (int32_t)V,
			  "batched prefill vs the sequence alone"))
			goto out;
		for (int k = 0; k < STEPS; k++) {
			TRY(srt_engine_decode(e, &a, 1, &p[i][len[i] + k], ad, err, sizeof(err)));
			if (!same(r, bd + ((size_t)k * NS + (size_t)i) * V, ad, 1, (int32_t)V,
				  "batched decode vs the sequence alone"))
				goto out;
		}
		srt_engine_seq_free(a);
		a = NULL;
		off += (size_t)len[i];
	}
	set(r, SRT_CONF_PASS, "3 sequences (%d, %d, %d tokens) batched in prefill and %d decode "
	    "steps = each alone, bitwise", len[0], len[1], len[2], STEPS);
out:
	for (int i = 0; i < NS; i++) {
		srt_engine_seq_free(s[i]);
		free(p[i]);
	}
	srt_engine_seq_free(a);
	free(bl), free(bd), free(al), free(ad);
	srt_engine_close(e);
}

static void check_threads(const struct srt_conf_opts *o, struct srt_conf_result *r)
{
	char err[2048] = "";
	struct srt_engine *e1 = NULL, *en = NULL;
	float *l1 = NULL, *ln = NULL;
	int32_t *t = NULL;
	int n_thr = o->threads >= 2 ? o->threads : 4;
	TRY(open_engine(o, 1, NULL, 0, 1, 0, NULL, &e1, err, sizeof(err)));
	TRY(open_engine(o, 1, NULL, 0, n_thr, 0, NULL, &en, err, sizeof(err)));
	t = prompt(e1, o->tokens, o->seed + 3);
	TRY(prefill_all(e1, t, o->tokens, &l1, err, sizeof(err)));
	TRY(prefill_all(en, t, o->tokens, &ln, err, sizeof(err)));
	if (same(r, ln, l1, o->tokens, srt_engine_model(e1)->vocab_size, "threads vs 1 thread"))
		set(r, SRT_CONF_PASS, "%d threads = 1 thread over %llu positions, bitwise", n_thr,
		    (unsigned long long)o->tokens);
out:
	free(t), free(l1), free(ln);
	srt_engine_close(e1);
	srt_engine_close(en);
}

/* guard: the SIGSEGV handler reports through this result, written to the pipe */
static struct {
	struct srt_conf_result *r;
	struct srt_guard *g;
	int fd;
} guard_ctx;

static void hex(char *d, uintptr_t v)
{
	static const char x[] = "0123456789abcdef";
	for (int i = 15; i >= 0; i--, v >>= 4)
		d[i] = x[v & 15];
	d[16] = 0;
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	struct srt_conf_result *r = guard_ctx.r;
	char addr[17];
	hex(addr, (uintptr_t)si->si_addr);
	const char *what = srt_guard_is_guard(guard_ctx.g, si->si_addr)
				   ? "an access to a guard page next to a KV page (a read or write "
				     "outside the pages the core allocated)"
				   : "a fault outside the guarded KV pages";
	r->status = SRT_CONF_FAIL;
	/* strcpy-like, async-signal-safe enough: plain stores */
	char *d = r->detail;
	const char *parts[] = {"signal ", sig == SIGBUS ? "SIGBUS" : "SIGSEGV", " at 0x", addr,
			       ": ", what, NULL};
	size_t k = 0;
	for (int i = 0; parts[i]; i++)
		for (const char *c = parts[i]; *c && k + 1 < sizeof(r->detail); c++)
			d[k++] = *c;
	d[k] = 0;
	if (write(guard_ctx.fd, r, sizeof(*r)) < 0) {
		/* nothing to do in a signal handler */
	}
	_exit(0);
}

static void check_guard(const struct srt_conf_opts *o, struct srt_conf_result *r, int fd)
{
	char err[2048] = "", msg[256];
	struct srt_engine *e = NULL;
	struct srt_guard *g = NULL;
	int32_t *a = NULL, *b = NULL;
	struct srt_seq *s = NULL;
	if (srt_guard_create(&g)) {
		set(r, SRT_CONF_ERROR, "out of memory");
		return;
	}
	guard_ctx.r = r;
	guard_ctx.g = g;
	guard_ctx.fd = fd;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	TRY(open_engine(o, 1, NULL, 0, o->threads, 0, srt_guard_allocator(g), &e, err,
			sizeof(err)));
	uint64_t P = srt_engine_runtime(e)->page_size, na = 2 * P + 88, nb = 2 * P + 100;
	a = prompt(e, na, o->seed + 4);
	b = prompt(e, nb, o->seed + 5);
	memcpy(b, a, sizeof(int32_t) * (2 * P + 40));
	TRY(finish_prompt(e, a, na, err, sizeof(err)));
	uint64_t hit = 0;
	TRY(srt_engine_seq_start(e, b, nb, 1, &s, &hit, err, sizeof(err)));
	TRY(srt_engine_prefill(e, s, NULL, 0, err, sizeof(err)));
	for (int k = 0; k < 4; k++)
		TRY(srt_engine_decode(e, &s, 1, &b[k], NULL, err, sizeof(err)));
	TRY(srt_engine_seq_finish(s, NULL, err, sizeof(err)));
	srt_engine_seq_free(s);
	s = NULL;
	uint64_t pages = srt_guard_pages(g);
	srt_engine_close(e); /* frees every page: canaries checked */
	e = NULL;
	uint64_t bad = srt_guard_verify(g, msg, sizeof(msg));
	if (bad)
		set(r, SRT_CONF_FAIL, "%llu KV page(s) damaged around their edges: %s",
		    (unsigned long long)bad, msg);
	else
		set(r, SRT_CONF_PASS, "%llu KV pages fenced by guard pages and canaries: no access "
		    "outside them (prefill, a %llu-token prefix hit, decode)",
		    (unsigned long long)pages, (unsigned long long)hit);
out:
	srt_engine_seq_free(s);
	free(a), free(b);
	srt_engine_close(e);
	srt_guard_destroy(g);
}

static void check_divergence(const struct srt_conf_opts *o, struct srt_conf_result *r)
{
	char err[2048] = "";
	struct srt_engine *ref = NULL, *cand = NULL;
	float *lr = NULL, *lc = NULL;
	int32_t *t = NULL;
	struct srt_runtime_config rcfg;
	struct side sd;
	memset(&rcfg, 0, sizeof(rcfg));
	TRY(side_sets(o, 0, NULL, 0, &sd, err, sizeof(err)));
	TRY(srt_runtime_config_load_ex(o->config_path, sd.sets, sd.n, &rcfg, err, sizeof(err)));
	const struct srt_rc_plugin *bp = o->kind == SRT_KIND_ATTENTION
						 ? srt_runtime_config_attention(&rcfg, o->ratio)
					 : o->kind == SRT_KIND_MOE ? &rcfg.moe : &rcfg.residual;
	const char *builtin = bp ? bp->name : NULL;
	char stem[128] = "";
	if (builtin) {
		const char *b = strrchr(builtin, '/');
		snprintf(stem, sizeof(stem), "%s", b ? b + 1 : builtin);
		char *so = strstr(stem, ".so");
		if (so && !so[3])
			*so = 0;
	}
	if (!builtin || (o->name && !strcmp(stem, o->name))) {
		set(r, SRT_CONF_SKIP, "the config maps %s to %s: no other plugin to compare with "
		    "(map it to another plugin with --set %s=NAME to measure the divergence)",
		    o->kind == SRT_KIND_ATTENTION ? "that ratio" : "the role",
		    builtin ? "the candidate itself" : "nothing",
		    o->kind == SRT_KIND_ATTENTION ? "attention.ratio.N"
		    : o->kind == SRT_KIND_MOE	  ? "moe.plugin"
						  : "residual.plugin");
		goto out;
	}
	TRY(open_engine(o, 0, NULL, 0, o->threads, 0, NULL, &ref, err, sizeof(err)));
	TRY(open_engine(o, 1, NULL, 0, o->threads, 0, NULL, &cand, err, sizeof(err)));
	t = prompt(ref, o->tokens, o->seed + 6);
	TRY(prefill_all(ref, t, o->tokens, &lr, err, sizeof(err)));
	TRY(prefill_all(cand, t, o->tokens, &lc, err, sizeof(err)));
	srt_div_compare(lc, lr, o->tokens, srt_engine_model(ref)->vocab_size, &r->div, NULL,
			NULL, NULL);
	const struct srt_div *d = &r->div;
	char first[64] = "none";
	if (d->first_diff >= 0)
		snprintf(first, sizeof(first), "%lld", (long long)d->first_diff);
	set(r, SRT_CONF_PASS, "vs built-in '%s' over %llu positions: KL mean %.3g max %.3g, top-1 "
	    "agreement %.4f, max |dlogit| %.3g, first differing position %s%s", builtin,
	    (unsigned long long)o->tokens, d->kl_mean, d->kl_max, d->top1_agree, d->max_abs,
	    first, d->bitwise_equal ? " (bitwise equal)" : "");
	if (o->max_kl >= 0 && !(d->kl_mean <= o->max_kl))
		r->status = SRT_CONF_FAIL;
out:
	free(t), free(lr), free(lc);
	srt_engine_close(ref);
	srt_engine_close(cand);
	srt_runtime_config_free(&rcfg);
}

/* ---------------------------------------------------------------------------------------- */
/* pools: cache-only instances, then the engine's pools.                                      */

static const char *opt_cb(void *ctx, const char *key)
{
	return srt_runtime_config_option_cb(ctx, key);
}

/* a cache-only instance (weights NULL) of plugin p serving the main layers of `ratio` */
static int cache_only(struct srt_registry *reg, const struct srt_host *host,
		      const struct srt_runtime_config *rc, const struct srt_model_config *m,
		      const struct srt_rc_plugin *p, int ratio, int profile, int32_t *layers,
		      struct srt_rc_scope *scope, struct srt_instance **inst, char *why,
		      size_t why_len)
{
	const struct srt_plugin_info *info;
	int st = srt_registry_find(reg, SRT_KIND_ATTENTION, p->name, &info, why, why_len);
	if (st)
		return st;
	uint32_t nl = 0;
	for (int l = 0; l < m->num_hidden_layers; l++)
		if (m->compress_ratios[l] == ratio)
			layers[nl++] = l;
	scope->config = rc;
	scope->section = p->section;
	struct srt_plugin_args args = {.struct_size = sizeof(args), .model = m, .weights = NULL,
				       .layers = layers, .n_layers = nl,
				       .page_tokens = rc->page_size, .profile = (uint32_t)profile,
				       .option = opt_cb, .option_ctx = scope, .role = p->role};
	return srt_plugin_instantiate(info, host, &args, inst, why, why_len);
}

static int pools_of(struct srt_instance *in, const struct srt_pool_decl **pools, uint32_t *n,
		    char *why, size_t why_len)
{
	const struct srt_attention_vtable *vt = in->vtable;
	int st = vt->declare_pools(in->ctx, pools, n);
	if (st)
		snprintf(why, why_len, "declare_pools returned %d", st);
	return st;
}

/* one declaration's sanity; 0 or a message */
static int pool_sane(const struct srt_pool_decl *d, uint32_t P, const int32_t *layers,
		     uint32_t nl, char *why, size_t len)
{
	size_t nlen = strnlen(d->name, SRT_POOL_NAME_MAX);
	if (nlen == 0 || nlen == SRT_POOL_NAME_MAX)
		return snprintf(why, len, "a pool name is empty or not NUL-terminated within %d "
				"bytes", SRT_POOL_NAME_MAX), 1;
	if (d->ratio != SRT_RATIO_PAGE && (d->ratio > P || P % d->ratio))
		return snprintf(why, len, "pool '%s': ratio %u does not divide the page size %u",
				d->name, d->ratio, P), 1;
	if (d->retention != SRT_RETAIN_ALL && d->retention != SRT_RETAIN_TAIL)
		return snprintf(why, len, "pool '%s': unknown retention %u", d->name, d->retention), 1;
	if (d->retention == SRT_RETAIN_TAIL && d->tail_tokens == 0)
		return snprintf(why, len, "pool '%s': TAIL retention with tail_tokens 0", d->name), 1;
	if (d->entry_bytes == 0 || d->entry_bytes > (1ull << 30))
		return snprintf(why, len, "pool '%s': entry_bytes %llu (expected 1 .. 1 GiB)",
				d->name, (unsigned long long)d->entry_bytes), 1;
	if (d->n_layers == 0 || !d->layers)
		return snprintf(why, len, "pool '%s': covers no layer", d->name), 1;
	for (uint32_t i = 0; i < d->n_layers; i++) {
		bool mine = false;
		for (uint32_t j = 0; j < nl; j++)
			mine |= d->layers[i] == layers[j];
		if (!mine)
			return snprintf(why, len, "pool '%s': layer %d is not one the instance serves",
					d->name, d->layers[i]), 1;
	}
	return 0;
}

static void check_pools(const struct srt_conf_opts *o, struct srt_conf_result *r)
{
	char err[2048] = "";
	struct srt_runtime_config rc;
	struct srt_model_config m;
	struct srt_host *host = NULL;
	struct srt_registry *reg = NULL;
	struct srt_instance *inst = NULL, *other = NULL;
	struct srt_engine *e = NULL;
	int32_t layers[SRT_MAX_LAYERS], olayers[SRT_MAX_LAYERS];
	struct srt_rc_scope scope, oscope;
	memset(&rc, 0, sizeof(rc));
	if (o->kind != SRT_KIND_ATTENTION) {
		set(r, SRT_CONF_SKIP, "only attention plugins declare pools");
		return;
	}
	struct side sd;
	TRY(side_sets(o, 1, NULL, 0, &sd, err, sizeof(err)));
	TRY(srt_runtime_config_load_ex(o->config_path, sd.sets, sd.n, &rc, err, sizeof(err)));
	TRY(srt_model_config_load(o->model ? o->model : rc.model, &m, err, sizeof(err)));
	TRY(srt_host_create(1, &host, err, sizeof(err)));
	TRY(srt_registry_open(&reg, rc.plugin_dirs, (size_t)rc.n_plugin_dirs, host, 0));
	int profile = o->profile >= 0 ? o->profile : rc.profile;
	const struct srt_rc_plugin *p = srt_runtime_config_attention(&rc, o->ratio);
	int st = cache_only(reg, host, &rc, &m, p, o->ratio, profile, layers, &scope, &inst, err,
			    sizeof(err));
	if (st) {
		set(r, SRT_CONF_FAIL, "cache-only create (weights NULL, as `replay` and geometry "
		    "reports call it; see abi/shadowrt/plugin.h) failed: %s", err);
		goto out;
	}
	uint32_t nl = 0;
	for (int l = 0; l < m.num_hidden_layers; l++)
		nl += m.compress_ratios[l] == o->ratio;
	const struct srt_pool_decl *pd, *pd2;
	uint32_t np = 0, np2 = 0;
	TRY(pools_of(inst, &pd, &np, err, sizeof(err)));
	if (np == 0 || np > SRT_MAX_POOLS) {
		set(r, SRT_CONF_FAIL, "declares %u pools (expected 1 .. %d)", np, SRT_MAX_POOLS);
		goto out;
	}
	for (uint32_t i = 0; i < np; i++) {
		if (pool_sane(&pd[i], rc.page_size, layers, nl, err, sizeof(err))) {
			set(r, SRT_CONF_FAIL, "%s", err);
			goto out;
		}
		for (uint32_t j = 0; j < i; j++)
			if (!strncmp(pd[i].name, pd[j].name, SRT_POOL_NAME_MAX)) {
				set(r, SRT_CONF_FAIL, "pool name '%s' declared twice", pd[i].name);
				goto out;
			}
	}
	TRY(pools_of(inst, &pd2, &np2, err, sizeof(err)));
	if (np2 != np || memcmp(pd, pd2, np * sizeof(*pd))) {
		set(r, SRT_CONF_FAIL, "a second declare_pools call declares other pools");
		goto out;
	}
	/* names unique against the other attention plugins of the model */
	for (int k = 0; k < rc.n_ratios; k++) {
		int ratio = rc.ratios[k].ratio;
		bool used = false;
		for (int l = 0; l < m.num_hidden_layers; l++)
			used |= m.compress_ratios[l] == ratio;
		if (ratio == o->ratio || !used)
			continue;
		if (cache_only(reg, host, &rc, &m, &rc.ratios[k].plugin, ratio, profile, olayers,
			       &oscope, &other, err, sizeof(err)))
			continue; /* not ours to judge here */
		const struct srt_pool_decl *od;
		uint32_t on = 0;
		if (!pools_of(other, &od, &on, err, sizeof(err)))
			for (uint32_t i = 0; i < np; i++)
				for (uint32_t j = 0; j < on; j++)
					if (!strncmp(pd[i].name, od[j].name, SRT_POOL_NAME_MAX)) {
						set(r, SRT_CONF_FAIL, "pool name '%s' is also declared "
						    "by '%s' (ratio %d): names must be unique in the "
						    "model", pd[i].name, rc.ratios[k].plugin.name, ratio);
						goto out;
					}
		srt_instance_destroy(other);
		other = NULL;
	}
	/* the weighted instance in the engine declares the same pools */
	TRY(open_engine(o, 1, NULL, 0, 1, 0, NULL, &e, err, sizeof(err)));
	struct srt_rdx_cache *c = srt_engine_cache(e);
	for (uint32_t i = 0; i < np; i++) {
		bool found = false;
		for (uint32_t k = 0; k < srt_rdx_pool_count(c); k++) {
			struct srt_rdx_pool_stats ps;
			srt_rdx_pool_stats(c, k, &ps);
			if (strcmp(ps.name, pd[i].name))
				continue;
			found = ps.entry_bytes == pd[i].entry_bytes && ps.retention == pd[i].retention &&
				ps.n_layers == pd[i].n_layers;
		}
		if (!found) {
			set(r, SRT_CONF_FAIL, "pool '%s' of the cache-only instance differs from the "
			    "one the instance with weights declares", pd[i].name);
			goto out;
		}
	}
	char list[400] = "";
	size_t n = 0;
	for (uint32_t i = 0; i < np && n < sizeof(list); i++) {
		uint32_t ratio = pd[i].ratio == SRT_RATIO_PAGE ? rc.page_size : pd[i].ratio;
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s (ratio %u, %s%s%.0u, %llu B x "
				      "%u layers)", i ? ", " : "", pd[i].name, ratio,
				      pd[i].retention == SRT_RETAIN_ALL ? "ALL" : "TAIL ",
				      "", pd[i].retention == SRT_RETAIN_ALL ? 0 : pd[i].tail_tokens,
				      (unsigned long long)pd[i].entry_bytes, pd[i].n_layers);
	}
	set(r, SRT_CONF_PASS, "%u pool(s): %s; cache-only create works", np, list);
out:
	srt_instance_destroy(other);
	srt_instance_destroy(inst);
	srt_engine_close(e);
	srt_registry_close(reg);
	srt_host_destroy(host);
	srt_runtime_config_free(&rc);
}

/* ---------------------------------------------------------------------------------------- */

static void run_in_child(const struct srt_conf_opts *o, const char *check,
			 struct srt_conf_result *r, int fd)
{
	if (!strcmp(check, "pools"))
		check_pools(o, r);
	else if (!strcmp(check, "chunk"))
		check_chunk(o, r, 0);
	else if (!strcmp(check, "decode"))
		check_chunk(o, r, 1);
	else if (!strcmp(check, "resume-l1"))
		check_resume(o, r, 0);
	else if (!strcmp(check, "resume-l2"))
		check_resume(o, r, 1);
	else if (!strcmp(check, "resume-l3"))
		check_resume(o, r, 2);
	else if (!strcmp(check, "batch"))
		check_batch(o, r);
	else if (!strcmp(check, "threads"))
		check_threads(o, r);
	else if (!strcmp(check, "guard"))
		check_guard(o, r, fd);
	else if (!strcmp(check, "divergence"))
		check_divergence(o, r);
	else
		set(r, SRT_CONF_ERROR, "unknown check '%s'", check);
}

void srt_conf_run(const struct srt_conf_opts *o, const char *check, struct srt_conf_result *r)
{
	struct timespec t0, t1;
	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", check);
	r->div.first_diff = -1;
	r->div.first_top1 = -1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int fds[2];
	if (pipe(fds)) {
		set(r, SRT_CONF_ERROR, "pipe: %s", strerror(errno));
		return;
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		set(r, SRT_CONF_ERROR, "fork: %s", strerror(errno));
		close(fds[0]), close(fds[1]);
		return;
	}
	if (pid == 0) {
		close(fds[0]);
		struct srt_conf_result mine = *r;
		mine.status = SRT_CONF_PASS;
		run_in_child(o, check, &mine, fds[1]);
		ssize_t w = write(fds[1], &mine, sizeof(mine));
		_exit(w == (ssize_t)sizeof(mine) ? 0 : 1);
	}
	close(fds[1]);
	struct srt_conf_result got;
	size_t have = 0;
	while (have < sizeof(got)) {
		ssize_t k = read(fds[0], (char *)&got + have, sizeof(got) - have);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		have += (size_t)k;
	}
	close(fds[0]);
	int ws = 0;
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	if (have == sizeof(got)) {
		*r = got;
	} else if (WIFSIGNALED(ws)) {
		set(r, SRT_CONF_FAIL, "the check's process died of signal %d (%s) inside the plugin "
		    "or the run", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
	} else {
		set(r, SRT_CONF_ERROR, "the check's process exited %d without a result",
		    WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	r->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
}
