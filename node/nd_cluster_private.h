/* Cluster internals shared by nd_cluster.c (membership, the master, the
 * state, the message table), nd_cluster_host.c (replication's host),
 * nd_cluster_settings.c (cluster settings parsed once), and the request
 * paths: nd_cluster_write.c, nd_cluster_search.c, nd_cluster_copies.c
 * (preference, copy order), nd_cluster_get.c (gets, node figures, cl_call)
 * and nd_cluster_views.c (health, _cat, state).
 *
 * Lock order (take left before right, never the other way):
 *   nd_cluster.meta_lock -> nd_node.reg_lock -> nd_index locks -> storage
 *   nd_cluster.meta_lock -> rp route_lock (rp_set_state)
 *   nd_cluster.lock is a leaf (latency figures only).
 *   a search's search_st.lock (nd_cluster_search.c) -> nd_rank.c's rank_mu;
 *   rank_mu, timer_mu, cancel_mu are leaves (nd_rank.h).
 * No lock of the node is held across a network call: the master persists
 * and adopts a state under meta_lock, then publishes it after unlocking (a
 * node ignores a version older than its own, so publishes may cross). replication/rp_private.h
 * has the order of replication's own locks, which are never taken with
 * meta_lock held except route_lock. */
#ifndef ND_CLUSTER_PRIVATE_H
#define CL_PUB_RING 16            /* recent changes the master keeps to publish */
#define CL_PUB_RING_BYTES (1u << 20) /* a larger change is not kept (sent whole) */
#define ND_CLUSTER_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "../common/cm_sys.h"
#include "../replication/rp.h"
#include "nd_cluster.h"
#include "nd_transport.h"

typedef struct cJSON cJSON;

#define ND_CL_MAX_NODES RP_MAX_NODES
#define ND_CL_ADDR 128
#define ND_CL_MAX_COPIES RP_MAX_COPIES

typedef rp_route cl_route;
typedef struct cl_settings cl_settings;

typedef struct nd_cl_node {
	char name[64];
	char http[ND_CL_ADDR];
	char transport[ND_CL_ADDR + 8]; /* tcp://... this node listens on */
	char connect[ND_CL_ADDR + 8];   /* tcp://... the others dial */
	bool master, data;
	int data_ord;  /* -1: no data */
	nd_peer *_Atomic peer; /* NULL for self, and for a node known by name only */
	/* etcd membership (nd_cluster_etcd.c): its key is there (lease alive),
	 * with that boot id; the master's view of since when it is not. */
	_Atomic bool registered;
	_Atomic uint64_t reg_boot;
	_Atomic uint64_t gone_since_ns;
	_Atomic bool alive;
	_Atomic uint64_t down_since_ns; /* monotonic time it became unreachable, 0 = up */
	_Atomic uint64_t last_ok_ns;    /* monotonic time it last answered, 0 = never */
	_Atomic uint64_t boot;          /* its process's boot id, from its last pong */
	/* the state version its last pong carried when it was the master
	 * (0: none): a copy here answers realtime gets only once this node
	 * has applied that version (cl_may_serve_reads) */
	_Atomic uint64_t master_version;
	/* when its pong to our ping last came back (as the master: the base of
	 * the read window, cl_may_serve_reads), and when we last answered its
	 * ping (as the master: cl_reads_stopped waits out its window) */
	_Atomic uint64_t pong_ok_ns, pong_sent_ns;
	_Atomic uint64_t boot_joined;   /* the boot id it joined with (the state's "joined") */
	_Atomic uint64_t applied;       /* master: the newest state version it acknowledged */
	double ewma_us;                 /* recent round-trip latency, under nd_cluster.lock */
} nd_cl_node;

