/* Snapshot repositories and the node's side of the snapshot messages:
 * pinning a primary's commit and copying its files into a repository,
 * restoring a primary from one, verifying a repository. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "../proto/pr.h"
#include "nd_cluster_private.h"
#include "nd_snap_private.h"

#define MEM CM_MEM_NODE
#define REPOS_FILE "snapshot-repositories.json"
#define PUSH_NS 5000000000ull

snap_state nd_snap_g = {.mu = PTHREAD_MUTEX_INITIALIZER, .runs_cv = PTHREAD_COND_INITIALIZER};
#define G nd_snap_g

typedef struct snap_pin {
	struct snap_pin *next;
	char token[64];
	char dir[PATH_MAX + 80];
	char **names;
	size_t n;
	uint64_t *sizes;
} snap_pin;

#define SNAP_RECS 256

typedef struct snap_rec {
	char index[SN_NAME_MAX], source[2 * SN_NAME_MAX];
	int shard;
	int64_t start_ms, stop_ms;
	uint64_t files, bytes;
	bool failed;
} snap_rec;

static void
rec_add(const snap_rec *r)
{
	pthread_mutex_lock(&G.mu);
	if (!G.recs)
		G.recs = cm_calloc(MEM, SNAP_RECS, sizeof(snap_rec));
	if (G.nrecs == SNAP_RECS)
		memmove(G.recs, G.recs + 1, (SNAP_RECS - 1) * sizeof(snap_rec));
	else
		G.nrecs++;
	G.recs[G.nrecs - 1] = *r;
	pthread_mutex_unlock(&G.mu);
}

void
nd_snap_cat_recovery(cm_buf *out)
{
	pthread_mutex_lock(&G.mu);
	for (size_t i = 0; i < G.nrecs; i++) {
		const snap_rec *x = &G.recs[i];
		cm_buf_printf(out, "%s %d %.3fs snapshot %s %s %s %" PRIu64 " %" PRIu64 " 0\n",
		              x->index, x->shard, (double)(x->stop_ms - x->start_ms) / 1000.0,
		              x->failed ? "failed" : "done", x->source[0] ? x->source : "-",
		              G.node ? nd_node_name(G.node) : "-", x->files, x->bytes);
	}
	pthread_mutex_unlock(&G.mu);
}

void
snap_token(char *out, size_t cap)
{
	pthread_mutex_lock(&G.mu);
	uint64_t s = ++G.seq;
	pthread_mutex_unlock(&G.mu);
	snprintf(out, cap, "%d-%" PRIu64 "-%" PRIx64, (int)getpid(), s, (uint64_t)cm_wall_ms());
}

/* ---- the registry ---- */

static void
repos_persist_locked(void)
{
	char path[PATH_MAX + 64];
	cJSON *j = cJSON_CreateObject();
	for (size_t i = 0; i < G.nrepos; i++) {
		cJSON *r = cJSON_AddObjectToObject(j, G.repos[i].name);
		cJSON_AddStringToObject(r, "location", G.repos[i].location);
		cJSON_AddBoolToObject(r, "compress", G.repos[i].compress);
		cJSON_AddNumberToObject(r, "max_snapshot_bytes_per_sec",
		                        (double)G.repos[i].max_bps);
	}
	char *t = cJSON_PrintUnformatted(j);
	snprintf(path, sizeof(path), "%s/%s", nd_data_dir(G.node), REPOS_FILE);
	if (cm_file_write_atomic(path, t, strlen(t)))
		cm_warn("snapshot", "cannot persist the repositories to %s", path);
	cJSON_free(t);
	cJSON_Delete(j);
}

/* Checks a repository against this node's path.repo and registers it. */
static cm_err
repo_register(const sn_msg_repo *m, cm_error *err)
{
	snap_repo r = {0};
	sn_repo *h;
	cm_err rc;
	if (strcmp(m->type, "fs") != 0)
		return cm_error_set_type(err, CM_EINVAL, "repository_exception",
		                         "[%s] repository type [%s] does not exist", m->name,
		                         m->type);
	if ((rc = sn_location_check(G.path_repo, m->location, r.resolved, sizeof(r.resolved), err)))
		return rc;
	if ((rc = sn_repo_open(r.resolved, 0, &h, err)))
		return rc;
	sn_repo_close(h);
	snprintf(r.name, sizeof(r.name), "%s", m->name);
	snprintf(r.location, sizeof(r.location), "%s", m->location);
	r.compress = m->compress;
	r.max_bps = m->max_bps;
	pthread_mutex_lock(&G.mu);
	size_t i = 0;
	while (i < G.nrepos && strcmp(G.repos[i].name, m->name) != 0)
		i++;
	if (i == G.nrepos) {
		G.repos = cm_realloc(MEM, G.repos, (G.nrepos + 1) * sizeof(*G.repos));
		G.nrepos++;
	}
	G.repos[i] = r;
	repos_persist_locked();
	pthread_mutex_unlock(&G.mu);
	return CM_OK;
}

