/* The static cluster: membership, metadata master, placement, liveness.
 * Writes and reads are in nd_cluster_rw.c; private state in
 * nd_cluster_private.h. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "../proto/pr.h"
#include "nd_cluster_rep.h"

#define MEM CM_MEM_NODE
#define MAX_CLUSTER_FILE (1u << 20)

static nd_cluster *g_cluster; /* one per process */

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

cm_err
nd_cluster_open(const char *file, const char *name, bool coordinator_only, nd_cl_fanout fanout,
                nd_cluster **out, cm_error *err)
{
	char *text = NULL;
	size_t len;
	cJSON *j = NULL, *nodes, *it;
	nd_cluster *cl = NULL;
	cm_err rc;

	if (cm_file_read(file, MAX_CLUSTER_FILE, &text, &len))
		return cm_error_set(err, CM_EIO, "cannot read cluster file %s", file);
	j = cJSON_ParseWithLength(text, len);
	cm_free(MEM, text);
	if (!j) {
		rc = cm_error_set(err, CM_EPARSE, "cluster file %s is not valid JSON", file);
		goto fail;
	}
	cl = cm_calloc(MEM, 1, sizeof(*cl));
	cl->self = -1;
	cl->master = -1;
	cl->fanout = fanout;
	pthread_mutex_init(&cl->meta_lock, NULL);
	pthread_mutex_init(&cl->lock, NULL);
	pthread_mutex_init(&cl->stop_mu, NULL);
	pthread_cond_init(&cl->stop_cv, NULL);
	cl_rep_init(cl);
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
	cl->nodes = cm_calloc(MEM, (size_t)nn, sizeof(nd_cl_node));
	cJSON_ArrayForEach(it, nodes)
	{
		nd_cl_node *nd = &cl->nodes[cl->nn];
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
		if (nd->master && cl->master < 0)
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
	if (cl->ndata == 0) {
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
	cl->data_nodes = cm_calloc(MEM, (size_t)cl->ndata, sizeof(int));
	for (int k = 0; k < cl->nn; k++)
		if (cl->nodes[k].data)
			cl->data_nodes[cl->nodes[k].data_ord] = k;
	cJSON_Delete(j);
	*out = cl;
	return CM_OK;
fail:
	cJSON_Delete(j);
	if (cl) {
		cm_free(MEM, cl->nodes);
		cm_free(MEM, cl);
	}
	return rc;
}

const char *
nd_cluster_http(const nd_cluster *cl)
{
	return cl->nodes[cl->self].http;
}

const char *
nd_cluster_self(const nd_cluster *cl)
{
	return cl->nodes[cl->self].name;
}

nd_cluster *
nd_cluster_of(const nd_node *n)
{
	nd_cluster *cl = g_cluster;
	return cl && cl->node == n ? cl : NULL;
}

nd_cluster *
cl_current(void)
{
	return g_cluster;
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

bool
cl_alive(nd_cluster *cl, int node)
{
	return node == cl->self || atomic_load(&cl->nodes[node].alive);
}

void
cl_mark(nd_cluster *cl, int node, bool alive, uint64_t latency_ns)
{
	nd_cl_node *nd = &cl->nodes[node];
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

/* ---- metadata ---- */

static void
state_path(nd_cluster *cl, char *path, size_t cap)
{
	snprintf(path, cap, "%s/cluster_state.json", nd_data_dir(cl->node));
}

static void
state_persist(nd_cluster *cl)
{
	char path[1024];
	char *s = cJSON_PrintUnformatted(cl->meta);
	state_path(cl, path, sizeof(path));
	if (cm_file_write_atomic(path, s, strlen(s)))
		cm_warn("cluster", "cannot persist cluster metadata to %s", path);
	cJSON_free(s);
}

static uint64_t
state_version(const cJSON *st)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, "version");
	return cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : 0;
}

/* Makes the local registry match a state: creates missing indices,
 * merges their mappings, deletes the indices the state no longer has.
 * Caller holds meta_lock. */
static void
state_apply_locked(nd_cluster *cl, cJSON *st)
{
	cJSON *indices = cJSON_GetObjectItemCaseSensitive(st, "indices"), *e;
	nd_index **all;
	size_t nall;
	cm_error err;

	cJSON_ArrayForEach(e, indices)
	{
		nd_index *ix = nd_index_get(cl->node, e->string);
		const cJSON *body = cJSON_GetObjectItemCaseSensitive(e, "body");
		const cJSON *maps = cJSON_GetObjectItemCaseSensitive(e, "mappings");
		cm_error_clear(&err);
		const cJSON *uuid = cJSON_GetObjectItemCaseSensitive(e, "uuid");
		if (!ix && nd_index_create_as(cl->node, e->string,
		                              cJSON_IsString(uuid) ? uuid->valuestring : NULL,
		                              cJSON_IsObject(body) ? body : NULL, &ix, &err)) {
			cm_warn("cluster",
			        "cannot create index [%s] from the master's metadata: %s",
			        e->string, err.reason);
			continue;
		}
		if (cJSON_IsObject(maps) && nd_index_put_mapping(ix, maps, &err))
			cm_warn("cluster", "cannot merge mapping of [%s]: %s", e->string,
			        err.reason);
		const cJSON *log = cJSON_GetObjectItemCaseSensitive(e, "settings_log"), *sb;
		cJSON_ArrayForEach(sb, log)
		{
			cm_error_clear(&err);
			if (nd_index_put_settings(ix, sb, &err))
				cm_warn("cluster", "cannot apply settings of [%s]: %s", e->string,
				        err.reason);
		}
		nd_index_release(ix);
	}
	nd_index_list(cl->node, &all, &nall);
	for (size_t i = 0; i < nall; i++) {
		if (!cJSON_GetObjectItemCaseSensitive(indices, nd_index_name(all[i]))) {
			cm_info("cluster", "index [%s] is gone from the metadata: deleting",
			        nd_index_name(all[i]));
			cm_error_clear(&err);
			nd_index_delete(cl->node, all[i], &err);
		}
		nd_index_release(all[i]);
	}
	cm_free(MEM, all);
}

/* Applies a published state if newer than ours. */
static void
state_receive(nd_cluster *cl, const char *text, size_t len)
{
	cJSON *st = cJSON_ParseWithLength(text, len);
	if (!st || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(st, "indices"))) {
		cJSON_Delete(st);
		cm_warn("cluster", "malformed metadata received");
		return;
	}
	pthread_mutex_lock(&cl->meta_lock);
	if (state_version(st) > state_version(cl->meta)) {
		state_apply_locked(cl, st);
		cJSON_Delete(cl->meta);
		cl->meta = st;
		st = NULL;
		state_persist(cl);
		cl_routes_rebuild_locked(cl);
		cm_info("cluster", "metadata version %llu applied",
		        (unsigned long long)state_version(cl->meta));
	}
	pthread_mutex_unlock(&cl->meta_lock);
	cJSON_Delete(st);
}

typedef struct pub_call {
	cm_wait *w;
	nd_cluster *cl;
	int node;
} pub_call;

static void
pub_done(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	pub_call *c = arg;
	(void)type, (void)p, (void)len;
	if (rc)
		cm_warn("cluster", "node [%s] did not take the metadata: %s",
		        c->cl->nodes[c->node].name, cm_err_msg(rc));
	cm_wait_done(c->w);
}

/* Sends the current state to every other node and waits, bounded: 2 s,
 * and 200 ms for a node the liveness check holds unreachable (it may be
 * starting and just connected, or stalled: a stalled node must not hold
 * every later change). The nodes that miss it catch up from the master
 * within a few seconds; nothing depends on a publish arriving (a copy that
 * has not learned a new primary term can only help the old primary gather
 * acknowledgements the new primary also holds). */
static void
state_publish_locked(nd_cluster *cl)
{
	cm_buf b;
	char *s = cJSON_PrintUnformatted(cl->meta);
	pub_call *calls = cm_calloc(MEM, (size_t)cl->nn, sizeof(pub_call));
	cm_wait *w = cm_wait_create(cl->nn - 1);
	uint64_t deadline = cm_now_ns() + 2000000000ull;

	cm_buf_init(&b, MEM);
	pr_metadata_encode(state_version(cl->meta), s, strlen(s), &b);
	for (int i = 0; i < cl->nn; i++) {
		if (i == cl->self)
			continue;
		calls[i] = (pub_call){w, cl, i};
		nd_peer_call(cl->nodes[i].peer, PR_METADATA, b.data, b.len,
		             cl_alive(cl, i) ? deadline : cm_now_ns() + 200000000ull, pub_done,
		             &calls[i]);
	}
	cm_wait_wait(w);
	cm_wait_destroy(w);
	cm_free(MEM, calls);
	cm_buf_free(&b);
	cJSON_free(s);
}

void
cl_state_commit_locked(nd_cluster *cl)
{
	cJSON_ReplaceItemInObjectCaseSensitive(
	    cl->meta, "version", cJSON_CreateNumber((double)(state_version(cl->meta) + 1)));
	state_persist(cl);
	cl_routes_rebuild_locked(cl);
	state_publish_locked(cl);
}

static cJSON *
ack_json(const char *index)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "acknowledged", true);
	if (index) {
		cJSON_AddBoolToObject(j, "shards_acknowledged", true);
		cJSON_AddStringToObject(j, "index", index);
	}
	return j;
}

