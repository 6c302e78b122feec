/* The shard request cache (nd_reqcache.h). A stripe holds the entries of
 * the shards that hash to it: a hash table of entries, their LRU list, and
 * one record per shard (its reader generation, its entries and figures).
 * The byte budget is the whole cache's: an insert evicts from its own
 * stripe first, then from the others, one stripe lock at a time. */
#define _GNU_SOURCE
#include "nd_reqcache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <xxhash.h>

#include "../common/cm_alloc.h"

#define MEM CM_MEM_NODE
#define NSTRIPES 16

typedef struct rc_shard rc_shard;

typedef struct rc_entry {
	uint64_t hash;
	rc_shard *sh;
	char *key;
	size_t klen;
	void *val;
	size_t vlen;
	size_t bytes; /* what it counts against the budget */
	struct rc_entry *hnext;        /* hash chain */
	struct rc_entry *lprev, *lnext; /* the stripe's LRU list, head most recent */
	struct rc_entry *sprev, *snext; /* the shard's entries */
} rc_entry;

struct rc_shard {
	char uuid[32];
	uint32_t shard;
	uint64_t gen; /* the newest reader generation seen */
	uint64_t hits, misses, evictions, bytes, entries;
	rc_entry *list;
	rc_shard *next;
};

typedef struct rc_stripe {
	pthread_mutex_t lock;
	rc_entry **buckets;
	size_t nbuckets, count;
	rc_entry *lru_head, *lru_tail;
	rc_shard *shards;
} rc_stripe;

struct nd_reqcache {
	uint64_t limit;
	_Atomic uint64_t bytes;
	rc_stripe stripes[NSTRIPES];
};

nd_reqcache *
nd_reqcache_new(uint64_t max_bytes)
{
	nd_reqcache *c = cm_calloc(MEM, 1, sizeof(*c));
	c->limit = max_bytes;
	for (int i = 0; i < NSTRIPES; i++) {
		pthread_mutex_init(&c->stripes[i].lock, NULL);
		c->stripes[i].nbuckets = 64;
		c->stripes[i].buckets = cm_calloc(MEM, 64, sizeof(rc_entry *));
	}
	return c;
}

uint64_t
nd_reqcache_limit(const nd_reqcache *c)
{
	return c->limit;
}

static rc_stripe *
stripe_of(nd_reqcache *c, const char *uuid, uint32_t shard)
{
	uint64_t h = XXH3_64bits_withSeed(uuid, strlen(uuid), shard);
	return &c->stripes[h % NSTRIPES];
}

static rc_shard *
shard_find(rc_stripe *st, const char *uuid, uint32_t shard, bool add)
{
	for (rc_shard *s = st->shards; s; s = s->next)
		if (s->shard == shard && !strcmp(s->uuid, uuid))
			return s;
	if (!add)
		return NULL;
	rc_shard *s = cm_calloc(MEM, 1, sizeof(*s));
	snprintf(s->uuid, sizeof(s->uuid), "%s", uuid);
	s->shard = shard;
	s->next = st->shards;
	st->shards = s;
	return s;
}

/* Unlinks e from every list of its stripe and frees it; the stripe is locked. */
static void
entry_drop(nd_reqcache *c, rc_stripe *st, rc_entry *e)
{
	rc_entry **pp = &st->buckets[e->hash % st->nbuckets];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		st->lru_head = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	else
		st->lru_tail = e->lprev;
	if (e->sprev)
		e->sprev->snext = e->snext;
	else
		e->sh->list = e->snext;
	if (e->snext)
		e->snext->sprev = e->sprev;
	st->count--;
	e->sh->entries--;
	e->sh->bytes -= e->bytes;
	atomic_fetch_sub(&c->bytes, e->bytes);
	cm_free(MEM, e->key);
	cm_free(MEM, e->val);
	cm_free(MEM, e);
}

static void
shard_drop_entries(nd_reqcache *c, rc_stripe *st, rc_shard *s)
{
	while (s->list)
		entry_drop(c, st, s->list);
}

