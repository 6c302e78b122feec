/* Search contexts: a shard copy's point-in-time reader kept alive on the
 * node that holds it (scroll, point in time), and the coordinator side
 * that opens them on every shard, pages through them and frees them.
 * * A scroll id is base64url of where every context lives (node name,
 * context id), so any node can serve the next page and nothing is kept on
 * the coordinator; it stays the same from page to page. Each context
 * keeps its cursor: the number of the shard's hits already returned, or,
 * for a scroll sorted by _doc alone, the last returned doc + 1 (the shard
 * then runs a cheap search_after instead of a deeper top-k). A page over
 * several shards is query then fetch (as ES's): every context sends the
 * sort keys of its next `size` hits, the merge decides how many each one
 * gives, and only those are fetched and passed. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include <xxhash.h>

#include "../proto/pr.h"
#include "../search/sr_agg.h"
#include "nd_cluster_private.h"
#include "nd_private.h"

#define MEM CM_MEM_NODE
#define CTX_DEADLINE_NS (15ull * 1000000000ull)
#define CTX_MAX_REFS 8192
#define CTX_NODE_NAME 64

/* ---- the contexts this node holds ---- */

typedef struct ctx {
	uint64_t id;
	nd_node *owner;
	nd_index *ix;
	int shard;
	st_reader *rd;
	char *body;
	size_t body_len;
	int kind;
	int64_t expires_ms;
	uint64_t cursor; /* under g_lock */
	int refs;        /* under g_lock: the registry's one plus pages running */
	/* the reader's ids, for slices within the shard (read when first
	 * needed; ids_mu is a leaf) */
	pthread_mutex_t ids_mu;
	bool ids_ready;
	char **ids;
	uint64_t *id_hash;
	size_t nids;
	struct ctx *next;
} ctx;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static ctx *g_ctxs;
static _Atomic int g_max_scroll = ND_MAX_SCROLL_CONTEXTS;

void
nd_ctx_set_max_scroll(int max)
{
	atomic_store(&g_max_scroll, max > 0 ? max : ND_MAX_SCROLL_CONTEXTS);
}

static void
ctx_destroy(ctx *c)
{
	if (c->rd)
		st_reader_release(c->rd);
	nd_index_release(c->ix);
	cm_free(MEM, c->body);
	for (size_t i = 0; i < c->nids; i++)
		cm_free(MEM, c->ids[i]);
	cm_free(MEM, c->ids);
	cm_free(MEM, c->id_hash);
	pthread_mutex_destroy(&c->ids_mu);
	cm_free(MEM, c);
}

static void
ctx_unref(ctx *c)
{
	pthread_mutex_lock(&g_lock);
	bool last = --c->refs == 0;
	pthread_mutex_unlock(&g_lock);
	if (last)
		ctx_destroy(c);
}

/* Unlinks c (g_lock held); the caller drops the registry's reference. */
static void
ctx_unlink_locked(ctx *c)
{
	for (ctx **pp = &g_ctxs; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			return;
		}
}

static uint64_t
new_id(void)
{
	uint64_t id = 0;
	while (id == 0)
		if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
			id = cm_now_ns() ^ ((uint64_t)cm_wall_ms() << 20);
	return id;
}

size_t
nd_ctx_open_count(nd_node *n)
{
	size_t k = 0;
	pthread_mutex_lock(&g_lock);
	for (ctx *c = g_ctxs; c; c = c->next)
		k += c->owner == n;
	pthread_mutex_unlock(&g_lock);
	return k;
}

/* Opens one context per shard of index here; ids[i] for shards[i]. */
static cm_err
open_local(nd_node *n, const char *index, const uint32_t *shards, size_t ns, const char *body,
           size_t blen, int64_t keep_ms, int kind, uint64_t *ids, cm_error *err)
{
	nd_index *ix = nd_index_get(n, index);
	if (!ix)
		return cm_error_set(err, CM_ENOINDEX, "no such index [%s] on node [%s]", index,
		                    nd_node_name(n));
	for (size_t i = 0; i < ns; i++)
		if ((int)shards[i] >= nd_index_nshards(ix) || !nd_index_shard(ix, (int)shards[i])) {
			nd_index_release(ix);
			return cm_error_set(err, CM_EUNAVAIL, "shard [%s][%u] is not on node [%s]",
			                    index, shards[i], nd_node_name(n));
		}
	ctx **made = cm_calloc(MEM, ns + 1, sizeof(*made));
	for (size_t i = 0; i < ns; i++) {
		ctx *c = cm_calloc(MEM, 1, sizeof(*c));
		c->id = new_id();
		c->owner = n;
		c->ix = nd_index_ref(ix);
		c->shard = (int)shards[i];
		c->rd = st_shard_reader(nd_index_shard(ix, (int)shards[i]));
		c->body = cm_strndup(MEM, body, blen);
		c->body_len = blen;
		c->kind = kind;
		c->expires_ms = cm_wall_ms() + keep_ms;
		c->refs = 1;
		pthread_mutex_init(&c->ids_mu, NULL);
		made[i] = c;
	}
	nd_index_release(ix);
	int max = atomic_load(&g_max_scroll);
	size_t open = 0;
	pthread_mutex_lock(&g_lock);
	for (ctx *c = g_ctxs; c; c = c->next)
		open += c->owner == n && c->kind == ND_CTX_SCROLL;
	if (kind == ND_CTX_SCROLL && open + ns > (size_t)max) {
		pthread_mutex_unlock(&g_lock);
		for (size_t i = 0; i < ns; i++)
			ctx_destroy(made[i]);
		cm_free(MEM, made);
		return cm_error_set_type(
		    err, CM_EBUSY, "es_rejected_execution_exception",
		    "Trying to create too many scroll contexts. Must be less than or equal to: "
		    "[%d]. "
		    "This limit can be set by changing the [search.max_open_scroll_context] "
		    "setting.",
		    max);
	}
	for (size_t i = 0; i < ns; i++) {
		made[i]->next = g_ctxs;
		g_ctxs = made[i];
		ids[i] = made[i]->id;
	}
	pthread_mutex_unlock(&g_lock);
	cm_free(MEM, made);
	return CM_OK;
}

/* A referenced live context, or NULL (an expired one is dropped). */
static ctx *
find_ref(nd_node *n, uint64_t id, int64_t keep_ms)
{
	ctx *c, *dead = NULL;
	int64_t now = cm_wall_ms();
	pthread_mutex_lock(&g_lock);
	for (c = g_ctxs; c; c = c->next)
		if (c->id == id && c->owner == n)
			break;
	if (c && c->expires_ms < now) {
		ctx_unlink_locked(c);
		dead = c;
		c = NULL;
	} else if (c) {
		c->refs++;
		if (keep_ms > 0)
			c->expires_ms = now + keep_ms;
	}
	pthread_mutex_unlock(&g_lock);
	if (dead)
		ctx_unref(dead);
	return c;
}

static size_t
free_local(nd_node *n, const uint64_t *ids, size_t nids, bool all, int kind)
{
	ctx *list = NULL;
	size_t k = 0;
	pthread_mutex_lock(&g_lock);
	for (ctx **pp = &g_ctxs; *pp;) {
		ctx *c = *pp;
		bool hit = false;
		if (c->owner == n) {
			if (all)
				hit = kind < 0 || c->kind == kind;
			for (size_t i = 0; !hit && i < nids; i++)
				hit = ids[i] == c->id;
		}
		if (hit) {
			*pp = c->next;
			c->next = list;
			list = c;
			k++;
		} else {
			pp = &c->next;
		}
	}
	pthread_mutex_unlock(&g_lock);
	while (list) {
		ctx *c = list;
		list = c->next;
		ctx_unref(c);
	}
	return k;
}

size_t
nd_ctx_close_node(nd_node *n)
{
	return free_local(n, NULL, 0, true, -1);
}

void
nd_scroll_expire(nd_node *n)
{
	ctx *dead = NULL;
	int64_t now = cm_wall_ms();
	pthread_mutex_lock(&g_lock);
	for (ctx **pp = &g_ctxs; *pp;) {
		ctx *c = *pp;
		if (c->owner == n && c->expires_ms < now) {
			*pp = c->next;
			c->next = dead;
			dead = c;
		} else {
			pp = &c->next;
		}
	}
	pthread_mutex_unlock(&g_lock);
	while (dead) {
		ctx *c = dead;
		dead = c->next;
		ctx_unref(c);
	}
}

