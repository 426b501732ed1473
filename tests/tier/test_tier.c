/*
 * Tests of the cache tiers: SHA-256 / XXH64 against published vectors, the key chain, the L3
 * object format, the host arena plugin, and the file and sqlite keyed stores loaded as real
 * plugins, including faults done for real (a writer SIGKILLed mid-write, a read-only directory,
 * a full disk on a 1 MiB tmpfs).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "tier/key.h"
#include "tier/object.h"
#include "tier/sha256.h"
#include "tier/store.h"
#include "tier/xxh64.h"
#include "tier_util.h"

static void hex32(const uint8_t *d, char *out)
{
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_sha(const void *msg, size_t len, const char *want)
{
	uint8_t d[32];
	char got[65];
	srt_tier_sha256(msg, len, d);
	hex32(d, got);
	ck_assert_str_eq(got, want);
}

/* --- hashes ---------------------------------------------------------------------------------- */

START_TEST(sha256_matches_fips_180_4_vectors)
{
	check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	check_sha(m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
			   "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
	check_sha(m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
	/* One million 'a', fed in uneven pieces to exercise the block buffer. */
	struct srt_tier_sha256 s;
	char chunk[997];
	uint8_t d[32];
	char got[65];
	memset(chunk, 'a', sizeof(chunk));
	srt_tier_sha256_init(&s);
	size_t left = 1000000;
	while (left) {
		size_t n = left < sizeof(chunk) ? left : sizeof(chunk);
		srt_tier_sha256_update(&s, chunk, n);
		left -= n;
	}
	srt_tier_sha256_final(&s, d);
	hex32(d, got);
	ck_assert_str_eq(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

START_TEST(sha256_streaming_in_any_split_equals_one_shot)
{
	uint8_t msg[300], a[32], b[32];
	tu_fill(msg, sizeof(msg), 7);
	for (size_t len = 0; len <= sizeof(msg); len += 13) {
		srt_tier_sha256(msg, len, a);
		for (size_t cut = 0; cut <= len; cut += 7) {
			struct srt_tier_sha256 s;
			srt_tier_sha256_init(&s);
			srt_tier_sha256_update(&s, msg, cut);
			srt_tier_sha256_update(&s, msg + cut, len - cut);
			srt_tier_sha256_final(&s, b);
			ck_assert_mem_eq(a, b, 32);
		}
	}
}
END_TEST

START_TEST(xxh64_matches_published_vectors)
{
	ck_assert_uint_eq(srt_tier_xxh64("", 0, 0), 0xEF46DB3751D8E999ULL);
	ck_assert_uint_eq(srt_tier_xxh64("abc", 3, 0), 0x44BC2CF5AD770999ULL);
	const char *s = "Nobody inspects the spammish repetition"; /* 39 bytes: stripes + tails */
	ck_assert_uint_eq(srt_tier_xxh64(s, strlen(s), 0), 0xFBCEA83C8A378BF1ULL);
	ck_assert_uint_ne(srt_tier_xxh64("abc", 3, 1), 0x44BC2CF5AD770999ULL);
}
END_TEST

/* --- keys ------------------------------------------------------------------------------------ */

static void scope_init(struct srt_tier_key_scope *sc)
{
	memset(sc, 0, sizeof(*sc));
	tu_fill(sc->model_fp, 32, 1);
	sc->layout_version = 3;
	tu_fill(sc->tenant_salt, 32, 2);
}

/* SHA-256 of buf[0..n) by libcrypto's one-shot EVP_Digest, independent of the wrapper. */
static void evp_sha(const void *buf, size_t n, uint8_t d[32])
{
	unsigned len = 0;
	ck_assert(EVP_Digest(buf, n, d, &len, EVP_sha256(), NULL));
	ck_assert_uint_eq(len, 32);
}

START_TEST(key_equals_sha256_of_the_documented_encoding)
{
	struct srt_tier_key_scope sc;
	struct srt_tier_keyer k;
	struct srt_tier_pool_tag tag;
	int32_t tok[4] = {11, -2, 300000, 7};
	struct srt_key first, second, key;
	scope_init(&sc);
	ck_assert_int_eq(srt_tier_keyer_init(&k, &sc), 0);
	ck_assert_int_eq(srt_tier_pool_tag("c4", &tag), 0);
	ck_assert_int_eq(srt_tier_key_chain_next(&k, NULL, tok, 4, &first), 0);
	ck_assert_int_eq(srt_tier_key_chain_next(&k, &first, tok, 4, &second), 0);
	ck_assert_int_eq(srt_tier_key_pool(&second, &tag, &key), 0);

	/* Build the byte strings of key.h by hand and hash each in one go. */
	uint8_t buf[512], scope[32], d[32];
	size_t n = 0;
	memcpy(buf, "shadowrt/l3-scope/v2", 21), n = 21;
	memcpy(buf + n, sc.model_fp, 32), n += 32;
	buf[n++] = 3, buf[n++] = 0, buf[n++] = 0, buf[n++] = 0;
	memcpy(buf + n, sc.tenant_salt, 32), n += 32;
	evp_sha(buf, n, scope);
	ck_assert_mem_eq(scope, k.scope, 32);

	memcpy(buf, "shadowrt/l3-chain/v2", 21), n = 21;
	memcpy(buf + n, scope, 32), n += 32;
	size_t prefix = n;
	buf[n++] = 0;
	memset(buf + n, 0, 32), n += 32;
	buf[n++] = 4, buf[n++] = 0, buf[n++] = 0, buf[n++] = 0;
	for (int i = 0; i < 4; i++)
		for (int b = 0; b < 4; b++)
			buf[n++] = (uint8_t)((uint32_t)tok[i] >> (8 * b));
	evp_sha(buf, n, d);
	ck_assert_mem_eq(d, first.b, 32);
	/* Second page: has_prev = 1 and the first chain value. */
	buf[prefix] = 1;
	memcpy(buf + prefix + 1, first.b, 32);
	evp_sha(buf, n, d);
	ck_assert_mem_eq(d, second.b, 32);

	/* The pool tag and the pool's key. */
	memcpy(buf, "shadowrt/l3-pool/v2", 20), n = 20;
	buf[n++] = 2, buf[n++] = 0, buf[n++] = 0, buf[n++] = 0;
	buf[n++] = 'c', buf[n++] = '4';
	evp_sha(buf, n, d);
	ck_assert_mem_eq(d, tag.b, 16);
	memcpy(buf, second.b, 32);
	memcpy(buf + 32, tag.b, 16);
	evp_sha(buf, 48, d);
	ck_assert_mem_eq(d, key.b, 32);
}
END_TEST

START_TEST(key_changes_with_every_input_and_chains)
{
	struct srt_tier_key_scope sc, sc2;
	struct srt_tier_keyer k, k2;
	struct srt_tier_pool_tag tags[2], tag2;
	int32_t tok[512];
	struct srt_key base[2], chain[2], keys0[2], keys1[2], other, oc;
	struct srt_key *keys[2] = {keys0, keys1};
	for (int i = 0; i < 512; i++)
		tok[i] = i * 7;
	scope_init(&sc);
	ck_assert_int_eq(srt_tier_keyer_init(&k, &sc), 0);
	ck_assert_int_eq(srt_tier_pool_tag("c4", &tags[0]), 0);
	ck_assert_int_eq(srt_tier_pool_tag("c128", &tags[1]), 0);
	ck_assert_int_eq(srt_tier_key_pages(&k, NULL, tok, 2, 256, tags, 2, chain, keys), 0);
	ck_assert_int_eq(srt_tier_key_chain_next(&k, NULL, tok, 256, &base[0]), 0);
	ck_assert_int_eq(srt_tier_key_chain_next(&k, &base[0], tok + 256, 256, &base[1]), 0);
	ck_assert_mem_eq(chain, base, sizeof(base));
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(srt_tier_key_pool(&chain[i], &tags[0], &other), 0);
		ck_assert_mem_eq(other.b, keys0[i].b, 32);
		ck_assert_int_eq(srt_tier_key_pool(&chain[i], &tags[1], &other), 0);
		ck_assert_mem_eq(other.b, keys1[i].b, 32);
	}
	/* a batch continuing after page 0 gives the same page 1 */
	struct srt_key c1, k01, k11, *kk[2] = {&k01, &k11};
	ck_assert_int_eq(srt_tier_key_pages(&k, &chain[0], tok + 256, 1, 256, tags, 2, &c1, kk), 0);
	ck_assert_mem_eq(c1.b, chain[1].b, 32);
	ck_assert_mem_eq(k11.b, keys1[1].b, 32);

#define DIFFERS(mutate)                                                                        \
	do {                                                                                   \
		sc2 = sc;                                                                      \
		const char *pool = "c4";                                                       \
		int32_t t2[256];                                                               \
		memcpy(t2, tok + 256, sizeof(t2));                                             \
		struct srt_key prev = base[0];                                                 \
		mutate;                                                                        \
		ck_assert_int_eq(srt_tier_keyer_init(&k2, &sc2), 0);                           \
		ck_assert_int_eq(srt_tier_pool_tag(pool, &tag2), 0);                           \
		ck_assert_int_eq(srt_tier_key_chain_next(&k2, &prev, t2, 256, &oc), 0);        \
		ck_assert_int_eq(srt_tier_key_pool(&oc, &tag2, &other), 0);                    \
		ck_assert_msg(memcmp(other.b, keys0[1].b, 32), "key ignores: %s", #mutate);    \
	} while (0)
	DIFFERS(sc2.model_fp[31] ^= 1);
	DIFFERS(sc2.layout_version++);
	DIFFERS(sc2.tenant_salt[0] ^= 0x80);
	DIFFERS(pool = "c128");
	DIFFERS(pool = "c");
	DIFFERS(prev.b[5] ^= 1);
	DIFFERS(t2[255]++);
	/* The first page and a page after an all-zero chain are different keys. */
	struct srt_key zero = {{0}}, a, b;
	ck_assert_int_eq(srt_tier_key_chain_next(&k, NULL, tok, 256, &a), 0);
	ck_assert_int_eq(srt_tier_key_chain_next(&k, &zero, tok, 256, &b), 0);
	ck_assert(memcmp(a.b, b.b, 32));
	/* A page of fewer tokens differs too (length is encoded). */
	ck_assert_int_eq(srt_tier_key_chain_next(&k, NULL, tok, 255, &b), 0);
	ck_assert(memcmp(a.b, b.b, 32));
	/* Two pools of one page never share a key, nor a key and the chain value. */
	ck_assert(memcmp(keys0[0].b, keys1[0].b, 32));
	ck_assert(memcmp(keys0[0].b, chain[0].b, 32));
}
END_TEST

/* --- objects --------------------------------------------------------------------------------- */

START_TEST(object_round_trips_and_every_flipped_bit_is_rejected)
{
	uint8_t payload[300], obj[SRT_TIER_OBJ_HEADER_BYTES + 300];
	struct srt_key key = tu_key(1);
	const void *p;
	size_t len;
	char why[256];
	tu_fill(payload, sizeof(payload), 9);
	srt_tier_obj_encode(obj, &key, 5, payload, sizeof(payload));
	ck_assert_int_eq(srt_tier_obj_decode(obj, sizeof(obj), &key, 5, &p, &len, why, sizeof(why)), 0);
	ck_assert_uint_eq(len, sizeof(payload));
	ck_assert_mem_eq(p, payload, sizeof(payload));
	for (size_t i = 0; i < sizeof(obj); i++)
		for (int bit = 0; bit < 8; bit += 3) {
			obj[i] ^= (uint8_t)(1 << bit);
			int rc = srt_tier_obj_decode(obj, sizeof(obj), &key, 5, &p, &len, why, sizeof(why));
			ck_assert_msg(rc == SRT_ECORRUPT || rc == SRT_EVERSION,
				      "flip of byte %zu bit %d accepted", i, bit);
			obj[i] ^= (uint8_t)(1 << bit);
		}
}
END_TEST

START_TEST(object_rejects_truncated_foreign_and_wrong_version)
{
	uint8_t payload[100], obj[SRT_TIER_OBJ_HEADER_BYTES + 100];
	struct srt_key key = tu_key(1), other = tu_key(2);
	const void *p;
	size_t len;
	char why[256];
	tu_fill(payload, sizeof(payload), 3);
	srt_tier_obj_encode(obj, &key, 5, payload, sizeof(payload));

	ck_assert_int_eq(srt_tier_obj_decode(obj, sizeof(obj) - 1, &key, 5, &p, &len, why, sizeof(why)),
			 SRT_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(why, "truncated"));
	ck_assert_int_eq(srt_tier_obj_decode(obj, 10, &key, 5, &p, &len, why, sizeof(why)), SRT_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(why, "truncated"));
	ck_assert_int_eq(srt_tier_obj_decode(obj, sizeof(obj), &other, 5, &p, &len, why, sizeof(why)),
			 SRT_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(why, "foreign"));
	ck_assert_int_eq(srt_tier_obj_decode(obj, sizeof(obj), &key, 6, &p, &len, why, sizeof(why)),
			 SRT_EVERSION);
	ck_assert_ptr_nonnull(strstr(why, "layout version 5 (expected 6)"));
	obj[4] = 2; /* format version 2 */
	ck_assert_int_eq(srt_tier_obj_decode(obj, sizeof(obj), &key, 5, &p, &len, why, sizeof(why)),
			 SRT_EVERSION);
	ck_assert_ptr_nonnull(strstr(why, "format version 2"));
	/* An empty payload is a valid object. */
	srt_tier_obj_encode(obj, &key, 5, NULL, 0);
	ck_assert_int_eq(srt_tier_obj_decode(obj, SRT_TIER_OBJ_HEADER_BYTES, &key, 5, &p, &len, why,
					     sizeof(why)), 0);
	ck_assert_uint_eq(len, 0);
}
END_TEST

/* --- host arena ------------------------------------------------------------------------------ */

START_TEST(host_pages_are_distinct_copyable_and_reused)
{
	struct tu_plugin p;
	char why[256];
	const char *opts[] = {"slab_bytes", "65536", NULL};
	ck_assert_int_eq(tu_open("srt_tier_host.so", opts, &p, why, sizeof(why)), 0);
	ck_assert(p.desc->caps & SRT_CAP_PAGE_ARENA);
	enum { N = 40, SZ = 37376 }; /* a C4 page: 64 entries x 584 B */
	void *pg[N];
	uint8_t src[SZ], dst[SZ];
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(p.vt->alloc_page(p.inst, SZ, &pg[i]), 0);
		ck_assert_uint_eq((uintptr_t)pg[i] % 64, 0);
		tu_fill(src, SZ, (uint64_t)i);
		ck_assert_int_eq(p.vt->copy_from_host(p.inst, pg[i], src, SZ), 0);
	}
	for (int i = 0; i < N; i++) { /* nothing overlapped: every page still holds its bytes */
		tu_fill(src, SZ, (uint64_t)i);
		ck_assert_int_eq(p.vt->copy_to_host(p.inst, dst, pg[i], SZ), 0);
		ck_assert_mem_eq(dst, src, SZ);
	}
	uint64_t bytes, objs;
	p.vt->usage(p.inst, &bytes, &objs);
	ck_assert_uint_eq(objs, N);
	ck_assert_uint_eq(bytes, (uint64_t)N * SZ);
	void *freed = pg[7];
	p.vt->free_page(p.inst, pg[7], SZ);
	ck_assert_int_eq(p.vt->alloc_page(p.inst, SZ, &pg[7]), 0);
	ck_assert_ptr_eq(pg[7], freed);
	for (int i = 0; i < N; i++)
		p.vt->free_page(p.inst, pg[i], SZ);
	p.vt->usage(p.inst, &bytes, &objs);
	ck_assert_uint_eq(objs, 0);
	tu_close(&p);
}
END_TEST

START_TEST(host_budget_is_a_hard_limit_and_frees_make_room_for_any_size)
{
	struct tu_plugin p;
	char why[256];
	const char *opts[] = {"budget", "1M", "slab_bytes", "262144", NULL};
	ck_assert_int_eq(tu_open("srt_tier_host.so", opts, &p, why, sizeof(why)), 0);
	void *pg[64];
	int n = 0;
	while (n < 64 && p.vt->alloc_page(p.inst, 65536, &pg[n]) == 0)
		n++;
	ck_assert_int_eq(n, 16); /* exactly 1 MiB of 64 KiB pages */
	void *x;
	ck_assert_int_eq(p.vt->alloc_page(p.inst, 65536, &x), SRT_ENOMEM);
	ck_assert_ptr_null(x);
	ck_assert_int_eq(p.vt->alloc_page(p.inst, 4096, &x), SRT_ENOMEM);
	/* Free everything: the empty slabs are released for another page size. */
	for (int i = 0; i < n; i++)
		p.vt->free_page(p.inst, pg[i], 65536);
	n = 0;
	while (n < 64 && p.vt->alloc_page(p.inst, 131072, &pg[n]) == 0)
		n++;
	ck_assert_int_eq(n, 8);
	tu_close(&p);
}
END_TEST

START_TEST(host_hugepages_option_gives_2mib_aligned_slabs)
{
	struct tu_plugin p;
	char why[256];
	const char *opts[] = {"hugepages", "on", "budget", "8M", NULL};
	ck_assert_int_eq(tu_open("srt_tier_host.so", opts, &p, why, sizeof(why)), 0);
	void *a;
	ck_assert_int_eq(p.vt->alloc_page(p.inst, 149504, &a), 0); /* SWA page: 256 x 584 B */
	ck_assert_uint_eq((uintptr_t)a % (2u << 20), 0);           /* first page opens the slab */
	memset(a, 0xab, 149504);
	void *pg[64];
	int n = 0;
	while (n < 64 && p.vt->alloc_page(p.inst, 149504, &pg[n]) == 0)
		n++;
	ck_assert_int_eq(n + 1, (int)((8u << 20) / 149504)); /* budget counts whole 2 MiB units */
	tu_close(&p);
}
END_TEST

/* Resident bytes of this process (/proc/self/statm, field 2). */
static uint64_t resident_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%lu %lu", &size, &res), 2);
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/*
 * The arena is told its budget through set_budget (what the tier stack does), then used like
 * the tier manager uses L2: pages of three sizes (C4, SWA and a 64 KiB page) allocated while the
 * bytes in use fit the budget, each written whole, some freed and allocated again. The process's
 * resident memory may grow by the budget plus a small constant, with and without huge pages.
 */
static void arena_within_budget(const char *huge, uint64_t budget)
{
	struct tu_plugin p;
	char why[256];
	const char *opts[] = {"hugepages", huge, NULL};
	ck_assert_int_eq(tu_open("srt_tier_host.so", opts, &p, why, sizeof(why)), 0);
	ck_assert_ptr_nonnull(p.vt->set_budget);
	ck_assert_int_eq(p.vt->set_budget(p.inst, budget), 0);
	static const size_t sizes[3] = {37376, 149504, 65536};
	enum { MAXP = 1024 };
	void *pg[MAXP];
	size_t sz[MAXP];
	int n = 0;
	uint64_t used = 0, rss0 = resident_bytes();
	for (int round = 0; round < 4; round++) {
		int got = 1;
		while (got && n < MAXP) {
			got = 0;
			for (int k = 0; k < 3 && n < MAXP; k++) {
				if (used + sizes[k] > budget ||
				    p.vt->alloc_page(p.inst, sizes[k], &pg[n]))
					continue;
				memset(pg[n], 0x5a, sizes[k]);
				sz[n] = sizes[k];
				used += sizes[k];
				n++;
				got = 1;
			}
		}
		/* free every other page: the next round reuses and carves again */
		int m = 0;
		for (int i = 0; i < n; i++) {
			if (i % 2) {
				p.vt->free_page(p.inst, pg[i], sz[i]);
				used -= sz[i];
			} else {
				pg[m] = pg[i], sz[m] = sz[i], m++;
			}
		}
		n = m;
	}
	uint64_t rss1 = resident_bytes(), slack = 512u << 10;
	fprintf(stderr, "[tier] hugepages=%s budget %llu: resident +%llu bytes\n", huge,
		(unsigned long long)budget, (unsigned long long)(rss1 - rss0));
	ck_assert_uint_gt(n, 0);
	ck_assert_msg(rss1 <= rss0 + budget + slack, "resident grew by %llu bytes, budget %llu",
		      (unsigned long long)(rss1 - rss0), (unsigned long long)budget);
	for (int i = 0; i < n; i++)
		p.vt->free_page(p.inst, pg[i], sz[i]);
	tu_close(&p);
}

START_TEST(host_resident_memory_stays_within_the_budget_given_by_set_budget)
{
	arena_within_budget("off", 1u << 20);
	arena_within_budget("on", 1u << 20);
	arena_within_budget("on", 6u << 20);
}
END_TEST

START_TEST(host_rejects_bad_options_with_the_key)
{
	struct tu_plugin p;
	char why[256];
	const char *o1[] = {"budget", "lots", NULL};
	ck_assert_int_eq(tu_open("srt_tier_host.so", o1, &p, why, sizeof(why)), SRT_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "budget"));
	const char *o2[] = {"hugepages", "maybe", NULL};
	ck_assert_int_eq(tu_open("srt_tier_host.so", o2, &p, why, sizeof(why)), SRT_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "hugepages"));
}
END_TEST

/* --- keyed stores (file, sqlite) ------------------------------------------------------------- */

/* B_FILESEG: the file store with layout = segments (appended logs, one sync per put call) */
enum { B_FILE, B_SQLITE, B_FILESEG, N_BACKENDS };
static const char *const so_of[N_BACKENDS] = {"srt_tier_file.so", "srt_tier_sqlite.so",
					      "srt_tier_file.so"};

/* The location option of backend b under dir. */
static void location(int b, const char *dir, char *out, size_t n)
{
	snprintf(out, n, b != B_SQLITE ? "%s/store" : "%s/l3.db", dir);
}

static int open_store(int b, const char *dir, const char *max_bytes, struct tu_plugin *p)
{
	char loc[4096], why[512];
	location(b, dir, loc, sizeof(loc));
	const char *opts[] = {"path", loc, "layout", b == B_FILESEG ? "segments" : "files",
			      "max_bytes", max_bytes, NULL, NULL};
	if (!max_bytes)
		opts[4] = NULL;
	int rc = tu_open(so_of[b], opts, p, why, sizeof(why));
	if (rc)
		fprintf(stderr, "open %s: %s\n", so_of[b], why);
	return rc;
}

static void put_raw(struct tu_plugin *p, uint64_t i, size_t len)
{
	uint8_t *buf = malloc(len);
	struct srt_key k = tu_key(i);
	const void *bufs[1] = {buf};
	tu_fill(buf, len, i);
	ck_assert_int_eq(p->vt->put(p->inst, &k, 1, bufs, &len), 0);
	free(buf);
}

/* 1 when key i is present with the right bytes, 0 when absent; fails on wrong bytes. */
static int get_raw(struct tu_plugin *p, uint64_t i, size_t len)
{
	uint8_t *buf = malloc(len + 16), *want = malloc(len);
	struct srt_key k = tu_key(i);
	void *bufs[1] = {buf};
	size_t cap = len + 16, got = 99;
	tu_fill(want, len, i);
	ck_assert_int_eq(p->vt->get(p->inst, &k, 1, bufs, &cap, &got), 0);
	int present = got != 0;
	if (present) {
		ck_assert_uint_eq(got, len);
		ck_assert_mem_eq(buf, want, len);
	}
	free(buf);
	free(want);
	return present;
}

START_TEST(store_put_get_exists_remove_round_trip)
{
	char *dir = tu_tmpdir("rt");
	struct tu_plugin p;
	ck_assert_int_eq(open_store(_i, dir, NULL, &p), 0);
	ck_assert(p.desc->caps & SRT_CAP_KEYED_STORE);
	enum { N = 8 };
	struct srt_key keys[N];
	uint8_t data[N][5000], back[N][5000];
	const void *in[N];
	void *out[N];
	size_t lens[N], caps[N], got[N];
	for (int i = 0; i < N; i++) {
		keys[i] = tu_key((uint64_t)i);
		tu_fill(data[i], sizeof(data[i]), (uint64_t)i + 100);
		in[i] = data[i];
		out[i] = back[i];
		lens[i] = 1000 + 500 * (size_t)i;
		caps[i] = sizeof(back[i]);
	}
	ck_assert_int_eq(p.vt->put(p.inst, keys, N, in, lens), 0);
	ck_assert_int_eq(p.vt->get(p.inst, keys, N, out, caps, got), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_uint_eq(got[i], lens[i]);
		ck_assert_mem_eq(back[i], data[i], lens[i]);
	}
	/* one batch in reverse order with an absent key and a too small buffer among them (the
	 * segment store reads neighbours in one pread and must hand each its own bytes) */
	{
		struct srt_key rk[N + 1];
		void *ro[N + 1];
		size_t rc[N + 1], rg[N + 1];
		static uint8_t rb[N + 1][5000];
		for (int i = 0; i <= N; i++) {
			rk[i] = i == N / 2 ? tu_key(999) : keys[N - 1 - (i > N / 2 ? i - 1 : i)];
			ro[i] = rb[i];
			rc[i] = i == 1 ? 10 : sizeof(rb[i]);
		}
		ck_assert_int_eq(p.vt->get(p.inst, rk, N + 1, ro, rc, rg), 0);
		for (int i = 0; i <= N; i++) {
			int src = N - 1 - (i > N / 2 ? i - 1 : i);
			if (i == N / 2 || i == 1) {
				ck_assert_uint_eq(rg[i], 0); /* absent; larger than its buffer */
				continue;
			}
			ck_assert_uint_eq(rg[i], lens[src]);
			ck_assert_mem_eq(rb[i], data[src], lens[src]);
		}
	}
	/* Overwrite one object with new bytes of another length. */
	lens[2] = 77;
	tu_fill(data[2], 77, 555);
	ck_assert_int_eq(p.vt->put(p.inst, &keys[2], 1, &in[2], &lens[2]), 0);
	ck_assert_int_eq(p.vt->get(p.inst, &keys[2], 1, &out[2], &caps[2], &got[2]), 0);
	ck_assert_uint_eq(got[2], 77);
	ck_assert_mem_eq(back[2], data[2], 77);
	uint64_t bytes, objs;
	ck_assert_int_eq(p.vt->usage(p.inst, &bytes, &objs), 0);
	ck_assert_uint_eq(objs, N);
	uint64_t sum = 0;
	for (int i = 0; i < N; i++)
		sum += lens[i];
	ck_assert_uint_eq(bytes, sum);
	/* A buffer too small is a miss, not a partial copy. */
	size_t small = 10;
	ck_assert_int_eq(p.vt->get(p.inst, &keys[0], 1, &out[0], &small, &got[0]), 0);
	ck_assert_uint_eq(got[0], 0);
	/* Remove, including an absent key. */
	struct srt_key rm[2] = {keys[3], tu_key(999)};
	ck_assert_int_eq(p.vt->remove(p.inst, rm, 2), 0);
	ck_assert_int_eq(p.vt->get(p.inst, &keys[3], 1, &out[3], &caps[3], &got[3]), 0);
	ck_assert_uint_eq(got[3], 0);
	ck_assert_int_eq(p.vt->usage(p.inst, &bytes, &objs), 0);
	ck_assert_uint_eq(objs, N - 1);
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

START_TEST(store_exists_returns_the_longest_present_run)
{
	char *dir = tu_tmpdir("run");
	struct tu_plugin p;
	ck_assert_int_eq(open_store(_i, dir, NULL, &p), 0);
	struct srt_key keys[10];
	for (int i = 0; i < 10; i++)
		keys[i] = tu_key((uint64_t)i);
	uint32_t n = 99;
	ck_assert_int_eq(p.vt->exists(p.inst, keys, 10, &n), 0);
	ck_assert_uint_eq(n, 0);
	for (int i = 0; i < 10; i++)
		if (i != 6)
			put_raw(&p, (uint64_t)i, 100);
	ck_assert_int_eq(p.vt->exists(p.inst, keys, 10, &n), 0);
	ck_assert_uint_eq(n, 6); /* 0..5 present, 6 absent: 7..9 do not count */
	ck_assert_int_eq(p.vt->exists(p.inst, keys + 7, 3, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(p.vt->exists(p.inst, keys + 6, 4, &n), 0);
	ck_assert_uint_eq(n, 0);
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

START_TEST(store_lru_bound_is_respected_and_recent_gets_survive)
{
	char *dir = tu_tmpdir("lru");
	struct tu_plugin p;
	/* Room for 10 objects of 1000 bytes. */
	ck_assert_int_eq(open_store(_i, dir, "10000", &p), 0);
	for (uint64_t i = 0; i < 10; i++)
		put_raw(&p, i, 1000);
	ck_assert(get_raw(&p, 0, 1000)); /* object 0 becomes the most recent */
	for (uint64_t i = 10; i < 15; i++) {
		put_raw(&p, i, 1000);
		uint64_t bytes, objs;
		ck_assert_int_eq(p.vt->usage(p.inst, &bytes, &objs), 0);
		ck_assert_uint_le(bytes, 10000);
	}
	ck_assert(get_raw(&p, 0, 1000));
	for (uint64_t i = 1; i <= 5; i++) /* the five least recent were evicted */
		ck_assert_msg(!get_raw(&p, i, 1000), "object %d should have been evicted", (int)i);
	for (uint64_t i = 6; i < 15; i++)
		ck_assert(get_raw(&p, i, 1000));
	/* An object larger than the bound is refused. */
	uint8_t big[20000];
	struct srt_key k = tu_key(77);
	const void *bufs[1] = {big};
	size_t len = sizeof(big);
	ck_assert_int_eq(p.vt->put(p.inst, &k, 1, bufs, &len), SRT_ENOSPC);
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

START_TEST(store_survives_reopen_with_contents_and_recency)
{
	char *dir = tu_tmpdir("reopen");
	struct tu_plugin p;
	ck_assert_int_eq(open_store(_i, dir, "5000", &p), 0);
	for (uint64_t i = 0; i < 5; i++) {
		put_raw(&p, i, 1000);
		usleep(20000); /* distinct mtimes for the file store's scan */
	}
	ck_assert(get_raw(&p, 0, 1000)); /* 0 is now the most recent; 1 the least */
	tu_close(&p);

	ck_assert_int_eq(open_store(_i, dir, "5000", &p), 0);
	uint64_t bytes, objs;
	ck_assert_int_eq(p.vt->usage(p.inst, &bytes, &objs), 0);
	ck_assert_uint_eq(objs, 5);
	ck_assert_uint_eq(bytes, 5000);
	for (uint64_t i = 0; i < 5; i++) {
		ck_assert(get_raw(&p, i, 1000));
		usleep(20000); /* file mtimes tick coarsely (jiffies): keep the order visible */
	}
	tu_close(&p);
	/* Reopen, add one object: the least recent before the restart (1) goes. */
	ck_assert_int_eq(open_store(_i, dir, "5000", &p), 0);
	put_raw(&p, 0, 1000); /* refresh 0 so the order is 1,2,3,4 oldest first in both stores */
	put_raw(&p, 9, 1000);
	ck_assert(!get_raw(&p, 1, 1000));
	ck_assert(get_raw(&p, 0, 1000));
	ck_assert(get_raw(&p, 9, 1000));
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

/* The store client over a real plugin: payloads in, payloads out, bad objects rejected. */
START_TEST(store_client_rejects_logs_and_removes_bad_objects)
{
	char *dir = tu_tmpdir("client");
	struct tu_plugin p;
	struct srt_tier_store st;
	char why[256];
	ck_assert_int_eq(open_store(_i, dir, NULL, &p), 0);
	ck_assert_int_eq(srt_tier_store_init(&st, p.vt, p.inst, tu_host(), "tier.l3", 4, why,
					     sizeof(why)), 0);
	enum { N = 5, SZ = 4352 }; /* an FP4 indexer page: 64 x 68 B */
	struct srt_key keys[N];
	uint8_t data[N][SZ], back[N][SZ];
	const void *in[N];
	void *out[N];
	size_t lens[N], caps[N], got[N];
	for (int i = 0; i < N; i++) {
		keys[i] = tu_key((uint64_t)i);
		tu_fill(data[i], SZ, (uint64_t)i);
		in[i] = data[i];
		out[i] = back[i];
		lens[i] = caps[i] = SZ;
	}
	ck_assert_int_eq(srt_tier_store_put(&st, keys, N, in, lens), 0);
	ck_assert_int_eq(srt_tier_store_get(&st, keys, N, out, caps, got), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_uint_eq(got[i], SZ);
		ck_assert_mem_eq(back[i], data[i], SZ);
	}
	/* Replace objects 1..4 with bad ones, written raw through the plugin. */
	uint8_t obj[SRT_TIER_OBJ_HEADER_BYTES + SZ];
	const void *ob[1] = {obj};
	size_t ol;
	srt_tier_obj_encode(obj, &keys[1], 4, data[1], SZ); /* 1: truncated */
	ol = sizeof(obj) - 100;
	ck_assert_int_eq(p.vt->put(p.inst, &keys[1], 1, ob, &ol), 0);
	srt_tier_obj_encode(obj, &keys[0], 4, data[2], SZ); /* 2: foreign (key 0's header) */
	ol = sizeof(obj);
	ck_assert_int_eq(p.vt->put(p.inst, &keys[2], 1, ob, &ol), 0);
	srt_tier_obj_encode(obj, &keys[3], 3, data[3], SZ); /* 3: older layout version */
	ck_assert_int_eq(p.vt->put(p.inst, &keys[3], 1, ob, &ol), 0);
	srt_tier_obj_encode(obj, &keys[4], 4, data[4], SZ); /* 4: one payload bit flipped */
	obj[SRT_TIER_OBJ_HEADER_BYTES + 1234] ^= 0x10;
	ck_assert_int_eq(p.vt->put(p.inst, &keys[4], 1, ob, &ol), 0);

	tu_log_clear();
	ck_assert_int_eq(srt_tier_store_get(&st, keys, N, out, caps, got), 0);
	ck_assert_uint_eq(got[0], SZ);
	for (int i = 1; i < N; i++)
		ck_assert_msg(got[i] == 0, "bad object %d was served", i);
	ck_assert_uint_eq(atomic_load(&st.rejected), 4);
	ck_assert(tu_log_has("truncated"));
	ck_assert(tu_log_has("foreign"));
	ck_assert(tu_log_has("layout version 3"));
	ck_assert(tu_log_has("checksum mismatch"));
	uint32_t run;
	ck_assert_int_eq(srt_tier_store_exists(&st, keys + 1, 4, &run), 0);
	ck_assert_uint_eq(run, 0); /* removed */
	ck_assert_int_eq(srt_tier_store_exists(&st, keys, 1, &run), 0);
	ck_assert_uint_eq(run, 1);
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

/* Flip one byte of the stored bytes behind the plugin's back (in the file / in the blob). */
static void flip_stored_byte(int b, const char *dir, const struct srt_key *k, size_t off)
{
	char loc[4096];
	location(b, dir, loc, sizeof(loc));
	if (b == B_FILE) {
		char hex[65], path[4200];
		srt_tier_key_hex(k, hex);
		snprintf(path, sizeof(path), "%s/%.2s/%.2s/%s", loc, hex, hex + 2, hex);
		int fd = open(path, O_RDWR);
		ck_assert_int_ge(fd, 0);
		uint8_t c;
		ck_assert_int_eq(pread(fd, &c, 1, (off_t)off), 1);
		c ^= 0xff;
		ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)off), 1);
		close(fd);
	} else if (b == B_FILESEG) {
		/* the record header holds the key at byte 16; the object follows the 64-byte header */
		char cmd[4400];
		snprintf(cmd, sizeof(cmd), "cat '%s'/seg/*.log", loc);
		FILE *f = popen(cmd, "r");
		ck_assert_ptr_nonnull(f);
		static uint8_t all[1 << 20];
		size_t n = fread(all, 1, sizeof(all), f);
		pclose(f);
		uint8_t *hit = memmem(all, n, k->b, 32);
		ck_assert_ptr_nonnull(hit);
		size_t rec = (size_t)(hit - all) - 16;
		/* which segment file holds it: the stores here write one segment per process run */
		snprintf(cmd, sizeof(cmd), "ls '%s'/seg/*.log", loc);
		ck_assert_ptr_nonnull(f = popen(cmd, "r"));
		char seg[4300];
		size_t before = 0;
		while (fgets(seg, sizeof(seg), f)) {
			seg[strcspn(seg, "\n")] = 0;
			struct stat st;
			ck_assert_int_eq(stat(seg, &st), 0);
			if (rec < before + (size_t)st.st_size)
				break;
			before += (size_t)st.st_size;
		}
		pclose(f);
		int fd = open(seg, O_RDWR);
		ck_assert_int_ge(fd, 0);
		off_t at = (off_t)(rec - before + 64 + off);
		uint8_t c;
		ck_assert_int_eq(pread(fd, &c, 1, at), 1);
		c ^= 0xff;
		ck_assert_int_eq(pwrite(fd, &c, 1, at), 1);
		close(fd);
	} else {
		sqlite3 *db;
		sqlite3_stmt *st;
		ck_assert_int_eq(sqlite3_open(loc, &db), SQLITE_OK);
		sqlite3_busy_timeout(db, 2000);
		ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT data FROM pages WHERE key = ?1", -1, &st,
						    NULL), SQLITE_OK);
		sqlite3_bind_blob(st, 1, k->b, 32, SQLITE_STATIC);
		ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
		int n = sqlite3_column_bytes(st, 0);
		uint8_t *blob = malloc((size_t)n);
		memcpy(blob, sqlite3_column_blob(st, 0), (size_t)n);
		sqlite3_finalize(st);
		blob[off] ^= 0xff;
		ck_assert_int_eq(sqlite3_prepare_v2(db, "UPDATE pages SET data = ?2 WHERE key = ?1", -1,
						    &st, NULL), SQLITE_OK);
		sqlite3_bind_blob(st, 1, k->b, 32, SQLITE_STATIC);
		sqlite3_bind_blob(st, 2, blob, n, SQLITE_STATIC);
		ck_assert_int_eq(sqlite3_step(st), SQLITE_DONE);
		sqlite3_finalize(st);
		sqlite3_close(db);
		free(blob);
	}
}

START_TEST(store_corrupted_bytes_on_disk_are_rejected)
{
	char *dir = tu_tmpdir("corrupt");
	struct tu_plugin p;
	struct srt_tier_store st;
	char why[256];
	ck_assert_int_eq(open_store(_i, dir, NULL, &p), 0);
	ck_assert_int_eq(srt_tier_store_init(&st, p.vt, p.inst, tu_host(), "tier.l3", 1, why,
					     sizeof(why)), 0);
	enum { N = 4, SZ = 2000 };
	struct srt_key keys[N];
	uint8_t data[N][SZ], back[N][SZ];
	const void *in[N];
	void *out[N];
	size_t lens[N], caps[N], got[N];
	for (int i = 0; i < N; i++) {
		keys[i] = tu_key((uint64_t)i + 40);
		tu_fill(data[i], SZ, (uint64_t)i);
		in[i] = data[i];
		out[i] = back[i];
		lens[i] = caps[i] = SZ;
	}
	ck_assert_int_eq(srt_tier_store_put(&st, keys, N, in, lens), 0);
	tu_close(&p);
	/* Damage header magic, header key, header length, payload. */
	flip_stored_byte(_i, dir, &keys[0], 1);
	flip_stored_byte(_i, dir, &keys[1], 20);
	flip_stored_byte(_i, dir, &keys[2], 50);
	flip_stored_byte(_i, dir, &keys[3], SRT_TIER_OBJ_HEADER_BYTES + SZ - 1);
	ck_assert_int_eq(open_store(_i, dir, NULL, &p), 0);
	st.vt = p.vt;
	st.inst = p.inst;
	ck_assert_int_eq(srt_tier_store_get(&st, keys, N, out, caps, got), 0);
	for (int i = 0; i < N; i++)
		ck_assert_msg(got[i] == 0, "corrupted object %d was served", i);
	ck_assert_uint_eq(atomic_load(&st.rejected), N);
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

struct hammer {
	struct tu_plugin *p;
	int id, bad;
};

/* Each thread puts and reads back its own keys and reads the others' keys. */
static void *hammer(void *arg)
{
	struct hammer *h = arg;
	enum { SZ = 4352 };
	static _Thread_local uint8_t data[SZ], back[SZ];
	for (int it = 0; it < 150; it++) {
		uint64_t mine = (uint64_t)h->id * 1000 + (uint64_t)(it % 50);
		struct srt_key k = tu_key(mine);
		const void *in[1] = {data};
		void *out[1] = {back};
		size_t len = SZ, cap = SZ, got;
		tu_fill(data, SZ, mine);
		if (h->p->vt->put(h->p->inst, &k, 1, in, &len))
			h->bad++;
		if (h->p->vt->get(h->p->inst, &k, 1, out, &cap, &got) || got != SZ ||
		    memcmp(back, data, SZ))
			h->bad++;
		uint64_t other = (uint64_t)((h->id + 1) % 4) * 1000 + (uint64_t)(it % 50);
		k = tu_key(other);
		if (h->p->vt->get(h->p->inst, &k, 1, out, &cap, &got))
			h->bad++;
		if (got) { /* present: must be exactly the other thread's bytes */
			tu_fill(data, SZ, other);
			if (got != SZ || memcmp(back, data, SZ))
				h->bad++;
		}
	}
	return NULL;
}

START_TEST(store_is_safe_under_concurrent_callers)
{
	char *dir = tu_tmpdir("threads");
	struct tu_plugin p;
	ck_assert_int_eq(open_store(_i, dir, NULL, &p), 0);
	pthread_t t[4];
	struct hammer h[4];
	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){.p = &p, .id = i};
		ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, &h[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(h[i].bad == 0, "thread %d saw %d failures", i, h[i].bad);
	}
	uint64_t bytes, objs;
	ck_assert_int_eq(p.vt->usage(p.inst, &bytes, &objs), 0);
	ck_assert_uint_eq(objs, 200);
	ck_assert_uint_eq(bytes, 200 * 4352);
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

/* --- faults ---------------------------------------------------------------------------------- */

/* Loop index: backend, plus N_BACKENDS for puts of 16 objects per call (the L3 writer's
 * batches: one transaction, one pipeline, one file-system sync per batch). */
START_TEST(store_writer_killed_mid_write_leaves_no_corrupt_object)
{
	int b = _i % N_BACKENDS;
	uint32_t batch = _i >= N_BACKENDS ? 16 : 1;
	char *dir = tu_tmpdir("kill");
	enum { SZ = 37376 }; /* C4 page */
	int prog[2]; /* the writer reports each stored call, so the kill lands mid-run under load */
	ck_assert_int_eq(pipe(prog), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(prog[0]); /* the writer: put objects forever through the store client */
		struct tu_plugin p;
		struct srt_tier_store st;
		char why[256];
		static uint8_t data[SZ];
		if (open_store(b, dir, NULL, &p) ||
		    srt_tier_store_init(&st, p.vt, p.inst, tu_host(), "w", 1, why, sizeof(why)))
			_exit(3);
		static uint8_t many[16][SZ];
		(void)data;
		for (uint64_t i = 0;; i += batch) {
			struct srt_key k[16];
			const void *in[16];
			size_t len[16];
			for (uint32_t j = 0; j < batch; j++) {
				k[j] = tu_key((i + j) % 4000);
				in[j] = many[j];
				len[j] = SZ;
				tu_fill(many[j], SZ, (i + j) % 4000);
			}
			if (!srt_tier_store_put(&st, k, batch, in, len) && write(prog[1], "x", 1) < 0)
				_exit(4);
		}
	}
	close(prog[1]);
	char x[3];
	for (size_t got = 0; got < sizeof(x);) { /* three calls stored, then kill soon after */
		ssize_t r = read(prog[0], x + got, sizeof(x) - got);
		ck_assert_int_gt(r, 0);
		got += (size_t)r;
	}
	usleep(20000);
	kill(pid, SIGKILL);
	close(prog[0]);
	int status;
	waitpid(pid, &status, 0);
	ck_assert(WIFSIGNALED(status));

	struct tu_plugin p;
	struct srt_tier_store st;
	char why[256];
	ck_assert_int_eq(open_store(b, dir, NULL, &p), 0);
	ck_assert_int_eq(srt_tier_store_init(&st, p.vt, p.inst, tu_host(), "r", 1, why, sizeof(why)), 0);
	static uint8_t back[SZ], want[SZ];
	void *out[1] = {back};
	size_t cap = SZ, got;
	int served = 0;
	for (uint64_t i = 0; i < 4000; i++) {
		struct srt_key k = tu_key(i);
		ck_assert_int_eq(srt_tier_store_get(&st, &k, 1, out, &cap, &got), 0);
		if (!got)
			continue;
		tu_fill(want, SZ, i);
		ck_assert_uint_eq(got, SZ);
		ck_assert_mem_eq(back, want, SZ);
		served++;
	}
	ck_assert_int_gt(served, 0); /* the writer got somewhere */
	ck_assert_uint_eq(atomic_load(&st.rejected), 0); /* and left nothing half written */
	/* Still usable. */
	struct srt_key k = tu_key(123456);
	const void *in[1] = {want};
	size_t len = SZ;
	ck_assert_int_eq(srt_tier_store_put(&st, &k, 1, in, &len), 0);
	ck_assert_int_eq(srt_tier_store_get(&st, &k, 1, out, &cap, &got), 0);
	ck_assert_uint_eq(got, SZ);
	if (b == B_FILE) { /* the temp file of the killed write was cleaned up */
		char tmp[4200];
		snprintf(tmp, sizeof(tmp), "%s/store/tmp", dir);
		ck_assert_int_eq(rmdir(tmp), 0); /* empty */
	}
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

/* Opening a file store (a second process starting on the same directory) removes the temp
 * files of dead writers only: a live process's write in progress keeps its temp file. */
START_TEST(file_store_open_keeps_the_temp_files_of_live_writers)
{
	char *dir = tu_tmpdir("livetmp");
	char root[4200], tmpd[4300], live[4400], dead[4400];
	snprintf(root, sizeof(root), "%s/store", dir);
	snprintf(tmpd, sizeof(tmpd), "%s/tmp", root);
	ck_assert_int_eq(mkdir(root, 0755), 0);
	ck_assert_int_eq(mkdir(tmpd, 0755), 0);
	pid_t child = fork(); /* a pid that is certainly dead once reaped */
	ck_assert_int_ge(child, 0);
	if (child == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(child, NULL, 0), child);
	snprintf(live, sizeof(live), "%s/%064d.%ld.0", tmpd, 1, (long)getppid());
	snprintf(dead, sizeof(dead), "%s/%064d.%ld.0", tmpd, 2, (long)child);
	FILE *f = fopen(live, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	ck_assert_ptr_nonnull(f = fopen(dead, "w"));
	fclose(f);
	struct tu_plugin p;
	ck_assert_int_eq(open_store(B_FILE, dir, NULL, &p), 0);
	ck_assert_msg(access(live, F_OK) == 0, "the live writer's temp file %s was deleted", live);
	ck_assert_msg(access(dead, F_OK) != 0, "the dead writer's temp file %s was kept", dead);
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

/*
 * A private mount namespace, so a tmpfs mounted by this (forked) test vanishes with it.
 * Returns 0 when mounting is possible here (root or CAP_SYS_ADMIN).
 */
static int private_mounts(void)
{
	if (unshare(CLONE_NEWNS))
		return -1;
	return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
}

/* Loop index as for the kill test: plus N_BACKENDS for batches of 8 objects per put. */
START_TEST(store_full_disk_fails_with_enospc_and_a_logged_reason)
{
	int b = _i % N_BACKENDS;
	uint32_t batch = _i >= N_BACKENDS ? 8 : 1;
	char *dir = tu_tmpdir("full");
	int mounted = 0;
	if (!private_mounts() && !mount("tmpfs", dir, "tmpfs", 0, "size=1m"))
		mounted = 1;
	else /* no mount rights: a file-size limit makes writes fail with EFBIG instead */
		fprintf(stderr, "note: no tmpfs mount here; simulating a full disk with RLIMIT_FSIZE\n");
	struct tu_plugin p;
	ck_assert_int_eq(open_store(b, dir, NULL, &p), 0);
	enum { SZ = 37376 };
	static uint8_t data[SZ];
	int rc = 0, stored = 0;
	tu_log_clear();
	for (uint64_t i = 0; i < 200 && !rc; i++) {
		if (!mounted && i == 3) { /* files may not grow past 16 KiB from now on */
			signal(SIGXFSZ, SIG_IGN);
			struct rlimit rl = {16384, 16384};
			ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
		}
		if (batch > 1) { /* objects i..i+batch-1 in one call */
			static uint8_t many[8][SZ];
			struct srt_key k[8];
			const void *in[8];
			size_t len[8];
			for (uint32_t j = 0; j < batch; j++) {
				k[j] = tu_key(i + j);
				in[j] = many[j];
				len[j] = SZ;
				tu_fill(many[j], SZ, i + j);
			}
			rc = p.vt->put(p.inst, k, batch, in, len);
			for (uint32_t j = 0; j < batch; j++) /* get_raw fails on wrong bytes */
				if (get_raw(&p, i + j, SZ))
					stored++;
			i += batch - 1;
			continue;
		}
		struct srt_key k = tu_key(i);
		const void *in[1] = {data};
		size_t len = SZ;
		tu_fill(data, SZ, i);
		rc = p.vt->put(p.inst, &k, 1, in, &len);
		if (!rc)
			stored++;
	}
	if (mounted || b != B_SQLITE)
		ck_assert_int_eq(rc, SRT_ENOSPC);
	else /* SQLite reports a write past RLIMIT_FSIZE as a plain I/O error, without errno */
		ck_assert(rc == SRT_ENOSPC || rc == SRT_EIO);
	ck_assert_int_gt(stored, 0);
	ck_assert(mounted ? tu_log_has("No space left on device") || tu_log_has("disk is full")
			  : tu_log_has("too large") || tu_log_has("I/O error"));
	/* What was stored before the disk filled up is still served intact. */
	for (uint64_t i = 0; i < (uint64_t)stored; i++)
		ck_assert(get_raw(&p, i, SZ) || batch > 1); /* a failed batch may leave holes */
	if (b == B_FILE && batch == 1) {
		/* A run of failures is logged once, not once per put; the first success after it
		 * says how many failed. */
		ck_assert_int_eq(tu_log_count("failed:"), 1);
		for (uint64_t i = 1000; i < 1020; i++) {
			struct srt_key k = tu_key(i);
			const void *in[1] = {data};
			size_t len = SZ;
			ck_assert_int_ne(p.vt->put(p.inst, &k, 1, in, &len), 0);
		}
		ck_assert_int_eq(tu_log_count("failed:"), 1);
		struct srt_key k0 = tu_key(0);
		ck_assert_int_eq(p.vt->remove(p.inst, &k0, 1), 0);
		if (!mounted) { /* lift the simulated limit */
			struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
			setrlimit(RLIMIT_FSIZE, &rl);
		}
		struct srt_key k = tu_key(0);
		const void *in[1] = {data};
		size_t len = SZ;
		tu_fill(data, SZ, 0);
		ck_assert_int_eq(p.vt->put(p.inst, &k, 1, in, &len), 0);
		ck_assert(tu_log_has("puts succeed again after 21 failed"));
	}
	tu_close(&p);
	if (mounted)
		umount(dir);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

START_TEST(store_read_only_directory_fails_with_eio_and_a_logged_reason)
{
	char *dir = tu_tmpdir("ro");
	int mounted = !private_mounts() && !mount("tmpfs", dir, "tmpfs", 0, "size=4m");
	struct tu_plugin p;
	ck_assert_int_eq(open_store(_i, dir, NULL, &p), 0);
	put_raw(&p, 1, 3000);
	tu_close(&p);
	if (mounted) {
		ck_assert_int_eq(mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
	} else { /* not root: permissions are enough */
		tu_chmod_dirs(dir, 0555);
		ck_assert_msg(geteuid() != 0, "cannot make a read-only directory here");
	}
	tu_log_clear();
	int rc = open_store(_i, dir, NULL, &p);
	if (_i == B_SQLITE && rc) {
		/* SQLite may refuse to open a WAL database it cannot write: that is the EIO too. */
		ck_assert_int_eq(rc, SRT_EIO);
	} else {
		ck_assert_int_eq(rc, 0);
		ck_assert(get_raw(&p, 1, 3000)); /* reads still work */
		struct srt_key k = tu_key(2);
		uint8_t data[100] = {0};
		const void *in[1] = {data};
		size_t len = sizeof(data);
		ck_assert_int_eq(p.vt->put(p.inst, &k, 1, in, &len), SRT_EIO);
		ck_assert(tu_log_has(mounted ? "Read-only file system" : "ermission denied") ||
			  tu_log_has("readonly") || tu_log_has("read-only"));
		tu_close(&p);
	}
	if (mounted)
		umount(dir);
	else
		tu_chmod_dirs(dir, 0755);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

/* The segment layout: a torn tail is cut at open (what came before is served), a second process
 * is refused with the reason, and deleted or evicted objects' space is given back. */
static uint64_t seg_disk_bytes(const char *loc)
{
	char cmd[4400];
	snprintf(cmd, sizeof(cmd), "cat '%s'/seg/*.log | wc -c", loc);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	unsigned long long n = 0;
	ck_assert_int_eq(fscanf(f, "%llu", &n), 1);
	pclose(f);
	return n;
}

START_TEST(file_segments_cut_a_torn_tail_refuse_a_second_opener_and_give_space_back)
{
	char *dir = tu_tmpdir("seg");
	char loc[4200], why[512];
	location(B_FILESEG, dir, loc, sizeof(loc));
	struct tu_plugin p, q;
	ck_assert_int_eq(open_store(B_FILESEG, dir, NULL, &p), 0);
	for (uint64_t i = 0; i < 4; i++)
		put_raw(&p, i, 3000);
	/* a second opener of the same directory is refused, saying why */
	const char *opts[] = {"path", loc, "layout", "segments", NULL};
	ck_assert_int_eq(tu_open("srt_tier_file.so", opts, &q, why, sizeof(why)), SRT_EIO);
	ck_assert_msg(strstr(why, "in use by another process"), "%s", why);
	tu_close(&p);
	/* a write cut short: half a record header and a record whose payload runs past the end */
	char cmd[4400];
	snprintf(cmd, sizeof(cmd), "for f in '%s'/seg/*.log; do last=$f; done; "
		 "head -c 3064 \"$last\" | tail -c 3064 | head -c 100 >> \"$last\"", loc);
	ck_assert_int_eq(system(cmd), 0);
	tu_log_clear();
	ck_assert_int_eq(open_store(B_FILESEG, dir, NULL, &p), 0);
	ck_assert(tu_log_has("torn or damaged record"));
	for (uint64_t i = 0; i < 4; i++)
		ck_assert(get_raw(&p, i, 3000));
	put_raw(&p, 9, 3000); /* and the store goes on */
	ck_assert(get_raw(&p, 9, 3000));
	tu_close(&p);
	/* space: 200 objects through a 10-object bound with small segments; the files stay
	 * within about twice the bound plus two segments */
	tu_rmrf(dir);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	const char *o2[] = {"path", loc, "layout", "segments", "max_bytes", "30000",
			    "segment_bytes", "16384", NULL};
	ck_assert_int_eq(tu_open("srt_tier_file.so", o2, &p, why, sizeof(why)), 0);
	for (uint64_t i = 0; i < 200; i++) {
		put_raw(&p, 1000 + i, 3000);
		ck_assert_uint_le(seg_disk_bytes(loc), 2 * 30000 + 2 * 16384 + 2 * (3000 + 64));
	}
	for (uint64_t i = 190; i < 200; i++)
		ck_assert(get_raw(&p, 1000 + i, 3000));
	tu_close(&p);
	tu_rmrf(dir);
	free(dir);
}
END_TEST

static Suite *tier_suite(void)
{
	Suite *s = suite_create("tier");
	TCase *tc = tcase_create("hash_key_object");
	tcase_add_test(tc, sha256_matches_fips_180_4_vectors);
	tcase_add_test(tc, sha256_streaming_in_any_split_equals_one_shot);
	tcase_add_test(tc, xxh64_matches_published_vectors);
	tcase_add_test(tc, key_equals_sha256_of_the_documented_encoding);
	tcase_add_test(tc, key_changes_with_every_input_and_chains);
	tcase_add_test(tc, object_round_trips_and_every_flipped_bit_is_rejected);
	tcase_add_test(tc, object_rejects_truncated_foreign_and_wrong_version);
	suite_add_tcase(s, tc);

	tc = tcase_create("host");
	tcase_add_test(tc, host_pages_are_distinct_copyable_and_reused);
	tcase_add_test(tc, host_budget_is_a_hard_limit_and_frees_make_room_for_any_size);
	tcase_add_test(tc, host_hugepages_option_gives_2mib_aligned_slabs);
	tcase_add_test(tc, host_rejects_bad_options_with_the_key);
	tcase_add_test(tc, host_resident_memory_stays_within_the_budget_given_by_set_budget);
	suite_add_tcase(s, tc);

	tc = tcase_create("keyed_stores"); /* loop index: 0 = file, 1 = sqlite */
	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, store_put_get_exists_remove_round_trip, 0, N_BACKENDS);
	tcase_add_loop_test(tc, store_exists_returns_the_longest_present_run, 0, N_BACKENDS);
	tcase_add_loop_test(tc, store_lru_bound_is_respected_and_recent_gets_survive, 0, N_BACKENDS);
	tcase_add_loop_test(tc, store_survives_reopen_with_contents_and_recency, 0, N_BACKENDS);
	tcase_add_loop_test(tc, store_client_rejects_logs_and_removes_bad_objects, 0, N_BACKENDS);
	tcase_add_loop_test(tc, store_corrupted_bytes_on_disk_are_rejected, 0, N_BACKENDS);
	tcase_add_loop_test(tc, store_is_safe_under_concurrent_callers, 0, N_BACKENDS);
	suite_add_tcase(s, tc);

	tc = tcase_create("faults");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, store_writer_killed_mid_write_leaves_no_corrupt_object, 0,
			    2 * N_BACKENDS);
	tcase_add_test(tc, file_store_open_keeps_the_temp_files_of_live_writers);
	tcase_add_test(tc, file_segments_cut_a_torn_tail_refuse_a_second_opener_and_give_space_back);
	tcase_add_loop_test(tc, store_full_disk_fails_with_enospc_and_a_logged_reason, 0,
			    2 * N_BACKENDS);
	tcase_add_loop_test(tc, store_read_only_directory_fails_with_eio_and_a_logged_reason, 0,
			    N_BACKENDS);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tier_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
