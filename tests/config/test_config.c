/*
 * check suite for core/config: model descriptions (presets, a real-shaped config.json, every
 * error class with its file/line/key), the runtime config (default, layering, errors, long
 * lines), and the size parser.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "config/model_config.h"
#include "config/runtime_config.h"

static char err[1024];

static const char *src_dir(void)
{
	const char *s = getenv("SRT_SOURCE_DIR");
	ck_assert_msg(s != NULL, "SRT_SOURCE_DIR is not set (run through ctest)");
	return s;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	char *buf = calloc(1, 1 << 20);
	size_t n = fread(buf, 1, (1 << 20) - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

static char *flash_yaml(void)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/conf/models/deepseek-v4-flash.yaml", src_dir());
	return slurp(path);
}

/* Write text to a fresh temp file (name returned in path). */
static void write_tmp(char *path, size_t len, const char *suffix, const char *text)
{
	snprintf(path, len, "/tmp/srt_config_test_%d_XXXXXX%s", (int)getpid(), suffix);
	int fd = mkstemps(path, (int)strlen(suffix));
	ck_assert_int_ge(fd, 0);
	FILE *f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
}

/* The flash preset with the line starting with `key:` replaced by `repl` (NULL: removed),
 * written to a temp file; *line gets that line's number. */
static void flash_with(const char *key, const char *repl, char *path, size_t len, int *line)
{
	char *t = flash_yaml();
	char *out = calloc(1, strlen(t) + 4096);
	size_t klen = strlen(key);
	int ln = 0, found = 0;
	for (char *s = t; *s;) {
		char *nl = strchr(s, '\n');
		size_t n = nl ? (size_t)(nl - s + 1) : strlen(s);
		ln++;
		if (!found && !strncmp(s, key, klen) && s[klen] == ':') {
			found = 1;
			*line = ln;
			if (repl) {
				strcat(out, repl);
				strcat(out, "\n");
			}
		} else {
			/* memcpy, not strncat: gcc -O3 rejects a bound computed from the source */
			size_t used = strlen(out);
			memcpy(out + used, s, n);
			out[used + n] = '\0';
		}
		s += n;
	}
	ck_assert_msg(found, "key %s not in the flash preset", key);
	write_tmp(path, len, ".yaml", out);
	free(out);
	free(t);
}

/* Load the flash preset with one line replaced; the error must start with file:line where line
 * is that of `at_key` in the modified file, and contain want1 and want2. */
static void expect_model_error_at(const char *key, const char *repl, const char *at_key,
				  const char *want1, const char *want2)
{
	char path[256], loc[300], pat[80];
	int line = 0, at = 0;
	struct srt_model_config m;
	flash_with(key, repl, path, sizeof(path), &line);
	char *t = slurp(path);
	snprintf(pat, sizeof(pat), "%s:", at_key);
	int ln = 1;
	for (char *s = t; *s && !at; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : s + strlen(s), ln++)
		if (!strncmp(s, pat, strlen(pat)))
			at = ln;
	free(t);
	ck_assert_msg(at > 0, "%s not in the modified file", at_key);
	int rc = srt_model_config_load(path, &m, err, sizeof(err));
	ck_assert_int_eq(rc, SRT_EINVAL);
	snprintf(loc, sizeof(loc), "%s:%d:", path, at);
	ck_assert_msg(strstr(err, loc), "'%s' does not start with %s", err, loc);
	ck_assert_msg(strstr(err, want1), "'%s' does not name '%s'", err, want1);
	if (want2)
		ck_assert_msg(strstr(err, want2), "'%s' does not say '%s'", err, want2);
	ck_assert_int_eq(m.hidden_size, 0); /* zeroed on error */
	unlink(path);
}

static void expect_model_error(const char *key, const char *repl, const char *want1,
			       const char *want2)
{
	expect_model_error_at(key, repl, key, want1, want2);
}

/* ---------------------------------------------------------------------------------------- */

START_TEST(every_preset_loads_and_validates)
{
	const char *const *p = srt_model_presets();
	int n = 0;
	for (; *p; p++, n++) {
		struct srt_model_config m;
		ck_assert_msg(srt_model_config_load(*p, &m, err, sizeof(err)) == 0, "%s: %s", *p, err);
		ck_assert_str_eq(m.name, *p);
		ck_assert_uint_eq(m.struct_size, sizeof(m));
		ck_assert_int_eq(srt_model_config_validate(&m, err, sizeof(err)), 0);
		ck_assert_int_eq(m.n_compress_ratios, m.num_hidden_layers + m.num_nextn_predict_layers);
	}
	ck_assert_int_ge(n, 5);
}
END_TEST