/* Whether a request sorts by _doc ascending alone: its cursor is a doc. */
static bool
doc_order(const sr_request *r)
{
	return r->nsort == 1 && r->sort[0].kind == SR_SORT_DOC && !r->sort[0].desc;
}

/* The body without aggregations when aggs (they come with the first page
 * only) and without "slice", which in a context's body is a sub-slice of
 * its shard (ES's split of a shard among several slices: the documents
 * whose _id hashes to *sk modulo *sm); NULL when there is nothing to take
 * out. *sm 0: no sub-slice. */
static char *
strip_body(const char *body, size_t len, bool aggs, int *sk, int *sm)
{
	*sk = *sm = 0;
	if (!aggs && !memmem(body, len, "\"slice\"", 7))
		return NULL;
	cJSON *j = cJSON_ParseWithLength(body, len);
	if (!j)
		return NULL;
	if (aggs) {
		cJSON_DeleteItemFromObjectCaseSensitive(j, "aggs");
		cJSON_DeleteItemFromObjectCaseSensitive(j, "aggregations");
	}
	cJSON *sl = cJSON_GetObjectItemCaseSensitive(j, "slice");
	cJSON *k = cJSON_GetObjectItemCaseSensitive(sl, "id");
	cJSON *m = cJSON_GetObjectItemCaseSensitive(sl, "max");
	if (cJSON_IsNumber(k) && cJSON_IsNumber(m) && m->valueint > 0) {
		*sk = k->valueint;
		*sm = m->valueint;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(j, "slice");
	char *s = cJSON_PrintUnformatted(j);
	char *out = cm_strdup(MEM, s);
	cJSON_free(s);
	cJSON_Delete(j);
	return out;
}

/* body with "slice": {"id": k, "max": m} (a context's sub-slice). */
static char *
with_sub_slice(const char *body, int k, int m)
{
	cJSON *j = cJSON_Parse(body), *sl;
	if (!j)
		return NULL;
	cJSON_DeleteItemFromObjectCaseSensitive(j, "slice");
	sl = cJSON_AddObjectToObject(j, "slice");
	cJSON_AddNumberToObject(sl, "id", k);
	cJSON_AddNumberToObject(sl, "max", m);
	char *s = cJSON_PrintUnformatted(j);
	char *out = cm_strdup(MEM, s);
	cJSON_free(s);
	cJSON_Delete(j);
	return out;
}

/* ES's slice over more slices than shards: slice id goes to shard
 * id % nshards, where it is sub-slice id / nshards of the slices that
 * shard has (max / nshards, one more for the first max % nshards). */
static void
sub_slice(size_t nshards, int id, int max, size_t *shard, int *k, int *m)
{
	*shard = (size_t)id % nshards;
	*k = (int)((size_t)id / nshards);
	*m = (int)((size_t)max / nshards) + ((size_t)id % nshards < (size_t)max % nshards);
}

/* Every live document's _id of c's reader with its hash, read once (in
 * _doc order, 10,000 at a time); c->ids_mu held. */
static cm_err
load_ids(ctx *c, cm_error *err)
{
	static const char body[] =
	    "{\"size\":10000,\"_source\":false,\"sort\":[\"_doc\"],\"track_total_hits\":false}";
	uint64_t after = 0;
	bool more = true;
	cm_err rc = CM_OK;
	while (more && !rc) {
		sr_request req;
		sr_shard_result res;
		sr_request_init(&req);
		memset(&res, 0, sizeof(res));
		rc = nd_cl_request_build(body, sizeof(body) - 1, false, &req, err);
		if (!rc && after) {
			req.search_after = cm_calloc(CM_MEM_SEARCH, 1, sizeof(sr_sort_value));
			req.search_after[0].type = SR_SV_LONG;
			req.search_after[0].l = (int64_t)(after - 1);
			req.nsearch_after = 1;
		}
		if (!rc)
			rc = sr_search_shard(c->rd, 0, &req, &res, err);
		if (!rc) {
			c->ids =
			    cm_realloc(MEM, c->ids, (c->nids + res.nhits + 1) * sizeof(char *));
			c->id_hash = cm_realloc(MEM, c->id_hash,
			                        (c->nids + res.nhits + 1) * sizeof(uint64_t));
			for (size_t i = 0; i < res.nhits; i++) {
				const char *id = res.hits[i].id ? res.hits[i].id : "";
				c->ids[c->nids] = cm_strdup(MEM, id);
				c->id_hash[c->nids++] = XXH3_64bits(id, strlen(id));
			}
			more = res.nhits == 10000;
			if (res.nhits)
				after = (uint64_t)res.hits[res.nhits - 1].doc + 1;
		}
		sr_shard_result_free(&res);
		sr_request_free(&req);
	}
	return rc;
}

/* Narrows req to the documents of sub-slice k of m of c's shard: its
 * query becomes bool {must: query, filter: ids of the sub-slice}. */
static cm_err
narrow_to_sub_slice(ctx *c, sr_request *req, int k, int m, cm_error *err)
{
	cm_err rc = CM_OK;
	pthread_mutex_lock(&c->ids_mu);
	if (!c->ids_ready) {
		rc = load_ids(c, err);
		c->ids_ready = rc == CM_OK;
	}
	sr_query *ids = NULL;
	if (!rc) {
		size_t n = 0;
		for (size_t i = 0; i < c->nids; i++)
			n += c->id_hash[i] % (uint64_t)m == (uint64_t)k;
		ids = sr_query_new(n ? SR_Q_IDS : SR_Q_MATCH_NONE);
		ids->values = cm_calloc(CM_MEM_SEARCH, n + 1, sizeof(char *));
		for (size_t i = 0; i < c->nids; i++)
			if (c->id_hash[i] % (uint64_t)m == (uint64_t)k)
				ids->values[ids->nvalues++] = cm_strdup(CM_MEM_SEARCH, c->ids[i]);
	}
	pthread_mutex_unlock(&c->ids_mu);
	if (rc)
		return rc;
	sr_query *b = sr_query_new(SR_Q_BOOL);
	b->must = cm_calloc(CM_MEM_SEARCH, 1, sizeof(sr_query *));
	b->must[0] = req->query ? req->query : sr_query_new(SR_Q_MATCH_ALL);
	b->nmust = 1;
	b->filter = cm_calloc(CM_MEM_SEARCH, 1, sizeof(sr_query *));
	b->filter[0] = ids;
	b->nfilter = 1;
	req->query = b;
	return CM_OK;
}

typedef struct page_job {
	nd_node *n;
	pr_ctx_page pg;
	int phase;
	uint32_t size;
	int64_t keep_ms;
	bool first;
	const char *body; /* point in time: the search to run; NULL = stored */
	size_t body_len;
	sr_shard_result res;
	char *stored_body; /* the context's body, when asked */
	bool want_body;
	char *index; /* the context's index name */
	sr_request req; /* the page's request: res's aggregations point into it */
	bool has_req;
} page_job;

static void
run_page(void *arg)
{
	page_job *j = arg;
	cm_error e;
	cm_err rc;
	ctx *c = find_ref(j->n, j->pg.id, j->keep_ms);

	cm_error_clear(&e);
	memset(&j->res, 0, sizeof(j->res));
	j->res.shard = j->pg.ordinal;
	if (!c) {
		cm_error_set_type(&j->res.error, CM_ENOTFOUND, "search_context_missing_exception",
		                  "No search context found for id [%llu]",
		                  (unsigned long long)j->pg.id);
		return;
	}
	j->index = cm_strdup(MEM, nd_index_name(c->ix));
	if (j->want_body)
		j->stored_body = cm_strndup(MEM, c->body, c->body_len);
	const char *body = j->body ? j->body : c->body;
	size_t blen = j->body ? j->body_len : c->body_len;
	int sk, sm;
	char *stripped = strip_body(body, blen, !j->first, &sk, &sm);
	if (stripped) {
		body = stripped;
		blen = strlen(stripped);
	}
	sr_request_init(&j->req);
	j->has_req = true;
	rc = nd_cl_request_build(body, blen, false, &j->req, &e);
	if (!rc && sm > 0)
		rc = narrow_to_sub_slice(c, &j->req, sk, sm, &e);
	uint64_t skip = 0, cursor = 0;
	bool by_doc = false;
	if (!rc && !j->body) {
		/* a scroll: the context's cursor decides where the page starts */
		pthread_mutex_lock(&g_lock);
		cursor = c->cursor;
		pthread_mutex_unlock(&g_lock);
		j->req.size = j->phase == 2
		                  ? (uint32_t)(j->pg.take < j->size ? j->pg.take : j->size)
		                  : j->size;
		j->req.track_total_hits = SR_TRACK_ALL;
		j->req.query_phase_only = j->phase == 1;
		if ((by_doc = doc_order(&j->req))) {
			j->req.from = 0;
			if (cursor > 0 && !j->req.nsearch_after) {
				j->req.search_after =
				    cm_calloc(CM_MEM_SEARCH, 1, sizeof(sr_sort_value));
				j->req.search_after[0].type = SR_SV_LONG;
				j->req.search_after[0].l = (int64_t)(cursor - 1);
				j->req.nsearch_after = 1;
			}
		} else if (cursor > UINT32_MAX - (uint64_t)j->size) {
			rc = cm_error_set(&e, CM_ELIMIT, "scroll is too deep for a sorted scroll");
		} else {
			j->req.from = (uint32_t)cursor;
			skip = cursor;
		}
	}
	if (!rc) {
		uint64_t t0 = cm_now_ns();
		rc = sr_search_shard_hl(c->rd, j->pg.ordinal, nd_index_name(c->ix), &j->req, NULL,
		                        nd_index_setting_int(c->ix, "highlight.max_analyzed_offset",
		                                             SR_HL_MAX_ANALYZED_OFFSET),
		                        &j->res, &e);
		nd_index_count_search(c->ix, &j->req, cm_now_ns() - t0, false, true);
	}
	if (rc) {
		sr_shard_result_free(&j->res);
		memset(&j->res, 0, sizeof(j->res));
		if (!e.code)
			cm_error_set(&e, rc, "%s", cm_err_msg(rc));
		j->res.error = e;
	} else if (skip) {
		/* the shard returns its top from+size: drop what earlier pages had */
		size_t drop = skip < j->res.nhits ? (size_t)skip : j->res.nhits;
		for (size_t i = 0; i < drop; i++)
			sr_hit_clear(&j->res.hits[i]);
		memmove(j->res.hits, j->res.hits + drop, (j->res.nhits - drop) * sizeof(sr_hit));
		j->res.nhits -= drop;
	}
	if (!rc && !j->body && j->phase != 1 && j->res.nhits) {
		/* the fetched hits are passed: the next page starts after them */
		pthread_mutex_lock(&g_lock);
		if (c->cursor == cursor)
			c->cursor = by_doc ? (uint64_t)j->res.hits[j->res.nhits - 1].doc + 1
			                   : cursor + j->res.nhits;
		pthread_mutex_unlock(&g_lock);
	}
	j->res.shard = j->pg.ordinal;
	for (size_t i = 0; i < j->res.nhits; i++)
		j->res.hits[i].shard = j->pg.ordinal;
	cm_free(MEM, stripped);
	ctx_unref(c);
}

static cm_pool *
local_pool(nd_node *n)
{
	nd_cluster *cl = nd_cluster_of(n);
	return cl ? cl->spool : n->search_pool;
}

static void
run_pages(nd_node *n, page_job *jobs, size_t nj)
{
	cm_pool_run_all(nj > 1 ? local_pool(n) : NULL, run_page, jobs, sizeof(page_job), nj);
}

static void
page_job_clear(page_job *j)
{
	sr_shard_result_free(&j->res);
	cm_free(MEM, j->stored_body);
	cm_free(MEM, j->index);
	if (j->has_req)
		sr_request_free(&j->req);
}

/* ---- serving the messages of other nodes ---- */

bool
nd_ctx_handles(uint32_t type)
{
	return type == PR_CTX_OPEN || type == PR_CTX_SEARCH || type == PR_CTX_FREE;
}

static void
reply_ack(const cm_error *e, const void *body, size_t len, cm_buf *reply, uint32_t *reply_type)
{
	cm_buf_reset(reply);
	pr_ack_encode(e, body, len, reply);
	*reply_type = e->code ? PR_ERROR : PR_ACK;
}

static void
serve_search(nd_node *n, const uint8_t *p, size_t len, cm_buf *reply, uint32_t *reply_type)
{
	pr_ctx_search s;
	cm_error err;
	cm_error_clear(&err);
	if (pr_ctx_search_decode(p, len, &s, &err)) {
		reply_ack(&err, NULL, 0, reply, reply_type);
		return;
	}
	page_job *jobs = cm_calloc(MEM, s.npages + 1, sizeof(*jobs));
	for (size_t i = 0; i < s.npages; i++)
		jobs[i] = (page_job){.n = n,
		                     .pg = s.pages[i],
		                     .phase = s.phase,
		                     .size = s.size,
		                     .keep_ms = s.keep_alive_ms,
		                     .first = s.first,
		                     .body = s.body,
		                     .body_len = s.body_len,
		                     .want_body = s.want_body && i == 0};
	run_pages(n, jobs, s.npages);
	sr_shard_result **ptrs = cm_calloc(MEM, s.npages + 1, sizeof(*ptrs));
	for (size_t i = 0; i < s.npages; i++) {
		jobs[i].res.index = jobs[i].index;
		jobs[i].res.node = nd_node_name(n);
		ptrs[i] = &jobs[i].res;
	}
	cm_buf results;
	cm_buf_init(&results, MEM);
	pr_shard_results_encode(ptrs, s.npages, &results);
	const char *body = s.npages ? jobs[0].stored_body : NULL;
	cm_buf_reset(reply);
	pr_ctx_reply_encode(results.data, results.len, body, body ? strlen(body) : 0, reply);
	*reply_type = PR_CTX_SEARCH_REPLY;
	cm_buf_free(&results);
	for (size_t i = 0; i < s.npages; i++)
		page_job_clear(&jobs[i]);
	cm_free(MEM, ptrs);
	cm_free(MEM, jobs);
	pr_ctx_search_free(&s);
}

void
nd_ctx_serve(nd_node *n, uint32_t type, const uint8_t *p, size_t len, cm_buf *reply,
             uint32_t *reply_type)
{
	cm_error err;
	cm_error_clear(&err);
	if (type == PR_CTX_OPEN) {
		pr_ctx_open o;
		cm_buf b;
		cm_buf_init(&b, MEM);
		if (!pr_ctx_open_decode(p, len, &o, &err)) {
			uint64_t *ids = cm_calloc(MEM, o.nshards + 1, sizeof(uint64_t));
			if (!open_local(n, o.index, o.shards, o.nshards, o.body, o.body_len,
			                o.keep_alive_ms, o.kind, ids, &err))
				pr_ctx_ids_encode(ids, o.nshards, &b);
			cm_free(MEM, ids);
			pr_ctx_open_free(&o);
		}
		reply_ack(&err, b.data, b.len, reply, reply_type);
		cm_buf_free(&b);
	} else if (type == PR_CTX_SEARCH) {
		serve_search(n, p, len, reply, reply_type);
	} else {
		uint64_t *ids = NULL;
		size_t nids = 0;
		bool all = false;
		char num[24] = "0";
		if (!pr_ctx_free_decode(p, len, &ids, &nids, &all, &err))
			snprintf(num, sizeof(num), "%zu",
			         free_local(n, ids, nids, all, all ? ND_CTX_SCROLL : -1));
		cm_free(MEM, ids);
		reply_ack(&err, num, strlen(num), reply, reply_type);
	}
}

/* ---- the coordinator: calls to the nodes holding contexts ---- */

typedef struct rcall {
	int node; /* cluster node index; self runs in-process */
	cm_buf req, reply;
	cm_err rc;
	uint32_t rtype;
	cm_wait *w;
} rcall;

static void
rcall_done(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	rcall *c = arg;
	c->rc = rc;
	c->rtype = type;
	if (!rc && len)
		cm_buf_put(&c->reply, p, len);
	cm_wait_done(c->w);
}

/* Sends every call to a remote node at once (a node known dead fails at
 * once), then waits for them all; each call ends with rc set. */
static void
rcalls_run(nd_cluster *cl, rcall *calls, size_t nc, uint32_t type)
{
	size_t remote = 0;
	for (size_t i = 0; i < nc; i++)
		if (cl && calls[i].node != cl->self)
			remote++;
	cm_wait *w = cm_wait_create((int)remote);
	uint64_t deadline = cm_now_ns() + CTX_DEADLINE_NS;
	for (size_t i = 0; i < nc; i++) {
		if (!cl || calls[i].node == cl->self)
			continue;
		calls[i].w = w;
		if (!cl_alive(cl, calls[i].node)) {
			calls[i].rc = CM_EUNAVAIL;
			cm_wait_done(w);
			continue;
		}
		nd_peer_call(cl->nodes[calls[i].node].peer, type, calls[i].req.data,
		             calls[i].req.len, deadline, rcall_done, &calls[i]);
	}
	cm_wait_wait(w);
	cm_wait_destroy(w);
	for (size_t i = 0; i < nc; i++)
		if (cl && calls[i].node != cl->self && calls[i].rc == CM_EUNAVAIL)
			cl_mark(cl, calls[i].node, false, 0);
}

/* An Ack's error (PR_ERROR) or body. */
static cm_err
ack_of(rcall *c, cm_error *e, char **body, size_t *blen)
{
	*body = NULL;
	*blen = 0;
	if (c->rc)
		return c->rc;
	if (c->rtype != PR_ACK && c->rtype != PR_ERROR)
		return cm_error_set(e, CM_EPARSE, "unexpected reply type %u", c->rtype);
	pr_ack_decode(c->reply.data, c->reply.len, e, body, blen);
	return e->code;
}

static const char *
self_name(nd_node *n)
{
	nd_cluster *cl = nd_cluster_of(n);
	return cl ? cl->nodes[cl->self].name : nd_node_name(n);
}

static int
node_by_name(nd_node *n, const char *name)
{
	nd_cluster *cl = nd_cluster_of(n);
	if (!cl)
		return strcmp(name, nd_node_name(n)) == 0 ? 0 : -1;
	for (int i = 0; i < cl->nn; i++)
		if (strcmp(cl->nodes[i].name, name) == 0)
			return i;
	return -1;
}

static int
self_index(nd_node *n)
{
	nd_cluster *cl = nd_cluster_of(n);
	return cl ? cl->self : 0;
}

/* ---- context references and ids ---- */

typedef struct cref {
	int node; /* -1: a node this cluster does not know */
	char name[CTX_NODE_NAME];
	uint64_t id;
} cref;

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static char *
b64_encode(const uint8_t *p, size_t n)
{
	char *o = cm_malloc(MEM, (n + 2) / 3 * 4 + 1), *q = o;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		*q++ = B64[v >> 18 & 63];
		*q++ = B64[v >> 12 & 63];
		if (i + 1 < n)
			*q++ = B64[v >> 6 & 63];
		if (i + 2 < n)
			*q++ = B64[v & 63];
	}
	*q = 0;
	return o;
}

