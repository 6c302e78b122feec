/* composite: buckets keyed by a tuple of source values (terms, histogram,
 * date_histogram), in the sources' order, paged with "after".
 *
 * Each shard keeps, after collection, its first `size` keys past `after`.
 * That is exact: a key among the first `size` of the merged result has
 * fewer than `size` smaller keys anywhere, so every shard holding it kept
 * it. Keys are encoded as bytes (one tagged value per source) so that
 * equal tuples hash and compare equal. */
#define _GNU_SOURCE /* qsort_r */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "agg_int.h"

#define COMP_MAX_SOURCES 32
#define COMP_MAX_VALUES 64    /* per source and doc; more are ignored */
#define COMP_MAX_COMBOS 65536 /* keys one document may produce */

typedef enum { CS_TERMS, CS_HIST, CS_DATE } cs_type;

/* CV_IP: an ip field's 16-byte address, ordered as bytes like CV_STR and
 * shown as text */
enum { CV_NULL, CV_LONG, CV_DOUBLE, CV_STR, CV_IP };

typedef struct csrc {
	sr_agg *spec; /* hidden spec: name, field, format, histogram parameters */
	cs_type type;
	bool desc, missing_bucket;
} csrc;

typedef struct comp_params {
	csrc src[COMP_MAX_SOURCES];
	size_t nsrc;
	uint64_t size;
	uint8_t *after; /* encoded key, NULL = from the start */
	size_t after_len;
} comp_params;

typedef struct cval {
	uint8_t tag;
	int64_t l;
	double d;
	const uint8_t *s;
	size_t n;
} cval;

typedef struct cbkt {
	uint8_t *key;
	uint32_t klen;
	uint64_t count;
	agg_node **subs;
} cbkt;

typedef struct comp_state {
	cbkt *v;
	size_t n, cap;
	uint64_t *idx; /* (hash >> 32) << 32 | (index + 1) */
	size_t icap;
} comp_state;

/* ---- keys ---- */

static void
key_put(cm_buf *b, const cval *v)
{
	cm_buf_put_u8(b, v->tag);
	if (v->tag == CV_LONG)
		cm_buf_put_u64(b, (uint64_t)v->l);
	else if (v->tag == CV_DOUBLE)
		agg_put_double(b, v->d);
	else if (v->tag == CV_STR || v->tag == CV_IP) {
		cm_buf_put_u32(b, (uint32_t)v->n);
		cm_buf_put(b, v->s, v->n);
	}
}

static bool
key_get(const uint8_t *k, size_t n, size_t nsrc, cval *out)
{
	cm_rd r;
	cm_rd_init(&r, k, n);
	for (size_t i = 0; i < nsrc; i++) {
		uint8_t tag;
		if (!cm_rd_u8(&r, &tag))
			return false;
		out[i].tag = tag;
		if (tag == CV_LONG) {
			uint64_t u;
			if (!cm_rd_u64(&r, &u))
				return false;
			out[i].l = (int64_t)u;
			out[i].d = (double)out[i].l;
		} else if (tag == CV_DOUBLE) {
			if (!agg_get_double(&r, &out[i].d))
				return false;
		} else if (tag == CV_STR || tag == CV_IP) {
			uint32_t len;
			const uint8_t *s;
			if (!cm_rd_u32(&r, &len) || !cm_rd_bytes(&r, len, &s))
				return false;
			out[i].s = s;
			out[i].n = len;
		} else if (tag != CV_NULL)
			return false;
	}
	return !r.bad && cm_rd_left(&r) == 0;
}