/* The shard's record for a request over reader generation gen: a newer
 * reader than the entries' makes them unreachable, so they go now. */
static rc_shard *
shard_at(nd_reqcache *c, rc_stripe *st, const nd_rc_key *k)
{
	rc_shard *s = shard_find(st, k->uuid, k->shard, true);
	if (k->gen > s->gen) {
		shard_drop_entries(c, st, s);
		s->gen = k->gen;
	}
	return s;
}

static uint64_t
key_hash(const nd_rc_key *k)
{
	return XXH3_64bits_withSeed(k->req, k->req_len, k->gen * 31 + k->shard);
}

static rc_entry *
entry_find(rc_stripe *st, rc_shard *s, const nd_rc_key *k, uint64_t h)
{
	for (rc_entry *e = st->buckets[h % st->nbuckets]; e; e = e->hnext)
		if (e->hash == h && e->sh == s && e->klen == k->req_len &&
		    !memcmp(e->key, k->req, k->req_len))
			return e;
	return NULL;
}

static void
lru_unlink(rc_stripe *st, rc_entry *e)
{
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		st->lru_head = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	else
		st->lru_tail = e->lprev;
	e->lprev = e->lnext = NULL;
}

static void
lru_push(rc_stripe *st, rc_entry *e)
{
	e->lprev = NULL;
	e->lnext = st->lru_head;
	if (st->lru_head)
		st->lru_head->lprev = e;
	st->lru_head = e;
	if (!st->lru_tail)
		st->lru_tail = e;
}

bool
nd_reqcache_get(nd_reqcache *c, const nd_rc_key *k, cm_buf *out)
{
	rc_stripe *st = stripe_of(c, k->uuid, k->shard);
	uint64_t h = key_hash(k);
	bool hit = false;

	pthread_mutex_lock(&st->lock);
	rc_shard *s = shard_at(c, st, k);
	rc_entry *e = k->gen == s->gen ? entry_find(st, s, k, h) : NULL;
	if (e) {
		lru_unlink(st, e);
		lru_push(st, e);
		cm_buf_put(out, e->val, e->vlen);
		s->hits++;
		hit = true;
	} else {
		s->misses++;
	}
	pthread_mutex_unlock(&st->lock);
	return hit;
}

static void
rehash(rc_stripe *st)
{
	size_t nb = st->nbuckets * 2;
	rc_entry **b = cm_calloc(MEM, nb, sizeof(*b));
	for (size_t i = 0; i < st->nbuckets; i++)
		for (rc_entry *e = st->buckets[i], *next; e; e = next) {
			next = e->hnext;
			e->hnext = b[e->hash % nb];
			b[e->hash % nb] = e;
		}
	cm_free(MEM, st->buckets);
	st->buckets = b;
	st->nbuckets = nb;
}

/* Evicts the stripe's least recently used entries (never keep) while the
 * cache is over its budget; the stripe is locked. */
static void
evict_locked(nd_reqcache *c, rc_stripe *st, const rc_entry *keep)
{
	while (atomic_load(&c->bytes) > c->limit && st->lru_tail && st->lru_tail != keep) {
		st->lru_tail->sh->evictions++;
		entry_drop(c, st, st->lru_tail);
	}
}

