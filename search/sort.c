/* Field sorting: per-doc sort values from columns (numbers, dates,
 * booleans, keyword ordinals resolved to terms so segments compare), the
 * comparison with missing first/last, and search_after. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"

#define ORD_CACHE_MAX 65536 /* distinct terms cached per keyword sort key and segment */

typedef struct sr_ordterm {
	const uint8_t *p; /* NULL until looked up */
	size_t n;
} sr_ordterm;

/* A search_after date as ES reads it: with the sort's "format", else the
 * field's (NULL: the default, strict_date_optional_time||epoch_millis). */
static bool
after_date(const sr_sort_field *k, const char *s, const char *format, int64_t *out)
{
	if (k->ftype == ST_FT_DATE_NANOS)
		return st_date_parse_ns(s, strlen(s), format, out);
	return st_date_parse(s, strlen(s), format, out);
}

static cm_err
after_value(sr_sort_field *k, const sr_sort_value *v, const char *format, sr_sortval *out,
            cm_error *err)
{
	memset(out, 0, sizeof *out);
	if (v->type == SR_SV_NULL) {
		out->missing = true;
		return CM_OK;
	}
	switch (k->kind) {
	case SR_SORT_SCORE:
		out->f = v->type == SR_SV_LONG ? (float)v->l : v->type == SR_SV_DOUBLE ? (float)v->d
		                                                                       : strtof(v->s, NULL);
		return CM_OK;
	case SR_SORT_DOC:
	case SR_SORT_SHARD_DOC:
		out->l = v->type == SR_SV_LONG ? v->l : (int64_t)v->d;
		return CM_OK;
	case SR_SORT_FIELD:
		break;
	}
	if (k->ftype == ST_FT_IP) {
		if ((v->type != SR_SV_STRING && v->type != SR_SV_IP) || !v->s ||
		    !st_ip_parse(v->s, strlen(v->s), k->after_ip))
			return cm_error_set(err, CM_EINVAL, "failed to parse search_after value [%s]",
			                    v->s ? v->s : "");
		out->s = k->after_ip;
		out->n = ST_IP_LEN;
		return CM_OK;
	}
	if (k->ftype == ST_FT_UNSIGNED_LONG) {
		uint64_t u;
		char num[32];
		const char *t = v->s;
		if (v->type == SR_SV_LONG || v->type == SR_SV_ULONG) {
			if (v->type == SR_SV_LONG && v->l < 0)
				return cm_error_set(err, CM_EINVAL, "failed to parse search_after value");
			u = v->type == SR_SV_ULONG ? st_col_to_ulong(v->l) : (uint64_t)v->l;
		} else {
			if (v->type == SR_SV_DOUBLE) {
				snprintf(num, sizeof(num), "%.17g", v->d);
				t = num;
			}
			/* a JSON number near 2^64 arrives as the double 2^64 */
			if (v->type == SR_SV_DOUBLE && v->d >= 18446744073709551616.0 &&
			    v->d < 18446744073709555712.0)
				u = UINT64_MAX;
			else if (!t || !st_ulong_parse(t, true, &u))
				return cm_error_set(err, CM_EINVAL, "failed to parse search_after value [%s]",
				                    t ? t : "");
		}
		out->l = st_ulong_to_col(u);
		return CM_OK;
	}
	if (k->ftype == ST_FT_SCALED_FLOAT) {
		double d = v->type == SR_SV_LONG ? (double)v->l : v->d;
		char *end = NULL;
		if (v->type == SR_SV_STRING)
			d = strtod(v->s, &end);
		if ((end && *end) || v->type == SR_SV_NULL)
			return cm_error_set(err, CM_EINVAL, "failed to parse search_after value");
		out->l = (int64_t)floor(d * k->scale + 0.5);
		return CM_OK;
	}
	if (k->is_keyword) {
		if (v->type != SR_SV_STRING)
			return cm_error_set(err, CM_EINVAL,
			                    "search_after value for a keyword sort must be a string");
		out->s = (const uint8_t *)v->s;
		out->n = strlen(v->s);
		return CM_OK;
	}
	if (k->is_double) {
		double d;
		if (v->type == SR_SV_LONG)
			d = (double)v->l;
		else if (v->type == SR_SV_DOUBLE)
			d = v->d;
		else {
			char *end;
			d = strtod(v->s, &end);
			if (*end)
				return cm_error_set(err, CM_EINVAL, "failed to parse search_after value [%s]",
				                    v->s);
		}
		out->l = st_double_to_sortable(d);
		return CM_OK;
	}
	if (v->type == SR_SV_LONG) {
		out->l = v->l;
	} else if (v->type == SR_SV_DOUBLE) {
		out->l = (int64_t)v->d;
	} else {
		int64_t ms;
		char *end;
		long long l = strtoll(v->s, &end, 10);
		bool date = k->ftype == ST_FT_DATE || k->ftype == ST_FT_DATE_NANOS;
		bool integer = !*end && end != v->s; /* also a JSON number past 2^53 */
		if (date && format && after_date(k, v->s, format, &ms)) /* "2021" in uuuu: a year */
			out->l = ms;
		else if (date && format && !integer)
			return cm_error_set(err, CM_EINVAL,
			                    "failed to parse date field [%s] with format [%s]", v->s, format);
		else if (integer)
			out->l = l;
		else if (date && after_date(k, v->s, NULL, &ms))
			out->l = ms;
		else if (!strcmp(v->s, "true") || !strcmp(v->s, "false"))
			out->l = v->s[0] == 't';
		else
			return cm_error_set(err, CM_EINVAL, "failed to parse search_after value [%s]", v->s);
	}
	return CM_OK;
}

