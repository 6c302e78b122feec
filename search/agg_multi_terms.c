/* multi_terms: buckets for each combination of the values of several
 * fields (ES 7.12+). A doc with several values in a field counts once per
 * distinct combination; a doc without a value in some field (and no
 * "missing" for it) is left out.
 *
 * A bucket key is a tuple encoded as bytes, per field: a tag, then 'S'
 * u32 length + bytes, or 'L'/'D'/'T'/'B' 8 bytes (long, double bits,
 * date millis, boolean). Shards cut to shard_size like terms, and the
 * coordinator computes sum_other_doc_count and doc_count_error_upper_bound
 * as InternalTerms.reduce does. */
#define _GNU_SOURCE /* qsort_r */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "agg_int.h"

#define MT_MAX_FIELDS 16
#define MT_MAX_COMBOS 1024 /* per doc */

enum { MO_COUNT, MO_KEY, MO_PATH };

typedef struct mt_order {
	int kind;
	bool desc;
	char *path;
} mt_order;

typedef struct mt_params {
	sr_agg *src[MT_MAX_FIELDS]; /* hidden specs: field + missing each */
	size_t nsrc;
	int64_t size, shard_size, min_doc_count, shard_min_doc_count;
	mt_order order[8];
	size_t norder;
} mt_params;

typedef struct mt_bkt {
	uint8_t *key;
	size_t klen;
	uint64_t count;
	agg_node **subs;
} mt_bkt;

typedef struct mt_state {
	mt_bkt *v;
	size_t n, cap;
	uint32_t *slot; /* open addressing: bucket index + 1 */
	size_t scap;
	uint64_t other;
	int64_t err_sum;              /* -1: unbounded */
	uint32_t nshards;             /* 0: fresh shard state */
	int8_t ftypes[MT_MAX_FIELDS]; /* st_field_type per source, -1 unknown */
} mt_state;

/* ---------------------------------------------------------------- parsing */

static void
mt_free_params(void *pp)
{
	mt_params *p = pp;
	for (size_t i = 0; i < p->nsrc; i++)
		sr_agg_free(p->src[i]);
	for (size_t i = 0; i < p->norder; i++)
		cm_free(AGG_MEM, p->order[i].path);
	cm_free(AGG_MEM, p);
}

static cm_err
mt_parse_src(sr_agg *a, const cJSON *v, sr_agg **out, cm_error *err)
{
	if (!cJSON_IsObject(v))
		return cm_error_set(err, CM_EPARSE, "[multi_terms] failed to parse field [terms]");
	sr_agg *h = cm_calloc(AGG_MEM, 1, sizeof *h);
	*out = h;
	h->name = cm_strdup(AGG_MEM, a->name);
	h->kind = AGG_TERMS;
	h->ops = &agg_ops_terms;
	for (const cJSON *c = v->child; c; c = c->next) {
		if (!strcmp(c->string, "field")) {
			if (!cJSON_IsString(c))
				return cm_error_set(err, CM_EPARSE,
				                    "[terms] field must be a string");
			cm_free(AGG_MEM, h->field);
			h->field = cm_strdup(AGG_MEM, c->valuestring);
		} else if (!strcmp(c->string, "missing")) {
			char *s = NULL;
			if (cJSON_IsBool(c))
				s = cm_strdup(AGG_MEM, cJSON_IsTrue(c) ? "true" : "false");
			else if (agg_parse_str(c, "terms", "missing", &s, err))
				return CM_EPARSE;
			h->missing.set = true;
			h->missing.s = s;
			h->missing.slen = strlen(s);
			char *end;
			double d = strtod(s, &end);
			if (cJSON_IsBool(c)) {
				h->missing.is_num = true;
				h->missing.d = h->missing.l = cJSON_IsTrue(c);
			} else if (end != s && !*end) {
				h->missing.is_num = true;
				h->missing.d = d;
				h->missing.l = d > -9.2e18 && d < 9.2e18 ? (int64_t)d : 0;
			}
		} else if (!strcmp(c->string, "script"))
			return cm_error_set(err, CM_EINVAL,
			                    "[script] is not supported in aggregation [%s]",
			                    a->name);
		else
			return cm_error_set(err, CM_EPARSE, "[terms] unknown field [%s]",
			                    c->string);
	}
	if (!h->field)
		return cm_error_set(
		    err, CM_EINVAL,
		    "Required one of fields [field, script], but none were specified.");
	return CM_OK;
}

