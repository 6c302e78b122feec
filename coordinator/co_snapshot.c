/* REST handlers of _snapshot and _cat/snapshots (node/nd_snap.h does the
 * work). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

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
		rc = nd_snap_get(r->node, repo, snap, &out, &err);
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

void
co_h_snapshot_status(co_req *r)
{
	cJSON *out = NULL;
	cm_error err;
	cm_error_clear(&err);
	/* /_snapshot/_status, /_snapshot/{repo}/_status, /_snapshot/{repo}/{snap}/_status */
	const char *repo = r->nsegs >= 3 ? co_seg(r, 1) : NULL;
	const char *snap = r->nsegs >= 4 ? co_seg(r, 2) : NULL;
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
	static const char *cols[] = {
	    "id",         "repository",        "status",        "start_epoch",
	    "start_time", "end_epoch",         "end_time",      "duration",
	    "indices",    "successful_shards", "failed_shards", "total_shards"};
	const size_t nc = sizeof(cols) / sizeof(cols[0]);
	const char *repo = co_seg(r, 2), *fmt = co_param_get(r, "format");
	cJSON *rows = NULL, *row;
	cm_error err;
	cm_error_clear(&err);
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
	if (fmt && strcmp(fmt, "json") == 0) {
		co_reply_json(r, 200, rows);
		return;
	}
	size_t w[16] = {0};
	bool v = co_param_get(r, "v") != NULL;
	for (size_t c = 0; c < nc; c++)
		w[c] = v ? strlen(cols[c]) : 0;
	cJSON_ArrayForEach(row, rows) for (size_t c = 0; c < nc; c++)
	{
		const cJSON *x = cJSON_GetObjectItemCaseSensitive(row, cols[c]);
		size_t l = cJSON_IsString(x) ? strlen(x->valuestring) : 0;
		if (l > w[c])
			w[c] = l;
	}
	cm_buf t;
	cm_buf_init(&t, CM_MEM_COORDINATOR);
	if (v) {
		for (size_t c = 0; c < nc; c++)
			cm_buf_printf(&t, "%-*s%s", c + 1 < nc ? (int)w[c] : 0, cols[c],
			              c + 1 < nc ? " " : "\n");
	}
	cJSON_ArrayForEach(row, rows)
	{
		for (size_t c = 0; c < nc; c++) {
			const cJSON *x = cJSON_GetObjectItemCaseSensitive(row, cols[c]);
			cm_buf_printf(&t, "%-*s%s", (int)w[c],
			              cJSON_IsString(x) ? x->valuestring : "",
			              c + 1 < nc ? " " : "\n");
		}
	}
	cJSON_Delete(rows);
	co_reply_text(r, 200, "text/plain; charset=UTF-8", (const char *)t.data, t.len);
	cm_buf_free(&t);
}
