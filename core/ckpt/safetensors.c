/* safetensors reader (memory-mapped, single or sharded) and atomic writer: see safetensors.h. */
#include "ckpt/safetensors.h"
#include "ckpt/ck_util.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ops/hugemap.h"
#include "plugin/host.h"
#include "tier/sha256.h"

/* ---- messages ------------------------------------------------------------------------------ */

/* ---- dtypes -------------------------------------------------------------------------------- */

static const struct {
	const char *name;
	size_t size;
} dtypes[SRT_DT_COUNT] = {
	[SRT_DT_F32] = {"F32", 4},	   [SRT_DT_BF16] = {"BF16", 2}, [SRT_DT_F16] = {"F16", 2},
	[SRT_DT_F8_E4M3] = {"F8_E4M3", 1}, [SRT_DT_F8_E8M0] = {"F8_E8M0", 1},
	[SRT_DT_I8] = {"I8", 1},	   [SRT_DT_I32] = {"I32", 4},	[SRT_DT_I64] = {"I64", 8},
	[SRT_DT_U8] = {"U8", 1},	   [SRT_DT_F64] = {"F64", 8},
};

size_t srt_ck_dtype_size(uint32_t dtype)
{
	assert(dtype < SRT_DT_COUNT);
	return dtypes[dtype].size;
}

const char *srt_ck_dtype_name(uint32_t dtype)
{
	return dtype < SRT_DT_COUNT ? dtypes[dtype].name : "?";
}

int srt_ck_dtype_parse(const char *s, uint32_t *out)
{
	for (uint32_t i = 0; i < SRT_DT_COUNT; i++)
		if (!strcmp(s, dtypes[i].name)) {
			*out = i;
			return 0;
		}
	return SRT_EINVAL;
}

int srt_ck_tensor_bytes(uint32_t dtype, uint32_t ndim, const int64_t *shape, uint64_t *out)
{
	if (dtype >= SRT_DT_COUNT || ndim > SRT_TENSOR_MAX_DIMS)
		return SRT_EINVAL;
	uint64_t n = dtypes[dtype].size;
	for (uint32_t d = 0; d < ndim; d++) {
		if (shape[d] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[d], &n))
			return SRT_EINVAL;
	}
	*out = n;
	return 0;
}

/* ---- the open checkpoint ------------------------------------------------------------------- */

struct ck_file {
	char *path;
	const uint8_t *map;
	size_t size;
	size_t huge_len; /* map is srt_ck_to_hugepages's anonymous copy of this many bytes; 0:
			  * map is the file's mapping (or borrowed) */
	size_t data_off; /* 8 + header length */
	int borrowed;    /* map is the caller's memory (srt_ck_check_image), not a mapping */
	char **meta;	 /* key, value, key, value, ... (owned) */
	size_t n_meta;
};

struct ck_entry {
	struct srt_tensor t; /* first member: a srt_tensor pointer is an entry pointer */
	uint32_t file;
	uint64_t begin;      /* data_offsets, for overlap checks */
	uint64_t end;
	void *owned;         /* aligned copy of unaligned data (t.data points to it), or NULL */
};

struct srt_ckpt {
	struct ck_file *files;
	size_t n_files;
	struct ck_entry *ents;
	size_t n_ents, cap_ents;
	size_t *slots; /* open-addressing table of entry index + 1; 0 = empty */
	size_t n_slots;
	uint64_t total_bytes;
	size_t n_unaligned; /* tensors read through an aligned copy */
	char fingerprint[48];
};

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

static int cmp_ent_name(const void *a, const void *b)
{
	return strcmp(((const struct ck_entry *)a)->t.name, ((const struct ck_entry *)b)->t.name);
}

/* Sort entries by name and build the lookup table; a duplicate name is an error. */
static int index_entries(struct srt_ckpt *ck, char *err, size_t errlen)
{
	if (ck->n_ents > 1) /* ents is NULL when there are none: qsort must not see it */
		qsort(ck->ents, ck->n_ents, sizeof(*ck->ents), cmp_ent_name);
	for (size_t i = 1; i < ck->n_ents; i++) {
		if (!strcmp(ck->ents[i].t.name, ck->ents[i - 1].t.name)) {
			const char *a = ck->files[ck->ents[i - 1].file].path;
			const char *b = ck->files[ck->ents[i].file].path;
			if (a == b)
				return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s' is listed twice", a,
					    ck->ents[i].t.name);
			return errf(err, errlen, SRT_ECORRUPT, "tensor '%s' is in both %s and %s",
				    ck->ents[i].t.name, a, b);
		}
	}
	size_t ns = 16;
	while (ns < 2 * ck->n_ents)
		ns *= 2;
	ck->slots = calloc(ns, sizeof(*ck->slots));
	if (!ck->slots)
		return errf(err, errlen, SRT_ENOMEM, "out of memory for a %zu-tensor index", ck->n_ents);
	ck->n_slots = ns;
	for (size_t i = 0; i < ck->n_ents; i++) {
		size_t s = (size_t)name_hash(ck->ents[i].t.name) & (ns - 1);
		while (ck->slots[s])
			s = (s + 1) & (ns - 1);
		ck->slots[s] = i + 1;
	}
	return 0;
}

