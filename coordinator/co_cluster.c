/* REST handlers of a cluster node: metadata changes through the master,
 * searches and counts over the shard copies, broadcasts, health, _cat.
 * Each returns false when no cluster runs (the solo handler goes on). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "../node/nd_snap.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR

static void
reply_admin(co_req *r, cm_err rc, const cm_error *err, char *reply, const char *index)
{
	if (rc) {
		co_reply_error(r, err, index);
	} else {
		cJSON *j = reply ? cJSON_Parse(reply) : NULL;
		if (!j) {
			j = cJSON_CreateObject();
			cJSON_AddBoolToObject(j, "acknowledged", true);
		}
		co_reply_json(r, 200, j);
	}
	cm_free(CM_MEM_NODE, reply);
}

bool
co_cluster_admin(co_req *r, nd_meta_kind kind, const char *index, const cJSON *body)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	char *text = NULL, *reply = NULL;
	cm_error err;
	if (!cl)
		return false;
	cm_error_clear(&err);
	if (body)
		text = cJSON_PrintUnformatted(body);
	cm_err rc = nd_cluster_meta(cl, kind, index, text, &reply, &err);
	if (text)
		cJSON_free(text);
	reply_admin(r, rc, &err, reply, kind == ND_META_CREATE ? index : NULL);
	return true;
}

/* One admin action through the master over the comma-joined names of
 * ixs; body (may be NULL) stays the caller's. */
static bool
admin_on_indices(co_req *r, nd_meta_kind kind, nd_index **ixs, size_t n, const cJSON *body)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	cm_buf names;
	if (!cl)
		return false;
	cm_buf_init(&names, MEM);
	for (size_t i = 0; i < n; i++)
		cm_buf_printf(&names, "%s%s", i ? "," : "", nd_index_name(ixs[i]));
	cm_buf_put_u8(&names, 0);
	co_cluster_admin(r, kind, (const char *)names.data, body);
	cm_buf_free(&names);
	return true;
}

bool
co_cluster_delete(co_req *r, nd_index **ixs, size_t n)
{
	return admin_on_indices(r, ND_META_DELETE, ixs, n, NULL);
}

bool
co_cluster_put_mapping(co_req *r, nd_index **ixs, size_t n, const cJSON *body)
{
	return admin_on_indices(r, ND_META_PUT_MAPPING, ixs, n, body);
}

bool
co_cluster_put_settings(co_req *r, nd_index **ixs, size_t n, const cJSON *settings)
{
	return admin_on_indices(r, ND_META_PUT_SETTINGS, ixs, n, settings);
}

bool
co_cluster_broadcast(co_req *r, nd_broadcast_op op, nd_index **ixs, size_t n)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	cm_buf names;
	cm_error err;
	int nodes, failed, shards = 0, copies = 0;
	if (!cl)
		return false;
	cm_buf_init(&names, MEM);
	for (size_t i = 0; i < n; i++) {
		cm_buf_printf(&names, "%s%s", i ? "," : "", nd_index_name(ixs[i]));
		shards += nd_index_nshards(ixs[i]);
		copies +=
		    nd_index_nshards(ixs[i]) * (1 + nd_index_settings(ixs[i])->number_of_replicas);
	}
	cm_buf_put_u8(&names, 0);
	cm_error_clear(&err);
	nd_cluster_broadcast(cl, op, (const char *)names.data, &nodes, &failed, &err);
	cm_buf_free(&names);
	/* Copies on nodes that did not answer count as failed, spread evenly. */
	int bad = nodes ? copies * failed / nodes : 0;
	cJSON *j = cJSON_CreateObject();
	cJSON_AddItemToObject(j, "_shards", co_shards_json(copies, copies - bad, 0));
	(void)shards;
	co_reply_json(r, 200, j);
	return true;
}

static void
search_opts(co_req *r, nd_cl_search_opts *o, cJSON *body)
{
	const char *f = co_param_get(r, "fanout"), *t;
	memset(o, 0, sizeof(*o));
	o->preference = co_param_get(r, "preference");
	if (f && nd_fanout_parse(f, &o->fanout))
		o->fanout_set = true;
	/* The request's timeout bounds retries on other copies too. */
	const cJSON *tj = cJSON_GetObjectItemCaseSensitive(body, "timeout");
	int64_t ms;
	t = cJSON_IsString(tj) ? tj->valuestring : NULL;
	if (t && nd_parse_time(t, &ms) && ms > 0)
		o->deadline_ns = cm_now_ns() + (uint64_t)ms * 1000000ull;
}