static bool
repo_unregister(const char *name)
{
	bool found = false;
	pthread_mutex_lock(&G.mu);
	for (size_t i = 0; i < G.nrepos; i++)
		if (strcmp(G.repos[i].name, name) == 0) {
			G.repos[i] = G.repos[--G.nrepos];
			found = true;
			break;
		}
	if (found)
		repos_persist_locked();
	pthread_mutex_unlock(&G.mu);
	return found;
}

cm_err
snap_repo_find(const char *name, snap_repo *out, cm_error *err)
{
	cm_err rc = CM_ENOTFOUND;
	pthread_mutex_lock(&G.mu);
	for (size_t i = 0; i < G.nrepos; i++)
		if (strcmp(G.repos[i].name, name) == 0) {
			*out = G.repos[i];
			rc = CM_OK;
		}
	pthread_mutex_unlock(&G.mu);
	if (rc)
		cm_error_set_type(err, CM_ENOTFOUND, "repository_missing_exception", "[%s] missing",
		                  name);
	return rc;
}

static void
pins_clear(void)
{
	while (G.pins) {
		snap_pin *p = G.pins;
		G.pins = p->next;
		cm_rm_rf(p->dir);
		st_shard_dir_files_free(p->names, p->n);
		cm_free(MEM, p->sizes);
		cm_free(MEM, p);
	}
}

cm_err
nd_snap_open(nd_node *n, const char *path_repo, cm_error *err)
{
	char path[PATH_MAX + 64], *buf;
	size_t len;
	G.node = n;
	snprintf(G.path_repo, sizeof(G.path_repo), "%s", path_repo ? path_repo : "");
	snprintf(G.data_tmp, sizeof(G.data_tmp), "%s/snapshot-tmp", nd_data_dir(n));
	cm_rm_rf(G.data_tmp); /* pins and restores of a previous run */
	if (G.path_repo[0] && access(G.path_repo, F_OK) != 0 && cm_mkdir_p(G.path_repo))
		return cm_error_set(err, CM_EIO, "cannot create path.repo [%s]", G.path_repo);
	snprintf(path, sizeof(path), "%s/%s", nd_data_dir(n), REPOS_FILE);
	if (cm_file_read(path, 16u << 20, &buf, &len) != CM_OK)
		return CM_OK;
	cJSON *j = cJSON_ParseWithLength(buf, len), *r;
	cm_free(CM_MEM_COMMON, buf);
	cJSON_ArrayForEach(r, j)
	{
		sn_msg_repo m = {0};
		cm_error e2;
		const cJSON *loc = cJSON_GetObjectItemCaseSensitive(r, "location");
		const cJSON *bps =
		    cJSON_GetObjectItemCaseSensitive(r, "max_snapshot_bytes_per_sec");
		if (!r->string || strlen(r->string) >= sizeof(m.name) || !cJSON_IsString(loc) ||
		    strlen(loc->valuestring) >= sizeof(m.location))
			continue;
		strcpy(m.name, r->string);
		strcpy(m.type, "fs");
		strcpy(m.location, loc->valuestring);
		m.compress = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "compress"));
		m.max_bps =
		    cJSON_IsNumber(bps) && bps->valuedouble > 0 ? (uint64_t)bps->valuedouble : 0;
		cm_error_clear(&e2);
		if (repo_register(&m, &e2))
			cm_warn("snapshot", "repository [%s] dropped: %s", m.name, e2.reason);
	}
	cJSON_Delete(j);
	return CM_OK;
}

void
nd_snap_stop(void)
{
	atomic_store(&G.stopping, true);
}

void
nd_snap_close(void)
{
	nd_snap_stop();
	pthread_mutex_lock(&G.mu);
	while (G.nruns)
		pthread_cond_wait(&G.runs_cv, &G.mu);
	cm_free(MEM, G.runs);
	G.runs = NULL;
	cm_free(MEM, G.recs);
	G.recs = NULL;
	G.nrecs = 0;
	pins_clear();
	cm_free(MEM, G.repos);
	G.repos = NULL;
	G.nrepos = 0;
	pthread_mutex_unlock(&G.mu);
}

