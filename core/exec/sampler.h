/*
 * Token sampling from a row of logits: greedy (argmax, ties toward the lower token id) or
 * temperature + top-p (nucleus) with a seeded, reproducible generator.
 *
 * A sampler is a small value owned by the caller; not thread-safe (one per sequence).
 */
#ifndef SRT_EXEC_SAMPLER_H
#define SRT_EXEC_SAMPLER_H

#include <stdint.h>

struct srt_sampler {
	float temperature; /* <= 0: greedy */
	float top_p;       /* (0, 1]; 1 keeps every token */
	uint64_t state;    /* generator state, from the seed */
};

/* Set up a sampler. temperature <= 0 means greedy; top_p outside (0, 1] is clamped to 1. */
void srt_sampler_init(struct srt_sampler *s, float temperature, float top_p, uint64_t seed);

/* Index of the largest logit; NaN never wins; ties go to the lower index. */
int32_t srt_argmax(const float *logits, int32_t n);

/*
 * Pick the next token. scratch must hold 2 * n floats' worth (n floats + n int32) and is
 * overwritten. Returns the token id, always in [0, n). Logits that are NaN are never drawn;
 * when no logit is finite-valued at the top (all NaN, a +inf, only -inf) the result is the
 * argmax (0 when all are NaN).
 */
int32_t srt_sample(struct srt_sampler *s, const float *logits, int32_t n, void *scratch);

#endif
