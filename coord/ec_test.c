/* The etcd client against real etcd processes (Debian etcd-server, from
 * cluster-scripts/install-deps.sh --with-tests) on free loopback ports in a
 * temp dir, plus a cutting proxy and a fake server for what a real etcd will
 * not do on demand. A missing etcd fails the test. Every wait is bounded;
 * the etcd children die with the test (atexit, signals, PDEATHSIG). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/cm_sys.h"
#include "check.h"
#include "ec.h"
#include "ec_private.h"

static char tmpdir[256];
static const char *etcd_bin = "/usr/bin/etcd";

/* ---- children ---- */

#define MAX_KIDS 8
static volatile pid_t kids[MAX_KIDS];

static void
kill_kids(void)
{
	for (int i = 0; i < MAX_KIDS; i++) {
		pid_t p = kids[i];
		if (p > 0) {
			kill(p, SIGKILL);
			waitpid(p, NULL, 0);
			kids[i] = 0;
		}
	}
}

static void
on_signal(int sig)
{
	for (int i = 0; i < MAX_KIDS; i++)
		if (kids[i] > 0)
			kill(kids[i], SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

static double
secs_since(uint64_t t0)
{
	return (double)(cm_now_ns() - t0) / 1e9;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static int
free_port(void)
{
	static int used[32], nused;
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = {.sin_family = AF_INET,
		                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t len = sizeof(a);
		REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
		REQUIRE(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
		close(fd);
		int p = ntohs(a.sin_port), dup = 0;
		for (int i = 0; i < nused; i++)
			dup |= used[i] == p;
		if (!dup && nused < 32) {
			used[nused++] = p;
			return p;
		}
	}
}

typedef struct member {
	char name[16];
	int client, peer;
	char dir[300], url[64];
	char cluster[400]; /* --initial-cluster */
	int slot;          /* in kids[] */
} member;

static void
member_init(member *m, const char *name, int slot)
{
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->client = free_port();
	m->peer = free_port();
	m->slot = slot;
	snprintf(m->dir, sizeof(m->dir), "%s/%s", tmpdir, name);
	snprintf(m->url, sizeof(m->url), "http://127.0.0.1:%d", m->client);
	mkdir(m->dir, 0700);
}

/* cluster: --initial-cluster the first time; NULL: as before (a restart). */
static void
member_start(member *m, const char *cluster)
{
	if (cluster)
		snprintf(m->cluster, sizeof(m->cluster), "%s", cluster);
	char a[12][512];
	snprintf(a[0], 512, "--name=%s", m->name);
	snprintf(a[1], 512, "--data-dir=%s/data", m->dir);
	snprintf(a[2], 512, "--listen-client-urls=%s", m->url);
	snprintf(a[3], 512, "--advertise-client-urls=%s", m->url);
	snprintf(a[4], 512, "--listen-peer-urls=http://127.0.0.1:%d", m->peer);
	snprintf(a[5], 512, "--initial-advertise-peer-urls=http://127.0.0.1:%d", m->peer);
	snprintf(a[6], 512, "--initial-cluster=%s", m->cluster);
	snprintf(a[7], 512, "--initial-cluster-token=ec-test-%d", (int)getpid());
	snprintf(a[8], 512, "--logger=zap");
	snprintf(a[9], 512, "--log-outputs=stderr");
	snprintf(a[10], 512, "--log-level=warn");
	char *argv[13] = {(char *)etcd_bin};
	for (int i = 0; i < 11; i++)
		argv[i + 1] = a[i];
	argv[12] = NULL;
	char log[400];
	snprintf(log, sizeof(log), "%s/etcd.log", m->dir);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(etcd_bin, argv);
		_exit(127);
	}
	kids[m->slot] = pid;
}

static void
member_kill(member *m)
{
	pid_t p = kids[m->slot];
	if (p > 0) {
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
		kids[m->slot] = 0;
	}
}

static ec_client *
client(const char *const *eps, size_t n, uint32_t req_ms)
{
	ec_opts o = {.request_timeout_ms = req_ms, .connect_timeout_ms = 500};
	ec_client *c;
	cm_error err = {0};
	REQUIRE(ec_open(eps, n, &o, &c, &err) == CM_OK);
	return c;
}

/* Until a write goes through (a quorum serves), at most max_s. */
static bool
wait_ready(const char *const *eps, size_t n, double max_s)
{
	ec_client *c = client(eps, n, 1500);
	uint64_t t0 = cm_now_ns();
	bool ok = false;
	while (!ok && secs_since(t0) < max_s) {
		cm_error err = {0};
		ok = ec_put(c, "t/ready", "1", 1, 0, NULL, &err) == CM_OK;
		if (!ok)
			sleep_ms(100);
	}
	ec_close(c);
	return ok;
}

/* ---- a proxy that can cut its connections and refuse new ones ---- */

typedef struct proxy {
	int port, upstream;
	atomic_bool stop, cut;
	pthread_t th;
} proxy;

static int
listen_on(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                        .sin_port = htons(port)};
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 16) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int
dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                        .sin_port = htons(port)};
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

#define PX_MAX 16
static void *
proxy_main(void *arg)
{
	proxy *px = arg;
	int lfd = -1, fds[PX_MAX][2], n = 0;
	while (!atomic_load(&px->stop)) {
		if (atomic_load(&px->cut)) {
			if (lfd >= 0)
				close(lfd);
			lfd = -1;
			for (int i = 0; i < n; i++) {
				close(fds[i][0]);
				close(fds[i][1]);
			}
			n = 0;
			sleep_ms(20);
			continue;
		}
		if (lfd < 0 && (lfd = listen_on(px->port)) < 0) {
			sleep_ms(20);
			continue;
		}
		struct pollfd pf[1 + 2 * PX_MAX];
		pf[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
		for (int i = 0; i < n; i++) {
			pf[1 + 2 * i] = (struct pollfd){.fd = fds[i][0], .events = POLLIN};
			pf[2 + 2 * i] = (struct pollfd){.fd = fds[i][1], .events = POLLIN};
		}
		if (poll(pf, 1 + 2 * n, 50) <= 0)
			continue;
		for (int i = n - 1; i >= 0; i--) {
			for (int d = 0; d < 2; d++) {
				if (!(pf[1 + 2 * i + d].revents & (POLLIN | POLLHUP | POLLERR)))
					continue;
				char buf[16384];
				ssize_t r = read(fds[i][d], buf, sizeof(buf));
				if (r <= 0 || write(fds[i][1 - d], buf, (size_t)r) != r) {
					close(fds[i][0]);
					close(fds[i][1]);
					fds[i][0] = fds[n - 1][0];
					fds[i][1] = fds[n - 1][1];
					n--;
					break;
				}
			}
		}
		if (pf[0].revents & POLLIN) {
			int a = accept(lfd, NULL, NULL), b = a >= 0 ? dial(px->upstream) : -1;
			if (b < 0 || n == PX_MAX) {
				if (a >= 0)
					close(a);
				if (b >= 0)
					close(b);
			} else {
				fds[n][0] = a;
				fds[n][1] = b;
				n++;
			}
		}
	}
	if (lfd >= 0)
		close(lfd);
	for (int i = 0; i < n; i++) {
		close(fds[i][0]);
		close(fds[i][1]);
	}
	return NULL;
}

/* ---- a fake server: one canned reply per connection ---- */

typedef struct fake {
	int lfd, port;
	const char *_Atomic reply;
	atomic_bool stop;
	atomic_int served;
	pthread_t th;
} fake;

static void *
fake_main(void *arg)
{
	fake *f = arg;
	while (!atomic_load(&f->stop)) {
		struct pollfd pf = {.fd = f->lfd, .events = POLLIN};
		if (poll(&pf, 1, 50) <= 0)
			continue;
		int fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		/* read the request: headers, then Content-Length bytes */
		char req[8192];
		size_t got = 0;
		long want = -1;
		uint64_t t0 = cm_now_ns();
		while (got < sizeof(req) - 1 && secs_since(t0) < 2) {
			struct pollfd q = {.fd = fd, .events = POLLIN};
			if (poll(&q, 1, 50) <= 0)
				continue;
			ssize_t r = read(fd, req + got, sizeof(req) - 1 - got);
			if (r <= 0)
				break;
			got += (size_t)r;
			req[got] = '\0';
			char *h = strstr(req, "\r\n\r\n");
			if (h) {
				char *cl = strcasestr(req, "Content-Length:");
				want = (long)(h + 4 - req) + (cl ? atol(cl + 15) : 0);
				if ((long)got >= want)
					break;
			}
		}
		const char *r = atomic_load(&f->reply);
		size_t len = strlen(r), off = 0;
		while (off < len) {
			ssize_t w = write(fd, r + off, len - off);
			if (w <= 0)
				break;
			off += (size_t)w;
		}
		atomic_fetch_add(&f->served, 1);
		close(fd);
	}
	return NULL;
}

static void
fake_start(fake *f)
{
	f->port = free_port();
	f->lfd = listen_on(f->port);
	REQUIRE(f->lfd >= 0);
	REQUIRE(pthread_create(&f->th, NULL, fake_main, f) == 0);
}

static void
fake_stop(fake *f)
{
	atomic_store(&f->stop, true);
	pthread_join(f->th, NULL);
	close(f->lfd);
}

/* ---- a watch recorder ---- */

#define REC_MAX 256
typedef struct rec_ev {
	bool deleted;
	char key[64];
	char value[64];
	int64_t rev;
} rec_ev;

typedef struct recorder {
	pthread_mutex_t mu;
	rec_ev ev[REC_MAX];
	int n, nmsgs;
	int64_t compact_rev, last_header;
	bool order_bad;
} recorder;

static void
rec_fn(void *arg, const ec_watch_msg *m)
{
	recorder *r = arg;
	pthread_mutex_lock(&r->mu);
	r->nmsgs++;
	if (m->kind == EC_WATCH_COMPACTED) {
		r->compact_rev = m->compact_revision;
	} else {
		for (size_t i = 0; i < m->n; i++) {
			const ec_event *e = &m->events[i];
			if (r->n > 0 && e->kv.mod_revision < r->ev[r->n - 1].rev)
				r->order_bad = true;
			if (r->n < REC_MAX) {
				rec_ev *x = &r->ev[r->n++];
				x->deleted = e->deleted;
				snprintf(x->key, sizeof(x->key), "%s", e->kv.key);
				snprintf(x->value, sizeof(x->value), "%.*s", (int)e->kv.value_len,
				         (const char *)e->kv.value);
				x->rev = e->kv.mod_revision;
			}
		}
		r->last_header = m->revision;
	}
	pthread_mutex_unlock(&r->mu);
}

static int
rec_count(recorder *r)
{
	pthread_mutex_lock(&r->mu);
	int n = r->n;
	pthread_mutex_unlock(&r->mu);
	return n;
}

static bool
rec_wait(recorder *r, int n, double max_s)
{
	uint64_t t0 = cm_now_ns();
	while (rec_count(r) < n && secs_since(t0) < max_s)
		sleep_ms(20);
	return rec_count(r) >= n;
}

/* ---- the tests ---- */

static void
test_base64(void)
{
	static const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	static const char *coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
	                              "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	for (int i = 0; i < 7; i++) {
		char *s = ec_b64_encode(plain[i], strlen(plain[i]));
		CHECKF(strcmp(s, coded[i]) == 0, "%s -> %s", plain[i], s);
		uint8_t *d;
		size_t n;
		CHECK(ec_b64_decode(s, strlen(s), &d, &n) && n == strlen(plain[i]) &&
		      memcmp(d, plain[i], n) == 0);
		cm_free(EC_MEM, s);
		cm_free(EC_MEM, d);
	}
	uint8_t buf[300];
	unsigned seed = 7;
	for (size_t len = 0; len < sizeof(buf); len++) {
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)rand_r(&seed);
		char *s = ec_b64_encode(buf, len);
		uint8_t *d;
		size_t n;
		CHECK(ec_b64_decode(s, strlen(s), &d, &n) && n == len && memcmp(d, buf, len) == 0);
		cm_free(EC_MEM, s);
		cm_free(EC_MEM, d);
	}
	static const char *bad[] = {
	    "a", "abc", "ab=c", "a===", "====", "Zg=\n", "Zm9v!A==", "Zg==Zg==", "Z-8="};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint8_t *d;
		size_t n;
		CHECKF(!ec_b64_decode(bad[i], strlen(bad[i]), &d, &n) && d == NULL, "%s", bad[i]);
	}
}

