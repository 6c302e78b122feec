#include "pr.h"
#include "pr_private.h"

#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../search/sr_agg.h"
#include "proto/shoal.pb-c.h"

#define PR_MEM CM_MEM_NODE
#define HIT_MEM CM_MEM_SEARCH /* hits are freed by sr_hit_clear */

/* protobuf-c allocates through these, so decoded messages are accounted
 * to the module that decodes them. */
static void *
pb_alloc(void *data, size_t size)
{
	return cm_malloc((cm_mem_tag)(intptr_t)data, size ? size : 1);
}

static void
pb_free(void *data, void *p)
{
	cm_free((cm_mem_tag)(intptr_t)data, p);
}

#define PB_ENTRY(t) [t] = {pb_alloc, pb_free, (void *)(intptr_t)(t)}
static ProtobufCAllocator pb_allocators[CM_MEM_COUNT] = {
    PB_ENTRY(CM_MEM_COMMON), PB_ENTRY(CM_MEM_STORAGE), PB_ENTRY(CM_MEM_SEARCH),
    PB_ENTRY(CM_MEM_REPLICATION), PB_ENTRY(CM_MEM_COORD), PB_ENTRY(CM_MEM_NODE),
    PB_ENTRY(CM_MEM_COORDINATOR)};

ProtobufCAllocator *
pr_pb_allocator(cm_mem_tag tag)
{
	return &pb_allocators[tag];
}

#define PB (&pb_allocators[PR_MEM])

cm_err
pr_pack(const ProtobufCMessage *m, cm_buf *out)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	cm_buf_reserve(out, n + 1); /* an empty message too: data is never NULL */
	protobuf_c_message_pack(m, out->data + out->len);
	out->len += n;
	return CM_OK;
}

char *
pr_dup_bin(const ProtobufCBinaryData *b, size_t *len)
{
	char *s = cm_malloc(PR_MEM, b->len + 1);
	if (b->len)
		memcpy(s, b->data, b->len);
	s[b->len] = '\0';
	if (len)
		*len = b->len;
	return s;
}

/* n words of width bytes, the first min(have, n) from v, the rest 0. */
static void *
dup_words(const void *v, size_t have, size_t n, size_t width)
{
	void *o = cm_calloc(PR_MEM, n + 1, width);
	if (v && have && n)
		memcpy(o, v, (have < n ? have : n) * width);
	return o;
}

uint32_t *
pr_dup_u32(const uint32_t *v, size_t have, size_t n)
{
	return dup_words(v, have, n, sizeof(uint32_t));
}

uint64_t *
pr_dup_u64(const uint64_t *v, size_t have, size_t n)
{
	return dup_words(v, have, n, sizeof(uint64_t));
}

/* ---- envelope ---- */

cm_err
pr_envelope_pack(const char *cluster, const char *secret, uint32_t type, uint64_t deadline_ms,
                 const void *payload, size_t len, cm_buf *out)
{
	Shoal__Envelope e = SHOAL__ENVELOPE__INIT;
	e.cluster = pr_str(cluster);
	e.secret = pr_bin(secret, secret ? strlen(secret) : 0);
	e.type = type;
	e.deadline_ms = deadline_ms;
	e.payload = pr_bin(payload, len);
	return pr_pack(&e.base, out);
}

static bool
same_secret(const ProtobufCBinaryData *got, const char *want)
{
	size_t n = want ? strlen(want) : 0;
	unsigned char diff = (unsigned char)(got->len != n);
	for (size_t i = 0; i < got->len && i < n; i++)
		diff |= (unsigned char)(got->data[i] ^ (unsigned char)want[i]);
	return diff == 0;
}

