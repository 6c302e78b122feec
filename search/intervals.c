/* The intervals query on one segment (Lucene's IntervalQuery): a doc
 * matches when its positions yield at least one interval of the rule
 * tree. Candidates come from the leaves' postings (conjunctions for
 * all_of, disjunctions for any_of, the filter's when it must match);
 * each candidate's intervals are then computed bottom-up. */
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"

typedef struct iv {
	int64_t s, e; /* first and last position */
	int64_t gaps; /* positions inside not covered by the parts */
} iv;

typedef struct ivlist {
	iv *v;
	size_t n, cap;
} ivlist;

typedef struct ivseg ivseg;
struct ivseg {
	const sr_ivnode *node;
	st_postings *post; /* SR_IVN_TERMS: the terms present in the segment */
	size_t npost;
	uint32_t *pos;
	uint32_t pcap;
	ivseg **kids;
	size_t nkids;
	ivseg *filter;
	ivlist out; /* the intervals of the doc last evaluated */
	int64_t *sufmin;
	size_t sufcap;
};

typedef struct iv_it {
	sr_it base;
	ivseg *root;
	float weight, freq;
	bool corrupt;
} iv_it;

static void
ivl_push(ivlist *l, int64_t s, int64_t e, int64_t gaps)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->v = cm_realloc(CM_MEM_SEARCH, l->v, l->cap * sizeof(iv));
	}
	l->v[l->n++] = (iv){s, e, gaps};
}

static int
iv_cmp(const void *a, const void *b)
{
	const iv *x = a, *y = b;
	if (x->s != y->s)
		return x->s < y->s ? -1 : 1;
	if (x->e != y->e)
		return x->e < y->e ? -1 : 1;
	return (x->gaps > y->gaps) - (x->gaps < y->gaps);
}

/* Sorted by start then end, without repeats (the fewest gaps kept). */
static void
ivl_sort(ivlist *l)
{
	if (l->n > 1)
		qsort(l->v, l->n, sizeof(iv), iv_cmp);
	size_t k = 0;
	for (size_t i = 0; i < l->n; i++)
		if (!k || l->v[i].s != l->v[k - 1].s || l->v[i].e != l->v[k - 1].e)
			l->v[k++] = l->v[i];
	l->n = k;
}

/* Keeps the minimal intervals: those containing no other one. */
static void
ivl_minimize(ivlist *l)
{
	ivl_sort(l);
	if (l->n < 2)
		return;
	/* from the right: a later interval starts no earlier, so it lies
	 * inside this one iff it also ends no later */
	int64_t min_end = INT64_MAX;
	for (size_t i = l->n; i-- > 0;) {
		int64_t e = l->v[i].e;
		if (min_end <= e)
			l->v[i].s = -1; /* marked: contains a later one */
		if (e < min_end)
			min_end = e;
	}
	size_t k = 0;
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].s >= 0)
			l->v[k++] = l->v[i];
	l->n = k;
}

static void
ivl_max_gaps(ivlist *l, int max_gaps)
{
	if (max_gaps < 0)
		return;
	size_t k = 0;
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].gaps <= max_gaps)
			l->v[k++] = l->v[i];
	l->n = k;
}

static bool
positive_filter(sr_iv_filter f)
{
	return f == SR_IVF_AFTER || f == SR_IVF_BEFORE || f == SR_IVF_CONTAINED_BY ||
	       f == SR_IVF_CONTAINING || f == SR_IVF_OVERLAPPING;
}

/* ---- candidates: the next doc >= target that may yield an interval ---- */

static uint32_t seg_cand(ivseg *s, uint32_t target);

static uint32_t
post_advance(st_postings *p, uint32_t target)
{
	if (p->doc < target || p->doc == UINT32_MAX - 1)
		st_postings_advance(p, target);
	return p->doc;
}

