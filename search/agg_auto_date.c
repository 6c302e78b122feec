/* auto_date_histogram: a date histogram whose interval is picked so that
 * at most "buckets" buckets come back, from ES's ladder of roundings
 * (second, minute, hour, day, month, year, each with inner intervals).
 *
 * Exact across shards: a rounding "fits" when the buckets it makes number
 * at most buckets × its largest inner interval (ES's mergeBucketsIfNeeded
 * test). A shard collects at the finest allowed rounding and moves up
 * while its buckets do not fit; the coordinator re-rounds every shard's
 * buckets to the coarsest rounding any shard chose and moves up while the
 * merged buckets do not fit. Fewer docs never need a coarser rounding, so
 * no shard's choice is coarser than the whole index's, and re-rounding
 * finer buckets into coarser ones loses nothing: the result is the one a
 * single shard holding every doc gives. Rendering then runs ES's final
 * reduce: empty buckets between the first and last, the fit test again,
 * and consecutive buckets merged by the first inner interval that brings
 * the count within "buckets" ("interval": "7d", "3M", ...). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg_int.h"

enum { R_SECOND, R_MINUTE, R_HOUR, R_DAY, R_MONTH, R_YEAR, R_COUNT };

/* ES's RoundingInfo: unit, rough duration, inner intervals */
static const struct {
	const char *name;
	const char *unit;
	int64_t rough_ms;
	int inner[6];
	int ninner;
} ladder[R_COUNT] = {
    {"second", "s", 1000LL, {1, 5, 10, 30}, 4},
    {"minute", "m", 60000LL, {1, 5, 10, 30}, 4},
    {"hour", "h", 3600000LL, {1, 3, 12}, 3},
    {"day", "d", 86400000LL, {1, 7}, 2},
    {"month", "M", 30 * 86400000LL, {1, 3}, 2},
    {"year", "y", 365 * 86400000LL, {1, 5, 10, 20, 50, 100}, 6},
};

typedef struct adh_params {
	int64_t buckets; /* 10 */
	int min_idx;     /* minimum_interval */
	agg_tz *tz;
} adh_params;

typedef struct adh_bkt {
	int64_t key;
	uint64_t count;
	agg_node **subs;
	bool used;
	/* sub-states of buckets folded in while a segment is collected: merging
	 * them then would free states the segment's flush still holds, so they
	 * merge once no segment is open (adh_settle) */
	agg_node ***later;
	size_t nlater;
} adh_bkt;

typedef struct adh_state {
	adh_bkt *v; /* open addressing on key */
	size_t n, cap;
	int idx;        /* the rounding in use; -1 before the first value */
	int64_t lo, hi; /* smallest and largest key (n > 0) */
} adh_state;

/* ES's test for a shard to move up: too many buckets, or keys spanning
 * more than buckets × the rounding's longest inner interval. */
static bool
adh_fits(const adh_params *p, const adh_state *s, bool span)
{
	int64_t maxin = ladder[s->idx].inner[ladder[s->idx].ninner - 1];
	if ((uint64_t)s->n > (uint64_t)p->buckets * (uint64_t)maxin)
		return false;
	if (!span || s->n < 2)
		return true;
	return (double)(s->hi - s->lo) <=
	       (double)p->buckets * (double)maxin * (double)ladder[s->idx].rough_ms;
}

/* ---------------------------------------------------------------- rounding */

static int64_t
fdiv(int64_t a, int64_t b)
{
	int64_t q = a / b;
	if ((a % b != 0) && ((a < 0) != (b < 0)))
		q--;
	return q;
}

static int64_t
floor_local(int idx, int64_t local)
{
	static const int64_t step[] = {1000, 60000, 3600000, 86400000};
	if (idx <= R_DAY)
		return fdiv(local, step[idx]) * step[idx];
	int64_t y;
	unsigned m, d;
	agg_civil_from_days(fdiv(local, 86400000), &y, &m, &d);
	return agg_days_from_civil(y, idx == R_YEAR ? 1 : m, 1) * 86400000;
}

