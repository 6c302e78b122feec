/* variable_width_histogram: at most "buckets" buckets of similar values,
 * each with its min, max and centroid (the key).
 *
 * A shard keeps clusters sorted by min: a value inside a cluster's
 * [min, max] joins it, any other starts a cluster of its own. Past
 * initial_buffer clusters the closest neighbours (by centroid) merge until
 * shard_size are left, and a shard sends its shard_size best clusters.
 * The coordinator sorts every shard's clusters by centroid, merges the
 * closest neighbours until "buckets" are left and moves overlapping bounds
 * to their midpoint, as ES's InternalVariableWidthHistogram reduce does.
 * ES's shard side (k-means-like passes over a buffer, then a
 * nearest-centroid assignment) differs, so bucket edges can differ from
 * ES's on the same data; with fewer distinct values than shard_size per
 * shard no shard merges anything and only the reduce shapes the result. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg_int.h"

typedef struct vwh_params {
	int64_t buckets, shard_size, initial_buffer;
} vwh_params;

typedef struct vcl {
	double min, max, sum;
	uint64_t values; /* values summed (centroid = sum / values) */
	uint64_t count;  /* docs */
	agg_node **subs;
	/* sub-states of clusters joined while a segment is collected: merging
	 * them then would free states the segment's flush still holds, so they
	 * merge at the shard's end (vwh_settle) */
	agg_node ***later;
	size_t nlater;
} vcl;

typedef struct vwh_state {
	vcl *v; /* sorted by min */
	size_t n, cap;
} vwh_state;

static cm_err
vwh_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	vwh_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	p->buckets = 10;
	p->shard_size = -1;
	p->initial_buffer = -1;
	a->p = p;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "field") || !strcmp(k, "missing") || !strcmp(k, "format"))
			continue;
		int64_t *dst = !strcmp(k, "buckets")          ? &p->buckets
		               : !strcmp(k, "shard_size")     ? &p->shard_size
		               : !strcmp(k, "initial_buffer") ? &p->initial_buffer
		                                              : NULL;
		if (!dst) {
			if (!strcmp(k, "script"))
				return cm_error_set(err, CM_EINVAL,
				                    "[script] is not supported in aggregation [%s]",
				                    a->name);
			return agg_unknown_param(a, k, err);
		}
		if (agg_parse_int(c, a->ops->name, k, INT32_MIN, INT32_MAX, dst, err))
			return err->code;
		if (*dst <= 0)
			return cm_error_set(err, CM_EINVAL, "%s must be greater than [0] for [%s]",
			                    k, a->name);
	}
	if (p->shard_size < 0)
		p->shard_size = p->buckets * 50;
	if (p->initial_buffer < 0)
		p->initial_buffer = p->shard_size * 10 < 50000 ? p->shard_size * 10 : 50000;
	if (p->shard_size < p->buckets)
		return cm_error_set(
		    err, CM_EINVAL,
		    "shard_size must be at least buckets but was [%lld<%lld] for [%s]",
		    (long long)p->shard_size, (long long)p->buckets, a->name);
	if (p->initial_buffer < p->buckets)
		return cm_error_set(
		    err, CM_EINVAL,
		    "initial_buffer must be at least buckets but was [%lld<%lld] for "
		    "[%s]",
		    (long long)p->initial_buffer, (long long)p->buckets, a->name);
	if (p->initial_buffer < p->shard_size)
		p->initial_buffer = p->shard_size;
	return CM_OK;
}

static void
vwh_free_params(void *p)
{
	cm_free(AGG_MEM, p);
}

static void *
vwh_new(const sr_agg *a)
{
	return cm_calloc(AGG_MEM, 1, sizeof(vwh_state));
}

static void
vwh_free(const sr_agg *a, void *d)
{
	vwh_state *s = d;
	for (size_t i = 0; i < s->n; i++) {
		agg_subs_free(a, s->v[i].subs);
		for (size_t k = 0; k < s->v[i].nlater; k++)
			agg_subs_free(a, s->v[i].later[k]);
		cm_free(AGG_MEM, s->v[i].later);
	}
	cm_free(AGG_MEM, s->v);
	cm_free(AGG_MEM, s);
}

static double
centroid(const vcl *c)
{
	return c->sum / (double)c->values;
}

