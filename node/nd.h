/* The data node: the index registry (settings, mappings, shard
 * directories, metadata persisted as JSON), shard routing, the refresh
 * timer, and the search fan-out over local shards through a thread pool
 * into the shared merge stage. All functions are thread-safe. */
#ifndef ND_H
#define ND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../search/sr.h"
#include "../storage/st_shard.h"
#include "../storage/st_types.h"

typedef struct cJSON cJSON;
typedef struct nd_node nd_node;
typedef struct nd_index nd_index;

#define ND_MAX_SHARDS 1024
#define ND_ES_VERSION "7.10.2"

typedef struct nd_node_opts {
	const char *data_dir;
	const char *name;       /* NULL: host name */
	int search_threads;     /* 0: number of cores */
	bool destructive_requires_name; /* action.destructive_requires_name (default true) */
	bool replicated; /* shard copies of a cluster: the log is kept above the global checkpoint */
} nd_node_opts;

/* Opens the data directory: takes its lock file (a second node on the same
 * directory gets CM_EBUSY with a message), loads every index. */
cm_err nd_node_open(const nd_node_opts *o, nd_node **out, cm_error *err);
void nd_node_close(nd_node *n);
const char *nd_node_name(const nd_node *n);
const char *nd_node_id(const nd_node *n);
const char *nd_cluster_uuid(const nd_node *n);
const char *nd_cluster_name(const nd_node *n);
const char *nd_data_dir(const nd_node *n);
bool nd_destructive_requires_name(const nd_node *n);
/* Cluster setting action.destructive_requires_name (not persisted). */
void nd_set_destructive_requires_name(nd_node *n, bool v);
/* Cluster setting search.default_allow_partial_results (default true; kept
 * by the node that was asked, not persisted). */
bool nd_default_allow_partial(const nd_node *n);
void nd_set_default_allow_partial(nd_node *n, bool v);
int64_t nd_start_ms(const nd_node *n);

/* ---- indices ---- */

typedef struct nd_settings {
	int number_of_shards;
	int number_of_replicas;
	int64_t refresh_interval_ms; /* -1 disables */
	char refresh_interval[32];   /* as given ("1s"), "" when default */
	int max_result_window;
	int64_t delayed_timeout_ms; /* index.unassigned.node_left.delayed_timeout (1m) */
	char default_pipeline[256]; /* index.default_pipeline, "" = none */
	char final_pipeline[256];   /* index.final_pipeline, "" = none */
	unsigned blocks;            /* ND_BLOCK_*: index.blocks.* set true */
	int total_fields_limit;     /* index.mapping.total_fields.limit (1000) */
	bool closed;                /* closed (_close): index.verified_before_close */
	/* Settings accepted without an effect here (docs/api.md says why for
	 * each): flat "key" -> value as given, JSON text, "" when none. */
	char accepted[2048];
	int max_ngram_diff;         /* index.max_ngram_diff (1) */
	int max_shingle_diff;       /* index.max_shingle_diff (3) */
	bool request_cache_off;     /* index.requests.cache.enable: false */
} nd_settings;

/* index.blocks.*: what each refuses (nd_index_blocked). */
enum {
	ND_BLOCK_WRITE = 1,                  /* writes */
	ND_BLOCK_READ_ONLY = 2,              /* writes and metadata changes */
	ND_BLOCK_READ_ONLY_ALLOW_DELETE = 4, /* writes but deletes, and metadata changes */
	ND_BLOCK_READ = 8,                   /* searches and gets */
	ND_BLOCK_METADATA = 16,              /* mapping and settings changes, and reads of them */
};

typedef struct nd_index_stats {
	uint64_t index_total, index_time_ns, index_failed;
	uint64_t delete_total, delete_time_ns;
	uint64_t get_total, get_time_ns;
	uint64_t query_total, query_time_ns, fetch_total;
	uint64_t scroll_total;
	uint64_t refresh_total, flush_total;
} nd_index_stats;

/* Creates an index from a PUT body ({"settings":..,"mappings":..,"aliases"?}),
 * which may be NULL. Name validation as Elasticsearch (CM_EBADNAME);
 * existing → CM_EEXISTS. *out (optional) is a new reference. */
cm_err nd_index_create(nd_node *n, const char *name, const cJSON *body, nd_index **out,
                       cm_error *err);
/* Same, with the uuid the metadata master gave the index (cluster mode:
 * every node names the index alike); NULL or invalid generates one. */
