/* Cluster writes (primary then replicas), reads (one copy per shard,
 * local in-process, else the fastest live copy, retried within the
 * deadline), gets, and the cluster views (health, _cat). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../proto/pr.h"
#include "../search/sr_agg.h"
#include "nd_cluster_private.h"
#include "nd_private.h"
#include "nd_rank.h"
#include "nd_snap.h"
#include "nd_stats.h"

#define MEM CM_MEM_NODE
#define DEFAULT_DEADLINE_NS 30000000000ull

/* ================= writes ================= */

/* Applies ops on this node's copy. As primary (replica = false) the shard
 * assigns sequence numbers and the replication path (nd_cluster_rep.c)
 * forwards them to every in-sync copy before this returns. prepare: parse documents
 * under the local mapping first (dynamic fields) when the coordinator was
 * another node. */
static cm_err apply_copy(nd_cluster *cl, nd_index *ix, int shard, const st_op *ops, size_t n,
                         st_op_result *res, bool replica, bool prepare, uint64_t deadline_ns);

static cm_err
apply_copy(nd_cluster *cl, nd_index *ix, int shard, const st_op *ops, size_t n, st_op_result *res,
           bool replica, bool prepare, uint64_t deadline_ns)
{
	st_op *ok = cm_calloc(MEM, n + 1, sizeof(st_op));
	size_t *map = cm_calloc(MEM, n + 1, sizeof(size_t));
	st_op_result *ores = cm_calloc(MEM, n + 1, sizeof(st_op_result));
	size_t k = 0;
	cm_err rc = CM_OK;

	for (size_t i = 0; i < n; i++) {
		memset(&res[i], 0, sizeof(res[i]));
		if (prepare && ops[i].type == ST_OP_INDEX) {
			cm_error e;
			cm_error_clear(&e);
			if (nd_index_prepare_doc(ix, ops[i].id, ops[i].id_len, ops[i].source,
			                         ops[i].source_len, &e)) {
				res[i].err = e.code ? e.code : CM_EMAPPING;
				snprintf(res[i].reason, sizeof(res[i].reason), "%.250s", e.reason);
				continue;
			}
		}
		map[k] = i;
		ok[k++] = ops[i];
	}
	if (k) {
		rc = replica ? nd_index_apply(ix, shard, ok, k, ores)
		             : rp_primary_apply(cl->rp, ix, nd_index_name(ix), nd_index_uuid(ix),
		                                shard, ok, k, ores, deadline_ns);
		for (size_t j = 0; j < k; j++) {
			res[map[j]] = ores[j];
			if (rc && !ores[j].err) {
				res[map[j]].err = rc;
				snprintf(res[map[j]].reason, sizeof(res[map[j]].reason), "%s",
				         cm_err_msg(rc));
			}
		}
	}
	cm_free(MEM, ok);
	cm_free(MEM, map);
	cm_free(MEM, ores);
	return rc;
}

cm_err
cl_apply_replica(nd_cluster *cl, nd_index *ix, int shard, const st_op *ops, size_t n,
                 st_op_result *res)
{
	return apply_copy(cl, ix, shard, ops, n, res, true, true, 0);
}

void
cl_serve_bulk(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
              uint32_t *reply_type)
{
	pr_bulk_req rq;
	cm_error err;
	nd_index *ix = NULL;
	st_op_result *res = NULL;

	cm_error_clear(&err);
	*reply_type = PR_BULK_REPLY;
	if (pr_bulk_req_decode(p, len, &rq, &err)) {
		pr_bulk_reply_encode(NULL, 0, CM_EPARSE, err.reason, reply);
		return;
	}
	if (!(ix = nd_index_get(cl->node, rq.index))) {
		char why[300];
		snprintf(why, sizeof(why), "no such index [%s] on node [%s]", rq.index,
		         cl->nodes[cl->self].name);
		pr_bulk_reply_encode(NULL, 0, CM_ENOINDEX, why, reply);
	} else if ((int)rq.shard >= nd_index_nshards(ix)) {
		pr_bulk_reply_encode(NULL, 0, CM_EINVAL, "no such shard", reply);
	} else if (rq.replica) {
		rp_serve_replica(cl->rp, ix, nd_index_uuid(ix), &rq, reply);
	} else {
		res = cm_calloc(MEM, rq.nops + 1, sizeof(st_op_result));
		cm_err rc =
		    apply_copy(cl, ix, (int)rq.shard, rq.ops, rq.nops, res, rq.replica, true,
		               deadline_ns ? deadline_ns : cm_now_ns() + DEFAULT_DEADLINE_NS);
		pr_bulk_reply_encode(res, rq.nops, rc, rc ? cm_err_msg(rc) : NULL, reply);
	}
	if (ix)
		nd_index_release(ix);
	cm_free(MEM, res);
	pr_bulk_req_free(&rq);
}

typedef struct wr_job {
	nd_cluster *cl;
	nd_batch *b;
	int node;
	cm_wait *w;
	uint64_t deadline_ns;
} wr_job;

static void
fail_batch(wr_job *j, cm_err rc, const char *why)
{
	for (size_t i = 0; i < j->b->n; i++) {
		j->b->res[i].err = CM_EUNAVAIL;
		snprintf(j->b->res[i].reason, sizeof(j->b->res[i].reason),
		         "primary shard [%s][%d] is not available: node [%s] %s (%s)",
		         nd_index_name(j->b->ix), j->b->shard, j->cl->nodes[j->node].name, why,
		         cm_err_msg(rc));
	}
}

static void
wr_local(void *arg)
{
	wr_job *j = arg;
	j->b->rc = apply_copy(j->cl, j->b->ix, j->b->shard, j->b->ops, j->b->n, j->b->res, false,
	                      false, j->deadline_ns);
	cm_wait_done(j->w);
}

static void
wr_done(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	wr_job *j = arg;
	cm_error e;
	(void)type;
	cm_error_clear(&e);
	if (!rc) {
		cm_err r = pr_bulk_reply_decode(p, len, j->b->res, j->b->n, &e);
		if (r && e.code == CM_ENOINDEX)
			fail_batch(j, r, "does not have the index");
		else if (r)
			j->b->rc = e.code ? e.code : r;
	} else {
		if (rc == CM_EUNAVAIL)
			cl_mark(j->cl, j->node, false, 0);
		fail_batch(j, rc, rc == CM_EINVAL ? "refused the request" : "cannot be reached");
	}
	cm_wait_done(j->w);
}

/* A batch's bound: its own (the request's ?timeout), or dflt. */
static uint64_t
batch_deadline(const nd_batch *b, uint64_t dflt)
{
	return b->deadline_ns ? b->deadline_ns : dflt;
}

/* One round: every batch to its primary as the routes have it now. */
static void
apply_round(nd_cluster *cl, nd_batch *b, size_t nb)
{
	wr_job *jobs = cm_calloc(MEM, nb + 1, sizeof(wr_job));
	cm_wait *w = cm_wait_create((int)nb);
	uint64_t dflt = cm_now_ns() + DEFAULT_DEADLINE_NS;
	cm_buf *bufs = cm_calloc(MEM, nb + 1, sizeof(cm_buf));

	for (size_t i = 0; i < nb; i++) {
		uint64_t deadline = batch_deadline(&b[i], dflt);
		cl_route ro;
		int primary =
		    cl_route_get(cl, nd_index_name(b[i].ix), b[i].shard, &ro) && ro.primary >= 0
		        ? ro.primary
		        : cl_copy_node(cl, b[i].shard, 0);
		jobs[i] = (wr_job){cl, &b[i], primary, w, deadline};
		b[i].rc = CM_OK;
		if (primary == cl->self) {
			cm_pool_submit(cl->spool, wr_local, &jobs[i]);
			continue;
		}
		if (!cl_alive(cl, primary)) {
			/* Fail fast: until the master promotes a replica, waiting on an
			 * unreachable primary only holds the client. */
			fail_batch(&jobs[i], CM_EUNAVAIL, "is unreachable");
			cm_wait_done(w);
			continue;
		}
		pr_bulk_req rq = {.index = (char *)nd_index_name(b[i].ix),
		                  .index_uuid = (char *)"",
		                  .shard = (uint32_t)b[i].shard,
		                  .ops = (st_op *)b[i].ops,
		                  .nops = b[i].n,
		                  .replica = false};
		cm_buf_init(&bufs[i], MEM);
		pr_bulk_req_encode(&rq, &bufs[i]);
		nd_peer_call(cl->nodes[primary].peer, PR_BULK, bufs[i].data, bufs[i].len, deadline,
		             wr_done, &jobs[i]);
	}
	cm_wait_wait(w);
	cm_wait_destroy(w);
	for (size_t i = 0; i < nb; i++)
		if (bufs[i].data)
			cm_buf_free(&bufs[i]);
	cm_free(MEM, bufs);
	cm_free(MEM, jobs);
}

/* Items a primary refused because it no longer leads the shard (CM_EMOVED:
 * applied nowhere) go again to the new primary once the routes name it,
 * as Elasticsearch retries a write whose primary relocated; bounded by
 * each batch's deadline. */
static void
retry_moved(nd_cluster *cl, nd_batch *b, size_t nb)
{
	uint64_t dflt = cm_now_ns() + DEFAULT_DEADLINE_NS;
	for (int round = 0; round < 200; round++) {
		size_t nr = 0, nops = 0;
		for (size_t i = 0; i < nb; i++) {
			size_t m = 0;
			for (size_t k = 0; k < b[i].n; k++)
				m += b[i].res[k].err == CM_EMOVED;
			uint64_t dl = batch_deadline(&b[i], dflt);
			if (m && cm_now_ns() + 50000000ull < dl) {
				nr++;
				nops += m;
			}
		}
		if (!nr)
			return;
		usleep(20000); /* the new primary's route is on its way */
		nd_batch *rb = cm_calloc(MEM, nr + 1, sizeof(nd_batch));
		st_op *ops = cm_calloc(MEM, nops + 1, sizeof(st_op));
		st_op_result *res = cm_calloc(MEM, nops + 1, sizeof(st_op_result));
		size_t *from = cm_calloc(MEM, nops + 1, sizeof(size_t)), *owner = cm_calloc(
		                                                          MEM, nops + 1, sizeof(size_t));
		size_t r = 0, o = 0;
		for (size_t i = 0; i < nb; i++) {
			uint64_t dl = batch_deadline(&b[i], dflt);
			size_t start = o;
			for (size_t k = 0; k < b[i].n; k++)
				if (b[i].res[k].err == CM_EMOVED && cm_now_ns() + 50000000ull < dl) {
					ops[o] = b[i].ops[k];
					from[o] = k;
					owner[o] = i;
					o++;
				}
			if (o == start)
				continue;
			rb[r] = (nd_batch){.ix = b[i].ix,
			                   .shard = b[i].shard,
			                   .ops = &ops[start],
			                   .n = o - start,
			                   .res = &res[start],
			                   .deadline_ns = dl};
			r++;
		}
		apply_round(cl, rb, r);
		for (size_t q = 0; q < o; q++)
			b[owner[q]].res[from[q]] = res[q];
		for (size_t q = 0; q < r; q++)
			if (rb[q].rc)
				for (size_t i = 0; i < nb; i++)
					if (b[i].ix == rb[q].ix && b[i].shard == rb[q].shard)
						b[i].rc = rb[q].rc;
		cm_free(MEM, rb);
		cm_free(MEM, ops);
		cm_free(MEM, res);
		cm_free(MEM, from);
		cm_free(MEM, owner);
	}
}

void
nd_cluster_apply_batches(nd_cluster *cl, nd_batch *b, size_t nb)
{
	apply_round(cl, b, nb);
	retry_moved(cl, b, nb);
	for (size_t i = 0; i < nb; i++) {
		bool seen = false;
		for (size_t k = 0; k < i && !seen; k++)
			seen = b[k].ix == b[i].ix;
		if (!seen)
			cl_publish_mapping(cl, b[i].ix);
	}
}

/* ================= reads ================= */

