/* The weights fingerprint and its sidecar (fingerprint.h). */
#include "ckpt/fingerprint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include <shadowrt/plugin.h>

#include "ckpt/safetensors.h"
#include "tier/sha256.h"

#define FORMAT "shadowrt-weights-fingerprint"
#define VERSION 1
#define MAX_FILES 4096

struct wfile {
	const char *path; /* as the checkpoint opened it (borrowed) */
	char name[256];   /* base name: the sidecar key */
	uint64_t size, mtime_ns, ctime_ns, ino;
	uint8_t digest[16];
	int known;        /* digest from a sidecar */
	int stable;       /* unchanged while hashed: may be remembered */
	/* hashing */
	const uint8_t *map;
	uint64_t n_chunks, first_job;
	uint8_t *chunk_digests; /* [n_chunks][16] */
};

struct job_set {
	struct wfile *files;
	uint32_t n;
	uint64_t n_jobs;
	_Atomic uint64_t next;
};

static int errf(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static void say(const struct srt_ck_wfp_opts *o, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(const struct srt_ck_wfp_opts *o, int level, const char *fmt, ...)
{
	if (!o->log)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	o->log(o->log_user, level, msg);
}

static uint64_t ns_of(struct timespec t)
{
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void put_canon(const XXH128_hash_t *h, uint8_t out[16])
{
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, *h);
	memcpy(out, c.digest, 16);
}

static void hex16(const uint8_t d[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int unhex16(const char *s, uint8_t d[16])
{
	if (!s || strlen(s) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1 || !strchr("0123456789abcdef", s[2 * i]) ||
		    !strchr("0123456789abcdef", s[2 * i + 1]))
			return -1;
		d[i] = (uint8_t)v;
	}
	return 0;
}

static void stat_key(struct wfile *f, const struct stat *st)
{
	f->size = (uint64_t)st->st_size;
	f->mtime_ns = ns_of(st->st_mtim);
	f->ctime_ns = ns_of(st->st_ctim);
	f->ino = (uint64_t)st->st_ino;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct wfile *)a)->name, ((const struct wfile *)b)->name);
}

/* --- sidecar ------------------------------------------------------------------------------ */

static uint64_t jint(json_t *o, const char *k, int *bad)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		*bad = 1;
		return 0;
	}
	return (uint64_t)json_integer_value(v);
}

/*
 * Fill the digests of files whose key matches an entry of the sidecar at path. want_dir: the
 * directory the sidecar must name (fallback location), or NULL. Returns files matched, or -1
 * when the sidecar is absent (ENOENT), -2 when it was ignored (why in *why).
 */
static int sidecar_read(const char *path, const char *want_dir, struct wfile *fs, uint32_t n,
			char *why, size_t why_len)
{
	json_error_t je;
	struct stat st;
	if (stat(path, &st) && errno == ENOENT)
		return -1;
	if (stat(path, &st) == 0 && st.st_size > (off_t)(1 << 24)) {
		snprintf(why, why_len, "larger than 16 MiB");
		return -2;
	}
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		snprintf(why, why_len, "line %d: %s", je.line, je.text);
		return -2;
	}
	int matched = 0, bad = 0;
	json_t *files = json_object_get(root, "files");
	const char *fmt = json_string_value(json_object_get(root, "format"));
	const char *hash = json_string_value(json_object_get(root, "hash"));
	const char *dir = json_string_value(json_object_get(root, "dir"));
	uint64_t ver = jint(root, "version", &bad), chunk = jint(root, "chunk_bytes", &bad);
	if (!fmt || strcmp(fmt, FORMAT) || bad || ver != VERSION || !hash ||
	    strcmp(hash, "xxh3-128") || chunk != SRT_CK_WFP_CHUNK || !json_is_array(files)) {
		snprintf(why, why_len, "not a version %d %s file (format, version, hash, "
			 "chunk_bytes or files wrong)", VERSION, FORMAT);
		matched = -2;
		goto out;
	}
	if (want_dir && (!dir || strcmp(dir, want_dir))) {
		snprintf(why, why_len, "it belongs to directory '%s', not '%s'", dir ? dir : "?",
			 want_dir);
		matched = -2;
		goto out;
	}
	size_t i;
	json_t *e;
	json_array_foreach(files, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		uint64_t size = jint(e, "size", &bad), mt = jint(e, "mtime_ns", &bad),
			 ct = jint(e, "ctime_ns", &bad), ino = jint(e, "ino", &bad);
		uint8_t d[16];
		if (!name || bad || unhex16(json_string_value(json_object_get(e, "xxh3_128")), d)) {
			snprintf(why, why_len, "entry %zu is malformed", i);
			matched = -2;
			goto out;
		}
		for (uint32_t k = 0; k < n; k++) {
			struct wfile *f = &fs[k];
			if (!f->known && !strcmp(f->name, name) && f->size == size &&
			    f->mtime_ns == mt && f->ctime_ns == ct && f->ino == ino) {
				memcpy(f->digest, d, 16);
				f->known = 1;
				f->stable = 1;
				matched++;
			}
		}
	}
