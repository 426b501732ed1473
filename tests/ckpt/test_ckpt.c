/*
 * check suite of the ckpt module: JSON parser, safetensors reader/writer, DeepSeek-V4 tensor
 * list and validation, the synthetic checkpoint generator and the gen-model command.
 * Every test works in its own temporary directory.
 */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/dsv4_tensors.h"
#include "ckpt/safetensors.h"
#include "ckpt/synth.h"
#include "config/model_config.h"
#include "ops/fp.h"

int srt_cmd_gen_model(int argc, char **argv);

/* The CLI helper cmd_gen_model.c uses (main.c is not linked into tests). */
int srt_cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return 1;
	return 0;
}

/* ---- helpers ------------------------------------------------------------------------------- */

/* Every temporary directory lives under one root per test process, removed at exit. */
static char root[64];

static char *tmpdir(void)
{
	static char buf[96];
	snprintf(buf, sizeof(buf), "%s/XXXXXX", root);
	ck_assert_ptr_nonnull(mkdtemp(buf));
	return buf;
}

static char *path_in(const char *dir, const char *name)
{
	static char buf[4][512];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static void write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, n, f), n);
	fclose(f);
}

/* A safetensors file from a header text and `data_len` data bytes (value i & 0xff). */
static void write_raw_st(const char *path, const char *header, size_t data_len)
{
	size_t hl = strlen(header);
	size_t n = 8 + hl + data_len;
	unsigned char *b = malloc(n);
	for (int k = 0; k < 8; k++)
		b[k] = (unsigned char)((uint64_t)hl >> (8 * k));
	memcpy(b + 8, header, hl);
	for (size_t i = 0; i < data_len; i++)
		b[8 + hl + i] = (unsigned char)i;
	write_file(path, b, n);
	free(b);
}

static int open_err(const char *path, char *err, size_t errlen)
{
	struct srt_ckpt *ck = NULL;
	int rc = srt_ck_open(path, &ck, err, errlen);
	ck_assert_ptr_null(ck);
	return rc;
}

#define assert_has(msg, needle)                                                               \
	ck_assert_msg(strstr((msg), (needle)) != NULL, "message \"%s\" lacks \"%s\"", (msg),   \
		      (needle))

static uint64_t rng_state = 12345;
static uint8_t rnd8(void)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (uint8_t)(rng_state >> 56);
}

/* One tensor per dtype, with data, plus a scalar and an empty tensor. */
#define N_RT 12
static struct srt_ck_wtensor rt[N_RT];
static uint8_t *rt_data[N_RT];

static void make_roundtrip_tensors(void)
{
	static const char *names[N_RT] = {"f32", "bf16", "f16", "f8", "e8m0", "i8", "i32",
					  "i64", "u8", "f64", "scalar", "empty"};
	for (int i = 0; i < N_RT; i++) {
		struct srt_ck_wtensor *t = &rt[i];
		memset(t, 0, sizeof(*t));
		t->name = names[i];
		t->dtype = i < SRT_DT_COUNT ? (uint32_t)i : (i == 10 ? SRT_DT_F32 : SRT_DT_I64);
		if (i < SRT_DT_COUNT) {
			t->ndim = (uint32_t)(1 + i % 4);
			for (uint32_t d = 0; d < t->ndim; d++)
				t->shape[d] = 1 + (i + (int)d) % 5;
		} else if (i == 10) {
			t->ndim = 0;
		} else {
			t->ndim = 2;
			t->shape[0] = 0;
			t->shape[1] = 3;
		}
		uint64_t nb;
		ck_assert_int_eq(srt_ck_tensor_bytes(t->dtype, t->ndim, t->shape, &nb), 0);
		free(rt_data[i]); /* from an earlier test of this process (CK_FORK=no) */
		rt_data[i] = malloc(nb + 1);
		for (uint64_t b = 0; b < nb; b++)
			rt_data[i][b] = rnd8();
		t->data = rt_data[i];
	}
}

static void check_roundtrip(const struct srt_ckpt *ck)
{
	ck_assert_uint_eq(srt_ck_count(ck), N_RT);
	for (int i = 0; i < N_RT; i++) {
		const struct srt_tensor *t = srt_ck_find(ck, rt[i].name);
		ck_assert_ptr_nonnull(t);
		ck_assert_str_eq(t->name, rt[i].name);
		ck_assert_uint_eq(t->dtype, rt[i].dtype);
		ck_assert_uint_eq(t->ndim, rt[i].ndim);
		for (uint32_t d = 0; d < t->ndim; d++)
			ck_assert_int_eq(t->shape[d], rt[i].shape[d]);
		uint64_t nb;
		srt_ck_tensor_bytes(rt[i].dtype, rt[i].ndim, rt[i].shape, &nb);
		ck_assert_uint_eq(t->nbytes, nb);
		if (nb)
			ck_assert_int_eq(memcmp(t->data, rt_data[i], nb), 0);
		/* Natural alignment of every tensor (the writer sorts by element size). */
		ck_assert_uint_eq((uintptr_t)t->data % srt_ck_dtype_size(t->dtype), 0);
	}
}

/* ---- JSON (jansson) in headers ------------------------------------------------------------ */

/* Escapes and non-ASCII names and values survive the header parser. */
START_TEST(header_json_escapes_and_utf8_are_decoded)
{
	char *p = path_in(tmpdir(), "x.safetensors");
	write_raw_st(p, "{\"__metadata__\":{\"m\":\"x\\u00e9\\n\\ud83d\\ude00\"},"
			"\"w\\u00e9\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
	struct srt_ckpt *ck;
	char err[256];
	ck_assert_msg(srt_ck_open(p, &ck, err, sizeof(err)) == 0, "%s", err);
	ck_assert_ptr_nonnull(srt_ck_find(ck, "w\xc3\xa9"));
	ck_assert_str_eq(srt_ck_metadata(ck, 0, "m"), "x\xc3\xa9\n\xf0\x9f\x98\x80");
	srt_ck_close(ck);
}
END_TEST

START_TEST(header_json_malformed_text_is_refused_with_position)
{
	static const char *bad[] = {
		"{\"a\": 1,}", "[1 2]", "{\"a\"}", "{\"a\": \"\x01\"}", "\"\xff\"", "01", "NaN",
		"{} x", "\"abc", "[1,]", "{\"a\": tru}", "\"\\ud800\"", "-", "1.", "[\"\\q\"]", "",
		"{\"w\\u0000\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
	};
	char *p = path_in(tmpdir(), "x.safetensors");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[256] = "";
		write_raw_st(p, bad[i], 0);
		ck_assert_msg(open_err(p, err, sizeof(err)) == SRT_ECORRUPT, "accepted #%zu: %s", i,
			      bad[i]);
		assert_has(err, "x.safetensors: header: ");
		assert_has(err, "(line 1, column ");
	}
}
END_TEST

/* A key given twice would let two readers see different tensors: refused, not "last wins". */
START_TEST(header_json_duplicate_keys_are_refused)
{
	char *p = path_in(tmpdir(), "x.safetensors");
	char err[256];
	write_raw_st(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
			"\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 2);
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "duplicate object key");
	write_raw_st(p, "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[2],"
			"\"data_offsets\":[0,2]}}", 2);
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "duplicate object key");
}
END_TEST

/* Hostile nesting: 100000 '[' is refused by the parser's depth limit, not a stack overflow. */
START_TEST(header_json_deep_nesting_is_refused)
{
	size_t n = 100000;
	char *h = malloc(2 * n + 40);
	size_t o = (size_t)sprintf(h, "{\"__metadata__\":");
	memset(h + o, '[', n);
	memset(h + o + n, ']', n);
	strcpy(h + o + 2 * n, "}");
	char *p = path_in(tmpdir(), "x.safetensors");
	write_raw_st(p, h, 0);
	free(h);
	char err[256];
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "x.safetensors: header: maximum parsing depth");
}
END_TEST

/* A FIFO where a shard or the only .safetensors file should be: refused at once (open() on a
 * FIFO blocks until a writer appears, so the loader used to hang). */
