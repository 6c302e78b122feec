/* Index templates: composable (_index_template, built of
 * _component_template parts, the highest priority match wins) and legacy
 * (_template, every match merged by order). A new index (PUT, or created
 * by its first write) gets its settings, mappings and aliases from them,
 * under what the request itself gives.
 *
 * A solo node keeps its templates in DATA/templates.json. A cluster keeps
 * them in the cluster state (a change goes through the master, so a node
 * that joins later has them too); indices are created with the effective
 * body computed where the request arrived, so every copy of the cluster
 * state carries the same settings.
 *
 * Stored scripts (PUT /_scripts/{id}: mustache search templates) live in
 * the same store under "script", so they travel the same way. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "../storage/st_types.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define TEMPLATES_MAX (16u << 20)

static pthread_mutex_t tpl_lock = PTHREAD_MUTEX_INITIALIZER;
static cJSON *tpl_db; /* {"index":{..},"component":{..},"legacy":{..}} */


static void
db_path(nd_node *n, char *path, size_t cap)
{
	snprintf(path, cap, "%s/templates.json", nd_data_dir(n));
}

/* The store; caller holds tpl_lock. A solo node loads its file on first
 * use; a cluster node reads the cluster state's, again whenever the
 * state changed. */
static cJSON *
db(nd_node *n)
{
	static uint64_t seen = UINT64_MAX; /* the state version tpl_db was read at */
	nd_cluster *cl = nd_cluster_of(n);
	if (cl) {
		char *t = nd_cluster_templates(cl, &seen);
		if (t) {
			cJSON_Delete(tpl_db);
			tpl_db = nd_templates_normalize(cJSON_Parse(t));
			cm_free(CM_MEM_NODE, t);
		}
		if (!tpl_db)
			tpl_db = nd_templates_normalize(NULL);
		return tpl_db;
	}
	if (tpl_db)
		return tpl_db;
	char path[1200], *text = NULL;
	size_t len;
	db_path(n, path, sizeof(path));
	if (cm_file_read(path, TEMPLATES_MAX, &text, &len) == CM_OK) {
		tpl_db = cJSON_ParseWithLength(text, len);
		cm_free(CM_MEM_COMMON, text);
	}
	tpl_db = nd_templates_normalize(tpl_db);
	return tpl_db;
}

static cm_err
db_save(nd_node *n)
{
	char path[1200], *text = cJSON_PrintUnformatted(tpl_db);
	if (!text)
		return CM_ENOMEM;
	db_path(n, path, sizeof(path));
	cm_err rc = cm_file_write_atomic(path, text, strlen(text));
	cJSON_free(text);
	return rc;
}

/* Applies one change {"op":"put"|"delete","kind","name","body"} to the
 * store here and persists it; nothing changes when it cannot be saved. */
static cm_err
apply_op(nd_node *n, const cJSON *op, cm_error *err)
{
	pthread_mutex_lock(&tpl_lock);
	cJSON *cur = db(n), *next = cJSON_Duplicate(cur, true);
	cm_err rc = nd_templates_apply(next, op, err);
	if (!rc) {
		tpl_db = next;
		rc = db_save(n);
		tpl_db = cur;
		if (rc)
			rc = cm_error_set(err, rc, "cannot persist the templates: %s", cm_err_msg(rc));
	}
	if (rc) {
		cJSON_Delete(next);
	} else {
		cJSON_Delete(cur);
		tpl_db = next;
	}
	pthread_mutex_unlock(&tpl_lock);
	return rc;
}

cJSON *
co_template_export(nd_node *n)
{
	pthread_mutex_lock(&tpl_lock);
	cJSON *j = cJSON_Duplicate(db(n), true);
	pthread_mutex_unlock(&tpl_lock);
	return j;
}

cm_err
co_store_apply(nd_node *n, const cJSON *op, cm_error *err)
{
	nd_cluster *cl = nd_cluster_of(n);
	if (!cl)
		return apply_op(n, op, err);
	/* through the master, into the cluster state */
	char *text = cJSON_PrintUnformatted(op), *reply = NULL;
	cm_err rc = nd_cluster_meta(cl, ND_META_TEMPLATES, "", text, &reply, err);
	cJSON_free(text);
	cm_free(CM_MEM_NODE, reply);
	return rc;
}

cm_err
co_template_import(nd_node *n, const cJSON *all, cm_error *err)
{
	/* components first: the composable templates name them */
	static const char *const kinds[] = {"component", "legacy", "index", "pipeline", "script"};
	cm_err rc = CM_OK;
	for (int k = 0; k < 5 && !rc; k++) {
		const cJSON *t;
		cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(all, kinds[k]))
		{
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "op", "put");
			cJSON_AddStringToObject(o, "kind", kinds[k]);
			cJSON_AddStringToObject(o, "name", t->string);
			cJSON_AddItemToObject(o, "body", cJSON_Duplicate(t, true));
			rc = co_store_apply(n, o, err);
			cJSON_Delete(o);
			if (rc)
				break;
		}
	}
	return rc;
}