/* Folds v[i + 1] into v[i]. */
static void
vcl_join(const sr_agg *a, vwh_state *s, size_t i)
{
	vcl *x = &s->v[i], *y = &s->v[i + 1];
	x->min = fmin(x->min, y->min);
	x->max = fmax(x->max, y->max);
	x->sum += y->sum;
	x->values += y->values;
	x->count += y->count;
	if (y->subs) {
		x->later =
		    cm_realloc(AGG_MEM, x->later, (x->nlater + y->nlater + 1) * sizeof *x->later);
		x->later[x->nlater++] = y->subs;
		for (size_t k = 0; k < y->nlater; k++)
			x->later[x->nlater++] = y->later[k];
	}
	cm_free(AGG_MEM, y->later);
	memmove(y, y + 1, (s->n - i - 2) * sizeof *y);
	s->n--;
}

/* Merges the sub-states joined during collection (no segment open). */
static void
vwh_settle(const sr_agg *a, vwh_state *s)
{
	for (size_t i = 0; i < s->n; i++) {
		vcl *c = &s->v[i];
		for (size_t k = 0; k < c->nlater; k++) {
			agg_subs_merge(a, c->subs, c->later[k]);
			agg_subs_free(a, c->later[k]);
		}
		cm_free(AGG_MEM, c->later);
		c->later = NULL;
		c->nlater = 0;
	}
}

static int
vcl_min_cmp(const void *x, const void *y)
{
	const vcl *a = x, *b = y;
	if (a->min != b->min)
		return a->min < b->min ? -1 : 1;
	return (a->max > b->max) - (a->max < b->max);
}

static int
vcl_centroid_cmp(const void *x, const void *y)
{
	double a = centroid(x), b = centroid(y);
	if (a != b)
		return a < b ? -1 : 1;
	return vcl_min_cmp(x, y);
}

/* Merges the closest neighbours (by centroid) until at most target are
 * left; the first of equally close pairs goes first, as in ES. */
static void
vwh_shrink(const sr_agg *a, vwh_state *s, size_t target)
{
	while (s->n > target && s->n > 1) {
		size_t best = 0;
		double bd = INFINITY;
		for (size_t i = 0; i + 1 < s->n; i++) {
			double d = centroid(&s->v[i + 1]) - centroid(&s->v[i]);
			if (d < bd) {
				bd = d;
				best = i;
			}
		}
		vcl_join(a, s, best);
	}
}

/* The cluster holding x, created when none covers it (NULL past the
 * bucket guard). */
static vcl *
vwh_place(agg_root *root, const sr_agg *a, vwh_state *s, double x)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) { /* first cluster with min > x */
		size_t mid = (lo + hi) / 2;
		if (s->v[mid].min <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && s->v[lo - 1].max >= x)
		return &s->v[lo - 1];
	if (root && !agg_bucket_guard(root, 1))
		return NULL;
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->v = cm_realloc(AGG_MEM, s->v, s->cap * sizeof *s->v);
	}
	memmove(&s->v[lo + 1], &s->v[lo], (s->n - lo) * sizeof *s->v);
	s->n++;
	s->v[lo] = (vcl){x, x, 0, 0, 0, agg_subs_new(a), NULL, 0};
	return &s->v[lo];
}

static cm_err
vwh_seg_begin(agg_rt *rt, cm_error *err)
{
	if (rt->fi && rt->fi->type == ST_FT_GEO_POINT)
		return cm_error_set(
		    err, CM_EINVAL,
		    "Field [%s] of type [geo_point] is not supported for aggregation "
		    "[variable_width_histogram]",
		    rt->spec->field);
	return agg_field_numeric_or_fail(rt, err) ? CM_OK : CM_EINVAL;
}

static void
vwh_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	const sr_agg *a = rt->spec;
	const vwh_params *p = a->p;
	vwh_state *s = n->d;
	for (size_t i = 0; i < cnt && !rt->root->err.code; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		int64_t one;
		if (k == 0 && a->missing.set && a->missing.is_num) {
			one = rt->is_double ? st_double_to_sortable(a->missing.d) : a->missing.l;
			v = &one;
			k = 1;
		}
		const vcl *prev = NULL;
		for (int j = 0; j < k; j++) {
			double x = agg_num(rt, v[j]);
			vcl *c = vwh_place(rt->root, a, s, x);
			if (!c)
				return;
			c->sum += x;
			c->values++;
			if (c == prev)
				continue; /* a doc counts once per cluster */
			prev = c;
			c->count++;
			if (c->subs)
				agg_subs_collect(rt->root, a, c->subs, &docs[i],
				                 scores ? &scores[i] : NULL, 1);
		}
		if (s->n > (size_t)p->initial_buffer)
			vwh_shrink(a, s, (size_t)p->shard_size);
	}
}

static void
vwh_finish(const sr_agg *a, agg_node *n)
{
	vwh_state *s = n->d;
	const vwh_params *p = a->p;
	vwh_shrink(a, s, (size_t)p->shard_size);
	vwh_settle(a, s);
	for (size_t i = 0; i < s->n; i++)
		agg_subs_shard_finish(a, s->v[i].subs);
}

