/*
 * tier_bench: how fast the cache tiers move DeepSeek-V4 pages.
 *
 *  - L3 keyed stores (file, file without fsync, sqlite, redis on a redis-server this program
 *    starts on loopback): put and get throughput and per-call latency (p50, p99) for single
 *    pages, and the throughput of batched gets, through the core's store client (so the object
 *    header and checksum are included, as in the runtime).
 *  - the host arena: copy_from_host / copy_to_host throughput as a ratio of this machine's plain
 *    memcpy bandwidth, measured in the same run on the same buffers.
 *
 * Page sizes are the real ones of DeepSeek-V4-Flash with the FP8 entry layout (584 B per entry,
 * 256-token pages): C4 KV page = 64 entries = 37376 B, SWA page = 256 entries = 149504 B,
 * C128 KV page = 2 entries = 1168 B.
 *
 * usage: tier_bench [--ops N] [--dir DIR] [--only file,file-seg,file-nosync,sqlite,redis,host]
 * Plugins are loaded from $SRT_PLUGIN_DIR (default: <build>/lib/shadowrt/plugins).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tier/store.h"
#include "tier_util.h"

static const struct {
	const char *name;
	size_t bytes;
} sizes[] = {
	{"C128 page (2 x 584 B)", 1168},
	{"C4 page (64 x 584 B)", 37376},
	{"SWA page (256 x 584 B)", 149504},
};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))
#define BATCH 32

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	int i = (int)(p * (n - 1) + 0.5);
	return v[i];
}

static int want(const char *only, const char *name)
{
	if (!only)
		return 1;
	size_t n = strlen(name);
	for (const char *p = only; (p = strstr(p, name)); p += n)
		if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
			return 1;
	return 0;
}

static void bench_store(const char *label, struct tu_plugin *p, int ops)
{
	struct srt_tier_store st;
	char why[256];
	if (srt_tier_store_init(&st, p->vt, p->inst, tu_host(), label, 1, why, sizeof(why))) {
		fprintf(stderr, "%s\n", why);
		return;
	}
	for (size_t s = 0; s < N_SIZES; s++) {
		size_t sz = sizes[s].bytes;
		int n = ops;
		if ((size_t)n * sz > ((size_t)256 << 20)) /* keep each run under 256 MiB of objects */
			n = (int)(((size_t)256 << 20) / sz);
		uint8_t *data = malloc(sz * BATCH), *back = malloc(sz * BATCH);
		double *lat = malloc(sizeof(double) * (size_t)n);
		struct srt_key *keys = malloc(sizeof(*keys) * (size_t)n);
		tu_fill(data, sz * BATCH, s);
		for (int i = 0; i < n; i++)
			keys[i] = tu_key((uint64_t)i + 1000000 * s);

		/* put, one page per call */
		double t0 = tu_now();
		for (int i = 0; i < n; i++) {
			const void *in[1] = {data + (size_t)(i % BATCH) * sz};
			double a = tu_now();
			if (srt_tier_store_put(&st, &keys[i], 1, in, &sz)) {
				fprintf(stderr, "%s: put failed\n", label);
				n = i;
				break;
			}
			lat[i] = tu_now() - a;
		}
		double put_s = tu_now() - t0;
		double put50 = pct(lat, n, 0.5), put99 = pct(lat, n, 0.99);

		/* get, one page per call, in a scrambled order */
		int misses = 0;
		t0 = tu_now();
		for (int j = 0; j < n; j++) {
			int i = (int)(((uint64_t)j * 2654435761u) % (uint64_t)n);
			void *out[1] = {back};
			size_t got;
			double a = tu_now();
			srt_tier_store_get(&st, &keys[i], 1, out, &sz, &got);
			lat[j] = tu_now() - a;
			misses += got != sz;
		}
		double get_s = tu_now() - t0;
		double get50 = pct(lat, n, 0.5), get99 = pct(lat, n, 0.99);

		/* batched get: BATCH consecutive pages per call (a prefetch after a match) */
		void *outs[BATCH];
		size_t caps[BATCH], gots[BATCH];
		for (int b = 0; b < BATCH; b++) {
			outs[b] = back + (size_t)b * sz;
			caps[b] = sz;
		}
		int nb = 0;
		t0 = tu_now();
		for (int i = 0; i + BATCH <= n; i += BATCH, nb++)
			srt_tier_store_get(&st, &keys[i], BATCH, outs, caps, gots);
		double batch_s = tu_now() - t0;

		/* batched put: BATCH pages per call (what the L3 writer thread hands over), on
		 * fresh keys, as a ratio to the single-page puts above */
		p->vt->remove(p->inst, keys, (uint32_t)n);
		const void *ins[BATCH];
		size_t lens[BATCH];
		for (int b = 0; b < BATCH; b++) {
			ins[b] = data + (size_t)b * sz;
			lens[b] = sz;
		}
		int nbp = 0;
		t0 = tu_now();
		for (int i = 0; i + BATCH <= n; i += BATCH, nbp++)
			if (srt_tier_store_put(&st, &keys[i], BATCH, ins, lens)) {
				fprintf(stderr, "%s: batched put failed\n", label);
				break;
			}
		double bput_s = tu_now() - t0;
		double bput = nbp ? (double)sz * BATCH * nbp / 1e6 / bput_s : 0.0;

		double mb = (double)sz * n / 1e6;
		printf("%-12s %-24s n=%-5d put %8.1f MB/s p50 %8.1f us p99 %8.1f us | "
		       "get %8.1f MB/s p50 %8.1f us p99 %8.1f us | batch%d get %8.1f MB/s | "
		       "batch%d put %8.1f MB/s (%.1fx single)%s\n",
		       label, sizes[s].name, n, mb / put_s, put50 * 1e6, put99 * 1e6, mb / get_s,
		       get50 * 1e6, get99 * 1e6, BATCH,
		       nb ? (double)sz * BATCH * nb / 1e6 / batch_s : 0.0, BATCH, bput,
		       put_s > 0 ? bput / (mb / put_s) : 0.0,
		       misses ? " (MISSES: evicted or failed)" : "");
		fflush(stdout);
		p->vt->remove(p->inst, keys, (uint32_t)n);
		free(keys);
		free(lat);
		free(back);
		free(data);
	}
}