/* profile.shards in the order of the coordinator's shard timings, each
 * shard's own profile (matched by its id, [node][index][shard]) with the
 * copy that answered it: node, local, hedged, hedge_won, took_in_nanos as
 * the coordinator saw it. A copy without a profile of its own (it failed,
 * or lost a hedge) gets an entry with empty searches. */
static void
add_copy_details(cm_buf *out, const nd_cl_shard_timing *tm, size_t nt)
{
	/* only the profile is parsed and rewritten: the hits stay as rendered */
	size_t po, pl;
	if (!co_json_member((const char *)out->data, out->len, "profile", &po, &pl))
		return;
	cJSON *prof = cJSON_ParseWithLength((const char *)out->data + po, pl);
	cJSON *arr = cJSON_DetachItemFromObjectCaseSensitive(prof, "shards");
	if (!cJSON_IsArray(arr)) {
		cJSON_Delete(arr);
		cJSON_Delete(prof);
		return;
	}
	cJSON *sorted = cJSON_AddArrayToObject(prof, "shards");
	for (size_t i = 0; i < nt; i++) {
		const nd_cl_shard_timing *t = &tm[i];
		char id[600];
		snprintf(id, sizeof(id), "[%s][%s][%d]", t->node, t->index, t->shard);
		cJSON *x = NULL, *e;
		cJSON_ArrayForEach(e, arr)
		{
			const cJSON *eid = cJSON_GetObjectItemCaseSensitive(e, "id");
			if (cJSON_IsString(eid) && !strcmp(eid->valuestring, id)) {
				x = cJSON_DetachItemViaPointer(arr, e);
				break;
			}
		}
		if (!x) {
			x = cJSON_CreateObject();
			cJSON_AddStringToObject(x, "id", id);
			cJSON_AddArrayToObject(x, "searches");
			cJSON_AddArrayToObject(x, "aggregations");
		}
		cJSON_AddStringToObject(x, "node", t->node);
		cJSON_AddStringToObject(x, "index", t->index);
		cJSON_AddNumberToObject(x, "shard", t->shard);
		cJSON_AddBoolToObject(x, "local", t->local);
		cJSON_AddBoolToObject(x, "hedged", t->hedged);
		cJSON_AddBoolToObject(x, "hedge_won", t->hedge_won);
		cJSON_AddNumberToObject(x, "took_in_nanos", (double)t->took_ns);
		cJSON_AddItemToArray(sorted, x);
	}
	while (arr->child) /* profiles no timing named (not expected) */
		cJSON_AddItemToArray(sorted, cJSON_DetachItemViaPointer(arr, arr->child));
	cJSON_Delete(arr);
	char *s = cJSON_PrintUnformatted(prof);
	cm_buf next;
	cm_buf_init(&next, MEM);
	cm_buf_put(&next, out->data, po);
	cm_buf_put(&next, s, strlen(s));
	cm_buf_put(&next, out->data + po + pl, out->len - po - pl);
	cm_buf_reset(out);
	cm_buf_put(out, next.data, next.len);
	cm_buf_free(&next);
	cJSON_free(s);
	cJSON_Delete(prof);
}

