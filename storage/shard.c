/* The shard: shard.mdb (commit point, deleted-doc bitsets, operation log)
 * plus immutable segment files, an indexing buffer and reader snapshots.
 *
 * Locking: `wmu` (the write lock) guards everything the writer changes:
 * the buffer, the version map, the writer's segment list and live bits,
 * sequence numbers and commits. `rmu` guards only the pointer to the
 * current reader snapshot, so searches never wait for indexing. The log
 * sync runs outside wmu so concurrent batches share one fsync. Background
 * merges run on a per-shard thread (never on merge_pool itself: a merge
 * waits for its own tasks on that pool, and a pool worker waiting for the
 * pool can deadlock it); the merge work is spread over merge_pool.
 *
 * Durability: shard.mdb runs MDB_NOSYNC and every write that must be
 * durable is followed by mdb_env_sync, so an acknowledged op survives
 * kill -9 (the kernel holds the pages) and a machine crash once its sync
 * returned. LMDB's NOSYNC mode gives no ordering between data and meta
 * pages of *unsynced* transactions, so a power loss in the window between
 * a log commit and its shared sync could leave shard.mdb needing repair;
 * a leader that writes all waiting batches in one synced transaction would
 * close that window at the cost of a second fsync per group.
 *
 * Indexing buffers: a batch decides, logs and numbers its docs under wmu,
 * then analyzes them into buffers it holds (one per part of the batch, on
 * index_pool) without any lock, and gives the buffers back under wmu. So
 * the write lock covers the id lookups and the log, not the analysis.
 *
 * Refresh: the buffers are frozen under wmu once every batch gave its
 * back, written without it (one segment each, in parallel; indexing goes
 * on into fresh buffers; realtime get reads the frozen ones), and
 * committed with every segment's deletes as of the freeze. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "../common/cm_log.h"
#include "shard_private.h"

static void merge_want_locked(st_shard *s);

#define MB ((size_t)1 << 20)
#define SHARD_MAP_SIZE ((size_t)1 << 36) /* address space only; the file grows as needed */
#define MAX_ID_LEN 512                   /* as Elasticsearch */
#define COMMIT_FORMAT 1
#define MERGE_FLOOR_BYTES (2 * MB) /* segments below this share the lowest tier */
#define NO_DOC UINT32_MAX
#define COMPACT_MIN_FREE ((uint64_t)1 << 20) /* flush compacts shard.mdb past this much free */
#define LOG_TRIM_OPS 262144 /* a refresh trims the log once this many committed ops pile up */

/* The shard's structures (seg_ref, live_ref, st_reader, wseg, membuf,
 * frozen_buf, commit_point, struct st_shard) are in shard_private.h. */

/* Lock order everywhere: refresh_mu, then wmu. */
static void
lock_both(st_shard *s)
{
	pthread_mutex_lock(&s->refresh_mu);
	pthread_mutex_lock(&s->wmu);
}

static void
unlock_both(st_shard *s)
{
	pthread_mutex_unlock(&s->wmu);
	pthread_mutex_unlock(&s->refresh_mu);
}

static cm_err refresh_run(st_shard *s);

/* ---------------------------------------------------------------- */
/* refcounting */

static void
seg_ref_release(seg_ref *r)
{
	if (r == NULL || atomic_fetch_sub(&r->refs, 1) != 1)
		return;
	st_segment_close(r->seg);
	if (atomic_load(&r->drop))
		st__seg_dir_unlink(r->sdir, r->path);
	st__seg_dir_release(r->sdir);
	cm_free(CM_MEM_STORAGE, r->path);
	cm_free(CM_MEM_STORAGE, r);
}

static live_ref *
live_new(uint32_t nbits, bool all_live)
{
	size_t w = st_bit_words(nbits);
	live_ref *l = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*l) + w * sizeof(uint64_t));
	atomic_init(&l->refs, 1);
	l->nbits = nbits;
	if (all_live) {
		for (uint32_t i = 0; i < nbits; i++)
			st_bit_set(l->bits, i);
		l->count = nbits;
	}
	return l;
}

static live_ref *
live_ref_get(live_ref *l)
{
	if (l)
		atomic_fetch_add(&l->refs, 1);
	return l;
}

static void
live_release(live_ref *l)
{
	if (l && atomic_fetch_sub(&l->refs, 1) == 1)
		cm_free(CM_MEM_STORAGE, l);
}

static live_ref *
live_copy(const live_ref *src)
{
	size_t w = st_bit_words(src->nbits);
	live_ref *l = cm_malloc(CM_MEM_STORAGE, sizeof(*l) + w * sizeof(uint64_t));
	atomic_init(&l->refs, 1);
	l->nbits = src->nbits;
	l->count = src->count;
	memcpy(l->bits, src->bits, w * sizeof(uint64_t));
	return l;
}

static bool
live_get(const live_ref *l, uint32_t doc)
{
	return l == NULL || st_bit_get(l->bits, doc);
}

static void
reader_free(st_reader *r)
{
	for (size_t i = 0; i < r->n; i++) {
		live_release(r->live[i]);
		seg_ref_release(r->segs[i]);
		cm_free(CM_MEM_STORAGE, r->plive[i]);
		cm_free(CM_MEM_STORAGE, r->nlive[i]);
	}
	cm_free(CM_MEM_STORAGE, r->plive);
	cm_free(CM_MEM_STORAGE, r->nlive);
	cm_free(CM_MEM_STORAGE, r->pcount);
	cm_free(CM_MEM_STORAGE, r->segs);
	cm_free(CM_MEM_STORAGE, r->live);
	if (r->mapping)
		st_mapping_unref(r->mapping);
	void *aux = atomic_load(&r->aux);
	if (aux)
		r->aux_free(aux);
	cm_free(CM_MEM_STORAGE, r);
}

void *
st_reader_aux(const st_reader *r)
{
	return atomic_load_explicit(&((st_reader *)r)->aux, memory_order_acquire);
}

void *
st_reader_aux_keep(const st_reader *r, void *aux, void (*free_aux)(void *))
{
	st_reader *w = (st_reader *)r; /* the view is immutable; aux is set once */
	void *none = NULL;
	if (!atomic_compare_exchange_strong_explicit(&w->aux, &none, aux, memory_order_acq_rel,
	                                             memory_order_acquire))
		return none;
	w->aux_free = free_aux; /* read only by reader_free, after the caller's reference */
	return aux;
}

const st_mapping *
st_reader_mapping(const st_reader *r)
{
	return r->mapping;
}

void
st_reader_release(st_reader *r)
{
	if (r && atomic_fetch_sub(&r->refs, 1) == 1)
		reader_free(r);
}

size_t
st_reader_nsegments(const st_reader *r)
{
	return r->n;
}

st_segment *
st_reader_segment(const st_reader *r, size_t i)
{
	return r->segs[i]->seg;
}

const uint64_t *
st_reader_live(const st_reader *r, size_t i)
{
	if (r->plive[i])
		return r->plive[i];
	return r->live[i] ? r->live[i]->bits : NULL;
}

uint32_t
st_reader_live_count(const st_reader *r, size_t i)
{
	if (r->plive[i])
		return r->pcount[i];
	return r->live[i] ? r->live[i]->count : r->segs[i]->max_doc;
}

const uint64_t *
st_reader_nested_live(const st_reader *r, size_t i)
{
	return r->nlive[i];
}

/* Splits segment i's live docs into live roots and live nested docs (a
 * nested doc lives while its root, the next doc that is not nested,
 * does: deletes only ever clear roots). */
static void
reader_split_nested(st_reader *r, size_t i)
{
	const st_segment *seg = r->segs[i]->seg;
	const uint64_t *nested = st_segment_nested(seg);
	if (nested == NULL)
		return;
	uint32_t md = r->segs[i]->max_doc;
	size_t words = st_bit_words(md) + 1;
	uint64_t *p = cm_calloc(CM_MEM_STORAGE, words, sizeof(uint64_t));
	uint64_t *nl = cm_calloc(CM_MEM_STORAGE, words, sizeof(uint64_t));
	const uint64_t *live = r->live[i] ? r->live[i]->bits : NULL;
	uint32_t count = 0;
	bool palive = false;
	if (live == NULL) {
		/* no deletes: word operations */
		size_t nw = st_bit_words(md);
		for (size_t w = 0; w < nw; w++) {
			uint64_t all = w + 1 < nw || !(md & 63) ? ~(uint64_t)0
			                                        : ((uint64_t)1 << (md & 63)) - 1;
			p[w] = ~nested[w] & all;
			nl[w] = nested[w] & all;
			count += (uint32_t)__builtin_popcountll(p[w]);
		}
		md = 0; /* skips the loop below */
	}
	for (uint32_t d = md; d-- > 0;) {
		bool alive = live == NULL || st_bit_get(live, d);
		if (!st_bit_get(nested, d)) {
			palive = alive;
			if (alive) {
				st_bit_set(p, d);
				count++;
			}
		} else if (alive && palive) {
			st_bit_set(nl, d);
		}
	}
	r->plive[i] = p;
	r->nlive[i] = nl;
	r->pcount[i] = count;
}

uint64_t
st_reader_doc_count(const st_reader *r)
{
	return r->docs;
}

st_reader *
st_shard_reader(st_shard *s)
{
	pthread_mutex_lock(&s->rmu);
	st_reader *r = s->cur;
	atomic_fetch_add(&r->refs, 1);
	pthread_mutex_unlock(&s->rmu);
	return r;
}

static st_mapping *mapping_get(st_shard *s);

/* Numbers readers as they are published, across every shard of the process. */
static _Atomic uint64_t reader_gens;

uint64_t
st_reader_generation(const st_reader *r)
{
	return r->gen;
}

/* A reader over n segments (their refs and live views taken), without
 * its mapping. */
static st_reader *
reader_new(size_t n, seg_ref *const *segs, live_ref *const *live, size_t stride)
{
	st_reader *r = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*r));
	atomic_init(&r->refs, 1);
	r->gen = atomic_fetch_add(&reader_gens, 1) + 1;
	r->n = n;
	r->segs = cm_calloc(CM_MEM_STORAGE, r->n ? r->n : 1, sizeof(*r->segs));
	r->live = cm_calloc(CM_MEM_STORAGE, r->n ? r->n : 1, sizeof(*r->live));
	r->plive = cm_calloc(CM_MEM_STORAGE, r->n ? r->n : 1, sizeof(*r->plive));
	r->nlive = cm_calloc(CM_MEM_STORAGE, r->n ? r->n : 1, sizeof(*r->nlive));
	r->pcount = cm_calloc(CM_MEM_STORAGE, r->n ? r->n : 1, sizeof(*r->pcount));
	for (size_t i = 0; i < r->n; i++) {
		r->segs[i] = *(seg_ref *const *)((const char *)segs + i * stride);
		atomic_fetch_add(&r->segs[i]->refs, 1);
		r->live[i] = live_ref_get(*(live_ref *const *)((const char *)live + i * stride));
		reader_split_nested(r, i);
		r->docs += st_reader_live_count(r, i);
	}
	return r;
}

/* Swaps r in (unless `expect` is given and no longer current: r is then
 * dropped); its mapping is read here, under rmu, so that of two
 * publications racing a mapping change the later holds the newer. */
static void
reader_swap_in(st_shard *s, st_reader *r, const st_reader *expect)
{
	pthread_mutex_lock(&s->rmu);
	st_reader *old = s->cur;
	if (expect && old != expect) {
		pthread_mutex_unlock(&s->rmu);
		st_reader_release(r);
		return;
	}
	r->mapping = mapping_get(s);
	s->cur = r;
	pthread_mutex_unlock(&s->rmu);
	if (old)
		st_reader_release(old);
}

/* Builds a reader from the writer's published views and swaps it in. */
static void
publish_reader(st_shard *s)
{
	st_reader *r = s->nsegs ? reader_new(s->nsegs, &s->segs[0].ref,
	                                     (live_ref *const *)&s->segs[0].pub, sizeof(s->segs[0]))
	                        : reader_new(0, NULL, NULL, 0);
	reader_swap_in(s, r, NULL);
}

/* The current reader again with the shard's mapping now: a shard that
 * gets no write (so no refresh) sees fields mapped since (a sort on one
 * of them must not read as unmapped there). A refresh that publishes
 * meanwhile wins: its reader has the mapping too. */
static void
republish_mapping(st_shard *s)
{
	pthread_mutex_lock(&s->rmu);
	st_reader *cur = s->cur;
	if (cur)
		atomic_fetch_add(&cur->refs, 1);
	pthread_mutex_unlock(&s->rmu);
	if (!cur)
		return;
	reader_swap_in(s, reader_new(cur->n, cur->segs, cur->live, sizeof(cur->segs[0])), cur);
	st_reader_release(cur);
}

/* ---------------------------------------------------------------- */
/* version map */

static uint64_t
id_hash(const char *id, size_t len)
{
	uint64_t h = XXH3_64bits(id, len);
	return h ? h : 1;
}

static vm_entry *
vm_find(const vmap *m, const char *id, size_t len, uint64_t h)
{
	if (m->cap == 0)
		return NULL;
	size_t mask = m->cap - 1;
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		vm_entry *e = &m->vm[i];
		if (e->hash == 0)
			return NULL;
		if (e->hash == h && e->id_len == len &&
		    memcmp(m->ids.data + e->id_off, id, len) == 0)
			return e;
	}
}

static void
vm_grow(vmap *m)
{
	vm_entry *old = m->vm;
	size_t oldcap = m->cap;
	m->cap = oldcap ? oldcap * 2 : 1024;
	m->vm = cm_calloc(CM_MEM_STORAGE, m->cap, sizeof(*m->vm));
	size_t mask = m->cap - 1;
	for (size_t i = 0; i < oldcap; i++) {
		if (old[i].hash == 0)
			continue;
		size_t j = old[i].hash & mask;
		while (m->vm[j].hash)
			j = (j + 1) & mask;
		m->vm[j] = old[i];
	}
	cm_free(CM_MEM_STORAGE, old);
}

static void
vm_put(vmap *m, const char *id, size_t len, uint64_t h, const vm_entry *val)
{
	vm_entry *e = vm_find(m, id, len, h);
	if (e == NULL) {
		if ((m->count + 1) * 4 > m->cap * 3)
			vm_grow(m);
		size_t mask = m->cap - 1, i = h & mask;
		while (m->vm[i].hash)
			i = (i + 1) & mask;
		e = &m->vm[i];
		e->hash = h;
		e->id_off = (uint32_t)m->ids.len;
		e->id_len = (uint32_t)len;
		cm_buf_put(&m->ids, id, len);
		m->count++;
	}
	e->seq_no = val->seq_no;
	e->term = val->term;
	e->version = val->version;
	e->buf_doc = val->buf_doc;
	e->buf = val->buf;
	e->deleted = val->deleted;
}

/* When frozen buffers retire: their docs are in segments now, but
 * tombstones stay while their seq_no is above the local checkpoint, so a
 * replica still recognises an older, reordered op for a deleted id. */
static void
vm_carry_tombstones(vmap *to, const vmap *from, int64_t ckp)
{
	for (size_t i = 0; i < from->cap; i++) {
		const vm_entry *e = &from->vm[i];
		if (e->hash == 0 || !e->deleted || (int64_t)e->seq_no <= ckp)
			continue;
		const char *id = (const char *)from->ids.data + e->id_off;
		if (vm_find(to, id, e->id_len, e->hash))
			continue; /* a newer op on the id */
		vm_put(to, id, e->id_len, e->hash, e);
	}
}

static size_t
vm_ram(const vmap *m)
{
	return m->cap * sizeof(vm_entry) + m->ids.cap;
}

/* ---------------------------------------------------------------- */
/* indexing buffers */

static membuf *
membuf_new(void)
{
	membuf *m = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*m));
	m->b = st_segbuild_create();
	return m;
}

static void
membuf_free(membuf *m)
{
	if (m == NULL)
		return;
	if (m->b)
		st_segbuild_destroy(m->b);
	cm_free(CM_MEM_STORAGE, m->del);
	for (size_t i = 0; i < m->nblocks; i++)
		cm_free(CM_MEM_STORAGE, m->blocks[i]);
	cm_free(CM_MEM_STORAGE, m->blocks);
	cm_free(CM_MEM_STORAGE, m->src_ptr);
	cm_free(CM_MEM_STORAGE, m->src_len);
	cm_free(CM_MEM_STORAGE, m);
}

