/* Interleaved RoPE with DeepSeek's YaRN frequency blend (see rope.h). */
#include "ops/rope.h"

#include <assert.h>
#include <math.h>

static const double two_pi = 6.283185307179586476925286766559;

/* The dimension at which a frequency completes `rotations` turns over `max_pos` positions. */
static double correction_dim(double rotations, size_t rope_dim, double theta, int64_t max_pos)
{
	return (double)rope_dim * log((double)max_pos / (rotations * two_pi)) / (2.0 * log(theta));
}

void srt_rope_correction_range(size_t rope_dim, double theta, int64_t original_max_pos,
			       double beta_fast, double beta_slow, int *low, int *high)
{
	double lo = floor(correction_dim(beta_fast, rope_dim, theta, original_max_pos));
	double hi = ceil(correction_dim(beta_slow, rope_dim, theta, original_max_pos));
	*low = lo > 0.0 ? (int)lo : 0;
	*high = hi < (double)(rope_dim - 1) ? (int)hi : (int)(rope_dim - 1);
}

void srt_rope_freqs(float *freqs, size_t rope_dim, double theta,
		    const struct srt_rope_yarn *yarn)
{
	assert(rope_dim >= 2 && rope_dim % 2 == 0);
	size_t npairs = rope_dim / 2;
	for (size_t i = 0; i < npairs; i++) {
		/* float32 like the reference: exponent (2i)/dim in float32, theta^e, reciprocal */
		float e = (float)(2 * i) / (float)rope_dim;
		float p = (float)pow(theta, (double)e);
		freqs[i] = 1.0f / p;
	}
	if (!yarn || yarn->original_max_pos <= 0)
		return;
	int low, high;
	srt_rope_correction_range(rope_dim, theta, yarn->original_max_pos, yarn->beta_fast,
				  yarn->beta_slow, &low, &high);
	float lo = (float)low, hi = (float)high;
	if (lo == hi)
		hi += 0.001f;
	float factor = (float)yarn->factor;
	for (size_t i = 0; i < npairs; i++) {
		float ramp = ((float)i - lo) / (hi - lo);
		ramp = ramp < 0.0f ? 0.0f : (ramp > 1.0f ? 1.0f : ramp);
		float smooth = 1.0f - ramp;
		freqs[i] = freqs[i] / factor * (1.0f - smooth) + freqs[i] * smooth;
	}
}

void srt_rope_cos_sin(const float *freqs, size_t npairs, int64_t pos, float *cos_out,
		      float *sin_out)
{
	float p = (float)pos;
	for (size_t i = 0; i < npairs; i++) {
		float angle = p * freqs[i];
		cos_out[i] = (float)cos((double)angle);
		sin_out[i] = (float)sin((double)angle);
	}
}

void srt_rope_apply(float *x, size_t rope_dim, const float *cos_v, const float *sin_v,
		    bool inverse)
{
	assert(rope_dim % 2 == 0);
	for (size_t i = 0; i < rope_dim / 2; i++) {
		float a = x[2 * i], b = x[2 * i + 1];
		float c = cos_v[i], s = inverse ? -sin_v[i] : sin_v[i];
		x[2 * i] = a * c - b * s;
		x[2 * i + 1] = a * s + b * c;
	}
}

void srt_rope_apply_pos(float *x, size_t rope_dim, const float *freqs, int64_t pos,
			bool inverse)
{
	float c[512], s[512];
	assert(rope_dim % 2 == 0 && rope_dim / 2 <= 512);
	srt_rope_cos_sin(freqs, rope_dim / 2, pos, c, s);
	srt_rope_apply(x, rope_dim, c, s, inverse);
}