static int64_t
next_local(int idx, int64_t lf)
{
	static const int64_t step[] = {1000, 60000, 3600000, 86400000};
	if (idx <= R_DAY)
		return lf + step[idx];
	int64_t y;
	unsigned m, d;
	agg_civil_from_days(fdiv(lf, 86400000), &y, &m, &d);
	int64_t mm = (int64_t)m - 1 + (idx == R_YEAR ? 12 : 1);
	y += fdiv(mm, 12);
	return agg_days_from_civil(y, (unsigned)(mm - fdiv(mm, 12) * 12) + 1, 1) * 86400000;
}

/* The bucket key (UTC ms) of t under rounding idx in p's zone. */
static int64_t
adh_round(const adh_params *p, int idx, int64_t t)
{
	if (!p->tz)
		return floor_local(idx, t);
	int64_t off = agg_tz_offset(p->tz, t);
	int64_t rl = floor_local(idx, t + off);
	int64_t key = rl - off;
	if (key > t || agg_tz_offset(p->tz, key) != off)
		key = agg_tz_local_to_utc(p->tz, rl);
	return key > t ? t : key;
}

static int64_t
adh_next(const adh_params *p, int idx, int64_t key)
{
	int64_t off = p->tz ? agg_tz_offset(p->tz, key) : 0;
	int64_t nl = next_local(idx, floor_local(idx, key + off));
	int64_t next = p->tz ? agg_tz_local_to_utc(p->tz, nl) : nl;
	next = adh_round(p, idx, next);
	if (next <= key) /* a zone's gap swallowed the start: step past it */
		next = adh_round(p, idx, next_local(idx, nl) - off);
	return next > key ? next : key + 1000;
}

/* ---------------------------------------------------------------- parsing */

static void
adh_free_params(void *pp)
{
	adh_params *p = pp;
	agg_tz_free(p->tz);
	cm_free(AGG_MEM, p);
}

static cm_err
adh_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	adh_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	p->buckets = 10;
	a->p = p;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "field") || !strcmp(k, "format") || !strcmp(k, "missing"))
			continue;
		if (!strcmp(k, "buckets")) {
			if (agg_parse_int(c, a->ops->name, k, INT32_MIN, INT32_MAX, &p->buckets,
			                  err))
				return err->code;
			if (p->buckets <= 0)
				return cm_error_set(err, CM_EINVAL,
				                    "buckets must be greater than 0 for [%s]",
				                    a->name);
		} else if (!strcmp(k, "time_zone")) {
			if (!cJSON_IsString(c))
				return cm_error_set(err, CM_EPARSE, "[time_zone] must be a string");
			agg_tz_free(p->tz);
			p->tz = NULL;
			if (agg_tz_parse(c->valuestring, &p->tz, err))
				return CM_EINVAL;
			if (agg_tz_is_utc(p->tz)) {
				agg_tz_free(p->tz);
				p->tz = NULL;
			}
		} else if (!strcmp(k, "minimum_interval")) {
			int i = 0;
			while (i < R_COUNT &&
			       (!cJSON_IsString(c) || strcmp(c->valuestring, ladder[i].name)))
				i++;
			if (i == R_COUNT)
				return cm_error_set(
				    err, CM_EINVAL,
				    "minimum_interval must be one of [[year, month, day, hour, "
				    "minute, second]]");
			p->min_idx = i;
		} else if (!strcmp(k, "script"))
			return cm_error_set(err, CM_EINVAL,
			                    "[script] is not supported in aggregation [%s]",
			                    a->name);
		else
			return agg_unknown_param(a, k, err);
	}
	return CM_OK;
}

/* ---------------------------------------------------------------- state */

static void *
adh_new(const sr_agg *a)
{
	adh_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->idx = -1;
	return s;
}

