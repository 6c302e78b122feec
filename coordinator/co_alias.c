/* Aliases over REST: PUT|POST|DELETE /{index}/_alias/{name}, POST
 * /_aliases, GET|HEAD /_alias[/{name}], GET /{index}/_alias[/{name}],
 * _cat/aliases, and the filter a search through a filtered alias gets.
 * The work is the node's (nd_alias.c); on a cluster the actions go to the
 * master, which puts them in the cluster state. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR


/* Applies actions (consumed): through the master on a cluster. */
static void
run_actions(co_req *r, cJSON *actions)
{
	cm_error err;
	cm_error_clear(&err);
	if (co_cluster_admin(r, ND_META_ALIASES, "", actions)) {
		cJSON_Delete(actions);
		return;
	}
	if (nd_alias_update(r->node, actions, &err))
		co_reply_error(r, &err, NULL);
	else {
		cJSON *j = cJSON_CreateObject();
		cJSON_AddBoolToObject(j, "acknowledged", true);
		co_reply_json(r, 200, j);
	}
	cJSON_Delete(actions);
}

/* PUT|POST /{index}/_alias/{name} with an optional body of alias options. */
void
co_h_alias_put(co_req *r)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad);
	if (bad)
		return;
	if (body && !cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EPARSE, NULL, "the alias body must be an object");
		return;
	}
	cJSON *spec = body ? body : cJSON_CreateObject();
	if (cJSON_GetObjectItemCaseSensitive(spec, "index") ||
	    cJSON_GetObjectItemCaseSensitive(spec, "alias")) {
		cJSON_Delete(spec);
		co_reply_errorf(r, CM_EPARSE, NULL,
		                "[index] and [alias] come from the URL, not the body");
		return;
	}
	/* the index part may be a list (test1,test2) like DELETE's */
	cJSON *ix = cJSON_CreateArray();
	char *copy = cm_strdup(MEM, co_seg(r, 0)), *save = NULL, *tok;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		cJSON_AddItemToArray(ix, cJSON_CreateString(tok));
	cm_free(MEM, copy);
	cJSON_AddItemToObject(spec, "indices", ix);
	cJSON_AddStringToObject(spec, "alias", co_seg(r, 2));
	cJSON *actions = cJSON_CreateArray(), *a = cJSON_CreateObject();
	cJSON_AddItemToObject(a, "add", spec);
	cJSON_AddItemToArray(actions, a);
	run_actions(r, actions);
}

/* DELETE /{index}/_alias/{name} (names may be lists and patterns). */
void
co_h_alias_delete(co_req *r)
{
	cJSON *spec = cJSON_CreateObject(), *ix = cJSON_CreateArray(), *al = cJSON_CreateArray();
	for (int k = 0; k < 2; k++) {
		char *copy = cm_strdup(MEM, co_seg(r, k * 2)), *save = NULL, *tok;
		for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			cJSON_AddItemToArray(k ? al : ix, cJSON_CreateString(tok));
		cm_free(MEM, copy);
	}
	cJSON_AddItemToObject(spec, "indices", ix);
	cJSON_AddItemToObject(spec, "aliases", al);
	cJSON *actions = cJSON_CreateArray(), *a = cJSON_CreateObject();
	cJSON_AddItemToObject(a, "remove", spec);
	cJSON_AddItemToArray(actions, a);
	run_actions(r, actions);
}

/* POST /_aliases {"actions":[...]} */
void
co_h_aliases_post(co_req *r)
{
	bool bad;
	cJSON *body = co_body_json(r, &bad), *actions;
	if (bad)
		return;
	if (!cJSON_IsObject(body) ||
	    !cJSON_IsArray(actions = cJSON_GetObjectItemCaseSensitive(body, "actions"))) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: At least one action is required;");
		return;
	}
	for (const cJSON *c = body->child; c; c = c->next)
		if (strcmp(c->string, "actions")) {
			co_reply_errorf(r, CM_EPARSE, NULL, "[aliases] unknown field [%.60s]",
			                c->string);
			cJSON_Delete(body);
			return;
		}
	cJSON *copy = cJSON_Duplicate(actions, true);
	cJSON_Delete(body);
	run_actions(r, copy);
}

/* Does alias name match the comma-separated patterns? "-pattern"
 * excludes; the last pattern that matches decides (ES's findAliases). */
static bool
wanted(const char *list, const char *name)
{
	bool hit = false;
	char *copy = cm_strdup(MEM, list), *save = NULL, *tok;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		bool excl = tok[0] == '-';
		const char *pat = excl ? tok + 1 : tok;
		if (!strcmp(pat, "_all") || cm_glob(pat, name))
			hit = !excl;
	}
	cm_free(MEM, copy);
	return hit;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* GET /_alias, /_alias/{name}, /{index}/_alias, /{index}/_alias/{name}
 * (and _aliases): every index asked for with its aliases; with names,
 * only indices holding a matching one, and a 404 naming the missing
 * concrete names. */