static int
cval_cmp(const cval *a, const cval *b)
{
	if (a->tag == CV_NULL || b->tag == CV_NULL)
		return (a->tag != CV_NULL) - (b->tag != CV_NULL);
	uint8_t ipa[ST_IP_LEN], ipb[ST_IP_LEN];
	if ((a->tag == CV_IP) != (b->tag == CV_IP) && (a->tag == CV_IP || b->tag == CV_IP)) {
		/* an after key's address (text) against a collected one (bytes) */
		const cval *t = a->tag == CV_IP ? b : a;
		uint8_t *dst = a->tag == CV_IP ? ipb : ipa;
		if (t->tag == CV_STR && st_ip_parse((const char *)t->s, t->n, dst)) {
			const uint8_t *x = a->tag == CV_IP ? a->s : ipa;
			const uint8_t *y = b->tag == CV_IP ? b->s : ipb;
			return memcmp(x, y, ST_IP_LEN);
		}
	}
	bool as = a->tag == CV_STR || a->tag == CV_IP, bs = b->tag == CV_STR || b->tag == CV_IP;
	if (as != bs)
		return as ? 1 : -1;
	if (as) {
		size_t n = a->n < b->n ? a->n : b->n;
		int c = memcmp(a->s, b->s, n);
		return c ? c : (a->n > b->n) - (a->n < b->n);
	}
	if (a->tag == CV_LONG && b->tag == CV_LONG)
		return (a->l > b->l) - (a->l < b->l);
	return (a->d > b->d) - (a->d < b->d);
}

static int
key_cmp(const comp_params *p, const uint8_t *x, size_t xn, const uint8_t *y, size_t yn)
{
	cval a[COMP_MAX_SOURCES], b[COMP_MAX_SOURCES];
	if (!key_get(x, xn, p->nsrc, a) || !key_get(y, yn, p->nsrc, b))
		return 0;
	for (size_t i = 0; i < p->nsrc; i++) {
		int c = cval_cmp(&a[i], &b[i]);
		if (c)
			return p->src[i].desc ? -c : c;
	}
	return 0;
}

/* ---- parsing ---- */

static void
comp_free_params(void *pp)
{
	comp_params *p = pp;
	for (size_t i = 0; i < p->nsrc; i++)
		sr_agg_free(p->src[i].spec);
	cm_free(AGG_MEM, p->after);
	cm_free(AGG_MEM, p);
}

static cm_err
source_parse(sr_agg *a, csrc *s, const char *name, const cJSON *def, cm_error *err)
{
	if (!cJSON_IsObject(def) || !def->child || def->child->next || !cJSON_IsObject(def->child))
		return cm_error_set(
		    err, CM_EPARSE,
		    "[composite] each source of [%s] must be an object with one type", a->name);
	const cJSON *body = def->child;
	const char *type = body->string;
	sr_agg *h = cm_calloc(AGG_MEM, 1, sizeof *h);
	s->spec = h;
	h->name = cm_strdup(AGG_MEM, name);
	if (!strcmp(type, "terms")) {
		s->type = CS_TERMS;
		h->kind = AGG_TERMS;
		h->ops = &agg_ops_terms;
	} else if (!strcmp(type, "histogram")) {
		s->type = CS_HIST;
		h->kind = AGG_HISTOGRAM;
		h->ops = &agg_ops_histogram;
	} else if (!strcmp(type, "date_histogram")) {
		s->type = CS_DATE;
		h->kind = AGG_DATE_HISTOGRAM;
		h->ops = &agg_ops_date_histogram;
	} else if (!strcmp(type, "geotile_grid")) {
		return cm_error_set(
		    err, CM_EINVAL,
		    "[composite] source type [geotile_grid] is not supported by Shoal");
	} else
		return cm_error_set(err, CM_EPARSE, "Unknown source type [%s] in [composite] [%s]",
		                    type, a->name);
	cJSON *rest = cJSON_CreateObject();
	cm_err rc = CM_OK;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "field")) {
			if (!cJSON_IsString(c)) {
				rc = cm_error_set(err, CM_EPARSE, "[%s] field must be a string",
				                  type);
				break;
			}
			h->field = cm_strdup(AGG_MEM, c->valuestring);
		} else if (!strcmp(k, "order")) {
			if (!cJSON_IsString(c) ||
			    (strcmp(c->valuestring, "asc") && strcmp(c->valuestring, "desc"))) {
				rc = cm_error_set(err, CM_EPARSE, "Unknown order [%s] in [%s]",
				                  cJSON_IsString(c) ? c->valuestring : "?", name);
				break;
			}
			s->desc = !strcmp(c->valuestring, "desc");
		} else if (!strcmp(k, "missing_bucket")) {
			if ((rc = agg_parse_bool(c, type, k, &s->missing_bucket, err)))
				break;
		} else if (!strcmp(k, "format") && s->type == CS_DATE) {
			if (!cJSON_IsString(c)) {
				rc = cm_error_set(err, CM_EPARSE, "[%s] format must be a string",
				                  type);
				break;
			}
			h->format = cm_strdup(AGG_MEM, c->valuestring);
		} else if (!strcmp(k, "script")) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "[script] is not supported in aggregation [%s]", a->name);
			break;
		} else if (s->type != CS_TERMS &&
		           (!strcmp(k, "interval") || !strcmp(k, "calendar_interval") ||
		            !strcmp(k, "fixed_interval") || !strcmp(k, "time_zone") ||
		            !strcmp(k, "offset"))) {
			cJSON_AddItemToObject(rest, k, cJSON_Duplicate(c, true));
		} else {
			rc = cm_error_set(err, CM_EPARSE, "[%s] unknown field [%s]", type, k);
			break;
		}
	}
	if (!rc && !h->field)
		rc = cm_error_set(
		    err, CM_EINVAL,
		    "Required one of fields [field, script], but none were specified.");
	if (!rc && s->type != CS_TERMS)
		rc = h->ops->parse(h, rest, err);
	cJSON_Delete(rest);
	return rc;
}

