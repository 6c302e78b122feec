/* Node internals shared by the files of node/. */
#ifndef ND_PRIVATE_H
#define ND_PRIVATE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "nd.h"

struct nd_index {
	nd_node *node;
	_Atomic int refs;
	_Atomic uint32_t nested_limit; /* index.mapping.nested_objects.limit, as set */
	char name[256];
	char uuid[23];
	char dir[2048];
	int64_t creation_ms;
	nd_settings settings;
	pthread_mutex_t lock; /* mapping and settings changes */
	st_mapping *mapping;
	st_shard **shards;
	_Atomic uint64_t *dirty; /* writes per shard since its last refresh */
	uint64_t last_refresh_ns;
	_Atomic uint64_t unflushed; /* writes since the last flush */
	uint64_t last_flush_ns;
	/* refresh=wait_for: refreshes are numbered as they start; a waiter
	 * needs one that started after its write to have finished. */
	pthread_mutex_t refresh_lock;
	pthread_cond_t refresh_cond;
	uint64_t refresh_started, refresh_done_max;
	bool deleted; /* files removed when the last reference drops */
	nd_index_stats stats;
	/* search stats groups (nd_index_count_search): a leaf lock, taken
	 * only for searches that name groups and to read them */
	pthread_mutex_t groups_lock;
	nd_search_group *groups;
	size_t ngroups;
	cJSON *aliases; /* name -> entry (nd_alias.c), NULL = none; under lock */
	/* The cluster state's texts for this index (create body, mappings,
	 * settings log) as last applied to it, hashed (nd_cluster.c, under
	 * its meta_lock): a state that changes none of them is not parsed
	 * and applied to it again. 0 = not yet in this process. */
	uint64_t state_sig;
};

struct nd_node {
	char data_dir[1024];
	char name[128];
	char node_id[23];
	char cluster_uuid[23];
	char cluster_name[64];
	int lock_fd;
	int64_t start_ms;
	bool destructive_requires_name;
	_Atomic bool partial_results_off; /* search.default_allow_partial_results: false */
	bool replicated;
	pthread_rwlock_t reg_lock;
	nd_index **indices;
	size_t nindices, capindices;
	cm_pool *search_pool;
	cm_pool *merge_pool;
	cm_pool *index_pool; /* a large write batch spreads over it (st_shard_opts) */
	pthread_t timer;
	pthread_mutex_t timer_lock;
	pthread_cond_t timer_cond;
	bool stopping;
	nd_node_counters counters;
	_Atomic size_t search_queued; /* shard searches queued or running */
	struct nd_cluster *_Atomic cluster; /* the running cluster (nd_cluster_of); NULL solo */
	struct nd_reqcache *reqcache;       /* the shard request cache (nd_reqcache.h) */
};

#define ND_SEARCH_QUEUE 4096
/* Live docs a search must hold, summed over its shards, before another
 * search thread is woken to share them (Lucene's slices start at 250k
 * docs): below it a thread's wake-up costs more than the shard it would
 * take, and the bar of hits already merged skips the later shards'
 * fetches when the shards run one after another. */
#define ND_DOCS_PER_HELPER 250000u
/* Hits a search's fetch phase reads before another thread is woken. */
#define ND_HITS_PER_HELPER 256u
/* Pool workers worth waking for nshards shards holding docs live docs in
 * all (one per ND_DOCS_PER_HELPER, fewer than the shards). */
size_t nd_search_helpers(uint64_t docs, size_t nshards);
/* One shard's search (sr_search_shard_bar) through the shard request cache
 * when req may be cached there (size 0, ?request_cache, the index setting,
 * no profile or date math on now); solo and data nodes alike. */
cm_err nd_search_shard_cached(nd_index *ix, int shard, st_reader *r, uint32_t ordinal,
                              const sr_request *req, sr_hit_bar *bar, sr_shard_result *res,
                              cm_error *err);
/* Writes are durable in the log at once; a periodic flush makes segments
 * durable and trims the log, so a restart replays little. */
#define ND_FLUSH_INTERVAL_NS (60ull * 1000000000ull)

void nd_uuid(char out[23]);
cm_err nd_registry_load(nd_node *n, cm_error *err);
void nd_registry_close(nd_node *n);
void nd_refresh_tick(nd_node *n);
void nd_scroll_expire(nd_node *n); /* nd_ctx.c: drops expired contexts */

/* ---- aliases (nd_alias.c) ---- */
typedef struct rp_state rp_state;
/* index.json rewritten; caller holds ix->lock. */
cm_err nd_index_persist_locked(nd_index *ix);
/* An alias entry from its spec (filter checked as a query, routing,
 * is_write_index, is_hidden): {"filter","index_routing","search_routing",..}. */
cm_err nd_alias_entry(const char *alias, const cJSON *spec, cJSON **out, cm_error *err);
/* A create body's "aliases" object, each entry normalized (a new object). */
cm_err nd_alias_entries(const cJSON *aliases, cJSON **out, cm_error *err);
/* A create's aliases against the other indices (name taken by an alias,
 * alias named like an index, a second write index). */
cm_err nd_alias_create_check(nd_node *n, const char *name, const cJSON *aliases, cm_error *err);
/* Marks sel[i] = value for indices with an alias matching tok; caller
 * holds reg_lock. */
bool nd_alias_select_locked(nd_node *n, const char *tok, bool pattern, bool hidden, bool *sel,
                            bool value);
/* Makes ix's aliases those of a cluster-state create body. */
void nd_alias_sync(nd_index *ix, const cJSON *body);
/* The master's side of POST /_aliases: plans actions against the registry
 * and writes the result into next (aliases in each index's body, indices
 * removed by remove_index); the master applies next like any state. */
cm_err nd_alias_master(nd_node *n, rp_state *next, const cJSON *actions, cm_error *err);

#endif
