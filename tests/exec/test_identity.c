/*
 * Cache identity tests (check suite `identity`): a page written to L3 by one setup is never
 * read by another setup whose page bytes would differ, and the weights fingerprint sidecar is
 * reused and invalidated as documented.
 *
 * Every L3 case runs for real: a synthetic tiny checkpoint generated into a fresh directory,
 * the real plugins loaded with dlopen (plus the fixture `swa_twin`, which declares exactly
 * swa's pools), the real `file` L3 store on disk. Engine A finishes a 600-token prompt
 * (write-through: its pages go to L3) and closes; engine B, opened on the same L3 directory
 * with one thing changed, starts a 530-token prompt equal to A's first 530 tokens. The control (nothing changed,
 * even the model directory copied elsewhere) resumes 512 tokens from L3; every change resumes
 * nothing.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include <shadowrt/plugin.h>

#include "ckpt/fingerprint.h"
#include "ckpt/safetensors.h"
#include "exec/engine.h"
#include "exec/identity.h"
#include "plugin/host.h"

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	ck_assert_msg(system(cmd) == 0, "command failed: %s", cmd);
}

/* A fresh directory under the build tree with a generated tiny checkpoint in <base>/tiny. */
static void setup_base(char *base, size_t len)
{
	char err[1024], dir[4096];
	snprintf(base, len, "%s/tests/identity-XXXXXX", env_or("SRT_BUILD_DIR", "."));
	ck_assert_ptr_nonnull(mkdtemp(base));
	ck_assert_msg(!srt_engine_model_dir("tiny", base, 1, dir, sizeof(dir), err, sizeof(err)),
		      "%s", err);
	setenv("SHADOWRT_PLUGIN_PATH", env_or("SRT_PLUGIN_DIR", "lib/shadowrt/plugins"), 1);
}

/* INI with the attention/residual lines given, L2 off, L3 = file store under base/l3. */
static void write_ini(const char *path, const char *base, const char *body)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%s\n[tier.l2]\nplugin = none\n[tier.l3]\nplugin = file\npath = %s/l3\n"
		   "budget = 1G\nfsync = off\n", body, base);
	ck_assert_int_eq(fclose(f), 0);
}

#define STD_ATTN "[attention]\nratio.0 = swa\nratio.4 = csa\nratio.128 = hca\n"

static struct srt_engine *open_with(const char *model, const char *ini)
{
	char err[2048];
	struct srt_engine_opts o = {.config_path = ini, .model = model, .threads = 2,
				    .profile = SRT_PROFILE_REFERENCE, .quiet = 1, .tiers = 1};
	struct srt_engine *e = NULL;
	int rc = srt_engine_open(&o, &e, err, sizeof(err));
	ck_assert_msg(rc == 0, "engine on %s with %s: %s (%d)", model, ini, err, rc);
	return e;
}

static int32_t *prompt(uint64_t n, uint64_t seed)
{
	int32_t *t = malloc(sizeof(int32_t) * n);
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		t[i] = (int32_t)(2 + x % 500); /* tiny: vocab 512 */
	}
	return t;
}

/*
 * Engine A (model_a, body_a) writes a 600-token prompt's pages to L3; engine B (model_b,
 * body_b) starts a prompt of A's first 530 tokens. Returns B's hit; *l3 gets the part of
 * it read from L3.
 */
static uint64_t cross_hit(const char *base, const char *model_a, const char *body_a,
			  const char *model_b, const char *body_b, uint64_t *l3)
{
	char ia[4300], ib[4300], err[2048];
	snprintf(ia, sizeof(ia), "%s/a.ini", base);
	snprintf(ib, sizeof(ib), "%s/b.ini", base);
	write_ini(ia, base, body_a);
	write_ini(ib, base, body_b);
	int32_t *a = prompt(600, 1), *b = prompt(530, 2);
	memcpy(b, a, sizeof(int32_t) * 530);

	struct srt_engine *e = open_with(model_a, ia);
	struct srt_seq *s;
	ck_assert(!srt_engine_seq_start(e, a, 600, 1, &s, NULL, err, sizeof(err)));
	ck_assert_msg(!srt_engine_prefill(e, s, NULL, 0, err, sizeof(err)), "%s", err);
	ck_assert_msg(!srt_engine_seq_finish(s, NULL, err, sizeof(err)), "%s", err);
	srt_engine_seq_free(s);
	srt_engine_close(e);

	e = open_with(model_b, ib);
	uint64_t hit = 0, t[3] = {0};
	ck_assert_msg(!srt_engine_seq_start(e, b, 530, 1, &s, &hit, err, sizeof(err)), "%s", err);
	srt_seq_hit_tiers(s, t);
	/* and it computes: the setup under test works at all */
	ck_assert_msg(!srt_engine_prefill(e, s, NULL, 0, err, sizeof(err)), "%s", err);
	srt_engine_seq_free(s);
	srt_engine_close(e);
	free(a), free(b);
	*l3 = t[2];
	fprintf(stderr, "[identity] hit %llu (L3 %llu)\n", (unsigned long long)hit,
		(unsigned long long)t[2]);
	return hit;
}

