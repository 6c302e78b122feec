/* The HTTP server (libmicrohttpd, epoll with a thread pool, keep-alive):
 * request bodies streamed (gzip inflated on the fly), the router, URL
 * parameter checks, and the reply helpers (pretty, filter_path, errors). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "co_conn.h"
#include "co_guard.h"
#include "co_media.h"
#include "co_private.h"
#include "co_snapshot.h"

#define MEM CM_MEM_COORDINATOR

struct co_server {
	struct MHD_Daemon *d;
	nd_node *node;
	co_opts opts;
	co_conns *conns; /* deadlines and the connection limit (co_conn.c) */
};

/* Parameters every endpoint accepts. */
static const char global_params[] = "pretty,human,error_trace,filter_path,format,source,"
                                    "source_content_type";

#define P_INDEX_READ "ignore_unavailable,allow_no_indices,expand_wildcards,ignore_throttled"
#define P_WRITE                                                                           \
	"refresh,routing,timeout,wait_for_active_shards,version,version_type,if_seq_no,"      \
	"if_primary_term,op_type,pipeline,require_alias"
#define P_GET                                                                             \
	"routing,preference,realtime,refresh,_source,_source_includes,_source_excludes,"      \
	"stored_fields,version,version_type"
#define P_SEARCH                                                                          \
	P_INDEX_READ ",q,df,default_operator,analyzer,analyze_wildcard,lenient,from,size,sort," \
	             "_source,_source_includes,_source_excludes,track_total_hits,timeout,"       \
	             "terminate_after,scroll,search_type,routing,preference,request_cache,"      \
	             "rest_total_hits_as_int,typed_keys,track_scores,allow_partial_search_results," \
	             "batched_reduce_size,pre_filter_shard_size,max_concurrent_shard_requests,"  \
	             "ccs_minimize_roundtrips,explain,version,seq_no_primary_term,stored_fields," \
	             "docvalue_fields,stats,fanout,timings,min_score"
#define P_SNAP "master_timeout,timeout,local,ignore_unavailable"
#define P_CAT "v,h,s,help,bytes,time,local,master_timeout,health,pri,expand_wildcards,ts,full_id"

/* Every route names the least role that may call it (admin includes write
 * includes read) and Elasticsearch's action name for the 403 reason. A
 * route left without one is treated as admin-only (see authorize()), and
 * co_auth_test fails on it. */
#define NONE(action) CO_ROLE_NONE, action
#define READ(action) CO_ROLE_READ, action
#define WRITE(action) CO_ROLE_WRITE, action
#define ADMIN(action) CO_ROLE_ADMIN, action