cm_err
nd_cl_request_build(const char *body, size_t len, const char *params, sr_request *req,
                    cm_error *err)
{
	cJSON *j = len ? cJSON_ParseWithLength(body, len) : cJSON_CreateObject();
	cJSON *pj = params && *params ? cJSON_Parse(params) : NULL, *v;
	cm_err rc;

	if (!j || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		cJSON_Delete(pj);
		return cm_error_set(err, CM_EPARSE, "malformed search body");
	}
	/* URL parameters that shape the request itself override the body, as
	 * on a solo node (the coordinator folds the rest into the body). */
	if (cJSON_IsObject(pj))
		cJSON_ArrayForEach(v, pj)
		{
			if (strcmp(v->string, "from") && strcmp(v->string, "size") &&
			    strcmp(v->string, "track_total_hits"))
				continue;
			cJSON_DeleteItemFromObjectCaseSensitive(j, v->string);
			cJSON_AddItemToObject(j, v->string, cJSON_Duplicate(v, true));
		}
	rc = sr_request_from_json(j, req, err);
	if (!rc && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pj, "typed_keys")))
		req->typed_keys = true;
	if (!rc && req->suggest)
		sr_suggest_set_typed_keys(req->suggest, req->typed_keys);
	cJSON_Delete(j);
	cJSON_Delete(pj);
	return rc;
}

/* Runs shards of one index here, in order, into res (one per shard). */
typedef struct local_shard {
	nd_index *ix;
	int shard;
	uint32_t ordinal;
	const sr_request *req;
	sr_shard_result res;
	uint64_t took_ns; /* service time, reported to the coordinator */
	const char *node_id; /* for profile ids */
	st_reader *reader;   /* the shard's, held by the caller across the run */
} local_shard;

static void
run_local_shard(void *arg)
{
	local_shard *t = arg;
	uint64_t t0 = cm_now_ns();
	st_reader *r = t->reader;
	cm_error e;
	cm_error_clear(&e);
	memset(&t->res, 0, sizeof(t->res));
	cm_err rc = sr_search_shard_in(r, t->ordinal, nd_index_name(t->ix), t->req, &t->res, &e);
	if (!rc)
		sr_profile_set_id(&t->res, t->node_id, nd_index_name(t->ix), t->shard);
	if (rc) {
		sr_shard_result_free(&t->res);
		memset(&t->res, 0, sizeof(t->res));
		if (!e.code)
			cm_error_set(&e, rc, "%s", cm_err_msg(rc));
		t->res.error = e;
	}
	t->res.shard = t->ordinal;
	atomic_fetch_add((_Atomic uint64_t *)&nd_index_counters(t->ix)->query_total, 1);
	t->took_ns = cm_now_ns() - t0;
}

/* Whether the routing places a copy of the shard on this node (one moving
 * away included), or places none anywhere (a static cluster's formula). */
static bool
holds_copy(nd_cluster *cl, const char *index, int shard)
{
	cl_route ro;
	if (!cl_route_get(cl, index, shard, &ro) || ro.ncopies == 0 ||
	    ro.relocating_from == cl->self)
		return true;
	for (int c = 0; c < ro.ncopies; c++)
		if (ro.copies[c] == cl->self)
			return true;
	return false;
}

void
cl_serve_search(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
                uint32_t *reply_type)
{
	pr_search_req rq;
	cm_error err;
	sr_request req;
	nd_index *ix = NULL;
	local_shard *ts = NULL;
	sr_shard_result **ptrs = NULL;
	nd_rank_run *run = NULL;
	const _Atomic _Bool *cancel = NULL;
	pr_reply_meta *meta = NULL;
	(void)deadline_ns;

	nd_rank_serving(1);
	cm_error_clear(&err);
	sr_request_init(&req);
	*reply_type = PR_SEARCH_REPLY;
	if (pr_search_req_decode(p, len, &rq, &err))
		goto fail;
	/* A hedged request: its coordinator may call it off (nd_rank.c). */
	run = nd_rank_begin(rq.cancel_id, &cancel);
	if (!(ix = nd_index_get(cl->node, rq.index))) {
		cm_error_set(&err, CM_ENOINDEX, "no such index [%s] on node [%s]", rq.index,
		             cl->nodes[cl->self].name);
		goto fail;
	}
	if (nd_cl_request_build(rq.body, rq.body_len, rq.params, &req, &err))
		goto fail;
	req.cancel = cancel;
	ts = cm_calloc(MEM, rq.nshards + 1, sizeof(local_shard));
	ptrs = cm_calloc(MEM, rq.nshards + 1, sizeof(*ptrs));
	/* The request-wide shard numbers, so ties break as on the coordinator. */
	cJSON *pj = rq.params ? cJSON_Parse(rq.params) : NULL;
	cJSON *ords = cJSON_GetObjectItemCaseSensitive(pj, "ordinals");
	bool use_ords = cJSON_IsArray(ords) && (size_t)cJSON_GetArraySize(ords) == rq.nshards;
	uint32_t max_ord = 0;
	for (size_t i = 0; i < rq.nshards; i++) {
		if ((int)rq.shards[i] >= nd_index_nshards(ix)) {
			cJSON_Delete(pj);
			cm_error_set(&err, CM_EINVAL, "no shard [%u] in [%s]", rq.shards[i],
			             rq.index);
			goto fail;
		}
		if (!holds_copy(cl, rq.index, (int)rq.shards[i])) {
			/* the coordinator's routing is older than ours: it tries
			 * the shard's next copy */
			cJSON_Delete(pj);
			cm_error_set(&err, CM_EUNAVAIL, "node [%s] holds no copy of [%s][%u]",
			             cl->nodes[cl->self].name, rq.index, rq.shards[i]);
			goto fail;
		}
		cJSON *o = use_ords ? cJSON_GetArrayItem(ords, (int)i) : NULL;
		uint32_t ord = cJSON_IsNumber(o) && o->valuedouble >= 0 && o->valuedouble < 1e6
		                   ? (uint32_t)o->valuedouble
		                   : rq.shards[i];
		if (ord > max_ord)
			max_ord = ord;
		ts[i] = (local_shard){.ix = ix,
		                      .shard = (int)rq.shards[i],
		                      .ordinal = ord,
		                      .req = &req,
		                      .node_id = cl->nodes[cl->self].name};
	}
	cJSON_Delete(pj);
	/* Several shards (per-node mode) run side by side on this node when
	 * idle search threads are there and the shards are big enough to pay
	 * for waking them; else one after another on this thread. */
	uint64_t docs = 0;
	for (size_t i = 0; i < rq.nshards; i++) {
		ts[i].reader = st_shard_reader(nd_index_shard(ix, ts[i].shard));
		docs += st_reader_doc_count(ts[i].reader);
	}
	cm_pool_run_some(cl->spool, run_local_shard, ts, sizeof(local_shard), rq.nshards,
	                 nd_search_helpers(docs, rq.nshards));
	for (size_t i = 0; i < rq.nshards; i++)
		st_reader_release(ts[i].reader);
	/* Service time per shard and this node's load, for the coordinator's
	 * ranking (C3). */
	meta = cm_calloc(MEM, 1, sizeof(*meta));
	for (size_t i = 0; i < rq.nshards && i < PR_MAX_SERVICE; i++)
		meta->service_us[meta->nservice++] = ts[i].took_ns / 1000;
	meta->queue = nd_rank_serving(0) - 1;
	if (rq.per_node && rq.nshards > 1 && use_ords) {
		/* Per-node mode: merged here into one result standing for the
		 * successful shards, followed by one result per failed shard. */
		sr_merger *m = sr_merger_create(&req, (size_t)max_ord + 1);
		sr_shard_result merged, *fails;
		size_t nf, k = 0;
		sr_merger_set_index(m, rq.index);
		for (size_t i = 0; i < rq.nshards; i++) {
			ts[i].res.index = nd_index_name(ix);
			ts[i].res.node = cl->nodes[cl->self].name;
			sr_merger_add(m, &ts[i].res);
		}
		sr_merger_take(m, ts[0].ordinal, &merged);
		nf = sr_merger_failed(m);
		fails = cm_calloc(MEM, nf + 1, sizeof(*fails));
		if (merged.shards_merged > 0)
			ptrs[k++] = &merged;
		for (size_t i = 0; i < nf; i++) {
			uint32_t sh;
			const char *fi, *fn;
			const cm_error *why;
			sr_merger_failure(m, i, &sh, &fi, &fn, &why);
			fails[i].shard = sh;
			fails[i].error = *why;
			ptrs[k++] = &fails[i];
		}
		pr_shard_results_encode_meta(ptrs, k, meta, reply);
		sr_shard_result_free(&merged);
		cm_free(MEM, fails);
		sr_merger_destroy(m);
	} else {
		for (size_t i = 0; i < rq.nshards; i++)
			ptrs[i] = &ts[i].res;
		pr_shard_results_encode_meta(ptrs, rq.nshards, meta, reply);
	}
	for (size_t i = 0; i < rq.nshards; i++)
		sr_shard_result_free(&ts[i].res);
	goto done;
fail:
	*reply_type = PR_ERROR;
	cm_buf_reset(reply);
	pr_ack_encode(&err, NULL, 0, reply);
done:
	nd_rank_end(run);
	nd_rank_serving(-1);
	cm_free(MEM, meta);
	cm_free(MEM, ts);
	cm_free(MEM, ptrs);
	if (ix)
		nd_index_release(ix);
	sr_request_free(&req);
	pr_search_req_free(&rq);
}

/* ---- the coordinator's fan-out ---- */

/* A shard job is claimed exactly once (done, under S->lock) by the first
 * attempt that answers it; a hedged job has two attempts in flight, and
 * the loser's reply, which may come after the search returned, only
 * updates the figures. search_st is counted (refs): the caller, every
 * message in flight and every pending hedge timer hold it. */

typedef struct search_st search_st;

#define MAX_ATT (ND_CL_MAX_COPIES + 2)

typedef struct attempt {
	int node;
	uint64_t id; /* its message's cancel id */
	uint64_t t_sent;
	bool live, hedge;
} attempt;

typedef struct shard_job {
	search_st *S;
	nd_index *ix;
	const char *ixname;
	int shard;
	uint32_t ordinal;
	int order[ND_CL_MAX_COPIES];
	int norder, next; /* next copy to try (S->lock once sent) */
	int node;         /* node of the current attempt; at the end, the one that answered */
	uint64_t t_sent;
	uint64_t took_ns; /* the answering attempt, for the page and ?timings */
	bool ok;
	bool done; /* claimed (S->lock) */
	bool hedged, hedge_won;
	int inflight; /* remote attempts outstanding (S->lock) */
	attempt att[MAX_ATT];
	int natt;
	cm_error last;
	local_shard local;
} shard_job;

typedef struct node_group {
	search_st *S;
	int node;
	shard_job **jobs;
	size_t n;
	uint64_t t_sent, id;
	bool hedge;
	cm_buf msg;
} node_group;

struct search_st {
	nd_cluster *cl;
	sr_request req;
	sr_merger *m;
	pthread_mutex_t lock;
	cm_wait *w;
	char *body, *params; /* owned: a hedge may be sent from the timer thread */
	uint64_t deadline_ns;
	pr_strings **strings;
	size_t nstrings, capstrings;
	size_t failed;
	bool timed_out; /* a shard failed on the deadline */
	cm_error first_err;
	shard_job *jobs;
	size_t njobs;
	char **names; /* owned copies of the index names, one per index */
	size_t nnames;
	int refs;
	nd_tail_cfg cfg;
	bool hedge; /* this search may send hedges */
};

/* A hedge timer's argument: the jobs sent in one message. */
typedef struct hedge_arg {
	search_st *S;
	int node;
	uint64_t id;
	size_t n;
	shard_job *jobs[];
} hedge_arg;

static void dispatch(shard_job *j);

