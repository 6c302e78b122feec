/* _delete_by_query, _update_by_query and _reindex (local source; both
 * with an optional update script), on solo nodes and clusters alike: the matching documents are
 * read in batches through a scroll (node/nd_ctx.c: contexts on the shard
 * copies, a point in time), and each batch is written through the shards'
 * primaries with per-document optimistic concurrency (if_seq_no and
 * if_primary_term from the snapshot), so a document changed meanwhile is a
 * version conflict, reported as Elasticsearch does, never overwritten.
 * Every run is a task (co_tasks.c); wait_for_completion=false answers with
 * its id at once. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
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
#define BQ_MAX_FAILURES 100
#define BQ_SCROLL_KEEP_MS (5 * 60 * 1000)

enum { BQ_DELETE, BQ_UPDATE, BQ_REINDEX };

static const char *const bq_actions[] = {"indices:data/write/delete/byquery",
                                         "indices:data/write/update/byquery",
                                         "indices:data/write/reindex"};

typedef struct bq_job {
	nd_node *node;
	int kind;
	nd_index **ixs; /* the source indices (references) */
	size_t nix;
	char *search;   /* the scroll's _search body */
	nd_index *dest; /* reindex (reference), NULL until the first write */
	char *dest_name; /* reindex: the destination as named */
	bool dest_create, proceed;
	int64_t max_docs; /* -1: all */
	double rps;       /* <= 0: unthrottled */
	int slices;
	int refresh;
	co_task *task;
	bool detached;
	ps_script *script; /* _update_by_query with a script */
	const cJSON *params;
	cJSON *script_json; /* owns params */
	char *pipeline;     /* ?pipeline= or dest.pipeline; NULL: the index's default */
	/* a slice of a sliced run: its run (parent NULL: the whole run) */
	struct bq_job *parent;
	int slice_idx;
	pthread_mutex_t mu;        /* the parent's: per_slice, stop, dest */
	pthread_cond_t dest_cv;    /* the parent's: a slice created dest (or failed to) */
	bool dest_creating;        /* the parent's: a slice is creating dest */
	co_task_status *per_slice; /* the parent's: each slice's counts */
	_Atomic bool stop;         /* the parent's: a slice aborted or failed */
	_Atomic int next_slice;    /* the parent's: the next slice to run */
	/* the outcome */
	co_task_status st;
	cJSON *failures;
	bool aborted; /* a conflict (conflicts=abort) or a write failure */
	cm_error err; /* a search failure: the whole request fails */
	uint64_t t0;
} bq_job;

static void
job_free(bq_job *j)
{
	co_release_all(j->ixs, j->nix);
	if (j->dest)
		nd_index_release(j->dest);
	cm_free(MEM, j->dest_name);
	cm_free(MEM, j->search);
	cJSON_Delete(j->failures);
	ps_free(j->script);
	cJSON_Delete(j->script_json);
	cm_free(MEM, j->pipeline);
	cm_free(MEM, j);
}

static void
add_failure(bq_job *j, const char *index, const char *id, const st_op_result *res, cm_err rc)
{
	j->st.failures++;
	if (cJSON_GetArraySize(j->failures) >= BQ_MAX_FAILURES)
		return;
	cJSON *f = cJSON_CreateObject(), *c;
	cm_err e = rc ? rc : res->err;
	cJSON_AddStringToObject(f, "index", index);
	cJSON_AddStringToObject(f, "type", "_doc");
	cJSON_AddStringToObject(f, "id", id);
	c = cJSON_AddObjectToObject(f, "cause");
	cJSON_AddStringToObject(
	    c, "type", e == CM_ECONFLICT ? "version_conflict_engine_exception" : cm_err_type(e));
	cJSON_AddStringToObject(c, "reason", res && res->reason[0] ? res->reason : cm_err_msg(e));
	cJSON_AddStringToObject(c, "index", index);
	cJSON_AddNumberToObject(f, "status", cm_err_status(e));
	cJSON_AddItemToArray(j->failures, f);
}

/* One document of a batch. */
typedef struct bq_doc {
	nd_index *ix; /* where the write goes (borrowed) */
	const char *index, *id, *src;
	size_t src_len;
	uint64_t seq_no, term;
	size_t batch, pos;
	bool skip; /* failed before the write */
	bool del;  /* the script said ctx.op = 'delete' */
} bq_doc;

static nd_index *
index_of(bq_job *j, const char *name)
{
	for (size_t i = 0; i < j->nix; i++)
		if (strcmp(nd_index_name(j->ixs[i]), name) == 0)
			return j->ixs[i];
	return NULL;
}

/* A document that failed before its write: a failure of the run, which
 * stops after this batch. */
static void
fail_doc(bq_job *j, bq_doc *d, const cm_error *e)
{
	st_op_result fr;
	memset(&fr, 0, sizeof(fr));
	fr.err = e->code;
	snprintf(fr.reason, sizeof(fr.reason), "%.250s", e->reason);
	add_failure(j, nd_index_name(d->ix), d->id, &fr, 0);
	j->aborted = true;
	d->skip = true;
}

/* The write's ingest pipelines (j->pipeline, or the destination's
 * default, then its final one) on d's source: *src gets the new
 * source (owned, CM_MEM_COORDINATOR) when a pipeline ran. A pipeline here may not move the document to another index
 * or id (the batch is built on both). */