bool
co_cluster_search(co_req *r, nd_index **ixs, size_t n, cJSON *body, sr_request *parsed,
                  cm_buf *out, cm_error *err, cm_err *rc)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	nd_cl_search_opts o;
	if (!cl)
		return false;
	const char *f = co_param_get(r, "fanout");
	nd_cl_fanout fm;
	if (f && !nd_fanout_parse(f, &fm)) {
		*rc = cm_error_set(err, CM_EINVAL,
		                   "fanout must be serial, per_shard or per_node, got [%.40s]", f);
		return true;
	}
	search_opts(r, &o, body);
	o.parsed = parsed;
	/* ?timings=true (Shoal's): how long each shard took, for the page's
	 * console, appended as "_shoal": {"shards": [...]} */
	bool timings = co_param_bool(r, "timings", false);
	/* "profile": true: each shard's own profile (the shards time their
	 * phases) plus which copy answered it and whether it was hedged */
	bool profile = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "profile"));
	size_t cap = 0, nt = 0;
	for (size_t i = 0; (timings || profile) && i < n; i++)
		cap += (size_t)nd_index_nshards(ixs[i]);
	if (timings || profile) {
		o.timings = cm_calloc(MEM, cap + 1, sizeof(*o.timings));
		o.timings_cap = cap;
		o.ntimings = &nt;
	}
	char *text = cJSON_PrintUnformatted(body);
	/* ?typed_keys travels beside the body: the coordinator renders */
	o.typed_keys = co_param_bool(r, "typed_keys", false);
	*rc = nd_cluster_search(cl, ixs, n, text, &o, out, err);
	cJSON_free(text);
	if (timings && !*rc && out->len && out->data[out->len - 1] == '}') {
		cJSON *sh = cJSON_CreateObject();
		cJSON *arr = cJSON_AddArrayToObject(sh, "shards");
		for (size_t i = 0; i < nt; i++) {
			const nd_cl_shard_timing *t = &o.timings[i];
			cJSON *x = cJSON_CreateObject();
			cJSON_AddStringToObject(x, "index", t->index);
			cJSON_AddNumberToObject(x, "shard", t->shard);
			cJSON_AddStringToObject(x, "node", t->node);
			cJSON_AddBoolToObject(x, "local", t->local);
			cJSON_AddBoolToObject(x, "ok", t->ok);
			cJSON_AddNumberToObject(x, "took_us", (double)(t->took_ns / 1000));
			cJSON_AddItemToArray(arr, x);
		}
		char *st = cJSON_PrintUnformatted(sh);
		out->len--;
		cm_buf_printf(out, "%s\"_shoal\":%s}", out->len > 1 ? "," : "", st);
		cJSON_free(st);
		cJSON_Delete(sh);
	}
	if (profile && !*rc)
		add_copy_details(out, o.timings, nt);
	cm_free(MEM, o.timings);
	return true;
}

bool
co_cluster_count(co_req *r, nd_index **ixs, size_t n, cJSON *body)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	cJSON *b, *j, *res, *t;
	cm_buf out;
	cm_error err;
	nd_cl_search_opts o;
	if (!cl)
		return false;
	b = cJSON_CreateObject();
	if (cJSON_GetObjectItemCaseSensitive(body, "query"))
		cJSON_AddItemToObject(
		    b, "query",
		    cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(body, "query"), 1));
	cJSON_AddNumberToObject(b, "size", 0);
	cJSON_AddBoolToObject(b, "track_total_hits", true);
	search_opts(r, &o, b);
	char *text = cJSON_PrintUnformatted(b);
	cJSON_Delete(b);
	cm_buf_init(&out, MEM);
	cm_error_clear(&err);
	cm_err rc = nd_cluster_search(cl, ixs, n, text, &o, &out, &err);
	cJSON_free(text);
	if (rc) {
		co_reply_error(r, &err, NULL);
		cm_buf_free(&out);
		return true;
	}
	res = cJSON_ParseWithLength((const char *)out.data, out.len);
	cm_buf_free(&out);
	t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "hits"),
	                                     "total");
	j = cJSON_CreateObject();
	cJSON_AddNumberToObject(
	    j, "count",
	    cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "value")->valuedouble : 0);
	cJSON *sh = cJSON_DetachItemFromObjectCaseSensitive(res, "_shards");
	cJSON_AddItemToObject(j, "_shards", sh ? sh : cJSON_CreateObject());
	cJSON_Delete(res);
	co_reply_json(r, 200, j);
	return true;
}

static int
rank(const char *s)
{
	return strcmp(s, "green") == 0 ? 0 : strcmp(s, "yellow") == 0 ? 1 : 2;
}

/* level=indices on a cluster: each index's health from the routing table
 * (a primary not started: red; a replica not started: yellow). */
