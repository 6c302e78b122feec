/* The cluster: membership, the master and the cluster state either on
 * etcd (leases, election, watched state; nd_cluster_etcd.c) or from a
 * static cluster file (first master node leads), copy placement by the
 * master's allocator, replicated writes through the primary, and the
 * search fan-out over local and remote shard copies into the shared
 * merger. A node runs at most one cluster (nd_cluster_of). */
#ifndef ND_CLUSTER_H
#define ND_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../search/sr.h"
#include "nd.h"

typedef struct nd_cluster nd_cluster;

typedef enum { ND_CL_FANOUT_SERIAL, ND_CL_FANOUT_PER_SHARD, ND_CL_FANOUT_PER_NODE } nd_cl_fanout;

/* "serial" | "per_shard" | "per_node"; false when unknown. */
bool nd_fanout_parse(const char *s, nd_cl_fanout *out);

/* Reads the cluster file and finds `name` in it. coordinator_only asserts
 * the node's role (it must agree with the file's "roles"). *out is owned
 * by the caller (nd_cluster_stop). */
cm_err nd_cluster_open(const char *file, const char *name, bool coordinator_only,
                       nd_cl_fanout fanout, nd_cluster **out, cm_error *err);
/* A node of a cluster on etcd, started without a cluster file: it knows
 * etcd, its cluster's name and its own addresses, not the other nodes. */
typedef struct nd_cl_etcd_opts {
	const char *endpoints; /* "127.0.0.1:2379,127.0.0.1:2381" */
	const char *cluster_name, *name, *http, *transport;
	const char *secret; /* transport secret; NULL: the cluster name */
	bool coordinator_only;
} nd_cl_etcd_opts;
cm_err nd_cluster_open_etcd(const nd_cl_etcd_opts *o, nd_cl_fanout fanout, nd_cluster **out,
                            cm_error *err);
/* A -E cluster.* setting ("key=value"): cluster.primary_failover_timeout,
 * cluster.replica_timeout, cluster.recovery_max_bytes_per_sec. */
cm_err nd_cluster_setting(nd_cluster *cl, const char *kv, cm_error *err);
/* _cat/recovery rows of this node (tab separated, no header). */
void nd_cluster_cat_recovery(nd_cluster *cl, cm_buf *out);
/* This node's HTTP address ("127.0.0.1:9200"), borrowed. */
const char *nd_cluster_http(const nd_cluster *cl);
/* The index templates the cluster state holds (JSON text, "" for none),
 * copied (free with cm_free(CM_MEM_NODE)); NULL when the state is still
 * the version *seen names. *seen becomes the current version. */
char *nd_cluster_templates(nd_cluster *cl, uint64_t *seen);
/* The cluster's uuid from the state ("" before the first commit). */
void nd_cluster_uuid_of(nd_cluster *cl, char *out, size_t cap);
/* This node's transport address, host:port (no scheme). */
const char *nd_cluster_transport(const nd_cluster *cl);
const char *nd_cluster_self(const nd_cluster *cl);
/* The node table (it grows on etcd): how many, and node i's name. */
int nd_cluster_nnodes(const nd_cluster *cl);
const char *nd_cluster_node_name(const nd_cluster *cl, int i);
/* Starts the transport server, dials the peers, loads the persisted
 * metadata and, on other nodes, fetches the master's. n is borrowed. */
cm_err nd_cluster_start(nd_cluster *cl, nd_node *n, cm_error *err);
void nd_cluster_stop(nd_cluster *cl);
/* The running cluster of node n, or NULL (solo). */
nd_cluster *nd_cluster_of(const nd_node *n);

/* ---- metadata through the master ---- */
/* One metadata change (a MetaChange to the master, proto/cluster.proto):
 * indices is comma-joined ("" when the kind takes none), source the
 * client's document (JSON text, may be NULL): the create body, the
 * mappings, the settings, alias actions, .... On success *reply
 * (cm_malloc'd NODE) is the JSON to answer with. Master unreachable →
 * CM_EUNAVAIL with the reason. */
