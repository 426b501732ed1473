/*
 * Divergence between two sets of logits over the same positions (teacher-forced: both sides
 * saw the same tokens), as `ab` and `check-plugin` report it.
 *
 * Per position p (rows a[p][0..V), b[p][0..V)):
 *   kl[p]      KL(softmax(a) || softmax(b)) in nats, computed in double;
 *   maxabs[p]  max_v |a - b|;
 *   top1[p]    1 when argmax a = argmax b (ties to the lower index), else 0.
 * Summary: mean and max KL, top-1 agreement (fraction), max |Δlogit|, the first position whose
 * logits differ at all (bitwise), the first whose top-1 differs, and whether every bit is equal.
 *
 * Thread safety: pure functions.
 */
#ifndef SRT_CHECK_DIVERGE_H
#define SRT_CHECK_DIVERGE_H

#include <stddef.h>
#include <stdint.h>

struct srt_div {
	uint64_t positions;
	double kl_mean, kl_max;
	double top1_agree; /* fraction in [0, 1] */
	double max_abs;
	int64_t first_diff;  /* first position with any bit different, -1 when none */
	int64_t first_top1;  /* first position whose top-1 differs, -1 when none */
	int bitwise_equal;   /* 1 when every logit is bit-identical */
};

/*
 * Compare n positions of V logits. kl, maxabs and top1 (each [n], may be NULL) receive the
 * per-position values. Non-finite logits count as different and make KL infinite.
 */
void srt_div_compare(const float *a, const float *b, uint64_t n, int32_t V, struct srt_div *out,
		     double *kl, double *maxabs, uint8_t *top1);

/* Index of the largest of x[0..V) (the lower index on ties; 0 when none is finite). */
int32_t srt_div_argmax(const float *x, int32_t V);

/* Deterministic token ids in [2, vocab): xorshift from seed (the workload of the checks). */
void srt_div_prompt(int32_t *out, uint64_t n, int32_t vocab, uint64_t seed);

#endif
