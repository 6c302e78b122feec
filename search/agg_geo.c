/* Aggregations over geo_point columns: geo_bounds, geo_centroid,
 * geohash_grid and geotile_grid. The column holds Lucene's encoding (32
 * bits of latitude, 32 of longitude, st_geo_encode), so cells are computed
 * from the same quantized points ES reads back from its doc values. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agg_int.h"

static cm_err
geo_seg_begin(agg_rt *rt, cm_error *err)
{
	if (rt->fi && rt->fi->type != ST_FT_GEO_POINT)
		return cm_error_set(
		    err, CM_EINVAL, "Field [%s] of type [%s] is not supported for aggregation [%s]",
		    rt->spec->field, st_field_type_name(rt->fi->type), rt->spec->ops->name);
	return CM_OK;
}

static void
geo_free_params(void *p)
{
	cm_free(AGG_MEM, p);
}

/* ================================================================ geo_bounds */

typedef struct gb_params {
	bool wrap_longitude; /* true */
} gb_params;

typedef struct gb_state {
	double top, bottom, pos_left, pos_right, neg_left, neg_right;
} gb_state;

static cm_err
gb_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	gb_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	p->wrap_longitude = true;
	a->p = p;
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "field") || !strcmp(c->string, "missing"))
			continue;
		if (!strcmp(c->string, "wrap_longitude")) {
			if (agg_parse_bool(c, a->ops->name, "wrap_longitude", &p->wrap_longitude,
			                   err))
				return CM_EPARSE;
			continue;
		}
		return agg_unknown_param(a, c->string, err);
	}
	if (a->missing.set)
		return cm_error_set(err, CM_EINVAL, "[missing] is not supported by Shoal in [%s]",
		                    a->ops->name);
	return CM_OK;
}

static void *
gb_new(const sr_agg *a)
{
	gb_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->top = s->pos_right = s->neg_right = -INFINITY;
	s->bottom = s->pos_left = s->neg_left = INFINITY;
	return s;
}

static void
gb_free(const sr_agg *a, void *d)
{
	cm_free(AGG_MEM, d);
}

static void
gb_add(gb_state *s, double lat, double lon)
{
	if (lat > s->top)
		s->top = lat;
	if (lat < s->bottom)
		s->bottom = lat;
	if (lon >= 0) {
		if (lon < s->pos_left)
			s->pos_left = lon;
		if (lon > s->pos_right)
			s->pos_right = lon;
	} else {
		if (lon < s->neg_left)
			s->neg_left = lon;
		if (lon > s->neg_right)
			s->neg_right = lon;
	}
}

static void
gb_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	gb_state *s = n->d;
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		for (int j = 0; j < k; j++) {
			double lat, lon;
			st_geo_decode(v[j], &lat, &lon);
			gb_add(s, lat, lon);
		}
	}
}

static void
gb_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	gb_state *x = into->d, *y = from->d;
	x->top = fmax(x->top, y->top);
	x->bottom = fmin(x->bottom, y->bottom);
	x->pos_left = fmin(x->pos_left, y->pos_left);
	x->pos_right = fmax(x->pos_right, y->pos_right);
	x->neg_left = fmin(x->neg_left, y->neg_left);
	x->neg_right = fmax(x->neg_right, y->neg_right);
}

/* InternalGeoBounds: the narrower of the box across 0 and the box across
 * the antimeridian when points lie on both sides (wrap_longitude). */
