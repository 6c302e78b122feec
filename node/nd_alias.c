/* Index aliases: kept per index in its metadata (index.json, and on a
 * cluster in the index's create body in the cluster state, so they travel
 * with every state the master publishes). POST /_aliases actions are
 * planned against the whole registry first (patterns resolved, names and
 * filters checked, one write index per alias), then applied: nothing is
 * half-applied by a bad action. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "../common/cm_log.h"
#include "../replication/rp.h"
#include "nd.h"
#include "nd_private.h"

#define MEM CM_MEM_NODE


/* ---- one alias entry ---- */

static cm_err
alias_name_check(const char *name, cm_error *err)
{
	cm_error e;
	cm_error_clear(&e);
	if (!nd_index_name_check(name, &e))
		return CM_OK;
	/* the index name rules, in the alias's words */
	char reason[sizeof(e.reason)];
	const char *p = strstr(e.reason, "index name");
	if (p)
		snprintf(reason, sizeof(reason), "%.*salias name%s", (int)(p - e.reason), e.reason,
		         p + 10);
	else
		snprintf(reason, sizeof(reason), "%s", e.reason);
	return cm_error_set_type(err, CM_EINVAL, "invalid_alias_name_exception", "%s", reason);
}

static cJSON *
routing_value(const cJSON *v, const char *key, cm_error *err)
{
	char buf[64];
	if (cJSON_IsString(v))
		return cJSON_CreateString(v->valuestring);
	if (cJSON_IsNumber(v)) {
		snprintf(buf, sizeof(buf), "%.0f", v->valuedouble);
		return cJSON_CreateString(buf);
	}
	cm_error_set(err, CM_EPARSE, "[%s] must be a string", key);
	return NULL;
}

cm_err
nd_alias_entry(const char *alias, const cJSON *spec, cJSON **out, cm_error *err)
{
	cJSON *e = cJSON_CreateObject();
	cm_err rc = alias_name_check(alias, err);
	*out = NULL;
	if (rc)
		goto fail;
	if (spec && !cJSON_IsObject(spec)) {
		rc = cm_error_set(err, CM_EPARSE, "alias [%s] must be an object", alias);
		goto fail;
	}
	for (const cJSON *k = spec ? spec->child : NULL; k; k = k->next) {
		const char *key = k->string;
		if (!strcmp(key, "filter")) {
			sr_query *q = NULL;
			if (!cJSON_IsObject(k)) {
				rc =
				    cm_error_set(err, CM_EPARSE,
				                 "[filter] of alias [%s] must be an object", alias);
				goto fail;
			}
			if ((rc = sr_query_from_json(k, &q, err)))
				goto fail;
			sr_query_free(q);
			cJSON_DeleteItemFromObjectCaseSensitive(e, "filter");
			cJSON_AddItemToObject(e, "filter", cJSON_Duplicate(k, true));
		} else if (!strcmp(key, "routing") || !strcmp(key, "index_routing") ||
		           !strcmp(key, "search_routing")) {
			const char *keys[2] = {"index_routing", "search_routing"};
			for (int i = 0; i < 2; i++) {
				if (strcmp(key, "routing") && strcmp(key, keys[i]))
					continue;
				/* index_routing and search_routing win over routing,
				 * whatever their order */
				if (!strcmp(key, "routing") &&
				    cJSON_GetObjectItemCaseSensitive(spec, keys[i]))
					continue;
				cJSON *v = routing_value(k, key, err);
				if (!v) {
					rc = CM_EPARSE;
					goto fail;
				}
				if (i == 0 && strchr(v->valuestring, ',')) {
					cJSON_Delete(v);
					rc = cm_error_set(
					    err, CM_EINVAL,
					    "alias [%s] has several index routing values "
					    "associated "
					    "with it [%s], can't execute a single index op",
					    alias, k->valuestring ? k->valuestring : "");
					goto fail;
				}
				cJSON_DeleteItemFromObjectCaseSensitive(e, keys[i]);
				cJSON_AddItemToObject(e, keys[i], v);
			}
		} else if (!strcmp(key, "is_write_index") || !strcmp(key, "is_hidden")) {
			if (cJSON_IsNull(k))
				continue;
			if (!cJSON_IsBool(k)) {
				rc = cm_error_set(err, CM_EPARSE,
				                  "[%s] of alias [%s] must be a boolean", key,
				                  alias);
				goto fail;
			}
			cJSON_DeleteItemFromObjectCaseSensitive(e, key);
			cJSON_AddBoolToObject(e, key, cJSON_IsTrue(k));
		} else {
			rc = cm_error_set(err, CM_EPARSE, "Unknown field [%s] in alias [%s]", key,
			                  alias);
			goto fail;
		}
	}
	*out = e;
	return CM_OK;
fail:
	cJSON_Delete(e);
	return rc;
}