/* A search_after number in the sort's numeric_type resolution, read in
 * the field's: nanos for a millis field and the reverse, rounded so that
 * "after" keeps its meaning (asc: values above it, desc: below). */
static void
after_numeric_type(const sr_sort_field *k, const sr_sort_key *rk, const sr_sort_value *v,
                   sr_sortval *out)
{
	if (out->missing)
		return;
	if (v->type == SR_SV_STRING) { /* a number past 2^53 arrives as its text */
		char *end;
		long long l = v->s ? strtoll(v->s, &end, 10) : 0;
		if (!v->s || *end || end == v->s || l != out->l)
			return;
	} else if (v->type != SR_SV_LONG && v->type != SR_SV_DOUBLE)
		return;
	int64_t x = out->l;
	if (rk->numeric_type == SR_NT_DATE_NANOS && k->ftype == ST_FT_DATE) {
		int64_t q = x / 1000000 - (x % 1000000 < 0); /* floor */
		out->l = k->desc && q * 1000000 != x ? q + 1 : q;
	} else if (rk->numeric_type == SR_NT_DATE && k->ftype == ST_FT_DATE_NANOS) {
		if (x > INT64_MAX / 1000000 - 1 || x < INT64_MIN / 1000000 + 1)
			return;
		out->l = k->desc ? x * 1000000 : x * 1000000 + 999999;
	}
}

static const char *
text_sort_reason(const char *field)
{
	static _Thread_local char buf[512];
	snprintf(buf, sizeof(buf),
	         "Text fields are not optimised for operations that require per-document field "
	         "data like aggregations and sorting, so these operations are disabled by default. "
	         "Please use a keyword field instead. Alternatively, set fielddata=true on [%s] in "
	         "order to load field data by uninverting the inverted index. Note that this can use "
	         "significant memory.",
	         field);
	return buf;
}