static cm_err
gb_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const gb_state *s = n->d;
	const gb_params *p = a->p;
	cm_buf *b = r->out;
	if (isinf(s->top)) {
		cm_buf_put(b, "{}", 2);
		return CM_OK;
	}
	double left, right;
	if (isinf(s->pos_left)) {
		left = s->neg_left;
		right = s->neg_right;
	} else if (isinf(s->neg_left)) {
		left = s->pos_left;
		right = s->pos_right;
	} else if (p->wrap_longitude) {
		double unwrapped = s->pos_right - s->neg_left;
		double wrapped = (180 - s->pos_left) - (-180 - s->neg_right);
		if (unwrapped <= wrapped) {
			left = s->neg_left;
			right = s->pos_right;
		} else {
			left = s->pos_left;
			right = s->neg_right;
		}
	} else {
		left = s->neg_left;
		right = s->pos_right;
	}
	cm_buf_put(b, "{\"bounds\":{\"top_left\":{\"lat\":", 29);
	agg_json_double(b, s->top);
	cm_buf_put(b, ",\"lon\":", 7);
	agg_json_double(b, left);
	cm_buf_put(b, "},\"bottom_right\":{\"lat\":", 24);
	agg_json_double(b, s->bottom);
	cm_buf_put(b, ",\"lon\":", 7);
	agg_json_double(b, right);
	cm_buf_put(b, "}}}", 3);
	return CM_OK;
}

static void
gb_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const gb_state *s = n->d;
	agg_put_double(b, s->top);
	agg_put_double(b, s->bottom);
	agg_put_double(b, s->pos_left);
	agg_put_double(b, s->pos_right);
	agg_put_double(b, s->neg_left);
	agg_put_double(b, s->neg_right);
}

static bool
gb_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	gb_state *s = n->d;
	return agg_get_double(r, &s->top) && agg_get_double(r, &s->bottom) &&
	       agg_get_double(r, &s->pos_left) && agg_get_double(r, &s->pos_right) &&
	       agg_get_double(r, &s->neg_left) && agg_get_double(r, &s->neg_right);
}

const agg_ops agg_ops_geo_bounds = {
    .name = "geo_bounds",
    .needs_field = true,
    .parse = gb_parse,
    .free_params = geo_free_params,
    .state_new = gb_new,
    .state_free = gb_free,
    .seg_begin = geo_seg_begin,
    .collect = gb_collect,
    .merge = gb_merge,
    .render = gb_render,
    .encode = gb_encode,
    .decode = gb_decode,
};

/* ================================================================ geo_centroid */

typedef struct gc_state {
	uint64_t count;
	double lat, lat_c, lon, lon_c; /* compensated sums */
} gc_state;

static cm_err
gc_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	for (const cJSON *c = body->child; c; c = c->next)
		if (strcmp(c->string, "field"))
			return agg_unknown_param(a, c->string, err);
	return CM_OK;
}

static void *
gc_new(const sr_agg *a)
{
	return cm_calloc(AGG_MEM, 1, sizeof(gc_state));
}

static void
kadd(double *sum, double *c, double v)
{
	double y = v - *c;
	double t = *sum + y;
	*c = (t - *sum) - y;
	*sum = t;
}

static void
gc_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	gc_state *s = n->d;
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		for (int j = 0; j < k; j++) {
			double lat, lon;
			st_geo_decode(v[j], &lat, &lon);
			kadd(&s->lat, &s->lat_c, lat);
			kadd(&s->lon, &s->lon_c, lon);
			s->count++;
		}
	}
}

static void
gc_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	gc_state *x = into->d, *y = from->d;
	kadd(&x->lat, &x->lat_c, y->lat);
	kadd(&x->lat, &x->lat_c, -y->lat_c);
	kadd(&x->lon, &x->lon_c, y->lon);
	kadd(&x->lon, &x->lon_c, -y->lon_c);
	x->count += y->count;
}

static cm_err
gc_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const gc_state *s = n->d;
	cm_buf *b = r->out;
	cm_buf_put_u8(b, '{');
	if (s->count) {
		cm_buf_put(b, "\"location\":{\"lat\":", 18);
		agg_json_double(b, s->lat / (double)s->count);
		cm_buf_put(b, ",\"lon\":", 7);
		agg_json_double(b, s->lon / (double)s->count);
		cm_buf_put(b, "},", 2);
	}
	cm_buf_printf(b, "\"count\":%llu}", (unsigned long long)s->count);
	return CM_OK;
}

static void
gc_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const gc_state *s = n->d;
	cm_buf_put_varint(b, s->count);
	agg_put_double(b, s->lat);
	agg_put_double(b, s->lat_c);
	agg_put_double(b, s->lon);
	agg_put_double(b, s->lon_c);
}