cm_err
nd_alias_entries(const cJSON *aliases, cJSON **out, cm_error *err)
{
	cJSON *o = cJSON_CreateObject();
	*out = NULL;
	if (aliases && !cJSON_IsObject(aliases)) {
		cJSON_Delete(o);
		return cm_error_set(err, CM_EPARSE, "[aliases] must be an object");
	}
	for (const cJSON *a = aliases ? aliases->child : NULL; a; a = a->next) {
		cJSON *e;
		cm_err rc = nd_alias_entry(a->string, a, &e, err);
		if (rc) {
			cJSON_Delete(o);
			return rc;
		}
		cJSON_DeleteItemFromObjectCaseSensitive(o, a->string);
		cJSON_AddItemToObject(o, a->string, e);
	}
	*out = o;
	return CM_OK;
}

/* ---- per index ---- */

cJSON *
nd_index_aliases_json(nd_index *ix)
{
	pthread_mutex_lock(&ix->lock);
	cJSON *a = ix->aliases ? cJSON_Duplicate(ix->aliases, true) : cJSON_CreateObject();
	pthread_mutex_unlock(&ix->lock);
	return a;
}

/* Replaces ix's aliases with a (normalized; copied) and persists them. */
static cm_err
set_aliases(nd_index *ix, const cJSON *a, cm_error *err)
{
	pthread_mutex_lock(&ix->lock);
	if (ix->aliases && cJSON_Compare(ix->aliases, a, true)) {
		pthread_mutex_unlock(&ix->lock);
		return CM_OK;
	}
	cJSON *old = ix->aliases;
	ix->aliases = cJSON_GetArraySize(a) ? cJSON_Duplicate(a, true) : NULL;
	cm_err rc = nd_index_persist_locked(ix);
	if (rc) {
		cJSON_Delete(ix->aliases);
		ix->aliases = old;
		pthread_mutex_unlock(&ix->lock);
		return cm_error_set(err, rc, "cannot persist the aliases of [%s]", ix->name);
	}
	cJSON_Delete(old);
	pthread_mutex_unlock(&ix->lock);
	return CM_OK;
}

void
nd_alias_sync(nd_index *ix, const cJSON *body)
{
	cJSON *norm = NULL;
	cm_error err;
	cm_error_clear(&err);
	const cJSON *a =
	    cJSON_IsObject(body) ? cJSON_GetObjectItemCaseSensitive(body, "aliases") : NULL;
	if (nd_alias_entries(a, &norm, &err) || set_aliases(ix, norm, &err))
		cm_warn("node", "cannot apply the aliases of [%s]: %s", ix->name, err.reason);
	cJSON_Delete(norm);
}

/* ---- lookups (reg_lock held by the caller where it says so) ---- */

/* Marks in sel the indices holding an alias that matches tok (a name or a
 * pattern); true if any. Caller holds reg_lock. */
bool
nd_alias_select_locked(nd_node *n, const char *tok, bool pattern, bool hidden, bool *sel,
                       bool value)
{
	bool any = false;
	for (size_t i = 0; i < n->nindices; i++) {
		nd_index *ix = n->indices[i];
		pthread_mutex_lock(&ix->lock);
		for (const cJSON *a = ix->aliases ? ix->aliases->child : NULL; a; a = a->next) {
			bool dot = a->string[0] == '.';
			/* a pattern skips hidden aliases unless asked, or both start with '.' */
			bool shown =
			    hidden ||
			    !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "is_hidden")) ||
			    (dot && tok[0] == '.');
			if (pattern ? cm_glob(tok, a->string) && (!dot || tok[0] == '.') && shown
			            : !strcmp(tok, a->string)) {
				sel[i] = value;
				any = true;
				break;
			}
		}
		pthread_mutex_unlock(&ix->lock);
	}
	return any;
}