void
co_h_aliases_get(co_req *r)
{
	const char *s0 = co_seg(r, 0), *names = NULL, *expr = "_all";
	nd_index **ixs;
	size_t n;
	if (s0 && (!strcmp(s0, "_alias") || !strcmp(s0, "_aliases")))
		names = co_seg(r, 1);
	else if (s0) {
		expr = s0;
		names = co_seg(r, 2);
	}
	if (!co_resolve(r, expr, &ixs, &n))
		return;
	cJSON *j = cJSON_CreateObject();
	for (size_t i = 0; i < n; i++) {
		cJSON *all = nd_index_aliases_json(ixs[i]), *keep = all, *c, *next;
		if (names) {
			for (c = all->child; c; c = next) {
				next = c->next;
				if (!wanted(names, c->string))
					cJSON_Delete(cJSON_DetachItemViaPointer(all, c));
			}
			if (!all->child) {
				cJSON_Delete(all);
				continue;
			}
		}
		cJSON_AddItemToObject(cJSON_AddObjectToObject(j, nd_index_name(ixs[i])), "aliases",
		                      keep);
	}
	co_release_all(ixs, n);
	if (names) {
		/* names asked for explicitly that no index holds, sorted: not
		 * patterns, not exclusions after the first pattern, not names a
		 * later exclusion removes (ES's RestGetAliasesAction) */
		char *copy = cm_strdup(MEM, names), *save = NULL, *tok, *toks[64], *miss[64];
		int nt = 0, fw, nmiss = 0;
		for (tok = strtok_r(copy, ",", &save); tok && nt < 64; tok = strtok_r(NULL, ",", &save))
			toks[nt++] = tok;
		for (fw = 0; fw < nt && !strchr(toks[fw], '*') && strcmp(toks[fw], "_all"); fw++)
			;
		for (int i = 0; i < nt; i++) {
			if (strchr(toks[i], '*') || !strcmp(toks[i], "_all") ||
			    (i > fw && toks[i][0] == '-'))
				continue;
			int k = i + 1 > fw ? i + 1 : fw;
			for (; k < nt; k++)
				if (toks[k][0] == '-' &&
				    (cm_glob(toks[k] + 1, toks[i]) || !strcmp(toks[k] + 1, "_all")))
					break;
			if (k < nt)
				continue;
			bool found = false;
			for (const cJSON *ix = j->child; ix && !found; ix = ix->next)
				found = cJSON_GetObjectItemCaseSensitive(ix->child, toks[i]) != NULL;
			for (int m = 0; m < nmiss && !found; m++)
				found = !strcmp(miss[m], toks[i]); /* named twice */
			if (!found)
				miss[nmiss++] = toks[i];
		}
		qsort(miss, (size_t)nmiss, sizeof miss[0], cmp_str);
		char missing[512] = "";
		for (int m = 0; m < nmiss; m++) {
			size_t l = strlen(missing);
			snprintf(missing + l, sizeof(missing) - l, "%s%s", m ? "," : "", miss[m]);
		}
		cm_free(MEM, copy);
		if (nmiss) {
			char msg[600];
			snprintf(msg, sizeof(msg), "alias%s [%s] missing", nmiss > 1 ? "es" : "",
			         missing);
			cJSON_AddStringToObject(j, "error", msg);
			cJSON_AddNumberToObject(j, "status", 404);
			co_reply_json(r, 404, j);
			return;
		}
	}
	co_reply_json(r, 200, j);
}

/* _cat/aliases[/{name}]: alias index filter routing.index routing.search
 * is_write_index, "-" for what is not set. */
void
co_cat_aliases(co_req *r, const char *names)
{
	static const char *const cols[] = {"alias",         "index",          "filter",
	                                   "routing.index", "routing.search", "is_write_index"};
	enum { NC = 6 };
	nd_index **ixs;
	size_t n;
	char **cells = NULL;
	int nrows = 0, cap = 0;
	nd_index_list(r->node, &ixs, &n);
	for (size_t i = 0; i < n; i++) {
		cJSON *all = nd_index_aliases_json(ixs[i]);
		for (const cJSON *a = all->child; a; a = a->next) {
			if (names && !wanted(names, a->string))
				continue;
			const cJSON *ir = cJSON_GetObjectItemCaseSensitive(a, "index_routing");
			const cJSON *sr = cJSON_GetObjectItemCaseSensitive(a, "search_routing");
			const cJSON *w = cJSON_GetObjectItemCaseSensitive(a, "is_write_index");
			const char *vals[NC] = {
			    a->string,
			    nd_index_name(ixs[i]),
			    cJSON_GetObjectItemCaseSensitive(a, "filter") ? "*" : "-",
			    cJSON_IsString(ir) ? ir->valuestring : "-",
			    cJSON_IsString(sr) ? sr->valuestring : "-",
			    cJSON_IsBool(w) ? (cJSON_IsTrue(w) ? "true" : "false") : "-"};
			if (nrows == cap) {
				cap = cap ? cap * 2 : 16;
				cells = cm_realloc(MEM, cells, (size_t)cap * NC * sizeof(char *));
			}
			for (int c = 0; c < NC; c++)
				cells[(size_t)nrows * NC + (size_t)c] = cm_strdup(MEM, vals[c]);
			nrows++;
		}
		cJSON_Delete(all);
	}
	co_release_all(ixs, n);
	/* rendered like every _cat table: h, s, v, help, format */
	co_cat_cells(r, cols, NC, cells, nrows);
	for (int i = 0; i < nrows * NC; i++)
		cm_free(MEM, cells[i]);
	cm_free(MEM, cells);
}

