/* Mappings: Elasticsearch 7 mapping JSON in and out, lookup by path, and
 * merging a new version from a base plus additions with ES's conflict
 * rules. A mapping is immutable once built; versions are shared by
 * reference count. */
#include "st_types.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"

/* The most fields a mapping may have whatever index.mapping.total_fields.limit
 * says (the index enforces that setting, default 1000, below this). */
#define MAX_TOTAL_FIELDS 10000
#define MAX_DEPTH 20          /* index.mapping.depth.limit */
#define MAX_PATH 1024         /* bytes in a dotted path */

/* ---- field definitions ---- */

static void
fdef_free(st_field_def *f)
{
	cm_free(CM_MEM_STORAGE, f->path);
	cm_free(CM_MEM_STORAGE, f->parent);
	cm_free(CM_MEM_STORAGE, f->format);
	cm_free(CM_MEM_STORAGE, f->null_value);
	cm_free(CM_MEM_STORAGE, f->meta);
	for (int i = 0; i < f->ncopy_to; i++)
		cm_free(CM_MEM_STORAGE, f->copy_to[i]);
	cm_free(CM_MEM_STORAGE, f->copy_to);
}

static void
fdef_copy(st_field_def *dst, const st_field_def *src)
{
	*dst = *src;
	dst->path = cm_strdup(CM_MEM_STORAGE, src->path);
	dst->parent = src->parent ? cm_strdup(CM_MEM_STORAGE, src->parent) : NULL;
	dst->format = src->format ? cm_strdup(CM_MEM_STORAGE, src->format) : NULL;
	dst->null_value = src->null_value ? cm_strdup(CM_MEM_STORAGE, src->null_value) : NULL;
	dst->meta = src->meta ? cm_strdup(CM_MEM_STORAGE, src->meta) : NULL;
	dst->copy_to = NULL;
	if (src->ncopy_to > 0) {
		dst->copy_to = cm_malloc(CM_MEM_STORAGE, (size_t)src->ncopy_to * sizeof(char *));
		for (int i = 0; i < src->ncopy_to; i++)
			dst->copy_to[i] = cm_strdup(CM_MEM_STORAGE, src->copy_to[i]);
	}
}

#define MAX_COPY_TO 16

/* "copy_to": "a" or ["a", "b"]. Replaces any earlier list. */
static bool
parse_copy_to(st_field_def *f, const cJSON *v)
{
	const cJSON *it;
	int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
	if (n < 0 || n > MAX_COPY_TO)
		return false;
	if (cJSON_IsArray(v)) {
		cJSON_ArrayForEach(it, v)
		{
			if (!cJSON_IsString(it) || it->valuestring[0] == '\0' ||
			    strlen(it->valuestring) > MAX_PATH)
				return false;
		}
	} else if (v->valuestring[0] == '\0' || strlen(v->valuestring) > MAX_PATH) {
		return false;
	}
	for (int i = 0; i < f->ncopy_to; i++)
		cm_free(CM_MEM_STORAGE, f->copy_to[i]);
	cm_free(CM_MEM_STORAGE, f->copy_to);
	f->copy_to = n ? cm_malloc(CM_MEM_STORAGE, (size_t)n * sizeof(char *)) : NULL;
	f->ncopy_to = 0;
	if (cJSON_IsString(v)) {
		f->copy_to[f->ncopy_to++] = cm_strdup(CM_MEM_STORAGE, v->valuestring);
	} else {
		cJSON_ArrayForEach(it, v) f->copy_to[f->ncopy_to++] =
		    cm_strdup(CM_MEM_STORAGE, it->valuestring);
	}
	return true;
}

static bool
copy_to_equal(const st_field_def *a, const st_field_def *b)
{
	if (a->ncopy_to != b->ncopy_to)
		return false;
	for (int i = 0; i < a->ncopy_to; i++)
		if (strcmp(a->copy_to[i], b->copy_to[i]) != 0)
			return false;
	return true;
}

static bool json_bool(const cJSON *v, bool *out);
static const char *json_kind(const cJSON *v);

static void
strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cm_free(CM_MEM_STORAGE, v[i]);
	cm_free(CM_MEM_STORAGE, v);
}

static char **
strv_copy(char *const *v, size_t n)
{
	if (n == 0)
		return NULL;
	char **o = cm_malloc(CM_MEM_STORAGE, n * sizeof(char *));
	for (size_t i = 0; i < n; i++)
		o[i] = cm_strdup(CM_MEM_STORAGE, v[i]);
	return o;
}

static bool
strv_eq(char *const *a, size_t na, char *const *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (strcmp(a[i], b[i]) != 0)
			return false;
	return true;
}

/* The root "_source" object: enabled, includes, excludes. */
typedef struct {
	bool set, disabled;
	char **inc, **exc;
	size_t ninc, nexc;
} source_opts;

static bool
source_list(const cJSON *v, char ***out, size_t *n)
{
	if (cJSON_IsString(v)) {
		*out = cm_malloc(CM_MEM_STORAGE, sizeof(char *));
		(*out)[0] = cm_strdup(CM_MEM_STORAGE, v->valuestring);
		*n = 1;
		return true;
	}
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > 1024)
		return false;
	const cJSON *e;
	cJSON_ArrayForEach(e, v) if (!cJSON_IsString(e)) return false;
	size_t k = (size_t)cJSON_GetArraySize(v);
	*out = k ? cm_malloc(CM_MEM_STORAGE, k * sizeof(char *)) : NULL;
	*n = 0;
	cJSON_ArrayForEach(e, v)(*out)[(*n)++] = cm_strdup(CM_MEM_STORAGE, e->valuestring);
	return true;
}

static cm_err
parse_source(const cJSON *j, source_opts *o, cm_error *err)
{
	if (!cJSON_IsObject(j))
		return cm_error_set(err, CM_EMAPPING,
		                    "Failed to parse mapping: [_source] must be an object, got %s",
		                    json_kind(j));
	o->set = true;
	const cJSON *it;
	cJSON_ArrayForEach(it, j)
	{
		const char *k = it->string;
		bool ok;
		if (strcmp(k, "enabled") == 0) {
			bool en = true;
			ok = json_bool(it, &en);
			o->disabled = !en;
		} else if (strcmp(k, "includes") == 0 && !o->inc) {
			ok = source_list(it, &o->inc, &o->ninc);
		} else if (strcmp(k, "excludes") == 0 && !o->exc) {
			ok = source_list(it, &o->exc, &o->nexc);
		} else {
			return cm_error_set(err, CM_EMAPPING,
			                    "unknown parameter [%s] on mapper [_source] of type [_source]",
			                    k);
		}
		if (!ok)
			return cm_error_set(err, CM_EMAPPING,
			                    "Failed to parse mapping: invalid value for [%s] on [_source]",
			                    k);
	}
	return CM_OK;
}

static void
fdef_init(st_field_def *f, st_field_type type)
{
	memset(f, 0, sizeof(*f));
	f->type = type;
	f->analyzer = ST_AN_STANDARD;
	f->search_analyzer = ST_AN_STANDARD;
	f->index = type != ST_FT_BINARY; /* binary: kept in _source only */
	f->doc_values = type != ST_FT_TEXT && type != ST_FT_OBJECT && type != ST_FT_BINARY;
	f->dynamic = ST_DYNAMIC_TRUE;
}

/* A growable list of definitions being built; owns them. */
typedef struct {
	st_field_def *v;
	size_t n, cap;
	const st_analysis *an; /* resolves custom analyzer names (may be NULL) */
} fbuf;

static st_field_def *
fbuf_push(fbuf *b)
{
	if (b->n == b->cap) {
		b->cap = b->cap ? b->cap * 2 : 16;
		b->v = cm_realloc(CM_MEM_STORAGE, b->v, b->cap * sizeof(*b->v));
	}
	return &b->v[b->n++];
}

static void
fbuf_free(fbuf *b)
{
	for (size_t i = 0; i < b->n; i++)
		fdef_free(&b->v[i]);
	cm_free(CM_MEM_STORAGE, b->v);
	b->v = NULL;
	b->n = b->cap = 0;
}

static st_field_def *
fbuf_find(fbuf *b, const char *path, size_t len)
{
	/* unsorted while building; mappings are small (<= 10000 fields) */
	for (size_t i = 0; i < b->n; i++)
		if (strlen(b->v[i].path) == len && memcmp(b->v[i].path, path, len) == 0)
			return &b->v[i];
	return NULL;
}

static int
fdef_cmp(const void *a, const void *b)
{
	return strcmp(((const st_field_def *)a)->path, ((const st_field_def *)b)->path);
}

/* ---- mapping objects ---- */

st_mapping *
st_mapping_new(void)
{
	st_mapping *m = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*m));
	m->dynamic = ST_DYNAMIC_TRUE;
	m->refs = 1;
	return m;
}

st_mapping *
st_mapping_ref(st_mapping *m)
{
	if (m != NULL)
		__atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
	return m;
}