START_TEST(fifo_in_place_of_a_safetensors_file_is_refused_not_waited_on)
{
	char *dir = tmpdir();
	ck_assert_int_eq(mkfifo(path_in(dir, "weights.safetensors"), 0600), 0);
	char err[512];
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_EINVAL);
	assert_has(err, "weights.safetensors: not a regular file");
}
END_TEST

/* ---- leftovers of killed writers ----------------------------------------------------------- */

static long dead_pid(void)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid)
		_exit(0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	return (long)pid; /* exited and reaped: no such process (until the number is reused) */
}

/* A writer killed mid-file leaves ".<name>.tmp.<pid>" (gen-model of a 220 MB preset: for ever).
 * The next write into that directory removes those of dead processes, not of live ones. */
START_TEST(next_write_removes_temporary_files_of_killed_writers)
{
	char *dir = tmpdir();
	char dead[512], live[512], other[512], sub[512], inner[640];
	long dp = dead_pid();
	snprintf(dead, sizeof(dead), "%s/.model.safetensors.tmp.%ld", dir, dp);
	snprintf(live, sizeof(live), "%s/.model.safetensors.tmp.%ld", dir, (long)getppid());
	snprintf(other, sizeof(other), "%s/notes.tmp.%ld", dir, dp); /* not hidden: not ours */
	snprintf(sub, sizeof(sub), "%s/tiny.tmp.%ld", dir, dp);
	write_file(dead, "x", 1);
	write_file(live, "x", 1);
	write_file(other, "x", 1);
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	snprintf(inner, sizeof(inner), "%s/.model.safetensors.tmp.%ld", sub, dp);
	write_file(inner, "x", 1);

	make_roundtrip_tensors();
	char err[256];
	ck_assert_msg(srt_ck_write(dir, rt, N_RT, NULL, NULL, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_ne(access(dead, F_OK), 0);
	ck_assert_int_eq(access(live, F_OK), 0);
	ck_assert_int_eq(access(other, F_OK), 0);
	ck_assert_int_eq(access(sub, F_OK), 0); /* a "<stem>.tmp.<pid>" directory: by stem only */
	/* The preset cache's private directories, by stem: emptied and removed. */
	ck_assert_int_eq(srt_ck_remove_stale_tmp(dir, "tiny"), 1);
	ck_assert_int_ne(access(sub, F_OK), 0);
	ck_assert_int_eq(srt_ck_remove_stale_tmp(dir, "tiny"), 0);
}
END_TEST

/* ---- safetensors round trips --------------------------------------------------------------- */

START_TEST(roundtrip_every_dtype_single_file)
{
	make_roundtrip_tensors();
	char *dir = tmpdir();
	const char *mk[] = {"purpose"}, *mv[] = {"test \"quoted\""};
	struct srt_ck_write_opts o = {.meta_keys = mk, .meta_values = mv, .n_meta = 1};
	size_t nf = 0;
	char err[256];
	ck_assert_int_eq(srt_ck_write(dir, rt, N_RT, &o, &nf, err, sizeof(err)), 0);
	ck_assert_uint_eq(nf, 1);
	struct srt_ckpt *ck;
	ck_assert_msg(srt_ck_open(dir, &ck, err, sizeof(err)) == 0, "%s", err);
	check_roundtrip(ck);
	ck_assert_str_eq(srt_ck_metadata(ck, 0, "purpose"), "test \"quoted\"");
	ck_assert_str_eq(srt_ck_metadata(ck, 0, "format"), "pt");
	ck_assert_uint_eq(srt_ck_file_count(ck), 1);
	/* The data region starts 8-byte aligned. */
	FILE *f = fopen(path_in(dir, SRT_CK_SINGLE_NAME), "rb");
	uint64_t hl = 0;
	ck_assert_uint_eq(fread(&hl, 8, 1, f), 1);
	fclose(f);
	ck_assert_uint_eq((8 + hl) % 8, 0);
	/* Opening the file itself gives the same tensors and fingerprint. */
	struct srt_ckpt *ck2;
	ck_assert_int_eq(srt_ck_open(path_in(dir, SRT_CK_SINGLE_NAME), &ck2, err, sizeof(err)), 0);
	check_roundtrip(ck2);
	ck_assert_str_eq(srt_ck_fingerprint(ck), srt_ck_fingerprint(ck2));
	srt_ck_close(ck2);
	srt_ck_close(ck);
}
END_TEST

START_TEST(roundtrip_sharded_index_matches_single_file)
{
	make_roundtrip_tensors();
	char *d1 = strdup(tmpdir()), *d2 = strdup(tmpdir());
	char err[256];
	size_t nf = 0;
	ck_assert_int_eq(srt_ck_write(d1, rt, N_RT, NULL, NULL, err, sizeof(err)), 0);
	struct srt_ck_write_opts o = {.shard_bytes = 64};
	ck_assert_int_eq(srt_ck_write(d2, rt, N_RT, &o, &nf, err, sizeof(err)), 0);
	ck_assert_uint_gt(nf, 2);
	ck_assert_int_eq(access(path_in(d2, SRT_CK_INDEX_NAME), F_OK), 0);
	ck_assert_int_eq(access(path_in(d2, "model-00001-of-00003.safetensors"), F_OK) == 0 ||
			 nf != 3, 1);
	struct srt_ckpt *a, *b, *c;
	ck_assert_int_eq(srt_ck_open(d1, &a, err, sizeof(err)), 0);
	ck_assert_msg(srt_ck_open(d2, &b, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(srt_ck_open(path_in(d2, SRT_CK_INDEX_NAME), &c, err, sizeof(err)) == 0, "%s",
		      err);
	check_roundtrip(b);
	check_roundtrip(c);
	ck_assert_uint_eq(srt_ck_file_count(b), nf);
	ck_assert_uint_eq(srt_ck_total_bytes(a), srt_ck_total_bytes(b));
	/* The fingerprint does not depend on the shard layout. */
	ck_assert_str_eq(srt_ck_fingerprint(a), srt_ck_fingerprint(b));
	char fa[48], fb[48];
	ck_assert_int_eq(srt_ck_fingerprint_full(a, fa, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_ck_fingerprint_full(b, fb, err, sizeof(err)), 0);
	ck_assert_str_eq(fa, fb);
	ck_assert_str_ne(fa, srt_ck_fingerprint(a));
	srt_ck_close(a);
	srt_ck_close(b);
	srt_ck_close(c);
	free(d1);
	free(d2);
}
END_TEST

static uint64_t fill_calls, progress_last, progress_total;

static int fill_pattern(void *user, size_t index, void *buf, size_t nbytes, char *err,
			size_t errlen)
{
	(void)user;
	(void)err;
	(void)errlen;
	fill_calls++;
	memset(buf, (int)(index + 1), nbytes);
	return 0;
}

static void on_progress(void *user, uint64_t done, uint64_t total)
{
	(void)user;
	ck_assert_uint_ge(done, progress_last);
	progress_last = done;
	progress_total = total;
}

START_TEST(writer_fill_callback_progress_and_single_file_replaces_index)
{
	char *dir = tmpdir();
	struct srt_ck_wtensor t[3] = {
		{.name = "a", .dtype = SRT_DT_BF16, .ndim = 1, .shape = {100}},
		{.name = "b", .dtype = SRT_DT_F32, .ndim = 2, .shape = {3, 5}},
		{.name = "c", .dtype = SRT_DT_U8, .ndim = 1, .shape = {7}},
	};
	struct srt_ck_write_opts o = {.shard_bytes = 100, .fill = fill_pattern,
				      .progress = on_progress};
	char err[256];
	ck_assert_int_eq(srt_ck_write(dir, t, 3, &o, NULL, err, sizeof(err)), 0);
	ck_assert_uint_eq(fill_calls, 3);
	ck_assert_uint_eq(progress_last, 200 + 60 + 7);
	ck_assert_uint_eq(progress_total, 267);
	/* Rewriting as one file removes the index that would shadow it. */
	o.shard_bytes = 0;
	progress_last = 0;
	ck_assert_int_eq(srt_ck_write(dir, t, 3, &o, NULL, err, sizeof(err)), 0);
	ck_assert_int_ne(access(path_in(dir, SRT_CK_INDEX_NAME), F_OK), 0);
	struct srt_ckpt *ck;
	ck_assert_int_eq(srt_ck_open(dir, &ck, err, sizeof(err)), 0);
	ck_assert_uint_eq(((const uint8_t *)srt_ck_find(ck, "b")->data)[59], 2);
	srt_ck_close(ck);
	/* No temporary files are left behind. */
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "ls -A %s | grep -q tmp", dir);
	ck_assert_int_ne(system(cmd), 0);
}
END_TEST

START_TEST(writer_rejects_duplicate_and_empty_names)
{
	char *dir = tmpdir();
	uint8_t z[4] = {0};
	struct srt_ck_wtensor t[2] = {
		{.name = "x", .dtype = SRT_DT_U8, .ndim = 1, .shape = {4}, .data = z},
		{.name = "x", .dtype = SRT_DT_U8, .ndim = 1, .shape = {4}, .data = z},
	};
	char err[256];
	ck_assert_int_eq(srt_ck_write(dir, t, 2, NULL, NULL, err, sizeof(err)), SRT_EINVAL);
	assert_has(err, "'x' given twice");
	t[1].name = "";
	ck_assert_int_eq(srt_ck_write(dir, t, 2, NULL, NULL, err, sizeof(err)), SRT_EINVAL);
	assert_has(err, "no name");
}
END_TEST

/* ---- safetensors errors -------------------------------------------------------------------- */

START_TEST(truncated_file_is_an_error_naming_file_and_tensor)
{
	make_roundtrip_tensors();
	char *dir = tmpdir();
	char err[512];
	ck_assert_int_eq(srt_ck_write(dir, rt, N_RT, NULL, NULL, err, sizeof(err)), 0);
	const char *p = path_in(dir, SRT_CK_SINGLE_NAME);
	struct stat st;
	stat(p, &st);
	ck_assert_int_eq(truncate(p, st.st_size - 3), 0);
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, p);
	assert_has(err, "reach past the end of the data region");
	assert_has(err, "truncated");
	assert_has(err, "tensor '");
}
END_TEST

START_TEST(header_length_beyond_file_is_an_error)
{
	char *dir = tmpdir();
	const char *p = path_in(dir, "x.safetensors");
	unsigned char b[40] = {0xe8, 0x03}; /* 1000 */
	write_file(p, b, sizeof(b));
	char err[512];
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "header length 1000 reaches past the end of the 40-byte file");
	write_file(p, b, 5);
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "too short for the 8-byte header length");
}
END_TEST

START_TEST(overlapping_offsets_are_an_error_naming_both_tensors)
{
	char *dir = tmpdir();
	const char *p = path_in(dir, "x.safetensors");
	write_raw_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			"\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16);
	char err[512];
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
}
END_TEST

START_TEST(unknown_dtype_string_is_an_error)
{
	char *dir = tmpdir();
	const char *p = path_in(dir, "x.safetensors");
	write_raw_st(p, "{\"w\":{\"dtype\":\"F8_E5M2X\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
	char err[512];
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "tensor 'w': unknown dtype \"F8_E5M2X\"");
}
END_TEST

START_TEST(shape_and_size_mismatch_is_an_error)
{
	char *dir = tmpdir();
	const char *p = path_in(dir, "x.safetensors");
	write_raw_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16);
	char err[512];
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "tensor 'w': shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] hold 8");
	write_raw_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-3],\"data_offsets\":[0,8]}}", 16);
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "non-negative");
	write_raw_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}",
		     16);
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "unknown key 'x'");
	write_raw_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 16);
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "missing key 'data_offsets'");
	write_raw_st(p, "[1]", 0);
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "expected a JSON object");
	write_raw_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},", 16);
	ck_assert_int_eq(open_err(p, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "header: ");
	assert_has(err, "(line 1, column ");
}
END_TEST

