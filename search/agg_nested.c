/* nested and reverse_nested aggregations. A segment keeps each nested
 * object as a hidden doc right before its parent (search/nested.c says
 * how the join reads them). `nested` turns each collected parent into its
 * live children of the path and feeds those to the sub-aggregations;
 * `reverse_nested` turns each collected nested doc into its parent at the
 * target level (the root docs, or the docs of `path`), each parent once
 * per bucket. A spec's level (what its collect receives) is the path of
 * the closest enclosing nested or reverse_nested, set by agg_nested_check
 * once the tree is parsed. */
#include <cjson/cJSON.h>
#include <string.h>

#include "agg_int.h"
#include "exec.h"

typedef struct nest_params {
	char *path;  /* nested: required; reverse_nested: NULL = the root docs */
	char *level; /* the level collected docs are at: NULL = the root docs */
	bool inside; /* inside a nested aggregation (reverse_nested needs it) */
} nest_params;

typedef struct nest_state {
	uint64_t count;
	agg_node **subs;
	uint32_t last_parent; /* reverse_nested: the last parent counted ... */
	uint32_t last_epoch;  /* ... in this segment epoch (+1; 0: none) */
} nest_state;

typedef struct nest_seg {
	uint64_t *target; /* nested: live children of path; reverse: the parent level */
	uint64_t *bound;  /* nested: docs inside a parent's block (owned when own_bound) */
	const uint64_t *bound_ref;
	uint32_t max_doc;
} nest_seg;

static cm_err
nest_parse_common(sr_agg *a, const cJSON *body, bool rev, cm_error *err)
{
	nest_params *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	a->p = p;
	for (const cJSON *c = body->child; c; c = c->next) {
		if (strcmp(c->string, "path") == 0) {
			cm_err rc = agg_parse_str(c, a->ops->name, "path", &p->path, err);
			if (rc)
				return rc;
		} else {
			return agg_unknown_param(a, c->string, err);
		}
	}
	if (!rev && p->path == NULL)
		return cm_error_set(err, CM_EPARSE,
		                    "Missing [path] field for nested aggregation [%s]", a->name);
	return CM_OK;
}

static cm_err
nested_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	return nest_parse_common(a, body, false, err);
}

static cm_err
reverse_parse(sr_agg *a, const cJSON *body, cm_error *err)
{
	return nest_parse_common(a, body, true, err);
}

static void
nest_params_free(void *d)
{
	nest_params *p = d;
	if (!p)
		return;
	cm_free(AGG_MEM, p->path);
	cm_free(AGG_MEM, p->level);
	cm_free(AGG_MEM, p);
}

static cm_err
check_walk(sr_agg *a, const char *level, bool inside, cm_error *err)
{
	if (a->kind == AGG_TOP_HITS && level != NULL)
		/* its hits would be the hidden nested docs, which have no _id or
		 * _source of their own */
		return cm_error_set(
		    err, CM_EINVAL,
		    "[top_hits] aggregation [%s] under a [nested] aggregation is not "
		    "supported",
		    a->name);
	if (a->kind == AGG_NESTED || a->kind == AGG_REVERSE_NESTED) {
		nest_params *p = a->p;
		if (a->kind == AGG_REVERSE_NESTED && !inside)
			return cm_error_set(
			    err, CM_EINVAL,
			    "Reverse nested aggregation [%s] can only be used inside a "
			    "[nested] aggregation",
			    a->name);
		p->level = level ? cm_strdup(AGG_MEM, level) : NULL;
		p->inside = inside;
		level = p->path;
		inside = a->kind == AGG_NESTED || (inside && p->path != NULL);
	}
	for (size_t i = 0; i < a->nsubs; i++) {
		cm_err rc = check_walk(a->subs[i], level, inside, err);
		if (rc)
			return rc;
	}
	return CM_OK;
}

cm_err
agg_nested_check(sr_agg *root, cm_error *err)
{
	return check_walk(root, NULL, false, err);
}

static void *
nest_state_new(const sr_agg *a)
{
	nest_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->subs = agg_subs_new(a);
	return s;
}

static void
nest_state_free(const sr_agg *a, void *d)
{
	nest_state *s = d;
	agg_subs_free(a, s->subs);
	cm_free(AGG_MEM, s);
}