/* ---- calls ---- */

cm_err
snap_call(nd_node *n, int node, uint32_t type, const cm_buf *req, uint64_t deadline_ns, char **body,
          size_t *len, cm_error *err)
{
	nd_cluster *cl = nd_cluster_of(n);
	cm_buf rep;
	uint32_t rtype = 0;
	cm_error remote;
	cm_err rc;
	*body = NULL;
	*len = 0;
	cm_buf_init(&rep, MEM);
	nd_peer *peer = cl && node >= 0 && node != cl->self ? cl->nodes[node].peer : NULL;
	if (!cl || node < 0 || node == cl->self) {
		nd_snap_serve(n, type, req->data, req->len, &rep, &rtype);
	} else if (!peer) {
		cm_buf_free(&rep);
		return cm_error_set(err, CM_EUNAVAIL, "node [%s] is not connected",
		                    cl->nodes[node].name);
	} else if ((rc = nd_peer_call_sync(peer, type, req->data, req->len, deadline_ns, &rtype,
	                                   &rep))) {
		cm_buf_free(&rep);
		return cm_error_set(err, rc == CM_ETIMEDOUT ? rc : CM_EUNAVAIL,
		                    "node [%s] did not answer (%s)", cl->nodes[node].name,
		                    cm_err_msg(rc));
	}
	cm_error_clear(&remote);
	rc = pr_ack_decode(rep.data, rep.len, &remote, body, len);
	cm_buf_free(&rep);
	if (remote.code) {
		/* keep the remote error's reason; its ES type travels only in-process */
		cm_error_set(err, remote.code, "%s", remote.reason);
		return remote.code;
	}
	if (rc)
		return cm_error_set(err, rc, "malformed snapshot reply");
	return CM_OK;
}

/* The nodes a repository must reach: every node of the cluster, or this
 * one (-1) when solo. */
static int
cluster_nodes(nd_node *n, int *out, int cap)
{
	nd_cluster *cl = nd_cluster_of(n);
	if (!cl) {
		out[0] = -1;
		return 1;
	}
	int k = 0;
	for (int i = 0; i < cl->nn && k < cap; i++)
		out[k++] = i;
	return k;
}

static const char *
node_label(nd_node *n, int node)
{
	nd_cluster *cl = nd_cluster_of(n);
	return cl && node >= 0 ? cl->nodes[node].name : nd_node_name(n);
}

/* ---- repository REST ---- */

static bool
json_bool(const cJSON *v, bool dflt, bool *ok)
{
	if (!v)
		return dflt;
	if (cJSON_IsBool(v))
		return cJSON_IsTrue(v);
	if (cJSON_IsString(v) && strcmp(v->valuestring, "true") == 0)
		return true;
	if (cJSON_IsString(v) && strcmp(v->valuestring, "false") == 0)
		return false;
	*ok = false;
	return dflt;
}