static void
bufset_init(bufset *bs)
{
	memset(bs, 0, sizeof(*bs));
	cm_buf_init(&bs->vm.ids, CM_MEM_STORAGE);
}

static void
bufset_free(bufset *bs)
{
	for (size_t i = 0; i < bs->n; i++)
		membuf_free(bs->b[i]);
	cm_free(CM_MEM_STORAGE, bs->b);
	cm_free(CM_MEM_STORAGE, bs->vm.vm);
	cm_buf_free(&bs->vm.ids);
	memset(bs, 0, sizeof(*bs));
}

/* Docs handed out and not deleted, over every buffer (wmu). */
static uint64_t
bufset_docs(const bufset *bs)
{
	uint64_t n = 0;
	for (size_t i = 0; i < bs->n; i++)
		n += bs->b[i]->reserved - bs->b[i]->ndel;
	return n;
}

/* What the buffers hold, for the one memory budget (wmu). */
static size_t
bufset_ram(const bufset *bs)
{
	size_t n = vm_ram(&bs->vm);
	for (size_t i = 0; i < bs->n; i++)
		n += bs->b[i]->ram;
	return n;
}

#define SRC_BLOCK ((size_t)1 << 20)

static const char *
src_store(membuf *m, const char *src, size_t len)
{
	bool own = len > SRC_BLOCK / 4; /* big sources get a block of their own */
	if (own || m->nblocks == 0 || m->block_used + len > SRC_BLOCK) {
		if (m->nblocks == m->blocks_cap) {
			m->blocks_cap = m->blocks_cap ? m->blocks_cap * 2 : 16;
			m->blocks = cm_realloc(CM_MEM_STORAGE, m->blocks,
			                       m->blocks_cap * sizeof(*m->blocks));
		}
		size_t sz = own ? (len ? len : 1) : SRC_BLOCK;
		uint8_t *blk = cm_malloc(CM_MEM_STORAGE, sz);
		m->src_bytes += sz;
		if (own && m->nblocks > 0) {
			/* Keep the partly filled block last, so it keeps filling. */
			m->blocks[m->nblocks] = m->blocks[m->nblocks - 1];
			m->blocks[m->nblocks - 1] = blk;
			m->nblocks++;
			memcpy(blk, src, len);
			return (const char *)blk;
		}
		m->blocks[m->nblocks++] = blk;
		m->block_used = 0;
		if (own) {
			memcpy(blk, src, len);
			m->block_used = SRC_BLOCK; /* full: the next source starts a new block */
			return (const char *)blk;
		}
	}
	uint8_t *dst = m->blocks[m->nblocks - 1] + m->block_used;
	memcpy(dst, src, len);
	m->block_used += len;
	return (const char *)dst;
}

/* The source of a doc just added (by the buffer's holder). */
static void
buffer_note_doc(membuf *m, uint32_t docno, const char *src, size_t len)
{
	if (docno >= m->src_cap) {
		size_t cap = m->src_cap ? m->src_cap : 1024;
		while (cap <= docno)
			cap *= 2;
		m->src_ptr = cm_realloc(CM_MEM_STORAGE, m->src_ptr, cap * sizeof(*m->src_ptr));
		m->src_len = cm_realloc(CM_MEM_STORAGE, m->src_len, cap * sizeof(*m->src_len));
		m->src_cap = cap;
	}
	m->src_ptr[docno] = src_store(m, src, len);
	m->src_len[docno] = (uint32_t)len;
}

/* Hands out n doc numbers, the first returned (wmu). */
static uint32_t
buffer_reserve(membuf *m, uint32_t n)
{
	uint32_t first = m->reserved;
	m->reserved += n;
	size_t words = st_bit_words(m->reserved);
	if (words > m->del_words) {
		size_t nw = m->del_words ? m->del_words : 16;
		while (nw < words)
			nw *= 2;
		m->del = cm_realloc(CM_MEM_STORAGE, m->del, nw * sizeof(uint64_t));
		memset(m->del + m->del_words, 0, (nw - m->del_words) * sizeof(uint64_t));
		m->del_words = nw;
	}
	return first;
}

static void
buffer_delete(membuf *m, uint32_t docno)
{
	if (!st_bit_get(m->del, docno)) {
		st_bit_set(m->del, docno);
		m->ndel++;
	}
}

static void
frozen_free(frozen_buf *f)
{
	if (f == NULL)
		return;
	for (size_t i = 0; i < f->set.n; i++)
		cm_free(CM_MEM_STORAGE, f->late[i]);
	cm_free(CM_MEM_STORAGE, f->late);
	cm_free(CM_MEM_STORAGE, f->gen);
	bufset_free(&f->set);
	for (size_t i = 0; i < f->npend; i++) {
		live_release(f->pend_live[i]);
		seg_ref_release(f->pend_ref[i]);
	}
	cm_free(CM_MEM_STORAGE, f->pend_ref);
	cm_free(CM_MEM_STORAGE, f->pend_live);
	cm_free(CM_MEM_STORAGE, f);
}

/* Clears doc in the writer's live bits of segment i (copy-on-write). */
static void
segment_delete(st_shard *s, size_t i, uint32_t doc)
{
	wseg *w = &s->segs[i];
	if (w->live == NULL)
		w->live = live_new(w->ref->max_doc, true);
	else if (atomic_load(&w->live->refs) > 1) {
		live_ref *c = live_copy(w->live);
		live_release(w->live);
		w->live = c;
	}
	if (st_bit_get(w->live->bits, doc)) {
		w->live->bits[doc >> 6] &= ~((uint64_t)1 << (doc & 63));
		w->live->count--;
	}
}

/* ---------------------------------------------------------------- */
/* looking up an id's current state */

enum { LOC_NONE, LOC_BUFFER, LOC_FROZEN, LOC_SEGMENT };

typedef struct id_state {
	bool exists, tombstone;
	uint64_t seq_no, term;
	int64_t version;
	int loc;
	uint32_t doc;
	uint32_t buf; /* LOC_BUFFER, LOC_FROZEN: which buffer */
	size_t seg;
} id_state;

/* Per-call cache of segment read transactions and metadata columns. */
typedef struct seg_ctx {
	st_seg_txn *txn;
	const st_field_info *f[3];
	st_colblock cb[3];
	bool opened, failed;
} seg_ctx;

typedef struct lookup_ctx {
	seg_ctx *sc;
	size_t n;
} lookup_ctx;

static void
lookup_init(lookup_ctx *lc, size_t n)
{
	lc->n = n;
	lc->sc = n ? cm_calloc(CM_MEM_STORAGE, n, sizeof(*lc->sc)) : NULL;
}

static void
lookup_done(lookup_ctx *lc)
{
	for (size_t i = 0; i < lc->n; i++) {
		for (int k = 0; k < 3; k++)
			st_colblock_free(&lc->sc[i].cb[k]);
		if (lc->sc[i].txn)
			st_seg_txn_end(lc->sc[i].txn);
	}
	cm_free(CM_MEM_STORAGE, lc->sc);
	lc->sc = NULL;
	lc->n = 0;
}

static seg_ctx *
lookup_seg(st_shard *s, lookup_ctx *lc, size_t i)
{
	seg_ctx *c = &lc->sc[i];
	if (!c->opened) {
		c->opened = true;
		const st_segment *seg = s->segs[i].ref->seg;
		if (st_seg_txn_begin(seg, &c->txn) != CM_OK) {
			c->failed = true;
			c->txn = NULL;
			return c;
		}
		c->f[0] = st_segment_field(seg, ST_FIELD_SEQ_NO);
		c->f[1] = st_segment_field(seg, ST_FIELD_VERSION);
		c->f[2] = st_segment_field(seg, ST_FIELD_PRIMARY_TERM);
	}
	return c;
}

static int64_t
col_value(seg_ctx *c, int k, uint32_t doc)
{
	const int64_t *vals;
	if (c->f[k] == NULL || st_col_values(c->txn, c->f[k], &c->cb[k], doc, &vals) < 1)
		return -1;
	return vals[0];
}

/* Current state of id, in the writer's (realtime) view. */
static cm_err
lookup_id(st_shard *s, lookup_ctx *lc, const char *id, size_t len, uint64_t h, id_state *st)
{
	memset(st, 0, sizeof(*st));
	vm_entry *e = vm_find(&s->act.vm, id, len, h);
	int loc = LOC_BUFFER;
	if (e == NULL && s->frz) {
		e = vm_find(&s->frz->set.vm, id, len, h);
		loc = LOC_FROZEN;
	}
	if (e) {
		st->exists = !e->deleted;
		st->tombstone = e->deleted;
		st->seq_no = e->seq_no;
		st->term = e->term;
		st->version = e->version;
		st->loc = e->deleted ? LOC_NONE : loc;
		st->doc = e->buf_doc;
		st->buf = e->buf;
		return CM_OK;
	}
	for (size_t i = s->nsegs; i-- > 0;) {
		seg_ctx *c = lookup_seg(s, lc, i);
		if (c->failed)
			return CM_EIO;
		uint32_t doc;
		cm_err err = st_id_lookup(c->txn, id, len, &doc);
		if (err == CM_ENOTFOUND)
			continue;
		if (err)
			return err;
		if (doc >= s->segs[i].ref->max_doc || !live_get(s->segs[i].live, doc))
			continue;
		int64_t seq = col_value(c, 0, doc), ver = col_value(c, 1, doc),
		        term = col_value(c, 2, doc);
		if (seq < 0 || ver < 0 || term < 0)
			return CM_ECORRUPT;
		st->exists = true;
		st->seq_no = (uint64_t)seq;
		st->version = ver;
		st->term = (uint64_t)term;
		st->loc = LOC_SEGMENT;
		st->seg = i;
		st->doc = doc;
		return CM_OK;
	}
	return CM_OK;
}

/* ---------------------------------------------------------------- */
/* commit point */

static void
encode_commit(st_shard *s, cm_buf *b, const wseg *segs, size_t n)
{
	cm_buf_reset(b);
	cm_buf_put_u32(b, COMMIT_FORMAT);
	cm_buf_put_u64(b, s->cp.next_gen);
	cm_buf_put_u64(b, (uint64_t)s->cp.committed_seq);
	cm_buf_put_u64(b, (uint64_t)s->cp.oplog_trimmed);
	cm_buf_put_u64(b, s->cp.mapping_version);
	cm_buf_put_u64(b, s->cp.primary_term);
	cm_buf_put_varint(b, n);
	for (size_t i = 0; i < n; i++)
		cm_buf_put_varint(b, segs[i].ref->gen);
	cm_buf_put_checksum(b, 0);
}

/* Writes the commit point for `segs` (their `pub` views) and syncs it.
 * Also makes every earlier log transaction durable. */
static cm_err
commit_write(st_shard *s, const wseg *segs, size_t n)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
	if (rc)
		return st_mdb_err(rc);
	cm_buf *b = &s->scratch;
	encode_commit(s, b, segs, n);
	MDB_val k = {6, "commit"}, v = {b->len, b->data};
	if ((rc = mdb_put(txn, s->db_meta, &k, &v, 0)) != 0)
		goto fail;
	if ((rc = mdb_drop(txn, s->db_deletes, 0)) != 0)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		const live_ref *l = segs[i].pub;
		if (l == NULL || l->count == l->nbits)
			continue;
		cm_buf_reset(b);
		cm_buf_put_u32(b, l->nbits);
		size_t w = st_bit_words(l->nbits);
		for (size_t j = 0; j < w; j++) {
			uint64_t del = ~l->bits[j];
			if (j == w - 1 && (l->nbits & 63))
				del &= ((uint64_t)1 << (l->nbits & 63)) - 1;
			cm_buf_put_u64(b, del);
		}
		cm_buf_put_checksum(b, 0);
		uint8_t kb[8];
		for (int x = 0; x < 8; x++)
			kb[x] = (uint8_t)(segs[i].ref->gen >> (56 - 8 * x));
		MDB_val dk = {8, kb}, dv = {b->len, b->data};
		if ((rc = mdb_put(txn, s->db_deletes, &dk, &dv, 0)) != 0)
			goto fail;
	}
	uint64_t ticket = atomic_load(&s->commit_ticket);
	if ((rc = mdb_txn_commit(txn)) != 0)
		return st_mdb_err(rc);
	if ((rc = mdb_env_sync(s->env, 1)) != 0)
		return st_mdb_err(rc);
	pthread_mutex_lock(&s->sync_mu);
	if (s->synced_ticket < ticket)
		s->synced_ticket = ticket;
	pthread_mutex_unlock(&s->sync_mu);
	return CM_OK;
fail:
	mdb_txn_abort(txn);
	return st_mdb_err(rc);
}

/* Waits until log transaction `ticket` is on disk; one caller syncs for
 * everyone waiting (group commit). */
static cm_err
sync_wait(st_shard *s, uint64_t ticket)
{
	cm_err err = CM_OK;
	pthread_mutex_lock(&s->sync_mu);
	while (s->synced_ticket < ticket) {
		if (s->syncing) {
			pthread_cond_wait(&s->sync_cv, &s->sync_mu);
			continue;
		}
		s->syncing = true;
		uint64_t target = atomic_load(&s->commit_ticket);
		pthread_mutex_unlock(&s->sync_mu);
		pthread_rwlock_rdlock(&s->env_lock);
		int rc = mdb_env_sync(s->env, 1);
		pthread_rwlock_unlock(&s->env_lock);
		atomic_fetch_add(&s->n_syncs, 1);
		pthread_mutex_lock(&s->sync_mu);
		s->syncing = false;
		if (rc == 0 && s->synced_ticket < target)
			s->synced_ticket = target;
		pthread_cond_broadcast(&s->sync_cv);
		if (rc) {
			err = st_mdb_err(rc);
			break;
		}
	}
	pthread_mutex_unlock(&s->sync_mu);
	return err;
}

/* ---------------------------------------------------------------- */
/* checkpoint */

static void
ckp_mark(st_shard *s, int64_t seq)
{
	if (seq > s->max_seq)
		s->max_seq = seq;
	if (seq <= s->ckp)
		return;
	if (seq == s->ckp + 1) {
		s->ckp = seq;
		size_t k = 0;
		while (k < s->npending && s->pending[k] <= s->ckp + 1) {
			if (s->pending[k] == s->ckp + 1)
				s->ckp++;
			k++;
		}
		if (k) {
			memmove(s->pending, s->pending + k, (s->npending - k) * sizeof(int64_t));
			s->npending -= k;
		}
		return;
	}
	if (s->npending == s->pending_cap) {
		s->pending_cap = s->pending_cap ? s->pending_cap * 2 : 64;
		s->pending =
		    cm_realloc(CM_MEM_STORAGE, s->pending, s->pending_cap * sizeof(int64_t));
	}
	size_t lo = 0, hi = s->npending;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->pending[mid] < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->npending && s->pending[lo] == seq)
		return;
	memmove(s->pending + lo + 1, s->pending + lo, (s->npending - lo) * sizeof(int64_t));
	s->pending[lo] = seq;
	s->npending++;
}

/* ---------------------------------------------------------------- */
/* mapping */

static st_mapping *
mapping_get(st_shard *s)
{
	pthread_mutex_lock(&s->map_mu);
	st_mapping *m = st_mapping_ref(s->mapping);
	pthread_mutex_unlock(&s->map_mu);
	return m;
}

static void
mapping_put(st_shard *s, st_mapping *m)
{
	pthread_mutex_lock(&s->map_mu);
	st_mapping_unref(m);
	pthread_mutex_unlock(&s->map_mu);
}

void
st_shard_set_nested_objects_limit(st_shard *s, uint32_t limit)
{
	atomic_store(&s->nested_limit, limit ? limit : ST_NESTED_OBJECTS_LIMIT);
}

