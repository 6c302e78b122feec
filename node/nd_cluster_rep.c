/* Replication: routing kept by the master, the primary's write path, global
 * checkpoints, peer recovery and failover. The rules, in one place:
 *
 *  - The master's metadata gives every shard a primary, a primary term and
 *    an in-sync set. Only the master changes them, persisting and
 *    publishing each change before answering the node that asked.
 *  - A primary logs (synced) and applies a batch, forwards it to every
 *    in-sync copy and to copies in recovery, and acknowledges only when
 *    every in-sync copy logged it. An in-sync copy that fails or stays
 *    silent past cluster.replica_timeout is removed by the master first
 *    (shard_failed); if the master cannot be asked, nothing is
 *    acknowledged.
 *  - A copy refuses a batch whose term is older than the one it knows, so
 *    a deposed primary can never gather acknowledgements.
 *  - A node that starts asks the master to take it in (node_join): its
 *    copies leave the in-sync sets, and where it is the primary the
 *    replicas leave instead (they resync from it, since it may hold
 *    unacknowledged operations they lack). Copies outside the in-sync set
 *    recover from the primary: ops-based when their history above the
 *    global checkpoint agrees with the primary's log and the log still
 *    holds what they miss, else file-based (a snapshot of the primary's
 *    files replaces the copy, which is also how operations of a deposed
 *    primary are rolled back). They rejoin through the primary, under its
 *    write lock, once nothing can be missing.
 *  - The master promotes an in-sync copy, with a new term, when a primary's
 *    node stays unreachable for cluster.primary_failover_timeout. */
#define _GNU_SOURCE
#include "nd_cluster_rep.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../proto/pr.h"

#define MEM CM_MEM_NODE
#define NONE (-1)
#define REC_OPS_BATCH 2000
#define REC_CHUNK (1u << 20)
#define REC_HISTORY_MAX 200000
#define REC_LOG_MAX 256

/* ---------------------------------------------------------------- */
/* routing table: a copy of the metadata's "shards", rebuilt on change  */

typedef struct route_ix {
	char name[256];
	char uuid[64];
	int nshards;
	cl_route *shards;
} route_ix;

/* Primary-side state of one shard: who else gets its operations, what
 * they have confirmed, the global checkpoint. */
typedef struct rep_shard {
	char index[256];
	char uuid[64];
	int shard;
	pthread_rwlock_t lock; /* writers read-hold it; a recovery's final step write-holds it */
	uint64_t tracking;     /* copies in recovery: forwarded to, not waited for */
	int64_t ckp[ND_CL_MAX_NODES]; /* (under cl_repl.mu) */
	int64_t gcp;
	int64_t gcp_sent;                  /* the last one the copies were told */
	uint64_t term;                     /* the term the checkpoints were gathered in */
	int64_t rec_from[ND_CL_MAX_NODES]; /* retention marker per recovering copy */
	int64_t retain_from;               /* the lowest of them */
	struct rep_shard *next;
} rep_shard;

typedef struct rec_rec {
	char index[256];
	int shard;
	char type[16], stage[16], source[64], target[64];
	int64_t start_ms, stop_ms;
	uint64_t files, bytes, ops;
	bool failed;
} rec_rec;

typedef struct cl_repl {
	pthread_rwlock_t route_lock;
	route_ix *routes;
	size_t nroutes;
	pthread_mutex_t mu; /* reps, log, recovery state */
	rep_shard *reps;
	rec_rec log[REC_LOG_MAX];
	size_t nlog;
	uint64_t failover_ns, replica_ns;
	uint64_t rec_bytes_per_s;
	_Atomic bool joined;
	pthread_t rec_thread;
	bool rec_running;
	_Atomic bool rec_busy;
	char rec_index[256];
	int rec_shard;
	uint64_t next_rec_ns;
	uint64_t snap_seq;
} cl_repl;

static const char *str_of(const cJSON *o, const char *k);

static cl_repl *
R(nd_cluster *cl)
{
	return cl->repl;
}

static int
node_by_name(const nd_cluster *cl, const char *name)
{
	for (int i = 0; i < cl->nn; i++)
		if (strcmp(cl->nodes[i].name, name) == 0)
			return i;
	return -1;
}

static int
copies_of(nd_cluster *cl, int nreplicas, int shard, int *out)
{
	int nc = 1 + nreplicas;
	if (nc > cl->ndata)
		nc = cl->ndata;
	if (nc > ND_CL_MAX_COPIES)
		nc = ND_CL_MAX_COPIES;
	for (int c = 0; c < nc; c++)
		out[c] = cl_copy_node(cl, shard, c);
	return nc;
}

void
cl_routes_rebuild_locked(nd_cluster *cl)
{
	cl_repl *rp = R(cl);
	cJSON *indices = cJSON_GetObjectItemCaseSensitive(cl->meta, "indices"), *e;
	size_t n = (size_t)cJSON_GetArraySize(indices), k = 0;
	route_ix *rt = cm_calloc(MEM, n + 1, sizeof(route_ix));

	cJSON_ArrayForEach(e, indices)
	{
		nd_index *ix = nd_index_get(cl->node, e->string);
		const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shards");
		const cJSON *uuid = cJSON_GetObjectItemCaseSensitive(e, "uuid");
		if (!ix)
			continue;
		route_ix *r = &rt[k++];
		snprintf(r->name, sizeof(r->name), "%s", e->string);
		snprintf(r->uuid, sizeof(r->uuid), "%s",
		         cJSON_IsString(uuid) ? uuid->valuestring : nd_index_uuid(ix));
		r->nshards = nd_index_nshards(ix);
		r->shards = cm_calloc(MEM, (size_t)r->nshards, sizeof(cl_route));
		int nrep = nd_index_settings(ix)->number_of_replicas;
		for (int s = 0; s < r->nshards; s++) {
			cl_route *ro = &r->shards[s];
			const cJSON *x = cJSON_GetArrayItem(sh, s);
			const cJSON *p = cJSON_GetObjectItemCaseSensitive(x, "primary");
			const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "term");
			const cJSON *in = cJSON_GetObjectItemCaseSensitive(x, "in_sync"), *it;
			ro->ncopies = copies_of(cl, nrep, s, ro->copies);
			if (!x) {
				/* Metadata written before routing existed: copy 0 leads
				 * and every copy counts as in sync. */
				ro->primary = ro->copies[0];
				ro->term = 1;
				for (int c = 0; c < ro->ncopies; c++)
					ro->in_sync |= 1ull << ro->copies[c];
				continue;
			}
			ro->primary = cJSON_IsString(p) ? node_by_name(cl, p->valuestring) : -1;
			ro->term = cJSON_IsNumber(t) ? (uint64_t)t->valuedouble : 1;
			cJSON_ArrayForEach(it, in)
			{
				int nd =
				    cJSON_IsString(it) ? node_by_name(cl, it->valuestring) : -1;
				if (nd >= 0)
					ro->in_sync |= 1ull << nd;
			}
		}
		nd_index_release(ix);
	}
	const cJSON *joined = cJSON_GetObjectItemCaseSensitive(cl->meta, "joined");
	for (int i = 0; i < cl->nn; i++) {
		const char *b = str_of(joined, cl->nodes[i].name);
		atomic_store(&cl->nodes[i].boot_joined, *b ? strtoull(b, NULL, 16) : 0);
	}
	pthread_rwlock_wrlock(&rp->route_lock);
	route_ix *old = rp->routes;
	size_t nold = rp->nroutes;
	rp->routes = rt;
	rp->nroutes = k;
	pthread_rwlock_unlock(&rp->route_lock);
	for (size_t i = 0; i < nold; i++)
		cm_free(MEM, old[i].shards);
	cm_free(MEM, old);

	/* Where this node leads, its shard numbers from the current term. */
	for (size_t i = 0; i < k; i++) {
		nd_index *ix = nd_index_get(cl->node, rt[i].name);
		if (!ix)
			continue;
		for (int s = 0; s < rt[i].nshards; s++)
			if (rt[i].shards[s].primary == cl->self)
				st_shard_set_primary_term(nd_index_shard(ix, s),
				                          rt[i].shards[s].term);
		nd_index_release(ix);
	}
}

bool
cl_route_get(nd_cluster *cl, const char *index, int shard, cl_route *r)
{
	cl_repl *rp = R(cl);
	bool found = false;
	pthread_rwlock_rdlock(&rp->route_lock);
	for (size_t i = 0; i < rp->nroutes && !found; i++)
		if (strcmp(rp->routes[i].name, index) == 0 && shard >= 0 &&
		    shard < rp->routes[i].nshards) {
			*r = rp->routes[i].shards[shard];
			found = true;
		}
	pthread_rwlock_unlock(&rp->route_lock);
	if (!found)
		memset(r, 0, sizeof(*r)), r->primary = -1;
	return found;
}

/* ---------------------------------------------------------------- */
/* settings, start, stop                                             */

static bool
parse_duration_ns(const char *v, uint64_t *out)
{
	char *end;
	double x = strtod(v, &end);
	double mul = strcmp(end, "ms") == 0           ? 1e6
	             : strcmp(end, "s") == 0 || !*end ? 1e9
	             : strcmp(end, "m") == 0          ? 60e9
	                                              : -1;
	if (end == v || x < 0 || mul < 0 || x * mul > 86400e9)
		return false;
	*out = (uint64_t)(x * mul);
	return true;
}