static void
health_indices(co_req *r, nd_cluster *cl, cJSON *j)
{
	nd_index **ixs;
	size_t n;
	cm_error err;
	const char *expr = co_seg(r, 2);
	cm_error_clear(&err);
	if (nd_resolve(r->node, expr ? expr : "_all", false, &ixs, &n, &err))
		return;
	cJSON *state = nd_cluster_state_json(cl);
	cJSON *rt = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(state, "routing_table"), "indices");
	cJSON *ind = cJSON_AddObjectToObject(j, "indices");
	for (size_t i = 0; i < n; i++) {
		const char *name = nd_index_name(ixs[i]);
		int ns = nd_index_nshards(ixs[i]), nr = nd_index_settings(ixs[i])->number_of_replicas;
		int prim = 0, active = 0, init = 0, reloc = 0, unassigned = 0, rank_ = 0;
		const cJSON *shards = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(rt, name), "shards");
		for (int s = 0; s < ns; s++) {
			char key[16];
			snprintf(key, sizeof(key), "%d", s);
			const cJSON *list = cJSON_GetObjectItemCaseSensitive(shards, key), *c;
			int started = 0, starting = 0;
			bool pstarted = false;
			cJSON_ArrayForEach(c, list)
			{
				const cJSON *st = cJSON_GetObjectItemCaseSensitive(c, "state");
				const char *sv = cJSON_IsString(st) ? st->valuestring : "";
				bool p = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "primary"));
				if (!strcmp(sv, "STARTED") || !strcmp(sv, "RELOCATING")) {
					started++;
					pstarted |= p;
					reloc += !strcmp(sv, "RELOCATING");
				} else if (!strcmp(sv, "INITIALIZING")) {
					starting++;
				}
			}
			/* a static cluster without routing entries: every copy is up */
			if (!list && !rt) {
				started = 1 + nr;
				pstarted = true;
			}
			prim += pstarted;
			active += started;
			init += starting;
			int missing = 1 + nr - started - starting;
			unassigned += missing > 0 ? missing : 0;
			int sr = !pstarted ? 2 : started < 1 + nr ? 1 : 0;
			rank_ = sr > rank_ ? sr : rank_;
		}
		cJSON *o = cJSON_AddObjectToObject(ind, name);
		cJSON_AddStringToObject(o, "status", rank_ == 2 ? "red" : rank_ ? "yellow" : "green");
		cJSON_AddNumberToObject(o, "number_of_shards", ns);
		cJSON_AddNumberToObject(o, "number_of_replicas", nr);
		cJSON_AddNumberToObject(o, "active_primary_shards", prim);
		cJSON_AddNumberToObject(o, "active_shards", active);
		cJSON_AddNumberToObject(o, "relocating_shards", reloc);
		cJSON_AddNumberToObject(o, "initializing_shards", init);
		cJSON_AddNumberToObject(o, "unassigned_shards", unassigned);
	}
	cJSON_Delete(state);
	co_release_all(ixs, n);
}

bool
co_cluster_health(co_req *r)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	const char *want = co_param_get(r, "wait_for_status"), *to = co_param_get(r, "timeout");
	int64_t ms = 30000;
	cm_buf out;
	cJSON *j;
	if (!cl)
		return false;
	if (to && !nd_parse_time(to, &ms))
		ms = 30000;
	co_param_get(r, "level");
	co_health_waits w;
	if (!co_health_waits_parse(r, &w))
		return true;
	uint64_t until = cm_now_ns() + (uint64_t)ms * 1000000ull;
	cm_buf_init(&out, MEM);
	/* _cluster/health/{index}: those indices' shards; an index that does
	 * not exist (yet) is red until it does or the wait ends, as in ES */
	const char *expr = co_seg(r, 2);
	for (;;) {
		nd_index **ixs = NULL, *none[1] = {NULL};
		size_t n = 0;
		bool missing = false;
		if (expr) {
			cm_error err;
			cm_error_clear(&err);
			missing = nd_resolve(r->node, expr, false, &ixs, &n, &err) != CM_OK;
		}
		cm_buf_reset(&out);
		nd_cluster_health(cl, !expr ? NULL : missing ? none : ixs, n, &out);
		if (ixs)
			co_release_all(ixs, n);
		j = cJSON_ParseWithLength((const char *)out.data, out.len);
		if (missing)
			cJSON_ReplaceItemInObjectCaseSensitive(j, "status", cJSON_CreateString("red"));
		const char *st = cJSON_GetObjectItemCaseSensitive(j, "status")->valuestring;
		int nodes = cJSON_GetObjectItemCaseSensitive(j, "number_of_nodes")->valueint;
		int reloc = cJSON_GetObjectItemCaseSensitive(j, "relocating_shards")->valueint;
		int init = cJSON_GetObjectItemCaseSensitive(j, "initializing_shards")->valueint;
		int active = cJSON_GetObjectItemCaseSensitive(j, "active_shards")->valueint;
		int unassigned = cJSON_GetObjectItemCaseSensitive(j, "unassigned_shards")->valueint;
		if (!missing && (!want || rank(st) <= rank(want)) &&
		    co_health_waits_met(&w, nodes, active, init, unassigned, reloc))
			break;
		if (cm_now_ns() >= until) {
			cJSON_ReplaceItemInObjectCaseSensitive(j, "timed_out", cJSON_CreateTrue());
			cm_buf_free(&out);
			co_reply_json(r, 408, j);
			return true;
		}
		cJSON_Delete(j);
		struct timespec ts = {0, 100000000L};
		nanosleep(&ts, NULL);
	}
	cm_buf_free(&out);
	const char *level = co_param_get(r, "level");
	if (level && !strcmp(level, "indices"))
		health_indices(r, cl, j);
	co_reply_json(r, 200, j);
	return true;
}

