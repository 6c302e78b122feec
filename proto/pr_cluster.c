/* Cluster call messages (proto/cluster.proto) to and from plain structs.
 * Every decode is bounded by the message and fails cleanly on bad bytes;
 * what a decode filled is freed by the matching _free even when it failed. */
#include <string.h>

#include "../common/cm_alloc.h"
#include "pr.h"
#include "pr_private.h"
#include "proto/cluster.pb-c.h"

#define MEM CM_MEM_NODE

#define PB pr_pb_allocator(MEM)

/* ---- metadata changes ---- */

static const char *const meta_names[PR_META_KINDS] = {
    [PR_META_CREATE] = "create",
    [PR_META_DELETE] = "delete",
    [PR_META_PUT_MAPPING] = "put_mapping",
    [PR_META_PUT_SETTINGS] = "put_settings",
    [PR_META_CLUSTER_SETTINGS] = "cluster_settings",
    [PR_META_REROUTE] = "reroute",
    [PR_META_ALIASES] = "aliases",
    [PR_META_TEMPLATES] = "templates",
};

const char *
pr_meta_kind_name(pr_meta_kind k)
{
	return k > 0 && k < PR_META_KINDS ? meta_names[k] : "unknown";
}

cm_err
pr_meta_change_encode(const pr_meta_change *c, cm_buf *out)
{
	Shoal__MetaChange m = SHOAL__META_CHANGE__INIT;
	m.kind = (Shoal__MetaKind)c->kind;
	m.n_indices = c->nindices;
	m.indices = c->indices;
	m.source = pr_bin(c->source, c->source_len);
	ProtobufCBinaryData *srcs = cm_calloc(MEM, c->nsources + 1, sizeof(*srcs));
	for (size_t i = 0; i < c->nsources; i++)
		srcs[i] = pr_bin(c->sources[i], c->source_lens[i]);
	m.n_sources = c->nsources;
	m.sources = srcs;
	cm_err rc = pr_pack(&m.base, out);
	cm_free(MEM, srcs);
	return rc;
}

cm_err
pr_meta_change_decode(const void *p, size_t n, pr_meta_change *out, cm_error *err)
{
	Shoal__MetaChange *m = shoal__meta_change__unpack(PB, n, p);
	memset(out, 0, sizeof(*out));
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed metadata change");
	cm_err rc = CM_OK;
	if (m->kind <= 0 || m->kind >= (int)PR_META_KINDS)
		rc = cm_error_set(err, CM_EINVAL, "unknown metadata change [%d]", (int)m->kind);
	out->kind = (pr_meta_kind)m->kind;
	out->indices = cm_calloc(MEM, m->n_indices + 1, sizeof(char *));
	for (size_t i = 0; i < m->n_indices; i++)
		out->indices[i] = cm_strdup(MEM, m->indices[i]);
	out->nindices = m->n_indices;
	out->source = pr_dup_bin(&m->source, &out->source_len);
	out->sources = cm_calloc(MEM, m->n_sources + 1, sizeof(char *));
	out->source_lens = cm_calloc(MEM, m->n_sources + 1, sizeof(size_t));
	for (size_t i = 0; i < m->n_sources; i++)
		out->sources[i] = pr_dup_bin(&m->sources[i], &out->source_lens[i]);
	out->nsources = m->n_sources;
	if (!rc && out->nsources && out->nsources != out->nindices)
		rc = cm_error_set(err, CM_EINVAL,
		                  "metadata change names %zu indices but carries %zu documents",
		                  out->nindices, out->nsources);
	shoal__meta_change__free_unpacked(m, PB);
	return rc;
}

void
pr_meta_change_free(pr_meta_change *c)
{
	for (size_t i = 0; i < c->nindices; i++)
		cm_free(MEM, c->indices[i]);
	cm_free(MEM, c->indices);
	cm_free(MEM, c->source);
	for (size_t i = 0; i < c->nsources; i++)
		cm_free(MEM, c->sources[i]);
	cm_free(MEM, c->sources);
	cm_free(MEM, c->source_lens);
	memset(c, 0, sizeof(*c));
}