cm_err
cl_rep_setting(nd_cluster *cl, const char *key, const char *value, cm_error *err)
{
	cl_repl *rp = R(cl);
	uint64_t ns;
	if (strcmp(key, "cluster.primary_failover_timeout") == 0 ||
	    strcmp(key, "cluster.replica_timeout") == 0) {
		if (!parse_duration_ns(value, &ns) || ns < 100000000ull)
			return cm_error_set(
			    err, CM_EINVAL,
			    "[%s] wants a duration of at least 100ms like 30s, got [%s]", key,
			    value);
		if (key[8] == 'p')
			rp->failover_ns = ns;
		else
			rp->replica_ns = ns;
		return CM_OK;
	}
	if (strcmp(key, "cluster.recovery_max_bytes_per_sec") == 0) {
		char *end;
		double x = strtod(value, &end);
		double mul = strcasecmp(end, "kb") == 0   ? 1024.0
		             : strcasecmp(end, "mb") == 0 ? 1048576.0
		             : strcasecmp(end, "gb") == 0 ? 1073741824.0
		             : !*end                      ? 1.0
		                                          : -1.0;
		if (end == value || x <= 0 || mul < 0)
			return cm_error_set(err, CM_EINVAL, "[%s] wants a size like 40mb, got [%s]",
			                    key, value);
		rp->rec_bytes_per_s = (uint64_t)(x * mul);
		return CM_OK;
	}
	return cm_error_set(err, CM_EINVAL, "unknown setting [%s]", key);
}

cm_err
nd_cluster_setting(nd_cluster *cl, const char *kv, cm_error *err)
{
	const char *eq = strchr(kv, '=');
	char key[128];
	if (!eq || (size_t)(eq - kv) >= sizeof(key))
		return cm_error_set(err, CM_EINVAL, "settings are key=value");
	memcpy(key, kv, (size_t)(eq - kv));
	key[eq - kv] = 0;
	return cl_rep_setting(cl, key, eq + 1, err);
}

void
cl_rep_init(nd_cluster *cl)
{
	cl_repl *rp = cm_calloc(MEM, 1, sizeof(*rp));
	pthread_rwlock_init(&rp->route_lock, NULL);
	pthread_mutex_init(&rp->mu, NULL);
	rp->failover_ns = 30000000000ull;
	rp->replica_ns = 10000000000ull;
	rp->rec_bytes_per_s = 40ull << 20;
	cl->repl = rp;
}

static void
snap_root(nd_cluster *cl, char *out, size_t cap)
{
	snprintf(out, cap, "%s/recovery-out", nd_data_dir(cl->node));
}

static void
incoming_dir(nd_cluster *cl, const char *uuid, int shard, char *out, size_t cap)
{
	snprintf(out, cap, "%s/recovery-in/%s-%d", nd_data_dir(cl->node), uuid, shard);
}

void
cl_rep_start(nd_cluster *cl)
{
	char path[1200];
	uint64_t boot = ((uint64_t)getpid() << 40) ^ (uint64_t)cm_wall_ms() ^ cm_now_ns();
	atomic_store(&cl->nodes[cl->self].boot, boot ? boot : 1);
	/* Snapshots and partial copies of an earlier run are useless now. */
	snap_root(cl, path, sizeof(path));
	cm_rm_rf(path);
	snprintf(path, sizeof(path), "%s/recovery-in", nd_data_dir(cl->node));
	cm_rm_rf(path);
	pthread_mutex_lock(&cl->meta_lock);
	cl_routes_rebuild_locked(cl);
	pthread_mutex_unlock(&cl->meta_lock);
}

void
cl_rep_quiesce(nd_cluster *cl)
{
	cl_repl *rp = R(cl);
	if (rp && rp->rec_running) {
		pthread_join(rp->rec_thread, NULL);
		rp->rec_running = false;
	}
}

void
cl_rep_stop(nd_cluster *cl)
{
	cl_repl *rp = R(cl);
	if (!rp)
		return;
	cl_rep_quiesce(cl);
	for (size_t i = 0; i < rp->nroutes; i++)
		cm_free(MEM, rp->routes[i].shards);
	cm_free(MEM, rp->routes);
	for (rep_shard *s = rp->reps, *nx; s; s = nx) {
		nx = s->next;
		pthread_rwlock_destroy(&s->lock);
		cm_free(MEM, s);
	}
	pthread_rwlock_destroy(&rp->route_lock);
	pthread_mutex_destroy(&rp->mu);
	cm_free(MEM, rp);
	cl->repl = NULL;
}

static rep_shard *
rep_get(nd_cluster *cl, nd_index *ix, int shard)
{
	cl_repl *rp = R(cl);
	rep_shard *s;
	pthread_mutex_lock(&rp->mu);
	for (s = rp->reps; s; s = s->next)
		if (s->shard == shard && strcmp(s->uuid, nd_index_uuid(ix)) == 0)
			break;
	if (!s) {
		s = cm_calloc(MEM, 1, sizeof(*s));
		snprintf(s->uuid, sizeof(s->uuid), "%s", nd_index_uuid(ix));
		snprintf(s->index, sizeof(s->index), "%s", nd_index_name(ix));
		s->gcp_sent = NONE;
		s->shard = shard;
		pthread_rwlock_init(&s->lock, NULL);
		for (int i = 0; i < ND_CL_MAX_NODES; i++)
			s->ckp[i] = NONE;
		s->gcp = NONE;
		s->retain_from = INT64_MAX;
		for (int i = 0; i < ND_CL_MAX_NODES; i++)
			s->rec_from[i] = INT64_MAX;
		s->next = rp->reps;
		rp->reps = s;
	}
	pthread_mutex_unlock(&rp->mu);
	return s;
}

static int64_t
seq_i(uint64_t v)
{
	return v == ST_NO_SEQ ? NONE : (int64_t)v;
}

static uint64_t
seq_u(int64_t v)
{
	return v < 0 ? ST_NO_SEQ : (uint64_t)v;
}

/* ---------------------------------------------------------------- */
/* recovery log (_cat/recovery)                                      */

static rec_rec *
rec_log_new(nd_cluster *cl, const char *index, int shard, const char *source)
{
	cl_repl *rp = R(cl);
	pthread_mutex_lock(&rp->mu);
	if (rp->nlog == REC_LOG_MAX) {
		memmove(rp->log, rp->log + 1, (REC_LOG_MAX - 1) * sizeof(rec_rec));
		rp->nlog--;
	}
	rec_rec *r = &rp->log[rp->nlog++];
	memset(r, 0, sizeof(*r));
	snprintf(r->index, sizeof(r->index), "%s", index);
	r->shard = shard;
	snprintf(r->type, sizeof(r->type), "peer");
	snprintf(r->stage, sizeof(r->stage), "init");
	snprintf(r->source, sizeof(r->source), "%s", source);
	snprintf(r->target, sizeof(r->target), "%s", cl->nodes[cl->self].name);
	r->start_ms = cm_wall_ms();
	pthread_mutex_unlock(&rp->mu);
	return r;
}

/* The recovery thread is the only writer of its (last) record; the
 * mutex keeps readers consistent. */
static void
rec_log_set(nd_cluster *cl, const char *type, const char *stage, uint64_t files, uint64_t bytes,
            uint64_t ops, bool done, bool failed)
{
	cl_repl *rp = R(cl);
	pthread_mutex_lock(&rp->mu);
	if (rp->nlog) {
		rec_rec *r = &rp->log[rp->nlog - 1];
		if (type)
			snprintf(r->type, sizeof(r->type), "%s", type);
		if (stage)
			snprintf(r->stage, sizeof(r->stage), "%s", stage);
		r->files += files;
		r->bytes += bytes;
		r->ops += ops;
		if (done) {
			r->stop_ms = cm_wall_ms();
			r->failed = failed;
		}
	}
	pthread_mutex_unlock(&rp->mu);
}

void
cl_rep_cat_recovery(nd_cluster *cl, cm_buf *out)
{
	cl_repl *rp = R(cl);
	pthread_mutex_lock(&rp->mu);
	for (size_t i = 0; i < rp->nlog; i++) {
		rec_rec *r = &rp->log[i];
		int64_t t = (r->stop_ms ? r->stop_ms : cm_wall_ms()) - r->start_ms;
		cm_buf_printf(out, "%s %d %.3fs %s %s %s %s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
		              r->index, r->shard, (double)t / 1000.0, r->type,
		              r->failed ? "failed" : r->stage, r->source, r->target, r->files,
		              r->bytes, r->ops);
	}
	pthread_mutex_unlock(&rp->mu);
}

/* ---------------------------------------------------------------- */
/* master side                                                       */

static cJSON *
shard_entry_locked(nd_cluster *cl, const char *index, int shard, nd_index **ixp)
{
	cJSON *e = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(cl->meta, "indices"), index);
	nd_index *ix;
	if (!e || !(ix = nd_index_get(cl->node, index)))
		return NULL;
	cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shards");
	if (!cJSON_IsArray(sh)) {
		cJSON_DeleteItemFromObjectCaseSensitive(e, "shards");
		cl_rep_meta_new_index(cl, e, nd_index_nshards(ix),
		                      1 + nd_index_settings(ix)->number_of_replicas);
		sh = cJSON_GetObjectItemCaseSensitive(e, "shards");
	}
	if (ixp)
		*ixp = ix;
	else
		nd_index_release(ix);
	return cJSON_GetArrayItem(sh, shard);
}