static cm_err
mt_parse_order1(sr_agg *a, mt_params *p, const cJSON *o, cm_error *err)
{
	if (!cJSON_IsObject(o) || !o->child || o->child->next || !cJSON_IsString(o->child))
		return cm_error_set(err, CM_EPARSE, "[multi_terms] failed to parse field [order]");
	const char *k = o->child->string, *dir = o->child->valuestring;
	if (strcmp(dir, "asc") && strcmp(dir, "desc"))
		return cm_error_set(err, CM_EPARSE, "Unknown order direction [%s]", dir);
	if (p->norder == sizeof p->order / sizeof p->order[0])
		return cm_error_set(err, CM_EINVAL, "[multi_terms] too many orders in [%s]",
		                    a->name);
	mt_order *m = &p->order[p->norder++];
	m->desc = dir[0] == 'd';
	if (!strcmp(k, "_count"))
		m->kind = MO_COUNT;
	else if (!strcmp(k, "_key") || !strcmp(k, "_term"))
		m->kind = MO_KEY;
	else {
		m->kind = MO_PATH;
		m->path = cm_strdup(AGG_MEM, k);
	}
	return CM_OK;
}

static cm_err
mt_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	mt_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->size = 10;
	p->shard_size = -1;
	p->min_doc_count = 1;
	p->shard_min_doc_count = 0;
	const cJSON *terms = NULL;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "terms")) {
			terms = c;
		} else if (!strcmp(k, "size") || !strcmp(k, "shard_size")) {
			int64_t v;
			if (agg_parse_int(c, "multi_terms", k, INT32_MIN, INT32_MAX, &v, err))
				return err->code;
			if (v <= 0)
				return cm_error_set(
				    err, CM_EINVAL,
				    "[%s] must be greater than 0. Found [%lld] in [%s]", k,
				    (long long)v, a->name);
			*(strcmp(k, "size") ? &p->shard_size : &p->size) = v;
		} else if (!strcmp(k, "min_doc_count") || !strcmp(k, "shard_min_doc_count")) {
			int64_t v;
			if (agg_parse_int(c, "multi_terms", k, INT32_MIN, INT32_MAX, &v, err))
				return err->code;
			if (v < 0)
				return cm_error_set(
				    err, CM_EINVAL,
				    "[%s] must be greater than or equal to 0. Found [%lld] in "
				    "[%s]",
				    k, (long long)v, a->name);
			if (!strcmp(k, "min_doc_count") && v == 0)
				return cm_error_set(
				    err, CM_EINVAL,
				    "[min_doc_count] 0 of [multi_terms] is not supported by "
				    "Shoal");
			*(strcmp(k, "min_doc_count") ? &p->shard_min_doc_count
			                             : &p->min_doc_count) = v;
		} else if (!strcmp(k, "order")) {
			if (cJSON_IsArray(c)) {
				for (const cJSON *o = c->child; o; o = o->next)
					if (mt_parse_order1(a, p, o, err))
						return err->code;
			} else if (mt_parse_order1(a, p, c, err))
				return err->code;
		} else if (!strcmp(k, "show_term_doc_count_error") || !strcmp(k, "collect_mode")) {
			continue; /* accepted: no per-bucket error; collection is breadth-first
			             anyway */
		} else
			return agg_unknown_param(a, k, err);
	}
	if (!cJSON_IsArray(terms) || cJSON_GetArraySize(terms) < 2)
		return cm_error_set(
		    err, CM_EINVAL,
		    "The [terms] parameter in the aggregation [%s] must be present and "
		    "have at least 2 fields.",
		    a->name);
	for (const cJSON *t = terms->child; t; t = t->next) {
		if (p->nsrc == MT_MAX_FIELDS)
			return cm_error_set(err, CM_EINVAL,
			                    "[multi_terms] at most %d fields in [%s]",
			                    MT_MAX_FIELDS, a->name);
		if (mt_parse_src(a, t, &p->src[p->nsrc++], err))
			return err->code;
	}
	if (p->shard_size < 0)
		p->shard_size = p->size + p->size / 2 + 10;
	if (p->shard_size < p->size)
		p->shard_size = p->size;
	return CM_OK;
}

