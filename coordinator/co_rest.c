/* Cluster, _cat, stats and index-management endpoints. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "../node/nd_snap.h"
#include "co_private.h"
#include "co_snapshot.h"

#define MEM CM_MEM_COORDINATOR

static uint64_t
ld(const uint64_t *p)
{
	return atomic_load((_Atomic uint64_t *)p);
}

/* expand_wildcards (open, closed, hidden, none, all; default `dflt`) and
 * allow_no_indices as nd_resolve_ex flags; false (a 400 replied) when
 * a value is not one of them. */
static bool
index_options(co_req *r, unsigned dflt, unsigned *flags)
{
	const char *ew = co_param_get(r, "expand_wildcards");
	*flags = dflt;
	if (ew) {
		char *copy = cm_strdup(MEM, ew), *save = NULL;
		*flags = 0;
		for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			if (!strcmp(t, "open"))
				*flags |= ND_RESOLVE_OPEN;
			else if (!strcmp(t, "closed"))
				*flags |= ND_RESOLVE_CLOSED;
			else if (!strcmp(t, "all"))
				*flags |= ND_RESOLVE_OPEN | ND_RESOLVE_CLOSED | ND_RESOLVE_HIDDEN;
			else if (!strcmp(t, "hidden"))
				*flags |= ND_RESOLVE_HIDDEN;
			else if (strcmp(t, "none")) {
				co_reply_errorf(r, CM_EINVAL, NULL,
				                "No enum constant "
				                "org.elasticsearch.action.support.IndicesOptions.WildcardStates."
				                "%s",
				                t);
				cm_free(MEM, copy);
				return false;
			}
		}
		cm_free(MEM, copy);
	}
	if (co_param_bool(r, "ignore_unavailable", false))
		*flags |= ND_RESOLVE_IGNORE_UNAVAILABLE;
	if (!co_param_bool(r, "allow_no_indices", true))
		*flags |= ND_RESOLVE_NONE_FAILS;
	return true;
}

static bool
resolve_with(co_req *r, const char *expr, unsigned dflt, nd_index ***out, size_t *n)
{
	cm_error err;
	unsigned flags;
	cm_error_clear(&err);
	*out = NULL;
	*n = 0;
	if (!index_options(r, dflt, &flags))
		return false;
	if (nd_resolve_ex(r->node, expr, flags, out, n, &err)) {
		const char *name = strstr(err.reason, "[");
		char idx[256] = "";
		if (name)
			sscanf(name + 1, "%255[^]]", idx);
		co_reply_error(r, &err, idx[0] ? idx : NULL);
		return false;
	}
	return true;
}

bool
co_resolve(co_req *r, const char *expr, nd_index ***out, size_t *n)
{
	return resolve_with(r, expr, ND_RESOLVE_OPEN, out, n);
}

bool
co_resolve_all(co_req *r, const char *expr, nd_index ***out, size_t *n)
{
	return resolve_with(r, expr, ND_RESOLVE_OPEN | ND_RESOLVE_CLOSED, out, n);
}

void
co_release_all(nd_index **ixs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		nd_index_release(ixs[i]);
	cm_free(CM_MEM_NODE, ixs);
}

/* ---- GET / ---- */

/* _cat/health's columns, on a solo node (here) and a cluster (co_cluster.c) */
const char *const co_cat_health_cols[CO_CAT_HEALTH_NCOLS] = {
    "epoch", "timestamp", "cluster",       "status",  "node.total",         "node.data",
    "shards", "pri",      "relo",          "init",    "unassign",           "pending_tasks",
    "max_task_wait_time", "active_shards_percent"};

const char *
co_cluster_uuid(co_req *r, char *buf, size_t cap)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	buf[0] = 0;
	if (cl)
		nd_cluster_uuid_of(cl, buf, cap);
	if (!buf[0])
		snprintf(buf, cap, "%s", nd_cluster_uuid(r->node));
	return buf;
}

void
co_h_root(co_req *r)
{
	cJSON *j = cJSON_CreateObject(), *v;
	cJSON_AddStringToObject(j, "name", nd_node_name(r->node));
	cJSON_AddStringToObject(j, "cluster_name", nd_cluster_name(r->node));
	char uuid[64];
	cJSON_AddStringToObject(j, "cluster_uuid", co_cluster_uuid(r, uuid, sizeof(uuid)));
	v = cJSON_AddObjectToObject(j, "version");
	cJSON_AddStringToObject(v, "number", ND_ES_VERSION);
	cJSON_AddStringToObject(v, "build_flavor", "default");
	cJSON_AddStringToObject(v, "build_type", "tar");
	cJSON_AddStringToObject(v, "build_hash", "747e1cc71def077253878a59143c1f785afa92b9");
	cJSON_AddStringToObject(v, "build_date", "2021-01-13T00:42:12.435326Z");
	cJSON_AddBoolToObject(v, "build_snapshot", false);
	cJSON_AddStringToObject(v, "lucene_version", "8.7.0");
	cJSON_AddStringToObject(v, "minimum_wire_compatibility_version", "6.8.0");
	cJSON_AddStringToObject(v, "minimum_index_compatibility_version", "6.0.0-beta1");
	cJSON_AddStringToObject(j, "tagline", "You Know, for Search");
	co_reply_json(r, 200, j);
}

/* ---- health ---- */

typedef struct health {
	int active_primary, active, unassigned;
	const char *status;
} health;

static void
health_of(nd_index **ixs, size_t n, health *h)
{
	memset(h, 0, sizeof(*h));
	for (size_t i = 0; i < n; i++) {
		const nd_settings *s = nd_index_settings(ixs[i]);
		h->active_primary += s->number_of_shards;
		h->active += s->number_of_shards;
		/* a solo node cannot place a replica beside its primary */
		h->unassigned += s->number_of_shards * s->number_of_replicas;
	}
	h->status = h->unassigned ? "yellow" : "green";
}

static int
status_rank(const char *s)
{
	return strcmp(s, "green") == 0 ? 0 : strcmp(s, "yellow") == 0 ? 1 : 2;
}

void
co_h_health(co_req *r)
{
	nd_index **ixs;
	size_t n;
	health h;
	cJSON *j;
	const char *expr = co_seg(r, 2), *want = co_param_get(r, "wait_for_status");
	bool timed_out = false;
	int status = 200;
	cm_error err;

	if (co_cluster_health(r))
		return;
	/* one node: nothing relocates or initializes, and nothing changes
	 * while it would wait */
	co_health_waits w;
	if (!co_health_waits_parse(r, &w))
		return;
	cm_error_clear(&err);
	if (nd_resolve(r->node, expr ? expr : "_all", false, &ixs, &n, &err)) {
		/* ES waits for the index to appear, then gives up with 408 red. */
		memset(&h, 0, sizeof(h));
		h.status = "red";
		timed_out = true;
		status = 408;
		ixs = NULL;
		n = 0;
	} else {
		health_of(ixs, n, &h);
	}
	if (want && status_rank(h.status) > status_rank(want)) {
		timed_out = true;
		status = 408;
	}
	if (!co_health_waits_met(&w, 1, h.active, 0, h.unassigned, 0)) {
		timed_out = true;
		status = 408;
	}
	j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "cluster_name", nd_cluster_name(r->node));
	cJSON_AddStringToObject(j, "status", h.status);
	cJSON_AddBoolToObject(j, "timed_out", timed_out);
	cJSON_AddNumberToObject(j, "number_of_nodes", 1);
	cJSON_AddNumberToObject(j, "number_of_data_nodes", 1);
	cJSON_AddNumberToObject(j, "active_primary_shards", h.active_primary);
	cJSON_AddNumberToObject(j, "active_shards", h.active);
	cJSON_AddNumberToObject(j, "relocating_shards", 0);
	cJSON_AddNumberToObject(j, "initializing_shards", 0);
	cJSON_AddNumberToObject(j, "unassigned_shards", h.unassigned);
	cJSON_AddNumberToObject(j, "delayed_unassigned_shards", 0);
	cJSON_AddNumberToObject(j, "number_of_pending_tasks", 0);
	cJSON_AddNumberToObject(j, "number_of_in_flight_fetch", 0);
	cJSON_AddNumberToObject(j, "task_max_waiting_in_queue_millis", 0);
	cJSON_AddNumberToObject(
	    j, "active_shards_percent_as_number",
	    h.active + h.unassigned ? 100.0 * h.active / (h.active + h.unassigned) : 100.0);
	const char *level = co_param_get(r, "level");
	if (level && (!strcmp(level, "indices") || !strcmp(level, "shards"))) {
		cJSON *ind = cJSON_AddObjectToObject(j, "indices");
		for (size_t i = 0; i < n; i++) {
			health hi;
			cJSON *o = cJSON_AddObjectToObject(ind, nd_index_name(ixs[i]));
			health_of(&ixs[i], 1, &hi);
			cJSON_AddStringToObject(o, "status", hi.status);
			cJSON_AddNumberToObject(o, "number_of_shards", nd_index_nshards(ixs[i]));
			cJSON_AddNumberToObject(o, "number_of_replicas",
			                        nd_index_settings(ixs[i])->number_of_replicas);
			cJSON_AddNumberToObject(o, "active_primary_shards", hi.active_primary);
			cJSON_AddNumberToObject(o, "active_shards", hi.active);
			cJSON_AddNumberToObject(o, "relocating_shards", 0);
			cJSON_AddNumberToObject(o, "initializing_shards", 0);
			cJSON_AddNumberToObject(o, "unassigned_shards", hi.unassigned);
			if (strcmp(level, "shards"))
				continue;
			/* a solo node holds every primary; replicas stay unassigned */
			int reps = nd_index_settings(ixs[i])->number_of_replicas;
			cJSON *sh = cJSON_AddObjectToObject(o, "shards");
			for (int s = 0; s < nd_index_nshards(ixs[i]); s++) {
				char id[16];
				snprintf(id, sizeof id, "%d", s);
				cJSON *so = cJSON_AddObjectToObject(sh, id);
				cJSON_AddStringToObject(so, "status", reps ? "yellow" : "green");
				cJSON_AddBoolToObject(so, "primary_active", true);
				cJSON_AddNumberToObject(so, "active_shards", 1);
				cJSON_AddNumberToObject(so, "relocating_shards", 0);
				cJSON_AddNumberToObject(so, "initializing_shards", 0);
				cJSON_AddNumberToObject(so, "unassigned_shards", reps);
			}
		}
	}
	if (ixs)
		co_release_all(ixs, n);
	co_reply_json(r, status, j);
}

static cJSON *
index_mappings_json(nd_index *ix)
{
	st_mapping *m = nd_index_mapping(ix);
	cJSON *j = st_mapping_to_json(m);
	st_mapping_unref(m);
	return j;
}

void
co_h_cluster_state(co_req *r)
{
	nd_index **ixs;
	size_t n;
	cJSON *j = cJSON_CreateObject(), *meta, *ind, *nodes, *me;
	char addr[64];

	nd_cluster *cl = nd_cluster_of(r->node);
	cJSON *cs = cl ? nd_cluster_state_json(cl) : NULL;
	nd_index_list(r->node, &ixs, &n);
	cJSON_AddStringToObject(j, "cluster_name", nd_cluster_name(r->node));
	char uuid[64];
	co_cluster_uuid(r, uuid, sizeof(uuid));
	cJSON_AddStringToObject(j, "cluster_uuid", uuid);
	if (cs) {
		/* the cluster's: state version, master, live nodes, routing */
		cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(cs, "version");
		cJSON_AddItemToObject(j, "version", v);
		cJSON_AddStringToObject(j, "state_uuid", uuid);
		cJSON_AddItemToObject(j, "master_node",
		                      cJSON_DetachItemFromObjectCaseSensitive(cs, "master_node"));
		cJSON_AddItemToObject(j, "nodes",
		                      cJSON_DetachItemFromObjectCaseSensitive(cs, "nodes"));
	} else {
		cJSON_AddNumberToObject(j, "version", 1);
		cJSON_AddStringToObject(j, "state_uuid", uuid);
		cJSON_AddStringToObject(j, "master_node", nd_node_id(r->node));
		nodes = cJSON_AddObjectToObject(j, "nodes");
		me = cJSON_AddObjectToObject(nodes, nd_node_id(r->node));
		cJSON_AddStringToObject(me, "name", nd_node_name(r->node));
		cJSON_AddStringToObject(me, "ephemeral_id", nd_node_id(r->node));
		snprintf(addr, sizeof(addr), "%s", co_http_publish_address());
		cJSON_AddStringToObject(me, "transport_address", addr);
		cJSON_AddObjectToObject(me, "attributes");
	}
	meta = cJSON_AddObjectToObject(j, "metadata");
	cJSON_AddStringToObject(meta, "cluster_uuid", uuid);
	ind = cJSON_AddObjectToObject(meta, "indices");
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_AddObjectToObject(ind, nd_index_name(ixs[i]));
		cJSON_AddStringToObject(o, "state", nd_index_closed(ixs[i]) ? "close" : "open");
		cJSON_AddItemToObject(o, "settings", nd_index_settings_json(ixs[i]));
		cJSON_AddItemToObject(o, "mappings", index_mappings_json(ixs[i]));
		cJSON_AddItemToObject(o, "aliases", cJSON_CreateArray());
	}
	co_release_all(ixs, n);
	if (cs) {
		cJSON_AddItemToObject(j, "routing_table",
		                      cJSON_DetachItemFromObjectCaseSensitive(cs, "routing_table"));
		cJSON_Delete(cs);
	}
	co_reply_json(r, 200, j);
}

void
co_h_cluster_settings(co_req *r)
{
	cJSON *j, *body = NULL, *c, *sec;
	bool bad;

	if (co_cluster_settings(r))
		return;
	if (r->method == CO_PUT) {
		body = co_body_json(r, &bad);
		if (bad)
			return;
		/* only the one setting a solo node has; anything else is refused
		 * before anything is applied */
		for (int pass = 0; pass < 2; pass++) {
			const char *secs[] = {"persistent", "transient"};
			for (int k = 0; k < 2; k++) {
				sec = cJSON_GetObjectItemCaseSensitive(body, secs[k]);
				/* a non-object body or section would iterate unnamed items */
				if ((body && !cJSON_IsObject(body)) ||
				    (sec && !cJSON_IsObject(sec))) {
					co_reply_errorf(r, CM_EPARSE, NULL,
					                "[%s] must be an object of settings",
					                secs[k]);
					cJSON_Delete(body);
					return;
				}
				cJSON_ArrayForEach(c, sec)
				{
					const cJSON *pv = co_partial_setting(c);
					if (pv) {
						if (!co_bool_setting_ok(pv)) {
							co_reply_errorf(
							    r, CM_EINVAL, NULL,
							    "Failed to parse value [%.40s] as only [true] "
							    "or [false] are allowed.",
							    cJSON_IsString(pv) ? pv->valuestring : "");
							cJSON_Delete(body);
							return;
						}
						if (pass == 1)
							nd_set_default_allow_partial(
							    r->node, !cJSON_IsFalse(pv) &&
							                 !(cJSON_IsString(pv) &&
							                   !strcmp(pv->valuestring, "false")));
						continue;
					}
					bool named =
					    strcmp(c->string, "action.destructive_requires_name") ==
					    0;
					if (!named || !(cJSON_IsBool(c) || cJSON_IsNull(c) ||
					                cJSON_IsString(c))) {
						co_reply_errorf(r, CM_EINVAL, NULL,
						                "%s setting [%.100s], not "
						                "dynamically updateable",
						                named ? "invalid value for"
						                      : "transient",
						                c->string);
						cJSON_Delete(body);
						return;
					}
					if (pass == 1)
						nd_set_destructive_requires_name(
						    r->node, cJSON_IsNull(c) || cJSON_IsTrue(c) ||
						                 (cJSON_IsString(c) &&
						                  strcmp(c->valuestring, "false")));
				}
			}
		}
		cJSON_Delete(body);
	}
	j = cJSON_CreateObject();
	if (r->method == CO_PUT)
		cJSON_AddBoolToObject(j, "acknowledged", true);
	sec = cJSON_AddObjectToObject(j, "persistent");
	c = cJSON_AddObjectToObject(j, "transient");
	bool flat = co_param_bool(r, "flat_settings", false);
	if (!nd_destructive_requires_name(r->node)) {
		if (flat) {
			cJSON_AddStringToObject(c, "action.destructive_requires_name", "false");
		} else {
			cJSON *a = cJSON_AddObjectToObject(c, "action");
			cJSON_AddStringToObject(a, "destructive_requires_name", "false");
		}
	}
	if (!nd_default_allow_partial(r->node)) {
		if (flat) {
			cJSON_AddStringToObject(c, "search.default_allow_partial_results", "false");
		} else {
			cJSON *a = cJSON_AddObjectToObject(c, "search");
			cJSON_AddStringToObject(a, "default_allow_partial_results", "false");
		}
	}
	co_reply_json(r, 200, j);
}

