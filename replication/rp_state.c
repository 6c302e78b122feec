/* The typed cluster state: indices with their routing, the boot ids the
 * master took in, a version; its protobuf form (ClusterState) and the
 * events the master applies to it (ShardEvent). Pure data: no locks, no
 * host. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "proto/shoal.pb-c.h"
#include "rp_private.h"

/* The name -> position table of a state: open addressing, at most half
 * full, rebuilt when an index goes (positions shift) or it fills up. A
 * lookup costs a hash whatever the number of indices; a table that does
 * not cover every index (a state built by hand) is not used. */
struct rp_names {
	size_t cap, n; /* slots (a power of two), indices covered */
	uint32_t *slot; /* position + 1; 0 empty */
};

static uint64_t
name_hash(const char *s)
{
	uint64_t h = 14695981039346656037ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h ^ (h >> 29);
}

static void
names_put(struct rp_names *m, const rp_index *all, size_t pos)
{
	size_t i = name_hash(all[pos].name) & (m->cap - 1);
	while (m->slot[i])
		i = (i + 1) & (m->cap - 1);
	m->slot[i] = (uint32_t)pos + 1;
	m->n++;
}

static void
names_rebuild(rp_state *st)
{
	struct rp_names *m = st->byname;
	if (!m)
		m = st->byname = cm_calloc(MEM, 1, sizeof(*m));
	size_t cap = 16;
	while (cap < 2 * st->nindices + 2)
		cap <<= 1;
	if (cap != m->cap) {
		cm_free(MEM, m->slot);
		m->slot = cm_malloc(MEM, cap * sizeof(uint32_t));
		m->cap = cap;
	}
	memset(m->slot, 0, cap * sizeof(uint32_t));
	m->n = 0;
	for (size_t i = 0; i < st->nindices; i++)
		names_put(m, st->indices, i);
}

/* The index at position pos was appended: the table covers it. */
static void
names_added(rp_state *st, size_t pos)
{
	struct rp_names *m = st->byname;
	if (!m || m->n != pos || 2 * (pos + 1) + 2 > m->cap)
		names_rebuild(st);
	else
		names_put(m, st->indices, pos);
}

/* Room for one more index at the end. */
static rp_index *
grow(rp_state *st)
{
	if (st->nindices + 1 > st->cap) {
		st->cap = st->cap ? 2 * st->cap : 8;
		if (st->cap < st->nindices + 1)
			st->cap = st->nindices + 1;
		st->indices = cm_realloc(MEM, st->indices, st->cap * sizeof(rp_index));
	}
	return &st->indices[st->nindices];
}

/* An index's texts (name, uuid, body, mappings, settings log) are shared
 * between the states that hold them: a state copy takes a reference, not
 * a copy, so copying a state of thousands of indices to change one costs
 * a pointer per text, and two states compare a text they share by its
 * address. A text is never changed in place (rp_index_set_text replaces
 * it). The count sits before the characters. */
typedef struct txt_head {
	_Atomic uint32_t refs;
	uint32_t len;
} txt_head;

static char *
txt_new(const char *s, size_t len)
{
	txt_head *h = cm_malloc(MEM, sizeof(txt_head) + len + 1);
	atomic_init(&h->refs, 1);
	h->len = (uint32_t)len;
	char *t = (char *)(h + 1);
	if (len)
		memcpy(t, s, len);
	t[len] = '\0';
	return t;
}

static char *
txt_dup(const char *s)
{
	return txt_new(s ? s : "", s ? strlen(s) : 0);
}

static char *
txt_ref(char *t)
{
	if (!t)
		return txt_dup("");
	atomic_fetch_add_explicit(&((txt_head *)t - 1)->refs, 1, memory_order_relaxed);
	return t;
}

static void
txt_unref(char *t)
{
	if (!t)
		return;
	txt_head *h = (txt_head *)t - 1;
	if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1)
		cm_free(MEM, h);
}

static bool
txt_same(const char *a, const char *b)
{
	return a == b || strcmp(a, b) == 0;
}