/* On a solo node here, into its file; on a cluster through the master,
 * into the cluster state (acknowledged is false when a node did not apply
 * it in time). */
void
co_store_change(co_req *r, const char *op, const char *kind, const char *name, const cJSON *body)
{
	cJSON *o = cJSON_CreateObject();
	cm_error err;
	cm_error_clear(&err);
	cJSON_AddStringToObject(o, "op", op);
	cJSON_AddStringToObject(o, "kind", kind);
	cJSON_AddStringToObject(o, "name", name);
	if (body)
		cJSON_AddItemToObject(o, "body", cJSON_Duplicate(body, true));
	if (co_cluster_admin(r, ND_META_TEMPLATES, "", o)) {
		cJSON_Delete(o);
		return;
	}
	cm_err rc = apply_op(r->node, o, &err);
	cJSON_Delete(o);
	if (rc) {
		co_reply_error(r, &err, NULL);
		return;
	}
	cJSON *j = cJSON_CreateObject();
	cJSON_AddBoolToObject(j, "acknowledged", true);
	co_reply_json(r, 200, j);
}

cJSON *
co_store_get(nd_node *n, const char *kind)
{
	pthread_mutex_lock(&tpl_lock);
	cJSON *j = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(db(n), kind), true);
	pthread_mutex_unlock(&tpl_lock);
	return j ? j : cJSON_CreateObject();
}

/* ---- validation ---- */

static const char *
kind_of(co_req *r)
{
	const char *s = co_seg(r, 0);
	return !strcmp(s, "_index_template")       ? "index"
	       : !strcmp(s, "_component_template") ? "component"
	                                           : "legacy";
}

/* {"settings","mappings","aliases"} parts: objects, a mapping that
 * parses. */
static cm_err
check_parts(const cJSON *t, const char *what, cm_error *err)
{
	for (const cJSON *c = t ? t->child : NULL; c; c = c->next) {
		if (strcmp(c->string, "settings") && strcmp(c->string, "mappings") &&
		    strcmp(c->string, "aliases"))
			return cm_error_set(err, CM_EPARSE, "[%s] unknown field [%s]", what,
			                    c->string);
		if (!cJSON_IsObject(c))
			return cm_error_set(err, CM_EPARSE, "[%s.%s] must be an object", what,
			                    c->string);
		if (!strcmp(c->string, "mappings")) {
			/* a template's mapping may name the analyzers of its settings */
			const cJSON *set = cJSON_GetObjectItemCaseSensitive(t, "settings");
			const cJSON *aj = cJSON_GetObjectItemCaseSensitive(set, "analysis");
			const cJSON *ij = cJSON_GetObjectItemCaseSensitive(set, "index");
			if (!aj)
				aj = cJSON_GetObjectItemCaseSensitive(ij, "analysis");
			st_analysis *an = NULL;
			cm_err rc = st_analysis_parse(cJSON_IsObject(aj) ? aj : NULL, INT32_MAX, INT32_MAX,
			                              &an, err);
			if (rc)
				return rc;
			st_mapping *m = NULL;
			rc = st_mapping_from_json_an(c, an, &m, err);
			st_analysis_unref(an);
			if (m)
				st_mapping_unref(m);
			if (rc)
				return rc;
		}
	}
	return CM_OK;
}

static cm_err
check_patterns(const cJSON *p, cm_error *err)
{
	if (cJSON_IsString(p) && p->valuestring[0])
		return CM_OK;
	if (!cJSON_IsArray(p) || !cJSON_GetArraySize(p))
		return cm_error_set(err, CM_EVALIDATE,
		                    "Validation Failed: 1: index patterns are missing;");
	for (const cJSON *e = p->child; e; e = e->next)
		if (!cJSON_IsString(e) || !e->valuestring[0])
			return cm_error_set(err, CM_EPARSE, "[index_patterns] must be strings");
	return CM_OK;
}

static bool
patterns_match(const cJSON *p, const char *index)
{
	if (cJSON_IsString(p))
		return cm_glob(p->valuestring, index);
	for (const cJSON *e = p ? p->child : NULL; e; e = e->next)
		if (cJSON_IsString(e) && cm_glob(e->valuestring, index))
			return true;
	return false;
}

/* Two pattern sets that could match one name: a pattern of one matches a
 * pattern of the other read as a name (Elasticsearch's overlap test). */
static bool
patterns_overlap(const cJSON *a, const cJSON *b)
{
	for (const cJSON *x = cJSON_IsArray(a) ? a->child : a; x;
	     x = cJSON_IsArray(a) ? x->next : NULL)
		for (const cJSON *y = cJSON_IsArray(b) ? b->child : b; y;
		     y = cJSON_IsArray(b) ? y->next : NULL)
			if (cJSON_IsString(x) && cJSON_IsString(y) &&
			    (cm_glob(x->valuestring, y->valuestring) ||
			     cm_glob(y->valuestring, x->valuestring)))
				return true;
	return false;
}