void
st_shard_set_mapping(st_shard *s, const st_mapping *m)
{
	pthread_mutex_lock(&s->map_mu);
	st_mapping *old = s->mapping;
	s->mapping = st_mapping_ref((st_mapping *)m);
	st_mapping_unref(old);
	pthread_mutex_unlock(&s->map_mu);
	republish_mapping(s);
}

st_mapping *
st_shard_mapping(st_shard *s)
{
	return mapping_get(s);
}

/* Adds dynamically found fields to the shard's mapping (unless someone
 * already did) and returns the merged mapping, referenced. */
static cm_err
mapping_extend(st_shard *s, st_mapping *used, st_mapping *add, st_mapping **out, cm_error *err)
{
	pthread_mutex_lock(&s->map_mu);
	st_mapping *merged = NULL;
	cm_err e = st_mapping_merge(s->mapping, add, &merged, err);
	if (e == CM_OK) {
		(void)used;
		st_mapping_unref(s->mapping);
		s->mapping = merged;
		*out = st_mapping_ref(merged);
	}
	pthread_mutex_unlock(&s->map_mu);
	return e;
}

/* ---------------------------------------------------------------- */
/* apply */

typedef struct op_plan {
	st_doc doc;
	bool parsed, accept, skip, stale;
	uint64_t hash, seq, term;
	int64_t version;
	int prev_batch; /* earlier accepted op on the same id in this batch, or -1 */
	id_state prev;  /* state before the batch, when prev_batch < 0 */
	uint32_t docno; /* its root doc in buffer `buf`, NO_DOC when none */
	uint32_t buf;
	bool add_failed;
} op_plan;

#define MAX_BATCH_MAPPINGS 8
/* A batch spreads over the index pool in parts of at least this many ops. */
#define PART_MIN_OPS 64
#define MAX_PARTS 64

/* A contiguous run of a batch's ops: parsed by one task (with the
 * mappings its docs point into), then added by one task into one
 * buffer of its own. */
typedef struct part {
	st_shard *s;
	const st_op *ops;
	op_plan *plan;
	st_op_result *res;
	size_t lo, hi;
	st_mapping *maps[MAX_BATCH_MAPPINGS];
	int nmaps;
	membuf *m;
	uint32_t buf;
	uint64_t need; /* doc numbers its accepted ops take */
} part;

typedef struct batch {
	op_plan *plan;
	int32_t *slots; /* id → last op index in this batch */
	size_t nslots;
	part parts[MAX_PARTS];
	size_t nparts;
} batch;

static void
part_keep_mapping(part *c, st_mapping *m)
{
	c->maps[c->nmaps++] = m;
}

/* Parses one INDEX op under the shard mapping, extending the mapping for
 * dynamic fields. Runs without the write lock. */
static void
parse_op(st_shard *s, part *c, const st_op *op, op_plan *p, st_op_result *r)
{
	cm_error err;
	cm_error_clear(&err);
	st_mapping *m = c->nmaps ? c->maps[c->nmaps - 1] : NULL;
	if (m == NULL) {
		m = mapping_get(s);
		part_keep_mapping(c, m);
	}
	for (int attempt = 0; attempt < 3; attempt++) {
		st_mapping *add = NULL;
		cm_err e = st_doc_parse_limit(m, op->id, op->id_len, op->source, op->source_len,
		                              atomic_load(&s->nested_limit), &p->doc, &add, &err);
		if (e) {
			r->err = e;
			snprintf(r->reason, sizeof(r->reason), "%.250s",
			         err.reason[0] ? err.reason : cm_err_msg(e));
			if (add)
				st_mapping_unref(add);
			return;
		}
		if (add == NULL) {
			p->parsed = true;
			return;
		}
		st_doc_free(&p->doc);
		memset(&p->doc, 0, sizeof(p->doc));
		st_mapping *merged = NULL;
		e = mapping_extend(s, m, add, &merged, &err);
		st_mapping_unref(add);
		if (e) {
			r->err = CM_EMAPPING;
			snprintf(r->reason, sizeof(r->reason), "%.250s",
			         err.reason[0] ? err.reason : cm_err_msg(e));
			return;
		}
		if (c->nmaps == MAX_BATCH_MAPPINGS) {
			/* Older mappings may still be pointed to by parsed docs;
			 * refuse rather than drop them. Rare: 8 mapping changes
			 * within one part of a batch. */
			st_mapping_unref(merged);
			r->err = CM_EMAPPING;
			snprintf(r->reason, sizeof(r->reason),
			         "too many mapping updates in one batch");
			return;
		}
		part_keep_mapping(c, merged);
		m = merged;
	}
	r->err = CM_EMAPPING;
	snprintf(r->reason, sizeof(r->reason), "mapping did not settle for [%.*s]",
	         (int)(op->id_len > 64 ? 64 : op->id_len), op->id);
}

/* Phase 0 of a part, no lock: validate and parse. */
static void
part_parse(void *arg)
{
	part *c = arg;
	for (size_t i = c->lo; i < c->hi; i++) {
		const st_op *op = &c->ops[i];
		st_op_result *r = &c->res[i];
		op_plan *p = &c->plan[i];
		memset(r, 0, sizeof(*r));
		r->seq_no = ST_NO_SEQ;
		p->prev_batch = -1;
		p->docno = NO_DOC;
		if (op->id == NULL || op->id_len == 0 || op->id_len > MAX_ID_LEN) {
			r->err = CM_EVALIDATE;
			if (op->id_len == 0)
				snprintf(r->reason, sizeof(r->reason),
				         "if _id is specified it must not be empty");
			else
				snprintf(r->reason, sizeof(r->reason),
				         "id [%.32s...] is too long, must be no longer than 512 "
				         "bytes but was: %zu",
				         op->id, op->id_len);
			continue;
		}
		p->hash = id_hash(op->id, op->id_len);
		if (op->type == ST_OP_INDEX)
			parse_op(c->s, c, op, p, r);
	}
}

/* Phase 2 of a part, no lock: analyzes its accepted docs into the buffer
 * it holds, at the doc numbers handed out under the lock. */
static void
part_add(void *arg)
{
	part *c = arg;
	membuf *m = c->m;
	for (size_t i = c->lo; i < c->hi; i++) {
		op_plan *p = &c->plan[i];
		if (p->docno == NO_DOC)
			continue;
		const st_op *op = &c->ops[i];
		st_op_result *r = &c->res[i];
		cm_error err;
		cm_error_clear(&err);
		uint32_t docno = NO_DOC;
		cm_err e = st_segbuild_add(m->b, &p->doc, p->seq, p->term, p->version, &docno, &err);
		if (e == CM_OK && docno != p->docno)
			e = cm_error_set(&err, CM_EINTERNAL, "doc number %u, %u handed out", docno,
			                 p->docno);
		if (e) {
			/* Logged but not indexable: surface it; the id reads as
			 * deleted until the op is replayed successfully. */
			r->err = e;
			snprintf(r->reason, sizeof(r->reason), "%.250s",
			         err.reason[0] ? err.reason : cm_err_msg(e));
			p->add_failed = true;
			continue;
		}
		/* what the segment will hold: the mapping may filter _source */
		if (p->doc.stored)
			buffer_note_doc(m, docno, p->doc.stored, p->doc.stored_len);
		else
			buffer_note_doc(m, docno, op->source, op->source_len);
	}
}

static int32_t *
batch_slot(batch *b, const st_op *ops, uint64_t h, const st_op *op)
{
	size_t mask = b->nslots - 1;
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		int32_t j = b->slots[i];
		if (j < 0)
			return &b->slots[i];
		if (b->plan[j].hash == h && ops[j].id_len == op->id_len &&
		    memcmp(ops[j].id, op->id, op->id_len) == 0)
			return &b->slots[i];
	}
}

static void conflict(st_op_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void
conflict(st_op_result *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
	va_end(ap);
	r->err = CM_ECONFLICT;
}

/* Decides one op against the current state: conditions, seq_no,
 * version, result. Write lock held. */
static void
plan_op(st_shard *s, const st_op *op, op_plan *p, const id_state *cur, int64_t *next_seq,
        st_op_result *r)
{
	int idl = (int)(op->id_len > 200 ? 200 : op->id_len);
	bool replica = op->seq_no != ST_NO_SEQ;
	bool known = cur->exists || cur->tombstone;
	/* Sequence numbers and versions are int64 on disk and on the wire;
	 * refuse what could not be numbered after (found by handler_fuzz). */
	if ((replica && op->seq_no >= (uint64_t)INT64_MAX) ||
	    (!replica && *next_seq >= INT64_MAX - 1)) {
		r->err = CM_EINVAL;
		snprintf(r->reason, sizeof(r->reason), "[%.*s]: sequence number out of range", idl,
		         op->id);
		return;
	}
	if (known && cur->version == INT64_MAX && !op->has_version && op->version <= 0) {
		conflict(r,
		         "[%.*s]: version conflict, current version [%" PRId64
		         "] cannot be incremented",
		         idl, op->id, cur->version);
		return;
	}
	if (replica) {
		/* Idempotence: anything at or below the checkpoint, or not
		 * newer than what this id already has, was applied before. */
		if ((int64_t)op->seq_no <= s->ckp || (known && cur->seq_no >= op->seq_no)) {
			/* A stale op above the checkpoint is still logged and counted
			 * as processed (like Elasticsearch's no-ops), so the
			 * checkpoint advances and this copy's log has no gap if it
			 * ever serves a recovery. Re-logging a resend is harmless:
			 * same key, same record. */
			p->skip = (int64_t)op->seq_no <= s->ckp;
			p->stale = !p->skip;
			p->accept = p->stale;
			p->seq = op->seq_no;
			p->term = op->primary_term;
			p->version = op->version;
			r->result = ST_RESULT_NOOP;
			r->seq_no = op->seq_no;
			r->primary_term = op->primary_term;
			r->version = op->version;
			return;
		}
		p->seq = op->seq_no;
		p->term = op->primary_term;
		p->version = op->has_version || op->version > 0 ? op->version
		                                                : (known ? cur->version + 1 : 1);
	} else {
		if (op->if_seq_no != ST_NO_SEQ) {
			if (!cur->exists) {
				conflict(r,
				         "[%.*s]: version conflict, required seqNo [%" PRIu64
				         "], primary term [%" PRIu64 "]. but no document was found",
				         idl, op->id, op->if_seq_no, op->if_primary_term);
				return;
			}
			if (cur->seq_no != op->if_seq_no || cur->term != op->if_primary_term) {
				conflict(r,
				         "[%.*s]: version conflict, required seqNo [%" PRIu64
				         "], primary term [%" PRIu64
				         "]. current document has seqNo [%" PRIu64
				         "] and primary term [%" PRIu64 "]",
				         idl, op->id, op->if_seq_no, op->if_primary_term,
				         cur->seq_no, cur->term);
				return;
			}
		}
		if (op->has_version && known &&
		    (op->version_gte ? op->version < cur->version : op->version <= cur->version)) {
			conflict(r,
			         "[%.*s]: version conflict, current version [%" PRId64
			         "] is higher%s "
			         "the one provided [%" PRId64 "]",
			         idl, op->id, cur->version,
			         op->version_gte ? " than" : " or equal to", op->version);
			return;
		}
		if (op->create_only && op->type == ST_OP_INDEX && cur->exists) {
			conflict(
			    r,
			    "[%.*s]: version conflict, document already exists (current version "
			    "[%" PRId64 "])",
			    idl, op->id, cur->version);
			return;
		}
		p->seq = (uint64_t)++ * next_seq;
		p->term = s->cp.primary_term;
		p->version = op->has_version ? op->version : (known ? cur->version + 1 : 1);
	}
	p->accept = true;
	if (op->type == ST_OP_INDEX)
		r->result = cur->exists ? ST_RESULT_UPDATED : ST_RESULT_CREATED;
	else
		r->result = cur->exists ? ST_RESULT_DELETED : ST_RESULT_NOT_FOUND;
	r->seq_no = p->seq;
	r->primary_term = p->term;
	r->version = p->version;
}

/* Appends accepted ops to the log in one transaction (not yet synced). */
static cm_err
log_batch(st_shard *s, const st_op *ops, batch *b, size_t n, uint64_t *ticket)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
	if (rc)
		return st_mdb_err(rc);
	int64_t last = s->log_last;
	cm_buf *buf = &s->scratch;
	for (size_t i = 0; i < n; i++) {
		op_plan *p = &b->plan[i];
		if (!p->accept || p->skip)
			continue;
		st_oplog_encode(buf, ops[i].type, ops[i].id, ops[i].id_len, ops[i].source,
		                ops[i].source_len, p->term, p->version);
		uint8_t kb[8];
		for (int x = 0; x < 8; x++)
			kb[x] = (uint8_t)(p->seq >> (56 - 8 * x));
		MDB_val k = {8, kb}, v = {buf->len, buf->data};
		unsigned flags = (int64_t)p->seq > last ? MDB_APPEND : 0;
		if ((rc = mdb_put(txn, s->db_oplog, &k, &v, flags)) != 0) {
			mdb_txn_abort(txn);
			return st_mdb_err(rc);
		}
		if ((int64_t)p->seq > last)
			last = (int64_t)p->seq;
	}
	if ((rc = mdb_txn_commit(txn)) != 0)
		return st_mdb_err(rc);
	s->log_last = last;
	*ticket = atomic_fetch_add(&s->commit_ticket, 1) + 1;
	return CM_OK;
}

/* Applies accepted ops to the version map and the deletes, and hands
 * out the doc numbers each part's buffer will give its docs (wmu). */
static void
apply_plan(st_shard *s, const st_op *ops, batch *b)
{
	for (size_t c = 0; c < b->nparts; c++) {
		part *pt = &b->parts[c];
		for (size_t i = pt->lo; i < pt->hi; i++) {
			op_plan *p = &b->plan[i];
			if (!p->accept || p->skip)
				continue;
			if (p->stale) {
				ckp_mark(s, (int64_t)p->seq);
				s->ops_since_commit++;
				continue;
			}
			const st_op *op = &ops[i];
			/* Remove the id's previous live copy. */
			if (p->prev_batch >= 0) {
				const op_plan *q = &b->plan[p->prev_batch];
				if (ops[p->prev_batch].type == ST_OP_INDEX && q->docno != NO_DOC)
					buffer_delete(s->act.b[q->buf], q->docno);
			} else if (p->prev.exists && p->prev.loc == LOC_BUFFER) {
				buffer_delete(s->act.b[p->prev.buf], p->prev.doc);
			} else if (p->prev.exists && p->prev.loc == LOC_FROZEN) {
				st_bit_set(s->frz->late[p->prev.buf], p->prev.doc);
			} else if (p->prev.exists && p->prev.loc == LOC_SEGMENT) {
				segment_delete(s, p->prev.seg, p->prev.doc);
			}
			vm_entry v = {.seq_no = p->seq,
			              .term = p->term,
			              .version = p->version,
			              .buf_doc = NO_DOC,
			              .deleted = op->type == ST_OP_DELETE};
			p->docno = NO_DOC;
			if (op->type == ST_OP_INDEX) {
				uint32_t first = buffer_reserve(pt->m, (uint32_t)p->doc.nnested + 1);
				p->docno = first + (uint32_t)p->doc.nnested;
				p->buf = pt->buf;
				v.buf_doc = p->docno;
				v.buf = pt->buf;
			}
			vm_put(&s->act.vm, op->id, op->id_len, p->hash, &v);
			ckp_mark(s, (int64_t)p->seq);
			s->ops_since_commit++;
		}
	}
}

/* After the parts were added (wmu): a doc its buffer refused is deleted
 * there, and its id reads as deleted unless a later op moved on. */
static void
apply_failed(st_shard *s, const st_op *ops, batch *b)
{
	for (size_t i = 0; i < b->parts[b->nparts - 1].hi; i++) {
		op_plan *p = &b->plan[i];
		if (!p->add_failed)
			continue;
		buffer_delete(s->act.b[p->buf], p->docno);
		vm_entry *e = vm_find(&s->act.vm, ops[i].id, ops[i].id_len, p->hash);
		if (e && !e->deleted && e->buf == p->buf && e->buf_doc == p->docno) {
			e->deleted = true;
			e->buf_doc = NO_DOC;
		}
	}
}

