/* Taking, listing, deleting and restoring snapshots: the node that gets
 * the request drives each shard's primary over MSG_SNAP_SHARD (pin the
 * last commit, copy file by file, unpin) and writes the manifest; a
 * restore creates the index without replicas, restores the primaries
 * (MSG_SNAP_RESTORE), then sets the replica count. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "nd_cluster_private.h"
#include "nd_snap_private.h"

#define MEM CM_MEM_NODE
#define G nd_snap_g
#define WORKERS 4
#define CALL_NS 60000000000ull

typedef struct run_shard {
	char index[SN_NAME_MAX], uuid[64];
	int shard, node;   /* node: cluster node number, -1 = this one */
	const char *stage; /* INIT, STARTED, DONE, FAILURE */
	sn_file *files;
	size_t nfiles, files_done, inc_files;
	uint64_t total_bytes, done_bytes, inc_bytes, max_seq_no;
	int64_t start_ms, end_ms;
	char reason[512];
} run_shard;

struct snap_run {
	nd_node *node;
	snap_repo repo;
	char name[SN_NAME_MAX], uuid[40];
	int64_t start_ms, end_ms;
	bool include_global_state;
	cJSON *global; /* include_global_state: what the coordinator's hook gave */
	cJSON *meta;   /* {index: {uuid, settings, mappings, aliases, number_of_shards}} */
	run_shard *shards;
	size_t nshards, next;
	const char *state;
	sn_repo *r;
};

static struct {
	cJSON *(*get)(nd_node *n);
	cm_err (*put)(nd_node *n, const cJSON *state, cm_error *err);
} g_global;

void
nd_snap_set_global(cJSON *(*get)(nd_node *n),
                   cm_err (*put)(nd_node *n, const cJSON *state, cm_error *err))
{
	g_global.get = get;
	g_global.put = put;
}

/* ---- JSON helpers ---- */

static void
iso_time(int64_t ms, char *out, size_t cap)
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	char b[32];
	gmtime_r(&s, &tm);
	strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, cap, "%s.%03dZ", b, (int)(ms % 1000));
}

static double
num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *
str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : "";
}

/* "a,b" or ["a","b"] into a comma list; false when neither. */
static bool
list_text(const cJSON *v, cm_buf *out)
{
	if (!v)
		return true;
	if (cJSON_IsString(v)) {
		cm_buf_printf(out, "%s", v->valuestring);
		return true;
	}
	if (!cJSON_IsArray(v))
		return false;
	const cJSON *e;
	int i = 0;
	cJSON_ArrayForEach(e, v)
	{
		if (!cJSON_IsString(e))
			return false;
		cm_buf_printf(out, "%s%s", i++ ? "," : "", e->valuestring);
	}
	return true;
}

static bool
opt_bool(const cJSON *body, const char *k, bool dflt, bool *ok)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, k);
	if (!v)
		return dflt;
	if (cJSON_IsBool(v))
		return cJSON_IsTrue(v);
	if (cJSON_IsString(v) &&
	    (!strcmp(v->valuestring, "true") || !strcmp(v->valuestring, "false")))
		return v->valuestring[0] == 't';
	*ok = false;
	return dflt;
}

/* ---- the manifest, also of a running snapshot ---- */

static cJSON *
shard_json(const run_shard *s, const char *node_name)
{
	cJSON *j = cJSON_CreateObject(), *fs;
	const char *state = strcmp(s->stage, "DONE") == 0      ? "SUCCESS"
	                    : strcmp(s->stage, "FAILURE") == 0 ? "FAILED"
	                                                       : "IN_PROGRESS";
	cJSON_AddNumberToObject(j, "shard", s->shard);
	cJSON_AddStringToObject(j, "state", state);
	cJSON_AddStringToObject(j, "stage", s->stage);
	cJSON_AddStringToObject(j, "node", node_name);
	if (s->reason[0])
		cJSON_AddStringToObject(j, "reason", s->reason);
	if (s->max_seq_no != ST_NO_SEQ)
		cJSON_AddNumberToObject(j, "max_seq_no", (double)s->max_seq_no);
	cJSON_AddNumberToObject(j, "total_files", (double)s->nfiles);
	cJSON_AddNumberToObject(j, "total_bytes", (double)s->total_bytes);
	cJSON_AddNumberToObject(j, "done_files", (double)s->files_done);
	cJSON_AddNumberToObject(j, "done_bytes", (double)s->done_bytes);
	cJSON_AddNumberToObject(j, "incremental_files", (double)s->inc_files);
	cJSON_AddNumberToObject(j, "incremental_bytes", (double)s->inc_bytes);
	cJSON_AddNumberToObject(j, "start_time_in_millis", (double)s->start_ms);
	cJSON_AddNumberToObject(j, "end_time_in_millis", (double)s->end_ms);
	fs = cJSON_AddArrayToObject(j, "files");
	if (strcmp(state, "SUCCESS") == 0)
		for (size_t i = 0; i < s->nfiles; i++)
			cJSON_AddItemToArray(fs, sn_file_json(s->files[i].name, &s->files[i].b));
	return j;
}

/* Under G.mu. */
static cJSON *
run_manifest_locked(const snap_run *run)
{
	cJSON *m = cJSON_CreateObject(), *ixs;
	cJSON_AddStringToObject(m, "snapshot", run->name);
	cJSON_AddStringToObject(m, "uuid", run->uuid);
	cJSON_AddStringToObject(m, "state", run->state);
	cJSON_AddStringToObject(m, "version", ND_ES_VERSION);
	cJSON_AddBoolToObject(m, "include_global_state", run->include_global_state);
	if (run->global)
		cJSON_AddItemToObject(m, "global_state", cJSON_Duplicate(run->global, true));
	cJSON_AddNumberToObject(m, "start_time_in_millis", (double)run->start_ms);
	cJSON_AddNumberToObject(m, "end_time_in_millis", (double)run->end_ms);
	ixs = cJSON_AddObjectToObject(m, "indices");
	const cJSON *im;
	cJSON_ArrayForEach(im, run->meta)
	{
		cJSON *e = cJSON_Duplicate(im, true);
		cJSON *sh = cJSON_AddArrayToObject(e, "shards");
		for (size_t i = 0; i < run->nshards; i++) {
			const run_shard *s = &run->shards[i];
			if (strcmp(s->index, im->string) == 0)
				cJSON_AddItemToArray(
				    sh, shard_json(
				            s, s->node >= 0 && nd_cluster_of(run->node)
				                   ? nd_cluster_of(run->node)->nodes[s->node].name
				                   : nd_node_name(run->node)));
		}
		cJSON_AddItemToObject(ixs, im->string, e);
	}
	return m;
}

