/* Coordinator internals: one HTTP request, routes, response helpers. */
#ifndef CO_PRIVATE_H
#define CO_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../node/nd.h"
#include "../script/ps.h"
#include "../node/nd_cluster.h"
#include "co.h"
#include "co_auth.h"

typedef struct cJSON cJSON;

typedef enum { CO_GET, CO_HEAD, CO_POST, CO_PUT, CO_DELETE, CO_OTHER } co_method;

#define CO_MAX_SEGS 8
#define CO_MAX_PARAMS 32
#define CO_MAX_REPLY_HEADERS 6

typedef struct co_param {
	char *key, *value; /* value NULL for "?pretty" */
	bool used;
} co_param;

typedef struct co_req co_req;
typedef struct co_route co_route;

/* Streaming body consumer (bulk): fed as chunks arrive. */
typedef struct co_stream co_stream;

struct co_req {
	nd_node *node;
	co_server *server;
	co_method method;
	char *path;
	char *segs[CO_MAX_SEGS];
	int nsegs;
	co_param params[CO_MAX_PARAMS];
	int nparams;
	bool too_many_params;
	const co_route *route;
	bool gzip;
	z_stream z;
	bool z_init;
	uint64_t raw_bytes; /* body bytes received (before inflating) */
	uint64_t max_body;
	cm_buf body;        /* whole body (non-streaming routes) */
	co_stream *stream;  /* streaming routes */
	bool failed;        /* a reply is already decided (e.g. 413) */
	/* response */
	int status;
	cm_buf out;
	const char *content_type;
	uint64_t start_ns;
	uint64_t write_deadline_ns; /* ?timeout of a cluster write (absolute), 0 = default */
	/* security (co_auth.c): NULL auth = no users configured */
	co_auth *auth;
	co_principal principal; /* who the request runs as, when auth */
	bool www_authenticate;  /* a 401: send the WWW-Authenticate challenge */
	bool close_conn;        /* answer with Connection: close */
	bool replied;           /* the reply is queued (no more body to wait for) */
	char *if_none_match;    /* the request's If-None-Match header, or NULL */
	/* extra reply headers (static strings), co_reply_header */
	const char *hdr_name[CO_MAX_REPLY_HEADERS], *hdr_value[CO_MAX_REPLY_HEADERS];
	int nhdr;
	int compat; /* compatible-with version asked for (co_media.c), 0 = none */
	bool accept_yaml; /* Accept names YAML (the _cat tables answer in it) */
};

struct co_route {
	co_method method;
	const char *pattern; /* "/{index}/_doc/{id}", literal segments match exactly */
	void (*handler)(co_req *r);
	const char *params;  /* allowed URL parameters, comma separated */
	bool stream;         /* body consumed as it arrives (bulk) */
	co_role role;        /* the least role allowed; UNSET is treated as admin */
	const char *action;  /* Elasticsearch's action name, for 403 replies */
};

/* The route table, for tests that check every route has a role. */
const co_route *co_routes(size_t *n);

/* ---- request accessors ---- */
/* The value of a URL parameter (marked used), or NULL; "" for "?pretty". */
const char *co_param_get(co_req *r, const char *key);
bool co_param_bool(co_req *r, const char *key, bool dflt);
/* A boolean parameter parsed as Elasticsearch does: absent is dflt, ""
 * and "true" are true, "false" is false; anything else answers 400 and
 * returns false. */
bool co_param_flag(co_req *r, const char *key, bool dflt, bool *out);
/* What _cluster/health waits for besides a status: wait_for_nodes ("N",
 * ">=N", "<=N", ">N", "<N", "ge(N)", ...), wait_for_active_shards (a
 * count or "all"), wait_for_no_relocating_shards and
 * wait_for_no_initializing_shards. co_health_waits_parse answers 400 and
 * returns false on a bad value. */
typedef struct {
	char nodes_op[3]; /* "" (none), "==", ">=", "<=", ">", "<" */
	long nodes;
	long active; /* 0: no wait; -1: all */
	bool no_relocating, no_initializing;
} co_health_waits;
bool co_health_waits_parse(co_req *r, co_health_waits *w);
bool co_health_waits_met(const co_health_waits *w, int nodes, long active, long initializing,
                         long unassigned, long relocating);
/* _cat rows of space-separated fields under cols, rendered with the
 * request's h, s, v and format (co_rest.c). */
void co_cat_rows(co_req *r, const char *const *cols, int ncols, const char *rows, size_t len);
/* The same; columns from ndefault on show only when h= names them. */
void co_cat_rows_ex(co_req *r, const char *const *cols, int ncols, int ndefault, const char *rows,
                    size_t len);