cm_err
pr_envelope_unpack(const void *msg, size_t len, const char *cluster, const char *secret,
                   pr_envelope *out, cm_error *err)
{
	Shoal__Envelope *e = shoal__envelope__unpack(PB, len, msg);
	memset(out, 0, sizeof(*out));
	if (e == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed transport message");
	if (strcmp(e->cluster, cluster ? cluster : "") != 0 || !same_secret(&e->secret, secret)) {
		shoal__envelope__free_unpacked(e, PB);
		return cm_error_set(
		    err, CM_EINVAL,
		    "transport message refused: cluster name or secret does not match");
	}
	out->type = e->type;
	out->deadline_ms = e->deadline_ms;
	out->payload = e->payload.data;
	out->len = e->payload.len;
	out->keep = e;
	return CM_OK;
}

void
pr_envelope_free(pr_envelope *e)
{
	if (e->keep)
		shoal__envelope__free_unpacked(e->keep, PB);
	e->keep = NULL;
}

/* ---- search request ---- */

cm_err
pr_search_req_encode(const pr_search_req *r, cm_buf *out)
{
	Shoal__SearchRequest m = SHOAL__SEARCH_REQUEST__INIT;
	m.index = pr_str(r->index);
	m.index_uuid = pr_str(r->index_uuid);
	m.n_shards = r->nshards;
	m.shards = r->shards;
	m.body = pr_bin(r->body, r->body_len);
	m.n_ordinals = r->nordinals;
	m.ordinals = r->ordinals;
	m.typed_keys = r->typed_keys;
	m.request_cache = r->request_cache;
	m.per_node = r->per_node;
	m.count_only = r->count_only;
	m.cancel_id = r->cancel_id;
	return pr_pack(&m.base, out);
}

cm_err
pr_search_req_decode(const void *p, size_t n, pr_search_req *out, cm_error *err)
{
	Shoal__SearchRequest *m = shoal__search_request__unpack(PB, n, p);
	memset(out, 0, sizeof(*out));
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed search request");
	out->index = cm_strdup(PR_MEM, m->index);
	out->index_uuid = cm_strdup(PR_MEM, m->index_uuid);
	out->nshards = m->n_shards;
	out->shards = pr_dup_u32(m->shards, m->n_shards, m->n_shards);
	out->body = pr_dup_bin(&m->body, &out->body_len);
	out->nordinals = m->n_ordinals == m->n_shards ? m->n_ordinals : 0;
	out->ordinals = pr_dup_u32(m->ordinals, out->nordinals, out->nordinals);
	out->typed_keys = m->typed_keys;
	out->request_cache = m->request_cache <= 2 ? m->request_cache : 0;
	out->per_node = m->per_node;
	out->count_only = m->count_only;
	out->cancel_id = m->cancel_id;
	shoal__search_request__free_unpacked(m, PB);
	return CM_OK;
}

void
pr_search_req_free(pr_search_req *r)
{
	cm_free(PR_MEM, r->index);
	cm_free(PR_MEM, r->index_uuid);
	cm_free(PR_MEM, r->shards);
	cm_free(PR_MEM, r->body);
	cm_free(PR_MEM, r->ordinals);
	memset(r, 0, sizeof(*r));
}

/* ---- shard results ---- */

/* Interned strings a decoded result set borrows (index and node names). */
struct pr_strings {
	char **s;
	size_t n, cap;
};

static const char *
intern(pr_strings *ps, const char *s)
{
	if (s == NULL || s[0] == '\0')
		return NULL;
	for (size_t i = 0; i < ps->n; i++)
		if (strcmp(ps->s[i], s) == 0)
			return ps->s[i];
	if (ps->n == ps->cap) {
		ps->cap = ps->cap ? ps->cap * 2 : 4;
		ps->s = cm_realloc(PR_MEM, ps->s, ps->cap * sizeof(char *));
	}
	return ps->s[ps->n++] = cm_strdup(PR_MEM, s);
}

void
pr_strings_free(pr_strings *ps)
{
	if (ps == NULL)
		return;
	for (size_t i = 0; i < ps->n; i++)
		cm_free(PR_MEM, ps->s[i]);
	cm_free(PR_MEM, ps->s);
	cm_free(PR_MEM, ps);
}

static void
sort_value_to_pb(const sr_sort_value *v, Shoal__SortValue *pb)
{
	shoal__sort_value__init(pb);
	pb->type = v->type == SR_SV_LONG     ? 1
	           : v->type == SR_SV_DOUBLE ? 2
	           : v->type == SR_SV_STRING ? 3
	           : v->type == SR_SV_ULONG  ? 4
	           : v->type == SR_SV_IP     ? 5
	                                     : 0;
	pb->l = v->l;
	/* a long's d says whether it is a date (sr.h): its own field here */
	if (v->type == SR_SV_LONG)
		pb->unit = v->d == SR_SV_DATE_MILLIS ? 1 : v->d == SR_SV_DATE_NANOS ? 2 : 0;
	else
		pb->d = v->d;
	pb->s = pr_str(v->s);
}

/* Arena for the pointer arrays a packed result set needs. */
typedef struct pb_arena {
	void **p;
	size_t n, cap;
} pb_arena;

static void *
arena_alloc(pb_arena *a, size_t size)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? a->cap * 2 : 16;
		a->p = cm_realloc(PR_MEM, a->p, a->cap * sizeof(void *));
	}
	return a->p[a->n++] = cm_calloc(PR_MEM, 1, size ? size : 1);
}