static void
test_kv(const char *ep)
{
	ec_client *c = client(&ep, 1, 5000);
	cm_error err = {0};
	const char bin[] = {'a', 0, 'b', 0, (char)0xff};
	int64_t r1, r2, hrev;
	CHECK(ec_put(c, "t/kv/bin", bin, 5, 0, &r1, &err) == CM_OK && r1 > 0);
	ec_kv kv;
	CHECK(ec_get(c, "t/kv/bin", &kv, &hrev, &err) == CM_OK);
	CHECK(kv.value_len == 5 && memcmp(kv.value, bin, 5) == 0);
	CHECK(strcmp(kv.key, "t/kv/bin") == 0 && kv.key_len == 8);
	CHECK(kv.create_revision == r1 && kv.mod_revision == r1 && kv.version == 1 && hrev >= r1);
	ec_kv_free(&kv);
	CHECK(ec_put(c, "t/kv/bin", bin, 3, 0, &r2, &err) == CM_OK && r2 > r1);
	CHECK(ec_get(c, "t/kv/bin", &kv, NULL, &err) == CM_OK);
	CHECK(kv.value_len == 3 && kv.create_revision == r1 && kv.mod_revision == r2 &&
	      kv.version == 2);
	ec_kv_free(&kv);

	cm_error e2 = {0};
	CHECK(ec_get(c, "t/kv/none", &kv, &hrev, &e2) == CM_ENOTFOUND && e2.code == CM_ENOTFOUND);
	CHECK(hrev >= r2);
	CHECK(ec_put(c, "t/kv/empty", "", 0, 0, NULL, &err) == CM_OK);
	CHECK(ec_get(c, "t/kv/empty", &kv, NULL, &err) == CM_OK && kv.value_len == 0 &&
	      kv.value != NULL && kv.value[0] == 0);
	ec_kv_free(&kv);
	CHECK(ec_put(c, "t/kv/c", "C", 1, 0, NULL, &err) == CM_OK);
	CHECK(ec_put(c, "t/kv0", "outside", 7, 0, NULL, &err) == CM_OK);
	CHECK(ec_put(c, "t/kv.", "outside", 7, 0, NULL, &err) == CM_OK);

	ec_kvs r;
	CHECK(ec_range_prefix(c, "t/kv/", 0, &r, &err) == CM_OK);
	CHECK(r.n == 3 && r.count == 3 && !r.more && r.revision >= r2);
	if (r.n == 3)
		CHECK(strcmp(r.kv[0].key, "t/kv/bin") == 0 && strcmp(r.kv[1].key, "t/kv/c") == 0 &&
		      strcmp(r.kv[2].key, "t/kv/empty") == 0);
	ec_kvs_free(&r);
	CHECK(ec_range_prefix(c, "t/kv/", 2, &r, &err) == CM_OK && r.n == 2 && r.more &&
	      r.count == 3);
	ec_kvs_free(&r);
	CHECK(ec_range_prefix(c, "", 0, &r, &err) == CM_OK && r.n >= 5);
	ec_kvs_free(&r);

	int64_t deleted = -1;
	CHECK(ec_delete(c, "t/kv/c", &deleted, &err) == CM_OK && deleted == 1);
	CHECK(ec_delete(c, "t/kv/c", &deleted, &err) == CM_OK && deleted == 0);
	CHECK(ec_delete_prefix(c, "t/kv/", &deleted, &err) == CM_OK && deleted == 2);
	CHECK(ec_range_prefix(c, "t/kv/", 0, &r, &err) == CM_OK && r.n == 0 && r.count == 0);
	ec_kvs_free(&r);
	CHECK(ec_get(c, "t/kv0", &kv, NULL, &err) == CM_OK);
	ec_kv_free(&kv);
	CHECKF(err.code == CM_OK, "%s", err.reason);
	ec_close(c);
}

