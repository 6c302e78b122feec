/* Tail-tolerant fan-out (private to node/): adaptive copy selection (C3
 * ranking from per-node response time, reported service time, queue and
 * requests outstanding), the hedge budget and timer, the cancellation of a
 * hedged request's losing copy on the data node, and their settings and
 * figures. One registry per process, like the cluster.
 *
 * Locks: rank_mu (figures, budget), timer_mu (pending hedges) and
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

/* ---- figures per remote node (one per node: its copies share its queue) ---- */

/* A request went to node (a cluster node number). */
void nd_rank_sent(int node);
/* Its reply (or failure) came after rtt_ns; service_us/queue as the node
 * reported them (nservice 0: none). censored: its latency was already
 * counted for the hedge delay (a lost race). */
void nd_rank_done(int node, bool ok, uint64_t rtt_ns, const uint64_t *service_us, size_t nservice,
                  uint32_t queue, bool censored);
/* A race lost by node after at least ns: counted for its hedge delay. */
void nd_rank_censored(int node, uint64_t ns);
/* Orders cand[0..n) (remote candidates; alive[i] says which are alive) by
 * C3 rank, best first, into out; a node not sent a request for a while is
 * put first once (a probe) so a recovered node is noticed. nnodes: the
 * cluster's size (C3's client count). */
void nd_rank_order(const int *cand, const bool *alive, int n, int nnodes, int *out);
/* The hedge delay for a request to node: its running p95 latency, at
 * least min_delay_ns. */
uint64_t nd_rank_hedge_delay(int node, uint64_t min_delay_ns);

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

/* _nodes/stats: "adaptive_selection" (per node, as ES) and "hedging". */
void nd_rank_stats_json(nd_cluster *cl, cJSON *into);

#endif