static void
arena_free(pb_arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		cm_free(PR_MEM, a->p[i]);
	cm_free(PR_MEM, a->p);
}

static void
hit_to_pb(const sr_hit *h, Shoal__Hit *pb, pb_arena *a)
{
	shoal__hit__init(pb);
	pb->id = pr_str(h->id);
	pb->score = h->score;
	pb->n_sort = h->nsort;
	if (h->nsort) {
		Shoal__SortValue *vals = arena_alloc(a, h->nsort * sizeof(*vals));
		pb->sort = arena_alloc(a, h->nsort * sizeof(*pb->sort));
		for (size_t i = 0; i < h->nsort; i++) {
			sort_value_to_pb(&h->sort[i], &vals[i]);
			pb->sort[i] = &vals[i];
		}
	}
	pb->has_source = h->source != NULL;
	pb->source = pr_bin(h->source, h->source_len);
	pb->fields = pr_bin(h->fields, h->fields_len);
	pb->highlight = pr_bin(h->highlight, h->highlight_len);
	pb->inner_hits = pr_bin(h->inner_hits, h->inner_hits_len);
	pb->ignored = pr_bin(h->ignored, h->ignored_len);
	pb->shard = h->shard;
	pb->doc = h->doc;
	pb->seq_no = h->seq_no;
	pb->primary_term = h->primary_term;
	pb->version = h->version;
	pb->index = pr_str(h->index);
}

cm_err
pr_shard_results_encode(sr_shard_result *const *res, size_t n, cm_buf *out)
{
	return pr_shard_results_encode_meta(res, n, NULL, out);
}

