/* The static cluster: membership, metadata master, placement, liveness.
 * Writes are in nd_cluster_write.c, searches in nd_cluster_search.c (the
 * copy order in nd_cluster_copies.c), gets and node figures in
 * nd_cluster_get.c, the REST views in nd_cluster_views.c; private state in
 * nd_cluster_private.h. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "../proto/pr.h"
#include "../snapshot/sn.h"
#include "nd_cluster_private.h"
#include "nd_private.h"
#include "nd_rank.h"
#include "nd_snap.h"

#define MEM CM_MEM_NODE
/* a ping's deadline; the longest a node's copies answer realtime gets
 * after the master's last pong (cl_read_window_ns) */
#define PING_DEADLINE_NS 1000000000ull
#define READ_WINDOW_MAX_NS 1500000000ull
#define MAX_CLUSTER_FILE (1u << 20)


bool
nd_fanout_parse(const char *s, nd_cl_fanout *out)
{
	if (!s)
		return false;
	if (strcmp(s, "serial") == 0)
		*out = ND_CL_FANOUT_SERIAL;
	else if (strcmp(s, "per_shard") == 0)
		*out = ND_CL_FANOUT_PER_SHARD;
	else if (strcmp(s, "per_node") == 0)
		*out = ND_CL_FANOUT_PER_NODE;
	else
		return false;
	return true;
}

static bool
copy_str(char *dst, size_t cap, const cJSON *v)
{
	if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap)
		return false;
	strcpy(dst, v->valuestring);
	return true;
}

/* Takes the keys of one "tls" object (the cluster's, then this node's)
 * into cl; relative paths are relative to the cluster file's folder. */
static cm_err
tls_parse(nd_cluster *cl, const char *file, const cJSON *t, cm_error *err)
{
	const cJSON *v;
	const char *slash = strrchr(file, '/');
	int dirlen = slash ? (int)(slash - file) : 0;

	if (!cJSON_IsObject(t))
		return cm_error_set(err, CM_EINVAL, "cluster file %s: \"tls\" must be an object",
		                    file);
	cJSON_ArrayForEach(v, t)
	{
		char *dst = strcmp(v->string, "cert") == 0  ? cl->tls_cert
		            : strcmp(v->string, "key") == 0 ? cl->tls_key
		            : strcmp(v->string, "ca") == 0  ? cl->tls_ca
		                                            : NULL;
		if (strcmp(v->string, "verify") == 0) {
			const char *m = cJSON_IsString(v) ? v->valuestring : "";
			if (strcmp(m, "required") == 0)
				cl->tls_verify = ND_TLS_VERIFY_REQUIRED;
			else if (strcmp(m, "optional") == 0)
				cl->tls_verify = ND_TLS_VERIFY_OPTIONAL;
			else if (strcmp(m, "none") == 0)
				cl->tls_verify = ND_TLS_VERIFY_NONE;
			else
				return cm_error_set(
				    err, CM_EINVAL,
				    "cluster file %s: tls.verify must be \"required\", "
				    "\"optional\" or \"none\"",
				    file);
			continue;
		}
		if (!dst)
			return cm_error_set(
			    err, CM_EINVAL,
			    "cluster file %s: unknown key tls.%s (cert, key, ca, verify)", file,
			    v->string);
		if (!cJSON_IsString(v) || !*v->valuestring)
			return cm_error_set(err, CM_EINVAL,
			                    "cluster file %s: tls.%s must be a path", file,
			                    v->string);
		int n = v->valuestring[0] == '/' || !slash
		            ? snprintf(dst, sizeof(cl->tls_cert), "%s", v->valuestring)
		            : snprintf(dst, sizeof(cl->tls_cert), "%.*s/%s", dirlen, file,
		                       v->valuestring);
		if (n < 0 || (size_t)n >= sizeof(cl->tls_cert))
			return cm_error_set(err, CM_EINVAL, "cluster file %s: tls.%s is too long",
			                    file, v->string);
	}
	return CM_OK;
}

/* The cluster from a cluster file's JSON (j is the caller's). With
 * "etcd" the nodes list needs only this node: the others come from etcd. */
static cm_err
cluster_from_json(cJSON *j, const char *file, const char *name, bool coordinator_only,
                  nd_cl_fanout fanout, nd_cluster **out, cm_error *err)
{
	cJSON *nodes, *it;
	nd_cluster *cl = NULL;
	cm_err rc;
	const cJSON *etcd = cJSON_GetObjectItemCaseSensitive(j, "etcd");
	char endpoints[1024] = "";

	if (etcd) {
		const cJSON *ep;
		if (cJSON_IsString(etcd))
			snprintf(endpoints, sizeof(endpoints), "%s", etcd->valuestring);
		const cJSON *list = cJSON_IsArray(etcd) ? etcd : NULL;
		cJSON_ArrayForEach(ep, list)
		{
			size_t l = strlen(endpoints);
			if (cJSON_IsString(ep))
				snprintf(endpoints + l, sizeof(endpoints) - l, "%s%s", l ? "," : "",
				         ep->valuestring);
		}
		if (!endpoints[0])
			return cm_error_set(
			    err, CM_EINVAL,
			    "cluster file %s: \"etcd\" must list HOST:PORT endpoints", file);
	}
	cl = cm_calloc(MEM, 1, sizeof(*cl));
	for (int i = 0; i < CL_PUB_RING; i++)
		cm_buf_init(&cl->pub_ring[i].msg, MEM);
	pthread_mutex_init(&cl->members_mu, NULL);
	cl->self = -1;
	atomic_store(&cl->master, -1);
	cl->fanout = fanout;
	pthread_mutex_init(&cl->meta_lock, NULL);
	pthread_mutex_init(&cl->settings_mu, NULL);
	pthread_mutex_init(&cl->lock, NULL);
	pthread_mutex_init(&cl->stop_mu, NULL);
	pthread_cond_init(&cl->stop_cv, NULL);
	if (!copy_str(cl->cluster_name, sizeof(cl->cluster_name),
	              cJSON_GetObjectItemCaseSensitive(j, "cluster_name")) ||
	    !copy_str(cl->secret, sizeof(cl->secret),
	              cJSON_GetObjectItemCaseSensitive(j, "secret"))) {
		rc = cm_error_set(err, CM_EINVAL,
		                  "cluster file %s: cluster_name and secret are required", file);
		goto fail;
	}
	it = cJSON_GetObjectItemCaseSensitive(j, "max_message_bytes");
	cl->max_msg = cJSON_IsNumber(it) && it->valuedouble >= 4096 ? (size_t)it->valuedouble : 0;
	/* TLS is on for the whole cluster when the file or any node has "tls". */
	bool tls = false;
	if ((it = cJSON_GetObjectItemCaseSensitive(j, "tls"))) {
		tls = true;
		if ((rc = tls_parse(cl, file, it, err)))
			goto fail;
	}
	nodes = cJSON_GetObjectItemCaseSensitive(j, "nodes");
	int nn = cJSON_GetArraySize(nodes);
	if (!cJSON_IsArray(nodes) || nn < 1 || nn > ND_CL_MAX_NODES) {
		rc = cm_error_set(err, CM_EINVAL, "cluster file %s: nodes must list 1..%d nodes",
		                  file, ND_CL_MAX_NODES);
		goto fail;
	}
	cl->nodes = cm_calloc(MEM, etcd ? ND_CL_MAX_NODES : (size_t)nn, sizeof(nd_cl_node));
	cJSON_ArrayForEach(it, nodes)
	{
		nd_cl_node *nd = &cl->nodes[cl->nn];
		if (etcd) {
			/* the other nodes come from etcd; an entry of another node
			 * with "connect" says how this node dials it (a proxy) */
			const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
			const cJSON *cn = cJSON_GetObjectItemCaseSensitive(it, "connect");
			if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) != 0 &&
			    cJSON_IsString(cn) && cl->ndial < ND_CL_MAX_NODES &&
			    strlen(nm->valuestring) < sizeof(cl->dial[0].name) &&
			    strlen(cn->valuestring) < sizeof(cl->dial[0].connect) - 8) {
				snprintf(cl->dial[cl->ndial].name, sizeof(cl->dial[0].name), "%s",
				         nm->valuestring);
				snprintf(cl->dial[cl->ndial].connect, sizeof(cl->dial[0].connect),
				         "tcp://%s", cn->valuestring);
				cl->ndial++;
			}
			if (!cJSON_IsString(nm) || strcmp(nm->valuestring, name) != 0)
				continue;
		}
		const cJSON *roles = cJSON_GetObjectItemCaseSensitive(it, "roles"), *r;
		char addr[ND_CL_ADDR];
		if (!copy_str(nd->name, sizeof(nd->name),
		              cJSON_GetObjectItemCaseSensitive(it, "name")) ||
		    !copy_str(nd->http, sizeof(nd->http),
		              cJSON_GetObjectItemCaseSensitive(it, "http")) ||
		    !copy_str(addr, sizeof(addr) - 8,
		              cJSON_GetObjectItemCaseSensitive(it, "transport"))) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "cluster file %s: node %d needs name, http and transport",
			                  file, cl->nn);
			goto fail;
		}
		snprintf(nd->transport, sizeof(nd->transport), "tcp://%s", addr);
		if (copy_str(addr, sizeof(addr) - 8,
		             cJSON_GetObjectItemCaseSensitive(it, "connect")))
			snprintf(nd->connect, sizeof(nd->connect), "tcp://%s", addr);
		else
			strcpy(nd->connect, nd->transport);
		if (!roles) {
			nd->master = nd->data = true;
		} else {
			cJSON_ArrayForEach(r, roles)
			{
				if (cJSON_IsString(r) && strcmp(r->valuestring, "master") == 0)
					nd->master = true;
				if (cJSON_IsString(r) && strcmp(r->valuestring, "data") == 0)
					nd->data = true;
			}
		}
		for (int k = 0; k < cl->nn; k++)
			if (strcmp(cl->nodes[k].name, nd->name) == 0) {
				rc = cm_error_set(err, CM_EINVAL,
				                  "cluster file %s: node name [%s] twice", file,
				                  nd->name);
				goto fail;
			}
		nd->data_ord = nd->data ? cl->ndata++ : -1;
		if (nd->master && cl->master < 0 && !etcd)
			cl->master = cl->nn;
		const cJSON *nt = cJSON_GetObjectItemCaseSensitive(it, "tls");
		tls |= nt != NULL;
		if (strcmp(nd->name, name) == 0) {
			cl->self = cl->nn;
			if (nt && (rc = tls_parse(cl, file, nt, err)))
				goto fail;
		}
		atomic_store(&nd->alive, true);
		nd->ewma_us = 1000.0;
		cl->nn++;
	}
	if (cl->self < 0) {
		rc =
		    cm_error_set(err, CM_EINVAL, "node [%s] is not in cluster file %s", name, file);
		goto fail;
	}
	if (tls && (!cl->tls_cert[0] || !cl->tls_key[0] ||
	            (!cl->tls_ca[0] && cl->tls_verify != ND_TLS_VERIFY_NONE))) {
		rc = cm_error_set(err, CM_EINVAL,
		                  "cluster file %s: transport TLS is on but node [%s] has no "
		                  "tls.cert, tls.key and tls.ca (ca only optional with verify "
		                  "\"none\")",
		                  file, name);
		goto fail;
	}
	/* tcp://ADDR → tls+tcp://ADDR; ADDR is under ND_CL_ADDR - 8 bytes. */
	for (int k = 0; tls && k < cl->nn; k++) {
		char *urls[2] = {cl->nodes[k].transport, cl->nodes[k].connect};
		for (int u = 0; u < 2; u++) {
			memmove(urls[u] + 4, urls[u], strlen(urls[u]) + 1);
			memcpy(urls[u], "tls+", 4);
		}
	}
	for (int k = 0; tls && k < cl->ndial; k++) {
		char *u = cl->dial[k].connect;
		memmove(u + 4, u, strlen(u) + 1);
		memcpy(u, "tls+", 4);
	}
	if (cl->ndata == 0 && !etcd) {
		rc = cm_error_set(err, CM_EINVAL, "cluster file %s has no data node", file);
		goto fail;
	}
	if (coordinator_only && cl->nodes[cl->self].data) {
		rc = cm_error_set(
		    err, CM_EINVAL,
		    "--role coordinator but node [%s] has the data role in %s (give it "
		    "\"roles\": [\"coordinator\"])",
		    name, file);
		goto fail;
	}
	cl->data_nodes = cm_calloc(MEM, ND_CL_MAX_NODES, sizeof(int));
	for (int k = 0; k < cl->nn; k++)
		if (cl->nodes[k].data)
			cl->data_nodes[cl->nodes[k].data_ord] = k;
	if (etcd && (rc = cl_etcd_open(cl, endpoints, err)))
		goto fail;
	cl_host_init(cl);
	*out = cl;
	return CM_OK;
