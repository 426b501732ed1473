/* RMSNorm in float32 (see norm.h). */
#include "ops/norm.h"

#include <math.h>

#include "ops/fp.h"

float srt_sumsq(const float *x, size_t n)
{
	float acc[8] = {0};
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (size_t j = 0; j < 8; j++)
			acc[j] += x[i + j] * x[i + j];
	for (; i < n; i++)
		acc[i & 7] += x[i] * x[i];
	return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* 1 / sqrt(mean(x^2) + eps), as torch.rsqrt(var + eps) in float32. */
static float rms_inv(const float *x, size_t n, float eps)
{
	float var = srt_sumsq(x, n) / (float)n;
	return 1.0f / sqrtf(var + eps);
}

void srt_rmsnorm(const float *x, float *y, size_t n, float eps)
{
	float r = rms_inv(x, n, eps);
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] * r;
}

void srt_rmsnorm_f32w(const float *x, float *y, size_t n, const float *w, float eps)
{
	float r = rms_inv(x, n, eps);
	for (size_t i = 0; i < n; i++)
		y[i] = w[i] * (x[i] * r);
}

void srt_rmsnorm_bf16w(const float *x, float *y, size_t n, const uint16_t *w, float eps)
{
	float r = rms_inv(x, n, eps);
	for (size_t i = 0; i < n; i++)
		y[i] = srt_bf16_to_f32(w[i]) * (x[i] * r);
}