static bool
gc_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	gc_state *s = n->d;
	return cm_rd_varint(r, &s->count) && agg_get_double(r, &s->lat) &&
	       agg_get_double(r, &s->lat_c) && agg_get_double(r, &s->lon) &&
	       agg_get_double(r, &s->lon_c);
}

const agg_ops agg_ops_geo_centroid = {
    .name = "geo_centroid",
    .needs_field = true,
    .parse = gc_parse,
    .state_new = gc_new,
    .state_free = gb_free,
    .seg_begin = geo_seg_begin,
    .collect = gc_collect,
    .merge = gc_merge,
    .render = gc_render,
    .encode = gc_encode,
    .decode = gc_decode,
};

/* ================================================================ grids */

typedef struct grid_params {
	int precision;
	int64_t size, shard_size;
	bool bounded;
	double top, left, bottom, right;
} grid_params;

typedef struct grid_bkt {
	uint64_t key; /* ES's hashAsLong: geohash bits<<4|level, zoom<<58|x<<29|y */
	uint64_t count;
	agg_node **subs;
} grid_bkt;

typedef struct grid_state {
	grid_bkt *v; /* open addressing on key (key 0 never occurs: level/zoom bits) */
	size_t n, cap;
} grid_state;

#define GEOTILE_MARK (1ull << 63)

static const char geohash_b32[] = "0123456789bcdefghjkmnpqrstuvwxyz";

/* Geohash of a point in Lucene's encoding: the top 5·level bits of the
 * lon/lat interleave (sign bits flipped), as ES's Geohash.longEncode. */
static uint64_t
geohash_long(int64_t enc, int level)
{
	uint32_t lat = (uint32_t)((uint64_t)enc >> 32) ^ 0x80000000u;
	uint32_t lon = (uint32_t)(uint64_t)enc ^ 0x80000000u;
	uint64_t m = 0;
	for (int i = 31; i >= 0; i--) {
		m = (m << 1) | ((lon >> i) & 1);
		m = (m << 1) | ((lat >> i) & 1);
	}
	uint64_t bits = m >> (64 - 5 * level);
	return (bits << 4) | (uint64_t)level;
}

static void
geohash_str(uint64_t key, char *out)
{
	int level = (int)(key & 15);
	uint64_t bits = key >> 4;
	for (int i = 0; i < level; i++)
		out[i] = geohash_b32[(bits >> (5 * (level - 1 - i))) & 31];
	out[level] = 0;
}

static uint64_t
geotile_long(double lat, double lon, int zoom)
{
	int64_t tiles = (int64_t)1 << zoom;
	double sn = sin(lat * M_PI / 180);
	double xd = floor((lon + 180) / 360 * (double)tiles);
	/* at the poles the log is infinite: Java's cast saturates, so clamp
	 * in doubles before converting */
	double yd = floor((0.5 - log((1 + sn) / (1 - sn)) / (4 * M_PI)) * (double)tiles);
	int64_t x = !(xd > 0) ? 0 : xd >= (double)tiles ? tiles - 1 : (int64_t)xd;
	int64_t y = !(yd > 0) ? 0 : yd >= (double)tiles ? tiles - 1 : (int64_t)yd;
	/* the top bit keeps zoom 0's cell from being key 0 (an empty slot) */
	return GEOTILE_MARK | ((uint64_t)zoom << 58) | ((uint64_t)x << 29) | (uint64_t)y;
}

static void
grid_key_str(const sr_agg *a, uint64_t key, char *out, size_t cap)
{
	if (a->kind == AGG_GEOHASH_GRID)
		geohash_str(key, out);
	else
		snprintf(out, cap, "%u/%u/%u", (unsigned)((key & ~GEOTILE_MARK) >> 58),
		         (unsigned)((key >> 29) & ((1u << 29) - 1)),
		         (unsigned)(key & ((1u << 29) - 1)));
}

