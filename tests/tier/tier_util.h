/*
 * Helpers for the tier tests and the tier benchmark: load a tier plugin .so for real (dlopen
 * from $SRT_PLUGIN_DIR), a host table whose log is captured so tests can assert that a reason
 * was logged, temp directories, deterministic payloads, and a real redis-server on loopback.
 * Not thread safe (tests are single threaded; the log capture has a mutex anyway).
 */
#ifndef SRT_TESTS_TIER_UTIL_H
#define SRT_TESTS_TIER_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <shadowrt/plugin.h>
#include <shadowrt/tier.h>

struct tu_plugin {
	void *dl;
	const struct srt_plugin_desc *desc;
	const struct srt_tier_vtable *vt;
	void *inst;
};

/* The captured-log host table. Lines also go to stderr when SRT_TEST_VERBOSE is set. */
const struct srt_host *tu_host(void);
/* True when a logged line contains needle (since the last tu_log_clear). */
int tu_log_has(const char *needle);
void tu_log_clear(void);
/* Logged lines containing needle (since the last tu_log_clear). */
int tu_log_count(const char *needle);

/*
 * Load plugins/<file> (e.g. "srt_tier_file.so") and create an instance with options given as
 * NULL-terminated key, value pairs. Returns create's status (0 ok); why gets the reason.
 */
int tu_open(const char *file, const char *const *opts, struct tu_plugin *p, char *why,
	    size_t why_len);
void tu_close(struct tu_plugin *p);

/* A fresh directory under $TMPDIR (or /tmp); the caller frees the string. */
char *tu_tmpdir(const char *tag);
/* chmod every directory under (and including) path to mode. */
void tu_chmod_dirs(const char *path, unsigned mode);
/* rm -rf path (best effort). */
void tu_rmrf(const char *path);

/* Deterministic pseudo-random bytes (splitmix64 of seed) and keys. */
void tu_fill(void *buf, size_t n, uint64_t seed);
struct srt_key tu_key(uint64_t i);

/* A free TCP port on 127.0.0.1 (bind to port 0 and read it back). */
int tu_free_port(void);
/* Path of redis-server, or NULL when it is not installed. */
const char *tu_redis_server(void);
/* Start redis-server on 127.0.0.1:port (no persistence); waits until it answers PING. */
pid_t tu_redis_start(int port);
/* SIGKILL the server and reap it. */
void tu_redis_stop(pid_t pid);

double tu_now(void); /* monotonic seconds */

#endif