static const co_route routes[] = {
    {CO_GET, "/", co_h_root, "", false, READ("cluster:monitor/main")},
    {CO_HEAD, "/", co_h_root, "", false, READ("cluster:monitor/main")},
    {CO_GET, "/_cluster/health", co_h_health,
     "level,local,master_timeout,timeout,wait_for_status,wait_for_nodes,wait_for_events,"
     "wait_for_no_relocating_shards,wait_for_no_initializing_shards,wait_for_active_"
     "shards," P_INDEX_READ,
     false, READ("cluster:monitor/health")},
    {CO_GET, "/_cluster/health/{index}", co_h_health,
     "level,local,master_timeout,timeout,wait_for_status,wait_for_nodes,wait_for_events,"
     "wait_for_no_relocating_shards,wait_for_no_initializing_shards,wait_for_active_"
     "shards," P_INDEX_READ,
     false, READ("cluster:monitor/health")},
    {CO_GET, "/_cluster/state", co_h_cluster_state, "local,master_timeout," P_INDEX_READ, false,
     READ("cluster:monitor/state")},
    {CO_POST, "/_cluster/reroute", co_h_cluster_reroute,
     "dry_run,explain,retry_failed,metric,master_timeout,timeout", false,
     ADMIN("cluster:admin/reroute")},
    {CO_GET, "/_cluster/allocation/explain", co_h_allocation_explain,
     "include_disk_info,include_yes_decisions", false, READ("cluster:monitor/allocation/explain")},
    {CO_POST, "/_cluster/allocation/explain", co_h_allocation_explain,
     "include_disk_info,include_yes_decisions", false, READ("cluster:monitor/allocation/explain")},
    {CO_GET, "/_cluster/settings", co_h_cluster_settings,
     "flat_settings,include_defaults,local,master_timeout,timeout", false,
     READ("cluster:monitor/settings")},
    {CO_PUT, "/_cluster/settings", co_h_cluster_settings, "flat_settings,master_timeout,timeout",
     false, ADMIN("cluster:admin/settings/update")},
    {CO_GET, "/_cat", co_h_cat_help, "", false, READ("cluster:monitor/state")},
    {CO_GET, "/_cat/templates", co_h_cat_templates, P_CAT, false,
     READ("indices:admin/template/get")},
    {CO_GET, "/_cat/templates/{name}", co_h_cat_templates, P_CAT, false,
     READ("indices:admin/template/get")},
    /* snapshots (co_snapshot.c) */
    {CO_GET, "/_cat/snapshots", co_h_cat_snapshots, P_SNAP ",v,h,s,help,time", false,
     READ("cluster:admin/snapshot/get")},
    {CO_GET, "/_cat/snapshots/{repo}", co_h_cat_snapshots, P_SNAP ",v,h,s,help,time", false,
     READ("cluster:admin/snapshot/get")},
    {CO_GET, "/_snapshot", co_h_snapshot_repo, P_SNAP, false, READ("cluster:admin/repository/get")},
    {CO_GET, "/_snapshot/_status", co_h_snapshot_status, P_SNAP, false,
     READ("cluster:admin/snapshot/status")},
    {CO_GET, "/_snapshot/{repo}", co_h_snapshot_repo, P_SNAP, false,
     READ("cluster:admin/repository/get")},
    {CO_PUT, "/_snapshot/{repo}", co_h_snapshot_repo, P_SNAP ",verify", false,
     ADMIN("cluster:admin/repository/put")},
    {CO_POST, "/_snapshot/{repo}", co_h_snapshot_repo, P_SNAP ",verify", false,
     ADMIN("cluster:admin/repository/put")},
    {CO_DELETE, "/_snapshot/{repo}", co_h_snapshot_repo, P_SNAP, false,
     ADMIN("cluster:admin/repository/delete")},
    {CO_POST, "/_snapshot/{repo}/_verify", co_h_snapshot_verify, P_SNAP, false,
     ADMIN("cluster:admin/repository/verify")},
    {CO_GET, "/_snapshot/{repo}/_status", co_h_snapshot_status, P_SNAP, false,
     READ("cluster:admin/snapshot/status")},
    {CO_GET, "/_snapshot/{repo}/{snap}", co_h_snapshot, P_SNAP ",verbose,index_details", false,
     READ("cluster:admin/snapshot/get")},
    {CO_PUT, "/_snapshot/{repo}/{snap}", co_h_snapshot, P_SNAP ",wait_for_completion", false,
     ADMIN("cluster:admin/snapshot/create")},
    {CO_POST, "/_snapshot/{repo}/{snap}", co_h_snapshot, P_SNAP ",wait_for_completion", false,
     ADMIN("cluster:admin/snapshot/create")},
    {CO_DELETE, "/_snapshot/{repo}/{snap}", co_h_snapshot, P_SNAP, false,
     ADMIN("cluster:admin/snapshot/delete")},
    {CO_GET, "/_snapshot/{repo}/{snap}/_status", co_h_snapshot_status, P_SNAP, false,
     READ("cluster:admin/snapshot/status")},
    {CO_POST, "/_snapshot/{repo}/{snap}/_restore", co_h_snapshot_restore,
     P_SNAP ",wait_for_completion", false, ADMIN("cluster:admin/snapshot/restore")},
    {CO_GET, "/_cat/{what}", co_h_cat, P_CAT, false, READ("cluster:monitor/state")},
    {CO_GET, "/_cat/{what}/{index}", co_h_cat, P_CAT, false, READ("cluster:monitor/state")},
    {CO_GET, "/_nodes/stats", co_h_nodes_stats, "level,types,timeout,groups,fields", false,
     READ("cluster:monitor/nodes/stats")},
    {CO_GET, "/_nodes/stats/{metric}", co_h_nodes_stats, "level,types,timeout,groups,fields", false,
     READ("cluster:monitor/nodes/stats")},
    {CO_GET, "/_nodes/{node}/stats", co_h_nodes_stats, "level,types,timeout,groups,fields", false,
     READ("cluster:monitor/nodes/stats")},
    {CO_GET, "/_nodes/{node}/stats/{metric}", co_h_nodes_stats, "level,types,timeout,groups,fields",
     false, READ("cluster:monitor/nodes/stats")},
    {CO_GET, "/_nodes", co_h_nodes, "timeout", false, READ("cluster:monitor/nodes/info")},
    {CO_GET, "/_nodes/{metric}", co_h_nodes, "timeout,flat_settings", false,
     READ("cluster:monitor/nodes/info")},
    {CO_GET, "/_nodes/{node}/{metric}", co_h_nodes, "timeout,flat_settings", false,
     READ("cluster:monitor/nodes/info")},
    {CO_GET, "/_license", co_h_license, "local,accept_enterprise", false,
     READ("cluster:monitor/xpack/license/get")},
    {CO_GET, "/_xpack", co_h_xpack, "categories,accept_enterprise", false,
     READ("cluster:monitor/xpack/info")},
    {CO_GET, "/_prometheus/metrics", co_h_prometheus, "", false,
     READ("cluster:monitor/nodes/stats")},
    /* the cluster page: its files and the figures only it and scripts read */
    {CO_GET, "/_shoal/ui", co_h_ui_file, "", false, READ("cluster:monitor/shoal/ui")},
    {CO_GET, "/_shoal/ui/{file}", co_h_ui_file, "", false, READ("cluster:monitor/shoal/ui")},
    {CO_GET, "/_shoal/stats/fanout", co_h_stats_fanout, "", false,
     READ("cluster:monitor/shoal/stats/fanout")},
    {CO_GET, "/_shoal/stats/nodes", co_h_stats_nodes, "", false,
     READ("cluster:monitor/shoal/stats/nodes")},
    {CO_GET, "/_security/_authenticate", co_h_security_authenticate, "", false,
     NONE("cluster:admin/xpack/security/user/authenticate")},
    {CO_POST, "/_security/api_key", co_h_api_key_create, "refresh", false,
     ADMIN("cluster:admin/xpack/security/api_key/create")},
    {CO_PUT, "/_security/api_key", co_h_api_key_create, "refresh", false,
     ADMIN("cluster:admin/xpack/security/api_key/create")},
    {CO_GET, "/_security/api_key", co_h_api_key_get, "id,name,username,realm_name,owner", false,
     ADMIN("cluster:admin/xpack/security/api_key/get")},
    {CO_DELETE, "/_security/api_key", co_h_api_key_invalidate, "", false,
     ADMIN("cluster:admin/xpack/security/api_key/invalidate")},
    {CO_POST, "/_bulk", NULL, P_WRITE ",_source,_source_includes,_source_excludes,type", true,
     WRITE("indices:data/write/bulk")},
    {CO_PUT, "/_bulk", NULL, P_WRITE ",_source,_source_includes,_source_excludes,type", true,
     WRITE("indices:data/write/bulk")},
    {CO_POST, "/{index}/_bulk", NULL, P_WRITE ",_source,_source_includes,_source_excludes,type",
     true, WRITE("indices:data/write/bulk")},
    {CO_PUT, "/{index}/_bulk", NULL, P_WRITE ",_source,_source_includes,_source_excludes,type",
     true, WRITE("indices:data/write/bulk")},
    {CO_GET, "/_mget", co_h_mget, P_GET, false, READ("indices:data/read/mget")},
    {CO_POST, "/_mget", co_h_mget, P_GET, false, READ("indices:data/read/mget")},
    {CO_GET, "/{index}/_mget", co_h_mget, P_GET, false, READ("indices:data/read/mget")},
    {CO_POST, "/{index}/_mget", co_h_mget, P_GET, false, READ("indices:data/read/mget")},
    {CO_GET, "/_search/scroll", co_h_scroll, "scroll,scroll_id,rest_total_hits_as_int,typed_keys",
     false, READ("indices:data/read/scroll")},
    {CO_POST, "/_search/scroll", co_h_scroll, "scroll,scroll_id,rest_total_hits_as_int,typed_keys",
     false, READ("indices:data/read/scroll")},
    {CO_GET, "/_search/scroll/{id}", co_h_scroll,
     "scroll,scroll_id,rest_total_hits_as_int,typed_keys", false, READ("indices:data/read/scroll")},
    {CO_POST, "/_search/scroll/{id}", co_h_scroll,
     "scroll,scroll_id,rest_total_hits_as_int,typed_keys", false, READ("indices:data/read/scroll")},
    {CO_DELETE, "/_search/scroll", co_h_scroll_clear, "", false,
     READ("indices:data/read/scroll/clear")},
    {CO_DELETE, "/_search/scroll/{id}", co_h_scroll_clear, "", false,
     READ("indices:data/read/scroll/clear")},
    {CO_POST, "/{index}/_pit", co_h_pit_open, "keep_alive,preference,routing," P_INDEX_READ, false,
     READ("indices:data/read/open_point_in_time")},
    {CO_DELETE, "/_pit", co_h_pit_close, "", false, READ("indices:data/read/close_point_in_time")},
    {CO_GET, "/_search", co_h_search, P_SEARCH, false, READ("indices:data/read/search")},
    {CO_POST, "/_search", co_h_search, P_SEARCH, false, READ("indices:data/read/search")},
    {CO_GET, "/{index}/_search", co_h_search, P_SEARCH, false, READ("indices:data/read/search")},
    {CO_POST, "/{index}/_search", co_h_search, P_SEARCH, false, READ("indices:data/read/search")},
    {CO_GET, "/_search/template", co_h_search_template, P_SEARCH, false,
     READ("indices:data/read/search/template")},
    {CO_POST, "/_search/template", co_h_search_template, P_SEARCH, false,
     READ("indices:data/read/search/template")},
    {CO_GET, "/{index}/_search/template", co_h_search_template, P_SEARCH, false,
     READ("indices:data/read/search/template")},
    {CO_POST, "/{index}/_search/template", co_h_search_template, P_SEARCH, false,
     READ("indices:data/read/search/template")},
    {CO_GET, "/_msearch/template", co_h_msearch_template, P_SEARCH ",max_concurrent_searches",
     false, READ("indices:data/read/msearch/template")},
    {CO_POST, "/_msearch/template", co_h_msearch_template, P_SEARCH ",max_concurrent_searches",
     false, READ("indices:data/read/msearch/template")},
    {CO_GET, "/{index}/_msearch/template", co_h_msearch_template,
     P_SEARCH ",max_concurrent_searches", false, READ("indices:data/read/msearch/template")},
    {CO_POST, "/{index}/_msearch/template", co_h_msearch_template,
     P_SEARCH ",max_concurrent_searches", false, READ("indices:data/read/msearch/template")},
    {CO_GET, "/_render/template", co_h_render_template, "", false,
     READ("cluster:admin/script/template/render")},
    {CO_POST, "/_render/template", co_h_render_template, "", false,
     READ("cluster:admin/script/template/render")},
    {CO_GET, "/_render/template/{id}", co_h_render_template, "", false,
     READ("cluster:admin/script/template/render")},
    {CO_POST, "/_render/template/{id}", co_h_render_template, "", false,
     READ("cluster:admin/script/template/render")},
    {CO_PUT, "/_scripts/{id}", co_h_script_put, "timeout,master_timeout", false,
     ADMIN("cluster:admin/script/put")},
    {CO_POST, "/_scripts/{id}", co_h_script_put, "timeout,master_timeout", false,
     ADMIN("cluster:admin/script/put")},
    {CO_GET, "/_scripts/{id}", co_h_script_get, "master_timeout", false,
     READ("cluster:admin/script/get")},
    {CO_DELETE, "/_scripts/{id}", co_h_script_delete, "timeout,master_timeout", false,
     ADMIN("cluster:admin/script/delete")},
    {CO_GET, "/_count", co_h_count, P_SEARCH, false, READ("indices:data/read/search")},
    {CO_POST, "/_count", co_h_count, P_SEARCH, false, READ("indices:data/read/search")},
    {CO_GET, "/{index}/_count", co_h_count, P_SEARCH, false, READ("indices:data/read/search")},
    {CO_POST, "/{index}/_count", co_h_count, P_SEARCH, false, READ("indices:data/read/search")},
    {CO_GET, "/_msearch", co_h_msearch, P_SEARCH ",max_concurrent_searches", false,
     READ("indices:data/read/msearch")},
    {CO_POST, "/_msearch", co_h_msearch, P_SEARCH ",max_concurrent_searches", false,
     READ("indices:data/read/msearch")},
    {CO_GET, "/{index}/_msearch", co_h_msearch, P_SEARCH ",max_concurrent_searches", false,
     READ("indices:data/read/msearch")},
    {CO_POST, "/{index}/_msearch", co_h_msearch, P_SEARCH ",max_concurrent_searches", false,
     READ("indices:data/read/msearch")},
    {CO_POST, "/{index}/_delete_by_query", co_h_delete_by_query,
     P_SEARCH ",conflicts,refresh,wait_for_completion,wait_for_active_shards,scroll_size,"
              "slices,requests_per_second,max_docs,slices",
     false, WRITE("indices:data/write/delete/byquery")},
    {CO_POST, "/{index}/_update_by_query", co_h_update_by_query,
     P_SEARCH ",conflicts,refresh,wait_for_completion,wait_for_active_shards,scroll_size,"
              "slices,requests_per_second,max_docs,pipeline",
     false, WRITE("indices:data/write/update/byquery")},
    {CO_POST, "/_reindex", co_h_reindex,
     "refresh,timeout,wait_for_active_shards,wait_for_completion,requests_per_second,scroll,"
     "slices,max_docs,conflicts",
     false, WRITE("indices:data/write/reindex")},
    {CO_GET, "/_tasks", co_h_tasks_list,
     "actions,detailed,group_by,nodes,parent_task_id,wait_for_completion,timeout", false,
     READ("cluster:monitor/tasks/lists")},
    {CO_GET, "/_tasks/{id}", co_h_task_get, "wait_for_completion,timeout", false,
     READ("cluster:monitor/task/get")},
    {CO_POST, "/_tasks/_cancel", co_h_tasks_cancel_all, "actions,nodes,parent_task_id", false,
     WRITE("cluster:admin/tasks/cancel")},
    {CO_POST, "/_tasks/{id}/_cancel", co_h_task_cancel, "actions,nodes,parent_task_id", false,
     WRITE("cluster:admin/tasks/cancel")},
    {CO_POST, "/_refresh", co_h_refresh, P_INDEX_READ, false, WRITE("indices:admin/refresh")},
    {CO_GET, "/_refresh", co_h_refresh, P_INDEX_READ, false, WRITE("indices:admin/refresh")},
    {CO_POST, "/{index}/_refresh", co_h_refresh, P_INDEX_READ, false,
     WRITE("indices:admin/refresh")},
    {CO_GET, "/{index}/_refresh", co_h_refresh, P_INDEX_READ, false,
     WRITE("indices:admin/refresh")},
    {CO_POST, "/_flush", co_h_flush, P_INDEX_READ ",force,wait_if_ongoing", false,
     ADMIN("indices:admin/flush")},
    {CO_GET, "/_flush", co_h_flush, P_INDEX_READ ",force,wait_if_ongoing", false,
     ADMIN("indices:admin/flush")},
    {CO_POST, "/{index}/_flush", co_h_flush, P_INDEX_READ ",force,wait_if_ongoing", false,
     ADMIN("indices:admin/flush")},
    {CO_GET, "/{index}/_flush", co_h_flush, P_INDEX_READ ",force,wait_if_ongoing", false,
     ADMIN("indices:admin/flush")},
    {CO_POST, "/_forcemerge", co_h_forcemerge,
     P_INDEX_READ ",max_num_segments,only_expunge_deletes,flush,wait_for_completion", false,
     ADMIN("indices:admin/forcemerge")},
    {CO_POST, "/{index}/_forcemerge", co_h_forcemerge,
     P_INDEX_READ ",max_num_segments,only_expunge_deletes,flush,wait_for_completion", false,
     ADMIN("indices:admin/forcemerge")},
    {CO_GET, "/_stats", co_h_stats,
     P_INDEX_READ ",level,fields,groups,completion_fields,"
                  "fielddata_fields,include_segment_file_sizes",
     false, READ("indices:monitor/stats")},
    {CO_GET, "/{index}/_stats", co_h_stats,
     P_INDEX_READ ",level,fields,groups,completion_fields,fielddata_fields,"
                  "include_segment_file_sizes",
     false, READ("indices:monitor/stats")},
    {CO_GET, "/_stats/{metric}", co_h_stats,
     P_INDEX_READ ",level,fields,groups,completion_fields,fielddata_fields,"
                  "include_segment_file_sizes",
     false, READ("indices:monitor/stats")},
    {CO_GET, "/{index}/_stats/{metric}", co_h_stats,
     P_INDEX_READ ",level,fields,groups,completion_fields,fielddata_fields,"
                  "include_segment_file_sizes",
     false, READ("indices:monitor/stats")},
    {CO_POST, "/_cache/clear", co_h_cache_clear,
     P_INDEX_READ ",fielddata,fields,query,request,index", false,
     WRITE("indices:admin/cache/clear")},
    {CO_POST, "/{index}/_cache/clear", co_h_cache_clear,
     P_INDEX_READ ",fielddata,fields,query,request,index", false,
     WRITE("indices:admin/cache/clear")},
    {CO_GET, "/_alias", co_h_aliases_get, P_INDEX_READ ",local", false,
     READ("indices:admin/aliases/get")},
    {CO_GET, "/_alias/{name}", co_h_aliases_get, P_INDEX_READ ",local", false,
     READ("indices:admin/aliases/get")},
    {CO_GET, "/{index}/_alias/{name}", co_h_aliases_get, P_INDEX_READ ",local", false,
     READ("indices:admin/aliases/get")},
    {CO_POST, "/_aliases", co_h_aliases_post, "timeout,master_timeout", false,
     ADMIN("indices:admin/aliases")},
    {CO_PUT, "/{index}/_alias/{name}", co_h_alias_put, "timeout,master_timeout", false,
     ADMIN("indices:admin/aliases")},
    {CO_POST, "/{index}/_alias/{name}", co_h_alias_put, "timeout,master_timeout", false,
     ADMIN("indices:admin/aliases")},
    {CO_PUT, "/{index}/_aliases/{name}", co_h_alias_put, "timeout,master_timeout", false,
     ADMIN("indices:admin/aliases")},
    {CO_POST, "/{index}/_aliases/{name}", co_h_alias_put, "timeout,master_timeout", false,
     ADMIN("indices:admin/aliases")},
    {CO_DELETE, "/{index}/_alias/{name}", co_h_alias_delete, "timeout,master_timeout", false,
     ADMIN("indices:admin/aliases")},
    {CO_DELETE, "/{index}/_aliases/{name}", co_h_alias_delete, "timeout,master_timeout", false,
     ADMIN("indices:admin/aliases")},
    {CO_GET, "/_aliases", co_h_aliases_get, P_INDEX_READ ",local", false,
     READ("indices:admin/aliases/get")},
    {CO_GET, "/{index}/_alias", co_h_aliases_get, P_INDEX_READ ",local", false,
     READ("indices:admin/aliases/get")},
    {CO_GET, "/{index}/_aliases", co_h_aliases_get, P_INDEX_READ ",local", false,
     READ("indices:admin/aliases/get")},
    {CO_PUT, "/_index_template/{name}", co_h_template_put,
     "create,master_timeout,cause,order,timeout,include_type_name", false,
     ADMIN("indices:admin/index_template/put")},
    {CO_POST, "/_index_template/{name}", co_h_template_put,
     "create,master_timeout,cause,order,timeout,include_type_name", false,
     ADMIN("indices:admin/index_template/put")},
    {CO_GET, "/_index_template", co_h_template_get,
     "flat_settings,local,master_timeout,include_type_name", false,
     READ("indices:admin/index_template/get")},
    {CO_GET, "/_index_template/{name}", co_h_template_get,
     "flat_settings,local,master_timeout,include_type_name", false,
     READ("indices:admin/index_template/get")},
    {CO_DELETE, "/_index_template/{name}", co_h_template_delete, "master_timeout,timeout", false,
     ADMIN("indices:admin/index_template/delete")},
    {CO_PUT, "/_component_template/{name}", co_h_template_put,
     "create,master_timeout,cause,order,timeout,include_type_name", false,
     ADMIN("cluster:admin/component_template/put")},
    {CO_POST, "/_component_template/{name}", co_h_template_put,
     "create,master_timeout,cause,order,timeout,include_type_name", false,
     ADMIN("cluster:admin/component_template/put")},
    {CO_GET, "/_component_template", co_h_template_get,
     "flat_settings,local,master_timeout,include_type_name", false,
     READ("cluster:admin/component_template/get")},
    {CO_GET, "/_component_template/{name}", co_h_template_get,
     "flat_settings,local,master_timeout,include_type_name", false,
     READ("cluster:admin/component_template/get")},
    {CO_DELETE, "/_component_template/{name}", co_h_template_delete, "master_timeout,timeout",
     false, ADMIN("cluster:admin/component_template/delete")},
    {CO_PUT, "/_template/{name}", co_h_template_put,
     "create,master_timeout,cause,order,timeout,include_type_name", false,
     ADMIN("indices:admin/template/put")},
    {CO_POST, "/_template/{name}", co_h_template_put,
     "create,master_timeout,cause,order,timeout,include_type_name", false,
     ADMIN("indices:admin/template/put")},
    {CO_GET, "/_template", co_h_template_get,
     "flat_settings,local,master_timeout,include_type_name", false,
     READ("indices:admin/template/get")},
    {CO_GET, "/_template/{name}", co_h_template_get,
     "flat_settings,local,master_timeout,include_type_name", false,
     READ("indices:admin/template/get")},
    {CO_DELETE, "/_template/{name}", co_h_template_delete, "master_timeout,timeout", false,
     ADMIN("indices:admin/template/delete")},
    /* ingest pipelines (co_ingest.c) */
    {CO_GET, "/_ingest/pipeline/_simulate", co_h_pipeline_simulate, "verbose", false,
     READ("cluster:admin/ingest/pipeline/simulate")},
    {CO_POST, "/_ingest/pipeline/_simulate", co_h_pipeline_simulate, "verbose", false,
     READ("cluster:admin/ingest/pipeline/simulate")},
    {CO_GET, "/_ingest/pipeline/{id}/_simulate", co_h_pipeline_simulate, "verbose", false,
     READ("cluster:admin/ingest/pipeline/simulate")},
    {CO_POST, "/_ingest/pipeline/{id}/_simulate", co_h_pipeline_simulate, "verbose", false,
     READ("cluster:admin/ingest/pipeline/simulate")},
    {CO_GET, "/_ingest/processor/grok", co_h_grok_patterns, "s,ecs_compatibility", false,
     READ("cluster:admin/ingest/processor/grok/get")},
    {CO_GET, "/_ingest/pipeline", co_h_pipeline_get, "master_timeout,summary", false,
     READ("cluster:admin/ingest/pipeline/get")},
    {CO_GET, "/_ingest/pipeline/{id}", co_h_pipeline_get, "master_timeout,summary", false,
     READ("cluster:admin/ingest/pipeline/get")},
    {CO_PUT, "/_ingest/pipeline/{id}", co_h_pipeline_put, "master_timeout,timeout", false,
     ADMIN("cluster:admin/ingest/pipeline/put")},
    {CO_DELETE, "/_ingest/pipeline/{id}", co_h_pipeline_delete, "master_timeout,timeout", false,
     ADMIN("cluster:admin/ingest/pipeline/delete")},
    {CO_POST, "/_index_template/_simulate_index/{name}", co_h_simulate_index,
     "master_timeout,cause,create", false, READ("indices:admin/index_template/simulate_index")},
    {CO_GET, "/_analyze", co_h_analyze, "index", false, READ("indices:admin/analyze")},
    {CO_POST, "/_analyze", co_h_analyze, "index", false, READ("indices:admin/analyze")},
    {CO_GET, "/{index}/_analyze", co_h_analyze, "", false, READ("indices:admin/analyze")},
    {CO_POST, "/{index}/_analyze", co_h_analyze, "", false, READ("indices:admin/analyze")},
    {CO_GET, "/_field_caps", co_h_field_caps, P_INDEX_READ ",fields,include_unmapped", false,
     READ("indices:data/read/field_caps")},
    {CO_POST, "/_field_caps", co_h_field_caps, P_INDEX_READ ",fields,include_unmapped", false,
     READ("indices:data/read/field_caps")},
    {CO_GET, "/{index}/_field_caps", co_h_field_caps, P_INDEX_READ ",fields,include_unmapped",
     false, READ("indices:data/read/field_caps")},
    {CO_POST, "/{index}/_field_caps", co_h_field_caps, P_INDEX_READ ",fields,include_unmapped",
     false, READ("indices:data/read/field_caps")},
    {CO_GET, "/_mapping", co_h_mapping_get, P_INDEX_READ ",local,master_timeout,include_type_name",
     false, READ("indices:admin/mappings/get")},
    {CO_GET, "/{index}/_mapping", co_h_mapping_get,
     P_INDEX_READ ",local,master_timeout,include_type_name", false,
     READ("indices:admin/mappings/get")},
    {CO_PUT, "/{index}/_mapping", co_h_mapping_put,
     P_INDEX_READ ",timeout,master_timeout,include_type_name,write_index_only", false,
     ADMIN("indices:admin/mapping/put")},
    {CO_POST, "/{index}/_mapping", co_h_mapping_put,
     P_INDEX_READ ",timeout,master_timeout,include_type_name,write_index_only", false,
     ADMIN("indices:admin/mapping/put")},
    {CO_GET, "/_settings", co_h_settings_get,
     P_INDEX_READ ",local,master_timeout,include_defaults,flat_settings", false,
     READ("indices:monitor/settings/get")},
    {CO_GET, "/{index}/_settings", co_h_settings_get,
     P_INDEX_READ ",local,master_timeout,include_defaults,flat_settings", false,
     READ("indices:monitor/settings/get")},
    {CO_GET, "/_settings/{name}", co_h_settings_get,
     P_INDEX_READ ",local,master_timeout,include_defaults,flat_settings", false,
     READ("indices:monitor/settings/get")},
    {CO_GET, "/{index}/_settings/{name}", co_h_settings_get,
     P_INDEX_READ ",local,master_timeout,include_defaults,flat_settings", false,
     READ("indices:monitor/settings/get")},
    {CO_PUT, "/_settings", co_h_settings_put,
     P_INDEX_READ ",timeout,master_timeout,preserve_existing,flat_settings", false,
     ADMIN("indices:admin/settings/update")},
    {CO_PUT, "/{index}/_settings", co_h_settings_put,
     P_INDEX_READ ",timeout,master_timeout,preserve_existing,flat_settings", false,
     ADMIN("indices:admin/settings/update")},
    {CO_GET, "/{index}/_explain/{id}", co_h_explain,
     "q,df,default_operator,analyzer,analyze_wildcard,lenient,routing,preference,_source,"
     "_source_includes,_source_excludes,stored_fields",
     false, READ("indices:data/read/explain")},
    {CO_POST, "/{index}/_explain/{id}", co_h_explain,
     "q,df,default_operator,analyzer,analyze_wildcard,lenient,routing,preference,_source,"
     "_source_includes,_source_excludes,stored_fields",
     false, READ("indices:data/read/explain")},
    {CO_GET, "/_validate/query", co_h_validate,
     P_INDEX_READ ",q,df,default_operator,analyzer,analyze_wildcard,lenient,explain,rewrite,"
                  "all_shards",
     false, READ("indices:admin/validate/query")},
    {CO_POST, "/_validate/query", co_h_validate,
     P_INDEX_READ ",q,df,default_operator,analyzer,analyze_wildcard,lenient,explain,rewrite,"
                  "all_shards",
     false, READ("indices:admin/validate/query")},
    {CO_GET, "/{index}/_validate/query", co_h_validate,
     P_INDEX_READ ",q,df,default_operator,analyzer,analyze_wildcard,lenient,explain,rewrite,"
                  "all_shards",
     false, READ("indices:admin/validate/query")},
    {CO_POST, "/{index}/_validate/query", co_h_validate,
     P_INDEX_READ ",q,df,default_operator,analyzer,analyze_wildcard,lenient,explain,rewrite,"
                  "all_shards",
     false, READ("indices:admin/validate/query")},
    {CO_POST, "/{index}/_close", co_h_index_close,
     P_INDEX_READ ",timeout,master_timeout,wait_for_active_shards", false,
     ADMIN("indices:admin/close")},
    {CO_POST, "/{index}/_open", co_h_index_open,
     P_INDEX_READ ",timeout,master_timeout,wait_for_active_shards", false,
     ADMIN("indices:admin/open")},
    {CO_PUT, "/{index}/_doc/{id}", co_h_doc_index, P_WRITE, false,
     WRITE("indices:data/write/index")},
    {CO_POST, "/{index}/_doc/{id}", co_h_doc_index, P_WRITE, false,
     WRITE("indices:data/write/index")},
    {CO_POST, "/{index}/_doc", co_h_doc_index, P_WRITE, false, WRITE("indices:data/write/index")},
    {CO_PUT, "/{index}/_create/{id}", co_h_doc_create, P_WRITE, false,
     WRITE("indices:data/write/index")},
    {CO_POST, "/{index}/_create/{id}", co_h_doc_create, P_WRITE, false,
     WRITE("indices:data/write/index")},
    {CO_GET, "/{index}/_doc/{id}", co_h_doc_get, P_GET, false, READ("indices:data/read/get")},
    {CO_HEAD, "/{index}/_doc/{id}", co_h_doc_get, P_GET, false, READ("indices:data/read/get")},
    {CO_DELETE, "/{index}/_doc/{id}", co_h_doc_delete, P_WRITE, false,
     WRITE("indices:data/write/delete")},
    {CO_GET, "/{index}/_source/{id}", co_h_source_get, P_GET, false, READ("indices:data/read/get")},
    {CO_HEAD, "/{index}/_source/{id}", co_h_source_get, P_GET, false,
     READ("indices:data/read/get")},
    {CO_POST, "/{index}/_update/{id}", co_h_update,
     P_WRITE ",retry_on_conflict,_source,_source_includes,_source_excludes,lang", false,
     WRITE("indices:data/write/update")},
    {CO_PUT, "/{index}", co_h_index_put,
     "wait_for_active_shards,timeout,master_timeout,include_type_name", false,
     ADMIN("indices:admin/create")},
    {CO_DELETE, "/{index}", co_h_index_delete, P_INDEX_READ ",timeout,master_timeout", false,
     ADMIN("indices:admin/delete")},
    {CO_HEAD, "/{index}", co_h_index_head,
     P_INDEX_READ ",local,include_defaults,flat_settings,include_type_name", false,
     READ("indices:admin/get")},
    {CO_GET, "/{index}", co_h_index_get,
     P_INDEX_READ ",local,include_defaults,flat_settings,include_type_name,master_timeout", false,
     READ("indices:admin/get")},
};

