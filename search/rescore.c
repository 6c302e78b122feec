/* "rescore" with ES's query rescorer, on one shard: the shard's top hits
 * (best first) are scored again by the rescore query, doc by doc through
 * its iterators, and combined with their first scores by score_mode. */
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"

static float
rescore_combine(const sr_rescore *rs, float first, bool matched, float second)
{
	float p = first * rs->query_weight;
	if (!matched)
		return p;
	float q = second * rs->rescore_query_weight;
	switch (rs->mode) {
	case SR_RESCORE_MULTIPLY:
		return p * q;
	case SR_RESCORE_AVG:
		return (p + q) / 2;
	case SR_RESCORE_MAX:
		return p > q ? p : q;
	case SR_RESCORE_MIN:
		return p < q ? p : q;
	default:
		return p + q;
	}
}

static int
by_seg_doc_entry(const void *a, const void *b)
{
	const sr_topk_entry *x = *(sr_topk_entry *const *)a, *y = *(sr_topk_entry *const *)b;
	if (x->seg != y->seg)
		return x->seg < y->seg ? -1 : 1;
	return (x->doc > y->doc) - (x->doc < y->doc);
}

static int
by_score_entry(const void *a, const void *b)
{
	const sr_topk_entry *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return (x->gdoc > y->gdoc) - (x->gdoc < y->gdoc);
}

cm_err
sr_rescore_window(sr_exec *x, const sr_rescore *rs, sr_topk_entry *e, size_t n)
{
	size_t w = n < rs->window_size ? n : rs->window_size;
	if (!w)
		return CM_OK;
	sr_plan *plan = NULL;
	cm_err rc = sr_plan_compile(x, rs->query, true, &plan);
	if (rc)
		return rc;
	sr_topk_entry **order = cm_malloc(CM_MEM_SEARCH, w * sizeof(*order));
	for (size_t i = 0; i < w; i++)
		order[i] = &e[i];
	qsort(order, w, sizeof(*order), by_seg_doc_entry);
	sr_it *it = NULL;
	size_t seg = SIZE_MAX;
	for (size_t i = 0; i < w && !rc; i++) {
		sr_topk_entry *en = order[i];
		if (en->seg != seg) {
			sr_it_free(it);
			it = NULL;
			seg = en->seg;
			if ((rc = sr_it_build(x, seg, plan, &it)))
				break;
		}
		/* no iterator (the deadline passed while building): unmatched */
		uint32_t d = it ? it->doc : ST_NO_MORE_DOCS;
		if (it && d < en->doc)
			d = it->ops->advance(it, en->doc);
		bool matched = it && d == en->doc;
		en->score =
		    rescore_combine(rs, en->score, matched, matched ? it->ops->score(it) : 0);
	}
	sr_it_free(it);
	sr_plan_free(plan);
	cm_free(CM_MEM_SEARCH, order);
	if (!rc)
		qsort(e, w, sizeof(*e), by_score_entry);
	return rc;
}
