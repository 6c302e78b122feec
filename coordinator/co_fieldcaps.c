/* GET|POST /_field_caps and /{index}/_field_caps: for every field the
 * `fields` patterns name, its type per index and whether it is searchable
 * and aggregatable, as Elasticsearch 7.10 answers (Kibana's index
 * patterns and Grafana ask it before anything else). Read from each
 * index's mapping: object and nested fields, multi-fields (`title.kw`) and
 * a subset of the metadata fields (docs/api.md). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "co_private.h"

/* One index's view of a field. */
typedef struct fc_field {
	const char *type;
	bool searchable, aggregatable;
	const cJSON *meta; /* the mapping's "meta", or NULL */
} fc_field;

static bool
aggregatable_type(const char *t)
{
	/* objects never get here (walk() makes them neither) */
	static const char *const no[] = {"text",     "binary",   "_source",   "_version",
	                                 "_routing", "_ignored", "completion"};
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (!strcmp(t, no[i]))
			return false;
	return true;
}

static bool
patterns_match(char **pat, size_t np, const char *name)
{
	for (size_t i = 0; i < np; i++)
		if (!fnmatch(pat[i], name, 0))
			return true;
	return false;
}

/* Adds (index, field) to out: out.fields[name][type] gathers the indices
 * and their flags. */
static void
add(cJSON *acc, const char *index, const char *name, const fc_field *f)
{
	cJSON *byname = cJSON_GetObjectItemCaseSensitive(acc, name);
	if (!byname)
		byname = cJSON_AddObjectToObject(acc, name);
	cJSON *t = cJSON_GetObjectItemCaseSensitive(byname, f->type);
	if (!t) {
		t = cJSON_AddObjectToObject(byname, f->type);
		cJSON_AddArrayToObject(t, "indices");
		cJSON_AddArrayToObject(t, "non_searchable");
		cJSON_AddArrayToObject(t, "non_aggregatable");
	}
	cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(t, "indices"),
	                     cJSON_CreateString(index));
	if (!f->searchable)
		cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(t, "non_searchable"),
		                     cJSON_CreateString(index));
	if (!f->aggregatable)
		cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(t, "non_aggregatable"),
		                     cJSON_CreateString(index));
	/* meta: each key's distinct values over the indices */
	const cJSON *m;
	cJSON_ArrayForEach(m, f->meta)
	{
		if (!cJSON_IsString(m))
			continue;
		cJSON *all = cJSON_GetObjectItemCaseSensitive(t, "meta");
		if (!all)
			all = cJSON_AddObjectToObject(t, "meta");
		cJSON *vals = cJSON_GetObjectItemCaseSensitive(all, m->string);
		if (!vals)
			vals = cJSON_AddArrayToObject(all, m->string);
		bool seen = false;
		const cJSON *v;
		cJSON_ArrayForEach(v, vals) seen |= !strcmp(v->valuestring, m->valuestring);
		if (!seen)
			cJSON_AddItemToArray(vals, cJSON_CreateString(m->valuestring));
	}
}

static void
walk(cJSON *acc, const char *index, const cJSON *props, const char *prefix, char **pat,
     size_t np)
{
	const cJSON *p;
	cJSON_ArrayForEach(p, props)
	{
		char name[1024];
		snprintf(name, sizeof(name), "%s%s%s", prefix, *prefix ? "." : "", p->string);
		const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
		const cJSON *sub = cJSON_GetObjectItemCaseSensitive(p, "properties");
		const char *type = cJSON_IsString(ty) ? ty->valuestring : "object";
		bool object = !strcmp(type, "object") || !strcmp(type, "nested");
		fc_field f = {.type = type,
		              .searchable = !object && !cJSON_IsFalse(
		                                           cJSON_GetObjectItemCaseSensitive(p, "index")),
		              .aggregatable = !object && aggregatable_type(type) &&
		                              !cJSON_IsFalse(
		                                  cJSON_GetObjectItemCaseSensitive(p, "doc_values")),
		              .meta = cJSON_GetObjectItemCaseSensitive(p, "meta")};
		if (!strcmp(type, "binary"))
			f.searchable = false;
		if (patterns_match(pat, np, name))
			add(acc, index, name, &f);
		if (sub)
			walk(acc, index, sub, name, pat, np);
		const cJSON *fields = cJSON_GetObjectItemCaseSensitive(p, "fields");
		if (fields)
			walk(acc, index, fields, name, pat, np);
	}
}

