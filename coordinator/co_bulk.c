/* _bulk: NDJSON parsed line by line as the body streams in.
 *
 * Action lines are validated as they arrive; items collect in a chunk
 * (up to CHUNK_BYTES of source). A chunk is applied only once every action
 * line in it has validated, so a malformed action line fails the request
 * with 400 and nothing of its chunk is applied. A body of at most
 * CHUNK_BYTES (the usual case) is therefore all-or-nothing for malformed
 * action lines, as in Elasticsearch; a larger streamed body keeps the
 * chunks before the bad line applied (their items are not reported, since
 * the reply is the 400). Sources are checked per item (a bad document is
 * that item's error, never the request's). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "co_doc.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define CHUNK_BYTES (8u << 20)
#define CHUNK_ITEMS 20000

typedef enum { A_INDEX, A_CREATE, A_UPDATE, A_DELETE } action_kind;

static const char *action_names[] = {"index", "create", "update", "delete"};

typedef struct bulk_item {
	action_kind kind;
	char *index; /* owned */
	char *id;    /* owned; NULL = generate */
	char *routing;
	co_write_opts w;
	long retries;
	size_t src_off, src_len; /* into the chunk's source buffer */
	/* result */
	nd_index *ix;
	int shard;
	st_op_result res;
	cm_error err;
	bool failed;
	size_t batch, pos; /* where its op sits */
} bulk_item;

typedef struct ix_cache {
	char *name;
	nd_index *ix; /* NULL: missing (deletes) or failed to create */
	cm_error err;
} ix_cache;

struct co_stream {
	co_req *r;
	const char *dflt_index;
	co_write_opts dflt;
	const char *dflt_routing;
	cm_buf line;   /* a partial line carried to the next chunk */
	bulk_item *items;
	size_t nitems, capitems;
	cm_buf src;    /* sources of the chunk's items */
	bool want_source;
	uint64_t line_no;
	uint64_t total_items;
	cm_buf out;    /* rendered items, comma separated */
	bool errors;
	bool failed;
	ix_cache *cache;
	size_t ncache;
	uint64_t t0;
};

co_stream *
co_bulk_begin(co_req *r)
{
	co_stream *s = cm_calloc(MEM, 1, sizeof(*s));
	cm_error err;

	s->r = r;
	s->t0 = cm_now_ns();
	s->dflt_index = co_seg(r, 0) && strcmp(co_seg(r, 0), "_bulk") ? co_seg(r, 0) : NULL;
	s->dflt_routing = co_param_get(r, "routing");
	cm_buf_init(&s->line, MEM);
	cm_buf_init(&s->src, MEM);
	cm_buf_init(&s->out, MEM);
	cm_error_clear(&err);
	co_param_get(r, "timeout");
	co_param_get(r, "wait_for_active_shards");
	co_param_get(r, "pipeline");
	co_param_get(r, "type");
	if (co_write_opts_parse(NULL, NULL, NULL, NULL, NULL, co_param_get(r, "refresh"), &s->dflt,
	                        &err)) {
		co_reply_error(r, &err, NULL);
		s->failed = true;
	}
	return s;
}

static void
item_clear(bulk_item *it)
{
	cm_free(MEM, it->index);
	cm_free(MEM, it->id);
	cm_free(MEM, it->routing);
}