static cm_err
ingest_doc(co_ingest *g, bq_job *j, bq_doc *d, char **src, bool *dropped, cm_error *err)
{
	char *index = cm_strdup(MEM, nd_index_name(d->ix)), *id = cm_strdup(MEM, d->id);
	char *routing = NULL, *out = NULL;
	size_t out_len;
	cm_err rc = co_ingest_run(g, d->ix, j->pipeline, &index, &id, &routing, d->src, d->src_len,
	                          &out, &out_len, dropped, err);
	if (!rc && out && (strcmp(index, nd_index_name(d->ix)) || strcmp(id, d->id)))
		rc = cm_error_set(err, CM_EINVAL,
		                  "a pipeline may not change [_index] or [_id] in %s (Shoal)",
		                  j->kind == BQ_REINDEX ? "_reindex" : "_update_by_query");
	if (!rc && out) {
		*src = out;
		d->src = out;
		d->src_len = out_len;
	} else {
		cm_free(MEM, out);
	}
	cm_free(MEM, index);
	cm_free(MEM, id);
	cm_free(MEM, routing);
	return rc;
}

/* Whether every hit of a page has its _source (an index with _source
 * disabled stores none); else the whole run fails, as ES's, before the
 * page writes anything. A delete needs no source. */
static bool
sources_present(bq_job *j, const cJSON *hits, size_t n)
{
	const cJSON *h;
	size_t k = 0;
	if (j->kind == BQ_DELETE)
		return true;
	cJSON_ArrayForEach(h, hits)
	{
		if (k++ == n)
			break;
		const cJSON *ix = cJSON_GetObjectItemCaseSensitive(h, "_index");
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(h, "_id");
		if (!cJSON_IsString(ix) || !cJSON_IsString(id) ||
		    cJSON_GetObjectItemCaseSensitive(h, "_source"))
			continue;
		if (!j->err.code)
			cm_error_set(&j->err, CM_EINVAL,
			             "[%.200s][_doc][%.200s] didn't store _source", ix->valuestring,
			             id->valuestring);
		j->aborted = true;
		return false;
	}
	return true;
}

/* The reindex destination, got or created on the first write as ES's
 * bulk auto-creates it (a run that writes nothing leaves no index). The
 * slices share the run's; no lock is held across the create. */
static nd_index *
dest_of(bq_job *j)
{
	bq_job *root = j->parent ? j->parent : j;
	nd_index *ix = NULL;
	cm_error e;
	cm_err rc;
	cm_error_clear(&e);
	if (!j->parent) {
		if (!root->dest && (rc = co_get_or_create(root->node, root->dest_name, &ix, &e)))
			goto fail;
		if (!root->dest)
			root->dest = ix;
		return root->dest;
	}
	/* one slice creates it; the others wait (no lock held meanwhile) */
	pthread_mutex_lock(&root->mu);
	while (!root->dest && root->dest_creating)
		pthread_cond_wait(&root->dest_cv, &root->mu);
	if ((ix = root->dest) == NULL)
		root->dest_creating = true;
	pthread_mutex_unlock(&root->mu);
	if (ix)
		return ix;
	rc = co_get_or_create(root->node, root->dest_name, &ix, &e);
	pthread_mutex_lock(&root->mu);
	root->dest = rc ? NULL : ix;
	root->dest_creating = false;
	pthread_cond_broadcast(&root->dest_cv);
	pthread_mutex_unlock(&root->mu);
	if (!rc)
		return ix;
fail:
	if (!j->err.code)
		j->err = e;
	j->aborted = true;
	return NULL;
}

