/* The tasks API over the whole cluster: GET /_tasks, GET /_tasks/{id},
 * POST /_tasks/{id}/_cancel. A task (by-query operations and reindex)
 * lives in memory on the node that runs it; the others reach it through
 * the coordinator upcall (nd_upcall_all: every node asked at once). A
 * task started with wait_for_completion=false also writes its document
 * to the `.tasks` index, once when it starts (completed: false) and once
 * when it ends (with its response or error), as Elasticsearch does: its
 * result outlives the node, and a task whose node died before it ended
 * reads as failed (the node answers but no longer runs it) or 404 (the
 * node is gone), never as running for ever. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "co_doc.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define CO_TASKS_KEEP 1000
#define CO_TASKS_INDEX ".tasks"
#define CO_TASKS_MAX_NODES 256
#define CO_TASKS_WAIT_MS (30 * 1000) /* wait_for_completion's default timeout */

struct co_task {
	uint64_t num;
	nd_node *node;
	char action[96];
	char desc[512];
	int64_t start_ms;
	uint64_t start_ns;
	_Atomic bool cancelled;
	bool completed, failed; /* under g_lock */
	co_task_status st;      /* under g_lock */
	char *response;         /* JSON, when completed */
	bool stored;            /* wait_for_completion=false: kept in .tasks */
	struct co_task *next;
};

/* g_lock is a leaf: never held across a write, a read of .tasks or a call
 * to another node. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static co_task *g_tasks;
static uint64_t g_seq;
static int g_detached; /* running without a waiting request */
static _Atomic bool g_stopping;
/* node ids of the cluster's nodes (by node number) as their answers said */
static char g_peer_ids[CO_TASKS_MAX_NODES][64];

co_task *
co_task_new(nd_node *n, const char *action, const char *desc)
{
	co_task *t = cm_calloc(MEM, 1, sizeof(*t));
	snprintf(t->action, sizeof(t->action), "%s", action);
	snprintf(t->desc, sizeof(t->desc), "%s", desc);
	t->node = n;
	t->start_ms = cm_wall_ms();
	t->start_ns = cm_now_ns();
	pthread_mutex_lock(&g_lock);
	/* numbers grow across restarts too (the node id stays), so an id read
	 * back from .tasks never names a later task */
	t->num = ++g_seq;
	if (t->num < (uint64_t)t->start_ms)
		t->num = g_seq = (uint64_t)t->start_ms;
	t->next = g_tasks;
	g_tasks = t;
	/* drop the oldest finished tasks past the limit */
	size_t done = 0;
	for (co_task **pp = &g_tasks; *pp;) {
		co_task *x = *pp;
		if (x->completed && ++done > CO_TASKS_KEEP) {
			*pp = x->next;
			cm_free(MEM, x->response);
			cm_free(MEM, x);
		} else {
			pp = &x->next;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return t;
}

void
co_task_id(const co_task *t, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s:%llu", nd_node_id(t->node), (unsigned long long)t->num);
}

bool
co_task_cancelled(co_task *t)
{
	return atomic_load(&t->cancelled) || atomic_load(&g_stopping);
}

bool
co_task_stopping(co_task *t)
{
	return !atomic_load(&t->cancelled) && atomic_load(&g_stopping);
}

void
co_task_update(co_task *t, const co_task_status *st)
{
	pthread_mutex_lock(&g_lock);
	t->st = *st;
	pthread_mutex_unlock(&g_lock);
}

/* ---- rendering ---- */

/* g_lock held. */
static cJSON *
task_json(const co_task *t, bool detailed)
{
	cJSON *j = cJSON_CreateObject(), *s, *r;
	cJSON_AddStringToObject(j, "node", nd_node_id(t->node));
	cJSON_AddNumberToObject(j, "id", (double)t->num);
	cJSON_AddStringToObject(j, "type", "transport");
	cJSON_AddStringToObject(j, "action", t->action);
	if (detailed) {
		s = cJSON_AddObjectToObject(j, "status");
		cJSON_AddNumberToObject(s, "total", (double)t->st.total);
		cJSON_AddNumberToObject(s, "updated", (double)t->st.updated);
		cJSON_AddNumberToObject(s, "created", (double)t->st.created);
		cJSON_AddNumberToObject(s, "deleted", (double)t->st.deleted);
		cJSON_AddNumberToObject(s, "batches", (double)t->st.batches);
		cJSON_AddNumberToObject(s, "version_conflicts", (double)t->st.version_conflicts);
		cJSON_AddNumberToObject(s, "noops", (double)t->st.noops);
		cJSON_AddNumberToObject(s, "failures", (double)t->st.failures);
		r = cJSON_AddObjectToObject(s, "retries");
		cJSON_AddNumberToObject(r, "bulk", 0);
		cJSON_AddNumberToObject(r, "search", 0);
		cJSON_AddNumberToObject(s, "throttled_millis", (double)t->st.throttled_ms);
		cJSON_AddNumberToObject(s, "requests_per_second", t->st.requests_per_second);
		cJSON_AddNumberToObject(s, "throttled_until_millis", 0);
		if (atomic_load(&t->cancelled))
			cJSON_AddStringToObject(s, "canceled", "by user request");
		cJSON_AddStringToObject(j, "description", t->desc);
	}
	cJSON_AddNumberToObject(j, "start_time_in_millis", (double)t->start_ms);
	cJSON_AddNumberToObject(j, "running_time_in_nanos", (double)(cm_now_ns() - t->start_ns));
	cJSON_AddBoolToObject(j, "cancellable", true);
	cJSON_AddBoolToObject(j, "cancelled", atomic_load(&t->cancelled));
	cJSON_AddObjectToObject(j, "headers");
	return j;
}

/* {"completed", "task", "response"|"error"}: the document GET /_tasks/{id}
 * answers and .tasks keeps. g_lock held. */
static cJSON *
result_json(const co_task *t)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "completed", t->completed);
	cJSON_AddItemToObject(j, "task", task_json(t, true));
	if (t->completed) {
		cJSON *resp = cJSON_Parse(t->response ? t->response : "{}");
		cJSON *inner = cJSON_DetachItemFromObjectCaseSensitive(resp, "error");
		if (t->failed && inner) { /* the error object, not {"error":..,"status"} */
			cJSON_Delete(resp);
			resp = inner;
		} else {
			cJSON_Delete(inner);
		}
		cJSON_AddItemToObject(j, t->failed ? "error" : "response",
		                      resp ? resp : cJSON_CreateObject());
	}
	return j;
}