const co_route *
co_routes(size_t *n)
{
	*n = sizeof(routes) / sizeof(routes[0]);
	return routes;
}

static const char *
method_name(co_method m)
{
	static const char *names[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OTHER"};
	return names[m];
}

/* Does the path match the pattern's segments (placeholders match any
 * non-empty segment)? */
static bool
route_match(const char *pattern, co_req *r)
{
	int i = 0;
	const char *p = pattern;

	if (strcmp(pattern, "/") == 0)
		return r->nsegs == 0;
	while (*p == '/') {
		const char *s = p + 1, *e = strchr(s, '/');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		if (i >= r->nsegs)
			return false;
		/* compared in place: the request's segment is the pattern's n bytes */
		if (*s != '{' && (strncmp(s, r->segs[i], n) != 0 || r->segs[i][n] != 0))
			return false;
		i++;
		p = s + n;
	}
	return i == r->nsegs;
}

static bool
list_has(const char *list, const char *key)
{
	size_t kl = strlen(key);
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == kl && memcmp(p, key, n) == 0)
			return true;
		p = e ? e + 1 : NULL;
	}
	return false;
}

/* ---- request accessors ---- */

const char *
co_param_get(co_req *r, const char *key)
{
	for (int i = 0; i < r->nparams; i++)
		if (strcmp(r->params[i].key, key) == 0) {
			r->params[i].used = true;
			return r->params[i].value ? r->params[i].value : "";
		}
	return NULL;
}

