/* Document parsing: a JSON _source becomes typed values under a mapping.
 * Objects flatten to dotted paths, arrays are multi-valued, values are
 * coerced like Elasticsearch does it, and fields the mapping does not
 * know are collected as a dynamic mapping addition. */
#include "st_types.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <regex.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "../common/cm_buf.h"

#define MAX_DOC_DEPTH 100
#define MAX_DOC_VALUES (1u << 22) /* values per document */

typedef struct parse_ctx {
	const st_mapping *m;
	st_doc *doc;
	cm_error *err;
	uint32_t *counts; /* per mapping field: values emitted so far */
	cJSON *dyn_props; /* "properties" of the dynamic addition, or NULL */
	cJSON *dyn_root;
	bool want_dynamic; /* caller asked for additions */
	/* number tokens as written in the source, built on first need */
	struct numtok *nums;
	size_t nnums;
	int nums_state; /* 0 not built, 1 built, -1 unavailable */
	/* nested: the root document, whether the current document's values
	 * end up in the root too (include_in_parent/include_in_root), the
	 * array index of the object being walked, hidden documents so far */
	st_doc *root;
	const char *nest_scope; /* the nested path being walked, NULL at the root */
	bool cur_to_root;
	uint32_t nest_ix;
	uint32_t nested_limit; /* index.mapping.nested_objects.limit */
	size_t nested_total;
	char path[1024 + 2];
} parse_ctx;

/* A JSON number node and the bytes it was parsed from. cJSON keeps only
 * a double, which loses longs above 2^53 and the written form ("1.0"). */
typedef struct numtok {
	const cJSON *node;
	uint32_t off, len;
} numtok;

/* n bytes owned by the document (values that are not text of the tree). */
static char *
doc_own(st_doc *d, const void *p, size_t n)
{
	if (d->nowned == d->owned_cap) {
		d->owned_cap = d->owned_cap ? d->owned_cap * 2 : 8;
		d->owned = cm_realloc(CM_MEM_STORAGE, d->owned, d->owned_cap * sizeof(*d->owned));
	}
	char *b = cm_malloc(CM_MEM_STORAGE, n);
	memcpy(b, p, n);
	d->owned[d->nowned++] = b;
	return b;
}

static const char *const metadata_fields[] = {
    "_id",      "_index",       "_source",      "_routing",
    "_type",    "_version",     "_seq_no",      "_primary_term",
    "_ignored", "_field_names", "_nested_path", "_data_stream_timestamp",
    "_tier",    "_doc_count",
};

/* ---- values ---- */

static st_value *
push_value(parse_ctx *c, const st_field_def *f)
{
	st_doc *d = c->doc;
	if (d->nvalues == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 16;
		d->values = cm_realloc(CM_MEM_STORAGE, d->values, d->cap * sizeof(*d->values));
	}
	st_value *v = &d->values[d->nvalues++];
	memset(v, 0, sizeof(*v));
	v->field = f;
	v->ordinal = c->counts[f - c->m->fields]++;
	return v;
}

/* A short, quoted rendering of a value for error messages. */
static void
preview(const cJSON *j, char *buf, size_t cap)
{
	int most = cap > 201 ? 200 : cap ? (int)cap - 1 : 0; /* cut on purpose */
	if (cJSON_IsString(j)) {
		snprintf(buf, cap, "%.*s", most, j->valuestring);
		return;
	}
	char *s = cJSON_PrintUnformatted(j);
	snprintf(buf, cap, "%.*s", most, s ? s : "");
	free(s);
}

/* ES's _ignored: the fields of a document whose malformed values were
 * skipped (ignore_malformed), each once, as keyword terms. */
static const st_field_def ignored_def = {
    .path = (char *)ST_FIELD_IGNORED,
    .type = ST_FT_KEYWORD,
    .analyzer = ST_AN_KEYWORD,
    .search_analyzer = ST_AN_KEYWORD,
    .index = true,
    .doc_values = true,
};

static void
note_ignored(parse_ctx *c, const st_field_def *f)
{
	st_doc *d = c->doc;
	for (size_t i = 0; i < d->nvalues; i++)
		if (d->values[i].field == &ignored_def && !strcmp(d->values[i].s, f->path))
			return;
	if (d->nvalues == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 16;
		d->values = cm_realloc(CM_MEM_STORAGE, d->values, d->cap * sizeof(*d->values));
	}
	st_value *v = &d->values[d->nvalues++];
	memset(v, 0, sizeof(*v));
	v->field = &ignored_def;
	v->s = f->path;
	v->n = strlen(f->path);
}

static cm_err
type_error(parse_ctx *c, const st_field_def *f, const cJSON *j)
{
	if (f->ignore_malformed) {
		note_ignored(c, f); /* skipped; the value stays in _source */
		return CM_OK;
	}
	char pv[256];
	preview(j, pv, sizeof(pv));
	const st_doc *d = c->doc;
	return cm_error_set(c->err, CM_EMAPPING,
	                    "failed to parse field [%s] of type [%s] in document with id '%.*s'. "
	                    "Preview of field's value: '%s'",
	                    f->path, st_field_type_name(f->type), d->id ? (int)d->id_len : 4,
	                    d->id ? d->id : "null", pv);
}

/* Shortest text that reads back as the same double; integers plainly. */
static void
format_number(double v, char *buf, size_t cap)
{
	if (v == trunc(v) && fabs(v) < 1e17) {
		snprintf(buf, cap, "%.0f", v);
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, cap, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

static void
collect_numbers(const cJSON *j, numtok **v, size_t *n, size_t *cap)
{
	for (; j != NULL; j = j->next) {
		if (cJSON_IsNumber(j)) {
			if (*n == *cap) {
				*cap = *cap ? *cap * 2 : 64;
				*v = cm_realloc(CM_MEM_STORAGE, *v, *cap * sizeof(**v));
			}
			(*v)[(*n)++].node = j;
		} else if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
			collect_numbers(j->child, v, n, cap);
		}
	}
}

static int
numtok_cmp(const void *a, const void *b)
{
	const cJSON *x = ((const numtok *)a)->node, *y = ((const numtok *)b)->node;
	return x < y ? -1 : x > y;
}

/* Number tokens appear in the source in the same order as number nodes
 * in a depth-first walk of the tree (cJSON keeps member order), so one
 * scan pairs them up. */
static void
build_numbers(parse_ctx *c)
{
	size_t cap = 0, n = 0;
	numtok *v = NULL;
	collect_numbers(c->root->json, &v, &n, &cap);
	const char *s = c->root->source;
	size_t len = c->root->source_len, k = 0;
	bool ok = true;
	for (size_t i = 0; i < len && ok;) {
		char ch = s[i];
		if (ch == '"') {
			for (i++; i < len && s[i] != '"'; i++)
				if (s[i] == '\\')
					i++;
			i++;
		} else if (ch == '-' || (ch >= '0' && ch <= '9')) {
			size_t st = i;
			while (i < len &&
			       ((s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '+' ||
			        s[i] == '.' || s[i] == 'e' || s[i] == 'E'))
				i++;
			if (k >= n || i - st > 1024) {
				ok = false;
				break;
			}
			v[k].off = (uint32_t)st;
			v[k].len = (uint32_t)(i - st);
			k++;
		} else {
			i++;
		}
	}
	if (!ok || k != n || len > UINT32_MAX) {
		cm_free(CM_MEM_STORAGE, v);
		c->nums_state = -1;
		return;
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), numtok_cmp);
	c->nums = v;
	c->nnums = n;
	c->nums_state = 1;
}

/* The number's source text, or NULL when it cannot be recovered. */
static const char *
number_lexeme(parse_ctx *c, const cJSON *j, size_t *len)
{
	if (c->nums_state == 0)
		build_numbers(c);
	if (c->nums_state < 0)
		return NULL;
	numtok key = {.node = j};
	const numtok *t = bsearch(&key, c->nums, c->nnums, sizeof(key), numtok_cmp);
	if (t == NULL)
		return NULL;
	*len = t->len;
	return c->root->source + t->off;
}

static bool
lexeme_is_integer(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] == '.' || s[i] == 'e' || s[i] == 'E')
			return false;
	return n > 0;
}

/* The node's text as a string kept alive by the parse tree: numbers and
 * booleans get their rendering attached as valuestring, which cJSON frees
 * with the node. */
