/* Snapshots and restore (nd_snapshot.c) over the fs repositories of
 * snapshot/sn.h. Repositories are registered per node (persisted in
 * DATA/snapshot-repositories.json) and pushed by the node that receives
 * the PUT to every other node (MSG_SNAP_REPO). The node that receives a
 * snapshot request runs it: each shard's primary pins its last commit,
 * copies the files the repository lacks and unpins (MSG_SNAP_SHARD); a
 * restore creates the index with no replicas, restores every primary from
 * the repository (MSG_SNAP_RESTORE), then sets the replica count, so
 * replicas recover from the primaries as usual. One instance per process
 * (like nd_cluster_of). Replies are Elasticsearch's JSON (*out owned by the
 * caller, cJSON_Delete); errors carry ES types. */
#ifndef ND_SNAP_H
#define ND_SNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "nd.h"

/* path_repo (NULL or "": no repository can be registered) is where
 * repository locations may lie. Loads the registered repositories and
 * removes the temporary files a previous run left. */
cm_err nd_snap_open(nd_node *n, const char *path_repo, cm_error *err);
/* Stops new snapshot work and cancels copies in progress here; snapshots
 * being taken end PARTIAL or FAILED. Call before stopping the HTTP server. */
void nd_snap_stop(void);
/* nd_snap_stop, then waits for the snapshots being taken to end (a remote
 * primary's file in flight finishes first, or the transport's close fails
 * it) and frees everything. */
void nd_snap_close(void);

cm_err nd_snap_repo_put(nd_node *n, const char *name, const cJSON *body, cJSON **out,
                        cm_error *err);
/* names: NULL, "_all" or "*" for every repository, else a comma list. */
cm_err nd_snap_repo_get(nd_node *n, const char *names, cJSON **out, cm_error *err);
cm_err nd_snap_repo_delete(nd_node *n, const char *name, cJSON **out, cm_error *err);
cm_err nd_snap_repo_verify(nd_node *n, const char *name, cJSON **out, cm_error *err);

/* PUT /_snapshot/{repo}/{snap}: with wait, returns once finished. */
cm_err nd_snap_create(nd_node *n, const char *repo, const char *snap, const cJSON *body, bool wait,
                      cJSON **out, cm_error *err);
/* GET /_snapshot/{repo}/{snap} (snap may be "_all", "*" or a comma list). */
cm_err nd_snap_get(nd_node *n, const char *repo, const char *snap, cJSON **out, cm_error *err);
/* GET /_snapshot/{repo}/{snap}/_status: running ones from memory, finished
 * ones from the repository. */
cm_err nd_snap_status(nd_node *n, const char *repo, const char *snap, cJSON **out, cm_error *err);
/* The node taking snapshot snap of repo (from its pending marker in the
 * repository), for _status asked of another node; CM_ENOTFOUND when it
 * is not being taken. */
cm_err nd_snap_pending_owner(const char *repo, const char *snap, char *owner, size_t cap,
                             cm_error *err);
cm_err nd_snap_delete(nd_node *n, const char *repo, const char *snap, cJSON **out, cm_error *err);
cm_err nd_snap_restore(nd_node *n, const char *repo, const char *snap, const cJSON *body, bool wait,
                       cJSON **out, cm_error *err);
/* _cat/snapshots/{repo}: one JSON object per row, columns as ES's. */
cm_err nd_snap_cat(nd_node *n, const char *repo, cJSON **rows, cm_error *err);

/* _cat/recovery rows (as rp_cat_recovery's) of the primaries this node
 * restored from a snapshot: type "snapshot", source "repo/snap". */
void nd_snap_cat_recovery(cm_buf *out);

/* include_global_state: get returns what a snapshot keeps of the
 * cluster beyond its indices (the coordinator's: persistent settings,
 * templates, the aliases' view; a new cJSON), put restores it. Set once
 * at start. */
void nd_snap_set_global(cJSON *(*get)(nd_node *n),
                        cm_err (*put)(nd_node *n, const cJSON *state, cm_error *err));

/* Milliseconds this process waited for max_snapshot_bytes_per_sec
 * (snapshot and restore copies), for _nodes/stats. */
uint64_t nd_snap_throttle_ms(void);

/* Transport: the MsgTypes this module serves, and serving one (the reply
 * is an Ack). */
bool nd_snap_handles(uint32_t type);
void nd_snap_serve(nd_node *n, uint32_t type, const uint8_t *p, size_t len, cm_buf *reply,
                   uint32_t *reply_type);

#endif