cm_err
agg_multi_terms_check_order(const sr_agg *a, cm_error *err)
{
	const mt_params *p = a->p;
	for (size_t i = 0; i < p->norder; i++)
		if (p->order[i].kind == MO_PATH && !agg_subs_path_ok(a, p->order[i].path))
			return cm_error_set(
			    err, CM_EAGGEXEC,
			    "Invalid aggregator order path [%s]. Unknown aggregation "
			    "[%s]",
			    p->order[i].path, p->order[i].path);
	return CM_OK;
}

/* ---------------------------------------------------------------- state */

static void *
mt_new(const sr_agg *a)
{
	mt_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	memset(s->ftypes, -1, sizeof s->ftypes);
	return s;
}

static void
mt_clear(const sr_agg *a, mt_state *s)
{
	for (size_t i = 0; i < s->n; i++) {
		cm_free(AGG_MEM, s->v[i].key);
		agg_subs_free(a, s->v[i].subs);
	}
	cm_free(AGG_MEM, s->v);
	cm_free(AGG_MEM, s->slot);
	s->v = NULL;
	s->slot = NULL;
	s->n = s->cap = s->scap = 0;
}

static void
mt_free(const sr_agg *a, void *d)
{
	mt_state *s = d;
	mt_clear(a, s);
	cm_free(AGG_MEM, s);
}

static size_t
mt_find(const mt_state *s, const uint8_t *k, size_t kl, uint64_t h)
{
	size_t i = (size_t)h & (s->scap - 1);
	while (s->slot[i]) {
		const mt_bkt *b = &s->v[s->slot[i] - 1];
		if (b->klen == kl && !memcmp(b->key, k, kl))
			return i;
		i = (i + 1) & (s->scap - 1);
	}
	return i;
}

/* The bucket of key k (copied when new); NULL past the bucket guard. */
static mt_bkt *
mt_get(agg_root *root, const sr_agg *a, mt_state *s, const uint8_t *k, size_t kl)
{
	if ((s->n + 1) * 2 > s->scap) {
		size_t ncap = s->scap ? s->scap * 2 : 16;
		cm_free(AGG_MEM, s->slot);
		s->slot = cm_calloc(AGG_MEM, ncap, sizeof *s->slot);
		s->scap = ncap;
		for (size_t i = 0; i < s->n; i++)
			s->slot[mt_find(s, s->v[i].key, s->v[i].klen,
			                XXH3_64bits(s->v[i].key, s->v[i].klen))] = (uint32_t)i + 1;
	}
	size_t at = mt_find(s, k, kl, XXH3_64bits(k, kl));
	if (s->slot[at])
		return &s->v[s->slot[at] - 1];
	if (root && !agg_bucket_guard(root, 1))
		return NULL;
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->v = cm_realloc(AGG_MEM, s->v, s->cap * sizeof *s->v);
	}
	mt_bkt *b = &s->v[s->n];
	b->key = cm_malloc(AGG_MEM, kl ? kl : 1);
	memcpy(b->key, k, kl);
	b->klen = kl;
	b->count = 0;
	b->subs = agg_subs_new(a);
	s->slot[at] = (uint32_t)++s->n;
	return b;
}