static void
test_txn(const char *ep)
{
	ec_client *c = client(&ep, 1, 5000);
	cm_error err = {0};
	ec_txn_result t;
	ec_cmp absent = {.key = "t/tx/term", .target = EC_CMP_CREATE, .op = EC_CMP_EQ, .num = 0};
	ec_op put1 = {.type = EC_OP_PUT, .key = "t/tx/term", .value = "1", .value_len = 1};
	ec_op get1 = {.type = EC_OP_GET, .key = "t/tx/term"};
	CHECK(ec_txn(c, &absent, 1, &put1, 1, &get1, 1, &t, &err) == CM_OK);
	CHECK(t.succeeded && t.n == 1 && t.revision > 0);
	int64_t created = t.revision;
	ec_txn_result_free(&t);
	/* a second create-if-absent fails and runs the failure branch */
	CHECK(ec_txn(c, &absent, 1, &put1, 1, &get1, 1, &t, &err) == CM_OK);
	CHECK(!t.succeeded && t.n == 1);
	if (t.n == 1)
		CHECK(t.res[0].n == 1 && t.res[0].kv[0].value_len == 1 &&
		      t.res[0].kv[0].create_revision == created);
	ec_txn_result_free(&t);

	/* writes guarded by the term key's create revision, as the master does */
	ec_cmp term = {
	    .key = "t/tx/term", .target = EC_CMP_CREATE, .op = EC_CMP_EQ, .num = created};
	ec_op w[] = {{.type = EC_OP_PUT, .key = "t/tx/state", .value = "s1", .value_len = 2},
	             {.type = EC_OP_DELETE, .key = "t/tx/nothing"},
	             {.type = EC_OP_RANGE_PREFIX, .key = "t/tx/"}};
	CHECK(ec_txn(c, &term, 1, w, 3, NULL, 0, &t, &err) == CM_OK);
	CHECK(t.succeeded && t.n == 3);
	if (t.n == 3)
		CHECK(t.res[1].count == 0 && t.res[2].n == 2 && t.res[2].revision == t.revision);
	ec_txn_result_free(&t);
	term.num = created + 1000;
	w[0].value = "s2";
	CHECK(ec_txn(c, &term, 1, w, 1, NULL, 0, &t, &err) == CM_OK && !t.succeeded && t.n == 0);
	ec_txn_result_free(&t);
	ec_kv kv;
	CHECK(ec_get(c, "t/tx/state", &kv, NULL, &err) == CM_OK && kv.value_len == 2 &&
	      memcmp(kv.value, "s1", 2) == 0);
	ec_kv_free(&kv);

	/* the other targets and operators, all of which hold */
	ec_cmp all[] = {{.key = "t/tx/term",
	                 .target = EC_CMP_VALUE,
	                 .op = EC_CMP_EQ,
	                 .value = "1",
	                 .value_len = 1},
	                {.key = "t/tx/term",
	                 .target = EC_CMP_VALUE,
	                 .op = EC_CMP_NE,
	                 .value = "2",
	                 .value_len = 1},
	                {.key = "t/tx/term", .target = EC_CMP_MOD, .op = EC_CMP_GT, .num = 0},
	                {.key = "t/tx/term", .target = EC_CMP_VERSION, .op = EC_CMP_LT, .num = 5},
	                {.key = "t/tx/term", .target = EC_CMP_LEASE, .op = EC_CMP_EQ, .num = 0},
	                {.key = "t/tx/term", .target = EC_CMP_CREATE, .op = EC_CMP_NE, .num = 0}};
	ec_op del = {.type = EC_OP_DELETE_PREFIX, .key = "t/tx/"};
	CHECK(ec_txn(c, all, 6, &del, 1, NULL, 0, &t, &err) == CM_OK && t.succeeded && t.n == 1);
	if (t.n == 1)
		CHECK(t.res[0].count == 2);
	ec_txn_result_free(&t);
	CHECKF(err.code == CM_OK, "%s", err.reason);
	ec_op bad = {.type = (ec_op_type)42, .key = "x"};
	cm_error e2 = {0};
	CHECK(ec_txn(c, NULL, 0, &bad, 1, NULL, 0, &t, &e2) == CM_EINVAL);
	ec_close(c);
}