static size_t
budget_bytes(const st_shard *s)
{
	return (s->opts.indexing_max_ram_mb ? s->opts.indexing_max_ram_mb : 64) * MB;
}

void
st__bufs_hold(st_shard *s)
{
	s->holds++;
	while (s->busy_bufs > 0)
		pthread_cond_wait(&s->buf_cv, &s->wmu);
}

void
st__bufs_release(st_shard *s)
{
	s->holds--;
	pthread_cond_broadcast(&s->buf_cv);
}

/* Takes up to `want` buffers for a batch's parts, the fullest idle ones
 * first, then new ones while the shard has fewer than max_bufs; waits
 * while a freeze or reset holds the buffers or none can be had. Returns
 * how many were taken (at least one). wmu held. */
static size_t
bufs_take(st_shard *s, membuf **m, uint32_t *idx, size_t want)
{
	for (;;) {
		while (s->holds > 0)
			pthread_cond_wait(&s->buf_cv, &s->wmu);
		size_t got = 0;
		while (got < want) {
			size_t best = SIZE_MAX;
			for (size_t i = 0; i < s->act.n; i++) {
				const membuf *m = s->act.b[i];
				if (!m->busy && (best == SIZE_MAX || m->reserved > s->act.b[best]->reserved))
					best = i;
			}
			if (best == SIZE_MAX) {
				if (s->act.n >= s->max_bufs)
					break;
				if (s->act.n == s->act.cap) {
					s->act.cap = s->act.cap ? s->act.cap * 2 : 4;
					s->act.b = cm_realloc(CM_MEM_STORAGE, s->act.b,
					                      s->act.cap * sizeof(*s->act.b));
				}
				best = s->act.n;
				s->act.b[s->act.n++] = membuf_new();
			}
			s->act.b[best]->busy = true;
			m[got] = s->act.b[best];
			idx[got] = (uint32_t)best;
			got++;
		}
		if (got > 0) {
			s->busy_bufs += (int)got;
			return got;
		}
		pthread_cond_wait(&s->buf_cv, &s->wmu);
	}
}

static void
bufs_return(st_shard *s, part *parts, size_t n)
{
	for (size_t c = 0; c < n; c++) {
		membuf *m = parts[c].m;
		m->ram = st_segbuild_ram(m->b) + m->src_bytes + m->src_cap * 12 + m->del_words * 8;
		m->busy = false;
	}
	s->busy_bufs -= (int)n;
	pthread_cond_broadcast(&s->buf_cv);
}

/* Splits ops [0,n) into k contiguous parts. */
static void
parts_split(batch *b, st_shard *s, const st_op *ops, st_op_result *res, size_t n, size_t k)
{
	b->nparts = k;
	for (size_t c = 0; c < k; c++) {
		part *pt = &b->parts[c];
		memset(pt, 0, sizeof(*pt));
		pt->s = s;
		pt->ops = ops;
		pt->plan = b->plan;
		pt->res = res;
		pt->lo = n * c / k;
		pt->hi = n * (c + 1) / k;
	}
}

/* How many parts a batch of n ops is parsed in: one per index_part_ops,
 * at most the index pool's threads + 1. */
static size_t
parse_parts(const st_shard *s, size_t n)
{
	if (s->opts.index_pool == NULL)
		return 1;
	size_t per = s->opts.index_part_ops ? s->opts.index_part_ops : PART_MIN_OPS;
	size_t k = n / per, most = (size_t)cm_pool_threads(s->opts.index_pool) + 1;
	if (k > most)
		k = most;
	if (k > MAX_PARTS)
		k = MAX_PARTS;
	return k ? k : 1;
}

/* The body of st_shard_apply; `replay` applies log records on open (no
 * logging, no sync). Phases: parse (no lock, spread over the index
 * pool), decide and log (wmu), analyze into buffers the batch holds (no
 * lock, spread over the pool, one buffer per part), return the buffers
 * (wmu), wait for the log sync. */
static cm_err
apply_ops(st_shard *s, const st_op *ops, size_t n, st_op_result *res, bool replay)
{
	if (n == 0)
		return CM_OK;
	batch b = {0};
	b.plan = cm_calloc(CM_MEM_STORAGE, n, sizeof(*b.plan));
	b.nslots = 16;
	while (b.nslots < 2 * n)
		b.nslots *= 2;
	b.slots = cm_malloc(CM_MEM_STORAGE, b.nslots * sizeof(*b.slots));
	memset(b.slots, 0xff, b.nslots * sizeof(*b.slots));

	/* Phase 0, no lock: validate and parse. The mappings the parsed docs
	 * point into are kept aside until the end. */
	size_t np = parse_parts(s, n);
	parts_split(&b, s, ops, res, n, np);
	cm_pool_run_all(np > 1 ? s->opts.index_pool : NULL, part_parse, b.parts, sizeof(part), np);
	st_mapping *maps[MAX_PARTS * MAX_BATCH_MAPPINGS];
	int nmaps = 0;
	for (size_t c = 0; c < np; c++)
		for (int i = 0; i < b.parts[c].nmaps; i++)
			maps[nmaps++] = b.parts[c].maps[i];

	/* Phase 1, write lock: take buffers, then decide every op against the
	 * current state, log, and hand out doc numbers. */
	pthread_mutex_lock(&s->wmu);
	membuf *taken[MAX_PARTS];
	uint32_t idx[MAX_PARTS];
	size_t nb = bufs_take(s, taken, idx, np);
	if (nb != np) /* fewer buffers to be had: as many parts */
		parts_split(&b, s, ops, res, n, nb);
	for (size_t c = 0; c < nb; c++) {
		b.parts[c].m = taken[c];
		b.parts[c].buf = idx[c];
	}
	cm_err err = CM_OK;
	lookup_ctx lc;
	lookup_init(&lc, s->nsegs);
	int64_t next_seq = s->max_seq;
	for (size_t c = 0; c < nb; c++) {
		part *pt = &b.parts[c];
		for (size_t i = pt->lo; i < pt->hi; i++) {
			op_plan *p = &b.plan[i];
			if (res[i].err)
				continue;
			if (ops[i].type == ST_OP_INDEX && !p->parsed)
				continue;
			if (ops[i].type == ST_OP_INDEX &&
			    pt->m->reserved + pt->need + p->doc.nnested + 1 > ST_SEGBUILD_MAX_DOCS) {
				/* Never in practice: the memory budget refreshes first. */
				res[i].err = CM_ELIMIT;
				snprintf(res[i].reason, sizeof(res[i].reason),
				         "the indexing buffer is full");
				continue;
			}
			int32_t *slot = batch_slot(&b, ops, p->hash, &ops[i]);
			id_state cur;
			if (*slot >= 0) {
				const op_plan *q = &b.plan[*slot];
				memset(&cur, 0, sizeof(cur));
				cur.exists = ops[*slot].type == ST_OP_INDEX;
				cur.tombstone = !cur.exists;
				cur.seq_no = q->seq;
				cur.term = q->term;
				cur.version = q->version;
			} else {
				cm_err e = lookup_id(s, &lc, ops[i].id, ops[i].id_len, p->hash, &cur);
				if (e) {
					res[i].err = e;
					snprintf(res[i].reason, sizeof(res[i].reason),
					         "id lookup failed: %s", cm_err_msg(e));
					continue;
				}
				p->prev = cur;
			}
			plan_op(s, &ops[i], p, &cur, &next_seq, &res[i]);
			if (p->accept && !p->skip && !p->stale) {
				p->prev_batch = *slot;
				*slot = (int32_t)i;
				if (ops[i].type == ST_OP_INDEX)
					pt->need += p->doc.nnested + 1;
			}
		}
	}
	lookup_done(&lc);

	uint64_t ticket = 0;
	bool any = false;
	for (size_t i = 0; i < n && !any; i++)
		any = b.plan[i].accept && !b.plan[i].skip;
	if (any && !replay) {
		err = log_batch(s, ops, &b, n, &ticket);
		if (err) {
			for (size_t i = 0; i < n; i++) {
				if (b.plan[i].accept && !b.plan[i].skip) {
					res[i].err = err;
					snprintf(res[i].reason, sizeof(res[i].reason),
					         "operation log write failed: %s", cm_err_msg(err));
					res[i].seq_no = ST_NO_SEQ;
				}
			}
		}
	}
	bool adds = false;
	if (err == CM_OK && any) {
		apply_plan(s, ops, &b);
		if (next_seq > s->max_seq)
			s->max_seq = next_seq;
		for (size_t c = 0; c < nb; c++)
			adds = adds || b.parts[c].need > 0;
	}
	pthread_mutex_unlock(&s->wmu);

	/* Phase 2, no lock: the docs into the buffers this batch holds. */
	if (adds)
		cm_pool_run_all(nb > 1 ? s->opts.index_pool : NULL, part_add, b.parts, sizeof(part),
		                nb);

	/* Phase 3, write lock: give the buffers back. */
	pthread_mutex_lock(&s->wmu);
	if (adds)
		apply_failed(s, ops, &b);
	bufs_return(s, b.parts, nb);
	size_t ram = bufset_ram(&s->act);
	bool over = err == CM_OK && !replay && ram > budget_bytes(s);
	pthread_mutex_unlock(&s->wmu);

	for (size_t i = 0; i < n; i++)
		if (b.plan[i].parsed)
			st_doc_free(&b.plan[i].doc);
	for (int i = 0; i < nmaps; i++)
		mapping_put(s, maps[i]);
	cm_free(CM_MEM_STORAGE, b.plan);
	cm_free(CM_MEM_STORAGE, b.slots);
	if (err)
		return err;

	if (any && !replay) {
		err = sync_wait(s, ticket);
		if (err) {
			for (size_t i = 0; i < n; i++)
				if (res[i].err == CM_OK && res[i].seq_no != ST_NO_SEQ) {
					res[i].err = err;
					snprintf(res[i].reason, sizeof(res[i].reason),
					         "operation log sync failed");
				}
			return err;
		}
	}
	if (over) {
		/* While another refresh writes, indexing goes on into fresh
		 * buffers up to twice the budget before it waits for that one.
		 * Re-check under the lock: concurrent callers over the budget at
		 * once make one refresh, not several tiny ones. */
		if (pthread_mutex_trylock(&s->refresh_mu) != 0) {
			if (ram <= 2 * budget_bytes(s))
				return CM_OK;
			pthread_mutex_lock(&s->refresh_mu);
		}
		pthread_mutex_lock(&s->wmu);
		cm_err e = bufset_ram(&s->act) > budget_bytes(s) ? refresh_run(s) : CM_OK;
		unlock_both(s);
		if (e)
			cm_warn("storage", "shard %s: refresh over the memory budget failed: %s",
			        s->dir, cm_err_msg(e));
	}
	return CM_OK;
}

cm_err
st_shard_apply(st_shard *s, const st_op *ops, size_t n, st_op_result *res)
{
	return apply_ops(s, ops, n, res, false);
}

/* ---------------------------------------------------------------- */
/* get */

cm_err
st_shard_get(st_shard *s, const char *id, size_t len, st_doc_meta *meta, cm_buf *source)
{
	if (len == 0 || len > MAX_ID_LEN)
		return CM_ENOTFOUND;
	uint64_t h = id_hash(id, len);
	pthread_mutex_lock(&s->wmu);
	lookup_ctx lc;
	id_state st;
	cm_err err;
	for (;;) {
		lookup_init(&lc, s->nsegs);
		err = lookup_id(s, &lc, id, len, h, &st);
		/* A doc whose batch is still adding it to its buffer: wait for
		 * the buffer to come back (a batch, not a refresh). */
		if (err || !st.exists || st.loc != LOC_BUFFER || !s->act.b[st.buf]->busy)
			break;
		lookup_done(&lc);
		pthread_cond_wait(&s->buf_cv, &s->wmu);
	}
	if (err == CM_OK && !st.exists)
		err = CM_ENOTFOUND;
	if (err == CM_OK) {
		if (meta) {
			meta->seq_no = st.seq_no;
			meta->primary_term = st.term;
			meta->version = st.version;
		}
		if (source && st.loc == LOC_BUFFER) {
			const membuf *m = s->act.b[st.buf];
			cm_buf_put(source, m->src_ptr[st.doc], m->src_len[st.doc]);
		} else if (source && st.loc == LOC_FROZEN) {
			const membuf *m = s->frz->set.b[st.buf];
			cm_buf_put(source, m->src_ptr[st.doc], m->src_len[st.doc]);
		} else if (source && st.loc == LOC_SEGMENT) {
			cm_buf idb;
			cm_buf_init(&idb, CM_MEM_STORAGE);
			err = st_stored_get(lc.sc[st.seg].txn, st.doc, &idb, source);
			cm_buf_free(&idb);
		}
	}
	lookup_done(&lc);
	pthread_mutex_unlock(&s->wmu);
	return err;
}

cm_err
st_shard_get_refreshed(st_shard *s, const char *id, size_t len, st_doc_meta *meta, cm_buf *source)
{
	if (len == 0 || len > MAX_ID_LEN)
		return CM_ENOTFOUND;
	st_reader *r = st_shard_reader(s);
	cm_err err = CM_ENOTFOUND;
	/* newest segment first: an id has at most one live doc in a view */
	for (size_t i = st_reader_nsegments(r); err == CM_ENOTFOUND && i-- > 0;) {
		const st_segment *seg = st_reader_segment(r, i);
		const uint64_t *live = st_reader_live(r, i);
		st_seg_txn *t;
		if (st_seg_txn_begin(seg, &t) != CM_OK) {
			err = CM_EIO;
			break;
		}
		uint32_t doc;
		cm_err e = st_id_lookup(t, id, len, &doc);
		if (e == CM_OK && doc < st_segment_max_doc(seg) &&
		    (!live || st_bit_get(live, doc))) {
			static const char *const names[3] = {ST_FIELD_SEQ_NO, ST_FIELD_VERSION,
			                                     ST_FIELD_PRIMARY_TERM};
			int64_t v[3] = {-1, -1, -1};
			for (int k = 0; k < 3; k++) {
				const st_field_info *f = st_segment_field(seg, names[k]);
				st_colblock cb;
				const int64_t *vals;
				memset(&cb, 0, sizeof cb);
				if (f && st_col_values(t, f, &cb, doc, &vals) > 0)
					v[k] = vals[0];
				st_colblock_free(&cb);
			}
			if (v[0] < 0 || v[1] < 0 || v[2] < 0) {
				e = CM_ECORRUPT;
			} else {
				if (meta) {
					meta->seq_no = (uint64_t)v[0];
					meta->version = v[1];
					meta->primary_term = (uint64_t)v[2];
				}
				e = CM_OK;
				if (source) {
					cm_buf idb;
					cm_buf_init(&idb, CM_MEM_STORAGE);
					e = st_stored_get(t, doc, &idb, source);
					cm_buf_free(&idb);
				}
			}
			err = e;
		} else if (e != CM_OK && e != CM_ENOTFOUND) {
			err = e;
		}
		st_seg_txn_end(t);
	}
	st_reader_release(r);
	return err;
}

/* ---------------------------------------------------------------- */
/* refresh */

static void
seg_path(const st_shard *s, uint64_t gen, char *out, size_t cap)
{
	snprintf(out, cap, "%s/seg-%" PRIu64 ".mdb", s->dir, gen);
}

static cm_err
open_seg_ref(st_shard *s, uint64_t gen, seg_ref **out, cm_error *err)
{
	char path[4096];
	seg_path(s, gen, path, sizeof(path));
	st_segment *seg;
	cm_err e = st_segment_open(path, &seg, err);
	if (e)
		return e;
	seg_ref *r = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*r));
	r->seg = seg;
	r->gen = gen;
	r->bytes = st_segment_bytes(seg);
	r->max_doc = st_segment_max_doc(seg);
	atomic_init(&r->refs, 1);
	atomic_init(&r->drop, false);
	r->path = cm_strdup(CM_MEM_STORAGE, path);
	r->sdir = st__seg_dir_ref(s->sdir);
	*out = r;
	return CM_OK;
}

