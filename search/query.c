/* The query tree: construction, copying, and the Elasticsearch query DSL
 * parser. Shapes and error wording follow Elasticsearch 7.10 so clients
 * see the messages they already know. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/cm_alloc.h"
#include "../storage/st_types.h"
#include "exec.h"
#include "jsonw.h"
#include "sr.h"

#define T CM_MEM_SEARCH
#define MAX_DEPTH 100    /* nesting bound: a deep query must not blow the stack */
#define MAX_CLAUSES 1024 /* indices.query.bool.max_clause_count */
#define MAX_TERMS 65536  /* index.max_terms_count */

sr_query *
sr_query_new(sr_query_kind kind)
{
	sr_query *q = cm_calloc(T, 1, sizeof(*q));
	q->kind = kind;
	q->boost = 1.0f;
	q->max_expansions = 50;
	q->transpositions = true;
	q->max_determinized_states = 10000;
	q->negative_boost = 1.0f;
	return q;
}

static void
free_list(sr_query **l, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sr_query_free(l[i]);
	cm_free(T, l);
}

void
sr_query_free(sr_query *q)
{
	if (!q)
		return;
	char **strs[] = {&q->field,      &q->name,
	                 &q->value,      &q->gt,
	                 &q->gte,        &q->lt,
	                 &q->lte,        &q->format,
	                 &q->time_zone,  &q->minimum_should_match,
	                 &q->fuzziness,  &q->analyzer,
	                 &q->multi_type, &q->default_field,
	                 &q->flags,      &q->inner_hits};
	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
		cm_free(T, *strs[i]);
	for (size_t i = 0; i < q->nvalues; i++)
		cm_free(T, q->values[i]);
	cm_free(T, q->values);
	cm_free(T, q->field_boosts);
	free_list(q->must, q->nmust);
	free_list(q->should, q->nshould);
	free_list(q->must_not, q->nmust_not);
	free_list(q->filter, q->nfilter);
	free_list(q->queries, q->nqueries);
	sr_query_free(q->inner);
	sr_query_free(q->negative);
	sr_interval_free(q->intervals);
	cm_free(T, q);
}

void
sr_interval_free(sr_interval *r)
{
	if (!r)
		return;
	cm_free(T, r->text);
	cm_free(T, r->analyzer);
	cm_free(T, r->use_field);
	cm_free(T, r->fuzziness);
	for (size_t i = 0; i < r->nkids; i++)
		sr_interval_free(r->kids[i]);
	cm_free(T, r->kids);
	sr_interval_free(r->filter_rule);
	cm_free(T, r);
}

static char *dup_or_null(const char *s);

static sr_interval *
interval_clone(const sr_interval *r)
{
	if (!r)
		return NULL;
	sr_interval *c = cm_malloc(T, sizeof(*c));
	*c = *r;
	c->text = dup_or_null(r->text);
	c->analyzer = dup_or_null(r->analyzer);
	c->use_field = dup_or_null(r->use_field);
	c->fuzziness = dup_or_null(r->fuzziness);
	c->kids = r->nkids ? cm_malloc(T, r->nkids * sizeof(*c->kids)) : NULL;
	for (size_t i = 0; i < r->nkids; i++)
		c->kids[i] = interval_clone(r->kids[i]);
	c->filter_rule = interval_clone(r->filter_rule);
	return c;
}

const char *
sr_query_kind_name(sr_query_kind k)
{
	static const char *names[] = {
	    "match_all",
	    "match_none",
	    "term",
	    "terms",
	    "ids",
	    "exists",
	    "range",
	    "prefix",
	    "wildcard",
	    "regexp",
	    "fuzzy",
	    "match",
	    "match_phrase",
	    "match_phrase_prefix",
	    "multi_match",
	    "bool",
	    "constant_score",
	    "dis_max",
	    "boosting",
	    "query_string",
	    "simple_query_string",
	    "geo_bounding_box",
	    "geo_distance",
	    "nested",
	    "match_bool_prefix",
	    "intervals",
	};
	if ((size_t)k < sizeof(names) / sizeof(names[0]))
		return names[k];
	return "unknown";
}

static char *
dup_or_null(const char *s)
{
	return s ? cm_strdup(T, s) : NULL;
}

static sr_query **
clone_list(sr_query *const *l, size_t n)
{
	if (!n)
		return NULL;
	sr_query **c = cm_malloc(T, n * sizeof(*c));
	for (size_t i = 0; i < n; i++)
		c[i] = sr_query_clone(l[i]);
	return c;
}

sr_query *
sr_query_clone(const sr_query *q)
{
	if (!q)
		return NULL;
	sr_query *c = cm_malloc(T, sizeof(*c));
	*c = *q;
	char **strs[] = {&c->field,      &c->name,
	                 &c->value,      &c->gt,
	                 &c->gte,        &c->lt,
	                 &c->lte,        &c->format,
	                 &c->time_zone,  &c->minimum_should_match,
	                 &c->fuzziness,  &c->analyzer,
	                 &c->multi_type, &c->default_field,
	                 &c->flags,      &c->inner_hits};
	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
		*strs[i] = dup_or_null(*strs[i]);
	if (q->nvalues) {
		c->values = cm_malloc(T, q->nvalues * sizeof(char *));
		for (size_t i = 0; i < q->nvalues; i++)
			c->values[i] = cm_strdup(T, q->values[i]);
		if (q->field_boosts) {
			c->field_boosts = cm_malloc(T, q->nvalues * sizeof(float));
			memcpy(c->field_boosts, q->field_boosts, q->nvalues * sizeof(float));
		}
	} else {
		c->values = NULL;
		c->field_boosts = NULL;
	}
	c->must = clone_list(q->must, q->nmust);
	c->should = clone_list(q->should, q->nshould);
	c->must_not = clone_list(q->must_not, q->nmust_not);
	c->filter = clone_list(q->filter, q->nfilter);
	c->queries = clone_list(q->queries, q->nqueries);
	c->inner = sr_query_clone(q->inner);
	c->negative = sr_query_clone(q->negative);
	c->intervals = interval_clone(q->intervals);
	return c;
}

/* ---- DSL parsing ---- */

typedef struct pctx {
	cm_error *err;
	size_t clauses;
	int depth;
} pctx;

static cm_err parse_query(pctx *c, const cJSON *j, sr_query **out);

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
	if (cJSON_IsNull(v))
		return "VALUE_NULL";
	return "UNKNOWN";
}

static cm_err
perr(pctx *c, const char *fmt, const char *a, const char *b)
{
	return cm_error_set(c->err, CM_EPARSE, fmt, a, b);
}

/* The error for a query body that is not an object, as ES words it. */
static cm_err
not_object(pctx *c, const char *qname, const cJSON *body)
{
	return perr(c, "[%s] query malformed, expected START_OBJECT but found [%s]", qname,
	            token_name(body));
}

/* A scalar JSON value as the text ES would see: strings as is, numbers
 * in their shortest form, booleans as "true"/"false". */
static cm_err
scalar_text(pctx *c, const char *qname, const char *key, const cJSON *v, char **out)
{
	char num[40];
	if (cJSON_IsString(v)) {
		*out = cm_strdup(T, v->valuestring);
		return CM_OK;
	}
	if (cJSON_IsNumber(v)) {
		sr_jw_number_text(v->valuedouble, num, sizeof(num));
		*out = cm_strdup(T, num);
		return CM_OK;
	}
	if (cJSON_IsBool(v)) {
		*out = cm_strdup(T, cJSON_IsTrue(v) ? "true" : "false");
		return CM_OK;
	}
	return cm_error_set(c->err, CM_EPARSE, "[%s] query does not support [%s] of type %s", qname,
	                    key, token_name(v));
}

static cm_err
set_str(pctx *c, const char *qname, const cJSON *v, char **dst)
{
	char *s = NULL;
	cm_err rc = scalar_text(c, qname, v->string, v, &s);
	if (rc)
		return rc;
	cm_free(T, *dst);
	*dst = s;
	return CM_OK;
}

static cm_err
get_float(pctx *c, const char *qname, const cJSON *v, float *out)
{
	if (cJSON_IsNumber(v)) {
		*out = (float)v->valuedouble;
		return CM_OK;
	}
	if (cJSON_IsString(v)) {
		char *end;
		double d = strtod(v->valuestring, &end);
		if (end != v->valuestring && *end == '\0' && isfinite(d)) {
			*out = (float)d;
			return CM_OK;
		}
	}
	return cm_error_set(c->err, CM_EPARSE,
	                    "[%s] failed to parse [%s]: expected a number, found %s", qname,
	                    v->string ? v->string : "?", token_name(v));
}

