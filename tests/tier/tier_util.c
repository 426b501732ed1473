/* Test and benchmark helpers for the tier plugins (see tier_util.h). */
#include "tier_util.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef SRT_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

/* --- host with captured log ----------------------------------------------------------------- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[1 << 16];
static size_t log_len;

static void tu_log(int level, const char *plugin, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n = snprintf(line, sizeof(line), "[%s] %d: ", plugin ? plugin : "?", level);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (getenv("SRT_TEST_VERBOSE"))
		fprintf(stderr, "%s\n", line);
	pthread_mutex_lock(&log_mu);
	size_t l = strlen(line);
	if (log_len + l + 2 > sizeof(log_buf))
		log_len = 0; /* keep the newest lines */
	memcpy(log_buf + log_len, line, l);
	log_len += l;
	log_buf[log_len++] = '\n';
	log_buf[log_len] = 0;
	pthread_mutex_unlock(&log_mu);
}

static void *tu_alloc(size_t size, size_t align)
{
	void *p = NULL;
	return posix_memalign(&p, align, size ? size : 1) ? NULL : p;
}

static void tu_pfor(const struct srt_host *h, int64_t n, srt_range_fn fn, void *ctx)
{
	(void)h;
	fn(ctx, 0, n, 0);
}

static const struct srt_host host = {
	.struct_size = sizeof(struct srt_host),
	.abi_major = SRT_ABI_MAJOR,
	.abi_minor = SRT_ABI_MINOR,
	.log = tu_log,
	.alloc = tu_alloc,
	.free = free,
	.nthreads = 1,
	.parallel_for = tu_pfor,
};

const struct srt_host *tu_host(void)
{
	return &host;
}

int tu_log_has(const char *needle)
{
	pthread_mutex_lock(&log_mu);
	int has = strstr(log_buf, needle) != NULL;
	pthread_mutex_unlock(&log_mu);
	return has;
}

int tu_log_count(const char *needle)
{
	int n = 0;
	pthread_mutex_lock(&log_mu);
	for (const char *l = log_buf; *l;) {
		const char *eol = strchr(l, '\n');
		size_t len = eol ? (size_t)(eol - l) : strlen(l);
		const char *hit = strstr(l, needle);
		if (hit && hit < l + len)
			n++;
		l += len + (eol ? 1 : 0);
	}
	pthread_mutex_unlock(&log_mu);
	return n;
}

void tu_log_clear(void)
{
	pthread_mutex_lock(&log_mu);
	log_len = 0;
	log_buf[0] = 0;
	pthread_mutex_unlock(&log_mu);
}

/* --- plugins -------------------------------------------------------------------------------- */

static const char *opt_lookup(void *ctx, const char *key)
{
	for (const char *const *o = ctx; o && o[0]; o += 2)
		if (!strcmp(o[0], key))
			return o[1];
	return NULL;
}

int tu_open(const char *file, const char *const *opts, struct tu_plugin *p, char *why,
	    size_t why_len)
{
	const char *dir = getenv("SRT_PLUGIN_DIR");
	char path[4096];

	memset(p, 0, sizeof(*p));
	snprintf(path, sizeof(path), "%s/%s", dir ? dir : "lib/shadowrt/plugins", file);
	p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!p->dl) {
		snprintf(why, why_len, "dlopen %s: %s", path, dlerror());
		return SRT_EIO;
	}
	srt_plugin_entry_fn entry = (srt_plugin_entry_fn)dlsym(p->dl, SRT_PLUGIN_ENTRY_SYMBOL);
	if (!entry) {
		snprintf(why, why_len, "%s: no %s", path, SRT_PLUGIN_ENTRY_SYMBOL);
		return SRT_EINVAL;
	}
	p->desc = entry();
	p->vt = p->desc->vtable;
	if (p->desc->probe) {
		int rc = p->desc->probe(&host, why, why_len);
		if (rc)
			return rc;
	}
	struct srt_plugin_args args = {
		.struct_size = sizeof(args),
		.page_tokens = 256,
		.option = opt_lookup,
		.option_ctx = (void *)opts,
		.role = "tier.test",
	};
	return p->desc->create(&host, &args, &p->inst, why, why_len);
}

void tu_close(struct tu_plugin *p)
{
	if (p->inst)
		p->desc->destroy(p->inst);
	p->inst = NULL; /* plugins are never dlclose()d */
}

/* --- files ---------------------------------------------------------------------------------- */

char *tu_tmpdir(const char *tag)
{
	const char *base = getenv("TMPDIR");
	char *p = NULL;
	if (asprintf(&p, "%s/srt-%s-XXXXXX", base ? base : "/tmp", tag) < 0)
		return NULL;
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static unsigned chmod_mode;

static int chmod_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_D || flag == FTW_DP)
		chmod(path, chmod_mode);
	return 0;
}

void tu_chmod_dirs(const char *path, unsigned mode)
{
	chmod_mode = mode;
	/* Depth first, so a directory loses write/exec rights after its children are done. */
	nftw(path, chmod_one, 16, FTW_DEPTH | FTW_PHYS);
}

void tu_rmrf(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

void tu_fill(void *buf, size_t n, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t s = seed;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = splitmix(&s);
		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

struct srt_key tu_key(uint64_t i)
{
	struct srt_key k;
	tu_fill(k.b, sizeof(k.b), 0x5eed0000 + i);
	return k;
}

double tu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- redis ---------------------------------------------------------------------------------- */

int tu_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int port = -1;
	if (fd < 0)
		return -1;
	if (!bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

const char *tu_redis_server(void)
{
	static const char *const cands[] = {"/usr/bin/redis-server", "/usr/local/bin/redis-server",
					    "/usr/sbin/redis-server"};
	for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++)
		if (!access(cands[i], X_OK))
			return cands[i];
	return NULL;
}

pid_t tu_redis_start(int port)
{
	const char *bin = tu_redis_server();
	char port_s[16];
	if (!bin)
		return -1;
	snprintf(port_s, sizeof(port_s), "%d", port);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		if (devnull >= 0) {
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		execl(bin, bin, "--port", port_s, "--bind", "127.0.0.1", "--save", "", "--appendonly",
		      "no", "--dir", "/tmp", (char *)NULL);
		_exit(127);
	}
#ifdef SRT_HAVE_HIREDIS
	/* Wait for PING (up to 5 s). */
	for (int i = 0; i < 500; i++) {
		struct timeval tv = {0, 100000};
		redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
		if (c && !c->err) {
			redisReply *r = redisCommand(c, "PING");
			int ok = r && r->type == REDIS_REPLY_STATUS;
			if (r)
				freeReplyObject(r);
			redisFree(c);
			if (ok)
				return pid;
		} else if (c) {
			redisFree(c);
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1;
		usleep(10000);
	}
#endif
	tu_redis_stop(pid);
	return -1;
}

void tu_redis_stop(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}
