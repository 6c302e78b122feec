/* Transport: real nng sockets on loopback. Echo round trips, many calls in
 * flight at once, refusal of a wrong secret or cluster name, refusal of an
 * oversized message, fast failure for an unreachable peer, deadlines.
 * TLS (tls+tcp://) with a throwaway CA made by the openssl CLI: mutual
 * round trips, a multi-MB message, refusal of plain tcp, of a certificate
 * from another CA and of bad files, the verify modes. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Two CAs; node1 and node2 signed by ca1 (the cluster), rogue by ca2.
 * EC P-256 keys: fast to make, and mbedTLS takes them. */
static const char gen_certs[] =
    "set -e\n"
    "cd \"$1\"\n"
    "printf '[req]\\ndistinguished_name=dn\\n[dn]\\n[v3_ca]\\n"
    "basicConstraints=critical,CA:TRUE\\nkeyUsage=critical,keyCertSign,cRLSign\\n"
    "subjectKeyIdentifier=hash\\n' > ca.cnf\n"
    "printf 'basicConstraints=CA:FALSE\\nkeyUsage=digitalSignature,keyEncipherment\\n"
    "extendedKeyUsage=serverAuth,clientAuth\\nsubjectAltName=IP:127.0.0.1\\n' > node.ext\n"
    "for ca in ca1 ca2; do\n"
    "  openssl req -x509 -config ca.cnf -extensions v3_ca -newkey ec -pkeyopt "
    "ec_paramgen_curve:prime256v1 -nodes -keyout $ca.key -out $ca.pem -days 2 "
    "-subj \"/CN=shoal test $ca\"\n"
    "done\n"
    "for n in node1:ca1 node2:ca1 rogue:ca2; do\n"
    "  name=${n%%:*}; ca=${n##*:}\n"
    "  openssl req -new -config ca.cnf -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
    "-nodes -keyout $name.key -out $name.csr -subj \"/CN=$name\"\n"
    "  openssl x509 -req -in $name.csr -CA $ca.pem -CAkey $ca.key -CAcreateserial -days 2 "
    "-extfile node.ext -out $name.pem\n"
    "done\n";

static char tmpdir[64];

static const char *
f(const char *name)
{
	static char bufs[16][128];
	static int next;
	char *b = bufs[next++ % 16];
	snprintf(b, 128, "%s/%s", tmpdir, name);
	return b;
}

static bool
make_certs(void)
{
	char cmd[512], script[128];
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/shoal-tls-XXXXXX");
	if (!mkdtemp(tmpdir))
		return false;
	snprintf(script, sizeof(script), "%s/gen.sh", tmpdir);
	FILE *fp = fopen(script, "w");
	if (!fp)
		return false;
	fputs(gen_certs, fp);
	fclose(fp);
	snprintf(cmd, sizeof(cmd), "sh %s %s >%s/gen.log 2>&1", script, tmpdir, tmpdir);
	if (system(cmd) != 0) {
		snprintf(cmd, sizeof(cmd), "cat %s/gen.log >&2", tmpdir);
		(void)!system(cmd);
		return false;
	}
	return true;
}

/* Polls until a call succeeds (the TLS dial runs in the background). */
static cm_err
call_until_ok(nd_peer *p, cm_buf *reply, uint32_t *type, int tries)
{
	cm_err rc = CM_EUNAVAIL;
	for (int i = 0; i < tries && rc != CM_OK; i++) {
		cm_buf_reset(reply);
		rc = nd_peer_call_sync(p, 5, "hello", 5, cm_now_ns() + 1000000000ull, type, reply);
		if (rc != CM_OK)
			usleep(10000);
	}
	return rc;
}

/* Calls a peer that must never get through for `ms` milliseconds: every
 * call fails, none of them slowly. Returns the number that got through. */
