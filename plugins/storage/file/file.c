/*
 * Tier plugin "file": an L3 keyed store with one file per object under option `path`:
 *
 *     <path>/<hex[0:2]>/<hex[2:4]>/<64 hex digits of the key>
 *
 * Writes are atomic: the object goes to <path>/tmp/<hex>.<pid>.<n>, is made durable (option
 * `fsync`, default on) and renamed into place, so a crash leaves either the old state or the
 * whole new object, plus at most a stray temp file, which the next open deletes (unless the
 * pid in its name is a live process: another process writing to the same directory).
 *
 * Batches: a put of one object fsync()s its temp file before the rename; the directory is not
 * synced, so after a power loss the newest object may be missing, never partial. A put of n > 1
 * objects (the tier manager's writer hands over batches) writes every temp file, syncs the file
 * system once (syncfs: the data of all n files), renames them all, and syncs once more (the n
 * directory entries): two syncs per batch instead of n fsyncs, and after the second every object
 * of the batch survives a power loss. An object that fails (full disk) is left out; the others
 * of the batch are stored; the call returns the first error.
 *
 * Layout: option `layout` = files (default; the tree above) or segments (segments.h: objects
 * appended to log files under <path>/seg, one write and one fdatasync per put call whatever the
 * number of objects; one process per directory; option `segment_bytes`, default 64 MiB). The
 * rest of this comment is about the files layout; the options max_bytes and fsync mean the same
 * in both.
 *
 * Size bound: option `max_bytes` (default unlimited). After each put the least recently used
 * objects are deleted until the total is within the bound. Recency lives in memory (an LRU list
 * over a hash index) and on disk as each file's mtime: a get touches it, and opening the store
 * rebuilds the index by scanning the tree and ordering by mtime, so the store survives restarts.
 *
 * Errors: a read-only directory or another I/O failure is SRT_EIO, a full disk (ENOSPC, EDQUOT,
 * EFBIG) is SRT_ENOSPC, each logged with the path and the reason. The index and the size bound
 * are per process: processes sharing a directory at once are safe (an object another process
 * evicted is a miss, never a partial read, and no open deletes another live process's temp
 * files) but each bounds only what it knows. All methods are thread safe: the index is under
 * a mutex, file contents are read and written outside it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shadowrt/plugin.h>
#include <shadowrt/tier.h>

#include "segments.h"

#define NAME "file"
#define HEX_LEN (2 * SRT_KEY_BYTES)

struct node {
	struct srt_key key;
	uint64_t size;
	struct node *hnext;       /* hash chain */
	struct node *prev, *next; /* LRU list: head = most recent */
};

struct file_store {
	const struct srt_host *host;
	char *root;
	uint64_t max_bytes;
	int do_fsync;
	pthread_mutex_t mu;
	struct node **buckets;
	size_t n_buckets; /* power of two */
	struct node *head, *tail;
	uint64_t bytes, objects;
	atomic_uint_fast64_t tmp_seq;
	uint64_t put_failures; /* consecutive failed puts (under mu) */
	struct seg_store *seg;  /* layout = segments: every method goes there */
};

/* Failed puts come in runs (a full disk fails every put until space returns): the first failure
 * of a run is logged with its reason, then one line per 1000 more, and the first success after a
 * run says how many failed, so a full disk does not flood the log. */
#define PUT_FAIL_LOG_EVERY 1000

static void put_failed(struct file_store *fs, const char *hex, const char *what,
		       const char *target, int e)
{
	pthread_mutex_lock(&fs->mu);
	uint64_t n = ++fs->put_failures;
	pthread_mutex_unlock(&fs->mu);
	if (n == 1)
		fs->host->log(SRT_LOG_ERROR, NAME, "put %s: %s %s failed: %s", hex, what, target,
			      strerror(e));
	else if (n % PUT_FAIL_LOG_EVERY == 0)
		fs->host->log(SRT_LOG_ERROR, NAME, "%" PRIu64 " puts failed in a row (last: %s %s: %s)",
			      n, what, target, strerror(e));
}

/* Called under mu after a successful put. */
static void put_succeeded(struct file_store *fs)
{
	if (fs->put_failures) {
		fs->host->log(SRT_LOG_WARN, NAME, "puts succeed again after %" PRIu64 " failed",
			      fs->put_failures);
		fs->put_failures = 0;
	}
}

