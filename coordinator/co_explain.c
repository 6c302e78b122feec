/* _explain (does one document match a query, and with what score) and
 * _validate/query (does a query parse against the indices). Both run the
 * query the way _search does: _explain searches the document's index for
 * that id under the query and reads the hit's explanation. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"
#include "../search/sr.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR

/* The body as an object with at most "query" in it (false after a 400).
 * With other non-NULL, another key is not refused: its name goes there
 * (the first one, truncated to 64 bytes) and the body is still given. */
static bool
query_body(co_req *r, const char *api, cJSON **out, char *other)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad), *c;
	*out = NULL;
	if (bad)
		return false;
	if (!body)
		body = cJSON_CreateObject();
	if (!cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EPARSE, NULL, "request body must be an object");
		return false;
	}
	cJSON_ArrayForEach(c, body)
	{
		if (strcmp(c->string, "query") && other) {
			if (!*other)
				snprintf(other, 64, "%s", c->string);
		} else if (strcmp(c->string, "query")) {
			co_reply_errorf(r, CM_EPARSE, NULL, "request does not support [%.60s] in %s",
			                c->string, api);
			cJSON_Delete(body);
			return false;
		}
	}
	if (!co_search_fold_params(r, body)) {
		cJSON_Delete(body);
		return false;
	}
	*out = body;
	return true;
}

void
co_h_explain(co_req *r)
{
	const char *name = co_seg(r, 0), *id = co_seg(r, 2);
	cJSON *body;
	nd_index **ixs;
	size_t n;
	if (!query_body(r, "_explain", &body, NULL))
		return;
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(body, "query");
	if (!q) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL, "Validation Failed: 1: query is missing;");
		return;
	}
	if (!co_resolve(r, name, &ixs, &n)) {
		cJSON_Delete(body);
		return;
	}
	if (n != 1) {
		co_release_all(ixs, n);
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "explain can only be run against a single index, [%s] names %zu", name,
		                n);
		return;
	}
	/* the query, and the document by id, scored as the query scores it */
	cJSON *s = cJSON_CreateObject(), *b = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(b, "must"), cJSON_Duplicate(q, true));
	cJSON *ids = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(cJSON_AddObjectToObject(ids, "ids"), "values"),
	                     cJSON_CreateString(id));
	cJSON_AddItemToArray(cJSON_AddArrayToObject(b, "filter"), ids);
	cJSON_AddItemToObject(cJSON_AddObjectToObject(s, "query"), "bool", b);
	cJSON_AddBoolToObject(s, "explain", true);
	cJSON_AddNumberToObject(s, "size", 1);
	/* _source, _source_includes, _source_excludes: the document comes back
	 * as "get", filtered as a search filters it */
	const char *sp = co_param_get(r, "_source"), *si = co_param_get(r, "_source_includes"),
	           *se = co_param_get(r, "_source_excludes");
	bool want_get = (sp || si || se) && !(sp && !strcmp(sp, "false"));
	if (want_get) {
		cJSON *f = cJSON_AddObjectToObject(s, "_source");
		const char *inc = si ? si : sp && strcmp(sp, "true") && *sp ? sp : NULL;
		for (int k = 0; k < 2; k++) {
			const char *list = k ? se : inc;
			if (!list)
				continue;
			cJSON *a = cJSON_AddArrayToObject(f, k ? "excludes" : "includes");
			char *copy = cm_strdup(MEM, list), *save = NULL, *tok;
			for (tok = strtok_r(copy, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save))
				cJSON_AddItemToArray(a, cJSON_CreateString(tok));
			cm_free(MEM, copy);
		}
		cJSON_AddBoolToObject(s, "seq_no_primary_term", true);
	} else {
		cJSON_AddBoolToObject(s, "_source", false);
	}
	cm_buf out;
	cm_error err;
	cm_buf_init(&out, MEM);
	cm_error_clear(&err);
	cm_err rc = co_search_run(r, ixs, n, s, &out, &err);
	cJSON *res = rc ? NULL : cJSON_ParseWithLength((const char *)out.data, out.len);
	cm_buf_free(&out);
	cJSON_Delete(s);
	cJSON_Delete(body);
	if (rc || !res) {
		if (!rc)
			cm_error_set(&err, CM_EINTERNAL, "unreadable search response");
		co_reply_error(r, &err, name);
		cJSON_Delete(res);
		co_release_all(ixs, n);
		return;
	}
	cJSON *hit = cJSON_GetArrayItem(
	    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "hits"), "hits"), 0);
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "_index", nd_index_name(ixs[0]));
	cJSON_AddStringToObject(j, "_type", "_doc");
	cJSON_AddStringToObject(j, "_id", id);
	cJSON_AddBoolToObject(j, "matched", hit != NULL);
	cJSON *ex = hit ? cJSON_DetachItemFromObjectCaseSensitive(hit, "_explanation") : NULL;
	if (!ex) {
		ex = cJSON_CreateObject();
		cJSON_AddNumberToObject(ex, "value", 0.0);
		cJSON_AddStringToObject(ex, "description",
		                        "no matching term: the document does not match the query or "
		                        "does not exist");
		cJSON_AddArrayToObject(ex, "details");
	}
	cJSON_AddItemToObject(j, "explanation", ex);
	if (want_get && hit) {
		cJSON *g = cJSON_AddObjectToObject(j, "get"), *v;
		static const char *const keys[] = {"_seq_no", "_primary_term"};
		for (int k = 0; k < 2; k++)
			if ((v = cJSON_DetachItemFromObjectCaseSensitive(hit, keys[k])))
				cJSON_AddItemToObject(g, keys[k], v);
		cJSON_AddBoolToObject(g, "found", true);
		if ((v = cJSON_DetachItemFromObjectCaseSensitive(hit, "_source")))
			cJSON_AddItemToObject(g, "_source", v);
	}
	cJSON_Delete(res);
	co_release_all(ixs, n);
	co_reply_json(r, 200, j);
}