static int
calls_through(nd_peer *p, int ms, cm_err *last, uint64_t *slowest_ns)
{
	cm_buf reply;
	uint32_t type;
	int ok = 0;
	cm_buf_init(&reply, CM_MEM_NODE);
	*slowest_ns = 0;
	for (int i = 0; i < ms / 20; i++) {
		uint64_t t0 = cm_now_ns();
		cm_buf_reset(&reply);
		*last =
		    nd_peer_call_sync(p, 5, "hello", 5, cm_now_ns() + 2000000000ull, &type, &reply);
		uint64_t took = cm_now_ns() - t0;
		if (took > *slowest_ns)
			*slowest_ns = took;
		ok += *last == CM_OK;
		usleep(20000);
	}
	cm_buf_free(&reply);
	return ok;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* p50 of 200 sequential 5-byte round trips and of 3 round trips of `big`
 * bytes each way. */
static void
timing(const char *what, nd_peer *p, const uint8_t *data, size_t big)
{
	uint64_t small[200], large[3];
	cm_buf reply;
	uint32_t type;
	cm_buf_init(&reply, CM_MEM_NODE);
	for (int i = 0; i < 200; i++) {
		uint64_t t0 = cm_now_ns();
		cm_buf_reset(&reply);
		cm_err rc = nd_peer_call_sync(p, 5, "hello", 5, 0, &type, &reply);
		small[i] = rc == CM_OK ? cm_now_ns() - t0 : UINT64_MAX;
	}
	for (int i = 0; i < 3; i++) {
		uint64_t t0 = cm_now_ns();
		cm_buf_reset(&reply);
		cm_err rc = nd_peer_call_sync(p, 5, data, big, 0, &type, &reply);
		large[i] = rc == CM_OK ? cm_now_ns() - t0 : UINT64_MAX;
	}
	qsort(small, 200, sizeof(uint64_t), cmp_u64);
	qsort(large, 3, sizeof(uint64_t), cmp_u64);
	printf("transport_test: %s echo p50: 5 B %.1f us, %zu MB %.1f ms (%.0f MB/s each way)\n",
	       what, small[100] / 1e3, big >> 20, large[1] / 1e6,
	       (double)big / (1 << 20) / (large[1] / 1e9));
	cm_buf_free(&reply);
}

static bool
file_has(const char *path, const char *needle)
{
	char *text = NULL;
	size_t len;
	if (cm_file_read(path, 1 << 20, &text, &len) != CM_OK)
		return false;
	bool found = strstr(text, needle) != NULL;
	cm_free(CM_MEM_COMMON, text);
	return found;
}

static void
tls_tests(cm_pool *pool)
{
	char url[64], plain_url[64], log[128];
	cm_error err = {0};
	nd_transport_opts so = {.cluster = "c1",
	                        .secret = "s3cret",
	                        .max_msg_bytes = 16u << 20,
	                        .tls_cert = f("node1.pem"),
	                        .tls_key = f("node1.key"),
	                        .tls_ca = f("ca1.pem")};
	nd_transport_opts co = so;
	co.tls_cert = f("node2.pem");
	co.tls_key = f("node2.key");
	nd_server *srv, *plain_srv;
	nd_peer *peer, *p;
	cm_buf reply;
	uint32_t type = 0;
	cm_err rc;
	uint64_t slowest;

	cm_buf_init(&reply, CM_MEM_NODE);
	snprintf(url, sizeof(url), "tls+tcp://127.0.0.1:%d", port() + 2);
	snprintf(plain_url, sizeof(plain_url), "tcp://127.0.0.1:%d", port() + 3);

	/* Files that cannot be used: the error names the file. */
	nd_transport_opts bad = so;
	bad.tls_cert = f("missing.pem");
	cm_error_clear(&err);
	CHECK(nd_server_start(url, &bad, 4, pool, serve, NULL, &srv, &err) != CM_OK);
	CHECKF(strstr(err.reason, "missing.pem") != NULL, "%s", err.reason);
	bad = so;
	bad.tls_ca = tmpdir; /* a directory: unreadable */
	cm_error_clear(&err);
	CHECK(nd_peer_open(url, &bad, &p, &err) != CM_OK);
	CHECKF(strstr(err.reason, tmpdir) != NULL, "%s", err.reason);
	/* (A key that belongs to another certificate is not caught here:
	 * nng hands both to mbedTLS without pairing them, the handshakes fail
	 * later and the peers warn about it.) */
	bad = so;
	bad.tls_ca = f("gen.log"); /* not PEM */
	cm_error_clear(&err);
	CHECK(nd_peer_open(url, &bad, &p, &err) != CM_OK);
	CHECKF(strstr(err.reason, "gen.log") != NULL, "%s", err.reason);
	/* TLS files with a tcp:// url would send in the clear: refused. */
	cm_error_clear(&err);
	CHECK(nd_peer_open(plain_url, &so, &p, &err) != CM_OK);

	/* Mutual TLS round trip, then 100 calls in flight. */
	REQUIRE(nd_server_start(url, &so, 8, pool, serve, NULL, &srv, &err) == CM_OK);
	REQUIRE(nd_peer_open(url, &co, &peer, &err) == CM_OK);
	rc = call_until_ok(peer, &reply, &type, 300);
	CHECKF(rc == CM_OK, "%s", cm_err_name(rc));
	CHECK(type == 6 && reply.len == 5 && memcmp(reply.data, "hello", 5) == 0);
	tally t = {0};
	for (int i = 0; i < 100; i++)
		nd_peer_call(peer, 5, "hello", 5, cm_now_ns() + 5000000000ull, count_cb, &t);
	for (int i = 0; i < 500 && atomic_load(&t.ok) + atomic_load(&t.failed) < 100; i++)
		usleep(10000);
	CHECKF(atomic_load(&t.ok) == 100, "ok %d failed %d", atomic_load(&t.ok),
	       atomic_load(&t.failed));

	/* Several MB each way, byte for byte. */
	size_t big = 6u << 20;
	uint8_t *data = malloc(big);
	for (size_t i = 0; i < big; i++)
		data[i] = (uint8_t)(i * 2654435761u >> 13);
	cm_buf_reset(&reply);
	rc = nd_peer_call_sync(peer, 5, data, big, cm_now_ns() + 10000000000ull, &type, &reply);
	CHECKF(rc == CM_OK, "%s", cm_err_name(rc));
	CHECK(reply.len == big && memcmp(reply.data, data, big) == 0);

	/* The WARN lines of the failures below go to a file we read back. */
	snprintf(log, sizeof(log), "%s/warn.log", tmpdir);
	fflush(stderr);
	int saved = dup(2), lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(saved >= 0 && lf >= 0);
	dup2(lf, 2);
	close(lf);

	/* A node with a certificate from another CA (trusting its own CA):
	 * the handshake fails, calls fail at once, a WARN names the peer. */
	nd_transport_opts ro = co;
	ro.tls_cert = f("rogue.pem");
	ro.tls_key = f("rogue.key");
	ro.tls_ca = f("ca2.pem");
	REQUIRE(nd_peer_open(url, &ro, &p, &err) == CM_OK);
	int through = calls_through(p, 1500, &rc, &slowest);
	CHECKF(through == 0 && rc == CM_EUNAVAIL, "%d through, last %s", through, cm_err_name(rc));
	CHECKF(slowest < 200000000ull, "slowest failure %llu ms",
	       (unsigned long long)(slowest / 1000000));
	nd_peer_close(p);

	/* Same rogue certificate, but trusting the cluster's CA: now it is
	 * the server that refuses the client's certificate. */
	ro.tls_ca = f("ca1.pem");
	REQUIRE(nd_peer_open(url, &ro, &p, &err) == CM_OK);
	through = calls_through(p, 1500, &rc, &slowest);
	CHECKF(through == 0 && rc == CM_EUNAVAIL, "%d through, last %s", through, cm_err_name(rc));
	CHECK(slowest < 200000000ull);
	nd_peer_close(p);

	/* Plain tcp against the TLS listener: no connection, no hang. */
	nd_transport_opts po = {.cluster = "c1", .secret = "s3cret"};
	char as_plain[64];
	snprintf(as_plain, sizeof(as_plain), "tcp://127.0.0.1:%d", port() + 2);
	REQUIRE(nd_peer_open(as_plain, &po, &p, &err) == CM_OK);
	through = calls_through(p, 600, &rc, &slowest);
	CHECKF(through == 0 && rc == CM_EUNAVAIL, "%d through, last %s", through, cm_err_name(rc));
	CHECK(slowest < 200000000ull);
	nd_peer_close(p);

	/* TLS against a plain tcp listener: the same, from the other side. */
	REQUIRE(nd_server_start(plain_url, &po, 4, pool, serve, NULL, &plain_srv, &err) == CM_OK);
	char as_tls[64];
	snprintf(as_tls, sizeof(as_tls), "tls+tcp://127.0.0.1:%d", port() + 3);
	REQUIRE(nd_peer_open(as_tls, &co, &p, &err) == CM_OK);
	through = calls_through(p, 600, &rc, &slowest);
	CHECKF(through == 0 && rc == CM_EUNAVAIL, "%d through, last %s", through, cm_err_name(rc));
	CHECK(slowest < 200000000ull);
	nd_peer_close(p);

	/* Figures (printed, not checked): the same echo over TLS and plain. */
	REQUIRE(nd_peer_open(plain_url, &po, &p, &err) == CM_OK);
	CHECK(call_until_ok(p, &reply, &type, 300) == CM_OK);
	timing("tls  ", peer, data, big);
	timing("plain", p, data, big);
	nd_peer_close(p);
	nd_server_stop(plain_srv);
	free(data);

	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	char needle[128];
	snprintf(needle, sizeof(needle), "TLS handshake with peer %s failed", url);
	CHECKF(file_has(log, needle), "no WARN naming %s in %s", url, log);
	snprintf(needle, sizeof(needle), "TLS handshake with peer %s failed", as_tls);
	CHECKF(file_has(log, needle), "no WARN naming %s in %s", as_tls, log);
	/* The listener counts and reports the handshakes it refused. */
	CHECKF(nd_server_tls_refused(srv) >= 3, "%llu",
	       (unsigned long long)nd_server_tls_refused(srv));
	snprintf(needle, sizeof(needle), "TLS handshake(s) on %s since", url);
	CHECKF(file_has(log, needle), "no WARN from the listener %s in %s", url, log);

	/* The cluster's node still gets through after all that. */
	rc = call_until_ok(peer, &reply, &type, 100);
	CHECKF(rc == CM_OK, "%s", cm_err_name(rc));
	nd_peer_close(peer);
	nd_server_stop(srv);

	/* verify "optional": a certificate from another CA still connects
	 * (encryption only), so the secret is the membership check. */
	so.tls_verify = ND_TLS_VERIFY_OPTIONAL;
	ro.tls_ca = f("ca2.pem");
	ro.tls_verify = ND_TLS_VERIFY_OPTIONAL;
	REQUIRE(nd_server_start(url, &so, 4, pool, serve, NULL, &srv, &err) == CM_OK);
	REQUIRE(nd_peer_open(url, &ro, &p, &err) == CM_OK);
	rc = call_until_ok(p, &reply, &type, 300);
	CHECKF(rc == CM_OK, "%s", cm_err_name(rc));
	nd_peer_close(p);
	ro.secret = "guess";
	REQUIRE(nd_peer_open(url, &ro, &p, &err) == CM_OK);
	rc = CM_EUNAVAIL;
	for (int i = 0; i < 300 && rc == CM_EUNAVAIL; i++) { /* until connected */
		rc =
		    nd_peer_call_sync(p, 5, "hello", 5, cm_now_ns() + 1000000000ull, &type, &reply);
		if (rc == CM_EUNAVAIL)
			usleep(10000);
	}
	CHECKF(rc == CM_EINVAL, "%s", cm_err_name(rc));
	nd_peer_close(p);
	nd_server_stop(srv);

	/* verify "none": no CA file needed on either side. */
	so.tls_verify = ro.tls_verify = ND_TLS_VERIFY_NONE;
	so.tls_ca = ro.tls_ca = NULL;
	ro.secret = "s3cret";
	REQUIRE(nd_server_start(url, &so, 4, pool, serve, NULL, &srv, &err) == CM_OK);
	REQUIRE(nd_peer_open(url, &ro, &p, &err) == CM_OK);
	rc = call_until_ok(p, &reply, &type, 300);
	CHECKF(rc == CM_OK, "%s", cm_err_name(rc));
	nd_peer_close(p);
	nd_server_stop(srv);
	/* ...but "required" without one is a configuration error. */
	so.tls_verify = ND_TLS_VERIFY_REQUIRED;
	cm_error_clear(&err);
	CHECK(nd_server_start(url, &so, 4, pool, serve, NULL, &srv, &err) == CM_EINVAL);

	cm_buf_free(&reply);
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
		rc = nd_peer_call_sync(peer, 5, "hello", 5, cm_now_ns() + 1000000000ull, &type,
		                       &reply);
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
	CHECKF(atomic_load(&t.ok) == 200, "ok %d failed %d", atomic_load(&t.ok),
	       atomic_load(&t.failed));

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
		rc = nd_peer_call_sync(peer, 5, "hello", 5, cm_now_ns() + 1000000000ull, &type,
		                       &reply);
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

	if (system("openssl version >/dev/null 2>&1") != 0) {
		fprintf(stderr,
		        "transport_test: the TLS half needs the openssl CLI (Debian package "
		        "openssl, in cluster-scripts/install-deps.sh --with-tests)\n");
		return 1;
	}
	REQUIRE(make_certs());
	tls_tests(pool);
	char rm[128];
	snprintf(rm, sizeof(rm), "rm -rf %s", tmpdir);
	(void)!system(rm);

	cm_pool_destroy(pool);
	cm_buf_free(&reply);
	return check_report("transport_test");
}
