/*
 * Tests of the redis tier plugin against a real redis-server that this program starts on a
 * free loopback port (no persistence) and kills at the end. Exit code 77 (ctest: skipped) only
 * when redis-server is not installed.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "tier/object.h"
#include "tier/store.h"
#include "tier_util.h"

static char port_s[16];

static int open_redis(const char *port, const char *prefix, struct tu_plugin *p)
{
	char why[512];
	const char *opts[] = {"host", "127.0.0.1", "port", port, "prefix", prefix,
			      "timeout_ms", "500", NULL};
	int rc = tu_open("srt_tier_redis.so", opts, p, why, sizeof(why));
	if (rc)
		fprintf(stderr, "open redis: %s\n", why);
	return rc;
}

START_TEST(redis_put_get_remove_round_trip)
{
	struct tu_plugin p;
	ck_assert_int_eq(open_redis(port_s, "rt:", &p), 0);
	enum { N = 300, SZ = 1168 }; /* more than one pipelined chunk; a C128 page (2 x 584 B) */
	static struct srt_key keys[N];
	static uint8_t data[N][SZ], back[N][SZ];
	static const void *in[N];
	static void *out[N];
	static size_t lens[N], caps[N], got[N];
	for (int i = 0; i < N; i++) {
		keys[i] = tu_key((uint64_t)i);
		tu_fill(data[i], SZ, (uint64_t)i);
		in[i] = data[i];
		out[i] = back[i];
		lens[i] = SZ - (size_t)(i % 7);
		caps[i] = SZ;
	}
	ck_assert_int_eq(p.vt->put(p.inst, keys, N, in, lens), 0);
	ck_assert_int_eq(p.vt->get(p.inst, keys, N, out, caps, got), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_uint_eq(got[i], lens[i]);
		ck_assert_mem_eq(back[i], data[i], lens[i]);
	}
	caps[5] = 10; /* too small: a miss */
	ck_assert_int_eq(p.vt->get(p.inst, keys, N, out, caps, got), 0);
	ck_assert_uint_eq(got[5], 0);
	ck_assert_uint_eq(got[6], lens[6]);
	ck_assert_int_eq(p.vt->remove(p.inst, keys, 10), 0);
	caps[5] = SZ;
	ck_assert_int_eq(p.vt->get(p.inst, keys, 11, out, caps, got), 0);
	for (int i = 0; i < 10; i++)
		ck_assert_uint_eq(got[i], 0);
	ck_assert_uint_eq(got[10], lens[10]);
	/* Another prefix is another namespace. */
	struct tu_plugin q;
	ck_assert_int_eq(open_redis(port_s, "other:", &q), 0);
	uint32_t n;
	ck_assert_int_eq(q.vt->exists(q.inst, keys + 10, 5, &n), 0);
	ck_assert_uint_eq(n, 0);
	tu_close(&q);
	tu_close(&p);
}
END_TEST

START_TEST(redis_exists_returns_the_longest_present_run)
{
	struct tu_plugin p;
	ck_assert_int_eq(open_redis(port_s, "run:", &p), 0);
	enum { N = 200 };
	static struct srt_key keys[N];
	uint8_t b[64] = {1};
	for (int i = 0; i < N; i++) {
		keys[i] = tu_key((uint64_t)i);
		if (i == 150)
			continue;
		const void *in[1] = {b};
		size_t len = sizeof(b);
		ck_assert_int_eq(p.vt->put(p.inst, &keys[i], 1, in, &len), 0);
	}
	uint32_t n;
	ck_assert_int_eq(p.vt->exists(p.inst, keys, N, &n), 0);
	ck_assert_uint_eq(n, 150); /* crosses a pipeline chunk (128) */
	ck_assert_int_eq(p.vt->exists(p.inst, keys + 151, 49, &n), 0);
	ck_assert_uint_eq(n, 49);
	ck_assert_int_eq(p.vt->exists(p.inst, keys + 150, 50, &n), 0);
	ck_assert_uint_eq(n, 0);
	tu_close(&p);
}
END_TEST

