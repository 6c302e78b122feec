#define _GNU_SOURCE
/* sr_search_shard: runs the compiled query over every segment window by
 * window, counts (exactly, or up to track_total_hits), feeds aggregations,
 * keeps the top from+size in a bounded heap (by score or by sort keys,
 * ties by global doc), and once the count is settled passes the heap's
 * worst score down so term iterators skip blocks whose impacts cannot
 * beat it (block-max). Then fetches _id, _source and metadata of the
 * winners. */
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"
#include "fetch.h"
#include "highlight.h"
#include "sr_agg.h"

#define MAX_TOPK (1u << 20) /* from + size bound (the coordinator caps max_result_window) */

typedef struct topk {
	sr_exec *x;
	const sr_request *req;
	sr_sorter sorter;
	bool by_score;   /* default sort */
	bool scored;     /* scores computed */
	size_t k;
	sr_topk_entry *heap; /* worst at [0] */
	size_t n;
	sr_sortval *slab;    /* k+1 rows of nkeys */
	size_t nkeys;
	sr_sortval *cand;    /* one row */
	uint64_t total;
	uint64_t threshold; /* track_total_hits */
	bool skipping;      /* block-max enabled: total is a lower bound */
	bool can_skip;
	uint64_t terminate_after, collected;
	bool terminated;
	float max_score;
	sr_collector agg;
	bool has_agg;
	uint32_t *docs; /* window doc list for aggregations */
	float *dscores;
	size_t si;
} topk;

/* true when a ranks after b */
static bool
worse(const topk *t, const sr_topk_entry *a, const sr_topk_entry *b)
{
	if (t->by_score) {
		if (a->score != b->score)
			return a->score < b->score;
	} else {
		int c = sr_sorter_cmp(&t->sorter, a->vals, b->vals);
		if (c)
			return c > 0;
	}
	return a->gdoc > b->gdoc;
}

static void
heap_down(topk *t, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < t->n && worse(t, &t->heap[l], &t->heap[m]))
			m = l;
		if (r < t->n && worse(t, &t->heap[r], &t->heap[m]))
			m = r;
		if (m == i)
			return;
		sr_topk_entry e = t->heap[i];
		t->heap[i] = t->heap[m];
		t->heap[m] = e;
		i = m;
	}
}

static void
heap_up(topk *t, size_t i)
{
	while (i) {
		size_t p = (i - 1) / 2;
		if (!worse(t, &t->heap[i], &t->heap[p]))
			return;
		sr_topk_entry e = t->heap[i];
		t->heap[i] = t->heap[p];
		t->heap[p] = e;
		i = p;
	}
}

/* Offers a candidate whose sort values (if any) are in t->cand. */
static void
offer(topk *t, float score, uint32_t gdoc, uint32_t doc)
{
	sr_topk_entry e = {score, gdoc, (uint32_t)t->si, doc, t->cand};
	if (t->n < t->k) {
		sr_topk_entry *slot = &t->heap[t->n];
		sr_sortval *row = slot->vals;
		if (t->nkeys)
			memcpy(row, t->cand, t->nkeys * sizeof(sr_sortval));
		e.vals = row;
		*slot = e;
		heap_up(t, t->n++);
		return;
	}
	if (!worse(t, &t->heap[0], &e))
		return;
	sr_sortval *row = t->heap[0].vals;
	if (t->nkeys)
		memcpy(row, t->cand, t->nkeys * sizeof(sr_sortval));
	e.vals = row;
	t->heap[0] = e;
	heap_down(t, 0);
}

