/* The _search request body (and its URL parameter forms) to sr_request. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "fetch.h"
#include "highlight.h"
#include "sr.h"
#include "sr_agg.h"

#define T CM_MEM_SEARCH
#define MAX_SORT_KEYS 64
#define MAX_SOURCE_PATTERNS 1024

void
sr_sort_value_clear(sr_sort_value *v)
{
	if (v->type == SR_SV_STRING || v->type == SR_SV_IP)
		cm_free(T, v->s);
	memset(v, 0, sizeof(*v));
}

void
sr_request_init(sr_request *r)
{
	memset(r, 0, sizeof(*r));
	r->size = 10;
	r->track_total_hits = 10000;
	r->fetch_source = true;
}

static void
free_strs(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cm_free(T, v[i]);
	cm_free(T, v);
}

static void
free_sort(sr_request *r)
{
	for (size_t i = 0; i < r->nsort; i++) {
		cm_free(T, r->sort[i].field);
		cm_free(T, r->sort[i].unmapped_type);
		cm_free(T, r->sort[i].format);
		cm_free(T, r->sort[i].nested_path);
		sr_query_free(r->sort[i].nested_filter);
	}
	cm_free(T, r->sort);
	r->sort = NULL;
	r->nsort = 0;
}

static void
free_source(sr_request *r)
{
	free_strs(r->source_includes, r->nincludes);
	free_strs(r->source_excludes, r->nexcludes);
	r->source_includes = r->source_excludes = NULL;
	r->nincludes = r->nexcludes = 0;
}

void
sr_request_free(sr_request *r)
{
	sr_query_free(r->query);
	sr_query_free(r->post_filter);
	for (size_t i = 0; i < r->nrescore; i++)
		sr_query_free(r->rescore[i].query);
	cm_free(T, r->rescore);
	for (size_t i = 0; i < r->nindex_boosts; i++)
		cm_free(T, r->index_boosts[i].index);
	cm_free(T, r->index_boosts);
	cm_free(T, r->collapse_field);
	sr_highlight_free(r->highlight);
	sr_suggest_free(r->suggest);
	free_sort(r);
	sr_fetch_free(r->fields, r->nfields);
	sr_fetch_free(r->docvalue_fields, r->ndocvalue_fields);
	for (size_t i = 0; i < r->nsearch_after; i++)
		sr_sort_value_clear(&r->search_after[i]);
	cm_free(T, r->search_after);
	free_source(r);
	if (r->aggs)
		sr_agg_free(r->aggs);
	for (size_t i = 0; i < r->nstats_groups; i++)
		cm_free(T, r->stats_groups[i]);
	cm_free(T, r->stats_groups);
	memset(r, 0, sizeof(*r));
}

static const char *
token_name(const cJSON *v)
{
	if (cJSON_IsObject(v))
		return "START_OBJECT";
	if (cJSON_IsArray(v))
		return "START_ARRAY";
	if (cJSON_IsString(v))
		return "VALUE_STRING";
	if (cJSON_IsNumber(v))
		return "VALUE_NUMBER";
	if (cJSON_IsBool(v))
		return "VALUE_BOOLEAN";
	return "VALUE_NULL";
}

/* "stats": ["group", ...] */
static cm_err
parse_stats_groups(sr_request *r, const cJSON *v, cm_error *err)
{
	if (!cJSON_IsArray(v))
		return cm_error_set(err, CM_EPARSE, "[stats] must be an array of strings, got a %s",
		                    token_name(v));
	size_t n = (size_t)cJSON_GetArraySize(v);
	r->stats_groups = cm_calloc(T, n + 1, sizeof(char *));
	const cJSON *g;
	cJSON_ArrayForEach(g, v)
	{
		if (!cJSON_IsString(g))
			return cm_error_set(err, CM_EPARSE,
			                    "[stats] must be an array of strings, found a %s in it",
			                    token_name(g));
		r->stats_groups[r->nstats_groups++] = cm_strdup(T, g->valuestring);
	}
	return CM_OK;
}

cm_err
sr_parse_time_value(const char *s, const char *setting, uint64_t *ns, cm_error *err)
{
	static const struct {
		const char *unit;
		double ns;
	} units[] = {{"nanos", 1}, {"micros", 1e3}, {"ms", 1e6},   {"s", 1e9},
	             {"m", 60e9},  {"h", 3600e9},   {"d", 86400e9}};
	char *end;
	*ns = 0;
	if (!strcmp(s, "-1") || !strcmp(s, "0"))
		return CM_OK;
	double v = strtod(s, &end);
	if (end == s || v < 0 || !isfinite(v))
		goto bad;
	/* ES units are case-insensitive here ("5S" works in TimeValue) */
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcasecmp(end, units[i].unit)) {
			double t = v * units[i].ns;
			if (t > 9.2e18)
				goto bad;
			*ns = (uint64_t)t;
			return CM_OK;
		}
	return cm_error_set(err, CM_EPARSE,
	                    "failed to parse setting [%s] with value [%s] as a time value: unit is "
	                    "missing or unrecognized",
	                    setting, s);
bad:
	return cm_error_set(err, CM_EPARSE, "failed to parse [%s]", s);
}

/* An integer parameter, given as a number or a numeric string (ES coerces). */
static cm_err
int_param(const cJSON *v, const char *name, int64_t *out, cm_error *err)
{
	double d;
	if (cJSON_IsNumber(v))
		d = v->valuedouble;
	else if (cJSON_IsString(v)) {
		char *end;
		d = strtod(v->valuestring, &end);
		if (end == v->valuestring || *end != '\0')
			goto bad;
	} else
		goto bad;
	if (d != floor(d) || fabs(d) > 9.0e15)
		goto bad;
	*out = (int64_t)d;
	return CM_OK;
bad:
	return cm_error_set(err, CM_EPARSE, "[%s] failed to parse field [%s]: expected an integer",
	                    "search_source", name);
}

static cm_err
bool_param(const cJSON *v, const char *name, bool *out, cm_error *err)
{
	if (cJSON_IsBool(v)) {
		*out = cJSON_IsTrue(v);
		return CM_OK;
	}
	if (cJSON_IsString(v) &&
	    (!strcmp(v->valuestring, "true") || !strcmp(v->valuestring, "false"))) {
		*out = v->valuestring[0] == 't';
		return CM_OK;
	}
	return cm_error_set(err, CM_EPARSE,
	                    "[search_source] failed to parse field [%s]: expected a boolean", name);
}

