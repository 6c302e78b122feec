/* Metric aggregations: min, max, sum, avg, stats, extended_stats,
 * value_count, cardinality, percentiles, top_hits. */
#include <cjson/cJSON.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "agg_int.h"

/* ================================================================ stats family */

/* One accumulator serves min/max/sum/avg/stats/extended_stats/value_count;
 * sums are compensated (Kahan) so merge order changes nothing visible. */
typedef struct mstats {
	uint64_t count;
	double sum, sum_c;
	double sumsq, sumsq_c;
	double min, max;
} mstats;

typedef struct mstats_params {
	double sigma; /* extended_stats */
} mstats_params;

static void
kahan_add(double *sum, double *c, double v)
{
	if (!isfinite(v)) {
		*sum += v;
		return;
	}
	double y = v - *c;
	double t = *sum + y;
	*c = (t - *sum) - y;
	*sum = t;
}

static void *
mstats_new(const sr_agg *a)
{
	mstats *m = cm_calloc(AGG_MEM, 1, sizeof *m);
	m->min = INFINITY;
	m->max = -INFINITY;
	return m;
}

static void
mstats_free(const sr_agg *a, void *d)
{
	cm_free(AGG_MEM, d);
}

static cm_err
mstats_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	mstats_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	p->sigma = 2.0;
	a->p = p;
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "field") || !strcmp(c->string, "missing") ||
		    !strcmp(c->string, "format"))
			continue;
		if (a->kind == AGG_EXTENDED_STATS && !strcmp(c->string, "sigma")) {
			if (agg_parse_num(c, a->ops->name, "sigma", &p->sigma, err))
				return CM_EPARSE;
			if (p->sigma < 0) {
				char num[64]; /* as Java prints a double: -1.0 */
				agg_double_str(num, sizeof num, p->sigma);
				return cm_error_set(
				    err, CM_EINVAL,
				    "[sigma] must be greater than or equal to 0. Found [%s] in "
				    "[%s]",
				    num, a->name);
			}
			continue;
		}
		return agg_unknown_param(a, c->string, err);
	}
	return CM_OK;
}

static void
mstats_free_params(void *p)
{
	cm_free(AGG_MEM, p);
}

static cm_err
mstats_seg_begin(agg_rt *rt, cm_error *err)
{
	if (rt->spec->kind == AGG_VALUE_COUNT)
		return CM_OK;
	return agg_field_numeric_or_fail(rt, err) ? CM_OK : CM_EINVAL;
}

static inline void
mstats_add(mstats *m, double v, bool sq)
{
	m->count++;
	kahan_add(&m->sum, &m->sum_c, v);
	if (sq)
		kahan_add(&m->sumsq, &m->sumsq_c, v * v);
	if (v < m->min)
		m->min = v;
	if (v > m->max)
		m->max = v;
}

static void
mstats_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	mstats *m = n->d;
	const sr_agg *a = rt->spec;
	bool sq = a->kind == AGG_EXTENDED_STATS;
	if (a->kind == AGG_VALUE_COUNT) {
		for (size_t i = 0; i < cnt; i++) {
			const int64_t *v;
			int k = agg_values(rt, docs[i], &v);
			if (k == 0 && a->missing.set)
				k = 1;
			m->count += (uint64_t)k;
		}
		return;
	}
	if (!rt->fi && !a->missing.set)
		return;
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		if (k == 0) {
			if (a->missing.set && a->missing.is_num)
				mstats_add(m, a->missing.d, sq);
			continue;
		}
		if (a->kind == AGG_MIN) {
			/* values are ascending within a doc */
			double x = agg_num(rt, v[0]);
			m->count++;
			if (x < m->min)
				m->min = x;
			continue;
		}
		if (a->kind == AGG_MAX) {
			double x = agg_num(rt, v[k - 1]);
			m->count++;
			if (x > m->max)
				m->max = x;
			continue;
		}
		for (int j = 0; j < k; j++)
			mstats_add(m, agg_num(rt, v[j]), sq);
	}
}

static void
mstats_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	mstats *x = into->d, *y = from->d;
	x->count += y->count;
	kahan_add(&x->sum, &x->sum_c, y->sum);
	kahan_add(&x->sum, &x->sum_c, -y->sum_c);
	kahan_add(&x->sumsq, &x->sumsq_c, y->sumsq);
	kahan_add(&x->sumsq, &x->sumsq_c, -y->sumsq_c);
	if (y->min < x->min)
		x->min = y->min;
	if (y->max > x->max)
		x->max = y->max;
}

static bool
is_date(const agg_node *n)
{
	return n->ftype == ST_FT_DATE;
}

static void
put_as_string(const sr_agg *a, const agg_node *n, cm_buf *b, const char *key, double v,
              bool present)
{
	if (!present || !isfinite(v) || (!is_date(n) && !a->format))
		return;
	char s[256];
	if (is_date(n))
		agg_date_format(NULL, a->format, (int64_t)v, s, sizeof s);
	else if (!agg_decimal_format(a->format, v, s, sizeof s)) /* a DecimalFormat pattern */
		return;
	cm_buf_printf(b, ",\"%s\":", key);
	agg_json_str(b, s, strlen(s));
}

static double
var_pop(const mstats *m)
{
	if (!m->count)
		return NAN;
	double mean = m->sum / (double)m->count;
	double v = (m->sumsq - m->sum * mean) / (double)m->count;
	return v < 0 ? 0 : v;
}

static double
var_samp(const mstats *m)
{
	if (m->count < 2)
		return m->count ? 0 : NAN;
	double mean = m->sum / (double)m->count;
	double v = (m->sumsq - m->sum * mean) / (double)(m->count - 1);
	return v < 0 ? 0 : v;
}

static bool
mstats_value(const sr_agg *a, const agg_node *n, const char *key, double *v)
{
	const mstats *m = n->d;
	bool has = m->count > 0;
	double avg = has ? m->sum / (double)m->count : NAN;
	if (!key) {
		switch (a->kind) {
		case AGG_MIN: *v = has ? m->min : INFINITY; return true;
		case AGG_MAX: *v = has ? m->max : -INFINITY; return true;
		case AGG_SUM: *v = m->sum; return true;
		case AGG_AVG: *v = avg; return true;
		case AGG_VALUE_COUNT: *v = (double)m->count; return true;
		default: return false;
		}
	}
	if (a->kind != AGG_STATS && a->kind != AGG_EXTENDED_STATS)
		return !strcmp(key, "value") && mstats_value(a, n, NULL, v);
	if (!strcmp(key, "count"))
		*v = (double)m->count;
	else if (!strcmp(key, "min"))
		*v = has ? m->min : INFINITY;
	else if (!strcmp(key, "max"))
		*v = has ? m->max : -INFINITY;
	else if (!strcmp(key, "avg"))
		*v = avg;
	else if (!strcmp(key, "sum"))
		*v = m->sum;
	else if (a->kind != AGG_EXTENDED_STATS)
		return false;
	else if (!strcmp(key, "sum_of_squares"))
		*v = has ? m->sumsq : NAN;
	else if (!strcmp(key, "variance") || !strcmp(key, "variance_population"))
		*v = var_pop(m);
	else if (!strcmp(key, "variance_sampling"))
		*v = var_samp(m);
	else if (!strcmp(key, "std_deviation") || !strcmp(key, "std_deviation_population"))
		*v = sqrt(var_pop(m));
	else if (!strcmp(key, "std_deviation_sampling"))
		*v = sqrt(var_samp(m));
	else
		return false;
	return true;
}

static cm_err
mstats_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const mstats *m = n->d;
	cm_buf *b = r->out;
	bool has = m->count > 0;
	double avg = has ? m->sum / (double)m->count : 0;
	switch (a->kind) {
	case AGG_MIN:
	case AGG_MAX: {
		double v = a->kind == AGG_MIN ? m->min : m->max;
		cm_buf_put(b, "{\"value\":", 9);
		agg_json_double_or_null(b, v, has);
		put_as_string(a, n, b, "value_as_string", v, has);
		cm_buf_put_u8(b, '}');
		return CM_OK;
	}
	case AGG_SUM:
		cm_buf_put(b, "{\"value\":", 9);
		agg_json_double(b, m->sum);
		put_as_string(a, n, b, "value_as_string", m->sum, true);
		cm_buf_put_u8(b, '}');
		return CM_OK;
	case AGG_AVG:
		cm_buf_put(b, "{\"value\":", 9);
		agg_json_double_or_null(b, avg, has);
		put_as_string(a, n, b, "value_as_string", avg, has);
		cm_buf_put_u8(b, '}');
		return CM_OK;
	case AGG_VALUE_COUNT:
		cm_buf_printf(b, "{\"value\":%llu}", (unsigned long long)m->count);
		return CM_OK;
	default:
		break;
	}
	cm_buf_printf(b, "{\"count\":%llu,\"min\":", (unsigned long long)m->count);
	agg_json_double_or_null(b, m->min, has);
	cm_buf_put(b, ",\"max\":", 7);
	agg_json_double_or_null(b, m->max, has);
	cm_buf_put(b, ",\"avg\":", 7);
	agg_json_double_or_null(b, avg, has);
	cm_buf_put(b, ",\"sum\":", 7);
	agg_json_double(b, m->sum);
	if (a->kind == AGG_EXTENDED_STATS) {
		const mstats_params *p = a->p;
		double vp = var_pop(m), vs = var_samp(m);
		double sp = sqrt(vp), ss = sqrt(vs);
		cm_buf_put(b, ",\"sum_of_squares\":", 18);
		agg_json_double_or_null(b, m->sumsq, has);
		cm_buf_put(b, ",\"variance\":", 12);
		agg_json_double_or_null(b, vp, has);
		cm_buf_put(b, ",\"variance_population\":", 23);
		agg_json_double_or_null(b, vp, has);
		cm_buf_put(b, ",\"variance_sampling\":", 21);
		agg_json_double_or_null(b, vs, has);
		cm_buf_put(b, ",\"std_deviation\":", 17);
		agg_json_double_or_null(b, sp, has);
		cm_buf_put(b, ",\"std_deviation_population\":", 28);
		agg_json_double_or_null(b, sp, has);
		cm_buf_put(b, ",\"std_deviation_sampling\":", 26);
		agg_json_double_or_null(b, ss, has);
		const char *names[] = {"upper", "lower", "upper_population", "lower_population",
		                       "upper_sampling", "lower_sampling"};
		double vals[] = {avg + p->sigma * sp, avg - p->sigma * sp, avg + p->sigma * sp,
		                 avg - p->sigma * sp, avg + p->sigma * ss, avg - p->sigma * ss};
		cm_buf_put(b, ",\"std_deviation_bounds\":{", 25);
		for (int i = 0; i < 6; i++) {
			cm_buf_printf(b, "%s\"%s\":", i ? "," : "", names[i]);
			agg_json_double_or_null(b, vals[i], has);
		}
		cm_buf_put_u8(b, '}');
	}
	if ((is_date(n) || a->format) && has) {
		put_as_string(a, n, b, "min_as_string", m->min, has);
		put_as_string(a, n, b, "max_as_string", m->max, has);
		put_as_string(a, n, b, "avg_as_string", avg, has);
		put_as_string(a, n, b, "sum_as_string", m->sum, has);
	}
	cm_buf_put_u8(b, '}');
	return CM_OK;
}

