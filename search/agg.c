/* Aggregations: spec parsing, the state tree, collector dispatch, merge,
 * render and the wire encoding. Kind-specific code is in agg_bucket.c and
 * agg_metric.c behind agg_ops. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_sys.h"
#include "agg_int.h"

#define AGG_WIRE_MAGIC 0x41475331u /* "AGS1" */

static const struct {
	const char *name;
	agg_kind kind;
	const agg_ops *ops;
} agg_types[] = {
    {"terms", AGG_TERMS, &agg_ops_terms},
    {"histogram", AGG_HISTOGRAM, &agg_ops_histogram},
    {"date_histogram", AGG_DATE_HISTOGRAM, &agg_ops_date_histogram},
    {"range", AGG_RANGE, &agg_ops_range},
    {"date_range", AGG_DATE_RANGE, &agg_ops_date_range},
    {"filter", AGG_FILTER, &agg_ops_filter},
    {"filters", AGG_FILTERS, &agg_ops_filters},
    {"missing", AGG_MISSING, &agg_ops_missing},
    {"min", AGG_MIN, &agg_ops_min},
    {"max", AGG_MAX, &agg_ops_max},
    {"sum", AGG_SUM, &agg_ops_sum},
    {"avg", AGG_AVG, &agg_ops_avg},
    {"stats", AGG_STATS, &agg_ops_stats},
    {"extended_stats", AGG_EXTENDED_STATS, &agg_ops_extended_stats},
    {"value_count", AGG_VALUE_COUNT, &agg_ops_value_count},
    {"cardinality", AGG_CARDINALITY, &agg_ops_cardinality},
    {"percentiles", AGG_PERCENTILES, &agg_ops_percentiles},
    {"top_hits", AGG_TOP_HITS, &agg_ops_top_hits},
    {"composite", AGG_COMPOSITE, &agg_ops_composite},
    {"percentile_ranks", AGG_PERCENTILE_RANKS, &agg_ops_percentile_ranks},
    {"weighted_avg", AGG_WEIGHTED_AVG, &agg_ops_weighted_avg},
    {"rare_terms", AGG_RARE_TERMS, &agg_ops_rare_terms},
    {"top_metrics", AGG_TOP_METRICS, &agg_ops_top_metrics},
    {"global", AGG_GLOBAL, &agg_ops_global},
    {"adjacency_matrix", AGG_ADJACENCY_MATRIX, &agg_ops_adjacency_matrix},
    {"significant_terms", AGG_SIGNIFICANT_TERMS, &agg_ops_significant_terms},
    {"sampler", AGG_SAMPLER, &agg_ops_sampler},
    {"diversified_sampler", AGG_DIVERSIFIED_SAMPLER, &agg_ops_diversified_sampler},
    {"geo_bounds", AGG_GEO_BOUNDS, &agg_ops_geo_bounds},
    {"geo_centroid", AGG_GEO_CENTROID, &agg_ops_geo_centroid},
    {"geohash_grid", AGG_GEOHASH_GRID, &agg_ops_geohash_grid},
    {"geotile_grid", AGG_GEOTILE_GRID, &agg_ops_geotile_grid},
    {"multi_terms", AGG_MULTI_TERMS, &agg_ops_multi_terms},
    {"auto_date_histogram", AGG_AUTO_DATE_HISTOGRAM, &agg_ops_auto_date_histogram},
    {"variable_width_histogram", AGG_VARIABLE_WIDTH_HISTOGRAM, &agg_ops_variable_width_histogram},
    {"nested", AGG_NESTED, &agg_ops_nested},
    {"reverse_nested", AGG_REVERSE_NESTED, &agg_ops_reverse_nested},
    {"median_absolute_deviation", AGG_MEDIAN_ABSOLUTE_DEVIATION,
     &agg_ops_median_absolute_deviation},
};

static const agg_ops *
agg_type_find(const char *name, agg_kind *kind)
{
	for (size_t i = 0; i < sizeof agg_types / sizeof agg_types[0]; i++)
		if (strcmp(agg_types[i].name, name) == 0) {
			*kind = agg_types[i].kind;
			return agg_types[i].ops;
		}
	return NULL;
}

/* ---------------------------------------------------------------- parsing */

cm_err
agg_parse_num(const cJSON *v, const char *agg, const char *key, double *out, cm_error *err)
{
	if (cJSON_IsNumber(v)) {
		*out = v->valuedouble;
		return CM_OK;
	}
	if (cJSON_IsString(v)) {
		char *end;
		double d = strtod(v->valuestring, &end);
		if (end != v->valuestring && *end == 0) {
			*out = d;
			return CM_OK;
		}
	}
	return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
	                         "[%s] failed to parse field [%s]", agg, key);
}

cm_err
agg_parse_int(const cJSON *v, const char *agg, const char *key, int64_t lo, int64_t hi,
              int64_t *out, cm_error *err)
{
	double d = 0; /* gcc -O2 cannot see that a parse error returns nonzero */
	if (agg_parse_num(v, agg, key, &d, err))
		return CM_EPARSE;
	if (d != d || d < (double)lo || d > (double)hi || d != (double)(int64_t)d)
		return cm_error_set(err, CM_EINVAL, "[%s] must be an integer in [%lld, %lld] for [%s]",
		                    key, (long long)lo, (long long)hi, agg);
	*out = (int64_t)d;
	return CM_OK;
}

cm_err
agg_parse_bool(const cJSON *v, const char *agg, const char *key, bool *out, cm_error *err)
{
	if (cJSON_IsBool(v)) {
		*out = cJSON_IsTrue(v);
		return CM_OK;
	}
	if (cJSON_IsString(v) && (!strcmp(v->valuestring, "true") || !strcmp(v->valuestring, "false"))) {
		*out = v->valuestring[0] == 't';
		return CM_OK;
	}
	return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
	                         "[%s] failed to parse field [%s]", agg, key);
}

cm_err
agg_parse_str(const cJSON *v, const char *agg, const char *key, char **out, cm_error *err)
{
	char buf[64];
	const char *s = NULL;
	if (cJSON_IsString(v))
		s = v->valuestring;
	else if (cJSON_IsNumber(v)) {
		if (v->valuedouble == (double)(int64_t)v->valuedouble)
			snprintf(buf, sizeof buf, "%lld", (long long)v->valuedouble);
		else
			snprintf(buf, sizeof buf, "%.17g", v->valuedouble);
		s = buf;
	} else
		return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                         "[%s] failed to parse field [%s]", agg, key);
	cm_free(AGG_MEM, *out);
	*out = cm_strdup(AGG_MEM, s);
	return CM_OK;
}

cm_err
agg_unknown_param(const sr_agg *a, const char *key, cm_error *err)
{
	char dym[200];
	bool any = a->ops->known && cm_did_you_mean(key, a->ops->known, dym, sizeof dym);
	return cm_error_set(err, CM_EPARSE, "[%s] unknown field [%s]%s%s%s", a->ops->name, key,
	                    any ? " did you mean " : "", any ? dym : "", any ? "?" : "");
}

