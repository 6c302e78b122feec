/* Replication: the typed cluster state (indices, shard routing: primary,
 * term, in-sync set, copies), the primary's write path, global
 * checkpoints and peer recovery. The node supplies storage, transport and
 * the master through rp_host_ops; this module includes only common/,
 * storage/ and proto/. The rules are in rp_core.c; docs/replication.md. */
#ifndef RP_H
#define RP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../storage/st_shard.h"

#define RP_MAX_NODES 64
#define RP_MAX_COPIES 8

/* ---- the cluster state ---- */

/* Nodes are numbered by their place in the cluster's node table (the same
 * on every node); on the wire they travel by name. */
typedef struct rp_route {
	int primary;      /* node number; -1: none or unknown */
	uint64_t term;    /* primary term */
	uint64_t in_sync; /* bit per node number */
	int ncopies;
	int copies[RP_MAX_COPIES]; /* placement order */
	int relocating_from;       /* node whose copy goes once the new one is in sync; -1 none */
} rp_route;

typedef struct rp_index {
	char *name, *uuid;
	int nshards, nreplicas;
	char *body, *mappings; /* JSON text, owned; "" when none */
	char **settings_log;   /* JSON texts, in order */
	size_t nsettings;
	rp_route *routes; /* nshards */
} rp_index;

typedef struct rp_state {
	uint64_t version;
	rp_index *indices;
	size_t nindices;
	uint64_t joined[RP_MAX_NODES]; /* boot id each node joined with; 0 = none */
	char *settings; /* cluster settings, JSON text ({"persistent":..,"transient":..}); NULL none */
	char cluster_uuid[24]; /* "" until the first master's commit sets it */
	char *templates; /* index templates, JSON text ({"index":..,"component":..,"legacy":..}); NULL none */
	struct rp_names *byname; /* name -> position, kept by rp_state.c (NULL: scan) */
	size_t cap;              /* indices allocated */
} rp_state;

rp_state *rp_state_new(void);
rp_state *rp_state_dup(const rp_state *st);
void rp_state_free(rp_state *st);
rp_index *rp_state_index(const rp_state *st, const char *name);
/* Whether two indices are the same in every field the state encodes. */
bool rp_index_same(const rp_index *a, const rp_index *b);
/* Whether two indices have the same name, uuid, body, mappings and
 * settings log (a text two states share compares by its address). */
bool rp_index_texts_same(const rp_index *a, const rp_index *b);
/* Whether two indices have the same uuid and the same routes, shard by shard. */
bool rp_index_routes_same(const rp_index *a, const rp_index *b);
/* Adds (or replaces) an index: copy c of shard s on data node
 * data[(s + c) % ndata], copy 0 the primary in term 1, all in sync. */
rp_index *rp_state_add_index(rp_state *st, const char *name, const char *uuid, int nshards,
                             int nreplicas, const int *data, int ndata);
bool rp_state_remove_index(rp_state *st, const char *name);
/* Replaces st's global part (joined boot ids, cluster uuid, settings,
 * templates) with from's, which gives its texts up. */
void rp_state_take_global(rp_state *st, rp_state *from);
/* Puts a copy of src in st, replacing the index of that name. */
rp_index *rp_state_put_index(rp_state *st, const rp_index *src);
/* number_of_replicas of a live index: every shard gets min(1 + n, ndata)
 * copies; a new copy goes to the data node with the fewest copies of any
 * index and starts out of sync (it recovers from the primary); a copy
 * that goes is an out-of-sync one first, never the primary. True if any
 * routing changed. */
bool rp_state_set_replicas(rp_state *st, const char *name, int nreplicas, const int *data,
                           int ndata);
void rp_index_set_text(char **field, const char *text);
void rp_state_set_settings(rp_state *st, const char *json);
void rp_index_add_setting(rp_index *ix, const char *json);

/* Protobuf ClusterState; names[] maps node numbers to names. A name the
 * table lacks decodes as -1 (not a copy, not in sync). */
void rp_state_encode(const rp_state *st, const char *const *names, int nn, cm_buf *out);
cm_err rp_state_decode(const void *p, size_t len, const char *const *names, int nn, rp_state **out,
                       cm_error *err);
/* The state in parts, as it is kept in etcd: one ClusterState per index
 * (index i alone) and one for the rest (joined, settings); merging the
 * parts back (in any order) gives the state. */
