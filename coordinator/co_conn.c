/* HTTP connection deadlines and free slots (see co_conn.h).
 *
 * MHD's connection timeout is an idle timeout: a client that trickles a
 * byte every few seconds keeps its socket forever, and a thousand such
 * sockets leave every new client a 429. Here each connection is in one
 * phase at a time:
 *   HEAD  waiting for a request head, since the accept or the end of the
 *         previous request: closed once http.header_timeout has passed;
 *   BODY  waiting for body bytes: closed once the waits add up to
 *         http.body_timeout (time in the server's own callbacks not counted);
 *   BUSY  the server works on the request or sends the reply: no deadline
 *         here (MHD's idle timeout still drops a peer that stops reading).
 * A sweeper thread checks the deadlines ten times a second. Closing is a
 * shutdown(2) of the socket: MHD then sees the peer gone and closes the
 * connection itself, from its own thread.
 *
 * Free slots: a connection accepted past http.max_open_connections is
 * answered 429 only when, at the moment its head is complete, no slot can
 * be freed for it. A slot is freed by closing the connection in HEAD phase
 * that has waited longest past a short grace (over-limit connections
 * first, after CO_CONN_OVER_GRACE; others after CO_CONN_SLOW_GRACE, so
 * that connections that are merely new are never taken). The sweeper
 * also keeps the open count below MHD's hard limit by a margin, so that
 * new clients can be accepted at all. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "co_conn.h"

#define MEM CM_MEM_COORDINATOR

#define CO_CONN_TICK_NS 100000000ull        /* deadline checks, 10 a second */
#define CO_CONN_OVER_GRACE_NS 500000000ull  /* an over-limit head: at most header/4 */
#define CO_CONN_SLOW_GRACE_NS 2000000000ull /* any other head: at most header/2 */
#define CO_CONN_LOG_EVERY_NS 10000000000ull /* one summary line per 10 s at most */

typedef enum { PH_HEAD, PH_BODY, PH_BUSY } co_phase;

struct co_conn {
	co_conn *prev, *next; /* in accept order */
	int fd;
	co_phase phase;
	uint64_t since_ns;  /* HEAD: start of the head wait; BODY: start of this wait */
	uint64_t waited_ns; /* BODY: earlier waits for this request's body */
	bool over_limit;    /* accepted past the soft limit and not admitted yet */
	bool shut;          /* shutdown(2) done; MHD has yet to close it */
};

struct co_conns {
	co_conns_opts o;
	uint64_t over_grace_ns, slow_grace_ns;
	int reserve; /* slots below the hard limit the sweeper keeps free */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t sweeper;
	bool stopping;
	co_conn *head, *tail;
	int open;  /* records in the list */
	int nshut; /* of which shut and not yet closed */
	/* closed since the last log line: past the head / body deadline, to
	 * make room for a new client, to keep slots below the hard limit */
	unsigned n_head, n_body, n_room, n_reserve;
	uint64_t last_log_ns;
};

static uint64_t
min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Called with mu held. */
static void
conn_shut(co_conns *cs, co_conn *k)
{
	shutdown(k->fd, SHUT_RDWR);
	k->shut = true;
	cs->nshut++;
}

/* The connection to close to make room, or NULL: in HEAD phase past its
 * grace, over-limit ones first, the longest waiting first. mu held. */
static co_conn *
pick_victim(co_conns *cs, const co_conn *self, uint64_t now)
{
	co_conn *best = NULL;
	for (co_conn *k = cs->head; k; k = k->next) {
		if (k == self || k->shut || k->phase != PH_HEAD)
			continue;
		uint64_t age = now - k->since_ns;
		if (age < (k->over_limit ? cs->over_grace_ns : cs->slow_grace_ns))
			continue;
		if (!best || (k->over_limit && !best->over_limit) ||
		    (k->over_limit == best->over_limit && k->since_ns < best->since_ns))
			best = k;
	}
	return best;
}

/* Closes what is past its deadline, then keeps the reserve. mu held. */
static void
sweep(co_conns *cs, uint64_t now)
{
	for (co_conn *k = cs->head; k; k = k->next) {
		if (k->shut)
			continue;
		if (k->phase == PH_HEAD && now - k->since_ns > cs->o.header_ns) {
			conn_shut(cs, k);
			cs->n_head++;
		} else if (k->phase == PH_BODY &&
		           k->waited_ns + (now - k->since_ns) > cs->o.body_ns) {
			conn_shut(cs, k);
			cs->n_body++;
		}
	}
	while (cs->open - cs->nshut > cs->o.hard_limit - cs->reserve) {
		co_conn *v = pick_victim(cs, NULL, now);
		if (!v)
			break;
		conn_shut(cs, v);
		cs->n_reserve++;
	}
	if (cs->n_head + cs->n_body + cs->n_room + cs->n_reserve &&
	    now - cs->last_log_ns >= CO_CONN_LOG_EVERY_NS) {
		cm_info("http",
		        "closed connections: %u past http.header_timeout, %u past "
		        "http.body_timeout, %u slow ones to admit new clients, %u to keep slots "
		        "free (%d open)",
		        cs->n_head, cs->n_body, cs->n_room, cs->n_reserve, cs->open);
		cs->n_head = cs->n_body = cs->n_room = cs->n_reserve = 0;
		cs->last_log_ns = now;
	}
}

