/*
 * Tier plugin "sqlite": an L3 keyed store in one SQLite database (option `path`, the file).
 *
 * Schema (layout 1):
 *   pages(key BLOB PRIMARY KEY (32 bytes), data BLOB, size INTEGER, atime INTEGER)
 *   an index on atime, and a one-row table usage(bytes, objects) kept exact by triggers, so the
 *   size bound holds even when several processes share the file.
 * The database runs in WAL mode with synchronous=NORMAL: each put batch is one transaction, so
 * a crash loses at most the batch being written and never leaves a partial object. `atime` is a
 * counter (max + 1 per access) that orders the LRU; a get bumps it for its hits.
 *
 * Options: path (required), max_bytes (default unlimited: bytes of object data), busy_timeout_ms
 * (default 5000: how long a call waits for another process's write lock), cache_mib (default
 * 64: SQLite's page cache per connection, two connections).
 *
 * Errors: SQLITE_FULL -> SRT_ENOSPC; every other failure (read-only file, I/O error, lock
 * timeout) -> SRT_EIO; each is logged with the database path and SQLite's message.
 * Thread safety: two connections per instance: one for writes (put, remove, and the recency bump
 * of a get) and one for reads (exists, and a get's SELECTs), each under its own mutex, so lookups
 * (WAL readers) never wait behind a batch being written. A get skips the recency bump when a
 * write holds the write connection (recency is best effort under concurrent writes).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include <shadowrt/plugin.h>
#include <shadowrt/tier.h>

#define NAME "sqlite"

enum { ST_EXISTS, ST_GET, ST_TOUCH, ST_PUT, ST_DEL, ST_USAGE, ST_OLDEST, ST_BEGIN, ST_COMMIT,
       ST_ROLLBACK, ST_MAXATIME, N_ST };

static const char *const sql_text[N_ST] = {
	[ST_EXISTS] = "SELECT 1 FROM pages WHERE key = ?1",
	[ST_GET] = "SELECT data FROM pages WHERE key = ?1",
	[ST_TOUCH] = "UPDATE pages SET atime = ?2 WHERE key = ?1",
	[ST_PUT] = "INSERT OR REPLACE INTO pages(key, data, size, atime) VALUES (?1, ?2, ?3, ?4)",
	[ST_DEL] = "DELETE FROM pages WHERE key = ?1",
	[ST_USAGE] = "SELECT bytes, objects FROM usage",
	[ST_OLDEST] = "SELECT key FROM pages ORDER BY atime LIMIT 16",
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_MAXATIME] = "SELECT coalesce(max(atime), 0) FROM pages",
};

static const char schema[] =
	"CREATE TABLE IF NOT EXISTS pages(key BLOB PRIMARY KEY, data BLOB NOT NULL,"
	" size INTEGER NOT NULL, atime INTEGER NOT NULL);"
	"CREATE INDEX IF NOT EXISTS pages_atime ON pages(atime);"
	"CREATE TABLE IF NOT EXISTS usage(bytes INTEGER NOT NULL, objects INTEGER NOT NULL);"
	"INSERT INTO usage SELECT 0, 0 WHERE NOT EXISTS (SELECT 1 FROM usage);"
	"CREATE TRIGGER IF NOT EXISTS pages_ins AFTER INSERT ON pages BEGIN"
	" UPDATE usage SET bytes = bytes + new.size, objects = objects + 1; END;"
	"CREATE TRIGGER IF NOT EXISTS pages_del AFTER DELETE ON pages BEGIN"
	" UPDATE usage SET bytes = bytes - old.size, objects = objects - 1; END;"
	"PRAGMA user_version = 1;";

struct sq_store {
	const struct srt_host *host;
	char *path;
	sqlite3 *db;
	sqlite3_stmt *st[N_ST];
	sqlite3 *rdb;               /* reads */
	sqlite3_stmt *rexists, *rget;
	pthread_mutex_t rmu;
	uint64_t max_bytes;
	int64_t clock; /* last atime handed out */
	pthread_mutex_t mu;
};

