/* Document APIs: index, create, get, delete, _source, _update, _mget,
 * and the write-parameter rules they share with _bulk. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "co_doc.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define MAX_ID_BYTES 512

/* ---- write parameters ---- */

static bool
parse_u64(const char *s, uint64_t *out)
{
	char *end;
	if (!s || !*s || *s == '-')
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return !errno && !*end;
}

cm_err
co_write_opts_parse(const char *op_type, const char *version, const char *version_type,
                    const char *if_seq_no, const char *if_primary_term, const char *refresh,
                    co_write_opts *w, cm_error *err)
{
	memset(w, 0, sizeof(*w));
	w->if_seq_no = ST_NO_SEQ;
	if (op_type) {
		if (strcmp(op_type, "create") == 0)
			w->create = true;
		else if (strcmp(op_type, "index") != 0)
			return cm_error_set(err, CM_EINVAL, "opType must be 'create' or 'index', found: [%.60s]",
			                    op_type);
	}
	if (refresh) {
		if (!*refresh || strcmp(refresh, "true") == 0)
			w->refresh = CO_REFRESH_TRUE;
		else if (strcmp(refresh, "wait_for") == 0)
			w->refresh = CO_REFRESH_WAIT_FOR;
		else if (strcmp(refresh, "false") != 0)
			return cm_error_set(err, CM_EINVAL, "Unknown value for refresh: [%.60s].", refresh);
	}
	if (if_seq_no || if_primary_term) {
		uint64_t t = 0;
		if (if_seq_no && !parse_u64(if_seq_no, &w->if_seq_no))
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse long parameter [if_seq_no] with value [%.60s]",
			                    if_seq_no);
		if (if_primary_term && !parse_u64(if_primary_term, &t))
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse long parameter [if_primary_term] with value [%.60s]",
			                    if_primary_term);
		if (if_seq_no && (!if_primary_term || t == 0))
			return cm_error_set(err, CM_EVALIDATE,
			                    "Validation Failed: 1: ifSeqNo is set, but primary term is [0];");
		if (!if_seq_no)
			return cm_error_set(err, CM_EVALIDATE,
			                    "Validation Failed: 1: ifSeqNo is unassigned, but primary term is "
			                    "[%llu];",
			                    (unsigned long long)t);
		w->if_primary_term = t;
	}
	if (version_type && strcmp(version_type, "external") && strcmp(version_type, "external_gte") &&
	    strcmp(version_type, "internal"))
		return cm_error_set(err, CM_EINVAL, "No version type match [%.60s]", version_type);
	if (version) {
		uint64_t v;
		if (!parse_u64(version, &v))
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse long parameter [version] with value [%.60s]",
			                    version);
		if (!version_type || strcmp(version_type, "internal") == 0)
			return cm_error_set(err, CM_EVALIDATE,
			                    "Validation Failed: 1: internal versioning can not be used for "
			                    "optimistic concurrency control. Please use `if_seq_no` and "
			                    "`if_primary_term` instead;");
		if (w->if_seq_no != ST_NO_SEQ)
			return cm_error_set(err, CM_EVALIDATE,
			                    "Validation Failed: 1: compare and write operations can not use "
			                    "versioning;");
		if (w->create)
			return cm_error_set(err, CM_EVALIDATE,
			                    "Validation Failed: 1: create operations only support internal "
			                    "versioning. use index instead;");
		if (v > (uint64_t)INT64_MAX)
			return cm_error_set(err, CM_EVALIDATE,
			                    "Validation Failed: 1: illegal version value [%llu] for version "
			                    "type [EXTERNAL];",
			                    (unsigned long long)v);
		w->version = (int64_t)v;
		w->has_version = true;
		w->version_gte = !strcmp(version_type, "external_gte");
	} else if (version_type && strcmp(version_type, "internal")) {
		return cm_error_set(err, CM_EVALIDATE,
		                    "Validation Failed: 1: illegal version value [-3] for version type "
		                    "[EXTERNAL];");
	}
	return CM_OK;
}

static bool
req_write_opts(co_req *r, co_write_opts *w, bool create)
{
	cm_error err;
	cm_error_clear(&err);
	const char *op_type = co_param_get(r, "op_type");
	/* _create is a create whatever op_type says: its checks come first */
	if (co_write_opts_parse(create ? "create" : op_type, co_param_get(r, "version"),
	                        co_param_get(r, "version_type"), co_param_get(r, "if_seq_no"),
	                        co_param_get(r, "if_primary_term"), co_param_get(r, "refresh"), w,
	                        &err)) {
		co_reply_error(r, &err, NULL);
		return false;
	}
	return true;
}

bool
co_id_check(const char *id, size_t len, cm_error *err)
{
	if (len == 0) {
		cm_error_set(err, CM_EVALIDATE, "Validation Failed: 1: id is missing;");
		return false;
	}
	if (len > MAX_ID_BYTES) {
		cm_error_set(err, CM_EVALIDATE,
		             "Validation Failed: 1: id [%.40s...] is too long, must be no longer than 512 "
		             "bytes but was: %zu;",
		             id, len);
		return false;
	}
	return true;
}

/* An int64 as a JSON integer (a double would print 2^63-1 as 9.2e+18). */
static void
co_add_int64(cJSON *j, const char *key, int64_t v)
{
	char num[32];
	snprintf(num, sizeof(num), "%" PRId64, v);
	cJSON_AddItemToObject(j, key, cJSON_CreateRaw(num));
}

nd_req_opts
co_req_opts(co_req *r)
{
	const char *rt = co_param_get(r, "realtime");
	return (nd_req_opts){.deadline_ns = r->write_deadline_ns,
	                     .preference = co_param_get(r, "preference"),
	                     .refreshed = rt && !strcmp(rt, "false")};
}

cm_err
co_doc_write(nd_index *ix, st_op *op, const char *routing, size_t routing_len,
             const nd_req_opts *o, st_op_result *res, cm_error *err)
{
	int shard;
	cm_err rc;

	memset(res, 0, sizeof(*res));
	if ((rc = nd_index_blocked(ix, op->type == ST_OP_DELETE ? 'd' : 'w', err)))
		return rc;
	if (op->type == ST_OP_INDEX &&
	    (rc = nd_index_prepare_doc(ix, op->id, op->id_len, op->source, op->source_len, err))) {
		atomic_fetch_add((_Atomic uint64_t *)&nd_index_counters(ix)->index_failed, 1);
		return rc;
	}
	shard = routing ? nd_index_route(ix, routing, routing_len)
	                : nd_index_route(ix, op->id, op->id_len);
	rc = nd_routed_apply(ix, shard, op, 1, o, res);
	if (rc)
		return cm_error_set(err, rc, "%s", cm_err_msg(rc));
	if (res->err) {
		if (res->err == CM_ECONFLICT)
			return cm_error_set_type(err, CM_ECONFLICT, "version_conflict_engine_exception", "%s",
			                         res->reason);
		return cm_error_set(err, res->err, "%s", res->reason[0] ? res->reason : cm_err_msg(res->err));
	}
	return CM_OK;
}