static double bw(double bytes, double s)
{
	return bytes / s / 1e9;
}

static void bench_host(void)
{
	struct tu_plugin p;
	char why[256];
	const char *opts[] = {"hugepages", "on", NULL};
	if (tu_open("srt_tier_host.so", opts, &p, why, sizeof(why))) {
		fprintf(stderr, "host: %s\n", why);
		return;
	}
	enum { SZ = 37376, N = 3000, REPS = 5 }; /* ~112 MB: well past the caches */
	uint8_t *src = malloc((size_t)SZ * N), *dst = malloc((size_t)SZ * N);
	void **pg = malloc(sizeof(void *) * N);
	memset(src, 1, (size_t)SZ * N);
	memset(dst, 2, (size_t)SZ * N);
	for (int i = 0; i < N; i++)
		if (p.vt->alloc_page(p.inst, SZ, &pg[i])) {
			fprintf(stderr, "host: alloc failed\n");
			return;
		}
	for (int i = 0; i < N; i++) /* fault every page in before timing */
		p.vt->copy_from_host(p.inst, pg[i], src + (size_t)i * SZ, SZ);
	double best_memcpy = 1e9, best_in = 1e9, best_out = 1e9;
	for (int r = 0; r < REPS; r++) {
		double t = tu_now();
		for (int i = 0; i < N; i++)
			memcpy(dst + (size_t)i * SZ, src + (size_t)i * SZ, SZ);
		t = tu_now() - t;
		best_memcpy = t < best_memcpy ? t : best_memcpy;
		t = tu_now();
		for (int i = 0; i < N; i++)
			p.vt->copy_from_host(p.inst, pg[i], src + (size_t)i * SZ, SZ);
		t = tu_now() - t;
		best_in = t < best_in ? t : best_in;
		t = tu_now();
		for (int i = 0; i < N; i++)
			p.vt->copy_to_host(p.inst, dst + (size_t)i * SZ, pg[i], SZ);
		t = tu_now() - t;
		best_out = t < best_out ? t : best_out;
	}
	double bytes = (double)SZ * N;
	printf("host arena   C4 pages x %d (%.0f MB), best of %d: memcpy %.2f GB/s | copy_from_host "
	       "%.2f GB/s (%.2fx memcpy) | copy_to_host %.2f GB/s (%.2fx memcpy)\n",
	       N, bytes / 1e6, REPS, bw(bytes, best_memcpy), bw(bytes, best_in),
	       best_memcpy / best_in, bw(bytes, best_out), best_memcpy / best_out);
	for (int i = 0; i < N; i++)
		p.vt->free_page(p.inst, pg[i], SZ);
	tu_close(&p);
	free(pg);
	free(dst);
	free(src);
}