/* ---- the .tasks index ---- */

static cm_err
tasks_index(nd_node *n, bool create, nd_index **out, cm_error *err)
{
	nd_cluster *cl = nd_cluster_of(n);
	if ((*out = nd_index_get(n, CO_TASKS_INDEX)) || !create)
		return *out ? CM_OK : cm_error_set(err, CM_ENOINDEX, "no such index [.tasks]");
	/* one shard, a replica when there is a node for it; the documents are
	 * kept, not indexed (ES maps them the same way) */
	int replicas = cl && nd_cluster_nnodes(cl) > 1 ? 1 : 0;
	char body[512];
	snprintf(body, sizeof(body),
	         "{\"settings\":{\"number_of_shards\":1,\"number_of_replicas\":%d},"
	         "\"mappings\":{\"dynamic\":false,\"properties\":{"
	         "\"completed\":{\"type\":\"boolean\"},"
	         "\"task\":{\"type\":\"object\",\"enabled\":false},"
	         "\"response\":{\"type\":\"object\",\"enabled\":false},"
	         "\"error\":{\"type\":\"object\",\"enabled\":false}}}}",
	         replicas);
	cm_err rc;
	if (cl) {
		char *reply = NULL;
		rc = nd_cluster_meta(cl, ND_META_CREATE, CO_TASKS_INDEX, body, &reply, err);
		cm_free(CM_MEM_NODE, reply);
	} else {
		cJSON *b = cJSON_Parse(body);
		rc = nd_index_create(n, CO_TASKS_INDEX, b, out, err);
		cJSON_Delete(b);
		if (*out)
			nd_index_release(*out);
		*out = NULL;
	}
	if (rc == CM_EEXISTS) { /* created meanwhile */
		cm_error_clear(err);
		rc = CM_OK;
	}
	if (rc)
		return rc;
	if (!(*out = nd_index_get(n, CO_TASKS_INDEX)))
		return cm_error_set(err, CM_EUNAVAIL,
		                    "index [.tasks] was created but is not here yet");
	return CM_OK;
}

/* Writes t's document to .tasks; a shard held unavailable (a node's
 * pings lag just after a restart) is tried again for up to ~3 s. */