bool
nd_alias_exists(nd_node *n, const char *name)
{
	pthread_rwlock_rdlock(&n->reg_lock);
	bool *sel = cm_calloc(MEM, n->nindices + 1, sizeof(bool));
	bool any = nd_alias_select_locked(n, name, false, false, sel, true);
	cm_free(MEM, sel);
	pthread_rwlock_unlock(&n->reg_lock);
	return any;
}

/* Every index holding alias name, referenced, and each one's entry
 * (copies). */
typedef struct member {
	nd_index *ix;
	cJSON *entry;
} member;

static size_t
members(nd_node *n, const char *name, member **out)
{
	size_t k = 0;
	pthread_rwlock_rdlock(&n->reg_lock);
	*out = cm_calloc(MEM, n->nindices + 1, sizeof(member));
	for (size_t i = 0; i < n->nindices; i++) {
		nd_index *ix = n->indices[i];
		pthread_mutex_lock(&ix->lock);
		const cJSON *e =
		    ix->aliases ? cJSON_GetObjectItemCaseSensitive(ix->aliases, name) : NULL;
		if (e) {
			(*out)[k].ix = nd_index_ref(ix);
			(*out)[k++].entry = cJSON_Duplicate(e, true);
		}
		pthread_mutex_unlock(&ix->lock);
	}
	pthread_rwlock_unlock(&n->reg_lock);
	return k;
}

static void
members_free(member *m, size_t k)
{
	for (size_t i = 0; i < k; i++) {
		nd_index_release(m[i].ix);
		cJSON_Delete(m[i].entry);
	}
	cm_free(MEM, m);
}

cm_err
nd_alias_write_index(nd_node *n, const char *name, nd_index **out, char **routing, cm_error *err)
{
	member *m;
	size_t k = members(n, name, &m);
	nd_index *pick = NULL;
	const cJSON *entry = NULL;
	*out = NULL;
	if (routing)
		*routing = NULL;
	for (size_t i = 0; i < k; i++) {
		const cJSON *w = cJSON_GetObjectItemCaseSensitive(m[i].entry, "is_write_index");
		if (cJSON_IsTrue(w) || (k == 1 && !cJSON_IsFalse(w))) {
			pick = m[i].ix;
			entry = m[i].entry;
		}
	}
	if (!k) {
		members_free(m, k);
		return cm_error_set(err, CM_ENOINDEX, "no such index [%s]", name);
	}
	if (!pick) {
		members_free(m, k);
		return cm_error_set(
		    err, CM_EINVAL,
		    "no write index is defined for alias [%s]. The write index may be "
		    "explicitly disabled using is_write_index=false or the alias points "
		    "to multiple indices without one being designated as a write index",
		    name);
	}
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(entry, "index_routing");
	if (routing && cJSON_IsString(r))
		*routing = cm_strdup(MEM, r->valuestring);
	*out = nd_index_ref(pick);
	members_free(m, k);
	return CM_OK;
}

nd_index *
nd_alias_single(nd_node *n, const char *name)
{
	member *m;
	size_t k = members(n, name, &m);
	nd_index *ix = k == 1 ? nd_index_ref(m[0].ix) : NULL;
	members_free(m, k);
	return ix;
}

/* The filter a search of expr applies to each index: an index named
 * directly (or by an index pattern, or through an alias without filter)
 * is searched whole; one reached only through filtered aliases is
 * searched through their filters, OR-ed. */
