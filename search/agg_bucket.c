/* Bucket aggregations: terms, histogram, date_histogram, range,
 * date_range, filter, filters, missing. */
#include <cjson/cJSON.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "agg_int.h"

/* ================================================================ bucket table */

/* Buckets keyed by bytes (terms) or by an int64 (numeric terms, histogram
 * index, date keys), with an open-addressing index into a vector. */
typedef struct bkt {
	uint64_t count;
	agg_node **subs;
	int64_t l;       /* numeric key (doubles: bits of the double) */
	uint8_t *key;    /* string key (owned) or NULL */
	uint32_t klen;
} bkt;

typedef struct btab {
	bkt *v;
	size_t n, cap;
	uint64_t *idx; /* (hash >> 32) << 32 | (bucket index + 1); 0 = empty */
	size_t icap;
} btab;

/* Adds n rendered buckets to the response's count: CM_ELIMIT, with the
 * error set, once the total passes search.max_buckets. */
static cm_err
count_buckets(agg_render *r, uint64_t n)
{
	r->buckets += n;
	if (r->buckets > SR_MAX_BUCKETS) {
		agg_too_many_buckets(r->err, r->buckets);
		return CM_ELIMIT;
	}
	return CM_OK;
}

static inline uint64_t
bkt_hash(const void *k, size_t len)
{
	return XXH3_64bits(k, len);
}

static inline uint64_t
num_hash(int64_t l)
{
	uint64_t x = (uint64_t)l * 0x9E3779B97F4A7C15ull;
	return x ^ (x >> 29);
}

static const void *
bkt_keyp(const bkt *b, size_t *len)
{
	if (b->key) {
		*len = b->klen;
		return b->key;
	}
	*len = 8;
	return &b->l;
}

static inline uint64_t
bkt_hash_of(const bkt *b)
{
	return b->key ? bkt_hash(b->key, b->klen) : num_hash(b->l);
}

static void
btab_rehash(btab *t, size_t icap)
{
	cm_free(AGG_MEM, t->idx);
	t->idx = cm_calloc(AGG_MEM, icap, sizeof *t->idx);
	t->icap = icap;
	for (size_t i = 0; i < t->n; i++) {
		uint64_t h = bkt_hash_of(&t->v[i]);
		size_t s = (size_t)h & (icap - 1);
		while (t->idx[s])
			s = (s + 1) & (icap - 1);
		t->idx[s] = (h & 0xffffffff00000000ull) | ((uint64_t)i + 1);
	}
}

static bkt *
btab_add(btab *t, const sr_agg *spec, size_t slot, uint64_t h, const void *k, size_t len,
         bool str, bool *created)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 8;
		t->v = cm_realloc(AGG_MEM, t->v, t->cap * sizeof *t->v);
	}
	bkt *b = &t->v[t->n];
	memset(b, 0, sizeof *b);
	if (str) {
		b->key = cm_malloc(AGG_MEM, len ? len : 1);
		memcpy(b->key, k, len);
		b->klen = (uint32_t)len;
	} else
		memcpy(&b->l, k, 8);
	b->subs = spec ? agg_subs_new(spec) : NULL; /* NULL spec: caller moves subs in */
	t->idx[slot] = (h & 0xffffffff00000000ull) | (uint64_t)++t->n;
	if (created)
		*created = true;
	return b;
}

/* Room for n more buckets in an empty table, so that adding them neither
 * grows the array nor rehashes (each rehash hashes every key again). */
static void
btab_reserve(btab *t, size_t n)
{
	if (t->n || !n)
		return;
	size_t icap = 16;
	while ((n + 1) * 2 > icap)
		icap *= 2;
	if (icap > t->icap)
		btab_rehash(t, icap);
	if (n > t->cap) {
		t->cap = n;
		t->v = cm_realloc(AGG_MEM, t->v, t->cap * sizeof *t->v);
	}
}

/* Finds or creates the bucket for key; str selects a string key. */
static bkt *
btab_get(btab *t, const sr_agg *spec, const void *k, size_t len, bool str, bool *created)
{
	if ((t->n + 1) * 2 > t->icap)
		btab_rehash(t, t->icap ? t->icap * 2 : 16);
	int64_t l = 0;
	if (!str)
		memcpy(&l, k, 8);
	uint64_t h = str ? bkt_hash(k, len) : num_hash(l);
	uint64_t tag = h & 0xffffffff00000000ull;
	size_t s = (size_t)h & (t->icap - 1);
	for (uint64_t e; (e = t->idx[s]) != 0; s = (s + 1) & (t->icap - 1)) {
		if ((e & 0xffffffff00000000ull) != tag)
			continue;
		bkt *b = &t->v[(e & 0xffffffff) - 1];
		if (str ? (b->key && b->klen == len && !memcmp(b->key, k, len))
		        : (!b->key && b->l == l))
			return b;
	}
	return btab_add(t, spec, s, h, k, len, str, created);
}

/* The count of key in t, 0 when absent (no insert). */
static uint64_t
btab_count_of(const btab *t, const void *k, size_t len, bool str)
{
	if (!t->icap)
		return 0;
	int64_t l = 0;
	if (!str)
		memcpy(&l, k, 8);
	uint64_t h = str ? bkt_hash(k, len) : num_hash(l);
	uint64_t tag = h & 0xffffffff00000000ull;
	size_t s = (size_t)h & (t->icap - 1);
	for (uint64_t e; (e = t->idx[s]) != 0; s = (s + 1) & (t->icap - 1)) {
		if ((e & 0xffffffff00000000ull) != tag)
			continue;
		const bkt *b = &t->v[(e & 0xffffffff) - 1];
		if (str ? (b->key && b->klen == len && !memcmp(b->key, k, len))
		        : (!b->key && b->l == l))
			return b->count;
	}
	return 0;
}

static bkt *
btab_get_l(btab *t, const sr_agg *spec, int64_t l, bool *created)
{
	return btab_get(t, spec, &l, 8, false, created);
}

static void
bkt_clear(const sr_agg *spec, bkt *b)
{
	agg_subs_free(spec, b->subs);
	cm_free(AGG_MEM, b->key);
	b->subs = NULL;
	b->key = NULL;
}

static void
btab_free(btab *t, const sr_agg *spec)
{
	for (size_t i = 0; i < t->n; i++)
		bkt_clear(spec, &t->v[i]);
	cm_free(AGG_MEM, t->v);
	cm_free(AGG_MEM, t->idx);
	memset(t, 0, sizeof *t);
}

/* Folds from into into; from ends empty. */
static void
btab_merge(btab *into, btab *from, const sr_agg *spec)
{
	for (size_t i = 0; i < from->n; i++) {
		bkt *fb = &from->v[i];
		size_t len;
		const void *k = bkt_keyp(fb, &len);
		bool created = false;
		bkt *b = btab_get(into, NULL, k, len, fb->key != NULL, &created);
		b->count += fb->count;
		if (created) {
			b->subs = fb->subs;
			fb->subs = NULL;
		} else if (b->subs && fb->subs)
			agg_subs_merge(spec, b->subs, fb->subs);
	}
	btab_free(from, spec);
}

static void
btab_encode(const btab *t, const sr_agg *spec, cm_buf *b)
{
	cm_buf_put_varint(b, t->n);
	for (size_t i = 0; i < t->n; i++) {
		const bkt *k = &t->v[i];
		cm_buf_put_u8(b, k->key != NULL);
		if (k->key)
			cm_buf_put_str(b, (const char *)k->key, k->klen);
		else
			cm_buf_put_u64(b, (uint64_t)k->l);
		cm_buf_put_varint(b, k->count);
		agg_subs_encode(spec, k->subs, b);
	}
}

static bool
btab_decode(btab *t, const sr_agg *spec, cm_rd *r)
{
	uint64_t n;
	if (!agg_get_count(r, (uint64_t)SR_MAX_BUCKETS * 64, &n))
		return false;
	for (uint64_t i = 0; i < n; i++) {
		uint8_t str;
		const char *s;
		size_t len;
		uint64_t l;
		bool created = false;
		bkt *b;
		if (!cm_rd_u8(r, &str))
			return false;
		if (str) {
			if (!cm_rd_str(r, &s, &len))
				return false;
			b = btab_get(t, spec, s, len, true, &created);
		} else {
			if (!cm_rd_u64(r, &l))
				return false;
			b = btab_get_l(t, spec, (int64_t)l, &created);
		}
		if (!created || !cm_rd_varint(r, &b->count) || !agg_subs_decode(spec, b->subs, r))
			return false;
	}
	return true;
}

/* Stable merge sort of pointers with a context comparator. */
typedef int (*bcmp_fn)(const void *ctx, const bkt *a, const bkt *b);

static void
bsort(bkt **v, size_t n, bcmp_fn cmp, const void *ctx)
{
	if (n < 2)
		return;
	bkt **tmp = cm_malloc(AGG_MEM, n * sizeof *tmp);
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				tmp[k++] = cmp(ctx, v[j], v[i]) < 0 ? v[j++] : v[i++];
			while (i < mid)
				tmp[k++] = v[i++];
			while (j < hi)
				tmp[k++] = v[j++];
		}
		memcpy(v, tmp, n * sizeof *v);
	}
	cm_free(AGG_MEM, tmp);
}

/* ================================================================ single-bucket helpers */

typedef struct sbkt {
	uint64_t count;
	agg_node **subs;
} sbkt;

/* Batches docs that fall into one bucket so sub-aggregations see runs. */
#define RUN_CAP 256
typedef struct run {
	uint32_t docs[RUN_CAP];
	float scores[RUN_CAP];
	size_t n;
	bool has_scores;
} run;

static void
run_flush(agg_rt *rt, agg_node **subs, run *r)
{
	if (r->n && subs)
		agg_subs_collect(rt->root, rt->spec, subs, r->docs, r->has_scores ? r->scores : NULL,
		                 r->n);
	r->n = 0;
}

static inline void
run_add(agg_rt *rt, agg_node **subs, run *r, uint32_t doc, const float *scores, size_t i)
{
	if (!subs)
		return;
	r->docs[r->n] = doc;
	if (scores)
		r->scores[r->n] = scores[i];
	r->has_scores = scores != NULL;
	if (++r->n == RUN_CAP)
		run_flush(rt, subs, r);
}

static inline void
bucket_doc(agg_rt *rt, agg_node **subs, uint32_t doc, const float *scores, size_t i)
{
	if (subs)
		agg_subs_collect(rt->root, rt->spec, subs, &doc, scores ? &scores[i] : NULL, 1);
}

/* Sub-aggregations see a batch's docs grouped per bucket (docs ascending
 * within each group) instead of one call per doc: (bucket, position)
 * pairs are gathered while counting, then sorted stably by bucket. */
typedef struct grp {
	uint64_t *p;
	size_t n, cap;
} grp;

static inline void
grp_add(grp *g, size_t bucket, size_t i)
{
	if (g->n == g->cap) {
		g->cap = g->cap ? g->cap * 2 : 256;
		g->p = cm_realloc(AGG_MEM, g->p, g->cap * sizeof *g->p);
	}
	g->p[g->n++] = (uint64_t)bucket << 32 | (uint32_t)i;
}

static int
u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static void
grp_flush(agg_rt *rt, grp *g, const btab *t, const uint32_t *docs, const float *scores)
{
	if (!g->n) {
		cm_free(AGG_MEM, g->p);
		return;
	}
	size_t n = g->n;
	uint64_t *v = g->p;
	if (t->n <= 65536 && t->n <= 8 * n) {
		/* counting sort: stable, so positions stay ascending per bucket */
		uint32_t *cnt = cm_calloc(AGG_MEM, t->n + 1, sizeof *cnt);
		uint64_t *out = cm_malloc(AGG_MEM, n * sizeof *out);
		for (size_t i = 0; i < n; i++)
			cnt[(v[i] >> 32) + 1]++;
		for (size_t b = 1; b <= t->n; b++)
			cnt[b] += cnt[b - 1];
		for (size_t i = 0; i < n; i++)
			out[cnt[v[i] >> 32]++] = v[i];
		cm_free(AGG_MEM, cnt);
		cm_free(AGG_MEM, v);
		v = out;
	} else
		qsort(v, n, sizeof *v, u64_cmp);
	uint32_t *d = cm_malloc(AGG_MEM, n * sizeof *d);
	float *sc = scores ? cm_malloc(AGG_MEM, n * sizeof *sc) : NULL;
	for (size_t i = 0; i < n; i++) {
		size_t pos = (uint32_t)v[i];
		d[i] = docs[pos];
		if (sc)
			sc[i] = scores[pos];
	}
	for (size_t i = 0; i < n;) {
		size_t j = i;
		uint64_t b = v[i] >> 32;
		while (j < n && v[j] >> 32 == b)
			j++;
		agg_subs_collect(rt->root, rt->spec, t->v[b].subs, d + i, sc ? sc + i : NULL, j - i);
		i = j;
	}
	cm_free(AGG_MEM, d);
	cm_free(AGG_MEM, sc);
	cm_free(AGG_MEM, v);
	g->p = NULL;
	g->n = g->cap = 0;
}

/* value for ordering a parent terms agg by "filter>metric" or "filter" */
bool
agg_single_bucket_value(const sr_agg *a, const agg_node *n, const char *rest, double *v)
{
	const sbkt *b = n->d;
	if (!rest) {
		*v = (double)b->count;
		return true;
	}
	return agg_subs_value(a, b->subs, rest, v);
}

static void *
sbkt_new(const sr_agg *a)
{
	sbkt *b = cm_calloc(AGG_MEM, 1, sizeof *b);
	b->subs = agg_subs_new(a);
	return b;
}

static void
sbkt_free(const sr_agg *a, void *d)
{
	sbkt *b = d;
	agg_subs_free(a, b->subs);
	cm_free(AGG_MEM, b);
}

static void
sbkt_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	sbkt *x = into->d, *y = from->d;
	x->count += y->count;
	if (x->subs)
		agg_subs_merge(a, x->subs, y->subs);
}

static void
sbkt_finish(const sr_agg *a, agg_node *n)
{
	sbkt *b = n->d;
	agg_subs_shard_finish(a, b->subs);
}

static cm_err
sbkt_render_full(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const sbkt *b = n->d;
	cm_buf_printf(r->out, "{\"doc_count\":%llu", (unsigned long long)b->count);
	cm_err rc = agg_subs_render(a, b->subs, r);
	cm_buf_put_u8(r->out, '}');
	return rc;
}

static void
sbkt_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const sbkt *s = n->d;
	cm_buf_put_varint(b, s->count);
	agg_subs_encode(a, s->subs, b);
}

static bool
sbkt_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	sbkt *s = n->d;
	return cm_rd_varint(r, &s->count) && agg_subs_decode(a, s->subs, r);
}

/* ================================================================ missing */

static cm_err
missing_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	for (const cJSON *c = body->child; c; c = c->next)
		if (strcmp(c->string, "field") && strcmp(c->string, "missing"))
			return agg_unknown_param(a, c->string, err);
	return CM_OK;
}

static void
missing_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	sbkt *b = n->d;
	run r;
	r.n = 0;
	if (rt->spec->missing.set) /* every doc has a value then: its own or "missing" */
		return;
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		if (agg_values(rt, docs[i], &v) == 0) {
			b->count++;
			run_add(rt, b->subs, &r, docs[i], scores, i);
		}
	}
	run_flush(rt, b->subs, &r);
}

const agg_ops agg_ops_missing = {
    .name = "missing",
    .bucket = true,
    .needs_field = true,
    .parse = missing_parse,
    .state_new = sbkt_new,
    .state_free = sbkt_free,
    .collect = missing_collect,
    .shard_finish = sbkt_finish,
    .merge = sbkt_merge,
    .render = sbkt_render_full,
    .encode = sbkt_encode,
    .decode = sbkt_decode,
};

/* ================================================================ global */

/* Every live doc of the shard, whatever the query: the collector marks a
 * global aggregation dirty at each segment's start (coll_begin), and its
 * flush feeds the segment's live docs to the sub-aggregations (scored 1.0,
 * as under match_all). Query execution visits every segment when a
 * request has aggregations. */
static cm_err
global_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	if (body->child)
		return agg_unknown_param(a, body->child->string, err);
	return CM_OK;
}

static void
global_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	(void)docs;
	(void)scores;
	(void)cnt;
	agg_mark_dirty(rt, n);
}

static void
global_flush(agg_rt *rt, agg_node *n)
{
	sbkt *b = n->d;
	const sr_seg_ctx *ctx = rt->ctx;
	uint32_t max = st_segment_max_doc(ctx->seg);
	uint32_t docs[256];
	float ones[256];
	for (size_t i = 0; i < 256; i++)
		ones[i] = 1.0f;
	size_t k = 0;
	for (uint32_t d = 0; d < max && !rt->root->err.code; d++) {
		if (ctx->live && !st_bit_get(ctx->live, d))
			continue;
		b->count++;
		docs[k++] = d;
		if (k == 256) {
			if (b->subs)
				agg_subs_collect(rt->root, rt->spec, b->subs, docs, ones, k);
			k = 0;
		}
	}
	if (k && b->subs)
		agg_subs_collect(rt->root, rt->spec, b->subs, docs, ones, k);
}

const agg_ops agg_ops_global = {
    .name = "global",
    .bucket = true,
    .needs_field = false,
    .parse = global_parse,
    .state_new = sbkt_new,
    .state_free = sbkt_free,
    .collect = global_collect,
    .seg_flush = global_flush,
    .shard_finish = sbkt_finish,
    .merge = sbkt_merge,
    .render = sbkt_render_full,
    .encode = sbkt_encode,
    .decode = sbkt_decode,
};

/* ================================================================ filter / filters */

typedef struct filt_params {
	sr_query **q;
	char **names; /* NULL for anonymous filters */
	size_t n;
	bool keyed;   /* filters: named → object */
	bool other;
	char *other_key;
} filt_params;

static void
filt_free_params(void *pp)
{
	filt_params *p = pp;
	for (size_t i = 0; i < p->n; i++) {
		sr_query_free(p->q[i]);
		if (p->names)
			cm_free(AGG_MEM, p->names[i]);
	}
	cm_free(AGG_MEM, p->q);
	cm_free(AGG_MEM, p->names);
	cm_free(AGG_MEM, p->other_key);
	cm_free(AGG_MEM, p);
}

static cm_err
filter_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	filt_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->q = cm_calloc(AGG_MEM, 1, sizeof *p->q);
	p->n = 1;
	return sr_query_from_json(body, &p->q[0], err);
}

#define FILTERS_MAX 1024