static void
segs_reserve(st_shard *s, size_t n)
{
	if (n <= s->segs_cap)
		return;
	size_t cap = s->segs_cap ? s->segs_cap * 2 : 16;
	while (cap < n)
		cap *= 2;
	s->segs = cm_realloc(CM_MEM_STORAGE, s->segs, cap * sizeof(*s->segs));
	s->segs_cap = cap;
}

/* Drops a writer segment whose replacement commit is durable. */
static void
wseg_drop(wseg *w)
{
	atomic_store(&w->ref->drop, true);
	live_release(w->live);
	live_release(w->pub);
	seg_ref_release(w->ref);
}

/* Moves the active buffers aside for a refresh, once every batch gave
 * its buffer back (wmu held; released while it waits). */
static void
freeze(st_shard *s)
{
	st__bufs_hold(s);
	frozen_buf *f = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*f));
	f->set = s->act;
	bufset_init(&s->act);
	size_t nb = f->set.n;
	f->late = cm_calloc(CM_MEM_STORAGE, nb + 1, sizeof(*f->late));
	f->gen = cm_calloc(CM_MEM_STORAGE, nb + 1, sizeof(*f->gen));
	for (size_t i = 0; i < nb; i++) {
		f->late[i] = cm_calloc(CM_MEM_STORAGE, st_bit_words(f->set.b[i]->reserved) + 1,
		                       sizeof(uint64_t));
		f->gen[i] = s->cp.next_gen++;
	}
	f->ckp = s->ckp;
	f->ops = s->ops_since_commit;
	f->npend = s->nsegs;
	f->pend_ref = cm_calloc(CM_MEM_STORAGE, s->nsegs + 1, sizeof(*f->pend_ref));
	f->pend_live = cm_calloc(CM_MEM_STORAGE, s->nsegs + 1, sizeof(*f->pend_live));
	for (size_t i = 0; i < s->nsegs; i++) {
		f->pend_ref[i] = s->segs[i].ref;
		atomic_fetch_add(&f->pend_ref[i]->refs, 1);
		/* Shared from now on, so later deletes copy the bits first. */
		f->pend_live[i] = live_ref_get(s->segs[i].live);
	}
	s->frz = f;
	st__bufs_release(s);
}

/* The writer bits of buffer k's new segment: deletes that reached its
 * frozen docs while the segment was written, mapped past the docs the
 * write left out. */
static cm_err
late_deletes(const frozen_buf *f, size_t k, const seg_ref *nref, live_ref **out)
{
	const membuf *m = f->set.b[k];
	uint32_t ndocs = st_segbuild_docs(m->b), nd = 0;
	live_ref *l = NULL;
	/* the docs the segment kept, in order (as st_segbuild_write chose them) */
	uint64_t *kept = cm_malloc(CM_MEM_STORAGE, (st_bit_words(ndocs) + 1) * 8);
	st_segbuild_kept(m->b, m->del, kept);
	for (uint32_t d = 0; d < ndocs; d++) {
		if (!st_bit_get(kept, d))
			continue;
		if (st_bit_get(f->late[k], d) && nd < nref->max_doc) {
			if (l == NULL)
				l = live_new(nref->max_doc, true);
			l->bits[nd >> 6] &= ~((uint64_t)1 << (nd & 63));
			l->count--;
		}
		nd++;
	}
	cm_free(CM_MEM_STORAGE, kept);
	*out = l;
	if (nd != nref->max_doc) {
		live_release(l);
		*out = NULL;
		return CM_EINTERNAL;
	}
	return CM_OK;
}

/* Highest seq_no a log trim may remove (-1: none) when the commit covers
 * ops <= committed: the log keeps every op above min(committed, global
 * checkpoint, retention marker), so a copy can always serve, and read back
 * after a restart, what lies above its global checkpoint. A replicated copy
 * that has no global checkpoint yet keeps its whole log. wmu held. */
static int64_t
trim_bound(const st_shard *s, int64_t committed)
{
	int64_t upto = committed < s->retain_above ? committed : s->retain_above;
	if (s->gcp >= 0)
		upto = s->gcp < upto ? s->gcp : upto;
	else if (s->opts.replicated)
		upto = -1;
	return upto;
}

/* Deletes log records <= upto in small transactions without the write
 * lock, so indexing is not stalled behind a large trim. Called with wmu
 * held; returns with it held. */
static void
trim_log(st_shard *s, int64_t upto)
{
	pthread_mutex_unlock(&s->wmu);
	size_t deleted = 0;
	cm_err e = CM_OK;
	do {
		MDB_txn *txn;
		int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
		if (rc) {
			e = st_mdb_err(rc);
			break;
		}
		e = st_oplog_trim(txn, s->db_oplog, (uint64_t)upto, 8192, &deleted);
		if (e) {
			mdb_txn_abort(txn);
			break;
		}
		if ((rc = mdb_txn_commit(txn)) != 0)
			e = st_mdb_err(rc);
	} while (e == CM_OK && deleted == 8192);
	if (e)
		cm_warn("storage", "shard %s: trimming the log failed: %s", s->dir, cm_err_msg(e));
	pthread_mutex_lock(&s->wmu);
}

static cm_err open_env(st_shard *s, cm_error *err);

/* Bytes of shard.mdb in use (pages below the high-water mark minus the
 * free list) and the file's size. */
static void
env_usage(st_shard *s, uint64_t *used, uint64_t *file)
{
	MDB_envinfo info;
	MDB_stat st;
	*used = *file = 0;
	if (mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &st))
		return;
	uint64_t free_pages = 0;
	MDB_txn *txn;
	if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) == 0) {
		MDB_cursor *c;
		if (mdb_cursor_open(txn, 0 /* LMDB's free-page DB */, &c) == 0) {
			MDB_val k, v;
			while (mdb_cursor_get(c, &k, &v, MDB_NEXT) == 0) {
				size_t n = 0; /* an MDB_IDL: count, then page numbers */
				if (v.mv_size >= sizeof(n))
					memcpy(&n, v.mv_data, sizeof(n));
				free_pages += n;
			}
			mdb_cursor_close(c);
		}
		mdb_txn_abort(txn);
	}
	uint64_t pages = (uint64_t)info.me_last_pgno + 1;
	*used = (pages > free_pages ? pages - free_pages : 0) * st.ms_psize;
	char path[4096];
	snprintf(path, sizeof(path), "%s/shard.mdb", s->dir);
	struct stat sb;
	if (stat(path, &sb) == 0)
		*file = (uint64_t)sb.st_size;
}

/* LMDB files never shrink: after the log was trimmed, shard.mdb is
 * replaced by a compact copy (written to a temp file, synced, renamed).
 * Called with refresh_mu held and wmu not held. */
static cm_err
compact_env(st_shard *s)
{
	char path[4096], tmp[4200];
	snprintf(path, sizeof(path), "%s/shard.mdb", s->dir);
	snprintf(tmp, sizeof(tmp), "%s.compact.tmp", path);
	/* A log reader (a recovering replica) may hold the env for long:
	 * then skip, rather than stall refreshes behind it; the next flush
	 * compacts. */
	if (pthread_rwlock_trywrlock(&s->env_lock) != 0)
		return CM_OK;
	pthread_mutex_lock(&s->wmu);
	uint64_t used, file;
	env_usage(s, &used, &file);
	cm_err e = CM_OK;
	if (file < 2 * used || file - used < COMPACT_MIN_FREE)
		goto out;
	unlink(tmp);
	int rc = mdb_env_copy2(s->env, tmp, MDB_CP_COMPACT);
	if (rc == 0) {
		int fd = open(tmp, O_RDONLY);
		rc = fd < 0 || fsync(fd) != 0 ? EIO : 0;
		if (fd >= 0)
			close(fd);
	}
	if (rc) {
		unlink(tmp);
		e = st_mdb_err(rc);
		goto out;
	}
	mdb_env_close(s->env);
	s->env = NULL;
	if (rename(tmp, path) != 0) {
		unlink(tmp);
		e = CM_EIO;
	} else {
		cm_fsync_dir(s->dir);
	}
	cm_error cerr;
	cm_error_clear(&cerr);
	cm_err oe = open_env(s, &cerr);
	if (oe) {
		/* Nothing can be written now; the files on disk are intact. */
		cm_errorlog("storage", "shard %s: reopening after compaction failed: %s", s->dir,
		            cerr.reason);
		e = oe;
	} else if (e == CM_OK) {
		cm_info("storage",
		        "shard %s: compacted shard.mdb from %" PRIu64 " to %" PRIu64 " bytes",
		        s->dir, file, used);
	}
out:
	pthread_mutex_unlock(&s->wmu);
	pthread_rwlock_unlock(&s->env_lock);
	return e;
}

/* One frozen buffer's segment, written on the merge pool beside the
 * others of the same refresh. */
typedef struct seg_job {
	st_shard *s;
	frozen_buf *f;
	size_t k;
	seg_ref *nref;
	cm_err e;
	cm_error err;
} seg_job;

static void
seg_job_run(void *arg)
{
	seg_job *j = arg;
	const membuf *m = j->f->set.b[j->k];
	cm_error_clear(&j->err);
	j->e = CM_OK;
	j->nref = NULL;
	if (st_segbuild_docs(m->b) <= m->ndel)
		return; /* nothing left to write */
	char path[4096];
	seg_path(j->s, j->f->gen[j->k], path, sizeof(path));
	j->e = st_segbuild_write(m->b, m->del, path, j->f->gen[j->k], j->s->opts.merge_pool,
	                         &j->err);
	if (j->e == CM_OK)
		j->e = open_seg_ref(j->s, j->f->gen[j->k], &j->nref, &j->err);
}

static void
seg_jobs_drop(seg_job *jobs, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		if (jobs[k].nref) {
			atomic_store(&jobs[k].nref->drop, true);
			seg_ref_release(jobs[k].nref);
			jobs[k].nref = NULL;
		} else {
			char path[4096];
			seg_path(jobs[k].s, jobs[k].f->gen[k], path, sizeof(path));
			unlink(path);
		}
	}
}

/* Refresh: freeze the buffers, write each as a segment without the write
 * lock (in parallel; indexing continues into fresh buffers), then commit
 * the new segment list with every segment's deletes as of the freeze.
 * Called with refresh_mu and wmu held; returns with both held. A failed
 * write leaves the frozen buffers in place for the next refresh to retry. */
static cm_err
refresh_run(st_shard *s)
{
	if (s->frz == NULL) {
		if (bufset_docs(&s->act) == 0 && s->ops_since_commit == 0) {
			/* Nothing to write; an unused buffer's memory goes back. */
			if (s->act.n > 0 && s->busy_bufs == 0 && s->act.vm.count == 0) {
				for (size_t i = 0; i < s->act.n; i++)
					membuf_free(s->act.b[i]);
				s->act.n = 0;
			}
			return CM_OK;
		}
		freeze(s);
	}
	frozen_buf *f = s->frz;
	size_t nb = f->set.n;
	seg_job *jobs = cm_calloc(CM_MEM_STORAGE, nb + 1, sizeof(*jobs));
	for (size_t k = 0; k < nb; k++) {
		jobs[k].s = s;
		jobs[k].f = f;
		jobs[k].k = k;
	}
	cm_err e = CM_OK;
	pthread_mutex_unlock(&s->wmu);
	cm_pool_run_all(nb > 1 ? s->opts.merge_pool : NULL, seg_job_run, jobs, sizeof(*jobs), nb);
	const char *why = "";
	size_t nnew = 0;
	for (size_t k = 0; k < nb; k++) {
		if (jobs[k].e && e == CM_OK) {
			e = jobs[k].e;
			why = jobs[k].err.reason;
		}
		nnew += jobs[k].nref != NULL;
	}
	if (e == CM_OK && nnew)
		e = cm_fsync_dir(s->dir);
	pthread_mutex_lock(&s->wmu);
	wseg *nw = cm_calloc(CM_MEM_STORAGE, nb + 1, sizeof(*nw));
	for (size_t k = 0; k < nb && e == CM_OK; k++) {
		nw[k].ref = jobs[k].nref;
		if (jobs[k].nref)
			e = late_deletes(f, k, jobs[k].nref, &nw[k].live);
	}
	/* Merges cannot commit while refresh_mu is held, so the list is the
	 * one frozen, in the same order. */
	if (e == CM_OK && s->nsegs != f->npend)
		e = CM_EINTERNAL;
	for (size_t i = 0; i < s->nsegs && e == CM_OK; i++)
		if (s->segs[i].ref != f->pend_ref[i])
			e = CM_EINTERNAL;
	if (e) {
		cm_errorlog("storage", "shard %s: refresh failed: %s %s", s->dir, cm_err_msg(e),
		            why);
		for (size_t k = 0; k < nb; k++)
			live_release(nw[k].live);
		cm_free(CM_MEM_STORAGE, nw);
		seg_jobs_drop(jobs, nb);
		cm_free(CM_MEM_STORAGE, jobs);
		return e;
	}
	/* The new list: surviving segments with their views as of the freeze,
	 * plus the new one. Segments fully deleted by then leave the list. */
	wseg *list = cm_calloc(CM_MEM_STORAGE, s->nsegs + nb + 1, sizeof(*list));
	size_t n = 0;
	for (size_t i = 0; i < s->nsegs; i++) {
		wseg w = s->segs[i];
		w.pub = f->pend_live[i];
		if (!w.merging && w.pub && w.pub->count == 0)
			continue;
		list[n++] = w;
	}
	for (size_t k = 0; k < nb; k++)
		if (nw[k].ref)
			list[n++] = nw[k];
	commit_point saved = s->cp;
	s->cp.committed_seq = f->ckp;
	st_mapping *m = mapping_get(s);
	s->cp.mapping_version = m->version;
	mapping_put(s, m);
	/* Keep the log bounded without waiting for an explicit flush (like
	 * Elasticsearch's translog flush threshold), minus what the retention
	 * marker holds back. */
	int64_t trim = -1, upto = trim_bound(s, f->ckp);
	if (upto - s->cp.oplog_trimmed > LOG_TRIM_OPS) {
		/* The commit records the trim point first; the records go after
		 * it (a crash in between only leaves records nobody reads). */
		trim = upto;
		s->cp.oplog_trimmed = trim;
	}
	e = commit_write(s, list, n);
	if (e) {
		s->cp = saved;
		cm_free(CM_MEM_STORAGE, list);
		for (size_t k = 0; k < nb; k++)
			live_release(nw[k].live);
		cm_free(CM_MEM_STORAGE, nw);
		seg_jobs_drop(jobs, nb);
		cm_free(CM_MEM_STORAGE, jobs);
		cm_errorlog("storage", "shard %s: commit failed: %s", s->dir, cm_err_msg(e));
		return e;
	}
	/* Committed: install the list, publish, drop what left it. */
	for (size_t i = 0; i < s->nsegs; i++) {
		wseg *w = &s->segs[i];
		bool kept = false;
		for (size_t j = 0; j < n && !kept; j++)
			kept = list[j].ref == w->ref;
		if (!kept)
			wseg_drop(w);
		else
			live_release(w->pub);
	}
	segs_reserve(s, n);
	for (size_t j = 0; j < n; j++) {
		s->segs[j] = list[j];
		live_ref_get(s->segs[j].pub);
	}
	s->nsegs = n;
	cm_free(CM_MEM_STORAGE, list);
	cm_free(CM_MEM_STORAGE, nw);
	cm_free(CM_MEM_STORAGE, jobs);
	publish_reader(s);
	vm_carry_tombstones(&s->act.vm, &f->set.vm, s->ckp);
	s->ops_since_commit -= f->ops;
	s->frz = NULL;
	frozen_free(f);
	atomic_fetch_add(&s->n_refresh, 1);
	merge_want_locked(s);
	if (trim >= 0)
		trim_log(s, trim);
	return CM_OK;
}

cm_err
st_shard_refresh(st_shard *s)
{
	lock_both(s);
	cm_err e = refresh_run(s);
	unlock_both(s);
	return e;
}