static cm_err
on_window(void *self, size_t si, uint32_t lo, uint32_t hi, const uint64_t *bits,
          const float *scores, float *min_score)
{
	topk *t = self;
	sr_exec *x = t->x;
	size_t nw = (hi - lo + 63) / 64;
	uint64_t n = 0;
	for (size_t w = 0; w < nw; w++)
		n += (uint64_t)__builtin_popcountll(bits[w]);
	if (!n)
		return CM_OK;
	uint64_t limit = UINT64_MAX;
	if (t->terminate_after) {
		uint64_t left = t->terminate_after - t->collected;
		if (n >= left) {
			limit = left;
			t->terminated = true;
		}
	}
	uint32_t base = x->segs[si].doc_base;
	size_t nd = 0;
	uint64_t seen = 0;
	for (size_t w = 0; w < nw && seen < limit; w++) {
		for (uint64_t m = bits[w]; m && seen < limit; m &= m - 1) {
			uint32_t j = (uint32_t)(w * 64 + __builtin_ctzll(m));
			uint32_t doc = lo + j;
			float s = scores ? scores[j] : NAN;
			seen++;
			if (t->has_agg) {
				t->docs[nd] = doc;
				if (scores)
					t->dscores[nd] = s;
				nd++;
			}
			if (scores && s > t->max_score)
				t->max_score = s;
			if (!t->k)
				continue;
			if (t->by_score && !t->sorter.after) {
				if (t->n == t->k && s <= t->heap[0].score)
					continue;
				offer(t, s, base + doc, doc);
				continue;
			}
			if (t->nkeys && t->n == t->k) {
				/* cheap reject on the first key against the current worst */
				cm_err rc = sr_sorter_key_value(&t->sorter, x, si, 0, doc, base + doc, s, t->cand);
				if (rc)
					return rc;
				if (sr_sorter_cmp_key(&t->sorter, 0, t->cand, t->heap[0].vals) > 0)
					continue;
			}
			if (t->nkeys) {
				cm_err rc = sr_sorter_values(&t->sorter, x, si, doc, base + doc, s, t->cand);
				if (rc)
					return rc;
				if (t->sorter.after && sr_sorter_cmp(&t->sorter, t->cand, t->sorter.after) <= 0)
					continue;
			}
			offer(t, s, base + doc, doc);
		}
	}
	t->total += seen;
	t->collected += seen;
	if (t->has_agg && nd)
		t->agg.collect(t->agg.self, t->docs, scores ? t->dscores : NULL, nd);
	if (t->terminated)
		return CM_ECLOSED; /* stops the segment loop; not an error */
	if (t->can_skip && t->n == t->k && t->total >= t->threshold) {
		t->skipping = true;
		*min_score = t->heap[0].score;
	}
	return CM_OK;
}

static int
entry_rank_cmp(const void *a, const void *b, void *self)
{
	const topk *t = self;
	const sr_topk_entry *x = a, *y = b;
	if (worse(t, x, y))
		return 1;
	if (worse(t, y, x))
		return -1;
	return 0;
}

/* Per-segment metadata columns, reused across hits of one segment. */
typedef struct meta_cols {
	size_t seg;
	const st_field_info *fi[3];
	st_colblock cb[3];
} meta_cols;

static const char *const meta_names[3] = {ST_FIELD_SEQ_NO, ST_FIELD_PRIMARY_TERM,
                                          ST_FIELD_VERSION};

static int64_t
meta_value(sr_exec *x, meta_cols *m, size_t si, uint32_t doc, int which)
{
	if (m->seg != si) {
		for (int i = 0; i < 3; i++) {
			st_colblock_free(&m->cb[i]);
			memset(&m->cb[i], 0, sizeof m->cb[i]);
			const st_field_info *fi = st_segment_field(x->segs[si].seg, meta_names[i]);
			m->fi[i] = fi && (fi->flags & ST_FI_COLUMN) ? fi : NULL;
		}
		m->seg = si;
	}
	if (!m->fi[which])
		return 0;
	const int64_t *v;
	int n = st_col_values_sparse(x->segs[si].txn, m->fi[which], &m->cb[which], doc, &v);
	return n > 0 ? v[0] : 0;
}

