/*
 * Model description: a DeepSeek-V4 `config.json` or a YAML preset -> struct srt_model_config.
 *
 * Sources, in the order srt_model_config_load tries them:
 *   - a bare name ("tiny", "deepseek-v4-flash", no '/' and no extension): an EMBEDDED preset,
 *     compiled into the library from conf/models/<name>.yaml, so no file is needed at run time;
 *   - a directory: its config.json (a Hugging Face checkpoint directory);
 *   - a file (.yaml, .yml, .json): read as YAML (JSON is a subset of YAML).
 *
 * Keys are the literal Hugging Face config.json keys (spec section 1). Keys that real configs
 * carry but that do not change the math (architectures, torch_dtype, transformers_version, ...)
 * are accepted and ignored; every other unknown key is an error. Every value is range-checked
 * (srt_model_config_validate). Errors name the file, the line and the key, and say what was
 * expected, e.g.
 *   "conf/x.yaml:12: key 'compress_ratios': has 43 entries, expected num_hidden_layers (43) +
 *    num_nextn_predict_layers (1) = 44"
 *
 * Thread safety: every function here is reentrant (no global state; libcyaml/libyaml keep none).
 */
#ifndef SRT_CONFIG_MODEL_CONFIG_H
#define SRT_CONFIG_MODEL_CONFIG_H

#include <stddef.h>

#include <shadowrt/model.h>

/*
 * Load and validate a model description into *out (fully overwritten; out->struct_size set,
 * out->name = the preset name, the checkpoint directory's name or the file's stem).
 * Returns 0, or SRT_ENOENT (no such preset/file; the message lists the presets),
 * SRT_EIO (cannot read), SRT_EINVAL (syntax, unknown key, wrong type, out of range);
 * on error err[errlen] holds a one-line message and *out is zeroed.
 */
int srt_model_config_load(const char *preset_or_path, struct srt_model_config *out, char *err,
			  size_t errlen);

/*
 * Same, from YAML/JSON text in memory. `origin` names the text in messages ("<stdin>", a path).
 * `name` goes to out->name (may be NULL: "model").
 */
int srt_model_config_load_text(const char *text, size_t len, const char *origin,
			       const char *name, struct srt_model_config *out, char *err,
			       size_t errlen);

/* NULL-terminated names of the embedded presets, sorted. Static storage. */
const char *const *srt_model_presets(void);

/*
 * Check every invariant the kernels rely on (spec section 1 and the block layouts of section 7):
 * widths quantised in blocks of 128 are multiples of 128, head_dim - qk_rope_head_dim is a
 * multiple of 64, compress ratios are 0 or powers of two and there are num_hidden_layers +
 * num_nextn_predict_layers of them, index_head_dim is a power of two, and so on.
 * Returns 0 or SRT_EINVAL with "key 'k': <what is wrong, what was expected>" in err.
 */
int srt_model_config_validate(const struct srt_model_config *c, char *err, size_t errlen);

/*
 * Compress ratio of `layer` (0 = window only, 4 = CSA, 128 = HCA, ...). Layers
 * num_hidden_layers .. n_compress_ratios-1 are the MTP blocks. Asserts 0 <= layer <
 * n_compress_ratios.
 */
int srt_model_layer_ratio(const struct srt_model_config *c, int layer);

/* 1 when `layer`'s MoE routes by token-id hash (layer < num_hash_layers), else 0. MTP blocks
 * always route by score. */
int srt_model_layer_hash_routed(const struct srt_model_config *c, int layer);

/* Layer schedule counts over the num_hidden_layers main blocks (MTP excluded). */
struct srt_model_schedule {
	int window_only; /* ratio 0 */
	int csa;         /* ratio 4 */
	int hca;         /* ratio 128 */
	int other;       /* any other power-of-two ratio (research plugins) */
	int hash_routed;
	int score_routed;
	int mtp;         /* num_nextn_predict_layers */
};
void srt_model_schedule_count(const struct srt_model_config *c, struct srt_model_schedule *out);

#endif /* SRT_CONFIG_MODEL_CONFIG_H */