const char *
co_result_name(st_op_result_kind k)
{
	switch (k) {
	case ST_RESULT_CREATED:
		return "created";
	case ST_RESULT_UPDATED:
		return "updated";
	case ST_RESULT_DELETED:
		return "deleted";
	case ST_RESULT_NOT_FOUND:
		return "not_found";
	case ST_RESULT_NOOP:
		return "noop";
	}
	return "unknown";
}

cJSON *
co_write_result_json(nd_index *ix, const char *id, size_t id_len, const st_op_result *res,
                     bool forced_refresh)
{
	cJSON *j = cJSON_CreateObject();
	char *idc = cm_strndup(MEM, id, id_len);
	int copies = 1 + nd_index_settings(ix)->number_of_replicas;

	cJSON_AddStringToObject(j, "_index", nd_index_name(ix));
	cJSON_AddStringToObject(j, "_type", "_doc");
	cJSON_AddStringToObject(j, "_id", idc);
	cm_free(MEM, idc);
	co_add_int64(j, "_version", res->version);
	cJSON_AddStringToObject(j, "result", co_result_name(res->result));
	if (forced_refresh)
		cJSON_AddBoolToObject(j, "forced_refresh", true);
	if (res->result == ST_RESULT_NOOP)
		cJSON_AddItemToObject(j, "_shards", co_shards_json(0, 0, 0));
	else
		cJSON_AddItemToObject(j, "_shards", co_shards_json(copies, 1, 0));
	cJSON_AddNumberToObject(j, "_seq_no", (double)res->seq_no);
	cJSON_AddNumberToObject(j, "_primary_term", (double)res->primary_term);
	return j;
}

void
co_write_result_put(cm_buf *b, nd_index *ix, const char *id, size_t id_len,
                    const st_op_result *res, bool forced_refresh, int status)
{
	int copies = 1 + nd_index_settings(ix)->number_of_replicas;
	bool noop = res->result == ST_RESULT_NOOP;
	const char *name = nd_index_name(ix);
	cm_buf_put(b, "{\"_index\":", sizeof("{\"_index\":") - 1);
	cm_buf_put_json_str(b, name, strlen(name));
	cm_buf_put(b, ",\"_type\":\"_doc\",\"_id\":", sizeof(",\"_type\":\"_doc\",\"_id\":") - 1);
	cm_buf_put_json_str(b, id, id_len);
	cm_buf_printf(b, ",\"_version\":%" PRId64 ",\"result\":\"%s\"%s", res->version,
	              co_result_name(res->result), forced_refresh ? ",\"forced_refresh\":true" : "");
	cm_buf_printf(b,
	              ",\"_shards\":{\"total\":%d,\"successful\":%d,\"failed\":0},\"_seq_no\":%" PRIu64
	              ",\"_primary_term\":%" PRIu64,
	              noop ? 0 : copies, noop ? 0 : 1, res->seq_no, res->primary_term);
	if (status)
		cm_buf_printf(b, ",\"status\":%d", status);
	cm_buf_put_u8(b, '}');
}

bool
co_refresh_after(nd_index *ix, int mode)
{
	if (mode == CO_REFRESH_NONE)
		return false;
	if (nd_routed_refresh(ix))
		return mode == CO_REFRESH_TRUE; /* cluster: every copy refreshed */
	if (mode == CO_REFRESH_WAIT_FOR) {
		nd_index_wait_refresh(ix);
		return false;
	}
	nd_index_refresh(ix);
	return true;
}

/* ---- index / create ---- */

/* ?require_alias=true: name must be an alias (the index is neither
 * created nor written otherwise); false after replying 404. */
static bool
require_alias_ok(co_req *r, const char *name)
{
	if (!co_param_bool(r, "require_alias", false) || nd_alias_exists(r->node, name))
		return true;
	co_reply_errorf(r, CM_ENOINDEX, NULL,
	                "no such index [%s] and [require_alias] request flag is [true] and [%s] "
	                "is not an alias",
	                name, name);
	return false;
}

