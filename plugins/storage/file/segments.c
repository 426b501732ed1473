/* The file store's segment layout (segments.h). */
#include "segments.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME "file"
#define MAGIC "SRTSEG01"
#define HDR 64u
#define MAX_LEN (1u << 30) /* one object at most (a page is a few MiB) */

enum { R_PUT = 1, R_DEL = 2, R_TOUCH = 3 };

/* The on-disk record header, little-endian (the build machines are). */
struct rec {
	char magic[8];
	uint32_t type;
	uint32_t len;
	struct srt_key key;
	uint8_t pad[8];
	uint64_t check; /* of the 56 bytes before it */
};
_Static_assert(sizeof(struct rec) == HDR, "record header is 64 bytes");

struct ent {
	struct srt_key key;
	uint64_t off;
	uint64_t seg; /* segment id */
	uint32_t len;
	struct ent *hnext, *prev, *next; /* hash chain; LRU (head = most recent) */
};

struct seg {
	uint64_t id;
	uint64_t size;  /* file bytes */
	uint64_t live;  /* live objects in it */
	uint64_t lbytes; /* their payload bytes */
	int rfd;         /* read descriptor, opened on the first get (-1 until then) */
};

struct seg_store {
	const struct srt_host *host;
	char *dir; /* <root>/seg */
	int lock_fd;
	int do_fsync;
	uint64_t max_bytes, seg_bytes;
	pthread_mutex_t wmu; /* the write path: one appender */
	pthread_mutex_t mu;  /* index, LRU, segment table */
	pthread_rwlock_t fdlock; /* reads hold it shared; closing a read descriptor, exclusive */
	struct ent **b;
	size_t nb, n;
	struct ent *head, *tail;
	uint64_t bytes; /* live payload bytes */
	struct seg *segs; /* oldest first; the last is the one appended to */
	size_t nsegs, capsegs;
	int fd; /* the current segment, O_APPEND (under wmu); -1 before the first write */
	int roll_errno; /* why the last roll failed */
	uint64_t fail_run;
};

