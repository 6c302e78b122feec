/* "fields" and "docvalue_fields" of a hit, computed from the document's
 * _source and the shard's mapping: each leaf of the source is read as its
 * mapped type reads it (a long coerces "5" and 5.5 to 5, a date parses
 * with the field's format and renders with the requested one, a keyword
 * drops values over ignore_above), multi-fields get their parent's
 * values. Doc-value form sorts the values, deduplicates keywords and
 * widens floats to doubles, as Lucene's doc values hold them. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "agg_int.h"
#include "fetch.h"
#include "jsonw.h"

#define T CM_MEM_SEARCH
#define MAX_FETCH_FIELDS 100 /* index.max_docvalue_fields_search */

/* ---- the request ---- */

void
sr_fetch_free(sr_fetch_field *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		cm_free(T, f[i].field);
		cm_free(T, f[i].format);
	}
	cm_free(T, f);
}

static bool
truthy(const cJSON *v, bool *out)
{
	if (cJSON_IsBool(v))
		*out = cJSON_IsTrue(v);
	else if (cJSON_IsString(v) &&
	         (!strcmp(v->valuestring, "true") || !strcmp(v->valuestring, "false")))
		*out = !strcmp(v->valuestring, "true");
	else
		return false;
	return true;
}

cm_err
sr_fetch_parse(const cJSON *v, const char *key, sr_fetch_field **out, size_t *n, cm_error *err)
{
	bool dv = !strcmp(key, "docvalue_fields");
	if (cJSON_IsString(v) && dv) {
		/* one name, as the URL parameter form gives it */
	} else if (!cJSON_IsArray(v))
		return cm_error_set(err, CM_EPARSE,
		                    "[%s] must be an array of field names or objects", key);
	size_t count = cJSON_IsArray(v) ? (size_t)cJSON_GetArraySize(v) : 1;
	if (*n + count > MAX_FETCH_FIELDS)
		return cm_error_set(
		    err, CM_EINVAL,
		    "Trying to retrieve too many %s. Must be less than or equal to: [%d] "
		    "but was [%zu]. This limit can be set by changing the "
		    "[index.max_docvalue_fields_search] index level setting.",
		    key, MAX_FETCH_FIELDS, *n + count);
	*out = cm_realloc(T, *out, (*n + count + 1) * sizeof(sr_fetch_field));
	const cJSON *e = cJSON_IsArray(v) ? v->child : v;
	for (; e; e = cJSON_IsArray(v) ? e->next : NULL) {
		sr_fetch_field f = {0};
		if (cJSON_IsString(e)) {
			f.field = cm_strdup(T, e->valuestring);
		} else if (cJSON_IsObject(e)) {
			for (const cJSON *k = e->child; k; k = k->next) {
				if (!strcmp(k->string, "field") && cJSON_IsString(k)) {
					cm_free(T, f.field);
					f.field = cm_strdup(T, k->valuestring);
				} else if (!strcmp(k->string, "format") && cJSON_IsString(k)) {
					cm_free(T, f.format);
					/* 6.x's "use_field_mapping" is the default */
					f.format = strcmp(k->valuestring, "use_field_mapping")
					               ? cm_strdup(T, k->valuestring)
					               : NULL;
				} else if (!strcmp(k->string, "include_unmapped") && !dv &&
				           truthy(k, &f.include_unmapped)) {
				} else {
					cm_free(T, f.field);
					cm_free(T, f.format);
					return cm_error_set(err, CM_EPARSE,
					                    "[%s] unknown or malformed key [%s]",
					                    key, k->string);
				}
			}
			if (!f.field) {
				cm_free(T, f.format);
				return cm_error_set(err, CM_EPARSE,
				                    "[%s] an entry is missing [field]", key);
			}
		} else {
			return cm_error_set(
			    err, CM_EPARSE,
			    "[%s] entries must be field names or objects with [field]", key);
		}
		if (!f.field[0] || (f.format && !st_date_format_valid(f.format))) {
			cm_err rc = f.field[0] ? cm_error_set(err, CM_EINVAL,
			                                      "Invalid format: [%s] for field [%s]",
			                                      f.format, f.field)
			                       : cm_error_set(err, CM_EINVAL,
			                                      "[%s] field name is empty", key);
			cm_free(T, f.field);
			cm_free(T, f.format);
			return rc;
		}
		(*out)[(*n)++] = f;
	}
	return CM_OK;
}