cm_err
pr_shard_results_encode_meta(sr_shard_result *const *res, size_t n, const pr_reply_meta *meta,
                             cm_buf *out)
{
	Shoal__SearchReply reply = SHOAL__SEARCH_REPLY__INIT;
	if (meta) {
		reply.n_service_us = meta->nservice;
		reply.service_us = (uint64_t *)meta->service_us;
		reply.queue = meta->queue;
	}
	pb_arena a = {0};
	cm_buf aggs[n ? n : 1];
	cm_err rc = CM_OK;

	reply.n_results = n;
	reply.results = arena_alloc(&a, n * sizeof(*reply.results));
	for (size_t i = 0; i < n; i++) {
		const sr_shard_result *r = res[i];
		Shoal__ShardResult *pb = arena_alloc(&a, sizeof(*pb));
		shoal__shard_result__init(pb);
		reply.results[i] = pb;
		pb->shard = r->shard;
		pb->total = r->total;
		pb->total_gte = r->total_is_lower_bound;
		pb->max_score = r->max_score;
		pb->n_hits = r->nhits;
		if (r->nhits) {
			Shoal__Hit *hits = arena_alloc(&a, r->nhits * sizeof(*hits));
			pb->hits = arena_alloc(&a, r->nhits * sizeof(*pb->hits));
			for (size_t j = 0; j < r->nhits; j++) {
				hit_to_pb(&r->hits[j], &hits[j], &a);
				pb->hits[j] = &hits[j];
			}
		}
		cm_buf_init(&aggs[i], PR_MEM);
		if (r->aggs) {
			if ((rc = sr_agg_state_encode(r->aggs, &aggs[i])) != CM_OK)
				n = i + 1;
			pb->has_aggs = true;
			pb->aggs = pr_bin(aggs[i].data, aggs[i].len);
		}
		pb->timed_out = r->timed_out;
		pb->terminated_early = r->terminated_early;
		pb->error_code = (int32_t)r->error.code;
		pb->error_type = r->error.code ? pr_str(cm_error_type(&r->error)) : pr_str(NULL);
		pb->error_reason = pr_str(r->error.reason);
		pb->index = pr_str(r->index);
		pb->node = pr_str(r->node);
		pb->shards_merged = r->shards_merged;
		if (r->profile)
			pb->profile = pr_bin(r->profile, r->profile_len);
		if (r->suggest)
			pb->suggest = pr_bin(r->suggest, r->suggest_len);
		if (rc != CM_OK)
			break;
	}
	if (rc == CM_OK)
		pr_pack(&reply.base, out);
	for (size_t i = 0; i < n; i++)
		cm_buf_free(&aggs[i]);
	arena_free(&a);
	return rc;
}

static void
hit_from_pb(const Shoal__Hit *pb, sr_hit *h, pr_strings *ps)
{
	memset(h, 0, sizeof(*h));
	h->id = cm_strdup(HIT_MEM, pb->id);
	h->score = pb->score;
	h->nsort = pb->n_sort;
	if (pb->n_sort) {
		h->sort = cm_calloc(HIT_MEM, pb->n_sort, sizeof(*h->sort));
		for (size_t i = 0; i < pb->n_sort; i++) {
			const Shoal__SortValue *v = pb->sort[i];
			h->sort[i].type = v->type == 1   ? SR_SV_LONG
			                  : v->type == 2 ? SR_SV_DOUBLE
			                  : v->type == 3 ? SR_SV_STRING
			                  : v->type == 4 ? SR_SV_ULONG
			                  : v->type == 5 ? SR_SV_IP
			                                 : SR_SV_NULL;
			h->sort[i].l = v->l;
			h->sort[i].d = v->type != 1    ? v->d
			               : v->unit == 1 ? SR_SV_DATE_MILLIS
			               : v->unit == 2 ? SR_SV_DATE_NANOS
			                              : 0;
			if (v->type == 3 || v->type == 5)
				h->sort[i].s = cm_strdup(HIT_MEM, v->s);
		}
	}
	if (pb->has_source) {
		h->source = cm_malloc(HIT_MEM, pb->source.len + 1);
		if (pb->source.len) /* has_source with empty bytes: data may be NULL */
			memcpy(h->source, pb->source.data, pb->source.len);
		h->source[pb->source.len] = '\0';
		h->source_len = pb->source.len;
	}
	if (pb->inner_hits.len) {
		h->inner_hits = cm_malloc(HIT_MEM, pb->inner_hits.len + 1);
		memcpy(h->inner_hits, pb->inner_hits.data, pb->inner_hits.len);
		h->inner_hits[pb->inner_hits.len] = '\0';
		h->inner_hits_len = pb->inner_hits.len;
	}
	if (pb->ignored.len) {
		h->ignored = cm_malloc(HIT_MEM, pb->ignored.len + 1);
		memcpy(h->ignored, pb->ignored.data, pb->ignored.len);
		h->ignored[pb->ignored.len] = '\0';
		h->ignored_len = pb->ignored.len;
	}
	if (pb->highlight.len) {
		h->highlight = cm_malloc(HIT_MEM, pb->highlight.len + 1);
		memcpy(h->highlight, pb->highlight.data, pb->highlight.len);
		h->highlight[pb->highlight.len] = '\0';
		h->highlight_len = pb->highlight.len;
	}
	if (pb->fields.len) {
		h->fields = cm_malloc(HIT_MEM, pb->fields.len + 1);
		memcpy(h->fields, pb->fields.data, pb->fields.len);
		h->fields[pb->fields.len] = '\0';
		h->fields_len = pb->fields.len;
	}
	h->shard = pb->shard;
	h->doc = pb->doc;
	h->seq_no = pb->seq_no;
	h->primary_term = pb->primary_term;
	h->version = pb->version;
	h->index = intern(ps, pb->index);
}