/* --- index ---------------------------------------------------------------------------------- */

static size_t bucket_of(const struct file_store *fs, const struct srt_key *k)
{
	uint64_t h;
	memcpy(&h, k->b, sizeof(h)); /* keys are SHA-256 outputs: any 8 bytes are uniform */
	return (size_t)h & (fs->n_buckets - 1);
}

static struct node *idx_find(struct file_store *fs, const struct srt_key *k)
{
	for (struct node *n = fs->buckets[bucket_of(fs, k)]; n; n = n->hnext)
		if (!memcmp(n->key.b, k->b, SRT_KEY_BYTES))
			return n;
	return NULL;
}

static void lru_unlink(struct file_store *fs, struct node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		fs->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		fs->tail = n->prev;
	n->prev = n->next = NULL;
}

static void lru_push_head(struct file_store *fs, struct node *n)
{
	n->prev = NULL;
	n->next = fs->head;
	if (fs->head)
		fs->head->prev = n;
	fs->head = n;
	if (!fs->tail)
		fs->tail = n;
}

static int idx_grow(struct file_store *fs)
{
	size_t nb = fs->n_buckets ? 2 * fs->n_buckets : 1024;
	struct node **b = calloc(nb, sizeof(*b));
	if (!b)
		return SRT_ENOMEM;
	struct node **old = fs->buckets;
	size_t old_n = fs->n_buckets;
	fs->buckets = b;
	fs->n_buckets = nb;
	for (size_t i = 0; i < old_n; i++)
		for (struct node *n = old[i], *nx; n; n = nx) {
			nx = n->hnext;
			size_t j = bucket_of(fs, &n->key);
			n->hnext = b[j];
			b[j] = n;
		}
	free(old);
	return 0;
}

/* Insert or update key with size at the LRU head (newest) or tail (oldest). */
static int idx_put(struct file_store *fs, const struct srt_key *k, uint64_t size, int at_head)
{
	struct node *n = idx_find(fs, k);
	if (n) {
		fs->bytes -= n->size;
		lru_unlink(fs, n);
	} else {
		if (fs->objects >= fs->n_buckets && idx_grow(fs))
			return SRT_ENOMEM;
		n = calloc(1, sizeof(*n));
		if (!n)
			return SRT_ENOMEM;
		n->key = *k;
		size_t j = bucket_of(fs, k);
		n->hnext = fs->buckets[j];
		fs->buckets[j] = n;
		fs->objects++;
	}
	n->size = size;
	fs->bytes += size;
	if (at_head) {
		lru_push_head(fs, n);
	} else {
		n->prev = fs->tail;
		n->next = NULL;
		if (fs->tail)
			fs->tail->next = n;
		fs->tail = n;
		if (!fs->head)
			fs->head = n;
	}
	return 0;
}

static void idx_del(struct file_store *fs, struct node *n)
{
	struct node **link = &fs->buckets[bucket_of(fs, &n->key)];
	while (*link != n)
		link = &(*link)->hnext;
	*link = n->hnext;
	lru_unlink(fs, n);
	fs->bytes -= n->size;
	fs->objects--;
	free(n);
}

/* --- paths ---------------------------------------------------------------------------------- */

