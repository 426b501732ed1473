/*
 * Tier plugin "redis": an L3 keyed store on a Redis server, shared by every machine that uses
 * the same server and prefix.
 *
 * Objects are Redis strings named <prefix><64 hex digits of the key>. exists pipelines one
 * EXISTS per key and returns the longest present run; get is one MGET per chunk of keys; put
 * pipelines SET commands (each SET is atomic: a reader sees the old object or the whole new one);
 * remove is DEL. The size bound and LRU eviction are the server's (configure `maxmemory` and
 * `maxmemory-policy allkeys-lru` on it); a put the server refuses for memory is SRT_ENOSPC.
 *
 * Options: host (default 127.0.0.1), port (6379), db (0), timeout_ms (1000: connect and each
 * reply), prefix ("srt:"), password (none), require_server (no: a server that cannot be reached
 * at create is logged and treated as an outage; yes: create fails with SRT_EIO).
 *
 * A SET the server refuses (OOM under maxmemory, a read-only replica) fails the put; refusals come
 * in runs (a full server refuses every SET until memory is freed), so the first of a run is logged
 * with the server's message, then one line per 1000 more, and the first put that succeeds after
 * a run says how many were refused, as the file store does for a full disk.
 *
 * Connection loss (refused, reset, timed out) makes the call return SRT_EIO and log the reason;
 * the connection is dropped and the next call connects again. Thread safety: two connections per
 * instance, one for reads (exists, get) and one for writes (put, remove), each under its mutex,
 * so lookups do not wait behind a batch of writes.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include <shadowrt/plugin.h>
#include <shadowrt/tier.h>

#define NAME "redis"
#define CHUNK 128 /* keys per pipelined round trip */
#define MAX_PREFIX 64

struct rd_store {
	const struct srt_host *host;
	char host_name[256];
	int port, db;
	int timeout_ms;
	char prefix[MAX_PREFIX + 1];
	size_t prefix_len;
	char *password;
	/* two connections: reads (exists, get) never wait behind a pipeline of writes (put,
	 * remove), which the tier manager's writer thread sends while lookups go on */
	struct rd_conn {
		redisContext *c; /* NULL while disconnected */
		pthread_mutex_t mu;
	} rd, wr;
	uint64_t refused; /* SETs refused in a row (under wr.mu) */
};

#define REFUSED_LOG_EVERY 1000

static const char *opt(const struct srt_plugin_args *a, const char *key)
{
	return a->option ? a->option(a->option_ctx, key) : NULL;
}

static struct timeval tv_of(int ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	return tv;
}

/* Drop the connection after a transport error; always SRT_EIO. */
static int lost(struct rd_store *s, struct rd_conn *k, const char *what)
{
	s->host->log(SRT_LOG_ERROR, NAME, "redis %s:%d: %s: %s; will reconnect on the next call",
		     s->host_name, s->port, what, k->c && k->c->err ? k->c->errstr : "no reply");
	if (k->c)
		redisFree(k->c);
	k->c = NULL;
	return SRT_EIO;
}

/* Run one command on the fresh connection during setup; 0 or SRT_EIO with why. */
static int setup_cmd(struct rd_store *s, struct rd_conn *k, char *why, size_t why_len, const char *what,
		     const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	redisReply *r = redisvCommand(k->c, fmt, ap);
	va_end(ap);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		snprintf(why, why_len, "redis %s:%d: %s: %s", s->host_name, s->port, what,
			 r ? r->str : k->c->errstr);
		if (r)
			freeReplyObject(r);
		return SRT_EIO;
	}
	freeReplyObject(r);
	return 0;
}

