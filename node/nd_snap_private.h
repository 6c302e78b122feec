/* Internals shared by nd_snapshot.c (repositories, the node's side of the
 * snapshot messages) and nd_snapshot_run.c (taking, listing, deleting and
 * restoring snapshots). Lock order: snap_state.mu is a leaf. */
#ifndef ND_SNAP_PRIVATE_H
#define ND_SNAP_PRIVATE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../snapshot/sn.h"
#include "nd_snap.h"

typedef struct snap_repo {
	char name[SN_NAME_MAX];
	char location[SN_LOC_MAX]; /* as given */
	char resolved[PATH_MAX];   /* under path.repo, here */
	bool compress;
	uint64_t max_bps;
} snap_repo;

typedef struct snap_run snap_run;

typedef struct snap_state {
	pthread_mutex_t mu;
	nd_node *node;
	char path_repo[PATH_MAX];
	char data_tmp[PATH_MAX]; /* DATA/snapshot-tmp */
	snap_repo *repos;
	size_t nrepos;
	snap_run **runs; /* snapshots this node is taking */
	size_t nruns;
	struct snap_pin *pins; /* commits pinned here for a snapshot */
	uint64_t seq;
	struct snap_rec *recs; /* restores done here, the last SNAP_RECS */
	size_t nrecs;
	_Atomic bool stopping;  /* nd_snap_stop: no new work, copies cancelled */
	pthread_cond_t runs_cv; /* signalled when a run leaves runs */
} snap_state;

extern snap_state nd_snap_g;

/* The repository by name, copied; CM_ENOTFOUND typed
 * repository_missing_exception. */
cm_err snap_repo_find(const char *name, snap_repo *out, cm_error *err);
/* Sends a snapshot message to cluster node `node` (-1: this node,
 * in-process) and decodes the Ack: *body (cm_malloc'd NODE) on success. */
cm_err snap_call(nd_node *n, int node, uint32_t type, const cm_buf *req, uint64_t deadline_ns,
                 char **body, size_t *len, cm_error *err);
/* A fresh token for temp names ("<node>-<seq>-<time>"). */
void snap_token(char *out, size_t cap);

#endif