/* A two-shard checkpoint: a in s1, b in s2, with the given index text. */
static char *two_shards(const char *index)
{
	char *dir = tmpdir();
	write_raw_st(path_in(dir, "s1.safetensors"),
		     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4);
	write_raw_st(path_in(dir, "s2.safetensors"),
		     "{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4);
	write_file(path_in(dir, SRT_CK_INDEX_NAME), index, strlen(index));
	return dir;
}

START_TEST(index_errors_name_the_index_and_tensor)
{
	char err[512];
	struct srt_ckpt *ck;
	char *dir = two_shards("{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
	ck_assert_msg(srt_ck_open(dir, &ck, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(srt_ck_file_count(ck), 2);
	srt_ck_close(ck);

	dir = two_shards("{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\",}}");
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, SRT_CK_INDEX_NAME);
	assert_has(err, "(line 1, column ");

	dir = two_shards("{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
			 "\"c\":\"s2.safetensors\"}}");
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "weight_map puts tensor 'b' in s1.safetensors, but it is in");

	dir = two_shards("{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}");
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "weight_map puts tensor 'c' in s2.safetensors, which has no such tensor");

	dir = two_shards("{\"weight_map\":{\"a\":\"s1.safetensors\"}}");
	char idx[] = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s3.safetensors\"}}";
	write_file(path_in(dir, SRT_CK_INDEX_NAME), idx, strlen(idx));
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "s3.safetensors named by the index is missing");

	dir = two_shards("{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"../s2.safetensors\"}}");
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "weight_map['b']: expected the plain name of a file");

	dir = two_shards("{\"metadata\":{}}");
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "\"weight_map\" object");

	/* An empty weight_map loads no shard: an error, not a checkpoint without tensors. */
	dir = two_shards("{\"weight_map\":{}}");
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "\"weight_map\" is empty: the index lists no tensors");
}
END_TEST

/* A tensor whose data is not on its element size (the format allows it; other writers produce
 * such files) is read through an aligned copy with the same bytes; aligned tensors stay mapped
 * in place. The file is a real one written with its F32 tensor at odd offset 122. */