/* <base>/tiny, or for a copy <base>/<name>/tiny: every model directory is called "tiny", as
 * the model name comes from the directory name and must not be what tells them apart */
static void model_path(const char *base, const char *name, char *out, size_t len)
{
	if (!strcmp(name, "tiny")) {
		snprintf(out, len, "%s/tiny", base);
		return;
	}
	char d[4096];
	ck_assert_int_lt(snprintf(d, sizeof(d) - 8, "%s/%s", base, name), (int)sizeof(d) - 8);
	ck_assert_int_eq(mkdir(d, 0755), 0);
	snprintf(out, len, "%.4000s/tiny", d);
}

static void cleanup(const char *base)
{
	sh("rm -rf '%s'", base);
}

static void fixture(const char *set, char *out, size_t len)
{
	snprintf(out, len, "%s/%s/swa_twin.so", SRT_IDENTITY_FIXTURES, set);
}

/* --- L3 cases ------------------------------------------------------------------------------- */

START_TEST(control_the_same_setup_resumes_512_tokens_from_l3_even_from_a_copied_directory)
{
	char base[4096], m[4200], copy[4200];
	uint64_t l3;
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	model_path(base, "tiny-copy", copy, sizeof(copy));
	sh("cp -r '%s' '%s'", m, copy); /* new inodes: the fingerprint is recomputed, equal */
	ck_assert_uint_eq(cross_hit(base, m, STD_ATTN, copy, STD_ATTN, &l3), 512);
	ck_assert_uint_eq(l3, 512);
	cleanup(base);
}
END_TEST

START_TEST(residual_plain_after_an_mhc_run_resumes_nothing)
{
	char base[4096], m[4200];
	uint64_t l3;
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	ck_assert_uint_eq(cross_hit(base, m, STD_ATTN "[residual]\nplugin = mhc\n", m,
				    STD_ATTN "[residual]\nplugin = plain\n", &l3), 0);
	cleanup(base);
}
END_TEST

START_TEST(an_edited_rope_theta_in_config_json_resumes_nothing)
{
	char base[4096], m[4200], copy[4200];
	uint64_t l3;
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	model_path(base, "tiny-rope", copy, sizeof(copy));
	sh("cp -r '%s' '%s'", m, copy);
	sh("sed -i 's/\"rope_theta\": 10000.0/\"rope_theta\": 10001.0/' '%s/config.json'", copy);
	sh("grep -q '\"rope_theta\": 10001.0' '%s/config.json'", copy);
	ck_assert_uint_eq(cross_hit(base, m, STD_ATTN, copy, STD_ATTN, &l3), 0);
	cleanup(base);
}
END_TEST

/* File offset of a tensor's data, from the safetensors header (read with jansson). */
static long tensor_offset(const char *file, const char *name, long *nbytes)
{
	FILE *f = fopen(file, "rb");
	ck_assert_ptr_nonnull(f);
	uint8_t lb[8];
	ck_assert_uint_eq(fread(lb, 1, 8, f), 8);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | lb[i];
	char *hdr = malloc(n + 1);
	ck_assert_uint_eq(fread(hdr, 1, n, f), n);
	hdr[n] = 0;
	fclose(f);
	json_error_t je;
	json_t *root = json_loads(hdr, 0, &je);
	ck_assert_ptr_nonnull(root);
	json_t *off = json_object_get(json_object_get(root, name), "data_offsets");
	long b = (long)json_integer_value(json_array_get(off, 0));
	*nbytes = (long)json_integer_value(json_array_get(off, 1)) - b;
	json_decref(root);
	free(hdr);
	return 8 + (long)n + b;
}