static uint64_t check_of(const struct rec *r)
{
	const uint8_t *p = (const uint8_t *)r;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < offsetof(struct rec, check); i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

static void rec_fill(struct rec *r, uint32_t type, const struct srt_key *k, uint32_t len)
{
	memset(r, 0, sizeof(*r));
	memcpy(r->magic, MAGIC, 8);
	r->type = type;
	r->len = len;
	r->key = *k;
	r->check = check_of(r);
}

/* Write a record header at dst, which may be unaligned. */
static void put_rec(void *dst, uint32_t type, const struct srt_key *k, uint32_t len)
{
	struct rec r;
	rec_fill(&r, type, k, len);
	memcpy(dst, &r, sizeof(r));
}

static int rec_ok(const struct rec *r)
{
	return !memcmp(r->magic, MAGIC, 8) && r->check == check_of(r) && r->type >= R_PUT &&
	       r->type <= R_TOUCH && r->len <= MAX_LEN && (r->type == R_PUT || !r->len);
}

static int errno_code(int e)
{
	return e == ENOSPC || e == EDQUOT || e == EFBIG ? SRT_ENOSPC : SRT_EIO;
}

/* --- index (under mu) ----------------------------------------------------------------------- */

static size_t slot(const struct seg_store *s, const struct srt_key *k)
{
	uint64_t h;
	memcpy(&h, k->b, sizeof(h));
	return (size_t)h & (s->nb - 1);
}

static struct ent *find(const struct seg_store *s, const struct srt_key *k)
{
	for (struct ent *e = s->b[slot(s, k)]; e; e = e->hnext)
		if (!memcmp(e->key.b, k->b, SRT_KEY_BYTES))
			return e;
	return NULL;
}

static void lru_unlink(struct seg_store *s, struct ent *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		s->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		s->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_front(struct seg_store *s, struct ent *e)
{
	e->prev = NULL;
	e->next = s->head;
	if (s->head)
		s->head->prev = e;
	s->head = e;
	if (!s->tail)
		s->tail = e;
}

static struct seg *seg_of(struct seg_store *s, uint64_t id)
{
	/* ids are increasing along the table: binary search */
	size_t lo = 0, hi = s->nsegs;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->segs[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nsegs && s->segs[lo].id == id ? &s->segs[lo] : NULL;
}

static void drop(struct seg_store *s, struct ent *e)
{
	struct ent **pp = &s->b[slot(s, &e->key)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	lru_unlink(s, e);
	struct seg *g = seg_of(s, e->seg);
	if (g) {
		g->live--;
		g->lbytes -= e->len;
	}
	s->bytes -= e->len;
	s->n--;
	free(e);
}

static int grow(struct seg_store *s)
{
	size_t nb = s->nb ? 2 * s->nb : 4096;
	struct ent **b = calloc(nb, sizeof(*b));
	if (!b)
		return SRT_ENOMEM;
	for (size_t i = 0; i < s->nb; i++)
		for (struct ent *e = s->b[i], *nx; e; e = nx) {
			nx = e->hnext;
			uint64_t h;
			memcpy(&h, e->key.b, sizeof(h));
			e->hnext = b[h & (nb - 1)];
			b[h & (nb - 1)] = e;
		}
	free(s->b);
	s->b = b;
	s->nb = nb;
	return 0;
}

/* Index key at (seg, off, len) as the most recent; replaces an older copy. */
static int index_put(struct seg_store *s, const struct srt_key *k, uint64_t seg, uint64_t off,
		     uint32_t len)
{
	struct ent *e = find(s, k);
	if (e)
		drop(s, e);
	if (s->n >= s->nb && grow(s))
		return SRT_ENOMEM;
	if (!(e = calloc(1, sizeof(*e))))
		return SRT_ENOMEM;
	e->key = *k;
	e->seg = seg;
	e->off = off;
	e->len = len;
	size_t j = slot(s, k);
	e->hnext = s->b[j];
	s->b[j] = e;
	lru_front(s, e);
	s->n++;
	s->bytes += len;
	struct seg *g = seg_of(s, seg);
	if (g) {
		g->live++;
		g->lbytes += len;
	}
	return 0;
}

/* --- segment files -------------------------------------------------------------------------- */

static void seg_path(const struct seg_store *s, uint64_t id, char *out, size_t n)
{
	snprintf(out, n, "%s/%016" PRIx64 ".log", s->dir, id);
}

static int add_seg(struct seg_store *s, uint64_t id, uint64_t size)
{
	if (s->nsegs == s->capsegs) {
		size_t cap = s->capsegs ? 2 * s->capsegs : 16;
		struct seg *g = realloc(s->segs, cap * sizeof(*g));
		if (!g)
			return SRT_ENOMEM;
		s->segs = g;
		s->capsegs = cap;
	}
	s->segs[s->nsegs++] = (struct seg){.id = id, .size = size, .rfd = -1};
	return 0;
}

/* Begin a new segment after the last one; under wmu and mu. */
static int roll(struct seg_store *s)
{
	uint64_t id = s->nsegs ? s->segs[s->nsegs - 1].id + 1 : 1;
	char p[PATH_MAX];
	seg_path(s, id, p, sizeof(p));
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		int e = errno;
		s->roll_errno = e;
		s->host->log(SRT_LOG_ERROR, NAME, "%s: cannot create: %s", p, strerror(e));
		return errno_code(e);
	}
	if (add_seg(s, id, 0)) {
		close(fd);
		unlink(p);
		return SRT_ENOMEM;
	}
	if (s->fd >= 0)
		close(s->fd);
	s->fd = fd;
	return 0;
}

/* Delete the oldest segments that hold nothing live (never the current one); under mu. */
static void reclaim(struct seg_store *s)
{
	size_t k = 0;
	while (k + 1 < s->nsegs && s->segs[k].live == 0)
		k++;
	if (k) { /* no get is reading through these descriptors (lock order: mu, then fdlock) */
		pthread_rwlock_wrlock(&s->fdlock);
		for (size_t i = 0; i < k; i++)
			if (s->segs[i].rfd >= 0)
				close(s->segs[i].rfd);
		pthread_rwlock_unlock(&s->fdlock);
	}
	for (size_t i = 0; i < k; i++) {
		char p[PATH_MAX];
		seg_path(s, s->segs[i].id, p, sizeof(p));
		if (unlink(p) && errno != ENOENT)
			s->host->log(SRT_LOG_WARN, NAME, "%s: cannot delete: %s", p, strerror(errno));
	}
	if (k) {
		memmove(s->segs, s->segs + k, (s->nsegs - k) * sizeof(*s->segs));
		s->nsegs -= k;
	}
}

/* Write buf[0..n) at the end of the current segment; 0 or errno (the tail is cut back). */
static int append(struct seg_store *s, const void *buf, size_t n, int sync)
{
	if (s->fd < 0) { /* the first write of this process: a segment of its own */
		int rc = roll(s);
		if (rc)
			return rc == SRT_ENOMEM ? ENOMEM : s->roll_errno;
	}
	struct seg *cur = &s->segs[s->nsegs - 1];
	uint64_t at = cur->size;
	for (size_t off = 0; off < n;) {
		ssize_t w = write(s->fd, (const uint8_t *)buf + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int e = errno;
			if (ftruncate(s->fd, (off_t)at)) /* a torn tail would be cut at the next open */
				s->host->log(SRT_LOG_WARN, NAME, "cutting back a failed append: %s",
					     strerror(errno));
			return e;
		}
		off += (size_t)w;
	}
	if (sync && s->do_fsync && fdatasync(s->fd)) {
		int e = errno;
		if (ftruncate(s->fd, (off_t)at))
			s->host->log(SRT_LOG_WARN, NAME, "cutting back a failed append: %s",
				     strerror(errno));
		return e;
	}
	cur->size = at + n;
	return 0;
}

/* --- open: replay the segments -------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int scan_one(struct seg_store *s, uint64_t id)
{
	char p[PATH_MAX];
	seg_path(s, id, p, sizeof(p));
	int fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd < 0 && (errno == EROFS || errno == EACCES)) /* read-only: read it as it is */
		fd = open(p, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st)) {
		s->host->log(SRT_LOG_WARN, NAME, "%s: cannot open: %s (skipped)", p, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 0;
	}
	uint64_t size = (uint64_t)st.st_size, off = 0;
	int rc = add_seg(s, id, size);
	while (!rc && off + HDR <= size) {
		struct rec r;
		if (pread(fd, &r, HDR, (off_t)off) != HDR || !rec_ok(&r) || off + HDR + r.len > size)
			break;
		struct ent *e = find(s, &r.key);
		if (r.type == R_PUT)
			rc = index_put(s, &r.key, id, off + HDR, r.len);
		else if (r.type == R_DEL && e)
			drop(s, e);
		else if (r.type == R_TOUCH && e) {
			lru_unlink(s, e);
			lru_front(s, e);
		}
		off += HDR + r.len;
	}
	if (!rc && off < size) {
		s->host->log(SRT_LOG_WARN, NAME, "%s: torn or damaged record at byte %" PRIu64
			     " (a write cut short): cutting the segment there", p, off);
		if (ftruncate(fd, (off_t)off))
			s->host->log(SRT_LOG_WARN, NAME, "%s: cannot cut: %s", p, strerror(errno));
		s->segs[s->nsegs - 1].size = off;
	}
	close(fd);
	return rc;
}

static int scan(struct seg_store *s, char *why, size_t why_len)
{
	DIR *d = opendir(s->dir);
	if (!d) {
		snprintf(why, why_len, "%s: cannot open directory: %s", s->dir, strerror(errno));
		return SRT_EIO;
	}
	uint64_t *ids = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	for (struct dirent *e; (e = readdir(d));) {
		char *end;
		if (strlen(e->d_name) != 20 || strcmp(e->d_name + 16, ".log"))
			continue;
		errno = 0;
		uint64_t id = strtoull(e->d_name, &end, 16);
		if (errno || end != e->d_name + 16 || !id)
			continue;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 64;
			uint64_t *x = realloc(ids, nc * sizeof(*x));
			if (!x) {
				rc = SRT_ENOMEM;
				break;
			}
			ids = x;
			cap = nc;
		}
		ids[n++] = id;
	}
	closedir(d);
	if (n)
		qsort(ids, n, sizeof(*ids), cmp_u64);
	for (size_t i = 0; i < n && !rc; i++)
		rc = scan_one(s, ids[i]);
	free(ids);
	if (rc)
		snprintf(why, why_len, "out of memory indexing %s", s->dir);
	return rc;
}

static int evict_locked(struct seg_store *s, char *dels, size_t *ndel, size_t cap);

int seg_open(const struct srt_host *host, const char *root, uint64_t max_bytes, int do_fsync,
	     uint64_t seg_bytes, struct seg_store **out, char *why, size_t why_len)
{
	struct seg_store *s = calloc(1, sizeof(*s));
	size_t dl = strlen(root) + 5;
	if (!s || !(s->dir = malloc(dl))) {
		free(s);
		snprintf(why, why_len, "out of memory");
		return SRT_ENOMEM;
	}
	snprintf(s->dir, dl, "%s/seg", root);
	s->host = host;
	s->max_bytes = max_bytes;
	s->do_fsync = do_fsync;
	s->seg_bytes = seg_bytes;
	s->fd = s->lock_fd = -1;
	pthread_mutex_init(&s->wmu, NULL);
	pthread_mutex_init(&s->mu, NULL);
	pthread_rwlock_init(&s->fdlock, NULL);
	int rc = SRT_EIO;
	if (mkdir(s->dir, 0755) && errno != EEXIST) {
		snprintf(why, why_len, "%s: cannot create directory: %s", s->dir, strerror(errno));
		goto fail;
	}
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/lock", s->dir);
	s->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->lock_fd < 0) /* a read-only store: reads work, puts fail with the reason */
		s->lock_fd = open(p, O_RDONLY | O_CLOEXEC);
	if (s->lock_fd < 0) {
		snprintf(why, why_len, "%s: cannot open: %s", p, strerror(errno));
		goto fail;
	}
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB)) {
		snprintf(why, why_len, "%s: the store is in use by another process (layout = segments "
			 "serves one process at a time; use layout = files to share a directory)", s->dir);
		goto fail;
	}
	if ((rc = grow(s))) {
		snprintf(why, why_len, "out of memory");
		goto fail;
	}
	if ((rc = scan(s, why, why_len)))
		goto fail;
	/* the first write begins a new segment (so that a read-only store still opens) */
	char dels[64 * HDR];
	size_t nd = 0;
	while (evict_locked(s, dels, &nd, sizeof(dels) / HDR) && !append(s, dels, nd * HDR, 1))
		nd = 0;
	if (nd)
		append(s, dels, nd * HDR, 1);
	reclaim(s);
	host->log(SRT_LOG_INFO, NAME, "%s: %zu objects, %" PRIu64 " bytes in %zu segments", s->dir,
		  s->n, s->bytes, s->nsegs);
	*out = s;
	return 0;
