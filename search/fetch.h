/* Private to search/: the fields a hit returns besides _source — "fields"
 * (values read from _source the way the mapping reads them) and
 * "docvalue_fields" (the same values in doc-value form: sorted, keywords
 * deduplicated, floats widened). */
#ifndef SR_FETCH_H
#define SR_FETCH_H

#include "../common/cm_err.h"
#include "../storage/st_types.h"
#include "sr.h"

/* Parses the "fields" or "docvalue_fields" array of a search body (key
 * names it in errors): strings or {"field", "format", "include_unmapped"}
 * objects. Appends to *out (owned by the request). */
cm_err sr_fetch_parse(const cJSON *v, const char *key, sr_fetch_field **out, size_t *n,
                      cm_error *err);
void sr_fetch_free(sr_fetch_field *f, size_t n);
/* Does req ask for values that are read from _source? */
bool sr_fetch_wanted(const sr_request *req);
/* CM_EINVAL when a docvalue_fields entry names a field without doc values
 * (text, doc_values: false) under m, when "fields" are asked of an index
 * (named in the message) whose _source is disabled, or give a "format" to
 * a field that takes none: checked on every shard before the query runs,
 * so all of them refuse alike. */
cm_err sr_fetch_check(const st_mapping *m, const sr_request *req, const char *index, cm_error *err);
/* The hit's "fields" object for the document src (its whole _source)
 * under mapping m: *out a new JSON object text (cm_free CM_MEM_SEARCH),
 * or NULL when no requested field has a value. */
cm_err sr_fetch_render(const st_mapping *m, const sr_request *req, const char *src, size_t len,
                       char **out, size_t *out_len, cm_error *err);

#endif