static void
mstats_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const mstats *m = n->d;
	cm_buf_put_varint(b, m->count);
	agg_put_double(b, m->sum);
	agg_put_double(b, m->sum_c);
	agg_put_double(b, m->sumsq);
	agg_put_double(b, m->sumsq_c);
	agg_put_double(b, m->min);
	agg_put_double(b, m->max);
}

static bool
mstats_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	mstats *m = n->d;
	return cm_rd_varint(r, &m->count) && agg_get_double(r, &m->sum) &&
	       agg_get_double(r, &m->sum_c) && agg_get_double(r, &m->sumsq) &&
	       agg_get_double(r, &m->sumsq_c) && agg_get_double(r, &m->min) &&
	       agg_get_double(r, &m->max);
}

#define MSTATS_OPS(NAME)                                                                   \
	{                                                                                  \
		.name = NAME, .bucket = false, .needs_field = true, .parse = mstats_parse,        \
		.free_params = mstats_free_params, .state_new = mstats_new,                     \
		.state_free = mstats_free, .seg_begin = mstats_seg_begin,                       \
		.collect = mstats_collect, .merge = mstats_merge, .render = mstats_render,      \
		.encode = mstats_encode, .decode = mstats_decode, .metric_value = mstats_value, \
	}

const agg_ops agg_ops_min = MSTATS_OPS("min");
const agg_ops agg_ops_max = MSTATS_OPS("max");
const agg_ops agg_ops_sum = MSTATS_OPS("sum");
const agg_ops agg_ops_avg = MSTATS_OPS("avg");
const agg_ops agg_ops_stats = MSTATS_OPS("stats");
const agg_ops agg_ops_extended_stats = MSTATS_OPS("extended_stats");
const agg_ops agg_ops_value_count = MSTATS_OPS("value_count");

/* ================================================================ cardinality */

#define CARD_MAX_THRESHOLD 40000

typedef struct card_params {
	uint32_t threshold;
} card_params;

/* Per segment, keyword ordinals are gathered in a small open-addressing
 * set and hashed as terms once, at the end of the segment. */
typedef struct ordset {
	uint64_t *slots; /* ord + 1, 0 = empty */
	size_t cap, n;
} ordset;

typedef struct card_state {
	agg_hll *hll;
	ordset ords;
} card_state;

static cm_err
card_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	card_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	p->threshold = 3000;
	a->p = p;
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "field") || !strcmp(c->string, "missing") ||
		    !strcmp(c->string, "format"))
			continue;
		if (!strcmp(c->string, "precision_threshold")) {
			int64_t t;
			if (cJSON_IsNumber(c) && c->valuedouble < 0)
				return cm_error_set(err, CM_EINVAL,
				                    "[precisionThreshold] must be greater than or equal to "
				                    "0. Found [%lld] in [%s]",
				                    (long long)c->valuedouble, a->name);
			if (agg_parse_int(c, a->name, "precision_threshold", 0, INT64_MAX, &t, err))
				return CM_EINVAL;
			p->threshold = t > CARD_MAX_THRESHOLD ? CARD_MAX_THRESHOLD : (uint32_t)t;
			continue;
		}
		if (!strcmp(c->string, "rehash") || !strcmp(c->string, "execution_hint"))
			continue;
		return agg_unknown_param(a, c->string, err);
	}
	return CM_OK;
}

static void *
card_new(const sr_agg *a)
{
	const card_params *p = a->p;
	card_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->hll = agg_hll_new(p->threshold);
	return s;
}

static void
card_free(const sr_agg *a, void *d)
{
	card_state *s = d;
	agg_hll_free(s->hll);
	cm_free(AGG_MEM, s->ords.slots);
	cm_free(AGG_MEM, s);
}

static void
ordset_add(ordset *o, uint64_t ord)
{
	if ((o->n + 1) * 4 > o->cap * 3) {
		size_t ncap = o->cap ? o->cap * 2 : 64;
		uint64_t *ns = cm_calloc(AGG_MEM, ncap, sizeof *ns);
		for (size_t i = 0; i < o->cap; i++) {
			if (!o->slots[i])
				continue;
			size_t h = (size_t)(o->slots[i] * 0x9E3779B97F4A7C15ull) & (ncap - 1);
			while (ns[h])
				h = (h + 1) & (ncap - 1);
			ns[h] = o->slots[i];
		}
		cm_free(AGG_MEM, o->slots);
		o->slots = ns;
		o->cap = ncap;
	}
	uint64_t key = ord + 1;
	size_t h = (size_t)(key * 0x9E3779B97F4A7C15ull) & (o->cap - 1);
	while (o->slots[h]) {
		if (o->slots[h] == key)
			return;
		h = (h + 1) & (o->cap - 1);
	}
	o->slots[h] = key;
	o->n++;
}

uint64_t
agg_hash_value(bool is_double, int64_t v)
{
	/* doubles hash by their IEEE bits, longs by value: equal numbers on
	 * different shards hash alike. */
	if (is_double) {
		double d = st_sortable_to_double(v);
		if (d == 0)
			d = 0; /* -0.0 == 0.0 */
		return XXH64(&d, sizeof d, 0);
	}
	return XXH64(&v, sizeof v, 0);
}

static void
card_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	card_state *s = n->d;
	const sr_agg *a = rt->spec;
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		if (k == 0) {
			if (a->missing.set) {
				if (a->missing.is_num && !rt->is_keyword)
					agg_hll_add(s->hll, rt->is_double
					                        ? agg_hash_value(true, st_double_to_sortable(
					                                                   a->missing.d))
					                        : agg_hash_value(false, a->missing.l));
				else
					agg_hll_add(s->hll, XXH64(a->missing.s, a->missing.slen, 0));
			}
			continue;
		}
		if (rt->is_keyword) {
			for (int j = 0; j < k; j++)
				ordset_add(&s->ords, (uint64_t)v[j]);
			agg_mark_dirty(rt, n);
		} else
			for (int j = 0; j < k; j++)
				agg_hll_add(s->hll, agg_hash_value(rt->is_double, v[j]));
	}
}

static void
card_flush(agg_rt *rt, agg_node *n)
{
	card_state *s = n->d;
	for (size_t i = 0; i < s->ords.cap; i++) {
		if (!s->ords.slots[i])
			continue;
		const uint8_t *t;
		size_t len;
		if (st_ord_term(rt->ctx->txn, rt->fi, s->ords.slots[i] - 1, &t, &len)) {
			cm_error_set(&rt->root->err, CM_ECORRUPT, "could not read term of [%s]",
			             rt->spec->field);
			continue;
		}
		agg_hll_add(s->hll, XXH64(t, len, 0));
	}
	memset(s->ords.slots, 0, s->ords.cap * sizeof *s->ords.slots);
	s->ords.n = 0;
}

static void
card_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	card_state *x = into->d, *y = from->d;
	agg_hll_merge(x->hll, y->hll);
}

static uint64_t
card_value_u(const agg_node *n)
{
	const card_state *s = n->d;
	return agg_hll_cardinality(s->hll);
}

static bool
card_value(const sr_agg *a, const agg_node *n, const char *key, double *v)
{
	if (key && strcmp(key, "value"))
		return false;
	*v = (double)card_value_u(n);
	return true;
}

static cm_err
card_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	cm_buf_printf(r->out, "{\"value\":%llu}", (unsigned long long)card_value_u(n));
	return CM_OK;
}

static void
card_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const card_state *s = n->d;
	agg_hll_encode(s->hll, b);
}

static bool
card_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	card_state *s = n->d;
	const card_params *p = a->p;
	agg_hll *h = agg_hll_decode(r, p->threshold);
	if (!h)
		return false;
	agg_hll_free(s->hll);
	s->hll = h;
	return true;
}