void
cl_rep_meta_new_index(nd_cluster *cl, cJSON *entry, int nshards, int ncopies)
{
	cJSON *sh = cJSON_AddArrayToObject(entry, "shards");
	for (int s = 0; s < nshards; s++) {
		int copies[ND_CL_MAX_COPIES] = {0};
		int nc = copies_of(cl, ncopies - 1, s, copies);
		cJSON *x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "primary", cl->nodes[copies[0]].name);
		cJSON_AddNumberToObject(x, "term", 1);
		cJSON *in = cJSON_AddArrayToObject(x, "in_sync");
		for (int c = 0; c < nc; c++)
			cJSON_AddItemToArray(in, cJSON_CreateString(cl->nodes[copies[c]].name));
		cJSON_AddItemToArray(sh, x);
	}
}

bool
cl_rep_is_master_action(const char *action)
{
	return strcmp(action, "shard_failed") == 0 || strcmp(action, "shard_started") == 0 ||
	       strcmp(action, "node_join") == 0;
}

static bool
in_sync_has(const cJSON *in, const char *name)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, in) if (cJSON_IsString(it) &&
	                               strcmp(it->valuestring, name) == 0) return true;
	return false;
}

static void
in_sync_del(cJSON *x, const char *name)
{
	cJSON *in = cJSON_GetObjectItemCaseSensitive(x, "in_sync");
	for (int i = cJSON_GetArraySize(in) - 1; i >= 0; i--) {
		cJSON *it = cJSON_GetArrayItem(in, i);
		if (cJSON_IsString(it) && strcmp(it->valuestring, name) == 0)
			cJSON_DeleteItemFromArray(in, i);
	}
}

static uint64_t
num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : 0;
}

static const char *
str_of(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : "";
}

typedef bool (*shard_visit)(nd_cluster *cl, const char *index, int shard, cJSON *x, void *ctx);

/* Calls fn on the routing entry of every shard of every index (meta_lock
 * held); true if any call returned true (changed it). */
static bool
each_shard_locked(nd_cluster *cl, shard_visit fn, void *ctx)
{
	bool changed = false;
	cJSON *indices = cJSON_GetObjectItemCaseSensitive(cl->meta, "indices"), *e;
	cJSON_ArrayForEach(e, indices)
	{
		nd_index *ix = nd_index_get(cl->node, e->string);
		if (!ix)
			continue;
		int ns = nd_index_nshards(ix);
		nd_index_release(ix);
		for (int s = 0; s < ns; s++) {
			cJSON *x = shard_entry_locked(cl, e->string, s, NULL);
			if (x && fn(cl, e->string, s, x, ctx))
				changed = true;
		}
	}
	return changed;
}

/* A node that (re)starts: its copies are not in sync until they recover;
 * where it leads, the replicas resync from it. */
static bool
join_shard(nd_cluster *cl, const char *index, int shard, cJSON *x, void *ctx)
{
	const char *node = ctx;
	(void)cl, (void)index, (void)shard;
	if (strcmp(str_of(x, "primary"), node) == 0) {
		cJSON *in = cJSON_CreateArray();
		cJSON_AddItemToArray(in, cJSON_CreateString(node));
		cJSON_ReplaceItemInObjectCaseSensitive(x, "in_sync", in);
	} else {
		in_sync_del(x, node);
	}
	return true;
}

cm_err
cl_rep_master_action(nd_cluster *cl, const char *action, const cJSON *body, cm_error *err)
{
	const char *node = str_of(body, "node");
	int ni = node_by_name(cl, node);
	if (ni < 0)
		return cm_error_set(err, CM_EINVAL, "unknown node [%s]", node);
	if (strcmp(action, "node_join") == 0) {
		/* Which process of each node joined: persisted, so a restarted
		 * master still tells nodes that stayed up from restarted ones. */
		cJSON *joined = cJSON_GetObjectItemCaseSensitive(cl->meta, "joined");
		if (!cJSON_IsObject(joined)) {
			cJSON_DeleteItemFromObjectCaseSensitive(cl->meta, "joined");
			joined = cJSON_AddObjectToObject(cl->meta, "joined");
		}
		cJSON_DeleteItemFromObjectCaseSensitive(joined, node);
		cJSON_AddStringToObject(joined, node, str_of(body, "boot"));
		atomic_store(&cl->nodes[ni].boot, strtoull(str_of(body, "boot"), NULL, 16));
		each_shard_locked(cl, join_shard, (void *)node);
		cm_info("cluster", "node [%s] joined: its copies recover before they count", node);
		return CM_OK;
	}
	const char *index = str_of(body, "index");
	int shard = (int)num(body, "shard");
	uint64_t term = num(body, "term");
	cJSON *x = shard_entry_locked(cl, index, shard, NULL);
	if (!x)
		return cm_error_set(err, CM_ENOINDEX, "no such shard [%s][%d]", index, shard);
	if (strcmp(str_of(body, "uuid"),
	           str_of(cJSON_GetObjectItemCaseSensitive(
	                      cJSON_GetObjectItemCaseSensitive(cl->meta, "indices"), index),
	                  "uuid")) != 0)
		return cm_error_set(err, CM_ECONFLICT, "index [%s] was re-created", index);
	if (term != num(x, "term") || strcmp(str_of(body, "primary"), str_of(x, "primary")) != 0)
		return cm_error_set_type(err, CM_ECONFLICT, "shard_state_exception",
		                         "[%s][%d] primary term %" PRIu64
		                         " of [%s] is stale: the primary is [%s] in term %" PRIu64,
		                         index, shard, term, str_of(body, "primary"),
		                         str_of(x, "primary"), num(x, "term"));
	if (strcmp(action, "shard_failed") == 0) {
		in_sync_del(x, node);
		cm_warn("cluster", "[%s][%d] copy on [%s] leaves the in-sync set: %s", index, shard,
		        node, str_of(body, "reason"));
	} else {
		if (!in_sync_has(cJSON_GetObjectItemCaseSensitive(x, "in_sync"), node))
			cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(x, "in_sync"),
			                     cJSON_CreateString(node));
		cm_info("cluster", "[%s][%d] copy on [%s] recovered and is in sync", index, shard,
		        node);
	}
	return CM_OK;
}

static bool
failover_shard(nd_cluster *cl, const char *index, int s, cJSON *x, void *ctx)
{
	cl_repl *rp = R(cl);
	uint64_t now = *(const uint64_t *)ctx;
	int p = node_by_name(cl, str_of(x, "primary"));
	if (p < 0 || p == cl->self || cl_alive(cl, p))
		return false;
	uint64_t since = atomic_load(&cl->nodes[p].down_since_ns);
	if (!since || now - since < rp->failover_ns)
		return false;
	const cJSON *in = cJSON_GetObjectItemCaseSensitive(x, "in_sync"), *it;
	const char *pick = NULL;
	cJSON_ArrayForEach(it, in)
	{
		int nd = cJSON_IsString(it) ? node_by_name(cl, it->valuestring) : -1;
		if (nd >= 0 && nd != p && cl_alive(cl, nd)) {
			pick = it->valuestring;
			break;
		}
	}
	if (!pick) {
		cm_warn("cluster",
		        "[%s][%d] primary on [%s] is gone and no in-sync copy is reachable: the "
		        "shard stays red",
		        index, s, cl->nodes[p].name);
		return false;
	}
	char name[64];
	snprintf(name, sizeof(name), "%s", pick);
	uint64_t term = num(x, "term") + 1;
	cm_warn("cluster",
	        "[%s][%d] primary on [%s] unreachable for %.1fs: promoting the copy on [%s], "
	        "primary term %" PRIu64,
	        index, s, cl->nodes[p].name, (double)(now - since) / 1e9, name, term);
	cJSON_ReplaceItemInObjectCaseSensitive(x, "primary", cJSON_CreateString(name));
	cJSON_ReplaceItemInObjectCaseSensitive(x, "term", cJSON_CreateNumber((double)term));
	in_sync_del(x, cl->nodes[p].name);
	return true;
}

/* Master: promotes an in-sync copy of every shard whose primary's node has
 * been unreachable past the failover timeout. Returns true if it changed
 * the metadata (the caller versions, persists and publishes). */
static bool
failover_locked(nd_cluster *cl)
{
	uint64_t now = cm_now_ns();
	return each_shard_locked(cl, failover_shard, &now);
}

/* ---------------------------------------------------------------- */
/* asking the master                                                 */

static cm_err
ask_master(nd_cluster *cl, const char *action, cJSON *body, cm_error *err)
{
	char *text = cJSON_PrintUnformatted(body), *reply = NULL;
	cm_err rc = nd_cluster_admin(cl, action, "", text, &reply, err);
	cm_free(MEM, reply);
	cJSON_free(text);
	return rc;
}