cm_err
nd_snap_repo_put(nd_node *n, const char *name, const cJSON *body, cJSON **out, cm_error *err)
{
	sn_msg_repo m = {0};
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(body, "type");
	const cJSON *set = cJSON_GetObjectItemCaseSensitive(body, "settings");
	const cJSON *loc = cJSON_GetObjectItemCaseSensitive(set, "location");
	const cJSON *bps = cJSON_GetObjectItemCaseSensitive(set, "max_snapshot_bytes_per_sec");
	const cJSON *s;
	bool ok = true;
	cm_err rc;

	*out = NULL;
	if ((rc = sn_name_check(name, err)))
		return cm_error_set_type(err, CM_EINVAL, "repository_exception",
		                         "[%s] invalid repository name", name);
	if (!cJSON_IsObject(body) || !cJSON_IsString(type))
		return cm_error_set_type(err, CM_EINVAL, "repository_exception",
		                         "[%s] repository type is missing", name);
	if (set && !cJSON_IsObject(set))
		return cm_error_set_type(err, CM_EINVAL, "repository_exception",
		                         "[%s] settings must be an object", name);
	cJSON_ArrayForEach(s, set)
	{
		if (strcmp(s->string, "location") && strcmp(s->string, "compress") &&
		    strcmp(s->string, "max_snapshot_bytes_per_sec") &&
		    strcmp(s->string, "max_restore_bytes_per_sec") &&
		    strcmp(s->string, "chunk_size"))
			return cm_error_set_type(err, CM_EINVAL, "repository_exception",
			                         "[%s] unknown repository setting [%s]", name,
			                         s->string);
	}
	if (!cJSON_IsString(loc) || !loc->valuestring[0])
		return cm_error_set_type(err, CM_EINVAL, "repository_exception",
		                         "[%s] missing location", name);
	if (strlen(loc->valuestring) >= sizeof(m.location) || strlen(type->valuestring) >= 32)
		return cm_error_set_type(err, CM_EINVAL, "repository_exception",
		                         "[%s] location is too long", name);
	snprintf(m.name, sizeof(m.name), "%s", name);
	snprintf(m.type, sizeof(m.type), "%s", type->valuestring);
	snprintf(m.location, sizeof(m.location), "%s", loc->valuestring);
	m.compress = json_bool(cJSON_GetObjectItemCaseSensitive(set, "compress"), false, &ok);
	if (!ok)
		return cm_error_set_type(err, CM_EINVAL, "repository_exception",
		                         "[%s] compress must be true or false", name);
	if (bps && !(cJSON_IsString(bps) && sn_parse_bytes(bps->valuestring, &m.max_bps)) &&
	    !(cJSON_IsNumber(bps) && bps->valuedouble >= 0 &&
	      (m.max_bps = (uint64_t)bps->valuedouble, true)))
		return cm_error_set_type(err, CM_EINVAL, "repository_exception",
		                         "[%s] failed to parse max_snapshot_bytes_per_sec", name);
	/* here first: a bad location is refused before any node hears of it */
	if ((rc = repo_register(&m, err)))
		return rc;
	int nodes[RP_MAX_NODES];
	int k = cluster_nodes(n, nodes, RP_MAX_NODES);
	nd_cluster *cl = nd_cluster_of(n);
	cJSON *unreachable = cJSON_CreateArray();
	cm_buf req;
	cm_buf_init(&req, MEM);
	sn_msg_repo_encode(&m, &req);
	for (int i = 0; i < k && !rc; i++) {
		char *b;
		size_t bl;
		cm_error e2;
		if (nodes[i] < 0 || nodes[i] == cl->self)
			continue;
		cm_error_clear(&e2);
		cm_err r2 =
		    snap_call(n, nodes[i], SN_MSG_REPO, &req, cm_now_ns() + PUSH_NS, &b, &bl, &e2);
		cm_free(MEM, b);
		if (r2 == CM_EUNAVAIL || r2 == CM_ETIMEDOUT)
			cJSON_AddItemToArray(unreachable,
			                     cJSON_CreateString(cl->nodes[nodes[i]].name));
		else if (r2)
			rc = cm_error_set_type(err, r2, "repository_verification_exception",
			                       "[%s] node [%s] refused the repository: %s", name,
			                       cl->nodes[nodes[i]].name, e2.reason);
	}
	cm_buf_free(&req);
	if (rc) {
		/* not half-registered: take it back everywhere */
		cJSON *ignored = NULL;
		cm_error e3;
		cm_error_clear(&e3);
		nd_snap_repo_delete(n, name, &ignored, &e3);
		cJSON_Delete(ignored);
		cJSON_Delete(unreachable);
		return rc;
	}
	*out = cJSON_CreateObject();
	cJSON_AddBoolToObject(*out, "acknowledged", true);
	if (cJSON_GetArraySize(unreachable))
		cJSON_AddItemToObject(*out, "unreachable_nodes", unreachable);
	else
		cJSON_Delete(unreachable);
	return CM_OK;
}

static cJSON *
repo_json(const snap_repo *r)
{
	char b[32];
	cJSON *j = cJSON_CreateObject(), *s;
	cJSON_AddStringToObject(j, "type", "fs");
	s = cJSON_AddObjectToObject(j, "settings");
	cJSON_AddStringToObject(s, "location", r->location);
	cJSON_AddStringToObject(s, "compress", r->compress ? "true" : "false");
	if (r->max_bps) {
		snprintf(b, sizeof(b), "%" PRIu64 "b", r->max_bps);
		cJSON_AddStringToObject(s, "max_snapshot_bytes_per_sec", b);
	}
	return j;
}

