/* Search APIs: _search (URL parameters folded into the body), _count,
 * _msearch (scroll: co_scroll.c, point in time: co_pit.c, by-query
 * operations: co_byquery.c). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "../search/sr_agg.h"
#include "co_doc.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define MAX_SCROLL_KEEPALIVE_MS (24LL * 3600 * 1000)
#define MSEARCH_MAX 1024

static const char *
search_index_expr(co_req *r)
{
	const char *s = co_seg(r, 0);
	if (!s || strcmp(s, "_search") == 0 || strcmp(s, "_count") == 0 ||
	    strcmp(s, "_msearch") == 0)
		return "_all";
	return s;
}

/* Sets key in obj, replacing an existing value. */
static void
obj_set(cJSON *obj, const char *key, cJSON *v)
{
	if (cJSON_GetObjectItemCaseSensitive(obj, key))
		cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v);
	else
		cJSON_AddItemToObject(obj, key, v);
}

static bool
parse_uint_param(co_req *r, const char *name, const char *v, long long max, long long *out)
{
	char *end;
	long long n = strtoll(v, &end, 10);
	if (!*v || *end || n < 0 || n > max) {
		co_reply_errorf(r, CM_EINVAL, NULL, "Failed to parse int parameter [%s] with value [%.60s]",
		                name, v);
		return false;
	}
	*out = n;
	return true;
}

/* Folds the URL parameters of a search into its body, the way ES lets
 * them override it. Returns false after replying with an error. */
static bool
fold_search_params(co_req *r, cJSON *body, bool count_only)
{
	const char *q = co_param_get(r, "q"), *v;
	long long n;

	if (q) {
		cJSON *qs = cJSON_CreateObject(), *wrap = cJSON_CreateObject();
		const char *df = co_param_get(r, "df"), *op = co_param_get(r, "default_operator");
		const char *an = co_param_get(r, "analyzer");
		cJSON_AddStringToObject(qs, "query", q);
		if (df)
			cJSON_AddStringToObject(qs, "default_field", df);
		if (op) {
			if (strcasecmp(op, "and") && strcasecmp(op, "or")) {
				cJSON_Delete(qs);
				cJSON_Delete(wrap);
				co_reply_errorf(r, CM_EINVAL, NULL, "operator [%.60s] is not allowed", op);
				return false;
			}
			cJSON_AddStringToObject(qs, "default_operator", op);
		}
		if (an)
			cJSON_AddStringToObject(qs, "analyzer", an);
		if ((v = co_param_get(r, "analyze_wildcard")))
			cJSON_AddBoolToObject(qs, "analyze_wildcard", strcmp(v, "false") != 0);
		if ((v = co_param_get(r, "lenient")))
			cJSON_AddBoolToObject(qs, "lenient", strcmp(v, "false") != 0);
		cJSON_AddItemToObject(wrap, "query_string", qs);
		obj_set(body, "query", wrap);
	}
	if (count_only)
		return true;
	if ((v = co_param_get(r, "from"))) {
		/* a negative integer is ES's own message, as in the body */
		char *end;
		long long neg = strtoll(v, &end, 10);
		if (*v && !*end && neg < 0 && neg >= INT32_MIN) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "[from] parameter cannot be negative but was [%lld]", neg);
			return false;
		}
		if (!parse_uint_param(r, "from", v, INT32_MAX, &n))
			return false;
		obj_set(body, "from", cJSON_CreateNumber((double)n));
	}
	if ((v = co_param_get(r, "size"))) {
		char *end;
		long long neg = strtoll(v, &end, 10);
		if (*v && !*end && neg < 0 && neg >= INT32_MIN) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "[size] parameter cannot be negative, found [%lld]", neg);
			return false;
		}
		if (!parse_uint_param(r, "size", v, INT32_MAX, &n))
			return false;
		obj_set(body, "size", cJSON_CreateNumber((double)n));
	}
	if ((v = co_param_get(r, "terminate_after"))) {
		if (!parse_uint_param(r, "terminate_after", v, INT32_MAX, &n))
			return false;
		obj_set(body, "terminate_after", cJSON_CreateNumber((double)n));
	}
	if ((v = co_param_get(r, "timeout")))
		obj_set(body, "timeout", cJSON_CreateString(v));
	/* ES's validation of the values these take (they change nothing here) */
	if ((v = co_param_get(r, "batched_reduce_size")) && atoll(v) < 2 && *v) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: batchedReduceSize must be >= 2;");
		return false;
	}
	if ((v = co_param_get(r, "pre_filter_shard_size")) && atoll(v) < 1 && *v) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: preFilterShardSize must be >= 1;");
		return false;
	}
	if ((v = co_param_get(r, "track_total_hits"))) {
		char *end;
		long long neg = strtoll(v, &end, 10);
		if (*v && !*end && neg < -1 && neg >= INT32_MIN) {
			co_reply_errorf(
			    r, CM_EINVAL, NULL,
			    "[track_total_hits] parameter must be positive or equals to -1, "
			    "got %lld",
			    neg);
			return false;
		}
		if (*v && !*end && neg == -1)
			v = "true"; /* -1: count them all */
		if (strcmp(v, "true") == 0 || !*v)
			obj_set(body, "track_total_hits", cJSON_CreateTrue());
		else if (strcmp(v, "false") == 0)
			obj_set(body, "track_total_hits", cJSON_CreateFalse());
		else {
			if (!parse_uint_param(r, "track_total_hits", v, INT32_MAX, &n))
				return false;
			obj_set(body, "track_total_hits", cJSON_CreateNumber((double)n));
		}
	}
	if ((v = co_param_get(r, "sort")) && *v) {
		/* "field:asc,other:desc,_score" */
		cJSON *arr = cJSON_CreateArray();
		char *copy = cm_strdup(MEM, v), *save = NULL, *tok;
		for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			char *colon = strrchr(tok, ':');
			if (colon) {
				*colon = 0;
				cJSON *o = cJSON_CreateObject();
				cJSON_AddStringToObject(o, tok, colon + 1);
				cJSON_AddItemToArray(arr, o);
			} else {
				cJSON_AddItemToArray(arr, cJSON_CreateString(tok));
			}
		}
		cm_free(MEM, copy);
		obj_set(body, "sort", arr);
	}
	{
		const char *src = co_param_get(r, "_source"), *inc = co_param_get(r, "_source_includes");
		const char *exc = co_param_get(r, "_source_excludes");
		if (src && (strcmp(src, "false") == 0 || strcmp(src, "true") == 0))
			obj_set(body, "_source", cJSON_CreateBool(strcmp(src, "true") == 0));
		else if (src || inc || exc) {
			cJSON *o = cJSON_CreateObject();
			const char *lists[2] = {src && *src ? src : inc, exc};
			const char *keys[2] = {"includes", "excludes"};
			for (int k = 0; k < 2; k++) {
				if (!lists[k] || !*lists[k])
					continue;
				cJSON *a = cJSON_AddArrayToObject(o, keys[k]);
				char *copy = cm_strdup(MEM, lists[k]), *save = NULL, *tok;
				for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
					cJSON_AddItemToArray(a, cJSON_CreateString(tok));
				cm_free(MEM, copy);
			}
			obj_set(body, "_source", o);
		}
	}
	if ((v = co_param_get(r, "fanout")) && strcmp(v, "serial") && strcmp(v, "per_shard") &&
	    strcmp(v, "per_node")) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "[fanout] must be one of [serial], [per_shard], [per_node], got [%.60s]",
		                v);
		return false;
	}
	if ((v = co_param_get(r, "min_score"))) {
		char *end;
		double ms = strtod(v, &end);
		if (!*v || *end) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "Failed to parse float parameter [min_score] with value [%.60s]", v);
			return false;
		}
		obj_set(body, "min_score", cJSON_CreateNumber(ms));
	}
	if ((v = co_param_get(r, "stats")) && *v) {
		/* ?stats=a,b: the search stats groups, as the body's "stats" */
		cJSON *a = cJSON_CreateArray();
		char *copy = cm_strdup(MEM, v), *save = NULL, *tok;
		for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			cJSON_AddItemToArray(a, cJSON_CreateString(tok));
		cm_free(MEM, copy);
		obj_set(body, "stats", a);
	}
	if ((v = co_param_get(r, "track_scores")))
		obj_set(body, "track_scores", cJSON_CreateBool(strcmp(v, "false") != 0));
	if ((v = co_param_get(r, "explain")))
		obj_set(body, "explain", cJSON_CreateBool(strcmp(v, "false") != 0));
	if ((v = co_param_get(r, "version")))
		obj_set(body, "version", cJSON_CreateBool(strcmp(v, "false") != 0));
	if ((v = co_param_get(r, "seq_no_primary_term")))
		obj_set(body, "seq_no_primary_term", cJSON_CreateBool(strcmp(v, "false") != 0));
	/* comma lists, as the body's arrays */
	static const char *lists[] = {"stored_fields", "docvalue_fields"};
	for (size_t i = 0; i < 2; i++) {
		if (!(v = co_param_get(r, lists[i])))
			continue;
		cJSON *a = cJSON_CreateArray();
		char *copy = cm_strdup(MEM, v), *save = NULL, *tok;
		for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			cJSON_AddItemToArray(a, cJSON_CreateString(tok));
		cm_free(MEM, copy);
		obj_set(body, lists[i], a);
	}
	const char *st = co_param_get(r, "search_type");
	if (st && strcmp(st, "query_then_fetch") && strcmp(st, "dfs_query_then_fetch")) {
		/* ES's REST layer refuses the others by name */
		if (!strcmp(st, "query_and_fetch") || !strcmp(st, "dfs_query_and_fetch"))
			co_reply_errorf(r, CM_EINVAL, NULL, "Unsupported search type [%.40s]", st);
		else
			co_reply_errorf(r, CM_EINVAL, NULL, "No search type for [%.40s]", st);
		return false;
	}
	/* accepted, with no effect on a single node */
	static const char *noop[] = {"search_type", "preference", "request_cache", "routing",
	                             "typed_keys", "allow_partial_search_results",
	                             "batched_reduce_size", "pre_filter_shard_size",
	                             "max_concurrent_shard_requests", "ccs_minimize_roundtrips",
	                             "allow_no_indices", "expand_wildcards", "ignore_throttled",
	                             "stats", "analyze_wildcard", "lenient"};
	for (size_t i = 0; i < sizeof(noop) / sizeof(noop[0]); i++)
		co_param_get(r, noop[i]);
	return true;
}