/* The same from nrows * ncols cells (row by row; a cell may hold spaces). */
void co_cat_cells(co_req *r, const char *const *cols, int ncols, char *const *cells, int nrows);
/* The same; the columns whose bit is set in extra (bit c: column c) show
 * only when h= names them. */
void co_cat_cells_ex(co_req *r, const char *const *cols, int ncols, uint64_t extra,
                     char *const *cells, int nrows);
#define CO_CAT_HEALTH_NCOLS 14
extern const char *const co_cat_health_cols[CO_CAT_HEALTH_NCOLS];
/* The cluster's uuid (from the cluster state; a solo node's own, or a
 * cluster node's own before the first state was committed), in buf. */
const char *co_cluster_uuid(co_req *r, char *buf, size_t cap);
/* A segment captured by the route pattern ("{index}"), or NULL. */
const char *co_seg(co_req *r, int i);
/* Parses the whole body as JSON; NULL for an empty body. On malformed JSON
 * replies 400 and returns NULL with *bad set. */
cJSON *co_body_json(co_req *r, bool *bad);

/* ---- replies ---- */
/* Takes ownership of j; applies ?pretty and ?filter_path. */
void co_reply_json(co_req *r, int status, cJSON *j);
/* A body already rendered as JSON text (e.g. by the merger). */
void co_reply_raw_json(co_req *r, int status, const char *json, size_t len);
void co_reply_text(co_req *r, int status, const char *ctype, const char *text, size_t len);
/* Adds a reply header; name and value must outlive the request (static
 * strings). Beyond CO_MAX_REPLY_HEADERS headers are dropped. */