static void
S_unref(search_st *S)
{
	pthread_mutex_lock(&S->lock);
	bool last = --S->refs == 0;
	pthread_mutex_unlock(&S->lock);
	if (!last)
		return;
	sr_merger_destroy(S->m);
	for (size_t i = 0; i < S->nstrings; i++)
		pr_strings_free(S->strings[i]);
	cm_free(MEM, S->strings);
	cm_free(MEM, S->jobs);
	for (size_t i = 0; i < S->nnames; i++)
		cm_free(MEM, S->names[i]);
	cm_free(MEM, S->names);
	sr_request_free(&S->req);
	cm_free(MEM, S->body);
	cm_free(MEM, S->params);
	pthread_mutex_destroy(&S->lock);
	cm_free(MEM, S);
}

static void
cancel_reply(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	(void)arg, (void)rc, (void)type, (void)p, (void)len;
}

/* Tells node to stop the request with cancel id `id` (fire and forget). */
static void
send_cancel(nd_cluster *cl, int node, uint64_t id)
{
	cm_buf b;
	cm_buf_init(&b, MEM);
	pr_search_cancel_encode(&id, 1, &b);
	nd_peer_call(cl->nodes[node].peer, PR_SEARCH_CANCEL, b.data, b.len,
	             cm_now_ns() + 1000000000ull, cancel_reply, NULL);
	cm_buf_free(&b);
}

/* Locked: the attempt of j whose message had id is over; NULL if none. */
static attempt *
att_end_locked(shard_job *j, uint64_t id)
{
	for (int i = 0; i < j->natt; i++)
		if (j->att[i].id == id && j->att[i].live) {
			j->att[i].live = false;
			j->inflight--;
			return &j->att[i];
		}
	return NULL;
}

/* Locked: whether some job not yet done still waits on message id. */
static bool
id_needed_locked(search_st *S, uint64_t id)
{
	for (size_t q = 0; q < S->njobs; q++) {
		shard_job *o = &S->jobs[q];
		if (o->done)
			continue;
		for (int i = 0; i < o->natt; i++)
			if (o->att[i].live && o->att[i].id == id)
				return true;
	}
	return false;
}

/* Claims jobs[0..n) for the attempt with id won (0: local or a final
 * failure), all or none: false when another attempt got one of them
 * first (a result merged on a data node cannot be split). The losers'
 * messages that no other job waits for are cancelled on their nodes. */
static bool
claim_jobs(shard_job *const *jobs, size_t n, uint64_t won)
{
	search_st *S = jobs[0]->S;
	size_t cap = n * MAX_ATT, nc = 0;
	int *cn = cm_calloc(MEM, cap + 1, sizeof(int));
	uint64_t *cid = cm_calloc(MEM, cap + 1, sizeof(uint64_t));
	uint64_t now = cm_now_ns();
	bool ok = true;
	pthread_mutex_lock(&S->lock);
	for (size_t q = 0; q < n; q++)
		ok = ok && !jobs[q]->done;
	for (size_t q = 0; ok && q < n; q++) {
		shard_job *j = jobs[q];
		j->done = true;
		for (int i = 0; i < j->natt; i++) {
			attempt *a = &j->att[i];
			if (a->id == won && won) {
				j->node = a->node;
				j->t_sent = a->t_sent;
				if (a->hedge) {
					j->hedge_won = true;
					nd_rank_count_won();
				}
			}
		}
	}
	for (size_t q = 0; ok && q < n; q++) {
		shard_job *j = jobs[q];
		for (int i = 0; i < j->natt; i++) {
			attempt *a = &j->att[i];
			if (!a->live || a->id == won)
				continue;
			/* the loser took at least this long: its hedge delay knows */
			nd_rank_copy cp = {j->ixname, nd_index_uuid(j->ix), j->shard};
			nd_rank_censored(a->node, &cp, now - a->t_sent);
			bool dup = false;
			for (size_t k = 0; k < nc && !dup; k++)
				dup = cid[k] == a->id;
			if (!dup && nc < cap && !id_needed_locked(S, a->id)) {
				cn[nc] = a->node;
				cid[nc++] = a->id;
			}
		}
	}
	pthread_mutex_unlock(&S->lock);
	for (size_t i = 0; i < nc; i++)
		send_cancel(S->cl, cn[i], cid[i]);
	if (nc)
		nd_rank_count_cancelled(nc);
	cm_free(MEM, cn);
	cm_free(MEM, cid);
	return ok;
}

static bool
claim(shard_job *j, uint64_t won)
{
	return claim_jobs(&j, 1, won);
}

/* The job's result, once claimed. */
static void
job_finish_ok(shard_job *j, sr_shard_result *res, pr_strings *strings)
{
	search_st *S = j->S;
	j->took_ns = cm_now_ns() - j->t_sent;
	j->ok = !res->error.code;
	if (j->ok)
		nd_stats_shard(nd_index_name(j->ix), j->node, j->node == S->cl->self, j->took_ns);
	res->shard = j->ordinal;
	/* Ties break by the request-wide shard number, as on a solo node. */
	for (size_t i = 0; i < res->nhits; i++)
		res->hits[i].shard = j->ordinal;
	res->index = nd_index_name(j->ix);
	res->node = S->cl->nodes[j->node].name;
	pthread_mutex_lock(&S->lock);
	if (strings) {
		if (S->nstrings == S->capstrings) {
			S->capstrings = S->capstrings ? 2 * S->capstrings : 8;
			S->strings =
			    cm_realloc(MEM, S->strings, S->capstrings * sizeof(*S->strings));
		}
		S->strings[S->nstrings++] = strings;
	}
	if (res->error.code) {
		S->failed++;
		if (res->error.code == CM_ETIMEDOUT)
			S->timed_out = true;
		if (!S->first_err.code)
			S->first_err = res->error;
		sr_merger_fail_at(S->m, j->ordinal, nd_index_name(j->ix), res->node, &res->error);
		sr_shard_result_free(res);
	} else {
		sr_merger_add(S->m, res);
	}
	pthread_mutex_unlock(&S->lock);
	cm_wait_done(S->w);
}

/* An attempt of j on node failed; another copy is tried when no other
 * attempt is still out. */
static void
job_failed(shard_job *j, int node, cm_err rc, const char *why)
{
	search_st *S = j->S;
	if (rc == CM_EUNAVAIL)
		cl_mark(S->cl, node, false, 0);
	pthread_mutex_lock(&S->lock);
	bool retry = !j->done && j->inflight == 0;
	if (!j->done) {
		cm_error_clear(&j->last);
		cm_error_set(&j->last, rc, "shard [%s][%d] on node [%s]: %s", j->ixname, j->shard,
		             S->cl->nodes[node].name, why);
		j->node = node;
	}
	pthread_mutex_unlock(&S->lock);
	if (retry)
		dispatch(j);
}

static void
run_job_local(void *arg)
{
	shard_job *j = arg;
	j->local = (local_shard){.ix = j->ix,
	                         .shard = j->shard,
	                         .ordinal = j->ordinal,
	                         .req = &j->S->req,
	                         .node_id = j->S->cl->nodes[j->S->cl->self].name,
	                         .reader = st_shard_reader(nd_index_shard(j->ix, j->shard))};
	run_local_shard(&j->local);
	st_reader_release(j->local.reader);
	if (claim(j, 0))
		job_finish_ok(j, &j->local.res, NULL);
	else
		sr_shard_result_free(&j->local.res);
}

static void hedge_fire(void *arg);

static void
strings_keep_locked(search_st *S, pr_strings *strings)
{
	if (S->nstrings == S->capstrings) {
		S->capstrings = S->capstrings ? 2 * S->capstrings : 8;
		S->strings = cm_realloc(MEM, S->strings, S->capstrings * sizeof(*S->strings));
	}
	S->strings[S->nstrings++] = strings;
}

static void
group_free(node_group *g)
{
	search_st *S = g->S;
	cm_buf_free(&g->msg);
	cm_free(MEM, g->jobs);
	cm_free(MEM, g);
	S_unref(S);
}

/* The figures of the group's copies: its reply (or failure) came. */
static void
group_done(node_group *g, bool ok, uint64_t took, const uint64_t *service_us, size_t nservice,
           uint32_t queue, bool censored)
{
	int shards[g->n + 1];
	for (size_t i = 0; i < g->n; i++)
		shards[i] = g->jobs[i]->shard;
	nd_rank_done(g->node, g->jobs[0]->ixname, nd_index_uuid(g->jobs[0]->ix), shards, g->n, ok,
	             took, service_us, nservice, queue, censored);
}

static void
group_reply(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	node_group *g = arg;
	search_st *S = g->S;
	sr_shard_result *res = NULL;
	size_t nres = 0, nlive = 0;
	pr_strings *strings = NULL;
	pr_reply_meta *meta = cm_calloc(MEM, 1, sizeof(*meta));
	bool live[g->n + 1], censored = false;
	cm_error e;

	uint64_t took = cm_now_ns() - g->t_sent;
	pthread_mutex_lock(&S->lock);
	for (size_t i = 0; i < g->n; i++) {
		attempt *a = att_end_locked(g->jobs[i], g->id);
		live[i] = !g->jobs[i]->done;
		nlive += live[i];
		censored = censored || !a;
	}
	pthread_mutex_unlock(&S->lock);
	cm_error_clear(&e);
	if (!rc && type == PR_ERROR) {
		char *b = NULL;
		size_t bl;
		pr_ack_decode(p, len, &e, &b, &bl);
		cm_free(MEM, b);
		rc = e.code ? e.code : CM_EINTERNAL;
	} else if (!rc && nlive == 0) {
		/* a lost race: the figures only (the payload is not decoded) */
		group_done(g, true, took, NULL, 0, 0, true);
		cm_free(MEM, meta);
		group_free(g);
		return;
	} else if (!rc &&
	           (rc = pr_shard_results_decode_meta(p, len, S->req.aggs, &res, &nres, &strings,
	                                              meta, &e)) == CM_OK &&
	           nres > 0 && g->n > 1 && (res[0].shards_merged > 0 || res[0].error.code)) {
		/* Merged on the node: one result for the successful shards, then
		 * one per failed shard. */
		size_t covered = 0;
		for (size_t i = 0; i < nres; i++)
			covered += res[i].error.code ? 1 : res[i].shards_merged;
		if (covered != g->n) {
			rc = cm_error_set(&e, CM_EPARSE, "merged results cover %zu of %zu shards",
			                  covered, g->n);
		} else if (nlive < g->n) {
			/* Some of these shards were answered by a hedge: the merged
			 * result cannot be split, so the rest wait for their hedges
			 * (or try another copy). */
			group_done(g, true, took, meta->service_us, meta->nservice, meta->queue,
			           censored);
			cl_mark(S->cl, g->node, true, took);
			for (size_t i = 0; i < nres; i++)
				sr_shard_result_free(&res[i]);
			cm_free(MEM, res);
			if (strings)
				pr_strings_free(strings);
			for (size_t q = 0; q < g->n; q++)
				if (live[q])
					job_failed(
					    g->jobs[q], g->node, CM_ETIMEDOUT,
					    "answered with shards already merged from a hedge");
			cm_free(MEM, meta);
			group_free(g);
			return;
		} else if (!claim_jobs(g->jobs, g->n, g->id)) {
			/* a hedge answered one of them meanwhile: as above */
			group_done(g, true, took, meta->service_us, meta->nservice, meta->queue,
			           censored);
			for (size_t i = 0; i < nres; i++)
				sr_shard_result_free(&res[i]);
			cm_free(MEM, res);
			if (strings)
				pr_strings_free(strings);
			for (size_t q = 0; q < g->n; q++)
				job_failed(g->jobs[q], g->node, CM_ETIMEDOUT,
				           "answered with shards already merged from a hedge");
			cm_free(MEM, meta);
			group_free(g);
			return;
		} else {
			group_done(g, true, took, meta->service_us, meta->nservice, meta->queue,
			           censored);
			cl_mark(S->cl, g->node, true, took);
			for (size_t q = 0; q < g->n; q++) {
				g->jobs[q]->took_ns = took;
				g->jobs[q]->ok = true; /* a failed shard is finished below */
				nd_stats_shard(nd_index_name(g->jobs[q]->ix), g->node, false, took);
			}
			for (size_t i = 0; i < nres; i++) {
				if (res[i].error.code) {
					shard_job *j = NULL;
					for (size_t q = 0; q < g->n && !j; q++)
						if (g->jobs[q]->ordinal == res[i].shard)
							j = g->jobs[q];
					if (!j) /* unknown ordinal: charge it to the first job */
						j = g->jobs[0];
					job_finish_ok(j, &res[i], NULL);
					continue;
				}
				uint32_t k = res[i].shards_merged;
				res[i].index = nd_index_name(g->jobs[0]->ix);
				res[i].node = S->cl->nodes[g->node].name;
				pthread_mutex_lock(&S->lock);
				sr_merger_add(S->m, &res[i]);
				pthread_mutex_unlock(&S->lock);
				for (uint32_t q = 0; q < k; q++)
					cm_wait_done(S->w);
			}
			if (strings) {
				pthread_mutex_lock(&S->lock);
				strings_keep_locked(S, strings);
				pthread_mutex_unlock(&S->lock);
			}
			cm_free(MEM, res);
			cm_free(MEM, meta);
			group_free(g);
			return;
		}
	} else if (!rc && nres != g->n) {
		rc = cm_error_set(&e, CM_EPARSE, "%zu results for %zu shards", nres, g->n);
	}
	if (rc) {
		group_done(g, false, took, NULL, 0, 0, true);
		/* Unreachable, late, refused, or behind on the metadata: another
		 * copy may answer. Anything else every copy would say alike. */
		bool retry =
		    rc == CM_EUNAVAIL || rc == CM_ETIMEDOUT || rc == CM_EINVAL || rc == CM_ENOINDEX;
		if (!retry) {
			/* The request itself is bad: every copy would say the same. */
			for (size_t i = 0; i < g->n; i++) {
				if (!live[i] || !claim(g->jobs[i], g->id))
					continue;
				sr_shard_result fr;
				memset(&fr, 0, sizeof(fr));
				if (e.code)
					fr.error = e;
				else
					cm_error_set(&fr.error, rc, "%s", cm_err_msg(rc));
				g->jobs[i]->node = g->node;
				job_finish_ok(g->jobs[i], &fr, NULL);
			}
		} else {
			for (size_t i = 0; i < g->n; i++)
				if (live[i])
					job_failed(g->jobs[i], g->node, rc,
					           rc == CM_EINVAL
					               ? "refused (wrong cluster name or secret?)"
					           : rc == CM_ETIMEDOUT ? "timed out"
					           : rc == CM_ENOINDEX
					               ? "the node does not have the index yet"
					               : "node not reachable");
		}
		if (res) {
			for (size_t i = 0; i < nres; i++)
				sr_shard_result_free(&res[i]);
			cm_free(MEM, res);
		}
		if (strings)
			pr_strings_free(strings);
	} else {
		group_done(g, true, took, meta->service_us, meta->nservice, meta->queue, censored);
		cl_mark(S->cl, g->node, true, took);
		bool kept = false;
		for (size_t i = 0; i < g->n; i++) {
			if (live[i] && claim(g->jobs[i], g->id)) {
				job_finish_ok(g->jobs[i], &res[i], kept ? NULL : strings);
				kept = true;
			} else {
				sr_shard_result_free(&res[i]);
			}
		}
		if (!kept && strings)
			pr_strings_free(strings);
		cm_free(MEM, res);
	}
	cm_free(MEM, meta);
	group_free(g);
}