/* The ES error for a search whose every shard failed. */
static void
reply_all_shards_failed(co_req *r, const cm_error *e, nd_index **ixs, size_t n)
{
	cJSON *doc = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(doc, "error");
	cJSON *rc = cJSON_AddArrayToObject(err, "root_cause"), *cause = cJSON_CreateObject();
	cJSON *fs;
	const char *idx = n ? nd_index_name(ixs[0]) : NULL;

	cJSON_AddStringToObject(cause, "type", cm_error_type(e));
	cJSON_AddStringToObject(cause, "reason", e->reason[0] ? e->reason : cm_err_msg(e->code));
	if (idx) {
		cJSON_AddStringToObject(cause, "index_uuid", nd_index_uuid(ixs[0]));
		cJSON_AddStringToObject(cause, "index", idx);
	}
	cJSON_AddItemToArray(rc, cause);
	cJSON_AddStringToObject(err, "type", "search_phase_execution_exception");
	cJSON_AddStringToObject(err, "reason", "all shards failed");
	cJSON_AddStringToObject(err, "phase", "query");
	cJSON_AddBoolToObject(err, "grouped", true);
	fs = cJSON_AddArrayToObject(err, "failed_shards");
	if (idx) {
		cJSON *f = cJSON_CreateObject();
		cJSON_AddNumberToObject(f, "shard", 0);
		cJSON_AddStringToObject(f, "index", idx);
		cJSON_AddStringToObject(f, "node", nd_node_id(r->node));
		cJSON_AddItemToObject(f, "reason", cJSON_Duplicate(cause, true));
		cJSON_AddItemToArray(fs, f);
	}
	int status = cm_err_status(e->code);
	cJSON_AddNumberToObject(doc, "status", status);
	co_reply_json(r, status, doc);
}