static cm_err
grid_corner(const sr_agg *a, const cJSON *v, const char *name, double *lat, double *lon,
            cm_error *err)
{
	if (!v || !st_geo_point(v, lat, lon))
		return cm_error_set(err, CM_EPARSE, "[%s] failed to parse field [bounds.%s]",
		                    a->ops->name, name);
	return CM_OK;
}

static cm_err
grid_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	bool hash = a->kind == AGG_GEOHASH_GRID;
	grid_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	p->precision = hash ? 5 : 7;
	p->size = 10000;
	p->shard_size = -1;
	a->p = p;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "field"))
			continue;
		if (!strcmp(k, "precision")) {
			char *end = NULL;
			if (cJSON_IsString(c) &&
			    (strtod(c->valuestring, &end), end == c->valuestring || *end))
				return cm_error_set(
				    err, CM_EINVAL,
				    "[precision] as a distance is not supported by Shoal in "
				    "[%s]",
				    a->name);
			double d;
			if (agg_parse_num(c, a->ops->name, "precision", &d, err))
				return CM_EPARSE;
			int lo = hash ? 1 : 0, hi = hash ? 12 : 29;
			if (d != floor(d) || d < lo || d > hi) {
				if (hash)
					return cm_error_set(
					    err, CM_EINVAL,
					    "Invalid geohash aggregation precision of %g. Must be "
					    "between 1 and 12.",
					    d);
				return cm_error_set(
				    err, CM_EINVAL,
				    "Invalid geotile_grid precision of %g. Must be between 0 "
				    "and 29.",
				    d);
			}
			p->precision = (int)d;
		} else if (!strcmp(k, "size") || !strcmp(k, "shard_size")) {
			int64_t v;
			if (agg_parse_int(c, a->ops->name, k, INT32_MIN, INT32_MAX, &v, err))
				return err->code;
			if (v <= 0)
				return cm_error_set(
				    err, CM_EINVAL,
				    "[%s] must be greater than 0. Found [%lld] in [%s]", k,
				    (long long)v, a->name);
			*(k[0] == 's' && k[1] == 'i' ? &p->size : &p->shard_size) = v;
		} else if (!strcmp(k, "bounds")) {
			double t, l, bt, rt;
			if (!cJSON_IsObject(c))
				return cm_error_set(err, CM_EPARSE,
				                    "[%s] failed to parse field [bounds]",
				                    a->ops->name);
			for (const cJSON *x = c->child; x; x = x->next)
				if (strcmp(x->string, "top_left") &&
				    strcmp(x->string, "bottom_right"))
					return cm_error_set(
					    err, CM_EPARSE,
					    "[bounds] of [%s]: only top_left and bottom_right "
					    "are supported by Shoal, not [%s]",
					    a->name, x->string);
			if (grid_corner(a, cJSON_GetObjectItemCaseSensitive(c, "top_left"),
			                "top_left", &t, &l, err) ||
			    grid_corner(a, cJSON_GetObjectItemCaseSensitive(c, "bottom_right"),
			                "bottom_right", &bt, &rt, err))
				return CM_EPARSE;
			p->bounded = true;
			p->top = t;
			p->left = l;
			p->bottom = bt;
			p->right = rt;
		} else
			return agg_unknown_param(a, k, err);
	}
	if (p->shard_size < 0)
		p->shard_size =
		    p->size + p->size / 2 + 10; /* BucketUtils.suggestShardSideQueueSize */
	if (p->shard_size < p->size)
		p->shard_size = p->size;
	return CM_OK;
}

static void *
grid_new(const sr_agg *a)
{
	return cm_calloc(AGG_MEM, 1, sizeof(grid_state));
}

static void
grid_free(const sr_agg *a, void *d)
{
	grid_state *s = d;
	for (size_t i = 0; i < s->cap; i++)
		if (s->v[i].key)
			agg_subs_free(a, s->v[i].subs);
	cm_free(AGG_MEM, s->v);
	cm_free(AGG_MEM, s);
}

static size_t
grid_slot(const grid_state *s, uint64_t key)
{
	uint64_t h = key * 0x9E3779B97F4A7C15ull;
	size_t i = (size_t)(h >> 17) & (s->cap - 1);
	while (s->v[i].key && s->v[i].key != key)
		i = (i + 1) & (s->cap - 1);
	return i;
}

