/* A shard replica: a directory holding shard.mdb (commit point, deletes,
 * operation log, checkpoints) and immutable segment files.
 *
 *   data/<index-uuid>/<shard>/shard.mdb
 *   data/<index-uuid>/<shard>/seg-<generation>.mdb
 *
 * Writes are logged (one synced LMDB transaction per batch, shared across
 * concurrent callers) before they are applied to the indexing buffer; a
 * refresh turns the buffer into a segment and commits a new segment list
 * atomically. On open, the log above the commit point is replayed, so an
 * acknowledged operation survives kill -9. All functions are thread-safe. */
#ifndef ST_SHARD_H
#define ST_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../common/cm_sys.h"
#include "st_segment.h"
#include "st_types.h"

typedef struct st_shard st_shard;

typedef struct st_shard_opts {
	size_t indexing_max_ram_mb; /* buffer budget; a refresh is forced past it (default 64) */
	cm_pool *merge_pool;        /* shared pool for merges; NULL = shard makes none, merges inline */
	/* Shared pool a large batch spreads its parsing and analysis over,
	 * each part into an indexing buffer of its own; it also bounds the
	 * buffers one shard fills at once (its threads + 1). NULL: each
	 * caller's batch runs on the caller's thread alone. */
	cm_pool *index_pool;
	/* A batch is split into parts of at least this many ops (0: 64). */
	uint32_t index_part_ops;
	bool background_merges;     /* tiered merge policy after refreshes (default true) */
	int merge_factor;           /* segments per tier before merging (default 10) */
	/* A copy of a replicated shard (default false): until the primary has
	 * told it a global checkpoint, no flush or refresh trims its log (see
	 * st_shard_set_global_checkpoint). */
	bool replicated;
	/* index.mapping.nested_objects.limit (0: ST_NESTED_OBJECTS_LIMIT) */
	uint32_t nested_objects_limit;
} st_shard_opts;

void st_shard_opts_default(st_shard_opts *o);

/* Opens or creates the shard at dir. Partial segment files and files no
 * commit point references are removed; the log above the last commit is
 * replayed into the buffer (not yet searchable until refresh). */
cm_err st_shard_open(const char *dir, const st_mapping *m, const st_shard_opts *o,
                     st_shard **out, cm_error *err);
void st_shard_close(st_shard *s);
/* Newer mapping version for documents applied from now on. */
void st_shard_set_mapping(st_shard *s, const st_mapping *m);
/* index.mapping.nested_objects.limit for documents parsed from now on
 * (0: the default). */
void st_shard_set_nested_objects_limit(st_shard *s, uint32_t limit);

typedef enum { ST_OP_INDEX, ST_OP_DELETE } st_op_type;

typedef enum {
	ST_RESULT_CREATED,
	ST_RESULT_UPDATED,
	ST_RESULT_DELETED,
	ST_RESULT_NOT_FOUND,
	ST_RESULT_NOOP,
} st_op_result_kind;

#define ST_NO_SEQ UINT64_MAX

typedef struct st_op {
	st_op_type type;
	const char *id;
	size_t id_len;
	const char *source; /* INDEX: _source JSON */
	size_t source_len;
	/* Replication: set by the primary; ST_NO_SEQ lets this shard assign the
	 * next seq_no (primary / solo). A replica applying an op whose seq_no it
	 * already has skips it (idempotent). */
	uint64_t seq_no;
	uint64_t primary_term;
	/* With seq_no set, `version` below is the version the primary assigned
	 * (0: computed here as internal versioning would). */
	/* Conditions, checked before anything is logged (409 on mismatch). */
	uint64_t if_seq_no;       /* ST_NO_SEQ = none */
	uint64_t if_primary_term; /* with if_seq_no */
	int64_t version;          /* with has_version: the version to write */
	/* version is set, 0 included: version_type=external(_gte) on a primary,
	 * the primary's version on a replica (without it, 0: computed here) */
	bool has_version;
	bool create_only;         /* op_type=create: 409 if the id exists */
	bool version_gte;         /* version_type=external_gte: `version` may equal the current */
} st_op;

typedef struct st_op_result {
	cm_err err;
	char reason[256];
	st_op_result_kind result;
	uint64_t seq_no, primary_term;
	int64_t version;
} st_op_result;

/* Applies a batch. Each op succeeds or fails on its own (res[i].err);
 * successful ones are logged durably in one transaction before this
 * returns. Returns CM_OK unless the whole batch failed (e.g. I/O). A doc
 * that fails to parse under the mapping gets CM_EMAPPING. */