static cm_err
add_sort_key(sr_request *r, const char *field, cm_error *err, sr_sort_key **out)
{
	if (r->nsort >= MAX_SORT_KEYS)
		return cm_error_set(err, CM_EINVAL, "too many sort keys (at most %d)",
		                    MAX_SORT_KEYS);
	if (!field[0])
		return cm_error_set(err, CM_EPARSE, "[sort] field name is empty");
	r->sort = cm_realloc(T, r->sort, (r->nsort + 1) * sizeof(*r->sort));
	sr_sort_key *k = &r->sort[r->nsort++];
	memset(k, 0, sizeof(*k));
	if (!strcmp(field, "_score")) {
		k->kind = SR_SORT_SCORE;
		k->desc = true;
	} else if (!strcmp(field, "_doc")) {
		k->kind = SR_SORT_DOC;
	} else if (!strcmp(field, "_shard_doc")) {
		k->kind = SR_SORT_SHARD_DOC;
	} else {
		k->kind = SR_SORT_FIELD;
		k->field = cm_strdup(T, field);
	}
	*out = k;
	return CM_OK;
}

static cm_err
order_value(const char *s, bool *desc, cm_error *err)
{
	if (!strcasecmp(s, "asc")) {
		*desc = false;
		return CM_OK;
	}
	if (!strcasecmp(s, "desc")) {
		*desc = true;
		return CM_OK;
	}
	return cm_error_set(err, CM_EINVAL, "Unknown SortOrder [%s]", s);
}

static cm_err
sort_options(sr_sort_key *k, const char *field, const cJSON *o, cm_error *err)
{
	for (const cJSON *v = o->child; v; v = v->next) {
		const char *n = v->string;
		cm_err rc = CM_OK;
		if (!strcmp(n, "order")) {
			if (!cJSON_IsString(v))
				return cm_error_set(err, CM_EPARSE, "[%s] order must be a string",
				                    field);
			rc = order_value(v->valuestring, &k->desc, err);
		} else if (!strcmp(n, "missing") && k->kind == SR_SORT_FIELD) {
			if (cJSON_IsString(v) && !strcmp(v->valuestring, "_first"))
				k->missing_first = true;
			else if (cJSON_IsString(v) && !strcmp(v->valuestring, "_last"))
				k->missing_first = false;
			else
				rc = cm_error_set(
				    err, CM_EINVAL,
				    "[sort] a custom [missing] value is not supported, use "
				    "_first or _last");
		} else if (!strcmp(n, "mode") && k->kind == SR_SORT_FIELD) {
			static const char *modes[] = {"", "min", "max", "sum", "avg", "median"};
			size_t i;
			for (i = 1; i < 6; i++)
				if (cJSON_IsString(v) && !strcasecmp(v->valuestring, modes[i]))
					break;
			if (i == 6)
				rc = cm_error_set(err, CM_EINVAL, "Unknown SortMode [%s]",
				                  cJSON_IsString(v) ? v->valuestring
				                                    : token_name(v));
			else
				k->mode = (sr_sort_mode)i;
		} else if (!strcmp(n, "unmapped_type") && k->kind == SR_SORT_FIELD) {
			if (!cJSON_IsString(v))
				return cm_error_set(err, CM_EPARSE,
				                    "[field_sort] unmapped_type must be a string");
			cm_free(T, k->unmapped_type);
			k->unmapped_type = cm_strdup(T, v->valuestring);
		} else if (!strcmp(n, "nested") && k->kind == SR_SORT_FIELD) {
			if (!cJSON_IsObject(v))
				return cm_error_set(err, CM_EPARSE, "[nested] must be an object");
			for (const cJSON *e = v->child; e; e = e->next) {
				if (!strcmp(e->string, "path") && cJSON_IsString(e)) {
					cm_free(T, k->nested_path);
					k->nested_path = cm_strdup(T, e->valuestring);
				} else if (!strcmp(e->string, "filter")) {
					sr_query_free(k->nested_filter);
					k->nested_filter = NULL;
					if ((rc = sr_query_from_json(e, &k->nested_filter, err)))
						return rc;
				} else {
					return cm_error_set(
					    err, CM_EPARSE,
					    "[nested] sort option [%s] is not supported",
					    e->string);
				}
			}
			if (!k->nested_path)
				return cm_error_set(err, CM_EPARSE,
				                    "[nested] sort requires a [path] (a string)");
		} else if (!strcmp(n, "format") && k->kind == SR_SORT_FIELD) {
			if (!cJSON_IsString(v))
				return cm_error_set(err, CM_EPARSE, "[field_sort] format must be a string");
			if (!st_date_format_valid(v->valuestring))
				return cm_error_set(err, CM_EINVAL, "Invalid format: [%s]", v->valuestring);
			cm_free(T, k->format);
			k->format = cm_strdup(T, v->valuestring);
		} else if (!strcmp(n, "numeric_type") && k->kind == SR_SORT_FIELD) {
			const char *t = cJSON_IsString(v) ? v->valuestring : "";
			if (!strcmp(t, "date"))
				k->numeric_type = SR_NT_DATE;
			else if (!strcmp(t, "date_nanos"))
				k->numeric_type = SR_NT_DATE_NANOS;
			else if (strcmp(t, "long") && strcmp(t, "double"))
				return cm_error_set(err, CM_EINVAL,
				                    "invalid value for [numeric_type], must be [long, double, "
				                    "date, date_nanos], got %s",
				                    cJSON_IsString(v) ? v->valuestring : token_name(v));
		} else {
			return cm_error_set(err, CM_EPARSE, "[%s] unknown field [%s]",
			                    k->kind == SR_SORT_FIELD ? "field_sort" : field, n);
		}
		if (rc)
			return rc;
	}
	return CM_OK;
}

/* {"_geo_distance": {"field": point, "order", "unit", "mode",
 * "distance_type", "ignore_unmapped", "validation_method"}} */
