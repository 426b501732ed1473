/*
 * The Mooncake trace reader: a well-formed trace loads with its lengths, ids and tokens; every
 * malformed line (bad JSON, wrong types, repeated keys, absurd lengths, trailing text, NUL bytes)
 * is SRT_EINVAL with "path:line: key 'k': what" (or jansson's message and column), never a
 * crash or a silently skipped line; lines are bounded and a failed read is an error.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "trace/trace.h"

static char dir[64];

/* Write n bytes of text to a fresh file in the test directory; returns its path (static). */
static const char *write_trace(const char *text, size_t n)
{
	static char path[128];
	static int k;
	snprintf(path, sizeof(path), "%s/t%d.jsonl", dir, k++);
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, n, f), n);
	fclose(f);
	return path;
}

/* Load text that must be refused; the message must hold `line_tag` (":N: ") and `what`. */
static void expect_refused(const char *text, size_t n, const char *line_tag, const char *what)
{
	const char *path = write_trace(text, n);
	struct srt_trace *t = (void *)1;
	char err[512] = "";
	ck_assert_int_eq(srt_trace_load(path, 0, &t, err, sizeof(err)), SRT_EINVAL);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(err, path) != NULL, "message does not name the file: %s", err);
	ck_assert_msg(strstr(err, line_tag) != NULL, "'%s' not in: %s", line_tag, err);
	ck_assert_msg(strstr(err, what) != NULL, "'%s' not in: %s", what, err);
}
#define REFUSED(text, tag, what) expect_refused(text, sizeof(text) - 1, tag, what)

#define OK1 "{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [7, 8]}\n"

