/* The HTTP connection registry (private to co_http.c): total deadlines on
 * a request's head and body that trickled bytes do not extend, and the
 * connection slots kept free for new clients. MHD owns the sockets; this
 * module only ever shutdown(2)s one, under its lock, while MHD has not yet
 * reported the connection closed (MHD closes the fd after that report), so
 * it never touches a reused descriptor. */
#ifndef CO_CONN_H
#define CO_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/cm_err.h"

typedef struct co_conns co_conns; /* every open connection of one server */
typedef struct co_conn co_conn;   /* one connection: MHD's socket context */

typedef struct co_conns_opts {
	int soft_limit;     /* http.max_open_connections: past it, 429 */
	int hard_limit;     /* MHD's own limit, above soft_limit */
	uint64_t header_ns; /* http.header_timeout: accept (or the previous reply) to full head */
	uint64_t body_ns;   /* http.body_timeout: time spent waiting for body bytes */
} co_conns_opts;

/* Starts the registry and its sweeper thread; the caller frees it with
 * co_conns_stop after the HTTP daemon has stopped. */
cm_err co_conns_start(const co_conns_opts *o, co_conns **out, cm_error *err);
/* Stops the sweeper and frees the registry and any connection left in it. */
void co_conns_stop(co_conns *cs);

/* A connection was accepted on socket fd: returns its record (owned by the
 * registry until co_conn_closed). The head deadline starts now. */
co_conn *co_conn_opened(co_conns *cs, int fd);
/* MHD reports the connection closed (before closing fd): frees k. */
void co_conn_closed(co_conns *cs, co_conn *k);

/* The head of a request is complete: false when the connection was
 * accepted past the soft limit and no slot could be freed for it (the
 * caller answers 429). Frees a slot by closing the oldest connection
 * that is slow to send its head or idle between requests. */
bool co_conn_admit(co_conns *cs, co_conn *k);
/* The server works on the request (an access callback runs, or the reply
 * is being sent): no deadline runs. */
void co_conn_busy(co_conns *cs, co_conn *k);
/* The server waits for more body bytes: the body clock runs again. */
void co_conn_wait_body(co_conns *cs, co_conn *k);
/* The request is over (reply sent): the head deadline of the next request
 * on this keep-alive connection starts now. */
void co_conn_request_done(co_conns *cs, co_conn *k);

#endif