/* "after": one value per source, by name */
static cm_err
after_parse(sr_agg *a, comp_params *p, const cJSON *after, cm_error *err)
{
	if (!cJSON_IsObject(after))
		return cm_error_set(err, CM_EPARSE, "[composite] failed to parse field [after]");
	size_t n = (size_t)cJSON_GetArraySize(after);
	if (n != p->nsrc)
		return cm_error_set(err, CM_EINVAL,
		                    "[after] has %zu value(s) but [sources] has %zu", n, p->nsrc);
	cm_buf b;
	cm_buf_init(&b, AGG_MEM);
	for (size_t i = 0; i < p->nsrc; i++) {
		const csrc *s = &p->src[i];
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(after, s->spec->name);
		if (!v) {
			cm_buf_free(&b);
			return cm_error_set(err, CM_EINVAL, "Missing value for [after.%s]",
			                    s->spec->name);
		}
		cval cv = {0};
		if (cJSON_IsNull(v)) {
			if (!s->missing_bucket) {
				cm_buf_free(&b);
				return cm_error_set(
				    err, CM_EINVAL,
				    "Cannot set after key in the composite aggregation [%s] - "
				    "invalid value for [%s]: null (missing_bucket is false)",
				    a->name, s->spec->name);
			}
			cv.tag = CV_NULL;
		} else if (cJSON_IsNumber(v)) {
			double d = v->valuedouble;
			if (s->type != CS_HIST && d > -9.2e18 && d < 9.2e18 && d == (double)(int64_t)d) {
				cv.tag = CV_LONG;
				cv.l = (int64_t)d;
			} else {
				cv.tag = CV_DOUBLE;
				cv.d = d;
			}
		} else if (cJSON_IsString(v)) {
			int64_t ms;
			if (s->type == CS_DATE) {
				if (!agg_date_parse(v->valuestring, s->spec->format,
				                    agg_hist_tz(s->spec), false, &ms)) {
					cm_buf_free(&b);
					return cm_error_set(
					    err, CM_EINVAL,
					    "failed to parse date field [%s] of [after.%s]",
					    v->valuestring, s->spec->name);
				}
				cv.tag = CV_LONG;
				cv.l = ms;
			} else if (s->type == CS_HIST) {
				char *end;
				cv.d = strtod(v->valuestring, &end);
				cv.tag = CV_DOUBLE;
				if (end == v->valuestring || *end) {
					cm_buf_free(&b);
					return cm_error_set(
					    err, CM_EINVAL,
					    "Cannot set after key in the composite aggregation [%s]"
					    " - invalid value for [%s]",
					    a->name, s->spec->name);
				}
			} else {
				cv.tag = CV_STR;
				cv.s = (const uint8_t *)v->valuestring;
				cv.n = strlen(v->valuestring);
			}
		} else if (cJSON_IsBool(v)) {
			cv.tag = CV_LONG;
			cv.l = cJSON_IsTrue(v);
		} else {
			cm_buf_free(&b);
			return cm_error_set(
			    err, CM_EINVAL,
			    "Cannot set after key in the composite aggregation [%s] - "
			    "invalid value for [%s]",
			    a->name, s->spec->name);
		}
		key_put(&b, &cv);
	}
	p->after = cm_malloc(AGG_MEM, b.len ? b.len : 1);
	memcpy(p->after, b.data, b.len);
	p->after_len = b.len;
	cm_buf_free(&b);
	return CM_OK;
}

