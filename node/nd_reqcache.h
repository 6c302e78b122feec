/* The shard request cache, as Elasticsearch's: encoded shard results of
 * size-0 searches (aggregations, totals, suggestions), keyed by the index,
 * the shard, the generation of the shard's reader and the request's bytes.
 * A newer reader for a shard drops that shard's entries at its next use;
 * the whole cache holds at most a byte budget, least recently used out
 * first. Sixteen stripes, each with its own lock, chosen by (index, shard):
 * no lock is common to every search. */
#ifndef ND_REQCACHE_H
#define ND_REQCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"

typedef struct nd_reqcache nd_reqcache;

typedef struct nd_rc_key {
	const char *uuid; /* the index's uuid */
	uint32_t shard;
	uint64_t gen; /* st_reader_generation of the reader searched */
	const void *req; /* the request's bytes (body and the parameters that matter) */
	size_t req_len;
} nd_rc_key;

typedef struct nd_rc_stats {
	uint64_t memory_bytes, evictions, hits, misses, entries;
} nd_rc_stats;

/* A cache holding at most max_bytes (keys, values and bookkeeping). */
nd_reqcache *nd_reqcache_new(uint64_t max_bytes);
void nd_reqcache_free(nd_reqcache *c);
uint64_t nd_reqcache_limit(const nd_reqcache *c);
/* On a hit, appends the cached value to out and returns true. Counts a hit
 * or a miss for the index. */
bool nd_reqcache_get(nd_reqcache *c, const nd_rc_key *k, cm_buf *out);
/* Stores a copy of val[0..len) under k, unless the shard already has a
 * newer reader, the key is there, or the entry alone exceeds the budget. */
void nd_reqcache_put(nd_reqcache *c, const nd_rc_key *k, const void *val, size_t len);
/* Drops the entries of one index (uuid), or of all (NULL); its hit, miss
 * and eviction counts stay unless forget is set (a deleted index). */
void nd_reqcache_clear(nd_reqcache *c, const char *uuid, bool forget);
/* Figures of one index (uuid), or of the whole cache (NULL), added to *s. */
void nd_reqcache_stats(nd_reqcache *c, const char *uuid, nd_rc_stats *s);

/* indices.requests.cache.size: "1%" of the machine's memory (the default),
 * "512kb", "10mb", a byte count. Returns false when it does not parse. */
bool nd_reqcache_parse_size(const char *v, uint64_t *bytes);

#endif