/* rest_total_hits_as_int=true: hits.total of the search and of each hit's
 * inner_hits as a number (-1 when not tracked), rewritten in the text:
 * a parse and print with cJSON would round every other double to 15
 * digits and every long past 2^53. */
typedef struct tot_level {
	const char *key; /* its key in the parent object, into the text; NULL otherwise */
	size_t klen;
	bool obj, hits, seen_total, any;
} tot_level;

static bool
key_is(const tot_level *l, const char *k)
{
	return l->key && l->klen == strlen(k) && !memcmp(l->key, k, l->klen);
}

/* Index just past the string that starts at s[i] == '"'. */
static size_t
str_end(const char *s, size_t i, size_t n)
{
	for (i++; i < n && s[i] != '"'; i++)
		if (s[i] == '\\')
			i++;
	return i < n ? i + 1 : n;
}

bool
co_total_as_int(cm_buf *out)
{
	const char *s = (const char *)out->data;
	size_t n = out->len, i = 0;
	tot_level st[64];
	int d = 0;
	const char *key = NULL;
	size_t klen = 0;
	char prev = 0; /* the last structural character */
	cm_buf o;
	cm_buf_init(&o, MEM);
	while (i < n) {
		char c = s[i];
		if (c == '"') {
			size_t j = str_end(s, i, n);
			if (d > 0 && st[d - 1].obj && (prev == '{' || prev == ',')) {
				key = s + i + 1;
				klen = j - i - 2;
			}
			if (d > 0 && st[d - 1].obj)
				st[d - 1].any = true;
			cm_buf_put(&o, s + i, j - i);
			prev = '"';
			i = j;
			continue;
		}
		if ((c == '{' || c == '[') && d > 0 && st[d - 1].hits && c == '{' && key &&
		    klen == 5 && !memcmp(key, "total", 5)) {
			/* {"value":N,"relation":".."} becomes N */
			size_t e = i, vs = 0, ve = 0;
			while (e < n && s[e] != '}') {
				if (s[e] == '"') {
					size_t j = str_end(s, e, n);
					if (j - e == 7 && !memcmp(s + e, "\"value\"", 7)) {
						vs = j;
						while (vs < n && (s[vs] == ':' || s[vs] == ' '))
							vs++;
						for (ve = vs;
						     ve < n && strchr("-+.0123456789eE", s[ve]);
						     ve++)
							;
					}
					e = j;
					continue;
				}
				e++;
			}
			if (e < n && ve > vs) {
				cm_buf_put(&o, s + vs, ve - vs);
				st[d - 1].seen_total = st[d - 1].any = true;
				key = NULL;
				prev = '}';
				i = e + 1;
				continue;
			}
		}
		if (c == '{' || c == '[') {
			if (d == (int)(sizeof st / sizeof st[0])) {
				cm_buf_free(&o);
				return false;
			}
			tot_level *l = &st[d];
			memset(l, 0, sizeof *l);
			if (d > 0 && st[d - 1].obj) {
				l->key = key;
				l->klen = klen;
				st[d - 1].any = true;
			}
			l->obj = c == '{';
			/* the search's hits, and those of an inner_hits entry */
			l->hits = l->obj && key_is(l, "hits") &&
			          (d == 1 || (d >= 3 && key_is(&st[d - 2], "inner_hits")));
			d++;
			key = NULL;
		} else if (c == '}' || c == ']') {
			if (d > 0 && st[d - 1].hits && !st[d - 1].seen_total)
				cm_buf_printf(&o, "%s\"total\":-1", st[d - 1].any ? "," : "");
			if (d > 0)
				d--;
		} else if (c == ',') {
			key = NULL;
		} else if (c != ':' && c != ' ' && c != '\n' && c != '\t' && c != '\r' && d > 0 &&
		           st[d - 1].obj) {
			st[d - 1].any = true;
		}
		if (c != ' ' && c != '\n' && c != '\t' && c != '\r')
			prev = c;
		cm_buf_put_u8(&o, (uint8_t)c);
		i++;
	}
	cm_buf_reset(out);
	cm_buf_put(out, o.data, o.len);
	cm_buf_free(&o);
	return true;
}

bool
co_parse_keep_alive(co_req *r, const char *v, int64_t *ms)
{
	if (!nd_parse_time(v, ms) || *ms <= 0) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "failed to parse setting [scroll] with value [%.60s] as a time value: unit "
		                "is missing or unrecognized",
		                v);
		return false;
	}
	if (*ms > MAX_SCROLL_KEEPALIVE_MS) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "Keep alive for request (%.60s) is too large. It must be less than (1d). "
		                "This limit can be set by changing the [search.max_keep_alive] cluster "
		                "level setting.",
		                v);
		return false;
	}
	return true;
}

static nd_fanout
fanout_mode(co_req *r)
{
	const char *f = co_param_get(r, "fanout");
	if (f && strcmp(f, "serial") == 0)
		return ND_FANOUT_SERIAL;
	if (f && strcmp(f, "per_node") == 0)
		return ND_FANOUT_PER_NODE;
	return ND_FANOUT_PER_SHARD;
}

/* indices_boost names indices, aliases or patterns: rewritten here to
 * concrete names in the array form, the first entry naming an index
 * winning (as ES), so shards only match names. Malformed shapes are left
 * for sr_request_from_json to refuse with ES's message. */