bool
co_param_bool(co_req *r, const char *key, bool dflt)
{
	const char *v = co_param_get(r, key);
	if (!v)
		return dflt;
	return *v == 0 || strcmp(v, "true") == 0;
}

bool
co_param_flag(co_req *r, const char *key, bool dflt, bool *out)
{
	const char *v = co_param_get(r, key);
	*out = dflt;
	if (!v)
		return true;
	if (*v == 0 || strcmp(v, "true") == 0 || strcmp(v, "false") == 0) {
		*out = strcmp(v, "false") != 0;
		return true;
	}
	co_reply_errorf(r, CM_EINVAL, NULL,
	                "Failed to parse value [%s] as only [true] or [false] are allowed.", v);
	return false;
}

bool
co_health_waits_parse(co_req *r, co_health_waits *w)
{
	memset(w, 0, sizeof(*w));
	if (!co_param_flag(r, "wait_for_no_relocating_shards", false, &w->no_relocating) ||
	    !co_param_flag(r, "wait_for_no_initializing_shards", false, &w->no_initializing))
		return false;
	const char *wn = co_param_get(r, "wait_for_nodes");
	if (wn && *wn) {
		const char *p = wn;
		size_t k = 0;
		while (k < 2 && (*p == '>' || *p == '<' || *p == '='))
			w->nodes_op[k++] = *p++;
		w->nodes_op[k] = 0;
		bool fn = false;
		if (!strncmp(p, "ge(", 3) || !strncmp(p, "le(", 3) || !strncmp(p, "gt(", 3) ||
		    !strncmp(p, "lt(", 3)) {
			snprintf(w->nodes_op, sizeof(w->nodes_op), "%s",
			         p[0] == 'g' ? (p[1] == 'e' ? ">=" : ">") : (p[1] == 'e' ? "<=" : "<"));
			p += 3;
			fn = true;
		}
		char *end;
		w->nodes = strtol(p, &end, 10);
		if (fn && *end == ')')
			end++;
		if (end == p || *end || w->nodes < 0 ||
		    (w->nodes_op[0] && strcmp(w->nodes_op, ">=") && strcmp(w->nodes_op, "<=") &&
		     strcmp(w->nodes_op, ">") && strcmp(w->nodes_op, "<"))) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "failed to parse value [%s] for wait_for_nodes", wn);
			return false;
		}
		if (!w->nodes_op[0])
			snprintf(w->nodes_op, sizeof(w->nodes_op), "==");
	}
	const char *wa = co_param_get(r, "wait_for_active_shards");
	if (wa && strcmp(wa, "all") == 0) {
		w->active = -1;
	} else if (wa && *wa) {
		char *end;
		w->active = strtol(wa, &end, 10);
		if (*end || end == wa || w->active < 0) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "failed to parse value [%s] for wait_for_active_shards", wa);
			return false;
		}
	}
	return true;
}

bool
co_health_waits_met(const co_health_waits *w, int nodes, long active, long initializing,
                    long unassigned, long relocating)
{
	const char *op = w->nodes_op;
	if (*op && !(!strcmp(op, ">=")  ? nodes >= w->nodes
	             : !strcmp(op, "<=") ? nodes <= w->nodes
	             : !strcmp(op, ">")  ? nodes > w->nodes
	             : !strcmp(op, "<")  ? nodes < w->nodes
	                                 : nodes == w->nodes))
		return false;
	if (w->no_relocating && relocating)
		return false;
	if (w->no_initializing && initializing)
		return false;
	long need = w->active < 0 ? active + initializing + unassigned : w->active;
	return active >= need;
}

const char *
co_seg(co_req *r, int i)
{
	return i < r->nsegs ? r->segs[i] : NULL;
}