static cm_err
get_int(pctx *c, const char *qname, const cJSON *v, int *out)
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
	if (d != floor(d) || d < -2147483648.0 || d > 2147483647.0)
		goto bad;
	*out = (int)d;
	return CM_OK;
bad:
	return cm_error_set(c->err, CM_EPARSE,
	                    "[%s] failed to parse [%s]: expected an integer, found %s", qname,
	                    v->string ? v->string : "?", token_name(v));
}

static cm_err
get_bool(pctx *c, const char *qname, const cJSON *v, bool *out)
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
	return cm_error_set(c->err, CM_EPARSE,
	                    "[%s] failed to parse [%s]: expected a boolean, found %s", qname,
	                    v->string ? v->string : "?", token_name(v));
}

static bool
is(const cJSON *v, const char *name)
{
	return v->string && strcmp(v->string, name) == 0;
}

/* boost and _name, accepted by every query. Returns 1 when handled. */
static int
common_param(pctx *c, const char *qname, const cJSON *v, sr_query *q, cm_err *rc)
{
	if (is(v, "boost")) {
		*rc = get_float(c, qname, v, &q->boost);
		return 1;
	}
	if (is(v, "_name")) {
		*rc = set_str(c, qname, v, &q->name);
		return 1;
	}
	return 0;
}

static cm_err
unsupported(pctx *c, const char *qname, const cJSON *v)
{
	return perr(c, "[%s] query does not support [%s]", qname, v->string);
}

static cm_err
operator_param(pctx *c, const char *qname, const cJSON *v, bool *and_out)
{
	if (cJSON_IsString(v)) {
		if (!strcasecmp(v->valuestring, "and")) {
			*and_out = true;
			return CM_OK;
		}
		if (!strcasecmp(v->valuestring, "or")) {
			*and_out = false;
			return CM_OK;
		}
		return cm_error_set(c->err, CM_EINVAL, "No enum constant %s.Operator.%s", qname,
		                    v->valuestring);
	}
	return perr(c, "[%s] query does not support [%s] of this type", qname, v->string);
}

static cm_err
zero_terms_param(pctx *c, const char *qname, const cJSON *v, sr_query *q)
{
	if (cJSON_IsString(v) && !strcasecmp(v->valuestring, "none")) {
		q->zero_terms_all = false;
		return CM_OK;
	}
	if (cJSON_IsString(v) && !strcasecmp(v->valuestring, "all")) {
		q->zero_terms_all = true;
		return CM_OK;
	}
	return cm_error_set(c->err, CM_EPARSE, "[%s] Unsupported zero_terms_query value [%s]",
	                    qname, cJSON_IsString(v) ? v->valuestring : token_name(v));
}

static cm_err
fuzziness_param(pctx *c, const char *qname, const cJSON *v, sr_query *q)
{
	char *s = NULL;
	cm_err rc = scalar_text(c, qname, "fuzziness", v, &s);
	if (rc)
		return rc;
	/* ES: AUTO, AUTO:low,high, or an edit distance 0..2 */
	bool ok = false;
	if (!strncasecmp(s, "AUTO", 4)) {
		int lo, hi;
		char tail;
		ok = s[4] == '\0' ||
		     (sscanf(s + 4, ":%d,%d%c", &lo, &hi, &tail) == 2 && lo >= 0 && hi >= lo);
		if (ok)
			memcpy(s, "AUTO", 4);
	} else {
		char *end;
		double d = strtod(s, &end);
		ok = end != s && *end == '\0' && d >= 0;
		if (ok) {
			int e = d >= 2 ? 2 : (int)d;
			snprintf(s, strlen(s) + 1, "%d", e);
		}
	}
	if (!ok) {
		rc = cm_error_set(c->err, CM_EPARSE, "[%s] failed to parse [fuzziness] value [%s]",
		                  qname, s);
		cm_free(T, s);
		return rc;
	}
	cm_free(T, q->fuzziness);
	q->fuzziness = s;
	return CM_OK;
}

/* minimum_should_match: an integer, a percentage, or a combination. */
static cm_err
msm_param(pctx *c, const char *qname, const cJSON *v, sr_query *q)
{
	if (!cJSON_IsString(v) && !cJSON_IsNumber(v))
		return perr(c, "[%s] query does not support [%s] of this type", qname,
		            "minimum_should_match");
	return set_str(c, qname, v, &q->minimum_should_match);
}

/* Splits the single-field body of a leaf query. Values other than objects
 * are the short form; every key names a field (ES rejects two). */
static cm_err
single_field(pctx *c, const char *qname, const cJSON *body, bool allow_outer_common, sr_query *q,
             const cJSON **field_out)
{
	const cJSON *f = NULL;
	if (!cJSON_IsObject(body))
		return not_object(c, qname, body);
	for (const cJSON *v = body->child; v; v = v->next) {
		if (allow_outer_common && !cJSON_IsObject(v)) {
			cm_err rc = CM_OK;
			if (common_param(c, qname, v, q, &rc)) {
				if (rc)
					return rc;
				continue;
			}
			return unsupported(c, qname, v);
		}
		if (f) {
			return cm_error_set(
			    c->err, CM_EPARSE,
			    "[%s] query doesn't support multiple fields, found [%s] and [%s]",
			    qname, f->string, v->string);
		}
		f = v;
	}
	if (!f)
		return cm_error_set(c->err, CM_EPARSE, "[%s] query malformed, no field specified",
		                    qname);
	if (f->string[0] == '\0')
		return cm_error_set(c->err, CM_EINVAL, "field name is null or empty");
	q->field = cm_strdup(T, f->string);
	*field_out = f;
	return CM_OK;
}

typedef cm_err (*leaf_param_fn)(pctx *c, const char *qname, const cJSON *v, sr_query *q,
                                bool *handled);

/* term, prefix, wildcard, regexp, fuzzy, match, match_phrase, match_phrase_prefix */
static cm_err
parse_leaf(pctx *c, const char *qname, const char *value_key, const cJSON *body, sr_query *q,
           leaf_param_fn param)
{
	const cJSON *f = NULL;
	cm_err rc = single_field(c, qname, body, false, q, &f);
	if (rc)
		return rc;
	if (!cJSON_IsObject(f)) {
		if (cJSON_IsArray(f) || cJSON_IsNull(f))
			return cm_error_set(
			    c->err, CM_EPARSE, "[%s] query does not support %s for [%s]", qname,
			    cJSON_IsArray(f) ? "array of values" : "null values", f->string);
		return scalar_text(c, qname, f->string, f, &q->value);
	}
	for (const cJSON *v = f->child; v; v = v->next) {
		bool handled = false;
		if (common_param(c, qname, v, q, &rc)) {
			if (rc)
				return rc;
			continue;
		}
		if (is(v, value_key) || (!strcmp(qname, "wildcard") && is(v, "wildcard"))) {
			if (cJSON_IsObject(v) || cJSON_IsArray(v) || cJSON_IsNull(v))
				return cm_error_set(c->err, CM_EPARSE,
				                    "[%s] query does not support [%s] of type %s",
				                    qname, v->string, token_name(v));
			if ((rc = set_str(c, qname, v, &q->value)))
				return rc;
			continue;
		}
		if ((rc = param(c, qname, v, q, &handled)))
			return rc;
		if (!handled)
			return unsupported(c, qname, v);
	}
	if (!q->value)
		return cm_error_set(c->err, CM_EINVAL, "[%s] requires %s", qname,
		                    strcmp(value_key, "query") ? "a value" : "query value");
	return CM_OK;
}

static cm_err
term_params(pctx *c, const char *qname, const cJSON *v, sr_query *q, bool *handled)
{
	*handled = true;
	if (is(v, "case_insensitive"))
		return get_bool(c, qname, v, &q->case_insensitive);
	if (is(v, "rewrite"))
		return CM_OK; /* scoring rewrite: constant score either way here */
	if (!strcmp(qname, "regexp")) {
		if (is(v, "flags"))
			return set_str(c, qname, v, &q->flags);
		if (is(v, "flags_value")) {
			int fv;
			cm_err rc = get_int(c, qname, v, &fv);
			if (rc)
				return rc;
			char b[16];
			snprintf(b, sizeof(b), "%d", fv);
			cm_free(T, q->flags);
			q->flags = cm_strdup(T, b);
			return CM_OK;
		}
		if (is(v, "max_determinized_states"))
			return get_int(c, qname, v, &q->max_determinized_states);
	}
	if (!strcmp(qname, "fuzzy")) {
		if (is(v, "fuzziness"))
			return fuzziness_param(c, qname, v, q);
		if (is(v, "prefix_length"))
			return get_int(c, qname, v, &q->prefix_length);
		if (is(v, "max_expansions"))
			return get_int(c, qname, v, &q->max_expansions);
		if (is(v, "transpositions"))
			return get_bool(c, qname, v, &q->transpositions);
	}
	*handled = false;
	return CM_OK;
}

