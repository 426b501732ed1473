/* csa pools: window, C4 KV, C4 indexer keys and the compressor carry state. */
#include <stdio.h>

#include "csa.h"
#include "../common/kv_layout.h"

int csa_declare(struct csa_inst *s, const struct srt_plugin_args *args, char *why, size_t why_len)
{
	const struct srt_model_config *m = args->model;
	const char *kv = srt_attn_option(args, "kv_dtype");
	const char *ix = srt_attn_option(args, "index_dtype");
	int rc = srt_attn_kv_bytes(kv, m->head_dim, m->qk_rope_head_dim, &s->kv_bytes, why, why_len);
	if (!rc)
		rc = srt_attn_index_bytes(ix ? ix : kv, m->index_head_dim, &s->index_bytes, why,
					  why_len);
	if (rc)
		return rc;
	/*
	 * Carry state at a page end (spec 2.3): the main compressor's 8 rows (4 previous block +
	 * 4 current) of (kv, score), each 2 * head_dim fp32, and the indexer compressor's 8 rows
	 * of (kv, score), each 2 * index_head_dim fp32. With P a multiple of 4 a page ends on a
	 * block end, but the overlapping window reads the previous block: so the state travels
	 * with the page (TAIL 1: only the page just before the resume point is needed).
	 */
	uint64_t state = 8u * 2u * (2u * (uint64_t)m->head_dim) * 4u +
			 8u * 2u * (2u * (uint64_t)m->index_head_dim) * 4u;
	srt_attn_pool(&s->pools[0], "csa.window", 1, SRT_RETAIN_TAIL, (uint32_t)m->sliding_window,
		      s->kv_bytes, s->layers, s->n_layers);
	srt_attn_pool(&s->pools[1], "csa.c4_kv", 4, SRT_RETAIN_ALL, 0, s->kv_bytes, s->layers,
		      s->n_layers);
	srt_attn_pool(&s->pools[2], "csa.c4_index", 4, SRT_RETAIN_ALL, 0, s->index_bytes,
		      s->layers, s->n_layers);
	srt_attn_pool(&s->pools[3], "csa.c4_state", SRT_RATIO_PAGE, SRT_RETAIN_TAIL, 1, state,
		      s->layers, s->n_layers);
	s->n_pools = 4;
	return 0;
}