cm_err
nd_alias_filter(nd_node *n, const char *expr, cJSON **filter, cm_error *err)
{
	*filter = NULL;
	if (!expr || !*expr)
		return CM_OK;
	pthread_rwlock_rdlock(&n->reg_lock);
	size_t ni = n->nindices;
	bool *whole = cm_calloc(MEM, ni + 1, sizeof(bool)), *reached = cm_calloc(MEM, ni + 1, 1);
	cJSON **ors = cm_calloc(MEM, ni + 1, sizeof(cJSON *));
	bool filtered_any = false;
	char *copy = cm_strdup(MEM, expr), *save = NULL, *tok;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (*tok == '-')
			continue;
		bool pattern = strchr(tok, '*') != NULL || !strcmp(tok, "_all");
		for (size_t i = 0; i < ni; i++) {
			nd_index *ix = n->indices[i];
			/* the indices nd_resolve picks: other patterns skip '.' names */
			bool dot_ok = ix->name[0] != '.' || tok[0] == '.';
			if (!strcmp(tok, "_all") || !strcmp(tok, "*") ||
			    (pattern ? dot_ok && cm_glob(tok, ix->name) : !strcmp(tok, ix->name))) {
				whole[i] = reached[i] = true;
				continue;
			}
			pthread_mutex_lock(&ix->lock);
			for (const cJSON *a = ix->aliases ? ix->aliases->child : NULL; a;
			     a = a->next) {
				if (!(pattern ? cm_glob(tok, a->string) : !strcmp(tok, a->string)))
					continue;
				const cJSON *f = cJSON_GetObjectItemCaseSensitive(a, "filter");
				reached[i] = true;
				if (!f) {
					whole[i] = true;
					continue;
				}
				filtered_any = true;
				if (!ors[i])
					ors[i] = cJSON_CreateArray();
				bool dup = false;
				for (const cJSON *g = ors[i]->child; g && !dup; g = g->next)
					dup = cJSON_Compare(g, f, true);
				if (!dup)
					cJSON_AddItemToArray(ors[i], cJSON_Duplicate(f, true));
			}
			pthread_mutex_unlock(&ix->lock);
		}
	}
	cm_free(MEM, copy);
	pthread_rwlock_unlock(&n->reg_lock);
	cm_err rc = CM_OK;
	cJSON *common = NULL;
	bool first = true;
	if (filtered_any) {
		for (size_t i = 0; i < ni && !rc; i++) {
			if (!reached[i])
				continue;
			cJSON *mine = NULL;
			if (!whole[i] && ors[i]) {
				if (cJSON_GetArraySize(ors[i]) == 1) {
					mine = cJSON_Duplicate(ors[i]->child, true);
				} else {
					mine = cJSON_CreateObject();
					cJSON *b = cJSON_AddObjectToObject(mine, "bool");
					cJSON_AddItemToObject(b, "should",
					                      cJSON_Duplicate(ors[i], true));
					cJSON_AddNumberToObject(b, "minimum_should_match", 1);
				}
			}
			if (first) {
				common = mine;
				first = false;
				continue;
			}
			bool same = (!common && !mine) ||
			            (common && mine && cJSON_Compare(common, mine, true));
			cJSON_Delete(mine);
			if (!same)
				rc = cm_error_set(
				    err, CM_EINVAL,
				    "[%s] reaches indices through different alias filters (or "
				    "some without one): Shoal searches one filter per request; "
				    "search them separately",
				    expr);
		}
	}
	for (size_t i = 0; i < ni; i++)
		cJSON_Delete(ors[i]);
	cm_free(MEM, ors);
	cm_free(MEM, whole);
	cm_free(MEM, reached);
	if (rc) {
		cJSON_Delete(common);
		return rc;
	}
	*filter = common;
	return CM_OK;
}

/* ---- planning POST /_aliases ---- */

/* The names an "index"/"indices" (or "alias"/"aliases") pair gives. */
static cm_err
names_of(const cJSON *spec, const char *one, const char *many, cJSON **out, cm_error *err)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(spec, one);
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(spec, many);
	cJSON *o = cJSON_CreateArray();
	*out = NULL;
	for (int pass = 0; pass < 2; pass++) {
		const cJSON *v = pass ? b : a;
		if (!v)
			continue;
		const cJSON *e = cJSON_IsArray(v) ? v->child : v;
		for (; e; e = cJSON_IsArray(v) ? e->next : NULL) {
			if (!cJSON_IsString(e) || !e->valuestring[0]) {
				cJSON_Delete(o);
				return cm_error_set(err, CM_EPARSE,
				                    "[%s] must be a string or an array of strings",
				                    pass ? many : one);
			}
			cJSON_AddItemToArray(o, cJSON_CreateString(e->valuestring));
		}
	}
	if (!cJSON_GetArraySize(o)) {
		cJSON_Delete(o);
		return cm_error_set(err, CM_EVALIDATE,
		                    "Validation Failed: 1: [%s] is unsupported or "
		                    "missing: one of [%s] or [%s] is required;",
		                    one, one, many);
	}
	*out = o;
	return CM_OK;
}

