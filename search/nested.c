/* The nested query's join (Lucene's ToParentBlockJoinQuery): a segment
 * keeps each object of a nested field as a hidden doc right before its
 * parent (storage/segbuild.c), children before their nested parents. The
 * inner query runs over the live docs of the path; each match is joined to
 * the next doc of the parent level (the root docs, or the docs of the
 * enclosing nested query's path), and the parent's score combines its
 * matching children's as score_mode says. The matches are materialized
 * per segment: a bitset of parents and their scores. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"
#include "jsonw.h"

#define T CM_MEM_SEARCH

static uint64_t *
path_docs(sr_exec *x, size_t si, const char *path)
{
	return sr_nested_path_docs(&x->segs[si], path, x->err);
}

uint64_t *
sr_nested_path_docs(const sr_seg_ctx *c, const char *path, cm_error *err)
{
	uint32_t max_doc = st_segment_max_doc(c->seg);
	const st_field_info *fi = st_segment_field(c->seg, ST_FIELD_NESTED_PATH);
	if (fi == NULL || !(fi->flags & ST_FI_POSTINGS) || max_doc == 0)
		return NULL;
	st_postings p;
	cm_err rc = st_postings_open(c->txn, fi, path, strlen(path), &p);
	if (rc == CM_ENOTFOUND)
		return NULL;
	if (rc) {
		cm_error_set(err, rc, "cannot read nested docs: %s", cm_err_msg(rc));
		return NULL;
	}
	uint64_t *bits = cm_calloc(T, st_bit_words(max_doc) + 1, sizeof(uint64_t));
	for (uint32_t d = st_postings_next(&p); d != ST_NO_MORE_DOCS; d = st_postings_next(&p))
		if (d < max_doc)
			st_bit_set(bits, d);
	if (st_postings_corrupt(&p))
		cm_error_set(err, CM_ECORRUPT, "corrupt postings of nested docs");
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

uint32_t
sr_nested_next_bit(const uint64_t *bits, uint32_t from, uint32_t max_doc)
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
	uint32_t d = sr_nested_next_bit(n->bits, it->doc + 1, n->max_doc);
	return it->doc = d < n->max_doc ? d : ST_NO_MORE_DOCS;
}

static uint32_t
nest_advance(sr_it *it, uint32_t t)
{
	nest_it *n = (nest_it *)it;
	if (t <= it->doc)
		return it->doc;
	uint32_t d = sr_nested_next_bit(n->bits, t, n->max_doc);
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

static const sr_it_ops nest_ops = {nest_next,          nest_advance,    nest_score,
                                   sr_it_fill_generic, sr_it_upper_inf, nest_free};

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
					a.parent = sr_nested_next_bit(parents, child + 1, max_doc);
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
	uint32_t d = sr_nested_next_bit(n->bits, 0, max_doc);
	n->base.doc = d < max_doc ? d : ST_NO_MORE_DOCS;
	return &n->base;
}

/* ---- inner hits ---- */

bool
sr_nested_wants_inner_hits(const sr_query *q)
{
	if (q == NULL)
		return false;
	switch (q->kind) {
	case SR_Q_NESTED:
		return q->inner_hits != NULL;
	case SR_Q_BOOL:
		for (size_t i = 0; i < q->nmust; i++)
			if (sr_nested_wants_inner_hits(q->must[i]))
				return true;
		for (size_t i = 0; i < q->nshould; i++)
			if (sr_nested_wants_inner_hits(q->should[i]))
				return true;
		for (size_t i = 0; i < q->nfilter; i++)
			if (sr_nested_wants_inner_hits(q->filter[i]))
				return true;
		return false;
	case SR_Q_CONSTANT_SCORE:
	case SR_Q_BOOSTING:
		return sr_nested_wants_inner_hits(q->inner);
	case SR_Q_DIS_MAX:
		for (size_t i = 0; i < q->nqueries; i++)
			if (sr_nested_wants_inner_hits(q->queries[i]))
				return true;
		return false;
	default:
		return false;
	}
}

typedef struct ihit {
	uint32_t doc;
	float score;
} ihit;

static int
ihit_cmp(const void *a, const void *b)
{
	const ihit *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return (x->doc > y->doc) - (x->doc < y->doc);
}

#define MAX_NEST_LEVELS 16

typedef struct nest_level {
	const char *path; /* full nested path */
	uint64_t *docs;   /* its docs in the segment */
} nest_level;

