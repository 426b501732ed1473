/* swa pools: the raw sliding window of window-only layers. */
#include <stdio.h>

#include "swa.h"
#include "../common/kv_layout.h"

int swa_declare(struct swa_inst *s, const struct srt_plugin_args *args, char *why, size_t why_len)
{
	const struct srt_model_config *m = args->model;
	int rc = srt_attn_kv_bytes(srt_attn_option(args, "kv_dtype"), m->head_dim,
				   m->qk_rope_head_dim, &s->kv_bytes, why, why_len);
	if (rc)
		return rc;
	/* window: one entry per token; a resume at t needs [t - sliding_window, t) */
	srt_attn_pool(&s->pools[0], "swa.window", 1, SRT_RETAIN_TAIL, (uint32_t)m->sliding_window,
		      s->kv_bytes, s->layers, s->n_layers);
	s->n_pools = 1;
	return 0;
}