static int fail_on(struct sq_store *s, sqlite3 *db, const char *what, int rc)
{
	int e = sqlite3_system_errno(db);
	s->host->log(SRT_LOG_ERROR, NAME, "%s: %s: %s (sqlite code %d%s%s)", s->path, what,
		     sqlite3_errmsg(db), rc, e ? ", " : "", e ? strerror(e) : "");
	if ((rc & 0xff) == SQLITE_FULL || e == ENOSPC || e == EDQUOT || e == EFBIG)
		return SRT_ENOSPC;
	return SRT_EIO;
}

static int fail(struct sq_store *s, const char *what, int rc)
{
	return fail_on(s, s->db, what, rc);
}

/* Run a statement that returns no rows; reset it. SQLITE_DONE -> 0. */
static int step_done(struct sq_store *s, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	if (rc == SQLITE_DONE)
		return 0;
	return fail(s, what, rc);
}

static void rollback(struct sq_store *s)
{
	sqlite3_step(s->st[ST_ROLLBACK]);
	sqlite3_reset(s->st[ST_ROLLBACK]);
}

static const char *opt(const struct srt_plugin_args *a, const char *key)
{
	return a->option ? a->option(a->option_ctx, key) : NULL;
}

static void sq_destroy(void *inst)
{
	struct sq_store *s = inst;
	if (!s)
		return;
	for (int i = 0; i < N_ST; i++)
		sqlite3_finalize(s->st[i]);
	sqlite3_finalize(s->rexists);
	sqlite3_finalize(s->rget);
	sqlite3_close(s->rdb);
	sqlite3_close(s->db);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->rmu);
	free(s->path);
	free(s);
}

static int parse_u64(const char *v, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-')
		return -1;
	*out = x;
	return 0;
}

