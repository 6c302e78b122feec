/* Write rules shared by the document APIs and _bulk. */
#ifndef CO_DOC_H
#define CO_DOC_H

#include "co_private.h"

enum { CO_REFRESH_NONE, CO_REFRESH_TRUE, CO_REFRESH_WAIT_FOR };

typedef struct co_write_opts {
	bool create;
	int refresh;
	uint64_t if_seq_no; /* ST_NO_SEQ = none */
	uint64_t if_primary_term;
	int64_t version;    /* external version, with has_version */
	bool has_version;   /* version_type=external(_gte): version is set, 0 included */
	bool version_gte;   /* version_type=external_gte: an equal version is accepted */
} co_write_opts;

/* Validates op_type/version/version_type/if_seq_no/if_primary_term/refresh
 * (each may be NULL) the way ES does. */
cm_err co_write_opts_parse(const char *op_type, const char *version, const char *version_type,
                           const char *if_seq_no, const char *if_primary_term,
                           const char *refresh, co_write_opts *w, cm_error *err);
bool co_id_check(const char *id, size_t len, cm_error *err);
/* Prepares (dynamic mapping) and applies one op; maps a failed result to err. */
cm_err co_doc_write(nd_index *ix, st_op *op, const char *routing, size_t routing_len,
                    const nd_req_opts *o, st_op_result *res, cm_error *err);
/* What request r asks of its cluster calls: its ?timeout and ?preference
 * (borrowed from r). */
nd_req_opts co_req_opts(co_req *r);
const char *co_result_name(st_op_result_kind k);
/* {"_index","_type","_id","_version","result","_shards","_seq_no","_primary_term"} */
cJSON *co_write_result_json(nd_index *ix, const char *id, size_t id_len, const st_op_result *res,
                            bool forced_refresh);
/* The same object written straight into b, with `status` last when it is
 * not 0 (a _bulk item: no JSON tree per item). */
void co_write_result_put(cm_buf *b, nd_index *ix, const char *id, size_t id_len,
                         const st_op_result *res, bool forced_refresh, int status);
/* Refreshes for refresh=true|wait_for; true when it was a forced refresh. */
bool co_refresh_after(nd_index *ix, int mode);
/* A _source value: parsed when pretty/filter_path need it, else raw. */
cJSON *co_source_item(const char *src, size_t len, bool parsed);

/* The _update logic (doc merge, upsert, doc_as_upsert, detect_noop,
 * retries on conflict); res->result is NOOP when nothing changed. */
cm_err co_update_doc(nd_index *ix, const char *id, const char *routing, const cJSON *body,
                     const co_write_opts *w, long retries, const nd_req_opts *o,
                     st_op_result *res, cm_error *err);
/* The same; *final (may be NULL) gets the document's source as written
 * (or as it stands for a noop), empty when deleted. */
cm_err co_update_doc_src(nd_index *ix, const char *id, const char *routing, const cJSON *body,
                         const co_write_opts *w, long retries, const nd_req_opts *o,
                         st_op_result *res, cm_buf *final, cm_error *err);
/* What an update returns of its document ("get"): _source given as a
 * boolean, a list or pattern string, or {"includes":..,"excludes":..}.
 * fetch false: no "get". incl/excl are comma-separated, owned. */
typedef struct co_src_spec {
	bool fetch;
	char *incl, *excl;
} co_src_spec;
/* Reads a _source value into s (replacing what it held); false when it
 * is not one of those shapes. */
bool co_src_spec_json(const cJSON *v, co_src_spec *s);
void co_src_spec_free(co_src_spec *s);
/* Adds "get":{"_seq_no","_primary_term","found":true,"_source"} to j. */
void co_update_get_json(cJSON *j, const st_op_result *res, const char *src, size_t len,
                        const co_src_spec *s);

#endif