const struct srt_tensor *srt_ck_find(const struct srt_ckpt *ck, const char *name)
{
	if (!ck->n_slots)
		return NULL;
	size_t s = (size_t)name_hash(name) & (ck->n_slots - 1);
	while (ck->slots[s]) {
		const struct ck_entry *e = &ck->ents[ck->slots[s] - 1];
		if (!strcmp(e->t.name, name))
			return &e->t;
		s = (s + 1) & (ck->n_slots - 1);
	}
	return NULL;
}

size_t srt_ck_count(const struct srt_ckpt *ck)
{
	return ck->n_ents;
}

const struct srt_tensor *srt_ck_tensor(const struct srt_ckpt *ck, size_t i)
{
	assert(i < ck->n_ents);
	return &ck->ents[i].t;
}

const char *srt_ck_tensor_file(const struct srt_ckpt *ck, const struct srt_tensor *t)
{
	const struct ck_entry *e = (const struct ck_entry *)t;
	assert(e >= ck->ents && e < ck->ents + ck->n_ents);
	return ck->files[e->file].path;
}

size_t srt_ck_file_count(const struct srt_ckpt *ck)
{
	return ck->n_files;
}

const char *srt_ck_metadata(const struct srt_ckpt *ck, size_t file, const char *key)
{
	if (file >= ck->n_files)
		return NULL;
	const struct ck_file *f = &ck->files[file];
	for (size_t i = 0; i < f->n_meta; i++)
		if (!strcmp(f->meta[2 * i], key))
			return f->meta[2 * i + 1];
	return NULL;
}

size_t srt_ck_unaligned_count(const struct srt_ckpt *ck)
{
	return ck->n_unaligned;
}

uint64_t srt_ck_total_bytes(const struct srt_ckpt *ck)
{
	return ck->total_bytes;
}

const char *srt_ck_fingerprint(const struct srt_ckpt *ck)
{
	return ck->fingerprint;
}

void srt_ck_close(struct srt_ckpt *ck)
{
	if (!ck)
		return;
	for (size_t i = 0; i < ck->n_ents; i++) {
		free((char *)ck->ents[i].t.name);
		free(ck->ents[i].owned);
	}
	for (size_t i = 0; i < ck->n_files; i++) {
		struct ck_file *f = &ck->files[i];
		if (f->map && !f->borrowed)
			munmap((void *)f->map, f->huge_len ? f->huge_len : f->size);
		for (size_t k = 0; k < 2 * f->n_meta; k++)
			free(f->meta[k]);
		free(f->meta);
		free(f->path);
	}
	free(ck->files);
	free(ck->ents);
	free(ck->slots);
	free(ck);
}

/* ---- reading one file ---------------------------------------------------------------------- */

static int add_file(struct srt_ckpt *ck, const char *path, uint32_t *idx, char *err, size_t errlen)
{
	struct ck_file *nf = realloc(ck->files, (ck->n_files + 1) * sizeof(*nf));
	if (!nf)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	ck->files = nf;
	struct ck_file *f = &ck->files[ck->n_files];
	memset(f, 0, sizeof(*f));
	f->path = strdup(path);
	if (!f->path)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	*idx = (uint32_t)ck->n_files++;
	return 0;
}

/* Map a whole file read-only. Opened without blocking: a FIFO would hang open() for ever; it
 * is refused by the regular-file check below. */
static int map_file(const char *path, const uint8_t **map, size_t *size, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return errf(err, errlen, errno == ENOENT ? SRT_ENOENT : SRT_EIO, "%s: cannot open: %s",
			    path, strerror(errno));
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st)) {
		rc = errf(err, errlen, SRT_EIO, "%s: cannot stat: %s", path, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = errf(err, errlen, SRT_EINVAL, "%s: not a regular file", path);
		goto out_close;
	}
	*size = (size_t)st.st_size;
	*map = NULL;
	if (*size) {
		void *m = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED) {
			rc = errf(err, errlen, SRT_EIO, "%s: cannot map %zu bytes: %s", path, *size,
				  strerror(errno));
			goto out_close;
		}
		*map = m;
	}
out_close:
	close(fd);
	return rc;
}