/* A _cat table from space-separated rows; ?format=json gives objects. */
/* The cluster's _cat rows (space-separated fields) rendered as a solo
 * node renders its own: h, s, v and format apply. */
static void
cat_reply(co_req *r, const char *const *cols, int ncols, const cm_buf *rows)
{
	co_cat_rows(r, cols, ncols, (const char *)rows->data, rows->len);
}

bool
co_cluster_cat(co_req *r, const char *what)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	cm_buf rows;
	cm_buf_init(&rows, MEM);
	if (what && strcmp(what, "recovery") == 0) {
		/* Recoveries this node ran as the target (solo: none). */
		static const char *const cols[] = {"index", "shard",       "time",        "type",
		                                   "stage", "source_node", "target_node", "files",
		                                   "bytes", "ops"};
		if (cl)
			nd_cluster_cat_recovery(cl, &rows);
		else
			nd_snap_cat_recovery(&rows); /* restores from snapshots */
		cat_reply(r, cols, 10, &rows);
		cm_buf_free(&rows);
		return true;
	}
	if (cl && what && (strcmp(what, "allocation") == 0 || strcmp(what, "master") == 0)) {
		static const char *const acols[] = {"shards", "host", "ip", "node"};
		static const char *const mcols[] = {"id", "host", "ip", "node"};
		if (what[0] == 'a')
			nd_cluster_cat_allocation(cl, &rows);
		else
			nd_cluster_cat_master(cl, &rows);
		cat_reply(r, what[0] == 'a' ? acols : mcols, 4, &rows);
		cm_buf_free(&rows);
		return true;
	}
	if (!cl || !what ||
	    (strcmp(what, "nodes") && strcmp(what, "shards") && strcmp(what, "count") &&
	     strcmp(what, "health") && strcmp(what, "indices")))
		return false;
	if (strcmp(what, "health") == 0) {
		/* the cluster's health, as _cluster/health has it */
		cm_buf h;
		cm_buf_init(&h, MEM);
		nd_cluster_health(cl, NULL, 0, &h);
		cJSON *j = cJSON_ParseWithLength((const char *)h.data, h.len);
		cm_buf_free(&h);
		int64_t now = cm_wall_ms();
		time_t secs = (time_t)(now / 1000);
		struct tm tm;
		char ts[16];
		gmtime_r(&secs, &tm);
		strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
#define HN(k)                                                                                      \
	(cJSON_GetObjectItemCaseSensitive(j, k)                                                    \
	     ? cJSON_GetObjectItemCaseSensitive(j, k)->valuedouble                                 \
	     : 0)
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
		const cJSON *cn = cJSON_GetObjectItemCaseSensitive(j, "cluster_name");
		cm_buf_printf(
		    &rows, "%lld %s %s %s %.0f %.0f %.0f %.0f %.0f %.0f %.0f 0 - %.1f%%\n",
		    (long long)(now / 1000), ts, cJSON_IsString(cn) ? cn->valuestring : "",
		    cJSON_IsString(st) ? st->valuestring : "red", HN("number_of_nodes"),
		    HN("number_of_data_nodes"), HN("active_shards"), HN("active_primary_shards"),
		    HN("relocating_shards"), HN("initializing_shards"), HN("unassigned_shards"),
		    HN("active_shards_percent_as_number"));
#undef HN
		cJSON_Delete(j);
		cat_reply(r, co_cat_health_cols, CO_CAT_HEALTH_NCOLS, &rows);
		cm_buf_free(&rows);
		return true;
	}
	if (strcmp(what, "indices") == 0) {
		static const char *const cols[] = {
		    "health",         "status",        "index",
		    "uuid",           "pri",           "rep",
		    "docs.count",     "docs.deleted",  "store.size",
		    "pri.store.size", "creation.date", "creation.date.string"};
		nd_index **ixs;
		size_t n;
		const char *expr = co_seg(r, 2);
		if (!co_resolve_all(r, expr ? expr : "_all", &ixs, &n)) {
			cm_buf_free(&rows);
			return true;
		}
		nd_cluster_cat_indices(cl, ixs, n, &rows);
		co_release_all(ixs, n);
		co_cat_rows_ex(r, cols, 12, 10, (const char *)rows.data, rows.len);
		cm_buf_free(&rows);
		return true;
	}
	if (strcmp(what, "count") == 0) {
		/* The total over one copy of every shard, as _count. */
		nd_index **ixs;
		size_t n;
		cm_buf out;
		cm_error err;
		nd_cl_search_opts o;
		const char *expr = co_seg(r, 2);
		if (!co_resolve(r, expr ? expr : "_all", &ixs, &n))
			return true;
		memset(&o, 0, sizeof(o));
		cm_buf_init(&out, MEM);
		cm_error_clear(&err);
		if (nd_cluster_search(cl, ixs, n, "{\"size\":0,\"track_total_hits\":true}",
		                      &o, &out, &err)) {
			co_reply_error(r, &err, NULL);
		} else {
			static const char *const cols[] = {"epoch", "timestamp", "count"};
			cJSON *res = cJSON_ParseWithLength((const char *)out.data, out.len);
			cJSON *t = cJSON_GetObjectItemCaseSensitive(
			    cJSON_GetObjectItemCaseSensitive(res, "hits"), "total");
			cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "value");
			int64_t now = cm_wall_ms();
			time_t secs = (time_t)(now / 1000);
			struct tm tm;
			char ts[16];
			gmtime_r(&secs, &tm);
			strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
			cm_buf_reset(&rows);
			cm_buf_printf(&rows, "%lld %s %.0f\n", (long long)(now / 1000), ts,
			              cJSON_IsNumber(v) ? v->valuedouble : 0.0);
			cJSON_Delete(res);
			cat_reply(r, cols, 3, &rows);
		}
		cm_buf_free(&out);
		co_release_all(ixs, n);
		cm_buf_free(&rows);
		return true;
	}
	if (strcmp(what, "nodes") == 0) {
		static const char *const cols[] = {"ip",     "name",      "node.role", "master",
		                                   "status", "transport", "latency_us"};
		nd_cluster_cat_nodes(cl, &rows);
		cat_reply(r, cols, 7, &rows);
	} else {
		static const char *const cols[] = {"index", "shard", "prirep", "state",
		                                   "docs",  "ip",    "node"};
		const char *expr = co_seg(r, 2);
		nd_index **ixs = NULL;
		size_t n = 0;
		if (expr && !co_resolve(r, expr, &ixs, &n)) {
			cm_buf_free(&rows);
			return true;
		}
		nd_cluster_cat_shards(cl, &rows);
		if (expr) {
			/* only the rows of the indices the expression names */
			cm_buf keep;
			cm_buf_init(&keep, MEM);
			cm_buf_put_u8(&rows, 0);
			char *save = NULL;
			for (char *line = strtok_r((char *)rows.data, "\n", &save); line;
			     line = strtok_r(NULL, "\n", &save)) {
				size_t l = strcspn(line, " ");
				for (size_t i = 0; i < n; i++)
					if (strlen(nd_index_name(ixs[i])) == l &&
					    strncmp(line, nd_index_name(ixs[i]), l) == 0) {
						cm_buf_printf(&keep, "%s\n", line);
						break;
					}
			}
			cm_buf_free(&rows);
			rows = keep;
			co_release_all(ixs, n);
		}
		cat_reply(r, cols, 7, &rows);
	}
	cm_buf_free(&rows);
	return true;
}

