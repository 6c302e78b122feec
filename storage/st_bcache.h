/* Decompressed stored blocks, shared by every reader in the process.
 *
 * A block is immutable once made and counted by reference: the cache holds
 * one reference, each reader that fetched it another, so a hit (a search's
 * top hits are often the same docs again) costs a lookup, not a copy, and
 * a block a reader holds stays whole when the cache drops it.
 * Direct-mapped: ST_BCACHE_SLOTS slots, each with its own mutex (a leaf
 * lock, held only to take or swap a reference); a block is named by its
 * segment's uid (never reused in a process) and its last doc, so a closed
 * segment's blocks are simply never asked for again and age out. At most
 * ST_BCACHE_SLOTS blocks of at most ST_BCACHE_MAX_RAW bytes are held; the
 * memory is not counted in CM_MEM_STORAGE (it outlives every segment). */
#ifndef ST_BCACHE_H
#define ST_BCACHE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define ST_BCACHE_SLOTS 1024
#define ST_BCACHE_MAX_RAW (64u * 1024) /* larger blocks are not kept */

/* A block's raw bytes: docs first..last. */
typedef struct st_block {
	_Atomic uint32_t refs;
	uint32_t first, last;
	size_t len;
	uint8_t data[];
} st_block;

/* A block of room for cap bytes, one reference (the caller's); NULL when
 * out of memory. */
st_block *st_block_new(size_t cap);
void st_block_ref(st_block *b);
void st_block_unref(st_block *b);

/* A uid for a segment just opened. */
uint64_t st_bcache_uid(void);
/* Block (uid, last) with a reference for the caller; NULL if absent. */
st_block *st_bcache_get(uint64_t uid, uint32_t last);
/* Keeps b, just filled, under (uid, b->last) (the cache takes a reference
 * of its own; the slot's former block is dropped). */
void st_bcache_put(uint64_t uid, st_block *b);
/* Counters for _nodes/stats: hits, misses. */
void st_bcache_stats(uint64_t *hits, uint64_t *misses);

#endif