const cJSON *
co_partial_setting(const cJSON *c)
{
	if (!strcmp(c->string, "search.default_allow_partial_results"))
		return c;
	if (!strcmp(c->string, "search") && cJSON_IsObject(c) && c->child && !c->child->next &&
	    !strcmp(c->child->string, "default_allow_partial_results"))
		return c->child;
	return NULL;
}

bool
co_bool_setting_ok(const cJSON *v)
{
	return cJSON_IsBool(v) || cJSON_IsNull(v) ||
	       (cJSON_IsString(v) &&
	        (!strcmp(v->valuestring, "true") || !strcmp(v->valuestring, "false")));
}

void
co_h_cat_help(co_req *r)
{
	static const char text[] = "=^.^=\n/_cat/indices\n/_cat/indices/{index}\n/_cat/shards\n"
	                           "/_cat/shards/{index}\n/_cat/nodes\n/_cat/count\n"
	                           "/_cat/count/{index}\n/_cat/health\n";
	co_reply_text(r, 200, "text/plain; charset=UTF-8", text, sizeof(text) - 1);
}

/* ---- _cat ---- */

typedef struct cat_table {
	const char *const *cols;
	int ncols;
	char ***rows; /* rows[i][c] */
	int nrows, cap;
	bool *numeric;
	bool *extra; /* shown only when h= names it (ES's non-default columns) */
} cat_table;

static void
cat_init(cat_table *t, const char *const *cols, int ncols)
{
	memset(t, 0, sizeof(*t));
	t->cols = cols;
	t->ncols = ncols;
	t->numeric = cm_calloc(MEM, (size_t)ncols, sizeof(bool));
	t->extra = cm_calloc(MEM, (size_t)ncols, sizeof(bool));
}

static void
cat_row(cat_table *t, ...)
{
	va_list ap;
	if (t->nrows == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 16;
		t->rows = cm_realloc(MEM, t->rows, (size_t)t->cap * sizeof(char **));
	}
	char **row = cm_calloc(MEM, (size_t)t->ncols, sizeof(char *));
	va_start(ap, t);
	for (int c = 0; c < t->ncols; c++) {
		const char *v = va_arg(ap, const char *);
		row[c] = cm_strdup(MEM, v ? v : "");
	}
	va_end(ap);
	t->rows[t->nrows++] = row;
}

/* s=: up to 16 keys, under cat_render's sort lock */
#define CAT_SORT_KEYS 16
static int cat_sort_col[CAT_SORT_KEYS], cat_sort_nkeys;
static bool cat_sort_desc[CAT_SORT_KEYS], cat_sort_num[CAT_SORT_KEYS];

static int
cat_cmp(const void *a, const void *b)
{
	for (int k = 0; k < cat_sort_nkeys; k++) {
		const char *x = (*(char ***)a)[cat_sort_col[k]], *y = (*(char ***)b)[cat_sort_col[k]];
		int c;
		if (cat_sort_num[k]) {
			double dx = atof(x), dy = atof(y);
			c = dx < dy ? -1 : dx > dy;
		} else {
			c = strcmp(x, y);
		}
		if (c)
			return cat_sort_desc[k] ? -c : c;
	}
	return 0;
}

/* ES's column aliases (_cat/indices, shards, aliases, nodes, count,
 * health): an alias names the first column of the table it maps to. */
/* clang-format off: a table laid out by hand */
static const char *const cat_aliases[][2] = {{"h", "health"},
                                             {"s", "status"},
                                             {"i", "index"},
                                             {"idx", "index"},
                                             {"id", "uuid"},
                                             {"p", "pri"},
                                             {"shards.primary", "pri"},
                                             {"primaryShards", "pri"},
                                             {"r", "rep"},
                                             {"shards.replica", "rep"},
                                             {"replicaShards", "rep"},
                                             {"dc", "docs.count"},
                                             {"docsCount", "docs.count"},
                                             {"dd", "docs.deleted"},
                                             {"docsDeleted", "docs.deleted"},
                                             {"ss", "store.size"},
                                             {"storeSize", "store.size"},
                                             {"s", "shard"},
                                             {"sh", "shard"},
                                             {"p", "prirep"},
                                             {"pr", "prirep"},
                                             {"primaryOrReplica", "prirep"},
                                             {"st", "state"},
                                             {"d", "docs"},
                                             {"dc", "docs"},
                                             {"sto", "store"},
                                             {"n", "node"},
                                             {"a", "alias"},
                                             {"f", "filter"},
                                             {"fi", "filter"},
                                             {"ri", "routing.index"},
                                             {"routingIndex", "routing.index"},
                                             {"rs", "routing.search"},
                                             {"routingSearch", "routing.search"},
                                             {"w", "is_write_index"},
                                             {"isWriteIndex", "is_write_index"},
                                             {"n", "name"},
                                             {"hp", "heap.percent"},
                                             {"heapPercent", "heap.percent"},
                                             {"rp", "ram.percent"},
                                             {"ramPercent", "ram.percent"},
                                             {"l", "load_1m"},
                                             {"r", "node.role"},
                                             {"role", "node.role"},
                                             {"nodeRole", "node.role"},
                                             {"m", "master"},
                                             {"t", "time"},
                                             {"ts", "timestamp"},
                                             {"hms", "timestamp"},
                                             {"hhmmss", "timestamp"},
                                             {"e", "epoch"},
                                             {"time", "epoch"},
                                             {"dc", "count"},
                                             {"docs.count", "count"},
                                             {"docsCount", "count"},
                                             {"cl", "cluster"},
                                             {"nt", "node.total"},
                                             {"nodeTotal", "node.total"},
                                             {"nd", "node.data"},
                                             {"nodeData", "node.data"},
                                             {"t", "shards"},
                                             {"sh", "shards"},
                                             {"shards.total", "shards"},
                                             {"shardsTotal", "shards"},
                                             {"cd", "creation.date"},
                                             {"cds", "creation.date.string"},
                                             {"nodeId", "id"},
                                             {"p", "pid"},
                                             {"po", "port"},
                                             {"http", "http_address"},
                                             {"dt", "disk.total"},
                                             {"diskTotal", "disk.total"},
                                             {"du", "disk.used"},
                                             {"diskUsed", "disk.used"},
                                             {"d", "disk.avail"},
                                             {"disk", "disk.avail"},
                                             {"diskAvail", "disk.avail"},
                                             {"dup", "disk.used_percent"},
                                             {"diskUsedPercent", "disk.used_percent"},
                                             {"hc", "heap.current"},
                                             {"heapCurrent", "heap.current"},
                                             {"hm", "heap.max"},
                                             {"heapMax", "heap.max"},
                                             {"rc", "ram.current"},
                                             {"ramCurrent", "ram.current"},
                                             {"rm", "ram.max"},
                                             {"ramMax", "ram.max"},
                                             {"fdc", "file_desc.current"},
                                             {"fileDescriptorCurrent", "file_desc.current"},
                                             {"fdp", "file_desc.percent"},
                                             {"fileDescriptorPercent", "file_desc.percent"},
                                             {"fdm", "file_desc.max"},
                                             {"fileDescriptorMax", "file_desc.max"},
                                             {"u", "uptime"},
                                             {"seg", "segment"},
                                             {"g", "generation"},
                                             {"gen", "generation"},
                                             {"sz", "size"},
                                             {"sm", "size.memory"},
                                             {"sizeMemory", "size.memory"},
                                             {"ic", "committed"},
                                             {"isCommitted", "committed"},
                                             {"is", "searchable"},
                                             {"isSearchable", "searchable"},
                                             {"v", "version"},
                                             {"ico", "compound"},
                                             {"isCompound", "compound"},
                                             {"di", "disk.indices"},
                                             {"diskIndices", "disk.indices"},
                                             {"da", "disk.avail"},
                                             {"dp", "disk.percent"},
                                             {"diskPercent", "disk.percent"},
                                             {"h", "host"}};
/* clang-format on */

static int
cat_col(const cat_table *t, const char *name, size_t n)
{
	for (int c = 0; c < t->ncols; c++)
		if (strlen(t->cols[c]) == n && memcmp(t->cols[c], name, n) == 0)
			return c;
	for (size_t a = 0; a < sizeof(cat_aliases) / sizeof(cat_aliases[0]); a++) {
		if (strlen(cat_aliases[a][0]) != n || memcmp(cat_aliases[a][0], name, n))
			continue;
		for (int c = 0; c < t->ncols; c++)
			if (!strcmp(t->cols[c], cat_aliases[a][1]))
				return c;
	}
	return -1;
}

/* help=true: one line per column, "name | aliases | description" as ES
 * prints it (Shoal has no descriptions: the name stands for it). */
static void
cat_help(co_req *r, const cat_table *t)
{
	cm_buf out;
	size_t w = 0;
	cm_buf_init(&out, MEM);
	for (int c = 0; c < t->ncols; c++)
		if (strlen(t->cols[c]) > w)
			w = strlen(t->cols[c]);
	for (int c = 0; c < t->ncols; c++) {
		char al[256] = "";
		size_t n = 0;
		for (size_t a = 0; a < sizeof(cat_aliases) / sizeof(cat_aliases[0]); a++) {
			const char *name = cat_aliases[a][0];
			if (strcmp(cat_aliases[a][1], t->cols[c]) ||
			    cat_col(t, name, strlen(name)) != c || n + strlen(name) + 2 > sizeof al)
				continue;
			n += (size_t)snprintf(al + n, sizeof al - n, "%s%s", n ? "," : "", name);
		}
		cm_buf_printf(&out, "%-*s | %-16s | %s\n", (int)w, t->cols[c], n ? al : "-",
		              t->cols[c]);
	}
	co_reply_text(r, 200, "text/plain; charset=UTF-8", (const char *)out.data, out.len);
	cm_buf_free(&out);
}

static void
cat_render(co_req *r, cat_table *t)
{
	static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;
	const char *h = co_param_get(r, "h"), *s = co_param_get(r, "s"),
	           *fmt = co_param_get(r, "format");
	int sel[64], nsel = 0;
	char shown[64][64]; /* a column's header as h= named it (ES shows an alias as given) */
	bool v = co_param_bool(r, "v", false);
	const char *health = co_param_get(r, "health");

	if (co_param_bool(r, "help", false)) {
		cat_help(r, t);
		goto done;
	}
	if (h && *h) {
		for (const char *p = h; *p && nsel < 64;) {
			const char *e = strchr(p, ',');
			size_t n = e ? (size_t)(e - p) : strlen(p);
			if (memchr(p, '*', n)) {
				/* a pattern: every column it matches, in the table's order */
				char pat[64];
				snprintf(pat, sizeof(pat), "%.*s", (int)(n < 63 ? n : 63), p);
				for (int c = 0; c < t->ncols && nsel < 64; c++) {
					if (!cm_glob(pat, t->cols[c]))
						continue;
					snprintf(shown[nsel], sizeof(shown[nsel]), "%s",
					         t->cols[c]);
					sel[nsel++] = c;
				}
				p = e ? e + 1 : p + n;
				continue;
			}
			int c = cat_col(t, p, n);
			if (c < 0) {
				co_reply_errorf(r, CM_EINVAL, NULL, "unknown column [%.*s]", (int)n,
				                p);
				goto done;
			}
			snprintf(shown[nsel], sizeof(shown[nsel]), "%.*s", (int)(n < 63 ? n : 63), p);
			sel[nsel++] = c;
			p = e ? e + 1 : p + n;
		}
	} else {
		/* ts=false (health, count): without epoch and timestamp */
		bool ts = co_param_bool(r, "ts", true);
		for (int c = 0; c < t->ncols && c < 64; c++) {
			if (t->extra[c] || (!ts && (!strcmp(t->cols[c], "epoch") ||
			                            !strcmp(t->cols[c], "timestamp"))))
				continue;
			snprintf(shown[nsel], sizeof(shown[nsel]), "%s", t->cols[c]);
			sel[nsel++] = c;
		}
	}
	/* health=green|yellow|red: only the rows of that health */
	int hc = cat_col(t, "health", 6);
	if (health && hc >= 0) {
		if (strcmp(health, "green") && strcmp(health, "yellow") && strcmp(health, "red")) {
			co_reply_errorf(r, CM_EINVAL, NULL, "unknown cluster health status [%.40s]",
			                health);
			goto done;
		}
		int k = 0;
		for (int i = 0; i < t->nrows; i++) {
			if (!strcmp(t->rows[i][hc], health)) {
				t->rows[k++] = t->rows[i];
				continue;
			}
			for (int c = 0; c < t->ncols; c++)
				cm_free(MEM, t->rows[i][c]);
			cm_free(MEM, t->rows[i]);
		}
		t->nrows = k;
	}
	if (s && *s) {
		int cols[CAT_SORT_KEYS], nk = 0;
		bool desc[CAT_SORT_KEYS];
		for (const char *p = s; *p && nk < CAT_SORT_KEYS;) {
			const char *e = strchr(p, ',');
			size_t n = e ? (size_t)(e - p) : strlen(p);
			char name[64];
			snprintf(name, sizeof(name), "%.*s", (int)(n < 63 ? n : 63), p);
			char *colon = strchr(name, ':');
			desc[nk] = false;
			if (colon) {
				desc[nk] = strcmp(colon + 1, "desc") == 0;
				*colon = 0;
			}
			int c = cat_col(t, name, strlen(name));
			if (c < 0) {
				co_reply_errorf(r, CM_EINVAL, NULL,
				                "Unable to sort by unknown sort key `%s`", name);
				goto done;
			}
			cols[nk++] = c;
			p = e ? e + 1 : p + n;
		}
		pthread_mutex_lock(&sort_lock);
		cat_sort_nkeys = nk;
		for (int k = 0; k < nk; k++) {
			cat_sort_col[k] = cols[k];
			cat_sort_desc[k] = desc[k];
			cat_sort_num[k] = t->numeric[cols[k]];
		}
		qsort(t->rows, (size_t)t->nrows, sizeof(char **), cat_cmp);
		pthread_mutex_unlock(&sort_lock);
	}
	if ((fmt && !strcmp(fmt, "yaml")) || (!fmt && r->accept_yaml)) {
		/* a list of maps, values as JSON strings (valid YAML scalars) */
		cm_buf out;
		cm_buf_init(&out, MEM);
		cm_buf_printf(&out, "---\n");
		if (!t->nrows)
			cm_buf_printf(&out, "[]\n");
		for (int i = 0; i < t->nrows; i++) {
			for (int k = 0; k < nsel; k++) {
				const char *val = t->rows[i][sel[k]];
				char *q = NULL;
				if (*val) {
					cJSON *str = cJSON_CreateString(val);
					q = cJSON_PrintUnformatted(str);
					cJSON_Delete(str);
				}
				cm_buf_printf(&out, "%s \"%s\": %s\n", k ? " " : "-", shown[k],
				              q ? q : "null");
				cJSON_free(q);
			}
		}
		co_reply_text(r, 200, "application/yaml", (const char *)out.data, out.len);
		cm_buf_free(&out);
		goto done;
	}
	if (fmt && strcmp(fmt, "json") == 0) {
		cJSON *arr = cJSON_CreateArray();
		for (int i = 0; i < t->nrows; i++) {
			cJSON *o = cJSON_CreateObject();
			for (int k = 0; k < nsel; k++) {
				const char *val = t->rows[i][sel[k]];
				if (*val)
					cJSON_AddStringToObject(o, shown[k], val);
				else
					cJSON_AddNullToObject(o, shown[k]);
			}
			cJSON_AddItemToArray(arr, o);
		}
		co_reply_json(r, 200, arr);
		goto done;
	}
	{
		size_t width[64];
		cm_buf out;
		cm_buf_init(&out, MEM);
		for (int k = 0; k < nsel; k++) {
			width[k] = v ? strlen(shown[k]) : 0;
			for (int i = 0; i < t->nrows; i++)
				if (strlen(t->rows[i][sel[k]]) > width[k])
					width[k] = strlen(t->rows[i][sel[k]]);
		}
		for (int i = v ? -1 : 0; i < t->nrows; i++) {
			for (int k = 0; k < nsel; k++) {
				const char *val = i < 0 ? shown[k] : t->rows[i][sel[k]];
				bool right = i >= 0 && t->numeric[sel[k]];
				int pad = (int)(width[k] - strlen(val));
				if (right)
					cm_buf_printf(&out, "%*s%s", pad, "", val);
				else if (k + 1 < nsel)
					cm_buf_printf(&out, "%s%*s", val, pad, "");
				else
					cm_buf_printf(&out, "%s", val);
				if (k + 1 < nsel)
					cm_buf_put_u8(&out, ' ');
			}
			cm_buf_put_u8(&out, '\n');
		}
		co_reply_text(r, 200, "text/plain; charset=UTF-8", (const char *)out.data, out.len);
		cm_buf_free(&out);
	}
done:
	for (int i = 0; i < t->nrows; i++) {
		for (int c = 0; c < t->ncols; c++)
			cm_free(MEM, t->rows[i][c]);
		cm_free(MEM, t->rows[i]);
	}
	cm_free(MEM, t->rows);
	cm_free(MEM, t->numeric);
	cm_free(MEM, t->extra);
}