static int push_entry(struct srt_ckpt *ck, struct ck_entry **out, char *err, size_t errlen)
{
	if (ck->n_ents == ck->cap_ents) {
		size_t nc = ck->cap_ents ? ck->cap_ents * 2 : 256;
		struct ck_entry *ne = realloc(ck->ents, nc * sizeof(*ne));
		if (!ne)
			return errf(err, errlen, SRT_ENOMEM, "out of memory");
		ck->ents = ne;
		ck->cap_ents = nc;
	}
	*out = &ck->ents[ck->n_ents];
	memset(*out, 0, sizeof(**out));
	return 0;
}

/* A JSON value's type, for messages. */
static const char *jtype(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number with a fraction or exponent";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	}
	return "?";
}

/*
 * Parse len bytes of JSON at text: strict RFC 8259 text (jansson), one object or array at the
 * top, duplicate object keys refused, no \u0000 in strings. NULL with "what: message (line L,
 * column C)" in err on failure.
 */
static json_t *srt_ck_json_parse(const char *text, size_t len, const char *what, char *err,
			  size_t errlen)
{
	json_error_t je;
	json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!v)
		errf(err, errlen, SRT_ECORRUPT, "%s: %s (line %d, column %d, byte %d)", what, je.text,
		     je.line, je.column, je.position);
	return v;
}

static int read_u64_array(const json_t *arr, int64_t *vals, uint32_t max, uint32_t *n)
{
	size_t i;
	const json_t *c;
	*n = 0;
	json_array_foreach(arr, i, c) {
		if (*n >= max || !json_is_integer(c) || json_integer_value(c) < 0)
			return -1;
		vals[(*n)++] = json_integer_value(c);
	}
	return 0;
}

/* One tensor entry of a header: fills e (name owned by e). */
static int parse_tensor(const char *path, const char *name, const json_t *m, struct ck_entry *e,
			char *err, size_t errlen)
{
	if (!*name)
		return errf(err, errlen, SRT_ECORRUPT, "%s: header has a tensor with an empty name",
			    path);
	if (!json_is_object(m))
		return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': expected an object, got %s",
			    path, name, jtype(m));
	const char *k;
	const json_t *c;
	json_object_foreach((json_t *)m, k, c) {
		if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
			return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': unknown key '%s' "
				    "(expected dtype, shape, data_offsets)", path, name, k);
	}
	const json_t *dt = json_object_get(m, "dtype"), *shape = json_object_get(m, "shape"),
		     *offs = json_object_get(m, "data_offsets");
	if (!dt || !shape || !offs)
		return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': missing key '%s'", path, name,
			    !dt ? "dtype" : !shape ? "shape" : "data_offsets");
	if (!json_is_string(dt))
		return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': dtype: expected a string, "
			    "got %s", path, name, jtype(dt));
	if (srt_ck_dtype_parse(json_string_value(dt), &e->t.dtype))
		return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': unknown dtype \"%s\" (expected "
			    "one of F32, BF16, F16, F8_E4M3, F8_E8M0, I8, U8, I32, I64, F64)",
			    path, name, json_string_value(dt));
	if (!json_is_array(shape) ||
	    read_u64_array(shape, e->t.shape, SRT_TENSOR_MAX_DIMS, &e->t.ndim))
		return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': shape must be an array of at "
			    "most %d non-negative integers", path, name, SRT_TENSOR_MAX_DIMS);
	int64_t o[2];
	uint32_t no;
	if (!json_is_array(offs) || read_u64_array(offs, o, 2, &no) || no != 2)
		return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': data_offsets must be an array "
			    "of 2 non-negative integers", path, name);
	if (o[0] > o[1])
		return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': data_offsets [%lld, %lld] "
			    "end before begin", path, name, (long long)o[0], (long long)o[1]);
	uint64_t nbytes;
	char sh[96];
	fmt_shape(sh, sizeof(sh), e->t.ndim, e->t.shape);
	if (srt_ck_tensor_bytes(e->t.dtype, e->t.ndim, e->t.shape, &nbytes))
		return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': shape %s overflows", path, name,
			    sh);
	if (nbytes != (uint64_t)(o[1] - o[0]))
		return errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': shape %s of %s needs %llu "
			    "bytes, but data_offsets [%lld, %lld] hold %llu", path, name, sh,
			    json_string_value(dt), (unsigned long long)nbytes, (long long)o[0],
			    (long long)o[1], (unsigned long long)(o[1] - o[0]));
	e->begin = (uint64_t)o[0];
	e->end = (uint64_t)o[1];
	e->t.nbytes = (size_t)nbytes;
	e->t.name = strdup(name);
	if (!e->t.name)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	return 0;
}

