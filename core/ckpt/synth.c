/* Deterministic synthetic DeepSeek-V4 checkpoints: see synth.h. */
#include "ckpt/synth.h"
#include "ckpt/ck_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt/dsv4_tensors.h"
#include "ops/fp.h"
#include "ops/quant.h"
#include "tok/tok.h"

/* ---- counter-based random numbers ---------------------------------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The stream key of one tensor: seed and name. */
static uint64_t tensor_key(uint64_t seed, const char *name)
{
	uint64_t h = 1469598103934665603ull;
	for (; *name; name++) {
		h ^= (unsigned char)*name;
		h *= 1099511628211ull;
	}
	return mix64(seed ^ mix64(h));
}

/* The i-th 64-bit draw of a stream (splitmix64 at counter i). */
static inline uint64_t draw(uint64_t key, uint64_t i)
{
	return mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull);
}

/* Approximately N(0, 1): Irwin-Hall of four 16-bit uniforms, mean 0, variance 1, |z| < 3.47. */
static inline float normal(uint64_t key, uint64_t i)
{
	uint64_t r = draw(key, i);
	float s = 0.0f;
	for (int k = 0; k < 4; k++)
		s += ((float)((r >> (16 * k)) & 0xffffu) + 0.5f) * (1.0f / 65536.0f);
	return (s - 2.0f) * 1.7320508f; /* sqrt(12 / 4) */
}

/* ---- per-tensor fill ----------------------------------------------------------------------- */

struct synth {
	const struct srt_ck_spec *specs;
	size_t n;
	uint64_t seed;
	/* Scales computed while filling the previous quantised weight (its .scale follows it). */
	size_t cached_for; /* spec index of the weight, or SIZE_MAX */
	uint8_t *scales;
	size_t scales_cap;
	float *slab;       /* float rows being quantised */
	size_t slab_cap;
	uint8_t *scratch;  /* codes when a scale must be regenerated on its own */
	size_t scratch_cap;
	srt_ck_progress_fn progress; /* the caller's */
	void *progress_user;
};

static int grow(void **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	void *np = realloc(*p, need);
	if (!np)
		return SRT_ENOMEM;
	*p = np;
	*cap = need;
	return 0;
}

static void fill_f32(float *dst, size_t n, uint64_t key, float mean, float sigma)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = mean + sigma * normal(key, i);
}

static void fill_bf16(uint16_t *dst, size_t n, uint64_t key, float mean, float sigma)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = srt_bf16_from_f32(mean + sigma * normal(key, i));
}

#define SLAB_ROWS 128 /* one FP8 block row: slabs never split a 128x128 block */

/*
 * Quantised weight of spec w (rows x cols logical, ~N(0, 1/cols)): codes into `codes` (FP8:
 * rows x cols bytes, FP4: rows x cols/2) and scales into s->scales.
 */
static int gen_quantised(struct synth *s, const struct srt_ck_spec *w, uint8_t *codes)
{
	const size_t rows = (size_t)w->rows, cols = (size_t)w->cols;
	const int fp4 = w->role == SRT_CK_FP4_W;
	const size_t nscale = fp4 ? rows * (cols / SRT_QUANT_FP4_BLOCK)
				  : ((rows + 127) / 128) * ((cols + 127) / 128);
	if (grow((void **)&s->scales, &s->scales_cap, nscale ? nscale : 1) ||
	    grow((void **)&s->slab, &s->slab_cap, SLAB_ROWS * cols * sizeof(float)))
		return SRT_ENOMEM;
	const uint64_t key = tensor_key(s->seed, w->name);
	const float sigma = 1.0f / sqrtf((float)cols);
	for (size_t r0 = 0; r0 < rows; r0 += SLAB_ROWS) {
		size_t h = rows - r0 < SLAB_ROWS ? rows - r0 : SLAB_ROWS;
		for (size_t i = 0; i < h * cols; i++)
			s->slab[i] = sigma * normal(key, r0 * cols + i);
		if (fp4)
			srt_quant_weight_fp4(s->slab, h, cols, codes + r0 * (cols / 2),
					     s->scales + r0 * (cols / SRT_QUANT_FP4_BLOCK));
		else
			srt_quant_weight_fp8(s->slab, h, cols, codes + r0 * cols,
					     s->scales + (r0 / 128) * ((cols + 127) / 128));
	}
	return 0;
}

