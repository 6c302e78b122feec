#define _GNU_SOURCE /* qsort_r */
/* The merge stage: folds shard results, in whatever order they arrive,
 * into one Elasticsearch _search response. Hits go through a bounded
 * heap of the best from+size under the request's sort with a total order
 * (ties by shard, then doc), so arrival order never shows in the output.
 * Aggregation partials are folded in shard order: a partial that arrives
 * before its predecessors waits until the gap closes, which keeps float
 * sums identical from run to run while still merging eagerly in the
 * common case. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../common/cm_alloc.h"
#include "agg_int.h"
#include "jsonw.h"
#include "sr.h"
#include "sr_agg.h"

#define T CM_MEM_SEARCH

typedef struct mhit {
	sr_hit h;
	const char *index;
	char *ckey; /* collapse: the hit's value as JSON text, owned */
} mhit;

typedef struct mfail {
	uint32_t shard;
	char *index, *node;
	cm_error e;
} mfail;

struct sr_merger {
	const sr_request *req;
	size_t expected;
	char *index_name;
	uint64_t k; /* hits kept: from + size */
	mhit *heap; /* max-heap: the worst kept hit at the root */
	size_t nheap, capheap;
	uint64_t total;
	bool total_gte;
	float max_score;
	bool has_max;
	bool timed_out, terminated_early;
	size_t nsuccess;
	mfail *fails;
	size_t nfails;
	/* aggregations */
	sr_agg_state *agg;
	sr_agg_state **pending; /* [expected], waiting for earlier shards */
	bool *arrived;          /* [expected] */
	size_t next_fold;
	bool reduced;
	cm_err reduce_rc;
	cm_error reduce_err;
	cm_buf aggs_json;
	cm_buf profiles; /* the shards' profile objects, comma-separated */
	sr_suggest_acc *suggest; /* folded suggestions, NULL when not asked */
	/* the one index every successful shard named, for failures reported
	 * without one (NULL when none or several) */
	const char *seen_index;
	bool mixed_index;
};

void
sr_hit_clear(sr_hit *h)
{
	cm_free(T, h->id);
	cm_free(T, h->source);
	cm_free(T, h->fields);
	cm_free(T, h->highlight);
	cm_free(T, h->inner_hits);
	cm_free(T, h->ignored);
	for (size_t i = 0; i < h->nsort; i++)
		sr_sort_value_clear(&h->sort[i]);
	cm_free(T, h->sort);
	memset(h, 0, sizeof(*h));
}

void
sr_hit_move(sr_hit *dst, sr_hit *src)
{
	*dst = *src;
	memset(src, 0, sizeof(*src));
}

void
sr_shard_result_free(sr_shard_result *res)
{
	if (!res)
		return;
	for (size_t i = 0; i < res->nhits; i++)
		sr_hit_clear(&res->hits[i]);
	cm_free(T, res->hits);
	res->hits = NULL;
	res->nhits = 0;
	if (res->aggs)
		sr_agg_state_free(res->aggs);
	res->aggs = NULL;
	cm_free(T, res->profile);
	res->profile = NULL;
	res->profile_len = 0;
	cm_free(T, res->suggest);
	res->suggest = NULL;
	res->suggest_len = 0;
}

/* ---- ordering ---- */

static int
cmp_u32(uint32_t a, uint32_t b)
{
	return a < b ? -1 : a > b;
}

static int
cmp_score(float a, float b) /* descending, NaN last */
{
	bool na = isnan(a), nb = isnan(b);
	if (na || nb)
		return na == nb ? 0 : na ? 1 : -1;
	return a > b ? -1 : a < b;
}

