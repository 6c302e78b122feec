/* The tasks of this node (by-query operations and reindex): GET /_tasks,
 * GET /_tasks/{id}, POST /_tasks/{id}/_cancel. Tasks live in memory on the
 * node that runs them; a finished task keeps its response (the last
 * CO_TASKS_KEEP finished ones) so that it can be read after
 * wait_for_completion=false. */
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
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define CO_TASKS_KEEP 1000

struct co_task {
	uint64_t num;
	char action[96];
	char desc[512];
	int64_t start_ms;
	uint64_t start_ns;
	_Atomic bool cancelled;
	bool completed, failed; /* under g_lock */
	co_task_status st;      /* under g_lock */
	char *response;         /* JSON, when completed */
	bool detached;
	struct co_task *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static co_task *g_tasks;
static uint64_t g_seq;
static int g_detached; /* running without a waiting request */
static bool g_stopping;
static char g_node_id[64];

co_task *
co_task_new(nd_node *n, const char *action, const char *desc)
{
	co_task *t = cm_calloc(MEM, 1, sizeof(*t));
	snprintf(t->action, sizeof(t->action), "%s", action);
	snprintf(t->desc, sizeof(t->desc), "%s", desc);
	t->start_ms = cm_wall_ms();
	t->start_ns = cm_now_ns();
	pthread_mutex_lock(&g_lock);
	snprintf(g_node_id, sizeof(g_node_id), "%s", nd_node_id(n));
	t->num = ++g_seq;
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
	snprintf(buf, cap, "%s:%llu", g_node_id, (unsigned long long)t->num);
}

bool
co_task_cancelled(co_task *t)
{
	return atomic_load(&t->cancelled) || g_stopping;
}

void
co_task_update(co_task *t, const co_task_status *st)
{
	pthread_mutex_lock(&g_lock);
	t->st = *st;
	pthread_mutex_unlock(&g_lock);
}

bool
co_task_detach(void)
{
	pthread_mutex_lock(&g_lock);
	bool ok = !g_stopping;
	if (ok)
		g_detached++;
	pthread_mutex_unlock(&g_lock);
	return ok;
}

void
co_task_finish(co_task *t, const char *response, bool failed, bool detached)
{
	pthread_mutex_lock(&g_lock);
	t->completed = true;
	t->failed = failed;
	t->response = cm_strdup(MEM, response ? response : "{}");
	if (detached && --g_detached == 0)
		pthread_cond_broadcast(&g_cond);
	pthread_mutex_unlock(&g_lock);
}

void
co_tasks_shutdown(void)
{
	struct timespec ts;
	pthread_mutex_lock(&g_lock);
	g_stopping = true; /* every running task sees itself cancelled */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	while (g_detached > 0)
		if (pthread_cond_timedwait(&g_cond, &g_lock, &ts) != 0)
			break;
	if (g_detached > 0)
		cm_warn("tasks", "%d task(s) still running at shutdown", g_detached);
	pthread_mutex_unlock(&g_lock);
}

/* g_lock held. */
static cJSON *
task_json(const co_task *t)
{
	cJSON *j = cJSON_CreateObject(), *s, *r;
	char id[96];
	co_task_id(t, id, sizeof(id));
	cJSON_AddStringToObject(j, "node", g_node_id);
	cJSON_AddNumberToObject(j, "id", (double)t->num);
	cJSON_AddStringToObject(j, "type", "transport");
	cJSON_AddStringToObject(j, "action", t->action);
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
	cJSON_AddNumberToObject(j, "start_time_in_millis", (double)t->start_ms);
	cJSON_AddNumberToObject(j, "running_time_in_nanos", (double)(cm_now_ns() - t->start_ns));
	cJSON_AddBoolToObject(j, "cancellable", true);
	cJSON_AddBoolToObject(j, "cancelled", atomic_load(&t->cancelled));
	cJSON_AddObjectToObject(j, "headers");
	return j;
}

/* The task named "node:num" (g_lock held), or NULL after replying. */
static co_task *
find_task(co_req *r, const char *id)
{
	const char *colon = id ? strrchr(id, ':') : NULL;
	char *end;
	unsigned long long num = colon ? strtoull(colon + 1, &end, 10) : 0;
	if (!colon || !colon[1] || *end) {
		co_reply_errorf(r, CM_EINVAL, NULL, "malformed task id %.80s", id ? id : "");
		return NULL;
	}
	if ((size_t)(colon - id) != strlen(g_node_id) ||
	    strncmp(id, g_node_id, strlen(g_node_id))) {
		co_reply_errorf(
		    r, CM_ENOTFOUND, NULL,
		    "task [%.80s] isn't running and hasn't stored its results (tasks are "
		    "kept by the node that runs them: ask that node)",
		    id);
		return NULL;
	}
	for (co_task *t = g_tasks; t; t = t->next)
		if (t->num == num)
			return t;
	co_reply_errorf(r, CM_ENOTFOUND, NULL,
	                "task [%.80s] isn't running and hasn't stored its results", id);
	return NULL;
}

static bool
action_matches(const char *pattern_list, const char *action)
{
	if (!pattern_list || !*pattern_list)
		return true;
	char *copy = cm_strdup(MEM, pattern_list), *save = NULL, *tok;
	bool hit = false;
	for (tok = strtok_r(copy, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save)) {
		hit = fnmatch(tok, action, 0) == 0;
	}
	cm_free(MEM, copy);
	return hit;
}

void
co_h_tasks_list(co_req *r)
{
	const char *actions = co_param_get(r, "actions");
	cJSON *j = cJSON_CreateObject(), *nodes = cJSON_AddObjectToObject(j, "nodes"), *me, *tasks;
	co_param_get(r, "detailed");
	co_param_get(r, "group_by");
	co_param_get(r, "nodes");
	co_param_get(r, "parent_task_id");
	co_param_get(r, "wait_for_completion");
	co_param_get(r, "timeout");
	me = cJSON_AddObjectToObject(nodes, nd_node_id(r->node));
	cJSON_AddStringToObject(me, "name", nd_node_name(r->node));
	tasks = cJSON_AddObjectToObject(me, "tasks");
	pthread_mutex_lock(&g_lock);
	for (co_task *t = g_tasks; t; t = t->next) {
		if (t->completed || !action_matches(actions, t->action))
			continue;
		char id[96];
		co_task_id(t, id, sizeof(id));
		cJSON_AddItemToObject(tasks, id, task_json(t));
	}
	pthread_mutex_unlock(&g_lock);
	co_reply_json(r, 200, j);
}

void
co_h_task_get(co_req *r)
{
	const char *id = co_seg(r, 1);
	co_param_get(r, "wait_for_completion");
	co_param_get(r, "timeout");
	pthread_mutex_lock(&g_lock);
	co_task *t = find_task(r, id);
	if (!t) {
		pthread_mutex_unlock(&g_lock);
		return;
	}
	cJSON *j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "completed", t->completed);
	cJSON_AddItemToObject(j, "task", task_json(t));
	if (t->completed) {
		cJSON *resp = cJSON_Parse(t->response);
		cJSON_AddItemToObject(j, t->failed ? "error" : "response",
		                      resp ? resp : cJSON_CreateObject());
	}
	pthread_mutex_unlock(&g_lock);
	co_reply_json(r, 200, j);
}

