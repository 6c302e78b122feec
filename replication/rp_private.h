/* Internals of replication/: the runtime's state, shared by rp_core.c
 * (routes, the write path, checkpoints) and rp_recovery.c.
 *
 * Lock order (take left before right, never the other way):
 *   rp_shard.lock  ->  rp.route_lock
 *   rp_shard.lock  ->  rp.mu
 * route_lock and mu are never held together, and neither is held across
 * a host call that reaches the network. rp_shard.lock is held for reading
 * by a write in flight (across its forward to the copies: that is what
 * orders writes against a recovery's start and finalize); it is held for
 * writing only for local work (starting to track a copy, reading the log
 * a copy still lacks, ending the finalize), never across a network call. */
#ifndef RP_PRIVATE_H
#define RP_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "../common/cm_sys.h"
#include "../proto/pr.h"
#include "rp.h"

#define MEM CM_MEM_REPLICATION
#define NONE (-1)

/* A taken local copy. */
typedef struct rp_copy {
	void *ref;
	st_shard *s;
} rp_copy;

/* Routes of one index, rebuilt from each adopted state. */
typedef struct route_ix {
	char name[256];
	char uuid[64];
	int nshards;
	rp_route *shards;
} route_ix;

/* Primary-side state of one shard: who else gets its operations, what
 * they have confirmed, the global checkpoint. */
typedef struct rp_shard {
	char index[256];
	char uuid[64];
	int shard;
	pthread_rwlock_t lock;     /* writers read-hold it; see the lock order */
	uint64_t tracking;         /* copies in recovery: forwarded to, not waited for */
	uint64_t pending;          /* copies finalizing: forwarded to, and a failure is not acked */
	uint64_t pending_failed;   /* pending copies a forward failed on */
	uint64_t doubt;            /* copies the master may have counted in (a STARTED ask
	                            * whose answer was lost): treated as in sync until the
	                            * routes show them or the master took them out */
	int64_t ckp[RP_MAX_NODES]; /* (under rp.mu) */
	int64_t gcp;
	int64_t gcp_sent;               /* the last one the copies were told */
	uint64_t term;                  /* the term the checkpoints were gathered in */
	int64_t rec_from[RP_MAX_NODES]; /* retention marker per recovering copy */
	uint64_t hold_until_ns, hold_term; /* a hand-over being prepared: writes wait (rp.mu) */
	struct rp_shard *next;
} rp_shard;

#define REC_LOG_MAX 256

typedef struct rec_rec {
	char index[256];
	int shard;
	char type[16], stage[16], source[64], target[64];
	int64_t start_ms, stop_ms;
	uint64_t files, bytes, ops;
	bool failed;
} rec_rec;

/* Whether the routing lists a copy on node. */
static inline bool
has_copy(const rp_route *ro, int node)
{
	for (int c = 0; c < ro->ncopies; c++)
		if (ro->copies[c] == node)
			return true;
	return false;
}

/* Nodes in the table now (it only grows; a name is set before the count). */
#define rp_nn(r) ((r)->nn_live ? atomic_load((r)->nn_live) : (r)->nn)

struct rp {
	rp_host_ops ops;
	void *host;
	int nn, self;
	const _Atomic int *nn_live; /* the node table as it grows, or NULL: nn */
	const char *const *names;
	char data_dir[1024];
	pthread_rwlock_t route_lock;
	route_ix *routes;
	size_t nroutes;
	uint32_t *route_slot; /* routes by name: position + 1, 0 empty; route_cap slots */
	size_t route_cap;     /* a power of two above twice nroutes */
	pthread_mutex_t mu; /* shards, the recovery log, recovery scheduling */
	rp_shard *shards;
	rec_rec log[REC_LOG_MAX];
	size_t nlog;
	uint64_t failover_ns, replica_ns, rec_bytes_per_s;
	_Atomic bool joined;
	pthread_t rec_thread;
	bool rec_running;
	_Atomic bool rec_busy;
	uint64_t next_rec_ns;
	uint64_t snap_seq;
};

static inline int64_t
seq_i(uint64_t v)
{
	return v == ST_NO_SEQ ? NONE : (int64_t)v;
}

static inline uint64_t
seq_u(int64_t v)
{
	return v < 0 ? ST_NO_SEQ : (uint64_t)v;
}

/* protobuf-c allocations under CM_MEM_REPLICATION (rp_state.c). */
struct ProtobufCAllocator;
#define RP_PB pr_pb_allocator(MEM) /* protobuf-c decodes accounted here */

bool rp_take(rp *r, const char *index, const char *uuid, int shard, rp_copy *c);
void rp_release(rp *r, rp_copy *c);
rp_shard *rp_shard_get(rp *r, const char *index, const char *uuid, int shard);

/* Forwarding a numbered batch to the copies in a mask (rp_core.c). */
typedef struct fwd_call {
	cm_wait *w;
	rp *r;
	int node;
	cm_err rc;
	char why[200];
	int64_t ckp;
	bool stale;
} fwd_call;
void rp_forward(rp *r, const char *index, const char *uuid, int shard, const st_op *ops, size_t n,
                uint64_t term, int64_t gcp, uint64_t mask, uint64_t deadline_ns, fwd_call *calls);
cm_err rp_ask_master(rp *r, rp_event_kind kind, const char *index, const char *uuid, int shard,
                     int node, uint64_t term, const char *reason, cm_error *err);

/* A synchronous call: the Ack's error or body (cm_malloc'd, MEM). */
cm_err rp_call_sync(rp *r, int node, uint32_t type, const cm_buf *req, uint64_t deadline_ns,
                    uint8_t **body, size_t *len, cm_error *err);

/* Recovery (rp_recovery.c). */
void rp_rec_serve(rp *r, uint32_t type, const uint8_t *p, size_t len, cm_error *err, cm_buf *body);
void rp_rec_maybe_start(rp *r);
void rp_rec_reset_dirs(rp *r);
void rp_retain(rp *r, rp_shard *rs, st_shard *s, int target, int64_t from);

#endif
