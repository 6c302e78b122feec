/* Snapshot repositories (type "fs"): the on-disk format, nothing about
 * shards or the cluster. A repository is a directory:
 *
 *   index-<N>, index.latest  the catalogue: every finished snapshot (name,
 *                            uuid, state, times); N grows by one per change
 *   snap-<uuid>.json         one manifest per snapshot (indices, settings,
 *                            mappings, per-shard file lists with blob keys)
 *   blobs/<kk>/<key>         file contents, keyed by the XXH3-128 of the
 *                            bytes (32 hex digits): a file the repository
 *                            already holds is never written again;
 *                            <key>.zst when written compressed
 *   pending/<name>           a snapshot being taken (its blobs are kept)
 *   tmp/                     partial writes
 *   lock                     flock: exclusive for catalogue changes and
 *                            garbage collection, shared around blob writes
 *
 * Every file is written to a temp file, fsynced, renamed and its directory
 * fsynced; readers never see a partial file. Blobs are verified (size and
 * hash) when written and when read back. All functions are thread-safe; a
 * handle is used by one operation at a time or shared read-only. */
#ifndef SN_H
#define SN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"

typedef struct cJSON cJSON;
typedef struct sn_repo sn_repo;

#define SN_NAME_MAX 256

/* Checks that location lies under path_repo (both resolved with realpath
 * of their existing parts, so ".." and symlinks cannot escape) and writes
 * the resolved location. An empty path_repo refuses every location.
 * Errors are CM_EINVAL typed repository_exception. */
cm_err sn_location_check(const char *path_repo, const char *location, char *resolved, size_t cap,
                         cm_error *err);

/* Opens (creating the directories) the repository at location. max_bps
 * throttles blob writes and reads through this handle (0: unlimited). */
cm_err sn_repo_open(const char *location, uint64_t max_bps, sn_repo **out, cm_error *err);
void sn_repo_close(sn_repo *r);
/* While *flag is true, blob copies through r stop at the next chunk with
 * CM_ECLOSED (a node shutting down). flag outlives r. */
void sn_repo_set_cancel(sn_repo *r, const _Atomic bool *flag);
/* compress: true writes new blobs as zstd frames (blobs/<kk>/<key>.zst,
 * the key still the hash of the file itself) and the catalogue and
 * manifests as zstd; reads take both forms whatever the setting. */
void sn_repo_set_compress(sn_repo *r, bool on);
/* Nanoseconds spent waiting for max_bps, over every repository (the
 * node's throttle_time_in_millis). */
uint64_t sn_throttle_ns(void);
const char *sn_repo_location(const sn_repo *r);

/* "40mb", "512kb", "1gb", "100b", a bare number of bytes; "0" or "-1"
 * means unlimited (0). False when malformed. */
bool sn_parse_bytes(const char *s, uint64_t *out);

/* ---- blobs ---- */
typedef struct sn_blob {
	char key[33]; /* 32 lowercase hex digits of XXH3-128 */
	uint64_t size;
} sn_blob;

/* Stores the file at path (which must not change meanwhile). *written is
 * the bytes written (0 when the repository held the blob already; an
 * existing blob is touched, so a concurrent delete keeps it). */
cm_err sn_blob_put(sn_repo *r, const char *path, sn_blob *out, uint64_t *written, cm_error *err);
/* Copies blob b to dst (created, fsynced), verifying size and hash; name
 * is the file's name for the error (missing, truncated, corrupt). */
cm_err sn_blob_get(sn_repo *r, const sn_blob *b, const char *name, const char *dst, cm_error *err);
/* Reads blob b through and verifies it, same errors as sn_blob_get. */
cm_err sn_blob_check(sn_repo *r, const sn_blob *b, const char *name, cm_error *err);
/* The blob's path in the repository (for tests and tools). */
void sn_blob_path(const sn_repo *r, const char *key, char *out, size_t cap);

/* Manifest file entries: {"name":..,"blob":..,"size":..}. */
cJSON *sn_file_json(const char *name, const sn_blob *b);
bool sn_file_parse(const cJSON *f, char name[SN_NAME_MAX], sn_blob *b);

/* ---- snapshots ---- */
typedef struct sn_entry {
	char name[SN_NAME_MAX];
	char uuid[40];
	char state[16]; /* SUCCESS, PARTIAL, FAILED */
	int64_t start_ms, end_ms;
} sn_entry;

/* Checks a snapshot name as Elasticsearch does (lowercase, no spaces,
 * commas, '#', '/', '\\', '*', '?', '"', '<', '>', '|', not starting with
 * '_' or '-'): CM_EINVAL typed invalid_snapshot_name_exception. */
cm_err sn_name_check(const char *name, cm_error *err);
/* The catalogue (cm_malloc'd NODE array, caller frees), in creation order. */
cm_err sn_catalog_read(sn_repo *r, sn_entry **out, size_t *n, cm_error *err);
/* Starts a snapshot: refuses a name in the catalogue or running
 * (invalid_snapshot_name_exception), writes pending/<name>, makes a uuid. */