struct nd_cluster {
	char cluster_name[128], secret[256];
	size_t max_msg;
	/* Transport TLS of this node: the cluster file's "tls" with its own
	 * node entry's "tls" on top, paths resolved; tls_cert "" = plain tcp. */
	char tls_cert[1024], tls_key[1024], tls_ca[1024];
	int tls_verify; /* ND_TLS_VERIFY_* */
	nd_cl_node *nodes; /* ND_CL_MAX_NODES slots with etcd, nn without */
	_Atomic int nn;     /* slots in use: grows with etcd membership, never shrinks */
	int self;
	_Atomic int master; /* node number of the master, -1 none known */
	int ndata;
	int *data_nodes; /* data ordinal → node index */
	nd_cl_fanout fanout;
	nd_node *node;
	nd_server *server;
	cm_pool *pool;  /* transport handlers */
	cm_pool *spool; /* local shard searches and applies of the coordinator */
	pthread_mutex_t lock;
	pthread_mutex_t meta_lock; /* serializes state changes; see the lock order */
	pthread_mutex_t settings_mu; /* a leaf: swaps and references settings */
	cl_settings *settings;       /* cl->state's, parsed (nd_cluster_settings.c) */
	rp_state *state;           /* the adopted cluster state (under meta_lock) */
	bool unplaced_swept;       /* every index checked for unplaced copies (under meta_lock) */
	uint64_t applied_whole;    /* the version last applied to every index whole, 0: none */
	/* Master: the last commits, each as a change against the state before
	 * it (a Metadata with base_version), published instead of the whole
	 * state to the nodes that hold that one; a node a few changes behind
	 * gets them in order (meta_lock). */
	struct cl_pub_change {
		uint64_t base, version; /* version 0: empty */
		cm_buf msg;             /* the encoded Metadata */
	} pub_ring[CL_PUB_RING];
	int pub_head; /* the newest entry */
	/* On etcd: the adopted state is newer than the local cache file (the
	 * monitor writes it; meta_lock) */
	bool cache_stale;
	_Atomic uint64_t state_version; /* state->version, read without meta_lock */
	/* published states this node received: whole, changes applied, changes
	 * refused (a base it did not hold) */
	_Atomic uint64_t pub_full, pub_diffs, pub_refused;
	const char **names;        /* node names by number, for rp */
	struct cl_handoffs *handoffs; /* prepared hand-overs (master; monitor thread only) */
	pthread_t monitor;
	bool monitor_started;
	pthread_mutex_t stop_mu;
	pthread_cond_t stop_cv;
	bool stopping;
	rp *rp; /* replication (replication/rp.h) */
	struct cl_etcd *etcd; /* membership, election, state on etcd; NULL: static cluster */
	pthread_mutex_t members_mu; /* adds node slots, swaps peers (a leaf) */
	nd_peer *peers_old[ND_CL_MAX_NODES]; /* replaced dialers, closed at stop */
	struct {
		char name[64];
		char connect[ND_CL_ADDR + 8];
	} dial[ND_CL_MAX_NODES]; /* on etcd: the cluster file's "connect" of other nodes */
	int ndial;
	int npeers_old;
	cJSON *(*info)(void *arg, const char *kind); /* this node\'s _nodes entry */
	void *info_arg;
};

/* The transport options of this node (cluster name, secret, TLS). */
nd_transport_opts cl_transport_opts(const nd_cluster *cl);
/* Dynamic mapping updates: when the local mapping of ix holds more than
 * the published metadata, sends it to the master (which merges and
 * publishes it). */
void cl_publish_mappings(nd_cluster *cl, nd_index *const *ixs, size_t n);
int cl_ncopies(const nd_cluster *cl, nd_index *ix);
int cl_copy_node(const nd_cluster *cl, int shard, int copy);
/* The nodes holding copies of a shard, in placement order: the state's
 * routing (copies change with number_of_replicas), else the formula. */
int cl_shard_copies(nd_cluster *cl, nd_index *ix, int shard, int *out);
bool cl_alive(nd_cluster *cl, int node);
/* How long after its last pong from the master a node's copies go on
 * answering realtime gets: half the failover timeout, at most 1.5 s. */
uint64_t cl_read_window_ns(nd_cluster *cl);
/* Master, no lock held: before a copy on node leaves the in-sync set,
 * waits (at most the read window and a ping's deadline) until that node
 * can no longer be answering realtime gets from it: its last pong from
 * here is older than its read window. */
void cl_reads_stopped(nd_cluster *cl, int node);
void cl_mark(nd_cluster *cl, int node, bool alive, uint64_t latency_ns);