static cm_err
store(co_task *t, cm_error *err)
{
	nd_index *ix = NULL;
	st_op op;
	st_op_result res;
	char id[96];
	cm_err rc;

	pthread_mutex_lock(&g_lock);
	cJSON *doc = result_json(t);
	pthread_mutex_unlock(&g_lock);
	cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(doc, "task"), "node_name",
	                        nd_node_name(t->node));
	char *src = cJSON_PrintUnformatted(doc);
	cJSON_Delete(doc);
	co_task_id(t, id, sizeof(id));
	if (!src)
		return cm_error_set(err, CM_ENOMEM, "cannot render task [%s]", id);
	for (int attempt = 0;; attempt++) {
		cm_error_clear(err);
		rc = tasks_index(t->node, true, &ix, err);
		if (!rc) {
			memset(&op, 0, sizeof(op));
			op.type = ST_OP_INDEX;
			op.id = id;
			op.id_len = strlen(id);
			op.source = src;
			op.source_len = strlen(src);
			op.seq_no = ST_NO_SEQ;
			op.if_seq_no = ST_NO_SEQ;
			rc = co_doc_write(ix, &op, NULL, 0, NULL, &res, err);
			nd_index_release(ix);
		}
		if (rc != CM_EUNAVAIL || attempt == 15)
			break;
		struct timespec ts = {0, 200000000L};
		nanosleep(&ts, NULL);
	}
	if (rc)
		cm_warn("tasks", "task [%s]: cannot store it in .tasks: %s", id, err->reason);
	cJSON_free(src);
	return rc;
}

/* The document .tasks keeps for id, or NULL. */
static cJSON *
stored(nd_node *n, const char *id)
{
	nd_index *ix;
	cm_error err;
	st_doc_meta meta;
	cm_buf src;
	cJSON *doc = NULL;
	cm_error_clear(&err);
	if (tasks_index(n, false, &ix, &err))
		return NULL;
	cm_buf_init(&src, MEM);
	int shard = nd_index_route(ix, id, strlen(id));
	if (nd_routed_get(ix, shard, id, strlen(id), NULL, &meta, &src) == CM_OK)
		doc = cJSON_ParseWithLength((const char *)src.data, src.len);
	cm_buf_free(&src);
	nd_index_release(ix);
	return doc;
}

cm_err
co_task_detach(co_task *t, cm_error *err)
{
	pthread_mutex_lock(&g_lock);
	bool ok = !g_stopping;
	pthread_mutex_unlock(&g_lock);
	if (!ok)
		return cm_error_set_type(err, CM_EUNAVAIL, "node_closed_exception",
		                         "node [%s] is shutting down", nd_node_name(t->node));
	/* running: a node that dies from now on leaves this behind */
	cm_err rc = store(t, err);
	if (rc)
		return rc;
	pthread_mutex_lock(&g_lock);
	g_detached++;
	t->stored = true;
	pthread_mutex_unlock(&g_lock);
	return CM_OK;
}

void
co_task_finish(co_task *t, const char *response, bool failed, bool detached)
{
	pthread_mutex_lock(&g_lock);
	t->completed = true;
	t->failed = failed;
	t->response = cm_strdup(MEM, response ? response : "{}");
	bool keep = t->stored;
	pthread_mutex_unlock(&g_lock);
	cm_error err;
	if (keep)
		store(t, &err); /* before the shutdown may go on (g_detached) */
	pthread_mutex_lock(&g_lock);
	if (detached && --g_detached == 0)
		pthread_cond_broadcast(&g_cond);
	pthread_mutex_unlock(&g_lock);
}

void
co_tasks_shutdown(void)
{
	struct timespec ts;
	pthread_mutex_lock(&g_lock);
	atomic_store(&g_stopping, true); /* running tasks stop */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	while (g_detached > 0)
		if (pthread_cond_timedwait(&g_cond, &g_lock, &ts) != 0)
			break;
	if (g_detached > 0)
		cm_warn("tasks", "%d task(s) still running at shutdown", g_detached);
	pthread_mutex_unlock(&g_lock);
}

/* ---- this node's part ---- */

static bool
action_matches(const char *pattern_list, const char *action)
{
	if (!pattern_list || !*pattern_list)
		return true;
	char *copy = cm_strdup(MEM, pattern_list), *save = NULL, *tok;
	bool hit = false;
	for (tok = strtok_r(copy, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save))
		hit = fnmatch(tok, action, 0) == 0;
	cm_free(MEM, copy);
	return hit;
}

static cJSON *
self_json(nd_node *n)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "node_id", nd_node_id(n));
	cJSON_AddStringToObject(j, "name", nd_node_name(n));
	return j;
}

/* {"node_id","name","tasks":{id: task}}: the running tasks matching. */
static cJSON *
local_list(nd_node *n, const char *actions, bool detailed)
{
	cJSON *j = self_json(n), *tasks = cJSON_AddObjectToObject(j, "tasks");
	pthread_mutex_lock(&g_lock);
	for (co_task *t = g_tasks; t; t = t->next) {
		if (t->completed || !action_matches(actions, t->action))
			continue;
		char id[96];
		co_task_id(t, id, sizeof(id));
		cJSON_AddItemToObject(tasks, id, task_json(t, detailed));
	}
	pthread_mutex_unlock(&g_lock);
	return j;
}

/* Cancels the running tasks whose action matches; {"node_id","name",
 * "tasks":{id: task}} of those it cancelled. */