static void
vwh_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	vwh_state *x = into->d, *y = from->d;
	if (x->n + y->n > x->cap) {
		x->cap = x->n + y->n;
		x->v = cm_realloc(AGG_MEM, x->v, x->cap * sizeof *x->v);
	}
	memcpy(x->v + x->n, y->v, y->n * sizeof *y->v);
	x->n += y->n;
	y->n = 0; /* the clusters (and their subs) moved */
}

/* Rendering is the final reduce: it merges the state's clusters. */
static cm_err
vwh_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const vwh_params *p = a->p;
	vwh_state *s = n->d;
	qsort(s->v, s->n, sizeof *s->v, vcl_centroid_cmp);
	vwh_shrink(a, s, (size_t)p->buckets);
	vwh_settle(a, s);
	/* no overlapping buckets: meet halfway */
	double *lo = cm_malloc(AGG_MEM, (s->n ? s->n : 1) * sizeof *lo);
	double *hi = cm_malloc(AGG_MEM, (s->n ? s->n : 1) * sizeof *hi);
	for (size_t i = 0; i < s->n; i++) {
		lo[i] = s->v[i].min;
		hi[i] = s->v[i].max;
	}
	for (size_t i = 1; i < s->n; i++)
		if (lo[i] < hi[i - 1]) {
			lo[i] = (hi[i - 1] + lo[i]) / 2;
			hi[i - 1] = lo[i];
		}
	r->buckets += s->n;
	cm_err rc = CM_OK;
	if (r->buckets > SR_MAX_BUCKETS) {
		agg_too_many_buckets(r->err, r->buckets);
		rc = CM_ELIMIT;
	}
	cm_buf *b = r->out;
	if (!rc)
		cm_buf_put(b, "{\"buckets\":[", 12);
	for (size_t i = 0; i < s->n && !rc; i++) {
		cm_buf_put(b, i ? ",{\"min\":" : "{\"min\":", i ? 8 : 7);
		agg_json_double(b, lo[i]);
		cm_buf_put(b, ",\"key\":", 7);
		agg_json_double(b, centroid(&s->v[i]));
		cm_buf_put(b, ",\"max\":", 7);
		agg_json_double(b, hi[i]);
		cm_buf_printf(b, ",\"doc_count\":%llu", (unsigned long long)s->v[i].count);
		rc = agg_subs_render(a, s->v[i].subs, r);
		cm_buf_put_u8(b, '}');
	}
	if (!rc)
		cm_buf_put(b, "]}", 2);
	cm_free(AGG_MEM, lo);
	cm_free(AGG_MEM, hi);
	return rc;
}

static void
vwh_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const vwh_state *s = n->d;
	cm_buf_put_varint(b, s->n);
	for (size_t i = 0; i < s->n; i++) {
		const vcl *c = &s->v[i];
		agg_put_double(b, c->min);
		agg_put_double(b, c->max);
		agg_put_double(b, c->sum);
		cm_buf_put_varint(b, c->values);
		cm_buf_put_varint(b, c->count);
		agg_subs_encode(a, c->subs, b);
	}
}

static bool
vwh_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	vwh_state *s = n->d;
	uint64_t cnt;
	if (!agg_get_count(r, SR_MAX_BUCKETS * 16ull, &cnt))
		return false;
	for (uint64_t i = 0; i < cnt; i++) {
		vcl c = {0};
		if (!agg_get_double(r, &c.min) || !agg_get_double(r, &c.max) ||
		    !agg_get_double(r, &c.sum) || !cm_rd_varint(r, &c.values) ||
		    !cm_rd_varint(r, &c.count) || !c.values || !(c.min <= c.max))
			return false;
		if (s->n == s->cap) {
			s->cap = s->cap ? s->cap * 2 : 64;
			s->v = cm_realloc(AGG_MEM, s->v, s->cap * sizeof *s->v);
		}
		c.subs = agg_subs_new(a);
		s->v[s->n++] = c;
		if (c.subs && !agg_subs_decode(a, c.subs, r))
			return false;
	}
	return true;
}

const agg_ops agg_ops_variable_width_histogram = {
    .name = "variable_width_histogram",
    .bucket = true,
    .needs_field = true,
    .parse = vwh_parse,
    .free_params = vwh_free_params,
    .state_new = vwh_new,
    .state_free = vwh_free,
    .seg_begin = vwh_seg_begin,
    .collect = vwh_collect,
    .shard_finish = vwh_finish,
    .merge = vwh_merge,
    .render = vwh_render,
    .encode = vwh_encode,
    .decode = vwh_decode,
};