out:
	json_decref(root);
	return matched;
}

/* Write the digests of every known/stable file atomically to path; 0 or -errno. */
static int sidecar_write(const char *path, const char *dir, const struct wfile *fs, uint32_t n)
{
	json_t *root = json_object(), *files = json_array();
	if (!root || !files) {
		json_decref(root);
		json_decref(files);
		return -ENOMEM;
	}
	json_object_set_new(root, "format", json_string(FORMAT));
	json_object_set_new(root, "version", json_integer(VERSION));
	json_object_set_new(root, "hash", json_string("xxh3-128"));
	json_object_set_new(root, "chunk_bytes", json_integer((json_int_t)SRT_CK_WFP_CHUNK));
	json_object_set_new(root, "dir", json_string(dir));
	for (uint32_t k = 0; k < n; k++) {
		const struct wfile *f = &fs[k];
		if (!f->stable)
			continue;
		char hx[33];
		hex16(f->digest, hx);
		json_t *e = json_pack("{s:s, s:I, s:I, s:I, s:I, s:s}", "name", f->name, "size",
				      (json_int_t)f->size, "mtime_ns", (json_int_t)f->mtime_ns,
				      "ctime_ns", (json_int_t)f->ctime_ns, "ino",
				      (json_int_t)f->ino, "xxh3_128", hx);
		if (e)
			json_array_append_new(files, e);
	}
	json_object_set_new(root, "files", files);
	/* a private temporary name: other processes and threads may write the same sidecar */
	static _Atomic unsigned seq;
	char tmp[4300];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&seq, 1));
	int rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
	size_t len = text ? strlen(text) : 0;
	if (!text || write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1)
		rc = text ? -EIO : -ENOMEM;
	free(text);
	if (close(fd) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc)
		unlink(tmp);
out:
	json_decref(root);
	return rc;
}

/* <cache dir>/<SHA-256 of dir>.json into out; 0, or -1 when no cache dir is known. */
static int fallback_path(const struct srt_ck_wfp_opts *o, const char *dir, char *cdir,
			 size_t clen, char *out, size_t len)
{
	const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
	if (o->cache_dir && *o->cache_dir)
		snprintf(cdir, clen, "%s", o->cache_dir);
	else if (x && *x)
		snprintf(cdir, clen, "%s/shadowrt/fingerprints", x);
	else if (h && *h)
		snprintf(cdir, clen, "%s/.cache/shadowrt/fingerprints", h);
	else
		return -1;
	uint8_t d[32];
	char hx[65];
	srt_tier_sha256(dir, strlen(dir), d);
	for (int i = 0; i < 32; i++)
		snprintf(hx + 2 * i, 3, "%02x", d[i]);
	snprintf(out, len, "%s/%s.json", cdir, hx);
	return 0;
}

/* --- hashing ------------------------------------------------------------------------------- */