START_TEST(flash_schedule_is_2_window_21_csa_20_hca)
{
	struct srt_model_config m;
	struct srt_model_schedule s;
	ck_assert_int_eq(srt_model_config_load("deepseek-v4-flash", &m, err, sizeof(err)), 0);
	srt_model_schedule_count(&m, &s);
	ck_assert_int_eq(s.window_only, 2);
	ck_assert_int_eq(s.csa, 21);
	ck_assert_int_eq(s.hca, 20);
	ck_assert_int_eq(s.hash_routed, 3);
	ck_assert_int_eq(s.score_routed, 40);
	ck_assert_int_eq(s.mtp, 1);
	ck_assert_int_eq(srt_model_layer_ratio(&m, 43), 0); /* MTP: window only */
	ck_assert_int_eq(srt_model_layer_hash_routed(&m, 2), 1);
	ck_assert_int_eq(srt_model_layer_hash_routed(&m, 3), 0);
	ck_assert_int_eq(m.hidden_size, 4096);
	ck_assert_int_eq(m.n_routed_experts, 256);
	ck_assert_int_eq(m.index_topk, 512);
	ck_assert_double_eq(m.routed_scaling_factor, 1.5);
	ck_assert_double_eq(m.rope_factor, 16);
	ck_assert_int_eq(m.rope_original_max_position, 65536);
	ck_assert_int_eq(m.expert_fp4, 1);
	ck_assert_int_eq(m.weight_block_size, 128);
	ck_assert_int_eq(m.eos_token_id, 1);
}
END_TEST

START_TEST(pro_schedule_is_30_csa_31_hca)
{
	struct srt_model_config m;
	struct srt_model_schedule s;
	ck_assert_int_eq(srt_model_config_load("deepseek-v4-pro", &m, err, sizeof(err)), 0);
	srt_model_schedule_count(&m, &s);
	ck_assert_int_eq(s.window_only, 0);
	ck_assert_int_eq(s.csa, 30);
	ck_assert_int_eq(s.hca, 31);
	ck_assert_int_eq(srt_model_layer_ratio(&m, 0), 128);
	ck_assert_int_eq(srt_model_layer_ratio(&m, 1), 128);
	ck_assert_int_eq(srt_model_layer_ratio(&m, 61), 0);
	ck_assert_int_eq(m.hidden_size, 7168);
	ck_assert_int_eq(m.n_routed_experts, 384);
	ck_assert_double_eq(m.routed_scaling_factor, 2.5);
}
END_TEST