fail:
	seg_close(s);
	return rc;
}

void seg_close(struct seg_store *s)
{
	if (!s)
		return;
	for (struct ent *e = s->head, *nx; e; e = nx) {
		nx = e->next;
		free(e);
	}
	free(s->b);
	for (size_t i = 0; i < s->nsegs; i++)
		if (s->segs[i].rfd >= 0)
			close(s->segs[i].rfd);
	free(s->segs);
	pthread_rwlock_destroy(&s->fdlock);
	if (s->fd >= 0)
		close(s->fd);
	if (s->lock_fd >= 0)
		close(s->lock_fd); /* releases the flock */
	pthread_mutex_destroy(&s->wmu);
	pthread_mutex_destroy(&s->mu);
	free(s->dir);
	free(s);
}

/* --- methods -------------------------------------------------------------------------------- */

int seg_exists(struct seg_store *s, const struct srt_key *keys, uint32_t n, uint32_t *n_present)
{
	uint32_t i = 0;
	pthread_mutex_lock(&s->mu);
	while (i < n && find(s, &keys[i]))
		i++;
	pthread_mutex_unlock(&s->mu);
	*n_present = i;
	return 0;
}

/* One object of a get batch, located under mu. */
struct gitem {
	uint64_t seg, off;
	uint32_t len, i; /* object length; index in the batch */
	int fd;
};

