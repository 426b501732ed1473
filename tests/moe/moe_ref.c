/* Test fixture helpers: see moe_ref.h. */
#include "moe_ref.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/model_config.h"
#include "ops/fp.h"
#include "plugin/host.h"

static const char *env_or(const char *k, const char *dflt)
{
	const char *v = getenv(k);
	return v && *v ? v : dflt;
}

void tfx_open(struct tfx *f)
{
	char why[512] = "";
	const char *dir = env_or("SRT_PLUGIN_DIR", ".");
	memset(f, 0, sizeof(*f));
	snprintf(f->model_dir, sizeof(f->model_dir), "%s/models/tiny",
		 env_or("SRT_BUILD_DIR", "."));
	ck_assert_msg(srt_host_create(2, &f->host, why, sizeof(why)) == 0, "host: %s", why);
	ck_assert_int_eq(srt_registry_open(&f->reg, &dir, 1, f->host,
					   SRT_REGISTRY_NO_ENV | SRT_REGISTRY_NO_DEFAULTS), 0);
	ck_assert_msg(srt_ck_open(f->model_dir, &f->ck, why, sizeof(why)) == 0,
		      "checkpoint %s (made by the gen_tiny_model fixture): %s", f->model_dir, why);
	srt_ck_weights(f->ck, &f->w);
	ck_assert_msg(srt_model_config_load(f->model_dir, &f->cfg, why, sizeof(why)) == 0,
		      "config: %s", why);
}

void tfx_close(struct tfx *f)
{
	srt_registry_close(f->reg);
	srt_ck_close(f->ck);
	srt_host_destroy(f->host);
}

int tfx_try_instance(struct tfx *f, enum srt_kind kind, const char *name, uint32_t profile,
		     const int32_t *layers, uint32_t n_layers, struct srt_instance **out,
		     char *why, size_t why_len)
{
	const struct srt_plugin_info *pi;
	struct srt_plugin_args a;
	int rc;
	*out = NULL;
	rc = srt_registry_find(f->reg, kind, name, &pi, why, why_len);
	if (rc)
		return rc;
	memset(&a, 0, sizeof(a));
	a.struct_size = sizeof(a);
	a.model = &f->cfg;
	a.weights = &f->w;
	a.layers = layers;
	a.n_layers = n_layers;
	a.page_tokens = 256;
	a.profile = profile;
	a.role = kind == SRT_KIND_MOE ? "moe" : "residual";
	return srt_plugin_instantiate(pi, f->host, &a, out, why, why_len);
}

struct srt_instance *tfx_instance(struct tfx *f, enum srt_kind kind, const char *name,
				  uint32_t profile, const int32_t *layers, uint32_t n_layers)
{
	char why[512] = "";
	struct srt_instance *in;
	int rc = tfx_try_instance(f, kind, name, profile, layers, n_layers, &in, why, sizeof(why));
	ck_assert_msg(rc == 0, "plugin %s: %s", name, why);
	return in;
}

void tfx_rand(float *x, size_t n, uint64_t seed, float a, int bf16)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		float u = (float)((s >> 40) * 0x1p-24) * 2.0f - 1.0f;
		x[i] = bf16 ? srt_round_bf16(a * u) : a * u;
	}
}

double *tfx_tensor_f64(struct tfx *f, const char *name, size_t *n)
{
	const struct srt_tensor *t = srt_ck_find(f->ck, name);
	size_t cnt = 1;
	double *out;
	ck_assert_msg(t != NULL, "tensor %s missing", name);
	for (uint32_t i = 0; i < t->ndim; i++)
		cnt *= (size_t)t->shape[i];
	out = malloc(cnt * sizeof(double));
	ck_assert_ptr_nonnull(out);
	for (size_t i = 0; i < cnt; i++) {
		if (t->dtype == SRT_DT_BF16)
			out[i] = srt_bf16_to_f32(((const uint16_t *)t->data)[i]);
		else if (t->dtype == SRT_DT_F32)
			out[i] = ((const float *)t->data)[i];
		else
			ck_abort_msg("tensor %s: dtype %u is not BF16/F32", name, t->dtype);
	}
	if (n)
		*n = cnt;
	return out;
}

static void ref_script(char *buf, size_t len)
{
	snprintf(buf, len, "%s/tests/reference/dsv4_ref.py", env_or("SRT_SOURCE_DIR", "."));
}

int tfx_have_numpy_ref(void)
{
	char p[600];
	ref_script(p, sizeof(p));
	return access(p, R_OK) == 0 && access("/usr/bin/python3", X_OK) == 0;
}

static void write_raw(const char *path, const void *p, size_t bytes)
{
	FILE *fp = fopen(path, "wb");
	ck_assert_msg(fp != NULL, "cannot write %s", path);
	ck_assert_uint_eq(fwrite(p, 1, bytes, fp), bytes);
	fclose(fp);
}

int tfx_run_piece(struct tfx *f, const char *piece, int layer, const char *profile,
		  const float *in, size_t n_in, const int32_t *tokens, size_t n_tok, float *out,
		  size_t n_out, const char *sub)
{
	char dir[] = "/tmp/srt_piece_XXXXXX", script[600], pin[128], pout[128], ptok[128];
	char layer_s[16];
	FILE *fp;
	pid_t pid;
	int status = -1;
	size_t got;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ref_script(script, sizeof(script));
	snprintf(pin, sizeof(pin), "%s/in.f32", dir);
	snprintf(pout, sizeof(pout), "%s/out.f32", dir);
	snprintf(ptok, sizeof(ptok), "%s/tokens.i32", dir);
	snprintf(layer_s, sizeof(layer_s), "%d", layer);
	write_raw(pin, in, n_in * sizeof(float));
	if (tokens)
		write_raw(ptok, tokens, n_tok * sizeof(int32_t));
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		const char *argv[20] = {"/usr/bin/python3", script, "piece", piece, "--model",
					f->model_dir, "--layer", layer_s, "--profile", profile,
					"--in", pin, "--out", pout};
		int argc = 14;
		if (tokens) {
			argv[argc++] = "--tokens-file";
			argv[argc++] = ptok;
		}
		if (sub) {
			argv[argc++] = "--sub";
			argv[argc++] = sub;
		}
		argv[argc] = NULL;
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
		goto out;
	}
	fp = fopen(pout, "rb");
	ck_assert_msg(fp != NULL, "reference wrote no %s", pout);
	got = fread(out, sizeof(float), n_out, fp);
	fclose(fp);
	ck_assert_msg(got == n_out, "reference output %s: %zu floats, expected %zu", pout, got,
		      n_out);
	status = 0;
out:
	unlink(pin);
	unlink(pout);
	unlink(ptok);
	rmdir(dir);
	return status;
}

double tfx_bf16_ulps(float a, float b)
{
	float m = fmaxf(fabsf(a), fabsf(b));
	int e;
	if (a == b)
		return 0.0;
	if (m < 0x1p-126f)
		m = 0x1p-126f;
	frexpf(m, &e); /* m in [2^(e-1), 2^e): bf16 spacing 2^(e-1-7) */
	return fabs((double)a - (double)b) / ldexp(1.0, e - 8);
}