START_TEST(tiny_and_tiny_pro_share_sizes_and_differ_in_schedule)
{
	struct srt_model_config a, b;
	struct srt_model_schedule s;
	ck_assert_int_eq(srt_model_config_load("tiny", &a, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_model_config_load("tiny-pro", &b, err, sizeof(err)), 0);
	ck_assert_int_eq(a.hidden_size, 256);
	ck_assert_int_eq(a.head_dim, 128);
	ck_assert_int_eq(a.n_routed_experts, 8);
	srt_model_schedule_count(&b, &s);
	ck_assert_int_eq(srt_model_layer_ratio(&b, 0), 128);
	ck_assert_int_eq(srt_model_layer_ratio(&b, 1), 128);
	ck_assert_int_eq(s.window_only, 0);
	ck_assert_int_eq(srt_model_layer_ratio(&b, b.n_compress_ratios - 1), 0);
	/* Same sizes: equal once the name and the ratios are made equal. */
	memcpy(b.compress_ratios, a.compress_ratios, sizeof(a.compress_ratios));
	memcpy(b.name, a.name, sizeof(a.name));
	ck_assert(memcmp(&a, &b, sizeof(a)) == 0);
}
END_TEST

START_TEST(real_flash_config_json_directory_loads_like_the_preset)
{
	char dir[1024];
	struct srt_model_config hf, preset;
	snprintf(dir, sizeof(dir), "%s/tests/config/fixtures/flash-hf", src_dir());
	ck_assert_msg(srt_model_config_load(dir, &hf, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(hf.name, "flash-hf");
	ck_assert_int_eq(srt_model_config_load("deepseek-v4-flash", &preset, err, sizeof(err)), 0);
	memcpy(hf.name, preset.name, sizeof(hf.name));
	ck_assert(memcmp(&hf, &preset, sizeof(hf)) == 0);
}
END_TEST

START_TEST(config_json_without_expert_dtype_has_fp8_experts)
{
	char path[256], *t = flash_yaml();
	struct srt_model_config m;
	char *p = strstr(t, "expert_dtype: fp4");
	ck_assert_ptr_nonnull(p);
	memcpy(p, "#", 1);
	write_tmp(path, sizeof(path), ".yaml", t);
	ck_assert_msg(srt_model_config_load(path, &m, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(m.expert_fp4, 0);
	unlink(path);
	free(t);
}
END_TEST

START_TEST(unknown_key_names_file_line_key)
{
	expect_model_error_at("o_groups", "o_groups: 8\nflux_capacitor: 3", "flux_capacitor",
			      "key 'flux_capacitor'", "unknown key");
}
END_TEST

START_TEST(nested_unknown_key_names_its_path)
{
	char path[256];
	struct srt_model_config m;
	char *t = flash_yaml();
	char *p = strstr(t, "  beta_slow: 1\n");
	ck_assert_ptr_nonnull(p);
	char *out = calloc(1, strlen(t) + 64);
	memcpy(out, t, (size_t)(p - t));
	strcat(out, "  beta_slow: 1\n  warp: 9\n");
	strcat(out, p + strlen("  beta_slow: 1\n"));
	write_tmp(path, sizeof(path), ".yaml", out);
	ck_assert_int_eq(srt_model_config_load(path, &m, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "key 'rope_scaling.warp'") && strstr(err, "unknown key"), "%s", err);
	/* its line: count lines up to the insertion */
	int line = 1;
	for (char *c = out; c < out + (p - t) + strlen("  beta_slow: 1\n"); c++)
		line += *c == '\n';
	char loc[300];
	snprintf(loc, sizeof(loc), "%s:%d:", path, line);
	ck_assert_msg(strstr(err, loc), "%s lacks %s", err, loc);
	unlink(path);
	free(out);
	free(t);
}
END_TEST

START_TEST(wrong_types_are_errors)
{
	expect_model_error("hidden_size", "hidden_size: \"4096\"", "key 'hidden_size'",
			   "expected an integer");
	expect_model_error("hidden_size", "hidden_size: 4096.5", "key 'hidden_size'",
			   "expected an integer");
	expect_model_error("rms_norm_eps", "rms_norm_eps: tiny", "key 'rms_norm_eps'",
			   "expected a number");
	expect_model_error("norm_topk_prob", "norm_topk_prob: 7", "key 'norm_topk_prob'",
			   "true or false");
	expect_model_error("vocab_size", "vocab_size: [1, 2]", "key 'vocab_size'",
			   "expected an integer, got a list");
}
END_TEST

START_TEST(compress_ratios_length_must_be_layers_plus_mtp)
{
	expect_model_error_at("num_hidden_layers", "num_hidden_layers: 42", "compress_ratios",
			      "key 'compress_ratios'", "has 44 entries, expected num_hidden_layers (42)");
}
END_TEST

START_TEST(ratio_not_power_of_two_names_the_entry)
{
	char path[256], loc[300];
	struct srt_model_config m;
	char *t = flash_yaml();
	/* The list is laid out one row per line: entry 2 is on the first row after the key. */
	char *p = strstr(t, "0, 0, 4, 128");
	ck_assert_ptr_nonnull(p);
	memcpy(p, "0, 0, 3,", 8);
	int line = 1;
	for (char *c = t; c < p; c++)
		line += *c == '\n';
	write_tmp(path, sizeof(path), ".yaml", t);
	ck_assert_int_eq(srt_model_config_load(path, &m, err, sizeof(err)), SRT_EINVAL);
	snprintf(loc, sizeof(loc), "%s:%d: key 'compress_ratios[2]'", path, line);
	ck_assert_msg(strstr(err, loc), "'%s' lacks '%s'", err, loc);
	ck_assert_msg(strstr(err, "power of two"), "%s", err);
	unlink(path);
	free(t);
}
END_TEST

START_TEST(block_width_rules_are_enforced)
{
	expect_model_error("head_dim", "head_dim: 500", "key 'head_dim'", "multiple of 64");
	expect_model_error("hidden_size", "hidden_size: 4000", "key 'hidden_size'",
			   "multiple of 128");
	expect_model_error("q_lora_rank", "q_lora_rank: 1000", "key 'q_lora_rank'",
			   "multiple of 128");
	expect_model_error("o_lora_rank", "o_lora_rank: 1030", "key 'o_lora_rank'",
			   "multiple of 128");
	expect_model_error("moe_intermediate_size", "moe_intermediate_size: 2000",
			   "key 'moe_intermediate_size'", "multiple of 128");
	expect_model_error("index_head_dim", "index_head_dim: 96", "key 'index_head_dim'",
			   "power of two");
	expect_model_error("num_experts_per_tok", "num_experts_per_tok: 300",
			   "key 'num_experts_per_tok'", "n_routed_experts = 256");
	expect_model_error("scoring_func", "scoring_func: softmax", "key 'scoring_func'",
			   "expected 'sqrtsoftplus'");
	expect_model_error("hidden_size", "hidden_size: 99999999999", "key 'hidden_size'",
			   "32 bits");
}
END_TEST

START_TEST(missing_key_and_syntax_error_are_reported)
{
	char path[256];
	int line;
	struct srt_model_config m;
	flash_with("vocab_size", NULL, path, sizeof(path), &line);
	ck_assert_int_eq(srt_model_config_load(path, &m, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, path) && strstr(err, "missing key 'vocab_size'"), "%s", err);
	unlink(path);

	write_tmp(path, sizeof(path), ".json", "{\n  \"hidden_size\": 4096,\n  \"vocab_size\": [1,\n}\n");
	ck_assert_int_eq(srt_model_config_load(path, &m, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "not valid JSON") && strstr(err, ":4:"), "%s", err);
	unlink(path);
}
END_TEST

START_TEST(unknown_preset_lists_the_presets)
{
	struct srt_model_config m;
	ck_assert_int_eq(srt_model_config_load("gigantic", &m, err, sizeof(err)), SRT_ENOENT);
	ck_assert_msg(strstr(err, "'gigantic'") && strstr(err, "deepseek-v4-flash") &&
		      strstr(err, "tiny-pro"), "%s", err);
	ck_assert_int_eq(srt_model_config_load("/nonexistent/x.yaml", &m, err, sizeof(err)),
			 SRT_ENOENT);
	ck_assert_msg(strstr(err, "/nonexistent/x.yaml"), "%s", err);
}
END_TEST

START_TEST(validate_rejects_a_corrupted_struct)
{
	struct srt_model_config m;
	ck_assert_int_eq(srt_model_config_load("tiny", &m, err, sizeof(err)), 0);
	m.compress_ratios[2] = 6;
	ck_assert_int_eq(srt_model_config_validate(&m, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "compress_ratios[2]"), "%s", err);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */

static void expect_rc_error(const char *text, const char *want1, const char *want2)
{
	char path[256];
	struct srt_runtime_config c;
	write_tmp(path, sizeof(path), ".ini", text);
	int rc = srt_runtime_config_load(path, &c, err, sizeof(err));
	ck_assert_msg(rc == SRT_EINVAL, "rc %d for:\n%s", rc, text);
	ck_assert_msg(strstr(err, path), "'%s' does not name the file", err);
	ck_assert_msg(strstr(err, want1), "'%s' does not say '%s'", err, want1);
	if (want2)
		ck_assert_msg(strstr(err, want2), "'%s' does not say '%s'", err, want2);
	srt_runtime_config_free(&c); /* allowed on a failed load */
	unlink(path);
}

START_TEST(default_runtime_config_has_the_documented_values)
{
	struct srt_runtime_config c;
	ck_assert_msg(srt_runtime_config_load(NULL, &c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.n_ratios, 3);
	ck_assert_str_eq(srt_runtime_config_attention(&c, 0)->name, "swa");
	ck_assert_str_eq(srt_runtime_config_attention(&c, 4)->name, "csa");
	ck_assert_str_eq(srt_runtime_config_attention(&c, 128)->role, "attention.hca");
	ck_assert_ptr_null(srt_runtime_config_attention(&c, 16));
	ck_assert_str_eq(c.moe.name, "fp4");
	ck_assert_str_eq(c.residual.name, "mhc");
	ck_assert_str_eq(c.tiers[SRT_TIER_L1].plugin.name, "host");
	ck_assert_str_eq(c.tiers[SRT_TIER_L2].plugin.name, "host");
	ck_assert_str_eq(c.tiers[SRT_TIER_L3].plugin.name, "file");
	ck_assert_uint_eq(c.tiers[SRT_TIER_L1].budget, 4ull << 30);
	ck_assert_str_eq(srt_runtime_config_option(&c, "tier.l3", "path"), "./shadowrt-cache");
	struct srt_rc_scope scope = {&c, "tier.l3"};
	ck_assert_str_eq(srt_runtime_config_option_cb(&scope, "path"), "./shadowrt-cache");
	ck_assert_ptr_null(srt_runtime_config_option(&c, "tier.l3", "host"));
	ck_assert_int_eq(c.threads, 0);
	ck_assert_int_eq(c.profile, SRT_PROFILE_REFERENCE);
	ck_assert_str_eq(c.model, "tiny-chat");
	ck_assert_uint_eq(c.page_size, 256);
	ck_assert_int_eq(c.n_plugin_dirs, 0);
	ck_assert_int_eq(c.weights_huge, 1);
	ck_assert_int_eq(c.l1_huge, 1);
	srt_runtime_config_free(&c);
}
END_TEST

START_TEST(default_ini_file_round_trips_to_the_embedded_default)
{
	char path[1024];
	struct srt_runtime_config a, b;
	snprintf(path, sizeof(path), "%s/conf/default.ini", src_dir());
	ck_assert_int_eq(srt_runtime_config_load(NULL, &a, err, sizeof(err)), 0);
	ck_assert_msg(srt_runtime_config_load(path, &b, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(a.n_entries, b.n_entries);
	for (size_t i = 0; i < a.n_entries; i++) {
		ck_assert_str_eq(a.entries[i].section, b.entries[i].section);
		ck_assert_str_eq(a.entries[i].key, b.entries[i].key);
		ck_assert_str_eq(a.entries[i].value, b.entries[i].value);
		ck_assert_int_eq(a.entries[i].line, b.entries[i].line);
	}
	ck_assert_int_eq(a.n_ratios, b.n_ratios);
	for (int t = 0; t < SRT_TIER_COUNT; t++)
		ck_assert_uint_eq(a.tiers[t].budget, b.tiers[t].budget);
	ck_assert_int_eq(a.write_policy, b.write_policy);
	ck_assert_double_eq(a.top_p, b.top_p);
	srt_runtime_config_free(&a);
	srt_runtime_config_free(&b);
}
END_TEST

START_TEST(a_file_overlays_the_default_key_by_key)
{
	char path[256];
	struct srt_runtime_config c;
	write_tmp(path, sizeof(path), ".ini",
		  "; redis L3, two threads\n[runtime]\nthreads = 2\nplugin_dirs = /:/tmp\n"
		  "[tier.l3]\nplugin = redis\nhost = 10.0.0.2\nport = 6379\nbudget = 1.5T\n"
		  "[attention]\nratio.4 = /opt/x/my_csa.so\n"
		  "[attention.my_csa]\nblock = 64\n[cache]\nwrite_policy = write_through_after_2\n"
		  "prefetch = off\n[sampling]\ntemperature = 0.7\ntop_p = 0.9\nseed = 18446744073709551615\n");
	ck_assert_msg(srt_runtime_config_load(path, &c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.threads, 2);
	ck_assert_str_eq(c.profile == SRT_PROFILE_REFERENCE ? "ref" : "f32", "ref"); /* kept */
	ck_assert_int_eq(c.n_plugin_dirs, 2);
	ck_assert_str_eq(c.plugin_dirs[1], "/tmp");
	ck_assert_ptr_null(c.plugin_dirs[2]);
	ck_assert_str_eq(c.tiers[SRT_TIER_L3].plugin.name, "redis");
	ck_assert_uint_eq(c.tiers[SRT_TIER_L3].budget, 3ull << 39);
	ck_assert_str_eq(srt_runtime_config_option(&c, "tier.l3", "host"), "10.0.0.2");
	ck_assert_ptr_null(srt_runtime_config_option(&c, "tier.l3", "path")); /* replaced */
	ck_assert_str_eq(c.tiers[SRT_TIER_L1].plugin.name, "host");            /* kept */
	const struct srt_rc_plugin *p = srt_runtime_config_attention(&c, 4);
	ck_assert_str_eq(p->name, "/opt/x/my_csa.so");
	ck_assert_str_eq(p->section, "attention.my_csa");
	ck_assert_str_eq(srt_runtime_config_option(&c, p->section, "block"), "64");
	/* key by key: the default's other ratios and [cache] keys stay */
	ck_assert_int_eq(c.n_ratios, 3);
	ck_assert_str_eq(srt_runtime_config_attention(&c, 0)->name, "swa");
	ck_assert_str_eq(srt_runtime_config_attention(&c, 128)->name, "hca");
	ck_assert_str_eq(srt_runtime_config_option(&c, "cache", "page_size"), "256");
	ck_assert_int_eq(c.write_policy, SRT_WRITE_THROUGH_AFTER_2);
	ck_assert_uint_eq(c.write_after_hits, 2);
	ck_assert_int_eq(c.prefetch, 0);
	ck_assert_uint_eq(c.page_size, 256); /* kept from the default */
	ck_assert_double_eq(c.temperature, 0.7);
	ck_assert_uint_eq(c.seed, UINT64_MAX);
	ck_assert_int_eq(c.max_new_tokens, 128);
	srt_runtime_config_free(&c);
	unlink(path);
}
END_TEST

START_TEST(write_through_after_n_takes_any_n_and_refuses_a_bad_one)
{
	char path[256];
	struct srt_runtime_config c;
	char wp[48];
	write_tmp(path, sizeof(path), ".ini", "[cache]\nwrite_policy = write_through_after_5\n");
	ck_assert_msg(srt_runtime_config_load(path, &c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.write_policy, SRT_WRITE_THROUGH_AFTER_2);
	ck_assert_uint_eq(c.write_after_hits, 5);
	ck_assert_str_eq(srt_write_policy_format(c.write_policy, c.write_after_hits, wp, sizeof(wp)),
			 "write_through_after_5");
	srt_runtime_config_free(&c);
	unlink(path);
	static const char *const bad[] = {"write_through_after_0", "write_through_after_x",
					  "write_through_after_", "write_through_after_2x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[128];
		snprintf(text, sizeof(text), "[cache]\nwrite_policy = %s\n", bad[i]);
		write_tmp(path, sizeof(path), ".ini", text);
		ck_assert_int_eq(srt_runtime_config_load(path, &c, err, sizeof(err)), SRT_EINVAL);
		ck_assert_msg(strstr(err, bad[i]) && strstr(err, ":2:") && strstr(err, "N"),
			      "message: %s", err);
		unlink(path);
	}
}
END_TEST

START_TEST(runtime_config_errors_name_file_line_and_key)
{
	expect_rc_error("[cache]\npage_size = 256\n[turbo]\nx = 1\n", ":3: unknown section [turbo]",
			NULL);
	expect_rc_error("[cache]\npage_size = 256\npagesize = 128\n", ":3: [cache] pagesize",
			"unknown key");
	expect_rc_error("[runtime]\nthreads = many\n", ":2: [runtime] threads", "'many' is not an integer");
	expect_rc_error("[sampling]\ntop_p = 1.5\n", ":2: [sampling] top_p", "(0, 1]");
	expect_rc_error("[runtime]\nprofile = fast\n", ":2:", "reference or f32");
	expect_rc_error("[runtime]\nweights = huge\n", ":2: [runtime] weights", "hugepages or mmap");
	expect_rc_error("[cache]\nl1_pages = thp\n", ":2: [cache] l1_pages", "hugepages or heap");
	expect_rc_error("[cache]\npage_size = 256\n\npage_size = 512\n", ":4: key 'page_size' in [cache] is given twice",
			"line 2");
	expect_rc_error("[cache]\nprefetch = on\n[sampling]\nseed = 1\n[cache]\n", ":5: section [cache] appears again",
			NULL);
	expect_rc_error("[attention]\nratio.0 = swa\nratio.3 = odd\n", ":3: [attention] ratio.3",
			"power of two");
	expect_rc_error("[attention]\nratio.0 = swa\nratio.4 = csa\nratio.128 = hca\n[attention.cas]\nk = 1\n",
			":5: section [attention.cas] configures no plugin", NULL);
	expect_rc_error("[tier.l1]\nplugin = none\n", ":1: [tier.l1] plugin = none", NULL);
	expect_rc_error("[tier.l2]\nplugin = host\nbudget = lots\n", ":3: [tier.l2] budget", "a number of bytes");
	expect_rc_error("[tier.l4]\nplugin = host\n", ":1: unknown section [tier.l4]", NULL);
	expect_rc_error("[moe]\nplugin = fp 4\n", ":2: [moe] plugin", "not a plugin name");
	expect_rc_error("[cache]\n  page_size = 128\n", ":2: indented line", NULL);
	expect_rc_error("page_size = 128\n", ":1: key outside any section", NULL);
	expect_rc_error("[cache]\npage_size\n", ":2: expected 'key = value'", NULL);
	/* The message quotes the bad line alone, not the rest of the file. */
	expect_rc_error("[cache]\ngarbage line\n[x\n", ":2: expected 'key = value' or '[section]', "
			"got 'garbage line'", NULL);
}
END_TEST

START_TEST(long_line_is_rejected_not_cut)
{
	char text[600], want[64];
	snprintf(text, sizeof(text), "[tier.l3]\nplugin = file\npath = /");
	size_t n = strlen(text);
	for (int i = 0; i < 300; i++)
		text[n++] = 'x';
	text[n++] = '\n';
	text[n] = 0;
	snprintf(want, sizeof(want), ":3: line is %d bytes long", 8 + 300);
	expect_rc_error(text, want, "at most 197");
	/* 197 bytes is still fine */
	char path[256], ok[400];
	struct srt_runtime_config c;
	snprintf(ok, sizeof(ok), "[tier.l3]\nplugin = file\npath = %0189d\n", 0);
	write_tmp(path, sizeof(path), ".ini", ok);
	ck_assert_msg(srt_runtime_config_load(path, &c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(strlen(srt_runtime_config_option(&c, "tier.l3", "path")), 189);
	srt_runtime_config_free(&c);
	unlink(path);
}
END_TEST

START_TEST(model_ratios_must_be_mapped_and_divide_the_page)
{
	char path[256];
	struct srt_runtime_config c;
	struct srt_model_config m;
	ck_assert_int_eq(srt_model_config_load("tiny", &m, err, sizeof(err)), 0);
	write_tmp(path, sizeof(path), ".ini", "[attention]\nratio.128 = none\n");
	ck_assert_int_eq(srt_runtime_config_load(path, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_runtime_config_check_model(&c, &m, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "ratio 128") && strstr(err, "ratio.128 = <plugin>"), "%s", err);
	srt_runtime_config_free(&c);
	unlink(path);
	write_tmp(path, sizeof(path), ".ini", "[cache]\npage_size = 64\n");
	ck_assert_int_eq(srt_runtime_config_load(path, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_runtime_config_check_model(&c, &m, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "page_size 64 is not a multiple of ratio 128"), "%s", err);
	srt_runtime_config_free(&c);
	unlink(path);
	ck_assert_int_eq(srt_runtime_config_load(NULL, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_runtime_config_check_model(&c, &m, err, sizeof(err)), 0);
	srt_runtime_config_free(&c);
}
END_TEST

START_TEST(budgets_are_sizes_as_written_and_bad_ones_name_the_reason)
{
	/* the parser itself is tests/config/test_size.c; here: the INI uses it */
	char path[256];
	struct srt_runtime_config c;
	write_tmp(path, sizeof(path), ".ini", "[tier.l2]\nplugin = host\nbudget = 4GB\n"
		  "[tier.l3]\nplugin = file\npath = /tmp/x\nbudget = 1.5GiB\n");
	ck_assert_msg(srt_runtime_config_load(path, &c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(c.tiers[SRT_TIER_L2].budget, 4000000000ull);
	ck_assert_uint_eq(c.tiers[SRT_TIER_L3].budget, 3ull << 29);
	srt_runtime_config_free(&c);
	unlink(path);
	expect_rc_error("[tier.l2]\nplugin = host\nbudget = 4X\n", ":3: [tier.l2] budget: '4X'",
			"64GB = 64 * 10^9");
	char b[32];
	ck_assert_str_eq(srt_format_size(4ull << 30, b, sizeof(b)), "4 GiB");
	ck_assert_str_eq(srt_format_size(3ull << 29, b, sizeof(b)), "1.5 GiB");
	ck_assert_str_eq(srt_format_size(100, b, sizeof(b)), "100 B");
}
END_TEST


START_TEST(set_overrides_apply_over_the_file_key_by_key)
{
	char path[256];
	struct srt_runtime_config c;
	write_tmp(path, sizeof(path), ".ini", "[cache]\npage_size = 512\n[runtime]\nthreads = 3\n");
	const char *sets[] = {"cache.page_size=1024", "attention.ratio.4=mycsa",
			      "attention.mycsa.kv_dtype=fp8", "tier.l3.budget=2GB",
			      "tier.l2.plugin=none", "cache.page_size=2048"};
	ck_assert_msg(srt_runtime_config_load_ex(path, sets, 6, &c, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_uint_eq(c.page_size, 2048); /* the later --set wins */
	ck_assert_int_eq(c.threads, 3);       /* from the file */
	ck_assert_str_eq(srt_runtime_config_attention(&c, 4)->name, "mycsa");
	ck_assert_str_eq(srt_runtime_config_attention(&c, 128)->name, "hca");
	ck_assert_str_eq(srt_runtime_config_option(&c, "attention.mycsa", "kv_dtype"), "fp8");
	ck_assert_uint_eq(c.tiers[SRT_TIER_L3].budget, 2000000000ull);
	ck_assert_int_eq(c.tiers[SRT_TIER_L2].enabled, 0);
	ck_assert_str_eq(srt_runtime_config_attention(&c, 4)->file, "--set attention.ratio.4=mycsa");
	srt_runtime_config_free(&c);
	/* an error in a --set names the argument */
	const char *bad[] = {"cache.page_size=many"};
	ck_assert_int_eq(srt_runtime_config_load_ex(path, bad, 1, &c, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "--set cache.page_size=many: [cache] page_size") &&
			      !strstr(err, ":0:"), "%s", err);
	const char *syn[] = {"pagesize"};
	ck_assert_int_eq(srt_runtime_config_set_overrides(syn, 1, err, sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, "section.key=value"), "%s", err);
	/* the process-wide list reaches srt_runtime_config_load */
	const char *glob[] = {"sampling.seed=7"};
	ck_assert_int_eq(srt_runtime_config_set_overrides(glob, 1, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_runtime_config_load(path, &c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.seed, 7);
	srt_runtime_config_free(&c);
	ck_assert_int_eq(srt_runtime_config_set_overrides(NULL, 0, err, sizeof(err)), 0);
	unlink(path);
}
END_TEST

START_TEST(set_splits_sections_with_dots)
{
	char sec[64], key[64];
	const char *v;
	static const struct { const char *arg, *sec, *key, *val; } t[] = {
		{"attention.ratio.16=c16", "attention", "ratio.16", "c16"},
		{"attention.c16.kv_dtype=bf16", "attention.c16", "kv_dtype", "bf16"},
		{"tier.l3.path=/x=y", "tier.l3", "path", "/x=y"},
		{"runtime.threads=2", "runtime", "threads", "2"},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		ck_assert_msg(srt_runtime_config_split_set(t[i].arg, sec, sizeof(sec), key, sizeof(key),
							   &v, err, sizeof(err)) == 0, "%s", err);
		ck_assert_str_eq(sec, t[i].sec);
		ck_assert_str_eq(key, t[i].key);
		ck_assert_str_eq(v, t[i].val);
	}
	ck_assert_int_eq(srt_runtime_config_split_set("tier.l3=x", sec, sizeof(sec), key,
						      sizeof(key), &v, err, sizeof(err)), SRT_EINVAL);
}
END_TEST

START_TEST(unknown_names_get_a_did_you_mean)
{
	expect_rc_error("[cache]\npage_sise = 128\n", ":2: [cache] page_sise",
			"did you mean 'page_size'?");
	expect_rc_error("[runtme]\nthreads = 1\n", ":1: unknown section [runtme]",
			"did you mean 'runtime'?");
	expect_rc_error("[tier.l5]\nplugin = host\n", "unknown section [tier.l5]",
			"did you mean 'tier.l1'?");
	static const char *const c[] = {"swa", "csa", "hca"};
	ck_assert_str_eq(srt_suggest("cas", c, 3), "csa");
	ck_assert_ptr_null(srt_suggest("csa", c, 3));
	ck_assert_ptr_null(srt_suggest("totally-different", c, 3));
}
END_TEST

START_TEST(spaced_section_and_long_names_report_their_real_line)
{
	char path[256];
	struct srt_runtime_config c;
	write_tmp(path, sizeof(path), ".ini", "; x\n[ runtime ]\nthreads = 5\n");
	ck_assert_msg(srt_runtime_config_load(path, &c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.threads, 5);
	srt_runtime_config_free(&c);
	unlink(path);
	/* a bad value in a spaced section names its line, not line 0 */
	expect_rc_error("[ runtime ]\n\nthreads = x\n", ":3: [runtime] threads", NULL);
	char text[300];
	snprintf(text, sizeof(text), "[cache]\n%070d = 1\n", 0);
	expect_rc_error(text, ":2: too long key", NULL);
	snprintf(text, sizeof(text), "[cache]\n[attention.%060d]\nx = 1\n", 0);
	expect_rc_error(text, ":2: too long section name", NULL);
}
END_TEST

START_TEST(missing_plugin_dir_is_an_error)
{
	expect_rc_error("[runtime]\nplugin_dirs = /nonexistent-srt-dir\n",
			":2: [runtime] plugin_dirs: '/nonexistent-srt-dir'", "No such file");
}
END_TEST

START_TEST(unknown_plugin_option_names_plugin_and_valid_options)
{
	static const struct srt_plugin_option opts[] = {
		{"kv_dtype", "auto|bf16", "auto", "x"}, {"index_dtype", "auto", "auto", "y"},
		{NULL, NULL, NULL, NULL}};
	struct srt_plugin_desc d = {.struct_size = sizeof(d), .name = "csa", .options = opts};
	char path[256];
	struct srt_runtime_config c;
	write_tmp(path, sizeof(path), ".ini", "[attention.csa]\nkv_dtype = fp8\nkv_dtipe = fp8\n");
	ck_assert_msg(srt_runtime_config_load(path, &c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(srt_runtime_config_check_options(&c, "attention.csa", &d, err,
							  sizeof(err)), SRT_EINVAL);
	ck_assert_msg(strstr(err, ":3: [attention.csa] kv_dtipe: plugin 'csa' has no option "
				  "'kv_dtipe' (did you mean 'kv_dtype'?); its options: kv_dtype, "
				  "index_dtype"), "%s", err);
	/* ABI 1.0 descriptor (no options member): not checked */
	d.struct_size = (uint32_t)SRT_PLUGIN_DESC_V1_SIZE;
	ck_assert_int_eq(srt_runtime_config_check_options(&c, "attention.csa", &d, err,
							  sizeof(err)), 0);
	srt_runtime_config_free(&c);
	unlink(path);
	/* tier: budget and plugin are the runtime's, not options */
	static const struct srt_plugin_option none[] = {{NULL, NULL, NULL, NULL}};
	struct srt_plugin_desc t = {.struct_size = sizeof(t), .name = "host", .options = none};
	write_tmp(path, sizeof(path), ".ini", "[tier.l2]\nplugin = host\nbudget = 1GiB\n");
	ck_assert_msg(srt_runtime_config_load(path, &c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(srt_runtime_config_check_options(&c, "tier.l2", &t, err, sizeof(err)) == 0,
		      "%s", err);
	srt_runtime_config_free(&c);
	unlink(path);
}
END_TEST

START_TEST(ratio_mapping_serving_no_layer_warns_once)
{
	char path[256], out[256];
	struct srt_runtime_config c;
	struct srt_model_config m;
	ck_assert_int_eq(srt_model_config_load("tiny", &m, err, sizeof(err)), 0);
	write_tmp(path, sizeof(path), ".ini", "[attention]\nratio.16 = c16\n");
	write_tmp(out, sizeof(out), ".log", "");
	ck_assert_msg(srt_runtime_config_load(path, &c, err, sizeof(err)) == 0, "%s", err);
	fflush(stderr);
	int saved = dup(2);
	FILE *f = fopen(out, "w");
	dup2(fileno(f), 2);
	ck_assert_int_eq(srt_runtime_config_check_model(&c, &m, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_runtime_config_check_model(&c, &m, err, sizeof(err)), 0);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	fclose(f);
	char log[1024] = "";
	f = fopen(out, "r");
	size_t n = fread(log, 1, sizeof(log) - 1, f);
	log[n] = 0;
	fclose(f);
	char *w = strstr(log, ":2: [attention] ratio.16 = c16 serves no layer of model 'tiny' "
			      "(its ratios: 0, 4, 128)");
	ck_assert_msg(w, "%s", log);
	ck_assert_msg(!strstr(strstr(w, "serves no layer") + 1, "serves no layer"),
		      "printed twice: %s", log);
	ck_assert_msg(!strstr(log, "ratio.4"), "default mappings must not warn: %s", log);
	srt_runtime_config_free(&c);
	unlink(path);
	unlink(out);
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *m = tcase_create("model");
	tcase_add_test(m, every_preset_loads_and_validates);
	tcase_add_test(m, flash_schedule_is_2_window_21_csa_20_hca);
	tcase_add_test(m, pro_schedule_is_30_csa_31_hca);
	tcase_add_test(m, tiny_and_tiny_pro_share_sizes_and_differ_in_schedule);
	tcase_add_test(m, real_flash_config_json_directory_loads_like_the_preset);
	tcase_add_test(m, config_json_without_expert_dtype_has_fp8_experts);
	tcase_add_test(m, unknown_key_names_file_line_key);
	tcase_add_test(m, nested_unknown_key_names_its_path);
	tcase_add_test(m, wrong_types_are_errors);
	tcase_add_test(m, compress_ratios_length_must_be_layers_plus_mtp);
	tcase_add_test(m, ratio_not_power_of_two_names_the_entry);
	tcase_add_test(m, block_width_rules_are_enforced);
	tcase_add_test(m, missing_key_and_syntax_error_are_reported);
	tcase_add_test(m, unknown_preset_lists_the_presets);
	tcase_add_test(m, validate_rejects_a_corrupted_struct);
	suite_add_tcase(s, m);
	TCase *r = tcase_create("runtime");
	tcase_add_test(r, default_runtime_config_has_the_documented_values);
	tcase_add_test(r, default_ini_file_round_trips_to_the_embedded_default);
	tcase_add_test(r, a_file_overlays_the_default_key_by_key);
	tcase_add_test(r, write_through_after_n_takes_any_n_and_refuses_a_bad_one);
	tcase_add_test(r, runtime_config_errors_name_file_line_and_key);
	tcase_add_test(r, long_line_is_rejected_not_cut);
	tcase_add_test(r, model_ratios_must_be_mapped_and_divide_the_page);
	tcase_add_test(r, budgets_are_sizes_as_written_and_bad_ones_name_the_reason);
	tcase_add_test(r, set_overrides_apply_over_the_file_key_by_key);
	tcase_add_test(r, set_splits_sections_with_dots);
	tcase_add_test(r, unknown_names_get_a_did_you_mean);
	tcase_add_test(r, spaced_section_and_long_names_report_their_real_line);
	tcase_add_test(r, missing_plugin_dir_is_an_error);
	tcase_add_test(r, unknown_plugin_option_names_plugin_and_valid_options);
	tcase_add_test(r, ratio_mapping_serving_no_layer_warns_once);
	suite_add_tcase(s, r);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