/* Elasticsearch's snapshot info from a manifest. */
static cJSON *
info_json(const cJSON *m)
{
	char t[64];
	cJSON *j = cJSON_CreateObject(), *ixs, *fails, *sh;
	int total = 0, failed = 0;
	int64_t st = (int64_t)num(m, "start_time_in_millis"),
	        en = (int64_t)num(m, "end_time_in_millis");
	cJSON_AddStringToObject(j, "snapshot", str(m, "snapshot"));
	cJSON_AddStringToObject(j, "uuid", str(m, "uuid"));
	cJSON_AddNumberToObject(j, "version_id", 7100299);
	cJSON_AddStringToObject(j, "version", str(m, "version"));
	ixs = cJSON_AddArrayToObject(j, "indices");
	cJSON_AddArrayToObject(j, "data_streams");
	cJSON_AddBoolToObject(
	    j, "include_global_state",
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "include_global_state")));
	cJSON_AddStringToObject(j, "state", str(m, "state"));
	iso_time(st, t, sizeof(t));
	cJSON_AddStringToObject(j, "start_time", t);
	cJSON_AddNumberToObject(j, "start_time_in_millis", (double)st);
	if (en) {
		iso_time(en, t, sizeof(t));
		cJSON_AddStringToObject(j, "end_time", t);
		cJSON_AddNumberToObject(j, "end_time_in_millis", (double)en);
		cJSON_AddNumberToObject(j, "duration_in_millis", (double)(en - st));
	}
	fails = cJSON_AddArrayToObject(j, "failures");
	const cJSON *im, *s;
	cJSON_ArrayForEach(im, cJSON_GetObjectItemCaseSensitive(m, "indices"))
	{
		cJSON_AddItemToArray(ixs, cJSON_CreateString(im->string));
		cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(im, "shards"))
		{
			total++;
			if (strcmp(str(s, "state"), "FAILED") != 0)
				continue;
			failed++;
			cJSON *f = cJSON_CreateObject();
			cJSON_AddStringToObject(f, "index", im->string);
			cJSON_AddStringToObject(f, "index_uuid", str(im, "uuid"));
			cJSON_AddNumberToObject(f, "shard_id", num(s, "shard"));
			cJSON_AddStringToObject(f, "reason", str(s, "reason"));
			cJSON_AddStringToObject(f, "node_id", str(s, "node"));
			cJSON_AddStringToObject(f, "status", "INTERNAL_SERVER_ERROR");
			cJSON_AddItemToArray(fails, f);
		}
	}
	sh = cJSON_AddObjectToObject(j, "shards");
	cJSON_AddNumberToObject(sh, "total", total);
	cJSON_AddNumberToObject(sh, "failed", failed);
	cJSON_AddNumberToObject(sh, "successful", total - failed);
	return j;
}

/* ---- taking a snapshot ---- */

static void
shard_fail(run_shard *s, const cm_error *e)
{
	pthread_mutex_lock(&G.mu);
	s->stage = "FAILURE";
	snprintf(s->reason, sizeof(s->reason), "%s",
	         e->reason[0] ? e->reason : cm_err_msg(e->code));
	s->end_ms = cm_wall_ms();
	pthread_mutex_unlock(&G.mu);
}

static bool
node_up(nd_node *n, int node)
{
	nd_cluster *cl = nd_cluster_of(n);
	return !atomic_load(&G.stopping) &&
	       (!cl || node < 0 || node == cl->self || cl_alive(cl, node));
}

static void
do_shard(snap_run *run, run_shard *s)
{
	sn_msg_shard m = {0};
	sn_msg_shard_reply rep = {0};
	cm_error err;
	cm_buf req;
	char *b = NULL;
	size_t bl;
	cm_err rc;

	cm_error_clear(&err);
	s->start_ms = cm_wall_ms();
	m.op = SN_SHARD_PREPARE;
	snprintf(m.location, sizeof(m.location), "%s", run->repo.location);
	m.max_bps = run->repo.max_bps;
	snprintf(m.index, sizeof(m.index), "%s", s->index);
	snprintf(m.index_uuid, sizeof(m.index_uuid), "%s", s->uuid);
	m.shard = (uint32_t)s->shard;
	cm_buf_init(&req, MEM);
	if (!node_up(run->node, s->node)) {
		cm_error_set(&err, CM_EUNAVAIL, "the node holding the primary is unreachable");
		shard_fail(s, &err);
		cm_buf_free(&req);
		return;
	}
	sn_msg_shard_encode(&m, &req);
	rc =
	    snap_call(run->node, s->node, SN_MSG_SHARD, &req, cm_now_ns() + CALL_NS, &b, &bl, &err);
	if (!rc)
		rc = sn_msg_shard_reply_decode(b, bl, &rep, &err);
	cm_free(MEM, b);
	if (rc) {
		shard_fail(s, &err);
		cm_buf_free(&req);
		return;
	}
	pthread_mutex_lock(&G.mu);
	s->files = rep.files;
	s->nfiles = rep.nfiles;
	s->max_seq_no = rep.max_seq_no;
	for (size_t i = 0; i < rep.nfiles; i++)
		s->total_bytes += rep.files[i].b.size;
	s->stage = "STARTED";
	pthread_mutex_unlock(&G.mu);
	snprintf(m.token, sizeof(m.token), "%s", rep.token);
	for (size_t i = 0; i < s->nfiles && !rc; i++) {
		sn_msg_shard_reply up = {0};
		uint64_t size = s->files[i].b.size;
		uint64_t budget =
		    CALL_NS + (run->repo.max_bps
		                   ? (uint64_t)(2e9 * (double)size / (double)run->repo.max_bps)
		                   : 0);
		m.op = SN_SHARD_UPLOAD;
		m.file = (uint32_t)i;
		cm_buf_reset(&req);
		sn_msg_shard_encode(&m, &req);
		if (!node_up(run->node, s->node)) {
			rc = cm_error_set(&err, CM_EUNAVAIL,
			                  "the node holding the primary became unreachable");
			break;
		}
		rc = snap_call(run->node, s->node, SN_MSG_SHARD, &req, cm_now_ns() + budget, &b,
		               &bl, &err);
		if (!rc)
			rc = sn_msg_shard_reply_decode(b, bl, &up, &err);
		cm_free(MEM, b);
		if (!rc && (up.nfiles != 1 || strcmp(up.files[0].name, s->files[i].name) != 0 ||
		            up.files[0].b.size != size))
			rc =
			    cm_error_set(&err, CM_EINTERNAL,
			                 "file [%s] changed while it was copied", s->files[i].name);
		if (!rc) {
			pthread_mutex_lock(&G.mu);
			s->files[i].b = up.files[0].b;
			s->files_done++;
			s->done_bytes += size;
			if (up.written) {
				s->inc_files++;
				s->inc_bytes += up.written;
			}
			pthread_mutex_unlock(&G.mu);
		}
		sn_msg_files_free(up.files);
	}
	/* unpin, whatever happened (a dead node dropped its pins at restart) */
	m.op = SN_SHARD_RELEASE;
	cm_buf_reset(&req);
	sn_msg_shard_encode(&m, &req);
	if (node_up(run->node, s->node)) {
		cm_error e2;
		cm_error_clear(&e2);
		snap_call(run->node, s->node, SN_MSG_SHARD, &req, cm_now_ns() + 10000000000ull, &b,
		          &bl, &e2);
		cm_free(MEM, b);
	}
	cm_buf_free(&req);
	if (rc) {
		shard_fail(s, &err);
		return;
	}
	pthread_mutex_lock(&G.mu);
	s->stage = "DONE";
	s->end_ms = cm_wall_ms();
	pthread_mutex_unlock(&G.mu);
}

static void *
worker(void *arg)
{
	snap_run *run = arg;
	for (;;) {
		pthread_mutex_lock(&G.mu);
		size_t i = run->next++;
		pthread_mutex_unlock(&G.mu);
		if (i >= run->nshards)
			return NULL;
		if (strcmp(run->shards[i].stage, "INIT") == 0)
			do_shard(run, &run->shards[i]);
	}
}

static void
run_free(snap_run *run)
{
	for (size_t i = 0; i < run->nshards; i++)
		sn_msg_files_free(run->shards[i].files);
	cm_free(MEM, run->shards);
	cJSON_Delete(run->meta);
	cJSON_Delete(run->global);
	sn_repo_close(run->r);
	cm_free(MEM, run);
}