cJSON *
co_body_json(co_req *r, bool *bad)
{
	cJSON *j;
	const char *end = NULL;
	size_t i = 0;

	*bad = false;
	while (i < r->body.len && r->body.data[i] && strchr(" \t\r\n", r->body.data[i]))
		i++;
	if (i == r->body.len)
		return NULL;
	char why[160];
	if (!co_json_guard((const char *)r->body.data, r->body.len, why, sizeof(why))) {
		co_reply_errorf(r, CM_EPARSE, "parse_exception", "Failed to parse request body: %s", why);
		*bad = true;
		return NULL;
	}
	j = cJSON_ParseWithLengthOpts((const char *)r->body.data, r->body.len, &end, false);
	if (!j) {
		size_t off = end ? (size_t)(end - (const char *)r->body.data) : 0;
		co_reply_errorf(r, CM_EPARSE, "parse_exception",
		                "Failed to parse request body: malformed JSON near byte %zu", off);
		*bad = true;
		return NULL;
	}
	/* one JSON value per body: trailing bytes are an error, as in ES */
	for (size_t k = end ? (size_t)(end - (const char *)r->body.data) : r->body.len;
	     k < r->body.len; k++)
		if (!strchr(" \t\r\n", r->body.data[k]) || !r->body.data[k]) {
			cJSON_Delete(j);
			co_reply_errorf(r, CM_EPARSE, "parse_exception",
			                "Failed to parse request body: unexpected content after the JSON "
			                "value at byte %zu",
			                k);
			*bad = true;
			return NULL;
		}
	return j;
}

/* ---- replies ---- */

static void
pretty_rec(const cJSON *j, int depth, cm_buf *out)
{
	const cJSON *c;
	if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
		bool obj = cJSON_IsObject(j);
		if (!j->child) {
			cm_buf_put(out, obj ? "{ }" : "[ ]", 3);
			return;
		}
		cm_buf_put(out, obj ? "{\n" : "[\n", 2);
		for (c = j->child; c; c = c->next) {
			for (int i = 0; i <= depth; i++)
				cm_buf_put(out, "  ", 2);
			if (obj) {
				cJSON tmp;
				char *k;
				memset(&tmp, 0, sizeof(tmp));
				tmp.type = cJSON_String;
				tmp.valuestring = c->string;
				k = cJSON_PrintUnformatted(&tmp);
				cm_buf_printf(out, "%s : ", k);
				cJSON_free(k);
			}
			pretty_rec(c, depth + 1, out);
			cm_buf_put(out, c->next ? ",\n" : "\n", c->next ? 2 : 1);
		}
		for (int i = 0; i < depth; i++)
			cm_buf_put(out, "  ", 2);
		cm_buf_put_u8(out, obj ? '}' : ']');
		return;
	}
	char *s = cJSON_PrintUnformatted(j);
	if (s) {
		cm_buf_put(out, s, strlen(s));
		cJSON_free(s);
	}
}

void
co_json_pretty(const cJSON *j, cm_buf *out)
{
	pretty_rec(j, 0, out);
	cm_buf_put_u8(out, '\n');
}

/* ---- filter_path: "a.b,hits.hits._id,-_shards,**.name,*.x" ---- */

typedef struct fp_pat {
	char *segs[16];
	int n;
} fp_pat;

static bool
fp_glob(const char *pat, const char *s)
{
	if (*pat == 0)
		return *s == 0;
	if (*pat == '*') {
		for (;; s++) {
			if (fp_glob(pat + 1, s))
				return true;
			if (!*s)
				return false;
		}
	}
	return *s == *pat && fp_glob(pat + 1, s + 1);
}

/* Keeps the parts of j (an object or array) matched by the patterns, each
 * taken from offset off[i]. Returns false when nothing remains. */
static bool
fp_include(cJSON *j, fp_pat *pats, int *off, int npats)
{
	cJSON *c = j->child, *next;
	int *noff = cm_malloc(MEM, sizeof(int) * (size_t)npats * 2 + 1);
	bool any = false;

	for (; c; c = next) {
		next = c->next;
		bool whole = false, deeper = false;
		if (cJSON_IsArray(j)) {
			/* arrays are transparent: elements see the same patterns */
			if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && fp_include(c, pats, off, npats)) {
				any = true;
				continue;
			}
			cJSON_Delete(cJSON_DetachItemViaPointer(j, c));
			continue;
		}
		int *cur = noff; /* per pattern: next offset, -1 = not applicable */
		for (int i = 0; i < npats; i++) {
			int o = off[i];
			cur[i] = -1;
			if (o < 0 || o >= pats[i].n)
				continue;
			if (strcmp(pats[i].segs[o], "**") == 0) {
				/* "**" stays for deeper levels, or is consumed here */
				if (o + 1 >= pats[i].n) {
					whole = true;
					continue;
				}
				if (fp_glob(pats[i].segs[o + 1], c->string)) {
					if (o + 2 >= pats[i].n)
						whole = true;
					else {
						cur[i] = o + 2;
						deeper = true;
					}
				}
				if (cur[i] < 0) {
					cur[i] = o;
					deeper = true;
				}
				continue;
			}
			if (fp_glob(pats[i].segs[o], c->string)) {
				if (o + 1 >= pats[i].n)
					whole = true;
				else {
					cur[i] = o + 1;
					deeper = true;
				}
			}
		}
		if (whole) {
			any = true;
			continue;
		}
		if (deeper && (cJSON_IsObject(c) || cJSON_IsArray(c))) {
			int *copy = cm_malloc(MEM, sizeof(int) * (size_t)npats + 1);
			memcpy(copy, cur, sizeof(int) * (size_t)npats);
			bool kept = fp_include(c, pats, copy, npats);
			cm_free(MEM, copy);
			if (kept) {
				any = true;
				continue;
			}
		}
		cJSON_Delete(cJSON_DetachItemViaPointer(j, c));
	}
	cm_free(MEM, noff);
	return any;
}

/* Removes what an exclusion pattern names. */
static void
fp_exclude(cJSON *j, fp_pat *p, int o)
{
	cJSON *c, *next;
	if (o >= p->n)
		return;
	for (c = j->child; c; c = next) {
		next = c->next;
		if (cJSON_IsArray(j)) {
			if (cJSON_IsObject(c) || cJSON_IsArray(c))
				fp_exclude(c, p, o);
			continue;
		}
		if (strcmp(p->segs[o], "**") == 0) {
			bool next = o + 1 < p->n && fp_glob(p->segs[o + 1], c->string);
			if (next && o + 2 >= p->n) {
				cJSON_Delete(cJSON_DetachItemViaPointer(j, c));
				continue;
			}
			/* "**" ends here (the rest of the pattern below c), or goes on */
			if (next && (cJSON_IsObject(c) || cJSON_IsArray(c)))
				fp_exclude(c, p, o + 2);
			if (cJSON_IsObject(c) || cJSON_IsArray(c))
				fp_exclude(c, p, o);
			continue;
		}
		if (fp_glob(p->segs[o], c->string)) {
			if (o + 1 >= p->n)
				cJSON_Delete(cJSON_DetachItemViaPointer(j, c));
			else if (cJSON_IsObject(c) || cJSON_IsArray(c))
				fp_exclude(c, p, o + 1);
		}
	}
}

cJSON *
co_filter_path(cJSON *j, const char *filter)
{
	fp_pat inc[16], exc[16];
	int ninc = 0, nexc = 0, off[16];
	char *copy = cm_strdup(MEM, filter), *save = NULL, *tok;

	if (!cJSON_IsObject(j) && !cJSON_IsArray(j)) {
		cm_free(MEM, copy);
		return j;
	}
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		bool neg = *tok == '-';
		fp_pat *p;
		char *s2 = NULL, *seg;
		if (neg)
			tok++;
		if (!*tok)
			continue;
		if (neg ? nexc >= 16 : ninc >= 16)
			break;
		p = neg ? &exc[nexc++] : &inc[ninc++];
		p->n = 0;
		for (seg = strtok_r(tok, ".", &s2); seg && p->n < 16; seg = strtok_r(NULL, ".", &s2))
			p->segs[p->n++] = seg;
	}
	for (int i = 0; i < nexc; i++)
		fp_exclude(j, &exc[i], 0);
	if (ninc > 0) {
		for (int i = 0; i < ninc; i++)
			off[i] = 0;
		if (!fp_include(j, inc, off, ninc)) {
			/* ES answers {} when nothing matches */
			cJSON_Delete(j);
			j = cJSON_CreateObject();
		}
	}
	cm_free(MEM, copy);
	return j;
}

static void
finish_json(co_req *r, int status, cJSON *j)
{
	const char *fp = co_param_get(r, "filter_path");
	bool pretty = co_param_get(r, "pretty") != NULL && strcmp(co_param_get(r, "pretty"), "false");

	if (fp && *fp)
		j = co_filter_path(j, fp);
	cm_buf_reset(&r->out);
	if (pretty) {
		co_json_pretty(j, &r->out);
	} else {
		char *s = cJSON_PrintUnformatted(j);
		if (s) {
			cm_buf_put(&r->out, s, strlen(s));
			cJSON_free(s);
		}
	}
	cJSON_Delete(j);
	r->status = status;
	r->content_type = "application/json; charset=UTF-8";
}

void
co_reply_json(co_req *r, int status, cJSON *j)
{
	finish_json(r, status, j);
}

void
co_reply_raw_json(co_req *r, int status, const char *json, size_t len)
{
	const char *fp = co_param_get(r, "filter_path");
	const char *pv = co_param_get(r, "pretty");
	bool pretty = pv && strcmp(pv, "false");

	if ((fp && *fp) || pretty) {
		cJSON *j = cJSON_ParseWithLength(json, len);
		if (j) {
			finish_json(r, status, j);
			return;
		}
	}
	if ((const uint8_t *)json != r->out.data) {
		cm_buf_reset(&r->out);
		cm_buf_put(&r->out, json, len);
	}
	r->status = status;
	r->content_type = "application/json; charset=UTF-8";
}

void
co_reply_header(co_req *r, const char *name, const char *value)
{
	if (r->nhdr < CO_MAX_REPLY_HEADERS) {
		r->hdr_name[r->nhdr] = name;
		r->hdr_value[r->nhdr++] = value;
	}
}

void
co_reply_text(co_req *r, int status, const char *ctype, const char *text, size_t len)
{
	cm_buf_reset(&r->out);
	cm_buf_put(&r->out, text, len);
	r->status = status;
	r->content_type = ctype;
}