cm_err nd_index_create_as(nd_node *n, const char *name, const char *uuid, const cJSON *body,
                          nd_index **out, cm_error *err);
/* Checks an index name; CM_EBADNAME with ES's reason. */
cm_err nd_index_name_check(const char *name, cm_error *err);
/* Removes the index and its files (files go when the last reference drops). */
cm_err nd_index_delete(nd_node *n, nd_index *ix, cm_error *err);

/* A new reference to the index, or NULL. */
nd_index *nd_index_get(nd_node *n, const char *name);
/* Same, creating it with defaults when absent (auto_create_index). */
cm_err nd_index_get_or_create(nd_node *n, const char *name, nd_index **out, cm_error *err);
nd_index *nd_index_ref(nd_index *ix);
void nd_index_release(nd_index *ix);

/* Resolves "a,b*,-c,_all" to references sorted by name. A concrete
 * missing name → CM_ENOINDEX unless ignore_unavailable; wildcards that
 * match nothing are fine. The caller releases each and frees the array
 * with cm_free(CM_MEM_NODE, ...). */
cm_err nd_resolve(nd_node *n, const char *expr, bool ignore_unavailable, nd_index ***out,
                  size_t *nout, cm_error *err);
/* The same with ES's index options: wildcards (and _all) select open
 * and/or closed indices (expand_wildcards); a concrete name selects its
 * index whatever its state; ND_RESOLVE_NONE_FAILS: an expression that
 * selects nothing is CM_ENOINDEX (allow_no_indices=false). */
enum {
	ND_RESOLVE_IGNORE_UNAVAILABLE = 1,
	ND_RESOLVE_OPEN = 2,
	ND_RESOLVE_CLOSED = 4,
	ND_RESOLVE_NONE_FAILS = 8,
	/* names and wildcards select indices only, never through an alias
	 * (ES's index delete) */
	ND_RESOLVE_NO_ALIASES = 16,
	/* wildcards also select hidden indices and aliases (index.hidden,
	 * is_hidden); without it only a pattern starting with '.' selects the
	 * hidden ones whose name does */
	ND_RESOLVE_HIDDEN = 32,
};
cm_err nd_resolve_ex(nd_node *n, const char *expr, unsigned flags, nd_index ***out,
                     size_t *nout, cm_error *err);
bool nd_index_closed(nd_index *ix);
/* index.hidden */
bool nd_index_hidden(nd_index *ix);
/* An integer index setting kept among the accepted ones (e.g.
 * "max_regex_length", "max_script_fields"), or dflt when not set. */
long long nd_index_setting_int(nd_index *ix, const char *key, long long dflt);
/* Every index, sorted by name (same ownership as nd_resolve). */
void nd_index_list(nd_node *n, nd_index ***out, size_t *nout);

const char *nd_index_name(const nd_index *ix);
const char *nd_index_uuid(const nd_index *ix);
int64_t nd_index_creation_ms(const nd_index *ix);
const nd_settings *nd_index_settings(const nd_index *ix);
int nd_index_nshards(const nd_index *ix);
st_shard *nd_index_shard(nd_index *ix, int i); /* borrowed while ix is held */
nd_index_stats *nd_index_counters(nd_index *ix); /* atomically updated counters */
/* One shard's search counted: its query phase (query_ns), whether its
 * hits went to a merge (the fetch), whether it served a scroll, in the
 * index's totals and in each stats group the request names ("stats"). */
void nd_index_count_search(nd_index *ix, const sr_request *req, uint64_t query_ns, bool fetched,
                           bool scroll);
/* A search stats group's counters (ES's search.groups). */
typedef struct nd_search_group {
	char name[128];
	uint64_t query_total, query_time_ns, fetch_total, scroll_total;
} nd_search_group;
/* A copy of the index's stats groups (cm_free(CM_MEM_NODE, *out)). */
size_t nd_index_search_groups(nd_index *ix, nd_search_group **out);
/* The current mapping; a new reference (st_mapping_unref). */
st_mapping *nd_index_mapping(nd_index *ix);
/* Merges a PUT _mapping body into the mapping; persists it. */
cm_err nd_index_put_mapping(nd_index *ix, const cJSON *mappings, cm_error *err);
/* Applies a PUT _settings body (dynamic settings only: number_of_replicas,
 * refresh_interval, max_result_window). */
cm_err nd_index_put_settings(nd_index *ix, const cJSON *body, cm_error *err);
/* What nd_index_put_settings would refuse of body on ix (a bad setting,
 * index.analysis on an open index), without applying anything: a request
 * over several indices checks them all first. */