static int fill(void *user, size_t index, void *buf, size_t nbytes, char *err, size_t errlen)
{
	struct synth *s = user;
	const struct srt_ck_spec *sp = &s->specs[index];
	const uint64_t key = tensor_key(s->seed, sp->name);
	const size_t n = nbytes / srt_ck_dtype_size(sp->dtype);
	const float inv_fan = 1.0f / sqrtf((float)(sp->cols > 0 ? sp->cols : 1));
	switch (sp->role) {
	case SRT_CK_EMBED:
		fill_bf16(buf, n, key, 0.0f, 1.0f);
		return 0;
	case SRT_CK_HEAD:
	case SRT_CK_LINEAR:
		fill_bf16(buf, n, key, 0.0f, inv_fan);
		return 0;
	case SRT_CK_NORM:
		fill_bf16(buf, n, key, 1.0f, 0.05f);
		return 0;
	case SRT_CK_HC_FN:
		fill_f32(buf, n, key, 0.0f, 0.1f * inv_fan);
		return 0;
	case SRT_CK_HC_BASE:
		fill_f32(buf, n, key, 0.0f, 0.05f);
		return 0;
	case SRT_CK_HC_SCALE:
		fill_f32(buf, n, key, 1.0f, 0.1f);
		return 0;
	case SRT_CK_SINK:
		fill_f32(buf, n, key, 0.0f, 0.5f);
		return 0;
	case SRT_CK_APE:
		fill_f32(buf, n, key, 0.0f, 0.1f);
		return 0;
	case SRT_CK_GATE_BIAS:
		fill_f32(buf, n, key, 0.0f, 0.01f);
		return 0;
	case SRT_CK_TID2EID: {
		const size_t vocab = (size_t)sp->shape[0], k = (size_t)sp->shape[1];
		const uint32_t E = (uint32_t)s->specs[index].cols; /* see synth_specs: experts */
		uint32_t *perm = malloc(E * sizeof(*perm));
		if (!perm)
			return errf(err, errlen, SRT_ENOMEM, "out of memory");
		int64_t *out = buf;
		for (size_t t = 0; t < vocab; t++) {
			for (uint32_t e = 0; e < E; e++)
				perm[e] = e;
			for (size_t j = 0; j < k; j++) {
				uint64_t r = draw(key, t * k + j);
				uint32_t pick = (uint32_t)j +
						(uint32_t)(((r >> 32) * (uint64_t)(E - (uint32_t)j)) >> 32);
				uint32_t tmp = perm[j];
				perm[j] = perm[pick];
				perm[pick] = tmp;
				out[t * k + j] = perm[j];
			}
		}
		free(perm);
		return 0;
	}
	case SRT_CK_FP8_W:
	case SRT_CK_FP4_W:
		if (gen_quantised(s, sp, buf))
			return errf(err, errlen, SRT_ENOMEM, "out of memory");
		s->cached_for = index;
		return 0;
	case SRT_CK_FP8_S:
	case SRT_CK_FP4_S: {
		const struct srt_ck_spec *w = index ? &s->specs[index - 1] : NULL;
		if (!w || (w->role != SRT_CK_FP8_W && w->role != SRT_CK_FP4_W))
			return errf(err, errlen, SRT_EINVAL, "scale without its weight before it");
		if (s->cached_for != index - 1) {
			size_t wbytes = (size_t)w->shape[0] * (size_t)w->shape[1];
			if (grow((void **)&s->scratch, &s->scratch_cap, wbytes ? wbytes : 1) ||
			    gen_quantised(s, w, s->scratch))
				return errf(err, errlen, SRT_ENOMEM, "out of memory");
			s->cached_for = index - 1;
		}
		memcpy(buf, s->scales, nbytes);
		return 0;
	}
	default:
		return errf(err, errlen, SRT_EINVAL, "no generator for role %u", sp->role);
	}
}

static void progress(void *user, uint64_t done, uint64_t total)
{
	struct synth *s = user;
	s->progress(s->progress_user, done, total);
}

/* ---- entry points -------------------------------------------------------------------------- */