static cm_err
match_params(pctx *c, const char *qname, const cJSON *v, sr_query *q, bool *handled)
{
	bool phrase = !strcmp(qname, "match_phrase") || !strcmp(qname, "match_phrase_prefix");
	*handled = true;
	if (is(v, "analyzer"))
		return set_str(c, qname, v, &q->analyzer);
	if (is(v, "zero_terms_query"))
		return zero_terms_param(c, qname, v, q);
	if (phrase && is(v, "slop"))
		return get_int(c, qname, v, &q->slop);
	if (!strcmp(qname, "match_phrase_prefix") && is(v, "max_expansions"))
		return get_int(c, qname, v, &q->max_expansions);
	if (!phrase) {
		if (is(v, "operator"))
			return operator_param(c, qname, v, &q->op_and);
		if (is(v, "minimum_should_match"))
			return msm_param(c, qname, v, q);
		if (is(v, "fuzziness"))
			return fuzziness_param(c, qname, v, q);
		if (is(v, "prefix_length"))
			return get_int(c, qname, v, &q->prefix_length);
		if (is(v, "max_expansions"))
			return get_int(c, qname, v, &q->max_expansions);
		if (is(v, "fuzzy_transpositions"))
			return get_bool(c, qname, v, &q->transpositions);
		if (is(v, "lenient"))
			return get_bool(c, qname, v, &q->lenient);
		if (is(v, "fuzzy_rewrite") || is(v, "auto_generate_synonyms_phrase_query"))
			return CM_OK; /* no synonyms; rewrite does not change results */
		if (is(v, "cutoff_frequency"))
			return cm_error_set(c->err, CM_EPARSE,
			                    "[%s] query does not support [cutoff_frequency]",
			                    qname);
	}
	*handled = false;
	return CM_OK;
}

static cm_err
parse_range(pctx *c, const cJSON *body, sr_query *q)
{
	const char *qn = "range";
	const cJSON *f = NULL;
	cm_err rc = single_field(c, qn, body, true, q, &f);
	if (rc)
		return rc;
	if (!cJSON_IsObject(f))
		return cm_error_set(c->err, CM_EPARSE, "[range] query does not support [%s]",
		                    f->string);
	/* from/to with include_lower/include_upper are the old spelling of
	 * gte/lte; resolve them after all keys are read, as ES does. */
	char *from = NULL, *to = NULL;
	bool has_from = false, has_to = false, incl_lo = true, incl_hi = true;
	for (const cJSON *v = f->child; v && !rc; v = v->next) {
		if (common_param(c, qn, v, q, &rc))
			continue;
		char **dst = NULL;
		if (is(v, "gt"))
			dst = &q->gt;
		else if (is(v, "gte"))
			dst = &q->gte;
		else if (is(v, "lt"))
			dst = &q->lt;
		else if (is(v, "lte"))
			dst = &q->lte;
		else if (is(v, "from")) {
			dst = &from;
			has_from = true;
		} else if (is(v, "to")) {
			dst = &to;
			has_to = true;
		}
		if (dst) {
			cm_free(T, *dst);
			*dst = NULL;
			if (!cJSON_IsNull(v)) /* null: unbounded */
				rc = set_str(c, qn, v, dst);
			/* gt/gte (lt/lte) are one bound: the later key wins */
			if (dst == &q->gt || dst == &q->gte || dst == &from) {
				if (dst != &q->gt) {
					cm_free(T, q->gt);
					q->gt = NULL;
				}
				if (dst != &q->gte) {
					cm_free(T, q->gte);
					q->gte = NULL;
				}
				if (dst != &from) {
					cm_free(T, from);
					from = NULL;
					has_from = false;
				}
			} else {
				if (dst != &q->lt) {
					cm_free(T, q->lt);
					q->lt = NULL;
				}
				if (dst != &q->lte) {
					cm_free(T, q->lte);
					q->lte = NULL;
				}
				if (dst != &to) {
					cm_free(T, to);
					to = NULL;
					has_to = false;
				}
			}
		} else if (is(v, "include_lower"))
			rc = get_bool(c, qn, v, &incl_lo);
		else if (is(v, "include_upper"))
			rc = get_bool(c, qn, v, &incl_hi);
		else if (is(v, "format"))
			rc = set_str(c, qn, v, &q->format);
		else if (is(v, "time_zone"))
			rc = set_str(c, qn, v, &q->time_zone);
		else if (is(v, "relation")) {
			if (!cJSON_IsString(v) || (strcasecmp(v->valuestring, "intersects") &&
			                           strcasecmp(v->valuestring, "within") &&
			                           strcasecmp(v->valuestring, "contains")))
				rc = cm_error_set(c->err, CM_EPARSE,
				                  "[range] query does not support relation [%s]",
				                  cJSON_IsString(v) ? v->valuestring
				                                    : token_name(v));
			else if (!strcasecmp(v->valuestring, "within"))
				q->relation = ST_REL_WITHIN;
			else if (!strcasecmp(v->valuestring, "contains"))
				q->relation = ST_REL_CONTAINS;
			else
				q->relation = ST_REL_INTERSECTS;
			/* for single-valued points every relation selects the same docs */
		} else
			rc = unsupported(c, qn, v);
	}
	if (!rc && has_from) {
		if (incl_lo)
			q->gte = from;
		else
			q->gt = from;
		from = NULL;
	}
	if (!rc && has_to) {
		if (incl_hi)
			q->lte = to;
		else
			q->lt = to;
		to = NULL;
	}
	cm_free(T, from);
	cm_free(T, to);
	return rc;
}

static cm_err
push_clause(pctx *c, sr_query ***list, size_t *n, sr_query *q)
{
	if (++c->clauses > MAX_CLAUSES) {
		sr_query_free(q);
		return cm_error_set_type(c->err, CM_ELIMIT, "too_many_clauses",
		                         "maxClauseCount is set to %d", MAX_CLAUSES);
	}
	*list = cm_realloc(T, *list, (*n + 1) * sizeof(**list));
	(*list)[(*n)++] = q;
	return CM_OK;
}

/* A clause list: one query object or an array of them. */
static cm_err
parse_clauses(pctx *c, const char *qname, const cJSON *v, sr_query ***list, size_t *n)
{
	sr_query *q;
	cm_err rc;
	if (cJSON_IsObject(v)) {
		if ((rc = parse_query(c, v, &q)))
			return rc;
		return push_clause(c, list, n, q);
	}
	if (!cJSON_IsArray(v))
		return cm_error_set(c->err, CM_EPARSE, "[%s] query does not support [%s]", qname,
		                    v->string);
	for (const cJSON *e = v->child; e; e = e->next) {
		if (!cJSON_IsObject(e))
			return cm_error_set(
			    c->err, CM_EPARSE,
			    "[%s] query malformed, expected START_OBJECT in [%s] but found [%s]",
			    qname, v->string, token_name(e));
		if ((rc = parse_query(c, e, &q)))
			return rc;
		if ((rc = push_clause(c, list, n, q)))
			return rc;
	}
	return CM_OK;
}

static cm_err
parse_bool(pctx *c, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	if (!cJSON_IsObject(body))
		return not_object(c, "bool", body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, "bool", v, q, &rc))
			continue;
		if (is(v, "must"))
			rc = parse_clauses(c, "bool", v, &q->must, &q->nmust);
		else if (is(v, "should"))
			rc = parse_clauses(c, "bool", v, &q->should, &q->nshould);
		else if (is(v, "must_not") || is(v, "mustNot"))
			rc = parse_clauses(c, "bool", v, &q->must_not, &q->nmust_not);
		else if (is(v, "filter"))
			rc = parse_clauses(c, "bool", v, &q->filter, &q->nfilter);
		else if (is(v, "minimum_should_match"))
			rc = msm_param(c, "bool", v, q);
		else if (is(v, "adjust_pure_negative")) {
			bool b;
			rc = get_bool(c, "bool", v, &b);
		} else if (cJSON_IsObject(v) || cJSON_IsArray(v))
			rc = cm_error_set(c->err, CM_EPARSE, "[bool] query does not support [%s]",
			                  v->string);
		else
			rc = unsupported(c, "bool", v);
	}
	return rc;
}

static cm_err
parse_inner(pctx *c, const cJSON *v, sr_query **dst)
{
	if (!cJSON_IsObject(v))
		return cm_error_set(c->err, CM_EPARSE,
		                    "[%s] query malformed, expected START_OBJECT", v->string);
	sr_query_free(*dst);
	*dst = NULL;
	return parse_query(c, v, dst);
}