cm_err nd_index_settings_check(nd_index *ix, const cJSON *body, cm_error *err);
/* Settings rendered as ES does ({"index":{...}}, values as strings). */
cJSON *nd_index_settings_json(const nd_index *ix);
/* The index's default and final ingest pipelines, copied under its lock
 * ("" = none); each buffer holds sizeof(nd_settings.default_pipeline). */
void nd_index_pipelines(nd_index *ix, char *dflt, char *final);
/* The index block refusing an operation, as ES words it: `op` is 'w'
 * (a write), 'd' (a delete), 'r' (a read), 'm' (a mapping change) or
 * 's' (a settings change); CM_EBLOCKED with ES's cluster_block_exception
 * reason, CM_EINDEXCLOSED for a closed index (but 's'), or CM_OK. */
cm_err nd_index_blocked(nd_index *ix, char op, cm_error *err);
/* Adds s's blocks and accepted settings to a settings object `idx`, as
 * nested objects or (flat) as "a.b" keys. */
void nd_settings_extra_json(const nd_settings *s, cJSON *idx, bool flat);

/* The shard a routing value (or id) maps to: xxh64(seed 0) % shards. */
int nd_index_route(const nd_index *ix, const char *routing, size_t len);

/* Parses a document source under the mapping and, when it holds new
 * fields that dynamic mapping allows, merges and persists the mapping
 * before returning, so the shard sees them when the doc is applied.
 * Mapping errors → CM_EMAPPING (or strict_dynamic_mapping_exception). */
cm_err nd_index_prepare_doc(nd_index *ix, const char *id, size_t id_len, const char *src,
                            size_t len, cm_error *err);
/* nd_index_prepare_doc over many documents (of any indices of node n),
 * spread over the node's indexing pool in runs of ND_PREP_RUN, the
 * caller's thread taking part: each item's rc and err. A bulk request's
 * documents are parsed under their mappings on every core, not on the
 * thread that reads the request. */
typedef struct nd_prep {
	nd_index *ix;
	const char *id;
	size_t id_len;
	const char *src;
	size_t len;
	cm_err rc;
	cm_error err;
} nd_prep;
#define ND_PREP_RUN 32
void nd_index_prepare_docs(nd_node *n, nd_prep *items, size_t nitems);
/* Applies ops to one shard (st_shard_apply) and counts them. */
cm_err nd_index_apply(nd_index *ix, int shard, const st_op *ops, size_t n, st_op_result *res);
/* One shard's share of a multi-shard write. */
typedef struct nd_batch {
	nd_index *ix;
	int shard;
	const st_op *ops;
	size_t n;
	st_op_result *res;
	cm_err rc;
	uint64_t deadline_ns; /* cluster: absolute bound of the write (cm_now_ns), 0 = 30 s */
} nd_batch;
/* What one request asks of the cluster calls it makes, handed from the
 * HTTP layer down (no thread carries an argument). Zeroed: defaults. */
typedef struct nd_req_opts {
	uint64_t deadline_ns;   /* absolute bound (cm_now_ns), a write's ?timeout; 0 = 30 s */
	const char *preference; /* a realtime get's ?preference; NULL = any copy */
	bool refreshed;         /* a get's ?realtime=false: as of the last refresh */
} nd_req_opts;
/* Applies the batches, all shards at once on the node's pool, and waits. */
void nd_apply_batches(nd_node *n, nd_batch *b, size_t nb);
cm_err nd_index_refresh(nd_index *ix);
/* refresh=wait_for: returns once a refresh that started after the call
 * has finished (the scheduled one, or a forced one when the interval is
 * off or the wait passes twice the interval). */
cm_err nd_index_wait_refresh(nd_index *ix);
cm_err nd_index_flush(nd_index *ix);
cm_err nd_index_force_merge(nd_index *ix, int max_segments);
/* Sum of the shards' stats. */
void nd_index_shard_stats(nd_index *ix, st_shard_stats *sum);
/* One searchable segment of a shard copy, as _cat/segments shows it. */
typedef struct nd_segment_info {
	uint64_t generation, bytes;
	uint32_t live, deleted; /* root documents */
	unsigned format;
} nd_segment_info;
/* The segments shard s of ix searches now, oldest first; *out is
 * cm_malloc'd (free with cm_free(CM_MEM_NODE, ...)), NULL when none. */
size_t nd_index_segments(nd_index *ix, int s, nd_segment_info **out);