static int
b64_val(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '-' || c == '+')
		return 62;
	if (c == '_' || c == '/')
		return 63;
	return -1;
}

/* false on a character outside base64 (url or standard, '=' padding ok). */
static bool
b64_decode(const char *s, cm_buf *out)
{
	uint32_t acc = 0;
	int bits = 0;
	for (; *s && *s != '='; s++) {
		int v = b64_val(*s);
		if (v < 0)
			return false;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			cm_buf_put_u8(out, (uint8_t)(acc >> bits));
		}
	}
	return true;
}

#define ID_MAGIC_SCROLL 0x53 /* 'S' */
#define ID_MAGIC_PIT 0x50    /* 'P' */
#define ID_VERSION 1

static char *
id_encode(int magic, uint32_t size, const cref *refs, size_t n)
{
	cm_buf b;
	cm_buf_init(&b, MEM);
	cm_buf_put_u8(&b, (uint8_t)magic);
	cm_buf_put_u8(&b, ID_VERSION);
	cm_buf_put_varint(&b, size);
	cm_buf_put_varint(&b, n);
	for (size_t i = 0; i < n; i++) {
		cm_buf_put_str(&b, refs[i].name, strlen(refs[i].name));
		cm_buf_put_u64(&b, refs[i].id);
	}
	char *s = b64_encode(b.data, b.len);
	cm_buf_free(&b);
	return s;
}