static uint32_t
base_cand(ivseg *s, uint32_t target)
{
	uint32_t d = ST_NO_MORE_DOCS;
	switch (s->node->kind) {
	case SR_IVN_TERMS:
		for (size_t i = 0; i < s->npost; i++) {
			uint32_t di = post_advance(&s->post[i], target);
			if (di < d)
				d = di;
		}
		return d;
	case SR_IVN_OR:
		for (size_t i = 0; i < s->nkids; i++) {
			uint32_t di = seg_cand(s->kids[i], target);
			if (di < d)
				d = di;
		}
		return d;
	case SR_IVN_ORDERED:
	case SR_IVN_UNORDERED:
		d = seg_cand(s->kids[0], target);
		for (size_t i = 1; i < s->nkids && d != ST_NO_MORE_DOCS;) {
			uint32_t di = seg_cand(s->kids[i], d);
			if (di > d) {
				d = seg_cand(s->kids[0], di);
				i = 1;
			} else {
				i++;
			}
		}
		return d;
	}
	return d;
}

static uint32_t
seg_cand(ivseg *s, uint32_t target)
{
	for (;;) {
		uint32_t d = base_cand(s, target);
		if (d == ST_NO_MORE_DOCS || !s->filter || !positive_filter(s->node->filter))
			return d;
		uint32_t f = seg_cand(s->filter, d);
		if (f == d || f == ST_NO_MORE_DOCS)
			return f;
		target = f;
	}
}

/* ---- intervals of one doc ---- */

static bool seg_eval(ivseg *s, uint32_t doc);

static bool
eval_terms(ivseg *s, uint32_t doc)
{
	for (size_t i = 0; i < s->npost; i++) {
		st_postings *p = &s->post[i];
		if (post_advance(p, doc) != doc)
			continue;
		if (p->freq > s->pcap) {
			s->pcap = p->freq * 2;
			s->pos = cm_realloc(CM_MEM_SEARCH, s->pos, s->pcap * sizeof(uint32_t));
		}
		int got = st_postings_positions(p, s->pos, s->pcap);
		if (got < 0)
			return false;
		for (int k = 0; k < got; k++)
			ivl_push(&s->out, s->pos[k], s->pos[k], 0);
	}
	ivl_sort(&s->out);
	return true;
}

/* Each start of the first kid, followed by the interval of each next kid
 * that starts after the one before ends and ends first (a suffix minimum
 * over the kid's intervals sorted by start). */
static void
eval_ordered(ivseg *s)
{
	const ivlist *first = &s->kids[0]->out;
	size_t total = 0;
	for (size_t k = 1; k < s->nkids; k++)
		total += s->kids[k]->out.n;
	if (total > s->sufcap) {
		s->sufcap = total * 2;
		s->sufmin = cm_realloc(CM_MEM_SEARCH, s->sufmin, s->sufcap * sizeof(int64_t));
	}
	/* sufmin[k][i]: index of the earliest-ending interval among i.. */
	int64_t *base = s->sufmin;
	for (size_t k = 1; k < s->nkids; k++) {
		const ivlist *l = &s->kids[k]->out;
		for (size_t i = l->n; i-- > 0;)
			base[i] = i + 1 < l->n && l->v[(size_t)base[i + 1]].e < l->v[i].e
			              ? base[i + 1]
			              : (int64_t)i;
		base += l->n;
	}
	for (size_t a = 0; a < first->n; a++) {
		int64_t end = first->v[a].e, covered = first->v[a].e - first->v[a].s + 1;
		bool ok = true;
		base = s->sufmin;
		for (size_t k = 1; k < s->nkids && ok; k++) {
			const ivlist *l = &s->kids[k]->out;
			size_t lo = 0, hi = l->n; /* first interval starting after end */
			while (lo < hi) {
				size_t mid = (lo + hi) / 2;
				if (l->v[mid].s > end)
					hi = mid;
				else
					lo = mid + 1;
			}
			if (lo == l->n) {
				ok = false;
			} else {
				const iv *b = &l->v[(size_t)base[lo]];
				end = b->e;
				covered += b->e - b->s + 1;
			}
			base += l->n;
		}
		if (ok)
			ivl_push(&s->out, first->v[a].s, end, end - first->v[a].s + 1 - covered);
	}
	ivl_minimize(&s->out);
}

/* Sweeps the kids' lists together: each step records the span of their
 * current intervals and moves the one that starts first. */