/* "field", "missing", "format" are common to every values-source agg; kinds
 * see the rest. */
static cm_err
agg_parse_common(sr_agg *a, const cJSON *body, cm_error *err)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(body, "field");
	if (f) {
		if (!cJSON_IsString(f))
			return cm_error_set(err, CM_EPARSE, "[%s] field must be a string", a->ops->name);
		a->field = cm_strdup(AGG_MEM, f->valuestring);
	}
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "missing");
	if (m) {
		if (cJSON_IsNumber(m)) {
			a->missing.set = a->missing.is_num = true;
			a->missing.d = m->valuedouble;
			a->missing.l = (int64_t)m->valuedouble;
		} else if (cJSON_IsString(m)) {
			a->missing.set = true;
			char *end;
			double d = strtod(m->valuestring, &end);
			if (end != m->valuestring && *end == 0) {
				a->missing.is_num = true;
				a->missing.d = d;
				a->missing.l = (int64_t)d;
			}
		} else if (cJSON_IsBool(m)) {
			a->missing.set = a->missing.is_num = true;
			a->missing.d = a->missing.l = cJSON_IsTrue(m);
		} else
			return cm_error_set(err, CM_EPARSE, "[%s] failed to parse field [missing]",
			                    a->ops->name);
		if (a->missing.set) {
			char *s = NULL;
			if (cJSON_IsBool(m))
				s = cm_strdup(AGG_MEM, cJSON_IsTrue(m) ? "true" : "false");
			else if (agg_parse_str(m, a->ops->name, "missing", &s, err))
				return CM_EPARSE;
			a->missing.s = s;
			a->missing.slen = strlen(s);
		}
	}
	const cJSON *vt = cJSON_GetObjectItemCaseSensitive(body, "value_type");
	if (vt) {
		static const struct {
			const char *name;
			st_field_type t;
		} types[] = {{"string", ST_FT_KEYWORD}, {"keyword", ST_FT_KEYWORD},
		             {"long", ST_FT_LONG},      {"integer", ST_FT_LONG},
		             {"numeric", ST_FT_LONG},   {"number", ST_FT_LONG},
		             {"double", ST_FT_DOUBLE},  {"float", ST_FT_DOUBLE},
		             {"date", ST_FT_DATE},      {"boolean", ST_FT_BOOLEAN},
		             {"ip", ST_FT_IP}};
		if (!cJSON_IsString(vt))
			return cm_error_set(err, CM_EPARSE, "[%s] value_type must be a string",
			                    a->ops->name);
		for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
			if (!strcmp(vt->valuestring, types[i].name)) {
				a->has_value_type = true;
				a->value_type = types[i].t;
			}
		/* other types (geo_point, range) leave "missing" as it is */
	}
	const cJSON *fm = cJSON_GetObjectItemCaseSensitive(body, "format");
	if (fm) {
		if (!cJSON_IsString(fm))
			return cm_error_set(err, CM_EPARSE, "[%s] format must be a string",
			                    a->ops->name);
		a->format = cm_strdup(AGG_MEM, fm->valuestring);
	}
	if (a->ops->needs_field && !a->field) {
		if (cJSON_GetObjectItemCaseSensitive(body, "script"))
			return cm_error_set(err, CM_EINVAL, "[script] is not supported in aggregation [%s]",
			                    a->name);
		return cm_error_set(err, CM_EINVAL,
		                    "Required one of fields [field, script], but none were specified.");
	}
	return CM_OK;
}

static bool
agg_name_ok(const char *s)
{
	return *s && !strpbrk(s, "[]>");
}

static cm_err agg_parse_list(const cJSON *aggs, sr_agg *parent, int depth, int *next_id,
                             cm_error *err);

static cm_err
agg_parse_one(const char *name, const cJSON *body, int depth, int *next_id, sr_agg **out,
              cm_error *err)
{
	if (!agg_name_ok(name) || strlen(name) > AGG_MAX_NAME)
		return cm_error_set(err, CM_EPARSE,
		                    "Invalid aggregation name [%s]. Aggregation names can contain any "
		                    "character except '[', ']', and '>'",
		                    name);
	if (!cJSON_IsObject(body))
		return cm_error_set(err, CM_EPARSE,
		                    "Expected [START_OBJECT] under [%s], but got a [VALUE] in [%s]", name,
		                    name);
	sr_agg *a = cm_calloc(AGG_MEM, 1, sizeof *a);
	a->name = cm_strdup(AGG_MEM, name);
	a->id = (*next_id)++;
	const cJSON *type_body = NULL, *subs = NULL;
	const char *type = NULL;
	cm_err rc = CM_OK;
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "aggs") || !strcmp(c->string, "aggregations")) {
			if (subs) {
				rc = cm_error_set(err, CM_EPARSE,
				                  "Found two sub aggregation definitions under [%s]", name);
				goto fail;
			}
			subs = c;
			continue;
		}
		if (!strcmp(c->string, "meta")) {
			if (!cJSON_IsObject(c)) {
				rc = cm_error_set(err, CM_EPARSE,
				                  "Expected [START_OBJECT] under [meta], but got a [VALUE] "
				                  "in [%s]",
				                  name);
				goto fail;
			}
			cm_free(AGG_MEM, a->meta);
			char *m = cJSON_PrintUnformatted(c);
			a->meta = cm_strdup(AGG_MEM, m ? m : "{}");
			cJSON_free(m);
			continue;
		}
		if (type) {
			rc = cm_error_set(err, CM_EPARSE,
			                  "Found two aggregation type definitions in [%s]: [%s] and [%s]",
			                  name, type, c->string);
			goto fail;
		}
		type = c->string;
		type_body = c;
	}
	if (!type) {
		rc = cm_error_set(err, CM_EPARSE, "Missing definition for aggregation [%s]", name);
		goto fail;
	}
	a->ops = agg_type_find(type, &a->kind);
	static const char *const not_here[] = {
	    "significant_text", "children",        "parent",
	    "geo_distance",     "ip_range",        "scripted_metric",
	    "median_absolute_deviation", "string_stats", "boxplot",
	    "t_test",           "matrix_stats",    "moving_avg",
	    "cumulative_cardinality", "inference",  "normalize", "rate"};
	for (size_t i = 0; !a->ops && i < sizeof not_here / sizeof not_here[0]; i++)
		if (!strcmp(type, not_here[i])) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "aggregation type [%s] of [%s] is not supported by Shoal", type,
			                  name);
			goto fail;
		}
	if (!a->ops) {
		rc = cm_error_set(err, CM_EPARSE, "Unknown aggregation type [%s]", type);
		goto fail;
	}
	if (!cJSON_IsObject(type_body)) {
		rc = cm_error_set(err, CM_EPARSE,
		                  "Expected [START_OBJECT] under [%s], but got a [VALUE] in [%s]", type,
		                  name);
		goto fail;
	}
	if (a->kind != AGG_FILTER && (rc = agg_parse_common(a, type_body, err)))
		goto fail;
	if ((rc = a->ops->parse(a, type_body, err)))
		goto fail;
	if (subs) {
		if (!a->ops->bucket) {
			rc = cm_error_set_type(err, CM_EPARSE, "aggregation_initialization_exception",
			                       "Aggregator [%s] of type [%s] cannot accept sub-aggregations",
			                       name, type);
			goto fail;
		}
		if (depth + 1 > AGG_MAX_DEPTH) {
			rc = cm_error_set(err, CM_EPARSE, "aggregations nested deeper than %d",
			                  AGG_MAX_DEPTH);
			goto fail;
		}
		if ((rc = agg_parse_list(subs, a, depth + 1, next_id, err)))
			goto fail;
	}
	*out = a;
	return CM_OK;