static cm_err
id_decode(nd_node *n, const char *id, int magic, uint32_t *size, cref **refs, size_t *nrefs,
          cm_error *err)
{
	cm_buf b;
	cm_rd r;
	uint8_t m = 0, v = 0;
	uint64_t sz = 0, cnt = 0;
	cm_buf_init(&b, MEM);
	*refs = NULL;
	*nrefs = 0;
	if (strlen(id) > CTX_MAX_REFS * 120 || !b64_decode(id, &b))
		goto bad;
	cm_rd_init(&r, b.data, b.len);
	if (!cm_rd_u8(&r, &m) || !cm_rd_u8(&r, &v) || m != magic || v != ID_VERSION ||
	    !cm_rd_varint(&r, &sz) || !cm_rd_varint(&r, &cnt) || sz > UINT32_MAX || cnt == 0 ||
	    cnt > CTX_MAX_REFS)
		goto bad;
	*refs = cm_calloc(MEM, (size_t)cnt, sizeof(cref));
	for (size_t i = 0; i < cnt; i++) {
		const char *s;
		size_t sl;
		cref *c = &(*refs)[i];
		if (!cm_rd_str(&r, &s, &sl) || sl == 0 || sl >= CTX_NODE_NAME ||
		    !cm_rd_u64(&r, &c->id))
			goto bad;
		memcpy(c->name, s, sl);
		c->name[sl] = 0;
		c->node = node_by_name(n, c->name);
	}
	if (cm_rd_left(&r))
		goto bad;
	*size = (uint32_t)sz;
	*nrefs = (size_t)cnt;
	cm_buf_free(&b);
	return CM_OK;
bad:
	cm_buf_free(&b);
	cm_free(MEM, *refs);
	*refs = NULL;
	return cm_error_set(err, CM_EINVAL, "Cannot parse %s id",
	                    magic == ID_MAGIC_PIT ? "point in time" : "scroll");
}

/* ---- opening contexts on every shard ---- */

typedef struct oshard {
	nd_index *ix;
	int shard;
	int order[ND_CL_MAX_COPIES];
	int norder, next;
	cm_error last;
} oshard;

/* The copies to try for a shard: this node's first, then live in-sync ones. */
static void
open_order(nd_node *n, nd_index *ix, int shard, oshard *o)
{
	nd_cluster *cl = nd_cluster_of(n);
	o->norder = 0;
	if (!cl) {
		o->order[o->norder++] = 0;
		return;
	}
	int copies[ND_CL_MAX_COPIES], nc = cl_shard_copies(cl, ix, shard, copies),
	                              cand[ND_CL_MAX_COPIES], k = 0;
	cl_route ro;
	bool routed = cl_route_get(cl, nd_index_name(ix), shard, &ro);
	for (int c = 0; c < nc; c++)
		if (!routed || ((ro.in_sync >> copies[c]) & 1))
			cand[k++] = copies[c];
	for (int pass = 0; pass < 3; pass++)
		for (int c = 0; c < k; c++) {
			bool self = cand[c] == cl->self, alive = cl_alive(cl, cand[c]);
			if ((pass == 0 && self) || (pass == 1 && !self && alive) ||
			    (pass == 2 && !self && !alive))
				o->order[o->norder++] = cand[c];
		}
}

static void free_refs(nd_node *n, const cref *refs, size_t nrefs, size_t *freed);

/* Opens a context on one copy of every shard of ixs (of a slice: the
 * shards whose number modulo slice_max is slice_id); refs[k] is the k-th
 * in the request's order (the merge's shard number). */
