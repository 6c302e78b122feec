/* Shard internals shared by shard.c, shard_reset.c, oplog.c and merge_policy.c. */
#ifndef ST_SHARD_PRIVATE_H
#define ST_SHARD_PRIVATE_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "st_segment.h"
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

/* ---- directory content (shard_reset.c) ----
 * One per content of the shard directory, shared (refcounted) by every
 * seg_ref opened under it. A reset marks it stale before it replaces the
 * files, so a segment of the old content released later never unlinks a
 * new file that happens to have the same name. */
typedef struct seg_dir {
	atomic_int refs;
	pthread_mutex_t mu; /* orders drops by name against the reset */
	bool stale;
} seg_dir;

seg_dir *st__seg_dir_new(void);
seg_dir *st__seg_dir_ref(seg_dir *d);
void st__seg_dir_release(seg_dir *d);
/* Unlinks path unless d went stale (the file is no longer d's). */
void st__seg_dir_unlink(seg_dir *d, const char *path);
/* Called first by st_shard_open: a directory left by a reset that did
 * not finish (kill -9) is wiped, so it opens empty. */
cm_err st__reset_recover(const char *dir, cm_error *err);

/* ---- the shard (shard.c) ---- */

/* With wmu held: waits until no batch holds an indexing buffer and keeps
 * new batches from taking one until st__bufs_release (a freeze, a reset).
 * Releases wmu while it waits. */
void st__bufs_hold(st_shard *s);
void st__bufs_release(st_shard *s);

/* ---- refcounted pieces a reader shares with the writer ---- */

typedef struct seg_ref {
	st_segment *seg;
	uint64_t gen;
	uint64_t bytes;
	uint32_t max_doc;
	atomic_int refs;
	atomic_bool drop; /* unlink the file when the last reference goes */
	char *path;
	seg_dir *sdir; /* the directory content it belongs to (shard_reset.c) */
} seg_ref;

typedef struct live_ref {
	atomic_int refs;
	uint32_t nbits, count; /* count = live docs */
	uint64_t bits[];
} live_ref;

struct st_reader {
	atomic_int refs;
	size_t n;
	seg_ref **segs;
	live_ref **live; /* NULL entry = all live */
	/* segments with nested docs: the live root docs (what searches see)
	 * and the live nested docs (those whose root is live), owned; NULL
	 * entries elsewhere */
	uint64_t **plive, **nlive;
	uint32_t *pcount;
	uint64_t docs;
	st_mapping *mapping; /* the shard's mapping when the view was published */
	uint64_t gen;        /* process-wide publication number (st_reader_generation) */
	_Atomic(void *) aux; /* st_reader_aux: the search layer's, freed by aux_free */
	void (*aux_free)(void *);
};

/* The writer's view of one segment: `live` takes unrefreshed deletes
 * (copy-on-write while a reader shares it); `pub` is what the current
 * reader sees and what a commit persists. */
typedef struct wseg {
	seg_ref *ref;
	live_ref *live, *pub;
	bool merging;
} wseg;

/* Live version map: every id touched since the last freeze. */
typedef struct vm_entry {
	uint64_t hash; /* 0 = empty slot */
	uint32_t id_off, id_len;
	uint64_t seq_no, term;
	int64_t version;
	uint32_t buf_doc; /* NO_DOC for tombstones */
	uint32_t buf;     /* the indexing buffer holding buf_doc */
	bool deleted;
} vm_entry;

typedef struct vmap {
	vm_entry *vm;
	size_t cap, count;
	cm_buf ids;
} vmap;

/* One indexing buffer: an in-memory segment that one batch at a time
 * fills without the write lock (Lucene's DocumentsWriterPerThread).
 * Doc numbers are handed out under wmu (`reserved`) before the docs are
 * added, so the version map and deletes can name a doc that is still
 * being analyzed. The builder and the sources belong to the batch that
 * holds the buffer `busy`; everything else is wmu's. */
