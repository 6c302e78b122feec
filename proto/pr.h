/* Wire messages (proto/shoal.proto) to and from engine types. The
 * generated *.pb-c.h is included here and by replication/, which encodes
 * its own typed messages (cluster state, recovery, shard events). Every decode is bounded by
 * the message it reads and fails cleanly on bad bytes. */
#ifndef PR_H
#define PR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../search/sr.h"
#include "../storage/st_shard.h"

struct ProtobufCAllocator;
/* The allocator every protobuf-c unpack goes through, accounting what it
 * decodes to memory tag `tag` (cm_alloc.h). */
struct ProtobufCAllocator *pr_pb_allocator(cm_mem_tag tag);

typedef enum {
	PR_PING = 1,
	PR_PONG = 2,
	PR_SEARCH = 3,
	PR_SEARCH_REPLY = 4,
	PR_BULK = 5,
	PR_BULK_REPLY = 6,
	PR_METADATA = 7,
	PR_ACK = 8,
	PR_ERROR = 9,
	/* replication/ (typed, see proto/shoal.proto) */
	PR_REC_START = 11,
	PR_REC_OPS = 12,
	PR_REC_FILE = 13,
	PR_REC_FINALIZE = 14,
	PR_REC_CANCEL = 15,
	PR_REC_RELEASE = 16,
	PR_SHARD_EVENT = 17,
	/* search contexts (proto/ctx.proto, pr_ctx.c) */
	PR_CTX_OPEN = 30,
	PR_CTX_SEARCH = 31,
	PR_CTX_SEARCH_REPLY = 32,
	PR_CTX_FREE = 33,
	/* tail-tolerant fan-out (node/nd_rank.c) */
	PR_SEARCH_CANCEL = 50,
	/* cluster calls (proto/cluster.proto, pr_cluster.c) */
	PR_STATE_GET = 60,
	PR_META_CHANGE = 61,
	PR_BROADCAST = 62,
	PR_GET = 63,
	PR_SHARD_STATS = 64,
	PR_RECOVERY_ROWS = 65,
	PR_HANDOFF = 66,
	PR_NODE_VIEW = 67,
} pr_type;

/* ---- envelope ---- */

cm_err pr_envelope_pack(const char *cluster, const char *secret, uint32_t type,
                        uint64_t deadline_ms, const void *payload, size_t len, cm_buf *out);
/* Checks cluster name and secret (constant-time) before anything else;
 * a mismatch is CM_EINVAL with a log-safe reason. *payload points into
 * *keep, which the caller frees with pr_envelope_free. */
typedef struct pr_envelope {
	uint32_t type;
	uint64_t deadline_ms;
	const uint8_t *payload;
	size_t len;
	void *keep;
} pr_envelope;
cm_err pr_envelope_unpack(const void *msg, size_t len, const char *cluster, const char *secret,
                          pr_envelope *out, cm_error *err);
void pr_envelope_free(pr_envelope *e);

/* ---- search ---- */

typedef struct pr_search_req {
	char *index, *index_uuid;
	uint32_t *shards;
	size_t nshards;
	char *body; /* NUL-terminated; may be empty */
	size_t body_len;
	uint32_t *ordinals; /* nordinals: 0 (the shard numbers) or nshards */
	size_t nordinals;
	bool typed_keys;
	uint32_t request_cache; /* ?request_cache: 0 not given, 1 false, 2 true */
	bool per_node, count_only;
	uint64_t cancel_id; /* 0: not cancellable */
} pr_search_req;

cm_err pr_search_req_encode(const pr_search_req *r, cm_buf *out);
cm_err pr_search_req_decode(const void *p, size_t n, pr_search_req *out, cm_error *err);
void pr_search_req_free(pr_search_req *r);

/* Results keep everything sr_merger needs: hits with _source, totals,
 * aggregation partials (sr_agg_state_encode), failures. */
cm_err pr_shard_results_encode(sr_shard_result *const *res, size_t n, cm_buf *out);
/* Decodes into a cm_malloc'd array of results (free each with
 * sr_shard_result_free, then the array with cm_free(CM_MEM_NODE, ..)).
 * Aggregation partials are decoded against `aggs` (may be NULL).
 * index/node strings of the results are interned in *strings (freed by
 * the caller with pr_strings_free once the merger is done). */
