/* Normalized Walsh-Hadamard transform in natural order (see hadamard.h). */
#include "ops/hadamard.h"

#include <assert.h>
#include <math.h>

void srt_hadamard(float *x, size_t n)
{
	assert(n >= 1 && (n & (n - 1)) == 0 && "srt_hadamard: n must be a power of two");
	/* Pass h combines elements h apart: (a, b) -> (a + b, a - b). After the pass for h,
	 * the butterflies have built H_2h on every aligned group of 2h elements; the natural
	 * (Sylvester) order follows from combining the low index bit first. */
	for (size_t h = 1; h < n; h *= 2) {
		for (size_t i = 0; i < n; i += 2 * h) {
			for (size_t j = i; j < i + h; j++) {
				float a = x[j], b = x[j + h];
				x[j] = a + b;
				x[j + h] = a - b;
			}
		}
	}
	float scale = (float)(1.0 / sqrt((double)n));
	for (size_t i = 0; i < n; i++)
		x[i] *= scale;
}

void srt_hadamard_n(float *x, size_t n, size_t count)
{
	for (size_t c = 0; c < count; c++)
		srt_hadamard(x + c * n, n);
}
