/* Replication (issue #6), the cluster's side: shard routing (primary, term,
 * in-sync copies) kept by the master in the metadata, the primary's write
 * path (forward to every in-sync copy, drop a silent one through the master
 * before acknowledging), global checkpoints, peer recovery (ops-based from
 * the primary's log, file-based from a snapshot of its files) and failover.
 * Internal to node/; see docs/replication.md. */
#ifndef ND_CLUSTER_REP_H
#define ND_CLUSTER_REP_H

#include "nd_cluster_private.h"

typedef struct cl_route {
	int primary;      /* node index; -1 when the index or shard is unknown */
	uint64_t term;    /* primary term */
	uint64_t in_sync; /* bit per node index */
	int ncopies;
	int copies[ND_CL_MAX_COPIES]; /* node index of every copy, placement order */
} cl_route;

/* Routing of a shard as this node's metadata has it; false if unknown. */
bool cl_route_get(nd_cluster *cl, const char *index, int shard, cl_route *r);
/* Rebuilds the routing table from cl->meta; caller holds meta_lock. */
void cl_routes_rebuild_locked(nd_cluster *cl);

void cl_rep_start(nd_cluster *cl);
/* Stopping: waits for a recovery in progress (peers already aborted). */
void cl_rep_quiesce(nd_cluster *cl);
/* Frees the replication state: no handler or task may run any more. */
void cl_rep_stop(nd_cluster *cl);
/* Every monitor round: join, failover (master), recoveries to start. */
void cl_rep_tick(nd_cluster *cl);
/* A node became unreachable (down_since) or reachable again. */
cm_err cl_rep_setting(nd_cluster *cl, const char *key, const char *value, cm_error *err);

/* Master side, meta_lock held: the "shards" routing of a new index entry. */
void cl_rep_meta_new_index(nd_cluster *cl, cJSON *entry, int nshards, int ncopies);
/* Master side, meta_lock held: "shard_failed", "shard_started",
 * "node_join". CM_ECONFLICT when the request is stale (older term). */
bool cl_rep_is_master_action(const char *action);
cm_err cl_rep_master_action(nd_cluster *cl, const char *action, const cJSON *body, cm_error *err);

/* Primary write path: applies ops here, forwards them to every in-sync and
 * recovering copy and acknowledges only what every in-sync copy logged. */
cm_err cl_rep_primary_apply(nd_cluster *cl, nd_index *ix, int shard, const st_op *ops, size_t n,
                            st_op_result *res, uint64_t deadline_ns);
/* Replica side of a forwarded batch: term check, apply, checkpoint. */
void cl_rep_serve_replica(nd_cluster *cl, nd_index *ix, const void *rq, cm_buf *reply);

/* Recovery messages served by the primary ("rec_*" admin actions); the
 * reply body may be binary. */
bool cl_rep_is_rec_action(const char *action);
void cl_rep_serve_rec(nd_cluster *cl, const char *action, const char *index, const char *body,
                      size_t len, cm_error *err, char **out, size_t *out_len);

/* _cat/recovery rows (tab separated) of the recoveries this node ran. */
void cl_rep_cat_recovery(nd_cluster *cl, cm_buf *out);

#endif