static cJSON *
local_cancel_matching(nd_node *n, const char *actions)
{
	cJSON *j = self_json(n), *tasks = cJSON_AddObjectToObject(j, "tasks");
	pthread_mutex_lock(&g_lock);
	for (co_task *t = g_tasks; t; t = t->next) {
		if (t->completed || !action_matches(actions, t->action))
			continue;
		atomic_store(&t->cancelled, true);
		char id[96];
		co_task_id(t, id, sizeof(id));
		cJSON_AddItemToObject(tasks, id, task_json(t, false));
	}
	pthread_mutex_unlock(&g_lock);
	return j;
}

/* {"node_id","name","known", "result"}: task num of this node; cancel
 * asks it to stop first ("completed": whether it had ended already). */
static cJSON *
local_task(nd_node *n, uint64_t num, bool cancel)
{
	cJSON *j = self_json(n);
	co_task *t;
	pthread_mutex_lock(&g_lock);
	for (t = g_tasks; t && t->num != num; t = t->next)
		;
	cJSON_AddBoolToObject(j, "known", t != NULL);
	if (t) {
		if (cancel && !t->completed)
			atomic_store(&t->cancelled, true);
		cJSON_AddItemToObject(j, "result", result_json(t));
	}
	pthread_mutex_unlock(&g_lock);
	return j;
}

cJSON *
co_tasks_upcall(nd_node *n, const char *text)
{
	cJSON *q = cJSON_Parse(text), *r = NULL;
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(q, "op");
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(q, "actions");
	const cJSON *num = cJSON_GetObjectItemCaseSensitive(q, "num");
	if (!cJSON_IsString(op))
		r = NULL;
	else if (strcmp(op->valuestring, "list") == 0)
		r = local_list(n, cJSON_IsString(a) ? a->valuestring : NULL,
		               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "detailed")));
	else if (strcmp(op->valuestring, "cancel_matching") == 0)
		r = local_cancel_matching(n, cJSON_IsString(a) ? a->valuestring : NULL);
	else if (cJSON_IsString(num) && strcmp(op->valuestring, "get") == 0)
		r = local_task(n, strtoull(num->valuestring, NULL, 10), false);
	else if (cJSON_IsString(num) && strcmp(op->valuestring, "cancel") == 0)
		r = local_task(n, strtoull(num->valuestring, NULL, 10), true);
	cJSON_Delete(q);
	return r;
}

/* ---- asking the nodes ---- */

typedef struct answers {
	int nn; /* -1: solo (one answer, this node's) */
	cJSON *out[CO_TASKS_MAX_NODES];
	cm_error errs[CO_TASKS_MAX_NODES];
} answers;

/* Sends q (an upcall request) to the nodes in which (NULL: all) at once;
 * a solo node answers itself. */
static void
ask(co_req *r, cJSON *q, const bool *which, answers *A)
{
	char *text = cJSON_PrintUnformatted(q);
	size_t len = strlen(text ? text : "{}") + 8;
	char *kind = cm_malloc(MEM, len);
	snprintf(kind, len, "tasks %s", text ? text : "{}");
	cJSON_free(text);
	A->nn = nd_upcall_all(r->node, kind, which, A->out, A->errs, CO_TASKS_MAX_NODES);
	if (A->nn < 0) {
		cm_error_clear(&A->errs[0]);
		A->out[0] = co_tasks_upcall(r->node, kind + 6);
		if (!A->out[0])
			cm_error_set(&A->errs[0], CM_EINTERNAL, "this node did not answer");
		cm_free(MEM, kind);
		return;
	}
	cm_free(MEM, kind);
	/* remember who is who, for routing by node id */
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < A->nn; i++) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(A->out[i], "node_id");
		if (cJSON_IsString(id))
			snprintf(g_peer_ids[i], sizeof(g_peer_ids[i]), "%s", id->valuestring);
	}
	pthread_mutex_unlock(&g_lock);
}

static void
answers_free(answers *A)
{
	for (int i = 0; i < (A->nn < 0 ? 1 : A->nn); i++)
		cJSON_Delete(A->out[i]);
}

static const char *
node_name_of(co_req *r, int i)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	return cl ? nd_cluster_node_name(cl, i) : nd_node_name(r->node);
}

/* ES's node_failures entry for a node that did not answer. */
static void
add_node_failure(cJSON *arr, const char *node, const cm_error *e)
{
	cJSON *f = cJSON_CreateObject(), *c;
	cJSON_AddStringToObject(f, "type", "failed_node_exception");
	char reason[600];
	snprintf(reason, sizeof(reason), "Failed node [%s]", node);
	cJSON_AddStringToObject(f, "reason", reason);
	cJSON_AddStringToObject(f, "node_id", node);
	c = cJSON_AddObjectToObject(f, "caused_by");
	cJSON_AddStringToObject(c, "type", cm_error_type(e));
	cJSON_AddStringToObject(c, "reason", e->reason[0] ? e->reason : cm_err_msg(e->code));
	cJSON_AddItemToArray(arr, f);
}