static int cmp_gitem(const void *a, const void *b)
{
	const struct gitem *x = a, *y = b;
	if (x->seg != y->seg)
		return x->seg < y->seg ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

#define GET_GAP (64u << 10)  /* objects this close in one segment are read in one pread */
#define GET_SPAN (4u << 20)  /* bytes per coalesced read at most */

/*
 * Fetch a batch: every object is located under mu (and the read descriptors pinned with
 * fdlock for the whole batch), then read outside it, sorted by segment and offset, neighbours
 * (objects a batch wrote together usually are) in one pread each.
 */
int seg_get(struct seg_store *s, const struct srt_key *keys, uint32_t n, void *const *bufs,
	    const size_t *caps, size_t *lens)
{
	char touch32[32 * HDR];
	char *touches = n > 32 ? malloc((size_t)n * HDR) : NULL; /* one record per hit */
	size_t nt = 0, tcap = touches ? n : 32;
	if (!touches)
		touches = touch32;
	struct gitem one[1];
	struct gitem *it = n > 1 ? malloc((size_t)n * sizeof(*it)) : one;
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++)
		lens[i] = 0;
	if (!it) { /* no memory for the batch: one by one */
		for (uint32_t i = 0; i < n; i++)
			seg_get(s, &keys[i], 1, &bufs[i], &caps[i], &lens[i]);
		if (touches != touch32)
			free(touches);
		return 0;
	}
	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < n; i++) {
		struct ent *e = find(s, &keys[i]);
		if (!e)
			continue;
		lru_unlink(s, e);
		lru_front(s, e);
		struct seg *g = e->len <= caps[i] ? seg_of(s, e->seg) : NULL;
		if (g && g->rfd < 0) {
			char p[PATH_MAX];
			seg_path(s, e->seg, p, sizeof(p));
			g->rfd = open(p, O_RDONLY | O_CLOEXEC);
		}
		if (!g || g->rfd < 0)
			continue;
		it[k++] = (struct gitem){.seg = e->seg, .off = e->off, .len = e->len, .i = i,
					 .fd = g->rfd};
	}
	if (k)
		pthread_rwlock_rdlock(&s->fdlock); /* before mu is released: see reclaim */
	pthread_mutex_unlock(&s->mu);
	if (k > 1)
		qsort(it, k, sizeof(*it), cmp_gitem);
	uint8_t *span = NULL;
	size_t span_cap = 0;
	for (uint32_t a = 0; a < k;) {
		/* the run [a, b): one segment, gaps of at most GET_GAP, at most GET_SPAN bytes */
		uint32_t b = a + 1;
		uint64_t lo = it[a].off, hi = it[a].off + it[a].len;
		while (b < k && it[b].seg == it[a].seg && it[b].off >= hi &&
		       it[b].off <= hi + GET_GAP && it[b].off + it[b].len - lo <= GET_SPAN) {
			hi = it[b].off + it[b].len;
			b++;
		}
		int ok = 1;
		const uint8_t *src = NULL;
		errno = 0;
		if (b == a + 1) { /* one object: straight into its buffer */
			ssize_t got = pread(it[a].fd, bufs[it[a].i], it[a].len, (off_t)lo);
			ok = got == (ssize_t)it[a].len;
		} else {
			if (hi - lo > span_cap) {
				uint8_t *ns = realloc(span, hi - lo);
				if (ns) {
					span = ns;
					span_cap = hi - lo;
				}
			}
			ok = hi - lo <= span_cap &&
			     pread(it[a].fd, span, hi - lo, (off_t)lo) == (ssize_t)(hi - lo);
			src = span;
		}
		if (!ok) {
			char p[PATH_MAX];
			seg_path(s, it[a].seg, p, sizeof(p));
			s->host->log(SRT_LOG_WARN, NAME, "get from %s at %" PRIu64 " (%u objects): %s",
				     p, lo, b - a, errno ? strerror(errno) : "short read");
			a = b;
			continue;
		}
		for (uint32_t j = a; j < b; j++) {
			uint32_t i = it[j].i;
			if (src)
				memcpy(bufs[i], src + (it[j].off - lo), it[j].len);
			lens[i] = it[j].len;
			if (nt < tcap) /* recency survives a restart; not synced: only an order */
				put_rec(touches + HDR * nt++, R_TOUCH, &keys[i], 0);
		}
		a = b;
	}
	if (k)
		pthread_rwlock_unlock(&s->fdlock);
	free(span);
	if (it != one)
		free(it);
	/* recency records wait for no put: skipped while a put holds the write path; one
	 * append for the whole batch */
	if (nt && !pthread_mutex_trylock(&s->wmu)) {
		pthread_mutex_lock(&s->mu);
		if (s->fd >= 0)
			append(s, touches, nt * HDR, 0);
		pthread_mutex_unlock(&s->mu);
		pthread_mutex_unlock(&s->wmu);
	}
	if (touches != touch32)
		free(touches);
	return 0;
}