static int64_t
nested_offset(sr_exec *x, size_t si, st_colblock *cb, uint32_t doc)
{
	const st_field_info *fi = st_segment_field(x->segs[si].seg, ST_FIELD_NESTED_OFFSET);
	const int64_t *vals;
	if (fi == NULL || st_col_values(x->segs[si].txn, fi, cb, doc, &vals) < 1)
		return 0;
	return vals[0];
}

/* The object at rel (dotted, relative to obj) and offset. */
static const cJSON *
nested_object(const cJSON *obj, const char *rel, int64_t offset)
{
	char part[256];
	const char *p = rel;
	while (obj && *p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (n >= sizeof part)
			return NULL;
		memcpy(part, p, n);
		part[n] = '\0';
		obj = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, part) : NULL;
		p += n + (dot ? 1 : 0);
	}
	if (cJSON_IsArray(obj)) {
		/* offsets count the array's objects only (nulls are not indexed) */
		const cJSON *e;
		int64_t k = 0;
		cJSON_ArrayForEach(e, obj)
		{
			if (cJSON_IsObject(e) && k++ == offset)
				return e;
		}
		return NULL;
	}
	return offset == 0 ? obj : NULL;
}

#define MAX_IH_PATTERNS 64

/* inner_hits "_source" patterns, relative to the nested object (a
 * leading "path." is dropped, so the full names work too). */
static void
ih_patterns(const cJSON *v, const char *path, char **out, size_t *n, char *store, size_t cap)
{
	const cJSON *e = v;
	size_t used = 0, pl = strlen(path);
	bool list = cJSON_IsArray(v);
	for (e = list ? v->child : v; e && *n < MAX_IH_PATTERNS; e = list ? e->next : NULL) {
		if (!cJSON_IsString(e))
			continue;
		const char *p = e->valuestring;
		if (strncmp(p, path, pl) == 0 && p[pl] == '.')
			p += pl + 1;
		size_t len = strlen(p);
		if (used + len + 1 > cap)
			break;
		memcpy(store + used, p, len + 1);
		out[(*n)++] = store + used;
		used += len + 1;
	}
}

static cm_err inner_hits_walk(sr_exec *x, size_t si, uint32_t start, uint32_t end,
                              const sr_query *q, const char *id, const cJSON *src, cm_buf *out,
                              bool *first);

/* Docs of every nested path under `path.` in segment si (new bitset). */
static uint64_t *
under_path(sr_exec *x, size_t si, const char *path)
{
	const st_mapping *m = st_reader_mapping(x->reader);
	size_t ln = strlen(path), nw = st_bit_words(st_segment_max_doc(x->segs[si].seg));
	uint64_t *u = cm_calloc(T, nw + 1, sizeof(uint64_t));
	for (size_t i = 0; m && i < m->nfields; i++) {
		const st_field_def *f = &m->fields[i];
		if (!f->nested || strncmp(f->path, path, ln) != 0 || f->path[ln] != '.')
			continue;
		uint64_t *b = path_docs(x, si, f->path);
		for (size_t w = 0; b && w < nw; w++)
			u[w] |= b[w];
		cm_free(T, b);
	}
	return u;
}

/* One nested query's inner hits among docs [start, end) of segment si
 * (the block of the root doc or nested object they belong to); src is
 * the root's _source. */