static void
doc_index(co_req *r, bool create)
{
	const char *name = co_seg(r, 0), *id = co_seg(r, 2), *routing;
	co_write_opts w;
	nd_index *ix = NULL;
	cm_error err;
	st_op op;
	st_op_result res;
	char gen[21];
	bool bad;

	if (!co_alias_routing_param(r, name) || /* an alias's index_routing */
	    !require_alias_ok(r, name))
		return;
	routing = co_param_get(r, "routing");
	cJSON *body;

	if (!req_write_opts(r, &w, create))
		return;
	cm_error_clear(&err);
	if (!id) {
		/* POST /{index}/_doc, also with op_type=create, gets a new id */
		nd_gen_id(gen);
		id = gen;
		if (w.has_version || w.if_seq_no != ST_NO_SEQ) {
			co_reply_errorf(r, CM_EVALIDATE, NULL,
			                "Validation Failed: 1: an id must be provided if version type or value "
			                "are set;");
			return;
		}
	}
	if (!co_id_check(id, strlen(id), &err)) {
		co_reply_error(r, &err, NULL);
		return;
	}
	/* the body must be one JSON object */
	body = co_body_json(r, &bad);
	if (bad) {
		/* ES reports a malformed document as a mapping failure */
		co_reply_errorf(r, CM_EMAPPING, NULL, "failed to parse");
		return;
	}
	if (!cJSON_IsObject(body)) {
		cJSON_Delete(body);
		if (!body)
			co_reply_errorf(r, CM_EVALIDATE, NULL, "Validation Failed: 1: source is missing;");
		else
			co_reply_errorf(r, CM_EMAPPING, NULL, "failed to parse, document is empty");
		return;
	}
	cJSON_Delete(body);
	if (co_get_or_create(r->node, name, &ix, &err)) {
		co_reply_error(r, &err, name);
		return;
	}
	/* ingest pipelines: ?pipeline=, or the index's default, then its final */
	char *p_index = cm_strdup(MEM, name), *p_id = cm_strdup(MEM, id), *p_src = NULL;
	char *p_routing = routing ? cm_strdup(MEM, routing) : NULL;
	size_t p_len = 0;
	bool dropped = false;
	co_ingest *g = co_ingest_new(r->node);
	cm_err prc = co_ingest_run(g, ix, co_param_get(r, "pipeline"), &p_index, &p_id, &p_routing,
	                           (const char *)r->body.data, r->body.len, &p_src, &p_len, &dropped,
	                           &err);
	co_ingest_free(g);
	if (!prc && !dropped && strcmp(p_index, name)) { /* the pipeline set _index */
		nd_index_release(ix);
		ix = NULL;
		prc = co_get_or_create(r->node, p_index, &ix, &err);
	}
	if (prc || dropped) {
		if (prc) {
			co_reply_error(r, &err, p_index);
		} else {
			cJSON *j = cJSON_CreateObject();
			cJSON_AddStringToObject(j, "_index", p_index);
			cJSON_AddStringToObject(j, "_type", "_doc");
			cJSON_AddStringToObject(j, "_id", p_id);
			cJSON_AddNumberToObject(j, "_version", -3);
			cJSON_AddStringToObject(j, "result", "noop");
			cJSON_AddItemToObject(j, "_shards", co_shards_json(0, 0, 0));
			co_reply_json(r, 200, j);
		}
		if (ix)
			nd_index_release(ix);
		cm_free(MEM, p_index);
		cm_free(MEM, p_id);
		cm_free(MEM, p_routing);
		cm_free(MEM, p_src);
		return;
	}
	id = p_id;
	routing = p_routing;
	memset(&op, 0, sizeof(op));
	op.type = ST_OP_INDEX;
	op.id = id;
	op.id_len = strlen(id);
	op.source = p_src ? p_src : (const char *)r->body.data;
	op.source_len = p_src ? p_len : r->body.len;
	op.seq_no = ST_NO_SEQ;
	op.if_seq_no = w.if_seq_no;
	op.if_primary_term = w.if_primary_term;
	op.version = w.version;
	op.has_version = w.has_version;
	op.version_gte = w.version_gte;
	op.create_only = w.create;
	nd_req_opts ro = co_req_opts(r);
	if (co_doc_write(ix, &op, routing, routing ? strlen(routing) : 0, &ro, &res, &err)) {
		co_reply_error(r, &err, p_index);
	} else {
		bool forced = co_refresh_after(ix, w.refresh);
		co_reply_json(r, res.result == ST_RESULT_CREATED ? 201 : 200,
		              co_write_result_json(ix, op.id, op.id_len, &res, forced));
	}
	nd_index_release(ix);
	cm_free(MEM, p_index);
	cm_free(MEM, p_id);
	cm_free(MEM, p_routing);
	cm_free(MEM, p_src);
}

void
co_h_doc_index(co_req *r)
{
	doc_index(r, false);
}

void
co_h_doc_create(co_req *r)
{
	doc_index(r, true);
}

void
co_h_doc_delete(co_req *r)
{
	const char *name = co_seg(r, 0), *id = co_seg(r, 2), *routing;
	co_write_opts w;
	nd_index *ix;
	cm_error err;
	st_op op;
	st_op_result res;

	if (!co_alias_routing_param(r, name)) /* an alias's index_routing */
		return;
	routing = co_param_get(r, "routing");
	if (!req_write_opts(r, &w, false))
		return;
	cm_error_clear(&err);
	if (!(ix = co_index_or_alias(r->node, name, true))) {
		cm_error_set(&err, CM_ENOINDEX, "no such index [%s]", name);
		co_reply_error(r, &err, name);
		return;
	}
	memset(&op, 0, sizeof(op));
	op.type = ST_OP_DELETE;
	op.id = id;
	op.id_len = strlen(id);
	op.seq_no = ST_NO_SEQ;
	op.if_seq_no = w.if_seq_no;
	op.if_primary_term = w.if_primary_term;
	op.version = w.version;
	op.has_version = w.has_version;
	op.version_gte = w.version_gte;
	nd_req_opts ro = co_req_opts(r);
	if (co_doc_write(ix, &op, routing, routing ? strlen(routing) : 0, &ro, &res, &err)) {
		co_reply_error(r, &err, name);
		nd_index_release(ix);
		return;
	}
	bool forced = co_refresh_after(ix, w.refresh);
	co_reply_json(r, res.result == ST_RESULT_NOT_FOUND ? 404 : 200,
	              co_write_result_json(ix, id, op.id_len, &res, forced));
	nd_index_release(ix);
}

/* ---- get ---- */

static bool
want_parsed(co_req *r)
{
	const char *p = co_param_get(r, "pretty"), *f = co_param_get(r, "filter_path");
	return (p && strcmp(p, "false")) || (f && *f);
}

cJSON *
co_source_item(const char *src, size_t len, bool parsed)
{
	cJSON *j;
	if (parsed && (j = cJSON_ParseWithLength(src, len)))
		return j;
	char *raw = cm_strndup(MEM, src, len);
	j = cJSON_CreateRaw(raw);
	cm_free(MEM, raw);
	return j;
}

/* A get's ?refresh=true: the index refreshed before the read, so that
 * ?realtime=false sees the writes made so far. */
static void
get_refresh_first(co_req *r, nd_index *ix)
{
	const char *v = co_param_get(r, "refresh");
	if (v && (!*v || !strcmp(v, "true")))
		co_refresh_after(ix, CO_REFRESH_TRUE);
}

/* The values at a dotted path of a source (through objects and arrays)
 * into out; whole objects too when objects are values (range fields). */
static void
source_values(const cJSON *j, const char *path, bool objects, cJSON *out)
{
	if (cJSON_IsArray(j)) {
		const cJSON *e;
		cJSON_ArrayForEach(e, j) source_values(e, path, objects, out);
		return;
	}
	if (!*path) {
		if (!cJSON_IsNull(j) && (objects || !cJSON_IsObject(j)))
			cJSON_AddItemToArray(out, cJSON_Duplicate(j, true));
		return;
	}
	if (!cJSON_IsObject(j))
		return;
	const char *dot = strchr(path, '.');
	size_t n = dot ? (size_t)(dot - path) : strlen(path);
	const cJSON *c;
	cJSON_ArrayForEach(c, j) if (strlen(c->string) == n && !memcmp(c->string, path, n))
	    source_values(c, dot ? dot + 1 : "", objects, out);
}

/* stored_fields of a GET: each named field mapped with "store": true, its
 * values as _source holds them, into "fields"; whether "_source" is named. */