static void
seg_free(nest_seg *k)
{
	if (!k)
		return;
	cm_free(AGG_MEM, k->target);
	cm_free(AGG_MEM, k->bound);
	cm_free(AGG_MEM, k);
}

/* Docs of every nested path under prefix (NULL: all nested docs). */
static cm_err
under_level(agg_rt *rt, nest_seg *k, const char *level, cm_error *err)
{
	const sr_seg_ctx *c = rt->ctx;
	if (level == NULL) {
		k->bound_ref = st_segment_nested(c->seg);
		return CM_OK;
	}
	const st_mapping *m = st_reader_mapping(c->reader);
	size_t ln = strlen(level), nw = st_bit_words(k->max_doc);
	k->bound = cm_calloc(AGG_MEM, nw + 1, sizeof(uint64_t));
	k->bound_ref = k->bound;
	for (size_t i = 0; m && i < m->nfields; i++) {
		const st_field_def *f = &m->fields[i];
		if (!f->nested || strncmp(f->path, level, ln) != 0 || f->path[ln] != '.')
			continue;
		uint64_t *b = sr_nested_path_docs(c, f->path, err);
		if (b)
			for (size_t w = 0; w < nw; w++)
				k->bound[w] |= b[w];
		cm_free(AGG_MEM, b);
	}
	return err && err->code ? err->code : CM_OK;
}

static cm_err
nested_seg_begin(agg_rt *rt, cm_error *err)
{
	const nest_params *p = rt->spec->p;
	const sr_seg_ctx *c = rt->ctx;
	const st_mapping *m = st_reader_mapping(c->reader);
	const st_field_def *d = m ? st_mapping_find(m, p->path) : NULL;
	if (d != NULL && !d->nested)
		return cm_error_set(err, CM_EAGGEXEC, "[nested] nested path [%s] is not nested",
		                    p->path);
	nest_seg *k = cm_calloc(AGG_MEM, 1, sizeof *k);
	k->max_doc = st_segment_max_doc(c->seg);
	rt->kd = k;
	const uint64_t *live = st_reader_nested_live(c->reader, c->seg_index);
	if (d == NULL || live == NULL)
		return CM_OK; /* unmapped here, or no nested docs: nothing to collect */
	k->target = sr_nested_path_docs(c, p->path, err);
	if (k->target)
		for (size_t w = 0; w < st_bit_words(k->max_doc); w++)
			k->target[w] &= live[w];
	return under_level(rt, k, p->level, err);
}

static cm_err
reverse_seg_begin(agg_rt *rt, cm_error *err)
{
	const nest_params *p = rt->spec->p;
	const sr_seg_ctx *c = rt->ctx;
	nest_seg *k = cm_calloc(AGG_MEM, 1, sizeof *k);
	k->max_doc = st_segment_max_doc(c->seg);
	rt->kd = k;
	if (p->path != NULL) {
		const st_mapping *m = st_reader_mapping(c->reader);
		const st_field_def *d = m ? st_mapping_find(m, p->path) : NULL;
		if (d == NULL || !d->nested)
			return cm_error_set(err, CM_EAGGEXEC,
			                    "[reverse_nested] nested path [%s] is not nested",
			                    p->path);
		k->target = sr_nested_path_docs(c, p->path, err);
		return err && err->code ? err->code : CM_OK;
	}
	size_t nw = st_bit_words(k->max_doc);
	const uint64_t *nested = st_segment_nested(c->seg);
	k->target = cm_calloc(AGG_MEM, nw + 1, sizeof(uint64_t));
	for (size_t w = 0; w < nw; w++)
		k->target[w] = nested ? ~nested[w] : ~(uint64_t)0;
	if (k->max_doc & 63)
		k->target[nw - 1] &= ((uint64_t)1 << (k->max_doc & 63)) - 1;
	return CM_OK;
}

static void
nest_seg_end(agg_rt *rt)
{
	seg_free(rt->kd);
	rt->kd = NULL;
}

#define NEST_BATCH 256

static void
feed(agg_rt *rt, nest_state *s, uint32_t *buf, size_t *n, const float *ones)
{
	if (*n && s->subs)
		agg_subs_collect(rt->root, rt->spec, s->subs, buf, ones, *n);
	*n = 0;
}

