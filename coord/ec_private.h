/* coord/ internals: the client, one call to the gateway, base64 and the
 * JSON readers every reply goes through. */
#ifndef EC_PRIVATE_H
#define EC_PRIVATE_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"
#include "ec.h"

#define EC_MEM CM_MEM_COORD

/* A curl easy handle on a multi handle of its own (the multi's poll is what
 * lets a call notice a cancel flag or a watch stop at once). The pair keeps
 * its connections between calls. */
typedef struct ec_conn {
	CURL *easy;
	CURLM *multi;
	struct ec_conn *next;
} ec_conn;

struct ec_client {
	char **endpoints; /* "http://host:port", no trailing slash */
	size_t nendpoints;
	atomic_size_t cur; /* the endpoint that answered last */
	ec_opts o;
	pthread_mutex_t mu; /* idle */
	ec_conn *idle;
	size_t nidle;
};

/* Streaming sink: takes bytes as they arrive; false aborts the transfer. */
typedef bool (*ec_sink_fn)(void *arg, const char *p, size_t n);

typedef struct ec_call {
	const char *path; /* "/v3/kv/range" */
	const char *body;
	uint64_t deadline_ns; /* absolute (cm_now_ns); 0: none (watch) */
	bool once;            /* not resent to another endpoint after sending (txn) */
	bool long_poll;       /* blocks by design (campaign, watch): no attempt timeout */
	const atomic_bool *cancel;
	ec_conn *conn;   /* a held connection (watch), else one from the pool */
	ec_sink_fn sink; /* streaming; else the reply goes to `reply` */
	void *sink_arg;
	/* out */
	cJSON *reply;    /* parsed 200 reply (not with a sink) */
	size_t endpoint; /* index of the endpoint that answered */
} ec_call;

/* Runs the call: tries the endpoints from the last good one, maps transport
 * failures and etcd's error replies to cm_err. On success (CM_OK) call->reply
 * holds the parsed JSON object, the caller's to cJSON_Delete. */
cm_err ec_do(ec_client *c, ec_call *call, cm_error *err);
ec_conn *ec_conn_get(ec_client *c);
void ec_conn_put(ec_client *c, ec_conn *k);
uint64_t ec_deadline(const ec_client *c, uint32_t ms); /* 0 ms: the request timeout */
/* Maps an etcd error reply {"error","message","code"} (or a stream's
 * {"error":{...}}) to a cm_err; CM_OK when j is not one. */
cm_err ec_etcd_error(const cJSON *j, const char *where, cm_error *err);

/* base64 (RFC 4648, padded, as Go's StdEncoding). The result is
 * NUL-terminated, cm_malloc'd with EC_MEM. Decoding fails on anything else. */
char *ec_b64_encode(const void *p, size_t n);
bool ec_b64_decode(const char *s, size_t slen, uint8_t **out, size_t *n);

/* JSON readers. int64s come as strings (and are omitted when 0); absent
 * fields give 0/false and true; a field of the wrong shape gives false. */
bool ec_j_int(const cJSON *o, const char *name, int64_t *v);
bool ec_j_bool(const cJSON *o, const char *name, bool *v);
/* A base64 field: absent is "" (etcd omits empty values). */
bool ec_j_bytes(const cJSON *o, const char *name, uint8_t **out, size_t *n);
bool ec_j_kv(const cJSON *o, ec_kv *kv);            /* mvccpb.KeyValue */
bool ec_j_kvs(const cJSON *arr, ec_kvs *out);       /* appends; arr may be NULL */
bool ec_j_header_rev(const cJSON *o, int64_t *rev); /* o.header.revision */
cm_err ec_bad_reply(cm_error *err, const char *where, const char *what);

/* JSON writers: a base64 string field, an int64 as a string. */
void ec_j_add_b64(cJSON *o, const char *name, const void *p, size_t n);
void ec_j_add_int(cJSON *o, const char *name, int64_t v);
/* key and range_end covering every key that starts with prefix. */
void ec_j_add_prefix(cJSON *o, const char *prefix);
/* Serializes o (and deletes it) into a cm_malloc'd string. */
char *ec_j_print(cJSON *o);

#endif
