/* The cluster's REST views built from the state and every node's
 * figures: health, _cat (nodes, shards, indices, allocation, master,
 * recovery), _cluster/state, and the _nodes gathering. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/cm_alloc.h"
#include "../proto/pr.h"
#include "nd_cluster_private.h"

#define MEM CM_MEM_NODE

/* ================= cluster views ================= */

/* The figures every node holds, one entry per index: stats[i] is node i's. */
static void gather_stats(nd_cluster *cl, pr_shard_stats *stats);
typedef enum { STAT_DOCS, STAT_BYTES, STAT_DELETED } stat_kind;
static double stat_of(const pr_shard_stats *stats, int node, const char *index, stat_kind what,
                      int shard);
static void stats_free(nd_cluster *cl, pr_shard_stats *stats);

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
cl_shard_health_of(const cl_shard_view *v, cl_shard_health *h)
{
	int up = 0, init = 0;
	memset(h, 0, sizeof(*h));
	h->primary_up = v->routed ? v->primary >= 0 && ((v->alive >> v->primary) & 1)
	                          : v->ncopies > 0 && ((v->alive >> v->copies[0]) & 1);
	/* A copy counts when its node is up and it is in sync; a live copy
	 * outside the set is initializing (recovering). A node not yet taken
	 * in since it (re)started is about to leave the in-sync sets and
	 * recover. */
	for (int c = 0; c < v->ncopies; c++) {
		int node = v->copies[c];
		if (!((v->alive >> node) & 1))
			continue;
		if ((!v->routed || ((v->in_sync >> node) & 1)) && ((v->joined >> node) & 1))
			up++;
		else
			init++;
	}
	/* a copy moving: its new copy is the relocation, not one more */
	if (v->routed && v->relocating_from >= 0) {
		h->relocating = true;
		if (init > 0)
			init--;
	} else if (up > v->want) {
		/* a copy more than wanted, leaving once its primary has handed
		 * over: still moving */
		h->relocating = true;
	}
	h->yellow = up < v->want;
	if (up > v->want)
		up = v->want;
	h->active = up;
	h->initializing = init;
	h->unassigned = v->want - up - init > 0 ? v->want - up - init : 0;
}

/* The view of shard s of ix that cl_shard_health_of reads. */
static void
shard_view(nd_cluster *cl, nd_index *ix, int s, int *copies, cl_shard_view *v)
{
	cl_route ro;
	memset(v, 0, sizeof(*v));
	v->copies = copies;
	v->ncopies = cl_shard_copies(cl, ix, s, copies);
	v->routed = cl_route_get(cl, nd_index_name(ix), s, &ro);
	v->in_sync = ro.in_sync;
	v->primary = ro.primary;
	v->relocating_from = v->routed ? ro.relocating_from : -1;
	v->want = 1 + nd_index_settings(ix)->number_of_replicas;
	for (int i = 0; i < cl->nn && i < ND_CL_MAX_NODES; i++) {
		v->alive |= (uint64_t)cl_alive(cl, i) << i;
		v->joined |= (uint64_t)cl_node_joined(cl, i) << i;
	}
}