static cm_err
open_all(nd_node *n, nd_index **ixs, size_t nix, const char *body, int64_t keep_ms, int kind,
         int slice_id, int slice_max, cref **refs_out, size_t *nrefs, cm_error *err)
{
	nd_cluster *cl = nd_cluster_of(n);
	size_t total = 0, k = 0, all = 0;
	cm_err rc = CM_OK;
	for (size_t i = 0; i < nix; i++)
		for (int s = 0; s < nd_index_nshards(ixs[i]); s++, all++)
			total += slice_max <= 0 || (int)(all % (size_t)slice_max) == slice_id;
	if (total == 0 || total > CTX_MAX_REFS)
		return cm_error_set(err, CM_EINVAL,
		                    "a search context needs 1 to %d shards, not %zu", CTX_MAX_REFS,
		                    total);
	oshard *os = cm_calloc(MEM, total, sizeof(*os));
	cref *refs = cm_calloc(MEM, total, sizeof(*refs));
	bool *done = cm_calloc(MEM, total, sizeof(bool));
	all = 0;
	for (size_t i = 0; i < nix; i++)
		for (int s = 0; s < nd_index_nshards(ixs[i]); s++, all++) {
			if (slice_max > 0 && (int)(all % (size_t)slice_max) != slice_id)
				continue;
			os[k].ix = ixs[i];
			os[k].shard = s;
			open_order(n, ixs[i], s, &os[k]);
			refs[k++].node = -1;
		}
	for (int round = 0; round <= ND_CL_MAX_COPIES && !rc; round++) {
		/* one call per (node, index) of the shards still to open */
		rcall *calls = cm_calloc(MEM, total, sizeof(*calls));
		size_t **members = cm_calloc(MEM, total, sizeof(*members));
		size_t *nmem = cm_calloc(MEM, total, sizeof(size_t)), nc = 0;
		bool pending = false;
		for (size_t q = 0; q < total; q++) {
			if (done[q])
				continue;
			if (os[q].next >= os[q].norder) {
				if (!os[q].last.code)
					cm_error_set_type(&os[q].last, CM_EUNAVAIL,
					                  "no_shard_available_action_exception",
					                  "shard [%s][%d]: no copy is available",
					                  nd_index_name(os[q].ix), os[q].shard);
				*err = os[q].last;
				rc = os[q].last.code;
				break;
			}
			pending = true;
			int node = os[q].order[os[q].next];
			size_t g = 0;
			while (g < nc &&
			       !(calls[g].node == node && os[members[g][0]].ix == os[q].ix))
				g++;
			if (g == nc) {
				calls[nc].node = node;
				cm_buf_init(&calls[nc].req, MEM);
				cm_buf_init(&calls[nc].reply, MEM);
				members[nc] = cm_calloc(MEM, total, sizeof(size_t));
				nc++;
			}
			members[g][nmem[g]++] = q;
		}
		if (!rc && pending) {
			for (size_t g = 0; g < nc; g++) {
				uint32_t *sh = cm_calloc(MEM, nmem[g] + 1, sizeof(uint32_t));
				for (size_t m = 0; m < nmem[g]; m++)
					sh[m] = (uint32_t)os[members[g][m]].shard;
				pr_ctx_open o = {(char *)nd_index_name(os[members[g][0]].ix),
				                 sh,
				                 nmem[g],
				                 (char *)body,
				                 strlen(body),
				                 keep_ms,
				                 kind};
				pr_ctx_open_encode(&o, &calls[g].req);
				cm_free(MEM, sh);
			}
			rcalls_run(cl, calls, nc, PR_CTX_OPEN);
			for (size_t g = 0; g < nc; g++) {
				uint64_t *ids = NULL;
				size_t nids = 0;
				cm_error e;
				cm_error_clear(&e);
				cm_err crc;
				if (!cl || calls[g].node == cl->self) {
					ids = cm_calloc(MEM, nmem[g] + 1, sizeof(uint64_t));
					uint32_t *sh =
					    cm_calloc(MEM, nmem[g] + 1, sizeof(uint32_t));
					for (size_t m = 0; m < nmem[g]; m++)
						sh[m] = (uint32_t)os[members[g][m]].shard;
					crc = open_local(n, nd_index_name(os[members[g][0]].ix), sh,
					                 nmem[g], body, strlen(body), keep_ms, kind,
					                 ids, &e);
					nids = crc ? 0 : nmem[g];
					cm_free(MEM, sh);
				} else {
					char *ab;
					size_t al;
					crc = ack_of(&calls[g], &e, &ab, &al);
					if (!crc)
						crc = pr_ctx_ids_decode(ab, al, &ids, &nids, &e);
					if (!crc && nids != nmem[g])
						crc = cm_error_set(
						    &e, CM_EPARSE,
						    "%zu contexts opened for %zu shards", nids,
						    nmem[g]);
					cm_free(MEM, ab);
				}
				for (size_t m = 0; m < nmem[g]; m++) {
					size_t q = members[g][m];
					if (!crc) {
						done[q] = true;
						refs[q].node = calls[g].node;
						refs[q].id = ids[m];
						snprintf(refs[q].name, sizeof(refs[q].name), "%s",
						         cl ? cl->nodes[calls[g].node].name
						            : nd_node_name(n));
					} else if (crc == CM_EUNAVAIL || crc == CM_ETIMEDOUT ||
					           crc == CM_ENOINDEX) {
						/* another copy may open it */
						cm_error_clear(&os[q].last);
						if (e.code)
							os[q].last = e;
						else
							cm_error_set(
							    &os[q].last, crc,
							    "shard [%s][%d] on node [%s]: %s",
							    nd_index_name(os[q].ix), os[q].shard,
							    cl ? cl->nodes[calls[g].node].name : "",
							    cm_err_msg(crc));
						os[q].next++;
					} else if (!rc) {
						/* the limit, a bad body: every copy would say the
						 * same */
						if (!e.code)
							cm_error_set(&e, crc, "%s",
							             cm_err_msg(crc));
						*err = e;
						rc = crc;
					}
				}
				cm_free(MEM, ids);
			}
		}
		for (size_t g = 0; g < nc; g++) {
			cm_buf_free(&calls[g].req);
			cm_buf_free(&calls[g].reply);
			cm_free(MEM, members[g]);
		}
		cm_free(MEM, calls);
		cm_free(MEM, members);
		cm_free(MEM, nmem);
		if (!pending)
			break;
	}
	if (rc) {
		/* never half-open: free what did open */
		size_t opened = 0;
		for (size_t q = 0; q < total; q++)
			if (done[q])
				refs[opened++] = refs[q];
		free_refs(n, refs, opened, NULL);
		cm_free(MEM, refs);
		refs = NULL;
	}
	cm_free(MEM, os);
	cm_free(MEM, done);
	*refs_out = refs;
	*nrefs = rc ? 0 : total;
	return rc;
}

/* Groups refs by node: calls[g] carries the refs listed in members[g]. */
typedef struct groups {
	rcall *calls;
	size_t **members, *nmem, nc;
} groups;

static void
group_refs(nd_node *n, const cref *refs, size_t nrefs, groups *G)
{
	G->calls = cm_calloc(MEM, nrefs + 1, sizeof(rcall));
	G->members = cm_calloc(MEM, nrefs + 1, sizeof(size_t *));
	G->nmem = cm_calloc(MEM, nrefs + 1, sizeof(size_t));
	G->nc = 0;
	(void)n;
	for (size_t i = 0; i < nrefs; i++) {
		size_t g = 0;
		while (g < G->nc && G->calls[g].node != refs[i].node)
			g++;
		if (g == G->nc) {
			G->calls[g].node = refs[i].node;
			cm_buf_init(&G->calls[g].req, MEM);
			cm_buf_init(&G->calls[g].reply, MEM);
			G->members[g] = cm_calloc(MEM, nrefs + 1, sizeof(size_t));
			G->nc++;
		}
		G->members[g][G->nmem[g]++] = i;
	}
}

static void
groups_free(groups *G)
{
	for (size_t g = 0; g < G->nc; g++) {
		cm_buf_free(&G->calls[g].req);
		cm_buf_free(&G->calls[g].reply);
		cm_free(MEM, G->members[g]);
	}
	cm_free(MEM, G->calls);
	cm_free(MEM, G->members);
	cm_free(MEM, G->nmem);
}

static bool
is_local(nd_node *n, int node)
{
	return node == self_index(n);
}

static void
free_refs(nd_node *n, const cref *refs, size_t nrefs, size_t *freed)
{
	nd_cluster *cl = nd_cluster_of(n);
	groups G;
	size_t k = 0;
	group_refs(n, refs, nrefs, &G);
	/* refs on unknown nodes are skipped: nothing to free there */
	rcall *calls = cm_calloc(MEM, G.nc + 1, sizeof(rcall));
	size_t nc = 0;
	for (size_t g = 0; g < G.nc; g++) {
		uint64_t *ids = cm_calloc(MEM, G.nmem[g] + 1, sizeof(uint64_t));
		for (size_t m = 0; m < G.nmem[g]; m++)
			ids[m] = refs[G.members[g][m]].id;
		if (G.calls[g].node < 0) {
		} else if (is_local(n, G.calls[g].node)) {
			k += free_local(n, ids, G.nmem[g], false, -1);
		} else {
			calls[nc].node = G.calls[g].node;
			cm_buf_init(&calls[nc].req, MEM);
			cm_buf_init(&calls[nc].reply, MEM);
			pr_ctx_free_encode(ids, G.nmem[g], false, &calls[nc].req);
			nc++;
		}
		cm_free(MEM, ids);
	}
	if (nc)
		rcalls_run(cl, calls, nc, PR_CTX_FREE);
	for (size_t i = 0; i < nc; i++) {
		cm_error e;
		char *b;
		size_t bl;
		cm_error_clear(&e);
		if (!ack_of(&calls[i], &e, &b, &bl) && b)
			k += strtoull(b, NULL, 10);
		cm_free(MEM, b);
		cm_buf_free(&calls[i].req);
		cm_buf_free(&calls[i].reply);
	}
	cm_free(MEM, calls);
	groups_free(&G);
	if (freed)
		*freed = k;
}

