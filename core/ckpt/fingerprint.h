/*
 * The weights fingerprint: XXH3-128 over every byte of every safetensors file of an open
 * checkpoint (headers included, so tensor names, dtypes, shapes and offsets are covered too),
 * computed once and remembered next to the checkpoint.
 *
 * Digest. Each file is cut into 64 MiB chunks; chunk digests are XXH3-128 of the chunk bytes;
 * a file's digest is XXH3-128 over ("shadowrt/weights-file/v1", file size, its chunk digests in
 * order); the checkpoint's digest is XXH3-128 over ("shadowrt/weights/v1", file count, then per
 * file in name order: name, size, file digest). Chunks are hashed by up to `threads` threads;
 * the result does not depend on the thread count.
 *
 * Sidecar. The per-file digests are remembered in SRT_CK_WFP_SIDECAR (JSON) in the directory of
 * the weight files, each keyed by the file's name, size, mtime (ns), ctime (ns) and inode: a
 * restart re-stats the files and rehashes only those whose key changed (ctime is in the key
 * because `touch -d` can restore an mtime, but nothing can restore a ctime). When the directory
 * is read-only, the sidecar goes to <cache_dir>/<SHA-256 of the directory's real path>.json
 * (default cache dir: $XDG_CACHE_HOME/shadowrt/fingerprints, else
 * $HOME/.cache/shadowrt/fingerprints) and an info line says so. A sidecar that does not parse,
 * has another format or version, names another directory or has malformed entries is ignored
 * (an info line says why) and rewritten. Writes are atomic (temporary file + rename). A file
 * that changes while it is hashed is hashed but not remembered.
 *
 * Progress: when at least progress_bytes (default 1 GiB) must be hashed and quiet is 0, one
 * line goes to stderr before hashing starts; nothing else is printed.
 *
 * Thread safety: reentrant; the checkpoint is only read.
 */
#ifndef SRT_CKPT_FINGERPRINT_H
#define SRT_CKPT_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

struct srt_ckpt;

#define SRT_CK_WFP_SIDECAR "shadowrt-weights.xxh3.json"
#define SRT_CK_WFP_CHUNK ((uint64_t)64 << 20)

struct srt_ck_wfp_opts {
	const char *cache_dir;   /* read-only fallback; NULL = the default above */
	int threads;             /* hashing threads; <= 0 = online CPUs, at most 16 */
	int quiet;               /* 1: no progress line */
	uint64_t progress_bytes; /* 0 = 1 GiB */
	int no_sidecar;          /* 1: neither read nor write a sidecar (always hash) */
	/* Info lines (sidecar ignored / fallback location); NULL = none. level: SRT_LOG_* */
	void (*log)(void *user, int level, const char *msg);
	void *log_user;
};

struct srt_ck_wfp {
	uint8_t digest[16];   /* XXH3-128, canonical (big-endian) bytes */
	char hex[33];
	uint64_t bytes;       /* bytes of the weight files covered */
	uint32_t n_files;
	uint64_t hashed_bytes; /* bytes hashed by this call (0: all from the sidecar) */
	uint32_t hashed_files;
	char sidecar[4200];   /* where the per-file digests are remembered ("" = nowhere) */
	int fallback;         /* 1: sidecar in the cache dir (checkpoint directory read-only) */
};

/*
 * Fingerprint the weight files of ck (those holding at least one tensor). o may be NULL.
 * Returns 0 and *out, or SRT_EIO (a file cannot be opened, stat'ed or mapped), SRT_ENOMEM,
 * with the file named in err. A sidecar that cannot be read or written is never an error.
 */
int srt_ck_weights_fingerprint(const struct srt_ckpt *ck, const struct srt_ck_wfp_opts *o,
			       struct srt_ck_wfp *out, char *err, size_t errlen);

#endif