START_TEST(unaligned_tensor_data_is_copied_to_aligned_memory)
{
	char err[512];
	char hdr[256];
	char *p = path_in(tmpdir(), "unaligned.safetensors");
	snprintf(hdr, sizeof(hdr), "%-112s", /* 109 characters, padded to 112 */
		 "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
		 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]}}");
	ck_assert_uint_eq(strlen(hdr), 112);
	write_raw_st(p, hdr, 10); /* data byte i = i */
	struct srt_ckpt *ck = NULL;
	ck_assert_msg(srt_ck_open(p, &ck, err, sizeof(err)) == 0, "%s", err);
	const struct srt_tensor *w = srt_ck_find(ck, "w");
	ck_assert_uint_eq((uintptr_t)w->data % 4, 0);
	static const uint8_t want[8] = {2, 3, 4, 5, 6, 7, 8, 9};
	ck_assert_int_eq(memcmp(w->data, want, 8), 0);
	ck_assert_uint_eq(srt_ck_unaligned_count(ck), 1);
	srt_ck_close(ck);

	/* The same layout with the tensor at an aligned offset is mapped in place. */
	snprintf(hdr, sizeof(hdr), "%-112s",
		 "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}");
	ck_assert_uint_eq(strlen(hdr), 112);
	write_raw_st(p, hdr, 12);
	ck_assert_msg(srt_ck_open(p, &ck, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq((uintptr_t)srt_ck_find(ck, "w")->data % 4, 0);
	ck_assert_uint_eq(srt_ck_unaligned_count(ck), 0);
	srt_ck_close(ck);
}
END_TEST

/* srt_ck_to_hugepages moves every file of a sharded checkpoint (and of one with an aligned
 * copy of an unaligned tensor) into its huge-page copy: every tensor reads the same bytes
 * (the full fingerprint too), a second call moves nothing, close frees it. Where the kernel
 * has transparent huge pages off, nothing moves and the note says why. */
START_TEST(hugepage_copy_keeps_every_tensor_and_fingerprint)
{
	make_roundtrip_tensors();
	char *d = strdup(tmpdir());
	char err[256], note[256], f0[48], f1[48];
	size_t nf = 0;
	struct srt_ck_write_opts o = {.shard_bytes = 64};
	ck_assert_int_eq(srt_ck_write(d, rt, N_RT, &o, &nf, err, sizeof(err)), 0);
	struct srt_ckpt *ck;
	ck_assert_msg(srt_ck_open(d, &ck, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(srt_ck_fingerprint_full(ck, f0, err, sizeof(err)), 0);
	const void *before = srt_ck_find(ck, "i64")->data;
	int moved = srt_ck_to_hugepages(ck, note, sizeof(note));
	fprintf(stderr, "hugepages: %s\n", note);
	if (moved == 0) {
		ck_assert_msg(strstr(note, "stay mapped"), "%s", note);
		ck_assert_ptr_eq(srt_ck_find(ck, "i64")->data, before);
	} else {
		ck_assert_int_eq(moved, (int)nf);
		ck_assert_ptr_ne(srt_ck_find(ck, "i64")->data, before);
		ck_assert_msg(strstr(note, "on huge pages"), "%s", note);
		ck_assert_int_eq(srt_ck_to_hugepages(ck, note, sizeof(note)), 0);
	}
	check_roundtrip(ck);
	ck_assert_int_eq(srt_ck_fingerprint_full(ck, f1, err, sizeof(err)), 0);
	ck_assert_str_eq(f0, f1);
	srt_ck_close(ck);

	char hdr[256];
	char *p = path_in(tmpdir(), "unaligned.safetensors");
	snprintf(hdr, sizeof(hdr), "%-112s",
		 "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
		 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]}}");
	write_raw_st(p, hdr, 10); /* data byte i = i */
	ck_assert_msg(srt_ck_open(p, &ck, err, sizeof(err)) == 0, "%s", err);
	const void *w_copy = srt_ck_find(ck, "w")->data;
	srt_ck_to_hugepages(ck, note, sizeof(note));
	static const uint8_t want_a[2] = {0, 1}, want_w[8] = {2, 3, 4, 5, 6, 7, 8, 9};
	ck_assert_ptr_eq(srt_ck_find(ck, "w")->data, w_copy); /* the aligned copy stays */
	ck_assert_int_eq(memcmp(srt_ck_find(ck, "a")->data, want_a, 2), 0);
	ck_assert_int_eq(memcmp(srt_ck_find(ck, "w")->data, want_w, 8), 0);
	srt_ck_close(ck);
	free(d);
}
END_TEST

/* A header "{}" is a valid safetensors file with no tensors (the format allows it); it opens
 * with a count of 0 and finds nothing. (Under UBSan this caught qsort on a NULL array.) */
START_TEST(file_without_tensors_opens_empty)
{
	char err[512];
	struct srt_ckpt *ck = NULL;
	char *p = path_in(tmpdir(), "empty.safetensors");
	write_raw_st(p, "{}      ", 0);
	ck_assert_msg(srt_ck_open(p, &ck, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(srt_ck_count(ck), 0);
	ck_assert_ptr_null(srt_ck_find(ck, "embed.weight"));
	srt_ck_close(ck);
}
END_TEST

START_TEST(unlisted_and_duplicate_tensors_across_shards_are_errors)
{
	char err[512];
	char *dir = two_shards("{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
	/* s2 also holds 'x' that the index does not list. */
	write_raw_st(path_in(dir, "s2.safetensors"),
		     "{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		     "\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8);
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "holds tensor 'x', which");
	assert_has(err, "does not list");
	/* s2 holds 'a' as well: duplicate across shards. */
	write_raw_st(path_in(dir, "s2.safetensors"),
		     "{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		     "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8);
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ECORRUPT);
	assert_has(err, "tensor 'a' is in both");
}
END_TEST

START_TEST(directory_without_checkpoint_is_enoent)
{
	char *dir = tmpdir();
	char err[512];
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), SRT_ENOENT);
	assert_has(err, "no model.safetensors.index.json");
	ck_assert_int_eq(open_err("/nonexistent/ckpt", err, sizeof(err)), SRT_ENOENT);
}
END_TEST

START_TEST(fingerprint_tracks_sampled_bytes_and_full_hash_every_byte)
{
	char *dir = tmpdir();
	size_t n = 1 << 16;
	uint8_t *d = malloc(n);
	for (size_t i = 0; i < n; i++)
		d[i] = rnd8();
	struct srt_ck_wtensor t = {.name = "big", .dtype = SRT_DT_U8, .ndim = 1,
				   .shape = {(int64_t)n}, .data = d};
	char err[256], fp0[48], full0[48], fp[48], full[48];
	struct srt_ckpt *ck;
#define SNAP(fpv, fullv)                                                                      \
	do {                                                                                  \
		ck_assert_int_eq(srt_ck_write(dir, &t, 1, NULL, NULL, err, sizeof(err)), 0);  \
		ck_assert_int_eq(srt_ck_open(dir, &ck, err, sizeof(err)), 0);                 \
		strcpy(fpv, srt_ck_fingerprint(ck));                                          \
		srt_ck_fingerprint_full(ck, fullv, err, sizeof(err));                         \
		srt_ck_close(ck);                                                             \
	} while (0)
	SNAP(fp0, full0);
	ck_assert_int_eq(strncmp(fp0, "ck1s-", 5), 0);
	ck_assert_uint_eq(strlen(fp0), 37);
	d[0] ^= 1; /* first window */
	SNAP(fp, full);
	ck_assert_str_ne(fp, fp0);
	ck_assert_str_ne(full, full0);
	d[0] ^= 1;
	d[n - 1] ^= 1; /* last window */
	SNAP(fp, full);
	ck_assert_str_ne(fp, fp0);
	d[n - 1] ^= 1;
	d[300] ^= 1; /* between windows 0 and 1: only the full hash sees it */
	SNAP(fp, full);
	ck_assert_str_eq(fp, fp0);
	ck_assert_str_ne(full, full0);
	d[300] ^= 1;
	t.shape[0] = (int64_t)n / 2; /* shape change */
	SNAP(fp, full);
	ck_assert_str_ne(fp, fp0);
	free(d);
#undef SNAP
}
END_TEST

START_TEST(weights_view_looks_up_by_name)
{
	make_roundtrip_tensors();
	char *dir = tmpdir();
	char err[256];
	ck_assert_int_eq(srt_ck_write(dir, rt, N_RT, NULL, NULL, err, sizeof(err)), 0);
	struct srt_ckpt *ck;
	ck_assert_int_eq(srt_ck_open(dir, &ck, err, sizeof(err)), 0);
	struct srt_weights w;
	srt_ck_weights(ck, &w);
	ck_assert_uint_eq(w.struct_size, sizeof(w));
	struct srt_tensor t;
	ck_assert_int_eq(w.get(w.ctx, "i64", &t), 0);
	ck_assert_uint_eq(t.dtype, SRT_DT_I64);
	ck_assert_int_eq(memcmp(t.data, rt_data[SRT_DT_I64], t.nbytes), 0);
	ck_assert_int_eq(w.get(w.ctx, "nope", &t), SRT_ENOENT);
	ck_assert_str_eq(w.fingerprint, srt_ck_fingerprint(ck));
	srt_ck_close(ck);
}
END_TEST

/* ---- DeepSeek-V4 tensor list --------------------------------------------------------------- */

static struct srt_model_config load_cfg(const char *name)
{
	struct srt_model_config c;
	char err[512];
	ck_assert_msg(srt_model_config_load(name, &c, err, sizeof(err)) == 0, "%s", err);
	return c;
}

static const struct srt_ck_spec *spec(const struct srt_ck_spec *s, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(s[i].name, name))
			return &s[i];
	ck_abort_msg("no spec %s", name);
	return NULL;
}