/* ---- pages ---- */

typedef struct page_set {
	sr_shard_result *res; /* [nrefs], by ref */
	pr_strings **strings;
	size_t nstrings;
	char **names; /* index names of local results */
	size_t nnames;
	char *body; /* the stored body (want_body) */
} page_set;

static void
page_set_free(page_set *P, size_t nrefs)
{
	for (size_t i = 0; i < nrefs; i++)
		sr_shard_result_free(&P->res[i]);
	cm_free(MEM, P->res);
	for (size_t i = 0; i < P->nstrings; i++)
		pr_strings_free(P->strings[i]);
	cm_free(MEM, P->strings);
	for (size_t i = 0; i < P->nnames; i++)
		cm_free(MEM, P->names[i]);
	cm_free(MEM, P->names);
	cm_free(MEM, P->body);
}

/* A local page's aggregation state points into the request its page job
 * parsed, freed with the job: before that, it is carried over to aggs (the
 * merge's request) through its wire form, as a remote one is decoded. */
static void
rebind_aggs(sr_shard_result *r, const sr_agg *aggs)
{
	sr_agg_state *s = r->aggs, *d = NULL;
	cm_buf b;
	cm_error e;
	if (!s)
		return;
	r->aggs = NULL;
	cm_buf_init(&b, MEM);
	cm_error_clear(&e);
	if (aggs && !sr_agg_state_encode(s, &b) &&
	    !sr_agg_state_decode(aggs, b.data, b.len, &d, &e))
		r->aggs = d;
	else if (aggs && !r->error.code)
		cm_error_set(&r->error, CM_EINTERNAL, "cannot carry a shard's aggregations over");
	cm_buf_free(&b);
	sr_agg_state_free(s);
}

/* Runs one page of every ref (its ordinal is its position), wherever it
 * lives; every result comes back, a failed one with error set. */
static void
run_all_pages(nd_node *n, const cref *refs, size_t nrefs, const uint64_t *takes, int phase,
              uint32_t size, int64_t keep_ms, bool first, const char *body, const sr_agg *aggs,
              bool want_body, page_set *P)
{
	nd_cluster *cl = nd_cluster_of(n);
	groups G;
	memset(P, 0, sizeof(*P));
	P->res = cm_calloc(MEM, nrefs + 1, sizeof(sr_shard_result));
	P->strings = cm_calloc(MEM, nrefs + 1, sizeof(pr_strings *));
	P->names = cm_calloc(MEM, nrefs + 1,
	                     sizeof(char *)); /* phase 2 asks only the contexts that give hits */
	size_t *sel = cm_calloc(MEM, nrefs + 1, sizeof(size_t)), nsel = 0;
	cref *picked = cm_calloc(MEM, nrefs + 1, sizeof(cref));
	for (size_t q = 0; q < nrefs; q++) {
		P->res[q].shard = (uint32_t)q;
		if (!takes || takes[q]) {
			sel[nsel] = q;
			picked[nsel++] = refs[q];
		}
	}
	group_refs(n, picked, nsel, &G);
	page_job *local = NULL;
	size_t nlocal = 0, lg = SIZE_MAX;
	for (size_t g = 0; g < G.nc; g++) {
		int node = G.calls[g].node;
		if (node < 0)
			continue;
		if (is_local(n, node)) {
			lg = g;
			local = cm_calloc(MEM, G.nmem[g] + 1, sizeof(*local));
			for (size_t m = 0; m < G.nmem[g]; m++) {
				size_t q = sel[G.members[g][m]];
				local[m] = (page_job){
				    .n = n,
				    .pg = {refs[q].id, takes ? takes[q] : 0, (uint32_t)q},
				    .phase = phase,
				    .size = size,
				    .keep_ms = keep_ms,
				    .first = first,
				    .body = body,
				    .body_len = body ? strlen(body) : 0,
				    .want_body = want_body && m == 0};
			}
			nlocal = G.nmem[g];
			continue;
		}
		pr_ctx_page *pages = cm_calloc(MEM, G.nmem[g] + 1, sizeof(*pages));
		for (size_t m = 0; m < G.nmem[g]; m++) {
			size_t q = sel[G.members[g][m]];
			pages[m] = (pr_ctx_page){refs[q].id, takes ? takes[q] : 0, (uint32_t)q};
		}
		pr_ctx_search s = {pages, G.nmem[g], size,         keep_ms,
		                   first, want_body, (char *)body, body ? strlen(body) : 0,
		                   phase};
		pr_ctx_search_encode(&s, &G.calls[g].req);
		cm_free(MEM, pages);
	}
	/* remote calls go out first; this node's pages run meanwhile */
	rcall **remote = cm_calloc(MEM, G.nc + 1, sizeof(rcall *));
	size_t *rg = cm_calloc(MEM, G.nc + 1, sizeof(size_t)), nr = 0;
	for (size_t g = 0; g < G.nc; g++)
		if (G.calls[g].node >= 0 && g != lg) {
			remote[nr] = &G.calls[g];
			rg[nr++] = g;
		}
	if (nr && cl) {
		cm_wait *w = cm_wait_create((int)nr);
		uint64_t deadline = cm_now_ns() + CTX_DEADLINE_NS;
		for (size_t i = 0; i < nr; i++) {
			rcall *c = remote[i];
			c->w = w;
			if (!cl_alive(cl, c->node)) {
				c->rc = CM_EUNAVAIL;
				cm_wait_done(w);
				continue;
			}
			nd_peer_call(cl->nodes[c->node].peer, PR_CTX_SEARCH, c->req.data,
			             c->req.len, deadline, rcall_done, c);
		}
		if (nlocal)
			run_pages(n, local, nlocal);
		cm_wait_wait(w);
		cm_wait_destroy(w);
		for (size_t i = 0; i < nr; i++)
			if (remote[i]->rc == CM_EUNAVAIL)
				cl_mark(cl, remote[i]->node, false, 0);
	} else if (nlocal) {
		run_pages(n, local, nlocal);
	}
	/* local results */ for (size_t m = 0; m < nlocal; m++) {
		size_t q = sel[G.members[lg][m]];
		P->res[q] = local[m].res;
		memset(&local[m].res, 0, sizeof(local[m].res));
		rebind_aggs(&P->res[q], aggs);
		if (local[m].index) {
			P->names[P->nnames++] = local[m].index;
			P->res[q].index = local[m].index;
			local[m].index = NULL;
		}
		P->res[q].node = self_name(n);
		if (local[m].stored_body && !P->body) {
			P->body = local[m].stored_body;
			local[m].stored_body = NULL;
		}
		page_job_clear(&local[m]);
	}
	cm_free(MEM, local);
	/* remote results */
	for (size_t i = 0; i < nr; i++) {
		size_t g = rg[i];
		rcall *c = remote[i];
		cm_error e;
		cm_error_clear(&e);
		cm_err rc = c->rc;
		sr_shard_result *res = NULL;
		size_t nres = 0;
		if (rc == CM_OK && c->rtype == PR_ERROR) {
			char *b = NULL;
			size_t bl;
			pr_ack_decode(c->reply.data, c->reply.len, &e, &b, &bl);
			cm_free(MEM, b);
			rc = e.code ? e.code : CM_EINTERNAL;
		} else if (rc == CM_OK && c->rtype != PR_CTX_SEARCH_REPLY) {
			rc = cm_error_set(&e, CM_EPARSE, "unexpected reply type %u", c->rtype);
		} else if (rc == CM_OK) {
			uint8_t *rb = NULL;
			char *sb = NULL;
			size_t rl, sl;
			pr_strings *strs = NULL;
			rc = pr_ctx_reply_decode(c->reply.data, c->reply.len, &rb, &rl, &sb, &sl,
			                         &e);
			if (!rc)
				rc = pr_shard_results_decode(rb, rl, aggs, &res, &nres, &strs, &e);
			if (!rc && nres != G.nmem[g])
				rc = cm_error_set(&e, CM_EPARSE, "%zu results for %zu contexts",
				                  nres, G.nmem[g]);
			if (strs)
				P->strings[P->nstrings++] = strs;
			if (sb && sl && !P->body) {
				P->body = sb;
				sb = NULL;
			}
			cm_free(MEM, rb);
			cm_free(MEM, sb);
		}
		for (size_t m = 0; m < G.nmem[g]; m++) {
			size_t q = sel[G.members[g][m]];
			if (!rc) {
				P->res[q] = res[m];
				P->res[q].shard = (uint32_t)q;
				for (size_t h = 0; h < P->res[q].nhits; h++)
					P->res[q].hits[h].shard = (uint32_t)q;
			} else {
				memset(&P->res[q], 0, sizeof(P->res[q]));
				P->res[q].shard = (uint32_t)q;
				if (rc == CM_EUNAVAIL || rc == CM_ETIMEDOUT)
					cm_error_set_type(
					    &P->res[q].error, CM_ENOTFOUND,
					    "search_context_missing_exception",
					    "No search context found for id [%llu]: node [%s] "
					    "%s",
					    (unsigned long long)refs[q].id, refs[q].name,
					    rc == CM_EUNAVAIL ? "is not reachable"
					                      : "did not answer in time");
				else
					P->res[q].error = e.code ? e : (cm_error){.code = rc};
			}
		}
		if (rc && res)
			for (size_t m = 0; m < nres; m++)
				sr_shard_result_free(&res[m]);
		cm_free(MEM, res);
	} /* refs on nodes this cluster does not know */
	for (size_t i = 0; i < nsel; i++) {
		size_t q = sel[i];
		if (refs[q].node < 0) {
			P->res[q].shard = (uint32_t)q;
			cm_error_set_type(
			    &P->res[q].error, CM_ENOTFOUND, "search_context_missing_exception",
			    "No search context found for id [%llu]: no node [%s] in the "
			    "cluster",
			    (unsigned long long)refs[q].id, refs[q].name);
		}
	}
	cm_free(MEM, sel);
	cm_free(MEM, picked);
	cm_free(MEM, remote);
	cm_free(MEM, rg);
	groups_free(&G);
}