static int parse_metadata(const char *path, const json_t *m, struct ck_file *f, char *err,
			  size_t errlen)
{
	if (!json_is_object(m))
		return errf(err, errlen, SRT_ECORRUPT, "%s: __metadata__: expected an object, got %s",
			    path, jtype(m));
	f->meta = calloc(2 * json_object_size(m) + 1, sizeof(char *));
	if (!f->meta)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	const char *k;
	const json_t *c;
	json_object_foreach((json_t *)m, k, c) {
		if (!json_is_string(c))
			return errf(err, errlen, SRT_ECORRUPT, "%s: __metadata__ key '%s': expected a "
				    "string, got %s", path, k, jtype(c));
		f->meta[2 * f->n_meta] = strdup(k);
		f->meta[2 * f->n_meta + 1] = strdup(json_string_value(c));
		f->n_meta++;
		if (!f->meta[2 * f->n_meta - 2] || !f->meta[2 * f->n_meta - 1])
			return errf(err, errlen, SRT_ENOMEM, "out of memory");
	}
	return 0;
}

static int cmp_ent_begin(const void *a, const void *b)
{
	const struct ck_entry *x = *(const struct ck_entry *const *)a;
	const struct ck_entry *y = *(const struct ck_entry *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* Data ranges of entries [first, n_ents) of one file: inside the data region, no overlap. */
static int check_ranges(struct srt_ckpt *ck, struct ck_file *f, size_t first, char *err,
			size_t errlen)
{
	size_t n = ck->n_ents - first;
	size_t data_size = f->size - f->data_off;
	if (!n)
		return 0;
	struct ck_entry **order = malloc(n * sizeof(*order));
	if (!order)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		order[i] = &ck->ents[first + i];
	qsort(order, n, sizeof(*order), cmp_ent_begin);
	int rc = 0;
	size_t n_copied = 0, copied = 0;
	const struct ck_entry *first_copied = NULL;
	for (size_t i = 0; i < n; i++) {
		struct ck_entry *e = order[i];
		if (e->end > data_size) {
			rc = errf(err, errlen, SRT_ECORRUPT, "%s: tensor '%s': data_offsets [%llu, %llu] "
				  "reach past the end of the data region (%zu bytes after the %zu-byte "
				  "header; file truncated?)", f->path, e->t.name,
				  (unsigned long long)e->begin, (unsigned long long)e->end, data_size,
				  f->data_off);
			break;
		}
		if (i && order[i - 1]->end > e->begin) {
			struct ck_entry *p = order[i - 1];
			rc = errf(err, errlen, SRT_ECORRUPT, "%s: tensors '%s' [%llu, %llu] and '%s' "
				  "[%llu, %llu] overlap", f->path, p->t.name,
				  (unsigned long long)p->begin, (unsigned long long)p->end, e->t.name,
				  (unsigned long long)e->begin, (unsigned long long)e->end);
			break;
		}
		/* Kernels read tensors through typed pointers (and the compiler may vectorise with
		 * aligned loads): data must sit on its element size. The format does not require it
		 * (the mapping is page-aligned, but a header not padded to 8 bytes or tensors not
		 * ordered by element size leave some off): such tensors get an aligned copy. */
		size_t esz = srt_ck_dtype_size(e->t.dtype);
		const uint8_t *at = f->map + f->data_off + e->begin;
		if (e->t.nbytes && (uintptr_t)at % esz) {
			size_t cap = (e->t.nbytes + 63) / 64 * 64;
			e->owned = aligned_alloc(64, cap);
			if (!e->owned) {
				rc = errf(err, errlen, SRT_ENOMEM, "%s: tensor '%s': out of memory for an "
					  "aligned copy of its %zu unaligned bytes", f->path, e->t.name,
					  e->t.nbytes);
				break;
			}
			memcpy(e->owned, at, e->t.nbytes);
			at = e->owned;
			n_copied++;
			copied += e->t.nbytes;
			if (!first_copied)
				first_copied = e;
		}
		e->t.data = at;
	}
	if (!rc && n_copied) {
		char what[256];
		snprintf(what, sizeof(what), "%zu tensor%s (first '%s' at file offset %llu, not a "
			 "multiple of its %zu-byte %s elements)", n_copied, n_copied == 1 ? "" : "s",
			 first_copied->t.name,
			 (unsigned long long)(f->data_off + first_copied->begin),
			 srt_ck_dtype_size(first_copied->t.dtype),
			 srt_ck_dtype_name(first_copied->t.dtype));
		srt_log(SRT_LOG_WARN, "ckpt", "%s: %s not aligned to the element size: copied %zu "
			"bytes into aligned memory (pad the header to 8 bytes and order tensors by "
			"element size to map them in place)", f->path, what, copied);
		ck->n_unaligned += n_copied;
	}
	free(order);
	return rc;
}

static int parse_file(struct srt_ckpt *ck, uint32_t fi, char *err, size_t errlen);

/* Map and validate one .safetensors file, appending its tensors. */
static int load_file(struct srt_ckpt *ck, const char *path, char *err, size_t errlen)
{
	uint32_t fi = 0;
	int rc = add_file(ck, path, &fi, err, errlen);
	if (rc)
		return rc;
	struct ck_file *f = &ck->files[fi];
	if ((rc = map_file(path, &f->map, &f->size, err, errlen)))
		return rc;
	return parse_file(ck, fi, err, errlen);
}

/* Validate the mapped image of file fi, appending its tensors. */
static int parse_file(struct srt_ckpt *ck, uint32_t fi, char *err, size_t errlen)
{
	struct ck_file *f = &ck->files[fi];
	const char *path = f->path;
	int rc;
	if (f->size < 8)
		return errf(err, errlen, SRT_ECORRUPT, "%s: file is %zu bytes, too short for the "
			    "8-byte header length (truncated or not a safetensors file)", path, f->size);
	uint64_t hl = 0;
	for (int k = 7; k >= 0; k--)
		hl = hl << 8 | f->map[k];
	if (hl > f->size - 8)
		return errf(err, errlen, SRT_ECORRUPT, "%s: header length %llu reaches past the end of "
			    "the %zu-byte file (truncated or not a safetensors file)", path,
			    (unsigned long long)hl, f->size);
	if (hl > SRT_CK_HEADER_MAX)
		return errf(err, errlen, SRT_ECORRUPT, "%s: header length %llu exceeds the %llu-byte "
			    "limit", path, (unsigned long long)hl,
			    (unsigned long long)SRT_CK_HEADER_MAX);
	f->data_off = 8 + (size_t)hl;

	char what[4200];
	snprintf(what, sizeof(what), "%s: header", path);
	json_t *root = srt_ck_json_parse((const char *)f->map + 8, (size_t)hl, what, err, errlen);
	if (!root)
		return SRT_ECORRUPT;
	size_t first = ck->n_ents;
	if (!json_is_object(root)) {
		rc = errf(err, errlen, SRT_ECORRUPT, "%s: header: expected a JSON object, got %s", path,
			  jtype(root));
		goto out;
	}
	const char *key;
	const json_t *m;
	json_object_foreach(root, key, m) {
		if (!strcmp(key, "__metadata__")) {
			if ((rc = parse_metadata(path, m, f, err, errlen)))
				goto out;
			continue;
		}
		struct ck_entry *e = NULL;
		if ((rc = push_entry(ck, &e, err, errlen)))
			goto out;
		e->file = fi;
		if ((rc = parse_tensor(path, key, m, e, err, errlen)))
			goto out;
		ck->n_ents++;
		ck->total_bytes += e->t.nbytes;
	}
	rc = check_ranges(ck, f, first, err, errlen);
out:
	json_decref(root);
	return rc;
}

/* ---- sharded index ------------------------------------------------------------------------- */

static int read_small_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
	const uint8_t *map;
	size_t size;
	int rc = map_file(path, &map, &size, err, errlen);
	if (rc)
		return rc;
	if (size > SRT_CK_HEADER_MAX) {
		munmap((void *)map, size);
		return errf(err, errlen, SRT_ECORRUPT, "%s: %zu bytes, more than the %llu-byte limit "
			    "of a checkpoint index", path, size, (unsigned long long)SRT_CK_HEADER_MAX);
	}
	*out = malloc(size + 1);
	if (!*out) {
		rc = errf(err, errlen, SRT_ENOMEM, "%s: out of memory for %zu bytes", path, size);
	} else {
		if (size)
			memcpy(*out, map, size);
		(*out)[size] = '\0';
		*len = size;
	}
	if (map)
		munmap((void *)map, size);
	return rc;
}

static int valid_shard_name(const char *s)
{
	return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int load_index(struct srt_ckpt *ck, const char *index_path, char *err, size_t errlen)
{
	char *text = NULL, *dir = NULL;
	size_t len = 0;
	const char **shards = NULL;
	size_t n_shards = 0;
	uint8_t *seen = NULL;
	json_t *root = NULL;
	int rc = read_small_file(index_path, &text, &len, err, errlen);
	if (rc)
		return rc;
	if (!(root = srt_ck_json_parse(text, len, index_path, err, errlen))) {
		rc = SRT_ECORRUPT;
		goto out;
	}
	const json_t *wm = json_object_get(root, "weight_map");
	if (!json_is_object(root) || !json_is_object(wm)) {
		rc = errf(err, errlen, SRT_ECORRUPT, "%s: expected a JSON object with a \"weight_map\" "
			  "object", index_path);
		goto out;
	}
	size_t n_wm = json_object_size(wm);
	if (!n_wm) {
		rc = errf(err, errlen, SRT_ECORRUPT, "%s: \"weight_map\" is empty: the index lists "
			  "no tensors", index_path);
		goto out;
	}
	const char *slash = strrchr(index_path, '/');
	dir = slash ? strndup(index_path, (size_t)(slash - index_path + 1)) : strdup("");
	shards = calloc(n_wm + 1, sizeof(*shards));
	if (!dir || !shards) {
		rc = errf(err, errlen, SRT_ENOMEM, "out of memory");
		goto out;
	}
	/* Distinct shard files, in order of first mention. */
	const char *key;
	const json_t *c;
	json_object_foreach((json_t *)wm, key, c) {
		if (!json_is_string(c) || !valid_shard_name(json_string_value(c))) {
			rc = errf(err, errlen, SRT_ECORRUPT, "%s: weight_map['%s']: expected the plain "
				  "name of a file next to the index", index_path, key);
			goto out;
		}
		const char *sn = json_string_value(c);
		size_t k = 0;
		while (k < n_shards && strcmp(shards[k], sn))
			k++;
		if (k == n_shards)
			shards[n_shards++] = sn;
	}
	for (size_t k = 0; k < n_shards; k++) {
		size_t pl = strlen(dir) + strlen(shards[k]) + 1;
		char *p = malloc(pl);
		if (!p) {
			rc = errf(err, errlen, SRT_ENOMEM, "out of memory");
			goto out;
		}
		snprintf(p, pl, "%s%s", dir, shards[k]);
		rc = load_file(ck, p, err, errlen);
		if (rc == SRT_ENOENT)
			rc = errf(err, errlen, SRT_ECORRUPT, "%s: shard %s named by the index is missing",
				  index_path, p);
		free(p);
		if (rc)
			goto out;
	}
	if ((rc = index_entries(ck, err, errlen)))
		goto out;
	/* The index and the shards must agree exactly (duplicate keys were refused above). */
	seen = calloc(ck->n_ents + 1, 1);
	if (!seen) {
		rc = errf(err, errlen, SRT_ENOMEM, "out of memory");
		goto out;
	}
	json_object_foreach((json_t *)wm, key, c) {
		const char *sn = json_string_value(c);
		const struct srt_tensor *t = srt_ck_find(ck, key);
		if (!t) {
			rc = errf(err, errlen, SRT_ECORRUPT, "%s: weight_map puts tensor '%s' in %s, "
				  "which has no such tensor", index_path, key, sn);
			goto out;
		}
		const struct ck_entry *e = (const struct ck_entry *)t;
		const char *fp = ck->files[e->file].path;
		const char *base = strrchr(fp, '/');
		base = base ? base + 1 : fp;
		if (strcmp(base, sn)) {
			rc = errf(err, errlen, SRT_ECORRUPT, "%s: weight_map puts tensor '%s' in %s, but "
				  "it is in %s", index_path, key, sn, fp);
			goto out;
		}
		seen[(size_t)(e - ck->ents)] = 1;
	}
	for (size_t i = 0; i < ck->n_ents; i++)
		if (!seen[i]) {
			rc = errf(err, errlen, SRT_ECORRUPT, "%s: holds tensor '%s', which %s does not "
				  "list in its weight_map", ck->files[ck->ents[i].file].path,
				  ck->ents[i].t.name, index_path);
			goto out;
		}
out:
	free(seen);
	free(shards);
	free(dir);
	json_decref(root);
	free(text);
	return rc;
}

/* ---- fingerprint --------------------------------------------------------------------------- */

#define FP_SMALL 4096
#define FP_WINDOWS 16
#define FP_WINDOW 256

static void fp_u64(struct srt_tier_sha256 *s, uint64_t v)
{
	uint8_t b[8];
	for (int k = 0; k < 8; k++)
		b[k] = (uint8_t)(v >> (8 * k));
	srt_tier_sha256_update(s, b, 8);
}

static void fp_meta(struct srt_tier_sha256 *s, const struct srt_tensor *t)
{
	srt_tier_sha256_update(s, t->name, strlen(t->name) + 1);
	fp_u64(s, t->dtype);
	fp_u64(s, t->ndim);
	for (uint32_t d = 0; d < t->ndim; d++)
		fp_u64(s, (uint64_t)t->shape[d]);
	fp_u64(s, t->nbytes);
}

static void fp_finish(struct srt_tier_sha256 *s, const char *prefix, char out[48])
{
	uint8_t dig[SRT_TIER_SHA256_BYTES];
	srt_tier_sha256_final(s, dig);
	int o = snprintf(out, 48, "%s", prefix);
	for (int k = 0; k < 16; k++)
		o += snprintf(out + o, (size_t)(48 - o), "%02x", dig[k]);
}

static void fingerprint_sampled(struct srt_ckpt *ck)
{
	struct srt_tier_sha256 s;
	srt_tier_sha256_init(&s);
	srt_tier_sha256_update(&s, "shadowrt-ckpt-fp-sampled-v1", 28);
	fp_u64(&s, ck->n_ents);
	for (size_t i = 0; i < ck->n_ents; i++) {
		const struct srt_tensor *t = &ck->ents[i].t;
		const uint8_t *d = t->data;
		fp_meta(&s, t);
		if (t->nbytes <= FP_SMALL) {
			srt_tier_sha256_update(&s, d, t->nbytes);
			continue;
		}
		for (size_t w = 0; w < FP_WINDOWS; w++) {
			size_t off = (size_t)((t->nbytes - FP_WINDOW) * (unsigned __int128)w /
					      (FP_WINDOWS - 1));
			srt_tier_sha256_update(&s, d + off, FP_WINDOW);
		}
	}
	fp_finish(&s, "ck1s-", ck->fingerprint);
}

int srt_ck_fingerprint_full(const struct srt_ckpt *ck, char out[48], char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	struct srt_tier_sha256 s;
	srt_tier_sha256_init(&s);
	srt_tier_sha256_update(&s, "shadowrt-ckpt-fp-full-v1", 25);
	fp_u64(&s, ck->n_ents);
	for (size_t i = 0; i < ck->n_ents; i++) {
		const struct srt_tensor *t = &ck->ents[i].t;
		fp_meta(&s, t);
		srt_tier_sha256_update(&s, t->data, t->nbytes);
	}
	fp_finish(&s, "ck1f-", out);
	return 0;
}

/* ---- open ---------------------------------------------------------------------------------- */

static int has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

static int path_exists(const char *p)
{
	struct stat st;
	return !stat(p, &st) && S_ISREG(st.st_mode);
}

/* Choose what to open in a directory: index, model.safetensors, or its only .safetensors. */
static int resolve_dir(const char *dir, char **out, int *is_index, char *err, size_t errlen)
{
	size_t dl = strlen(dir);
	const char *sep = dl && dir[dl - 1] == '/' ? "" : "/";
	char *p = NULL;
	if (asprintf(&p, "%s%s%s", dir, sep, SRT_CK_INDEX_NAME) < 0)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	if (path_exists(p)) {
		*out = p;
		*is_index = 1;
		return 0;
	}
	free(p);
	if (asprintf(&p, "%s%s%s", dir, sep, SRT_CK_SINGLE_NAME) < 0)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	if (path_exists(p)) {
		*out = p;
		*is_index = 0;
		return 0;
	}
	free(p);
	p = NULL;
	DIR *d = opendir(dir);
	if (!d)
		return errf(err, errlen, errno == ENOENT ? SRT_ENOENT : SRT_EIO, "%s: cannot open "
			    "directory: %s", dir, strerror(errno));
	int found = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || !has_suffix(de->d_name, ".safetensors"))
			continue;
		if (found++)
			continue;
		if (asprintf(&p, "%s%s%s", dir, sep, de->d_name) < 0) {
			closedir(d);
			return errf(err, errlen, SRT_ENOMEM, "out of memory");
		}
	}
	closedir(d);
	if (found == 1) {
		*out = p;
		*is_index = 0;
		return 0;
	}
	free(p);
	if (!found)
		return errf(err, errlen, SRT_ENOENT, "%s: no %s, %s or other .safetensors file", dir,
			    SRT_CK_INDEX_NAME, SRT_CK_SINGLE_NAME);
	return errf(err, errlen, SRT_ECORRUPT, "%s: %d .safetensors files but no %s to say how "
		    "they fit together", dir, found, SRT_CK_INDEX_NAME);
}