cm_err
st_shard_flush(st_shard *s)
{
	lock_both(s);
	cm_err e = refresh_run(s);
	if (e == CM_OK) {
		int64_t upto = trim_bound(s, s->cp.committed_seq);
		if (upto > s->cp.oplog_trimmed) {
			int64_t saved = s->cp.oplog_trimmed;
			s->cp.oplog_trimmed = upto;
			e = commit_write(s, s->segs, s->nsegs);
			if (e)
				s->cp.oplog_trimmed = saved;
			else
				trim_log(s, upto);
		}
	}
	pthread_mutex_unlock(&s->wmu);
	if (e == CM_OK)
		e = compact_env(s);
	if (e == CM_OK)
		atomic_fetch_add(&s->n_flush, 1);
	pthread_mutex_unlock(&s->refresh_mu);
	return e;
}

void
st_shard_set_oplog_retention(st_shard *s, uint64_t keep_above)
{
	pthread_mutex_lock(&s->wmu);
	s->retain_above = keep_above == ST_NO_SEQ            ? INT64_MAX
	                  : keep_above > (uint64_t)INT64_MAX ? INT64_MAX
	                                                     : (int64_t)keep_above;
	pthread_mutex_unlock(&s->wmu);
}

/* The global checkpoint lives under its own meta key, apart from the commit
 * point: it changes with nearly every replicated batch, and a commit is a
 * synced rewrite of the segment list and deletes. */
#define GCP_KEY "gcp"

static cm_err
gcp_write(st_shard *s, int64_t gcp)
{
	if (s->env == NULL)
		return CM_EIO; /* a failed reopen after compaction */
	uint8_t val[12];
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	cm_buf_put_u64(&b, (uint64_t)gcp);
	cm_buf_put_checksum(&b, 0);
	memcpy(val, b.data, sizeof(val));
	cm_buf_free(&b);
	MDB_txn *txn;
	int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
	if (rc)
		return st_mdb_err(rc);
	MDB_val k = {sizeof(GCP_KEY) - 1, GCP_KEY}, v = {sizeof(val), val};
	if ((rc = mdb_put(txn, s->db_meta, &k, &v, 0)) != 0) {
		mdb_txn_abort(txn);
		return st_mdb_err(rc);
	}
	/* No sync of its own: a trim it allows is committed with a sync,
	 * which makes this transaction durable first. */
	return st_mdb_err(mdb_txn_commit(txn));
}

/* Reads the persisted global checkpoint inside txn (-1 when none). */
static cm_err
gcp_load(MDB_txn *txn, MDB_dbi dbi, int64_t *gcp)
{
	*gcp = -1;
	MDB_val k = {sizeof(GCP_KEY) - 1, GCP_KEY}, v;
	int rc = mdb_get(txn, dbi, &k, &v);
	if (rc == MDB_NOTFOUND)
		return CM_OK;
	if (rc)
		return st_mdb_err(rc);
	size_t len = v.mv_size;
	if (!cm_checksum_ok(v.mv_data, &len) || len != 8)
		return CM_ECORRUPT;
	uint64_t g = cm_get_u64(v.mv_data);
	if (g > (uint64_t)INT64_MAX)
		return CM_ECORRUPT;
	*gcp = (int64_t)g;
	return CM_OK;
}

uint64_t
st_shard_global_checkpoint(st_shard *s)
{
	pthread_mutex_lock(&s->wmu);
	int64_t g = s->gcp;
	pthread_mutex_unlock(&s->wmu);
	return g < 0 ? ST_NO_SEQ : (uint64_t)g;
}

cm_err
st_shard_set_global_checkpoint(st_shard *s, uint64_t gcp)
{
	if (gcp == ST_NO_SEQ)
		return CM_OK;
	if (gcp > (uint64_t)INT64_MAX)
		return CM_EINVAL;
	pthread_mutex_lock(&s->wmu);
	/* Never claim more than this copy holds: the stored value bounds
	 * trimming and is where the copy reads its own log from. */
	int64_t v = (int64_t)gcp < s->ckp ? (int64_t)gcp : s->ckp;
	cm_err e = CM_OK;
	if (v > s->gcp) {
		e = gcp_write(s, v);
		if (e == CM_OK)
			s->gcp = v;
		else
			cm_warn("storage", "shard %s: persisting the global checkpoint failed: %s",
			        s->dir, cm_err_msg(e));
	}
	pthread_mutex_unlock(&s->wmu);
	return e;
}

void
st_shard_set_primary_term(st_shard *s, uint64_t term)
{
	lock_both(s);
	if (term != s->cp.primary_term) {
		s->cp.primary_term = term;
		cm_err e = commit_write(s, s->segs, s->nsegs);
		if (e)
			cm_errorlog("storage", "shard %s: persisting primary term failed: %s",
			            s->dir, cm_err_msg(e));
	}
	unlock_both(s);
}

/* ---------------------------------------------------------------- */
/* merges */

static size_t
find_wseg(const st_shard *s, const seg_ref *r)
{
	for (size_t i = 0; i < s->nsegs; i++)
		if (s->segs[i].ref == r)
			return i;
	return SIZE_MAX;
}

/* Maps the old segments' bitsets onto the merged segment's doc numbers:
 * the merge kept exactly the docs live in `snap`, in order. */
/* The docs of segment r a merge keeps given its live docs snap: the live
 * ones, less the nested docs of deleted roots (st_segment_merge drops
 * those too). NULL when that is just snap (no nested docs). */
static uint64_t *
merge_kept(const seg_ref *r, const live_ref *snap, uint32_t *count)
{
	const uint64_t *nested = st_segment_nested(r->seg);
	if (nested == NULL || snap == NULL) {
		*count = snap ? snap->count : r->max_doc;
		return NULL;
	}
	uint64_t *k = cm_calloc(CM_MEM_STORAGE, st_bit_words(r->max_doc) + 1, 8);
	bool palive = false;
	*count = 0;
	for (uint32_t d = r->max_doc; d-- > 0;) {
		bool alive = st_bit_get(snap->bits, d);
		if (!st_bit_get(nested, d))
			palive = alive;
		if (alive && palive) {
			st_bit_set(k, d);
			(*count)++;
		}
	}
	return k;
}

static live_ref *
remap_live(seg_ref *const *in, live_ref *const *snap, uint64_t *const *kept, live_ref *const *now,
           size_t k, uint32_t new_max)
{
	live_ref *l = live_new(new_max, true);
	uint32_t nd = 0;
	for (size_t i = 0; i < k; i++) {
		for (uint32_t d = 0; d < in[i]->max_doc; d++) {
			if (kept[i] ? !st_bit_get(kept[i], d) : !live_get(snap[i], d))
				continue;
			if (nd < new_max && !live_get(now[i], d)) {
				l->bits[nd >> 6] &= ~((uint64_t)1 << (nd & 63));
				l->count--;
			}
			nd++;
		}
	}
	if (l->count == l->nbits) {
		live_release(l);
		return NULL;
	}
	return l;
}

/* Merges the writer segments at idx[0..k) into one. Called and returns
 * with wmu held; drops it while the merge runs. */
static cm_err
merge_run(st_shard *s, const size_t *idx, size_t k)
{
	seg_ref **in = cm_calloc(CM_MEM_STORAGE, k, sizeof(*in));
	live_ref **snap = cm_calloc(CM_MEM_STORAGE, k, sizeof(*snap));
	st_segment **segs = cm_calloc(CM_MEM_STORAGE, k, sizeof(*segs));
	const uint64_t **live = cm_calloc(CM_MEM_STORAGE, k, sizeof(*live));
	uint64_t **kept = cm_calloc(CM_MEM_STORAGE, k, sizeof(*kept));
	uint32_t expect = 0;
	for (size_t i = 0; i < k; i++) {
		wseg *w = &s->segs[idx[i]];
		w->merging = true;
		in[i] = w->ref;
		atomic_fetch_add(&in[i]->refs, 1);
		/* The merge keeps what readers see now, so a merge never shows
		 * an unrefreshed delete early. */
		snap[i] = live_ref_get(w->pub);
		segs[i] = in[i]->seg;
		live[i] = snap[i] ? snap[i]->bits : NULL;
		uint32_t n;
		kept[i] = merge_kept(in[i], snap[i], &n);
		expect += n;
	}
	uint64_t gen = s->cp.next_gen++;
	s->merges_running++;
	pthread_mutex_unlock(&s->wmu);

	char path[4096];
	seg_path(s, gen, path, sizeof(path));
	cm_error cerr;
	cm_error_clear(&cerr);
	seg_ref *out = NULL;
	size_t budget = (s->opts.indexing_max_ram_mb ? s->opts.indexing_max_ram_mb : 64) * MB;
	cm_err e = CM_OK;
	if (expect > 0) {
		e = st_segment_merge(segs, live, k, path, gen, s->opts.merge_pool, budget, &cerr);
		if (e == CM_OK)
			e = cm_fsync_dir(s->dir);
		if (e == CM_OK)
			e = open_seg_ref(s, gen, &out, &cerr);
		if (e == CM_OK && out->max_doc != expect) {
			cm_errorlog("storage", "shard %s: merge produced %u docs, expected %u",
			            s->dir, out->max_doc, expect);
			e = CM_EINTERNAL;
		}
	}

	/* refresh_mu first: a refresh in flight relies on the segment list
	 * it froze. */
	lock_both(s);
	s->merges_running--;
	size_t *pos = cm_calloc(CM_MEM_STORAGE, k, sizeof(*pos));
	for (size_t i = 0; i < k && e == CM_OK; i++) {
		pos[i] = find_wseg(s, in[i]);
		if (pos[i] == SIZE_MAX)
			e = CM_EINTERNAL; /* cannot happen: merging segments stay listed */
	}
	wseg *list = NULL;
	size_t n = 0;
	if (e == CM_OK) {
		live_ref **now_pub = cm_calloc(CM_MEM_STORAGE, k, sizeof(*now_pub));
		live_ref **now_live = cm_calloc(CM_MEM_STORAGE, k, sizeof(*now_live));
		for (size_t i = 0; i < k; i++) {
			now_pub[i] = s->segs[pos[i]].pub;
			now_live[i] = s->segs[pos[i]].live;
		}
		wseg nw = {0};
		if (out) {
			nw.ref = out;
			nw.pub = remap_live(in, snap, kept, now_pub, k, out->max_doc);
			nw.live = remap_live(in, snap, kept, now_live, k, out->max_doc);
		}
		cm_free(CM_MEM_STORAGE, now_pub);
		cm_free(CM_MEM_STORAGE, now_live);
		list = cm_calloc(CM_MEM_STORAGE, s->nsegs + 1, sizeof(*list));
		bool placed = false;
		for (size_t i = 0; i < s->nsegs; i++) {
			bool merged = false;
			for (size_t j = 0; j < k && !merged; j++)
				merged = pos[j] == i;
			if (!merged) {
				list[n++] = s->segs[i];
			} else if (!placed) {
				placed = true;
				if (out && !(nw.pub && nw.pub->count == 0 && nw.live &&
				             nw.live->count == 0))
					list[n++] = nw;
			}
		}
		bool kept_new = false;
		for (size_t j = 0; j < n; j++)
			kept_new |= list[j].ref == out && out;
		e = commit_write(s, list, n);
		if (e || !kept_new) {
			live_release(nw.pub);
			live_release(nw.live);
		}
		if (e == CM_OK && out && !kept_new) {
			atomic_store(&out->drop, true);
			seg_ref_release(out);
			out = NULL;
		}
	}
	if (e == CM_OK) {
		for (size_t j = 0; j < k; j++) {
			wseg_drop(&s->segs[pos[j]]);
			seg_ref_release(in[j]); /* our merge reference */
		}
		memcpy(s->segs, list, n * sizeof(*list));
		s->nsegs = n;
		publish_reader(s);
		atomic_fetch_add(&s->n_merge, 1);
	} else {
		cm_errorlog("storage", "shard %s: merge failed: %s %s", s->dir, cm_err_msg(e),
		            cerr.reason);
		for (size_t j = 0; j < k; j++) {
			size_t p = find_wseg(s, in[j]);
			if (p != SIZE_MAX)
				s->segs[p].merging = false;
			seg_ref_release(in[j]);
		}
		if (out) {
			atomic_store(&out->drop, true);
			seg_ref_release(out);
		} else {
			unlink(path);
		}
	}
	for (size_t j = 0; j < k; j++) {
		live_release(snap[j]);
		cm_free(CM_MEM_STORAGE, kept[j]);
	}
	cm_free(CM_MEM_STORAGE, kept);
	cm_free(CM_MEM_STORAGE, list);
	cm_free(CM_MEM_STORAGE, pos);
	cm_free(CM_MEM_STORAGE, in);
	cm_free(CM_MEM_STORAGE, snap);
	cm_free(CM_MEM_STORAGE, segs);
	cm_free(CM_MEM_STORAGE, live);
	pthread_cond_broadcast(&s->merge_cv);
	pthread_mutex_unlock(&s->refresh_mu);
	return e;
}

/* Picks a tiered merge among segments not already merging (wmu held). */
static size_t
pick_background(st_shard *s, size_t *out)
{
	size_t n = s->nsegs;
	if (n == 0)
		return 0;
	uint64_t *bytes = cm_malloc(CM_MEM_STORAGE, n * sizeof(*bytes));
	bool *busy = cm_malloc(CM_MEM_STORAGE, n * sizeof(*busy));
	for (size_t i = 0; i < n; i++) {
		/* Size by live docs' share, so segments full of deletes look small. */
		const wseg *w = &s->segs[i];
		uint64_t b = w->ref->bytes;
		if (w->pub && w->ref->max_doc)
			b = b * w->pub->count / w->ref->max_doc;
		bytes[i] = b;
		busy[i] = w->merging;
	}
	int factor = s->opts.merge_factor >= 2 ? s->opts.merge_factor : 10;
	size_t k = st_merge_pick_tiered(bytes, busy, n, factor, MERGE_FLOOR_BYTES, out);
	cm_free(CM_MEM_STORAGE, bytes);
	cm_free(CM_MEM_STORAGE, busy);
	return k;
}

/* ---- the merge scheduler ----
 *
 * Background merges of every shard of the process run on a few shared
 * workers (half the cores, 2 to 8), not a thread per shard: a node with a
 * thousand idle shards has no thousand idle threads. A shard that wants a
 * merge is queued once; a worker takes it and merges until the shard's
 * tiers are done, so one shard merges on one worker at a time, as before.
 * Lock order: a shard's wmu -> sched.mu (a leaf). */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	st_shard *head, *tail;
	pthread_once_t once;
} sched = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, PTHREAD_ONCE_INIT};

/* Merges s while it wants it and no force merge runs (wmu held). */
static void
merge_background(st_shard *s)
{
	while (!s->closing && s->merge_wanted && s->force_merging == 0) {
		s->merge_wanted = false;
		size_t *idx = cm_malloc(CM_MEM_STORAGE, (s->nsegs + 1) * sizeof(*idx));
		size_t k = pick_background(s, idx);
		/* Look again afterwards: one merge can complete a tier. */
		if (k > 0 && merge_run(s, idx, k) == CM_OK)
			s->merge_wanted = true;
		cm_free(CM_MEM_STORAGE, idx);
	}
}

static void *
sched_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&sched.mu);
	for (;;) {
		while (!sched.head)
			pthread_cond_wait(&sched.cv, &sched.mu);
		st_shard *s = sched.head;
		sched.head = s->merge_next;
		if (!sched.head)
			sched.tail = NULL;
		s->merge_next = NULL;
		s->merge_queued = false;
		s->merge_busy = true; /* st_shard_close waits for it */
		pthread_mutex_unlock(&sched.mu);
		pthread_mutex_lock(&s->wmu);
		merge_background(s);
		pthread_mutex_lock(&sched.mu);
		s->merge_busy = false;
		pthread_mutex_unlock(&sched.mu);
		pthread_cond_broadcast(&s->merge_cv);
		pthread_mutex_unlock(&s->wmu);
		pthread_mutex_lock(&sched.mu);
	}
	return NULL;
}

static void
sched_start(void)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int n = (int)(cores / 2);
	n = n < 2 ? 2 : n > 8 ? 8 : n;
	for (int i = 0; i < n; i++) {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &a, sched_main, NULL) == 0) {
			char name[16];
			snprintf(name, sizeof(name), "shard-merge-%d", i);
			pthread_setname_np(t, name);
		}
		pthread_attr_destroy(&a);
	}
}