static cm_err
filters_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	filt_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->keyed = true;
	const cJSON *f = NULL;
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "filters"))
			f = c;
		else if (!strcmp(c->string, "other_bucket")) {
			if (agg_parse_bool(c, a->name, "other_bucket", &p->other, err))
				return CM_EPARSE;
		} else if (!strcmp(c->string, "other_bucket_key")) {
			if (agg_parse_str(c, a->name, "other_bucket_key", &p->other_key, err))
				return CM_EPARSE;
			p->other = true;
		} else if (!strcmp(c->string, "keyed")) {
			if (agg_parse_bool(c, a->name, "keyed", &p->keyed, err))
				return CM_EPARSE;
		} else
			return agg_unknown_param(a, c->string, err);
	}
	if (!f || !(cJSON_IsObject(f) || cJSON_IsArray(f)))
		return cm_error_set(err, CM_EPARSE, "[filters] cannot be empty.");
	int k = cJSON_GetArraySize(f);
	if (k == 0)
		return cm_error_set(err, CM_EINVAL, "[filters] cannot be empty.");
	if (k > FILTERS_MAX)
		return cm_error_set(err, CM_EINVAL, "too many filters in [%s]", a->name);
	p->q = cm_calloc(AGG_MEM, k ? (size_t)k : 1, sizeof *p->q);
	if (cJSON_IsObject(f))
		p->names = cm_calloc(AGG_MEM, k ? (size_t)k : 1, sizeof *p->names);
	else
		p->keyed = false;
	for (const cJSON *c = f->child; c; c = c->next) {
		if (p->names)
			p->names[p->n] = cm_strdup(AGG_MEM, c->string);
		cm_err rc = sr_query_from_json(c, &p->q[p->n], err);
		p->n++;
		if (rc)
			return rc;
	}
	if (!p->other_key)
		p->other_key = cm_strdup(AGG_MEM, "_other_");
	return CM_OK;
}

typedef struct filt_rt {
	uint64_t **bits; /* per filter */
	size_t n;
} filt_rt;

static cm_err
filt_seg_begin(agg_rt *rt, cm_error *err)
{
	const filt_params *p = rt->spec->p;
	filt_rt *f = cm_calloc(AGG_MEM, 1, sizeof *f);
	rt->kd = f;
	f->bits = cm_calloc(AGG_MEM, p->n ? p->n : 1, sizeof *f->bits);
	f->n = p->n;
	size_t words = st_bit_words(st_segment_max_doc(rt->ctx->seg));
	for (size_t i = 0; i < p->n; i++) {
		f->bits[i] = cm_calloc(AGG_MEM, words ? words : 1, sizeof **f->bits);
		cm_err rc = sr_query_bitset(p->q[i], rt->ctx, f->bits[i], err);
		if (rc)
			return rc;
	}
	return CM_OK;
}

static void
filt_seg_end(agg_rt *rt)
{
	filt_rt *f = rt->kd;
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++)
		cm_free(AGG_MEM, f->bits[i]);
	cm_free(AGG_MEM, f->bits);
	cm_free(AGG_MEM, f);
}

static void
filter_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	sbkt *b = n->d;
	filt_rt *f = rt->kd;
	run r;
	r.n = 0;
	for (size_t i = 0; i < cnt; i++)
		if (st_bit_get(f->bits[0], docs[i])) {
			b->count++;
			run_add(rt, b->subs, &r, docs[i], scores, i);
		}
	run_flush(rt, b->subs, &r);
}

const agg_ops agg_ops_filter = {
    .name = "filter",
    .bucket = true,
    .parse = filter_parse,
    .free_params = filt_free_params,
    .state_new = sbkt_new,
    .state_free = sbkt_free,
    .seg_begin = filt_seg_begin,
    .collect = filter_collect,
    .seg_end = filt_seg_end,
    .shard_finish = sbkt_finish,
    .merge = sbkt_merge,
    .render = sbkt_render_full,
    .encode = sbkt_encode,
    .decode = sbkt_decode,
};

/* filters: n buckets plus an optional other bucket at index n */
typedef struct filters_state {
	sbkt *b;
	size_t n;
	char *fmt; /* date_range: the field's format its bounds were read in, or NULL */
} filters_state;

static void *
filters_new(const sr_agg *a)
{
	const filt_params *p = a->p;
	filters_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->n = p->n + (p->other ? 1 : 0);
	s->b = cm_calloc(AGG_MEM, s->n ? s->n : 1, sizeof *s->b);
	for (size_t i = 0; i < s->n; i++)
		s->b[i].subs = agg_subs_new(a);
	return s;
}

static void
filters_free(const sr_agg *a, void *d)
{
	filters_state *s = d;
	for (size_t i = 0; i < s->n; i++)
		agg_subs_free(a, s->b[i].subs);
	cm_free(AGG_MEM, s->b);
	cm_free(AGG_MEM, s->fmt);
	cm_free(AGG_MEM, s);
}

static void
filters_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	filters_state *s = n->d;
	const filt_params *p = rt->spec->p;
	filt_rt *f = rt->kd;
	for (size_t k = 0; k < p->n; k++) {
		run r;
		r.n = 0;
		for (size_t i = 0; i < cnt; i++)
			if (st_bit_get(f->bits[k], docs[i])) {
				s->b[k].count++;
				run_add(rt, s->b[k].subs, &r, docs[i], scores, i);
			}
		run_flush(rt, s->b[k].subs, &r);
	}
	if (p->other) {
		run r;
		r.n = 0;
		for (size_t i = 0; i < cnt; i++) {
			bool any = false;
			for (size_t k = 0; k < p->n && !any; k++)
				any = st_bit_get(f->bits[k], docs[i]);
			if (!any) {
				s->b[p->n].count++;
				run_add(rt, s->b[p->n].subs, &r, docs[i], scores, i);
			}
		}
		run_flush(rt, s->b[p->n].subs, &r);
	}
}

static void
filters_finish(const sr_agg *a, agg_node *n)
{
	filters_state *s = n->d;
	for (size_t i = 0; i < s->n; i++)
		agg_subs_shard_finish(a, s->b[i].subs);
}

static void
filters_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	filters_state *x = into->d, *y = from->d;
	if (!x->fmt && y->fmt)
		x->fmt = cm_strdup(AGG_MEM, y->fmt);
	for (size_t i = 0; i < x->n; i++) {
		x->b[i].count += y->b[i].count;
		if (x->b[i].subs)
			agg_subs_merge(a, x->b[i].subs, y->b[i].subs);
	}
}

static cm_err
filters_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const filters_state *s = n->d;
	const filt_params *p = a->p;
	cm_buf *b = r->out;
	if (count_buckets(r, s->n))
		return CM_ELIMIT;
	cm_buf_put(b, p->keyed ? "{\"buckets\":{" : "{\"buckets\":[", 12);
	for (size_t i = 0; i < s->n; i++) {
		if (i)
			cm_buf_put_u8(b, ',');
		if (p->keyed) {
			const char *k = i < p->n ? p->names[i] : p->other_key;
			agg_json_str(b, k, strlen(k));
			cm_buf_put_u8(b, ':');
		}
		cm_buf_printf(b, "{\"doc_count\":%llu", (unsigned long long)s->b[i].count);
		cm_err rc = agg_subs_render(a, s->b[i].subs, r);
		if (rc)
			return rc;
		cm_buf_put_u8(b, '}');
	}
	cm_buf_put(b, p->keyed ? "}}" : "]}", 2);
	return CM_OK;
}

static void
filters_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const filters_state *s = n->d;
	cm_buf_put_varint(b, s->n);
	for (size_t i = 0; i < s->n; i++) {
		cm_buf_put_varint(b, s->b[i].count);
		agg_subs_encode(a, s->b[i].subs, b);
	}
}

static bool
filters_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	filters_state *s = n->d;
	uint64_t k;
	if (!cm_rd_varint(r, &k) || k != s->n)
		return false;
	for (size_t i = 0; i < s->n; i++)
		if (!cm_rd_varint(r, &s->b[i].count) || !agg_subs_decode(a, s->b[i].subs, r))
			return false;
	return true;
}

const agg_ops agg_ops_filters = {
    .name = "filters",
    .bucket = true,
    .parse = filters_parse,
    .free_params = filt_free_params,
    .state_new = filters_new,
    .state_free = filters_free,
    .seg_begin = filt_seg_begin,
    .collect = filters_collect,
    .seg_end = filt_seg_end,
    .shard_finish = filters_finish,
    .merge = filters_merge,
    .render = filters_render,
    .encode = filters_encode,
    .decode = filters_decode,
};

/* ================================================================ adjacency_matrix */

/* Named filters sorted by name; a bucket per filter and per pair of
 * filters (i < j), "A&B". The pair buckets follow the singles in the
 * state, so the filters' merge and wire code serve as they are; only
 * non-empty buckets render, sorted by key as in ES. p->other_key holds the
 * separator. */
#define ADJ_MAX_FILTERS 100

static cm_err
adj_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	filt_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	const cJSON *f = NULL;
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "filters"))
			f = c;
		else if (!strcmp(c->string, "separator")) {
			if (agg_parse_str(c, a->name, "separator", &p->other_key, err))
				return CM_EPARSE;
		} else
			return agg_unknown_param(a, c->string, err);
	}
	if (!cJSON_IsObject(f) || !f->child)
		return cm_error_set(err, CM_EPARSE, "[filters] cannot be empty.");
	int k = cJSON_GetArraySize(f);
	if (k > ADJ_MAX_FILTERS)
		return cm_error_set(err, CM_EINVAL,
		                    "Number of filters is too large, must be less than or equal to: "
		                    "[%d] but was [%d].This limit can be set by changing the "
		                    "[index.max_adjacency_matrix_filters] index level setting.",
		                    ADJ_MAX_FILTERS, k);
	p->q = cm_calloc(AGG_MEM, (size_t)k, sizeof *p->q);
	p->names = cm_calloc(AGG_MEM, (size_t)k, sizeof *p->names);
	for (const cJSON *c = f->child; c; c = c->next) {
		/* insertion by name keeps the filters sorted */
		size_t at = p->n;
		while (at > 0 && strcmp(p->names[at - 1], c->string) > 0) {
			p->names[at] = p->names[at - 1];
			p->q[at] = p->q[at - 1];
			at--;
		}
		p->names[at] = cm_strdup(AGG_MEM, c->string);
		p->q[at] = NULL;
		p->n++;
		cm_err rc = sr_query_from_json(c, &p->q[at], err);
		if (rc)
			return rc;
	}
	if (!p->other_key)
		p->other_key = cm_strdup(AGG_MEM, "&");
	return CM_OK;
}

static void *
adj_new(const sr_agg *a)
{
	const filt_params *p = a->p;
	filters_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->n = p->n + p->n * (p->n - 1) / 2;
	s->b = cm_calloc(AGG_MEM, s->n ? s->n : 1, sizeof *s->b);
	for (size_t i = 0; i < s->n; i++)
		s->b[i].subs = agg_subs_new(a);
	return s;
}

static void
adj_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	filters_state *s = n->d;
	const filt_params *p = rt->spec->p;
	filt_rt *f = rt->kd;
	size_t k = p->n;
	for (size_t i = 0; i < p->n; i++)
		for (size_t j = i; j < p->n; j++) {
			size_t slot = i == j ? i : k++;
			run r;
			r.n = 0;
			for (size_t d = 0; d < cnt; d++)
				if (st_bit_get(f->bits[i], docs[d]) && st_bit_get(f->bits[j], docs[d])) {
					s->b[slot].count++;
					run_add(rt, s->b[slot].subs, &r, docs[d], scores, d);
				}
			run_flush(rt, s->b[slot].subs, &r);
		}
}

typedef struct adj_out {
	char *key;
	size_t slot;
} adj_out;

static int
adj_out_cmp(const void *x, const void *y)
{
	return strcmp(((const adj_out *)x)->key, ((const adj_out *)y)->key);
}

static cm_err
adj_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const filters_state *s = n->d;
	const filt_params *p = a->p;
	adj_out *o = cm_calloc(AGG_MEM, s->n ? s->n : 1, sizeof *o);
	size_t m = 0, k = p->n;
	for (size_t i = 0; i < p->n; i++)
		for (size_t j = i; j < p->n; j++) {
			size_t slot = i == j ? i : k++;
			if (!s->b[slot].count)
				continue;
			cm_buf t;
			cm_buf_init(&t, AGG_MEM);
			cm_buf_put(&t, p->names[i], strlen(p->names[i]));
			if (i != j) {
				cm_buf_put(&t, p->other_key, strlen(p->other_key));
				cm_buf_put(&t, p->names[j], strlen(p->names[j]));
			}
			cm_buf_put_u8(&t, 0);
			o[m].key = (char *)t.data;
			o[m++].slot = slot;
		}
	qsort(o, m, sizeof *o, adj_out_cmp);
	cm_err rc = count_buckets(r, m);
	cm_buf *b = r->out;
	if (!rc)
		cm_buf_put(b, "{\"buckets\":[", 12);
	for (size_t i = 0; i < m && !rc; i++) {
		if (i)
			cm_buf_put_u8(b, ',');
		cm_buf_put(b, "{\"key\":", 7);
		agg_json_str(b, o[i].key, strlen(o[i].key));
		cm_buf_printf(b, ",\"doc_count\":%llu", (unsigned long long)s->b[o[i].slot].count);
		rc = agg_subs_render(a, s->b[o[i].slot].subs, r);
		cm_buf_put_u8(b, '}');
	}
	if (!rc)
		cm_buf_put(b, "]}", 2);
	for (size_t i = 0; i < m; i++)
		cm_free(AGG_MEM, o[i].key);
	cm_free(AGG_MEM, o);
	return rc;
}

const agg_ops agg_ops_adjacency_matrix = {
    .name = "adjacency_matrix",
    .bucket = true,
    .parse = adj_parse,
    .free_params = filt_free_params,
    .state_new = adj_new,
    .state_free = filters_free,
    .seg_begin = filt_seg_begin,
    .collect = adj_collect,
    .seg_end = filt_seg_end,
    .shard_finish = filters_finish,
    .merge = filters_merge,
    .render = adj_render,
    .encode = filters_encode,
    .decode = filters_decode,
};

/* ================================================================ terms */

typedef enum { ORD_COUNT, ORD_KEY, ORD_PATH } ord_kind;

typedef struct ord_key {
	ord_kind kind;
	bool desc;
	char *path;
} ord_key;

#define TERMS_MAX_ORDER 8
#define TERMS_MAX_SIZE 1000000

/* An exact include/exclude value read as each typed key could hold it: ES
 * parses the values with the field's format (an address, a date, a
 * boolean), so "2016-05-03" selects the key 1462233600000. */
typedef struct tf_typed {
	bool ip_ok, date_ok, bool_ok;
	uint8_t ip[ST_IP_LEN];
	int64_t ms; /* date: epoch millis */
	int64_t b;  /* boolean: 0 or 1 */
} tf_typed;

typedef struct terms_filter {
	bool has_re;
	regex_t re;
	char **vals; /* exact values */
	tf_typed *typed; /* parallel to vals */
	size_t nvals;
} terms_filter;

typedef struct terms_params {
	uint64_t size, shard_size, min_doc_count, shard_min_doc_count;
	ord_key order[TERMS_MAX_ORDER];
	size_t norder;
	terms_filter inc, exc;
	bool has_inc, has_exc;
	int64_t partition, num_partitions; /* num_partitions 0 = none */
	bool rare;                 /* rare_terms: shards keep every term */
	uint64_t max_doc_count;    /* rare_terms: rendered when count <= this */
} terms_params;

static void
tf_free(terms_filter *f)
{
	if (f->has_re)
		regfree(&f->re);
	for (size_t i = 0; i < f->nvals; i++)
		cm_free(AGG_MEM, f->vals[i]);
	cm_free(AGG_MEM, f->vals);
	cm_free(AGG_MEM, f->typed);
}

static void
terms_free_params(void *pp)
{
	terms_params *p = pp;
	for (size_t i = 0; i < p->norder; i++)
		cm_free(AGG_MEM, p->order[i].path);
	tf_free(&p->inc);
	tf_free(&p->exc);
	cm_free(AGG_MEM, p);
}

static cm_err
tf_parse(sr_agg *a, const cJSON *v, terms_filter *f, bool *has, terms_params *p, cm_error *err)
{
	*has = true;
	if (cJSON_IsString(v)) {
		size_t n = strlen(v->valuestring);
		if (n > 4096)
			return cm_error_set(err, CM_EINVAL, "include/exclude pattern too long");
		char *anch = cm_malloc(AGG_MEM, n + 5);
		snprintf(anch, n + 5, "^(%s)$", v->valuestring);
		int rc = regcomp(&f->re, anch, REG_EXTENDED | REG_NOSUB);
		cm_free(AGG_MEM, anch);
		if (rc)
			return cm_error_set(err, CM_EINVAL, "invalid regular expression [%s] in [%s]",
			                    v->valuestring, a->name);
		f->has_re = true;
		return CM_OK;
	}
	if (cJSON_IsArray(v)) {
		int k = cJSON_GetArraySize(v);
		if (k > 65536)
			return cm_error_set(err, CM_EINVAL, "too many include/exclude values");
		f->vals = cm_calloc(AGG_MEM, k ? (size_t)k : 1, sizeof *f->vals);
		f->typed = cm_calloc(AGG_MEM, k ? (size_t)k : 1, sizeof *f->typed);
		for (const cJSON *e = v->child; e; e = e->next) {
			char *s = NULL;
			if (agg_parse_str(e, a->name, "include", &s, err))
				return CM_EPARSE;
			tf_typed *t = &f->typed[f->nvals];
			f->vals[f->nvals++] = s;
			t->ip_ok = st_ip_parse(s, strlen(s), t->ip);
			t->date_ok = agg_date_parse(s, a->format, NULL, false, &t->ms);
			t->bool_ok = !strcmp(s, "true") || !strcmp(s, "false");
			t->b = !strcmp(s, "true");
		}
		return CM_OK;
	}
	if (cJSON_IsObject(v) && f == &p->inc) {
		const cJSON *pt = cJSON_GetObjectItemCaseSensitive(v, "partition");
		const cJSON *np = cJSON_GetObjectItemCaseSensitive(v, "num_partitions");
		if (!pt || !np)
			return cm_error_set(err, CM_EPARSE,
			                    "Missing [partition] or [num_partitions] in include");
		if (agg_parse_int(np, a->name, "num_partitions", 1, INT32_MAX, &p->num_partitions,
		                  err) ||
		    agg_parse_int(pt, a->name, "partition", 0, p->num_partitions - 1, &p->partition,
		                  err))
			return CM_EINVAL;
		*has = false;
		return CM_OK;
	}
	return cm_error_set(err, CM_EPARSE, "Unrecognized token for an include/exclude in [%s]",
	                    a->name);
}