bool
sr_fetch_wanted(const sr_request *req)
{
	return req->nfields > 0 || req->ndocvalue_fields > 0;
}

/* ---- matching ---- */

/* Elasticsearch's simple wildcard match: '*' matches any run, nothing
 * else is special. */

/* ---- accumulating values ---- */

/* FV_ULONG: i holds the unsigned_long column value; FV_DATE_NS: i is nanoseconds */
typedef enum {
	FV_LONG,
	FV_DOUBLE,
	FV_FLOAT,
	FV_STR,
	FV_BOOL,
	FV_DATE,
	FV_RAW,
	FV_ULONG,
	FV_DATE_NS,
	FV_IP,  /* s holds the printed address; ordered as addresses */
	FV_GEO, /* d: latitude, d2: longitude */
} fv_kind;

typedef struct fval {
	fv_kind kind;
	int64_t i;
	double d, d2;
	char *s;
	size_t n;
	cJSON *raw; /* an unmapped field's value, as in _source */
} fval;

typedef struct facc {
	char *path;
	const sr_fetch_field *spec;
	bool dv;
	fval *v;
	size_t n, cap;
} facc;

typedef struct fctx {
	const st_mapping *m;
	const sr_request *req;
	facc *acc;
	size_t nacc, capacc;
} fctx;

/* The spec that asks for path (fields first, then docvalue_fields), or
 * NULL; *dv tells which list it came from. */
static const sr_fetch_field *
spec_for(const fctx *c, const char *path, const st_field_def *def, bool *dv)
{
	for (size_t i = 0; i < c->req->nfields; i++) {
		const sr_fetch_field *f = &c->req->fields[i];
		if ((def || f->include_unmapped) && cm_glob(f->field, path)) {
			*dv = false;
			return f;
		}
	}
	if (!def || def->type == ST_FT_TEXT || !def->doc_values)
		return NULL; /* (named ones are refused up front) */
	for (size_t i = 0; i < c->req->ndocvalue_fields; i++) {
		const sr_fetch_field *f = &c->req->docvalue_fields[i];
		if (cm_glob(f->field, path)) {
			*dv = true;
			return f;
		}
	}
	return NULL;
}

static facc *
acc_for(fctx *c, const char *path, const sr_fetch_field *spec, bool dv)
{
	for (size_t i = 0; i < c->nacc; i++)
		if (!strcmp(c->acc[i].path, path))
			return &c->acc[i];
	if (c->nacc == c->capacc) {
		c->capacc = c->capacc ? c->capacc * 2 : 8;
		c->acc = cm_realloc(T, c->acc, c->capacc * sizeof(facc));
	}
	facc *a = &c->acc[c->nacc++];
	memset(a, 0, sizeof(*a));
	a->path = cm_strdup(T, path);
	a->spec = spec;
	a->dv = dv;
	return a;
}

static void
acc_push(facc *a, const fval *v)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? a->cap * 2 : 4;
		a->v = cm_realloc(T, a->v, a->cap * sizeof(fval));
	}
	a->v[a->n++] = *v;
}

