/*
 * Test-side helpers shared by the moe and residual suites: the fixture (host, registry, tiny
 * checkpoint, model config), random inputs, and running the NumPy reference's `piece` CLI.
 */
#ifndef TEST_MOE_REF_H
#define TEST_MOE_REF_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/shadowrt.h>

#include "ckpt/safetensors.h"
#include "plugin/registry.h"

struct tfx {
	struct srt_host *host;
	struct srt_registry *reg;
	struct srt_ckpt *ck;
	struct srt_weights w;
	struct srt_model_config cfg;
	char model_dir[512];
};

/* Open everything (ck_assert on failure). The model is $SRT_BUILD_DIR/models/tiny. */
void tfx_open(struct tfx *f);
void tfx_close(struct tfx *f);

/* Instantiate plugin `name` of `kind` for `layers` (NULL: all) in `profile`; asserts. */
struct srt_instance *tfx_instance(struct tfx *f, enum srt_kind kind, const char *name,
				  uint32_t profile, const int32_t *layers, uint32_t n_layers);
/* Same but returns the create status and leaves why filled; *out NULL on failure. */
int tfx_try_instance(struct tfx *f, enum srt_kind kind, const char *name, uint32_t profile,
		     const int32_t *layers, uint32_t n_layers, struct srt_instance **out,
		     char *why, size_t why_len);

/* Deterministic pseudo-random floats in [-a, a], optionally rounded to bf16. */
void tfx_rand(float *x, size_t n, uint64_t seed, float a, int bf16);

/* Tensor as double array (BF16/F32 only); caller frees. Asserts presence. */
double *tfx_tensor_f64(struct tfx *f, const char *name, size_t *n);

/* 1 when tests/reference/dsv4_ref.py exists. */
int tfx_have_numpy_ref(void);
/*
 * Run `dsv4_ref.py piece <piece> --model DIR --layer L --profile P --in IN --out OUT
 * [--tokens-file TOK] [--sub SUB]` on raw float32 input `in` (n_in floats) and read n_out floats of output.
 * tokens (n_tok int32) may be NULL. Returns the exit status (0 ok).
 */
int tfx_run_piece(struct tfx *f, const char *piece, int layer, const char *profile,
		  const float *in, size_t n_in, const int32_t *tokens, size_t n_tok, float *out,
		  size_t n_out, const char *sub);

/* Units in the last place of bf16 between two bf16-representable floats (|a - b| / ulp). */
double tfx_bf16_ulps(float a, float b);

#endif