typedef struct pr_strings pr_strings;
cm_err pr_shard_results_decode(const void *p, size_t n, const sr_agg *aggs, sr_shard_result **out,
                               size_t *nout, pr_strings **strings, cm_error *err);
void pr_strings_free(pr_strings *s);

/* What a data node says about its own work besides the results: its time
 * on each requested shard (µs, request order, at most PR_MAX_SERVICE) and
 * the searches it was serving. */
#define PR_MAX_SERVICE 256
typedef struct pr_reply_meta {
	uint64_t service_us[PR_MAX_SERVICE];
	size_t nservice;
	uint32_t queue;
} pr_reply_meta;
/* As pr_shard_results_encode / _decode, with the reply's meta (may be NULL). */
cm_err pr_shard_results_encode_meta(sr_shard_result *const *res, size_t n,
                                    const pr_reply_meta *meta, cm_buf *out);
cm_err pr_shard_results_decode_meta(const void *p, size_t n, const sr_agg *aggs,
                                    sr_shard_result **out, size_t *nout, pr_strings **strings,
                                    pr_reply_meta *meta, cm_error *err);
/* SearchCancel: the cancel ids of requests to stop. */
cm_err pr_search_cancel_encode(const uint64_t *ids, size_t n, cm_buf *out);
/* Decodes at most cap ids into ids; *n their number. */
cm_err pr_search_cancel_decode(const void *p, size_t len, uint64_t *ids, size_t cap, size_t *n,
                               cm_error *err);

/* ---- bulk ---- */

typedef struct pr_bulk_req {
	char *index, *index_uuid;
	uint32_t shard;
	st_op *ops; /* strings owned by the request */
	size_t nops;
	bool replica;
	uint64_t primary_term;
	uint64_t global_checkpoint; /* replica requests; ST_NO_SEQ = none */
	char *source_node;          /* may be NULL when encoding */
	void *keep;
} pr_bulk_req;

cm_err pr_bulk_req_encode(const pr_bulk_req *r, cm_buf *out);
cm_err pr_bulk_req_decode(const void *p, size_t n, pr_bulk_req *out, cm_error *err);
void pr_bulk_req_free(pr_bulk_req *r);

cm_err pr_bulk_reply_encode(const st_op_result *res, size_t n, cm_err whole, const char *reason,
                            cm_buf *out);
/* The same, carrying the replying copy's local checkpoint (ST_NO_SEQ = none). */
cm_err pr_bulk_reply_encode_ckp(const st_op_result *res, size_t n, cm_err whole,
                                const char *reason, uint64_t local_ckp, cm_buf *out);
/* The whole-batch outcome of a bulk reply and the local checkpoint it
 * carries (ST_NO_SEQ if none), without the per-op results. */
cm_err pr_bulk_reply_whole(const void *p, size_t len, uint64_t *local_ckp, cm_error *err);
/* res must have room for n results; a count mismatch is CM_EPARSE. */
cm_err pr_bulk_reply_decode(const void *p, size_t len, st_op_result *res, size_t n,
                            cm_error *err);

/* ---- metadata, admin, acks ---- */

/* A published cluster state: the whole of it (base_version 0), or what
 * changed since base_version (the global part and the changed indices in
 * state, the indices gone in removed). */
typedef struct pr_metadata {
	uint64_t version, base_version;
	char *state; /* an encoded ClusterState */
	size_t len;
	char **removed;
	size_t nremoved;
} pr_metadata;

cm_err pr_metadata_encode(const pr_metadata *m, cm_buf *out);
/* What it fills is cm_malloc'd (CM_MEM_NODE): pr_metadata_free, also
 * after a failure. */
cm_err pr_metadata_decode(const void *p, size_t n, pr_metadata *out, cm_error *err);
void pr_metadata_free(pr_metadata *m);
/* An Ack carries a cm_error (code 0 = success) and an optional JSON body. */
cm_err pr_ack_encode(const cm_error *e, const char *body, size_t len, cm_buf *out);
/* *body (cm_malloc'd, caller frees) is set only on success, else NULL. */
cm_err pr_ack_decode(const void *p, size_t n, cm_error *e, char **body, size_t *len);