static cm_err
geo_sort(sr_request *r, const cJSON *o, cm_error *err)
{
	static const struct {
		const char *name;
		double m;
	} units[] = {{"m", 1},         {"meters", 1},       {"km", 1000},          {"kilometers", 1000},
	             {"mi", 1609.344}, {"miles", 1609.344}, {"yd", 0.9144},        {"yards", 0.9144},
	             {"ft", 0.3048},   {"feet", 0.3048},    {"in", 0.0254},        {"inch", 0.0254},
	             {"cm", 0.01},     {"centimeters", 0.01}, {"mm", 0.001},       {"millimeters", 0.001},
	             {"NM", 1852},     {"nmi", 1852},       {"nauticalmiles", 1852}};
	if (!cJSON_IsObject(o))
		return cm_error_set(err, CM_EPARSE, "[_geo_distance] must be an object");
	const cJSON *point = NULL;
	bool desc = false, ignore_unmapped = false;
	double unit = 1;
	sr_sort_mode mode = SR_SORT_MODE_DEFAULT;
	for (const cJSON *v = o->child; v; v = v->next) {
		const char *n = v->string;
		cm_err rc = CM_OK;
		if (!strcmp(n, "order")) {
			if (!cJSON_IsString(v))
				return cm_error_set(err, CM_EPARSE, "[_geo_distance] order must be a string");
			rc = order_value(v->valuestring, &desc, err);
		} else if (!strcmp(n, "unit")) {
			size_t i, nu = sizeof(units) / sizeof(units[0]);
			for (i = 0; i < nu; i++)
				if (cJSON_IsString(v) && !strcmp(v->valuestring, units[i].name))
					break;
			if (i == nu)
				return cm_error_set(err, CM_EINVAL, "No distance unit match [%s]",
				                    cJSON_IsString(v) ? v->valuestring : token_name(v));
			unit = units[i].m;
		} else if (!strcmp(n, "mode")) {
			if (cJSON_IsString(v) && !strcasecmp(v->valuestring, "min"))
				mode = SR_SORT_MODE_MIN;
			else if (cJSON_IsString(v) && !strcasecmp(v->valuestring, "max"))
				mode = SR_SORT_MODE_MAX;
			else if (cJSON_IsString(v) && !strcasecmp(v->valuestring, "avg"))
				mode = SR_SORT_MODE_AVG;
			else if (cJSON_IsString(v) && !strcasecmp(v->valuestring, "median"))
				mode = SR_SORT_MODE_MEDIAN;
			else
				return cm_error_set(err, CM_EINVAL,
				                    "[_geo_distance] mode must be min, max, avg or median");
		} else if (!strcmp(n, "distance_type")) {
			if (!cJSON_IsString(v) ||
			    (strcmp(v->valuestring, "arc") && strcmp(v->valuestring, "plane")))
				return cm_error_set(err, CM_EINVAL,
				                    "[_geo_distance] distance_type must be arc or plane");
		} else if (!strcmp(n, "ignore_unmapped")) {
			if (!cJSON_IsBool(v))
				return cm_error_set(err, CM_EPARSE,
				                    "[_geo_distance] ignore_unmapped must be a boolean");
			ignore_unmapped = cJSON_IsTrue(v);
		} else if (!strcmp(n, "validation_method") || !strcmp(n, "nested")) {
			if (!strcmp(n, "nested"))
				return cm_error_set(err, CM_EINVAL, "[_geo_distance] nested is not supported");
		} else if (point) {
			return cm_error_set(err, CM_EPARSE,
			                    "[_geo_distance] sorts on one field, found [%s] and [%s]",
			                    point->string, n);
		} else {
			point = v;
		}
		if (rc)
			return rc;
	}
	if (!point)
		return cm_error_set(err, CM_EPARSE, "[_geo_distance] needs a field and a point");
	const cJSON *p = point;
	if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(p->child))
		p = p->child; /* [point] */
	double lat, lon;
	if (!st_geo_point(p, &lat, &lon))
		return cm_error_set(err, CM_EPARSE,
		                    "[_geo_distance] failed to parse the point of [%s] (several "
		                    "points are not supported)",
		                    point->string);
	sr_sort_key *k;
	cm_err rc = add_sort_key(r, point->string, err, &k);
	if (rc)
		return rc;
	k->geo = true;
	k->desc = desc;
	k->mode = mode;
	k->geo_lat = lat;
	k->geo_lon = lon;
	k->geo_unit = unit;
	k->geo_ignore_unmapped = ignore_unmapped;
	return CM_OK;
}

static cm_err
sort_entry(sr_request *r, const cJSON *e, cm_error *err)
{
	sr_sort_key *k;
	cm_err rc;
	if (cJSON_IsString(e))
		return add_sort_key(r, e->valuestring, err, &k);
	if (!cJSON_IsObject(e))
		return cm_error_set(err, CM_EPARSE, "[sort] malformed sort format, found %s",
		                    token_name(e));
	for (const cJSON *f = e->child; f; f = f->next) {
		if (!strcmp(f->string, "_geo_distance") || !strcmp(f->string, "_geoDistance")) {
			if ((rc = geo_sort(r, f, err)))
				return rc;
			continue;
		}
		if (!strcmp(f->string, "_script"))
			return cm_error_set(err, CM_EINVAL, "[sort] %s is not supported",
			                    f->string);
		if ((rc = add_sort_key(r, f->string, err, &k)))
			return rc;
		if (cJSON_IsString(f)) {
			if ((rc = order_value(f->valuestring, &k->desc, err)))
				return rc;
		} else if (cJSON_IsObject(f)) {
			if ((rc = sort_options(k, f->string, f, err)))
				return rc;
		} else
			return cm_error_set(err, CM_EPARSE, "[sort] malformed sort value for [%s]",
			                    f->string);
	}
	return CM_OK;
}

static cm_err
parse_sort(sr_request *r, const cJSON *v, cm_error *err)
{
	free_sort(r);
	if (cJSON_IsArray(v)) {
		for (const cJSON *e = v->child; e; e = e->next) {
			cm_err rc = sort_entry(r, e, err);
			if (rc)
				return rc;
		}
		return CM_OK;
	}
	return sort_entry(r, v, err);
}

