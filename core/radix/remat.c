/* Window rematerialization arithmetic (remat.h). */
#include "radix/remat.h"

uint64_t srt_remat_top(const struct srt_remat_geom *g, uint64_t t)
{
	uint64_t k = (uint64_t)g->tail_pages * g->page_tokens;
	return t > k ? t - k : 0;
}

uint64_t srt_remat_lo(const struct srt_remat_geom *g, uint64_t t, uint32_t l)
{
	uint64_t top = srt_remat_top(g, t);
	uint64_t back = (uint64_t)(g->window ? g->window - 1 : 0) * (uint64_t)(g->layers - 1 - l);
	return top > back ? top - back : 0;
}

uint64_t srt_remat_cost(const struct srt_remat_geom *g, uint64_t t)
{
	uint64_t s = 0;
	for (uint32_t l = 0; l < g->layers; l++)
		s += t - srt_remat_lo(g, t, l);
	return s;
}
