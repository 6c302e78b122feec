#define _GNU_SOURCE
/* sr_search_shard: runs the compiled query over every segment window by
 * window, counts (exactly, or up to track_total_hits), feeds aggregations,
 * keeps the top from+size in a bounded heap (by score or by sort keys,
 * ties by global doc), and once the count is settled passes the heap's
 * worst score down so term iterators skip blocks whose impacts cannot
 * beat it (block-max). Then fetches _id, _source and metadata of the
 * winners. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "exec.h"
#include "fetch.h"
#include "highlight.h"
#include "jsonw.h"
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
	bool seg_counted;   /* exact total: the segment's count is known without
	                     * visiting it, so block-max skips there all the same */
	float floor;        /* windows bounded by this need no scores (-inf: all do) */
	float bar_floor;    /* the least floor: from the merge's bar (-inf: none) */
	bool can_skip;
	uint64_t terminate_after, collected;
	bool terminated;
	float max_score;
	sr_collector agg;
	bool has_agg;
	uint32_t *docs; /* window doc list for aggregations */
	float *dscores;
	size_t si;
	float boost;  /* indices_boost of this shard's index */
	const char *index;       /* the shard's index, NULL unknown */
	int64_t hl_max_analyzed; /* index.highlight.max_analyzed_offset */
	sr_it *pf_it; /* post_filter over the current segment, NULL = none */
	uint64_t pf_bits[SR_WIN_WORDS];
	/* collapse: the best entry per value of the field */
	bool collapse;
	sr_sorter csorter; /* one key: the collapse field's value */
	struct cgroup *groups;
	size_t ngroups, capgroups;
	uint32_t *gmap; /* open addressing: group index + 1, 0 = empty */
	size_t gmask;
	uint64_t agg_ns; /* profile: time inside the aggregation collector */
	st_colblock ccb; /* the first sort key's block, for competitive_bits */
	uint64_t cbits[SR_WIN_WORDS];
} topk;

typedef struct cgroup {
	sr_topk_entry e;
	sr_sortval key;
	uint64_t hash;
} cgroup;

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
	sr_topk_entry e = {score, gdoc, (uint32_t)t->si, doc, t->cand, 0};
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

/* ---- collapse: one entry per value ---- */

static uint64_t
key_hash(const topk *t, const sr_sortval *k)
{
	uint64_t h = 1469598103934665603ull;
	if (k->missing)
		return 7;
	if (t->csorter.keys[0].is_keyword) {
		for (size_t i = 0; i < k->n; i++)
			h = (h ^ k->s[i]) * 1099511628211ull;
	} else {
		h = ((uint64_t)k->l ^ h) * 0x9E3779B97F4A7C15ull;
		h ^= h >> 29;
	}
	return h;
}

static bool
key_eq(const topk *t, const sr_sortval *a, const sr_sortval *b)
{
	if (a->missing || b->missing)
		return a->missing == b->missing;
	if (t->csorter.keys[0].is_keyword)
		return a->n == b->n && !memcmp(a->s, b->s, a->n);
	return a->l == b->l;
}

static void
gmap_grow(topk *t)
{
	size_t cap = t->gmask ? (t->gmask + 1) * 2 : 64;
	cm_free(CM_MEM_SEARCH, t->gmap);
	t->gmap = cm_calloc(CM_MEM_SEARCH, cap, sizeof(uint32_t));
	t->gmask = cap - 1;
	for (size_t g = 0; g < t->ngroups; g++) {
		size_t i = t->groups[g].hash & t->gmask;
		while (t->gmap[i])
			i = (i + 1) & t->gmask;
		t->gmap[i] = (uint32_t)g + 1;
	}
}

/* The candidate (sort values, if any, in t->cand) replaces its group's
 * entry when it ranks before it. */
static cm_err
collapse_offer(topk *t, size_t si, float score, uint32_t gdoc, uint32_t doc)
{
	sr_exec *x = t->x;
	sr_sortval key;
	cm_err rc;
	if (t->nkeys && (rc = sr_sorter_values(&t->sorter, x, si, doc, gdoc, score, t->cand)))
		return rc;
	if ((rc = sr_sorter_key_value(&t->csorter, x, si, 0, doc, gdoc, score, &key)))
		return rc;
	uint64_t h = key_hash(t, &key);
	if ((t->ngroups + 1) * 2 > t->gmask + 1)
		gmap_grow(t);
	size_t i = h & t->gmask;
	sr_topk_entry e = {score, gdoc, (uint32_t)si, doc, t->cand, 0};
	for (; t->gmap[i]; i = (i + 1) & t->gmask) {
		cgroup *g = &t->groups[t->gmap[i] - 1];
		if (g->hash != h || !key_eq(t, &g->key, &key))
			continue;
		if (worse(t, &g->e, &e)) {
			sr_sortval *row = g->e.vals;
			if (t->nkeys)
				memcpy(row, t->cand, t->nkeys * sizeof(sr_sortval));
			e.vals = row;
			g->e = e;
		}
		return CM_OK;
	}
	if (t->ngroups == t->capgroups) {
		t->capgroups = t->capgroups ? 2 * t->capgroups : 64;
		t->groups = cm_realloc(CM_MEM_SEARCH, t->groups, t->capgroups * sizeof(cgroup));
	}
	cgroup *g = &t->groups[t->ngroups];
	g->e = e;
	g->e.vals = NULL;
	if (t->nkeys) {
		g->e.vals = cm_malloc(CM_MEM_SEARCH, t->nkeys * sizeof(sr_sortval));
		memcpy(g->e.vals, t->cand, t->nkeys * sizeof(sr_sortval));
	}
	g->key = key;
	g->hash = h;
	t->gmap[i] = (uint32_t)++t->ngroups;
	return CM_OK;
}