static cJSON *
shard_msg(nd_cluster *cl, nd_index *ix, int shard, int node, uint64_t term, const char *primary)
{
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "index", nd_index_name(ix));
	cJSON_AddStringToObject(b, "uuid", nd_index_uuid(ix));
	cJSON_AddNumberToObject(b, "shard", shard);
	cJSON_AddStringToObject(b, "node", cl->nodes[node].name);
	cJSON_AddNumberToObject(b, "term", (double)term);
	cJSON_AddStringToObject(b, "primary", primary);
	return b;
}

/* ---------------------------------------------------------------- */
/* primary write path                                                */

typedef struct fwd_call {
	cm_wait *w;
	nd_cluster *cl;
	int node;
	cm_err rc;
	char why[200];
	int64_t ckp;
	bool stale;
} fwd_call;

static void
fwd_done(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	fwd_call *c = arg;
	cm_error e;
	(void)type;
	cm_error_clear(&e);
	if (!rc) {
		/* The whole-batch outcome: a replica applies what the primary
		 * applied, so per-op results carry nothing new. */
		uint64_t ckp;
		rc = pr_bulk_reply_whole(p, len, &ckp, &e);
		if (rc) {
			snprintf(c->why, sizeof(c->why), "%.190s", e.reason);
			c->stale = e.code == CM_ECONFLICT;
		} else {
			c->ckp = seq_i(ckp);
		}
	} else {
		snprintf(c->why, sizeof(c->why), "%s", cm_err_msg(rc));
		if (rc == CM_EUNAVAIL)
			cl_mark(c->cl, c->node, false, 0);
	}
	c->rc = rc;
	cm_wait_done(c->w);
}

/* Sends ops (already numbered) to the copies in mask; waits for all. */
static void
forward(nd_cluster *cl, nd_index *ix, int shard, const st_op *ops, size_t n, uint64_t term,
        int64_t gcp, uint64_t mask, uint64_t deadline_ns, fwd_call *calls)
{
	cm_buf b;
	int cnt = 0;
	for (int i = 0; i < cl->nn; i++)
		cnt += (mask >> i) & 1;
	if (!cnt)
		return;
	pr_bulk_req rq = {.index = (char *)nd_index_name(ix),
	                  .index_uuid = (char *)nd_index_uuid(ix),
	                  .shard = (uint32_t)shard,
	                  .ops = (st_op *)ops,
	                  .nops = n,
	                  .replica = true,
	                  .primary_term = term,
	                  .global_checkpoint = seq_u(gcp),
	                  .source_node = cl->nodes[cl->self].name};
	cm_buf_init(&b, MEM);
	pr_bulk_req_encode(&rq, &b);
	cm_wait *w = cm_wait_create(cnt);
	for (int i = 0; i < cl->nn; i++) {
		if (!((mask >> i) & 1))
			continue;
		calls[i] = (fwd_call){.w = w, .cl = cl, .node = i, .ckp = NONE};
		if (!cl->nodes[i].peer) {
			calls[i].rc = CM_EUNAVAIL;
			cm_wait_done(w);
			continue;
		}
		if (!cl_alive(cl, i)) {
			/* Known unreachable: fail it now rather than at the timeout. */
			calls[i].rc = CM_EUNAVAIL;
			snprintf(calls[i].why, sizeof(calls[i].why), "node is unreachable");
			cm_wait_done(w);
			continue;
		}
		nd_peer_call(cl->nodes[i].peer, PR_BULK, b.data, b.len, deadline_ns, fwd_done,
		             &calls[i]);
	}
	cm_wait_wait(w);
	cm_wait_destroy(w);
	cm_buf_free(&b);
}

static void fail_all(const st_op_result *ores, st_op_result *res, size_t n, cm_err code,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void
fail_all(const st_op_result *ores, st_op_result *res, size_t n, cm_err code, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	for (size_t i = 0; i < n; i++) {
		if (ores && ores[i].err)
			continue;
		res[i].err = code;
		snprintf(res[i].reason, sizeof(res[i].reason), "%s", why);
	}
}

static int64_t
gcp_of(nd_cluster *cl, rep_shard *rs, uint64_t in_sync, int64_t self_ckp)
{
	int64_t g = self_ckp;
	for (int i = 0; i < cl->nn; i++)
		if (i != cl->self && ((in_sync >> i) & 1) && rs->ckp[i] < g)
			g = rs->ckp[i];
	return g;
}

cm_err
cl_rep_primary_apply(nd_cluster *cl, nd_index *ix, int shard, const st_op *ops, size_t n,
                     st_op_result *res, uint64_t deadline_ns)
{
	cl_repl *rp = R(cl);
	cl_route r;
	fwd_call calls[ND_CL_MAX_NODES];
	const char *name = nd_index_name(ix);
	st_op *rops = NULL;
	size_t k = 0;
	cm_err rc;

	if (!cl_route_get(cl, name, shard, &r) || r.primary != cl->self) {
		fail_all(NULL, res, n, CM_EUNAVAIL,
		         "[%s][%d] primary is not on node [%s] (it is on [%s]); retry", name, shard,
		         cl->nodes[cl->self].name,
		         r.primary >= 0 ? cl->nodes[r.primary].name : "?");
		return CM_OK;
	}
	if (!atomic_load(&rp->joined)) {
		fail_all(NULL, res, n, CM_EUNAVAIL,
		         "[%s][%d] primary on [%s] is starting: the master has not taken it in yet",
		         name, shard, cl->nodes[cl->self].name);
		return CM_OK;
	}
	rep_shard *rs = rep_get(cl, ix, shard);
	pthread_rwlock_rdlock(&rs->lock);
	/* The route may have changed while we waited for the lock. */
	cl_route_get(cl, name, shard, &r);
	if (r.primary != cl->self) {
		pthread_rwlock_unlock(&rs->lock);
		fail_all(NULL, res, n, CM_EUNAVAIL, "[%s][%d] primary moved; retry", name, shard);
		return CM_OK;
	}
	pthread_mutex_lock(&rp->mu);
	if (rs->term != r.term) {
		/* Checkpoints gathered under another primary may predate a
		 * rollback of the copy: start over. */
		for (int i = 0; i < ND_CL_MAX_NODES; i++)
			rs->ckp[i] = NONE;
		rs->term = r.term;
	}
	pthread_mutex_unlock(&rp->mu);
	if ((rc = nd_index_apply(ix, shard, ops, n, res)))
		goto out;
	rops = cm_calloc(MEM, n + 1, sizeof(st_op));
	for (size_t i = 0; i < n; i++) {
		if (res[i].err)
			continue;
		rops[k] = ops[i];
		rops[k].seq_no = res[i].seq_no;
		rops[k].primary_term = res[i].primary_term;
		rops[k].version = res[i].version;
		rops[k].if_seq_no = ST_NO_SEQ;
		rops[k].if_primary_term = 0;
		rops[k].create_only = false;
		k++;
	}
	uint64_t in_sync = r.in_sync & ~(1ull << cl->self);
	uint64_t mask = (in_sync | rs->tracking) & ~(1ull << cl->self);
	st_shard_stats st;
	st_shard_stats_get(nd_index_shard(ix, shard), &st);
	if (k && mask) {
		uint64_t dl = cm_now_ns() + rp->replica_ns;
		if (deadline_ns && deadline_ns < dl)
			dl = deadline_ns;
		memset(calls, 0, sizeof(calls));
		forward(cl, ix, shard, rops, k, r.term, rs->gcp, mask, dl, calls);
		pthread_mutex_lock(&rp->mu);
		if (rs->gcp > rs->gcp_sent)
			rs->gcp_sent = rs->gcp;
		pthread_mutex_unlock(&rp->mu);
		for (int i = 0; i < cl->nn; i++) {
			if (!((mask >> i) & 1))
				continue;
			if (calls[i].rc == CM_OK) {
				pthread_mutex_lock(&rp->mu);
				if (calls[i].ckp > rs->ckp[i])
					rs->ckp[i] = calls[i].ckp;
				pthread_mutex_unlock(&rp->mu);
				continue;
			}
			if (!((in_sync >> i) & 1)) {
				/* A copy in recovery: it retries on its own. */
				pthread_mutex_lock(&rp->mu);
				rs->tracking &= ~(1ull << i);
				pthread_mutex_unlock(&rp->mu);
				continue;
			}
			if (calls[i].stale) {
				cm_warn("cluster",
				        "[%s][%d] copy on [%s] refused primary term %" PRIu64
				        " (%s): this node is no longer the primary",
				        name, shard, cl->nodes[i].name, r.term, calls[i].why);
				fail_all(res, res, n, CM_EUNAVAIL,
				         "[%s][%d] this primary was deposed (%s); retry", name,
				         shard, calls[i].why);
				goto out;
			}
			/* Not acknowledged until the master took the copy out. */
			cm_error e;
			cm_error_clear(&e);
			cJSON *b = shard_msg(cl, ix, shard, i, r.term, cl->nodes[cl->self].name);
			cJSON_AddStringToObject(b, "reason", calls[i].why);
			cm_err mrc = ask_master(cl, "shard_failed", b, &e);
			cJSON_Delete(b);
			if (mrc) {
				cm_warn(
				    "cluster",
				    "[%s][%d] replica on [%s] failed (%s) and the master could not "
				    "remove it (%s): not acknowledging",
				    name, shard, cl->nodes[i].name, calls[i].why, e.reason);
				fail_all(
				    res, res, n, CM_EUNAVAIL,
				    "[%s][%d] replica on [%s] failed (%s) and could not be removed "
				    "from the in-sync set (%s)",
				    name, shard, cl->nodes[i].name, calls[i].why, e.reason);
				goto out;
			}
			in_sync &= ~(1ull << i);
		}
	}
	/* Global checkpoint: the lowest local checkpoint of the in-sync copies. */
	{
		st_shard_stats_get(nd_index_shard(ix, shard), &st);
		pthread_mutex_lock(&rp->mu);
		int64_t g = gcp_of(cl, rs, in_sync, seq_i(st.local_checkpoint));
		bool moved = g > rs->gcp;
		if (moved)
			rs->gcp = g;
		pthread_mutex_unlock(&rp->mu);
		if (moved)
			st_shard_set_global_checkpoint(nd_index_shard(ix, shard), (uint64_t)g);
	}
out:
	pthread_rwlock_unlock(&rs->lock);
	cm_free(MEM, rops);
	return rc;
}

/* ---------------------------------------------------------------- */
/* replica side                                                      */

void
cl_rep_serve_replica(nd_cluster *cl, nd_index *ix, const void *rqp, cm_buf *reply)
{
	const pr_bulk_req *rq = rqp;
	cl_route r;
	int shard = (int)rq->shard;
	if (cl_route_get(cl, nd_index_name(ix), shard, &r)) {
		if (rq->index_uuid[0] && strcmp(rq->index_uuid, nd_index_uuid(ix)) != 0) {
			pr_bulk_reply_encode(NULL, 0, CM_ECONFLICT,
			                     "index uuid differs: the index was re-created", reply);
			return;
		}
		if (rq->primary_term < r.term ||
		    (r.primary == cl->self && rq->primary_term <= r.term)) {
			char why[256];
			snprintf(why, sizeof(why),
			         "stale primary term %" PRIu64
			         " from [%s]: [%s][%d] is in term %" PRIu64
			         " with its primary on [%s]",
			         rq->primary_term, rq->source_node ? rq->source_node : "?",
			         nd_index_name(ix), shard, r.term,
			         r.primary >= 0 ? cl->nodes[r.primary].name : "?");
			pr_bulk_reply_encode(NULL, 0, CM_ECONFLICT, why, reply);
			return;
		}
	}
	st_op_result *res = cm_calloc(MEM, rq->nops + 1, sizeof(st_op_result));
	cm_err rc = rq->nops ? cl_apply_replica(cl, ix, shard, rq->ops, rq->nops, res) : CM_OK;
	st_shard *s = nd_index_shard(ix, shard);
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	if (!rc && rq->global_checkpoint != ST_NO_SEQ)
		st_shard_set_global_checkpoint(s, rq->global_checkpoint);
	pr_bulk_reply_encode_ckp(res, rq->nops, rc, rc ? cm_err_msg(rc) : NULL,
	                         rc ? ST_NO_SEQ : st.local_checkpoint, reply);
	cm_free(MEM, res);
}

/* ---------------------------------------------------------------- */
/* recovery: the primary's side                                      */

bool
cl_rep_is_rec_action(const char *action)
{
	return strncmp(action, "rec_", 4) == 0;
}

typedef struct hist_ctx {
	const cJSON *cur; /* next [seq, term] pair of the copy's history, ascending */
	bool ok;
} hist_ctx;

static int
hist_cmp(void *ctx, const st_op *op, int64_t version)
{
	hist_ctx *h = ctx;
	(void)version;
	if (!h->cur)
		return 1; /* past the copy's history */
	uint64_t s = (uint64_t)h->cur->child->valuedouble;
	uint64_t t = (uint64_t)h->cur->child->next->valuedouble;
	if (s > op->seq_no)
		return 0;
	if (s < op->seq_no) {
		h->ok = false; /* the copy has an op this log lacks */
		return 1;
	}
	h->cur = h->cur->next;
	if (t != op->primary_term) {
		h->ok = false;
		return 1;
	}
	return 0;
}

/* Whether the copy's history above `from` agrees with this log. The
 * history is walked as a list: it can hold 200,000 pairs. */
static bool
history_agrees(st_shard *s, int64_t from, const cJSON *hist)
{
	const cJSON *p;
	cJSON_ArrayForEach(p, hist)
	{
		if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2 || !cJSON_IsNumber(p->child) ||
		    !cJSON_IsNumber(p->child->next))
			return false;
	}
	hist_ctx h = {hist ? hist->child : NULL, true};
	if (!h.cur)
		return true;
	if (st_shard_oplog_read(s, seq_u(from), hist_cmp, &h))
		return false;
	return h.ok && h.cur == NULL;
}

