/* Cluster writes: every batch to its shard's primary (in process when it
 * is here), which forwards to the in-sync replicas before it answers;
 * batches whose primary moved are retried against the new routing within
 * the request's deadline. The replica's side of a write, and the write
 * hooks of the solo code paths. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../proto/pr.h"
#include "nd_cluster_private.h"
#include "nd_private.h"

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

/* A conditional write refused on the primary (if_seq_no, op_type=create,
 * an external version) is answered 409 only once the version it conflicts
 * with is on every in-sync copy (the global checkpoint reached it): that
 * version's write may still be on its way and fail, be undone by a
 * failover, and the 409 would then stand on a value that never was (found
 * by the fault scenarios). Waits at most 2 s, then answers 503 instead:
 * the outcome is not known, and nothing was written. */
static void
conflict_committed(nd_index *ix, int shard, const st_op *op, st_op_result *r)
{
	st_shard *s = nd_index_shard(ix, shard);
	st_doc_meta meta;
	cm_buf src;
	cm_buf_init(&src, MEM);
	cm_err rc = st_shard_get(s, op->id, op->id_len, &meta, &src);
	cm_buf_free(&src);
	if (rc)
		return; /* a delete: its tombstone's write is judged as the doc's would be */
	uint64_t until = cm_now_ns() + 2000000000ull;
	for (;;) {
		uint64_t g = st_shard_global_checkpoint(s);
		if (g != ST_NO_SEQ && g >= meta.seq_no)
			return;
		if (cm_now_ns() >= until)
			break;
		usleep(1000);
	}
	r->err = CM_EUNAVAIL;
	snprintf(r->reason, sizeof(r->reason),
	         "[%s][%d]: the version this write conflicts with is not yet on every in-sync "
	         "copy: nothing was written, retry",
	         nd_index_name(ix), shard);
}

static cm_err
apply_copy(nd_cluster *cl, nd_index *ix, int shard, const st_op *ops, size_t n, st_op_result *res,
           bool replica, bool prepare, uint64_t deadline_ns)
{
	st_op *ok = cm_calloc(MEM, n + 1, sizeof(st_op));
	size_t *map = cm_calloc(MEM, n + 1, sizeof(size_t));
	st_op_result *ores = cm_calloc(MEM, n + 1, sizeof(st_op_result));
	size_t k = 0, np = 0;
	cm_err rc = CM_OK;
	nd_prep *pr = prepare ? cm_calloc(MEM, n + 1, sizeof(nd_prep)) : NULL;

	/* the documents parsed under the local mapping on every core */
	for (size_t i = 0; prepare && i < n; i++)
		if (ops[i].type == ST_OP_INDEX)
			pr[np++] = (nd_prep){.ix = ix,
			                     .id = ops[i].id,
			                     .id_len = ops[i].id_len,
			                     .src = ops[i].source,
			                     .len = ops[i].source_len};
	if (np)
		nd_index_prepare_docs(cl->node, pr, np);
	np = 0;
	for (size_t i = 0; i < n; i++) {
		memset(&res[i], 0, sizeof(res[i]));
		if (prepare && ops[i].type == ST_OP_INDEX) {
			const nd_prep *p = &pr[np++];
			if (p->rc) {
				res[i].err = p->err.code ? p->err.code : CM_EMAPPING;
				snprintf(res[i].reason, sizeof(res[i].reason), "%.250s", p->err.reason);
				continue;
			}
		}
		map[k] = i;
		ok[k++] = ops[i];
	}
	cm_free(MEM, pr);
	if (k) {
		rc = replica ? nd_index_apply(ix, shard, ok, k, ores)
		             : rp_primary_apply(cl->rp, ix, nd_index_name(ix), nd_index_uuid(ix),
		                                shard, ok, k, ores, deadline_ns);
		for (size_t j = 0; !replica && !rc && j < k; j++)
			if (ores[j].err == CM_ECONFLICT)
				conflict_committed(ix, shard, &ok[j], &ores[j]);
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
	/* every index the batches wrote to, once each, in one change */
	nd_index **ixs = cm_calloc(MEM, nb + 1, sizeof(nd_index *));
	size_t n = 0;
	for (size_t i = 0; i < nb; i++) {
		bool seen = false;
		for (size_t k = 0; k < n && !seen; k++)
			seen = ixs[k] == b[i].ix;
		if (!seen)
			ixs[n++] = b[i].ix;
	}
	cl_publish_mappings(cl, ixs, n);
	cm_free(MEM, ixs);
}


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
