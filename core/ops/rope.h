/*
 * core/ops/rope.h — interleaved rotary position embedding with DeepSeek's YaRN frequencies.
 *
 * Layout: RoPE acts on the LAST rope_dim dims of a head vector, in adjacent pairs
 * (x[2i], x[2i+1]) treated as the complex number x[2i] + i·x[2i+1] ("interleaved"); pair i is
 * multiplied by e^{i·pos·f_i} (e^{-i·pos·f_i} for the inverse, the de-rotation of the attention
 * output). Callers pass a pointer to the rope part (head + head_dim - rope_dim).
 *
 * Frequencies (spec §2.2, reference `precompute_freqs_cis`), all in float32:
 *   f_i = 1 / theta^(2i / rope_dim),  i = 0 .. rope_dim/2 - 1
 * with YaRN (compressed layers only):
 *   [low, high] = correction range of DeepSeek-V3's find_correction_range:
 *     corr(r) = rope_dim * ln(orig / (r * 2π)) / (2 ln theta)
 *     low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), rope_dim - 1)
 *   ramp_i   = clamp((i - low) / (high - low), 0, 1)   (high += 0.001 if equal)
 *   smooth_i = 1 - ramp_i
 *   f_i'     = f_i / factor * (1 - smooth_i) + f_i * smooth_i
 * No magnitude (mscale) correction. E.g. theta 160000, rope_dim 64, orig 65536, beta 32/1:
 * low 15, high 25.
 * Angles are pos·f_i rounded to float32 (as torch.outer in float32), then cos/sin of that
 * float32 angle, correctly rounded. Pure, thread-safe, no allocation.
 */
#ifndef SRT_OPS_ROPE_H
#define SRT_OPS_ROPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct srt_rope_yarn {
	double factor;             /* rope_scaling.factor, e.g. 16 */
	int64_t original_max_pos;  /* original_max_position_embeddings, e.g. 65536; 0 = no YaRN */
	double beta_fast;          /* e.g. 32 */
	double beta_slow;          /* e.g. 1 */
};

/* The YaRN correction range (low, high) for these parameters, as above. */
void srt_rope_correction_range(size_t rope_dim, double theta, int64_t original_max_pos,
			       double beta_fast, double beta_slow, int *low, int *high);
/* Fill freqs[0 .. rope_dim/2) (rope_dim even). `yarn` NULL or original_max_pos <= 0: plain
 * RoPE (SWA-only layers, theta = rope_theta). */
void srt_rope_freqs(float *freqs, size_t rope_dim, double theta,
		    const struct srt_rope_yarn *yarn);
/* cos/sin of the float32 angle pos*freqs[i] for the npairs pairs. */
void srt_rope_cos_sin(const float *freqs, size_t npairs, int64_t pos, float *cos_out,
		      float *sin_out);
/* Rotate the rope_dim floats at x (rope_dim even) by precomputed cos/sin (rope_dim/2 each);
 * `inverse` applies the conjugate rotation. Float32 complex product (a·c − b·s, a·s + b·c),
 * no fused multiply-add. */
void srt_rope_apply(float *x, size_t rope_dim, const float *cos_v, const float *sin_v,
		    bool inverse);
/* Convenience: srt_rope_cos_sin at `pos` then srt_rope_apply (rope_dim <= 1024, asserted). */
void srt_rope_apply_pos(float *x, size_t rope_dim, const float *freqs, int64_t pos,
			bool inverse);

#endif /* SRT_OPS_ROPE_H */