static int
cmp_value(const sr_sort_value *a, const sr_sort_value *b)
{
	if (a->type == SR_SV_IP && b->type == SR_SV_IP) {
		uint8_t x[ST_IP_LEN], y[ST_IP_LEN];
		bool okx = a->s && st_ip_parse(a->s, strlen(a->s), x);
		bool oky = b->s && st_ip_parse(b->s, strlen(b->s), y);
		if (!okx || !oky)
			return okx == oky ? 0 : okx ? -1 : 1;
		int c = memcmp(x, y, ST_IP_LEN);
		return c < 0 ? -1 : c > 0;
	}
	if (a->type == SR_SV_ULONG && b->type == SR_SV_ULONG)
		return a->l < b->l ? -1 : a->l > b->l;
	bool sa = a->type == SR_SV_STRING || a->type == SR_SV_IP;
	bool sb = b->type == SR_SV_STRING || b->type == SR_SV_IP;
	if (sa && sb) {
		int c = strcmp(a->s ? a->s : "", b->s ? b->s : "");
		return c < 0 ? -1 : c > 0;
	}
	if (sa != sb)
		return sa ? 1 : -1; /* never within one field; any fixed order will do */
	if (a->type == SR_SV_LONG && b->type == SR_SV_LONG)
		return a->l < b->l ? -1 : a->l > b->l;
	double x = a->type == SR_SV_LONG ? (double)a->l : a->d;
	double y = b->type == SR_SV_LONG ? (double)b->l : b->d;
	if (isnan(x) || isnan(y))
		return isnan(x) == isnan(y) ? 0 : isnan(x) ? 1 : -1;
	return x < y ? -1 : x > y;
}

static const sr_sort_value *
hit_value(const sr_hit *h, size_t i)
{
	static const sr_sort_value null_value = {.type = SR_SV_NULL};
	return i < h->nsort ? &h->sort[i] : &null_value;
}

/* < 0 when a ranks before b. A total order for distinct (shard, doc). */
static int
cmp_hits(const sr_request *req, const sr_hit *a, const sr_hit *b)
{
	int c = 0;
	if (req->nsort == 0) {
		c = cmp_score(a->score, b->score);
	} else {
		for (size_t i = 0; i < req->nsort && c == 0; i++) {
			const sr_sort_key *k = &req->sort[i];
			if (k->kind == SR_SORT_SCORE) {
				c = cmp_score(a->score, b->score);
				if (!k->desc)
					c = -c;
			} else if (k->kind == SR_SORT_DOC) {
				/* _doc: the shard-level doc id, then the shard (as ES) */
				const sr_sort_value *va = hit_value(a, i), *vb = hit_value(b, i);
				if (va->type != SR_SV_NULL && vb->type != SR_SV_NULL)
					c = cmp_value(va, vb);
				else
					c = cmp_u32(a->doc, b->doc);
				if (k->desc)
					c = -c;
			} else {
				const sr_sort_value *va = hit_value(a, i), *vb = hit_value(b, i);
				bool na = va->type == SR_SV_NULL, nb = vb->type == SR_SV_NULL;
				if (na || nb) {
					/* missing: _first / _last regardless of order */
					if (na != nb)
						c = (na ? -1 : 1) * (k->missing_first ? 1 : -1);
				} else {
					c = cmp_value(va, vb);
					if (k->desc)
						c = -c;
				}
			}
		}
	}
	if (c == 0)
		c = cmp_u32(a->shard, b->shard);
	if (c == 0)
		c = cmp_u32(a->doc, b->doc);
	return c;
}

static void
sift_up(sr_merger *m, size_t i)
{
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (cmp_hits(m->req, &m->heap[i].h, &m->heap[p].h) <= 0)
			break;
		mhit t = m->heap[i];
		m->heap[i] = m->heap[p];
		m->heap[p] = t;
		i = p;
	}
}

static void
sift_down(sr_merger *m, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, w = i;
		if (l < m->nheap && cmp_hits(m->req, &m->heap[l].h, &m->heap[w].h) > 0)
			w = l;
		if (r < m->nheap && cmp_hits(m->req, &m->heap[r].h, &m->heap[w].h) > 0)
			w = r;
		if (w == i)
			return;
		mhit t = m->heap[i];
		m->heap[i] = m->heap[w];
		m->heap[w] = t;
		i = w;
	}
}

/* The collapse value of a hit as text: the shard put it first in the
 * hit's "fields" ({"f":[value],...}); "[null]" when absent. */
