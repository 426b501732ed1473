/*
 * check suite: the model description's bounds against hostile input (issue 9, items 2, 3 and
 * the FIFO of 8). Every size has an upper bound that follows from what can exist, a YAML alias
 * bomb is refused before libcyaml expands it, and only a regular file is read.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "config/model_config.h"

static char err[1024];
static char tmproot[64];

static char *flash_yaml(void)
{
	const char *src = getenv("SRT_SOURCE_DIR");
	ck_assert_msg(src != NULL, "SRT_SOURCE_DIR is not set (run through ctest)");
	char path[1024];
	snprintf(path, sizeof(path), "%s/conf/models/deepseek-v4-flash.yaml", src);
	FILE *f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	char *buf = calloc(1, 1 << 16);
	size_t n = fread(buf, 1, (1 << 16) - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

/* The flash preset with the line `key: ...` replaced by repl, plus `extra` appended. */
static char *flash_with(const char *key, const char *repl, const char *extra)
{
	char *t = flash_yaml();
	size_t cap = strlen(t) + strlen(repl ? repl : "") + strlen(extra ? extra : "") + 8;
	char *out = calloc(1, cap);
	size_t kl = key ? strlen(key) : 0;
	int found = !key;
	for (char *s = t; *s;) {
		char *nl = strchr(s, '\n');
		size_t n = nl ? (size_t)(nl - s + 1) : strlen(s);
		if (!found && !strncmp(s, key, kl) && s[kl] == ':') {
			found = 1;
			strcat(out, repl);
			strcat(out, "\n");
		} else { /* the line as it is (cap leaves room: out never outgrows t) */
			const size_t ol = strlen(out);
			memcpy(out + ol, s, n);
			out[ol + n] = '\0';
		}
		s += n;
	}
	ck_assert_msg(found, "no key %s in the flash preset", key);
	if (extra)
		strcat(out, extra);
	free(t);
	return out;
}

static int load_text(const char *text, const char *origin)
{
	struct srt_model_config c;
	return srt_model_config_load_text(text, strlen(text), origin, "t", &c, err, sizeof(err));
}

#define assert_has(msg, needle)                                                               \
	ck_assert_msg(strstr((msg), (needle)) != NULL, "message \"%s\" lacks \"%s\"", (msg),   \
		      (needle))

/* The flash preset itself stays valid under the bounds. */
START_TEST(flash_preset_is_inside_every_bound)
{
	char *t = flash_with(NULL, NULL, NULL);
	ck_assert_msg(load_text(t, "flash.yaml") == 0, "%s", err);
	free(t);
}
END_TEST

/* Each size at a value no checkpoint can have: refused at validation, naming the key (before
 * the bounds, n_routed_experts 2147483647 passed and the checkpoint check allocated terabytes;
 * hc_sinkhorn_iters 2147483647 made generate loop for ever). */