/* Evict LRU objects beyond max_bytes, writing DEL records into dels (up to cap); under mu.
 * Returns 1 when the buffer filled before the bound was met. */
static int evict_locked(struct seg_store *s, char *dels, size_t *ndel, size_t cap)
{
	while (s->bytes > s->max_bytes && s->tail) {
		if (*ndel == cap)
			return 1;
		put_rec(dels + HDR * (*ndel)++, R_DEL, &s->tail->key, 0);
		drop(s, s->tail);
	}
	return 0;
}

/* Copy the live objects of the oldest segment to the head so it can go; under wmu and mu. */
static void compact(struct seg_store *s)
{
	if (s->nsegs < 3)
		return;
	uint64_t disk = 0;
	for (size_t i = 0; i < s->nsegs; i++)
		disk += s->segs[i].size;
	if (disk <= 2 * s->bytes + 2 * s->seg_bytes)
		return;
	struct seg old = s->segs[0];
	char p[PATH_MAX];
	seg_path(s, old.id, p, sizeof(p));
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	size_t cap = (size_t)old.lbytes + old.live * HDR, n = 0;
	uint8_t *buf = malloc(cap ? cap : 1);
	struct ent **moved = calloc(old.live ? old.live : 1, sizeof(*moved));
	size_t nm = 0;
	if (buf && moved) {
		/* least recent first, so that a later open rebuilds the same order */
		for (struct ent *e = s->tail; e && nm < old.live; e = e->prev) {
			if (e->seg != old.id)
				continue;
			put_rec(buf + n, R_PUT, &e->key, e->len);
			if (pread(fd, buf + n + HDR, e->len, (off_t)e->off) != (ssize_t)e->len)
				goto out;
			moved[nm++] = e;
			n += HDR + e->len;
		}
		struct seg *cur = &s->segs[s->nsegs - 1];
		uint64_t at = cur->size;
		if (nm && !append(s, buf, n, 1)) {
			/* repoint the moved objects; LRU order is kept */
			uint64_t off = at;
			for (size_t i = 0; i < nm; i++) {
				struct ent *e = moved[i];
				s->segs[0].live--;
				s->segs[0].lbytes -= e->len;
				cur = &s->segs[s->nsegs - 1];
				cur->live++;
				cur->lbytes += e->len;
				e->seg = cur->id;
				e->off = off + HDR;
				off += HDR + e->len;
			}
			reclaim(s);
		}
	}
out:
	close(fd);
	free(buf);
	free(moved);
}