/* Writes one page of hits; counts the outcome into j->st. */
static void
write_batch(bq_job *j, cJSON *hits, size_t n)
{
	nd_index *dest = NULL;
	if (!sources_present(j, hits, n))
		return;
	if (j->kind == BQ_REINDEX && !(dest = dest_of(j)))
		return;
	bq_doc *docs = cm_calloc(MEM, n + 1, sizeof(*docs));
	nd_batch *b = cm_calloc(MEM, n + 1, sizeof(*b));
	st_op **ops = cm_calloc(MEM, n + 1, sizeof(*ops));
	char **srcs = cm_calloc(MEM, n + 1, sizeof(*srcs));
	size_t nb = 0, k = 0;
	cJSON *h;
	co_ingest *ingest = NULL; /* the batch's pipelines, compiled on first use */
	char **ingested = cm_calloc(MEM, n + 1, sizeof(*ingested)); /* their sources */

	cJSON_ArrayForEach(h, hits)
	{
		if (k == n)
			break;
		bq_doc *d = &docs[k];
		cJSON *ix = cJSON_GetObjectItemCaseSensitive(h, "_index");
		cJSON *id = cJSON_GetObjectItemCaseSensitive(h, "_id");
		cJSON *sq = cJSON_GetObjectItemCaseSensitive(h, "_seq_no");
		cJSON *pt = cJSON_GetObjectItemCaseSensitive(h, "_primary_term");
		cJSON *src = cJSON_GetObjectItemCaseSensitive(h, "_source");
		k++;
		if (!cJSON_IsString(ix) || !cJSON_IsString(id)) {
			d->skip = true;
			continue;
		}
		d->index = ix->valuestring;
		d->id = id->valuestring;
		d->seq_no = cJSON_IsNumber(sq) ? (uint64_t)sq->valuedouble : ST_NO_SEQ;
		d->term = cJSON_IsNumber(pt) ? (uint64_t)pt->valuedouble : 0;
		d->ix = j->kind == BQ_REINDEX ? dest : index_of(j, d->index);
		if (!d->ix) {
			d->skip = true;
			continue;
		}
		if (j->script) {
			/* the script decides: a new source, a noop, or a delete */
			cJSON *cur = src ? cJSON_Duplicate(src, true) : cJSON_CreateObject();
			st_doc_meta meta = {d->seq_no, d->term, 0};
			int sop = CO_SCRIPT_INDEX;
			cm_error e;
			cm_error_clear(&e);
			/* ctx._index: the index the document comes from (reindex too) */
			nd_index *from = index_of(j, d->index);
			if (co_script_apply(j->script, j->params, from ? from : d->ix, d->id, &meta,
			                    &cur, &sop, &e)) {
				fail_doc(j, d, &e);
				cJSON_Delete(cur);
				continue;
			}
			if (sop == CO_SCRIPT_NOOP) {
				j->st.noops++;
				d->skip = true;
				cJSON_Delete(cur);
				continue;
			}
			d->del = sop == CO_SCRIPT_DELETE;
			if (!d->del)
				srcs[k - 1] = cJSON_PrintUnformatted(cur);
			cJSON_Delete(cur);
		} else if (j->kind != BQ_DELETE) {
			srcs[k - 1] = src ? cJSON_PrintUnformatted(src) : NULL;
		}
		cm_error be;
		cm_error_clear(&be);
		if (nd_index_blocked(d->ix, j->kind == BQ_DELETE || d->del ? 'd' : 'w', &be)) {
			fail_doc(j, d, &be);
			continue;
		}
		if (j->kind != BQ_DELETE && !d->del) {
			d->src = srcs[k - 1] ? srcs[k - 1] : "{}";
			d->src_len = strlen(d->src);
			cm_error e;
			cm_error_clear(&e);
			bool dropped = false;
			if (!ingest)
				ingest = co_ingest_new(j->node);
			if (ingest_doc(ingest, j, d, &ingested[k - 1], &dropped, &e)) {
				fail_doc(j, d, &e);
				continue;
			}
			if (dropped) {
				j->st.noops++;
				d->skip = true;
				continue;
			}
			/* dynamic mapping first, as _bulk does (UBQ picks up new mappings) */
			if (nd_index_prepare_doc(d->ix, d->id, strlen(d->id), d->src, d->src_len,
			                         &e)) {
				fail_doc(j, d, &e);
				continue;
			}
		}
		int shard = nd_index_route(d->ix, d->id, strlen(d->id));
		size_t bi = 0;
		while (bi < nb && !(b[bi].ix == d->ix && b[bi].shard == shard))
			bi++;
		if (bi == nb) {
			b[nb].ix = d->ix;
			b[nb].shard = shard;
			ops[nb] = cm_calloc(MEM, n + 1, sizeof(st_op));
			nb++;
		}
		st_op *op = &ops[bi][b[bi].n];
		op->type = j->kind == BQ_DELETE || d->del ? ST_OP_DELETE : ST_OP_INDEX;
		op->id = d->id;
		op->id_len = strlen(d->id);
		op->source = d->src;
		op->source_len = d->src_len;
		op->seq_no = ST_NO_SEQ;
		op->if_seq_no = ST_NO_SEQ;
		if (j->kind == BQ_REINDEX) {
			/* a script's delete removes the destination's copy, whatever it is */
			op->create_only = j->dest_create && !d->del;
		} else if (d->seq_no != ST_NO_SEQ && d->term) {
			/* the document as the snapshot saw it, or a conflict */
			op->if_seq_no = d->seq_no;
			op->if_primary_term = d->term;
		}
		d->batch = bi;
		d->pos = b[bi].n++;
	}
	for (size_t i = 0; i < nb; i++) {
		b[i].ops = ops[i];
		b[i].res = cm_calloc(MEM, b[i].n + 1, sizeof(st_op_result));
	}
	if (nb) {
		if (nd_cluster_of(j->node))
			nd_cluster_apply_batches(nd_cluster_of(j->node), b, nb);
		else
			nd_apply_batches(j->node, b, nb);
	}
	for (size_t i = 0; i < k; i++) {
		bq_doc *d = &docs[i];
		if (d->skip)
			continue;
		nd_batch *bt = &b[d->batch];
		const st_op_result *res = &bt->res[d->pos];
		if (bt->rc) {
			add_failure(j, nd_index_name(d->ix), d->id, res, bt->rc);
			j->aborted = true;
			continue;
		}
		if (j->kind == BQ_REINDEX && d->del && !res->err) {
			j->st.deleted++; /* ES counts every delete a reindex script asks for */
			continue;
		}
		if (res->err == CM_ECONFLICT || ((j->kind == BQ_DELETE || d->del) && !res->err &&
		                                 res->result == ST_RESULT_NOT_FOUND)) {
			/* changed or gone since the snapshot */
			j->st.version_conflicts++;
			if (!j->proceed) {
				st_op_result cr = *res;
				if (!cr.err) {
					cr.err = CM_ECONFLICT;
					snprintf(cr.reason, sizeof(cr.reason),
					         "[%s]: version conflict, document already deleted",
					         d->id);
				}
				add_failure(j, nd_index_name(d->ix), d->id, &cr, 0);
				j->aborted = true;
			}
			continue;
		}
		if (res->err) {
			add_failure(j, nd_index_name(d->ix), d->id, res, 0);
			j->aborted = true;
			continue;
		}
		switch (res->result) {
		case ST_RESULT_CREATED:
			j->st.created++;
			break;
		case ST_RESULT_UPDATED:
			j->st.updated++;
			break;
		case ST_RESULT_DELETED:
			j->st.deleted++;
			break;
		case ST_RESULT_NOOP:
			j->st.noops++;
			break;
		default:
			break;
		}
	}
	j->st.batches++;
	for (size_t i = 0; i < nb; i++) {
		cm_free(MEM, ops[i]);
		cm_free(MEM, b[i].res);
	}
	for (size_t i = 0; i < n; i++) {
		if (srcs[i])
			cJSON_free(srcs[i]);
		cm_free(MEM, ingested[i]);
	}
	cm_free(MEM, srcs);
	cm_free(MEM, ingested);
	co_ingest_free(ingest);
	cm_free(MEM, ops);
	cm_free(MEM, b);
	cm_free(MEM, docs);
}

/* requests_per_second: waits until the batch's share of time has passed,
 * checking for a cancel every 50 ms. */
static void
throttle(bq_job *j, size_t docs, uint64_t batch_start_ns)
{
	if (j->rps <= 0 || !docs)
		return;
	uint64_t want = (uint64_t)((double)docs / j->rps * 1e9);
	uint64_t until = batch_start_ns + want, now;
	while ((now = cm_now_ns()) < until && !co_task_cancelled(j->task)) {
		uint64_t left = until - now;
		struct timespec ts = {0, (long)(left < 50000000ull ? left : 50000000ull)};
		nanosleep(&ts, NULL);
		j->st.throttled_ms += (cm_now_ns() - now) / 1000000;
	}
}