cm_err
co_get_or_create(nd_node *n, const char *name, nd_index **out, cm_error *err)
{
	nd_cluster *cl = nd_cluster_of(n);
	char *reply = NULL;
	cm_err rc;
	if (!(*out = nd_index_get(n, name)) && nd_alias_exists(n, name))
		return nd_alias_write_index(n, name, out, NULL, err); /* a write through an alias */
	if (*out)
		return CM_OK;
	if ((rc = nd_index_name_check(name, err)))
		return rc;
	cJSON *body = co_template_body(n, name, NULL); /* the matching templates */
	if (!cl && !body)
		return nd_index_get_or_create(n, name, out, err);
	if (!cl) {
		rc = nd_index_create(n, name, body, out, err);
		cJSON_Delete(body);
		if (rc == CM_EEXISTS && (*out = nd_index_get(n, name))) {
			cm_error_clear(err);
			rc = CM_OK; /* created meanwhile by another request */
		}
		return rc;
	}
	char *text = body ? cJSON_PrintUnformatted(body) : NULL;
	cJSON_Delete(body);
	rc = nd_cluster_meta(cl, ND_META_CREATE, name, text, &reply, err);
	if (text)
		cJSON_free(text);
	cm_free(CM_MEM_NODE, reply);
	/* Created meanwhile by another request: fine. */
	if (rc == CM_EEXISTS) {
		cm_error_clear(err);
		rc = CM_OK;
	}
	if (rc)
		return rc;
	if (!(*out = nd_index_get(n, name)))
		return cm_error_set(err, CM_EUNAVAIL, "index [%s] was created but is not here yet",
		                    name);
	return CM_OK;
}

