/* collapse's inner_hits: ES's expand phase. After the collapsed search,
 * each hit's group is searched again (the original query and post_filter
 * with a filter on the hit's collapse value, or on the value's absence),
 * once per inner_hits definition, over the same indices; the answers go
 * into the hit's "inner_hits". Solo and cluster alike: each group search
 * is an ordinary search through co_search_run. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR

/* The body of one group's search. */
static cJSON *
group_body(const cJSON *body, const char *field, const cJSON *value, const cJSON *ih)
{
	cJSON *b = cJSON_CreateObject(), *q = cJSON_CreateObject();
	cJSON *bq = cJSON_AddObjectToObject(q, "bool");
	const cJSON *orig = cJSON_GetObjectItemCaseSensitive(body, "query");
	const cJSON *pf = cJSON_GetObjectItemCaseSensitive(body, "post_filter");
	if (orig)
		cJSON_AddItemToArray(cJSON_AddArrayToObject(bq, "must"), cJSON_Duplicate(orig, true));
	cJSON *cond = cJSON_CreateObject();
	if (value && !cJSON_IsNull(value)) {
		cJSON *t = cJSON_AddObjectToObject(cond, "term");
		cJSON_AddItemToObject(t, field, cJSON_Duplicate(value, true));
		cJSON_AddItemToArray(cJSON_AddArrayToObject(bq, "filter"), cond);
	} else {
		cJSON_AddStringToObject(cJSON_AddObjectToObject(cond, "exists"), "field", field);
		cJSON_AddItemToArray(cJSON_AddArrayToObject(bq, "must_not"), cond);
	}
	cJSON_AddItemToObject(b, "query", q);
	if (pf)
		cJSON_AddItemToObject(b, "post_filter", cJSON_Duplicate(pf, true));
	cJSON_AddNumberToObject(b, "size", 3); /* InnerHitBuilder's default */
	const cJSON *v;
	cJSON_ArrayForEach(v, ih)
	{
		if (!strcmp(v->string, "name"))
			continue;
		cJSON_DeleteItemFromObjectCaseSensitive(b, v->string);
		cJSON_AddItemToObject(b, v->string, cJSON_Duplicate(v, true));
	}
	cJSON_AddBoolToObject(b, "track_total_hits", true);
	return b;
}

static const char *
inner_name(const cJSON *ih, const char *field)
{
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(ih, "name");
	return cJSON_IsString(n) ? n->valuestring : field;
}

cm_err
co_collapse_expand(co_req *r, nd_index **ixs, size_t n, const cJSON *body, cm_buf *out,
                   cm_error *err)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(body, "collapse");
	const cJSON *ihs = cJSON_GetObjectItemCaseSensitive(c, "inner_hits");
	const cJSON *fj = cJSON_GetObjectItemCaseSensitive(c, "field");
	if (!ihs || !cJSON_IsString(fj))
		return CM_OK;
	const char *field = fj->valuestring;
	cJSON *list = cJSON_IsArray(ihs) ? cJSON_Duplicate(ihs, true) : cJSON_CreateArray();
	if (!cJSON_IsArray(ihs))
		cJSON_AddItemToArray(list, cJSON_Duplicate(ihs, true));
	/* names are keys of the hit's inner_hits: no two alike */
	for (const cJSON *a = list->child; a; a = a->next)
		for (const cJSON *b = a->next; b; b = b->next)
			if (!strcmp(inner_name(a, field), inner_name(b, field))) {
				cm_err rc = cm_error_set(err, CM_EINVAL,
				                         "[inner_hits] already contains an entry for key [%s]",
				                         inner_name(a, field));
				cJSON_Delete(list);
				return rc;
			}
	cJSON *res = cJSON_ParseWithLength((const char *)out->data, out->len);
	cJSON *hits = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "hits"),
	                                               "hits");
	cm_err rc = CM_OK;
	cJSON *hit;
	cm_buf one;
	cm_buf_init(&one, MEM);
	cJSON_ArrayForEach(hit, hits)
	{
		const cJSON *vals = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(hit, "fields"), field);
		const cJSON *value = cJSON_GetArrayItem(vals, 0);
		cJSON *inner = cJSON_CreateObject();
		for (const cJSON *ih = list->child; ih && !rc; ih = ih->next) {
			cJSON *gb = group_body(body, field, value, ih);
			cm_buf_reset(&one);
			rc = co_search_run(r, ixs, n, gb, &one, err);
			cJSON_Delete(gb);
			cJSON *gr = rc ? NULL : cJSON_ParseWithLength((const char *)one.data, one.len);
			cJSON *gh = cJSON_DetachItemFromObjectCaseSensitive(gr, "hits");
			cJSON *entry = cJSON_AddObjectToObject(inner, inner_name(ih, field));
			cJSON_AddItemToObject(entry, "hits", gh ? gh : cJSON_CreateObject());
			cJSON_Delete(gr);
		}
		cJSON_AddItemToObject(hit, "inner_hits", inner);
		if (rc)
			break;
	}
	cm_buf_free(&one);
	cJSON_Delete(list);
	if (!rc && res) {
		char *s = cJSON_PrintUnformatted(res);
		cm_buf_reset(out);
		cm_buf_put(out, s, strlen(s));
		cJSON_free(s);
	}
	cJSON_Delete(res);
	return rc;
}
