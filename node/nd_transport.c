#include "nd_transport.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../proto/pr.h"

#define T CM_MEM_NODE
#define DEFAULT_MAX_MSG (64u << 20)
#define DEFAULT_TIMEOUT_NS (30ull * 1000000000ull)
#define MAX_PEM_BYTES (1u << 20) /* a certificate chain or a key: far less */
#define TLS_WARN_EVERY_NS (10ull * 1000000000ull)

typedef struct opts_copy {
	char *cluster, *secret;
	size_t max_msg;
} opts_copy;

static void
opts_set(opts_copy *c, const nd_transport_opts *o)
{
	c->cluster = cm_strdup(T, o && o->cluster ? o->cluster : "shoal");
	c->secret = cm_strdup(T, o && o->secret ? o->secret : "");
	c->max_msg = o && o->max_msg_bytes ? o->max_msg_bytes : DEFAULT_MAX_MSG;
}

static void
opts_free(opts_copy *c)
{
	cm_free(T, c->cluster);
	cm_free(T, c->secret);
}

static cm_err
nng_to_cm(int rv)
{
	switch (rv) {
	case 0:
		return CM_OK;
	case NNG_ETIMEDOUT:
		return CM_ETIMEDOUT;
	case NNG_ENOMEM:
		return CM_ENOMEM;
	case NNG_EMSGSIZE:
		return CM_ETOOLARGE;
	default:
		return CM_EUNAVAIL;
	}
}

/* ---- TLS ---- */

/* Reads one PEM file into *out (NUL-terminated, as mbedTLS wants it).
 * `what` names the file's role in the error. Caller frees with pem_free. */
static cm_err
pem_read(const char *path, const char *what, char **out, cm_error *err)
{
	size_t len;
	cm_err rc = cm_file_read(path, MAX_PEM_BYTES, out, &len);
	if (rc == CM_ENOTFOUND)
		return cm_error_set(err, CM_EINVAL, "TLS %s file [%s] does not exist", what, path);
	if (rc == CM_ETOOLARGE)
		return cm_error_set(err, CM_EINVAL, "TLS %s file [%s] is larger than %u bytes",
		                    what, path, MAX_PEM_BYTES);
	if (rc != CM_OK)
		return cm_error_set(err, CM_EINVAL, "TLS %s file [%s] cannot be read", what, path);
	if (len == 0 || strstr(*out, "-----BEGIN ") == NULL) {
		cm_free(CM_MEM_COMMON, *out);
		*out = NULL;
		return cm_error_set(err, CM_EINVAL, "TLS %s file [%s] holds no PEM block", what,
		                    path);
	}
	return CM_OK;
}

static void
pem_free(char *pem)
{
	if (pem == NULL)
		return;
	/* The key is the node's proof of membership: leave no copy behind. */
	volatile char *v = pem;
	while (*v)
		*v++ = 0;
	cm_free(CM_MEM_COMMON, pem);
}

/* Builds the nng TLS config of one listener (server) or dialer (client)
 * from the option files. The caller owns *out (nng_tls_config_free). */
