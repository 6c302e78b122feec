/* Index templates, ingest pipelines and stored scripts (search templates)
 * as one JSON object, {"index":{..},"component":{..},"legacy":{..},
 * "pipeline":{..},"script":{id: {"lang","source"}}}: the store a solo node
 * keeps in DATA/templates.json and a cluster keeps in its state (the
 * master applies each change). */
#include <cjson/cJSON.h>
#include <string.h>

#include "nd.h"

static const char *const kinds[] = {"index", "component", "legacy", "pipeline", "script"};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

cJSON *
nd_templates_normalize(cJSON *db)
{
	if (!cJSON_IsObject(db)) {
		cJSON_Delete(db);
		db = cJSON_CreateObject();
	}
	for (size_t i = 0; i < NKINDS; i++)
		if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(db, kinds[i]))) {
			cJSON_DeleteItemFromObjectCaseSensitive(db, kinds[i]);
			cJSON_AddObjectToObject(db, kinds[i]);
		}
	return db;
}

cm_err
nd_templates_apply(cJSON *db, const cJSON *op, cm_error *err)
{
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(op, "op");
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(op, "kind");
	const cJSON *nm = cJSON_GetObjectItemCaseSensitive(op, "name");
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(op, "body");
	bool put = cJSON_IsString(o) && !strcmp(o->valuestring, "put");
	if (!cJSON_IsString(o) || !cJSON_IsString(k) || !cJSON_IsString(nm) ||
	    (!put && strcmp(o->valuestring, "delete")) || (put && !cJSON_IsObject(b)))
		return cm_error_set(err, CM_EPARSE, "malformed template change");
	cJSON *set = cJSON_GetObjectItemCaseSensitive(db, k->valuestring);
	if (!cJSON_IsObject(set))
		return cm_error_set(err, CM_EPARSE, "unknown template kind [%s]", k->valuestring);
	cJSON_DeleteItemFromObjectCaseSensitive(set, nm->valuestring);
	if (put)
		cJSON_AddItemToObject(set, nm->valuestring, cJSON_Duplicate(b, true));
	return CM_OK;
}
