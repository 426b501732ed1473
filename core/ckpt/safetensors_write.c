/* safetensors writer: single file or shards + index, atomic per file. See safetensors.h. */
#include "ckpt/safetensors.h"
#include "ckpt/ck_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A growable string for headers and the index. */
struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t nc = b->cap ? b->cap : 4096;
		while (nc < b->len + n + 1)
			nc *= 2;
		char *np = realloc(b->p, nc);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = nc;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		sb_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string literal. */
static void sb_str(struct sbuf *b, const char *s)
{
	sb_put(b, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			sb_put(b, e, 2);
		} else if (c < 0x20) {
			sb_printf(b, "\\u%04x", c);
		} else {
			sb_put(b, (const char *)&c, 1);
		}
	}
	sb_put(b, "\"", 1);
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
	struct sbuf h = {0};
	int has_format = 0;
	sb_put(&h, "{\"__metadata__\":{", 17);
	for (size_t m = 0; m < o->n_meta; m++) {
		if (m)
			sb_put(&h, ",", 1);
		sb_str(&h, o->meta_keys[m]);
		sb_put(&h, ":", 1);
		sb_str(&h, o->meta_values[m]);
		has_format |= !strcmp(o->meta_keys[m], "format");
	}
	if (!has_format)
		sb_printf(&h, "%s\"format\":\"pt\"", o->n_meta ? "," : "");
	sb_put(&h, "}", 1);
	for (size_t i = first; i < last; i++) {
		const struct srt_ck_wtensor *t = &w->t[w->items[i].idx];
		sb_put(&h, ",", 1);
		sb_str(&h, t->name);
		sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", srt_ck_dtype_name(t->dtype));
		for (uint32_t d = 0; d < t->ndim; d++)
			sb_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
		sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}",
			  (unsigned long long)w->items[i].begin,
			  (unsigned long long)(w->items[i].begin + w->items[i].nbytes));
	}
	sb_put(&h, "}", 1);
	while ((8 + h.len) % 8) /* data region 8-byte aligned */
		sb_put(&h, " ", 1);
	if (h.oom) {
		free(h.p);
		return errf(w->err, w->errlen, SRT_ENOMEM, "out of memory for the header of %s", path);
	}
	uint8_t lenb[8];
	for (int b = 0; b < 8; b++)
		lenb[b] = (uint8_t)((uint64_t)h.len >> (8 * b));
	int rc = 0;
	if (write_all(fd, lenb, 8) || write_all(fd, h.p, h.len)) {
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
	free(h.p);
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
	struct sbuf b = {0};
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
	sb_printf(&b, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
		  (unsigned long long)w->total);
	for (size_t i = 0; i < w->n; i++) {
		char sn[64];
		shard_name(sn, sizeof(sn), shard_of[by_name[i]], w->n_shards);
		sb_put(&b, i ? ",\n    " : "\n    ", i ? 6 : 5);
		sb_str(&b, w->t[by_name[i]].name);
		sb_put(&b, ": ", 2);
		sb_str(&b, sn);
	}
	sb_put(&b, "\n  }\n}\n", 7);
	if (b.oom) {
		rc = errf(w->err, w->errlen, SRT_ENOMEM, "out of memory for the index");
		goto out;
	}
	if ((rc = open_tmp(w, SRT_CK_INDEX_NAME, tmp_out, &fd)))
		goto out;
	if (write_all(fd, b.p, b.len) || fsync(fd))
		rc = errf(w->err, w->errlen, errno == ENOSPC ? SRT_ENOSPC : SRT_EIO,
			  "%s: write failed: %s", *tmp_out, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	free(b.p);
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