/* The master's side of a metadata change: applies it here first (which
 * validates it with the solo node's messages), versions it, persists and
 * publishes it. */
static cm_err
master_admin(nd_cluster *cl, const char *action, const char *index, const char *body, char **reply,
             cm_error *err)
{
	cJSON *bj = body && *body ? cJSON_Parse(body) : NULL, *indices, *out = NULL;
	cm_err rc = CM_OK;

	*reply = NULL;
	if (body && *body && !bj)
		return cm_error_set(err, CM_EPARSE, "malformed metadata request body");
	pthread_mutex_lock(&cl->meta_lock);
	indices = cJSON_GetObjectItemCaseSensitive(cl->meta, "indices");
	if (cl_rep_is_master_action(action)) {
		if ((rc = cl_rep_master_action(cl, action, bj, err)))
			goto done;
		out = ack_json(NULL);
	} else if (strcmp(action, "create") == 0) {
		nd_index *ix = NULL;
		if ((rc = nd_index_create(cl->node, index, bj, &ix, err)))
			goto done;
		cJSON *e = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "uuid", nd_index_uuid(ix));
		cJSON_AddItemToObject(e, "body",
		                      bj ? cJSON_Duplicate(bj, true) : cJSON_CreateObject());
		st_mapping *m = nd_index_mapping(ix);
		cJSON_AddItemToObject(e, "mappings", st_mapping_to_json(m));
		st_mapping_unref(m);
		cl_rep_meta_new_index(cl, e, nd_index_nshards(ix),
		                      1 + nd_index_settings(ix)->number_of_replicas);
		cJSON_DeleteItemFromObjectCaseSensitive(indices, index);
		cJSON_AddItemToObject(indices, index, e);
		nd_index_release(ix);
		out = ack_json(index);
	} else if (strcmp(action, "delete") == 0 || strcmp(action, "put_mapping") == 0 ||
	           strcmp(action, "put_settings") == 0) {
		bool del = action[0] == 'd', settings = strcmp(action, "put_settings") == 0;
		if (settings && body && strstr(body, "number_of_replicas")) {
			/* New copies would start empty: there is no recovery yet. */
			rc = cm_error_set(
			    err, CM_EINVAL,
			    "number_of_replicas cannot change on a cluster yet: new replica "
			    "copies would need recovery, which phase 1 does not have");
			goto done;
		}
		char *copy = cm_strdup(MEM, index), *save = NULL, *tok;
		for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			nd_index *ix = nd_index_get(cl->node, tok);
			if (!ix) {
				if (!del) {
					rc = cm_error_set(err, CM_ENOINDEX, "no such index [%s]",
					                  tok);
					break;
				}
				cJSON_DeleteItemFromObjectCaseSensitive(indices, tok);
				continue;
			}
			if (del) {
				nd_index_delete(cl->node, ix, err);
				cm_error_clear(err);
				cJSON_DeleteItemFromObjectCaseSensitive(indices, tok);
			} else {
				if ((rc = settings ? nd_index_put_settings(ix, bj, err)
				                   : nd_index_put_mapping(ix, bj, err))) {
					nd_index_release(ix);
					break;
				}
				cJSON *e = cJSON_GetObjectItemCaseSensitive(indices, tok);
				if (!e) {
					e = cJSON_AddObjectToObject(indices, tok);
					cJSON_AddItemToObject(e, "body", cJSON_CreateObject());
				}
				if (settings) {
					/* Every node replays the dynamic settings changes in order.
					 */
					cJSON *log =
					    cJSON_GetObjectItemCaseSensitive(e, "settings_log");
					if (!log)
						log = cJSON_AddArrayToObject(e, "settings_log");
					cJSON_AddItemToArray(log, cJSON_Duplicate(bj, true));
					nd_index_release(ix);
					continue;
				}
				st_mapping *m = nd_index_mapping(ix);
				cJSON_DeleteItemFromObjectCaseSensitive(e, "mappings");
				cJSON_AddItemToObject(e, "mappings", st_mapping_to_json(m));
				st_mapping_unref(m);
			}
			nd_index_release(ix);
		}
		cm_free(MEM, copy);
		if (rc)
			goto done;
		out = ack_json(NULL);
	} else if (strcmp(action, "state") == 0) {
		char *s = cJSON_PrintUnformatted(cl->meta);
		*reply = cm_strdup(MEM, s);
		cJSON_free(s);
		goto done;
	} else {
		rc = cm_error_set(err, CM_EINVAL, "unknown metadata action [%s]", action);
		goto done;
	}
	cl_state_commit_locked(cl);
	{
		char *s = cJSON_PrintUnformatted(out);
		*reply = cm_strdup(MEM, s);
		cJSON_free(s);
	}