void
co_h_validate(co_req *r)
{
	const char *seg0 = co_seg(r, 0);
	const char *expr = seg0 && strcmp(seg0, "_validate") ? seg0 : "_all";
	bool explain = co_param_bool(r, "explain", false);
	bool all_shards = co_param_bool(r, "all_shards", false);
	co_param_bool(r, "rewrite", false);
	cJSON *body;
	nd_index **ixs;
	size_t n;
	/* a body key other than query makes the request invalid, not a 400 */
	char other[64] = "";
	if (!query_body(r, "_validate", &body, other))
		return;
	if (!co_resolve(r, expr, &ixs, &n)) {
		cJSON_Delete(body);
		return;
	}
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(body, "query");
	sr_query *parsed = NULL;
	cm_error err;
	cm_error_clear(&err);
	bool valid = !q || sr_query_from_json(q, &parsed, &err) == CM_OK;
	sr_query_free(parsed);
	if (other[0]) {
		valid = false;
		cm_error_clear(&err);
		cm_error_set(&err, CM_EPARSE, "request does not support [%s]", other);
	}
	int shards = 0;
	for (size_t i = 0; i < n; i++)
		shards += all_shards ? nd_index_nshards(ixs[i]) : 1;
	cJSON *j = cJSON_CreateObject();
	cJSON_AddItemToObject(j, "_shards", co_shards_json(shards, shards, 0));
	cJSON_AddBoolToObject(j, "valid", valid);
	if (other[0] && explain) {
		/* ES names the exception class of this one */
		char msg[sizeof(err.reason) + 48];
		snprintf(msg, sizeof(msg), "org.elasticsearch.common.ParsingException: %s",
		         err.reason);
		cJSON_AddStringToObject(j, "error", msg);
	} /* without explain, ES says only valid: false */
	if (explain) {
		cJSON *arr = cJSON_AddArrayToObject(j, "explanations");
		char *qtext = q ? cJSON_PrintUnformatted(q) : NULL;
		for (size_t i = 0; i < n; i++) {
			cJSON *e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "index", nd_index_name(ixs[i]));
			cJSON_AddBoolToObject(e, "valid", valid);
			if (valid)
				cJSON_AddStringToObject(e, "explanation", qtext ? qtext : "*:*");
			else
				cJSON_AddStringToObject(e, "error", err.reason[0] ? err.reason
				                                                  : cm_err_msg(err.code));
			cJSON_AddItemToArray(arr, e);
		}
		cJSON_free(qtext);
	}
	co_release_all(ixs, n);
	cJSON_Delete(body);
	co_reply_json(r, 200, j);
}