/* Sends shards (all of one index) to one remote node in one message.
 * hedge: a second attempt for jobs whose first is still out. */
static void
send_group(search_st *S, int node, shard_job **jobs, size_t n, bool hedge)
{
	node_group *g = cm_calloc(MEM, 1, sizeof(*g));
	uint32_t *shards = cm_calloc(MEM, n + 1, sizeof(uint32_t));
	g->S = S;
	g->node = node;
	g->jobs = cm_calloc(MEM, n + 1, sizeof(shard_job *));
	g->n = n;
	g->hedge = hedge;
	g->id = nd_rank_cancel_id();
	for (size_t i = 0; i < n; i++) {
		g->jobs[i] = jobs[i];
		shards[i] = (uint32_t)jobs[i]->shard;
	}
	cm_buf params;
	cm_buf_init(&params, MEM);
	if (n > 1) {
		/* {"ordinals":[..], <the request's params>} */
		cm_buf_printf(&params, "{\"ordinals\":[");
		for (size_t i = 0; i < n; i++)
			cm_buf_printf(&params, "%s%u", i ? "," : "", jobs[i]->ordinal);
		const char *rest = strchr(S->params, '{');
		bool empty = !rest || strspn(rest + 1, " \t\n}") == strlen(rest + 1);
		cm_buf_printf(&params, "]%s%s", empty ? "}" : ",", empty ? "" : rest + 1);
	} else {
		cm_buf_put(&params, S->params, strlen(S->params));
	}
	cm_buf_put_u8(&params, 0);
	pr_search_req rq = {.index = (char *)jobs[0]->ixname,
	                    .index_uuid = (char *)"",
	                    .shards = shards,
	                    .nshards = n,
	                    .body = S->body,
	                    .body_len = strlen(S->body),
	                    .params = (char *)params.data,
	                    .per_node = n > 1,
	                    .cancel_id = S->hedge ? g->id : 0};
	cm_buf_init(&g->msg, MEM);
	pr_search_req_encode(&rq, &g->msg);
	cm_buf_free(&params);
	cm_free(MEM, shards);
	g->t_sent = cm_now_ns();
	/* With another copy left to try, this attempt gets half the time left,
	 * so a copy that hangs still leaves room for the retry. */
	uint64_t deadline = S->deadline_ns;
	bool more = false;
	pthread_mutex_lock(&S->lock);
	bool moot = hedge;
	for (size_t i = 0; i < n; i++)
		moot = moot && jobs[i]->done;
	if (moot) {
		/* a hedge whose shards were all answered meanwhile */
		pthread_mutex_unlock(&S->lock);
		cm_buf_free(&g->msg);
		cm_free(MEM, g->jobs);
		cm_free(MEM, g);
		return;
	}
	S->refs++; /* the message's */
	for (size_t i = 0; i < n; i++) {
		shard_job *j = jobs[i];
		more = more || j->next < j->norder;
		if (!j->done) {
			j->node = node;
			j->t_sent = g->t_sent;
		}
		if (j->natt < MAX_ATT) {
			j->att[j->natt++] = (attempt){.node = node,
			                              .id = g->id,
			                              .t_sent = g->t_sent,
			                              .live = true,
			                              .hedge = hedge};
			j->inflight++;
		}
	}
	bool arm = S->hedge && !hedge && more;
	if (arm)
		S->refs++; /* the timer's */
	pthread_mutex_unlock(&S->lock);
	if (more && deadline > g->t_sent)
		deadline = g->t_sent + (deadline - g->t_sent) / 2;
	nd_stats_message(n);
	int copy_shards[n + 1];
	for (size_t i = 0; i < n; i++)
		copy_shards[i] = jobs[i]->shard;
	const char *uuid = nd_index_uuid(jobs[0]->ix);
	nd_rank_sent(node, jobs[0]->ixname, uuid, copy_shards, n);
	if (hedge)
		nd_rank_count_hedge(n);
	else
		nd_rank_earn(n, S->cfg.max_ratio);
	if (arm) {
		hedge_arg *h = cm_calloc(MEM, 1, sizeof(*h) + n * sizeof(shard_job *));
		h->S = S;
		h->node = node;
		h->id = g->id;
		h->n = n;
		memcpy(h->jobs, jobs, n * sizeof(shard_job *));
		nd_rank_timer(g->t_sent + nd_rank_hedge_delay(node, jobs[0]->ixname, uuid,
		                                              copy_shards, n, S->cfg.min_delay_ns),
		              hedge_fire, h);
	}
	nd_peer_call(S->cl->nodes[node].peer, PR_SEARCH, g->msg.data, g->msg.len, deadline,
	             group_reply, g);
}

/* Locked: the next live copy of j after its current ones, -1 if none. */
static int
next_copy_locked(shard_job *j)
{
	while (j->next < j->norder) {
		int node = j->order[j->next++];
		if (node != j->S->cl->self && cl_alive(j->S->cl, node))
			return node;
	}
	return -1;
}

/* A first attempt has not answered within its hedge delay: the same
 * request goes to the next copy of each shard still waiting, when the
 * budget allows (all of a message's shards or none). */
static void
hedge_fire(void *arg)
{
	hedge_arg *h = arg;
	search_st *S = h->S;
	int target[h->n + 1];
	size_t want = 0;
	pthread_mutex_lock(&S->lock);
	for (size_t i = 0; i < h->n; i++) {
		shard_job *j = h->jobs[i];
		target[i] = -1;
		bool waiting = false;
		for (int a = 0; a < j->natt; a++)
			waiting = waiting || (j->att[a].live && j->att[a].id == h->id);
		if (j->done || !waiting || j->hedged || cm_now_ns() >= S->deadline_ns)
			continue;
		int save = j->next;
		target[i] = next_copy_locked(j);
		j->next = save;
		want += target[i] >= 0;
	}
	bool go = want > 0 && nd_rank_take(want);
	if (go)
		for (size_t i = 0; i < h->n; i++)
			if (target[i] >= 0) {
				h->jobs[i]->hedged = true;
				next_copy_locked(h->jobs[i]);
			}
	pthread_mutex_unlock(&S->lock);
	/* One message per target node (per_node fan-out hedges a straggling
	 * node's shards together). The jobs cannot be claimed away while
	 * encoding: their first attempts are still out and the caller waits. */
	for (size_t i = 0; go && i < h->n; i++) {
		if (target[i] < 0)
			continue;
		shard_job *grp[h->n + 1];
		size_t g = 0;
		int node = target[i];
		for (size_t q = i; q < h->n; q++)
			if (target[q] == node) {
				grp[g++] = h->jobs[q];
				target[q] = -1;
			}
		send_group(S, node, grp, g, true);
	}
	cm_free(MEM, h);
	S_unref(S);
}

/* Tries the job's next copy, or records the shard as failed. */
static void
dispatch(shard_job *j)
{
	search_st *S = j->S;
	for (;;) {
		pthread_mutex_lock(&S->lock);
		if (j->done) {
			pthread_mutex_unlock(&S->lock);
			return;
		}
		if (j->next >= j->norder || cm_now_ns() >= S->deadline_ns) {
			pthread_mutex_unlock(&S->lock);
			break;
		}
		int node = j->order[j->next++];
		bool last = j->next >= j->norder;
		pthread_mutex_unlock(&S->lock);
		/* A copy known dead is skipped while another remains. */
		if (!cl_alive(S->cl, node) && !last)
			continue;
		if (node == S->cl->self) {
			j->node = node;
			j->t_sent = cm_now_ns();
			cm_pool_submit(S->cl->spool, run_job_local, j);
			return;
		}
		send_group(S, node, &j, 1, false);
		return;
	}
	if (!claim(j, 0))
		return;
	sr_shard_result fr;
	memset(&fr, 0, sizeof(fr));
	if (j->last.code)
		fr.error = j->last;
	else
		cm_error_set(&fr.error, j->norder ? CM_ETIMEDOUT : CM_EUNAVAIL,
		             j->norder ? "shard [%s][%d]: no copy answered within the deadline"
		                       : "shard [%s][%d]: no copy matches the preference",
		             j->ixname, j->shard);
	if (fr.error.code == CM_EUNAVAIL)
		cm_error_set_type(&fr.error, CM_EUNAVAIL, "no_shard_available_action_exception",
		                  "%s", fr.error.reason);
	if (j->norder == 0 || j->next == 0)
		j->node = S->cl->self;
	if (!j->t_sent)
		j->t_sent = cm_now_ns();
	job_finish_ok(j, &fr, NULL);
}

static uint32_t
str_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