void cl_serve_bulk(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                   cm_buf *reply, uint32_t *reply_type);
void cl_serve_search(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                     cm_buf *reply, uint32_t *reply_type);
/* Applies ops as a replica copy would (numbered by the primary). */
cm_err cl_apply_replica(nd_cluster *cl, nd_index *ix, int shard, const st_op *ops, size_t n,
                        st_op_result *res);
/* Master, meta_lock held: next (owned) becomes the state with the next
 * version once persisted (a durable write), and is adopted. A persist that
 * fails is the caller's error and nothing changes. Publish after
 * unlocking (cl_state_publish). On etcd a change that writes more keys
 * than one transaction holds (a failover or a join touching many indices)
 * is made in steps, each a whole state (every index old or new). */
cm_err cl_state_commit_locked(nd_cluster *cl, rp_state *next, cm_error *err);
/* The same for a change a user asked for: all or nothing, so on etcd one
 * too large for one transaction is refused (400) rather than made in
 * steps. */
cm_err cl_state_commit_whole_locked(nd_cluster *cl, rp_state *next, cm_error *err);
/* Master, no lock held: sends the current state to every node, bounded. */
void cl_state_publish(nd_cluster *cl);
/* Fetches the master's state now (no-op on the master). */
void cl_fetch_state(nd_cluster *cl);
/* Routing of a shard as this node's state has it; false if unknown. */
bool cl_route_get(nd_cluster *cl, const char *index, int shard, cl_route *r);
/* Whether the master has taken this node in since it started. */
bool cl_rep_joined(nd_cluster *cl);
/* Whether node i's running process has been taken in by the master (the
 * state's "joined" boot id against the one its pongs carry). */
bool cl_node_joined(nd_cluster *cl, int i);

/* Replication's host (nd_cluster_host.c). */
void cl_host_init(nd_cluster *cl);
void cl_host_adopted(nd_cluster *cl); /* meta_lock held: cl->state is new */
void cl_host_tick(nd_cluster *cl);    /* join, failover (master), rp_tick */
/* Master, meta_lock held: a PR_SHARD_EVENT from a node (or this one). */
cm_err cl_master_event_locked(nd_cluster *cl, const rp_event *ev, cm_error *err);

/* ---- etcd (nd_cluster_etcd.c) ---- */
/* endpoints "host:port,host:port". After the node table holds self. */
cm_err cl_etcd_open(nd_cluster *cl, const char *endpoints, cm_error *err);
/* Lease, registration, the first read of members and state, the watch and
 * (master-eligible) the campaign. Before the monitor starts. */
cm_err cl_etcd_start(nd_cluster *cl, cm_error *err);
/* Every monitor round: keep-alive, membership, leader, state. */
void cl_etcd_tick(nd_cluster *cl);
/* Resigns, revokes the lease, stops the watch and the campaign. */
void cl_etcd_stop(nd_cluster *cl);
void cl_etcd_free(nd_cluster *cl);
/* Master, meta_lock held: writes next to etcd in one transaction guarded
 * by the master's term; *version becomes the revision it got.
 * CM_EUNAVAIL (master_not_discovered_exception) when etcd cannot be
 * reached or this node no longer leads (it steps down). */
/* The operations the etcd transaction writing next over prev holds, and
 * the most one may hold (cluster.etcd_max_txn_ops; unbounded off etcd). */
size_t cl_etcd_txn_ops(const rp_state *prev, const rp_state *next);
/* The operations that writing index x (of next) over prev takes: its key when
 * it changed, a terms key per shard given a primary. */
size_t cl_etcd_index_ops(const rp_state *prev, const rp_index *x);
size_t cl_etcd_max_txn_ops(const nd_cluster *cl);
cm_err cl_etcd_commit(nd_cluster *cl, const rp_state *prev, const rp_state *next,
                      uint64_t *version, cm_error *err);
/* cluster.lease_ttl; CM_ENOTFOUND for another key. */
/* Whether this node may still answer for its copies on etcd: its lease
 * cannot have expired yet (a node whose lease may have expired may have
 * been evicted, and its primaries failed over). true without etcd. */