static void
test_lease(const char *ep)
{
	ec_client *c = client(&ep, 1, 5000);
	cm_error err = {0};
	int64_t id, granted, left;
	CHECK(ec_lease_grant(c, 2, &id, &granted, &err) == CM_OK && id != 0 && granted >= 2);
	CHECK(ec_put(c, "t/lease/k", "v", 1, id, NULL, &err) == CM_OK);
	ec_kv kv;
	CHECK(ec_get(c, "t/lease/k", &kv, NULL, &err) == CM_OK && kv.lease == id);
	ec_kv_free(&kv);
	CHECK(ec_lease_ttl(c, id, &left, &granted, &err) == CM_OK && left <= 2 && granted >= 2);
	/* keep-alives carry it well past its TTL */
	uint64_t t0 = cm_now_ns();
	bool all_ok = true;
	while (secs_since(t0) < 3.5) {
		all_ok &= ec_lease_keepalive(c, id, &left, &err) == CM_OK && left >= 1;
		sleep_ms(300);
	}
	CHECKF(all_ok, "%s", err.reason);
	CHECK(ec_get(c, "t/lease/k", &kv, NULL, &err) == CM_OK);
	ec_kv_free(&kv);
	/* then it expires, and its key with it */
	t0 = cm_now_ns();
	cm_err rc = CM_OK;
	while (rc == CM_OK && secs_since(t0) < 15) {
		cm_error e = {0};
		rc = ec_get(c, "t/lease/k", &kv, NULL, &e);
		ec_kv_free(&kv);
		if (rc == CM_OK)
			sleep_ms(200);
	}
	CHECKF(rc == CM_ENOTFOUND, "key still there %.1f s on", secs_since(t0));
	printf("lease: ttl 2 s, key gone %.1f s after the last keep-alive\n", secs_since(t0));
	cm_error e = {0};
	CHECK(ec_lease_keepalive(c, id, &left, &e) == CM_ENOTFOUND);
	cm_error_clear(&e);
	CHECK(ec_lease_ttl(c, id, &left, NULL, &e) == CM_ENOTFOUND);

	/* revoke: the key goes at once */
	CHECK(ec_lease_grant(c, 30, &id, NULL, &err) == CM_OK);
	CHECK(ec_put(c, "t/lease/r", "v", 1, id, NULL, &err) == CM_OK);
	CHECK(ec_lease_revoke(c, id, &err) == CM_OK);
	cm_error_clear(&e);
	CHECK(ec_get(c, "t/lease/r", &kv, NULL, &e) == CM_ENOTFOUND);
	cm_error_clear(&e);
	CHECK(ec_lease_revoke(c, id, &e) == CM_ENOTFOUND);
	cm_error_clear(&e);
	CHECK(ec_lease_keepalive(c, id, &left, &e) == CM_ENOTFOUND);
	cm_error_clear(&e);
	CHECKF(ec_put(c, "t/lease/r", "v", 1, id, NULL, &e) == CM_ENOTFOUND, "%s", e.reason);
	cm_error_clear(&e);
	CHECK(ec_lease_grant(c, 0, &id, NULL, &e) == CM_EINVAL);
	CHECKF(err.code == CM_OK, "%s", err.reason);
	ec_close(c);
}

typedef struct campaign_arg {
	ec_client *c;
	const char *name, *value;
	int64_t lease;
	uint32_t timeout_ms;
	atomic_bool cancel;
	atomic_bool done;
	cm_err rc;
	cm_error err;
	ec_leader_key l;
	pthread_t th;
} campaign_arg;

static void *
campaign_main(void *arg)
{
	campaign_arg *a = arg;
	a->rc = ec_campaign(a->c, a->name, a->lease, a->value, strlen(a->value), a->timeout_ms,
	                    &a->cancel, &a->l, &a->err);
	atomic_store(&a->done, true);
	return NULL;
}

static void
campaign_start(campaign_arg *a)
{
	atomic_store(&a->done, false);
	atomic_store(&a->cancel, false);
	memset(&a->err, 0, sizeof(a->err));
	REQUIRE(pthread_create(&a->th, NULL, campaign_main, a) == 0);
}

static bool
campaign_join(campaign_arg *a, double max_s)
{
	uint64_t t0 = cm_now_ns();
	while (!atomic_load(&a->done) && secs_since(t0) < max_s)
		sleep_ms(20);
	if (!atomic_load(&a->done))
		atomic_store(&a->cancel, true); /* so the join below cannot hang */
	pthread_join(a->th, NULL);
	return secs_since(t0) < max_s;
}

static int
candidates(ec_client *c)
{
	ec_kvs r;
	cm_error err = {0};
	if (ec_range_prefix(c, "t/el/", 0, &r, &err) != CM_OK)
		return -1;
	int n = (int)r.n;
	ec_kvs_free(&r);
	return n;
}

static bool
wait_candidates(ec_client *c, int n, double max_s)
{
	uint64_t t0 = cm_now_ns();
	while (candidates(c) != n && secs_since(t0) < max_s)
		sleep_ms(50);
	return candidates(c) == n;
}

static void
test_election(const char *ep)
{
	ec_client *c1 = client(&ep, 1, 5000), *c2 = client(&ep, 1, 5000);
	cm_error err = {0};
	int64_t l1, l2, l3;
	CHECK(ec_lease_grant(c1, 20, &l1, NULL, &err) == CM_OK);
	CHECK(ec_lease_grant(c2, 20, &l2, NULL, &err) == CM_OK);
	ec_kv kv;
	cm_error e = {0};
	CHECK(ec_leader(c1, "t/el", &kv, &e) == CM_ENOTFOUND);

	ec_leader_key k1;
	CHECK(ec_campaign(c1, "t/el", l1, "n1", 2, 5000, NULL, &k1, &err) == CM_OK);
	CHECK(k1.lease == l1 && k1.rev > 0 && strncmp(k1.key, "t/el/", 5) == 0 &&
	      strcmp(k1.name, "t/el") == 0);
	CHECK(ec_leader(c2, "t/el", &kv, &err) == CM_OK && kv.value_len == 2 &&
	      memcmp(kv.value, "n1", 2) == 0 && strcmp(kv.key, k1.key) == 0 &&
	      kv.create_revision == k1.rev);
	ec_kv_free(&kv);

	campaign_arg b = {.c = c2, .name = "t/el", .value = "n2", .lease = l2, .timeout_ms = 20000};
	campaign_start(&b);
	sleep_ms(500);
	CHECK(!atomic_load(&b.done));

	/* the leader writes guarded by its term */
	ec_cmp term = {.key = k1.key, .target = EC_CMP_CREATE, .op = EC_CMP_EQ, .num = k1.rev};
	ec_op w = {.type = EC_OP_PUT, .key = "t/el-state", .value = "by1", .value_len = 3};
	ec_txn_result t;
	CHECK(ec_txn(c1, &term, 1, &w, 1, NULL, 0, &t, &err) == CM_OK && t.succeeded);
	ec_txn_result_free(&t);
	CHECK(ec_proclaim(c1, &k1, "n1b", 3, &err) == CM_OK);
	CHECK(ec_leader(c2, "t/el", &kv, &err) == CM_OK && kv.value_len == 3);
	ec_kv_free(&kv);

	uint64_t t0 = cm_now_ns();
	CHECK(ec_resign(c1, &k1, &err) == CM_OK);
	CHECK(campaign_join(&b, 10));
	printf("election: the second campaign won %.2f s after the resign\n", secs_since(t0));
	CHECKF(b.rc == CM_OK, "%s", b.err.reason);
	CHECK(b.l.rev > k1.rev && b.l.lease == l2);
	CHECK(ec_txn(c1, &term, 1, &w, 1, NULL, 0, &t, &err) == CM_OK && !t.succeeded);
	ec_txn_result_free(&t);
	CHECK(ec_leader(c1, "t/el", &kv, &err) == CM_OK && memcmp(kv.value, "n2", 2) == 0);
	ec_kv_free(&kv);
	cm_error_clear(&e);
	CHECKF(ec_proclaim(c1, &k1, "x", 1, &e) == CM_ECONFLICT, "%s", e.reason);

	/* the first campaigns again and wins when the leader's lease goes */
	campaign_arg a = {.c = c1, .name = "t/el", .value = "n1", .lease = l1, .timeout_ms = 20000};
	campaign_start(&a);
	sleep_ms(300);
	CHECK(!atomic_load(&a.done));
	CHECK(ec_lease_revoke(c2, l2, &err) == CM_OK);
	CHECK(campaign_join(&a, 10));
	CHECKF(a.rc == CM_OK && a.l.lease == l1, "%s", a.err.reason);
	CHECK(ec_leader(c2, "t/el", &kv, &err) == CM_OK && memcmp(kv.value, "n1", 2) == 0);
	ec_kv_free(&kv);

	/* a blocked campaign stops on its flag, and etcd drops its candidacy */
	CHECK(ec_lease_grant(c2, 20, &l3, NULL, &err) == CM_OK);
	campaign_arg d = {.c = c2, .name = "t/el", .value = "n3", .lease = l3, .timeout_ms = 20000};
	campaign_start(&d);
	CHECK(wait_candidates(c1, 2, 5));
	t0 = cm_now_ns();
	atomic_store(&d.cancel, true);
	CHECK(campaign_join(&d, 5));
	double dt = secs_since(t0);
	CHECKF(d.rc == CM_ECLOSED && dt < 1.0, "rc %s after %.2f s", cm_err_name(d.rc), dt);
	CHECK(wait_candidates(c1, 1, 5));
	/* and a deadline */
	ec_leader_key k3;
	t0 = cm_now_ns();
	cm_error_clear(&e);
	CHECKF(ec_campaign(c2, "t/el", l3, "n3", 2, 700, NULL, &k3, &e) == CM_ETIMEDOUT, "%s",
	       e.reason);
	dt = secs_since(t0);
	CHECKF(dt >= 0.6 && dt < 3, "%.2f s", dt);
	CHECK(wait_candidates(c1, 1, 5));
	printf("election: a campaign with a 0.7 s deadline ended after %.2f s\n", dt);
	cm_error_clear(&e);
	CHECK(ec_leader(c1, "t/none", &kv, &e) == CM_ENOTFOUND);

	CHECK(ec_lease_revoke(c1, l1, &err) == CM_OK);
	CHECK(ec_lease_revoke(c1, l3, &err) == CM_OK);
	CHECK(wait_candidates(c1, 0, 5));
	CHECKF(err.code == CM_OK, "%s", err.reason);
	ec_leader_key_free(&k1);
	ec_leader_key_free(&a.l);
	ec_leader_key_free(&b.l);
	ec_leader_key_free(&d.l);
	ec_close(c1);
	ec_close(c2);
}