static cm_err
parse_constant_score(pctx *c, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	if (!cJSON_IsObject(body))
		return not_object(c, "constant_score", body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, "constant_score", v, q, &rc))
			continue;
		if (is(v, "filter"))
			rc = parse_inner(c, v, &q->inner);
		else
			rc =
			    cm_error_set(c->err, CM_EPARSE,
			                 "[constant_score] query does not support [%s]", v->string);
	}
	if (!rc && !q->inner)
		rc =
		    cm_error_set(c->err, CM_EPARSE, "[constant_score] requires a 'filter' element");
	return rc;
}

/* inner_hits options built here; the others are refused by name. */
static cm_err
check_inner_hits(pctx *c, const cJSON *ih)
{
	if (!cJSON_IsObject(ih))
		return cm_error_set(c->err, CM_EPARSE, "[inner_hits] must be an object");
	for (const cJSON *v = ih->child; v; v = v->next) {
		if (is(v, "name")) {
			if (!cJSON_IsString(v))
				return cm_error_set(c->err, CM_EPARSE,
				                    "[inner_hits] [name] must be a string");
		} else if (is(v, "size") || is(v, "from")) {
			if (!cJSON_IsNumber(v) || v->valuedouble < 0 ||
			    v->valuedouble != (double)(int)v->valuedouble)
				return cm_error_set(
				    c->err, CM_EPARSE,
				    "[inner_hits] [%s] must be a non-negative integer", v->string);
		} else if (is(v, "_source")) {
			/* true/false, a pattern, a list, or {includes, excludes} */
			bool ok = cJSON_IsBool(v) || cJSON_IsString(v) || cJSON_IsArray(v) ||
			          cJSON_IsObject(v);
			const cJSON *e;
			if (cJSON_IsArray(v))
				cJSON_ArrayForEach(e, v) ok &= cJSON_IsString(e);
			if (cJSON_IsObject(v))
				for (e = v->child; e && ok; e = e->next) {
					ok &= is(e, "includes") || is(e, "excludes");
					ok &= cJSON_IsString(e) || cJSON_IsArray(e);
					const cJSON *s;
					if (cJSON_IsArray(e))
						cJSON_ArrayForEach(s, e) ok &= cJSON_IsString(s);
				}
			if (!ok)
				return cm_error_set(
				    c->err, CM_EPARSE,
				    "[inner_hits] [_source] must be a boolean, a pattern, "
				    "a list of patterns or {includes, excludes}");
		} else {
			return cm_error_set(c->err, CM_EPARSE,
			                    "[inner_hits] option [%s] is not supported", v->string);
		}
	}
	return CM_OK;
}

static cm_err
parse_nested(pctx *c, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	if (!cJSON_IsObject(body))
		return not_object(c, "nested", body);
	bool have_query = false;
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, "nested", v, q, &rc))
			continue;
		if (is(v, "path")) {
			if (!cJSON_IsString(v))
				return cm_error_set(c->err, CM_EPARSE,
				                    "[nested] query does not support [path] as %s",
				                    cJSON_IsObject(v) ? "an object"
				                                      : "a non-string");
			cm_free(T, q->field);
			q->field = cm_strdup(T, v->valuestring);
		} else if (is(v, "query")) {
			rc = parse_inner(c, v, &q->inner);
			have_query = true;
		} else if (is(v, "score_mode")) {
			static const char *modes[] = {"avg", "max", "min", "sum", "none"};
			size_t m = 0;
			while (cJSON_IsString(v) && m < 5 && strcmp(v->valuestring, modes[m]))
				m++;
			if (!cJSON_IsString(v) || m == 5)
				return cm_error_set(c->err, CM_EPARSE, "illegal score_mode [%s]",
				                    cJSON_IsString(v) ? v->valuestring : "?");
			q->score_mode = (sr_nest_mode)m;
		} else if (is(v, "ignore_unmapped")) {
			rc = get_bool(c, "nested", v, &q->ignore_unmapped);
		} else if (is(v, "inner_hits")) {
			rc = check_inner_hits(c, v);
			if (!rc) {
				char *t = cJSON_PrintUnformatted(v);
				cm_free(T, q->inner_hits);
				q->inner_hits = t ? cm_strdup(T, t) : NULL;
				free(t);
			}
		} else {
			rc = cm_error_set(c->err, CM_EPARSE, "[nested] query does not support [%s]",
			                  v->string);
		}
	}
	if (!rc && !q->field)
		rc = cm_error_set(c->err, CM_EPARSE, "[nested] requires 'path' field");
	if (!rc && !have_query)
		rc = cm_error_set(c->err, CM_EPARSE, "[nested] requires 'query' field");
	if (!rc && !q->inner_hits && sr_nested_wants_inner_hits(q->inner))
		rc = cm_error_set(c->err, CM_EPARSE,
		                  "[inner_hits] of a nested query inside a nested query that has "
		                  "no inner_hits is not supported");
	return rc;
}

static cm_err
parse_dis_max(pctx *c, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	if (!cJSON_IsObject(body))
		return not_object(c, "dis_max", body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, "dis_max", v, q, &rc))
			continue;
		if (is(v, "queries"))
			rc = parse_clauses(c, "dis_max", v, &q->queries, &q->nqueries);
		else if (is(v, "tie_breaker"))
			rc = get_float(c, "dis_max", v, &q->tie_breaker);
		else
			rc = cm_error_set(c->err, CM_EPARSE,
			                  "[dis_max] query does not support [%s]", v->string);
	}
	if (!rc && q->nqueries == 0)
		rc = cm_error_set(c->err, CM_EPARSE,
		                  "[dis_max] requires 'queries' field with at least one clause");
	return rc;
}

static cm_err
parse_boosting(pctx *c, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	bool has_nb = false;
	if (!cJSON_IsObject(body))
		return not_object(c, "boosting", body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, "boosting", v, q, &rc))
			continue;
		if (is(v, "positive"))
			rc = parse_inner(c, v, &q->inner);
		else if (is(v, "negative"))
			rc = parse_inner(c, v, &q->negative);
		else if (is(v, "negative_boost")) {
			rc = get_float(c, "boosting", v, &q->negative_boost);
			has_nb = true;
		} else
			rc = cm_error_set(c->err, CM_EPARSE,
			                  "[boosting] query does not support [%s]", v->string);
	}
	if (rc)
		return rc;
	if (!q->inner)
		return cm_error_set(c->err, CM_EPARSE,
		                    "[boosting] query requires 'positive' query");
	if (!q->negative)
		return cm_error_set(c->err, CM_EPARSE,
		                    "[boosting] query requires 'negative' query");
	if (!has_nb || q->negative_boost < 0)
		return cm_error_set(c->err, CM_EPARSE,
		                    "[boosting] query requires 'negative_boost' to be set to be a "
		                    "positive value'");
	return CM_OK;
}

static void
push_value(sr_query *q, char *s)
{
	q->values = cm_realloc(T, q->values, (q->nvalues + 1) * sizeof(char *));
	q->values[q->nvalues++] = s;
}

static cm_err
value_array(pctx *c, const char *qname, const cJSON *arr, sr_query *q)
{
	int n = cJSON_GetArraySize(arr);
	if (n > MAX_TERMS)
		return cm_error_set(
		    c->err, CM_EINVAL,
		    "The number of terms [%d] used in the Terms Query request has exceeded "
		    "the allowed maximum of [%d]. This maximum can be set by changing the "
		    "[index.max_terms_count] index level setting.",
		    n, MAX_TERMS);
	for (const cJSON *e = arr->child; e; e = e->next) {
		char *s;
		if (cJSON_IsNull(e) || cJSON_IsObject(e) || cJSON_IsArray(e))
			return cm_error_set(c->err, CM_EPARSE, "[%s] %s values are not supported",
			                    qname, cJSON_IsNull(e) ? "null" : "object or array");
		cm_err rc = scalar_text(c, qname, arr->string, e, &s);
		if (rc)
			return rc;
		push_value(q, s);
	}
	return CM_OK;
}

static cm_err
parse_terms(pctx *c, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	const cJSON *f = NULL;
	if (!cJSON_IsObject(body))
		return not_object(c, "terms", body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, "terms", v, q, &rc))
			continue;
		if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
			if (f)
				return cm_error_set(
				    c->err, CM_EPARSE,
				    "[terms] query does not support multiple fields, found [%s] "
				    "and [%s]",
				    f->string, v->string);
			f = v;
		} else
			rc = cm_error_set(c->err, CM_EPARSE, "[terms] query does not support [%s]",
			                  v->string);
	}
	if (rc)
		return rc;
	if (!f)
		return cm_error_set(c->err, CM_EINVAL, "No value specified for terms query");
	if (cJSON_IsObject(f))
		return cm_error_set(
		    c->err, CM_EINVAL,
		    "[terms] query lookup (terms from another document) is not supported");
	q->field = cm_strdup(T, f->string);
	return value_array(c, "terms", f, q);
}