static cm_err
parse_search_after(sr_request *r, const cJSON *v, cm_error *err)
{
	if (!cJSON_IsArray(v))
		return cm_error_set(err, CM_EPARSE, "[search_after] must be an array");
	int n = cJSON_GetArraySize(v);
	if (n > MAX_SORT_KEYS)
		return cm_error_set(err, CM_EINVAL, "[search_after] has too many values");
	r->search_after = cm_calloc(T, (size_t)n + 1, sizeof(sr_sort_value));
	for (const cJSON *e = v->child; e; e = e->next) {
		sr_sort_value *sv = &r->search_after[r->nsearch_after++];
		if (cJSON_IsNull(e))
			sv->type = SR_SV_NULL;
		else if (cJSON_IsNumber(e)) {
			double d = e->valuedouble;
			if (d == floor(d) && fabs(d) < 9.2e18) {
				sv->type = SR_SV_LONG;
				sv->l = (int64_t)d;
				sv->d = d;
			} else {
				sv->type = SR_SV_DOUBLE;
				sv->d = d;
			}
		} else if (cJSON_IsString(e)) {
			sv->type = SR_SV_STRING;
			sv->s = cm_strdup(T, e->valuestring);
		} else if (cJSON_IsBool(e)) {
			sv->type = SR_SV_LONG; /* boolean sort values are 0/1 */
			sv->l = cJSON_IsTrue(e);
			sv->d = (double)sv->l;
		} else
			return cm_error_set(
			    err, CM_EPARSE,
			    "[search_after] values must be numbers, strings or null, found %s",
			    token_name(e));
	}
	return CM_OK;
}

static cm_err
push_pattern(char ***v, size_t *n, const char *s, cm_error *err)
{
	if (*n >= MAX_SOURCE_PATTERNS)
		return cm_error_set(err, CM_EINVAL, "[_source] too many patterns");
	*v = cm_realloc(T, *v, (*n + 1) * sizeof(char *));
	(*v)[(*n)++] = cm_strdup(T, s);
	return CM_OK;
}

static cm_err
pattern_list(const cJSON *v, char ***out, size_t *n, cm_error *err)
{
	if (cJSON_IsString(v))
		return push_pattern(out, n, v->valuestring, err);
	if (!cJSON_IsArray(v))
		return cm_error_set(err, CM_EPARSE,
		                    "Expected one of [VALUE_STRING, START_ARRAY] but found [%s]",
		                    token_name(v));
	for (const cJSON *e = v->child; e; e = e->next) {
		if (!cJSON_IsString(e))
			return cm_error_set(err, CM_EPARSE, "Unknown key for a %s in [%s].",
			                    token_name(e), v->string ? v->string : "_source");
		cm_err rc = push_pattern(out, n, e->valuestring, err);
		if (rc)
			return rc;
	}
	return CM_OK;
}

static cm_err
parse_source(sr_request *r, const cJSON *v, cm_error *err)
{
	free_source(r);
	r->fetch_source = true;
	if (cJSON_IsBool(v)) {
		r->fetch_source = cJSON_IsTrue(v);
		return CM_OK;
	}
	if (cJSON_IsString(v) || cJSON_IsArray(v))
		return pattern_list(v, &r->source_includes, &r->nincludes, err);
	if (!cJSON_IsObject(v))
		return cm_error_set(err, CM_EPARSE, "Unknown key for a %s in [_source].",
		                    token_name(v));
	for (const cJSON *e = v->child; e; e = e->next) {
		cm_err rc;
		if (!strcmp(e->string, "includes") || !strcmp(e->string, "include"))
			rc = pattern_list(e, &r->source_includes, &r->nincludes, err);
		else if (!strcmp(e->string, "excludes") || !strcmp(e->string, "exclude"))
			rc = pattern_list(e, &r->source_excludes, &r->nexcludes, err);
		else
			rc = cm_error_set(err, CM_EPARSE, "Unknown key for a %s in [%s].",
			                  token_name(e), e->string);
		if (rc)
			return rc;
	}
	return CM_OK;
}

/* Keys of ES's search body this engine does not implement: refused by
 * name rather than silently ignored (an ignored post_filter would return
 * wrong hits). */
static const char *unsupported_keys[] = {
    "slice",
    "pit",
    "ext",
};

#define MAX_RESCORE_WINDOW 10000 /* index.max_rescore_window */
#define MAX_RESCORERS 16
#define MAX_INDEX_BOOSTS 1024

static cm_err
float_param(const cJSON *v, const char *ctx, const char *name, float *out, cm_error *err)
{
	double d;
	char *end;
	if (cJSON_IsNumber(v))
		d = v->valuedouble;
	else if (cJSON_IsString(v) && (d = strtod(v->valuestring, &end), end != v->valuestring) &&
	         *end == '\0')
		;
	else
		return cm_error_set_type(
		    err, CM_EPARSE, "x_content_parse_exception",
		    "[%s] failed to parse field [%s]: expected a number, found %s", ctx, name,
		    token_name(v));
	if (!isfinite(d) || fabs(d) > 3.4e38)
		return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                         "[%s] failed to parse field [%s]: out of range", ctx,
		                         name);
	*out = (float)d;
	return CM_OK;
}

static cm_err
parse_score_mode(const cJSON *v, sr_rescore_mode *out, cm_error *err)
{
	static const char *names[] = {"total", "multiply", "avg", "max", "min"};
	if (!cJSON_IsString(v))
		return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                         "[query] score_mode doesn't support values of type: %s",
		                         token_name(v));
	for (int i = 0; i < 5; i++)
		if (!strcasecmp(v->valuestring, names[i])) {
			*out = (sr_rescore_mode)i;
			return CM_OK;
		}
	return cm_error_set(err, CM_EINVAL, "illegal score_mode [%s]", v->valuestring);
}

/* The "query" rescorer's body (ES's QueryRescorerBuilder). */
static cm_err
parse_query_rescorer(const cJSON *o, sr_rescore *rs, cm_error *err)
{
	cm_err rc = CM_OK;
	if (!cJSON_IsObject(o))
		return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                         "[query] expected an object, found %s", token_name(o));
	for (const cJSON *v = o->child; v && !rc; v = v->next) {
		const char *k = v->string;
		if (!strcmp(k, "rescore_query")) {
			sr_query_free(rs->query);
			rs->query = NULL;
			if (!cJSON_IsObject(v))
				rc = cm_error_set(
				    err, CM_EPARSE,
				    "[_na] query malformed, must start with start_object");
			else
				rc = sr_query_from_json(v, &rs->query, err);
		} else if (!strcmp(k, "query_weight")) {
			rc = float_param(v, "query", k, &rs->query_weight, err);
		} else if (!strcmp(k, "rescore_query_weight")) {
			rc = float_param(v, "query", k, &rs->rescore_query_weight, err);
		} else if (!strcmp(k, "score_mode")) {
			rc = parse_score_mode(v, &rs->mode, err);
		} else {
			rc = cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
			                       "[query] unknown field [%s]", k);
		}
	}
	if (!rc && !rs->query)
		rc = cm_error_set(err, CM_EINVAL, "rescore_query cannot be null");
	return rc;
}