cm_err sn_snapshot_begin(sn_repo *r, const char *name, char uuid[40], cm_error *err);
/* Finishes it: writes the manifest, adds e to the catalogue, removes the
 * pending marker. On failure the marker stays (its blobs stay too). */
cm_err sn_snapshot_commit(sn_repo *r, const sn_entry *e, const cJSON *manifest, cm_error *err);
/* Drops the pending marker of a snapshot that will not be committed. */
void sn_snapshot_abort(sn_repo *r, const char *name);
/* Whether a snapshot of that name is pending (being taken somewhere). */
bool sn_snapshot_pending(sn_repo *r, const char *name);
/* The name of the node taking snapshots begun through r (written into
 * their pending markers). */
void sn_repo_set_node(sn_repo *r, const char *node);
/* Whether name is pending, and the node taking it into owner ("" when
 * the marker names none). */
bool sn_snapshot_pending_owner(sn_repo *r, const char *name, char *owner, size_t cap);
/* The manifest (*manifest owned by the caller, cJSON_Delete) and entry of
 * a finished snapshot; CM_ENOTFOUND typed snapshot_missing_exception. */
cm_err sn_snapshot_read(sn_repo *r, const char *name, cJSON **manifest, sn_entry *e, cm_error *err);
/* Removes a snapshot from the catalogue, then every blob no remaining
 * snapshot references, except blobs touched since the oldest pending
 * marker was made (a snapshot being taken may still reference them). */
cm_err sn_snapshot_delete(sn_repo *r, const char *name, uint64_t *blobs_removed,
                          uint64_t *bytes_removed, cm_error *err);

/* ---- wire messages (sn_wire.c; protobuf in proto/shoal.proto) ---- */
enum {
	SN_MSG_REPO = 40,    /* sn_msg_repo -> Ack */
	SN_MSG_SHARD = 41,   /* sn_msg_shard -> Ack(sn_msg_shard_reply) */
	SN_MSG_RESTORE = 42, /* sn_msg_restore -> Ack */
	SN_MSG_VERIFY = 43,  /* sn_msg_verify -> Ack */
};
#define SN_LOC_MAX 4096
#define SN_MAX_FILES 100000

typedef struct sn_msg_repo {
	char name[SN_NAME_MAX], type[32], location[SN_LOC_MAX];
	bool compress, remove;
	uint64_t max_bps;
} sn_msg_repo;

typedef struct sn_file {
	char name[SN_NAME_MAX];
	sn_blob b; /* key "" until uploaded */
} sn_file;

typedef enum { SN_SHARD_PREPARE = 1, SN_SHARD_UPLOAD = 2, SN_SHARD_RELEASE = 3 } sn_shard_op;

typedef struct sn_msg_shard {
	sn_shard_op op;
	char location[SN_LOC_MAX];
	uint64_t max_bps;
	char index[SN_NAME_MAX], index_uuid[64], token[64];
	uint32_t shard, file;
} sn_msg_shard;

typedef struct sn_msg_shard_reply {
	char token[64];
	sn_file *files; /* cm_malloc'd NODE (decode); sn_msg_files_free */
	size_t nfiles;
	uint64_t max_seq_no, written;
} sn_msg_shard_reply;

typedef struct sn_msg_restore {
	char location[SN_LOC_MAX];
	uint64_t max_bps;
	char index[SN_NAME_MAX], index_uuid[64];
	uint32_t shard;
	sn_file *files; /* as above */
	size_t nfiles;
	char source[2 * SN_NAME_MAX]; /* "repository/snapshot" */
} sn_msg_restore;

typedef struct sn_msg_verify {
	char location[SN_LOC_MAX], token[64], node[SN_NAME_MAX];
} sn_msg_verify;

/* Encoders append to out; decoders fill *m (CM_EPARSE on a malformed or
 * oversized message; strings that do not fit are refused, not cut). */
void sn_msg_repo_encode(const sn_msg_repo *m, cm_buf *out);
cm_err sn_msg_repo_decode(const void *p, size_t n, sn_msg_repo *m, cm_error *err);
void sn_msg_shard_encode(const sn_msg_shard *m, cm_buf *out);
cm_err sn_msg_shard_decode(const void *p, size_t n, sn_msg_shard *m, cm_error *err);
void sn_msg_shard_reply_encode(const sn_msg_shard_reply *m, cm_buf *out);
cm_err sn_msg_shard_reply_decode(const void *p, size_t n, sn_msg_shard_reply *m, cm_error *err);
void sn_msg_restore_encode(const sn_msg_restore *m, cm_buf *out);
cm_err sn_msg_restore_decode(const void *p, size_t n, sn_msg_restore *m, cm_error *err);
void sn_msg_verify_encode(const sn_msg_verify *m, cm_buf *out);
cm_err sn_msg_verify_decode(const void *p, size_t n, sn_msg_verify *m, cm_error *err);
void sn_msg_files_free(sn_file *f);

#endif