cm_err
sr_sorter_init(sr_sorter *s, sr_exec *x, const sr_request *req, cm_error *err)
{
	memset(s, 0, sizeof *s);
	s->nkeys = req->nsort;
	if (!s->nkeys)
		return CM_OK;
	s->keys = cm_calloc(CM_MEM_SEARCH, s->nkeys, sizeof(sr_sort_field));
	s->fi = cm_calloc(CM_MEM_SEARCH, s->nkeys, sizeof(st_field_info *));
	s->cb = cm_calloc(CM_MEM_SEARCH, s->nkeys, sizeof(st_colblock));
	s->ordc = cm_calloc(CM_MEM_SEARCH, s->nkeys, sizeof(sr_ordterm *));
	s->nordc = cm_calloc(CM_MEM_SEARCH, s->nkeys, sizeof(size_t));
	s->nchild = cm_calloc(CM_MEM_SEARCH, s->nkeys, sizeof(uint64_t *));
	for (size_t i = 0; i < s->nkeys; i++) {
		const sr_sort_key *rk = &req->sort[i];
		sr_sort_field *k = &s->keys[i];
		k->nested_path = rk->nested_path;
		k->nested_filter = rk->nested_filter;
		if (rk->nested_path) {
			const st_mapping *m = x->reader ? st_reader_mapping(x->reader) : NULL;
			const st_field_def *d = m ? st_mapping_find(m, rk->nested_path) : NULL;
			if (d == NULL || !d->nested)
				return cm_error_set_type(
				    err, CM_EINVAL, "query_shard_exception",
				    "[nested] nested object under path [%s] is not "
				    "of nested type",
				    rk->nested_path);
		}
		k->kind = rk->kind;
		k->desc = rk->desc;
		k->missing_first = rk->missing_first;
		k->mode = rk->mode;
		k->ftype = -1;
		if (rk->kind != SR_SORT_FIELD)
			continue;
		if (!strcmp(rk->field, "_id")) {
			k->is_id = k->is_keyword = true;
			continue;
		}
		k->fs = sr_exec_field(x, rk->field);
		if (rk->geo) {
			k->geo = true;
			k->geo_lat = rk->geo_lat;
			k->geo_lon = rk->geo_lon;
			k->geo_unit = rk->geo_unit > 0 ? rk->geo_unit : 1;
			k->is_double = true;
			k->ftype = ST_FT_GEO_POINT;
			k->scale = 1;
			const st_mapping *m = x->reader ? st_reader_mapping(x->reader) : NULL;
			const st_field_def *def = m ? st_mapping_find(m, rk->field) : NULL;
			st_field_type t = k->fs ? k->fs->type : def ? def->type : ST_FT_GEO_POINT;
			if (!k->fs && !def && !rk->geo_ignore_unmapped)
				return cm_error_set_type(err, CM_EINVAL, "query_shard_exception",
				                         "failed to find mapper for [%s] for geo distance "
				                         "based sort",
				                         rk->field);
			if (t != ST_FT_GEO_POINT)
				return cm_error_set(err, CM_EINVAL, "field [%s] is not a geo_point field",
				                    rk->field);
			continue;
		}
		if (k->fs && st_field_type_is_range(k->fs->range_type))
			return cm_error_set(
			    err, CM_EINVAL,
			    "sorting on range field [%s] of type [%s] is not supported", rk->field,
			    st_field_type_name(k->fs->range_type));
		if (k->fs && k->fs->type == ST_FT_GEO_POINT)
			return cm_error_set(err, CM_EINVAL,
			                    "can't sort on geo_point field without using specific sorting "
			                    "feature, like geo_distance");
		if (!k->fs) {
			/* Mapped but absent from this shard's segments (a shard with
			 * none of its documents yet): every doc here is missing the
			 * value, as in Elasticsearch. Only an unmapped field fails;
			 * a text field fails as below. */
			const st_mapping *m = x->reader ? st_reader_mapping(x->reader) : NULL;
			const st_field_def *def = m ? st_mapping_find(m, rk->field) : NULL;
			const char *type = rk->unmapped_type;
			if (def && def->type == ST_FT_TEXT)
				return cm_error_set(err, CM_EINVAL, "%s", text_sort_reason(rk->field));
			if (def && st_field_type_is_range(def->type))
				return cm_error_set(
				    err, CM_EINVAL,
				    "sorting on range field [%s] of type [%s] is not supported",
				    rk->field, st_field_type_name(def->type));
			if (def && def->type != ST_FT_OBJECT && !type)
				type = st_field_type_name(def->type);
			/* a flattened field's key none of these docs has */
			if (!def && !type && st_mapping_flattened_owner(m, rk->field))
				type = "keyword";
			if (!type)
				return cm_error_set_type(err, CM_EINVAL, "query_shard_exception",
				                         "No mapping found for [%s] in order to sort on",
				                         rk->field);
			st_field_type t;
			if (st_field_type_from_name(type, &t)) {
				k->is_keyword = st_field_type_is_ordinal(t);
				k->is_double = st_field_type_is_double(t);
				k->ftype = (int)t;
				k->scale = def && def->scaling_factor > 0 ? def->scaling_factor : 1;
			}
			continue;
		}
		if (k->fs->type == ST_FT_TEXT)
			return cm_error_set(err, CM_EINVAL, "%s", text_sort_reason(rk->field));
		k->is_keyword = st_field_type_is_ordinal(k->fs->type);
		k->is_double = st_field_type_is_double(k->fs->type);
		k->ftype = (int)k->fs->type;
		k->scale = k->fs->scale > 0 ? k->fs->scale : 1;
	}
	if (req->nsearch_after) {
		if (req->nsearch_after != s->nkeys)
			return cm_error_set(err, CM_EINVAL,
			                    "search_after has %zu value(s) but sort has %zu.",
			                    req->nsearch_after, s->nkeys);
		s->after = cm_calloc(CM_MEM_SEARCH, s->nkeys, sizeof(sr_sortval));
		const st_mapping *m = x->reader ? st_reader_mapping(x->reader) : NULL;
		for (size_t i = 0; i < s->nkeys; i++) {
			const sr_sort_key *rk = &req->sort[i];
			const st_field_def *def =
			    m && rk->kind == SR_SORT_FIELD ? st_mapping_find(m, rk->field) : NULL;
			const char *format = rk->format ? rk->format : def ? def->format : NULL;
			cm_err rc = after_value(&s->keys[i], &req->search_after[i], format, &s->after[i],
			                        err);
			if (rc)
				return rc;
			after_numeric_type(&s->keys[i], rk, &req->search_after[i], &s->after[i]);
		}
	}
	return CM_OK;
}

