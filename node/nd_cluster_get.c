/* Realtime gets from a shard's copies, the figures and recovery rows a
 * node reports about its own copies, node views, and the one typed call
 * helper (cl_call) the cluster calls share. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <string.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../proto/pr.h"
#include "nd_cluster_private.h"
#include "nd_private.h"
#include "nd_rank.h"
#include "nd_snap.h"
#include "nd_stats.h"

#define MEM CM_MEM_NODE

/* ================= gets and stats ================= */

/* A realtime get of this node's copy. On the shard's primary, a version
 * whose write is still on its way to the in-sync replicas is not answered
 * until every in-sync copy holds it (the global checkpoint reached it):
 * that write may yet fail and be undone by a failover, and a read of it
 * would then have seen a value that never was (found by the fault
 * scenarios). It waits at most 2 s, then answers 503. */
static cm_err
local_get(nd_cluster *cl, nd_index *ix, int shard, const char *id, size_t len, bool refreshed,
          st_doc_meta *meta, cm_buf *src, cm_error *err)
{
	st_shard *s = nd_index_shard(ix, shard);
	size_t mark = src->len;
	if (refreshed) /* what a search sees: no realtime guarantee to wait for */
		return st_shard_get_refreshed(s, id, len, meta, src);
	cm_err rc = st_shard_get(s, id, len, meta, src);
	cl_route ro;
	if (rc || !cl || !cl_route_get(cl, nd_index_name(ix), shard, &ro) || ro.primary != cl->self)
		return rc;
	uint64_t until = cm_now_ns() + 2000000000ull;
	for (;;) {
		uint64_t g = st_shard_global_checkpoint(s);
		cl_route now;
		/* still the primary of the same term: a failover while it waited
		 * makes what it read a value the new primary may have replaced */
		if (g != ST_NO_SEQ && g >= meta->seq_no && cl_route_get(cl, nd_index_name(ix), shard, &now) &&
		    now.primary == cl->self && now.term == ro.term)
			return CM_OK;
		if (cm_now_ns() >= until)
			break;
		usleep(1000);
	}
	src->len = mark;
	return cm_error_set(err, CM_EUNAVAIL,
	                    "[%s][%d]: the document's latest write is not yet on every in-sync copy "
	                    "of the shard",
	                    nd_index_name(ix), shard);
}

void
cl_local_stats(nd_cluster *cl, pr_shard_stats *out)
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

/* Whether this node's copy of the shard is in the in-sync set as this
 * node's own state has it. A node asks copies by its own routing, which
 * may be older: a copy the master has since taken out (a failover that
 * left it behind, now recovering) may hold a write the new primary never
 * had, or miss acknowledged ones, and must not answer (found by fault
 * scenario P1: the old master's GET, sent on by its stale routing, was
 * answered by such a copy with a version the new primary had replaced). */