cm_err
nd_snap_repo_get(nd_node *n, const char *names, cJSON **out, cm_error *err)
{
	*out = cJSON_CreateObject();
	if (!names || strcmp(names, "_all") == 0 || strcmp(names, "*") == 0) {
		pthread_mutex_lock(&G.mu);
		for (size_t i = 0; i < G.nrepos; i++)
			cJSON_AddItemToObject(*out, G.repos[i].name, repo_json(&G.repos[i]));
		pthread_mutex_unlock(&G.mu);
		return CM_OK;
	}
	char *copy = cm_strdup(MEM, names), *save = NULL, *tok;
	cm_err rc = CM_OK;
	for (tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
		snap_repo r;
		if ((rc = snap_repo_find(tok, &r, err)) == CM_OK)
			cJSON_AddItemToObject(*out, r.name, repo_json(&r));
	}
	cm_free(MEM, copy);
	if (rc) {
		cJSON_Delete(*out);
		*out = NULL;
	}
	return rc;
}

cm_err
nd_snap_repo_delete(nd_node *n, const char *name, cJSON **out, cm_error *err)
{
	snap_repo r;
	cm_err rc;
	*out = NULL;
	if ((rc = snap_repo_find(name, &r, err)))
		return rc;
	repo_unregister(name);
	nd_cluster *cl = nd_cluster_of(n);
	if (cl) {
		sn_msg_repo m = {0};
		cm_buf req;
		snprintf(m.name, sizeof(m.name), "%s", name);
		strcpy(m.type, "fs");
		m.remove = true;
		cm_buf_init(&req, MEM);
		sn_msg_repo_encode(&m, &req);
		for (int i = 0; i < cl->nn; i++) {
			char *b;
			size_t bl;
			cm_error e2;
			if (i == cl->self)
				continue;
			cm_error_clear(&e2);
			snap_call(n, i, SN_MSG_REPO, &req, cm_now_ns() + PUSH_NS, &b, &bl, &e2);
			cm_free(MEM, b);
		}
		cm_buf_free(&req);
	}
	*out = cJSON_CreateObject();
	cJSON_AddBoolToObject(*out, "acknowledged", true);
	return CM_OK;
}

static void
verify_path(const char *loc, const char *token, const char *who, char *out, size_t cap)
{
	snprintf(out, cap, "%s/tests-%s/%s", loc, token, who);
}

cm_err
nd_snap_repo_verify(nd_node *n, const char *name, cJSON **out, cm_error *err)
{
	snap_repo r;
	char token[64], p[PATH_MAX + 400], dir[PATH_MAX + 100];
	cm_err rc;
	*out = NULL;
	if ((rc = snap_repo_find(name, &r, err)))
		return rc;
	snap_token(token, sizeof(token));
	verify_path(r.resolved, token, "_coordinator", p, sizeof(p));
	snprintf(dir, sizeof(dir), "%s/tests-%s", r.resolved, token);
	if (cm_mkdir_p(dir) || cm_file_write_atomic(p, token, strlen(token)))
		return cm_error_set_type(err, CM_EIO, "repository_verification_exception",
		                         "[%s] cannot write to [%s]", name, dir);
	int nodes[RP_MAX_NODES];
	int k = cluster_nodes(n, nodes, RP_MAX_NODES);
	cJSON *ns = cJSON_CreateObject();
	sn_msg_verify m = {0};
	snprintf(m.location, sizeof(m.location), "%s", r.location);
	snprintf(m.token, sizeof(m.token), "%s", token);
	for (int i = 0; i < k && !rc; i++) {
		cm_buf req;
		char *b, *got;
		size_t bl, gl;
		const char *who = node_label(n, nodes[i]);
		snprintf(m.node, sizeof(m.node), "%s", who);
		cm_buf_init(&req, MEM);
		sn_msg_verify_encode(&m, &req);
		cm_error e2;
		cm_error_clear(&e2);
		rc = snap_call(n, nodes[i], SN_MSG_VERIFY, &req, cm_now_ns() + PUSH_NS, &b, &bl,
		               &e2);
		cm_buf_free(&req);
		cm_free(MEM, b);
		/* and what it wrote, read back here */
		verify_path(r.resolved, token, who, p, sizeof(p));
		if (!rc && cm_file_read(p, 4096, &got, &gl) == CM_OK) {
			if (gl != strlen(who) || memcmp(got, who, gl) != 0)
				rc = CM_ECORRUPT;
			cm_free(CM_MEM_COMMON, got);
		} else if (!rc) {
			rc = CM_ENOTFOUND;
		}
		if (rc) {
			cm_error_set_type(err, rc == CM_ENOTFOUND ? CM_EIO : rc,
			                  "repository_verification_exception",
			                  "[%s] node [%s] cannot use the repository: %s", name, who,
			                  e2.code ? e2.reason : "its file cannot be read back");
			rc = err->code;
		} else {
			cJSON *e = cJSON_AddObjectToObject(ns, who);
			cJSON_AddStringToObject(e, "name", who);
		}
	}
	cm_rm_rf(dir);
	if (rc) {
		cJSON_Delete(ns);
		return rc;
	}
	*out = cJSON_CreateObject();
	cJSON_AddItemToObject(*out, "nodes", ns);
	return CM_OK;
}

