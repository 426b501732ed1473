/*
 * core/ops/hadamard.h — normalized Walsh-Hadamard transform.
 *
 * y = H_n x * n^-1/2 with H_n in natural (Sylvester) order, H_1 = [1], H_2n = [[H, H], [H, -H]],
 * i.e. H[i][j] = (-1)^popcount(i & j): the transform of `fast_hadamard_transform` and of the
 * reference's `hadamard_transform(x, scale=n**-0.5)`. Computed in place in float32 by log2(n)
 * butterfly passes in a fixed order, then one multiplication by n^-1/2. Pure, thread-safe.
 */
#ifndef SRT_OPS_HADAMARD_H
#define SRT_OPS_HADAMARD_H

#include <stddef.h>

/* In place on x[0..n); n must be a power of two >= 1 (asserted). */
void srt_hadamard(float *x, size_t n);
/* Apply to `count` consecutive vectors of n floats (e.g. every head of a query). */
void srt_hadamard_n(float *x, size_t n, size_t count);

#endif /* SRT_OPS_HADAMARD_H */