static cm_err
terms_parse_order_one(sr_agg *a, terms_params *p, const cJSON *o, cm_error *err)
{
	if (!cJSON_IsObject(o) || !o->child || o->child->next || !cJSON_IsString(o->child))
		return cm_error_set(err, CM_EPARSE, "[order] must be an object of one key in [%s]",
		                    a->name);
	const char *k = o->child->string, *dir = o->child->valuestring;
	if (strcmp(dir, "asc") && strcmp(dir, "desc"))
		return cm_error_set(err, CM_EPARSE, "Unknown terms order direction [%s] in terms "
		                    "aggregation [%s]", dir, a->name);
	if (p->norder == TERMS_MAX_ORDER)
		return cm_error_set(err, CM_EINVAL, "too many [order] keys in [%s]", a->name);
	ord_key *ok = &p->order[p->norder++];
	ok->desc = !strcmp(dir, "desc");
	if (!strcmp(k, "_count"))
		ok->kind = ORD_COUNT;
	else if (!strcmp(k, "_key") || !strcmp(k, "_term"))
		ok->kind = ORD_KEY;
	else {
		ok->kind = ORD_PATH;
		ok->path = cm_strdup(AGG_MEM, k);
	}
	return CM_OK;
}

static cm_err
terms_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	terms_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->size = 10;
	p->min_doc_count = 1;
	bool shard_size_set = false;
	for (const cJSON *c = body->child; c; c = c->next) {
		int64_t v;
		const char *k = c->string;
		if (!strcmp(k, "field") || !strcmp(k, "missing") || !strcmp(k, "format") ||
		    !strcmp(k, "execution_hint") || !strcmp(k, "collect_mode") ||
		    !strcmp(k, "show_term_doc_count_error") || !strcmp(k, "value_type"))
			continue;
		if (!strcmp(k, "size")) {
			if (agg_parse_int(c, a->name, k, 1, TERMS_MAX_SIZE, &v, err))
				return cm_error_set(err, CM_EINVAL,
				                    "[size] must be greater than 0. Found [%s] in [%s]",
				                    cJSON_IsNumber(c) ? "0" : "?", a->name);
			p->size = (uint64_t)v;
		} else if (!strcmp(k, "shard_size")) {
			if (agg_parse_int(c, a->name, k, 1, TERMS_MAX_SIZE, &v, err))
				return cm_error_set(err, CM_EINVAL,
				                    "[shard_size] must be greater than 0. Found in [%s]",
				                    a->name);
			p->shard_size = (uint64_t)v;
			shard_size_set = true;
		} else if (!strcmp(k, "min_doc_count") || !strcmp(k, "shard_min_doc_count")) {
			if (agg_parse_int(c, a->name, k, 0, INT64_MAX, &v, err))
				return cm_error_set(err, CM_EINVAL,
				                    "[%s] must be greater than or equal to 0. Found in [%s]",
				                    k, a->name);
			if (k[0] == 'm')
				p->min_doc_count = (uint64_t)v;
			else
				p->shard_min_doc_count = (uint64_t)v;
		} else if (!strcmp(k, "order")) {
			if (cJSON_IsArray(c)) {
				for (const cJSON *e = c->child; e; e = e->next)
					if (terms_parse_order_one(a, p, e, err))
						return CM_EPARSE;
			} else if (terms_parse_order_one(a, p, c, err))
				return CM_EPARSE;
		} else if (!strcmp(k, "include")) {
			cm_err rc = tf_parse(a, c, &p->inc, &p->has_inc, p, err);
			if (rc)
				return rc;
		} else if (!strcmp(k, "exclude")) {
			cm_err rc = tf_parse(a, c, &p->exc, &p->has_exc, p, err);
			if (rc)
				return rc;
		} else
			return agg_unknown_param(a, k, err);
	}
	if (!shard_size_set)
		p->shard_size = (uint64_t)(p->size * 1.5 + 10);
	if (p->shard_size < p->size)
		p->shard_size = p->size;
	if (p->norder == 0) {
		p->order[0].kind = ORD_COUNT;
		p->order[0].desc = true;
		p->norder = 1;
	}
	return CM_OK;
}

/* rare_terms: a terms aggregation whose shards keep every term (a term
 * frequent on one shard must not look rare after the merge: exact where
 * ES's cuckoo filter is approximate), ordered by count then key, and
 * rendered for counts up to max_doc_count. */
static cm_err
rare_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	cJSON *rest = cJSON_CreateObject();
	uint64_t max = 1;
	cm_err rc = CM_OK;
	for (const cJSON *c = body->child; c && !rc; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "max_doc_count")) {
			int64_t v;
			if ((rc = agg_parse_int(c, a->name, k, INT32_MIN, INT32_MAX, &v, err)))
				;
			else if (v <= 0)
				rc = cm_error_set(err, CM_EINVAL,
				                  "[max_doc_count] must be greater than 0. Found [%lld] in [%s]",
				                  (long long)v, a->name);
			else if (v > 100)
				rc = cm_error_set(err, CM_EINVAL,
				                  "[max_doc_count] must be smaller than or equal to [100] in "
				                  "[%s]",
				                  a->name);
			else
				max = (uint64_t)v;
		} else if (!strcmp(k, "precision")) {
			double d;
			if (agg_parse_num(c, a->name, k, &d, err))
				rc = CM_EPARSE;
			else if (d < 0.00001)
				rc = cm_error_set(err, CM_EINVAL,
				                  "[precision] must be greater than 0.00001");
		} else if (!strcmp(k, "field") || !strcmp(k, "missing") || !strcmp(k, "format") ||
		           !strcmp(k, "include") || !strcmp(k, "exclude") || !strcmp(k, "value_type"))
			cJSON_AddItemToObject(rest, k, cJSON_Duplicate(c, true));
		else
			rc = agg_unknown_param(a, k, err);
	}
	if (!rc)
		rc = terms_parse(a, rest, err);
	cJSON_Delete(rest);
	if (rc)
		return rc;
	terms_params *p = a->p;
	p->rare = true;
	p->max_doc_count = max;
	p->size = p->shard_size = UINT64_MAX;
	p->order[0].kind = ORD_COUNT;
	p->order[0].desc = false;
	p->order[1].kind = ORD_KEY;
	p->order[1].desc = false;
	p->norder = 2;
	return CM_OK;
}

cm_err
agg_terms_check_order(const sr_agg *a, cm_error *err)
{
	const terms_params *p = a->p;
	for (size_t i = 0; i < p->norder; i++)
		if (p->order[i].kind == ORD_PATH && !agg_subs_path_ok(a, p->order[i].path))
			return cm_error_set(
			    err, CM_EAGGEXEC,
			    "Invalid aggregator order path [%s]. Unknown aggregation "
			    "[%s]",
			    p->order[i].path, p->order[i].path);
	return CM_OK;
}

/* Lucene's StringHelper.murmurhash3_x86_32 with seed 31, as ES partitions. */
static int32_t
murmur3_32(const uint8_t *data, size_t len, uint32_t seed)
{
	const uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
	uint32_t h1 = seed;
	size_t rounded = len & ~(size_t)3;
	for (size_t i = 0; i < rounded; i += 4) {
		uint32_t k1 = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 |
		              (uint32_t)data[i + 2] << 16 | (uint32_t)data[i + 3] << 24;
		k1 *= c1;
		k1 = (k1 << 15) | (k1 >> 17);
		k1 *= c2;
		h1 ^= k1;
		h1 = (h1 << 13) | (h1 >> 19);
		h1 = h1 * 5 + 0xe6546b64;
	}
	uint32_t k1 = 0;
	switch (len & 3) {
	case 3: k1 = (uint32_t)data[rounded + 2] << 16; /* fallthrough */
	case 2: k1 |= (uint32_t)data[rounded + 1] << 8; /* fallthrough */
	case 1:
		k1 |= data[rounded];
		k1 *= c1;
		k1 = (k1 << 15) | (k1 >> 17);
		k1 *= c2;
		h1 ^= k1;
	}
	h1 ^= (uint32_t)len;
	h1 ^= h1 >> 16;
	h1 *= 0x85ebca6b;
	h1 ^= h1 >> 13;
	h1 *= 0xc2b2ae35;
	h1 ^= h1 >> 16;
	return (int32_t)h1;
}

static bool
tf_match(const terms_filter *f, const char *s, size_t n)
{
	for (size_t i = 0; i < f->nvals; i++)
		if (strlen(f->vals[i]) == n && !memcmp(f->vals[i], s, n))
			return true;
	if (f->has_re) {
		char buf[512];
		char *z = n < sizeof buf ? buf : cm_malloc(AGG_MEM, n + 1);
		memcpy(z, s, n);
		z[n] = 0;
		bool m = regexec(&f->re, z, 0, NULL, 0) == 0;
		if (z != buf)
			cm_free(AGG_MEM, z);
		return m;
	}
	return false;
}

static bool
terms_in_partition(const terms_params *p, const void *s, size_t n)
{
	if (!p->num_partitions)
		return true;
	int32_t h = murmur3_32(s, n, 31);
	return ((int64_t)h % p->num_partitions + p->num_partitions) % p->num_partitions ==
	       p->partition;
}

static bool
terms_accept(const terms_params *p, const char *s, size_t n)
{
	if (!terms_in_partition(p, s, n))
		return false;
	if (p->has_inc && !tf_match(&p->inc, s, n))
		return false;
	if (p->has_exc && tf_match(&p->exc, s, n))
		return false;
	return true;
}

static bool
terms_filtered(const terms_params *p)
{
	return p->has_inc || p->has_exc || p->num_partitions;
}

static bool
tf_match_typed(const terms_filter *f, int ftype, int64_t l, const uint8_t *ip)
{
	for (size_t i = 0; i < f->nvals; i++) {
		const tf_typed *t = &f->typed[i];
		if (ftype == ST_FT_IP ? t->ip_ok && !memcmp(t->ip, ip, ST_IP_LEN)
		    : ftype == ST_FT_DATE ? t->date_ok && t->ms == l
		                          : t->bool_ok && t->b == l)
			return true;
	}
	return false;
}

/* Keys of ip, date and boolean fields: exact values as the field parses
 * them, or as the key's text (a date's millis, a boolean's 1 or 0). */
static bool
terms_accept_typed(const terms_params *p, int ftype, int64_t l, const uint8_t *ip)
{
	char txt[ST_IP_STRLEN + 64];
	if (ftype == ST_FT_IP) {
		if (!terms_in_partition(p, ip, ST_IP_LEN)) /* ES hashes the encoded address */
			return false;
		st_ip_format(ip, txt, sizeof txt);
	} else {
		snprintf(txt, sizeof txt, "%lld", (long long)l);
		if (!terms_in_partition(p, txt, strlen(txt)))
			return false;
	}
	size_t n = strlen(txt);
	if (p->has_inc && !tf_match_typed(&p->inc, ftype, l, ip) && !tf_match(&p->inc, txt, n))
		return false;
	if (p->has_exc && (tf_match_typed(&p->exc, ftype, l, ip) || tf_match(&p->exc, txt, n)))
		return false;
	return true;
}

/* numeric keys are matched by their rendered text ("5", "1.5") */
static bool
terms_accept_num(const terms_params *p, int64_t l, bool dbl, int ftype)
{
	if (!terms_filtered(p))
		return true;
	if (!dbl && (ftype == ST_FT_DATE || ftype == ST_FT_BOOLEAN))
		return terms_accept_typed(p, ftype, l, NULL);
	char buf[64];
	if (dbl) {
		double d;
		memcpy(&d, &l, 8);
		if (d == (double)(int64_t)d && fabs(d) < 1e15)
			snprintf(buf, sizeof buf, "%lld", (long long)d);
		else
			agg_double_str(buf, sizeof buf, d);
	} else
		snprintf(buf, sizeof buf, "%lld", (long long)l);
	if (terms_accept(p, buf, strlen(buf)))
		return true;
	if (dbl) { /* "1.0" spelled as Java prints it */
		double d;
		memcpy(&d, &l, 8);
		agg_double_str(buf, sizeof buf, d);
		return terms_accept(p, buf, strlen(buf));
	}
	return false;
}

typedef struct terms_state {
	btab t;
	uint64_t other;   /* docs in buckets cut away */
	int64_t err_sum;  /* -1: unbounded */
	uint32_t nshards; /* 0: fresh shard state */
	/* per segment (keyword fields) */
	uint32_t *counts; /* per ordinal, no sub-aggs */
	uint32_t *ord2b;  /* ordinal → bucket + 1; UINT32_MAX rejected */
	size_t nords;
	/* counts per ordinal while few ordinals are hit (a query matching a
	 * few docs of a field with many terms): open addressing on ordinal + 1,
	 * then the counts array once more than 1 ordinal in 16 is hit (the
	 * array costs its whole size per segment, the flush a scan of it).
	 * A slot is (ordinal + 1) << 32 | i, 0 when empty, for hl[i] =
	 * ordinal << 32 | count: the counted ordinals in the order first
	 * seen, which the flush and a growth read without scanning the
	 * table, about half of whose slots are empty at random. */
	uint64_t *ht, *hl;
	size_t hn, hcap;
	bool fast; /* counting without buckets: counts or the table above */
	uint8_t key_kind; /* 0 unknown, 1 string, 2 long, 3 double */
	/* significant_terms: docs seen (subset) and in the shard (superset),
	 * background counts of the buckets' terms (no subs), and the runtime
	 * whose shard-wide table fills bg at the shard cut */
	uint64_t subset, superset;
	btab bg;
	const agg_rt *bg_rt;
} terms_state;

#define ORD_REJECT UINT32_MAX
#define TERMS_ARRAY_MAX (1u << 24)

static void *
terms_new(const sr_agg *a)
{
	return cm_calloc(AGG_MEM, 1, sizeof(terms_state));
}

static void
terms_free(const sr_agg *a, void *d)
{
	terms_state *s = d;
	btab_free(&s->t, a);
	btab_free(&s->bg, NULL);
	cm_free(AGG_MEM, s->counts);
	cm_free(AGG_MEM, s->ord2b);
	cm_free(AGG_MEM, s->ht);
	cm_free(AGG_MEM, s->hl);
	cm_free(AGG_MEM, s);
}

static bkt *
terms_bucket_str(terms_state *s, const sr_agg *a, const void *k, size_t n)
{
	s->key_kind = 1;
	return btab_get(&s->t, a, k, n, true, NULL);
}

static bkt *
terms_bucket_num(terms_state *s, const sr_agg *a, int64_t l, bool dbl)
{
	s->key_kind = dbl ? 3 : 2;
	return btab_get_l(&s->t, a, l, NULL);
}

static int64_t
dbits(double d)
{
	int64_t l;
	if (d == 0)
		d = 0;
	memcpy(&l, &d, 8);
	return l;
}

/* A doc without the field counts under "missing", read as the field's
 * type would read it (where the field is unmapped: as "value_type"): a
 * date's text becomes its millis, rendered with key_as_string, an address
 * its 16 bytes, so it meets the docs that hold the same value. */
static void
terms_missing(agg_rt *rt, agg_node *n, terms_state *s, grp *g, size_t i)
{
	const sr_agg *a = rt->spec;
	const agg_missing *m = &a->missing;
	int t = rt->fi ? (int)rt->fi->type : a->has_value_type ? (int)a->value_type : -1;
	int64_t l;
	uint8_t ip[ST_IP_LEN];
	bkt *b;
	if ((t == ST_FT_DATE || t == ST_FT_DATE_NANOS) &&
	    agg_date_parse(m->s, a->format, NULL, false, &l)) {
		if (!terms_accept_num(a->p, l, false, ST_FT_DATE))
			return;
		b = terms_bucket_num(s, a, l, false);
		if (n->ftype < 0)
			n->ftype = ST_FT_DATE;
	} else if (t == ST_FT_BOOLEAN && (!strcmp(m->s, "true") || !strcmp(m->s, "false"))) {
		l = !strcmp(m->s, "true");
		if (!terms_accept_num(a->p, l, false, ST_FT_BOOLEAN))
			return;
		b = terms_bucket_num(s, a, l, false);
		if (n->ftype < 0)
			n->ftype = ST_FT_BOOLEAN;
	} else if (t == ST_FT_IP && st_ip_parse(m->s, m->slen, ip)) {
		if (terms_filtered(a->p) && !terms_accept_typed(a->p, ST_FT_IP, 0, ip))
			return;
		b = terms_bucket_str(s, a, ip, ST_IP_LEN);
		if (n->ftype < 0)
			n->ftype = ST_FT_IP;
	} else if (rt->is_keyword || t == ST_FT_KEYWORD || !m->is_num ||
	           (!rt->fi && s->key_kind == 1)) {
		if (!terms_accept(a->p, m->s, m->slen))
			return;
		b = terms_bucket_str(s, a, m->s, m->slen);
	} else if (rt->is_double || (!rt->fi && (t == ST_FT_DOUBLE || m->d != (double)m->l))) {
		if (!terms_accept_num(a->p, dbits(m->d), true, -1))
			return;
		b = terms_bucket_num(s, a, dbits(m->d), true);
	} else {
		if (!terms_accept_num(a->p, m->l, false, t))
			return;
		b = terms_bucket_num(s, a, m->l, false);
	}
	b->count++;
	if (g)
		grp_add(g, (size_t)(b - s->t.v), i);
}