/* Retention markers, one per recovering copy: the primary's log keeps
 * every op above the lowest, so what a copy still needs is not trimmed.
 * A copy that starts again replaces its own marker (one that never comes
 * back leaves its marker until this node restarts). from = INT64_MAX
 * clears the target's marker. */
static void
retain(cl_repl *rp, rep_shard *rs, nd_index *ix, int shard, int target, int64_t from)
{
	pthread_mutex_lock(&rp->mu);
	rs->rec_from[target] = from;
	int64_t low = INT64_MAX;
	for (int i = 0; i < ND_CL_MAX_NODES; i++)
		if (rs->rec_from[i] < low)
			low = rs->rec_from[i];
	rs->retain_from = low;
	pthread_mutex_unlock(&rp->mu);
	st_shard_set_oplog_retention(nd_index_shard(ix, shard), low == INT64_MAX ? ST_NO_SEQ
	                                                        : low < 0        ? 0
	                                                                         : (uint64_t)low);
}

typedef struct ops_ctx {
	st_op *ops;
	size_t n, cap, bytes;
	cm_buf strs;
	size_t max;
} ops_ctx;

typedef struct op_str {
	size_t id_off, src_off;
} op_str;

static int
collect_op(void *ctx, const st_op *op, int64_t version)
{
	ops_ctx *c = ctx;
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 256;
		c->ops = cm_realloc(MEM, c->ops, c->cap * sizeof(st_op));
	}
	st_op o = *op;
	o.version = version;
	/* Strings go to one buffer; pointers are fixed up after it stops growing. */
	o.id = (const char *)(uintptr_t)c->strs.len;
	cm_buf_put(&c->strs, op->id, op->id_len);
	o.source = (const char *)(uintptr_t)c->strs.len;
	if (op->source_len)
		cm_buf_put(&c->strs, op->source, op->source_len);
	o.if_seq_no = ST_NO_SEQ;
	o.if_primary_term = 0;
	o.create_only = false;
	c->ops[c->n++] = o;
	c->bytes += op->id_len + op->source_len + 64;
	return c->n >= c->max || (c->max != SIZE_MAX && c->bytes >= (8u << 20));
}

static void
ops_fix(ops_ctx *c)
{
	for (size_t i = 0; i < c->n; i++) {
		c->ops[i].id = (const char *)c->strs.data + (uintptr_t)c->ops[i].id;
		c->ops[i].source = (const char *)c->strs.data + (uintptr_t)c->ops[i].source;
	}
}

static bool
snap_name_ok(const char *s)
{
	if (!*s || strlen(s) > 200)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
			return false;
	return true;
}

static void
reply_json(cJSON *j, char **out, size_t *out_len)
{
	char *s = cJSON_PrintUnformatted(j);
	*out = cm_strdup(MEM, s);
	*out_len = strlen(s);
	cJSON_free(s);
}