START_TEST(redis_bad_objects_are_rejected_logged_and_removed)
{
	struct tu_plugin p;
	struct srt_tier_store st;
	char why[256];
	ck_assert_int_eq(open_redis(port_s, "bad:", &p), 0);
	ck_assert_int_eq(srt_tier_store_init(&st, p.vt, p.inst, tu_host(), "tier.l3", 2, why,
					     sizeof(why)), 0);
	enum { SZ = 4352 };
	uint8_t data[SZ], back[SZ], obj[SRT_TIER_OBJ_HEADER_BYTES + SZ];
	struct srt_key k[3] = {tu_key(1), tu_key(2), tu_key(3)};
	tu_fill(data, SZ, 1);
	const void *in[1] = {data};
	void *out[1] = {back};
	size_t len = SZ, cap = SZ, got;
	ck_assert_int_eq(srt_tier_store_put(&st, &k[0], 1, in, &len), 0);
	ck_assert_int_eq(srt_tier_store_get(&st, &k[0], 1, out, &cap, &got), 0);
	ck_assert_uint_eq(got, SZ);
	ck_assert_mem_eq(back, data, SZ);
	/* Corrupt objects written raw: a flipped payload byte, a foreign key. */
	const void *ob[1] = {obj};
	size_t ol = sizeof(obj);
	srt_tier_obj_encode(obj, &k[1], 2, data, SZ);
	obj[SRT_TIER_OBJ_HEADER_BYTES + 7] ^= 1;
	ck_assert_int_eq(p.vt->put(p.inst, &k[1], 1, ob, &ol), 0);
	srt_tier_obj_encode(obj, &k[0], 2, data, SZ);
	ck_assert_int_eq(p.vt->put(p.inst, &k[2], 1, ob, &ol), 0);
	tu_log_clear();
	for (int i = 1; i < 3; i++) {
		ck_assert_int_eq(srt_tier_store_get(&st, &k[i], 1, out, &cap, &got), 0);
		ck_assert_uint_eq(got, 0);
	}
	ck_assert(tu_log_has("checksum mismatch"));
	ck_assert(tu_log_has("foreign"));
	uint32_t n;
	ck_assert_int_eq(p.vt->exists(p.inst, &k[1], 1, &n), 0);
	ck_assert_uint_eq(n, 0);
	tu_close(&p);
}
END_TEST