typedef struct expect {
	rec_ev ev[64];
	int n;
} expect;

static void
exp_put(ec_client *c, expect *x, const char *key, const char *val)
{
	cm_error err = {0};
	int64_t rev = 0;
	CHECKF(ec_put(c, key, val, strlen(val), 0, &rev, &err) == CM_OK, "%s", err.reason);
	rec_ev *e = &x->ev[x->n++];
	*e = (rec_ev){.deleted = false, .rev = rev};
	snprintf(e->key, sizeof(e->key), "%s", key);
	snprintf(e->value, sizeof(e->value), "%s", val);
}

static void
exp_del(ec_client *c, expect *x, const char *key)
{
	cm_error err = {0};
	ec_op op = {.type = EC_OP_DELETE, .key = key};
	ec_txn_result t;
	CHECKF(ec_txn(c, NULL, 0, &op, 1, NULL, 0, &t, &err) == CM_OK && t.n == 1 &&
	           t.res[0].count == 1,
	       "%s", err.reason);
	rec_ev *e = &x->ev[x->n++];
	*e = (rec_ev){.deleted = true, .rev = t.revision};
	snprintf(e->key, sizeof(e->key), "%s", key);
	ec_txn_result_free(&t);
}

static bool
rec_matches(recorder *r, const expect *x)
{
	pthread_mutex_lock(&r->mu);
	bool ok = r->n == x->n && !r->order_bad;
	for (int i = 0; ok && i < x->n; i++) {
		const rec_ev *a = &r->ev[i], *b = &x->ev[i];
		ok = a->deleted == b->deleted && a->rev == b->rev && strcmp(a->key, b->key) == 0 &&
		     strcmp(a->value, b->value) == 0;
		if (!ok)
			fprintf(stderr, "event %d: got %s %s=%s @%lld, want %s %s=%s @%lld\n", i,
			        a->deleted ? "del" : "put", a->key, a->value, (long long)a->rev,
			        b->deleted ? "del" : "put", b->key, b->value, (long long)b->rev);
	}
	if (r->n != x->n)
		fprintf(stderr, "got %d events, want %d\n", r->n, x->n);
	pthread_mutex_unlock(&r->mu);
	return ok;
}

/* The same keys and values in the same order, revisions increasing; a put
 * that a client resent after an attempt timed out (applied twice, at two
 * revisions) counts once. */
static bool
rec_matches_resent(recorder *r, const expect *x)
{
	pthread_mutex_lock(&r->mu);
	bool ok = !r->order_bad;
	int j = 0;
	for (int i = 0; ok && i < r->n; i++) {
		const rec_ev *a = &r->ev[i];
		if (i > 0 && a->rev <= r->ev[i - 1].rev)
			ok = false;
		else if (i > 0 && j > 0 && strcmp(a->key, r->ev[i - 1].key) == 0 &&
		         strcmp(a->value, r->ev[i - 1].value) == 0)
			continue; /* a resent put */
		else if (j >= x->n || strcmp(a->key, x->ev[j].key) != 0 ||
		         strcmp(a->value, x->ev[j].value) != 0)
			ok = false;
		else
			j++;
		if (!ok)
			fprintf(stderr, "event %d: %s=%s @%lld unexpected\n", i, a->key, a->value,
			        (long long)a->rev);
	}
	ok = ok && j == x->n;
	pthread_mutex_unlock(&r->mu);
	return ok;
}