/* nodes=: does the node (name, id) match one of the comma list? */
static bool
node_matches(co_req *r, const char *sel, const char *name, const char *id)
{
	if (!sel || !*sel)
		return true;
	char *copy = cm_strdup(MEM, sel), *save = NULL, *tok;
	bool hit = false;
	for (tok = strtok_r(copy, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "_all") || !strcmp(tok, "*"))
			hit = true;
		else if (!strcmp(tok, "_local"))
			hit = !strcmp(id, nd_node_id(r->node));
		else
			hit = !fnmatch(tok, name, 0) || !fnmatch(tok, id, 0);
	}
	cm_free(MEM, copy);
	return hit;
}

static int64_t
timeout_ms(co_req *r)
{
	int64_t ms = CO_TASKS_WAIT_MS;
	const char *v = co_param_get(r, "timeout");
	if (v && !co_parse_keep_alive(r, v, &ms))
		return -1;
	return ms;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

void
co_h_tasks_list(co_req *r)
{
	const char *actions = co_param_get(r, "actions");
	const char *sel = co_param_get(r, "nodes");
	const char *group = co_param_get(r, "group_by");
	const char *parent = co_param_get(r, "parent_task_id");
	bool detailed = co_param_bool(r, "detailed", false);
	bool wait = co_param_bool(r, "wait_for_completion", false);
	int64_t wait_ms = timeout_ms(r);
	answers *A;
	bool which[CO_TASKS_MAX_NODES];
	nd_cluster *cl = nd_cluster_of(r->node);

	if (wait_ms < 0)
		return;
	if (group && strcmp(group, "nodes") && strcmp(group, "parents") && strcmp(group, "none")) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "Unknown group by [%.40s], expected one of [nodes, parents, none]",
		                group);
		return;
	}
	/* ask only the nodes named (by name, or by an id an earlier answer
	 * gave); a name or id not known yet: ask every node */
	int nn = cl ? nd_cluster_nnodes(cl) : 1;
	bool some = false;
	if (nn > CO_TASKS_MAX_NODES)
		nn = CO_TASKS_MAX_NODES;
	for (int i = 0; i < nn; i++) {
		char id[64];
		pthread_mutex_lock(&g_lock);
		snprintf(id, sizeof(id), "%s", g_peer_ids[i]);
		pthread_mutex_unlock(&g_lock);
		which[i] = node_matches(r, sel, node_name_of(r, i), id);
		some |= which[i];
	}
	if (!some)
		for (int i = 0; i < nn; i++)
			which[i] = true;
	cJSON *q = cJSON_CreateObject();
	cJSON_AddStringToObject(q, "op", "list");
	if (actions)
		cJSON_AddStringToObject(q, "actions", actions);
	cJSON_AddBoolToObject(q, "detailed", detailed);
	A = cm_calloc(MEM, 1, sizeof(*A));
	uint64_t until = cm_now_ns() + (uint64_t)wait_ms * 1000000ull;
	for (;;) {
		ask(r, q, cl ? which : NULL, A);
		if (!wait)
			break;
		/* wait_for_completion: until no matching task runs */
		size_t running = 0;
		for (int i = 0; i < (A->nn < 0 ? 1 : A->nn); i++)
			running += (size_t)cJSON_GetArraySize(
			    cJSON_GetObjectItemCaseSensitive(A->out[i], "tasks"));
		if (running == 0)
			break;
		if (cm_now_ns() >= until) {
			answers_free(A);
			cm_free(MEM, A);
			cJSON_Delete(q);
			co_reply_errorf(r, CM_ETIMEDOUT, NULL,
			                "Timed out waiting for completion of %zu task(s)", running);
			return;
		}
		answers_free(A);
		sleep_ms(100);
	}
	cJSON_Delete(q);

	cJSON *j = cJSON_CreateObject(), *fails = cJSON_CreateArray();
	cJSON *nodes = NULL, *tasks = NULL;
	if (!group || !strcmp(group, "nodes"))
		nodes = cJSON_AddObjectToObject(j, "nodes");
	else if (!strcmp(group, "parents"))
		tasks = cJSON_AddObjectToObject(j, "tasks");
	else
		tasks = cJSON_AddArrayToObject(j, "tasks");
	for (int i = 0; i < (A->nn < 0 ? 1 : A->nn); i++) {
		cJSON *o = A->out[i];
		if (A->nn >= 0 && !which[i])
			continue;
		if (!o) {
			add_node_failure(fails, node_name_of(r, i), &A->errs[i]);
			continue;
		}
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "node_id");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
		if (!cJSON_IsString(id) || !cJSON_IsString(name) ||
		    !node_matches(r, sel, name->valuestring, id->valuestring))
			continue;
		cJSON *ts = cJSON_DetachItemFromObjectCaseSensitive(o, "tasks");
		if (parent && *parent && strcmp(parent, "-1")) {
			/* no task of Shoal has a parent: none is a child of it */
			cJSON_Delete(ts);
			ts = cJSON_CreateObject();
		}
		if (nodes) {
			cJSON *e = cJSON_AddObjectToObject(nodes, id->valuestring);
			cJSON_AddStringToObject(e, "name", name->valuestring);
			cJSON_AddItemToObject(e, "tasks", ts);
			continue;
		}
		cJSON *t;
		while (ts && (t = ts->child)) {
			cJSON_DetachItemViaPointer(ts, t);
			if (cJSON_IsArray(tasks)) {
				cJSON_free(t->string);
				t->string = NULL;
				cJSON_AddItemToArray(tasks, t);
			} else {
				char *k = t->string;
				t->string = NULL;
				cJSON_AddItemToObject(tasks, k, t);
				cJSON_free(k);
			}
		}
		cJSON_Delete(ts);
	}
	if (cJSON_GetArraySize(fails))
		cJSON_AddItemToObject(j, "node_failures", fails);
	else
		cJSON_Delete(fails);
	answers_free(A);
	cm_free(MEM, A);
	co_reply_json(r, 200, j);
}