void
co_cat_cells(co_req *r, const char *const *cols, int ncols, char *const *cells, int nrows)
{
	co_cat_cells_ex(r, cols, ncols, 0, cells, nrows);
}

void
co_cat_cells_ex(co_req *r, const char *const *cols, int ncols, uint64_t extra, char *const *cells,
                int nrows)
{
	cat_table t;
	cat_init(&t, cols, ncols);
	for (int c = 0; c < ncols && c < 64; c++)
		t.extra[c] = (extra >> c) & 1;
	t.cap = nrows;
	t.rows = cm_malloc(MEM, (size_t)(nrows ? nrows : 1) * sizeof(char **));
	for (int i = 0; i < nrows; i++) {
		char **row = cm_calloc(MEM, (size_t)ncols, sizeof(char *));
		for (int c = 0; c < ncols; c++) {
			const char *v = cells[(size_t)i * (size_t)ncols + (size_t)c];
			row[c] = cm_strdup(MEM, v ? v : "");
		}
		t.rows[t.nrows++] = row;
	}
	cat_render(r, &t);
}

void
co_cat_rows(co_req *r, const char *const *cols, int ncols, const char *rows, size_t len)
{
	co_cat_rows_ex(r, cols, ncols, ncols, rows, len);
}

void
co_cat_rows_ex(co_req *r, const char *const *cols, int ncols, int ndefault, const char *rows,
               size_t len)
{
	cat_table t;
	cat_init(&t, cols, ncols);
	for (int c = ndefault; c < ncols; c++)
		t.extra[c] = true;
	char *text = cm_malloc(MEM, len + 1), *save = NULL, *line;
	if (len)
		memcpy(text, rows, len);
	text[len] = 0;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (t.nrows == t.cap) {
			t.cap = t.cap ? t.cap * 2 : 16;
			t.rows = cm_realloc(MEM, t.rows, (size_t)t.cap * sizeof(char **));
		}
		char **row = cm_calloc(MEM, (size_t)ncols, sizeof(char *));
		char *s2 = NULL, *tok = strtok_r(line, " ", &s2);
		for (int c = 0; c < ncols; c++) {
			row[c] = cm_strdup(MEM, tok ? tok : "");
			tok = tok ? strtok_r(NULL, " ", &s2) : NULL;
		}
		t.rows[t.nrows++] = row;
	}
	cm_free(MEM, text);
	cat_render(r, &t);
}

static void
fmt_bytes(co_req *r, uint64_t b, char *buf, size_t cap)
{
	const char *unit = co_param_get(r, "bytes");
	if (unit && strcmp(unit, "b") == 0) {
		snprintf(buf, cap, "%llu", (unsigned long long)b);
		return;
	}
	if (unit && strcmp(unit, "kb") == 0) {
		snprintf(buf, cap, "%llu", (unsigned long long)(b / 1024));
		return;
	}
	if (unit && strcmp(unit, "mb") == 0) {
		snprintf(buf, cap, "%llu", (unsigned long long)(b >> 20));
		return;
	}
	if (unit && (!strcmp(unit, "gb") || !strcmp(unit, "tb") || !strcmp(unit, "pb"))) {
		int shift = unit[0] == 'g' ? 30 : unit[0] == 't' ? 40 : 50;
		snprintf(buf, cap, "%llu", (unsigned long long)(b >> shift));
		return;
	}
	if (b < 1024)
		snprintf(buf, cap, "%llub", (unsigned long long)b);
	else if (b < (1ull << 20))
		snprintf(buf, cap, "%.1fkb", b / 1024.0);
	else if (b < (1ull << 30))
		snprintf(buf, cap, "%.1fmb", b / 1048576.0);
	else
		snprintf(buf, cap, "%.1fgb", b / 1073741824.0);
}

/* Bytes of the file system holding the node's data. */
static void
data_disk(co_req *r, uint64_t *total, uint64_t *avail)
{
	struct statvfs vfs;
	*total = *avail = 0;
	if (statvfs(nd_data_dir(r->node), &vfs) == 0) {
		*total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
		*avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	}
}

/* Open descriptors of this process (its /proc/self/fd entries). */
static long
open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = -1;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n; /* less the descriptor opendir holds */
}

/* _cat/nodes of a solo node, in ES's column order; the columns after
 * ES's default ones only with h=. Shoal has no JVM heap: heap.* are the
 * process's resident memory against the machine's. */
static void
cat_nodes_table(co_req *r, cat_table *t)
{
	static const char *cols[] = {"id",
	                             "pid",
	                             "ip",
	                             "port",
	                             "http_address",
	                             "disk.total",
	                             "disk.used",
	                             "disk.avail",
	                             "disk.used_percent",
	                             "heap.current",
	                             "heap.percent",
	                             "heap.max",
	                             "ram.current",
	                             "ram.percent",
	                             "ram.max",
	                             "file_desc.current",
	                             "file_desc.percent",
	                             "file_desc.max",
	                             "cpu",
	                             "load_1m",
	                             "load_5m",
	                             "load_15m",
	                             "uptime",
	                             "node.role",
	                             "master",
	                             "name"};
	enum { NCOLS = sizeof(cols) / sizeof(cols[0]) };
	static const char *defaults[] = {"ip",      "heap.percent", "ram.percent", "cpu",
	                                 "load_1m", "load_5m",      "load_15m",    "node.role",
	                                 "master",  "name"};
	char v[NCOLS][64];
	const char *row[NCOLS];
	cat_init(t, cols, NCOLS);
	for (int c = 0; c < NCOLS; c++) {
		t->extra[c] = true;
		for (size_t d = 0; d < sizeof(defaults) / sizeof(defaults[0]); d++)
			if (!strcmp(cols[c], defaults[d]))
				t->extra[c] = false;
		t->numeric[c] = c != 0 && c != 2 && c != 4 && c < 23;
		row[c] = v[c];
		v[c][0] = 0;
	}
	struct sysinfo si;
	double load[3] = {0, 0, 0};
	getloadavg(load, 3);
	sysinfo(&si);
	uint64_t ram = (uint64_t)si.totalram * si.mem_unit;
	uint64_t ram_used = ram - (uint64_t)si.freeram * si.mem_unit;
	uint64_t rss = cm_rss_bytes();
	uint64_t disk_total, disk_avail;
	data_disk(r, &disk_total, &disk_avail);
	struct rlimit rl;
	long fd_max = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : -1;
	long fds = open_fds();
	const char *id = nd_node_id(r->node), *http = co_http_publish_address();
	const char *colon = strrchr(http, ':');
	snprintf(v[0], 64, "%.*s", co_param_bool(r, "full_id", false) ? 63 : 4, id);
	snprintf(v[1], 64, "%d", (int)getpid());
	snprintf(v[2], 64, "%.*s", colon ? (int)(colon - http) : 63, http);
	snprintf(v[3], 64, "%s", colon ? colon + 1 : "");
	snprintf(v[4], 64, "%s", http);
	fmt_bytes(r, disk_total, v[5], 64);
	fmt_bytes(r, disk_total - disk_avail, v[6], 64);
	fmt_bytes(r, disk_avail, v[7], 64);
	snprintf(v[8], 64, "%.2f",
	         disk_total ? 100.0 * (double)(disk_total - disk_avail) / (double)disk_total : 0.0);
	fmt_bytes(r, rss, v[9], 64);
	snprintf(v[10], 64, "%d", ram ? (int)(100.0 * (double)rss / (double)ram) : 0);
	fmt_bytes(r, ram, v[11], 64);
	fmt_bytes(r, ram_used, v[12], 64);
	snprintf(v[13], 64, "%d", ram ? (int)(100.0 * (double)ram_used / (double)ram) : 0);
	fmt_bytes(r, ram, v[14], 64);
	snprintf(v[15], 64, "%ld", fds);
	snprintf(v[16], 64, "%d", fd_max > 0 && fds >= 0 ? (int)(100.0 * fds / fd_max) : 0);
	snprintf(v[17], 64, "%ld", fd_max);
	snprintf(v[18], 64, "0");
	snprintf(v[19], 64, "%.2f", load[0]);
	snprintf(v[20], 64, "%.2f", load[1]);
	snprintf(v[21], 64, "%.2f", load[2]);
	snprintf(v[22], 64, "%llds", (long long)((cm_wall_ms() - nd_start_ms(r->node)) / 1000));
	snprintf(v[23], 64, "dim");
	snprintf(v[24], 64, "*");
	snprintf(v[25], 64, "%s", nd_node_name(r->node));
	if (t->nrows == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 16;
		t->rows = cm_realloc(MEM, t->rows, (size_t)t->cap * sizeof(char **));
	}
	char **cells = cm_calloc(MEM, NCOLS, sizeof(char *));
	for (int c = 0; c < NCOLS; c++)
		cells[c] = cm_strdup(MEM, row[c]);
	t->rows[t->nrows++] = cells;
}

/* _cat/segments: a row per segment of each shard copy this node holds.
 * Segments are named by generation as Lucene names them ("_" + base 36);
 * every segment a reader sees is committed (a refresh commits its list)
 * and searchable; version is Shoal's segment format; size.memory is 0
 * (segments are read through the page cache, not held on the heap). */