static cm_err
parse_rescorer(sr_request *r, const cJSON *o, cm_error *err)
{
	if (!cJSON_IsObject(o))
		return cm_error_set(err, CM_EPARSE, "Unknown key for a %s in [rescore].",
		                    token_name(o));
	if (r->nrescore >= MAX_RESCORERS)
		return cm_error_set(err, CM_EINVAL, "too many rescorers (at most %d)",
		                    MAX_RESCORERS);
	r->rescore = cm_realloc(T, r->rescore, (r->nrescore + 1) * sizeof(*r->rescore));
	sr_rescore *rs = &r->rescore[r->nrescore++];
	*rs = (sr_rescore){10, NULL, 1.0f, 1.0f, SR_RESCORE_TOTAL};
	bool have_query = false;
	for (const cJSON *v = o->child; v; v = v->next) {
		cm_err rc;
		int64_t n;
		if (!strcmp(v->string, "window_size")) {
			if ((rc = int_param(v, "window_size", &n, err)))
				return rc;
			if (n < 0)
				return cm_error_set(
				    err, CM_EINVAL,
				    "[window_size] must be greater than or equal to 0");
			if (n > MAX_RESCORE_WINDOW)
				return cm_error_set(
				    err, CM_EINVAL,
				    "Rescore window [%lld] is too large. It must be less than "
				    "[%d]. "
				    "This prevents allocating massive heaps for storing the "
				    "results to be "
				    "rescored. This limit can be set by changing the "
				    "[index.max_rescore_window] index level setting.",
				    (long long)n, MAX_RESCORE_WINDOW);
			rs->window_size = (uint32_t)n;
		} else if (!strcmp(v->string, "query")) {
			if (have_query)
				return cm_error_set(err, CM_EPARSE,
				                    "[rescore] has two [query] rescorers");
			have_query = true;
			if ((rc = parse_query_rescorer(v, rs, err)))
				return rc;
		} else {
			return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
			                         "unknown rescorer [%s]", v->string);
		}
	}
	if (!have_query)
		return cm_error_set(err, CM_EPARSE, "missing rescore type");
	return CM_OK;
}

static cm_err
parse_rescore(sr_request *r, const cJSON *v, cm_error *err)
{
	if (cJSON_IsArray(v)) {
		for (const cJSON *e = v->child; e; e = e->next) {
			cm_err rc = parse_rescorer(r, e, err);
			if (rc)
				return rc;
		}
		return CM_OK;
	}
	return parse_rescorer(r, v, err);
}

static cm_err
add_index_boost(sr_request *r, const cJSON *v, cm_error *err)
{
	float b;
	if (!cJSON_IsNumber(v))
		return cm_error_set(err, CM_EPARSE,
		                    "Expected [VALUE_NUMBER] in [indices_boost] but found [%s]",
		                    token_name(v));
	if (r->nindex_boosts >= MAX_INDEX_BOOSTS)
		return cm_error_set(err, CM_EINVAL, "[indices_boost] has too many entries");
	cm_err rc = float_param(v, "indices_boost", v->string, &b, err);
	if (rc)
		return rc;
	r->index_boosts =
	    cm_realloc(T, r->index_boosts, (r->nindex_boosts + 1) * sizeof(*r->index_boosts));
	r->index_boosts[r->nindex_boosts++] = (sr_index_boost){cm_strdup(T, v->string), b};
	return CM_OK;
}

/* "indices_boost": {"idx": 2} (ES's deprecated form) or [{"idx": 2}, ...]. */
static cm_err
parse_indices_boost(sr_request *r, const cJSON *v, cm_error *err)
{
	cm_err rc;
	if (cJSON_IsObject(v)) {
		for (const cJSON *e = v->child; e; e = e->next)
			if ((rc = add_index_boost(r, e, err)))
				return rc;
		return CM_OK;
	}
	if (!cJSON_IsArray(v))
		return cm_error_set(err, CM_EPARSE, "Unknown key for a %s in [indices_boost].",
		                    token_name(v));
	for (const cJSON *e = v->child; e; e = e->next) {
		if (!cJSON_IsObject(e))
			return cm_error_set(
			    err, CM_EPARSE,
			    "Expected [START_OBJECT] in [indices_boost] but found [%s]",
			    token_name(e));
		if (!e->child)
			return cm_error_set(err, CM_EPARSE,
			                    "Expected [FIELD_NAME] in [indices_boost] but found "
			                    "[END_OBJECT]");
		if (e->child->next)
			return cm_error_set(err, CM_EPARSE,
			                    "Expected [END_OBJECT] in [indices_boost] but found "
			                    "[FIELD_NAME]");
		if ((rc = add_index_boost(r, e->child, err)))
			return rc;
	}
	return CM_OK;
}

float
sr_request_index_boost(const sr_request *req, const char *index)
{
	for (size_t i = 0; index && i < req->nindex_boosts; i++)
		if (!strcmp(req->index_boosts[i].index, index))
			return req->index_boosts[i].boost;
	return 1.0f;
}

static bool
known_key(const char *k, const char *const *keys, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(k, keys[i]))
			return true;
	return false;
}

/* One inner_hits definition of a collapse: checked here, run by the
 * coordinator (co_collapse.c). */