/* Publishes j's counts to its task (a slice: the sum over the slices). */
static void
report(bq_job *j)
{
	bq_job *p = j->parent;
	if (!p) {
		co_task_update(j->task, &j->st);
		return;
	}
	co_task_status sum;
	memset(&sum, 0, sizeof(sum));
	pthread_mutex_lock(&p->mu);
	p->per_slice[j->slice_idx] = j->st;
	for (int i = 0; i < p->slices; i++) {
		const co_task_status *x = &p->per_slice[i];
		sum.total += x->total;
		sum.updated += x->updated;
		sum.created += x->created;
		sum.deleted += x->deleted;
		sum.batches += x->batches;
		sum.version_conflicts += x->version_conflicts;
		sum.noops += x->noops;
		sum.failures += x->failures;
		sum.throttled_ms += x->throttled_ms;
	}
	sum.requests_per_second = p->st.requests_per_second;
	pthread_mutex_unlock(&p->mu);
	co_task_update(j->task, &sum);
}

static bool
stopped(bq_job *j)
{
	return co_task_cancelled(j->task) || (j->parent && atomic_load(&j->parent->stop));
}

/* Scrolls one slice (max 0: everything) and writes it. */
static void
run_slice(bq_job *j, int slice, int max)
{
	cm_buf out;
	char *sid = NULL;
	cm_error e;
	cJSON *page = NULL;
	cm_err rc;

	cm_buf_init(&out, MEM);
	cm_error_clear(&e);
	rc = nd_scroll_open(j->node, j->ixs, j->nix, j->search, BQ_SCROLL_KEEP_MS, slice, max,
	                    false, &out, &sid, &e);
	bool first = true;
	while (!rc) {
		page = cJSON_ParseWithLength((const char *)out.data, out.len);
		cJSON *hits = cJSON_GetObjectItemCaseSensitive(page, "hits");
		cJSON *list = cJSON_GetObjectItemCaseSensitive(hits, "hits");
		if (first) {
			cJSON *t = cJSON_GetObjectItemCaseSensitive(
			    cJSON_GetObjectItemCaseSensitive(hits, "total"), "value");
			uint64_t total = cJSON_IsNumber(t) ? (uint64_t)t->valuedouble : 0;
			j->st.total += total;
			first = false;
		}
		size_t n = (size_t)cJSON_GetArraySize(list);
		if (j->max_docs >= 0) {
			uint64_t done = j->st.created + j->st.updated + j->st.deleted +
			                j->st.noops + j->st.version_conflicts + j->st.failures;
			uint64_t left =
			    (uint64_t)j->max_docs > done ? (uint64_t)j->max_docs - done : 0;
			if (n > left)
				n = (size_t)left;
		}
		if (n == 0 || stopped(j))
			break;
		uint64_t t0 = cm_now_ns();
		write_batch(j, list, n);
		report(j);
		if (j->aborted) {
			if (j->parent)
				atomic_store(&j->parent->stop, true); /* the others stop too */
			break;
		}
		throttle(j, n, t0);
		cJSON_Delete(page);
		page = NULL;
		cm_buf_reset(&out);
		char *next = NULL;
		rc = nd_scroll_next(j->node, sid, BQ_SCROLL_KEEP_MS, &out, &next, &e);
		cm_free(CM_MEM_NODE, next);
	}
	if (rc && !j->err.code)
		j->err = e;
	if (rc && j->parent)
		atomic_store(&j->parent->stop, true);
	cJSON_Delete(page);
	if (sid) {
		size_t nctx, freed;
		cm_error ce;
		cm_error_clear(&ce);
		nd_scroll_clear(j->node, sid, &nctx, &freed, &ce);
		cm_free(CM_MEM_NODE, sid);
	}
	cm_buf_free(&out);
}

/* The Elasticsearch response of a finished run (or its error). */
static char *
render(bq_job *j, int *status)
{
	cJSON *o = cJSON_CreateObject(), *r;
	if (!j->err.code && co_task_stopping(j->task))
		/* the node stopped it: a failure, never a result that looks done */
		cm_error_set_type(&j->err, CM_EUNAVAIL, "node_closed_exception",
		                  "node [%s] stopped while the task ran: it ended after %llu of "
		                  "%llu documents",
		                  nd_node_name(j->node),
		                  (unsigned long long)(j->st.created + j->st.updated +
		                                       j->st.deleted + j->st.noops +
		                                       j->st.version_conflicts),
		                  (unsigned long long)j->st.total);
	if (j->err.code) {
		cJSON *d = co_error_doc(&j->err, NULL);
		*status = cm_err_status(j->err.code);
		char *s = cJSON_PrintUnformatted(d);
		cJSON_Delete(d);
		cJSON_Delete(o);
		return s;
	}
	cJSON_AddNumberToObject(o, "took", (double)((cm_now_ns() - j->t0) / 1000000));
	cJSON_AddBoolToObject(o, "timed_out", false);
	/* total: the documents the run went through (max_docs bounds it) */
	uint64_t total = j->st.total;
	if (j->max_docs >= 0 && total > (uint64_t)j->max_docs)
		total = (uint64_t)j->max_docs;
	cJSON_AddNumberToObject(o, "total", (double)total);
	if (j->kind != BQ_DELETE) {
		cJSON_AddNumberToObject(o, "updated", (double)j->st.updated);
		cJSON_AddNumberToObject(o, "created", (double)j->st.created);
	}
	cJSON_AddNumberToObject(o, "deleted", (double)j->st.deleted);
	cJSON_AddNumberToObject(o, "batches", (double)j->st.batches);
	cJSON_AddNumberToObject(o, "version_conflicts", (double)j->st.version_conflicts);
	cJSON_AddNumberToObject(o, "noops", (double)j->st.noops);
	r = cJSON_AddObjectToObject(o, "retries");
	cJSON_AddNumberToObject(r, "bulk", 0);
	cJSON_AddNumberToObject(r, "search", 0);
	cJSON_AddNumberToObject(o, "throttled_millis", (double)j->st.throttled_ms);
	cJSON_AddNumberToObject(o, "requests_per_second", j->rps > 0 ? j->rps : -1.0);
	cJSON_AddNumberToObject(o, "throttled_until_millis", 0);
	if (co_task_cancelled(j->task) && !co_task_stopping(j->task))
		cJSON_AddStringToObject(o, "canceled", "by user request");
	if (j->slices > 1)
		cJSON_AddNumberToObject(o, "slices", j->slices);
	cJSON_AddItemToObject(o, "failures", j->failures);
	j->failures = NULL;
	/* ES: a run stopped by a version conflict answers 409 */
	*status = 200;
	if (j->aborted && j->st.version_conflicts && !j->proceed)
		*status = 409;
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return s;
}