/* The concrete indices of work (index name -> aliases) that names give;
 * a missing concrete name is index_not_found, an alias name is refused. */
static cm_err
resolve_indices(const cJSON *work, const cJSON *names, cJSON **out, cm_error *err)
{
	cJSON *o = cJSON_CreateArray();
	*out = NULL;
	for (const cJSON *nm = names->child; nm; nm = nm->next) {
		const char *p = nm->valuestring;
		bool pattern = strchr(p, '*') || !strcmp(p, "_all");
		bool any = false;
		for (const cJSON *ix = work->child; ix; ix = ix->next) {
			if (pattern ? (!strcmp(p, "_all") || cm_glob(p, ix->string))
			            : !strcmp(p, ix->string)) {
				any = true;
				bool dup = false;
				for (const cJSON *d = o->child; d && !dup; d = d->next)
					dup = !strcmp(d->valuestring, ix->string);
				if (!dup)
					cJSON_AddItemToArray(o, cJSON_CreateString(ix->string));
			}
		}
		if (any || pattern)
			continue;
		bool alias = false;
		for (const cJSON *ix = work->child; ix && !alias; ix = ix->next)
			alias = cJSON_GetObjectItemCaseSensitive(ix, p) != NULL;
		cJSON_Delete(o);
		if (alias)
			return cm_error_set(
			    err, CM_EINVAL,
			    "The provided expression [%s] matches an alias, specify the "
			    "corresponding concrete indices instead.",
			    p);
		return cm_error_set(err, CM_ENOINDEX, "no such index [%s]", p);
	}
	*out = o;
	return CM_OK;
}

static cm_err
plan_action(cJSON *work, cJSON *drop, const cJSON *act, cm_error *err)
{
	if (!cJSON_IsObject(act) || !act->child || act->child->next)
		return cm_error_set(err, CM_EPARSE,
		                    "[aliases] each action must be an object with one of [add], "
		                    "[remove] or [remove_index]");
	const char *kind = act->child->string;
	const cJSON *spec = act->child;
	cJSON *ixn = NULL, *idx = NULL, *aln = NULL;
	cm_err rc;
	if (!cJSON_IsObject(spec))
		return cm_error_set(err, CM_EPARSE, "[%s] must be an object", kind);
	if (strcmp(kind, "add") && strcmp(kind, "remove") && strcmp(kind, "remove_index"))
		return cm_error_set(err, CM_EPARSE, "[aliases] unknown action [%s]", kind);
	if ((rc = names_of(spec, "index", "indices", &ixn, err)))
		return rc;
	if ((rc = resolve_indices(work, ixn, &idx, err)))
		goto done;
	if (!strcmp(kind, "remove_index")) {
		for (const cJSON *c = spec->child; c; c = c->next)
			if (strcmp(c->string, "index") && strcmp(c->string, "indices")) {
				rc = cm_error_set(err, CM_EPARSE,
				                  "[remove_index] unknown field [%s]", c->string);
				goto done;
			}
		for (const cJSON *i = idx->child; i; i = i->next) {
			cJSON_AddItemToArray(drop, cJSON_CreateString(i->valuestring));
			cJSON_DeleteItemFromObjectCaseSensitive(work, i->valuestring);
		}
		goto done;
	}
	if ((rc = names_of(spec, "alias", "aliases", &aln, err)))
		goto done;
	if (!strcmp(kind, "add")) {
		cJSON *opts = cJSON_Duplicate(spec, true);
		static const char *const drop_keys[] = {"index", "indices", "alias", "aliases",
		                                        "must_exist"};
		for (size_t k = 0; k < sizeof(drop_keys) / sizeof(drop_keys[0]); k++)
			cJSON_DeleteItemFromObjectCaseSensitive(opts, drop_keys[k]);
		for (const cJSON *a = aln->child; a && !rc; a = a->next) {
			cJSON *entry;
			if ((rc = nd_alias_entry(a->valuestring, opts, &entry, err)))
				break;
			for (const cJSON *i = idx->child; i; i = i->next) {
				cJSON *set = cJSON_GetObjectItemCaseSensitive(work, i->valuestring);
				cJSON_DeleteItemFromObjectCaseSensitive(set, a->valuestring);
				cJSON_AddItemToObject(set, a->valuestring,
				                      cJSON_Duplicate(entry, true));
			}
			cJSON_Delete(entry);
		}
		cJSON_Delete(opts);
		goto done;
	}
	/* remove: patterns allowed; nothing removed at all is a 404 */
	bool any = false;
	const cJSON *must = cJSON_GetObjectItemCaseSensitive(spec, "must_exist");
	for (const cJSON *i = idx->child; i; i = i->next) {
		cJSON *set = cJSON_GetObjectItemCaseSensitive(work, i->valuestring), *next;
		for (cJSON *c = set->child; c; c = next) {
			next = c->next;
			for (const cJSON *a = aln->child; a; a = a->next)
				if (cm_glob(a->valuestring, c->string) ||
				    !strcmp(a->valuestring, "_all")) {
					cJSON_Delete(cJSON_DetachItemViaPointer(set, c));
					any = true;
					break;
				}
		}
	}
	if (!any && !cJSON_IsFalse(must)) {
		char names[400] = "";
		for (const cJSON *a = aln->child; a; a = a->next) {
			size_t l = strlen(names);
			snprintf(names + l, sizeof(names) - l, "%s%s", l ? "," : "",
			         a->valuestring);
		}
		rc = cm_error_set_type(err, CM_ENOTFOUND, "aliases_not_found_exception",
		                       "aliases [%s] missing", names);
	}
done:
	cJSON_Delete(ixn);
	cJSON_Delete(idx);
	cJSON_Delete(aln);
	return rc;
}

