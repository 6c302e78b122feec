/* Live figures of this process for the cluster page (private to node/):
 * search latency per index as coordinator and per (index, node copy) as
 * shard service time, in sliding-window histograms (nd_hist.h); fan-out
 * counters; and this node's summary that every node serves to the others
 * (a NodeView "summary", proto/cluster.proto). One registry per process, like the cluster. */
#ifndef ND_STATS_H
#define ND_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "nd_cluster.h"

typedef struct cJSON cJSON;

/* A search this node coordinated over ixs finished after ns; counted once
 * per index it covered. No allocation (but the first for a new index). */
void nd_stats_search(nd_index *const *ixs, size_t n, nd_cl_fanout mode, uint64_t ns);
/* One shard of index answered from node (a cluster node number; local:
 * run in this process) after ns; failed shards are not timed. */
void nd_stats_shard(const char *index, int node, bool local, uint64_t ns);
/* One message to a remote node carrying nshards shard requests. */
void nd_stats_message(size_t nshards);
/* A coordinated search started (+1) or ended (-1). */
void nd_stats_inflight(int delta);

/* This node's summary (owned by the caller): process, memory per module,
 * disk, HTTP, searches in flight, peers' round-trip latency, every local
 * shard's docs and bytes, the recoveries it ran. */
cJSON *nd_stats_node_json(nd_cluster *cl);

#endif