void co_reply_header(co_req *r, const char *name, const char *value);
/* ES error shape; index (may be NULL) adds "index"/"index_uuid". */
void co_reply_error(co_req *r, const cm_error *e, const char *index);
void co_reply_errorf(co_req *r, cm_err code, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The error object ({"root_cause":..,"type","reason"}) for embedding in
 * bulk items and msearch responses. */
cJSON *co_error_json(const cm_error *e, const char *index);
/* The full error document {"error":..,"status":N}. */
cJSON *co_error_doc(const cm_error *e, const char *index);

/* JSON output helpers. */
void co_json_pretty(const cJSON *j, cm_buf *out);
cJSON *co_filter_path(cJSON *j, const char *filter); /* consumes j */

/* ---- handlers (co_rest.c, co_doc.c, co_search.c, co_bulk.c) ---- */
void co_h_root(co_req *r);
void co_h_health(co_req *r);
void co_h_cluster_state(co_req *r);
void co_h_cluster_settings(co_req *r);
void co_h_cat_help(co_req *r);
void co_h_cat(co_req *r);
void co_h_nodes_stats(co_req *r);
void co_h_nodes(co_req *r);

void co_h_prometheus(co_req *r);
void co_h_index_put(co_req *r);
void co_h_index_delete(co_req *r);
void co_h_index_head(co_req *r);
void co_h_index_get(co_req *r);
void co_h_mapping_get(co_req *r);
void co_h_field_caps(co_req *r); /* co_fieldcaps.c */
void co_h_analyze(co_req *r);    /* co_analyze.c */
void co_h_aliases_get(co_req *r);
void co_h_mapping_put(co_req *r);
void co_h_settings_get(co_req *r);
void co_h_settings_put(co_req *r);
void co_h_refresh(co_req *r);
void co_h_flush(co_req *r);
void co_h_forcemerge(co_req *r);
void co_h_stats(co_req *r);
void co_h_cache_clear(co_req *r);
/* search.default_allow_partial_results in a _cluster/settings section
 * (flat, or {"search":{"default_allow_partial_results":..}}): its value,
 * or NULL when c is another setting. A node keeps it (not the cluster
 * state), like action.destructive_requires_name. */
const cJSON *co_partial_setting(const cJSON *c);
bool co_bool_setting_ok(const cJSON *v);
void co_h_doc_index(co_req *r);
void co_h_doc_create(co_req *r);
void co_h_doc_get(co_req *r);
void co_h_doc_delete(co_req *r);
void co_h_source_get(co_req *r);
void co_h_update(co_req *r);
void co_h_mget(co_req *r);
void co_h_search(co_req *r);
void co_h_index_open(co_req *r);  /* POST /{index}/_open (co_rest.c) */
void co_h_explain(co_req *r);     /* GET|POST /{index}/_explain/{id} (co_explain.c) */
void co_h_validate(co_req *r);    /* GET|POST [/{index}]/_validate/query */
/* co_search.c, for co_explain.c: the URL's q=, df, ... folded into a
 * body with only a query (false after replying); co_search_run below
 * runs it. */
bool co_search_fold_params(co_req *r, cJSON *body);
void co_h_index_close(co_req *r); /* POST /{index}/_close */
void co_h_count(co_req *r);
void co_h_msearch(co_req *r);
/* _msearch over r->body; item_errs[i] (when its code is set) answers the
 * i-th search's error instead of running it (a template that could not be
 * rendered). */
void co_msearch_run(co_req *r, const cm_error *item_errs, size_t nitem_errs);
void co_h_scroll(co_req *r);       /* co_scroll.c */
void co_h_scroll_clear(co_req *r);
/* The first page of a ?scroll= search (co_scroll.c), "_scroll_id" first. */
cm_err co_scroll_start(co_req *r, nd_index **ixs, size_t n, const cJSON *body, int64_t keep_ms,
                       int slice_id, int slice_max, cm_buf *out, cm_error *err);
/* Takes "slice" ({"id":i,"max":n}) out of a search body; false after
 * replying 400 when it is malformed or allowed is false (no scroll or pit).
 * *max 0: none. */
bool co_slice_take(co_req *r, cJSON *body, bool allowed, int *id, int *max);
/* co_search.c: a keep-alive ("1m"), replying 400 when bad; hits.total as a
 * number (rest_total_hits_as_int). */
bool co_parse_keep_alive(co_req *r, const char *v, int64_t *ms);
bool co_total_as_int(cm_buf *out);
/* Point in time (co_pit.c): POST /{index}/_pit, DELETE /_pit, and a
 * _search whose body has "pit" (body is the caller's). */
void co_h_pit_open(co_req *r);
void co_h_pit_close(co_req *r);
void co_pit_search(co_req *r, cJSON *body, int slice_id, int slice_max);

/* Tasks (co_tasks.c): in memory on the node running them, asked by the
 * others through the upcall; detached ones also kept in .tasks. */
typedef struct co_task co_task;
typedef struct co_task_status {
	uint64_t total, updated, created, deleted, batches, version_conflicts, noops, failures;
	uint64_t throttled_ms;
	double requests_per_second; /* -1: unthrottled */
} co_task_status;
co_task *co_task_new(nd_node *n, const char *action, const char *desc);
void co_task_id(const co_task *t, char *buf, size_t cap); /* "nodeid:N" */
bool co_task_cancelled(co_task *t);                        /* cancel asked or node stopping */
bool co_task_stopping(co_task *t); /* the node is stopping (no cancel asked) */
void co_task_update(co_task *t, const co_task_status *st);
/* Writes t to .tasks as running and counts it as a task that runs on
 * after its request; fails (nothing counted) when the node is stopping or
 * .tasks cannot be written. co_task_finish(.., detached=true) writes its
 * result there and uncounts it. */
cm_err co_task_detach(co_task *t, cm_error *err);
/* The task is done; response (JSON) is kept for GET /_tasks/{id}. */
void co_task_finish(co_task *t, const char *response, bool failed, bool detached);
/* Another node's question about this node's tasks (co_node_entry, kind
 * "tasks {json}"); returns a cJSON object or NULL. */
cJSON *co_tasks_upcall(nd_node *n, const char *json);
void co_h_tasks_list(co_req *r);
void co_h_task_get(co_req *r);
void co_h_task_cancel(co_req *r);
void co_h_tasks_cancel_all(co_req *r); /* POST /_tasks/_cancel?actions=&nodes= */
/* _update_by_query and _reindex (co_byquery.c; co_h_delete_by_query too). */
void co_h_update_by_query(co_req *r);
/* Runs an update script (co_script.c) on *cur, a document's _source
 * (replaced by the script's on success; untouched on failure). meta: the
 * stored document's, NULL for a scripted upsert. *op: what to write. */
enum { CO_SCRIPT_INDEX, CO_SCRIPT_NOOP, CO_SCRIPT_DELETE };
cm_err co_script_apply(const ps_script *s, const cJSON *params, nd_index *ix, const char *id,
                       const st_doc_meta *meta, cJSON **cur, int *op, cm_error *err);
void co_h_reindex(co_req *r);
void co_h_delete_by_query(co_req *r);
void co_h_security_authenticate(co_req *r);
void co_h_api_key_create(co_req *r);
void co_h_api_key_get(co_req *r);
void co_h_api_key_invalidate(co_req *r);
/* The cluster page (co_ui.c): static files and its JSON endpoints. */
void co_h_ui_file(co_req *r);
void co_h_stats_fanout(co_req *r);
void co_h_stats_nodes(co_req *r);

/* Wire-level endpoints (co_surface.c): _license, _xpack, and the node and
 * metric selection of _nodes/{node}/{metric}. co_nodes_parse replies 400
 * itself (false) on an unknown metric; co_nodes_select drops the nodes
 * and metric sections not asked for from nodes (an object keyed by id). */
void co_h_license(co_req *r);
void co_h_xpack(co_req *r);
bool co_nodes_parse(co_req *r, const char **node_sel, const char **metric_sel);
void co_nodes_select(co_req *r, cJSON *nodes, const char *node_sel, const char *metric_sel);
/* The HTTP server's "host:port" and http.max_content_length (co_http.c). */
const char *co_http_publish_address(void);
uint64_t co_http_max_content(void);

/* Aliases (co_alias.c). co_alias_filter wraps body's query in the filter
 * of the aliases a search of expr goes through (nd_alias_filter). */
void co_h_alias_put(co_req *r);
void co_h_alias_delete(co_req *r);
void co_h_aliases_post(co_req *r);
void co_cat_aliases(co_req *r, const char *names);
cm_err co_alias_filter(co_req *r, const char *expr, cJSON *body, cm_error *err);
/* The index name names, or the index behind alias name: its write index
 * for a write, its only index for a read. A new reference or NULL. */
nd_index *co_index_or_alias(nd_node *n, const char *name, bool write);
/* Why co_index_or_alias found no index for a read: an alias over several
 * indices (400, ES's "has more than one index associated with it"), else
 * no such index (404). Fills err. */
void co_single_index_error(nd_node *n, const char *name, cm_error *err);
/* An alias's index_routing (of its write index), a new string (cm_free
 * COORDINATOR), NULL when name is an index or the alias has none. */
char *co_alias_index_routing(nd_node *n, const char *name);
/* False (err set, Elasticsearch's reason) when a routing value given with
 * a write through an alias differs from the alias's index_routing. */
bool co_alias_routing_check(const char *alias, const char *alias_rt, const char *given,
                            cm_error *err);
/* A one-document request on alias name takes its index_routing as
 * ?routing=; false when it conflicts (400 replied). */
bool co_alias_routing_param(co_req *r, const char *name);

/* Index templates (co_template.c). co_template_body: the create body of a
 * new index, its matching templates under req (may be NULL); new JSON,
 * or NULL when neither gives anything. */
void co_h_template_put(co_req *r);
void co_h_template_get(co_req *r);
void co_h_template_delete(co_req *r);
void co_h_cat_templates(co_req *r); /* GET /_cat/templates[/{name}] */
/* Index settings as ES shows them (new JSON): keys under "index.", values
 * as strings, nested unless flat. */
cJSON *co_settings_normalized(const cJSON *s, bool flat);
/* Stored scripts (mustache search templates), kept with the templates. */
void co_h_script_put(co_req *r);
void co_h_script_get(co_req *r);
void co_h_script_delete(co_req *r);
/* The source of stored script id (cm_free COORDINATOR), NULL when none. */
char *co_script_source(nd_node *n, const char *id);
/* Search templates (co_searchtpl.c). */
void co_h_search_template(co_req *r);
void co_h_msearch_template(co_req *r);
void co_h_render_template(co_req *r);
void co_h_simulate_index(co_req *r);
cJSON *co_template_body(nd_node *n, const char *index, const cJSON *req);
/* Every template ({"index","component","legacy"}) and ingest pipeline
 * ("pipeline"), new, and putting such a set back (each one replaced or
 * added; on a cluster through the master), for snapshots' global state. */
cJSON *co_template_export(nd_node *n);
cm_err co_template_import(nd_node *n, const cJSON *all, cm_error *err);
/* The store's entries of one kind ("pipeline", ...), a new object {name:
 * body}; and a change to one entry (op "put" or "delete") through the
 * master on a cluster, replying {"acknowledged":..} or the error
 * (co_store_apply: the same change {"op","kind","name","body"} without
 * a reply). */
cJSON *co_store_get(nd_node *n, const char *kind);
cm_err co_store_apply(nd_node *n, const cJSON *op, cm_error *err); /* no reply */
void co_store_change(co_req *r, const char *op, const char *kind, const char *name,
                     const cJSON *body);

/* Date-math index names (co_datemath.c): every "<name-{now/d}>" element
 * of a comma list resolved, the rest kept; *out is owned. */
cm_err co_date_math_names(const char *expr, char **out, cm_error *err);

/* Ingest pipelines (co_ingest.c): _ingest/pipeline (put, get, delete,
 * _simulate), and running them on documents before they are routed. A
 * co_ingest is one request's compiled pipelines (compiled on first use).
 * co_ingest_run: `pipeline` is the request's or the bulk item's (NULL:
 * the index's default_pipeline; "_none": no default), then the index's
 * final_pipeline. *index, *id and *routing (owned, CM_MEM_COORDINATOR)
 * may be replaced by the pipeline; *out (owned) is the new source, NULL
 * when no pipeline ran; *dropped when a drop processor ran. */
typedef struct co_ingest co_ingest;
co_ingest *co_ingest_new(nd_node *n);
void co_ingest_free(co_ingest *g);
cm_err co_ingest_run(co_ingest *g, nd_index *ix, const char *pipeline, char **index, char **id,
                     char **routing, const char *src, size_t len, char **out, size_t *out_len,
                     bool *dropped, cm_error *err);
void co_h_pipeline_put(co_req *r);
void co_h_pipeline_get(co_req *r);
void co_h_pipeline_delete(co_req *r);
void co_h_pipeline_simulate(co_req *r);
void co_h_grok_patterns(co_req *r);


/* Bulk: a streaming consumer. */
co_stream *co_bulk_begin(co_req *r);
/* Returns false to stop reading (the reply is already decided). */
bool co_bulk_feed(co_stream *s, const char *data, size_t len);
void co_bulk_end(co_stream *s); /* replies */
void co_bulk_free(co_stream *s);

/* ---- shared helpers ---- */
/* Resolves {index} of the route (or "_all"), replying on error, with the
 * request's expand_wildcards (default open; co_resolve_all: open and
 * closed), ignore_unavailable and allow_no_indices. */
bool co_resolve(co_req *r, const char *expr, nd_index ***out, size_t *n);
bool co_resolve_all(co_req *r, const char *expr, nd_index ***out, size_t *n);
void co_release_all(nd_index **ixs, size_t n);
/* _source filtering of a document for GET/mget (includes/excludes with
 * wildcards). Returns a new string (cm_free COORDINATOR) or NULL = none. */
char *co_source_filter(const char *src, size_t len, const char *spec_includes,
                       const char *spec_excludes, bool *fetch);
/* _shards object {"total","successful","failed"}. */
cJSON *co_shards_json(int total, int successful, int failed);

/* ---- cluster (co_cluster.c): false when no cluster runs ---- */
bool co_cluster_admin(co_req *r, nd_meta_kind kind, const char *index, const cJSON *body);
bool co_cluster_delete(co_req *r, nd_index **ixs, size_t n);
bool co_cluster_put_mapping(co_req *r, nd_index **ixs, size_t n, const cJSON *body);
bool co_cluster_put_settings(co_req *r, nd_index **ixs, size_t n, const cJSON *settings);
bool co_cluster_broadcast(co_req *r, nd_broadcast_op op, nd_index **ixs, size_t n);
/* One search of body over ixs (co_search.c), rendered into out; no scroll,
 * no collapse expansion. */
cm_err co_search_run(co_req *r, nd_index **ixs, size_t n, cJSON *body, cm_buf *out, cm_error *err);
/* Finds member key of the JSON object text s[0..len) (top level only):
 * its value's offset and length. false when absent or malformed. */
bool co_json_member(const char *s, size_t len, const char *key, size_t *off, size_t *vlen);
/* collapse.inner_hits of body: runs each group's searches and adds the
 * hits' "inner_hits" to the rendered response in out (co_collapse.c). */
cm_err co_collapse_expand(co_req *r, nd_index **ixs, size_t n, const cJSON *body, cm_buf *out,
                          cm_error *err);
/* A search over a cluster: parsed (the request built from body, moved
 * into the fan-out; may be NULL) is not built again. */
bool co_cluster_search(co_req *r, nd_index **ixs, size_t n, cJSON *body, sr_request *parsed,
                       cm_buf *out, cm_error *err, cm_err *rc);
bool co_cluster_count(co_req *r, nd_index **ixs, size_t n, cJSON *body);
bool co_cluster_health(co_req *r);
bool co_cluster_settings(co_req *r);
void co_h_cluster_reroute(co_req *r);
void co_h_allocation_explain(co_req *r);
bool co_cluster_cat(co_req *r, const char *what);
/* nd_index_get_or_create, with the creation going through the master on a
 * cluster node (auto_create_index). */
cm_err co_get_or_create(nd_node *n, const char *name, nd_index **out, cm_error *err);

#endif