void rp_state_encode_index(const rp_state *st, size_t i, const char *const *names, int nn,
                           cm_buf *out);
void rp_state_encode_global(const rp_state *st, const char *const *names, int nn, cm_buf *out);
cm_err rp_state_merge(rp_state *into, const void *p, size_t len, const char *const *names, int nn,
                      cm_error *err);
/* Every node name an encoded state mentions, for fn (a name may come
 * more than once): a node registers them before decoding. */
cm_err rp_state_names(const void *p, size_t len, void (*fn)(void *arg, const char *name),
                      void *arg);

/* ---- allocation (the master's) ---- */

typedef enum {
	RP_ALLOC_ALL,
	RP_ALLOC_PRIMARIES,
	RP_ALLOC_NEW_PRIMARIES,
	RP_ALLOC_NONE
} rp_alloc_enable;

typedef struct rp_alloc {
	const int *data; /* data nodes that may take new copies: up, joined, not excluded */
	int ndata;
	/* How long each node has been gone (its lease expired), 0 = present;
	 * its copies of an index leave once that passes delay_ns(ix). */
	const uint64_t *gone_ns; /* RP_MAX_NODES, may be NULL */
	uint64_t (*delay_ns)(void *arg, const rp_index *ix);
	void *arg;
	uint64_t drain; /* excluded nodes: their copies move away */
	int max_recoveries; /* incoming recoveries per node at once (node_concurrent_recoveries) */
	rp_alloc_enable enable;
	/* cluster.routing.rebalance.enable: which copies balancing may move
	 * (RP_REBALANCE_ALL is 0, the default) */
	enum { RP_REBALANCE_ALL, RP_REBALANCE_PRIMARIES, RP_REBALANCE_REPLICAS,
	       RP_REBALANCE_NONE } rebalance;
	/* A primary leaving a live node (drain, rebalance), when set: whether
	 * its node has prepared the hand-over to `to` in term (writes held,
	 * none in flight); *keep then names the copies holding every
	 * operation, which stay in sync under the new primary. false: not yet
	 * (the call asks for it), the primary stays this round. NULL: the
	 * other copies leave the in-sync set and resync. */
	bool (*handover)(void *arg, const char *index, int shard, int from, int to, uint64_t term,
	                 uint64_t *keep);
	const char *const *names; /* node numbers to names, for the log; may be NULL */
	int nnames;
} rp_alloc;

/* One allocation round: drops the copies of evicted nodes; adds copies
 * where a shard has fewer than 1 + replicas (at most max_recoveries
 * recovering on a node); moves copies off drained nodes and from the
 * fullest node to the emptiest while they differ by more than one (the
 * new copy recovers first, then the old one goes; a primary that must go
 * hands over to an in-sync copy with term + 1). Never two copies of a
 * shard on one node. True if the routing changed. */
bool rp_state_allocate(rp_state *st, const rp_alloc *a);

/* Events the master applies. Applying one twice changes nothing the
 * second time; a stale one (another primary or term) is CM_ECONFLICT. */
typedef enum { RP_EV_FAILED = 1, RP_EV_STARTED = 2, RP_EV_JOIN = 3 } rp_event_kind;
typedef struct rp_event {
	rp_event_kind kind;
	const char *index, *uuid; /* FAILED, STARTED */
	int shard;
	int node;      /* the copy's node; JOIN: the node that joins */
	int primary;   /* the asking primary (FAILED, STARTED) */
	uint64_t term; /* its term */
	uint64_t boot; /* JOIN */
	const char *reason;
} rp_event;

cm_err rp_state_apply(rp_state *st, const rp_event *ev, bool *changed, cm_error *err);
/* Promotes, with term + 1, an in-sync copy on a node in `alive` for every
 * shard whose primary is in `gone`. True if anything changed. */
bool rp_state_failover(rp_state *st, uint64_t gone, uint64_t alive);
void rp_event_encode(const rp_event *ev, const char *const *names, cm_buf *out);
/* Strings point into *keep (free with rp_event_free). */
cm_err rp_event_decode(const void *p, size_t len, const char *const *names, int nn, rp_event *ev,
                       void **keep, cm_error *err);
void rp_event_free(void *keep);

/* ---- the replication runtime of one node ---- */

typedef struct rp rp;
typedef void (*rp_reply_fn)(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len);