static cm_err
parse_ids(pctx *c, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	if (!cJSON_IsObject(body))
		return not_object(c, "ids", body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, "ids", v, q, &rc))
			continue;
		if (is(v, "values")) {
			if (!cJSON_IsArray(v))
				return cm_error_set(
				    c->err, CM_EPARSE,
				    "[ids] query does not support [values] of type %s",
				    token_name(v));
			rc = value_array(c, "ids", v, q);
		} else if (is(v, "type") || is(v, "types"))
			continue; /* mapping types are gone; ES 7 only warns */
		else
			rc = cm_error_set(c->err, CM_EPARSE, "[ids] query does not support [%s]",
			                  v->string);
	}
	return rc;
}

static cm_err
parse_exists(pctx *c, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	if (!cJSON_IsObject(body))
		return not_object(c, "exists", body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, "exists", v, q, &rc))
			continue;
		if (is(v, "field"))
			rc = set_str(c, "exists", v, &q->field);
		else
			rc = cm_error_set(c->err, CM_EPARSE, "[exists] query does not support [%s]",
			                  v->string);
	}
	if (!rc && !q->field)
		rc = cm_error_set(c->err, CM_EPARSE, "[exists] must be provided with a [field]");
	return rc;
}

static cm_err
parse_match_all(pctx *c, const char *qname, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	if (!cJSON_IsObject(body))
		return not_object(c, qname, body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, qname, v, q, &rc))
			continue;
		rc = cm_error_set(c->err, CM_EPARSE, "[%s] query does not support [%s]", qname,
		                  v->string);
	}
	return rc;
}

/* "title^3" → name "title", boost 3. */
static cm_err
push_field(pctx *c, const char *qname, const char *spec, sr_query *q)
{
	const char *caret = strrchr(spec, '^');
	float boost = 1.0f;
	size_t n = strlen(spec);
	if (caret) {
		char *end;
		boost = strtof(caret + 1, &end);
		if (end == caret + 1 || *end != '\0')
			return cm_error_set(c->err, CM_EPARSE,
			                    "[%s] failed to parse field boost in [%s]", qname,
			                    spec);
		n = (size_t)(caret - spec);
	}
	if (q->nvalues >= 1024)
		return cm_error_set(c->err, CM_EINVAL, "[%s] too many fields", qname);
	push_value(q, cm_strndup(T, spec, n));
	q->field_boosts = cm_realloc(T, q->field_boosts, q->nvalues * sizeof(float));
	q->field_boosts[q->nvalues - 1] = boost;
	return CM_OK;
}

static cm_err
fields_param(pctx *c, const char *qname, const cJSON *v, sr_query *q)
{
	if (cJSON_IsString(v))
		return push_field(c, qname, v->valuestring, q);
	if (!cJSON_IsArray(v))
		return cm_error_set(c->err, CM_EPARSE,
		                    "[%s] query does not support [fields] of type %s", qname,
		                    token_name(v));
	for (const cJSON *e = v->child; e; e = e->next) {
		if (!cJSON_IsString(e))
			return cm_error_set(c->err, CM_EPARSE,
			                    "[%s] query does not support [fields] of type %s",
			                    qname, token_name(e));
		cm_err rc = push_field(c, qname, e->valuestring, q);
		if (rc)
			return rc;
	}
	return CM_OK;
}

static void
default_all_fields(sr_query *q)
{
	if (q->nvalues == 0) {
		push_value(q, cm_strdup(T, "*"));
		q->field_boosts = cm_realloc(T, q->field_boosts, sizeof(float));
		q->field_boosts[0] = 1.0f;
	}
}

static cm_err
parse_multi_match(pctx *c, const cJSON *body, sr_query *q)
{
	const char *qn = "multi_match";
	cm_err rc = CM_OK;
	bool has_slop = false, has_cutoff = false;
	if (!cJSON_IsObject(body))
		return not_object(c, qn, body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		bool handled;
		if (common_param(c, qn, v, q, &rc))
			continue;
		if (is(v, "query"))
			rc = set_str(c, qn, v, &q->value);
		else if (is(v, "fields"))
			rc = fields_param(c, qn, v, q);
		else if (is(v, "type")) {
			static const char *types[] = {"best_fields",   "most_fields",
			                              "cross_fields",  "phrase",
			                              "phrase_prefix", "bool_prefix"};
			size_t i;
			for (i = 0; i < 6; i++)
				if (cJSON_IsString(v) && !strcasecmp(v->valuestring, types[i]))
					break;
			if (i == 6)
				return cm_error_set(
				    c->err, CM_EPARSE,
				    "failed to parse [multi_match] query type [%s]. unknown type.",
				    cJSON_IsString(v) ? v->valuestring : token_name(v));
			/* cross_fields blends term statistics across fields; the
			 * executor scores it as most_fields (documented difference). */
			cm_free(T, q->multi_type);
			q->multi_type = cm_strdup(T, i == 2 ? "most_fields" : types[i]);
		} else if (is(v, "tie_breaker"))
			rc = get_float(c, qn, v, &q->tie_breaker);
		else if (is(v, "slop")) {
			rc = get_int(c, qn, v, &q->slop);
			has_slop = true;
		} else if (is(v, "cutoff_frequency"))
			has_cutoff = true; /* refused below, naming bool_prefix for it */
		else if (is(v, "max_expansions"))
			rc = get_int(c, qn, v, &q->max_expansions);
		else if ((rc = match_params(c, "match", v, q, &handled)) || handled)
			continue;
		else
			rc = cm_error_set(c->err, CM_EPARSE,
			                  "[multi_match] query does not support [%s]", v->string);
	}
	if (rc)
		return rc;
	if (!q->value)
		return cm_error_set(c->err, CM_EINVAL, "No text specified for multi_match query");
	if (!q->multi_type)
		q->multi_type = cm_strdup(T, "best_fields");
	if (q->fuzziness &&
	    (!strcmp(q->multi_type, "phrase") || !strcmp(q->multi_type, "phrase_prefix")))
		return cm_error_set(c->err, CM_EPARSE, "Fuzziness not allowed for type [%s]",
		                    q->multi_type);
	if (!strcmp(q->multi_type, "bool_prefix") && (has_slop || has_cutoff))
		return cm_error_set(c->err, CM_EPARSE, "[%s] not allowed for type [bool_prefix]",
		                    has_slop ? "slop" : "cutoff_frequency");
	if (has_cutoff)
		return cm_error_set(c->err, CM_EPARSE,
		                    "[match] query does not support [cutoff_frequency]");
	default_all_fields(q);
	return CM_OK;
}

/* Parameters of query_string / simple_query_string that do not change
 * which documents match here (no synonyms, no per-query analyzers for
 * quotes); accepted so ES clients' requests are not refused. */