fail:
	sr_agg_free(a);
	return rc;
}

/* A pipeline aggregation's type, or NULL when body declares a regular one. */
static const char *
agg_pipe_type_of(const cJSON *body)
{
	if (!cJSON_IsObject(body))
		return NULL;
	for (const cJSON *c = body->child; c; c = c->next)
		if (strcmp(c->string, "aggs") && strcmp(c->string, "aggregations") &&
		    strcmp(c->string, "meta"))
			return agg_pipe_is_type(c->string) ? c->string : NULL;
	return NULL;
}

static cm_err
agg_parse_pipe(const char *name, const cJSON *body, const char *type, agg_pipe **out,
               cm_error *err)
{
	const cJSON *meta = NULL, *tb = NULL;
	int ntypes = 0;
	for (const cJSON *c = body->child; c; c = c->next) {
		if (!strcmp(c->string, "aggs") || !strcmp(c->string, "aggregations"))
			return cm_error_set_type(err, CM_EPARSE, "aggregation_initialization_exception",
			                         "Aggregator [%s] of type [%s] cannot accept "
			                         "sub-aggregations",
			                         name, type);
		if (!strcmp(c->string, "meta")) {
			if (!cJSON_IsObject(c))
				return cm_error_set(err, CM_EPARSE,
				                    "Expected [START_OBJECT] under [meta], but got a [VALUE] "
				                    "in [%s]",
				                    name);
			meta = c;
			continue;
		}
		if (ntypes++)
			return cm_error_set(err, CM_EPARSE,
			                    "Found two aggregation type definitions in [%s]: [%s] and [%s]",
			                    name, type, c->string);
		tb = c;
	}
	if (!cJSON_IsObject(tb))
		return cm_error_set(err, CM_EPARSE,
		                    "Expected [START_OBJECT] under [%s], but got a [VALUE] in [%s]", type,
		                    name);
	return agg_pipe_parse(name, type, tb, meta, out, err);
}

static bool
agg_sibling_taken(const sr_agg *parent, const char *name)
{
	for (size_t i = 0; i < parent->nsubs; i++)
		if (!strcmp(parent->subs[i]->name, name))
			return true;
	for (size_t i = 0; i < parent->npipes; i++)
		if (!strcmp(agg_pipe_name(parent->pipes[i]), name))
			return true;
	return false;
}

static cm_err
agg_parse_list(const cJSON *aggs, sr_agg *parent, int depth, int *next_id, cm_error *err)
{
	if (!cJSON_IsObject(aggs))
		return cm_error_set(err, CM_EPARSE,
		                    "Expected [START_OBJECT] under [aggregations], but got a [VALUE]");
	size_t n = 0;
	for (const cJSON *c = aggs->child; c; c = c->next)
		n++;
	if (n > 10000)
		return cm_error_set(err, CM_EINVAL, "too many aggregations [%zu]", n);
	parent->subs = cm_calloc(AGG_MEM, n ? n : 1, sizeof *parent->subs);
	for (const cJSON *c = aggs->child; c; c = c->next) {
		if (agg_sibling_taken(parent, c->string))
			return cm_error_set(err, CM_EPARSE,
			                    "Two sibling aggregations cannot have the same name: [%s]",
			                    c->string);
		const char *ptype = agg_pipe_type_of(c);
		if (ptype) {
			if (!agg_name_ok(c->string) || strlen(c->string) > AGG_MAX_NAME)
				return cm_error_set(err, CM_EPARSE,
				                    "Invalid aggregation name [%s]. Aggregation names can "
				                    "contain any character except '[', ']', and '>'",
				                    c->string);
			agg_pipe *pp = NULL;
			cm_err rc = agg_parse_pipe(c->string, c, ptype, &pp, err);
			if (rc)
				return rc;
			if (!parent->pipes)
				parent->pipes = cm_calloc(AGG_MEM, n, sizeof *parent->pipes);
			parent->pipes[parent->npipes++] = pp;
			continue;
		}
		sr_agg *a = NULL;
		cm_err rc = agg_parse_one(c->string, c, depth, next_id, &a, err);
		if (rc)
			return rc;
		if (a->kind == AGG_GLOBAL && parent->kind != AGG_ROOT) {
			cm_error_set(err, CM_EAGGEXEC,
			             "Aggregation [%s] cannot have a global sub-aggregation [%s]. "
			             "Global aggregations can only be defined as top level "
			             "aggregations",
			             parent->name, a->name);
			sr_agg_free(a);
			return CM_EINVAL;
		}
		if (a->kind == AGG_COMPOSITE && parent->kind != AGG_ROOT) {
			cm_error_set(err, CM_EINVAL,
			             "[composite] aggregation cannot be used with a parent aggregation of "
			             "type: [%s]",
			             parent->ops->name);
			sr_agg_free(a);
			return CM_EINVAL;
		}
		parent->subs[parent->nsubs++] = a;
	}
	return CM_OK;
}

/* Validates order paths against the sub-aggregations now that they exist. */
static cm_err
agg_check_tree(const sr_agg *a, cm_error *err)
{
	extern cm_err agg_terms_check_order(const sr_agg *a, cm_error *err);
	extern cm_err agg_multi_terms_check_order(const sr_agg *a, cm_error *err);
	if (a->kind == AGG_TERMS || a->kind == AGG_MULTI_TERMS) {
		cm_err rc = a->kind == AGG_TERMS ? agg_terms_check_order(a, err)
		                                 : agg_multi_terms_check_order(a, err);
		if (rc)
			return rc;
	}
	for (size_t i = 0; i < a->nsubs; i++) {
		cm_err rc = agg_check_tree(a->subs[i], err);
		if (rc)
			return rc;
	}
	return CM_OK;
}

cm_err
sr_agg_from_json(const cJSON *aggs, sr_agg **out, cm_error *err)
{
	sr_agg *root = cm_calloc(AGG_MEM, 1, sizeof *root);
	root->kind = AGG_ROOT;
	root->name = cm_strdup(AGG_MEM, "");
	int next_id = 1;
	cm_err rc = agg_parse_list(aggs, root, 0, &next_id, err);
	if (!rc)
		rc = agg_check_tree(root, err);
	if (!rc)
		rc = agg_nested_check(root, err);
	if (!rc)
		rc = agg_pipe_check(root, err);
	if (rc) {
		sr_agg_free(root);
		return rc;
	}
	root->nspecs = next_id;
	*out = root;
	return CM_OK;
}

