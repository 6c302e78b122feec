/* A Painless subset for update scripts (_update, _bulk update,
 * _update_by_query): ctx._source.f = v, +=, -=, *=, /=, ++, --,
 * ctx._source.remove('f'), list add/contains/size/remove, map
 * containsKey/get/put, params.x, local variables (def/int/long/double/
 * String/boolean), if/else, for/while (bounded), comparisons, boolean
 * logic, ternaries, string concatenation, ctx.op = 'noop' | 'delete',
 * null-safe a?.b and a?.m(), the elvis a ?: b, string startsWith/endsWith/equals/
 * toLowerCase/toUpperCase/trim/isEmpty (ASCII case mapping).
 * Values are JSON (cJSON): numbers that are integral behave as longs
 * (5 / 2 == 2). Anything else is refused at compile time. */
#ifndef PS_H
#define PS_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/cm_err.h"

typedef struct cJSON cJSON;
typedef struct ps_script ps_script;

#define PS_MAX_SOURCE 65535  /* ES script.max_size_in_bytes */
#define PS_MAX_STEPS 1000000 /* statements and loop turns per run */
#define PS_MAX_STRING (1u << 20)

/* Compiles source (len bytes). A script that does not parse → CM_EINVAL
 * with type script_exception naming the position ("... at position
 * [N]"); *pos (may be NULL) gets the byte offset. *out is the caller's
 * (ps_free). */
cm_err ps_compile(const char *source, size_t len, ps_script **out, int *pos, cm_error *err);
void ps_free(ps_script *s);

/* Runs s on ctx (a JSON object: "_source" and "op" at least; the script
 * changes them in place) with params (may be NULL). A failure at run time
 * → CM_EINVAL script_exception; ctx may then be half changed, so callers
 * run on a copy. */
cm_err ps_run(const ps_script *s, cJSON *ctx, const cJSON *params, cm_error *err);

/* Runs s as an expression script (bucket_script, bucket_selector): no
 * ctx, params as given; *result (the caller's, cJSON_Delete) is the value
 * of the `return` or of the last expression statement, NULL when none. */
cm_err ps_eval(const ps_script *s, const cJSON *params, cJSON **result, cm_error *err);
/* Runs s on ctx as it is (any JSON object, changed in place, no checks
 * of _source or op: an ingest pipeline's ctx is the document itself).
 * result (may be NULL) gets, as ps_eval's, the value of the `return` or
 * the last expression statement; the caller's, NULL when none. */
cm_err ps_exec(const ps_script *s, cJSON *ctx, const cJSON *params, cJSON **result, cm_error *err);
/* A number that scripts treat as a double even when integral (7.0 / 2 is
 * 3.5), the way ES hands bucket values to scripts. */
cJSON *ps_double(double d);

/* A "script" value of a request ({"source", "lang", "params"} or a bare
 * source string) compiled, and its params (borrowed from v). */
cm_err ps_from_json(const cJSON *v, ps_script **out, const cJSON **params, cm_error *err);

#endif