static void
runs_remove(snap_run *run)
{
	pthread_mutex_lock(&G.mu);
	for (size_t i = 0; i < G.nruns; i++)
		if (G.runs[i] == run) {
			G.runs[i] = G.runs[--G.nruns];
			break;
		}
	pthread_cond_broadcast(&G.runs_cv);
	pthread_mutex_unlock(&G.mu);
}

/* Runs every shard, then commits the manifest. Returns the final info. */
static cJSON *
run_all(snap_run *run, cm_error *err)
{
	pthread_t th[WORKERS];
	int nt = run->nshards < WORKERS ? (int)run->nshards : WORKERS, started = 0;
	for (int i = 0; i < nt; i++)
		if (pthread_create(&th[started], NULL, worker, run) == 0)
			started++;
	if (!started)
		worker(run);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	size_t ok = 0;
	for (size_t i = 0; i < run->nshards; i++)
		ok += strcmp(run->shards[i].stage, "DONE") == 0;
	/* the run reads IN_PROGRESS until its manifest is in the catalogue: a
	 * GET that sees it ended can restore it at once */
	const char *final = ok == run->nshards ? "SUCCESS" : ok ? "PARTIAL" : "FAILED";
	pthread_mutex_lock(&G.mu);
	run->end_ms = cm_wall_ms();
	run->state = final;
	cJSON *m = run_manifest_locked(run);
	run->state = "IN_PROGRESS";
	pthread_mutex_unlock(&G.mu);
	sn_entry e = {0};
	snprintf(e.name, sizeof(e.name), "%s", run->name);
	snprintf(e.uuid, sizeof(e.uuid), "%s", run->uuid);
	snprintf(e.state, sizeof(e.state), "%s", final);
	e.start_ms = run->start_ms;
	e.end_ms = run->end_ms;
	cm_error e2;
	cm_error_clear(&e2);
	if (sn_snapshot_commit(run->r, &e, m, &e2)) {
		cm_warn("snapshot", "snapshot [%s:%s] could not be written: %s", run->repo.name,
		        run->name, e2.reason);
		if (err)
			*err = e2;
		pthread_mutex_lock(&G.mu);
		run->state = "FAILED";
		pthread_mutex_unlock(&G.mu);
		cJSON_Delete(m);
		return NULL;
	}
	pthread_mutex_lock(&G.mu);
	run->state = final;
	pthread_mutex_unlock(&G.mu);
	cm_info("snapshot", "snapshot [%s:%s] %s (%zu of %zu shards)", run->repo.name, run->name,
	        final, ok, run->nshards);
	cJSON *info = info_json(m);
	cJSON_Delete(m);
	return info;
}

static void *
run_async(void *arg)
{
	snap_run *run = arg;
	cJSON_Delete(run_all(run, NULL));
	runs_remove(run);
	run_free(run);
	return NULL;
}

static cJSON *
index_meta(nd_index *ix)
{
	const nd_settings *st = nd_index_settings(ix);
	cJSON *j = cJSON_CreateObject(), *s, *is;
	char b[32];
	cJSON_AddStringToObject(j, "uuid", nd_index_uuid(ix));
	cJSON_AddNumberToObject(j, "number_of_shards", st->number_of_shards);
	s = cJSON_AddObjectToObject(j, "settings");
	is = cJSON_AddObjectToObject(s, "index");
	snprintf(b, sizeof(b), "%d", st->number_of_shards);
	cJSON_AddStringToObject(is, "number_of_shards", b);
	snprintf(b, sizeof(b), "%d", st->number_of_replicas);
	cJSON_AddStringToObject(is, "number_of_replicas", b);
	if (st->refresh_interval[0])
		cJSON_AddStringToObject(is, "refresh_interval", st->refresh_interval);
	if (st->max_result_window != 10000) {
		snprintf(b, sizeof(b), "%d", st->max_result_window);
		cJSON_AddStringToObject(is, "max_result_window", b);
	}
	if (st->default_pipeline[0])
		cJSON_AddStringToObject(is, "default_pipeline", st->default_pipeline);
	if (st->final_pipeline[0])
		cJSON_AddStringToObject(is, "final_pipeline", st->final_pipeline);
	nd_settings_extra_json(st, is, false);
	if (st->max_ngram_diff != 1) {
		snprintf(b, sizeof(b), "%d", st->max_ngram_diff);
		cJSON_AddStringToObject(is, "max_ngram_diff", b);
	}
	if (st->max_shingle_diff != 3) {
		snprintf(b, sizeof(b), "%d", st->max_shingle_diff);
		cJSON_AddStringToObject(is, "max_shingle_diff", b);
	}
	st_mapping *m = nd_index_mapping(ix);
	/* the mapping may name the index's custom analyzers: they go along */
	const cJSON *an = st_analysis_json(m->analysis);
	if (an != NULL)
		cJSON_AddItemToObject(is, "analysis", cJSON_Duplicate(an, true));
	cJSON_AddItemToObject(j, "mappings", st_mapping_to_json(m));
	st_mapping_unref(m);
	cJSON_AddItemToObject(j, "aliases", nd_index_aliases_json(ix));
	return j;
}

static cm_err
body_keys(const cJSON *body, const char *const *allowed, const char *what, cm_error *err)
{
	const cJSON *k;
	if (body && !cJSON_IsObject(body))
		return cm_error_set(err, CM_EPARSE, "%s body must be an object", what);
	cJSON_ArrayForEach(k, body)
	{
		bool ok = false;
		for (const char *const *a = allowed; *a && !ok; a++)
			ok = strcmp(*a, k->string) == 0;
		if (!ok)
			return cm_error_set(err, CM_EPARSE, "unknown key [%s] for %s", k->string,
			                    what);
	}
	return CM_OK;
}