rp_state *
rp_state_new(void)
{
	return cm_calloc(MEM, 1, sizeof(rp_state));
}

static void
index_clear(rp_index *ix)
{
	txt_unref(ix->name);
	txt_unref(ix->uuid);
	txt_unref(ix->body);
	txt_unref(ix->mappings);
	for (size_t i = 0; i < ix->nsettings; i++)
		txt_unref(ix->settings_log[i]);
	cm_free(MEM, ix->settings_log);
	cm_free(MEM, ix->routes);
	memset(ix, 0, sizeof(*ix));
}

static void
index_copy(rp_index *dst, const rp_index *src)
{
	dst->name = txt_ref(src->name);
	dst->uuid = txt_ref(src->uuid);
	dst->nshards = src->nshards;
	dst->nreplicas = src->nreplicas;
	dst->body = txt_ref(src->body);
	dst->mappings = txt_ref(src->mappings);
	dst->nsettings = src->nsettings;
	dst->settings_log = cm_calloc(MEM, src->nsettings + 1, sizeof(char *));
	for (size_t i = 0; i < src->nsettings; i++)
		dst->settings_log[i] = txt_ref(src->settings_log[i]);
	dst->routes = cm_calloc(MEM, (size_t)src->nshards + 1, sizeof(rp_route));
	if (src->nshards)
		memcpy(dst->routes, src->routes, (size_t)src->nshards * sizeof(rp_route));
}

void
rp_state_free(rp_state *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->nindices; i++)
		index_clear(&st->indices[i]);
	cm_free(MEM, st->indices);
	if (st->byname)
		cm_free(MEM, st->byname->slot);
	cm_free(MEM, st->byname);
	cm_free(MEM, st->settings);
	cm_free(MEM, st->templates);
	cm_free(MEM, st);
}

rp_state *
rp_state_dup(const rp_state *st)
{
	rp_state *d = rp_state_new();
	d->version = st->version;
	memcpy(d->joined, st->joined, sizeof(d->joined));
	d->settings = st->settings ? cm_strdup(MEM, st->settings) : NULL;
	d->templates = st->templates ? cm_strdup(MEM, st->templates) : NULL;
	memcpy(d->cluster_uuid, st->cluster_uuid, sizeof(d->cluster_uuid));
	d->indices = cm_calloc(MEM, st->nindices + 1, sizeof(rp_index));
	for (size_t i = 0; i < st->nindices; i++)
		index_copy(&d->indices[i], &st->indices[i]);
	d->nindices = st->nindices;
	d->cap = st->nindices + 1;
	names_rebuild(d);
	return d;
}

rp_index *
rp_state_index(const rp_state *st, const char *name)
{
	const struct rp_names *m = st->byname;
	if (m && m->n == st->nindices) {
		for (size_t i = name_hash(name) & (m->cap - 1); m->slot[i]; i = (i + 1) & (m->cap - 1))
			if (strcmp(st->indices[m->slot[i] - 1].name, name) == 0)
				return &st->indices[m->slot[i] - 1];
		return NULL;
	}
	for (size_t i = 0; i < st->nindices; i++)
		if (strcmp(st->indices[i].name, name) == 0)
			return &st->indices[i];
	return NULL;
}

static bool
route_same(const rp_route *a, const rp_route *b)
{
	if (a->primary != b->primary || a->term != b->term || a->in_sync != b->in_sync ||
	    a->ncopies != b->ncopies || a->relocating_from != b->relocating_from)
		return false;
	return memcmp(a->copies, b->copies, (size_t)a->ncopies * sizeof(int)) == 0;
}

bool
rp_index_routes_same(const rp_index *a, const rp_index *b)
{
	if (a->nshards != b->nshards || strcmp(a->uuid, b->uuid) != 0)
		return false;
	for (int s = 0; s < a->nshards; s++)
		if (!route_same(&a->routes[s], &b->routes[s]))
			return false;
	return true;
}

