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
#define PUTS(b, lit) cm_buf_put((b), (lit), sizeof(lit) - 1)

/* ---- spans of JSON text: the response is edited in place, never
 * re-serialized (its _source and numbers stay byte for byte) ---- */

static const char *
skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* Past the JSON value at p (NULL if it is malformed or runs past end). */
static const char *
skip_value(const char *p, const char *end)
{
	int depth = 0;
	p = skip_ws(p, end);
	do {
		if (p >= end)
			return NULL;
		char c = *p;
		if (c == '"') {
			for (p++; p < end && *p != '"'; p++)
				if (*p == '\\')
					p++;
			if (p >= end)
				return NULL;
			p++;
		} else if (c == '{' || c == '[') {
			depth++;
			p++;
		} else if (c == '}' || c == ']') {
			depth--;
			p++;
		} else if (c == ',' || c == ':' || c == ' ' || c == '\t' || c == '\n' ||
		           c == '\r') {
			if (!depth)
				return p;
			p++;
		} else {
			while (p < end && !strchr(",:]} \t\r\n", *p))
				p++;
		}
	} while (depth > 0);
	return p;
}

bool
co_json_member(const char *s, size_t len, const char *key, size_t *off, size_t *vlen)
{
	const char *p = skip_ws(s, s + len), *end = s + len;
	size_t klen = strlen(key);
	if (p >= end || *p != '{')
		return false;
	for (p = skip_ws(p + 1, end); p < end && *p == '"';) {
		const char *k = p + 1, *ke = skip_value(p, end);
		if (!ke)
			return false;
		bool hit = (size_t)(ke - 1 - k) == klen && !memcmp(k, key, klen);
		p = skip_ws(ke, end);
		if (p >= end || *p != ':')
			return false;
		const char *v = skip_ws(p + 1, end), *ve = skip_value(v, end);
		if (!ve)
			return false;
		if (hit) {
			*off = (size_t)(v - s);
			*vlen = (size_t)(ve - v);
			return true;
		}
		p = skip_ws(ve, end);
		if (p < end && *p == ',')
			p = skip_ws(p + 1, end);
	}
	return false;
}

/* The body of one group's search. */
static cJSON *
group_body(const cJSON *body, const char *field, const cJSON *value, const cJSON *ih)
{
	cJSON *b = cJSON_CreateObject(), *q = cJSON_CreateObject();
	cJSON *bq = cJSON_AddObjectToObject(q, "bool");
	const cJSON *orig = cJSON_GetObjectItemCaseSensitive(body, "query");
	const cJSON *pf = cJSON_GetObjectItemCaseSensitive(body, "post_filter");
	if (orig)
		cJSON_AddItemToArray(cJSON_AddArrayToObject(bq, "must"),
		                     cJSON_Duplicate(orig, true));
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
				cm_err rc = cm_error_set(
				    err, CM_EINVAL,
				    "[inner_hits] already contains an entry for key [%s]",
				    inner_name(a, field));
				cJSON_Delete(list);
				return rc;
			}
	/* the page's hits: their values from a parse, their spans in the text */
	const char *text = (const char *)out->data;
	size_t ho, hl, ao, al;
	cJSON *res = cJSON_ParseWithLength(text, out->len);
	cJSON *hits =
	    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "hits"), "hits");
	if (!cJSON_IsArray(hits) || !hits->child ||
	    !co_json_member(text, out->len, "hits", &ho, &hl) ||
	    !co_json_member(text + ho, hl, "hits", &ao, &al)) {
		cJSON_Delete(res);
		cJSON_Delete(list);
		return CM_OK;
	}
	const char *arr = text + ho + ao, *arr_end = arr + al, *p = skip_ws(arr + 1, arr_end);
	cm_buf next, one;
	cm_buf_init(&next, MEM);
	cm_buf_init(&one, MEM);
	cm_buf_put(&next, text, (size_t)(p - text));
	cm_err rc = CM_OK;
	const cJSON *hit;
	cJSON_ArrayForEach(hit, hits)
	{
		const char *he = skip_value(p, arr_end);
		if (!he || *p != '{') {
			rc = cm_error_set(err, CM_EINTERNAL, "cannot read the collapsed hits");
			break;
		}
		const cJSON *vals = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(hit, "fields"), field);
		const cJSON *value = cJSON_GetArrayItem(vals, 0);
		/* the hit without its closing brace, then "inner_hits" */
		const char *close = he - 1;
		cm_buf_put(&next, p, (size_t)(close - p));
		PUTS(&next, ",\"inner_hits\":{");
		for (const cJSON *ih = list->child; ih && !rc; ih = ih->next) {
			cJSON *gb = group_body(body, field, value, ih);
			cm_buf_reset(&one);
			rc = co_search_run(r, ixs, n, gb, &one, err);
			cJSON_Delete(gb);
			size_t go, gl;
			if (!rc &&
			    !co_json_member((const char *)one.data, one.len, "hits", &go, &gl))
				rc = cm_error_set(err, CM_EINTERNAL, "cannot read a group's hits");
			if (rc)
				break;
			if (ih != list->child)
				cm_buf_put_u8(&next, ',');
			cJSON *nm = cJSON_CreateString(inner_name(ih, field));
			char *q = cJSON_PrintUnformatted(nm);
			cm_buf_put(&next, q, strlen(q));
			cJSON_free(q);
			cJSON_Delete(nm);
			PUTS(&next, ":{\"hits\":");
			cm_buf_put(&next, one.data + go, gl);
			cm_buf_put_u8(&next, '}');
		}
		if (rc)
			break;
		PUTS(&next, "}}");
		p = skip_ws(he, arr_end);
		if (p < arr_end && *p == ',') {
			cm_buf_put_u8(&next, ',');
			p = skip_ws(p + 1, arr_end);
		}
	}
	if (!rc) {
		cm_buf_put(&next, p, out->len - (size_t)(p - text));
		cm_buf_reset(out);
		cm_buf_put(out, next.data, next.len);
	}
	cm_buf_free(&next);
	cm_buf_free(&one);
	cJSON_Delete(list);
	cJSON_Delete(res);
	return rc;
}