static const char *
node_text(parse_ctx *c, cJSON *j, size_t *n)
{
	if (cJSON_IsString(j)) {
		*n = strlen(j->valuestring);
		return j->valuestring;
	}
	if (j->valuestring == NULL) {
		char buf[64];
		size_t lexlen = 0;
		const char *lex = cJSON_IsNumber(j) ? number_lexeme(c, j, &lexlen) : NULL;
		if (lex != NULL && lexlen < sizeof(buf)) {
			memcpy(buf, lex, lexlen); /* as written, like ES */
			buf[lexlen] = '\0';
		} else if (cJSON_IsNumber(j)) {
			format_number(j->valuedouble, buf, sizeof(buf));
		} else {
			snprintf(buf, sizeof(buf), "%s", cJSON_IsTrue(j) ? "true" : "false");
		}
		size_t len = strlen(buf);
		j->valuestring = cJSON_malloc(len + 1);
		if (j->valuestring == NULL)
			return NULL;
		memcpy(j->valuestring, buf, len + 1);
	}
	*n = strlen(j->valuestring);
	return j->valuestring;
}

static size_t
utf8_chars(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xC0) != 0x80;
	return k;
}

/* Parses a whole-string number: integers exactly (beyond 2^53), others
 * through strtod. */
static bool
string_number(const char *s, double *d, int64_t *i, bool *is_int)
{
	if (*s == '\0')
		return false;
	char *end;
	errno = 0;
	long long ll = strtoll(s, &end, 10);
	if (*end == '\0' && errno == 0 && end != s) {
		*i = ll;
		*d = (double)ll;
		*is_int = true;
		return true;
	}
	errno = 0;
	double v = strtod(s, &end);
	if (*end != '\0' || end == s || s[0] == ' ' || s[0] == '\t' || s[0] == '\n')
		return false;
	/* strtod takes "nan", "inf" and hex; ES takes only decimal numbers */
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '+' ||
		      *p == 'e' || *p == 'E'))
			return false;
	*d = v;
	*is_int = false;
	return true;
}

/* An integer in [lo, hi] from a number (or, with coerce, a string);
 * fractions truncate unless no_coerce. */