int srt_ck_open(const char *path, struct srt_ckpt **out, char *err, size_t errlen)
{
	*out = NULL;
	struct stat st;
	if (stat(path, &st))
		return errf(err, errlen, errno == ENOENT ? SRT_ENOENT : SRT_EIO, "%s: %s", path,
			    strerror(errno));
	char *target = NULL;
	int is_index = 0, rc;
	if (S_ISDIR(st.st_mode)) {
		if ((rc = resolve_dir(path, &target, &is_index, err, errlen)))
			return rc;
	} else {
		target = strdup(path);
		if (!target)
			return errf(err, errlen, SRT_ENOMEM, "out of memory");
		is_index = has_suffix(path, ".json");
	}
	struct srt_ckpt *ck = calloc(1, sizeof(*ck));
	if (!ck) {
		free(target);
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	}
	if (is_index) {
		rc = load_index(ck, target, err, errlen);
	} else {
		rc = load_file(ck, target, err, errlen);
		if (!rc)
			rc = index_entries(ck, err, errlen);
	}
	free(target);
	if (rc) {
		srt_ck_close(ck);
		return rc;
	}
	fingerprint_sampled(ck);
	*out = ck;
	return 0;
}

/* ---- huge pages ---------------------------------------------------------------------------- */

#define CK_HUGE SRT_HUGE_BYTES