bool cl_etcd_member_now(nd_cluster *cl);
/* Whether this node's copies may answer a realtime get: on etcd, its
 * lease is live and, unless it is the master, it heard from the master
 * within half of cluster.primary_failover_timeout (the master promotes
 * another copy only after the whole of it); else err says why. A static
 * cluster always may. */
bool cl_may_serve_reads(nd_cluster *cl, cm_error *err);
/* Members that did not answer this round's ping and whose own transport
 * port refuses connections (the process is gone): their leases are
 * revoked (nd_cluster_etcd.c). */
void cl_etcd_reap(nd_cluster *cl);
cm_err cl_etcd_setting(nd_cluster *cl, const char *key, const char *value, cm_error *err);
/* ---- cluster settings (nd_cluster_settings.c) ----
 * The state's cluster settings, parsed once per adopted state: a sorted
 * key table (transient over persistent, values as text) and the
 * allocation fields with their defaults. Readers hold a reference for a
 * round of decisions. */
struct cl_settings {
	_Atomic int refs;
	size_t n;
	struct kv *kv;
	rp_alloc_enable enable;    /* cluster.routing.allocation.enable (all) */
	char enable_text[32];      /* the same, as set ("all" when not) */
	int rebalance;             /* cluster.routing.rebalance.enable: RP_REBALANCE_* (all) */
	int max_recoveries;        /* ...allocation.node_concurrent_recoveries (2) */
	const char *exclude_name;  /* ...allocation.exclude._name (globs), NULL none */
	const char *exclude_ip;    /* ...allocation.exclude._ip (globs), NULL none */
};
/* Parses settings text (the state's JSON; NULL: every default). */
cl_settings *cl_settings_parse(const char *text);
/* meta_lock held: the table of cl->state's settings replaces the last. */
void cl_settings_apply_locked(nd_cluster *cl);
/* A reference to the current table (the defaults before any state). */
cl_settings *cl_settings_get(nd_cluster *cl);
void cl_settings_put(cl_settings *s);
/* A cluster setting as text; false when not set. */
bool cl_setting_in(const cl_settings *s, const char *key, char *out, size_t cap);
/* Whether s's cluster.routing.allocation.exclude.* names node i. */
bool cl_excluded_in(nd_cluster *cl, const cl_settings *s, int i);
/* The data nodes that may take copies under s, into out[ND_CL_MAX_NODES]. */
int cl_placeable_in(nd_cluster *cl, const cl_settings *s, int *out);
/* This node acts as master: the elected one, with a lease that cannot
 * have expired (etcd), or the static cluster's first master node. */
#define cl_is_master(cl) ((cl)->master == (cl)->self && cl_etcd_leading(cl))
/* After a commit at revision: every shard the commit assigned a primary
 * (new index, new term) gets that revision as its primary term. */
void cl_etcd_stamp_terms(const rp_state *prev, rp_state *next, uint64_t revision);
/* Whether this node leads and its lease cannot have expired yet. */
bool cl_etcd_leading(nd_cluster *cl);
/* The slot of node `name`, added (known by name only) when absent; -1
 * when the table is full. */
int cl_node_slot(nd_cluster *cl, const char *name);
/* Adopts st (owned) when newer than the current state, or always when
 * force (the first read from etcd). */
void cl_state_adopt(nd_cluster *cl, rp_state *st, bool force);
/* The data nodes that may take copies now (registered, joined, not
 * excluded by the cluster settings), into out[ND_CL_MAX_NODES]. */
int cl_placeable(nd_cluster *cl, int *out);

/* Master, meta_lock held: POST _cluster/reroute's commands applied to
 * next (nd_cluster_alloc.c); an error leaves next to be dropped whole.
 * With body's "explain", each command adds its decision to explanations
 * and a command that cannot run is reported NO and skipped, not an error
 * (as in Elasticsearch). */
cm_err cl_reroute_locked(nd_cluster *cl, rp_state *next, const cJSON *body, const int *pdata,
                         int npdata, cJSON *explanations, cm_error *err);
/* meta_lock held: st as _cluster/state renders it (version, master_node,
 * and the nodes and routing_table when asked). */
cJSON *cl_state_json_locked(nd_cluster *cl, const rp_state *st, bool with_nodes,
                            bool with_routing);

