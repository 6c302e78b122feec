/* Shard internals shared by shard.c, oplog.c and merge_policy.c. */
#ifndef ST_SHARD_PRIVATE_H
#define ST_SHARD_PRIVATE_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "st_shard.h"

/* ---- operation log (oplog.c) ----
 * Key: seq_no as big-endian u64 (cursor order = seq order). Value:
 * u8 type, varint primary_term, varint version, str id, str source,
 * xxh32 checksum. */

/* Appends one record to `out` (reset first). */
void st_oplog_encode(cm_buf *out, st_op_type type, const char *id, size_t id_len,
                     const char *source, size_t source_len, uint64_t primary_term, int64_t version);
/* Decodes a record; op's id/source point into val (valid as long as val).
 * CM_ECORRUPT on a bad checksum or a truncated record. */
cm_err st_oplog_decode(const void *val, size_t len, uint64_t seq_no, st_op *op, int64_t *version);
/* Deletes up to `max` records with seq_no <= upto inside txn; *deleted
 * says how many (fewer than max: nothing left to trim). */
cm_err st_oplog_trim(MDB_txn *txn, MDB_dbi dbi, uint64_t upto, size_t max, size_t *deleted);
/* Calls fn for records with seq_no > from, in order, until it returns
 * nonzero. Records are decoded inside txn. */
cm_err st_oplog_scan(MDB_txn *txn, MDB_dbi dbi, uint64_t from, st_oplog_fn fn, void *ctx);
/* Highest seq_no in the log, 0 when empty (*found false). */
cm_err st_oplog_last(MDB_txn *txn, MDB_dbi dbi, uint64_t *seq, bool *found);

cm_err st_mdb_err(int rc); /* MDB_* / errno → cm_err */

/* ---- merge policy (merge_policy.c) ---- */

/* Tiered policy: segments fall into tiers by size (each tier `factor`
 * times larger than the one below, starting at floor_bytes); the first
 * tier, smallest first, holding at least `factor` segments gives a merge
 * of its `factor` smallest members. Skips entries with busy[i]. Writes the
 * chosen indices to out (capacity n) and returns how many (0 = nothing). */
size_t st_merge_pick_tiered(const uint64_t *bytes, const bool *busy, size_t n, int factor,
                            uint64_t floor_bytes, size_t *out);
/* Force merge to at most max_segments: picks the smallest segments so that
 * merging them into one leaves max_segments; when already at or under the
 * limit, picks a single segment that has deletions (with max_segments 1),
 * else nothing. */
size_t st_merge_pick_forced(const uint64_t *bytes, const bool *has_deletes, size_t n,
                            int max_segments, size_t *out);

#endif
