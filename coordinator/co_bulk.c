/* _bulk: NDJSON parsed line by line as the body streams in (the parsing
 * itself is co_bulk_parse.c; this file applies what it yields).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "co_bulk_parse.h"
#include "co_doc.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define CHUNK_BYTES (8u << 20)
#define CHUNK_ITEMS 20000

typedef struct bulk_item {
	co_bulk_action a;
	size_t src_off, src_len; /* into the chunk's source buffer */
	/* result */
	nd_index *ix;
	int shard;
	st_op_result res;
	cm_error err;
	bool failed;
	bool ready;        /* resolved, routed, ingested: to be applied */
	bool dropped;      /* an ingest pipeline dropped it */
	char *ingested;    /* the source an ingest pipeline made (owned), or NULL */
	char *get;         /* an update's "get" object (JSON text, owned), or NULL */
	size_t batch, pos; /* where its op sits */
} bulk_item;

typedef struct ix_cache {
	char *name;
	nd_index *ix; /* NULL: missing (deletes) or failed to create */
	cm_error err;
	char *alias_rt; /* name is an alias with index_routing: it */
} ix_cache;

struct co_stream {
	co_req *r;
	co_write_opts dflt;
	co_bulk_parser parser;
	bulk_item *items;
	size_t nitems, capitems;
	cm_buf src;    /* sources of the chunk's items */
	cm_buf out;    /* rendered items, comma separated */
	bool errors;
	bool failed;
	ix_cache *cache;
	size_t ncache;
	uint64_t t0;
	const char *pipeline; /* ?pipeline= (borrowed from the request), or NULL */
	bool require_alias;   /* ?require_alias: items without their own */
	co_ingest *ingest;    /* compiled pipelines, made on first use */
};

static void apply_chunk(co_stream *s);
static nd_index *cache_get(co_stream *s, const char *name, bool create, cm_error *err);

/* A complete item from the parser: kept with its source until the chunk
 * is full (or the body ends). */
static void
on_item(void *ctx, co_bulk_action *a, const char *src, size_t len)
{
	co_stream *s = ctx;
	if (s->nitems == s->capitems) {
		s->capitems = s->capitems ? s->capitems * 2 : 256;
		s->items = cm_realloc(MEM, s->items, s->capitems * sizeof(bulk_item));
	}
	bulk_item *it = &s->items[s->nitems++];
	memset(it, 0, sizeof(*it));
	it->a = *a;
	memset(a, 0, sizeof(*a));
	it->src_off = s->src.len;
	it->src_len = len;
	if (len)
		cm_buf_put(&s->src, src, len);
	if (s->src.len >= CHUNK_BYTES || s->nitems >= CHUNK_ITEMS)
		apply_chunk(s);
}

co_stream *
co_bulk_begin(co_req *r)
{
	co_stream *s = cm_calloc(MEM, 1, sizeof(*s));
	cm_error err;

	s->r = r;
	s->t0 = cm_now_ns();
	co_bulk_parser_init(&s->parser,
	                    co_seg(r, 0) && strcmp(co_seg(r, 0), "_bulk") ? co_seg(r, 0) : NULL,
	                    co_param_get(r, "routing"), r->max_body, on_item, s);
	cm_buf_init(&s->src, MEM);
	cm_buf_init(&s->out, MEM);
	cm_error_clear(&err);
	co_param_get(r, "timeout");
	co_param_get(r, "wait_for_active_shards");
	s->pipeline = co_param_get(r, "pipeline");
	const char *ra = co_param_get(r, "require_alias");
	s->require_alias = ra && (!*ra || !strcmp(ra, "true"));
	co_param_get(r, "type");
	if (co_write_opts_parse(NULL, NULL, NULL, NULL, NULL, co_param_get(r, "refresh"), &s->dflt,
	                        &err)) {
		co_reply_error(r, &err, NULL);
		s->failed = true;
	} else if (ra && *ra && strcmp(ra, "true") && strcmp(ra, "false")) {
		cm_error_set(&err, CM_EINVAL,
		             "Failed to parse value [%s] as only [true] or [false] are allowed.", ra);
		co_reply_error(r, &err, NULL);
		s->failed = true;
	}
	return s;
}

/* An item's source line; "" when the chunk holds no source bytes yet (an
 * empty source line leaves the buffer unallocated). */
static const char *
item_src(const co_stream *s, const bulk_item *it)
{
	if (it->ingested)
		return it->ingested;
	return s->src.data ? (const char *)s->src.data + it->src_off : "";
}

/* Runs the item's ingest pipelines (its own, the request's, or its
 * index's default, then the final one): its source, index, id and
 * routing may change. False when it failed or was dropped. */
