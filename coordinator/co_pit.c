/* Point in time: POST /{index}/_pit, DELETE /_pit, and searches with a
 * "pit" in the body (no index in the path). The contexts are those of
 * scroll (node/nd_ctx.c) without a cursor: paging is from/size or
 * search_after over the sort, which always ends with the implicit
 * _shard_doc tiebreaker (as ES adds it). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR

/* Puts "pit_id" at the front of a rendered search body. */
static void
add_pit_id(cm_buf *out, const char *id)
{
	cm_buf b;
	cm_buf_init(&b, MEM);
	cm_buf_printf(&b, "{\"pit_id\":\"%s\",", id);
	if (out->len > 1)
		cm_buf_put(&b, out->data + 1, out->len - 1);
	cm_buf_reset(out);
	cm_buf_put(out, b.data, b.len);
	cm_buf_free(&b);
}

void
co_h_pit_open(co_req *r)
{
	const char *ka = co_param_get(r, "keep_alive");
	int64_t ms = 0;
	nd_index **ixs;
	size_t n;
	char *id = NULL;
	cm_error err;

	co_param_get(r, "preference");
	co_param_get(r, "routing");
	if (!ka) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: [keep_alive] is not specified;");
		return;
	}
	if (!co_parse_keep_alive(r, ka, &ms))
		return;
	if (!co_resolve(r, co_seg(r, 0), &ixs, &n))
		return;
	cm_error_clear(&err);
	if (n == 0) {
		co_reply_errorf(r, CM_ENOINDEX, co_seg(r, 0), "no such index [%s]", co_seg(r, 0));
	} else if (nd_pit_open(r->node, ixs, n, ms, &id, &err)) {
		co_reply_error(r, &err, NULL);
	} else {
		cJSON *j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "id", id);
		co_reply_json(r, 200, j);
	}
	cm_free(CM_MEM_NODE, id);
	co_release_all(ixs, n);
}

void
co_h_pit_close(co_req *r)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad), *id;
	size_t nctx = 0, freed = 0;
	cm_error err;

	if (bad)
		return;
	id = cJSON_GetObjectItemCaseSensitive(body, "id");
	if (!cJSON_IsString(id) || !*id->valuestring) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: point in time id is missing;");
		return;
	}
	cm_error_clear(&err);
	if (nd_pit_close(r->node, id->valuestring, &nctx, &freed, &err)) {
		co_reply_error(r, &err, NULL);
	} else {
		cJSON *j = cJSON_CreateObject();
		cJSON_AddBoolToObject(j, "succeeded", true);
		cJSON_AddNumberToObject(j, "num_freed", (double)freed);
		co_reply_json(r, freed ? 200 : 404, j);
	}
	cJSON_Delete(body);
}

static bool
names_shard_doc(const cJSON *e)
{
	if (cJSON_IsString(e))
		return strcmp(e->valuestring, "_shard_doc") == 0;
	return cJSON_IsObject(e) && cJSON_GetObjectItemCaseSensitive(e, "_shard_doc");
}

/* The sort with _shard_doc last, as ES adds it to a point-in-time search. */
static void
add_tiebreaker(cJSON *body)
{
	cJSON *sort = cJSON_GetObjectItemCaseSensitive(body, "sort"), *arr, *e;
	if (!sort) {
		arr = cJSON_CreateArray();
		cJSON_AddItemToArray(arr, cJSON_CreateString("_score"));
		cJSON_AddItemToObject(body, "sort", arr);
	} else if (!cJSON_IsArray(sort)) {
		arr = cJSON_CreateArray();
		cJSON_AddItemToArray(arr, cJSON_DetachItemFromObjectCaseSensitive(body, "sort"));
		cJSON_AddItemToObject(body, "sort", arr);
	} else {
		arr = sort;
	}
	cJSON_ArrayForEach(e, arr)
	{
		if (names_shard_doc(e))
			return;
	}
	cJSON_AddItemToArray(arr, cJSON_CreateString("_shard_doc"));
}

void
co_pit_search(co_req *r, cJSON *body, int slice_id, int slice_max)
{
	cJSON *pit = cJSON_GetObjectItemCaseSensitive(body, "pit"), *id, *ka;
	const char *path = co_seg(r, 0);
	int64_t ms = 0;
	cm_buf out;
	cm_error err;

	if (path && strcmp(path, "_search")) {
		co_reply_errorf(
		    r, CM_EVALIDATE, NULL,
		    "Validation Failed: 1: [indices] cannot be used with point in time. Do "
		    "not specify any index with point in time.;");
		return;
	}
	if (co_param_get(r, "scroll")) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: using [point in time] is not allowed in a "
		                "scroll context;");
		return;
	}
	id = cJSON_GetObjectItemCaseSensitive(pit, "id");
	ka = cJSON_GetObjectItemCaseSensitive(pit, "keep_alive");
	if (!cJSON_IsObject(pit) || !cJSON_IsString(id) || (ka && !cJSON_IsString(ka))) {
		co_reply_errorf(r, CM_EPARSE, NULL,
		                "[pit] must be an object with an [id] string and an optional "
		                "[keep_alive] string");
		return;
	}
	if (ka && !co_parse_keep_alive(r, ka->valuestring, &ms))
		return;
	char *pid = cm_strdup(MEM, id->valuestring);
	cJSON_DeleteItemFromObjectCaseSensitive(body, "pit");
	add_tiebreaker(body);
	char *text = cJSON_PrintUnformatted(body);
	cm_buf_init(&out, MEM);
	cm_error_clear(&err);
	if (nd_pit_search(r->node, pid, ms, text, slice_id, slice_max,
	                  co_param_bool(r, "typed_keys", false), &out, &err)) {
		co_reply_error(r, &err, NULL);
	} else {
		add_pit_id(&out, pid);
		if (co_param_bool(r, "rest_total_hits_as_int", false))
			co_total_as_int(&out);
		co_reply_raw_json(r, 200, (const char *)out.data, out.len);
	}
	cJSON_free(text);
	cm_free(MEM, pid);
	cm_buf_free(&out);
}
