/* Cluster internals shared by nd_cluster.c and nd_cluster_rw.c. */
#ifndef ND_CLUSTER_PRIVATE_H
#define ND_CLUSTER_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "../common/cm_sys.h"
#include "nd_cluster.h"
#include "nd_transport.h"

typedef struct cJSON cJSON;

#define ND_CL_MAX_NODES 64
#define ND_CL_ADDR 128
#define ND_CL_MAX_COPIES 8

typedef struct nd_cl_node {
	char name[64];
	char http[ND_CL_ADDR];
	char transport[ND_CL_ADDR + 8]; /* tcp://... this node listens on */
	char connect[ND_CL_ADDR + 8];   /* tcp://... the others dial */
	bool master, data;
	int data_ord;  /* -1: no data */
	nd_peer *peer; /* NULL for self */
	_Atomic bool alive;
	_Atomic uint64_t down_since_ns; /* monotonic time it became unreachable, 0 = up */
	_Atomic uint64_t boot;        /* its process's boot id, from its last pong */
	_Atomic uint64_t boot_joined; /* the boot id it joined with (metadata "joined") */
	double ewma_us; /* recent round-trip latency, under nd_cluster.lock */
} nd_cl_node;

struct nd_cluster {
	char cluster_name[128], secret[256];
	size_t max_msg;
	/* Transport TLS of this node: the cluster file's "tls" with its own
	 * node entry's "tls" on top, paths resolved; tls_cert "" = plain tcp. */
	char tls_cert[1024], tls_key[1024], tls_ca[1024];
	int tls_verify; /* ND_TLS_VERIFY_* */
	nd_cl_node *nodes;
	int nn, self, master, ndata;
	int *data_nodes; /* data ordinal → node index */
	nd_cl_fanout fanout;
	nd_node *node;
	nd_server *server;
	cm_pool *pool;  /* transport handlers */
	cm_pool *spool; /* local shard searches and applies of the coordinator */
	pthread_mutex_t lock;
	pthread_mutex_t meta_lock; /* serializes metadata changes */
	cJSON *meta;               /* {"version":N,"indices":{name:{"body":..,"mappings":..}}} */
	pthread_t monitor;
	bool monitor_started;
	pthread_mutex_t stop_mu;
	pthread_cond_t stop_cv;
	bool stopping;
	struct cl_repl *repl; /* replication state (nd_cluster_rep.c) */
};

nd_cluster *cl_current(void);
/* Dynamic mapping updates: when the local mapping of ix holds more than
 * the published metadata, sends it to the master (which merges and
 * publishes it). */
void cl_publish_mapping(nd_cluster *cl, nd_index *ix);
int cl_ncopies(const nd_cluster *cl, nd_index *ix);
int cl_copy_node(const nd_cluster *cl, int shard, int copy);
bool cl_alive(nd_cluster *cl, int node);
void cl_mark(nd_cluster *cl, int node, bool alive, uint64_t latency_ns);

void cl_serve_bulk(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                   cm_buf *reply, uint32_t *reply_type);
void cl_serve_search(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                     cm_buf *reply, uint32_t *reply_type);
/* Applies ops as a replica copy would (numbered by the primary). */
cm_err cl_apply_replica(nd_cluster *cl, nd_index *ix, int shard, const st_op *ops, size_t n,
                        st_op_result *res);
/* Master, meta_lock held: versions, persists and publishes cl->meta after
 * a change, and rebuilds the routing table. */
void cl_state_commit_locked(nd_cluster *cl);
void cl_rep_init(nd_cluster *cl);
/* Fetches the master's metadata now (no-op on the master). */
void cl_fetch_state(nd_cluster *cl);
/* Whether the master has taken this node in since it started. */
bool cl_rep_joined(nd_cluster *cl);
/* Whether node i's running process has been taken in by the master (the
 * metadata's "joined" boot id against the one its pongs carry). */
bool cl_node_joined(nd_cluster *cl, int i);

/* Small read requests carried by PR_ADMIN ("rw_get", "rw_stats"). */
void cl_serve_rw(nd_cluster *cl, const char *action, const char *index, const char *body,
                 size_t len, cm_error *err, char **out);

#endif