static uint32_t
terms_resolve(agg_rt *rt, terms_state *s, uint64_t ord)
{
	const uint8_t *t;
	size_t len;
	if (st_ord_term(rt->ctx->txn, rt->fi, ord, &t, &len)) {
		cm_error_set(&rt->root->err, CM_ECORRUPT, "could not read term of [%s]",
		             rt->spec->field);
		return ORD_REJECT;
	}
	if (rt->fi->type == ST_FT_IP && len == ST_IP_LEN
	        ? terms_filtered(rt->spec->p) && !terms_accept_typed(rt->spec->p, ST_FT_IP, 0, t)
	        : !terms_accept(rt->spec->p, (const char *)t, len))
		return ORD_REJECT;
	bkt *b = terms_bucket_str(s, rt->spec, t, len);
	return (uint32_t)(b - s->t.v) + 1;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static bool order_is_count_desc(const terms_params *p);

/* Ascending. The few dozen a terms agg most often sorts (its top
 * shard_size) by insertion: qsort's calls of a compare function and its
 * setup cost several times as much for so few. */
static void
sort_u64(uint64_t *v, size_t n)
{
	if (n > 32) {
		qsort(v, n, sizeof *v, cmp_u64);
		return;
	}
	for (size_t i = 1; i < n; i++) {
		uint64_t x = v[i];
		size_t j = i;
		for (; j > 0 && v[j - 1] > x; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
}

/* The best k of (ordinal, count) pairs by count descending, then ordinal
 * ascending, in a heap of ranks count << 32 | ~ordinal: one integer compare
 * orders two pairs, and the root is the worst kept. Most pairs of a
 * selective filter on a field of many terms count 1 and fail the one
 * compare with the root, so keeping the top costs about a compare per
 * counted ordinal (sorting them all cost 20 or so calls of a compare
 * function each). Ordinals fit 32 bits: nords <= TERMS_ARRAY_MAX. */
typedef struct topk {
	uint64_t *h;
	size_t n, k;
	uint64_t other; /* counts of the pairs not kept */
} topk;

static void
topk_init(topk *t, size_t k)
{
	t->h = cm_malloc(AGG_MEM, (k ? k : 1) * sizeof *t->h);
	t->n = 0;
	t->k = k;
	t->other = 0;
}

static inline void
topk_add(topk *t, uint32_t ord, uint32_t count)
{
	uint64_t r = (uint64_t)count << 32 | (uint32_t)~ord, *h = t->h;
	size_t n = t->n;
	if (n < t->k) { /* sift up: parents are worse */
		size_t i = t->n++;
		for (; i > 0 && h[(i - 1) / 2] > r; i = (i - 1) / 2)
			h[i] = h[(i - 1) / 2];
		h[i] = r;
		return;
	}
	if (n == 0 || r <= h[0]) {
		t->other += count;
		return;
	}
	t->other += h[0] >> 32;
	for (size_t i = 0;;) { /* sift down from the root */
		size_t l = 2 * i + 1, w = l;
		if (l >= n) {
			h[i] = r;
			break;
		}
		if (l + 1 < n && h[l + 1] < h[l])
			w = l + 1;
		if (h[w] >= r) {
			h[i] = r;
			break;
		}
		h[i] = h[w];
		i = w;
	}
}

/* The kept pairs as ordinal << 32 | count, in ordinal order as a scan of
 * the ordinals would make buckets; returns how many. */
static size_t
topk_by_ordinal(topk *t)
{
	for (size_t i = 0; i < t->n; i++)
		t->h[i] = (uint64_t)(uint32_t)~t->h[i] << 32 | (t->h[i] >> 32);
	sort_u64(t->h, t->n);
	return t->n;
}

static void
sparse_init(terms_state *s)
{
	s->hcap = 64;
	s->hn = 0;
	s->ht = cm_calloc(AGG_MEM, s->hcap, sizeof *s->ht);
	s->hl = cm_malloc(AGG_MEM, (s->hcap / 2 + 1) * sizeof *s->hl);
}

/* The table past half full (hn = hcap / 2 + 1, which hl has room for):
 * past 1 ordinal in 16 of the segment's, the counts move to the array,
 * else the table grows. Apart from sparse_add, which runs per value and
 * is inlined in the collector's loop. */
static void
sparse_grow(terms_state *s)
{
	if (s->hn > s->nords / 16) {
		s->counts = cm_calloc(AGG_MEM, s->nords, sizeof *s->counts);
		for (size_t k = 0; k < s->hn; k++)
			s->counts[s->hl[k] >> 32] = (uint32_t)s->hl[k];
		cm_free(AGG_MEM, s->ht);
		cm_free(AGG_MEM, s->hl);
		s->ht = s->hl = NULL;
		s->hn = s->hcap = 0;
		return;
	}
	/* Four times the size: each ordinal is placed again a third of a
	 * time on average rather than once (doubling), a placing costing
	 * about what counting did. */
	size_t cap = 4 * s->hcap, m = cap - 1;
	cm_free(AGG_MEM, s->ht);
	uint64_t *ht = s->ht = cm_calloc(AGG_MEM, cap, sizeof *ht);
	s->hl = cm_realloc(AGG_MEM, s->hl, (cap / 2 + 1) * sizeof *s->hl);
	s->hcap = cap;
	for (size_t k = 0; k < s->hn; k++) { /* distinct: no compare of keys */
		uint32_t key = (uint32_t)(s->hl[k] >> 32) + 1;
		size_t i = (key * 0x9E3779B1u) & m;
		while (ht[i])
			i = (i + 1) & m;
		ht[i] = (uint64_t)key << 32 | k;
	}
}

/* Counts ord in the table (which may move to the counts array). */
static inline void
sparse_add(terms_state *s, uint32_t ord)
{
	uint32_t key = ord + 1;
	uint64_t *ht = s->ht;
	size_t m = s->hcap - 1, i = (key * 0x9E3779B1u) & m;
	for (; ht[i]; i = (i + 1) & m)
		if ((uint32_t)(ht[i] >> 32) == key) {
			s->hl[(uint32_t)ht[i]]++;
			return;
		}
	ht[i] = (uint64_t)key << 32 | s->hn;
	s->hl[s->hn] = (uint64_t)ord << 32 | 1;
	if (++s->hn > s->nords / 16 || 2 * s->hn > s->hcap)
		sparse_grow(s);
}

static void
terms_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	terms_state *s = n->d;
	const sr_agg *a = rt->spec;
	const terms_params *p = a->p;
	grp gs = {NULL, 0, 0};
	grp *g = a->nsubs ? &gs : NULL;
	if (rt->is_keyword) {
		size_t nords = rt->fi->num_terms;
		bool fast = !a->nsubs && !terms_filtered(p) && nords <= TERMS_ARRAY_MAX;
		bool arr = nords <= TERMS_ARRAY_MAX;
		if (n->epoch != rt->epoch) {
			agg_mark_dirty(rt, n);
			s->nords = nords;
			s->fast = fast;
			if (fast && (p->min_doc_count == 0 || nords < 1024))
				s->counts = cm_calloc(AGG_MEM, nords ? nords : 1, sizeof *s->counts);
			else if (fast)
				sparse_init(s);
			else if (arr)
				s->ord2b = cm_calloc(AGG_MEM, nords ? nords : 1, sizeof *s->ord2b);
		}
		if (fast && (s->counts || s->ht) && !a->missing.set && rt->conv == CONV_NONE && rt->fi) {
			/* counting ordinals: a window's values in one call per
			 * block, the odd doc of several values on its own */
			int64_t vb[1024];
			size_t i = 0;
			while (i < cnt) {
				/* with the array, straight from the packed block into the
				 * counts (a values array between them cost a third of
				 * counting a dense filter's docs) */
				bool direct = s->counts != NULL;
				size_t m = cnt - i < 1024 || direct ? cnt - i : 1024;
				int k;
				if (direct)
					k = st_col_count_one(rt->ctx->txn, rt->fi, &rt->cb,
					                     docs + i, m, s->counts, nords);
				else
					k = st_col_values_one(rt->ctx->txn, rt->fi, &rt->cb,
					                      docs + i, m, vb);
				if (k < 0) {
					cm_error_set(&rt->root->err, CM_ECORRUPT, "could not read column [%s]",
					             a->field);
					return;
				}
				for (int j = 0; !direct && j < k; j++)
					if ((uint64_t)vb[j] < nords) {
						if (s->counts)
							s->counts[vb[j]]++;
						else /* may move to counts */
							sparse_add(s, (uint32_t)vb[j]);
					}
				i += (size_t)k;
				if ((size_t)k < m) {
					const int64_t *v;
					int nv = agg_values(rt, docs[i++], &v);
					for (int j = 0; j < nv; j++)
						if ((uint64_t)v[j] < nords) {
							if (s->counts)
								s->counts[v[j]]++;
							else
								sparse_add(s, (uint32_t)v[j]);
						}
				}
			}
			return;
		}
		for (size_t i = 0; i < cnt; i++) {
			const int64_t *v;
			int k = agg_values(rt, docs[i], &v);
			if (k == 0) {
				if (a->missing.set)
					terms_missing(rt, n, s, g, i);
				continue;
			}
			for (int j = 0; j < k; j++) {
				uint64_t ord = (uint64_t)v[j];
				if (ord >= nords)
					continue;
				if (fast) {
					if (s->counts)
						s->counts[ord]++;
					else
						sparse_add(s, (uint32_t)ord);
					continue;
				}
				uint32_t bi;
				if (arr) {
					bi = s->ord2b[ord];
					if (!bi)
						bi = s->ord2b[ord] = terms_resolve(rt, s, ord);
				} else
					bi = terms_resolve(rt, s, ord);
				if (bi == ORD_REJECT)
					continue;
				s->t.v[bi - 1].count++;
				if (g)
					grp_add(g, bi - 1, i);
			}
		}
		if (g)
			grp_flush(rt, g, &s->t, docs, scores);
		return;
	}
	if (p->min_doc_count == 0 && rt->fi)
		agg_mark_dirty(rt, n); /* the flush lists the segment's other values */
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		if (k == 0) {
			if (a->missing.set)
				terms_missing(rt, n, s, g, i);
			continue;
		}
		for (int j = 0; j < k; j++) {
			if (j > 0 && v[j] == v[j - 1])
				continue; /* a doc counts once per term */
			int64_t key = rt->is_double ? dbits(st_sortable_to_double(v[j])) : v[j];
			if (!terms_accept_num(p, key, rt->is_double, (int)rt->fi->type))
				continue;
			bkt *b = terms_bucket_num(s, a, key, rt->is_double);
			b->count++;
			if (g)
				grp_add(g, (size_t)(b - s->t.v), i);
		}
	}
	if (g)
		grp_flush(rt, g, &s->t, docs, scores);
}

/* min_doc_count 0 on a numeric, date or boolean field: every value of the
 * segment's live docs gets a bucket, matched or not (ES's numeric terms
 * fill the blanks from the doc values the same way). A block cache of its
 * own: the scan starts again from the first doc. */
static void
terms_fill_numeric(agg_rt *rt, terms_state *s)
{
	const sr_seg_ctx *ctx = rt->ctx;
	const sr_agg *a = rt->spec;
	uint32_t max = st_segment_max_doc(ctx->seg);
	st_colblock saved = rt->cb;
	memset(&rt->cb, 0, sizeof rt->cb);
	rt->cb.first_doc = UINT32_MAX;
	rt->cb.block = UINT32_MAX;
	for (uint32_t d = 0; d < max && !rt->root->err.code; d++) {
		if (ctx->live && !st_bit_get(ctx->live, d))
			continue;
		const int64_t *v;
		int k = agg_values(rt, d, &v);
		for (int j = 0; j < k; j++) {
			int64_t key = rt->is_double ? dbits(st_sortable_to_double(v[j])) : v[j];
			if (terms_accept_num(a->p, key, rt->is_double, (int)rt->fi->type))
				terms_bucket_num(s, a, key, rt->is_double);
		}
	}
	st_colblock_free(&rt->cb);
	rt->cb = saved;
}

static void
terms_flush(agg_rt *rt, agg_node *n)
{
	terms_state *s = n->d;
	const terms_params *p = rt->spec->p;
	bool top_only = s->t.n == 0 && p->norder == 1 && order_is_count_desc(p) &&
	                p->shard_min_doc_count <= 1 && p->min_doc_count <= 1 && rt->ctx->reader &&
	                st_reader_nsegments(rt->ctx->reader) == 1;
	if (s->fast && !s->counts) {
		/* few ordinals counted: those, in ordinal order as a scan would.
		 * The shard's only segment, ordered by count: only its top
		 * shard_size ordinals become buckets (terms_finish would cut the
		 * rest, into sum_other_doc_count, all the same), so only those
		 * are looked up in the dictionary. Ties go by ordinal, which is
		 * term order. Not with a min_doc_count above 1: a bucket cut for
		 * it does not count in sum_other_doc_count on one shard. */
		uint64_t *oc = s->hl;
		size_t n = s->hn;
		topk t = {NULL, 0, 0, 0};
		if (n > p->shard_size && top_only) {
			topk_init(&t, p->shard_size);
			for (size_t i = 0; i < n; i++)
				topk_add(&t, (uint32_t)(oc[i] >> 32), (uint32_t)oc[i]);
			s->other += t.other;
			n = topk_by_ordinal(&t);
			oc = t.h;
		} else
			sort_u64(oc, n);
		btab_reserve(&s->t, n);
		for (size_t i = 0; i < n; i++) {
			const uint8_t *t;
			size_t len;
			if (st_ord_term(rt->ctx->txn, rt->fi, oc[i] >> 32, &t, &len)) {
				cm_error_set(&rt->root->err, CM_ECORRUPT, "could not read term of [%s]",
				             rt->spec->field);
				break;
			}
			terms_bucket_str(s, rt->spec, t, len)->count += (uint32_t)oc[i];
		}
		cm_free(AGG_MEM, t.h); /* hl goes below */
	} else if (s->counts && p->min_doc_count >= 1 && top_only && p->shard_size > 0) {
		/* The shard's only segment, by count: its top shard_size
		 * ordinals (ties by ordinal) become buckets, the rest go to
		 * sum_other_doc_count, as the sparse path above; a heap keeps
		 * them, so 100,000 counted ordinals are not sorted nor looked up. */
		topk t;
		/* a heap no larger than the ordinals: shard_size may be "all"
		 * (UINT64_MAX: significant_terms, rare_terms) */
		topk_init(&t, p->shard_size < s->nords ? (size_t)p->shard_size : s->nords);
		for (size_t o = 0; o < s->nords; o++)
			if (s->counts[o])
				topk_add(&t, (uint32_t)o, s->counts[o]);
		s->other += t.other;
		size_t nh = topk_by_ordinal(&t);
		btab_reserve(&s->t, nh);
		for (size_t i = 0; i < nh; i++) {
			const uint8_t *t8;
			size_t len;
			if (st_ord_term(rt->ctx->txn, rt->fi, t.h[i] >> 32, &t8, &len)) {
				cm_error_set(&rt->root->err, CM_ECORRUPT, "could not read term of [%s]",
				             rt->spec->field);
				break;
			}
			terms_bucket_str(s, rt->spec, t8, len)->count += (uint32_t)t.h[i];
		}
		cm_free(AGG_MEM, t.h);
	} else if (s->counts) {
		for (size_t o = 0; o < s->nords; o++) {
			if (!s->counts[o] && p->min_doc_count > 0)
				continue;
			const uint8_t *t;
			size_t len;
			if (st_ord_term(rt->ctx->txn, rt->fi, o, &t, &len)) {
				cm_error_set(&rt->root->err, CM_ECORRUPT, "could not read term of [%s]",
				             rt->spec->field);
				break;
			}
			bkt *b = terms_bucket_str(s, rt->spec, t, len);
			b->count += s->counts[o];
		}
	} else if (p->min_doc_count == 0 && rt->fi && rt->is_keyword) {
		/* min_doc_count 0: every term of the field shows, even unmatched */
		if (!s->nords)
			s->nords = rt->fi->num_terms;
		for (size_t o = 0; o < s->nords; o++)
			if (!s->ord2b || !s->ord2b[o])
				terms_resolve(rt, s, o);
	} else if (p->min_doc_count == 0 && rt->fi && !rt->is_keyword) {
		terms_fill_numeric(rt, s);
	}
	cm_free(AGG_MEM, s->counts);
	cm_free(AGG_MEM, s->ord2b);
	cm_free(AGG_MEM, s->ht);
	cm_free(AGG_MEM, s->hl);
	s->counts = NULL;
	s->ord2b = NULL;
	s->ht = s->hl = NULL;
	s->hn = s->hcap = 0;
	s->fast = false;
	s->nords = 0;
}

/* A regular expression filters strings only: on an address, a number, a
 * date or a boolean ES refuses it (exact values select those). t is the
 * field's st_field_type, -1 when unmapped. */
static cm_err
terms_regex_check(const sr_agg *a, int t, cm_error *err)
{
	const terms_params *p = a->p;
	if (!(p->inc.has_re || p->exc.has_re) || t < 0 || t == ST_FT_OBJECT)
		return CM_OK;
	if (t == ST_FT_IP)
		return cm_error_set(err, CM_EAGGEXEC,
		                    "Aggregation [%s] cannot support regular expression style "
		                    "include/exclude settings as they can only be applied to "
		                    "string fields. Use an array of values for include/exclude "
		                    "clauses",
		                    a->name);
	if (!st_field_type_is_ordinal((st_field_type)t) && t != ST_FT_TEXT)
		return cm_error_set(err, CM_EAGGEXEC,
		                    "Aggregation [%s] cannot support regular expression style "
		                    "include/exclude settings as they can only be applied to "
		                    "string fields. Use an array of numeric values for "
		                    "include/exclude clauses used to filter numeric fields",
		                    a->name);
	return CM_OK;
}

static cm_err
terms_seg_begin(agg_rt *rt, cm_error *err)
{
	/* the mapping's type: a segment without the field refuses it too */
	const st_mapping *m = rt->ctx ? st_reader_mapping(rt->ctx->reader) : NULL;
	const st_field_def *d = m ? st_mapping_find(m, rt->spec->field) : NULL;
	int t = rt->fi ? (int)rt->fi->type : d ? (int)d->type : -1;
	return terms_regex_check(rt->spec, t, err);
}

/* The same per shard, before any segment: a shard without documents
 * refuses it as ES does. */
static cm_err
terms_shard_check(const sr_agg *a, const st_mapping *m, cm_error *err)
{
	const st_field_def *d = m && a->field ? st_mapping_find(m, a->field) : NULL;
	return terms_regex_check(a, d ? (int)d->type : -1, err);
}

/* A top-level terms agg with min_doc_count 0 lists the terms of segments
 * where nothing matched too (ES reads them from the field's dictionary). */
void
agg_terms_touch(agg_rt *rt, agg_node *n)
{
	const terms_params *p = rt->spec->p;
	if (p->min_doc_count == 0 && rt->fi && n->epoch != rt->epoch) {
		/* nothing collected may have told the node its field's type */
		if (n->ftype < 0)
			n->ftype = rt->fi->type == ST_FT_UNSIGNED_LONG ? ST_FT_UNSIGNED_LONG
			                                               : agg_ftype(rt->fi->type);
		agg_mark_dirty(rt, n);
	}
}

/* ---- ordering ---- */

typedef struct terms_cmp_ctx {
	const sr_agg *a;
	const terms_params *p;
	uint8_t key_kind;
} terms_cmp_ctx;

static int
key_cmp(uint8_t kind, const bkt *x, const bkt *y)
{
	if (x->key && y->key) {
		size_t m = x->klen < y->klen ? x->klen : y->klen;
		int c = memcmp(x->key, y->key, m);
		return c ? c : (x->klen > y->klen) - (x->klen < y->klen);
	}
	if (kind == 3) {
		double a, b;
		memcpy(&a, &x->l, 8);
		memcpy(&b, &y->l, 8);
		return (a > b) - (a < b);
	}
	return (x->l > y->l) - (x->l < y->l);
}

static int
terms_cmp(const void *vctx, const bkt *x, const bkt *y)
{
	const terms_cmp_ctx *ctx = vctx;
	for (size_t i = 0; i < ctx->p->norder; i++) {
		const ord_key *o = &ctx->p->order[i];
		int c = 0;
		if (o->kind == ORD_COUNT)
			c = (x->count > y->count) - (x->count < y->count);
		else if (o->kind == ORD_KEY)
			c = key_cmp(ctx->key_kind, x, y);
		else {
			double a = NAN, b = NAN;
			agg_subs_value(ctx->a, x->subs, o->path, &a);
			agg_subs_value(ctx->a, y->subs, o->path, &b);
			/* NaN (empty avg) sorts last either way, as in ES */
			if (a != a || b != b)
				c = (a != a) == (b != b) ? 0 : (a != a) ? (o->desc ? -1 : 1) : (o->desc ? 1 : -1);
			else
				c = (a > b) - (a < b);
		}
		if (c)
			return o->desc ? -c : c;
	}
	return key_cmp(ctx->key_kind, x, y);
}

static bool
order_is_count_desc(const terms_params *p)
{
	return p->order[0].kind == ORD_COUNT && p->order[0].desc;
}

static bool
order_is_key(const terms_params *p)
{
	return p->order[0].kind == ORD_KEY;
}

/* "worse" heap on top: the root is the bucket that sorts last */
static void
heap_down(bkt **h, size_t n, size_t i, const terms_cmp_ctx *ctx)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && terms_cmp(ctx, h[l], h[m]) > 0)
			m = l;
		if (r < n && terms_cmp(ctx, h[r], h[m]) > 0)
			m = r;
		if (m == i)
			return;
		bkt *t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