static void
cat_segments(co_req *r, const char *expr)
{
	static const char *cols[] = {"index",        "shard",   "prirep",      "ip",
	                             "id",           "segment", "generation",  "docs.count",
	                             "docs.deleted", "size",    "size.memory", "committed",
	                             "searchable",   "version", "compound"};
	nd_index **ixs = NULL;
	size_t n = 0;
	cat_table t;
	if (!resolve_with(r, expr ? expr : "_all", ND_RESOLVE_OPEN, &ixs, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		if (nd_index_closed(ixs[i])) {
			co_reply_errorf(r, CM_EINVAL, "index_closed_exception", "closed");
			co_release_all(ixs, n);
			return;
		}
	}
	cat_init(&t, cols, 15);
	for (int c = 1; c < 11; c++)
		t.numeric[c] = c != 2 && c != 3 && c != 4 && c != 5;
	t.extra[4] = true; /* id: only when asked for, as ES */
	const char *http = co_http_publish_address();
	const char *colon = strrchr(http, ':');
	char ip[64], id[8];
	snprintf(ip, sizeof(ip), "%.*s", colon ? (int)(colon - http) : 63, http);
	snprintf(id, sizeof(id), "%.4s", nd_node_id(r->node));
	for (size_t i = 0; i < n; i++) {
		for (int s = 0; s < nd_index_nshards(ixs[i]); s++) {
			nd_segment_info *segs;
			size_t nseg = nd_index_segments(ixs[i], s, &segs);
			for (size_t k = 0; k < nseg; k++) {
				uint64_t gen = segs[k].generation;
				char shard[16], name[24], g[24], dc[24], dd[24], size[32], ver[16];
				char b36[16];
				int bl = 0;
				uint64_t x = gen;
				do {
					b36[bl++] = "0123456789abcdefghijklmnopqrstuvwxyz"[x % 36];
					x /= 36;
				} while (x && bl < 15);
				name[0] = '_';
				for (int c = 0; c < bl; c++)
					name[1 + c] = b36[bl - 1 - c];
				name[1 + bl] = 0;
				snprintf(shard, sizeof(shard), "%d", s);
				snprintf(g, sizeof(g), "%llu", (unsigned long long)gen);
				snprintf(dc, sizeof(dc), "%u", segs[k].live);
				snprintf(dd, sizeof(dd), "%u", segs[k].deleted);
				fmt_bytes(r, segs[k].bytes, size, sizeof(size));
				snprintf(ver, sizeof(ver), "%u.0", segs[k].format);
				cat_row(&t, nd_index_name(ixs[i]), shard, "p", ip, id, name, g, dc,
				        dd, size, "0", "true", "true", ver, "false");
			}
			cm_free(CM_MEM_NODE, segs);
		}
	}
	co_release_all(ixs, n);
	cat_render(r, &t);
}

/* _cat/allocation of a solo node: its shard copies and disk, and a row of
 * the replicas no node holds (a solo node never assigns them). node_id
 * selects this node by _all, _local, _master, its name or id (patterns
 * too), or nothing. */
static void
cat_allocation(co_req *r, const char *node_id)
{
	static const char *cols[] = {"shards",     "disk.indices", "disk.used",
	                             "disk.avail", "disk.total",   "disk.percent",
	                             "host",       "ip",           "node"};
	const char *name = nd_node_name(r->node), *id = nd_node_id(r->node);
	bool me = !node_id || !strcmp(node_id, "_all") || !strcmp(node_id, "_local") ||
	          !strcmp(node_id, "_master") || cm_glob(node_id, name) || cm_glob(node_id, id);
	cat_table t;
	cat_init(&t, cols, 9);
	for (int c = 0; c < 6; c++)
		t.numeric[c] = true;
	if (me) {
		nd_index **ixs;
		size_t n;
		uint64_t shards = 0, unassigned = 0, bytes = 0, total, avail;
		nd_index_list(r->node, &ixs, &n);
		for (size_t i = 0; i < n; i++) {
			st_shard_stats st;
			if (nd_index_closed(ixs[i]))
				continue;
			shards += (uint64_t)nd_index_nshards(ixs[i]);
			unassigned += (uint64_t)nd_index_nshards(ixs[i]) *
			              (uint64_t)nd_index_settings(ixs[i])->number_of_replicas;
			nd_index_shard_stats(ixs[i], &st);
			bytes += st.store_bytes;
		}
		co_release_all(ixs, n);
		data_disk(r, &total, &avail);
		char v[6][32], ip[64];
		const char *http = co_http_publish_address();
		const char *colon = strrchr(http, ':');
		snprintf(ip, sizeof(ip), "%.*s", colon ? (int)(colon - http) : 63, http);
		snprintf(v[0], 32, "%llu", (unsigned long long)shards);
		fmt_bytes(r, bytes, v[1], 32);
		fmt_bytes(r, total - avail, v[2], 32);
		fmt_bytes(r, avail, v[3], 32);
		fmt_bytes(r, total, v[4], 32);
		snprintf(v[5], 32, "%d",
		         total ? (int)(100.0 * (double)(total - avail) / (double)total) : 0);
		cat_row(&t, v[0], v[1], v[2], v[3], v[4], v[5], ip, ip, name);
		if (unassigned) {
			snprintf(v[0], 32, "%llu", (unsigned long long)unassigned);
			cat_row(&t, v[0], "", "", "", "", "", "", "", "UNASSIGNED");
		}
	}
	cat_render(r, &t);
}

void
co_h_cat(co_req *r)
{
	const char *what = co_seg(r, 1), *expr = co_seg(r, 2);
	nd_index **ixs = NULL;
	size_t n = 0;
	cat_table t;
	char b1[64], b2[64], b3[64], b4[64], b5[64], b6[64];
	int64_t now = cm_wall_ms();
	char ts[16];
	time_t secs = (time_t)(now / 1000);
	struct tm tm;

	if (co_cluster_cat(r, what))
		return;
	if (strcmp(what, "aliases") == 0) {
		co_cat_aliases(r, expr);
		return;
	}
	gmtime_r(&secs, &tm);
	strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
	if (!strcmp(what, "segments")) {
		cat_segments(r, expr);
		return;
	}
	if (!strcmp(what, "allocation")) {
		cat_allocation(r, expr);
		return;
	}
	if (strcmp(what, "indices") && strcmp(what, "shards") && strcmp(what, "nodes") &&
	    strcmp(what, "count") && strcmp(what, "health")) {
		char msg[256];
		snprintf(msg, sizeof(msg), "no handler found for uri [%.100s] and method [GET]",
		         r->path);
		co_reply_errorf(r, CM_EINVAL, NULL, "%s", msg);
		r->status = 400;
		return;
	}
	if ((strcmp(what, "indices") == 0 || strcmp(what, "shards") == 0 ||
	     strcmp(what, "count") == 0) &&
	    !resolve_with(r, expr ? expr : "_all", ND_RESOLVE_OPEN | ND_RESOLVE_CLOSED, &ixs, &n))
		return;
	if (strcmp(what, "indices") == 0) {
		static const char *cols[] = {
		    "health",         "status",        "index",
		    "uuid",           "pri",           "rep",
		    "docs.count",     "docs.deleted",  "store.size",
		    "pri.store.size", "creation.date", "creation.date.string"};
		cat_init(&t, cols, 12);
		for (int c = 4; c < 11; c++)
			t.numeric[c] = true;
		t.extra[10] = t.extra[11] = true;
		for (size_t i = 0; i < n; i++) {
			st_shard_stats st;
			health h;
			char cd[32], cds[40];
			health_of(&ixs[i], 1, &h);
			nd_index_shard_stats(ixs[i], &st);
			snprintf(b1, sizeof(b1), "%d", nd_index_nshards(ixs[i]));
			snprintf(b2, sizeof(b2), "%d",
			         nd_index_settings(ixs[i])->number_of_replicas);
			snprintf(b3, sizeof(b3), "%llu",
			         (unsigned long long)nd_index_visible_docs(ixs[i]));
			snprintf(b4, sizeof(b4), "%llu", (unsigned long long)st.deleted_docs);
			fmt_bytes(r, st.store_bytes, b5, sizeof(b5));
			fmt_bytes(r, st.store_bytes, b6, sizeof(b6));
			int64_t ms = nd_index_creation_ms(ixs[i]);
			time_t cs = (time_t)(ms / 1000);
			struct tm ctm;
			gmtime_r(&cs, &ctm);
			snprintf(cd, sizeof(cd), "%lld", (long long)ms);
			strftime(cds, sizeof(cds), "%Y-%m-%dT%H:%M:%S", &ctm);
			snprintf(cds + strlen(cds), sizeof(cds) - strlen(cds), ".%03dZ",
			         (int)(ms % 1000));
			/* a closed index keeps its copies (health) but shows no counts */
			bool closed = nd_index_closed(ixs[i]);
			cat_row(&t, h.status, closed ? "close" : "open", nd_index_name(ixs[i]),
			        nd_index_uuid(ixs[i]), b1, b2, closed ? "" : b3, closed ? "" : b4,
			        closed ? "" : b5, closed ? "" : b6, cd, cds);
		}
	} else if (strcmp(what, "shards") == 0) {
		static const char *cols[] = {"index", "shard", "prirep", "state",
		                             "docs",  "store", "ip",     "node"};
		cat_init(&t, cols, 8);
		t.numeric[1] = t.numeric[4] = t.numeric[5] = true;
		for (size_t i = 0; i < n; i++) {
			for (int s = 0; s < nd_index_nshards(ixs[i]); s++) {
				st_shard_stats st;
				st_shard_stats_get(nd_index_shard(ixs[i], s), &st);
				snprintf(b1, sizeof(b1), "%d", s);
				snprintf(b2, sizeof(b2), "%llu", (unsigned long long)st.docs);
				fmt_bytes(r, st.store_bytes, b3, sizeof(b3));
				cat_row(&t, nd_index_name(ixs[i]), b1, "p", "STARTED", b2, b3,
				        "127.0.0.1", nd_node_name(r->node));
				for (int k = 0; k < nd_index_settings(ixs[i])->number_of_replicas;
				     k++)
					cat_row(&t, nd_index_name(ixs[i]), b1, "r", "UNASSIGNED",
					        "", "", "", "");
			}
		}
	} else if (strcmp(what, "nodes") == 0) {
		cat_nodes_table(r, &t);
	} else if (strcmp(what, "count") == 0) {
		static const char *cols[] = {"epoch", "timestamp", "count"};
		uint64_t total = 0;
		cat_init(&t, cols, 3);
		t.numeric[0] = t.numeric[2] = true;
		for (size_t i = 0; i < n; i++)
			total += nd_index_visible_docs(ixs[i]);
		snprintf(b1, sizeof(b1), "%lld", (long long)(now / 1000));
		snprintf(b2, sizeof(b2), "%llu", (unsigned long long)total);
		cat_row(&t, b1, ts, b2);
	} else {
		const char *const *cols = co_cat_health_cols;
		health h;
		char b7[32];
		nd_index_list(r->node, &ixs, &n);
		health_of(ixs, n, &h);
		cat_init(&t, cols, CO_CAT_HEALTH_NCOLS);
		for (int c = 4; c < 12; c++)
			t.numeric[c] = true;
		snprintf(b1, sizeof(b1), "%lld", (long long)(now / 1000));
		snprintf(b2, sizeof(b2), "%d", h.active);
		snprintf(b3, sizeof(b3), "%d", h.active_primary);
		snprintf(b4, sizeof(b4), "%d", h.unassigned);
		snprintf(b7, sizeof(b7), "%.1f%%",
		         h.active + h.unassigned ? 100.0 * h.active / (h.active + h.unassigned)
		                                 : 100.0);
		cat_row(&t, b1, ts, nd_cluster_name(r->node), h.status, "1", "1", b2, b3, "0", "0",
		        b4, "0", "-", b7);
	}
	if (ixs)
		co_release_all(ixs, n);
	cat_render(r, &t);
}

/* ---- stats ---- */

typedef struct agg_stats {
	st_shard_stats sh;
	nd_index_stats c;
	uint64_t visible;
	nd_request_cache_stats rc;
} agg_stats;

static void
collect_stats(nd_index *ix, agg_stats *a)
{
	nd_index_stats *c = nd_index_counters(ix);
	st_shard_stats s;
	nd_index_shard_stats(ix, &s);
	a->sh.docs += s.docs;
	a->sh.deleted_docs += s.deleted_docs;
	a->sh.store_bytes += s.store_bytes;
	a->sh.segments += s.segments;
	a->sh.refreshes += s.refreshes;
	a->sh.flushes += s.flushes;
	a->sh.merges += s.merges;
	a->sh.indexing_buffer_bytes += s.indexing_buffer_bytes;
	a->c.index_total += ld(&c->index_total);
	a->c.index_time_ns += ld(&c->index_time_ns);
	a->c.index_failed += ld(&c->index_failed);
	a->c.delete_total += ld(&c->delete_total);
	a->c.delete_time_ns += ld(&c->delete_time_ns);
	a->c.get_total += ld(&c->get_total);
	a->c.get_time_ns += ld(&c->get_time_ns);
	a->c.query_total += ld(&c->query_total);
	a->c.query_time_ns += ld(&c->query_time_ns);
	a->c.fetch_total += ld(&c->fetch_total);
	a->c.scroll_total += ld(&c->scroll_total);
	a->c.refresh_total += ld(&c->refresh_total);
	a->c.flush_total += ld(&c->flush_total);
	nd_request_cache_stats rc;
	nd_request_cache_stats_get(NULL, ix, &rc);
	a->rc.memory_bytes += rc.memory_bytes;
	a->rc.evictions += rc.evictions;
	a->rc.hits += rc.hits;
	a->rc.misses += rc.misses;
}

static cJSON *
stats_json(const agg_stats *a)
{
	cJSON *j = cJSON_CreateObject(), *o;
	o = cJSON_AddObjectToObject(j, "docs");
	cJSON_AddNumberToObject(o, "count", (double)a->sh.docs);
	cJSON_AddNumberToObject(o, "deleted", (double)a->sh.deleted_docs);
	o = cJSON_AddObjectToObject(j, "store");
	cJSON_AddNumberToObject(o, "size_in_bytes", (double)a->sh.store_bytes);
	cJSON_AddNumberToObject(o, "reserved_in_bytes", 0);
	o = cJSON_AddObjectToObject(j, "indexing");
	cJSON_AddNumberToObject(o, "index_total", (double)a->c.index_total);
	cJSON_AddNumberToObject(o, "index_time_in_millis", (double)(a->c.index_time_ns / 1000000));
	cJSON_AddNumberToObject(o, "index_current", 0);
	cJSON_AddNumberToObject(o, "index_failed", (double)a->c.index_failed);
	cJSON_AddNumberToObject(o, "delete_total", (double)a->c.delete_total);
	cJSON_AddNumberToObject(o, "delete_time_in_millis",
	                        (double)(a->c.delete_time_ns / 1000000));
	cJSON_AddNumberToObject(o, "delete_current", 0);
	o = cJSON_AddObjectToObject(j, "get");
	cJSON_AddNumberToObject(o, "total", (double)a->c.get_total);
	cJSON_AddNumberToObject(o, "time_in_millis", (double)(a->c.get_time_ns / 1000000));
	o = cJSON_AddObjectToObject(j, "search");
	cJSON_AddNumberToObject(o, "open_contexts", 0);
	cJSON_AddNumberToObject(o, "query_total", (double)a->c.query_total);
	cJSON_AddNumberToObject(o, "query_time_in_millis", (double)(a->c.query_time_ns / 1000000));
	cJSON_AddNumberToObject(o, "query_current", 0);
	cJSON_AddNumberToObject(o, "fetch_total", (double)a->c.fetch_total);
	cJSON_AddNumberToObject(o, "scroll_total", (double)a->c.scroll_total);
	o = cJSON_AddObjectToObject(j, "refresh");
	cJSON_AddNumberToObject(o, "total", (double)a->c.refresh_total);
	o = cJSON_AddObjectToObject(j, "flush");
	cJSON_AddNumberToObject(o, "total", (double)a->c.flush_total);
	o = cJSON_AddObjectToObject(j, "merges");
	cJSON_AddNumberToObject(o, "total", (double)a->sh.merges);
	o = cJSON_AddObjectToObject(j, "segments");
	cJSON_AddNumberToObject(o, "count", (double)a->sh.segments);
	/* the indexing buffers (every shard's, under its one budget) */
	cJSON_AddNumberToObject(o, "index_writer_memory_in_bytes",
	                        (double)a->sh.indexing_buffer_bytes);
	/* Shoal keeps no query cache and no fielddata (doc values serve
	 * aggregations and sorts): their figures are zero, as ES's unused */
	o = cJSON_AddObjectToObject(j, "query_cache");
	cJSON_AddNumberToObject(o, "memory_size_in_bytes", 0);
	cJSON_AddNumberToObject(o, "total_count", 0);
	cJSON_AddNumberToObject(o, "hit_count", 0);
	cJSON_AddNumberToObject(o, "miss_count", 0);
	cJSON_AddNumberToObject(o, "cache_size", 0);
	cJSON_AddNumberToObject(o, "cache_count", 0);
	cJSON_AddNumberToObject(o, "evictions", 0);
	o = cJSON_AddObjectToObject(j, "fielddata");
	cJSON_AddNumberToObject(o, "memory_size_in_bytes", 0);
	cJSON_AddNumberToObject(o, "evictions", 0);
	o = cJSON_AddObjectToObject(j, "request_cache");
	cJSON_AddNumberToObject(o, "memory_size_in_bytes", (double)a->rc.memory_bytes);
	cJSON_AddNumberToObject(o, "evictions", (double)a->rc.evictions);
	cJSON_AddNumberToObject(o, "hit_count", (double)a->rc.hits);
	cJSON_AddNumberToObject(o, "miss_count", (double)a->rc.misses);
	return j;
}

static double
num_at(const cJSON *arr, int k)
{
	const cJSON *v = cJSON_GetArrayItem(arr, k);
	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* ---- ?groups=: the search stats groups in a _stats reply ---- */

/* Whether want (a comma-separated list of names and wildcards) names g. */
static bool
group_wanted(const char *want, const char *g)
{
	char pat[256];
	for (const char *p = want; *p;) {
		size_t n = strcspn(p, ",");
		if (n < sizeof(pat)) {
			memcpy(pat, p, n);
			pat[n] = 0;
			if (fnmatch(pat, g, 0) == 0)
				return true;
		}
		p += n + (p[n] == ',');
	}
	return false;
}

/* Adds g's counters to the group of its name in *acc. */
static void
group_sum(nd_search_group **acc, size_t *n, const nd_search_group *g)
{
	size_t i = 0;
	while (i < *n && strcmp((*acc)[i].name, g->name))
		i++;
	if (i == *n) {
		*acc = cm_realloc(MEM, *acc, (*n + 1) * sizeof(**acc));
		(*acc)[i] = *g;
		(*n)++;
		return;
	}
	(*acc)[i].query_total += g->query_total;
	(*acc)[i].query_time_ns += g->query_time_ns;
	(*acc)[i].fetch_total += g->fetch_total;
	(*acc)[i].scroll_total += g->scroll_total;
}

/* search.groups in the primaries and total of o (an index's entry or
 * _all): the groups want names, each with ES's search figures. */
static void
put_groups(cJSON *o, const nd_search_group *g, size_t n, const char *want)
{
	static const char *const secs[] = {"primaries", "total"};
	for (size_t k = 0; k < 2; k++) {
		cJSON *search = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(o, secs[k]), "search");
		if (!search)
			continue;
		cJSON *gj = cJSON_CreateObject();
		for (size_t i = 0; i < n; i++) {
			if (!group_wanted(want, g[i].name))
				continue;
			cJSON *x = cJSON_AddObjectToObject(gj, g[i].name);
			cJSON_AddNumberToObject(x, "query_total", (double)g[i].query_total);
			cJSON_AddNumberToObject(x, "query_time_in_millis",
			                        (double)(g[i].query_time_ns / 1000000));
			cJSON_AddNumberToObject(x, "query_current", 0);
			cJSON_AddNumberToObject(x, "fetch_total", (double)g[i].fetch_total);
			cJSON_AddNumberToObject(x, "fetch_time_in_millis", 0);
			cJSON_AddNumberToObject(x, "fetch_current", 0);
			cJSON_AddNumberToObject(x, "scroll_total", (double)g[i].scroll_total);
			cJSON_AddNumberToObject(x, "scroll_time_in_millis", 0);
			cJSON_AddNumberToObject(x, "scroll_current", 0);
			cJSON_AddNumberToObject(x, "suggest_total", 0);
			cJSON_AddNumberToObject(x, "suggest_time_in_millis", 0);
			cJSON_AddNumberToObject(x, "suggest_current", 0);
		}
		cJSON_AddItemToObject(search, "groups", gj);
	}
}

/* A node's stats groups of one index for a cluster _stats:
 * [[name, query_total, query_time_ns, fetch_total, scroll_total], ...] */
static cJSON *
groups_wire(nd_index *ix)
{
	nd_search_group *g;
	size_t n = nd_index_search_groups(ix, &g);
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < n; i++) {
		cJSON *e = cJSON_CreateArray();
		cJSON_AddItemToArray(e, cJSON_CreateString(g[i].name));
		double v[] = {(double)g[i].query_total, (double)g[i].query_time_ns,
		              (double)g[i].fetch_total, (double)g[i].scroll_total};
		for (int k = 0; k < 4; k++)
			cJSON_AddItemToArray(e, cJSON_CreateNumber(v[k]));
		cJSON_AddItemToArray(a, e);
	}
	cm_free(CM_MEM_NODE, g);
	return a;
}