cm_err st_shard_apply(st_shard *s, const st_op *ops, size_t n, st_op_result *res);

/* Realtime get (sees unrefreshed writes). CM_ENOTFOUND if absent. */
typedef struct st_doc_meta {
	uint64_t seq_no, primary_term;
	int64_t version;
} st_doc_meta;
cm_err st_shard_get(st_shard *s, const char *id, size_t len, st_doc_meta *meta, cm_buf *source);
/* The same as of the last refresh (?realtime=false): what a search sees,
 * not the writes buffered since. */
cm_err st_shard_get_refreshed(st_shard *s, const char *id, size_t len, st_doc_meta *meta,
                              cm_buf *source);

cm_err st_shard_refresh(st_shard *s);
/* Makes segments durable and trims the log. Log trimming (here, and the
 * automatic trim a refresh does once many committed ops pile up) keeps every
 * op with seq_no > min(committed seq_no, global checkpoint, retention
 * marker). With no global checkpoint ever set, the gcp term is dropped from
 * the min for a solo shard, and for a `replicated` shard nothing is trimmed
 * at all. So a copy can always read its own log from its persisted global
 * checkpoint, also after a restart. */
cm_err st_shard_flush(st_shard *s);
cm_err st_shard_force_merge(st_shard *s, int max_segments);

/* A point-in-time view for searching: segments plus their live-doc
 * bitsets. Holds references; release when done. */
typedef struct st_reader st_reader;
st_reader *st_shard_reader(st_shard *s);
void st_reader_release(st_reader *r);
size_t st_reader_nsegments(const st_reader *r);
st_segment *st_reader_segment(const st_reader *r, size_t i);
const uint64_t *st_reader_live(const st_reader *r, size_t i); /* NULL = all live */
uint32_t st_reader_live_count(const st_reader *r, size_t i);
uint64_t st_reader_doc_count(const st_reader *r);            /* live docs */
/* st_reader_live and the counts above cover root documents only: a
 * segment's hidden nested docs are left out of them. This is the bitset
 * of its live nested docs (those whose root is live), NULL when it has
 * none. */
const uint64_t *st_reader_nested_live(const st_reader *r, size_t i);
/* The shard's mapping as of the view (borrowed, lives as long as r): lets
 * a shard whose segments lack a mapped field still treat it as mapped. */
const st_mapping *st_reader_mapping(const st_reader *r);
/* A number no other reader of this process has had, growing with each
 * published view (a refresh, merge or delete makes a new one): what keys a
 * cache of results over the view. */
uint64_t st_reader_generation(const st_reader *r);
/* What a layer above keeps with a view because the view never changes
 * (search: its field statistics), made by the first search that wants it
 * and freed with the view; NULL until then. */
void *st_reader_aux(const st_reader *r);
/* Keeps aux (freed by free_aux when the view goes) unless another thread
 * kept one first: returns the one kept; when it is not aux, the caller
 * frees its own. Every aux of a process is of one kind. */
void *st_reader_aux_keep(const st_reader *r, void *aux, void (*free_aux)(void *));

typedef struct st_shard_stats {
	uint64_t docs, deleted_docs, segments;
	uint64_t store_bytes;
	uint64_t buffered_docs;
	uint64_t max_seq_no, local_checkpoint, committed_seq_no;
	uint64_t global_checkpoint; /* as persisted; ST_NO_SEQ = none set (like the others) */
	uint64_t primary_term;
	uint64_t refreshes, merges, flushes;
	uint64_t log_batches, log_syncs; /* group commit: syncs shared by batches */
	/* indexing buffers taking ops, and the bytes they and any being
	 * written by a refresh hold (what the memory budget counts) */
	uint64_t indexing_buffers, indexing_buffer_bytes;
} st_shard_stats;
void st_shard_stats_get(st_shard *s, st_shard_stats *out);
/* Whether s holds nothing: no segment, no buffered document, no operation
 * ever (cheaper than st_shard_stats_get: no file is looked at). */
bool st_shard_is_empty(st_shard *s);

/* Operation log access for replication: ops with seq_no > from, in order,
 * until fn returns nonzero. CM_ENOTFOUND if the log was trimmed past from.
 * Every op this copy processed is there, including those a replica found
 * stale (ST_RESULT_NOOP above its checkpoint), each with the type, id,
 * source, primary_term and version it arrived with. The op's pointers are
 * valid during the call only. */
typedef int (*st_oplog_fn)(void *ctx, const st_op *op, int64_t version);
cm_err st_shard_oplog_read(st_shard *s, uint64_t from, st_oplog_fn fn, void *ctx);
/* Persists the new term; ops this shard numbers from now on carry it. */
void st_shard_set_primary_term(st_shard *s, uint64_t term);
/* Retention marker: flushes keep log ops with seq_no > keep_above (e.g. what
 * a recovering replica still needs); ST_NO_SEQ removes the marker. */