/* The first `limit` buckets with count >= min in order; *n gets how many,
 * *rest the summed doc counts of qualifying buckets left out. Selection
 * with a bounded heap keeps a 10-bucket answer over 100k terms cheap. */
static bkt **
terms_sorted(const sr_agg *a, const terms_state *s, uint64_t min, uint64_t max, uint64_t limit,
             size_t *n, uint64_t *rest)
{
	terms_cmp_ctx ctx = {a, a->p, s->key_kind};
	size_t cap = s->t.n < limit ? s->t.n : (size_t)limit;
	bkt **v = cm_malloc(AGG_MEM, (cap ? cap : 1) * sizeof *v);
	size_t k = 0;
	uint64_t total = 0, kept = 0;
	for (size_t i = 0; i < s->t.n; i++) {
		bkt *b = &s->t.v[i];
		if (b->count < min || b->count > max)
			continue;
		total += b->count;
		if (cap == 0)
			continue;
		if (k < cap) {
			v[k++] = b;
			if (k == cap)
				for (size_t j = k / 2; j-- > 0;)
					heap_down(v, k, j, &ctx);
		} else if (terms_cmp(&ctx, b, v[0]) < 0) {
			v[0] = b;
			heap_down(v, k, 0, &ctx);
		}
	}
	bsort(v, k, terms_cmp, &ctx);
	for (size_t i = 0; i < k; i++)
		kept += v[i]->count;
	*n = k;
	*rest = total - kept;
	return v;
}

/* The shard-level cut to shard_size, and this shard's contribution to the
 * error bound (InternalTerms.reduce in ES 7.10). */
static void
terms_finish(const sr_agg *a, agg_node *n)
{
	terms_state *s = n->d;
	const terms_params *p = a->p;
	if (s->nshards == 0) {
		size_t keep;
		uint64_t rest;
		bkt **v = terms_sorted(a, s, p->shard_min_doc_count, UINT64_MAX, p->shard_size, &keep,
		                       &rest);
		btab nt;
		memset(&nt, 0, sizeof nt);
		for (size_t i = 0; i < keep; i++) {
			size_t len;
			const void *key = bkt_keyp(v[i], &len);
			bkt *b = btab_get(&nt, NULL, key, len, v[i]->key != NULL, NULL);
			b->count = v[i]->count;
			b->subs = v[i]->subs;
			v[i]->subs = NULL;
		}
		s->other += rest;
		int64_t e;
		if (keep < p->shard_size || order_is_key(p))
			e = 0;
		else if (order_is_count_desc(p))
			e = keep ? (int64_t)v[keep - 1]->count : 0;
		else
			e = -1;
		cm_free(AGG_MEM, v);
		btab_free(&s->t, a);
		s->t = nt;
		s->err_sum = e;
		s->nshards = 1;
	}
	for (size_t i = 0; i < s->t.n; i++)
		agg_subs_shard_finish(a, s->t.v[i].subs);
}

/* Rekeys a state of long keys by their double values (ES: when a field is
 * long in one index and double in another, the shards' terms reduce as
 * doubles, so 1 and 1.0 are one bucket). Distinct longs past 2^53 may
 * meet on one double: their buckets merge. */
static void
terms_as_doubles(const sr_agg *a, agg_node *n)
{
	terms_state *s = n->d;
	btab nt;
	memset(&nt, 0, sizeof nt);
	for (size_t i = 0; i < s->t.n; i++) {
		bkt *ob = &s->t.v[i];
		if (ob->key) { /* a string "missing" beside numbers: kept as is */
			bool created = false;
			bkt *b = btab_get(&nt, NULL, ob->key, ob->klen, true, &created);
			b->count += ob->count;
			if (created) {
				b->subs = ob->subs;
				ob->subs = NULL;
			}
			continue;
		}
		double d = n->ftype == ST_FT_UNSIGNED_LONG ? (double)st_col_to_ulong(ob->l)
		                                           : (double)ob->l;
		bool created = false;
		bkt *b = btab_get_l(&nt, NULL, dbits(d), &created);
		b->count += ob->count;
		if (created) {
			b->subs = ob->subs;
			ob->subs = NULL;
		} else if (b->subs && ob->subs)
			agg_subs_merge(a, b->subs, ob->subs);
	}
	btab_free(&s->t, a);
	s->t = nt;
	s->key_kind = 3;
	n->ftype = ST_FT_DOUBLE;
}

/* A shard where the field is unmapped counted "missing" as text; where
 * another shard maps the field as a date or an address, that text joins
 * the typed keys (the millis, the 16 bytes), as if the value had been
 * read as the field reads it. Text that does not parse stays text. */
static void
terms_rekey_text(const sr_agg *a, agg_node *n, int ftype)
{
	terms_state *s = n->d;
	if (ftype == ST_FT_DATE && s->key_kind != 1)
		return;
	bool any = false;
	for (size_t i = 0; i < s->t.n && !any; i++) {
		const bkt *b = &s->t.v[i];
		any = b->key && (ftype == ST_FT_DATE || b->klen != ST_IP_LEN);
	}
	if (!any)
		return;
	btab nt;
	memset(&nt, 0, sizeof nt);
	bool numeric = false;
	for (size_t i = 0; i < s->t.n; i++) {
		bkt *ob = &s->t.v[i];
		char txt[128];
		int64_t l;
		uint8_t ip[ST_IP_LEN];
		bool created = false;
		bkt *b = NULL;
		if (ob->key && ob->klen < sizeof txt &&
		    (ftype == ST_FT_DATE || ob->klen != ST_IP_LEN)) {
			memcpy(txt, ob->key, ob->klen);
			txt[ob->klen] = 0;
			if (ftype == ST_FT_DATE && agg_date_parse(txt, a->format, NULL, false, &l)) {
				b = btab_get_l(&nt, NULL, l, &created);
				numeric = true;
			} else if (ftype == ST_FT_IP && st_ip_parse(txt, ob->klen, ip))
				b = btab_get(&nt, NULL, ip, ST_IP_LEN, true, &created);
		}
		if (!b) {
			size_t len;
			const void *k = bkt_keyp(ob, &len);
			b = btab_get(&nt, NULL, k, len, ob->key != NULL, &created);
		}
		b->count += ob->count;
		if (created) {
			b->subs = ob->subs;
			ob->subs = NULL;
		} else if (b->subs && ob->subs)
			agg_subs_merge(a, b->subs, ob->subs);
	}
	btab_free(&s->t, a);
	s->t = nt;
	if (numeric)
		s->key_kind = 2;
	n->ftype = ftype;
}

static void
terms_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	terms_state *x = into->d, *y = from->d;
	int ft = from->ftype >= 0 ? from->ftype : into->ftype;
	if (ft == ST_FT_DATE || ft == ST_FT_IP) {
		terms_rekey_text(a, into, ft);
		terms_rekey_text(a, from, ft);
	}
	if (x->key_kind == 2 && y->key_kind == 3)
		terms_as_doubles(a, into);
	else if (x->key_kind == 3 && y->key_kind == 2)
		terms_as_doubles(a, from);
	if (!x->key_kind)
		x->key_kind = y->key_kind;
	if (x->key_kind == 3 && from->ftype == ST_FT_DOUBLE)
		into->ftype = ST_FT_DOUBLE;
	x->other += y->other;
	x->err_sum = (x->err_sum < 0 || y->err_sum < 0) ? -1 : x->err_sum + y->err_sum;
	x->nshards += y->nshards;
	btab_merge(&x->t, &y->t, a);
	y->nshards = 0;
	y->other = 0;
	y->err_sum = 0;
}

const char *
agg_terms_type_name(const sr_agg *a, const agg_node *n)
{
	const terms_state *s = n->d;
	int kind = s->key_kind;
	if (!kind && n->ftype >= 0) /* no bucket: the field's type decides */
		kind = st_field_type_is_ordinal((st_field_type)n->ftype)  ? 1
		       : st_field_type_is_double((st_field_type)n->ftype) ? 3
		                                                          : 2;
	static const char *const names[3][4] = {
	    {"umterms", "sterms", "lterms", "dterms"},
	    {"umrareterms", "srareterms", "lrareterms", "lrareterms"},
	    {"umsigterms", "sigsterms", "siglterms", "siglterms"},
	};
	int fam = a->kind == AGG_RARE_TERMS ? 1 : a->kind == AGG_SIGNIFICANT_TERMS ? 2 : 0;
	if (fam == 0 && kind == 2 && n->ftype == ST_FT_UNSIGNED_LONG)
		return "ulterms";
	return names[fam][kind];
}

/* key text for keyed output and key_as_string */
static void
terms_key_string(const sr_agg *a, const agg_node *n, uint8_t kind, const bkt *b, char *buf,
                 size_t cap)
{
	if (b->key && n->ftype == ST_FT_IP && b->klen == ST_IP_LEN) {
		st_ip_format(b->key, buf, cap);
		return;
	}
	if (b->key) {
		snprintf(buf, cap, "%.*s", (int)b->klen, (const char *)b->key);
		return;
	}
	if (kind == 3) {
		double d;
		memcpy(&d, &b->l, 8);
		agg_double_str(buf, cap, d);
		return;
	}
	if (n->ftype == ST_FT_UNSIGNED_LONG)
		snprintf(buf, cap, "%llu", (unsigned long long)st_col_to_ulong(b->l));
	else if (n->ftype == ST_FT_DATE)
		agg_date_format(NULL, a->format, b->l, buf, cap);
	else if (n->ftype == ST_FT_BOOLEAN)
		snprintf(buf, cap, "%s", b->l ? "true" : "false");
	else
		snprintf(buf, cap, "%lld", (long long)b->l);
}

static cm_err
terms_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const terms_state *s = n->d;
	const terms_params *p = a->p;
	cm_buf *b = r->out;
	size_t keep;
	uint64_t rest;
	bkt **v = terms_sorted(a, s, p->min_doc_count, p->rare ? p->max_doc_count : UINT64_MAX,
	                       p->size, &keep, &rest);
	uint64_t other = s->other + rest;
	int64_t e = s->nshards <= 1 ? 0 : s->err_sum;
	if (count_buckets(r, keep)) {
		cm_free(AGG_MEM, v);
		return CM_ELIMIT;
	}
	if (p->rare)
		cm_buf_put(b, "{\"buckets\":[", 12);
	else
		cm_buf_printf(b, "{\"doc_count_error_upper_bound\":%lld,\"sum_other_doc_count\":%llu,"
		                 "\"buckets\":[",
		              (long long)e, (unsigned long long)other);
	cm_err rc = CM_OK;
	for (size_t i = 0; i < keep && !rc; i++) {
		const bkt *bk = v[i];
		if (i)
			cm_buf_put_u8(b, ',');
		cm_buf_put(b, "{\"key\":", 7);
		if (bk->key && n->ftype == ST_FT_IP && bk->klen == ST_IP_LEN) {
			char ip[ST_IP_STRLEN];
			st_ip_format(bk->key, ip, sizeof ip);
			agg_json_str(b, ip, strlen(ip));
		} else if (bk->key)
			agg_json_str(b, (const char *)bk->key, bk->klen);
		else if (s->key_kind == 3) {
			double d;
			memcpy(&d, &bk->l, 8);
			agg_json_double(b, d);
		} else if (n->ftype == ST_FT_UNSIGNED_LONG)
			cm_buf_printf(b, "%llu", (unsigned long long)st_col_to_ulong(bk->l));
		else
			cm_buf_printf(b, "%lld", (long long)bk->l);
		char ks[256];
		if (!bk->key && (n->ftype == ST_FT_DATE || n->ftype == ST_FT_BOOLEAN)) {
			terms_key_string(a, n, s->key_kind, bk, ks, sizeof ks);
			cm_buf_put(b, ",\"key_as_string\":", 17);
			agg_json_str(b, ks, strlen(ks));
		} else if (!bk->key && a->format && n->ftype != ST_FT_UNSIGNED_LONG) {
			double d = (double)bk->l;
			if (s->key_kind == 3)
				memcpy(&d, &bk->l, 8);
			if (agg_decimal_format(a->format, d, ks, sizeof ks)) {
				cm_buf_put(b, ",\"key_as_string\":", 17);
				agg_json_str(b, ks, strlen(ks));
			}
		}
		cm_buf_printf(b, ",\"doc_count\":%llu", (unsigned long long)bk->count);
		rc = agg_subs_render(a, bk->subs, r);
		cm_buf_put_u8(b, '}');
	}
	cm_buf_put(b, "]}", 2);
	cm_free(AGG_MEM, v);
	return rc;
}

static void
terms_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const terms_state *s = n->d;
	cm_buf_put_u8(b, s->key_kind);
	cm_buf_put_varint(b, s->other);
	cm_buf_put_u64(b, (uint64_t)s->err_sum);
	cm_buf_put_varint(b, s->nshards);
	btab_encode(&s->t, a, b);
}

static bool
terms_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	terms_state *s = n->d;
	uint64_t e, ns;
	if (!cm_rd_u8(r, &s->key_kind) || s->key_kind > 3 || !cm_rd_varint(r, &s->other) ||
	    !cm_rd_u64(r, &e) || !cm_rd_varint(r, &ns) || ns > UINT32_MAX)
		return false;
	s->err_sum = (int64_t)e;
	s->nshards = (uint32_t)ns;
	return btab_decode(&s->t, a, r);
}

const agg_ops agg_ops_terms = {
    .name = "terms",
    .known = "field,missing,format,value_type,script,size,shard_size,min_doc_count,"
             "shard_min_doc_count,execution_hint,include,exclude,order,collect_mode,"
             "show_term_doc_count_error",
    .bucket = true,
    .needs_field = true,
    .shard_check = terms_shard_check,
    .parse = terms_parse,
    .free_params = terms_free_params,
    .state_new = terms_new,
    .state_free = terms_free,
    .seg_begin = terms_seg_begin,
    .collect = terms_collect,
    .seg_flush = terms_flush,
    .shard_finish = terms_finish,
    .merge = terms_merge,
    .render = terms_render,
    .encode = terms_encode,
    .decode = terms_decode,
};

const agg_ops agg_ops_rare_terms = {
    .name = "rare_terms",
    .bucket = true,
    .needs_field = true,
    .shard_check = terms_shard_check,
    .parse = rare_parse,
    .free_params = terms_free_params,
    .state_new = terms_new,
    .state_free = terms_free,
    .seg_begin = terms_seg_begin,
    .collect = terms_collect,
    .seg_flush = terms_flush,
    .shard_finish = terms_finish,
    .merge = terms_merge,
    .render = terms_render,
    .encode = terms_encode,
    .decode = terms_decode,
};

/* ================================================================ significant_terms */

/* A terms aggregation whose buckets are scored against the whole shard
 * (JLH, ES's default heuristic): foreground counts are collected as for
 * terms, with every term kept on the shard; each segment's live docs are
 * counted per term once per search (the background, in rt->persist); at
 * the shard cut every bucket takes its term's background count, so a
 * merged bucket sums the background of the shards that saw the term in
 * their foreground, as in ES. */
typedef struct sig_bg {
	btab t;
	uint64_t docs;
} sig_bg;

static cm_err
sig_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	cJSON *rest = cJSON_CreateObject();
	cm_err rc = CM_OK;
	bool min_set = false;
	for (const cJSON *c = body->child; c && !rc; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "jlh")) {
			if (!cJSON_IsObject(c) || c->child)
				rc = cm_error_set(err, CM_EPARSE, "[jlh] takes no parameters");
		} else if (!strcmp(k, "background_filter") || !strcmp(k, "mutual_information") ||
		           !strcmp(k, "chi_square") || !strcmp(k, "gnd") || !strcmp(k, "percentage") ||
		           !strcmp(k, "script_heuristic"))
			rc = cm_error_set(err, CM_EINVAL,
			                  "[%s] of significant_terms [%s] is not supported by Shoal (JLH "
			                  "against the whole index only)",
			                  k, a->name);
		else if (!strcmp(k, "field") || !strcmp(k, "missing") || !strcmp(k, "format") ||
		         !strcmp(k, "include") || !strcmp(k, "exclude") || !strcmp(k, "size") ||
		         !strcmp(k, "shard_size") || !strcmp(k, "min_doc_count") ||
		         !strcmp(k, "shard_min_doc_count") || !strcmp(k, "execution_hint")) {
			min_set |= !strcmp(k, "min_doc_count");
			cJSON_AddItemToObject(rest, k, cJSON_Duplicate(c, true));
		} else
			rc = agg_unknown_param(a, k, err);
	}
	if (!rc)
		rc = terms_parse(a, rest, err);
	cJSON_Delete(rest);
	if (rc)
		return rc;
	terms_params *p = a->p;
	if (!min_set)
		p->min_doc_count = 3;
	p->shard_size = UINT64_MAX; /* shards keep every foreground term */
	p->shard_min_doc_count = 0;
	return CM_OK;
}