static bool
copy_in_sync(nd_cluster *cl, const char *index, int shard, cm_error *err)
{
	cl_route ro;
	if (!cl_route_get(cl, index, shard, &ro) || ((ro.in_sync >> cl->self) & 1))
		return true;
	cm_error_set(err, CM_EUNAVAIL,
	             "[%s][%d]: the copy on node [%s] is not in sync (recovering or taken out): it "
	             "does not answer realtime gets",
	             index, shard, cl->nodes[cl->self].name);
	return false;
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
	if (pr_get_req_decode(p, len, &g, &err) == CM_OK && cl_may_serve_reads(cl, &err)) {
		if (!(ix = nd_index_get(cl->node, g.index))) {
			cm_error_set(&err, CM_ENOINDEX, "no such index [%s]", g.index);
		} else if (g.shard >= (uint32_t)nd_index_nshards(ix)) {
			cm_error_set(&err, CM_EINVAL, "index [%s] has no shard [%u]", g.index,
			             g.shard);
		} else if (!g.any_copy && !copy_in_sync(cl, g.index, (int)g.shard, &err)) {
			/* the asking node's routing is older than ours: the next copy */
		} else {
			cm_error e2;
			cm_error_clear(&e2);
			cm_err rc = local_get(cl, ix, (int)g.shard, g.id, g.id_len, g.refreshed,
			                      &meta, &src, &e2);
			if (rc == CM_OK || rc == CM_ENOTFOUND)
				pr_get_reply_encode(rc == CM_OK, &meta, src.data, src.len, &out);
			else if (e2.code)
				err = e2;
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
	cl_local_stats(cl, &st);
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
cl_call_failed(nd_cluster *cl, int node, cm_err rc, bool connected, bool held, const char *prefix,
               cm_error *err)
{
	const char *name = cl->nodes[node].name, *addr = cl->nodes[node].transport;
	const char *sep = strstr(addr, "://");
	addr = sep ? sep + 3 : addr;
	if (rc == CM_EUNAVAIL && !connected)
		return cm_error_set_type(err, rc, "connect_transport_exception",
		                         "%s[%s][%s] connect_exception: no connection to the node",
		                         prefix, name, addr);
	if (rc == CM_EUNAVAIL || (rc == CM_ETIMEDOUT && held))
		return cm_error_set_type(err, rc, "node_not_connected_exception",
		                         "%s[%s][%s] Node not connected", prefix, name, addr);
	return cm_error_set(err, rc, "%snode [%s] did not answer (%s)", prefix, name,
	                    cm_err_msg(rc));
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
	nd_peer *peer = cl->nodes[node].peer;
	bool held = !cl_alive(cl, node), connected = nd_peer_connected(peer);
	/* a node held unreachable may be back already (its pings lag): asked
	 * too, with a short deadline */
	rc = nd_peer_call_sync(peer, type, req->data, req->len,
	                       t0 + (held ? 300000000ull : 5000000000ull), &rtype, &rep);
	if (rc) {
		if (rc == CM_EUNAVAIL)
			cl_mark(cl, node, false, 0);
		cl_call_failed(cl, node, rc, connected, held, "", err);
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
               bool refreshed, st_doc_meta *meta, cm_buf *source, cm_error *err)
{
	int order[ND_CL_MAX_COPIES], norder;
	cm_err rc = CM_EUNAVAIL;
	cm_buf req;

	nd_tail_cfg cfg;
	nd_rank_config(&cfg);
	if (nd_cl_preference_check(preference, err))
		return err->code;
	norder = cl_copy_order(cl, ix, shard, nd_cl_pref_copies(preference), &cfg, order);
	cm_error_set(err, CM_EUNAVAIL, "no copy of shard [%s][%d] is available", nd_index_name(ix),
	             shard);
	cm_buf_init(&req, MEM);
	pr_get_req g = {.index = (char *)(uintptr_t)nd_index_name(ix),
	                .shard = (uint32_t)shard,
	                .id = (char *)(uintptr_t)id,
	                .id_len = strlen(id),
	                .any_copy = preference && strncmp(preference, "_only_nodes:", 12) == 0,
	                .refreshed = refreshed};
	pr_get_req_encode(&g, &req);
	for (int i = 0; i < norder; i++) {
		int node = order[i];
		if (node == cl->self) {
			cm_error e;
			cm_error_clear(&e);
			/* possibly stale here: the next copy. The in-sync test again
			 * after: waiting for the master's state may have taken this
			 * copy out (a GET that waited then read the copy its node had
			 * just been told was out: fault scenario P2) */
			if (!cl_may_serve_reads(cl, &e) ||
			    (!g.any_copy && !copy_in_sync(cl, nd_index_name(ix), shard, &e))) {
				*err = e;
				rc = CM_EUNAVAIL;
				continue;
			}
			cm_error_clear(err);
			rc = local_get(cl, ix, shard, id, strlen(id), refreshed, meta, source, err);
			break;
		}
		if (!cl_alive(cl, node) && i + 1 < norder)
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


cm_err
nd_routed_get(nd_index *ix, int shard, const char *id, size_t len, const nd_req_opts *o,
              st_doc_meta *meta, cm_buf *source)
{
	nd_cluster *cl = nd_cluster_of(ix->node);
	cm_error e;
	char idbuf[1024];
	if (!cl)
		return o && o->refreshed
		           ? st_shard_get_refreshed(nd_index_shard(ix, shard), id, len, meta,
		                                    source)
		           : st_shard_get(nd_index_shard(ix, shard), id, len, meta, source);
	if (len >= sizeof(idbuf))
		return CM_EINVAL;
	memcpy(idbuf, id, len);
	idbuf[len] = 0;
	cm_error_clear(&e);
	cm_err rc = nd_cluster_get(cl, ix, shard, idbuf, o ? o->preference : NULL,
	                           o && o->refreshed, meta, source, &e);
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