static double
num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* Caller holds tpl_lock. */
static cm_err
check_index_template(nd_node *n, const char *name, const cJSON *b, cm_error *err)
{
	cm_err rc;
	for (const cJSON *c = b->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "index_patterns"))
			continue;
		else if (!strcmp(k, "template")) {
			if (!cJSON_IsObject(c))
				return cm_error_set(err, CM_EPARSE, "[template] must be an object");
			if ((rc = check_parts(c, "template", err)))
				return rc;
		} else if (!strcmp(k, "composed_of")) {
			if (!cJSON_IsArray(c))
				return cm_error_set(err, CM_EPARSE,
				                    "[composed_of] must be an array");
			const cJSON *comp = cJSON_GetObjectItemCaseSensitive(db(n), "component");
			for (const cJSON *e = c->child; e; e = e->next)
				if (!cJSON_IsString(e) ||
				    !cJSON_GetObjectItemCaseSensitive(comp, e->valuestring))
					return cm_error_set_type(
					    err, CM_EINVAL, "invalid_index_template_exception",
					    "index_template [%s] invalid, cause [index template "
					    "[%s] specifies "
					    "component templates [%s] that do not exist]",
					    name, name, cJSON_IsString(e) ? e->valuestring : "?");
		} else if (!strcmp(k, "priority") || !strcmp(k, "version")) {
			if (!cJSON_IsNumber(c) || c->valuedouble < 0 || c->valuedouble > 2147483647)
				return cm_error_set(err, CM_EPARSE,
				                    "[%s] must be a non-negative integer", k);
		} else if (!strcmp(k, "_meta")) {
			if (!cJSON_IsObject(c))
				return cm_error_set(err, CM_EPARSE, "[_meta] must be an object");
		} else if (!strcmp(k, "data_stream")) {
			return cm_error_set(err, CM_EINVAL,
			                    "[data_stream] is not supported: Shoal has no "
			                    "data streams");
		} else if (!strcmp(k, "allow_auto_create")) {
			if (!cJSON_IsBool(c))
				return cm_error_set(err, CM_EPARSE,
				                    "[allow_auto_create] must be a boolean");
		} else
			return cm_error_set(err, CM_EPARSE, "[index_template] unknown field [%s]",
			                    k);
	}
	const cJSON *pats = cJSON_GetObjectItemCaseSensitive(b, "index_patterns");
	if ((rc = check_patterns(pats, err)))
		return rc;
	const cJSON *set = cJSON_GetObjectItemCaseSensitive(db(n), "index");
	for (const cJSON *t = set->child; t; t = t->next) {
		if (!strcmp(t->string, name) || num(t, "priority") != num(b, "priority"))
			continue;
		if (patterns_overlap(pats, cJSON_GetObjectItemCaseSensitive(t, "index_patterns")))
			return cm_error_set(
			    err, CM_EINVAL,
			    "index template [%s] has index patterns matching patterns from "
			    "an existing index template [%s] that has the same priority "
			    "[%.0f], multiple index templates may not match during index "
			    "creation, please use a different priority",
			    name, t->string, num(b, "priority"));
	}
	return CM_OK;
}

static cm_err
check_component(const cJSON *b, cm_error *err)
{
	cm_err rc;
	for (const cJSON *c = b->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "template")) {
			if (!cJSON_IsObject(c))
				return cm_error_set(err, CM_EPARSE, "[template] must be an object");
			if ((rc = check_parts(c, "template", err)))
				return rc;
		} else if (!strcmp(k, "version")) {
			if (!cJSON_IsNumber(c))
				return cm_error_set(err, CM_EPARSE, "[version] must be an integer");
		} else if (strcmp(k, "_meta"))
			return cm_error_set(err, CM_EPARSE,
			                    "[component_template] unknown field [%s]", k);
	}
	if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(b, "template")))
		return cm_error_set(err, CM_EVALIDATE,
		                    "Validation Failed: 1: [template] is required for a component "
		                    "template;");
	return CM_OK;
}

static cm_err
check_legacy(const cJSON *b, cm_error *err)
{
	cm_err rc;
	for (const cJSON *c = b->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "index_patterns") || !strcmp(k, "template"))
			continue;
		if (!strcmp(k, "order") || !strcmp(k, "version")) {
			if (!cJSON_IsNumber(c))
				return cm_error_set(err, CM_EPARSE, "[%s] must be an integer", k);
		} else if (!strcmp(k, "settings") || !strcmp(k, "mappings") ||
		           !strcmp(k, "aliases")) {
			cJSON one;
			memset(&one, 0, sizeof(one));
			one.type = cJSON_Object;
			cJSON *copy = cJSON_Duplicate(c, true);
			one.child = copy;
			rc = check_parts(&one, "template", err);
			cJSON_Delete(copy);
			if (rc)
				return rc;
		} else
			return cm_error_set(err, CM_EPARSE, "[template] unknown field [%s]", k);
	}
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "index_patterns");
	return check_patterns(p ? p : cJSON_GetObjectItemCaseSensitive(b, "template"), err);
}