cm_err
nd_snap_create(nd_node *n, const char *repo, const char *snap, const cJSON *body, bool wait,
               cJSON **out, cm_error *err)
{
	static const char *const keys[] = {
	    "indices",  "ignore_unavailable", "include_global_state", "partial",
	    "metadata", "expand_wildcards",   "feature_states",       NULL};
	nd_cluster *cl = nd_cluster_of(n);
	snap_repo r;
	cm_buf expr;
	bool ok = true;
	nd_index **ixs = NULL;
	size_t nix = 0;
	cm_err rc;

	*out = NULL;
	if ((rc = snap_repo_find(repo, &r, err)) || (rc = sn_name_check(snap, err)) ||
	    (rc = body_keys(body, keys, "create_snapshot", err)))
		return rc;
	bool ignore = opt_bool(body, "ignore_unavailable", false, &ok);
	bool global = opt_bool(body, "include_global_state", true, &ok);
	bool partial = opt_bool(body, "partial", false, &ok);
	if (!ok)
		return cm_error_set(err, CM_EPARSE, "failed to parse a boolean snapshot option");
	cm_buf_init(&expr, MEM);
	if (!list_text(cJSON_GetObjectItemCaseSensitive(body, "indices"), &expr)) {
		cm_buf_free(&expr);
		return cm_error_set(err, CM_EPARSE, "[indices] must be a string or an array");
	}
	if (!expr.len)
		cm_buf_printf(&expr, "_all");
	cm_buf_put_u8(&expr, 0);
	rc = nd_resolve(n, (const char *)expr.data, ignore, &ixs, &nix, err);
	cm_buf_free(&expr);
	if (rc)
		return rc;

	snap_run *run = cm_calloc(MEM, 1, sizeof(*run));
	run->node = n;
	run->repo = r;
	snprintf(run->name, sizeof(run->name), "%s", snap);
	run->include_global_state = global;
	if (global && g_global.get) /* the global state as the snapshot starts */
		run->global = g_global.get(n);
	run->state = "IN_PROGRESS";
	run->meta = cJSON_CreateObject();
	size_t total = 0;
	for (size_t i = 0; i < nix; i++)
		total += (size_t)nd_index_nshards(ixs[i]);
	run->shards = cm_calloc(MEM, total + 1, sizeof(run_shard));
	for (size_t i = 0; i < nix; i++) {
		cJSON_AddItemToObject(run->meta, nd_index_name(ixs[i]), index_meta(ixs[i]));
		for (int s = 0; s < nd_index_nshards(ixs[i]) && !rc; s++) {
			run_shard *x = &run->shards[run->nshards++];
			snprintf(x->index, sizeof(x->index), "%s", nd_index_name(ixs[i]));
			snprintf(x->uuid, sizeof(x->uuid), "%s", nd_index_uuid(ixs[i]));
			x->shard = s;
			x->node = -1;
			x->stage = "INIT";
			x->max_seq_no = ST_NO_SEQ;
			if (!cl)
				continue;
			cl_route ro;
			if (cl_route_get(cl, x->index, s, &ro) && ro.primary >= 0 &&
			    cl_alive(cl, ro.primary)) {
				x->node = ro.primary;
				continue;
			}
			if (!partial)
				rc = cm_error_set_type(
				    err, CM_EUNAVAIL, "snapshot_exception",
				    "[%s:%s] Indices don't have primary shards [%s][%d]", repo,
				    snap, x->index, s);
			x->stage = "FAILURE";
			snprintf(x->reason, sizeof(x->reason), "primary shard is not allocated");
		}
		nd_index_release(ixs[i]);
	}
	cm_free(MEM, ixs);
	if (!rc)
		rc = sn_repo_open(r.resolved, 0, &run->r, err);
	if (!rc) {
		sn_repo_set_compress(run->r, r.compress); /* the manifest and catalogue */
		sn_repo_set_node(run->r, nd_node_name(n));
		rc = sn_snapshot_begin(run->r, snap, run->uuid, err);
	}
	if (rc) {
		run_free(run);
		return rc;
	}
	run->start_ms = cm_wall_ms();
	pthread_mutex_lock(&G.mu);
	if (atomic_load(&G.stopping)) {
		pthread_mutex_unlock(&G.mu);
		sn_snapshot_abort(run->r, snap);
		run_free(run);
		return cm_error_set(err, CM_EUNAVAIL, "node [%s] is shutting down",
		                    nd_node_name(n));
	}
	G.runs = cm_realloc(MEM, G.runs, (G.nruns + 1) * sizeof(*G.runs));
	G.runs[G.nruns++] = run;
	pthread_mutex_unlock(&G.mu);
	if (!wait) {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &a, run_async, run) == 0) {
			pthread_attr_destroy(&a);
			*out = cJSON_CreateObject();
			cJSON_AddBoolToObject(*out, "accepted", true);
			return CM_OK;
		}
		pthread_attr_destroy(&a);
	}
	cJSON *info = run_all(run, err);
	runs_remove(run);
	run_free(run);
	if (!info)
		return err->code ? err->code : CM_EIO;
	*out = cJSON_CreateObject();
	cJSON_AddItemToObject(*out, "snapshot", info);
	return CM_OK;
}

/* ---- reading ---- */

/* Whether arr holds a manifest of that snapshot already (one that just
 * finished is in the catalogue before it leaves the running list). */
static bool
listed(const cJSON *arr, const char *name)
{
	const cJSON *m;
	cJSON_ArrayForEach(m, arr) if (strcmp(str(m, "snapshot"), name) == 0) return true;
	return false;
}

/* Manifests of the named snapshots (running ones here first), into arr. */
static cm_err
collect(nd_node *n, const char *repo, const char *names, bool all_if_star, cJSON *arr,
        cm_error *err)
{
	snap_repo r;
	sn_repo *h;
	sn_entry *cat;
	size_t ncat;
	cm_err rc;
	if ((rc = snap_repo_find(repo, &r, err)) || (rc = sn_repo_open(r.resolved, 0, &h, err)))
		return rc;
	if ((rc = sn_catalog_read(h, &cat, &ncat, err))) {
		sn_repo_close(h);
		return rc;
	}
	char *copy = cm_strdup(MEM, names), *save = NULL, *tok;
	for (tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
		bool pattern = strcmp(tok, "_all") == 0 || strchr(tok, '*');
		bool found = false;
		const char *pat = strcmp(tok, "_all") == 0 ? "*" : tok;
		pthread_mutex_lock(&G.mu);
		for (size_t i = 0; i < G.nruns; i++)
			if (strcmp(G.runs[i]->repo.name, repo) == 0 &&
			    fnmatch(pat, G.runs[i]->name, 0) == 0) {
				cJSON_AddItemToArray(arr, run_manifest_locked(G.runs[i]));
				found = true;
			}
		pthread_mutex_unlock(&G.mu);
		for (size_t i = 0; i < ncat && !rc; i++) {
			if (fnmatch(pat, cat[i].name, 0) != 0 || listed(arr, cat[i].name))
				continue;
			cJSON *m = NULL;
			sn_entry e;
			if ((rc = sn_snapshot_read(h, cat[i].name, &m, &e, err)) == CM_OK) {
				cJSON_AddItemToArray(arr, m);
				found = true;
			}
		}
		if (!rc && !found && !pattern)
			rc = cm_error_set_type(err, CM_ENOTFOUND, "snapshot_missing_exception",
			                       "[%s:%s] is missing", repo, tok);
	}
	(void)all_if_star;
	cm_free(MEM, copy);
	cm_free(MEM, cat);
	sn_repo_close(h);
	return rc;
}

cm_err
nd_snap_get(nd_node *n, const char *repo, const char *snap, cJSON **out, cm_error *err)
{
	cJSON *arr = cJSON_CreateArray(), *m;
	cm_err rc = collect(n, repo, snap, true, arr, err);
	*out = NULL;
	if (rc) {
		cJSON_Delete(arr);
		return rc;
	}
	*out = cJSON_CreateObject();
	cJSON *list = cJSON_AddArrayToObject(*out, "snapshots");
	cJSON_ArrayForEach(m, arr) cJSON_AddItemToArray(list, info_json(m));
	cJSON_Delete(arr);
	return CM_OK;
}

static void
stats_add(cJSON *stats, double inc_f, double inc_b, double done_f, double done_b, double tot_f,
          double tot_b)
{
	const char *names[] = {"incremental", "processed", "total"};
	double v[3][2] = {{inc_f, inc_b}, {done_f, done_b}, {tot_f, tot_b}};
	for (int i = 0; i < 3; i++) {
		cJSON *o = cJSON_GetObjectItemCaseSensitive(stats, names[i]);
		if (!o) {
			o = cJSON_AddObjectToObject(stats, names[i]);
			cJSON_AddNumberToObject(o, "file_count", 0);
			cJSON_AddNumberToObject(o, "size_in_bytes", 0);
		}
		cJSON *fc = cJSON_GetObjectItemCaseSensitive(o, "file_count");
		cJSON *sb = cJSON_GetObjectItemCaseSensitive(o, "size_in_bytes");
		cJSON_SetNumberValue(fc, fc->valuedouble + v[i][0]);
		cJSON_SetNumberValue(sb, sb->valuedouble + v[i][1]);
	}
}

