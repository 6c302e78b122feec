/* The node: data directory lock, node metadata, pools, refresh timer. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "nd_private.h"
#include "nd_reqcache.h"

/* Takes DATA/node.lock with flock: the kernel drops it when the process
 * dies, so a kill -9 never leaves a stale lock behind. */
static cm_err
take_lock(nd_node *n, cm_error *err)
{
	char path[PATH_MAX], pid[32];
	int fd;

	snprintf(path, sizeof(path), "%s/node.lock", n->data_dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return cm_error_set(err, CM_EIO, "cannot open lock file %s: %s", path,
		                    strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		ssize_t r = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[r > 0 ? r : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		close(fd);
		return cm_error_set(
		    err, CM_EBUSY,
		    "data directory %s is in use by another shoal node (pid %s holds %s)",
		    n->data_dir, pid[0] ? pid : "?", path);
	}
	if (ftruncate(fd, 0) == 0) {
		int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
		if (pwrite(fd, pid, (size_t)len, 0) != len)
			cm_warn("node", "cannot write pid to %s", path);
	}
	n->lock_fd = fd;
	return CM_OK;
}

/* DATA/node.json keeps the node id and cluster uuid stable across restarts. */
static cm_err
load_node_meta(nd_node *n, cm_error *err)
{
	char path[PATH_MAX], *text = NULL;
	size_t len;
	cJSON *root;
	const cJSON *a, *b;

	snprintf(path, sizeof(path), "%s/node.json", n->data_dir);
	if (cm_file_read(path, 1 << 20, &text, &len) == CM_OK) {
		root = cJSON_ParseWithLength(text, len);
		cm_free(CM_MEM_COMMON, text);
		a = cJSON_GetObjectItemCaseSensitive(root, "node_id");
		b = cJSON_GetObjectItemCaseSensitive(root, "cluster_uuid");
		if (cJSON_IsString(a) && cJSON_IsString(b)) {
			snprintf(n->node_id, sizeof(n->node_id), "%s", a->valuestring);
			snprintf(n->cluster_uuid, sizeof(n->cluster_uuid), "%s", b->valuestring);
			cJSON_Delete(root);
			return CM_OK;
		}
		cJSON_Delete(root);
		return cm_error_set(err, CM_ECORRUPT, "%s is malformed", path);
	}
	nd_uuid(n->node_id);
	nd_uuid(n->cluster_uuid);
	root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "node_id", n->node_id);
	cJSON_AddStringToObject(root, "cluster_uuid", n->cluster_uuid);
	text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	cm_err rc = cm_file_write_atomic(path, text, strlen(text));
	cJSON_free(text);
	return rc ? cm_error_set(err, rc, "cannot write %s", path) : CM_OK;
}

static void *
timer_main(void *arg)
{
	nd_node *n = arg;
	uint64_t trimmed = cm_now_ns();
	pthread_mutex_lock(&n->timer_lock);
	while (!n->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L; /* 100 ms: refresh intervals are >= 1 s in practice */
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&n->timer_cond, &n->timer_lock, &ts);
		if (n->stopping)
			break;
		pthread_mutex_unlock(&n->timer_lock);
		nd_refresh_tick(n);
		nd_scroll_expire(n);
		if (cm_now_ns() - trimmed > 30000000000ull) {
			/* glibc keeps what threads freed in their arenas: after a burst
			 * of work (state changes, merges, a bulk over many indices)
			 * most of a node's RSS was free memory (300 indices, 3 nodes:
			 * 12 of 58 MB); give it back every 30 s */
			malloc_trim(0);
			trimmed = cm_now_ns();
		}
		pthread_mutex_lock(&n->timer_lock);
	}
	pthread_mutex_unlock(&n->timer_lock);
	return NULL;
}

static uint64_t request_cache_bytes(void);