static void assert_spec(const struct srt_ck_spec *s, size_t n, const char *name, uint32_t dtype,
			int64_t d0, int64_t d1)
{
	const struct srt_ck_spec *x = spec(s, n, name);
	ck_assert_msg(x->dtype == dtype, "%s: dtype %s", name, srt_ck_dtype_name(x->dtype));
	ck_assert_msg(x->shape[0] == d0 && (x->ndim == 1 ? d1 < 0 : x->shape[1] == d1),
		      "%s: shape [%lld, %lld]", name, (long long)x->shape[0],
		      (long long)x->shape[1]);
}

START_TEST(tiny_tensor_list_count_and_shapes_follow_the_spec)
{
	struct srt_model_config c = load_cfg("tiny");
	struct srt_ck_spec *s;
	size_t n;
	char err[256];
	ck_assert_int_eq(srt_ck_dsv4_specs(&c, &s, &n, err, sizeof(err)), 0);
	/* Count by hand (spec section 6): top level 6; each block 13 attention (sink + 5 FP8
	 * linears with scales + 2 norms) + 2 router + E*3*2 experts + 6 shared + 2 norms + 6 mHC;
	 * a compressor adds 4, an indexer 3 + its compressor 4; MTP adds 10. */
	int64_t E = c.n_routed_experts, base = 13 + 2 + E * 6 + 6 + 2 + 6, total = 6;
	for (int i = 0; i < c.n_compress_ratios; i++) {
		int r = c.compress_ratios[i];
		total += base + (r ? 4 : 0) + (r == 4 ? 7 : 0) + (i >= c.num_hidden_layers ? 10 : 0);
	}
	ck_assert_int_eq((int64_t)n, total);
	int64_t d = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, G = c.o_groups;
	assert_spec(s, n, "embed.weight", SRT_DT_BF16, c.vocab_size, d);
	assert_spec(s, n, "hc_head_fn", SRT_DT_F32, c.hc_mult, c.hc_mult * d);
	assert_spec(s, n, "layers.0.attn.attn_sink", SRT_DT_F32, H, -1);
	assert_spec(s, n, "layers.0.attn.wq_b.weight", SRT_DT_F8_E4M3, H * hd, c.q_lora_rank);
	assert_spec(s, n, "layers.0.attn.wq_b.scale", SRT_DT_F8_E8M0, (H * hd + 127) / 128,
		    (c.q_lora_rank + 127) / 128);
	assert_spec(s, n, "layers.0.attn.wo_a.weight", SRT_DT_F8_E4M3, G * c.o_lora_rank,
		    H * hd / G);
	assert_spec(s, n, "layers.0.attn.wo_b.weight", SRT_DT_F8_E4M3, d, G * c.o_lora_rank);
	assert_spec(s, n, "layers.0.ffn.gate.tid2eid", SRT_DT_I64, c.vocab_size,
		    c.num_experts_per_tok);
	assert_spec(s, n, "layers.1.attn.compressor.ape", SRT_DT_F32, 4, 2 * hd);
	assert_spec(s, n, "layers.1.attn.compressor.wkv.weight", SRT_DT_BF16, 2 * hd, d);
	assert_spec(s, n, "layers.1.attn.indexer.compressor.ape", SRT_DT_F32, 4,
		    2 * c.index_head_dim);
	assert_spec(s, n, "layers.1.attn.indexer.weights_proj.weight", SRT_DT_BF16,
		    c.index_n_heads, d);
	assert_spec(s, n, "layers.2.attn.compressor.ape", SRT_DT_F32, 128, hd);
	assert_spec(s, n, "layers.2.attn.compressor.norm.weight", SRT_DT_BF16, hd, -1);
	assert_spec(s, n, "layers.2.ffn.gate.bias", SRT_DT_F32, E, -1);
	assert_spec(s, n, "layers.2.ffn.experts.7.w2.weight", SRT_DT_I8, d,
		    c.moe_intermediate_size / 2);
	assert_spec(s, n, "layers.2.ffn.experts.7.w2.scale", SRT_DT_F8_E8M0, d,
		    c.moe_intermediate_size / 32);
	assert_spec(s, n, "layers.2.ffn.shared_experts.w1.weight", SRT_DT_F8_E4M3,
		    c.moe_intermediate_size, d);
	assert_spec(s, n, "layers.5.hc_ffn_fn", SRT_DT_F32, (2 + c.hc_mult) * c.hc_mult,
		    c.hc_mult * d);
	assert_spec(s, n, "layers.5.hc_ffn_scale", SRT_DT_F32, 3, -1);
	assert_spec(s, n, "mtp.0.e_proj.weight", SRT_DT_F8_E4M3, d, d);
	assert_spec(s, n, "mtp.0.hc_head_scale", SRT_DT_F32, 1, -1);
	assert_spec(s, n, "mtp.0.ffn.gate.bias", SRT_DT_F32, E, -1); /* MTP routes by score */
	/* Window-only blocks have no compressor; HCA blocks no indexer. */
	for (size_t i = 0; i < n; i++) {
		ck_assert(strncmp(s[i].name, "layers.0.attn.compressor", 24));
		ck_assert(strncmp(s[i].name, "layers.2.attn.indexer", 21));
		ck_assert(strncmp(s[i].name, "mtp.0.attn.compressor", 21));
	}
	free(s);
}
END_TEST

START_TEST(flash_tensor_list_matches_published_shapes)
{
	struct srt_model_config c = load_cfg("deepseek-v4-flash");
	struct srt_ck_spec *s;
	size_t n;
	char err[256];
	ck_assert_int_eq(srt_ck_dsv4_specs(&c, &s, &n, err, sizeof(err)), 0);
	/* spec section 2.1: Flash wo_a [8192, 4096], wo_b [4096, 8192]. */
	assert_spec(s, n, "layers.10.attn.wo_a.weight", SRT_DT_F8_E4M3, 8192, 4096);
	assert_spec(s, n, "layers.10.attn.wo_b.weight", SRT_DT_F8_E4M3, 4096, 8192);
	assert_spec(s, n, "layers.2.ffn.gate.tid2eid", SRT_DT_I64, 129280, 6);
	assert_spec(s, n, "layers.3.ffn.gate.bias", SRT_DT_F32, 256, -1);
	assert_spec(s, n, "layers.42.ffn.experts.255.w1.weight", SRT_DT_I8, 2048, 2048);
	assert_spec(s, n, "layers.42.attn.indexer.wq_b.weight", SRT_DT_F8_E4M3, 64 * 128, 1024);
	uint64_t bytes;
	ck_assert_int_eq(srt_ck_synth_bytes(&c, &bytes, err, sizeof(err)), 0);
	ck_assert_uint_gt(bytes, (uint64_t)100 << 30); /* ~150 GB: refused without --force */
	free(s);
}
END_TEST

START_TEST(tensor_list_rejects_unshapeable_config)
{
	struct srt_model_config c = load_cfg("tiny");
	struct srt_ck_spec *s;
	size_t n;
	char err[256];
	c.o_groups = 3;
	ck_assert_int_eq(srt_ck_dsv4_specs(&c, &s, &n, err, sizeof(err)), SRT_EINVAL);
	assert_has(err, "key 'o_groups'");
	c = load_cfg("tiny");
	c.compress_ratios[2] = 6;
	ck_assert_int_eq(srt_ck_dsv4_specs(&c, &s, &n, err, sizeof(err)), SRT_EINVAL);
	assert_has(err, "key 'compress_ratios'[2]: 6");
}
END_TEST

/* Write a checkpoint of cfg's tensor list with zero data, edited by `edit`. */
enum edit_kind { EDIT_NONE, EDIT_DROP, EDIT_DTYPE, EDIT_SHAPE, EDIT_EXTRA, EDIT_TID_RANGE,
		 EDIT_TID_I32 };

static int zero_fill(void *user, size_t index, void *buf, size_t nbytes, char *err,
		     size_t errlen)
{
	const struct srt_ck_wtensor *t = user;
	(void)err;
	(void)errlen;
	memset(buf, 0, nbytes);
	if (strstr(t[index].name, "tid2eid") && getenv("SRT_TEST_TID_VALUE")) {
		int64_t v = atoll(getenv("SRT_TEST_TID_VALUE"));
		if (t[index].dtype == SRT_DT_I64)
			((int64_t *)buf)[nbytes / 8 - 1] = v;
	}
	return 0;
}