/* Sums a node's groups_wire into *acc. */
static void
groups_from_wire(const cJSON *a, nd_search_group **acc, size_t *n)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, a)
	{
		const cJSON *name = cJSON_GetArrayItem(e, 0);
		if (!cJSON_IsString(name))
			continue;
		nd_search_group g;
		memset(&g, 0, sizeof(g));
		snprintf(g.name, sizeof(g.name), "%s", name->valuestring);
		g.query_total = (uint64_t)num_at(e, 1);
		g.query_time_ns = (uint64_t)num_at(e, 2);
		g.fetch_total = (uint64_t)num_at(e, 3);
		g.scroll_total = (uint64_t)num_at(e, 4);
		group_sum(acc, n, &g);
	}
}

/* One node's part of a cluster _stats: per index its counters and the
 * storage figures of each shard directory (copies it does not host are
 * empty); the coordinator picks the copies the routing names. */
static cJSON *
node_index_stats(nd_node *node)
{
	nd_index **ixs;
	size_t n;
	cJSON *j = cJSON_CreateObject();
	nd_index_list(node, &ixs, &n);
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_AddObjectToObject(j, nd_index_name(ixs[i]));
		cJSON *sh = cJSON_AddArrayToObject(o, "shards");
		for (int s = 0; s < nd_index_nshards(ixs[i]); s++) {
			st_shard_stats st;
			st_shard_stats_get(nd_index_shard(ixs[i], s), &st);
			double v[] = {(double)st.docs, (double)st.deleted_docs,
			              (double)st.store_bytes, (double)st.segments,
			              (double)st.merges};
			cJSON_AddItemToArray(sh, cJSON_CreateDoubleArray(v, 5));
		}
		agg_stats a;
		memset(&a, 0, sizeof(a));
		collect_stats(ixs[i], &a);
		double c[] = {
		    (double)a.c.index_total,  (double)a.c.index_time_ns,  (double)a.c.index_failed,
		    (double)a.c.delete_total, (double)a.c.delete_time_ns, (double)a.c.get_total,
		    (double)a.c.get_time_ns,  (double)a.c.query_total,    (double)a.c.query_time_ns,
		    (double)a.c.fetch_total,  (double)a.c.scroll_total,   (double)a.c.refresh_total,
		    (double)a.c.flush_total,  (double)a.rc.memory_bytes,  (double)a.rc.evictions,
		    (double)a.rc.hits,        (double)a.rc.misses};
		cJSON_AddItemToObject(o, "counters", cJSON_CreateDoubleArray(c, 17));
		cJSON_AddItemToObject(o, "groups", groups_wire(ixs[i]));
	}
	co_release_all(ixs, n);
	return j;
}

static void
add_shard(agg_stats *a, const cJSON *v)
{
	a->sh.docs += (uint64_t)num_at(v, 0);
	a->sh.deleted_docs += (uint64_t)num_at(v, 1);
	a->sh.store_bytes += (uint64_t)num_at(v, 2);
	a->sh.segments += (uint64_t)num_at(v, 3);
	a->sh.merges += (uint64_t)num_at(v, 4);
}

static void
add_counters(agg_stats *a, const cJSON *c)
{
	uint64_t *f[] = {&a->c.index_total,  &a->c.index_time_ns,  &a->c.index_failed,
	                 &a->c.delete_total, &a->c.delete_time_ns, &a->c.get_total,
	                 &a->c.get_time_ns,  &a->c.query_total,    &a->c.query_time_ns,
	                 &a->c.fetch_total,  &a->c.scroll_total,   &a->c.refresh_total,
	                 &a->c.flush_total,  &a->rc.memory_bytes,  &a->rc.evictions,
	                 &a->rc.hits,        &a->rc.misses};
	for (int k = 0; k < 17; k++)
		*f[k] += (uint64_t)num_at(c, k);
}

/* _stats over the cluster: every node asked (bounded; those that did not
 * answer are listed in _nodes.failed); docs and store of the primaries and
 * of every started copy the routing names, counters summed over nodes. */
static bool
cluster_stats(co_req *r, nd_index **ixs, size_t n, cJSON **out)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	if (!cl)
		return false;
	int nodes_total = 0, nodes_failed = 0, copies = 0, answered = 0;
	cJSON *per = nd_cluster_nodes_info(cl, "index_stats", &nodes_total, &nodes_failed);
	cJSON *state = nd_cluster_state_json(cl);
	cJSON *rt = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(state, "routing_table"), "indices");
	agg_stats allp, allt;
	memset(&allp, 0, sizeof(allp));
	memset(&allt, 0, sizeof(allt));
	const char *want_groups = co_param_get(r, "groups");
	nd_search_group *all_groups = NULL;
	size_t nall_groups = 0;
	cJSON *j = cJSON_CreateObject(), *ind;
	cJSON *sh = cJSON_AddObjectToObject(j, "_shards");
	cJSON *allj = cJSON_AddObjectToObject(j, "_all");
	ind = cJSON_AddObjectToObject(j, "indices");
	for (size_t i = 0; i < n; i++) {
		const char *name = nd_index_name(ixs[i]);
		agg_stats p, t;
		memset(&p, 0, sizeof(p));
		memset(&t, 0, sizeof(t));
		cJSON *shards = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(rt, name), "shards");
		cJSON *list, *copy;
		cJSON_ArrayForEach(list, shards)
		{
			int s = atoi(list->string);
			cJSON_ArrayForEach(copy, list)
			{
				const cJSON *st = cJSON_GetObjectItemCaseSensitive(copy, "state");
				const cJSON *nd = cJSON_GetObjectItemCaseSensitive(copy, "node");
				copies++;
				if (!cJSON_IsString(st) || strcmp(st->valuestring, "STARTED") ||
				    !cJSON_IsString(nd))
					continue;
				const cJSON *mine = cJSON_GetObjectItemCaseSensitive(
				    cJSON_GetObjectItemCaseSensitive(per, nd->valuestring), name);
				if (!mine)
					continue;
				answered++;
				const cJSON *v = cJSON_GetArrayItem(
				    cJSON_GetObjectItemCaseSensitive(mine, "shards"), s);
				add_shard(&t, v);
				if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(copy, "primary")))
					add_shard(&p, v);
			}
		}
		cJSON *nodej;
		cJSON_ArrayForEach(nodej, per)
		{
			const cJSON *mine = cJSON_GetObjectItemCaseSensitive(nodej, name);
			add_counters(&p, cJSON_GetObjectItemCaseSensitive(mine, "counters"));
			add_counters(&t, cJSON_GetObjectItemCaseSensitive(mine, "counters"));
		}
		cJSON *o = cJSON_AddObjectToObject(ind, name);
		cJSON_AddStringToObject(o, "uuid", nd_index_uuid(ixs[i]));
		cJSON_AddItemToObject(o, "primaries", stats_json(&p));
		cJSON_AddItemToObject(o, "total", stats_json(&t));
		if (want_groups) {
			nd_search_group *g = NULL;
			size_t ng = 0;
			cJSON_ArrayForEach(nodej, per)
			{
				groups_from_wire(
				    cJSON_GetObjectItemCaseSensitive(
				        cJSON_GetObjectItemCaseSensitive(nodej, name), "groups"),
				    &g, &ng);
			}
			put_groups(o, g, ng, want_groups);
			for (size_t k = 0; k < ng; k++)
				group_sum(&all_groups, &nall_groups, &g[k]);
			cm_free(MEM, g);
		}
		allp.sh.docs += p.sh.docs, allp.sh.deleted_docs += p.sh.deleted_docs;
		allp.sh.store_bytes += p.sh.store_bytes, allp.sh.segments += p.sh.segments;
		allp.sh.merges += p.sh.merges;
		allt.sh.docs += t.sh.docs, allt.sh.deleted_docs += t.sh.deleted_docs;
		allt.sh.store_bytes += t.sh.store_bytes, allt.sh.segments += t.sh.segments;
		allt.sh.merges += t.sh.merges;
		cJSON_ArrayForEach(nodej, per)
		{
			const cJSON *mine = cJSON_GetObjectItemCaseSensitive(nodej, name);
			add_counters(&allp, cJSON_GetObjectItemCaseSensitive(mine, "counters"));
			add_counters(&allt, cJSON_GetObjectItemCaseSensitive(mine, "counters"));
		}
	}
	cJSON_AddNumberToObject(sh, "total", copies);
	cJSON_AddNumberToObject(sh, "successful", answered);
	cJSON_AddNumberToObject(sh, "failed", copies - answered);
	cJSON_AddItemToObject(allj, "primaries", stats_json(&allp));
	cJSON_AddItemToObject(allj, "total", stats_json(&allt));
	if (want_groups)
		put_groups(allj, all_groups, nall_groups, want_groups);
	cm_free(MEM, all_groups);
	cJSON *nj = cJSON_AddObjectToObject(j, "_nodes");
	cJSON_AddNumberToObject(nj, "total", nodes_total);
	cJSON_AddNumberToObject(nj, "successful", nodes_total - nodes_failed);
	cJSON_AddNumberToObject(nj, "failed", nodes_failed);
	cJSON_Delete(per);
	cJSON_Delete(state);
	co_release_all(ixs, n);
	*out = j;
	return true;
}

/* _stats/{metric}: ES's metric names and the sections they keep. */
static const char *const stats_metrics[][2] = {
    {"docs", "docs"},       {"store", "store"},           {"indexing", "indexing"},
    {"get", "get"},         {"search", "search"},         {"refresh", "refresh"},
    {"flush", "flush"},     {"merge", "merges"},          {"segments", "segments"},
    {"query_cache", "query_cache"}, {"fielddata", "fielddata"},
    {"request_cache", "request_cache"}, {"completion", NULL}, {"translog", NULL},
    {"warmer", NULL},       {"recovery", NULL},           {"bulk", NULL},
    {"shard_stats", NULL},  {"indexing_pressure", NULL},  {"dense_vector", NULL},
    {"sparse_vector", NULL}, {"mappings", NULL}};

/* Keeps in one {"docs":..,"store":..} object the sections metrics names. */
static void
stats_keep(cJSON *o, const char *metrics)
{
	cJSON *c = o ? o->child : NULL;
	while (c) {
		cJSON *next = c->next;
		bool keep = false;
		for (size_t i = 0; i < sizeof(stats_metrics) / sizeof(stats_metrics[0]); i++) {
			const char *sec = stats_metrics[i][1];
			if (!sec || strcmp(sec, c->string))
				continue;
			size_t ml = strlen(stats_metrics[i][0]);
			for (const char *m = metrics; m && *m;) {
				const char *e = strchr(m, ',');
				size_t l = e ? (size_t)(e - m) : strlen(m);
				keep |= l == ml && !strncmp(m, stats_metrics[i][0], l);
				m = e ? e + 1 : NULL;
			}
		}
		if (!keep)
			cJSON_Delete(cJSON_DetachItemViaPointer(o, c));
		c = next;
	}
}

/* The metric segment of _stats/{metric}: NULL for all; false (a 400
 * replied) when it names one ES does not know. */
static bool
stats_metric(co_req *r, const char **out)
{
	const char *m = NULL;
	for (int i = 0; i + 1 < r->nsegs; i++)
		if (!strcmp(co_seg(r, i), "_stats"))
			m = co_seg(r, i + 1);
	*out = NULL;
	if (!m || !strcmp(m, "_all"))
		return true;
	for (const char *p = m; p && *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		bool known = l == 4 && !strncmp(p, "_all", 4);
		for (size_t i = 0; i < sizeof(stats_metrics) / sizeof(stats_metrics[0]); i++)
			known |= strlen(stats_metrics[i][0]) == l && !strncmp(p, stats_metrics[i][0], l);
		if (!known) {
			char name[101], all[400] = "_all", dym[200];
			snprintf(name, sizeof name, "%.*s", (int)(l < 100 ? l : 100), p);
			for (size_t i = 0; i < sizeof(stats_metrics) / sizeof(stats_metrics[0]);
			     i++) {
				size_t at = strlen(all);
				snprintf(all + at, sizeof all - at, ",%s", stats_metrics[i][0]);
			}
			bool any = cm_did_you_mean(name, all, dym, sizeof dym);
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "request [%s] contains unrecognized metric: [%s]%s%s%s",
			                r->path, name, any ? " -> did you mean " : "", dym,
			                any ? "?" : "");
			return false;
		}
		if (l == 4 && !strncmp(p, "_all", 4))
			return true;
		p = e ? e + 1 : NULL;
	}
	*out = m;
	return true;
}

static void
stats_reply(co_req *r, cJSON *j, const char *metrics)
{
	if (metrics) {
		cJSON *all = cJSON_GetObjectItemCaseSensitive(j, "_all"), *ix;
		stats_keep(cJSON_GetObjectItemCaseSensitive(all, "primaries"), metrics);
		stats_keep(cJSON_GetObjectItemCaseSensitive(all, "total"), metrics);
		cJSON_ArrayForEach(ix, cJSON_GetObjectItemCaseSensitive(j, "indices"))
		{
			stats_keep(cJSON_GetObjectItemCaseSensitive(ix, "primaries"), metrics);
			stats_keep(cJSON_GetObjectItemCaseSensitive(ix, "total"), metrics);
		}
	}
	/* level=cluster: the _all figures only */
	const char *level = co_param_get(r, "level");
	if (level && !strcmp(level, "cluster"))
		cJSON_DeleteItemFromObjectCaseSensitive(j, "indices");
	co_reply_json(r, 200, j);
}