/* ---- handlers ---- */

void
co_h_template_put(co_req *r)
{
	const char *kind = kind_of(r), *name = co_seg(r, 1);
	bool bad, create = co_param_bool(r, "create", false);
	cJSON *body = co_body_json(r, &bad);
	cm_error err;
	cm_err rc;
	co_param_get(r, "cause");
	if (bad)
		return;
	if (!cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EPARSE, NULL, "the template body must be an object");
		return;
	}
	cm_error_clear(&err);
	if (!strcmp(kind, "legacy") && co_param_get(r, "order") &&
	    !cJSON_GetObjectItemCaseSensitive(body, "order"))
		cJSON_AddNumberToObject(body, "order", atof(co_param_get(r, "order")));
	if (!name[0] || strchr(name, '*') || strchr(name, ',') || strchr(name, ' '))
		rc = cm_error_set(&err, CM_EINVAL,
		                  "template name [%s] must not contain a space, a ',' or a '*'",
		                  name);
	else {
		pthread_mutex_lock(&tpl_lock);
		const cJSON *set = cJSON_GetObjectItemCaseSensitive(db(r->node), kind);
		if (create && cJSON_GetObjectItemCaseSensitive(set, name))
			rc = cm_error_set(&err, CM_EINVAL, "%s template [%s] already exists",
			                  !strcmp(kind, "component") ? "component" : "index", name);
		else
			rc = !strcmp(kind, "index")
			         ? check_index_template(r->node, name, body, &err)
			     : !strcmp(kind, "component") ? check_component(body, &err)
			                                  : check_legacy(body, &err);
		pthread_mutex_unlock(&tpl_lock);
	}
	if (rc) {
		co_reply_error(r, &err, NULL);
	} else {
		/* a single pattern given as a string is kept (and shown) as a list */
		cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "index_patterns");
		if (cJSON_IsString(p)) {
			cJSON *list = cJSON_CreateArray();
			cJSON_AddItemToArray(list, cJSON_CreateString(p->valuestring));
			cJSON_ReplaceItemInObjectCaseSensitive(body, "index_patterns", list);
		}
		co_store_change(r, "put", kind, name, body);
	}
	cJSON_Delete(body);
}

/* The names of set matching the comma-separated patterns (all for NULL);
 * names not found (no pattern) in *missing. */
static cJSON *
select_names(const cJSON *set, const char *names, bool *missing)
{
	cJSON *out = cJSON_CreateArray();
	*missing = false;
	if (!names) {
		for (const cJSON *t = set->child; t; t = t->next)
			cJSON_AddItemToArray(out, cJSON_CreateString(t->string));
		return out;
	}
	char *copy = cm_strdup(MEM, names), *save = NULL, *tok;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		bool any = false;
		for (const cJSON *t = set->child; t; t = t->next)
			if (cm_glob(tok, t->string) || !strcmp(tok, "_all")) {
				any = true;
				bool dup = false;
				for (const cJSON *d = out->child; d && !dup; d = d->next)
					dup = !strcmp(d->valuestring, t->string);
				if (!dup)
					cJSON_AddItemToArray(out, cJSON_CreateString(t->string));
			}
		if (!any && !strchr(tok, '*'))
			*missing = true;
	}
	cm_free(MEM, copy);
	return out;
}

void
co_h_template_get(co_req *r)
{
	const char *kind = kind_of(r), *names = co_seg(r, 1);
	bool missing, flat = co_param_bool(r, "flat_settings", false);
	co_param_get(r, "local");
	pthread_mutex_lock(&tpl_lock);
	const cJSON *set = cJSON_GetObjectItemCaseSensitive(db(r->node), kind);
	cJSON *sel = select_names(set, names, &missing), *j = cJSON_CreateObject(), *arr = NULL;
	if (strcmp(kind, "legacy"))
		arr = cJSON_AddArrayToObject(j, !strcmp(kind, "index") ? "index_templates"
		                                                       : "component_templates");
	for (const cJSON *s = sel->child; s; s = s->next) {
		cJSON *t =
		    cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(set, s->valuestring), true);
		if (!arr) {
			/* legacy: the stored template with its parts always present */
			static const char *const parts[] = {"settings", "mappings", "aliases"};
			if (!cJSON_GetObjectItemCaseSensitive(t, "order"))
				cJSON_AddNumberToObject(t, "order", 0);
			cJSON *set = cJSON_GetObjectItemCaseSensitive(t, "settings");
			if (cJSON_IsObject(set))
				cJSON_ReplaceItemInObjectCaseSensitive(t, "settings",
				                                       co_settings_normalized(set, flat));
			for (int i = 0; i < 3; i++)
				if (!cJSON_GetObjectItemCaseSensitive(t, parts[i]))
					cJSON_AddObjectToObject(t, parts[i]);
			cJSON_AddItemToObject(j, s->valuestring, t);
			continue;
		}
		cJSON *e = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "name", s->valuestring);
		cJSON_AddItemToObject(
		    e, !strcmp(kind, "index") ? "index_template" : "component_template", t);
		cJSON_AddItemToArray(arr, e);
	}
	pthread_mutex_unlock(&tpl_lock);
	cJSON_Delete(sel);
	if (missing && (!names || !strchr(names, '*'))) {
		cJSON_Delete(j);
		if (!strcmp(kind, "legacy")) {
			co_reply_json(r, 404, cJSON_CreateObject());
			return;
		}
		co_reply_errorf(r, CM_ENOTFOUND, NULL, "%s template matching [%s] not found",
		                !strcmp(kind, "index") ? "index" : "component", names);
		return;
	}
	co_reply_json(r, 200, j);
}

