/*
 * core/tok unit suite: malformed tokenizer.json is refused with a message naming the file and
 * the field; a small hand-made tokenizer encodes as its merges say (added tokens whole, ranks
 * respected on long words through the heap path); the streaming decoder's output is always
 * well-formed UTF-8 and concatenates to the lossy decode; one tokenizer encodes from several
 * threads at once with the single-thread result; ill-formed UTF-8 is replaced per maximal
 * subpart. (The id-for-id comparison with HF tokenizers is tests/tok/test_oracle.sh.)
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowrt/plugin.h>

#include "tok/tok.h"

static struct srt_tok *real_tok(void)
{
	const char *p = getenv("SRT_TOK_JSON");
	ck_assert_msg(p != NULL, "SRT_TOK_JSON not set");
	char err[512];
	struct srt_tok *t;
	int rc = srt_tok_load(p, &t, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s", err);
	return t;
}

/* A tiny byte-level tokenizer: vocabulary of the bytes 'a'..'d', ' ' (as Ġ), merges. */
static const char *mini(const char *merges, const char *extra_vocab, const char *added)
{
	static char buf[8192];
	snprintf(buf, sizeof(buf),
		 "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":null,"
		 "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
		 "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+|[a-d]+\"},\"behavior\":\"Isolated\","
		 "\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
		 "\"use_regex\":false}]},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
		 "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
		 "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"d\":3,\"\\u0120\":4%s},\"merges\":[%s]}}",
		 added, extra_vocab, merges);
	return buf;
}

static int load_str(const char *json, struct srt_tok **t, char *err, size_t errlen)
{
	return srt_tok_load_buffer(json, strlen(json), "mini.json", t, err, errlen);
}