typedef struct rp_host_ops {
	/* The local copy of index shard (uuid "" matches any), held until
	 * release; NULL when this node has none. */
	st_shard *(*take)(void *host, const char *index, const char *uuid, int shard, void **ref);
	void (*release)(void *host, void *ref);
	/* Applies a batch to the copy taken as ref: numbered here (primary)
	 * or as the primary numbered it (replica), with dynamic mappings. */
	cm_err (*apply)(void *host, void *ref, int shard, const st_op *ops, size_t n,
	                st_op_result *res, bool replica);
	/* Sends a message to node; fn runs exactly once, on any thread. */
	void (*call)(void *host, int node, uint32_t type, const void *p, size_t len,
	             uint64_t deadline_ns, rp_reply_fn fn, void *arg);
	bool (*alive)(void *host, int node);
	void (*mark_down)(void *host, int node);
	/* Has the master apply ev, persist and publish it; CM_OK once it did. */
	cm_err (*master_event)(void *host, const rp_event *ev, cm_error *err);
	/* Learns the newest state from the master now (after a recovery). */
	void (*refresh_state)(void *host);
} rp_host_ops;

typedef struct rp_config {
	int nn, self;
	/* When set: the count of a node table that grows (etcd membership);
	 * names[] must then have room for RP_MAX_NODES, each set before the
	 * count covers it. */
	const _Atomic int *nn_live;
	const char *const *names; /* nn node names, borrowed for rp's life */
} rp_config;

rp *rp_create(const rp_host_ops *ops, void *host, const rp_config *cfg);
/* recovery-out/ and recovery-in/ go under data_dir; what an earlier run
 * left there is removed. Before the first message or tick. */
void rp_start(rp *r, const char *data_dir);
/* Stops the recovery thread (peer calls must fail by now) and frees. */
void rp_quiesce(rp *r);
void rp_destroy(rp *r);
/* cluster.primary_failover_timeout, cluster.replica_timeout,
 * cluster.recovery_max_bytes_per_sec. */
cm_err rp_setting(rp *r, const char *key, const char *value, cm_error *err);
uint64_t rp_failover_ns(const rp *r);

/* The node adopted st: routes are rebuilt from it (rp copies what it
 * needs); where this node leads, the shards learn their term. */
void rp_set_state(rp *r, const rp_state *st);
bool rp_route_get(rp *r, const char *index, int shard, rp_route *out);
/* Whether the master has taken this process in (writes wait for it). */
void rp_set_joined(rp *r, bool joined);
bool rp_joined(const rp *r);

/* Primary write path: numbers and applies ops here, forwards them to
 * every in-sync and recovering copy, acknowledges only what every in-sync
 * copy logged (a failed one is removed through the master first). */
cm_err rp_primary_apply(rp *r, void *ref, const char *index, const char *uuid, int shard,
                        const st_op *ops, size_t n, st_op_result *res, uint64_t deadline_ns);
/* The primary's side of a hand-over (drain, rebalance): waits for the
 * shard's writes in flight, confirms every in-sync copy's checkpoint
 * with an empty batch, and holds new writes for hold_ns or until the
 * routes name another primary (they then fail as moved, not applied).
 * *keep gets the copies (bit i: node i here; this node included) that
 * hold every operation: they may stay in sync under the new primary.
 * CM_ECONFLICT when this node does not lead the shard in term. hold_ns 0
 * releases a hold the master will not use. */
cm_err rp_handoff_prepare(rp *r, const char *index, const char *uuid, int shard, uint64_t term,
                          uint64_t hold_ns, uint64_t *keep, cm_error *err);
/* A copy's side of a forwarded batch (PR_BULK with replica set): term
 * check, apply, checkpoint; the BulkReply goes into reply. uuid is the
 * local copy's index uuid. */
void rp_serve_replica(rp *r, void *ref, const char *uuid, const void *bulk_req, cm_buf *reply);

/* Recovery messages (PR_REC_*): whether type is one, and serving it. */
bool rp_handles(uint32_t type);
void rp_serve(rp *r, uint32_t type, const uint8_t *p, size_t len, cm_buf *reply,
              uint32_t *reply_type);

/* Every monitor round: recoveries to start, idle global checkpoints. */
void rp_tick(rp *r);
/* _cat/recovery rows: index shard time type stage source target files
 * bytes ops, space separated, one per line. */
void rp_cat_recovery(rp *r, cm_buf *out);

#endif