int srt_ck_thp_usable(void)
{
	char buf[128] = "";
	FILE *fp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (!fp)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = 0;
	return strstr(buf, "[never]") == NULL && (strstr(buf, "[always]") || strstr(buf, "[madvise]"));
}

/* MemAvailable of /proc/meminfo in bytes, 0 when unknown. */
static uint64_t mem_available(void)
{
	char line[256];
	unsigned long long kb = 0;
	FILE *fp = fopen("/proc/meminfo", "r");
	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(fp);
	return (uint64_t)kb * 1024;
}

/* File f's bytes moved from its mapping into anonymous memory aligned to 2 MiB and advised
 * onto huge pages, read-only; its tensors re-pointed. 0, or -1 with nothing changed. */
static int file_to_huge(struct srt_ckpt *ck, uint32_t fi)
{
	struct ck_file *f = &ck->files[fi];
	const size_t len = (f->size + CK_HUGE - 1) / CK_HUGE * CK_HUGE;
	uint8_t *a = srt_map_huge_aligned(len, 1, 0);
	if (!a)
		return -1;
	memcpy(a, f->map, f->size);
	mprotect(a, len, PROT_READ);
	for (size_t i = 0; i < ck->n_ents; i++) {
		struct ck_entry *e = &ck->ents[i];
		if (e->file == fi && !e->owned && e->t.data)
			e->t.data = a + ((const uint8_t *)e->t.data - f->map);
	}
	munmap((void *)f->map, f->size);
	f->map = a;
	f->huge_len = len;
	return 0;
}