static cm_err
tls_config(const nd_transport_opts *o, bool server, nng_tls_config **out, cm_error *err)
{
	char *cert = NULL, *key = NULL, *ca = NULL;
	nng_tls_config *cfg = NULL;
	nng_tls_auth_mode mode;
	cm_err rc;
	int rv;

	switch (o->tls_verify) {
	case ND_TLS_VERIFY_REQUIRED:
		mode = NNG_TLS_AUTH_MODE_REQUIRED;
		break;
	case ND_TLS_VERIFY_OPTIONAL:
		mode = NNG_TLS_AUTH_MODE_OPTIONAL;
		break;
	case ND_TLS_VERIFY_NONE:
		mode = NNG_TLS_AUTH_MODE_NONE;
		break;
	default:
		return cm_error_set(err, CM_EINVAL, "unknown TLS verify mode %d", o->tls_verify);
	}
	if (o->tls_key == NULL)
		return cm_error_set(err, CM_EINVAL, "TLS certificate [%s] given without a key file",
		                    o->tls_cert);
	if (o->tls_ca == NULL && mode != NNG_TLS_AUTH_MODE_NONE)
		return cm_error_set(err, CM_EINVAL,
		                    "TLS needs a CA file to check peers (or verify \"none\")");
	if ((rc = pem_read(o->tls_cert, "certificate", &cert, err)) ||
	    (rc = pem_read(o->tls_key, "key", &key, err)) ||
	    (o->tls_ca && (rc = pem_read(o->tls_ca, "CA", &ca, err))))
		goto fail;
	if ((rv = nng_tls_config_alloc(&cfg, server ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT))) {
		rc = cm_error_set(err, CM_EINVAL, "TLS is not available: %s", nng_strerror(rv));
		goto fail;
	}
	/* The client presents its certificate too: with verify "required"
	 * the server checks it (mutual TLS). */
	if ((rv = nng_tls_config_own_cert(cfg, cert, key, NULL))) {
		rc = cm_error_set(err, CM_EINVAL,
		                  "TLS certificate [%s] with key [%s] cannot be used: %s (not PEM, "
		                  "encrypted key, or a key of another certificate)",
		                  o->tls_cert, o->tls_key, nng_strerror(rv));
		goto fail;
	}
	if (ca && (rv = nng_tls_config_ca_chain(cfg, ca, NULL))) {
		rc = cm_error_set(err, CM_EINVAL, "TLS CA file [%s] cannot be used: %s", o->tls_ca,
		                  nng_strerror(rv));
		goto fail;
	}
	/* No nng_tls_config_server_name: the dialer's default config would
	 * check the url's host against the certificate, and nodes are named by
	 * IP. Our own config leaves the host unchecked; the chain to the
	 * cluster's CA is what is verified. */
	if ((rv = nng_tls_config_auth_mode(cfg, mode))) {
		rc = cm_error_set(err, CM_EINVAL, "TLS verify mode refused: %s", nng_strerror(rv));
		goto fail;
	}
	pem_free(cert);
	pem_free(key);
	pem_free(ca);
	*out = cfg;
	return CM_OK;
fail:
	if (cfg)
		nng_tls_config_free(cfg);
	pem_free(cert);
	pem_free(key);
	pem_free(ca);
	return rc;
}

static bool
tls_on(const nd_transport_opts *o)
{
	return o && o->tls_cert;
}

/* A url and the options must agree: TLS files with tcp:// would silently
 * send in the clear, tls+tcp:// without files cannot handshake. */
static cm_err
tls_check_url(const char *url, const nd_transport_opts *o, cm_error *err)
{
	bool tls_url = strncmp(url, "tls+", 4) == 0;
	if (tls_on(o) && !tls_url)
		return cm_error_set(err, CM_EINVAL,
		                    "transport address [%s]: TLS is configured, the url must be "
		                    "tls+tcp://",
		                    url);
	if (!tls_on(o) && tls_url)
		return cm_error_set(err, CM_EINVAL,
		                    "transport address [%s]: tls+tcp:// needs a TLS certificate",
		                    url);
	return CM_OK;
}

/* Connection attempts of a dialer that failed in the TLS handshake or in
 * the SP negotiation behind it (nng counts them per dialer/listener:
 * "auth" for certificate and crypto errors, "proto" for a peer that does
 * not speak the same protocol, such as plain tcp against TLS). */
static uint64_t
stat_value(nng_stat *st, const char *name)
{
	for (nng_stat *c = st ? nng_stat_child(st) : NULL; c; c = nng_stat_next(c))
		if (strcmp(nng_stat_name(c), name) == 0)
			return nng_stat_value(c);
	return 0;
}

/* The scope `kind` ("dialer", "listener") whose "id" is `id`. (nng 1.5's
 * nng_stat_find_dialer returns the first dialer of the snapshot whatever
 * the id.) */
static nng_stat *
stat_find(nng_stat *st, const char *kind, int id)
{
	for (; st; st = nng_stat_next(st)) {
		if (nng_stat_type(st) != NNG_STAT_SCOPE)
			continue;
		if (strcmp(nng_stat_name(st), kind) == 0 && stat_value(st, "id") == (uint64_t)id)
			return st;
		nng_stat *in = stat_find(nng_stat_child(st), kind, id);
		if (in)
			return in;
	}
	return NULL;
}

/* Handshake failures ("auth" + "proto") of one dialer or listener so far. */
static uint64_t
tls_failures(const char *kind, int id)
{
	nng_stat *root = NULL;
	if (nng_stats_get(&root) != 0)
		return 0;
	nng_stat *st = stat_find(root, kind, id);
	uint64_t n = stat_value(st, "auth") + stat_value(st, "proto");
	nng_stats_free(root);
	return n;
}