/* ---- serving ---- */

bool
nd_snap_handles(uint32_t type)
{
	return type >= SN_MSG_REPO && type <= SN_MSG_VERIFY;
}

static cm_err
serve_verify(const uint8_t *p, size_t len, cm_error *err)
{
	sn_msg_verify m;
	char loc[PATH_MAX], f[PATH_MAX + 400], *got;
	size_t gl;
	cm_err rc;
	if ((rc = sn_msg_verify_decode(p, len, &m, err)) ||
	    (rc = sn_location_check(G.path_repo, m.location, loc, sizeof(loc), err)))
		return rc;
	if (strchr(m.token, '/') || strchr(m.node, '/') || !m.token[0] || !m.node[0])
		return cm_error_set(err, CM_EINVAL, "bad verification request");
	verify_path(loc, m.token, "_coordinator", f, sizeof(f));
	if (cm_file_read(f, 4096, &got, &gl) != CM_OK)
		return cm_error_set(err, CM_EIO, "cannot read [%s]: the location is not shared", f);
	bool same = gl == strlen(m.token) && memcmp(got, m.token, gl) == 0;
	cm_free(CM_MEM_COMMON, got);
	if (!same)
		return cm_error_set(err, CM_ECORRUPT, "[%s] does not hold what was written", f);
	verify_path(loc, m.token, m.node, f, sizeof(f));
	if (cm_file_write_atomic(f, m.node, strlen(m.node)))
		return cm_error_set(err, CM_EIO, "cannot write [%s]", f);
	return CM_OK;
}

static nd_index *
index_of(const char *name, const char *uuid, int shard, cm_error *err)
{
	nd_index *ix = nd_index_get(G.node, name);
	if (!ix || (uuid[0] && strcmp(nd_index_uuid(ix), uuid) != 0)) {
		if (ix)
			nd_index_release(ix);
		cm_error_set(err, CM_ENOINDEX, "no such index [%s] on node [%s]", name,
		             nd_node_name(G.node));
		return NULL;
	}
	if (shard < 0 || shard >= nd_index_nshards(ix)) {
		nd_index_release(ix);
		cm_error_set(err, CM_EINVAL, "no shard [%d] in index [%s]", shard, name);
		return NULL;
	}
	/* on a cluster only the primary's copy is snapshotted or restored: a
	 * node that is not (any more) the primary must not answer with its own */
	nd_cluster *cl = nd_cluster_of(G.node);
	cl_route ro;
	if (cl && (!cl_route_get(cl, name, shard, &ro) || ro.primary != cl->self)) {
		nd_index_release(ix);
		cm_error_set(err, CM_EUNAVAIL, "node [%s] does not hold the primary of [%s][%d]",
		             nd_node_name(G.node), name, shard);
		return NULL;
	}
	return ix;
}

static snap_pin *
pin_find_locked(const char *token, snap_pin ***link)
{
	snap_pin **l = &G.pins;
	for (; *l; l = &(*l)->next)
		if (strcmp((*l)->token, token) == 0) {
			if (link)
				*link = l;
			return *l;
		}
	return NULL;
}