#define BQ_MAX_PARALLEL 8 /* slices running at once */

/* A worker of a sliced run: takes the next slice until none is left. */
static void *
slice_worker(void *arg)
{
	bq_job *subs = arg, *p = subs[0].parent;
	int s;
	while ((s = atomic_fetch_add(&p->next_slice, 1)) < p->slices) {
		if (stopped(&subs[s]))
			continue;
		run_slice(&subs[s], s, p->slices);
	}
	return NULL;
}

/* slices > 1: every slice a run of its own (its scroll, its batches),
 * BQ_MAX_PARALLEL at a time; max_docs and requests_per_second are
 * shared out among them, as ES does; the outcome is their sum. */
static void
run_sliced(bq_job *j)
{
	int ns = j->slices, nt = ns < BQ_MAX_PARALLEL ? ns : BQ_MAX_PARALLEL;
	bq_job *subs = cm_calloc(MEM, (size_t)ns, sizeof(*subs));
	pthread_t *th = cm_calloc(MEM, (size_t)nt, sizeof(*th));
	bool *started = cm_calloc(MEM, (size_t)nt, sizeof(bool));
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->dest_cv, NULL);
	j->per_slice = cm_calloc(MEM, (size_t)ns, sizeof(co_task_status));
	atomic_store(&j->next_slice, 0);
	atomic_store(&j->stop, false);
	for (int s = 0; s < ns; s++) {
		bq_job *x = &subs[s];
		memcpy(x, j, sizeof(*x)); /* shares the indices, body and script (read only) */
		memset(&x->st, 0, sizeof(x->st));
		x->failures = cJSON_CreateArray();
		x->aborted = false;
		cm_error_clear(&x->err);
		x->parent = j;
		x->slice_idx = s;
		if (j->max_docs >= 0)
			x->max_docs = j->max_docs / ns + (s < j->max_docs % ns);
		if (j->rps > 0)
			x->rps = j->rps / ns;
	}
	for (int t = 0; t < nt; t++)
		started[t] = pthread_create(&th[t], NULL, slice_worker, subs) == 0;
	if (!started[0])
		slice_worker(subs); /* no thread: this one runs them */
	for (int t = 0; t < nt; t++)
		if (started[t])
			pthread_join(th[t], NULL);
	for (int s = 0; s < ns; s++) {
		bq_job *x = &subs[s];
		j->st.total += x->st.total;
		j->st.updated += x->st.updated;
		j->st.created += x->st.created;
		j->st.deleted += x->st.deleted;
		j->st.batches += x->st.batches;
		j->st.version_conflicts += x->st.version_conflicts;
		j->st.noops += x->st.noops;
		j->st.failures += x->st.failures;
		j->st.throttled_ms += x->st.throttled_ms;
		j->aborted |= x->aborted;
		if (x->err.code && !j->err.code)
			j->err = x->err;
		cJSON *f;
		while ((f = x->failures->child)) {
			cJSON_DetachItemViaPointer(x->failures, f);
			if (cJSON_GetArraySize(j->failures) < BQ_MAX_FAILURES)
				cJSON_AddItemToArray(j->failures, f);
			else
				cJSON_Delete(f);
		}
		cJSON_Delete(x->failures);
	}
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->dest_cv);
	cm_free(MEM, j->per_slice);
	j->per_slice = NULL;
	cm_free(MEM, started);
	cm_free(MEM, th);
	cm_free(MEM, subs);
}

static char *
run_job(bq_job *j, int *status)
{
	j->t0 = cm_now_ns();
	j->st.requests_per_second = j->rps > 0 ? j->rps : -1;
	if (j->slices > 1)
		run_sliced(j);
	else
		run_slice(j, 0, 0);
	if (j->refresh != CO_REFRESH_NONE) {
		if (j->dest)
			co_refresh_after(j->dest, CO_REFRESH_TRUE);
		else
			for (size_t i = 0; i < j->nix; i++)
				co_refresh_after(j->ixs[i], CO_REFRESH_TRUE);
	}
	co_task_update(j->task, &j->st);
	return render(j, status);
}

static void *
detached_main(void *arg)
{
	bq_job *j = arg;
	int status;
	char *resp = run_job(j, &status);
	co_task_finish(j->task, resp, j->err.code != 0, true);
	cJSON_free(resp);
	job_free(j);
	return NULL;
}

/* Runs the job, or hands it to a thread (wait_for_completion=false);
 * replies either way and owns j. */