static char *
collapse_key(const sr_merger *m, const sr_hit *h)
{
	cm_buf pre;
	cm_buf_init(&pre, T);
	cm_buf_put_u8(&pre, '{');
	sr_jw_cstr(&pre, m->req->collapse_field);
	cm_buf_put(&pre, ":[", 2);
	char *key = NULL;
	if (h->fields && h->fields_len > pre.len && !memcmp(h->fields, pre.data, pre.len)) {
		const char *p = h->fields + pre.len - 1, *end = h->fields + h->fields_len;
		const char *q = p + 1;
		for (; q < end && *q != ']'; q++)
			if (*q == '"')
				for (q++; q < end && *q != '"'; q++)
					if (*q == '\\')
						q++;
		if (q < end)
			key = cm_strndup(T, p, (size_t)(q + 1 - p));
	}
	cm_buf_free(&pre);
	return key ? key : cm_strdup(T, "[null]");
}

static void
heap_remove(sr_merger *m, size_t i)
{
	sr_hit_clear(&m->heap[i].h);
	cm_free(T, m->heap[i].ckey);
	m->heap[i] = m->heap[--m->nheap];
	if (i < m->nheap) {
		sift_up(m, i);
		sift_down(m, i);
	}
}

static void offer_one(sr_merger *m, sr_hit *h, const char *index, char *ckey);

/* collapse: one hit per value, the best (shards each send their best
 * per value, so only the hits kept here can hold a duplicate). */
static void
offer_hit(sr_merger *m, sr_hit *h, const char *index)
{
	char *ckey = NULL;
	if (m->k && m->req->collapse_field) {
		ckey = collapse_key(m, h);
		for (size_t i = 0; i < m->nheap; i++) {
			if (strcmp(m->heap[i].ckey, ckey))
				continue;
			if (cmp_hits(m->req, h, &m->heap[i].h) >= 0) {
				sr_hit_clear(h);
				cm_free(T, ckey);
				return;
			}
			heap_remove(m, i);
			break;
		}
	}
	offer_one(m, h, index, ckey);
}

static void
offer_one(sr_merger *m, sr_hit *h, const char *index, char *ckey)
{
	if (m->k == 0) {
		sr_hit_clear(h);
		return;
	}
	if (m->nheap < m->k) {
		if (m->nheap == m->capheap) {
			m->capheap = m->capheap ? m->capheap * 2 : 16;
			m->heap = cm_realloc(T, m->heap, m->capheap * sizeof(mhit));
		}
		sr_hit_move(&m->heap[m->nheap].h, h);
		m->heap[m->nheap].index = index;
		m->heap[m->nheap].ckey = ckey;
		sift_up(m, m->nheap++);
		return;
	}
	if (cmp_hits(m->req, h, &m->heap[0].h) >= 0) {
		sr_hit_clear(h);
		cm_free(T, ckey);
		return;
	}
	sr_hit_clear(&m->heap[0].h);
	cm_free(T, m->heap[0].ckey);
	sr_hit_move(&m->heap[0].h, h);
	m->heap[0].index = index;
	m->heap[0].ckey = ckey;
	sift_down(m, 0);
}

/* ---- life cycle ---- */

sr_merger *
sr_merger_create(const sr_request *req, size_t expected_shards)
{
	sr_merger *m = cm_calloc(T, 1, sizeof(*m));
	m->req = req;
	m->expected = expected_shards;
	m->k = (uint64_t)req->from + req->size;
	if (req->size == 0)
		m->k = 0;
	m->max_score = NAN;
	if (req->aggs && expected_shards) {
		m->pending = cm_calloc(T, expected_shards, sizeof(*m->pending));
		m->arrived = cm_calloc(T, expected_shards, sizeof(*m->arrived));
	}
	cm_buf_init(&m->aggs_json, T);
	cm_buf_init(&m->profiles, T);
	m->suggest = req->suggest ? sr_suggest_acc_new(req->suggest) : NULL;
	return m;
}

void
sr_merger_set_index(sr_merger *m, const char *index_name)
{
	cm_free(T, m->index_name);
	m->index_name = index_name ? cm_strdup(T, index_name) : NULL;
}

static void
fold_agg(sr_merger *m, sr_agg_state *s)
{
	if (!s)
		return;
	if (!m->agg) {
		m->agg = s;
		return;
	}
	sr_agg_state_merge(m->agg, s);
	sr_agg_state_free(s);
}