/* One cluster call (proto/cluster.proto) of message type to node, waited
 * for: the Ack's body, the typed reply, in *body (cm_malloc'd, NUL-
 * terminated, also when empty). A node held unreachable is asked with a
 * short deadline; the answer marks its liveness. */
cm_err cl_call(nd_cluster *cl, int node, uint32_t type, const cm_buf *req, char **body,
               size_t *len, cm_error *err);
/* Sets err (when empty) to a call to node that failed in the transport
 * with rc (not a refusal the node sent), named as Elasticsearch names it:
 * connect_transport_exception when no connection to node was up as the
 * call was made (its connects fail: refused, unreachable);
 * node_not_connected_exception when the connection went during the call,
 * or when held (the node was held unreachable, its pings failing, and the
 * caller's own deadline had not passed) and it did not answer within the
 * short wait such a node gets; else rc's own type (timeout_exception for
 * a call that ran out of the request's time). The reason starts with
 * prefix. Returns rc. */
cm_err cl_call_failed(nd_cluster *cl, int node, cm_err rc, bool connected, bool held,
                      const char *prefix, cm_error *err);

/* ---- which copy answers (nd_cluster_copies.c) ---- */
struct nd_tail_cfg;
/* The copies of a shard in the order to try them under pref (the part of
 * a preference that picks copies), into order[ND_CL_MAX_COPIES]; their
 * number. */
int cl_copy_order(nd_cluster *cl, nd_index *ix, int shard, const char *pref,
                  const struct nd_tail_cfg *cfg, int *order);
/* ---- views (nd_cluster_views.c) ----
 * One shard's health from plain inputs (unit-tested without a cluster):
 * the copies the routing places, its in-sync set and primary, the nodes
 * alive and taken in. */
typedef struct cl_shard_view {
	const int *copies; /* placement order */
	int ncopies;
	bool routed; /* the routing knows the shard (else copies[0] leads) */
	uint64_t in_sync;
	int primary;
	int relocating_from; /* -1 none */
	int want;            /* 1 + number_of_replicas */
	uint64_t alive, joined; /* bit per node */
} cl_shard_view;
typedef struct cl_shard_health {
	bool primary_up; /* else the shard is red */
	bool yellow;     /* fewer in-sync live copies than wanted */
	bool relocating; /* a copy moving (or one more than wanted leaving) */
	int active, initializing, unassigned;
} cl_shard_health;
void cl_shard_health_of(const cl_shard_view *v, cl_shard_health *h);

/* The same order from plain inputs (unit-tested without a cluster): */
typedef struct cl_copy_in {
	const int *copies; /* the shard's copies, placement order (node numbers) */
	int ncopies;
	bool routed;      /* the routing knows the shard: in_sync and primary hold */
	uint64_t in_sync; /* bit per node */
	int primary;      /* -1 none */
	int self;
	const char *const *names; /* node names by node number */
	/* appends cand[0..n) to order at *norder, best first */
	void (*rank)(void *arg, const int *cand, int n, int *order, int *norder);
	void *arg;
} cl_copy_in;
int cl_copy_pick(const cl_copy_in *in, const char *pref, int *order);
/* Whether a search under pref may hedge: not when it pins its copies. */
bool cl_pref_hedges(const char *pref);
/* docs, store bytes and deleted docs of every local copy (nd_cluster_get.c). */
struct pr_shard_stats;
void cl_local_stats(nd_cluster *cl, struct pr_shard_stats *out);

/* The handlers of the cluster calls (serve's table in nd_cluster.c): each
 * decodes its request and answers with an Ack carrying the typed reply. */
typedef void cl_serve_fn(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                         cm_buf *reply, uint32_t *reply_type);
cl_serve_fn cl_serve_get;           /* GetRequest (nd_cluster_get.c) */
cl_serve_fn cl_serve_shard_stats;   /* ShardStatsRequest (nd_cluster_get.c) */
cl_serve_fn cl_serve_recovery_rows; /* RecoveryRowsRequest (nd_cluster_get.c) */
cl_serve_fn cl_serve_node_view;     /* NodeViewRequest (nd_cluster_get.c) */
cl_serve_fn cl_serve_handoff;       /* HandoffRequest: the old primary's side (nd_cluster_host.c) */

#endif