static void *
sweeper_main(void *arg)
{
	co_conns *cs = arg;
	pthread_mutex_lock(&cs->mu);
	while (!cs->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)CO_CONN_TICK_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&cs->cv, &cs->mu, &ts);
		if (!cs->stopping)
			sweep(cs, cm_now_ns());
	}
	pthread_mutex_unlock(&cs->mu);
	return NULL;
}

cm_err
co_conns_start(const co_conns_opts *o, co_conns **out, cm_error *err)
{
	co_conns *cs = cm_calloc(MEM, 1, sizeof(*cs));
	pthread_condattr_t ca;

	cs->o = *o;
	cs->over_grace_ns = min_u64(CO_CONN_OVER_GRACE_NS, o->header_ns / 4);
	cs->slow_grace_ns = min_u64(CO_CONN_SLOW_GRACE_NS, o->header_ns / 2);
	cs->reserve = (o->hard_limit - o->soft_limit) / 4;
	if (cs->reserve < 8)
		cs->reserve = 8;
	pthread_mutex_init(&cs->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&cs->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&cs->sweeper, NULL, sweeper_main, cs) != 0) {
		pthread_cond_destroy(&cs->cv);
		pthread_mutex_destroy(&cs->mu);
		cm_free(MEM, cs);
		return cm_error_set(err, CM_EIO, "cannot start the HTTP connection sweeper thread");
	}
	*out = cs;
	return CM_OK;
}

void
co_conns_stop(co_conns *cs)
{
	if (!cs)
		return;
	pthread_mutex_lock(&cs->mu);
	cs->stopping = true;
	pthread_cond_signal(&cs->cv);
	pthread_mutex_unlock(&cs->mu);
	pthread_join(cs->sweeper, NULL);
	while (cs->head) {
		co_conn *k = cs->head;
		cs->head = k->next;
		cm_free(MEM, k);
	}
	pthread_cond_destroy(&cs->cv);
	pthread_mutex_destroy(&cs->mu);
	cm_free(MEM, cs);
}

co_conn *
co_conn_opened(co_conns *cs, int fd)
{
	co_conn *k = cm_calloc(MEM, 1, sizeof(*k));
	k->fd = fd;
	k->phase = PH_HEAD;
	k->since_ns = cm_now_ns();
	pthread_mutex_lock(&cs->mu);
	k->prev = cs->tail;
	if (cs->tail)
		cs->tail->next = k;
	else
		cs->head = k;
	cs->tail = k;
	cs->open++;
	k->over_limit = cs->open - cs->nshut > cs->o.soft_limit;
	pthread_mutex_unlock(&cs->mu);
	return k;
}

void
co_conn_closed(co_conns *cs, co_conn *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&cs->mu);
	if (k->prev)
		k->prev->next = k->next;
	else
		cs->head = k->next;
	if (k->next)
		k->next->prev = k->prev;
	else
		cs->tail = k->prev;
	cs->open--;
	if (k->shut)
		cs->nshut--;
	pthread_mutex_unlock(&cs->mu);
	cm_free(MEM, k);
}

bool
co_conn_admit(co_conns *cs, co_conn *k)
{
	bool ok = true;
	if (!k)
		return true;
	pthread_mutex_lock(&cs->mu);
	k->phase = PH_BUSY;
	k->waited_ns = 0;
	if (k->over_limit && cs->open - cs->nshut > cs->o.soft_limit) {
		co_conn *v = pick_victim(cs, k, cm_now_ns());
		if (v) {
			conn_shut(cs, v);
			cs->n_room++;
		} else {
			ok = false;
		}
	}
	if (ok)
		k->over_limit = false;
	pthread_mutex_unlock(&cs->mu);
	return ok;
}

void
co_conn_busy(co_conns *cs, co_conn *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&cs->mu);
	if (k->phase == PH_BODY)
		k->waited_ns += cm_now_ns() - k->since_ns;
	if (k->phase != PH_HEAD) /* the head's end is co_conn_admit's */
		k->phase = PH_BUSY;
	pthread_mutex_unlock(&cs->mu);
}

void
co_conn_wait_body(co_conns *cs, co_conn *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&cs->mu);
	k->phase = PH_BODY;
	k->since_ns = cm_now_ns();
	pthread_mutex_unlock(&cs->mu);
}

void
co_conn_request_done(co_conns *cs, co_conn *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&cs->mu);
	k->phase = PH_HEAD;
	k->since_ns = cm_now_ns();
	k->waited_ns = 0;
	pthread_mutex_unlock(&cs->mu);
}