void
sr_agg_free(sr_agg *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->nsubs; i++)
		sr_agg_free(a->subs[i]);
	cm_free(AGG_MEM, a->subs);
	for (size_t i = 0; i < a->npipes; i++)
		agg_pipe_free(a->pipes[i]);
	cm_free(AGG_MEM, a->pipes);
	cm_free(AGG_MEM, a->meta);
	if (a->ops && a->ops->free_params && a->p)
		a->ops->free_params(a->p);
	cm_free(AGG_MEM, a->name);
	cm_free(AGG_MEM, a->field);
	cm_free(AGG_MEM, a->missing.s);
	cm_free(AGG_MEM, a->format);
	cm_free(AGG_MEM, a);
}

/* ---------------------------------------------------------------- validation */

static const char *text_msg =
    "Text fields are not optimised for operations that require per-document field data like "
    "aggregations and sorting, so these operations are disabled by default. Please use a "
    "keyword field instead. Alternatively, set fielddata=true on [%s] in order to load field "
    "data by uninverting the inverted index. Note that this can use significant memory.";

static bool
agg_kind_geo_ok(agg_kind k)
{
	return k == AGG_VALUE_COUNT || k == AGG_MISSING || k == AGG_GEO_BOUNDS ||
	       k == AGG_GEO_CENTROID || k == AGG_GEOHASH_GRID || k == AGG_GEOTILE_GRID;
}

static cm_err
agg_validate_one(const sr_agg *a, const st_mapping *m, cm_error *err)
{
	if (a->field && a->ops && a->ops->needs_field) {
		const st_field_def *f = st_mapping_find(m, a->field);
		/* an object has no field type: unmapped, as in ES */
		if (f && f->type != ST_FT_OBJECT) {
			if (f->type == ST_FT_TEXT)
				return cm_error_set(err, CM_EINVAL, text_msg, a->field);
			bool geo_kind = a->kind == AGG_GEO_BOUNDS || a->kind == AGG_GEO_CENTROID ||
			                a->kind == AGG_GEOHASH_GRID || a->kind == AGG_GEOTILE_GRID;
			if (geo_kind && f->type != ST_FT_GEO_POINT)
				return cm_error_set(err, CM_EINVAL,
				                    "Field [%s] of type [%s] is not supported for "
				                    "aggregation [%s]",
				                    a->field, st_field_type_name(f->type), a->ops->name);
			/* range fields: histograms (ES 7.10), and counting */
			if (st_field_type_is_range(f->type) &&
			    !((a->kind == AGG_HISTOGRAM || a->kind == AGG_DATE_HISTOGRAM) &&
			      f->type != ST_FT_IP_RANGE) &&
			    a->kind != AGG_VALUE_COUNT && a->kind != AGG_MISSING)
				return cm_error_set(err, CM_EINVAL,
				                    "Field [%s] of type [%s] is not supported for "
				                    "aggregation [%s]",
				                    a->field, st_field_type_name(f->type),
				                    a->ops->name);
			/* geo_point: counting and the geo aggregations */
			if (f->type == ST_FT_GEO_POINT && !agg_kind_geo_ok(a->kind))
				return cm_error_set(
				    err, CM_EINVAL,
				    "Field [%s] of type [geo_point] is not supported for "
				    "aggregation [%s]",
				    a->field, a->ops->name);
			bool numeric_only =
			    a->kind == AGG_MIN || a->kind == AGG_MAX || a->kind == AGG_SUM ||
			    a->kind == AGG_AVG || a->kind == AGG_STATS ||
			    a->kind == AGG_EXTENDED_STATS || a->kind == AGG_PERCENTILES ||
			    a->kind == AGG_HISTOGRAM || a->kind == AGG_PERCENTILE_RANKS ||
			    a->kind == AGG_RANGE || a->kind == AGG_VARIABLE_WIDTH_HISTOGRAM ||
			    a->kind == AGG_MEDIAN_ABSOLUTE_DEVIATION;
			if ((numeric_only || a->kind == AGG_DATE_HISTOGRAM ||
			     a->kind == AGG_DATE_RANGE || a->kind == AGG_AUTO_DATE_HISTOGRAM) &&
			    st_field_type_is_ordinal(f->type))
				return cm_error_set(err, CM_EINVAL,
				                    "Field [%s] of type [%s] is not supported for "
				                    "aggregation [%s]",
				                    a->field, st_field_type_name(f->type), a->ops->name);
		}
	}
	if (a->ops && a->ops->shard_check) {
		cm_err rc = a->ops->shard_check(a, m, err);
		if (rc)
			return rc;
	}
	for (size_t i = 0; i < a->nsubs; i++) {
		cm_err rc = agg_validate_one(a->subs[i], m, err);
		if (rc)
			return rc;
	}
	return CM_OK;
}

cm_err
sr_agg_validate(const sr_agg *a, const st_mapping *m, cm_error *err)
{
	if (!a || !m)
		return CM_OK;
	return agg_validate_one(a, m, err);
}

/* ---------------------------------------------------------------- states */

agg_node *
agg_node_new(const sr_agg *a)
{
	agg_node *n = cm_calloc(AGG_MEM, 1, sizeof *n);
	n->spec = a;
	n->ftype = -1;
	n->epoch = 0;
	n->d = a->ops->state_new(a);
	return n;
}

void
agg_node_free(agg_node *n)
{
	if (!n)
		return;
	n->spec->ops->state_free(n->spec, n->d);
	cm_free(AGG_MEM, n);
}

agg_node **
agg_subs_new(const sr_agg *parent)
{
	if (!parent->nsubs)
		return NULL;
	agg_node **v = cm_calloc(AGG_MEM, parent->nsubs, sizeof *v);
	for (size_t i = 0; i < parent->nsubs; i++)
		v[i] = agg_node_new(parent->subs[i]);
	return v;
}

void
agg_subs_free(const sr_agg *parent, agg_node **subs)
{
	if (!subs)
		return;
	for (size_t i = 0; i < parent->nsubs; i++)
		agg_node_free(subs[i]);
	cm_free(AGG_MEM, subs);
}

sr_agg_state *
sr_agg_state_new(const sr_agg *a)
{
	sr_agg_state *s = cm_calloc(AGG_MEM, 1, sizeof *s);
	s->root.spec = a;
	s->root.rts = cm_calloc(AGG_MEM, a->nspecs ? a->nspecs : 1, sizeof *s->root.rts);
	s->subs = agg_subs_new(a);
	s->shard_level = true;
	return s;
}

void
sr_agg_state_free(sr_agg_state *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->root.spec->nspecs; i++) {
		agg_rt *rt = &s->root.rts[i];
		st_colblock_free(&rt->cb);
		cm_free(AGG_MEM, rt->conv_buf);
		if (rt->persist && rt->spec && rt->spec->ops->rt_free)
			rt->spec->ops->rt_free(rt);
	}
	for (int i = 0; i < s->root.spec->nspecs; i++)
		cm_free(AGG_MEM, s->root.rts[i].dirty);
	cm_free(AGG_MEM, s->root.rts);
	agg_subs_free(s->root.spec, s->subs);
	cm_free(AGG_MEM, s->root.index);
	cm_free(AGG_MEM, s);
}