void
sr_sorter_free(sr_sorter *s)
{
	for (size_t i = 0; i < s->nkeys && s->cb; i++) {
		st_colblock_free(&s->cb[i]);
		cm_free(CM_MEM_SEARCH, s->ordc[i]);
		if (s->nchild)
			cm_free(CM_MEM_SEARCH, s->nchild[i]);
	}
	cm_free(CM_MEM_SEARCH, s->nchild);
	cm_free(CM_MEM_SEARCH, s->ordc);
	cm_free(CM_MEM_SEARCH, s->nordc);
	cm_free(CM_MEM_SEARCH, s->cb);
	cm_free(CM_MEM_SEARCH, s->fi);
	cm_free(CM_MEM_SEARCH, s->keys);
	cm_free(CM_MEM_SEARCH, s->after);
	for (size_t i = 0; i < s->nids; i++)
		cm_free(CM_MEM_SEARCH, s->ids[i]);
	cm_free(CM_MEM_SEARCH, s->ids);
	if (s->capids)
		cm_buf_free(&s->idb);
	memset(s, 0, sizeof *s);
}

/* The doc's _id as a sort value (kept until the sorter is freed). */
static cm_err
id_value(sr_sorter *s, sr_exec *x, size_t si, uint32_t doc, sr_sortval *v)
{
	if (s->nids == s->capids) {
		if (!s->capids)
			cm_buf_init(&s->idb, CM_MEM_SEARCH);
		s->capids = s->capids ? 2 * s->capids : 64;
		s->ids = cm_realloc(CM_MEM_SEARCH, s->ids, s->capids * sizeof(char *));
	}
	cm_buf_reset(&s->idb);
	cm_err rc = st_stored_get(x->segs[si].txn, doc, &s->idb, NULL);
	if (rc)
		return cm_error_set(x->err, rc, "cannot read the _id of a document");
	char *id = cm_strndup(CM_MEM_SEARCH, (const char *)s->idb.data, s->idb.len);
	s->ids[s->nids++] = id;
	v->s = (const uint8_t *)id;
	v->n = s->idb.len;
	return CM_OK;
}

/* A nested key's docs in segment si: the live nested docs of its path
 * that its filter matches (NULL when none). */