static void
adh_clear(const sr_agg *a, adh_state *s)
{
	for (size_t i = 0; i < s->cap; i++)
		if (s->v[i].used) {
			agg_subs_free(a, s->v[i].subs);
			for (size_t k = 0; k < s->v[i].nlater; k++)
				agg_subs_free(a, s->v[i].later[k]);
			cm_free(AGG_MEM, s->v[i].later);
		}
	cm_free(AGG_MEM, s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}

static void
adh_free(const sr_agg *a, void *d)
{
	adh_clear(a, d);
	cm_free(AGG_MEM, d);
}

static size_t
adh_slot(const adh_state *s, int64_t key)
{
	uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
	size_t i = (size_t)(h >> 20) & (s->cap - 1);
	while (s->v[i].used && s->v[i].key != key)
		i = (i + 1) & (s->cap - 1);
	return i;
}

static adh_bkt *
adh_get(const sr_agg *a, adh_state *s, int64_t key)
{
	if ((s->n + 1) * 2 > s->cap) {
		size_t ocap = s->cap;
		adh_bkt *ov = s->v;
		s->cap = ocap ? ocap * 2 : 16;
		s->v = cm_calloc(AGG_MEM, s->cap, sizeof *s->v);
		for (size_t i = 0; i < ocap; i++)
			if (ov[i].used)
				s->v[adh_slot(s, ov[i].key)] = ov[i];
		cm_free(AGG_MEM, ov);
	}
	adh_bkt *b = &s->v[adh_slot(s, key)];
	if (!b->used) {
		b->used = true;
		b->key = key;
		b->subs = agg_subs_new(a);
		if (!s->n++)
			s->lo = s->hi = key;
		s->lo = key < s->lo ? key : s->lo;
		s->hi = key > s->hi ? key : s->hi;
	}
	return b;
}

/* Re-keys every bucket under rounding idx (coarser or equal), merging. */
static void
adh_reround(const sr_agg *a, adh_state *s, int idx)
{
	const adh_params *p = a->p;
	if (idx == s->idx)
		return;
	adh_state ns = {0};
	ns.idx = idx;
	for (size_t i = 0; i < s->cap; i++) {
		adh_bkt *b = &s->v[i];
		if (!b->used)
			continue;
		adh_bkt *nb = adh_get(a, &ns, adh_round(p, idx, b->key));
		nb->count += b->count;
		if (b->subs) {
			nb->later = cm_realloc(AGG_MEM, nb->later,
			                       (nb->nlater + b->nlater + 1) * sizeof *nb->later);
			nb->later[nb->nlater++] = b->subs;
			b->subs = NULL;
		}
		for (size_t k = 0; k < b->nlater; k++)
			nb->later[nb->nlater++] = b->later[k];
		b->nlater = 0;
	}
	adh_clear(a, s);
	*s = ns;
}

/* Merges the sub-states folded in during collection (no segment open). */
static void
adh_settle(const sr_agg *a, adh_state *s)
{
	for (size_t i = 0; i < s->cap; i++) {
		adh_bkt *b = &s->v[i];
		if (!b->used)
			continue;
		for (size_t k = 0; k < b->nlater; k++) {
			agg_subs_merge(a, b->subs, b->later[k]);
			agg_subs_free(a, b->later[k]);
		}
		cm_free(AGG_MEM, b->later);
		b->later = NULL;
		b->nlater = 0;
	}
}

/* Moves up the ladder while the buckets do not fit (span: also by the
 * keys' spread, as shards do; the final reduce counts buckets only). */
static void
adh_fit(const sr_agg *a, adh_state *s, bool span)
{
	const adh_params *p = a->p;
	while (s->idx >= 0 && s->idx < R_COUNT - 1 && !adh_fits(p, s, span))
		adh_reround(a, s, s->idx + 1);
}

static cm_err
adh_seg_begin(agg_rt *rt, cm_error *err)
{
	if (rt->fi && agg_ftype(rt->fi->type) != ST_FT_DATE &&
	    (st_field_type_is_ordinal(rt->fi->type) || rt->fi->type == ST_FT_GEO_POINT))
		return cm_error_set(
		    err, CM_EINVAL, "Field [%s] of type [%s] is not supported for aggregation [%s]",
		    rt->spec->field, st_field_type_name(rt->fi->type), rt->spec->ops->name);
	return CM_OK;
}

static void
adh_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	const sr_agg *a = rt->spec;
	const adh_params *p = a->p;
	adh_state *s = n->d;
	if (s->idx < 0)
		s->idx = p->min_idx;
	for (size_t i = 0; i < cnt && !rt->root->err.code; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		int64_t one;
		if (k == 0 && a->missing.set && a->missing.is_num) {
			one = a->missing.l;
			v = &one;
			k = 1;
		}
		int64_t prev = INT64_MIN;
		for (int j = 0; j < k; j++) {
			int64_t t = rt->is_double ? (int64_t)st_sortable_to_double(v[j]) : v[j];
			int64_t key = adh_round(p, s->idx, t);
			if (key == prev)
				continue; /* a doc counts once per bucket */
			prev = key;
			size_t before = s->n;
			adh_bkt *b = adh_get(a, s, key);
			if (s->n > before && !agg_bucket_guard(rt->root, 1))
				return;
			b->count++;
			if (b->subs)
				agg_subs_collect(rt->root, a, b->subs, &docs[i],
				                 scores ? &scores[i] : NULL, 1);
			if (s->n > before && s->idx < R_COUNT - 1 && !adh_fits(p, s, true)) {
				adh_fit(a, s, true);
				prev = INT64_MIN;
			}
		}
	}
}