cm_err
pr_shard_results_decode(const void *p, size_t n, const sr_agg *aggs, sr_shard_result **out,
                        size_t *nout, pr_strings **strings, cm_error *err)
{
	return pr_shard_results_decode_meta(p, n, aggs, out, nout, strings, NULL, err);
}

cm_err
pr_shard_results_decode_meta(const void *p, size_t n, const sr_agg *aggs, sr_shard_result **out,
                             size_t *nout, pr_strings **strings, pr_reply_meta *meta, cm_error *err)
{
	Shoal__SearchReply *m = shoal__search_reply__unpack(PB, n, p);
	*out = NULL;
	*nout = 0;
	*strings = NULL;
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed search reply");
	if (meta) {
		meta->nservice =
		    m->n_service_us < PR_MAX_SERVICE ? m->n_service_us : PR_MAX_SERVICE;
		for (size_t i = 0; i < meta->nservice; i++)
			meta->service_us[i] = m->service_us[i];
		meta->queue = m->queue;
	}
	pr_strings *ps = cm_calloc(PR_MEM, 1, sizeof(*ps));
	sr_shard_result *res = cm_calloc(PR_MEM, m->n_results ? m->n_results : 1, sizeof(*res));
	cm_err rc = CM_OK;
	for (size_t i = 0; i < m->n_results && rc == CM_OK; i++) {
		const Shoal__ShardResult *pb = m->results[i];
		sr_shard_result *r = &res[i];
		r->shard = pb->shard;
		r->total = pb->total;
		r->total_is_lower_bound = pb->total_gte;
		r->max_score = pb->max_score;
		r->nhits = pb->n_hits;
		r->hits = cm_calloc(HIT_MEM, pb->n_hits ? pb->n_hits : 1, sizeof(sr_hit));
		for (size_t j = 0; j < pb->n_hits; j++)
			hit_from_pb(pb->hits[j], &r->hits[j], ps);
		if (pb->has_aggs && aggs != NULL)
			rc = sr_agg_state_decode(aggs, pb->aggs.data, pb->aggs.len, &r->aggs, err);
		else if (pb->has_aggs)
			rc = cm_error_set(err, CM_EPARSE, "aggregation partial without a spec");
		r->timed_out = pb->timed_out;
		r->terminated_early = pb->terminated_early;
		if (pb->error_code > 0 && pb->error_code < CM_ERR_COUNT)
			cm_error_set_type(&r->error, (cm_err)pb->error_code, pb->error_type, "%s",
			                  pb->error_reason);
		else if (pb->error_code != 0)
			cm_error_set(&r->error, CM_EINTERNAL, "%s", pb->error_reason);
		r->index = intern(ps, pb->index);
		r->node = intern(ps, pb->node);
		r->shards_merged = pb->shards_merged;
		if (pb->profile.len) {
			r->profile =
			    cm_strndup(HIT_MEM, (const char *)pb->profile.data, pb->profile.len);
			r->profile_len = pb->profile.len;
		}
		if (pb->suggest.len) {
			r->suggest =
			    cm_strndup(HIT_MEM, (const char *)pb->suggest.data, pb->suggest.len);
			r->suggest_len = pb->suggest.len;
		}
	}
	size_t count = m->n_results;
	shoal__search_reply__free_unpacked(m, PB);
	if (rc != CM_OK) {
		for (size_t i = 0; i < count; i++)
			sr_shard_result_free(&res[i]);
		cm_free(PR_MEM, res);
		pr_strings_free(ps);
		return rc;
	}
	*out = res;
	*nout = count;
	*strings = ps;
	return CM_OK;
}