/* Marks shard as done (with or without a partial) and folds every partial
 * whose predecessors are all done. */
static void
agg_arrive(sr_merger *m, uint32_t shard, sr_agg_state *s)
{
	if (!m->pending || shard >= m->expected || m->arrived[shard]) {
		fold_agg(m, s); /* outside the numbering: no order to keep */
		return;
	}
	m->arrived[shard] = true;
	m->pending[shard] = s;
	while (m->next_fold < m->expected && m->arrived[m->next_fold]) {
		fold_agg(m, m->pending[m->next_fold]);
		m->pending[m->next_fold++] = NULL;
	}
}

void
sr_merger_fail_at(sr_merger *m, uint32_t shard, const char *index, const char *node,
                  const cm_error *why)
{
	m->fails = cm_realloc(T, m->fails, (m->nfails + 1) * sizeof(mfail));
	mfail *f = &m->fails[m->nfails++];
	memset(f, 0, sizeof(*f));
	f->shard = shard;
	f->index = index ? cm_strdup(T, index) : m->index_name ? cm_strdup(T, m->index_name) : NULL;
	f->node = node ? cm_strdup(T, node) : NULL;
	if (why && why->code)
		f->e = *why;
	else
		cm_error_set(&f->e, CM_EINTERNAL, "shard failed");
	agg_arrive(m, shard, NULL);
}

void
sr_merger_mark_timed_out(sr_merger *m)
{
	m->timed_out = true;
}

void
sr_merger_fail(sr_merger *m, uint32_t shard, const cm_error *why)
{
	sr_merger_fail_at(m, shard, NULL, NULL, why);
	if (why && why->code == CM_ETIMEDOUT)
		m->timed_out = true; /* a shard of this node lost to the deadline */
}

/* numeric_type date / date_nanos: a date sort value in the sort's
 * resolution (ES converts on the shard; a shard of one index holds one
 * resolution, so converting here orders shards of both alike). */
static void
to_numeric_type(const sr_request *req, sr_hit *h)
{
	for (size_t i = 0; i < req->nsort && i < h->nsort; i++) {
		sr_sort_value *v = &h->sort[i];
		int nt = req->sort[i].numeric_type;
		if (v->type != SR_SV_LONG || nt == SR_NT_NONE)
			continue;
		if (nt == SR_NT_DATE_NANOS && v->d == SR_SV_DATE_MILLIS) {
			/* past what nanos hold (after 2262): the nearest end */
			v->l = v->l > INT64_MAX / 1000000   ? INT64_MAX
			       : v->l < INT64_MIN / 1000000 ? INT64_MIN
			                                    : v->l * 1000000;
			v->d = SR_SV_DATE_NANOS;
		} else if (nt == SR_NT_DATE && v->d == SR_SV_DATE_NANOS) {
			v->l = v->l / 1000000 - (v->l % 1000000 < 0);
			v->d = SR_SV_DATE_MILLIS;
		}
	}
}

void
sr_merger_add(sr_merger *m, sr_shard_result *res)
{
	if (res->error.code) {
		if (res->error.code == CM_ETIMEDOUT)
			m->timed_out = true; /* the shard, where it ran, passed the deadline */
		sr_merger_fail_at(m, res->shard, res->index, res->node, &res->error);
		sr_shard_result_free(res);
		memset(res, 0, sizeof(*res));
		return;
	}
	m->nsuccess += res->shards_merged ? res->shards_merged : 1;
	if (res->index && !m->mixed_index) {
		if (m->seen_index && strcmp(m->seen_index, res->index))
			m->mixed_index = true;
		else
			m->seen_index = res->index;
	}
	m->total += res->total;
	m->total_gte |= res->total_is_lower_bound;
	if ((res->nhits > 0 || res->total > 0) && !isnan(res->max_score) &&
	    (!m->has_max || res->max_score > m->max_score)) {
		m->max_score = res->max_score;
		m->has_max = true;
	}
	m->timed_out |= res->timed_out;
	m->terminated_early |= res->terminated_early;
	/* res->profile is a JSON array of shard profiles: keep its items */
	if (res->profile && res->profile_len > 2) {
		if (m->profiles.len)
			cm_buf_put_u8(&m->profiles, ',');
		cm_buf_put(&m->profiles, res->profile + 1, res->profile_len - 2);
	}
	cm_free(T, res->profile);
	if (m->suggest && res->suggest)
		sr_suggest_acc_add(m->suggest, res->suggest, res->suggest_len,
		                   res->index ? res->index : m->index_name);
	cm_free(T, res->suggest);
	for (size_t i = 0; i < res->nhits; i++) {
		to_numeric_type(m->req, &res->hits[i]);
		offer_hit(m, &res->hits[i], res->hits[i].index ? res->hits[i].index : res->index);
	}
	cm_free(T, res->hits);
	sr_agg_state *aggs = res->aggs;
	uint32_t shard = res->shard;
	memset(res, 0, sizeof(*res));
	if (m->req->aggs)
		agg_arrive(m, shard, aggs);
	else if (aggs)
		sr_agg_state_free(aggs);
}