fail:
	if (cl) {
		cm_free(MEM, cl->data_nodes);
		cm_free(MEM, cl->nodes);
		cm_free(MEM, cl);
	}
	return rc;
}

cm_err
nd_cluster_open(const char *file, const char *name, bool coordinator_only, nd_cl_fanout fanout,
                nd_cluster **out, cm_error *err)
{
	char *text = NULL;
	size_t len;
	if (cm_file_read(file, MAX_CLUSTER_FILE, &text, &len))
		return cm_error_set(err, CM_EIO, "cannot read cluster file %s", file);
	cJSON *j = cJSON_ParseWithLength(text, len);
	cm_free(MEM, text);
	if (!j)
		return cm_error_set(err, CM_EPARSE, "cluster file %s is not valid JSON", file);
	cm_err rc = cluster_from_json(j, file, name, coordinator_only, fanout, out, err);
	cJSON_Delete(j);
	return rc;
}

cm_err
nd_cluster_open_etcd(const nd_cl_etcd_opts *o, nd_cl_fanout fanout, nd_cluster **out, cm_error *err)
{
	cJSON *j = cJSON_CreateObject(), *nodes = cJSON_AddArrayToObject(j, "nodes");
	cJSON *me = cJSON_CreateObject(), *roles = cJSON_AddArrayToObject(me, "roles");
	cJSON_AddStringToObject(j, "cluster_name", o->cluster_name);
	cJSON_AddStringToObject(j, "secret", o->secret && *o->secret ? o->secret : o->cluster_name);
	cJSON_AddStringToObject(j, "etcd", o->endpoints);
	cJSON_AddStringToObject(me, "name", o->name);
	cJSON_AddStringToObject(me, "http", o->http);
	cJSON_AddStringToObject(me, "transport", o->transport);
	if (!o->coordinator_only) {
		cJSON_AddItemToArray(roles, cJSON_CreateString("master"));
		cJSON_AddItemToArray(roles, cJSON_CreateString("data"));
	}
	cJSON_AddItemToArray(nodes, me);
	cm_err rc =
	    cluster_from_json(j, "(--etcd)", o->name, o->coordinator_only, fanout, out, err);
	cJSON_Delete(j);
	return rc;
}

const char *
nd_cluster_http(const nd_cluster *cl)
{
	return cl->nodes[cl->self].http;
}

char *
nd_cluster_templates(nd_cluster *cl, uint64_t *seen)
{
	char *out = NULL;
	pthread_mutex_lock(&cl->meta_lock);
	if (cl->state && cl->state->version != *seen) {
		*seen = cl->state->version;
		out = cm_strdup(MEM, cl->state->templates ? cl->state->templates : "");
	}
	pthread_mutex_unlock(&cl->meta_lock);
	return out;
}

/* The master's side of a template change (validated where it was
 * asked): applied to next's templates. */
static cm_err
templates_change(rp_state *next, const cJSON *op, cm_error *err)
{
	cJSON *db = nd_templates_normalize(next->templates ? cJSON_Parse(next->templates) : NULL);
	cm_err rc = nd_templates_apply(db, op, err);
	if (!rc) {
		char *t = cJSON_PrintUnformatted(db);
		cm_free(MEM, next->templates);
		next->templates = cm_strdup(MEM, t ? t : "{}");
		cJSON_free(t);
	}
	cJSON_Delete(db);
	return rc;
}

void
nd_cluster_uuid_of(nd_cluster *cl, char *out, size_t cap)
{
	pthread_mutex_lock(&cl->meta_lock);
	snprintf(out, cap, "%s", cl->state ? cl->state->cluster_uuid : "");
	pthread_mutex_unlock(&cl->meta_lock);
}

const char *
nd_cluster_transport(const nd_cluster *cl)
{
	const char *t = cl->nodes[cl->self].transport, *sep = strstr(t, "://");
	return sep ? sep + 3 : t;
}

const char *
nd_cluster_self(const nd_cluster *cl)
{
	return cl->nodes[cl->self].name;
}

nd_cluster *
nd_cluster_of(const nd_node *n)
{
	return atomic_load_explicit(&n->cluster, memory_order_acquire);
}

/* ---- placement ---- */

int
cl_ncopies(const nd_cluster *cl, nd_index *ix)
{
	int c = 1 + nd_index_settings(ix)->number_of_replicas;
	return c > cl->ndata ? cl->ndata : c;
}

int
cl_copy_node(const nd_cluster *cl, int shard, int copy)
{
	return cl->data_nodes[(shard + copy) % cl->ndata];
}

int
cl_shard_copies(nd_cluster *cl, nd_index *ix, int shard, int *out)
{
	cl_route ro;
	if (cl_route_get(cl, nd_index_name(ix), shard, &ro) && ro.ncopies > 0) {
		memcpy(out, ro.copies, (size_t)ro.ncopies * sizeof(int));
		return ro.ncopies;
	}
	int nc = cl_ncopies(cl, ix);
	if (nc > ND_CL_MAX_COPIES)
		nc = ND_CL_MAX_COPIES;
	for (int c = 0; c < nc; c++)
		out[c] = cl_copy_node(cl, shard, c);
	return nc;
}

uint64_t
cl_read_window_ns(nd_cluster *cl)
{
	uint64_t w = rp_failover_ns(cl->rp) / 2;
	return w < READ_WINDOW_MAX_NS ? w : READ_WINDOW_MAX_NS;
}

void
cl_reads_stopped(nd_cluster *cl, int node)
{
	if (node < 0 || node >= cl->nn || node == cl->self)
		return;
	/* a pong may reach it up to a ping's deadline after it left here */
	uint64_t until = atomic_load(&cl->nodes[node].pong_sent_ns) + cl_read_window_ns(cl) +
	                 PING_DEADLINE_NS,
	         now = cm_now_ns();
	if (until <= now)
		return;
	cm_info("cluster", "node [%s] may still answer realtime gets for %.1f s: waited for",
	        cl->nodes[node].name, (double)(until - now) / 1e9);
	while ((now = cm_now_ns()) < until && !cl->stopping)
		usleep(until - now > 50000000ull ? 50000 : (useconds_t)((until - now) / 1000));
}

bool
cl_alive(nd_cluster *cl, int node)
{
	return node == cl->self || atomic_load(&cl->nodes[node].alive);
}

void
cl_mark(nd_cluster *cl, int node, bool alive, uint64_t latency_ns)
{
	nd_cl_node *nd = &cl->nodes[node];
	if (alive)
		atomic_store(&nd->last_ok_ns, cm_now_ns());
	bool was = atomic_exchange(&nd->alive, alive);
	if (was != alive)
		atomic_store(&nd->down_since_ns, alive ? 0 : cm_now_ns());
	if (!alive && !atomic_load(&nd->down_since_ns))
		atomic_store(&nd->down_since_ns, cm_now_ns());
	if (was != alive)
		cm_info("cluster", "node [%s] is %s", nd->name,
		        alive ? "reachable" : "unreachable");
	if (alive && latency_ns) {
		pthread_mutex_lock(&cl->lock);
		nd->ewma_us = 0.8 * nd->ewma_us + 0.2 * (double)latency_ns / 1000.0;
		pthread_mutex_unlock(&cl->lock);
	}
}

/* ---- the cluster state ---- */

static void
state_path(nd_cluster *cl, char *path, size_t cap)
{
	snprintf(path, cap, "%s/cluster_state.pb", nd_data_dir(cl->node));
}

/* A durable write (temp file, fsync, rename, fsync of the folder). */
static cm_err
state_persist(nd_cluster *cl, const rp_state *st, cm_error *err)
{
	char path[1024];
	cm_buf b;
	cm_buf_init(&b, MEM);
	rp_state_encode(st, cl->names, cl->nn, &b);
	state_path(cl, path, sizeof(path));
	cm_err rc = cm_file_write_atomic(path, b.data, b.len);
	cm_buf_free(&b);
	if (rc)
		return cm_error_set(err, rc, "cannot persist the cluster state to %s: %s", path,
		                    cm_err_msg(rc));
	return CM_OK;
}

/* On etcd the local file is only a cache for the start (etcd holds the
 * state, and a starting node reads it there): a change marks it stale and
 * the monitor rewrites it at most once a round, so a change does not pay
 * for encoding and syncing the whole state on every node. meta_lock held. */
static void
state_cache_mark_locked(nd_cluster *cl)
{
	cl->cache_stale = true;
}

/* Monitor, and at stop: the cache rewritten when stale (a copy of the
 * state taken under meta_lock, which shares the indices' texts; encoded
 * and written outside it, so that state changes do not wait on the
 * encoding of thousands of indices). */
static void
state_cache_write(nd_cluster *cl)
{
	cm_buf b;
	char path[1024];
	pthread_mutex_lock(&cl->meta_lock);
	if (!cl->cache_stale) {
		pthread_mutex_unlock(&cl->meta_lock);
		return;
	}
	rp_state *copy = rp_state_dup(cl->state);
	int nn = cl->nn;
	cl->cache_stale = false;
	pthread_mutex_unlock(&cl->meta_lock);
	cm_buf_init(&b, MEM);
	rp_state_encode(copy, cl->names, nn, &b);
	uint64_t v = copy->version;
	rp_state_free(copy);
	state_path(cl, path, sizeof(path));
	cm_err rc = cm_file_write_atomic(path, b.data, b.len);
	cm_buf_free(&b);
	if (rc) {
		cm_warn("cluster", "cluster state version %" PRIu64 " not cached in %s: %s", v,
		        path, cm_err_msg(rc));
		pthread_mutex_lock(&cl->meta_lock);
		cl->cache_stale = true;
		pthread_mutex_unlock(&cl->meta_lock);
	}
}

static cJSON *
parse_text(const char *s)
{
	return s && *s ? cJSON_Parse(s) : NULL;
}

/* Makes the local registry match a state: creates missing indices,
 * merges their mappings, replays settings, deletes the indices the state
 * no longer has. Caller holds meta_lock. */
/* Whether route r places a copy on node (a copy moving away included). */
static bool
route_holds(const rp_route *r, int node)
{
	if (r->relocating_from == node)
		return true;
	for (int c = 0; c < r->ncopies; c++)
		if (r->copies[c] == node)
			return true;
	return false;
}

/* Whether every copy r lists is in sync under a primary: only then may a
 * copy placed elsewhere be dropped (Elasticsearch deletes a shard's data
 * on a node only once the shard is active on all its assigned copies). */
static bool
route_complete(const rp_route *r)
{
	if (r->primary < 0 || r->ncopies == 0)
		return false;
	for (int c = 0; c < r->ncopies; c++)
		if (r->copies[c] < 0 || !((r->in_sync >> r->copies[c]) & 1))
			return false;
	return true;
}

/* meta_lock held: the copies st no longer places on this node (a dropped
 * replica, the source of a finished relocation) are wiped once the shard's
 * placed copies are all in sync, so a node keeps no data it does not
 * serve. A shard st routes nowhere (no copies listed: a static cluster's
 * formula) is left alone, as is one already empty. A coordinator that
 * still routes a search to the wiped copy is refused (cl_holds_copy) and
 * tries the next copy. */
static void
drop_unplaced_locked(nd_cluster *cl, const rp_state *before, const rp_state *st)
{
	bool failed = false;
	for (size_t i = 0; i < st->nindices; i++) {
		const rp_index *e = &st->indices[i];
		/* routes unchanged since the last state: checked then (every
		 * index is, on the first state a process applies, and after a
		 * wipe that failed) */
		const rp_index *was =
		    before && cl->unplaced_swept ? rp_state_index(before, e->name) : NULL;
		if (was && was->routes && e->routes && rp_index_routes_same(was, e))
			continue;
		nd_index *ix = nd_index_get(cl->node, e->name);
		for (int s = 0; ix && e->routes && s < e->nshards && s < nd_index_nshards(ix); s++) {
			const rp_route *r = &e->routes[s];
			if (route_holds(r, cl->self) || !route_complete(r))
				continue;
			st_shard *sh = nd_index_shard(ix, s);
			if (st_shard_is_empty(sh))
				continue;
			cm_error err;
			cm_error_clear(&err);
			if (st_shard_wipe(sh, &err)) {
				cm_warn("cluster", "[%s][%d] is no longer placed here; wiping it failed: %s",
				        e->name, s, err.reason);
				failed = true;
			} else {
				cm_info("cluster", "[%s][%d] is no longer placed here: its files are removed",
				        e->name, s);
			}
		}
		nd_index_release(ix);
	}
	cl->unplaced_swept = !failed;
}