static cm_err
comp_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	comp_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	p->size = 10;
	const cJSON *sources = NULL, *after = NULL;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "sources"))
			sources = c;
		else if (!strcmp(k, "after"))
			after = c;
		else if (!strcmp(k, "size")) {
			int64_t v;
			if (agg_parse_int(c, a->name, k, 1, SR_MAX_BUCKETS, &v, err))
				return err->code;
			p->size = (uint64_t)v;
		} else
			return agg_unknown_param(a, k, err);
	}
	if (!cJSON_IsArray(sources) || cJSON_GetArraySize(sources) == 0)
		return cm_error_set(err, CM_EINVAL, "Composite [sources] cannot be null or empty");
	if (cJSON_GetArraySize(sources) > COMP_MAX_SOURCES)
		return cm_error_set(err, CM_EINVAL, "[composite] accepts at most %d sources",
		                    COMP_MAX_SOURCES);
	for (const cJSON *c = sources->child; c; c = c->next) {
		if (!cJSON_IsObject(c) || !c->child || c->child->next)
			return cm_error_set(
			    err, CM_EPARSE,
			    "[composite] each source of [%s] must be an object with one "
			    "name",
			    a->name);
		const char *name = c->child->string;
		for (size_t i = 0; i < p->nsrc; i++)
			if (!strcmp(p->src[i].spec->name, name))
				return cm_error_set(
				    err, CM_EINVAL,
				    "Composite source names must be unique, found duplicates: "
				    "[%s]",
				    name);
		csrc *s = &p->src[p->nsrc++];
		cm_err rc = source_parse(a, s, name, c->child, err);
		if (rc)
			return rc;
	}
	if (after)
		return after_parse(a, p, after, err);
	return CM_OK;
}

/* ---- state ---- */

static void *
comp_new(const sr_agg *a)
{
	(void)a;
	return cm_calloc(AGG_MEM, 1, sizeof(comp_state));
}

static void
comp_clear(const sr_agg *a, comp_state *s)
{
	for (size_t i = 0; i < s->n; i++) {
		cm_free(AGG_MEM, s->v[i].key);
		agg_subs_free(a, s->v[i].subs);
	}
	cm_free(AGG_MEM, s->v);
	cm_free(AGG_MEM, s->idx);
	memset(s, 0, sizeof *s);
}

static void
comp_free(const sr_agg *a, void *d)
{
	comp_clear(a, d);
	cm_free(AGG_MEM, d);
}

static void
comp_rehash(comp_state *s, size_t icap)
{
	cm_free(AGG_MEM, s->idx);
	s->idx = cm_calloc(AGG_MEM, icap, sizeof *s->idx);
	s->icap = icap;
	for (size_t i = 0; i < s->n; i++) {
		uint64_t h = XXH3_64bits(s->v[i].key, s->v[i].klen);
		size_t j = (size_t)h & (icap - 1);
		while (s->idx[j])
			j = (j + 1) & (icap - 1);
		s->idx[j] = (h >> 32) << 32 | (uint64_t)(i + 1);
	}
}

/* The bucket of key k (created when absent, NULL when the guard trips). */
static cbkt *
comp_get(comp_state *s, agg_root *root, const sr_agg *a, const uint8_t *k, size_t n)
{
	if ((s->n + 1) * 2 > s->icap)
		comp_rehash(s, s->icap ? s->icap * 2 : 64);
	uint64_t h = XXH3_64bits(k, n);
	size_t j = (size_t)h & (s->icap - 1);
	while (s->idx[j]) {
		uint64_t e = s->idx[j];
		if (e >> 32 == h >> 32) {
			cbkt *b = &s->v[(e & 0xffffffffu) - 1];
			if (b->klen == n && !memcmp(b->key, k, n))
				return b;
		}
		j = (j + 1) & (s->icap - 1);
	}
	if (root && !agg_bucket_guard(root, 1))
		return NULL;
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->v = cm_realloc(AGG_MEM, s->v, s->cap * sizeof *s->v);
	}
	cbkt *b = &s->v[s->n];
	b->key = cm_malloc(AGG_MEM, n ? n : 1);
	memcpy(b->key, k, n);
	b->klen = (uint32_t)n;
	b->count = 0;
	b->subs = agg_subs_new(a);
	s->idx[j] = (h >> 32) << 32 | (uint64_t)(s->n + 1);
	s->n++;
	return b;
}