/* ---------------------------------------------------------------- collection */

static cm_err
mt_seg_begin(agg_rt *rt, cm_error *err)
{
	const mt_params *p = rt->spec->p;
	agg_rt *k = cm_calloc(AGG_MEM, p->nsrc, sizeof *k);
	rt->kd = k;
	for (size_t i = 0; i < p->nsrc; i++) {
		cm_err rc = agg_rt_field(rt->root, &k[i], p->src[i], rt->ctx);
		if (rc)
			return rc;
		if (k[i].fi && k[i].fi->type == ST_FT_GEO_POINT)
			return cm_error_set(err, CM_EINVAL,
			                    "Field [%s] of type [geo_point] is not supported for "
			                    "aggregation [multi_terms]",
			                    p->src[i]->field);
	}
	return CM_OK;
}

static void
mt_seg_end(agg_rt *rt)
{
	const mt_params *p = rt->spec->p;
	agg_rt *k = rt->kd;
	if (!k)
		return;
	for (size_t i = 0; i < p->nsrc; i++) {
		st_colblock_free(&k[i].cb);
		cm_free(AGG_MEM, k[i].conv_buf);
	}
	cm_free(AGG_MEM, k);
}

static char
mt_tag(int ftype)
{
	switch (ftype) {
	case ST_FT_DATE:
		return 'T';
	case ST_FT_BOOLEAN:
		return 'B';
	case ST_FT_DOUBLE:
	case ST_FT_FLOAT:
		return 'D';
	default:
		return 'L';
	}
}

static void
put_part8(cm_buf *b, char tag, uint64_t v)
{
	cm_buf_put_u8(b, (uint8_t)tag);
	cm_buf_put_u64(b, v);
}

/* Appends field i's distinct values for doc as key parts; the parts'
 * offsets go to off (count returned, 0: the doc has none). */
static int
mt_parts(agg_rt *k, const sr_agg *src, uint32_t doc, cm_buf *parts, size_t *off, int cap)
{
	const int64_t *v;
	int n = k->fi ? agg_values(k, doc, &v) : 0;
	int out = 0;
	if (n == 0) {
		if (!src->missing.set)
			return 0;
		off[out++] = parts->len;
		bool num = k->fi && !k->is_keyword && src->missing.is_num;
		if (!num) {
			cm_buf_put_u8(parts, 'S');
			cm_buf_put_u32(parts, (uint32_t)src->missing.slen);
			cm_buf_put(parts, src->missing.s, src->missing.slen);
		} else {
			int ft = agg_ftype(k->fi->type);
			char tag = k->is_double ? 'D' : mt_tag(ft);
			uint64_t bits;
			if (tag == 'D')
				memcpy(&bits, &src->missing.d, 8);
			else
				bits = (uint64_t)src->missing.l;
			put_part8(parts, tag, bits);
		}
		off[out] = parts->len;
		return out;
	}
	for (int j = 0; j < n && out < cap; j++) {
		if (j && v[j] == v[j - 1])
			continue; /* sorted: distinct values only */
		off[out++] = parts->len;
		if (k->is_keyword) {
			const uint8_t *t;
			size_t len;
			char ip[64];
			if (st_ord_term(k->ctx->txn, k->fi, (uint64_t)v[j], &t, &len) != CM_OK) {
				out--;
				continue;
			}
			if (k->fi->type == ST_FT_IP && len == ST_IP_LEN) {
				st_ip_format(t, ip, sizeof ip);
				t = (const uint8_t *)ip;
				len = strlen(ip);
			}
			cm_buf_put_u8(parts, 'S');
			cm_buf_put_u32(parts, (uint32_t)len);
			cm_buf_put(parts, t, len);
		} else if (k->is_double) {
			double d = st_sortable_to_double(v[j]);
			uint64_t bits;
			memcpy(&bits, &d, 8);
			put_part8(parts, 'D', bits);
		} else
			put_part8(parts, mt_tag(agg_ftype(k->fi->type)), (uint64_t)v[j]);
	}
	off[out] = parts->len;
	return out;
}