static void
adh_finish(const sr_agg *a, agg_node *n)
{
	adh_state *s = n->d;
	adh_settle(a, s);
	for (size_t i = 0; i < s->cap; i++)
		if (s->v[i].used)
			agg_subs_shard_finish(a, s->v[i].subs);
}

static void
adh_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	adh_state *x = into->d, *y = from->d;
	if (y->idx < 0)
		return;
	int idx = x->idx > y->idx ? x->idx : y->idx;
	if (x->idx >= 0)
		adh_reround(a, x, idx);
	x->idx = idx;
	adh_reround(a, y, idx);
	adh_settle(a, x);
	adh_settle(a, y);
	for (size_t i = 0; i < y->cap; i++) {
		adh_bkt *yb = &y->v[i];
		if (!yb->used)
			continue;
		adh_bkt *xb = adh_get(a, x, yb->key);
		xb->count += yb->count;
		if (xb->subs)
			agg_subs_merge(a, xb->subs, yb->subs);
	}
	adh_fit(a, x, true);
	adh_settle(a, x);
}

/* ---------------------------------------------------------------- render */

static int
bkt_ptr_cmp(const void *x, const void *y)
{
	const adh_bkt *a = *(adh_bkt *const *)x, *b = *(adh_bkt *const *)y;
	return (a->key > b->key) - (a->key < b->key);
}