/* Counts every live doc of the segment per term of the field. */
static cm_err
sig_seg_begin(agg_rt *rt, cm_error *err)
{
	if (terms_seg_begin(rt, err)) /* a regular expression on a non-string field */
		return err->code;
	sig_bg *bg = rt->persist;
	if (!bg)
		rt->persist = bg = cm_calloc(AGG_MEM, 1, sizeof *bg);
	const sr_seg_ctx *ctx = rt->ctx;
	uint32_t max = st_segment_max_doc(ctx->seg);
	uint32_t *counts = NULL;
	size_t nords = 0;
	if (rt->fi && rt->is_keyword) {
		nords = rt->fi->num_terms;
		if (nords > TERMS_ARRAY_MAX)
			return cm_error_set(err, CM_ELIMIT, "too many terms in [%s] for significant_terms",
			                    rt->spec->field);
		counts = cm_calloc(AGG_MEM, nords ? nords : 1, sizeof *counts);
	}
	/* a separate block cache: collection starts again from the first doc */
	st_colblock saved = rt->cb;
	memset(&rt->cb, 0, sizeof rt->cb);
	rt->cb.first_doc = UINT32_MAX;
	rt->cb.block = UINT32_MAX;
	for (uint32_t d = 0; d < max && !rt->root->err.code; d++) {
		if (ctx->live && !st_bit_get(ctx->live, d))
			continue;
		bg->docs++;
		if (!rt->fi)
			continue;
		const int64_t *v;
		int k = agg_values(rt, d, &v);
		for (int j = 0; j < k; j++) {
			if (j > 0 && v[j] == v[j - 1])
				continue;
			if (counts) {
				if ((uint64_t)v[j] < nords)
					counts[v[j]]++;
			} else {
				int64_t key = rt->is_double ? dbits(st_sortable_to_double(v[j])) : v[j];
				btab_get_l(&bg->t, NULL, key, NULL)->count++;
			}
		}
	}
	st_colblock_free(&rt->cb);
	rt->cb = saved;
	for (size_t o = 0; counts && o < nords; o++) {
		if (!counts[o])
			continue;
		const uint8_t *t;
		size_t len;
		if (st_ord_term(ctx->txn, rt->fi, o, &t, &len)) {
			cm_free(AGG_MEM, counts);
			return cm_error_set(err, CM_ECORRUPT, "could not read term of [%s]",
			                    rt->spec->field);
		}
		btab_get(&bg->t, NULL, t, len, true, NULL)->count += counts[o];
	}
	cm_free(AGG_MEM, counts);
	return rt->root->err.code;
}

static void
sig_rt_free(agg_rt *rt)
{
	sig_bg *bg = rt->persist;
	btab_free(&bg->t, NULL);
	cm_free(AGG_MEM, bg);
	rt->persist = NULL;
}

static void
sig_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	terms_state *s = n->d;
	s->subset += cnt;
	s->bg_rt = rt;
	terms_collect(rt, n, docs, scores, cnt);
}

static void
sig_finish(const sr_agg *a, agg_node *n)
{
	terms_state *s = n->d;
	terms_finish(a, n);
	const sig_bg *bg = s->bg_rt ? s->bg_rt->persist : NULL;
	s->bg_rt = NULL;
	if (!bg)
		return;
	s->superset = bg->docs;
	for (size_t i = 0; i < s->t.n; i++) {
		size_t len;
		const void *k = bkt_keyp(&s->t.v[i], &len);
		bool str = s->t.v[i].key != NULL;
		btab_get(&s->bg, NULL, k, len, str, NULL)->count = btab_count_of(&bg->t, k, len, str);
	}
}

static void
sig_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	terms_state *x = into->d, *y = from->d;
	x->subset += y->subset;
	x->superset += y->superset;
	btab_merge(&x->bg, &y->bg, NULL);
	terms_merge(a, into, from);
	y->subset = y->superset = 0;
}

static double
jlh(uint64_t fg, uint64_t fg_size, uint64_t bgc, uint64_t bg_size)
{
	if (!fg_size || !bg_size)
		return 0;
	if (!bgc)
		bgc = 1;
	double sub = (double)fg / (double)fg_size, sup = (double)bgc / (double)bg_size;
	double abs_change = sub - sup;
	if (abs_change <= 0)
		return 0;
	return abs_change * (sub / sup);
}

typedef struct sig_out {
	const bkt *b;
	uint64_t bg;
	double score;
} sig_out;

static int
sig_out_cmp(const void *x, const void *y)
{
	const sig_out *a = x, *b = y;
	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	size_t la, lb;
	const void *ka = bkt_keyp(a->b, &la), *kb = bkt_keyp(b->b, &lb);
	if (a->b->key && b->b->key) {
		int c = memcmp(ka, kb, la < lb ? la : lb);
		return c ? c : (la > lb) - (la < lb);
	}
	return (a->b->l > b->b->l) - (a->b->l < b->b->l);
}

static cm_err
sig_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const terms_state *s = n->d;
	const terms_params *p = a->p;
	/* a shard state rendered without its cut still reads the shard's table */
	const sig_bg *live = s->bg_rt ? s->bg_rt->persist : NULL;
	const btab *bgt = live ? &live->t : &s->bg;
	uint64_t superset = live ? live->docs : s->superset;
	sig_out *o = cm_calloc(AGG_MEM, s->t.n ? s->t.n : 1, sizeof *o);
	size_t m = 0;
	for (size_t i = 0; i < s->t.n; i++) {
		const bkt *b = &s->t.v[i];
		if (b->count < p->min_doc_count)
			continue;
		size_t len;
		const void *k = bkt_keyp(b, &len);
		uint64_t bgc = btab_count_of(bgt, k, len, b->key != NULL);
		if (bgc < b->count)
			bgc = b->count;
		double sc = jlh(b->count, s->subset, bgc, superset);
		if (sc <= 0)
			continue;
		o[m++] = (sig_out){b, bgc, sc};
	}
	qsort(o, m, sizeof *o, sig_out_cmp);
	if (m > p->size)
		m = (size_t)p->size;
	cm_err rc = count_buckets(r, m);
	cm_buf *b = r->out;
	if (!rc)
		cm_buf_printf(b, "{\"doc_count\":%llu,\"bg_count\":%llu,\"buckets\":[",
		              (unsigned long long)s->subset, (unsigned long long)superset);
	for (size_t i = 0; i < m && !rc; i++) {
		const bkt *bk = o[i].b;
		if (i)
			cm_buf_put_u8(b, ',');
		cm_buf_put(b, "{\"key\":", 7);
		if (bk->key && n->ftype == ST_FT_IP && bk->klen == ST_IP_LEN) {
			char ip[64]; /* the address as text, as terms gives it */
			st_ip_format(bk->key, ip, sizeof ip);
			agg_json_str(b, ip, strlen(ip));
		} else if (bk->key)
			agg_json_str(b, (const char *)bk->key, bk->klen);
		else if (s->key_kind == 3) {
			double d;
			memcpy(&d, &bk->l, 8);
			agg_json_double(b, d);
		} else
			cm_buf_printf(b, "%lld", (long long)bk->l);
		cm_buf_printf(b, ",\"doc_count\":%llu,\"score\":", (unsigned long long)bk->count);
		agg_json_double(b, o[i].score);
		cm_buf_printf(b, ",\"bg_count\":%llu", (unsigned long long)o[i].bg);
		rc = agg_subs_render(a, bk->subs, r);
		cm_buf_put_u8(b, '}');
	}
	if (!rc)
		cm_buf_put(b, "]}", 2);
	cm_free(AGG_MEM, o);
	return rc;
}

static void
sig_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const terms_state *s = n->d;
	terms_encode(a, n, b);
	cm_buf_put_varint(b, s->subset);
	cm_buf_put_varint(b, s->superset);
	cm_buf_put_varint(b, s->bg.n);
	for (size_t i = 0; i < s->bg.n; i++) {
		const bkt *k = &s->bg.v[i];
		cm_buf_put_u8(b, k->key != NULL);
		if (k->key)
			cm_buf_put_str(b, (const char *)k->key, k->klen);
		else
			cm_buf_put_u64(b, (uint64_t)k->l);
		cm_buf_put_varint(b, k->count);
	}
}

static bool
sig_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	terms_state *s = n->d;
	uint64_t nb;
	if (!terms_decode(a, n, r) || !cm_rd_varint(r, &s->subset) ||
	    !cm_rd_varint(r, &s->superset) || !agg_get_count(r, (uint64_t)SR_MAX_BUCKETS * 64, &nb))
		return false;
	for (uint64_t i = 0; i < nb; i++) {
		uint8_t str;
		const char *k;
		size_t len;
		uint64_t l, c;
		bool created = false;
		bkt *b;
		if (!cm_rd_u8(r, &str))
			return false;
		if (str) {
			if (!cm_rd_str(r, &k, &len))
				return false;
			b = btab_get(&s->bg, NULL, k, len, true, &created);
		} else {
			if (!cm_rd_u64(r, &l))
				return false;
			b = btab_get_l(&s->bg, NULL, (int64_t)l, &created);
		}
		if (!created || !cm_rd_varint(r, &c))
			return false;
		b->count = c;
	}
	return true;
}

const agg_ops agg_ops_significant_terms = {
    .name = "significant_terms",
    .known = "field,missing,format,value_type,script,size,shard_size,min_doc_count,"
             "shard_min_doc_count,execution_hint,include,exclude,background_filter,jlh,"
             "mutual_information,chi_square,gnd,percentage,script_heuristic",
    .bucket = true,
    .needs_field = true,
    .shard_check = terms_shard_check,
    .parse = sig_parse,
    .free_params = terms_free_params,
    .state_new = terms_new,
    .state_free = terms_free,
    .seg_begin = sig_seg_begin,
    .collect = sig_collect,
    .seg_flush = terms_flush,
    .shard_finish = sig_finish,
    .merge = sig_merge,
    .render = sig_render,
    .encode = sig_encode,
    .decode = sig_decode,
    .rt_free = sig_rt_free,
};

/* ================================================================ histogram family */

typedef enum {
	CAL_NONE,
	CAL_MINUTE,
	CAL_HOUR,
	CAL_DAY,
	CAL_WEEK,
	CAL_MONTH,
	CAL_QUARTER,
	CAL_YEAR
} cal_unit;

typedef struct hist_params {
	double interval, offset; /* histogram; date: fixed interval / offset in ms */
	cal_unit cal;            /* date_histogram calendar interval */
	uint64_t min_doc_count;
	bool keyed;
	bool has_bounds;
	double bmin, bmax;       /* extended_bounds (date: ms) */
	/* hard_bounds (date: ms): keys outside are not made; -inf/+inf when
	 * absent */
	double hmin, hmax;
	bool order_count, order_desc;
	agg_tz *tz;
} hist_params;

uint64_t
agg_hist_min_doc_count(const sr_agg *a)
{
	return ((const hist_params *)a->p)->min_doc_count;
}

static void
hist_free_params(void *pp)
{
	hist_params *p = pp;
	agg_tz_free(p->tz);
	cm_free(AGG_MEM, p);
}

static cm_err
hist_parse_order(sr_agg *a, hist_params *p, const cJSON *c, cm_error *err)
{
	const cJSON *o = cJSON_IsArray(c) ? c->child : c;
	if (!cJSON_IsObject(o) || !o->child || !cJSON_IsString(o->child))
		return cm_error_set(err, CM_EPARSE, "[order] must be an object in [%s]", a->name);
	const char *k = o->child->string, *dir = o->child->valuestring;
	if (strcmp(dir, "asc") && strcmp(dir, "desc"))
		return cm_error_set(err, CM_EPARSE, "Unknown order direction [%s]", dir);
	if (!strcmp(k, "_key") || !strcmp(k, "_time")) /* _time: ES 7's deprecated name */
		p->order_count = false;
	else if (!strcmp(k, "_count"))
		p->order_count = true;
	else
		return cm_error_set(err, CM_EINVAL, "histogram [order] supports _key and _count only");
	p->order_desc = !strcmp(dir, "desc");
	return CM_OK;
}

static cm_err
hist_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	hist_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->hmin = -INFINITY;
	p->hmax = INFINITY;
	bool has_interval = false;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "field") || !strcmp(k, "missing") || !strcmp(k, "format"))
			continue;
		if (!strcmp(k, "hard_bounds")) {
			const cJSON *mn = cJSON_GetObjectItemCaseSensitive(c, "min");
			const cJSON *mx = cJSON_GetObjectItemCaseSensitive(c, "max");
			if (!cJSON_IsObject(c) ||
			    (mn && agg_parse_num(mn, a->name, "min", &p->hmin, err)) ||
			    (mx && agg_parse_num(mx, a->name, "max", &p->hmax, err)))
				return cm_error_set(err, CM_EPARSE,
				                    "failed to parse [hard_bounds] of [%s]",
				                    a->name);
		} else if (!strcmp(k, "interval")) {
			if (agg_parse_num(c, a->name, k, &p->interval, err))
				return CM_EPARSE;
			if (!(p->interval > 0))
				return cm_error_set(err, CM_EINVAL,
				                    "[interval] must be >0 for histogram aggregation [%s]",
				                    a->name);
			has_interval = true;
		} else if (!strcmp(k, "offset")) {
			if (agg_parse_num(c, a->name, k, &p->offset, err))
				return CM_EPARSE;
		} else if (!strcmp(k, "min_doc_count")) {
			int64_t v;
			if (agg_parse_int(c, a->name, k, 0, INT64_MAX, &v, err))
				return cm_error_set(err, CM_EINVAL,
				                    "[min_doc_count] must be greater than or equal to 0.");
			p->min_doc_count = (uint64_t)v;
		} else if (!strcmp(k, "keyed")) {
			if (agg_parse_bool(c, a->name, k, &p->keyed, err))
				return CM_EPARSE;
		} else if (!strcmp(k, "extended_bounds")) {
			const cJSON *mn = cJSON_GetObjectItemCaseSensitive(c, "min");
			const cJSON *mx = cJSON_GetObjectItemCaseSensitive(c, "max");
			p->bmin = INFINITY;
			p->bmax = -INFINITY;
			if ((mn && agg_parse_num(mn, a->name, "min", &p->bmin, err)) ||
			    (mx && agg_parse_num(mx, a->name, "max", &p->bmax, err)))
				return CM_EPARSE;
			if (mn && mx && p->bmin > p->bmax)
				return cm_error_set(err, CM_EINVAL,
				                    "[extended_bounds.min][%g] cannot be greater than "
				                    "[extended_bounds.max][%g] for histogram aggregation [%s]",
				                    p->bmin, p->bmax, a->name);
			p->has_bounds = true;
		} else if (!strcmp(k, "order")) {
			if (hist_parse_order(a, p, c, err))
				return CM_EPARSE;
		} else
			return agg_unknown_param(a, k, err);
	}
	if (!has_interval)
		return cm_error_set(err, CM_EINVAL, "[interval] must be >0 for histogram aggregation [%s]",
		                    a->name);
	return CM_OK;
}

static bool
parse_cal_unit(const char *s, cal_unit *u)
{
	static const struct {
		const char *n;
		cal_unit u;
	} t[] = {{"minute", CAL_MINUTE}, {"1m", CAL_MINUTE},  {"hour", CAL_HOUR},
	         {"1h", CAL_HOUR},       {"day", CAL_DAY},    {"1d", CAL_DAY},
	         {"week", CAL_WEEK},     {"1w", CAL_WEEK},    {"month", CAL_MONTH},
	         {"1M", CAL_MONTH},      {"quarter", CAL_QUARTER}, {"1q", CAL_QUARTER},
	         {"year", CAL_YEAR},     {"1y", CAL_YEAR}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (!strcmp(t[i].n, s)) {
			*u = t[i].u;
			return true;
		}
	return false;
}

/* "30m", "2h", "7d", "500ms", "10s" → ms; false if malformed. */
static bool
parse_time_value(const char *s, double *ms)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || v < 0)
		return false;
	double mul;
	if (!strcmp(end, "ms"))
		mul = 1;
	else if (!strcmp(end, "s"))
		mul = 1000;
	else if (!strcmp(end, "m"))
		mul = 60000;
	else if (!strcmp(end, "h"))
		mul = 3600000;
	else if (!strcmp(end, "d"))
		mul = 86400000;
	else if (!strcmp(end, "nanos") || !strcmp(end, "micros"))
		return false;
	else
		return false;
	*ms = v * mul;
	return true;
}

static cm_err
dh_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	hist_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->hmin = -INFINITY;
	p->hmax = INFINITY;
	bool has_interval = false;
	const cJSON *bounds = NULL, *hard = NULL;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "field") || !strcmp(k, "missing") || !strcmp(k, "format"))
			continue;
		if (!strcmp(k, "calendar_interval") || !strcmp(k, "fixed_interval") ||
		    !strcmp(k, "interval")) {
			if (has_interval)
				return cm_error_set(err, CM_EINVAL,
				                    "Cannot use [%s] with another interval setting in [%s]",
				                    k, a->name);
			has_interval = true;
			if (!cJSON_IsString(c))
				return cm_error_set(err, CM_EPARSE, "[%s] must be a string", k);
			const char *s = c->valuestring;
			if (k[0] == 'c') {
				if (!parse_cal_unit(s, &p->cal))
					return cm_error_set(err, CM_EINVAL,
					                    "The supplied interval [%s] could not be parsed as a "
					                    "calendar interval.",
					                    s);
			} else if (k[0] == 'f') {
				if (!parse_time_value(s, &p->interval) || p->interval < 1)
					return cm_error_set(err, CM_EINVAL,
					                    "failed to parse setting [date_histogram.fixedInterval] "
					                    "with value [%s] as a time value: unit is missing or "
					                    "unrecognized",
					                    s);
				if (parse_cal_unit(s, &p->cal) && strchr("MqyW", s[strlen(s) - 1])) {
					p->cal = CAL_NONE;
					return cm_error_set(err, CM_EINVAL,
					                    "failed to parse setting [date_histogram.fixedInterval] "
					                    "with value [%s] as a time value: unit is missing or "
					                    "unrecognized",
					                    s);
				}
				p->cal = CAL_NONE;
			} else if (!parse_cal_unit(s, &p->cal)) {
				if (!parse_time_value(s, &p->interval) || p->interval < 1)
					return cm_error_set(err, CM_EINVAL,
					                    "Unable to parse interval [%s]", s);
			}
		} else if (!strcmp(k, "time_zone")) {
			if (!cJSON_IsString(c))
				return cm_error_set(err, CM_EPARSE, "[time_zone] must be a string");
			agg_tz_free(p->tz);
			p->tz = NULL;
			if (agg_tz_parse(c->valuestring, &p->tz, err))
				return CM_EINVAL;
		} else if (!strcmp(k, "offset")) {
			if (cJSON_IsNumber(c))
				p->offset = c->valuedouble;
			else if (cJSON_IsString(c)) {
				const char *s = c->valuestring;
				double sign = 1;
				if (*s == '+' || *s == '-')
					sign = *s++ == '-' ? -1 : 1;
				if (!parse_time_value(s, &p->offset))
					return cm_error_set(err, CM_EINVAL, "failed to parse [offset] [%s]",
					                    c->valuestring);
				p->offset *= sign;
			} else
				return cm_error_set(err, CM_EPARSE, "[offset] must be a string");
		} else if (!strcmp(k, "min_doc_count")) {
			int64_t v;
			if (agg_parse_int(c, a->name, k, 0, INT64_MAX, &v, err))
				return cm_error_set(err, CM_EINVAL,
				                    "[min_doc_count] must be greater than or equal to 0.");
			p->min_doc_count = (uint64_t)v;
		} else if (!strcmp(k, "keyed")) {
			if (agg_parse_bool(c, a->name, k, &p->keyed, err))
				return CM_EPARSE;
		} else if (!strcmp(k, "extended_bounds")) {
			bounds = c;
		} else if (!strcmp(k, "hard_bounds")) {
			hard = c;
		} else if (!strcmp(k, "order")) {
			if (hist_parse_order(a, p, c, err))
				return CM_EPARSE;
		} else
			return agg_unknown_param(a, k, err);
	}
	if (!has_interval)
		return cm_error_set(err, CM_EINVAL,
		                    "Invalid interval specified, must be non-null and non-empty");
	if (bounds) {
		p->bmin = INFINITY;
		p->bmax = -INFINITY;
		const cJSON *mn = cJSON_GetObjectItemCaseSensitive(bounds, "min");
		const cJSON *mx = cJSON_GetObjectItemCaseSensitive(bounds, "max");
		for (int i = 0; i < 2; i++) {
			const cJSON *v = i ? mx : mn;
			if (!v)
				continue;
			int64_t ms;
			if (cJSON_IsNumber(v))
				ms = (int64_t)v->valuedouble;
			else if (!cJSON_IsString(v) || /* ES parses both bounds rounding down */
			         !agg_date_parse(v->valuestring, a->format, p->tz, false, &ms))
				return cm_error_set(err, CM_EPARSE,
				                    "failed to parse [extended_bounds] of [%s]", a->name);
			if (i)
				p->bmax = (double)ms;
			else
				p->bmin = (double)ms;
		}
		p->has_bounds = true;
	}
	for (int i = 0; hard && i < 2; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(hard, i ? "max" : "min");
		int64_t ms;
		if (!v)
			continue;
		if (cJSON_IsNumber(v))
			ms = (int64_t)v->valuedouble;
		else if (!cJSON_IsString(v) ||
		         !agg_date_parse(v->valuestring, a->format, p->tz, false, &ms))
			return cm_error_set(err, CM_EPARSE, "failed to parse [hard_bounds] of [%s]",
			                    a->name);
		if (i)
			p->hmax = (double)ms;
		else
			p->hmin = (double)ms;
	}
	return CM_OK;
}