/* ---- search cancel ---- */

cm_err
pr_search_cancel_encode(const uint64_t *ids, size_t n, cm_buf *out)
{
	Shoal__SearchCancel m = SHOAL__SEARCH_CANCEL__INIT;
	m.n_ids = n;
	m.ids = (uint64_t *)ids;
	return pr_pack(&m.base, out);
}

cm_err
pr_search_cancel_decode(const void *p, size_t len, uint64_t *ids, size_t cap, size_t *n,
                        cm_error *err)
{
	Shoal__SearchCancel *m = shoal__search_cancel__unpack(PB, len, p);
	*n = 0;
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed search cancel");
	for (size_t i = 0; i < m->n_ids && i < cap; i++)
		ids[(*n)++] = m->ids[i];
	shoal__search_cancel__free_unpacked(m, PB);
	return CM_OK;
}

/* ---- bulk ---- */

cm_err
pr_bulk_req_encode(const pr_bulk_req *r, cm_buf *out)
{
	Shoal__BulkRequest m = SHOAL__BULK_REQUEST__INIT;
	Shoal__Op *ops = cm_calloc(PR_MEM, r->nops ? r->nops : 1, sizeof(*ops));
	Shoal__Op **ptrs = cm_calloc(PR_MEM, r->nops ? r->nops : 1, sizeof(*ptrs));
	m.index = pr_str(r->index);
	m.index_uuid = pr_str(r->index_uuid);
	m.shard = r->shard;
	m.replica = r->replica;
	m.primary_term = r->primary_term;
	m.has_gcp = r->global_checkpoint != ST_NO_SEQ && r->replica;
	m.global_checkpoint = m.has_gcp ? r->global_checkpoint : 0;
	m.source_node = pr_str(r->source_node);
	m.n_ops = r->nops;
	m.ops = ptrs;
	for (size_t i = 0; i < r->nops; i++) {
		const st_op *o = &r->ops[i];
		shoal__op__init(&ops[i]);
		ops[i].type = o->type == ST_OP_DELETE;
		ops[i].id = pr_bin(o->id, o->id_len);
		ops[i].source = pr_bin(o->source, o->source_len);
		ops[i].seq_no = o->seq_no;
		ops[i].primary_term = o->primary_term;
		ops[i].if_seq_no = o->if_seq_no;
		ops[i].if_primary_term = o->if_primary_term;
		ops[i].version = o->version;
		ops[i].create_only = o->create_only;
		ops[i].version_gte = o->version_gte;
		ops[i].has_version = o->has_version;
		ptrs[i] = &ops[i];
	}
	pr_pack(&m.base, out);
	cm_free(PR_MEM, ops);
	cm_free(PR_MEM, ptrs);
	return CM_OK;
}