/* The first failed result (a page fails as a whole: a scroll that
 * silently skipped a shard would lose documents). */
static const cm_error *
page_failure(const page_set *P, size_t nrefs)
{
	for (size_t i = 0; i < nrefs; i++)
		if (P->res[i].error.code)
			return &P->res[i].error;
	return NULL;
}

/* Merges results (taking their contents) and renders the page. */
static cm_err
merge_render(const sr_request *req, sr_shard_result *res, size_t nres, uint64_t t0, cm_buf *out,
             cm_error *err)
{
	sr_merger *m = sr_merger_create(req, nres);
	for (size_t i = 0; i < nres; i++)
		sr_merger_add(m, &res[i]);
	cm_error rerr;
	cm_error_clear(&rerr);
	cm_err rc = sr_merger_reduce(m, &rerr);
	if (rc)
		*err = rerr;
	else
		sr_merger_render(m, (cm_now_ns() - t0) / 1000000, out);
	sr_merger_destroy(m);
	return rc;
}

/* One scroll page over refs into out. req_in: the merge's request, NULL
 * to build it from the body the contexts send back. */
static cm_err
scroll_page(nd_node *n, const cref *refs, size_t nrefs, uint32_t size, int64_t keep_ms, bool first,
            const sr_request *req_in, cm_buf *out, cm_error *err)
{
	uint64_t t0 = cm_now_ns();
	page_set P1, P2;
	sr_request own;
	const sr_request *req = req_in;
	const cm_error *f;
	cm_err rc = CM_OK;
	bool single = nrefs == 1;
	uint64_t *takes = NULL;
	sr_shard_result *meta = NULL;

	sr_request_init(&own);
	memset(&P2, 0, sizeof(P2));
	run_all_pages(n, refs, nrefs, NULL, single ? 0 : 1, size, keep_ms, first, NULL,
	              req_in ? req_in->aggs : NULL, !req_in, &P1);
	if ((f = page_failure(&P1, nrefs))) {
		*err = *f;
		rc = f->code;
		goto done;
	}
	if (!req) {
		if (!P1.body) {
			rc = cm_error_set(err, CM_EINTERNAL, "no context sent its search back");
			goto done;
		}
		int sk, sm;
		char *stripped = strip_body(P1.body, strlen(P1.body), true, &sk, &sm);
		const char *b = stripped ? stripped : P1.body;
		rc = nd_cl_request_build(b, strlen(b), false, &own, err);
		cm_free(MEM, stripped);
		if (rc)
			goto done;
		own.from = 0;
		own.size = size;
		own.track_total_hits = SR_TRACK_ALL;
		for (size_t i = 0; i < own.nsearch_after; i++)
			sr_sort_value_clear(&own.search_after[i]);
		own.nsearch_after = 0;
		req = &own;
	}
	if (single) {
		rc = merge_render(req, P1.res, nrefs, t0, out, err);
		goto done;
	}
	/* the query phase merged: how many hits each context gives */
	meta = cm_calloc(MEM, nrefs, sizeof(*meta));
	for (size_t q = 0; q < nrefs; q++) {
		meta[q] = P1.res[q];
		meta[q].hits = NULL;
		meta[q].nhits = 0;
		P1.res[q].aggs = NULL;
	}
	takes = cm_calloc(MEM, nrefs, sizeof(uint64_t));
	sr_merger *m = sr_merger_create(req, nrefs);
	for (size_t q = 0; q < nrefs; q++)
		sr_merger_add(m, &P1.res[q]);
	for (size_t i = 0, len = sr_merger_page_len(m); i < len; i++) {
		uint32_t shard, doc;
		sr_merger_page_hit(m, i, &shard, &doc);
		if (shard < nrefs)
			takes[shard]++;
	}
	sr_merger_destroy(m);
	/* the fetch phase: those hits with their documents; the cursors move */
	run_all_pages(n, refs, nrefs, takes, 2, size, keep_ms, false, NULL, NULL, false, &P2);
	if ((f = page_failure(&P2, nrefs))) {
		*err = *f;
		rc = f->code;
		goto done;
	}
	for (size_t q = 0; q < nrefs; q++) {
		meta[q].hits = P2.res[q].hits;
		meta[q].nhits = P2.res[q].nhits;
		P2.res[q].hits = NULL;
		P2.res[q].nhits = 0;
	}
	rc = merge_render(req, meta, nrefs, t0, out, err);
done:
	if (meta) {
		for (size_t q = 0; q < nrefs; q++)
			sr_shard_result_free(&meta[q]);
		cm_free(MEM, meta);
	}
	cm_free(MEM, takes);
	page_set_free(&P1, nrefs);
	if (P2.res)
		page_set_free(&P2, nrefs);
	sr_request_free(&own);
	return rc;
}

/* ---- scroll ---- */

cm_err
nd_scroll_open(nd_node *n, nd_index **ixs, size_t nix, const char *body, int64_t keep_ms,
               int slice_id, int slice_max, bool typed_keys, cm_buf *out, char **id_out,
               cm_error *err)
{
	sr_request req;
	cref *refs = NULL;
	size_t nrefs = 0;
	cm_err rc;

	char *sliced = NULL;
	*id_out = NULL;
	sr_request_init(&req);
	if ((rc = nd_cl_request_build(body, strlen(body), typed_keys, &req,
	                              err)))
		goto done;
	if (req.size == 0) {
		rc =
		    cm_error_set(err, CM_EVALIDATE,
		                 "Validation Failed: 1: [size] cannot be [0] in a scroll context;");
		goto done;
	}
	req.from = 0;
	req.track_total_hits = SR_TRACK_ALL;
	size_t nshards = 0;
	for (size_t i = 0; i < nix; i++)
		nshards += (size_t)nd_index_nshards(ixs[i]);
	if (slice_max > 0 && nshards > 0 && (size_t)slice_max > nshards) {
		/* more slices than shards: one shard, a sub-slice of its docs */
		size_t q;
		int k, m;
		sub_slice(nshards, slice_id, slice_max, &q, &k, &m);
		if (m > 1 && !(sliced = with_sub_slice(body, k, m))) {
			rc = cm_error_set(err, CM_EPARSE, "malformed search body");
			goto done;
		}
		slice_id = (int)q;
		slice_max = (int)nshards;
	}
	if ((rc = open_all(n, ixs, nix, sliced ? sliced : body, keep_ms, ND_CTX_SCROLL, slice_id,
	                   slice_max, &refs, &nrefs, err)))
		goto done;
	rc = scroll_page(n, refs, nrefs, req.size, 0, true, &req, out, err);
	if (rc)
		free_refs(n, refs, nrefs, NULL);
	else
		*id_out = id_encode(ID_MAGIC_SCROLL, req.size, refs, nrefs);
done:
	cm_free(MEM, sliced);
	cm_free(MEM, refs);
	sr_request_free(&req);
	return rc;
}