/* The texts of e that state_apply_locked applies, hashed; never 0. */
static uint64_t
index_sig(const rp_index *e)
{
	uint64_t h = XXH3_64bits_withSeed(e->uuid, strlen(e->uuid), 1);
	h = XXH3_64bits_withSeed(e->body, strlen(e->body), h);
	h = XXH3_64bits_withSeed(e->mappings, strlen(e->mappings), h);
	for (size_t k = 0; k < e->nsettings; k++)
		h = XXH3_64bits_withSeed(e->settings_log[k], strlen(e->settings_log[k]), h + k);
	return h ? h : 1;
}

static void
state_apply_locked(nd_cluster *cl, const rp_state *st)
{
	nd_index **all;
	size_t nall;
	cm_error err;

	/* An index whose texts are those of the state this node holds was
	 * applied then, when this function applied that state to every index
	 * whole (a master's own commits change its state without it: their
	 * next pass looks at every index). */
	const rp_state *before =
	    st != cl->state && cl->applied_whole && cl->applied_whole == cl->state->version
	        ? cl->state
	        : NULL;
	bool whole = true;
	for (size_t i = 0; i < st->nindices; i++) {
		const rp_index *e = &st->indices[i];
		const rp_index *was = before ? rp_state_index(before, e->name) : NULL;
		if (was && rp_index_texts_same(was, e))
			continue;
		nd_index *ix = nd_index_get(cl->node, e->name);
		uint64_t sig = index_sig(e);
		if (ix && ix->state_sig == sig) {
			/* applied already: a state change elsewhere costs this index
			 * a hash of its texts, no parse */
			nd_index_release(ix);
			continue;
		}
		cJSON *body = parse_text(e->body), *maps = parse_text(e->mappings);
		cm_error_clear(&err);
		if (!ix && nd_index_create_as(cl->node, e->name, e->uuid,
		                              cJSON_IsObject(body) ? body : NULL, &ix, &err)) {
			cm_warn("cluster", "cannot create index [%s] from the master's state: %s",
			        e->name, err.reason);
			cJSON_Delete(body);
			cJSON_Delete(maps);
			whole = false;
			continue;
		}
		/* a mapping naming an analyzer the settings log adds merges after it */
		bool mapped = !cJSON_IsObject(maps) || !nd_index_put_mapping(ix, maps, &err);
		nd_alias_sync(ix, body); /* aliases live in the create body */
		bool applied = true;
		for (size_t k = 0; k < e->nsettings; k++) {
			cJSON *sb = parse_text(e->settings_log[k]);
			cm_error_clear(&err);
			if (sb && nd_index_put_settings(ix, sb, &err)) {
				cm_warn("cluster", "cannot apply settings of [%s]: %s", e->name,
				        err.reason);
				applied = false;
			}
			cJSON_Delete(sb);
		}
		cm_error_clear(&err);
		if (!mapped && nd_index_put_mapping(ix, maps, &err)) {
			cm_warn("cluster", "cannot merge mapping of [%s]: %s", e->name, err.reason);
			applied = false;
		}
		/* a state that could not be applied whole is tried again */
		ix->state_sig = applied ? sig : 0;
		whole &= applied;
		cJSON_Delete(body);
		cJSON_Delete(maps);
		nd_index_release(ix);
	}
	nd_index_list(cl->node, &all, &nall);
	for (size_t i = 0; i < nall; i++) {
		if (!rp_state_index(st, nd_index_name(all[i]))) {
			cm_info("cluster", "index [%s] is gone from the cluster state: deleting",
			        nd_index_name(all[i]));
			cm_error_clear(&err);
			nd_index_delete(cl->node, all[i], &err);
		}
		nd_index_release(all[i]);
	}
	cm_free(MEM, all);
	cl->applied_whole = whole ? st->version : 0;
}

static void
reg_name(void *arg, const char *name)
{
	cl_node_slot(arg, name);
}

/* Decodes a state; on etcd the nodes it names get slots first. */
static cm_err
state_decode(nd_cluster *cl, const void *p, size_t len, rp_state **st, cm_error *err)
{
	if (cl->etcd)
		rp_state_names(p, len, reg_name, cl);
	return rp_state_decode(p, len, cl->names, cl->nn, st, err);
}

static void
state_receive(nd_cluster *cl, const void *p, size_t len)
{
	rp_state *st = NULL;
	cm_error err;
	cm_error_clear(&err);
	if (state_decode(cl, p, len, &st, &err)) {
		cm_warn("cluster", "malformed cluster state received: %s", err.reason);
		return;
	}
	cl_state_adopt(cl, st, false);
}

/* A published change (md->base_version set): applied to a copy of our
 * state when that is the state it was made against; refused (CONFLICT)
 * otherwise, and the master sends the whole state. A node that already
 * holds md's version (from etcd's watch) takes it as done. */
static cm_err
state_receive_change(nd_cluster *cl, const pr_metadata *md, cm_error *err)
{
	pthread_mutex_lock(&cl->meta_lock);
	uint64_t have = cl->state->version;
	if (have >= md->version) {
		pthread_mutex_unlock(&cl->meta_lock);
		return CM_OK;
	}
	if (have != md->base_version) {
		pthread_mutex_unlock(&cl->meta_lock);
		return cm_error_set(err, CM_ECONFLICT,
		                    "cluster state version %" PRIu64 " here; the change is against "
		                    "version %" PRIu64,
		                    have, md->base_version);
	}
	rp_state *st = rp_state_dup(cl->state);
	pthread_mutex_unlock(&cl->meta_lock);
	rp_state *part = NULL;
	cm_err rc = state_decode(cl, md->state, md->len, &part, err);
	if (rc) {
		rp_state_free(st);
		return rc;
	}
	for (size_t i = 0; i < part->nindices; i++)
		rp_state_put_index(st, &part->indices[i]);
	for (size_t i = 0; i < md->nremoved; i++)
		rp_state_remove_index(st, md->removed[i]);
	rp_state_take_global(st, part);
	rp_state_free(part);
	st->version = md->version;
	cl_state_adopt(cl, st, false);
	return CM_OK;
}

/* Adopts a state newer than ours: persisted first (a node that cannot
 * persist keeps its old state and learns the new one again later). */
void
cl_state_adopt(nd_cluster *cl, rp_state *st, bool force)
{
	cm_error err;
	cm_error_clear(&err);
	pthread_mutex_lock(&cl->meta_lock);
	if (st->version > cl->state->version || (force && st->version != cl->state->version)) {
		if (cl->etcd)
			state_cache_mark_locked(cl);
		if (!cl->etcd && state_persist(cl, st, &err)) {
			cm_warn("cluster", "cluster state version %" PRIu64 " not adopted: %s",
			        st->version, err.reason);
		} else {
			state_apply_locked(cl, st);
			rp_state *before = cl->state;
			cl->state = st;
			atomic_store(&cl->state_version, st->version);
			st = NULL;
			cl_host_adopted(cl);
			/* after the routes: a search they no longer send here is refused */
			drop_unplaced_locked(cl, before, cl->state);
			rp_state_free(before);
			cm_info("cluster", "cluster state version %" PRIu64 " applied",
			        cl->state->version);
		}
	}
	pthread_mutex_unlock(&cl->meta_lock);
	rp_state_free(st);
}

typedef struct pub_call {
	cm_wait *w;
	nd_cluster *cl;
	int node;
	uint64_t version;
	bool quiet, diff, refused, conflict;
} pub_call;

static void
pub_done(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	pub_call *c = arg;
	nd_cl_node *nd = &c->cl->nodes[c->node];
	cm_error e;
	cm_error_clear(&e);
	if (!rc && type == PR_ACK)
		rc = pr_ack_decode(p, len, &e, NULL, NULL); /* the node refused it (a change
		                                                against a state it lacks) */
	if (rc && c->diff) {
		c->refused = true; /* sent whole next, or the changes it lacks */
		c->conflict = e.code == CM_ECONFLICT;
	} else if (rc && !c->quiet) {
		cm_warn("cluster", "node [%s] did not take the cluster state: %s", nd->name,
		        e.code ? e.reason : cm_err_msg(rc));
	}
	if (!rc) {
		uint64_t v = atomic_load(&nd->applied);
		while (v < c->version &&
		       !atomic_compare_exchange_weak(&nd->applied, &v, c->version))
			;
	}
	cm_wait_done(c->w);
}

/* Sends the current state to the nodes in mask and waits, bounded: 2 s,
 * and 200 ms for a node the liveness check holds unreachable (it may be
 * starting and not yet connected, or stalled: a stalled node must not
 * hold every later change). No lock is held while it sends: two publishes
 * may cross, and a node simply ignores a version older than its own. A
 * node that misses one gets it again from the monitor (republish) or
 * fetches it; acks are counted per node (applied). */
/* Master: the nodes in mask refused the last change (they do not hold its
 * base: an earlier change had not reached them yet). Each is sent the
 * changes from the version it last acknowledged up to now, in order, when
 * the ring still holds them all; returns the nodes that still need the
 * whole state. */
static uint64_t
publish_chains(nd_cluster *cl, uint64_t mask)
{
	uint64_t whole = 0;
	for (int i = 0; i < cl->nn; i++) {
		if (i == cl->self || !((mask >> i) & 1))
			continue;
		nd_cl_node *nd = &cl->nodes[i];
		uint64_t from = atomic_load(&nd->applied), v = from;
		cm_buf msgs[CL_PUB_RING];
		int n = 0;
		pthread_mutex_lock(&cl->meta_lock);
		uint64_t to = cl->state->version;
		while (v && v < to && n < CL_PUB_RING) {
			const struct cl_pub_change *c = NULL;
			for (int k = 0; k < CL_PUB_RING && !c; k++)
				if (cl->pub_ring[k].version && cl->pub_ring[k].base == v)
					c = &cl->pub_ring[k];
			if (!c)
				break;
			cm_buf_init(&msgs[n], MEM);
			cm_buf_put(&msgs[n++], c->msg.data, c->msg.len);
			v = c->version;
		}
		pthread_mutex_unlock(&cl->meta_lock);
		bool ok = v && v == to;
		for (int k = 0; k < n; k++) {
			uint32_t type;
			cm_buf rep;
			cm_error e;
			cm_buf_init(&rep, MEM);
			cm_error_clear(&e);
			if (ok && (nd_peer_call_sync(nd->peer, PR_METADATA, msgs[k].data, msgs[k].len,
			                             cm_now_ns() + 1000000000ull, &type, &rep) ||
			           type != PR_ACK || pr_ack_decode(rep.data, rep.len, &e, NULL, NULL)))
				ok = false;
			cm_buf_free(&rep);
			cm_buf_free(&msgs[k]);
		}
		if (!ok) {
			whole |= 1ull << i;
			continue;
		}
		uint64_t a = atomic_load(&nd->applied);
		while (a < to && !atomic_compare_exchange_weak(&nd->applied, &a, to))
			;
	}
	return whole;
}

static void
state_publish(nd_cluster *cl, uint64_t mask, bool quiet)
{
	/* the slots counted once: on etcd a node may join while this runs */
	int nn = cl->nn;
	cm_buf b;
	pub_call *calls = cm_calloc(MEM, (size_t)nn, sizeof(pub_call));
	int cnt = 0;
	for (int i = 0; i < nn; i++)
		cnt += i != cl->self && ((mask >> i) & 1);
	if (!cnt) {
		cm_free(MEM, calls);
		return;
	}
	cm_buf_init(&b, MEM);
	uint64_t chain = 0; /* nodes that refused a change for want of its base */
	for (int round = 0; round < 2 && cnt; round++) {
		/* first the last commit's change where there is one, then the
		 * whole state to the nodes that did not hold its base */
		cm_buf_reset(&b);
		if (round == 1)
			mask = (mask & ~chain) | publish_chains(cl, chain);
		cnt = 0;
		for (int i = 0; i < nn; i++)
			cnt += i != cl->self && ((mask >> i) & 1);
		if (!cnt)
			break;
		pthread_mutex_lock(&cl->meta_lock);
		uint64_t version = cl->state->version;
		const struct cl_pub_change *last = &cl->pub_ring[cl->pub_head];
		bool diff = round == 0 && last->version == version && last->msg.len;
		if (diff) {
			cm_buf_put(&b, last->msg.data, last->msg.len);
		} else {
			cm_buf st;
			cm_buf_init(&st, MEM);
			rp_state_encode(cl->state, cl->names, cl->nn, &st);
			pr_metadata_encode(
			    &(pr_metadata){.version = version, .state = (char *)st.data, .len = st.len},
			    &b);
			cm_buf_free(&st);
		}
		pthread_mutex_unlock(&cl->meta_lock);
		cm_wait *w = cm_wait_create(cnt);
		uint64_t deadline = cm_now_ns() + 2000000000ull;
		for (int i = 0; i < nn; i++) {
			if (i == cl->self || !((mask >> i) & 1))
				continue;
			calls[i] = (pub_call){w, cl, i, version, quiet, diff, false, false};
			nd_peer_call(cl->nodes[i].peer, PR_METADATA, b.data, b.len,
			             cl_alive(cl, i) ? deadline : cm_now_ns() + 200000000ull, pub_done,
			             &calls[i]);
		}
		cm_wait_wait(w);
		cm_wait_destroy(w);
		mask = chain = 0;
		cnt = 0;
		for (int i = 0; i < nn; i++)
			if (i != cl->self && calls[i].w && calls[i].refused) {
				mask |= 1ull << i;
				chain |= (uint64_t)calls[i].conflict << i;
				cnt++;
			}
		memset(calls, 0, (size_t)nn * sizeof(pub_call));
	}
	cm_free(MEM, calls);
	cm_buf_free(&b);
}