static void
start(co_req *r, bq_job *j, const char *desc)
{
	char tid[128];
	j->st.requests_per_second = j->rps > 0 ? j->rps : -1;
	j->task = co_task_new(r->node, bq_actions[j->kind], desc);
	co_task_update(j->task, &j->st);
	co_task_id(j->task, tid, sizeof(tid));
	if (!co_param_bool(r, "wait_for_completion", true)) {
		pthread_t th;
		pthread_attr_t at;
		cm_error de;
		cm_error_clear(&de);
		if (co_task_detach(j->task, &de)) {
			co_task_finish(j->task, "{}", true, false);
			job_free(j);
			co_reply_error(r, &de, NULL); /* nothing started */
			return;
		}
		j->detached = true;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &at, detached_main, j) != 0) {
			pthread_attr_destroy(&at);
			co_task_finish(j->task,
			               "{\"error\":{\"type\":\"exception\",\"reason\":\"cannot "
			               "start the task\"},\"status\":500}",
			               true, true);
			job_free(j);
			co_reply_errorf(r, CM_EINTERNAL, NULL, "cannot start the task");
			return;
		}
		pthread_attr_destroy(&at);
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "task", tid);
		co_reply_json(r, 200, o);
		return;
	}
	int status;
	char *resp = run_job(j, &status);
	co_task_finish(j->task, resp, j->err.code != 0, false);
	co_reply_raw_json(r, status, resp, strlen(resp));
	cJSON_free(resp);
	job_free(j);
}

/* ---- parameters ---- */

/* conflicts, max_docs, requests_per_second, slices, refresh, scroll_size
 * from the URL (and conflicts/max_docs from body); false after replying. */
static bool
common_params(co_req *r, bq_job *j, const cJSON *body, int64_t *scroll_size, size_t nshards)
{
	const char *v;
	const cJSON *b;
	char *end;
	j->max_docs = -1;
	j->rps = -1;
	j->slices = 1;
	*scroll_size = 1000;
	v = co_param_get(r, "conflicts");
	b = cJSON_GetObjectItemCaseSensitive(body, "conflicts");
	if (cJSON_IsString(b))
		v = b->valuestring;
	if (v && strcmp(v, "proceed") && strcmp(v, "abort")) {
		co_reply_errorf(
		    r, CM_EVALIDATE, NULL,
		    "Validation Failed: 1: conflicts may only be \"proceed\" or \"abort\" "
		    "but was [%.40s];",
		    v);
		return false;
	}
	j->proceed = v && strcmp(v, "proceed") == 0;
	v = co_param_get(r, "max_docs");
	b = cJSON_GetObjectItemCaseSensitive(body, "max_docs");
	if (b && !cJSON_IsNumber(b)) {
		co_reply_errorf(r, CM_EPARSE, NULL, "[max_docs] must be a number");
		return false;
	}
	if (v || b) {
		double d = b ? b->valuedouble : strtod(v, &end);
		if ((!b && (!*v || *end)) || d < 0 || d > 1e15) {
			co_reply_errorf(
			    r, CM_EVALIDATE, NULL,
			    "Validation Failed: 1: maxDocs should be greater than 0 if the "
			    "request is limited to some number of documents or -1 if it isn't "
			    "but it was [%.40s];",
			    v ? v : "?");
			return false;
		}
		j->max_docs = (int64_t)d;
	}
	if ((v = co_param_get(r, "requests_per_second"))) {
		double d = strtod(v, &end);
		if (strcmp(v, "-1") && (!*v || *end || !(d > 0) || isinf(d))) {
			co_reply_errorf(
			    r, CM_EINVAL, NULL,
			    "[requests_per_second] must be a float greater than 0. Use -1 to "
			    "disable throttling.");
			return false;
		}
		j->rps = strcmp(v, "-1") ? d : -1;
	}
	if ((v = co_param_get(r, "slices"))) {
		long s = strcmp(v, "auto") == 0 ? (long)nshards : strtol(v, &end, 10);
		if (strcmp(v, "auto") && (!*v || *end || s < 1 || s > 1024)) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "Failed to parse int parameter [slices] with value [%.40s]",
			                v);
			return false;
		}
		j->slices = s < 1 ? 1 : (int)s;
	}
	if ((v = co_param_get(r, "scroll_size"))) {
		long s = strtol(v, &end, 10);
		if (!*v || *end || s < 1 || s > 10000) {
			co_reply_errorf(
			    r, CM_EINVAL, NULL,
			    "Failed to parse int parameter [scroll_size] with value [%.40s]", v);
			return false;
		}
		*scroll_size = s;
	}
	co_write_opts w;
	cm_error err;
	cm_error_clear(&err);
	if (co_write_opts_parse(NULL, NULL, NULL, NULL, NULL, co_param_get(r, "refresh"), &w,
	                        &err)) {
		co_reply_error(r, &err, NULL);
		return false;
	}
	j->refresh = w.refresh;
	static const char *const ignored[] = {
	    "timeout", "wait_for_active_shards", "scroll", "routing", "preference", "search_type"};
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		co_param_get(r, ignored[i]);
	return true;
}

/* The scroll body: query, _source as asked (none for deletes), by _doc,
 * with the seq_no/primary_term the writes are conditioned on. */
static char *
search_body(const cJSON *query, const cJSON *source, bool want_source, int64_t size)
{
	cJSON *b = cJSON_CreateObject();
	if (query)
		cJSON_AddItemToObject(b, "query", cJSON_Duplicate(query, true));
	if (!want_source)
		cJSON_AddBoolToObject(b, "_source", false);
	else if (source)
		cJSON_AddItemToObject(b, "_source", cJSON_Duplicate(source, true));
	cJSON_AddNumberToObject(b, "size", (double)size);
	cJSON *s = cJSON_AddArrayToObject(b, "sort");
	cJSON_AddItemToArray(s, cJSON_CreateString("_doc"));
	cJSON_AddBoolToObject(b, "seq_no_primary_term", true);
	char *t = cJSON_PrintUnformatted(b);
	char *out = cm_strdup(MEM, t);
	cJSON_free(t);
	cJSON_Delete(b);
	return out;
}