const cm_error *
sr_agg_state_error(const sr_agg_state *s)
{
	return s->root.err.code ? &s->root.err : NULL;
}

void
sr_agg_state_set_index(sr_agg_state *s, const char *index, uint32_t shard)
{
	cm_free(AGG_MEM, s->root.index);
	s->root.index = index ? cm_strdup(AGG_MEM, index) : NULL;
	s->root.shard = shard;
}

/* ---------------------------------------------------------------- collection */

void
agg_mark_dirty(agg_rt *rt, agg_node *n)
{
	if (n->epoch == rt->epoch)
		return;
	n->epoch = rt->epoch;
	if (rt->ndirty == rt->dirty_cap) {
		rt->dirty_cap = rt->dirty_cap ? rt->dirty_cap * 2 : 16;
		rt->dirty = cm_realloc(AGG_MEM, rt->dirty, rt->dirty_cap * sizeof *rt->dirty);
	}
	rt->dirty[rt->ndirty++] = n;
}


int
agg_ftype(st_field_type t)
{
	switch (t) {
	case ST_FT_DATE_NANOS:
		return ST_FT_DATE;
	case ST_FT_HALF_FLOAT:
	case ST_FT_SCALED_FLOAT:
	case ST_FT_UNSIGNED_LONG:
		return ST_FT_DOUBLE;
	default:
		return (int)t;
	}
}

int
agg_values(agg_rt *rt, uint32_t doc, const int64_t **vals)
{
	if (!rt->fi)
		return 0;
	int n = st_col_values_sparse(rt->ctx->txn, rt->fi, &rt->cb, doc, vals);
	if (n < 0) {
		cm_error_set(&rt->root->err, CM_ECORRUPT, "could not read column [%s]",
		             rt->spec->field);
		return 0;
	}
	if (rt->conv == CONV_NONE || n == 0)
		return n;
	if (n > rt->conv_cap) {
		rt->conv_cap = n > 16 ? n : 16;
		rt->conv_buf = cm_realloc(AGG_MEM, rt->conv_buf, (size_t)rt->conv_cap * sizeof(int64_t));
	}
	const int64_t *in = *vals;
	for (int i = 0; i < n; i++) {
		int64_t v = in[i];
		if (rt->conv == CONV_NANOS) /* floor to the millisecond */
			v = v >= 0 ? v / 1000000 : -((-v + 999999) / 1000000);
		else if (rt->conv == CONV_SCALED)
			v = st_double_to_sortable((double)v / rt->scale);
		else
			v = st_double_to_sortable((double)st_col_to_ulong(v));
		rt->conv_buf[i] = v;
	}
	*vals = rt->conv_buf;
	return n;
}

void
agg_too_many_buckets(cm_error *err, uint64_t n)
{
	cm_error_set_type(err, CM_ELIMIT, "too_many_buckets_exception",
	                  "Trying to create too many buckets. Must be less than or equal to: [%d] "
	                  "but was [%llu]. This limit can be set by changing the "
	                  "[search.max_buckets] cluster level setting.",
	                  SR_MAX_BUCKETS, (unsigned long long)n);
}

bool
agg_bucket_guard(agg_root *root, uint64_t more)
{
	root->buckets += more;
	/* The exact limit applies when rendering (after terms are cut to size);
	 * here it only bounds memory, so it is looser. */
	if (root->buckets > (uint64_t)SR_MAX_BUCKETS * 16) {
		agg_too_many_buckets(&root->err, root->buckets);
		return false;
	}
	return true;
}

bool
agg_field_numeric_or_fail(agg_rt *rt, cm_error *err)
{
	if (rt->fi && st_field_type_is_ordinal(rt->fi->type)) {
		cm_error_set(err, CM_EINVAL,
		             "Field [%s] of type [%s] is not supported for aggregation [%s]",
		             rt->spec->field, st_field_type_name(rt->fi->type), rt->spec->ops->name);
		return false;
	}
	return true;
}

void
agg_subs_collect(agg_root *root, const sr_agg *parent, agg_node **subs, const uint32_t *docs,
                 const float *scores, size_t n)
{
	if (root->err.code)
		return;
	for (size_t i = 0; i < parent->nsubs; i++) {
		agg_node *s = subs[i];
		agg_rt *rt = &root->rts[s->spec->id];
		if (rt->fi && s->ftype < 0)
			s->ftype = rt->fi->type == ST_FT_UNSIGNED_LONG && s->spec->kind == AGG_TERMS
			               ? ST_FT_UNSIGNED_LONG
			               : agg_ftype(rt->fi->type);
		s->spec->ops->collect(rt, s, docs, scores, n);
	}
}

/* Resolves a's field in the segment of ctx into rt (column, conversions). */
cm_err
agg_rt_field(agg_root *root, agg_rt *rt, const sr_agg *a, const sr_seg_ctx *ctx)
{
	rt->spec = a;
	rt->root = root;
	rt->ctx = ctx;
	rt->fi = NULL;
	rt->is_double = rt->is_keyword = false;
	rt->range_type = (st_field_type)0;
	rt->conv = 0;
	/* A fresh segment invalidates the cached block. */
	rt->cb.ndocs = 0;
	rt->cb.first_doc = UINT32_MAX;
	rt->cb.block = UINT32_MAX;
	if (a->field && a->ops->needs_field) {
		const st_field_info *fi = st_segment_field(ctx->seg, a->field);
		if (fi && !(fi->flags & ST_FI_COLUMN)) {
			if (fi->type == ST_FT_TEXT)
				return cm_error_set(&root->err, CM_EINVAL, text_msg, a->field);
			return cm_error_set(&root->err, CM_EINVAL,
			                    "Can't load fielddata on [%s] because doc values are "
			                    "disabled for it",
			                    a->field);
		}
		if (fi && fi->type == ST_FT_GEO_POINT && !agg_kind_geo_ok(a->kind))
			return cm_error_set(&root->err, CM_EINVAL,
			                    "Field [%s] of type [geo_point] is not supported for "
			                    "aggregation [%s]",
			                    a->field, a->ops->name);
		if (fi) {
			rt->fi = fi;
			rt->is_double = st_field_type_is_double(fi->type);
			rt->is_keyword = st_field_type_is_ordinal(fi->type);
			rt->conv = CONV_NONE;
			const st_mapping *rm =
			    fi->type == ST_FT_KEYWORD ? st_reader_mapping(ctx->reader) : NULL;
			const st_field_def *rd = rm ? st_mapping_find(rm, a->field) : NULL;
			if (rd && st_field_type_is_range(rd->type)) {
				rt->range_type = rd->type;
				rt->is_keyword = false;
			}
			if (fi->type == ST_FT_DATE_NANOS) {
				rt->conv = CONV_NANOS;
			} else if (fi->type == ST_FT_SCALED_FLOAT || fi->type == ST_FT_UNSIGNED_LONG) {
				const st_mapping *m = st_reader_mapping(ctx->reader);
				const st_field_def *d = m ? st_mapping_find(m, a->field) : NULL;
				rt->conv = fi->type == ST_FT_SCALED_FLOAT ? CONV_SCALED : CONV_ULONG;
				rt->scale = d && d->scaling_factor > 0 ? d->scaling_factor : 1;
				rt->is_double = true;
				if (fi->type == ST_FT_UNSIGNED_LONG && a->kind == AGG_TERMS) {
					/* exact keys: the column's order-preserving longs */
					rt->conv = CONV_NONE;
					rt->is_double = false;
				}
			}
		}
	}
	return CM_OK;
}