cm_err
pr_meta_reply_encode(const pr_meta_reply *r, cm_buf *out)
{
	Shoal__MetaReply m = SHOAL__META_REPLY__INIT;
	m.acknowledged = r->acknowledged;
	m.index = pr_str(r->index);
	m.reroute = pr_bin(r->reroute, r->reroute ? r->reroute_len : 0);
	return pr_pack(&m.base, out);
}

cm_err
pr_meta_reply_decode(const void *p, size_t n, pr_meta_reply *out, cm_error *err)
{
	Shoal__MetaReply *m = shoal__meta_reply__unpack(PB, n, p);
	memset(out, 0, sizeof(*out));
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed metadata reply");
	out->acknowledged = m->acknowledged;
	out->index = cm_strdup(MEM, m->index);
	out->reroute = pr_dup_bin(&m->reroute, &out->reroute_len);
	shoal__meta_reply__free_unpacked(m, PB);
	return CM_OK;
}

void
pr_meta_reply_free(pr_meta_reply *r)
{
	cm_free(MEM, r->index);
	cm_free(MEM, r->reroute);
	memset(r, 0, sizeof(*r));
}

/* ---- broadcasts ---- */

const char *
pr_broadcast_op_name(pr_broadcast_op op)
{
	return op == PR_BROADCAST_REFRESH ? "refresh"
	       : op == PR_BROADCAST_FLUSH ? "flush"
	       : op == PR_BROADCAST_FORCEMERGE ? "forcemerge"
	                                       : "unknown";
}

cm_err
pr_broadcast_encode(pr_broadcast_op op, const char *indices, cm_buf *out)
{
	Shoal__Broadcast m = SHOAL__BROADCAST__INIT;
	m.op = (Shoal__BroadcastOp)op;
	m.indices = pr_str(indices);
	return pr_pack(&m.base, out);
}

cm_err
pr_broadcast_decode(const void *p, size_t n, pr_broadcast_op *op, char **indices, cm_error *err)
{
	Shoal__Broadcast *m = shoal__broadcast__unpack(PB, n, p);
	*indices = NULL;
	*op = (pr_broadcast_op)0;
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed broadcast");
	cm_err rc = CM_OK;
	if ((int)m->op < (int)PR_BROADCAST_REFRESH || (int)m->op > (int)PR_BROADCAST_FORCEMERGE)
		rc = cm_error_set(err, CM_EINVAL, "unknown broadcast [%d]", (int)m->op);
	else
		*indices = cm_strdup(MEM, m->indices);
	*op = (pr_broadcast_op)m->op;
	shoal__broadcast__free_unpacked(m, PB);
	return rc;
}

/* ---- realtime get ---- */

cm_err
pr_get_req_encode(const pr_get_req *g, cm_buf *out)
{
	Shoal__GetRequest m = SHOAL__GET_REQUEST__INIT;
	m.index = pr_str(g->index);
	m.shard = g->shard;
	m.id = pr_bin(g->id, g->id_len);
	m.any_copy = g->any_copy;
	m.refreshed = g->refreshed;
	return pr_pack(&m.base, out);
}

cm_err
pr_get_req_decode(const void *p, size_t n, pr_get_req *out, cm_error *err)
{
	Shoal__GetRequest *m = shoal__get_request__unpack(PB, n, p);
	memset(out, 0, sizeof(*out));
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed get request");
	out->index = cm_strdup(MEM, m->index);
	out->shard = m->shard;
	out->id = pr_dup_bin(&m->id, &out->id_len);
	out->any_copy = m->any_copy;
	out->refreshed = m->refreshed;
	shoal__get_request__free_unpacked(m, PB);
	return CM_OK;
}

void
pr_get_req_free(pr_get_req *g)
{
	cm_free(MEM, g->index);
	cm_free(MEM, g->id);
	memset(g, 0, sizeof(*g));
}

cm_err
pr_get_reply_encode(bool found, const st_doc_meta *meta, const void *source, size_t len,
                    cm_buf *out)
{
	Shoal__GetReply m = SHOAL__GET_REPLY__INIT;
	m.found = found;
	if (found) {
		m.seq_no = meta->seq_no;
		m.primary_term = meta->primary_term;
		m.version = meta->version;
		m.source = pr_bin(source, len);
	}
	return pr_pack(&m.base, out);
}