static bool
stored_fields_json(nd_index *ix, const char *stored, const char *src, size_t len, cJSON *doc)
{
	bool want_source = false;
	cJSON *s = len ? cJSON_ParseWithLength(src, len) : NULL, *fields = NULL;
	st_mapping *m = nd_index_mapping(ix);
	char *copy = cm_strdup(MEM, stored), *save = NULL, *tok;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "_source")) {
			want_source = true;
			continue;
		}
		const st_field_def *f = m ? st_mapping_find(m, tok) : NULL;
		if (!f || !f->store || !s)
			continue;
		cJSON *vals = cJSON_CreateArray();
		source_values(s, f->parent ? f->parent : f->path, st_field_type_is_range(f->type),
		              vals);
		if (!cJSON_GetArraySize(vals)) {
			cJSON_Delete(vals);
			continue;
		}
		if (!fields)
			fields = cJSON_AddObjectToObject(doc, "fields");
		cJSON_AddItemToObject(fields, tok, vals);
	}
	cm_free(MEM, copy);
	st_mapping_unref(m);
	cJSON_Delete(s);
	return want_source;
}

/* Looks a document up; fills a GET-shaped object (found or not).
 * stored: the stored_fields asked for, or NULL; source_asked: _source
 * given explicitly (then it comes back beside stored fields). */
static cJSON *
get_doc_json(nd_index *ix, const char *id, const char *routing, const char *incl, const char *excl,
             const char *stored, bool source_asked, bool parsed, const nd_req_opts *o, bool *found,
             cm_error *err)
{
	cJSON *j = cJSON_CreateObject();
	st_doc_meta meta;
	cm_buf src;
	uint64_t t0 = cm_now_ns();
	int shard = nd_index_route(ix, routing ? routing : id, strlen(routing ? routing : id));
	cm_err rc;

	*found = false;
	if ((rc = nd_index_blocked(ix, 'r', err))) {
		cJSON_Delete(j);
		return NULL;
	}
	cm_buf_init(&src, MEM);
	rc = nd_routed_get(ix, shard, id, strlen(id), o, &meta, &src);
	atomic_fetch_add((_Atomic uint64_t *)&nd_index_counters(ix)->get_total, 1);
	atomic_fetch_add((_Atomic uint64_t *)&nd_index_counters(ix)->get_time_ns, cm_now_ns() - t0);
	cJSON_AddStringToObject(j, "_index", nd_index_name(ix));
	cJSON_AddStringToObject(j, "_type", "_doc");
	cJSON_AddStringToObject(j, "_id", id);
	*found = rc == CM_OK;
	if (rc && rc != CM_ENOTFOUND) {
		cm_error_set(err, rc, "%s", cm_err_msg(rc));
		cJSON_Delete(j);
		cm_buf_free(&src);
		return NULL;
	}
	if (rc == CM_OK) {
		bool fetch = true;
		co_add_int64(j, "_version", meta.version);
		cJSON_AddNumberToObject(j, "_seq_no", (double)meta.seq_no);
		cJSON_AddNumberToObject(j, "_primary_term", (double)meta.primary_term);
		cJSON_AddBoolToObject(j, "found", true);
		/* with stored_fields, _source only when named there or asked for */
		bool no_source =
		    stored && !stored_fields_json(ix, stored, (const char *)src.data, src.len, j) &&
		    !incl && !excl && !source_asked;
		char *filtered = co_source_filter((const char *)src.data, src.len, incl, excl, &fetch);
		if (no_source)
			fetch = false;
		if (fetch && src.len) { /* nothing stored: the mapping disables _source */
			if (filtered)
				cJSON_AddItemToObject(j, "_source",
				                      co_source_item(filtered, strlen(filtered), parsed));
			else
				cJSON_AddItemToObject(j, "_source",
				                      co_source_item((const char *)src.data, src.len, parsed));
		}
		cm_free(MEM, filtered);
	} else {
		cJSON_AddBoolToObject(j, "found", false);
	}
	cm_buf_free(&src);
	return j;
}

/* The _source parameters of a GET: "_source=false", "_source=a,b",
 * _source_includes / _source_excludes. */
static void
source_params(co_req *r, const char **incl, const char **excl)
{
	const char *s = co_param_get(r, "_source");
	*incl = co_param_get(r, "_source_includes");
	*excl = co_param_get(r, "_source_excludes");
	if (s) {
		if (strcmp(s, "false") == 0)
			*incl = "\x01"; /* marker: no source */
		else if (strcmp(s, "true") && *s)
			*incl = s;
	}
}

void
co_h_doc_get(co_req *r)
{
	const char *name = co_seg(r, 0), *id = co_seg(r, 2), *incl, *excl;
	nd_index *ix;
	cm_error err;
	bool found;
	cJSON *j;

	cm_error_clear(&err);
	source_params(r, &incl, &excl);
	co_param_get(r, "realtime");
	if (nd_cl_preference_check(co_param_get(r, "preference"), &err)) {
		co_reply_error(r, &err, name);
		return;
	}
	if (!co_alias_routing_param(r, name)) /* an alias's index_routing */
		return;
	if (!(ix = co_index_or_alias(r->node, name, false))) {
		co_single_index_error(r->node, name, &err);
		co_reply_error(r, &err, name);
		return;
	}
	nd_req_opts ro = co_req_opts(r);
	get_refresh_first(r, ix);
	j = get_doc_json(ix, id, co_param_get(r, "routing"), incl, excl,
	                 co_param_get(r, "stored_fields"), co_param_get(r, "_source") != NULL,
	                 want_parsed(r), &ro, &found, &err);
	nd_index_release(ix);
	if (!j) {
		co_reply_error(r, &err, name);
		return;
	}
	/* ?version: a read that expects another version is a conflict (ES's
	 * VersionType.isVersionConflictForReads); a missing doc stays 404 */
	const char *want = co_param_get(r, "version");
	co_param_get(r, "version_type");
	const cJSON *have = cJSON_GetObjectItemCaseSensitive(j, "_version");
	if (want && found && have) {
		char *end;
		long long v = strtoll(want, &end, 10);
		if (!*want || *end) {
			cJSON_Delete(j);
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "Failed to parse long parameter [version] with value [%.60s]",
			                want);
			return;
		}
		char cur[32];
		snprintf(cur, sizeof(cur), "%s",
		         cJSON_IsRaw(have) || cJSON_IsString(have) ? have->valuestring : "");
		if (!cur[0])
			snprintf(cur, sizeof(cur), "%.0f", have->valuedouble);
		if (strtoll(cur, NULL, 10) != v) {
			cJSON_Delete(j);
			cm_error_set(&err, CM_ECONFLICT,
			             "[%s]: version conflict, current version [%s] is different than the "
			             "one provided [%lld]",
			             id, cur, v);
			co_reply_error(r, &err, name);
			return;
		}
	}
	co_reply_json(r, found ? 200 : 404, j);
}