static cm_err
agg_rt_begin(agg_root *root, const sr_agg *a, const sr_seg_ctx *ctx)
{
	agg_rt *rt = &root->rts[a->id];
	rt->ndirty = 0;
	rt->epoch = root->epoch;
	rt->kd = NULL;
	cm_err frc = agg_rt_field(root, rt, a, ctx);
	if (frc)
		return frc;
	if (a->ops->seg_begin) {
		cm_err rc = a->ops->seg_begin(rt, &root->err);
		if (rc)
			return rc;
	}
	for (size_t i = 0; i < a->nsubs; i++) {
		cm_err rc = agg_rt_begin(root, a->subs[i], ctx);
		if (rc)
			return rc;
	}
	return CM_OK;
}

static void agg_rt_end(agg_root *root, const sr_agg *a);

cm_err
agg_subs_rt_begin(agg_root *root, const sr_agg *parent, const sr_seg_ctx *ctx)
{
	for (size_t i = 0; i < parent->nsubs; i++) {
		cm_err rc = agg_rt_begin(root, parent->subs[i], ctx);
		if (rc)
			return rc;
	}
	return CM_OK;
}

void
agg_subs_rt_end(agg_root *root, const sr_agg *parent)
{
	for (size_t i = 0; i < parent->nsubs; i++)
		agg_rt_end(root, parent->subs[i]);
}

static void
agg_rt_end(agg_root *root, const sr_agg *a)
{
	agg_rt *rt = &root->rts[a->id];
	if (rt->ctx) {
		/* Parents flush before children: a parent's flush may still feed
		 * its buckets' sub-states. */
		if (a->ops && a->ops->seg_flush)
			for (size_t i = 0; i < rt->ndirty; i++)
				a->ops->seg_flush(rt, rt->dirty[i]);
		rt->ndirty = 0;
		if (a->ops && a->ops->seg_end)
			a->ops->seg_end(rt);
		rt->kd = NULL;
	}
	for (size_t i = 0; i < a->nsubs; i++)
		agg_rt_end(root, a->subs[i]);
	rt->ctx = NULL;
	rt->fi = NULL;
}

static cm_err
coll_begin(void *self, const sr_seg_ctx *ctx)
{
	sr_agg_state *s = self;
	agg_root *root = &s->root;
	if (root->err.code)
		return root->err.code;
	if (root->in_segment)
		agg_rt_end(root, root->spec);
	root->epoch++;
	root->in_segment = true;
	root->seg_index = ctx->seg_index;
	cm_err rc = CM_OK;
	for (size_t i = 0; i < root->spec->nsubs && !rc; i++) {
		rc = agg_rt_begin(root, root->spec->subs[i], ctx);
		/* global reads the whole segment when it ends, matched or not */
		if (!rc && root->spec->subs[i]->kind == AGG_GLOBAL)
			agg_mark_dirty(&root->rts[root->spec->subs[i]->id], s->subs[i]);
	}
	if (rc) {
		agg_rt_end(root, root->spec);
		root->in_segment = false;
	}
	return rc;
}

static void
coll_collect(void *self, const uint32_t *docs, const float *scores, size_t n)
{
	sr_agg_state *s = self;
	if (!s->root.in_segment || !n)
		return;
	agg_subs_collect(&s->root, s->root.spec, s->subs, docs, scores, n);
}

static void
coll_end(void *self)
{
	extern void agg_terms_touch(agg_rt * rt, agg_node * n);
	sr_agg_state *s = self;
	if (!s->root.in_segment)
		return;
	for (size_t i = 0; i < s->root.spec->nsubs; i++)
		if (s->root.spec->subs[i]->kind == AGG_TERMS)
			agg_terms_touch(&s->root.rts[s->root.spec->subs[i]->id], s->subs[i]);
	for (size_t i = 0; i < s->root.spec->nsubs; i++)
		agg_rt_end(&s->root, s->root.spec->subs[i]);
	s->root.in_segment = false;
}

cm_err
sr_agg_state_shard_end(sr_agg_state *s)
{
	agg_root *root = &s->root;
	if (root->err.code)
		return root->err.code;
	for (size_t i = 0; i < root->spec->nsubs; i++) {
		cm_err rc = agg_sampler_shard_end(root, root->spec->subs[i]);
		if (rc)
			return rc;
	}
	return root->err.code;
}

sr_collector
sr_agg_collector(sr_agg_state *s)
{
	sr_collector c = {s, coll_begin, coll_collect, coll_end};
	return c;
}

/* ---------------------------------------------------------------- merge */

void
agg_subs_shard_finish(const sr_agg *parent, agg_node **subs)
{
	if (!subs)
		return;
	for (size_t i = 0; i < parent->nsubs; i++)
		if (subs[i]->spec->ops->shard_finish)
			subs[i]->spec->ops->shard_finish(subs[i]->spec, subs[i]);
}

void
agg_subs_merge(const sr_agg *parent, agg_node **into, agg_node **from)
{
	for (size_t i = 0; i < parent->nsubs; i++) {
		if (into[i]->ftype < 0)
			into[i]->ftype = from[i]->ftype;
		parent->subs[i]->ops->merge(parent->subs[i], into[i], from[i]);
	}
}

static void
state_finish(sr_agg_state *s)
{
	if (!s->shard_level)
		return;
	agg_subs_shard_finish(s->root.spec, s->subs);
	s->shard_level = false;
}

void
sr_agg_state_merge(sr_agg_state *into, sr_agg_state *from)
{
	state_finish(into);
	state_finish(from);
	if (from->root.err.code && !into->root.err.code)
		into->root.err = from->root.err;
	agg_subs_merge(into->root.spec, into->subs, from->subs);
	if (!into->root.index && from->root.index) {
		into->root.index = from->root.index;
		from->root.index = NULL;
	}
	/* from is left empty: fresh states in place of the consumed ones. */
	agg_subs_free(from->root.spec, from->subs);
	from->subs = agg_subs_new(from->root.spec);
	from->shard_level = false;
}

/* ---------------------------------------------------------------- ordering paths */

static const sr_agg *
agg_sub_find(const sr_agg *parent, const char *name, size_t len, size_t *idx)
{
	for (size_t i = 0; i < parent->nsubs; i++)
		if (strlen(parent->subs[i]->name) == len && !memcmp(parent->subs[i]->name, name, len)) {
			*idx = i;
			return parent->subs[i];
		}
	return NULL;
}