cm_err
pr_get_reply_decode(const void *p, size_t n, bool *found, st_doc_meta *meta, cm_buf *source,
                    cm_error *err)
{
	Shoal__GetReply *m = shoal__get_reply__unpack(PB, n, p);
	*found = false;
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed get reply");
	if ((*found = m->found)) {
		meta->seq_no = m->seq_no;
		meta->primary_term = m->primary_term;
		meta->version = m->version;
		cm_buf_put(source, m->source.data, m->source.len);
	}
	shoal__get_reply__free_unpacked(m, PB);
	return CM_OK;
}

/* ---- shard figures ---- */

cm_err
pr_shard_stats_encode(const pr_shard_stats *s, cm_buf *out)
{
	Shoal__ShardStatsReply m = SHOAL__SHARD_STATS_REPLY__INIT;
	Shoal__IndexShardStats *ix = cm_calloc(MEM, s->n + 1, sizeof(*ix));
	Shoal__IndexShardStats **ptrs = cm_calloc(MEM, s->n + 1, sizeof(*ptrs));
	for (size_t i = 0; i < s->n; i++) {
		const pr_index_stats *e = &s->indices[i];
		shoal__index_shard_stats__init(&ix[i]);
		ix[i].index = pr_str(e->index);
		ix[i].n_docs = ix[i].n_store_bytes = ix[i].n_deleted = e->nshards;
		ix[i].docs = e->docs;
		ix[i].store_bytes = e->store_bytes;
		ix[i].deleted = e->deleted;
		ptrs[i] = &ix[i];
	}
	m.n_indices = s->n;
	m.indices = ptrs;
	cm_err rc = pr_pack(&m.base, out);
	cm_free(MEM, ptrs);
	cm_free(MEM, ix);
	return rc;
}

cm_err
pr_shard_stats_decode(const void *p, size_t n, pr_shard_stats *out, cm_error *err)
{
	Shoal__ShardStatsReply *m = shoal__shard_stats_reply__unpack(PB, n, p);
	memset(out, 0, sizeof(*out));
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed shard figures");
	out->indices = cm_calloc(MEM, m->n_indices + 1, sizeof(pr_index_stats));
	for (size_t i = 0; i < m->n_indices; i++) {
		const Shoal__IndexShardStats *e = m->indices[i];
		pr_index_stats *o = &out->indices[i];
		/* the shard count is that of docs; the other figures are cut or
		 * padded with zeros to it */
		o->index = cm_strdup(MEM, e->index);
		o->nshards = e->n_docs;
		o->docs = pr_dup_u64(e->docs, e->n_docs, o->nshards);
		o->store_bytes = pr_dup_u64(e->store_bytes, e->n_store_bytes, o->nshards);
		o->deleted = pr_dup_u64(e->deleted, e->n_deleted, o->nshards);
	}
	out->n = m->n_indices;
	shoal__shard_stats_reply__free_unpacked(m, PB);
	return CM_OK;
}

void
pr_shard_stats_free(pr_shard_stats *s)
{
	for (size_t i = 0; i < s->n; i++) {
		cm_free(MEM, s->indices[i].index);
		cm_free(MEM, s->indices[i].docs);
		cm_free(MEM, s->indices[i].store_bytes);
		cm_free(MEM, s->indices[i].deleted);
	}
	cm_free(MEM, s->indices);
	memset(s, 0, sizeof(*s));
}

/* ---- recoveries ---- */

cm_err
pr_recovery_rows_encode(const char *rows, size_t len, cm_buf *out)
{
	Shoal__RecoveryRowsReply m = SHOAL__RECOVERY_ROWS_REPLY__INIT;
	size_t n = 0, k = 0;
	for (size_t i = 0; i < len; i++)
		n += rows[i] == '\n';
	if (len && rows[len - 1] != '\n')
		n++;
	char **v = cm_calloc(MEM, n + 1, sizeof(char *));
	for (size_t i = 0, start = 0; i <= len && k < n; i++) {
		if (i < len && rows[i] != '\n')
			continue;
		if (i > start) {
			v[k] = cm_malloc(MEM, i - start + 1);
			memcpy(v[k], rows + start, i - start);
			v[k++][i - start] = '\0';
		}
		start = i + 1;
	}
	m.n_rows = k;
	m.rows = v;
	cm_err rc = pr_pack(&m.base, out);
	for (size_t i = 0; i < k; i++)
		cm_free(MEM, v[i]);
	cm_free(MEM, v);
	return rc;
}