static void *worker(void *arg)
{
	struct job_set *js = arg;
	for (;;) {
		uint64_t j = atomic_fetch_add(&js->next, 1);
		if (j >= js->n_jobs)
			break;
		/* the file whose job range holds j (files from a sidecar have none) */
		struct wfile *f = NULL;
		for (uint32_t i = 0; i < js->n; i++) {
			struct wfile *g = &js->files[i];
			if (g->map && j >= g->first_job && j < g->first_job + g->n_chunks) {
				f = g;
				break;
			}
		}
		uint64_t c = j - f->first_job, off = c * SRT_CK_WFP_CHUNK;
		uint64_t n = f->size - off < SRT_CK_WFP_CHUNK ? f->size - off : SRT_CK_WFP_CHUNK;
		XXH128_hash_t h = XXH3_128bits(f->map + off, (size_t)n);
		put_canon(&h, f->chunk_digests + 16 * c);
	}
	return NULL;
}

static void file_digest(struct wfile *f)
{
	static const char tag[] = "shadowrt/weights-file/v1";
	XXH3_state_t *s = XXH3_createState();
	uint8_t sz[8];
	for (int i = 0; i < 8; i++)
		sz[i] = (uint8_t)(f->size >> (8 * i));
	XXH128_hash_t h;
	if (s) {
		XXH3_128bits_reset(s);
		XXH3_128bits_update(s, tag, sizeof(tag));
		XXH3_128bits_update(s, sz, 8);
		XXH3_128bits_update(s, f->chunk_digests, (size_t)(16 * f->n_chunks));
		h = XXH3_128bits_digest(s);
		XXH3_freeState(s);
	} else { /* cannot allocate a state: hash one buffer instead */
		size_t n = sizeof(tag) + 8 + (size_t)(16 * f->n_chunks);
		uint8_t *b = malloc(n);
		if (!b)
			abort();
		memcpy(b, tag, sizeof(tag));
		memcpy(b + sizeof(tag), sz, 8);
		memcpy(b + sizeof(tag) + 8, f->chunk_digests, (size_t)(16 * f->n_chunks));
		h = XXH3_128bits(b, n);
		free(b);
	}
	put_canon(&h, f->digest);
}

