/* Live figures for the cluster page (nd_stats.h): the fan-out latency
 * registry and the node summaries. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "../proto/pr.h"
#include "nd_cluster_private.h"
#include "nd_hist.h"
#include "nd_stats.h"

#define MEM CM_MEM_NODE
#define IX_SLOTS 64 /* indices tracked; more fold into "_other" */
#define NAME_MAX_LEN 256
#define NODES_DEADLINE_NS 2000000000ull

/* One index: its histogram as coordinator, and one per node copy that
 * served it, each allocated on first use. */
typedef struct ix_slot {
	_Atomic int ready; /* name and coord set */
	char name[NAME_MAX_LEN];
	nd_hist *coord;
	nd_hist *_Atomic copy[ND_CL_MAX_NODES];
	_Atomic bool local[ND_CL_MAX_NODES];
} ix_slot;

static ix_slot slots[IX_SLOTS];
static ix_slot other_slot;
static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t mode_searches[3], shards_local, shards_remote, messages, inflight;

static uint32_t
name_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* The slot of an index, created on first use (under slots_mu). */
static ix_slot *
slot_of(const char *name)
{
	uint32_t h = name_hash(name);
	if (strlen(name) >= NAME_MAX_LEN)
		name = "_other";
	for (int probe = 0; probe < IX_SLOTS; probe++) {
		ix_slot *s = &slots[(h + (uint32_t)probe) % IX_SLOTS];
		if (atomic_load_explicit(&s->ready, memory_order_acquire)) {
			if (strcmp(s->name, name) == 0)
				return s;
			continue;
		}
		pthread_mutex_lock(&slots_mu);
		if (!atomic_load_explicit(&s->ready, memory_order_relaxed)) {
			snprintf(s->name, sizeof(s->name), "%s", name);
			s->coord = cm_calloc(MEM, 1, sizeof(nd_hist));
			atomic_store_explicit(&s->ready, 1, memory_order_release);
		}
		pthread_mutex_unlock(&slots_mu);
		if (strcmp(s->name, name) == 0)
			return s;
	}
	pthread_mutex_lock(&slots_mu);
	if (!atomic_load_explicit(&other_slot.ready, memory_order_relaxed)) {
		snprintf(other_slot.name, sizeof(other_slot.name), "_other");
		other_slot.coord = cm_calloc(MEM, 1, sizeof(nd_hist));
		atomic_store_explicit(&other_slot.ready, 1, memory_order_release);
	}
	pthread_mutex_unlock(&slots_mu);
	return &other_slot;
}

void
nd_stats_search(nd_index *const *ixs, size_t n, nd_cl_fanout mode, uint64_t ns)
{
	uint64_t now = cm_now_ns();
	if ((unsigned)mode < 3)
		atomic_fetch_add_explicit(&mode_searches[mode], 1, memory_order_relaxed);
	for (size_t i = 0; i < n; i++)
		nd_hist_record(slot_of(nd_index_name(ixs[i]))->coord, now, ns);
}

void
nd_stats_shard(const char *index, int node, bool local, uint64_t ns)
{
	ix_slot *s;
	nd_hist *h;
	if (node < 0 || node >= ND_CL_MAX_NODES)
		return;
	atomic_fetch_add_explicit(local ? &shards_local : &shards_remote, 1, memory_order_relaxed);
	s = slot_of(index);
	h = atomic_load_explicit(&s->copy[node], memory_order_acquire);
	if (!h) {
		nd_hist *fresh = cm_calloc(MEM, 1, sizeof(nd_hist));
		if (atomic_compare_exchange_strong(&s->copy[node], &h, fresh))
			h = fresh;
		else
			cm_free(MEM, fresh);
	}
	atomic_store_explicit(&s->local[node], local, memory_order_relaxed);
	nd_hist_record(h, cm_now_ns(), ns);
}

void
nd_stats_message(size_t nshards)
{
	(void)nshards;
	atomic_fetch_add_explicit(&messages, 1, memory_order_relaxed);
}

void
nd_stats_inflight(int delta)
{
	atomic_fetch_add_explicit(&inflight, (uint64_t)(int64_t)delta, memory_order_relaxed);
}

static uint64_t
ld(_Atomic uint64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}