static void
counts_add(cJSON *ss, const char *stage)
{
	const char *k = strcmp(stage, "DONE") == 0      ? "done"
	                : strcmp(stage, "FAILURE") == 0 ? "failed"
	                : strcmp(stage, "STARTED") == 0 ? "started"
	                                                : "initializing";
	static const char *all[] = {"initializing", "started", "finalizing",
	                            "done",         "failed",  "total"};
	if (!cJSON_GetObjectItemCaseSensitive(ss, "total"))
		for (int i = 0; i < 6; i++)
			cJSON_AddNumberToObject(ss, all[i], 0);
	cJSON *a = cJSON_GetObjectItemCaseSensitive(ss, k),
	      *t = cJSON_GetObjectItemCaseSensitive(ss, "total");
	cJSON_SetNumberValue(a, a->valuedouble + 1);
	cJSON_SetNumberValue(t, t->valuedouble + 1);
}

static cJSON *
status_json(const char *repo, const cJSON *m)
{
	cJSON *j = cJSON_CreateObject(), *ss, *stats, *ixs;
	int64_t st = (int64_t)num(m, "start_time_in_millis"),
	        en = (int64_t)num(m, "end_time_in_millis");
	cJSON_AddStringToObject(j, "snapshot", str(m, "snapshot"));
	cJSON_AddStringToObject(j, "repository", repo);
	cJSON_AddStringToObject(j, "uuid", str(m, "uuid"));
	cJSON_AddStringToObject(j, "state", str(m, "state"));
	cJSON_AddBoolToObject(
	    j, "include_global_state",
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "include_global_state")));
	ss = cJSON_AddObjectToObject(j, "shards_stats");
	stats = cJSON_AddObjectToObject(j, "stats");
	ixs = cJSON_AddObjectToObject(j, "indices");
	const cJSON *im, *s;
	cJSON_ArrayForEach(im, cJSON_GetObjectItemCaseSensitive(m, "indices"))
	{
		cJSON *ix = cJSON_AddObjectToObject(ixs, im->string);
		cJSON *iss = cJSON_AddObjectToObject(ix, "shards_stats");
		cJSON *ist = cJSON_AddObjectToObject(ix, "stats");
		cJSON *shs = cJSON_AddObjectToObject(ix, "shards");
		cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(im, "shards"))
		{
			char k[16];
			double v[6] = {num(s, "incremental_files"), num(s, "incremental_bytes"),
			               num(s, "done_files"),        num(s, "done_bytes"),
			               num(s, "total_files"),       num(s, "total_bytes")};
			snprintf(k, sizeof(k), "%d", (int)num(s, "shard"));
			cJSON *sh = cJSON_AddObjectToObject(shs, k);
			cJSON_AddStringToObject(sh, "stage", str(s, "stage"));
			cJSON_AddStringToObject(sh, "node", str(s, "node"));
			if (*str(s, "reason"))
				cJSON_AddStringToObject(sh, "reason", str(s, "reason"));
			cJSON *shst = cJSON_AddObjectToObject(sh, "stats");
			stats_add(shst, v[0], v[1], v[2], v[3], v[4], v[5]);
			stats_add(ist, v[0], v[1], v[2], v[3], v[4], v[5]);
			stats_add(stats, v[0], v[1], v[2], v[3], v[4], v[5]);
			counts_add(iss, str(s, "stage"));
			counts_add(ss, str(s, "stage"));
		}
	}
	cJSON_AddNumberToObject(stats, "start_time_in_millis", (double)st);
	cJSON_AddNumberToObject(stats, "time_in_millis", (double)((en ? en : cm_wall_ms()) - st));
	return j;
}

cm_err
nd_snap_status(nd_node *n, const char *repo, const char *snap, cJSON **out, cm_error *err)
{
	cJSON *arr = cJSON_CreateArray(), *m;
	cm_err rc;
	*out = NULL;
	if (!repo) {
		/* every snapshot running here */
		pthread_mutex_lock(&G.mu);
		for (size_t i = 0; i < G.nruns; i++) {
			cJSON *x = run_manifest_locked(G.runs[i]);
			cJSON_AddStringToObject(x, "_repo", G.runs[i]->repo.name);
			cJSON_AddItemToArray(arr, x);
		}
		pthread_mutex_unlock(&G.mu);
	} else if ((rc = collect(n, repo, snap ? snap : "_all", true, arr, err))) {
		cJSON_Delete(arr);
		return rc;
	}
	*out = cJSON_CreateObject();
	cJSON *list = cJSON_AddArrayToObject(*out, "snapshots");
	cJSON_ArrayForEach(m, arr)
	{
		if (!repo || !snap) {
			/* without a snapshot name: the running ones only, as ES */
			if (strcmp(str(m, "state"), "IN_PROGRESS") != 0)
				continue;
		}
		cJSON_AddItemToArray(list, status_json(repo ? repo : str(m, "_repo"), m));
	}
	cJSON_Delete(arr);
	return CM_OK;
}

cm_err
nd_snap_delete(nd_node *n, const char *repo, const char *snap, cJSON **out, cm_error *err)
{
	snap_repo r;
	sn_repo *h;
	uint64_t nb = 0, bytes = 0;
	cm_err rc;
	*out = NULL;
	if ((rc = snap_repo_find(repo, &r, err)))
		return rc;
	if ((rc = sn_repo_open(r.resolved, 0, &h, err)))
		return rc;
	sn_repo_set_compress(h, r.compress); /* the catalogue it rewrites */
	if (sn_snapshot_pending(h, snap)) {
		sn_repo_close(h);
		return cm_error_set_type(
		    err, CM_ECONFLICT, "concurrent_snapshot_execution_exception",
		    "[%s:%s] cannot delete a snapshot that is being taken", repo, snap);
	}
	rc = sn_snapshot_delete(h, snap, &nb, &bytes, err);
	sn_repo_close(h);
	if (rc)
		return rc;
	cm_info("snapshot", "snapshot [%s:%s] deleted: %" PRIu64 " blobs, %" PRIu64 " bytes freed",
	        repo, snap, nb, bytes);
	*out = cJSON_CreateObject();
	cJSON_AddBoolToObject(*out, "acknowledged", true);
	return CM_OK;
}