static nng_msg *
envelope_msg(const opts_copy *o, uint32_t type, uint64_t deadline_ns, const void *payload,
             size_t len)
{
	cm_buf b;
	nng_msg *m = NULL;
	uint64_t now = cm_now_ns();
	uint64_t left_ms = deadline_ns > now ? (deadline_ns - now) / 1000000 + 1 : 0;

	cm_buf_init(&b, T);
	pr_envelope_pack(o->cluster, o->secret, type, deadline_ns ? left_ms : 0, payload, len, &b);
	if (nng_msg_alloc(&m, b.len) == 0)
		memcpy(nng_msg_body(m), b.data, b.len);
	cm_buf_free(&b);
	return m;
}

/* ---- closing a socket at shutdown ---- */

/* nng 1.5.2 can hang in nng_close for ever. When a pipe is closed while
 * its TCP transport is between reading a message's length and reading its
 * body (tcptran_pipe_recv_cb), the body read is started on an aio that the
 * close has just stopped; the start is refused without a callback, so the
 * protocol's receive (rep0/req0 aio_recv) never completes, the reaper
 * thread waits for it in pipe_stop for ever, and nng_close waits for that
 * pipe to be reaped. The reaper is shared, so every later close waits too.
 * Peers send requests until they see us go, so a SIGTERM under load hits
 * this now and then. A close that has not finished by its deadline is left
 * to the process exit: the caller must then keep everything nng callbacks
 * can touch (left_to_exit). */
#define CLOSE_WAIT_NS (2000ull * 1000000ull)
#define CLOSE_WAIT_AFTER_HANG_NS (100ull * 1000000ull)

typedef struct closer {
	nng_socket sock;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	bool abandoned; /* the waiter gave up: the thread frees the closer */
} closer;

static atomic_bool close_hung; /* a close was left behind: later ones will hang too */
static pthread_mutex_t left_mu = PTHREAD_MUTEX_INITIALIZER;
static void *left[64]; /* kept reachable for the process exit (and leak checkers) */
static int nleft;

static void
left_to_exit(void *obj)
{
	pthread_mutex_lock(&left_mu);
	if (nleft < (int)(sizeof(left) / sizeof(left[0])))
		left[nleft++] = obj;
	pthread_mutex_unlock(&left_mu);
}

static void
closer_free(closer *c)
{
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	cm_free(T, c);
}

static void *
closer_main(void *arg)
{
	closer *c = arg;
	nng_close(c->sock);
	pthread_mutex_lock(&c->mu);
	c->done = true;
	bool abandoned = c->abandoned;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	if (abandoned)
		closer_free(c);
	return NULL;
}

/* nng_close(sock), waiting for it until deadline_ns (cm_now_ns) at most;
 * returns false when it was left running. */
static bool
close_bounded(nng_socket sock, uint64_t deadline_ns)
{
	closer *c = cm_calloc(T, 1, sizeof(*c));
	pthread_condattr_t ca;
	pthread_t th;
	bool done;

	c->sock = sock;
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&th, NULL, closer_main, c) != 0) {
		closer_free(c);
		nng_close(sock);
		return true;
	}
	pthread_detach(th);
	struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
	                      .tv_nsec = (long)(deadline_ns % 1000000000ull)};
	pthread_mutex_lock(&c->mu);
	while (!c->done && cm_now_ns() < deadline_ns)
		pthread_cond_timedwait(&c->cv, &c->mu, &ts);
	done = c->done;
	c->abandoned = !done;
	pthread_mutex_unlock(&c->mu);
	if (done)
		closer_free(c);
	else
		atomic_store(&close_hung, true);
	return done;
}

static uint64_t
close_deadline(void)
{
	return cm_now_ns() + (atomic_load(&close_hung) ? CLOSE_WAIT_AFTER_HANG_NS : CLOSE_WAIT_NS);
}

/* ---- server ---- */

enum { SRV_RECV, SRV_WORK, SRV_SEND };

typedef struct srv_ctx {
	nd_server *s;
	nng_ctx ctx;
	nng_aio *aio;
	int state;
	nng_msg *req;
} srv_ctx;

struct nd_server {
	nng_socket sock;
	opts_copy o;
	cm_pool *pool;
	nd_serve_fn fn;
	void *fn_ctx;
	srv_ctx *ctxs;
	int nctx;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int busy; /* contexts in SRV_WORK */
	bool stopping;
	_Atomic uint64_t refused;
	/* TLS: a timer looks at the listener's handshake failures and warns,
	 * as nng reports them nowhere else. */
	nng_listener listener;
	nng_aio *tls_tick;
	char *url;
	uint64_t tls_reported, tls_warned_ns; /* tick callback only */
};