static void
eval_unordered(ivseg *s)
{
	size_t idx[64] = {0};
	size_t n = s->nkids;
	for (;;) {
		int64_t lo = INT64_MAX, hi = INT64_MIN, covered = 0;
		size_t at = 0;
		for (size_t k = 0; k < n; k++) {
			const iv *c = &s->kids[k]->out.v[idx[k]];
			if (c->s < lo) {
				lo = c->s;
				at = k;
			}
			if (c->e > hi)
				hi = c->e;
			covered += c->e - c->s + 1;
		}
		ivl_push(&s->out, lo, hi, hi - lo + 1 - covered);
		if (++idx[at] >= s->kids[at]->out.n)
			break;
	}
	ivl_minimize(&s->out);
}

static bool
passes(const iv *a, sr_iv_filter f, const ivlist *ref)
{
	bool any = false;
	for (size_t i = 0; i < ref->n && !any; i++) {
		const iv *b = &ref->v[i];
		switch (f) {
		case SR_IVF_CONTAINING:
		case SR_IVF_NOT_CONTAINING:
			any = a->s <= b->s && b->e <= a->e;
			break;
		case SR_IVF_CONTAINED_BY:
		case SR_IVF_NOT_CONTAINED_BY:
			any = b->s <= a->s && a->e <= b->e;
			break;
		case SR_IVF_OVERLAPPING:
		case SR_IVF_NOT_OVERLAPPING:
			any = b->s <= a->e && b->e >= a->s;
			break;
		case SR_IVF_BEFORE:
			any = a->e < b->s;
			break;
		case SR_IVF_AFTER:
			any = a->s > b->e;
			break;
		case SR_IVF_NONE:
			return true;
		}
	}
	return positive_filter(f) ? any : !any;
}

static bool
seg_eval(ivseg *s, uint32_t doc)
{
	s->out.n = 0;
	const sr_ivnode *nd = s->node;
	if (nd->kind == SR_IVN_TERMS) {
		if (!eval_terms(s, doc))
			return false;
	} else {
		bool all = true;
		for (size_t k = 0; k < s->nkids; k++) {
			if (!seg_eval(s->kids[k], doc))
				return false;
			all &= s->kids[k]->out.n > 0;
		}
		if (nd->kind == SR_IVN_OR) {
			for (size_t k = 0; k < s->nkids; k++)
				for (size_t i = 0; i < s->kids[k]->out.n; i++)
					ivl_push(&s->out, s->kids[k]->out.v[i].s,
					         s->kids[k]->out.v[i].e, s->kids[k]->out.v[i].gaps);
			ivl_sort(&s->out);
		} else if (all && nd->kind == SR_IVN_ORDERED) {
			eval_ordered(s);
		} else if (all) {
			eval_unordered(s);
		}
		ivl_max_gaps(&s->out, nd->max_gaps);
	}
	if (s->filter && s->out.n) {
		if (!seg_eval(s->filter, doc))
			return false;
		size_t k = 0;
		for (size_t i = 0; i < s->out.n; i++)
			if (passes(&s->out.v[i], nd->filter, &s->filter->out))
				s->out.v[k++] = s->out.v[i];
		s->out.n = k;
	}
	return true;
}

/* ---- the iterator ---- */

static void
seg_free(ivseg *s)
{
	if (!s)
		return;
	cm_free(CM_MEM_SEARCH, s->post);
	cm_free(CM_MEM_SEARCH, s->pos);
	for (size_t k = 0; k < s->nkids; k++)
		seg_free(s->kids[k]);
	cm_free(CM_MEM_SEARCH, s->kids);
	seg_free(s->filter);
	cm_free(CM_MEM_SEARCH, s->out.v);
	cm_free(CM_MEM_SEARCH, s->sufmin);
	cm_free(CM_MEM_SEARCH, s);
}