static bool
integer_value(parse_ctx *c, bool no_coerce, int64_t lo, int64_t hi, cJSON *j, int64_t *out)
{
	int64_t v;
	double d;
	bool is_int = false;
	if (cJSON_IsNumber(j)) {
		d = j->valuedouble;
		size_t ln;
		const char *lex;
		if (fabs(d) >= 9007199254740992.0 && (lex = number_lexeme(c, j, &ln)) != NULL &&
		    lexeme_is_integer(lex, ln) && ln < 32) {
			/* beyond 2^53 the double is not the value that was sent */
			char buf[32];
			memcpy(buf, lex, ln);
			buf[ln] = '\0';
			if (!string_number(buf, &d, &v, &is_int))
				return false;
		}
	} else if (cJSON_IsString(j) && !no_coerce) {
		if (!string_number(j->valuestring, &d, &v, &is_int))
			return false;
	} else {
		return false;
	}
	if (!is_int) {
		if (no_coerce && d != trunc(d))
			return false;
		if (!isfinite(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
			return false;
		v = (int64_t)trunc(d);
	}
	if (v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

static cm_err
emit_integer(parse_ctx *c, const st_field_def *f, cJSON *j)
{
	int64_t lo, hi;
	switch (f->type) {
	case ST_FT_BYTE:
		lo = INT8_MIN, hi = INT8_MAX;
		break;
	case ST_FT_SHORT:
		lo = INT16_MIN, hi = INT16_MAX;
		break;
	case ST_FT_INTEGER:
		lo = INT32_MIN, hi = INT32_MAX;
		break;
	default:
		lo = INT64_MIN, hi = INT64_MAX;
		break;
	}
	int64_t v;
	if (!integer_value(c, f->no_coerce, lo, hi, j, &v))
		return type_error(c, f, j);
	push_value(c, f)->i = v;
	return CM_OK;
}

/* Base64 as Java's basic decoder reads it: the alphabet, '=' padding
 * only at the end (optional), no length of 1 mod 4. */
static bool
base64_valid(const char *s)
{
	size_t n = 0, pad = 0;
	for (const char *p = s; *p; p++, n++) {
		char ch = *p;
		if (ch == '=') {
			if (++pad > 2)
				return false;
			continue;
		}
		if (pad || !((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		             (ch >= '0' && ch <= '9') || ch == '+' || ch == '/'))
			return false;
	}
	if (pad && n % 4)
		return false;
	return (n - pad) % 4 != 1;
}

static cm_err
emit_scalar(parse_ctx *c, const st_field_def *f, cJSON *j)
{
	switch (f->type) {
	case ST_FT_TEXT:
	case ST_FT_KEYWORD: {
		if (!cJSON_IsString(j) && !cJSON_IsNumber(j) && !cJSON_IsBool(j))
			return type_error(c, f, j);
		size_t n;
		const char *s = node_text(c, j, &n);
		if (s == NULL)
			return cm_error_set(c->err, CM_ENOMEM, "out of memory");
		if (f->type == ST_FT_KEYWORD && f->ignore_above > 0 &&
		    utf8_chars(s, n) > (size_t)f->ignore_above)
			return CM_OK; /* kept in _source only, like ES */
		st_value *v = push_value(c, f);
		v->s = s;
		v->n = n;
		return CM_OK;
	}
	case ST_FT_LONG:
	case ST_FT_INTEGER:
	case ST_FT_SHORT:
	case ST_FT_BYTE:
		return emit_integer(c, f, j);
	case ST_FT_DOUBLE:
	case ST_FT_FLOAT: {
		double d;
		int64_t i;
		bool is_int;
		if (cJSON_IsNumber(j))
			d = j->valuedouble;
		else if (!cJSON_IsString(j) || f->no_coerce ||
		         !string_number(j->valuestring, &d, &i, &is_int))
			return type_error(c, f, j);
		if (!isfinite(d))
			return type_error(c, f, j);
		if (f->type == ST_FT_FLOAT) {
			/* Java's Float.parseFloat rounds to nearest: a value
			 * below the midpoint between FLT_MAX and 2^128
			 * (3.4028235E38 written out) is FLT_MAX, not an overflow */
			if (fabs(d) >= 0x1.ffffffp+127)
				return type_error(c, f, j);
			d = (double)(float)d; /* what a float field holds */
		}
		push_value(c, f)->d = d;
		return CM_OK;
	}
	case ST_FT_DATE: {
		if (!cJSON_IsString(j) && !cJSON_IsNumber(j))
			return type_error(c, f, j);
		size_t n;
		const char *s = node_text(c, j, &n);
		int64_t ms;
		if (s == NULL || !st_date_parse(s, n, f->format, &ms))
			return type_error(c, f, j);
		push_value(c, f)->i = ms;
		return CM_OK;
	}
	case ST_FT_BOOLEAN: {
		int64_t b;
		if (cJSON_IsBool(j))
			b = cJSON_IsTrue(j);
		else if (cJSON_IsString(j) && strcmp(j->valuestring, "true") == 0)
			b = 1;
		else if (cJSON_IsString(j) && strcmp(j->valuestring, "false") == 0)
			b = 0;
		else if (cJSON_IsString(j) && j->valuestring[0] == '\0')
			return CM_OK; /* ES treats "" as null for booleans */
		else
			return type_error(c, f, j);
		push_value(c, f)->i = b;
		return CM_OK;
	}
	case ST_FT_GEO_POINT: {
		double lat, lon;
		if (!st_geo_point(j, &lat, &lon))
			return type_error(c, f, j);
		push_value(c, f)->i = st_geo_encode(lat, lon);
		return CM_OK;
	}
	case ST_FT_IP: {
		uint8_t ip[ST_IP_LEN];
		if (!cJSON_IsString(j) || !st_ip_parse(j->valuestring, strlen(j->valuestring), ip))
			return type_error(c, f, j);
		st_value *v = push_value(c, f);
		v->s = doc_own(c->doc, ip, ST_IP_LEN);
		v->n = ST_IP_LEN;
		return CM_OK;
	}
	case ST_FT_DATE_NANOS: {
		if (!cJSON_IsString(j) && !cJSON_IsNumber(j))
			return type_error(c, f, j);
		size_t n;
		const char *s = node_text(c, j, &n);
		int64_t ns;
		if (s == NULL || !st_date_parse_ns(s, n, f->format, &ns))
			return type_error(c, f, j);
		push_value(c, f)->i = ns;
		return CM_OK;
	}
	case ST_FT_HALF_FLOAT:
	case ST_FT_SCALED_FLOAT: {
		double d;
		int64_t i;
		bool is_int;
		if (cJSON_IsNumber(j))
			d = j->valuedouble;
		else if (!cJSON_IsString(j) || f->no_coerce ||
		         !string_number(j->valuestring, &d, &i, &is_int))
			return type_error(c, f, j);
		if (!isfinite(d))
			return type_error(c, f, j);
		if (f->type == ST_FT_HALF_FLOAT) {
			d = st_half_round((double)(float)d);
			if (!isfinite(d))
				return type_error(c, f, j);
			push_value(c, f)->d = d;
			return CM_OK;
		}
		/* ES: Math.round(value * scaling_factor), a long */
		double sc = d * f->scaling_factor;
		if (!isfinite(sc) || sc >= 9223372036854775807.0 || sc <= -9223372036854775808.0)
			return type_error(c, f, j);
		push_value(c, f)->i = (int64_t)floor(sc + 0.5);
		return CM_OK;
	}
	case ST_FT_UNSIGNED_LONG: {
		char buf[64];
		const char *txt = NULL;
		if (cJSON_IsString(j) && !f->no_coerce) {
			txt = j->valuestring;
		} else if (cJSON_IsNumber(j)) {
			size_t ln;
			const char *lex = number_lexeme(c, j, &ln);
			if (lex != NULL && ln < sizeof(buf)) {
				memcpy(buf, lex, ln);
				buf[ln] = '\0';
			} else {
				format_number(j->valuedouble, buf, sizeof(buf));
			}
			txt = buf;
		}
		uint64_t u;
		if (txt == NULL || !st_ulong_parse(txt, !f->no_coerce, &u))
			return type_error(c, f, j);
		push_value(c, f)->i = st_ulong_to_col(u);
		return CM_OK;
	}
	case ST_FT_BINARY:
		/* checked as base64, kept in _source only */
		if (!cJSON_IsString(j) || !base64_valid(j->valuestring))
			return type_error(c, f, j);
		return CM_OK;
	default:
		return type_error(c, f, j);
	}
}

static cm_err emit_completion(parse_ctx *c, const st_field_def *f, cJSON *j);

/* Emits j for field f and each of f's multi-fields. */
static cm_err
emit_field(parse_ctx *c, const st_field_def *f, cJSON *j)
{
	if (c->doc->nvalues >= MAX_DOC_VALUES)
		return cm_error_set(c->err, CM_EMAPPING,
		                    "failed to parse: too many values in one document");
	cm_err e = emit_scalar(c, f, j);
	if (e != CM_OK)
		return e;
	/* Paths sharing f's prefix sort right after f, those continuing
	 * with '.' (its multi-fields) before any continuing with a larger
	 * byte; usually the next entry is the first multi-field. */
	const st_mapping *m = c->m;
	size_t pn = strlen(f->path);
	for (size_t i = (size_t)(f - m->fields) + 1; i < m->nfields; i++) {
		const st_field_def *mf = &m->fields[i];
		if (strncmp(mf->path, f->path, pn) != 0 || mf->path[pn] > '.')
			break;
		if (mf->path[pn] == '.' && mf->parent != NULL && strcmp(mf->parent, f->path) == 0) {
			/* a completion multi-field takes its parent's value as its input */
			e = mf->type == ST_FT_COMPLETION ? emit_completion(c, mf, j)
			                                 : emit_scalar(c, mf, j);
			if (e != CM_OK)
				return e;
		}
	}
	return CM_OK;
}

/* ---- dynamic mapping ---- */

#define SLASH_DATES "yyyy/MM/dd HH:mm:ss||yyyy/MM/dd||epoch_millis"

/* ES's date_detection on strings, limited to full dates (yyyy-MM-dd...):
 * a bare "2015" stays text. */
static bool
looks_like_date(const char *s)
{
	size_t n = strlen(s);
	int64_t ms;
	return n >= 10 && s[4] == '-' && s[7] == '-' &&
	       st_date_parse(s, n, "strict_date_optional_time", &ms);
}

/* The mapping ES would create for value j, or NULL when j adds nothing
 * (null, empty array). */
/* Dynamic templates: "simple" patterns are globs with '*', "regex"
 * ones POSIX extended expressions matched against the whole name. */

static bool
dt_match_one(const char *pat, const char *s, bool regex)
{
	if (!regex)
		return cm_glob(pat, s);
	char whole[600];
	snprintf(whole, sizeof(whole), "^(%s)$", pat);
	regex_t re;
	if (regcomp(&re, whole, REG_EXTENDED | REG_NOSUB))
		return false;
	bool ok = regexec(&re, s, 0, NULL, 0) == 0;
	regfree(&re);
	return ok;
}

/* A template's pattern (a string or, as ES 8 takes it, a list). */
static bool
dt_match(const cJSON *pat, const char *s, bool regex)
{
	if (cJSON_IsString(pat))
		return dt_match_one(pat->valuestring, s, regex);
	const cJSON *e;
	cJSON_ArrayForEach(e, pat) if (cJSON_IsString(e) && dt_match_one(e->valuestring, s, regex))
		return true;
	return false;
}

/* The first of m's dynamic templates for the field at path (of JSON kind
 * `kind`: string, long, double, boolean, date, object), as the field's
 * mapping, or NULL. */
static cJSON *
dynamic_template_spec(const st_mapping *m, const char *path, const char *kind)
{
	if (!m->dynamic_templates)
		return NULL;
	cJSON *all = cJSON_Parse(m->dynamic_templates), *e, *out = NULL;
	const char *dot = strrchr(path, '.');
	const char *name = dot ? dot + 1 : path;
	static const struct {
		const char *kind, *type;
	} dflt[] = {{"string", "text"},   {"long", "long"},     {"double", "float"},
	            {"boolean", "boolean"}, {"date", "date"},   {"object", "object"}};
	const char *dyn_type = kind;
	for (size_t i = 0; i < sizeof(dflt) / sizeof(dflt[0]); i++)
		if (!strcmp(dflt[i].kind, kind))
			dyn_type = dflt[i].type;
	cJSON_ArrayForEach(e, all)
	{
		const cJSON *t = e->child;
		const cJSON *mp = cJSON_GetObjectItemCaseSensitive(t, "match_pattern");
		bool regex = cJSON_IsString(mp) && !strcmp(mp->valuestring, "regex");
		const cJSON *mt = cJSON_GetObjectItemCaseSensitive(t, "match_mapping_type");
		const cJSON *v;
		if (cJSON_IsString(mt) && strcmp(mt->valuestring, "*") && strcmp(mt->valuestring, kind))
			continue;
		if ((v = cJSON_GetObjectItemCaseSensitive(t, "match")) && !dt_match(v, name, regex))
			continue;
		if ((v = cJSON_GetObjectItemCaseSensitive(t, "unmatch")) && dt_match(v, name, regex))
			continue;
		if ((v = cJSON_GetObjectItemCaseSensitive(t, "path_match")) && !dt_match(v, path, false))
			continue;
		if ((v = cJSON_GetObjectItemCaseSensitive(t, "path_unmatch")) && dt_match(v, path, false))
			continue;
		out = st_dynamic_template_mapping(cJSON_GetObjectItemCaseSensitive(t, "mapping"), name,
		                                  dyn_type);
		if (!cJSON_GetObjectItemCaseSensitive(out, "type"))
			cJSON_AddStringToObject(out, "type", dyn_type);
		break;
	}
	cJSON_Delete(all);
	return out;
}

static cJSON *
dynamic_spec(parse_ctx *c, const cJSON *j)
{
	while (cJSON_IsArray(j)) {
		const cJSON *first = NULL, *it;
		cJSON_ArrayForEach(it, j)
		{
			if (!cJSON_IsNull(it)) {
				first = it;
				break;
			}
		}
		if (first == NULL)
			return NULL;
		j = first;
	}
	cJSON *spec = cJSON_CreateObject();
	if (cJSON_IsString(j)) {
		int64_t ms;
		size_t sn = strlen(j->valuestring);
		double nd;
		int64_t ni;
		bool nint;
		if (c->m->numeric_detection > 0 && string_number(j->valuestring, &nd, &ni, &nint)) {
			cJSON_AddStringToObject(spec, "type", nint ? "long" : "float");
		} else if (c->m->date_detection >= 0 && looks_like_date(j->valuestring)) {
			cJSON_AddStringToObject(spec, "type", "date");
		} else if (c->m->date_detection >= 0 && sn >= 10 &&
		           st_date_parse(j->valuestring, sn, "yyyy/MM/dd HH:mm:ss||yyyy/MM/dd",
		                         &ms)) {
			/* ES's second dynamic date format, kept as the field's format */
			cJSON_AddStringToObject(spec, "type", "date");
			cJSON_AddStringToObject(spec, "format", SLASH_DATES);
		} else {
			cJSON_AddStringToObject(spec, "type", "text");
			cJSON *kw = cJSON_AddObjectToObject(cJSON_AddObjectToObject(spec, "fields"),
			                                    "keyword");
			cJSON_AddStringToObject(kw, "type", "keyword");
			cJSON_AddNumberToObject(kw, "ignore_above", 256);
		}
	} else if (cJSON_IsNumber(j)) {
		/* ES maps by the token: 5 is a long, 5.0 and 5e0 are floats */
		double d = j->valuedouble;
		size_t ln;
		const char *lex = number_lexeme(c, j, &ln);
		bool whole = lex ? lexeme_is_integer(lex, ln) && fabs(d) < 9.3e18
		                 : d == trunc(d) && fabs(d) < 9.2e18;
		cJSON_AddStringToObject(spec, "type", whole ? "long" : "float");
	} else if (cJSON_IsBool(j)) {
		cJSON_AddStringToObject(spec, "type", "boolean");
	} else if (cJSON_IsObject(j)) {
		cJSON_AddStringToObject(spec, "type", "object");
	} else {
		cJSON_Delete(spec);
		return NULL;
	}
	if (c->m->dynamic_templates) {
		/* the kind a template's match_mapping_type names */
		const char *t = cJSON_GetObjectItemCaseSensitive(spec, "type")->valuestring;
		const char *kind = !strcmp(t, "text") ? "string" : !strcmp(t, "float") ? "double" : t;
		cJSON *tpl = dynamic_template_spec(c->m, c->path, kind);
		if (tpl) {
			cJSON_Delete(spec);
			spec = tpl;
		}
	}
	return spec;
}

/* Handles a field the mapping lacks, under the effective dynamic setting
 * of its enclosing object. *descend tells whether an object's members
 * should still be walked (to collect their additions). */
/* Whether a dynamic mapping maps the members of its object as fields. */
static bool
spec_has_members(const cJSON *spec)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(spec, "type");
	if (cJSON_IsString(t) && strcmp(t->valuestring, "object") != 0 &&
	    strcmp(t->valuestring, "nested") != 0)
		return false;
	return !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(spec, "enabled"));
}

static cm_err
unknown_field(parse_ctx *c, st_dynamic dyn, const char *owner, const char *name, const cJSON *j,
              bool *descend)
{
	*descend = false;
	if (dyn == ST_DYNAMIC_STRICT)
		return cm_error_set_type(
		    c->err, CM_EMAPPING, "strict_dynamic_mapping_exception",
		    "mapping set to strict, dynamic introduction of [%s] within "
		    "[%s] is not allowed",
		    name, owner ? owner : "_doc");
	if (dyn == ST_DYNAMIC_FALSE || !c->want_dynamic)
		return CM_OK;
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(c->dyn_props, c->path);
	if (added != NULL) {
		*descend = (cJSON_IsObject(j) || (cJSON_IsArray(j) && cJSON_GetArraySize(j) > 0)) &&
		           spec_has_members(added);
		return CM_OK; /* already added from an earlier value */
	}
	cJSON *spec = dynamic_spec(c, j);
	if (spec == NULL)
		return CM_OK;
	if (c->dyn_props == NULL) {
		c->dyn_root = cJSON_CreateObject();
		c->dyn_props = cJSON_AddObjectToObject(c->dyn_root, "properties");
	}
	/* a template may map an object "enabled": false, or to a type that
	 * takes the whole object (flattened): nothing under it */
	*descend = spec_has_members(spec);
	cJSON_AddItemToObject(c->dyn_props, c->path, spec);
	return CM_OK;
}

/* The mapping of the first n bytes of path, if any. */
static const st_field_def *
find_prefix(const st_mapping *m, const char *path, size_t n)
{
	char buf[1024 + 2];
	if (n >= sizeof(buf))
		return NULL;
	memcpy(buf, path, n);
	buf[n] = '\0';
	return st_mapping_find(m, buf);
}

/* ---- the walk ---- */

static cm_err walk_object(parse_ctx *c, cJSON *obj, size_t plen, st_dynamic dyn, const char *owner,
                          int depth);

/* True when no prefix of path is a nested field. */
static bool
copy_to_root(const st_mapping *m, const char *path)
{
	char buf[1024 + 2];
	size_t n = strlen(path);
	if (n >= sizeof(buf))
		return false;
	memcpy(buf, path, n + 1);
	for (size_t i = n; i > 0; i--) {
		if (buf[i - 1] != '.')
			continue;
		buf[i - 1] = '\0';
		const st_field_def *o = st_mapping_find(m, buf);
		if (o && o->nested)
			return false;
	}
	return true;
}

/* copy_to: the value is also indexed into each target field (not
 * transitively). A missing target is mapped dynamically like a new field
 * under its closest mapped object. */
static cm_err
copy_values(parse_ctx *c, const st_field_def *f, cJSON *j)
{
	char saved[sizeof(c->path)];
	memcpy(saved, c->path, sizeof(saved));
	cm_err e = CM_OK;
	for (int i = 0; i < f->ncopy_to && e == CM_OK; i++) {
		const char *t = f->copy_to[i];
		const st_field_def *tf = st_mapping_find(c->m, t);
		if (tf != NULL && tf->type == ST_FT_OBJECT) {
			e = cm_error_set(
			    c->err, CM_EMAPPING,
			    "Cannot copy to field [%s] since it is mapped as an object", t);
		} else if (tf != NULL && c->nest_scope != NULL && copy_to_root(c->m, t)) {
			/* from inside a nested object to a field outside every
			 * nested path: the root document gets the value */
			st_doc *saved_doc = c->doc;
			c->doc = c->root;
			e = emit_field(c, tf, j);
			c->doc = saved_doc;
		} else if (tf != NULL) {
			e = emit_field(c, tf, j);
		} else {
			size_t tn = strlen(t);
			if (tn >= sizeof(c->path))
				continue;
			memcpy(c->path, t, tn + 1);
			st_dynamic dyn = c->m->dynamic;
			const char *owner = NULL, *leaf = t;
			for (size_t q = tn; q > 0; q--) {
				if (t[q - 1] != '.')
					continue;
				const st_field_def *o = find_prefix(c->m, t, q - 1);
				if (o != NULL) {
					if (o->type == ST_FT_OBJECT)
						dyn = o->dynamic, owner = o->path;
					leaf = t + q;
					break;
				}
			}
			bool descend;
			e = unknown_field(c, dyn, owner, leaf, j, &descend);
		}
	}
	memcpy(c->path, saved, sizeof(saved));
	return e;
}

/* ---- flattened ---- */

#define FLAT_MAX_KEYS 1024 /* distinct keys per document and flattened field */
#define FLAT_DEFAULT_DEPTH 20

typedef struct flat_ctx {
	parse_ctx *c;
	const st_field_def *f; /* the flattened mapping */
	st_field_def *root;    /* keyword stand-in for the root field */
	st_field_def **keys;   /* keyword stand-ins for "<path>.<key>" */
	size_t nkeys;
	char key[1024];
} flat_ctx;

/* A keyword field definition owned by the document. */
static st_field_def *
flat_def(flat_ctx *x, const char *path, size_t n)
{
	st_field_def d;
	memset(&d, 0, sizeof d);
	d.path = doc_own(x->c->doc, path, n + 1);
	d.path[n] = '\0';
	d.type = ST_FT_KEYWORD;
	d.index = x->f->index;
	d.doc_values = x->f->doc_values;
	return (st_field_def *)doc_own(x->c->doc, &d, sizeof d);
}

static cm_err
flat_push(flat_ctx *x, const st_field_def *def, const char *s, size_t n)
{
	st_doc *d = x->c->doc;
	if (d->nvalues >= MAX_DOC_VALUES)
		return cm_error_set(x->c->err, CM_EMAPPING,
		                    "failed to parse: too many values in one document");
	if (d->nvalues == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 16;
		d->values = cm_realloc(CM_MEM_STORAGE, d->values, d->cap * sizeof(*d->values));
	}
	st_value *v = &d->values[d->nvalues++];
	memset(v, 0, sizeof(*v));
	v->field = def;
	v->s = s;
	v->n = n;
	return CM_OK;
}

/* One leaf: its value under the root field and under "<path>.<key>". */
static cm_err
flat_leaf(flat_ctx *x, size_t klen, cJSON *j)
{
	const st_field_def *f = x->f;
	const char *s;
	size_t n;
	if (cJSON_IsNull(j)) {
		if (!f->null_value)
			return CM_OK;
		s = f->null_value;
		n = strlen(s);
	} else if (!(s = node_text(x->c, j, &n))) {
		return cm_error_set(x->c->err, CM_ENOMEM, "out of memory");
	}
	if (f->ignore_above > 0 && utf8_chars(s, n) > (size_t)f->ignore_above)
		return CM_OK;
	if (memchr(x->key, '\0', klen))
		return cm_error_set(x->c->err, CM_EMAPPING,
		                    "Keys in [flattened] fields cannot contain the reserved "
		                    "character \\0. Offending key: [%.*s].",
		                    (int)klen, x->key);
	size_t pn = strlen(f->path);
	const st_field_def *kd = NULL;
	for (size_t i = 0; i < x->nkeys && !kd; i++)
		if (!strncmp(x->keys[i]->path + pn + 1, x->key, klen) &&
		    x->keys[i]->path[pn + 1 + klen] == '\0')
			kd = x->keys[i];
	if (!kd) {
		if (x->nkeys >= FLAT_MAX_KEYS)
			return cm_error_set(
			    x->c->err, CM_EMAPPING,
			    "failed to parse field [%s] of type [flattened]: more than "
			    "[%d] distinct keys in one document",
			    f->path, FLAT_MAX_KEYS);
		char path[sizeof(x->key) + 1024 + 2];
		int pl = snprintf(path, sizeof path, "%s.%.*s", f->path, (int)klen, x->key);
		x->keys = cm_realloc(CM_MEM_STORAGE, x->keys, (x->nkeys + 1) * sizeof(*x->keys));
		kd = x->keys[x->nkeys++] = flat_def(x, path, (size_t)pl);
	}
	cm_err e = flat_push(x, x->root, s, n);
	return e ? e : flat_push(x, kd, s, n);
}

static cm_err flat_object(flat_ctx *x, cJSON *obj, size_t klen, int depth);

/* ES's FlattenedFieldParser.parseFieldValue: name is appended to the key. */
static cm_err
flat_value(flat_ctx *x, cJSON *j, size_t klen, const char *name, int depth)
{
	size_t nl = strlen(name), kl = klen + (klen ? 1 : 0) + nl;
	if (kl >= sizeof(x->key))
		return cm_error_set(x->c->err, CM_EMAPPING, "failed to parse: field path too long");
	if (klen)
		x->key[klen] = '.';
	memcpy(x->key + klen + (klen ? 1 : 0), name, nl);
	if (cJSON_IsArray(j)) {
		cJSON *it;
		cJSON_ArrayForEach(it, j)
		{
			cm_err e = cJSON_IsObject(it) || cJSON_IsArray(it)
			               ? flat_value(x, it, klen, name, depth)
			               : flat_leaf(x, kl, it);
			if (e)
				return e;
		}
		return CM_OK;
	}
	if (cJSON_IsObject(j)) {
		int limit = x->f->depth_limit > 0 ? x->f->depth_limit : FLAT_DEFAULT_DEPTH;
		if (depth + 2 > limit) /* ES: the object's path length + 1 */
			return cm_error_set(
			    x->c->err, CM_EMAPPING,
			    "failed to parse field [%s] of type [flattened]: The "
			    "provided [flattened] field [%s] exceeds the maximum depth "
			    "limit of [%d].",
			    x->f->path, x->f->path, limit);
		return flat_object(x, j, kl, depth + 1);
	}
	return flat_leaf(x, kl, j);
}

static cm_err
flat_object(flat_ctx *x, cJSON *obj, size_t klen, int depth)
{
	cJSON *it;
	cJSON_ArrayForEach(it, obj)
	{
		cm_err e = flat_value(x, it, klen, it->string ? it->string : "", depth);
		if (e)
			return e;
	}
	return CM_OK;
}

/* A flattened field's value: an object (or an array of them, or null). */
static cm_err
emit_flattened(parse_ctx *c, const st_field_def *f, cJSON *j)
{
	if (cJSON_IsNull(j) || (!f->index && !f->doc_values))
		return CM_OK;
	if (cJSON_IsArray(j)) {
		cJSON *it;
		cJSON_ArrayForEach(it, j)
		{
			cm_err e = emit_flattened(c, f, it);
			if (e)
				return e;
		}
		return CM_OK;
	}
	if (!cJSON_IsObject(j)) {
		char pv[64];
		preview(j, pv, sizeof pv);
		return cm_error_set(c->err, CM_EMAPPING,
		                    "failed to parse field [%s] of type [flattened]. Preview of "
		                    "field's value: '%s'",
		                    f->path, pv);
	}
	flat_ctx x;
	memset(&x, 0, sizeof x);
	x.c = c;
	x.f = f;
	x.root = flat_def(&x, f->path, strlen(f->path));
	cm_err e = flat_object(&x, j, 0, 0);
	cm_free(CM_MEM_STORAGE, x.keys);
	return e;
}

/* ---- completion ---- */

typedef struct comp_tok {
	cm_buf *b;
} comp_tok;

static int
comp_tok_cb(void *ctx, const st_token *t)
{
	cm_buf *b = ((comp_tok *)ctx)->b;
	if (b->len)
		cm_buf_put_u8(b, ' ');
	cm_buf_put(b, t->term, t->len);
	return 0;
}

static cm_err
comp_error(parse_ctx *c, const st_field_def *f, const char *what)
{
	return cm_error_set(c->err, CM_EMAPPING,
	                    "failed to parse field [%s] of type [completion]: %s", f->path, what);
}

/* One input: its term (analysed text, weight, input) under the field. */
static cm_err
comp_input(parse_ctx *c, const st_field_def *f, const st_field_def *def, const cJSON *in,
           long weight)
{
	if (!cJSON_IsString(in))
		return comp_error(c, f, "[input] must be a string or an array of strings");
	const char *s = in->valuestring;
	size_t n = strlen(s), cps = 0, cut = 0;
	while (cut < n && cps < (size_t)f->max_input_length) { /* max_input_length characters */
		cut++;
		while (cut < n && ((unsigned char)s[cut] & 0xC0) == 0x80)
			cut++;
		cps++;
	}
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	comp_tok ct = {&b};
	cm_err e =
	    st_analyze_with(f->custom_analyzer, f->analyzer, s, cut, 0, comp_tok_cb, &ct, NULL);
	if (e == CM_OK && b.len) {
		cm_buf_printf(&b, "%c%010ld%c", ST_COMPLETION_SEP, weight, ST_COMPLETION_SEP);
		cm_buf_put(&b, s, cut);
		if (c->doc->nvalues >= MAX_DOC_VALUES) {
			e = cm_error_set(c->err, CM_EMAPPING,
			                 "failed to parse: too many values in one document");
		} else {
			st_value *v = push_value(c, f);
			v->field = def;
			v->s = doc_own(c->doc, b.data, b.len);
			v->n = b.len;
		}
	} else if (e) {
		cm_error_set(c->err, e, "analysis failed for field [%s]", f->path);
	}
	cm_buf_free(&b);
	return e;
}

static cm_err
comp_value(parse_ctx *c, const st_field_def *f, const st_field_def *def, const cJSON *j)
{
	if (cJSON_IsNull(j))
		return CM_OK;
	if (cJSON_IsString(j))
		return comp_input(c, f, def, j, 1);
	if (!cJSON_IsObject(j))
		return comp_error(c, f, "expected a string, an array or an object");
	const cJSON *input = NULL, *v;
	long weight = 1;
	cJSON_ArrayForEach(v, j)
	{
		if (!strcmp(v->string, "input")) {
			input = v;
		} else if (!strcmp(v->string, "weight")) {
			double d = cJSON_IsNumber(v)   ? v->valuedouble
			           : cJSON_IsString(v) ? strtod(v->valuestring, NULL)
			                               : -1;
			if (d != floor(d) || d < 0 || d > 2147483647.0)
				return comp_error(
				    c, f, "weight must be an integer between 0 and 2147483647");
			weight = (long)d;
		} else if (!strcmp(v->string, "contexts")) {
			return comp_error(c, f, "[contexts] are not supported");
		} else {
			char why[300];
			snprintf(why, sizeof why, "unknown field name [%.200s]", v->string);
			return comp_error(c, f, why);
		}
	}
	if (!input)
		return comp_error(c, f, "[input] is required");
	if (!cJSON_IsArray(input))
		return comp_input(c, f, def, input, weight);
	cJSON_ArrayForEach(v, input)
	{
		cm_err e = comp_input(c, f, def, v, weight);
		if (e)
			return e;
	}
	return CM_OK;
}

/* The definition a field kept as keyword terms (completion, ranges)
 * indexes its values under: a keyword at f's path, owned by the doc. */
static const st_field_def *
terms_def(parse_ctx *c, const st_field_def *f, bool index, bool doc_values)
{
	st_field_def d;
	memset(&d, 0, sizeof d);
	d.path = doc_own(c->doc, f->path, strlen(f->path) + 1);
	d.type = ST_FT_KEYWORD;
	d.index = index;
	d.doc_values = doc_values;
	return (const st_field_def *)doc_own(c->doc, &d, sizeof d);
}

typedef cm_err (*value_fn)(parse_ctx *c, const st_field_def *f, const st_field_def *def,
                           const cJSON *j);

/* fn over j, or over each of its items when j is an array. */
static cm_err
each_value(parse_ctx *c, const st_field_def *f, const st_field_def *def, const cJSON *j,
           value_fn fn)
{
	if (!cJSON_IsArray(j))
		return fn(c, f, def, j);
	const cJSON *it;
	cJSON_ArrayForEach(it, j)
	{
		cm_err e = fn(c, f, def, it);
		if (e)
			return e;
	}
	return CM_OK;
}

static cm_err
emit_completion(parse_ctx *c, const st_field_def *f, cJSON *j)
{
	return each_value(c, f, terms_def(c, f, true, false), j, comp_value);
}

/* ---- range fields ---- */

/* One bound of a range field's value, inclusive as given. */
static bool
range_bound(parse_ctx *c, const st_field_def *f, cJSON *j, st_range_bound *b)
{
	memset(b, 0, sizeof(*b));
	switch (f->type) {
	case ST_FT_INTEGER_RANGE:
		return integer_value(c, f->no_coerce, INT32_MIN, INT32_MAX, j, &b->i);
	case ST_FT_LONG_RANGE:
		return integer_value(c, f->no_coerce, INT64_MIN, INT64_MAX, j, &b->i);
	case ST_FT_FLOAT_RANGE:
	case ST_FT_DOUBLE_RANGE: {
		double d;
		int64_t i;
		bool is_int;
		if (cJSON_IsNumber(j))
			d = j->valuedouble;
		else if (!cJSON_IsString(j) || f->no_coerce ||
		         !string_number(j->valuestring, &d, &i, &is_int))
			return false;
		if (!isfinite(d))
			return false;
		if (f->type == ST_FT_FLOAT_RANGE) {
			if (fabs(d) >= 0x1.ffffffp+127)
				return false;
			d = (double)(float)d;
		}
		b->i = st_double_to_sortable(d);
		return true;
	}
	case ST_FT_DATE_RANGE: {
		if (!cJSON_IsString(j) && !cJSON_IsNumber(j))
			return false;
		size_t n;
		const char *s = node_text(c, j, &n);
		return s != NULL && st_date_parse(s, n, f->format, &b->i);
	}
	case ST_FT_IP_RANGE:
		return cJSON_IsString(j) &&
		       st_ip_parse(j->valuestring, strlen(j->valuestring), b->ip);
	default:
		return false;
	}
}

/* One range: {"gte"|"gt": .., "lte"|"lt": ..} (a missing or null bound
 * is open) or, for ip_range, "addr/len". Exclusive bounds become the
 * next value in, as ES stores them. */
static cm_err
range_value(parse_ctx *c, const st_field_def *f, const st_field_def *def, const cJSON *j)
{
	if (cJSON_IsNull(j))
		return CM_OK;
	st_range_bound lo, hi;
	st_range_min(f->type, &lo);
	st_range_max(f->type, &hi);
	if (f->type == ST_FT_IP_RANGE && cJSON_IsString(j)) {
		if (!st_cidr_parse(j->valuestring, strlen(j->valuestring), lo.ip, hi.ip))
			return type_error(c, f, j);
	} else if (cJSON_IsObject(j)) {
		cJSON *it;
		cJSON_ArrayForEach(it, j)
		{
			const char *k = it->string;
			bool upper = strcmp(k, "lt") == 0 || strcmp(k, "lte") == 0;
			bool excl = strcmp(k, "gt") == 0 || strcmp(k, "lt") == 0;
			if (!upper && strcmp(k, "gt") != 0 && strcmp(k, "gte") != 0)
				return type_error(c, f, j); /* ES: "with unknown parameter" */
			st_range_bound *b = upper ? &hi : &lo;
			if (cJSON_IsNull(it)) {
				if (upper)
					st_range_max(f->type, b);
				else
					st_range_min(f->type, b);
				continue;
			}
			if (!range_bound(c, f, it, b) ||
			    (excl && !st_range_step(f->type, b, upper ? -1 : 1)))
				return type_error(c, f, j);
		}
	} else {
		return type_error(c, f, j); /* ES: "expected an object" */
	}
	if (st_range_cmp(f->type, &lo, &hi) > 0) /* Lucene: min is greater than max */
		return type_error(c, f, j);
	if (c->doc->nvalues >= MAX_DOC_VALUES)
		return cm_error_set(c->err, CM_EMAPPING,
		                    "failed to parse: too many values in one document");
	uint8_t term[ST_RANGE_TERM_MAX];
	size_t n = st_range_encode(f->type, &lo, &hi, term);
	st_value *v = push_value(c, f);
	v->field = def;
	v->s = doc_own(c->doc, term, n);
	v->n = n;
	return CM_OK;
}

static cm_err
emit_range(parse_ctx *c, const st_field_def *f, cJSON *j)
{
	return each_value(c, f, terms_def(c, f, f->index, f->doc_values), j, range_value);
}

/* ---- nested objects ---- */

static const st_field_def nested_path_def = {
    .path = (char *)ST_FIELD_NESTED_PATH,
    .type = ST_FT_KEYWORD,
    .analyzer = ST_AN_KEYWORD,
    .search_analyzer = ST_AN_KEYWORD,
    .index = true,
};
static const st_field_def nested_offset_def = {
    .path = (char *)ST_FIELD_NESTED_OFFSET,
    .type = ST_FT_LONG,
    .doc_values = true,
};

static st_value *
doc_push_raw(st_doc *d, const st_value *v)
{
	if (d->nvalues == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 16;
		d->values = cm_realloc(CM_MEM_STORAGE, d->values, d->cap * sizeof(*d->values));
	}
	d->values[d->nvalues] = *v;
	return &d->values[d->nvalues++];
}

/* Copies sub's own values (not its hidden ones) into dst. */
static void
copy_nested_values(st_doc *dst, const st_doc *sub)
{
	for (size_t i = 0; i < sub->nvalues; i++)
		if (sub->values[i].field != &nested_path_def &&
		    sub->values[i].field != &nested_offset_def)
			doc_push_raw(dst, &sub->values[i]);
}

/* One object of nested field f: its values go to a hidden document of
 * their own, appended to the root's list after the documents of its own
 * nested children (post-order, as Lucene's block join expects). */
static cm_err
walk_nested(parse_ctx *c, cJSON *j, size_t plen, const st_field_def *f, int depth)
{
	if (++c->nested_total > c->nested_limit)
		return cm_error_set(c->err, CM_EMAPPING,
		                    "The number of nested documents has exceeded the allowed limit "
		                    "of [%u]. This limit can be set by changing the "
		                    "[index.mapping.nested_objects.limit] index level setting.",
		                    c->nested_limit);
	st_doc sub;
	memset(&sub, 0, sizeof(sub));
	sub.id = "";
	sub.source = "";
	sub.stored = "";
	st_value hv;
	memset(&hv, 0, sizeof(hv));
	hv.field = &nested_path_def;
	hv.s = f->path;
	hv.n = strlen(f->path);
	doc_push_raw(&sub, &hv);
	memset(&hv, 0, sizeof(hv));
	hv.field = &nested_offset_def;
	hv.i = c->nest_ix;
	doc_push_raw(&sub, &hv);
	st_doc *parent = c->doc;
	bool parent_to_root = c->cur_to_root;
	bool via_parent = f->include_in_parent && parent_to_root;
	const char *parent_scope = c->nest_scope;
	c->doc = &sub;
	c->nest_scope = f->path;
	c->cur_to_root = via_parent || f->include_in_root;
	c->nest_ix = 0;
	cm_err e = walk_object(c, j, plen, f->dynamic, f->path, depth + 1);
	c->nest_scope = parent_scope;
	c->doc = parent;
	c->cur_to_root = parent_to_root;
	if (e == CM_OK) {
		if (f->include_in_parent)
			copy_nested_values(parent, &sub);
		if (f->include_in_root && !via_parent)
			copy_nested_values(c->root, &sub);
		st_doc *r = c->root;
		if (r->nnested == r->nested_cap) {
			r->nested_cap = r->nested_cap ? r->nested_cap * 2 : 4;
			r->nested = cm_realloc(CM_MEM_STORAGE, r->nested,
			                       r->nested_cap * sizeof(*r->nested));
		}
		r->nested[r->nnested++] = sub;
	} else {
		st_doc_free(&sub);
	}
	return e;
}

/* Value j at c->path (length plen). `known` is its mapping, if any. */
static cm_err
walk_value(parse_ctx *c, cJSON *j, size_t plen, const st_field_def *known, st_dynamic dyn,
           const char *owner, const char *name, int depth)
{
	if (depth > MAX_DOC_DEPTH)
		return cm_error_set(
		    c->err, CM_EMAPPING,
		    "failed to parse: the document is nested deeper than [%d] levels",
		    MAX_DOC_DEPTH);
	if (known != NULL && known->disabled)
		return CM_OK; /* "enabled": false: anything goes, nothing is indexed */
	if (known != NULL && known->type == ST_FT_FLATTENED)
		return emit_flattened(c, known, j);
	if (known != NULL && known->type == ST_FT_COMPLETION)
		return emit_completion(c, known, j);
	if (known != NULL && st_field_type_is_range(known->type))
		return emit_range(c, known, j);
	if (cJSON_IsNull(j)) {
		if (known == NULL || known->null_value == NULL || known->type == ST_FT_OBJECT)
			return CM_OK;
		/* index the field's null_value: the node becomes that string,
		 * so the value's bytes live as long as the tree */
		size_t n = strlen(known->null_value);
		char *s = cJSON_malloc(n + 1);
		if (s == NULL)
			return cm_error_set(c->err, CM_ENOMEM, "out of memory");
		memcpy(s, known->null_value, n + 1);
		j->type = cJSON_String;
		j->valuestring = s;
	}
	if (known != NULL && known->type == ST_FT_GEO_POINT &&
	    (cJSON_IsObject(j) || (cJSON_IsArray(j) && cJSON_IsNumber(j->child)))) {
		/* one point: {"lat","lon"} or [lon, lat] (a list of points is an
		 * array of those, or of strings) */
		cm_err e = emit_field(c, known, j);
		if (e == CM_OK && known->ncopy_to > 0)
			e = copy_values(c, known, j);
		return e;
	}
	if (cJSON_IsArray(j)) {
		cJSON *it;
		uint32_t ix = 0;
		cJSON_ArrayForEach(it, j)
		{
			c->path[plen] = '\0';
			/* a nested object's offset counts the objects before it */
			c->nest_ix = ix;
			ix += cJSON_IsObject(it);
			cm_err e = walk_value(c, it, plen, known, dyn, owner, name, depth + 1);
			if (e != CM_OK)
				return e;
		}
		return CM_OK;
	}
	if (known == NULL) {
		/* the field is new: decide, and for objects still walk the
		 * members so nested additions are collected in one pass */
		bool descend;
		cm_err e = unknown_field(c, dyn, owner, name, j, &descend);
		if (e != CM_OK || !descend || !cJSON_IsObject(j))
			return e;
		char *own = cm_strndup(CM_MEM_STORAGE, c->path, plen);
		e = walk_object(c, j, plen, dyn, own, depth + 1);
		cm_free(CM_MEM_STORAGE, own);
		return e;
	}
	if (known->parent != NULL) {
		/* a multi-field gets its parent's values; a document cannot
		 * address it as a sub-field */
		return cm_error_set(
		    c->err, CM_EMAPPING,
		    "Could not dynamically add mapping for field [%s]. Existing mapping "
		    "for [%s] must be of type object but found [%s].",
		    known->path, known->parent,
		    st_field_type_name(st_mapping_find(c->m, known->parent)
		                           ? st_mapping_find(c->m, known->parent)->type
		                           : ST_FT_TEXT));
	}
	if (cJSON_IsObject(j)) {
		if (known->type != ST_FT_OBJECT)
			return type_error(c, known, j);
		if (known->nested)
			return walk_nested(c, j, plen, known, depth);
		return walk_object(c, j, plen, known->dynamic, known->path, depth + 1);
	}
	if (known->type == ST_FT_OBJECT)
		return cm_error_set(
		    c->err, CM_EMAPPING,
		    "object mapping for [%s] tried to parse field [%s] as object, but "
		    "found a concrete value",
		    known->path, name);
	cm_err e = emit_field(c, known, j);
	if (e == CM_OK && known->ncopy_to > 0)
		e = copy_values(c, known, j);
	return e;
}

static cm_err
check_field_name(parse_ctx *c, const char *k, bool root)
{
	if (k[0] == '\0')
		return cm_error_set(c->err, CM_EMAPPING, "field name cannot be an empty string");
	bool blank = true;
	for (const char *p = k; *p; p++)
		blank &= *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r';
	if (blank)
		return cm_error_set(c->err, CM_EMAPPING,
		                    "field name cannot contain only whitespace: ['%s']", k);
	size_t n = strlen(k);
	if (k[0] == '.' || k[n - 1] == '.' || strstr(k, "..") != NULL)
		return cm_error_set(
		    c->err, CM_EMAPPING,
		    "object field starting or ending with a [.] makes object resolution "
		    "ambiguous: [%s]",
		    k);
	if (root && k[0] == '_') {
		for (size_t i = 0; i < sizeof(metadata_fields) / sizeof(metadata_fields[0]); i++)
			if (strcmp(k, metadata_fields[i]) == 0)
				return cm_error_set(
				    c->err, CM_EMAPPING,
				    "Field [%s] is a metadata field and cannot be added "
				    "inside a document. Use the index API request "
				    "parameters.",
				    k);
	}
	return CM_OK;
}

/* ES's JSON parser refuses an object that names a member twice. Small
 * objects compare pairwise; larger ones go through a hash table. */
static const char *
duplicate_key(const cJSON *obj)
{
	size_t n = 0;
	const cJSON *a, *b;
	for (a = obj->child; a != NULL; a = a->next)
		n++;
	if (n < 2)
		return NULL;
	if (n <= 12) {
		for (a = obj->child; a != NULL; a = a->next)
			for (b = a->next; b != NULL; b = b->next)
				if (a->string[0] == b->string[0] &&
				    strcmp(a->string, b->string) == 0)
					return a->string;
		return NULL;
	}
	size_t cap = 32;
	while (cap < 2 * n)
		cap *= 2;
	const cJSON *small[64];
	const cJSON **tab = cap <= 64 ? small : cm_malloc(CM_MEM_STORAGE, cap * sizeof(*tab));
	memset(tab, 0, cap * sizeof(*tab));
	const char *dup = NULL;
	for (a = obj->child; a != NULL && dup == NULL; a = a->next) {
		uint32_t h = 2166136261u; /* FNV-1a */
		for (const unsigned char *p = (const unsigned char *)a->string; *p; p++)
			h = (h ^ *p) * 16777619u;
		for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
			if (tab[i] == NULL) {
				tab[i] = a;
				break;
			}
			if (strcmp(tab[i]->string, a->string) == 0) {
				dup = a->string;
				break;
			}
		}
	}
	if (tab != small)
		cm_free(CM_MEM_STORAGE, tab);
	return dup;
}

/* Members of obj, whose own path is c->path[0..plen) (empty at the root). */
static cm_err
walk_object(parse_ctx *c, cJSON *obj, size_t plen, st_dynamic dyn, const char *owner, int depth)
{
	if (depth > MAX_DOC_DEPTH)
		return cm_error_set(
		    c->err, CM_EMAPPING,
		    "failed to parse: the document is nested deeper than [%d] levels",
		    MAX_DOC_DEPTH);
	const char *dup = duplicate_key(obj);
	if (dup != NULL)
		return cm_error_set(c->err, CM_EMAPPING,
		                    "failed to parse: Duplicate field '%.200s'", dup);
	cJSON *it;
	cJSON_ArrayForEach(it, obj)
	{
		const char *k = it->string;
		cm_err e = check_field_name(c, k, plen == 0);
		if (e != CM_OK)
			return e;
		size_t kn = strlen(k), np = plen + (plen ? 1 : 0) + kn;
		if (np > sizeof(c->path) - 2)
			return cm_error_set(c->err, CM_EMAPPING,
			                    "failed to parse: field path too long");
		if (plen)
			c->path[plen] = '.';
		memcpy(c->path + plen + (plen ? 1 : 0), k, kn);
		c->path[np] = '\0';
		const st_field_def *f = st_mapping_find(c->m, c->path);
		st_dynamic d = dyn;
		const char *own = owner, *name = k;
		char *dotted_owner = NULL;
		if (f == NULL && strchr(k, '.') != NULL) {
			/* "a.b" in a document means object a: the closest mapped
			 * object decides dynamic-ness */
			for (size_t q = np; q > plen; q--) {
				if (c->path[q - 1 + 0] != '.' || q - 1 <= plen)
					continue;
				const st_field_def *o = NULL;
				c->path[q - 1] = '\0';
				o = st_mapping_find(c->m, c->path);
				if (o != NULL && o->type != ST_FT_OBJECT) {
					size_t on = strlen(c->path);
					c->path[q - 1] = '.';
					return cm_error_set(c->err, CM_EMAPPING,
					                    "Could not dynamically add mapping for "
					                    "field [%s]. Existing "
					                    "mapping for [%.*s] must be of type "
					                    "object but found [%s].",
					                    c->path, (int)on, c->path,
					                    st_field_type_name(o->type));
				}
				if (o != NULL) {
					d = o->dynamic;
					dotted_owner = cm_strdup(CM_MEM_STORAGE, c->path);
					own = dotted_owner;
					name = k + (q - (plen ? plen + 1 : 0));
				}
				c->path[q - 1] = '.';
				if (o != NULL)
					break;
			}
		}
		c->nest_ix = 0;
		e = walk_value(c, it, np, f, d, own, name, depth);
		cm_free(CM_MEM_STORAGE, dotted_owner);
		if (e != CM_OK)
			return e;
		c->path[plen] = '\0';
	}
	return CM_OK;
}

/* What a segment keeps of the source under the mapping's _source options. */
static cm_err
stored_source(const st_mapping *m, st_doc *d, cm_error *err)
{
	d->stored = d->source;
	d->stored_len = d->source_len;
	if (!st_mapping_source_filtered(m))
		return CM_OK;
	if (m->source_disabled) {
		d->stored = "";
		d->stored_len = 0;
		return CM_OK;
	}
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	cm_err e = st_source_filter(d->source, d->source_len, m->source_includes,
	                            m->nsource_includes, m->source_excludes, m->nsource_excludes, &b);
	if (e == CM_OK) {
		/* excludes can leave nothing: an empty object, never no source */
		if (b.len == 0)
			cm_buf_put(&b, "{}", 2);
		d->stored = doc_own(d, b.data, b.len);
		d->stored_len = b.len;
	} else {
		cm_error_set(err, CM_EMAPPING, "failed to filter _source");
		e = CM_EMAPPING;
	}
	cm_buf_free(&b);
	return e;
}

cm_err
st_doc_parse(const st_mapping *m, const char *id, size_t id_len, const char *source,
             size_t source_len, st_doc *out, st_mapping **dynamic_add, cm_error *err)
{
	return st_doc_parse_limit(m, id, id_len, source, source_len, ST_NESTED_OBJECTS_LIMIT, out,
	                          dynamic_add, err);
}

cm_err
st_doc_parse_limit(const st_mapping *m, const char *id, size_t id_len, const char *source,
                   size_t source_len, uint32_t nested_limit, st_doc *out, st_mapping **dynamic_add,
                   cm_error *err)
{
	parse_ctx c;
	cm_err e = CM_OK;
	uint32_t counts_small[256];
	memset(out, 0, sizeof(*out));
	out->id = id;
	out->id_len = id_len;
	out->source = source;
	out->source_len = source_len;
	if (dynamic_add != NULL)
		*dynamic_add = NULL;
	if (m == NULL)
		return cm_error_set(err, CM_EINVAL, "no mapping");
	memset(&c, 0, sizeof(c));
	c.m = m;
	c.doc = out;
	c.err = err;
	c.want_dynamic = dynamic_add != NULL;
	c.root = out;
	c.cur_to_root = true;
	c.nested_limit = nested_limit ? nested_limit : ST_NESTED_OBJECTS_LIMIT;
	c.counts = m->nfields <= 256 ? counts_small
	                             : cm_malloc(CM_MEM_STORAGE, m->nfields * sizeof(uint32_t));
	memset(c.counts, 0, m->nfields * sizeof(uint32_t));

	const char *end = NULL;
	out->json = source ? cJSON_ParseWithLengthOpts(source, source_len, &end, 0) : NULL;
	if (out->json != NULL) {
		/* one JSON value, then only white space */
		const char *lim = source + source_len;
		while (end < lim && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
			end++;
		if (end < lim) {
			cJSON_Delete(out->json);
			out->json = NULL;
		}
	}
	if (out->json == NULL) {
		e = cm_error_set(err, CM_EMAPPING, "failed to parse");
		goto fail;
	}
	if (!cJSON_IsObject(out->json)) {
		e = cm_error_set(err, CM_EMAPPING,
		                 "failed to parse, document is not a JSON object");
		goto fail;
	}
	e = walk_object(&c, out->json, 0, m->dynamic, NULL, 1);
	if (e != CM_OK)
		goto fail;
	if (c.dyn_root != NULL) {
		/* with the index's analysis: new text fields take analyzer "default" */
		e = st_mapping_from_json_an(c.dyn_root, m->analysis, dynamic_add, err);
		if (e != CM_OK)
			goto fail;
	}
	if ((e = stored_source(m, out, err)) != CM_OK)
		goto fail;
	cJSON_Delete(c.dyn_root);
	cm_free(CM_MEM_STORAGE, c.nums);
	if (c.counts != counts_small)
		cm_free(CM_MEM_STORAGE, c.counts);
	return CM_OK;
fail:
	cJSON_Delete(c.dyn_root);
	cm_free(CM_MEM_STORAGE, c.nums);
	if (c.counts != counts_small)
		cm_free(CM_MEM_STORAGE, c.counts);
	st_doc_free(out);
	out->id = id;
	out->id_len = id_len;
	out->source = source;
	out->source_len = source_len;
	return e;
}

void
st_doc_free(st_doc *d)
{
	if (d == NULL)
		return;
	cm_free(CM_MEM_STORAGE, d->values);
	for (size_t i = 0; i < d->nowned; i++)
		cm_free(CM_MEM_STORAGE, d->owned[i]);
	cm_free(CM_MEM_STORAGE, d->owned);
	d->owned = NULL;
	d->nowned = d->owned_cap = 0;
	for (size_t i = 0; i < d->nnested; i++)
		st_doc_free(&d->nested[i]);
	cm_free(CM_MEM_STORAGE, d->nested);
	d->nested = NULL;
	d->nnested = d->nested_cap = 0;
	cJSON_Delete(d->json);
	d->values = NULL;
	d->json = NULL;
	d->nvalues = d->cap = 0;
}