static cm_err
inner_hits_one(sr_exec *x, size_t si, uint32_t start, uint32_t doc, const sr_query *q,
               const char *id, const cJSON *src, cm_buf *out, bool *first)
{
	const st_mapping *m = st_reader_mapping(x->reader);
	const st_field_def *d = m ? st_mapping_find(m, q->field) : NULL;
	if (d == NULL || !d->nested)
		return CM_OK; /* ignore_unmapped: no inner hits */
	cJSON *opts = cJSON_Parse(q->inner_hits);
	const cJSON *jn = cJSON_GetObjectItemCaseSensitive(opts, "name");
	const cJSON *jsz = cJSON_GetObjectItemCaseSensitive(opts, "size");
	const cJSON *jfr = cJSON_GetObjectItemCaseSensitive(opts, "from");
	const cJSON *jsrc = cJSON_GetObjectItemCaseSensitive(opts, "_source");
	size_t size = cJSON_IsNumber(jsz) ? (size_t)jsz->valuedouble : 3;
	size_t from = cJSON_IsNumber(jfr) ? (size_t)jfr->valuedouble : 0;
	bool want_src = !cJSON_IsFalse(jsrc);
	char *inc[MAX_IH_PATTERNS], *exc[MAX_IH_PATTERNS];
	size_t ninc = 0, nexc = 0;
	char incs[2048], excs[2048];
	if (cJSON_IsString(jsrc) || cJSON_IsArray(jsrc))
		ih_patterns(jsrc, d->path, inc, &ninc, incs, sizeof incs);
	if (cJSON_IsObject(jsrc)) {
		const cJSON *ji = cJSON_GetObjectItemCaseSensitive(jsrc, "includes");
		const cJSON *je = cJSON_GetObjectItemCaseSensitive(jsrc, "excludes");
		if (ji)
			ih_patterns(ji, d->path, inc, &ninc, incs, sizeof incs);
		if (je)
			ih_patterns(je, d->path, exc, &nexc, excs, sizeof excs);
	}
	cm_buf_put(out, *first ? "" : ",", *first ? 0 : 1);
	*first = false;
	sr_jw_cstr(out, cJSON_IsString(jn) ? jn->valuestring : q->field);

	/* the nested levels from the outermost to q's path */
	nest_level lv[MAX_NEST_LEVELS];
	size_t nlv = 0;
	char buf[1024];
	size_t plen = strlen(d->path);
	for (size_t i = 0; i <= plen && nlv < MAX_NEST_LEVELS && plen < sizeof buf; i++) {
		if (d->path[i] != '.' && d->path[i] != '\0')
			continue;
		memcpy(buf, d->path, i);
		buf[i] = '\0';
		const st_field_def *a = st_mapping_find(m, buf);
		if (a && a->nested)
			lv[nlv++] = (nest_level){a->path, NULL};
	}
	ihit *hits = NULL;
	size_t nh = 0, cap = 0;
	uint64_t *children = sr_nested_docs(x, si, d->path);
	sr_plan *pl = NULL;
	sr_it *it = NULL;
	cm_err rc = CM_OK;
	bool deeper = sr_nested_wants_inner_hits(q->inner);
	uint64_t *under = deeper ? under_path(x, si, d->path) : NULL;
	if (children && start < doc) {
		rc = sr_plan_compile_in(x, q->inner, d->path, true, &pl);
		if (!rc)
			rc = sr_it_build(x, si, pl, &it);
		for (uint32_t c = start; !rc && it && c < doc; c++) {
			if (!st_bit_get(children, c))
				continue;
			if (it->ops->advance(it, c) != c)
				continue;
			if (nh == cap) {
				cap = cap ? cap * 2 : 8;
				hits = cm_realloc(T, hits, cap * sizeof *hits);
			}
			hits[nh++] = (ihit){c, it->ops->score(it)};
		}
	}
	qsort(hits, nh, sizeof *hits, ihit_cmp);
	float max = nh ? hits[0].score : 0;
	cm_buf_printf(
	    out, ":{\"hits\":{\"total\":{\"value\":%zu,\"relation\":\"eq\"},\"max_score\":", nh);
	if (nh)
		sr_jw_float(out, max);
	else
		cm_buf_put(out, "null", 4);
	cm_buf_put(out, ",\"hits\":[", 9);
	st_colblock cb;
	memset(&cb, 0, sizeof cb);
	for (size_t l = 0; l + 1 < nlv; l++)
		lv[l].docs = path_docs(x, si, lv[l].path);
	for (size_t i = from; !rc && i < nh && i < from + size; i++) {
		cm_buf_put(out, i > from ? ",{\x01\"_id\":" : "{\x01\"_id\":", i > from ? 9 : 8);
		sr_jw_cstr(out, id);
		/* _nested: each level's field (relative to the level above) and
		 * the offset of the object in its array */
		int64_t offs[MAX_NEST_LEVELS];
		cm_buf_put(out, ",\"_nested\":", 11);
		for (size_t l = 0; l < nlv; l++) {
			uint32_t ld = hits[i].doc;
			if (l + 1 < nlv) {
				uint32_t md = st_segment_max_doc(x->segs[si].seg);
				ld = lv[l].docs ? sr_nested_next_bit(lv[l].docs, hits[i].doc, md)
				                : md;
				if (ld >= md)
					ld = hits[i].doc;
			}
			offs[l] = nested_offset(x, si, &cb, ld);
			const char *rel = l ? lv[l].path + strlen(lv[l - 1].path) + 1 : lv[l].path;
			cm_buf_put(out, "{\"field\":", 9);
			sr_jw_cstr(out, rel);
			cm_buf_printf(out, ",\"offset\":%lld", (long long)offs[l]);
			if (l + 1 < nlv)
				cm_buf_put(out, ",\"_nested\":", 11);
		}
		for (size_t l = 0; l < nlv; l++)
			cm_buf_put(out, "}", 1);
		cm_buf_put(out, ",\"_score\":", 10);
		sr_jw_float(out, hits[i].score);
		const cJSON *o = src;
		for (size_t l = 0; o && l < nlv; l++) {
			const char *rel = l ? lv[l].path + strlen(lv[l - 1].path) + 1 : lv[l].path;
			o = nested_object(o, rel, offs[l]);
		}
		if (want_src && o) {
			char *t = cJSON_PrintUnformatted(o);
			if (t && (ninc || nexc)) {
				cm_buf f;
				cm_buf_init(&f, T);
				if (st_source_filter(t, strlen(t), inc, ninc, exc, nexc, &f) ==
				    CM_OK) {
					cm_buf_put(out, ",\"_source\":", 11);
					if (f.len)
						cm_buf_put(out, f.data, f.len);
					else
						cm_buf_put(out, "{}", 2);
				}
				cm_buf_free(&f);
			} else if (t) {
				cm_buf_put(out, ",\"_source\":", 11);
				cm_buf_put(out, t, strlen(t));
			}
			free(t);
		}
		if (deeper && under) {
			/* the inner hits of nested queries inside this one, among
			 * this object's own nested docs (right before it) */
			uint32_t s2 = hits[i].doc;
			while (s2 > 0 && st_bit_get(under, s2 - 1))
				s2--;
			bool f2 = true;
			cm_buf_put(out, ",\"inner_hits\":{", 15);
			rc = inner_hits_walk(x, si, s2, hits[i].doc, q->inner, id, src, out, &f2);
			cm_buf_put(out, "}", 1);
		}
		cm_buf_put(out, "}", 1);
	}
	cm_buf_put(out, "]}}", 3);
	st_colblock_free(&cb);
	for (size_t l = 0; l < nlv; l++)
		cm_free(T, lv[l].docs);
	sr_it_free(it);
	sr_plan_free(pl);
	cm_free(T, children);
	cm_free(T, under);
	cm_free(T, hits);
	cJSON_Delete(opts);
	return rc;
}