static int sq_create(const struct srt_host *host, const struct srt_plugin_args *args,
		     void **instance, char *why, size_t why_len)
{
	const char *path = opt(args, "path"), *v;
	uint64_t busy_ms = 5000, cache_mib = 64;
	char *err = NULL;
	char pragma[96];
	int rc;

	if (!path || !*path) {
		snprintf(why, why_len, "option path is required (the database file)");
		return SRT_EINVAL;
	}
	struct sq_store *s = calloc(1, sizeof(*s));
	if (!s || !(s->path = strdup(path))) {
		free(s);
		snprintf(why, why_len, "out of memory");
		return SRT_ENOMEM;
	}
	s->host = host;
	s->max_bytes = UINT64_MAX;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->rmu, NULL);
	if ((v = opt(args, "max_bytes")) && (parse_u64(v, &s->max_bytes) || !s->max_bytes)) {
		snprintf(why, why_len, "option max_bytes = '%s': expected a positive byte count", v);
		rc = SRT_EINVAL;
		goto fail;
	}
	if ((v = opt(args, "busy_timeout_ms")) && (parse_u64(v, &busy_ms) || busy_ms > INT32_MAX)) {
		snprintf(why, why_len, "option busy_timeout_ms = '%s': expected milliseconds", v);
		rc = SRT_EINVAL;
		goto fail;
	}
	if ((v = opt(args, "cache_mib")) &&
	    (parse_u64(v, &cache_mib) || !cache_mib || cache_mib > 65536)) {
		snprintf(why, why_len, "option cache_mib = '%s': expected MiB from 1 to 65536", v);
		rc = SRT_EINVAL;
		goto fail;
	}
	/* page cache per connection: the B-tree of random (hash) keys is touched all over, and
	 * SQLite's default 2 MiB made every batch re-read its pages through read(2) */
	snprintf(pragma, sizeof(pragma), "PRAGMA cache_size=-%" PRIu64 ";", cache_mib * 1024);
	rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				 SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		snprintf(why, why_len, "%s: cannot open database: %s", path,
			 s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
		rc = SRT_EIO;
		goto fail;
	}
	sqlite3_extended_result_codes(s->db, 1);
	sqlite3_busy_timeout(s->db, (int)busy_ms);
	/* journal_mode returns a row; exec ignores it. */
	if (sqlite3_exec(s->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL,
			 &err) != SQLITE_OK ||
	    sqlite3_exec(s->db, pragma, NULL, NULL, &err) != SQLITE_OK ||
	    sqlite3_exec(s->db, schema, NULL, NULL, &err) != SQLITE_OK) {
		snprintf(why, why_len, "%s: cannot set up the database: %s", path,
			 err ? err : sqlite3_errmsg(s->db));
		sqlite3_free(err);
		rc = SRT_EIO;
		goto fail;
	}
	for (int i = 0; i < N_ST; i++)
		if (sqlite3_prepare_v2(s->db, sql_text[i], -1, &s->st[i], NULL) != SQLITE_OK) {
			snprintf(why, why_len, "%s: preparing \"%s\": %s", path, sql_text[i],
				 sqlite3_errmsg(s->db));
			rc = SRT_EIO;
			goto fail;
		}
	/* the read connection (after the schema exists) */
	rc = sqlite3_open_v2(path, &s->rdb, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK || sqlite3_prepare_v2(s->rdb, sql_text[ST_EXISTS], -1, &s->rexists,
						  NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(s->rdb, sql_text[ST_GET], -1, &s->rget, NULL) != SQLITE_OK) {
		snprintf(why, why_len, "%s: cannot open a read connection: %s", path,
			 s->rdb ? sqlite3_errmsg(s->rdb) : sqlite3_errstr(rc));
		rc = SRT_EIO;
		goto fail;
	}
	sqlite3_extended_result_codes(s->rdb, 1);
	sqlite3_busy_timeout(s->rdb, (int)busy_ms);
	if (sqlite3_exec(s->rdb, pragma, NULL, NULL, &err) != SQLITE_OK) {
		snprintf(why, why_len, "%s: cannot set up the read connection: %s", path,
			 err ? err : sqlite3_errmsg(s->rdb));
		sqlite3_free(err);
		rc = SRT_EIO;
		goto fail;
	}
	if (sqlite3_step(s->st[ST_MAXATIME]) == SQLITE_ROW)
		s->clock = sqlite3_column_int64(s->st[ST_MAXATIME], 0);
	sqlite3_reset(s->st[ST_MAXATIME]);
	*instance = s;
	return 0;
fail:
	sq_destroy(s);
	return rc;
}

static int sq_exists(void *inst, const struct srt_key *keys, uint32_t n, uint32_t *n_present)
{
	struct sq_store *s = inst;
	sqlite3_stmt *st = s->rexists;
	int rc = 0;
	uint32_t i = 0;

	pthread_mutex_lock(&s->rmu);
	for (; i < n; i++) {
		sqlite3_bind_blob(st, 1, keys[i].b, SRT_KEY_BYTES, SQLITE_STATIC);
		int r = sqlite3_step(st);
		sqlite3_reset(st);
		if (r == SQLITE_DONE)
			break;
		if (r != SQLITE_ROW) {
			rc = fail_on(s, s->rdb, "exists", r);
			i = 0;
			break;
		}
	}
	pthread_mutex_unlock(&s->rmu);
	*n_present = i;
	return rc;
}