/* ---- collection ---- */

typedef struct comp_seg {
	agg_rt rt[COMP_MAX_SOURCES];
	cval vals[COMP_MAX_SOURCES][COMP_MAX_VALUES];
	int nvals[COMP_MAX_SOURCES];
	cm_buf key;
} comp_seg;

static cm_err
comp_seg_begin(agg_rt *rt, cm_error *err)
{
	const comp_params *p = rt->spec->p;
	comp_seg *k = cm_calloc(AGG_MEM, 1, sizeof *k);
	cm_buf_init(&k->key, AGG_MEM);
	rt->kd = k;
	for (size_t i = 0; i < p->nsrc; i++) {
		cm_err rc = agg_rt_field(rt->root, &k->rt[i], p->src[i].spec, rt->ctx);
		if (rc)
			return rc;
		if (st_field_type_is_range(k->rt[i].range_type))
			return cm_error_set(
			    err, CM_EINVAL,
			    "Field [%s] of type [%s] is not supported for aggregation "
			    "[composite]",
			    p->src[i].spec->field, st_field_type_name(k->rt[i].range_type));
		if (p->src[i].type != CS_TERMS && !agg_field_numeric_or_fail(&k->rt[i], err))
			return CM_EINVAL;
	}
	return CM_OK;
}

static void
comp_seg_end(agg_rt *rt)
{
	comp_seg *k = rt->kd;
	if (!k)
		return;
	const comp_params *p = rt->spec->p;
	for (size_t i = 0; i < p->nsrc; i++) {
		st_colblock_free(&k->rt[i].cb);
		cm_free(AGG_MEM, k->rt[i].conv_buf);
	}
	cm_buf_free(&k->key);
	cm_free(AGG_MEM, k);
}

static int64_t
clamp_ms(double d)
{
	return d != d ? 0 : d < -9.2e18 ? INT64_MIN / 2 : d > 9.2e18 ? INT64_MAX / 2 : (int64_t)d;
}

/* The values of doc for source i, rounded and without repeats; false when
 * the doc has none and no missing bucket. */
static bool
source_values(agg_rt *rt, comp_seg *k, const csrc *s, size_t i, uint32_t doc)
{
	agg_rt *sr = &k->rt[i];
	const int64_t *raw;
	int n = sr->fi ? agg_values(sr, doc, &raw) : 0;
	int m = 0;
	for (int j = 0; j < n && m < COMP_MAX_VALUES; j++) {
		cval v = {0};
		if (s->type == CS_TERMS) {
			if (sr->is_keyword) {
				const uint8_t *t;
				size_t len;
				if (st_ord_term(rt->ctx->txn, sr->fi, (uint64_t)raw[j], &t, &len)) {
					cm_error_set(&rt->root->err, CM_ECORRUPT,
					             "could not read term of [%s]", s->spec->field);
					return false;
				}
				v.tag = sr->fi->type == ST_FT_IP && len == ST_IP_LEN ? CV_IP : CV_STR;
				v.s = t;
				v.n = len;
			} else if (sr->is_double) {
				v.tag = CV_DOUBLE;
				v.d = agg_num(sr, raw[j]);
			} else {
				v.tag = CV_LONG;
				v.l = raw[j];
			}
		} else if (s->type == CS_HIST) {
			v.tag = CV_DOUBLE;
			v.d = agg_hist_round_value(s->spec, agg_num(sr, raw[j]));
		} else {
			v.tag = CV_LONG;
			v.l = agg_dh_round(s->spec,
			                   sr->is_double ? clamp_ms(agg_num(sr, raw[j])) : raw[j]);
		}
		if (m && cval_cmp(&k->vals[i][m - 1], &v) == 0)
			continue;
		k->vals[i][m++] = v;
	}
	if (!m) {
		if (!s->missing_bucket)
			return false;
		k->vals[i][0] = (cval){.tag = CV_NULL};
		m = 1;
	}
	k->nvals[i] = m;
	return true;
}