void
sr_merger_bar(const sr_merger *m, sr_hit_bar *bar)
{
	const sr_request *req = m->req;
	if (!m->k || m->nheap < m->k || req->nsort || req->collapse_field || req->nrescore)
		return;
	atomic_store(&bar->score, m->heap[0].h.score);
	atomic_store(&bar->shard, m->heap[0].h.shard);
	atomic_store(&bar->set, true);
}

uint64_t
sr_merger_total(const sr_merger *m)
{
	return m->total;
}

size_t
sr_merger_failed(const sr_merger *m)
{
	return m->nfails;
}

static int
cmp_fail(const void *a, const void *b)
{
	const mfail *x = a, *y = b;
	return x->shard < y->shard ? -1 : x->shard > y->shard;
}

cm_err
sr_merger_reduce(sr_merger *m, cm_error *err)
{
	if (!m->reduced) {
		m->reduced = true;
		if (m->nfails > 1)
			qsort(m->fails, m->nfails, sizeof(mfail), cmp_fail);
		/* shards that never reported leave gaps: fold the rest in order */
		for (size_t i = 0; m->pending && i < m->expected; i++) {
			fold_agg(m, m->pending[i]);
			m->pending[i] = NULL;
		}
		if (m->expected > 0 && m->nsuccess == 0 && m->nfails > 0) {
			m->reduce_rc = cm_error_set_type(&m->reduce_err, m->fails[0].e.code,
			                                 "search_phase_execution_exception",
			                                 "all shards failed");
		} else if (m->req->aggs) {
			if (!m->agg)
				m->agg = sr_agg_state_new(m->req->aggs);
			m->reduce_rc = sr_agg_render_typed(m->agg, &m->aggs_json,
			                                   m->req->typed_keys, &m->reduce_err);
		}
	}
	if (m->reduce_rc && err && !err->code)
		*err = m->reduce_err;
	return m->reduce_rc;
}

void
sr_merger_failure(const sr_merger *m, size_t i, uint32_t *shard, const char **index,
                  const char **node, const cm_error **why)
{
	const mfail *f = &m->fails[i];
	*shard = f->shard;
	*index = f->index;
	*node = f->node;
	*why = &f->e;
}

static void sort_hits(sr_merger *m);

void
sr_merger_take(sr_merger *m, uint32_t ordinal, sr_shard_result *out)
{
	memset(out, 0, sizeof(*out));
	if (m->nfails > 1)
		qsort(m->fails, m->nfails, sizeof(mfail), cmp_fail);
	for (size_t i = 0; m->pending && i < m->expected; i++) {
		fold_agg(m, m->pending[i]);
		m->pending[i] = NULL;
	}
	sort_hits(m);
	out->shard = ordinal;
	out->total = m->total;
	out->total_is_lower_bound = m->total_gte;
	out->max_score = m->has_max ? m->max_score : NAN;
	out->timed_out = m->timed_out;
	out->terminated_early = m->terminated_early;
	out->shards_merged = (uint32_t)m->nsuccess;
	out->nhits = m->nheap;
	out->hits = cm_calloc(T, m->nheap + 1, sizeof(sr_hit));
	for (size_t i = 0; i < m->nheap; i++) {
		sr_hit_move(&out->hits[i], &m->heap[i].h);
		out->hits[i].index = m->heap[i].index; /* borrowed from the shard results */
		cm_free(T, m->heap[i].ckey);
	}
	m->nheap = 0;
	if (m->profiles.len) {
		out->profile = cm_malloc(T, m->profiles.len + 2);
		out->profile[0] = '[';
		memcpy(out->profile + 1, m->profiles.data, m->profiles.len);
		out->profile[m->profiles.len + 1] = ']';
		out->profile_len = m->profiles.len + 2;
		cm_buf_reset(&m->profiles);
	}
	if (m->suggest)
		out->suggest = sr_suggest_acc_take(m->suggest, &out->suggest_len);
	out->aggs = m->agg;
	m->agg = NULL;
	if (!out->aggs && m->req->aggs && m->nsuccess)
		out->aggs = sr_agg_state_new(m->req->aggs);
	if (m->nsuccess == 0 && m->nfails)
		out->error = m->fails[0].e;
}

