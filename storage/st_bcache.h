/* Decompressed stored blocks, shared by every reader in the process.
 *
 * A hit (a search's top hits are often the same docs again) copies 16 KB
 * instead of gathering the frame and running zstd over it. Direct-mapped:
 * ST_BCACHE_SLOTS slots, each with its own mutex (a leaf lock, held only
 * to copy in or out); a block is named by its segment's uid (never reused
 * in a process) and its last doc, so a closed segment's blocks are simply
 * never asked for again and age out. At most ST_BCACHE_SLOTS blocks of at
 * most ST_BCACHE_MAX_RAW bytes are held; the memory is not counted in
 * CM_MEM_STORAGE (it outlives every segment). */
#ifndef ST_BCACHE_H
#define ST_BCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"

#define ST_BCACHE_SLOTS 1024
#define ST_BCACHE_MAX_RAW (64u * 1024) /* larger blocks are not kept */

/* A uid for a segment just opened. */
uint64_t st_bcache_uid(void);
/* Copies block (uid, last) into raw and sets *first; false if absent. */
bool st_bcache_get(uint64_t uid, uint32_t last, cm_buf *raw, uint32_t *first);
/* Keeps a copy of a block just decompressed (replaces its slot's). */
void st_bcache_put(uint64_t uid, uint32_t first, uint32_t last, const void *raw, size_t len);
/* Counters for _nodes/stats: hits, misses. */
void st_bcache_stats(uint64_t *hits, uint64_t *misses);

#endif