static cm_err
serve_prepare(const sn_msg_shard *m, sn_msg_shard_reply *rep, cm_error *err)
{
	char loc[PATH_MAX];
	cm_err rc;
	if ((rc = sn_location_check(G.path_repo, m->location, loc, sizeof(loc), err)))
		return rc;
	nd_index *ix = index_of(m->index, m->index_uuid, (int)m->shard, err);
	if (!ix)
		return err->code;
	snap_pin *p = cm_calloc(MEM, 1, sizeof(*p));
	snap_token(p->token, sizeof(p->token));
	snprintf(p->dir, sizeof(p->dir), "%s/%s", G.data_tmp, p->token);
	uint64_t max_seq = ST_NO_SEQ;
	/* the shard's last commit, hard-linked: a merge cannot take its files */
	rc = st_shard_snapshot(nd_index_shard(ix, (int)m->shard), p->dir, &max_seq, err);
	nd_index_release(ix);
	if (!rc && (rc = st_shard_dir_files(p->dir, &p->names, &p->n)))
		cm_error_set(err, rc, "cannot list the pinned commit of [%s][%u]", m->index,
		             m->shard);
	if (rc) {
		cm_rm_rf(p->dir);
		cm_free(MEM, p);
		return rc;
	}
	p->sizes = cm_calloc(MEM, p->n + 1, sizeof(uint64_t));
	rep->files = cm_calloc(MEM, p->n + 1, sizeof(sn_file));
	rep->nfiles = p->n;
	for (size_t i = 0; i < p->n; i++) {
		char f[PATH_MAX + 300];
		struct stat sb;
		snprintf(f, sizeof(f), "%s/%s", p->dir, p->names[i]);
		p->sizes[i] = stat(f, &sb) == 0 ? (uint64_t)sb.st_size : 0;
		snprintf(rep->files[i].name, sizeof(rep->files[i].name), "%s", p->names[i]);
		rep->files[i].b.size = p->sizes[i];
	}
	snprintf(rep->token, sizeof(rep->token), "%s", p->token);
	rep->max_seq_no = max_seq;
	pthread_mutex_lock(&G.mu);
	p->next = G.pins;
	G.pins = p;
	pthread_mutex_unlock(&G.mu);
	return CM_OK;
}

static cm_err
serve_upload(const sn_msg_shard *m, sn_msg_shard_reply *rep, cm_error *err)
{
	char loc[PATH_MAX], f[PATH_MAX + 300], name[SN_NAME_MAX];
	sn_repo *r;
	cm_err rc;
	if ((rc = sn_location_check(G.path_repo, m->location, loc, sizeof(loc), err)))
		return rc;
	pthread_mutex_lock(&G.mu);
	snap_pin *p = pin_find_locked(m->token, NULL);
	if (p && m->file < p->n) {
		snprintf(f, sizeof(f), "%s/%s", p->dir, p->names[m->file]);
		snprintf(name, sizeof(name), "%s", p->names[m->file]);
	}
	bool ok = p && m->file < p->n;
	pthread_mutex_unlock(&G.mu);
	if (!ok)
		return cm_error_set(err, CM_ENOTFOUND,
		                    "no pinned commit [%s] file [%u] on node [%s]", m->token,
		                    m->file, nd_node_name(G.node));
	if ((rc = sn_repo_open(loc, m->max_bps, &r, err)))
		return rc;
	sn_repo_set_cancel(r, &G.stopping);
	/* compress as the repository registered here at that location says */
	pthread_mutex_lock(&G.mu);
	for (size_t i = 0; i < G.nrepos; i++)
		if (strcmp(G.repos[i].resolved, loc) == 0)
			sn_repo_set_compress(r, G.repos[i].compress);
	pthread_mutex_unlock(&G.mu);
	rep->files = cm_calloc(MEM, 1, sizeof(sn_file));
	rep->nfiles = 1;
	snprintf(rep->files[0].name, sizeof(rep->files[0].name), "%s", name);
	rc = sn_blob_put(r, f, &rep->files[0].b, &rep->written, err);
	sn_repo_close(r);
	return rc;
}

static void
serve_release(const sn_msg_shard *m)
{
	snap_pin **link, *p;
	pthread_mutex_lock(&G.mu);
	if ((p = pin_find_locked(m->token, &link)))
		*link = p->next;
	pthread_mutex_unlock(&G.mu);
	if (!p)
		return;
	cm_rm_rf(p->dir);
	st_shard_dir_files_free(p->names, p->n);
	cm_free(MEM, p->sizes);
	cm_free(MEM, p);
}