int srt_ck_to_hugepages(struct srt_ckpt *ck, char *note, size_t note_len)
{
	uint64_t total = 0, avail = mem_available();
	size_t moved = 0;
	for (size_t i = 0; i < ck->n_files; i++)
		if (!ck->files[i].borrowed && !ck->files[i].huge_len)
			total += ck->files[i].size;
	if (!srt_ck_thp_usable()) {
		snprintf(note, note_len, "weights stay mapped from their files: transparent huge "
			 "pages are off (/sys/kernel/mm/transparent_hugepage/enabled)");
		return 0;
	}
	/* the copy must not crowd out the page cache it comes from: it needs room to spare */
	if (!avail || total > avail / 10 * 8) {
		snprintf(note, note_len, "weights stay mapped from their files: %.1f GiB do not fit "
			 "in 80%% of the %.1f GiB of available memory", (double)total / (1 << 30),
			 (double)avail / (1 << 30));
		return 0;
	}
	for (size_t i = 0; i < ck->n_files; i++) {
		struct ck_file *f = &ck->files[i];
		if (f->borrowed || !f->map || f->huge_len)
			continue;
		if (file_to_huge(ck, (uint32_t)i)) {
			snprintf(note, note_len, "%zu of %zu weight files on huge pages; the rest stay "
				 "mapped (no memory for a copy of %s)", moved, ck->n_files, f->path);
			return (int)moved;
		}
		moved++;
	}
	snprintf(note, note_len, "weights on huge pages: %.1f MiB in %zu files",
		 (double)total / (1 << 20), moved);
	return (int)moved;
}