static void key_hex(const struct srt_key *k, char out[HEX_LEN + 1])
{
	static const char d[] = "0123456789abcdef";
	for (int i = 0; i < SRT_KEY_BYTES; i++) {
		out[2 * i] = d[k->b[i] >> 4];
		out[2 * i + 1] = d[k->b[i] & 15];
	}
	out[HEX_LEN] = 0;
}

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static int parse_hex_key(const char *s, struct srt_key *k)
{
	if (strlen(s) != HEX_LEN)
		return -1;
	for (int i = 0; i < SRT_KEY_BYTES; i++) {
		int hi = hex_val(s[2 * i]), lo = hex_val(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		k->b[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static void obj_path(const struct file_store *fs, const struct srt_key *k, char *out, size_t n)
{
	char hex[HEX_LEN + 1];
	key_hex(k, hex);
	snprintf(out, n, "%s/%.2s/%.2s/%s", fs->root, hex, hex + 2, hex);
}

static int errno_code(int e)
{
	return e == ENOSPC || e == EDQUOT || e == EFBIG ? SRT_ENOSPC : SRT_EIO;
}

/* mkdir that accepts an existing directory. */
static int mkdir_ok(const char *p)
{
	return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* --- open: scan the tree -------------------------------------------------------------------- */

struct scanned {
	struct srt_key key;
	uint64_t size;
	struct timespec mtime;
};

static int cmp_mtime(const void *a, const void *b)
{
	const struct timespec *x = &((const struct scanned *)a)->mtime;
	const struct timespec *y = &((const struct scanned *)b)->mtime;
	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? -1 : 1;
	return x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec;
}

static int is_hex2(const char *s)
{
	return strlen(s) == 2 && hex_val(s[0]) >= 0 && hex_val(s[1]) >= 0;
}

/*
 * True when temp file `name` (<hex>.<pid>.<n>) may belong to a write in progress: its pid is
 * a live process here, or the name does not parse. Another process using the same directory
 * keeps its temp files; a crashed writer's are removed.
 */
static int tmp_owner_alive(const char *name)
{
	const char *dot = strchr(name, '.');
	if (!dot)
		return 1;
	char *end;
	errno = 0;
	long pid = strtol(dot + 1, &end, 10);
	if (errno || end == dot + 1 || *end != '.' || pid <= 0)
		return 1;
	return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* Delete temp files a crashed writer left behind (not those of live processes). */
static void clean_tmp(struct file_store *fs)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/tmp", fs->root);
	DIR *d = opendir(p);
	if (!d)
		return;
	unsigned n = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.' || tmp_owner_alive(e->d_name))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			n++;
	}
	closedir(d);
	if (n)
		fs->host->log(SRT_LOG_INFO, NAME, "%s: removed %u unfinished temp file(s)", p, n);
}

static int scan(struct file_store *fs, char *why, size_t why_len)
{
	struct scanned *v = NULL;
	size_t nv = 0, cap = 0;
	int rc = 0;
	char p1[PATH_MAX], p2[PATH_MAX + 8];

	DIR *d0 = opendir(fs->root);
	if (!d0) {
		snprintf(why, why_len, "%s: cannot open directory: %s", fs->root, strerror(errno));
		return SRT_EIO;
	}
	for (struct dirent *e1; (e1 = readdir(d0));) {
		if (!is_hex2(e1->d_name))
			continue;
		snprintf(p1, sizeof(p1), "%s/%.2s", fs->root, e1->d_name);
		DIR *d1 = opendir(p1);
		if (!d1)
			continue;
		for (struct dirent *e2; (e2 = readdir(d1));) {
			if (!is_hex2(e2->d_name))
				continue;
			snprintf(p2, sizeof(p2), "%s/%.2s", p1, e2->d_name);
			DIR *d2 = opendir(p2);
			if (!d2)
				continue;
			for (struct dirent *e3; (e3 = readdir(d2));) {
				struct srt_key k;
				struct stat st;
				if (parse_hex_key(e3->d_name, &k) || memcmp(e3->d_name, e1->d_name, 2) ||
				    memcmp(e3->d_name + 2, e2->d_name, 2))
					continue;
				if (fstatat(dirfd(d2), e3->d_name, &st, 0) || !S_ISREG(st.st_mode))
					continue;
				if (nv == cap) {
					size_t nc = cap ? 2 * cap : 1024;
					struct scanned *nvp = realloc(v, nc * sizeof(*nvp));
					if (!nvp) {
						closedir(d2);
						closedir(d1);
						rc = SRT_ENOMEM;
						snprintf(why, why_len, "out of memory scanning %s", fs->root);
						goto out;
					}
					v = nvp;
					cap = nc;
				}
				v[nv].key = k;
				v[nv].size = (uint64_t)st.st_size;
				v[nv].mtime = st.st_mtim;
				nv++;
			}
			closedir(d2);
		}
		closedir(d1);
	}
	/* Oldest first, each pushed to the head: the newest ends up most recent. */
	if (nv)
		qsort(v, nv, sizeof(*v), cmp_mtime);
	for (size_t i = 0; i < nv; i++)
		if ((rc = idx_put(fs, &v[i].key, v[i].size, 1))) {
			snprintf(why, why_len, "out of memory indexing %s", fs->root);
			goto out;
		}
out:
	closedir(d0);
	free(v);
	return rc;
}

/* Delete least recently used objects until the total fits max_bytes. Under fs->mu. */
static void evict(struct file_store *fs)
{
	char path[PATH_MAX];
	while (fs->bytes > fs->max_bytes && fs->tail) {
		struct node *n = fs->tail;
		obj_path(fs, &n->key, path, sizeof(path));
		if (unlink(path) && errno != ENOENT)
			fs->host->log(SRT_LOG_WARN, NAME, "evicting %s: %s", path, strerror(errno));
		idx_del(fs, n);
	}
}

/* --- plugin --------------------------------------------------------------------------------- */

static const char *opt(const struct srt_plugin_args *a, const char *key)
{
	return a->option ? a->option(a->option_ctx, key) : NULL;
}

static void file_destroy(void *inst)
{
	struct file_store *fs = inst;
	if (!fs)
		return;
	seg_close(fs->seg);
	for (struct node *n = fs->head, *nx; n; n = nx) {
		nx = n->next;
		free(n);
	}
	free(fs->buckets);
	pthread_mutex_destroy(&fs->mu);
	free(fs->root);
	free(fs);
}

static int file_create(const struct srt_host *host, const struct srt_plugin_args *args,
		       void **instance, char *why, size_t why_len)
{
	const char *path = opt(args, "path"), *v;
	char p[PATH_MAX];
	int rc;

	if (!path || !*path) {
		snprintf(why, why_len, "option path is required (the store's directory)");
		return SRT_EINVAL;
	}
	if (strlen(path) > PATH_MAX - 200) {
		snprintf(why, why_len, "option path is too long (%zu bytes)", strlen(path));
		return SRT_EINVAL;
	}
	struct file_store *fs = calloc(1, sizeof(*fs));
	if (!fs || !(fs->root = strdup(path))) {
		free(fs);
		snprintf(why, why_len, "out of memory");
		return SRT_ENOMEM;
	}
	fs->host = host;
	fs->max_bytes = UINT64_MAX;
	fs->do_fsync = 1;
	pthread_mutex_init(&fs->mu, NULL);
	atomic_init(&fs->tmp_seq, 0);
	if ((rc = idx_grow(fs))) {
		snprintf(why, why_len, "out of memory");
		goto fail;
	}
	if ((v = opt(args, "max_bytes"))) {
		char *end;
		errno = 0;
		unsigned long long mb = strtoull(v, &end, 10);
		if (errno || end == v || *end || !mb) {
			snprintf(why, why_len, "option max_bytes = '%s': expected a positive byte count", v);
			rc = SRT_EINVAL;
			goto fail;
		}
		fs->max_bytes = mb;
	}
	if ((v = opt(args, "fsync"))) {
		if (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "0"))
			fs->do_fsync = 0;
		else if (strcmp(v, "on") && strcmp(v, "true") && strcmp(v, "1")) {
			snprintf(why, why_len, "option fsync = '%s': expected on or off", v);
			rc = SRT_EINVAL;
			goto fail;
		}
	}
	int segments = 0;
	uint64_t seg_bytes = 64ull << 20;
	if ((v = opt(args, "layout"))) {
		segments = !strcmp(v, "segments");
		if (!segments && strcmp(v, "files")) {
			snprintf(why, why_len, "option layout = '%s': expected files or segments", v);
			rc = SRT_EINVAL;
			goto fail;
		}
	}
	if ((v = opt(args, "segment_bytes"))) {
		char *end;
		errno = 0;
		unsigned long long sb = strtoull(v, &end, 10);
		if (errno || end == v || *end || sb < 4096 || sb > (1ull << 40)) {
			snprintf(why, why_len, "option segment_bytes = '%s': expected a byte count "
				 "between 4096 and 2^40", v);
			rc = SRT_EINVAL;
			goto fail;
		}
		seg_bytes = sb;
	}
	if (mkdir_ok(fs->root)) {
		snprintf(why, why_len, "%s: cannot create directory: %s", fs->root, strerror(errno));
		rc = SRT_EIO;
		goto fail;
	}
	if (segments) {
		if ((rc = seg_open(host, fs->root, fs->max_bytes, fs->do_fsync, seg_bytes, &fs->seg,
				   why, why_len)))
			goto fail;
		*instance = fs;
		return 0;
	}
	snprintf(p, sizeof(p), "%s/tmp", fs->root);
	if (mkdir_ok(p))
		host->log(SRT_LOG_WARN, NAME, "%s: cannot create (%s): the store is read-only, puts will fail",
			  p, strerror(errno));
	clean_tmp(fs);
	if ((rc = scan(fs, why, why_len)))
		goto fail;
	evict(fs);
	host->log(SRT_LOG_INFO, NAME, "%s: %" PRIu64 " objects, %" PRIu64 " bytes", fs->root,
		  fs->objects, fs->bytes);
	*instance = fs;
	return 0;
fail:
	file_destroy(fs);
	return rc;
}

static int file_exists(void *inst, const struct srt_key *keys, uint32_t n, uint32_t *n_present)
{
	struct file_store *fs = inst;
	if (fs->seg)
		return seg_exists(fs->seg, keys, n, n_present);
	uint32_t i = 0;
	pthread_mutex_lock(&fs->mu);
	while (i < n && idx_find(fs, &keys[i]))
		i++;
	pthread_mutex_unlock(&fs->mu);
	*n_present = i;
	return 0;
}

/* Read one object into buf; its length, or 0 when absent / too large / unreadable. */
static size_t read_one(struct file_store *fs, const struct srt_key *k, void *buf, size_t cap)
{
	char path[PATH_MAX];
	struct stat st;
	size_t got = 0;

	pthread_mutex_lock(&fs->mu);
	int known = idx_find(fs, k) != NULL;
	pthread_mutex_unlock(&fs->mu);
	if (!known)
		return 0;
	obj_path(fs, k, path, sizeof(path));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT) { /* deleted behind our back: forget it */
			pthread_mutex_lock(&fs->mu);
			struct node *n = idx_find(fs, k);
			if (n)
				idx_del(fs, n);
			pthread_mutex_unlock(&fs->mu);
		} else {
			fs->host->log(SRT_LOG_WARN, NAME, "get %s: %s", path, strerror(errno));
		}
		return 0;
	}
	if (fstat(fd, &st) || (uint64_t)st.st_size > cap)
		goto out;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, (uint8_t *)buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fs->host->log(SRT_LOG_WARN, NAME, "get %s: read: %s", path, strerror(errno));
			got = 0;
			goto out;
		}
		if (r == 0)
			break; /* shrank under us: the object check will reject the short object */
		got += (size_t)r;
	}
	futimens(fd, NULL); /* on-disk recency for the next open's LRU order */
	pthread_mutex_lock(&fs->mu);
	struct node *n = idx_find(fs, k);
	if (n) {
		lru_unlink(fs, n);
		lru_push_head(fs, n);
	}
	pthread_mutex_unlock(&fs->mu);