START_TEST(well_formed_trace_loads_lengths_ids_and_tokens)
{
	const char text[] = OK1 "\n   \n"
			    "{\"hash_ids\":[7],\"extra\":{\"a\":[1,\"]}\"]},\"output_length\":0,"
			    "\"input_length\":512,\"timestamp\":9}\n";
	const char *path = write_trace(text, sizeof(text) - 1);
	struct srt_trace *t;
	char err[256];
	ck_assert_msg(srt_trace_load(path, 0, &t, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(t->n, 2);
	ck_assert_uint_eq(t->input_tokens, 1112);
	ck_assert_int_eq(t->reqs[0].timestamp_ms, 5);
	ck_assert_uint_eq(t->reqs[0].output_length, 3);
	ck_assert_uint_eq(t->reqs[0].n_hash, 2);
	ck_assert_uint_eq(t->reqs[0].hash_ids[1], 8);
	ck_assert_uint_eq(t->reqs[1].hash_ids[0], 7);
	/* Same block id, same tokens: request 1 is request 0's first block. */
	int32_t a[600], b[512];
	srt_trace_input_tokens(&t->reqs[0], a);
	srt_trace_input_tokens(&t->reqs[1], b);
	ck_assert_int_eq(memcmp(a, b, sizeof(b)), 0);
	for (int i = 0; i < 600; i++)
		ck_assert_uint_lt((uint32_t)a[i], SRT_TRACE_VOCAB);
	srt_trace_free(t);
	/* limit stops early. */
	ck_assert_int_eq(srt_trace_load(path, 1, &t, err, sizeof(err)), 0);
	ck_assert_uint_eq(t->n, 1);
	srt_trace_free(t);
}
END_TEST

START_TEST(malformed_json_is_refused_at_its_line)
{
	REFUSED(OK1 "{bad json\n", ":2: ", "string or '}' expected near 'bad' (column 4)");
	REFUSED(OK1 "[1, 2]\n", ":2: ", "expected a JSON object");
	REFUSED("{\"timestamp\" 1}\n", ":1: ", "':' expected near '1'");
	REFUSED("{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1 2]}\n",
		":1: ", "']' expected near '2'");
	REFUSED("{\"timestamp\": 1, \"note\": [1, 2\n", ":1: ", "']' expected near end of file");
	REFUSED("{\"unterminated\n", ":1: ", "premature end of input");
}
END_TEST

START_TEST(wrong_types_and_missing_keys_name_the_key)
{
	REFUSED("{\"timestamp\": 0, \"input_length\": \"x\", \"output_length\": 2, \"hash_ids\": [1]}\n",
		":1: ", "key 'input_length': expected a non-negative integer");
	REFUSED("{\"timestamp\": 0, \"input_length\": -5, \"output_length\": 2, \"hash_ids\": [1]}\n",
		":1: ", "key 'input_length': expected a non-negative integer");
	REFUSED("{\"timestamp\": 0, \"input_length\": 9, \"output_length\": 2, \"hash_ids\": [1e3]}\n",
		":1: ", "key 'hash_ids': expected a non-negative integer");
	REFUSED("{\"timestamp\": 0, \"input_length\": 9, \"output_length\": 2.5, \"hash_ids\": [1]}\n",
		":1: ", "key 'output_length': expected a non-negative integer");
	REFUSED("{\"timestamp\": 0, \"input_length\": 9, \"hash_ids\": [1]}\n", ":1: ",
		"key 'output_length': missing");
	REFUSED("{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 2, \"hash_ids\": []}\n",
		":1: ", "key 'hash_ids': has 0 ids, expected ceil(input_length 1000 / 512) = 2");
}
END_TEST

START_TEST(repeated_key_is_refused_not_merged)
{
	REFUSED("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1], "
		"\"hash_ids\": [2]}\n",
		":1: ", "duplicate object key near '\"hash_ids\"'");
	REFUSED("{\"timestamp\": 0, \"timestamp\": 1, \"input_length\": 10, \"output_length\": 2, "
		"\"hash_ids\": [1]}\n",
		":1: ", "duplicate object key near '\"timestamp\"'");
}
END_TEST

START_TEST(absurd_lengths_are_refused_before_any_allocation)
{
	/* 2^64 - 1 tokens: ceil(len / 512) would wrap to 0 and accept "hash_ids": []. */
	REFUSED("{\"timestamp\": 0, \"input_length\": 18446744073709551615, \"output_length\": 2, "
		"\"hash_ids\": []}\n",
		":1: ", "too big integer near '18446744073709551615'");
	REFUSED("{\"timestamp\": 0, \"input_length\": 16777217, \"output_length\": 2, "
		"\"hash_ids\": []}\n",
		":1: ", "key 'input_length': more than 16777216 tokens");
	/* A decode of 10^11 tokens would run for days in a replay. */
	REFUSED("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 99999999999, "
		"\"hash_ids\": [1]}\n",
		":1: ", "key 'output_length': more than 16777216 tokens");
	REFUSED("{\"timestamp\": 9223372036854775808, \"input_length\": 10, \"output_length\": 1, "
		"\"hash_ids\": [1]}\n",
		":1: ", "too big integer near '9223372036854775808'");
	REFUSED("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, "
		"\"hash_ids\": [99999999999999999999]}\n",
		":1: ", "too big integer");
}
END_TEST

START_TEST(trailing_text_and_nul_bytes_are_refused)
{
	REFUSED("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]} x\n",
		":1: ", "end of file expected near 'x'");
	REFUSED(OK1 "\0\0\0", ":2: ", "contains a NUL byte");
	REFUSED(OK1 "{\"timestamp\": 0,\0 \"input_length\": 1}\n", ":2: ", "contains a NUL byte");
}
END_TEST

START_TEST(empty_and_missing_files)
{
	struct srt_trace *t;
	char err[256];
	ck_assert_int_eq(srt_trace_load(write_trace("", 0), 0, &t, err, sizeof(err)), 0);
	ck_assert_uint_eq(t->n, 0);
	srt_trace_free(t);
	ck_assert_int_eq(srt_trace_load("/nonexistent/x.jsonl", 0, &t, err, sizeof(err)), SRT_EIO);
	ck_assert_ptr_null(t);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.jsonl: cannot open"));
}
END_TEST


/* A line longer than SRT_TRACE_MAX_LINE is refused with its number, without reading on: the
 * reader's memory is bounded whatever the file holds. */
START_TEST(overlong_line_is_refused_at_its_line)
{
	size_t n = SRT_TRACE_MAX_LINE + 10;
	char *text = malloc(sizeof(OK1) + n + 4);
	memcpy(text, OK1, sizeof(OK1) - 1);
	memset(text + sizeof(OK1) - 1, ' ', n);
	strcpy(text + sizeof(OK1) - 1 + n, "{}\n");
	expect_refused(text, strlen(text), ":2: ", "line longer than 1048576 bytes");
	free(text);
}
END_TEST

/* `replay /dev/zero`: an endless line of NUL bytes is refused after at most one bounded line
 * (the old reader grew its line buffer until memory ran out, then took ENOMEM for the end). */
START_TEST(dev_zero_is_refused)
{
	struct srt_trace *t = (void *)1;
	char err[512] = "";
	ck_assert_int_eq(srt_trace_load("/dev/zero", 0, &t, err, sizeof(err)), SRT_EINVAL);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(err, "/dev/zero:1: line longer than") != NULL, "%s", err);
}
END_TEST

/* A stream whose reads fail with EIO after the first line. */
static ssize_t failing_read(void *cookie, char *buf, size_t size)
{
	size_t *left = cookie;
	if (!*left) {
		errno = EIO;
		return -1;
	}
	size_t n = size < *left ? size : *left;
	memcpy(buf, OK1 + (sizeof(OK1) - 1 - *left), n);
	*left -= n;
	return (ssize_t)n;
}

/* A read that fails is an error naming the line, never the end of the trace. */
START_TEST(failed_read_is_an_error_not_the_end_of_the_trace)
{
	size_t left = sizeof(OK1) - 1;
	cookie_io_functions_t io = {.read = failing_read};
	FILE *f = fopencookie(&left, "r", io);
	ck_assert_ptr_nonnull(f);
	struct srt_trace *t = (void *)1;
	char err[512] = "";
	ck_assert_int_eq(srt_trace_load_stream(f, "flaky.jsonl", 0, &t, err, sizeof(err)),
			 SRT_EIO);
	fclose(f);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(err, "flaky.jsonl:2: read error: Input/output error") != NULL, "%s",
		      err);
}
END_TEST