void
cl_state_publish(nd_cluster *cl)
{
	if (cl_is_master(cl))
		state_publish(cl, ~0ull, false);
}

static cm_err commit_one_locked(nd_cluster *cl, rp_state *next, cm_error *err);

/* One step from cl->state towards next that fits in max etcd operations:
 * next's global part, then the removals and next's version of as many
 * changed indices as fit; at least one, so every step makes progress. The
 * names it put are appended to *took. */
static rp_state *
state_step(nd_cluster *cl, const rp_state *next, size_t max, char ***took, size_t *ntook)
{
	const rp_state *cur = cl->state;
	rp_state *mid = rp_state_dup(cur);
	memcpy(mid->joined, next->joined, sizeof(mid->joined));
	memcpy(mid->cluster_uuid, next->cluster_uuid, sizeof(mid->cluster_uuid));
	rp_state_set_settings(mid, next->settings);
	cm_free(CM_MEM_REPLICATION, mid->templates);
	mid->templates = next->templates ? cm_strdup(CM_MEM_REPLICATION, next->templates) : NULL;
	size_t used = 1; /* state/global */
	bool any = false;
	for (size_t i = 0; i < cur->nindices; i++) {
		const char *name = cur->indices[i].name;
		if (rp_state_index(next, name))
			continue;
		if (any && used + 2 > max)
			return mid;
		rp_state_remove_index(mid, name);
		used += 2; /* its key and its terms */
		any = true;
	}
	for (size_t i = 0; i < next->nindices; i++) {
		const rp_index *x = &next->indices[i];
		const rp_index *was = rp_state_index(cur, x->name);
		if (was && rp_index_same(was, x))
			continue;
		size_t c = cl_etcd_index_ops(cur, x) + (was && strcmp(was->uuid, x->uuid) != 0);
		if (any && used + c > max)
			break;
		rp_state_put_index(mid, x);
		used += c;
		any = true;
		*took = cm_realloc(MEM, *took, (*ntook + 1) * sizeof(char *));
		(*took)[(*ntook)++] = cm_strdup(MEM, x->name);
	}
	return mid;
}

cm_err
cl_state_commit_locked(nd_cluster *cl, rp_state *next, cm_error *err)
{
	size_t max = cl_etcd_max_txn_ops(cl), ops;
	while (cl->etcd && (ops = cl_etcd_txn_ops(cl->state, next)) > max) {
		char **took = NULL;
		size_t ntook = 0;
		rp_state *mid = state_step(cl, next, max, &took, &ntook);
		cm_info("cluster",
		        "a state change writes %zu keys, more than one etcd transaction "
		        "holds (%zu): made in steps, this one takes %zu indices",
		        ops, max, ntook);
		cm_err rc = commit_one_locked(cl, mid, err);
		/* the terms the step's write gave its indices carry over to next,
		 * so the last step does not give them new ones */
		for (size_t i = 0; i < ntook; i++) {
			const rp_index *done = rc ? NULL : rp_state_index(cl->state, took[i]);
			rp_index *x = rp_state_index(next, took[i]);
			if (done && x && strcmp(done->uuid, x->uuid) == 0 && done->nshards == x->nshards)
				for (int s = 0; s < x->nshards; s++)
					x->routes[s].term = done->routes[s].term;
			cm_free(MEM, took[i]);
		}
		cm_free(MEM, took);
		if (rc) {
			rp_state_free(next);
			return rc;
		}
	}
	return commit_one_locked(cl, next, err);
}

cm_err
cl_state_commit_whole_locked(nd_cluster *cl, rp_state *next, cm_error *err)
{
	size_t ops = cl->etcd ? cl_etcd_txn_ops(cl->state, next) : 0;
	if (ops > cl_etcd_max_txn_ops(cl)) {
		rp_state_free(next);
		return cm_error_set_type(
		    err, CM_EINVAL, "illegal_argument_exception",
		    "this change writes %zu keys of the cluster state, more than one etcd "
		    "transaction holds (cluster.etcd_max_txn_ops [%zu], etcd's --max-txn-ops): "
		    "nothing was changed; change fewer indices at once (deleting K indices writes "
		    "2K+1 keys, creating one with S shards S+2), or raise both limits",
		    ops, cl_etcd_max_txn_ops(cl));
	}
	return commit_one_locked(cl, next, err);
}

/* The Metadata that takes a node from prev to next: next's global part and
 * the indices that changed, the names gone. Master, meta_lock held. */
static void
diff_encode(nd_cluster *cl, const rp_state *prev, const rp_state *next, cm_buf *out)
{
	rp_state part = {.settings = next->settings, .templates = next->templates};
	memcpy(part.joined, next->joined, sizeof(part.joined));
	memcpy(part.cluster_uuid, next->cluster_uuid, sizeof(part.cluster_uuid));
	part.indices = cm_calloc(MEM, next->nindices + 1, sizeof(rp_index));
	for (size_t i = 0; i < next->nindices; i++) {
		const rp_index *was = rp_state_index(prev, next->indices[i].name);
		if (!was || !rp_index_same(was, &next->indices[i]))
			part.indices[part.nindices++] = next->indices[i]; /* borrowed */
	}
	char **gone = cm_calloc(MEM, prev->nindices + 1, sizeof(char *));
	size_t ngone = 0;
	for (size_t i = 0; i < prev->nindices; i++)
		if (!rp_state_index(next, prev->indices[i].name))
			gone[ngone++] = prev->indices[i].name; /* borrowed */
	cm_buf st;
	cm_buf_init(&st, MEM);
	rp_state_encode(&part, cl->names, cl->nn, &st);
	cm_buf_reset(out);
	pr_metadata_encode(&(pr_metadata){.version = next->version,
	                                  .base_version = prev->version,
	                                  .state = (char *)st.data,
	                                  .len = st.len,
	                                  .removed = gone,
	                                  .nremoved = ngone},
	                   out);
	cm_buf_free(&st);
	cm_free(MEM, gone);
	cm_free(MEM, part.indices);
}

static cm_err
commit_one_locked(nd_cluster *cl, rp_state *next, cm_error *err)
{
	cm_err rc;
	if (!next->cluster_uuid[0]) {
		char u[23];
		nd_uuid(u); /* the cluster's, from its first committed state on */
		snprintf(next->cluster_uuid, sizeof(next->cluster_uuid), "%s", u);
	}
	if (cl->etcd) {
		/* etcd holds the state; the local copy is a cache for the start */
		uint64_t v = 0;
		if ((rc = cl_etcd_commit(cl, cl->state, next, &v, err))) {
			rp_state_free(next);
			return rc;
		}
		next->version = v;
		cl_etcd_stamp_terms(cl->state, next, v);
		state_cache_mark_locked(cl);
	} else {
		next->version = cl->state->version + 1;
		if ((rc = state_persist(cl, next, err))) {
			rp_state_free(next);
			return rc;
		}
	}
	if (cl->state->version && next->version > cl->state->version) {
		int h = (cl->pub_head + 1) % CL_PUB_RING;
		struct cl_pub_change *c = &cl->pub_ring[h];
		diff_encode(cl, cl->state, next, &c->msg);
		c->base = cl->state->version;
		c->version = c->msg.len <= CL_PUB_RING_BYTES ? next->version : 0;
		if (!c->version)
			cm_buf_reset(&c->msg);
		cl->pub_head = h;
	}
	rp_state *before = cl->state;
	cl->state = next;
	atomic_store(&cl->state_version, next->version);
	cl_host_adopted(cl);
	drop_unplaced_locked(cl, before, cl->state); /* the master's own node, as every node does */
	rp_state_free(before);
	return CM_OK;
}

/* Master, every monitor round: nodes that missed a publish (not yet
 * connected, stalled) get the current state again. */
static void
state_republish(nd_cluster *cl)
{
	uint64_t behind = 0;
	pthread_mutex_lock(&cl->meta_lock);
	for (int i = 0; i < cl->nn; i++)
		if (i != cl->self && atomic_load(&cl->nodes[i].applied) < cl->state->version)
			behind |= 1ull << i;
	pthread_mutex_unlock(&cl->meta_lock);
	if (behind)
		state_publish(cl, behind, true);
}

/* Master, after a change of version v: waits (no lock held) until every
 * node that is up, or went down less than 5 s ago (a node that is still
 * connecting), has applied it, up to 10 s. ES answers acknowledged:false
 * past its ack timeout; so does this. */
static bool
wait_applied(nd_cluster *cl, uint64_t v)
{
	uint64_t until = cm_now_ns() + 10000000000ull;
	for (;;) {
		bool all = true;
		uint64_t now = cm_now_ns();
		for (int i = 0; i < cl->nn && all; i++) {
			if (i == cl->self || atomic_load(&cl->nodes[i].applied) >= v)
				continue;
			uint64_t since = atomic_load(&cl->nodes[i].down_since_ns);
			if (cl_alive(cl, i) || (since && now - since < 5000000000ull))
				all = false;
		}
		if (all)
			return true;
		if (now >= until)
			return false;
		usleep(5000);
	}
}

static cJSON *
ack_json(const char *index, bool acked)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "acknowledged", acked);
	if (index) {
		cJSON_AddBoolToObject(j, "shards_acknowledged", acked);
		cJSON_AddStringToObject(j, "index", index);
	}
	return j;
}

static char *
json_text(const cJSON *j)
{
	char *s = cJSON_PrintUnformatted(j);
	char *out = cm_strdup(MEM, s ? s : "");
	cJSON_free(s);
	return out;
}

/* Cluster settings this cluster keeps in its state (the allocator's);
 * anything else is refused before anything changes. */
static const char *const cluster_keys[] = {
    "cluster.routing.allocation.enable",
    "cluster.routing.allocation.exclude._name",
    "cluster.routing.allocation.exclude._ip",
    "cluster.routing.allocation.node_concurrent_recoveries",
    "cluster.routing.rebalance.enable",
    "cluster.max_shards_per_node",
    /* the tail-tolerant fan-out's (nd_rank.c checks their values) */
    "cluster.routing.use_adaptive_replica_selection",
    "search.hedge.enabled",
    "search.hedge.min_delay",
    "search.hedge.max_ratio",
    NULL,
};

/* The settings that take one of a few words: NULL when c is one of them
 * (or not such a setting), else the words it may be. */
static const char *
enum_refused(const cJSON *c)
{
	static const struct {
		const char *key, *words[5], *say;
	} enums[] = {
	    {"cluster.routing.allocation.enable",
	     {"all", "primaries", "new_primaries", "none", NULL},
	     "all, primaries, new_primaries or none"},
	    {"cluster.routing.rebalance.enable",
	     {"all", "primaries", "replicas", "none", NULL},
	     "all, primaries, replicas or none"},
	};
	for (size_t i = 0; i < sizeof(enums) / sizeof(enums[0]); i++) {
		if (strcmp(c->string, enums[i].key) || !cJSON_IsString(c))
			continue;
		for (int w = 0; enums[i].words[w]; w++)
			if (!strcmp(c->valuestring, enums[i].words[w]))
				return NULL;
		return enums[i].say;
	}
	return NULL;
}

static bool
cluster_key(const char *k)
{
	for (int i = 0; cluster_keys[i]; i++)
		if (strcmp(cluster_keys[i], k) == 0)
			return true;
	return false;
}

static void
flatten(const cJSON *src, const char *prefix, cJSON *dst)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, src)
	{
		char key[256];
		snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", c->string);
		if (cJSON_IsObject(c)) {
			flatten(c, key, dst);
		} else {
			cJSON_DeleteItemFromObjectCaseSensitive(dst, key);
			cJSON_AddItemToObject(dst, key, cJSON_Duplicate(c, true));
		}
	}
}