void
cl_rep_serve_rec(nd_cluster *cl, const char *action, const char *index, const char *body,
                 size_t len, cm_error *err, char **out, size_t *out_len)
{
	cl_repl *rp = R(cl);
	cJSON *b = cJSON_ParseWithLength(body ? body : "", len);
	nd_index *ix = NULL;
	cl_route r;
	*out = NULL;
	*out_len = 0;

	if (!b) {
		cm_error_set(err, CM_EPARSE, "malformed recovery request");
		return;
	}
	if (strcmp(action, "rec_file") == 0) {
		/* A chunk of a snapshot file: raw bytes. */
		const char *snap = str_of(b, "snapshot"), *name = str_of(b, "name");
		uint64_t off = num(b, "offset"), want = num(b, "length");
		char path[1600];
		if (!snap_name_ok(snap) || !snap_name_ok(name) || want > REC_CHUNK) {
			cm_error_set(err, CM_EINVAL, "bad snapshot file request");
			goto done;
		}
		snap_root(cl, path, sizeof(path));
		size_t pl = strlen(path);
		snprintf(path + pl, sizeof(path) - pl, "/%s/%s", snap, name);
		FILE *f = fopen(path, "rb");
		if (!f) {
			cm_error_set(err, CM_ENOTFOUND, "snapshot file [%s/%s] is gone", snap,
			             name);
			goto done;
		}
		char *buf = cm_malloc(MEM, want + 1);
		size_t got = 0;
		if (fseeko(f, (off_t)off, SEEK_SET) == 0)
			got = fread(buf, 1, want, f);
		fclose(f);
		*out = buf;
		*out_len = got;
		goto done;
	}
	if (strcmp(action, "rec_release") == 0) {
		const char *snap = str_of(b, "snapshot");
		char path[1600];
		if (snap_name_ok(snap)) {
			snap_root(cl, path, sizeof(path));
			size_t pl = strlen(path);
			snprintf(path + pl, sizeof(path) - pl, "/%s", snap);
			cm_rm_rf(path);
		}
		goto done;
	}

	if (!(ix = nd_index_get(cl->node, index))) {
		cm_error_set(err, CM_ENOINDEX, "no such index [%s]", index);
		goto done;
	}
	int shard = (int)num(b, "shard");
	int target = node_by_name(cl, str_of(b, "node"));
	if (shard < 0 || shard >= nd_index_nshards(ix) || target < 0 || target == cl->self ||
	    strcmp(str_of(b, "uuid"), nd_index_uuid(ix)) != 0) {
		cm_error_set(err, CM_EINVAL, "bad recovery request for [%s]", index);
		goto done;
	}
	if (!cl_route_get(cl, index, shard, &r) || r.primary != cl->self ||
	    !atomic_load(&rp->joined)) {
		cm_error_set(err, CM_EUNAVAIL, "[%s][%d] primary is not on [%s]", index, shard,
		             cl->nodes[cl->self].name);
		goto done;
	}
	st_shard *s = nd_index_shard(ix, shard);
	rep_shard *rs = rep_get(cl, ix, shard);
	uint64_t bit = 1ull << target;

	if (strcmp(action, "rec_start") == 0) {
		int64_t gcp = seq_i(num(b, "gcp") ? num(b, "gcp") - 1 : ST_NO_SEQ);
		int64_t ckp = seq_i(num(b, "ckp") ? num(b, "ckp") - 1 : ST_NO_SEQ);
		bool force_file = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "force_file"));
		/* From now on every new op also goes to the copy; what came before
		 * it pulls from the log, or gets with the files. */
		pthread_rwlock_wrlock(&rs->lock);
		pthread_mutex_lock(&rp->mu);
		rs->tracking |= bit;
		pthread_mutex_unlock(&rp->mu);
		pthread_rwlock_unlock(&rs->lock);
		cJSON *rep = cJSON_CreateObject();
		bool ops = !force_file &&
		           history_agrees(s, gcp, cJSON_GetObjectItemCaseSensitive(b, "history"));
		if (ops) {
			/* The log must still hold everything above the copy's checkpoint. */
			ops_ctx probe = {.max = 1};
			cm_buf_init(&probe.strs, MEM);
			ops = st_shard_oplog_read(s, seq_u(ckp), collect_op, &probe) == CM_OK;
			cm_free(MEM, probe.ops);
			cm_buf_free(&probe.strs);
		}
		if (ops) {
			retain(rp, rs, ix, shard, target, ckp);
			cJSON_AddStringToObject(rep, "mode", "ops");
		} else {
			char snap[128], path[1600];
			uint64_t maxseq = ST_NO_SEQ;
			pthread_mutex_lock(&rp->mu);
			uint64_t id = ++rp->snap_seq;
			pthread_mutex_unlock(&rp->mu);
			snprintf(snap, sizeof(snap), "%s-%d-%s-%" PRIu64, nd_index_uuid(ix), shard,
			         cl->nodes[target].name, id);
			snap_root(cl, path, sizeof(path));
			cm_mkdir_p(path);
			size_t pl = strlen(path);
			snprintf(path + pl, sizeof(path) - pl, "/%s", snap);
			/* Keep the log above the snapshot until the copy has replayed it. */
			st_shard_stats st;
			st_shard_stats_get(s, &st);
			retain(rp, rs, ix, shard, target, seq_i(st.local_checkpoint));
			if (st_shard_snapshot(s, path, &maxseq, err)) {
				retain(rp, rs, ix, shard, target, INT64_MAX);
				cJSON_Delete(rep);
				goto done;
			}
			char **names = NULL;
			size_t nn = 0;
			cJSON *files = cJSON_AddArrayToObject(rep, "files");
			if (st_shard_dir_files(path, &names, &nn) == CM_OK) {
				for (size_t i = 0; i < nn; i++) {
					char fp[1900];
					struct stat sb;
					snprintf(fp, sizeof(fp), "%s/%s", path, names[i]);
					cJSON *f = cJSON_CreateObject();
					cJSON_AddStringToObject(f, "name", names[i]);
					cJSON_AddNumberToObject(
					    f, "size", stat(fp, &sb) == 0 ? (double)sb.st_size : 0);
					cJSON_AddItemToArray(files, f);
				}
				st_shard_dir_files_free(names, nn);
			}
			cJSON_AddStringToObject(rep, "mode", "file");
			cJSON_AddStringToObject(rep, "snapshot", snap);
		}
		cJSON_AddNumberToObject(rep, "term", (double)r.term);
		reply_json(rep, out, out_len);
		cJSON_Delete(rep);
	} else if (strcmp(action, "rec_ops") == 0) {
		int64_t from = seq_i(num(b, "from") ? num(b, "from") - 1 : ST_NO_SEQ);
		ops_ctx c = {.max = REC_OPS_BATCH};
		cm_buf enc;
		cm_buf_init(&c.strs, MEM);
		cm_buf_init(&enc, MEM);
		if (st_shard_oplog_read(s, seq_u(from), collect_op, &c)) {
			cm_error_set(err, CM_ENOTFOUND,
			             "[%s][%d] log no longer holds operations above %" PRId64,
			             index, shard, from);
		} else {
			ops_fix(&c);
			pr_bulk_req rq = {.index = (char *)index,
			                  .index_uuid = (char *)nd_index_uuid(ix),
			                  .shard = (uint32_t)shard,
			                  .ops = c.ops,
			                  .nops = c.n,
			                  .replica = true,
			                  .primary_term = r.term,
			                  .global_checkpoint = seq_u(rs->gcp),
			                  .source_node = cl->nodes[cl->self].name};
			pr_bulk_req_encode(&rq, &enc);
			*out = cm_malloc(MEM, enc.len + 1);
			memcpy(*out, enc.data, enc.len);
			*out_len = enc.len;
		}
		cm_free(MEM, c.ops);
		cm_buf_free(&c.strs);
		cm_buf_free(&enc);
	} else if (strcmp(action, "rec_finalize") == 0) {
		/* Under the write lock nothing new is numbered: send the copy
		 * whatever it still lacks, then have the master count it in. */
		int64_t ckp = seq_i(num(b, "ckp") ? num(b, "ckp") - 1 : ST_NO_SEQ);
		ops_ctx c = {.max = SIZE_MAX};
		fwd_call calls[ND_CL_MAX_NODES];
		cm_buf_init(&c.strs, MEM);
		pthread_rwlock_wrlock(&rs->lock);
		cl_route_get(cl, index, shard, &r);
		if (r.primary != cl->self) {
			cm_error_set(err, CM_EUNAVAIL, "primary moved");
		} else if (st_shard_oplog_read(s, seq_u(ckp), collect_op, &c)) {
			cm_error_set(err, CM_ENOTFOUND, "log trimmed during the recovery");
		} else {
			ops_fix(&c);
			memset(calls, 0, sizeof(calls));
			if (c.n)
				forward(cl, ix, shard, c.ops, c.n, r.term, rs->gcp, bit,
				        cm_now_ns() + rp->replica_ns, calls);
			if (c.n && calls[target].rc) {
				cm_error_set(err, CM_EUNAVAIL, "final operations not applied: %s",
				             calls[target].why);
			} else {
				cJSON *m = shard_msg(cl, ix, shard, target, r.term,
				                     cl->nodes[cl->self].name);
				if (ask_master(cl, "shard_started", m, err) == CM_OK) {
					st_shard_stats st;
					st_shard_stats_get(s, &st);
					pthread_mutex_lock(&rp->mu);
					rs->ckp[target] = c.n ? calls[target].ckp : ckp;
					pthread_mutex_unlock(&rp->mu);
					cJSON *rep = cJSON_CreateObject();
					cJSON_AddNumberToObject(rep, "ops", (double)c.n);
					reply_json(rep, out, out_len);
					cJSON_Delete(rep);
				}
				cJSON_Delete(m);
			}
		}
		pthread_mutex_lock(&rp->mu);
		rs->tracking &= ~bit;
		pthread_mutex_unlock(&rp->mu);
		retain(rp, rs, ix, shard, target, INT64_MAX);
		pthread_rwlock_unlock(&rs->lock);
		cm_free(MEM, c.ops);
		cm_buf_free(&c.strs);
	} else if (strcmp(action, "rec_cancel") == 0) {
		pthread_mutex_lock(&rp->mu);
		rs->tracking &= ~bit;
		pthread_mutex_unlock(&rp->mu);
		retain(rp, rs, ix, shard, target, INT64_MAX);
	} else {
		cm_error_set(err, CM_EINVAL, "unknown recovery action [%s]", action);
	}
done:
	if (ix)
		nd_index_release(ix);
	cJSON_Delete(b);
}

/* ---------------------------------------------------------------- */
/* recovery: the copy's side (one at a time, on its own thread)      */

typedef struct rec_job {
	nd_cluster *cl;
	char index[256];
	int shard;
	int primary;
} rec_job;