static cm_err
check_inner_hits(const cJSON *o, cm_error *err)
{
	static const char *const keys[] = {
	    "name",         "from",   "size", "sort", "_source", "version", "seq_no_primary_term",
	    "track_scores", "explain"};
	if (!cJSON_IsObject(o))
		return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                         "[inner_hits] expected an object, found %s",
		                         token_name(o));
	sr_request tmp;
	sr_request_init(&tmp);
	cm_err rc = CM_OK;
	int64_t from = 0, size = 3; /* InnerHitBuilder's defaults */
	const char *name = NULL;
	for (const cJSON *v = o->child; v && !rc; v = v->next) {
		int64_t n;
		if (!strcmp(v->string, "name") && cJSON_IsString(v))
			name = v->valuestring;
		if (!known_key(v->string, keys, sizeof(keys) / sizeof(keys[0])))
			rc = cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
			                       "[inner_hits] unknown field [%s]", v->string);
		else if (!strcmp(v->string, "name") && !cJSON_IsString(v))
			rc = cm_error_set_type(
			    err, CM_EPARSE, "x_content_parse_exception",
			    "[inner_hits] name doesn't support values of type: %s", token_name(v));
		else if (!strcmp(v->string, "from") || !strcmp(v->string, "size")) {
			if (!(rc = int_param(v, v->string, &n, err)) && n < 0)
				rc = cm_error_set(err, CM_EINVAL, "[inner_hits] %s must be positive",
				                  v->string);
			else if (!rc)
				*(v->string[0] == 'f' ? &from : &size) = n;
		} else if (!strcmp(v->string, "sort"))
			rc = parse_sort(&tmp, v, err);
		else if (!strcmp(v->string, "_source"))
			rc = parse_source(&tmp, v, err);
		else if (strcmp(v->string, "name"))
			rc = bool_param(v, v->string, &tmp.version, err);
	}
	sr_request_free(&tmp);
	/* index.max_inner_result_window's default */
	if (!rc && from + size > 100)
		rc = cm_error_set(err, CM_EINVAL,
		                  "Inner result window is too large, the inner hit definition's [%s]'s "
		                  "from + size must be less than or equal to: [100] but was [%lld]. "
		                  "This limit can be set by changing the "
		                  "[index.max_inner_result_window] index level setting.",
		                  name ? name : "", (long long)(from + size));
	return rc;
}

static cm_err
parse_collapse(sr_request *r, const cJSON *v, cm_error *err)
{
	cm_err rc;
	if (!cJSON_IsObject(v))
		return cm_error_set(err, CM_EPARSE, "Unknown key for a %s in [collapse].",
		                    token_name(v));
	cm_free(T, r->collapse_field);
	r->collapse_field = NULL;
	for (const cJSON *e = v->child; e; e = e->next) {
		if (!strcmp(e->string, "field")) {
			if (!cJSON_IsString(e))
				return cm_error_set_type(
				    err, CM_EPARSE, "x_content_parse_exception",
				    "[collapse] field doesn't support values of type: %s",
				    token_name(e));
			cm_free(T, r->collapse_field);
			r->collapse_field = cm_strdup(T, e->valuestring);
		} else if (!strcmp(e->string, "inner_hits")) {
			if (cJSON_IsArray(e)) {
				for (const cJSON *x = e->child; x; x = x->next)
					if ((rc = check_inner_hits(x, err)))
						return rc;
			} else if ((rc = check_inner_hits(e, err)))
				return rc;
		} else if (!strcmp(e->string, "max_concurrent_group_searches")) {
			int64_t n;
			if ((rc = int_param(e, e->string, &n, err)))
				return rc;
			if (n < 1)
				return cm_error_set(
				    err, CM_EINVAL,
				    "maxConcurrentGroupRequests must be positive, got %lld",
				    (long long)n);
		} else {
			return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
			                         "[collapse] unknown field [%s]", e->string);
		}
	}
	if (!r->collapse_field || !r->collapse_field[0])
		return cm_error_set(err, CM_EINVAL, "field name is null or empty");
	return CM_OK;
}

/* "stored_fields": a name or a list. Nothing is stored apart from _source
 * (docs/api.md), so it decides whether _id and _source come back. */
static cm_err
parse_stored_fields(sr_request *r, const cJSON *v, bool *source_asked, cm_error *err)
{
	const cJSON *e = cJSON_IsArray(v) ? v->child : v;
	if (!cJSON_IsArray(v) && !cJSON_IsString(v))
		return cm_error_set(err, CM_EPARSE, "[stored_fields] must be a string or an array");
	for (; e; e = cJSON_IsArray(v) ? e->next : NULL) {
		if (!cJSON_IsString(e))
			return cm_error_set(err, CM_EPARSE,
			                    "Expected [VALUE_STRING] in [stored_fields] "
			                    "but found [%s]",
			                    token_name(e));
		if (!strcmp(e->valuestring, "_none_")) {
			if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 1)
				return cm_error_set(err, CM_EINVAL,
				                    "cannot combine _none_ with other fields");
			r->stored_fields_none = true;
		} else if (!strcmp(e->valuestring, "_source")) {
			*source_asked = true;
		}
	}
	return CM_OK;
}

/* script_fields and runtime_mappings: Kibana and Grafana send them empty;
 * scripts are not run here, so a non-empty one is refused by name. */
static cm_err
empty_only(const cJSON *v, const char *k, cm_error *err)
{
	if (!cJSON_IsObject(v))
		return cm_error_set(err, CM_EPARSE, "[%s] must be an object", k);
	if (v->child)
		return cm_error_set(err, CM_EINVAL,
		                    "[%s] is not supported (scripts are not run); "
		                    "only an empty [%s] is accepted",
		                    k, k);
	return CM_OK;
}

