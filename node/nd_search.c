/* Search fan-out over local shards: every shard runs on the search pool
 * and hands its result to the merger the moment it completes (the same
 * merge stage the cluster uses for remote replies). Also counts and
 * scroll contexts, and _delete_by_query over shard snapshots. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "../proto/pr.h"
#include "nd_cluster.h"
#include "nd_private.h"
#include "nd_reqcache.h"

nd_target *
nd_targets_open(nd_index **ixs, size_t n)
{
	nd_target *t = cm_calloc(CM_MEM_NODE, n + 1, sizeof(*t));
	for (size_t i = 0; i < n; i++) {
		t[i].ix = nd_index_ref(ixs[i]);
		t[i].nshards = nd_index_nshards(ixs[i]);
		t[i].readers = cm_calloc(CM_MEM_NODE, (size_t)t[i].nshards, sizeof(st_reader *));
		for (int s = 0; s < t[i].nshards; s++)
			t[i].readers[s] = st_shard_reader(nd_index_shard(ixs[i], s));
	}
	return t;
}

void
nd_targets_close(nd_target *t, size_t n)
{
	if (!t)
		return;
	for (size_t i = 0; i < n; i++) {
		for (int s = 0; s < t[i].nshards; s++)
			if (t[i].readers[s])
				st_reader_release(t[i].readers[s]);
		cm_free(CM_MEM_NODE, t[i].readers);
		cm_free(CM_MEM_NODE, t[i].skip);
		nd_index_release(t[i].ix);
	}
	cm_free(CM_MEM_NODE, t);
}

size_t
nd_targets_only(nd_target *t, size_t n, const char *pref)
{
	size_t left = 0;
	for (size_t i = 0; i < n; i++)
		for (int s = 0; s < t[i].nshards; s++) {
			if (nd_cl_pref_shard(pref, s)) {
				left++;
				continue;
			}
			if (!t[i].skip)
				t[i].skip =
				    cm_calloc(CM_MEM_NODE, (size_t)t[i].nshards, sizeof(bool));
			t[i].skip[s] = true;
		}
	return left;
}

/* Shards of t[0..nt) searched (not left out by skip). */
static size_t
shards_searched(const nd_target *t, size_t nt)
{
	size_t total = 0;
	for (size_t i = 0; i < nt; i++)
		for (int s = 0; s < t[i].nshards; s++)
			total += !(t[i].skip && t[i].skip[s]);
	return total;
}

uint64_t
nd_index_visible_docs(nd_index *ix)
{
	nd_target *t = nd_targets_open(&ix, 1);
	uint64_t n = 0;
	for (int s = 0; s < t[0].nshards; s++)
		n += st_reader_doc_count(t[0].readers[s]);
	nd_targets_close(t, 1);
	return n;
}

/* ---- the shard request cache (nd_reqcache.h) ---- */

/* Whether the body uses date math on "now" (a string value "now", "now-1d",
 * "now/d", ...): its result changes with the clock, so ES never caches it. */
static bool
body_uses_now(const char *b, size_t n)
{
	for (const char *p = b; (p = memmem(p, n - (size_t)(p - b), "\"now", 4)); p += 4) {
		char c = p + 4 < b + n ? p[4] : '"';
		if (c == '"' || c == '+' || c == '-' || c == '/' || c == '|' || c == ' ')
			return true;
	}
	return false;
}

/* ES's rules (IndicesService.canCache): ?request_cache=false never;
 * otherwise size 0 only, and unset follows index.requests.cache.enable;
 * never a profiled request, a scroll (no cache_key) or date math on now. */
static bool
cacheable(nd_node *n, nd_index *ix, const sr_request *req)
{
	if (!n->reqcache || !req->cache_key || req->request_cache == SR_RC_FALSE ||
	    req->size != 0 || req->profile)
		return false;
	if (req->request_cache == SR_RC_UNSET && nd_index_settings(ix)->request_cache_off)
		return false;
	/* A shard's terms partial with a min_doc_count above 1 does not
	 * survive its encoding whole (the docs of buckets cut for it come back
	 * counted in sum_other_doc_count: test_terms_exact), and a cached
	 * result is the encoded one: such requests are not cached. */
	if (memmem(req->cache_key, req->cache_key_len, "\"min_doc_count\"", 15))
		return false;
	return !body_uses_now(req->cache_key, req->cache_key_len);
}