START_TEST(sixteen_thousand_changed_embed_bytes_outside_the_old_sample_windows_resume_nothing)
{
	char base[4096], m[4200], copy[4200], file[4300], err[1024];
	uint64_t l3;
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	model_path(base, "tiny-embed", copy, sizeof(copy));
	sh("cp -r '%s' '%s'", m, copy);
	snprintf(file, sizeof(file), "%s/model.safetensors", copy);
	long nbytes, at = tensor_offset(file, "embed.weight", &nbytes);
	/* the old sampled fingerprint read 16 windows of 256 bytes at (nbytes - 256) * w / 15:
	 * change 16,000 bytes strictly between windows 1 and 2 */
	long w1 = (nbytes - 256) * 1 / 15, w2 = (nbytes - 256) * 2 / 15;
	long start = w1 + 256 + 64;
	ck_assert_int_le(start + 16000, w2);
	int fd = open(file, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	uint8_t buf[16000];
	for (int i = 0; i < 16000; i += 2)
		buf[i] = 0x80, buf[i + 1] = 0x3f; /* bf16 1.0 */
	ck_assert_int_eq(pwrite(fd, buf, sizeof(buf), at + start), (ssize_t)sizeof(buf));
	ck_assert_int_eq(close(fd), 0);
	/* the old fingerprint cannot see it */
	struct srt_ckpt *c1, *c2;
	ck_assert_msg(!srt_ck_open(m, &c1, err, sizeof(err)), "%s", err);
	ck_assert_msg(!srt_ck_open(copy, &c2, err, sizeof(err)), "%s", err);
	ck_assert_str_eq(srt_ck_fingerprint(c1), srt_ck_fingerprint(c2));
	srt_ck_close(c1);
	srt_ck_close(c2);
	ck_assert_uint_eq(cross_hit(base, m, STD_ATTN, copy, STD_ATTN, &l3), 0);
	cleanup(base);
}
END_TEST

START_TEST(a_second_attention_plugin_with_swas_pools_does_not_read_swas_pages)
{
	char base[4096], m[4200], twin[4200], body[8192];
	uint64_t l3;
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	fixture("twin", twin, sizeof(twin));
	snprintf(body, sizeof(body), "[attention]\nratio.0 = %s\nratio.4 = csa\nratio.128 = hca\n",
		 twin);
	ck_assert_uint_eq(cross_hit(base, m, STD_ATTN, m, body, &l3), 0);
	cleanup(base);
}
END_TEST

START_TEST(the_same_plugin_resumes_but_another_version_option_or_layout_id_resumes_nothing)
{
	char base[4096], m[4200], fx[4200], fx2[4200], a[8192], b[8192];
	uint64_t l3;
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	static const char *tail = "ratio.4 = csa\nratio.128 = hca\n";
	/* control: twin after twin resumes (the fixture itself does not defeat the cache) */
	fixture("twin", fx, sizeof(fx));
	snprintf(a, sizeof(a), "[attention]\nratio.0 = %s\n%s", fx, tail);
	ck_assert_uint_eq(cross_hit(base, m, a, m, a, &l3), 512);
	sh("rm -rf '%s/l3'", base);
	/* version 1.0.0 -> 1.0.1 */
	fixture("twin-v101", fx2, sizeof(fx2));
	snprintf(b, sizeof(b), "[attention]\nratio.0 = %s\n%s", fx2, tail);
	ck_assert_uint_eq(cross_hit(base, m, a, m, b, &l3), 0);
	sh("rm -rf '%s/l3'", base);
	/* option bias = 0.001: same pools, other bytes */
	snprintf(b, sizeof(b), "[attention]\nratio.0 = %s\n%s[attention.swa_twin]\nbias = 0.001\n",
		 fx, tail);
	ck_assert_uint_eq(cross_hit(base, m, a, m, b, &l3), 0);
	sh("rm -rf '%s/l3'", base);
	/* layout id "twin-a" -> "twin-b", same name and version */
	fixture("twin-layout-a", fx, sizeof(fx));
	fixture("twin-layout-b", fx2, sizeof(fx2));
	snprintf(a, sizeof(a), "[attention]\nratio.0 = %s\n%s", fx, tail);
	snprintf(b, sizeof(b), "[attention]\nratio.0 = %s\n%s", fx2, tail);
	ck_assert_uint_eq(cross_hit(base, m, a, m, b, &l3), 0);
	sh("rm -rf '%s/l3'", base);
	/* swa's kv_dtype */
	ck_assert_uint_eq(cross_hit(base, m, STD_ATTN, m,
				    STD_ATTN "[attention.swa]\nkv_dtype = bf16\n", &l3), 0);
	cleanup(base);
}
END_TEST

/* L1: every engine owns its radix cache; two engines of different identities in one process
 * never see each other's pages, while an engine resumes from its own. */
START_TEST(l1_pages_of_one_identity_are_never_matched_by_an_engine_of_another)
{
	char base[4096], m[4200], ia[4300], ib[4300], err[2048];
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	snprintf(ia, sizeof(ia), "%s/a.ini", base);
	snprintf(ib, sizeof(ib), "%s/b.ini", base);
	write_ini(ia, base, STD_ATTN "[residual]\nplugin = mhc\n");
	write_ini(ib, base, STD_ATTN "[residual]\nplugin = plain\n");
	struct srt_engine_opts oa = {.config_path = ia, .model = m, .threads = 2, .quiet = 1,
				     .profile = SRT_PROFILE_REFERENCE};
	struct srt_engine_opts ob = oa;
	ob.config_path = ib;
	struct srt_engine *a = NULL, *b = NULL;
	ck_assert_msg(!srt_engine_open(&oa, &a, err, sizeof(err)), "%s", err);
	ck_assert_msg(!srt_engine_open(&ob, &b, err, sizeof(err)), "%s", err);
	ck_assert(memcmp(srt_engine_identity(a), srt_engine_identity(b), 32));
	int32_t *t = prompt(530, 3);
	struct srt_seq *s;
	uint64_t hit = 1;
	ck_assert(!srt_engine_seq_start(a, t, 530, 1, &s, NULL, err, sizeof(err)));
	ck_assert_msg(!srt_engine_prefill(a, s, NULL, 0, err, sizeof(err)), "%s", err);
	ck_assert_msg(!srt_engine_seq_finish(s, NULL, err, sizeof(err)), "%s", err);
	srt_engine_seq_free(s);
	ck_assert(!srt_engine_seq_start(b, t, 530, 1, &s, &hit, err, sizeof(err)));
	ck_assert_uint_eq(hit, 0);
	srt_engine_seq_free(s);
	ck_assert(!srt_engine_seq_start(a, t, 530, 1, &s, &hit, err, sizeof(err)));
	ck_assert_uint_eq(hit, 512);
	srt_engine_seq_free(s);
	free(t);
	srt_engine_close(a);
	srt_engine_close(b);
	cleanup(base);
}
END_TEST

/* --- the weights fingerprint sidecar -------------------------------------------------------- */

static char logbuf[8192];
static void capture(void *user, int level, const char *msg)
{
	(void)user, (void)level;
	size_t n = strlen(logbuf);
	snprintf(logbuf + n, sizeof(logbuf) - n, "%s\n", msg);
}

static struct srt_ck_wfp fp_of(const char *dir, const char *cache_dir)
{
	char err[1024];
	struct srt_ckpt *ck;
	struct srt_ck_wfp w;
	struct srt_ck_wfp_opts o = {.cache_dir = cache_dir, .threads = 2, .quiet = 1,
				    .log = capture};
	ck_assert_msg(!srt_ck_open(dir, &ck, err, sizeof(err)), "%s", err);
	ck_assert_msg(!srt_ck_weights_fingerprint(ck, &o, &w, err, sizeof(err)), "%s", err);
	srt_ck_close(ck);
	return w;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

START_TEST(the_sidecar_is_reused_without_rehashing_and_invalidated_by_size_or_mtime)
{
	char base[4096], m[4200], file[4300], side[4300];
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	snprintf(file, sizeof(file), "%s/model.safetensors", m);
	snprintf(side, sizeof(side), "%s/%s", m, SRT_CK_WFP_SIDECAR);
	struct stat st;
	ck_assert_int_eq(stat(file, &st), 0);

	struct srt_ck_wfp w1 = fp_of(m, NULL);
	ck_assert_uint_eq(w1.hashed_files, 1);
	ck_assert_uint_eq(w1.hashed_bytes, (uint64_t)st.st_size);
	ck_assert_uint_eq(w1.bytes, (uint64_t)st.st_size);
	ck_assert_str_eq(w1.sidecar, side);
	ck_assert_int_eq(w1.fallback, 0);

	struct srt_ck_wfp w2 = fp_of(m, NULL);
	ck_assert_uint_eq(w2.hashed_files, 0);
	ck_assert_uint_eq(w2.hashed_bytes, 0);
	ck_assert_str_eq(w2.hex, w1.hex);

	/* reuse means trust: a sidecar whose key matches is believed (nothing rehashed), so a
	 * planted digest comes back */
	json_error_t je;
	json_t *root = json_load_file(side, 0, &je);
	ck_assert_ptr_nonnull(root);
	json_t *e = json_array_get(json_object_get(root, "files"), 0);
	json_object_set_new(e, "xxh3_128", json_string("00000000000000000000000000000000"));
	ck_assert_int_eq(json_dump_file(root, side, 0), 0);
	struct srt_ck_wfp w3 = fp_of(m, NULL);
	ck_assert_uint_eq(w3.hashed_files, 0);
	ck_assert_str_ne(w3.hex, w1.hex);
	/* ... until the file's mtime changes: rehashed, the true digest is back */
	struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = st.st_mtim.tv_sec + 7}};
	ck_assert_int_eq(utimensat(AT_FDCWD, file, ts, 0), 0);
	struct srt_ck_wfp w4 = fp_of(m, NULL);
	ck_assert_uint_eq(w4.hashed_files, 1);
	ck_assert_str_eq(w4.hex, w1.hex);
	ck_assert_uint_eq(fp_of(m, NULL).hashed_files, 0);
	/* a size change (one byte appended; the mapped checkpoint is opened before) */
	json_decref(root);
	char err[1024];
	struct srt_ckpt *ck;
	ck_assert_msg(!srt_ck_open(m, &ck, err, sizeof(err)), "%s", err);
	sh("printf x >> '%s'", file);
	struct srt_ck_wfp w5;
	struct srt_ck_wfp_opts o = {.threads = 1, .quiet = 1};
	ck_assert(!srt_ck_weights_fingerprint(ck, &o, &w5, err, sizeof(err)));
	srt_ck_close(ck);
	ck_assert_uint_eq(w5.hashed_files, 1);
	ck_assert_uint_eq(w5.bytes, (uint64_t)st.st_size + 1);
	ck_assert_str_ne(w5.hex, w1.hex);
	cleanup(base);
}
END_TEST

