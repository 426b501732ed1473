/* Cache-only trace replay (replay.h). */
#include "trace/replay.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tier/manager.h"

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* open-addressing set of non-zero 64-bit keys */
struct kset {
	uint64_t *v;
	size_t cap, n;
};
static int kset_has_or_add(struct kset *s, uint64_t k, int add)
{
	k |= 1; /* never 0 */
	if (add && (s->n + 1) * 2 > s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 1 << 16;
		uint64_t *v = calloc(cap, sizeof(*v));
		if (!v)
			return -1;
		for (size_t i = 0; i < s->cap; i++)
			if (s->v[i])
				for (size_t j = mix(s->v[i]) & (cap - 1);; j = (j + 1) & (cap - 1))
					if (!v[j]) {
						v[j] = s->v[i];
						break;
					}
		free(s->v);
		s->v = v;
		s->cap = cap;
	}
	if (!s->cap)
		return 0;
	for (size_t j = mix(k) & (s->cap - 1);; j = (j + 1) & (s->cap - 1)) {
		if (s->v[j] == k)
			return 1;
		if (!s->v[j]) {
			if (add) {
				s->v[j] = k;
				s->n++;
			}
			return 0;
		}
	}
}

uint64_t srt_trace_ceiling(const struct srt_trace *t, size_t n, uint32_t P)
{
	struct kset seen = {0};
	uint64_t total = 0;
	uint64_t *chain = NULL;
	size_t chain_cap = 0;
	for (size_t i = 0; i < n && i < t->n; i++) {
		const struct srt_trace_req *r = &t->reqs[i];
		if (r->n_hash > chain_cap) {
			chain_cap = r->n_hash;
			chain = realloc(chain, chain_cap * sizeof(*chain));
		}
		uint64_t h = 0x5eed;
		for (uint32_t b = 0; b < r->n_hash; b++)
			chain[b] = h = mix(h ^ mix(r->hash_ids[b] + 1));
		uint64_t pages = r->input_length / P, hit = 0;
		int run = 1;
		for (uint64_t p = 0; p < pages; p++) {
			uint64_t last_block = ((p + 1) * P - 1) / SRT_TRACE_BLOCK;
			uint64_t key = mix(chain[last_block] ^ mix(p * 0x2545f4914f6cdd1dull));
			if (run && kset_has_or_add(&seen, key, 0))
				hit = p + 1;
			else
				run = 0;
			kset_has_or_add(&seen, key, 1);
		}
		total += hit * P;
	}
	free(chain);
	free(seen.v);
	return total;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int srt_trace_replay(struct srt_rdx_cache *c, const struct srt_trace *t,
		     const struct srt_replay_opts *o, struct srt_replay_result *res, char *err,
		     size_t errlen)
{
	memset(res, 0, sizeof(*res));
	uint64_t chunk = o && o->chunk_tokens ? o->chunk_tokens : 8192;
	size_t n = o && o->limit && o->limit < t->n ? o->limit : t->n;
	FILE *prog = o ? o->progress : NULL;
	struct srt_tmgr *tm = o ? o->tiers : NULL;
	int tty = prog && isatty(fileno(prog));
	uint64_t maxin = 0;
	for (size_t i = 0; i < n; i++)
		if (t->reqs[i].input_length > maxin)
			maxin = t->reqs[i].input_length;
	int32_t *tok = malloc((maxin + 1) * sizeof(int32_t));
	if (!tok) {
		snprintf(err, errlen, "out of memory for %llu tokens", (unsigned long long)maxin);
		return SRT_ENOMEM;
	}
	char why[512];
	int rc = 0;
	double t0 = now_s(), last = t0;
	size_t next_pct = 1;
	for (size_t i = 0; i < n && !rc; i++) {
		const struct srt_trace_req *q = &t->reqs[i];
		srt_trace_input_tokens(q, tok);
		struct srt_rdx_req *r;
		struct srt_tmgr_req *tr = NULL;
		uint64_t hit;
		if (tm) {
			struct srt_tmgr_hit th;
			rc = srt_tmgr_req_start(tm, tok, q->input_length, &tr, &th, why, sizeof(why));
			if (!rc)
				rc = srt_tmgr_req_wait(tr, &th, why, sizeof(why));
			if (rc) {
				srt_tmgr_req_free(tr);
				break;
			}
			r = srt_tmgr_req_rdx(tr);
			hit = th.l1_tokens + th.l2_tokens + th.l3_tokens;
			res->strict_hit_tokens += th.strict_tokens;
			if (th.remat_tokens) {
				res->remat_requests++;
				res->remat_lower_requests += th.remat_tokens > th.l1_tokens;
				res->remat_token_layers += th.remat_cost;
			}
		} else {
			uint64_t rt = 0;
			if ((rc = srt_rdx_req_start_remat(c, tok, q->input_length, o ? o->remat : NULL,
							  &r, &hit, &rt, why, sizeof(why))))
				break;
			res->strict_hit_tokens += srt_rdx_req_strict_hit(r);
			if (rt) {
				res->remat_requests++;
				res->remat_token_layers += o->remat->cost(o->remat->ctx, rt);
			}
		}
		/* cache-only: the TAIL pages "rebuilt" by rematerialization join the cache */
		srt_rdx_req_remat_done(r, 1);
		res->requests++;
		res->input_tokens += q->input_length;
		res->hit_tokens += hit;
		int step = 0;
		for (uint64_t pos = hit; pos < q->input_length && !step; pos += chunk) {
			uint64_t k = q->input_length - pos < chunk ? q->input_length - pos : chunk;
			step = srt_rdx_req_extend(r, tok + pos, k, why, sizeof(why));
			if (!step)
				step = tr ? srt_tmgr_req_commit(tr, NULL, why, sizeof(why))
					  : srt_rdx_req_commit(r, NULL, why, sizeof(why));
			if (!step)
				step = srt_rdx_req_release_window(r, NULL, why, sizeof(why));
		}
		uint64_t s = mix(i | (1ull << 62));
		for (uint64_t d = 0; d < q->output_length && !step; d++) {
			int32_t x = (int32_t)(mix(s + d) % SRT_TRACE_VOCAB);
			step = srt_rdx_req_extend(r, &x, 1, why, sizeof(why));
			if (!step)
				step = srt_rdx_req_release_window(r, NULL, why, sizeof(why));
		}
		if (!step) {
			step = tr ? srt_tmgr_req_finish(tr, NULL, why, sizeof(why))
				  : srt_rdx_req_finish(r, NULL, why, sizeof(why));
			res->output_tokens += q->output_length;
		}
		if (step == SRT_ENOMEM) {
			res->rejected++;
			srt_rdx_req_abort(r, NULL, 0);
			step = 0;
		}
		if (tr)
			srt_tmgr_req_free(tr);
		else
			srt_rdx_req_free(r);
		rc = step;
		double tn = now_s();
		if (prog && ((tty && tn - last > 0.2) || (!tty && (i + 1) * 10 >= next_pct * n))) {
			fprintf(prog, "%sreplay: %zu/%zu requests, hit %.2f%%%s", tty ? "\r" : "",
				i + 1, n,
				res->input_tokens ? 100.0 * res->hit_tokens / res->input_tokens : 0.0,
				tty ? "" : "\n");
			fflush(prog);
			last = tn;
			while (next_pct * n <= (i + 1) * 10)
				next_pct++;
		}
	}
	if (prog && tty)
		fprintf(prog, "\n");
	res->wall_s = now_s() - t0;
	free(tok);
	if (rc) {
		snprintf(err, errlen, "request %llu: %s", (unsigned long long)res->requests, why);
		return rc;
	}
	res->ceiling_tokens = srt_trace_ceiling(t, n, srt_rdx_page_tokens(c));
	return 0;
}