static cm_err
serve_restore(const uint8_t *buf, size_t len, cm_error *err)
{
	sn_msg_restore m;
	char loc[PATH_MAX], dir[PATH_MAX + 80], f[PATH_MAX + 400], token[64];
	sn_repo *r = NULL;
	int64_t t0 = cm_wall_ms();
	cm_err rc;
	if ((rc = sn_msg_restore_decode(buf, len, &m, err)))
		return rc;
	nd_index *ix = NULL;
	if ((rc = sn_location_check(G.path_repo, m.location, loc, sizeof(loc), err)) ||
	    (rc = sn_repo_open(loc, m.max_bps, &r, err)))
		goto out;
	sn_repo_set_cancel(r, &G.stopping);
	if (!(ix = index_of(m.index, m.index_uuid, (int)m.shard, err))) {
		rc = err->code;
		goto out;
	}
	snap_token(token, sizeof(token));
	snprintf(dir, sizeof(dir), "%s/r-%s", G.data_tmp, token);
	if (cm_mkdir_p(dir)) {
		rc = cm_error_set(err, CM_EIO, "cannot create [%s]", dir);
		goto out;
	}
	for (size_t i = 0; i < m.nfiles && !rc; i++) {
		if (strchr(m.files[i].name, '/') || m.files[i].name[0] == '.') {
			rc = cm_error_set(err, CM_EINVAL, "bad file name [%s]", m.files[i].name);
			break;
		}
		snprintf(f, sizeof(f), "%s/%s", dir, m.files[i].name);
		rc = sn_blob_get(r, &m.files[i].b, m.files[i].name, f, err);
	}
	if (!rc) {
		cm_fsync_dir(dir);
		st_shard *s = nd_index_shard(ix, (int)m.shard);
		rc = st_shard_reset_from(s, dir, err);
		nd_cluster *cl = nd_cluster_of(G.node);
		cl_route ro;
		/* the copy numbers ops in this cluster's term from now on */
		if (!rc && cl && cl_route_get(cl, m.index, (int)m.shard, &ro))
			st_shard_set_primary_term(s, ro.term);
		if (!rc)
			rc = st_shard_refresh(s);
	}
	cm_rm_rf(dir);
	snap_rec rec = {.shard = (int)m.shard,
	                .start_ms = t0,
	                .stop_ms = cm_wall_ms(),
	                .files = m.nfiles,
	                .failed = rc != CM_OK};
	snprintf(rec.index, sizeof(rec.index), "%s", m.index);
	snprintf(rec.source, sizeof(rec.source), "%s", m.source);
	for (size_t i = 0; i < m.nfiles; i++)
		rec.bytes += m.files[i].b.size;
	rec_add(&rec);
out:
	if (ix)
		nd_index_release(ix);
	sn_repo_close(r);
	sn_msg_files_free(m.files);
	return rc;
}

void
nd_snap_serve(nd_node *n, uint32_t type, const uint8_t *p, size_t len, cm_buf *reply,
              uint32_t *reply_type)
{
	cm_error err;
	cm_buf body;
	cm_error_clear(&err);
	cm_buf_init(&body, MEM);
	if (!G.node || atomic_load(&G.stopping)) {
		cm_error_set(&err, CM_EUNAVAIL,
		             "snapshots are not set up on node [%s] (or it is "
		             "shutting down)",
		             nd_node_name(n));
	} else if (type == SN_MSG_REPO) {
		sn_msg_repo m;
		if (sn_msg_repo_decode(p, len, &m, &err) == CM_OK) {
			if (m.remove)
				repo_unregister(m.name);
			else
				repo_register(&m, &err);
		}
	} else if (type == SN_MSG_SHARD) {
		sn_msg_shard m;
		sn_msg_shard_reply rep = {0};
		if (sn_msg_shard_decode(p, len, &m, &err) == CM_OK) {
			cm_err rc = m.op == SN_SHARD_PREPARE  ? serve_prepare(&m, &rep, &err)
			            : m.op == SN_SHARD_UPLOAD ? serve_upload(&m, &rep, &err)
			                                      : (serve_release(&m), CM_OK);
			if (!rc)
				sn_msg_shard_reply_encode(&rep, &body);
		}
		sn_msg_files_free(rep.files);
	} else if (type == SN_MSG_RESTORE) {
		serve_restore(p, len, &err);
	} else if (type == SN_MSG_VERIFY) {
		serve_verify(p, len, &err);
	} else {
		cm_error_set(&err, CM_EINVAL, "unknown message type %u", type);
	}
	pr_ack_encode(&err, err.code ? NULL : (const char *)body.data, err.code ? 0 : body.len,
	              reply);
	*reply_type = PR_ACK;
	cm_buf_free(&body);
}

uint64_t
nd_snap_throttle_ms(void)
{
	return sn_throttle_ns() / 1000000u;
}