START_TEST(a_corrupt_or_foreign_sidecar_is_ignored_said_and_rewritten)
{
	char base[4096], m[4200], side[4300];
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	snprintf(side, sizeof(side), "%s/%s", m, SRT_CK_WFP_SIDECAR);
	struct srt_ck_wfp w1 = fp_of(m, NULL);
	static const char *bad[] = {
		"{\"format\": \"shadowrt-weights-fingerprint\", \"version\": 1, \"files\": [",
		"\x01\x02garbage",
		"{\"format\": \"something-else\", \"version\": 1, \"hash\": \"xxh3-128\", "
		"\"chunk_bytes\": 67108864, \"files\": []}",
		"{\"format\": \"shadowrt-weights-fingerprint\", \"version\": 1, \"hash\": "
		"\"xxh3-128\", \"chunk_bytes\": 67108864, \"files\": [{\"name\": 5}]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_text(side, bad[i]);
		logbuf[0] = 0;
		struct srt_ck_wfp w = fp_of(m, NULL);
		ck_assert_uint_eq(w.hashed_files, 1);
		ck_assert_str_eq(w.hex, w1.hex);
		ck_assert_msg(strstr(logbuf, "ignoring weights fingerprint sidecar"), "case %zu: %s",
			      i, logbuf);
		ck_assert_uint_eq(fp_of(m, NULL).hashed_files, 0); /* rewritten, valid */
	}
	cleanup(base);
}
END_TEST