void
co_h_template_delete(co_req *r)
{
	const char *kind = kind_of(r), *name = co_seg(r, 1);
	cm_error err;
	cm_err rc = CM_OK;
	cm_error_clear(&err);
	pthread_mutex_lock(&tpl_lock);
	cJSON *d = db(r->node);
	if (!cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, kind), name))
		rc = cm_error_set(&err, CM_ENOTFOUND, "%s template matching [%s] not found",
		                  !strcmp(kind, "component") ? "component" : "index", name);
	else if (!strcmp(kind, "component")) {
		const cJSON *set = cJSON_GetObjectItemCaseSensitive(d, "index");
		for (const cJSON *t = set->child; t && !rc; t = t->next) {
			const cJSON *e;
			cJSON_ArrayForEach(e,
			                   cJSON_GetObjectItemCaseSensitive(
			                       t, "composed_of")) if (cJSON_IsString(e) &&
			                                              !strcmp(e->valuestring, name))
			{
				rc = cm_error_set(
				    &err, CM_EINVAL,
				    "component templates [%s] cannot be removed as they are "
				    "still in use by index templates [%s]",
				    name, t->string);
				break;
			}
		}
	}
	pthread_mutex_unlock(&tpl_lock);
	if (rc)
		co_reply_error(r, &err, NULL);
	else
		co_store_change(r, "delete", kind, name, NULL);
}

/* ---- composing a new index's body ---- */

/* Flat "a.b" keys, "index." dropped, later values win. */
static void
flat_settings(const cJSON *src, const char *prefix, cJSON *dst)
{
	for (const cJSON *c = src ? src->child : NULL; c; c = c->next) {
		char key[300];
		snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", c->string);
		if (cJSON_IsObject(c)) {
			flat_settings(c, key, dst);
			continue;
		}
		const char *k = strncmp(key, "index.", 6) ? key : key + 6;
		cJSON_DeleteItemFromObjectCaseSensitive(dst, k);
		cJSON_AddItemToObject(dst, k, cJSON_Duplicate(c, true));
	}
}

/* Objects merged key by key, recursively; anything else replaced. */
static void
deep_merge(cJSON *dst, const cJSON *src)
{
	for (const cJSON *c = src ? src->child : NULL; c; c = c->next) {
		cJSON *have = cJSON_GetObjectItemCaseSensitive(dst, c->string);
		if (have && cJSON_IsObject(have) && cJSON_IsObject(c)) {
			deep_merge(have, c);
			continue;
		}
		cJSON_DeleteItemFromObjectCaseSensitive(dst, c->string);
		cJSON_AddItemToObject(dst, c->string, cJSON_Duplicate(c, true));
	}
}

static void
add_parts(cJSON *acc, const cJSON *parts)
{
	flat_settings(cJSON_GetObjectItemCaseSensitive(parts, "settings"), "",
	              cJSON_GetObjectItemCaseSensitive(acc, "settings"));
	deep_merge(cJSON_GetObjectItemCaseSensitive(acc, "mappings"),
	           cJSON_GetObjectItemCaseSensitive(parts, "mappings"));
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(parts, "aliases");
	cJSON *aa = cJSON_GetObjectItemCaseSensitive(acc, "aliases");
	for (const cJSON *c = a ? a->child : NULL; c; c = c->next) {
		cJSON_DeleteItemFromObjectCaseSensitive(aa, c->string);
		cJSON_AddItemToObject(aa, c->string, cJSON_Duplicate(c, true));
	}
}

static int
by_order(const void *a, const void *b)
{
	double x = num(*(const cJSON *const *)a, "order"),
	       y = num(*(const cJSON *const *)b, "order");
	return (x > y) - (x < y);
}