/* "a.b.c": v into nested objects. */
static void
unflatten_into(cJSON *dst, const char *key, const cJSON *v)
{
	char part[256];
	const char *dot = strchr(key, '.');
	if (!dot || (size_t)(dot - key) >= sizeof(part)) {
		cJSON_DeleteItemFromObjectCaseSensitive(dst, key);
		cJSON_AddItemToObject(dst, key, cJSON_Duplicate(v, true));
		return;
	}
	memcpy(part, key, (size_t)(dot - key));
	part[dot - key] = 0;
	cJSON *sub = cJSON_GetObjectItemCaseSensitive(dst, part);
	if (!cJSON_IsObject(sub)) {
		cJSON_DeleteItemFromObjectCaseSensitive(dst, part);
		sub = cJSON_AddObjectToObject(dst, part);
	}
	unflatten_into(sub, dot + 1, v);
}

/* _cluster/settings on a cluster: the allocation settings live in the
 * cluster state (through the master); action.destructive_requires_name
 * stays this node's. */
bool
co_cluster_settings(co_req *r)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	const char *secs[] = {"persistent", "transient"};
	cJSON *body = NULL, *fwd = NULL, *c;
	bool bad, drn_set = false, drn = true, partial_set = false, partial = true;
	if (!cl)
		return false;
	if (r->method == CO_PUT) {
		body = co_body_json(r, &bad);
		if (bad)
			return true;
		if (body && !cJSON_IsObject(body)) {
			co_reply_errorf(r, CM_EPARSE, NULL, "request body must be an object");
			cJSON_Delete(body);
			return true;
		}
		fwd = cJSON_CreateObject();
		for (int k = 0; k < 2; k++) {
			cJSON *sec = cJSON_GetObjectItemCaseSensitive(body, secs[k]);
			if (!sec)
				continue;
			if (!cJSON_IsObject(sec)) {
				co_reply_errorf(r, CM_EPARSE, NULL,
				                "[%s] must be an object of settings", secs[k]);
				cJSON_Delete(body);
				cJSON_Delete(fwd);
				return true;
			}
			cJSON *out = cJSON_AddObjectToObject(fwd, secs[k]);
			cJSON_ArrayForEach(c, sec)
			{
				const cJSON *pv = co_partial_setting(c);
				if (pv) {
					if (!co_bool_setting_ok(pv)) {
						co_reply_errorf(r, CM_EINVAL, NULL,
						                "Failed to parse value [%.40s] as only "
						                "[true] or [false] are allowed.",
						                cJSON_IsString(pv) ? pv->valuestring : "");
						cJSON_Delete(body);
						cJSON_Delete(fwd);
						return true;
					}
					partial_set = true;
					partial = !cJSON_IsFalse(pv) && !(cJSON_IsString(pv) &&
					                                  !strcmp(pv->valuestring, "false"));
					continue;
				}
				const cJSON *a = cJSON_GetObjectItemCaseSensitive(
				    c, "destructive_requires_name");
				if (strcmp(c->string, "action.destructive_requires_name") == 0 ||
				    (strcmp(c->string, "action") == 0 && a)) {
					const cJSON *v = a ? a : c;
					drn_set = true;
					drn =
					    cJSON_IsNull(v) || cJSON_IsTrue(v) ||
					    (cJSON_IsString(v) && strcmp(v->valuestring, "false"));
					continue;
				}
				cJSON_AddItemToObject(out, c->string, cJSON_Duplicate(c, true));
			}
		}
		bool any = false;
		for (int k = 0; k < 2; k++)
			any |=
			    cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(fwd, secs[k])) > 0;
		if (any) {
			char *text = cJSON_PrintUnformatted(fwd), *reply = NULL;
			cm_error err;
			cm_error_clear(&err);
			cm_err rc =
			    nd_cluster_meta(cl, ND_META_CLUSTER_SETTINGS, "", text, &reply, &err);
			cJSON_free(text);
			cm_free(CM_MEM_NODE, reply);
			if (rc) {
				co_reply_error(r, &err, NULL);
				cJSON_Delete(body);
				cJSON_Delete(fwd);
				return true;
			}
		}
		if (drn_set)
			nd_set_destructive_requires_name(r->node, drn);
		if (partial_set)
			nd_set_default_allow_partial(r->node, partial);
		cJSON_Delete(body);
		cJSON_Delete(fwd);
	}
	bool flat = co_param_bool(r, "flat_settings", false);
	cJSON *j = cJSON_CreateObject(), *st = nd_cluster_settings_json(cl);
	if (r->method == CO_PUT)
		cJSON_AddBoolToObject(j, "acknowledged", true);
	for (int k = 0; k < 2; k++) {
		cJSON *dst = cJSON_AddObjectToObject(j, secs[k]);
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(st, secs[k]))
		{
			if (flat)
				cJSON_AddItemToObject(dst, c->string, cJSON_Duplicate(c, true));
			else
				unflatten_into(dst, c->string, c);
		}
		if (k == 1 && !nd_default_allow_partial(r->node)) {
			cJSON *f = cJSON_CreateString("false");
			if (flat)
				cJSON_AddItemToObject(dst, "search.default_allow_partial_results", f);
			else {
				unflatten_into(dst, "search.default_allow_partial_results", f);
				cJSON_Delete(f);
			}
		}
		if (k == 1 && !nd_destructive_requires_name(r->node)) {
			cJSON *f = cJSON_CreateString("false");
			if (flat)
				cJSON_AddItemToObject(dst, "action.destructive_requires_name", f);
			else {
				unflatten_into(dst, "action.destructive_requires_name", f);
				cJSON_Delete(f);
			}
		}
	}
	cJSON_Delete(st);
	co_reply_json(r, 200, j);
	return true;
}