cm_err
co_alias_filter(co_req *r, const char *expr, cJSON *body, cm_error *err)
{
	cJSON *f = NULL;
	cm_err rc = nd_alias_filter(r->node, expr, &f, err);
	if (rc || !f)
		return rc;
	cJSON *q = cJSON_DetachItemFromObjectCaseSensitive(body, "query");
	if (!q) {
		q = cJSON_CreateObject();
		cJSON_AddObjectToObject(q, "match_all");
	}
	cJSON *w = cJSON_CreateObject(), *b = cJSON_AddObjectToObject(w, "bool");
	cJSON_AddItemToObject(b, "must", q);
	cJSON_AddItemToObject(b, "filter", f);
	cJSON_AddItemToObject(body, "query", w);
	return CM_OK;
}

nd_index *
co_index_or_alias(nd_node *n, const char *name, bool write)
{
	nd_index *ix = nd_index_get(n, name);
	cm_error err;
	cm_error_clear(&err);
	if (ix || !nd_alias_exists(n, name))
		return ix;
	if (!write)
		return nd_alias_single(n, name);
	nd_alias_write_index(n, name, &ix, NULL, &err);
	return ix;
}

void
co_single_index_error(nd_node *n, const char *name, cm_error *err)
{
	nd_index **ixs = NULL;
	size_t cnt = 0;
	cm_error e;
	cm_error_clear(&e);
	if (nd_alias_exists(n, name) && !nd_resolve(n, name, false, &ixs, &cnt, &e) && cnt > 1) {
		cm_buf names;
		cm_buf_init(&names, MEM);
		for (size_t i = 0; i < cnt; i++)
			cm_buf_printf(&names, "%s%s", i ? ", " : "", nd_index_name(ixs[i]));
		cm_buf_put_u8(&names, 0);
		cm_error_set(err, CM_EINVAL,
		             "alias [%s] has more than one index associated with it [%s], can't "
		             "execute a single index op",
		             name, (const char *)names.data);
		cm_buf_free(&names);
	} else {
		cm_error_set(err, CM_ENOINDEX, "no such index [%s]", name);
	}
	for (size_t i = 0; i < cnt; i++)
		nd_index_release(ixs[i]);
	cm_free(CM_MEM_NODE, ixs);
}

char *
co_alias_index_routing(nd_node *n, const char *name)
{
	nd_index *ix = nd_index_get(n, name);
	char *rt = NULL;
	cm_error err;
	cm_error_clear(&err);
	if (ix || !nd_alias_exists(n, name)) {
		nd_index_release(ix);
		return NULL;
	}
	if (nd_alias_write_index(n, name, &ix, &rt, &err) == CM_OK)
		nd_index_release(ix);
	char *out = rt ? cm_strdup(MEM, rt) : NULL;
	cm_free(CM_MEM_NODE, rt);
	return out;
}

bool
co_alias_routing_check(const char *alias, const char *alias_rt, const char *given, cm_error *err)
{
	if (!alias_rt || !given || !strcmp(alias_rt, given))
		return true;
	cm_error_set(err, CM_EINVAL,
	             "Alias [%s] has index routing associated with it [%s], and was provided with "
	             "routing value [%s], rejecting operation",
	             alias, alias_rt, given);
	return false;
}

bool
co_alias_routing_param(co_req *r, const char *name)
{
	char *rt = co_alias_index_routing(r->node, name);
	const char *have = co_param_get(r, "routing");
	cm_error err;
	cm_error_clear(&err);
	if (!rt)
		return true;
	if (!co_alias_routing_check(name, rt, have, &err)) {
		cm_free(MEM, rt);
		co_reply_error(r, &err, NULL);
		return false;
	}
	if (!have && r->nparams < CO_MAX_PARAMS) {
		/* the request goes on as if it had asked for ?routing= itself */
		co_param *p = &r->params[r->nparams++];
		p->key = cm_strdup(MEM, "routing");
		p->value = rt;
		p->used = true;
		return true;
	}
	cm_free(MEM, rt);
	return true;
}