static void
comp_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	const sr_agg *a = rt->spec;
	const comp_params *p = a->p;
	comp_seg *k = rt->kd;
	comp_state *s = n->d;
	for (size_t d = 0; d < cnt; d++) {
		bool ok = true;
		for (size_t i = 0; i < p->nsrc && ok; i++)
			ok = source_values(rt, k, &p->src[i], i, docs[d]);
		if (!ok || rt->root->err.code)
			continue;
		uint64_t combos = 1;
		for (size_t i = 0; i < p->nsrc && combos <= COMP_MAX_COMBOS; i++)
			combos *= (uint64_t)k->nvals[i];
		if (combos > COMP_MAX_COMBOS) {
			cm_error_set(&rt->root->err, CM_ELIMIT,
			             "[%s] a document has more than %d composite keys", a->name,
			             COMP_MAX_COMBOS);
			return;
		}
		int at[COMP_MAX_SOURCES] = {0};
		for (;;) {
			k->key.len = 0;
			for (size_t i = 0; i < p->nsrc; i++)
				key_put(&k->key, &k->vals[i][at[i]]);
			if (!p->after ||
			    key_cmp(p, k->key.data, k->key.len, p->after, p->after_len) > 0) {
				cbkt *b = comp_get(s, rt->root, a, k->key.data, k->key.len);
				if (!b)
					return;
				b->count++;
				if (b->subs)
					agg_subs_collect(rt->root, a, b->subs, &docs[d],
					                 scores ? &scores[d] : NULL, 1);
			}
			size_t i = p->nsrc;
			while (i > 0 && ++at[i - 1] == k->nvals[i - 1])
				at[--i] = 0;
			if (i == 0)
				break;
		}
	}
}

/* ---- shard cut, merge ---- */

static int
bkt_cmp(const void *x, const void *y, void *params)
{
	const cbkt *a = *(cbkt *const *)x, *b = *(cbkt *const *)y;
	return key_cmp(params, a->key, a->klen, b->key, b->klen);
}

static cbkt **
comp_sorted(const sr_agg *a, const comp_state *s)
{
	cbkt **v = cm_calloc(AGG_MEM, s->n ? s->n : 1, sizeof *v);
	for (size_t i = 0; i < s->n; i++)
		v[i] = &s->v[i];
	qsort_r(v, s->n, sizeof *v, bkt_cmp, a->p);
	return v;
}

/* Keeps the first `size` keys (and finishes their sub-states). */
static void
comp_finish(const sr_agg *a, agg_node *n)
{
	const comp_params *p = a->p;
	comp_state *s = n->d;
	if (s->n > p->size) {
		cbkt **v = comp_sorted(a, s);
		comp_state keep = {0};
		keep.cap = p->size;
		keep.v = cm_calloc(AGG_MEM, keep.cap, sizeof *keep.v);
		for (size_t i = 0; i < s->n; i++) {
			if (i < p->size) {
				keep.v[keep.n++] = *v[i];
			} else {
				cm_free(AGG_MEM, v[i]->key);
				agg_subs_free(a, v[i]->subs);
			}
		}
		cm_free(AGG_MEM, v);
		cm_free(AGG_MEM, s->v);
		cm_free(AGG_MEM, s->idx);
		*s = keep;
		comp_rehash(s, 64);
		while (s->n * 2 > s->icap)
			comp_rehash(s, s->icap * 2);
	}
	for (size_t i = 0; i < s->n; i++)
		agg_subs_shard_finish(a, s->v[i].subs);
}

static void
comp_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	comp_state *x = into->d, *y = from->d;
	for (size_t i = 0; i < y->n; i++) {
		cbkt *b = comp_get(x, NULL, a, y->v[i].key, y->v[i].klen);
		b->count += y->v[i].count;
		if (b->subs)
			agg_subs_merge(a, b->subs, y->v[i].subs);
	}
	comp_clear(a, y);
}

/* ---- render ---- */