/* Rendering is the final reduce: it consumes the state's sub-states. */
static cm_err
adh_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const adh_params *p = a->p;
	adh_state *s = n->d;
	int idx = s->idx < 0 ? p->min_idx : s->idx;
	/* empty buckets between the first and last key */
	if (s->n > 1) {
		int64_t lo = INT64_MAX, hi = INT64_MIN;
		for (size_t i = 0; i < s->cap; i++)
			if (s->v[i].used) {
				lo = s->v[i].key < lo ? s->v[i].key : lo;
				hi = s->v[i].key > hi ? s->v[i].key : hi;
			}
		for (int64_t k = adh_next(p, idx, lo); k < hi; k = adh_next(p, idx, k)) {
			if (s->n > (size_t)SR_MAX_BUCKETS * 4) {
				agg_too_many_buckets(r->err, s->n);
				return CM_ELIMIT;
			}
			adh_get(a, s, k);
		}
		adh_fit(a, s, false);
		idx = s->idx;
	}
	adh_settle(a, s);
	adh_bkt **o = cm_malloc(AGG_MEM, (s->n ? s->n : 1) * sizeof *o);
	size_t nb = 0;
	for (size_t i = 0; i < s->cap; i++)
		if (s->v[i].used)
			o[nb++] = &s->v[i];
	qsort(o, nb, sizeof *o, bkt_ptr_cmp);
	/* consecutive buckets merged by the first inner interval that fits */
	int inner = 1;
	if (nb > (size_t)p->buckets)
		for (int i = 0; i < ladder[idx].ninner; i++) {
			size_t m = (size_t)ladder[idx].inner[i];
			if ((nb + m - 1) / m <= (size_t)p->buckets) {
				inner = (int)m;
				break;
			}
		}
	size_t nout = (nb + (size_t)inner - 1) / (size_t)inner;
	r->buckets += nout;
	if (r->buckets > SR_MAX_BUCKETS) {
		agg_too_many_buckets(r->err, r->buckets);
		cm_free(AGG_MEM, o);
		return CM_ELIMIT;
	}
	cm_buf *b = r->out;
	cm_buf_put(b, "{\"buckets\":[", 12);
	cm_err rc = CM_OK;
	for (size_t g = 0; g < nout && !rc; g++) {
		adh_bkt *first = o[g * (size_t)inner];
		uint64_t count = first->count;
		for (size_t j = g * (size_t)inner + 1; j < (g + 1) * (size_t)inner && j < nb; j++) {
			count += o[j]->count;
			if (first->subs)
				agg_subs_merge(a, first->subs, o[j]->subs);
		}
		char ks[96];
		agg_date_format(p->tz, a->format, first->key, ks, sizeof ks);
		cm_buf_printf(b, "%s{\"key_as_string\":", g ? "," : "");
		agg_json_str(b, ks, strlen(ks));
		cm_buf_printf(b, ",\"key\":%lld,\"doc_count\":%llu", (long long)first->key,
		              (unsigned long long)count);
		rc = agg_subs_render(a, first->subs, r);
		cm_buf_put_u8(b, '}');
	}
	cm_buf_printf(b, "],\"interval\":\"%d%s\"}", inner, ladder[idx].unit);
	cm_free(AGG_MEM, o);
	return rc;
}

/* ---------------------------------------------------------------- wire */

static void
adh_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const adh_state *s = n->d;
	cm_buf_put_varint(b, (uint64_t)(s->idx + 1));
	cm_buf_put_varint(b, s->n);
	for (size_t i = 0; i < s->cap; i++) {
		if (!s->v[i].used)
			continue;
		cm_buf_put_u64(b, (uint64_t)s->v[i].key);
		cm_buf_put_varint(b, s->v[i].count);
		agg_subs_encode(a, s->v[i].subs, b);
	}
}

static bool
adh_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	adh_state *s = n->d;
	uint64_t idx, cnt;
	if (!cm_rd_varint(r, &idx) || idx > R_COUNT ||
	    !agg_get_count(r, SR_MAX_BUCKETS * 16ull, &cnt))
		return false;
	s->idx = (int)idx - 1;
	for (uint64_t i = 0; i < cnt; i++) {
		uint64_t key, c;
		/* keys stay within ±275,000 years, so the calendar maths cannot overflow */
		if (!cm_rd_u64(r, &key) || !cm_rd_varint(r, &c) ||
		    (int64_t)key > 8640000000000000LL || (int64_t)key < -8640000000000000LL)
			return false;
		adh_bkt *b = adh_get(a, s, (int64_t)key);
		b->count += c;
		if (b->subs && !agg_subs_decode(a, b->subs, r))
			return false;
	}
	return true;
}

const agg_ops agg_ops_auto_date_histogram = {
    .name = "auto_date_histogram",
    .bucket = true,
    .needs_field = true,
    .parse = adh_parse,
    .free_params = adh_free_params,
    .state_new = adh_new,
    .state_free = adh_free,
    .seg_begin = adh_seg_begin,
    .collect = adh_collect,
    .shard_finish = adh_finish,
    .merge = adh_merge,
    .render = adh_render,
    .encode = adh_encode,
    .decode = adh_decode,
};