/* PUT _cluster/settings on the master: {"persistent":{..},"transient":{..}}
 * merged into the state's settings, flat; null removes a key. */
static cm_err
settings_merge(rp_state *next, const cJSON *body, cm_error *err)
{
	const char *secs[] = {"persistent", "transient"};
	cJSON *cur = next->settings ? cJSON_Parse(next->settings) : NULL;
	if (!cJSON_IsObject(cur)) {
		cJSON_Delete(cur);
		cur = cJSON_CreateObject();
	}
	for (int k = 0; k < 2; k++) {
		const cJSON *sec = cJSON_GetObjectItemCaseSensitive(body, secs[k]);
		if (!sec)
			continue;
		cJSON *flat = cJSON_CreateObject(), *c, *norms = cJSON_CreateObject();
		flatten(sec, "", flat);
		cJSON_ArrayForEach(c, flat)
		{
			if (nd_rank_key(c->string)) {
				char *norm = NULL;
				cm_err rc = nd_rank_check(c->string, c, &norm, err);
				if (rc) {
					cJSON_Delete(flat);
					cJSON_Delete(norms);
					cJSON_Delete(cur);
					return rc;
				}
				/* stored as text (cl_setting_in reads numbers as integers) */
				if (norm)
					cJSON_AddStringToObject(norms, c->string, norm);
				cm_free(MEM, norm);
				continue;
			}
			if (!cluster_key(c->string) ||
			    !(cJSON_IsString(c) || cJSON_IsNumber(c) || cJSON_IsNull(c))) {
				cm_err rc = cm_error_set(
				    err, CM_EINVAL,
				    "%s setting [%.100s], not dynamically updateable",
				    cluster_key(c->string) ? "invalid value for" : secs[k],
				    c->string);
				cJSON_Delete(flat);
				cJSON_Delete(norms);
				cJSON_Delete(cur);
				return rc;
			}
			if (strcmp(c->string, "cluster.max_shards_per_node") == 0 && !cJSON_IsNull(c)) {
				double v = cJSON_IsNumber(c) ? c->valuedouble
				           : cJSON_IsString(c) && *c->valuestring
				               ? strtod(c->valuestring, NULL)
				               : -1;
				if (!(v >= 1 && v <= 1e9 && v == (double)(long long)v)) {
					cm_err rc = cm_error_set(
					    err, CM_EINVAL,
					    "Failed to parse value for setting "
					    "[cluster.max_shards_per_node] must be >= 1");
					cJSON_Delete(flat);
					cJSON_Delete(norms);
					cJSON_Delete(cur);
					return rc;
				}
			}
			const char *bad = enum_refused(c);
			if (bad) {
				cm_err rc = cm_error_set(err, CM_EINVAL,
				                         "illegal value can't update [%s] from [all] to "
				                         "[%.60s]: %s",
				                         c->string, c->valuestring, bad);
				cJSON_Delete(flat);
				cJSON_Delete(norms);
				cJSON_Delete(cur);
				return rc;
			}
		}
		cJSON_ArrayForEach(c, norms)
		{
			cJSON_ReplaceItemInObjectCaseSensitive(flat, c->string,
			                                       cJSON_CreateString(c->valuestring));
		}
		cJSON_Delete(norms);
		cJSON *dst = cJSON_GetObjectItemCaseSensitive(cur, secs[k]);
		if (!dst)
			dst = cJSON_AddObjectToObject(cur, secs[k]);
		cJSON_ArrayForEach(c, flat)
		{
			cJSON_DeleteItemFromObjectCaseSensitive(dst, c->string);
			if (!cJSON_IsNull(c))
				cJSON_AddItemToObject(dst, c->string, cJSON_Duplicate(c, true));
		}
		cJSON_Delete(flat);
	}
	char *t = cJSON_PrintUnformatted(cur);
	rp_state_set_settings(next, t);
	cJSON_free(t);
	cJSON_Delete(cur);
	return CM_OK;
}

/* The state a reroute answers with, cut to its ?metric= (meta_lock
 * held). */
static cJSON *
reroute_state(nd_cluster *cl, const rp_state *st, const cJSON *body)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "metric");
	const char *ms = cJSON_IsString(m) ? m->valuestring : "_all";
	if (strstr(ms, "none") && !strstr(ms, "_all"))
		return cJSON_CreateObject();
	bool all = strstr(ms, "_all") != NULL;
	cJSON *j = cl_state_json_locked(cl, st, all || strstr(ms, "nodes"),
	                                all || strstr(ms, "routing_table"));
	if (!all && !strstr(ms, "version"))
		cJSON_DeleteItemFromObjectCaseSensitive(j, "version");
	if (!all && !strstr(ms, "master_node"))
		cJSON_DeleteItemFromObjectCaseSensitive(j, "master_node");
	return j;
}

/* number_of_replicas as a settings body sets it; -1 when it does not. */
static int
replicas_in(const cJSON *b)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "number_of_replicas");
	if (!v)
		v = cJSON_GetObjectItemCaseSensitive(b, "index.number_of_replicas");
	if (!v)
		v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "index"),
		                                     "number_of_replicas");
	if (cJSON_IsNumber(v))
		return v->valuedouble >= 0 && v->valuedouble < 1e6 ? (int)v->valuedouble : -1;
	if (cJSON_IsString(v) && *v->valuestring)
		return atoi(v->valuestring) >= 0 ? atoi(v->valuestring) : -1;
	return -1;
}

/* cluster.max_shards_per_node (default 1,000) times the data nodes is the
 * most shard copies of open indices the cluster holds: a create or a
 * replica change that would add `adding` copies beyond it is refused as
 * Elasticsearch refuses it. st is the state before the change. */
static cm_err
shard_limit_locked(nd_cluster *cl, const rp_state *st, long long adding, cm_error *err)
{
	if (adding <= 0)
		return CM_OK;
	char v[32];
	long long per_node = 1000;
	cl_settings *set = cl_settings_get(cl);
	if (cl_setting_in(set, "cluster.max_shards_per_node", v, sizeof(v)) && atoll(v) > 0)
		per_node = atoll(v);
	cl_settings_put(set);
	int ndata = 0;
	for (int i = 0; i < cl->nn; i++)
		ndata += cl->nodes[i].data && (!cl->etcd || i == cl->self ||
		                               atomic_load(&cl->nodes[i].registered));
	long long open = 0, limit = per_node * (ndata > 0 ? ndata : 1);
	for (size_t i = 0; i < st->nindices; i++)
		open += (long long)st->indices[i].nshards * (1 + st->indices[i].nreplicas);
	if (open + adding <= limit)
		return CM_OK; /* within the limit even were every index open */
	open = 0;
	for (size_t i = 0; i < st->nindices; i++) {
		const rp_index *e = &st->indices[i];
		nd_index *ix = nd_index_get(cl->node, e->name);
		if (!ix || !nd_index_closed(ix))
			open += (long long)e->nshards * (1 + e->nreplicas);
		nd_index_release(ix);
	}
	if (open + adding <= limit)
		return CM_OK;
	return cm_error_set_type(err, CM_EINVAL, "validation_exception",
	                         "Validation Failed: 1: this action would add [%lld] total shards, "
	                         "but this cluster currently has [%lld]/[%lld] maximum shards open;",
	                         adding, open, limit);
}

/* The master's side of a metadata change: validated by applying it here
 * first, then versioned, persisted and published; the reply waits until
 * the nodes applied it (wait_applied). A state that cannot be persisted
 * fails the change and, for a create, the index made here goes again. */
static cm_err
master_admin(nd_cluster *cl, const pr_meta_change *mc, pr_meta_reply *out, cm_error *err)
{
	const char *body = mc->source_len ? mc->source : NULL;
	cJSON *bj = body ? cJSON_ParseWithLength(body, mc->source_len) : NULL;
	cm_err rc = CM_OK;
	const char *created = NULL;
	uint64_t version = 0;
	cJSON *rr = NULL; /* a reroute's reply: state and explanations */
	bool dry = false;
	pr_meta_kind kind = mc->kind;
	const char *index = mc->nindices ? mc->indices[0] : "";
	bool batch = kind == PR_META_PUT_MAPPING && mc->nsources;

	memset(out, 0, sizeof(*out));
	if (body && !bj)
		return cm_error_set(err, CM_EPARSE, "malformed metadata request body");
	if (kind == PR_META_CREATE && mc->nindices != 1)
		return cm_error_set(err, CM_EINVAL, "an index create names one index");
	/* where new copies may go: on etcd the members that may take them */
	int pdata_buf[ND_CL_MAX_NODES], *pdata = cl->data_nodes, npdata = cl->ndata;
	if (cl->etcd) {
		npdata = cl_placeable(cl, pdata_buf);
		pdata = pdata_buf;
		if (!npdata && kind == PR_META_CREATE) {
			cJSON_Delete(bj);
			return cm_error_set(err, CM_EUNAVAIL,
			                    "no data node may take copies (none joined, or all "
			                    "excluded): index [%s] not created",
			                    index);
		}
	}
	pthread_mutex_lock(&cl->meta_lock);
	rp_state *next = NULL;
	next = rp_state_dup(cl->state);
	if (kind == PR_META_CREATE) {
		nd_index *ix = NULL;
		if ((rc = nd_index_create(cl->node, index, bj, &ix, err)))
			goto done;
		if ((rc = shard_limit_locked(
		         cl, next,
		         (long long)nd_index_nshards(ix) *
		             (1 + nd_index_settings(ix)->number_of_replicas),
		         err))) {
			cm_error e2;
			cm_error_clear(&e2);
			nd_index_delete(cl->node, ix, &e2); /* not half-applied */
			nd_index_release(ix);
			goto done;
		}
		rp_index *e =
		    rp_state_add_index(next, index, nd_index_uuid(ix), nd_index_nshards(ix),
		                       nd_index_settings(ix)->number_of_replicas, pdata, npdata);
		char *t = bj ? json_text(bj) : cm_strdup(MEM, "{}");
		rp_index_set_text(&e->body, t);
		cm_free(MEM, t);
		st_mapping *m = nd_index_mapping(ix);
		cJSON *mj = st_mapping_to_json(m);
		st_mapping_unref(m);
		t = json_text(mj);
		rp_index_set_text(&e->mappings, t);
		cm_free(MEM, t);
		cJSON_Delete(mj);
		nd_index_release(ix);
		created = index;
	} else if (kind == PR_META_DELETE || kind == PR_META_PUT_MAPPING ||
	           kind == PR_META_PUT_SETTINGS) {
		bool del = kind == PR_META_DELETE, settings = kind == PR_META_PUT_SETTINGS;
		/* a settings change is checked on every index before any applies */
		for (size_t i = 0; settings && mc->nindices > 1 && i < mc->nindices && !rc; i++) {
			nd_index *ix = nd_index_get(cl->node, mc->indices[i]);
			rc = ix ? nd_index_settings_check(ix, bj, err)
			        : cm_error_set(err, CM_ENOINDEX, "no such index [%s]", mc->indices[i]);
			nd_index_release(ix);
		}
		/* more replicas: the copies they add fit under the shard limit */
		int want = settings ? replicas_in(bj) : -1;
		long long adding = 0;
		for (size_t i = 0; want >= 0 && i < mc->nindices && !rc; i++) {
			const rp_index *e = rp_state_index(next, mc->indices[i]);
			nd_index *ix = nd_index_get(cl->node, mc->indices[i]);
			if (e && ix && !nd_index_closed(ix))
				adding += (long long)e->nshards * (want - e->nreplicas);
			nd_index_release(ix);
		}
		if (!rc && adding > 0)
			rc = shard_limit_locked(cl, next, adding, err);
		/* a mapping per index (one bulk's dynamic updates): each applies
		 * on its own, one that fails stays out of the change */
		bool each = batch;
		size_t applied = 0;
		for (size_t i = 0; !rc && i < mc->nindices; i++) {
			const char *tok = mc->indices[i];
			nd_index *ix = nd_index_get(cl->node, tok);
			if (del) {
				rp_state_remove_index(next, tok);
				nd_index_release(ix);
				continue;
			}
			cJSON *own = each ? cJSON_ParseWithLength(mc->sources[i], mc->source_lens[i])
			                  : NULL;
			if (!ix || (each && !own)) {
				rc = !ix ? cm_error_set(err, CM_ENOINDEX, "no such index [%s]", tok)
				         : cm_error_set(err, CM_EPARSE, "malformed mapping for [%s]",
				                        tok);
			} else {
				rc = settings ? nd_index_put_settings(ix, bj, err)
				              : nd_index_put_mapping(ix, own ? own : bj, err);
			}
			cJSON_Delete(own);
			if (rc && each) {
				cm_warn("cluster", "dynamic mapping update of [%s] refused: %s", tok,
				        err->reason);
				nd_index_release(ix);
				rc = CM_OK;
				continue;
			}
			if (rc) {
				nd_index_release(ix);
				break;
			}
			applied++;
			rp_index *e = rp_state_index(next, tok);
			if (!e) {
				e = rp_state_add_index(
				    next, tok, nd_index_uuid(ix), nd_index_nshards(ix),
				    nd_index_settings(ix)->number_of_replicas, pdata, npdata);
				rp_index_set_text(&e->body, "{}");
			}
			if (settings && strstr(body ? body : "", "number_of_replicas"))
				/* new copies start out of sync and recover; dropped
				 * copies leave the routing */
				rp_state_set_replicas(next, tok,
				                      nd_index_settings(ix)->number_of_replicas,
				                      pdata, npdata);
			if (settings) {
				/* Every node replays the dynamic settings changes in order. */
				char *t = json_text(bj);
				rp_index_add_setting(e, t);
				cm_free(MEM, t);
			} else {
				st_mapping *m = nd_index_mapping(ix);
				cJSON *mj = st_mapping_to_json(m);
				st_mapping_unref(m);
				char *t = json_text(mj);
				rp_index_set_text(&e->mappings, t);
				cm_free(MEM, t);
				cJSON_Delete(mj);
			}
			nd_index_release(ix);
		}
		if (!rc && each && !applied)
			rc = cm_error_set(err, CM_EINVAL, "no dynamic mapping update applied");
		if (rc)
			goto done;
	} else if (kind == PR_META_CLUSTER_SETTINGS) {
		if ((rc = settings_merge(next, bj, err)))
			goto done;
	} else if (kind == PR_META_REROUTE) {
		cJSON *expl = cJSON_CreateArray();
		if ((rc = cl_reroute_locked(cl, next, bj, pdata, npdata, expl, err))) {
			cJSON_Delete(expl);
			goto done;
		}
		rr = cJSON_CreateObject();
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bj, "explain")))
			cJSON_AddItemToObject(rr, "explanations", expl);
		else
			cJSON_Delete(expl);
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bj, "dry_run"))) {
			/* what the commands would make, left uncommitted */
			cJSON_AddItemToObject(rr, "state", reroute_state(cl, next, bj));
			dry = true;
			goto done;
		}
	} else if (kind == PR_META_ALIASES) {
		if ((rc = nd_alias_master(cl->node, next, bj, err)))
			goto done;
	} else if (kind == PR_META_TEMPLATES) {
		if ((rc = templates_change(next, bj, err)))
			goto done;
	} else {
		rc = cm_error_set(err, CM_EINVAL, "unknown metadata change [%d]", (int)kind);
		goto done;
	}
	/* a bulk's dynamic mapping updates are the cluster's own change, made
	 * in steps when they outgrow one etcd transaction; a user's change is
	 * whole or refused */
	rc = batch ? cl_state_commit_locked(cl, next, err)
	           : cl_state_commit_whole_locked(cl, next, err);
	next = NULL;
	if (rc) {
		if (created) {
			/* not half-applied: the index made here goes again */
			nd_index *ix = nd_index_get(cl->node, created);
			cm_error e2;
			cm_error_clear(&e2);
			if (ix)
				nd_index_delete(cl->node, ix, &e2);
			nd_index_release(ix);
		}
		goto done;
	}
	version = cl->state->version;
	if (rr)
		cJSON_AddItemToObject(rr, "state", reroute_state(cl, cl->state, bj));
	if (kind == PR_META_ALIASES)
		state_apply_locked(cl, cl->state); /* the master applies it as every node does */
	for (size_t i = 0; kind == PR_META_DELETE && i < mc->nindices; i++) {
		/* the state no longer has them: the local copies go now */
		nd_index *ix = nd_index_get(cl->node, mc->indices[i]);
		cm_error e2;
		cm_error_clear(&e2);
		if (ix)
			nd_index_delete(cl->node, ix, &e2);
		nd_index_release(ix);
	}