START_TEST(a_read_only_checkpoint_directory_remembers_the_fingerprint_in_the_cache_dir)
{
	char base[4096], m[4200], cache[4200], side[4300];
	setup_base(base, sizeof(base));
	model_path(base, "tiny", m, sizeof(m));
	snprintf(cache, sizeof(cache), "%s/fp-cache", base);
	snprintf(side, sizeof(side), "%s/%s", m, SRT_CK_WFP_SIDECAR);
	/* a private mount namespace (this test runs in its own forked process) and a read-only
	 * bind mount of the checkpoint directory: root ignores mode bits, not a ro mount */
	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount(m, m, NULL, MS_BIND, NULL) ||
	    mount(NULL, m, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL)) {
		fprintf(stderr, "[identity] note: no mount rights here (%s): read-only case "
			"skipped\n", strerror(errno));
		cleanup(base);
		return;
	}
	ck_assert_int_ne(access(side, F_OK), 0);
	logbuf[0] = 0;
	struct srt_ck_wfp w1 = fp_of(m, cache);
	ck_assert_int_eq(w1.fallback, 1);
	ck_assert_uint_eq(w1.hashed_files, 1);
	ck_assert_msg(!strncmp(w1.sidecar, cache, strlen(cache)), "%s", w1.sidecar);
	ck_assert_msg(strstr(logbuf, "not writable"), "%s", logbuf);
	ck_assert_int_ne(access(side, F_OK), 0);
	struct srt_ck_wfp w2 = fp_of(m, cache);
	ck_assert_uint_eq(w2.hashed_files, 0);
	ck_assert_int_eq(w2.fallback, 1);
	ck_assert_str_eq(w2.hex, w1.hex);
	umount(m);
	cleanup(base);
}
END_TEST