const agg_ops agg_ops_cardinality = {
    .name = "cardinality",
    .needs_field = true,
    .parse = card_parse,
    .free_params = mstats_free_params,
    .state_new = card_new,
    .state_free = card_free,
    .collect = card_collect,
    .seg_flush = card_flush,
    .merge = card_merge,
    .render = card_render,
    .encode = card_encode,
    .decode = card_decode,
    .metric_value = card_value,
};

/* ================================================================ percentiles */

#define PCT_MAX 512

typedef struct pct_params {
	double *percents; /* percentile_ranks: the values to rank */
	size_t n;
	bool keyed;
	bool ranks;
	double compression;
	bool hdr;   /* HdrHistogram instead of a t-digest */
	int digits; /* hdr: number_of_significant_value_digits */
} pct_params;

static void
pct_free_params(void *pp)
{
	pct_params *p = pp;
	cm_free(AGG_MEM, p->percents);
	cm_free(AGG_MEM, p);
}

static cm_err
pct_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	pct_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->keyed = true;
	p->compression = 100;
	p->digits = 3;
	p->ranks = a->kind == AGG_PERCENTILE_RANKS;
	bool method = false;
	const char *list = p->ranks ? "values" : "percents";
	static const double defaults[] = {1, 5, 25, 50, 75, 95, 99};
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "field") || !strcmp(c->string, "missing") ||
		    !strcmp(c->string, "format"))
			continue;
		if (!strcmp(c->string, list)) {
			if (p->ranks && !cJSON_IsArray(c))
				return cm_error_set(err, CM_EPARSE, "[values] must be an array");
			if (p->ranks && cJSON_GetArraySize(c) == 0)
				return cm_error_set(err, CM_EINVAL,
				                    "[values] must not be an empty array: [%s]", a->name);
			if (!cJSON_IsArray(c))
				return cm_error_set(err, CM_EPARSE, "[percents] must be an array");
			int k = cJSON_GetArraySize(c);
			if (k == 0)
				return cm_error_set(err, CM_EINVAL,
				                    "[percents] must not be empty: [%s]", a->name);
			if (k > PCT_MAX)
				return cm_error_set(err, CM_EINVAL, "too many [percents]");
			cm_free(AGG_MEM, p->percents);
			p->percents = cm_calloc(AGG_MEM, (size_t)k, sizeof *p->percents);
			p->n = 0;
			for (const cJSON *e = c->child; e; e = e->next) {
				double d;
				if (agg_parse_num(e, a->name, "percents", &d, err))
					return CM_EPARSE;
				if (!p->ranks && (d < 0 || d > 100 || d != d))
					return cm_error_set(err, CM_EINVAL,
					                    "percent must be in [0,100], got [%g]: [%s]", d,
					                    a->name);
				p->percents[p->n++] = d;
			}
			continue;
		}
		if (!strcmp(c->string, "keyed")) {
			if (agg_parse_bool(c, a->name, "keyed", &p->keyed, err))
				return CM_EPARSE;
			continue;
		}
		bool is_td = !strcmp(c->string, "tdigest"), is_hdr = !strcmp(c->string, "hdr");
		if ((is_td || is_hdr) && method)
			return cm_error_set(err, CM_EPARSE,
			                    "[%s] only one of [tdigest] and [hdr] may be given",
			                    a->name);
		method = method || is_td || is_hdr;
		if (is_hdr) {
			p->hdr = true;
			if (!cJSON_IsObject(c))
				return cm_error_set(err, CM_EPARSE, "[hdr] must be an object: [%s]",
				                    a->name);
			for (const cJSON *h = c->child; h; h = h->next) {
				double d;
				if (strcmp(h->string, "number_of_significant_value_digits"))
					return cm_error_set(err, CM_EPARSE,
					                    "[hdr] unknown field [%s]: [%s]",
					                    h->string, a->name);
				if (!cJSON_IsNumber(h))
					return cm_error_set(err, CM_EPARSE,
					                    "[number_of_significant_value_digits] "
					                    "must be a number: [%s]",
					                    a->name);
				d = trunc(h->valuedouble); /* an int field: ES truncates 2.5 */
				if (!(d >= 0 && d <= 5))
					return cm_error_set(
					    err, CM_EINVAL,
					    "[numberOfSignificantValueDigits] must be between 0 "
					    "and 5: [%s]",
					    a->name);
				p->digits = (int)d;
			}
			continue;
		}
		if (is_td) {
			const cJSON *cc = cJSON_GetObjectItemCaseSensitive(c, "compression");
			if (cc && agg_parse_num(cc, a->name, "compression", &p->compression, err))
				return CM_EPARSE;
			if (p->compression < 0) {
				char num[64];
				agg_double_str(num, sizeof num, p->compression);
				return cm_error_set(
				    err, CM_EINVAL,
				    "[compression] must be greater than or equal to 0. Found "
				    "[%s] in [%s]",
				    num, a->name);
			}
			if (p->compression < 20)
				p->compression = 20;
			if (p->compression > 10000)
				p->compression = 10000;
			continue;
		}
		return agg_unknown_param(a, c->string, err);
	}
	if (!p->percents && p->ranks)
		return cm_error_set(err, CM_EINVAL, "[values] must not be null: [%s]", a->name);
	if (!p->percents) {
		p->n = sizeof defaults / sizeof defaults[0];
		p->percents = cm_calloc(AGG_MEM, p->n, sizeof *p->percents);
		memcpy(p->percents, defaults, sizeof defaults);
	}
	return CM_OK;
}

/* A state is an agg_hdr with "hdr", else an agg_tdigest. */
static void *
pct_new(const sr_agg *a)
{
	const pct_params *p = a->p;
	if (p->hdr)
		return agg_hdr_new(p->digits);
	return agg_td_new(p->compression);
}

static void
pct_free(const sr_agg *a, void *d)
{
	if (((const pct_params *)a->p)->hdr)
		agg_hdr_free(d);
	else
		agg_td_free(d);
}

static cm_err
pct_seg_begin(agg_rt *rt, cm_error *err)
{
	return agg_field_numeric_or_fail(rt, err) ? CM_OK : CM_EINVAL;
}

/* false when HdrHistogram refuses the value (negative): ES fails the
 * shard with HdrHistogram's exception */
static bool
pct_add(agg_rt *rt, agg_node *n, bool hdr, double x)
{
	if (!hdr) {
		agg_td_add(n->d, x, 1);
		return true;
	}
	if (agg_hdr_add(n->d, x, 1))
		return true;
	cm_error_set_type(&rt->root->err, CM_EINTERNAL, "array_index_out_of_bounds_exception",
	                  "Histogram recorded value cannot be negative.");
	return false;
}

static void
pct_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	const sr_agg *a = rt->spec;
	if (!rt->fi && !a->missing.set)
		return;
	bool hdr = ((const pct_params *)a->p)->hdr;
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		if (k == 0 && a->missing.set && a->missing.is_num &&
		    !pct_add(rt, n, hdr, a->missing.d))
			return;
		for (int j = 0; j < k; j++)
			if (!pct_add(rt, n, hdr, agg_num(rt, v[j])))
				return;
	}
}

static void
pct_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	if (((const pct_params *)a->p)->hdr)
		agg_hdr_merge(into->d, from->d);
	else
		agg_td_merge(into->d, from->d);
}

/* The value at percent q, or the rank of value q, in percent. */
static double
pct_at(const pct_params *p, const agg_node *n, double q)
{
	if (p->hdr)
		return p->ranks ? agg_hdr_rank(n->d, q) : agg_hdr_percentile(n->d, q);
	return p->ranks ? agg_td_cdf(n->d, q) * 100 : agg_td_quantile(n->d, q / 100);
}

static bool
pct_value(const sr_agg *a, const agg_node *n, const char *key, double *v)
{
	if (!key)
		return false;
	char *end;
	double q = strtod(key, &end);
	if (end == key || *end)
		return false;
	const pct_params *p = a->p;
	if (!p->ranks && (q < 0 || q > 100))
		return false;
	*v = pct_at(p, n, q);
	return true;
}

static cm_err
pct_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const pct_params *p = a->p;
	cm_buf *b = r->out;
	cm_buf_put(b, p->keyed ? "{\"values\":{" : "{\"values\":[", 11);
	for (size_t i = 0; i < p->n; i++) {
		char key[64];
		agg_double_str(key, sizeof key, p->percents[i]);
		double v = pct_at(p, n, p->percents[i]);
		if (i)
			cm_buf_put_u8(b, ',');
		if (p->keyed) {
			agg_json_str(b, key, strlen(key));
			cm_buf_put_u8(b, ':');
			agg_json_double_or_null(b, v, v == v);
			if (is_date(n) && v == v && !p->ranks) {
				char k2[80], s[96];
				snprintf(k2, sizeof k2, "%s_as_string", key);
				agg_date_format(NULL, a->format, (int64_t)v, s, sizeof s);
				cm_buf_put_u8(b, ',');
				agg_json_str(b, k2, strlen(k2));
				cm_buf_put_u8(b, ':');
				agg_json_str(b, s, strlen(s));
			}
		} else {
			cm_buf_printf(b, "{\"key\":%s,\"value\":", key);
			agg_json_double_or_null(b, v, v == v);
			cm_buf_put_u8(b, '}');
		}
	}
	cm_buf_put(b, p->keyed ? "}}" : "]}", 2);
	return CM_OK;
}