static size_t
utf8_chars(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

/* A leaf's text: strings as they are, numbers and booleans as written. */
static char *
leaf_text(const cJSON *v, size_t *n)
{
	char buf[40];
	const char *s;
	if (cJSON_IsString(v))
		s = v->valuestring;
	else if (cJSON_IsBool(v))
		s = cJSON_IsTrue(v) ? "true" : "false";
	else if (cJSON_IsNumber(v)) {
		sr_jw_number_text(v->valuedouble, buf, sizeof(buf));
		s = buf;
	} else
		return NULL;
	*n = strlen(s);
	return cm_strndup(T, s, *n);
}

/* Reads one source value as def's type; false when it does not read
 * (the mapping would have refused or ignored it). */
static bool
convert(const st_field_def *def, const cJSON *v, fval *out)
{
	memset(out, 0, sizeof(*out));
	switch (def->type) {
	case ST_FT_TEXT:
	case ST_FT_KEYWORD:
	case ST_FT_BINARY:
		out->kind = FV_STR;
		out->s = leaf_text(v, &out->n);
		if (!out->s)
			return false;
		if (def->type == ST_FT_KEYWORD && def->ignore_above > 0 &&
		    utf8_chars(out->s, out->n) > (size_t)def->ignore_above) {
			cm_free(T, out->s);
			return false;
		}
		return true;
	case ST_FT_LONG:
	case ST_FT_INTEGER:
	case ST_FT_SHORT:
	case ST_FT_BYTE:
	case ST_FT_DOUBLE:
	case ST_FT_FLOAT: {
		double d;
		if (cJSON_IsNumber(v) && v->valuestring && def->type == ST_FT_LONG) {
			/* an integer beyond 2^53, from its text (sr_json_number_texts) */
			char *end;
			errno = 0;
			long long ll = strtoll(v->valuestring, &end, 10);
			if (*end || errno)
				return false;
			out->kind = FV_LONG;
			out->i = ll;
			return true;
		}
		if (cJSON_IsNumber(v))
			d = v->valuedouble;
		else if (cJSON_IsString(v) && !def->no_coerce) {
			char *end;
			d = strtod(v->valuestring, &end);
			if (end == v->valuestring || *end)
				return false;
		} else
			return false;
		if (!isfinite(d))
			return false;
		if (def->type == ST_FT_DOUBLE || def->type == ST_FT_FLOAT) {
			out->kind = def->type == ST_FT_FLOAT ? FV_FLOAT : FV_DOUBLE;
			out->d = d;
		} else {
			if (d >= 9.2e18 || d <= -9.2e18)
				return false;
			out->kind = FV_LONG;
			out->i = (int64_t)d; /* coerced toward zero */
		}
		return true;
	}
	case ST_FT_DATE: {
		size_t n;
		char *s = leaf_text(v, &n);
		bool ok = s && !cJSON_IsBool(v) && st_date_parse(s, n, def->format, &out->i);
		cm_free(T, s);
		out->kind = FV_DATE;
		return ok;
	}
	case ST_FT_GEO_POINT: {
		double lat, lon;
		if (!st_geo_point(v, &lat, &lon))
			return false;
		out->d = lat;
		out->d2 = lon;
		out->kind = FV_GEO;
		return true;
	}
	case ST_FT_IP: {
		uint8_t ip[ST_IP_LEN];
		char txt[ST_IP_STRLEN];
		if (!cJSON_IsString(v) || !st_ip_parse(v->valuestring, strlen(v->valuestring), ip))
			return false;
		st_ip_format(ip, txt, sizeof(txt));
		out->kind = FV_IP;
		out->n = strlen(txt);
		out->s = cm_strndup(T, txt, out->n);
		return true;
	}
	case ST_FT_DATE_NANOS: {
		size_t n;
		char *s = leaf_text(v, &n);
		bool ok = s && !cJSON_IsBool(v) && st_date_parse_ns(s, n, def->format, &out->i);
		cm_free(T, s);
		out->kind = FV_DATE_NS;
		return ok;
	}
	case ST_FT_HALF_FLOAT:
	case ST_FT_SCALED_FLOAT: {
		double d;
		char *end;
		if (cJSON_IsNumber(v))
			d = v->valuedouble;
		else if (cJSON_IsString(v) && !def->no_coerce &&
		         (d = strtod(v->valuestring, &end), end != v->valuestring && !*end))
			;
		else
			return false;
		if (!isfinite(d))
			return false;
		if (def->type == ST_FT_HALF_FLOAT) {
			d = st_half_round((double)(float)d);
			out->kind = FV_FLOAT;
		} else {
			d = floor(d * def->scaling_factor + 0.5) / def->scaling_factor;
			out->kind = FV_DOUBLE;
		}
		out->d = d;
		return isfinite(d);
	}
	case ST_FT_UNSIGNED_LONG: {
		uint64_t u;
		char buf[40];
		const char *t = NULL;
		if (cJSON_IsString(v) && !def->no_coerce)
			t = v->valuestring;
		else if (cJSON_IsNumber(v) && v->valuestring)
			t = v->valuestring; /* its exact text */
		else if (cJSON_IsNumber(v)) {
			snprintf(buf, sizeof(buf), "%.17g", v->valuedouble);
			t = buf;
		}
		if (!t || !st_ulong_parse(t, true, &u))
			return false;
		out->kind = FV_ULONG;
		out->i = st_ulong_to_col(u);
		return true;
	}
	case ST_FT_BOOLEAN:
		out->kind = FV_BOOL;
		if (cJSON_IsBool(v))
			out->i = cJSON_IsTrue(v);
		else if (cJSON_IsString(v) &&
		         (!strcmp(v->valuestring, "true") || !strcmp(v->valuestring, "false")))
			out->i = !strcmp(v->valuestring, "true");
		else
			return false;
		return true;
	default:
		return false;
	}
}

static bool
number_text_ok(const char *s, double *d)
{
	char *end;
	*d = strtod(s, &end);
	return end != s && !*end && isfinite(*d);
}

/* A range field's value as ES 7.10 returns it under "fields": each
 * bound under its key as given, read as the field's type (dates in the
 * field's format); an ip_range CIDR string as sent. NULL when it does not
 * read. */
static cJSON *
range_source_value(const st_field_def *def, const cJSON *v)
{
	if (cJSON_IsString(v)) {
		uint8_t lo[ST_IP_LEN], hi[ST_IP_LEN];
		if (def->type != ST_FT_IP_RANGE ||
		    !st_cidr_parse(v->valuestring, strlen(v->valuestring), lo, hi))
			return NULL;
		return cJSON_CreateString(v->valuestring);
	}
	if (!cJSON_IsObject(v))
		return NULL;
	cJSON *o = cJSON_CreateObject();
	const cJSON *e;
	cJSON_ArrayForEach(e, v)
	{
		if (cJSON_IsNull(e))
			continue;
		char buf[64];
		double d = 0;
		cJSON *x = NULL;
		if (def->type == ST_FT_DATE_RANGE) {
			size_t n;
			char *s = leaf_text(e, &n);
			int64_t ms;
			if (s && !cJSON_IsBool(e) && st_date_parse(s, n, def->format, &ms)) {
				agg_date_format(NULL, def->format, ms, buf, sizeof(buf));
				x = cJSON_CreateString(buf);
			}
			cm_free(T, s);
		} else if (def->type == ST_FT_IP_RANGE) {
			uint8_t ip[ST_IP_LEN];
			if (cJSON_IsString(e) &&
			    st_ip_parse(e->valuestring, strlen(e->valuestring), ip)) {
				st_ip_format(ip, buf, sizeof(buf));
				x = cJSON_CreateString(buf);
			}
		} else if (cJSON_IsNumber(e) ||
		           (cJSON_IsString(e) && number_text_ok(e->valuestring, &d))) {
			if (cJSON_IsNumber(e))
				d = e->valuedouble;
			if (def->type == ST_FT_FLOAT_RANGE)
				d = (double)(float)d;
			else if (def->type != ST_FT_DOUBLE_RANGE)
				d = trunc(d);
			x = cJSON_CreateNumber(d);
		}
		if (x == NULL) {
			cJSON_Delete(o);
			return NULL;
		}
		cJSON_AddItemToObject(o, e->string, x);
	}
	return o;
}

static void
add_value(fctx *c, const char *path, const st_field_def *def, const cJSON *v)
{
	bool dv = false;
	const sr_fetch_field *spec = spec_for(c, path, def, &dv);
	fval fv;
	if (!spec)
		return;
	if (def && st_field_type_is_range(def->type)) {
		memset(&fv, 0, sizeof(fv));
		fv.kind = FV_RAW;
		if (!(fv.raw = range_source_value(def, v)))
			return;
	} else if (!def || def->type == ST_FT_FLATTENED) { /* flattened: the object as sent */
		memset(&fv, 0, sizeof(fv));
		fv.kind = FV_RAW;
		fv.raw = cJSON_Duplicate(v, true);
	} else if (!convert(def, v, &fv))
		return;
	acc_push(acc_for(c, path, spec, dv), &fv);
}

/* A leaf (or a null) at path: its own field and its multi-fields. */
static void
leaf(fctx *c, const char *path, const cJSON *v, bool unmapped)
{
	const st_field_def *def = unmapped ? NULL : st_mapping_find(c->m, path);
	if (cJSON_IsNull(v)) {
		if (!def || !def->null_value)
			return;
		cJSON *nv = cJSON_CreateString(def->null_value);
		leaf(c, path, nv, false);
		cJSON_Delete(nv);
		return;
	}
	if (def && def->type == ST_FT_OBJECT)
		return;
	add_value(c, path, def, v);
	if (!def)
		return;
	size_t pl = strlen(path);
	for (size_t i = 0; i < c->m->nfields; i++) {
		const st_field_def *f = &c->m->fields[i];
		if (f->parent && !strcmp(f->parent, path) && !strncmp(f->path, path, pl))
			add_value(c, f->path, f, v);
	}
}

/* unmapped: below an "enabled": false object, whose contents are kept in
 * _source only (include_unmapped returns them as sent). */
static void
walk(fctx *c, const cJSON *v, char *path, size_t plen, size_t cap, int depth, bool unmapped)
{
	if (depth > 64)
		return;
	if (!unmapped && plen && (cJSON_IsObject(v) || (cJSON_IsArray(v) && cJSON_IsNumber(v->child)))) {
		/* a geo_point's {"lat","lon"} or [lon, lat] is one value */
		const st_field_def *def = st_mapping_find(c->m, path);
		if (def && (def->type == ST_FT_GEO_POINT || def->type == ST_FT_FLATTENED ||
		            st_field_type_is_range(def->type))) {
			leaf(c, path, v, false);
			return;
		}
	}
	if (cJSON_IsArray(v)) {
		for (const cJSON *e = v->child; e; e = e->next)
			walk(c, e, path, plen, cap, depth + 1, unmapped);
		return;
	}
	if (!cJSON_IsObject(v)) {
		leaf(c, path, v, unmapped);
		return;
	}
	if (plen && !unmapped) {
		const st_field_def *def = st_mapping_find(c->m, path);
		unmapped = def && def->type == ST_FT_OBJECT && def->disabled;
	}
	for (const cJSON *e = v->child; e; e = e->next) {
		size_t kl = strlen(e->string);
		if (plen + kl + 2 > cap)
			continue; /* a path longer than any mapping allows */
		size_t n = plen;
		if (plen)
			path[n++] = '.';
		memcpy(path + n, e->string, kl + 1);
		walk(c, e, path, n + kl, cap, depth + 1, unmapped);
		path[plen] = 0;
	}
}

/* ---- rendering ---- */

static void
put_str(cm_buf *b, const char *s)
{
	cm_buf_put(b, s, strlen(s));
}

static int
cmp_fval(const void *a, const void *b)
{
	const fval *x = a, *y = b;
	switch (x->kind) {
	case FV_DOUBLE:
	case FV_FLOAT:
		return (x->d > y->d) - (x->d < y->d);
	case FV_STR: {
		size_t n = x->n < y->n ? x->n : y->n;
		int r = memcmp(x->s, y->s, n);
		return r ? r : (x->n > y->n) - (x->n < y->n);
	}
	case FV_IP: {
		uint8_t a[ST_IP_LEN], c[ST_IP_LEN];
		st_ip_parse(x->s, x->n, a);
		st_ip_parse(y->s, y->n, c);
		return memcmp(a, c, ST_IP_LEN);
	}
	default:
		return (x->i > y->i) - (x->i < y->i);
	}
}

static void
render_value(cm_buf *b, const facc *a, const fval *v, const st_field_def *def)
{
	char buf[128];
	switch (v->kind) {
	case FV_LONG:
		cm_buf_printf(b, "%lld", (long long)v->i);
		break;
	case FV_DOUBLE:
		sr_jw_double(b, v->d);
		break;
	case FV_FLOAT:
		/* doc values hold the float widened to a double */
		if (a->dv)
			sr_jw_double(b, (double)(float)v->d);
		else
			sr_jw_float(b, (float)v->d);
		break;
	case FV_STR:
	case FV_IP:
		sr_jw_str(b, v->s, v->n);
		break;
	case FV_BOOL:
		put_str(b, v->i ? "true" : "false");
		break;
	case FV_DATE:
		agg_date_format(NULL,
		                a->spec->format ? a->spec->format
		                : def           ? def->format
		                                : NULL,
		                v->i, buf, sizeof(buf));
		sr_jw_cstr(b, buf);
		break;
	case FV_ULONG:
		cm_buf_printf(b, "%llu", (unsigned long long)st_col_to_ulong(v->i));
		break;
	case FV_DATE_NS:
		if (a->spec->format || (def && def->format))
			agg_date_format(NULL, a->spec->format ? a->spec->format : def->format,
			                v->i / 1000000, buf, sizeof(buf));
		else
			st_date_format_ns(v->i, buf, sizeof(buf));
		sr_jw_cstr(b, buf);
		break;
	case FV_GEO:
		/* fields: GeoJSON of the source's point, as ES 7.10; docvalue_fields:
		 * lat and lon as the column holds them */
		if (a->dv) {
			double lat, lon;
			st_geo_decode(st_geo_encode(v->d, v->d2), &lat, &lon);
			put_str(b, "{\"lat\":");
			sr_jw_double(b, lat);
			put_str(b, ",\"lon\":");
			sr_jw_double(b, lon);
			put_str(b, "}");
		} else {
			put_str(b, "{\"type\":\"Point\",\"coordinates\":[");
			sr_jw_double(b, v->d2);
			put_str(b, ",");
			sr_jw_double(b, v->d);
			put_str(b, "]}");
		}
		break;
	case FV_RAW: {
		char *s = cJSON_PrintUnformatted(v->raw);
		if (s) {
			put_str(b, s);
			cJSON_free(s);
		} else
			put_str(b, "null");
		break;
	}
	}
}

/* A docvalue_fields entry naming a field exactly must name one with doc
 * values, as Elasticsearch refuses fielddata on text. */
cm_err
sr_fetch_check(const st_mapping *m, const sr_request *req, const char *index, cm_error *err)
{
	if (!m)
		return CM_OK;
	/* "fields" reads _source; a "format" only dates and geo points take */
	if (req->nfields && m->source_disabled)
		return cm_error_set(err, CM_EINVAL,
		                    "Unable to retrieve the requested [fields] since _source is "
		                    "disabled in the mappings for index [%s]",
		                    index ? index : "");
	for (size_t i = 0; i < req->nfields; i++) {
		const sr_fetch_field *f = &req->fields[i];
		const st_field_def *def;
		if (!f->format || strchr(f->field, '*') || !(def = st_mapping_find(m, f->field)))
			continue;
		if (def->type != ST_FT_DATE && def->type != ST_FT_DATE_NANOS &&
		    def->type != ST_FT_GEO_POINT && def->type != ST_FT_OBJECT)
			return cm_error_set(err, CM_EINVAL,
			                    "Field [%s] of type [%s] doesn't support formats.",
			                    f->field, st_field_type_name(def->type));
	}
	for (size_t i = 0; i < req->ndocvalue_fields; i++) {
		const char *name = req->docvalue_fields[i].field;
		const st_field_def *def;
		if (strchr(name, '*') || !(def = st_mapping_find(m, name)))
			continue;
		if (def->type == ST_FT_TEXT)
			return cm_error_set(err, CM_EINVAL,
			                    "Text fields are not optimised for operations that "
			                    "require per-document field "
			                    "data like aggregations and sorting, so these "
			                    "operations are disabled by "
			                    "default. Please use a keyword field instead. "
			                    "Alternatively, set fielddata=true "
			                    "on [%s] in order to load field data by uninverting "
			                    "the inverted index. Note "
			                    "that this can use significant memory.",
			                    name);
		if (def->type != ST_FT_OBJECT && !def->doc_values)
			return cm_error_set(
			    err, CM_EINVAL,
			    "Can't load fielddata on [%s] because fielddata is unsupported on "
			    "fields of type [%s]. Use doc values instead.",
			    name, st_field_type_name(def->type));
	}
	return CM_OK;
}

cm_err
sr_fetch_render(const st_mapping *m, const sr_request *req, const char *src, size_t len, char **out,
                size_t *out_len, cm_error *err)
{
	st_mapping *none = m ? NULL : st_mapping_new();
	fctx c = {.m = m ? m : none, .req = req};
	char path[1024] = "";
	*out = NULL;
	*out_len = 0;
	cJSON *doc = cJSON_ParseWithLength(src, len);
	bool parsed = doc != NULL;
	if (doc) /* long and unsigned_long values beyond 2^53 read exactly */
		sr_json_number_texts(doc, src, len);
	if (doc)
		walk(&c, doc, path, 0, sizeof(path), 0, false);
	cJSON_Delete(doc);
	m = c.m;
	if (c.nacc) {
		cm_buf b;
		cm_buf_init(&b, T);
		cm_buf_put_u8(&b, '{');
		for (size_t i = 0; i < c.nacc; i++) {
			facc *a = &c.acc[i];
			const st_field_def *def = st_mapping_find(m, a->path);
			if (a->dv && a->n > 1) {
				qsort(a->v, a->n, sizeof(fval), cmp_fval);
				if (a->v[0].kind == FV_STR || a->v[0].kind == FV_IP) { /* sorted sets */
					size_t k = 1;
					for (size_t j = 1; j < a->n; j++) {
						if (cmp_fval(&a->v[k - 1], &a->v[j]) == 0)
							cm_free(T, a->v[j].s);
						else
							a->v[k++] = a->v[j];
					}
					a->n = k;
				}
			}
			if (i)
				cm_buf_put_u8(&b, ',');
			sr_jw_cstr(&b, a->path);
			cm_buf_put(&b, ":[", 2);
			for (size_t j = 0; j < a->n; j++) {
				if (j)
					cm_buf_put_u8(&b, ',');
				render_value(&b, a, &a->v[j], def);
			}
			cm_buf_put_u8(&b, ']');
		}
		cm_buf_put_u8(&b, '}');
		*out = cm_strndup(T, (const char *)b.data, b.len);
		*out_len = b.len;
		cm_buf_free(&b);
	}
	for (size_t i = 0; i < c.nacc; i++) {
		for (size_t j = 0; j < c.acc[i].n; j++) {
			cm_free(T, c.acc[i].v[j].s);
			cJSON_Delete(c.acc[i].v[j].raw);
		}
		cm_free(T, c.acc[i].v);
		cm_free(T, c.acc[i].path);
	}
	cm_free(T, c.acc);
	if (none)
		st_mapping_unref(none);
	return parsed ? CM_OK : cm_error_set(err, CM_EINTERNAL, "stored _source does not parse");
}
