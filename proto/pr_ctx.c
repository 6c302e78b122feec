/* Search context messages (proto/ctx.proto) to and from plain structs.
 * Every decode is bounded by the message and fails cleanly on bad bytes. */
#include <string.h>

#include "../common/cm_alloc.h"
#include "pr.h"
#include "pr_private.h"
#include "proto/ctx.pb-c.h"

#define MEM CM_MEM_NODE

#define PB pr_pb_allocator(MEM)

cm_err
pr_ctx_open_encode(const pr_ctx_open *o, cm_buf *out)
{
	Shoal__CtxOpen m = SHOAL__CTX_OPEN__INIT;
	m.index = (char *)(uintptr_t)(o->index ? o->index : "");
	m.n_shards = o->nshards;
	m.shards = o->shards;
	m.body = pr_bin(o->body, o->body_len);
	m.keep_alive_ms = o->keep_alive_ms;
	m.kind = o->kind;
	return pr_pack(&m.base, out);
}

cm_err
pr_ctx_open_decode(const void *p, size_t n, pr_ctx_open *out, cm_error *err)
{
	Shoal__CtxOpen *m = shoal__ctx_open__unpack(PB, n, p);
	memset(out, 0, sizeof(*out));
	if (!m)
		return cm_error_set(err, CM_EPARSE, "malformed context open request");
	out->index = cm_strdup(MEM, m->index);
	out->nshards = m->n_shards;
	out->shards = pr_dup_u32(m->shards, m->n_shards, m->n_shards);
	out->body = pr_dup_bin(&m->body, &out->body_len);
	out->keep_alive_ms = m->keep_alive_ms;
	out->kind = m->kind;
	shoal__ctx_open__free_unpacked(m, PB);
	return CM_OK;
}

void
pr_ctx_open_free(pr_ctx_open *o)
{
	cm_free(MEM, o->index);
	cm_free(MEM, o->shards);
	cm_free(MEM, o->body);
	memset(o, 0, sizeof(*o));
}

cm_err
pr_ctx_ids_encode(const uint64_t *ids, size_t n, cm_buf *out)
{
	Shoal__CtxOpenReply m = SHOAL__CTX_OPEN_REPLY__INIT;
	m.n_ids = n;
	m.ids = (uint64_t *)(uintptr_t)ids;
	return pr_pack(&m.base, out);
}

cm_err
pr_ctx_ids_decode(const void *p, size_t n, uint64_t **ids, size_t *nids, cm_error *err)
{
	Shoal__CtxOpenReply *m = shoal__ctx_open_reply__unpack(PB, n, p);
	if (!m)
		return cm_error_set(err, CM_EPARSE, "malformed context open reply");
	*ids = pr_dup_u64(m->ids, m->n_ids, m->n_ids);
	*nids = m->n_ids;
	shoal__ctx_open_reply__free_unpacked(m, PB);
	return CM_OK;
}

cm_err
pr_ctx_search_encode(const pr_ctx_search *s, cm_buf *out)
{
	Shoal__CtxSearch m = SHOAL__CTX_SEARCH__INIT;
	Shoal__CtxPage *pages = cm_calloc(MEM, s->npages + 1, sizeof(*pages));
	Shoal__CtxPage **pp = cm_calloc(MEM, s->npages + 1, sizeof(*pp));
	for (size_t i = 0; i < s->npages; i++) {
		shoal__ctx_page__init(&pages[i]);
		pages[i].id = s->pages[i].id;
		pages[i].take = s->pages[i].take;
		pages[i].ordinal = s->pages[i].ordinal;
		pp[i] = &pages[i];
	}
	m.n_pages = s->npages;
	m.pages = pp;
	m.size = s->size;
	m.keep_alive_ms = s->keep_alive_ms;
	m.first = s->first;
	m.want_body = s->want_body;
	if (s->body)
		m.body = pr_bin(s->body, s->body_len);
	m.phase = s->phase;
	cm_err rc = pr_pack(&m.base, out);
	cm_free(MEM, pages);
	cm_free(MEM, pp);
	return rc;
}

cm_err
pr_ctx_search_decode(const void *p, size_t n, pr_ctx_search *out, cm_error *err)
{
	Shoal__CtxSearch *m = shoal__ctx_search__unpack(PB, n, p);
	memset(out, 0, sizeof(*out));
	if (!m)
		return cm_error_set(err, CM_EPARSE, "malformed context search request");
	out->npages = m->n_pages;
	out->pages = cm_calloc(MEM, m->n_pages + 1, sizeof(pr_ctx_page));
	for (size_t i = 0; i < m->n_pages; i++)
		out->pages[i] =
		    (pr_ctx_page){m->pages[i]->id, m->pages[i]->take, m->pages[i]->ordinal};
	out->size = m->size;
	out->keep_alive_ms = m->keep_alive_ms;
	out->first = m->first;
	out->want_body = m->want_body;
	if (m->body.len)
		out->body = pr_dup_bin(&m->body, &out->body_len);
	out->phase = m->phase;
	shoal__ctx_search__free_unpacked(m, PB);
	return CM_OK;
}

void
pr_ctx_search_free(pr_ctx_search *s)
{
	cm_free(MEM, s->pages);
	cm_free(MEM, s->body);
	memset(s, 0, sizeof(*s));
}

cm_err
pr_ctx_reply_encode(const void *results, size_t rlen, const char *body, size_t blen, cm_buf *out)
{
	Shoal__CtxSearchReply m = SHOAL__CTX_SEARCH_REPLY__INIT;
	m.results = pr_bin(results, rlen);
	if (body)
		m.body = pr_bin(body, blen);
	return pr_pack(&m.base, out);
}

cm_err
pr_ctx_reply_decode(const void *p, size_t n, uint8_t **results, size_t *rlen, char **body,
                    size_t *blen, cm_error *err)
{
	Shoal__CtxSearchReply *m = shoal__ctx_search_reply__unpack(PB, n, p);
	if (!m)
		return cm_error_set(err, CM_EPARSE, "malformed context search reply");
	*results = (uint8_t *)pr_dup_bin(&m->results, rlen);
	*body = pr_dup_bin(&m->body, blen);
	shoal__ctx_search_reply__free_unpacked(m, PB);
	return CM_OK;
}

cm_err
pr_ctx_free_encode(const uint64_t *ids, size_t n, bool all, cm_buf *out)
{
	Shoal__CtxFree m = SHOAL__CTX_FREE__INIT;
	m.n_ids = n;
	m.ids = (uint64_t *)(uintptr_t)ids;
	m.all = all;
	return pr_pack(&m.base, out);
}

cm_err
pr_ctx_free_decode(const void *p, size_t n, uint64_t **ids, size_t *nids, bool *all, cm_error *err)
{
	Shoal__CtxFree *m = shoal__ctx_free__unpack(PB, n, p);
	if (!m)
		return cm_error_set(err, CM_EPARSE, "malformed context free request");
	*ids = pr_dup_u64(m->ids, m->n_ids, m->n_ids);
	*nids = m->n_ids;
	*all = m->all;
	shoal__ctx_free__free_unpacked(m, PB);
	return CM_OK;
}