static bool
item_ingest(co_stream *s, bulk_item *it)
{
	if (!s->ingest)
		s->ingest = co_ingest_new(s->r->node);
	const char *pl = it->a.pipeline ? it->a.pipeline : s->pipeline;
	char *out = NULL, *old_index = cm_strdup(MEM, it->a.index);
	size_t out_len;
	bool dropped;
	if (co_ingest_run(s->ingest, it->ix, pl, &it->a.index, &it->a.id, &it->a.routing,
	                  item_src(s, it), it->src_len, &out, &out_len, &dropped, &it->err)) {
		it->failed = true;
		cm_free(MEM, old_index);
		return false;
	}
	bool moved = strcmp(old_index, it->a.index) != 0;
	cm_free(MEM, old_index);
	if (dropped) {
		it->dropped = true;
		return false;
	}
	if (out) {
		it->ingested = out;
		it->src_len = out_len;
	}
	if (moved) { /* the pipeline set _index */
		cm_error err;
		cm_error_clear(&err);
		if (!(it->ix = cache_get(s, it->a.index, true, &err))) {
			it->failed = true;
			it->err = err;
			return false;
		}
	}
	return true;
}

/* The index_routing of the alias name stands for, or NULL (cached). */
static const char *
alias_routing(co_stream *s, const char *name)
{
	for (size_t i = 0; i < s->ncache; i++)
		if (strcmp(s->cache[i].name, name) == 0)
			return s->cache[i].alias_rt;
	return NULL;
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
	c->alias_rt = co_alias_index_routing(s->r->node, name);
	cm_error_clear(&c->err);
	if (create)
		co_get_or_create(s->r->node, name, &c->ix, &c->err);
	else if (!(c->ix = co_index_or_alias(s->r->node, name, true)))
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
		p->b[i].deadline_ns = s->r->write_deadline_ns; /* the request's ?timeout */
	}
	if (nd_cluster_of(s->r->node))
		/* Cluster: every batch goes to its shard's primary copy. */
		nd_cluster_apply_batches(nd_cluster_of(s->r->node), p->b, p->nb);
	else
		nd_apply_batches(s->r->node, p->b, p->nb);
	for (size_t k = first; k < last; k++) {
		bulk_item *it = &s->items[k];
		if (it->failed || it->a.kind == CO_BULK_UPDATE || it->batch == SIZE_MAX)
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
	const char *id = it->a.id ? it->a.id : "";
	int status;

	if (it->dropped) {
		/* as ES answers a document a pipeline dropped */
		o = cJSON_AddObjectToObject(wrap, co_bulk_action_names[it->a.kind]);
		cJSON_AddStringToObject(o, "_index", it->a.index);
		cJSON_AddStringToObject(o, "_type", "_doc");
		cJSON_AddStringToObject(o, "_id", id);
		cJSON_AddNumberToObject(o, "_version", -3);
		cJSON_AddStringToObject(o, "result", "noop");
		cJSON_AddItemToObject(o, "_shards", co_shards_json(0, 0, 0));
		cJSON_AddNumberToObject(o, "status", 200);
	} else if (it->failed) {
		o = cJSON_AddObjectToObject(wrap, co_bulk_action_names[it->a.kind]);
		cJSON_AddStringToObject(o, "_index", it->a.index);
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
		cJSON_AddStringToObject(e, "index", it->a.index);
		s->errors = true;
	} else {
		/* Written straight out: a JSON tree per item was a quarter of a
		 * bulk request's serial CPU. refresh=true runs before the reply
		 * goes out, as ES reports it. */
		cJSON_Delete(wrap);
		status = it->res.result == ST_RESULT_CREATED     ? 201
		         : it->res.result == ST_RESULT_NOT_FOUND ? 404
		                                                 : 200;
		if (s->out.len)
			cm_buf_put_u8(&s->out, ',');
		cm_buf_printf(&s->out, "{\"%s\":", co_bulk_action_names[it->a.kind]);
		co_write_result_put(&s->out, it->ix, id, strlen(id), &it->res,
		                    s->dflt.refresh == CO_REFRESH_TRUE &&
		                        it->res.result != ST_RESULT_NOOP,
		                    status);
		if (it->get && s->out.len && s->out.data[s->out.len - 1] == '}') {
			s->out.len--; /* the item's object takes "get" before it closes */
			cm_buf_printf(&s->out, ",\"get\":%s}", it->get);
		}
		cm_buf_put_u8(&s->out, '}');
		return;
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
/* Every index or create item's document parsed under its mapping
 * (dynamic fields merged in before the shard sees them), all at once on
 * the node's indexing pool. */
static void
prepare_docs(co_stream *s)
{
	nd_prep *pr = cm_calloc(MEM, s->nitems + 1, sizeof(nd_prep));
	size_t n = 0;
	for (size_t k = 0; k < s->nitems; k++) {
		bulk_item *it = &s->items[k];
		if (!it->ready || (it->a.kind != CO_BULK_INDEX && it->a.kind != CO_BULK_CREATE))
			continue;
		pr[n++] = (nd_prep){.ix = it->ix,
		                    .id = it->a.id,
		                    .id_len = strlen(it->a.id),
		                    .src = item_src(s, it),
		                    .len = it->src_len};
	}
	nd_index_prepare_docs(s->r->node, pr, n);
	n = 0;
	for (size_t k = 0; k < s->nitems; k++) {
		bulk_item *it = &s->items[k];
		if (!it->ready || (it->a.kind != CO_BULK_INDEX && it->a.kind != CO_BULK_CREATE))
			continue;
		if (pr[n].rc) {
			it->failed = true;
			it->err = pr[n].err;
		}
		n++;
	}
	cm_free(MEM, pr);
}

static void
apply_chunk(co_stream *s)
{
	pending p;
	size_t first = 0;
	nd_req_opts ro = co_req_opts(s->r);

	memset(&p, 0, sizeof(p));
	for (size_t k = 0; k < s->nitems; k++) {
		bulk_item *it = &s->items[k];
		cm_error err;
		char gen[21];

		cm_error_clear(&err);
		it->batch = SIZE_MAX;
		if (strchr(it->a.index, '<')) { /* a date-math index name */
			char *name;
			if (co_date_math_names(it->a.index, &name, &it->err)) {
				it->failed = true;
				continue;
			}
			cm_free(MEM, it->a.index);
			it->a.index = name;
		}
		if (it->a.empty_id) {
			cm_error_set(&it->err, CM_EINVAL, "if _id is specified it must not be empty");
			it->failed = true;
			continue;
		}
		bool ra = it->a.require_alias < 0 ? s->require_alias : it->a.require_alias == 1;
		if (ra && it->a.kind != CO_BULK_DELETE && !nd_alias_exists(s->r->node, it->a.index)) {
			/* neither created nor written (ES names both reasons) */
			cm_error_set(&it->err, CM_ENOINDEX,
			             "no such index [%s] and [require_alias] request flag is [true] and "
			             "[%s] is not an alias",
			             it->a.index, it->a.index);
			it->failed = true;
			continue;
		}
		it->ix = cache_get(s, it->a.index, it->a.kind != CO_BULK_DELETE, &err);
		if (!it->ix) {
			it->failed = true;
			it->err = err;
			continue;
		}
		if (!it->a.id) {
			nd_gen_id(gen);
			it->a.id = cm_strdup(MEM, gen);
		}
		if ((it->a.kind == CO_BULK_INDEX || it->a.kind == CO_BULK_CREATE) &&
		    !item_ingest(s, it))
			continue;
		if (nd_index_blocked(it->ix, it->a.kind == CO_BULK_DELETE ? 'd' : 'w', &it->err)) {
			it->failed = true;
			continue;
		}
		const char *art = alias_routing(s, it->a.index);
		if (!co_alias_routing_check(it->a.index, art, it->a.routing, &err)) {
			it->failed = true;
			it->err = err;
			continue;
		}
		if (art && !it->a.routing)
			it->a.routing = cm_strdup(MEM, art); /* the alias's index_routing */
		const char *rt = it->a.routing ? it->a.routing : it->a.id;
		it->shard = nd_index_route(it->ix, rt, strlen(rt));
		it->ready = true;
	}
	prepare_docs(s);
	for (size_t k = 0; k < s->nitems; k++) {
		bulk_item *it = &s->items[k];
		if (!it->ready)
			continue;
		if (it->a.kind == CO_BULK_UPDATE) {
			/* an update reads the current doc: earlier writes must land first */
			pending_flush(s, &p, first, k);
			first = k + 1;
			cJSON *body = cJSON_ParseWithLength(item_src(s, it), it->src_len);
			if (!body) {
				it->failed = true;
				cm_error_set_type(&it->err, CM_EPARSE, "x_content_parse_exception",
				                  "failed to parse the update request body");
			} else {
				/* "get": the URL's _source parameters, the item's, the body's */
				co_src_spec spec = {0};
				const char *sp = co_param_get(s->r, "_source"),
				           *si = co_param_get(s->r, "_source_includes"),
				           *se = co_param_get(s->r, "_source_excludes");
				if (sp || si || se) {
					spec.fetch = !sp || strcmp(sp, "false");
					spec.incl = cm_strdup(MEM, si                         ? si
					                           : sp && strcmp(sp, "true") ? sp
					                                                      : "");
					spec.excl = se ? cm_strdup(MEM, se) : NULL;
				}
				cJSON *ms = it->a.source ? cJSON_Parse(it->a.source) : NULL;
				if (ms)
					co_src_spec_json(ms, &spec);
				cJSON_Delete(ms);
				const cJSON *bs = cJSON_GetObjectItemCaseSensitive(body, "_source");
				if (bs)
					co_src_spec_json(bs, &spec);
				cm_buf final;
				cm_buf_init(&final, MEM);
				if (co_update_doc_src(it->ix, it->a.id, it->a.routing, body,
				                      &it->a.w, it->a.retries, &ro, &it->res,
				                      &final, &it->err)) {
					it->failed = true;
				} else if (spec.fetch && final.len) {
					cJSON *j = cJSON_CreateObject();
					co_update_get_json(j, &it->res, (const char *) final.data,
					                   final.len, &spec);
					char *t = cJSON_PrintUnformatted(
					    cJSON_GetObjectItemCaseSensitive(j, "get"));
					it->get = cm_strdup(MEM, t);
					cJSON_free(t);
					cJSON_Delete(j);
				}
				cm_buf_free(&final);
				co_src_spec_free(&spec);
			}
			cJSON_Delete(body);
			continue;
		}
		if (it->failed) /* its document did not parse (prepare_docs) */
			continue;
		size_t bi = pending_batch(&p, it->ix, it->shard);
		nd_batch *b = &p.b[bi];
		if (b->n == p.cap[bi]) {
			p.cap[bi] = p.cap[bi] ? p.cap[bi] * 2 : 64;
			p.ops[bi] = cm_realloc(MEM, p.ops[bi], p.cap[bi] * sizeof(st_op));
		}
		st_op *op = &p.ops[bi][b->n];
		memset(op, 0, sizeof(*op));
		op->type = it->a.kind == CO_BULK_DELETE ? ST_OP_DELETE : ST_OP_INDEX;
		op->id = it->a.id;
		op->id_len = strlen(it->a.id);
		if (op->type == ST_OP_INDEX) {
			op->source = item_src(s, it);
			op->source_len = it->src_len;
		}
		op->seq_no = ST_NO_SEQ;
		op->if_seq_no = it->a.w.if_seq_no;
		op->if_primary_term = it->a.w.if_primary_term;
		op->version = it->a.w.version;
		op->has_version = it->a.w.has_version;
		op->version_gte = it->a.w.version_gte;
		op->create_only = it->a.w.create;
		it->batch = bi;
		it->pos = b->n++;
	}
	pending_flush(s, &p, first, s->nitems);
	cm_free(MEM, p.b);
	cm_free(MEM, p.ops);
	cm_free(MEM, p.cap);
	for (size_t k = 0; k < s->nitems; k++) {
		render_item(s, &s->items[k]);
		co_bulk_action_clear(&s->items[k].a);
		cm_free(MEM, s->items[k].ingested);
		cm_free(MEM, s->items[k].get);
		s->items[k].get = NULL;
	}
	s->nitems = 0;
	cm_buf_reset(&s->src);
}

static void
discard_chunk(co_stream *s)
{
	for (size_t k = 0; k < s->nitems; k++) {
		co_bulk_action_clear(&s->items[k].a);
		cm_free(MEM, s->items[k].ingested);
		cm_free(MEM, s->items[k].get);
		s->items[k].get = NULL;
	}
	s->nitems = 0;
	cm_buf_reset(&s->src);
}

bool
co_bulk_feed(co_stream *s, const char *data, size_t len)
{
	if (s->failed)
		return false;
	if (!co_bulk_parser_feed(&s->parser, data, len)) {
		co_reply_error(s->r, &s->parser.err, NULL);
		s->failed = true;
		discard_chunk(s);
	}
	return !s->failed;
}

void
co_bulk_end(co_stream *s)
{
	cm_buf body;
	if (s->failed)
		return;
	if (!co_bulk_parser_end(&s->parser)) {
		co_reply_error(s->r, &s->parser.err, NULL);
		s->failed = true;
		discard_chunk(s);
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
		cm_free(MEM, s->cache[i].alias_rt);
		nd_index_release(s->cache[i].ix);
	}
	cm_free(MEM, s->cache);
	cm_free(MEM, s->items);
	co_ingest_free(s->ingest);
	co_bulk_parser_free(&s->parser);
	cm_buf_free(&s->src);
	cm_buf_free(&s->out);
	cm_free(MEM, s);
}