static cm_err
resolve_indices_boost(co_req *r, cJSON *body, cm_error *err)
{
	cJSON *ib = cJSON_GetObjectItemCaseSensitive(body, "indices_boost");
	if (!cJSON_IsObject(ib) && !cJSON_IsArray(ib))
		return CM_OK;
	cJSON *out = cJSON_CreateArray();
	cJSON *e;
	cJSON_ArrayForEach(e, ib)
	{
		const cJSON *entry = cJSON_IsArray(ib) ? e->child : e;
		if ((cJSON_IsArray(ib) && (!cJSON_IsObject(e) || !entry || entry->next)) ||
		    !cJSON_IsNumber(entry)) {
			cJSON_Delete(out);
			return CM_OK;
		}
		nd_index **ixs;
		size_t n;
		/* ignore_unavailable passes over a name that is no index, as ES */
		cm_err rc =
		    nd_resolve(r->node, entry->string,
		               co_param_bool(r, "ignore_unavailable", false), &ixs, &n, err);
		if (rc) {
			cJSON_Delete(out);
			return rc;
		}
		for (size_t i = 0; i < n; i++) {
			const char *name = nd_index_name(ixs[i]);
			bool seen = false;
			const cJSON *o;
			cJSON_ArrayForEach(o, out) seen |= !strcmp(o->child->string, name);
			if (!seen) {
				cJSON *o2 = cJSON_CreateObject();
				cJSON_AddNumberToObject(o2, name, entry->valuedouble);
				cJSON_AddItemToArray(out, o2);
			}
		}
		co_release_all(ixs, n);
	}
	obj_set(body, "indices_boost", out);
	return CM_OK;
}

static cm_err run_search_once(co_req *r, nd_index **ixs, size_t n, cJSON *body, int64_t scroll_ms,
                              int slice_id, int slice_max, cm_buf *out, cm_error *err);

/* The largest terms list and the longest regexp (in characters) of a query tree. */
static void
query_sizes(const sr_query *q, size_t *terms, size_t *regex)
{
	if (!q)
		return;
	if (q->kind == SR_Q_TERMS && q->nvalues > *terms)
		*terms = q->nvalues;
	if (q->kind == SR_Q_REGEXP && q->value) {
		size_t chars = 0;
		for (const unsigned char *p = (const unsigned char *)q->value; *p; p++)
			chars += (*p & 0xC0) != 0x80;
		if (chars > *regex)
			*regex = chars;
	}
	sr_query *const *lists[] = {q->must, q->should, q->must_not, q->filter, q->queries};
	size_t ns[] = {q->nmust, q->nshould, q->nmust_not, q->nfilter, q->nqueries};
	for (int l = 0; l < 5; l++)
		for (size_t i = 0; i < ns[l]; i++)
			query_sizes(lists[l][i], terms, regex);
	query_sizes(q->inner, terms, regex);
	query_sizes(q->negative, terms, regex);
}

/* The per-index search limits ES checks on each shard, with its messages:
 * index.max_script_fields (32), index.max_docvalue_fields_search (100),
 * index.max_terms_count (65536), index.max_regex_length (1000). req may be
 * NULL (the body not parsed yet: script_fields only). */
static cm_err
index_limits(const cJSON *body, const sr_request *req, nd_index **ixs, size_t n, cm_error *err)
{
	const cJSON *sf = cJSON_GetObjectItemCaseSensitive(body, "script_fields");
	size_t nsf = cJSON_IsObject(sf) ? (size_t)cJSON_GetArraySize(sf) : 0;
	size_t terms = 0, regex = 0, ndv = req ? req->ndocvalue_fields : 0;
	if (req) {
		query_sizes(req->query, &terms, &regex);
		query_sizes(req->post_filter, &terms, &regex);
	}
	if (!nsf && !ndv && !terms && !regex)
		return CM_OK;
	for (size_t i = 0; i < n; i++) {
		long long m;
		if (!req && nsf &&
		    (size_t)(m = nd_index_setting_int(ixs[i], "max_script_fields", 32)) < nsf)
			return cm_error_set(err, CM_EINVAL,
			                    "Trying to retrieve too many script_fields. Must be less than "
			                    "or equal to: [%lld] but was [%zu]. This limit can be set by "
			                    "changing the [index.max_script_fields] index level setting.",
			                    m, nsf);
		if (!req)
			continue;
		if (ndv && (size_t)(m = nd_index_setting_int(ixs[i], "max_docvalue_fields_search",
		                                             100)) < ndv)
			return cm_error_set(
			    err, CM_EINVAL,
			    "Trying to retrieve too many docvalue_fields. Must be less than or equal to: "
			    "[%lld] but was [%zu]. This limit can be set by changing the "
			    "[index.max_docvalue_fields_search] index level setting.",
			    m, ndv);
		if (terms && (size_t)(m = nd_index_setting_int(ixs[i], "max_terms_count", 65536)) < terms)
			return cm_error_set(
			    err, CM_EINVAL,
			    "The number of terms [%zu] used in the Terms Query request has exceeded the "
			    "allowed maximum of [%lld]. This maximum can be set by changing the "
			    "[index.max_terms_count] index level setting.",
			    terms, m);
		if (regex && (size_t)(m = nd_index_setting_int(ixs[i], "max_regex_length", 1000)) < regex)
			return cm_error_set(
			    err, CM_EINVAL,
			    "The length of regex [%zu] used in the Regexp Query request has exceeded the "
			    "allowed maximum of [%lld]. This maximum can be set by changing the "
			    "[index.max_regex_length] index level setting.",
			    regex, m);
	}
	return CM_OK;
}

cm_err
co_search_run(co_req *r, nd_index **ixs, size_t n, cJSON *body, cm_buf *out, cm_error *err)
{
	return run_search_once(r, ixs, n, body, 0, 0, 0, out, err);
}

/* Runs one search over the resolved indices; renders into out or fills
 * err. scroll_ms > 0 keeps a scroll context. */
static cm_err
run_search(co_req *r, nd_index **ixs, size_t n, cJSON *body, int64_t scroll_ms, int slice_id,
           int slice_max, cm_buf *out, cm_error *err)
{
	cm_err rc = run_search_once(r, ixs, n, body, scroll_ms, slice_id, slice_max, out, err);
	if (!rc && scroll_ms <= 0)
		rc = co_collapse_expand(r, ixs, n, body, out, err);
	return rc;
}

