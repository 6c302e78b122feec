/* Scroll on a cluster node: the node keeps the search (its index names
 * and body) and runs each page as the same search from the next offset.
 * Pages are not a point-in-time view (a write between pages can shift
 * them), and a scroll reaches at most index.max_result_window hits; both
 * are in docs/api.md. A scroll continues on the node that started it.
 * Solo nodes keep real point-in-time scrolls (nd_scroll_*). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define MAX_CL_SCROLLS 500

typedef struct cl_scroll {
	char id[64];
	char *names; /* the indices, comma-joined */
	cJSON *body;
	uint32_t size, offset;
	int window;
	int64_t expires_ms;
	bool busy;
} cl_scroll;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cl_scroll *scrolls[MAX_CL_SCROLLS];
static uint64_t counter;

static void
scroll_free(cl_scroll *s)
{
	cm_free(MEM, s->names);
	cJSON_Delete(s->body);
	cm_free(MEM, s);
}

/* Drops expired contexts; caller holds lock. */
static void
expire_locked(int64_t now)
{
	for (int i = 0; i < MAX_CL_SCROLLS; i++)
		if (scrolls[i] && !scrolls[i]->busy && scrolls[i]->expires_ms < now) {
			scroll_free(scrolls[i]);
			scrolls[i] = NULL;
		}
}

/* One page from s->offset into out (the search's own rendering). */
static cm_err
page(co_req *r, cl_scroll *s, cm_buf *out, cm_error *err)
{
	nd_index **ixs;
	size_t n;
	cm_err rc;
	if ((uint64_t)s->offset + s->size > (uint64_t)s->window)
		return cm_error_set(err, CM_EINVAL,
		                    "a scroll on a cluster node reaches at most [%d] hits "
		                    "(index.max_result_window): this one is past it",
		                    s->window);
	if ((rc = nd_resolve(r->node, s->names, true, &ixs, &n, err)))
		return rc;
	cJSON *b = cJSON_Duplicate(s->body, true);
	cJSON_DeleteItemFromObjectCaseSensitive(b, "from");
	cJSON_AddNumberToObject(b, "from", s->offset);
	cm_err src = CM_OK;
	co_cluster_search(r, ixs, n, b, out, err, &src);
	cJSON_Delete(b);
	co_release_all(ixs, n);
	return src;
}

cm_err
co_scroll_cluster_start(co_req *r, nd_index **ixs, size_t n, cJSON *body, uint32_t size, int window,
                        int64_t keep_ms, cm_buf *out, char id[64], cm_error *err)
{
	cl_scroll *s = cm_calloc(MEM, 1, sizeof(*s));
	cm_buf names;
	cm_buf_init(&names, MEM);
	for (size_t i = 0; i < n; i++)
		cm_buf_printf(&names, "%s%s", i ? "," : "", nd_index_name(ixs[i]));
	cm_buf_put_u8(&names, 0);
	s->names = cm_strdup(MEM, (const char *)names.data);
	cm_buf_free(&names);
	s->body = cJSON_Duplicate(body, true);
	s->size = size;
	s->window = window;
	cm_err rc = page(r, s, out, err);
	if (rc) {
		scroll_free(s);
		return rc;
	}
	s->offset = size;
	int64_t now = cm_wall_ms();
	s->expires_ms = now + keep_ms;
	pthread_mutex_lock(&lock);
	expire_locked(now);
	int slot = -1;
	for (int i = 0; i < MAX_CL_SCROLLS && slot < 0; i++)
		if (!scrolls[i])
			slot = i;
	if (slot < 0) {
		pthread_mutex_unlock(&lock);
		scroll_free(s);
		return cm_error_set(
		    err, CM_EBUSY,
		    "Trying to create too many scroll contexts. Must be less than or "
		    "equal to: [%d]",
		    MAX_CL_SCROLLS);
	}
	/* "cl" marks a cluster scroll; the node name keeps ids of two nodes apart */
	snprintf(s->id, sizeof(s->id), "cl%llx%llx", (unsigned long long)(++counter),
	         (unsigned long long)(now & 0xffffffffff));
	scrolls[slot] = s;
	snprintf(id, 64, "%s", s->id);
	pthread_mutex_unlock(&lock);
	return CM_OK;
}

int
co_scroll_cluster_next(co_req *r, const char *id, int64_t keep_ms, cm_buf *out, cm_error *err)
{
	cl_scroll *s = NULL;
	int64_t now = cm_wall_ms();
	pthread_mutex_lock(&lock);
	expire_locked(now);
	for (int i = 0; i < MAX_CL_SCROLLS && !s; i++)
		if (scrolls[i] && !strcmp(scrolls[i]->id, id))
			s = scrolls[i];
	if (!s || s->busy) {
		pthread_mutex_unlock(&lock);
		if (s)
			return cm_error_set(err, CM_EBUSY, "scroll [%s] is already being read", id);
		return -1;
	}
	s->busy = true;
	pthread_mutex_unlock(&lock);
	cm_err rc = page(r, s, out, err);
	pthread_mutex_lock(&lock);
	s->busy = false;
	if (!rc) {
		s->offset += s->size;
		if (keep_ms > 0)
			s->expires_ms = now + keep_ms;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

size_t
co_scroll_cluster_clear(const char *id)
{
	size_t freed = 0;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_CL_SCROLLS; i++)
		if (scrolls[i] && !scrolls[i]->busy && (!id || !strcmp(scrolls[i]->id, id))) {
			scroll_free(scrolls[i]);
			scrolls[i] = NULL;
			freed++;
		}
	pthread_mutex_unlock(&lock);
	return freed;
}