START_TEST(redis_server_loss_is_eio_logged_then_reconnects)
{
	int port = tu_free_port();
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	pid_t srv = tu_redis_start(port);
	ck_assert_int_gt(srv, 0);
	struct tu_plugin p;
	ck_assert_int_eq(open_redis(ps, "loss:", &p), 0);
	struct srt_key k = tu_key(1);
	uint8_t data[1000], back[1000];
	tu_fill(data, sizeof(data), 5);
	const void *in[1] = {data};
	void *out[1] = {back};
	size_t len = sizeof(data), cap = sizeof(back), got = 1;
	uint32_t n;
	ck_assert_int_eq(p.vt->put(p.inst, &k, 1, in, &len), 0);

	tu_redis_stop(srv); /* the server dies mid-run */
	tu_log_clear();
	ck_assert_int_eq(p.vt->get(p.inst, &k, 1, out, &cap, &got), SRT_EIO);
	ck_assert_uint_eq(got, 0);
	ck_assert(tu_log_has("will reconnect") || tu_log_has("cannot connect"));
	tu_log_clear();
	ck_assert_int_eq(p.vt->put(p.inst, &k, 1, in, &len), SRT_EIO);
	ck_assert(tu_log_has("cannot connect")); /* the write connection's retry */
	ck_assert_int_eq(p.vt->exists(p.inst, &k, 1, &n), SRT_EIO);

	srv = tu_redis_start(port); /* back on the same port, empty (no persistence) */
	ck_assert_int_gt(srv, 0);
	ck_assert_int_eq(p.vt->exists(p.inst, &k, 1, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(p.vt->put(p.inst, &k, 1, in, &len), 0);
	ck_assert_int_eq(p.vt->get(p.inst, &k, 1, out, &cap, &got), 0);
	ck_assert_uint_eq(got, sizeof(data));
	ck_assert_mem_eq(back, data, sizeof(data));
	tu_close(&p);
	tu_redis_stop(srv);
}
END_TEST

/* A full server refuses every SET: the first refusal is logged, the rest are counted (one line
 * per 1000), and the first put that succeeds afterwards says how many were refused. */
static void redis_cmd(int port, const char *cmd)
{
	struct timeval tv = {2, 0};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	ck_assert(c && !c->err);
	redisReply *r = redisCommand(c, cmd);
	ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "%s: %s", cmd, r ? r->str : c->errstr);
	freeReplyObject(r);
	redisFree(c);
}

START_TEST(redis_refused_sets_are_logged_once_per_run_with_a_count)
{
	int port = tu_free_port();
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	pid_t srv = tu_redis_start(port);
	ck_assert_int_gt(srv, 0);
	struct tu_plugin p;
	ck_assert_int_eq(open_redis(ps, "full:", &p), 0);
	redis_cmd(port, "CONFIG SET maxmemory-policy noeviction");
	redis_cmd(port, "CONFIG SET maxmemory 1");
	uint8_t data[1000];
	tu_fill(data, sizeof(data), 9);
	const void *in[1] = {data};
	size_t len = sizeof(data);
	tu_log_clear();
	for (uint64_t i = 0; i < 30; i++) {
		struct srt_key k = tu_key(100 + i);
		ck_assert_int_eq(p.vt->put(p.inst, &k, 1, in, &len), SRT_ENOSPC);
	}
	ck_assert_int_eq(tu_log_count("refused"), 1);
	ck_assert(tu_log_has("OOM"));
	redis_cmd(port, "CONFIG SET maxmemory 0");
	struct srt_key k = tu_key(200);
	ck_assert_int_eq(p.vt->put(p.inst, &k, 1, in, &len), 0);
	ck_assert(tu_log_has("SETs succeed again after 30 refused"));
	tu_close(&p);
	tu_redis_stop(srv);
}
END_TEST

START_TEST(redis_unreachable_server_is_an_outage_or_with_require_server_fails_create)
{
	int port = tu_free_port(); /* nothing listens there */
	char ps[16], why[512];
	snprintf(ps, sizeof(ps), "%d", port);
	struct tu_plugin p;
	char want[64];
	snprintf(want, sizeof(want), "127.0.0.1:%d", port);
	/* require_server = yes: create fails naming the address */
	const char *req[] = {"port", ps, "timeout_ms", "200", "require_server", "yes", NULL};
	ck_assert_int_eq(tu_open("srt_tier_redis.so", req, &p, why, sizeof(why)), SRT_EIO);
	ck_assert_ptr_nonnull(strstr(why, want));
	/* default: the store opens with a warning naming the address; calls fail with SRT_EIO
	 * until the server is up, then work */
	tu_log_clear();
	const char *opts[] = {"port", ps, "timeout_ms", "200", NULL};
	ck_assert_int_eq(tu_open("srt_tier_redis.so", opts, &p, why, sizeof(why)), 0);
	ck_assert(tu_log_has(want));
	struct srt_key k = tu_key(7);
	uint32_t present = 9;
	ck_assert_int_eq(p.vt->exists(p.inst, &k, 1, &present), SRT_EIO);
	pid_t srv = tu_redis_start(port);
	ck_assert_int_gt(srv, 0);
	uint8_t data[64] = {1, 2, 3};
	const void *in[1] = {data};
	size_t len = sizeof(data);
	ck_assert_int_eq(p.vt->put(p.inst, &k, 1, in, &len), 0);
	ck_assert_int_eq(p.vt->exists(p.inst, &k, 1, &present), 0);
	ck_assert_uint_eq(present, 1);
	tu_close(&p);
	tu_redis_stop(srv);
	const char *badreq[] = {"port", ps, "require_server", "maybe", NULL};
	ck_assert_int_eq(tu_open("srt_tier_redis.so", badreq, &p, why, sizeof(why)), SRT_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "require_server"));
	const char *bad[] = {"port", "70000", NULL};
	ck_assert_int_eq(tu_open("srt_tier_redis.so", bad, &p, why, sizeof(why)), SRT_EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "port"));
}
END_TEST

int main(void)
{
	if (!tu_redis_server()) {
		fprintf(stderr, "redis-server is not installed: skipping the redis tier tests\n");
		return 77;
	}
	int port = tu_free_port();
	pid_t srv = tu_redis_start(port);
	if (srv <= 0) {
		fprintf(stderr, "could not start redis-server on 127.0.0.1:%d\n", port);
		return EXIT_FAILURE;
	}
	snprintf(port_s, sizeof(port_s), "%d", port);

	Suite *s = suite_create("tier_redis");
	TCase *tc = tcase_create("redis");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, redis_put_get_remove_round_trip);
	tcase_add_test(tc, redis_exists_returns_the_longest_present_run);
	tcase_add_test(tc, redis_bad_objects_are_rejected_logged_and_removed);
	tcase_add_test(tc, redis_server_loss_is_eio_logged_then_reconnects);
	tcase_add_test(tc, redis_refused_sets_are_logged_once_per_run_with_a_count);
	tcase_add_test(tc, redis_unreachable_server_is_an_outage_or_with_require_server_fails_create);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	tu_redis_stop(srv);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
