/* REST handlers of _snapshot and _cat/snapshots (node/nd_snap.h does the
 * work). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../node/nd_snap.h"
#include "co_private.h"
#include "co_snapshot.h"

static void
answer(co_req *r, cm_err rc, const cm_error *err, cJSON *out)
{
	if (rc) {
		cJSON_Delete(out);
		co_reply_error(r, err, NULL);
	} else {
		co_reply_json(r, 200, out ? out : cJSON_CreateObject());
	}
}

static void snap_answer(co_req *r, const char *op, const char *repo, const char *snap);

/* The body as JSON (NULL when empty); false when a reply was sent. */
static bool
body_of(co_req *r, cJSON **body)
{
	bool bad = false;
	*body = co_body_json(r, &bad);
	return !bad;
}

void
co_h_snapshot_repo(co_req *r)
{
	const char *repo = co_seg(r, 1);
	cJSON *body = NULL, *out = NULL;
	cm_error err;
	cm_err rc;
	cm_error_clear(&err);
	if (r->method == CO_GET) {
		rc = nd_snap_repo_get(r->node, repo, &out, &err);
	} else if (r->method == CO_DELETE) {
		rc = nd_snap_repo_delete(r->node, repo, &out, &err);
	} else {
		if (!body_of(r, &body))
			return;
		rc = nd_snap_repo_put(r->node, repo, body, &out, &err);
		cJSON_Delete(body);
	}
	answer(r, rc, &err, out);
}

void
co_h_snapshot_verify(co_req *r)
{
	cJSON *out = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = nd_snap_repo_verify(r->node, co_seg(r, 1), &out, &err);
	answer(r, rc, &err, out);
}

void
co_h_snapshot(co_req *r)
{
	const char *repo = co_seg(r, 1), *snap = co_seg(r, 2);
	cJSON *body = NULL, *out = NULL;
	cm_error err;
	cm_err rc;
	cm_error_clear(&err);
	if (r->method == CO_GET) {
		snap_answer(r, "get", repo, snap);
		return;
	} else if (r->method == CO_DELETE) {
		rc = nd_snap_delete(r->node, repo, snap, &out, &err);
	} else {
		if (!body_of(r, &body))
			return;
		rc = nd_snap_create(r->node, repo, snap, body,
		                    co_param_bool(r, "wait_for_completion", false), &out, &err);
		cJSON_Delete(body);
	}
	answer(r, rc, &err, out);
}

/* GET of one snapshot (op "get") or its _status (op "status") here. */
static cm_err
local_op(nd_node *n, const char *op, const char *repo, const char *snap, cJSON **out, cm_error *err)
{
	return strcmp(op, "get") == 0 ? nd_snap_get(n, repo, snap, out, err)
	                              : nd_snap_status(n, repo, snap, out, err);
}

cJSON *
co_snapshot_upcall(nd_node *n, const char *text)
{
	cJSON *q = cJSON_Parse(text), *out = NULL;
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(q, "op");
	const cJSON *repo = cJSON_GetObjectItemCaseSensitive(q, "repo");
	const cJSON *snap = cJSON_GetObjectItemCaseSensitive(q, "snap");
	cm_error err;
	cm_error_clear(&err);
	if (!cJSON_IsString(op) || !cJSON_IsString(repo) || !cJSON_IsString(snap)) {
		cJSON_Delete(q);
		return NULL;
	}
	cm_err rc = local_op(n, op->valuestring, repo->valuestring, snap->valuestring, &out, &err);
	cJSON_Delete(q);
	if (rc) { /* relayed as it is */
		cJSON_Delete(out);
		return co_error_doc(&err, NULL);
	}
	return out;
}

/* A snapshot that is not here but pending in the repository is being
 * taken by another node: ask that node (its progress is in its memory). */