cm_err
pr_recovery_rows_decode(const void *p, size_t n, cm_buf *rows, cm_error *err)
{
	Shoal__RecoveryRowsReply *m = shoal__recovery_rows_reply__unpack(PB, n, p);
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed recovery rows");
	for (size_t i = 0; i < m->n_rows; i++) {
		/* a row is one line: a newline inside one would make two */
		if (strchr(m->rows[i], '\n'))
			continue;
		cm_buf_put(rows, m->rows[i], strlen(m->rows[i]));
		cm_buf_put_u8(rows, '\n');
	}
	shoal__recovery_rows_reply__free_unpacked(m, PB);
	return CM_OK;
}

/* ---- primary hand-over ---- */

cm_err
pr_handoff_encode(const pr_handoff *h, cm_buf *out)
{
	Shoal__HandoffRequest m = SHOAL__HANDOFF_REQUEST__INIT;
	m.index = pr_str(h->index);
	m.uuid = pr_str(h->uuid);
	m.shard = h->shard;
	m.term = h->term;
	m.release = h->release;
	return pr_pack(&m.base, out);
}

cm_err
pr_handoff_decode(const void *p, size_t n, pr_handoff *out, cm_error *err)
{
	Shoal__HandoffRequest *m = shoal__handoff_request__unpack(PB, n, p);
	memset(out, 0, sizeof(*out));
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed hand-over request");
	out->index = cm_strdup(MEM, m->index);
	out->uuid = cm_strdup(MEM, m->uuid);
	out->shard = m->shard;
	out->term = m->term;
	out->release = m->release;
	shoal__handoff_request__free_unpacked(m, PB);
	return CM_OK;
}

void
pr_handoff_free(pr_handoff *h)
{
	cm_free(MEM, h->index);
	cm_free(MEM, h->uuid);
	memset(h, 0, sizeof(*h));
}

cm_err
pr_handoff_reply_encode(const char *const *keep, size_t n, cm_buf *out)
{
	Shoal__HandoffReply m = SHOAL__HANDOFF_REPLY__INIT;
	m.n_keep = n;
	m.keep = (char **)(uintptr_t)keep;
	return pr_pack(&m.base, out);
}

cm_err
pr_handoff_reply_decode(const void *p, size_t n, void (*fn)(void *arg, const char *name), void *arg,
                        cm_error *err)
{
	Shoal__HandoffReply *m = shoal__handoff_reply__unpack(PB, n, p);
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed hand-over reply");
	for (size_t i = 0; i < m->n_keep; i++)
		fn(arg, m->keep[i]);
	shoal__handoff_reply__free_unpacked(m, PB);
	return CM_OK;
}

/* ---- node views ---- */

cm_err
pr_node_view_req_encode(const char *kind, cm_buf *out)
{
	Shoal__NodeViewRequest m = SHOAL__NODE_VIEW_REQUEST__INIT;
	m.kind = pr_str(kind);
	return pr_pack(&m.base, out);
}

cm_err
pr_node_view_req_decode(const void *p, size_t n, char **kind, cm_error *err)
{
	Shoal__NodeViewRequest *m = shoal__node_view_request__unpack(PB, n, p);
	*kind = NULL;
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed node view request");
	*kind = cm_strdup(MEM, m->kind);
	shoal__node_view_request__free_unpacked(m, PB);
	return CM_OK;
}

cm_err
pr_node_view_reply_encode(const char *view, size_t len, cm_buf *out)
{
	Shoal__NodeViewReply m = SHOAL__NODE_VIEW_REPLY__INIT;
	m.view = pr_bin(view, len);
	return pr_pack(&m.base, out);
}

cm_err
pr_node_view_reply_decode(const void *p, size_t n, char **view, size_t *len, cm_error *err)
{
	Shoal__NodeViewReply *m = shoal__node_view_reply__unpack(PB, n, p);
	*view = NULL;
	*len = 0;
	if (m == NULL)
		return cm_error_set(err, CM_EPARSE, "malformed node view reply");
	*view = pr_dup_bin(&m->view, len);
	shoal__node_view_reply__free_unpacked(m, PB);
	return CM_OK;
}