cm_err
nd_snap_cat(nd_node *n, const char *repo, cJSON **rows, cm_error *err)
{
	cJSON *arr = cJSON_CreateArray(), *m;
	cm_err rc = collect(n, repo, "_all", true, arr, err);
	*rows = NULL;
	if (rc) {
		cJSON_Delete(arr);
		return rc;
	}
	*rows = cJSON_CreateArray();
	cJSON_ArrayForEach(m, arr)
	{
		cJSON *info = info_json(m), *row = cJSON_CreateObject();
		char b[64];
		int64_t st = (int64_t)num(m, "start_time_in_millis"),
		        en = (int64_t)num(m, "end_time_in_millis");
		const cJSON *sh = cJSON_GetObjectItemCaseSensitive(info, "shards");
		time_t secs;
		struct tm tm;
		cJSON_AddStringToObject(row, "id", str(m, "snapshot"));
		cJSON_AddStringToObject(row, "repository", repo);
		cJSON_AddStringToObject(row, "status", str(m, "state"));
		snprintf(b, sizeof(b), "%lld", (long long)(st / 1000));
		cJSON_AddStringToObject(row, "start_epoch", b);
		secs = (time_t)(st / 1000);
		gmtime_r(&secs, &tm);
		strftime(b, sizeof(b), "%H:%M:%S", &tm);
		cJSON_AddStringToObject(row, "start_time", b);
		snprintf(b, sizeof(b), "%lld", (long long)(en / 1000));
		cJSON_AddStringToObject(row, "end_epoch", b);
		secs = (time_t)(en / 1000);
		gmtime_r(&secs, &tm);
		strftime(b, sizeof(b), "%H:%M:%S", &tm);
		cJSON_AddStringToObject(row, "end_time", b);
		snprintf(b, sizeof(b), "%.1fs", en > st ? (double)(en - st) / 1000.0 : 0.0);
		cJSON_AddStringToObject(row, "duration", b);
		snprintf(b, sizeof(b), "%d",
		         cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(info, "indices")));
		cJSON_AddStringToObject(row, "indices", b);
		snprintf(b, sizeof(b), "%d", (int)num(sh, "successful"));
		cJSON_AddStringToObject(row, "successful_shards", b);
		snprintf(b, sizeof(b), "%d", (int)num(sh, "failed"));
		cJSON_AddStringToObject(row, "failed_shards", b);
		snprintf(b, sizeof(b), "%d", (int)num(sh, "total"));
		cJSON_AddStringToObject(row, "total_shards", b);
		if (*str(m, "reason"))
			cJSON_AddStringToObject(row, "reason", str(m, "reason"));
		cJSON_AddItemToArray(*rows, row);
		cJSON_Delete(info);
	}
	cJSON_Delete(arr);
	return CM_OK;
}

/* ---- restore ---- */

/* rename_pattern/rename_replacement as Java's replaceAll with $N groups. */
static cm_err
rename_index(const regex_t *re, const char *repl, const char *name, char *out, size_t cap,
             cm_error *err)
{
	cm_buf b;
	regmatch_t g[10];
	const char *p = name;
	cm_buf_init(&b, MEM);
	while (*p && regexec(re, p, 10, g, p == name ? 0 : REG_NOTBOL) == 0) {
		cm_buf_put(&b, p, (size_t)g[0].rm_so);
		for (const char *r = repl; *r; r++) {
			if (*r == '$' && r[1] >= '0' && r[1] <= '9') {
				int k = r[1] - '0';
				if (g[k].rm_so >= 0)
					cm_buf_put(&b, p + g[k].rm_so,
					           (size_t)(g[k].rm_eo - g[k].rm_so));
				r++;
			} else if (*r == '\\' && r[1]) {
				cm_buf_put_u8(&b, (uint8_t) * ++r);
			} else {
				cm_buf_put_u8(&b, (uint8_t)*r);
			}
		}
		if (g[0].rm_eo == 0) { /* an empty match: step over one char */
			cm_buf_put_u8(&b, (uint8_t)*p);
			p++;
		} else {
			p += g[0].rm_eo;
		}
	}
	cm_buf_printf(&b, "%s", p);
	cm_buf_put_u8(&b, 0);
	bool fits = b.len <= cap;
	if (fits)
		memcpy(out, b.data, b.len);
	cm_buf_free(&b);
	return fits ? CM_OK : cm_error_set(err, CM_EBADNAME, "renamed index name is too long");
}

static bool
index_selected(const char *name, const char *list)
{
	if (!list || !*list)
		return true;
	bool sel = false;
	char *copy = cm_strdup(MEM, list), *save = NULL, *tok;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		bool neg = tok[0] == '-' && tok[1];
		const char *pat = strcmp(tok, "_all") == 0 ? "*" : tok + (neg ? 1 : 0);
		if (fnmatch(pat, name, 0) == 0)
			sel = !neg;
	}
	cm_free(MEM, copy);
	return sel;
}

typedef struct rs_index {
	const cJSON *meta; /* in the manifest */
	char from[SN_NAME_MAX], to[SN_NAME_MAX];
	int replicas;
	bool created;
} rs_index;

/* index_settings: only the dynamic ones, in either form. */
static cm_err
index_settings_apply(const cJSON *is, cJSON *settings_index, int *replicas, cm_error *err)
{
	const cJSON *k;
	if (!is)
		return CM_OK;
	if (!cJSON_IsObject(is))
		return cm_error_set(err, CM_EPARSE, "[index_settings] must be an object");
	const cJSON *inner = cJSON_GetObjectItemCaseSensitive(is, "index");
	if (cJSON_IsObject(inner) && cJSON_GetArraySize(is) == 1)
		is = inner;
	cJSON_ArrayForEach(k, is)
	{
		const char *key = strncmp(k->string, "index.", 6) == 0 ? k->string + 6 : k->string;
		char b[64];
		if (strcmp(key, "number_of_replicas") && strcmp(key, "refresh_interval") &&
		    strcmp(key, "max_result_window"))
			return cm_error_set_type(err, CM_EINVAL, "snapshot_restore_exception",
			                         "cannot change setting [index.%s] on restore",
			                         key);
		if (cJSON_IsNumber(k))
			snprintf(b, sizeof(b), "%d", k->valueint);
		else if (cJSON_IsString(k) && strlen(k->valuestring) < sizeof(b))
			snprintf(b, sizeof(b), "%s", k->valuestring);
		else
			return cm_error_set(err, CM_EINVAL, "bad value for [index.%s]", key);
		if (strcmp(key, "number_of_replicas") == 0) {
			char *end;
			long v = strtol(b, &end, 10);
			if (*end || v < 0 || v > 16)
				return cm_error_set(
				    err, CM_EINVAL,
				    "bad value for [index.number_of_replicas]: [%s]", b);
			*replicas = (int)v;
			continue;
		}
		cJSON_DeleteItemFromObject(settings_index, key);
		cJSON_AddStringToObject(settings_index, key, b);
	}
	return CM_OK;
}

static cm_err
create_index(nd_node *n, const char *name, const cJSON *body, cm_error *err)
{
	nd_cluster *cl = nd_cluster_of(n);
	char *t = cJSON_PrintUnformatted(body);
	cm_err rc;
	if (cl) {
		char *reply = NULL;
		rc = nd_cluster_meta(cl, ND_META_CREATE, name, t, &reply, err);
		cm_free(MEM, reply);
	} else {
		nd_index *ix = NULL;
		rc = nd_index_create(n, name, body, &ix, err);
		if (ix)
			nd_index_release(ix);
	}
	cJSON_free(t);
	return rc;
}

static void
drop_index(nd_node *n, const char *name)
{
	nd_cluster *cl = nd_cluster_of(n);
	cm_error e;
	cm_error_clear(&e);
	if (cl) {
		char *reply = NULL;
		nd_cluster_meta(cl, ND_META_DELETE, name, NULL, &reply, &e);
		cm_free(MEM, reply);
	} else {
		nd_index *ix = nd_index_get(n, name);
		if (ix) {
			nd_index_delete(n, ix, &e);
			nd_index_release(ix);
		}
	}
}

static cm_err
set_replicas(nd_node *n, const char *name, int replicas, cm_error *err)
{
	nd_cluster *cl = nd_cluster_of(n);
	char body[96];
	snprintf(body, sizeof(body), "{\"index\":{\"number_of_replicas\":\"%d\"}}", replicas);
	if (cl) {
		char *reply = NULL;
		cm_err rc = nd_cluster_meta(cl, ND_META_PUT_SETTINGS, name, body, &reply, err);
		cm_free(MEM, reply);
		return rc;
	}
	nd_index *ix = nd_index_get(n, name);
	if (!ix)
		return cm_error_set(err, CM_ENOINDEX, "no such index [%s]", name);
	cJSON *j = cJSON_Parse(body);
	cm_err rc = nd_index_put_settings(ix, j, err);
	cJSON_Delete(j);
	nd_index_release(ix);
	return rc;
}