out:
	close(fd);
	return got;
}

static int file_get(void *inst, const struct srt_key *keys, uint32_t n, void *const *bufs,
		    const size_t *caps, size_t *lens)
{
	struct file_store *fs = inst;
	if (fs->seg)
		return seg_get(fs->seg, keys, n, bufs, caps, lens);
	for (uint32_t i = 0; i < n; i++)
		lens[i] = read_one(inst, &keys[i], bufs[i], caps[i]);
	return 0;
}

static int place(struct file_store *fs, const char *hex, const char *tmp, const char *path,
		 const char **what);

/* Write one object atomically; 0, SRT_EIO or SRT_ENOSPC (logged). */
static int put_one(struct file_store *fs, const struct srt_key *k, const void *buf, size_t len)
{
	char hex[HEX_LEN + 1], tmp[PATH_MAX], path[PATH_MAX];
	const char *what = "open", *target = tmp;
	int e = 0, fd;

	if (len > fs->max_bytes) {
		fs->host->log(SRT_LOG_WARN, NAME, "put: object of %zu bytes exceeds max_bytes %" PRIu64,
			      len, fs->max_bytes);
		return SRT_ENOSPC;
	}
	key_hex(k, hex);
	snprintf(tmp, sizeof(tmp), "%s/tmp/%s.%ld.%" PRIuFAST64, fs->root, hex, (long)getpid(),
		 (uint_fast64_t)atomic_fetch_add(&fs->tmp_seq, 1));
	obj_path(fs, k, path, sizeof(path));
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		e = errno;
		goto fail;
	}
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, (const uint8_t *)buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			e = errno;
			what = "write";
			goto fail_close;
		}
		off += (size_t)w;
	}
	if (fs->do_fsync && fsync(fd)) {
		e = errno;
		what = "fsync";
		goto fail_close;
	}
	if (close(fd)) {
		e = errno;
		what = "close";
		fd = -1;
		goto fail_unlink;
	}
	fd = -1;
	/* the rename (and the first object's mkdirs) outside the index lock: lookups of other
	 * threads do not wait for the disk */
	if ((e = place(fs, hex, tmp, path, &what))) {
		target = path;
		goto fail_unlink;
	}
	pthread_mutex_lock(&fs->mu);
	int rc = idx_put(fs, k, len, 1);
	evict(fs);
	put_succeeded(fs);
	pthread_mutex_unlock(&fs->mu);
	return rc;