cm_err
pr_bulk_req_decode(const void *p, size_t n, pr_bulk_req *out, cm_error *err)
{
	Shoal__BulkRequest *m = shoal__bulk_request__unpack(PB, n, p);
	memset(out, 0, sizeof(*out));
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed bulk request");
	out->index = cm_strdup(PR_MEM, m->index);
	out->index_uuid = cm_strdup(PR_MEM, m->index_uuid);
	out->shard = m->shard;
	out->replica = m->replica;
	out->primary_term = m->primary_term;
	out->global_checkpoint = m->has_gcp ? m->global_checkpoint : ST_NO_SEQ;
	out->source_node = cm_strdup(PR_MEM, m->source_node);
	out->nops = m->n_ops;
	out->ops = cm_calloc(PR_MEM, m->n_ops ? m->n_ops : 1, sizeof(st_op));
	for (size_t i = 0; i < m->n_ops; i++) {
		const Shoal__Op *o = m->ops[i];
		st_op *op = &out->ops[i];
		op->type = o->type == 1 ? ST_OP_DELETE : ST_OP_INDEX;
		op->id = (const char *)o->id.data; /* borrowed from the kept message */
		op->id_len = o->id.len;
		op->source = (const char *)o->source.data;
		op->source_len = o->source.len;
		op->seq_no = o->seq_no;
		op->primary_term = o->primary_term;
		op->if_seq_no = o->if_seq_no;
		op->if_primary_term = o->if_primary_term;
		op->version = o->version;
		op->create_only = o->create_only;
		op->version_gte = o->version_gte;
		op->has_version = o->has_version;
	}
	out->keep = m;
	return CM_OK;
}

void
pr_bulk_req_free(pr_bulk_req *r)
{
	cm_free(PR_MEM, r->index);
	cm_free(PR_MEM, r->index_uuid);
	cm_free(PR_MEM, r->source_node);
	cm_free(PR_MEM, r->ops);
	if (r->keep)
		shoal__bulk_request__free_unpacked(r->keep, PB);
	memset(r, 0, sizeof(*r));
}

cm_err
pr_bulk_reply_encode(const st_op_result *res, size_t n, cm_err whole, const char *reason,
                     cm_buf *out)
{
	return pr_bulk_reply_encode_ckp(res, n, whole, reason, ST_NO_SEQ, out);
}

cm_err
pr_bulk_reply_whole(const void *p, size_t len, uint64_t *local_ckp, cm_error *err)
{
	Shoal__BulkReply *m = shoal__bulk_reply__unpack(PB, len, p);
	cm_err rc = CM_OK;
	*local_ckp = ST_NO_SEQ;
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed bulk reply");
	if (m->error != 0)
		rc = cm_error_set(
		    err, m->error > 0 && m->error < CM_ERR_COUNT ? (cm_err)m->error : CM_EINTERNAL,
		    "%s", m->reason);
	else if (m->has_ckp)
		*local_ckp = m->local_checkpoint;
	shoal__bulk_reply__free_unpacked(m, PB);
	return rc;
}

cm_err
pr_bulk_reply_encode_ckp(const st_op_result *res, size_t n, cm_err whole, const char *reason,
                         uint64_t local_ckp, cm_buf *out)
{
	Shoal__BulkReply m = SHOAL__BULK_REPLY__INIT;
	m.has_ckp = local_ckp != ST_NO_SEQ;
	m.local_checkpoint = m.has_ckp ? local_ckp : 0;
	Shoal__OpResult *rs = cm_calloc(PR_MEM, n ? n : 1, sizeof(*rs));
	Shoal__OpResult **ptrs = cm_calloc(PR_MEM, n ? n : 1, sizeof(*ptrs));
	m.n_results = n;
	m.results = ptrs;
	m.error = (int32_t)whole;
	m.reason = pr_str(reason);
	for (size_t i = 0; i < n; i++) {
		shoal__op_result__init(&rs[i]);
		rs[i].err = (int32_t)res[i].err;
		rs[i].reason = pr_str(res[i].reason);
		rs[i].result = (int32_t)res[i].result;
		rs[i].seq_no = res[i].seq_no;
		rs[i].primary_term = res[i].primary_term;
		rs[i].version = res[i].version;
		ptrs[i] = &rs[i];
	}
	pr_pack(&m.base, out);
	cm_free(PR_MEM, rs);
	cm_free(PR_MEM, ptrs);
	return CM_OK;
}