/* Restores every shard of one created index from the repository. */
static cm_err
restore_shards(nd_node *n, const snap_repo *r, const char *snap, const rs_index *x, cm_error *err)
{
	nd_cluster *cl = nd_cluster_of(n);
	nd_index *ix = nd_index_get(n, x->to);
	const cJSON *s;
	cm_err rc = CM_OK;
	if (!ix)
		return cm_error_set(err, CM_ENOINDEX, "restored index [%s] vanished", x->to);
	char uuid[64];
	snprintf(uuid, sizeof(uuid), "%s", nd_index_uuid(ix));
	nd_index_release(ix);
	cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(x->meta, "shards"))
	{
		sn_msg_restore m = {0};
		const cJSON *f;
		int shard = (int)num(s, "shard"), node = -1;
		size_t nf =
		    (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "files"));
		snprintf(m.location, sizeof(m.location), "%s", r->location);
		m.max_bps = 0;
		snprintf(m.index, sizeof(m.index), "%s", x->to);
		snprintf(m.index_uuid, sizeof(m.index_uuid), "%s", uuid);
		snprintf(m.source, sizeof(m.source), "%s/%s", r->name, snap);
		m.shard = (uint32_t)shard;
		m.files = cm_calloc(MEM, nf + 1, sizeof(sn_file));
		cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(s, "files"))
		{
			if (!sn_file_parse(f, m.files[m.nfiles].name, &m.files[m.nfiles].b))
				rc = cm_error_set_type(
				    err, CM_ECORRUPT, "snapshot_restore_exception",
				    "bad file entry in the manifest of [%s][%d]", x->from, shard);
			m.nfiles++;
		}
		if (cl && !rc) {
			cl_route ro;
			/* the create waited for the nodes to apply it, so the routing is here */
			if (!cl_route_get(cl, x->to, shard, &ro) || ro.primary < 0)
				rc = cm_error_set(err, CM_EUNAVAIL, "no primary for [%s][%d]",
				                  x->to, shard);
			node = ro.primary;
		}
		if (!rc) {
			cm_buf req;
			char *b;
			size_t bl;
			cm_buf_init(&req, MEM);
			sn_msg_restore_encode(&m, &req);
			rc = snap_call(n, node, SN_MSG_RESTORE, &req, cm_now_ns() + 30 * CALL_NS,
			               &b, &bl, err);
			cm_free(MEM, b);
			cm_buf_free(&req);
			if (rc)
				cm_error_set(err, rc, "restore of [%s][%d] failed", x->to, shard);
		}
		sn_msg_files_free(m.files);
		if (rc)
			break;
	}
	return rc;
}

