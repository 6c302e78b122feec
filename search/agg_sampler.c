/* sampler and diversified_sampler: the sub-aggregations see only the best
 * shard_size docs of each shard by score (diversified: at most
 * max_docs_per_value of them per value of a field).
 *
 * Which docs are best is known only once the whole shard is collected, so
 * collection keeps candidates (score, segment, doc, value) and
 * sr_agg_state_shard_end replays the chosen ones, segment by segment, into
 * the sub-aggregations while the shard's segments are still open (ES's
 * deferring collector does the same). Candidates are pruned as they pile
 * up: a doc the greedy choice leaves out now is never chosen later, since
 * more docs only add competitors. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "agg_int.h"

typedef struct smp_params {
	int64_t shard_size;         /* 100 */
	int64_t max_docs_per_value; /* diversified: 1 */
} smp_params;

typedef struct smp_cand {
	float score;
	uint32_t doc;
	const sr_seg_ctx *ctx; /* the shard's segment, open until the shard ends */
	uint64_t key;          /* diversified: hash of the value (0: no value) */
} smp_cand;

/* count and subs first: agg_single_bucket_value reads it as a single bucket */
typedef struct smp_state {
	uint64_t count;
	agg_node **subs;
	smp_cand *c;
	size_t n, cap;
	bool pending; /* listed in the runtime's pending nodes */
} smp_state;

/* rt->persist: the states holding candidates, replayed at shard end */
typedef struct smp_pending {
	agg_node **v;
	size_t n, cap;
} smp_pending;

static cm_err
smp_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	smp_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	p->shard_size = 100;
	p->max_docs_per_value = 1;
	a->p = p;
	bool div = a->kind == AGG_DIVERSIFIED_SAMPLER;
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "shard_size")) {
			if (agg_parse_int(c, a->ops->name, "shard_size", INT32_MIN, INT32_MAX,
			                  &p->shard_size, err))
				return err->code;
			continue;
		}
		if (div && !strcmp(c->string, "field"))
			continue;
		if (div && !strcmp(c->string, "max_docs_per_value")) {
			if (agg_parse_int(c, a->ops->name, "max_docs_per_value", INT32_MIN,
			                  INT32_MAX, &p->max_docs_per_value, err))
				return err->code;
			continue;
		}
		if (div && (!strcmp(c->string, "execution_hint") || !strcmp(c->string, "missing")))
			continue; /* a hint only; missing values are one value */
		if (div && !strcmp(c->string, "script"))
			return cm_error_set(err, CM_EINVAL,
			                    "[script] is not supported in aggregation [%s]",
			                    a->name);
		return agg_unknown_param(a, c->string, err);
	}
	if (p->shard_size <= 0)
		return cm_error_set(err, CM_EINVAL,
		                    "[shard_size] must be greater than 0. Found [%lld] in [%s]",
		                    (long long)p->shard_size, a->name);
	if (p->max_docs_per_value <= 0)
		return cm_error_set(
		    err, CM_EINVAL,
		    "[max_docs_per_value] must be greater than 0. Found [%lld] in [%s]",
		    (long long)p->max_docs_per_value, a->name);
	return CM_OK;
}

static void
smp_free_params(void *p)
{
	cm_free(AGG_MEM, p);
}

static void *
smp_new(const sr_agg *a)
{
	smp_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->subs = agg_subs_new(a);
	return s;
}

static void
smp_free(const sr_agg *a, void *d)
{
	smp_state *s = d;
	agg_subs_free(a, s->subs);
	cm_free(AGG_MEM, s->c);
	cm_free(AGG_MEM, s);
}

static void
smp_rt_free(agg_rt *rt)
{
	smp_pending *p = rt->persist;
	cm_free(AGG_MEM, p->v);
	cm_free(AGG_MEM, p);
	rt->persist = NULL;
}

static cm_err
smp_seg_begin(agg_rt *rt, cm_error *err)
{
	if (rt->spec->kind == AGG_DIVERSIFIED_SAMPLER && rt->fi && rt->fi->type == ST_FT_GEO_POINT)
		return cm_error_set(
		    err, CM_EINVAL,
		    "Field [%s] of type [geo_point] is not supported for aggregation "
		    "[diversified_sampler]",
		    rt->spec->field);
	return CM_OK;
}