/* Checks a query by parsing it (a bad one is a 400 before anything runs). */
static bool
query_ok(co_req *r, const cJSON *q)
{
	sr_query *parsed = NULL;
	cm_error err;
	cm_error_clear(&err);
	if (q && sr_query_from_json(q, &parsed, &err)) {
		co_reply_error(r, &err, NULL);
		return false;
	}
	sr_query_free(parsed);
	return true;
}

static bool
only_keys(co_req *r, const cJSON *o, const char *const *keys, size_t nkeys, const char *where)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, o)
	{
		size_t i = 0;
		while (i < nkeys && strcmp(e->string, keys[i]))
			i++;
		if (i == nkeys) {
			if (strcmp(e->string, "script") == 0)
				co_reply_errorf(r, CM_EINVAL, NULL,
				                "[script] is not supported by Shoal yet (%s)",
				                where);
			else
				co_reply_errorf(r, CM_EPARSE, NULL, "[%s] unknown field [%.60s]",
				                where, e->string);
			return false;
		}
	}
	return true;
}

static size_t
shard_count(nd_index **ixs, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += (size_t)nd_index_nshards(ixs[i]);
	return k;
}

/* _delete_by_query and _update_by_query. */
static void
by_query(co_req *r, int kind)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad), *q;
	int64_t size;
	bq_job *j;
	static const char *const keys[] = {"query", "max_docs", "conflicts", "script"};

	if (bad)
		return;
	if (body && !cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EPARSE, NULL, "request body must be an object");
		return;
	}
	if (!only_keys(r, body, keys, kind == BQ_DELETE ? 3 : 4,
	               kind == BQ_DELETE ? "delete_by_query" : "update_by_query")) {
		cJSON_Delete(body);
		return;
	}
	q = cJSON_GetObjectItemCaseSensitive(body, "query");
	if (kind == BQ_DELETE && !q && !co_param_get(r, "q")) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL, "Validation Failed: 1: query is missing;");
		return;
	}
	cJSON *qs = NULL;
	const char *qp = co_param_get(r, "q");
	if (qp) {
		/* q= as a query_string query, as _search folds it */
		qs = cJSON_CreateObject();
		cJSON *inner = cJSON_AddObjectToObject(qs, "query_string");
		cJSON_AddStringToObject(inner, "query", qp);
		if (co_param_get(r, "df"))
			cJSON_AddStringToObject(inner, "default_field", co_param_get(r, "df"));
		q = qs;
	}
	/* through a filtered alias: only what the alias shows */
	if (!body)
		body = cJSON_CreateObject();
	if (qs) {
		cJSON_DeleteItemFromObjectCaseSensitive(body, "query");
		cJSON_AddItemToObject(body, "query", qs);
		qs = NULL;
	}
	cm_error ae;
	cm_error_clear(&ae);
	if (co_alias_filter(r, co_seg(r, 0), body, &ae)) {
		co_reply_error(r, &ae, NULL);
		cJSON_Delete(body);
		return;
	}
	q = cJSON_GetObjectItemCaseSensitive(body, "query");
	if (!query_ok(r, q)) {
		cJSON_Delete(qs);
		cJSON_Delete(body);
		return;
	}
	j = cm_calloc(MEM, 1, sizeof(*j));
	j->node = r->node;
	j->kind = kind;
	j->failures = cJSON_CreateArray();
	if (kind == BQ_UPDATE && co_param_get(r, "pipeline"))
		j->pipeline = cm_strdup(MEM, co_param_get(r, "pipeline"));
	cJSON *sj = cJSON_GetObjectItemCaseSensitive(body, "script");
	if (sj) {
		cm_error se;
		cm_error_clear(&se);
		j->script_json = cJSON_Duplicate(sj, true); /* the job outlives the body */
		if (ps_from_json(j->script_json, &j->script, &j->params, &se)) {
			co_reply_error(r, &se, NULL);
			job_free(j);
			cJSON_Delete(qs);
			cJSON_Delete(body);
			return;
		}
	}
	if (!co_resolve(r, co_seg(r, 0), &j->ixs, &j->nix)) {
		j->ixs = NULL;
		j->nix = 0;
		job_free(j);
		cJSON_Delete(qs);
		cJSON_Delete(body);
		return;
	}
	if (!common_params(r, j, body, &size, shard_count(j->ixs, j->nix))) {
		job_free(j);
		cJSON_Delete(qs);
		cJSON_Delete(body);
		return;
	}
	if (j->nix == 0) {
		job_free(j);
		cJSON_Delete(qs);
		cJSON_Delete(body);
		co_reply_errorf(r, CM_ENOINDEX, co_seg(r, 0), "no such index [%s]", co_seg(r, 0));
		return;
	}
	j->search = search_body(q, NULL, kind != BQ_DELETE, size);
	char desc[512];
	snprintf(desc, sizeof(desc), "%s[%s]",
	         kind == BQ_DELETE ? "delete-by-query " : "update-by-query ", co_seg(r, 0));
	cJSON_Delete(qs);
	cJSON_Delete(body);
	start(r, j, desc);
}

void
co_h_delete_by_query(co_req *r)
{
	by_query(r, BQ_DELETE);
}

void
co_h_update_by_query(co_req *r)
{
	by_query(r, BQ_UPDATE);
}