static void srv_cb(void *arg);

#define TLS_TICK_MS 2000

/* Every TLS_TICK_MS: warns (at most every 10 s) when handshakes were
 * refused since the last warning. The peer's address is not known: nng
 * drops the connection before it becomes a pipe. */
static void
srv_tls_tick(void *arg)
{
	nd_server *s = arg;
	int rv = nng_aio_result(s->tls_tick);

	if (rv == NNG_ECANCELED || rv == NNG_ECLOSED)
		return;
	pthread_mutex_lock(&s->mu);
	bool stopping = s->stopping;
	pthread_mutex_unlock(&s->mu);
	if (stopping)
		return;
	uint64_t now = cm_now_ns();
	uint64_t n = tls_failures("listener", nng_listener_id(s->listener));
	if (n > s->tls_reported &&
	    (s->tls_warned_ns == 0 || now - s->tls_warned_ns >= TLS_WARN_EVERY_NS)) {
		cm_warn("transport",
		        "refused %llu TLS handshake(s) on %s since the last report (%llu in "
		        "all): peers with a certificate not signed by our CA, or without TLS",
		        (unsigned long long)(n - s->tls_reported), s->url, (unsigned long long)n);
		s->tls_reported = n;
		s->tls_warned_ns = now;
	}
	nng_sleep_aio(TLS_TICK_MS, s->tls_tick);
}

static void
srv_recv(srv_ctx *c)
{
	c->state = SRV_RECV;
	nng_ctx_recv(c->ctx, c->aio);
}

static void
srv_work(void *arg)
{
	srv_ctx *c = arg;
	nd_server *s = c->s;
	pr_envelope env;
	cm_error err = {0};
	cm_buf reply;
	uint32_t reply_type = PR_ACK;
	uint64_t deadline = 0;

	cm_buf_init(&reply, T);
	if (pr_envelope_unpack(nng_msg_body(c->req), nng_msg_len(c->req), s->o.cluster, s->o.secret,
	                       &env, &err) != CM_OK) {
		atomic_fetch_add(&s->refused, 1);
		cm_warn("transport", "refused a message: %s", err.reason);
		reply_type = PR_ERROR;
		pr_ack_encode(&err, NULL, 0, &reply);
	} else {
		if (env.deadline_ms)
			deadline = cm_now_ns() + env.deadline_ms * 1000000ull;
		s->fn(s->fn_ctx, env.type, env.payload, env.len, deadline, &reply, &reply_type);
		pr_envelope_free(&env);
	}
	nng_msg_free(c->req);
	c->req = NULL;

	pthread_mutex_lock(&s->mu);
	bool stopping = s->stopping;
	pthread_mutex_unlock(&s->mu);
	nng_msg *m = stopping ? NULL : envelope_msg(&s->o, reply_type, 0, reply.data, reply.len);
	cm_buf_free(&reply);
	if (m != NULL) {
		c->state = SRV_SEND;
		nng_aio_set_msg(c->aio, m);
		nng_ctx_send(c->ctx, c->aio);
	}
	pthread_mutex_lock(&s->mu);
	s->busy--;
	if (m == NULL)
		c->state = SRV_RECV; /* idle: stopping */
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (m == NULL && !stopping)
		srv_recv(c);
}

static void
srv_cb(void *arg)
{
	srv_ctx *c = arg;
	nd_server *s = c->s;
	int rv = nng_aio_result(c->aio);

	if (c->state == SRV_SEND) {
		if (rv != 0)
			nng_msg_free(nng_aio_get_msg(c->aio));
	} else if (c->state == SRV_RECV && rv == 0) {
		pthread_mutex_lock(&s->mu);
		if (s->stopping) {
			pthread_mutex_unlock(&s->mu);
			nng_msg_free(nng_aio_get_msg(c->aio));
			return;
		}
		s->busy++;
		pthread_mutex_unlock(&s->mu);
		c->req = nng_aio_get_msg(c->aio);
		c->state = SRV_WORK;
		cm_pool_submit(s->pool, srv_work, c);
		return;
	}
	if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
		return;
	pthread_mutex_lock(&s->mu);
	bool stopping = s->stopping;
	pthread_mutex_unlock(&s->mu);
	if (!stopping)
		srv_recv(c);
}