static bool
name_in(const char *list, const char *name)
{
	char *copy = cm_strdup(MEM, list), *save = NULL, *tok;
	bool hit = false;
	for (tok = strtok_r(copy, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save))
		hit = fnmatch(tok, name, 0) == 0;
	cm_free(MEM, copy);
	return hit;
}

#define SHARDS_PREFIX "_shards:"
#define SHARDS_PREFIX_LEN 8

/* The list of a preference=_shards:LIST[|OTHER] and its length; NULL when
 * pref is not of that form. */
static const char *
pref_list(const char *pref, size_t *len)
{
	if (!pref || strncmp(pref, SHARDS_PREFIX, SHARDS_PREFIX_LEN) != 0)
		return NULL;
	const char *list = pref + SHARDS_PREFIX_LEN, *bar = strchr(list, '|');
	*len = bar ? (size_t)(bar - list) : strlen(list);
	return list;
}

/* Checks the list of _shards: (comma separated shard numbers, as ES's
 * Integer.parseInt reads them; a number no index has matches nothing). */
static cm_err
pref_list_check(const char *pref, const char *list, size_t len, cm_error *err)
{
	const char *p = list, *end = list + len;
	int n = 0;
	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p)), *e = comma ? comma : end;
		const char *d = p;
		while (d < e && (*d == ' ' || *d == '\t'))
			d++;
		const char *t = e;
		while (t > d && (t[-1] == ' ' || t[-1] == '\t'))
			t--;
		if (t > d) { /* ES drops empty items of a comma list */
			const char *q = d + (*d == '-' || *d == '+');
			bool digits = q < t && (size_t)(t - d) <= 10;
			for (const char *c = q; c < t && digits; c++)
				digits = *c >= '0' && *c <= '9';
			if (!digits || strtoll(d, NULL, 10) > INT32_MAX ||
			    strtoll(d, NULL, 10) < INT32_MIN)
				return cm_error_set(
				    err, CM_EINVAL,
				    "preference [%.100s]: [%.*s] is not a shard number", pref,
				    (int)(t - d > 40 ? 40 : t - d), d);
			n++;
		}
		p = comma ? comma + 1 : end;
	}
	if (n == 0)
		return cm_error_set(err, CM_EINVAL,
		                    "preference [%.100s]: no shard numbers after [_shards:]", pref);
	return CM_OK;
}

bool
nd_cl_pref_shard(const char *pref, int shard)
{
	size_t len;
	const char *list = pref_list(pref, &len), *p = list, *end = list + len;
	if (!list)
		return true;
	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		char *e;
		long v = strtol(p, &e, 10);
		if (e != p && e <= (comma ? comma : end) && v == shard)
			return true;
		p = comma ? comma + 1 : end;
	}
	return false;
}

const char *
nd_cl_pref_copies(const char *pref)
{
	size_t len;
	const char *list = pref_list(pref, &len);
	if (!list)
		return pref;
	return list[len] == '|' && list[len + 1] ? list + len + 1 : NULL;
}

cm_err
nd_cl_preference_check(const char *pref, cm_error *err)
{
	size_t len;
	const char *list = pref_list(pref, &len);
	if (list) {
		cm_err rc = pref_list_check(pref, list, len, err);
		const char *other = nd_cl_pref_copies(pref);
		if (rc)
			return rc;
		if (other && strncmp(other, SHARDS_PREFIX, SHARDS_PREFIX_LEN) == 0)
			return cm_error_set(err, CM_EINVAL,
			                    "preference [%.100s]: [_shards:] given twice", pref);
		if (!other || nd_cl_preference_check(other, err) == CM_OK)
			return CM_OK;
		cm_error_clear(err);
		return cm_error_set(err, CM_EINVAL, "no Preference for [%.100s]", other);
	}
	if (!pref || !*pref || *pref != '_' || strcmp(pref, "_local") == 0 ||
	    strcmp(pref, "_only_local") == 0 || strcmp(pref, "_primary") == 0)
		return CM_OK;
	if ((strncmp(pref, "_prefer_nodes:", 14) == 0 && pref[14]) ||
	    (strncmp(pref, "_only_nodes:", 12) == 0 && pref[12]))
		return CM_OK;
	return cm_error_set(err, CM_EINVAL, "no Preference for [%.100s]", pref);
}

/* Whether a search with this preference may hedge: not when it pins its
 * copies (by node, locality, primary or a sticky session string). */
static bool
pref_hedges(const char *pref)
{
	return !pref || !*pref || strcmp(pref, "_local") == 0 ||
	       strncmp(pref, "_prefer_nodes:", 14) == 0;
}

/* Appends cand[0..n) to j's order, best first: by C3 rank with adaptive
 * selection, else by round-trip latency; dead copies last. */
static void
order_ranked(nd_cluster *cl, nd_index *ix, int shard, const int *cand, int n,
             const nd_tail_cfg *cfg, shard_job *j)
{
	if (n <= 0)
		return;
	if (cfg && cfg->ars) {
		bool alive[ND_CL_MAX_COPIES];
		nd_rank_copy cp = {nd_index_name(ix), nd_index_uuid(ix), shard};
		for (int i = 0; i < n; i++)
			alive[i] = cl_alive(cl, cand[i]);
		nd_rank_order(&cp, cand, alive, n, cl->nn, j->order + j->norder);
		j->norder += n;
		return;
	}
	double lat[ND_CL_MAX_COPIES];
	pthread_mutex_lock(&cl->lock);
	for (int i = 0; i < n; i++)
		lat[i] = !cl_alive(cl, cand[i]) ? 1e18 : cl->nodes[cand[i]].ewma_us;
	pthread_mutex_unlock(&cl->lock);
	for (int i = 0; i < n; i++) {
		int best = -1;
		for (int k = 0; k < n; k++)
			if (lat[k] < 1e300 && (best < 0 || lat[k] < lat[best]))
				best = k;
		j->order[j->norder++] = cand[best];
		lat[best] = 1e301;
	}
}

/* The copies of a shard in the order to try them. */
static void
copy_order(nd_cluster *cl, nd_index *ix, int shard, const char *pref, const nd_tail_cfg *cfg,
           shard_job *j)
{
	int copies[ND_CL_MAX_COPIES], cand[ND_CL_MAX_COPIES], n = 0;
	int nc = cl_shard_copies(cl, ix, shard, copies);
	cl_route ro;
	bool routed = cl_route_get(cl, nd_index_name(ix), shard, &ro);
	j->norder = 0;
	if (pref && strncmp(pref, "_only_nodes:", 12) == 0) {
		/* Asked for by name: any copy, in sync or not (to inspect it). */
		for (int c = 0; c < nc; c++)
			if (name_in(pref + 12, cl->nodes[copies[c]].name))
				j->order[j->norder++] = copies[c];
		return;
	}
	/* Only copies in the in-sync set answer: a copy that is recovering or
	 * was dropped may be missing acknowledged writes. */
	for (int c = 0; c < nc; c++)
		if (!routed || ((ro.in_sync >> copies[c]) & 1))
			cand[n++] = copies[c];
	if (n == 0)
		return;
	if (pref && strcmp(pref, "_primary") == 0) {
		j->order[j->norder++] = routed && ro.primary >= 0 ? ro.primary : cand[0];
		return;
	}
	if (pref && strcmp(pref, "_only_local") == 0) {
		for (int i = 0; i < n; i++)
			if (cand[i] == cl->self)
				j->order[j->norder++] = cand[i];
		return;
	}
	if (pref && *pref && *pref != '_') {
		/* Custom string: the same copy every time (while it lives). */
		int rot = (int)(str_hash(pref) % (uint32_t)n);
		for (int i = 0; i < n; i++)
			j->order[j->norder++] = cand[(rot + i) % n];
		return;
	}
	/* Default and _local: the local copy, then the others ranked;
	 * _prefer_nodes: those nodes' copies ranked, then the rest. */
	int first[ND_CL_MAX_COPIES], rest[ND_CL_MAX_COPIES], nf = 0, nr = 0;
	bool prefer = pref && strncmp(pref, "_prefer_nodes:", 14) == 0;
	for (int i = 0; i < n; i++) {
		if (!prefer && cand[i] == cl->self)
			j->order[j->norder++] = cand[i];
		else if (prefer && name_in(pref + 14, cl->nodes[cand[i]].name))
			first[nf++] = cand[i];
		else
			rest[nr++] = cand[i];
	}
	/* the local copy among the preferred (or the rest) goes first there */
	for (int pass = 0; pass < 2; pass++) {
		int *v = pass ? rest : first, nv = pass ? nr : nf, k = 0, local = -1;
		for (int i = 0; i < nv; i++)
			if (v[i] == cl->self)
				local = i;
			else
				v[k++] = v[i];
		if (local >= 0)
			j->order[j->norder++] = cl->self;
		order_ranked(cl, ix, shard, v, k, cfg, j);
	}
}

cm_err
nd_cluster_search(nd_cluster *cl, nd_index **ixs, size_t n, const char *body, const char *params,
                  const nd_cl_search_opts *o, cm_buf *out, cm_error *err)
{
	search_st *S = cm_calloc(MEM, 1, sizeof(*S));
	size_t njobs = 0, k = 0;
	shard_job *jobs;
	nd_cl_fanout mode = o && o->fanout_set ? o->fanout : cl->fanout;
	const char *pref = o ? o->preference : NULL;
	uint64_t t0 = cm_now_ns();
	cm_err rc;

	S->cl = cl;
	S->body = cm_strdup(MEM, body ? body : "");
	S->params = cm_strdup(MEM, params ? params : "{}");
	S->deadline_ns = o && o->deadline_ns ? o->deadline_ns : t0 + DEFAULT_DEADLINE_NS;
	S->refs = 1;
	pthread_mutex_init(&S->lock, NULL);
	sr_request_init(&S->req);
	nd_rank_config(&S->cfg);
	S->hedge =
	    S->cfg.hedge && mode != ND_CL_FANOUT_SERIAL && pref_hedges(nd_cl_pref_copies(pref));
	if ((rc = nd_cl_preference_check(pref, err)) ||
	    (rc = nd_cl_request_build(S->body, strlen(S->body), S->params, &S->req, err))) {
		S_unref(S);
		return rc;
	}
	/* preference=_shards: only the listed shards of each index */
	for (size_t i = 0; i < n; i++)
		for (int s = 0; s < nd_index_nshards(ixs[i]); s++)
			njobs += nd_cl_pref_shard(pref, s);
	nd_stats_inflight(1);
	jobs = S->jobs = cm_calloc(MEM, njobs + 1, sizeof(shard_job));
	S->njobs = njobs;
	S->names = cm_calloc(MEM, n + 1, sizeof(char *));
	S->nnames = n;
	for (size_t i = 0; i < n; i++)
		S->names[i] = cm_strdup(MEM, nd_index_name(ixs[i]));
	for (size_t i = 0; i < n; i++)
		for (int s = 0; s < nd_index_nshards(ixs[i]); s++) {
			if (!nd_cl_pref_shard(pref, s))
				continue;
			jobs[k].S = S;
			jobs[k].ix = ixs[i];
			jobs[k].ixname = S->names[i];
			jobs[k].shard = s;
			jobs[k].ordinal = (uint32_t)k;
			jobs[k].node = cl->self;
			copy_order(cl, ixs[i], s, nd_cl_pref_copies(pref), &S->cfg, &jobs[k]);
			k++;
		}
	S->m = sr_merger_create(&S->req, njobs);
	if (mode == ND_CL_FANOUT_SERIAL) {
		/* One shard after another, the same code otherwise. */
		for (size_t i = 0; i < njobs; i++) {
			S->w = cm_wait_create(1);
			dispatch(&jobs[i]);
			cm_wait_wait(S->w);
			cm_wait_destroy(S->w);
		}
	} else {
		S->w = cm_wait_create((int)njobs);
		if (mode == ND_CL_FANOUT_PER_NODE) {
			/* One message per (node, index) carrying all its shards; local
			 * and retried shards go one by one. */
			shard_job **grp = cm_calloc(MEM, njobs + 1, sizeof(*grp));
			bool *sent = cm_calloc(MEM, njobs + 1, sizeof(bool));
			for (size_t i = 0; i < njobs; i++) {
				if (sent[i])
					continue;
				int node = -1;
				while (jobs[i].next < jobs[i].norder) {
					node = jobs[i].order[jobs[i].next];
					if (cl_alive(cl, node) ||
					    jobs[i].next + 1 >= jobs[i].norder)
						break;
					jobs[i].next++;
					node = -1;
				}
				if (node < 0 || node == cl->self) {
					sent[i] = true;
					dispatch(&jobs[i]);
					continue;
				}
				size_t g = 0;
				for (size_t q = i; q < njobs; q++) {
					if (sent[q] || jobs[q].ix != jobs[i].ix)
						continue;
					if (jobs[q].next < jobs[q].norder &&
					    jobs[q].order[jobs[q].next] == node) {
						jobs[q].next++;
						sent[q] = true;
						grp[g++] = &jobs[q];
					}
				}
				send_group(S, node, grp, g, false);
			}
			cm_free(MEM, grp);
			cm_free(MEM, sent);
		} else {
			for (size_t i = 0; i < njobs; i++)
				dispatch(&jobs[i]);
		}
		cm_wait_wait(S->w);
		cm_wait_destroy(S->w);
	}
	pthread_mutex_lock(&S->lock); /* losers' replies may still come */
	if (njobs > 0 && S->failed == njobs) {
		*err = S->first_err;
		rc = S->first_err.code ? S->first_err.code : CM_EUNAVAIL;
		pthread_mutex_unlock(&S->lock);
	} else {
		cm_error rerr;
		cm_error_clear(&rerr);
		if (S->timed_out)
			sr_merger_mark_timed_out(S->m);
		/* aggregations over search.max_buckets fail the request (400), as
		 * on a solo node */
		if ((rc = sr_merger_reduce(S->m, &rerr)))
			*err = rerr;
		else
			sr_merger_render(S->m, (cm_now_ns() - t0) / 1000000, out);
		pthread_mutex_unlock(&S->lock);
	}
	nd_stats_inflight(-1);
	if (!rc)
		nd_stats_search(ixs, n, mode, cm_now_ns() - t0);
	if (o && o->timings && o->ntimings) {
		size_t k2 = 0;
		pthread_mutex_lock(&S->lock);
		for (size_t i = 0; i < njobs && k2 < o->timings_cap; i++, k2++)
			o->timings[k2] = (nd_cl_shard_timing){nd_index_name(jobs[i].ix),
			                                      jobs[i].shard,
			                                      cl->nodes[jobs[i].node].name,
			                                      jobs[i].node == cl->self,
			                                      jobs[i].ok,
			                                      jobs[i].took_ns,
			                                      jobs[i].hedged,
			                                      jobs[i].hedge_won};
		pthread_mutex_unlock(&S->lock);
		*o->ntimings = k2;
	}
	S_unref(S);
	return rc;
}