cm_err
nd_node_open(const nd_node_opts *o, nd_node **out, cm_error *err)
{
	nd_node *n = cm_calloc(CM_MEM_NODE, 1, sizeof(*n));
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cm_err rc;

	n->lock_fd = -1;
	n->start_ms = cm_wall_ms();
	n->destructive_requires_name = o->destructive_requires_name;
	n->replicated = o->replicated;
	if (strlen(o->data_dir) >= sizeof(n->data_dir)) {
		cm_free(CM_MEM_NODE, n);
		return cm_error_set(err, CM_EINVAL, "data directory path is too long");
	}
	snprintf(n->data_dir, sizeof(n->data_dir), "%s", o->data_dir);
	if (o->name && *o->name) {
		snprintf(n->name, sizeof(n->name), "%s", o->name);
	} else if (gethostname(n->name, sizeof(n->name) - 1) != 0) {
		snprintf(n->name, sizeof(n->name), "shoal");
	}
	snprintf(n->cluster_name, sizeof(n->cluster_name), "shoal");
	pthread_rwlock_init(&n->reg_lock, NULL);
	pthread_mutex_init(&n->timer_lock, NULL);
	pthread_cond_init(&n->timer_cond, NULL);

	if (cm_mkdir_p(n->data_dir)) {
		rc = cm_error_set(err, CM_EIO, "cannot create data directory %s: %s", n->data_dir,
		                  strerror(errno));
		goto fail;
	}
	if ((rc = take_lock(n, err)) || (rc = load_node_meta(n, err)))
		goto fail;
	if (ncpu < 1)
		ncpu = 1;
	n->search_pool =
	    cm_pool_create(o->search_threads > 0 ? o->search_threads : (int)ncpu, "search");
	/* Merges and refreshes split their work (fields, term ranges, one
	 * segment per indexing buffer) over every core; a batch's parts too,
	 * its own thread taking one (so ncpu - 1 helpers). */
	n->merge_pool = cm_pool_create((int)ncpu, "merge");
	n->index_pool = ncpu > 1 ? cm_pool_create((int)ncpu - 1, "index") : NULL;
	n->reqcache = nd_reqcache_new(request_cache_bytes());
	if ((rc = nd_registry_load(n, err)))
		goto fail;
	if (pthread_create(&n->timer, NULL, timer_main, n) != 0) {
		rc = cm_error_set(err, CM_EINTERNAL, "cannot start the refresh timer");
		goto fail;
	}
	*out = n;
	return CM_OK;
fail:
	nd_registry_close(n);
	if (n->search_pool)
		cm_pool_destroy(n->search_pool);
	if (n->merge_pool)
		cm_pool_destroy(n->merge_pool);
	if (n->index_pool)
		cm_pool_destroy(n->index_pool);
	if (n->lock_fd >= 0)
		close(n->lock_fd);
	nd_reqcache_free(n->reqcache);
	cm_free(CM_MEM_NODE, n);
	return rc;
}

void
nd_node_close(nd_node *n)
{
	if (!n)
		return;
	pthread_mutex_lock(&n->timer_lock);
	n->stopping = true;
	pthread_cond_signal(&n->timer_cond);
	pthread_mutex_unlock(&n->timer_lock);
	pthread_join(n->timer, NULL);
	nd_ctx_close_node(n);
	cm_pool_destroy(n->search_pool);
	nd_registry_close(n);
	cm_pool_destroy(n->merge_pool);
	if (n->index_pool)
		cm_pool_destroy(n->index_pool);
	if (n->lock_fd >= 0)
		close(n->lock_fd);
	pthread_rwlock_destroy(&n->reg_lock);
	nd_reqcache_free(n->reqcache);
	cm_free(CM_MEM_NODE, n);
}

/* indices.requests.cache.size, as set with -E (0: the default, 1%). */
static _Atomic uint64_t request_cache_size;

static uint64_t
request_cache_bytes(void)
{
	uint64_t b = atomic_load(&request_cache_size);
	if (!b && !nd_reqcache_parse_size("1%", &b))
		b = 16u << 20;
	return b;
}

bool
nd_set_request_cache_size(const char *v)
{
	uint64_t b;
	if (!nd_reqcache_parse_size(v, &b))
		return false;
	atomic_store(&request_cache_size, b ? b : 1);
	return true;
}

void
nd_request_cache_stats_get(nd_node *n, const nd_index *ix, nd_request_cache_stats *out)
{
	nd_rc_stats s = {0};
	memset(out, 0, sizeof(*out));
	if (ix)
		n = ix->node;
	if (!n->reqcache)
		return;
	nd_reqcache_stats(n->reqcache, ix ? nd_index_uuid(ix) : NULL, &s);
	*out = (nd_request_cache_stats){.memory_bytes = s.memory_bytes,
	                                .evictions = s.evictions,
	                                .hits = s.hits,
	                                .misses = s.misses};
}

void
nd_request_cache_clear(nd_node *n, const nd_index *ix)
{
	if (ix)
		n = ix->node;
	if (n->reqcache)
		nd_reqcache_clear(n->reqcache, ix ? nd_index_uuid(ix) : NULL, false);
}

const char *
nd_node_name(const nd_node *n)
{
	return n->name;
}
const char *
nd_node_id(const nd_node *n)
{
	return n->node_id;
}
const char *
nd_cluster_uuid(const nd_node *n)
{
	return n->cluster_uuid;
}
const char *
nd_cluster_name(const nd_node *n)
{
	return n->cluster_name;
}
const char *
nd_data_dir(const nd_node *n)
{
	return n->data_dir;
}
bool
nd_destructive_requires_name(const nd_node *n)
{
	return n->destructive_requires_name;
}
void
nd_set_destructive_requires_name(nd_node *n, bool v)
{
	n->destructive_requires_name = v;
}

bool
nd_default_allow_partial(const nd_node *n)
{
	return !atomic_load(&((nd_node *)n)->partial_results_off);
}

void
nd_set_default_allow_partial(nd_node *n, bool v)
{
	atomic_store(&n->partial_results_off, !v);
}

int64_t
nd_start_ms(const nd_node *n)
{
	return n->start_ms;
}
nd_node_counters *
nd_counters(nd_node *n)
{
	return &n->counters;
}
