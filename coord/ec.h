/* A client for etcd v3's JSON gateway (etcd 3.4, /v3/... over HTTP with
 * libcurl): keys and values, transactions, leases, elections and watches,
 * which is what the cluster's master election and membership run on.
 * Keys are C strings; values are bytes. Every call is thread-safe, has a
 * deadline (ec_opts) and tries the next endpoint when one cannot be reached
 * or answers "unavailable". Errors: CM_EUNAVAIL no endpoint answered (the
 * message names those tried), CM_ETIMEDOUT the deadline passed after the
 * request was sent (a write may or may not have been applied), CM_ENOTFOUND
 * no such key, lease or leader, CM_EPARSE a malformed reply, CM_ECLOSED
 * cancelled; etcd's own error replies keep etcd's message. docs/cluster.md. */
#ifndef EC_H
#define EC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_err.h"

typedef struct ec_client ec_client;

typedef struct ec_opts {
	uint32_t request_timeout_ms; /* whole call, every endpoint tried; 0: 5000 */
	uint32_t connect_timeout_ms; /* per endpoint; 0: 1000 */
	/* One endpoint's share of a call that may be resent (not txn): a member
	 * whose raft leader just died can sit on a request for ~7 s, past this
	 * the call moves on to the next member. 0: 2000 (at most the request
	 * timeout); with one endpoint a call waits out the request timeout. */
	uint32_t attempt_timeout_ms;
	uint32_t watch_retry_ms; /* first watch reconnect pause, doubling to 2 s; 0: 100 */
	size_t max_reply_bytes;  /* one reply or watch message; 0: 64 MiB */
} ec_opts;

/* endpoints: "http://127.0.0.1:2379" or "127.0.0.1:2379", copied. o may be
 * NULL. *out is the caller's (ec_close). */
cm_err ec_open(const char *const *endpoints, size_t n, const ec_opts *o, ec_client **out,
               cm_error *err);
/* No call may be in flight and every watch must be stopped. */
void ec_close(ec_client *c);

/* One key. key and value are NUL-terminated (the NUL is not counted) and
 * owned by the struct: ec_kv_free, or by the ec_kvs holding it. */
typedef struct ec_kv {
	char *key;
	size_t key_len;
	uint8_t *value;
	size_t value_len;
	int64_t create_revision, mod_revision, version, lease;
} ec_kv;

typedef struct ec_kvs {
	ec_kv *kv;
	size_t n;
	int64_t count;    /* range: keys in range (even past limit); delete: keys deleted */
	bool more;        /* a limit cut the range */
	int64_t revision; /* header revision of the reply */
} ec_kvs;

void ec_kv_free(ec_kv *kv);
void ec_kvs_free(ec_kvs *r);

/* CM_ENOTFOUND when absent. *out is the caller's (ec_kv_free); revision
 * (may be NULL) gets the header revision either way. */
cm_err ec_get(ec_client *c, const char *key, ec_kv *out, int64_t *revision, cm_error *err);
/* Every key starting with prefix ("" = all), in key order, at most limit
 * (0 = no limit). *out is the caller's (ec_kvs_free). */
cm_err ec_range_prefix(ec_client *c, const char *prefix, size_t limit, ec_kvs *out, cm_error *err);
/* lease 0: none. revision (may be NULL): the revision of the write. */
cm_err ec_put(ec_client *c, const char *key, const void *val, size_t len, int64_t lease,
              int64_t *revision, cm_error *err);
/* deleted (may be NULL): how many keys went; 0 is not an error. */
cm_err ec_delete(ec_client *c, const char *key, int64_t *deleted, cm_error *err);
cm_err ec_delete_prefix(ec_client *c, const char *prefix, int64_t *deleted, cm_error *err);

/* ---- transactions ---- */

typedef enum { EC_CMP_EQ, EC_CMP_NE, EC_CMP_LT, EC_CMP_GT } ec_cmp_op;
typedef enum {
	EC_CMP_CREATE, /* create revision; 0 for an absent key */
	EC_CMP_MOD,    /* mod revision */
	EC_CMP_VERSION,
	EC_CMP_VALUE, /* against value/value_len instead of num */
	EC_CMP_LEASE
} ec_cmp_target;

typedef struct ec_cmp {
	const char *key;
	ec_cmp_target target;
	ec_cmp_op op;
	int64_t num;
	const void *value;
	size_t value_len;
} ec_cmp;

typedef enum {
	EC_OP_PUT,
	EC_OP_DELETE,
	EC_OP_DELETE_PREFIX,
	EC_OP_GET,
	EC_OP_RANGE_PREFIX
} ec_op_type;