/* Splits "node:num"; false after replying 400. */
static bool
parse_id(co_req *r, const char *id, char *node, size_t cap, char *num, size_t ncap)
{
	const char *colon = id ? strrchr(id, ':') : NULL;
	char *end;
	if (colon && colon[1])
		strtoull(colon + 1, &end, 10);
	if (!colon || !colon[1] || *end || colon == id || (size_t)(colon - id) >= cap ||
	    strlen(colon + 1) >= ncap) {
		co_reply_errorf(r, CM_EINVAL, NULL, "malformed task id %.80s", id ? id : "");
		return false;
	}
	memcpy(node, id, (size_t)(colon - id));
	node[colon - id] = 0;
	snprintf(num, ncap, "%s", colon + 1);
	return true;
}

/* Asks the node owning task id (the one whose node id it names: this
 * node, a node an earlier answer named, else every node) about it.
 * Returns that node's answer ({"known", "result"}), or NULL; *reached
 * whether that node answered at all, *owner its name when known. */
static cJSON *
ask_owner(co_req *r, const char *node_id, const char *num, bool cancel, bool *reached, char *owner,
          size_t ocap)
{
	cJSON *q = cJSON_CreateObject(), *res = NULL;
	nd_cluster *cl = nd_cluster_of(r->node);
	bool which[CO_TASKS_MAX_NODES];
	int nn = cl ? nd_cluster_nnodes(cl) : 1, known = -1;
	answers *A = cm_calloc(MEM, 1, sizeof(*A));

	*reached = false;
	owner[0] = 0;
	if (nn > CO_TASKS_MAX_NODES)
		nn = CO_TASKS_MAX_NODES;
	cJSON_AddStringToObject(q, "op", cancel ? "cancel" : "get");
	cJSON_AddStringToObject(q, "num", num);
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < nn; i++)
		if (!strcmp(g_peer_ids[i], node_id))
			known = i;
	pthread_mutex_unlock(&g_lock);
	if (!strcmp(node_id, nd_node_id(r->node)) && cl) {
		for (int i = 0; i < nn; i++)
			if (!strcmp(nd_cluster_node_name(cl, i), nd_node_name(r->node)))
				known = i;
	}
	for (int i = 0; i < nn; i++)
		which[i] = known < 0 || i == known;
	if (!cl && strcmp(node_id, nd_node_id(r->node))) {
		cJSON_Delete(q);
		cm_free(MEM, A);
		return NULL; /* a solo node knows only its own tasks */
	}
	ask(r, q, cl ? which : NULL, A);
	cJSON_Delete(q);
	for (int i = 0; i < (A->nn < 0 ? 1 : A->nn); i++) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(A->out[i], "node_id");
		if (A->nn >= 0 && i == known)
			snprintf(owner, ocap, "%s", node_name_of(r, i));
		if (!cJSON_IsString(id) || strcmp(id->valuestring, node_id))
			continue;
		*reached = true;
		snprintf(owner, ocap, "%s", node_name_of(r, i));
		res = A->out[i];
		A->out[i] = NULL;
	}
	answers_free(A);
	cm_free(MEM, A);
	return res;
}