/* POST _cluster/reroute: the commands through the master (applied whole
 * or not at all); GET|POST _cluster/allocation/explain on this node. */
void
co_h_cluster_reroute(co_req *r)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	bool bad;
	if (!cl) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "_cluster/reroute needs a cluster: a solo node holds every copy");
		return;
	}
	cJSON *body = co_body_json(r, &bad), *k;
	if (bad)
		return;
	if (body && !cJSON_IsObject(body)) {
		co_reply_errorf(r, CM_EPARSE, NULL, "reroute body must be an object");
		cJSON_Delete(body);
		return;
	}
	if (!body)
		body = cJSON_CreateObject();
	cJSON_ArrayForEach(k, body)
	{
		if (strcmp(k->string, "commands") != 0) {
			co_reply_errorf(r, CM_EPARSE, NULL, "[cluster_reroute] unknown field [%s]",
			                k->string);
			cJSON_Delete(body);
			return;
		}
	}
	/* the query's options travel to the master inside the body */
	static const char *flags[] = {"dry_run", "explain", "retry_failed"};
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		bool on;
		if (!co_param_flag(r, flags[i], false, &on)) {
			cJSON_Delete(body);
			return;
		}
		cJSON_AddBoolToObject(body, flags[i], on);
	}
	const char *metric = co_param_get(r, "metric");
	if (metric) {
		static const char *known[] = {"_all",        "none",  "version",
		                              "master_node", "nodes", "routing_table"};
		char *copy = strdup(metric), *save = NULL;
		for (char *m = strtok_r(copy, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
			size_t i = 0;
			while (i < sizeof(known) / sizeof(known[0]) && strcmp(known[i], m))
				i++;
			if (i == sizeof(known) / sizeof(known[0])) {
				co_reply_errorf(r, CM_EINVAL, NULL,
				                "request [/_cluster/reroute] contains unrecognized metric: "
				                "[%s] (version, master_node, nodes, routing_table, _all, "
				                "none)",
				                m);
				free(copy);
				cJSON_Delete(body);
				return;
			}
		}
		free(copy);
		cJSON_AddStringToObject(body, "metric", metric);
	}
	co_cluster_admin(r, ND_META_REROUTE, "", body);
	cJSON_Delete(body);
}

void
co_h_allocation_explain(co_req *r)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	bool bad;
	if (!cl) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "unable to find any unassigned shards to explain (a solo node)");
		return;
	}
	cJSON *body = co_body_json(r, &bad);
	if (bad)
		return;
	char *text = body ? cJSON_PrintUnformatted(body) : NULL, *out = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = nd_cluster_allocation_explain(cl, text, &out, &err);
	if (text)
		cJSON_free(text);
	cJSON_Delete(body);
	if (rc) {
		co_reply_error(r, &err, NULL);
		return;
	}
	cJSON *j = cJSON_Parse(out);
	cm_free(CM_MEM_NODE, out);
	co_reply_json(r, 200, j ? j : cJSON_CreateObject());
}
