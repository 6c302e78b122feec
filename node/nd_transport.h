/* Node-to-node transport over nng: a REP server with a pool of contexts
 * feeding a worker pool, and a REQ client per peer with one context and
 * one aio per in-flight request. Every message is an envelope carrying the
 * cluster name and secret (proto/pr.h); mismatches are refused and logged.
 * The only code that includes nng.h. */
#ifndef ND_TRANSPORT_H
#define ND_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../common/cm_sys.h"

typedef struct nd_transport_opts {
	const char *cluster;   /* cluster name every message must carry */
	const char *secret;    /* shared secret every message must carry */
	size_t max_msg_bytes;  /* NNG_OPT_RECVMAXSZ on every socket (default 64 MiB) */
} nd_transport_opts;

/* ---- server ---- */

typedef struct nd_server nd_server;

/* Handles one request on a worker thread: writes the reply payload to
 * `reply` and its type to *reply_type. deadline_ns is absolute (0: none). */
typedef void (*nd_serve_fn)(void *ctx, uint32_t type, const uint8_t *payload, size_t len,
                            uint64_t deadline_ns, cm_buf *reply, uint32_t *reply_type);

/* Listens on url ("tcp://127.0.0.1:9300") with `contexts` concurrent
 * receive contexts; handlers run on `pool` (borrowed). */
cm_err nd_server_start(const char *url, const nd_transport_opts *o, int contexts, cm_pool *pool,
                       nd_serve_fn fn, void *ctx, nd_server **out, cm_error *err);
void nd_server_stop(nd_server *s);
uint64_t nd_server_refused(const nd_server *s); /* envelopes refused (name/secret/bad bytes) */

/* ---- client ---- */

typedef struct nd_peer nd_peer;

/* Dials url in the background (reconnecting on its own); never blocks. */
cm_err nd_peer_open(const char *url, const nd_transport_opts *o, nd_peer **out, cm_error *err);
void nd_peer_close(nd_peer *p);

/* Called exactly once per nd_peer_call: with the reply, or with an error
 * (CM_ETIMEDOUT past the deadline, CM_EUNAVAIL when the peer cannot be
 * reached, CM_EINVAL when it refused us). payload is valid only during the
 * call. Runs on an nng thread: keep it short, never block. */
typedef void (*nd_reply_fn)(void *arg, cm_err rc, uint32_t type, const uint8_t *payload,
                            size_t len);

/* Sends without waiting; the request is never resent behind our back
 * (NNG_OPT_REQ_RESENDTIME is infinite). deadline_ns absolute, 0 = 30 s. */
void nd_peer_call(nd_peer *p, uint32_t type, const void *payload, size_t len,
                  uint64_t deadline_ns, nd_reply_fn cb, void *arg);

/* Blocking form: copies the reply payload into `reply`. */
cm_err nd_peer_call_sync(nd_peer *p, uint32_t type, const void *payload, size_t len,
                         uint64_t deadline_ns, uint32_t *reply_type, cm_buf *reply);

#endif