int main(int argc, char **argv)
{
	int ops = 1000;
	const char *dir_opt = NULL, *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: tier_bench [--ops N] [--dir DIR] [--only LIST]\n"
			       "Measures L3 put/get throughput and latency (file, file-seg = layout\n"
			       "segments, file-nosync, sqlite, redis) for DeepSeek-V4-Flash page sizes,\n"
			       "single-page and batched puts (ratio batched / single), and host-arena copy\n"
			       "bandwidth as a ratio of memcpy. LIST: comma-separated subset of file,\n"
			       "file-seg,file-nosync,sqlite,redis,host. DIR: where the file/sqlite stores go\n"
			       "(default: a temp dir).\n");
			return 0;
		} else if (!strcmp(argv[i], "--ops") && i + 1 < argc) {
			ops = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
			dir_opt = argv[++i];
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			only = argv[++i];
		} else {
			fprintf(stderr, "tier_bench: unknown argument '%s' (see --help)\n", argv[i]);
			return 2;
		}
	}
	if (ops < BATCH) {
		fprintf(stderr, "tier_bench: --ops must be at least %d\n", BATCH);
		return 2;
	}
	if (!getenv("SRT_PLUGIN_DIR")) {
		static char def[4096];
		char exe[4000];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n > 0) {
			exe[n] = 0;
			char *slash = strrchr(exe, '/');
			if (slash)
				*slash = 0;
			snprintf(def, sizeof(def), "%s/../lib/shadowrt/plugins", exe);
			setenv("SRT_PLUGIN_DIR", def, 1);
		}
	}
	char *tmp = dir_opt ? NULL : tu_tmpdir("bench");
	const char *dir = dir_opt ? dir_opt : tmp;
	char path[4200];
	struct tu_plugin p;
	char why[512];

	printf("tier_bench: %d single-page ops per size, batches of %d; stores under %s\n", ops, BATCH,
	       dir);
	if (want(only, "host"))
		bench_host();
	if (want(only, "file")) {
		snprintf(path, sizeof(path), "%s/file", dir);
		const char *o[] = {"path", path, NULL};
		if (tu_open("srt_tier_file.so", o, &p, why, sizeof(why)) == 0) {
			bench_store("file", &p, ops);
			tu_close(&p);
		} else
			fprintf(stderr, "file: %s\n", why);
		tu_rmrf(path);
	}
	if (want(only, "file-seg")) {
		snprintf(path, sizeof(path), "%s/file-seg", dir);
		const char *o[] = {"path", path, "layout", "segments", NULL};
		if (tu_open("srt_tier_file.so", o, &p, why, sizeof(why)) == 0) {
			bench_store("file-seg", &p, ops);
			tu_close(&p);
		} else
			fprintf(stderr, "file-seg: %s\n", why);
		tu_rmrf(path);
	}
	if (want(only, "file-nosync")) {
		snprintf(path, sizeof(path), "%s/file-nosync", dir);
		const char *o[] = {"path", path, "fsync", "off", NULL};
		if (tu_open("srt_tier_file.so", o, &p, why, sizeof(why)) == 0) {
			bench_store("file-nosync", &p, ops);
			tu_close(&p);
		} else
			fprintf(stderr, "file-nosync: %s\n", why);
		tu_rmrf(path);
	}
	if (want(only, "sqlite")) {
		snprintf(path, sizeof(path), "%s/l3.db", dir);
		const char *o[] = {"path", path, NULL};
		if (tu_open("srt_tier_sqlite.so", o, &p, why, sizeof(why)) == 0) {
			bench_store("sqlite", &p, ops);
			tu_close(&p);
		} else
			fprintf(stderr, "sqlite: %s\n", why);
		unlink(path);
		snprintf(path, sizeof(path), "%s/l3.db-wal", dir);
		unlink(path);
		snprintf(path, sizeof(path), "%s/l3.db-shm", dir);
		unlink(path);
	}
	if (want(only, "redis")) {
		int port = tu_free_port();
		pid_t srv = tu_redis_server() ? tu_redis_start(port) : -1;
		if (srv > 0) {
			char ps[16];
			snprintf(ps, sizeof(ps), "%d", port);
			const char *o[] = {"port", ps, NULL};
			if (tu_open("srt_tier_redis.so", o, &p, why, sizeof(why)) == 0) {
				bench_store("redis", &p, ops);
				tu_close(&p);
			} else
				fprintf(stderr, "redis: %s\n", why);
			tu_redis_stop(srv);
		} else {
			fprintf(stderr, "redis: redis-server not installed or did not start: skipped\n");
		}
	}
	if (tmp) {
		tu_rmrf(tmp);
		free(tmp);
	}
	return 0;
}