void
co_h_source_get(co_req *r)
{
	const char *name = co_seg(r, 0), *id = co_seg(r, 2), *incl, *excl, *routing;
	nd_index *ix;
	cm_error err;
	st_doc_meta meta;
	cm_buf src;
	cm_err rc;

	cm_error_clear(&err);
	source_params(r, &incl, &excl);
	if (!co_alias_routing_param(r, name)) /* an alias's index_routing */
		return;
	routing = co_param_get(r, "routing");
	if (!(ix = co_index_or_alias(r->node, name, false))) {
		co_single_index_error(r->node, name, &err);
		co_reply_error(r, &err, name);
		return;
	}
	cm_buf_init(&src, MEM);
	nd_req_opts ro = co_req_opts(r);
	get_refresh_first(r, ix);
	rc = nd_routed_get(ix, nd_index_route(ix, routing ? routing : id, strlen(routing ? routing : id)),
	                   id, strlen(id), &ro, &meta, &src);
	nd_index_release(ix);
	if (rc) {
		if (rc == CM_ENOTFOUND)
			cm_error_set(&err, CM_ENOTFOUND, "Document not found [%s]/[_doc]/[%s]", name, id);
		else
			cm_error_set(&err, rc, "%s", cm_err_msg(rc));
		co_reply_error(r, &err, NULL);
	} else if (src.len == 0) {
		cm_error_set(&err, CM_ENOTFOUND, "Source not found [%s]/[_doc]/[%s]", name, id);
		co_reply_error(r, &err, NULL);
	} else {
		bool fetch = true;
		char *f = co_source_filter((const char *)src.data, src.len, incl, excl, &fetch);
		if (f)
			co_reply_raw_json(r, 200, f, strlen(f));
		else
			co_reply_raw_json(r, 200, (const char *)src.data, src.len);
		cm_free(MEM, f);
	}
	cm_buf_free(&src);
}

/* ---- _source filtering ---- */


/* Does a dotted path match one of the patterns, or is it a prefix of one
 * (so its object must be kept to reach deeper matches)? */
static int
sf_match(const char *path, char **pats, int n)
{
	int best = 0;
	for (int i = 0; i < n; i++) {
		if (cm_glob(pats[i], path))
			return 2;
		/* "a.b" or "a.*" under path "a" */
		size_t l = strlen(path);
		if (strncmp(pats[i], path, l) == 0 && pats[i][l] == '.')
			best = 1;
		if (strchr(pats[i], '*'))
			best = best ? best : 1;
		/* "a*" matching "ab.c" parent: pattern matches the path prefix */
		char tmp[512];
		snprintf(tmp, sizeof(tmp), "%s.", path);
		if (cm_glob(pats[i], path) || strncmp(pats[i], tmp, strlen(tmp)) == 0)
			best = best ? best : 1;
	}
	return best;
}

static void
sf_apply(cJSON *obj, const char *prefix, char **inc, int ninc, char **exc, int nexc)
{
	cJSON *c, *next;
	for (c = obj->child; c; c = next) {
		char path[512];
		next = c->next;
		snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", c->string);
		if (nexc && sf_match(path, exc, nexc) == 2) {
			cJSON_Delete(cJSON_DetachItemViaPointer(obj, c));
			continue;
		}
		int m = ninc ? sf_match(path, inc, ninc) : 2;
		if (m == 0) {
			cJSON_Delete(cJSON_DetachItemViaPointer(obj, c));
			continue;
		}
		if (cJSON_IsObject(c) && (m == 1 || nexc)) {
			sf_apply(c, path, m == 2 ? NULL : inc, m == 2 ? 0 : ninc, exc, nexc);
			if (m == 1 && !c->child)
				cJSON_Delete(cJSON_DetachItemViaPointer(obj, c));
		} else if (cJSON_IsArray(c) && (m == 1 || nexc)) {
			cJSON *e, *en;
			for (e = c->child; e; e = en) {
				en = e->next;
				if (cJSON_IsObject(e))
					sf_apply(e, path, m == 2 ? NULL : inc, m == 2 ? 0 : ninc, exc, nexc);
				else if (m == 1)
					cJSON_Delete(cJSON_DetachItemViaPointer(c, e));
			}
			if (m == 1 && !c->child)
				cJSON_Delete(cJSON_DetachItemViaPointer(obj, c));
		} else if (m == 1) {
			cJSON_Delete(cJSON_DetachItemViaPointer(obj, c));
		}
	}
}