void
co_h_task_cancel(co_req *r)
{
	const char *id = co_seg(r, 1);
	pthread_mutex_lock(&g_lock);
	co_task *t = find_task(r, id);
	if (!t) {
		pthread_mutex_unlock(&g_lock);
		return;
	}
	cJSON *j = cJSON_CreateObject();
	if (t->completed) {
		cJSON *nf = cJSON_AddArrayToObject(j, "node_failures"), *f = cJSON_CreateObject();
		cJSON *reason = cJSON_AddObjectToObject(f, "reason");
		cJSON_AddStringToObject(f, "type", "failed_node_exception");
		cJSON_AddStringToObject(reason, "type", "illegal_state_exception");
		cJSON_AddStringToObject(reason, "reason", "task is already completed");
		cJSON_AddItemToArray(nf, f);
	} else {
		atomic_store(&t->cancelled, true);
		cJSON *nodes = cJSON_AddObjectToObject(j, "nodes");
		cJSON *me = cJSON_AddObjectToObject(nodes, nd_node_id(r->node));
		cJSON_AddStringToObject(me, "name", nd_node_name(r->node));
		cJSON *tasks = cJSON_AddObjectToObject(me, "tasks");
		char tid[96];
		co_task_id(t, tid, sizeof(tid));
		cJSON_AddItemToObject(tasks, tid, task_json(t));
	}
	pthread_mutex_unlock(&g_lock);
	co_reply_json(r, 200, j);
}