static void
pct_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	if (((const pct_params *)a->p)->hdr)
		agg_hdr_encode(n->d, b);
	else
		agg_td_encode(n->d, b);
}

static bool
pct_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	const pct_params *p = a->p;
	void *t = p->hdr ? (void *)agg_hdr_decode(r, p->digits)
	                 : (void *)agg_td_decode(r, p->compression);
	if (!t)
		return false;
	pct_free(a, n->d);
	n->d = t;
	return true;
}

const char *
agg_pct_type_name(const sr_agg *a)
{
	const pct_params *p = a->p;
	if (p->hdr)
		return p->ranks ? "hdr_percentile_ranks" : "hdr_percentiles";
	return p->ranks ? "tdigest_percentile_ranks" : "tdigest_percentiles";
}

const agg_ops agg_ops_percentiles = {
    .name = "percentiles",
    .needs_field = true,
    .parse = pct_parse,
    .free_params = pct_free_params,
    .state_new = pct_new,
    .state_free = pct_free,
    .seg_begin = pct_seg_begin,
    .collect = pct_collect,
    .merge = pct_merge,
    .render = pct_render,
    .encode = pct_encode,
    .decode = pct_decode,
    .metric_value = pct_value,
};

const agg_ops agg_ops_percentile_ranks = {
    .name = "percentile_ranks",
    .needs_field = true,
    .parse = pct_parse,
    .free_params = pct_free_params,
    .state_new = pct_new,
    .state_free = pct_free,
    .seg_begin = pct_seg_begin,
    .collect = pct_collect,
    .merge = pct_merge,
    .render = pct_render,
    .encode = pct_encode,
    .decode = pct_decode,
    .metric_value = pct_value,
};

/* ======================================================= median_absolute_deviation */

/* The median of the distances from the median, read off the same t-digest
 * percentiles keep (ES's InternalMedianAbsoluteDeviation does the same:
 * each centroid's distance from the digest's median, weighted by its
 * count, into a second digest). */
static cm_err
mad_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	pct_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->compression = 1000; /* ES's default for this aggregation */
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "field") || !strcmp(c->string, "missing") ||
		    !strcmp(c->string, "format"))
			continue;
		if (!strcmp(c->string, "compression")) {
			if (agg_parse_num(c, a->name, "compression", &p->compression, err))
				return CM_EPARSE;
			if (!(p->compression > 0))
				return cm_error_set(
				    err, CM_EINVAL,
				    "[compression] must be greater than 0. Found [%.1f] "
				    "in [%s]",
				    p->compression, a->name);
			if (p->compression < 20)
				p->compression = 20;
			if (p->compression > 10000)
				p->compression = 10000;
			continue;
		}
		return agg_unknown_param(a, c->string, err);
	}
	return CM_OK;
}

static bool
mad_value(const sr_agg *a, const agg_node *n, const char *key, double *v)
{
	if (key && strcmp(key, "value"))
		return false;
	*v = agg_td_mad(n->d);
	return true;
}

static cm_err
mad_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	double v = agg_td_mad(n->d);
	cm_buf *b = r->out;
	cm_buf_put(b, "{\"value\":", 9);
	agg_json_double_or_null(b, v, v == v);
	put_as_string(a, n, b, "value_as_string", v, v == v);
	cm_buf_put_u8(b, '}');
	return CM_OK;
}

const agg_ops agg_ops_median_absolute_deviation = {
    .name = "median_absolute_deviation",
    .needs_field = true,
    .parse = mad_parse,
    .free_params = pct_free_params,
    .state_new = pct_new,
    .state_free = pct_free,
    .seg_begin = pct_seg_begin,
    .collect = pct_collect,
    .merge = pct_merge,
    .render = mad_render,
    .encode = pct_encode,
    .decode = pct_decode,
    .metric_value = mad_value,
};

/* ================================================================ top_hits */

#define TH_MAX_SIZE 100
#define TH_MAX_SORT 8

typedef struct th_sortkey {
	bool score;
	char *field;
	bool desc;
} th_sortkey;

typedef struct th_params {
	uint32_t from, size;
	th_sortkey sort[TH_MAX_SORT];
	size_t nsort; /* 0 = _score desc */
	bool source;
	char **incl, **excl;
	size_t nincl, nexcl;
} th_params;

typedef struct th_val {
	uint8_t type; /* 0 missing, 1 long, 2 double, 3 string */
	int64_t l;
	double d;
	char *s;
	size_t slen;
} th_val;

typedef struct th_hit {
	float score;
	th_val sv[TH_MAX_SORT];
	uint64_t tie; /* shard, segment, doc */
	uint32_t doc, epoch;
	bool fetched;
	char *id, *source;
	size_t id_len, source_len;
	char *index;
} th_hit;

typedef struct th_state {
	th_hit *hits; /* sorted best first, at most from+size */
	size_t n;
	uint64_t total;
	float max_score;
	bool any_score;
} th_state;

typedef struct th_rt {
	const st_field_info *fi[TH_MAX_SORT];
	st_colblock cb[TH_MAX_SORT];
} th_rt;

static void
th_free_params(void *pp)
{
	th_params *p = pp;
	for (size_t i = 0; i < p->nsort; i++)
		cm_free(AGG_MEM, p->sort[i].field);
	for (size_t i = 0; i < p->nincl; i++)
		cm_free(AGG_MEM, p->incl[i]);
	for (size_t i = 0; i < p->nexcl; i++)
		cm_free(AGG_MEM, p->excl[i]);
	cm_free(AGG_MEM, p->incl);
	cm_free(AGG_MEM, p->excl);
	cm_free(AGG_MEM, p);
}

static cm_err
th_parse_sortkey(sr_agg *a, th_params *p, const cJSON *e, cm_error *err)
{
	if (p->nsort == TH_MAX_SORT)
		return cm_error_set(err, CM_EINVAL, "too many sort keys in [%s]", a->name);
	th_sortkey *k = &p->sort[p->nsort];
	const char *field = NULL;
	const char *order = NULL;
	if (cJSON_IsString(e))
		field = e->valuestring;
	else if (cJSON_IsObject(e) && e->child && !e->child->next) {
		field = e->child->string;
		const cJSON *o = e->child;
		if (cJSON_IsString(o))
			order = o->valuestring;
		else if (cJSON_IsObject(o)) {
			const cJSON *oo = cJSON_GetObjectItemCaseSensitive(o, "order");
			if (oo && cJSON_IsString(oo))
				order = oo->valuestring;
		} else
			return cm_error_set(err, CM_EPARSE, "malformed sort in [%s]", a->name);
	} else
		return cm_error_set(err, CM_EPARSE, "malformed sort in [%s]", a->name);
	if (order && strcmp(order, "asc") && strcmp(order, "desc"))
		return cm_error_set(err, CM_EPARSE, "Unknown SortOrder [%s]", order);
	k->score = !strcmp(field, "_score");
	k->desc = order ? !strcmp(order, "desc") : k->score;
	if (!k->score)
		k->field = cm_strdup(AGG_MEM, field);
	p->nsort++;
	return CM_OK;
}

static cm_err
th_parse_patterns(const cJSON *v, char ***out, size_t *n, cm_error *err)
{
	if (cJSON_IsString(v)) {
		*out = cm_calloc(AGG_MEM, 1, sizeof **out);
		(*out)[0] = cm_strdup(AGG_MEM, v->valuestring);
		*n = 1;
		return CM_OK;
	}
	if (!cJSON_IsArray(v))
		return cm_error_set(err, CM_EPARSE, "[_source] patterns must be strings");
	int k = cJSON_GetArraySize(v);
	if (k > 1000)
		return cm_error_set(err, CM_EINVAL, "too many [_source] patterns");
	*out = cm_calloc(AGG_MEM, k ? (size_t)k : 1, sizeof **out);
	for (const cJSON *e = v->child; e; e = e->next) {
		if (!cJSON_IsString(e))
			return cm_error_set(err, CM_EPARSE, "[_source] patterns must be strings");
		(*out)[(*n)++] = cm_strdup(AGG_MEM, e->valuestring);
	}
	return CM_OK;
}

static cm_err
th_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	th_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->size = 3;
	p->source = true;
	for (const cJSON *c = body->child; c; c = c->next) {
		int64_t v;
		if (!strcmp(c->string, "size") || !strcmp(c->string, "from")) {
			if (agg_parse_int(c, a->name, c->string, 0, TH_MAX_SIZE, &v, err))
				return cm_error_set(err, CM_EINVAL,
				                    "Top hits result window is too large, the top hits "
				                    "aggregator [%s]'s from + size must be less than or "
				                    "equal to: [%d]",
				                    a->name, TH_MAX_SIZE);
			if (c->string[0] == 's')
				p->size = (uint32_t)v;
			else
				p->from = (uint32_t)v;
		} else if (!strcmp(c->string, "sort")) {
			if (cJSON_IsArray(c)) {
				for (const cJSON *e = c->child; e; e = e->next)
					if (th_parse_sortkey(a, p, e, err))
						return CM_EPARSE;
			} else if (th_parse_sortkey(a, p, c, err))
				return CM_EPARSE;
		} else if (!strcmp(c->string, "_source")) {
			if (cJSON_IsBool(c))
				p->source = cJSON_IsTrue(c);
			else if (cJSON_IsObject(c)) {
				for (const cJSON *e = c->child; e; e = e->next) {
					cm_err rc;
					if (!strcmp(e->string, "includes") || !strcmp(e->string, "include"))
						rc = th_parse_patterns(e, &p->incl, &p->nincl, err);
					else if (!strcmp(e->string, "excludes") ||
					         !strcmp(e->string, "exclude"))
						rc = th_parse_patterns(e, &p->excl, &p->nexcl, err);
					else
						rc = cm_error_set(err, CM_EPARSE,
						                  "unknown key [%s] in [_source]", e->string);
					if (rc)
						return rc;
				}
			} else if (th_parse_patterns(c, &p->incl, &p->nincl, err))
				return CM_EPARSE;
		} else if (!strcmp(c->string, "track_scores") || !strcmp(c->string, "version") ||
		           !strcmp(c->string, "seq_no_primary_term") || !strcmp(c->string, "explain"))
			continue;
		else
			return agg_unknown_param(a, c->string, err);
	}
	if (p->from + p->size > TH_MAX_SIZE)
		return cm_error_set(err, CM_EINVAL,
		                    "Top hits result window is too large, the top hits aggregator "
		                    "[%s]'s from + size must be less than or equal to: [%d] but was "
		                    "[%u].",
		                    a->name, TH_MAX_SIZE, p->from + p->size);
	return CM_OK;
}