/* "1s", "500ms", "2m", "-1" (→ -1) as milliseconds; false when malformed. */
bool nd_parse_time(const char *s, int64_t *ms);

/* A generated document id: 20 characters of base64url (time + counter +
 * random, as Elasticsearch's). buf has room for 21 bytes. */
void nd_gen_id(char buf[21]);

/* ---- search ---- */

/* One search target: an index and a point-in-time reader per shard. */
typedef struct nd_target {
	nd_index *ix;      /* referenced */
	st_reader **readers; /* one per shard */
	int nshards;
	bool *skip; /* NULL: every shard; else skip[s] leaves shard s out (owned) */
} nd_target;

/* Takes reader snapshots of every shard of each index (references ix). */
nd_target *nd_targets_open(nd_index **ixs, size_t n);
void nd_targets_close(nd_target *t, size_t n);
/* Leaves out of t[0..n) every shard pref (a ?preference) does not list
 * with _shards:; the number of shards left. */
size_t nd_targets_only(nd_target *t, size_t n, const char *pref);
/* Documents a search of ix sees now: the live docs of a fresh snapshot
 * of every shard (docs.count of _cat/indices and _cat/count). */
uint64_t nd_index_visible_docs(nd_index *ix);

/* Runs req over every shard of the targets on the search pool, handing
 * each shard's result to the merger as it completes; renders the ES
 * _search body into out. */
cm_err nd_search(nd_node *n, nd_target *t, size_t nt, const sr_request *req, cm_buf *out,
                 cm_error *err);
/* Fan-out modes for experiments (fanout=serial|per_shard|per_node): serial
 * runs the shards one after another on the caller's thread; the others
 * overlap them on the pool (on one node, per_node is per_shard). */
typedef enum { ND_FANOUT_PER_SHARD, ND_FANOUT_SERIAL, ND_FANOUT_PER_NODE } nd_fanout;
cm_err nd_search_fanout(nd_node *n, nd_target *t, size_t nt, const sr_request *req,
                        nd_fanout mode, cm_buf *out, cm_error *err);
/* Total count over the targets. */
cm_err nd_count(nd_node *n, nd_target *t, size_t nt, const sr_query *q, uint64_t deadline_ns,
                uint64_t *count, cm_error *err);

/* Index templates and ingest pipelines as one JSON object
 * {"index":{..},"component":{..},"legacy":{..},"pipeline":{..}} (nd_templates.c): normalize gives db (consumed) every
 * kind; apply makes one change {"op":"put"|"delete","kind","name","body"}. */
cJSON *nd_templates_normalize(cJSON *db);
cm_err nd_templates_apply(cJSON *db, const cJSON *op, cm_error *err);

/* Search contexts (nd_ctx.c): one per shard copy, on the node holding
 * it, each a point-in-time reader with a keep-alive; scroll pages run on
 * them wherever they live (cluster or solo). */
#define ND_MAX_SCROLL_CONTEXTS 500 /* search.max_open_scroll_context, per node */
enum { ND_CTX_SCROLL = 0, ND_CTX_PIT = 1 };
/* search.max_open_scroll_context of this process (<= 0: the default). */
void nd_ctx_set_max_scroll(int max);
/* indices.requests.cache.size ("1%", "64mb", bytes): the shard request
 * cache's budget for nodes opened afterwards; false when it does not parse. */
bool nd_set_request_cache_size(const char *v);
/* The shard request cache's figures of ix (NULL: the whole node n; n may
 * be NULL when ix is given). */
typedef struct nd_request_cache_stats {
	uint64_t memory_bytes, evictions, hits, misses;
} nd_request_cache_stats;
void nd_request_cache_stats_get(nd_node *n, const nd_index *ix, nd_request_cache_stats *out);
/* Drops the cached results of ix (NULL: all of n's; n may be NULL when ix
 * is given); POST _cache/clear?request. */
void nd_request_cache_clear(nd_node *n, const nd_index *ix);
/* Contexts open on this node (indices.search.open_contexts). */
size_t nd_ctx_open_count(nd_node *n);
/* Opens a context on one copy of every shard of ixs, runs the first page
 * of body (a _search body) into out, and sets *id (cm_malloc'd NODE, the
 * caller frees) to the scroll id. Past the limit on any node → CM_EBUSY
 * and nothing stays open. slice_max > 0: only the shards whose number in
 * the request modulo slice_max is slice_id; with more slices than shards,
 * as ES, shard slice_id % nshards alone and of it the documents whose _id
 * hashes (XXH3) to its sub-slice (slice_id / nshards modulo the slices
 * that shard has). nd_pit_search slices alike. typed_keys: aggregation and
 * suggestion names carry their type (?typed_keys; only the first page has
 * aggregations, as ES). */