/* ---- cluster calls (proto/cluster.proto, pr_cluster.c) ----
 * Each decode fills a plain struct whose strings and arrays it owns (freed
 * by the matching _free, also after a failed decode); strings are
 * NUL-terminated. Every request is answered by an Ack carrying the reply. */

/* StateGet has no fields (its encoding is empty); the Ack carries the
 * encoded ClusterState (replication/rp_state). */

typedef enum {
	PR_META_CREATE = 1,
	PR_META_DELETE,
	PR_META_PUT_MAPPING,
	PR_META_PUT_SETTINGS,
	PR_META_CLUSTER_SETTINGS,
	PR_META_REROUTE,
	PR_META_ALIASES,
	PR_META_TEMPLATES,
	PR_META_KINDS /* one past the last */
} pr_meta_kind;
/* "create", "delete", "put_mapping", ... (log and error messages). */
const char *pr_meta_kind_name(pr_meta_kind k);

typedef struct pr_meta_change {
	pr_meta_kind kind;
	char **indices;
	size_t nindices;
	char *source; /* the client's document (JSON); "" when none */
	size_t source_len;
	/* PUT_MAPPING of several indices: a mapping per index (nsources ==
	 * nindices), or none (nsources 0) */
	char **sources;
	size_t *source_lens;
	size_t nsources;
} pr_meta_change;
cm_err pr_meta_change_encode(const pr_meta_change *m, cm_buf *out);
cm_err pr_meta_change_decode(const void *p, size_t n, pr_meta_change *out, cm_error *err);
void pr_meta_change_free(pr_meta_change *m);

typedef struct pr_meta_reply {
	bool acknowledged;
	char *index;   /* "" when none */
	char *reroute; /* "" when none */
	size_t reroute_len;
} pr_meta_reply;
cm_err pr_meta_reply_encode(const pr_meta_reply *r, cm_buf *out);
cm_err pr_meta_reply_decode(const void *p, size_t n, pr_meta_reply *out, cm_error *err);
void pr_meta_reply_free(pr_meta_reply *r);

typedef enum { PR_BROADCAST_REFRESH = 1, PR_BROADCAST_FLUSH, PR_BROADCAST_FORCEMERGE } pr_broadcast_op;
const char *pr_broadcast_op_name(pr_broadcast_op op);
cm_err pr_broadcast_encode(pr_broadcast_op op, const char *indices, cm_buf *out);
/* *indices is cm_malloc'd. */
cm_err pr_broadcast_decode(const void *p, size_t n, pr_broadcast_op *op, char **indices,
                           cm_error *err);

typedef struct pr_get_req {
	char *index;
	uint32_t shard;
	char *id;
	size_t id_len;
	bool any_copy; /* asked for by name (_only_nodes): in sync or not */
	bool refreshed; /* ?realtime=false: as of the copy's last refresh */
} pr_get_req;
cm_err pr_get_req_encode(const pr_get_req *g, cm_buf *out);
cm_err pr_get_req_decode(const void *p, size_t n, pr_get_req *out, cm_error *err);
void pr_get_req_free(pr_get_req *g);
/* GetReply: meta and source are the document's (found), else unset. */
cm_err pr_get_reply_encode(bool found, const st_doc_meta *meta, const void *source, size_t len,
                           cm_buf *out);
/* On success appends the source to *source. */
cm_err pr_get_reply_decode(const void *p, size_t n, bool *found, st_doc_meta *meta,
                           cm_buf *source, cm_error *err);

/* ShardStatsReply: per index, one figure per shard. */
typedef struct pr_index_stats {
	char *index;
	size_t nshards;
	uint64_t *docs, *store_bytes, *deleted;
} pr_index_stats;
typedef struct pr_shard_stats {
	pr_index_stats *indices;
	size_t n;
} pr_shard_stats;
cm_err pr_shard_stats_encode(const pr_shard_stats *s, cm_buf *out);
cm_err pr_shard_stats_decode(const void *p, size_t n, pr_shard_stats *out, cm_error *err);
void pr_shard_stats_free(pr_shard_stats *s);