bool
rp_index_texts_same(const rp_index *a, const rp_index *b)
{
	if (a->nsettings != b->nsettings || !txt_same(a->name, b->name) ||
	    !txt_same(a->uuid, b->uuid) || !txt_same(a->body, b->body) ||
	    !txt_same(a->mappings, b->mappings))
		return false;
	for (size_t i = 0; i < a->nsettings; i++)
		if (!txt_same(a->settings_log[i], b->settings_log[i]))
			return false;
	return true;
}

bool
rp_index_same(const rp_index *a, const rp_index *b)
{
	return a->nreplicas == b->nreplicas && rp_index_texts_same(a, b) &&
	       rp_index_routes_same(a, b);
}

bool
rp_state_remove_index(rp_state *st, const char *name)
{
	rp_index *ix = rp_state_index(st, name);
	if (!ix)
		return false;
	size_t i = (size_t)(ix - st->indices);
	index_clear(ix);
	memmove(&st->indices[i], &st->indices[i + 1], (st->nindices - i - 1) * sizeof(rp_index));
	st->nindices--;
	if (st->byname)
		names_rebuild(st);
	return true;
}

void
rp_state_take_global(rp_state *st, rp_state *from)
{
	memcpy(st->joined, from->joined, sizeof(st->joined));
	memcpy(st->cluster_uuid, from->cluster_uuid, sizeof(st->cluster_uuid));
	cm_free(MEM, st->settings);
	cm_free(MEM, st->templates);
	st->settings = from->settings;
	st->templates = from->templates;
	from->settings = from->templates = NULL;
}

rp_index *
rp_state_put_index(rp_state *st, const rp_index *src)
{
	rp_state_remove_index(st, src->name);
	rp_index *ix = grow(st);
	memset(ix, 0, sizeof(*ix));
	index_copy(ix, src);
	names_added(st, st->nindices++);
	return ix;
}

rp_index *
rp_state_add_index(rp_state *st, const char *name, const char *uuid, int nshards, int nreplicas,
                   const int *data, int ndata)
{
	rp_state_remove_index(st, name);
	rp_index *ix = grow(st);
	memset(ix, 0, sizeof(*ix));
	ix->name = txt_dup(name);
	names_added(st, st->nindices++);
	ix->uuid = txt_dup(uuid);
	ix->nshards = nshards;
	ix->nreplicas = nreplicas;
	ix->body = txt_dup("");
	ix->mappings = txt_dup("");
	ix->settings_log = cm_calloc(MEM, 1, sizeof(char *));
	ix->routes = cm_calloc(MEM, (size_t)nshards + 1, sizeof(rp_route));
	int nc = 1 + nreplicas;
	if (nc > ndata)
		nc = ndata;
	if (nc > RP_MAX_COPIES)
		nc = RP_MAX_COPIES;
	for (int s = 0; s < nshards; s++) {
		rp_route *ro = &ix->routes[s];
		ro->relocating_from = -1;
		ro->primary = ndata ? data[s % ndata] : -1;
		ro->term = 1;
		ro->ncopies = ndata ? nc : 0;
		for (int c = 0; c < ro->ncopies; c++) {
			ro->copies[c] = data[(s + c) % ndata];
			ro->in_sync |= 1ull << ro->copies[c];
		}
	}
	return ix;
}

static int
copies_on(const rp_state *st, int node)
{
	int n = 0;
	for (size_t i = 0; i < st->nindices; i++)
		for (int s = 0; s < st->indices[i].nshards; s++)
			for (int c = 0; c < st->indices[i].routes[s].ncopies; c++)
				n += st->indices[i].routes[s].copies[c] == node;
	return n;
}