static void
mt_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	const sr_agg *a = rt->spec;
	const mt_params *p = a->p;
	mt_state *s = n->d;
	agg_rt *k = rt->kd;
	cm_buf parts, key;
	cm_buf_init(&parts, AGG_MEM);
	cm_buf_init(&key, AGG_MEM);
	for (size_t i = 0; i < p->nsrc; i++)
		if (k[i].fi && s->ftypes[i] < 0)
			s->ftypes[i] = (int8_t)agg_ftype(k[i].fi->type);
	size_t off[MT_MAX_FIELDS][65];
	int nv[MT_MAX_FIELDS], at[MT_MAX_FIELDS];
	for (size_t d = 0; d < cnt && !rt->root->err.code; d++) {
		cm_buf_reset(&parts);
		size_t combos = 1;
		bool skip = false;
		for (size_t i = 0; i < p->nsrc && !skip; i++) {
			nv[i] = mt_parts(&k[i], p->src[i], docs[d], &parts, off[i], 64);
			at[i] = 0;
			skip = nv[i] == 0;
			combos *= (size_t)(nv[i] ? nv[i] : 1);
		}
		if (skip || combos > MT_MAX_COMBOS)
			continue;
		for (;;) {
			cm_buf_reset(&key);
			for (size_t i = 0; i < p->nsrc; i++)
				cm_buf_put(&key, parts.data + off[i][at[i]],
				           off[i][at[i] + 1] - off[i][at[i]]);
			mt_bkt *b = mt_get(rt->root, a, s, key.data, key.len);
			if (!b)
				break;
			b->count++;
			if (b->subs)
				agg_subs_collect(rt->root, a, b->subs, &docs[d],
				                 scores ? &scores[d] : NULL, 1);
			size_t i = 0;
			while (i < p->nsrc && ++at[i] == nv[i])
				at[i++] = 0;
			if (i == p->nsrc)
				break;
		}
	}
	cm_buf_free(&parts);
	cm_buf_free(&key);
}

/* ---------------------------------------------------------------- ordering */

static uint64_t
rd8(const uint8_t *p)
{
	uint64_t v = 0;
	memcpy(&v, p, 8);
	return v;
}

/* Element-wise tuple order (strings by bytes, numbers by value). */
static int
mt_key_cmp(const uint8_t *x, size_t xl, const uint8_t *y, size_t yl)
{
	size_t i = 0, j = 0;
	while (i < xl && j < yl) {
		char tx = (char)x[i], ty = (char)y[j];
		if (tx == 'S' && ty == 'S') {
			uint32_t lx, ly;
			memcpy(&lx, x + i + 1, 4);
			memcpy(&ly, y + j + 1, 4);
			size_t m = lx < ly ? lx : ly;
			int c = memcmp(x + i + 5, y + j + 5, m);
			if (c || lx != ly)
				return c ? c : (lx < ly ? -1 : 1);
			i += 5 + lx;
			j += 5 + ly;
			continue;
		}
		if (tx == 'S' || ty == 'S') /* mixed types (missing as a string): numbers first */
			return tx == 'S' ? 1 : -1;
		uint64_t a = rd8(x + i + 1), b = rd8(y + j + 1);
		if (tx == 'D' || ty == 'D') {
			double da, db;
			if (tx == 'D')
				memcpy(&da, &a, 8);
			else
				da = (double)(int64_t)a;
			if (ty == 'D')
				memcpy(&db, &b, 8);
			else
				db = (double)(int64_t)b;
			if (da != db)
				return da < db ? -1 : 1;
		} else if ((int64_t)a != (int64_t)b)
			return (int64_t)a < (int64_t)b ? -1 : 1;
		i += 9;
		j += 9;
	}
	return (i < xl) - (j < yl);
}