static void
grid_grow(grid_state *s)
{
	size_t ocap = s->cap;
	grid_bkt *ov = s->v;
	s->cap = ocap ? ocap * 2 : 16;
	s->v = cm_calloc(AGG_MEM, s->cap, sizeof *s->v);
	for (size_t i = 0; i < ocap; i++)
		if (ov[i].key)
			s->v[grid_slot(s, ov[i].key)] = ov[i];
	cm_free(AGG_MEM, ov);
}

/* The bucket for key, created when absent (NULL past the bucket guard). */
static grid_bkt *
grid_get(agg_root *root, const sr_agg *a, grid_state *s, uint64_t key)
{
	if ((s->n + 1) * 2 > s->cap)
		grid_grow(s);
	size_t i = grid_slot(s, key);
	if (!s->v[i].key) {
		if (root && !agg_bucket_guard(root, 1))
			return NULL;
		s->v[i].key = key;
		s->v[i].subs = agg_subs_new(a);
		s->n++;
	}
	return &s->v[i];
}

static bool
grid_in_bounds(const grid_params *p, double lat, double lon)
{
	if (lat > p->top || lat < p->bottom)
		return false;
	if (p->left <= p->right)
		return lon >= p->left && lon <= p->right;
	return lon >= p->left || lon <= p->right; /* across the antimeridian */
}

static void
grid_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	grid_state *s = n->d;
	const sr_agg *a = rt->spec;
	const grid_params *p = a->p;
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		uint64_t stack[16], *prev = k <= 16 ? stack : cm_malloc(AGG_MEM, (size_t)k * 8);
		int nprev = 0;
		for (int j = 0; j < k; j++) {
			double lat, lon;
			st_geo_decode(v[j], &lat, &lon);
			if (p->bounded && !grid_in_bounds(p, lat, lon))
				continue;
			uint64_t key = a->kind == AGG_GEOHASH_GRID
			                   ? geohash_long(v[j], p->precision)
			                   : geotile_long(lat, lon, p->precision);
			/* a doc counts once per cell */
			bool seen = false;
			for (int q = 0; q < nprev; q++)
				seen |= prev[q] == key;
			if (seen)
				continue;
			prev[nprev++] = key;
			grid_bkt *b = grid_get(rt->root, a, s, key);
			if (!b)
				break;
			b->count++;
			if (b->subs)
				agg_subs_collect(rt->root, a, b->subs, &docs[i],
				                 scores ? &scores[i] : NULL, 1);
		}
		if (prev != stack)
			cm_free(AGG_MEM, prev);
		if (rt->root->err.code)
			return;
	}
}

/* ES's order: doc_count desc, then hashAsLong desc (BucketPriorityQueue) */
static int
grid_cmp(const void *x, const void *y)
{
	const grid_bkt *a = *(grid_bkt *const *)x, *b = *(grid_bkt *const *)y;
	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	return (a->key < b->key) - (a->key > b->key);
}

/* The buckets in ES's order (pointers into s->v), *n of them. */
static grid_bkt **
grid_sorted(const grid_state *s, size_t *n)
{
	grid_bkt **o = cm_malloc(AGG_MEM, (s->n ? s->n : 1) * sizeof *o);
	size_t k = 0;
	for (size_t i = 0; i < s->cap; i++)
		if (s->v[i].key)
			o[k++] = &s->v[i];
	qsort(o, k, sizeof *o, grid_cmp);
	*n = k;
	return o;
}