/* The templates' parts for index, composed (caller holds tpl_lock):
 * {"settings" (flat),"mappings","aliases"}; *winner names the composable
 * template used (NULL: legacy ones, or none); overlapping (optional) gets
 * the other composable matches. */
static cJSON *
compose(nd_node *n, const char *index, const char **winner, cJSON *overlapping)
{
	cJSON *acc = cJSON_CreateObject();
	cJSON_AddObjectToObject(acc, "settings");
	cJSON_AddObjectToObject(acc, "mappings");
	cJSON_AddObjectToObject(acc, "aliases");
	const cJSON *set = cJSON_GetObjectItemCaseSensitive(db(n), "index"), *best = NULL;
	*winner = NULL;
	for (const cJSON *t = set->child; t; t = t->next) {
		if (!patterns_match(cJSON_GetObjectItemCaseSensitive(t, "index_patterns"), index))
			continue;
		if (!best || num(t, "priority") > num(best, "priority"))
			best = t;
	}
	for (const cJSON *t = set->child; t && overlapping; t = t->next)
		if (t != best &&
		    patterns_match(cJSON_GetObjectItemCaseSensitive(t, "index_patterns"), index)) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "name", t->string);
			cJSON_AddItemToObject(
			    o, "index_patterns",
			    cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(t, "index_patterns"),
			                    true));
			cJSON_AddItemToArray(overlapping, o);
		}
	if (best) {
		*winner = best->string;
		const cJSON *comp = cJSON_GetObjectItemCaseSensitive(db(n), "component"), *e;
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(best, "composed_of"))
		{
			const cJSON *c =
			    cJSON_IsString(e)
			        ? cJSON_GetObjectItemCaseSensitive(comp, e->valuestring)
			        : NULL;
			add_parts(acc, cJSON_GetObjectItemCaseSensitive(c, "template"));
		}
		add_parts(acc, cJSON_GetObjectItemCaseSensitive(best, "template"));
		return acc;
	}
	/* legacy templates only when no composable one matches, by order */
	const cJSON *leg = cJSON_GetObjectItemCaseSensitive(db(n), "legacy");
	size_t k = 0, cap = (size_t)cJSON_GetArraySize(leg) + 1;
	const cJSON **m = cm_calloc(MEM, cap, sizeof(*m));
	for (const cJSON *t = leg->child; t; t = t->next) {
		const cJSON *p = cJSON_GetObjectItemCaseSensitive(t, "index_patterns");
		if (patterns_match(p ? p : cJSON_GetObjectItemCaseSensitive(t, "template"), index))
			m[k++] = t;
	}
	qsort(m, k, sizeof(*m), by_order);
	for (size_t i = 0; i < k; i++)
		add_parts(acc, m[i]);
	cm_free(MEM, m);
	return acc;
}

cJSON *
co_template_body(nd_node *n, const char *index, const cJSON *req)
{
	const char *winner;
	if (req && !cJSON_IsObject(req))
		return cJSON_Duplicate(req, true); /* refused as it is by the create */
	pthread_mutex_lock(&tpl_lock);
	cJSON *acc = compose(n, index, &winner, NULL);
	pthread_mutex_unlock(&tpl_lock);
	bool any = false;
	for (const cJSON *c = acc->child; c; c = c->next)
		any |= c->child != NULL;
	if (!any) {
		cJSON_Delete(acc);
		return req ? cJSON_Duplicate(req, true) : NULL;
	}
	if (cJSON_IsObject(req)) {
		/* the request's own parts win; other keys (refused later) kept */
		add_parts(acc, req);
		for (const cJSON *c = req->child; c; c = c->next)
			if (!cJSON_GetObjectItemCaseSensitive(acc, c->string))
				cJSON_AddItemToObject(acc, c->string, cJSON_Duplicate(c, true));
	}
	for (cJSON *c = acc->child, *next; c; c = next) {
		next = c->next;
		if (cJSON_IsObject(c) && !c->child)
			cJSON_Delete(cJSON_DetachItemViaPointer(acc, c));
	}
	return acc;
}

/* Flat settings as {"index":{...}} with string values (as Elasticsearch
 * shows settings). */
