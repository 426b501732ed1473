/* Logits divergence (see diverge.h). */
#include "check/diverge.h"

#include <math.h>
#include <string.h>

int32_t srt_div_argmax(const float *x, int32_t V)
{
	int32_t best = 0;
	float bv = -INFINITY;
	for (int32_t v = 0; v < V; v++)
		if (x[v] > bv) {
			bv = x[v];
			best = v;
		}
	return best;
}

/* log-sum-exp of x in double */
static double lse(const float *x, int32_t V)
{
	double m = -INFINITY, s = 0;
	for (int32_t v = 0; v < V; v++)
		if (x[v] > m)
			m = x[v];
	if (!isfinite(m))
		return m;
	for (int32_t v = 0; v < V; v++)
		s += exp((double)x[v] - m);
	return m + log(s);
}

void srt_div_compare(const float *a, const float *b, uint64_t n, int32_t V, struct srt_div *out,
		     double *kl, double *maxabs, uint8_t *top1)
{
	memset(out, 0, sizeof(*out));
	out->positions = n;
	out->first_diff = -1;
	out->first_top1 = -1;
	uint64_t agree = 0;
	for (uint64_t p = 0; p < n; p++) {
		const float *x = a + p * (size_t)V, *y = b + p * (size_t)V;
		int same = !memcmp(x, y, sizeof(float) * (size_t)V);
		if (!same && out->first_diff < 0)
			out->first_diff = (int64_t)p;
		double ma = 0, k = 0;
		if (!same) {
			double la = lse(x, V), lb = lse(y, V);
			for (int32_t v = 0; v < V; v++) {
				double d = fabs((double)x[v] - (double)y[v]);
				if (!(d <= ma))
					ma = isnan(d) ? INFINITY : d;
				double pa = exp((double)x[v] - la);
				if (pa > 0)
					k += pa * (((double)x[v] - la) - ((double)y[v] - lb));
			}
			if (!isfinite(la) || !isfinite(lb) || isnan(k))
				k = INFINITY;
			if (k < 0)
				k = 0; /* rounding */
		}
		uint8_t t = srt_div_argmax(x, V) == srt_div_argmax(y, V);
		agree += t;
		if (!t && out->first_top1 < 0)
			out->first_top1 = (int64_t)p;
		out->kl_mean += k;
		if (k > out->kl_max)
			out->kl_max = k;
		if (ma > out->max_abs)
			out->max_abs = ma;
		if (kl)
			kl[p] = k;
		if (maxabs)
			maxabs[p] = ma;
		if (top1)
			top1[p] = t;
	}
	if (n) {
		out->kl_mean /= (double)n;
		out->top1_agree = (double)agree / (double)n;
	}
	out->bitwise_equal = out->first_diff < 0;
}

void srt_div_prompt(int32_t *out, uint64_t n, int32_t vocab, uint64_t seed)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	for (uint64_t i = 0; i < n; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		out[i] = 2 + (int32_t)(s % (uint64_t)(vocab - 2));
	}
}