/* ---- rendering ---- */

static int
cmp_mhit(const void *a, const void *b, void *req)
{
	return cmp_hits(req, &((const mhit *)a)->h, &((const mhit *)b)->h);
}

static void
sort_hits(sr_merger *m)
{
	/* a plain insertion-free sort: heap order → ranked order */
	if (m->nheap > 1)
		qsort_r(m->heap, m->nheap, sizeof(mhit), cmp_mhit, (void *)m->req);
}

static bool
scores_tracked(const sr_request *req)
{
	if (req->nsort == 0 || req->track_scores)
		return true;
	for (size_t i = 0; i < req->nsort; i++)
		if (req->sort[i].kind == SR_SORT_SCORE)
			return true;
	return false;
}

static void
render_sort_value(cm_buf *b, const sr_sort_key *k, const sr_hit *h, size_t i)
{
	if (k->kind == SR_SORT_SCORE) {
		sr_jw_float(b, h->score);
		return;
	}
	const sr_sort_value *v = hit_value(h, i);
	if (k->format && v->type == SR_SV_LONG &&
	    (v->d == SR_SV_DATE_MILLIS || v->d == SR_SV_DATE_NANOS)) {
		/* a date sort with a "format": the text, as ES renders it */
		char buf[128];
		bool nanos = v->d == SR_SV_DATE_NANOS;
		/* its fraction has 3 to 9 digits, as many as the value needs */
		bool ns_text = !strncmp(k->format, "strict_date_optional_time_nanos", 31) &&
		               (k->format[31] == 0 || k->format[31] == '|');
		if (ns_text && (nanos || (v->l > -9200000000000 && v->l < 9200000000000)))
			st_date_format_ns(nanos ? v->l : v->l * 1000000, buf, sizeof buf);
		else
			agg_date_format(NULL, k->format,
			                nanos ? v->l / 1000000 - (v->l % 1000000 < 0) : v->l, buf,
			                sizeof buf);
		sr_jw_cstr(b, buf);
		return;
	}
	switch (v->type) {
	case SR_SV_LONG:
		cm_buf_printf(b, "%lld", (long long)v->l);
		break;
	case SR_SV_DOUBLE:
		sr_jw_double(b, v->d);
		break;
	case SR_SV_STRING:
	case SR_SV_IP:
		sr_jw_cstr(b, v->s ? v->s : "");
		break;
	case SR_SV_ULONG:
		cm_buf_printf(b, "%llu", (unsigned long long)st_col_to_ulong(v->l));
		break;
	default:
		if (k->kind == SR_SORT_DOC)
			cm_buf_printf(b, "%u", h->doc);
		else
			cm_buf_put(b, "null", 4);
	}
}