static cJSON *
settings_view(const cJSON *flat)
{
	cJSON *out = cJSON_CreateObject(), *ix = cJSON_AddObjectToObject(out, "index");
	for (const cJSON *c = flat ? flat->child : NULL; c; c = c->next) {
		cJSON *at = ix;
		char *copy = cm_strdup(MEM, c->string), *save = NULL, *tok, *next;
		for (tok = strtok_r(copy, ".", &save); tok; tok = next) {
			next = strtok_r(NULL, ".", &save);
			if (!next) {
				cJSON_DeleteItemFromObjectCaseSensitive(at, tok);
				if (cJSON_IsString(c))
					cJSON_AddStringToObject(at, tok, c->valuestring);
				else if (cJSON_IsNumber(c)) {
					char buf[64];
					snprintf(buf, sizeof(buf), "%.15g", c->valuedouble);
					cJSON_AddStringToObject(at, tok, buf);
				} else if (cJSON_IsBool(c))
					cJSON_AddStringToObject(at, tok,
					                        cJSON_IsTrue(c) ? "true" : "false");
				else
					cJSON_AddItemToObject(at, tok, cJSON_Duplicate(c, true));
				break;
			}
			cJSON *sub = cJSON_GetObjectItemCaseSensitive(at, tok);
			if (!cJSON_IsObject(sub)) {
				cJSON_DeleteItemFromObjectCaseSensitive(at, tok);
				sub = cJSON_AddObjectToObject(at, tok);
			}
			at = sub;
		}
		cm_free(MEM, copy);
	}
	return out;
}

/* POST /_index_template/_simulate_index/{name} */
void
co_h_simulate_index(co_req *r)
{
	const char *name = co_seg(r, 2), *winner;
	cm_error err;
	cm_error_clear(&err);
	if (nd_index_name_check(name, &err)) {
		co_reply_error(r, &err, name);
		return;
	}
	cJSON *over = cJSON_CreateArray();
	pthread_mutex_lock(&tpl_lock);
	cJSON *acc = compose(r->node, name, &winner, over);
	pthread_mutex_unlock(&tpl_lock);
	cJSON *j = cJSON_CreateObject(), *t = cJSON_AddObjectToObject(j, "template");
	cJSON_AddItemToObject(t, "settings",
	                      settings_view(cJSON_GetObjectItemCaseSensitive(acc, "settings")));
	cJSON_AddItemToObject(t, "mappings",
	                      cJSON_DetachItemFromObjectCaseSensitive(acc, "mappings"));
	cJSON_AddItemToObject(t, "aliases",
	                      cJSON_DetachItemFromObjectCaseSensitive(acc, "aliases"));
	cJSON_AddItemToObject(j, "overlapping", over);
	cJSON_Delete(acc);
	co_reply_json(r, 200, j);
}

/* ---- stored scripts ---- */

char *
co_script_source(nd_node *n, const char *id)
{
	char *out = NULL;
	pthread_mutex_lock(&tpl_lock);
	const cJSON *s =
	    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(db(n), "script"), id);
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(s, "source");
	if (cJSON_IsString(src))
		out = cm_strdup(MEM, src->valuestring);
	pthread_mutex_unlock(&tpl_lock);
	return out;
}

void
co_h_script_put(co_req *r)
{
	const char *id = co_seg(r, 1);
	bool bad;
	cJSON *body = co_body_json(r, &bad);
	cm_error err;
	cm_err rc = CM_OK;
	co_param_get(r, "timeout");
	co_param_get(r, "master_timeout");
	if (bad)
		return;
	cm_error_clear(&err);
	const cJSON *sc = cJSON_GetObjectItemCaseSensitive(body, "script");
	const cJSON *lang = cJSON_GetObjectItemCaseSensitive(sc, "lang");
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(sc, "source");
	if (!cJSON_IsObject(body) || !cJSON_IsObject(sc))
		rc = cm_error_set(&err, CM_EPARSE,
		                  "unable to parse stored script: expected an "
		                  "object [script]");
	for (const cJSON *k = body ? body->child : NULL; !rc && k; k = k->next)
		if (strcmp(k->string, "script"))
			rc = cm_error_set_type(&err, CM_EPARSE, "x_content_parse_exception",
			                       "[script] unknown field [%s]", k->string);
	for (const cJSON *k = sc ? sc->child : NULL; !rc && k; k = k->next)
		if (strcmp(k->string, "lang") && strcmp(k->string, "source") &&
		    strcmp(k->string, "options"))
			rc = cm_error_set_type(&err, CM_EPARSE, "x_content_parse_exception",
			                       "[script] unknown field [%s]", k->string);
	if (!rc && !cJSON_IsString(lang))
		rc = cm_error_set(&err, CM_EINVAL, "must specify lang for stored script");
	else if (!rc && strcmp(lang->valuestring, "mustache"))
		rc = cm_error_set(&err, CM_EINVAL,
		                  "unable to put stored script with unsupported lang [%s]: only "
		                  "[mustache] search templates can be stored",
		                  lang->valuestring);
	else if (!rc && !cJSON_IsString(src) && !cJSON_IsObject(src))
		rc = cm_error_set(&err, CM_EINVAL, "must specify source for stored script");
	else if (!rc && (!id[0] || strchr(id, '#') || strlen(id) > 255))
		rc = cm_error_set(&err, CM_EINVAL, "invalid stored script id [%s]", id);
	if (rc) {
		co_reply_error(r, &err, NULL);
		cJSON_Delete(body);
		return;
	}
	/* an object source is kept as its JSON text, as ES does */
	cJSON *stored = cJSON_CreateObject();
	cJSON_AddStringToObject(stored, "lang", "mustache");
	if (cJSON_IsString(src)) {
		cJSON_AddStringToObject(stored, "source", src->valuestring);
	} else {
		char *t = cJSON_PrintUnformatted(src);
		cJSON_AddStringToObject(stored, "source", t ? t : "{}");
		cJSON_free(t);
	}
	co_store_change(r, "put", "script", id, stored);
	cJSON_Delete(stored);
	cJSON_Delete(body);
}