static void
test_watch(member *m)
{
	const char *ep = m->url;
	ec_client *c = client(&ep, 1, 5000);
	ec_opts wo = {.request_timeout_ms = 5000, .connect_timeout_ms = 500, .watch_retry_ms = 50};
	ec_client *cw;
	cm_error err = {0};
	REQUIRE(ec_open(&ep, 1, &wo, &cw, &err) == CM_OK);
	int64_t rev;
	CHECK(ec_put(c, "t/w-begin", "", 0, 0, &rev, &err) == CM_OK);
	CHECK(ec_put(c, "t/w/before", "old", 3, 0, NULL, &err) == CM_OK);
	recorder r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	expect x = {0};
	/* from rev + 1: the put of t/w/before is history the watch must send */
	x.ev[x.n++] = (rec_ev){.key = "t/w/before", .value = "old", .rev = rev + 1};
	ec_watch *w;
	CHECK(ec_watch_start(cw, "t/w/", rev + 1, rec_fn, &r, &w, &err) == CM_OK);
	exp_put(c, &x, "t/w/a", "1");
	exp_put(c, &x, "t/w/b", "2");
	CHECK(ec_put(c, "t/w0", "outside", 7, 0, NULL, &err) == CM_OK);
	exp_put(c, &x, "t/w/a", "3");
	exp_del(c, &x, "t/w/b");
	/* two keys in one revision */
	ec_op two[] = {{.type = EC_OP_PUT, .key = "t/w/c", .value = "c", .value_len = 1},
	               {.type = EC_OP_PUT, .key = "t/w/d", .value = "d", .value_len = 1}};
	ec_txn_result t;
	CHECK(ec_txn(c, NULL, 0, two, 2, NULL, 0, &t, &err) == CM_OK);
	x.ev[x.n++] = (rec_ev){.key = "t/w/c", .value = "c", .rev = t.revision};
	x.ev[x.n++] = (rec_ev){.key = "t/w/d", .value = "d", .rev = t.revision};
	ec_txn_result_free(&t);
	CHECK(rec_wait(&r, x.n, 10));
	CHECK(rec_matches(&r, &x));

	/* kill etcd, write as soon as it is back (before the watch is), and
	 * the watch resumes from the next revision: nothing lost, nothing twice */
	uint64_t t0 = cm_now_ns();
	member_kill(m);
	sleep_ms(300);
	member_start(m, NULL);
	CHECK(wait_ready(&ep, 1, 20));
	exp_put(c, &x, "t/w/e", "5");
	exp_put(c, &x, "t/w/f", "6");
	exp_del(c, &x, "t/w/a");
	CHECK(rec_wait(&r, x.n, 20));
	printf("watch: caught up %.2f s after etcd was killed and restarted\n", secs_since(t0));
	sleep_ms(200); /* a repeat would show here */
	CHECK(rec_matches(&r, &x));
	t0 = cm_now_ns();
	ec_watch_stop(w);
	double dt = secs_since(t0);
	CHECKF(dt < 1.0, "stop took %.2f s", dt);
	printf("watch: stop joined in %.3f s\n", dt);
	CHECKF(err.code == CM_OK, "%s", err.reason);
	ec_close(cw);
	ec_close(c);
}

/* The watch loses its connection (a proxy cuts it), history is compacted
 * meanwhile, and the reconnect reports the compaction. */
static void
test_watch_compacted(const char *ep, int etcd_port)
{
	proxy px = {.port = free_port(), .upstream = etcd_port};
	REQUIRE(pthread_create(&px.th, NULL, proxy_main, &px) == 0);
	char purl[64];
	snprintf(purl, sizeof(purl), "127.0.0.1:%d", px.port);
	const char *pep = purl;
	ec_opts wo = {.request_timeout_ms = 5000, .connect_timeout_ms = 500, .watch_retry_ms = 50};
	ec_client *c = client(&ep, 1, 5000), *cw;
	cm_error err = {0};
	REQUIRE(ec_open(&pep, 1, &wo, &cw, &err) == CM_OK);
	int64_t rev, yrev, orev;
	CHECK(wait_ready(&pep, 1, 5));
	CHECK(ec_put(c, "t/c/x", "x", 1, 0, &rev, &err) == CM_OK);
	recorder r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	ec_watch *w;
	CHECK(ec_watch_start(cw, "t/c/", rev + 1, rec_fn, &r, &w, &err) == CM_OK);
	CHECK(ec_put(c, "t/c/y", "y", 1, 0, &yrev, &err) == CM_OK);
	CHECK(rec_wait(&r, 1, 10));
	atomic_store(&px.cut, true);
	sleep_ms(200);
	CHECK(ec_put(c, "t/c/z", "z", 1, 0, NULL, &err) == CM_OK);
	CHECK(ec_put(c, "t/other", "o", 1, 0, &orev, &err) == CM_OK);
	CHECK(ec_compact(c, orev, &err) == CM_OK);
	CHECK(ec_compact(c, orev, &err) == CM_OK); /* already compacted: fine */
	atomic_store(&px.cut, false);
	uint64_t t0 = cm_now_ns();
	while (secs_since(t0) < 10) {
		pthread_mutex_lock(&r.mu);
		int64_t cr = r.compact_rev;
		pthread_mutex_unlock(&r.mu);
		if (cr)
			break;
		sleep_ms(20);
	}
	pthread_mutex_lock(&r.mu);
	CHECKF(r.compact_rev == orev, "compact_rev %lld, want %lld", (long long)r.compact_rev,
	       (long long)orev);
	CHECK(r.n == 1 && r.ev[0].rev == yrev);
	pthread_mutex_unlock(&r.mu);
	ec_watch_stop(w);

	/* a watch from a compacted revision is told at once */
	recorder r2 = {.mu = PTHREAD_MUTEX_INITIALIZER};
	CHECK(ec_watch_start(c, "t/c/", rev, rec_fn, &r2, &w, &err) == CM_OK);
	t0 = cm_now_ns();
	while (secs_since(t0) < 10) {
		pthread_mutex_lock(&r2.mu);
		int64_t cr = r2.compact_rev;
		pthread_mutex_unlock(&r2.mu);
		if (cr)
			break;
		sleep_ms(20);
	}
	CHECK(r2.compact_rev == orev && r2.n == 0);
	ec_watch_stop(w);
	cm_error e = {0};
	CHECK(ec_compact(c, orev + 1000, &e) == CM_EINVAL); /* a future revision */
	CHECKF(err.code == CM_OK, "%s", err.reason);
	ec_close(cw);
	ec_close(c);
	atomic_store(&px.stop, true);
	pthread_join(px.th, NULL);
}

/* Which member is the raft leader (maintenance status: its own member id
 * against the leader's), -1 when none says. */
static int
raft_leader(member *m, int n)
{
	for (int i = 0; i < n; i++) {
		const char *ep = m[i].url;
		ec_client *c = client(&ep, 1, 2000);
		ec_call call = {.path = "/v3/maintenance/status",
		                .body = "{}",
		                .deadline_ns = ec_deadline(c, 0)};
		cm_error err = {0};
		bool is = false;
		if (ec_do(c, &call, &err) == CM_OK) {
			const cJSON *h = cJSON_GetObjectItemCaseSensitive(call.reply, "header");
			const cJSON *id = cJSON_GetObjectItemCaseSensitive(h, "member_id");
			const cJSON *l = cJSON_GetObjectItemCaseSensitive(call.reply, "leader");
			is = cJSON_IsString(id) && cJSON_IsString(l) &&
			     strcmp(id->valuestring, l->valuestring) == 0;
		}
		cJSON_Delete(call.reply);
		ec_close(c);
		if (is)
			return i;
	}
	return -1;
}

/* Three members; the raft leader, which is also the client's current
 * endpoint, is killed and calls go on. */