cm_err
sr_request_from_json(const cJSON *body, sr_request *r, cm_error *err)
{
	cm_err rc = CM_OK;
	bool have_aggs = false, have_source = false, have_stored = false, stored_source = false;
	if (!body)
		return CM_OK;
	if (!cJSON_IsObject(body))
		return cm_error_set(err, CM_EPARSE, "request body or source parameter is required");
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		const char *k = v->string;
		int64_t n;
		if (!strcmp(k, "query")) {
			sr_query_free(r->query);
			r->query = NULL;
			if (!cJSON_IsObject(v))
				rc = cm_error_set(
				    err, CM_EPARSE,
				    "[_na] query malformed, must start with start_object");
			else
				rc = sr_query_from_json(v, &r->query, err);
		} else if (!strcmp(k, "from")) {
			if (!(rc = int_param(v, k, &n, err))) {
				if (n < 0)
					rc = cm_error_set(
					    err, CM_EINVAL,
					    "[from] parameter cannot be negative but was [%lld]",
					    (long long)n);
				else if (n > UINT32_MAX / 2)
					rc = cm_error_set(err, CM_EINVAL, "[from] is too large");
				else
					r->from = (uint32_t)n;
			}
		} else if (!strcmp(k, "size")) {
			if (!(rc = int_param(v, k, &n, err))) {
				if (n < 0)
					rc = cm_error_set(
					    err, CM_EINVAL,
					    "[size] parameter cannot be negative, found [%lld]",
					    (long long)n);
				else if (n > UINT32_MAX / 2)
					rc = cm_error_set(err, CM_EINVAL, "[size] is too large");
				else
					r->size = (uint32_t)n;
			}
		} else if (!strcmp(k, "sort")) {
			rc = parse_sort(r, v, err);
		} else if (!strcmp(k, "search_after")) {
			rc = parse_search_after(r, v, err);
		} else if (!strcmp(k, "_source")) {
			have_source = true;
			rc = parse_source(r, v, err);
		} else if (!strcmp(k, "highlight")) {
			sr_highlight_free(r->highlight);
			r->highlight = NULL;
			rc = sr_highlight_parse(v, &r->highlight, err);
		} else if (!strcmp(k, "fields")) {
			rc = sr_fetch_parse(v, k, &r->fields, &r->nfields, err);
		} else if (!strcmp(k, "docvalue_fields")) {
			rc = sr_fetch_parse(v, k, &r->docvalue_fields, &r->ndocvalue_fields, err);
		} else if (!strcmp(k, "stored_fields")) {
			have_stored = true;
			rc = parse_stored_fields(r, v, &stored_source, err);
		} else if (!strcmp(k, "script_fields") || !strcmp(k, "runtime_mappings")) {
			rc = empty_only(v, k, err);
		} else if (!strcmp(k, "track_total_hits")) {
			if (cJSON_IsBool(v))
				r->track_total_hits = cJSON_IsTrue(v) ? SR_TRACK_ALL : 0;
			else if (!(rc = int_param(v, k, &n, err))) {
				if (n < -1)
					rc = cm_error_set(err, CM_EVALIDATE,
					                  "Validation Failed: 1: "
					                  "[track_total_hits] parameter must "
					                  "be positive or equals to -1, got %lld;",
					                  (long long)n);
				else
					r->track_total_hits = n == -1 ? 0 : n;
			}
		} else if (!strcmp(k, "timeout")) {
			if (!cJSON_IsString(v))
				rc = cm_error_set(
				    err, CM_EPARSE,
				    "failed to parse setting [timeout] with value [%s] as a time "
				    "value: unit is missing or unrecognized",
				    token_name(v));
			else if (!(rc = sr_parse_time_value(v->valuestring, "timeout",
			                                    &r->timeout_ns, err)))
				r->deadline_ns = r->timeout_ns ? cm_now_ns() + r->timeout_ns : 0;
		} else if (!strcmp(k, "terminate_after")) {
			if (!(rc = int_param(v, k, &n, err))) {
				if (n < 0)
					rc = cm_error_set(err, CM_EINVAL,
					                  "terminateAfter must be > 0");
				else
					r->terminate_after = (uint64_t)n;
			}
		} else if (!strcmp(k, "aggs") || !strcmp(k, "aggregations")) {
			if (have_aggs)
				rc = cm_error_set(err, CM_EPARSE,
				                  "Found two aggregation type definitions in [%s]",
				                  k);
			else if (!cJSON_IsObject(v))
				rc = cm_error_set(err, CM_EPARSE, "Unknown key for a %s in [%s].",
				                  token_name(v), k);
			else {
				have_aggs = true;
				rc = sr_agg_from_json(v, &r->aggs, err);
			}
		} else if (!strcmp(k, "version")) {
			rc = bool_param(v, k, &r->version, err);
		} else if (!strcmp(k, "seq_no_primary_term")) {
			rc = bool_param(v, k, &r->seq_no_primary_term, err);
		} else if (!strcmp(k, "track_scores")) {
			rc = bool_param(v, k, &r->track_scores, err);
		} else if (!strcmp(k, "explain")) {
			rc = bool_param(v, k, &r->explain_scores, err);
		} else if (!strcmp(k, "profile")) {
			rc = bool_param(v, k, &r->profile, err);
		} else if (!strcmp(k, "suggest")) {
			sr_suggest_free(r->suggest);
			r->suggest = NULL;
			rc = sr_suggest_from_json(v, &r->suggest, err);
		} else if (!strcmp(k, "post_filter")) {
			sr_query_free(r->post_filter);
			r->post_filter = NULL;
			if (!cJSON_IsObject(v))
				rc = cm_error_set(
				    err, CM_EPARSE,
				    "[_na] query malformed, must start with start_object");
			else
				rc = sr_query_from_json(v, &r->post_filter, err);
		} else if (!strcmp(k, "min_score")) {
			if (!(rc = float_param(v, "search_source", k, &r->min_score, err)))
				r->has_min_score = true;
		} else if (!strcmp(k, "rescore")) {
			rc = parse_rescore(r, v, err);
		} else if (!strcmp(k, "indices_boost")) {
			rc = parse_indices_boost(r, v, err);
		} else if (!strcmp(k, "collapse")) {
			rc = parse_collapse(r, v, err);
		} else if (!strcmp(k, "stats")) {
			rc = parse_stats_groups(r, v, err);
		} else {
			size_t i;
			for (i = 0; i < sizeof(unsupported_keys) / sizeof(unsupported_keys[0]); i++)
				if (!strcmp(k, unsupported_keys[i]))
					break;
			if (i < sizeof(unsupported_keys) / sizeof(unsupported_keys[0]))
				rc = cm_error_set(err, CM_EINVAL, "[%s] is not supported", k);
			else
				rc = cm_error_set(err, CM_EPARSE, "Unknown key for a %s in [%s].",
				                  token_name(v), k);
		}
	}
	if (rc)
		return rc;
	if (have_stored) {
		/* Elasticsearch: stored_fields without _source leaves _source out
		 * unless the list names it; _none_ cannot go with _source */
		if (r->stored_fields_none && have_source && r->fetch_source)
			return cm_error_set(
			    err, CM_EINVAL,
			    "[stored_fields] cannot be disabled if [_source] is requested");
		if (!have_source)
			r->fetch_source = stored_source && !r->stored_fields_none;
	}
	if (r->nrescore) {
		for (size_t i = 0; i < r->nsort; i++)
			if (r->sort[i].kind != SR_SORT_SCORE || !r->sort[i].desc)
				return cm_error_set(err, CM_EINVAL,
				                    "Cannot use [sort] option in conjunction with "
				                    "[rescore].");
	}
	if (r->collapse_field) {
		if (r->nsearch_after)
			return cm_error_set(
			    err, CM_EINVAL,
			    "cannot use `collapse` in conjunction with `search_after`");
		if (r->nrescore)
			return cm_error_set(err, CM_EINVAL,
			                    "cannot use `collapse` in conjunction with `rescore`");
	}
	if (r->nsearch_after) {
		size_t want = r->nsort ? r->nsort : 1;
		if (r->nsearch_after != want)
			return cm_error_set(err, CM_EINVAL,
			                    "search_after has %zu value(s) but sort has %zu.",
			                    r->nsearch_after, want);
		if (r->from > 0)
			return cm_error_set(
			    err, CM_EVALIDATE,
			    "Validation Failed: 1: `from` parameter must be set to 0 when "
			    "`search_after` is used.;");
	}
	return CM_OK;
}

