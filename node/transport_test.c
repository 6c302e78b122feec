/* Transport: real nng sockets on loopback. Echo round trips, many calls in
 * flight at once, refusal of a wrong secret or cluster name, refusal of an
 * oversized message, fast failure for an unreachable peer, deadlines. */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/cm_sys.h"
#include "node/nd_transport.h"
#include "proto/pr.h"

static void
serve(void *ctx, uint32_t type, const uint8_t *payload, size_t len, uint64_t deadline_ns,
      cm_buf *reply, uint32_t *reply_type)
{
	(void)ctx;
	(void)deadline_ns;
	if (type == 99) /* slow request */
		usleep(300 * 1000);
	cm_buf_put(reply, payload, len);
	*reply_type = type + 1;
}

typedef struct {
	_Atomic int ok, failed;
} tally;

static void
count_cb(void *arg, cm_err rc, uint32_t type, const uint8_t *payload, size_t len)
{
	tally *t = arg;
	if (rc == CM_OK && type == 6 && len == 5 && memcmp(payload, "hello", 5) == 0)
		atomic_fetch_add(&t->ok, 1);
	else
		atomic_fetch_add(&t->failed, 1);
}

static int
port(void)
{
	return 20000 + (int)(getpid() % 20000);
}

int
main(void)
{
	char url[64];
	cm_error err = {0};
	cm_pool *pool = cm_pool_create(2, "tp");
	nd_transport_opts o = {.cluster = "c1", .secret = "s3cret", .max_msg_bytes = 1 << 20};
	nd_server *srv;
	nd_peer *peer, *bad, *other, *nobody;
	cm_buf reply;
	uint32_t type = 0;

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port());
	REQUIRE(nd_server_start(url, &o, 8, pool, serve, NULL, &srv, &err) == CM_OK);
	REQUIRE(nd_peer_open(url, &o, &peer, &err) == CM_OK);
	cm_buf_init(&reply, CM_MEM_NODE);

	/* The dial runs in the background: give it a moment to connect. */
	cm_err rc = CM_EUNAVAIL;
	for (int i = 0; i < 200 && rc != CM_OK; i++) {
		cm_buf_reset(&reply);
		rc = nd_peer_call_sync(peer, 5, "hello", 5, cm_now_ns() + 1000000000ull, &type, &reply);
		if (rc != CM_OK)
			usleep(10000);
	}
	CHECK(rc == CM_OK);
	CHECK(type == 6 && reply.len == 5 && memcmp(reply.data, "hello", 5) == 0);

	/* 200 calls in flight at once, all answered exactly once. */
	tally t = {0};
	for (int i = 0; i < 200; i++)
		nd_peer_call(peer, 5, "hello", 5, cm_now_ns() + 5000000000ull, count_cb, &t);
	for (int i = 0; i < 500 && atomic_load(&t.ok) + atomic_load(&t.failed) < 200; i++)
		usleep(10000);
	CHECKF(atomic_load(&t.ok) == 200, "ok %d failed %d", atomic_load(&t.ok), atomic_load(&t.failed));

	/* A deadline shorter than the handler: CM_ETIMEDOUT, on time. */
	uint64_t t0 = cm_now_ns();
	rc = nd_peer_call_sync(peer, 99, "x", 1, cm_now_ns() + 50000000ull, &type, &reply);
	CHECK(rc == CM_ETIMEDOUT);
	CHECK(cm_now_ns() - t0 < 250000000ull);

	/* Wrong secret and wrong cluster name: the server refuses and says so. */
	nd_transport_opts wrong = o;
	wrong.secret = "guess";
	REQUIRE(nd_peer_open(url, &wrong, &bad, &err) == CM_OK);
	wrong = o;
	wrong.cluster = "c2";
	REQUIRE(nd_peer_open(url, &wrong, &other, &err) == CM_OK);
	usleep(100000);
	cm_buf_reset(&reply);
	rc = nd_peer_call_sync(bad, 5, "hello", 5, cm_now_ns() + 1000000000ull, &type, &reply);
	/* The refusal itself is sealed with the server's secret: our side
	 * refuses that reply too, so the caller sees CM_EINVAL. */
	CHECK(rc == CM_EINVAL);
	rc = nd_peer_call_sync(other, 5, "hello", 5, cm_now_ns() + 1000000000ull, &type, &reply);
	CHECK(rc == CM_EINVAL);
	CHECK(nd_server_refused(srv) >= 2);

	/* Oversized: the server drops the connection instead of allocating. */
	size_t big = 2u << 20;
	char *huge = calloc(1, big);
	t0 = cm_now_ns();
	rc = nd_peer_call_sync(peer, 5, huge, big, cm_now_ns() + 2000000000ull, &type, &reply);
	CHECK(rc != CM_OK);
	free(huge);

	/* Nobody listening: fails at once, not at the deadline. */
	char dead[64];
	snprintf(dead, sizeof(dead), "tcp://127.0.0.1:%d", port() + 1);
	REQUIRE(nd_peer_open(dead, &o, &nobody, &err) == CM_OK);
	t0 = cm_now_ns();
	rc = nd_peer_call_sync(nobody, 5, "hello", 5, cm_now_ns() + 5000000000ull, &type, &reply);
	CHECK(rc == CM_EUNAVAIL);
	CHECK(cm_now_ns() - t0 < 100000000ull);

	/* The good peer still works after all that. */
	for (int i = 0; i < 100; i++) {
		cm_buf_reset(&reply);
		rc = nd_peer_call_sync(peer, 5, "hello", 5, cm_now_ns() + 1000000000ull, &type, &reply);
		if (rc == CM_OK)
			break;
		usleep(20000); /* reconnecting after the oversized message */
	}
	CHECK(rc == CM_OK);

	nd_peer_close(nobody);
	nd_peer_close(other);
	nd_peer_close(bad);
	nd_peer_close(peer);
	nd_server_stop(srv);
	cm_pool_destroy(pool);
	cm_buf_free(&reply);
	return check_report("transport_test");
}
