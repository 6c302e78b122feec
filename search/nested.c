/* The nested query's join (Lucene's ToParentBlockJoinQuery): a segment
 * keeps each object of a nested field as a hidden doc right before its
 * parent (storage/segbuild.c), children before their nested parents. The
 * inner query runs over the live docs of the path; each match is joined to
 * the next doc of the parent level (the root docs, or the docs of the
 * enclosing nested query's path), and the parent's score combines its
 * matching children's as score_mode says. The matches are materialized
 * per segment: a bitset of parents and their scores. */
#include <math.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"

#define T CM_MEM_SEARCH

static uint64_t *
path_docs(sr_exec *x, size_t si, const char *path)
{
	const sr_seg_ctx *c = &x->segs[si];
	uint32_t max_doc = st_segment_max_doc(c->seg);
	const st_field_info *fi = st_segment_field(c->seg, ST_FIELD_NESTED_PATH);
	if (fi == NULL || !(fi->flags & ST_FI_POSTINGS) || max_doc == 0)
		return NULL;
	st_postings p;
	cm_err rc = st_postings_open(c->txn, fi, path, strlen(path), &p);
	if (rc == CM_ENOTFOUND)
		return NULL;
	if (rc) {
		cm_error_set(x->err, rc, "cannot read nested docs: %s", cm_err_msg(rc));
		return NULL;
	}
	uint64_t *bits = cm_calloc(T, st_bit_words(max_doc) + 1, sizeof(uint64_t));
	for (uint32_t d = st_postings_next(&p); d != ST_NO_MORE_DOCS; d = st_postings_next(&p))
		if (d < max_doc)
			st_bit_set(bits, d);
	if (st_postings_corrupt(&p))
		cm_error_set(x->err, CM_ECORRUPT, "corrupt postings of nested docs");
	return bits;
}

uint64_t *
sr_nested_docs(sr_exec *x, size_t si, const char *path)
{
	const uint64_t *live = st_reader_nested_live(x->reader, x->segs[si].seg_index);
	if (live == NULL)
		return NULL;
	uint64_t *bits = path_docs(x, si, path);
	if (bits == NULL)
		return NULL;
	size_t nw = st_bit_words(st_segment_max_doc(x->segs[si].seg));
	uint64_t any = 0;
	for (size_t w = 0; w < nw; w++)
		any |= bits[w] &= live[w];
	if (!any) {
		cm_free(T, bits);
		return NULL;
	}
	return bits;
}

uint64_t *
sr_nested_parents(sr_exec *x, size_t si, const char *parent)
{
	if (parent != NULL) {
		uint64_t *b = path_docs(x, si, parent);
		if (b == NULL) /* no such docs: nothing to join to */
			b = cm_calloc(T, st_bit_words(st_segment_max_doc(x->segs[si].seg)) + 1,
			              sizeof(uint64_t));
		return b;
	}
	uint32_t max_doc = st_segment_max_doc(x->segs[si].seg);
	const uint64_t *nested = st_segment_nested(x->segs[si].seg);
	size_t nw = st_bit_words(max_doc);
	uint64_t *b = cm_calloc(T, nw + 1, sizeof(uint64_t));
	for (size_t w = 0; w < nw; w++)
		b[w] = nested ? ~nested[w] : ~(uint64_t)0;
	if (max_doc & 63)
		b[nw - 1] &= ((uint64_t)1 << (max_doc & 63)) - 1;
	return b;
}

/* First set bit >= from, or max_doc. */
static uint32_t
next_bit(const uint64_t *bits, uint32_t from, uint32_t max_doc)
{
	if (from >= max_doc)
		return max_doc;
	size_t w = from >> 6, nw = st_bit_words(max_doc);
	uint64_t m = bits[w] & (~(uint64_t)0 << (from & 63));
	while (!m) {
		if (++w >= nw)
			return max_doc;
		m = bits[w];
	}
	uint32_t d = (uint32_t)(w * 64 + (uint32_t)__builtin_ctzll(m));
	return d < max_doc ? d : max_doc;
}

typedef struct nest_it {
	sr_it base;
	uint64_t *bits;
	float *scores; /* by doc, NULL when not scoring */
	uint32_t max_doc;
} nest_it;

static uint32_t
nest_next(sr_it *it)
{
	nest_it *n = (nest_it *)it;
	if (it->doc == ST_NO_MORE_DOCS)
		return it->doc;
	uint32_t d = next_bit(n->bits, it->doc + 1, n->max_doc);
	return it->doc = d < n->max_doc ? d : ST_NO_MORE_DOCS;
}

static uint32_t
nest_advance(sr_it *it, uint32_t t)
{
	nest_it *n = (nest_it *)it;
	if (t <= it->doc)
		return it->doc;
	uint32_t d = next_bit(n->bits, t, n->max_doc);
	return it->doc = d < n->max_doc ? d : ST_NO_MORE_DOCS;
}