static void *
th_new(const sr_agg *a)
{
	const th_params *p = a->p;
	th_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->hits = cm_calloc(AGG_MEM, p->from + p->size + 1, sizeof *s->hits);
	s->max_score = -INFINITY;
	return s;
}

static void
th_hit_clear(th_hit *h)
{
	for (int i = 0; i < TH_MAX_SORT; i++)
		cm_free(AGG_MEM, h->sv[i].s);
	cm_free(AGG_MEM, h->id);
	cm_free(AGG_MEM, h->source);
	cm_free(AGG_MEM, h->index);
	memset(h, 0, sizeof *h);
}

static void
th_free(const sr_agg *a, void *d)
{
	th_state *s = d;
	for (size_t i = 0; i < s->n; i++)
		th_hit_clear(&s->hits[i]);
	cm_free(AGG_MEM, s->hits);
	cm_free(AGG_MEM, s);
}

static int
th_val_cmp(const th_val *x, const th_val *y)
{
	if (x->type != y->type)
		return 0; /* mixed types do not happen within one field */
	switch (x->type) {
	case 1: return (x->l > y->l) - (x->l < y->l);
	case 2: return (x->d > y->d) - (x->d < y->d);
	case 3: {
		size_t m = x->slen < y->slen ? x->slen : y->slen;
		int c = memcmp(x->s, y->s, m);
		return c ? c : (x->slen > y->slen) - (x->slen < y->slen);
	}
	default: return 0;
	}
}

/* NaN (no score) ranks below any score and equal to another NaN. */
static int
score_cmp(float x, float y)
{
	bool xn = x != x, yn = y != y;
	if (xn || yn)
		return xn == yn ? 0 : xn ? -1 : 1;
	return (x > y) - (x < y);
}

/* <0 when x ranks before y */
static int
th_cmp(const th_params *p, const th_hit *x, const th_hit *y)
{
	if (p->nsort == 0) {
		int c = score_cmp(x->score, y->score);
		if (c)
			return -c;
	}
	for (size_t i = 0; i < p->nsort; i++) {
		int c;
		if (p->sort[i].score)
			c = score_cmp(x->score, y->score);
		else {
			bool xm = x->sv[i].type == 0, ym = y->sv[i].type == 0;
			if (xm || ym) {
				if (xm != ym)
					return xm ? 1 : -1; /* missing last either way */
				continue;
			}
			c = th_val_cmp(&x->sv[i], &y->sv[i]);
		}
		if (c)
			return p->sort[i].desc ? -c : c;
	}
	return (x->tie > y->tie) - (x->tie < y->tie);
}

static cm_err
th_seg_begin(agg_rt *rt, cm_error *err)
{
	const th_params *p = rt->spec->p;
	th_rt *t = cm_calloc(AGG_MEM, 1, sizeof *t);
	rt->kd = t;
	for (size_t i = 0; i < p->nsort; i++) {
		if (p->sort[i].score)
			continue;
		const st_field_info *fi = st_segment_field(rt->ctx->seg, p->sort[i].field);
		const st_mapping *m = fi ? st_reader_mapping(rt->ctx->reader) : NULL;
		const st_field_def *def = m ? st_mapping_find(m, p->sort[i].field) : NULL;
		if (def && st_field_type_is_range(def->type))
			return cm_error_set(
			    err, CM_EINVAL,
			    "sorting on range field [%s] of type [%s] is not supported",
			    p->sort[i].field, st_field_type_name(def->type));
		if (fi && !(fi->flags & ST_FI_COLUMN))
			return cm_error_set(err, CM_EINVAL,
			                    "Text fields are not optimised for operations that require "
			                    "per-document field data like aggregations and sorting, so "
			                    "these operations are disabled by default. Please use a "
			                    "keyword field instead. Alternatively, set fielddata=true on "
			                    "[%s] in order to load field data by uninverting the "
			                    "inverted index. Note that this can use significant memory.",
			                    p->sort[i].field);
		t->fi[i] = fi;
		t->cb[i].block = UINT32_MAX;
		t->cb[i].first_doc = UINT32_MAX;
	}
	return CM_OK;
}

static void
th_seg_end(agg_rt *rt)
{
	th_rt *t = rt->kd;
	if (!t)
		return;
	for (int i = 0; i < TH_MAX_SORT; i++)
		st_colblock_free(&t->cb[i]);
	cm_free(AGG_MEM, t);
}

static void
th_sortval(agg_rt *rt, th_rt *t, const th_params *p, size_t i, uint32_t doc, th_val *out)
{
	out->type = 0;
	const st_field_info *fi = t->fi[i];
	if (!fi)
		return;
	const int64_t *v;
	int k = st_col_values(rt->ctx->txn, fi, &t->cb[i], doc, &v);
	if (k <= 0)
		return;
	/* multi-valued: asc sorts by the smallest, desc by the largest (ES mode) */
	int64_t x = p->sort[i].desc ? v[k - 1] : v[0];
	if (st_field_type_is_ordinal(fi->type)) {
		const uint8_t *term;
		size_t len;
		if (st_ord_term(rt->ctx->txn, fi, (uint64_t)x, &term, &len))
			return;
		char ip[ST_IP_STRLEN];
		if (fi->type == ST_FT_IP && len == ST_IP_LEN) {
			/* sort values of ip fields print as addresses (their order is the bytes') */
			st_ip_format(term, ip, sizeof ip);
			term = (const uint8_t *)ip;
			len = strlen(ip);
		}
		out->type = 3;
		out->s = cm_strndup(AGG_MEM, (const char *)term, len);
		out->slen = len;
	} else if (st_field_type_is_double(fi->type)) {
		out->type = 2;
		out->d = st_sortable_to_double(x);
	} else {
		out->type = 1;
		out->l = x;
	}
}

static void
th_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	th_state *s = n->d;
	const th_params *p = rt->spec->p;
	th_rt *t = rt->kd;
	size_t cap = p->from + p->size;
	s->total += cnt;
	for (size_t i = 0; i < cnt; i++) {
		float sc = scores ? scores[i] : NAN;
		if (scores) {
			s->any_score = true;
			if (sc > s->max_score)
				s->max_score = sc;
		}
		if (cap == 0)
			continue;
		th_hit h;
		memset(&h, 0, sizeof h);
		h.score = sc;
		h.doc = docs[i];
		h.epoch = rt->epoch;
		h.tie = ((uint64_t)rt->root->shard << 48) | ((uint64_t)(rt->root->seg_index & 0xffff) << 32) |
		        docs[i];
		/* cheap pre-check on score ordering avoids column reads */
		if (s->n == cap && p->nsort == 0 && score_cmp(sc, s->hits[cap - 1].score) <= 0)
			continue;
		for (size_t k = 0; k < p->nsort; k++)
			if (!p->sort[k].score)
				th_sortval(rt, t, p, k, docs[i], &h.sv[k]);
		if (s->n == cap && th_cmp(p, &h, &s->hits[cap - 1]) >= 0) {
			th_hit_clear(&h);
			continue;
		}
		if (s->n == cap)
			th_hit_clear(&s->hits[--s->n]);
		size_t pos = s->n;
		while (pos > 0 && th_cmp(p, &h, &s->hits[pos - 1]) < 0) {
			s->hits[pos] = s->hits[pos - 1];
			pos--;
		}
		s->hits[pos] = h;
		s->n++;
		agg_mark_dirty(rt, n);
	}
}

static void
th_flush(agg_rt *rt, agg_node *n)
{
	th_state *s = n->d;
	const th_params *p = rt->spec->p;
	cm_buf id, src;
	cm_buf_init(&id, AGG_MEM);
	cm_buf_init(&src, AGG_MEM);
	for (size_t i = 0; i < s->n; i++) {
		th_hit *h = &s->hits[i];
		if (h->fetched || h->epoch != rt->epoch)
			continue;
		cm_buf_reset(&id);
		cm_buf_reset(&src);
		if (st_stored_get(rt->ctx->txn, h->doc, &id, &src)) {
			cm_error_set(&rt->root->err, CM_ECORRUPT, "could not read stored document");
			continue;
		}
		h->fetched = true;
		h->id = cm_strndup(AGG_MEM, (const char *)id.data, id.len);
		h->id_len = id.len;
		if (rt->root->index)
			h->index = cm_strdup(AGG_MEM, rt->root->index);
		if (!p->source || !src.len) /* no source kept (_source disabled) */
			continue;
		if (p->nincl || p->nexcl) {
			/* the same filtering as search hits */
			cm_buf f;
			cm_buf_init(&f, AGG_MEM);
			if (sr_source_filter((const char *)src.data, src.len, p->incl, p->nincl, p->excl,
			                     p->nexcl, &f) == CM_OK) {
				h->source = cm_strndup(AGG_MEM, (const char *)f.data, f.len);
				h->source_len = f.len;
			}
			cm_buf_free(&f);
		} else {
			h->source = cm_strndup(AGG_MEM, (const char *)src.data, src.len);
			h->source_len = src.len;
		}
	}
	cm_buf_free(&id);
	cm_buf_free(&src);
}