/* s wants a background merge (wmu held): queued unless it is queued or a
 * worker has it already (that worker looks again before it lets go). */
static void
merge_want_locked(st_shard *s)
{
	if (!s->bg_merges || s->closing)
		return;
	s->merge_wanted = true;
	pthread_once(&sched.once, sched_start);
	pthread_mutex_lock(&sched.mu);
	if (!s->merge_queued && !s->merge_busy) {
		s->merge_queued = true;
		s->merge_next = NULL;
		if (sched.tail)
			sched.tail->merge_next = s;
		else
			sched.head = s;
		sched.tail = s;
		pthread_cond_signal(&sched.cv);
	}
	pthread_mutex_unlock(&sched.mu);
}

/* st_shard_close: s leaves the queue, and a worker that has it finishes
 * (wmu held; waits on merge_cv). */
static void
merge_leave_locked(st_shard *s)
{
	s->closing = true;
	pthread_mutex_lock(&sched.mu);
	if (s->merge_queued) {
		st_shard *prev = NULL;
		for (st_shard *q = sched.head; q; prev = q, q = q->merge_next)
			if (q == s) {
				if (prev)
					prev->merge_next = s->merge_next;
				else
					sched.head = s->merge_next;
				if (sched.tail == s)
					sched.tail = prev;
				break;
			}
		s->merge_queued = false;
		s->merge_next = NULL;
	}
	pthread_mutex_unlock(&sched.mu);
	for (;;) {
		pthread_mutex_lock(&sched.mu);
		bool busy = s->merge_busy;
		pthread_mutex_unlock(&sched.mu);
		if (!busy)
			break;
		pthread_cond_wait(&s->merge_cv, &s->wmu);
	}
}

cm_err
st_shard_force_merge(st_shard *s, int max_segments)
{
	pthread_mutex_lock(&s->wmu);
	while (s->resetting) /* then merge what the reset brought */
		pthread_cond_wait(&s->merge_cv, &s->wmu);
	s->force_merging++;
	while (s->merges_running > 0)
		pthread_cond_wait(&s->merge_cv, &s->wmu);
	cm_err e = CM_OK;
	for (;;) {
		size_t n = s->nsegs;
		if (n == 0)
			break;
		uint64_t *bytes = cm_malloc(CM_MEM_STORAGE, n * sizeof(*bytes));
		bool *dels = cm_malloc(CM_MEM_STORAGE, n * sizeof(*dels));
		size_t *idx = cm_malloc(CM_MEM_STORAGE, n * sizeof(*idx));
		for (size_t i = 0; i < n; i++) {
			bytes[i] = s->segs[i].ref->bytes;
			dels[i] = s->segs[i].pub && s->segs[i].pub->count < s->segs[i].ref->max_doc;
		}
		size_t k = st_merge_pick_forced(bytes, dels, n, max_segments, idx);
		if (k > 0)
			e = merge_run(s, idx, k);
		cm_free(CM_MEM_STORAGE, bytes);
		cm_free(CM_MEM_STORAGE, dels);
		cm_free(CM_MEM_STORAGE, idx);
		if (k == 0 || e)
			break;
		/* A rewrite of a single segment with deletes is one step. */
		if (k == 1)
			break;
	}
	s->force_merging--;
	pthread_cond_broadcast(&s->merge_cv);
	/* a background merge wanted meanwhile waited for this one */
	if (s->merge_wanted && s->force_merging == 0)
		merge_want_locked(s);
	pthread_mutex_unlock(&s->wmu);
	return e;
}

/* ---------------------------------------------------------------- */
/* open / close */

void
st_shard_opts_default(st_shard_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->indexing_max_ram_mb = 64;
	o->merge_pool = NULL;
	o->background_merges = true;
	o->merge_factor = 10;
}

static cm_err
decode_commit(const void *p, size_t len, commit_point *cp, uint64_t **gens, size_t *ngens)
{
	if (!cm_checksum_ok(p, &len))
		return CM_ECORRUPT;
	cm_rd r;
	cm_rd_init(&r, p, len);
	uint32_t fmt;
	uint64_t cs, tr, n;
	if (!cm_rd_u32(&r, &fmt) || fmt != COMMIT_FORMAT || !cm_rd_u64(&r, &cp->next_gen) ||
	    !cm_rd_u64(&r, &cs) || !cm_rd_u64(&r, &tr) || !cm_rd_u64(&r, &cp->mapping_version) ||
	    !cm_rd_u64(&r, &cp->primary_term) || !cm_rd_varint(&r, &n) || n > cm_rd_left(&r))
		return CM_ECORRUPT;
	cp->committed_seq = (int64_t)cs;
	cp->oplog_trimmed = (int64_t)tr;
	*gens = cm_calloc(CM_MEM_STORAGE, n ? n : 1, sizeof(**gens));
	for (uint64_t i = 0; i < n; i++) {
		if (!cm_rd_varint(&r, &(*gens)[i])) {
			cm_free(CM_MEM_STORAGE, *gens);
			*gens = NULL;
			return CM_ECORRUPT;
		}
	}
	*ngens = n;
	return CM_OK;
}

static bool
gen_listed(const uint64_t *gens, size_t n, uint64_t g)
{
	for (size_t i = 0; i < n; i++)
		if (gens[i] == g)
			return true;
	return false;
}

/* Removes partial files and segments the commit point does not list. */
static void
clean_dir(st_shard *s, const uint64_t *gens, size_t n)
{
	DIR *d = opendir(s->dir);
	if (d == NULL)
		return;
	struct dirent *de;
	char path[4096];
	while ((de = readdir(d)) != NULL) {
		const char *nm = de->d_name;
		size_t l = strlen(nm);
		bool rm = false;
		if (l > 4 && strcmp(nm + l - 4, ".tmp") == 0) {
			rm = true;
		} else if (strncmp(nm, "seg-", 4) == 0) {
			char *end;
			uint64_t g = strtoull(nm + 4, &end, 10);
			rm = !(end != nm + 4 && strcmp(end, ".mdb") == 0 && gen_listed(gens, n, g));
		}
		if (rm) {
			snprintf(path, sizeof(path), "%s/%s", s->dir, nm);
			if (unlink(path) == 0)
				cm_info("storage", "shard %s: removed unreferenced %s", s->dir, nm);
		}
	}
	closedir(d);
}

static cm_err
load_deletes(st_shard *s, MDB_txn *txn, wseg *w)
{
	uint8_t kb[8];
	for (int x = 0; x < 8; x++)
		kb[x] = (uint8_t)(w->ref->gen >> (56 - 8 * x));
	MDB_val k = {8, kb}, v;
	int rc = mdb_get(txn, s->db_deletes, &k, &v);
	if (rc == MDB_NOTFOUND)
		return CM_OK;
	if (rc)
		return st_mdb_err(rc);
	size_t len = v.mv_size;
	if (!cm_checksum_ok(v.mv_data, &len) || len < 4)
		return CM_ECORRUPT;
	uint32_t nbits = cm_get_u32(v.mv_data);
	size_t words = st_bit_words(nbits);
	if (nbits != w->ref->max_doc || len != 4 + words * 8)
		return CM_ECORRUPT;
	live_ref *l = live_new(nbits, false);
	const uint8_t *p = (const uint8_t *)v.mv_data + 4;
	uint32_t count = 0;
	for (size_t j = 0; j < words; j++) {
		uint64_t live = ~cm_get_u64(p + 8 * j);
		if (j == words - 1 && (nbits & 63))
			live &= ((uint64_t)1 << (nbits & 63)) - 1;
		l->bits[j] = live;
		count += (uint32_t)__builtin_popcountll(live);
	}
	l->count = count;
	w->live = l;
	w->pub = live_ref_get(l);
	return CM_OK;
}

typedef struct replay_ctx {
	st_shard *s;
	st_op *ops;
	st_op_result *res;
	cm_buf *bufs; /* copies: log values die with the read txn */
	size_t n, cap;
	uint64_t replayed;
	cm_err err;
} replay_ctx;

static void
replay_flush(replay_ctx *rc)
{
	if (rc->n == 0)
		return;
	cm_err e = apply_ops(rc->s, rc->ops, rc->n, rc->res, true);
	if (e && !rc->err)
		rc->err = e;
	for (size_t i = 0; i < rc->n; i++) {
		if (rc->res[i].err)
			cm_warn("storage", "shard %s: replay of seq_no %" PRIu64 " failed: %s %s",
			        rc->s->dir, rc->ops[i].seq_no, cm_err_msg(rc->res[i].err),
			        rc->res[i].reason);
		else if (rc->res[i].result != ST_RESULT_NOOP)
			rc->replayed++;
	}
	rc->n = 0;
}

static int
replay_one(void *ctx, const st_op *op, int64_t version)
{
	replay_ctx *rc = ctx;
	size_t i = rc->n++;
	cm_buf *b = &rc->bufs[i];
	cm_buf_reset(b);
	cm_buf_put(b, op->id, op->id_len);
	cm_buf_put(b, op->source ? op->source : "", op->source_len);
	rc->ops[i] = *op;
	rc->ops[i].id = (const char *)b->data;
	rc->ops[i].source = (const char *)b->data + op->id_len;
	rc->ops[i].version = version;
	rc->ops[i].has_version = true;
	if (rc->n == rc->cap)
		replay_flush(rc);
	return rc->err != CM_OK;
}

static cm_err
replay_log(st_shard *s)
{
	replay_ctx rc = {.s = s, .cap = 256};
	rc.ops = cm_calloc(CM_MEM_STORAGE, rc.cap, sizeof(*rc.ops));
	rc.res = cm_calloc(CM_MEM_STORAGE, rc.cap, sizeof(*rc.res));
	rc.bufs = cm_calloc(CM_MEM_STORAGE, rc.cap, sizeof(*rc.bufs));
	for (size_t i = 0; i < rc.cap; i++)
		cm_buf_init(&rc.bufs[i], CM_MEM_STORAGE);
	MDB_txn *txn;
	int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
	cm_err e = mrc ? st_mdb_err(mrc) : CM_OK;
	if (e == CM_OK) {
		/* Applying takes the write lock and reads the same env; the
		 * read txn only pins log pages, which we copy first. */
		e = st_oplog_scan(txn, s->db_oplog, (uint64_t)s->cp.committed_seq, replay_one, &rc);
		mdb_txn_abort(txn);
	}
	if (e == CM_OK)
		replay_flush(&rc);
	if (e == CM_OK)
		e = rc.err;
	if (rc.replayed)
		cm_info("storage", "shard %s: replayed %" PRIu64 " operations from the log", s->dir,
		        rc.replayed);
	for (size_t i = 0; i < rc.cap; i++)
		cm_buf_free(&rc.bufs[i]);
	cm_free(CM_MEM_STORAGE, rc.ops);
	cm_free(CM_MEM_STORAGE, rc.res);
	cm_free(CM_MEM_STORAGE, rc.bufs);
	return e;
}

static cm_err
open_env(st_shard *s, cm_error *err)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/shard.mdb", s->dir);
	int rc = mdb_env_create(&s->env);
	if (rc)
		return cm_error_set(err, st_mdb_err(rc), "shard: mdb_env_create: %s",
		                    mdb_strerror(rc));
	mdb_env_set_maxdbs(s->env, 4);
	mdb_env_set_mapsize(s->env, SHARD_MAP_SIZE);
	/* NOSYNC: commits that must be durable sync explicitly, so batches
	 * from concurrent callers share one fsync. */
	rc = mdb_env_open(s->env, path, MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOTLS, 0644);
	if (rc) {
		mdb_env_close(s->env);
		s->env = NULL;
		return cm_error_set(err, st_mdb_err(rc), "shard: cannot open %s: %s", path,
		                    mdb_strerror(rc));
	}
	MDB_txn *txn;
	rc = mdb_txn_begin(s->env, NULL, 0, &txn);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->db_meta);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "deletes", MDB_CREATE, &s->db_deletes);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "oplog", MDB_CREATE, &s->db_oplog);
	if (rc == 0)
		rc = mdb_txn_commit(txn);
	else
		mdb_txn_abort(txn);
	if (rc == 0)
		rc = mdb_env_sync(s->env, 1);
	if (rc)
		return cm_error_set(err, st_mdb_err(rc), "shard: cannot open %s: %s", path,
		                    mdb_strerror(rc));
	return CM_OK;
}

/* Reads the commit point and opens its segments. */
static cm_err
load_commit(st_shard *s, cm_error *err)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return cm_error_set(err, st_mdb_err(rc), "shard: %s", mdb_strerror(rc));
	uint64_t *gens = NULL;
	size_t ngens = 0;
	cm_err e = CM_OK;
	MDB_val k = {6, "commit"}, v;
	rc = mdb_get(txn, s->db_meta, &k, &v);
	if (rc == 0) {
		e = decode_commit(v.mv_data, v.mv_size, &s->cp, &gens, &ngens);
		if (e)
			cm_error_set(err, e, "shard %s: commit point is corrupt", s->dir);
	} else if (rc != MDB_NOTFOUND) {
		e = cm_error_set(err, st_mdb_err(rc), "shard: %s", mdb_strerror(rc));
	}
	if (e == CM_OK) {
		clean_dir(s, gens, ngens);
		segs_reserve(s, ngens);
		for (size_t i = 0; i < ngens && e == CM_OK; i++) {
			seg_ref *r;
			e = open_seg_ref(s, gens[i], &r, err);
			if (e)
				break;
			s->segs[s->nsegs++] = (wseg){.ref = r};
			e = load_deletes(s, txn, &s->segs[s->nsegs - 1]);
			if (e)
				cm_error_set(err, e,
				             "shard %s: deleted-docs bitset of segment %" PRIu64
				             " is corrupt",
				             s->dir, gens[i]);
		}
	}
	if (e == CM_OK) {
		bool found;
		uint64_t last;
		e = st_oplog_last(txn, s->db_oplog, &last, &found);
		s->log_last = found ? (int64_t)last : -1;
		if (e)
			cm_error_set(err, e, "shard %s: operation log is unreadable", s->dir);
	}
	if (e == CM_OK) {
		e = gcp_load(txn, s->db_meta, &s->gcp);
		if (e)
			cm_error_set(err, e, "shard %s: global checkpoint is corrupt", s->dir);
	}
	mdb_txn_abort(txn);
	cm_free(CM_MEM_STORAGE, gens);
	return e;
}

cm_err
st_shard_open(const char *dir, const st_mapping *m, const st_shard_opts *o, st_shard **out,
              cm_error *err)
{
	*out = NULL;
	cm_err e = cm_mkdir_p(dir);
	if (e)
		return cm_error_set(err, e, "shard: cannot create %s", dir);
	if ((e = st__reset_recover(dir, err)) != CM_OK)
		return e;
	st_shard *s = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*s));
	s->sdir = st__seg_dir_new();
	s->dir = cm_strdup(CM_MEM_STORAGE, dir);
	if (o)
		s->opts = *o;
	else
		st_shard_opts_default(&s->opts);
	atomic_init(&s->nested_limit, s->opts.nested_objects_limit ? s->opts.nested_objects_limit
	                                                           : ST_NESTED_OBJECTS_LIMIT);
	pthread_mutex_init(&s->refresh_mu, NULL);
	pthread_rwlock_init(&s->env_lock, NULL);
	pthread_mutex_init(&s->wmu, NULL);
	pthread_mutex_init(&s->rmu, NULL);
	pthread_mutex_init(&s->map_mu, NULL);
	pthread_mutex_init(&s->sync_mu, NULL);
	pthread_cond_init(&s->sync_cv, NULL);
	pthread_cond_init(&s->merge_cv, NULL);
	s->mapping = st_mapping_ref((st_mapping *)m);
	cm_buf_init(&s->scratch, CM_MEM_STORAGE);
	s->cp = (commit_point){
	    .next_gen = 1, .committed_seq = -1, .oplog_trimmed = -1, .primary_term = 1};
	s->retain_above = INT64_MAX;
	s->gcp = -1;
	atomic_init(&s->commit_ticket, 0);
	atomic_init(&s->n_refresh, 0);
	atomic_init(&s->n_merge, 0);
	atomic_init(&s->n_flush, 0);
	atomic_init(&s->n_syncs, 0);
	bufset_init(&s->act);
	pthread_cond_init(&s->buf_cv, NULL);
	s->max_bufs = s->opts.index_pool ? (size_t)cm_pool_threads(s->opts.index_pool) + 1 : 4;

	if ((e = open_env(s, err)) != CM_OK)
		goto fail;
	if ((e = load_commit(s, err)) != CM_OK)
		goto fail;
	s->ckp = s->cp.committed_seq;
	s->max_seq = s->ckp;
	publish_reader(s);
	if ((e = replay_log(s)) != CM_OK) {
		cm_error_set(err, e, "shard %s: replaying the operation log failed", s->dir);
		goto fail;
	}
	if (s->log_last > s->max_seq)
		s->max_seq = s->log_last;
	if (s->gcp > s->ckp) {
		/* Only after a machine crash lost log pages the gcp had covered:
		 * never claim more than this copy holds. */
		cm_warn("storage",
		        "shard %s: global checkpoint %" PRId64 " above local checkpoint %" PRId64,
		        s->dir, s->gcp, s->ckp);
		s->gcp = s->ckp;
	}
	if (s->opts.background_merges) {
		/* Segments left from before may already warrant a merge. */
		s->bg_merges = true;
		pthread_mutex_lock(&s->wmu);
		merge_want_locked(s);
		pthread_mutex_unlock(&s->wmu);
	}
	*out = s;
	return CM_OK;