static cJSON *error_json_uuid(const cm_error *e, const char *index, const char *uuid);

cJSON *
co_error_json(const cm_error *e, const char *index)
{
	return error_json_uuid(e, index, "_na_");
}

static cJSON *
error_json_uuid(const cm_error *e, const char *index, const char *uuid)
{
	cJSON *err = cJSON_CreateObject(), *rc = cJSON_AddArrayToObject(err, "root_cause");
	cJSON *cause = cJSON_CreateObject();
	const char *type = cm_error_type(e);
	const char *reason = e->reason[0] ? e->reason : cm_err_msg(e->code);

	for (int pass = 0; pass < 2; pass++) {
		cJSON *o = pass == 0 ? cause : err;
		cJSON_AddStringToObject(o, "type", type);
		cJSON_AddStringToObject(o, "reason", reason);
		if (e->code == CM_ENOINDEX && index) {
			cJSON_AddStringToObject(o, "resource.type", "index_or_alias");
			cJSON_AddStringToObject(o, "resource.id", index);
		}
		if (index) {
			cJSON_AddStringToObject(o, "index_uuid", uuid);
			cJSON_AddStringToObject(o, "index", index);
		}
	}
	cJSON_AddItemToArray(rc, cause);
	return err;
}

cJSON *
co_error_doc(const cm_error *e, const char *index)
{
	cJSON *doc = cJSON_CreateObject();
	cJSON_AddItemToObject(doc, "error", co_error_json(e, index));
	cJSON_AddNumberToObject(doc, "status", cm_err_status(e->code));
	return doc;
}

void
co_reply_error(co_req *r, const cm_error *e, const char *index)
{
	cm_error tmp = *e;
	char uuid[32] = "_na_";
	cJSON *doc;

	if (tmp.code == CM_OK)
		tmp.code = CM_EINTERNAL;
	if (index && tmp.code != CM_ENOINDEX && tmp.code != CM_EBADNAME) {
		/* errors about an existing index carry its uuid, as in ES */
		nd_index *ix = nd_index_get(r->node, index);
		if (ix) {
			snprintf(uuid, sizeof(uuid), "%s", nd_index_uuid(ix));
			nd_index_release(ix);
		}
	}
	doc = cJSON_CreateObject();
	cJSON_AddItemToObject(doc, "error", error_json_uuid(&tmp, index, uuid));
	cJSON_AddNumberToObject(doc, "status", cm_err_status(tmp.code));
	finish_json(r, cm_err_status(tmp.code), doc);
}

void
co_reply_errorf(co_req *r, cm_err code, const char *type, const char *fmt, ...)
{
	cm_error e;
	va_list ap;
	cm_error_clear(&e);
	e.code = code;
	if (type)
		snprintf(e.type_override, sizeof(e.type_override), "%s", type);
	va_start(ap, fmt);
	vsnprintf(e.reason, sizeof(e.reason), fmt, ap);
	va_end(ap);
	co_reply_error(r, &e, NULL);
}

cJSON *
co_shards_json(int total, int successful, int failed)
{
	cJSON *s = cJSON_CreateObject();
	cJSON_AddNumberToObject(s, "total", total);
	cJSON_AddNumberToObject(s, "successful", successful);
	cJSON_AddNumberToObject(s, "failed", failed);
	return s;
}

/* ---- dispatch ---- */

static void
reply_simple_error(co_req *r, int status, const char *msg)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "error", msg);
	cJSON_AddNumberToObject(j, "status", status);
	finish_json(r, status, j);
}

/* Picks the route; replies 405/400 itself when none fits. */
static void
route_request(co_req *r)
{
	char allowed[128] = "";
	const co_route *get_route = NULL;
	if (r->nsegs > 0 && strchr(r->segs[0], '<')) {
		/* a date-math index name: the route sees the name it stands for */
		char *name;
		cm_error err;
		cm_error_clear(&err);
		if (co_date_math_names(r->segs[0], &name, &err)) {
			co_reply_error(r, &err, NULL);
			r->failed = true;
			return;
		}
		cm_free(MEM, r->segs[0]);
		r->segs[0] = name;
	}
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (!route_match(routes[i].pattern, r))
			continue;
		if (routes[i].method == r->method) {
			r->route = &routes[i];
			return;
		}
		if (routes[i].method == CO_GET && !get_route)
			get_route = &routes[i];
		if (!strstr(allowed, method_name(routes[i].method))) {
			size_t l = strlen(allowed);
			snprintf(allowed + l, sizeof(allowed) - l, "%s%s", l ? "," : "",
			         method_name(routes[i].method));
		}
	}
	if (r->method == CO_HEAD && get_route) {
		/* HEAD is GET without the body (MHD drops it) */
		r->route = get_route;
		return;
	}
	char msg[600];
	if (allowed[0]) {
		snprintf(msg, sizeof(msg),
		         "Incorrect HTTP method for uri [%.400s] and method [%s], allowed: [%s]", r->path,
		         method_name(r->method), allowed);
		reply_simple_error(r, 405, msg);
	} else {
		snprintf(msg, sizeof(msg), "no handler found for uri [%.400s] and method [%s]", r->path,
		         method_name(r->method));
		reply_simple_error(r, 400, msg);
	}
	r->failed = true;
}

/* Unknown URL parameters are rejected like ES does. */
static bool
check_params(co_req *r)
{
	char bad[1000] = "";
	int nbad = 0;
	if (r->too_many_params) {
		co_reply_errorf(r, CM_EINVAL, NULL, "request [%.300s] has more than %d URL parameters",
		                r->path, CO_MAX_PARAMS);
		return false;
	}
	for (int i = 0; i < r->nparams; i++) {
		const char *k = r->params[i].key;
		if (list_has(global_params, k) || list_has(r->route->params, k))
			continue;
		size_t l = strlen(bad);
		char dym[160], known[4096];
		snprintf(known, sizeof known, "%s,%s", global_params,
		         r->route->params ? r->route->params : "");
		bool any = cm_did_you_mean(k, known, dym, sizeof dym);
		snprintf(bad + l, sizeof(bad) - l, "%s[%.60s]%s%s%s", nbad ? ", " : "", k,
		         any ? " -> did you mean " : "", dym, any ? "?" : "");
		nbad++;
	}
	if (!nbad) {
		const char *f = co_param_get(r, "format");
		if (f && strcmp(f, "json") &&
		    !(strncmp(r->path, "/_cat", 5) == 0 &&
		      (strcmp(f, "text") == 0 || strcmp(f, "txt") == 0 ||
		       strcmp(f, "yaml") == 0))) {
			co_reply_errorf(r, CM_EINVAL, NULL, "unsupported format [%.60s]", f);
			return false;
		}
		return true;
	}
	co_reply_errorf(r, CM_EINVAL, NULL, "request [%.300s] contains unrecognized parameter%s: %s",
	                r->path, nbad > 1 ? "s" : "", bad);
	return false;
}

/* %XX decoding (and '+' as a space in query strings, as ES decodes
 * them); in place, returns the new length. */
static size_t
url_decode(char *s, size_t n, bool plus_space)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) &&
		    isxdigit((unsigned char)s[i + 2])) {
			char hex[3] = {s[i + 1], s[i + 2], 0};
			c = (char)strtol(hex, NULL, 16);
			i += 2;
		} else if (c == '+' && plus_space) {
			c = ' ';
		}
		s[o++] = c;
	}
	s[o] = 0;
	return o;
}

/* MHD would decode the whole path before we split it, turning an id's
 * "%2F" into a separator; we decode each segment after splitting. */
static size_t
unescape_none(void *cls, struct MHD_Connection *c, char *s)
{
	return strlen(s);
}

static enum MHD_Result
collect_param(void *cls, enum MHD_ValueKind kind, const char *key, size_t klen,
              const char *value, size_t vlen)
{
	co_req *r = cls;
	if (r->nparams >= CO_MAX_PARAMS) {
		r->too_many_params = true;
		return MHD_NO;
	}
	co_param *p = &r->params[r->nparams++];
	p->key = cm_strndup(MEM, key, klen);
	url_decode(p->key, klen, true);
	p->value = value ? cm_strndup(MEM, value, vlen) : NULL;
	if (p->value)
		url_decode(p->value, vlen, true);
	return MHD_YES;
}

static co_req *
req_new(co_server *s, struct MHD_Connection *c, const char *url, const char *method)
{
	co_req *r = cm_calloc(MEM, 1, sizeof(*r));
	char *save = NULL, *tok, *copy;
	const char *ce;

	r->node = s->node;
	r->server = s;
	r->start_ns = cm_now_ns();
	r->status = 200;
	r->max_body = s->opts.max_content_length;
	r->auth = s->opts.auth;
	cm_buf_init(&r->body, MEM);
	cm_buf_init(&r->out, MEM);
	if (strcmp(method, "GET") == 0)
		r->method = CO_GET;
	else if (strcmp(method, "HEAD") == 0)
		r->method = CO_HEAD;
	else if (strcmp(method, "POST") == 0)
		r->method = CO_POST;
	else if (strcmp(method, "PUT") == 0)
		r->method = CO_PUT;
	else if (strcmp(method, "DELETE") == 0)
		r->method = CO_DELETE;
	else
		r->method = CO_OTHER;
	r->path = cm_strdup(MEM, url);
	copy = cm_strdup(MEM, url);
	for (tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (r->nsegs >= CO_MAX_SEGS) {
			r->nsegs = CO_MAX_SEGS + 1;
			break;
		}
		r->segs[r->nsegs] = cm_strdup(MEM, tok);
		url_decode(r->segs[r->nsegs], strlen(tok), false);
		r->nsegs++;
	}
	cm_free(MEM, copy);
	if (r->nsegs > CO_MAX_SEGS)
		r->nsegs = CO_MAX_SEGS; /* too deep: no route matches a full list */
	MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, collect_param, r);
	ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
	if (ce)
		r->if_none_match = cm_strdup(MEM, ce);
	ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
	if (ce && (strcasecmp(ce, "gzip") == 0 || strcasecmp(ce, "deflate") == 0)) {
		r->gzip = true;
		memset(&r->z, 0, sizeof(r->z));
		/* 32 + MAX_WBITS: zlib detects gzip or zlib headers itself */
		if (inflateInit2(&r->z, 32 + MAX_WBITS) == Z_OK)
			r->z_init = true;
	}
	return r;
}