static const struct {
	const char *name;
	fc_field f;
} META[] = {
    {"_id", {"_id", true, true, NULL}},
    {"_index", {"_index", true, true, NULL}},
    {"_source", {"_source", false, false, NULL}},
    {"_seq_no", {"_seq_no", true, true, NULL}},
    {"_version", {"_version", false, false, NULL}},
    {"_routing", {"_routing", true, false, NULL}},
    {"_ignored", {"_ignored", true, false, NULL}},
};

/* The pattern list: ?fields= (comma-separated) or the body's "fields"
 * (an array or a comma-separated string). */
static size_t
patterns(co_req *r, const cJSON *body, char ***out)
{
	cm_buf all;
	cm_buf_init(&all, CM_MEM_COORD);
	const char *q = co_param_get(r, "fields");
	if (q)
		cm_buf_put(&all, q, strlen(q));
	const cJSON *bf = cJSON_GetObjectItemCaseSensitive(body, "fields"), *e;
	if (cJSON_IsString(bf)) {
		cm_buf_put_u8(&all, ',');
		cm_buf_put(&all, bf->valuestring, strlen(bf->valuestring));
	} else
		cJSON_ArrayForEach(e, bf) if (cJSON_IsString(e))
		{
			cm_buf_put_u8(&all, ',');
			cm_buf_put(&all, e->valuestring, strlen(e->valuestring));
		}
	cm_buf_put_u8(&all, 0);
	size_t n = 0, cap = 8;
	char **v = cm_malloc(CM_MEM_COORD, cap * sizeof(char *)), *save = NULL;
	for (char *t = strtok_r((char *)all.data, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ')
			t++;
		if (!*t)
			continue;
		if (n == cap)
			v = cm_realloc(CM_MEM_COORD, v, (cap *= 2) * sizeof(char *));
		v[n++] = cm_strdup(CM_MEM_COORD, t);
	}
	cm_buf_free(&all);
	*out = v;
	return n;
}

/* index_filter: keeps the indices where the query matches a document
 * (a count of each, as _search counts); false after replying an error
 * (ixs is then released). */
static bool
filter_indices(co_req *r, const cJSON *filter, nd_index **ixs, size_t *n)
{
	size_t kept = 0;
	for (size_t i = 0; i < *n; i++) {
		cJSON *b = cJSON_CreateObject();
		cJSON_AddItemToObject(b, "query", cJSON_Duplicate(filter, true));
		cJSON_AddNumberToObject(b, "size", 0);
		cJSON_AddBoolToObject(b, "track_total_hits", true);
		cm_buf out;
		cm_error err;
		cm_buf_init(&out, CM_MEM_COORD);
		cm_error_clear(&err);
		cm_err rc = co_search_run(r, &ixs[i], 1, b, &out, &err);
		cJSON_Delete(b);
		cJSON *res = rc ? NULL : cJSON_ParseWithLength((const char *)out.data, out.len);
		cm_buf_free(&out);
		if (rc) {
			co_reply_error(r, &err, NULL);
			for (size_t k = 0; k < kept; k++)
				nd_index_release(ixs[k]);
			for (size_t k = i; k < *n; k++)
				nd_index_release(ixs[k]);
			cm_free(CM_MEM_NODE, ixs);
			*n = 0;
			return false;
		}
		const cJSON *tot = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "hits"),
		                                     "total"),
		    "value");
		bool keep = cJSON_IsNumber(tot) && tot->valuedouble > 0;
		cJSON_Delete(res);
		if (keep)
			ixs[kept++] = ixs[i];
		else
			nd_index_release(ixs[i]);
	}
	*n = kept;
	return true;
}