static ivseg *
seg_new(const sr_seg_ctx *c, const sr_ivnode *nd)
{
	ivseg *s = cm_calloc(CM_MEM_SEARCH, 1, sizeof *s);
	s->node = nd;
	if (nd->kind == SR_IVN_TERMS && nd->fs && nd->nterms) {
		const st_field_info *fi = st_segment_field(c->seg, nd->fs->name);
		if (fi && (fi->flags & ST_FI_POSITIONS)) {
			s->post = cm_calloc(CM_MEM_SEARCH, nd->nterms, sizeof(st_postings));
			for (size_t i = 0; i < nd->nterms; i++) {
				st_postings *p = &s->post[s->npost];
				if (st_postings_open(c->txn, fi, nd->terms[i].p, nd->terms[i].n,
				                     p) == CM_OK) {
					st_postings_next(p);
					s->npost++;
				}
			}
		}
	}
	if (nd->nkids) {
		s->kids = cm_calloc(CM_MEM_SEARCH, nd->nkids, sizeof(ivseg *));
		for (size_t k = 0; k < nd->nkids; k++)
			s->kids[k] = seg_new(c, nd->kids[k]);
		s->nkids = nd->nkids;
	}
	if (nd->filter_node)
		s->filter = seg_new(c, nd->filter_node);
	return s;
}

static uint32_t
iv_leap(iv_it *it, uint32_t target)
{
	for (;;) {
		uint32_t d = seg_cand(it->root, target);
		if (d == ST_NO_MORE_DOCS)
			return it->base.doc = d;
		if (!seg_eval(it->root, d)) {
			it->corrupt = true;
			return it->base.doc = ST_NO_MORE_DOCS;
		}
		const ivlist *l = &it->root->out;
		if (l->n) {
			/* Lucene's IntervalScorer: each interval adds 1 / its length */
			float f = 0;
			for (size_t i = 0; i < l->n; i++)
				f += 1.0f / (float)(l->v[i].e - l->v[i].s + 1);
			it->freq = f;
			return it->base.doc = d;
		}
		target = d + 1;
	}
}

static uint32_t
iv_next(sr_it *it)
{
	if (it->doc == ST_NO_MORE_DOCS)
		return it->doc;
	return iv_leap((iv_it *)it, it->doc + 1);
}

static uint32_t
iv_advance(sr_it *it, uint32_t t)
{
	if (t <= it->doc)
		return it->doc;
	return iv_leap((iv_it *)it, t);
}

/* IntervalScoreFunction's saturation with pivot 1: boost * f / (f + 1) */
static float
iv_score(sr_it *it)
{
	iv_it *v = (iv_it *)it;
	return it->scoring ? v->weight * v->freq / (v->freq + 1.0f) : 0.0f;
}

static float
iv_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	(void)lo, (void)hi;
	return it->scoring ? ((iv_it *)it)->weight : 0.0f;
}

static void
iv_free(sr_it *it)
{
	iv_it *v = (iv_it *)it;
	seg_free(v->root);
	cm_free(CM_MEM_SEARCH, v);
}

static const sr_it_ops iv_ops = {iv_next,  iv_advance, iv_score, sr_it_fill_generic,
                                 iv_upper, iv_free};

static bool
fits(const sr_ivnode *nd)
{
	/* eval_unordered keeps a cursor per kid on the stack */
	if (nd->kind == SR_IVN_UNORDERED && nd->nkids > 64)
		return false;
	for (size_t k = 0; k < nd->nkids; k++)
		if (!fits(nd->kids[k]))
			return false;
	return !nd->filter_node || fits(nd->filter_node);
}

sr_it *
sr_intervals_it_new(sr_exec *x, size_t si, const sr_plan *pl)
{
	if (!fits(pl->iv)) {
		cm_error_set(x->err, CM_ELIMIT,
		             "[intervals] all_of takes at most 64 rules unordered");
		return NULL;
	}
	iv_it *it = cm_calloc(CM_MEM_SEARCH, 1, sizeof *it);
	it->base.ops = &iv_ops;
	it->base.scoring = pl->scoring;
	it->weight = pl->weight;
	it->root = seg_new(&x->segs[si], pl->iv);
	it->base.cost = st_segment_max_doc(x->segs[si].seg);
	it->base.doc = 0;
	iv_leap(it, 0);
	if (it->corrupt)
		cm_error_set(x->err, CM_ECORRUPT, "corrupt positions in an intervals query");
	return &it->base;
}
