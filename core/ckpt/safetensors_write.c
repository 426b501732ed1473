/* safetensors writer: single file or shards + index, atomic per file. See safetensors.h. */
#include "ckpt/safetensors.h"
#include "ckpt/ck_util.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "plugin/host.h"

/* Set key to a new value in obj; false when out of memory (value is consumed either way). */
static int jset(json_t *obj, const char *key, json_t *v)
{
	return v && json_object_set_new(obj, key, v) == 0;
}

/* Append a new value to arr; false when out of memory. */
static int jpush(json_t *arr, json_t *v)
{
	return v && json_array_append_new(arr, v) == 0;
}

struct plan_item {
	size_t idx;      /* into the caller's tensors */
	uint64_t nbytes;
	uint64_t begin;  /* data offset inside its shard */
	size_t shard;
};

static int cmp_name_idx(const void *a, const void *b, void *ctx)
{
	const struct srt_ck_wtensor *t = ctx;
	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* Element size descending, then the caller's order: natural alignment for every tensor. */
static int cmp_plan(const void *a, const void *b, void *ctx)
{
	const struct srt_ck_wtensor *t = ctx;
	const struct plan_item *x = a, *y = b;
	size_t sx = srt_ck_dtype_size(t[x->idx].dtype), sy = srt_ck_dtype_size(t[y->idx].dtype);
	if (sx != sy)
		return sx > sy ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void shard_name(char *buf, size_t len, size_t k, size_t n)
{
	if (n == 1)
		snprintf(buf, len, "%s", SRT_CK_SINGLE_NAME);
	else
		snprintf(buf, len, "model-%05zu-of-%05zu.safetensors", k + 1, n);
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

struct writer {
	const char *dir;
	const struct srt_ck_wtensor *t;
	const struct srt_ck_write_opts *o;
	struct plan_item *items; /* sorted by shard, then in-file order */
	size_t n;
	size_t n_shards;
	uint64_t total;
	uint64_t done;
	void *buf;
	size_t buf_cap;
	char **tmp_paths; /* per shard (+ index) temporary files, to remove on failure */
	char *err;
	size_t errlen;
};

static int write_shard(struct writer *w, size_t k, size_t first, size_t last, int fd,
		       const char *path)
{
	const struct srt_ck_write_opts *o = w->o;
	/* The header through jansson, compact, keys in insertion order: __metadata__ first, then
	 * the tensors in file order. */
	json_t *hdr = json_object(), *meta = json_object();
	char *text = NULL;
	size_t hlen = 0;
	int ok = hdr && meta && !json_object_set(hdr, "__metadata__", meta);
	for (size_t m = 0; ok && m < o->n_meta; m++)
		ok = jset(meta, o->meta_keys[m], json_string(o->meta_values[m]));
	if (ok && !json_object_get(meta, "format"))
		ok = jset(meta, "format", json_string("pt"));
	for (size_t i = first; ok && i < last; i++) {
		const struct srt_ck_wtensor *t = &w->t[w->items[i].idx];
		json_t *ent = json_object(), *shape = json_array(), *offs = json_array();
		ok = ent && shape && offs && jset(ent, "dtype", json_string(srt_ck_dtype_name(t->dtype)));
		for (uint32_t d = 0; ok && d < t->ndim; d++)
			ok = jpush(shape, json_integer(t->shape[d]));
		ok = ok && jpush(offs, json_integer((json_int_t)w->items[i].begin)) &&
		     jpush(offs, json_integer((json_int_t)(w->items[i].begin + w->items[i].nbytes)));
		ok = ok && !json_object_set(ent, "shape", shape) &&
		     !json_object_set(ent, "data_offsets", offs) && !json_object_set(hdr, t->name, ent);
		json_decref(shape);
		json_decref(offs);
		json_decref(ent);
	}
	if (ok && (text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER))) {
		hlen = strlen(text);
		size_t padded = (8 + hlen + 7) / 8 * 8 - 8; /* data region 8-byte aligned */
		char *grown = realloc(text, padded + 1);
		if (grown) {
			memset(grown + hlen, ' ', padded - hlen);
			grown[padded] = '\0';
			text = grown;
			hlen = padded;
		} else {
			ok = 0;
		}
	}
	json_decref(meta);
	json_decref(hdr);
	if (!ok || !text) {
		free(text);
		return errf(w->err, w->errlen, SRT_ENOMEM, "out of memory for the header of %s", path);
	}
	uint8_t lenb[8];
	for (int b = 0; b < 8; b++)
		lenb[b] = (uint8_t)((uint64_t)hlen >> (8 * b));
	int rc = 0;
	if (write_all(fd, lenb, 8) || write_all(fd, text, hlen)) {
		rc = errf(w->err, w->errlen, errno == ENOSPC ? SRT_ENOSPC : SRT_EIO,
			  "%s: write failed: %s", path, strerror(errno));
		goto out;
	}
	for (size_t i = first; i < last; i++) {
		const struct plan_item *it = &w->items[i];
		const struct srt_ck_wtensor *t = &w->t[it->idx];
		const void *src = t->data;
		if (o->fill) {
			if (it->nbytes > w->buf_cap) {
				free(w->buf);
				w->buf = malloc(it->nbytes ? it->nbytes : 1);
				w->buf_cap = w->buf ? it->nbytes : 0;
				if (!w->buf) {
					rc = errf(w->err, w->errlen, SRT_ENOMEM, "out of memory for the "
						  "%llu bytes of tensor '%s'",
						  (unsigned long long)it->nbytes, t->name);
					goto out;
				}
			}
			char ferr[256] = "";
			if ((rc = o->fill(o->user, it->idx, w->buf, it->nbytes, ferr, sizeof(ferr)))) {
				rc = errf(w->err, w->errlen, rc, "tensor '%s': %s", t->name,
					  ferr[0] ? ferr : "fill failed");
				goto out;
			}
			src = w->buf;
		} else if (!src && it->nbytes) {
			rc = errf(w->err, w->errlen, SRT_EINVAL, "tensor '%s': no data and no fill "
				  "function", t->name);
			goto out;
		}
		if (it->nbytes && write_all(fd, src, it->nbytes)) {
			rc = errf(w->err, w->errlen, errno == ENOSPC ? SRT_ENOSPC : SRT_EIO,
				  "%s: write failed: %s", path, strerror(errno));
			goto out;
		}
		w->done += it->nbytes;
		if (o->progress)
			o->progress(o->user, w->done, w->total);
	}
	if (fsync(fd))
		rc = errf(w->err, w->errlen, SRT_EIO, "%s: fsync failed: %s", path, strerror(errno));
out:
	(void)k;
	free(text);
	return rc;
}

static int open_tmp(struct writer *w, const char *final_name, char **tmp_out, int *fd_out)
{
	char *p = NULL;
	if (asprintf(&p, "%s/.%s.tmp.%ld", w->dir, final_name, (long)getpid()) < 0)
		return errf(w->err, w->errlen, SRT_ENOMEM, "out of memory");
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		int rc = errf(w->err, w->errlen, errno == ENOSPC ? SRT_ENOSPC : SRT_EIO,
			      "%s: cannot create: %s", p, strerror(errno));
		free(p);
		return rc;
	}
	*tmp_out = p;
	*fd_out = fd;
	return 0;
}

static int write_index(struct writer *w, char **tmp_out)
{
	/* weight_map in name order, as Hugging Face writes it. */
	size_t *by_name = malloc(w->n * sizeof(*by_name));
	size_t *shard_of = malloc(w->n * sizeof(*shard_of));
	json_t *root = NULL, *wm = NULL;
	char *text = NULL;
	int rc = 0, fd = -1;
	if (!by_name || !shard_of) {
		rc = errf(w->err, w->errlen, SRT_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < w->n; i++) {
		by_name[i] = i;
		shard_of[w->items[i].idx] = w->items[i].shard;
	}
	qsort_r(by_name, w->n, sizeof(*by_name), cmp_name_idx, (void *)w->t);
	root = json_object();
	json_t *meta = json_object();
	wm = json_object();
	int ok = root && wm && jset(root, "metadata", meta) &&
		 jset(meta, "total_size", json_integer((json_int_t)w->total)) &&
		 !json_object_set(root, "weight_map", wm);
	for (size_t i = 0; ok && i < w->n; i++) {
		char sn[64];
		shard_name(sn, sizeof(sn), shard_of[by_name[i]], w->n_shards);
		ok = jset(wm, w->t[by_name[i]].name, json_string(sn));
	}
	if (!ok || !(text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER))) {
		rc = errf(w->err, w->errlen, SRT_ENOMEM, "out of memory for the index");
		goto out;
	}
	if ((rc = open_tmp(w, SRT_CK_INDEX_NAME, tmp_out, &fd)))
		goto out;
	if (write_all(fd, text, strlen(text)) || write_all(fd, "\n", 1) || fsync(fd))
		rc = errf(w->err, w->errlen, errno == ENOSPC ? SRT_ENOSPC : SRT_EIO,
			  "%s: write failed: %s", *tmp_out, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	free(text);
	json_decref(wm);
	json_decref(root);
	free(by_name);
	free(shard_of);
	return rc;
}

static int check_tensors(const struct srt_ck_wtensor *t, size_t n, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		if (!t[i].name || !t[i].name[0])
			return errf(err, errlen, SRT_EINVAL, "tensor #%zu has no name", i);
		if (!strcmp(t[i].name, "__metadata__"))
			return errf(err, errlen, SRT_EINVAL, "'__metadata__' is not a tensor name");
		if (t[i].dtype >= SRT_DT_COUNT)
			return errf(err, errlen, SRT_EINVAL, "tensor '%s': invalid dtype %u", t[i].name,
				    t[i].dtype);
		uint64_t nb;
		if (srt_ck_tensor_bytes(t[i].dtype, t[i].ndim, t[i].shape, &nb))
			return errf(err, errlen, SRT_EINVAL, "tensor '%s': invalid shape (more than %d "
				    "dims, a negative dim, or too many bytes)", t[i].name,
				    SRT_TENSOR_MAX_DIMS);
	}
	size_t *ord = malloc((n ? n : 1) * sizeof(*ord));
	if (!ord)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		ord[i] = i;
	qsort_r(ord, n, sizeof(*ord), cmp_name_idx, (void *)t);
	int rc = 0;
	for (size_t i = 1; i < n; i++)
		if (!strcmp(t[ord[i]].name, t[ord[i - 1]].name)) {
			rc = errf(err, errlen, SRT_EINVAL, "tensor name '%s' given twice", t[ord[i]].name);
			break;
		}
	free(ord);
	return rc;
}

int srt_ck_write(const char *dir, const struct srt_ck_wtensor *tensors, size_t n,
		 const struct srt_ck_write_opts *opts, size_t *n_files_out, char *err, size_t errlen)
{
	static const struct srt_ck_write_opts no_opts;
	const struct srt_ck_write_opts *o = opts ? opts : &no_opts;
	int rc = check_tensors(tensors, n, err, errlen);
	if (rc)
		return rc;
	struct stat st;
	if (stat(dir, &st) || !S_ISDIR(st.st_mode))
		return errf(err, errlen, SRT_ENOENT, "%s: not a directory", dir);
	srt_ck_remove_stale_tmp(dir, NULL); /* a killed earlier write left these for ever */

	struct writer w = {.dir = dir, .t = tensors, .o = o, .n = n, .err = err, .errlen = errlen};
	w.items = calloc(n ? n : 1, sizeof(*w.items));
	if (!w.items)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	/* Greedy sharding in the caller's order. */
	uint64_t cur = 0;
	for (size_t i = 0; i < n; i++) {
		struct plan_item *it = &w.items[i];
		it->idx = i;
		srt_ck_tensor_bytes(tensors[i].dtype, tensors[i].ndim, tensors[i].shape, &it->nbytes);
		if (o->shard_bytes && cur && cur + it->nbytes > o->shard_bytes) {
			w.n_shards++;
			cur = 0;
		}
		it->shard = w.n_shards;
		cur += it->nbytes;
		w.total += it->nbytes;
	}
	w.n_shards++;
	/* Inside each shard: element size descending (stable), contiguous offsets. */
	size_t first = 0;
	size_t *bounds = calloc(w.n_shards + 1, sizeof(*bounds));
	w.tmp_paths = calloc(w.n_shards + 1, sizeof(char *));
	if (!bounds || !w.tmp_paths) {
		rc = errf(err, errlen, SRT_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < w.n_shards; k++) {
		size_t last = first;
		while (last < n && w.items[last].shard == k)
			last++;
		qsort_r(w.items + first, last - first, sizeof(*w.items), cmp_plan, (void *)tensors);
		uint64_t off = 0;
		for (size_t i = first; i < last; i++) {
			w.items[i].begin = off;
			off += w.items[i].nbytes;
		}
		bounds[k] = first;
		first = last;
	}
	bounds[w.n_shards] = n;

	for (size_t k = 0; k < w.n_shards; k++) {
		char sn[64];
		int fd;
		shard_name(sn, sizeof(sn), k, w.n_shards);
		if ((rc = open_tmp(&w, sn, &w.tmp_paths[k], &fd)))
			goto out;
		rc = write_shard(&w, k, bounds[k], bounds[k + 1], fd, w.tmp_paths[k]);
		if (close(fd) && !rc)
			rc = errf(err, errlen, SRT_EIO, "%s: close failed: %s", w.tmp_paths[k],
				  strerror(errno));
		if (rc)
			goto out;
	}
	if (w.n_shards > 1 && (rc = write_index(&w, &w.tmp_paths[w.n_shards])))
		goto out;
	/* Everything is on disk: move the shards, then the index, into place. */
	for (size_t k = 0; k <= w.n_shards; k++) {
		if (!w.tmp_paths[k])
			continue;
		char sn[64], *fin = NULL;
		if (k < w.n_shards)
			shard_name(sn, sizeof(sn), k, w.n_shards);
		else
			snprintf(sn, sizeof(sn), "%s", SRT_CK_INDEX_NAME);
		if (asprintf(&fin, "%s/%s", dir, sn) < 0) {
			rc = errf(err, errlen, SRT_ENOMEM, "out of memory");
			goto out;
		}
		if (rename(w.tmp_paths[k], fin)) {
			rc = errf(err, errlen, SRT_EIO, "cannot rename %s to %s: %s", w.tmp_paths[k], fin,
				  strerror(errno));
			free(fin);
			goto out;
		}
		free(fin);
		free(w.tmp_paths[k]);
		w.tmp_paths[k] = NULL;
	}
	if (w.n_shards == 1) {
		/* A stale index would shadow the new single file: drop it. */
		char *idx = NULL;
		if (asprintf(&idx, "%s/%s", dir, SRT_CK_INDEX_NAME) >= 0) {
			if (unlink(idx) && errno != ENOENT)
				rc = errf(err, errlen, SRT_EIO, "%s: cannot remove the old index: %s", idx,
					  strerror(errno));
			free(idx);
		}
	}
	fsync_dir(dir);
	if (!rc && n_files_out)
		*n_files_out = w.n_shards;
out:
	if (w.tmp_paths) {
		for (size_t k = 0; k <= w.n_shards; k++) {
			if (w.tmp_paths[k])
				unlink(w.tmp_paths[k]);
			free(w.tmp_paths[k]);
		}
	}
	free(w.tmp_paths);
	free(bounds);
	free(w.buf);
	free(w.items);
	return rc;
}

/* ---- leftovers of writers that died -------------------------------------------------------- */

/* "<stem>.tmp.<pid>": 1 and *pid when name has that shape (stem NULL: any hidden ".x"). */
static int tmp_name_pid(const char *name, const char *stem, long *pid)
{
	const char *t = strstr(name, ".tmp.");
	if (!t || t == name)
		return 0;
	while (strstr(t + 1, ".tmp."))
		t = strstr(t + 1, ".tmp.");
	if (stem ? (size_t)(t - name) != strlen(stem) || strncmp(name, stem, strlen(stem))
		 : name[0] != '.')
		return 0;
	const char *d = t + 5;
	if (!*d)
		return 0;
	for (const char *c = d; *c; c++)
		if (*c < '0' || *c > '9')
			return 0;
	errno = 0;
	*pid = strtol(d, NULL, 10);
	return !errno && *pid > 0;
}

static int pid_is_dead(long pid)
{
	return pid != (long)getpid() && kill((pid_t)pid, 0) && errno == ESRCH;
}

int srt_ck_remove_stale_tmp(const char *dir, const char *stem)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int removed = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		long pid;
		if (!tmp_name_pid(de->d_name, stem, &pid) || !pid_is_dead(pid))
			continue;
		char *p = NULL;
		if (asprintf(&p, "%s/%s", dir, de->d_name) < 0)
			break;
		struct stat st;
		if (!lstat(p, &st) && S_ISDIR(st.st_mode)) {
			/* a private output directory: only plain files of the dead writer inside */
			DIR *sub = opendir(p);
			struct dirent *e;
			while (sub && (e = readdir(sub))) {
				char *q = NULL;
				struct stat qs;
				if (asprintf(&q, "%s/%s", p, e->d_name) >= 0 && !lstat(q, &qs) &&
				    S_ISREG(qs.st_mode))
					unlink(q);
				free(q);
			}
			if (sub)
				closedir(sub);
			removed += !rmdir(p);
		} else if (!lstat(p, &st) && S_ISREG(st.st_mode)) {
			removed += !unlink(p);
		}
		free(p);
	}
	closedir(d);
	if (removed)
		srt_log(SRT_LOG_INFO, "ckpt", "%s: removed %d temporary file%s of writers that died",
			dir, removed, removed == 1 ? "" : "s");
	return removed;
}

int srt_ck_mkdir_p(const char *path)
{
	char p[4096];
	if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0755) && errno != EEXIST)
			return -1;
		*s = '/';
	}
	if (mkdir(p, 0755) && errno != EEXIST)
		return -1;
	struct stat st;
	if (stat(p, &st) == 0 && !S_ISDIR(st.st_mode)) { /* EEXIST for a plain file */
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}