typedef struct membuf {
	st_segbuild *b;
	/* wmu */
	uint64_t *del;
	size_t del_words;
	uint32_t ndel;
	uint32_t reserved; /* doc numbers handed out */
	size_t ram;        /* builder and sources as of the last return */
	bool busy;
	/* the holder while busy, wmu otherwise. Sources for realtime get, in
	 * fixed blocks so they never move or get copied again as the buffer
	 * grows. */
	uint8_t **blocks;
	size_t nblocks, blocks_cap, block_used, src_bytes;
	const char **src_ptr;
	uint32_t *src_len;
	size_t src_cap;
} membuf;

/* The buffers taking new ops and the version map over them (wmu). Idle
 * buffers are taken most recently returned first, so a single writer
 * keeps filling one buffer and a refresh writes one segment for it. */
typedef struct bufset {
	membuf **b;
	size_t n, cap;
	vmap vm;
} bufset;

/* Buffers a refresh is writing without the write lock. Deletes that hit
 * their docs meanwhile go to `late` and become the new segments' deleted
 * bits; `pend` holds every segment's deleted bits as of the freeze, which
 * is what the refresh commits and publishes. */
typedef struct frozen_buf {
	bufset set;
	uint64_t **late; /* per buffer */
	uint64_t *gen;   /* per buffer: its segment's generation */
	int64_t ckp;     /* checkpoint at the freeze: the commit's seq_no */
	uint64_t ops;    /* ops_since_commit at the freeze */
	size_t npend;
	struct seg_ref **pend_ref;
	struct live_ref **pend_live;
} frozen_buf;

typedef struct commit_point {
	uint64_t next_gen;
	int64_t committed_seq; /* all ops <= it are in the listed segments; -1 none */
	int64_t oplog_trimmed; /* ops <= it may be gone from the log; -1 none */
	uint64_t mapping_version, primary_term;
} commit_point;

struct st_shard {
	char *dir;
	st_shard_opts opts;
	size_t max_bufs; /* indexing buffers at most (busy and idle) */
	_Atomic uint32_t nested_limit; /* index.mapping.nested_objects.limit */
	MDB_env *env;
	MDB_dbi db_meta, db_deletes, db_oplog;

	pthread_mutex_t refresh_mu, wmu, rmu, map_mu, sync_mu;
	/* Read-held by users of the env outside refresh_mu and wmu (log syncs,
	 * log readers); write-held while shard.mdb is swapped for a compact
	 * copy. Order: refresh_mu, env_lock, wmu. */
	pthread_rwlock_t env_lock;
	pthread_cond_t sync_cv, merge_cv;

	st_mapping *mapping;
	st_reader *cur;

	/* writer state (wmu) */
	wseg *segs;
	size_t nsegs, segs_cap;
	commit_point cp;
	int64_t max_seq, ckp; /* -1 none */
	int64_t *pending;     /* applied seq_nos above ckp, sorted (replica gaps) */
	size_t npending, pending_cap;
	int64_t log_last;
	uint64_t ops_since_commit;
	int64_t retain_above; /* flush keeps ops > it; INT64_MAX = no marker */
	int64_t gcp;          /* global checkpoint as persisted; -1 none */

	bufset act;      /* takes new ops */
	frozen_buf *frz; /* being written by a refresh, still readable; NULL if none */
	/* wmu: buffers held by batches; a freeze waiting for them to come back
	 * (no buffer is handed out meanwhile); buf_cv signals a return */
	int busy_bufs, holds;
	pthread_cond_t buf_cv;

	/* group commit (sync_mu) */
	atomic_uint_fast64_t commit_ticket;
	uint64_t synced_ticket;
	bool syncing;

	/* merges (wmu). Background merges run on the process's merge workers
	 * (shard.c, "merge scheduler"), one at a time per shard: queued and
	 * busy are the scheduler's (its lock, taken after wmu). */
	bool bg_merges, closing, merge_wanted;
	bool merge_queued, merge_busy;
	struct st_shard *merge_next;
	int merges_running, force_merging;
	bool resetting; /* st_shard_reset_from/wipe in progress: no merge may start */

	atomic_uint_fast64_t n_refresh, n_merge, n_flush, n_syncs;
	uint64_t ticket_base; /* commit_ticket at the last reset (stats count from it) */
	seg_dir *sdir;        /* shared with the seg_refs of the current content */
	cm_buf scratch;
};

#endif