static cm_err
nested_children(sr_exec *x, size_t si, const sr_sort_field *k, uint64_t **out)
{
	*out = sr_nested_docs(x, si, k->nested_path);
	if (*out == NULL || k->nested_filter == NULL)
		return x->err->code;
	sr_plan *pl = NULL;
	sr_it *it = NULL;
	cm_err rc = sr_plan_compile_in(x, k->nested_filter, k->nested_path, false, &pl);
	if (!rc)
		rc = sr_it_build(x, si, pl, &it);
	uint32_t max_doc = st_segment_max_doc(x->segs[si].seg);
	for (uint32_t d = 0; !rc && it && d < max_doc; d++) {
		if (!st_bit_get(*out, d))
			continue;
		if (it->ops->advance(it, d) != d)
			(*out)[d >> 6] &= ~((uint64_t)1 << (d & 63));
	}
	sr_it_free(it);
	sr_plan_free(pl);
	return rc;
}

cm_err
sr_sorter_segment(sr_sorter *s, sr_exec *x, size_t si)
{
	for (size_t i = 0; i < s->nkeys; i++) {
		st_colblock_free(&s->cb[i]);
		memset(&s->cb[i], 0, sizeof s->cb[i]);
		cm_free(CM_MEM_SEARCH, s->ordc[i]);
		s->ordc[i] = NULL;
		s->nordc[i] = 0;
		s->fi[i] = NULL;
		cm_free(CM_MEM_SEARCH, s->nchild[i]);
		s->nchild[i] = NULL;
		if (s->keys[i].kind != SR_SORT_FIELD || !s->keys[i].fs)
			continue;
		if (s->keys[i].nested_path) {
			cm_err rc = nested_children(x, si, &s->keys[i], &s->nchild[i]);
			if (rc)
				return rc;
		}
		const st_field_info *fi = st_segment_field(x->segs[si].seg, s->keys[i].fs->name);
		if (fi && (fi->flags & ST_FI_COLUMN))
			s->fi[i] = fi;
		if (s->fi[i] && s->keys[i].is_keyword && fi->num_terms <= ORD_CACHE_MAX) {
			s->nordc[i] = fi->num_terms;
			s->ordc[i] = cm_calloc(CM_MEM_SEARCH, fi->num_terms ? fi->num_terms : 1,
			                       sizeof(sr_ordterm));
		}
	}
	return CM_OK;
}

static int64_t
round_half_up(double v)
{
	return (int64_t)floor(v + 0.5);
}

/* Picks the multi-value mode's value (ES MultiValueMode). */
static int64_t
pick(const sr_sort_field *k, const int64_t *v, int n)
{
	sr_sort_mode m = k->mode;
	if (m == SR_SORT_MODE_DEFAULT)
		m = k->desc ? SR_SORT_MODE_MAX : SR_SORT_MODE_MIN;
	if (m == SR_SORT_MODE_MIN || k->is_keyword)
		return m == SR_SORT_MODE_MAX ? v[n - 1] : v[0];
	if (m == SR_SORT_MODE_MAX)
		return v[n - 1];
	if (k->is_double) {
		double sum = 0;
		for (int i = 0; i < n; i++)
			sum += st_sortable_to_double(v[i]);
		if (m == SR_SORT_MODE_SUM)
			return st_double_to_sortable(sum);
		if (m == SR_SORT_MODE_AVG)
			return st_double_to_sortable(sum / n);
		double med = n % 2 ? st_sortable_to_double(v[n / 2])
		                   : (st_sortable_to_double(v[n / 2 - 1]) + st_sortable_to_double(v[n / 2])) / 2;
		return st_double_to_sortable(med);
	}
	int64_t sum = 0;
	for (int i = 0; i < n; i++)
		sum += v[i];
	if (m == SR_SORT_MODE_SUM)
		return sum;
	if (m == SR_SORT_MODE_AVG)
		return n > 1 ? round_half_up((double)sum / n) : sum;
	return n % 2 ? v[n / 2] : round_half_up(((double)v[n / 2 - 1] + (double)v[n / 2]) / 2);
}

static int
dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The distance of a doc's points from the key's origin, by its mode (ES's
 * default: the nearest ascending, the farthest descending). */