static cm_err
run_search_once(co_req *r, nd_index **ixs, size_t n, cJSON *body, int64_t scroll_ms, int slice_id,
                int slice_max, cm_buf *out, cm_error *err)
{
	sr_request req;
	nd_target *t;
	cm_err rc;
	int window = INT32_MAX;

	/* ?preference: a form ES does not know is a 400 (a single node has
	 * one copy of each shard, so the rest has no effect there) */
	if ((rc = nd_cl_preference_check(co_param_get(r, "preference"), err)))
		return rc;
	sr_request_init(&req);
	if ((rc = resolve_indices_boost(r, body, err)) ||
	    (rc = index_limits(body, NULL, ixs, n, err)))
		return rc;
	rc = sr_request_from_json(body, &req, err);
	if (!rc)
		rc = index_limits(body, &req, ixs, n, err);
	if (rc) {
		sr_request_free(&req);
		return rc;
	}
	req.typed_keys = co_param_bool(r, "typed_keys", false);
	if (req.suggest)
		sr_suggest_set_typed_keys(req.suggest, req.typed_keys);
	/* ES's RestSearchAction: an int total needs an exact count */
	if (co_param_bool(r, "rest_total_hits_as_int", false) && req.track_total_hits != SR_TRACK_ALL &&
	    req.track_total_hits != 0 && cJSON_GetObjectItemCaseSensitive(body, "track_total_hits")) {
		rc = cm_error_set(err, CM_EINVAL,
		                  "[rest_total_hits_as_int] cannot be used if the tracking of total hits "
		                  "is not accurate, got %lld",
		                  (long long)req.track_total_hits);
		sr_request_free(&req);
		return rc;
	}
	const char *rcp = co_param_get(r, "request_cache");
	if (rcp && *rcp && strcmp(rcp, "true") && strcmp(rcp, "false")) {
		sr_request_free(&req);
		return cm_error_set(err, CM_EINVAL,
		                    "Failed to parse value [%.60s] as only [true] or [false] are "
		                    "allowed.",
		                    rcp);
	}
	if (rcp)
		req.request_cache = strcmp(rcp, "false") ? SR_RC_TRUE : SR_RC_FALSE;
	for (size_t i = 0; i < n; i++)
		if (nd_index_settings(ixs[i])->max_result_window < window)
			window = nd_index_settings(ixs[i])->max_result_window;
	if (n && scroll_ms > 0 && (uint64_t)req.size > (uint64_t)window) {
		rc = cm_error_set(
		    err, CM_EINVAL,
		    "Batch size is too large, size must be less than or equal to: [%d] "
		    "but was [%llu]. Scroll batch sizes cost as much memory as result "
		    "windows so they are controlled by the [index.max_result_window] "
		    "index level setting.",
		    window, (unsigned long long)req.size);
		sr_request_free(&req);
		return rc;
	}
	if (n && (uint64_t)req.from + req.size > (uint64_t)window) {
		rc = cm_error_set(err, CM_EINVAL,
		                  "Result window is too large, from + size must be less than or equal "
		                  "to: [%d] but was [%llu]. See the scroll api for a more efficient way "
		                  "to request large data sets. This limit can be set by changing the "
		                  "[index.max_result_window] index level setting.",
		                  window, (unsigned long long)req.from + req.size);
		sr_request_free(&req);
		return rc;
	}
	if (scroll_ms > 0) { /* ES's checks, in its order, every failed one listed */
		const char *bad[4];
		int nbad = 0;
		if (req.from > 0)
			bad[nbad++] = "using [from] is not allowed in a scroll context";
		if (req.size == 0)
			bad[nbad++] = "[size] cannot be [0] in a scroll context";
		if (req.nrescore)
			bad[nbad++] = "using [rescore] is not allowed in a scroll context";
		if (req.request_cache == SR_RC_TRUE)
			bad[nbad++] = "[request_cache] cannot be used in a scroll context";
		if (nbad) {
			char msg[512];
			size_t at = (size_t)snprintf(msg, sizeof msg, "Validation Failed: ");
			for (int i = 0; i < nbad && at < sizeof msg; i++)
				at += (size_t)snprintf(msg + at, sizeof msg - at, "%d: %s;", i + 1,
				                       bad[i]);
			sr_request_free(&req);
			return cm_error_set(err, CM_EVALIDATE, "%s", msg);
		}
	}
	if (scroll_ms > 0 && req.collapse_field) {
		sr_request_free(&req);
		return cm_error_set(
		    err, CM_EVALIDATE,
		    "Validation Failed: 1: cannot use `collapse` in a scroll context;");
	}
	for (size_t i = 0; slice_max > 0 && i < n; i++) {
		long long most = nd_index_setting_int(ixs[i], "max_slices_per_scroll", 1024);
		if (slice_max > most) {
			sr_request_free(&req);
			return cm_error_set(
			    err, CM_EINVAL,
			    "The number of slices [%d] is too large. It must be less "
			    "than [%lld]. This limit can be set by changing the "
			    "[index.max_slices_per_scroll] index level setting.",
			    slice_max, most);
		}
	}
	if (scroll_ms > 0) {
		sr_request_free(&req);
		return co_scroll_start(r, ixs, n, body, scroll_ms, slice_id, slice_max, out, err);
	}
	if (nd_cluster_of(r->node)) {
		/* the request built here goes on to the fan-out's merger */
		co_cluster_search(r, ixs, n, body, &req, out, err, &rc);
		sr_request_free(&req);
		return rc;
	}
	/* the shard request cache's key: the body as a data node gets it */
	char *key = req.size == 0 && req.request_cache != SR_RC_FALSE && !req.profile
	                ? cJSON_PrintUnformatted(body)
	                : NULL;
	req.cache_key = key;
	req.cache_key_len = key ? strlen(key) : 0;
	t = nd_targets_open(ixs, n);
	nd_targets_only(t, n, co_param_get(r, "preference")); /* _shards: */
	rc = nd_search_fanout(r->node, t, n, &req, fanout_mode(r), out, err);
	nd_targets_close(t, n);
	sr_request_free(&req);
	cJSON_free(key);
	return rc;
}