cm_err
nd_snap_restore(nd_node *n, const char *repo, const char *snap, const cJSON *body, bool wait,
                cJSON **out, cm_error *err)
{
	static const char *const keys[] = {"indices",
	                                   "ignore_unavailable",
	                                   "include_global_state",
	                                   "partial",
	                                   "rename_pattern",
	                                   "rename_replacement",
	                                   "index_settings",
	                                   "include_aliases",
	                                   "ignore_index_settings",
	                                   NULL};
	snap_repo r;
	sn_repo *h = NULL;
	cJSON *m = NULL;
	sn_entry e;
	cm_buf list;
	regex_t re;
	bool have_re = false, ok = true;
	rs_index *xs = NULL;
	size_t nx = 0;
	cm_err rc;

	*out = NULL;
	cm_buf_init(&list, MEM);
	if ((rc = snap_repo_find(repo, &r, err)) || (rc = body_keys(body, keys, "restore", err)))
		goto out;
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(body, "rename_pattern");
	const cJSON *rep = cJSON_GetObjectItemCaseSensitive(body, "rename_replacement");
	const cJSON *isets = cJSON_GetObjectItemCaseSensitive(body, "index_settings");
	bool ignore = opt_bool(body, "ignore_unavailable", false, &ok);
	bool global = opt_bool(body, "include_global_state", false, &ok);
	opt_bool(body, "partial", false, &ok);
	bool aliases = opt_bool(body, "include_aliases", true, &ok);
	if (!ok || (pat && !cJSON_IsString(pat)) || (rep && !cJSON_IsString(rep)) ||
	    (!pat != !rep) ||
	    !list_text(cJSON_GetObjectItemCaseSensitive(body, "indices"), &list)) {
		rc = cm_error_set(err, CM_EPARSE, "malformed restore request");
		goto out;
	}
	cm_buf_put_u8(&list, 0);
	if (pat) {
		int rr = regcomp(&re, pat->valuestring, REG_EXTENDED);
		if (rr) {
			rc = cm_error_set(err, CM_EINVAL, "bad rename_pattern [%s]",
			                  pat->valuestring);
			goto out;
		}
		have_re = true;
	}
	if ((rc = sn_repo_open(r.resolved, 0, &h, err)) ||
	    (rc = sn_snapshot_read(h, snap, &m, &e, err)))
		goto out;
	if (strcmp(e.state, "FAILED") == 0) {
		rc = cm_error_set_type(err, CM_EINVAL, "snapshot_restore_exception",
		                       "[%s:%s] cannot restore a FAILED snapshot", repo, snap);
		goto out;
	}
	const cJSON *ixs = cJSON_GetObjectItemCaseSensitive(m, "indices"), *im;
	xs = cm_calloc(MEM, (size_t)cJSON_GetArraySize(ixs) + 1, sizeof(rs_index));
	cJSON_ArrayForEach(im, ixs)
	{
		if (!index_selected(im->string, (const char *)list.data))
			continue;
		rs_index *x = &xs[nx++];
		x->meta = im;
		snprintf(x->from, sizeof(x->from), "%s", im->string);
		if (have_re)
			rc = rename_index(&re, rep->valuestring, im->string, x->to, sizeof(x->to),
			                  err);
		else
			snprintf(x->to, sizeof(x->to), "%s", im->string);
		if (rc || (rc = nd_index_name_check(x->to, err)))
			goto out;
		nd_index *old = nd_index_get(n, x->to);
		if (old) {
			nd_index_release(old);
			rc = cm_error_set_type(
			    err, CM_EINVAL, "snapshot_restore_exception",
			    "[%s:%s] cannot restore index [%s] because an open index "
			    "with same name already exists in the cluster",
			    repo, snap, x->to);
			goto out;
		}
		for (size_t k = 0; k + 1 < nx; k++)
			if (strcmp(xs[k].to, x->to) == 0) {
				rc =
				    cm_error_set_type(err, CM_EINVAL, "snapshot_restore_exception",
				                      "[%s:%s] indices [%s] and [%s] would both be "
				                      "restored as [%s]",
				                      repo, snap, xs[k].from, x->from, x->to);
				goto out;
			}
		const cJSON *s;
		/* every shard exactly once, or the index would come back short */
		int ns = (int)num(im, "number_of_shards");
		const cJSON *sh_arr = cJSON_GetObjectItemCaseSensitive(im, "shards");
		bool seen[ND_MAX_SHARDS] = {0};
		bool whole = ns > 0 && ns <= ND_MAX_SHARDS && cJSON_GetArraySize(sh_arr) == ns;
		cJSON_ArrayForEach(s, sh_arr)
		{
			int k = (int)num(s, "shard");
			if (!whole || k < 0 || k >= ns || seen[k])
				whole = false;
			else
				seen[k] = true;
		}
		if (!whole) {
			rc = cm_error_set_type(
			    err, CM_ECORRUPT, "snapshot_restore_exception",
			    "[%s:%s] the manifest of index [%s] does not list each of "
			    "its shards once",
			    repo, snap, x->from);
			goto out;
		}
		cJSON_ArrayForEach(s, sh_arr)
		{
			if (strcmp(str(s, "state"), "SUCCESS") != 0) {
				rc = cm_error_set_type(
				    err, CM_EINVAL, "snapshot_restore_exception",
				    "[%s:%s] index [%s] wasn't fully snapshotted: shard "
				    "[%d] %s",
				    repo, snap, x->from, (int)num(s, "shard"), str(s, "state"));
				goto out;
			}
		}
	}
	/* missing names asked for by name */
	if (!ignore && list.len > 1) {
		char *copy = cm_strdup(MEM, (const char *)list.data), *save = NULL, *tok;
		for (tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save))
			if (!strchr(tok, '*') && tok[0] != '-' && strcmp(tok, "_all") != 0 &&
			    !cJSON_GetObjectItemCaseSensitive(ixs, tok))
				rc = cm_error_set_type(
				    err, CM_ENOTFOUND, "snapshot_restore_exception",
				    "[%s:%s] index [%s] is not in the snapshot", repo, snap, tok);
		cm_free(MEM, copy);
		if (rc)
			goto out;
	}
	/* every file checked before anything is created: a bad repository
	 * fails the restore, it never yields an index missing data */
	for (size_t i = 0; i < nx && !rc; i++) {
		const cJSON *s, *f;
		cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(xs[i].meta, "shards"))
		{
			cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(s, "files"))
			{
				char name[SN_NAME_MAX], full[SN_NAME_MAX * 2 + 32];
				sn_blob b;
				if (!sn_file_parse(f, name, &b)) {
					rc = cm_error_set_type(
					    err, CM_ECORRUPT, "snapshot_restore_exception",
					    "bad file entry in the manifest of [%s]", xs[i].from);
					break;
				}
				snprintf(full, sizeof(full), "%s/%d/%s", xs[i].from,
				         (int)num(s, "shard"), name);
				if ((rc = sn_blob_check(h, &b, full, err)))
					break;
			}
			if (rc)
				break;
		}
	}
	if (rc)
		goto out;
	for (size_t i = 0; i < nx && !rc; i++) {
		rs_index *x = &xs[i];
		cJSON *cb = cJSON_CreateObject();
		cJSON *set =
		    cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(x->meta, "settings"), true);
		cJSON *si = cJSON_GetObjectItemCaseSensitive(set, "index");
		if (!si)
			si = cJSON_AddObjectToObject(set, "index");
		x->replicas = atoi(str(si, "number_of_replicas"));
		char nsb[16];
		snprintf(nsb, sizeof(nsb), "%d", (int)num(x->meta, "number_of_shards"));
		cJSON_DeleteItemFromObject(si, "number_of_shards");
		cJSON_AddStringToObject(si, "number_of_shards", nsb);
		if ((rc = index_settings_apply(isets, si, &x->replicas, err))) {
			cJSON_Delete(set);
			cJSON_Delete(cb);
			break;
		}
		/* primaries first; the replicas recover from them afterwards */
		cJSON_DeleteItemFromObject(si, "number_of_replicas");
		cJSON_AddStringToObject(si, "number_of_replicas", "0");
		cJSON_AddItemToObject(cb, "settings", set);
		const cJSON *mp = cJSON_GetObjectItemCaseSensitive(x->meta, "mappings");
		if (mp)
			cJSON_AddItemToObject(cb, "mappings", cJSON_Duplicate(mp, true));
		const cJSON *al = cJSON_GetObjectItemCaseSensitive(x->meta, "aliases");
		if (aliases && cJSON_IsObject(al) && al->child)
			cJSON_AddItemToObject(cb, "aliases", cJSON_Duplicate(al, true));
		rc = create_index(n, x->to, cb, err);
		cJSON_Delete(cb);
		if (rc)
			break;
		x->created = true;
		if ((rc = restore_shards(n, &r, snap, x, err)))
			break;
		if (x->replicas && (rc = set_replicas(n, x->to, x->replicas, err)))
			break;
		nd_cluster *cl = nd_cluster_of(n);
		if (cl) {
			int total = 0, failed = 0;
			cm_error e2;
			cm_error_clear(&e2);
			nd_cluster_broadcast(cl, ND_BROADCAST_REFRESH, x->to, &total, &failed, &e2);
		}
	}
	const cJSON *gs = cJSON_GetObjectItemCaseSensitive(m, "global_state");
	if (!rc && global && gs) {
		/* after the indices: a failure here takes them back too */
		if (!g_global.put)
			rc = cm_error_set(err, CM_EINTERNAL, "no global state handler");
		else
			rc = g_global.put(n, gs, err);
	} else if (!rc && global && !gs) {
		rc = cm_error_set_type(err, CM_EINVAL, "snapshot_restore_exception",
		                       "[%s:%s] the snapshot holds no global state (taken with "
		                       "include_global_state: false)",
		                       repo, snap);
	}
	if (rc) {
		for (size_t i = 0; i < nx; i++)
			if (xs[i].created)
				drop_index(n, xs[i].to);
		goto out;
	}
	cm_info("snapshot", "restored %zu indices from [%s:%s]", nx, repo, snap);
	*out = cJSON_CreateObject();
	if (!wait) {
		cJSON_AddBoolToObject(*out, "accepted", true);
	} else {
		cJSON *sj = cJSON_AddObjectToObject(*out, "snapshot"), *il, *sh;
		int shards = 0;
		cJSON_AddStringToObject(sj, "snapshot", snap);
		il = cJSON_AddArrayToObject(sj, "indices");
		for (size_t i = 0; i < nx; i++) {
			cJSON_AddItemToArray(il, cJSON_CreateString(xs[i].to));
			shards += cJSON_GetArraySize(
			    cJSON_GetObjectItemCaseSensitive(xs[i].meta, "shards"));
		}
		sh = cJSON_AddObjectToObject(sj, "shards");
		cJSON_AddNumberToObject(sh, "total", shards);
		cJSON_AddNumberToObject(sh, "failed", 0);
		cJSON_AddNumberToObject(sh, "successful", shards);
	}
out:
	if (have_re)
		regfree(&re);
	cm_free(MEM, xs);
	cJSON_Delete(m);
	sn_repo_close(h);
	cm_buf_free(&list);
	return rc;
}

cm_err
nd_snap_pending_owner(const char *repo, const char *snap, char *owner, size_t cap, cm_error *err)
{
	snap_repo r;
	sn_repo *h;
	cm_err rc;
	if ((rc = snap_repo_find(repo, &r, err)) || (rc = sn_repo_open(r.resolved, 0, &h, err)))
		return rc;
	bool pending = sn_snapshot_pending_owner(h, snap, owner, cap);
	sn_repo_close(h);
	if (!pending || !owner[0])
		return cm_error_set_type(err, CM_ENOTFOUND, "snapshot_missing_exception",
		                         "[%s:%s] is missing", repo, snap);
	return CM_OK;
}