static void
test_failover(void)
{
	member m[3];
	char cluster[400] = "";
	for (int i = 0; i < 3; i++) {
		char name[8];
		snprintf(name, sizeof(name), "m%d", i);
		member_init(&m[i], name, 1 + i);
		size_t len = strlen(cluster);
		snprintf(cluster + len, sizeof(cluster) - len, "%s%s=http://127.0.0.1:%d",
		         i ? "," : "", name, m[i].peer);
	}
	for (int i = 0; i < 3; i++)
		member_start(&m[i], cluster);
	const char *eps[3] = {m[0].url, m[1].url, m[2].url};
	uint64_t t0 = cm_now_ns();
	REQUIRE(wait_ready(eps, 3, 30));
	printf("failover: 3 members ready in %.2f s\n", secs_since(t0));
	int lead = raft_leader(m, 3);
	CHECK(lead >= 0);
	if (lead > 0) { /* the leader first: the one calls and the watch go to */
		member tmp = m[0];
		m[0] = m[lead];
		m[lead] = tmp;
		for (int i = 0; i < 3; i++)
			eps[i] = m[i].url;
	}
	ec_client *c = client(eps, 3, 10000);
	cm_error err = {0};
	int64_t rev;
	CHECK(ec_put(c, "t/f/start", "s", 1, 0, &rev, &err) == CM_OK);
	recorder r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	ec_watch *w;
	CHECK(ec_watch_start(c, "t/f/", rev + 1, rec_fn, &r, &w, &err) == CM_OK);
	expect x = {0};
	exp_put(c, &x, "t/f/0", "0");
	CHECK(rec_wait(&r, 1, 10));

	member_kill(&m[0]);
	t0 = cm_now_ns();
	double worst = 0;
	for (int i = 1; i <= 10; i++) {
		char key[32], val[8];
		snprintf(key, sizeof(key), "t/f/%d", i);
		snprintf(val, sizeof(val), "%d", i);
		uint64_t t1 = cm_now_ns();
		exp_put(c, &x, key, val);
		ec_kv kv;
		CHECKF(ec_get(c, key, &kv, NULL, &err) == CM_OK && kv.value_len == strlen(val),
		       "%s", err.reason);
		ec_kv_free(&kv);
		if (secs_since(t1) > worst)
			worst = secs_since(t1);
	}
	int64_t id;
	CHECK(ec_lease_grant(c, 10, &id, NULL, &err) == CM_OK);
	CHECK(ec_lease_keepalive(c, id, NULL, &err) == CM_OK);
	printf("failover: 10 puts and gets with m0 dead in %.2f s (slowest pair %.2f s)\n",
	       secs_since(t0), worst);
	CHECK(rec_wait(&r, x.n, 15));
	sleep_ms(200);
	CHECK(rec_matches_resent(&r, &x));
	ec_watch_stop(w);

	/* two of three dead: no quorum, and the call still ends in time */
	member_kill(&m[1]);
	ec_client *quick = client(eps, 3, 1500);
	cm_error e = {0};
	t0 = cm_now_ns();
	cm_err rc = ec_put(quick, "t/f/noquorum", "x", 1, 0, NULL, &e);
	double dt = secs_since(t0);
	CHECKF((rc == CM_ETIMEDOUT || rc == CM_EUNAVAIL) && dt < 3.5, "%s after %.2f s: %s",
	       cm_err_name(rc), dt, e.reason);
	printf("failover: without a quorum a put failed with %s in %.2f s\n", cm_err_name(rc), dt);
	CHECKF(err.code == CM_OK, "%s", err.reason);
	ec_close(quick);
	ec_close(c);
	for (int i = 0; i < 3; i++)
		member_kill(&m[i]);
}

static void
test_unreachable(void)
{
	char a[64], b[64];
	int pa = free_port(), pb = free_port();
	snprintf(a, sizeof(a), "127.0.0.1:%d", pa);
	snprintf(b, sizeof(b), "http://127.0.0.1:%d/", pb);
	const char *eps[2] = {a, b};
	ec_client *c = client(eps, 2, 2000);
	cm_error e = {0};
	uint64_t t0 = cm_now_ns();
	CHECK(ec_put(c, "k", "v", 1, 0, NULL, &e) == CM_EUNAVAIL);
	double dt = secs_since(t0);
	char pa_s[16], pb_s[16];
	snprintf(pa_s, sizeof(pa_s), ":%d", pa);
	snprintf(pb_s, sizeof(pb_s), ":%d", pb);
	CHECKF(strstr(e.reason, pa_s) && strstr(e.reason, pb_s), "%s", e.reason);
	CHECKF(dt < 2.5, "%.2f s", dt);
	printf("unreachable: %s in %.3f s: %s\n", cm_err_name(e.code), dt, e.reason);
	ec_watch *w;
	recorder r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	cm_error_clear(&e);
	CHECK(ec_watch_start(c, "x/", 0, rec_fn, &r, &w, &e) == CM_OK);
	sleep_ms(300);
	t0 = cm_now_ns();
	ec_watch_stop(w); /* stops while retrying */
	CHECK(secs_since(t0) < 1.0);
	ec_close(c);

	/* a listener that never answers: the deadline ends the call */
	int silent_port = free_port(), sfd = listen_on(silent_port);
	REQUIRE(sfd >= 0);
	char s[64];
	snprintf(s, sizeof(s), "127.0.0.1:%d", silent_port);
	const char *sep = s;
	c = client(&sep, 1, 800);
	ec_kv kv;
	cm_error_clear(&e);
	t0 = cm_now_ns();
	cm_err rc = ec_get(c, "k", &kv, NULL, &e);
	dt = secs_since(t0);
	CHECKF(rc == CM_ETIMEDOUT && dt < 2.5, "%s in %.2f s", cm_err_name(rc), dt);
	/* and so does the cancel flag of a campaign there */
	atomic_bool cancel = true;
	ec_leader_key l;
	cm_error_clear(&e);
	CHECK(ec_campaign(c, "e", 1, "v", 1, 5000, &cancel, &l, &e) == CM_ECLOSED);
	ec_close(c);
	close(sfd);
}