static cm_err
fetch_hit(topk *t, const sr_topk_entry *e, uint32_t shard, sr_hit *h, cm_buf *idb, cm_buf *src,
          meta_cols *meta)
{
	sr_exec *x = t->x;
	const sr_request *req = t->req;
	memset(h, 0, sizeof *h);
	if (req->query_phase_only) {
		h->score = t->scored ? e->score : NAN;
		h->shard = shard;
		h->doc = e->gdoc;
		if (t->nkeys) {
			h->sort = cm_calloc(CM_MEM_SEARCH, t->nkeys, sizeof(sr_sort_value));
			h->nsort = t->nkeys;
			sr_sorter_export(&t->sorter, e->vals, h->sort);
		}
		return CM_OK;
	}
	cm_buf_reset(idb);
	cm_buf_reset(src);
	bool want_src = req->fetch_source || sr_fetch_wanted(req) || req->highlight;
	cm_err rc = st_stored_get(x->segs[e->seg].txn, e->doc, idb, want_src ? src : NULL);
	if (rc)
		return cm_error_set(x->err, rc, "cannot read stored document");
	h->id = cm_strndup(CM_MEM_SEARCH, (const char *)idb->data, idb->len);
	h->score = t->scored ? e->score : NAN;
	h->shard = shard;
	h->doc = e->gdoc;
	/* an empty stored source: the mapping has _source disabled */
	if (req->fetch_source && src->len) {
		if (req->nincludes || req->nexcludes) {
			cm_buf f;
			cm_buf_init(&f, CM_MEM_SEARCH);
			rc = sr_source_filter((const char *)src->data, src->len, req->source_includes,
			                      req->nincludes, req->source_excludes, req->nexcludes, &f);
			if (rc) {
				cm_buf_free(&f);
				return cm_error_set(x->err, rc, "cannot filter _source");
			}
			h->source = cm_strndup(CM_MEM_SEARCH, (const char *)f.data, f.len);
			h->source_len = f.len;
			cm_buf_free(&f);
		} else {
			h->source = cm_strndup(CM_MEM_SEARCH, (const char *)src->data, src->len);
			h->source_len = src->len;
		}
	}
	if (req->highlight && src->len) {
		cm_buf hb;
		cm_buf_init(&hb, CM_MEM_SEARCH);
		rc = sr_highlight_render(req->highlight, st_reader_mapping(x->reader), req->query,
		                         (const char *)src->data, src->len, &hb, x->err);
		if (!rc && hb.len) {
			h->highlight = cm_strndup(CM_MEM_SEARCH, (const char *)hb.data, hb.len);
			h->highlight_len = hb.len;
		}
		cm_buf_free(&hb);
		if (rc)
			return rc;
	}
	if (sr_fetch_wanted(req) && src->len &&
	    (rc = sr_fetch_render(st_reader_mapping(x->reader), req, (const char *)src->data,
	                          src->len, &h->fields, &h->fields_len, x->err)))
		return rc;
	if (t->nkeys) {
		h->sort = cm_calloc(CM_MEM_SEARCH, t->nkeys, sizeof(sr_sort_value));
		h->nsort = t->nkeys;
		sr_sorter_export(&t->sorter, e->vals, h->sort);
	}
	if (req->seq_no_primary_term || req->version) {
		h->seq_no = (uint64_t)meta_value(x, meta, e->seg, e->doc, 0);
		h->primary_term = (uint64_t)meta_value(x, meta, e->seg, e->doc, 1);
		h->version = meta_value(x, meta, e->seg, e->doc, 2);
	}
	return CM_OK;
}

static int
by_seg_doc(const void *a, const void *b, void *heap)
{
	const sr_topk_entry *h = heap;
	const sr_topk_entry *x = &h[*(const size_t *)a], *y = &h[*(const size_t *)b];
	if (x->seg != y->seg)
		return x->seg < y->seg ? -1 : 1;
	return (x->doc > y->doc) - (x->doc < y->doc);
}