typedef struct hist_state {
	btab t;
	bool is_double; /* histogram values were doubles (key rendering is double anyway) */
} hist_state;

static void *
hist_new(const sr_agg *a)
{
	return cm_calloc(AGG_MEM, 1, sizeof(hist_state));
}

static void
hist_free(const sr_agg *a, void *d)
{
	hist_state *s = d;
	btab_free(&s->t, a);
	cm_free(AGG_MEM, s);
}

static int64_t
floordiv(int64_t a, int64_t b)
{
	int64_t q = a / b;
	if ((a % b != 0) && ((a < 0) != (b < 0)))
		q--;
	return q;
}

/* Histogram buckets are keyed by index floor((v - offset) / interval). */
static inline int64_t
hist_index(const hist_params *p, double v)
{
	double q = floor((v - p->offset) / p->interval);
	if (q < -9.2e18)
		return INT64_MIN;
	if (q > 9.2e18)
		return INT64_MAX;
	return (int64_t)q;
}

static inline double
hist_key(const hist_params *p, int64_t idx)
{
	return (double)idx * p->interval + p->offset;
}

/* ---- date rounding ---- */

static int64_t
cal_floor_local(cal_unit u, int64_t local)
{
	int64_t days = floordiv(local, 86400000);
	switch (u) {
	case CAL_MINUTE: return floordiv(local, 60000) * 60000;
	case CAL_HOUR: return floordiv(local, 3600000) * 3600000;
	case CAL_DAY: return days * 86400000;
	case CAL_WEEK: {
		int64_t dow = ((days + 3) % 7 + 7) % 7; /* 1970-01-01 was a Thursday; 0 = Monday */
		return (days - dow) * 86400000;
	}
	default: break;
	}
	int64_t y;
	unsigned m, d;
	agg_civil_from_days(days, &y, &m, &d);
	if (u == CAL_QUARTER)
		m = (m - 1) / 3 * 3 + 1;
	else if (u == CAL_YEAR)
		m = 1;
	return agg_days_from_civil(y, m, 1) * 86400000;
}

static int64_t
cal_next_local(cal_unit u, int64_t local_floor)
{
	switch (u) {
	case CAL_MINUTE: return local_floor + 60000;
	case CAL_HOUR: return local_floor + 3600000;
	case CAL_DAY: return local_floor + 86400000;
	case CAL_WEEK: return local_floor + 7 * 86400000LL;
	default: break;
	}
	int64_t y;
	unsigned m, d;
	agg_civil_from_days(floordiv(local_floor, 86400000), &y, &m, &d);
	unsigned add = u == CAL_MONTH ? 1 : u == CAL_QUARTER ? 3 : 12;
	int64_t mm = (int64_t)m - 1 + add;
	y += mm / 12;
	m = (unsigned)(mm % 12) + 1;
	return agg_days_from_civil(y, m, 1) * 86400000;
}

/* Offsets hold for long spans between DST changes: remember the last one
 * (per collect call; params are shared between threads). */
typedef struct tzc {
	int64_t lo, hi, off;
} tzc;

static inline int64_t
tz_off_c(const hist_params *p, tzc *c, int64_t utc)
{
	if (!p->tz)
		return 0;
	if (c && utc >= c->lo && utc < c->hi)
		return c->off;
	if (!c)
		return agg_tz_offset(p->tz, utc);
	c->off = agg_tz_offset_span(p->tz, utc, &c->lo, &c->hi);
	return c->off;
}

static inline int64_t
tz_off(const hist_params *p, int64_t utc)
{
	return p->tz ? agg_tz_offset(p->tz, utc) : 0;
}

static inline int64_t
tz_utc(const hist_params *p, int64_t local)
{
	return p->tz ? agg_tz_local_to_utc(p->tz, local) : local;
}

/* The bucket key (UTC ms) of instant t: rounded in local time, and mapped
 * back with t's own offset when that is consistent, so the repeated hour
 * of a DST fall-back gets its own bucket as in ES. */
static int64_t
dh_round_c(const hist_params *p, tzc *c, int64_t t)
{
	int64_t off = (int64_t)p->offset;
	int64_t x = t - off;
	int64_t ox = tz_off_c(p, c, x);
	int64_t local = x + ox;
	int64_t rl;
	if (p->cal != CAL_NONE)
		rl = cal_floor_local(p->cal, local);
	else
		rl = floordiv(local, (int64_t)p->interval) * (int64_t)p->interval;
	int64_t key = rl - ox;
	if (p->tz && (key > x || tz_off_c(p, c, key) != ox))
		key = tz_utc(p, rl);
	if (key > x) /* rl fell in a gap that ends after x: cannot happen, but stay sane */
		key = x;
	return key + off;
}

static int64_t
dh_round(const hist_params *p, int64_t t)
{
	return dh_round_c(p, NULL, t);
}

/* An extended bound's bucket: ES rounds the bound without the offset and
 * adds the offset after, so with "offset": "1h" a "min" of 2016-01-01
 * starts the buckets at 2016-01-01T01:00, not at 2015-12-31T01:00 (the
 * bucket that holds the instant). */
static int64_t
dh_round_bound(const hist_params *p, int64_t t)
{
	hist_params q = *p;
	q.offset = 0;
	return dh_round(&q, t) + (int64_t)p->offset;
}

static int64_t
dh_next(const hist_params *p, int64_t key)
{
	if (p->cal == CAL_NONE || p->cal == CAL_MINUTE || p->cal == CAL_HOUR) {
		int64_t step = p->cal == CAL_NONE ? (int64_t)p->interval
		               : p->cal == CAL_MINUTE ? 60000 : 3600000;
		int64_t t = key + step;
		for (int i = 0; i < 8; i++, t += step) {
			int64_t nk = dh_round(p, t);
			if (nk > key)
				return nk;
		}
		return key + step;
	}
	int64_t off = (int64_t)p->offset;
	int64_t x = key - off;
	int64_t local = x + tz_off(p, x);
	int64_t nl = cal_next_local(p->cal, cal_floor_local(p->cal, local));
	int64_t next = dh_round(p, tz_utc(p, nl) + off);
	if (next <= key)
		next = dh_round(p, tz_utc(p, nl) + off + 3 * 3600000);
	return next;
}

double
agg_hist_round_value(const sr_agg *h, double v)
{
	const hist_params *p = h->p;
	return hist_key(p, hist_index(p, v));
}

int64_t
agg_dh_round(const sr_agg *h, int64_t t)
{
	return dh_round(h->p, t);
}

const agg_tz *
agg_hist_tz(const sr_agg *h)
{
	return ((const hist_params *)h->p)->tz;
}

static cm_err
hist_seg_begin(agg_rt *rt, cm_error *err)
{
	if (st_field_type_is_range(rt->range_type))
		return CM_OK;
	return agg_field_numeric_or_fail(rt, err) ? CM_OK : CM_EINVAL;
}

/* Whether a bucket key (a date's key, a histogram's key value) is inside
 * the hard_bounds. */
static inline bool
hist_in_hard(const hist_params *p, bool date, int64_t key)
{
	double k = date ? (double)key : hist_key(p, key);
	return k >= p->hmin && k <= p->hmax;
}

/* Counts doc i in the bucket of key; false when the bucket guard trips. */
static bool
hist_count(agg_rt *rt, hist_state *s, grp *gs, int64_t key, size_t i)
{
	const sr_agg *a = rt->spec;
	bool created = false;
	bkt *b = btab_get_l(&s->t, a, key, &created);
	if (created && !agg_bucket_guard(rt->root, 1))
		return false;
	b->count++;
	if (a->nsubs)
		grp_add(gs, (size_t)(b - s->t.v), i);
	return true;
}

/* Dates far from now are clamped so that rounding cannot overflow
 * (about 73 million years either way). */
#define DH_RANGE_LIMIT ((int64_t)1 << 61)

/* A range field's doc: counted once in every bucket one of its ranges
 * overlaps, the ranges cut to the hard_bounds first (ES 7.10's range
 * histograms). Ranges come in lower-bound order, so keys at or below the
 * last one counted were counted for this doc already. False when the
 * bucket guard trips. */
static bool
hist_collect_ranges(agg_rt *rt, hist_state *s, grp *gs, tzc *cache, uint32_t doc, size_t i)
{
	const hist_params *p = rt->spec->p;
	bool date = rt->spec->kind == AGG_DATE_HISTOGRAM;
	bool dbl = rt->range_type == ST_FT_FLOAT_RANGE || rt->range_type == ST_FT_DOUBLE_RANGE;
	const int64_t *ords;
	int k = agg_values(rt, doc, &ords);
	bool counted = false;
	int64_t last = 0;
	for (int j = 0; j < k; j++) {
		const uint8_t *t;
		size_t tl;
		st_range_bound lo, hi;
		if (st_ord_term(rt->ctx->txn, rt->fi, (uint64_t)ords[j], &t, &tl) != CM_OK ||
		    !st_range_decode(rt->range_type, t, tl, &lo, &hi))
			continue;
		double from = dbl ? st_sortable_to_double(lo.i) : (double)lo.i;
		double to = dbl ? st_sortable_to_double(hi.i) : (double)hi.i;
		from = from > p->hmin ? from : p->hmin;
		to = to < p->hmax ? to : p->hmax;
		if (!(from <= to))
			continue;
		if (date) {
			double lim = (double)DH_RANGE_LIMIT;
			int64_t f = (int64_t)(from < -lim ? -lim : from > lim ? lim : from);
			int64_t e = (int64_t)(to < -lim ? -lim : to > lim ? lim : to);
			for (int64_t key = dh_round_c(p, cache, f); key <= e;
			     key = dh_next(p, key)) {
				if (counted && key <= last)
					continue;
				if (!hist_count(rt, s, gs, key, i))
					return false;
				counted = true;
				last = key;
			}
			continue;
		}
		int64_t a = hist_index(p, from), b = hist_index(p, to);
		if (counted && a <= last)
			a = last + 1;
		for (int64_t key = a; key <= b; key++) {
			if (!hist_count(rt, s, gs, key, i))
				return false;
			counted = true;
			last = key;
			if (key == b) /* b may be INT64_MAX */
				break;
		}
	}
	return true;
}

static void
hist_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	hist_state *s = n->d;
	const sr_agg *a = rt->spec;
	const hist_params *p = a->p;
	bool date = a->kind == AGG_DATE_HISTOGRAM;
	if (!rt->fi && !a->missing.set)
		return;
	if (rt->is_double)
		s->is_double = true;
	tzc cache = {0, 0, 0};
	grp gs = {NULL, 0, 0};
	for (size_t i = 0; i < cnt && st_field_type_is_range(rt->range_type); i++) {
		if (!hist_collect_ranges(rt, s, &gs, &cache, docs[i], i)) {
			cm_free(AGG_MEM, gs.p);
			return;
		}
	}
	for (size_t i = 0; i < cnt && !st_field_type_is_range(rt->range_type); i++) {
		const int64_t *v;
		int64_t mv;
		int k = agg_values(rt, docs[i], &v);
		if (k == 0) {
			if (!a->missing.set)
				continue;
			if (date) {
				if (!a->missing.is_num &&
				    !agg_date_parse(a->missing.s, a->format, p->tz, false, &mv))
					continue;
				if (a->missing.is_num)
					mv = a->missing.l;
			} else {
				if (!a->missing.is_num)
					continue;
				mv = rt->is_double ? st_double_to_sortable(a->missing.d) : a->missing.l;
				if (!rt->fi)
					mv = (int64_t)a->missing.d;
			}
			v = &mv;
			k = 1;
		}
		int64_t last = 0;
		for (int j = 0; j < k; j++) {
			int64_t key = date ? dh_round_c(p, &cache, v[j]) : hist_index(p, agg_num(rt, v[j]));
			if (j > 0 && key == last)
				continue; /* one count per doc per bucket */
			last = key;
			if (!hist_in_hard(p, date, key))
				continue;
			if (!hist_count(rt, s, &gs, key, i)) {
				cm_free(AGG_MEM, gs.p);
				return;
			}
		}
	}
	if (a->nsubs)
		grp_flush(rt, &gs, &s->t, docs, scores);
}

static void
hist_finish(const sr_agg *a, agg_node *n)
{
	hist_state *s = n->d;
	for (size_t i = 0; i < s->t.n; i++)
		agg_subs_shard_finish(a, s->t.v[i].subs);
}

static void
hist_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	hist_state *x = into->d, *y = from->d;
	x->is_double |= y->is_double;
	btab_merge(&x->t, &y->t, a);
}

static int
hist_cmp(const void *ctx, const bkt *x, const bkt *y)
{
	const hist_params *p = ctx;
	if (p->order_count) {
		int c = (x->count > y->count) - (x->count < y->count);
		if (c)
			return p->order_desc ? -c : c;
		return (x->l > y->l) - (x->l < y->l);
	}
	int c = (x->l > y->l) - (x->l < y->l);
	return p->order_desc ? -c : c;
}

static cm_err
hist_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const hist_state *s = n->d;
	const hist_params *p = a->p;
	bool date = a->kind == AGG_DATE_HISTOGRAM;
	cm_buf *b = r->out;
	/* Gap filling (min_doc_count 0) works on a private table of empty
	 * buckets plus pointers to the real ones. */
	btab fill;
	memset(&fill, 0, sizeof fill);
	size_t cap = s->t.n;
	bkt **v = NULL;
	size_t k = 0;
	cm_err rc = CM_OK;
	if (p->min_doc_count == 0 && (s->t.n || p->has_bounds)) {
		int64_t lo = INT64_MAX, hi = INT64_MIN;
		for (size_t i = 0; i < s->t.n; i++) {
			if (s->t.v[i].l < lo)
				lo = s->t.v[i].l;
			if (s->t.v[i].l > hi)
				hi = s->t.v[i].l;
		}
		if (p->has_bounds) {
			if (p->bmin <= p->bmax || isfinite(p->bmin) || isfinite(p->bmax)) {
				if (isfinite(p->bmin)) {
					int64_t bl = date ? dh_round_bound(p, (int64_t)p->bmin)
					                  : hist_index(p, p->bmin);
					if (bl < lo)
						lo = bl;
				}
				if (isfinite(p->bmax)) {
					int64_t bh = date ? dh_round_bound(p, (int64_t)p->bmax)
					                  : hist_index(p, p->bmax);
					if (bh > hi)
						hi = bh;
				}
			}
		}
		if (lo <= hi) {
			uint64_t count = 0;
			for (int64_t key = lo; key <= hi;) {
				if (++count + r->buckets > SR_MAX_BUCKETS) {
					agg_too_many_buckets(r->err, count + r->buckets);
					rc = CM_ELIMIT;
					goto out;
				}
				bool created = false;
				/* is this key real? */
				bkt *real = NULL;
				if (s->t.icap) {
					uint64_t hh = num_hash(key);
					size_t sl = (size_t)hh & (s->t.icap - 1);
					for (uint64_t e; (e = s->t.idx[sl]) != 0; sl = (sl + 1) & (s->t.icap - 1)) {
						bkt *c = &s->t.v[(e & 0xffffffff) - 1];
						if (!c->key && c->l == key) {
							real = c;
							break;
						}
					}
				}
				if (!real) {
					bkt *e = btab_get_l(&fill, a, key, &created);
					(void)e;
				}
				if (date) {
					int64_t nk = dh_next(p, key);
					if (nk <= key)
						break;
					key = nk;
				} else {
					if (key == INT64_MAX)
						break;
					key++;
				}
			}
		}
		cap += fill.n;
	}
	v = cm_malloc(AGG_MEM, (cap ? cap : 1) * sizeof *v);
	for (size_t i = 0; i < s->t.n; i++)
		if (s->t.v[i].count >= p->min_doc_count && (s->t.v[i].count || p->min_doc_count == 0))
			v[k++] = &s->t.v[i];
	for (size_t i = 0; i < fill.n; i++)
		v[k++] = &fill.v[i];
	bsort(v, k, hist_cmp, p);
	if ((rc = count_buckets(r, k)))
		goto out;
	cm_buf_put(b, p->keyed ? "{\"buckets\":{" : "{\"buckets\":[", 12);
	for (size_t i = 0; i < k && !rc; i++) {
		const bkt *bk = v[i];
		char ks[256];
		bool as_string = false; /* a numeric key's text by "format" */
		if (i)
			cm_buf_put_u8(b, ',');
		if (date)
			agg_date_format(p->tz, a->format, bk->l, ks, sizeof ks);
		else if (!(a->format &&
		           (as_string = agg_decimal_format(a->format, hist_key(p, bk->l), ks,
		                                           sizeof ks))))
			agg_double_str(ks, sizeof ks, hist_key(p, bk->l));
		if (p->keyed) {
			agg_json_str(b, ks, strlen(ks));
			cm_buf_put_u8(b, ':');
		}
		if (date) {
			cm_buf_put(b, "{\"key_as_string\":", 17);
			agg_json_str(b, ks, strlen(ks));
			cm_buf_printf(b, ",\"key\":%lld", (long long)bk->l);
		} else {
			cm_buf_put(b, "{\"key\":", 7);
			agg_json_double(b, hist_key(p, bk->l));
			if (as_string) {
				cm_buf_put(b, ",\"key_as_string\":", 17);
				agg_json_str(b, ks, strlen(ks));
			}
		}
		cm_buf_printf(b, ",\"doc_count\":%llu", (unsigned long long)bk->count);
		rc = agg_subs_render(a, bk->subs, r);
		cm_buf_put_u8(b, '}');
	}
	cm_buf_put(b, p->keyed ? "}}" : "]}", 2);