static char *write_edited(const struct srt_model_config *c, enum edit_kind k, const char *target)
{
	struct srt_ck_spec *s;
	size_t n;
	char err[256];
	ck_assert_int_eq(srt_ck_dsv4_specs(c, &s, &n, err, sizeof(err)), 0);
	struct srt_ck_wtensor *t = calloc(n + 1, sizeof(*t));
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		int hit = target && !strcmp(s[i].name, target);
		if (hit && k == EDIT_DROP)
			continue;
		t[m].name = s[i].name;
		t[m].dtype = s[i].dtype;
		t[m].ndim = s[i].ndim;
		memcpy(t[m].shape, s[i].shape, sizeof(t[m].shape));
		if (hit && k == EDIT_DTYPE)
			t[m].dtype = SRT_DT_BF16;
		if (hit && k == EDIT_SHAPE)
			t[m].shape[t[m].ndim - 1] += 1;
		if (hit && k == EDIT_TID_I32)
			t[m].dtype = SRT_DT_I32;
		m++;
	}
	if (k == EDIT_EXTRA)
		t[m++] = (struct srt_ck_wtensor){.name = target, .dtype = SRT_DT_U8, .ndim = 1,
						 .shape = {3}};
	if (k == EDIT_TID_RANGE)
		setenv("SRT_TEST_TID_VALUE", "8", 1);
	char *dir = tmpdir();
	struct srt_ck_write_opts o = {.fill = zero_fill, .user = t};
	ck_assert_msg(srt_ck_write(dir, t, m, &o, NULL, err, sizeof(err)) == 0, "%s", err);
	unsetenv("SRT_TEST_TID_VALUE");
	free(t);
	free(s);
	return dir;
}

static int check_dir(const struct srt_model_config *c, const char *dir, char *err, size_t errlen,
		     struct srt_ck_check *st, srt_ck_warn_fn warn, void *user)
{
	struct srt_ckpt *ck;
	ck_assert_msg(srt_ck_open(dir, &ck, err, errlen) == 0, "%s", err);
	int rc = srt_ck_dsv4_check(ck, c, warn, user, st, err, errlen);
	srt_ck_close(ck);
	return rc;
}

static char warned[512];
static int n_warned;
static void record_warn(void *user, const char *msg)
{
	(void)user;
	n_warned++;
	snprintf(warned, sizeof(warned), "%s", msg);
}

START_TEST(validation_names_missing_wrong_dtype_and_wrong_shape_tensors)
{
	struct srt_model_config c = load_cfg("tiny");
	char err[512];
	struct srt_ck_check st;
	char *dir = write_edited(&c, EDIT_NONE, NULL);
	ck_assert_msg(check_dir(&c, dir, err, sizeof(err), &st, NULL, NULL) == 0, "%s", err);
	ck_assert_uint_eq(st.problems, 0);

	dir = write_edited(&c, EDIT_DROP, "layers.3.attn.wkv.scale");
	ck_assert_int_eq(check_dir(&c, dir, err, sizeof(err), &st, NULL, NULL), SRT_ECORRUPT);
	assert_has(err, "tensor 'layers.3.attn.wkv.scale' (fp8 block scale F8_E8M0 [1, 2]) is "
			"missing");

	dir = write_edited(&c, EDIT_DTYPE, "layers.1.attn.wq_a.weight");
	ck_assert_int_eq(check_dir(&c, dir, err, sizeof(err), &st, NULL, NULL), SRT_ECORRUPT);
	assert_has(err, "tensor 'layers.1.attn.wq_a.weight' (");
	assert_has(err, "): dtype BF16, expected F8_E4M3");

	dir = write_edited(&c, EDIT_SHAPE, "layers.4.ffn.experts.3.w1.scale");
	ck_assert_int_eq(check_dir(&c, dir, err, sizeof(err), &st, NULL, NULL), SRT_ECORRUPT);
	assert_has(err, "tensor 'layers.4.ffn.experts.3.w1.scale' (");
	assert_has(err, "shape [128, 9], expected [128, 8]");
	ck_assert_uint_eq(st.problems, 1);
	ck_assert(!strstr(err, "more problems"));
}
END_TEST

START_TEST(validation_checks_against_the_right_config)
{
	/* A tiny checkpoint is not a tiny-pro checkpoint: the shape error says which tensor. */
	struct srt_model_config c = load_cfg("tiny"), other = load_cfg("tiny-pro");
	char err[512];
	struct srt_ck_check st;
	char *dir = write_edited(&c, EDIT_NONE, NULL);
	ck_assert_int_eq(check_dir(&other, dir, err, sizeof(err), &st, record_warn, NULL),
			 SRT_ECORRUPT);
	ck_assert_uint_gt(st.problems, 1);
	assert_has(err, "tensor '");
	assert_has(err, "more problems)");
}
END_TEST

START_TEST(validation_warns_on_extra_tensors_and_accepts_i32_tid2eid)
{
	struct srt_model_config c = load_cfg("tiny");
	char err[512];
	struct srt_ck_check st;
	n_warned = 0;
	char *dir = write_edited(&c, EDIT_EXTRA, "layers.0.attn.mystery");
	ck_assert_msg(check_dir(&c, dir, err, sizeof(err), &st, record_warn, NULL) == 0, "%s", err);
	ck_assert_uint_eq(st.extra, 1);
	ck_assert_int_eq(n_warned, 1);
	assert_has(warned, "'layers.0.attn.mystery'");

	dir = write_edited(&c, EDIT_TID_I32, "layers.1.ffn.gate.tid2eid");
	ck_assert_msg(check_dir(&c, dir, err, sizeof(err), &st, NULL, NULL) == 0, "%s", err);
}
END_TEST

START_TEST(validation_rejects_tid2eid_entries_out_of_range)
{
	struct srt_model_config c = load_cfg("tiny");
	char err[512];
	struct srt_ck_check st;
	char *dir = write_edited(&c, EDIT_TID_RANGE, NULL);
	ck_assert_int_eq(check_dir(&c, dir, err, sizeof(err), &st, NULL, NULL), SRT_ECORRUPT);
	assert_has(err, "tensor 'layers.0.ffn.gate.tid2eid'");
	assert_has(err, "entry [511][1] = 8, expected an expert index in [0, 8)");
}
END_TEST

/* ---- the generator ------------------------------------------------------------------------- */

static void *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	void *b = malloc(*n + 1);
	ck_assert_uint_eq(fread(b, 1, *n, f), *n);
	fclose(f);
	return b;
}

static int same_file(const char *a, const char *b)
{
	size_t na, nb;
	void *x = slurp(a, &na), *y = slurp(b, &nb);
	int same = na == nb && !memcmp(x, y, na);
	free(x);
	free(y);
	return same;
}

static char *gen(const char *preset, uint64_t seed, uint64_t shard)
{
	struct srt_model_config c = load_cfg(preset);
	char *dir = strdup(tmpdir());
	struct srt_ck_synth_opts o = {.seed = seed, .shard_bytes = shard};
	char err[512];
	ck_assert_msg(srt_ck_synth_write(&c, dir, &o, err, sizeof(err)) == 0, "%s", err);
	return dir;
}