void
co_h_stats(co_req *r)
{
	nd_index **ixs;
	size_t n;
	agg_stats all;
	int shards = 0;
	cJSON *j, *allj, *ind;

	const char *metrics;
	if (!stats_metric(r, &metrics))
		return;
	const char *level = co_param_get(r, "level");
	if (level && strcmp(level, "cluster") && strcmp(level, "indices") &&
	    strcmp(level, "shards")) {
		co_reply_errorf(
		    r, CM_EINVAL, NULL,
		    "level parameter must be one of [cluster] or [indices] or [shards] but "
		    "was [%.60s]",
		    level);
		return;
	}
	if (!co_resolve(r, co_seg(r, 0) && strcmp(co_seg(r, 0), "_stats") ? co_seg(r, 0) : "_all",
	                &ixs, &n))
		return;
	if (cluster_stats(r, ixs, n, &j)) {
		stats_reply(r, j, metrics);
		return;
	}
	memset(&all, 0, sizeof(all));
	const char *want_groups = co_param_get(r, "groups");
	nd_search_group *all_groups = NULL;
	size_t nall_groups = 0;
	j = cJSON_CreateObject();
	int copies = 0; /* ES counts every copy; a solo node's replicas are unassigned */
	for (size_t i = 0; i < n; i++) {
		shards += nd_index_nshards(ixs[i]);
		copies += nd_index_nshards(ixs[i]) *
		          (1 + nd_index_settings(ixs[i])->number_of_replicas);
	}
	cJSON_AddItemToObject(j, "_shards", co_shards_json(copies, shards, 0));
	allj = cJSON_AddObjectToObject(j, "_all");
	ind = cJSON_AddObjectToObject(j, "indices");
	for (size_t i = 0; i < n; i++) {
		agg_stats a;
		memset(&a, 0, sizeof(a));
		collect_stats(ixs[i], &a);
		collect_stats(ixs[i], &all);
		cJSON *o = cJSON_AddObjectToObject(ind, nd_index_name(ixs[i]));
		cJSON_AddStringToObject(o, "uuid", nd_index_uuid(ixs[i]));
		cJSON_AddItemToObject(o, "primaries", stats_json(&a));
		cJSON_AddItemToObject(o, "total", stats_json(&a));
		if (want_groups) {
			nd_search_group *g;
			size_t ng = nd_index_search_groups(ixs[i], &g);
			put_groups(o, g, ng, want_groups);
			for (size_t k = 0; k < ng; k++)
				group_sum(&all_groups, &nall_groups, &g[k]);
			cm_free(CM_MEM_NODE, g);
		}
	}
	cJSON_AddItemToObject(allj, "primaries", stats_json(&all));
	cJSON_AddItemToObject(allj, "total", stats_json(&all));
	if (want_groups)
		put_groups(allj, all_groups, nall_groups, want_groups);
	cm_free(MEM, all_groups);
	co_release_all(ixs, n);
	stats_reply(r, j, metrics);
}

/* ---- _cache/clear ---- */

static const char *index_expr(co_req *r);

/* A node's side of a cluster's _cache/clear: the request cache of the
 * named indices ("" = all) on this node. */
static cJSON *
cache_clear_upcall(nd_node *node, const char *names)
{
	if (!*names) {
		nd_request_cache_clear(node, NULL);
		return cJSON_CreateObject();
	}
	char *copy = cm_strdup(MEM, names), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		nd_index *ix = nd_index_get(node, t);
		if (ix) {
			nd_request_cache_clear(NULL, ix);
			nd_index_release(ix);
		}
	}
	cm_free(MEM, copy);
	return cJSON_CreateObject();
}

/* POST _cache/clear: the request cache is Shoal's only cache of results
 * (query and fielddata have nothing to clear). */
void
co_h_cache_clear(co_req *r)
{
	nd_index **ixs;
	size_t n;
	int total = 0;
	bool req = co_param_bool(r, "request", false);
	bool query = co_param_bool(r, "query", false), fd = co_param_bool(r, "fielddata", false);
	co_param_get(r, "fields");
	if (!co_resolve(r, co_param_get(r, "index") ? co_param_get(r, "index") : index_expr(r), &ixs,
	                &n))
		return;
	cm_buf names;
	cm_buf_init(&names, MEM);
	cm_buf_printf(&names, "request_cache_clear ");
	for (size_t i = 0; i < n; i++) {
		total += nd_index_nshards(ixs[i]) * (1 + nd_index_settings(ixs[i])->number_of_replicas);
		cm_buf_printf(&names, "%s%s", i ? "," : "", nd_index_name(ixs[i]));
	}
	cm_buf_put(&names, "", 1);
	if (n && (req || (!query && !fd))) {
		nd_cluster *cl = nd_cluster_of(r->node);
		if (cl) {
			int nt = 0, nf = 0;
			cJSON_Delete(nd_cluster_nodes_info(cl, (const char *)names.data, &nt, &nf));
		} else {
			for (size_t i = 0; i < n; i++)
				nd_request_cache_clear(NULL, ixs[i]);
		}
	}
	cm_buf_free(&names);
	co_release_all(ixs, n);
	cJSON *j = cJSON_CreateObject();
	cJSON_AddItemToObject(j, "_shards", co_shards_json(total, total, 0));
	co_reply_json(r, 200, j);
}

static const cm_mem_tag mem_tags[] = {CM_MEM_COMMON,      CM_MEM_STORAGE, CM_MEM_SEARCH,
                                      CM_MEM_REPLICATION, CM_MEM_COORD,   CM_MEM_NODE,
                                      CM_MEM_COORDINATOR};

/* This node's _nodes/stats entry. */
/* This node's addresses in _nodes and _cluster/state: its transport on a
 * cluster node; a solo node has no transport and gives its HTTP address
 * there (docs/api.md). host is the address without the port. */
static void
node_addrs(nd_node *node, char *transport, char *host, size_t cap)
{
	nd_cluster *cl = nd_cluster_of(node);
	snprintf(transport, cap, "%s", cl ? nd_cluster_transport(cl) : co_http_publish_address());
	snprintf(host, cap, "%s", transport);
	char *colon = strrchr(host, ':');
	if (colon)
		*colon = 0;
}

static cJSON *
node_stats_entry(nd_node *node)
{
	nd_index **ixs;
	size_t n;
	agg_stats all;
	cJSON *me = cJSON_CreateObject(), *o, *mem;
	nd_node_counters *nc = nd_counters(node);

	nd_index_list(node, &ixs, &n);
	memset(&all, 0, sizeof(all));
	for (size_t i = 0; i < n; i++)
		collect_stats(ixs[i], &all);
	co_release_all(ixs, n);
	cJSON_AddNumberToObject(me, "timestamp", (double)cm_wall_ms());
	char ta[128], host[128];
	node_addrs(node, ta, host, sizeof(ta));
	cJSON_AddStringToObject(me, "name", nd_node_name(node));
	cJSON_AddStringToObject(me, "transport_address", ta);
	cJSON_AddStringToObject(me, "host", host);
	cJSON_AddStringToObject(me, "ip", ta);
	o = cJSON_AddArrayToObject(me, "roles");
	cJSON_AddItemToArray(o, cJSON_CreateString("data"));
	cJSON_AddItemToArray(o, cJSON_CreateString("ingest"));
	cJSON_AddItemToArray(o, cJSON_CreateString("master"));
	cJSON_AddItemToObject(me, "indices", stats_json(&all));
	/* search contexts held here (scroll, point in time), as ES */
	cJSON_AddNumberToObject(cJSON_GetObjectItem(cJSON_GetObjectItem(me, "indices"), "search"),
	                        "open_contexts", (double)nd_ctx_open_count(node));
	/* waits for max_snapshot_bytes_per_sec (snapshot and restore copies) */
	o = cJSON_AddObjectToObject(me, "snapshots");
	cJSON_AddNumberToObject(o, "throttle_time_in_millis", (double)nd_snap_throttle_ms());
	o = cJSON_AddObjectToObject(me, "process");
	cJSON_AddNumberToObject(o, "timestamp", (double)cm_wall_ms());
	cJSON_AddNumberToObject(o, "open_file_descriptors", 0);
	cJSON *cpu = cJSON_AddObjectToObject(o, "cpu");
	cJSON_AddNumberToObject(cpu, "total_in_millis", (double)(int64_t)(cm_cpu_seconds() * 1000));
	cJSON *pm = cJSON_AddObjectToObject(o, "mem");
	cJSON_AddNumberToObject(pm, "resident_in_bytes", (double)cm_rss_bytes());
	/* Shoal's own accounting: bytes held per module (cm_alloc tags). */
	mem = cJSON_AddObjectToObject(me, "shoal");
	cJSON *mm = cJSON_AddObjectToObject(mem, "memory");
	int64_t total = 0;
	for (size_t i = 0; i < sizeof(mem_tags) / sizeof(mem_tags[0]); i++) {
		char key[64];
		snprintf(key, sizeof(key), "%s_in_bytes", cm_mem_tag_name(mem_tags[i]));
		cJSON_AddNumberToObject(mm, key, (double)cm_mem_used(mem_tags[i]));
		total += cm_mem_used(mem_tags[i]);
	}
	cJSON_AddNumberToObject(mm, "total_in_bytes", (double)total);
	o = cJSON_AddObjectToObject(me, "http");
	cJSON_AddNumberToObject(o, "current_open", (double)ld(&nc->http_open));
	cJSON_AddNumberToObject(o, "total_opened", (double)ld(&nc->http_opened));
	cJSON_AddNumberToObject(o, "requests_total", (double)ld(&nc->http_requests));
	o = cJSON_AddObjectToObject(me, "thread_pool");
	cJSON *sp = cJSON_AddObjectToObject(o, "search");
	cJSON_AddNumberToObject(sp, "rejected", (double)ld(&nc->search_rejected));
	/* copy ranking and hedges (cluster only) */
	nd_cluster_tail_stats(nd_cluster_of(node), me);
	nd_cluster_state_stats(nd_cluster_of(node), me);
	return me;
}

/* This node's _nodes entry. */
static cJSON *
node_info_entry(nd_node *node)
{
	cJSON *me = cJSON_CreateObject(), *o;
	char ta[128], host[128];
	node_addrs(node, ta, host, sizeof(ta));
	cJSON_AddStringToObject(me, "name", nd_node_name(node));
	cJSON_AddStringToObject(me, "transport_address", ta);
	cJSON_AddStringToObject(me, "host", host);
	cJSON_AddStringToObject(me, "ip", host);
	cJSON_AddStringToObject(me, "version", ND_ES_VERSION);
	cJSON_AddStringToObject(me, "build_flavor", "default");
	cJSON_AddStringToObject(me, "build_type", "tar");
	o = cJSON_AddArrayToObject(me, "roles");
	cJSON_AddItemToArray(o, cJSON_CreateString("data"));
	cJSON_AddItemToArray(o, cJSON_CreateString("ingest"));
	cJSON_AddItemToArray(o, cJSON_CreateString("master"));
	o = cJSON_AddObjectToObject(me, "http");
	nd_cluster *cl = nd_cluster_of(node);
	const char *http = cl ? nd_cluster_http(cl) : co_http_publish_address();
	cJSON *bound = cJSON_AddArrayToObject(o, "bound_address");
	cJSON_AddItemToArray(bound, cJSON_CreateString(http));
	cJSON_AddStringToObject(o, "publish_address", http);
	cJSON_AddNumberToObject(o, "max_content_length_in_bytes", (double)co_http_max_content());
	return me;
}

static cJSON *prom_entry(nd_node *node);

cJSON *
co_node_entry(void *node, const char *kind)
{
	if (strncmp(kind, "tasks ", 6) == 0) /* a question about this node's tasks */
		return co_tasks_upcall(node, kind + 6);
	if (strncmp(kind, "snapshot ", 9) == 0) /* about a snapshot this node takes */
		return co_snapshot_upcall(node, kind + 9);
	if (strcmp(kind, "index_stats") == 0)
		return node_index_stats(node);
	if (strncmp(kind, "request_cache_clear ", 20) == 0)
		return cache_clear_upcall(node, kind + 20);
	if (strcmp(kind, "prometheus") == 0)
		return prom_entry(node);
	return strcmp(kind, "stats") == 0 ? node_stats_entry(node) : node_info_entry(node);
}

/* _nodes and _nodes/stats: every node of a cluster (each asked, bounded),
 * the nodes that did not answer counted in _nodes.failed. */
static void
nodes_reply(co_req *r, const char *kind)
{
	cJSON *j, *o, *nodes;
	nd_cluster *cl = nd_cluster_of(r->node);
	int total = 1, failed = 0;
	const char *node_sel = "_all", *metric_sel = "_all";
	if (strcmp(kind, "info") == 0 && !co_nodes_parse(r, &node_sel, &metric_sel))
		return;
	j = cJSON_CreateObject();
	if (cl) {
		nodes = nd_cluster_nodes_info(cl, kind, &total, &failed);
	} else {
		nodes = cJSON_CreateObject();
		cJSON_AddItemToObject(nodes, nd_node_id(r->node), co_node_entry(r->node, kind));
	}
	if (strcmp(kind, "info") == 0) {
		co_nodes_select(r, nodes, node_sel, metric_sel);
		total = cJSON_GetArraySize(nodes) + failed;
	}
	o = cJSON_AddObjectToObject(j, "_nodes");
	cJSON_AddNumberToObject(o, "total", total);
	cJSON_AddNumberToObject(o, "successful", total - failed);
	cJSON_AddNumberToObject(o, "failed", failed);
	cJSON_AddStringToObject(j, "cluster_name", nd_cluster_name(r->node));
	cJSON_AddItemToObject(j, "nodes", nodes);
	co_reply_json(r, 200, j);
}

void
co_h_nodes_stats(co_req *r)
{
	nodes_reply(r, "stats");
}

void
co_h_nodes(co_req *r)
{
	nodes_reply(r, "info");
}

/* This node's metrics in the Prometheus text format, into b. */
static void
prom_local(nd_node *node, cm_buf *b_out)
{
	nd_index **ixs;
	size_t n;
	cm_buf b = *b_out;
	nd_node_counters *nc = nd_counters(node);

	nd_index_list(node, &ixs, &n);
	cm_buf_printf(&b, "# HELP shoal_index_docs Documents in the index (refreshed).\n"
	                  "# TYPE shoal_index_docs gauge\n");
	agg_stats *st = cm_calloc(MEM, n + 1, sizeof(agg_stats));
	for (size_t i = 0; i < n; i++) {
		collect_stats(ixs[i], &st[i]);
		cm_buf_printf(&b, "shoal_index_docs{index=\"%s\"} %llu\n", nd_index_name(ixs[i]),
		              (unsigned long long)st[i].sh.docs);
	}
#define PROM(name, type, help, field, scale)                                                       \
	do {                                                                                       \
		cm_buf_printf(&b, "# HELP " name " " help "\n# TYPE " name " " type "\n");         \
		for (size_t i = 0; i < n; i++)                                                     \
			cm_buf_printf(&b, name "{index=\"%s\"} %.6g\n", nd_index_name(ixs[i]),     \
			              (double)st[i].field / (scale));                              \
	} while (0)
	PROM("shoal_index_deleted_docs", "gauge", "Deleted documents not yet merged away.",
	     sh.deleted_docs, 1);
	PROM("shoal_index_store_bytes", "gauge", "Bytes on disk.", sh.store_bytes, 1);
	PROM("shoal_index_segments", "gauge", "Segments.", sh.segments, 1);
	PROM("shoal_indexing_docs_total", "counter", "Documents indexed.", c.index_total, 1);
	PROM("shoal_indexing_seconds_total", "counter", "Time spent indexing.", c.index_time_ns,
	     1e9);
	PROM("shoal_indexing_failed_total", "counter", "Failed index operations.", c.index_failed,
	     1);
	PROM("shoal_delete_docs_total", "counter", "Documents deleted.", c.delete_total, 1);
	PROM("shoal_search_query_total", "counter", "Shard queries run.", c.query_total, 1);
	PROM("shoal_search_query_seconds_total", "counter", "Time spent in shard queries.",
	     c.query_time_ns, 1e9);
	PROM("shoal_get_total", "counter", "Document gets.", c.get_total, 1);
	PROM("shoal_refresh_total", "counter", "Refreshes.", c.refresh_total, 1);
#undef PROM
	cm_free(MEM, st);
	co_release_all(ixs, n);
	cm_buf_printf(&b, "# HELP shoal_memory_bytes Bytes held per module (accounted allocator).\n"
	                  "# TYPE shoal_memory_bytes gauge\n");
	for (size_t i = 0; i < sizeof(mem_tags) / sizeof(mem_tags[0]); i++)
		cm_buf_printf(&b, "shoal_memory_bytes{module=\"%s\"} %lld\n",
		              cm_mem_tag_name(mem_tags[i]), (long long)cm_mem_used(mem_tags[i]));
	cm_buf_printf(
	    &b,
	    "# HELP shoal_process_resident_bytes Resident memory.\n"
	    "# TYPE shoal_process_resident_bytes gauge\nshoal_process_resident_bytes %llu\n"
	    "# HELP shoal_process_cpu_seconds_total CPU time.\n"
	    "# TYPE shoal_process_cpu_seconds_total counter\n"
	    "shoal_process_cpu_seconds_total %.3f\n"
	    "# HELP shoal_http_requests_total HTTP requests received.\n"
	    "# TYPE shoal_http_requests_total counter\nshoal_http_requests_total %llu\n"
	    "# HELP shoal_http_open_connections Open HTTP connections.\n"
	    "# TYPE shoal_http_open_connections gauge\nshoal_http_open_connections %llu\n"
	    "# HELP shoal_search_rejected_total Searches rejected with 429.\n"
	    "# TYPE shoal_search_rejected_total counter\nshoal_search_rejected_total %llu\n"
	    "# HELP shoal_uptime_seconds Seconds since the node started.\n"
	    "# TYPE shoal_uptime_seconds gauge\nshoal_uptime_seconds %.3f\n",
	    (unsigned long long)cm_rss_bytes(), cm_cpu_seconds(),
	    (unsigned long long)ld(&nc->http_requests), (unsigned long long)ld(&nc->http_open),
	    (unsigned long long)ld(&nc->search_rejected),
	    (cm_wall_ms() - nd_start_ms(node)) / 1000.0);
	*b_out = b;
}