/* The answer for task id when its node no longer runs it: what .tasks
 * kept, a failure when .tasks says it was running (its node stopped
 * before it ended), or NULL. */
static cJSON *
from_store(co_req *r, const char *id, bool node_answered)
{
	cJSON *doc = stored(r->node, id);
	if (!doc || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "completed")))
		return doc;
	if (!node_answered) {
		cJSON_Delete(doc);
		return NULL; /* its node may still run it, out of reach */
	}
	const cJSON *nn = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(doc, "task"), "node_name");
	cJSON_ReplaceItemInObjectCaseSensitive(doc, "completed", cJSON_CreateTrue());
	cJSON *e = cJSON_CreateObject();
	char reason[400];
	snprintf(reason, sizeof(reason),
	         "node [%s] stopped while the task ran (it was killed: the task never ended "
	         "and stored no result)",
	         cJSON_IsString(nn) ? nn->valuestring : "?");
	cJSON_AddStringToObject(e, "type", "node_closed_exception");
	cJSON_AddStringToObject(e, "reason", reason);
	cJSON_AddItemToObject(doc, "error", e);
	return doc;
}

static void
reply_missing(co_req *r, const char *id, bool reached, const char *owner)
{
	if (reached || !nd_cluster_of(r->node))
		co_reply_errorf(r, CM_ENOTFOUND, NULL,
		                "task [%.80s] isn't running and hasn't stored its results", id);
	else if (owner[0])
		co_reply_errorf(
		    r, CM_ENOTFOUND, NULL,
		    "task [%.80s] isn't running and hasn't stored its results: its node "
		    "[%s] is not reachable",
		    id, owner);
	else
		co_reply_errorf(r, CM_ENOTFOUND, NULL,
		                "task [%.80s] isn't running and hasn't stored its results: no "
		                "reachable node has the id it names",
		                id);
}

void
co_h_task_get(co_req *r)
{
	const char *id = co_seg(r, 1);
	char node[96], num[32], owner[96];
	bool wait = co_param_bool(r, "wait_for_completion", false), reached;
	int64_t wait_ms = timeout_ms(r);
	if (wait_ms < 0 || !parse_id(r, id, node, sizeof(node), num, sizeof(num)))
		return;
	uint64_t until = cm_now_ns() + (uint64_t)wait_ms * 1000000ull;
	for (;;) {
		cJSON *a = ask_owner(r, node, num, false, &reached, owner, sizeof(owner));
		cJSON *res = NULL;
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "known")))
			res = cJSON_DetachItemFromObjectCaseSensitive(a, "result");
		cJSON_Delete(a);
		if (!res)
			res = from_store(r, id, reached);
		if (!res) {
			reply_missing(r, id, reached, owner);
			return;
		}
		if (!wait || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "completed"))) {
			co_reply_json(r, 200, res);
			return;
		}
		cJSON_Delete(res);
		if (cm_now_ns() >= until) {
			co_reply_errorf(r, CM_ETIMEDOUT, NULL,
			                "Timed out waiting for completion of task [%.80s]", id);
			return;
		}
		sleep_ms(100);
	}
}

void
co_h_task_cancel(co_req *r)
{
	const char *id = co_seg(r, 1);
	char node[96], num[32], owner[96];
	bool reached;
	co_param_get(r, "actions");
	co_param_get(r, "nodes");
	co_param_get(r, "parent_task_id");
	if (!parse_id(r, id, node, sizeof(node), num, sizeof(num)))
		return;
	cJSON *a = ask_owner(r, node, num, true, &reached, owner, sizeof(owner)), *res = NULL;
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "known")))
		res = cJSON_DetachItemFromObjectCaseSensitive(a, "result");
	if (!res)
		res = from_store(r, id, reached);
	if (!res) {
		cJSON_Delete(a);
		reply_missing(r, id, reached, owner);
		return;
	}
	cJSON *j = cJSON_CreateObject();
	bool done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "completed"));
	if (done) {
		cJSON *nf = cJSON_AddArrayToObject(j, "node_failures"), *f = cJSON_CreateObject();
		cJSON *reason = cJSON_AddObjectToObject(f, "reason");
		cJSON_AddStringToObject(f, "type", "failed_node_exception");
		cJSON_AddStringToObject(f, "node_id", node);
		cJSON_AddStringToObject(reason, "type", "illegal_state_exception");
		cJSON_AddStringToObject(reason, "reason", "task is already completed");
		cJSON_AddItemToArray(nf, f);
	} else {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(a, "name");
		cJSON *nodes = cJSON_AddObjectToObject(j, "nodes");
		cJSON *me = cJSON_AddObjectToObject(nodes, node);
		cJSON_AddStringToObject(me, "name",
		                        cJSON_IsString(name) ? name->valuestring : owner);
		cJSON *tasks = cJSON_AddObjectToObject(me, "tasks");
		cJSON *t = cJSON_DetachItemFromObjectCaseSensitive(res, "task");
		cJSON_ReplaceItemInObjectCaseSensitive(t, "cancelled", cJSON_CreateTrue());
		cJSON_AddItemToObject(tasks, id, t);
	}
	cJSON_Delete(res);
	cJSON_Delete(a);
	co_reply_json(r, 200, j);
}