/* single buckets an order path steps through (their state is an sbkt) */
static bool
agg_kind_path_bucket(agg_kind k)
{
	return k == AGG_FILTER || k == AGG_MISSING || k == AGG_SAMPLER ||
	       k == AGG_DIVERSIFIED_SAMPLER || k == AGG_NESTED || k == AGG_REVERSE_NESTED;
}

/* "agg.doc_count" of a single-bucket agg: its doc count, as "agg" (ES's
 * only key of a single bucket) */
static bool
single_bucket_count_key(const sr_agg *a, const char *rest)
{
	return agg_kind_path_bucket(a->kind) && rest[0] == '.' && !strcmp(rest + 1, "doc_count");
}

/* path: "agg" / "agg.key" / "agg[key]"; for a single-bucket agg such as
 * filter, "agg>sub..." descends. */
bool
agg_subs_path_ok(const sr_agg *parent, const char *path)
{
	size_t len = strcspn(path, ".>[");
	size_t idx;
	const sr_agg *a = agg_sub_find(parent, path, len, &idx);
	if (!a)
		return false;
	if (path[len] == '>')
		return agg_kind_path_bucket(a->kind) && agg_subs_path_ok(a, path + len + 1);
	if ((path[len] == 0 && agg_kind_path_bucket(a->kind)) ||
	    single_bucket_count_key(a, path + len))
		return true; /* doc_count of the single bucket */
	return a->ops->metric_value != NULL;
}

bool
agg_subs_value(const sr_agg *parent, agg_node *const *subs, const char *path, double *v)
{
	extern bool agg_single_bucket_value(const sr_agg *a, const agg_node *n, const char *rest,
	                                    double *v);
	size_t len = strcspn(path, ".>[");
	size_t idx;
	const sr_agg *a = agg_sub_find(parent, path, len, &idx);
	if (!a || !subs)
		return false;
	if (single_bucket_count_key(a, path + len))
		len = strlen(path); /* as the bare name */
	if (a->kind == AGG_NESTED || a->kind == AGG_REVERSE_NESTED)
		return agg_nested_value(a, subs[idx], path[len] == '>' ? path + len + 1 : NULL, v);
	if (agg_kind_path_bucket(a->kind))
		return agg_single_bucket_value(a, subs[idx],
		                               path[len] == '>' ? path + len + 1 : NULL, v);
	if (!a->ops->metric_value)
		return false;
	char key[128];
	const char *k = NULL;
	if (path[len] == '.') {
		k = path + len + 1;
	} else if (path[len] == '[') {
		size_t kl = strcspn(path + len + 1, "]");
		if (kl >= sizeof key)
			return false;
		memcpy(key, path + len + 1, kl);
		key[kl] = 0;
		k = key;
	}
	return a->ops->metric_value(a, subs[idx], k, v);
}

/* ---------------------------------------------------------------- render */

void
agg_json_str(cm_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	cm_buf_reserve(b, n + 2);
	cm_buf_put_u8(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			cm_buf_put_u8(b, '\\');
			cm_buf_put_u8(b, c);
		} else if (c < 0x20) {
			char e[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
			switch (c) {
			case '\n': cm_buf_put(b, "\\n", 2); break;
			case '\r': cm_buf_put(b, "\\r", 2); break;
			case '\t': cm_buf_put(b, "\\t", 2); break;
			default: cm_buf_put(b, e, 6);
			}
		} else
			cm_buf_put_u8(b, c);
	}
	cm_buf_put_u8(b, '"');
}

/* Shortest decimal digits that read back as v: digits in dig, decimal
 * exponent (value = 0.d1d2... * 10^exp10). */
static int
shortest_digits(double v, char *dig, int *exp10)
{
	char tmp[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
		if (strtod(tmp, NULL) == v || prec == 17) {
			int nd = 0;
			char *p = tmp;
			for (; *p && *p != 'e'; p++)
				if (*p >= '0' && *p <= '9')
					dig[nd++] = *p;
			while (nd > 1 && dig[nd - 1] == '0')
				nd--;
			dig[nd] = 0;
			*exp10 = atoi(p + 1) + 1;
			return nd;
		}
	}
	return 0;
}