done:
	rp_state_free(next);
	pthread_mutex_unlock(&cl->meta_lock);
	if (!rc && !dry)
		cl_state_publish(cl);
	if (!rc) {
		out->acknowledged = dry || wait_applied(cl, version);
		out->index = cm_strdup(MEM, created ? created : "");
		out->reroute = rr ? json_text(rr) : cm_strdup(MEM, "");
		out->reroute_len = strlen(out->reroute);
	}
	cJSON_Delete(rr);
	cJSON_Delete(bj);
	return rc;
}

/* The answer to a metadata change, as the REST layer sends it. */
static char *
meta_reply_json(const pr_meta_reply *r)
{
	cJSON *j = r->reroute_len ? cJSON_ParseWithLength(r->reroute, r->reroute_len) : NULL;
	if (j) {
		cJSON_AddBoolToObject(j, "acknowledged", r->acknowledged);
	} else {
		j = ack_json(r->index && *r->index ? r->index : NULL, r->acknowledged);
	}
	char *text = json_text(j);
	cJSON_Delete(j);
	return text;
}

/* indices, comma-joined, as a MetaChange's list (strings in a cm_malloc'd
 * copy of indices, *keep). */
static void
meta_change_of(nd_meta_kind kind, const char *indices, const char *source, pr_meta_change *mc,
               char **keep)
{
	size_t n = 0;
	memset(mc, 0, sizeof(*mc));
	mc->kind = (pr_meta_kind)kind;
	*keep = cm_strdup(MEM, indices ? indices : "");
	for (const char *s = *keep; *s; s++)
		n += *s == ',';
	mc->indices = cm_calloc(MEM, n + 2, sizeof(char *));
	char *save = NULL;
	for (char *tok = strtok_r(*keep, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		mc->indices[mc->nindices++] = tok;
	mc->source = (char *)(uintptr_t)(source ? source : "");
	mc->source_len = source ? strlen(source) : 0;
}

_Static_assert((int)ND_META_CREATE == (int)PR_META_CREATE &&
                   (int)ND_META_TEMPLATES == (int)PR_META_TEMPLATES &&
                   (int)ND_META_REROUTE == (int)PR_META_REROUTE,
               "nd_meta_kind follows pr_meta_kind");
_Static_assert((int)ND_BROADCAST_REFRESH == (int)PR_BROADCAST_REFRESH &&
                   (int)ND_BROADCAST_FORCEMERGE == (int)PR_BROADCAST_FORCEMERGE,
               "nd_broadcast_op follows pr_broadcast_op");

static cm_err meta_send(nd_cluster *cl, int master, const pr_meta_change *mc, char **reply,
                        cm_error *err);

cm_err
nd_cluster_meta(nd_cluster *cl, nd_meta_kind kind, const char *indices, const char *source,
                char **reply, cm_error *err)
{
	cm_err rc;
	char *keep;
	pr_meta_change mc;
	const char *action = pr_meta_kind_name((pr_meta_kind)kind);

	*reply = NULL;
	/* during an election: wait for the new master, bounded */
	for (int k = 0; cl->etcd && cl->master < 0 && k < 100; k++)
		usleep(100000);
	int master = cl->master;
	if (master < 0)
		return cl->etcd
		           ? cm_error_set_type(err, CM_EUNAVAIL, "master_not_discovered_exception",
		                               "no master elected (is etcd reachable?): "
		                               "metadata change [%s] not applied",
		                               action)
		           : cm_error_set(err, CM_EUNAVAIL,
		                          "no master-eligible node in the cluster file: "
		                          "metadata changes are not possible");
	meta_change_of(kind, indices, source, &mc, &keep);
	rc = meta_send(cl, master, &mc, reply, err);
	cm_free(MEM, mc.indices);
	cm_free(MEM, keep);
	return rc;
}

/* A metadata change to the master (this node or another); *reply is the
 * REST answer's JSON text. */
static cm_err
meta_send(nd_cluster *cl, int master, const pr_meta_change *mc, char **reply, cm_error *err)
{
	cm_buf req, rep;
	uint32_t type;
	cm_err rc;
	cm_error remote;
	char *rbody = NULL;
	size_t rlen;
	pr_meta_reply mr;
	const char *action = pr_meta_kind_name(mc->kind);

	if (master == cl->self) {
		if (!(rc = master_admin(cl, mc, &mr, err)))
			*reply = meta_reply_json(&mr);
		pr_meta_reply_free(&mr);
		return rc;
	}
	cm_buf_init(&req, MEM);
	cm_buf_init(&rep, MEM);
	pr_meta_change_encode(mc, &req);
	rc = nd_peer_call_sync(cl->nodes[master].peer, PR_META_CHANGE, req.data, req.len,
	                       cm_now_ns() + 20000000000ull, &type, &rep);
	if (rc == CM_EINVAL) {
		rc = cm_error_set(
		    err, CM_EUNAVAIL,
		    "master node [%s] refused this node's messages (wrong cluster name or "
		    "secret?): metadata change [%s] not applied",
		    cl->nodes[master].name, action);
	} else if (rc) {
		cl_mark(cl, master, false, 0);
		rc = cm_error_set_type(
		    err, CM_EUNAVAIL, "master_not_discovered_exception",
		    "master node [%s] is not available (%s): metadata change [%s] not "
		    "applied; searches and writes go on",
		    cl->nodes[master].name, cm_err_msg(rc), action);
	} else if ((cm_error_clear(&remote),
	            pr_ack_decode(rep.data, rep.len, &remote, &rbody, &rlen)) &&
	           !remote.code) {
		rc = cm_error_set(err, CM_EINTERNAL, "malformed reply from the master");
		cm_free(MEM, rbody);
	} else if (remote.code) {
		*err = remote;
		rc = remote.code;
		cm_free(MEM, rbody);
	} else if ((cm_error_clear(&remote), pr_meta_reply_decode(rbody, rlen, &mr, &remote))) {
		pr_meta_reply_free(&mr);
		cm_free(MEM, rbody);
		rc = cm_error_set(err, CM_EINTERNAL, "malformed reply from the master");
	} else {
		*reply = meta_reply_json(&mr);
		pr_meta_reply_free(&mr);
		cm_free(MEM, rbody);
		/* The publish normally reached us before the ack, but the master
		 * skips nodes it cannot reach (its dialer may still be
		 * reconnecting): make sure this node sees its own change. */
		cl_fetch_state(cl);
	}
	cm_buf_free(&req);
	cm_buf_free(&rep);
	return rc;
}

void
cl_publish_mappings(nd_cluster *cl, nd_index *const *ixs, size_t n)
{
	char **names = cm_calloc(MEM, n + 1, sizeof(char *)), **docs = cm_calloc(MEM, n + 1,
	                                                                       sizeof(char *));
	size_t *lens = cm_calloc(MEM, n + 1, sizeof(size_t)), k = 0;
	for (size_t i = 0; i < n; i++) {
		st_mapping *m = nd_index_mapping(ixs[i]);
		cJSON *local = st_mapping_to_json(m);
		st_mapping_unref(m);
		pthread_mutex_lock(&cl->meta_lock);
		const rp_index *e = rp_state_index(cl->state, nd_index_name(ixs[i]));
		cJSON *pub = e ? parse_text(e->mappings) : NULL;
		bool same = !e || (pub && cJSON_Compare(pub, local, true));
		pthread_mutex_unlock(&cl->meta_lock);
		cJSON_Delete(pub);
		if (!same) {
			names[k] = (char *)(uintptr_t)nd_index_name(ixs[i]);
			docs[k] = cJSON_PrintUnformatted(local);
			lens[k] = strlen(docs[k]);
			k++;
		}
		cJSON_Delete(local);
	}
	if (k) {
		/* one change for them all: one commit and one publish, not one
		 * per index (a bulk that first writes to many indices) */
		pr_meta_change mc = {.kind = PR_META_PUT_MAPPING,
		                     .indices = names,
		                     .nindices = k,
		                     .source = (char *)"",
		                     .sources = docs,
		                     .source_lens = lens,
		                     .nsources = k};
		char *reply = NULL;
		cm_error err;
		cm_error_clear(&err);
		for (int w = 0; cl->etcd && cl->master < 0 && w < 100; w++)
			usleep(100000); /* during an election: wait for the new master */
		int master = cl->master;
		if (master < 0 || meta_send(cl, master, &mc, &reply, &err))
			cm_warn("cluster", "dynamic mapping update of %zu indices (first [%s]) not "
			        "published: %s",
			        k, names[0], master < 0 ? "no master" : err.reason);
		cm_free(MEM, reply);
	}
	for (size_t i = 0; i < k; i++)
		cJSON_free(docs[i]);
	cm_free(MEM, names);
	cm_free(MEM, docs);
	cm_free(MEM, lens);
}

/* ---- transport handlers ---- */

static void
reply_ack(const cm_error *e, const char *body, cm_buf *reply, uint32_t *type)
{
	pr_ack_encode(e, body, body ? strlen(body) : 0, reply);
	*type = PR_ACK;
}

static cm_err
local_broadcast(nd_cluster *cl, pr_broadcast_op op, const char *indices, cm_error *err)
{
	nd_index **ixs;
	size_t n;
	cm_err rc = nd_resolve(cl->node, indices, true, &ixs, &n, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		cm_err r = op == PR_BROADCAST_REFRESH ? nd_index_refresh(ixs[i])
		           : op == PR_BROADCAST_FLUSH ? nd_index_flush(ixs[i])
		                                      : nd_index_force_merge(ixs[i], 1);
		if (r && !rc)
			rc = cm_error_set(err, r, "%s of [%s] failed", pr_broadcast_op_name(op),
			                  nd_index_name(ixs[i]));
		nd_index_release(ixs[i]);
	}
	cm_free(MEM, ixs);
	return rc;
}

/* A request that only the master serves, arriving elsewhere. */
static bool
not_master(nd_cluster *cl, cm_error *err)
{
	if (cl_is_master(cl))
		return false;
	cm_error_set(err, CM_EUNAVAIL, "node [%s] is not the master", cl->nodes[cl->self].name);
	return true;
}

static void
h_ping(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
       uint32_t *reply_type)
{
	(void)deadline_ns;
	uint32_t from;
	if (len >= 4) {
		memcpy(&from, p, 4);
		if ((int)from >= 0 && (int)from < cl->nn && (int)from != cl->self)
			atomic_store(&cl->nodes[from].pong_sent_ns, cm_now_ns());
	}
	/* The pong carries this process's boot id: the master tells a
	 * restarted node (not yet joined) from one that stayed up; and, from
	 * the master, the version of its state: a node answers realtime gets
	 * only once it has applied it (a copy the master took out of the
	 * in-sync set while its node was cut off answered from its old state
	 * right after healing: fault scenario P8). */
	cm_buf_put_u64(reply, atomic_load(&cl->nodes[cl->self].boot));
	cm_buf_put_u64(reply, cl->master == cl->self ? atomic_load(&cl->state_version) : 0);
	*reply_type = PR_PONG;
}

static void
h_metadata(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
           uint32_t *reply_type)
{
	pr_metadata md;
	cm_error err;
	(void)deadline_ns;
	cm_error_clear(&err);
	if (pr_metadata_decode(p, len, &md, &err) == CM_OK) {
		if (!md.base_version) {
			atomic_fetch_add(&cl->pub_full, 1);
			state_receive(cl, md.state, md.len);
		} else if (state_receive_change(cl, &md, &err)) {
			atomic_fetch_add(&cl->pub_refused, 1);
		} else {
			atomic_fetch_add(&cl->pub_diffs, 1);
		}
	}
	pr_metadata_free(&md);
	reply_ack(&err, NULL, reply, reply_type);
}

static void
h_shard_event(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
              uint32_t *reply_type)
{
	rp_event ev;
	void *keep = NULL;
	cm_error err;
	(void)deadline_ns;
	cm_error_clear(&err);
	if (!not_master(cl, &err) &&
	    rp_event_decode(p, len, cl->names, cl->nn, &ev, &keep, &err) == CM_OK) {
		if (ev.kind == RP_EV_FAILED)
			cl_reads_stopped(cl, ev.node);
		pthread_mutex_lock(&cl->meta_lock);
		cm_err erc = cl_master_event_locked(cl, &ev, &err);
		pthread_mutex_unlock(&cl->meta_lock);
		if (!erc)
			cl_state_publish(cl);
	}
	rp_event_free(keep);
	reply_ack(&err, NULL, reply, reply_type);
}

/* StateGet: the master's state, binary (a ClusterState). */
static void
h_state_get(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
            uint32_t *reply_type)
{
	cm_buf b;
	cm_error err;
	(void)p, (void)len, (void)deadline_ns;
	cm_error_clear(&err);
	cm_buf_init(&b, MEM);
	if (!not_master(cl, &err)) {
		pthread_mutex_lock(&cl->meta_lock);
		rp_state_encode(cl->state, cl->names, cl->nn, &b);
		pthread_mutex_unlock(&cl->meta_lock);
	}
	pr_ack_encode(&err, (const char *)b.data, b.len, reply);
	*reply_type = PR_ACK;
	cm_buf_free(&b);
}

static void
h_meta_change(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
              uint32_t *reply_type)
{
	pr_meta_change mc;
	pr_meta_reply mr;
	cm_buf b;
	cm_error err;
	(void)deadline_ns;
	cm_error_clear(&err);
	cm_buf_init(&b, MEM);
	memset(&mr, 0, sizeof(mr));
	if (pr_meta_change_decode(p, len, &mc, &err) == CM_OK && !not_master(cl, &err) &&
	    master_admin(cl, &mc, &mr, &err) == CM_OK)
		pr_meta_reply_encode(&mr, &b);
	pr_meta_change_free(&mc);
	pr_meta_reply_free(&mr);
	pr_ack_encode(&err, (const char *)b.data, b.len, reply);
	*reply_type = PR_ACK;
	cm_buf_free(&b);
}

static void
h_broadcast(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
            uint32_t *reply_type)
{
	pr_broadcast_op op;
	char *indices = NULL;
	cm_error err;
	(void)deadline_ns;
	cm_error_clear(&err);
	if (pr_broadcast_decode(p, len, &op, &indices, &err) == CM_OK)
		local_broadcast(cl, op, indices, &err);
	cm_free(MEM, indices);
	reply_ack(&err, NULL, reply, reply_type);
}

static void
h_search_cancel(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
                uint32_t *reply_type)
{
	(void)cl, (void)deadline_ns;
	nd_rank_serve_cancel(p, len, reply, reply_type); /* a hedged request's losing copy */
}

static void
h_ctx(nd_cluster *cl, uint32_t type, const uint8_t *p, size_t len, cm_buf *reply,
      uint32_t *reply_type)
{
	nd_ctx_serve(cl->node, type, p, len, reply, reply_type); /* scroll, PIT (nd_ctx.c) */
}

static void
h_rp(nd_cluster *cl, uint32_t type, const uint8_t *p, size_t len, cm_buf *reply,
     uint32_t *reply_type)
{
	rp_serve(cl->rp, type, p, len, reply, reply_type); /* recoveries (replication/) */
}

static void
h_snap(nd_cluster *cl, uint32_t type, const uint8_t *p, size_t len, cm_buf *reply,
       uint32_t *reply_type)
{
	nd_snap_serve(cl->node, type, p, len, reply, reply_type); /* snapshots (nd_snapshot.c) */
}

/* Every message a node serves: one handler per type. Requests of a module
 * with its own wire code go to that module with their type. */
typedef void (*cl_handler)(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                           cm_buf *reply, uint32_t *reply_type);
typedef void (*cl_module_handler)(nd_cluster *cl, uint32_t type, const uint8_t *p, size_t len,
                                  cm_buf *reply, uint32_t *reply_type);
#define CL_MSG_MAX 68
static const cl_handler handlers[CL_MSG_MAX] = {
    [PR_PING] = h_ping,
    [PR_METADATA] = h_metadata,
    [PR_SHARD_EVENT] = h_shard_event,
    [PR_BULK] = cl_serve_bulk,
    [PR_SEARCH] = cl_serve_search,
    [PR_SEARCH_CANCEL] = h_search_cancel,
    [PR_STATE_GET] = h_state_get,
    [PR_META_CHANGE] = h_meta_change,
    [PR_BROADCAST] = h_broadcast,
    [PR_GET] = cl_serve_get,
    [PR_SHARD_STATS] = cl_serve_shard_stats,
    [PR_RECOVERY_ROWS] = cl_serve_recovery_rows,
    [PR_HANDOFF] = cl_serve_handoff,
    [PR_NODE_VIEW] = cl_serve_node_view,
};
static const cl_module_handler module_handlers[CL_MSG_MAX] = {
    [PR_REC_START] = h_rp,        [PR_REC_OPS] = h_rp,          [PR_REC_FILE] = h_rp,
    [PR_REC_FINALIZE] = h_rp,     [PR_REC_CANCEL] = h_rp,       [PR_REC_RELEASE] = h_rp,
    [PR_CTX_OPEN] = h_ctx,        [PR_CTX_SEARCH] = h_ctx,      [PR_CTX_FREE] = h_ctx,
    [SN_MSG_REPO] = h_snap,       [SN_MSG_SHARD] = h_snap,      [SN_MSG_RESTORE] = h_snap,
    [SN_MSG_VERIFY] = h_snap,
};
_Static_assert(PR_NODE_VIEW < CL_MSG_MAX, "the handler table holds every message type");

static void
serve(void *ctx, uint32_t type, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
      uint32_t *reply_type)
{
	nd_cluster *cl = ctx;
	if (type < CL_MSG_MAX && handlers[type]) {
		handlers[type](cl, p, len, deadline_ns, reply, reply_type);
	} else if (type < CL_MSG_MAX && module_handlers[type]) {
		module_handlers[type](cl, type, p, len, reply, reply_type);
	} else {
		cm_error err;
		cm_error_clear(&err);
		cm_error_set(&err, CM_EINVAL, "unknown message type %u", type);
		*reply_type = PR_ERROR;
		pr_ack_encode(&err, NULL, 0, reply);
	}
}

/* ---- liveness and metadata catch-up ---- */

static bool
wait_stop(nd_cluster *cl, int ms)
{
	struct timespec ts;
	bool stop;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&cl->stop_mu);
	if (!cl->stopping)
		pthread_cond_timedwait(&cl->stop_cv, &cl->stop_mu, &ts);
	stop = cl->stopping;
	pthread_mutex_unlock(&cl->stop_mu);
	return stop;
}

void
cl_fetch_state(nd_cluster *cl)
{
	char *st = NULL;
	cm_error err;
	cm_buf req, rep;
	uint32_t type;
	cm_error remote;
	size_t len;

	int master = cl->master;
	if (master < 0 || master == cl->self)
		return;
	cm_error_clear(&err);
	cm_error_clear(&remote);
	cm_buf_init(&req, MEM);
	cm_buf_init(&rep, MEM);
	/* StateGet has no fields: its encoding is empty */
	if (nd_peer_call_sync(cl->nodes[master].peer, PR_STATE_GET, req.data, req.len,
	                      cm_now_ns() + 2000000000ull, &type, &rep) == CM_OK &&
	    pr_ack_decode(rep.data, rep.len, &remote, &st, &len) == CM_OK) {
		if (!remote.code && st)
			state_receive(cl, st, len);
		cm_free(MEM, st);
	}
	cm_buf_free(&req);
	cm_buf_free(&rep);
}

static void *
monitor_main(void *arg)
{
	nd_cluster *cl = arg;
	int round = 0;
	do {
		cl_etcd_tick(cl);
		for (int i = 0; i < cl->nn; i++) {
			if (i == cl->self)
				continue;
			if (cl->etcd && !atomic_load(&cl->nodes[i].registered)) {
				cl_mark(cl, i, false, 0); /* not a member now: not pinged */
				continue;
			}
			cm_buf rep;
			uint32_t type;
			uint64_t t0 = cm_now_ns();
			cm_buf_init(&rep, MEM);
			uint32_t self = (uint32_t)cl->self; /* the master notes whose ping it answered */
			cm_err rc = nd_peer_call_sync(cl->nodes[i].peer, PR_PING, &self, sizeof(self),
			                              t0 + PING_DEADLINE_NS, &type, &rep);
			if (rc == CM_OK && rep.len >= 8) {
				uint64_t boot;
				memcpy(&boot, rep.data, 8);
				atomic_store(&cl->nodes[i].boot, boot);
			}
			if (rc == CM_OK)
				atomic_store(&cl->nodes[i].pong_ok_ns, cm_now_ns());
			if (rc == CM_OK && rep.len >= 16) {
				uint64_t version;
				memcpy(&version, rep.data + 8, 8);
				atomic_store(&cl->nodes[i].master_version, version);
			}
			cm_buf_free(&rep);
			uint64_t rtt = rc == CM_OK ? cm_now_ns() - t0 : 0;
			cl_mark(cl, i, rc == CM_OK, rtt);
			nd_rank_ping(i, rc == CM_OK, rtt); /* free probes for the copy ranking */
		}
		cl_etcd_reap(cl); /* a member's process gone: its lease need not expire */
		/* Nodes that were down while the state changed catch up here. */
		int master = cl->master;
		if (cl_is_master(cl))
			state_republish(cl);
		else if (!cl->etcd && master >= 0 && cl_alive(cl, master) && round++ % 4 == 0)
			cl_fetch_state(cl);
		cl_host_tick(cl);
		nd_rank_refresh(cl); /* search.hedge.*, adaptive selection */
		if (cl->etcd)
			state_cache_write(cl);
	} while (!wait_stop(cl, 500));
	return NULL;
}

/* A data folder written before the state was typed: its
 * cluster_state.json read into a state, once. */
static rp_state *
state_from_json(nd_cluster *cl, const char *text, size_t len)
{
	cJSON *j = cJSON_ParseWithLength(text, len), *e;
	const cJSON *indices = cJSON_GetObjectItemCaseSensitive(j, "indices");
	if (!cJSON_IsObject(indices)) {
		cJSON_Delete(j);
		return NULL;
	}
	rp_state *st = rp_state_new();
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "version");
	st->version = cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : 0;
	cJSON_ArrayForEach(e, indices)
	{
		nd_index *ix = nd_index_get(cl->node, e->string);
		const cJSON *uuid = cJSON_GetObjectItemCaseSensitive(e, "uuid");
		if (!ix)
			continue;
		rp_index *x = rp_state_add_index(
		    st, e->string, cJSON_IsString(uuid) ? uuid->valuestring : nd_index_uuid(ix),
		    nd_index_nshards(ix), nd_index_settings(ix)->number_of_replicas, cl->data_nodes,
		    cl->ndata);
		char *t = json_text(cJSON_GetObjectItemCaseSensitive(e, "body"));
		rp_index_set_text(&x->body, t);
		cm_free(MEM, t);
		t = json_text(cJSON_GetObjectItemCaseSensitive(e, "mappings"));
		rp_index_set_text(&x->mappings, t);
		cm_free(MEM, t);
		const cJSON *sb, *sh = cJSON_GetObjectItemCaseSensitive(e, "shards");
		cJSON_ArrayForEach(sb, cJSON_GetObjectItemCaseSensitive(e, "settings_log"))
		{
			t = json_text(sb);
			rp_index_add_setting(x, t);
			cm_free(MEM, t);
		}
		int s = 0;
		cJSON_ArrayForEach(sb, sh)
		{
			if (s >= x->nshards)
				break;
			rp_route *ro = &x->routes[s++];
			const cJSON *p = cJSON_GetObjectItemCaseSensitive(sb, "primary"), *it;
			const cJSON *t2 = cJSON_GetObjectItemCaseSensitive(sb, "term");
			ro->primary = -1;
			for (int i = 0; i < cl->nn; i++)
				if (cJSON_IsString(p) && strcmp(cl->names[i], p->valuestring) == 0)
					ro->primary = i;
			ro->term = cJSON_IsNumber(t2) ? (uint64_t)t2->valuedouble : 1;
			ro->in_sync = 0;
			cJSON_ArrayForEach(
			    it, cJSON_GetObjectItemCaseSensitive(
			            sb, "in_sync")) for (int i = 0; i < cl->nn;
			                                 i++) if (cJSON_IsString(it) &&
			                                          strcmp(cl->names[i],
			                                                 it->valuestring) == 0)
			    ro->in_sync |= 1ull << i;
		}
		nd_index_release(ix);
	}
	const cJSON *joined = cJSON_GetObjectItemCaseSensitive(j, "joined");
	for (int i = 0; i < cl->nn; i++) {
		const cJSON *b = cJSON_GetObjectItemCaseSensitive(joined, cl->names[i]);
		st->joined[i] = cJSON_IsString(b) ? strtoull(b->valuestring, NULL, 16) : 0;
	}
	cJSON_Delete(j);
	return st;
}