/* The request body as an object, an empty one when there is none: false
 * when a reply has already gone out; *out is the caller's to delete. */
static bool
object_body(co_req *r, cJSON **out)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad);
	if (bad)
		return false;
	if (body)
		sr_json_exact_integers(body, (const char *)r->body.data, r->body.len);
	if (body && !cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EPARSE, NULL, "Unknown key for a VALUE in [body].");
		return false;
	}
	*out = body ? body : cJSON_CreateObject();
	return true;
}

/* ?allow_partial_search_results (default: the cluster setting
 * search.default_allow_partial_results, true): false fails a search that
 * some shards failed, as ES's SearchPhaseExecutionException. */
static bool
partial_allowed(co_req *r, const cm_buf *out)
{
	if (co_param_bool(r, "allow_partial_search_results", nd_default_allow_partial(r->node)))
		return true;
	cJSON *j = cJSON_ParseWithLength((const char *)out->data, out->len);
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(j, "_shards"), "failed");
	bool ok = !cJSON_IsNumber(f) || f->valuedouble == 0;
	cJSON_Delete(j);
	return ok;
}

void
co_h_search(co_req *r)
{
	nd_index **ixs;
	size_t n;
	cJSON *body;
	const char *scroll = co_param_get(r, "scroll");
	int64_t scroll_ms = 0;
	cm_buf out;
	cm_error err;

	if (!object_body(r, &body))
		return;
	if (scroll && !co_parse_keep_alive(r, scroll, &scroll_ms)) {
		cJSON_Delete(body);
		return;
	}
	if (!fold_search_params(r, body, false)) {
		cJSON_Delete(body);
		return;
	}
	cm_error_clear(&err);
	if (co_alias_filter(r, search_index_expr(r), body, &err)) {
		co_reply_error(r, &err, NULL);
		cJSON_Delete(body);
		return;
	}
	int slice_id = 0, slice_max = 0;
	bool pit = cJSON_GetObjectItemCaseSensitive(body, "pit") != NULL;
	if (!co_slice_take(r, body, scroll || pit, &slice_id, &slice_max)) {
		cJSON_Delete(body);
		return;
	}
	if (pit) {
		/* a point in time names its indices itself: boosts by concrete name */
		if (cJSON_GetObjectItemCaseSensitive(
		        cJSON_GetObjectItemCaseSensitive(body, "collapse"), "inner_hits"))
			cm_error_set(
			    &err, CM_EINVAL,
			    "[inner_hits] of [collapse] are not supported in a point in time "
			    "search");
		if (err.code || resolve_indices_boost(r, body, &err)) {
			co_reply_error(r, &err, NULL);
			cJSON_Delete(body);
			return;
		}
		co_pit_search(r, body, slice_id, slice_max);
		cJSON_Delete(body);
		return;
	}
	if (!co_resolve(r, search_index_expr(r), &ixs, &n)) {
		cJSON_Delete(body);
		return;
	}
	cm_error_clear(&err);
	for (size_t i = 0; i < n; i++)
		if (nd_index_blocked(ixs[i], 'r', &err)) {
			co_reply_error(r, &err, NULL);
			co_release_all(ixs, n);
			cJSON_Delete(body);
			return;
		}
	cm_buf_init(&out, MEM);
	cm_error_clear(&err);
	if (run_search(r, ixs, n, body, scroll_ms, slice_id, slice_max, &out, &err)) {
		if (err.code == CM_EPARSE || err.code == CM_EVALIDATE || err.code == CM_EINVAL ||
		    err.code == CM_EBUSY || err.code == CM_ELIMIT || err.code == CM_EMAPPING ||
		    err.code == CM_ENOINDEX || !n)
			co_reply_error(r, &err, NULL);
		else
			reply_all_shards_failed(r, &err, ixs, n);
	} else if (!partial_allowed(r, &out)) {
		cm_error_set_type(&err, CM_EUNAVAIL, "search_phase_execution_exception",
		                  "Partial shards failure (allow_partial_search_results is false)");
		co_reply_error(r, &err, NULL);
	} else {
		if (co_param_bool(r, "rest_total_hits_as_int", false))
			co_total_as_int(&out);
		co_reply_raw_json(r, 200, (const char *)out.data, out.len);
	}
	cm_buf_free(&out);
	co_release_all(ixs, n);
	cJSON_Delete(body);
}

/* _count?min_score=: counting needs scores, so it runs as a search of
 * size 0 whose total is the count. */
static void
count_min_score(co_req *r, cJSON *body)
{
	const char *v = co_param_get(r, "min_score");
	char *end;
	double ms = strtod(v, &end);
	nd_index **ixs;
	size_t n;
	if (!*v || *end) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "Failed to parse float parameter [min_score] with value [%.60s]",
		                v);
		return;
	}
	if (!co_resolve(r, search_index_expr(r), &ixs, &n))
		return;
	obj_set(body, "min_score", cJSON_CreateNumber(ms));
	obj_set(body, "size", cJSON_CreateNumber(0));
	obj_set(body, "track_total_hits", cJSON_CreateTrue());
	cm_buf out;
	cm_error err;
	cm_buf_init(&out, MEM);
	cm_error_clear(&err);
	if (run_search_once(r, ixs, n, body, 0, 0, 0, &out, &err)) {
		if (err.code == CM_EPARSE || err.code == CM_EINVAL || err.code == CM_EVALIDATE ||
		    !n)
			co_reply_error(r, &err, NULL);
		else
			reply_all_shards_failed(r, &err, ixs, n);
	} else {
		cJSON *res = cJSON_ParseWithLength((const char *)out.data, out.len);
		cJSON *total = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(res, "hits"), "total");
		const cJSON *value = cJSON_GetObjectItemCaseSensitive(total, "value");
		cJSON *j = cJSON_CreateObject();
		cJSON_AddNumberToObject(j, "count", cJSON_IsNumber(value) ? value->valuedouble : 0);
		cJSON_AddItemToObject(j, "_shards",
		                      cJSON_DetachItemFromObjectCaseSensitive(res, "_shards"));
		cJSON_Delete(res);
		co_reply_json(r, 200, j);
	}
	cm_buf_free(&out);
	co_release_all(ixs, n);
}