static int synth_specs(const struct srt_model_config *cfg, struct srt_ck_spec **specs, size_t *n,
		       char *err, size_t errlen)
{
	int rc = srt_ck_dsv4_specs(cfg, specs, n, err, errlen);
	if (rc)
		return rc;
	/* The tid2eid generator needs the expert count: keep it in cols. */
	for (size_t i = 0; i < *n; i++)
		if ((*specs)[i].role == SRT_CK_TID2EID) {
			(*specs)[i].cols = cfg->n_routed_experts;
			if (cfg->num_experts_per_tok > cfg->n_routed_experts) {
				free(*specs);
				return errf(err, errlen, SRT_EINVAL, "key 'num_experts_per_tok': %d, more "
					    "than n_routed_experts (%d)", cfg->num_experts_per_tok,
					    cfg->n_routed_experts);
			}
		}
	return 0;
}

int srt_ck_synth_bytes(const struct srt_model_config *cfg, uint64_t *out, char *err,
		       size_t errlen)
{
	struct srt_ck_spec *specs;
	size_t n;
	int rc = srt_ck_dsv4_specs(cfg, &specs, &n, err, errlen);
	if (rc)
		return rc;
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t b;
		if (srt_ck_tensor_bytes(specs[i].dtype, specs[i].ndim, specs[i].shape, &b)) {
			free(specs);
			return errf(err, errlen, SRT_EINVAL, "tensor '%s': size overflows", specs[i].name);
		}
		total += b;
	}
	free(specs);
	*out = total;
	return 0;
}

/* Digits that make v read back as the same double (at least its integer digits, so that
 * 10000 prints as 10000.0, not 1e4). */
static int round_trip_digits(double v)
{
	char buf[64];
	int first = 1;
	for (double a = fabs(v); a >= 10 && first < 17; a /= 10)
		first++;
	for (int prec = first; prec < 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return prec;
	}
	return 17;
}

/* Set obj[key] = v (consumed); ok stays 0 once something failed. */
static int jset(int ok, json_t *obj, const char *key, json_t *v)
{
	if (!ok || !v) {
		json_decref(v);
		return 0;
	}
	return !json_object_set_new(obj, key, v);
}

/* config.json through jansson, keys in the order real DeepSeek-V4 configs have them. */
int srt_ck_config_json(const struct srt_model_config *c, char **out, char *err, size_t errlen)
{
	json_t *o = json_object(), *ratios = json_array(), *wbs = json_array();
	int ok = o && ratios && wbs;
	int digits = 1;
#define SET(k, v) (ok = jset(ok, o, k, v))
#define I(k, v) SET(k, json_integer((json_int_t)(v)))
#define D(k, v) (digits = round_trip_digits(v) > digits ? round_trip_digits(v) : digits, \
		 SET(k, json_real(v)))
	json_t *arch = json_array();
	ok = ok && arch && !json_array_append_new(arch, json_string("DeepseekV4ForCausalLM"));
	SET("architectures", arch);
	SET("model_type", json_string("deepseek_v4"));
	SET("torch_dtype", json_string("bfloat16"));
	I("hidden_size", c->hidden_size);
	I("num_hidden_layers", c->num_hidden_layers);
	I("num_attention_heads", c->num_attention_heads);
	I("num_key_value_heads", c->num_key_value_heads);
	I("head_dim", c->head_dim);
	I("qk_rope_head_dim", c->qk_rope_head_dim);
	I("q_lora_rank", c->q_lora_rank);
	I("o_groups", c->o_groups);
	I("o_lora_rank", c->o_lora_rank);
	I("sliding_window", c->sliding_window);
	for (int i = 0; ok && i < c->n_compress_ratios; i++)
		ok = !json_array_append_new(ratios, json_integer(c->compress_ratios[i]));
	ok = ok && !json_object_set(o, "compress_ratios", ratios);
	I("index_n_heads", c->index_n_heads);
	I("index_head_dim", c->index_head_dim);
	I("index_topk", c->index_topk);
	I("vocab_size", c->vocab_size);
	I("n_routed_experts", c->n_routed_experts);
	I("num_experts_per_tok", c->num_experts_per_tok);
	I("n_shared_experts", c->n_shared_experts);
	I("moe_intermediate_size", c->moe_intermediate_size);
	I("num_hash_layers", c->num_hash_layers);
	SET("scoring_func", json_string("sqrtsoftplus"));
	SET("topk_method", json_string("noaux_tc"));
	SET("norm_topk_prob", json_true());
	D("routed_scaling_factor", c->routed_scaling_factor);
	D("swiglu_limit", c->swiglu_limit);
	I("hc_mult", c->hc_mult);
	I("hc_sinkhorn_iters", c->hc_sinkhorn_iters);
	D("hc_eps", c->hc_eps);
	D("rms_norm_eps", c->rms_norm_eps);
	D("rope_theta", c->rope_theta);
	D("compress_rope_theta", c->compress_rope_theta);
	if (c->rope_factor > 1.0) {
		json_t *y = json_object(), *saved = o;
		SET("rope_scaling", y);
		o = y;
		SET("type", json_string("yarn"));
		D("factor", c->rope_factor);
		I("original_max_position_embeddings", c->rope_original_max_position);
		D("beta_fast", c->rope_beta_fast);
		D("beta_slow", c->rope_beta_slow);
		o = saved;
	}
	I("max_position_embeddings", c->max_position_embeddings);
	I("num_nextn_predict_layers", c->num_nextn_predict_layers);
	I("bos_token_id", c->bos_token_id);
	I("eos_token_id", c->eos_token_id);
	SET("tie_word_embeddings", json_boolean(c->tie_word_embeddings));
	if (c->expert_fp4)
		SET("expert_dtype", json_string("fp4"));
	json_t *q = json_object(), *saved = o;
	SET("quantization_config", q);
	o = q;
	SET("quant_method", json_string("fp8"));
	SET("fmt", json_string("e4m3"));
	SET("scale_fmt", json_string("ue8m0"));
	SET("activation_scheme", json_string("dynamic"));
	ok = ok && !json_array_append_new(wbs, json_integer(c->weight_block_size)) &&
	     !json_array_append_new(wbs, json_integer(c->weight_block_size)) &&
	     !json_object_set(o, "weight_block_size", wbs);
	o = saved;