/* best first: score desc, then the shard's doc order (segment, doc) */
static int
cand_cmp(const void *x, const void *y)
{
	const smp_cand *a = x, *b = y;
	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	uint64_t ga = ((uint64_t)a->ctx->seg_index << 32) | a->doc;
	uint64_t gb = ((uint64_t)b->ctx->seg_index << 32) | b->doc;
	return (ga > gb) - (ga < gb);
}

static int
key_cmp(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

/* Keeps the greedy choice: best first, at most max per key (diversified),
 * at most shard_size. */
static void
smp_prune(const sr_agg *a, smp_state *s)
{
	const smp_params *p = a->p;
	qsort(s->c, s->n, sizeof *s->c, cand_cmp);
	size_t keep = 0;
	if (a->kind != AGG_DIVERSIFIED_SAMPLER) {
		keep = s->n < (size_t)p->shard_size ? s->n : (size_t)p->shard_size;
	} else {
		/* per-key counts in a sorted array of (key, count) */
		uint64_t *keys = cm_malloc(AGG_MEM, (s->n ? s->n : 1) * sizeof *keys);
		for (size_t i = 0; i < s->n; i++)
			keys[i] = s->c[i].key;
		qsort(keys, s->n, sizeof *keys, key_cmp);
		size_t nk = 0;
		for (size_t i = 0; i < s->n; i++)
			if (!nk || keys[nk - 1] != keys[i])
				keys[nk++] = keys[i];
		uint32_t *cnt = cm_calloc(AGG_MEM, nk ? nk : 1, sizeof *cnt);
		for (size_t i = 0; i < s->n && keep < (size_t)p->shard_size; i++) {
			const uint64_t *k = bsearch(&s->c[i].key, keys, nk, sizeof *keys, key_cmp);
			uint32_t *c = &cnt[k - keys];
			if (*c >= (uint64_t)p->max_docs_per_value)
				continue;
			(*c)++;
			s->c[keep++] = s->c[i];
		}
		cm_free(AGG_MEM, cnt);
		cm_free(AGG_MEM, keys);
	}
	s->n = keep;
}

static void
smp_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	smp_state *s = n->d;
	const sr_agg *a = rt->spec;
	const smp_params *p = a->p;
	bool div = a->kind == AGG_DIVERSIFIED_SAMPLER;
	if (!s->pending) {
		if (!rt->persist)
			rt->persist = cm_calloc(AGG_MEM, 1, sizeof(smp_pending));
		smp_pending *pl = rt->persist;
		if (pl->n == pl->cap) {
			pl->cap = pl->cap ? pl->cap * 2 : 8;
			pl->v = cm_realloc(AGG_MEM, pl->v, pl->cap * sizeof *pl->v);
		}
		pl->v[pl->n++] = n;
		s->pending = true;
	}
	for (size_t i = 0; i < cnt; i++) {
		uint64_t key = 0;
		if (div) {
			const int64_t *v;
			int k = agg_values(rt, docs[i], &v);
			if (k > 1) {
				cm_error_set(
				    &rt->root->err, CM_EINVAL,
				    "Sample diversifying key must be a single valued-field");
				return;
			}
			if (k == 1) {
				const uint8_t *t;
				size_t len;
				if (rt->is_keyword &&
				    st_ord_term(rt->ctx->txn, rt->fi, (uint64_t)v[0], &t, &len) ==
				        CM_OK)
					key = XXH3_64bits(t, len) | 1;
				else
					key = XXH3_64bits(&v[0], sizeof v[0]) | 1;
			}
		}
		if (s->n == s->cap) {
			s->cap = s->cap ? s->cap * 2 : 64;
			s->c = cm_realloc(AGG_MEM, s->c, s->cap * sizeof *s->c);
		}
		s->c[s->n++] = (smp_cand){scores ? scores[i] : 1.0f, docs[i], rt->ctx, key};
		if (s->n >= 4 * (size_t)p->shard_size + 1024)
			smp_prune(a, s);
	}
}

static int
cand_doc_cmp(const void *x, const void *y)
{
	const smp_cand *a = x, *b = y;
	uint64_t ga = ((uint64_t)a->ctx->seg_index << 32) | a->doc;
	uint64_t gb = ((uint64_t)b->ctx->seg_index << 32) | b->doc;
	return (ga > gb) - (ga < gb);
}