/* Whether the first sort key's column zone of the block at lo puts every
 * doc after the heap's worst (a numeric field key, missing values last, a
 * mode that stays within the doc's values): then the window only counts,
 * as Lucene's competitive iterators skip non-competitive docs. */
static bool
window_beyond_worst(topk *t, size_t si, uint32_t lo)
{
	const sr_sort_field *k = &t->sorter.keys[0];
	const st_field_info *fi = t->sorter.fi[0];
	if (k->kind != SR_SORT_FIELD || k->is_keyword || k->is_id || k->geo || k->nested_path ||
	    k->missing_first || k->mode == SR_SORT_MODE_SUM || !fi || lo % ST_COL_BLOCK)
		return false;
	const sr_sortval *w = &t->heap[0].vals[0];
	if (w->missing)
		return false;
	int64_t mn, mx;
	uint32_t nv;
	if (st_col_zone(t->x->segs[si].txn, fi, lo / ST_COL_BLOCK, &mn, &mx, &nv))
		return false;
	if (!nv)
		return true; /* all missing: after every valued doc */
	return k->desc ? mx < w->l : mn > w->l;
}

/* The docs of the column block at lo whose first sort key can still
 * enter the full heap, into t->cbits (Lucene's competitive iterator over
 * points): the packed values compared with the heap's worst 64 at a time,
 * instead of reading and comparing each matching doc's value. Equal values
 * are kept (they may win on doc order or on later keys). The same keys as
 * window_beyond_worst; only a block with one value per doc (no missing
 * value, so missing_first cannot matter, and any mode is the value itself
 * but the sum, average and median of doubles, which round-trip through
 * double).
 * Returns 1 with the bits, 0 when no doc competes, -1 when not covered. */
static int
competitive_bits(topk *t, size_t si, uint32_t lo, cm_err *rc)
{
	const sr_sort_field *k = &t->sorter.keys[0];
	const st_field_info *fi = t->sorter.fi[0];
	if (k->kind != SR_SORT_FIELD || k->is_keyword || k->is_id || k->geo || k->nested_path ||
	    !fi || lo % ST_COL_BLOCK ||
	    (k->is_double && k->mode != SR_SORT_MODE_DEFAULT && k->mode != SR_SORT_MODE_MIN &&
	     k->mode != SR_SORT_MODE_MAX))
		return -1;
	const sr_sortval *w = &t->heap[0].vals[0];
	if (w->missing)
		return -1; /* missing last: every valued doc competes */
	int64_t rlo = k->desc ? w->l : INT64_MIN, rhi = k->desc ? INT64_MAX : w->l;
	int matched;
	*rc = st_col_range_bits(t->x->segs[si].txn, fi, lo / ST_COL_BLOCK, rlo, rhi, &t->ccb,
	                        t->cbits, &matched);
	if (*rc) {
		*rc = cm_error_set(t->x->err, *rc, "cannot read column [%s]", fi->name);
		return -1;
	}
	return matched;
}

/* Whether the full heap's worst may now bound what is visited: the count
 * no longer needs every doc (past track_total_hits, or this segment's
 * count is known). */
static bool
count_settled(const topk *t)
{
	return t->can_skip && t->n == t->k &&
	       (t->seg_counted || (t->req->track_total_hits != SR_TRACK_ALL && t->total >= t->threshold));
}

/* Docs come in increasing order and lose ties to earlier ones, so only a
 * strictly higher score competes (as Lucene's
 * nextUp(minCompetitiveScore)): a constant-score query stops being visited
 * once the heap is full. */
static float
heap_bar(const topk *t)
{
	return t->sorter.after ? t->heap[0].score : nextafterf(t->heap[0].score, INFINITY);
}