done:
	pthread_mutex_unlock(&cl->meta_lock);
	cJSON_Delete(bj);
	cJSON_Delete(out);
	return rc;
}

cm_err
nd_cluster_admin(nd_cluster *cl, const char *action, const char *index, const char *body,
                 char **reply, cm_error *err)
{
	cm_buf req, rep;
	uint32_t type;
	cm_err rc;
	cm_error remote;
	char *rbody = NULL;
	size_t rlen;

	*reply = NULL;
	if (cl->master < 0)
		return cm_error_set(
		    err, CM_EUNAVAIL,
		    "no master-eligible node in the cluster file: metadata changes are "
		    "not possible");
	if (cl->master == cl->self)
		return master_admin(cl, action, index, body, reply, err);
	cm_buf_init(&req, MEM);
	cm_buf_init(&rep, MEM);
	pr_admin_encode(action, index, body, body ? strlen(body) : 0, &req);
	rc = nd_peer_call_sync(cl->nodes[cl->master].peer, PR_ADMIN, req.data, req.len,
	                       cm_now_ns() + 10000000000ull, &type, &rep);
	if (rc == CM_EINVAL) {
		rc = cm_error_set(
		    err, CM_EUNAVAIL,
		    "master node [%s] refused this node's messages (wrong cluster name or "
		    "secret?): metadata change [%s] not applied",
		    cl->nodes[cl->master].name, action);
	} else if (rc) {
		cl_mark(cl, cl->master, false, 0);
		rc = cm_error_set_type(
		    err, CM_EUNAVAIL, "master_not_discovered_exception",
		    "master node [%s] is not available (%s): metadata change [%s] not "
		    "applied; searches and writes go on",
		    cl->nodes[cl->master].name, cm_err_msg(rc), action);
	} else if ((cm_error_clear(&remote),
	            pr_ack_decode(rep.data, rep.len, &remote, &rbody, &rlen)) &&
	           !remote.code) {
		rc = cm_error_set(err, CM_EINTERNAL, "malformed reply from the master");
		cm_free(MEM, rbody);
	} else if (remote.code) {
		*err = remote;
		rc = remote.code;
		cm_free(MEM, rbody);
	} else {
		*reply = rbody;
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
cl_publish_mapping(nd_cluster *cl, nd_index *ix)
{
	st_mapping *m = nd_index_mapping(ix);
	cJSON *local = st_mapping_to_json(m);
	bool same;
	st_mapping_unref(m);
	pthread_mutex_lock(&cl->meta_lock);
	cJSON *e = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(cl->meta, "indices"), nd_index_name(ix));
	same = !e || cJSON_Compare(cJSON_GetObjectItemCaseSensitive(e, "mappings"), local, true);
	pthread_mutex_unlock(&cl->meta_lock);
	if (!same) {
		char *text = cJSON_PrintUnformatted(local), *reply = NULL;
		cm_error err;
		cm_error_clear(&err);
		if (nd_cluster_admin(cl, "put_mapping", nd_index_name(ix), text, &reply, &err))
			cm_warn("cluster", "dynamic mapping update of [%s] not published: %s",
			        nd_index_name(ix), err.reason);
		cm_free(MEM, reply);
		cJSON_free(text);
	}
	cJSON_Delete(local);
}

/* ---- transport handlers ---- */

static void
reply_ack(const cm_error *e, const char *body, cm_buf *reply, uint32_t *type)
{
	pr_ack_encode(e, body, body ? strlen(body) : 0, reply);
	*type = PR_ACK;
}

static cm_err
local_broadcast(nd_cluster *cl, const char *action, const char *indices, cm_error *err)
{
	nd_index **ixs;
	size_t n;
	cm_err rc = nd_resolve(cl->node, indices, true, &ixs, &n, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		cm_err r = strcmp(action, "refresh") == 0 ? nd_index_refresh(ixs[i])
		           : strcmp(action, "flush") == 0 ? nd_index_flush(ixs[i])
		                                          : nd_index_force_merge(ixs[i], 1);
		if (r && !rc)
			rc = cm_error_set(err, r, "%s of [%s] failed", action,
			                  nd_index_name(ixs[i]));
		nd_index_release(ixs[i]);
	}
	cm_free(MEM, ixs);
	return rc;
}

static void
serve(void *ctx, uint32_t type, const uint8_t *p, size_t len, uint64_t deadline_ns, cm_buf *reply,
      uint32_t *reply_type)
{
	nd_cluster *cl = ctx;
	cm_error err;
	cm_error_clear(&err);

	switch (type) {
	case PR_PING:
		/* The pong carries this process's boot id: the master tells a
		 * restarted node (not yet joined) from one that stayed up. */
		cm_buf_put_u64(reply, atomic_load(&cl->nodes[cl->self].boot));
		*reply_type = PR_PONG;
		return;
	case PR_METADATA: {
		uint64_t v;
		char *st;
		size_t n;
		if (pr_metadata_decode(p, len, &v, &st, &n, &err) == CM_OK) {
			state_receive(cl, st, n);
			cm_free(MEM, st);
		}
		reply_ack(&err, NULL, reply, reply_type);
		return;
	}
	case PR_ADMIN: {
		pr_admin a;
		char *out = NULL;
		if (pr_admin_decode(p, len, &a, &err) == CM_OK && cl_rep_is_rec_action(a.action)) {
			size_t olen = 0;
			cl_rep_serve_rec(cl, a.action, a.index, a.body, a.body_len, &err, &out,
			                 &olen);
			pr_admin_free(&a);
			pr_ack_encode(&err, out, olen, reply);
			*reply_type = PR_ACK;
			cm_free(MEM, out);
			return;
		}
		if (!err.code) {
			if (strcmp(a.action, "refresh") == 0 || strcmp(a.action, "flush") == 0 ||
			    strcmp(a.action, "forcemerge") == 0)
				local_broadcast(cl, a.action, a.index, &err);
			else if (strncmp(a.action, "rw_", 3) == 0)
				cl_serve_rw(cl, a.action, a.index, a.body, a.body_len, &err, &out);
			else if (cl->master != cl->self)
				cm_error_set(&err, CM_EUNAVAIL, "node [%s] is not the master",
				             cl->nodes[cl->self].name);
			else
				master_admin(cl, a.action, a.index, a.body, &out, &err);
			pr_admin_free(&a);
		}
		reply_ack(&err, out, reply, reply_type);
		cm_free(MEM, out);
		return;
	}
	case PR_BULK:
		cl_serve_bulk(cl, p, len, deadline_ns, reply, reply_type);
		return;
	case PR_SEARCH:
		cl_serve_search(cl, p, len, deadline_ns, reply, reply_type);
		return;
	default:
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

	cm_error_clear(&err);
	cm_error_clear(&remote);
	cm_buf_init(&req, MEM);
	cm_buf_init(&rep, MEM);
	pr_admin_encode("state", "", NULL, 0, &req);
	if (nd_peer_call_sync(cl->nodes[cl->master].peer, PR_ADMIN, req.data, req.len,
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
		for (int i = 0; i < cl->nn; i++) {
			if (i == cl->self)
				continue;
			cm_buf rep;
			uint32_t type;
			uint64_t t0 = cm_now_ns();
			cm_buf_init(&rep, MEM);
			cm_err rc = nd_peer_call_sync(cl->nodes[i].peer, PR_PING, "", 0,
			                              t0 + 1000000000ull, &type, &rep);
			if (rc == CM_OK && rep.len == 8) {
				uint64_t boot;
				memcpy(&boot, rep.data, 8);
				atomic_store(&cl->nodes[i].boot, boot);
			}
			cm_buf_free(&rep);
			cl_mark(cl, i, rc == CM_OK, rc == CM_OK ? cm_now_ns() - t0 : 0);
		}
		/* Nodes that were down while the metadata changed catch up here. */
		if (cl->master >= 0 && cl->master != cl->self && cl_alive(cl, cl->master) &&
		    round++ % 4 == 0)
			cl_fetch_state(cl);
		cl_rep_tick(cl);
	} while (!wait_stop(cl, 500));
	return NULL;
}

cm_err
nd_cluster_start(nd_cluster *cl, nd_node *n, cm_error *err)
{
	nd_transport_opts o = {.cluster = cl->cluster_name,
	                       .secret = cl->secret,
	                       .max_msg_bytes = cl->max_msg,
	                       .tls_cert = cl->tls_cert[0] ? cl->tls_cert : NULL,
	                       .tls_key = cl->tls_key,
	                       .tls_ca = cl->tls_ca[0] ? cl->tls_ca : NULL,
	                       .tls_verify = cl->tls_verify};
	char path[1024], *text = NULL;
	size_t len;
	cm_err rc;

	cl->node = n;
	state_path(cl, path, sizeof(path));
	if (cm_file_read(path, 64u << 20, &text, &len) == CM_OK) {
		cl->meta = cJSON_ParseWithLength(text, len);
		cm_free(MEM, text);
	}
	if (!cl->meta || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(cl->meta, "indices"))) {
		cJSON_Delete(cl->meta);
		cl->meta = cJSON_CreateObject();
		cJSON_AddNumberToObject(cl->meta, "version", 0);
		cJSON_AddObjectToObject(cl->meta, "indices");
	}
	cl->pool = cm_pool_create(16, "cl-rpc");
	cl->spool = cm_pool_create(4, "cl-search");
	for (int i = 0; i < cl->nn; i++)
		if (i != cl->self &&
		    (rc = nd_peer_open(cl->nodes[i].connect, &o, &cl->nodes[i].peer, err)))
			return rc;
	if ((rc = nd_server_start(cl->nodes[cl->self].transport, &o, 32, cl->pool, serve, cl,
	                          &cl->server, err)))
		return rc;
	g_cluster = cl;
	if (cl->master >= 0 && cl->master != cl->self)
		cl_fetch_state(cl);
	cl_rep_start(cl);
	pthread_create(&cl->monitor, NULL, monitor_main, cl);
	cl->monitor_started = true;
	cm_info(
	    "cluster", "node [%s] in cluster [%s]: %d nodes, %d data, master [%s], transport %s",
	    cl->nodes[cl->self].name, cl->cluster_name, cl->nn, cl->ndata,
	    cl->master >= 0 ? cl->nodes[cl->master].name : "none", cl->nodes[cl->self].transport);
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
	/* Calls to peers fail from here on, so a recovery and the handlers
	 * waiting on replicas or the master finish; the replication state is
	 * freed only once no handler or pool task can touch it. */
	for (int i = 0; i < cl->nn; i++)
		nd_peer_abort(cl->nodes[i].peer);
	cl_rep_quiesce(cl);
	if (cl->server)
		nd_server_stop(cl->server);
	if (cl->pool)
		cm_pool_destroy(cl->pool);
	if (cl->spool)
		cm_pool_destroy(cl->spool);
	for (int i = 0; i < cl->nn; i++)
		if (cl->nodes[i].peer)
			nd_peer_close(cl->nodes[i].peer);
	cl_rep_stop(cl);
	if (g_cluster == cl)
		g_cluster = NULL;
	cJSON_Delete(cl->meta);
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
nd_cluster_broadcast(nd_cluster *cl, const char *action, const char *indices, int *total,
                     int *failed, cm_error *err)
{
	cm_buf b;
	bc_call *calls = cm_calloc(MEM, (size_t)cl->nn, sizeof(bc_call));
	int remote = 0;
	cm_wait *w;
	cm_err rc = CM_OK;

	*total = *failed = 0;
	for (int i = 0; i < cl->nn; i++)
		if (i != cl->self && cl->nodes[i].data)
			remote++;
	w = cm_wait_create(remote);
	cm_buf_init(&b, MEM);
	pr_admin_encode(action, indices, NULL, 0, &b);
	for (int i = 0; i < cl->nn; i++) {
		if (i == cl->self || !cl->nodes[i].data)
			continue;
		calls[i].w = w;
		nd_peer_call(cl->nodes[i].peer, PR_ADMIN, b.data, b.len,
		             cm_now_ns() + 30000000000ull, bc_done, &calls[i]);
	}
	if (cl->nodes[cl->self].data) {
		(*total)++;
		if (local_broadcast(cl, action, indices, err)) {
			(*failed)++;
			cm_error_clear(err);
		}
	}
	cm_wait_wait(w);
	cm_wait_destroy(w);
	for (int i = 0; i < cl->nn; i++) {
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
