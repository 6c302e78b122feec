/* Tail-tolerant fan-out (private to node/): adaptive copy selection (C3
 * ranking from per-copy response time, reported service time and requests
 * outstanding, and the node's queue), the hedge budget and timer, the cancellation of a
 * hedged request's losing copy on the data node, and their settings and
 * figures. One registry per process, like the cluster.
 *
 * Locks: rank_mu (figures per copy and node, budget), timer_mu (pending hedges) and
 * cancel_mu (running cancellable requests) are leaves; none is held
 * across a call to another node or a callback. */
#ifndef ND_RANK_H
#define ND_RANK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"

typedef struct cJSON cJSON;
typedef struct nd_cluster nd_cluster;

/* ---- settings ---- */

typedef struct nd_tail_cfg {
	bool ars;              /* cluster.routing.use_adaptive_replica_selection */
	bool hedge;            /* search.hedge.enabled */
	uint64_t min_delay_ns; /* search.hedge.min_delay */
	double max_ratio;      /* search.hedge.max_ratio: hedges per shard request */
} nd_tail_cfg;

/* The settings in force: the cluster state's (transient over persistent)
 * over -E over the defaults. */
void nd_rank_config(nd_tail_cfg *out);
/* Whether key is one of the settings above. */
bool nd_rank_key(const char *key);
/* Checks a value for key (a string, number or boolean; NULL resets):
 * CM_EINVAL with an Elasticsearch-shaped reason when it is bad; *norm
 * (owned, may be NULL) is the value to store. */
cm_err nd_rank_check(const char *key, const cJSON *v, char **norm, cm_error *err);
/* -E key=value at start; CM_ENOTFOUND for another key. */
cm_err nd_rank_setting(const char *key, const char *value, cm_error *err);
/* Monitor round: the dynamic settings from the cluster state. */
void nd_rank_refresh(nd_cluster *cl);

/* ---- figures per remote copy ----
 *
 * A copy is (node, index uuid, shard). Each has its EWMA response time,
 * the service time the data node reported for that shard, a p95 ring (its
 * hedge delay) and the requests this coordinator has out to it; the queue
 * the data node reports is kept per node (C3's server queue). The copies
 * live in a fixed table (set-associative, least recently used evicted
 * within a set; a copy unused for ten minutes is free), so copies of
 * deleted indices do not pin memory. A copy not in the table ranks best
 * (it is tried, and so measured). */

typedef struct nd_rank_copy {
	const char *index; /* name (shown in _nodes/stats; borrowed) */
	const char *uuid;  /* the index's uuid, "" when unknown (borrowed) */
	int shard;
} nd_rank_copy;

/* One message went to node for the shards of one index, shards[0..n). */
void nd_rank_sent(int node, const char *index, const char *uuid, const int *shards, size_t n);
/* Its reply (or failure) came after rtt_ns; service_us[i] is what the
 * node reported for shards[i] (nservice 0: none; fewer than n: the rest
 * take the largest), queue its load. censored: the latency was already
 * counted for the hedge delay (a lost race). */
void nd_rank_done(int node, const char *index, const char *uuid, const int *shards, size_t n,
                  bool ok, uint64_t rtt_ns, const uint64_t *service_us, size_t nservice,
                  uint32_t queue, bool censored);
/* A race lost by the copy (node, c) after at least ns: counted for its
 * hedge delay. */
void nd_rank_censored(int node, const nd_rank_copy *c, uint64_t ns);
/* Orders cand[0..n) (remote nodes holding copy c; alive[i] says which are
 * alive) by C3 rank, best first, into out; a copy not sent a request for
 * a while is put first once (a probe) so a recovered node is noticed.
 * nnodes: the cluster's size (C3's client count). */
void nd_rank_order(const nd_rank_copy *c, const int *cand, const bool *alive, int n, int nnodes,
                   int *out);
/* The hedge delay for a message to node for shards[0..n) of one index:
 * the largest of the copies' running p95 latency, at least min_delay_ns. */
uint64_t nd_rank_hedge_delay(int node, const char *index, const char *uuid, const int *shards,
                             size_t n, uint64_t min_delay_ns);
/* Unit tests: copies in the table, and its capacity. */
size_t nd_rank_copies(size_t *cap);
/* Unit tests: the figures of a copy (key: the index uuid, or its name when
 * it has none), false when it is not in the table. */
bool nd_rank_copy_figures(int node, const char *uuid, int shard, double *r_us, double *s_us,
                          int *outstanding);

/* ---- hedge budget and counters ---- */

/* n shard requests went out (not hedges): each earns max_ratio tokens. */
void nd_rank_earn(size_t n, double max_ratio);
/* Takes n tokens (all or none). */
bool nd_rank_take(size_t n);
void nd_rank_count_hedge(size_t sent);
void nd_rank_count_won(void);
void nd_rank_count_cancelled(size_t n); /* cancels sent to losing copies */

/* ---- hedge timers ---- */

typedef void (*nd_rank_timer_fn)(void *arg);
/* fn(arg) runs once on the timer thread at or after at_ns (monotonic). */
void nd_rank_timer(uint64_t at_ns, nd_rank_timer_fn fn, void *arg);

/* ---- cancellation ---- */

/* A fresh cancel id, unique in this process and unlikely elsewhere. */
uint64_t nd_rank_cancel_id(void);
/* Data node: a cancellable request starts; the flag it should watch
 * (valid until nd_rank_end). Set at once when its cancel came first. */
typedef struct nd_rank_run nd_rank_run;
nd_rank_run *nd_rank_begin(uint64_t id, const _Atomic _Bool **flag);
/* It ended; counted as stopped when its flag was set. */
void nd_rank_end(nd_rank_run *r);
/* Data node: a SearchCancel payload (PR_SEARCH_CANCEL); reply is an Ack. */
void nd_rank_serve_cancel(const uint8_t *p, size_t len, cm_buf *reply, uint32_t *reply_type);
/* Searches this node is serving now (the queue it reports). */
uint32_t nd_rank_serving(int delta);

/* _nodes/stats: "adaptive_selection" (per node, as ES), and "hedging"
 * with its "copies" (per remote copy). */
void nd_rank_stats_json(nd_cluster *cl, cJSON *into);

#endif