static void
snap_answer(co_req *r, const char *op, const char *repo, const char *snap)
{
	cJSON *out = NULL;
	cm_error err;
	char owner[SN_OWNER_MAX];
	cm_error_clear(&err);
	cm_err rc = local_op(r->node, op, repo, snap, &out, &err);
	nd_cluster *cl = nd_cluster_of(r->node);
	if (rc != CM_ENOTFOUND || !cl || strpbrk(snap, ",*") || !strcmp(snap, "_all")) {
		answer(r, rc, &err, out);
		return;
	}
	cm_error oe;
	cm_error_clear(&oe);
	if (nd_snap_pending_owner(repo, snap, owner, sizeof(owner), &oe) ||
	    !strcmp(owner, nd_node_name(r->node))) {
		answer(r, rc, &err, out);
		return;
	}
	int nn = nd_cluster_nnodes(cl), who = -1;
	for (int i = 0; i < nn; i++)
		if (!strcmp(nd_cluster_node_name(cl, i), owner))
			who = i;
	if (who < 0 || nn > 256) {
		answer(r, rc, &err, out);
		return;
	}
	bool *which = cm_calloc(CM_MEM_COORDINATOR, (size_t)nn, sizeof(bool));
	cJSON **outs = cm_calloc(CM_MEM_COORDINATOR, (size_t)nn, sizeof(cJSON *));
	cm_error *errs = cm_calloc(CM_MEM_COORDINATOR, (size_t)nn, sizeof(cm_error));
	which[who] = true;
	cJSON *q = cJSON_CreateObject();
	cJSON_AddStringToObject(q, "op", op);
	cJSON_AddStringToObject(q, "repo", repo);
	cJSON_AddStringToObject(q, "snap", snap);
	char *qt = cJSON_PrintUnformatted(q);
	cJSON_Delete(q);
	size_t klen = strlen(qt) + 10;
	char *kind = cm_malloc(CM_MEM_COORDINATOR, klen);
	snprintf(kind, klen, "snapshot %s", qt);
	cJSON_free(qt);
	nd_upcall_all(r->node, kind, which, outs, errs, nn);
	cm_free(CM_MEM_COORDINATOR, kind);
	cJSON *got = outs[who];
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(got, "status");
	if (!got) {
		cm_error ue;
		cm_error_clear(&ue);
		cm_error_set_type(&ue, CM_EUNAVAIL, "snapshot_exception",
		                  "[%s:%s] is being taken by node [%s], which did not answer: %s",
		                  repo, snap, owner, errs[who].reason);
		co_reply_error(r, &ue, NULL);
	} else if (cJSON_GetObjectItemCaseSensitive(got, "error") && cJSON_IsNumber(st)) {
		co_reply_json(r, st->valueint, got); /* the owner's own error */
	} else {
		co_reply_json(r, 200, got);
	}
	cm_free(CM_MEM_COORDINATOR, which);
	cm_free(CM_MEM_COORDINATOR, outs);
	cm_free(CM_MEM_COORDINATOR, errs);
}

void
co_h_snapshot_status(co_req *r)
{
	cJSON *out = NULL;
	cm_error err;
	cm_error_clear(&err);
	/* /_snapshot/_status, /_snapshot/{repo}/_status, /_snapshot/{repo}/{snap}/_status */
	const char *repo = r->nsegs >= 3 ? co_seg(r, 1) : NULL;
	const char *snap = r->nsegs >= 4 ? co_seg(r, 2) : NULL;
	if (repo && snap) {
		snap_answer(r, "status", repo, snap);
		return;
	}
	cm_err rc = nd_snap_status(r->node, repo, snap, &out, &err);
	answer(r, rc, &err, out);
}

void
co_h_snapshot_restore(co_req *r)
{
	cJSON *body = NULL, *out = NULL;
	cm_error err;
	cm_error_clear(&err);
	if (!body_of(r, &body))
		return;
	cm_err rc = nd_snap_restore(r->node, co_seg(r, 1), co_seg(r, 2), body,
	                            co_param_bool(r, "wait_for_completion", false), &out, &err);
	cJSON_Delete(body);
	answer(r, rc, &err, out);
}

void
co_h_cat_snapshots(co_req *r)
{
	/* ES 7.10's columns (its repository column came later) */
	static const char *cols[] = {
	    "id",       "status",  "start_epoch",       "start_time",    "end_epoch",    "end_time",
	    "duration", "indices", "successful_shards", "failed_shards", "total_shards", "reason"};
	const int nc = (int)(sizeof(cols) / sizeof(cols[0]));
	const char *repo = co_seg(r, 2);
	cJSON *rows = NULL, *row;
	cm_error err;
	cm_error_clear(&err);
	/* reason: only when h= names it, as ES's default columns */
	const uint64_t extra = (uint64_t)1 << 11;
	if (co_param_bool(r, "help", false)) {
		co_cat_cells_ex(r, cols, nc, extra, NULL, 0);
		return;
	}
	if (!repo) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: repository is missing;");
		return;
	}
	cm_err rc = nd_snap_cat(r->node, repo, &rows, &err);
	if (rc) {
		co_reply_error(r, &err, NULL);
		return;
	}
	int nrows = cJSON_GetArraySize(rows), i = 0;
	char **cells =
	    cm_calloc(CM_MEM_COORDINATOR, (size_t)(nrows ? nrows : 1) * (size_t)nc, sizeof(char *));
	cJSON_ArrayForEach(row, rows)
	{
		for (int c = 0; c < nc; c++) {
			const cJSON *x = cJSON_GetObjectItemCaseSensitive(row, cols[c]);
			cells[(size_t)i * (size_t)nc + (size_t)c] =
			    cJSON_IsString(x) ? x->valuestring : "";
		}
		i++;
	}
	co_cat_cells_ex(r, cols, nc, extra, cells, nrows);
	cm_free(CM_MEM_COORDINATOR, cells);
	cJSON_Delete(rows);
}