int seg_put(struct seg_store *s, const struct srt_key *keys, uint32_t n, const void *const *bufs,
	    const size_t *lens)
{
	size_t total = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (lens[i] > s->max_bytes || lens[i] > MAX_LEN) {
			s->host->log(SRT_LOG_WARN, NAME, "put: object of %zu bytes exceeds max_bytes %"
				     PRIu64, lens[i], s->max_bytes);
			return SRT_ENOSPC;
		}
		total += HDR + lens[i];
	}
	uint8_t *buf = malloc(total ? total : 1);
	if (!buf)
		return SRT_ENOMEM;
	size_t off = 0;
	for (uint32_t i = 0; i < n; i++) {
		put_rec(buf + off, R_PUT, &keys[i], (uint32_t)lens[i]);
		memcpy(buf + off + HDR, bufs[i], lens[i]);
		off += HDR + lens[i];
	}
	pthread_mutex_lock(&s->wmu);
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	int e = 0;
	if (s->fd < 0 || (s->segs[s->nsegs - 1].size &&
			  s->segs[s->nsegs - 1].size + total > s->seg_bytes))
		e = roll(s) ? (s->roll_errno ? s->roll_errno : ENOMEM) : 0;
	uint64_t at = e ? 0 : s->segs[s->nsegs - 1].size, id = e ? 0 : s->segs[s->nsegs - 1].id;
	pthread_mutex_unlock(&s->mu);
	if (!e)
		e = append(s, buf, total, 1); /* the data, synced, before it is indexed */
	free(buf);
	pthread_mutex_lock(&s->mu);
	if (!rc && e) {
		rc = errno_code(e);
		if (s->fail_run++ == 0)
			s->host->log(SRT_LOG_ERROR, NAME, "put: append to %s failed: %s (further "
				     "failures of this run are counted)", s->dir, strerror(e));
		else if (s->fail_run % 1000 == 0)
			s->host->log(SRT_LOG_ERROR, NAME, "%" PRIu64 " puts failed in a row (last: %s)",
				     s->fail_run, strerror(e));
	}
	if (!rc) {
		if (s->fail_run) {
			s->host->log(SRT_LOG_WARN, NAME, "puts succeed again after %" PRIu64 " failed",
				     s->fail_run);
			s->fail_run = 0;
		}
		off = 0;
		for (uint32_t i = 0; i < n && !rc; i++) {
			rc = index_put(s, &keys[i], id, at + off + HDR, (uint32_t)lens[i]);
			off += HDR + lens[i];
		}
		char dels[64 * HDR];
		size_t nd = 0;
		while (evict_locked(s, dels, &nd, 64) && !append(s, dels, nd * HDR, 0))
			nd = 0;
		if (nd)
			append(s, dels, nd * HDR, 0);
		reclaim(s);
		compact(s);
	}
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_unlock(&s->wmu);
	return rc;
}

int seg_remove(struct seg_store *s, const struct srt_key *keys, uint32_t n)
{
	char dels[64 * HDR];
	size_t nd = 0;
	int rc = 0;
	pthread_mutex_lock(&s->wmu);
	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < n; i++) {
		struct ent *e = find(s, &keys[i]);
		if (!e)
			continue;
		if (nd == 64) {
			int x = append(s, dels, nd * HDR, 0);
			rc = rc ? rc : (x ? errno_code(x) : 0);
			nd = 0;
		}
		put_rec(dels + HDR * nd++, R_DEL, &keys[i], 0);
		drop(s, e);
	}
	if (nd) {
		int x = append(s, dels, nd * HDR, 0);
		rc = rc ? rc : (x ? errno_code(x) : 0);
	}
	reclaim(s);
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_unlock(&s->wmu);
	return rc;
}

int seg_usage(struct seg_store *s, uint64_t *bytes, uint64_t *objects)
{
	pthread_mutex_lock(&s->mu);
	*bytes = s->bytes;
	*objects = s->n;
	pthread_mutex_unlock(&s->mu);
	return 0;
}