/* Sends a recovery request to the primary; the reply body is binary. */
static cm_err
rec_call(nd_cluster *cl, int primary, const char *action, const char *index, cJSON *body,
         char **rbody, size_t *rlen, cm_error *err)
{
	cm_buf req, rep;
	uint32_t type;
	cm_error remote;
	char *text = cJSON_PrintUnformatted(body);
	cm_buf_init(&req, MEM);
	cm_buf_init(&rep, MEM);
	pr_admin_encode(action, index, text, strlen(text), &req);
	cJSON_free(text);
	cm_err rc = nd_peer_call_sync(cl->nodes[primary].peer, PR_ADMIN, req.data, req.len,
	                              cm_now_ns() + 60000000000ull, &type, &rep);
	cm_error_clear(&remote);
	*rbody = NULL;
	*rlen = 0;
	if (rc)
		rc = cm_error_set(err, rc, "primary [%s] did not answer %s: %s",
		                  cl->nodes[primary].name, action, cm_err_msg(rc));
	else if (pr_ack_decode(rep.data, rep.len, &remote, rbody, rlen) && !remote.code)
		rc = cm_error_set(err, CM_EPARSE, "malformed %s reply", action);
	else if (remote.code) {
		*err = remote;
		rc = remote.code;
	}
	cm_buf_free(&req);
	cm_buf_free(&rep);
	return rc;
}

typedef struct hist_build {
	cJSON *arr;
	int n;
} hist_build;

static int
hist_add(void *ctx, const st_op *op, int64_t version)
{
	hist_build *h = ctx;
	(void)version;
	cJSON *p = cJSON_CreateArray();
	cJSON_AddItemToArray(p, cJSON_CreateNumber((double)op->seq_no));
	cJSON_AddItemToArray(p, cJSON_CreateNumber((double)op->primary_term));
	cJSON_AddItemToArray(h->arr, p);
	return ++h->n >= REC_HISTORY_MAX;
}

static cJSON *
rec_body(nd_cluster *cl, nd_index *ix, int shard)
{
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "uuid", nd_index_uuid(ix));
	cJSON_AddNumberToObject(b, "shard", shard);
	cJSON_AddStringToObject(b, "node", cl->nodes[cl->self].name);
	return b;
}

/* Sequence numbers travel as n + 1 so 0 means none. */
static double
seq_wire(uint64_t v)
{
	return v == ST_NO_SEQ ? 0 : (double)v + 1;
}

static cm_err
rec_files(nd_cluster *cl, rec_job *j, nd_index *ix, const cJSON *rep, uint64_t *bytes,
          cm_error *err)
{
	cl_repl *rp = R(cl);
	char dir[1400];
	const char *snap = str_of(rep, "snapshot");
	const cJSON *files = cJSON_GetObjectItemCaseSensitive(rep, "files"), *f;
	cm_err rc = CM_OK;
	incoming_dir(cl, nd_index_uuid(ix), j->shard, dir, sizeof(dir));
	cm_rm_rf(dir);
	if (cm_mkdir_p(dir))
		return cm_error_set(err, CM_EIO, "cannot create %s", dir);
	uint64_t t0 = cm_now_ns(), sent = 0;
	cJSON_ArrayForEach(f, files)
	{
		const char *name = str_of(f, "name");
		uint64_t size = num(f, "size");
		char path[1700];
		if (!snap_name_ok(name))
			return cm_error_set(err, CM_EINVAL, "bad file name from the primary");
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		FILE *out = fopen(path, "wb");
		if (!out)
			return cm_error_set(err, CM_EIO, "cannot write %s: %s", path,
			                    strerror(errno));
		for (uint64_t off = 0; off < size && !rc;) {
			cJSON *q = cJSON_CreateObject();
			char *data = NULL;
			size_t got = 0;
			cJSON_AddStringToObject(q, "snapshot", snap);
			cJSON_AddStringToObject(q, "name", name);
			cJSON_AddNumberToObject(q, "offset", (double)off);
			cJSON_AddNumberToObject(
			    q, "length", (double)(size - off < REC_CHUNK ? size - off : REC_CHUNK));
			rc = rec_call(cl, j->primary, "rec_file", j->index, q, &data, &got, err);
			cJSON_Delete(q);
			if (!rc && got == 0)
				rc =
				    cm_error_set(err, CM_EIO, "snapshot file %s ended early", name);
			if (!rc && fwrite(data, 1, got, out) != got)
				rc = cm_error_set(err, CM_EIO, "cannot write %s", path);
			cm_free(MEM, data);
			off += got;
			sent += got;
			rec_log_set(cl, NULL, NULL, 0, got, 0, false, false);
			/* Throttle: searches and writes go on while files stream. */
			uint64_t due =
			    t0 + (uint64_t)((double)sent * 1e9 / (double)rp->rec_bytes_per_s);
			uint64_t now = cm_now_ns();
			if (due > now)
				usleep((useconds_t)((due - now) / 1000));
		}
		if (fflush(out) || fsync(fileno(out)))
			rc = rc ? rc : cm_error_set(err, CM_EIO, "cannot sync %s", path);
		fclose(out);
		if (rc)
			return rc;
		rec_log_set(cl, NULL, NULL, 1, 0, 0, false, false);
	}
	*bytes = sent;
	if ((rc = st_shard_reset_from(nd_index_shard(ix, j->shard), dir, err)))
		return rc;
	cm_rm_rf(dir);
	return CM_OK;
}

/* Pulls the primary's ops above this copy's checkpoint, batch after
 * batch. It moves on from the last op pulled, not from the checkpoint: a
 * primary promoted with a gap in its history (ops of the old primary that
 * never reached it, never acknowledged) leaves the same gap here, and the
 * checkpoint stays below it. */
static cm_err
rec_pull_ops(nd_cluster *cl, rec_job *j, nd_index *ix, uint64_t *nops, cm_error *err)
{
	st_shard *s = nd_index_shard(ix, j->shard);
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	uint64_t from = st.local_checkpoint;
	for (;;) {
		char *data = NULL;
		size_t len = 0;
		pr_bulk_req rq;
		cJSON *q = rec_body(cl, ix, j->shard);
		cJSON_AddNumberToObject(q, "from", seq_wire(from));
		cm_err rc = rec_call(cl, j->primary, "rec_ops", j->index, q, &data, &len, err);
		cJSON_Delete(q);
		if (rc)
			return rc;
		rc = pr_bulk_req_decode(data, len, &rq, err);
		cm_free(MEM, data);
		if (rc)
			return rc;
		size_t n = rq.nops;
		if (n) {
			st_op_result *res = cm_calloc(MEM, n, sizeof(st_op_result));
			rc = cl_apply_replica(cl, ix, j->shard, rq.ops, n, res);
			for (size_t i = 0; i < n && !rc; i++)
				if (res[i].err)
					rc = cm_error_set(err, res[i].err,
					                  "op %" PRIu64 " not applied: %s",
					                  rq.ops[i].seq_no, res[i].reason);
			cm_free(MEM, res);
			if (!rc && rq.ops[n - 1].seq_no != ST_NO_SEQ &&
			    (from == ST_NO_SEQ || rq.ops[n - 1].seq_no > from))
				from = rq.ops[n - 1].seq_no;
			else if (!rc)
				rc = cm_error_set(err, CM_EINTERNAL,
				                  "the primary's log went backwards at %" PRIu64,
				                  from);
		}
		if (!rc && rq.global_checkpoint != ST_NO_SEQ)
			st_shard_set_global_checkpoint(s, rq.global_checkpoint);
		pr_bulk_req_free(&rq);
		if (rc)
			return rc;
		*nops += n;
		rec_log_set(cl, NULL, NULL, 0, 0, n, false, false);
		/* A short batch: what is left is small and finalize sends it
		 * under the primary's lock (a copy chasing a busy primary's tail
		 * batch by batch might never catch it). */
		if (n < REC_OPS_BATCH)
			return CM_OK;
	}
}