void
st_mapping_unref(st_mapping *m)
{
	if (m == NULL || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	for (size_t i = 0; i < m->nfields; i++)
		fdef_free(&m->fields[i]);
	cm_free(CM_MEM_STORAGE, m->fields);
	strv_free(m->source_includes, m->nsource_includes);
	strv_free(m->source_excludes, m->nsource_excludes);
	cm_free(CM_MEM_STORAGE, m->dynamic_templates);
	st_analysis_unref(m->analysis);
	cm_free(CM_MEM_STORAGE, m);
}

bool
st_mapping_source_filtered(const st_mapping *m)
{
	return m && (m->source_disabled || m->nsource_includes || m->nsource_excludes);
}

/* Binary search on (path, len) so prefixes resolve without a copy. */
static const st_field_def *
find_len(const st_mapping *m, const char *path, size_t len)
{
	size_t lo = 0, hi = m->nfields;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *p = m->fields[mid].path;
		int c = strncmp(p, path, len);
		if (c == 0)
			c = p[len] != '\0'; /* p is longer: sorts after */
		if (c == 0)
			return &m->fields[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const st_field_def *
st_mapping_flattened_owner(const st_mapping *m, const char *path)
{
	if (!m || !path)
		return NULL;
	for (const char *dot = strchr(path, '.'); dot; dot = strchr(dot + 1, '.')) {
		const st_field_def *f = find_len(m, path, (size_t)(dot - path));
		if (f && f->type == ST_FT_FLATTENED)
			return dot[1] ? f : NULL;
		if (f && f->type != ST_FT_OBJECT)
			return NULL;
	}
	return NULL;
}

const st_field_def *
st_mapping_find(const st_mapping *m, const char *path)
{
	if (m == NULL || path == NULL)
		return NULL;
	return find_len(m, path, strlen(path));
}

/* Sorts b's fields, resolves inherited "dynamic" and checks the limits,
 * then moves them into a new mapping. */
static cm_err
finish(fbuf *b, st_dynamic root_dynamic, bool root_set, st_mapping **out, cm_error *err)
{
	if (b->n > 1)
		qsort(b->v, b->n, sizeof(*b->v), fdef_cmp);
	if (b->n > MAX_TOTAL_FIELDS)
		return cm_error_set(err, CM_EINVAL, "Limit of total fields [%d] has been exceeded",
		                    MAX_TOTAL_FIELDS);
	st_mapping *m = st_mapping_new();
	m->fields = b->v;
	m->nfields = b->n;
	m->dynamic = root_dynamic;
	m->dynamic_set = root_set;
	b->v = NULL;
	b->n = b->cap = 0;
	/* parents sort before children, so one pass resolves inheritance */
	for (size_t i = 0; i < m->nfields; i++) {
		st_field_def *f = &m->fields[i];
		if (f->type != ST_FT_OBJECT)
			continue;
		int depth = 1;
		for (const char *p = f->path; *p; p++)
			depth += *p == '.';
		if (depth > MAX_DEPTH) {
			st_mapping_unref(m);
			return cm_error_set(err, CM_EINVAL,
			                    "Limit of mapping depth [%d] has been exceeded due to "
			                    "object field [%s]",
			                    MAX_DEPTH, f->path);
		}
		if (f->dynamic_set)
			continue;
		const char *dot = strrchr(f->path, '.');
		const st_field_def *up = dot ? find_len(m, f->path, (size_t)(dot - f->path)) : NULL;
		f->dynamic = up && up->type == ST_FT_OBJECT ? up->dynamic : m->dynamic;
	}
	*out = m;
	return CM_OK;
}

/* ---- JSON in ---- */

static bool
json_bool(const cJSON *v, bool *out)
{
	if (cJSON_IsBool(v)) {
		*out = cJSON_IsTrue(v);
		return true;
	}
	if (cJSON_IsString(v) && strcmp(v->valuestring, "true") == 0) {
		*out = true;
		return true;
	}
	if (cJSON_IsString(v) && strcmp(v->valuestring, "false") == 0) {
		*out = false;
		return true;
	}
	return false;
}

static bool
json_dynamic(const cJSON *v, st_dynamic *out)
{
	bool b;
	if (json_bool(v, &b)) {
		*out = b ? ST_DYNAMIC_TRUE : ST_DYNAMIC_FALSE;
		return true;
	}
	if (cJSON_IsString(v) && strcmp(v->valuestring, "strict") == 0) {
		*out = ST_DYNAMIC_STRICT;
		return true;
	}
	return false;
}

static const char *
json_kind(const cJSON *v)
{
	if (cJSON_IsObject(v))
		return "an object";
	if (cJSON_IsArray(v))
		return "an array";
	if (cJSON_IsString(v))
		return "a string";
	if (cJSON_IsNumber(v))
		return "a number";
	if (cJSON_IsBool(v))
		return "a boolean";
	return "null";
}

/* Adds f (taking its strings) unless the path exists: then it must be the
 * same object, else it is a conflict within one mapping body. */
static cm_err
add_def(fbuf *b, st_field_def *f, cm_error *err)
{
	st_field_def *old = fbuf_find(b, f->path, strlen(f->path));
	if (old != NULL) {
		if (old->type == ST_FT_OBJECT && f->type == ST_FT_OBJECT) {
			if (f->dynamic_set) {
				old->dynamic = f->dynamic;
				old->dynamic_set = true;
			}
			old->implied &= f->implied;
			if (f->nested) {
				old->nested = true;
				old->include_in_parent = f->include_in_parent;
				old->include_in_root = f->include_in_root;
			}
			fdef_free(f);
			return CM_OK;
		}
		cm_error_set(err, CM_EMAPPING, "mapper [%s] is defined more than once", f->path);
		fdef_free(f);
		return CM_EMAPPING;
	}
	*fbuf_push(b) = *f;
	return CM_OK;
}

static cm_err
check_name(const char *name, const char *where, bool allow_dots, cm_error *err)
{
	if (*name == '\0')
		return cm_error_set_type(err, CM_EINVAL, "illegal_argument_exception",
		                         "field name cannot be an empty string");
	bool blank = true;
	for (const char *p = name; *p; p++)
		blank &= isspace((unsigned char)*p) != 0;
	if (blank)
		return cm_error_set(err, CM_EMAPPING,
		                    "field name cannot contain only whitespace: ['%s']", name);
	if (!allow_dots && strchr(name, '.') != NULL)
		return cm_error_set(
		    err, CM_EMAPPING,
		    "Field name [%s] which is a multi field of [%s] cannot contain '.'", name,
		    where);
	size_t n = strlen(name);
	if (name[0] == '.' || name[n - 1] == '.' || strstr(name, "..") != NULL)
		return cm_error_set(err, CM_EMAPPING, "Invalid field name [%s]", name);
	/* Each part of a dotted name is a field name of its own ("a. " would
	 * map a field " ", which renders back as something else). */
	for (const char *part = name; allow_dots && part;) {
		const char *dot = strchr(part, '.');
		size_t len = dot ? (size_t)(dot - part) : strlen(part);
		bool sp = true;
		for (size_t i = 0; i < len; i++)
			sp &= isspace((unsigned char)part[i]) != 0;
		if (sp)
			return cm_error_set(err, CM_EMAPPING,
			                    "field name cannot contain only whitespace: ['%s']", name);
		part = dot ? dot + 1 : NULL;
	}
	return CM_OK;
}

static char *
join_path(const char *prefix, const char *name, size_t name_len)
{
	size_t pn = prefix ? strlen(prefix) : 0;
	char *p = cm_malloc(CM_MEM_STORAGE, pn + 1 + name_len + 1);
	if (pn) {
		memcpy(p, prefix, pn);
		p[pn++] = '.';
	}
	memcpy(p + pn, name, name_len);
	p[pn + name_len] = '\0';
	return p;
}

/* The null_value must be a value the field itself would accept. */
static bool
null_value_valid(const st_field_def *f)
{
	const char *v = f->null_value;
	int64_t ms;
	char *end;
	switch (f->type) {
	case ST_FT_KEYWORD:
	case ST_FT_FLATTENED:
		return true;
	case ST_FT_BOOLEAN:
		return strcmp(v, "true") == 0 || strcmp(v, "false") == 0;
	case ST_FT_DATE:
		return st_date_parse(v, strlen(v), f->format, &ms);
	case ST_FT_DATE_NANOS:
		return st_date_parse_ns(v, strlen(v), f->format, &ms);
	case ST_FT_IP: {
		uint8_t ip[ST_IP_LEN];
		return st_ip_parse(v, strlen(v), ip);
	}
	default:
		if (*v == '\0')
			return false;
		strtod(v, &end);
		return *end == '\0';
	}
}

static cm_err parse_properties(fbuf *b, const char *prefix, const cJSON *props, int depth,
                               cm_error *err);

/* A field's "meta": at most 5 string entries, keys up to 20 and values
 * up to 50 characters (ES's limits and messages). */
static cm_err
parse_meta(st_field_def *f, const cJSON *v, cm_error *err)
{
	const cJSON *e;
	if (!cJSON_IsObject(v))
		return cm_error_set(err, CM_EMAPPING,
		                    "Failed to parse mapping: [meta] must be an object, got %s on "
		                    "field [%s]",
		                    json_kind(v), f->path);
	if (cJSON_GetArraySize(v) > 5)
		return cm_error_set(err, CM_EMAPPING,
		                    "Failed to parse mapping: [meta] can't have more than 5 entries, "
		                    "but got %d on field [%s]",
		                    cJSON_GetArraySize(v), f->path);
	cJSON_ArrayForEach(e, v)
	{
		if (strlen(e->string) > 20)
			return cm_error_set(err, CM_EMAPPING,
			                    "Failed to parse mapping: [meta] keys can't be longer than 20 "
			                    "chars, but got [%.60s] for field [%s]",
			                    e->string, f->path);
		if (!cJSON_IsString(e))
			return cm_error_set(err, CM_EMAPPING,
			                    "Failed to parse mapping: [meta] values can only be strings, "
			                    "but got %s for field [%s]",
			                    json_kind(e), f->path);
		if (strlen(e->valuestring) > 50)
			return cm_error_set(err, CM_EMAPPING,
			                    "Failed to parse mapping: [meta] values can't be longer than 50 "
			                    "chars, but got [%.60s] for field [%s]",
			                    e->valuestring, f->path);
	}
	char *text = cJSON_PrintUnformatted(v);
	cm_free(CM_MEM_STORAGE, f->meta);
	f->meta = cm_strdup(CM_MEM_STORAGE, text);
	free(text);
	return CM_OK;
}

/* One mapper: `spec` is its JSON object. `source` is the field whose
 * values a multi-field copies (NULL for a top-level or object field). */
/* The parameters a completion field takes (contexts are not built). */
static bool
completion_param(const char *k)
{
	static const char *const ok[] = {"analyzer",
	                                 "search_analyzer",
	                                 "max_input_length",
	                                 "preserve_separators",
	                                 "preserve_position_increments",
	                                 "meta"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcmp(k, ok[i]))
			return true;
	return false;
}

static cm_err
parse_field(fbuf *b, char *path, const char *source, const cJSON *spec, int depth, cm_error *err)
{
	st_field_def f;
	const cJSON *type_j = cJSON_GetObjectItemCaseSensitive(spec, "type");
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(spec, "properties");
	const cJSON *fields = NULL;
	st_field_type type;
	bool nested = false;
	if (!cJSON_IsObject(spec)) {
		cm_error_set(err, CM_EMAPPING,
		             "Expected map for property [fields] on field [%s] but got %s", path,
		             json_kind(spec));
		goto fail;
	}
	if (depth > MAX_DEPTH + 1) {
		cm_error_set(
		    err, CM_EINVAL,
		    "Limit of mapping depth [%d] has been exceeded due to object field [%s]",
		    MAX_DEPTH, path);
		goto fail;
	}
	if (type_j == NULL) {
		if (props == NULL && source == NULL &&
		    cJSON_GetObjectItemCaseSensitive(spec, "enabled") == NULL &&
		    cJSON_GetObjectItemCaseSensitive(spec, "dynamic") == NULL) {
			cm_error_set(err, CM_EMAPPING, "No type specified for field [%s]", path);
			goto fail;
		}
		type = ST_FT_OBJECT;
		if (source != NULL) {
			cm_error_set(err, CM_EMAPPING, "No type specified for field [%s]", path);
			goto fail;
		}
	} else if (!cJSON_IsString(type_j)) {
		cm_error_set(err, CM_EMAPPING, "No type specified for field [%s]", path);
		goto fail;
	} else if (strcmp(type_j->valuestring, "nested") == 0) {
		type = ST_FT_OBJECT;
		nested = true;
		if (source != NULL) {
			cm_error_set(err, CM_EMAPPING,
			             "Type [nested] cannot be used in multi field");
			goto fail;
		}
	} else if (!st_field_type_from_name(type_j->valuestring, &type)) {
		cm_error_set(err, CM_EMAPPING, "No handler for type [%s] declared on field [%s]",
		             type_j->valuestring, path);
		goto fail;
	}
	if (type == ST_FT_OBJECT && source != NULL) {
		cm_error_set(err, CM_EMAPPING, "Type [object] cannot be used in multi field");
		goto fail;
	}
	fdef_init(&f, type);
	f.nested = nested;
	f.path = path;
	path = NULL; /* owned by f now */
	bool search_analyzer_set = false, analyzer_set = false;
	const cJSON *it;
	cJSON_ArrayForEach(it, spec)
	{
		const char *k = it->string;
		bool ok = true, known = true;
		if (strcmp(k, "type") == 0) {
			continue;
		} else if (type == ST_FT_COMPLETION && !completion_param(k)) {
			if (strcmp(k, "contexts") == 0)
				cm_error_set(
				    err, CM_EMAPPING,
				    "[contexts] of completion field [%s] are not supported",
				    f.path);
			else
				cm_error_set(
				    err, CM_EMAPPING,
				    "unknown parameter [%s] on mapper [%s] of type [completion]", k,
				    f.path);
			goto fail_f;
		} else if (strcmp(k, "max_input_length") == 0 && type == ST_FT_COMPLETION) {
			ok = cJSON_IsNumber(it) &&
			     it->valuedouble == (double)(int)it->valuedouble && it->valuedouble > 0;
			if (ok)
				f.max_input_length = (int)it->valuedouble;
		} else if (type == ST_FT_COMPLETION &&
		           (strcmp(k, "preserve_separators") == 0 ||
		            strcmp(k, "preserve_position_increments") == 0)) {
			bool on = true;
			ok = json_bool(it, &on);
			if (ok && !on) {
				cm_error_set(
				    err, CM_EMAPPING,
				    "[%s: false] of completion field [%s] is not supported", k,
				    f.path);
				goto fail_f;
			}
		} else if (strcmp(k, "analyzer") == 0 &&
		           (type == ST_FT_TEXT || type == ST_FT_COMPLETION)) {
			ok = cJSON_IsString(it);
			analyzer_set = true;
			if (ok && !st_analysis_resolve(b->an, it->valuestring, &f.analyzer,
			                               &f.custom_analyzer)) {
				cm_error_set(err, CM_EMAPPING,
				             "analyzer [%s] has not been configured in mappings",
				             it->valuestring);
				goto fail_f;
			}
		} else if (strcmp(k, "search_analyzer") == 0 &&
		           (type == ST_FT_TEXT || type == ST_FT_COMPLETION)) {
			ok = cJSON_IsString(it);
			if (ok && !st_analysis_resolve(b->an, it->valuestring, &f.search_analyzer,
			                               &f.custom_search_analyzer)) {
				cm_error_set(err, CM_EMAPPING,
				             "analyzer [%s] has not been configured in mappings",
				             it->valuestring);
				goto fail_f;
			}
			search_analyzer_set = true;
		} else if (strcmp(k, "normalizer") == 0 && type == ST_FT_KEYWORD) {
			ok = cJSON_IsString(it) || cJSON_IsNull(it);
			if (ok && cJSON_IsString(it) &&
			    !(f.normalizer = st_analysis_normalizer(b->an, it->valuestring))) {
				cm_error_set(err, CM_EMAPPING,
				             "normalizer [%s] not found for field [%s]",
				             it->valuestring, f.path);
				goto fail_f;
			}
		} else if (strcmp(k, "depth_limit") == 0 && type == ST_FT_FLATTENED) {
			ok = cJSON_IsNumber(it) && it->valuedouble == (double)(int)it->valuedouble;
			if (ok && it->valuedouble < 1) {
				cm_error_set(err, CM_EMAPPING,
				             "[depth_limit] must be positive, got [%d]",
				             (int)it->valuedouble);
				goto fail_f;
			}
			if (ok)
				f.depth_limit = (int)it->valuedouble;
		} else if (strcmp(k, "ignore_above") == 0 &&
		           (type == ST_FT_KEYWORD || type == ST_FT_FLATTENED)) {
			ok = cJSON_IsNumber(it) && it->valuedouble == (double)(int)it->valuedouble;
			if (ok && it->valuedouble < 0) {
				cm_error_set(err, CM_EMAPPING,
				             "[ignore_above] must be positive, got [%d]",
				             (int)it->valuedouble);
				goto fail_f;
			}
			if (ok)
				f.ignore_above = (int)it->valuedouble;
		} else if (strcmp(k, "index") == 0 && type != ST_FT_OBJECT &&
		           type != ST_FT_BINARY) {
			ok = json_bool(it, &f.index);
		} else if (strcmp(k, "doc_values") == 0 &&
		           (type == ST_FT_GEO_POINT || type == ST_FT_BINARY)) {
			/* accepted and echoed; geo_point queries read the column, so it
			 * is kept, and binary keeps none (docs/api.md, field types) */
			bool dv = false;
			ok = json_bool(it, &dv);
			f.doc_values_shown = dv ? 1 : 2;
		} else if (strcmp(k, "ignore_z_value") == 0 && type == ST_FT_GEO_POINT) {
			bool z = true;
			ok = json_bool(it, &z) && z; /* a third coordinate is always dropped */
		} else if (strcmp(k, "doc_values") == 0 && type != ST_FT_OBJECT &&
		           type != ST_FT_TEXT) {
			ok = json_bool(it, &f.doc_values);
		} else if (strcmp(k, "scaling_factor") == 0 && type == ST_FT_SCALED_FLOAT) {
			ok = cJSON_IsNumber(it) || cJSON_IsString(it);
			double sf = 0;
			char *end = NULL;
			if (cJSON_IsNumber(it))
				sf = it->valuedouble;
			else if (ok)
				sf = strtod(it->valuestring, &end);
			if (ok && (end && (*end || end == it->valuestring))) {
				cm_error_set(err, CM_EMAPPING,
				             "Failed to parse mapping: failed to parse [scaling_factor] "
				             "on field [%s]: [%s]",
				             f.path, it->valuestring);
				goto fail_f;
			}
			if (ok && !(isfinite(sf) && sf > 0)) {
				cm_error_set(err, CM_EMAPPING,
				             "Failed to parse mapping: [scaling_factor] must be a positive "
				             "number, got [%g]",
				             sf);
				goto fail_f;
			}
			f.scaling_factor = sf;
		} else if (strcmp(k, "format") == 0 &&
		           (type == ST_FT_DATE || type == ST_FT_DATE_NANOS ||
		            type == ST_FT_DATE_RANGE)) {
			ok = cJSON_IsString(it);
			if (ok && !st_date_format_valid(it->valuestring)) {
				cm_error_set(err, CM_EMAPPING, "Invalid format: [%s]",
				             it->valuestring);
				goto fail_f;
			}
			if (ok && strlen(it->valuestring) > 256)
				ok = false;
			if (ok) {
				/* a repeated key: the last one wins (found by docparse_fuzz) */
				cm_free(CM_MEM_STORAGE, f.format);
				f.format = cm_strdup(CM_MEM_STORAGE, it->valuestring);
			}
		} else if (strcmp(k, "null_value") == 0 && type != ST_FT_OBJECT &&
		           type != ST_FT_TEXT && type != ST_FT_BINARY &&
		           !st_field_type_is_range(type)) {
			if (cJSON_IsNull(it))
				continue;
			char num[64];
			const char *text = NULL;
			if (cJSON_IsString(it) && strlen(it->valuestring) <= 256) {
				text = it->valuestring;
			} else if (cJSON_IsNumber(it)) {
				for (int prec = 15; prec <= 17; prec++) {
					snprintf(num, sizeof(num), "%.*g", prec, it->valuedouble);
					if (strtod(num, NULL) == it->valuedouble)
						break;
				}
				text = num;
			} else if (cJSON_IsBool(it)) {
				text = cJSON_IsTrue(it) ? "true" : "false";
			}
			ok = text != NULL;
			if (ok) {
				cm_free(CM_MEM_STORAGE, f.null_value);
				f.null_value = cm_strdup(CM_MEM_STORAGE, text);
			}
		} else if (strcmp(k, "ignore_malformed") == 0 &&
		           ((st_field_type_is_numeric(type) && type != ST_FT_BOOLEAN) ||
		            type == ST_FT_IP)) {
			ok = json_bool(it, &f.ignore_malformed);
		} else if (strcmp(k, "coerce") == 0 &&
		           ((st_field_type_is_numeric(type) && type != ST_FT_BOOLEAN &&
		             type != ST_FT_DATE && type != ST_FT_DATE_NANOS &&
		             type != ST_FT_GEO_POINT) ||
		            st_field_type_is_range(type))) {
			bool coerce = true;
			ok = json_bool(it, &coerce);
			f.no_coerce = !coerce;
		} else if (strcmp(k, "meta") == 0 && type != ST_FT_OBJECT) {
			if (parse_meta(&f, it, err))
				goto fail_f;
		} else if (strcmp(k, "copy_to") == 0 && type != ST_FT_OBJECT &&
		           !st_field_type_is_range(type) && type != ST_FT_FLATTENED) {
			if (source != NULL) {
				cm_error_set(
				    err, CM_EMAPPING,
				    "[copy_to] may not be used to copy from a multi-field: [%s]",
				    f.path);
				goto fail_f;
			}
			ok = parse_copy_to(&f, it);
		} else if (strcmp(k, "enabled") == 0 && type == ST_FT_OBJECT) {
			bool en = true;
			ok = json_bool(it, &en);
			f.disabled = !en;
		} else if (strcmp(k, "dynamic") == 0 && type == ST_FT_OBJECT) {
			ok = json_dynamic(it, &f.dynamic);
			f.dynamic_set = true;
		} else if (strcmp(k, "properties") == 0 && type == ST_FT_OBJECT) {
			ok = cJSON_IsObject(it);
		} else if (nested && (strcmp(k, "include_in_parent") == 0 ||
		                      strcmp(k, "include_in_root") == 0)) {
			bool v = false;
			ok = json_bool(it, &v);
			if (k[11] == 'p')
				f.include_in_parent = v;
			else
				f.include_in_root = v;
		} else if (strcmp(k, "fields") == 0 && type != ST_FT_OBJECT &&
		           !st_field_type_is_range(type) && type != ST_FT_FLATTENED) {
			ok = cJSON_IsObject(it);
			fields = it;
		} else if (type == ST_FT_TEXT &&
		           (strcmp(k, "index_options") == 0 || strcmp(k, "term_vector") == 0)) {
			const char *const *names =
			    k[0] == 'i' ? st_index_options_names : st_term_vector_names;
			uint8_t at = 0;
			for (uint8_t i = 1; cJSON_IsString(it) && names[i]; i++)
				if (!strcmp(names[i], it->valuestring))
					at = i;
			ok = at != 0;
			if (k[0] == 'i')
				f.index_options = at;
			else
				f.term_vector = at;
		} else if (strcmp(k, "store") == 0 && type != ST_FT_OBJECT) {
			ok = json_bool(it, &f.store);
		} else if (type != ST_FT_OBJECT &&
		           (strcmp(k, "store") == 0 || strcmp(k, "boost") == 0 ||
		            strcmp(k, "similarity") == 0 ||
		            strcmp(k, "eager_global_ordinals") == 0 ||
		            strcmp(k, "index_options") == 0 || strcmp(k, "norms") == 0 ||
		            strcmp(k, "term_vector") == 0 ||
		            strcmp(k, "search_quote_analyzer") == 0 ||
		            (strcmp(k, "fielddata") == 0 && type == ST_FT_TEXT))) {
			/* accepted for compatibility: they tune storage or scoring
			 * details this engine fixes, without changing results */
			continue;
		} else {
			known = false;
		}
		if (!known) {
			cm_error_set(err, CM_EMAPPING,
			             "unknown parameter [%s] on mapper [%s] of type [%s]", k,
			             f.path, nested ? "nested" : st_field_type_name(type));
			goto fail_f;
		}
		if (!ok) {
			cm_error_set(
			    err, CM_EMAPPING,
			    "Failed to parse mapping: invalid value for [%s] on field [%s]", k,
			    f.path);
			goto fail_f;
		}
	}
	/* the index's "default" and "default_search" analyzers, as ES */
	if (type == ST_FT_TEXT && !analyzer_set && st_analysis_analyzer(b->an, "default"))
		st_analysis_resolve(b->an, "default", &f.analyzer, &f.custom_analyzer);
	if (type == ST_FT_TEXT && !search_analyzer_set &&
	    st_analysis_analyzer(b->an, "default_search")) {
		st_analysis_resolve(b->an, "default_search", &f.search_analyzer,
		                    &f.custom_search_analyzer);
		search_analyzer_set = true;
	}
	if (type == ST_FT_COMPLETION) { /* ES's defaults: simple, 50 characters */
		if (!analyzer_set)
			f.analyzer = ST_AN_SIMPLE;
		if (!f.max_input_length)
			f.max_input_length = 50;
		f.doc_values = false;
	}
	if (!search_analyzer_set) {
		f.search_analyzer = f.analyzer;
		f.custom_search_analyzer = f.custom_analyzer;
	}
	if (type == ST_FT_SCALED_FLOAT && f.scaling_factor == 0) {
		cm_error_set(err, CM_EMAPPING,
		             "Failed to parse mapping: Field [scaling_factor] is required");
		goto fail_f;
	}
	if (f.null_value != NULL && !null_value_valid(&f)) {
		cm_error_set(
		    err, CM_EMAPPING,
		    "Failed to parse mapping: Error parsing [null_value] on field [%s]: [%s] is "
		    "not a valid %s",
		    f.path, f.null_value, st_field_type_name(type));
		goto fail_f;
	}
	if (source != NULL)
		f.parent = cm_strdup(CM_MEM_STORAGE, source);
	const char *mypath = f.path; /* stays valid: the buffer owns the string */
	cm_err e = add_def(b, &f, err);
	if (e != CM_OK)
		return e;
	if (type == ST_FT_OBJECT && cJSON_IsObject(props)) {
		e = parse_properties(b, mypath, props, depth + 1, err);
		if (e != CM_OK)
			return e;
	}
	if (fields != NULL) {
		/* multi-fields of multi-fields copy from the same source */
		const char *src = source ? source : mypath;
		char *srccopy = cm_strdup(CM_MEM_STORAGE, src);
		char *base = cm_strdup(CM_MEM_STORAGE, mypath);
		cJSON_ArrayForEach(it, fields)
		{
			e = check_name(it->string, base, false, err);
			if (e == CM_OK && strlen(base) + strlen(it->string) + 1 > MAX_PATH)
				e = cm_error_set(err, CM_EMAPPING, "field path too long: [%s.%s]",
				                 base, it->string);
			if (e == CM_OK)
				e = parse_field(b, join_path(base, it->string, strlen(it->string)),
				                srccopy, it, depth, err);
			if (e != CM_OK)
				break;
		}
		cm_free(CM_MEM_STORAGE, srccopy);
		cm_free(CM_MEM_STORAGE, base);
		return e;
	}
	return CM_OK;
fail_f:
	fdef_free(&f);
	return err && err->code ? err->code : CM_EMAPPING;
fail:
	cm_free(CM_MEM_STORAGE, path);
	return err && err->code ? err->code : CM_EMAPPING;
}

/* "properties": names may hold dots ("a.b"), which ES expands into
 * objects. */
static cm_err
parse_properties(fbuf *b, const char *prefix, const cJSON *props, int depth, cm_error *err)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, props)
	{
		const char *name = it->string;
		cm_err e = check_name(name, prefix, true, err);
		if (e != CM_OK)
			return e;
		if ((prefix ? strlen(prefix) : 0) + strlen(name) + 1 > MAX_PATH)
			return cm_error_set(err, CM_EMAPPING, "field path too long: [%s]", name);
		char *scope = prefix ? cm_strdup(CM_MEM_STORAGE, prefix) : NULL;
		int d = depth;
		const char *seg = name, *dot;
		while ((dot = strchr(seg, '.')) != NULL) {
			char *opath = join_path(scope, seg, (size_t)(dot - seg));
			st_field_def *old = fbuf_find(b, opath, strlen(opath));
			if (old != NULL && old->type != ST_FT_OBJECT) {
				cm_error_set(
				    err, CM_EMAPPING,
				    "can't merge a non object mapping [%s] with an object mapping",
				    opath);
				cm_free(CM_MEM_STORAGE, opath);
				cm_free(CM_MEM_STORAGE, scope);
				return CM_EMAPPING;
			}
			if (old == NULL) {
				st_field_def *o = fbuf_push(b);
				fdef_init(o, ST_FT_OBJECT);
				o->path = cm_strdup(CM_MEM_STORAGE, opath);
				o->implied = true;
			}
			cm_free(CM_MEM_STORAGE, scope);
			scope = opath;
			seg = dot + 1;
			d++;
		}
		e = parse_field(b, join_path(scope, seg, strlen(seg)), NULL, it, d, err);
		cm_free(CM_MEM_STORAGE, scope);
		if (e != CM_OK)
			return e;
	}
	return CM_OK;
}

/* ---- dynamic templates ---- */

static const char *const dt_keys[] = {"match",       "unmatch",        "path_match",
                                      "path_unmatch", "match_mapping_type", "match_pattern",
                                      "mapping"};
static const char *const dt_types[] = {"*",      "string", "long",   "double",
                                       "boolean", "date",  "object", "binary"};

/* Checks "dynamic_templates": [{"name": {match..., "mapping": {...}}}]
 * and keeps it as text. The mapping of a template is checked as a field
 * mapping with its placeholders filled in. */
static cm_err mapping_from_json(const cJSON *json, fbuf b, st_mapping **out, cm_error *err);

static cm_err
parse_dynamic_templates(const cJSON *v, const st_analysis *an, char **out, cm_error *err)
{
	const cJSON *e, *k;
	*out = NULL;
	if (!cJSON_IsArray(v))
		return cm_error_set(err, CM_EMAPPING,
		                    "Failed to parse mapping: Dynamic template syntax error. An array "
		                    "of named objects is expected.");
	cJSON_ArrayForEach(e, v)
	{
		if (!cJSON_IsObject(e) || cJSON_GetArraySize(e) != 1 || !cJSON_IsObject(e->child))
			return cm_error_set(err, CM_EMAPPING,
			                    "Failed to parse mapping: Dynamic template syntax error. An "
			                    "array of named objects is expected.");
		const cJSON *t = e->child;
		cJSON_ArrayForEach(k, t)
		{
			bool known = false;
			for (size_t i = 0; i < sizeof(dt_keys) / sizeof(dt_keys[0]); i++)
				known |= !strcmp(dt_keys[i], k->string);
			if (!known)
				return cm_error_set(err, CM_EMAPPING,
				                    "Failed to parse mapping: Illegal dynamic template "
				                    "parameter: [%.100s]",
				                    k->string);
			if (strcmp(k->string, "mapping") && !cJSON_IsString(k) &&
			    !(cJSON_IsArray(k) && strstr(k->string, "match") &&
			      strcmp(k->string, "match_mapping_type") && strcmp(k->string, "match_pattern")))
				return cm_error_set(err, CM_EMAPPING,
				                    "Failed to parse mapping: [%s] of dynamic template [%s] "
				                    "must be a string",
				                    k->string, t->string);
		}
		const cJSON *mt = cJSON_GetObjectItemCaseSensitive(t, "match_mapping_type");
		if (mt) {
			bool ok = false;
			for (size_t i = 0; i < sizeof(dt_types) / sizeof(dt_types[0]); i++)
				ok |= !strcmp(dt_types[i], mt->valuestring);
			if (!ok)
				return cm_error_set(err, CM_EMAPPING,
				                    "Failed to parse mapping: No field type matched on [%.60s], "
				                    "possible values are [object, string, long, double, "
				                    "boolean, date, binary]",
				                    mt->valuestring);
		}
		const cJSON *mp = cJSON_GetObjectItemCaseSensitive(t, "match_pattern");
		if (mp && strcmp(mp->valuestring, "simple") && strcmp(mp->valuestring, "regex"))
			return cm_error_set(err, CM_EMAPPING,
			                    "Failed to parse mapping: Illegal match_pattern [%.60s] in "
			                    "dynamic template [%s]",
			                    mp->valuestring, t->string);
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(t, "mapping");
		if (!cJSON_IsObject(m))
			return cm_error_set(err, CM_EMAPPING,
			                    "Failed to parse mapping: template [%s] must have either "
			                    "mapping or runtime set",
			                    t->string);
		/* the mapping must make a field once its placeholders are filled,
		 * for one of the kinds it may be used for (ES 8 refuses it
		 * otherwise) */
		static const char *const kinds[] = {"string", "long",   "double", "boolean",
		                                    "date",   "object", "binary"};
		static const char *const types[] = {"text", "long",   "float", "boolean",
		                                    "date", "object", "binary"};
		cm_err rc = CM_OK;
		cm_error first;
		cm_error_clear(&first);
		for (size_t i = 0; i < 7; i++) {
			if (mt && strcmp(mt->valuestring, "*") && strcmp(mt->valuestring, kinds[i]))
				continue;
			cJSON *probe = st_dynamic_template_mapping(m, "probe", types[i]);
			if (!cJSON_GetObjectItemCaseSensitive(probe, "type"))
				cJSON_AddStringToObject(probe, "type", types[i]);
			cJSON *root = cJSON_CreateObject();
			cJSON_AddItemToObject(cJSON_AddObjectToObject(root, "properties"), "probe", probe);
			st_mapping *pm = NULL;
			cm_error e2;
			cm_error_clear(&e2);
			fbuf pb = {.an = an};
			rc = mapping_from_json(root, pb, &pm, &e2);
			cJSON_Delete(root);
			st_mapping_unref(pm);
			if (!rc)
				break;
			if (!first.code)
				first = e2;
		}
		if (rc) {
			*err = first;
			return rc;
		}
	}
	char *text = cJSON_PrintUnformatted(v);
	*out = cm_strdup(CM_MEM_STORAGE, text);
	free(text);
	return CM_OK;
}

/* Replaces "{name}" and "{dynamic_type}" in every string of m; new. */
cJSON *
st_dynamic_template_mapping(const cJSON *m, const char *name, const char *dynamic_type)
{
	if (cJSON_IsString(m)) {
		char out[1024];
		size_t o = 0;
		for (const char *p = m->valuestring; *p && o + 1 < sizeof(out);) {
			const char *rep = NULL;
			size_t skip = 0;
			if (!strncmp(p, "{name}", 6))
				rep = name, skip = 6;
			else if (!strncmp(p, "{dynamic_type}", 14))
				rep = dynamic_type, skip = 14;
			if (rep) {
				size_t rl = strlen(rep);
				if (o + rl >= sizeof(out))
					break;
				memcpy(out + o, rep, rl);
				o += rl;
				p += skip;
			} else {
				out[o++] = *p++;
			}
		}
		out[o] = 0;
		return cJSON_CreateString(out);
	}
	if (cJSON_IsObject(m) || cJSON_IsArray(m)) {
		cJSON *r = cJSON_IsObject(m) ? cJSON_CreateObject() : cJSON_CreateArray(), *e;
		cJSON_ArrayForEach(e, m)
		{
			cJSON *x = st_dynamic_template_mapping(e, name, dynamic_type);
			if (cJSON_IsObject(m))
				cJSON_AddItemToObject(r, e->string, x);
			else
				cJSON_AddItemToArray(r, x);
		}
		return r;
	}
	return cJSON_Duplicate(m, true);
}

/* Merges templates by name: add's replace base's of the same name, new
 * ones go last (ES 7). New text, or NULL when neither has any. */
static char *
merge_dynamic_templates(const char *base, const char *add)
{
	if (!add)
		return base ? cm_strdup(CM_MEM_STORAGE, base) : NULL;
	if (!base)
		return cm_strdup(CM_MEM_STORAGE, add);
	cJSON *b = cJSON_Parse(base), *a = cJSON_Parse(add), *e;
	cJSON_ArrayForEach(e, a)
	{
		bool replaced = false;
		for (int i = 0; i < cJSON_GetArraySize(b); i++) {
			cJSON *x = cJSON_GetArrayItem(b, i);
			if (!strcmp(x->child->string, e->child->string)) {
				cJSON_ReplaceItemInArray(b, i, cJSON_Duplicate(e, true));
				replaced = true;
				break;
			}
		}
		if (!replaced)
			cJSON_AddItemToArray(b, cJSON_Duplicate(e, true));
	}
	char *text = cJSON_PrintUnformatted(b), *out = cm_strdup(CM_MEM_STORAGE, text);
	free(text);
	cJSON_Delete(a);
	cJSON_Delete(b);
	return out;
}

cm_err
st_mapping_from_json(const cJSON *json, st_mapping **out, cm_error *err)
{
	return st_mapping_from_json_an(json, NULL, out, err);
}

static cm_err
mapping_from_json(const cJSON *json, fbuf b, st_mapping **out, cm_error *err);

cm_err
st_mapping_from_json_an(const cJSON *json, st_analysis *an, st_mapping **out, cm_error *err)
{
	fbuf b = {.an = an};
	cm_err e = mapping_from_json(json, b, out, err);
	if (e == CM_OK)
		(*out)->analysis = st_analysis_ref(an);
	return e;
}

static cm_err
mapping_from_json(const cJSON *json, fbuf b, st_mapping **out, cm_error *err)
{
	st_dynamic dyn = ST_DYNAMIC_TRUE;
	bool dyn_set = false, flag;
	int8_t date_det = 0, num_det = 0;
	source_opts src = {0};
	char *dyn_tpl = NULL;
	cm_err e;
	*out = NULL;
	if (json == NULL)
		return finish(&b, dyn, dyn_set, out, err);
	if (!cJSON_IsObject(json))
		return cm_error_set(err, CM_EMAPPING,
		                    "Failed to parse mapping: mappings must be an object, got %s",
		                    json_kind(json));
	const cJSON *it;
	cJSON_ArrayForEach(it, json)
	{
		const char *k = it->string;
		if (strcmp(k, "dynamic") == 0) {
			if (!json_dynamic(it, &dyn)) {
				e = cm_error_set(
				    err, CM_EMAPPING,
				    "Failed to parse mapping: invalid value for [dynamic]");
				goto fail;
			}
			dyn_set = true;
		} else if (strcmp(k, "properties") == 0) {
			if (!cJSON_IsObject(it)) {
				e = cm_error_set(
				    err, CM_EMAPPING,
				    "Failed to parse mapping: [properties] must be an "
				    "object");
				goto fail;
			}
		} else if (strcmp(k, "date_detection") == 0 ||
		           strcmp(k, "numeric_detection") == 0) {
			if (!json_bool(it, &flag)) {
				e = cm_error_set(
				    err, CM_EMAPPING,
				    "Failed to parse mapping: invalid value for [%s]", k);
				goto fail;
			}
			*(k[0] == 'd' ? &date_det : &num_det) = flag ? 1 : -1;
		} else if (strcmp(k, "_source") == 0) {
			if ((e = parse_source(it, &src, err)) != CM_OK)
				goto fail;
		} else if (strcmp(k, "dynamic_templates") == 0) {
			cm_free(CM_MEM_STORAGE, dyn_tpl);
			if ((e = parse_dynamic_templates(it, b.an, &dyn_tpl, err)) != CM_OK)
				goto fail;
		} else if (strcmp(k, "_meta") == 0 || strcmp(k, "_routing") == 0) {
			/* _meta is informational */
		} else {
			char *v = cJSON_PrintUnformatted(it);
			cm_error_set(
			    err, CM_EMAPPING,
			    "Root mapping definition has unsupported parameters:  [%s : %.200s]", k,
			    v ? v : "");
			free(v);
			e = CM_EMAPPING;
			goto fail;
		}
	}
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(json, "properties");
	if (props != NULL && (e = parse_properties(&b, NULL, props, 1, err)) != CM_OK)
		goto fail;
	if ((e = finish(&b, dyn, dyn_set, out, err)) != CM_OK)
		goto fail;
	(*out)->date_detection = date_det;
	(*out)->numeric_detection = num_det;
	(*out)->source_set = src.set;
	(*out)->source_disabled = src.disabled;
	(*out)->source_includes = src.inc;
	(*out)->nsource_includes = src.ninc;
	(*out)->source_excludes = src.exc;
	(*out)->nsource_excludes = src.nexc;
	(*out)->dynamic_templates = dyn_tpl;
	return CM_OK;
fail:
	cm_free(CM_MEM_STORAGE, dyn_tpl);
	strv_free(src.inc, src.ninc);
	strv_free(src.exc, src.nexc);
	fbuf_free(&b);
	return e;
}

/* ---- JSON out ---- */

static cJSON *
child_object(cJSON *parent, const char *key)
{
	cJSON *o = cJSON_GetObjectItemCaseSensitive(parent, key);
	if (o == NULL)
		o = cJSON_AddObjectToObject(parent, key);
	return o;
}

static const char *
dynamic_name(st_dynamic d)
{
	return d == ST_DYNAMIC_STRICT ? "strict" : d == ST_DYNAMIC_FALSE ? "false" : "true";
}

static const char *
field_an_name(st_analyzer_kind k, const st_analyzer *custom)
{
	return custom != NULL ? st_analyzer_get_name(custom) : st_analyzer_name(k);
}

static void
render_field(cJSON *o, const st_field_def *f, bool has_children)
{
	if (f->type == ST_FT_OBJECT) {
		if (f->nested)
			cJSON_AddStringToObject(o, "type", "nested");
		else if (!has_children) /* ES names the type only of an empty object */
			cJSON_AddStringToObject(o, "type", "object");
		if (f->include_in_parent)
			cJSON_AddBoolToObject(o, "include_in_parent", true);
		if (f->include_in_root)
			cJSON_AddBoolToObject(o, "include_in_root", true);
		if (f->dynamic_set)
			cJSON_AddStringToObject(o, "dynamic", dynamic_name(f->dynamic));
		if (f->disabled)
			cJSON_AddBoolToObject(o, "enabled", false);
		return;
	}
	cJSON_AddStringToObject(o, "type", st_field_type_name(f->type));
	if (f->ncopy_to > 0) {
		cJSON *a = cJSON_AddArrayToObject(o, "copy_to");
		for (int i = 0; i < f->ncopy_to; i++)
			cJSON_AddItemToArray(a, cJSON_CreateString(f->copy_to[i]));
	}
	if (f->type == ST_FT_TEXT) {
		/* "default" and "default_search" come back from the settings */
		if (f->analyzer != ST_AN_STANDARD &&
		    strcmp(field_an_name(f->analyzer, f->custom_analyzer), "default") != 0)
			cJSON_AddStringToObject(o, "analyzer",
			                        field_an_name(f->analyzer, f->custom_analyzer));
		if ((f->search_analyzer != f->analyzer ||
		     f->custom_search_analyzer != f->custom_analyzer) &&
		    strcmp(field_an_name(f->search_analyzer, f->custom_search_analyzer),
		           "default_search") != 0)
			cJSON_AddStringToObject(
			    o, "search_analyzer",
			    field_an_name(f->search_analyzer, f->custom_search_analyzer));
	}
	if (f->store && f->type != ST_FT_OBJECT)
		cJSON_AddBoolToObject(o, "store", true);
	if (f->type == ST_FT_TEXT && f->index_options)
		cJSON_AddStringToObject(o, "index_options",
		                        st_index_options_names[f->index_options]);
	if (f->type == ST_FT_TEXT && f->term_vector)
		cJSON_AddStringToObject(o, "term_vector", st_term_vector_names[f->term_vector]);
	if (f->type == ST_FT_COMPLETION) { /* ES renders every parameter */
		cJSON_AddStringToObject(o, "analyzer",
		                        field_an_name(f->analyzer, f->custom_analyzer));
		if (f->search_analyzer != f->analyzer ||
		    f->custom_search_analyzer != f->custom_analyzer)
			cJSON_AddStringToObject(
			    o, "search_analyzer",
			    field_an_name(f->search_analyzer, f->custom_search_analyzer));
		cJSON_AddBoolToObject(o, "preserve_separators", true);
		cJSON_AddBoolToObject(o, "preserve_position_increments", true);
		cJSON_AddNumberToObject(o, "max_input_length", f->max_input_length);
		return;
	}
	if (f->type == ST_FT_KEYWORD && f->normalizer != NULL)
		cJSON_AddStringToObject(o, "normalizer", st_analyzer_get_name(f->normalizer));
	if ((f->type == ST_FT_KEYWORD || f->type == ST_FT_FLATTENED) && f->ignore_above > 0)
		cJSON_AddNumberToObject(o, "ignore_above", f->ignore_above);
	if (f->type == ST_FT_FLATTENED && f->depth_limit > 0)
		cJSON_AddNumberToObject(o, "depth_limit", f->depth_limit);
	if (!f->index && f->type != ST_FT_BINARY)
		cJSON_AddBoolToObject(o, "index", false);
	if (f->doc_values_shown)
		cJSON_AddBoolToObject(o, "doc_values", f->doc_values_shown == 1);
	else if (f->type != ST_FT_TEXT && f->type != ST_FT_BINARY && !f->doc_values)
		cJSON_AddBoolToObject(o, "doc_values", false);
	if (f->type == ST_FT_SCALED_FLOAT)
		cJSON_AddNumberToObject(o, "scaling_factor", f->scaling_factor);
	if (f->format != NULL)
		cJSON_AddStringToObject(o, "format", f->format);
	if (f->null_value != NULL)
		cJSON_AddStringToObject(o, "null_value", f->null_value);
	if (f->ignore_malformed)
		cJSON_AddBoolToObject(o, "ignore_malformed", true);
	if (f->no_coerce)
		cJSON_AddBoolToObject(o, "coerce", false);
	if (f->meta)
		cJSON_AddItemToObject(o, "meta", cJSON_Parse(f->meta));
}

cJSON *
st_mapping_to_json(const st_mapping *m)
{
	cJSON *root = cJSON_CreateObject();
	if (m == NULL)
		return root;
	if (m->dynamic_set)
		cJSON_AddStringToObject(root, "dynamic", dynamic_name(m->dynamic));
	if (m->date_detection != 0)
		cJSON_AddBoolToObject(root, "date_detection", m->date_detection > 0);
	if (m->numeric_detection != 0)
		cJSON_AddBoolToObject(root, "numeric_detection", m->numeric_detection > 0);
	if (m->dynamic_templates)
		cJSON_AddItemToObject(root, "dynamic_templates", cJSON_Parse(m->dynamic_templates));
	if (m->source_set) {
		cJSON *so = cJSON_AddObjectToObject(root, "_source");
		if (m->source_disabled)
			cJSON_AddBoolToObject(so, "enabled", false);
		if (m->nsource_includes) {
			cJSON *a = cJSON_AddArrayToObject(so, "includes");
			for (size_t i = 0; i < m->nsource_includes; i++)
				cJSON_AddItemToArray(a, cJSON_CreateString(m->source_includes[i]));
		}
		if (m->nsource_excludes) {
			cJSON *a = cJSON_AddArrayToObject(so, "excludes");
			for (size_t i = 0; i < m->nsource_excludes; i++)
				cJSON_AddItemToArray(a, cJSON_CreateString(m->source_excludes[i]));
		}
	}
	if (m->nfields == 0)
		return root;
	cJSON **nodes = cm_calloc(CM_MEM_STORAGE, m->nfields, sizeof(*nodes));
	cJSON *props = cJSON_AddObjectToObject(root, "properties");
	for (size_t i = 0; i < m->nfields; i++) {
		const st_field_def *f = &m->fields[i];
		cJSON *container = NULL;
		const char *key = f->path;
		if (f->parent != NULL) {
			size_t pn = strlen(f->parent);
			const st_field_def *p = find_len(m, f->parent, pn);
			/* a multi-field's name is the path under its direct owner */
			const char *dot = strrchr(f->path, '.');
			const st_field_def *owner =
			    dot ? find_len(m, f->path, (size_t)(dot - f->path)) : NULL;
			if (owner == NULL)
				owner = p;
			if (owner != NULL && nodes[owner - m->fields] != NULL) {
				container = child_object(nodes[owner - m->fields], "fields");
				key = dot + 1;
			}
		} else {
			const char *dot = strrchr(f->path, '.');
			if (dot == NULL) {
				container = props;
			} else {
				const st_field_def *p =
				    find_len(m, f->path, (size_t)(dot - f->path));
				if (p != NULL && nodes[p - m->fields] != NULL) {
					container =
					    child_object(nodes[p - m->fields], "properties");
					key = dot + 1;
				}
			}
		}
		if (container == NULL) /* orphan (should not happen): keep it visible */
			container = props;
		cJSON *o = cJSON_AddObjectToObject(container, key);
		size_t pn = strlen(f->path);
		bool has_children = i + 1 < m->nfields &&
		                    strncmp(m->fields[i + 1].path, f->path, pn) == 0 &&
		                    m->fields[i + 1].path[pn] == '.';
		if (f->type == ST_FT_OBJECT && !has_children) {
			/* children sort right after, or after siblings like "a-b" */
			for (size_t k = i + 1; k < m->nfields; k++) {
				const char *p = m->fields[k].path;
				if (strncmp(p, f->path, pn) != 0 || p[pn] > '.')
					break;
				if (p[pn] == '.') {
					has_children = true;
					break;
				}
			}
		}
		render_field(o, f, has_children);
		nodes[i] = o;
	}
	cm_free(CM_MEM_STORAGE, nodes);
	return root;
}

/* ---- merge ---- */

static bool
str_eq(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* "doc_values" as the mapping shows it (binary and geo_point echo the given
 * value; their storage ignores it) */
static bool
doc_values_of(const st_field_def *f)
{
	return f->doc_values_shown ? f->doc_values_shown == 1 : f->doc_values;
}

const char *const st_index_options_names[] = {"", "docs", "freqs", "positions", "offsets", NULL};
const char *const st_term_vector_names[] = {"",
                                            "no",
                                            "yes",
                                            "with_positions",
                                            "with_offsets",
                                            "with_positions_offsets",
                                            "with_positions_payloads",
                                            "with_positions_offsets_payloads",
                                            NULL};

bool
st_field_has_offsets(const st_field_def *f)
{
	const char *tv = st_term_vector_names[f->term_vector];
	return f->type == ST_FT_TEXT &&
	       (!strcmp(st_index_options_names[f->index_options], "offsets") ||
	        strstr(tv, "offsets") != NULL);
}

static cm_err
param_conflict(cm_error *err, const char *path, const char *param, const char *from, const char *to)
{
	return cm_error_set(err, CM_EINVAL,
	                    "Mapper for [%s] conflicts with existing mapper:\n\tCannot update "
	                    "parameter [%s] from [%s] to [%s]",
	                    path, param, from, to);
}

/* Checks that `f` may replace `old` and applies the updatable parameters
 * to `dst` (a copy of old). Returns whether anything changed. */
static cm_err
merge_one(st_field_def *dst, const st_field_def *old, const st_field_def *f, bool *changed,
          cm_error *err)
{
	if ((old->type == ST_FT_OBJECT) != (f->type == ST_FT_OBJECT)) {
		if (old->type == ST_FT_OBJECT)
			return cm_error_set(err, CM_EINVAL,
			                    "can't merge a non object mapping [%s] with an object "
			                    "mapping",
			                    f->path);
		return cm_error_set(err, CM_EINVAL,
		                    "can't merge a non object mapping [%s] with an object mapping",
		                    f->path);
	}
	if (old->type == ST_FT_OBJECT) {
		if (old->nested != f->nested && !f->implied)
			return cm_error_set(err, CM_EINVAL,
			                    "object mapping [%s] can't be changed from %s to %s",
			                    f->path, old->nested ? "nested" : "non-nested",
			                    old->nested ? "non-nested" : "nested");
		if (old->nested && !f->implied &&
		    (old->include_in_parent != f->include_in_parent ||
		     old->include_in_root != f->include_in_root))
			return cm_error_set(
			    err, CM_EINVAL,
			    "The [include_in_%s] parameter can't be updated for the "
			    "nested object mapping [%s].",
			    old->include_in_parent != f->include_in_parent ? "parent" : "root",
			    f->path);
		if (old->disabled != f->disabled)
			return param_conflict(err, f->path, "enabled",
			                      old->disabled ? "false" : "true",
			                      f->disabled ? "false" : "true");
		if (f->dynamic_set && (!old->dynamic_set || old->dynamic != f->dynamic)) {
			dst->dynamic = f->dynamic;
			dst->dynamic_set = true;
			*changed = true;
		}
		return CM_OK;
	}
	if (old->type != f->type)
		return cm_error_set(err, CM_EINVAL,
		                    "mapper [%s] cannot be changed from type [%s] to [%s]", f->path,
		                    st_field_type_name(old->type), st_field_type_name(f->type));
	if (!str_eq(old->parent, f->parent))
		return cm_error_set(err, CM_EINVAL, "mapper [%s] conflicts with existing mapper",
		                    f->path);
	if (old->analyzer != f->analyzer || old->custom_analyzer != f->custom_analyzer)
		return param_conflict(err, f->path, "analyzer",
		                      field_an_name(old->analyzer, old->custom_analyzer),
		                      field_an_name(f->analyzer, f->custom_analyzer));
	if (old->normalizer != f->normalizer)
		return param_conflict(
		    err, f->path, "normalizer",
		    old->normalizer ? st_analyzer_get_name(old->normalizer) : "null",
		    f->normalizer ? st_analyzer_get_name(f->normalizer) : "null");
	if (old->index != f->index)
		return param_conflict(err, f->path, "index", old->index ? "true" : "false",
		                      f->index ? "true" : "false");
	if (old->store != f->store)
		return param_conflict(err, f->path, "store", old->store ? "true" : "false",
		                      f->store ? "true" : "false");
	if (old->index_options != f->index_options)
		return param_conflict(
		    err, f->path, "index_options",
		    old->index_options ? st_index_options_names[old->index_options] : "positions",
		    f->index_options ? st_index_options_names[f->index_options] : "positions");
	if (old->term_vector != f->term_vector)
		return param_conflict(err, f->path, "term_vector",
		                      old->term_vector ? st_term_vector_names[old->term_vector]
		                                       : "no",
		                      f->term_vector ? st_term_vector_names[f->term_vector] : "no");
	if (doc_values_of(old) != doc_values_of(f))
		return param_conflict(err, f->path, "doc_values",
		                      doc_values_of(old) ? "true" : "false",
		                      doc_values_of(f) ? "true" : "false");
	if (!str_eq(old->format, f->format))
		return param_conflict(
		    err, f->path, "format",
		    old->format ? old->format : "strict_date_optional_time||epoch_millis",
		    f->format ? f->format : "strict_date_optional_time||epoch_millis");
	if (old->scaling_factor != f->scaling_factor) {
		char a[32], b2[32];
		snprintf(a, sizeof(a), "%g", old->scaling_factor);
		snprintf(b2, sizeof(b2), "%g", f->scaling_factor);
		return param_conflict(err, f->path, "scaling_factor", a, b2);
	}
	if (!str_eq(old->null_value, f->null_value))
		return param_conflict(err, f->path, "null_value",
		                      old->null_value ? old->null_value : "null",
		                      f->null_value ? f->null_value : "null");
	if (old->search_analyzer != f->search_analyzer ||
	    old->custom_search_analyzer != f->custom_search_analyzer ||
	    old->ignore_above != f->ignore_above || old->depth_limit != f->depth_limit ||
	    old->max_input_length != f->max_input_length ||
	    old->ignore_malformed != f->ignore_malformed || old->no_coerce != f->no_coerce) {
		dst->search_analyzer = f->search_analyzer;
		dst->custom_search_analyzer = f->custom_search_analyzer;
		dst->ignore_above = f->ignore_above;
		dst->depth_limit = f->depth_limit;
		dst->max_input_length = f->max_input_length;
		dst->ignore_malformed = f->ignore_malformed;
		dst->no_coerce = f->no_coerce;
		*changed = true;
	}
	if (f->meta && !str_eq(old->meta, f->meta)) { /* meta may change; absent keeps it */
		cm_free(CM_MEM_STORAGE, dst->meta);
		dst->meta = cm_strdup(CM_MEM_STORAGE, f->meta);
		*changed = true;
	}
	if (!copy_to_equal(old, f)) {
		for (int i = 0; i < dst->ncopy_to; i++)
			cm_free(CM_MEM_STORAGE, dst->copy_to[i]);
		cm_free(CM_MEM_STORAGE, dst->copy_to);
		st_field_def tmp;
		fdef_copy(&tmp, f); /* borrow the deep copy of f's list */
		dst->copy_to = tmp.copy_to;
		dst->ncopy_to = tmp.ncopy_to;
		tmp.copy_to = NULL;
		tmp.ncopy_to = 0;
		fdef_free(&tmp);
		*changed = true;
	}
	return CM_OK;
}

cm_err
st_mapping_merge(const st_mapping *base, const st_mapping *add, st_mapping **out, cm_error *err)
{
	fbuf b = {0};
	cm_err e = CM_OK;
	bool changed = false;
	st_dynamic dyn = base->dynamic;
	bool dyn_set = base->dynamic_set;
	int8_t date_det = base->date_detection, num_det = base->numeric_detection;
	*out = NULL;
	/* copies of base's fields keep base's (sorted) order: index i of b is
	 * index i of base, so lookups into base locate the copy */
	for (size_t i = 0; i < base->nfields; i++)
		fdef_copy(fbuf_push(&b), &base->fields[i]);
	if (add != NULL) {
		if (add->dynamic_set && (!dyn_set || add->dynamic != dyn)) {
			dyn = add->dynamic;
			dyn_set = true;
			changed = true;
		}
		if (add->date_detection != 0 && add->date_detection != date_det) {
			date_det = add->date_detection;
			changed = true;
		}
		if (add->numeric_detection != 0 && add->numeric_detection != num_det) {
			num_det = add->numeric_detection;
			changed = true;
		}
		if (add->dynamic_templates &&
		    !(base->dynamic_templates &&
		      !strcmp(base->dynamic_templates, add->dynamic_templates)))
			changed = true;
		/* _source options are fixed when the index is created (ES refuses
		 * to change them); repeating them is fine */
		if (add->source_set &&
		    (add->source_disabled != base->source_disabled ||
		     !strv_eq(add->source_includes, add->nsource_includes, base->source_includes,
		              base->nsource_includes) ||
		     !strv_eq(add->source_excludes, add->nsource_excludes, base->source_excludes,
		              base->nsource_excludes))) {
			e = cm_error_set(err, CM_EINVAL,
			                 "Mapper for [_source] conflicts with existing mapper: Cannot "
			                 "update parameter [%s]",
			                 add->source_disabled != base->source_disabled ? "enabled"
			                 : !strv_eq(add->source_includes, add->nsource_includes,
			                            base->source_includes, base->nsource_includes)
			                     ? "includes"
			                     : "excludes");
			goto fail;
		}
		for (size_t i = 0; i < add->nfields; i++) {
			const st_field_def *f = &add->fields[i];
			const st_field_def *old = st_mapping_find(base, f->path);
			if (old != NULL) {
				e = merge_one(&b.v[old - base->fields], old, f, &changed, err);
				if (e != CM_OK)
					goto fail;
				continue;
			}
			/* a new field: its owner must exist (in base or add) with the
			 * right kind, else create the objects on the way */
			const char *dot = strrchr(f->path, '.');
			if (dot != NULL) {
				size_t pn = (size_t)(dot - f->path);
				const st_field_def *p = find_len(base, f->path, pn);
				if (p == NULL)
					p = find_len(add, f->path, pn);
				if (f->parent != NULL) {
					if (p == NULL || p->type == ST_FT_OBJECT) {
						e = cm_error_set(
						    err, CM_EINVAL,
						    "multi field [%s] has no parent field",
						    f->path);
						goto fail;
					}
				} else if (p != NULL && p->type != ST_FT_OBJECT) {
					e = cm_error_set(
					    err, CM_EINVAL,
					    "Could not dynamically add mapping for field [%s]. "
					    "Existing mapping for [%.*s] must be of type object "
					    "but found [%s].",
					    f->path, (int)pn, f->path, st_field_type_name(p->type));
					goto fail;
				} else if (p == NULL) {
					/* add every missing ancestor object */
					for (const char *q = f->path; (q = strchr(q, '.')) != NULL;
					     q++) {
						size_t an = (size_t)(q - f->path);
						const st_field_def *a = find_len(base, f->path, an);
						if (a == NULL)
							a = find_len(add, f->path, an);
						if (a != NULL && a->type != ST_FT_OBJECT) {
							e = cm_error_set(
							    err, CM_EINVAL,
							    "Could not dynamically add mapping for "
							    "field [%s]. "
							    "Existing mapping for [%.*s] must be "
							    "of type "
							    "object but found [%s].",
							    f->path, (int)an, f->path,
							    st_field_type_name(a->type));
							goto fail;
						}
						if (a == NULL &&
						    fbuf_find(&b, f->path, an) == NULL) {
							st_field_def *o = fbuf_push(&b);
							fdef_init(o, ST_FT_OBJECT);
							o->path =
							    cm_strndup(CM_MEM_STORAGE, f->path, an);
						}
					}
				}
			}
			fdef_copy(fbuf_push(&b), f);
			changed = true;
		}
	}
	if ((e = finish(&b, dyn, dyn_set, out, err)) != CM_OK)
		goto fail;
	(*out)->date_detection = date_det;
	(*out)->numeric_detection = num_det;
	(*out)->source_set = base->source_set;
	(*out)->source_disabled = base->source_disabled;
	(*out)->source_includes = strv_copy(base->source_includes, base->nsource_includes);
	(*out)->nsource_includes = base->nsource_includes;
	(*out)->source_excludes = strv_copy(base->source_excludes, base->nsource_excludes);
	(*out)->nsource_excludes = base->nsource_excludes;
	(*out)->dynamic_templates =
	    merge_dynamic_templates(base->dynamic_templates, add ? add->dynamic_templates : NULL);
	(*out)->version = base->version + (changed ? 1 : 0);
	(*out)->analysis =
	    st_analysis_ref(base->analysis != NULL ? base->analysis : add ? add->analysis : NULL);
	return CM_OK;
fail:
	fbuf_free(&b);
	return e;
}