static void
th_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	th_state *x = into->d, *y = from->d;
	const th_params *p = a->p;
	size_t cap = p->from + p->size;
	x->total += y->total;
	if (y->any_score) {
		x->any_score = true;
		if (y->max_score > x->max_score)
			x->max_score = y->max_score;
	}
	th_hit *m = cm_calloc(AGG_MEM, cap + 1, sizeof *m);
	size_t i = 0, j = 0, k = 0;
	while (k < cap && (i < x->n || j < y->n)) {
		if (j >= y->n || (i < x->n && th_cmp(p, &x->hits[i], &y->hits[j]) <= 0))
			m[k++] = x->hits[i++];
		else
			m[k++] = y->hits[j++];
	}
	for (; i < x->n; i++)
		th_hit_clear(&x->hits[i]);
	for (; j < y->n; j++)
		th_hit_clear(&y->hits[j]);
	y->n = 0;
	cm_free(AGG_MEM, x->hits);
	x->hits = m;
	x->n = k;
}

static void
th_render_val(cm_buf *b, const th_val *v)
{
	switch (v->type) {
	case 1: cm_buf_printf(b, "%lld", (long long)v->l); break;
	case 2: agg_json_double(b, v->d); break;
	case 3: agg_json_str(b, v->s, v->slen); break;
	default: cm_buf_put(b, "null", 4);
	}
}

static cm_err
th_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const th_state *s = n->d;
	const th_params *p = a->p;
	cm_buf *b = r->out;
	bool by_score = p->nsort == 0;
	for (size_t i = 0; i < p->nsort; i++)
		by_score |= p->sort[i].score;
	cm_buf_printf(b, "{\"hits\":{\"total\":{\"value\":%llu,\"relation\":\"eq\"},\"max_score\":",
	              (unsigned long long)s->total);
	agg_json_double_or_null(b, s->max_score, by_score && s->any_score && s->total);
	cm_buf_put(b, ",\"hits\":[", 9);
	for (size_t i = p->from; i < s->n; i++) {
		const th_hit *h = &s->hits[i];
		if (i > p->from)
			cm_buf_put_u8(b, ',');
		cm_buf_put_u8(b, '{');
		if (h->index) {
			cm_buf_put(b, "\"_index\":", 9);
			agg_json_str(b, h->index, strlen(h->index));
			cm_buf_put_u8(b, ',');
		}
		cm_buf_put(b, "\"_type\":\"_doc\",\"_id\":", 21);
		agg_json_str(b, h->id ? h->id : "", h->id ? h->id_len : 0);
		cm_buf_put(b, ",\"_score\":", 10);
		agg_json_double_or_null(b, h->score, by_score && h->score == h->score);
		if (h->source) {
			cm_buf_put(b, ",\"_source\":", 11);
			cm_buf_put(b, h->source, h->source_len);
		}
		if (p->nsort) {
			cm_buf_put(b, ",\"sort\":[", 9);
			for (size_t k = 0; k < p->nsort; k++) {
				if (k)
					cm_buf_put_u8(b, ',');
				if (p->sort[k].score)
					agg_json_double(b, h->score);
				else
					th_render_val(b, &h->sv[k]);
			}
			cm_buf_put_u8(b, ']');
		}
		cm_buf_put_u8(b, '}');
	}
	cm_buf_put(b, "]}}", 3);
	return CM_OK;
}

static void
th_put_s(cm_buf *b, const char *s, size_t n)
{
	cm_buf_put_varint(b, s ? n + 1 : 0);
	if (s)
		cm_buf_put(b, s, n);
}

static bool
th_get_s(cm_rd *r, char **s, size_t *n)
{
	uint64_t k;
	const uint8_t *p;
	if (!cm_rd_varint(r, &k) || k > cm_rd_left(r) + 1)
		return false;
	if (!k)
		return true;
	if (!cm_rd_bytes(r, k - 1, &p))
		return false;
	*s = cm_strndup(AGG_MEM, (const char *)p, k - 1);
	if (n)
		*n = k - 1;
	return true;
}

static void
th_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const th_state *s = n->d;
	const th_params *p = a->p;
	cm_buf_put_varint(b, s->total);
	cm_buf_put_u8(b, s->any_score);
	agg_put_double(b, s->max_score);
	cm_buf_put_varint(b, s->n);
	for (size_t i = 0; i < s->n; i++) {
		const th_hit *h = &s->hits[i];
		agg_put_double(b, h->score);
		cm_buf_put_u64(b, h->tie);
		for (size_t k = 0; k < p->nsort; k++) {
			const th_val *v = &h->sv[k];
			cm_buf_put_u8(b, v->type);
			if (v->type == 1)
				cm_buf_put_u64(b, (uint64_t)v->l);
			else if (v->type == 2)
				agg_put_double(b, v->d);
			else if (v->type == 3)
				th_put_s(b, v->s, v->slen);
		}
		th_put_s(b, h->id, h->id_len);
		th_put_s(b, h->source, h->source_len);
		th_put_s(b, h->index, h->index ? strlen(h->index) : 0);
	}
}

static bool
th_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	th_state *s = n->d;
	const th_params *p = a->p;
	uint64_t cnt;
	uint8_t any;
	double ms;
	if (!cm_rd_varint(r, &s->total) || !cm_rd_u8(r, &any) || !agg_get_double(r, &ms) ||
	    !agg_get_count(r, p->from + p->size, &cnt))
		return false;
	s->any_score = any;
	s->max_score = (float)ms;
	for (uint64_t i = 0; i < cnt; i++) {
		th_hit *h = &s->hits[s->n++];
		double sc;
		if (!agg_get_double(r, &sc) || !cm_rd_u64(r, &h->tie))
			return false;
		h->score = (float)sc;
		h->fetched = true;
		for (size_t k = 0; k < p->nsort; k++) {
			th_val *v = &h->sv[k];
			if (!cm_rd_u8(r, &v->type) || v->type > 3)
				return false;
			uint64_t u;
			if (v->type == 1) {
				if (!cm_rd_u64(r, &u))
					return false;
				v->l = (int64_t)u;
			} else if (v->type == 2) {
				if (!agg_get_double(r, &v->d))
					return false;
			} else if (v->type == 3) {
				if (!th_get_s(r, &v->s, &v->slen) || !v->s)
					return false;
			}
		}
		if (!th_get_s(r, &h->id, &h->id_len) || !th_get_s(r, &h->source, &h->source_len) ||
		    !th_get_s(r, &h->index, NULL))
			return false;
	}
	return true;
}

const agg_ops agg_ops_top_hits = {
    .name = "top_hits",
    .parse = th_parse,
    .free_params = th_free_params,
    .state_new = th_new,
    .state_free = th_free,
    .seg_begin = th_seg_begin,
    .collect = th_collect,
    .seg_flush = th_flush,
    .seg_end = th_seg_end,
    .merge = th_merge,
    .render = th_render,
    .encode = th_encode,
    .decode = th_decode,
};

/* Does any top_hits in the tree rank by score? Then the collector wants
 * scores. */
bool
sr_agg_needs_scores(const sr_agg *a)
{
	if (!a)
		return false;
	if (a->kind == AGG_SAMPLER || a->kind == AGG_DIVERSIFIED_SAMPLER)
		return true; /* the best docs by score */
	if (a->kind == AGG_TOP_HITS) {
		const th_params *p = a->p;
		if (p->nsort == 0)
			return true;
		for (size_t i = 0; i < p->nsort; i++)
			if (p->sort[i].score)
				return true;
	}
	for (size_t i = 0; i < a->nsubs; i++)
		if (sr_agg_needs_scores(a->subs[i]))
			return true;
	return false;
}

/* ================================================================ weighted_avg */

/* "value" and "weight" are each a field (and a missing value), held as
 * hidden specs so the usual column reading applies to both. */
typedef struct wavg_params {
	sr_agg *src[2]; /* value, weight */
} wavg_params;

typedef struct wavg {
	double sum, sum_c, w, w_c;
} wavg;

static void
wavg_free_params(void *pp)
{
	wavg_params *p = pp;
	sr_agg_free(p->src[0]);
	sr_agg_free(p->src[1]);
	cm_free(AGG_MEM, p);
}