START_TEST(absurd_sizes_are_refused_naming_the_key)
{
	static const struct {
		const char *key, *line, *want;
	} cases[] = {
		{"n_routed_experts", "n_routed_experts: 2147483647", "key 'n_routed_experts': 2147483647 routed experts per layer is more than the limit of 4096"},
		{"hc_sinkhorn_iters", "hc_sinkhorn_iters: 2147483647", "key 'hc_sinkhorn_iters': 2147483647 Sinkhorn iterations"},
		{"vocab_size", "vocab_size: 2000000000", "key 'vocab_size'"},
		{"hidden_size", "hidden_size: 1073741824", "key 'hidden_size'"},
		{"num_attention_heads", "num_attention_heads: 65536", "key 'num_attention_heads'"},
		{"moe_intermediate_size", "moe_intermediate_size: 1073741824", "key 'moe_intermediate_size'"},
		{"q_lora_rank", "q_lora_rank: 1073741824", "key 'q_lora_rank'"},
		{"o_lora_rank", "o_lora_rank: 1073741824", "key 'o_lora_rank'"},
		{"index_n_heads", "index_n_heads: 1000000", "key 'index_n_heads'"},
		{"index_topk", "index_topk: 2000000000", "key 'index_topk'"},
		{"n_shared_experts", "n_shared_experts: 100000", "key 'n_shared_experts'"},
		{"sliding_window", "sliding_window: 2000000000", "key 'sliding_window'"},
		{"max_position_embeddings", "max_position_embeddings: 1099511627776", "key 'max_position_embeddings'"},
		{"rope_theta", "rope_theta: .inf", "key 'rope_theta'"},
		{"routed_scaling_factor", "routed_scaling_factor: 1e300", "key 'routed_scaling_factor'"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *t = flash_with(cases[i].key, cases[i].line, NULL);
		ck_assert_msg(load_text(t, "x.yaml") == SRT_EINVAL, "accepted %s", cases[i].line);
		assert_has(err, cases[i].want);
		free(t);
	}
}
END_TEST

/* Fields each inside their bound whose product is a model no machine holds. */
START_TEST(whole_model_size_is_bounded)
{
	char *t = flash_with("n_routed_experts", "n_routed_experts: 4096", NULL);
	char *u = NULL;
	/* 4096 experts x 44 layers x 3 x 4096 x 65536 weights = 1.5e16 */
	const char *key = "moe_intermediate_size";
	char *p = strstr(t, key);
	ck_assert_ptr_nonnull(p);
	*p = 0;
	char *rest = strchr(p + 1, '\n');
	ck_assert_int_ge(asprintf(&u, "%smoe_intermediate_size: 65536%s", t, rest), 0);
	ck_assert_int_eq(load_text(u, "x.yaml"), SRT_EINVAL);
	assert_has(err, "weights");
	assert_has(err, "more than the limit of 8.8e+12");
	free(u);
	free(t);
}
END_TEST

/* A YAML alias bomb under an ignored key: 10^6 values from a few hundred bytes. Refused from
 * the event stream, before libcyaml copies an aliased subtree. */
static char *alias_bomb(int levels)
{
	char *b = calloc(1, 8192);
	strcat(b, "architectures:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
	for (int i = 1; i < levels; i++) {
		char line[256];
		snprintf(line, sizeof(line), "  l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, "
			 "*l%d, *l%d, *l%d]\n", i, i, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1,
			 i - 1, i - 1, i - 1);
		strcat(b, line);
	}
	return b;
}

START_TEST(yaml_alias_bomb_is_refused_before_expansion)
{
	char *bomb = alias_bomb(6);
	char *t = flash_with(NULL, NULL, bomb);
	ck_assert_int_eq(load_text(t, "bomb.yaml"), SRT_EINVAL);
	assert_has(err, "bomb.yaml:");
	assert_has(err, "more than 20000 values once YAML aliases are expanded");
	free(t);
	free(bomb);
}
END_TEST

/* A few aliases that expand to little are still fine in a .yaml file. */
START_TEST(small_aliases_in_yaml_are_accepted)
{
	char *t = flash_with(NULL, NULL, "architectures:\n  a: &a [x, y]\n  b: [*a, *a]\n");
	ck_assert_msg(load_text(t, "ok.yaml") == 0, "%s", err);
	free(t);
}
END_TEST

/* config.json is JSON (checked by jansson): an anchor or alias there is refused outright,
 * and so is a key given twice; the real config.json of the flash release still loads. */
START_TEST(aliases_in_a_json_file_are_refused)
{
	static const char bomb[] = "{\"architectures\": {\"a\": &a [1, 2], \"b\": [*a, *a]}}";
	ck_assert_int_eq(load_text(bomb, "/m/config.json"), SRT_EINVAL);
	assert_has(err, "/m/config.json:1: not valid JSON: ");
	static const char dup[] = "{\"hidden_size\": 4096, \"hidden_size\": 8}";
	ck_assert_int_eq(load_text(dup, "/m/config.json"), SRT_EINVAL);
	assert_has(err, "duplicate object key near '\"hidden_size\"'");
	char path[1024];
	snprintf(path, sizeof(path), "%s/tests/config/fixtures/flash-hf/config.json",
		 getenv("SRT_SOURCE_DIR"));
	struct srt_model_config c;
	ck_assert_msg(srt_model_config_load(path, &c, err, sizeof(err)) == 0, "%s", err);
}
END_TEST

/* Too many plain values (no aliases) is refused too: the key table stays small. */
START_TEST(too_many_values_are_refused)
{
	size_t n = 30000;
	char *extra = malloc(4 * n + 64);
	strcpy(extra, "architectures: [");
	for (size_t i = 0; i < n; i++)
		strcat(extra, i ? ",1 " : "1 ");
	strcat(extra, "]\n");
	char *t = flash_with(NULL, NULL, extra);
	ck_assert_int_eq(load_text(t, "many.yaml"), SRT_EINVAL);
	assert_has(err, "more than 20000 values");
	free(t);
	free(extra);
}
END_TEST

/* `config --model DIR` whose config.json is a FIFO: refused at once, not a hang in open(). */
START_TEST(fifo_config_json_is_refused_not_waited_on)
{
	char dir[128];
	snprintf(dir, sizeof(dir), "%s/fifo-XXXXXX", tmproot);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof(path), "%s/config.json", dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	struct srt_model_config c;
	ck_assert_int_eq(srt_model_config_load(dir, &c, err, sizeof(err)), SRT_EINVAL);
	assert_has(err, "config.json: not a regular file (a FIFO)");
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(oversized_file_is_refused_from_its_size)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/big-XXXXXX.yaml", tmproot);
	int fd = mkstemps(path, 5);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 64 << 20), 0);
	close(fd);
	struct srt_model_config c;
	ck_assert_int_eq(srt_model_config_load(path, &c, err, sizeof(err)), SRT_EINVAL);
	assert_has(err, "67108864 bytes, larger than 1048576 bytes");
	unlink(path);
}
END_TEST

int main(void)
{
	snprintf(tmproot, sizeof(tmproot), "/tmp/srt-bounds-XXXXXX");
	if (!mkdtemp(tmproot))
		return 1;
	Suite *s = suite_create("model_bounds");
	TCase *tc = tcase_create("bounds");
	tcase_add_test(tc, flash_preset_is_inside_every_bound);
	tcase_add_test(tc, absurd_sizes_are_refused_naming_the_key);
	tcase_add_test(tc, whole_model_size_is_bounded);
	tcase_add_test(tc, yaml_alias_bomb_is_refused_before_expansion);
	tcase_add_test(tc, small_aliases_in_yaml_are_accepted);
	tcase_add_test(tc, aliases_in_a_json_file_are_refused);
	tcase_add_test(tc, too_many_values_are_refused);
	tcase_add_test(tc, fifo_config_json_is_refused_not_waited_on);
	tcase_add_test(tc, oversized_file_is_refused_from_its_size);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	rmdir(tmproot);
	return failed ? 1 : 0;
}