fail_close:
	close(fd);
fail_unlink:
	unlink(tmp);
fail:
	put_failed(fs, hex, what, target, e);
	return errno_code(e);
}

/* Write buf to a new temp file (no sync); 0 or errno, *what says which step failed. */
static int write_tmp(struct file_store *fs, const char *hex, const void *buf, size_t len,
		     char *tmp, size_t tmplen, const char **what)
{
	snprintf(tmp, tmplen, "%s/tmp/%s.%ld.%" PRIuFAST64, fs->root, hex, (long)getpid(),
		 (uint_fast64_t)atomic_fetch_add(&fs->tmp_seq, 1));
	*what = "open";
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return errno;
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, (const uint8_t *)buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int e = errno;
			*what = "write";
			close(fd);
			unlink(tmp);
			return e;
		}
		off += (size_t)w;
	}
	if (close(fd)) {
		int e = errno;
		*what = "close";
		unlink(tmp);
		return e;
	}
	return 0;
}

/* Rename tmp to the object path of k (making its directories); no lock needed. 0 or errno. */
static int place(struct file_store *fs, const char *hex, const char *tmp, const char *path,
		 const char **what)
{
	if (!rename(tmp, path))
		return 0;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/%.2s", fs->root, hex);
	*what = "mkdir";
	if (mkdir_ok(dir))
		return errno;
	snprintf(dir, sizeof(dir), "%s/%.2s/%.2s", fs->root, hex, hex + 2);
	if (mkdir_ok(dir))
		return errno;
	*what = "rename to";
	return rename(tmp, path) ? errno : 0;
}