/* --- the identity builder ------------------------------------------------------------------- */

static void ident_of_config(const char *path, const char *text, char hex[65])
{
	char err[512];
	write_text(path, text);
	struct srt_ident b;
	srt_ident_begin(&b);
	ck_assert_msg(!srt_ident_add_model_config(&b, path, err, sizeof(err)), "%s", err);
	srt_ident_end(&b);
	memcpy(hex, b.hex, 65);
}

START_TEST(config_key_order_and_spacing_keep_the_identity_and_any_value_changes_it)
{
	char base[4096], path[4200], a[65], b[65], c[65], d[65], y[65], y2[65];
	snprintf(base, sizeof(base), "%s/tests/identity-XXXXXX", env_or("SRT_BUILD_DIR", "."));
	ck_assert_ptr_nonnull(mkdtemp(base));
	snprintf(path, sizeof(path), "%s/config.json", base);
	ident_of_config(path, "{\"rope_theta\": 10000.0, \"x\": {\"k\": [1, 2]}}", a);
	ident_of_config(path, "{\n  \"x\": {\"k\": [1,2]},\n  \"rope_theta\": 1e4\n}\n", b);
	ident_of_config(path, "{\"rope_theta\": 10000.0, \"x\": {\"k\": [1, 3]}}", c);
	ident_of_config(path, "{\"rope_theta\": 10000.0, \"x\": {\"k\": [1, 2]}, \"new\": 0}", d);
	ck_assert_str_eq(a, b);
	ck_assert_str_ne(a, c);
	ck_assert_str_ne(a, d);
	/* not strict JSON (YAML): raw bytes, so any change counts */
	ident_of_config(path, "rope_theta: 10000.0\n", y);
	ident_of_config(path, "rope_theta: 10001.0\n", y2);
	ck_assert_str_ne(y, y2);
	ck_assert_str_ne(y, a);
	cleanup(base);
}
END_TEST

static Suite *identity_suite(void)
{
	Suite *s = suite_create("identity");
	TCase *l3 = tcase_create("l3");
	tcase_add_test(l3, control_the_same_setup_resumes_512_tokens_from_l3_even_from_a_copied_directory);
	tcase_add_test(l3, residual_plain_after_an_mhc_run_resumes_nothing);
	tcase_add_test(l3, an_edited_rope_theta_in_config_json_resumes_nothing);
	tcase_add_test(l3, sixteen_thousand_changed_embed_bytes_outside_the_old_sample_windows_resume_nothing);
	tcase_add_test(l3, a_second_attention_plugin_with_swas_pools_does_not_read_swas_pages);
	tcase_add_test(l3, the_same_plugin_resumes_but_another_version_option_or_layout_id_resumes_nothing);
	tcase_add_test(l3, l1_pages_of_one_identity_are_never_matched_by_an_engine_of_another);
	suite_add_tcase(s, l3);
	TCase *fp = tcase_create("fingerprint");
	tcase_add_test(fp, the_sidecar_is_reused_without_rehashing_and_invalidated_by_size_or_mtime);
	tcase_add_test(fp, a_corrupt_or_foreign_sidecar_is_ignored_said_and_rewritten);
	tcase_add_test(fp, a_read_only_checkpoint_directory_remembers_the_fingerprint_in_the_cache_dir);
	tcase_add_test(fp, config_key_order_and_spacing_keep_the_identity_and_any_value_changes_it);
	suite_add_tcase(s, fp);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(identity_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
