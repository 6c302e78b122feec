/* Cluster searches: the fan-out of one request to one copy of every
 * shard (local shards in process, remote ones grouped per node), merged
 * in arrival order; hedged requests and their cancels, copies retried
 * within the deadline; and the data node's side (cl_serve_search). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../proto/pr.h"
#include "nd_cluster_private.h"
#include "nd_private.h"
#include "nd_rank.h"
#include "nd_stats.h"

#define MEM CM_MEM_NODE
#define DEFAULT_DEADLINE_NS 30000000000ull
#define UNREACHABLE_DEADLINE_NS 300000000ull /* as nd_cluster_get.c gives such a node */

/* ================= reads ================= */

cm_err
nd_cl_request_build(const char *body, size_t len, bool typed_keys, sr_request *req,
                    cm_error *err)
{
	cJSON *j = len ? cJSON_ParseWithLength(body, len) : cJSON_CreateObject();
	cm_err rc;

	if (!j || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return cm_error_set(err, CM_EPARSE, "malformed search body");
	}
	rc = sr_request_from_json(j, req, err);
	if (!rc && typed_keys)
		req->typed_keys = true;
	if (!rc && req->suggest)
		sr_suggest_set_typed_keys(req->suggest, req->typed_keys);
	cJSON_Delete(j);
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
	cm_err rc = nd_search_shard_cached(t->ix, t->shard, r, t->ordinal, t->req, NULL, &t->res, &e);
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
	t->took_ns = cm_now_ns() - t0;
	nd_index_count_search(t->ix, t->req, t->took_ns, !rc, false);
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

static int
hit_by_shard(const void *a, const void *b)
{
	const sr_hit *x = *(sr_hit *const *)a, *y = *(sr_hit *const *)b;
	return (x->shard > y->shard) - (x->shard < y->shard);
}

/* The fetch phase of a per-node merge: the documents of the hits kept,
 * each from the shard (by its request-wide ordinal) that found it. */
static cm_err
fetch_merged(local_shard *ts, size_t n, const sr_request *req, sr_shard_result *merged,
             cm_error *err)
{
	if (!merged->nhits)
		return CM_OK;
	sr_hit **hits = cm_malloc(MEM, merged->nhits * sizeof(*hits));
	for (size_t i = 0; i < merged->nhits; i++)
		hits[i] = &merged->hits[i];
	qsort(hits, merged->nhits, sizeof(*hits), hit_by_shard);
	cm_err rc = CM_OK;
	for (size_t i = 0, e; i < merged->nhits && !rc; i = e) {
		for (e = i; e < merged->nhits && hits[e]->shard == hits[i]->shard;)
			e++;
		size_t t = 0;
		while (t < n && ts[t].ordinal != hits[i]->shard)
			t++;
		rc = t < n ? sr_fetch_hits(ts[t].reader, req, hits + i, e - i, err)
		           : cm_error_set(err, CM_EINTERNAL, "a merged hit of no shard [%u]",
		                          hits[i]->shard);
	}
	cm_free(MEM, hits);
	return rc;
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
	if (nd_cl_request_build(rq.body, rq.body_len, rq.typed_keys, &req, &err))
		goto fail;
	req.cancel = cancel;
	req.cache_key = rq.body; /* the shard request cache's key */
	req.cache_key_len = rq.body_len;
	req.request_cache = rq.request_cache == 2   ? SR_RC_TRUE
	                    : rq.request_cache == 1 ? SR_RC_FALSE
	                                            : SR_RC_UNSET;
	ts = cm_calloc(MEM, rq.nshards + 1, sizeof(local_shard));
	ptrs = cm_calloc(MEM, rq.nshards + 1, sizeof(*ptrs));
	/* The request-wide shard numbers, so ties break as on the coordinator. */
	bool use_ords = rq.nordinals == rq.nshards && rq.nshards > 0;
	uint32_t max_ord = 0;
	for (size_t i = 0; i < rq.nshards; i++) {
		if ((int)rq.shards[i] >= nd_index_nshards(ix)) {
			cm_error_set(&err, CM_EINVAL, "no shard [%u] in [%s]", rq.shards[i],
			             rq.index);
			goto fail;
		}
		if (!holds_copy(cl, rq.index, (int)rq.shards[i])) {
			/* the coordinator's routing is older than ours: it tries
			 * the shard's next copy */
			cm_error_set(&err, CM_EUNAVAIL, "node [%s] holds no copy of [%s][%u]",
			             cl->nodes[cl->self].name, rq.index, rq.shards[i]);
			goto fail;
		}
		uint32_t ord = use_ords && rq.ordinals[i] < 1000000 ? rq.ordinals[i] : rq.shards[i];
		if (ord > max_ord)
			max_ord = ord;
		ts[i] = (local_shard){.ix = ix,
		                      .shard = (int)rq.shards[i],
		                      .ordinal = ord,
		                      .req = &req,
		                      .node_id = cl->nodes[cl->self].name};
	}
	/* Per-node mode over several shards: query then fetch, as a solo
	 * node does (nd_search_fanout): the shards' query phase, merged here,
	 * then the documents of the hits the merge kept, not from+size per
	 * shard. The copy shares the request's parts and is never freed. */
	bool per_node = rq.per_node && rq.nshards > 1 && use_ords;
	sr_request query_phase;
	if (per_node && sr_fetch_deferrable(&req)) {
		query_phase = req;
		query_phase.query_phase_only = true;
		for (size_t i = 0; i < rq.nshards; i++)
			ts[i].req = &query_phase;
	}
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
	/* Service time per shard and this node's load, shown in the
	 * coordinator's _nodes/stats adaptive_selection (not ranked on). */
	meta = cm_calloc(MEM, 1, sizeof(*meta));
	for (size_t i = 0; i < rq.nshards && i < PR_MAX_SERVICE; i++)
		meta->service_us[meta->nservice++] = ts[i].took_ns / 1000;
	meta->queue = nd_rank_serving(0) - 1;
	if (per_node) {
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
		if (ts[0].req != &req && fetch_merged(ts, rq.nshards, &req, &merged, &err)) {
			sr_shard_result_free(&merged);
			sr_merger_destroy(m);
			for (size_t i = 0; i < rq.nshards; i++)
				sr_shard_result_free(&ts[i].res);
			goto fail;
		}
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
	for (size_t i = 0; ts && i < rq.nshards; i++)
		st_reader_release(ts[i].reader);
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
	bool held;      /* the node was held unreachable when sent */
	bool connected; /* a connection to the node was up when sent */
	cm_buf msg;
} node_group;

struct search_st {
	nd_cluster *cl;
	sr_request req;
	sr_merger *m;
	pthread_mutex_t lock;
	cm_wait *w;
	char *body; /* owned: a hedge may be sent from the timer thread */
	bool typed_keys;
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
		/* timed out: the request's own deadline passed; a copy that did
		 * not answer within the short wait an unreachable node gets is a
		 * shard failure, as Elasticsearch reports a disconnected node */
		if (res->error.code == CM_ETIMEDOUT && cm_now_ns() >= S->deadline_ns)
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

/* An attempt of j on node failed with e; another copy is tried when no
 * other attempt is still out. */
static void
job_failed_err(shard_job *j, int node, const cm_error *e)
{
	search_st *S = j->S;
	if (e->code == CM_EUNAVAIL)
		cl_mark(S->cl, node, false, 0);
	pthread_mutex_lock(&S->lock);
	bool retry = !j->done && j->inflight == 0;
	if (!j->done) {
		j->last = *e;
		j->node = node;
	}
	pthread_mutex_unlock(&S->lock);
	if (retry)
		dispatch(j);
}

static void
job_failed(shard_job *j, int node, cm_err rc, const char *why)
{
	cm_error e;
	cm_error_clear(&e);
	cm_error_set(&e, rc, "shard [%s][%d] on node [%s]: %s", j->ixname, j->shard,
	             j->S->cl->nodes[node].name, why);
	job_failed_err(j, node, &e);
}

/* The transport could not reach g's node for j: named as Elasticsearch
 * names an unreachable node (a node held unreachable that stays silent
 * within its short wait is not a timeout of the request). */
static void
job_unreachable(shard_job *j, const node_group *g, cm_err rc)
{
	char prefix[160];
	cm_error e;
	snprintf(prefix, sizeof(prefix), "shard [%s][%d]: ", j->ixname, j->shard);
	cm_error_clear(&e);
	cl_call_failed(j->S->cl, g->node, rc, g->connected,
	               g->held && cm_now_ns() < j->S->deadline_ns, prefix, &e);
	job_failed_err(j, g->node, &e);
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
		} else if (!e.code && (rc == CM_EUNAVAIL || rc == CM_ETIMEDOUT)) {
			for (size_t i = 0; i < g->n; i++)
				if (live[i])
					job_unreachable(g->jobs[i], g, rc);
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
	uint32_t *ords = cm_calloc(MEM, n + 1, sizeof(uint32_t));
	g->S = S;
	g->node = node;
	g->jobs = cm_calloc(MEM, n + 1, sizeof(shard_job *));
	g->n = n;
	g->hedge = hedge;
	g->id = nd_rank_cancel_id();
	for (size_t i = 0; i < n; i++) {
		g->jobs[i] = jobs[i];
		shards[i] = (uint32_t)jobs[i]->shard;
		ords[i] = jobs[i]->ordinal;
	}
	pr_search_req rq = {.index = (char *)jobs[0]->ixname,
	                    .index_uuid = (char *)"",
	                    .shards = shards,
	                    .nshards = n,
	                    .body = S->body,
	                    .body_len = strlen(S->body),
	                    .ordinals = ords,
	                    .nordinals = n > 1 ? n : 0,
	                    .typed_keys = S->typed_keys,
	                    .request_cache = (uint32_t)S->req.request_cache,
	                    .per_node = n > 1,
	                    .cancel_id = S->hedge ? g->id : 0};
	cm_buf_init(&g->msg, MEM);
	pr_search_req_encode(&rq, &g->msg);
	cm_free(MEM, ords);
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
	/* A node held unreachable (its last copy, or a hedge's target) may be
	 * back already, as its pings lag: asked, but with the short deadline
	 * cl_call and a realtime get give it, so that a coordinator cut off
	 * from it answers partial (or the error) at once, not at the deadline. */
	g->held = !cl_alive(S->cl, node);
	if (g->held && deadline > g->t_sent + UNREACHABLE_DEADLINE_NS)
		deadline = g->t_sent + UNREACHABLE_DEADLINE_NS;
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
	nd_peer *peer = S->cl->nodes[node].peer;
	g->connected = nd_peer_connected(peer);
	nd_peer_call(peer, PR_SEARCH, g->msg.data, g->msg.len, deadline, group_reply, g);
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
	/* no copy to ask: ES's NoShardAvailableActionException (the error is
	 * set already, so its type is named here, not through cm_error_set) */
	if (fr.error.code == CM_EUNAVAIL && !fr.error.type_override[0])
		snprintf(fr.error.type_override, sizeof(fr.error.type_override), "%s",
		         "no_shard_available_action_exception");
	if (j->norder == 0 || j->next == 0)
		j->node = S->cl->self;
	if (!j->t_sent)
		j->t_sent = cm_now_ns();
	job_finish_ok(j, &fr, NULL);
}

cm_err
nd_cluster_search(nd_cluster *cl, nd_index **ixs, size_t n, const char *body,
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
	S->typed_keys = o && o->typed_keys;
	S->deadline_ns = o && o->deadline_ns ? o->deadline_ns : t0 + DEFAULT_DEADLINE_NS;
	S->refs = 1;
	pthread_mutex_init(&S->lock, NULL);
	sr_request_init(&S->req);
	nd_rank_config(&S->cfg);
	S->hedge =
	    S->cfg.hedge && mode != ND_CL_FANOUT_SERIAL && cl_pref_hedges(nd_cl_pref_copies(pref));
	if (o && o->parsed) {
		S->req = *o->parsed; /* moved: parsed once, on the node the request reached */
		sr_request_init(o->parsed);
	}
	S->req.cache_key = S->body; /* the shard request cache's key, as remote shards get it */
	S->req.cache_key_len = strlen(S->body);
	if ((rc = nd_cl_preference_check(pref, err)) ||
	    (!(o && o->parsed) &&
	     (rc = nd_cl_request_build(S->body, strlen(S->body), S->typed_keys, &S->req, err)))) {
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
			jobs[k].norder = cl_copy_order(cl, ixs[i], s, nd_cl_pref_copies(pref), &S->cfg,
			                               jobs[k].order);
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