static cJSON *
prom_entry(nd_node *node)
{
	cm_buf b;
	cm_buf_init(&b, MEM);
	prom_local(node, &b);
	cm_buf_put_u8(&b, 0);
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "text", (const char *)b.data);
	cm_buf_free(&b);
	return j;
}

typedef struct prom_metric {
	char name[128];
	char *head; /* HELP and TYPE lines */
	cm_buf samples;
} prom_metric;

/* Every node's metrics, each sample labelled node="NAME", grouped by
 * metric (HELP and TYPE once); shoal_node_up says who answered. */
static void
prom_cluster(nd_cluster *cl, cm_buf *out)
{
	int total = 0, failed = 0;
	cJSON *per = nd_cluster_nodes_info(cl, "prometheus", &total, &failed), *nj;
	prom_metric *m = NULL;
	size_t nm = 0;
	cJSON_ArrayForEach(nj, per)
	{
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(nj, "text");
		if (!cJSON_IsString(t))
			continue;
		char *copy = cm_strdup(MEM, t->valuestring), *save = NULL, *line;
		prom_metric *cur = NULL;
		for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char name[128];
			bool comment = line[0] == '#';
			const char *p = comment ? line + 7 : line; /* "# HELP " / "# TYPE " */
			size_t k = 0;
			if (comment && strlen(line) < 8)
				continue;
			while (p[k] && p[k] != ' ' && p[k] != '{' && k < sizeof(name) - 1)
				name[k] = p[k], k++;
			name[k] = 0;
			cur = NULL;
			for (size_t i = 0; i < nm && !cur; i++)
				if (strcmp(m[i].name, name) == 0)
					cur = &m[i];
			if (!cur) {
				m = cm_realloc(MEM, m, (nm + 1) * sizeof(*m));
				cur = &m[nm++];
				snprintf(cur->name, sizeof(cur->name), "%s", name);
				cur->head = cm_strdup(MEM, "");
				cm_buf_init(&cur->samples, MEM);
			}
			if (comment) {
				if (!strstr(cur->head, line)) {
					size_t l = strlen(cur->head) + strlen(line) + 2;
					char *h = cm_malloc(MEM, l);
					snprintf(h, l, "%s%s\n", cur->head, line);
					cm_free(MEM, cur->head);
					cur->head = h;
				}
				continue;
			}
			const char *rest = line + k;
			if (*rest == '{')
				cm_buf_printf(&cur->samples, "%s{node=\"%s\",%s\n", name,
				              nj->string, rest + 1);
			else
				cm_buf_printf(&cur->samples, "%s{node=\"%s\"}%s\n", name,
				              nj->string, rest);
		}
		cm_free(MEM, copy);
	}
	cm_buf_printf(out, "# HELP shoal_node_up Whether the node answered this scrape.\n"
	                   "# TYPE shoal_node_up gauge\n");
	for (int i = 0; i < nd_cluster_nnodes(cl); i++) {
		const char *nm2 = nd_cluster_node_name(cl, i);
		cm_buf_printf(out, "shoal_node_up{node=\"%s\"} %d\n", nm2,
		              cJSON_GetObjectItemCaseSensitive(per, nm2) != NULL);
	}
	for (size_t i = 0; i < nm; i++) {
		cm_buf_printf(out, "%s", m[i].head);
		if (m[i].samples.len)
			cm_buf_put(out, m[i].samples.data, m[i].samples.len);
		cm_free(MEM, m[i].head);
		cm_buf_free(&m[i].samples);
	}
	cm_free(MEM, m);
	cJSON_Delete(per);
}

void
co_h_prometheus(co_req *r)
{
	cm_buf b;
	nd_cluster *cl = nd_cluster_of(r->node);
	cm_buf_init(&b, MEM);
	if (cl)
		prom_cluster(cl, &b);
	else
		prom_local(r->node, &b);
	co_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", (const char *)b.data,
	              b.len);
	cm_buf_free(&b);
}

/* ---- index management ---- */

/* A mapping under the single key "_doc": ES's typed form, which the
 * typeless API refuses (MapperService.isMappingSourceTyped). */
static bool
mapping_typed(const cJSON *m)
{
	return cJSON_IsObject(m) && m->child && !m->child->next && cJSON_IsObject(m->child) &&
	       !strcmp(m->child->string, "_doc");
}

void
co_h_index_put(co_req *r)
{
	const char *name = co_seg(r, 0);
	bool bad;
	cJSON *body = co_body_json(r, &bad), *j;
	cm_error err;
	nd_index *ix = NULL;

	if (bad)
		return;
	if (!co_param_bool(r, "include_type_name", false) &&
	    mapping_typed(cJSON_GetObjectItemCaseSensitive(body, "mappings"))) {
		cJSON_Delete(body);
		co_reply_errorf(
		    r, CM_EINVAL, NULL,
		    "The mapping definition cannot be nested under a type [_doc] unless "
		    "include_type_name is set to true.");
		return;
	}
	cm_error_clear(&err);
	if (nd_index_name_check(name, &err) == CM_OK) {
		cJSON *full = co_template_body(r->node, name, body); /* the matching templates */
		cJSON_Delete(body);
		body = full;
	}
	cm_error_clear(&err);
	if (co_cluster_admin(r, ND_META_CREATE, name, body)) {
		cJSON_Delete(body);
		return;
	}
	cm_error_clear(&err);
	if (nd_index_create(r->node, name, body, &ix, &err)) {
		cJSON_Delete(body);
		co_reply_error(r, &err, name);
		return;
	}
	cJSON_Delete(body);
	nd_index_release(ix);
	j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "acknowledged", true);
	cJSON_AddBoolToObject(j, "shards_acknowledged", true);
	cJSON_AddStringToObject(j, "index", name);
	co_reply_json(r, 200, j);
}

void
co_h_index_delete(co_req *r)
{
	const char *expr = co_seg(r, 0);
	nd_index **ixs;
	size_t n;
	cJSON *j;

	if (nd_destructive_requires_name(r->node)) {
		char *copy = cm_strdup(MEM, expr), *save = NULL, *tok;
		bool refuse = false;
		for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			if (strcmp(tok, "_all") == 0 || strcmp(tok, "*") == 0)
				refuse = true;
		cm_free(MEM, copy);
		if (refuse) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "Wildcard expressions or all indices are not allowed");
			return;
		}
	}
	{
		/* an alias names no index to delete (Elasticsearch refuses it,
		 * or with ignore_unavailable=true passes over it); wildcards
		 * select indices only */
		bool ignore = co_param_bool(r, "ignore_unavailable", false);
		char *copy = cm_strdup(MEM, expr), *save = NULL, *tok;
		for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			nd_index *ix = strchr(tok, '*') ? NULL : nd_index_get(r->node, tok);
			if (!ix && !ignore && !strchr(tok, '*') && nd_alias_exists(r->node, tok)) {
				co_reply_errorf(
				    r, CM_EINVAL, NULL,
				    "The provided expression [%.200s] matches an alias, specify "
				    "the corresponding concrete indices instead.",
				    tok);
				cm_free(MEM, copy);
				return;
			}
			nd_index_release(ix);
		}
		cm_free(MEM, copy);
	}
	if (!resolve_with(r, expr, ND_RESOLVE_OPEN | ND_RESOLVE_CLOSED | ND_RESOLVE_NO_ALIASES, &ixs,
	                  &n))
		return;
	if (n && co_cluster_delete(r, ixs, n)) { /* none selected: nothing to ask the master */
		co_release_all(ixs, n);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		cm_error err;
		cm_error_clear(&err);
		nd_index_delete(r->node, ixs[i], &err); /* gone already: fine, it is deleted */
	}
	co_release_all(ixs, n);
	j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "acknowledged", true);
	co_reply_json(r, 200, j);
}

void
co_h_index_head(co_req *r)
{
	nd_index **ixs;
	size_t n;
	cm_error err;
	cm_error_clear(&err);
	if (nd_resolve(r->node, co_seg(r, 0), false, &ixs, &n, &err)) {
		co_reply_text(r, 404, "application/json; charset=UTF-8", "", 0);
		return;
	}
	co_reply_text(r, n ? 200 : 404, "application/json; charset=UTF-8", "", 0);
	co_release_all(ixs, n);
}

void
co_h_index_get(co_req *r)
{
	nd_index **ixs;
	size_t n;
	cJSON *j;

	/* a concrete name starting with '_' is no index name (ES refuses it) */
	const char *expr = co_seg(r, 0);
	for (const char *p = expr; p && *p;) {
		size_t len = strcspn(p, ",");
		if (p[0] == '_' && !(len == 4 && !strncmp(p, "_all", 4)) && !memchr(p, '*', len)) {
			co_reply_errorf(r, CM_EBADNAME, NULL,
			                "Invalid index name [%.*s], must not start with '_'.",
			                (int)(len < 200 ? len : 200), p);
			return;
		}
		p += len + (p[len] == ',');
	}
	if (!resolve_with(r, expr, ND_RESOLVE_OPEN | ND_RESOLVE_CLOSED, &ixs, &n))
		return;
	j = cJSON_CreateObject();
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_AddObjectToObject(j, nd_index_name(ixs[i]));
		cJSON_AddItemToObject(o, "aliases", nd_index_aliases_json(ixs[i]));
		cJSON_AddItemToObject(o, "mappings", index_mappings_json(ixs[i]));
		cJSON *st = nd_index_settings_json(ixs[i]);
		cJSON *idx = cJSON_GetObjectItemCaseSensitive(st, "index");
		if (co_param_bool(r, "human", false) && idx) {
			/* human=true: the creation date and version as text too */
			char cds[40];
			int64_t ms = nd_index_creation_ms(ixs[i]);
			time_t cs = (time_t)(ms / 1000);
			struct tm ctm;
			gmtime_r(&cs, &ctm);
			strftime(cds, sizeof(cds), "%Y-%m-%dT%H:%M:%S", &ctm);
			snprintf(cds + strlen(cds), sizeof(cds) - strlen(cds), ".%03dZ",
			         (int)(ms % 1000));
			cJSON_AddStringToObject(idx, "creation_date_string", cds);
			cJSON *ver = cJSON_GetObjectItemCaseSensitive(idx, "version");
			if (ver)
				cJSON_AddStringToObject(ver, "created_string", ND_ES_VERSION);
		}
		cJSON_AddItemToObject(o, "settings", st);
	}
	co_release_all(ixs, n);
	co_reply_json(r, 200, j);
}

static const char *
index_expr(co_req *r)
{
	const char *s = co_seg(r, 0);
	return s && s[0] != '_' ? s : (s && strcmp(s, "_all") == 0 ? s : "_all");
}

void
co_h_mapping_get(co_req *r)
{
	nd_index **ixs;
	size_t n;
	cJSON *j;

	if (!resolve_with(r, index_expr(r), ND_RESOLVE_OPEN | ND_RESOLVE_CLOSED, &ixs, &n))
		return;
	j = cJSON_CreateObject();
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_AddObjectToObject(j, nd_index_name(ixs[i]));
		cJSON_AddItemToObject(o, "mappings", index_mappings_json(ixs[i]));
	}
	co_release_all(ixs, n);
	co_reply_json(r, 200, j);
}

/* True when every key of a settings body is an index.blocks.* one (a
 * read-only index may still have its blocks changed, as in ES). */
static bool
only_blocks(const cJSON *o, const char *prefix)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, o)
	{
		char k[256];
		snprintf(k, sizeof(k), "%s%s%s", prefix, *prefix ? "." : "", c->string);
		const char *f = strncmp(k, "index.", 6) ? k : k + 6;
		if (cJSON_IsObject(c)) {
			if (!only_blocks(c, k))
				return false;
		} else if (strncmp(f, "blocks.", 7)) {
			return false;
		}
	}
	return true;
}

/* Replies the first index's metadata block (and returns true), if any. */
static bool
metadata_blocked(co_req *r, nd_index **ixs, size_t n, char op)
{
	for (size_t i = 0; i < n; i++) {
		cm_error err;
		cm_error_clear(&err);
		if (nd_index_blocked(ixs[i], op, &err)) {
			co_reply_error(r, &err, NULL);
			return true;
		}
	}
	return false;
}

void
co_h_mapping_put(co_req *r)
{
	nd_index **ixs;
	size_t n;
	bool bad;
	cJSON *body = co_body_json(r, &bad), *j;

	if (bad)
		return;
	if (!body) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: mapping source is empty;");
		return;
	}
	if (!co_param_bool(r, "include_type_name", false) && mapping_typed(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "Types cannot be provided in put mapping requests, unless the "
		                "include_type_name parameter is set to true.");
		return;
	}
	if (!co_resolve(r, co_seg(r, 0), &ixs, &n)) {
		cJSON_Delete(body);
		return;
	}
	if (metadata_blocked(r, ixs, n, 'm')) {
		co_release_all(ixs, n);
		cJSON_Delete(body);
		return;
	}
	if (co_cluster_put_mapping(r, ixs, n, body)) {
		co_release_all(ixs, n);
		cJSON_Delete(body);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		cm_error err;
		cm_error_clear(&err);
		if (nd_index_put_mapping(ixs[i], body, &err)) {
			co_reply_error(r, &err, NULL);
			co_release_all(ixs, n);
			cJSON_Delete(body);
			return;
		}
	}
	co_release_all(ixs, n);
	cJSON_Delete(body);
	j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "acknowledged", true);
	co_reply_json(r, 200, j);
}

static void
flatten_settings(cJSON *src, const char *prefix, cJSON *dst)
{
	cJSON *c;
	cJSON_ArrayForEach(c, src)
	{
		char key[256];
		if (snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", c->string) >=
		    (int)sizeof(key))
			continue; /* no setting has so long a name */
		if (cJSON_IsObject(c))
			flatten_settings(c, key, dst);
		else
			cJSON_AddItemToObject(dst, key, cJSON_Duplicate(c, true));
	}
}

