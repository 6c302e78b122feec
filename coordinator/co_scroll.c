/* Scroll: the first page of a ?scroll= search, POST/GET /_search/scroll
 * and DELETE /_search/scroll. The contexts live on the nodes holding the
 * shard copies (node/nd_ctx.c); the scroll id says where, so any node
 * serves the next page. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR

/* Puts "_scroll_id" at the front of a rendered search body. */
static void
add_scroll_id(cm_buf *out, const char *id)
{
	cm_buf b;
	cm_buf_init(&b, MEM);
	cm_buf_printf(&b, "{\"_scroll_id\":\"%s\",", id);
	if (out->len > 1)
		cm_buf_put(&b, out->data + 1, out->len - 1);
	cm_buf_reset(out);
	cm_buf_put(out, b.data, b.len);
	cm_buf_free(&b);
}

bool
co_slice_take(co_req *r, cJSON *body, bool allowed, int *id, int *max)
{
	cJSON *sl = cJSON_GetObjectItemCaseSensitive(body, "slice"), *i, *m, *e;
	*id = *max = 0;
	if (!sl)
		return true;
	if (!allowed) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: [slice] can only be used with [scroll] or "
		                "[point-in-time] requests;");
		return false;
	}
	i = cJSON_GetObjectItemCaseSensitive(sl, "id");
	m = cJSON_GetObjectItemCaseSensitive(sl, "max");
	if (!cJSON_IsObject(sl) || !cJSON_IsNumber(i) || !cJSON_IsNumber(m)) {
		co_reply_errorf(r, CM_EPARSE, NULL,
		                "[slice] must be an object with the numbers [id] and [max]");
		return false;
	}
	cJSON_ArrayForEach(e, sl)
	{
		if (strcmp(e->string, "id") && strcmp(e->string, "max")) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "[slice] [%.60s] is not supported (slices are by shard, "
			                "then by a hash of _id)",
			                e->string);
			return false;
		}
	}
	/* above the index's max_slices_per_scroll is refused once the indices are known */
	if (m->valuedouble <= 1 || m->valuedouble > INT32_MAX ||
	    m->valuedouble != (int)m->valuedouble) {
		co_reply_errorf(r, CM_EINVAL, NULL, "max must be greater than 1");
		return false;
	}
	if (i->valuedouble < 0 || i->valuedouble >= m->valuedouble ||
	    i->valuedouble != (int)i->valuedouble) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "id must be greater than or equal to 0 and less than max");
		return false;
	}
	*id = (int)i->valuedouble;
	*max = (int)m->valuedouble;
	cJSON_DeleteItemFromObjectCaseSensitive(body, "slice");
	return true;
}

cm_err
co_scroll_start(co_req *r, nd_index **ixs, size_t n, const cJSON *body, int64_t keep_ms,
                int slice_id, int slice_max, cm_buf *out, cm_error *err)
{
	char *text, *id = NULL;
	cm_err rc;
	if (n == 0)
		return cm_error_set(err, CM_ENOINDEX, "no such index [_all]");
	text = cJSON_PrintUnformatted(body);
	rc = nd_scroll_open(r->node, ixs, n, text, keep_ms, slice_id, slice_max,
	                    co_param_bool(r, "typed_keys", false), out, &id, err);
	cJSON_free(text);
	if (!rc)
		add_scroll_id(out, id);
	cm_free(CM_MEM_NODE, id);
	return rc;
}

void
co_h_scroll(co_req *r)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad), *v;
	const char *id = co_seg(r, 2), *ka = co_param_get(r, "scroll");
	int64_t ms = 0;
	cm_buf out;
	cm_error err;
	char *next = NULL;

	if (bad)
		return;
	if (body && !cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EPARSE, NULL, "Unknown key for a VALUE in [body].");
		return;
	}
	if (!id)
		id = co_param_get(r, "scroll_id");
	if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(body, "scroll_id")))
		id = v->valuestring;
	if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(body, "scroll")))
		ka = v->valuestring;
	if (!id || !*id) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: scrollId is missing;");
		return;
	}
	if (ka && !co_parse_keep_alive(r, ka, &ms)) {
		cJSON_Delete(body);
		return;
	}
	cm_buf_init(&out, MEM);
	cm_error_clear(&err);
	if (nd_scroll_next(r->node, id, ms, &out, &next, &err)) {
		co_reply_error(r, &err, NULL);
	} else {
		add_scroll_id(&out, next);
		if (co_param_bool(r, "rest_total_hits_as_int", false))
			co_total_as_int(&out);
		co_reply_raw_json(r, 200, (const char *)out.data, out.len);
	}
	cm_free(CM_MEM_NODE, next);
	cm_buf_free(&out);
	cJSON_Delete(body);
}

/* Frees one id's contexts; false (after replying) when it does not parse. */
static bool
clear_one(co_req *r, const char *id, size_t *asked, size_t *freed)
{
	cm_error err;
	size_t nctx = 0, f = 0;
	cm_error_clear(&err);
	if (strcmp(id, "_all") == 0) {
		f = nd_scroll_clear_all(r->node);
		*asked += f;
		*freed += f;
		return true;
	}
	if (nd_scroll_clear(r->node, id, &nctx, &f, &err)) {
		co_reply_error(r, &err, NULL);
		return false;
	}
	*asked += nctx;
	*freed += f;
	return true;
}

void
co_h_scroll_clear(co_req *r)
{
	bool bad, ok = true;
	cJSON *body = co_body_json(r, &bad), *ids, *j;
	const char *path_id = co_seg(r, 2);
	size_t freed = 0, asked = 0;

	if (bad)
		return;
	ids = cJSON_GetObjectItemCaseSensitive(body, "scroll_id");
	/* as ES: a body's ids take precedence over the path's */
	if (path_id && !body) {
		char *copy = cm_strdup(MEM, path_id), *save = NULL, *tok;
		for (tok = strtok_r(copy, ",", &save); tok && ok; tok = strtok_r(NULL, ",", &save))
			ok = clear_one(r, tok, &asked, &freed);
		cm_free(MEM, copy);
	} else if (cJSON_IsString(ids)) {
		ok = clear_one(r, ids->valuestring, &asked, &freed);
	} else if (cJSON_IsArray(ids) && cJSON_GetArraySize(ids) > 0) {
		const cJSON *e;
		cJSON_ArrayForEach(e, ids)
		{
			if (!cJSON_IsString(e)) {
				co_reply_errorf(
				    r, CM_EPARSE, NULL,
				    "[scroll_id] must be a string or an array of strings");
				ok = false;
				break;
			}
			if (!(ok = clear_one(r, e->valuestring, &asked, &freed)))
				break;
		}
	} else {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: no scroll ids specified;");
		return;
	}
	cJSON_Delete(body);
	if (!ok)
		return;
	j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "succeeded", true);
	cJSON_AddNumberToObject(j, "num_freed", (double)freed);
	/* ES: 404 when nothing named was found */
	co_reply_json(r, freed > 0 || asked == 0 ? 200 : 404, j);
}
