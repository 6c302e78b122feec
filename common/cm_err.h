/* Shoal's one error enum. 0 is success. Each code carries the HTTP status
 * and the Elasticsearch error `type` it maps to, so any layer can turn an
 * error into an Elasticsearch-shaped reply without a second table. */
#ifndef CM_ERR_H
#define CM_ERR_H

#include <stddef.h>

/* X(name, http_status, es_type, message) */
#define CM_ERRORS(X)                                                                   \
	X(CM_OK, 200, "ok", "success")                                                     \
	X(CM_ENOMEM, 500, "out_of_memory_error", "out of memory")                          \
	X(CM_EIO, 500, "io_exception", "input/output error")                               \
	X(CM_ECORRUPT, 500, "corrupt_index_exception", "checksum mismatch or bad block")   \
	X(CM_EINVAL, 400, "illegal_argument_exception", "invalid argument")                \
	X(CM_EPARSE, 400, "parsing_exception", "could not parse request")                  \
	X(CM_EMAPPING, 400, "mapper_parsing_exception", "failed to parse field")           \
	X(CM_ENOTFOUND, 404, "resource_not_found_exception", "not found")                  \
	X(CM_ENOINDEX, 404, "index_not_found_exception", "no such index")                  \
	X(CM_EEXISTS, 400, "resource_already_exists_exception", "already exists")          \
	X(CM_ECONFLICT, 409, "version_conflict_engine_exception", "version conflict")      \
	X(CM_ETOOLARGE, 413, "content_too_long_exception", "request body too large")       \
	X(CM_ELIMIT, 400, "illegal_argument_exception", "limit exceeded")                  \
	X(CM_EBUSY, 429, "es_rejected_execution_exception", "rejected: queue full")        \
	X(CM_EUNAVAIL, 503, "unavailable_shards_exception", "shard not available")         \
	X(CM_EMOVED, 503, "unavailable_shards_exception", "primary moved (not applied)")   \
	X(CM_ETIMEDOUT, 504, "timeout_exception", "timed out")                             \
	X(CM_ECLOSED, 500, "already_closed_exception", "closed")                           \
	X(CM_EBADNAME, 400, "invalid_index_name_exception", "invalid index name")          \
	X(CM_EVALIDATE, 400, "action_request_validation_exception", "validation failed")   \
	X(CM_EFULL, 500, "index_full_exception", "map full")                               \
	X(CM_EINTERNAL, 500, "exception", "internal error")                                \
	X(CM_EBLOCKED, 403, "cluster_block_exception", "blocked by an index block")        \
	X(CM_EINDEXCLOSED, 400, "index_closed_exception", "closed")                        \
	X(CM_EAGGEXEC, 500, "aggregation_execution_exception", "aggregation failed")

typedef enum {
#define CM_ERR_ENUM(name, status, type, msg) name,
	CM_ERRORS(CM_ERR_ENUM)
#undef CM_ERR_ENUM
	CM_ERR_COUNT
} cm_err;

int cm_err_status(cm_err e);        /* HTTP status code */
const char *cm_err_type(cm_err e);  /* Elasticsearch error type */
const char *cm_err_msg(cm_err e);   /* static, log-safe message */
const char *cm_err_name(cm_err e);  /* "CM_ENOMEM" */

/* An error that travels with a request. The first error set wins. `reason`
 * may echo user input; it goes to the client, not to logs. */
typedef struct cm_error {
	cm_err code;
	char type_override[64]; /* optional ES type when the table's is too coarse */
	char reason[512];
} cm_error;

/* Sets e if no error is recorded yet; returns code so callers can
 * `return cm_error_set(e, CM_EINVAL, "...")`. e may be NULL. */
cm_err cm_error_set(cm_error *e, cm_err code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, with an explicit ES type such as "version_conflict_engine_exception". */
cm_err cm_error_set_type(cm_error *e, cm_err code, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *cm_error_type(const cm_error *e);
void cm_error_clear(cm_error *e);

#endif