static cm_err
wavg_parse_src(sr_agg *a, const char *what, const cJSON *v, sr_agg **out, cm_error *err)
{
	if (!cJSON_IsObject(v))
		return cm_error_set(err, CM_EPARSE, "[weighted_avg] failed to parse field [%s]", what);
	sr_agg *h = cm_calloc(AGG_MEM, 1, sizeof *h);
	*out = h;
	h->name = cm_strdup(AGG_MEM, a->name);
	h->kind = AGG_AVG;
	h->ops = &agg_ops_avg;
	for (const cJSON *c = v->child; c; c = c->next) {
		if (!strcmp(c->string, "field")) {
			if (!cJSON_IsString(c))
				return cm_error_set(err, CM_EPARSE, "[%s] field must be a string", what);
			cm_free(AGG_MEM, h->field);
			h->field = cm_strdup(AGG_MEM, c->valuestring);
		} else if (!strcmp(c->string, "missing")) {
			double d;
			if (agg_parse_num(c, what, "missing", &d, err))
				return CM_EPARSE;
			h->missing.set = h->missing.is_num = true;
			h->missing.d = d;
			h->missing.l = d > -9.2e18 && d < 9.2e18 ? (int64_t)d : 0;
		} else if (!strcmp(c->string, "script"))
			return cm_error_set(err, CM_EINVAL,
			                    "[script] is not supported in aggregation [%s]", a->name);
		else
			return cm_error_set(err, CM_EPARSE, "[%s] unknown field [%s]", what, c->string);
	}
	if (!h->field)
		return cm_error_set(err, CM_EINVAL,
		                    "[%s] Required one of fields [field, script], but none were "
		                    "specified.",
		                    what);
	return CM_OK;
}

static cm_err
wavg_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	wavg_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "format") || !strcmp(k, "value_type"))
			continue;
		if (!strcmp(k, "value") || !strcmp(k, "weight")) {
			int i = k[0] == 'w';
			if (p->src[i])
				return cm_error_set(err, CM_EPARSE, "[weighted_avg] duplicate field [%s]", k);
			if (wavg_parse_src(a, k, c, &p->src[i], err))
				return err->code;
		} else
			return agg_unknown_param(a, k, err);
	}
	if (!p->src[0] || !p->src[1])
		return cm_error_set(err, CM_EINVAL, "[weighted_avg] Required [%s]",
		                    p->src[0] ? "weight" : "value");
	return CM_OK;
}

static void *
wavg_new(const sr_agg *a)
{
	return cm_calloc(AGG_MEM, 1, sizeof(wavg));
}

static void
wavg_state_free(const sr_agg *a, void *d)
{
	cm_free(AGG_MEM, d);
}

static cm_err
wavg_seg_begin(agg_rt *rt, cm_error *err)
{
	const wavg_params *p = rt->spec->p;
	agg_rt *k = cm_calloc(AGG_MEM, 2, sizeof *k);
	rt->kd = k;
	for (int i = 0; i < 2; i++) {
		cm_err rc = agg_rt_field(rt->root, &k[i], p->src[i], rt->ctx);
		if (rc)
			return rc;
		if (!agg_field_numeric_or_fail(&k[i], err))
			return CM_EINVAL;
	}
	return CM_OK;
}

static void
wavg_seg_end(agg_rt *rt)
{
	agg_rt *k = rt->kd;
	if (!k)
		return;
	for (int i = 0; i < 2; i++) {
		st_colblock_free(&k[i].cb);
		cm_free(AGG_MEM, k[i].conv_buf);
	}
	cm_free(AGG_MEM, k);
}

static void
wavg_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	const wavg_params *p = rt->spec->p;
	agg_rt *k = rt->kd;
	wavg *s = n->d;
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *wv, *vv;
		int nw = k[1].fi ? agg_values(&k[1], docs[i], &wv) : 0;
		double w;
		if (nw > 1) {
			cm_error_set(
			    &rt->root->err, CM_EAGGEXEC,
			    "Encountered more than one weight for a single document. Use a "
			    "script to combine multiple weights-per-doc into a single value.");
			return;
		}
		if (nw == 1)
			w = agg_num(&k[1], wv[0]);
		else if (p->src[1]->missing.set)
			w = p->src[1]->missing.d;
		else
			continue;
		int nv = k[0].fi ? agg_values(&k[0], docs[i], &vv) : 0;
		if (nv == 0) {
			if (!p->src[0]->missing.set)
				continue;
			kahan_add(&s->sum, &s->sum_c, p->src[0]->missing.d * w);
			kahan_add(&s->w, &s->w_c, w);
		}
		for (int j = 0; j < nv; j++) {
			kahan_add(&s->sum, &s->sum_c, agg_num(&k[0], vv[j]) * w);
			kahan_add(&s->w, &s->w_c, w);
		}
	}
}

static void
wavg_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	wavg *x = into->d, *y = from->d;
	kahan_add(&x->sum, &x->sum_c, y->sum);
	kahan_add(&x->sum, &x->sum_c, -y->sum_c);
	kahan_add(&x->w, &x->w_c, y->w);
	kahan_add(&x->w, &x->w_c, -y->w_c);
	memset(y, 0, sizeof *y);
}

static bool
wavg_value(const sr_agg *a, const agg_node *n, const char *key, double *v)
{
	const wavg *s = n->d;
	if (key && strcmp(key, "value"))
		return false;
	*v = s->w == 0 ? NAN : s->sum / s->w;
	return true;
}

static cm_err
wavg_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	double v;
	wavg_value(a, n, NULL, &v);
	cm_buf_put(r->out, "{\"value\":", 9);
	agg_json_double_or_null(r->out, v, v == v);
	cm_buf_put_u8(r->out, '}');
	return CM_OK;
}

static void
wavg_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const wavg *s = n->d;
	agg_put_double(b, s->sum);
	agg_put_double(b, s->sum_c);
	agg_put_double(b, s->w);
	agg_put_double(b, s->w_c);
}

static bool
wavg_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	wavg *s = n->d;
	return agg_get_double(r, &s->sum) && agg_get_double(r, &s->sum_c) &&
	       agg_get_double(r, &s->w) && agg_get_double(r, &s->w_c);
}

const agg_ops agg_ops_weighted_avg = {
    .name = "weighted_avg",
    .needs_field = false,
    .parse = wavg_parse,
    .free_params = wavg_free_params,
    .state_new = wavg_new,
    .state_free = wavg_state_free,
    .seg_begin = wavg_seg_begin,
    .collect = wavg_collect,
    .seg_end = wavg_seg_end,
    .merge = wavg_merge,
    .render = wavg_render,
    .encode = wavg_encode,
    .decode = wavg_decode,
    .metric_value = wavg_value,
};

/* ================================================================ top_metrics */

/* The `size` docs first by one numeric sort field, with the values of some
 * numeric metric fields. Fields are hidden specs, read like any column. */
#define TM_MAX_METRICS 10
#define TM_MAX_SIZE 10

enum { TMV_NULL, TMV_LONG, TMV_DOUBLE, TMV_DATE };

typedef struct tm_val {
	uint8_t kind;
	int64_t l;
	double d; /* the value as a double (longs too), for ordering */
} tm_val;

typedef struct tm_params {
	sr_agg *sort;  /* its field */
	bool desc;
	sr_agg *metrics[TM_MAX_METRICS];
	size_t nmetrics;
	size_t size;
} tm_params;

typedef struct tm_entry {
	tm_val sort;
	tm_val m[TM_MAX_METRICS];
} tm_entry;

typedef struct tm_state {
	tm_entry e[TM_MAX_SIZE];
	size_t n;
} tm_state;

static void
tm_free_params(void *pp)
{
	tm_params *p = pp;
	sr_agg_free(p->sort);
	for (size_t i = 0; i < p->nmetrics; i++)
		sr_agg_free(p->metrics[i]);
	cm_free(AGG_MEM, p);
}

static sr_agg *
tm_field_spec(const char *name, const char *field)
{
	sr_agg *h = cm_calloc(AGG_MEM, 1, sizeof *h);
	h->name = cm_strdup(AGG_MEM, name);
	h->kind = AGG_MAX;
	h->ops = &agg_ops_max;
	h->field = cm_strdup(AGG_MEM, field);
	return h;
}

static cm_err
tm_parse_metric(sr_agg *a, tm_params *p, const cJSON *m, cm_error *err)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "field");
	if (!cJSON_IsObject(m) || !cJSON_IsString(f) || cJSON_GetArraySize(m) != 1)
		return cm_error_set(err, CM_EPARSE,
		                    "[top_metrics] each of [metrics] must be {\"field\": name}");
	if (p->nmetrics == TM_MAX_METRICS)
		return cm_error_set(err, CM_EINVAL, "[top_metrics] at most %d metrics",
		                    TM_MAX_METRICS);
	p->metrics[p->nmetrics++] = tm_field_spec(f->valuestring, f->valuestring);
	return CM_OK;
}

static cm_err
tm_parse_sort(sr_agg *a, tm_params *p, const cJSON *s, cm_error *err)
{
	if (cJSON_IsArray(s)) {
		if (cJSON_GetArraySize(s) != 1)
			return cm_error_set(err, CM_EINVAL,
			                    "only one sort is supported by [top_metrics]");
		s = s->child;
	}
	const char *field = NULL;
	if (cJSON_IsString(s))
		field = s->valuestring;
	else if (cJSON_IsObject(s) && s->child && !s->child->next) {
		field = s->child->string;
		const cJSON *o = s->child;
		if (cJSON_IsObject(o))
			o = cJSON_GetObjectItemCaseSensitive(o, "order");
		if (o) {
			if (!cJSON_IsString(o) ||
			    (strcmp(o->valuestring, "asc") && strcmp(o->valuestring, "desc")))
				return cm_error_set(err, CM_EINVAL,
				                    "[top_metrics] sort order must be [asc] or [desc]");
			p->desc = !strcmp(o->valuestring, "desc");
		}
	} else
		return cm_error_set(err, CM_EPARSE, "[top_metrics] failed to parse field [sort]");
	if (field[0] == '_')
		return cm_error_set(err, CM_EINVAL,
		                    "[top_metrics] sort on [%s] is not supported by Shoal: sort on a "
		                    "numeric or date field",
		                    field);
	p->sort = tm_field_spec(field, field);
	return CM_OK;
}