void
nd_cluster_health(nd_cluster *cl, nd_index *const *ixs, size_t n, cm_buf *out)
{
	nd_index **all = NULL;
	nd_index *const *list = ixs;
	size_t nall = n;
	int prim = 0, active = 0, unassigned = 0, red = 0, yellow = 0, initializing = 0;
	int relocating = 0;
	cJSON *j = cJSON_CreateObject();

	if (!ixs) {
		nd_index_list(cl->node, &all, &nall);
		list = all;
	}
	for (size_t i = 0; i < nall; i++) {
		for (int s = 0; s < nd_index_nshards(list[i]); s++) {
			int copies[ND_CL_MAX_COPIES];
			cl_shard_view v;
			cl_shard_health h;
			shard_view(cl, list[i], s, copies, &v);
			cl_shard_health_of(&v, &h);
			prim += h.primary_up;
			red += !h.primary_up;
			relocating += h.relocating;
			active += h.active;
			initializing += h.initializing;
			unassigned += h.unassigned;
			yellow += h.yellow;
		}
	}
	for (size_t i = 0; all && i < nall; i++)
		nd_index_release(all[i]);
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
	pr_shard_stats *stats = cm_calloc(MEM, ND_CL_MAX_NODES + 1, sizeof(pr_shard_stats));
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
				/* the ip column: the host of the node's HTTP address */
				const char *h = cl->nodes[node].http, *colon = strrchr(h, ':');
				int hl = colon ? (int)(colon - h) : (int)strlen(h);
				if (up && docs >= 0)
					cm_buf_printf(out, "%s %d %s %s %lld %.*s %s\n", name, s,
					              prim ? "p" : "r",
					              moving   ? "RELOCATING"
					              : insync ? "STARTED"
					                       : "INITIALIZING",
					              docs, hl > 0 ? hl : 9,
					              hl > 0 ? h : "127.0.0.1",
					              cl->nodes[node].name);
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
static int
by_index_name(const void *a, const void *b)
{
	return strcmp(((const pr_index_stats *)a)->index, ((const pr_index_stats *)b)->index);
}

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
			cl_local_stats(cl, &stats[i]);
		} else if (cl->nodes[i].data) {
			if (!cl_call(cl, i, PR_SHARD_STATS, &req, &body, &len, &e) &&
			    pr_shard_stats_decode(body, len, &stats[i], &e))
				pr_shard_stats_free(&stats[i]); /* a node that says nothing */
			cm_free(MEM, body);
		}
		if (stats[i].n > 1)
			qsort(stats[i].indices, stats[i].n, sizeof(pr_index_stats), by_index_name);
	}
	cm_buf_free(&req);
}

static void
stats_free(nd_cluster *cl, pr_shard_stats *stats)
{
	(void)cl;
	/* sized for every slot: on etcd a node may join while the stats are
	 * gathered */
	for (int i = 0; i < ND_CL_MAX_NODES; i++)
		pr_shard_stats_free(&stats[i]);
	cm_free(MEM, stats);
}

/* One figure of a shard copy on node; -1 when the node did not say. */
static double
stat_of(const pr_shard_stats *stats, int node, const char *index, stat_kind what, int shard)
{
	if (node < 0 || node >= ND_CL_MAX_NODES)
		return -1;
	const pr_shard_stats *st = &stats[node];
	/* sorted by name (gather_stats): one row of _cat/shards costs a
	 * binary search, not a scan of every index the node holds */
	size_t lo = 0, hi = st->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const pr_index_stats *e = &st->indices[mid];
		int c = strcmp(e->index, index);
		if (c < 0) {
			lo = mid + 1;
		} else if (c > 0) {
			hi = mid;
		} else {
			if (shard < 0 || (size_t)shard >= e->nshards)
				return -1;
			const uint64_t *v = what == STAT_DOCS    ? e->docs
			                    : what == STAT_BYTES ? e->store_bytes
			                                         : e->deleted;
			return (double)v[shard];
		}
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
	for (int s = 0; s < nd_index_nshards(ix); s++) {
		int copies[ND_CL_MAX_COPIES];
		cl_shard_view v;
		cl_shard_health h;
		shard_view(cl, ix, s, copies, &v);
		cl_shard_health_of(&v, &h);
		red = red || !h.primary_up;
		yellow = yellow || h.yellow;
	}
	return red ? "red" : yellow ? "yellow" : "green";
}

void
nd_cluster_cat_indices(nd_cluster *cl, nd_index **ixs, size_t n, cm_buf *out)
{
	pr_shard_stats *stats = cm_calloc(MEM, ND_CL_MAX_NODES + 1, sizeof(pr_shard_stats));
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
		char b1[32], b2[32], cds[40];
		int64_t ms = nd_index_creation_ms(ixs[x]);
		time_t cs = (time_t)(ms / 1000);
		struct tm ctm;
		gmtime_r(&cs, &ctm);
		strftime(cds, sizeof(cds), "%Y-%m-%dT%H:%M:%S", &ctm);
		cm_buf_printf(out, "%s %s %s %s %d %d %.0f %.0f %s %s %lld %s.%03dZ\n",
		              index_health(cl, ixs[x]), nd_index_closed(ixs[x]) ? "close" : "open",
		              name, nd_index_uuid(ixs[x]), nd_index_nshards(ixs[x]),
		              nd_index_settings(ixs[x])->number_of_replicas, docs, deleted,
		              human_bytes(bytes, b1, sizeof(b1)),
		              human_bytes(pbytes, b2, sizeof(b2)), (long long)ms, cds,
		              (int)(ms % 1000));
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