static double
geo_pick(const sr_sort_field *k, const int64_t *v, int n)
{
	double d[64], sum = 0;
	int m = n < 64 ? n : 64;
	for (int i = 0; i < m; i++) {
		double lat, lon;
		st_geo_decode(v[i], &lat, &lon);
		d[i] = st_geo_distance(k->geo_lat, k->geo_lon, lat, lon) / k->geo_unit;
		sum += d[i];
	}
	sr_sort_mode mode = k->mode;
	if (mode == SR_SORT_MODE_DEFAULT)
		mode = k->desc ? SR_SORT_MODE_MAX : SR_SORT_MODE_MIN;
	if (mode == SR_SORT_MODE_AVG)
		return sum / m;
	qsort(d, (size_t)m, sizeof(double), dbl_cmp);
	if (mode == SR_SORT_MODE_MEDIAN)
		return m % 2 ? d[m / 2] : (d[m / 2 - 1] + d[m / 2]) / 2;
	return mode == SR_SORT_MODE_MAX ? d[m - 1] : d[0];
}

#define NESTED_SORT_MAX 1024 /* values read per root doc for a nested sort key */

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The values of root doc `doc`'s nested docs for key i, ascending. */
static int
nested_values(sr_sorter *s, sr_exec *x, size_t si, size_t i, uint32_t doc, int64_t *out)
{
	const uint64_t *nested = st_segment_nested(x->segs[si].seg);
	uint32_t start = doc;
	while (nested && start > 0 && st_bit_get(nested, start - 1))
		start--;
	int n = 0;
	for (uint32_t c = start; c < doc && n < NESTED_SORT_MAX; c++) {
		if (!st_bit_get(s->nchild[i], c))
			continue;
		const int64_t *cv;
		int k = st_col_values_sparse(x->segs[si].txn, s->fi[i], &s->cb[i], c, &cv);
		if (k < 0)
			return k;
		for (int j = 0; j < k && n < NESTED_SORT_MAX; j++)
			out[n++] = cv[j];
	}
	qsort(out, (size_t)n, sizeof(int64_t), cmp_i64);
	return n;
}

cm_err
sr_sorter_key_value(sr_sorter *s, sr_exec *x, size_t si, size_t i, uint32_t doc, uint32_t gdoc,
                    float score, sr_sortval *v)
{
	const sr_sort_field *k = &s->keys[i];
	memset(v, 0, sizeof *v);
	if (k->kind == SR_SORT_SCORE) {
		v->f = score;
		return CM_OK;
	}
	if (k->kind == SR_SORT_DOC) {
		v->l = gdoc;
		return CM_OK;
	}
	if (k->kind == SR_SORT_SHARD_DOC) {
		v->l = (int64_t)((uint64_t)s->shard << 32 | gdoc);
		return CM_OK;
	}
	if (k->is_id)
		return id_value(s, x, si, doc, v);
	if (!s->fi[i] || (k->nested_path && !s->nchild[i])) {
		v->missing = true;
		return CM_OK;
	}
	const int64_t *cv;
	int n;
	int64_t nv[NESTED_SORT_MAX];
	if (k->nested_path) {
		n = nested_values(s, x, si, i, doc, nv);
		cv = nv;
	} else {
		n = st_col_values_sparse(x->segs[si].txn, s->fi[i], &s->cb[i], doc, &cv);
	}
	if (n < 0)
		return cm_error_set(x->err, CM_ECORRUPT, "cannot read column [%s]", s->fi[i]->name);
	if (n == 0) {
		v->missing = true;
		return CM_OK;
	}
	if (k->geo) {
		v->l = st_double_to_sortable(geo_pick(k, cv, n));
		return CM_OK;
	}
	v->l = pick(k, cv, n);
	if (k->is_keyword) {
		sr_ordterm *c = (uint64_t)v->l < s->nordc[i] ? &s->ordc[i][v->l] : NULL;
		if (c && c->p) {
			v->s = c->p;
			v->n = c->n;
			return CM_OK;
		}
		cm_err rc = st_ord_term(x->segs[si].txn, s->fi[i], (uint64_t)v->l, &v->s, &v->n);
		if (rc)
			return cm_error_set(x->err, rc, "cannot read term of [%s]", s->fi[i]->name);
		if (c) {
			c->p = v->s ? v->s : (const uint8_t *)"";
			c->n = v->n;
		}
	}
	return CM_OK;
}