static void fail_request(co_stream *s, cm_err code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
fail_request(co_stream *s, cm_err code, const char *fmt, ...)
{
	cm_error e;
	va_list ap;
	if (s->failed)
		return;
	cm_error_clear(&e);
	e.code = code;
	va_start(ap, fmt);
	vsnprintf(e.reason, sizeof(e.reason), fmt, ap);
	va_end(ap);
	co_reply_error(s->r, &e, NULL);
	s->failed = true;
}

/* A metadata value as a string (ids and versions may be numbers). */
static char *
meta_str(const cJSON *v)
{
	char buf[64];
	if (cJSON_IsString(v))
		return cm_strdup(MEM, v->valuestring);
	if (cJSON_IsNumber(v)) {
		snprintf(buf, sizeof(buf), "%.0f", v->valuedouble);
		return cm_strdup(MEM, buf);
	}
	return NULL;
}

static bool
parse_action(co_stream *s, const char *line, size_t len)
{
	cJSON *j = cJSON_ParseWithLength(line, len), *a, *c;
	bulk_item it;
	char *ver = NULL, *vt = NULL, *sq = NULL, *pt = NULL, *opt = NULL;
	cm_error err;
	bool ok = false;

	memset(&it, 0, sizeof(it));
	if (!j || !cJSON_IsObject(j)) {
		fail_request(s, CM_EINVAL,
		             "Malformed action/metadata line [%llu], expected START_OBJECT but found "
		             "[%s]",
		             (unsigned long long)s->line_no, j ? "VALUE" : "malformed JSON");
		goto done;
	}
	a = j->child;
	if (!a || a->next) {
		fail_request(s, CM_EINVAL,
		             "Malformed action/metadata line [%llu], expected a single action",
		             (unsigned long long)s->line_no);
		goto done;
	}
	if (strcmp(a->string, "index") == 0)
		it.kind = A_INDEX;
	else if (strcmp(a->string, "create") == 0)
		it.kind = A_CREATE;
	else if (strcmp(a->string, "update") == 0)
		it.kind = A_UPDATE;
	else if (strcmp(a->string, "delete") == 0)
		it.kind = A_DELETE;
	else {
		fail_request(s, CM_EINVAL,
		             "Malformed action/metadata line [%llu], expected field [create], [delete], "
		             "[index] or [update] but found [%.60s]",
		             (unsigned long long)s->line_no, a->string);
		goto done;
	}
	if (!cJSON_IsObject(a)) {
		fail_request(s, CM_EINVAL, "Malformed action/metadata line [%llu], expected START_OBJECT",
		             (unsigned long long)s->line_no);
		goto done;
	}
	cJSON_ArrayForEach(c, a)
	{
		const char *k = c->string;
		if (strcmp(k, "_index") == 0 && cJSON_IsString(c))
			it.index = cm_strdup(MEM, c->valuestring);
		else if (strcmp(k, "_id") == 0 && (cJSON_IsString(c) || cJSON_IsNumber(c)))
			it.id = meta_str(c);
		else if ((strcmp(k, "routing") == 0 || strcmp(k, "_routing") == 0) &&
		         (it.routing = meta_str(c)))
			;
		else if (strcmp(k, "version") == 0 || strcmp(k, "_version") == 0)
			ver = meta_str(c);
		else if (strcmp(k, "version_type") == 0 || strcmp(k, "_version_type") == 0)
			vt = meta_str(c);
		else if (strcmp(k, "if_seq_no") == 0)
			sq = meta_str(c);
		else if (strcmp(k, "if_primary_term") == 0)
			pt = meta_str(c);
		else if (strcmp(k, "op_type") == 0)
			opt = meta_str(c);
		else if (strcmp(k, "retry_on_conflict") == 0 && cJSON_IsNumber(c))
			it.retries = (long)c->valuedouble;
		else if (strcmp(k, "_type") == 0 || strcmp(k, "pipeline") == 0 ||
		         strcmp(k, "require_alias") == 0 || strcmp(k, "_source") == 0)
			;
		else {
			fail_request(s, CM_EINVAL,
			             "Action/metadata line [%llu] contains an unknown parameter [%.60s]",
			             (unsigned long long)s->line_no, k);
			goto done;
		}
	}
	if (!it.index && s->dflt_index)
		it.index = cm_strdup(MEM, s->dflt_index);
	if (!it.index) {
		fail_request(s, CM_EVALIDATE, "Validation Failed: 1: index is missing;");
		goto done;
	}
	if (!it.routing && s->dflt_routing)
		it.routing = cm_strdup(MEM, s->dflt_routing);
	if ((it.kind == A_DELETE || it.kind == A_UPDATE) && (!it.id || !*it.id)) {
		fail_request(s, CM_EVALIDATE, "Validation Failed: 1: id is missing;");
		goto done;
	}
	cm_error_clear(&err);
	if (co_write_opts_parse(it.kind == A_CREATE ? "create" : opt, ver, vt, sq, pt, NULL, &it.w,
	                        &err)) {
		fail_request(s, err.code, "%s", err.reason);
		goto done;
	}
	if (it.id && !co_id_check(it.id, strlen(it.id), &err)) {
		fail_request(s, err.code, "%s", err.reason);
		goto done;
	}
	if (s->nitems == s->capitems) {
		s->capitems = s->capitems ? s->capitems * 2 : 256;
		s->items = cm_realloc(MEM, s->items, s->capitems * sizeof(bulk_item));
	}
	s->items[s->nitems++] = it;
	memset(&it, 0, sizeof(it));
	s->want_source = s->items[s->nitems - 1].kind != A_DELETE;
	ok = true;
done:
	item_clear(&it);
	cm_free(MEM, ver);
	cm_free(MEM, vt);
	cm_free(MEM, sq);
	cm_free(MEM, pt);
	cm_free(MEM, opt);
	cJSON_Delete(j);
	return ok;
}

static nd_index *
cache_get(co_stream *s, const char *name, bool create, cm_error *err)
{
	for (size_t i = 0; i < s->ncache; i++)
		if (strcmp(s->cache[i].name, name) == 0) {
			if (!s->cache[i].ix && create && s->cache[i].err.code == CM_ENOINDEX) {
				/* a delete saw it missing; an index action may create it */
				cm_error_clear(&s->cache[i].err);
				co_get_or_create(s->r->node, name, &s->cache[i].ix, &s->cache[i].err);
			}
			*err = s->cache[i].err;
			return s->cache[i].ix;
		}
	s->cache = cm_realloc(MEM, s->cache, (s->ncache + 1) * sizeof(ix_cache));
	ix_cache *c = &s->cache[s->ncache++];
	c->name = cm_strdup(MEM, name);
	c->ix = NULL;
	cm_error_clear(&c->err);
	if (create)
		co_get_or_create(s->r->node, name, &c->ix, &c->err);
	else if (!(c->ix = nd_index_get(s->r->node, name)))
		cm_error_set(&c->err, CM_ENOINDEX, "no such index [%s]", name);
	*err = c->err;
	return c->ix;
}

typedef struct pending {
	nd_batch *b;
	size_t nb, capb;
	st_op **ops; /* per batch */
	size_t *cap;
} pending;

static size_t
pending_batch(pending *p, nd_index *ix, int shard)
{
	for (size_t i = 0; i < p->nb; i++)
		if (p->b[i].ix == ix && p->b[i].shard == shard)
			return i;
	if (p->nb == p->capb) {
		p->capb = p->capb ? p->capb * 2 : 8;
		p->b = cm_realloc(MEM, p->b, p->capb * sizeof(nd_batch));
		p->ops = cm_realloc(MEM, p->ops, p->capb * sizeof(st_op *));
		p->cap = cm_realloc(MEM, p->cap, p->capb * sizeof(size_t));
	}
	memset(&p->b[p->nb], 0, sizeof(nd_batch));
	p->b[p->nb].ix = ix;
	p->b[p->nb].shard = shard;
	p->ops[p->nb] = NULL;
	p->cap[p->nb] = 0;
	return p->nb++;
}

/* Applies the pending batches (every shard at once) and copies results
 * back to their items. */
static void
pending_flush(co_stream *s, pending *p, size_t first, size_t last)
{
	if (!p->nb)
		return;
	for (size_t i = 0; i < p->nb; i++) {
		p->b[i].ops = p->ops[i];
		p->b[i].res = cm_calloc(MEM, p->b[i].n + 1, sizeof(st_op_result));
	}
	if (nd_cluster_of(s->r->node))
		/* Cluster: every batch goes to its shard's primary copy. */
		nd_cluster_apply_batches(nd_cluster_of(s->r->node), p->b, p->nb);
	else
		nd_apply_batches(s->r->node, p->b, p->nb);
	for (size_t k = first; k < last; k++) {
		bulk_item *it = &s->items[k];
		if (it->failed || it->kind == A_UPDATE || it->batch == SIZE_MAX)
			continue;
		nd_batch *b = &p->b[it->batch];
		if (b->rc) {
			it->failed = true;
			cm_error_set(&it->err, b->rc, "%s", cm_err_msg(b->rc));
			continue;
		}
		it->res = b->res[it->pos];
		if (it->res.err) {
			it->failed = true;
			if (it->res.err == CM_ECONFLICT)
				cm_error_set_type(&it->err, CM_ECONFLICT, "version_conflict_engine_exception",
				                  "%s", it->res.reason);
			else
				cm_error_set(&it->err, it->res.err, "%s",
				             it->res.reason[0] ? it->res.reason : cm_err_msg(it->res.err));
		}
	}
	for (size_t i = 0; i < p->nb; i++) {
		cm_free(MEM, p->b[i].res);
		cm_free(MEM, p->ops[i]);
	}
	p->nb = 0;
}

static void
render_item(co_stream *s, bulk_item *it)
{
	cJSON *wrap = cJSON_CreateObject(), *o;
	const char *id = it->id ? it->id : "";
	int status;

	if (it->failed) {
		o = cJSON_AddObjectToObject(wrap, action_names[it->kind]);
		cJSON_AddStringToObject(o, "_index", it->index);
		cJSON_AddStringToObject(o, "_type", "_doc");
		cJSON_AddStringToObject(o, "_id", id);
		status = cm_err_status(it->err.code);
		cJSON_AddNumberToObject(o, "status", status);
		cJSON *e = cJSON_AddObjectToObject(o, "error");
		cJSON_AddStringToObject(e, "type", cm_error_type(&it->err));
		cJSON_AddStringToObject(e, "reason",
		                        it->err.reason[0] ? it->err.reason : cm_err_msg(it->err.code));
		if (it->ix) {
			char sh[16];
			snprintf(sh, sizeof(sh), "%d", it->shard);
			cJSON_AddStringToObject(e, "index_uuid", nd_index_uuid(it->ix));
			cJSON_AddStringToObject(e, "shard", sh);
		} else {
			cJSON_AddStringToObject(e, "index_uuid", "_na_");
		}
		cJSON_AddStringToObject(e, "index", it->index);
		s->errors = true;
	} else {
		/* refresh=true runs before the reply goes out, as ES reports it */
		o = co_write_result_json(it->ix, id, strlen(id), &it->res,
		                         s->dflt.refresh == CO_REFRESH_TRUE &&
		                             it->res.result != ST_RESULT_NOOP);
		status = it->res.result == ST_RESULT_CREATED     ? 201
		         : it->res.result == ST_RESULT_NOT_FOUND ? 404
		                                                 : 200;
		cJSON_AddNumberToObject(o, "status", status);
		cJSON_AddItemToObject(wrap, action_names[it->kind], o);
	}
	char *text = cJSON_PrintUnformatted(wrap);
	if (s->out.len)
		cm_buf_put_u8(&s->out, ',');
	cm_buf_put(&s->out, text, strlen(text));
	cJSON_free(text);
	cJSON_Delete(wrap);
}

/* Runs the validated chunk: index/create/delete batched per shard (all
 * shards at once), updates in order between batches. */
static void
apply_chunk(co_stream *s)
{
	pending p;
	size_t first = 0;

	memset(&p, 0, sizeof(p));
	for (size_t k = 0; k < s->nitems; k++) {
		bulk_item *it = &s->items[k];
		cm_error err;
		char gen[21];

		cm_error_clear(&err);
		it->batch = SIZE_MAX;
		it->ix = cache_get(s, it->index, it->kind != A_DELETE, &err);
		if (!it->ix) {
			it->failed = true;
			it->err = err;
			continue;
		}
		if (!it->id) {
			nd_gen_id(gen);
			it->id = cm_strdup(MEM, gen);
		}
		const char *rt = it->routing ? it->routing : it->id;
		it->shard = nd_index_route(it->ix, rt, strlen(rt));
		if (it->kind == A_UPDATE) {
			/* an update reads the current doc: earlier writes must land first */
			pending_flush(s, &p, first, k);
			first = k + 1;
			cJSON *body = cJSON_ParseWithLength((const char *)s->src.data + it->src_off,
			                                    it->src_len);
			if (!body) {
				it->failed = true;
				cm_error_set_type(&it->err, CM_EPARSE, "x_content_parse_exception",
				                  "failed to parse the update request body");
			} else if (co_update_doc(it->ix, it->id, it->routing, body, &it->w, it->retries,
			                         &it->res, &it->err)) {
				it->failed = true;
			}
			cJSON_Delete(body);
			continue;
		}
		if (it->kind != A_DELETE &&
		    nd_index_prepare_doc(it->ix, it->id, strlen(it->id),
		                         (const char *)s->src.data + it->src_off, it->src_len, &it->err)) {
			it->failed = true;
			continue;
		}
		size_t bi = pending_batch(&p, it->ix, it->shard);
		nd_batch *b = &p.b[bi];
		if (b->n == p.cap[bi]) {
			p.cap[bi] = p.cap[bi] ? p.cap[bi] * 2 : 64;
			p.ops[bi] = cm_realloc(MEM, p.ops[bi], p.cap[bi] * sizeof(st_op));
		}
		st_op *op = &p.ops[bi][b->n];
		memset(op, 0, sizeof(*op));
		op->type = it->kind == A_DELETE ? ST_OP_DELETE : ST_OP_INDEX;
		op->id = it->id;
		op->id_len = strlen(it->id);
		if (op->type == ST_OP_INDEX) {
			op->source = (const char *)s->src.data + it->src_off;
			op->source_len = it->src_len;
		}
		op->seq_no = ST_NO_SEQ;
		op->if_seq_no = it->w.if_seq_no;
		op->if_primary_term = it->w.if_primary_term;
		op->version = it->w.version;
		op->create_only = it->w.create;
		it->batch = bi;
		it->pos = b->n++;
	}
	pending_flush(s, &p, first, s->nitems);
	cm_free(MEM, p.b);
	cm_free(MEM, p.ops);
	cm_free(MEM, p.cap);
	for (size_t k = 0; k < s->nitems; k++) {
		render_item(s, &s->items[k]);
		item_clear(&s->items[k]);
	}
	s->total_items += s->nitems;
	s->nitems = 0;
	cm_buf_reset(&s->src);
}

static void
discard_chunk(co_stream *s)
{
	for (size_t k = 0; k < s->nitems; k++)
		item_clear(&s->items[k]);
	s->nitems = 0;
	cm_buf_reset(&s->src);
}

static bool
blank(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strchr(" \t\r", p[i]))
			return false;
	return true;
}