static void
render_hit(sr_merger *m, cm_buf *b, const mhit *mh, bool scored)
{
	const sr_hit *h = &mh->h;
	const sr_request *req = m->req;
	const char *index = mh->index ? mh->index : m->index_name ? m->index_name : "";
	cm_buf_put(b, "{\"_index\":", 10);
	sr_jw_cstr(b, index);
	cm_buf_put(b, ",\"_type\":\"_doc\"", 15);
	if (!req->stored_fields_none) {
		cm_buf_put(b, ",\"_id\":", 7);
		sr_jw_cstr(b, h->id ? h->id : "");
	}
	if (req->version)
		cm_buf_printf(b, ",\"_version\":%lld", (long long)h->version);
	if (req->seq_no_primary_term)
		cm_buf_printf(b, ",\"_seq_no\":%llu,\"_primary_term\":%llu",
		              (unsigned long long)h->seq_no, (unsigned long long)h->primary_term);
	cm_buf_put(b, ",\"_score\":", 10);
	if (scored)
		sr_jw_float(b, h->score);
	else
		cm_buf_put(b, "null", 4);
	if (h->ignored) {
		cm_buf_put(b, ",\"_ignored\":", 12);
		cm_buf_put(b, h->ignored, h->ignored_len);
	}
	if (h->source) {
		cm_buf_put(b, ",\"_source\":", 11);
		cm_buf_put(b, h->source, h->source_len);
	}
	if (h->fields) {
		cm_buf_put(b, ",\"fields\":", 10);
		cm_buf_put(b, h->fields, h->fields_len);
	}
	if (h->highlight) {
		cm_buf_put(b, ",\"highlight\":", 13);
		cm_buf_put(b, h->highlight, h->highlight_len);
	}
	if (h->inner_hits) {
		cm_buf_put(b, ",\"inner_hits\":", 14);
		for (size_t i = 0; i < h->inner_hits_len; i++) {
			if (h->inner_hits[i] != '\x01') {
				cm_buf_put(b, h->inner_hits + i, 1);
				continue;
			}
			cm_buf_put(b, "\"_index\":", 9);
			sr_jw_cstr(b, index);
			cm_buf_put(b, ",\"_type\":\"_doc\",", 16);
		}
	}
	if (req->explain_scores) {
		/* the score as computed; no per-clause breakdown (docs/api.md) */
		cm_buf_put(b, ",\"_explanation\":{\"value\":", 25);
		if (scored && !isnan(h->score))
			sr_jw_float(b, h->score);
		else
			cm_buf_put(b, "0.0", 3);
		cm_buf_printf(
		    b, ",\"description\":\"%s\",\"details\":[]}",
		    scored ? "score of the whole query (BM25); Shoal gives no per-clause breakdown"
		           : "not scored: the hits are sorted by fields without track_scores");
	}
	if (req->nsort) {
		cm_buf_put(b, ",\"sort\":[", 9);
		for (size_t i = 0; i < req->nsort; i++) {
			if (i)
				cm_buf_put_u8(b, ',');
			render_sort_value(b, &req->sort[i], h, i);
		}
		cm_buf_put_u8(b, ']');
	}
	cm_buf_put_u8(b, '}');
}

static void
render_failures(sr_merger *m, cm_buf *b)
{
	bool first = true;
	cm_buf_put(b, ",\"failures\":[", 13);
	for (size_t i = 0; i < m->nfails; i++) {
		const mfail *f = &m->fails[i];
		/* ES groups failures with the same index and cause: one each */
		bool dup = false;
		for (size_t j = 0; j < i && !dup; j++) {
			const mfail *g = &m->fails[j];
			dup = !strcmp(g->index ? g->index : "", f->index ? f->index : "") &&
			      !strcmp(cm_error_type(&g->e), cm_error_type(&f->e)) &&
			      !strcmp(g->e.reason, f->e.reason);
		}
		if (dup)
			continue;
		if (!first)
			cm_buf_put_u8(b, ',');
		first = false;
		cm_buf_printf(b, "{\"shard\":%u", f->shard);
		const char *index = f->index ? f->index : m->mixed_index ? NULL : m->seen_index;
		if (index) {
			cm_buf_put(b, ",\"index\":", 9);
			sr_jw_cstr(b, index);
		}
		if (f->node) {
			cm_buf_put(b, ",\"node\":", 8);
			sr_jw_cstr(b, f->node);
		}
		cm_buf_put(b, ",\"reason\":{\"type\":", 18);
		sr_jw_cstr(b, cm_error_type(&f->e));
		cm_buf_put(b, ",\"reason\":", 10);
		sr_jw_cstr(b, f->e.reason[0] ? f->e.reason : cm_err_msg(f->e.code));
		cm_buf_put(b, "}}", 2);
	}
	cm_buf_put_u8(b, ']');
}