/* The cached bytes into *res (the caller's shard numbering). */
static bool
rc_decode(const cm_buf *val, const sr_request *req, uint32_t ordinal, sr_shard_result *res)
{
	sr_shard_result *arr = NULL;
	size_t nout = 0;
	pr_strings *strings = NULL;
	cm_error e;
	cm_error_clear(&e);
	if (pr_shard_results_decode(val->data, val->len, req->aggs, &arr, &nout, &strings, &e) ||
	    nout != 1) {
		for (size_t i = 0; i < nout; i++)
			sr_shard_result_free(&arr[i]);
		cm_free(CM_MEM_NODE, arr);
		pr_strings_free(strings);
		return false;
	}
	*res = arr[0];
	res->index = res->node = NULL; /* interned in strings */
	res->shard = ordinal;
	cm_free(CM_MEM_NODE, arr);
	pr_strings_free(strings);
	return true;
}

cm_err
nd_search_shard_cached(nd_index *ix, int shard, st_reader *r, uint32_t ordinal,
                       const sr_request *req, sr_hit_bar *bar, sr_shard_result *res,
                       cm_error *err)
{
	const char *ixname = nd_index_name(ix);
	nd_node *n = ix->node;
	int64_t hl_max =
	    nd_index_setting_int(ix, "highlight.max_analyzed_offset", SR_HL_MAX_ANALYZED_OFFSET);
	if (!cacheable(n, ix, req))
		return sr_search_shard_hl(r, ordinal, ixname, req, bar, hl_max, res, err);
	/* the body, then what else shapes the shard's bytes */
	cm_buf kb, val;
	cm_buf_init(&kb, CM_MEM_NODE);
	cm_buf_init(&val, CM_MEM_NODE);
	cm_buf_put(&kb, req->cache_key, req->cache_key_len);
	cm_buf_put(&kb, "", 1);
	cm_buf_printf(&kb, "%d %u", (int)req->typed_keys, ordinal);
	nd_rc_key k = {.uuid = nd_index_uuid(ix),
	               .shard = (uint32_t)shard,
	               .gen = st_reader_generation(r),
	               .req = kb.data,
	               .req_len = kb.len};
	cm_err rc = CM_OK;
	if (nd_reqcache_get(n->reqcache, &k, &val) && rc_decode(&val, req, ordinal, res))
		goto done;
	memset(res, 0, sizeof(*res));
	rc = sr_search_shard_hl(r, ordinal, ixname, req, bar, hl_max, res, err);
	if (rc || res->timed_out || res->error.code || res->profile)
		goto done;
	/* A miss answers from the bytes it stores, as a hit will (ES reads the
	 * cached bytes back on a miss too): the same trimmed partials. */
	cm_buf_reset(&val);
	sr_shard_result *one = res;
	if (pr_shard_results_encode(&one, 1, &val))
		goto done;
	sr_shard_result copy;
	if (rc_decode(&val, req, ordinal, &copy)) {
		nd_reqcache_put(n->reqcache, &k, val.data, val.len);
		sr_shard_result_free(res);
		*res = copy;
	}
done:
	cm_buf_free(&kb);
	cm_buf_free(&val);
	return rc;
}

typedef struct shard_task {
	nd_target *target;
	int shard;        /* within the index */
	uint32_t ordinal; /* across the whole request: the merger's shard number */
	const sr_request *req;
	const char *node_id; /* for profile ids */
	sr_merger *merger;
	pthread_mutex_t *merge_lock;
	sr_hit_bar *bar; /* the merge's worst kept hit, for shards still to run */
	/* count mode */
	const sr_query *count_query;
	uint64_t deadline_ns;
	uint64_t count;
	cm_error err;
	cm_err rc;
} shard_task;

static void
run_search_shard(void *arg)
{
	shard_task *t = arg;
	sr_shard_result res;
	cm_error err;
	uint64_t t0 = cm_now_ns();

	memset(&res, 0, sizeof(res));
	cm_error_clear(&err);
	const char *ixname = nd_index_name(t->target->ix);
	cm_err rc = nd_search_shard_cached(t->target->ix, t->shard, t->target->readers[t->shard],
	                                   t->ordinal, t->req, t->bar, &res, &err);
	if (!rc)
		sr_profile_set_id(&res, t->node_id, ixname, t->shard);
	nd_index_count_search(t->target->ix, t->req, cm_now_ns() - t0, !rc, false);
	pthread_mutex_lock(t->merge_lock);
	if (rc) {
		if (!err.code)
			cm_error_set(&err, rc, "%s", cm_err_msg(rc));
		sr_merger_fail(t->merger, t->ordinal, &err);
		sr_shard_result_free(&res);
		t->rc = rc;
		t->err = err;
	} else {
		res.shard = t->ordinal;
		res.index = nd_index_name(t->target->ix);
		sr_merger_add(t->merger, &res);
		if (t->bar)
			sr_merger_bar(t->merger, t->bar);
	}
	pthread_mutex_unlock(t->merge_lock);
}