static bool
ignored_qs_param(const cJSON *v)
{
	static const char *names[] = {"allow_leading_wildcard",
	                              "analyze_wildcard",
	                              "auto_generate_synonyms_phrase_query",
	                              "enable_position_increments",
	                              "escape",
	                              "rewrite",
	                              "fuzzy_rewrite",
	                              "quote_analyzer",
	                              "quote_field_suffix",
	                              "split_on_whitespace",
	                              "auto_generate_phrase_queries",
	                              "all_fields",
	                              "use_dis_max",
	                              "locale",
	                              "lowercase_expanded_terms"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (is(v, names[i]))
			return true;
	return false;
}

static cm_err
parse_query_string(pctx *c, const char *qn, const cJSON *body, sr_query *q)
{
	bool simple = q->kind == SR_Q_SIMPLE_QUERY_STRING;
	cm_err rc = CM_OK;
	if (!cJSON_IsObject(body))
		return not_object(c, qn, body);
	q->tie_breaker = simple ? 1.0f : 0.0f;
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, qn, v, q, &rc))
			continue;
		if (is(v, "query"))
			rc = set_str(c, qn, v, &q->value);
		else if (is(v, "fields"))
			rc = fields_param(c, qn, v, q);
		else if (!simple && is(v, "default_field"))
			rc = set_str(c, qn, v, &q->default_field);
		else if (is(v, "default_operator"))
			rc = operator_param(c, qn, v, &q->default_op_and);
		else if (is(v, "analyzer"))
			rc = set_str(c, qn, v, &q->analyzer);
		else if (is(v, "minimum_should_match"))
			rc = msm_param(c, qn, v, q);
		else if (is(v, "lenient"))
			rc = get_bool(c, qn, v, &q->lenient);
		else if (is(v, "fuzzy_prefix_length"))
			rc = get_int(c, qn, v, &q->prefix_length);
		else if (is(v, "fuzzy_max_expansions"))
			rc = get_int(c, qn, v, &q->max_expansions);
		else if (is(v, "fuzzy_transpositions"))
			rc = get_bool(c, qn, v, &q->transpositions);
		else if (simple && is(v, "flags")) {
			if (cJSON_IsNumber(v)) {
				char b[16];
				snprintf(b, sizeof(b), "%d", (int)v->valuedouble);
				cm_free(T, q->flags);
				q->flags = cm_strdup(T, b);
			} else
				rc = set_str(c, qn, v, &q->flags);
		} else if (!simple && is(v, "fuzziness"))
			rc = fuzziness_param(c, qn, v, q);
		else if (!simple && is(v, "phrase_slop"))
			rc = get_int(c, qn, v, &q->slop);
		else if (!simple && is(v, "tie_breaker"))
			rc = get_float(c, qn, v, &q->tie_breaker);
		else if (!simple && is(v, "time_zone"))
			rc = set_str(c, qn, v, &q->time_zone);
		else if (!simple && is(v, "max_determinized_states"))
			rc = get_int(c, qn, v, &q->max_determinized_states);
		else if (!simple && is(v, "type")) {
			static const char *types[] = {"best_fields",   "most_fields",
			                              "cross_fields",  "phrase",
			                              "phrase_prefix", "bool_prefix"};
			size_t i;
			for (i = 0; i < 6; i++)
				if (cJSON_IsString(v) && !strcasecmp(v->valuestring, types[i]))
					break;
			if (i == 6)
				return cm_error_set(
				    c->err, CM_EPARSE, "[query_string] unknown type [%s]",
				    cJSON_IsString(v) ? v->valuestring : token_name(v));
			cm_free(T, q->multi_type);
			q->multi_type = cm_strdup(T, types[i]);
			/* most_fields sums field scores: a dis_max with tie 1.0 */
			if (i == 1 || i == 2)
				q->tie_breaker = 1.0f;
		} else if (ignored_qs_param(v))
			continue;
		else
			rc = cm_error_set(c->err, CM_EPARSE, "[%s] query does not support [%s]", qn,
			                  v->string);
	}
	if (rc)
		return rc;
	if (!q->value)
		return cm_error_set(c->err, CM_EPARSE, "[%s] must be provided with a [query]", qn);
	if (q->default_field && q->nvalues)
		return cm_error_set(
		    c->err, CM_EPARSE,
		    "[%s] cannot use [fields] parameter in conjunction with [default_field]", qn);
	/* Syntax errors are the user's to see now, not per shard. */
	sr_query *tree = NULL;
	rc = sr_query_string_expand(q, &tree, c->err);
	sr_query_free(tree);
	return rc;
}

/* ---- geo_bounding_box, geo_distance ---- */

/* "12km", "1.5mi", 300 (meters): meters, or a negative value. */
static double
geo_meters(const cJSON *v)
{
	static const struct {
		const char *unit;
		double m;
	} units[] = {{"mm", 0.001},     {"millimeters", 0.001}, {"cm", 0.01},
	             {"centimeters", 0.01}, {"km", 1000},       {"kilometers", 1000},
	             {"mi", 1609.344},  {"miles", 1609.344},    {"yd", 0.9144},
	             {"yards", 0.9144}, {"ft", 0.3048},         {"feet", 0.3048},
	             {"in", 0.0254},    {"inch", 0.0254},       {"NM", 1852},
	             {"nmi", 1852},     {"nauticalmiles", 1852}, {"m", 1},
	             {"meters", 1}};
	if (cJSON_IsNumber(v))
		return v->valuedouble >= 0 ? v->valuedouble : -1;
	if (!cJSON_IsString(v))
		return -1;
	char *end;
	double d = strtod(v->valuestring, &end);
	if (end == v->valuestring || !isfinite(d) || d < 0)
		return -1;
	while (*end == ' ')
		end++;
	if (!*end)
		return d;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(end, units[i].unit))
			return d * units[i].m;
	return -1;
}

static cm_err
geo_point_arg(pctx *c, const char *qname, const cJSON *v, double *lat, double *lon)
{
	if (!st_geo_point(v, lat, lon))
		return cm_error_set(c->err, CM_EPARSE,
		                    "[%s] failed to parse point [%.100s]: expected {\"lat\",\"lon\"}, "
		                    "\"lat,lon\", a geohash, WKT POINT or [lon, lat], with a latitude "
		                    "in [-90, 90] and a longitude in [-180, 180]",
		                    qname, v->string ? v->string : "");
	return CM_OK;
}

/* The box of a geo_bounding_box field: top_left/bottom_right,
 * top_right/bottom_left, top/left/bottom/right or wkt "BBOX (minLon,
 * maxLon, maxLat, minLat)"; q->geo = top, left, bottom, right. */
static cm_err
parse_geo_box(pctx *c, const cJSON *box, sr_query *q)
{
	double t = NAN, l = NAN, b = NAN, r = NAN, lat, lon;
	cm_err rc = CM_OK;
	const char *qn = "geo_bounding_box";
	if (!cJSON_IsObject(box))
		return not_object(c, qn, box);
	for (const cJSON *v = box->child; v && !rc; v = v->next) {
		if (is(v, "top_left") || is(v, "topLeft")) {
			if (!(rc = geo_point_arg(c, qn, v, &lat, &lon)))
				t = lat, l = lon;
		} else if (is(v, "bottom_right") || is(v, "bottomRight")) {
			if (!(rc = geo_point_arg(c, qn, v, &lat, &lon)))
				b = lat, r = lon;
		} else if (is(v, "top_right") || is(v, "topRight")) {
			if (!(rc = geo_point_arg(c, qn, v, &lat, &lon)))
				t = lat, r = lon;
		} else if (is(v, "bottom_left") || is(v, "bottomLeft")) {
			if (!(rc = geo_point_arg(c, qn, v, &lat, &lon)))
				b = lat, l = lon;
		} else if (is(v, "top") || is(v, "left") || is(v, "bottom") || is(v, "right")) {
			if (!cJSON_IsNumber(v))
				return cm_error_set(c->err, CM_EPARSE, "[%s] [%s] must be a number", qn,
				                    v->string);
			*(is(v, "top") ? &t : is(v, "left") ? &l : is(v, "bottom") ? &b : &r) =
			    v->valuedouble;
		} else if (is(v, "wkt")) {
			double minlon, maxlon, maxlat, minlat;
			char close = 0;
			if (!cJSON_IsString(v) ||
			    sscanf(v->valuestring, " BBOX ( %lf , %lf , %lf , %lf %c", &minlon, &maxlon,
			           &maxlat, &minlat, &close) != 5 ||
			    close != ')')
				return cm_error_set(c->err, CM_EPARSE,
				                    "[%s] failed to parse WKT bounding box [%.100s]", qn,
				                    cJSON_IsString(v) ? v->valuestring : "");
			t = maxlat, l = minlon, b = minlat, r = maxlon;
		} else {
			return cm_error_set(c->err, CM_EPARSE,
			                    "failed to parse [%s] query. unexpected field [%s]", qn,
			                    v->string);
		}
	}
	if (rc)
		return rc;
	if (isnan(t) || isnan(l) || isnan(b) || isnan(r))
		return cm_error_set(c->err, CM_EPARSE,
		                    "failed to parse [%s] query. the bounding box needs its top, left, "
		                    "bottom and right",
		                    qn);
	if (t < b)
		return cm_error_set(c->err, CM_EINVAL,
		                    "top is below bottom corner: %.17g vs. %.17g", t, b);
	q->geo[0] = t, q->geo[1] = l, q->geo[2] = b, q->geo[3] = r;
	return CM_OK;
}