static int sq_get(void *inst, const struct srt_key *keys, uint32_t n, void *const *bufs,
		  const size_t *caps, size_t *lens)
{
	struct sq_store *s = inst;
	sqlite3_stmt *st = s->rget, *touch = s->st[ST_TOUCH];
	int rc = 0;

	for (uint32_t i = 0; i < n; i++)
		lens[i] = 0;
	pthread_mutex_lock(&s->rmu);
	for (uint32_t i = 0; i < n; i++) {
		sqlite3_bind_blob(st, 1, keys[i].b, SRT_KEY_BYTES, SQLITE_STATIC);
		int r = sqlite3_step(st);
		if (r == SQLITE_ROW) {
			size_t len = (size_t)sqlite3_column_bytes(st, 0);
			if (len <= caps[i]) {
				memcpy(bufs[i], sqlite3_column_blob(st, 0), len);
				lens[i] = len;
			}
		}
		sqlite3_reset(st);
		if (r != SQLITE_ROW && r != SQLITE_DONE) {
			rc = fail_on(s, s->rdb, "get", r);
			break;
		}
	}
	pthread_mutex_unlock(&s->rmu);
	if (rc) {
		for (uint32_t i = 0; i < n; i++)
			lens[i] = 0;
		return rc;
	}
	/* recency of the hits, in one write transaction, unless a write holds the connection */
	if (pthread_mutex_trylock(&s->mu))
		return 0;
	if (!step_done(s, s->st[ST_BEGIN], "get: begin")) {
		int trc = 0;
		for (uint32_t i = 0; i < n && !trc; i++) {
			if (!lens[i])
				continue;
			sqlite3_bind_blob(touch, 1, keys[i].b, SRT_KEY_BYTES, SQLITE_STATIC);
			sqlite3_bind_int64(touch, 2, ++s->clock);
			trc = step_done(s, touch, "get: update atime");
		}
		if (trc || step_done(s, s->st[ST_COMMIT], "get: commit"))
			rollback(s); /* the reads happened; only the recency update was lost */
	}
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* Delete least recently used rows until the data fits max_bytes. In a transaction. */
static int evict(struct sq_store *s)
{
	sqlite3_stmt *u = s->st[ST_USAGE], *old = s->st[ST_OLDEST], *del = s->st[ST_DEL];
	for (;;) {
		int r = sqlite3_step(u);
		uint64_t bytes = r == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(u, 0) : 0;
		sqlite3_reset(u);
		if (r != SQLITE_ROW)
			return fail(s, "evict: read usage", r);
		if (bytes <= s->max_bytes)
			return 0;
		/* Collect a few oldest keys, then delete them (the cursor must not outlive a write). */
		struct srt_key victims[16];
		int nv = 0;
		while ((r = sqlite3_step(old)) == SQLITE_ROW && nv < 16) {
			if (sqlite3_column_bytes(old, 0) == SRT_KEY_BYTES)
				memcpy(victims[nv].b, sqlite3_column_blob(old, 0), SRT_KEY_BYTES);
			else
				memset(victims[nv].b, 0, SRT_KEY_BYTES);
			nv++;
		}
		sqlite3_reset(old);
		if (r != SQLITE_ROW && r != SQLITE_DONE)
			return fail(s, "evict: oldest", r);
		if (!nv)
			return 0;
		/* Delete one at a time, re-checking usage, so no more than needed goes. */
		for (int i = 0; i < nv; i++) {
			sqlite3_bind_blob(del, 1, victims[i].b, SRT_KEY_BYTES, SQLITE_STATIC);
			int rc = step_done(s, del, "evict: delete");
			if (rc)
				return rc;
			r = sqlite3_step(u);
			bytes = r == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(u, 0) : 0;
			sqlite3_reset(u);
			if (r != SQLITE_ROW)
				return fail(s, "evict: read usage", r);
			if (bytes <= s->max_bytes)
				return 0;
		}
	}
}

static int sq_put(void *inst, const struct srt_key *keys, uint32_t n, const void *const *bufs,
		  const size_t *lens)
{
	struct sq_store *s = inst;
	sqlite3_stmt *put = s->st[ST_PUT], *del = s->st[ST_DEL];
	int rc;

	for (uint32_t i = 0; i < n; i++)
		if (lens[i] > s->max_bytes || lens[i] > INT32_MAX) {
			s->host->log(SRT_LOG_WARN, NAME, "put: object of %zu bytes exceeds max_bytes %" PRIu64,
				     lens[i], s->max_bytes);
			return SRT_ENOSPC;
		}
	pthread_mutex_lock(&s->mu);
	if ((rc = step_done(s, s->st[ST_BEGIN], "put: begin")))
		goto out;
	for (uint32_t i = 0; i < n && !rc; i++) {
		/* Delete first so the usage triggers see a replaced object's old size leave. */
		sqlite3_bind_blob(del, 1, keys[i].b, SRT_KEY_BYTES, SQLITE_STATIC);
		if ((rc = step_done(s, del, "put: replace")))
			break;
		sqlite3_bind_blob(put, 1, keys[i].b, SRT_KEY_BYTES, SQLITE_STATIC);
		sqlite3_bind_blob(put, 2, bufs[i], (int)lens[i], SQLITE_STATIC);
		sqlite3_bind_int64(put, 3, (sqlite3_int64)lens[i]);
		sqlite3_bind_int64(put, 4, ++s->clock);
		rc = step_done(s, put, "put: insert");
		sqlite3_clear_bindings(put);
	}
	if (!rc)
		rc = evict(s);
	if (!rc)
		rc = step_done(s, s->st[ST_COMMIT], "put: commit");
	if (rc)
		rollback(s);
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static int sq_remove(void *inst, const struct srt_key *keys, uint32_t n)
{
	struct sq_store *s = inst;
	sqlite3_stmt *del = s->st[ST_DEL];
	int rc;

	pthread_mutex_lock(&s->mu);
	if ((rc = step_done(s, s->st[ST_BEGIN], "remove: begin")))
		goto out;
	for (uint32_t i = 0; i < n && !rc; i++) {
		sqlite3_bind_blob(del, 1, keys[i].b, SRT_KEY_BYTES, SQLITE_STATIC);
		rc = step_done(s, del, "remove");
	}
	if (!rc)
		rc = step_done(s, s->st[ST_COMMIT], "remove: commit");
	if (rc)
		rollback(s);
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static int sq_usage(void *inst, uint64_t *bytes, uint64_t *objects)
{
	struct sq_store *s = inst;
	sqlite3_stmt *u = s->st[ST_USAGE];
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	int r = sqlite3_step(u);
	if (r == SQLITE_ROW) {
		*bytes = (uint64_t)sqlite3_column_int64(u, 0);
		*objects = (uint64_t)sqlite3_column_int64(u, 1);
	} else {
		*bytes = *objects = 0;
		rc = fail(s, "usage", r);
	}
	sqlite3_reset(u);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static int sq_probe(const struct srt_host *host, char *why, size_t why_len)
{
	(void)host;
	if (!sqlite3_threadsafe()) {
		snprintf(why, why_len, "libsqlite3 %s was built without thread support",
			 sqlite3_libversion());
		return SRT_ENOTSUP;
	}
	return 0;
}

static const struct srt_tier_vtable vtable = {
	.struct_size = sizeof(struct srt_tier_vtable),
	.exists = sq_exists,
	.get = sq_get,
	.put = sq_put,
	.remove = sq_remove,
	.usage = sq_usage,
};

/* Options read from the plugin's runtime-config section (srt_plugin_desc.options). */
static const struct srt_plugin_option sqlite_options[] = {
	{"path", "path", NULL, "database file (required)"},
	{"max_bytes", "size", NULL, "LRU bound of the store (set from [tier.l3] budget)"},
	{"busy_timeout_ms", "int", "5000", "SQLite busy timeout"},
	{"cache_mib", "int", "64", "SQLite page cache per connection (MiB; two connections)"},
	{NULL, NULL, NULL, NULL},
};

static const struct srt_plugin_desc desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_TIER,
	.name = NAME,
	.version = "1.0",
	.description = "L3 store in one SQLite database (WAL, one transaction per batch), size-bounded LRU",
	.caps = SRT_CAP_CPU | SRT_CAP_KEYED_STORE,
	.probe = sq_probe,
	.create = sq_create,
	.destroy = sq_destroy,
	.vtable = &vtable,
	.options = sqlite_options,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &desc;
}