typedef struct mt_cmp_ctx {
	const sr_agg *a;
	const mt_params *p;
} mt_cmp_ctx;

static int
mt_bkt_cmp(const void *x, const void *y, void *arg)
{
	const mt_cmp_ctx *c = arg;
	const mt_bkt *a = *(mt_bkt *const *)x, *b = *(mt_bkt *const *)y;
	const mt_params *p = c->p;
	mt_order def[1] = {{MO_COUNT, true, NULL}};
	const mt_order *o = p->norder ? p->order : def;
	size_t no = p->norder ? p->norder : 1;
	for (size_t i = 0; i < no; i++) {
		int r = 0;
		if (o[i].kind == MO_COUNT)
			r = a->count < b->count ? -1 : a->count > b->count;
		else if (o[i].kind == MO_KEY)
			r = mt_key_cmp(a->key, a->klen, b->key, b->klen);
		else {
			double va = NAN, vb = NAN;
			agg_subs_value(c->a, a->subs, o[i].path, &va);
			agg_subs_value(c->a, b->subs, o[i].path, &vb);
			if (isnan(va) != isnan(vb))
				return isnan(va) ? 1 : -1; /* no value: last */
			r = va < vb ? -1 : va > vb;
		}
		if (r)
			return o[i].desc ? -r : r;
	}
	return mt_key_cmp(a->key, a->klen, b->key, b->klen);
}

static mt_bkt **
mt_sorted(const sr_agg *a, const mt_state *s)
{
	mt_bkt **o = cm_malloc(AGG_MEM, (s->n ? s->n : 1) * sizeof *o);
	for (size_t i = 0; i < s->n; i++)
		o[i] = &s->v[i];
	mt_cmp_ctx c = {a, a->p};
	qsort_r(o, s->n, sizeof *o, mt_bkt_cmp, &c);
	return o;
}

static bool
mt_count_desc(const mt_params *p)
{
	return p->norder == 0 || (p->order[0].kind == MO_COUNT && p->order[0].desc);
}

/* A shard keeps its best shard_size buckets (shard_min_doc_count applied). */
static void
mt_finish(const sr_agg *a, agg_node *n)
{
	mt_state *s = n->d;
	const mt_params *p = a->p;
	if (s->nshards == 0) {
		mt_bkt **o = mt_sorted(a, s);
		mt_state ns = {0};
		memcpy(ns.ftypes, s->ftypes, sizeof ns.ftypes);
		uint64_t other = 0, last = 0;
		size_t kept = 0;
		for (size_t i = 0; i < s->n; i++) {
			mt_bkt *b = o[i];
			if (kept < (size_t)p->shard_size &&
			    b->count >= (uint64_t)p->shard_min_doc_count) {
				mt_bkt *nb = mt_get(NULL, a, &ns, b->key, b->klen);
				agg_subs_free(a, nb->subs);
				nb->count = b->count;
				nb->subs = b->subs;
				b->subs = NULL;
				last = b->count;
				kept++;
			} else
				other += b->count;
		}
		cm_free(AGG_MEM, o);
		mt_clear(a, s);
		ns.other = other;
		ns.nshards = ns.n ? 1 : 0; /* an empty state (the coordinator's) is no shard */
		/* what this shard may have left out of any bucket, as terms */
		bool key_order = p->norder && p->order[0].kind == MO_KEY;
		ns.err_sum = kept < (size_t)p->shard_size || key_order ? 0
		             : mt_count_desc(p)                        ? (int64_t)last
		                                                       : -1;
		*s = ns;
	}
	for (size_t i = 0; i < s->n; i++)
		agg_subs_shard_finish(a, s->v[i].subs);
}