static cm_err
on_window(void *self, size_t si, uint32_t lo, uint32_t hi, const uint64_t *bits,
          const float *scores, float *min_score)
{
	topk *t = self;
	sr_exec *x = t->x;
	size_t nw = (hi - lo + 63) / 64;
	uint64_t n = 0;
	/* the words with a doc: a sparse window has a few of its 64 */
	uint8_t nzw[SR_WIN_WORDS];
	size_t nnz = 0;
	for (size_t w0 = 0; w0 < nw; w0 += 4) {
		/* four words at a time, past empty ones at once: a word at a
		 * time was a sixth of a selective aggregation's cost */
		size_t we = w0 + 4 < nw ? w0 + 4 : nw;
		uint64_t any = 0;
		if (we == w0 + 4)
			any = bits[w0] | bits[w0 + 1] | bits[w0 + 2] | bits[w0 + 3];
		else
			for (size_t w = w0; w < we; w++)
				any |= bits[w];
		for (size_t w = w0; any && w < we; w++) {
			nzw[nnz] = (uint8_t)w;
			nnz += bits[w] != 0;
			n += (uint64_t)__builtin_popcountll(bits[w]);
		}
	}
	if (!n)
		return CM_OK;
	if (!t->k && !t->has_agg && !t->pf_it && !t->terminate_after && !t->req->has_min_score) {
		t->total += n; /* a count alone: no doc is looked at */
		t->collected += n;
		return CM_OK;
	}
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
	uint64_t seen = 0, hits = 0;
	if (t->pf_it) {
		memset(t->pf_bits, 0, nw * sizeof(uint64_t));
		if (t->pf_it->doc < hi)
			t->pf_it->ops->fill(t->pf_it, lo, hi, t->pf_bits, NULL, -INFINITY);
	}
	if (!scores && t->floor > -INFINITY) {
		/* sr_run_windows_floor: no doc here can reach the full heap,
		 * or the page of the shards merged before this one */
		seen = hits = n;
		goto counted;
	}
	if (t->has_agg && !t->k && !t->pf_it && !t->req->has_min_score && limit == UINT64_MAX) {
		/* aggregations alone: the window's docs (and scores) in a row */
		seen = hits = n;
		float boost = t->boost;
		/* in locals: the stores might alias t, which was read again per doc */
		float mx = t->max_score, *ds = t->dscores;
		uint32_t *dd = t->docs;
		for (size_t wi = 0; wi < nnz; wi++) {
			size_t w = nzw[wi];
			for (uint64_t m = bits[w]; m; m &= m - 1) {
				uint32_t j = (uint32_t)(w * 64 + __builtin_ctzll(m));
				if (scores) {
					float sc = scores[j] * boost;
					if (sc > mx)
						mx = sc;
					ds[nd] = sc;
				}
				dd[nd++] = lo + j;
			}
		}
		t->max_score = mx;
		goto counted;
	}
	if (t->nkeys && t->n == t->k && t->k && !t->sorter.after && !t->collapse && !t->has_agg &&
	    !t->pf_it && !t->req->has_min_score && limit == UINT64_MAX && !scores &&
	    window_beyond_worst(t, si, lo)) {
		/* no doc of this column block can sort before the worst kept */
		seen = hits = n;
		goto counted;
	}
	/* Comparing the block costs about what reading 64 docs' values one by
	 * one does (~2 us against ~30 ns a doc): sparser windows read them. */
	if (n >= 64 && t->nkeys && t->n == t->k && t->k && !t->sorter.after && !t->collapse &&
	    !t->has_agg && !t->pf_it && !t->req->has_min_score && limit == UINT64_MAX && !scores) {
		cm_err rc = CM_OK;
		int c = competitive_bits(t, si, lo, &rc);
		if (rc)
			return rc;
		if (c >= 0) {
			/* every match counts; only the competitive ones are offered,
			 * each still checked against the worst as the heap improves */
			seen = hits = n;
			for (size_t wi = 0; c && wi < nnz; wi++) {
				size_t w = nzw[wi];
				for (uint64_t m = bits[w] & t->cbits[w]; m; m &= m - 1) {
					uint32_t doc = lo + (uint32_t)(w * 64 + __builtin_ctzll(m));
					rc = sr_sorter_key_value(&t->sorter, x, si, 0, doc,
					                         base + doc, NAN, t->cand);
					if (rc)
						return rc;
					if (sr_sorter_cmp_key(&t->sorter, 0, t->cand,
					                      t->heap[0].vals) > 0)
						continue;
					if ((rc = sr_sorter_values(&t->sorter, x, si, doc,
					                           base + doc, NAN, t->cand)))
						return rc;
					offer(t, NAN, base + doc, doc);
				}
			}
			goto counted;
		}
	}
	if (scores && t->by_score && t->k && !t->sorter.after && !t->collapse && !t->has_agg &&
	    !t->pf_it && !t->req->has_min_score && limit == UINT64_MAX) {
		/* top k by score alone: every doc counts, few compete */
		seen = hits = n;
		float boost = t->boost;
		for (size_t wi = 0; wi < nnz; wi++) {
			size_t w = nzw[wi];
			for (uint64_t m = bits[w]; m; m &= m - 1) {
				uint32_t j = (uint32_t)(w * 64 + __builtin_ctzll(m));
				float sc = scores[j] * boost;
				if (sc > t->max_score)
					t->max_score = sc;
				if (t->n == t->k && sc <= t->heap[0].score)
					continue;
				offer(t, sc, base + lo + j, lo + j);
			}
		}
		/* ties lose to earlier docs: a window bounded by the heap's
		 * minimum needs no scores */
		if (t->n == t->k && boost == 1.0f && !t->terminate_after)
			t->floor = t->heap[0].score > t->bar_floor ? t->heap[0].score : t->bar_floor;
		goto counted;
	}
	for (size_t wi = 0; wi < nnz && seen < limit; wi++) {
		size_t w = nzw[wi];
		for (uint64_t m = bits[w]; m && seen < limit; m &= m - 1) {
			uint32_t j = (uint32_t)(w * 64 + __builtin_ctzll(m));
			uint32_t doc = lo + j;
			float s = scores ? scores[j] * t->boost : NAN;
			/* min_score drops a doc from everything: hits, total, aggs */
			if (t->req->has_min_score && !(s >= t->req->min_score))
				continue;
			seen++;
			if (t->has_agg) {
				t->docs[nd] = doc;
				if (scores)
					t->dscores[nd] = s;
				nd++;
			}
			/* post_filter: aggregations saw the doc, hits do not */
			if (t->pf_it && !(t->pf_bits[j >> 6] & ((uint64_t)1 << (j & 63))))
				continue;
			hits++;
			if (scores && s > t->max_score)
				t->max_score = s;
			if (!t->k)
				continue;
			if (t->collapse) {
				cm_err rc = collapse_offer(t, si, s, base + doc, doc);
				if (rc)
					return rc;
				continue;
			}
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
counted:
	t->total += hits;
	t->collected += seen;
	if (t->has_agg && nd) {
		uint64_t a0 = t->req->profile ? cm_now_ns() : 0;
		t->agg.collect(t->agg.self, t->docs, scores ? t->dscores : NULL, nd);
		if (t->req->profile)
			t->agg_ns += cm_now_ns() - a0;
	}
	if (t->terminated)
		return CM_ECLOSED; /* stops the segment loop; not an error */
	if (count_settled(t)) {
		if (!t->seg_counted)
			t->skipping = true;
		*min_score = heap_bar(t);
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
meta_value(const st_segment *seg, st_seg_txn *txn, meta_cols *m, size_t si, uint32_t doc, int which)
{
	if (m->seg != si) {
		for (int i = 0; i < 3; i++) {
			st_colblock_free(&m->cb[i]);
			memset(&m->cb[i], 0, sizeof m->cb[i]);
			const st_field_info *fi = st_segment_field(seg, meta_names[i]);
			m->fi[i] = fi && (fi->flags & ST_FI_COLUMN) ? fi : NULL;
		}
		m->seg = si;
	}
	if (!m->fi[which])
		return 0;
	const int64_t *v;
	int n = st_col_values_sparse(txn, m->fi[which], &m->cb[which], doc, &v);
	return n > 0 ? v[0] : 0;
}

/* The stored part of a hit, doc of segment si: _id, _source (filtered)
 * into h, and the metadata the request asks for; src keeps the whole
 * source for what is rendered from it. */
static cm_err
fetch_stored(const sr_request *req, const st_segment *seg, st_seg_txn *txn, size_t si, uint32_t doc,
             bool want_src, sr_hit *h, cm_buf *idb, cm_buf *src, meta_cols *meta, cm_error *err)
{
	cm_buf_reset(idb);
	cm_buf_reset(src);
	cm_err rc = st_stored_get(txn, doc, idb, want_src ? src : NULL);
	if (rc)
		return cm_error_set(err, rc, "cannot read stored document");
	h->id = cm_strndup(CM_MEM_SEARCH, (const char *)idb->data, idb->len);
	/* _ignored, shown with every hit that has it, as ES does */
	const st_field_info *ig = st_segment_field(seg, ST_FIELD_IGNORED);
	if (ig && (ig->flags & ST_FI_COLUMN)) {
		st_colblock cb;
		const int64_t *v;
		memset(&cb, 0, sizeof cb);
		int k = st_col_values(txn, ig, &cb, doc, &v);
		if (k > 0) {
			cm_buf j;
			cm_buf_init(&j, CM_MEM_SEARCH);
			cm_buf_put_u8(&j, '[');
			for (int i = 0; i < k; i++) {
				const uint8_t *t;
				size_t tl;
				if (st_ord_term(txn, ig, (uint64_t)v[i], &t, &tl) != CM_OK)
					continue;
				if (j.len > 1)
					cm_buf_put_u8(&j, ',');
				sr_jw_str(&j, (const char *)t, tl);
			}
			cm_buf_put_u8(&j, ']');
			h->ignored = cm_strndup(CM_MEM_SEARCH, (const char *)j.data, j.len);
			h->ignored_len = j.len;
			cm_buf_free(&j);
		}
		st_colblock_free(&cb);
	}
	/* an empty stored source: the mapping has _source disabled */
	if (req->fetch_source && src->len) {
		if (req->nincludes || req->nexcludes) {
			cm_buf f;
			cm_buf_init(&f, CM_MEM_SEARCH);
			rc = sr_source_filter((const char *)src->data, src->len, req->source_includes,
			                      req->nincludes, req->source_excludes, req->nexcludes, &f);
			if (rc) {
				cm_buf_free(&f);
				return cm_error_set(err, rc, "cannot filter _source");
			}
			h->source = cm_strndup(CM_MEM_SEARCH, (const char *)f.data, f.len);
			h->source_len = f.len;
			cm_buf_free(&f);
		} else {
			h->source = cm_strndup(CM_MEM_SEARCH, (const char *)src->data, src->len);
			h->source_len = src->len;
		}
	}
	if (req->seq_no_primary_term || req->version) {
		h->seq_no = (uint64_t)meta_value(seg, txn, meta, si, doc, 0);
		h->primary_term = (uint64_t)meta_value(seg, txn, meta, si, doc, 1);
		h->version = meta_value(seg, txn, meta, si, doc, 2);
	}
	return CM_OK;
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
	bool want_inner = sr_nested_wants_inner_hits(req->query);
	bool want_src = req->fetch_source || sr_fetch_wanted(req) || req->highlight || want_inner;
	h->score = t->scored ? e->score : NAN;
	h->shard = shard;
	h->doc = e->gdoc;
	cm_err rc = fetch_stored(req, x->segs[e->seg].seg, x->segs[e->seg].txn, e->seg, e->doc,
	                         want_src, h, idb, src, meta, x->err);
	if (rc)
		return rc;
	if (req->highlight && src->len) {
		cm_buf hb;
		cm_buf_init(&hb, CM_MEM_SEARCH);
		sr_hl_doc hd = {
		    .id = h->id, .index = t->index, .max_analyzed_offset = t->hl_max_analyzed};
		rc = sr_highlight_render_doc(req->highlight, st_reader_mapping(x->reader),
		                             req->query, (const char *)src->data, src->len, &hd,
		                             &hb, x->err);
		if (!rc && hb.len) {
			h->highlight = cm_strndup(CM_MEM_SEARCH, (const char *)hb.data, hb.len);
			h->highlight_len = hb.len;
		}
		cm_buf_free(&hb);
		if (rc)
			return rc;
	}
	if (want_inner) {
		cm_buf ib;
		cm_buf_init(&ib, CM_MEM_SEARCH);
		rc = sr_nested_inner_hits(x, e->seg, e->doc, req->query, h->id,
		                          (const char *)src->data, src->len, &ib);
		if (!rc) {
			h->inner_hits = cm_strndup(CM_MEM_SEARCH, (const char *)ib.data, ib.len);
			h->inner_hits_len = ib.len;
		}
		cm_buf_free(&ib);
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
	return CM_OK;
}

bool
sr_fetch_deferrable(const sr_request *req)
{
	/* what a hit renders from its document alone: the rest needs the
	 * shard's query state (collapse, rescore, profile) or the query */
	return req->size > 0 && !req->query_phase_only && !req->collapse_field && !req->nrescore &&
	       !req->profile && !req->highlight && !sr_fetch_wanted(req) &&
	       !sr_nested_wants_inner_hits(req->query);
}

static int
by_doc(const void *a, const void *b)
{
	const sr_hit *x = *(sr_hit *const *)a, *y = *(sr_hit *const *)b;
	return (x->doc > y->doc) - (x->doc < y->doc);
}

cm_err
sr_fetch_hits(st_reader *r, const sr_request *req, sr_hit **hits, size_t n, cm_error *err)
{
	size_t nseg = st_reader_nsegments(r);
	st_seg_txn **txns = cm_calloc(CM_MEM_SEARCH, nseg ? nseg : 1, sizeof(*txns));
	cm_buf idb, src;
	cm_buf_init(&idb, CM_MEM_SEARCH);
	cm_buf_init(&src, CM_MEM_SEARCH);
	meta_cols meta;
	memset(&meta, 0, sizeof meta);
	meta.seg = SIZE_MAX;
	/* storage order: hits sharing a stored block decode it once */
	qsort(hits, n, sizeof(*hits), by_doc);
	cm_err rc = CM_OK;
	size_t si = 0;
	uint32_t base = 0, end = nseg ? st_segment_max_doc(st_reader_segment(r, 0)) : 0;
	for (size_t i = 0; i < n && !rc; i++) {
		sr_hit *h = hits[i];
		while (si < nseg && h->doc >= end) {
			base = end;
			if (++si < nseg)
				end += st_segment_max_doc(st_reader_segment(r, si));
		}
		if (si == nseg) {
			rc = cm_error_set(err, CM_EINTERNAL, "hit past the shard's last document");
			break;
		}
		st_segment *seg = st_reader_segment(r, si);
		if (!txns[si] && (rc = st_seg_txn_begin(seg, &txns[si]))) {
			cm_error_set(err, rc, "cannot read segment: %s", cm_err_msg(rc));
			break;
		}
		rc = fetch_stored(req, seg, txns[si], si, h->doc - base, req->fetch_source, h, &idb,
		                  &src, &meta, err);
	}
	for (int i = 0; i < 3; i++)
		st_colblock_free(&meta.cb[i]);
	for (size_t i = 0; i < nseg; i++)
		if (txns[i])
			st_seg_txn_end(txns[i]);
	cm_free(CM_MEM_SEARCH, txns);
	cm_buf_free(&idb);
	cm_buf_free(&src);
	return rc;
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

/* ---- profile ---- */

typedef struct prof {
	uint64_t rewrite, build, query, fetch, rescore;
} prof;

static void
render_profile(const topk *t, const prof *p, sr_shard_result *out)
{
	const sr_request *req = t->req;
	cm_buf b;
	cm_buf_init(&b, CM_MEM_SEARCH);
	uint64_t q = p->query > t->agg_ns ? p->query - t->agg_ns : 0;
	const char *type = req->query ? sr_query_kind_name(req->query->kind) : "match_all";
	cm_buf_printf(&b, "[{\"id\":\"\",\"searches\":[{\"query\":[{\"type\":");
	sr_jw_cstr(&b, type);
	cm_buf_printf(&b, ",\"description\":");
	char desc[512];
	if (req->query && req->query->field && req->query->value)
		snprintf(desc, sizeof desc, "%.200s:%.200s", req->query->field, req->query->value);
	else
		snprintf(desc, sizeof desc, "%.200s",
		         req->query && req->query->field ? req->query->field : type);
	sr_jw_cstr(&b, desc);
	cm_buf_printf(&b,
	              ",\"time_in_nanos\":%llu,\"breakdown\":{\"create_weight\":%llu,"
	              "\"create_weight_count\":1,\"build_scorer\":%llu,"
	              "\"build_scorer_count\":%zu,\"next_doc\":%llu,\"next_doc_count\":%llu,"
	              "\"score\":0,\"score_count\":0,\"advance\":0,\"advance_count\":0,"
	              "\"match\":0,\"match_count\":0,\"shallow_advance\":0,"
	              "\"shallow_advance_count\":0,\"compute_max_score\":0,"
	              "\"compute_max_score_count\":0,\"set_min_competitive_score\":0,"
	              "\"set_min_competitive_score_count\":0}}]",
	              (unsigned long long)(p->rewrite + p->build + q),
	              (unsigned long long)p->rewrite, (unsigned long long)p->build, t->x->nseg,
	              (unsigned long long)q, (unsigned long long)t->collected);
	cm_buf_printf(&b,
	              ",\"rewrite_time\":%llu,\"collector\":[{\"name\":\"%s\","
	              "\"reason\":\"search_top_hits\",\"time_in_nanos\":%llu}]}]",
	              (unsigned long long)p->rewrite,
	              t->by_score ? "SimpleTopScoreDocCollector" : "SimpleFieldCollector",
	              (unsigned long long)(q + p->rescore));
	cm_buf_printf(&b, ",\"aggregations\":[");
	if (req->aggs)
		cm_buf_printf(
		    &b,
		    "{\"type\":\"aggregations\",\"description\":\"all top-level "
		    "aggregations\",\"time_in_nanos\":%llu,\"breakdown\":{\"collect\":%llu,"
		    "\"collect_count\":%llu,\"initialize\":0,\"build_aggregation\":0,"
		    "\"reduce\":0}}",
		    (unsigned long long)t->agg_ns, (unsigned long long)t->agg_ns,
		    (unsigned long long)t->collected);
	cm_buf_printf(&b, "],\"fetch_time_in_nanos\":%llu}]", (unsigned long long)p->fetch);
	out->profile = cm_strndup(CM_MEM_SEARCH, (const char *)b.data, b.len);
	out->profile_len = b.len;
	cm_buf_free(&b);
}

void
sr_profile_set_id(sr_shard_result *res, const char *node, const char *index, int shard)
{
	static const char head[] = "[{\"id\":\"\"";
	if (!res->profile || res->profile_len < sizeof(head) - 1 ||
	    memcmp(res->profile, head, sizeof(head) - 1))
		return;
	char id[600];
	snprintf(id, sizeof id, "[%.200s][%.200s][%d]", node ? node : "", index ? index : "",
	         shard);
	cm_buf b;
	cm_buf_init(&b, CM_MEM_SEARCH);
	cm_buf_put(&b, "[{\"id\":", 7);
	sr_jw_cstr(&b, id);
	cm_buf_put(&b, res->profile + sizeof(head) - 1, res->profile_len - (sizeof(head) - 1));
	cm_free(CM_MEM_SEARCH, res->profile);
	res->profile = cm_strndup(CM_MEM_SEARCH, (const char *)b.data, b.len);
	res->profile_len = b.len;
	cm_buf_free(&b);
}

/* Puts the collapse value first in the hit's "fields", as ES shows it
 * ({"f":[value], ...}): the merger reads it back from there. */
static void
collapse_fields(topk *t, sr_hit *h, const sr_sortval *key)
{
	const char *field = t->req->collapse_field;
	sr_sort_value v;
	memset(&v, 0, sizeof v);
	if (!key->missing)
		sr_sorter_export(&t->csorter, key, &v);
	cm_buf b;
	cm_buf_init(&b, CM_MEM_SEARCH);
	cm_buf_put_u8(&b, '{');
	sr_jw_cstr(&b, field);
	cm_buf_put(&b, ":[", 2);
	if (key->missing)
		cm_buf_put(&b, "null", 4);
	else if (v.type == SR_SV_STRING || v.type == SR_SV_IP)
		sr_jw_cstr(&b, v.s ? v.s : "");
	else if (v.type == SR_SV_ULONG)
		cm_buf_printf(&b, "%llu", (unsigned long long)st_col_to_ulong(v.l));
	else if (v.type == SR_SV_LONG)
		cm_buf_printf(&b, "%lld", (long long)v.l);
	else if (v.type == SR_SV_DOUBLE)
		sr_jw_double(&b, v.d);
	else
		cm_buf_put(&b, "null", 4);
	cm_buf_put_u8(&b, ']');
	/* the request's own "fields", without a second entry for the field */
	char *rest = NULL;
	if (h->fields) {
		cJSON *f = cJSON_ParseWithLength(h->fields, h->fields_len);
		if (cJSON_GetObjectItemCaseSensitive(f, field)) {
			cJSON_DeleteItemFromObjectCaseSensitive(f, field);
			char *p = cJSON_PrintUnformatted(f);
			rest = cm_strdup(CM_MEM_SEARCH, p ? p : "{}");
			cJSON_free(p);
		} else {
			rest = cm_strndup(CM_MEM_SEARCH, h->fields, h->fields_len);
		}
		cJSON_Delete(f);
	}
	const char *r = rest ? strchr(rest, '{') : NULL;
	if (r && r[1] && r[1] != '}') {
		cm_buf_put_u8(&b, ',');
		cm_buf_put(&b, r + 1, strlen(r + 1));
	} else {
		cm_buf_put_u8(&b, '}');
	}
	cm_free(CM_MEM_SEARCH, rest);
	cm_free(CM_MEM_SEARCH, h->fields);
	h->fields = cm_strndup(CM_MEM_SEARCH, (const char *)b.data, b.len);
	h->fields_len = b.len;
	cm_buf_free(&b);
	sr_sort_value_clear(&v);
}

static cm_err
collapse_init(topk *t, st_reader *r, cm_error *err)
{
	const char *field = t->req->collapse_field;
	const st_mapping *m = st_reader_mapping(r);
	const st_field_def *def = m ? st_mapping_find(m, field) : NULL;
	if (!def || def->type == ST_FT_OBJECT)
		return cm_error_set(err, CM_EINVAL,
		                    "no mapping found for `%s` in order to collapse on", field);
	switch (def->type) {
	case ST_FT_KEYWORD:
	case ST_FT_LONG:
	case ST_FT_INTEGER:
	case ST_FT_SHORT:
	case ST_FT_BYTE:
	case ST_FT_DOUBLE:
	case ST_FT_FLOAT:
	case ST_FT_HALF_FLOAT:
	case ST_FT_SCALED_FLOAT:
	case ST_FT_UNSIGNED_LONG:
		break;
	default:
		return cm_error_set(
		    err, CM_EINVAL,
		    "unknown type for collapse field `%s`, only keywords and numbers "
		    "are accepted",
		    field);
	}
	sr_sort_key key = {.kind = SR_SORT_FIELD,
	                   .field = (char *)field,
	                   .mode = SR_SORT_MODE_MIN};
	sr_request one;
	memset(&one, 0, sizeof one);
	one.sort = &key;
	one.nsort = 1;
	t->collapse = true;
	return sr_sorter_init(&t->csorter, t->x, &one, err);
}

cm_err
sr_search_shard(st_reader *r, uint32_t shard, const sr_request *req, sr_shard_result *out,
                cm_error *err)
{
	return sr_search_shard_in(r, shard, NULL, req, out, err);
}

cm_err
sr_search_shard_in(st_reader *r, uint32_t shard, const char *index, const sr_request *req,
                   sr_shard_result *out, cm_error *err)
{
	return sr_search_shard_bar(r, shard, index, req, NULL, out, err);
}

/* The phases' clock, read only for a profiled request: eight reads were
 * 3% of a selective aggregation's cost. */
static inline uint64_t
prof_now(const sr_request *req)
{
	return req->profile ? cm_now_ns() : 0;
}

cm_err
sr_search_shard_bar(st_reader *r, uint32_t shard, const char *index, const sr_request *req,
                    sr_hit_bar *bar, sr_shard_result *out, cm_error *err)
{
	return sr_search_shard_hl(r, shard, index, req, bar, SR_HL_MAX_ANALYZED_OFFSET, out, err);
}

cm_err
sr_search_shard_hl(st_reader *r, uint32_t shard, const char *index, const sr_request *req,
                   sr_hit_bar *bar, int64_t hl_max_analyzed_offset, sr_shard_result *out,
                   cm_error *err)
{
	prof pf;
	memset(&pf, 0, sizeof pf);
	uint64_t t_mark;
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
	uint64_t k = (uint64_t)req->from + req->size, page = k;
	/* rescoring looks at each rescorer's window of the shard's top hits */
	for (size_t i = 0; req->size && i < req->nrescore; i++)
		if (req->rescore[i].window_size > k)
			k = req->rescore[i].window_size;
	t.boost = sr_request_index_boost(req, index);
	t.index = index;
	t.hl_max_analyzed = hl_max_analyzed_offset;
	if (k > MAX_TOPK) {
		rc = cm_error_set(x.err, CM_ELIMIT, "from + size must be less than or equal to %u", MAX_TOPK);
		goto done;
	}
	if (sr_fetch_wanted(req) && (rc = sr_fetch_check(st_reader_mapping(r), req, index, x.err)))
		goto done;
	/* the aggregations' field checks hold for a shard without documents */
	if (req->aggs && (rc = sr_agg_validate(req->aggs, st_reader_mapping(r), x.err)))
		goto done;
	t.k = (size_t)k;
	t.scored = ((t.by_score || score_key || req->track_scores) && (t.k > 0 || req->aggs)) ||
	           req->has_min_score;
	t.floor = t.bar_floor = -INFINITY;
	t.threshold = req->track_total_hits < 0 ? 0 : (uint64_t)req->track_total_hits;
	t.terminate_after = req->terminate_after;
	t.max_score = -INFINITY;
	rc = sr_sorter_init(&t.sorter, &x, req, x.err);
	t.sorter.shard = shard;
	if (rc)
		goto done;
	t.nkeys = t.sorter.nkeys;
	if (req->collapse_field && (rc = collapse_init(&t, r, x.err)))
		goto done;
	sr_plan *plan = NULL, *pf_plan = NULL;
	t_mark = prof_now(req);
	rc = sr_plan_compile(&x, req->query, t.scored, &plan);
	if (!rc && req->post_filter)
		rc = sr_plan_compile(&x, req->post_filter, false, &pf_plan);
	pf.rewrite = prof_now(req) - t_mark;
	if (rc) {
		sr_plan_free(plan);
		goto done;
	}
	/* an exact total (track_total_hits: true) skips only in segments whose
	 * count is known (see seg_counted) */
	t.can_skip = t.by_score && t.scored && !req->aggs && !req->terminate_after && t.k > 0 &&
	             !req->post_filter && !req->has_min_score && !t.collapse && t.boost == 1.0f;
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
	/* Shards merged before this one hold the page's worst hit so far (the
	 * bar): a doc ranked after it cannot reach the page, so it starts as
	 * the floor, as the heap's worst would once full. A constant-score
	 * query whose score cannot beat it only counts (from the terms'
	 * counts when known), and no window bounded by it is scored. */
	if (bar && atomic_load(&bar->set) && t.by_score && t.scored && t.k && !req->nsort &&
	    !t.collapse && !req->nrescore && !t.sorter.after && t.boost == 1.0f && !t.has_agg &&
	    !pf_plan && !req->has_min_score && !t.terminate_after) {
		float bs = atomic_load(&bar->score);
		uint32_t bsh = atomic_load(&bar->shard);
		/* ties go to the lower shard: a tie with the bar still enters
		 * from a shard before the bar's */
		t.bar_floor = t.floor = shard > bsh ? bs : nextafterf(bs, -INFINITY);
	}
	for (size_t si = 0; si < x.nseg && !rc && !t.terminated; si++) {
		if (sr_deadline_passed(&x))
			break;
		t.si = si;
		sr_it *it = NULL;
		uint64_t known;
		if (!t.k && !t.has_agg && !t.terminate_after && !pf_plan && !req->has_min_score &&
		    sr_plan_seg_count(&x, si, plan, &known)) {
			t.total += known; /* a count alone: nothing to visit */
			continue;
		}
		t_mark = prof_now(req);
		rc = sr_it_build(&x, si, plan, &it);
		if (!rc && pf_plan)
			rc = sr_it_build(&x, si, pf_plan, &t.pf_it);
		pf.build += prof_now(req) - t_mark;
		if (!rc && t.nkeys)
			rc = sr_sorter_segment(&t.sorter, &x, si);
		if (!rc && t.collapse)
			rc = sr_sorter_segment(&t.csorter, &x, si);
		if (!rc && t.has_agg && t.agg.begin_segment)
			rc = t.agg.begin_segment(t.agg.self, &x.segs[si]);
		/* the segment's count known without visiting it: once no doc left
		 * can enter the heap, the rest is that count less those seen */
		bool rest = false, rest_known = t.k && t.by_score && t.scored && !t.has_agg &&
		                                !pf_plan && !req->has_min_score && !t.terminate_after &&
		                                !t.collapse && !t.sorter.after &&
		                                sr_plan_seg_count(&x, si, plan, &known);
		uint64_t seen_before = t.total;
		/* an exact total from doc_freq (Lucene's Weight#count): the
		 * segment's docs need no visit to be counted */
		t.seg_counted = rest_known && t.can_skip && req->track_total_hits == SR_TRACK_ALL;
		if (!rc) {
			t_mark = prof_now(req);
			/* A later segment starts at the bar already reached. Its
			 * first window with a hit would have said so: without
			 * deletes a doc of the iterator is one, and it puts the
			 * total past the threshold (relation gte either way). */
			float min0 = -INFINITY;
			if (count_settled(&t) && !x.segs[si].live && it->doc != ST_NO_MORE_DOCS) {
				if (!t.seg_counted)
					t.skipping = true;
				min0 = heap_bar(&t);
			}
			rc = sr_run_windows_floor(&x, si, it, t.scored, on_window, &t, &t.floor,
			                          rest_known ? &rest : NULL, min0);
			if (!rc && (rest || (t.seg_counted && !x.timed_out)))
				t.total = seen_before + known;
			else if (t.seg_counted)
				t.skipping = true; /* cut short: what was seen, a lower bound */
			t.seg_counted = false;
			if (rc == CM_ECLOSED && t.terminated)
				rc = CM_OK;
			if (t.has_agg && t.agg.end_segment)
				t.agg.end_segment(t.agg.self);
			pf.query += prof_now(req) - t_mark;
		}
		sr_it_free(it);
		sr_it_free(t.pf_it);
		t.pf_it = NULL;
	}
	/* samplers replay their chosen docs while the segments are open */
	if (!rc && aggs)
		rc = sr_agg_state_shard_end(aggs);
	sr_plan_free(plan);
	sr_plan_free(pf_plan);
	if (rc) {
		if (aggs) {
			/* an aggregation's own error (a field it cannot read) says why */
			const cm_error *ae = sr_agg_state_error(aggs);
			if (ae && ae->code && !x.err->code)
				*x.err = *ae;
			sr_agg_state_free(aggs);
		}
		goto done;
	}
	out->aggs = aggs;
	out->total = t.total;
	out->total_is_lower_bound = t.skipping;
	out->timed_out = x.timed_out;
	out->terminated_early = t.terminated;
	out->max_score = t.scored && t.total ? t.max_score : NAN;
	if (t.collapse) {
		/* the groups' best entries stand for the heap */
		cm_free(CM_MEM_SEARCH, t.heap);
		t.heap = cm_calloc(CM_MEM_SEARCH, t.ngroups + 1, sizeof(sr_topk_entry));
		for (size_t g = 0; g < t.ngroups; g++) {
			t.heap[g] = t.groups[g].e;
			t.heap[g].group = (uint32_t)g;
		}
		t.n = t.ngroups;
	}
	/* best first */
	qsort_r(t.heap, t.n, sizeof(sr_topk_entry), entry_rank_cmp, &t);
	t_mark = prof_now(req);
	for (size_t i = 0; i < req->nrescore && !rc; i++)
		rc = sr_rescore_window(&x, &req->rescore[i], t.heap, t.n);
	pf.rescore = prof_now(req) - t_mark;
	if (rc) {
		sr_shard_result_free(out);
		goto done;
	}
	if (req->nrescore && t.n)
		out->max_score = t.heap[0].score;
	if (t.n > page)
		t.n = (size_t)page;
	if (bar && atomic_load(&bar->set) && t.by_score && !req->nsort && !t.collapse &&
	    !req->nrescore && !t.sorter.after) {
		/* ranked after the merge's worst kept hit: cannot reach the page
		 * (the merge's order: score, then shard); not fetched */
		float bs = atomic_load(&bar->score);
		uint32_t bsh = atomic_load(&bar->shard);
		while (t.n > 0 && (t.heap[t.n - 1].score < bs ||
		                   (t.heap[t.n - 1].score == bs && shard > bsh)))
			t.n--;
	}
	t_mark = prof_now(req);
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
		for (size_t i = 0; t.collapse && !rc && i < t.n; i++)
			collapse_fields(&t, &out->hits[i], &t.groups[t.heap[i].group].key);
		for (int i = 0; i < 3; i++)
			st_colblock_free(&meta.cb[i]);
		cm_free(CM_MEM_SEARCH, order);
		cm_buf_free(&idb);
		cm_buf_free(&src);
	}
	if (!rc && req->profile) {
		pf.fetch = prof_now(req) - t_mark;
		render_profile(&t, &pf, out);
	}
	if (!rc && req->suggest)
		rc = sr_suggest_shard(req->suggest, r, req->deadline_ns, out, x.err);
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
	for (size_t g = 0; g < t.ngroups; g++)
		cm_free(CM_MEM_SEARCH, t.groups[g].e.vals);
	cm_free(CM_MEM_SEARCH, t.groups);
	cm_free(CM_MEM_SEARCH, t.gmap);
	st_colblock_free(&t.ccb);
	if (t.collapse)
		sr_sorter_free(&t.csorter);
	sr_sorter_free(&t.sorter);
	sr_exec_close(&x);
	return rc;
}