static cJSON *
hist_json(nd_hist *h, uint64_t now)
{
	nd_hist_summary *s = cm_malloc(MEM, sizeof(*s));
	cJSON *o = cJSON_CreateObject(), *b;
	nd_hist_read(h, now, s);
	cJSON_AddNumberToObject(o, "count", (double)s->n);
	cJSON_AddNumberToObject(o, "mean_us", (double)(uint64_t)s->mean_us);
	cJSON_AddNumberToObject(o, "p50_us", (double)(uint64_t)s->p50_us);
	cJSON_AddNumberToObject(o, "p90_us", (double)(uint64_t)s->p90_us);
	cJSON_AddNumberToObject(o, "p99_us", (double)(uint64_t)s->p99_us);
	cJSON_AddNumberToObject(o, "max_us", s->max_us);
	/* the non-empty buckets: [lower_us, upper_us, count] */
	b = cJSON_AddArrayToObject(o, "buckets");
	for (int i = 0; i < ND_HIST_BUCKETS; i++) {
		if (!s->count[i])
			continue;
		cJSON *t = cJSON_CreateArray();
		cJSON_AddItemToArray(t, cJSON_CreateNumber((double)nd_hist_lower_us(i)));
		cJSON_AddItemToArray(t, cJSON_CreateNumber((double)nd_hist_upper_us(i)));
		cJSON_AddItemToArray(t, cJSON_CreateNumber((double)s->count[i]));
		cJSON_AddItemToArray(b, t);
	}
	cm_free(MEM, s);
	return o;
}

static const char *
node_name(nd_cluster *cl, int i)
{
	static const char local[] = "local";
	return cl && i < cl->nn ? cl->nodes[i].name : local;
}

static void
put_json(cJSON *j, cm_buf *out)
{
	char *s = cJSON_PrintUnformatted(j);
	cm_buf_put(out, s, strlen(s));
	cJSON_free(s);
	cJSON_Delete(j);
}

void
nd_cluster_fanout_json(nd_cluster *cl, cm_buf *out)
{
	static const char *const modes[] = {"serial", "per_shard", "per_node"};
	uint64_t now = cm_now_ns();
	cJSON *j = cJSON_CreateObject(), *f, *o, *ix;

	if (cl)
		cJSON_AddStringToObject(j, "node", cl->nodes[cl->self].name);
	cJSON_AddNumberToObject(j, "window_s", ND_HIST_SLOTS * (ND_HIST_SLOT_NS / 1000000000ull));
	cJSON_AddNumberToObject(j, "timestamp", (double)cm_wall_ms());
	f = cJSON_AddObjectToObject(j, "fanout");
	cJSON_AddStringToObject(f, "default", cl ? modes[cl->fanout] : "local");
	o = cJSON_AddObjectToObject(f, "searches");
	for (int m = 0; m < 3; m++)
		cJSON_AddNumberToObject(o, modes[m], (double)ld(&mode_searches[m]));
	o = cJSON_AddObjectToObject(f, "shard_requests");
	cJSON_AddNumberToObject(o, "local", (double)ld(&shards_local));
	cJSON_AddNumberToObject(o, "remote", (double)ld(&shards_remote));
	cJSON_AddNumberToObject(f, "messages", (double)ld(&messages));
	cJSON_AddNumberToObject(f, "in_flight", (double)(int64_t)ld(&inflight));
	ix = cJSON_AddObjectToObject(j, "indices");
	for (int i = 0; i <= IX_SLOTS; i++) {
		ix_slot *s = i < IX_SLOTS ? &slots[i] : &other_slot;
		if (!atomic_load_explicit(&s->ready, memory_order_acquire))
			continue;
		cJSON *one = cJSON_AddObjectToObject(ix, s->name);
		cJSON_AddItemToObject(one, "coordinator", hist_json(s->coord, now));
		cJSON *copies = cJSON_AddObjectToObject(one, "copies");
		for (int n = 0; n < ND_CL_MAX_NODES; n++) {
			nd_hist *h = atomic_load_explicit(&s->copy[n], memory_order_acquire);
			if (!h)
				continue;
			cJSON *c = hist_json(h, now);
			cJSON_AddBoolToObject(c, "local", atomic_load(&s->local[n]));
			cJSON_AddItemToObject(copies, node_name(cl, n), c);
		}
	}
	put_json(j, out);
}

/* ---- node summaries ---- */

/* A _cat/recovery row ("index shard 1.234s type stage source target
 * files bytes ops") as an object. */