/* RecoveryRowsReply: rows is text, one _cat/recovery line per "\n". */
cm_err pr_recovery_rows_encode(const char *rows, size_t len, cm_buf *out);
/* Appends every row and its "\n" to rows. */
cm_err pr_recovery_rows_decode(const void *p, size_t n, cm_buf *rows, cm_error *err);

typedef struct pr_handoff {
	char *index, *uuid;
	uint32_t shard;
	uint64_t term;
	bool release;
} pr_handoff;
cm_err pr_handoff_encode(const pr_handoff *h, cm_buf *out);
cm_err pr_handoff_decode(const void *p, size_t n, pr_handoff *out, cm_error *err);
void pr_handoff_free(pr_handoff *h);
/* HandoffReply: the node names of the copies that stay in sync. */
cm_err pr_handoff_reply_encode(const char *const *keep, size_t n, cm_buf *out);
/* Calls fn for every name; stops at the first error fn returns. */
cm_err pr_handoff_reply_decode(const void *p, size_t n, void (*fn)(void *arg, const char *name),
                               void *arg, cm_error *err);

cm_err pr_node_view_req_encode(const char *kind, cm_buf *out);
/* *kind is cm_malloc'd. */
cm_err pr_node_view_req_decode(const void *p, size_t n, char **kind, cm_error *err);
cm_err pr_node_view_reply_encode(const char *view, size_t len, cm_buf *out);
/* *view is cm_malloc'd, NUL-terminated. */
cm_err pr_node_view_reply_decode(const void *p, size_t n, char **view, size_t *len,
                                 cm_error *err);

/* ---- search contexts (pr_ctx.c) ---- */

typedef struct pr_ctx_open {
	char *index;
	uint32_t *shards;
	size_t nshards;
	char *body; /* NUL-terminated */
	size_t body_len;
	int64_t keep_alive_ms;
	int kind;
} pr_ctx_open;
cm_err pr_ctx_open_encode(const pr_ctx_open *o, cm_buf *out);
/* Strings and arrays are cm_malloc'd; pr_ctx_open_free releases them. */
cm_err pr_ctx_open_decode(const void *p, size_t n, pr_ctx_open *out, cm_error *err);
void pr_ctx_open_free(pr_ctx_open *o);
cm_err pr_ctx_ids_encode(const uint64_t *ids, size_t n, cm_buf *out);
/* *ids is cm_malloc'd (CM_MEM_NODE). */
cm_err pr_ctx_ids_decode(const void *p, size_t n, uint64_t **ids, size_t *nids, cm_error *err);

typedef struct pr_ctx_page {
	uint64_t id, take;
	uint32_t ordinal;
} pr_ctx_page;
typedef struct pr_ctx_search {
	pr_ctx_page *pages;
	size_t npages;
	uint32_t size;
	int64_t keep_alive_ms;
	bool first, want_body;
	char *body; /* NULL or NUL-terminated */
	size_t body_len;
	int phase; /* 0 query and fetch, 1 query only, 2 fetch `take` */
} pr_ctx_search;
cm_err pr_ctx_search_encode(const pr_ctx_search *s, cm_buf *out);
cm_err pr_ctx_search_decode(const void *p, size_t n, pr_ctx_search *out, cm_error *err);
void pr_ctx_search_free(pr_ctx_search *s);
/* results: an encoded SearchReply (pr_shard_results_encode). */
cm_err pr_ctx_reply_encode(const void *results, size_t rlen, const char *body, size_t blen,
                           cm_buf *out);
/* *results and *body (NUL-terminated, may be empty) are cm_malloc'd. */
cm_err pr_ctx_reply_decode(const void *p, size_t n, uint8_t **results, size_t *rlen,
                           char **body, size_t *blen, cm_error *err);
/* CtxFree: the ids, or all of the node's when all is set. */
cm_err pr_ctx_free_encode(const uint64_t *ids, size_t n, bool all, cm_buf *out);
cm_err pr_ctx_free_decode(const void *p, size_t n, uint64_t **ids, size_t *nids, bool *all,
                          cm_error *err);

#endif