cm_err
pr_bulk_reply_decode(const void *p, size_t len, st_op_result *res, size_t n, cm_error *err)
{
	Shoal__BulkReply *m = shoal__bulk_reply__unpack(PB, len, p);
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed bulk reply");
	cm_err rc = CM_OK;
	if (m->error != 0)
		rc = cm_error_set(
		    err, m->error > 0 && m->error < CM_ERR_COUNT ? (cm_err)m->error : CM_EINTERNAL,
		    "%s", m->reason);
	else if (m->n_results != n)
		rc = cm_error_set(err, CM_EPARSE, "bulk reply has %zu results for %zu operations",
		                  m->n_results, n);
	for (size_t i = 0; rc == CM_OK && i < n; i++) {
		const Shoal__OpResult *r = m->results[i];
		memset(&res[i], 0, sizeof(res[i]));
		res[i].err = r->err > 0 && r->err < CM_ERR_COUNT ? (cm_err)r->err
		             : r->err                            ? CM_EINTERNAL
		                                                 : CM_OK;
		snprintf(res[i].reason, sizeof(res[i].reason), "%s", r->reason);
		res[i].result = (st_op_result_kind)r->result;
		res[i].seq_no = r->seq_no;
		res[i].primary_term = r->primary_term;
		res[i].version = r->version;
	}
	shoal__bulk_reply__free_unpacked(m, PB);
	return rc;
}

/* ---- metadata, admin, acks ---- */

cm_err
pr_metadata_encode(const pr_metadata *md, cm_buf *out)
{
	Shoal__Metadata m = SHOAL__METADATA__INIT;
	m.version = md->version;
	m.state = pr_bin(md->state, md->len);
	m.base_version = md->base_version;
	m.n_removed = md->nremoved;
	m.removed = md->removed;
	return pr_pack(&m.base, out);
}

cm_err
pr_metadata_decode(const void *p, size_t n, pr_metadata *out, cm_error *err)
{
	memset(out, 0, sizeof(*out));
	Shoal__Metadata *m = shoal__metadata__unpack(PB, n, p);
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed metadata message");
	out->version = m->version;
	out->base_version = m->base_version;
	out->state = pr_dup_bin(&m->state, &out->len);
	out->removed = cm_calloc(PR_MEM, m->n_removed + 1, sizeof(char *));
	for (size_t i = 0; i < m->n_removed; i++)
		out->removed[out->nremoved++] = cm_strdup(PR_MEM, m->removed[i]);
	shoal__metadata__free_unpacked(m, PB);
	return CM_OK;
}

void
pr_metadata_free(pr_metadata *m)
{
	cm_free(PR_MEM, m->state);
	for (size_t i = 0; i < m->nremoved; i++)
		cm_free(PR_MEM, m->removed[i]);
	cm_free(PR_MEM, m->removed);
	memset(m, 0, sizeof(*m));
}

cm_err
pr_ack_encode(const cm_error *e, const char *body, size_t len, cm_buf *out)
{
	Shoal__Ack m = SHOAL__ACK__INIT;
	m.error = e ? (int32_t)e->code : 0;
	m.type = pr_str(e && e->code ? cm_error_type(e) : NULL);
	m.reason = pr_str(e ? e->reason : NULL);
	m.body = pr_bin(body, len);
	return pr_pack(&m.base, out);
}

cm_err
pr_ack_decode(const void *p, size_t n, cm_error *e, char **body, size_t *len)
{
	Shoal__Ack *m = shoal__ack__unpack(PB, n, p);
	/* the body is only handed out with a success: callers that free it
	 * only then (nd_cluster's state fetch) leaked it (found by fuzzing) */
	if (body)
		*body = NULL;
	if (len)
		*len = 0;
	if (m == NULL)
		return cm_error_set(e, CM_EPARSE, "malformed acknowledgement");
	if (m->error != 0)
		cm_error_set_type(
		    e, m->error > 0 && m->error < CM_ERR_COUNT ? (cm_err)m->error : CM_EINTERNAL,
		    m->type[0] ? m->type : NULL, "%s", m->reason);
	cm_err rc = m->error ? e->code : CM_OK;
	if (body && rc == CM_OK)
		*body = pr_dup_bin(&m->body, len);
	shoal__ack__free_unpacked(m, PB);
	return rc;
}