typedef enum nd_meta_kind {
	ND_META_CREATE = 1,
	ND_META_DELETE,
	ND_META_PUT_MAPPING,
	ND_META_PUT_SETTINGS,
	ND_META_CLUSTER_SETTINGS,
	ND_META_REROUTE,
	ND_META_ALIASES,
	ND_META_TEMPLATES,
} nd_meta_kind;
cm_err nd_cluster_meta(nd_cluster *cl, nd_meta_kind kind, const char *indices, const char *source,
                       char **reply, cm_error *err);
/* refresh / flush / forcemerge of the named indices on every data node;
 * *failed counts nodes that did not answer. */
typedef enum nd_broadcast_op {
	ND_BROADCAST_REFRESH = 1,
	ND_BROADCAST_FLUSH,
	ND_BROADCAST_FORCEMERGE,
} nd_broadcast_op;
cm_err nd_cluster_broadcast(nd_cluster *cl, nd_broadcast_op op, const char *indices, int *total,
                            int *failed, cm_error *err);

/* ---- writes ---- */
/* Sends every batch to its shard's primary at once (in-process when it is
 * here); the primary forwards to the replicas before acknowledging. A
 * primary that cannot be reached fails its items with 503. */
void nd_cluster_apply_batches(nd_cluster *cl, nd_batch *b, size_t nb);

/* ---- reads ---- */
/* How long one shard took, as the coordinator saw it (a remote copy: the
 * round trip of the message that carried it). */
typedef struct nd_cl_shard_timing {
	const char *index; /* borrowed from the searched index */
	int shard;
	const char *node; /* borrowed: the cluster's node name */
	bool local, ok;
	uint64_t took_ns;
	bool hedged;    /* a second copy was asked (tail-tolerant fan-out) */
	bool hedge_won; /* and answered first */
} nd_cl_shard_timing;

typedef struct nd_cl_search_opts {
	const char *preference; /* may be NULL */
	nd_cl_fanout fanout;
	bool fanout_set;      /* false: the node's default */
	uint64_t deadline_ns; /* absolute; 0 = 30 s */
	/* When set, one entry per shard searched (at most timings_cap) and
	 * their number in *ntimings. */
	nd_cl_shard_timing *timings;
	size_t timings_cap, *ntimings;
	/* The request the coordinator already built from body and params
	 * (nd_cl_request_build's equal), moved into the search so that it is
	 * not parsed again here; the caller's is left empty. NULL: built here. */
	sr_request *parsed;
	bool typed_keys; /* ?typed_keys: aggregation names as type#name */
} nd_cl_search_opts;

/* The one way an sr_request is built from a _search body (the URL
 * parameters that shape it folded in) and ?typed_keys: the coordinator and
 * the data nodes call it alike. */
cm_err nd_cl_request_build(const char *body, size_t len, bool typed_keys, sr_request *req,
                           cm_error *err);
/* A search's ?preference: CM_EINVAL (400) for a form Elasticsearch does
 * not know. NULL is fine. */
cm_err nd_cl_preference_check(const char *pref, cm_error *err);
/* preference=_shards:LIST[|OTHER] (checked): whether shard is listed
 * (true for every shard without _shards:). */
bool nd_cl_pref_shard(const char *pref, int shard);
/* The part of pref that picks the copy: OTHER of _shards:LIST|OTHER, NULL
 * for _shards:LIST alone, else pref itself. */
const char *nd_cl_pref_copies(const char *pref);
/* Runs a search over every shard of ixs (sorted as nd_resolve returns
 * them), one copy each, rendering the ES body into out. */
cm_err nd_cluster_search(nd_cluster *cl, nd_index **ixs, size_t n, const char *body,
                         const nd_cl_search_opts *o, cm_buf *out,
                         cm_error *err);
/* Realtime get of one document from a copy of its shard (refreshed: as
 * of that copy's last refresh instead, ?realtime=false). */
cm_err nd_cluster_get(nd_cluster *cl, nd_index *ix, int shard, const char *id,
                      const char *preference, bool refreshed, st_doc_meta *meta, cm_buf *source,
                      cm_error *err);

/* Hooks for the solo code paths: through the cluster when one runs in
 * this process, else straight to the local shard. */
cm_err nd_routed_apply(nd_index *ix, int shard, const st_op *ops, size_t n,
                       const nd_req_opts *o, st_op_result *res);
