/*
 * Deterministic synthetic DeepSeek-V4 checkpoints (`shadowrt gen-model`): config.json plus
 * safetensors with the real tensor names, shapes and dtypes (dsv4_tensors.h), so tests and
 * benchmarks exercise the real loader.
 *
 * Values. Every tensor is a pure function of (seed, tensor name, element index): a splitmix64
 * counter stream keyed by the name, so the bytes do not depend on threading, shard layout or
 * the order tensors are written in. "Normal" draws are Irwin-Hall sums of four 16-bit uniforms
 * rescaled to mean 0, variance 1 (bounded at +-3.46, so no outlier can saturate a format), in
 * plain float32 arithmetic (bit-identical on every IEEE machine). Scales were chosen so that a
 * forward pass stays finite and the logits are spread but not degenerate:
 *   - linears (FP8, FP4 and bf16) ~ N(0, 1/fan_in): unit-RMS inputs give unit-RMS outputs;
 *     FP8 weights get their UE8M0 128x128 block scales and FP4 experts their per-32 scales from
 *     the amax of each block (srt_quant_weight_fp8/fp4), as a real quantiser produces them;
 *   - embed ~ N(0, 1); head ~ N(0, 1/hidden): logits of a normalised state have std ~1;
 *   - RMSNorm weights 1 + 0.05 N; attention sinks 0.5 N; compressor ape 0.1 N;
 *   - hc_*_fn ~ N(0, 0.01/cols) (mixing logits ~0.1), hc_*_base 0.05 N, hc_*_scale
 *     1 + 0.1 N: pre ~ 0.5, post ~ 1, Sinkhorn mixing near uniform (streams stay comparable);
 *   - router bias 0.01 N; tid2eid: for every token, experts_per_tok DISTINCT experts drawn
 *     uniformly (partial Fisher-Yates).
 *
 * Thread safety: reentrant.
 */
#ifndef SRT_CKPT_SYNTH_H
#define SRT_CKPT_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shadowrt/model.h>

#include "ckpt/safetensors.h"

#define SRT_CK_SYNTH_SEED 0x5eed2026ull            /* the default seed */
#define SRT_CK_SYNTH_SHARD_BYTES ((uint64_t)4 << 30) /* default shard target: 4 GiB */

struct srt_ck_synth_opts {
	uint64_t seed;
	uint64_t shard_bytes; /* 0: one file */
	srt_ck_progress_fn progress; /* may be NULL */
	void *user;
	/* Tokenizer to write next to the weights (tokenizer.json, tokenizer_config.json), as a
	 * real checkpoint has them: copied from this directory; NULL = the shipped DeepSeek-V4
	 * tokenizer when cfg->vocab_size is its 129,280 (SRT_TOK_DSV4_VOCAB), else none (the
	 * checkpoint then works on token ids). */
	const char *tokenizer_dir;
	bool no_tokenizer; /* write no tokenizer at all */
};

/* Total bytes of the safetensors data a config produces (headers excluded). */
int srt_ck_synth_bytes(const struct srt_model_config *cfg, uint64_t *out, char *err,
		       size_t errlen);

/*
 * Write config.json and the safetensors files of cfg into the existing directory dir (each file
 * atomically; see srt_ck_write). Refuses nothing by size: callers decide what is absurd.
 * Returns 0 or a negative SRT_E* code with a message.
 */
int srt_ck_synth_write(const struct srt_model_config *cfg, const char *dir,
		       const struct srt_ck_synth_opts *opts, char *err, size_t errlen);

/* config.json text of cfg (DeepSeek's keys), malloc'd into *out (free() it). */
int srt_ck_config_json(const struct srt_model_config *cfg, char **out, char *err, size_t errlen);

#endif