out:
	cm_free(AGG_MEM, v);
	btab_free(&fill, a);
	return rc;
}

static void
hist_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const hist_state *s = n->d;
	cm_buf_put_u8(b, s->is_double);
	btab_encode(&s->t, a, b);
}

static bool
hist_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	hist_state *s = n->d;
	uint8_t d;
	if (!cm_rd_u8(r, &d))
		return false;
	s->is_double = d;
	return btab_decode(&s->t, a, r);
}

const agg_ops agg_ops_histogram = {
    .name = "histogram",
    .bucket = true,
    .needs_field = true,
    .parse = hist_parse,
    .free_params = hist_free_params,
    .state_new = hist_new,
    .state_free = hist_free,
    .seg_begin = hist_seg_begin,
    .collect = hist_collect,
    .shard_finish = hist_finish,
    .merge = hist_merge,
    .render = hist_render,
    .encode = hist_encode,
    .decode = hist_decode,
};

const agg_ops agg_ops_date_histogram = {
    .name = "date_histogram",
    .bucket = true,
    .needs_field = true,
    .parse = dh_parse,
    .free_params = hist_free_params,
    .state_new = hist_new,
    .state_free = hist_free,
    .seg_begin = hist_seg_begin,
    .collect = hist_collect,
    .shard_finish = hist_finish,
    .merge = hist_merge,
    .render = hist_render,
    .encode = hist_encode,
    .decode = hist_decode,
};

/* ================================================================ range / date_range */

#define RANGES_MAX 1024

typedef struct rng {
	double from, to; /* -inf / +inf when absent */
	bool has_from, has_to;
	char *key;       /* given or generated */
	bool key_generated;
	char *from_s, *to_s; /* date_range: rendered bounds */
	/* date_range without a "format": the bounds as given (a number as its
	 * integral text, as ES's Long.toString), read again in the field's
	 * format where its mapping has one */
	char *from_raw, *to_raw;
} rng;

typedef struct range_params {
	rng *r;
	size_t n;
	bool keyed;
	agg_tz *tz;
} range_params;

static void
range_free_params(void *pp)
{
	range_params *p = pp;
	for (size_t i = 0; i < p->n; i++) {
		cm_free(AGG_MEM, p->r[i].key);
		cm_free(AGG_MEM, p->r[i].from_s);
		cm_free(AGG_MEM, p->r[i].to_s);
		cm_free(AGG_MEM, p->r[i].from_raw);
		cm_free(AGG_MEM, p->r[i].to_raw);
	}
	cm_free(AGG_MEM, p->r);
	agg_tz_free(p->tz);
	cm_free(AGG_MEM, p);
}

static char *
range_raw(const cJSON *v)
{
	if (cJSON_IsString(v))
		return cm_strdup(AGG_MEM, v->valuestring);
	char buf[32];
	double d = v->valuedouble;
	snprintf(buf, sizeof buf, "%lld",
	         d >= 9.2e18    ? (long long)INT64_MAX
	         : d <= -9.2e18 ? (long long)INT64_MIN
	                        : (long long)d);
	return cm_strdup(AGG_MEM, buf);
}

static cm_err
range_bound(sr_agg *a, range_params *p, const cJSON *v, const char *which, double *out,
            cm_error *err)
{
	if (a->kind == AGG_DATE_RANGE && cJSON_IsString(v)) {
		int64_t ms;
		if (!agg_date_parse(v->valuestring, a->format, p->tz, false, &ms))
			return cm_error_set(err, CM_EPARSE,
			                    "failed to parse date field [%s] with format [%s]",
			                    v->valuestring, a->format ? a->format : "strict_date_optional_time||epoch_millis");
		*out = (double)ms;
		return CM_OK;
	}
	return agg_parse_num(v, a->name, which, out, err);
}

/* Reads a date_range bound as given (g->from_raw / to_raw) in format. */
static bool
range_read(const rng *g, const char *format, const agg_tz *tz, bool from, double *out)
{
	int64_t ms;
	if (!agg_date_parse(from ? g->from_raw : g->to_raw, format, tz, false, &ms))
		return false;
	*out = (double)ms;
	return true;
}

/* A date_range's bounds in a segment's field format (rt->kd). */
typedef struct range_fmt {
	const char *fmt; /* the mapping's, valid while the segment is read */
	double *from, *to;
} range_fmt;

static int
rng_cmp(const void *x, const void *y)
{
	const rng *a = x, *b = y;
	if (a->from != b->from)
		return a->from < b->from ? -1 : 1;
	if (a->to != b->to)
		return a->to < b->to ? -1 : 1;
	return 0;
}

static cm_err
range_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	range_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	const cJSON *ranges = NULL;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "field") || !strcmp(k, "missing") || !strcmp(k, "format"))
			continue;
		if (!strcmp(k, "ranges"))
			ranges = c;
		else if (!strcmp(k, "keyed")) {
			if (agg_parse_bool(c, a->name, k, &p->keyed, err))
				return CM_EPARSE;
		} else if (!strcmp(k, "time_zone") && a->kind == AGG_DATE_RANGE) {
			if (!cJSON_IsString(c) || agg_tz_parse(c->valuestring, &p->tz, err))
				return cm_error_set(err, CM_EINVAL, "bad [time_zone]");
		} else
			return agg_unknown_param(a, k, err);
	}
	if (!ranges || !cJSON_IsArray(ranges) || cJSON_GetArraySize(ranges) == 0)
		return cm_error_set(err, CM_EINVAL, "No [ranges] specified for the [%s] aggregation",
		                    a->name);
	int nr = cJSON_GetArraySize(ranges);
	if (nr > RANGES_MAX)
		return cm_error_set(err, CM_EINVAL, "too many ranges in [%s]", a->name);
	p->r = cm_calloc(AGG_MEM, (size_t)nr, sizeof *p->r);
	for (const cJSON *e = ranges->child; e; e = e->next) {
		rng *g = &p->r[p->n++];
		g->from = -INFINITY;
		g->to = INFINITY;
		if (!cJSON_IsObject(e))
			return cm_error_set(err, CM_EPARSE, "[ranges] entries must be objects");
		for (const cJSON *f = e->child; f; f = f->next) {
			if (cJSON_IsNull(f))
				continue;
			if (!strcmp(f->string, "from")) {
				if (range_bound(a, p, f, "from", &g->from, err))
					return CM_EPARSE;
				g->has_from = true;
				if (a->kind == AGG_DATE_RANGE && !a->format && !g->from_raw)
					g->from_raw = range_raw(f);
			} else if (!strcmp(f->string, "to")) {
				if (range_bound(a, p, f, "to", &g->to, err))
					return CM_EPARSE;
				g->has_to = true;
				if (a->kind == AGG_DATE_RANGE && !a->format && !g->to_raw)
					g->to_raw = range_raw(f);
			} else if (!strcmp(f->string, "key")) {
				if (agg_parse_str(f, a->name, "key", &g->key, err))
					return CM_EPARSE;
			} else
				return cm_error_set(err, CM_EPARSE, "Unknown key for a range [%s]",
				                    f->string);
		}
		char fs[96] = "*", ts[96] = "*";
		if (a->kind == AGG_DATE_RANGE) {
			if (g->has_from) {
				agg_date_format(p->tz, a->format, (int64_t)g->from, fs, sizeof fs);
				g->from_s = cm_strdup(AGG_MEM, fs);
			}
			if (g->has_to) {
				agg_date_format(p->tz, a->format, (int64_t)g->to, ts, sizeof ts);
				g->to_s = cm_strdup(AGG_MEM, ts);
			}
		} else {
			/* a DecimalFormat "format" gives the bounds' text, key included */
			if (g->has_from && !(a->format && agg_decimal_format(a->format, g->from, fs,
			                                                     sizeof fs)))
				agg_double_str(fs, sizeof fs, g->from);
			else if (g->has_from)
				g->from_s = cm_strdup(AGG_MEM, fs);
			if (g->has_to && !(a->format && agg_decimal_format(a->format, g->to, ts,
			                                                   sizeof ts)))
				agg_double_str(ts, sizeof ts, g->to);
			else if (g->has_to)
				g->to_s = cm_strdup(AGG_MEM, ts);
		}
		if (!g->key) {
			char kb[200];
			snprintf(kb, sizeof kb, "%s-%s", fs, ts);
			g->key = cm_strdup(AGG_MEM, kb);
			g->key_generated = true;
		}
	}
	/* ES sorts ranges by (from, to); a stable insertion sort keeps equal
	 * ranges in request order. */
	for (size_t i = 1; i < p->n; i++) {
		rng x = p->r[i];
		size_t j = i;
		while (j > 0 && rng_cmp(&p->r[j - 1], &x) > 0) {
			p->r[j] = p->r[j - 1];
			j--;
		}
		p->r[j] = x;
	}
	return CM_OK;
}

typedef filters_state range_state; /* the same per-range buckets */

static void *
range_new(const sr_agg *a)
{
	const range_params *p = a->p;
	range_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->n = p->n;
	s->b = cm_calloc(AGG_MEM, p->n ? p->n : 1, sizeof *s->b);
	for (size_t i = 0; i < p->n; i++)
		s->b[i].subs = agg_subs_new(a);
	return s;
}

static void
range_free(const sr_agg *a, void *d)
{
	filters_free(a, d); /* same layout */
}

/* A bound in the precision the field stores, as ES's
 * reduceToStoredPrecision: a float field holds 0.04 as 0.03999999910...,
 * so the bound "to": 0.04 must become that float, or the document lands in
 * the range below. */
static double
range_stored_precision(const agg_rt *rt, double x)
{
	if (!rt->fi || !isfinite(x))
		return x;
	if (rt->fi->type == ST_FT_FLOAT) {
		if (fabs(x) >= 0x1.ffffffp+127)
			return x < 0 ? -INFINITY : INFINITY;
		return (double)(float)x;
	}
	if (rt->fi->type == ST_FT_HALF_FLOAT) {
		if (fabs(x) >= 0x1.ffffffp+127)
			return x < 0 ? -INFINITY : INFINITY;
		return st_half_round((double)(float)x);
	}
	return x;
}

static void
range_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	range_state *s = n->d;
	const sr_agg *a = rt->spec;
	const range_params *p = a->p;
	const range_fmt *rf = rt->kd; /* the bounds in the field's format */
	const char *fmt = rf ? rf->fmt : a->format;
	if (!rt->fi && !a->missing.set)
		return;
	if (rf && !s->fmt)
		s->fmt = cm_strdup(AGG_MEM, rf->fmt);
	for (size_t i = 0; i < cnt; i++) {
		const int64_t *v;
		int k = agg_values(rt, docs[i], &v);
		double mv = 0;
		bool use_missing = false;
		if (k == 0) {
			if (!a->missing.set)
				continue;
			if (a->missing.is_num)
				mv = a->missing.d;
			else {
				int64_t ms;
				if (a->kind != AGG_DATE_RANGE ||
				    !agg_date_parse(a->missing.s, fmt, p->tz, false, &ms))
					continue;
				mv = (double)ms;
			}
			use_missing = true;
		}
		for (size_t r = 0; r < p->n; r++) {
			bool hit = false;
			double from = rf ? rf->from[r] : p->r[r].from,
			       to = rf ? rf->to[r] : p->r[r].to;
			if (use_missing)
				hit = mv >= from && mv < to;
			else if (k > 0) {
				double lo = range_stored_precision(rt, from);
				double hi = range_stored_precision(rt, to);
				for (int j = 0; j < k && !hit; j++) {
					double x = agg_num(rt, v[j]);
					hit = x >= lo && x < hi;
				}
			}
			if (hit) {
				s->b[r].count++;
				bucket_doc(rt, s->b[r].subs, docs[i], scores, i);
			}
		}
	}
}

static cm_err
range_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const range_state *s = n->d;
	const range_params *p = a->p;
	cm_buf *b = r->out;
	if (count_buckets(r, s->n))
		return CM_ELIMIT;
	cm_buf_put(b, p->keyed ? "{\"buckets\":{" : "{\"buckets\":[", 12);
	for (size_t i = 0; i < s->n; i++) {
		rng in_fmt;
		const rng *g = &p->r[i];
		char fs[96], ts[96], kb[200];
		if (s->fmt) {
			/* the bounds and keys as the field's format reads and writes
			 * them (they parsed on the shards that read the field) */
			in_fmt = *g;
			g = &in_fmt;
			if (in_fmt.from_raw &&
			    range_read(&in_fmt, s->fmt, p->tz, true, &in_fmt.from)) {
				agg_date_format(p->tz, s->fmt, (int64_t)in_fmt.from, fs, sizeof fs);
				in_fmt.from_s = fs;
			}
			if (in_fmt.to_raw &&
			    range_read(&in_fmt, s->fmt, p->tz, false, &in_fmt.to)) {
				agg_date_format(p->tz, s->fmt, (int64_t)in_fmt.to, ts, sizeof ts);
				in_fmt.to_s = ts;
			}
			if (in_fmt.key_generated) {
				snprintf(kb, sizeof kb, "%s-%s",
				         in_fmt.has_from ? in_fmt.from_s : "*",
				         in_fmt.has_to ? in_fmt.to_s : "*");
				in_fmt.key = kb;
			}
		}
		if (i)
			cm_buf_put_u8(b, ',');
		if (p->keyed) {
			agg_json_str(b, g->key, strlen(g->key));
			cm_buf_put_u8(b, ':');
		}
		cm_buf_put(b, "{\"key\":", 7);
		agg_json_str(b, g->key, strlen(g->key));
		if (g->has_from) {
			cm_buf_put(b, ",\"from\":", 8);
			agg_json_double(b, g->from);
			if (g->from_s) {
				cm_buf_put(b, ",\"from_as_string\":", 18);
				agg_json_str(b, g->from_s, strlen(g->from_s));
			}
		}
		if (g->has_to) {
			cm_buf_put(b, ",\"to\":", 6);
			agg_json_double(b, g->to);
			if (g->to_s) {
				cm_buf_put(b, ",\"to_as_string\":", 16);
				agg_json_str(b, g->to_s, strlen(g->to_s));
			}
		}
		cm_buf_printf(b, ",\"doc_count\":%llu", (unsigned long long)s->b[i].count);
		cm_err rc = agg_subs_render(a, s->b[i].subs, r);
		if (rc)
			return rc;
		cm_buf_put_u8(b, '}');
	}
	cm_buf_put(b, p->keyed ? "}}" : "]}", 2);
	return CM_OK;
}

static cm_err
range_seg_begin(agg_rt *rt, cm_error *err)
{
	return agg_field_numeric_or_fail(rt, err) ? CM_OK : CM_EINVAL;
}

static void date_range_seg_end(agg_rt *rt);

/* date_range without a "format" reads its bounds in the field's format,
 * as ES's ValuesSourceConfig does: per segment, into rt->kd, where the
 * shard's mapping gives the field one. */
static cm_err
date_range_seg_begin(agg_rt *rt, cm_error *err)
{
	const sr_agg *a = rt->spec;
	const range_params *p = a->p;
	if (!agg_field_numeric_or_fail(rt, err))
		return CM_EINVAL;
	const st_mapping *m = rt->ctx ? st_reader_mapping(rt->ctx->reader) : NULL;
	const st_field_def *d = m && a->field ? st_mapping_find(m, a->field) : NULL;
	if (a->format || !d || !d->format || (d->type != ST_FT_DATE && d->type != ST_FT_DATE_NANOS))
		return CM_OK;
	range_fmt *rf = cm_calloc(AGG_MEM, 1, sizeof *rf);
	rt->kd = rf;
	rf->fmt = d->format;
	rf->from = cm_calloc(AGG_MEM, p->n ? p->n : 1, sizeof *rf->from);
	rf->to = cm_calloc(AGG_MEM, p->n ? p->n : 1, sizeof *rf->to);
	for (size_t i = 0; i < p->n; i++) {
		rf->from[i] = p->r[i].from;
		rf->to[i] = p->r[i].to;
		const char *bad = NULL;
		if (p->r[i].from_raw && !range_read(&p->r[i], d->format, p->tz, true, &rf->from[i]))
			bad = p->r[i].from_raw;
		else if (p->r[i].to_raw &&
		         !range_read(&p->r[i], d->format, p->tz, false, &rf->to[i]))
			bad = p->r[i].to_raw;
		if (bad) {
			cm_error_set(err, CM_EPARSE,
			             "failed to parse date field [%s] with format [%s]", bad,
			             d->format);
			date_range_seg_end(rt);
			return CM_EPARSE;
		}
	}
	return CM_OK;
}

static void
date_range_seg_end(agg_rt *rt)
{
	range_fmt *rf = rt->kd;
	if (!rf)
		return;
	cm_free(AGG_MEM, rf->from);
	cm_free(AGG_MEM, rf->to);
	cm_free(AGG_MEM, rf);
	rt->kd = NULL;
}

/* The range state with the field's format a shard read the bounds in. */
static void
date_range_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const range_state *s = n->d;
	filters_encode(a, n, b);
	cm_buf_put_str(b, s->fmt ? s->fmt : "", s->fmt ? strlen(s->fmt) : 0);
}

static bool
date_range_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	range_state *s = n->d;
	const char *f;
	size_t len;
	if (!filters_decode(a, n, r) || !cm_rd_str(r, &f, &len) || len > 256)
		return false;
	cm_free(AGG_MEM, s->fmt);
	s->fmt = len ? cm_strndup(AGG_MEM, f, len) : NULL;
	return true;
}

const agg_ops agg_ops_range = {
    .name = "range",
    .bucket = true,
    .needs_field = true,
    .parse = range_parse,
    .free_params = range_free_params,
    .state_new = range_new,
    .state_free = range_free,
    .seg_begin = range_seg_begin,
    .collect = range_collect,
    .shard_finish = filters_finish,
    .merge = filters_merge,
    .render = range_render,
    .encode = filters_encode,
    .decode = filters_decode,
};

const agg_ops agg_ops_date_range = {
    .name = "date_range",
    .bucket = true,
    .needs_field = true,
    .parse = range_parse,
    .free_params = range_free_params,
    .state_new = range_new,
    .state_free = range_free,
    .seg_begin = date_range_seg_begin,
    .seg_end = date_range_seg_end,
    .collect = range_collect,
    .shard_finish = filters_finish,
    .merge = filters_merge,
    .render = range_render,
    .encode = date_range_encode,
    .decode = date_range_decode,
};