static void
mt_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	mt_state *x = into->d, *y = from->d;
	for (size_t i = 0; i < MT_MAX_FIELDS; i++)
		if (x->ftypes[i] < 0)
			x->ftypes[i] = y->ftypes[i];
	x->other += y->other;
	x->err_sum = (x->err_sum < 0 || y->err_sum < 0) ? -1 : x->err_sum + y->err_sum;
	x->nshards += y->nshards;
	for (size_t i = 0; i < y->n; i++) {
		mt_bkt *yb = &y->v[i];
		mt_bkt *xb = mt_get(NULL, a, x, yb->key, yb->klen);
		xb->count += yb->count;
		if (xb->subs)
			agg_subs_merge(a, xb->subs, yb->subs);
	}
	y->other = 0;
	y->err_sum = 0;
	y->nshards = 0;
}

/* ---------------------------------------------------------------- render */

static void
mt_render_key(const sr_agg *a, const mt_state *s, const mt_bkt *b, cm_buf *out)
{
	const mt_params *p = a->p;
	cm_buf ks;
	cm_buf_init(&ks, AGG_MEM);
	cm_buf_put(out, "\"key\":[", 7);
	size_t i = 0;
	for (size_t f = 0; i < b->klen; f++) {
		char tag = (char)b->key[i];
		char buf[96];
		if (f)
			cm_buf_put_u8(out, ',');
		if (f)
			cm_buf_put_u8(&ks, '|');
		if (tag == 'S') {
			uint32_t l;
			memcpy(&l, b->key + i + 1, 4);
			agg_json_str(out, (const char *)b->key + i + 5, l);
			cm_buf_put(&ks, b->key + i + 5, l);
			i += 5 + l;
			continue;
		}
		uint64_t v = rd8(b->key + i + 1);
		i += 9;
		if (tag == 'D') {
			double d;
			memcpy(&d, &v, 8);
			agg_json_double(out, d);
			agg_double_str(buf, sizeof buf, d);
		} else if (tag == 'B') {
			snprintf(buf, sizeof buf, "%s", v ? "true" : "false");
			cm_buf_put(out, buf, strlen(buf));
		} else {
			cm_buf_printf(out, "%lld", (long long)v);
			if (tag == 'T')
				agg_date_format(NULL, f < p->nsrc ? p->src[f]->format : NULL,
				                (int64_t)v, buf, sizeof buf);
			else
				snprintf(buf, sizeof buf, "%lld", (long long)v);
		}
		cm_buf_put(&ks, buf, strlen(buf));
	}
	(void)s;
	cm_buf_put(out, "],\"key_as_string\":", 18);
	agg_json_str(out, (const char *)ks.data, ks.len);
	cm_buf_free(&ks);
}

static cm_err
mt_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const mt_state *s = n->d;
	const mt_params *p = a->p;
	mt_bkt **o = mt_sorted(a, s);
	size_t shown = 0;
	uint64_t other = s->other;
	for (size_t i = 0; i < s->n; i++) {
		if (o[i]->count < (uint64_t)p->min_doc_count)
			continue; /* below min_doc_count: neither shown nor "other" */
		if (shown < (size_t)p->size)
			o[shown++] = o[i];
		else
			other += o[i]->count;
	}
	r->buckets += shown;
	if (r->buckets > SR_MAX_BUCKETS) {
		agg_too_many_buckets(r->err, r->buckets);
		cm_free(AGG_MEM, o);
		return CM_ELIMIT;
	}
	int64_t e = s->nshards <= 1 || !mt_count_desc(p) ? 0 : s->err_sum;
	cm_buf_printf(r->out,
	              "{\"doc_count_error_upper_bound\":%lld,\"sum_other_doc_count\":%llu,"
	              "\"buckets\":[",
	              (long long)e, (unsigned long long)other);
	cm_err rc = CM_OK;
	for (size_t i = 0; i < shown && !rc; i++) {
		cm_buf_put_u8(r->out, i ? ',' : '{');
		if (i)
			cm_buf_put_u8(r->out, '{');
		mt_render_key(a, s, o[i], r->out);
		cm_buf_printf(r->out, ",\"doc_count\":%llu", (unsigned long long)o[i]->count);
		rc = agg_subs_render(a, o[i]->subs, r);
		cm_buf_put_u8(r->out, '}');
	}
	cm_buf_put(r->out, "]}", 2);
	cm_free(AGG_MEM, o);
	return rc;
}