void
co_h_script_get(co_req *r)
{
	const char *id = co_seg(r, 1);
	co_param_get(r, "master_timeout");
	pthread_mutex_lock(&tpl_lock);
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(db(r->node), "script"), id);
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "_id", id);
	cJSON_AddBoolToObject(j, "found", s != NULL);
	if (s)
		cJSON_AddItemToObject(j, "script", cJSON_Duplicate(s, true));
	pthread_mutex_unlock(&tpl_lock);
	co_reply_json(r, s ? 200 : 404, j);
}

void
co_h_script_delete(co_req *r)
{
	const char *id = co_seg(r, 1);
	co_param_get(r, "timeout");
	co_param_get(r, "master_timeout");
	pthread_mutex_lock(&tpl_lock);
	bool found = cJSON_GetObjectItemCaseSensitive(
	                 cJSON_GetObjectItemCaseSensitive(db(r->node), "script"), id) != NULL;
	pthread_mutex_unlock(&tpl_lock);
	if (!found) {
		co_reply_errorf(r, CM_ENOTFOUND, NULL, "stored script [%.200s] does not exist", id);
		return;
	}
	co_store_change(r, "delete", "script", id, NULL);
}

/* "[a, b]" of a list of strings (a single string as a list of one). */
static char *
cat_list(const cJSON *l)
{
	cm_buf b;
	cm_buf_init(&b, MEM);
	cm_buf_put_u8(&b, '[');
	if (cJSON_IsString(l))
		cm_buf_printf(&b, "%s", l->valuestring);
	for (const cJSON *e = cJSON_IsArray(l) ? l->child : NULL; e; e = e->next)
		if (cJSON_IsString(e))
			cm_buf_printf(&b, "%s%s", e == l->child ? "" : ", ", e->valuestring);
	cm_buf_put(&b, "]", 2);
	char *s = cm_strdup(MEM, (const char *)b.data);
	cm_buf_free(&b);
	return s;
}

/* GET /_cat/templates[/{name}]: legacy and composable index templates,
 * columns name, index_patterns, order, version, composed_of. */
void
co_h_cat_templates(co_req *r)
{
	static const char *const cols[] = {"name", "index_patterns", "order", "version",
	                                   "composed_of"};
	enum { NC = sizeof(cols) / sizeof(cols[0]) };
	const char *names = co_seg(r, 2);
	char **cells = NULL;
	int nrows = 0, cap = 0;
	bool missing;
	pthread_mutex_lock(&tpl_lock);
	for (int k = 0; k < 2; k++) {
		const char *kind = k ? "index" : "legacy";
		const cJSON *set = cJSON_GetObjectItemCaseSensitive(db(r->node), kind);
		cJSON *sel = select_names(set, names, &missing);
		for (const cJSON *s = sel->child; s; s = s->next) {
			const cJSON *t = cJSON_GetObjectItemCaseSensitive(set, s->valuestring);
			const cJSON *order = cJSON_GetObjectItemCaseSensitive(t, k ? "priority" : "order");
			const cJSON *ver = cJSON_GetObjectItemCaseSensitive(t, "version");
			char num[32];
			if (nrows == cap) {
				cap = cap ? cap * 2 : 8;
				cells = cm_realloc(MEM, cells, (size_t)cap * NC * sizeof(char *));
			}
			char **row = cells + (size_t)nrows++ * NC;
			row[0] = cm_strdup(MEM, s->valuestring);
			row[1] = cat_list(cJSON_GetObjectItemCaseSensitive(t, "index_patterns"));
			snprintf(num, sizeof num, "%lld",
			         cJSON_IsNumber(order) ? (long long)order->valuedouble : 0LL);
			row[2] = cm_strdup(MEM, num);
			snprintf(num, sizeof num, "%lld",
			         cJSON_IsNumber(ver) ? (long long)ver->valuedouble : 0LL);
			row[3] = cm_strdup(MEM, cJSON_IsNumber(ver) ? num : "");
			row[4] = k ? cat_list(cJSON_GetObjectItemCaseSensitive(t, "composed_of"))
			           : cm_strdup(MEM, "");
		}
		cJSON_Delete(sel);
	}
	pthread_mutex_unlock(&tpl_lock);
	co_cat_cells(r, cols, NC, cells, nrows);
	for (int i = 0; i < nrows * NC; i++)
		cm_free(MEM, cells[i]);
	cm_free(MEM, cells);
}