static cm_err
inner_hits_walk(sr_exec *x, size_t si, uint32_t start, uint32_t doc, const sr_query *q,
                const char *id, const cJSON *src, cm_buf *out, bool *first)
{
	cm_err rc = CM_OK;
	if (q == NULL)
		return CM_OK;
	switch (q->kind) {
	case SR_Q_NESTED:
		return q->inner_hits ? inner_hits_one(x, si, start, doc, q, id, src, out, first)
		                     : CM_OK;
	case SR_Q_BOOL:
		for (size_t i = 0; !rc && i < q->nmust; i++)
			rc = inner_hits_walk(x, si, start, doc, q->must[i], id, src, out, first);
		for (size_t i = 0; !rc && i < q->nshould; i++)
			rc = inner_hits_walk(x, si, start, doc, q->should[i], id, src, out, first);
		for (size_t i = 0; !rc && i < q->nfilter; i++)
			rc = inner_hits_walk(x, si, start, doc, q->filter[i], id, src, out, first);
		return rc;
	case SR_Q_CONSTANT_SCORE:
	case SR_Q_BOOSTING:
		return inner_hits_walk(x, si, start, doc, q->inner, id, src, out, first);
	case SR_Q_DIS_MAX:
		for (size_t i = 0; !rc && i < q->nqueries; i++)
			rc = inner_hits_walk(x, si, start, doc, q->queries[i], id, src, out, first);
		return rc;
	default:
		return CM_OK;
	}
}

cm_err
sr_nested_inner_hits(sr_exec *x, size_t si, uint32_t doc, const sr_query *q, const char *id,
                     const char *src, size_t src_len, cm_buf *out)
{
	cJSON *j = src_len ? cJSON_ParseWithLength(src, src_len) : NULL;
	bool first = true;
	uint32_t start = doc;
	const uint64_t *nested = st_segment_nested(x->segs[si].seg);
	while (nested && start > 0 && st_bit_get(nested, start - 1))
		start--;
	cm_buf_put(out, "{", 1);
	cm_err rc = inner_hits_walk(x, si, start, doc, q, id, j, out, &first);
	cm_buf_put(out, "}", 1);
	cJSON_Delete(j);
	return rc;
}