/* No alias named like an index; at most one write index per alias. */
static cm_err
plan_check(const cJSON *work, cm_error *err)
{
	for (const cJSON *ix = work->child; ix; ix = ix->next)
		for (const cJSON *a = ix->child; a; a = a->next) {
			if (cJSON_GetObjectItemCaseSensitive(work, a->string))
				return cm_error_set_type(
				    err, CM_EINVAL, "invalid_alias_name_exception",
				    "Invalid alias name [%s]: an index or data stream "
				    "exists with the same name as the alias",
				    a->string);
			int writers = 0;
			char list[400] = "";
			for (const cJSON *j = work->child; j; j = j->next) {
				const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, a->string);
				if (e && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
				             e, "is_write_index"))) {
					size_t l = strlen(list);
					snprintf(list + l, sizeof(list) - l, "%s%s",
					         writers ? ", " : "", j->string);
					writers++;
				}
			}
			if (writers > 1)
				return cm_error_set_type(
				    err, CM_EINVAL, "illegal_state_exception",
				    "alias [%s] has more than one write index [%s]", a->string,
				    list);
		}
	return CM_OK;
}

cm_err
nd_alias_plan(nd_node *n, const cJSON *actions, cJSON **plan, cm_error *err)
{
	nd_index **all;
	size_t nall;
	cm_err rc = CM_OK;
	*plan = NULL;
	if (!cJSON_IsArray(actions) || !cJSON_GetArraySize(actions))
		return cm_error_set(err, CM_EVALIDATE,
		                    "Validation Failed: 1: At least one action is required;");
	cJSON *work = cJSON_CreateObject(), *before, *drop = cJSON_CreateArray();
	nd_index_list(n, &all, &nall);
	for (size_t i = 0; i < nall; i++) {
		cJSON_AddItemToObject(work, nd_index_name(all[i]), nd_index_aliases_json(all[i]));
		nd_index_release(all[i]);
	}
	cm_free(MEM, all);
	before = cJSON_Duplicate(work, true);
	for (const cJSON *a = actions->child; a && !rc; a = a->next)
		rc = plan_action(work, drop, a, err);
	if (!rc)
		rc = plan_check(work, err);
	if (!rc) {
		cJSON *p = cJSON_CreateObject(), *set = cJSON_AddObjectToObject(p, "set");
		for (const cJSON *ix = work->child; ix; ix = ix->next) {
			const cJSON *old = cJSON_GetObjectItemCaseSensitive(before, ix->string);
			if (!old || !cJSON_Compare(old, ix, true))
				cJSON_AddItemToObject(set, ix->string, cJSON_Duplicate(ix, true));
		}
		cJSON_AddItemToObject(p, "drop", drop);
		drop = NULL;
		*plan = p;
	}
	cJSON_Delete(drop);
	cJSON_Delete(work);
	cJSON_Delete(before);
	return rc;
}