bool
rp_state_set_replicas(rp_state *st, const char *name, int nreplicas, const int *data, int ndata)
{
	rp_index *ix = rp_state_index(st, name);
	bool changed = false;
	if (!ix || nreplicas < 0)
		return false;
	int want = 1 + nreplicas;
	if (want > ndata)
		want = ndata;
	if (want > RP_MAX_COPIES)
		want = RP_MAX_COPIES;
	changed = ix->nreplicas != nreplicas;
	ix->nreplicas = nreplicas;
	for (int s = 0; s < ix->nshards; s++) {
		rp_route *ro = &ix->routes[s];
		while (ro->ncopies < want) {
			int pick = -1, best = 0;
			for (int k = 0; k < ndata; k++) {
				int n = data[(s + k) % ndata];
				if (has_copy(ro, n))
					continue;
				int load = copies_on(st, n);
				if (pick < 0 || load < best)
					pick = n, best = load;
			}
			if (pick < 0)
				break;
			ro->copies[ro->ncopies++] = pick; /* out of sync: it recovers */
			changed = true;
		}
		while (ro->ncopies > want && ro->ncopies > 1) {
			int drop = -1;
			for (int c = ro->ncopies - 1; c >= 0 && drop < 0; c--)
				if (ro->copies[c] != ro->primary &&
				    !((ro->in_sync >> ro->copies[c]) & 1))
					drop = c;
			for (int c = ro->ncopies - 1; c >= 0 && drop < 0; c--)
				if (ro->copies[c] != ro->primary)
					drop = c;
			if (drop < 0)
				break;
			ro->in_sync &= ~(1ull << ro->copies[drop]);
			if (ro->relocating_from == ro->copies[drop])
				ro->relocating_from = -1;
			memmove(&ro->copies[drop], &ro->copies[drop + 1],
			        (size_t)(ro->ncopies - drop - 1) * sizeof(int));
			ro->ncopies--;
			changed = true;
		}
	}
	return changed;
}

void
rp_index_set_text(char **field, const char *text)
{
	char *was = *field;
	*field = txt_dup(text); /* text may be the one replaced */
	txt_unref(was);
}

void
rp_state_set_settings(rp_state *st, const char *json)
{
	cm_free(MEM, st->settings);
	st->settings = json && *json ? cm_strdup(MEM, json) : NULL;
}

void
rp_index_add_setting(rp_index *ix, const char *json)
{
	ix->settings_log = cm_realloc(MEM, ix->settings_log, (ix->nsettings + 2) * sizeof(char *));
	ix->settings_log[ix->nsettings++] = txt_dup(json);
}

/* ---- protobuf form ---- */