/* ================= gets and stats ================= */

static cm_err
local_get(nd_index *ix, int shard, const char *id, size_t len, st_doc_meta *meta, cm_buf *src)
{
	return st_shard_get(nd_index_shard(ix, shard), id, len, meta, src);
}

/* The figures a node holds, one entry per index: stats[i] is node i's. */
static void gather_stats(nd_cluster *cl, pr_shard_stats *stats);
typedef enum { STAT_DOCS, STAT_BYTES, STAT_DELETED } stat_kind;
static double stat_of(const pr_shard_stats *stats, int node, const char *index, stat_kind what,
                      int shard);
static void stats_free(nd_cluster *cl, pr_shard_stats *stats);

/* docs, store bytes and deleted docs of every local copy. */
static void
local_stats(nd_cluster *cl, pr_shard_stats *out)
{
	nd_index **all;
	size_t nall;
	nd_index_list(cl->node, &all, &nall);
	out->indices = cm_calloc(MEM, nall + 1, sizeof(pr_index_stats));
	out->n = nall;
	for (size_t i = 0; i < nall; i++) {
		pr_index_stats *e = &out->indices[i];
		size_t ns = (size_t)nd_index_nshards(all[i]);
		e->index = cm_strdup(MEM, nd_index_name(all[i]));
		e->nshards = ns;
		e->docs = cm_calloc(MEM, ns + 1, sizeof(uint64_t));
		e->store_bytes = cm_calloc(MEM, ns + 1, sizeof(uint64_t));
		e->deleted = cm_calloc(MEM, ns + 1, sizeof(uint64_t));
		for (size_t s = 0; s < ns; s++) {
			st_shard_stats st;
			st_shard_stats_get(nd_index_shard(all[i], (int)s), &st);
			e->docs[s] = st.docs;
			e->store_bytes[s] = st.store_bytes;
			e->deleted[s] = st.deleted_docs;
		}
		nd_index_release(all[i]);
	}
	cm_free(MEM, all);
}

static void
reply_with(const cm_error *err, const cm_buf *body, cm_buf *reply, uint32_t *reply_type)
{
	pr_ack_encode(err, err->code || !body ? NULL : (const char *)body->data,
	              err->code || !body ? 0 : body->len, reply);
	*reply_type = PR_ACK;
}

void
cl_serve_get(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
             uint32_t *reply_type)
{
	pr_get_req g;
	cm_error err;
	cm_buf src, out;
	st_doc_meta meta;
	nd_index *ix = NULL;
	(void)deadline_ns;
	cm_error_clear(&err);
	cm_buf_init(&src, MEM);
	cm_buf_init(&out, MEM);
	if (pr_get_req_decode(p, len, &g, &err) == CM_OK) {
		if (!(ix = nd_index_get(cl->node, g.index))) {
			cm_error_set(&err, CM_ENOINDEX, "no such index [%s]", g.index);
		} else if (g.shard >= (uint32_t)nd_index_nshards(ix)) {
			cm_error_set(&err, CM_EINVAL, "index [%s] has no shard [%u]", g.index,
			             g.shard);
		} else {
			cm_err rc = local_get(ix, (int)g.shard, g.id, g.id_len, &meta, &src);
			if (rc == CM_OK || rc == CM_ENOTFOUND)
				pr_get_reply_encode(rc == CM_OK, &meta, src.data, src.len, &out);
			else
				cm_error_set(&err, rc, "get failed on node [%s]",
				             cl->nodes[cl->self].name);
		}
	}
	nd_index_release(ix);
	pr_get_req_free(&g);
	reply_with(&err, &out, reply, reply_type);
	cm_buf_free(&src);
	cm_buf_free(&out);
}

void
cl_serve_shard_stats(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                     cm_buf *reply, uint32_t *reply_type)
{
	pr_shard_stats st;
	cm_error err;
	cm_buf out;
	(void)p, (void)len, (void)deadline_ns; /* ShardStatsRequest has no fields */
	cm_error_clear(&err);
	cm_buf_init(&out, MEM);
	local_stats(cl, &st);
	pr_shard_stats_encode(&st, &out);
	pr_shard_stats_free(&st);
	reply_with(&err, &out, reply, reply_type);
	cm_buf_free(&out);
}

void
cl_serve_recovery_rows(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                       cm_buf *reply, uint32_t *reply_type)
{
	cm_buf rows, out;
	cm_error err;
	(void)p, (void)len, (void)deadline_ns; /* RecoveryRowsRequest has no fields */
	cm_error_clear(&err);
	cm_buf_init(&rows, MEM);
	cm_buf_init(&out, MEM);
	rp_cat_recovery(cl->rp, &rows);
	nd_snap_cat_recovery(&rows); /* restores from snapshots */
	pr_recovery_rows_encode((const char *)rows.data, rows.len, &out);
	reply_with(&err, &out, reply, reply_type);
	cm_buf_free(&rows);
	cm_buf_free(&out);
}

void
cl_serve_node_view(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                   cm_buf *reply, uint32_t *reply_type)
{
	char *kind = NULL;
	cm_error err;
	cm_buf out;
	(void)deadline_ns;
	cm_error_clear(&err);
	cm_buf_init(&out, MEM);
	if (pr_node_view_req_decode(p, len, &kind, &err) == CM_OK) {
		cJSON *r = strcmp(kind, "summary") == 0 ? nd_stats_node_json(cl) /* the cluster page */
		           : cl->info                   ? cl->info(cl->info_arg, kind)
		                                        : NULL;
		if (!r) {
			cm_error_set(&err, CM_EINVAL, "node [%s] has no node information",
			             cl->nodes[cl->self].name);
		} else {
			char *text = cJSON_PrintUnformatted(r);
			pr_node_view_reply_encode(text, text ? strlen(text) : 0, &out);
			cJSON_free(text);
			cJSON_Delete(r);
		}
	}
	cm_free(MEM, kind);
	reply_with(&err, &out, reply, reply_type);
	cm_buf_free(&out);
}

cm_err
cl_call(nd_cluster *cl, int node, uint32_t type, const cm_buf *req, char **body, size_t *len,
        cm_error *err)
{
	cm_buf rep;
	uint32_t rtype;
	cm_error remote;
	cm_err rc;

	*body = NULL;
	*len = 0;
	cm_buf_init(&rep, MEM);
	uint64_t t0 = cm_now_ns();
	/* a node held unreachable may be back already (its pings lag): asked
	 * too, with a short deadline */
	rc = nd_peer_call_sync(cl->nodes[node].peer, type, req->data, req->len,
	                       t0 + (cl_alive(cl, node) ? 5000000000ull : 300000000ull), &rtype,
	                       &rep);
	if (rc) {
		if (rc == CM_EUNAVAIL)
			cl_mark(cl, node, false, 0);
		cm_error_set(err, rc, "node [%s] did not answer (%s)", cl->nodes[node].name,
		             cm_err_msg(rc));
	} else if ((cm_error_clear(&remote),
	            rc = pr_ack_decode(rep.data, rep.len, &remote, body, len)) &&
	           !remote.code) {
		cm_error_set(err, rc, "malformed reply from [%s]", cl->nodes[node].name);
	} else if (remote.code) {
		*err = remote;
		rc = remote.code;
	} else {
		cl_mark(cl, node, true, cm_now_ns() - t0);
	}
	cm_buf_free(&rep);
	return rc;
}

cm_err
nd_cluster_get(nd_cluster *cl, nd_index *ix, int shard, const char *id, const char *preference,
               st_doc_meta *meta, cm_buf *source, cm_error *err)
{
	shard_job j;
	cm_err rc = CM_EUNAVAIL;
	cm_buf req;

	memset(&j, 0, sizeof(j));
	nd_tail_cfg cfg;
	nd_rank_config(&cfg);
	if (nd_cl_preference_check(preference, err))
		return err->code;
	copy_order(cl, ix, shard, nd_cl_pref_copies(preference), &cfg, &j);
	cm_error_set(err, CM_EUNAVAIL, "no copy of shard [%s][%d] is available", nd_index_name(ix),
	             shard);
	cm_buf_init(&req, MEM);
	pr_get_req g = {.index = (char *)(uintptr_t)nd_index_name(ix),
	                .shard = (uint32_t)shard,
	                .id = (char *)(uintptr_t)id,
	                .id_len = strlen(id)};
	pr_get_req_encode(&g, &req);
	for (int i = 0; i < j.norder; i++) {
		int node = j.order[i];
		if (node == cl->self) {
			cm_error_clear(err);
			rc = local_get(ix, shard, id, strlen(id), meta, source);
			break;
		}
		if (!cl_alive(cl, node) && i + 1 < j.norder)
			continue;
		char *body;
		size_t blen;
		bool found;
		cm_error e;
		cm_error_clear(&e);
		rc = cl_call(cl, node, PR_GET, &req, &body, &blen, &e);
		if (!rc) {
			size_t mark = source->len;
			rc = pr_get_reply_decode(body, blen, &found, meta, source, &e);
			if (!rc && !found)
				rc = CM_ENOTFOUND;
			if (rc && rc != CM_ENOTFOUND)
				source->len = mark;
		}
		cm_free(MEM, body);
		if (rc && rc != CM_ENOTFOUND) {
			*err = e;
			if (rc == CM_EUNAVAIL || rc == CM_ETIMEDOUT)
				continue;
			break;
		}
		cm_error_clear(err);
		break;
	}
	cm_buf_free(&req);
	return rc;
}

