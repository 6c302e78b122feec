/* Tail-tolerant fan-out (private to node/): adaptive copy selection
 * (copies ranked by the latency this coordinator sees from them, equal
 * ones by the requests it has out to them), the hedge budget and timer,
 * the cancellation of a hedged request's losing copy on the data node, and
 * their settings and figures. One registry per process, like the cluster.
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
 * A copy is (node, index uuid, shard). Each has its EWMA response time R
 * (send to reply, as this coordinator sees it), a p95 ring (its hedge
 * delay), the requests this coordinator has out to it and when it last
 * answered. Per node: an excess latency figure (how much slower than
 * their copies' R its recent replies or pings were, decaying with time),
 * and the service time and queue it reports (shown, not ranked on: on a
 * shared machine they track CPU contention, not the copy). The copies
 * live in a fixed table (set-associative, least recently used evicted
 * within a set; a copy unused for ten minutes is free), so copies of
 * deleted indices do not pin memory. A copy not in the table ranks by its
 * node's figures, or first when the node has none (it is tried, and so
 * measured), one request at a time until it answers. */

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
 * alive) best first into out: copies whose latency figure is within a
 * noise band of the best are equal and go by fewest requests out (ties
 * in turn); the rest follow by latency; copies that stopped answering
 * with requests out, or that are back from idle or new with one out,
 * after those; dead ones last. nnodes: unused (kept for callers). */
void nd_rank_order(const nd_rank_copy *c, const int *cand, const bool *alive, int n, int nnodes,
                   int *out);
/* A ping to node came back after rtt_ns (ok) or failed: pings are free
 * probes, so a node whose link stalls or delays is seen as slow without
 * sending it searches. Optional: without it, replies alone rank. */
void nd_rank_ping(int node, bool ok, uint64_t rtt_ns);
/* The hedge delay for a message to node for shards[0..n) of one index:
 * the largest of the copies' running p95 latency, at least min_delay_ns. */
uint64_t nd_rank_hedge_delay(int node, const char *index, const char *uuid, const int *shards,
                             size_t n, uint64_t min_delay_ns);
/* Unit tests: the clock the figures use (NULL: CLOCK_MONOTONIC); the
 * ranking is a pure function of the calls and this clock. */
void nd_rank_clock(uint64_t (*now_ns)(void));
/* Unit tests: forgets every copy's and node's figures. */
void nd_rank_forget(void);
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