/* A shard keeps its top shard_size cells, as an ES shard replies. */
static void
grid_finish(const sr_agg *a, agg_node *n)
{
	grid_state *s = n->d;
	const grid_params *p = a->p;
	size_t k;
	grid_bkt **o = grid_sorted(s, &k);
	if (k > (size_t)p->shard_size) {
		grid_state ns = {0};
		for (size_t i = 0; i < (size_t)p->shard_size; i++) {
			grid_bkt *b = grid_get(NULL, a, &ns, o[i]->key);
			agg_subs_free(a, b->subs);
			b->count = o[i]->count;
			b->subs = o[i]->subs;
			o[i]->subs = NULL;
		}
		for (size_t i = p->shard_size; i < k; i++)
			agg_subs_free(a, o[i]->subs);
		cm_free(AGG_MEM, s->v);
		*s = ns;
	}
	cm_free(AGG_MEM, o);
	for (size_t i = 0; i < s->cap; i++)
		if (s->v[i].key)
			agg_subs_shard_finish(a, s->v[i].subs);
}

static void
grid_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	grid_state *x = into->d, *y = from->d;
	for (size_t i = 0; i < y->cap; i++) {
		grid_bkt *yb = &y->v[i];
		if (!yb->key)
			continue;
		grid_bkt *xb = grid_get(NULL, a, x, yb->key);
		xb->count += yb->count;
		if (xb->subs)
			agg_subs_merge(a, xb->subs, yb->subs);
	}
}

static cm_err
grid_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const grid_state *s = n->d;
	const grid_params *p = a->p;
	size_t k;
	grid_bkt **o = grid_sorted(s, &k);
	if (k > (size_t)p->size)
		k = (size_t)p->size;
	cm_err rc = CM_OK;
	r->buckets += k;
	if (r->buckets > SR_MAX_BUCKETS) {
		agg_too_many_buckets(r->err, r->buckets);
		cm_free(AGG_MEM, o);
		return CM_ELIMIT;
	}
	cm_buf_put(r->out, "{\"buckets\":[", 12);
	for (size_t i = 0; i < k && !rc; i++) {
		char key[64];
		grid_key_str(a, o[i]->key, key, sizeof key);
		cm_buf_printf(r->out, "%s{\"key\":\"%s\",\"doc_count\":%llu", i ? "," : "", key,
		              (unsigned long long)o[i]->count);
		rc = agg_subs_render(a, o[i]->subs, r);
		cm_buf_put_u8(r->out, '}');
	}
	cm_buf_put(r->out, "]}", 2);
	cm_free(AGG_MEM, o);
	return rc;
}

static void
grid_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const grid_state *s = n->d;
	cm_buf_put_varint(b, s->n);
	for (size_t i = 0; i < s->cap; i++) {
		if (!s->v[i].key)
			continue;
		cm_buf_put_u64(b, s->v[i].key);
		cm_buf_put_varint(b, s->v[i].count);
		agg_subs_encode(a, s->v[i].subs, b);
	}
}

static bool
grid_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	grid_state *s = n->d;
	uint64_t cnt;
	if (!agg_get_count(r, SR_MAX_BUCKETS * 16ull, &cnt))
		return false;
	for (uint64_t i = 0; i < cnt; i++) {
		uint64_t key, c;
		if (!cm_rd_u64(r, &key) || !key || !cm_rd_varint(r, &c))
			return false;
		grid_bkt *b = grid_get(NULL, a, s, key);
		b->count += c;
		if (b->subs && !agg_subs_decode(a, b->subs, r))
			return false;
	}
	return true;
}

const agg_ops agg_ops_geohash_grid = {
    .name = "geohash_grid",
    .bucket = true,
    .needs_field = true,
    .parse = grid_parse,
    .free_params = geo_free_params,
    .state_new = grid_new,
    .state_free = grid_free,
    .seg_begin = geo_seg_begin,
    .collect = grid_collect,
    .shard_finish = grid_finish,
    .merge = grid_merge,
    .render = grid_render,
    .encode = grid_encode,
    .decode = grid_decode,
};

const agg_ops agg_ops_geotile_grid = {
    .name = "geotile_grid",
    .bucket = true,
    .needs_field = true,
    .parse = grid_parse,
    .free_params = geo_free_params,
    .state_new = grid_new,
    .state_free = grid_free,
    .seg_begin = geo_seg_begin,
    .collect = grid_collect,
    .shard_finish = grid_finish,
    .merge = grid_merge,
    .render = grid_render,
    .encode = grid_encode,
    .decode = grid_decode,
};