void
co_h_count(co_req *r)
{
	nd_index **ixs;
	size_t n;
	cJSON *body, *c, *qj;
	sr_query *q = NULL;
	cm_error err;
	uint64_t count = 0;
	int shards = 0;

	if (!object_body(r, &body))
		return;
	cJSON_ArrayForEach(c, body)
	{
		if (strcmp(c->string, "query")) {
			co_reply_errorf(r, CM_EPARSE, NULL, "request does not support [%.60s]", c->string);
			cJSON_Delete(body);
			return;
		}
	}
	if (!fold_search_params(r, body, true)) {
		cJSON_Delete(body);
		return;
	}
	static const char *const ignored[] = {"from",
	                                      "size",
	                                      "sort",
	                                      "_source",
	                                      "_source_includes",
	                                      "_source_excludes",
	                                      "track_total_hits",
	                                      "scroll",
	                                      "terminate_after",
	                                      "timeout",
	                                      "track_scores",
	                                      "explain",
	                                      "version",
	                                      "seq_no_primary_term",
	                                      "search_type",
	                                      "request_cache",
	                                      "routing",
	                                      "typed_keys",
	                                      "allow_no_indices",
	                                      "expand_wildcards",
	                                      "stats",
	                                      "analyze_wildcard",
	                                      "lenient"};
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		co_param_get(r, ignored[i]);
	cm_error_clear(&err);
	const char *pref = co_param_get(r, "preference");
	if (nd_cl_preference_check(pref, &err) ||
	    co_alias_filter(r, search_index_expr(r), body, &err)) {
		co_reply_error(r, &err, NULL);
		cJSON_Delete(body);
		return;
	}
	if (co_param_get(r, "min_score")) {
		count_min_score(r, body);
		cJSON_Delete(body);
		return;
	}
	qj = cJSON_GetObjectItemCaseSensitive(body, "query");
	if (qj && sr_query_from_json(qj, &q, &err)) {
		co_reply_error(r, &err, NULL);
		cJSON_Delete(body);
		return;
	}
	if (!co_resolve(r, search_index_expr(r), &ixs, &n)) {
		sr_query_free(q);
		cJSON_Delete(body);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (nd_index_blocked(ixs[i], 'r', &err)) {
			co_reply_error(r, &err, NULL);
			co_release_all(ixs, n);
			sr_query_free(q);
			cJSON_Delete(body);
			return;
		}
	if (co_cluster_count(r, ixs, n, body)) {
		co_release_all(ixs, n);
		sr_query_free(q);
		cJSON_Delete(body);
		return;
	}
	if (!q)
		q = sr_query_new(SR_Q_MATCH_ALL);
	nd_target *t = nd_targets_open(ixs, n);
	shards = (int)nd_targets_only(t, n, pref); /* _shards: */
	if (nd_count(r->node, t, n, q, 0, &count, &err)) {
		reply_all_shards_failed(r, &err, ixs, n);
	} else {
		cJSON *j = cJSON_CreateObject(), *s;
		cJSON_AddNumberToObject(j, "count", (double)count);
		s = cJSON_AddObjectToObject(j, "_shards");
		cJSON_AddNumberToObject(s, "total", shards);
		cJSON_AddNumberToObject(s, "successful", shards);
		cJSON_AddNumberToObject(s, "skipped", 0);
		cJSON_AddNumberToObject(s, "failed", 0);
		co_reply_json(r, 200, j);
	}
	nd_targets_close(t, n);
	co_release_all(ixs, n);
	sr_query_free(q);
	cJSON_Delete(body);
}

/* ---- _msearch ---- */

/* A URL parameter set for one search of an _msearch (its header's). */
typedef struct param_override {
	co_param *slot; /* NULL: no room, nothing changed */
	char *saved;    /* the slot's value before */
	bool added;     /* the slot was added (the last one) */
} param_override;

/* Sets parameter key to value (borrowed) until param_restore. */
static param_override
param_set(co_req *r, const char *key, const char *value)
{
	param_override o = {0};
	for (int i = 0; i < r->nparams && !o.slot; i++)
		if (strcmp(r->params[i].key, key) == 0)
			o.slot = &r->params[i];
	if (!o.slot && r->nparams < CO_MAX_PARAMS) {
		o.slot = &r->params[r->nparams++];
		*o.slot = (co_param){(char *)key, NULL, true};
		o.added = true;
	}
	if (o.slot) {
		o.saved = o.slot->value;
		o.slot->value = (char *)value;
	}
	return o;
}

static void
param_restore(co_req *r, const param_override *o)
{
	if (o->added)
		r->nparams--;
	else if (o->slot)
		o->slot->value = o->saved;
}

void
co_h_msearch(co_req *r)
{
	co_msearch_run(r, NULL, 0);
}

void
co_msearch_run(co_req *r, const cm_error *item_errs, size_t nitem_errs)
{
	const char *dflt = search_index_expr(r);
	const char *p = (const char *)r->body.data, *end = p + r->body.len;
	cm_buf out, one;
	uint64_t t0 = cm_now_ns();
	int nsearch = 0, line = 0;
	cJSON *header = NULL;

	co_param_get(r, "max_concurrent_searches");
	bool total_as_int = co_param_bool(r, "rest_total_hits_as_int", false);
	co_param_get(r, "search_type");
	co_param_get(r, "typed_keys");
	/* as ES parses the request: a search whose total cannot be an int
	 * fails the whole _msearch before any runs */
	for (const char *q = p; total_as_int && q < end;) {
		const char *nl = memchr(q, '\n', (size_t)(end - q));
		size_t len = nl ? (size_t)(nl - q) : (size_t)(end - q);
		const char *lq = q;
		q = nl ? nl + 1 : end;
		while (len && strchr(" \t\r", lq[len - 1]))
			len--;
		if (!len)
			continue;
		/* header, then body: only bodies hold track_total_hits */
		const char *nl2 = q < end ? memchr(q, '\n', (size_t)(end - q)) : NULL;
		size_t blen = q < end ? (nl2 ? (size_t)(nl2 - q) : (size_t)(end - q)) : 0;
		cJSON *b = blen ? cJSON_ParseWithLength(q, blen) : NULL;
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "track_total_hits");
		bool bad = cJSON_IsNumber(t) && t->valuedouble != (double)INT32_MAX;
		long long got = bad ? (long long)t->valuedouble : 0;
		cJSON_Delete(b);
		q = nl2 ? nl2 + 1 : end;
		if (bad) {
			co_reply_errorf(
			    r, CM_EINVAL, NULL,
			    "[rest_total_hits_as_int] cannot be used if the tracking of total "
			    "hits is not accurate, got %lld",
			    got);
			return;
		}
	}
	cm_buf_init(&out, MEM);
	cm_buf_init(&one, MEM);
	cm_buf_printf(&out, "{\"took\":%%TOOK%%,\"responses\":[");
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		const char *lp = p;
		p = nl ? nl + 1 : end;
		line++;
		while (len && strchr(" \t\r", lp[len - 1]))
			len--;
		if (!header) {
			if (len == 0)
				continue;
			header = cJSON_ParseWithLength(lp, len);
			if (!cJSON_IsObject(header)) {
				cJSON_Delete(header);
				cm_buf_free(&out);
				cm_buf_free(&one);
				co_reply_errorf(r, CM_EINVAL, NULL,
				                "Malformed action/metadata line [%d], expected START_OBJECT", line);
				return;
			}
			continue;
		}
		if (++nsearch > MSEARCH_MAX) {
			cJSON_Delete(header);
			cm_buf_free(&out);
			cm_buf_free(&one);
			co_reply_errorf(r, CM_EINVAL, NULL, "too many searches in one _msearch (max %d)",
			                MSEARCH_MAX);
			return;
		}
		/* one search: its header names the indices */
		cJSON *body = len ? cJSON_ParseWithLength(lp, len) : cJSON_CreateObject();
		if (body && len)
			sr_json_exact_integers(body, lp, len);
		const cJSON *ixj = cJSON_GetObjectItemCaseSensitive(header, "index");
		char expr[1024];
		cm_error err;
		nd_index **ixs = NULL;
		size_t n = 0;

		cm_error_clear(&err);
		if (cJSON_IsString(ixj))
			snprintf(expr, sizeof(expr), "%s", ixj->valuestring);
		else if (cJSON_IsArray(ixj)) {
			const cJSON *e;
			expr[0] = 0;
			cJSON_ArrayForEach(e, ixj)
			if (cJSON_IsString(e)) {
				size_t l = strlen(expr);
				snprintf(expr + l, sizeof(expr) - l, "%s%s", l ? "," : "", e->valuestring);
			}
		} else
			snprintf(expr, sizeof(expr), "%s", dflt);
		if (nsearch > 1)
			cm_buf_put_u8(&out, ',');
		cm_buf_reset(&one);
		if ((size_t)nsearch <= nitem_errs && item_errs[nsearch - 1].code) {
			err = item_errs[nsearch - 1]; /* this item failed before the search */
		} else if (!cJSON_IsObject(body)) {
			cm_error_set(&err, CM_EPARSE, "malformed search body on line [%d]", line);
		} else if (co_alias_filter(r, expr, body, &err)) {
			/* err says why */
		} else if (!nd_resolve(r->node, expr,
		                       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
		                           header, "ignore_unavailable")),
		                       &ixs, &n, &err)) {
			const cJSON *pj = cJSON_GetObjectItemCaseSensitive(header, "preference");
			if (cJSON_IsString(pj)) {
				/* the header's preference, for this search only */
				param_override o = param_set(r, "preference", pj->valuestring);
				run_search(r, ixs, n, body, 0, 0, 0, &one, &err);
				param_restore(r, &o);
			} else {
				run_search(r, ixs, n, body, 0, 0, 0, &one, &err);
			}
			co_release_all(ixs, n);
		}
		if (err.code) {
			cJSON *e = co_error_doc(&err, err.code == CM_ENOINDEX ? expr : NULL);
			char *s = cJSON_PrintUnformatted(e);
			cm_buf_put(&out, s, strlen(s));
			cJSON_free(s);
			cJSON_Delete(e);
		} else {
			/* the search body with "status":200 appended */
			if (total_as_int)
				co_total_as_int(&one);
			if (one.len > 1) {
				cm_buf_put(&out, one.data, one.len - 1);
				cm_buf_printf(&out, ",\"status\":200}");
			}
		}
		cJSON_Delete(body);
		cJSON_Delete(header);
		header = NULL;
	}
	cJSON_Delete(header);
	if (nsearch == 0) {
		cm_buf_free(&out);
		cm_buf_free(&one);
		co_reply_errorf(r, CM_EVALIDATE, NULL, "Validation Failed: 1: no requests added;");
		return;
	}
	cm_buf_put(&out, "]}", 2);
	/* took is known only now */
	cm_buf fin;
	char took[32];
	cm_buf_init(&fin, MEM);
	snprintf(took, sizeof(took), "%llu", (unsigned long long)((cm_now_ns() - t0) / 1000000));
	const char *mark = memmem(out.data, out.len, "%TOOK%", 6);
	cm_buf_put(&fin, out.data, (size_t)(mark - (const char *)out.data));
	cm_buf_put(&fin, took, strlen(took));
	cm_buf_put(&fin, mark + 6, out.len - (size_t)(mark + 6 - (const char *)out.data));
	co_reply_raw_json(r, 200, (const char *)fin.data, fin.len);
	cm_buf_free(&fin);
	cm_buf_free(&out);
	cm_buf_free(&one);
}


/* ---- for _explain and _validate (co_explain.c) ---- */

bool
co_search_fold_params(co_req *r, cJSON *body)
{
	return fold_search_params(r, body, true);
}

