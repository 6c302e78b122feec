/* Update scripts (script/ps.h) on one document, for _update, _bulk update
 * actions and _update_by_query. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <string.h>

#include "co_private.h"

cm_err
co_script_apply(const ps_script *s, const cJSON *params, nd_index *ix, const char *id,
                const st_doc_meta *meta, cJSON **cur, int *op, cm_error *err)
{
	/* ctx over a copy: a script that fails leaves the document untouched */
	cJSON *ctx = cJSON_CreateObject(), *src;
	cJSON_AddStringToObject(ctx, "_index", nd_index_name(ix));
	cJSON_AddStringToObject(ctx, "_type", "_doc");
	cJSON_AddStringToObject(ctx, "_id", id);
	if (meta) {
		cJSON_AddNumberToObject(ctx, "_version", (double)meta->version);
		cJSON_AddNumberToObject(ctx, "_seq_no", (double)meta->seq_no);
		cJSON_AddNumberToObject(ctx, "_primary_term", (double)meta->primary_term);
	}
	cJSON_AddStringToObject(ctx, "op", meta ? "index" : "create");
	cJSON_AddItemToObject(ctx, "_source", cJSON_Duplicate(*cur, true));
	cm_err rc = ps_run(s, ctx, params, err);
	if (!rc) {
		const char *o = cJSON_GetObjectItemCaseSensitive(ctx, "op")->valuestring;
		*op = !strcmp(o, "noop") || !strcmp(o, "none") ? CO_SCRIPT_NOOP
		      : !strcmp(o, "delete")                   ? CO_SCRIPT_DELETE
		                                               : CO_SCRIPT_INDEX;
		src = cJSON_DetachItemFromObjectCaseSensitive(ctx, "_source");
		cJSON_Delete(*cur);
		*cur = src;
	}
	cJSON_Delete(ctx);
	return rc;
}