/* Found by the trace fuzz target: a trace whose requests have no blocks at all (input_length
 * 0) made the reader add an offset to a NULL id array (UBSan). They load, with no ids. */
START_TEST(requests_without_blocks_load_with_no_ids)
{
	static const char text[] = "{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1, "
				   "\"hash_ids\": []}\n";
	struct srt_trace *t;
	char err[256];
	ck_assert_int_eq(srt_trace_load(write_trace(text, sizeof(text) - 1), 0, &t, err,
					sizeof(err)), 0);
	ck_assert_uint_eq(t->n, 1);
	ck_assert_uint_eq(t->reqs[0].n_hash, 0);
	ck_assert_ptr_null(t->reqs[0].hash_ids);
	srt_trace_free(t);
}
END_TEST

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/srt-trace-test-XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	Suite *s = suite_create("trace");
	TCase *tc = tcase_create("reader");
	tcase_add_test(tc, well_formed_trace_loads_lengths_ids_and_tokens);
	tcase_add_test(tc, malformed_json_is_refused_at_its_line);
	tcase_add_test(tc, wrong_types_and_missing_keys_name_the_key);
	tcase_add_test(tc, repeated_key_is_refused_not_merged);
	tcase_add_test(tc, absurd_lengths_are_refused_before_any_allocation);
	tcase_add_test(tc, trailing_text_and_nul_bytes_are_refused);
	tcase_add_test(tc, empty_and_missing_files);
	tcase_add_test(tc, overlong_line_is_refused_at_its_line);
	tcase_add_test(tc, dev_zero_is_refused);
	tcase_add_test(tc, failed_read_is_an_error_not_the_end_of_the_trace);
	tcase_add_test(tc, requests_without_blocks_load_with_no_ids);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	char cmd[96];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "note: could not remove %s\n", dir);
	return failed ? 1 : 0;
}