void
co_h_reindex(co_req *r)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad), *src, *dst, *ix, *v;
	int64_t size;
	bq_job *j;
	cm_buf names;
	cm_error err;
	static const char *const keys[] = {"source",    "dest", "max_docs",
	                                   "conflicts", "size", "script"};
	static const char *const skeys[] = {"index", "query", "_source", "size"};
	static const char *const dkeys[] = {"index", "op_type", "version_type", "pipeline"};

	if (bad)
		return;
	if (!cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(
		    r, CM_EVALIDATE, NULL,
		    "Validation Failed: 1: use _reindex with a body naming [source] and "
		    "[dest];");
		return;
	}
	src = cJSON_GetObjectItemCaseSensitive(body, "source");
	dst = cJSON_GetObjectItemCaseSensitive(body, "dest");
	if (!only_keys(r, body, keys, 6, "reindex") ||
	    (src && !only_keys(r, src, skeys, 4, "source")) ||
	    (dst && !only_keys(r, dst, dkeys, 4, "dest"))) {
		cJSON_Delete(body);
		return;
	}
	ix = cJSON_GetObjectItemCaseSensitive(src, "index");
	cJSON *dix = cJSON_GetObjectItemCaseSensitive(dst, "index");
	if (!cJSON_IsObject(src) || !(cJSON_IsString(ix) || cJSON_IsArray(ix)) ||
	    !cJSON_IsObject(dst) || !cJSON_IsString(dix)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: use _reindex with [source.index] and "
		                "[dest.index];");
		return;
	}
	v = cJSON_GetObjectItemCaseSensitive(dst, "version_type");
	if (v && !(cJSON_IsString(v) && strcmp(v->valuestring, "internal") == 0)) {
		cJSON_Delete(body);
		co_reply_errorf(
		    r, CM_EINVAL, NULL,
		    "[dest.version_type] other than [internal] is not supported by Shoal");
		return;
	}
	v = cJSON_GetObjectItemCaseSensitive(dst, "op_type");
	if (v && !(cJSON_IsString(v) &&
	           (!strcmp(v->valuestring, "create") || !strcmp(v->valuestring, "index")))) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EINVAL, NULL, "[dest.op_type] must be [index] or [create]");
		return;
	}
	bool create = v && strcmp(v->valuestring, "create") == 0;
	if (!query_ok(r, cJSON_GetObjectItemCaseSensitive(src, "query"))) {
		cJSON_Delete(body);
		return;
	}
	cm_buf_init(&names, MEM);
	if (cJSON_IsString(ix)) {
		cm_buf_printf(&names, "%s", ix->valuestring);
	} else {
		cJSON_ArrayForEach(v, ix)
		{
			if (cJSON_IsString(v))
				cm_buf_printf(&names, "%s%s", names.len ? "," : "", v->valuestring);
		}
	}
	cm_buf_put_u8(&names, 0);
	j = cm_calloc(MEM, 1, sizeof(*j));
	j->node = r->node;
	j->kind = BQ_REINDEX;
	j->dest_create = create;
	cJSON *dpl = cJSON_GetObjectItemCaseSensitive(dst, "pipeline");
	if (cJSON_IsString(dpl))
		j->pipeline = cm_strdup(MEM, dpl->valuestring);
	j->failures = cJSON_CreateArray();
	cJSON *sj = cJSON_GetObjectItemCaseSensitive(body, "script");
	if (sj) {
		cm_error se;
		cm_error_clear(&se);
		j->script_json = cJSON_Duplicate(sj, true); /* the job outlives the body */
		if (ps_from_json(j->script_json, &j->script, &j->params, &se)) {
			co_reply_error(r, &se, NULL);
			cm_buf_free(&names);
			job_free(j);
			cJSON_Delete(body);
			return;
		}
	}
	if (!co_resolve(r, (const char *)names.data, &j->ixs, &j->nix)) {
		j->ixs = NULL;
		j->nix = 0;
		cm_buf_free(&names);
		job_free(j);
		cJSON_Delete(body);
		return;
	}
	for (size_t i = 0; i < j->nix; i++)
		if (strcmp(nd_index_name(j->ixs[i]), dix->valuestring) == 0) {
			co_reply_errorf(
			    r, CM_EVALIDATE, NULL,
			    "Validation Failed: 1: reindex cannot write into an index its "
			    "reading from [%s];",
			    dix->valuestring);
			cm_buf_free(&names);
			job_free(j);
			cJSON_Delete(body);
			return;
		}
	cJSON *sz = cJSON_GetObjectItemCaseSensitive(body, "size"); /* the old max_docs */
	if (cJSON_IsNumber(sz) && !cJSON_GetObjectItemCaseSensitive(body, "max_docs"))
		cJSON_AddNumberToObject(body, "max_docs", sz->valuedouble);
	if (!common_params(r, j, body, &size, shard_count(j->ixs, j->nix))) {
		cm_buf_free(&names);
		job_free(j);
		cJSON_Delete(body);
		return;
	}
	if (j->nix == 0) {
		co_reply_errorf(r, CM_ENOINDEX, (const char *)names.data, "no such index [%s]",
		                (const char *)names.data);
		cm_buf_free(&names);
		job_free(j);
		cJSON_Delete(body);
		return;
	}
	v = cJSON_GetObjectItemCaseSensitive(src, "size");
	if (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 10000)
		size = (int64_t)v->valuedouble;
	cm_error_clear(&err);
	j->dest_name = cm_strdup(MEM, dix->valuestring);
	j->dest = nd_index_get(r->node, dix->valuestring);
	cm_err drc = CM_OK;
	if (!j->dest && nd_alias_exists(r->node, dix->valuestring))
		drc = co_get_or_create(r->node, dix->valuestring, &j->dest,
		                       &err); /* its write index */
	else if (!j->dest)
		drc = nd_index_name_check(dix->valuestring, &err); /* created on the first write */
	if (drc) {
		j->dest = NULL;
		co_reply_error(r, &err, dix->valuestring);
		cm_buf_free(&names);
		job_free(j);
		cJSON_Delete(body);
		return;
	}
	j->search = search_body(cJSON_GetObjectItemCaseSensitive(src, "query"),
	                        cJSON_GetObjectItemCaseSensitive(src, "_source"), true, size);
	char desc[512];
	snprintf(desc, sizeof(desc), "reindex from [%s] to [%s]", (const char *)names.data,
	         dix->valuestring);
	cm_buf_free(&names);
	cJSON_Delete(body);
	start(r, j, desc);
}