static void
nested_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	(void)scores;
	nest_state *s = n->d;
	nest_seg *k = rt->kd;
	if (k == NULL || k->target == NULL || k->bound_ref == NULL)
		return;
	uint32_t buf[NEST_BATCH];
	float ones[NEST_BATCH];
	for (size_t i = 0; i < NEST_BATCH; i++)
		ones[i] = 1.0f;
	size_t nb = 0;
	for (size_t i = 0; i < cnt; i++) {
		uint32_t p = docs[i];
		uint32_t start = p;
		while (start > 0 && st_bit_get(k->bound_ref, start - 1))
			start--;
		for (uint32_t d = start; d < p; d++) {
			if (!st_bit_get(k->target, d))
				continue;
			s->count++;
			buf[nb++] = d;
			if (nb == NEST_BATCH)
				feed(rt, s, buf, &nb, ones);
		}
	}
	feed(rt, s, buf, &nb, ones);
}

static void
reverse_collect(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores, size_t cnt)
{
	(void)scores;
	nest_state *s = n->d;
	nest_seg *k = rt->kd;
	if (k == NULL || k->target == NULL)
		return;
	uint32_t buf[NEST_BATCH];
	float ones[NEST_BATCH];
	for (size_t i = 0; i < NEST_BATCH; i++)
		ones[i] = 1.0f;
	size_t nb = 0;
	for (size_t i = 0; i < cnt; i++) {
		uint32_t p = sr_nested_next_bit(k->target, docs[i] + 1, k->max_doc);
		if (p >= k->max_doc)
			continue;
		if (s->last_epoch == rt->epoch + 1 && s->last_parent == p)
			continue;
		s->last_epoch = rt->epoch + 1;
		s->last_parent = p;
		s->count++;
		buf[nb++] = p;
		if (nb == NEST_BATCH)
			feed(rt, s, buf, &nb, ones);
	}
	feed(rt, s, buf, &nb, ones);
}

static void
nest_finish(const sr_agg *a, agg_node *n)
{
	nest_state *s = n->d;
	agg_subs_shard_finish(a, s->subs);
}

static void
nest_merge(const sr_agg *a, agg_node *into, agg_node *from)
{
	nest_state *x = into->d, *y = from->d;
	x->count += y->count;
	if (x->subs)
		agg_subs_merge(a, x->subs, y->subs);
}

static cm_err
nest_render(const sr_agg *a, const agg_node *n, agg_render *r)
{
	const nest_state *s = n->d;
	cm_buf_printf(r->out, "{\"doc_count\":%llu", (unsigned long long)s->count);
	cm_err rc = agg_subs_render(a, s->subs, r);
	cm_buf_put_u8(r->out, '}');
	return rc;
}

static void
nest_encode(const sr_agg *a, const agg_node *n, cm_buf *b)
{
	const nest_state *s = n->d;
	cm_buf_put_varint(b, s->count);
	agg_subs_encode(a, s->subs, b);
}

static bool
nest_decode(const sr_agg *a, agg_node *n, cm_rd *r)
{
	nest_state *s = n->d;
	return cm_rd_varint(r, &s->count) && agg_subs_decode(a, s->subs, r);
}

bool
agg_nested_value(const sr_agg *a, const agg_node *n, const char *rest, double *v)
{
	const nest_state *s = n->d;
	if (!rest) {
		*v = (double)s->count;
		return true;
	}
	return agg_subs_value(a, s->subs, rest, v);
}

const agg_ops agg_ops_nested = {
    .name = "nested",
    .bucket = true,
    .needs_field = false,
    .parse = nested_parse,
    .free_params = nest_params_free,
    .state_new = nest_state_new,
    .state_free = nest_state_free,
    .seg_begin = nested_seg_begin,
    .collect = nested_collect,
    .seg_end = nest_seg_end,
    .shard_finish = nest_finish,
    .merge = nest_merge,
    .render = nest_render,
    .encode = nest_encode,
    .decode = nest_decode,
};

const agg_ops agg_ops_reverse_nested = {
    .name = "reverse_nested",
    .bucket = true,
    .needs_field = false,
    .parse = reverse_parse,
    .free_params = nest_params_free,
    .state_new = nest_state_new,
    .state_free = nest_state_free,
    .seg_begin = reverse_seg_begin,
    .collect = reverse_collect,
    .seg_end = nest_seg_end,
    .shard_finish = nest_finish,
    .merge = nest_merge,
    .render = nest_render,
    .encode = nest_encode,
    .decode = nest_decode,
};