/* ---------------------------------------------------------------- wire */

static void
mt_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const mt_state *s = n->d;
	for (size_t i = 0; i < MT_MAX_FIELDS; i++)
		cm_buf_put_u8(b, (uint8_t)(s->ftypes[i] + 1));
	cm_buf_put_varint(b, s->other);
	cm_buf_put_varint(b, (uint64_t)(s->err_sum + 1));
	cm_buf_put_varint(b, s->nshards);
	cm_buf_put_varint(b, s->n);
	for (size_t i = 0; i < s->n; i++) {
		cm_buf_put_str(b, (const char *)s->v[i].key, s->v[i].klen);
		cm_buf_put_varint(b, s->v[i].count);
		agg_subs_encode(a, s->v[i].subs, b);
	}
}

/* A key read off the wire: nparts well-formed parts and nothing else. */
static bool
mt_key_ok(const uint8_t *k, size_t kl, size_t nparts)
{
	size_t i = 0;
	for (size_t f = 0; f < nparts; f++) {
		if (i >= kl)
			return false;
		if (k[i] == 'S') {
			uint32_t l;
			if (kl - i < 5)
				return false;
			memcpy(&l, k + i + 1, 4);
			if (kl - i - 5 < l)
				return false;
			i += 5 + l;
		} else if (strchr("LDTB", k[i]) && k[i]) {
			if (kl - i < 9)
				return false;
			i += 9;
		} else
			return false;
	}
	return i == kl;
}

static bool
mt_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	mt_state *s = n->d;
	for (size_t i = 0; i < MT_MAX_FIELDS; i++) {
		uint8_t t;
		if (!cm_rd_u8(r, &t) || t > ST_FT_LAST + 1)
			return false;
		s->ftypes[i] = (int8_t)((int)t - 1);
	}
	uint64_t e, ns, cnt;
	if (!cm_rd_varint(r, &s->other) || !cm_rd_varint(r, &e) || !cm_rd_varint(r, &ns) ||
	    ns > UINT32_MAX || !agg_get_count(r, SR_MAX_BUCKETS * 16ull, &cnt))
		return false;
	s->err_sum = (int64_t)e - 1;
	s->nshards = (uint32_t)ns;
	for (uint64_t i = 0; i < cnt; i++) {
		const char *k;
		size_t kl;
		uint64_t c;
		if (!cm_rd_str(r, &k, &kl) || !cm_rd_varint(r, &c) ||
		    !mt_key_ok((const uint8_t *)k, kl, ((const mt_params *)a->p)->nsrc))
			return false;
		mt_bkt *b = mt_get(NULL, a, s, (const uint8_t *)k, kl);
		b->count += c;
		if (b->subs && !agg_subs_decode(a, b->subs, r))
			return false;
	}
	return true;
}

const agg_ops agg_ops_multi_terms = {
    .name = "multi_terms",
    .bucket = true,
    .needs_field = false,
    .parse = mt_parse,
    .free_params = mt_free_params,
    .state_new = mt_new,
    .state_free = mt_free,
    .seg_begin = mt_seg_begin,
    .collect = mt_collect,
    .seg_end = mt_seg_end,
    .shard_finish = mt_finish,
    .merge = mt_merge,
    .render = mt_render,
    .encode = mt_encode,
    .decode = mt_decode,
};