/* Replies no etcd gives: each must become an error, never a crash. */
static void
test_bad_replies(void)
{
	fake f = {0};
	fake_start(&f);
	char ep[64];
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", f.port);
	const char *eps = ep;
	ec_opts o = {
	    .request_timeout_ms = 1000, .connect_timeout_ms = 500, .max_reply_bytes = 4096};
	ec_client *c;
	cm_error err = {0};
	REQUIRE(ec_open(&eps, 1, &o, &c, &err) == CM_OK);
#define H200 "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n\r\n"
	static const struct {
		const char *reply;
		cm_err want;
	} cases[] = {
	    {H200 "{bad}", CM_EPARSE},
	    {H200 "", CM_EPARSE},
	    {H200 "[1,2]", CM_EPARSE},
	    {H200 "{\"header\":{\"revision\":\"x\"}}", CM_EPARSE},
	    {H200 "{\"header\":{\"revision\":\"99999999999999999999\"}}", CM_EPARSE},
	    {H200 "{\"header\":7}", CM_EPARSE},
	    {H200 "{\"kvs\":\"nope\"}", CM_EPARSE},
	    {H200 "{\"kvs\":[{\"key\":\"!!!!\"}]}", CM_EPARSE},
	    {H200 "{\"kvs\":[{\"key\":\"eA==\",\"value\":7}]}", CM_EPARSE},
	    {H200 "{\"kvs\":[{\"key\":\"eA==\",\"mod_revision\":1.5}]}", CM_EPARSE},
	    {H200 "{\"kvs\":[7]}", CM_EPARSE},
	    {H200 "{\"kvs\":[]}", CM_ENOTFOUND},
	    {H200 "{}", CM_ENOTFOUND},
	    {H200 "{\"kvs\":[{\"key\":\"eA==\",\"value\":\"AAE=\",\"mod_revision\":\"3\"}]}",
	     CM_OK},
	    {"HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\nNot Found", CM_EPARSE},
	    {"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n{\"error\":\"boom\",\"message\":"
	     "\"boom\",\"code\":3}",
	     CM_EINVAL},
	    {"HTTP/1.1 500 Internal\r\nConnection: close\r\n\r\n{\"error\":\"x\",\"message\":"
	     "\"etcdserver: requested lease not found\",\"code\":2}",
	     CM_ENOTFOUND},
	    {"HTTP/1.1 503 Unavailable\r\nConnection: close\r\n\r\noverloaded", CM_EUNAVAIL},
	    {"HTTP/1.1 503 Unavailable\r\nConnection: close\r\n\r\n{\"error\":\"x\",\"message\":"
	     "\"etcdserver: no leader\",\"code\":14}",
	     CM_EUNAVAIL},
	    {"garbage\r\n\r\n", CM_EUNAVAIL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		atomic_store(&f.reply, cases[i].reply);
		ec_kv kv;
		cm_error e = {0};
		cm_err rc = ec_get(c, "x", &kv, NULL, &e);
		CHECKF(rc == cases[i].want, "case %zu: %s, want %s: %s", i, cm_err_name(rc),
		       cm_err_name(cases[i].want), e.reason);
		if (rc == CM_OK)
			CHECK(kv.value_len == 2 && kv.value[1] == 1 && kv.mod_revision == 3);
		ec_kv_free(&kv);
	}
	/* too large for max_reply_bytes */
	static char big[8192];
	int off = snprintf(big, sizeof(big), H200 "{\"kvs\":[{\"key\":\"");
	memset(big + off, 'A', 6000);
	strcpy(big + off + 6000, "\"}]}");
	atomic_store(&f.reply, big);
	cm_error e = {0};
	ec_kv kv;
	CHECK(ec_get(c, "x", &kv, NULL, &e) == CM_ETOOLARGE);
	/* a keep-alive answer without TTL: the lease is gone */
	atomic_store(&f.reply, H200 "{\"result\":{\"ID\":\"5\"}}");
	cm_error_clear(&e);
	CHECK(ec_lease_keepalive(c, 5, NULL, &e) == CM_ENOTFOUND);
	atomic_store(&f.reply, H200 "{\"result\":{\"ID\":\"5\",\"TTL\":\"9\"}}");
	int64_t left = 0;
	CHECK(ec_lease_keepalive(c, 5, &left, &e) == CM_OK && left == 9);
	atomic_store(&f.reply, H200 "{\"header\":{},\"ID\":\"5\",\"TTL\":\"-1\"}");
	CHECK(ec_lease_ttl(c, 5, &left, NULL, &e) == CM_ENOTFOUND);
	atomic_store(&f.reply, H200 "{\"succeeded\":true,\"responses\":[{}]}");
	ec_txn_result t;
	ec_op op = {.type = EC_OP_PUT, .key = "k", .value = "v", .value_len = 1};
	cm_error_clear(&e);
	CHECK(ec_txn(c, NULL, 0, &op, 1, NULL, 0, &t, &e) == CM_EPARSE);
	atomic_store(&f.reply, H200 "{\"succeeded\":true}");
	CHECK(ec_txn(c, NULL, 0, &op, 1, NULL, 0, &t, &e) == CM_EPARSE);
	atomic_store(&f.reply, H200 "{\"leader\":{\"name\":\"ZQ==\"}}");
	ec_leader_key l;
	CHECK(ec_campaign(c, "e", 1, "v", 1, 1000, NULL, &l, &e) == CM_EPARSE);

	/* a watch stream of junk: the watch reconnects, delivers nothing bad */
	recorder r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	atomic_store(&f.reply, H200
	             "{\"result\":{\"created\":true}}\n"
	             "{\"result\":{\"events\":[{\"kv\":{\"key\":\"%%%\"}},{\"kv\":{\"key\":"
	             "\"eA==\",\"value\":\"eQ==\",\"mod_revision\":\"4\"}}]}}\n"
	             "{\"result\":{\"header\":{\"revision\":\"5\"},\"events\":[{\"kv\":\"no\"}]}}"
	             "\n]]]{\"x\":\"\\\"}\"}");
	ec_watch *w;
	int before = atomic_load(&f.served);
	CHECK(ec_watch_start(c, "x", 0, rec_fn, &r, &w, &e) == CM_OK);
	uint64_t t0 = cm_now_ns();
	while (atomic_load(&f.served) < before + 3 && secs_since(t0) < 10)
		sleep_ms(20);
	ec_watch_stop(w);
	CHECK(atomic_load(&f.served) >= before + 3);
	/* only the good event, once: repeats from reconnects are dropped */
	CHECKF(r.n == 1 && strcmp(r.ev[0].key, "x") == 0 && r.ev[0].rev == 4, "%d events", r.n);
	ec_close(c);
	fake_stop(&f);
}

int
main(void)
{
	uint64_t t_all = cm_now_ns();
	test_base64();
	if (getenv("ETCD_BIN"))
		etcd_bin = getenv("ETCD_BIN");
	if (access(etcd_bin, X_OK) != 0) {
		fprintf(stderr,
		        "ec_test: no etcd at %s: install etcd-server "
		        "(cluster-scripts/install-deps.sh --with-tests) or set ETCD_BIN\n",
		        etcd_bin);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	atexit(kill_kids);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGABRT, on_signal);
	signal(SIGSEGV, on_signal);
	snprintf(tmpdir, sizeof(tmpdir), "%s/ec_test.XXXXXX",
	         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	REQUIRE(mkdtemp(tmpdir) != NULL);

	struct {
		const char *name;
		uint64_t t0;
	} step;
#define STEP(s)                                                                                    \
	do {                                                                                       \
		step.name = #s;                                                                    \
		step.t0 = cm_now_ns();                                                             \
		s;                                                                                 \
		printf("ec_test: %-28s %.2f s\n", step.name, secs_since(step.t0));                 \
		fflush(stdout);                                                                    \
	} while (0)

	STEP(test_unreachable());
	STEP(test_bad_replies());

	member one;
	member_init(&one, "one", 0);
	char cluster[128];
	snprintf(cluster, sizeof(cluster), "one=http://127.0.0.1:%d", one.peer);
	member_start(&one, cluster);
	const char *ep = one.url;
	REQUIRE(wait_ready(&ep, 1, 30));
	STEP(test_kv(ep));
	STEP(test_txn(ep));
	STEP(test_lease(ep));
	STEP(test_election(ep));
	STEP(test_watch(&one));
	STEP(test_watch_compacted(ep, one.client));
	member_kill(&one);
	STEP(test_failover());

	kill_kids();
	if (check_failures == 0)
		cm_rm_rf(tmpdir);
	else
		fprintf(stderr, "ec_test: etcd data and logs kept in %s\n", tmpdir);
	printf("ec_test: %.1f s in all\n", secs_since(t_all));
	return check_report("ec_test");
}