static cm_err
tm_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	tm_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->size = 1;
	bool has_metrics = false;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		cm_err rc = CM_OK;
		if (!strcmp(k, "metrics")) {
			has_metrics = true;
			if (cJSON_IsArray(c)) {
				for (const cJSON *m = c->child; m && !rc; m = m->next)
					rc = tm_parse_metric(a, p, m, err);
			} else
				rc = tm_parse_metric(a, p, c, err);
		} else if (!strcmp(k, "sort")) {
			if (p->sort)
				return cm_error_set(err, CM_EPARSE, "[top_metrics] duplicate [sort]");
			rc = tm_parse_sort(a, p, c, err);
		} else if (!strcmp(k, "size")) {
			int64_t v;
			if ((rc = agg_parse_int(c, a->name, k, INT32_MIN, INT32_MAX, &v, err)))
				return rc;
			if (v < 1)
				return cm_error_set(err, CM_EINVAL, "[size] must be more than 0 but was [%lld]",
				                    (long long)v);
			if (v > TM_MAX_SIZE)
				return cm_error_set(err, CM_EINVAL,
				                    "[top_metrics.size] must not be more than [%d] but was "
				                    "[%lld]. This limit can be set by changing the "
				                    "[index.top_metrics_max_size] index level setting.",
				                    TM_MAX_SIZE, (long long)v);
			p->size = (size_t)v;
		} else
			return agg_unknown_param(a, k, err);
		if (rc)
			return rc;
	}
	if (!has_metrics || !p->nmetrics)
		return cm_error_set(err, CM_EINVAL, "[top_metrics] Required [metrics]");
	if (!p->sort)
		return cm_error_set(err, CM_EINVAL, "[top_metrics] Required [sort]");
	return CM_OK;
}

static void *
tm_new(const sr_agg *a)
{
	return cm_calloc(AGG_MEM, 1, sizeof(tm_state));
}

static void
tm_state_free(const sr_agg *a, void *d)
{
	cm_free(AGG_MEM, d);
}

static cm_err
tm_seg_begin(agg_rt *rt, cm_error *err)
{
	const tm_params *p = rt->spec->p;
	agg_rt *k = cm_calloc(AGG_MEM, p->nmetrics + 1, sizeof *k);
	rt->kd = k;
	for (size_t i = 0; i <= p->nmetrics; i++) {
		const sr_agg *f = i ? p->metrics[i - 1] : p->sort;
		cm_err rc = agg_rt_field(rt->root, &k[i], f, rt->ctx);
		if (rc)
			return rc;
		if (!agg_field_numeric_or_fail(&k[i], err))
			return CM_EINVAL;
	}
	return CM_OK;
}

static void
tm_seg_end(agg_rt *rt)
{
	const tm_params *p = rt->spec->p;
	agg_rt *k = rt->kd;
	if (!k)
		return;
	for (size_t i = 0; i <= p->nmetrics; i++) {
		st_colblock_free(&k[i].cb);
		cm_free(AGG_MEM, k[i].conv_buf);
	}
	cm_free(AGG_MEM, k);
}

static tm_val
tm_make(const agg_rt *rt, int64_t raw)
{
	tm_val v = {0};
	if (rt->is_double) {
		v.kind = TMV_DOUBLE;
		v.d = agg_num(rt, raw);
	} else {
		v.kind = agg_ftype(rt->fi->type) == ST_FT_DATE ? TMV_DATE : TMV_LONG;
		v.l = raw;
		v.d = (double)raw;
	}
	return v;
}

/* true when x sorts before y */
static bool
tm_before(const tm_params *p, const tm_val *x, const tm_val *y)
{
	return p->desc ? x->d > y->d : x->d < y->d;
}

static void
tm_offer(const tm_params *p, tm_state *s, const tm_entry *e)
{
	if (s->n == p->size && !tm_before(p, &e->sort, &s->e[s->n - 1].sort))
		return;
	size_t i = s->n < p->size ? s->n++ : s->n - 1;
	while (i > 0 && tm_before(p, &e->sort, &s->e[i - 1].sort)) {
		s->e[i] = s->e[i - 1];
		i--;
	}
	s->e[i] = *e;
}

static void
tm_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	const tm_params *p = rt->spec->p;
	agg_rt *k = rt->kd;
	if (!k[0].fi)
		return;
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		int nv = agg_values(&k[0], docs[i], &v);
		if (nv == 0)
			continue;
		tm_entry e;
		memset(&e, 0, sizeof e);
		/* a multi-valued sort field sorts by its min (asc) or max (desc) */
		e.sort = tm_make(&k[0], v[p->desc ? nv - 1 : 0]);
		tm_state *s = n->d;
		if (s->n == p->size && !tm_before(p, &e.sort, &s->e[s->n - 1].sort))
			continue;
		for (size_t m = 0; m < p->nmetrics; m++) {
			const int64_t *mv;
			if (k[m + 1].fi && agg_values(&k[m + 1], docs[i], &mv) > 0)
				e.m[m] = tm_make(&k[m + 1], mv[0]);
		}
		tm_offer(p, s, &e);
	}
}

static void
tm_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	tm_state *y = from->d;
	for (size_t i = 0; i < y->n; i++)
		tm_offer(a->p, into->d, &y->e[i]);
	y->n = 0;
}

static void
tm_put_val(cm_buf *b, const tm_val *v)
{
	char s[96];
	switch (v->kind) {
	case TMV_LONG: cm_buf_printf(b, "%lld", (long long)v->l); break;
	case TMV_DOUBLE: agg_json_double_or_null(b, v->d, v->d == v->d); break;
	case TMV_DATE:
		agg_date_format(NULL, NULL, v->l, s, sizeof s);
		agg_json_str(b, s, strlen(s));
		break;
	default: cm_buf_put(b, "null", 4);
	}
}

static cm_err
tm_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const tm_params *p = a->p;
	const tm_state *s = n->d;
	cm_buf *b = r->out;
	cm_buf_put(b, "{\"top\":[", 8);
	for (size_t i = 0; i < s->n; i++) {
		cm_buf_put(b, i ? ",{\"sort\":[" : "{\"sort\":[", i ? 10 : 9);
		tm_put_val(b, &s->e[i].sort);
		cm_buf_put(b, "],\"metrics\":{", 13);
		for (size_t m = 0; m < p->nmetrics; m++) {
			if (m)
				cm_buf_put_u8(b, ',');
			agg_json_str(b, p->metrics[m]->name, strlen(p->metrics[m]->name));
			cm_buf_put_u8(b, ':');
			tm_put_val(b, &s->e[i].m[m]);
		}
		cm_buf_put(b, "}}", 2);
	}
	cm_buf_put(b, "]}", 2);
	return CM_OK;
}

static bool
tm_value(const sr_agg *a, const agg_node *n, const char *key, double *v)
{
	const tm_params *p = a->p;
	const tm_state *s = n->d;
	if (p->size != 1)
		return false;
	for (size_t m = 0; m < p->nmetrics; m++)
		if (key ? !strcmp(key, p->metrics[m]->name) : p->nmetrics == 1) {
			*v = s->n && s->e[0].m[m].kind != TMV_NULL ? s->e[0].m[m].d : NAN;
			return true;
		}
	return false;
}

static void
tm_put(cm_buf *b, const tm_val *v)
{
	cm_buf_put_u8(b, v->kind);
	cm_buf_put_u64(b, (uint64_t)v->l);
	agg_put_double(b, v->d);
}

static bool
tm_get(cm_rd *r, tm_val *v)
{
	uint64_t l;
	if (!cm_rd_u8(r, &v->kind) || v->kind > TMV_DATE || !cm_rd_u64(r, &l) ||
	    !agg_get_double(r, &v->d))
		return false;
	v->l = (int64_t)l;
	return true;
}

static void
tm_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const tm_params *p = a->p;
	const tm_state *s = n->d;
	cm_buf_put_varint(b, s->n);
	for (size_t i = 0; i < s->n; i++) {
		tm_put(b, &s->e[i].sort);
		for (size_t m = 0; m < p->nmetrics; m++)
			tm_put(b, &s->e[i].m[m]);
	}
}

static bool
tm_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	const tm_params *p = a->p;
	tm_state *s = n->d;
	uint64_t cnt;
	if (!cm_rd_varint(r, &cnt) || cnt > p->size)
		return false;
	for (uint64_t i = 0; i < cnt; i++) {
		tm_entry e;
		memset(&e, 0, sizeof e);
		if (!tm_get(r, &e.sort))
			return false;
		for (size_t m = 0; m < p->nmetrics; m++)
			if (!tm_get(r, &e.m[m]))
				return false;
		tm_offer(p, s, &e);
	}
	return true;
}

const agg_ops agg_ops_top_metrics = {
    .name = "top_metrics",
    .needs_field = false,
    .parse = tm_parse,
    .free_params = tm_free_params,
    .state_new = tm_new,
    .state_free = tm_state_free,
    .seg_begin = tm_seg_begin,
    .collect = tm_collect,
    .seg_end = tm_seg_end,
    .merge = tm_merge,
    .render = tm_render,
    .encode = tm_encode,
    .decode = tm_decode,
    .metric_value = tm_value,
};