static cJSON *
recovery_json(char *line)
{
	static const char *const keys[] = {"index",  "shard",  "time",  "type", "stage",
	                                   "source", "target", "files", "bytes", "ops"};
	cJSON *o = cJSON_CreateObject();
	char *save = NULL, *tok = strtok_r(line, " ", &save);
	for (int k = 0; k < 10 && tok; k++, tok = strtok_r(NULL, " ", &save)) {
		if (k == 1 || k >= 7)
			cJSON_AddNumberToObject(o, keys[k], strtod(tok, NULL));
		else if (k == 2)
			cJSON_AddNumberToObject(o, "time_s", strtod(tok, NULL));
		else
			cJSON_AddStringToObject(o, keys[k], tok);
	}
	return o;
}

cJSON *
nd_stats_node_json(nd_cluster *cl)
{
	nd_cl_node *me = &cl->nodes[cl->self];
	nd_node_counters *nc = nd_counters(cl->node);
	cJSON *j = cJSON_CreateObject(), *o, *a;
	struct statvfs vfs;
	nd_index **all;
	size_t nall;
	int64_t total = 0;
	cm_buf rec;

	cJSON_AddStringToObject(j, "name", me->name);
	cJSON_AddBoolToObject(j, "alive", true);
	a = cJSON_AddArrayToObject(j, "roles");
	if (me->data)
		cJSON_AddItemToArray(a, cJSON_CreateString("data"));
	if (me->master)
		cJSON_AddItemToArray(a, cJSON_CreateString("master"));
	if (!me->data && !me->master)
		cJSON_AddItemToArray(a, cJSON_CreateString("coordinator"));
	cJSON_AddStringToObject(j, "http", me->http);
	cJSON_AddNumberToObject(j, "timestamp", (double)cm_wall_ms());
	cJSON_AddNumberToObject(j, "uptime_s", (double)(cm_wall_ms() - nd_start_ms(cl->node)) / 1000.0);
	o = cJSON_AddObjectToObject(j, "process");
	cJSON_AddNumberToObject(o, "cpu_seconds", cm_cpu_seconds());
	cJSON_AddNumberToObject(o, "cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
	cJSON_AddNumberToObject(o, "rss_bytes", (double)cm_rss_bytes());
	o = cJSON_AddObjectToObject(j, "memory");
	for (int t = 0; t < CM_MEM_COUNT; t++) {
		cJSON_AddNumberToObject(o, cm_mem_tag_name((cm_mem_tag)t),
		                        (double)cm_mem_used((cm_mem_tag)t));
		total += cm_mem_used((cm_mem_tag)t);
	}
	cJSON_AddNumberToObject(o, "total", (double)total);
	o = cJSON_AddObjectToObject(j, "disk");
	if (statvfs(nd_data_dir(cl->node), &vfs) == 0) {
		cJSON_AddNumberToObject(o, "total_bytes", (double)vfs.f_blocks * (double)vfs.f_frsize);
		cJSON_AddNumberToObject(o, "available_bytes",
		                        (double)vfs.f_bavail * (double)vfs.f_frsize);
	}
	o = cJSON_AddObjectToObject(j, "http");
	cJSON_AddNumberToObject(o, "current_open", (double)nc->http_open);
	cJSON_AddNumberToObject(o, "requests_total", (double)nc->http_requests);
	o = cJSON_AddObjectToObject(j, "search");
	/* searches this node is coordinating now; cluster nodes keep no
	 * scroll contexts (phase 1) */
	cJSON_AddNumberToObject(o, "in_flight", (double)(int64_t)ld(&inflight));
	cJSON_AddNumberToObject(o, "rejected", (double)nc->search_rejected);
	a = cJSON_AddArrayToObject(j, "peers");
	for (int i = 0; i < cl->nn; i++) {
		if (i == cl->self)
			continue;
		cJSON *p = cJSON_CreateObject();
		pthread_mutex_lock(&cl->lock);
		double lat = cl->nodes[i].ewma_us;
		pthread_mutex_unlock(&cl->lock);
		cJSON_AddStringToObject(p, "name", cl->nodes[i].name);
		cJSON_AddBoolToObject(p, "alive", cl_alive(cl, i));
		cJSON_AddNumberToObject(p, "rtt_us", (double)(int64_t)lat);
		cJSON_AddItemToArray(a, p);
	}
	o = cJSON_AddObjectToObject(j, "shards");
	uint64_t store = 0;
	nd_index_list(cl->node, &all, &nall);
	for (size_t i = 0; i < nall; i++) {
		cJSON *arr = cJSON_AddArrayToObject(o, nd_index_name(all[i]));
		for (int s = 0; s < nd_index_nshards(all[i]); s++) {
			st_shard_stats st;
			cJSON *c = cJSON_CreateObject();
			st_shard_stats_get(nd_index_shard(all[i], s), &st);
			cJSON_AddNumberToObject(c, "docs", (double)st.docs);
			cJSON_AddNumberToObject(c, "store_bytes", (double)st.store_bytes);
			cJSON_AddItemToArray(arr, c);
			store += st.store_bytes;
		}
		nd_index_release(all[i]);
	}
	cm_free(MEM, all);
	cJSON_AddNumberToObject(cJSON_GetObjectItemCaseSensitive(j, "disk"), "shoal_bytes",
	                        (double)store);
	a = cJSON_AddArrayToObject(j, "recoveries");
	cm_buf_init(&rec, MEM);
	nd_cluster_cat_recovery(cl, &rec);
	cm_buf_put_u8(&rec, 0);
	char *save = NULL;
	for (char *line = strtok_r((char *)rec.data, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		cJSON_AddItemToArray(a, recovery_json(line));
	cm_buf_free(&rec);
	return j;
}

/* One peer's answer to a NodeView "summary", copied out of the nng callback. */
typedef struct node_call {
	cm_wait *w;
	bool asked;
	cm_err rc;
	uint32_t type;
	cm_buf reply;
} node_call;

static void
node_reply(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	node_call *c = arg;
	c->rc = rc;
	c->type = type;
	if (!rc && p)
		cm_buf_put(&c->reply, p, len);
	cm_wait_done(c->w);
}

void
nd_cluster_nodes_json(nd_cluster *cl, cm_buf *out)
{
	int nn = cl->nn; /* counted once: on etcd a node may join while this runs */
	node_call *calls = cm_calloc(MEM, (size_t)nn, sizeof(node_call));
	cJSON *j = cJSON_CreateObject(), *a;
	cm_buf req;
	int asked = 0;

	cm_buf_init(&req, MEM);
	pr_node_view_req_encode("summary", &req);
	for (int i = 0; i < nn; i++)
		if ((calls[i].asked = i != cl->self && cl_alive(cl, i)))
			asked++;
	cm_wait *w = cm_wait_create(asked);
	uint64_t deadline = cm_now_ns() + NODES_DEADLINE_NS;
	for (int i = 0; i < nn; i++) {
		cm_buf_init(&calls[i].reply, MEM);
		calls[i].w = w;
		calls[i].rc = CM_EUNAVAIL;
		if (calls[i].asked)
			nd_peer_call(cl->nodes[i].peer, PR_NODE_VIEW, req.data, req.len, deadline,
			             node_reply, &calls[i]);
	}
	cJSON_AddStringToObject(j, "cluster_name", cl->cluster_name);
	cJSON_AddStringToObject(j, "self", cl->nodes[cl->self].name);
	int master = cl->master;
	if (master >= 0)
		cJSON_AddStringToObject(j, "master", cl->nodes[master].name);
	a = cJSON_AddArrayToObject(j, "nodes");
	cJSON *mine = nd_stats_node_json(cl); /* while the peers answer */
	cm_wait_wait(w);
	cm_wait_destroy(w);
	for (int i = 0; i < nn; i++) {
		cJSON *n = NULL;
		char why[160] = "";
		if (i == cl->self) {
			n = mine;
		} else if (!calls[i].rc && calls[i].type == PR_ACK) {
			cm_error e;
			char *b = NULL, *view = NULL;
			size_t bl = 0, vl = 0;
			cm_error_clear(&e);
			if (pr_ack_decode(calls[i].reply.data, calls[i].reply.len, &e, &b, &bl) ==
			        CM_OK &&
			    !e.code && b && pr_node_view_reply_decode(b, bl, &view, &vl, &e) == CM_OK)
				n = cJSON_ParseWithLength(view, vl);
			if (!n)
				snprintf(why, sizeof(why), "%.150s", e.code ? e.reason : "malformed reply");
			cm_free(MEM, view);
			cm_free(MEM, b);
		} else {
			snprintf(why, sizeof(why), "%s",
			         calls[i].asked ? cm_err_msg(calls[i].rc) : "not reachable");
		}
		if (!n) {
			n = cJSON_CreateObject();
			cJSON_AddStringToObject(n, "name", cl->nodes[i].name);
			cJSON_AddBoolToObject(n, "alive", false);
			cJSON_AddStringToObject(n, "error", why);
		}
		cJSON_AddBoolToObject(n, "master", i == cl->master);
		cJSON_AddItemToArray(a, n);
		cm_buf_free(&calls[i].reply);
	}
	cm_buf_free(&req);
	cm_free(MEM, calls);
	put_json(j, out);
}