static cm_err
state_load(nd_cluster *cl, cm_error *err)
{
	char path[1024], *text = NULL;
	size_t len;
	state_path(cl, path, sizeof(path));
	if (cm_file_read(path, 256u << 20, &text, &len) == CM_OK) {
		cm_err rc = state_decode(cl, text, len, &cl->state, err);
		cm_free(MEM, text);
		if (rc)
			return cm_error_set(err, rc, "cluster state %s is unreadable: %s", path,
			                    err->reason);
		return CM_OK;
	}
	snprintf(path, sizeof(path), "%s/cluster_state.json", nd_data_dir(cl->node));
	if (cm_file_read(path, 256u << 20, &text, &len) == CM_OK) {
		cl->state = state_from_json(cl, text, len);
		cm_free(MEM, text);
		if (cl->state) {
			cm_err rc = state_persist(cl, cl->state, err);
			if (rc)
				return rc;
			cm_info("cluster", "cluster state version %" PRIu64 " read from %s",
			        cl->state->version, path);
			unlink(path);
		}
	}
	if (!cl->state)
		cl->state = rp_state_new();
	/* On etcd the versions are etcd's revisions: the cached state is
	 * older than anything etcd holds (even an etcd started anew). */
	if (cl->etcd)
		cl->state->version = 0;
	atomic_store(&cl->state_version, cl->state->version);
	return CM_OK;
}