cm_err
nd_scroll_next(nd_node *n, const char *id, int64_t keep_ms, cm_buf *out, char **next_id,
               cm_error *err)
{
	cref *refs;
	size_t nrefs;
	uint32_t size;
	cm_err rc;

	*next_id = NULL;
	if ((rc = id_decode(n, id, ID_MAGIC_SCROLL, &size, &refs, &nrefs, err)))
		return rc;
	rc = scroll_page(n, refs, nrefs, size, keep_ms, false, NULL, out, err);
	if (!rc)
		*next_id = cm_strdup(MEM, id);
	cm_free(MEM, refs);
	return rc;
}

cm_err
nd_scroll_clear(nd_node *n, const char *id, size_t *nctx, size_t *freed, cm_error *err)
{
	cref *refs;
	size_t nrefs;
	uint32_t size;
	cm_err rc = id_decode(n, id, ID_MAGIC_SCROLL, &size, &refs, &nrefs, err);
	if (rc)
		return rc;
	free_refs(n, refs, nrefs, freed);
	*nctx = nrefs;
	cm_free(MEM, refs);
	return CM_OK;
}

size_t
nd_scroll_clear_all(nd_node *n)
{
	nd_cluster *cl = nd_cluster_of(n);
	size_t k = free_local(n, NULL, 0, true, ND_CTX_SCROLL);
	if (!cl)
		return k;
	int nn = cl->nn; /* counted once: on etcd a node may join while this runs */
	rcall *calls = cm_calloc(MEM, (size_t)nn + 1, sizeof(rcall));
	size_t nc = 0;
	for (int i = 0; i < nn; i++) {
		if (i == cl->self || !cl->nodes[i].data)
			continue;
		calls[nc].node = i;
		cm_buf_init(&calls[nc].req, MEM);
		cm_buf_init(&calls[nc].reply, MEM);
		pr_ctx_free_encode(NULL, 0, true, &calls[nc].req);
		nc++;
	}
	rcalls_run(cl, calls, nc, PR_CTX_FREE);
	for (size_t i = 0; i < nc; i++) {
		cm_error e;
		char *b;
		size_t bl;
		cm_error_clear(&e);
		if (!ack_of(&calls[i], &e, &b, &bl) && b)
			k += strtoull(b, NULL, 10);
		cm_free(MEM, b);
		cm_buf_free(&calls[i].req);
		cm_buf_free(&calls[i].reply);
	}
	cm_free(MEM, calls);
	return k;
}

/* ---- point in time ---- */

cm_err
nd_pit_open(nd_node *n, nd_index **ixs, size_t nix, int64_t keep_ms, char **id, cm_error *err)
{
	cref *refs = NULL;
	size_t nrefs = 0;
	*id = NULL;
	cm_err rc = open_all(n, ixs, nix, "{}", keep_ms, ND_CTX_PIT, 0, 0, &refs, &nrefs, err);
	if (!rc)
		*id = id_encode(ID_MAGIC_PIT, 0, refs, nrefs);
	cm_free(MEM, refs);
	return rc;
}

cm_err
nd_pit_search(nd_node *n, const char *id, int64_t keep_ms, const char *body, int slice_id,
              int slice_max, bool typed_keys, cm_buf *out, cm_error *err)
{
	cref *refs;
	size_t nrefs;
	uint32_t unused;
	uint64_t t0 = cm_now_ns();
	sr_request req;
	page_set P;
	cm_err rc;

	sr_request_init(&req);
	if ((rc = nd_cl_request_build(body, strlen(body), typed_keys, &req,
	                              err))) {
		sr_request_free(&req);
		return rc;
	}
	if ((rc = id_decode(n, id, ID_MAGIC_PIT, &unused, &refs, &nrefs, err))) {
		sr_request_free(&req);
		return rc;
	}
	char *sliced = NULL;
	if (slice_max > 0 && nrefs > 0 && (size_t)slice_max > nrefs) {
		/* more slices than shards: one context, a sub-slice of its docs */
		size_t q;
		int k, m;
		sub_slice(nrefs, slice_id, slice_max, &q, &k, &m);
		refs[0] = refs[q];
		nrefs = 1;
		if (m > 1 && !(sliced = with_sub_slice(body, k, m))) {
			cm_free(MEM, refs);
			sr_request_free(&req);
			return cm_error_set(err, CM_EPARSE, "malformed search body");
		}
		if (sliced)
			body = sliced;
	} else if (slice_max > 0) {
		/* a slice: the contexts whose shard number modulo max is its id */
		size_t k = 0;
		for (size_t q = 0; q < nrefs; q++)
			if ((int)(q % (size_t)slice_max) == slice_id)
				refs[k++] = refs[q];
		nrefs = k;
	}
	/* every shard runs the whole request (from + size) on its context */
	run_all_pages(n, refs, nrefs, NULL, 0, req.size, keep_ms, true, body, req.aggs, false, &P);
	const cm_error *f = page_failure(&P, nrefs);
	if (f) {
		*err = *f;
		rc = f->code;
	} else {
		rc = merge_render(&req, P.res, nrefs, t0, out, err);
	}
	page_set_free(&P, nrefs);
	cm_free(MEM, refs);
	cm_free(MEM, sliced);
	sr_request_free(&req);
	return rc;
}

cm_err
nd_pit_close(nd_node *n, const char *id, size_t *nctx, size_t *freed, cm_error *err)
{
	cref *refs;
	size_t nrefs;
	uint32_t unused;
	cm_err rc = id_decode(n, id, ID_MAGIC_PIT, &unused, &refs, &nrefs, err);
	if (rc)
		return rc;
	free_refs(n, refs, nrefs, freed);
	*nctx = nrefs;
	cm_free(MEM, refs);
	return CM_OK;
}

/* ---- the coordinator's upcall on every node at once ---- */

int
nd_upcall_all(nd_node *n, const char *kind, const bool *which, cJSON **out, cm_error *errs, int cap)
{
	nd_cluster *cl = nd_cluster_of(n);
	int nn = cl ? cl->nn : 0;
	if (!cl || nn > cap)
		return -1;
	rcall *calls = cm_calloc(MEM, (size_t)nn + 1, sizeof(*calls));
	size_t nc = 0;
	for (int i = 0; i < nn; i++) {
		out[i] = NULL;
		cm_error_clear(&errs[i]);
		if (which && !which[i])
			continue;
		calls[nc].node = i;
		cm_buf_init(&calls[nc].req, MEM);
		cm_buf_init(&calls[nc].reply, MEM);
		pr_node_view_req_encode(kind, &calls[nc].req);
		nc++;
	}
	rcalls_run(cl, calls, nc, PR_NODE_VIEW); /* every remote call in flight at once */
	for (size_t i = 0; i < nc; i++) {
		rcall *c = &calls[i];
		int node = c->node;
		if (node == cl->self) {
			out[node] = cl->info ? cl->info(cl->info_arg, kind) : NULL;
			if (!out[node])
				cm_error_set(&errs[node], CM_EINTERNAL, "no answer from this node");
		} else {
			char *rb = NULL, *view = NULL;
			size_t rl = 0, vl = 0;
			if (ack_of(c, &errs[node], &rb, &rl)) {
				if (!errs[node].code)
					cm_error_set(&errs[node], c->rc,
					             "node [%s] did not answer (%s)",
					             cl->nodes[node].name, cm_err_msg(c->rc));
			} else if (pr_node_view_reply_decode(rb, rl, &view, &vl, &errs[node]) ||
			           !(out[node] = cJSON_ParseWithLength(view, vl))) {
				cm_error_set(&errs[node], CM_EPARSE, "malformed reply from [%s]",
				             cl->nodes[node].name);
			}
			cm_free(MEM, view);
			cm_free(MEM, rb);
		}
		cm_buf_free(&c->req);
		cm_buf_free(&c->reply);
	}
	cm_free(MEM, calls);
	return nn;
}