/* ================= cluster views ================= */

static int
alive_count(nd_cluster *cl, bool data_only)
{
	int c = 0;
	for (int i = 0; i < cl->nn; i++)
		if ((!data_only || cl->nodes[i].data) && cl_alive(cl, i))
			c++;
	return c;
}

void
nd_cluster_health(nd_cluster *cl, cm_buf *out)
{
	nd_index **all;
	size_t nall;
	int prim = 0, active = 0, unassigned = 0, red = 0, yellow = 0, initializing = 0;
	int relocating = 0;
	cJSON *j = cJSON_CreateObject();

	nd_index_list(cl->node, &all, &nall);
	for (size_t i = 0; i < nall; i++) {
		int want = 1 + nd_index_settings(all[i])->number_of_replicas;
		for (int s = 0; s < nd_index_nshards(all[i]); s++) {
			int up = 0, init = 0, copies[ND_CL_MAX_COPIES];
			int nc = cl_shard_copies(cl, all[i], s, copies);
			cl_route ro;
			bool routed = cl_route_get(cl, nd_index_name(all[i]), s, &ro);
			bool p_up = routed ? ro.primary >= 0 && cl_alive(cl, ro.primary)
			                   : cl_alive(cl, copies[0]);
			/* A copy counts when its node is up and it is in sync; a live
			 * copy outside the set is initializing (recovering). */
			for (int c = 0; c < nc; c++) {
				int node = copies[c];
				if (!cl_alive(cl, node))
					continue;
				/* A node not yet taken in since it (re)started is about
				 * to leave the in-sync sets and recover. */
				if ((!routed || ((ro.in_sync >> node) & 1)) &&
				    cl_node_joined(cl, node))
					up++;
				else
					init++;
			}
			/* a copy moving: its new copy is the relocation, not one more */
			if (routed && ro.relocating_from >= 0) {
				relocating++;
				if (init > 0)
					init--;
			} else if (up > want) {
				/* a copy more than wanted, leaving once its primary has
				 * handed over: still moving */
				relocating++;
			}
			if (up > want)
				up = want;
			if (p_up)
				prim++;
			else
				red++;
			active += up;
			initializing += init;
			unassigned += want - up - init > 0 ? want - up - init : 0;
			if (up < want)
				yellow++;
		}
		nd_index_release(all[i]);
	}
	cm_free(MEM, all);
	/* Until the master has taken this node in, its view of the in-sync
	 * sets predates its restart: never green. */
	const char *status = red ? "red" : yellow || !cl_rep_joined(cl) ? "yellow" : "green";
	int total = active + unassigned + initializing;
	cJSON_AddStringToObject(j, "cluster_name", cl->cluster_name);
	cJSON_AddStringToObject(j, "status", status);
	cJSON_AddBoolToObject(j, "timed_out", false);
	cJSON_AddNumberToObject(j, "number_of_nodes", alive_count(cl, false));
	cJSON_AddNumberToObject(j, "number_of_data_nodes", alive_count(cl, true));
	cJSON_AddNumberToObject(j, "active_primary_shards", prim);
	cJSON_AddNumberToObject(j, "active_shards", active);
	cJSON_AddNumberToObject(j, "relocating_shards", relocating);
	cJSON_AddNumberToObject(j, "initializing_shards", initializing);
	cJSON_AddNumberToObject(j, "unassigned_shards", unassigned);
	cJSON_AddNumberToObject(j, "delayed_unassigned_shards", 0);
	cJSON_AddNumberToObject(j, "number_of_pending_tasks", 0);
	cJSON_AddNumberToObject(j, "number_of_in_flight_fetch", 0);
	cJSON_AddNumberToObject(j, "task_max_waiting_in_queue_millis", 0);
	cJSON_AddNumberToObject(j, "active_shards_percent_as_number",
	                        total ? 100.0 * active / total : 100.0);
	cJSON_AddBoolToObject(j, "master_available", cl->master >= 0 && cl_alive(cl, cl->master));
	char *s = cJSON_PrintUnformatted(j);
	cm_buf_put(out, s, strlen(s));
	cJSON_free(s);
	cJSON_Delete(j);
}

void
nd_cluster_cat_nodes(nd_cluster *cl, cm_buf *out)
{
	for (int i = 0; i < cl->nn; i++) {
		nd_cl_node *nd = &cl->nodes[i];
		char ip[ND_CL_ADDR];
		snprintf(ip, sizeof(ip), "%s", nd->http);
		char *colon = strrchr(ip, ':');
		if (colon)
			*colon = 0;
		pthread_mutex_lock(&cl->lock);
		double lat = nd->ewma_us;
		pthread_mutex_unlock(&cl->lock);
		cm_buf_printf(out, "%s %s %s %s %s %s %.0f\n", ip, nd->name,
		              nd->data && nd->master ? "dm"
		              : nd->data             ? "d"
		              : nd->master           ? "m"
		                                     : "-",
		              i == cl->master ? "*" : "-", cl_alive(cl, i) ? "up" : "down",
		              i == cl->self ? "self" : nd->connect, i == cl->self ? 0.0 : lat);
	}
}

void
nd_cluster_cat_shards(nd_cluster *cl, cm_buf *out)
{
	pr_shard_stats *stats = cm_calloc(MEM, (size_t)cl->nn + 1, sizeof(pr_shard_stats));
	nd_index **all;
	size_t nall;

	gather_stats(cl, stats);
	nd_index_list(cl->node, &all, &nall);
	for (size_t x = 0; x < nall; x++) {
		const char *name = nd_index_name(all[x]);
		int want = 1 + nd_index_settings(all[x])->number_of_replicas;
		for (int s = 0; s < nd_index_nshards(all[x]); s++) {
			int copies[ND_CL_MAX_COPIES];
			int nc = cl_shard_copies(cl, all[x], s, copies);
			for (int c = 0; c < (nc > want ? nc : want); c++) {
				if (c >= nc) {
					cm_buf_printf(out, "%s %d r UNASSIGNED\n", name, s);
					continue;
				}
				int node = copies[c];
				long long docs = -1;
				cl_route ro;
				bool routed = cl_route_get(cl, name, s, &ro);
				bool prim = routed ? ro.primary == node : c == 0;
				bool insync = !routed || ((ro.in_sync >> node) & 1);
				if (node == cl->self) {
					st_shard_stats st;
					st_shard_stats_get(nd_index_shard(all[x], s), &st);
					docs = (long long)st.docs;
				} else {
					docs = (long long)stat_of(stats, node, name, STAT_DOCS, s);
				}
				bool up = cl_alive(cl, node);
				bool moving = routed && ro.relocating_from == node;
				if (up && docs >= 0)
					cm_buf_printf(out, "%s %d %s %s %lld 127.0.0.1 %s\n", name,
					              s, prim ? "p" : "r",
					              moving   ? "RELOCATING"
					              : insync ? "STARTED"
					                       : "INITIALIZING",
					              docs, cl->nodes[node].name);
				else
					cm_buf_printf(out, "%s %d %s UNASSIGNED\n", name, s,
					              prim ? "p" : "r");
			}
		}
		nd_index_release(all[x]);
	}
	cm_free(MEM, all);
	stats_free(cl, stats);
}

/* ================= hooks ================= */

cm_err
nd_routed_apply(nd_index *ix, int shard, const st_op *ops, size_t n, const nd_req_opts *o,
                st_op_result *res)
{
	nd_cluster *cl = nd_cluster_of(ix->node);
	if (!cl)
		return nd_index_apply(ix, shard, ops, n, res);
	nd_batch b = {.ix = ix,
	              .shard = shard,
	              .ops = ops,
	              .n = n,
	              .res = res,
	              .deadline_ns = o ? o->deadline_ns : 0};
	nd_cluster_apply_batches(cl, &b, 1);
	return b.rc;
}

bool
nd_routed_refresh(nd_index *ix)
{
	nd_cluster *cl = nd_cluster_of(ix->node);
	int total, failed;
	cm_error e;
	if (!cl)
		return false;
	cm_error_clear(&e);
	nd_cluster_broadcast(cl, ND_BROADCAST_REFRESH, nd_index_name(ix), &total, &failed, &e);
	return true;
}

cm_err
nd_routed_get(nd_index *ix, int shard, const char *id, size_t len, const nd_req_opts *o,
              st_doc_meta *meta, cm_buf *source)
{
	nd_cluster *cl = nd_cluster_of(ix->node);
	cm_error e;
	char idbuf[1024];
	if (!cl)
		return st_shard_get(nd_index_shard(ix, shard), id, len, meta, source);
	if (len >= sizeof(idbuf))
		return CM_EINVAL;
	memcpy(idbuf, id, len);
	idbuf[len] = 0;
	cm_error_clear(&e);
	cm_err rc = nd_cluster_get(cl, ix, shard, idbuf, o ? o->preference : NULL, meta, source, &e);
	if (rc && rc != CM_ENOTFOUND)
		cm_warn("cluster", "get [%s][%d] failed: %s", nd_index_name(ix), shard, e.reason);
	return rc;
}

void
nd_cluster_cat_recovery(nd_cluster *cl, cm_buf *out)
{
	cm_buf req; /* RecoveryRowsRequest has no fields: its encoding is empty */
	cm_buf_init(&req, MEM);
	/* every node's recoveries (each node lists those it ran as target) */
	for (int i = 0; i < cl->nn; i++) {
		cm_error e;
		cm_error_clear(&e);
		if (i == cl->self) {
			rp_cat_recovery(cl->rp, out);
			nd_snap_cat_recovery(out);
			continue;
		}
		char *body;
		size_t len;
		if (!cl->nodes[i].data || cl_call(cl, i, PR_RECOVERY_ROWS, &req, &body, &len, &e))
			continue;
		pr_recovery_rows_decode(body, len, out, &e);
		cm_free(MEM, body);
	}
	cm_buf_free(&req);
}

void
nd_cluster_set_info(nd_cluster *cl, cJSON *(*fn)(void *arg, const char *kind), void *arg)
{
	cl->info = fn;
	cl->info_arg = arg;
}

/* One node's answer to a parallel NodeView ask (nodes_gather). */
typedef struct info_call {
	cm_wait *w;
	cJSON *out;   /* the parsed answer; NULL when it failed */
	uint64_t t0; /* when asked; the latency once answered */
	cm_err rc;
} info_call;

static void
info_done(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	info_call *c = arg;
	(void)type;
	if (!rc) {
		cm_error remote;
		char *rb = NULL, *view = NULL;
		size_t rl, vl;
		cm_error_clear(&remote);
		if (pr_ack_decode(p, len, &remote, &rb, &rl) == CM_OK && !remote.code && rb &&
		    pr_node_view_reply_decode(rb, rl, &view, &vl, &remote) == CM_OK)
			c->out = cJSON_ParseWithLength(view, vl);
		cm_free(MEM, view);
		cm_free(MEM, rb);
		c->t0 = cm_now_ns() - c->t0; /* the latency, marked by the gatherer */
	}
	c->rc = rc;
	cm_wait_done(c->w);
}

/* Asks every other node for its `kind` entry at once (a dead node costs
 * one deadline, not one per node); this node answers from cl->info.
 * calls[i].out holds node i's answer. */
