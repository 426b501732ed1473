/* hca pools: window, C128 KV and the running block state. */
#include <stdio.h>

#include "hca.h"
#include "../common/kv_layout.h"

int hca_declare(struct hca_inst *s, const struct srt_plugin_args *args, char *why, size_t why_len)
{
	const struct srt_model_config *m = args->model;
	int rc = srt_attn_kv_bytes(srt_attn_option(args, "kv_dtype"), m->head_dim,
				   m->qk_rope_head_dim, &s->kv_bytes, why, why_len);
	if (rc)
		return rc;
	/*
	 * Online form of the per-channel softmax pooling of the 128-block being filled: running
	 * (max, sum, weighted kv) per channel = 3 * head_dim fp32. The entry of the page being
	 * written holds the state after its last written token (attention.h), which is what a
	 * decoding sequence continues from; at a whole-page end (P a multiple of 128) it is the
	 * empty-block state, so only the page before a resume point matters (TAIL 1).
	 */
	uint64_t state = 3u * (uint64_t)m->head_dim * 4u;
	srt_attn_pool(&s->pools[0], "hca.window", 1, SRT_RETAIN_TAIL, (uint32_t)m->sliding_window,
		      s->kv_bytes, s->layers, s->n_layers);
	srt_attn_pool(&s->pools[1], "hca.c128_kv", 128, SRT_RETAIN_ALL, 0, s->kv_bytes, s->layers,
		      s->n_layers);
	srt_attn_pool(&s->pools[2], "hca.c128_state", SRT_RATIO_PAGE, SRT_RETAIN_TAIL, 1, state,
		      s->layers, s->n_layers);
	s->n_pools = 3;
	return 0;
}