void
nd_reqcache_put(nd_reqcache *c, const nd_rc_key *k, const void *val, size_t len)
{
	size_t bytes = sizeof(rc_entry) + k->req_len + len;
	if (bytes > c->limit)
		return;
	rc_stripe *st = stripe_of(c, k->uuid, k->shard);
	uint64_t h = key_hash(k);

	pthread_mutex_lock(&st->lock);
	rc_shard *s = shard_at(c, st, k);
	if (k->gen != s->gen || entry_find(st, s, k, h)) {
		pthread_mutex_unlock(&st->lock);
		return;
	}
	rc_entry *e = cm_calloc(MEM, 1, sizeof(*e));
	e->hash = h;
	e->sh = s;
	e->key = cm_malloc(MEM, k->req_len + 1);
	memcpy(e->key, k->req, k->req_len);
	e->klen = k->req_len;
	e->val = cm_malloc(MEM, len + 1);
	memcpy(e->val, val, len);
	e->vlen = len;
	e->bytes = bytes;
	if (st->count + 1 > st->nbuckets)
		rehash(st);
	e->hnext = st->buckets[h % st->nbuckets];
	st->buckets[h % st->nbuckets] = e;
	lru_push(st, e);
	e->snext = s->list;
	if (s->list)
		s->list->sprev = e;
	s->list = e;
	st->count++;
	s->entries++;
	s->bytes += bytes;
	atomic_fetch_add(&c->bytes, bytes);
	evict_locked(c, st, e);
	pthread_mutex_unlock(&st->lock);
	/* Still over: the other stripes' oldest go, one lock held at a time. */
	for (int i = 0; i < NSTRIPES && atomic_load(&c->bytes) > c->limit; i++) {
		rc_stripe *o = &c->stripes[i];
		if (o == st)
			continue;
		pthread_mutex_lock(&o->lock);
		evict_locked(c, o, NULL);
		pthread_mutex_unlock(&o->lock);
	}
}

void
nd_reqcache_clear(nd_reqcache *c, const char *uuid, bool forget)
{
	for (int i = 0; i < NSTRIPES; i++) {
		rc_stripe *st = &c->stripes[i];
		pthread_mutex_lock(&st->lock);
		for (rc_shard **pp = &st->shards; *pp;) {
			rc_shard *s = *pp;
			if (uuid && strcmp(s->uuid, uuid)) {
				pp = &s->next;
				continue;
			}
			shard_drop_entries(c, st, s);
			if (forget) {
				*pp = s->next;
				cm_free(MEM, s);
			} else {
				pp = &s->next;
			}
		}
		pthread_mutex_unlock(&st->lock);
	}
}

void
nd_reqcache_stats(nd_reqcache *c, const char *uuid, nd_rc_stats *out)
{
	for (int i = 0; i < NSTRIPES; i++) {
		rc_stripe *st = &c->stripes[i];
		pthread_mutex_lock(&st->lock);
		for (rc_shard *s = st->shards; s; s = s->next) {
			if (uuid && strcmp(s->uuid, uuid))
				continue;
			out->memory_bytes += s->bytes;
			out->evictions += s->evictions;
			out->hits += s->hits;
			out->misses += s->misses;
			out->entries += s->entries;
		}
		pthread_mutex_unlock(&st->lock);
	}
}

void
nd_reqcache_free(nd_reqcache *c)
{
	if (!c)
		return;
	nd_reqcache_clear(c, NULL, true);
	for (int i = 0; i < NSTRIPES; i++) {
		cm_free(MEM, c->stripes[i].buckets);
		pthread_mutex_destroy(&c->stripes[i].lock);
	}
	cm_free(MEM, c);
}

bool
nd_reqcache_parse_size(const char *v, uint64_t *bytes)
{
	char *end;
	double n = strtod(v, &end);
	if (end == v || n < 0)
		return false;
	while (*end == ' ')
		end++;
	if (!strcmp(end, "%")) {
		if (n > 100)
			return false;
		long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
		double mem = pages > 0 && psize > 0 ? (double)pages * (double)psize : 1073741824.0;
		*bytes = (uint64_t)(mem * n / 100.0);
		return true;
	}
	double mul = !*end || !strcasecmp(end, "b")      ? 1.0
	             : !strcasecmp(end, "kb") || !strcasecmp(end, "k") ? 1024.0
	             : !strcasecmp(end, "mb") || !strcasecmp(end, "m") ? 1048576.0
	             : !strcasecmp(end, "gb") || !strcasecmp(end, "g") ? 1073741824.0
	                                                               : -1.0;
	if (mul < 0)
		return false;
	*bytes = (uint64_t)(n * mul);
	return true;
}