/* Connect if disconnected; 0 or SRT_EIO with the reason in why (and logged by the caller). */
static int ensure(struct rd_store *s, struct rd_conn *k, char *why, size_t why_len)
{
	if (k->c)
		return 0;
	k->c = redisConnectWithTimeout(s->host_name, s->port, tv_of(s->timeout_ms));
	if (!k->c || k->c->err) {
		snprintf(why, why_len, "redis %s:%d: cannot connect: %s", s->host_name, s->port,
			 k->c ? k->c->errstr : "out of memory");
		goto fail;
	}
	if (redisSetTimeout(k->c, tv_of(s->timeout_ms)) != REDIS_OK) {
		snprintf(why, why_len, "redis %s:%d: cannot set the reply timeout", s->host_name, s->port);
		goto fail;
	}
	if (s->password && setup_cmd(s, k, why, why_len, "AUTH", "AUTH %s", s->password))
		goto fail;
	if (s->db && setup_cmd(s, k, why, why_len, "SELECT", "SELECT %d", s->db))
		goto fail;
	return 0;
fail:
	if (k->c)
		redisFree(k->c);
	k->c = NULL;
	return SRT_EIO;
}

static int connect_or_log(struct rd_store *s, struct rd_conn *k)
{
	char why[512];
	int rc = ensure(s, k, why, sizeof(why));
	if (rc)
		s->host->log(SRT_LOG_ERROR, NAME, "%s", why);
	return rc;
}

static void key_name(const struct rd_store *s, const struct srt_key *k, char *out)
{
	static const char d[] = "0123456789abcdef";
	memcpy(out, s->prefix, s->prefix_len);
	char *p = out + s->prefix_len;
	for (int i = 0; i < SRT_KEY_BYTES; i++) {
		*p++ = d[k->b[i] >> 4];
		*p++ = d[k->b[i] & 15];
	}
}

#define NAME_MAX_LEN (MAX_PREFIX + 2 * SRT_KEY_BYTES)

static void rd_destroy(void *inst)
{
	struct rd_store *s = inst;
	if (!s)
		return;
	struct rd_conn *ks[2] = {&s->rd, &s->wr};
	for (int i = 0; i < 2; i++) {
		if (ks[i]->c)
			redisFree(ks[i]->c);
		pthread_mutex_destroy(&ks[i]->mu);
	}
	free(s->password);
	free(s);
}

static int parse_int(const char *v, long lo, long hi, int *out)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi)
		return -1;
	*out = (int)x;
	return 0;
}