static void
req_free(co_req *r)
{
	if (r->stream)
		co_bulk_free(r->stream);
	if (r->z_init)
		inflateEnd(&r->z);
	for (int i = 0; i < r->nsegs; i++)
		cm_free(MEM, r->segs[i]);
	for (int i = 0; i < r->nparams; i++) {
		cm_free(MEM, r->params[i].key);
		cm_free(MEM, r->params[i].value);
	}
	cm_free(MEM, r->path);
	cm_free(MEM, r->if_none_match);
	cm_buf_free(&r->body);
	cm_buf_free(&r->out);
	cm_free(MEM, r);
}

static void
too_large(co_req *r)
{
	if (r->failed)
		return;
	co_reply_errorf(r, CM_ETOOLARGE, NULL,
	                "Request body exceeds http.max_content_length [%llu bytes]",
	                (unsigned long long)r->max_body);
	r->failed = true;
}

/* Decompressed body bytes: into the stream, or the buffer (bounded). */
static void
body_bytes(co_req *r, const char *data, size_t len)
{
	if (r->failed)
		return;
	if (r->stream) {
		if (!co_bulk_feed(r->stream, data, len))
			r->failed = true;
		return;
	}
	if (r->body.len + len > r->max_body) {
		too_large(r);
		return;
	}
	cm_buf_put(&r->body, data, len);
}

static void
body_chunk(co_req *r, const char *data, size_t len)
{
	r->raw_bytes += len;
	if (r->raw_bytes > r->max_body) {
		too_large(r);
		return;
	}
	if (!r->gzip) {
		body_bytes(r, data, len);
		return;
	}
	if (!r->z_init) {
		co_reply_errorf(r, CM_EPARSE, NULL, "cannot decompress the request body");
		r->failed = true;
		return;
	}
	char out[65536];
	r->z.next_in = (Bytef *)data;
	r->z.avail_in = (uInt)len;
	while (r->z.avail_in > 0 && !r->failed) {
		r->z.next_out = (Bytef *)out;
		r->z.avail_out = sizeof(out);
		int zr = inflate(&r->z, Z_NO_FLUSH);
		if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
			co_reply_errorf(r, CM_EPARSE, NULL, "malformed gzip request body");
			r->failed = true;
			return;
		}
		body_bytes(r, out, sizeof(out) - r->z.avail_out);
		if (zr == Z_STREAM_END) {
			/* concatenated gzip members are legal */
			if (r->z.avail_in > 0)
				inflateReset(&r->z);
			else
				break;
		}
		if (zr == Z_BUF_ERROR && r->z.avail_out != 0)
			break;
	}
}

static void
free_out(void *p)
{
	cm_free(MEM, p);
}

static enum MHD_Result
send_reply(struct MHD_Connection *c, co_req *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	size_t len = r->out.len;
	void *data = r->out.data;

	/* hand the buffer to MHD, freed through our allocator */
	r->out.data = NULL;
	r->out.len = r->out.cap = 0;
	if (!data) {
		data = cm_malloc(MEM, 1);
		len = 0;
	}
	resp = MHD_create_response_from_buffer_with_free_callback(len, data, free_out);
	if (!resp) {
		cm_free(MEM, data);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "content-type",
	                        co_media_reply_type(r->compat, r->content_type
	                                                           ? r->content_type
	                                                           : "application/json; charset=UTF-8"));
	/* Elasticsearch clients 7.14+ check this header on every reply. */
	MHD_add_response_header(resp, "X-elastic-product", "Elasticsearch");
	if (r->www_authenticate) {
		MHD_add_response_header(resp, "WWW-Authenticate",
		                        "Basic realm=\"security\" charset=\"UTF-8\"");
		MHD_add_response_header(resp, "WWW-Authenticate", "ApiKey");
	}
	for (int i = 0; i < r->nhdr; i++)
		MHD_add_response_header(resp, r->hdr_name[i], r->hdr_value[i]);
	if (r->close_conn)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	ret = MHD_queue_response(c, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	r->replied = true;
	return ret;
}

static void
run_handler(co_req *r)
{
	if (r->route->stream) {
		co_bulk_end(r->stream);
		return;
	}
	r->route->handler(r);
}

/* ---- limits on the request head (Elasticsearch's names and statuses) ---- */

#define CO_MAX_INITIAL_LINE 4096   /* http.max_initial_line_length */
#define CO_MAX_HEADER_SIZE 8192    /* http.max_header_size */
#define CO_HTTP_IDLE_TIMEOUT_S 10  /* a peer silent this long is dropped, in any phase */
#define CO_HTTP_MAX_CONNECTIONS 1000 /* http.max_open_connections default */
#define CO_HTTP_HEADER_TIMEOUT_NS 10000000000ull /* http.header_timeout default */
#define CO_HTTP_BODY_TIMEOUT_NS 60000000000ull   /* http.body_timeout default */

static void
reply_status_error(co_req *r, int status, const char *type, const char *reason)
{
	cJSON *doc = cJSON_CreateObject(), *e = cJSON_CreateObject(), *rc = cJSON_CreateArray();
	cJSON *one = cJSON_CreateObject();
	cJSON_AddStringToObject(one, "type", type);
	cJSON_AddStringToObject(one, "reason", reason);
	cJSON_AddItemToArray(rc, one);
	cJSON_AddItemToObject(e, "root_cause", rc);
	cJSON_AddStringToObject(e, "type", type);
	cJSON_AddStringToObject(e, "reason", reason);
	cJSON_AddItemToObject(doc, "error", e);
	cJSON_AddNumberToObject(doc, "status", status);
	finish_json(r, status, doc);
}

static enum MHD_Result
sum_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t klen, const char *value,
           size_t vlen)
{
	*(size_t *)cls += klen + vlen + 4; /* "k: v\r\n" */
	return MHD_YES;
}

/* Refuses what no handler should see: an over-long request line, too many
 * header bytes, path segments or parameters that are not UTF-8 (they end
 * up in index names, file names and JSON replies). */
static bool
head_ok(struct MHD_Connection *c, co_req *r, const char *url)
{
	size_t line = strlen(url) + 16, hdr = 0;

	for (int i = 0; i < r->nparams; i++)
		line += strlen(r->params[i].key) + 2 + (r->params[i].value ? strlen(r->params[i].value) : 0);
	if (line > CO_MAX_INITIAL_LINE) {
		reply_status_error(r, 414, "too_long_http_line_exception",
		                   "An HTTP line is larger than 4096 bytes.");
		return false;
	}
	MHD_get_connection_values_n(c, MHD_HEADER_KIND, sum_header, &hdr);
	if (hdr > CO_MAX_HEADER_SIZE) {
		reply_status_error(r, 431, "too_long_http_header_exception",
		                   "HTTP header is larger than 8192 bytes.");
		return false;
	}
	for (int i = 0; i < r->nsegs; i++)
		if (!co_utf8_valid((const unsigned char *)r->segs[i], strlen(r->segs[i]), NULL) ||
		    r->segs[i][0] == 0 || strcasestr(url, "%00")) {
			reply_status_error(r, 400, "illegal_argument_exception",
			                   "the request path is not valid UTF-8 (or holds a NUL byte)");
			return false;
		}
	for (int i = 0; i < r->nparams; i++)
		if (!co_utf8_valid((const unsigned char *)r->params[i].key, strlen(r->params[i].key), NULL) ||
		    (r->params[i].value && !co_utf8_valid((const unsigned char *)r->params[i].value,
		                                          strlen(r->params[i].value), NULL))) {
			reply_status_error(r, 400, "illegal_argument_exception",
			                   "a request parameter is not valid UTF-8");
			return false;
		}
	return true;
}

/* Accept and Content-Type asking for a compatible version (co_media.c):
 * false (a 400 decided) when they are invalid, as Elasticsearch 8 answers. */
static bool
media_ok(struct MHD_Connection *c, co_req *r)
{
	const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
	const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	bool body = (cl && strtoull(cl, NULL, 10) > 0) ||
	            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
	char why[700];
	int v = co_media_compat(accept, ctype, body, why, sizeof(why));
	if (v >= 0) {
		r->compat = v;
		r->accept_yaml = accept && strstr(accept, "yaml");
		return true;
	}
	static const char reason[] = "Invalid media-type value on headers [Accept, Content-Type]";
	cJSON *doc = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(doc, "error");
	cJSON *one = cJSON_CreateObject(), *cause;
	cJSON_AddStringToObject(one, "type", "media_type_header_exception");
	cJSON_AddStringToObject(one, "reason", reason);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(e, "root_cause"), one);
	cJSON_AddStringToObject(e, "type", "media_type_header_exception");
	cJSON_AddStringToObject(e, "reason", reason);
	cause = cJSON_AddObjectToObject(e, "caused_by");
	cJSON_AddStringToObject(cause, "type", "status_exception");
	cJSON_AddStringToObject(cause, "reason", why);
	cJSON_AddNumberToObject(doc, "status", 400);
	finish_json(r, 400, doc);
	return false;
}

/* ---- security: connection limit, authentication, roles ---- */

/* A security_exception document; a 401 carries the challenge as ES does,
 * in the body and in the WWW-Authenticate headers. */
static void
security_fields(cJSON *o, int status, const char *reason)
{
	cJSON_AddStringToObject(o, "type", "security_exception");
	cJSON_AddStringToObject(o, "reason", reason);
	if (status == 401) {
		cJSON *w = cJSON_AddArrayToObject(cJSON_AddObjectToObject(o, "header"), "WWW-Authenticate");
		cJSON_AddItemToArray(w, cJSON_CreateString("Basic realm=\"security\" charset=\"UTF-8\""));
		cJSON_AddItemToArray(w, cJSON_CreateString("ApiKey"));
	}
}

static void
reply_security_error(co_req *r, int status, const char *reason)
{
	cJSON *doc = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(doc, "error");
	cJSON *cause = cJSON_CreateObject();
	security_fields(cause, status, reason);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(e, "root_cause"), cause);
	security_fields(e, status, reason);
	cJSON_AddNumberToObject(doc, "status", status);
	r->www_authenticate = status == 401;
	finish_json(r, status, doc);
}