/* Realtime gets pick their copy by o->preference (o may be NULL). */
cm_err nd_routed_get(nd_index *ix, int shard, const char *id, size_t len, const nd_req_opts *o,
                     st_doc_meta *meta, cm_buf *source);

/* refresh=true|wait_for after a write: on a cluster, refreshes every copy
 * of ix (a forced refresh also stands in for wait_for) and returns true;
 * false when solo (the caller refreshes locally). */
bool nd_routed_refresh(nd_index *ix);

/* ---- cluster APIs ---- */
/* GET _cluster/allocation/explain: body (JSON text, may be NULL: the
 * first unassigned copy) names index, shard, primary, current_node; *out
 * is the answer (cm_malloc'd NODE). */
cm_err nd_cluster_allocation_explain(nd_cluster *cl, const char *body, char **out,
                                     cm_error *err);
/* The cluster settings of the state: {"persistent":{flat keys},"transient":{..}}. */
cJSON *nd_cluster_settings_json(nd_cluster *cl);
/* The tail-tolerant fan-out's figures for _nodes/stats, added to into:
 * "adaptive_selection" (per remote data node, as ES) and "hedging" (in
 * into's "shoal" object when it has one). */
void nd_cluster_tail_stats(nd_cluster *cl, cJSON *into);
/* into's "discovery": the states published to this node (whole, changes
 * applied, changes refused) and, on etcd, how it read the state (whole
 * reads, changes applied from its watch, bytes) and, on the master, what it
 * wrote (commits, keys). */
void nd_cluster_state_stats(nd_cluster *cl, cJSON *into);
/* _cluster/health as JSON text into out (cm_buf): of the n indices ixs,
 * or of every index when ixs is NULL (the node counts stay the cluster's,
 * as in ES's _cluster/health/{index}). */
void nd_cluster_health(nd_cluster *cl, nd_index *const *ixs, size_t n, cm_buf *out);
/* _cat/nodes and _cat/shards rows, tab separated, with a header line. */
void nd_cluster_cat_nodes(nd_cluster *cl, cm_buf *out);
void nd_cluster_cat_shards(nd_cluster *cl, cm_buf *out);
/* _cat/allocation rows (shards host ip node, and the unassigned copies)
 * and _cat/master (id host ip node). */
void nd_cluster_cat_allocation(nd_cluster *cl, cm_buf *out);
void nd_cluster_cat_master(nd_cluster *cl, cm_buf *out);
/* _cat/indices rows over the cluster (health from the routing, docs and
 * sizes gathered from the nodes holding the copies): health status index
 * uuid pri rep docs.count docs.deleted store.size pri.store.size. */
void nd_cluster_cat_indices(nd_cluster *cl, nd_index **ixs, size_t n, cm_buf *out);
/* The coordinator's upcall for this node's own _nodes entry: kind is
 * "info" (_nodes) or "stats" (_nodes/stats); returns a cJSON object. */
typedef struct cJSON cJSON;
void nd_cluster_set_info(nd_cluster *cl, cJSON *(*fn)(void *arg, const char *kind), void *arg);
/* {name: entry} of every node that answered (bounded per node); *failed
 * counts those that did not. */
cJSON *nd_cluster_nodes_info(nd_cluster *cl, const char *kind, int *total, int *failed);
/* version, master_node, nodes and routing_table of the cluster state. */
cJSON *nd_cluster_state_json(nd_cluster *cl);

/* ---- the cluster page (nd_stats.c) ---- */
/* GET /_shoal/stats/fanout as JSON text: the searches this node
 * coordinated over the last minute, per index (coordinator time) and per
 * node copy (shard service time), as p50/p90/p99 and log-scale buckets,
 * and the fan-out counters. cl may be NULL (solo: no shard figures). */
void nd_cluster_fanout_json(nd_cluster *cl, cm_buf *out);
/* GET /_shoal/stats/nodes as JSON text: every node's own summary
 * (process, memory per module, disk, HTTP, peers' round-trip latency,
 * docs and bytes of each local shard, its recoveries), asked of all live
 * nodes at once with a 2 s deadline; the others are marked unreachable. */
void nd_cluster_nodes_json(nd_cluster *cl, cm_buf *out);

#endif