typedef struct ec_op {
	ec_op_type type;
	const char *key;   /* or prefix */
	const void *value; /* put */
	size_t value_len;
	int64_t lease; /* put */
} ec_op;

typedef struct ec_txn_result {
	bool succeeded; /* every compare held: the success ops ran */
	int64_t revision;
	ec_kvs *res; /* one per op of the branch that ran (gets, ranges, delete counts) */
	size_t n;
} ec_txn_result;

/* All compares hold -> success ops, else failure ops, atomically. *out is
 * the caller's (ec_txn_result_free). Not retried on another endpoint once
 * sent: CM_EUNAVAIL/CM_ETIMEDOUT then means "may have been applied". */
cm_err ec_txn(ec_client *c, const ec_cmp *cmp, size_t ncmp, const ec_op *ok, size_t nok,
              const ec_op *fail, size_t nfail, ec_txn_result *out, cm_error *err);
void ec_txn_result_free(ec_txn_result *r);

/* Drops history before revision (a revision already compacted is fine). */
cm_err ec_compact(ec_client *c, int64_t revision, cm_error *err);

/* ---- leases ---- */

cm_err ec_lease_grant(ec_client *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl,
                      cm_error *err);
/* One keep-alive. CM_ENOTFOUND: the lease expired or never was. */
cm_err ec_lease_keepalive(ec_client *c, int64_t id, int64_t *ttl_left, cm_error *err);
/* Deletes the lease and its keys; CM_ENOTFOUND when unknown. */
cm_err ec_lease_revoke(ec_client *c, int64_t id, cm_error *err);
/* CM_ENOTFOUND when expired or unknown. granted may be NULL. */
cm_err ec_lease_ttl(ec_client *c, int64_t id, int64_t *ttl_left, int64_t *granted, cm_error *err);

/* ---- elections ---- */

/* What a campaign won: key is "<name>/<lease in hex>", rev its create
 * revision (the leader's term). Strings owned by the struct
 * (ec_leader_key_free). */
typedef struct ec_leader_key {
	char *name, *key;
	int64_t rev, lease;
} ec_leader_key;

void ec_leader_key_free(ec_leader_key *l);
/* Blocks until this lease leads `name`, timeout_ms (0: the request
 * timeout) passes (CM_ETIMEDOUT),
 * or *cancel (may be NULL) turns true (CM_ECLOSED, within ~100 ms); etcd
 * withdraws the candidacy of a campaign that gave up. A lease already
 * campaigning keeps its place. *out is the caller's. */
cm_err ec_campaign(ec_client *c, const char *name, int64_t lease, const void *val, size_t len,
                   uint32_t timeout_ms, const atomic_bool *cancel, ec_leader_key *out,
                   cm_error *err);
/* The current leader's key and value; CM_ENOTFOUND when none. */
cm_err ec_leader(ec_client *c, const char *name, ec_kv *out, cm_error *err);
/* Changes the leader's value; CM_ECONFLICT when l no longer leads. */
cm_err ec_proclaim(ec_client *c, const ec_leader_key *l, const void *val, size_t len,
                   cm_error *err);
cm_err ec_resign(ec_client *c, const ec_leader_key *l, cm_error *err);

/* ---- watches ---- */

typedef enum {
	EC_WATCH_EVENTS,    /* events[0..n) of one or more revisions, in order */
	EC_WATCH_COMPACTED, /* history is gone up to compact_revision: re-read and
	                       watch again; the watch has ended */
} ec_watch_kind;

typedef struct ec_event {
	bool deleted; /* else a put */
	ec_kv kv;     /* a delete carries key and mod_revision only */
} ec_event;

typedef struct ec_watch_msg {
	ec_watch_kind kind;
	int64_t revision; /* header revision; 0 when etcd sent none */
	int64_t compact_revision;
	const ec_event *events; /* borrowed for the callback */
	size_t n;
} ec_watch_msg;

typedef void (*ec_watch_fn)(void *arg, const ec_watch_msg *m);
typedef struct ec_watch ec_watch;

/* Watches every key under prefix from start_revision (0: from now) on a
 * thread of its own, calling fn there; after a lost connection it
 * reconnects (any endpoint) from the last revision delivered + 1, so no
 * event is lost or repeated. *out is the caller's (ec_watch_stop). */
cm_err ec_watch_start(ec_client *c, const char *prefix, int64_t start_revision, ec_watch_fn fn,
                      void *arg, ec_watch **out, cm_error *err);
/* Stops and joins the thread (within ~100 ms); no callback runs after it.
 * Not from inside fn. */
void ec_watch_stop(ec_watch *w);

#endif