/* Feeds a state's chosen docs to its sub-aggregations, segment by segment. */
static cm_err
smp_replay(agg_root *root, const sr_agg *a, smp_state *s)
{
	smp_prune(a, s);
	s->count += s->n;
	qsort(s->c, s->n, sizeof *s->c, cand_doc_cmp);
	uint32_t docs[256];
	float sc[256];
	cm_err rc = CM_OK;
	for (size_t i = 0; i < s->n && !rc;) {
		const sr_seg_ctx *ctx = s->c[i].ctx;
		root->epoch++;
		if ((rc = agg_subs_rt_begin(root, a, ctx)))
			break;
		while (i < s->n && s->c[i].ctx == ctx) {
			size_t k = 0;
			for (; k < 256 && i < s->n && s->c[i].ctx == ctx; i++, k++) {
				docs[k] = s->c[i].doc;
				sc[k] = s->c[i].score;
			}
			if (s->subs)
				agg_subs_collect(root, a, s->subs, docs, sc, k);
		}
		agg_subs_rt_end(root, a);
	}
	cm_free(AGG_MEM, s->c);
	s->c = NULL;
	s->n = s->cap = 0;
	return rc ? rc : root->err.code;
}

/* Pre-order: an outer sampler's replay may fill an inner one's candidates. */
cm_err
agg_sampler_shard_end(agg_root *root, const sr_agg *a)
{
	if (a->kind == AGG_SAMPLER || a->kind == AGG_DIVERSIFIED_SAMPLER) {
		agg_rt *rt = &root->rts[a->id];
		smp_pending *pl = rt->persist;
		for (size_t i = 0; pl && i < pl->n; i++) {
			smp_state *s = pl->v[i]->d;
			s->pending = false;
			cm_err rc = smp_replay(root, a, s);
			if (rc)
				return rc;
		}
		if (pl)
			pl->n = 0;
	}
	for (size_t i = 0; i < a->nsubs; i++) {
		cm_err rc = agg_sampler_shard_end(root, a->subs[i]);
		if (rc)
			return rc;
	}
	return CM_OK;
}

static void
smp_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	smp_state *x = into->d, *y = from->d;
	x->count += y->count;
	if (x->subs)
		agg_subs_merge(a, x->subs, y->subs);
}

static void
smp_finish(const sr_agg *a, agg_node *n)
{
	smp_state *s = n->d;
	agg_subs_shard_finish(a, s->subs);
}

static cm_err
smp_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const smp_state *s = n->d;
	cm_buf_printf(r->out, "{\"doc_count\":%llu", (unsigned long long)s->count);
	cm_err rc = agg_subs_render(a, s->subs, r);
	cm_buf_put_u8(r->out, '}');
	return rc;
}

static void
smp_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const smp_state *s = n->d;
	cm_buf_put_varint(b, s->count);
	agg_subs_encode(a, s->subs, b);
}

static bool
smp_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	smp_state *s = n->d;
	return cm_rd_varint(r, &s->count) && agg_subs_decode(a, s->subs, r);
}

const agg_ops agg_ops_sampler = {
    .name = "sampler",
    .bucket = true,
    .needs_field = false,
    .parse = smp_parse,
    .free_params = smp_free_params,
    .state_new = smp_new,
    .state_free = smp_free,
    .seg_begin = smp_seg_begin,
    .collect = smp_collect,
    .shard_finish = smp_finish,
    .merge = smp_merge,
    .render = smp_render,
    .encode = smp_encode,
    .decode = smp_decode,
    .rt_free = smp_rt_free,
};

const agg_ops agg_ops_diversified_sampler = {
    .name = "diversified_sampler",
    .bucket = true,
    .needs_field = true,
    .parse = smp_parse,
    .free_params = smp_free_params,
    .state_new = smp_new,
    .state_free = smp_free,
    .seg_begin = smp_seg_begin,
    .collect = smp_collect,
    .shard_finish = smp_finish,
    .merge = smp_merge,
    .render = smp_render,
    .encode = smp_encode,
    .decode = smp_decode,
    .rt_free = smp_rt_free,
};