static cm_err
parse_geo(pctx *c, const char *qname, const cJSON *body, sr_query *q)
{
	cm_err rc = CM_OK;
	bool dist = q->kind == SR_Q_GEO_DISTANCE, have_dist = false;
	if (!cJSON_IsObject(body))
		return not_object(c, qname, body);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		if (common_param(c, qname, v, q, &rc))
			continue;
		if (is(v, "ignore_unmapped")) {
			if (!cJSON_IsBool(v))
				return cm_error_set(c->err, CM_EPARSE, "[%s] [ignore_unmapped] must be a "
				                                       "boolean",
				                    qname);
			q->ignore_unmapped = cJSON_IsTrue(v);
		} else if (is(v, "validation_method")) {
			if (!cJSON_IsString(v) || (strcasecmp(v->valuestring, "strict") &&
			                           strcasecmp(v->valuestring, "ignore_malformed") &&
			                           strcasecmp(v->valuestring, "coerce")))
				return cm_error_set(c->err, CM_EPARSE,
				                    "[%s] [validation_method] must be STRICT, "
				                    "IGNORE_MALFORMED or COERCE",
				                    qname);
		} else if (!dist && is(v, "type")) {
			if (!cJSON_IsString(v) || (strcmp(v->valuestring, "indexed") &&
			                           strcmp(v->valuestring, "memory")))
				return cm_error_set(c->err, CM_EPARSE,
				                    "[%s] [type] must be indexed or memory", qname);
		} else if (dist && is(v, "distance")) {
			if ((q->geo[2] = geo_meters(v)) < 0)
				return cm_error_set(c->err, CM_EPARSE,
				                    "[geo_distance] failed to parse [distance]: a distance "
				                    "such as \"12km\" or a number of meters is expected");
			have_dist = true;
		} else if (dist && is(v, "distance_type")) {
			if (!cJSON_IsString(v) ||
			    (strcmp(v->valuestring, "arc") && strcmp(v->valuestring, "plane")))
				return cm_error_set(c->err, CM_EPARSE,
				                    "[geo_distance] [distance_type] must be arc or plane");
		} else if (!dist && (is(v, "coerce") || is(v, "ignore_malformed"))) {
			continue; /* the pre-7 spellings of validation_method */
		} else if (q->field) {
			return cm_error_set(c->err, CM_EPARSE,
			                    "[%s] query doesn't support multiple fields, found [%s] and "
			                    "[%s]",
			                    qname, q->field, v->string);
		} else {
			q->field = cm_strdup(T, v->string);
			if (dist) {
				double lat, lon;
				rc = geo_point_arg(c, qname, v, &lat, &lon);
				q->geo[0] = lat, q->geo[1] = lon;
			} else {
				rc = parse_geo_box(c, v, q);
			}
		}
	}
	if (!rc && !q->field)
		rc = cm_error_set(c->err, CM_EPARSE, "[%s] query requires a field", qname);
	if (!rc && dist && !have_dist)
		rc = cm_error_set(c->err, CM_EPARSE, "geo_distance requires 'distance' to be specified");
	return rc;
}

/* ---- intervals ---- */

static cm_err parse_interval(pctx *c, const cJSON *j, sr_interval **out);

static const char *iv_filter_names[] = {
    "",
    "after",
    "before",
    "contained_by",
    "containing",
    "not_contained_by",
    "not_containing",
    "not_overlapping",
    "overlapping",
};

const char *
sr_iv_filter_name(sr_iv_filter f)
{
	return (size_t)f < sizeof(iv_filter_names) / sizeof(iv_filter_names[0]) ? iv_filter_names[f]
	                                                                        : "";
}

static cm_err
parse_interval_filter(pctx *c, const cJSON *j, sr_interval *r)
{
	if (!cJSON_IsObject(j))
		return perr(c, "[%s] query malformed, expected START_OBJECT but found [%s]",
		            "filter", token_name(j));
	for (const cJSON *v = j->child; v; v = v->next) {
		size_t k;
		for (k = 1; k < sizeof(iv_filter_names) / sizeof(iv_filter_names[0]); k++)
			if (is(v, iv_filter_names[k]))
				break;
		if (k == sizeof(iv_filter_names) / sizeof(iv_filter_names[0])) {
			if (is(v, "script"))
				return cm_error_set(c->err, CM_EPARSE,
				                    "[intervals] filter [script] is not supported");
			return cm_error_set(c->err, CM_EPARSE,
			                    "Unknown key for a START_OBJECT in [%s]",
			                    v->string ? v->string : "");
		}
		if (r->filter_rule)
			return cm_error_set(c->err, CM_EPARSE,
			                    "Only one filter rule may be specified in [filter]");
		r->filter = (sr_iv_filter)k;
		cm_err rc = parse_interval(c, v, &r->filter_rule);
		if (rc)
			return rc;
	}
	if (!r->filter_rule)
		return cm_error_set(c->err, CM_EPARSE, "Missing filter definition in [filter]");
	return CM_OK;
}

static cm_err
parse_interval_list(pctx *c, const char *rule, const cJSON *v, sr_interval *r)
{
	if (!cJSON_IsArray(v))
		return cm_error_set(c->err, CM_EPARSE, "[%s] [intervals] must be an array", rule);
	for (const cJSON *e = v->child; e; e = e->next) {
		sr_interval *k = NULL;
		cm_err rc = parse_interval(c, e, &k);
		if (rc)
			return rc;
		r->kids = cm_realloc(T, r->kids, (r->nkids + 1) * sizeof(*r->kids));
		r->kids[r->nkids++] = k;
	}
	if (!r->nkids)
		return cm_error_set(c->err, CM_EINVAL, "[%s] requires at least one interval", rule);
	return CM_OK;
}

/* The keys of one rule's object. */
static cm_err
parse_interval_body(pctx *c, const char *rule, const cJSON *body, sr_interval *r)
{
	bool leaf = r->kind == SR_IV_MATCH || r->kind == SR_IV_PREFIX ||
	            r->kind == SR_IV_WILDCARD || r->kind == SR_IV_FUZZY;
	const char *text_key = r->kind == SR_IV_MATCH      ? "query"
	                       : r->kind == SR_IV_PREFIX   ? "prefix"
	                       : r->kind == SR_IV_WILDCARD ? "pattern"
	                                                   : "term";
	cm_err rc = CM_OK;
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		bool gaps_ordered = r->kind == SR_IV_MATCH || r->kind == SR_IV_ALL_OF;
		if (leaf && is(v, text_key))
			rc = set_str(c, rule, v, &r->text);
		else if (leaf && is(v, "analyzer"))
			rc = set_str(c, rule, v, &r->analyzer);
		else if (leaf && is(v, "use_field"))
			rc = set_str(c, rule, v, &r->use_field);
		else if (gaps_ordered && is(v, "max_gaps"))
			rc = get_int(c, rule, v, &r->max_gaps);
		else if (gaps_ordered && is(v, "ordered"))
			rc = get_bool(c, rule, v, &r->ordered);
		else if ((r->kind == SR_IV_MATCH || !leaf) && is(v, "filter"))
			rc = parse_interval_filter(c, v, r);
		else if (!leaf && is(v, "intervals"))
			rc = parse_interval_list(c, rule, v, r);
		else if (r->kind == SR_IV_FUZZY && is(v, "fuzziness"))
			rc = set_str(c, rule, v, &r->fuzziness);
		else if (r->kind == SR_IV_FUZZY && is(v, "prefix_length"))
			rc = get_int(c, rule, v, &r->prefix_length);
		else if (r->kind == SR_IV_FUZZY && is(v, "transpositions"))
			rc = get_bool(c, rule, v, &r->transpositions);
		else
			rc = cm_error_set(c->err, CM_EPARSE, "[%s] unknown field [%s]", rule,
			                  v->string ? v->string : "");
	}
	if (rc)
		return rc;
	if (leaf && !r->text)
		return cm_error_set(c->err, CM_EPARSE, "[%s] requires [%s]", rule, text_key);
	if (!leaf && !r->nkids)
		return cm_error_set(c->err, CM_EPARSE, "[%s] requires [intervals]", rule);
	return CM_OK;
}