cm_err
sr_sorter_values(sr_sorter *s, sr_exec *x, size_t si, uint32_t doc, uint32_t gdoc, float score,
                 sr_sortval *vals)
{
	for (size_t i = 0; i < s->nkeys; i++) {
		cm_err rc = sr_sorter_key_value(s, x, si, i, doc, gdoc, score, &vals[i]);
		if (rc)
			return rc;
	}
	return CM_OK;
}

int
sr_sorter_cmp_key(const sr_sorter *s, size_t i, const sr_sortval *x, const sr_sortval *y)
{
	const sr_sort_field *k = &s->keys[i];
	int c = 0;
	if (k->kind == SR_SORT_FIELD && (x->missing || y->missing)) {
		if (x->missing != y->missing)
			return (x->missing ? -1 : 1) * (k->missing_first ? 1 : -1);
		return 0;
	}
	if (k->kind == SR_SORT_SCORE) {
		c = x->f < y->f ? -1 : x->f > y->f;
	} else if (k->is_keyword) {
		size_t n = x->n < y->n ? x->n : y->n;
		c = memcmp(x->s, y->s, n);
		if (!c)
			c = (x->n > y->n) - (x->n < y->n);
		c = c < 0 ? -1 : c > 0;
	} else {
		c = x->l < y->l ? -1 : x->l > y->l;
	}
	return k->desc ? -c : c;
}

int
sr_sorter_cmp(const sr_sorter *s, const sr_sortval *a, const sr_sortval *b)
{
	for (size_t i = 0; i < s->nkeys; i++) {
		int c = sr_sorter_cmp_key(s, i, &a[i], &b[i]);
		if (c)
			return c;
	}
	return 0;
}

void
sr_sorter_export(const sr_sorter *s, const sr_sortval *v, sr_sort_value *out)
{
	for (size_t i = 0; i < s->nkeys; i++) {
		const sr_sort_field *k = &s->keys[i];
		memset(&out[i], 0, sizeof out[i]);
		if (k->kind == SR_SORT_SCORE) {
			out[i].type = SR_SV_DOUBLE;
			out[i].d = v[i].f;
		} else if (k->kind == SR_SORT_DOC || k->kind == SR_SORT_SHARD_DOC) {
			out[i].type = SR_SV_LONG;
			out[i].l = v[i].l;
		} else if (v[i].missing) {
			out[i].type = SR_SV_NULL;
		} else if (k->ftype == ST_FT_IP) {
			char ip[ST_IP_STRLEN];
			if (v[i].n == ST_IP_LEN)
				st_ip_format(v[i].s, ip, sizeof(ip));
			else
				snprintf(ip, sizeof(ip), "::");
			out[i].type = SR_SV_IP;
			out[i].s = cm_strdup(CM_MEM_SEARCH, ip);
		} else if (k->ftype == ST_FT_UNSIGNED_LONG) {
			out[i].type = SR_SV_ULONG;
			out[i].l = v[i].l;
		} else if (k->ftype == ST_FT_SCALED_FLOAT) {
			out[i].type = SR_SV_DOUBLE;
			out[i].d = (double)v[i].l / k->scale;
		} else if (k->is_keyword) {
			out[i].type = SR_SV_STRING;
			out[i].s = cm_strndup(CM_MEM_SEARCH, (const char *)v[i].s, v[i].n);
		} else if (k->is_double) {
			out[i].type = SR_SV_DOUBLE;
			out[i].d = st_sortable_to_double(v[i].l);
		} else {
			out[i].type = SR_SV_LONG;
			out[i].l = v[i].l;
			out[i].d = k->ftype == ST_FT_DATE         ? SR_SV_DATE_MILLIS
			           : k->ftype == ST_FT_DATE_NANOS ? SR_SV_DATE_NANOS
			                                          : 0;
		}
	}
}