static void *
rec_main(void *arg)
{
	rec_job *j = arg;
	nd_cluster *cl = j->cl;
	cl_repl *rp = R(cl);
	cm_error err;
	nd_index *ix = nd_index_get(cl->node, j->index);
	char *data = NULL;
	size_t len = 0;
	cJSON *rep = NULL;
	uint64_t nops = 0, bytes = 0;
	bool started = false;
	cm_err rc = CM_OK;

	cm_error_clear(&err);
	if (!ix)
		goto out;
	uint64_t t0 = cm_now_ns();
	rec_log_new(cl, j->index, j->shard, cl->nodes[j->primary].name);
	st_shard *s = nd_index_shard(ix, j->shard);
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	cJSON *q = rec_body(cl, ix, j->shard);
	cJSON_AddNumberToObject(q, "gcp", seq_wire(st.global_checkpoint));
	cJSON_AddNumberToObject(q, "ckp", seq_wire(st.local_checkpoint));
	cJSON_AddNumberToObject(q, "max_seq", seq_wire(st.max_seq_no));
	hist_build h = {cJSON_AddArrayToObject(q, "history"), 0};
	if (st.max_seq_no != ST_NO_SEQ &&
	    (st.global_checkpoint == ST_NO_SEQ || st.max_seq_no > st.global_checkpoint) &&
	    (st_shard_oplog_read(s, st.global_checkpoint, hist_add, &h) || h.n >= REC_HISTORY_MAX))
		cJSON_AddBoolToObject(q, "force_file", true);
	rc = rec_call(cl, j->primary, "rec_start", j->index, q, &data, &len, &err);
	cJSON_Delete(q);
	if (rc)
		goto out;
	started = true;
	rep = cJSON_ParseWithLength(data ? data : "", len);
	if (!rep) {
		rc = cm_error_set(&err, CM_EPARSE, "malformed rec_start reply");
		goto out;
	}
	bool file = strcmp(str_of(rep, "mode"), "file") == 0;
	cm_info("cluster", "[%s][%d] recovering from [%s]: %s-based (checkpoint %" PRId64 ")",
	        j->index, j->shard, cl->nodes[j->primary].name, file ? "file" : "ops",
	        seq_i(st.local_checkpoint));
	rec_log_set(cl, file ? "file_based" : "ops_based", file ? "index" : "translog", 0, 0, 0,
	            false, false);
	if (file) {
		rc = rec_files(cl, j, ix, rep, &bytes, &err);
		cJSON *rel = cJSON_CreateObject();
		char *d2 = NULL;
		size_t l2;
		cm_error e2;
		cJSON_AddStringToObject(rel, "snapshot", str_of(rep, "snapshot"));
		rec_call(cl, j->primary, "rec_release", j->index, rel, &d2, &l2, &e2);
		cm_free(MEM, d2);
		cJSON_Delete(rel);
		if (rc)
			goto out;
		rec_log_set(cl, NULL, "translog", 0, 0, 0, false, false);
	}
	if ((rc = rec_pull_ops(cl, j, ix, &nops, &err)))
		goto out;
	rec_log_set(cl, NULL, "finalize", 0, 0, 0, false, false);
	cm_free(MEM, data);
	data = NULL;
	st_shard_stats_get(s, &st);
	q = rec_body(cl, ix, j->shard);
	cJSON_AddNumberToObject(q, "ckp", seq_wire(st.local_checkpoint));
	rc = rec_call(cl, j->primary, "rec_finalize", j->index, q, &data, &len, &err);
	cJSON_Delete(q);
	started = false; /* finalize releases the primary's side either way */
	if (rc)
		goto out;
	rec_log_set(cl, NULL, "done", 0, 0, 0, true, false);
	/* The master's publish may not reach us (its dialer reconnects on a
	 * backoff): learn the in-sync set now, not at the next poll. */
	if (cl->master != cl->self)
		cl_fetch_state(cl);
	cm_info("cluster",
	        "[%s][%d] recovered from [%s] in %.2fs: %s, %" PRIu64 " ops, %" PRIu64 " bytes",
	        j->index, j->shard, cl->nodes[j->primary].name, (double)(cm_now_ns() - t0) / 1e9,
	        file ? "file-based" : "ops-based", nops, bytes);
out:
	if (rc) {
		cm_warn("cluster", "[%s][%d] recovery from [%s] failed: %s", j->index, j->shard,
		        cl->nodes[j->primary].name, err.reason[0] ? err.reason : cm_err_msg(rc));
		rec_log_set(cl, NULL, NULL, 0, 0, 0, true, true);
		if (started && ix) {
			cJSON *c = rec_body(cl, ix, j->shard);
			char *d2 = NULL;
			size_t l2;
			cm_error e2;
			rec_call(cl, j->primary, "rec_cancel", j->index, c, &d2, &l2, &e2);
			cm_free(MEM, d2);
			cJSON_Delete(c);
		}
		pthread_mutex_lock(&rp->mu);
		rp->next_rec_ns = cm_now_ns() + 2000000000ull;
		pthread_mutex_unlock(&rp->mu);
	}
	cm_free(MEM, data);
	cJSON_Delete(rep);
	if (ix)
		nd_index_release(ix);
	cm_free(MEM, j);
	atomic_store(&rp->rec_busy, false);
	return NULL;
}

/* Starts the recovery of the first local copy that needs one. */
static void
maybe_recover(nd_cluster *cl)
{
	cl_repl *rp = R(cl);
	if (atomic_load(&rp->rec_busy) || cm_now_ns() < rp->next_rec_ns)
		return;
	if (rp->rec_running) {
		pthread_join(rp->rec_thread, NULL);
		rp->rec_running = false;
	}
	rec_job *pick = NULL;
	pthread_rwlock_rdlock(&rp->route_lock);
	for (size_t i = 0; i < rp->nroutes && !pick; i++) {
		for (int s = 0; s < rp->routes[i].nshards && !pick; s++) {
			const cl_route *ro = &rp->routes[i].shards[s];
			bool mine = false;
			for (int c = 0; c < ro->ncopies; c++)
				mine |= ro->copies[c] == cl->self;
			if (!mine || ro->primary < 0 || ro->primary == cl->self ||
			    ((ro->in_sync >> cl->self) & 1) || !cl_alive(cl, ro->primary))
				continue;
			pick = cm_calloc(MEM, 1, sizeof(*pick));
			pick->cl = cl;
			snprintf(pick->index, sizeof(pick->index), "%s", rp->routes[i].name);
			pick->shard = s;
			pick->primary = ro->primary;
		}
	}
	pthread_rwlock_unlock(&rp->route_lock);
	if (!pick)
		return;
	atomic_store(&rp->rec_busy, true);
	if (pthread_create(&rp->rec_thread, NULL, rec_main, pick)) {
		atomic_store(&rp->rec_busy, false);
		cm_free(MEM, pick);
		return;
	}
	rp->rec_running = true;
}

/* Primary, when writes stop: the last batch's replies raised the global
 * checkpoint, but the copies learn it only with the next batch. An empty
 * batch tells them, so their logs can be trimmed and a restart recovers
 * from an up-to-date point. */
static void
gcp_sync(nd_cluster *cl)
{
	cl_repl *rp = R(cl);
	rep_shard *list[256];
	int n = 0;
	pthread_mutex_lock(&rp->mu);
	for (rep_shard *s = rp->reps; s && n < 256; s = s->next)
		list[n++] = s;
	pthread_mutex_unlock(&rp->mu);
	for (int i = 0; i < n; i++) {
		rep_shard *rs = list[i];
		cl_route r;
		nd_index *ix = nd_index_get(cl->node, rs->index);
		if (!ix)
			continue;
		if (strcmp(nd_index_uuid(ix), rs->uuid) != 0 ||
		    !cl_route_get(cl, rs->index, rs->shard, &r) || r.primary != cl->self ||
		    pthread_rwlock_tryrdlock(&rs->lock) != 0) {
			nd_index_release(ix);
			continue;
		}
		st_shard_stats st;
		st_shard_stats_get(nd_index_shard(ix, rs->shard), &st);
		uint64_t in_sync = r.in_sync & ~(1ull << cl->self);
		pthread_mutex_lock(&rp->mu);
		int64_t g =
		    rs->term == r.term ? gcp_of(cl, rs, in_sync, seq_i(st.local_checkpoint)) : NONE;
		if (g > rs->gcp)
			rs->gcp = g;
		g = rs->gcp;
		bool send = g > rs->gcp_sent && in_sync;
		if (send)
			rs->gcp_sent = g;
		pthread_mutex_unlock(&rp->mu);
		if (g >= 0)
			st_shard_set_global_checkpoint(nd_index_shard(ix, rs->shard), (uint64_t)g);
		if (send) {
			fwd_call calls[ND_CL_MAX_NODES];
			memset(calls, 0, sizeof(calls));
			forward(cl, ix, rs->shard, NULL, 0, r.term, g, in_sync,
			        cm_now_ns() + 2000000000ull, calls);
		}
		pthread_rwlock_unlock(&rs->lock);
		nd_index_release(ix);
	}
}

bool
cl_rep_joined(nd_cluster *cl)
{
	return atomic_load(&R(cl)->joined);
}

bool
cl_node_joined(nd_cluster *cl, int i)
{
	if (i == cl->self)
		return cl_rep_joined(cl);
	uint64_t b = atomic_load(&cl->nodes[i].boot);
	return b != 0 && b == atomic_load(&cl->nodes[i].boot_joined);
}

void
cl_rep_tick(nd_cluster *cl)
{
	cl_repl *rp = R(cl);
	if (!atomic_load(&rp->joined) && cl->master >= 0 && cl_alive(cl, cl->master)) {
		cm_error err;
		cm_error_clear(&err);
		cJSON *b = cJSON_CreateObject();
		char boot[32];
		snprintf(boot, sizeof(boot), "%" PRIx64, atomic_load(&cl->nodes[cl->self].boot));
		cJSON_AddStringToObject(b, "node", cl->nodes[cl->self].name);
		cJSON_AddStringToObject(b, "boot", boot);
		if (ask_master(cl, "node_join", b, &err) == CM_OK) {
			atomic_store(&rp->joined, true);
			if (cl->master != cl->self)
				cl_fetch_state(cl);
		} else
			cm_warn("cluster", "cannot join through the master yet: %s", err.reason);
		cJSON_Delete(b);
	}
	if (cl->master == cl->self) {
		pthread_mutex_lock(&cl->meta_lock);
		if (failover_locked(cl))
			cl_state_commit_locked(cl);
		pthread_mutex_unlock(&cl->meta_lock);
	}
	if (atomic_load(&rp->joined) && cl->nodes[cl->self].data) {
		maybe_recover(cl);
		gcp_sync(cl);
	}
}