static int
split_list(char *s, char **out, int max)
{
	int n = 0;
	char *save = NULL;
	for (char *t = strtok_r(s, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
		if (*t)
			out[n++] = t;
	return n;
}

char *
co_source_filter(const char *src, size_t len, const char *incl, const char *excl, bool *fetch)
{
	char *ic = NULL, *ec = NULL, *inc[64], *exc[64], *out = NULL;
	int ninc = 0, nexc = 0;
	cJSON *j;

	*fetch = true;
	if (incl && incl[0] == '\x01') {
		*fetch = false;
		return NULL;
	}
	if ((!incl || !*incl) && (!excl || !*excl))
		return NULL;
	j = cJSON_ParseWithLength(src, len);
	if (!j)
		return NULL;
	if (incl && *incl) {
		ic = cm_strdup(MEM, incl);
		ninc = split_list(ic, inc, 64);
	}
	if (excl && *excl) {
		ec = cm_strdup(MEM, excl);
		nexc = split_list(ec, exc, 64);
	}
	sf_apply(j, "", inc, ninc, exc, nexc);
	char *s = cJSON_PrintUnformatted(j);
	if (s) {
		out = cm_strdup(MEM, s);
		cJSON_free(s);
	}
	cJSON_Delete(j);
	cm_free(MEM, ic);
	cm_free(MEM, ec);
	return out;
}

/* ---- _update ---- */

/* Merges `doc` into `target` as ES does: objects recursively, anything
 * else replaced. Returns true when something changed. */
static bool
deep_merge(cJSON *target, const cJSON *doc)
{
	bool changed = false;
	const cJSON *c;
	cJSON_ArrayForEach(c, doc)
	{
		cJSON *t = cJSON_GetObjectItemCaseSensitive(target, c->string);
		if (t && cJSON_IsObject(t) && cJSON_IsObject(c)) {
			changed |= deep_merge(t, c);
		} else if (!t || !cJSON_Compare(t, c, true)) {
			cJSON *dup = cJSON_Duplicate(c, true);
			if (t)
				cJSON_ReplaceItemViaPointer(target, t, dup);
			else
				cJSON_AddItemToObject(target, c->string, dup);
			changed = true;
		}
	}
	return changed;
}

cm_err
co_update_doc(nd_index *ix, const char *id, const char *routing, const cJSON *body,
              const co_write_opts *w, long retries, const nd_req_opts *o, st_op_result *res,
              cm_error *err)
{
	return co_update_doc_src(ix, id, routing, body, w, retries, o, res, NULL, err);
}

static char *
join_strings(const cJSON *v)
{
	cm_buf b;
	const cJSON *e;
	cm_buf_init(&b, MEM);
	if (cJSON_IsString(v))
		cm_buf_printf(&b, "%s", v->valuestring);
	else
		cJSON_ArrayForEach(e, v) if (cJSON_IsString(e))
		    cm_buf_printf(&b, "%s%s", b.len ? "," : "", e->valuestring);
	cm_buf_put_u8(&b, 0);
	char *s = cm_strdup(MEM, (const char *)b.data);
	cm_buf_free(&b);
	return s;
}

void
co_src_spec_free(co_src_spec *s)
{
	cm_free(MEM, s->incl);
	cm_free(MEM, s->excl);
	memset(s, 0, sizeof(*s));
}

bool
co_src_spec_json(const cJSON *v, co_src_spec *s)
{
	co_src_spec_free(s);
	if (cJSON_IsBool(v)) {
		s->fetch = cJSON_IsTrue(v);
		return true;
	}
	if (cJSON_IsString(v) || cJSON_IsArray(v)) {
		s->fetch = true;
		s->incl = join_strings(v);
		return true;
	}
	if (!cJSON_IsObject(v))
		return false;
	const cJSON *i = cJSON_GetObjectItemCaseSensitive(v, "includes");
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "excludes");
	if (!i)
		i = cJSON_GetObjectItemCaseSensitive(v, "include");
	if (!x)
		x = cJSON_GetObjectItemCaseSensitive(v, "exclude");
	s->fetch = true;
	s->incl = i ? join_strings(i) : NULL;
	s->excl = x ? join_strings(x) : NULL;
	return true;
}

void
co_update_get_json(cJSON *j, const st_op_result *res, const char *src, size_t len,
                   const co_src_spec *s)
{
	bool fetch = true;
	cJSON *g = cJSON_AddObjectToObject(j, "get");
	cJSON_AddNumberToObject(g, "_seq_no", (double)res->seq_no);
	cJSON_AddNumberToObject(g, "_primary_term", (double)res->primary_term);
	cJSON_AddBoolToObject(g, "found", true);
	char *f = co_source_filter(src, len, s->incl && *s->incl ? s->incl : NULL,
	                           s->excl && *s->excl ? s->excl : NULL, &fetch);
	/* raw: the stored text, every number as written */
	cJSON_AddItemToObject(g, "_source",
	                      f ? co_source_item(f, strlen(f), false)
	                        : co_source_item(src, len, false));
	cm_free(MEM, f);
}

cm_err
co_update_doc_src(nd_index *ix, const char *id, const char *routing, const cJSON *body,
                  const co_write_opts *w, long retries, const nd_req_opts *o, st_op_result *res,
                  cm_buf *final, cm_error *err)
{
	/* the read an update starts from is the primary's, as the write will be */
	nd_req_opts ro = {.deadline_ns = o ? o->deadline_ns : 0, .preference = "_primary"};
	bool doc_as_upsert = false, detect_noop = true, scripted_upsert = false;
	const cJSON *doc = NULL, *upsert = NULL, *c, *script = NULL, *params = NULL;
	ps_script *ps = NULL;
	int shard;
	st_op op;
	cm_buf src;
	cm_err rc = CM_OK;

	if (!cJSON_IsObject(body))
		return cm_error_set(err, CM_EVALIDATE, "Validation Failed: 1: script or doc is missing;");
	cJSON_ArrayForEach(c, body)
	{
		if (strcmp(c->string, "doc") == 0)
			doc = c;
		else if (strcmp(c->string, "upsert") == 0)
			upsert = c;
		else if (strcmp(c->string, "doc_as_upsert") == 0)
			doc_as_upsert = cJSON_IsTrue(c);
		else if (strcmp(c->string, "detect_noop") == 0)
			detect_noop = !cJSON_IsFalse(c);
		else if (strcmp(c->string, "script") == 0)
			script = c;
		else if (strcmp(c->string, "scripted_upsert") == 0)
			scripted_upsert = cJSON_IsTrue(c);
		else if (strcmp(c->string, "_source")) {
			char dym[200];
			bool any = cm_did_you_mean(c->string,
			                           "doc,upsert,doc_as_upsert,detect_noop,script,"
			                           "scripted_upsert,_source",
			                           dym, sizeof dym);
			return cm_error_set_type(
			    err, CM_EPARSE, "x_content_parse_exception",
			    "[1:2] [UpdateRequest] unknown field [%.60s]%s%s%s", c->string,
			    any ? " did you mean " : "", dym, any ? "?" : "");
		}
	}
	if (script && doc)
		return cm_error_set(err, CM_EVALIDATE,
		                    "Validation Failed: 1: can't provide both script and doc;");
	if ((!script && (!doc || !cJSON_IsObject(doc))) || (upsert && !cJSON_IsObject(upsert)))
		return cm_error_set(err, CM_EVALIDATE, "Validation Failed: 1: script or doc is missing;");
	/* compiled once, run on every attempt */
	if (script && (rc = ps_from_json(script, &ps, &params, err)))
		return rc;
	shard = nd_index_route(ix, routing ? routing : id, strlen(routing ? routing : id));
	cm_buf_init(&src, MEM);
	for (long attempt = 0;; attempt++) {
		st_doc_meta meta;
		cJSON *cur = NULL;
		char *text;

		cm_buf_reset(&src);
		cm_error_clear(err);
		rc = nd_routed_get(ix, shard, id, strlen(id), &ro, &meta, &src);
		memset(&op, 0, sizeof(op));
		op.type = ST_OP_INDEX;
		op.id = id;
		op.id_len = strlen(id);
		op.seq_no = ST_NO_SEQ;
		op.if_seq_no = ST_NO_SEQ;
		if (rc == CM_ENOTFOUND) {
			if (!upsert && !doc_as_upsert && !(ps && scripted_upsert)) {
				rc = cm_error_set_type(err, CM_ENOTFOUND, "document_missing_exception",
				                       "[_doc][%s]: document missing", id);
				break;
			}
			cur = upsert || doc ? cJSON_Duplicate(upsert ? upsert : doc, true)
			                    : cJSON_CreateObject();
			op.create_only = true; /* a concurrent creator makes this a conflict, then retry */
			int sop = CO_SCRIPT_INDEX;
			if (ps && scripted_upsert &&
			    ((rc = co_script_apply(ps, params, ix, id, NULL, &cur, &sop, err)) ||
			     sop != CO_SCRIPT_INDEX)) {
				cJSON_Delete(cur);
				if (!rc) {
					memset(res, 0, sizeof(*res));
					res->result = ST_RESULT_NOOP;
				}
				break;
			}
		} else if (rc) {
			cm_error_set(err, rc, "%s", cm_err_msg(rc));
			break;
		} else {
			if (w->if_seq_no != ST_NO_SEQ &&
			    (meta.seq_no != w->if_seq_no || meta.primary_term != w->if_primary_term)) {
				rc = cm_error_set_type(err, CM_ECONFLICT, "version_conflict_engine_exception",
				                       "[%s]: version conflict, required seqNo [%llu], primary "
				                       "term [%llu]. current document has seqNo [%llu] and "
				                       "primary term [%llu]",
				                       id, (unsigned long long)w->if_seq_no,
				                       (unsigned long long)w->if_primary_term,
				                       (unsigned long long)meta.seq_no,
				                       (unsigned long long)meta.primary_term);
				break;
			}
			if (src.len == 0) {
				rc = cm_error_set_type(err, CM_EINVAL, "document_source_missing_exception",
				                       "[_doc][%s]: document source missing", id);
				break;
			}
			cur = cJSON_ParseWithLength((const char *)src.data, src.len);
			if (!cur) {
				rc = cm_error_set(err, CM_ECORRUPT, "stored source of [%s] is not JSON", id);
				break;
			}
			int sop = CO_SCRIPT_INDEX;
			if (ps && (rc = co_script_apply(ps, params, ix, id, &meta, &cur, &sop, err))) {
				cJSON_Delete(cur);
				break;
			}
			if (sop == CO_SCRIPT_DELETE)
				op.type = ST_OP_DELETE;
			bool changed = ps ? sop != CO_SCRIPT_NOOP : deep_merge(cur, doc);
			if (!changed && (detect_noop || ps)) {
				memset(res, 0, sizeof(*res));
				res->result = ST_RESULT_NOOP;
				res->seq_no = meta.seq_no;
				res->primary_term = meta.primary_term;
				res->version = meta.version;
				if (final)
					cm_buf_put(final, src.data, src.len);
				cJSON_Delete(cur);
				rc = CM_OK;
				break;
			}
			/* write only over the version we read: a concurrent update
			 * makes this a conflict, and retry_on_conflict reads again */
			op.if_seq_no = meta.seq_no;
			op.if_primary_term = meta.primary_term;
		}
		text = cJSON_PrintUnformatted(cur);
		cJSON_Delete(cur);
		op.source = text;
		op.source_len = strlen(text);
		rc = co_doc_write(ix, &op, routing, routing ? strlen(routing) : 0, o, res, err);
		if (!rc && final && op.type == ST_OP_INDEX)
			cm_buf_put(final, text, strlen(text));
		cJSON_free(text);
		if (rc == CM_ECONFLICT && attempt < retries)
			continue;
		break;
	}
	cm_buf_free(&src);
	ps_free(ps);
	return rc;
}

void
co_h_update(co_req *r)
{
	const char *name = co_seg(r, 0), *id = co_seg(r, 2), *routing;
	const char *roc = co_param_get(r, "retry_on_conflict");
	if (!co_alias_routing_param(r, name) || /* an alias's index_routing */
	    !require_alias_ok(r, name))
		return;
	routing = co_param_get(r, "routing");
	co_write_opts w;
	nd_index *ix = NULL;
	cm_error err;
	bool bad;
	cJSON *body;
	long retries = 0;
	st_op_result res;

	cm_error_clear(&err);
	if (!req_write_opts(r, &w, false))
		return;
	co_param_get(r, "_source");
	if (roc) {
		char *end;
		retries = strtol(roc, &end, 10);
		if (*end || retries < 0 || retries > 1000) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "Failed to parse int parameter [retry_on_conflict] with value [%.60s]",
			                roc);
			return;
		}
	}
	if (w.has_version) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: can't provide version in update request.;");
		return;
	}
	body = co_body_json(r, &bad);
	if (bad)
		return;
	if (!cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL, "Validation Failed: 1: script or doc is missing;");
		return;
	}
	if (co_get_or_create(r->node, name, &ix, &err)) {
		cJSON_Delete(body);
		co_reply_error(r, &err, name);
		return;
	}
	nd_req_opts ro = co_req_opts(r);
	/* what "get" returns: the URL's _source parameters, then the body's */
	co_src_spec spec = {0};
	const char *sp = co_param_get(r, "_source"), *si = co_param_get(r, "_source_includes"),
	           *se = co_param_get(r, "_source_excludes");
	if (sp || si || se) {
		spec.fetch = !sp || strcmp(sp, "false");
		spec.incl = cm_strdup(MEM, si ? si : sp && strcmp(sp, "true") ? sp : "");
		spec.excl = se ? cm_strdup(MEM, se) : NULL;
	}
	const cJSON *bs = cJSON_GetObjectItemCaseSensitive(body, "_source");
	if (bs && !co_src_spec_json(bs, &spec)) {
		co_src_spec_free(&spec);
		cJSON_Delete(body);
		nd_index_release(ix);
		co_reply_errorf(r, CM_EPARSE, NULL,
		                "[_source] must be a boolean, a string, an array "
		                "or an object");
		return;
	}
	cm_buf final;
	cm_buf_init(&final, MEM);
	if (co_update_doc_src(ix, id, routing, body, &w, retries, &ro, &res, &final, &err)) {
		co_reply_error(r, &err, name);
	} else {
		bool forced = res.result != ST_RESULT_NOOP && co_refresh_after(ix, w.refresh);
		cJSON *j = co_write_result_json(ix, id, strlen(id), &res, forced);
		if (spec.fetch && final.len)
			co_update_get_json(j, &res, (const char *) final.data, final.len, &spec);
		co_reply_json(r, res.result == ST_RESULT_CREATED ? 201 : 200, j);
	}
	cm_buf_free(&final);
	co_src_spec_free(&spec);
	cJSON_Delete(body);
	nd_index_release(ix);
}