void
agg_double_str(char *buf, size_t cap, double v)
{
	if (v != v || v == INFINITY || v == -INFINITY) {
		snprintf(buf, cap, "%s", v != v ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
		return;
	}
	if (v == 0) {
		snprintf(buf, cap, "%s", signbit(v) ? "-0.0" : "0.0");
		return;
	}
	char dig[24];
	int e;
	char out[64];
	size_t o = 0;
	if (v < 0)
		out[o++] = '-';
	double a = fabs(v);
	int nd = shortest_digits(a, dig, &e);
	if (a >= 1e-3 && a < 1e7) {
		if (e <= 0) {
			out[o++] = '0';
			out[o++] = '.';
			for (int i = 0; i < -e; i++)
				out[o++] = '0';
			for (int i = 0; i < nd; i++)
				out[o++] = dig[i];
		} else {
			for (int i = 0; i < e; i++)
				out[o++] = i < nd ? dig[i] : '0';
			out[o++] = '.';
			if (nd > e)
				for (int i = e; i < nd; i++)
					out[o++] = dig[i];
			else
				out[o++] = '0';
		}
		out[o] = 0;
	} else {
		out[o++] = dig[0];
		out[o++] = '.';
		if (nd > 1)
			for (int i = 1; i < nd; i++)
				out[o++] = dig[i];
		else
			out[o++] = '0';
		snprintf(out + o, sizeof out - o, "E%d", e - 1);
	}
	snprintf(buf, cap, "%s", out);
}

void
agg_json_double(cm_buf *b, double v)
{
	if (v != v || v == INFINITY || v == -INFINITY) {
		cm_buf_put(b, "null", 4);
		return;
	}
	char buf[64];
	agg_double_str(buf, sizeof buf, v);
	cm_buf_put(b, buf, strlen(buf));
}

void
agg_json_double_or_null(cm_buf *b, double v, bool present)
{
	if (present)
		agg_json_double(b, v);
	else
		cm_buf_put(b, "null", 4);
}

/* ES prints "meta" first in an aggregation's object: splice it in after
 * the '{' a render wrote at `at`. */
void
agg_insert_meta(cm_buf *b, size_t at, const char *meta)
{
	if (at >= b->len || b->data[at] != '{')
		return;
	bool empty = at + 1 < b->len && b->data[at + 1] == '}';
	size_t ml = strlen(meta);
	size_t add = 7 + ml + (empty ? 0 : 1);
	cm_buf_reserve(b, add);
	memmove(b->data + at + 1 + add, b->data + at + 1, b->len - at - 1);
	memcpy(b->data + at + 1, "\"meta\":", 7);
	memcpy(b->data + at + 8, meta, ml);
	if (!empty)
		b->data[at + 8 + ml] = ',';
	b->len += add;
}

/* The type ES names an aggregation's result by
 * (InternalAggregation.getWriteableName), for typed_keys. */
static const char *
agg_typed_name(const sr_agg *a, const agg_node *n)
{
	switch (a->kind) {
	case AGG_TERMS:
	case AGG_RARE_TERMS:
	case AGG_SIGNIFICANT_TERMS:
		return agg_terms_type_name(a, n);
	case AGG_PERCENTILES:
	case AGG_PERCENTILE_RANKS:
		return agg_pct_type_name(a);
	case AGG_DIVERSIFIED_SAMPLER:
		return "sampler"; /* InternalSampler serves both */
	default:
		return a->ops->name; /* the request's type is the response's */
	}
}

cm_err
agg_subs_render(const sr_agg *parent, agg_node *const *subs, agg_render *r)
{
	for (size_t i = 0; i < parent->nsubs; i++) {
		const sr_agg *a = parent->subs[i];
		cm_buf_put_u8(r->out, ',');
		if (r->typed) {
			cm_buf t;
			cm_buf_init(&t, AGG_MEM);
			cm_buf_printf(&t, "%s#%s", agg_typed_name(a, subs[i]), a->name);
			agg_json_str(r->out, (const char *)t.data, t.len);
			cm_buf_free(&t);
		} else
			agg_json_str(r->out, a->name, strlen(a->name));
		cm_buf_put_u8(r->out, ':');
		size_t at = r->out->len;
		cm_err rc = a->ops->render(a, subs[i], r);
		if (rc)
			return rc;
		if (a->meta)
			agg_insert_meta(r->out, at, a->meta);
	}
	return CM_OK;
}

cm_err
sr_agg_render(const sr_agg_state *s, cm_buf *out, cm_error *err)
{
	return sr_agg_render_typed(s, out, false, err);
}

cm_err
sr_agg_render_typed(const sr_agg_state *s, cm_buf *out, bool typed_keys, cm_error *err)
{
	if (s->root.err.code) {
		if (err && !err->code)
			*err = s->root.err;
		return s->root.err.code;
	}
	agg_render r = {out, err, 0, typed_keys};
	size_t start = out->len;
	cm_buf_put_u8(out, '{');
	size_t body = out->len;
	cm_err rc = agg_subs_render(s->root.spec, s->subs, &r);
	if (rc) {
		out->len = start;
		return rc;
	}
	/* drop the leading comma agg_subs_render writes */
	if (out->len > body) {
		memmove(out->data + body, out->data + body + 1, out->len - body - 1);
		out->len--;
	}
	cm_buf_put_u8(out, '}');
	if (s->root.spec->any_pipes &&
	    (rc = agg_pipe_apply(s->root.spec, out, start, typed_keys, err))) {
		out->len = start;
		return rc;
	}
	return CM_OK;
}

/* ---------------------------------------------------------------- encoding */

void
agg_put_double(cm_buf *b, double v)
{
	uint64_t u;
	memcpy(&u, &v, 8);
	cm_buf_put_u64(b, u);
}

bool
agg_get_double(cm_rd *r, double *v)
{
	uint64_t u;
	if (!cm_rd_u64(r, &u))
		return false;
	memcpy(v, &u, 8);
	return true;
}

bool
agg_get_count(cm_rd *r, uint64_t max, uint64_t *v)
{
	if (!cm_rd_varint(r, v))
		return false;
	if (*v > max || *v > cm_rd_left(r)) {
		r->bad = true;
		return false;
	}
	return true;
}

void
agg_subs_encode(const sr_agg *parent, agg_node *const *subs, cm_buf *b)
{
	for (size_t i = 0; i < parent->nsubs; i++) {
		cm_buf_put_varint(b, (uint64_t)(subs[i]->ftype + 1));
		parent->subs[i]->ops->encode(parent->subs[i], subs[i], b);
	}
}

bool
agg_subs_decode(const sr_agg *parent, agg_node **subs, cm_rd *r)
{
	for (size_t i = 0; i < parent->nsubs; i++) {
		uint64_t ft;
		if (!cm_rd_varint(r, &ft) || ft > ST_FT_LAST + 1)
			return false;
		subs[i]->ftype = (int)ft - 1;
		if (!parent->subs[i]->ops->decode(parent->subs[i], subs[i], r))
			return false;
	}
	return true;
}

cm_err
sr_agg_state_encode(sr_agg_state *s, cm_buf *out)
{
	state_finish(s);
	size_t start = out->len;
	cm_buf_put_u32(out, AGG_WIRE_MAGIC);
	cm_buf_put_varint(out, (uint64_t)s->root.spec->nspecs);
	cm_buf_put_u32(out, s->root.shard);
	if (s->root.index)
		cm_buf_put_str(out, s->root.index, strlen(s->root.index));
	else
		cm_buf_put_str(out, "", 0);
	/* an error travels too, so a shard failure is not mistaken for no data */
	cm_buf_put_varint(out, (uint64_t)s->root.err.code);
	cm_buf_put_str(out, s->root.err.reason, strlen(s->root.err.reason));
	cm_buf_put_str(out, s->root.err.type_override, strlen(s->root.err.type_override));
	agg_subs_encode(s->root.spec, s->subs, out);
	cm_buf_put_checksum(out, start);
	return CM_OK;
}

cm_err
sr_agg_state_decode(const sr_agg *a, const void *p, size_t n, sr_agg_state **out,
                    cm_error *err)
{
	size_t len = n;
	if (!cm_checksum_ok(p, &len))
		return cm_error_set(err, CM_ECORRUPT, "aggregation state checksum mismatch");
	cm_rd r;
	cm_rd_init(&r, p, len);
	uint32_t magic, shard;
	uint64_t nspecs, code;
	const char *idx, *reason, *type;
	size_t idxn, reasonn, typen;
	if (!cm_rd_u32(&r, &magic) || magic != AGG_WIRE_MAGIC || !cm_rd_varint(&r, &nspecs) ||
	    nspecs != (uint64_t)a->nspecs || !cm_rd_u32(&r, &shard) || !cm_rd_str(&r, &idx, &idxn) ||
	    !cm_rd_varint(&r, &code) || code >= CM_ERR_COUNT || !cm_rd_str(&r, &reason, &reasonn) ||
	    !cm_rd_str(&r, &type, &typen))
		return cm_error_set(err, CM_ECORRUPT, "bad aggregation state header");
	sr_agg_state *s = sr_agg_state_new(a);
	s->shard_level = false;
	s->root.shard = shard;
	if (idxn)
		s->root.index = cm_strndup(AGG_MEM, idx, idxn);
	if (code) {
		s->root.err.code = (cm_err)code;
		snprintf(s->root.err.reason, sizeof s->root.err.reason, "%.*s", (int)reasonn, reason);
		snprintf(s->root.err.type_override, sizeof s->root.err.type_override, "%.*s",
		         (int)typen, type);
	}
	if (!agg_subs_decode(a, s->subs, &r) || r.bad || cm_rd_left(&r) != 0) {
		sr_agg_state_free(s);
		return cm_error_set(err, CM_ECORRUPT, "corrupt aggregation state");
	}
	*out = s;
	return CM_OK;
}