/* Solo nodes: one alias change at a time, so two cannot both pass the
 * write-index check. */
static pthread_mutex_t solo_lock = PTHREAD_MUTEX_INITIALIZER;

cm_err
nd_alias_update(nd_node *n, const cJSON *actions, cm_error *err)
{
	cJSON *plan;
	pthread_mutex_lock(&solo_lock);
	cm_err rc = nd_alias_plan(n, actions, &plan, err);
	if (rc) {
		pthread_mutex_unlock(&solo_lock);
		return rc;
	}
	const cJSON *c;
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(plan, "drop"))
	{
		nd_index *ix = nd_index_get(n, c->valuestring);
		cm_error e2;
		cm_error_clear(&e2);
		if (ix)
			nd_index_delete(n, ix, &e2);
		nd_index_release(ix);
	}
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(plan, "set"))
	{
		nd_index *ix = nd_index_get(n, c->string);
		if (ix && !rc)
			rc = set_aliases(ix, c, err);
		nd_index_release(ix);
	}
	pthread_mutex_unlock(&solo_lock);
	cJSON_Delete(plan);
	return rc;
}

cm_err
nd_alias_master(nd_node *n, rp_state *next, const cJSON *actions, cm_error *err)
{
	cJSON *plan;
	cm_err rc = nd_alias_plan(n, actions, &plan, err);
	if (rc)
		return rc;
	const cJSON *c;
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(plan, "set"))
	{
		rp_index *e = rp_state_index(next, c->string);
		if (!e)
			continue;
		cJSON *body = e->body && *e->body ? cJSON_Parse(e->body) : NULL;
		if (!cJSON_IsObject(body)) {
			cJSON_Delete(body);
			body = cJSON_CreateObject();
		}
		cJSON_DeleteItemFromObjectCaseSensitive(body, "aliases");
		cJSON_AddItemToObject(body, "aliases", cJSON_Duplicate(c, true));
		char *t = cJSON_PrintUnformatted(body);
		rp_index_set_text(&e->body, t ? t : "{}");
		cJSON_free(t);
		cJSON_Delete(body);
	}
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(plan, "drop"))
	    rp_state_remove_index(next, c->valuestring);
	cJSON_Delete(plan);
	return CM_OK;
}

cm_err
nd_alias_create_check(nd_node *n, const char *name, const cJSON *aliases, cm_error *err)
{
	/* the index is in no registry yet: checked against the others */
	if (nd_alias_exists(n, name))
		return cm_error_set(err, CM_EBADNAME,
		                    "Invalid index name [%s], already exists as alias", name);
	cm_err rc = CM_OK;
	for (const cJSON *a = aliases ? aliases->child : NULL; a && !rc; a = a->next) {
		nd_index *same = nd_index_get(n, a->string);
		if (same || !strcmp(a->string, name))
			rc = cm_error_set_type(
			    err, CM_EINVAL, "invalid_alias_name_exception",
			    "Invalid alias name [%s]: an index or data stream exists "
			    "with the same name as the alias",
			    a->string);
		nd_index_release(same);
		if (!rc && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "is_write_index"))) {
			nd_index *w = NULL;
			member *m;
			size_t k = members(n, a->string, &m);
			for (size_t i = 0; i < k; i++)
				if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
				        m[i].entry, "is_write_index")))
					w = m[i].ix;
			if (w)
				rc = cm_error_set_type(
				    err, CM_EINVAL, "illegal_state_exception",
				    "alias [%s] has more than one write index [%s, %s]", a->string,
				    nd_index_name(w), name);
			members_free(m, k);
		}
	}
	return rc;
}