size_t
nd_search_helpers(uint64_t docs, size_t nshards)
{
	if (nshards < 2)
		return 0;
	uint64_t k = docs / ND_DOCS_PER_HELPER;
	return k < nshards - 1 ? (size_t)k : nshards - 1;
}

/* Helpers worth waking for the shards of tasks[0..n): by their live docs. */
static size_t
task_helpers(const shard_task *tasks, size_t n)
{
	uint64_t docs = 0;
	for (size_t i = 0; i < n; i++)
		docs += st_reader_doc_count(tasks[i].target->readers[tasks[i].shard]);
	return nd_search_helpers(docs, n);
}

/* The fetch phase of one shard: its hits on the page. */
typedef struct fetch_job {
	st_reader *reader;
	const sr_request *req;
	sr_hit **hits;
	size_t n;
	cm_err rc;
	cm_error err;
} fetch_job;

static void
run_fetch(void *arg)
{
	fetch_job *j = arg;
	cm_error_clear(&j->err);
	j->rc = sr_fetch_hits(j->reader, j->req, j->hits, j->n, &j->err);
}

static int
by_shard(const void *a, const void *b)
{
	const sr_hit *x = *(sr_hit *const *)a, *y = *(sr_hit *const *)b;
	return (x->shard > y->shard) - (x->shard < y->shard);
}

/* Query then fetch: the page's hits, merged from the shards' query
 * phase, get their documents from their shards (tasks[ordinal]). */
static cm_err
fetch_page(nd_node *n, shard_task *tasks, size_t ntasks, sr_merger *m, const sr_request *req,
           cm_error *err)
{
	size_t nh = sr_merger_page_len(m), njobs = 0;
	if (!nh)
		return CM_OK;
	sr_hit **hits = cm_malloc(CM_MEM_NODE, nh * sizeof(*hits));
	for (size_t i = 0; i < nh; i++)
		hits[i] = sr_merger_page_at(m, i);
	qsort(hits, nh, sizeof(*hits), by_shard);
	fetch_job *jobs = cm_calloc(CM_MEM_NODE, nh, sizeof(*jobs));
	for (size_t i = 0; i < nh;) {
		size_t e = i;
		while (e < nh && hits[e]->shard == hits[i]->shard)
			e++;
		shard_task *t = &tasks[hits[i]->shard < ntasks ? hits[i]->shard : 0];
		jobs[njobs++] = (fetch_job){
		    .reader = t->target->readers[t->shard], .req = req, .hits = hits + i, .n = e - i};
		i = e;
	}
	cm_pool_run_some(n->search_pool, run_fetch, jobs, sizeof(*jobs), njobs,
	                 nh / ND_HITS_PER_HELPER);
	cm_err rc = CM_OK;
	for (size_t i = 0; i < njobs && !rc; i++)
		if ((rc = jobs[i].rc) && err)
			*err = jobs[i].err;
	cm_free(CM_MEM_NODE, jobs);
	cm_free(CM_MEM_NODE, hits);
	return rc;
}

static shard_task *
make_tasks(nd_target *t, size_t nt, size_t *ntasks)
{
	size_t total = 0, k = 0;
	shard_task *tasks;

	total = shards_searched(t, nt);
	tasks = cm_calloc(CM_MEM_NODE, total + 1, sizeof(*tasks));
	for (size_t i = 0; i < nt; i++)
		for (int s = 0; s < t[i].nshards; s++) {
			if (t[i].skip && t[i].skip[s])
				continue;
			tasks[k].target = &t[i];
			tasks[k].shard = s;
			tasks[k].ordinal = (uint32_t)k;
			k++;
		}
	*ntasks = total;
	return tasks;
}

cm_err
nd_search(nd_node *n, nd_target *t, size_t nt, const sr_request *req, cm_buf *out, cm_error *err)
{
	return nd_search_fanout(n, t, nt, req, ND_FANOUT_PER_SHARD, out, err);
}

