/* Node-to-node transport over nng: a REP server with a pool of contexts
 * feeding a worker pool, and a REQ client per peer with one context and
 * one aio per in-flight request. Every message is an envelope carrying the
 * cluster name and secret (proto/pr.h); mismatches are refused and logged.
 * The only code that includes nng.h. */
#ifndef ND_TRANSPORT_H
#define ND_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../common/cm_sys.h"

/* How a TLS peer's certificate is checked (nd_transport_opts.tls_verify). */
enum {
	/* Both sides present a certificate signed by the CA in tls_ca, or the
	 * handshake fails (mutual TLS: the certificate proves membership, the
	 * secret in the envelope stays as a second check). The default. */
	ND_TLS_VERIFY_REQUIRED = 0,
	/* Certificates are checked against tls_ca when presented but a failed
	 * check does not end the handshake: encryption, membership by secret. */
	ND_TLS_VERIFY_OPTIONAL = 1,
	/* No certificate checks at all (tls_ca may be NULL): encryption only,
	 * open to a man in the middle. */
	ND_TLS_VERIFY_NONE = 2,
};

typedef struct nd_transport_opts {
	const char *cluster;  /* cluster name every message must carry */
	const char *secret;   /* shared secret every message must carry */
	size_t max_msg_bytes; /* NNG_OPT_RECVMAXSZ on every socket (default 64 MiB) */
	/* TLS (nng's tls+tcp:// transport over mbedTLS): PEM file paths. With
	 * tls_cert NULL the transport is plain tcp:// and the other tls_ fields
	 * are ignored; otherwise urls must be tls+tcp:// and tls_key is
	 * required, tls_ca too unless tls_verify is ND_TLS_VERIFY_NONE. The
	 * files are read once, at nd_server_start / nd_peer_open. Host names
	 * are not checked (nodes are usually named by IP): the chain to tls_ca
	 * is what identifies a cluster member. */
	const char *tls_cert, *tls_key, *tls_ca;
	int tls_verify; /* ND_TLS_VERIFY_* */
} nd_transport_opts;

/* ---- server ---- */

typedef struct nd_server nd_server;

/* Handles one request on a worker thread: writes the reply payload to
 * `reply` and its type to *reply_type. deadline_ns is absolute (0: none). */
typedef void (*nd_serve_fn)(void *ctx, uint32_t type, const uint8_t *payload, size_t len,
                            uint64_t deadline_ns, cm_buf *reply, uint32_t *reply_type);

/* Listens on url ("tcp://127.0.0.1:9300", or "tls+tcp://..." with the TLS
 * options) with `contexts` concurrent receive contexts; handlers run on
 * `pool` (borrowed). A TLS file that is missing, unreadable or not valid
 * PEM fails here with a message naming it. */
cm_err nd_server_start(const char *url, const nd_transport_opts *o, int contexts, cm_pool *pool,
                       nd_serve_fn fn, void *ctx, nd_server **out, cm_error *err);
void nd_server_stop(nd_server *s);
uint64_t nd_server_refused(const nd_server *s); /* envelopes refused (name/secret/bad bytes) */
/* TLS handshakes the listener refused or lost (certificate not accepted,
 * a peer without TLS); 0 without TLS. Also logged (WARN) every few
 * seconds while it grows. */
uint64_t nd_server_tls_refused(const nd_server *s);

/* ---- client ---- */

typedef struct nd_peer nd_peer;

/* Dials url in the background (reconnecting on its own); never blocks on
 * the network. With TLS options, loads the files first (errors name the
 * file); a peer whose handshake keeps failing (certificate from another
 * CA, plain tcp on the other end) stays unreachable: calls fail at once
 * with CM_EUNAVAIL and a WARN line names the peer's url. */
cm_err nd_peer_open(const char *url, const nd_transport_opts *o, nd_peer **out, cm_error *err);
void nd_peer_close(nd_peer *p);
/* Shutting down: calls in flight complete with CM_EUNAVAIL now, and every
 * later nd_peer_call fails at once; the peer stays valid until closed. */
void nd_peer_abort(nd_peer *p);

/* Called exactly once per nd_peer_call: with the reply, or with an error
 * (CM_ETIMEDOUT past the deadline, CM_EUNAVAIL when the peer cannot be
 * reached, CM_EINVAL when it refused us). payload is valid only during the
 * call. Runs on an nng thread: keep it short, never block. */
typedef void (*nd_reply_fn)(void *arg, cm_err rc, uint32_t type, const uint8_t *payload,
                            size_t len);

/* Sends without waiting; the request is never resent behind our back
 * (NNG_OPT_REQ_RESENDTIME is infinite). deadline_ns absolute, 0 = 30 s. */
void nd_peer_call(nd_peer *p, uint32_t type, const void *payload, size_t len, uint64_t deadline_ns,
                  nd_reply_fn cb, void *arg);

/* Whether a connection to the peer is up now: false while its dialer's
 * connects fail (refused, unreachable), when a call fails at once with
 * CM_EUNAVAIL. A peer NULL (known by name only) is not connected. */
bool nd_peer_connected(nd_peer *p);

/* Blocking form: copies the reply payload into `reply`. */
cm_err nd_peer_call_sync(nd_peer *p, uint32_t type, const void *payload, size_t len,
                         uint64_t deadline_ns, uint32_t *reply_type, cm_buf *reply);

#endif