cm_err
sr_search_shard(st_reader *r, uint32_t shard, const sr_request *req, sr_shard_result *out,
                cm_error *err)
{
	memset(out, 0, sizeof *out);
	out->shard = shard;
	out->max_score = NAN;
	sr_exec x;
	cm_err rc = sr_exec_open(&x, r, req->deadline_ns, err);
	if (rc) {
		out->error = *x.err;
		return rc;
	}
	x.cancel = req->cancel;
	topk t;
	memset(&t, 0, sizeof t);
	t.x = &x;
	t.req = req;
	t.by_score = req->nsort == 0;
	bool score_key = false;
	for (size_t i = 0; i < req->nsort; i++)
		score_key |= req->sort[i].kind == SR_SORT_SCORE;
	uint64_t k = (uint64_t)req->from + req->size;
	if (k > MAX_TOPK) {
		rc = cm_error_set(x.err, CM_ELIMIT, "from + size must be less than or equal to %u", MAX_TOPK);
		goto done;
	}
	if (sr_fetch_wanted(req) && (rc = sr_fetch_check(st_reader_mapping(r), req, x.err)))
		goto done;
	t.k = (size_t)k;
	t.scored = (t.by_score || score_key || req->track_scores) && (t.k > 0 || req->aggs);
	t.threshold = req->track_total_hits < 0 ? 0 : (uint64_t)req->track_total_hits;
	t.terminate_after = req->terminate_after;
	t.max_score = -INFINITY;
	rc = sr_sorter_init(&t.sorter, &x, req, x.err);
	t.sorter.shard = shard;
	if (rc)
		goto done;
	t.nkeys = t.sorter.nkeys;
	sr_plan *plan = NULL;
	rc = sr_plan_compile(&x, req->query, t.scored, &plan);
	if (rc)
		goto done;
	t.can_skip = t.by_score && t.scored && !req->aggs && !req->terminate_after && t.k > 0 &&
	             req->track_total_hits != SR_TRACK_ALL;
	t.heap = cm_calloc(CM_MEM_SEARCH, t.k + 1, sizeof(sr_topk_entry));
	if (t.nkeys) {
		t.slab = cm_calloc(CM_MEM_SEARCH, (t.k + 1) * t.nkeys, sizeof(sr_sortval));
		for (size_t i = 0; i < t.k; i++)
			t.heap[i].vals = t.slab + i * t.nkeys;
		t.cand = t.slab + t.k * t.nkeys;
	}
	sr_agg_state *aggs = NULL;
	if (req->aggs) {
		aggs = sr_agg_state_new(req->aggs);
		t.agg = sr_agg_collector(aggs);
		t.has_agg = true;
		t.docs = cm_malloc(CM_MEM_SEARCH, SR_WIN * sizeof(uint32_t));
		t.dscores = cm_malloc(CM_MEM_SEARCH, SR_WIN * sizeof(float));
	}
	for (size_t si = 0; si < x.nseg && !rc && !t.terminated; si++) {
		if (sr_deadline_passed(&x))
			break;
		t.si = si;
		sr_it *it = NULL;
		uint64_t known;
		if (!t.k && !t.has_agg && !t.terminate_after &&
		    sr_plan_seg_count(&x, si, plan, &known)) {
			t.total += known; /* a count alone: nothing to visit */
			continue;
		}
		rc = sr_it_build(&x, si, plan, &it);
		if (!rc && t.nkeys)
			rc = sr_sorter_segment(&t.sorter, &x, si);
		if (!rc && t.has_agg && t.agg.begin_segment)
			rc = t.agg.begin_segment(t.agg.self, &x.segs[si]);
		if (!rc) {
			rc = sr_run_windows(&x, si, it, t.scored, on_window, &t);
			if (rc == CM_ECLOSED && t.terminated)
				rc = CM_OK;
			if (t.has_agg && t.agg.end_segment)
				t.agg.end_segment(t.agg.self);
		}
		sr_it_free(it);
	}
	sr_plan_free(plan);
	if (rc) {
		if (aggs)
			sr_agg_state_free(aggs);
		goto done;
	}
	out->aggs = aggs;
	out->total = t.total;
	out->total_is_lower_bound = t.skipping;
	out->timed_out = x.timed_out;
	out->terminated_early = t.terminated;
	out->max_score = t.scored && t.total ? t.max_score : NAN;
	/* best first */
	qsort_r(t.heap, t.n, sizeof(sr_topk_entry), entry_rank_cmp, &t);
	if (t.n) {
		out->hits = cm_calloc(CM_MEM_SEARCH, t.n, sizeof(sr_hit));
		cm_buf idb, src;
		cm_buf_init(&idb, CM_MEM_SEARCH);
		cm_buf_init(&src, CM_MEM_SEARCH);
		/* fetch in storage order: hits sharing a stored block decode it once */
		size_t *order = cm_malloc(CM_MEM_SEARCH, t.n * sizeof(size_t));
		for (size_t i = 0; i < t.n; i++)
			order[i] = i;
		qsort_r(order, t.n, sizeof(size_t), by_seg_doc, t.heap);
		meta_cols meta;
		memset(&meta, 0, sizeof meta);
		meta.seg = SIZE_MAX;
		for (size_t i = 0; i < t.n && !rc; i++)
			rc = fetch_hit(&t, &t.heap[order[i]], shard, &out->hits[order[i]], &idb, &src, &meta);
		out->nhits = t.n;
		for (int i = 0; i < 3; i++)
			st_colblock_free(&meta.cb[i]);
		cm_free(CM_MEM_SEARCH, order);
		cm_buf_free(&idb);
		cm_buf_free(&src);
	}
	if (rc) {
		sr_shard_result_free(out);
		out->shard = shard;
	}
done:
	if (rc)
		out->error = *x.err;
	cm_free(CM_MEM_SEARCH, t.heap);
	cm_free(CM_MEM_SEARCH, t.slab);
	cm_free(CM_MEM_SEARCH, t.docs);
	cm_free(CM_MEM_SEARCH, t.dscores);
	sr_sorter_free(&t.sorter);
	sr_exec_close(&x);
	return rc;
}