#undef SET
#undef I
#undef D
	/* Reals with the fewest digits that read back exactly ("1e-06", not 9.99...e-07). */
	char *text = ok ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
				     JSON_REAL_PRECISION(digits))
			: NULL;
	json_decref(ratios);
	json_decref(wbs);
	json_decref(o);
	if (!text)
		return errf(err, errlen, SRT_ENOMEM, "out of memory for config.json");
	size_t n = strlen(text);
	char *nl = realloc(text, n + 2);
	if (!nl) {
		free(text);
		return errf(err, errlen, SRT_ENOMEM, "out of memory for config.json");
	}
	nl[n] = '\n';
	nl[n + 1] = '\0';
	*out = nl;
	return 0;
}

/* Copy src_dir/name to dir/name through a temporary file and a rename. */
static int copy_file(const char *src_dir, const char *dir, const char *name, char *err,
		     size_t errlen)
{
	char src[4096], tmp[4200], dst[4200];
	snprintf(src, sizeof(src), "%s/%s", src_dir, name);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp.%ld", dir, name, (long)getpid());
	snprintf(dst, sizeof(dst), "%s/%s", dir, name);
	FILE *in = fopen(src, "rb");
	if (!in)
		return errf(err, errlen, SRT_EIO, "%s: cannot open: %s", src, strerror(errno));
	FILE *out = fopen(tmp, "wb");
	if (!out) {
		fclose(in);
		return errf(err, errlen, SRT_EIO, "%s: cannot create: %s", tmp, strerror(errno));
	}
	char buf[1 << 16];
	size_t n;
	int bad = 0;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		bad |= fwrite(buf, 1, n, out) != n;
	bad |= ferror(in);
	fclose(in);
	bad |= fclose(out) != 0;
	if (bad || rename(tmp, dst)) {
		unlink(tmp);
		return errf(err, errlen, SRT_EIO, "copying %s to %s failed", src, dst);
	}
	return 0;
}