static void
put_key(const sr_agg *a, cm_buf *b, const uint8_t *key, size_t klen)
{
	const comp_params *p = a->p;
	cval v[COMP_MAX_SOURCES];
	if (!key_get(key, klen, p->nsrc, v)) {
		cm_buf_put(b, "{}", 2);
		return;
	}
	cm_buf_put_u8(b, '{');
	for (size_t i = 0; i < p->nsrc; i++) {
		const csrc *s = &p->src[i];
		if (i)
			cm_buf_put_u8(b, ',');
		agg_json_str(b, s->spec->name, strlen(s->spec->name));
		cm_buf_put_u8(b, ':');
		switch (v[i].tag) {
		case CV_NULL:
			cm_buf_put(b, "null", 4);
			break;
		case CV_STR:
			agg_json_str(b, (const char *)v[i].s, v[i].n);
			break;
		case CV_IP: {
			char txt[64];
			st_ip_format(v[i].s, txt, sizeof txt);
			agg_json_str(b, txt, strlen(txt));
			break;
		}
		case CV_DOUBLE:
			agg_json_double(b, v[i].d);
			break;
		default:
			if (s->type == CS_DATE && s->spec->format) {
				char buf[128];
				agg_date_format(agg_hist_tz(s->spec), s->spec->format, v[i].l, buf,
				                sizeof buf);
				agg_json_str(b, buf, strlen(buf));
			} else
				cm_buf_printf(b, "%lld", (long long)v[i].l);
		}
	}
	cm_buf_put_u8(b, '}');
}

static cm_err
comp_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const comp_params *p = a->p;
	const comp_state *s = n->d;
	cbkt **v = comp_sorted(a, s);
	size_t m = s->n < p->size ? s->n : p->size;
	r->buckets += m;
	if (r->buckets > SR_MAX_BUCKETS) {
		cm_free(AGG_MEM, v);
		agg_too_many_buckets(r->err, r->buckets);
		return CM_ELIMIT;
	}
	cm_buf *b = r->out;
	cm_buf_put_u8(b, '{');
	if (m) {
		cm_buf_put(b, "\"after_key\":", 12);
		put_key(a, b, v[m - 1]->key, v[m - 1]->klen);
		cm_buf_put_u8(b, ',');
	}
	cm_buf_put(b, "\"buckets\":[", 11);
	for (size_t i = 0; i < m; i++) {
		if (i)
			cm_buf_put_u8(b, ',');
		cm_buf_put(b, "{\"key\":", 7);
		put_key(a, b, v[i]->key, v[i]->klen);
		cm_buf_printf(b, ",\"doc_count\":%llu", (unsigned long long)v[i]->count);
		cm_err rc = agg_subs_render(a, v[i]->subs, r);
		if (rc) {
			cm_free(AGG_MEM, v);
			return rc;
		}
		cm_buf_put_u8(b, '}');
	}
	cm_buf_put(b, "]}", 2);
	cm_free(AGG_MEM, v);
	return CM_OK;
}

/* ---- wire ---- */

static void
comp_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const comp_state *s = n->d;
	cm_buf_put_varint(b, s->n);
	for (size_t i = 0; i < s->n; i++) {
		cm_buf_put_str(b, (const char *)s->v[i].key, s->v[i].klen);
		cm_buf_put_varint(b, s->v[i].count);
		agg_subs_encode(a, s->v[i].subs, b);
	}
}

static bool
comp_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	const comp_params *p = a->p;
	comp_state *s = n->d;
	uint64_t nb;
	if (!agg_get_count(r, (uint64_t)SR_MAX_BUCKETS * 16, &nb))
		return false;
	for (uint64_t i = 0; i < nb; i++) {
		const char *k;
		size_t kn;
		uint64_t count;
		cval tmp[COMP_MAX_SOURCES];
		if (!cm_rd_str(r, &k, &kn) || !key_get((const uint8_t *)k, kn, p->nsrc, tmp) ||
		    !cm_rd_varint(r, &count))
			return false;
		cbkt *b = comp_get(s, NULL, a, (const uint8_t *)k, kn);
		if (b->count || !count)
			return false; /* a repeated key or an empty bucket: not ours */
		b->count = count;
		if (b->subs && !agg_subs_decode(a, b->subs, r))
			return false;
	}
	return true;
}

const agg_ops agg_ops_composite = {
    .name = "composite",
    .bucket = true,
    .needs_field = false,
    .parse = comp_parse,
    .free_params = comp_free_params,
    .state_new = comp_new,
    .state_free = comp_free,
    .seg_begin = comp_seg_begin,
    .collect = comp_collect,
    .seg_end = comp_seg_end,
    .shard_finish = comp_finish,
    .merge = comp_merge,
    .render = comp_render,
    .encode = comp_encode,
    .decode = comp_decode,
};