void st_shard_set_oplog_retention(st_shard *s, uint64_t keep_above);
/* Global checkpoint from the primary: every op <= gcp is on every in-sync
 * copy. Stored as min(gcp, this copy's local checkpoint) at the time of the
 * call, and only ever raised (a lower or equal value, or ST_NO_SEQ, is a
 * no-op returning CM_OK). Written to shard.mdb in its own transaction
 * without a sync: the next log sync or commit makes it durable, and a trim
 * is only ever committed after the gcp that allowed it. Reloaded on open.
 * CM_EINVAL for a value above INT64_MAX; I/O errors as cm_err. */
cm_err st_shard_set_global_checkpoint(st_shard *s, uint64_t gcp);
/* The global checkpoint as set (ST_NO_SEQ: none): a cheap read. */
uint64_t st_shard_global_checkpoint(st_shard *s);

/* Snapshot for file-based recovery. Flushes, then creates dst_dir (it must
 * not exist: CM_EEXISTS; its parent is created if missing) as an openable
 * shard directory holding this shard's last commit plus its operation log:
 * every segment file the commit lists is hard-linked (copied when dst_dir
 * is on another file system), which also pins it against a merge deleting
 * the original, and shard.mdb is copied (compacted) from one LMDB read
 * transaction. Commits wait while the links and the copy are made, so the
 * commit point and the file list agree; indexing and searches go on.
 * st_shard_open(dst_dir) gives the same docs, versions, seq_nos, primary
 * term and checkpoints, replaying the log above the commit. Nothing in the
 * files depends on the directory's path, so the files may be moved to
 * another node. *max_seq_no = the highest seq_no the copy holds (commit or
 * log; ST_NO_SEQ when none): every op acknowledged before the call is in
 * it, and on a primary every op <= *max_seq_no is. On failure dst_dir is
 * removed again; err says why. */
cm_err st_shard_snapshot(st_shard *s, const char *dst_dir, uint64_t *max_seq_no, cm_error *err);

/* Regular files of a shard directory, sorted by name, without LMDB lock
 * files (`*-lock`) and partial files (`*.tmp`): what to send to another
 * node after st_shard_snapshot. *names is a cm_malloc'd (CM_MEM_STORAGE)
 * array of cm_malloc'd basenames; the caller frees it with
 * st_shard_dir_files_free. CM_ENOTFOUND if dir does not exist. */
cm_err st_shard_dir_files(const char *dir, char ***names, size_t *n);
void st_shard_dir_files_free(char **names, size_t n);

/* The shard's current mapping, referenced (caller unrefs). It can be ahead
 * of the one last set when documents brought dynamic fields the caller had
 * not merged yet. */
st_mapping *st_shard_mapping(st_shard *s);

/* In-place reset (shard_reset.c), for file-based recovery and rollback:
 * replaces the whole content of s (same handle, same directory) with the
 * shard directory src_dir, e.g. a st_shard_snapshot copied from another
 * node. src_dir must be on s's file system and is consumed: its files are
 * moved in (the directory itself is removed when nothing else is left in
 * it). The copy is first opened on its own as a restart would (a bad copy
 * fails here and s is untouched). Afterwards everything observable (docs,
 * versions, seq_nos, max seq_no, checkpoints, primary term, stats, the log
 * for st_shard_oplog_read) equals what st_shard_open(src_dir) would give,
 * the log above the copy's commit replayed; the activity counters (refreshes,
 * merges, flushes, log batches and syncs) start again from 0 and no retention
 * marker is set. The mapping stays s's own (plus dynamic fields the replay
 * brought). Concurrent calls on s wait for the reset (merges in flight are
 * waited for); readers taken before keep reading the old content until
 * released. Crash safety: a RESETTING marker is durable before the first old
 * file goes and is removed once the new files are in place, and
 * st_shard_open wipes a directory holding it, so kill -9 at any point leaves
 * the old content, the new content, or an empty shard (a copy being reset is
 * not in the in-sync set and recovers again). Once the old content was
 * dropped, an I/O error leaves s empty and is returned (err says why). */
cm_err st_shard_reset_from(st_shard *s, const char *src_dir, cm_error *err);
/* Resets s to an empty shard (primary term 1, no checkpoints), same rules
 * as st_shard_reset_from. */
cm_err st_shard_wipe(st_shard *s, cm_error *err);

#endif