nd_transport_opts
cl_transport_opts(const nd_cluster *cl)
{
	return (nd_transport_opts){.cluster = cl->cluster_name,
	                           .secret = cl->secret,
	                           .max_msg_bytes = cl->max_msg,
	                           .tls_cert = cl->tls_cert[0] ? cl->tls_cert : NULL,
	                           .tls_key = cl->tls_key,
	                           .tls_ca = cl->tls_ca[0] ? cl->tls_ca : NULL,
	                           .tls_verify = cl->tls_verify};
}

cm_err
nd_cluster_start(nd_cluster *cl, nd_node *n, cm_error *err)
{
	nd_transport_opts o = cl_transport_opts(cl);
	cm_err rc;

	cl->node = n;
	uint64_t boot = ((uint64_t)getpid() << 40) ^ (uint64_t)cm_wall_ms() ^ cm_now_ns();
	atomic_store(&cl->nodes[cl->self].boot, boot ? boot : 1);
	if ((rc = state_load(cl, err)))
		return rc;
	rp_start(cl->rp, nd_data_dir(n));
	pthread_mutex_lock(&cl->meta_lock);
	cl_host_adopted(cl);
	pthread_mutex_unlock(&cl->meta_lock);
	cl->pool = cm_pool_create(16, "cl-rpc");
	cl->spool = cm_pool_create(4, "cl-search");
	for (int i = 0; i < cl->nn; i++) {
		nd_peer *p = NULL;
		/* on etcd, nodes known by name only are dialed once they register */
		if (i != cl->self && cl->nodes[i].connect[0] &&
		    (rc = nd_peer_open(cl->nodes[i].connect, &o, &p, err)))
			return rc;
		cl->nodes[i].peer = p;
	}
	if ((rc = nd_server_start(cl->nodes[cl->self].transport, &o, 32, cl->pool, serve, cl,
	                          &cl->server, err)))
		return rc;
	atomic_store_explicit(&n->cluster, cl, memory_order_release);
	if (cl->etcd && (rc = cl_etcd_start(cl, err)))
		return rc;
	cl_fetch_state(cl);
	pthread_create(&cl->monitor, NULL, monitor_main, cl);
	cl->monitor_started = true;
	int master = cl->master;
	cm_info("cluster",
	        "node [%s] in cluster [%s]: %d nodes, %d data, master [%s], transport %s%s",
	        cl->nodes[cl->self].name, cl->cluster_name, (int)cl->nn, cl->ndata,
	        master >= 0 ? cl->nodes[master].name : "none", cl->nodes[cl->self].transport,
	        cl->etcd ? ", membership on etcd" : "");
	return CM_OK;
}

void
nd_cluster_stop(nd_cluster *cl)
{
	if (!cl)
		return;
	pthread_mutex_lock(&cl->stop_mu);
	cl->stopping = true;
	pthread_cond_broadcast(&cl->stop_cv);
	pthread_mutex_unlock(&cl->stop_mu);
	if (cl->monitor_started)
		pthread_join(cl->monitor, NULL);
	if (cl->etcd && cl->state)
		state_cache_write(cl); /* the latest state for the next start */
	/* Calls to peers fail from here on, so a recovery and the handlers
	 * waiting on replicas or the master finish; the replication state is
	 * freed only once no handler or pool task can touch it. */
	for (int i = 0; i < cl->nn; i++)
		nd_peer_abort(cl->nodes[i].peer);
	rp_quiesce(cl->rp);
	if (cl->server)
		nd_server_stop(cl->server);
	if (cl->pool)
		cm_pool_destroy(cl->pool);
	if (cl->spool)
		cm_pool_destroy(cl->spool);
	/* Only now the lease goes (the others see this node leave at once and
	 * fail its primaries over): before, this node could still apply a
	 * batch as a primary in the old term while a new primary takes over. */
	cl_etcd_stop(cl);
	for (int i = 0; i < cl->nn; i++)
		if (cl->nodes[i].peer)
			nd_peer_close(cl->nodes[i].peer);
	for (int i = 0; i < cl->npeers_old; i++)
		nd_peer_close(cl->peers_old[i]);
	cl_etcd_free(cl);
	rp_destroy(cl->rp);
	cl->rp = NULL;
	if (cl->node && nd_cluster_of(cl->node) == cl)
		atomic_store_explicit(&cl->node->cluster, NULL, memory_order_release);
	rp_state_free(cl->state);
	for (int i = 0; i < CL_PUB_RING; i++)
		cm_buf_free(&cl->pub_ring[i].msg);
	cl_settings_put(cl->settings);
	cl->settings = NULL;
	cm_free(MEM, cl->names);
	cm_free(MEM, cl->handoffs);
	cm_free(MEM, cl->data_nodes);
	cm_free(MEM, cl->nodes);
	cm_free(MEM, cl);
}

/* ---- broadcast ---- */

typedef struct bc_call {
	cm_wait *w;
	cm_err rc;
} bc_call;

static void
bc_done(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	bc_call *c = arg;
	cm_error e;
	char *body = NULL;
	size_t bl;
	(void)type;
	cm_error_clear(&e);
	if (!rc) {
		cm_err r = pr_ack_decode(p, len, &e, &body, &bl);
		rc = e.code ? e.code : r;
		cm_free(MEM, body);
	}
	c->rc = rc;
	cm_wait_done(c->w);
}

cm_err
nd_cluster_broadcast(nd_cluster *cl, nd_broadcast_op op, const char *indices, int *total,
                     int *failed, cm_error *err)
{
	int nn = cl->nn; /* counted once: on etcd a node may join while this runs */
	cm_buf b;
	bc_call *calls = cm_calloc(MEM, (size_t)nn, sizeof(bc_call));
	int remote = 0;
	cm_wait *w;
	cm_err rc = CM_OK;

	*total = *failed = 0;
	for (int i = 0; i < nn; i++)
		if (i != cl->self && cl->nodes[i].data)
			remote++;
	w = cm_wait_create(remote);
	cm_buf_init(&b, MEM);
	pr_broadcast_encode((pr_broadcast_op)op, indices, &b);
	for (int i = 0; i < nn; i++) {
		if (i == cl->self || !cl->nodes[i].data)
			continue;
		calls[i].w = w;
		nd_peer_call(cl->nodes[i].peer, PR_BROADCAST, b.data, b.len,
		             cm_now_ns() + 30000000000ull, bc_done, &calls[i]);
	}
	if (cl->nodes[cl->self].data) {
		(*total)++;
		if (local_broadcast(cl, (pr_broadcast_op)op, indices, err)) {
			(*failed)++;
			cm_error_clear(err);
		}
	}
	cm_wait_wait(w);
	cm_wait_destroy(w);
	for (int i = 0; i < nn; i++) {
		if (i == cl->self || !cl->nodes[i].data)
			continue;
		(*total)++;
		if (calls[i].rc)
			(*failed)++;
	}
	cm_buf_free(&b);
	cm_free(MEM, calls);
	return rc;
}

cJSON *
nd_cluster_settings_json(nd_cluster *cl)
{
	pthread_mutex_lock(&cl->meta_lock);
	cJSON *j = cl->state->settings ? cJSON_Parse(cl->state->settings) : NULL;
	pthread_mutex_unlock(&cl->meta_lock);
	return cJSON_IsObject(j) ? j : (cJSON_Delete(j), cJSON_CreateObject());
}

int
nd_cluster_nnodes(const nd_cluster *cl)
{
	return cl->nn;
}

const char *
nd_cluster_node_name(const nd_cluster *cl, int i)
{
	return i >= 0 && i < cl->nn ? cl->nodes[i].name : "";
}