void
sr_merger_render(sr_merger *m, uint64_t took_ms, cm_buf *out)
{
	const sr_request *req = m->req;
	sr_merger_reduce(m, NULL);
	sort_hits(m);
	bool scored = scores_tracked(req);

	cm_buf_printf(out, "{\"took\":%llu,\"timed_out\":%s", (unsigned long long)took_ms,
	              m->timed_out ? "true" : "false");
	if (req->terminate_after)
		cm_buf_printf(out, ",\"terminated_early\":%s",
		              m->terminated_early ? "true" : "false");
	cm_buf_printf(out,
	              ",\"_shards\":{\"total\":%zu,\"successful\":%zu,\"skipped\":0,\"failed\":%zu",
	              m->expected, m->nsuccess, m->nfails);
	if (m->nfails)
		render_failures(m, out);
	cm_buf_put(out, "},\"hits\":{", 10);
	if (req->track_total_hits != 0) {
		uint64_t value = m->total;
		bool gte = m->total_gte;
		if (req->track_total_hits != SR_TRACK_ALL &&
		    value > (uint64_t)req->track_total_hits) {
			value = (uint64_t)req->track_total_hits;
			gte = true;
		}
		cm_buf_printf(out, "\"total\":{\"value\":%llu,\"relation\":\"%s\"},",
		              (unsigned long long)value, gte ? "gte" : "eq");
	}
	cm_buf_put(out, "\"max_score\":", 12);
	if (scored && m->has_max && req->size > 0)
		sr_jw_float(out, m->max_score);
	else
		cm_buf_put(out, "null", 4);
	cm_buf_put(out, ",\"hits\":[", 9);
	for (size_t i = req->from; i < m->nheap; i++) {
		if (i > req->from)
			cm_buf_put_u8(out, ',');
		render_hit(m, out, &m->heap[i], scored);
	}
	cm_buf_put(out, "]}", 2);
	if (req->aggs && m->reduce_rc == CM_OK && m->aggs_json.len) {
		cm_buf_put(out, ",\"aggregations\":", 16);
		cm_buf_put(out, m->aggs_json.data, m->aggs_json.len);
	}
	if (m->suggest)
		sr_suggest_acc_render(m->suggest, out);
	if (req->profile) {
		static const char head[] = ",\"profile\":{\"shards\":[";
		cm_buf_put(out, head, sizeof(head) - 1);
		cm_buf_put(out, m->profiles.data, m->profiles.len);
		cm_buf_put(out, "]}", 2);
	}
	cm_buf_put_u8(out, '}');
}

size_t
sr_merger_page_len(sr_merger *m)
{
	sort_hits(m);
	return m->nheap > m->req->from ? m->nheap - m->req->from : 0;
}

void
sr_merger_page_hit(const sr_merger *m, size_t i, uint32_t *shard, uint32_t *doc)
{
	const sr_hit *h = &m->heap[m->req->from + i].h;
	*shard = h->shard;
	*doc = h->doc;
}

sr_hit *
sr_merger_page_at(sr_merger *m, size_t i)
{
	return &m->heap[m->req->from + i].h;
}

void
sr_merger_destroy(sr_merger *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nheap; i++) {
		sr_hit_clear(&m->heap[i].h);
		cm_free(T, m->heap[i].ckey);
	}
	cm_free(T, m->heap);
	cm_buf_free(&m->profiles);
	sr_suggest_acc_free(m->suggest);
	for (size_t i = 0; i < m->nfails; i++) {
		cm_free(T, m->fails[i].index);
		cm_free(T, m->fails[i].node);
	}
	cm_free(T, m->fails);
	for (size_t i = 0; m->pending && i < m->expected; i++)
		if (m->pending[i])
			sr_agg_state_free(m->pending[i]);
	cm_free(T, m->pending);
	cm_free(T, m->arrived);
	if (m->agg)
		sr_agg_state_free(m->agg);
	cm_buf_free(&m->aggs_json);
	cm_free(T, m->index_name);
	cm_free(T, m);
}