START_TEST(gen_tiny_is_deterministic_per_seed)
{
	char *a = gen("tiny", SRT_CK_SYNTH_SEED, 0), *b = gen("tiny", SRT_CK_SYNTH_SEED, 0);
	char *c = gen("tiny", 7, 0);
	ck_assert(same_file(path_in(a, SRT_CK_SINGLE_NAME), path_in(b, SRT_CK_SINGLE_NAME)));
	ck_assert(same_file(path_in(a, "config.json"), path_in(b, "config.json")));
	ck_assert(!same_file(path_in(a, SRT_CK_SINGLE_NAME), path_in(c, SRT_CK_SINGLE_NAME)));
	/* Sharding changes the files, not the weights. */
	char *d = gen("tiny", SRT_CK_SYNTH_SEED, 1 << 20);
	ck_assert_int_eq(access(path_in(d, SRT_CK_INDEX_NAME), F_OK), 0);
	struct srt_ckpt *ka, *kc, *kd;
	char err[512];
	ck_assert_int_eq(srt_ck_open(a, &ka, err, sizeof(err)), 0);
	ck_assert_int_eq(srt_ck_open(c, &kc, err, sizeof(err)), 0);
	ck_assert_msg(srt_ck_open(d, &kd, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_gt(srt_ck_file_count(kd), 5);
	ck_assert_str_eq(srt_ck_fingerprint(ka), srt_ck_fingerprint(kd));
	ck_assert_str_ne(srt_ck_fingerprint(ka), srt_ck_fingerprint(kc));
	for (size_t i = 0; i < srt_ck_count(ka); i++) {
		const struct srt_tensor *x = srt_ck_tensor(ka, i);
		const struct srt_tensor *y = srt_ck_find(kd, x->name);
		ck_assert_ptr_nonnull(y);
		ck_assert_int_eq(memcmp(x->data, y->data, x->nbytes), 0);
	}
	srt_ck_close(ka);
	srt_ck_close(kc);
	srt_ck_close(kd);
	free(a);
	free(b);
	free(c);
	free(d);
}
END_TEST

START_TEST(gen_tiny_loads_validates_and_config_json_round_trips)
{
	char *dir = gen("tiny", SRT_CK_SYNTH_SEED, 0);
	struct srt_model_config p = load_cfg("tiny"), c = load_cfg(dir);
	char err[512];
	struct srt_ck_check st;
	ck_assert_msg(check_dir(&c, dir, err, sizeof(err), &st, NULL, NULL) == 0, "%s", err);
	ck_assert_uint_eq(st.extra, 0);
	/* config.json carries the preset's values. */
	ck_assert_int_eq(c.hidden_size, p.hidden_size);
	ck_assert_int_eq(c.n_compress_ratios, p.n_compress_ratios);
	ck_assert_int_eq(memcmp(c.compress_ratios, p.compress_ratios,
				sizeof(int32_t) * (size_t)p.n_compress_ratios), 0);
	ck_assert(c.rope_factor == p.rope_factor && c.hc_eps == p.hc_eps);
	ck_assert(c.rope_original_max_position == p.rope_original_max_position);
	ck_assert(c.compress_rope_theta == p.compress_rope_theta);
	ck_assert_int_eq(c.expert_fp4, p.expert_fp4);
	ck_assert_int_eq(c.num_hash_layers, p.num_hash_layers);
	ck_assert(c.routed_scaling_factor == p.routed_scaling_factor);
	free(dir);
}
END_TEST

/* Sample standard deviation of n floats. */
static double stddev(const float *x, size_t n, double *mean_out)
{
	double s = 0, ss = 0;
	for (size_t i = 0; i < n; i++)
		s += x[i];
	double m = s / (double)n;
	for (size_t i = 0; i < n; i++)
		ss += (x[i] - m) * (x[i] - m);
	if (mean_out)
		*mean_out = m;
	return sqrt(ss / (double)n);
}

START_TEST(gen_values_decode_finite_with_plausible_scales)
{
	char *dir = gen("tiny", SRT_CK_SYNTH_SEED, 0);
	struct srt_model_config c = load_cfg("tiny");
	struct srt_ckpt *ck;
	char err[512];
	ck_assert_int_eq(srt_ck_open(dir, &ck, err, sizeof(err)), 0);
	struct srt_ck_spec *s;
	size_t n;
	ck_assert_int_eq(srt_ck_dsv4_specs(&c, &s, &n, err, sizeof(err)), 0);
	size_t checked_fp8 = 0, checked_fp4 = 0, bad_ids = 0, dup_ids = 0;
	for (size_t i = 0; i < n; i++) {
		const struct srt_tensor *t = srt_ck_find(ck, s[i].name);
		size_t nan_codes = 0;
		const size_t rows = (size_t)s[i].rows, cols = (size_t)s[i].cols;
		float *v = NULL;
		size_t nv = 0;
		if (s[i].role == SRT_CK_FP8_W || s[i].role == SRT_CK_FP4_W) {
			/* Dequantise with the scale tensor that follows it. */
			const struct srt_tensor *sc = srt_ck_find(ck, s[i + 1].name);
			const uint8_t *q = t->data, *e = sc->data;
			nv = rows * cols;
			v = malloc(nv * sizeof(float));
			for (size_t r = 0; r < rows; r++)
				for (size_t k = 0; k < cols; k++) {
					float code, scale;
					if (s[i].role == SRT_CK_FP8_W) {
						nan_codes += srt_fp8_e4m3_is_nan(q[r * cols + k]);
						code = srt_fp8_e4m3_to_f32(q[r * cols + k]);
						scale = srt_e8m0_to_f32(
							e[(r / 128) * ((cols + 127) / 128) + k / 128]);
					} else {
						code = srt_fp4_e2m1_to_f32(srt_fp4_get(q + r * (cols / 2), k));
						scale = srt_e8m0_to_f32(e[r * (cols / 32) + k / 32]);
					}
					v[r * cols + k] = code * scale;
				}
			/* Target std 1/sqrt(fan_in): Irwin-Hall draws have variance exactly 1, a
			 * sample of >= 16K values is within 2% of it; FP8 rounding (3 mantissa bits)
			 * moves it by < 3%, FP4's coarser grid by < 15%. */
			double sd = stddev(v, nv, NULL) * sqrt((double)cols);
			double tol = s[i].role == SRT_CK_FP8_W ? 0.06 : 0.2;
			ck_assert_msg(fabs(sd - 1.0) < tol, "%s: std x sqrt(fan_in) = %g", s[i].name,
				      sd);
			if (s[i].role == SRT_CK_FP8_W)
				checked_fp8++;
			else
				checked_fp4++;
		} else if (t->dtype == SRT_DT_BF16 || t->dtype == SRT_DT_F32) {
			nv = t->nbytes / srt_ck_dtype_size(t->dtype);
			v = malloc(nv * sizeof(float));
			if (t->dtype == SRT_DT_BF16)
				srt_bf16_to_f32_n(t->data, v, nv);
			else
				memcpy(v, t->data, nv * sizeof(float));
			double mean, sd = stddev(v, nv, &mean);
			if (s[i].role == SRT_CK_NORM) /* 1 + 0.05 N */
				ck_assert_msg(fabs(mean - 1.0) < 0.02 && sd < 0.07 && sd > 0.03,
					      "%s: mean %g std %g", s[i].name, mean, sd);
			if (s[i].role == SRT_CK_HC_FN) /* 0.1 / sqrt(cols) */
				ck_assert_msg(fabs(sd * sqrt((double)cols) / 0.1 - 1.0) < 0.05,
					      "%s: std %g", s[i].name, sd);
			if (s[i].role == SRT_CK_HEAD || s[i].role == SRT_CK_LINEAR)
				ck_assert_msg(fabs(sd * sqrt((double)cols) - 1.0) < 0.1,
					      "%s: std %g", s[i].name, sd);
		} else if (s[i].role == SRT_CK_TID2EID) {
			const int64_t *id = t->data;
			size_t k = (size_t)t->shape[1];
			for (size_t tok = 0; tok < (size_t)t->shape[0]; tok++)
				for (size_t a = 0; a < k; a++) {
					bad_ids += id[tok * k + a] < 0 ||
						   id[tok * k + a] >= c.n_routed_experts;
					for (size_t b = 0; b < a; b++)
						dup_ids += id[tok * k + a] == id[tok * k + b];
				}
		}
		/* Per-element ck_assert costs a pipe write in fork mode: count, assert once. */
		size_t nonfinite = 0;
		for (size_t j = 0; j < nv; j++)
			nonfinite += !isfinite(v[j]);
		ck_assert_msg(nonfinite == 0 && nan_codes == 0, "%s: %zu non-finite values, %zu NaN "
			      "codes", s[i].name, nonfinite, nan_codes);
		free(v);
	}
	ck_assert_msg(bad_ids == 0 && dup_ids == 0, "tid2eid: %zu ids out of range, %zu repeated "
		      "within a token", bad_ids, dup_ids);
	ck_assert_uint_gt(checked_fp8, 50);
	ck_assert_uint_gt(checked_fp4, 100);
	free(s);
	srt_ck_close(ck);
	free(dir);
}
END_TEST

/* ---- the command --------------------------------------------------------------------------- */

/* Run gen-model with stdout/stderr captured into out (the test runs in its own fork). */
static int run_cmd(char *out, size_t outlen, int argc, ...)
{
	char *argv[16];
	va_list ap;
	va_start(ap, argc);
	for (int i = 0; i < argc; i++)
		argv[i] = va_arg(ap, char *);
	va_end(ap);
	argv[argc] = NULL;
	char cap[128];
	snprintf(cap, sizeof(cap), "%s/out-XXXXXX", root);
	int fd = mkstemp(cap);
	fflush(stdout);
	fflush(stderr);
	int so = dup(1), se = dup(2);
	dup2(fd, 1);
	dup2(fd, 2);
	int rc = srt_cmd_gen_model(argc, argv);
	fflush(stdout);
	fflush(stderr);
	dup2(so, 1);
	dup2(se, 2);
	close(so);
	close(se);
	ssize_t n = pread(fd, out, outlen - 1, 0);
	out[n > 0 ? n : 0] = '\0';
	close(fd);
	unlink(cap);
	return rc;
}

START_TEST(gen_model_command_writes_checks_and_refuses_huge_presets)
{
	char out[4096];
	char *dir = strdup(path_in(tmpdir(), "sub/tiny"));
	ck_assert_int_eq(run_cmd(out, sizeof(out), 2, "gen-model", "--help"), 0);
	assert_has(out, "usage: shadowrt gen-model PRESET OUT_DIR");
	ck_assert_int_eq(run_cmd(out, sizeof(out), 5, "gen-model", "tiny", dir, "--shard-bytes", "1M"),
			 0);
	assert_has(out, "596 tensors");
	assert_has(out, "fingerprint ck1s-");
	ck_assert_int_eq(run_cmd(out, sizeof(out), 3, "gen-model", "--check", dir), 0);
	assert_has(out, "tensors      596");
	assert_has(out, "I64");
	assert_has(out, "model        tiny: valid (596 expected tensors, 0 extra)");
	ck_assert_int_eq(run_cmd(out, sizeof(out), 5, "gen-model", "--check", dir, "--config",
				 "tiny-pro"), 1);
	assert_has(out, "INVALID");
	ck_assert_int_eq(run_cmd(out, sizeof(out), 3, "gen-model", "deepseek-v4-flash", dir), 1);
	assert_has(out, "pass --force");
	ck_assert_int_eq(run_cmd(out, sizeof(out), 3, "gen-model", "no-such-preset", dir), 1);
	ck_assert_int_eq(run_cmd(out, sizeof(out), 5, "gen-model", "tiny", dir, "--seed", "x"), 2);
	assert_has(out, "--seed 'x'");
	ck_assert_int_eq(run_cmd(out, sizeof(out), 2, "gen-model", "tiny"), 2);
	/* OUT_DIR that is a plain file: said up front, not through a temporary file's name. */
	char *file = strdup(path_in(tmpdir(), "plain"));
	write_file(file, "x", 1);
	ck_assert_int_eq(run_cmd(out, sizeof(out), 3, "gen-model", "tiny", file), 1);
	char want[600];
	snprintf(want, sizeof(want), "cannot create %s: Not a directory", file);
	assert_has(out, want);
	free(file);
	free(dir);
}
END_TEST

/* `--check DIR` validates against DIR/config.json even when DIR is a bare name that is also a
 * preset's name: a tiny-pro checkpoint in a directory called "tiny" is valid, and the tiny
 * preset (which it does not match) is not used. */
START_TEST(gen_model_check_of_bare_dir_named_like_a_preset_reads_its_config_json)
{
	char out[4096];
	char *parent = strdup(tmpdir());
	ck_assert_int_eq(run_cmd(out, sizeof(out), 5, "gen-model", "tiny-pro",
				 path_in(parent, "tiny"), "--shard-bytes", "0"),
			 0);
	ck_assert_int_eq(chdir(parent), 0);
	ck_assert_int_eq(run_cmd(out, sizeof(out), 3, "gen-model", "--check", "tiny"), 0);
	assert_has(out, "model        tiny: valid");
	/* The preset is still there when asked for. */
	ck_assert_int_eq(run_cmd(out, sizeof(out), 5, "gen-model", "--check", "tiny", "--config",
				 "tiny"), 1);
	assert_has(out, "INVALID");
	free(parent);
}
END_TEST

static Suite *ckpt_suite(void)
{
	Suite *s = suite_create("ckpt");
	TCase *tc = tcase_create("json");
	tcase_add_test(tc, header_json_escapes_and_utf8_are_decoded);
	tcase_add_test(tc, header_json_malformed_text_is_refused_with_position);
	tcase_add_test(tc, header_json_duplicate_keys_are_refused);
	tcase_add_test(tc, header_json_deep_nesting_is_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("safetensors");
	tcase_add_test(tc, roundtrip_every_dtype_single_file);
	tcase_add_test(tc, roundtrip_sharded_index_matches_single_file);
	tcase_add_test(tc, writer_fill_callback_progress_and_single_file_replaces_index);
	tcase_add_test(tc, writer_rejects_duplicate_and_empty_names);
	tcase_add_test(tc, truncated_file_is_an_error_naming_file_and_tensor);
	tcase_add_test(tc, header_length_beyond_file_is_an_error);
	tcase_add_test(tc, overlapping_offsets_are_an_error_naming_both_tensors);
	tcase_add_test(tc, unknown_dtype_string_is_an_error);
	tcase_add_test(tc, shape_and_size_mismatch_is_an_error);
	tcase_add_test(tc, index_errors_name_the_index_and_tensor);
	tcase_add_test(tc, file_without_tensors_opens_empty);
	tcase_add_test(tc, unaligned_tensor_data_is_copied_to_aligned_memory);
	tcase_add_test(tc, hugepage_copy_keeps_every_tensor_and_fingerprint);
	tcase_add_test(tc, next_write_removes_temporary_files_of_killed_writers);
	tcase_add_test(tc, fifo_in_place_of_a_safetensors_file_is_refused_not_waited_on);
	tcase_add_test(tc, unlisted_and_duplicate_tensors_across_shards_are_errors);
	tcase_add_test(tc, directory_without_checkpoint_is_enoent);
	tcase_add_test(tc, fingerprint_tracks_sampled_bytes_and_full_hash_every_byte);
	tcase_add_test(tc, weights_view_looks_up_by_name);
	suite_add_tcase(s, tc);

	tc = tcase_create("dsv4");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, tiny_tensor_list_count_and_shapes_follow_the_spec);
	tcase_add_test(tc, flash_tensor_list_matches_published_shapes);
	tcase_add_test(tc, tensor_list_rejects_unshapeable_config);
	tcase_add_test(tc, validation_names_missing_wrong_dtype_and_wrong_shape_tensors);
	tcase_add_test(tc, validation_checks_against_the_right_config);
	tcase_add_test(tc, validation_warns_on_extra_tensors_and_accepts_i32_tid2eid);
	tcase_add_test(tc, validation_rejects_tid2eid_entries_out_of_range);
	suite_add_tcase(s, tc);

	tc = tcase_create("gen");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, gen_tiny_is_deterministic_per_seed);
	tcase_add_test(tc, gen_tiny_loads_validates_and_config_json_round_trips);
	tcase_add_test(tc, gen_values_decode_finite_with_plausible_scales);
	tcase_add_test(tc, gen_model_command_writes_checks_and_refuses_huge_presets);
	tcase_add_test(tc, gen_model_check_of_bare_dir_named_like_a_preset_reads_its_config_json);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	snprintf(root, sizeof(root), "/tmp/srt-ckpt-test-XXXXXX");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	SRunner *sr = srunner_create(ckpt_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	char cmd[96];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "note: could not remove %s\n", root);
	return failed ? 1 : 0;
}