/* Sync the file system holding the store; 0 or errno. */
static int sync_store(struct file_store *fs)
{
	int fd = open(fs->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	int e = syncfs(fd) ? errno : 0;
	close(fd);
	return e;
}

/* A batch of n > 1 objects with one sync of the data and one of the directory entries. */
static int put_batch(struct file_store *fs, const struct srt_key *keys, uint32_t n,
		     const void *const *bufs, const size_t *lens)
{
	char hex[HEX_LEN + 1], path[PATH_MAX];
	char (*tmps)[PATH_MAX] = malloc((size_t)n * PATH_MAX);
	uint8_t *ok = calloc(n, 1);
	int first = 0;
	const char *what;
	if (!tmps || !ok) {
		free(tmps);
		free(ok);
		return SRT_ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		key_hex(&keys[i], hex);
		if (lens[i] > fs->max_bytes) {
			fs->host->log(SRT_LOG_WARN, NAME, "put: object of %zu bytes exceeds max_bytes %"
				      PRIu64, lens[i], fs->max_bytes);
			first = first ? first : SRT_ENOSPC;
			continue;
		}
		int e = write_tmp(fs, hex, bufs[i], lens[i], tmps[i], PATH_MAX, &what);
		if (e) {
			put_failed(fs, hex, what, tmps[i], e);
			first = first ? first : errno_code(e);
			continue;
		}
		ok[i] = 1;
	}
	int e = sync_store(fs); /* the data of every temp file, before any rename */
	if (e) {
		put_failed(fs, "(batch)", "syncfs of", fs->root, e);
		for (uint32_t i = 0; i < n; i++)
			if (ok[i])
				unlink(tmps[i]);
		free(tmps);
		free(ok);
		return errno_code(e);
	}
	int placed = 0;
	for (uint32_t i = 0; i < n; i++) { /* renames outside the index lock */
		if (!ok[i])
			continue;
		key_hex(&keys[i], hex);
		obj_path(fs, &keys[i], path, sizeof(path));
		if ((e = place(fs, hex, tmps[i], path, &what))) {
			put_failed(fs, hex, what, path, e);
			unlink(tmps[i]);
			first = first ? first : errno_code(e);
			ok[i] = 0;
		}
	}
	pthread_mutex_lock(&fs->mu);
	for (uint32_t i = 0; i < n; i++) {
		if (!ok[i])
			continue;
		if (idx_put(fs, &keys[i], lens[i], 1))
			first = first ? first : SRT_ENOMEM;
		placed++;
	}
	evict(fs);
	if (placed && !first)
		put_succeeded(fs);
	pthread_mutex_unlock(&fs->mu);
	if (placed && (e = sync_store(fs))) /* the directory entries */
		fs->host->log(SRT_LOG_WARN, NAME, "%s: syncfs after renaming a batch: %s", fs->root,
			      strerror(e));
	free(tmps);
	free(ok);
	return first;
}

static int file_put(void *inst, const struct srt_key *keys, uint32_t n, const void *const *bufs,
		    const size_t *lens)
{
	struct file_store *fs = inst;
	if (fs->seg)
		return seg_put(fs->seg, keys, n, bufs, lens);
	if (n > 1 && fs->do_fsync)
		return put_batch(fs, keys, n, bufs, lens);
	for (uint32_t i = 0; i < n; i++) {
		int rc = put_one(inst, &keys[i], bufs[i], lens[i]);
		if (rc)
			return rc;
	}
	return 0;
}

static int file_remove(void *inst, const struct srt_key *keys, uint32_t n)
{
	struct file_store *fs = inst;
	if (fs->seg)
		return seg_remove(fs->seg, keys, n);
	char path[PATH_MAX];
	int rc = 0;
	pthread_mutex_lock(&fs->mu);
	for (uint32_t i = 0; i < n; i++) {
		obj_path(fs, &keys[i], path, sizeof(path));
		if (unlink(path) && errno != ENOENT) {
			fs->host->log(SRT_LOG_ERROR, NAME, "remove %s: %s", path, strerror(errno));
			rc = SRT_EIO;
			continue;
		}
		struct node *nd = idx_find(fs, &keys[i]);
		if (nd)
			idx_del(fs, nd);
	}
	pthread_mutex_unlock(&fs->mu);
	return rc;
}

static int file_usage(void *inst, uint64_t *bytes, uint64_t *objects)
{
	struct file_store *fs = inst;
	if (fs->seg)
		return seg_usage(fs->seg, bytes, objects);
	pthread_mutex_lock(&fs->mu);
	*bytes = fs->bytes;
	*objects = fs->objects;
	pthread_mutex_unlock(&fs->mu);
	return 0;
}

static const struct srt_tier_vtable vtable = {
	.struct_size = sizeof(struct srt_tier_vtable),
	.exists = file_exists,
	.get = file_get,
	.put = file_put,
	.remove = file_remove,
	.usage = file_usage,
};

/* Options read from the plugin's runtime-config section (srt_plugin_desc.options). */
static const struct srt_plugin_option file_options[] = {
	{"path", "path", NULL, "cache directory (required)"},
	{"max_bytes", "size", NULL, "LRU bound of the store (set from [tier.l3] budget)"},
	{"fsync", "on|off", "on", "fsync each object before its rename"},
	{NULL, NULL, NULL, NULL},
};

static const struct srt_plugin_desc desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_TIER,
	.name = NAME,
	.version = "1.0",
	.description = "L3 store: one file per object (atomic rename), size-bounded LRU, survives restarts",
	.caps = SRT_CAP_CPU | SRT_CAP_KEYED_STORE,
	.create = file_create,
	.destroy = file_destroy,
	.vtable = &vtable,
	.options = file_options,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &desc;
}