void
co_h_field_caps(co_req *r)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad);
	if (bad)
		return;
	const cJSON *bf = cJSON_GetObjectItemCaseSensitive(body, "fields");
	if (bf && !cJSON_IsArray(bf) && !cJSON_IsString(bf)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EINVAL, "illegal_argument_exception",
		                "[fields] must be an array of field names or patterns");
		return;
	}
	bool unmapped = false;
	if (!co_param_flag(r, "include_unmapped", false, &unmapped)) {
		cJSON_Delete(body);
		return;
	}
	cJSON *filter = cJSON_DetachItemFromObjectCaseSensitive(body, "index_filter");
	if (filter && !cJSON_IsObject(filter)) {
		cJSON_Delete(filter);
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EPARSE, "parsing_exception",
		                "[index_filter] must be a query object");
		return;
	}
	char **pat;
	size_t np = patterns(r, body, &pat);
	cJSON_Delete(body);
	if (np == 0) {
		cm_free(CM_MEM_COORD, pat);
		cJSON_Delete(filter);
		co_reply_errorf(r, CM_EINVAL, "illegal_argument_exception",
		                "specified fields can't be null or empty");
		return;
	}
	const char *s = co_seg(r, 0);
	nd_index **ixs;
	size_t n;
	if (!co_resolve(r, s && s[0] != '_' ? s : "_all", &ixs, &n) ||
	    (filter && !filter_indices(r, filter, ixs, &n))) {
		for (size_t i = 0; i < np; i++)
			cm_free(CM_MEM_COORD, pat[i]);
		cm_free(CM_MEM_COORD, pat);
		cJSON_Delete(filter);
		return;
	}
	cJSON_Delete(filter);
	cJSON *acc = cJSON_CreateObject(), *names = cJSON_CreateArray();
	for (size_t i = 0; i < n; i++) {
		const char *ix = nd_index_name(ixs[i]);
		cJSON_AddItemToArray(names, cJSON_CreateString(ix));
		st_mapping *m = nd_index_mapping(ixs[i]);
		cJSON *mj = st_mapping_to_json(m);
		st_mapping_unref(m);
		walk(acc, ix, cJSON_GetObjectItemCaseSensitive(mj, "properties"), "", pat, np);
		cJSON_Delete(mj);
		for (size_t k = 0; k < sizeof(META) / sizeof(META[0]); k++)
			if (patterns_match(pat, np, META[k].name))
				add(acc, ix, META[k].name, &META[k].f);
	}
	co_release_all(ixs, n);
	for (size_t i = 0; i < np; i++)
		cm_free(CM_MEM_COORD, pat[i]);
	cm_free(CM_MEM_COORD, pat);

	/* the answer: per field and type; "indices" only when the field has
	 * several types; non_searchable/aggregatable_indices only when mixed */
	cJSON *out = cJSON_CreateObject(), *fields;
	cJSON_AddItemToObject(out, "indices", names);
	fields = cJSON_AddObjectToObject(out, "fields");
	int total = cJSON_GetArraySize(names);
	const cJSON *byname;
	cJSON_ArrayForEach(byname, acc)
	{
		cJSON *o = cJSON_AddObjectToObject(fields, byname->string);
		int ntypes = cJSON_GetArraySize(byname), seen = 0;
		const cJSON *t;
		cJSON_ArrayForEach(t, byname)
		{
			const cJSON *in = cJSON_GetObjectItemCaseSensitive(t, "indices");
			const cJSON *ns = cJSON_GetObjectItemCaseSensitive(t, "non_searchable");
			const cJSON *na = cJSON_GetObjectItemCaseSensitive(t, "non_aggregatable");
			int ni = cJSON_GetArraySize(in), nns = cJSON_GetArraySize(ns),
			    nna = cJSON_GetArraySize(na);
			seen += ni;
			cJSON *e = cJSON_AddObjectToObject(o, t->string);
			cJSON_AddStringToObject(e, "type", t->string);
			cJSON_AddBoolToObject(e, "searchable", nns == 0);
			cJSON_AddBoolToObject(e, "aggregatable", nna == 0);
			if (ntypes > 1 || (unmapped && ni < total))
				cJSON_AddItemToObject(e, "indices", cJSON_Duplicate(in, true));
			if (nns && nns < ni)
				cJSON_AddItemToObject(e, "non_searchable_indices", cJSON_Duplicate(ns, true));
			if (nna && nna < ni)
				cJSON_AddItemToObject(e, "non_aggregatable_indices",
				                      cJSON_Duplicate(na, true));
			const cJSON *meta = cJSON_GetObjectItemCaseSensitive(t, "meta");
			if (meta)
				cJSON_AddItemToObject(e, "meta", cJSON_Duplicate(meta, true));
		}
		if (unmapped && seen < total) {
			cJSON *e = cJSON_AddObjectToObject(o, "unmapped"), *list;
			cJSON_AddStringToObject(e, "type", "unmapped");
			cJSON_AddBoolToObject(e, "searchable", false);
			cJSON_AddBoolToObject(e, "aggregatable", false);
			list = cJSON_AddArrayToObject(e, "indices");
			const cJSON *nm;
			cJSON_ArrayForEach(nm, names)
			{
				bool has = false;
				cJSON_ArrayForEach(t, byname)
				{
					const cJSON *x;
					cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(t, "indices"))
						has |= !strcmp(x->valuestring, nm->valuestring);
				}
				if (!has)
					cJSON_AddItemToArray(list, cJSON_CreateString(nm->valuestring));
			}
		}
	}
	cJSON_Delete(acc);
	co_reply_json(r, 200, out);
}