static int online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static int hash_files(struct wfile *fs, uint32_t n, const struct srt_ck_wfp_opts *o,
		      const char *dir, uint64_t *bytes, uint32_t *files, char *err, size_t errlen)
{
	int rc = 0;
	uint64_t jobs = 0, todo = 0;
	*bytes = 0;
	*files = 0;
	for (uint32_t k = 0; k < n; k++) {
		struct wfile *f = &fs[k];
		if (f->known)
			continue;
		int fd = open(f->path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			rc = errf(err, errlen, SRT_EIO, "weights fingerprint: cannot open %s: %s",
				  f->path, strerror(errno));
			goto out;
		}
		struct stat st;
		if (fstat(fd, &st)) {
			close(fd);
			rc = errf(err, errlen, SRT_EIO, "weights fingerprint: cannot stat %s: %s",
				  f->path, strerror(errno));
			goto out;
		}
		stat_key(f, &st);
		f->n_chunks = f->size ? (f->size + SRT_CK_WFP_CHUNK - 1) / SRT_CK_WFP_CHUNK : 0;
		f->chunk_digests = calloc(f->n_chunks ? f->n_chunks : 1, 16);
		if (!f->chunk_digests) {
			close(fd);
			rc = errf(err, errlen, SRT_ENOMEM, "weights fingerprint: out of memory");
			goto out;
		}
		if (f->size) {
			void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
			if (m == MAP_FAILED) {
				close(fd);
				rc = errf(err, errlen, SRT_EIO, "weights fingerprint: cannot map %s: %s",
					  f->path, strerror(errno));
				goto out;
			}
			madvise(m, (size_t)f->size, MADV_SEQUENTIAL);
			f->map = m;
		}
		close(fd);
		f->first_job = jobs;
		jobs += f->n_chunks;
		todo += f->size;
		(*files)++;
	}
	if (!*files)
		return 0;
	if (!o->quiet && todo >= (o->progress_bytes ? o->progress_bytes : (uint64_t)1 << 30))
		fprintf(stderr, "shadowrt: fingerprinting %.1f GiB of weights in %s (once; "
			"remembered in %s)\n", (double)todo / (1u << 30), dir, SRT_CK_WFP_SIDECAR);
	int nt = o->threads > 0 ? o->threads : online_cpus();
	if (nt > 16)
		nt = 16;
	if ((uint64_t)nt > jobs)
		nt = jobs ? (int)jobs : 1;
	struct job_set js = {.files = fs, .n = n, .n_jobs = jobs};
	atomic_init(&js.next, 0);
	pthread_t th[16];
	int started = 0;
	for (int t = 1; t < nt; t++)
		if (!pthread_create(&th[started], NULL, worker, &js))
			started++;
	worker(&js); /* this thread works too; fewer threads started is only slower */
	for (int t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	for (uint32_t k = 0; k < n; k++) {
		struct wfile *f = &fs[k];
		if (f->known)
			continue;
		file_digest(f);
		struct stat st;
		struct wfile now = *f;
		f->stable = stat(f->path, &st) == 0 && (stat_key(&now, &st), now.size == f->size &&
							 now.mtime_ns == f->mtime_ns &&
							 now.ctime_ns == f->ctime_ns &&
							 now.ino == f->ino);
		*bytes += f->size;
	}
out:
	for (uint32_t k = 0; k < n; k++) {
		struct wfile *f = &fs[k];
		if (f->map)
			munmap((void *)f->map, (size_t)f->size);
		f->map = NULL;
		free(f->chunk_digests);
		f->chunk_digests = NULL;
	}
	return rc;
}

/* --- the fingerprint ----------------------------------------------------------------------- */

int srt_ck_weights_fingerprint(const struct srt_ckpt *ck, const struct srt_ck_wfp_opts *opts,
			       struct srt_ck_wfp *out, char *err, size_t errlen)
{
	static const struct srt_ck_wfp_opts none;
	const struct srt_ck_wfp_opts *o = opts ? opts : &none;
	memset(out, 0, sizeof(*out));
	struct wfile *fs = calloc(MAX_FILES, sizeof(*fs));
	if (!fs)
		return errf(err, errlen, SRT_ENOMEM, "weights fingerprint: out of memory");
	uint32_t n = 0;
	int rc = 0;
	/* the files holding tensors, each once */
	for (size_t i = 0; i < srt_ck_count(ck); i++) {
		const char *p = srt_ck_tensor_file(ck, srt_ck_tensor(ck, i));
		uint32_t k;
		for (k = 0; k < n && fs[k].path != p && strcmp(fs[k].path, p); k++)
			;
		if (k < n)
			continue;
		if (n == MAX_FILES) {
			rc = errf(err, errlen, SRT_EINVAL, "weights fingerprint: more than %d files",
				  MAX_FILES);
			goto out;
		}
		const char *base = strrchr(p, '/');
		fs[n].path = p;
		snprintf(fs[n].name, sizeof(fs[n].name), "%s", base ? base + 1 : p);
		n++;
	}
	qsort(fs, n, sizeof(*fs), cmp_name);
	/* the directory of the files (the sidecar's home) and each file's key */
	char dir[PATH_MAX] = "", side[4200] = "", fb[4200] = "", cdir[4096] = "", why[512];
	int one_dir = n > 0;
	for (uint32_t k = 0; k < n; k++) {
		char rp[PATH_MAX];
		struct stat st;
		if (!realpath(fs[k].path, rp) || stat(rp, &st)) {
			rc = errf(err, errlen, SRT_EIO, "weights fingerprint: cannot stat %s: %s",
				  fs[k].path, strerror(errno));
			goto out;
		}
		stat_key(&fs[k], &st);
		char *slash = strrchr(rp, '/');
		*slash = 0;
		if (!k)
			snprintf(dir, sizeof(dir), "%s", rp[0] ? rp : "/");
		else if (strcmp(dir, rp[0] ? rp : "/"))
			one_dir = 0;
		if (k && !strcmp(fs[k].name, fs[k - 1].name))
			one_dir = 0;
	}
	int use_side = one_dir && !o->no_sidecar;
	int have_fb = use_side && !fallback_path(o, dir, cdir, sizeof(cdir), fb, sizeof(fb));
	int dir_bad = 0, fb_bad = 0, matched = 0;
	if (use_side) {
		snprintf(side, sizeof(side), "%s/%s", dir, SRT_CK_WFP_SIDECAR);
		int m = sidecar_read(side, NULL, fs, n, why, sizeof(why));
		if (m == -2) {
			say(o, SRT_LOG_INFO, "ignoring weights fingerprint sidecar %s: %s; "
			    "recomputing", side, why);
			dir_bad = 1;
		}
		matched = m > 0 ? m : 0;
		if ((uint32_t)matched < n && have_fb) {
			m = sidecar_read(fb, dir, fs, n, why, sizeof(why));
			if (m == -2) {
				say(o, SRT_LOG_INFO, "ignoring weights fingerprint sidecar %s: %s; "
				    "recomputing", fb, why);
				fb_bad = 1;
			}
		}
	}
	if ((rc = hash_files(fs, n, o, dir, &out->hashed_bytes, &out->hashed_files, err, errlen)))
		goto out;
	if (use_side && (out->hashed_files || dir_bad)) {
		int w = sidecar_write(side, dir, fs, n);
		if (!w) {
			snprintf(out->sidecar, sizeof(out->sidecar), "%s", side);
		} else if (have_fb) {
			if (srt_ck_mkdir_p(cdir) == 0 && sidecar_write(fb, dir, fs, n) == 0) {
				snprintf(out->sidecar, sizeof(out->sidecar), "%s", fb);
				out->fallback = 1;
				say(o, SRT_LOG_INFO, "checkpoint directory %s is not writable (%s): "
				    "weights fingerprint remembered in %s", dir, strerror(-w), fb);
			} else {
				say(o, SRT_LOG_WARN, "cannot remember the weights fingerprint of %s "
				    "in %s (%s) nor in %s: it is recomputed at every start", dir,
				    side, strerror(-w), fb);
			}
		} else {
			say(o, SRT_LOG_WARN, "cannot remember the weights fingerprint of %s in %s "
			    "(%s) and no cache directory is known (HOME unset)", dir, side,
			    strerror(-w));
		}
	} else if (use_side) {
		/* everything came from a sidecar: say which one */
		struct stat st;
		snprintf(out->sidecar, sizeof(out->sidecar), "%s",
			 have_fb && (uint32_t)matched < n && stat(fb, &st) == 0 ? fb : side);
		out->fallback = have_fb && (uint32_t)matched < n;
	}
	(void)fb_bad;
	/* combine */
	static const char tag[] = "shadowrt/weights/v1";
	XXH3_state_t *s = XXH3_createState();
	if (!s) {
		rc = errf(err, errlen, SRT_ENOMEM, "weights fingerprint: out of memory");
		goto out;
	}
	XXH3_128bits_reset(s);
	XXH3_128bits_update(s, tag, sizeof(tag));
	uint8_t b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)n >> (8 * i));
	XXH3_128bits_update(s, b, 8);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t nl = (uint32_t)strlen(fs[k].name);
		for (int i = 0; i < 4; i++)
			b[i] = (uint8_t)(nl >> (8 * i));
		XXH3_128bits_update(s, b, 4);
		XXH3_128bits_update(s, fs[k].name, nl);
		for (int i = 0; i < 8; i++)
			b[i] = (uint8_t)(fs[k].size >> (8 * i));
		XXH3_128bits_update(s, b, 8);
		XXH3_128bits_update(s, fs[k].digest, 16);
		out->bytes += fs[k].size;
	}
	XXH128_hash_t h = XXH3_128bits_digest(s);
	XXH3_freeState(s);
	put_canon(&h, out->digest);
	hex16(out->digest, out->hex);
	out->n_files = n;
out:
	free(fs);
	return rc;
}