static void
process_line(co_stream *s, const char *p, size_t n)
{
	s->line_no++;
	if (n && p[n - 1] == '\r')
		n--;
	if (s->want_source) {
		bulk_item *it = &s->items[s->nitems - 1];
		it->src_off = s->src.len;
		it->src_len = n;
		cm_buf_put(&s->src, p, n);
		s->want_source = false;
		if (s->src.len >= CHUNK_BYTES || s->nitems >= CHUNK_ITEMS)
			apply_chunk(s);
		return;
	}
	if (blank(p, n))
		return;
	if (!parse_action(s, p, n))
		return;
	if (!s->want_source && (s->src.len >= CHUNK_BYTES || s->nitems >= CHUNK_ITEMS))
		apply_chunk(s);
}

bool
co_bulk_feed(co_stream *s, const char *data, size_t len)
{
	const char *p = data, *end = data + len;
	if (s->failed)
		return false;
	while (p < end && !s->failed) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl) {
			if (s->line.len + (size_t)(end - p) > s->r->max_body) {
				fail_request(s, CM_ETOOLARGE, "bulk line [%llu] is too long",
				             (unsigned long long)s->line_no + 1);
				break;
			}
			cm_buf_put(&s->line, p, (size_t)(end - p));
			break;
		}
		if (s->line.len) {
			cm_buf_put(&s->line, p, (size_t)(nl - p));
			process_line(s, (const char *)s->line.data, s->line.len);
			cm_buf_reset(&s->line);
		} else {
			process_line(s, p, (size_t)(nl - p));
		}
		p = nl + 1;
	}
	if (s->failed)
		discard_chunk(s);
	return !s->failed;
}