/* POST /_tasks/_cancel: every running task matching actions= on the
 * nodes= named (all when neither is given, as ES), every node asked at
 * once. */
void
co_h_tasks_cancel_all(co_req *r)
{
	const char *actions = co_param_get(r, "actions");
	const char *sel = co_param_get(r, "nodes");
	const char *parent = co_param_get(r, "parent_task_id");
	nd_cluster *cl = nd_cluster_of(r->node);
	int nn = cl ? nd_cluster_nnodes(cl) : 1;
	bool which[CO_TASKS_MAX_NODES];
	if (nn > CO_TASKS_MAX_NODES)
		nn = CO_TASKS_MAX_NODES;
	for (int i = 0; i < nn; i++) {
		char id[64];
		pthread_mutex_lock(&g_lock);
		snprintf(id, sizeof(id), "%s", g_peer_ids[i]);
		pthread_mutex_unlock(&g_lock);
		/* a node whose id is not known yet is asked; its answer is
		 * filtered below (its tasks are cancelled only when it matches) */
		which[i] = !id[0] || node_matches(r, sel, node_name_of(r, i), id);
	}
	cJSON *j = cJSON_CreateObject(), *nodes = cJSON_AddObjectToObject(j, "nodes");
	cJSON *fails = cJSON_CreateArray();
	if (parent && *parent && strcmp(parent, "-1")) { /* no task has a parent */
		cJSON_Delete(fails);
		co_reply_json(r, 200, j);
		return;
	}
	answers *A = cm_calloc(MEM, 1, sizeof(*A));
	cJSON *q = cJSON_CreateObject();
	/* nodes= by id of a node not seen yet: list first, then cancel only there */
	cJSON_AddStringToObject(q, "op", sel && *sel ? "list" : "cancel_matching");
	if (actions)
		cJSON_AddStringToObject(q, "actions", actions);
	ask(r, q, cl ? which : NULL, A);
	if (sel && *sel) {
		for (int i = 0; i < (A->nn < 0 ? 1 : A->nn); i++) {
			const cJSON *id = cJSON_GetObjectItemCaseSensitive(A->out[i], "node_id");
			const cJSON *nm = cJSON_GetObjectItemCaseSensitive(A->out[i], "name");
			if (A->nn >= 0)
				which[i] = which[i] && cJSON_IsString(id) && cJSON_IsString(nm) &&
				           node_matches(r, sel, nm->valuestring, id->valuestring);
		}
		answers_free(A);
		memset(A, 0, sizeof(*A));
		cJSON_ReplaceItemInObjectCaseSensitive(q, "op",
		                                       cJSON_CreateString("cancel_matching"));
		bool any = false;
		for (int i = 0; i < nn; i++)
			any |= which[i];
		if (cl && any)
			ask(r, q, which, A);
		else if (!cl && node_matches(r, sel, nd_node_name(r->node), nd_node_id(r->node)))
			ask(r, q, NULL, A);
		else
			A->nn = 0;
	}
	cJSON_Delete(q);
	for (int i = 0; i < (A->nn < 0 ? 1 : A->nn); i++) {
		cJSON *o = A->out[i];
		if (A->nn >= 0 && !which[i])
			continue;
		if (!o) {
			if (A->nn >= 0 || A->errs[i].code)
				add_node_failure(fails, node_name_of(r, i), &A->errs[i]);
			continue;
		}
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "node_id");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
		cJSON *ts = cJSON_DetachItemFromObjectCaseSensitive(o, "tasks");
		if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_GetArraySize(ts)) {
			cJSON_Delete(ts);
			continue;
		}
		cJSON *e = cJSON_AddObjectToObject(nodes, id->valuestring);
		cJSON_AddStringToObject(e, "name", name->valuestring);
		cJSON_AddItemToObject(e, "tasks", ts);
	}
	if (cJSON_GetArraySize(fails))
		cJSON_AddItemToObject(j, "node_failures", fails);
	else
		cJSON_Delete(fails);
	answers_free(A);
	cm_free(MEM, A);
	co_reply_json(r, 200, j);
}