/* Who is asking: false (a 401 decided) when users are configured and the
 * request carries no valid credentials. Never logs a credential. */
static bool
authenticate(co_req *r, struct MHD_Connection *c)
{
	char who[CO_AUTH_MAX_NAME + 1], reason[700];
	const char *h;

	if (!r->auth)
		return true;
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	switch (co_auth_check(r->auth, h, &r->principal, who, sizeof(who))) {
	case CO_AUTH_OK:
		return true;
	case CO_AUTH_MISSING:
		snprintf(reason, sizeof(reason),
		         "missing authentication credentials for REST request [%.400s]", r->path);
		break;
	case CO_AUTH_BAD_USER:
		/* echoed into JSON: only a name that is valid UTF-8 */
		if (who[0] && co_utf8_valid((const unsigned char *)who, strlen(who), NULL))
			snprintf(reason, sizeof(reason),
			         "unable to authenticate user [%.200s] for REST request [%.400s]", who,
			         r->path);
		else
			snprintf(reason, sizeof(reason),
			         "unable to authenticate with provided credentials for REST request "
			         "[%.400s]",
			         r->path);
		break;
	case CO_AUTH_BAD_KEY:
		snprintf(reason, sizeof(reason),
		         "unable to authenticate with provided API key for REST request [%.400s]",
		         r->path);
		break;
	}
	reply_security_error(r, 401, reason);
	return false;
}

/* The route's role against the caller's; false (a 403 decided) when short. */
static bool
authorize(co_req *r)
{
	char reason[800];
	co_role need;

	if (!r->auth)
		return true;
	/* a route without a role fails closed */
	need = r->route->role == CO_ROLE_UNSET ? CO_ROLE_ADMIN : r->route->role;
	if (r->principal.role >= need)
		return true;
	const char *action = r->route->action ? r->route->action : "unknown";
	if (r->principal.api_key)
		snprintf(reason, sizeof(reason),
		         "action [%s] is unauthorized for API key id [%s] of user [%.200s]", action,
		         r->principal.key_id, r->principal.user);
	else
		snprintf(reason, sizeof(reason), "action [%s] is unauthorized for user [%.200s]",
		         action, r->principal.user);
	reply_security_error(r, 403, reason);
	return false;
}

/* The registry's record of c (MHD's socket context), or NULL. */
static co_conn *
conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

static void
reply_too_many_connections(co_req *r, int limit)
{
	char reason[200];
	snprintf(reason, sizeof(reason),
	         "too many connections: http.max_open_connections [%d] reached; retry later", limit);
	reply_status_error(r, 429, "es_rejected_execution_exception", reason);
	r->close_conn = true;
	r->failed = true;
}

static enum MHD_Result access_cb_run(void *cls, struct MHD_Connection *c, const char *url,
                                     const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **con_cls);

/* A write's ?timeout bounds its cluster writes (the wait for a primary and
 * its replicas), whichever callback of the request makes them: the bulk
 * body is applied chunk by chunk as it arrives. The body deadline counts
 * only the time between callbacks, waiting for the client. */
static enum MHD_Result
access_cb(void *cls, struct MHD_Connection *c, const char *url, const char *method,
          const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	co_server *s = cls;
	co_req *r = *con_cls;
	co_conn *k = conn_of(c);
	co_conn_busy(s->conns, k);
	enum MHD_Result ret =
	    access_cb_run(cls, c, url, method, version, upload_data, upload_data_size, con_cls);
	r = *con_cls;
	if (ret == MHD_YES && r && !r->replied)
		co_conn_wait_body(s->conns, k); /* more body (or its end) to come */
	return ret;
}

static enum MHD_Result
access_cb_run(void *cls, struct MHD_Connection *c, const char *url, const char *method,
              const char *version, const char *upload_data, size_t *upload_data_size,
              void **con_cls)
{
	co_server *s = cls;
	co_req *r = *con_cls;

	if (!r) {
		const char *cl;
		r = req_new(s, c, url, method);
		*con_cls = r;
		atomic_fetch_add((_Atomic uint64_t *)&nd_counters(s->node)->http_requests, 1);
		if (!co_conn_admit(s->conns, conn_of(c))) {
			/* past the limit with no slot to free: answered at once,
			 * before reading any body */
			reply_too_many_connections(r, s->opts.max_open_connections);
			return send_reply(c, r);
		}
		if (!head_ok(c, r, url) || !media_ok(c, r))
			r->failed = true;
		else if (!authenticate(r, c))
			r->failed = true;
		else
			route_request(r);
		if (!r->failed && !authorize(r))
			r->failed = true;
		if (!r->failed && !check_params(r))
			r->failed = true;
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > r->max_body)
			too_large(r);
		if (r->failed && r->status == 413)
			return send_reply(c, r); /* don't read a body we refuse */
		if (!r->failed && r->method != CO_GET && r->method != CO_HEAD) {
			const char *to = co_param_get(r, "timeout");
			uint64_t ns = 0;
			cm_error terr;
			cm_error_clear(&terr);
			if (to && sr_parse_time_value(to, "timeout", &ns, &terr) == CM_OK && ns)
				r->write_deadline_ns = r->start_ns + ns;
		}
		if (!r->failed && r->route->stream)
			r->stream = co_bulk_begin(r);
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		body_chunk(r, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (!r->failed)
		run_handler(r);
	return send_reply(c, r);
}

static void
connection_cb(void *cls, struct MHD_Connection *c, void **socket_context,
              enum MHD_ConnectionNotificationCode toe)
{
	co_server *s = cls;
	nd_node_counters *nc = nd_counters(s->node);
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		atomic_fetch_add((_Atomic uint64_t *)&nc->http_open, 1);
		atomic_fetch_add((_Atomic uint64_t *)&nc->http_opened, 1);
		*socket_context = ci ? co_conn_opened(s->conns, ci->connect_fd) : NULL;
	} else {
		atomic_fetch_sub((_Atomic uint64_t *)&nc->http_open, 1);
		/* MHD closes the socket only after this returns */
		co_conn_closed(s->conns, *socket_context);
		*socket_context = NULL;
	}
}

static void
completed_cb(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	co_server *s = cls;
	co_req *r = *con_cls;
	co_conn_request_done(s->conns, conn_of(c));
	if (r) {
		if (r->route && r->status < 500)
			cm_debug("http", "%s %s %d %.2fms%s%s%s", method_name(r->method), r->path,
			         r->status, (cm_now_ns() - r->start_ns) / 1e6,
			         r->principal.user[0] ? " user [" : "", r->principal.user,
			         r->principal.user[0] ? "]" : "");
		req_free(r);
	}
	*con_cls = NULL;
}

/* What _nodes reports as this node's HTTP address (one server a process). */
static char publish_address[64] = "127.0.0.1:9200";
static _Atomic uint64_t max_content = 100ull << 20;

const char *
co_http_publish_address(void)
{
	return publish_address;
}

uint64_t
co_http_max_content(void)
{
	return atomic_load(&max_content);
}

cm_err
co_server_start(nd_node *n, const co_opts *o, co_server **out, cm_error *err)
{
	co_server *s = cm_calloc(MEM, 1, sizeof(*s));
	struct sockaddr_in addr;
	int threads = o->threads > 0 ? o->threads : 8;

	s->node = n;
	s->opts = *o;
	if (!s->opts.max_content_length)
		s->opts.max_content_length = 100ull << 20;
	if (s->opts.max_open_connections <= 0)
		s->opts.max_open_connections = CO_HTTP_MAX_CONNECTIONS;
	/* MHD's own limit sits above ours: between the two, clients get a 429
	 * with a body instead of a silently closed socket */
	unsigned hard = (unsigned)s->opts.max_open_connections +
	                (unsigned)(s->opts.max_open_connections / 4 > 64 ? s->opts.max_open_connections / 4
	                                                                 : 64);
	co_conns_opts ko = {
	    .soft_limit = s->opts.max_open_connections,
	    .hard_limit = (int)hard,
	    .header_ns =
	        s->opts.header_timeout_ns ? s->opts.header_timeout_ns : CO_HTTP_HEADER_TIMEOUT_NS,
	    .body_ns = s->opts.body_timeout_ns ? s->opts.body_timeout_ns : CO_HTTP_BODY_TIMEOUT_NS,
	};
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)o->port);
	if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
		cm_free(MEM, s);
		return cm_error_set(err, CM_EINVAL, "bad HTTP host [%s] (an IPv4 address)", o->host);
	}
	cm_err rc = co_conns_start(&ko, &s->conns, err);
	if (rc) {
		cm_free(MEM, s);
		return rc;
	}
	s->d = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, (uint16_t)o->port,
	                        NULL, NULL, access_cb, s, MHD_OPTION_SOCK_ADDR, &addr,
	                        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads,
	                        MHD_OPTION_NOTIFY_COMPLETED, completed_cb, s,
	                        MHD_OPTION_NOTIFY_CONNECTION, connection_cb, s,
	                        MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, s,
	                        /* a client silent for 10 s is dropped in any phase
	                         * (co_conn.c adds total deadlines on the head and
	                         * the body, which trickled bytes do not extend);
	                         * past the soft limit requests get 429 unless a
	                         * slow connection can be closed to make room, past
	                         * the hard one MHD stops accepting */
	                        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CO_HTTP_IDLE_TIMEOUT_S,
	                        MHD_OPTION_CONNECTION_LIMIT, hard,
	                        /* the pool holds the request head (at most 5 KB
	                         * of request line, 9 KB of headers: co_conn.c)
	                         * and MHD's read and write buffers; bodies are
	                         * copied out as they arrive. MHD zeroes the
	                         * whole pool between requests, which at 256 KB
	                         * was 4% of a W1 query's CPU. */
	                        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
	                        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
	if (!s->d) {
		co_conns_stop(s->conns);
		cm_free(MEM, s);
		return cm_error_set(err, CM_EIO, "cannot listen on %s:%d (address in use?)", o->host,
		                    o->port);
	}
	snprintf(publish_address, sizeof(publish_address), "%s:%d", o->host, o->port);
	atomic_store(&max_content, s->opts.max_content_length);
	*out = s;
	return CM_OK;
}

void
co_server_stop(co_server *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->d);
	co_conns_stop(s->conns);
	cm_free(MEM, s);
}
