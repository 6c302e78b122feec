/* _snapshot and _cat/snapshots handlers (co_snapshot.c). */
#ifndef CO_SNAPSHOT_H
#define CO_SNAPSHOT_H

#include "../common/cm_err.h"

typedef struct co_req co_req;
typedef struct cJSON cJSON;
typedef struct nd_node nd_node;

#define SN_OWNER_MAX 256
/* Another node's question about a snapshot (co_node_entry, kind
 * "snapshot {json}": op get|status, repo, snap): the answer, or the error
 * document ({"error":..,"status":N}); NULL when malformed. */
cJSON *co_snapshot_upcall(nd_node *n, const char *json);
/* The global state a snapshot keeps (persistent cluster settings, every
 * index template, the aliases' view) and restoring it (settings through
 * the master, templates too on a cluster); nd_snap_set_global's hooks. */
cJSON *co_snapshot_global_get(nd_node *n);
cm_err co_snapshot_global_put(nd_node *n, const cJSON *state, cm_error *err);

void co_h_snapshot_repo(co_req *r);    /* GET/PUT/POST/DELETE /_snapshot[/{repo}] */
void co_h_snapshot_verify(co_req *r);  /* POST /_snapshot/{repo}/_verify */
void co_h_snapshot(co_req *r);         /* GET/PUT/POST/DELETE /_snapshot/{repo}/{snap} */
void co_h_snapshot_status(co_req *r);  /* GET /_snapshot[/{repo}[/{snap}]]/_status */
void co_h_snapshot_restore(co_req *r); /* POST /_snapshot/{repo}/{snap}/_restore */
void co_h_cat_snapshots(co_req *r);    /* GET /_cat/snapshots[/{repo}] */

#endif