/* Does a flat setting key match one of the comma-separated patterns? */
static bool
setting_wanted(const char *names, const char *key)
{
	bool hit = false;
	char *copy = cm_strdup(MEM, names), *save = NULL, *tok;
	for (tok = strtok_r(copy, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save))
		hit = !strcmp(tok, "_all") || cm_glob(tok, key);
	cm_free(MEM, copy);
	return hit;
}

/* flat (consumed) back into nested objects: "index.a.b" -> index{a{b}} */
static cJSON *
unflatten_settings(cJSON *flat)
{
	cJSON *out = cJSON_CreateObject(), *c;
	while ((c = flat->child) != NULL) {
		cJSON_DetachItemViaPointer(flat, c);
		cJSON *at = out;
		char *key = c->string, *dot;
		while ((dot = strchr(key, '.')) != NULL) {
			*dot = 0;
			cJSON *sub = cJSON_GetObjectItemCaseSensitive(at, key);
			if (!cJSON_IsObject(sub))
				sub = cJSON_AddObjectToObject(at, key);
			at = sub;
			key = dot + 1;
		}
		cJSON_AddItemToObject(at, key, cJSON_Duplicate(c, true));
		cJSON_Delete(c);
	}
	cJSON_Delete(flat);
	return out;
}

cJSON *
co_settings_normalized(const cJSON *s, bool flat)
{
	cJSON *f = cJSON_CreateObject(), *out = cJSON_CreateObject();
	flatten_settings((cJSON *)s, "", f);
	while (f->child) {
		cJSON *c = cJSON_DetachItemViaPointer(f, f->child), *v;
		char key[300], num[64];
		snprintf(key, sizeof key, "%s%s", strncmp(c->string, "index.", 6) ? "index." : "",
		         c->string);
		if (cJSON_IsNumber(c)) {
			double d = c->valuedouble;
			if (d == (double)(long long)d)
				snprintf(num, sizeof num, "%lld", (long long)d);
			else
				snprintf(num, sizeof num, "%.17g", d);
			v = cJSON_CreateString(num);
		} else if (cJSON_IsBool(c)) {
			v = cJSON_CreateString(cJSON_IsTrue(c) ? "true" : "false");
		} else {
			v = cJSON_Duplicate(c, true);
		}
		cJSON_AddItemToObject(out, key, v);
		cJSON_Delete(c);
	}
	cJSON_Delete(f);
	return flat ? out : unflatten_settings(out);
}

/* GET /_settings, /{index}/_settings, and with /{name} (setting name
 * patterns): an index none of whose settings match is left out. */
void
co_h_settings_get(co_req *r)
{
	nd_index **ixs;
	size_t n;
	cJSON *j;
	bool flat = co_param_bool(r, "flat_settings", false);
	const char *s0 = co_seg(r, 0);
	const char *names = s0 && !strcmp(s0, "_settings") ? co_seg(r, 1) : co_seg(r, 2);

	if (!resolve_with(r, index_expr(r), ND_RESOLVE_OPEN | ND_RESOLVE_CLOSED, &ixs, &n))
		return;
	j = cJSON_CreateObject();
	for (size_t i = 0; i < n; i++) {
		cJSON *s = nd_index_settings_json(ixs[i]);
		if (flat || names) {
			cJSON *f = cJSON_CreateObject();
			flatten_settings(s, "", f);
			cJSON_Delete(s);
			s = f;
		}
		if (names) {
			for (cJSON *c = s->child, *next; c; c = next) {
				next = c->next;
				if (!setting_wanted(names, c->string))
					cJSON_Delete(cJSON_DetachItemViaPointer(s, c));
			}
			if (!s->child) {
				cJSON_Delete(s);
				continue;
			}
			if (!flat)
				s = unflatten_settings(s);
		}
		cJSON *o = cJSON_AddObjectToObject(j, nd_index_name(ixs[i]));
		cJSON_AddItemToObject(o, "settings", s);
	}
	co_release_all(ixs, n);
	co_reply_json(r, 200, j);
}

/* The settings of `settings` (nested or flat, with or without "index.")
 * that ix has not set, flat with the "index." prefix: a new object. */
static cJSON *
settings_not_set(nd_index *ix, const cJSON *settings)
{
	cJSON *have = cJSON_CreateObject(), *cur = nd_index_settings_json(ix);
	cJSON *want = cJSON_CreateObject(), *out = cJSON_CreateObject(), *c;
	flatten_settings(cur, "", have);
	flatten_settings((cJSON *)settings, "", want);
	cJSON_ArrayForEach(c, want)
	{
		char key[300];
		snprintf(key, sizeof key, "%s%s", strncmp(c->string, "index.", 6) ? "index." : "",
		         c->string);
		if (!cJSON_GetObjectItemCaseSensitive(have, key))
			cJSON_AddItemToObject(out, key, cJSON_Duplicate(c, true));
	}
	cJSON_Delete(cur);
	cJSON_Delete(have);
	cJSON_Delete(want);
	return out;
}

void
co_h_settings_put(co_req *r)
{
	nd_index **ixs;
	size_t n;
	bool bad;
	cJSON *body = co_body_json(r, &bad), *j, *s;

	if (bad)
		return;
	if (!body) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: no settings to update;");
		return;
	}
	if (!resolve_with(r, index_expr(r), ND_RESOLVE_OPEN | ND_RESOLVE_CLOSED, &ixs, &n)) {
		cJSON_Delete(body);
		return;
	}
	s = cJSON_GetObjectItemCaseSensitive(body, "settings");
	if ((!cJSON_IsObject(s ? s : body) || !only_blocks(s ? s : body, "")) &&
	    metadata_blocked(r, ixs, n, 's')) {
		co_release_all(ixs, n);
		cJSON_Delete(body);
		return;
	}
	/* ?preserve_existing=true: each index takes only the settings it does
	 * not have yet */
	cJSON **keep = NULL;
	if (co_param_bool(r, "preserve_existing", false) && cJSON_IsObject(s ? s : body)) {
		keep = cm_calloc(MEM, n, sizeof *keep);
		for (size_t i = 0; i < n; i++)
			keep[i] = settings_not_set(ixs[i], s ? s : body);
		bool same = true;
		for (size_t i = 1; i < n && same; i++)
			same = cJSON_Compare(keep[0], keep[i], true);
		if (!same && nd_cluster_of(r->node)) {
			co_reply_errorf(
			    r, CM_EINVAL, NULL,
			    "[preserve_existing] over indices whose settings differ is not "
			    "supported by Shoal on a cluster: update them one at a time");
			goto done;
		}
	}
	if (co_cluster_put_settings(r, ixs, n, keep ? keep[0] : s ? s : body))
		goto done;
	for (size_t i = 0; i < n; i++) {
		cm_error err;
		cm_error_clear(&err);
		/* every index checked before any changes: never half-applied */
		if (n > 1 && nd_index_settings_check(ixs[i], keep ? keep[i] : s ? s : body, &err)) {
			co_reply_error(r, &err, NULL);
			goto done;
		}
	}
	for (size_t i = 0; i < n; i++) {
		cm_error err;
		cm_error_clear(&err);
		if (nd_index_put_settings(ixs[i], keep ? keep[i] : s ? s : body, &err)) {
			co_reply_error(r, &err, NULL);
			goto done;
		}
	}
	co_release_all(ixs, n);
	cJSON_Delete(body);
	for (size_t i = 0; keep && i < n; i++)
		cJSON_Delete(keep[i]);
	cm_free(MEM, keep);
	j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "acknowledged", true);
	co_reply_json(r, 200, j);
	return;
done:
	co_release_all(ixs, n);
	cJSON_Delete(body);
	for (size_t i = 0; keep && i < n; i++)
		cJSON_Delete(keep[i]);
	cm_free(MEM, keep);
}

typedef cm_err (*index_op_fn)(nd_index *ix, int arg);

static cm_err
op_refresh(nd_index *ix, int arg)
{
	return nd_index_refresh(ix);
}
static cm_err
op_flush(nd_index *ix, int arg)
{
	return nd_index_flush(ix);
}
static cm_err
op_merge(nd_index *ix, int arg)
{
	return nd_index_force_merge(ix, arg);
}

static void
index_op(co_req *r, index_op_fn fn, int arg)
{
	nd_index **ixs;
	size_t n;
	int total = 0, ok = 0, failed = 0;
	cJSON *j;

	if (!co_resolve(r, index_expr(r), &ixs, &n))
		return;
	if (co_cluster_broadcast(r,
	                         fn == op_refresh ? ND_BROADCAST_REFRESH
	                         : fn == op_flush ? ND_BROADCAST_FLUSH
	                                          : ND_BROADCAST_FORCEMERGE,
	                         ixs, n)) {
		co_release_all(ixs, n);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		int ns = nd_index_nshards(ixs[i]);
		total += ns * (1 + nd_index_settings(ixs[i])->number_of_replicas);
		if (fn(ixs[i], arg) == CM_OK)
			ok += ns;
		else
			failed += ns;
	}
	co_release_all(ixs, n);
	j = cJSON_CreateObject();
	cJSON_AddItemToObject(j, "_shards", co_shards_json(total, ok, failed));
	co_reply_json(r, 200, j);
}

void
co_h_refresh(co_req *r)
{
	index_op(r, op_refresh, 0);
}

void
co_h_flush(co_req *r)
{
	/* ES's FlushRequest.validate */
	if (co_param_bool(r, "force", false) && !co_param_bool(r, "wait_if_ongoing", true)) {
		co_reply_errorf(
		    r, CM_EVALIDATE, NULL,
		    "Validation Failed: 1: wait_if_ongoing must be true for a force flush;");
		return;
	}
	index_op(r, op_flush, 0);
}

/* _forcemerge?wait_for_completion=false: the merge runs as a task on its
 * own thread; the reply names the task, GET _tasks/{id} gives its result. */
typedef struct merge_job {
	nd_node *node;
	nd_index **ixs;
	size_t n;
	int max;
	co_task *task;
} merge_job;

static void *
merge_main(void *arg)
{
	merge_job *j = arg;
	int total = 0, ok = 0, failed = 0;
	nd_cluster *cl = nd_cluster_of(j->node);
	for (size_t i = 0; i < j->n; i++)
		total += nd_index_nshards(j->ixs[i]) *
		         (1 + nd_index_settings(j->ixs[i])->number_of_replicas);
	if (cl) {
		cm_buf names;
		cm_error err;
		int nodes = 0, nf = 0;
		cm_buf_init(&names, MEM);
		for (size_t i = 0; i < j->n; i++)
			cm_buf_printf(&names, "%s%s", i ? "," : "", nd_index_name(j->ixs[i]));
		cm_buf_put(&names, "", 1);
		cm_error_clear(&err);
		nd_cluster_broadcast(cl, ND_BROADCAST_FORCEMERGE, (const char *)names.data, &nodes, &nf,
		                     &err);
		cm_buf_free(&names);
		failed = nodes ? total * nf / nodes : 0;
		ok = total - failed;
		failed = 0; /* as the waiting form: copies not reached are not counted failed */
	} else {
		for (size_t i = 0; i < j->n; i++) {
			int ns = nd_index_nshards(j->ixs[i]);
			if (nd_index_force_merge(j->ixs[i], j->max) == CM_OK)
				ok += ns;
			else
				failed += ns;
		}
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddItemToObject(o, "_shards", co_shards_json(total, ok, failed));
	char *text = cJSON_PrintUnformatted(o);
	co_task_finish(j->task, text, false, true);
	cJSON_free(text);
	cJSON_Delete(o);
	co_release_all(j->ixs, j->n);
	cm_free(MEM, j);
	return NULL;
}

static void
merge_task(co_req *r, int max)
{
	nd_index **ixs;
	size_t n;
	char tid[128];
	cm_error err;
	if (!co_resolve(r, index_expr(r), &ixs, &n))
		return;
	merge_job *j = cm_calloc(MEM, 1, sizeof(*j));
	*j = (merge_job){.node = r->node, .ixs = ixs, .n = n, .max = max};
	j->task = co_task_new(r->node, "indices:admin/forcemerge",
	                      "Force-merge indices, max_num_segments");
	co_task_id(j->task, tid, sizeof(tid));
	cm_error_clear(&err);
	if (co_task_detach(j->task, &err)) {
		co_task_finish(j->task, "{}", true, false);
		co_release_all(ixs, n);
		cm_free(MEM, j);
		co_reply_error(r, &err, NULL);
		return;
	}
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, merge_main, j) != 0) {
		pthread_attr_destroy(&at);
		co_task_finish(j->task,
		               "{\"error\":{\"type\":\"exception\",\"reason\":\"cannot start the "
		               "task\"},\"status\":500}",
		               true, true);
		co_release_all(ixs, n);
		cm_free(MEM, j);
		co_reply_errorf(r, CM_EINTERNAL, NULL, "cannot start the task");
		return;
	}
	pthread_attr_destroy(&at);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "task", tid);
	co_reply_json(r, 200, o);
}

void
co_h_forcemerge(co_req *r)
{
	const char *m = co_param_get(r, "max_num_segments");
	int max = 1;
	if (m) {
		char *end;
		long v = strtol(m, &end, 10);
		if (*end || v < 1 || v > 1000000) {
			co_reply_errorf(
			    r, CM_EINVAL, NULL,
			    "Failed to parse int parameter [max_num_segments] with value [%.60s]",
			    m);
			return;
		}
		max = (int)v;
	}
	bool wait;
	if (!co_param_flag(r, "wait_for_completion", true, &wait))
		return;
	if (!wait) {
		merge_task(r, max);
		return;
	}
	index_op(r, op_merge, max);
}

/* ---- _open / _close ---- */

/* Closing an index (index.verified_before_close, through the master on a
 * cluster) keeps its shards on disk and open, but refuses every read and
 * write with index_closed_exception until it is opened again. */
static void
open_close(co_req *r, bool close)
{
	nd_index **ixs;
	size_t n;
	co_param_get(r, "timeout");
	co_param_get(r, "master_timeout");
	co_param_get(r, "wait_for_active_shards");
	if (!resolve_with(r, co_seg(r, 0), close ? ND_RESOLVE_OPEN : ND_RESOLVE_CLOSED, &ixs, &n))
		return;
	cJSON *set = cJSON_CreateObject();
	cJSON_AddBoolToObject(set, "index.verified_before_close", close);
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = CM_OK;
	nd_cluster *cl = nd_cluster_of(r->node);
	if (cl && n) {
		cm_buf names;
		cm_buf_init(&names, MEM);
		for (size_t i = 0; i < n; i++)
			cm_buf_printf(&names, "%s%s", i ? "," : "", nd_index_name(ixs[i]));
		cm_buf_put_u8(&names, 0);
		char *text = cJSON_PrintUnformatted(set), *reply = NULL;
		rc = nd_cluster_meta(cl, ND_META_PUT_SETTINGS, (const char *)names.data, text, &reply, &err);
		cJSON_free(text);
		cm_free(CM_MEM_NODE, reply);
		cm_buf_free(&names);
	} else {
		for (size_t i = 0; i < n && !rc; i++)
			rc = nd_index_put_settings(ixs[i], set, &err);
	}
	cJSON_Delete(set);
	if (rc) {
		co_reply_error(r, &err, NULL);
		co_release_all(ixs, n);
		return;
	}
	cJSON *j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "acknowledged", true);
	cJSON_AddBoolToObject(j, "shards_acknowledged", true);
	if (close) {
		cJSON *ind = cJSON_AddObjectToObject(j, "indices");
		for (size_t i = 0; i < n; i++)
			cJSON_AddBoolToObject(cJSON_AddObjectToObject(ind, nd_index_name(ixs[i])), "closed",
			                      true);
	}
	co_release_all(ixs, n);
	co_reply_json(r, 200, j);
}

void
co_h_index_close(co_req *r)
{
	open_close(r, true);
}

void
co_h_index_open(co_req *r)
{
	open_close(r, false);
}