void
co_bulk_end(co_stream *s)
{
	cm_buf body;
	if (s->failed)
		return;
	if (s->line.len && !blank((const char *)s->line.data, s->line.len)) {
		/* ES requires the final newline; accept it missing only for a
		 * source line, which is unambiguous. */
		if (s->want_source) {
			process_line(s, (const char *)s->line.data, s->line.len);
		} else {
			fail_request(s, CM_EINVAL, "The bulk request must be terminated by a newline [\\n]");
		}
		cm_buf_reset(&s->line);
	}
	if (!s->failed && s->want_source) {
		fail_request(s, CM_EINVAL,
		             "Malformed action/metadata line [%llu], the action is missing its source line",
		             (unsigned long long)s->line_no);
	}
	if (s->failed) {
		discard_chunk(s);
		return;
	}
	if (s->nitems == 0 && s->total_items == 0) {
		co_reply_errorf(s->r, CM_EVALIDATE, NULL, "Validation Failed: 1: no requests added;");
		return;
	}
	apply_chunk(s);
	if (s->dflt.refresh != CO_REFRESH_NONE)
		for (size_t i = 0; i < s->ncache; i++)
			if (s->cache[i].ix)
				co_refresh_after(s->cache[i].ix, s->dflt.refresh);
	cm_buf_init(&body, MEM);
	cm_buf_printf(&body, "{\"took\":%llu,\"errors\":%s,\"items\":[",
	              (unsigned long long)((cm_now_ns() - s->t0) / 1000000),
	              s->errors ? "true" : "false");
	cm_buf_put(&body, s->out.data, s->out.len);
	cm_buf_put(&body, "]}", 2);
	co_reply_raw_json(s->r, 200, (const char *)body.data, body.len);
	cm_buf_free(&body);
}

void
co_bulk_free(co_stream *s)
{
	discard_chunk(s);
	for (size_t i = 0; i < s->ncache; i++) {
		cm_free(MEM, s->cache[i].name);
		nd_index_release(s->cache[i].ix);
	}
	cm_free(MEM, s->cache);
	cm_free(MEM, s->items);
	cm_buf_free(&s->line);
	cm_buf_free(&s->src);
	cm_buf_free(&s->out);
	cm_free(MEM, s);
}