static int rd_create(const struct srt_host *host, const struct srt_plugin_args *args,
		     void **instance, char *why, size_t why_len)
{
	const char *v;
	int rc = SRT_EINVAL;
	struct rd_store *s = calloc(1, sizeof(*s));

	if (!s) {
		snprintf(why, why_len, "out of memory");
		return SRT_ENOMEM;
	}
	s->host = host;
	s->port = 6379;
	s->timeout_ms = 1000;
	pthread_mutex_init(&s->rd.mu, NULL);
	pthread_mutex_init(&s->wr.mu, NULL);
	v = opt(args, "host");
	if (v && strlen(v) >= sizeof(s->host_name)) {
		snprintf(why, why_len, "option host is too long");
		goto fail;
	}
	snprintf(s->host_name, sizeof(s->host_name), "%s", v ? v : "127.0.0.1");
	if ((v = opt(args, "port")) && parse_int(v, 1, 65535, &s->port)) {
		snprintf(why, why_len, "option port = '%s': expected 1..65535", v);
		goto fail;
	}
	if ((v = opt(args, "db")) && parse_int(v, 0, 1 << 20, &s->db)) {
		snprintf(why, why_len, "option db = '%s': expected a database number >= 0", v);
		goto fail;
	}
	if ((v = opt(args, "timeout_ms")) && parse_int(v, 1, 3600000, &s->timeout_ms)) {
		snprintf(why, why_len, "option timeout_ms = '%s': expected 1..3600000", v);
		goto fail;
	}
	v = opt(args, "prefix");
	if (v && strlen(v) > MAX_PREFIX) {
		snprintf(why, why_len, "option prefix is longer than %d bytes", MAX_PREFIX);
		goto fail;
	}
	snprintf(s->prefix, sizeof(s->prefix), "%s", v ? v : "srt:");
	s->prefix_len = strlen(s->prefix);
	if ((v = opt(args, "password")) && !(s->password = strdup(v))) {
		rc = SRT_ENOMEM;
		snprintf(why, why_len, "out of memory");
		goto fail;
	}
	v = opt(args, "require_server");
	int require = v && (!strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1"));
	if (v && !require && strcmp(v, "no") && strcmp(v, "off") && strcmp(v, "0")) {
		snprintf(why, why_len, "option require_server = '%s': expected yes or no", v);
		goto fail;
	}
	if ((rc = ensure(s, &s->rd, why, why_len))) {
		/* A shared store that is down when we start is an outage like any later one:
		 * calls fail with SRT_EIO until it is reachable (the tier manager retries). */
		if (rc != SRT_EIO || require)
			goto fail;
		host->log(SRT_LOG_WARN, NAME, "%s; starting without it, calls fail until it is "
			  "reachable (require_server = yes makes this fatal)", why);
	}
	*instance = s;
	return 0;
fail:
	rd_destroy(s);
	return rc;
}

static int rd_exists_once(void *inst, const struct srt_key *keys, uint32_t n, uint32_t *n_present)
{
	struct rd_store *s = inst;
	char name[NAME_MAX_LEN];
	uint32_t run = 0;
	int rc, done = 0;

	*n_present = 0;
	struct rd_conn *k = &s->rd;
	pthread_mutex_lock(&k->mu);
	if ((rc = connect_or_log(s, k)))
		goto out;
	for (uint32_t base = 0; base < n && !done; base += CHUNK) {
		uint32_t m = n - base < CHUNK ? n - base : CHUNK;
		for (uint32_t i = 0; i < m; i++) {
			key_name(s, &keys[base + i], name);
			redisAppendCommand(k->c, "EXISTS %b", name, s->prefix_len + 2 * SRT_KEY_BYTES);
		}
		for (uint32_t i = 0; i < m; i++) {
			redisReply *r = NULL;
			if (redisGetReply(k->c, (void **)&r) != REDIS_OK || !r) {
				rc = lost(s, k, "EXISTS");
				run = 0;
				goto out;
			}
			if (!done && r->type == REDIS_REPLY_INTEGER && r->integer == 1)
				run++;
			else
				done = 1;
			freeReplyObject(r);
		}
	}
	*n_present = run;
out:
	pthread_mutex_unlock(&k->mu);
	return rc;
}

static int rd_get_once(void *inst, const struct srt_key *keys, uint32_t n, void *const *bufs,
		  const size_t *caps, size_t *lens)
{
	struct rd_store *s = inst;
	char names[CHUNK][NAME_MAX_LEN];
	const char *argv[CHUNK + 1];
	size_t argl[CHUNK + 1];
	int rc;

	for (uint32_t i = 0; i < n; i++)
		lens[i] = 0;
	struct rd_conn *k = &s->rd;
	pthread_mutex_lock(&k->mu);
	if ((rc = connect_or_log(s, k)))
		goto out;
	argv[0] = "MGET";
	argl[0] = 4;
	for (uint32_t base = 0; base < n; base += CHUNK) {
		uint32_t m = n - base < CHUNK ? n - base : CHUNK;
		for (uint32_t i = 0; i < m; i++) {
			key_name(s, &keys[base + i], names[i]);
			argv[i + 1] = names[i];
			argl[i + 1] = s->prefix_len + 2 * SRT_KEY_BYTES;
		}
		redisReply *r = redisCommandArgv(k->c, (int)m + 1, argv, argl);
		if (!r) {
			rc = lost(s, k, "MGET");
			break;
		}
		if (r->type != REDIS_REPLY_ARRAY || r->elements != m) {
			s->host->log(SRT_LOG_ERROR, NAME, "redis %s:%d: MGET: unexpected reply%s%s",
				     s->host_name, s->port, r->type == REDIS_REPLY_ERROR ? ": " : "",
				     r->type == REDIS_REPLY_ERROR ? r->str : "");
			freeReplyObject(r);
			rc = SRT_EIO;
			break;
		}
		for (uint32_t i = 0; i < m; i++) {
			redisReply *e = r->element[i];
			if (e->type == REDIS_REPLY_STRING && e->len <= caps[base + i]) {
				memcpy(bufs[base + i], e->str, e->len);
				lens[base + i] = e->len;
			}
		}
		freeReplyObject(r);
	}
	if (rc)
		for (uint32_t i = 0; i < n; i++)
			lens[i] = 0;
out:
	pthread_mutex_unlock(&k->mu);
	return rc;
}

static int rd_put_once(void *inst, const struct srt_key *keys, uint32_t n, const void *const *bufs,
		  const size_t *lens)
{
	struct rd_store *s = inst;
	char name[NAME_MAX_LEN];
	int rc;

	struct rd_conn *k = &s->wr;
	pthread_mutex_lock(&k->mu);
	if ((rc = connect_or_log(s, k)))
		goto out;
	for (uint32_t base = 0; base < n && !rc; base += CHUNK) {
		uint32_t m = n - base < CHUNK ? n - base : CHUNK;
		for (uint32_t i = 0; i < m; i++) {
			key_name(s, &keys[base + i], name);
			redisAppendCommand(k->c, "SET %b %b", name, s->prefix_len + 2 * SRT_KEY_BYTES,
					   bufs[base + i], lens[base + i]);
		}
		for (uint32_t i = 0; i < m; i++) {
			redisReply *r = NULL;
			if (redisGetReply(k->c, (void **)&r) != REDIS_OK || !r) {
				rc = lost(s, k, "SET");
				goto out;
			}
			if (r->type == REDIS_REPLY_ERROR) {
				uint64_t k = ++s->refused;
				if (k == 1)
					s->host->log(SRT_LOG_ERROR, NAME, "redis %s:%d: SET refused: %s "
						     "(further refusals are counted, logged every %d)",
						     s->host_name, s->port, r->str, REFUSED_LOG_EVERY);
				else if (k % REFUSED_LOG_EVERY == 0)
					s->host->log(SRT_LOG_ERROR, NAME, "redis %s:%d: %" PRIu64 " SETs "
						     "refused in a row (last: %s)", s->host_name, s->port,
						     k, r->str);
				if (!rc)
					rc = !strncmp(r->str, "OOM", 3) ? SRT_ENOSPC : SRT_EIO;
			}
			freeReplyObject(r);
		}
	}
	if (!rc && n && s->refused) {
		s->host->log(SRT_LOG_WARN, NAME, "redis %s:%d: SETs succeed again after %" PRIu64
			     " refused", s->host_name, s->port, s->refused);
		s->refused = 0;
	}
out:
	pthread_mutex_unlock(&k->mu);
	return rc;
}

static int rd_remove_once(void *inst, const struct srt_key *keys, uint32_t n)
{
	struct rd_store *s = inst;
	char names[CHUNK][NAME_MAX_LEN];
	const char *argv[CHUNK + 1];
	size_t argl[CHUNK + 1];
	int rc;

	struct rd_conn *k = &s->wr;
	pthread_mutex_lock(&k->mu);
	if ((rc = connect_or_log(s, k)))
		goto out;
	argv[0] = "DEL";
	argl[0] = 3;
	for (uint32_t base = 0; base < n; base += CHUNK) {
		uint32_t m = n - base < CHUNK ? n - base : CHUNK;
		for (uint32_t i = 0; i < m; i++) {
			key_name(s, &keys[base + i], names[i]);
			argv[i + 1] = names[i];
			argl[i + 1] = s->prefix_len + 2 * SRT_KEY_BYTES;
		}
		redisReply *r = redisCommandArgv(k->c, (int)m + 1, argv, argl);
		if (!r) {
			rc = lost(s, k, "DEL");
			break;
		}
		if (r->type == REDIS_REPLY_ERROR) {
			s->host->log(SRT_LOG_ERROR, NAME, "redis %s:%d: DEL: %s", s->host_name, s->port,
				     r->str);
			rc = SRT_EIO;
		}
		freeReplyObject(r);
	}
out:
	pthread_mutex_unlock(&k->mu);
	return rc;
}

static int conn_up(struct rd_conn *k)
{
	pthread_mutex_lock(&k->mu);
	int up = k->c != NULL;
	pthread_mutex_unlock(&k->mu);
	return up;
}

/*
 * A connection that was up may have gone stale (the server restarted): a call that loses a
 * connection it started with runs once more on a new one (every command here is idempotent).
 */
static int rd_exists(void *inst, const struct srt_key *keys, uint32_t n, uint32_t *n_present)
{
	struct rd_store *s = inst;
	int had = conn_up(&s->rd);
	int rc = rd_exists_once(inst, keys, n, n_present);
	if (rc == SRT_EIO && had && !conn_up(&s->rd))
		rc = rd_exists_once(inst, keys, n, n_present);
	return rc;
}

static int rd_get(void *inst, const struct srt_key *keys, uint32_t n, void *const *bufs,
		  const size_t *caps, size_t *lens)
{
	struct rd_store *s = inst;
	int had = conn_up(&s->rd);
	int rc = rd_get_once(inst, keys, n, bufs, caps, lens);
	if (rc == SRT_EIO && had && !conn_up(&s->rd))
		rc = rd_get_once(inst, keys, n, bufs, caps, lens);
	return rc;
}

static int rd_put(void *inst, const struct srt_key *keys, uint32_t n, const void *const *bufs,
		  const size_t *lens)
{
	struct rd_store *s = inst;
	int had = conn_up(&s->wr);
	int rc = rd_put_once(inst, keys, n, bufs, lens);
	if (rc == SRT_EIO && had && !conn_up(&s->wr))
		rc = rd_put_once(inst, keys, n, bufs, lens);
	return rc;
}

static int rd_remove(void *inst, const struct srt_key *keys, uint32_t n)
{
	struct rd_store *s = inst;
	int had = conn_up(&s->wr);
	int rc = rd_remove_once(inst, keys, n);
	if (rc == SRT_EIO && had && !conn_up(&s->wr))
		rc = rd_remove_once(inst, keys, n);
	return rc;
}

static const struct srt_tier_vtable vtable = {
	.struct_size = sizeof(struct srt_tier_vtable),
	.exists = rd_exists,
	.get = rd_get,
	.put = rd_put,
	.remove = rd_remove,
};

/* Options read from the plugin's runtime-config section (srt_plugin_desc.options). */
static const struct srt_plugin_option redis_options[] = {
	{"host", "string", "127.0.0.1", "server address"},
	{"port", "int", "6379", "server port"},
	{"db", "int", "0", "database number"},
	{"timeout_ms", "int", NULL, "connect and command timeout"},
	{"prefix", "string", NULL, "key prefix"},
	{"password", "string", NULL, "AUTH password"},
	{"require_server", "bool", "no", "fail at start when the server is down"},
	{NULL, NULL, NULL, NULL},
};

static const struct srt_plugin_desc desc = {
	.struct_size = sizeof(struct srt_plugin_desc),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.kind = SRT_KIND_TIER,
	.name = NAME,
	.version = "1.0",
	.description = "L3 store on a Redis server shared by many machines (pipelined, reconnects)",
	.caps = SRT_CAP_CPU | SRT_CAP_KEYED_STORE,
	.create = rd_create,
	.destroy = rd_destroy,
	.vtable = &vtable,
	.options = redis_options,
};

SRT_EXPORT const struct srt_plugin_desc *srt_plugin_entry(void)
{
	return &desc;
}