/* ---- URL parameter forms ---- */

cm_err
sr_request_sort_param(sr_request *r, const char *sort, cm_error *err)
{
	if (!sort)
		return CM_OK;
	free_sort(r);
	const char *p = sort;
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char *item = cm_strndup(T, p, len);
		char *colon = strrchr(item, ':');
		sr_sort_key *k;
		cm_err rc;
		if (colon)
			*colon = '\0';
		rc = add_sort_key(r, item, err, &k);
		if (!rc && colon)
			rc = order_value(colon + 1, &k->desc, err);
		cm_free(T, item);
		if (rc)
			return rc;
		p += len;
		if (*p == ',')
			p++;
	}
	return CM_OK;
}

static cm_err
comma_list(const char *s, char ***v, size_t *n, cm_error *err)
{
	const char *p = s;
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (len) {
			char *item = cm_strndup(T, p, len);
			cm_err rc = push_pattern(v, n, item, err);
			cm_free(T, item);
			if (rc)
				return rc;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return CM_OK;
}

cm_err
sr_request_source_params(sr_request *r, const char *source, const char *includes,
                         const char *excludes, cm_error *err)
{
	cm_err rc;
	if (source) {
		free_source(r);
		r->fetch_source = true;
		if (!strcmp(source, "false"))
			r->fetch_source = false;
		else if (strcmp(source, "true") &&
		         (rc = comma_list(source, &r->source_includes, &r->nincludes, err)))
			return rc;
	}
	if (includes) {
		r->fetch_source = true;
		free_strs(r->source_includes, r->nincludes);
		r->source_includes = NULL;
		r->nincludes = 0;
		if ((rc = comma_list(includes, &r->source_includes, &r->nincludes, err)))
			return rc;
	}
	if (excludes) {
		r->fetch_source = true;
		free_strs(r->source_excludes, r->nexcludes);
		r->source_excludes = NULL;
		r->nexcludes = 0;
		if ((rc = comma_list(excludes, &r->source_excludes, &r->nexcludes, err)))
			return rc;
	}
	return CM_OK;
}

/* ---- exact big integers ---- */

static void
collect_numbers(cJSON *j, cJSON ***v, size_t *n, size_t *cap)
{
	for (; j; j = j->next) {
		if (cJSON_IsNumber(j)) {
			if (*n == *cap) {
				*cap = *cap ? 2 * *cap : 32;
				*v = cm_realloc(T, *v, *cap * sizeof(cJSON *));
			}
			(*v)[(*n)++] = j;
		} else if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
			collect_numbers(j->child, v, n, cap);
		}
	}
}

static void pair_numbers(cJSON *root, const char *src, size_t len, bool to_string);

void
sr_json_exact_integers(cJSON *root, const char *src, size_t len)
{
	pair_numbers(root, src, len, true);
}

void
sr_json_number_texts(cJSON *root, const char *src, size_t len)
{
	pair_numbers(root, src, len, false);
}

static void
pair_numbers(cJSON *root, const char *src, size_t len, bool to_string)
{
	cJSON **nodes = NULL;
	size_t n = 0, cap = 0;
	collect_numbers(root, &nodes, &n, &cap);
	if (n == 0)
		return;
	/* number tokens come in the order of a depth-first walk (cJSON keeps
	 * member order): pair them in one scan, strings skipped, and convert
	 * only when every node found its token */
	size_t *off = cm_malloc(T, n * sizeof(size_t)), *tlen = cm_malloc(T, n * sizeof(size_t));
	size_t k = 0;
	bool ok = true;
	for (size_t i = 0; i < len && ok;) {
		char c = src[i];
		if (c == '"') {
			for (i++; i < len && src[i] != '"'; i++)
				if (src[i] == '\\')
					i++;
			i++;
		} else if (c == '-' || (c >= '0' && c <= '9')) {
			size_t st = i;
			while (i < len && ((src[i] >= '0' && src[i] <= '9') || src[i] == '-' ||
			                   src[i] == '+' || src[i] == '.' || src[i] == 'e' || src[i] == 'E'))
				i++;
			if (k >= n) {
				ok = false;
				break;
			}
			off[k] = st;
			tlen[k++] = i - st;
		} else {
			i++;
		}
	}
	for (size_t x = 0; ok && k == n && x < n; x++) {
		const char *t = src + off[x];
		size_t tl = tlen[x];
		bool integer = tl < 64 && !memchr(t, '.', tl) && !memchr(t, 'e', tl) && !memchr(t, 'E', tl);
		if (!integer || fabs(nodes[x]->valuedouble) < 9007199254740992.0)
			continue;
		char *str = cJSON_malloc(tl + 1);
		if (!str)
			continue;
		memcpy(str, t, tl);
		str[tl] = '\0';
		if (to_string)
			nodes[x]->type = cJSON_String;
		nodes[x]->valuestring = str; /* cJSON_Delete frees it either way */
	}
	cm_free(T, off);
	cm_free(T, tlen);
	cm_free(T, nodes);
}