static float
nest_score(sr_it *it)
{
	nest_it *n = (nest_it *)it;
	return n->scores && it->doc < n->max_doc ? n->scores[it->doc] : 0.0f;
}

static void
nest_free(sr_it *it)
{
	nest_it *n = (nest_it *)it;
	cm_free(T, n->bits);
	cm_free(T, n->scores);
	cm_free(T, n);
}

static const sr_it_ops nest_ops = {nest_next,        nest_advance, nest_score, sr_it_fill_generic,
                                   sr_it_upper_inf, nest_free};

typedef struct nest_acc {
	uint32_t parent; /* max_doc: none yet */
	uint32_t n;
	double sum;
	float min, max;
} nest_acc;

static void
acc_flush(nest_it *n, nest_acc *a, sr_nest_mode mode, float boost)
{
	if (a->parent >= n->max_doc || a->n == 0)
		return;
	st_bit_set(n->bits, a->parent);
	n->base.cost++;
	if (n->scores) {
		float s = 0;
		switch (mode) {
		case SR_NEST_AVG:
			s = (float)(a->sum / a->n);
			break;
		case SR_NEST_MAX:
			s = a->max;
			break;
		case SR_NEST_MIN:
			s = a->min;
			break;
		case SR_NEST_SUM:
			s = (float)a->sum;
			break;
		case SR_NEST_NONE:
			s = 0;
			break;
		}
		n->scores[a->parent] = s * boost;
	}
	a->n = 0;
	a->sum = 0;
}

sr_it *
sr_nested_it_new(sr_exec *x, size_t si, const sr_plan *pl)
{
	uint32_t max_doc = st_segment_max_doc(x->segs[si].seg);
	uint64_t *children = sr_nested_docs(x, si, pl->nest_path);
	if (children == NULL)
		return NULL;
	uint64_t *parents = sr_nested_parents(x, si, pl->nest_parent);
	sr_it *k = NULL;
	if (sr_it_build(x, si, pl->kids[0], &k) || k == NULL) {
		sr_it_free(k);
		cm_free(T, children);
		cm_free(T, parents);
		return NULL;
	}
	bool want = pl->scoring && pl->nest_mode != SR_NEST_NONE;
	nest_it *n = cm_calloc(T, 1, sizeof *n);
	n->base.ops = &nest_ops;
	n->base.scoring = pl->scoring;
	n->max_doc = max_doc;
	n->bits = cm_calloc(T, st_bit_words(max_doc) + 1, sizeof(uint64_t));
	n->scores = want ? cm_calloc(T, (size_t)max_doc + 1, sizeof(float)) : NULL;
	uint64_t wbits[SR_WIN_WORDS];
	float *wscores = want ? cm_malloc(T, SR_WIN * sizeof(float)) : NULL;
	nest_acc a = {.parent = max_doc};
	for (uint32_t lo = 0; lo < max_doc && k->doc != ST_NO_MORE_DOCS;) {
		if (k->doc >= lo + SR_WIN) {
			lo = k->doc & ~(uint32_t)(SR_WIN - 1);
			continue;
		}
		if (sr_deadline_passed(x))
			break;
		uint32_t hi = max_doc - lo > SR_WIN ? lo + SR_WIN : max_doc;
		size_t nw = ((size_t)(hi - lo) + 63) / 64;
		memset(wbits, 0, nw * sizeof(uint64_t));
		k->ops->fill(k, lo, hi, wbits, wscores, -INFINITY);
		for (size_t w = 0; w < nw; w++) {
			uint64_t m = wbits[w] & children[(lo >> 6) + w];
			while (m) {
				uint32_t i = (uint32_t)(w * 64 + (uint32_t)__builtin_ctzll(m));
				m &= m - 1;
				uint32_t child = lo + i;
				if (a.parent >= max_doc || child >= a.parent) {
					acc_flush(n, &a, pl->nest_mode, pl->boost);
					a.parent = next_bit(parents, child + 1, max_doc);
				}
				float s = wscores ? wscores[i] : 0.0f;
				if (a.n == 0 || s < a.min)
					a.min = s;
				if (a.n == 0 || s > a.max)
					a.max = s;
				a.sum += s;
				a.n++;
			}
		}
		lo = hi;
	}
	acc_flush(n, &a, pl->nest_mode, pl->boost);
	cm_free(T, wscores);
	sr_it_free(k);
	cm_free(T, children);
	cm_free(T, parents);
	if (n->base.cost == 0) {
		nest_free(&n->base);
		return NULL;
	}
	uint32_t d = next_bit(n->bits, 0, max_doc);
	n->base.doc = d < max_doc ? d : ST_NO_MORE_DOCS;
	return &n->base;
}