fail:
	st_shard_close(s);
	return e;
}

void
st_shard_close(st_shard *s)
{
	if (s == NULL)
		return;
	if (s->bg_merges) {
		pthread_mutex_lock(&s->wmu);
		merge_leave_locked(s);
		pthread_mutex_unlock(&s->wmu);
	}
	if (s->cur)
		st_reader_release(s->cur);
	for (size_t i = 0; i < s->nsegs; i++) {
		live_release(s->segs[i].live);
		live_release(s->segs[i].pub);
		seg_ref_release(s->segs[i].ref);
	}
	cm_free(CM_MEM_STORAGE, s->segs);
	st__seg_dir_release(s->sdir);
	if (s->env) {
		mdb_env_sync(s->env, 1);
		mdb_env_close(s->env);
	}
	bufset_free(&s->act);
	frozen_free(s->frz);
	pthread_cond_destroy(&s->buf_cv);
	cm_free(CM_MEM_STORAGE, s->pending);
	cm_buf_free(&s->scratch);
	if (s->mapping)
		st_mapping_unref(s->mapping);
	pthread_mutex_destroy(&s->refresh_mu);
	pthread_rwlock_destroy(&s->env_lock);
	pthread_mutex_destroy(&s->wmu);
	pthread_mutex_destroy(&s->rmu);
	pthread_mutex_destroy(&s->map_mu);
	pthread_mutex_destroy(&s->sync_mu);
	pthread_cond_destroy(&s->sync_cv);
	pthread_cond_destroy(&s->merge_cv);
	cm_free(CM_MEM_STORAGE, s->dir);
	cm_free(CM_MEM_STORAGE, s);
}

/* ---------------------------------------------------------------- */
/* stats and log access */

void
st_shard_stats_get(st_shard *s, st_shard_stats *out)
{
	memset(out, 0, sizeof(*out));
	st_reader *r = st_shard_reader(s);
	out->docs = r->docs;
	out->segments = r->n;
	for (size_t i = 0; i < r->n; i++) {
		out->deleted_docs += r->segs[i]->max_doc -
		                     st_segment_nested_count(r->segs[i]->seg) -
		                     st_reader_live_count(r, i);
		out->store_bytes += r->segs[i]->bytes;
	}
	st_reader_release(r);
	char path[4096];
	snprintf(path, sizeof(path), "%s/shard.mdb", s->dir);
	struct stat sb;
	if (stat(path, &sb) == 0)
		out->store_bytes += (uint64_t)sb.st_size;
	pthread_mutex_lock(&s->wmu);
	out->buffered_docs = bufset_docs(&s->act);
	if (s->frz)
		out->buffered_docs += bufset_docs(&s->frz->set);
	out->indexing_buffers = s->act.n;
	out->indexing_buffer_bytes = bufset_ram(&s->act) + (s->frz ? bufset_ram(&s->frz->set) : 0);
	out->max_seq_no = (uint64_t)s->max_seq;
	out->local_checkpoint = (uint64_t)s->ckp;
	out->committed_seq_no = (uint64_t)s->cp.committed_seq;
	out->global_checkpoint = (uint64_t)s->gcp;
	out->primary_term = s->cp.primary_term;
	out->log_batches = atomic_load(&s->commit_ticket) - s->ticket_base;
	pthread_mutex_unlock(&s->wmu);
	out->refreshes = atomic_load(&s->n_refresh);
	out->merges = atomic_load(&s->n_merge);
	out->flushes = atomic_load(&s->n_flush);
	out->log_syncs = atomic_load(&s->n_syncs);
}

bool
st_shard_is_empty(st_shard *s)
{
	st_reader *r = st_shard_reader(s);
	bool empty = r->n == 0 && r->docs == 0;
	st_reader_release(r);
	if (!empty)
		return false;
	pthread_mutex_lock(&s->wmu);
	empty = bufset_docs(&s->act) == 0 && (!s->frz || bufset_docs(&s->frz->set) == 0) &&
	        s->max_seq == ST_NO_SEQ;
	pthread_mutex_unlock(&s->wmu);
	return empty;
}

cm_err
st_shard_oplog_read(st_shard *s, uint64_t from, st_oplog_fn fn, void *ctx)
{
	pthread_rwlock_rdlock(&s->env_lock);
	MDB_txn *txn;
	int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
	if (rc) {
		pthread_rwlock_unlock(&s->env_lock);
		return st_mdb_err(rc);
	}
	/* Checked after the snapshot began: a trim point is recorded before
	 * its records go, so the snapshot holds everything above it. */
	pthread_mutex_lock(&s->wmu);
	int64_t trimmed = s->cp.oplog_trimmed;
	pthread_mutex_unlock(&s->wmu);
	int64_t f = from == ST_NO_SEQ ? -1 : (int64_t)from;
	cm_err e = f < trimmed ? CM_ENOTFOUND : st_oplog_scan(txn, s->db_oplog, from, fn, ctx);
	mdb_txn_abort(txn);
	pthread_rwlock_unlock(&s->env_lock);
	return e;
}

/* ---------------------------------------------------------------- */
/* snapshot for file-based recovery */

/* Creates dst (and its parent when missing); CM_EEXISTS if it exists. */
static cm_err
make_fresh_dir(const char *dst, cm_error *err)
{
	if (mkdir(dst, 0755) == 0)
		return CM_OK;
	if (errno == EEXIST)
		return cm_error_set(err, CM_EEXISTS, "snapshot: %s already exists", dst);
	if (errno != ENOENT)
		return cm_error_set(err, CM_EIO, "snapshot: cannot create %s: %s", dst,
		                    strerror(errno));
	char parent[4096];
	if (snprintf(parent, sizeof(parent), "%s", dst) >= (int)sizeof(parent))
		return cm_error_set(err, CM_EINVAL, "snapshot: path too long");
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		if (cm_mkdir_p(parent) != CM_OK)
			return cm_error_set(err, CM_EIO, "snapshot: cannot create %s", parent);
	}
	if (mkdir(dst, 0755) == 0)
		return CM_OK;
	if (errno == EEXIST)
		return cm_error_set(err, CM_EEXISTS, "snapshot: %s already exists", dst);
	return cm_error_set(err, CM_EIO, "snapshot: cannot create %s: %s", dst, strerror(errno));
}

/* Byte copy for when a hard link cannot cross file systems. */
static cm_err
copy_file(const char *src, const char *dst)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return CM_EIO;
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (out < 0) {
		close(in);
		return CM_EIO;
	}
	size_t cap = (size_t)1 << 20;
	char *buf = cm_malloc(CM_MEM_STORAGE, cap);
	cm_err e = CM_OK;
	for (;;) {
		ssize_t n = read(in, buf, cap);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			e = n < 0 ? CM_EIO : CM_OK;
			break;
		}
		for (ssize_t off = 0; off < n && e == CM_OK;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				e = CM_EIO;
			else
				off += w;
		}
		if (e)
			break;
	}
	if (e == CM_OK && fsync(out) != 0)
		e = CM_EIO;
	cm_free(CM_MEM_STORAGE, buf);
	close(in);
	if (close(out) != 0 && e == CM_OK)
		e = CM_EIO;
	return e;
}

/* The highest seq_no a copied shard.mdb holds (commit or log), read from
 * the copy itself: the copy's read transaction is LMDB's, so only the file
 * can say where its log ends. -1 when none. */
static cm_err
copy_max_seq(const char *path, int64_t *max, cm_error *err)
{
	MDB_env *env;
	int rc = mdb_env_create(&env);
	if (rc)
		return cm_error_set(err, st_mdb_err(rc), "snapshot: %s", mdb_strerror(rc));
	MDB_txn *txn = NULL;
	mdb_env_set_maxdbs(env, 4);
	mdb_env_set_mapsize(env, SHARD_MAP_SIZE);
	/* NOLOCK: no lock file appears beside the copy. */
	rc = mdb_env_open(env, path, MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOTLS, 0644);
	if (rc == 0)
		rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
	MDB_dbi meta, log;
	if (rc == 0)
		rc = mdb_dbi_open(txn, "meta", 0, &meta);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "oplog", 0, &log);
	cm_err e = st_mdb_err(rc);
	*max = -1;
	if (e == CM_OK) {
		MDB_val k = {6, "commit"}, v;
		rc = mdb_get(txn, meta, &k, &v);
		if (rc == 0) {
			commit_point cp;
			uint64_t *gens = NULL;
			size_t ngens = 0;
			e = decode_commit(v.mv_data, v.mv_size, &cp, &gens, &ngens);
			cm_free(CM_MEM_STORAGE, gens);
			if (e == CM_OK)
				*max = cp.committed_seq;
		} else if (rc != MDB_NOTFOUND) {
			e = st_mdb_err(rc);
		}
	}
	if (e == CM_OK) {
		uint64_t last;
		bool found;
		e = st_oplog_last(txn, log, &last, &found);
		if (e == CM_OK && found && (int64_t)last > *max)
			*max = (int64_t)last;
	}
	if (txn)
		mdb_txn_abort(txn);
	mdb_env_close(env);
	if (e)
		cm_error_set(err, e, "snapshot: the copy of shard.mdb is unreadable");
	return e;
}

/* Links (or copies) the committed segment files and copies shard.mdb into
 * dst while no commit can happen. Called with refresh_mu held, wmu not. */
static cm_err
snapshot_files(st_shard *s, const char *dst, cm_error *err)
{
	/* Every commit (refresh, merge, flush, primary term) holds refresh_mu
	 * and installs its list before letting go, so with refresh_mu held
	 * the writer's list is the committed one and stays so. */
	pthread_mutex_lock(&s->wmu);
	size_t n = s->nsegs;
	uint64_t *gens = cm_calloc(CM_MEM_STORAGE, n ? n : 1, sizeof(*gens));
	for (size_t i = 0; i < n; i++)
		gens[i] = s->segs[i].ref->gen;
	bool have_env = s->env != NULL;
	pthread_mutex_unlock(&s->wmu);
	cm_err e = CM_OK;
	char src[4096], to[4096];
	if (!have_env)
		e = cm_error_set(err, CM_EIO, "snapshot: shard %s has no open store", s->dir);
	for (size_t i = 0; i < n && e == CM_OK; i++) {
		seg_path(s, gens[i], src, sizeof(src));
		snprintf(to, sizeof(to), "%s/seg-%" PRIu64 ".mdb", dst, gens[i]);
		if (link(src, to) == 0)
			continue;
		int lerr = errno;
		/* Another file system, or one without hard links. */
		e = lerr == EXDEV || lerr == EPERM || lerr == EMLINK ? copy_file(src, to) : CM_EIO;
		if (e)
			cm_error_set(err, e, "snapshot: cannot link or copy %s to %s: %s", src, to,
			             strerror(lerr));
	}
	cm_free(CM_MEM_STORAGE, gens);
	if (e)
		return e;
	snprintf(to, sizeof(to), "%s/shard.mdb", dst);
	int fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return cm_error_set(err, CM_EIO, "snapshot: cannot create %s: %s", to,
		                    strerror(errno));
	/* One read transaction: the commit point and the log as of one moment.
	 * Log appends go on meanwhile (the copy just misses them); compaction
	 * needs refresh_mu, so the env stays put. */
	int rc = mdb_env_copyfd2(s->env, fd, MDB_CP_COMPACT);
	if (rc == 0 && fsync(fd) != 0)
		rc = errno ? errno : EIO;
	if (close(fd) != 0 && rc == 0)
		rc = EIO;
	if (rc)
		return cm_error_set(err, st_mdb_err(rc), "snapshot: copying shard.mdb failed: %s",
		                    mdb_strerror(rc));
	return CM_OK;
}

cm_err
st_shard_snapshot(st_shard *s, const char *dst_dir, uint64_t *max_seq_no, cm_error *err)
{
	*max_seq_no = ST_NO_SEQ;
	cm_err e = make_fresh_dir(dst_dir, err);
	if (e)
		return e;
	e = st_shard_flush(s);
	if (e) {
		cm_error_set(err, e, "snapshot: flushing shard %s failed", s->dir);
		goto fail;
	}
	uint64_t t0 = cm_now_ns();
	pthread_mutex_lock(&s->refresh_mu);
	e = snapshot_files(s, dst_dir, err);
	pthread_mutex_unlock(&s->refresh_mu);
	uint64_t held_ms = (cm_now_ns() - t0) / 1000000;
	if (e)
		goto fail;
	if ((e = cm_fsync_dir(dst_dir)) != CM_OK) {
		cm_error_set(err, e, "snapshot: cannot sync %s", dst_dir);
		goto fail;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/shard.mdb", dst_dir);
	int64_t max = -1; /* copy_max_seq sets it on success */
	if ((e = copy_max_seq(path, &max, err)) != CM_OK)
		goto fail;
	*max_seq_no = max < 0 ? ST_NO_SEQ : (uint64_t)max;
	cm_info("storage", "shard %s: snapshot to %s up to seq_no %" PRId64 " (commits held %" PRIu64
	        " ms)",
	        s->dir, dst_dir, max, held_ms);
	return CM_OK;
fail:
	cm_rm_rf(dst_dir);
	return e;
}

static int
cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool
ends_with(const char *s, const char *suffix)
{
	size_t l = strlen(s), m = strlen(suffix);
	return l >= m && strcmp(s + l - m, suffix) == 0;
}

cm_err
st_shard_dir_files(const char *dir, char ***names, size_t *n)
{
	*names = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (d == NULL)
		return errno == ENOENT || errno == ENOTDIR ? CM_ENOTFOUND : CM_EIO;
	int dfd = dirfd(d);
	size_t cap = 16, cnt = 0;
	char **out = cm_malloc(CM_MEM_STORAGE, cap * sizeof(*out));
	struct dirent *de;
	errno = 0;
	while ((de = readdir(d)) != NULL) {
		const char *nm = de->d_name;
		struct stat sb;
		if (fstatat(dfd, nm, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
			continue;
		if (ends_with(nm, "-lock") || ends_with(nm, ".tmp"))
			continue;
		if (cnt == cap) {
			cap *= 2;
			out = cm_realloc(CM_MEM_STORAGE, out, cap * sizeof(*out));
		}
		out[cnt++] = cm_strdup(CM_MEM_STORAGE, nm);
	}
	closedir(d);
	qsort(out, cnt, sizeof(*out), cmp_name);
	*names = out;
	*n = cnt;
	return CM_OK;
}

void
st_shard_dir_files_free(char **names, size_t n)
{
	if (names == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		cm_free(CM_MEM_STORAGE, names[i]);
	cm_free(CM_MEM_STORAGE, names);
}