cm_err
nd_search_fanout(nd_node *n, nd_target *t, size_t nt, const sr_request *req, nd_fanout mode,
                 cm_buf *out, cm_error *err)
{
	size_t ntasks;
	shard_task *tasks;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

	/* A bounded queue, as ES's search thread pool: past it, 429. */
	size_t total = shards_searched(t, nt);
	if (atomic_fetch_add(&n->search_queued, total) + total > ND_SEARCH_QUEUE) {
		atomic_fetch_sub(&n->search_queued, total);
		atomic_fetch_add((_Atomic uint64_t *)&n->counters.search_rejected, 1);
		return cm_error_set(
		    err, CM_EBUSY,
		    "rejected execution of search: the search queue (capacity %d) is "
		    "full",
		    ND_SEARCH_QUEUE);
	}
	tasks = make_tasks(t, nt, &ntasks);
	uint64_t t0 = cm_now_ns();
	sr_merger *m = sr_merger_create(req, ntasks);
	sr_hit_bar bar = {0};
	/* Several shards: query then fetch, the page's documents only. The
	 * copy shares the request's parts and is never freed. */
	sr_request query_phase;
	const sr_request *shard_req = req;
	bool deferred = ntasks > 1 && sr_fetch_deferrable(req);
	if (deferred) {
		query_phase = *req;
		query_phase.query_phase_only = true;
		shard_req = &query_phase;
	}

	for (size_t i = 0; i < ntasks; i++) {
		tasks[i].bar = &bar;
		tasks[i].req = shard_req;
		tasks[i].node_id = nd_node_id(n);
		tasks[i].merger = m;
		tasks[i].merge_lock = &lock;
	}
	/* One shard, or serial: no hand-off to the pool, it only adds
	 * latency; else this thread takes shards too, beside idle workers
	 * of the pool when the shards hold enough docs to pay their wake-up.
	 * Shards run by this thread alone go in order, each seeing the hits
	 * merged before it (the bar). */
	cm_pool_run_some(mode == ND_FANOUT_SERIAL ? NULL : n->search_pool, run_search_shard, tasks,
	                 sizeof(*tasks), ntasks, task_helpers(tasks, ntasks));
	/* All shards failing is an error for the request, like ES's
	 * search_phase_execution_exception; some failing is a partial result. */
	size_t failed = 0;
	cm_err rc = CM_OK;
	for (size_t i = 0; i < ntasks; i++)
		if (tasks[i].rc) {
			failed++;
			if (!rc) {
				rc = tasks[i].rc;
				if (err && !err->code)
					*err = tasks[i].err;
			}
		}
	atomic_fetch_sub(&n->search_queued, total);
	if (ntasks > 0 && failed == ntasks) {
		sr_merger_destroy(m);
		cm_free(CM_MEM_NODE, tasks);
		return rc;
	}
	if (err)
		cm_error_clear(err);
	/* aggregations over search.max_buckets fail the request (400), they
	 * are not silently left out of the reply */
	cm_error rerr;
	cm_error_clear(&rerr);
	if ((rc = sr_merger_reduce(m, &rerr)) ||
	    (deferred && (rc = fetch_page(n, tasks, ntasks, m, req, &rerr)))) {
		if (err)
			*err = rerr;
		sr_merger_destroy(m);
		cm_free(CM_MEM_NODE, tasks);
		return rc;
	}
	sr_merger_render(m, (cm_now_ns() - t0) / 1000000, out);
	sr_merger_destroy(m);
	cm_free(CM_MEM_NODE, tasks);
	return CM_OK;
}

static void
run_count_shard(void *arg)
{
	shard_task *t = arg;
	cm_error_clear(&t->err);
	uint64_t t0 = cm_now_ns();
	t->rc = sr_count_shard(t->target->readers[t->shard], t->count_query, t->deadline_ns,
	                       &t->count, &t->err);
	nd_index_count_search(t->target->ix, NULL, cm_now_ns() - t0, false, false);
}

cm_err
nd_count(nd_node *n, nd_target *t, size_t nt, const sr_query *q, uint64_t deadline_ns,
         uint64_t *count, cm_error *err)
{
	size_t ntasks;
	shard_task *tasks = make_tasks(t, nt, &ntasks);
	cm_err rc = CM_OK;

	for (size_t i = 0; i < ntasks; i++) {
		tasks[i].count_query = q;
		tasks[i].deadline_ns = deadline_ns;
	}
	cm_pool_run_some(n->search_pool, run_count_shard, tasks, sizeof(shard_task), ntasks,
	                 task_helpers(tasks, ntasks));
	*count = 0;
	for (size_t i = 0; i < ntasks; i++) {
		if (tasks[i].rc && !rc) {
			rc = tasks[i].rc;
			if (err)
				*err = tasks[i].err;
		}
		*count += tasks[i].count;
	}
	cm_free(CM_MEM_NODE, tasks);
	return rc;
}

/* ---- writes over several shards ---- */

static void
run_batch(void *arg)
{
	nd_batch *b = arg;
	b->rc = nd_index_apply(b->ix, b->shard, b->ops, b->n, b->res);
}

void
nd_apply_batches(nd_node *n, nd_batch *b, size_t nb)
{
	/* Each shard syncs its own log: overlapping them hides the fsyncs. */
	cm_pool_run_all(nb > 1 ? n->search_pool : NULL, run_batch, b, sizeof(nd_batch), nb);
}