static void expect_ids(struct srt_tok *t, const char *text, unsigned flags, const int32_t *want,
		       size_t n)
{
	struct srt_tok_ids ids = {0};
	char err[256];
	ck_assert_int_eq(srt_tok_encode(t, text, strlen(text), flags, &ids, err, sizeof(err)), 0);
	ck_assert_msg(ids.n == n, "'%s': %zu ids, want %zu", text, ids.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(ids.ids[i] == want[i], "'%s': id %zu is %d, want %d", text, i, ids.ids[i],
			      want[i]);
	srt_tok_ids_free(&ids);
}

START_TEST(merges_apply_by_rank_and_added_tokens_stay_whole)
{
	/* ranks: "a b" (0) before "b c" (1): "abc" -> ab c; "bc" alone -> bc */
	struct srt_tok *t;
	char err[256];
	const char *j = mini("\"a b\", \"b c\", \"ab c\"", ",\"ab\":5,\"bc\":6,\"abc\":7",
			     "{\"id\":8,\"content\":\"<x>\",\"special\":true,\"normalized\":false,"
			     "\"lstrip\":false,\"rstrip\":false,\"single_word\":false}");
	ck_assert_msg(load_str(j, &t, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(srt_tok_vocab_size(t), 9);
	expect_ids(t, "abc", 0, (int32_t[]){7}, 1);
	expect_ids(t, "bcd", 0, (int32_t[]){6, 3}, 2);
	expect_ids(t, "ab<x>ab c", 0, (int32_t[]){5, 8, 5, 4, 2}, 5);
	/* with the model vocabulary only, "<x>" is text; '<', 'x', '>' have no token: dropped */
	expect_ids(t, "a<x>a", SRT_TOK_NO_ADDED, (int32_t[]){0, 0}, 2);
	/* a long word takes the heap path: "ab" * 100 -> 100 x "ab"; "abc" * 40 -> 40 x "abc" */
	char w[401];
	int32_t want[100];
	for (int i = 0; i < 100; i++)
		memcpy(w + 2 * i, "ab", 2), want[i] = 5;
	w[200] = 0;
	expect_ids(t, w, 0, want, 100);
	for (int i = 0; i < 40; i++)
		memcpy(w + 3 * i, "abc", 3), want[i] = 7;
	w[120] = 0;
	expect_ids(t, w, 0, want, 40);
	srt_tok_free(t);
}
END_TEST

static void expect_refused(const char *json, const char *needle)
{
	struct srt_tok *t = NULL;
	char err[512] = "";
	int rc = load_str(json, &t, err, sizeof(err));
	ck_assert_msg(rc == SRT_EINVAL, "accepted (rc %d), want a message with '%s'", rc, needle);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(err, "mini.json") && strstr(err, needle), "message '%s' lacks '%s'", err,
		      needle);
}

START_TEST(malformed_tokenizer_json_names_file_and_field)
{
	expect_refused("{\"model\": ", "not valid JSON");
	expect_refused("[]", "expected a JSON object");
	expect_refused("{}", "model");
	expect_refused(mini("\"a q\"", "", ""), "model.merges[0]: token 'q' is not in model.vocab");
	expect_refused(mini("\"a b\"", "", ""), "model.merges[0]: merged token 'ab'");
	expect_refused(mini("\"ab\"", "", ""), "model.merges[0]");
	expect_refused(mini("", ",\"e\":\"x\"", ""), "model.vocab['e']");
	expect_refused(mini("", ",\"e\":0", ""), "id 0 already used");
	expect_refused(mini("", "", "{\"id\":9}"), "added_tokens[0].content");
	char buf[8192];
	snprintf(buf, sizeof(buf), "%s", mini("", "", ""));
	char *p = strstr(buf, "\\\\s+|[a-d]+");
	memcpy(p, "(((((((((((", 11);
	expect_refused(buf, "pre_tokenizer.pretokenizers[0].pattern: regex does not compile");
	snprintf(buf, sizeof(buf), "%s", mini("", "", ""));
	p = strstr(buf, "\"normalizer\":null");
	memcpy(p, "\"normalizer\":{\"type\":\"NFC\"}", strlen("\"normalizer\":{\"type\":\"NFC\"}"));
	/* the replacement is longer than "null": rebuild instead */
	const char *nfc = "{\"normalizer\":{\"type\":\"NFC\"},\"model\":{\"vocab\":{},\"merges\":[]}}";
	expect_refused(nfc, "normalizer");
	snprintf(buf, sizeof(buf), "%s", mini("", "", ""));
	p = strstr(buf, "\"Isolated\"");
	memcpy(p, "\"Isolatex\"", 10);
	expect_refused(buf, "pre_tokenizer.pretokenizers[0].behavior: unknown value 'Isolatex'");
	expect_refused("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":null}",
		       "pre_tokenizer: no ByteLevel step");
}
END_TEST

START_TEST(missing_files_are_enoent)
{
	struct srt_tok *t;
	char err[512];
	ck_assert_int_eq(srt_tok_load("/nonexistent/tokenizer.json", &t, err, sizeof(err)),
			 SRT_ENOENT);
	ck_assert_int_eq(srt_tok_load_dir("/nonexistent", &t, err, sizeof(err)), SRT_ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/tokenizer.json"));
}
END_TEST

START_TEST(ill_formed_utf8_is_replaced_per_maximal_subpart)
{
	static const struct {
		const char *in;
		size_t n;
		const char *out;
	} v[] = {
		{"a\x80" "b", 3, "a\xEF\xBF\xBD" "b"},
		{"\xE0\x80", 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},           /* E0 needs A0..BF */
		{"\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
		{"\xF0\x9F\x98" "A", 4, "\xEF\xBF\xBD" "A"},           /* truncated 4-byte: one */
		{"\xE4\xB8", 2, "\xEF\xBF\xBD"},                        /* truncated at the end */
		{"\xC0\xAF", 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},           /* overlong lead */
		{"\xF5\xFF", 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},
		{"\xE4\xB8\xAD", 3, "\xE4\xB8\xAD"},
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct srt_tok_text o = {0};
		ck_assert_int_eq(srt_tok_utf8_lossy(v[i].in, v[i].n, &o), 0);
		ck_assert_msg(o.len == strlen(v[i].out) && !memcmp(o.data, v[i].out, o.len),
			      "vector %zu", i);
		ck_assert(srt_tok_utf8_valid(o.data, o.len));
		srt_tok_text_free(&o);
	}
	/* encoding ill-formed input equals encoding its replacement */
	struct srt_tok *t = real_tok();
	struct srt_tok_ids a = {0}, b = {0};
	char err[256];
	ck_assert_int_eq(srt_tok_encode(t, "x\xE0\x80y\xFF", 5, 0, &a, err, sizeof(err)), 0);
	const char *rep = "x\xEF\xBF\xBD\xEF\xBF\xBDy\xEF\xBF\xBD";
	ck_assert_int_eq(srt_tok_encode(t, rep, strlen(rep), 0, &b, err, sizeof(err)), 0);
	ck_assert_uint_eq(a.n, b.n);
	ck_assert(!memcmp(a.ids, b.ids, a.n * sizeof(int32_t)));
	srt_tok_ids_free(&a);
	srt_tok_ids_free(&b);
	srt_tok_free(t);
}
END_TEST

START_TEST(stream_decoder_emits_only_whole_characters)
{
	struct srt_tok *t = real_tok();
	uint32_t nv = srt_tok_vocab_size(t);
	unsigned seed = 12345;
	char err[256];
	for (int round = 0; round < 300; round++) {
		int32_t ids[40];
		int n = 1 + (int)(rand_r(&seed) % 40);
		for (int i = 0; i < n; i++) {
			unsigned r = (unsigned)rand_r(&seed);
			/* mostly single-byte tokens (ids 100..355 hold split UTF-8 sequences) */
			ids[i] = (int32_t)(r % 3 ? 100 + (r >> 2) % 256 : (r >> 2) % nv);
		}
		struct srt_tok_text whole = {0}, streamed = {0};
		ck_assert_int_eq(srt_tok_decode(t, ids, (size_t)n, SRT_TOK_LOSSY, &whole, err,
						sizeof(err)), 0);
		struct srt_tok_stream s;
		srt_tok_stream_init(&s, t, 0);
		for (int i = 0; i < n; i++) {
			size_t before = streamed.len;
			ck_assert_int_eq(srt_tok_stream_push(&s, ids[i], &streamed, err, sizeof(err)), 0);
			ck_assert_msg(srt_tok_utf8_valid(streamed.data + before, streamed.len - before),
				      "round %d: a push emitted ill-formed UTF-8", round);
		}
		ck_assert_int_eq(srt_tok_stream_finish(&s, &streamed), 0);
		ck_assert_msg(streamed.len == whole.len && !memcmp(streamed.data, whole.data, whole.len),
			      "round %d: streamed text differs from the lossy decode", round);
		srt_tok_text_free(&whole);
		srt_tok_text_free(&streamed);
	}
	/* an id outside the vocabulary is an error naming it */
	struct srt_tok_stream s;
	struct srt_tok_text o = {0};
	srt_tok_stream_init(&s, t, 0);
	ck_assert_int_eq(srt_tok_stream_push(&s, (int32_t)nv, &o, err, sizeof(err)), SRT_EINVAL);
	ck_assert_int_eq(srt_tok_decode(t, (int32_t[]){1, -3}, 2, 0, &o, err, sizeof(err)), SRT_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "position 1"));
	srt_tok_text_free(&o);
	srt_tok_free(t);
}
END_TEST

struct job {
	struct srt_tok *t;
	const char *text;
	struct srt_tok_ids ids;
	int rc;
};

static void *encode_job(void *arg)
{
	struct job *j = arg;
	char err[256];
	for (int k = 0; k < 20 && !j->rc; k++) {
		j->ids.n = 0;
		j->rc = srt_tok_encode(j->t, j->text, strlen(j->text), 0, &j->ids, err, sizeof(err));
	}
	return NULL;
}

START_TEST(one_tokenizer_encodes_from_several_threads)
{
	struct srt_tok *t = real_tok();
	static char texts[4][20000];
	for (int k = 0; k < 4; k++) {
		size_t o = 0;
		for (int i = 0; o + 64 < sizeof(texts[k]); i++)
			o += (size_t)snprintf(texts[k] + o, sizeof(texts[k]) - o, "%s%d ",
					      k == 0 ? "tok" : k == 1 ? "中文测试" : k == 2 ? "<think>x" : "ab", i * (k + 7));
	}
	struct job jobs[8];
	pthread_t th[8];
	for (int i = 0; i < 8; i++) {
		jobs[i] = (struct job){t, texts[i % 4], {0}, 0};
		ck_assert_int_eq(pthread_create(&th[i], NULL, encode_job, &jobs[i]), 0);
	}
	for (int i = 0; i < 8; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(jobs[i].rc, 0);
		struct srt_tok_ids solo = {0};
		char err[256];
		ck_assert_int_eq(srt_tok_encode(t, jobs[i].text, strlen(jobs[i].text), 0, &solo, err,
						sizeof(err)), 0);
		ck_assert_uint_eq(solo.n, jobs[i].ids.n);
		ck_assert(!memcmp(solo.ids, jobs[i].ids.ids, solo.n * sizeof(int32_t)));
		srt_tok_ids_free(&solo);
		srt_tok_ids_free(&jobs[i].ids);
	}
	srt_tok_free(t);
}
END_TEST

START_TEST(huge_words_and_runs_encode_in_bounded_work)
{
	/* 1 MB without a split point: the heap path (n log n); a quadratic one would not end in
	 * any reasonable time. Checked by the round trip, not by a clock. */
	struct srt_tok *t = real_tok();
	size_t n = 1 << 20;
	char *s = malloc(n + 1);
	unsigned seed = 9;
	for (size_t i = 0; i < n; i++)
		s[i] = (char)('a' + rand_r(&seed) % 26);
	s[n] = 0;
	struct srt_tok_ids ids = {0};
	struct srt_tok_text back = {0};
	char err[256];
	ck_assert_int_eq(srt_tok_encode(t, s, n, 0, &ids, err, sizeof(err)), 0);
	ck_assert_uint_gt(ids.n, n / 8);
	ck_assert_int_eq(srt_tok_decode(t, ids.ids, ids.n, 0, &back, err, sizeof(err)), 0);
	ck_assert(back.len == n && !memcmp(back.data, s, n));
	srt_tok_ids_free(&ids);
	srt_tok_text_free(&back);
	memset(s, ' ', n);
	ck_assert_int_eq(srt_tok_encode(t, s, n, 0, &ids, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_tok_decode(t, ids.ids, ids.n, 0, &back, err, sizeof(err)), 0);
	ck_assert(back.len == n && !memcmp(back.data, s, n));
	srt_tok_ids_free(&ids);
	srt_tok_text_free(&back);
	free(s);
	srt_tok_free(t);
}
END_TEST

START_TEST(any_bytes_encode_and_decode_to_their_lossy_form)
{
	/* random bytes (mostly ill-formed UTF-8) and truncated multi-byte characters: encoding
	 * never fails, every id is in the vocabulary, decoding gives the U+FFFD-replaced input */
	struct srt_tok *t = real_tok();
	unsigned seed = 77;
	char err[256];
	for (int round = 0; round < 3000; round++) {
		unsigned char buf[160];
		size_t n = (size_t)rand_r(&seed) % sizeof(buf);
		for (size_t i = 0; i < n; i++) {
			unsigned r = (unsigned)rand_r(&seed);
			static const unsigned char pool[] = {'a', ' ', '1', '<', 0xE4, 0xB8, 0xAD, 0xF0,
							     0x9F, 0x98, 0x80, 0x80, 0xC3, 0xA9, 0xFF, '\n'};
			buf[i] = r % 3 ? pool[(r >> 2) % sizeof(pool)] : (unsigned char)(r >> 8);
		}
		struct srt_tok_ids ids = {0};
		struct srt_tok_text back = {0}, want = {0};
		ck_assert_int_eq(srt_tok_encode(t, (const char *)buf, n, 0, &ids, err, sizeof(err)), 0);
		for (size_t i = 0; i < ids.n; i++)
			ck_assert(ids.ids[i] >= 0 && (uint32_t)ids.ids[i] < srt_tok_vocab_size(t));
		ck_assert_int_eq(srt_tok_decode(t, ids.ids, ids.n, 0, &back, err, sizeof(err)), 0);
		ck_assert_int_eq(srt_tok_utf8_lossy((const char *)buf, n, &want), 0);
		ck_assert_msg(back.len == want.len && !memcmp(back.data, want.data, want.len),
			      "round %d: decode(encode(x)) is not x with U+FFFD replacements", round);
		srt_tok_ids_free(&ids);
		srt_tok_text_free(&back);
		srt_tok_text_free(&want);
	}
	srt_tok_free(t);
}
END_TEST

START_TEST(lookups_of_the_real_tokenizer)
{
	char err[512];
	struct srt_tok *t;
	const char *p = getenv("SRT_TOK_JSON");
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", p);
	*strrchr(dir, '/') = 0;
	ck_assert_msg(srt_tok_load_dir(dir, &t, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(srt_tok_vocab_size(t), 129280);
	ck_assert_int_eq(srt_tok_bos_id(t), 0);
	ck_assert_int_eq(srt_tok_eos_id(t), 1);
	const char *user = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
	ck_assert_int_eq(srt_tok_added_id(t, user, strlen(user)), 128803);
	ck_assert(srt_tok_is_special(t, 0));
	ck_assert(!srt_tok_is_special(t, 128803));
	size_t len;
	const char *b = srt_tok_token_bytes(t, 128821, &len);
	ck_assert(b && len == 7 && !memcmp(b, "<think>", 7));
	ck_assert_ptr_null(srt_tok_token_bytes(t, 129280, &len));
	srt_tok_free(t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tok");
	TCase *tc = tcase_create("tok");
	tcase_add_test(tc, merges_apply_by_rank_and_added_tokens_stay_whole);
	tcase_add_test(tc, malformed_tokenizer_json_names_file_and_field);
	tcase_add_test(tc, missing_files_are_enoent);
	tcase_add_test(tc, ill_formed_utf8_is_replaced_per_maximal_subpart);
	tcase_add_test(tc, stream_decoder_emits_only_whole_characters);
	tcase_add_test(tc, one_tokenizer_encodes_from_several_threads);
	tcase_add_test(tc, huge_words_and_runs_encode_in_bounded_work);
	tcase_add_test(tc, lookups_of_the_real_tokenizer);
	tcase_add_test(tc, any_bytes_encode_and_decode_to_their_lossy_form);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