/* ---- _mget ---- */

void
co_h_mget(co_req *r)
{
	const char *dflt_index = co_seg(r, 0) && strcmp(co_seg(r, 0), "_mget") ? co_seg(r, 0) : NULL;
	const char *incl, *excl;
	bool bad, parsed = want_parsed(r);
	cJSON *body = co_body_json(r, &bad), *docs, *ids, *out, *arr, *d;

	if (bad)
		return;
	source_params(r, &incl, &excl);
	co_param_get(r, "realtime");
	nd_req_opts ro = co_req_opts(r); /* ?preference picks each document's copy */
	docs = cJSON_GetObjectItemCaseSensitive(body, "docs");
	ids = cJSON_GetObjectItemCaseSensitive(body, "ids");
	if ((!cJSON_IsArray(docs) && !cJSON_IsArray(ids)) ||
	    !cJSON_GetArraySize(cJSON_IsArray(docs) ? docs : ids)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL, "Validation Failed: 1: no documents to get;");
		return;
	}
	if (cJSON_IsArray(ids) && !dflt_index) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL, "Validation Failed: 1: index is missing for doc 0;");
		return;
	}
	/* validate every entry before answering any */
	cJSON *list = docs ? docs : ids;
	int k = 0;
	cJSON_ArrayForEach(d, list)
	{
		const cJSON *id = docs ? cJSON_GetObjectItemCaseSensitive(d, "_id") : d;
		const cJSON *ix = docs ? cJSON_GetObjectItemCaseSensitive(d, "_index") : NULL;
		if (!cJSON_IsString(id) && !cJSON_IsNumber(id)) {
			cJSON_Delete(body);
			co_reply_errorf(r, CM_EVALIDATE, NULL, "Validation Failed: 1: id is missing for doc %d;",
			                k);
			return;
		}
		if (!cJSON_IsString(ix) && !dflt_index) {
			cJSON_Delete(body);
			co_reply_errorf(r, CM_EVALIDATE, NULL,
			                "Validation Failed: 1: index is missing for doc %d;", k);
			return;
		}
		/* the spellings ES 7 removed (routing, version, version_type) */
		static const char *removed[] = {"_routing", "_version", "_version_type"};
		for (size_t i = 0; docs && i < sizeof(removed) / sizeof(removed[0]); i++) {
			const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, removed[i]);
			if (v) {
				cJSON_Delete(body);
				co_reply_errorf(r, CM_EPARSE, NULL, "Unknown key for a %s in [%s].",
				                cJSON_IsString(v) ? "VALUE_STRING" : "VALUE_NUMBER",
				                removed[i]);
				return;
			}
		}
		k++;
	}
	out = cJSON_CreateObject();
	arr = cJSON_AddArrayToObject(out, "docs");
	cJSON_ArrayForEach(d, list)
	{
		const cJSON *idj = docs ? cJSON_GetObjectItemCaseSensitive(d, "_id") : d;
		const cJSON *ixj = docs ? cJSON_GetObjectItemCaseSensitive(d, "_index") : NULL;
		const cJSON *rt = docs ? cJSON_GetObjectItemCaseSensitive(d, "routing") : NULL;
		const cJSON *sfj =
		    docs ? cJSON_GetObjectItemCaseSensitive(d, "stored_fields") : NULL;
		char *dstored = sfj ? join_strings(sfj) : NULL; /* a doc's own, else the URL's */
		const char *stored = dstored ? dstored : co_param_get(r, "stored_fields");
		const cJSON *sj = docs ? cJSON_GetObjectItemCaseSensitive(d, "_source") : NULL;
		const char *iname = cJSON_IsString(ixj) ? ixj->valuestring : dflt_index;
		char idbuf[64], *dinc = NULL, *dexc = NULL;
		const char *id = cJSON_IsString(idj) ? idj->valuestring : idbuf;
		const char *di = incl, *de = excl;
		nd_index *ix;
		cm_error err;
		bool found;

		if (cJSON_IsNumber(idj))
			snprintf(idbuf, sizeof(idbuf), "%lld", (long long)idj->valuedouble);
		if (cJSON_IsFalse(sj))
			di = "\x01";
		else if (cJSON_IsString(sj))
			di = sj->valuestring;
		else if (cJSON_IsArray(sj) || cJSON_IsObject(sj)) {
			/* ["a","b"] or {"includes"|"include": .., "excludes"|"exclude": ..},
			 * each a list or a string */
			co_src_spec sp = {0};
			co_src_spec_json(sj, &sp);
			dinc = sp.incl;
			dexc = sp.excl;
			di = dinc && *dinc ? dinc : NULL;
			if (dexc)
				de = *dexc ? dexc : NULL;
		}
		cm_error_clear(&err);
		if (!(ix = co_index_or_alias(r->node, iname, false))) {
			cJSON *e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "_index", iname);
			cJSON_AddNullToObject(e, "_type"); /* as ES 7: a failure has no type */
			cJSON_AddStringToObject(e, "_id", id);
			co_single_index_error(r->node, iname, &err);
			cJSON_AddItemToObject(e, "error", co_error_json(&err, iname));
			cJSON_AddItemToArray(arr, e);
			cm_free(MEM, dinc);
			cm_free(MEM, dexc);
			cm_free(MEM, dstored);
			continue;
		}
		get_refresh_first(r, ix);
		cJSON *g = get_doc_json(
		    ix, id, cJSON_IsString(rt) ? rt->valuestring : co_param_get(r, "routing"), di,
		    de, stored, sj || co_param_get(r, "_source"), parsed, &ro, &found, &err);
		if (g && !found) {
			/* ES 7's typeless mget: a missing document has its index's
			 * type, none while the index has no mapping yet */
			st_mapping *m = nd_index_mapping(ix);
			if (!m || m->nfields == 0)
				cJSON_ReplaceItemInObjectCaseSensitive(g, "_type", cJSON_CreateNull());
			st_mapping_unref(m);
		}
		nd_index_release(ix);
		cm_free(MEM, dinc);
		cm_free(MEM, dexc);
		cm_free(MEM, dstored);
		if (!g) {
			g = cJSON_CreateObject();
			cJSON_AddStringToObject(g, "_index", iname);
			cJSON_AddNullToObject(g, "_type");
			cJSON_AddStringToObject(g, "_id", id);
			cJSON_AddItemToObject(g, "error", co_error_json(&err, iname));
		}
		cJSON_AddItemToArray(arr, g);
	}
	cJSON_Delete(body);
	co_reply_json(r, 200, out);
}