/* ---- global state (include_global_state) ---- */

cJSON *
co_snapshot_global_get(nd_node *n)
{
	nd_cluster *cl = nd_cluster_of(n);
	cJSON *g = cJSON_CreateObject(), *view;
	cJSON *st = cl ? nd_cluster_settings_json(cl) : NULL;
	cJSON *p = st ? cJSON_DetachItemFromObjectCaseSensitive(st, "persistent") : NULL;
	cJSON_AddItemToObject(g, "persistent_settings", p ? p : cJSON_CreateObject());
	cJSON_Delete(st);
	cJSON_AddItemToObject(g, "templates", co_template_export(n));
	/* the aliases' view: every alias, the indices it names, as each has it */
	view = cJSON_AddObjectToObject(g, "aliases");
	nd_index **ixs;
	size_t nix;
	nd_index_list(n, &ixs, &nix);
	for (size_t i = 0; i < nix; i++) {
		cJSON *a = nd_index_aliases_json(ixs[i]), *e;
		cJSON_ArrayForEach(e, a)
		{
			cJSON *per = cJSON_GetObjectItemCaseSensitive(view, e->string);
			if (!per)
				per = cJSON_AddObjectToObject(view, e->string);
			cJSON_AddItemToObject(per, nd_index_name(ixs[i]), cJSON_Duplicate(e, true));
		}
		cJSON_Delete(a);
		nd_index_release(ixs[i]);
	}
	cm_free(CM_MEM_NODE, ixs);
	return g;
}

/* The aliases' view back: every alias the view gives an index that
 * exists now and lacks it is added, with its options (one change, through
 * the master on a cluster). */
static cm_err
aliases_put(nd_node *n, const cJSON *view, cm_error *err)
{
	static const char *const opts[] = {"filter",         "index_routing", "search_routing",
	                                   "is_write_index", "is_hidden"};
	cJSON *actions = cJSON_CreateArray();
	const cJSON *a, *per;
	cJSON_ArrayForEach(a, view)
	{
		cJSON_ArrayForEach(per, a)
		{
			nd_index *ix = nd_index_get(n, per->string);
			if (!ix)
				continue;
			cJSON *have = nd_index_aliases_json(ix);
			bool there = cJSON_GetObjectItemCaseSensitive(have, a->string) != NULL;
			cJSON_Delete(have);
			nd_index_release(ix);
			if (there)
				continue;
			cJSON *add = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(add, "add");
			cJSON_AddStringToObject(o, "index", per->string);
			cJSON_AddStringToObject(o, "alias", a->string);
			for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++) {
				const cJSON *v = cJSON_GetObjectItemCaseSensitive(per, opts[k]);
				if (v)
					cJSON_AddItemToObject(o, opts[k], cJSON_Duplicate(v, true));
			}
			cJSON_AddItemToArray(actions, add);
		}
	}
	cm_err rc = CM_OK;
	nd_cluster *cl = nd_cluster_of(n);
	if (cJSON_GetArraySize(actions) && cl) {
		char *text = cJSON_PrintUnformatted(actions), *reply = NULL;
		rc = nd_cluster_meta(cl, ND_META_ALIASES, "", text, &reply, err);
		cJSON_free(text);
		cm_free(CM_MEM_NODE, reply);
	} else if (cJSON_GetArraySize(actions)) {
		rc = nd_alias_update(n, actions, err);
	}
	cJSON_Delete(actions);
	return rc;
}

cm_err
co_snapshot_global_put(nd_node *n, const cJSON *g, cm_error *err)
{
	nd_cluster *cl = nd_cluster_of(n);
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(g, "persistent_settings");
	cm_err rc;
	if (cl && cJSON_IsObject(p) && p->child) {
		/* through the master, checked there as a PUT _cluster/settings */
		cJSON *b = cJSON_CreateObject();
		cJSON_AddItemToObject(b, "persistent", cJSON_Duplicate(p, true));
		char *text = cJSON_PrintUnformatted(b), *reply = NULL;
		cJSON_Delete(b);
		rc = nd_cluster_meta(cl, ND_META_CLUSTER_SETTINGS, "", text, &reply, err);
		cJSON_free(text);
		cm_free(CM_MEM_NODE, reply);
		if (rc)
			return rc;
	}
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(g, "templates");
	if (cJSON_IsObject(t) && (rc = co_template_import(n, t, err)))
		return rc;
	return aliases_put(n, cJSON_GetObjectItemCaseSensitive(g, "aliases"), err);
}