cm_err
nd_server_start(const char *url, const nd_transport_opts *o, int contexts, cm_pool *pool,
                nd_serve_fn fn, void *ctx, nd_server **out, cm_error *err)
{
	nd_server *s;
	nng_tls_config *tls = NULL;
	nng_listener l;
	cm_err rc;
	int rv;

	if ((rc = tls_check_url(url, o, err)))
		return rc;
	if (tls_on(o) && (rc = tls_config(o, true, &tls, err)))
		return rc;
	s = cm_calloc(T, 1, sizeof(*s));
	opts_set(&s->o, o);
	s->pool = pool;
	s->fn = fn;
	s->fn_ctx = ctx;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if ((rv = nng_rep0_open(&s->sock)) != 0)
		goto fail;
	nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, s->o.max_msg);
	/* Created, configured, then started: a listener started by nng_listen
	 * would accept its first connections without the TLS config. */
	if ((rv = nng_listener_create(&l, s->sock, url)) != 0 ||
	    (tls && (rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tls)) != 0) ||
	    (rv = nng_listener_start(l, 0)) != 0 ||
	    (tls && (rv = nng_aio_alloc(&s->tls_tick, srv_tls_tick, s)) != 0)) {
		nng_close(s->sock);
		goto fail;
	}
	s->listener = l;
	s->url = cm_strdup(T, url);
	if (tls) {
		nng_tls_config_free(tls); /* the listener holds its own reference */
		nng_sleep_aio(TLS_TICK_MS, s->tls_tick);
	}
	s->nctx = contexts > 0 ? contexts : 16;
	s->ctxs = cm_calloc(T, (size_t)s->nctx, sizeof(srv_ctx));
	for (int i = 0; i < s->nctx; i++) {
		srv_ctx *c = &s->ctxs[i];
		c->s = s;
		nng_ctx_open(&c->ctx, s->sock);
		nng_aio_alloc(&c->aio, srv_cb, c);
		srv_recv(c);
	}
	*out = s;
	return CM_OK;
fail:
	cm_error_set(err, rv == NNG_EADDRINUSE ? CM_EBUSY : CM_EINVAL,
	             "cannot listen on transport address [%s]: %s", url, nng_strerror(rv));
	if (tls)
		nng_tls_config_free(tls);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	opts_free(&s->o);
	cm_free(T, s);
	return err ? err->code : CM_EINVAL;
}