/* tokenizer.json (and tokenizer_config.json when the source has one) next to the weights. */
static int write_tokenizer(const struct srt_model_config *cfg, const char *dir,
			   const struct srt_ck_synth_opts *o, char *err, size_t errlen)
{
	char shipped[4096];
	const char *src = o->tokenizer_dir;
	if (o->no_tokenizer)
		return 0;
	if (!src) {
		if (cfg->vocab_size != SRT_TOK_DSV4_VOCAB)
			return 0;
		if (srt_tok_shipped_dir(shipped, sizeof(shipped)))
			return errf(err, errlen, SRT_ENOENT,
				    "preset %s has the DeepSeek-V4 vocabulary but the shipped tokenizer "
				    "is missing (looked in %s; set SHADOWRT_TOKENIZER_DIR)",
				    cfg->name, shipped);
		src = shipped;
	}
	int rc = copy_file(src, dir, "tokenizer.json", err, errlen);
	char cfgp[4200];
	snprintf(cfgp, sizeof(cfgp), "%s/tokenizer_config.json", src);
	if (!rc && access(cfgp, R_OK) == 0)
		rc = copy_file(src, dir, "tokenizer_config.json", err, errlen);
	return rc;
}

static int write_config(const struct srt_model_config *cfg, const char *dir, char *err,
			size_t errlen)
{
	char *json = NULL, *tmp = NULL, *fin = NULL;
	int rc = srt_ck_config_json(cfg, &json, err, errlen);
	if (rc)
		return rc;
	if (asprintf(&tmp, "%s/.config.json.tmp.%ld", dir, (long)getpid()) < 0 ||
	    asprintf(&fin, "%s/config.json", dir) < 0) {
		rc = errf(err, errlen, SRT_ENOMEM, "out of memory");
		goto out;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = errf(err, errlen, SRT_EIO, "%s: cannot create: %s", tmp, strerror(errno));
		goto out;
	}
	size_t len = strlen(json);
	ssize_t w = write(fd, json, len);
	if (w != (ssize_t)len || fsync(fd)) {
		rc = errf(err, errlen, errno == ENOSPC ? SRT_ENOSPC : SRT_EIO, "%s: write failed: %s",
			  tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		goto out;
	}
	close(fd);
	if (rename(tmp, fin)) {
		rc = errf(err, errlen, SRT_EIO, "cannot rename %s to %s: %s", tmp, fin,
			  strerror(errno));
		unlink(tmp);
	}
out:
	free(json);
	free(tmp);
	free(fin);
	return rc;
}

int srt_ck_synth_write(const struct srt_model_config *cfg, const char *dir,
		       const struct srt_ck_synth_opts *opts, char *err, size_t errlen)
{
	struct srt_ck_synth_opts o = {.seed = SRT_CK_SYNTH_SEED,
				      .shard_bytes = SRT_CK_SYNTH_SHARD_BYTES};
	if (opts)
		o = *opts;
	struct srt_ck_spec *specs;
	size_t n;
	int rc = synth_specs(cfg, &specs, &n, err, errlen);
	if (rc)
		return rc;
	struct srt_ck_wtensor *wt = calloc(n ? n : 1, sizeof(*wt));
	struct synth s = {.specs = specs, .n = n, .seed = o.seed, .cached_for = SIZE_MAX,
			  .progress = o.progress, .progress_user = o.user};
	if (!wt) {
		rc = errf(err, errlen, SRT_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		wt[i].name = specs[i].name;
		wt[i].dtype = specs[i].dtype;
		wt[i].ndim = specs[i].ndim;
		memcpy(wt[i].shape, specs[i].shape, sizeof(wt[i].shape));
	}
	char seed_s[32];
	snprintf(seed_s, sizeof(seed_s), "%llu", (unsigned long long)o.seed);
	const char *mk[] = {"format", "generator", "seed"};
	const char *mv[] = {"pt", "shadowrt gen-model", seed_s};
	struct srt_ck_write_opts wo = {
		.shard_bytes = o.shard_bytes,
		.meta_keys = mk,
		.meta_values = mv,
		.n_meta = 3,
		.fill = fill,
		.progress = o.progress ? progress : NULL,
		.user = &s,
	};
	if ((rc = write_config(cfg, dir, err, errlen)) ||
	    (rc = write_tokenizer(cfg, dir, &o, err, errlen)))
		goto out;
	rc = srt_ck_write(dir, wt, n, &wo, NULL, err, errlen);
out:
	free(wt);
	free(s.scales);
	free(s.slab);
	free(s.scratch);
	free(specs);
	return rc;
}