static info_call *
nodes_gather(nd_cluster *cl, const char *kind)
{
	int nn = cl->nn;
	info_call *calls = cm_calloc(MEM, (size_t)nn + 1, sizeof(info_call));
	cm_buf req;
	cm_buf_init(&req, MEM);
	pr_node_view_req_encode(kind, &req);
	cm_wait *w = cm_wait_create(nn > 0 ? nn - 1 : 0);
	uint64_t now = cm_now_ns();
	for (int i = 0; i < nn; i++) {
		if (i == cl->self)
			continue;
		calls[i] = (info_call){.w = w, .t0 = now};
		/* a node held unreachable may be back already: asked too, briefly */
		nd_peer_call(cl->nodes[i].peer, PR_NODE_VIEW, req.data, req.len,
		             now + (cl_alive(cl, i) ? 5000000000ull : 300000000ull), info_done,
		             &calls[i]);
	}
	if (cl->self >= 0 && cl->self < nn)
		calls[cl->self].out = cl->info ? cl->info(cl->info_arg, kind) : NULL;
	cm_wait_wait(w);
	cm_wait_destroy(w);
	cm_buf_free(&req);
	for (int i = 0; i < nn; i++) /* liveness, as cl_call marks it (not on nng's thread) */
		if (i != cl->self && (calls[i].out || calls[i].rc == CM_EUNAVAIL))
			cl_mark(cl, i, calls[i].out != NULL, calls[i].t0);
	return calls;
}

cJSON *
nd_cluster_nodes_info(nd_cluster *cl, const char *kind, int *total, int *failed)
{
	cJSON *nodes = cJSON_CreateObject();
	int nn = cl->nn;
	info_call *calls = nodes_gather(cl, kind);
	*total = nn;
	*failed = 0;
	for (int i = 0; i < nn; i++) {
		if (!calls[i].out) {
			(*failed)++;
			continue;
		}
		cJSON_AddItemToObject(nodes, cl->nodes[i].name, calls[i].out);
	}
	cm_free(MEM, calls);
	return nodes;
}

/* One copy per shard as the routing has it, with docs and bytes gathered
 * from every node that holds one. */
static void
gather_stats(nd_cluster *cl, pr_shard_stats *stats)
{
	cm_buf req; /* ShardStatsRequest has no fields: its encoding is empty */
	cm_buf_init(&req, MEM);
	for (int i = 0; i < cl->nn; i++) {
		cm_error e;
		char *body;
		size_t len;
		cm_error_clear(&e);
		if (i == cl->self) {
			local_stats(cl, &stats[i]);
		} else if (cl->nodes[i].data) {
			if (!cl_call(cl, i, PR_SHARD_STATS, &req, &body, &len, &e) &&
			    pr_shard_stats_decode(body, len, &stats[i], &e))
				pr_shard_stats_free(&stats[i]); /* a node that says nothing */
			cm_free(MEM, body);
		}
	}
	cm_buf_free(&req);
}

static void
stats_free(nd_cluster *cl, pr_shard_stats *stats)
{
	for (int i = 0; i < cl->nn; i++)
		pr_shard_stats_free(&stats[i]);
	cm_free(MEM, stats);
}

/* One figure of a shard copy on node; -1 when the node did not say. */
static double
stat_of(const pr_shard_stats *stats, int node, const char *index, stat_kind what, int shard)
{
	const pr_shard_stats *st = &stats[node];
	for (size_t i = 0; i < st->n; i++) {
		const pr_index_stats *e = &st->indices[i];
		if (strcmp(e->index, index) != 0)
			continue;
		if (shard < 0 || (size_t)shard >= e->nshards)
			return -1;
		const uint64_t *v = what == STAT_DOCS    ? e->docs
		                    : what == STAT_BYTES ? e->store_bytes
		                                         : e->deleted;
		return (double)v[shard];
	}
	return -1;
}

static const char *
human_bytes(double b, char *buf, size_t cap)
{
	const char *u[] = {"b", "kb", "mb", "gb", "tb"};
	int k = 0;
	while (b >= 1024 && k < 4)
		b /= 1024, k++;
	if (k == 0)
		snprintf(buf, cap, "%.0f%s", b, u[k]);
	else
		snprintf(buf, cap, "%.1f%s", b, u[k]);
	return buf;
}

/* Health of one index from the routing: red while a primary is
 * unreachable, yellow while a copy is missing or recovering. */
static const char *
index_health(nd_cluster *cl, nd_index *ix)
{
	bool red = false, yellow = false;
	int want = 1 + nd_index_settings(ix)->number_of_replicas;
	for (int s = 0; s < nd_index_nshards(ix); s++) {
		int copies[ND_CL_MAX_COPIES], up = 0;
		int nc = cl_shard_copies(cl, ix, s, copies);
		cl_route ro;
		bool routed = cl_route_get(cl, nd_index_name(ix), s, &ro);
		if (!(routed ? ro.primary >= 0 && cl_alive(cl, ro.primary)
		             : cl_alive(cl, copies[0])))
			red = true;
		for (int c = 0; c < nc; c++)
			if (cl_alive(cl, copies[c]) &&
			    (!routed || ((ro.in_sync >> copies[c]) & 1)) &&
			    cl_node_joined(cl, copies[c]))
				up++;
		if (up < want)
			yellow = true;
	}
	return red ? "red" : yellow ? "yellow" : "green";
}

void
nd_cluster_cat_indices(nd_cluster *cl, nd_index **ixs, size_t n, cm_buf *out)
{
	pr_shard_stats *stats = cm_calloc(MEM, (size_t)cl->nn + 1, sizeof(pr_shard_stats));
	gather_stats(cl, stats);
	for (size_t x = 0; x < n; x++) {
		const char *name = nd_index_name(ixs[x]);
		double docs = 0, deleted = 0, bytes = 0, pbytes = 0;
		for (int s = 0; s < nd_index_nshards(ixs[x]); s++) {
			int copies[ND_CL_MAX_COPIES];
			int nc = cl_shard_copies(cl, ixs[x], s, copies);
			cl_route ro;
			int p = cl_route_get(cl, name, s, &ro) && ro.primary >= 0 ? ro.primary
			                                                          : copies[0];
			double d = stat_of(stats, p, name, STAT_DOCS, s);
			if (d >= 0) {
				docs += d;
				deleted += stat_of(stats, p, name, STAT_DELETED, s);
				pbytes += stat_of(stats, p, name, STAT_BYTES, s);
			}
			for (int c = 0; c < nc; c++) {
				double b = stat_of(stats, copies[c], name, STAT_BYTES, s);
				if (b > 0)
					bytes += b;
			}
		}
		char b1[32], b2[32];
		cm_buf_printf(
		    out, "%s %s %s %s %d %d %.0f %.0f %s %s\n", index_health(cl, ixs[x]),
		    nd_index_closed(ixs[x]) ? "close" : "open", name,
		    nd_index_uuid(ixs[x]), nd_index_nshards(ixs[x]),
		    nd_index_settings(ixs[x])->number_of_replicas, docs, deleted,
		    human_bytes(bytes, b1, sizeof(b1)), human_bytes(pbytes, b2, sizeof(b2)));
	}
	stats_free(cl, stats);
}

cJSON *
nd_cluster_state_json(nd_cluster *cl)
{
	pthread_mutex_lock(&cl->meta_lock);
	cJSON *j = cl_state_json_locked(cl, cl->state, true, true);
	pthread_mutex_unlock(&cl->meta_lock);
	return j;
}

cJSON *
cl_state_json_locked(nd_cluster *cl, const rp_state *st, bool with_nodes, bool with_routing)
{
	cJSON *j = cJSON_CreateObject(), *nodes, *rt, *rti;
	int master = cl->master;
	cJSON_AddNumberToObject(j, "version", (double)st->version);
	cJSON_AddStringToObject(j, "master_node",
	                        master >= 0 && cl_alive(cl, master) ? cl->nodes[master].name : "");
	nodes = with_nodes ? cJSON_AddObjectToObject(j, "nodes") : NULL;
	for (int i = 0; nodes && i < cl->nn; i++) {
		if (!cl_alive(cl, i))
			continue;
		cJSON *o = cJSON_AddObjectToObject(nodes, cl->nodes[i].name);
		cJSON_AddStringToObject(o, "name", cl->nodes[i].name);
		cJSON_AddStringToObject(o, "ephemeral_id", cl->nodes[i].name);
		cJSON_AddStringToObject(o, "transport_address",
		                        strstr(cl->nodes[i].transport, "://")
		                            ? strstr(cl->nodes[i].transport, "://") + 3
		                            : cl->nodes[i].transport);
		cJSON_AddObjectToObject(o, "attributes");
		cJSON *roles = cJSON_AddArrayToObject(o, "roles");
		if (cl->nodes[i].data)
			cJSON_AddItemToArray(roles, cJSON_CreateString("data"));
		if (cl->nodes[i].master)
			cJSON_AddItemToArray(roles, cJSON_CreateString("master"));
	}
	if (!with_routing)
		return j;
	rt = cJSON_AddObjectToObject(j, "routing_table");
	rti = cJSON_AddObjectToObject(rt, "indices");
	for (size_t x = 0; x < st->nindices; x++) {
		const rp_index *e = &st->indices[x];
		cJSON *sh =
		    cJSON_AddObjectToObject(cJSON_AddObjectToObject(rti, e->name), "shards");
		for (int s = 0; s < e->nshards; s++) {
			char k[16];
			const rp_route *ro = &e->routes[s];
			snprintf(k, sizeof(k), "%d", s);
			cJSON *a = cJSON_AddArrayToObject(sh, k);
			for (int c = 0; c < ro->ncopies; c++) {
				int nd = ro->copies[c];
				bool in = (ro->in_sync >> nd) & 1;
				cJSON *o = cJSON_CreateObject();
				cJSON_AddStringToObject(o, "state",
				                        !cl_alive(cl, nd) ? "UNASSIGNED"
				                        : in              ? "STARTED"
				                                          : "INITIALIZING");
				cJSON_AddBoolToObject(o, "primary", nd == ro->primary);
				if (cl_alive(cl, nd))
					cJSON_AddStringToObject(o, "node", cl->nodes[nd].name);
				else
					cJSON_AddNullToObject(o, "node");
				cJSON_AddNumberToObject(o, "shard", s);
				cJSON_AddStringToObject(o, "index", e->name);
				cJSON_AddNumberToObject(o, "primary_term", (double)ro->term);
				cJSON_AddItemToArray(a, o);
			}
		}
	}
	return j;
}

void
nd_cluster_cat_allocation(nd_cluster *cl, cm_buf *out)
{
	int per[ND_CL_MAX_NODES] = {0}, unassigned = 0;
	nd_index **all;
	size_t nall;
	nd_index_list(cl->node, &all, &nall);
	for (size_t x = 0; x < nall; x++) {
		int want = 1 + nd_index_settings(all[x])->number_of_replicas;
		for (int s = 0; s < nd_index_nshards(all[x]); s++) {
			int copies[ND_CL_MAX_COPIES];
			int nc = cl_shard_copies(cl, all[x], s, copies), live = 0;
			for (int c = 0; c < nc; c++)
				if (copies[c] >= 0 && copies[c] < ND_CL_MAX_NODES) {
					per[copies[c]]++;
					live += cl_alive(cl, copies[c]);
				}
			unassigned += want > live ? want - live : 0;
		}
		nd_index_release(all[x]);
	}
	cm_free(MEM, all);
	for (int i = 0; i < cl->nn; i++) {
		const nd_cl_node *nd = &cl->nodes[i];
		if (!nd->data || !cl_alive(cl, i))
			continue;
		char host[ND_CL_ADDR];
		snprintf(host, sizeof(host), "%s", nd->http);
		char *colon = strrchr(host, ':');
		if (colon)
			*colon = 0;
		cm_buf_printf(out, "%d %s %s %s\n", per[i], host, host, nd->name);
	}
	if (unassigned)
		cm_buf_printf(out, "%d   UNASSIGNED\n", unassigned);
}

void
nd_cluster_cat_master(nd_cluster *cl, cm_buf *out)
{
	int m = cl->master;
	if (m < 0 || !cl_alive(cl, m))
		return;
	char host[ND_CL_ADDR];
	snprintf(host, sizeof(host), "%s", cl->nodes[m].http);
	char *colon = strrchr(host, ':');
	if (colon)
		*colon = 0;
	cm_buf_printf(out, "%s %s %s %s\n", cl->nodes[m].name, host, host, cl->nodes[m].name);
}