int srt_ck_check_image(const void *data, size_t size, const char *name, char *err,
		       size_t errlen)
{
	struct srt_ckpt *ck = calloc(1, sizeof(*ck));
	if (!ck)
		return errf(err, errlen, SRT_ENOMEM, "out of memory");
	uint32_t fi = 0;
	int rc = add_file(ck, name ? name : "<memory>", &fi, err, errlen);
	if (!rc) {
		ck->files[fi].map = data;
		ck->files[fi].size = size;
		ck->files[fi].borrowed = 1;
		rc = parse_file(ck, fi, err, errlen);
	}
	if (!rc)
		rc = index_entries(ck, err, errlen);
	srt_ck_close(ck);
	return rc;
}

/* ---- srt_weights view ---------------------------------------------------------------------- */

static int weights_get(void *ctx, const char *name, struct srt_tensor *out)
{
	const struct srt_tensor *t = srt_ck_find(ctx, name);
	if (!t)
		return SRT_ENOENT;
	*out = *t;
	return 0;
}

void srt_ck_weights(const struct srt_ckpt *ck, struct srt_weights *out)
{
	memset(out, 0, sizeof(*out));
	out->struct_size = sizeof(*out);
	out->ctx = (void *)ck;
	out->get = weights_get;
	out->fingerprint = ck->fingerprint;
}