cm_err nd_scroll_open(nd_node *n, nd_index **ixs, size_t nix, const char *body, int64_t keep_ms,
                      int slice_id, int slice_max, bool typed_keys, cm_buf *out, char **id,
                      cm_error *err);
/* The next page of a scroll into out; *next_id (cm_malloc'd, the caller
 * frees) is the id for the page after. A context that expired, was
 * cleared or whose node is gone → CM_ENOTFOUND
 * (search_context_missing_exception); an id that does not parse →
 * CM_EINVAL. keep_ms 0 keeps the current expiry. */
cm_err nd_scroll_next(nd_node *n, const char *id, int64_t keep_ms, cm_buf *out, char **next_id,
                      cm_error *err);
/* Frees the contexts of a scroll id: *nctx it names, *freed it freed. */
cm_err nd_scroll_clear(nd_node *n, const char *id, size_t *nctx, size_t *freed, cm_error *err);
/* Frees every scroll context of the cluster (or of this node); the count. */
size_t nd_scroll_clear_all(nd_node *n);
/* Point in time: a context on one copy of every shard of ixs, no cursor;
 * *id (cm_malloc'd NODE) names them. */
cm_err nd_pit_open(nd_node *n, nd_index **ixs, size_t nix, int64_t keep_ms, char **id,
                   cm_error *err);
/* Runs body (a _search body without "pit"; its sort should end with
 * _shard_doc) on the contexts of a point in time into out; keep_ms > 0
 * extends them; typed_keys as nd_scroll_open. Errors as nd_scroll_next. */
cm_err nd_pit_search(nd_node *n, const char *id, int64_t keep_ms, const char *body, int slice_id,
                     int slice_max, bool typed_keys, cm_buf *out, cm_error *err);
cm_err nd_pit_close(nd_node *n, const char *id, size_t *nctx, size_t *freed, cm_error *err);
/* Frees every context of this node (it is stopping). */
size_t nd_ctx_close_node(nd_node *n);
/* The transport's search context messages (PR_CTX_*), served here. */
bool nd_ctx_handles(uint32_t type);
void nd_ctx_serve(nd_node *n, uint32_t type, const uint8_t *p, size_t len, cm_buf *reply,
                  uint32_t *reply_type);

/* Asks the coordinator's upcall (nd_cluster_set_info) of every cluster
 * node with which[i] set (NULL: all) at once, kind as its argument, each
 * bounded (15 s; a node known dead fails at once). out[i] is node i's
 * answer (the caller deletes it), or NULL with errs[i] saying why. Returns
 * the number of nodes (indices as nd_cluster_node_name), -1 when solo or
 * more than cap. */
int nd_upcall_all(nd_node *n, const char *kind, const bool *which, cJSON **out, cm_error *errs,
                  int cap);

/* Node-wide counters for _nodes/stats. */
typedef struct nd_node_counters {
	uint64_t http_requests, http_open, http_opened;
	uint64_t search_rejected;
} nd_node_counters;
nd_node_counters *nd_counters(nd_node *n);

/* ---- aliases (nd_alias.c) ---- */

/* ix's aliases as Elasticsearch renders them ({"name":{"filter":..}}); new. */
cJSON *nd_index_aliases_json(nd_index *ix);
bool nd_alias_exists(nd_node *n, const char *name);
/* POST /_aliases actions ([{"add":{..}},{"remove":{..}},{"remove_index":{..}}])
 * on a solo node: planned whole (patterns resolved, checks passed) before
 * any is applied. */
cm_err nd_alias_update(nd_node *n, const cJSON *actions, cm_error *err);
/* The index a write through alias name goes to (its is_write_index, or its
 * only index), referenced; *routing (optional) its index_routing or NULL
 * (cm_free NODE). CM_ENOINDEX when name is no alias. */
cm_err nd_alias_write_index(nd_node *n, const char *name, nd_index **out, char **routing,
                            cm_error *err);
/* The only index of alias name, referenced, or NULL. */
nd_index *nd_alias_single(nd_node *n, const char *name);
/* The query a search of expr must be filtered with (new JSON, or NULL for
 * none): the filters of the aliases through which it reaches its indices.
 * CM_EINVAL when its indices would need different filters. */
cm_err nd_alias_filter(nd_node *n, const char *expr, cJSON **filter, cm_error *err);

#endif
