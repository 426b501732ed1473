#include "exec/sampler.h"

#include <math.h>
#include <stdlib.h>

/* splitmix64: tiny, full-period, and good enough for sampling. */
static uint64_t next_u64(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double next_unit(uint64_t *state)
{
	return (double)(next_u64(state) >> 11) * (1.0 / 9007199254740992.0);
}

void srt_sampler_init(struct srt_sampler *s, float temperature, float top_p, uint64_t seed)
{
	s->temperature = temperature;
	s->top_p = (top_p > 0.0f && top_p <= 1.0f) ? top_p : 1.0f;
	s->state = seed;
}

int32_t srt_argmax(const float *logits, int32_t n)
{
	int32_t best = -1;
	for (int32_t i = 0; i < n; i++) {
		if (isnan(logits[i]))
			continue;
		if (best < 0 || logits[i] > logits[best])
			best = i;
	}
	return best < 0 ? 0 : best;
}

struct cand {
	float p;
	int32_t id;
};

static int cand_desc(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->p != y->p)
		return x->p < y->p ? 1 : -1;
	return (x->id > y->id) - (x->id < y->id);
}

int32_t srt_sample(struct srt_sampler *s, const float *logits, int32_t n, void *scratch)
{
	if (s->temperature <= 0.0f || n <= 1)
		return srt_argmax(logits, n);

	struct cand *c = scratch;
	int32_t best = srt_argmax(logits, n);
	double maxv = logits[best], sum = 0.0;
	/* every logit NaN (maxv NaN), a +inf logit or only -inf: no distribution to draw from;
	 * the argmax is the only defined answer (exp(x - maxv) would be NaN everywhere and the
	 * nucleus empty) */
	if (!isfinite(maxv))
		return best;
	int32_t m = 0;
	for (int32_t i = 0; i < n; i++) {
		if (isnan(logits[i]))
			continue;
		double e = exp(((double)logits[i] - maxv) / s->temperature);
		c[m].p = (float)e;
		c[m].id = i;
		sum += e;
		m++;
	}
	qsort(c, (size_t)m, sizeof(*c), cand_desc);

	/* Keep the smallest prefix whose probability reaches top_p (at least one token). */
	double keep = 0.0;
	int32_t k = 0;
	while (k < m) {
		keep += c[k].p;
		k++;
		if (keep >= s->top_p * sum)
			break;
	}
	double r = next_unit(&s->state) * keep, acc = 0.0;
	for (int32_t i = 0; i < k; i++) {
		acc += c[i].p;
		if (r < acc)
			return c[i].id;
	}
	return c[k - 1].id;
}