/* {"match": {...}}: one rule */
static cm_err
parse_interval(pctx *c, const cJSON *j, sr_interval **out)
{
	static const struct {
		const char *name;
		sr_iv_kind kind;
	} rules[] = {{"match", SR_IV_MATCH}, {"prefix", SR_IV_PREFIX}, {"wildcard", SR_IV_WILDCARD},
	             {"fuzzy", SR_IV_FUZZY}, {"all_of", SR_IV_ALL_OF}, {"any_of", SR_IV_ANY_OF}};
	*out = NULL;
	if (!cJSON_IsObject(j) || !j->child)
		return cm_error_set(c->err, CM_EPARSE, "Expected [FIELD_NAME] but got [%s]",
		                    cJSON_IsObject(j) ? "END_OBJECT" : token_name(j));
	const cJSON *b = j->child;
	if (b->next)
		return cm_error_set(c->err, CM_EPARSE,
		                    "Expected [END_OBJECT] but got [FIELD_NAME]");
	size_t i;
	for (i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		if (!strcmp(b->string, rules[i].name))
			break;
	if (i == sizeof(rules) / sizeof(rules[0]))
		return cm_error_set(c->err, CM_EPARSE,
		                    "Unknown interval type [%s], expecting one of [match, any_of, "
		                    "all_of, prefix, wildcard, fuzzy]",
		                    b->string);
	if (!cJSON_IsObject(b))
		return not_object(c, b->string, b);
	if (c->depth >= MAX_DEPTH)
		return cm_error_set(c->err, CM_EPARSE, "[intervals] rules are nested too deeply");
	sr_interval *r = cm_calloc(T, 1, sizeof(*r));
	r->kind = rules[i].kind;
	r->max_gaps = -1;
	r->transpositions = true;
	c->depth++;
	cm_err rc = parse_interval_body(c, b->string, b, r);
	c->depth--;
	if (rc) {
		sr_interval_free(r);
		return rc;
	}
	*out = r;
	return CM_OK;
}

/* {"field": {"<rule>": {...}, "boost": 1, "_name": "x"}} */
static cm_err
parse_intervals(pctx *c, const cJSON *body, sr_query *q)
{
	const char *qn = "intervals";
	if (!cJSON_IsObject(body))
		return not_object(c, qn, body);
	const cJSON *f = body->child;
	if (!f)
		return cm_error_set(c->err, CM_EPARSE,
		                    "Expected [FIELD_NAME] but got [END_OBJECT]");
	if (f->next)
		return cm_error_set(c->err, CM_EPARSE,
		                    "Expected [END_OBJECT] but got [FIELD_NAME]");
	if (!cJSON_IsObject(f))
		return cm_error_set(c->err, CM_EPARSE, "Expected [START_OBJECT] but got [%s]",
		                    token_name(f));
	q->field = cm_strdup(T, f->string);
	for (const cJSON *v = f->child; v; v = v->next) {
		cm_err rc;
		if (common_param(c, qn, v, q, &rc)) {
			if (rc)
				return rc;
			continue;
		}
		if (q->intervals)
			return cm_error_set(c->err, CM_EPARSE,
			                    "Only one interval rule can be specified, found [%s]",
			                    v->string);
		cJSON one = *v; /* the rule alone, as parse_interval reads it */
		one.next = one.prev = NULL;
		cJSON wrap = {0};
		wrap.type = cJSON_Object;
		wrap.child = &one;
		if ((rc = parse_interval(c, &wrap, &q->intervals)))
			return rc;
	}
	if (!q->intervals)
		return cm_error_set(c->err, CM_EPARSE,
		                    "Missing intervals from interval query definition");
	return CM_OK;
}

static const struct {
	const char *name;
	sr_query_kind kind;
} query_names[] = {
    {"match_all", SR_Q_MATCH_ALL},
    {"match_none", SR_Q_MATCH_NONE},
    {"term", SR_Q_TERM},
    {"terms", SR_Q_TERMS},
    {"ids", SR_Q_IDS},
    {"exists", SR_Q_EXISTS},
    {"range", SR_Q_RANGE},
    {"prefix", SR_Q_PREFIX},
    {"wildcard", SR_Q_WILDCARD},
    {"regexp", SR_Q_REGEXP},
    {"fuzzy", SR_Q_FUZZY},
    {"match", SR_Q_MATCH},
    {"match_phrase", SR_Q_MATCH_PHRASE},
    {"match_phrase_prefix", SR_Q_MATCH_PHRASE_PREFIX},
    {"multi_match", SR_Q_MULTI_MATCH},
    {"bool", SR_Q_BOOL},
    {"constant_score", SR_Q_CONSTANT_SCORE},
    {"dis_max", SR_Q_DIS_MAX},
    {"boosting", SR_Q_BOOSTING},
    {"query_string", SR_Q_QUERY_STRING},
    {"simple_query_string", SR_Q_SIMPLE_QUERY_STRING},
    {"geo_bounding_box", SR_Q_GEO_BOUNDING_BOX},
    {"geo_distance", SR_Q_GEO_DISTANCE},
    {"nested", SR_Q_NESTED},
    {"match_bool_prefix", SR_Q_MATCH_BOOL_PREFIX},
    {"intervals", SR_Q_INTERVALS},
};

/* Known to Elasticsearch, not implemented here: a clearer answer than
 * "unknown query". */
static const char *es_only_queries[] = {
    "has_child",          "has_parent",       "parent_id",
    "geo_shape",          "geo_polygon",      "shape",
    "more_like_this",     "script",           "script_score",
    "percolate",          "wrapper",          "pinned",
    "function_score",     "distance_feature", "rank_feature",
    "terms_set",          "span_term",        "span_multi",
    "span_first",         "span_near",        "span_or",
    "span_not",           "span_containing",  "span_within",
    "field_masking_span", "combined_fields",  "type",
};

static cm_err
parse_query(pctx *c, const cJSON *j, sr_query **out)
{
	cm_err rc;
	*out = NULL;
	if (!cJSON_IsObject(j))
		return cm_error_set(c->err, CM_EPARSE,
		                    "[_na] query malformed, must start with start_object");
	if (!j->child)
		return cm_error_set(c->err, CM_EPARSE, "query malformed, empty clause found");
	const cJSON *body = j->child;
	const char *name = body->string;
	if (body->next)
		return cm_error_set(
		    c->err, CM_EPARSE,
		    "[%s] malformed query, expected [END_OBJECT] but found [FIELD_NAME]", name);
	size_t i;
	for (i = 0; i < sizeof(query_names) / sizeof(query_names[0]); i++)
		if (!strcmp(query_names[i].name, name))
			break;
	if (i == sizeof(query_names) / sizeof(query_names[0])) {
		for (size_t k = 0; k < sizeof(es_only_queries) / sizeof(es_only_queries[0]); k++)
			if (!strcmp(es_only_queries[k], name))
				return cm_error_set(c->err, CM_EPARSE,
				                    "[%s] query is not supported", name);
		return cm_error_set(c->err, CM_EPARSE, "unknown query [%s]", name);
	}
	if (c->depth >= MAX_DEPTH)
		return cm_error_set(c->err, CM_EPARSE,
		                    "[%s] query is nested too deeply: more than %d levels", name,
		                    MAX_DEPTH);
	c->depth++;
	sr_query *q = sr_query_new(query_names[i].kind);
	switch (q->kind) {
	case SR_Q_MATCH_ALL:
	case SR_Q_MATCH_NONE:
		rc = parse_match_all(c, name, body, q);
		break;
	case SR_Q_TERM:
		rc = parse_leaf(c, name, "value", body, q, term_params);
		break;
	case SR_Q_PREFIX:
	case SR_Q_WILDCARD:
	case SR_Q_REGEXP:
	case SR_Q_FUZZY:
		rc = parse_leaf(c, name, "value", body, q, term_params);
		if (!rc && q->kind == SR_Q_FUZZY && !q->fuzziness)
			q->fuzziness = cm_strdup(T, "AUTO");
		break;
	case SR_Q_MATCH:
	case SR_Q_MATCH_PHRASE:
	case SR_Q_MATCH_PHRASE_PREFIX:
	case SR_Q_MATCH_BOOL_PREFIX:
		rc = parse_leaf(c, name, "query", body, q, match_params);
		break;
	case SR_Q_TERMS:
		rc = parse_terms(c, body, q);
		break;
	case SR_Q_IDS:
		rc = parse_ids(c, body, q);
		break;
	case SR_Q_EXISTS:
		rc = parse_exists(c, body, q);
		break;
	case SR_Q_RANGE:
		rc = parse_range(c, body, q);
		break;
	case SR_Q_MULTI_MATCH:
		rc = parse_multi_match(c, body, q);
		break;
	case SR_Q_BOOL:
		rc = parse_bool(c, body, q);
		break;
	case SR_Q_CONSTANT_SCORE:
		rc = parse_constant_score(c, body, q);
		break;
	case SR_Q_DIS_MAX:
		rc = parse_dis_max(c, body, q);
		break;
	case SR_Q_BOOSTING:
		rc = parse_boosting(c, body, q);
		break;
	case SR_Q_QUERY_STRING:
	case SR_Q_SIMPLE_QUERY_STRING:
		rc = parse_query_string(c, name, body, q);
		break;
	case SR_Q_GEO_BOUNDING_BOX:
	case SR_Q_GEO_DISTANCE:
		rc = parse_geo(c, name, body, q);
		break;
	case SR_Q_NESTED:
		rc = parse_nested(c, body, q);
		break;
	case SR_Q_INTERVALS:
		rc = parse_intervals(c, body, q);
		break;
	default:
		rc = cm_error_set(c->err, CM_EINTERNAL, "query kind not handled");
	}
	c->depth--;
	if (rc) {
		sr_query_free(q);
		return rc;
	}
	*out = q;
	return CM_OK;
}

cm_err
sr_query_from_json(const cJSON *json, sr_query **out, cm_error *err)
{
	pctx c = {.err = err};
	*out = NULL;
	if (!json)
		return cm_error_set(err, CM_EPARSE,
		                    "query malformed, no start_object after query name");
	return parse_query(&c, json, out);
}