void
nd_server_stop(nd_server *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	while (s->busy > 0)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	if (s->tls_tick)
		nng_aio_free(s->tls_tick); /* cancels the timer, waits for its callback */
	if (!close_bounded(s->sock, close_deadline())) {
		/* srv_cb may still run on s and its contexts: keep them */
		cm_warn("transport",
		        "transport server on %s did not close within its deadline (nng pipe "
		        "teardown); leaving it to the process exit",
		        s->url);
		left_to_exit(s);
		return;
	}
	for (int i = 0; i < s->nctx; i++) {
		nng_aio_free(s->ctxs[i].aio); /* waits for a callback in progress */
		nng_ctx_close(s->ctxs[i].ctx);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	cm_free(T, s->ctxs);
	cm_free(T, s->url);
	opts_free(&s->o);
	cm_free(T, s);
}

uint64_t
nd_server_tls_refused(const nd_server *s)
{
	return s->tls_tick ? tls_failures("listener", nng_listener_id(s->listener)) : 0;
}

uint64_t
nd_server_refused(const nd_server *s)
{
	return atomic_load(&((nd_server *)s)->refused);
}

/* ---- client ---- */

typedef struct call call;

#define PEER_MAX_PIPES 16 /* a REQ dialer has one; more are transient */

struct nd_peer {
	nng_socket sock;
	nng_dialer dialer;
	opts_copy o;
	char *url;
	pthread_mutex_t mu;
	call *inflight; /* doubly linked, for cancelling on disconnect */
	/* The pipes added to the socket, by id: nng reports the removal of a
	 * pipe that was closed between ADD_PRE and ADD_POST although it never
	 * reported it added, so a plain count fell to 0 beside a live pipe and
	 * every call then failed at once until the next connection event:
	 * pipe A added, A lost, B closed before it was added (REM_POST B),
	 * C added, and A's removal reported last by the reaper. Under load a
	 * node restarted in R8 was held unreachable by its master for
	 * minutes that way. */
	uint32_t pipe_ids[PEER_MAX_PIPES];
	int pipes;
	bool tls;
	bool aborted;        /* nd_peer_abort: every call fails at once, under mu */
	uint64_t hs_failed;  /* handshake failures already reported, under mu */
	uint64_t hs_checked; /* cm_now_ns() of the last look at them */
	uint64_t hs_warned;  /* cm_now_ns() of the last WARN */
};

enum { CALL_SEND, CALL_RECV };

struct call {
	nd_peer *p;
	nng_ctx ctx;
	nng_aio *aio;
	int state;
	uint64_t deadline_ns;
	nd_reply_fn cb;
	void *arg;
	call *prev, *next;
};

static void
call_unlink(call *c)
{
	nd_peer *p = c->p;
	pthread_mutex_lock(&p->mu);
	if (c->prev)
		c->prev->next = c->next;
	else if (p->inflight == c)
		p->inflight = c->next;
	if (c->next)
		c->next->prev = c->prev;
	pthread_mutex_unlock(&p->mu);
}

static void
call_finish(call *c, cm_err rc, uint32_t type, const uint8_t *payload, size_t len)
{
	call_unlink(c);
	c->cb(c->arg, rc, type, payload, len);
	nng_ctx_close(c->ctx);
	nng_aio_reap(c->aio); /* we are inside its callback: free it from the reaper */
	cm_free(T, c);
}

static nng_duration
ms_left(uint64_t deadline_ns)
{
	uint64_t now = cm_now_ns();
	if (deadline_ns <= now)
		return 1;
	return (nng_duration)((deadline_ns - now) / 1000000 + 1);
}

static void
call_cb(void *arg)
{
	call *c = arg;
	int rv = nng_aio_result(c->aio);

	if (c->state == CALL_SEND) {
		if (rv != 0) {
			nng_msg_free(nng_aio_get_msg(c->aio));
			call_finish(c, rv == NNG_ECANCELED ? CM_EUNAVAIL : nng_to_cm(rv), 0, NULL,
			            0);
			return;
		}
		c->state = CALL_RECV;
		nng_aio_set_timeout(c->aio, ms_left(c->deadline_ns));
		nng_ctx_recv(c->ctx, c->aio);
		return;
	}
	if (rv != 0) {
		call_finish(c, rv == NNG_ECANCELED ? CM_EUNAVAIL : nng_to_cm(rv), 0, NULL, 0);
		return;
	}
	nng_msg *m = nng_aio_get_msg(c->aio);
	pr_envelope env;
	cm_error err = {0};
	if (pr_envelope_unpack(nng_msg_body(m), nng_msg_len(m), c->p->o.cluster, c->p->o.secret,
	                       &env, &err) != CM_OK) {
		cm_warn("transport", "refused a reply from %s: %s", c->p->url, err.reason);
		call_finish(c, CM_EINVAL, 0, NULL, 0);
	} else {
		call_finish(c, CM_OK, env.type, env.payload, env.len);
		pr_envelope_free(&env);
	}
	nng_msg_free(m);
}

/* A peer that drops its last connection fails its in-flight calls at once
 * instead of leaving them to wait for their deadline (or to be resent to
 * the node when it comes back). */
static void
peer_pipe_event(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
	nd_peer *p = arg;
	uint32_t id = nng_pipe_id(pipe);
	pthread_mutex_lock(&p->mu);
	int at = -1;
	for (int i = 0; i < p->pipes && at < 0; i++)
		if (p->pipe_ids[i] == id)
			at = i;
	if (ev == NNG_PIPE_EV_ADD_POST && at < 0 && p->pipes < PEER_MAX_PIPES)
		p->pipe_ids[p->pipes++] = id;
	else if (ev == NNG_PIPE_EV_REM_POST && at >= 0)
		p->pipe_ids[at] = p->pipe_ids[--p->pipes];
	if (ev == NNG_PIPE_EV_REM_POST && p->pipes == 0)
		for (call *c = p->inflight; c; c = c->next)
			nng_aio_cancel(c->aio);
	pthread_mutex_unlock(&p->mu);
}

cm_err
nd_peer_open(const char *url, const nd_transport_opts *o, nd_peer **out, cm_error *err)
{
	nd_peer *p;
	nng_tls_config *tls = NULL;
	cm_err rc;
	int rv;

	if ((rc = tls_check_url(url, o, err)))
		return rc;
	if (tls_on(o) && (rc = tls_config(o, false, &tls, err)))
		return rc;
	p = cm_calloc(T, 1, sizeof(*p));
	opts_set(&p->o, o);
	p->url = cm_strdup(T, url);
	p->tls = tls != NULL;
	pthread_mutex_init(&p->mu, NULL);
	if ((rv = nng_req0_open(&p->sock)) != 0)
		goto fail;
	nng_socket_set_ms(p->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_size(p->sock, NNG_OPT_RECVMAXSZ, p->o.max_msg);
	nng_socket_set_ms(p->sock, NNG_OPT_RECONNMINT, 50);
	nng_socket_set_ms(p->sock, NNG_OPT_RECONNMAXT, 1000);
	nng_pipe_notify(p->sock, NNG_PIPE_EV_ADD_POST, peer_pipe_event, p);
	nng_pipe_notify(p->sock, NNG_PIPE_EV_REM_POST, peer_pipe_event, p);
	/* Created, configured, then started, as the listener. */
	if ((rv = nng_dialer_create(&p->dialer, p->sock, url)) != 0 ||
	    (tls && (rv = nng_dialer_set_ptr(p->dialer, NNG_OPT_TLS_CONFIG, tls)) != 0) ||
	    (rv = nng_dialer_start(p->dialer, NNG_FLAG_NONBLOCK)) != 0) {
		nng_close(p->sock);
		goto fail;
	}
	if (tls)
		nng_tls_config_free(tls); /* the dialer holds its own reference */
	*out = p;
	return CM_OK;
fail:
	cm_error_set(err, CM_EINVAL, "cannot dial transport address [%s]: %s", url,
	             nng_strerror(rv));
	if (tls)
		nng_tls_config_free(tls);
	pthread_mutex_destroy(&p->mu);
	opts_free(&p->o);
	cm_free(T, p->url);
	cm_free(T, p);
	return CM_EINVAL;
}

void
nd_peer_abort(nd_peer *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	p->aborted = true;
	for (call *c = p->inflight; c; c = c->next)
		nng_aio_cancel(c->aio);
	pthread_mutex_unlock(&p->mu);
}

void
nd_peer_close(nd_peer *p)
{
	if (p == NULL)
		return;
	/* nng 1.5 can hang in nng_close when the socket's dialer has a
	 * reconnect task prepared but not started (nng issue #1543): stop the
	 * dialer first and let that task run out before closing the socket. */
	nng_dialer_close(p->dialer);
	nng_msleep(50);
	uint64_t deadline = close_deadline();
	bool closed = close_bounded(p->sock, deadline); /* in-flight calls complete with an error */
	for (;;) {
		pthread_mutex_lock(&p->mu);
		bool empty = p->inflight == NULL;
		pthread_mutex_unlock(&p->mu);
		if (empty)
			break;
		if (cm_now_ns() >= deadline) {
			closed = false;
			break;
		}
		nng_msleep(1);
	}
	if (!closed) {
		/* pipe events and call callbacks may still run on p: keep it */
		cm_warn("transport",
		        "connection to %s did not close within its deadline (nng pipe "
		        "teardown); leaving it to the process exit",
		        p->url);
		left_to_exit(p);
		return;
	}
	pthread_mutex_destroy(&p->mu);
	opts_free(&p->o);
	cm_free(T, p->url);
	cm_free(T, p);
}

/* Says why a TLS peer stays unreachable when its handshakes are what
 * fails: a node with a certificate from another CA, or a plain tcp://
 * listener, looks like a node that is down otherwise. Looks at nng's
 * per-dialer counters at most every 200 ms, warns at most every 10 s. */
static void
peer_tls_check(nd_peer *p)
{
	uint64_t now = cm_now_ns();
	nng_stat *root = NULL;

	if (!p->tls)
		return;
	pthread_mutex_lock(&p->mu);
	bool look = now - p->hs_checked >= 200000000ull || p->hs_checked == 0;
	if (look)
		p->hs_checked = now;
	pthread_mutex_unlock(&p->mu);
	if (!look || nng_stats_get(&root) != 0)
		return;
	nng_stat *ds = stat_find(root, "dialer", nng_dialer_id(p->dialer));
	uint64_t auth = stat_value(ds, "auth"), proto = stat_value(ds, "proto");
	nng_stats_free(root);
	pthread_mutex_lock(&p->mu);
	bool warn = auth + proto > p->hs_failed &&
	            (p->hs_warned == 0 || now - p->hs_warned >= TLS_WARN_EVERY_NS);
	if (warn) {
		p->hs_failed = auth + proto;
		p->hs_warned = now;
	}
	pthread_mutex_unlock(&p->mu);
	if (warn)
		cm_warn("transport",
		        "TLS handshake with peer %s failed (%llu certificate/crypto errors, %llu "
		        "protocol errors so far): a certificate not signed by the other "
		        "side's CA, or a peer without TLS",
		        p->url, (unsigned long long)auth, (unsigned long long)proto);
}

void
nd_peer_call(nd_peer *p, uint32_t type, const void *payload, size_t len, uint64_t deadline_ns,
             nd_reply_fn cb, void *arg)
{
	if (p == NULL) { /* a node known by name only: no address yet */
		cb(arg, CM_EUNAVAIL, 0, NULL, 0);
		return;
	}
	call *c = cm_calloc(T, 1, sizeof(*c));
	nng_msg *m = NULL;

	if (deadline_ns == 0)
		deadline_ns = cm_now_ns() + DEFAULT_TIMEOUT_NS;
	c->p = p;
	c->cb = cb;
	c->arg = arg;
	c->deadline_ns = deadline_ns;
	pthread_mutex_lock(&p->mu);
	int pipes = p->aborted ? -1 : p->pipes;
	pthread_mutex_unlock(&p->mu);
	if (pipes < 0) {
		cm_free(T, c);
		cb(arg, CM_EUNAVAIL, 0, NULL, 0);
		return;
	}
	if (pipes == 0)
		peer_tls_check(p);
	if (pipes == 0 || (m = envelope_msg(&p->o, type, deadline_ns, payload, len)) == NULL ||
	    nng_ctx_open(&c->ctx, p->sock) != 0) {
		if (m != NULL)
			nng_msg_free(m);
		cm_free(T, c);
		cb(arg, CM_EUNAVAIL, 0, NULL, 0);
		return;
	}
	if (nng_aio_alloc(&c->aio, call_cb, c) != 0) {
		nng_msg_free(m);
		nng_ctx_close(c->ctx);
		cm_free(T, c);
		cb(arg, CM_ENOMEM, 0, NULL, 0);
		return;
	}
	pthread_mutex_lock(&p->mu);
	if (p->aborted) {
		/* nd_peer_abort ran since the check above: it cannot cancel a call
		 * it does not see, which would then wait for its deadline */
		pthread_mutex_unlock(&p->mu);
		nng_msg_free(m);
		nng_aio_free(c->aio);
		nng_ctx_close(c->ctx);
		cm_free(T, c);
		cb(arg, CM_EUNAVAIL, 0, NULL, 0);
		return;
	}
	c->next = p->inflight;
	if (p->inflight)
		p->inflight->prev = c;
	p->inflight = c;
	pthread_mutex_unlock(&p->mu);
	c->state = CALL_SEND;
	nng_aio_set_timeout(c->aio, ms_left(deadline_ns));
	nng_aio_set_msg(c->aio, m);
	nng_ctx_send(c->ctx, c->aio);
}

bool
nd_peer_connected(nd_peer *p)
{
	if (p == NULL)
		return false;
	pthread_mutex_lock(&p->mu);
	bool up = !p->aborted && p->pipes > 0;
	pthread_mutex_unlock(&p->mu);
	return up;
}

typedef struct sync_call {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	cm_err rc;
	uint32_t type;
	cm_buf *reply;
} sync_call;

static void
sync_cb(void *arg, cm_err rc, uint32_t type, const uint8_t *payload, size_t len)
{
	sync_call *s = arg;
	pthread_mutex_lock(&s->mu);
	s->rc = rc;
	s->type = type;
	if (rc == CM_OK && s->reply)
		cm_buf_put(s->reply, payload, len);
	s->done = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

cm_err
nd_peer_call_sync(nd_peer *p, uint32_t type, const void *payload, size_t len, uint64_t deadline_ns,
                  uint32_t *reply_type, cm_buf *reply)
{
	sync_call s = {.reply = reply};
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.cv, NULL);
	nd_peer_call(p, type, payload, len, deadline_ns, sync_cb, &s);
	pthread_mutex_lock(&s.mu);
	while (!s.done)
		pthread_cond_wait(&s.cv, &s.mu);
	pthread_mutex_unlock(&s.mu);
	pthread_mutex_destroy(&s.mu);
	pthread_cond_destroy(&s.cv);
	if (reply_type)
		*reply_type = s.type;
	return s.rc;
}