static int
name_num(const char *const *names, int nn, const char *name)
{
	for (int i = 0; i < nn; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

static ProtobufCBinaryData
text_bin(const char *s)
{
	return (ProtobufCBinaryData){strlen(s), (uint8_t *)(uintptr_t)s};
}

void
rp_state_encode(const rp_state *st, const char *const *names, int nn, cm_buf *out)
{
	Shoal__ClusterState m = SHOAL__CLUSTER_STATE__INIT;
	size_t nrt = 0, nstr = 0;
	for (size_t i = 0; i < st->nindices; i++) {
		nrt += (size_t)st->indices[i].nshards;
		for (int s = 0; s < st->indices[i].nshards; s++)
			nstr += (size_t)(2 * st->indices[i].routes[s].ncopies);
	}
	Shoal__IndexState *ixs = cm_calloc(MEM, st->nindices + 1, sizeof(*ixs));
	Shoal__IndexState **ixp = cm_calloc(MEM, st->nindices + 1, sizeof(*ixp));
	Shoal__ShardRouting *rts = cm_calloc(MEM, nrt + 1, sizeof(*rts));
	Shoal__ShardRouting **rtp = cm_calloc(MEM, nrt + 1, sizeof(*rtp));
	char **strs = cm_calloc(MEM, nstr + 1, sizeof(char *));
	ProtobufCBinaryData *sets = NULL;
	size_t nsets = 0, k = 0, q = 0, z = 0;
	for (size_t i = 0; i < st->nindices; i++)
		nsets += st->indices[i].nsettings;
	sets = cm_calloc(MEM, nsets + 1, sizeof(*sets));
	Shoal__NodeBoot boots[RP_MAX_NODES], *bootp[RP_MAX_NODES];
	size_t nboot = 0;

	for (size_t i = 0; i < st->nindices; i++) {
		const rp_index *x = &st->indices[i];
		Shoal__IndexState *pb = &ixs[i];
		shoal__index_state__init(pb);
		pb->name = x->name;
		pb->uuid = x->uuid;
		pb->shards = (uint32_t)x->nshards;
		pb->replicas = (uint32_t)x->nreplicas;
		pb->body = text_bin(x->body);
		pb->mappings = text_bin(x->mappings);
		pb->n_settings_log = x->nsettings;
		pb->settings_log = &sets[z];
		for (size_t j = 0; j < x->nsettings; j++)
			sets[z++] = text_bin(x->settings_log[j]);
		pb->n_routing = (size_t)x->nshards;
		pb->routing = &rtp[k];
		for (int s = 0; s < x->nshards; s++, k++) {
			const rp_route *ro = &x->routes[s];
			Shoal__ShardRouting *r = &rts[k];
			shoal__shard_routing__init(r);
			rtp[k] = r;
			r->primary = (char *)(uintptr_t)(ro->primary >= 0 && ro->primary < nn
			                                     ? names[ro->primary]
			                                     : "");
			r->term = ro->term;
			r->relocating_from =
			    (char *)(uintptr_t)(ro->relocating_from >= 0 && ro->relocating_from < nn
			                            ? names[ro->relocating_from]
			                            : "");
			r->copies = &strs[q];
			for (int c = 0; c < ro->ncopies; c++)
				if (ro->copies[c] >= 0 && ro->copies[c] < nn)
					strs[q + r->n_copies++] =
					    (char *)(uintptr_t)names[ro->copies[c]];
			q += r->n_copies;
			r->in_sync = &strs[q];
			for (int c = 0; c < nn && c < RP_MAX_NODES; c++)
				if ((ro->in_sync >> c) & 1 && r->n_in_sync < (size_t)RP_MAX_COPIES)
					strs[q + r->n_in_sync++] = (char *)(uintptr_t)names[c];
			q += r->n_in_sync;
		}
		ixp[i] = pb;
	}
	for (int i = 0; i < nn && i < RP_MAX_NODES; i++) {
		if (!st->joined[i])
			continue;
		shoal__node_boot__init(&boots[nboot]);
		boots[nboot].node = (char *)(uintptr_t)names[i];
		boots[nboot].boot = st->joined[i];
		bootp[nboot] = &boots[nboot];
		nboot++;
	}
	m.version = st->version;
	m.n_indices = st->nindices;
	m.indices = ixp;
	m.n_joined = nboot;
	m.joined = bootp;
	if (st->settings)
		m.settings = text_bin(st->settings);
	if (st->templates)
		m.templates = text_bin(st->templates);
	m.cluster_uuid = (char *)st->cluster_uuid;
	size_t len = shoal__cluster_state__get_packed_size(&m);
	cm_buf_reserve(out, len + 1); /* never NULL + 0 */
	shoal__cluster_state__pack(&m, (uint8_t *)out->data + out->len);
	out->len += len;
	cm_free(MEM, ixs);
	cm_free(MEM, ixp);
	cm_free(MEM, rts);
	cm_free(MEM, rtp);
	cm_free(MEM, strs);
	cm_free(MEM, sets);
}

static char *
bin_text(ProtobufCBinaryData b)
{
	return cm_strndup(MEM, (const char *)(b.data ? b.data : (const uint8_t *)""), b.len);
}

/* An index's text: shared (txt_new), up to the first NUL as bin_text. */
static char *
bin_txt(ProtobufCBinaryData b)
{
	const char *p = (const char *)(b.data ? b.data : (const uint8_t *)"");
	return txt_new(p, strnlen(p, b.len));
}

cm_err
rp_state_decode(const void *p, size_t len, const char *const *names, int nn, rp_state **out,
                cm_error *err)
{
	Shoal__ClusterState *m = shoal__cluster_state__unpack(RP_PB, len, p);
	*out = NULL;
	if (!m)
		return cm_error_set(err, CM_EPARSE, "malformed cluster state");
	rp_state *st = rp_state_new();
	st->version = m->version;
	st->indices = cm_calloc(MEM, m->n_indices + 1, sizeof(rp_index));
	st->cap = m->n_indices + 1;
	for (size_t i = 0; i < m->n_indices; i++) {
		const Shoal__IndexState *pb = m->indices[i];
		rp_index *x = &st->indices[st->nindices];
		if (pb->shards > 100000 || pb->n_routing != pb->shards) {
			shoal__cluster_state__free_unpacked(m, RP_PB);
			rp_state_free(st);
			return cm_error_set(err, CM_EPARSE,
			                    "malformed cluster state: index [%s] has %u shards "
			                    "and %zu routing entries",
			                    pb->name, pb->shards, pb->n_routing);
		}
		st->nindices++;
		x->name = txt_dup(pb->name);
		x->uuid = txt_dup(pb->uuid);
		x->nshards = (int)pb->shards;
		x->nreplicas = (int)pb->replicas;
		x->body = bin_txt(pb->body);
		x->mappings = bin_txt(pb->mappings);
		x->settings_log = cm_calloc(MEM, pb->n_settings_log + 1, sizeof(char *));
		for (size_t j = 0; j < pb->n_settings_log; j++)
			x->settings_log[x->nsettings++] = bin_txt(pb->settings_log[j]);
		x->routes = cm_calloc(MEM, pb->shards + 1, sizeof(rp_route));
		for (size_t s = 0; s < pb->n_routing; s++) {
			const Shoal__ShardRouting *r = pb->routing[s];
			rp_route *ro = &x->routes[s];
			ro->primary = name_num(names, nn, r->primary);
			ro->relocating_from = name_num(names, nn, r->relocating_from);
			ro->term = r->term;
			for (size_t c = 0; c < r->n_copies && ro->ncopies < RP_MAX_COPIES; c++) {
				int n = name_num(names, nn, r->copies[c]);
				if (n >= 0)
					ro->copies[ro->ncopies++] = n;
			}
			for (size_t c = 0; c < r->n_in_sync; c++) {
				int n = name_num(names, nn, r->in_sync[c]);
				if (n >= 0 && n < RP_MAX_NODES)
					ro->in_sync |= 1ull << n;
			}
		}
	}
	for (size_t i = 0; i < m->n_joined; i++) {
		int n = name_num(names, nn, m->joined[i]->node);
		if (n >= 0 && n < RP_MAX_NODES)
			st->joined[n] = m->joined[i]->boot;
	}
	if (m->settings.len)
		st->settings = bin_text(m->settings);
	if (m->templates.len)
		st->templates = bin_text(m->templates);
	if (m->cluster_uuid)
		snprintf(st->cluster_uuid, sizeof(st->cluster_uuid), "%s", m->cluster_uuid);
	shoal__cluster_state__free_unpacked(m, RP_PB);
	if (st->nindices > 1)
		names_rebuild(st);
	*out = st;
	return CM_OK;
}

void
rp_state_encode_index(const rp_state *st, size_t i, const char *const *names, int nn, cm_buf *out)
{
	rp_state part = {
	    .version = 0, .indices = (rp_index *)(uintptr_t)&st->indices[i], .nindices = 1};
	rp_state_encode(&part, names, nn, out);
}

void
rp_state_encode_global(const rp_state *st, const char *const *names, int nn, cm_buf *out)
{
	rp_state part = {.version = 0, .settings = st->settings, .templates = st->templates};
	memcpy(part.joined, st->joined, sizeof(part.joined));
	memcpy(part.cluster_uuid, st->cluster_uuid, sizeof(part.cluster_uuid));
	rp_state_encode(&part, names, nn, out);
}

cm_err
rp_state_merge(rp_state *into, const void *p, size_t len, const char *const *names, int nn,
               cm_error *err)
{
	rp_state *part;
	cm_err rc = rp_state_decode(p, len, names, nn, &part, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < part->nindices; i++) {
		rp_state_remove_index(into, part->indices[i].name);
		*grow(into) = part->indices[i]; /* moved */
		names_added(into, into->nindices++);
	}
	part->nindices = 0;
	for (int n = 0; n < RP_MAX_NODES; n++)
		if (part->joined[n])
			into->joined[n] = part->joined[n];
	if (part->cluster_uuid[0])
		memcpy(into->cluster_uuid, part->cluster_uuid, sizeof(into->cluster_uuid));
	if (part->templates) {
		cm_free(MEM, into->templates);
		into->templates = part->templates;
		part->templates = NULL;
	}
	if (part->settings) {
		cm_free(MEM, into->settings);
		into->settings = part->settings;
		part->settings = NULL;
	}
	rp_state_free(part);
	return CM_OK;
}

cm_err
rp_state_names(const void *p, size_t len, void (*fn)(void *arg, const char *name), void *arg)
{
	Shoal__ClusterState *m = shoal__cluster_state__unpack(RP_PB, len, p);
	if (!m)
		return CM_EPARSE;
	for (size_t i = 0; i < m->n_indices; i++)
		for (size_t s = 0; s < m->indices[i]->n_routing; s++) {
			const Shoal__ShardRouting *r = m->indices[i]->routing[s];
			if (*r->primary)
				fn(arg, r->primary);
			for (size_t c = 0; c < r->n_copies; c++)
				fn(arg, r->copies[c]);
			for (size_t c = 0; c < r->n_in_sync; c++)
				fn(arg, r->in_sync[c]);
		}
	for (size_t i = 0; i < m->n_joined; i++)
		fn(arg, m->joined[i]->node);
	shoal__cluster_state__free_unpacked(m, RP_PB);
	return CM_OK;
}

/* ---- events ---- */

static const char *
name_of(const char *const *names, int n)
{
	return n >= 0 ? names[n] : "";
}

void
rp_event_encode(const rp_event *ev, const char *const *names, cm_buf *out)
{
	Shoal__ShardEvent m = SHOAL__SHARD_EVENT__INIT;
	Shoal__ShardRef ref = SHOAL__SHARD_REF__INIT;
	m.kind = (Shoal__ShardEvent__Kind)ev->kind;
	ref.index = (char *)(uintptr_t)(ev->index ? ev->index : "");
	ref.uuid = (char *)(uintptr_t)(ev->uuid ? ev->uuid : "");
	ref.shard = (uint32_t)(ev->shard < 0 ? 0 : ev->shard);
	ref.node = (char *)(uintptr_t)name_of(names, ev->node);
	m.ref = &ref;
	m.term = ev->term;
	m.primary = (char *)(uintptr_t)name_of(names, ev->primary);
	m.reason = (char *)(uintptr_t)(ev->reason ? ev->reason : "");
	m.boot = ev->boot;
	size_t len = shoal__shard_event__get_packed_size(&m);
	cm_buf_reserve(out, len + 1); /* never NULL + 0 */
	shoal__shard_event__pack(&m, (uint8_t *)out->data + out->len);
	out->len += len;
}

cm_err
rp_event_decode(const void *p, size_t len, const char *const *names, int nn, rp_event *ev,
                void **keep, cm_error *err)
{
	Shoal__ShardEvent *m = shoal__shard_event__unpack(RP_PB, len, p);
	memset(ev, 0, sizeof(*ev));
	*keep = NULL;
	if (!m || !m->ref || m->kind < 1 || m->kind > 3) {
		if (m)
			shoal__shard_event__free_unpacked(m, RP_PB);
		return cm_error_set(err, CM_EPARSE, "malformed shard event");
	}
	ev->kind = (rp_event_kind)m->kind;
	ev->index = m->ref->index;
	ev->uuid = m->ref->uuid;
	ev->shard = (int)m->ref->shard;
	ev->node = name_num(names, nn, m->ref->node);
	ev->primary = name_num(names, nn, m->primary);
	ev->term = m->term;
	ev->boot = m->boot;
	ev->reason = m->reason;
	*keep = m;
	if (ev->node < 0)
		return cm_error_set(err, CM_EINVAL, "unknown node [%s]", m->ref->node);
	return CM_OK;
}

void
rp_event_free(void *keep)
{
	if (keep)
		shoal__shard_event__free_unpacked(keep, RP_PB);
}

cm_err
rp_state_apply(rp_state *st, const rp_event *ev, bool *changed, cm_error *err)
{
	*changed = false;
	if (ev->node < 0 || ev->node >= RP_MAX_NODES)
		return cm_error_set(err, CM_EINVAL, "unknown node");
	uint64_t bit = 1ull << ev->node;
	if (ev->kind == RP_EV_JOIN) {
		/* A process joins once: its copies recover before they count;
		 * where it leads, the replicas resync from it (it may hold
		 * operations they lack). The same boot again changes nothing. */
		if (st->joined[ev->node] == ev->boot)
			return CM_OK;
		st->joined[ev->node] = ev->boot;
		for (size_t i = 0; i < st->nindices; i++)
			for (int s = 0; s < st->indices[i].nshards; s++) {
				rp_route *ro = &st->indices[i].routes[s];
				if (ro->primary == ev->node)
					ro->in_sync = bit;
				else
					ro->in_sync &= ~bit;
			}
		*changed = true;
		return CM_OK;
	}
	rp_index *ix = rp_state_index(st, ev->index ? ev->index : "");
	if (!ix || ev->shard < 0 || ev->shard >= ix->nshards)
		return cm_error_set(err, CM_ENOINDEX, "no such shard [%s][%d]",
		                    ev->index ? ev->index : "", ev->shard);
	if (strcmp(ix->uuid, ev->uuid ? ev->uuid : "") != 0)
		return cm_error_set(err, CM_ECONFLICT, "index [%s] was re-created", ix->name);
	rp_route *ro = &ix->routes[ev->shard];
	if (ev->term != ro->term || ev->primary != ro->primary)
		return cm_error_set_type(err, CM_ECONFLICT, "shard_state_exception",
		                         "[%s][%d] primary term %" PRIu64
		                         " is stale: the shard is in term %" PRIu64,
		                         ix->name, ev->shard, ev->term, ro->term);
	if (ev->kind == RP_EV_FAILED) {
		*changed = (ro->in_sync & bit) != 0;
		ro->in_sync &= ~bit;
	} else {
		bool copy = false;
		for (int c = 0; c < ro->ncopies; c++)
			copy |= ro->copies[c] == ev->node;
		if (!copy)
			return cm_error_set(err, CM_EINVAL, "[%s][%d] has no copy on that node",
			                    ix->name, ev->shard);
		*changed = (ro->in_sync & bit) == 0;
		ro->in_sync |= bit;
	}
	return CM_OK;
}

bool
rp_state_failover(rp_state *st, uint64_t gone, uint64_t alive)
{
	bool changed = false;
	for (size_t i = 0; i < st->nindices; i++)
		for (int s = 0; s < st->indices[i].nshards; s++) {
			rp_route *ro = &st->indices[i].routes[s];
			if (ro->primary < 0 || !((gone >> ro->primary) & 1))
				continue;
			int pick = -1;
			for (int c = 0; c < ro->ncopies && pick < 0; c++) {
				int n = ro->copies[c];
				if (n != ro->primary && ((ro->in_sync >> n) & 1) &&
				    ((alive >> n) & 1))
					pick = n;
			}
			if (pick < 0) {
				cm_warn(
				    "replication",
				    "[%s][%d] primary is gone and no in-sync copy is reachable: "
				    "the shard stays red",
				    st->indices[i].name, s);
				continue;
			}
			cm_warn("replication",
			        "[%s][%d] primary unreachable past the failover timeout: promoting "
			        "a copy, primary term %" PRIu64,
			        st->indices[i].name, s, ro->term + 1);
			/* the other copies resync from the new primary: one may hold
			 * a batch of the old primary that another never got */
			ro->in_sync = 1ull << pick;
			ro->primary = pick;
			ro->term++;
			changed = true;
		}
	return changed;
}
