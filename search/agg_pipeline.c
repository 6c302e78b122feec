/* Pipeline aggregations. They run once, at the coordinator, after every
 * shard state has merged and the response has rendered: the rendered
 * "aggregations" object is read back into a small tree that keeps each
 * number's text (what the collectors printed prints again byte for byte),
 * the pipelines add values to buckets or drop and reorder them, and the
 * tree prints again. Requests without pipelines never come here.
 *
 * Parent pipelines (derivative, cumulative_sum, moving_fn, serial_diff,
 * bucket_script, bucket_selector, bucket_sort) work on the bucket list of
 * the aggregation they are declared in; sibling pipelines (*_bucket) read
 * the buckets of a sibling and add one value next to it. */
#define _GNU_SOURCE /* qsort_r */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../script/ps.h"
#include "agg_int.h"

/* ================================================================ spec */

typedef enum {
	PK_DERIVATIVE,
	PK_CUMULATIVE_SUM,
	PK_MOVING_FN,
	PK_SERIAL_DIFF,
	PK_BUCKET_SCRIPT,
	PK_BUCKET_SELECTOR,
	PK_BUCKET_SORT,
	PK_AVG_BUCKET,
	PK_MAX_BUCKET,
	PK_MIN_BUCKET,
	PK_SUM_BUCKET,
	PK_STATS_BUCKET,
	PK_EXTENDED_STATS_BUCKET,
	PK_PERCENTILES_BUCKET,
} pipe_kind;

static const char *const pipe_names[] = {
    "derivative",
    "cumulative_sum",
    "moving_fn",
    "serial_diff",
    "bucket_script",
    "bucket_selector",
    "bucket_sort",
    "avg_bucket",
    "max_bucket",
    "min_bucket",
    "sum_bucket",
    "stats_bucket",
    "extended_stats_bucket",
    "percentiles_bucket",
};

/* MovingFunctions.<fn>(values, args...): args are numbers or nested calls */
typedef enum {
	MF_MAX,
	MF_MIN,
	MF_SUM,
	MF_UNWEIGHTED_AVG,
	MF_LINEAR_WEIGHTED_AVG,
	MF_EWMA,
	MF_HOLT,
	MF_HOLT_WINTERS,
	MF_STD_DEV,
} mf_fn;

static const struct {
	const char *name;
	int nargs;
} mf_table[] = {
    {"max", 0},  {"min", 0},  {"sum", 0},         {"unweightedAvg", 0}, {"linearWeightedAvg", 0},
    {"ewma", 1}, {"holt", 2}, {"holtWinters", 5}, {"stdDev", 1},
};

#define MF_MAX_ARGS 5
typedef struct mf_call {
	mf_fn fn;
	double arg[MF_MAX_ARGS];
	struct mf_call *sub[MF_MAX_ARGS]; /* a nested call in place of arg[i] */
} mf_call;

struct agg_pipe {
	char *name;
	pipe_kind kind;
	char *meta;
	char **vars, **paths; /* buckets_path: vars NULL for the single-path form */
	size_t npaths;
	bool insert_zeros; /* gap_policy */
	char *format;
	double unit_ms; /* derivative: 0 = none */
	int64_t window, shift, lag;
	mf_call *mf;
	ps_script *script;
	cJSON *params; /* script params (owned copy) */
	char **sort_paths;
	bool *sort_desc;
	size_t nsort;
	int64_t from, size; /* bucket_sort: size -1 = all */
	double *percents;
	size_t npercents;
	bool keyed;
	double sigma;
};

static bool
pipe_is_parent(pipe_kind k)
{
	return k <= PK_BUCKET_SORT;
}

static bool
pipe_is_sequential(pipe_kind k)
{
	return k <= PK_SERIAL_DIFF;
}

bool
agg_pipe_is_type(const char *type)
{
	for (size_t i = 0; i < sizeof pipe_names / sizeof pipe_names[0]; i++)
		if (!strcmp(pipe_names[i], type))
			return true;
	return false;
}

const char *
agg_pipe_name(const agg_pipe *p)
{
	return p->name;
}

static void
mf_free(mf_call *c)
{
	if (!c)
		return;
	for (int i = 0; i < MF_MAX_ARGS; i++)
		mf_free(c->sub[i]);
	cm_free(AGG_MEM, c);
}

void
agg_pipe_free(agg_pipe *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->npaths; i++) {
		cm_free(AGG_MEM, p->paths[i]);
		if (p->vars)
			cm_free(AGG_MEM, p->vars[i]);
	}
	cm_free(AGG_MEM, p->paths);
	cm_free(AGG_MEM, p->vars);
	for (size_t i = 0; i < p->nsort; i++)
		cm_free(AGG_MEM, p->sort_paths[i]);
	cm_free(AGG_MEM, p->sort_paths);
	cm_free(AGG_MEM, p->sort_desc);
	cm_free(AGG_MEM, p->percents);
	mf_free(p->mf);
	if (p->script)
		ps_free(p->script);
	cJSON_Delete(p->params);
	cm_free(AGG_MEM, p->format);
	cm_free(AGG_MEM, p->meta);
	cm_free(AGG_MEM, p->name);
	cm_free(AGG_MEM, p);
}

/* ---- moving_fn scripts ---- */

typedef struct mf_lex {
	const char *s;
	size_t i;
	const cJSON *params;
} mf_lex;

static void
mf_ws(mf_lex *L)
{
	while (L->s[L->i] == ' ' || L->s[L->i] == '\t' || L->s[L->i] == '\n' || L->s[L->i] == '\r')
		L->i++;
}

static bool
mf_eat(mf_lex *L, const char *tok)
{
	mf_ws(L);
	size_t n = strlen(tok);
	if (strncmp(L->s + L->i, tok, n))
		return false;
	L->i += n;
	return true;
}

static size_t
mf_ident(mf_lex *L)
{
	mf_ws(L);
	size_t n = 0;
	while ((L->s[L->i + n] >= 'a' && L->s[L->i + n] <= 'z') ||
	       (L->s[L->i + n] >= 'A' && L->s[L->i + n] <= 'Z') ||
	       (L->s[L->i + n] >= '0' && L->s[L->i + n] <= '9') || L->s[L->i + n] == '_')
		n++;
	return n;
}

static mf_call *mf_parse_call(mf_lex *L, int depth);

static bool
mf_parse_arg(mf_lex *L, mf_call *c, int i, int depth)
{
	mf_ws(L);
	const char *p = L->s + L->i;
	if (!strncmp(p, "MovingFunctions.", 16)) {
		c->sub[i] = mf_parse_call(L, depth + 1);
		return c->sub[i] != NULL;
	}
	if (mf_eat(L, "true")) {
		c->arg[i] = 1;
		return true;
	}
	if (mf_eat(L, "false")) {
		c->arg[i] = 0;
		return true;
	}
	if (mf_eat(L, "params.")) {
		size_t n = mf_ident(L);
		char key[128];
		if (!n || n >= sizeof key)
			return false;
		memcpy(key, L->s + L->i, n);
		key[n] = 0;
		L->i += n;
		const cJSON *v =
		    L->params ? cJSON_GetObjectItemCaseSensitive(L->params, key) : NULL;
		if (cJSON_IsNumber(v))
			c->arg[i] = v->valuedouble;
		else if (cJSON_IsBool(v))
			c->arg[i] = cJSON_IsTrue(v);
		else
			return false;
		return true;
	}
	char *end;
	double d = strtod(p, &end);
	if (end == p || !isfinite(d))
		return false;
	L->i += (size_t)(end - p);
	c->arg[i] = d;
	return true;
}

static mf_call *
mf_parse_call(mf_lex *L, int depth)
{
	if (depth > 8 || !mf_eat(L, "MovingFunctions."))
		return NULL;
	size_t n = mf_ident(L);
	int fn = -1;
	for (size_t i = 0; i < sizeof mf_table / sizeof mf_table[0]; i++)
		if (strlen(mf_table[i].name) == n && !strncmp(L->s + L->i, mf_table[i].name, n))
			fn = (int)i;
	if (fn < 0)
		return NULL;
	L->i += n;
	if (!mf_eat(L, "(") || !mf_eat(L, "values"))
		return NULL;
	mf_call *c = cm_calloc(AGG_MEM, 1, sizeof *c);
	c->fn = (mf_fn)fn;
	for (int i = 0; i < mf_table[fn].nargs; i++)
		if (!mf_eat(L, ",") || !mf_parse_arg(L, c, i, depth)) {
			mf_free(c);
			return NULL;
		}
	if (!mf_eat(L, ")")) {
		mf_free(c);
		return NULL;
	}
	return c;
}

/* "MovingFunctions.fn(values, ...)", optionally as "return ...;" */
static mf_call *
mf_parse(const char *src, const cJSON *params)
{
	mf_lex L = {src, 0, params};
	mf_ws(&L);
	if (!strncmp(src + L.i, "return", 6) && (src[L.i + 6] == ' ' || src[L.i + 6] == '\t'))
		L.i += 6;
	mf_call *c = mf_parse_call(&L, 0);
	if (!c)
		return NULL;
	mf_eat(&L, ";");
	mf_ws(&L);
	if (L.s[L.i]) {
		mf_free(c);
		return NULL;
	}
	return c;
}

/* ---- MovingFunctions, as in ES (NaN values are skipped) ---- */

double
agg_mf_max(const double *v, size_t n)
{
	double m = NAN;
	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i]) && (isnan(m) || v[i] > m))
			m = v[i];
	return m;
}

double
agg_mf_min(const double *v, size_t n)
{
	double m = NAN;
	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i]) && (isnan(m) || v[i] < m))
			m = v[i];
	return m;
}

double
agg_mf_sum(const double *v, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i]))
			s += v[i];
	return s;
}

double
agg_mf_unweighted_avg(const double *v, size_t n)
{
	double s = 0;
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i])) {
			s += v[i];
			c++;
		}
	return c ? s / (double)c : NAN;
}

/* ES starts the total weight at 1: kept for identical answers. */
double
agg_mf_linear_weighted_avg(const double *v, size_t n)
{
	double avg = 0;
	long total = 1, cur = 1;
	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i])) {
			avg += v[i] * (double)cur;
			total += cur;
			cur++;
		}
	return total == 1 ? NAN : avg / (double)total;
}

double
agg_mf_ewma(const double *v, size_t n, double alpha)
{
	double avg = NAN;
	bool first = true;
	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i])) {
			if (first) {
				avg = v[i];
				first = false;
			} else
				avg = v[i] * alpha + avg * (1 - alpha);
		}
	return avg;
}

double
agg_mf_holt(const double *v, size_t n, double alpha, double beta)
{
	double s = 0, last_s = 0, b = 0, last_b = 0;
	size_t counter = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(v[i]))
			continue;
		if (counter == 0) {
			s = v[i];
			b = 0;
		} else {
			s = alpha * v[i] + (1.0 - alpha) * (last_s + last_b);
			b = beta * (s - last_s) + (1 - beta) * last_b;
		}
		counter++;
		last_s = s;
		last_b = b;
	}
	return counter ? s : NAN;
}

/* false when there are fewer than two periods of values (ES refuses). */
bool
agg_mf_holt_winters(const double *values, size_t n, double alpha, double beta, double gamma,
                    int64_t period, bool multiplicative, double *out)
{
	const double padding = multiplicative ? 0.0000000001 : 0;
	if (n == 0) { /* as every MovingFunctions method: NaN for no values */
		*out = NAN;
		return true;
	}
	if (period < 1 || (double)n < 2.0 * (double)period)
		return false;
	double *vs = cm_calloc(AGG_MEM, n, sizeof *vs);
	double *seasonal = cm_calloc(AGG_MEM, n, sizeof *seasonal);
	size_t counter = 0;
	for (size_t i = 0; i < n; i++)
		if (!isnan(values[i]))
			vs[counter++] = values[i] + padding;
	double s = 0, b = 0, last_s, last_b = 0;
	if (counter == 0) {
		cm_free(AGG_MEM, vs);
		cm_free(AGG_MEM, seasonal);
		*out = NAN;
		return true;
	}
	size_t P = (size_t)period;
	for (size_t i = 0; i < P; i++) {
		s += vs[i];
		b += (vs[i + P] - vs[i]) / (double)period;
	}
	s /= (double)period;
	b /= (double)period;
	last_s = s;
	if (s != 0)
		for (size_t i = 0; i < P; i++)
			seasonal[i] = vs[i] / s;
	for (size_t i = P; i < n; i++) {
		if (multiplicative)
			s = alpha * (vs[i] / seasonal[i - P]) + (1.0 - alpha) * (last_s + last_b);
		else
			s = alpha * (vs[i] - seasonal[i - P]) + (1.0 - alpha) * (last_s + last_b);
		b = beta * (s - last_s) + (1 - beta) * last_b;
		if (multiplicative)
			seasonal[i] =
			    gamma * (vs[i] / (last_s + last_b)) + (1 - gamma) * seasonal[i - P];
		else
			seasonal[i] =
			    gamma * (vs[i] - (last_s - last_b)) + (1 - gamma) * seasonal[i - P];
		last_s = s;
		last_b = b;
	}
	size_t idx = n - P;
	*out = multiplicative ? (s + b) * seasonal[idx] : s + b + seasonal[idx];
	cm_free(AGG_MEM, vs);
	cm_free(AGG_MEM, seasonal);
	return true;
}

double
agg_mf_std_dev(const double *v, size_t n, double avg)
{
	if (!n)
		return NAN;
	double s = 0;
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i])) {
			s += (v[i] - avg) * (v[i] - avg);
			c++;
		}
	return c ? sqrt(s / (double)c) : NAN;
}

static cm_err
mf_eval(const mf_call *c, const double *v, size_t n, double *out, cm_error *err)
{
	double a[MF_MAX_ARGS];
	for (int i = 0; i < mf_table[c->fn].nargs; i++) {
		a[i] = c->arg[i];
		if (c->sub[i]) {
			cm_err rc = mf_eval(c->sub[i], v, n, &a[i], err);
			if (rc)
				return rc;
		}
	}
	switch (c->fn) {
	case MF_MAX:
		*out = agg_mf_max(v, n);
		break;
	case MF_MIN:
		*out = agg_mf_min(v, n);
		break;
	case MF_SUM:
		*out = agg_mf_sum(v, n);
		break;
	case MF_UNWEIGHTED_AVG:
		*out = agg_mf_unweighted_avg(v, n);
		break;
	case MF_LINEAR_WEIGHTED_AVG:
		*out = agg_mf_linear_weighted_avg(v, n);
		break;
	case MF_EWMA:
		*out = agg_mf_ewma(v, n, a[0]);
		break;
	case MF_HOLT:
		*out = agg_mf_holt(v, n, a[0], a[1]);
		break;
	case MF_STD_DEV:
		*out = agg_mf_std_dev(v, n, a[0]);
		break;
	case MF_HOLT_WINTERS:
		if (!(a[3] >= 1 && a[3] <= 1e9))
			return cm_error_set(err, CM_EINVAL,
			                    "Holt-Winters [period] must be a positive integer, got [%g]",
			                    a[3]);
		if (!agg_mf_holt_winters(v, n, a[0], a[1], a[2], (int64_t)a[3], a[4] != 0, out))
			return cm_error_set(
			    err, CM_EINVAL,
			    "Holt-Winters aggregation requires at least (2 * period == 2 * "
			    "%lld == %lld) data-points to function.  Only [%zu] were "
			    "provided.",
			    (long long)a[3], (long long)(2 * (int64_t)a[3]), n);
		break;
	}
	return CM_OK;
}

/* ---- DecimalFormat patterns for "format": [#,0]*(.[0#]*)? ---- */

static bool
fmt_ok(const char *f)
{
	bool dot = false, digit = false;
	for (const char *p = f; *p; p++) {
		if (*p == '.') {
			if (dot)
				return false;
			dot = true;
		} else if (*p == '#' || *p == '0')
			digit = true;
		else if (*p != ',' || dot)
			return false;
	}
	return digit;
}

/* v formatted like java.text.DecimalFormat (HALF_EVEN) with pattern f. */
static void
fmt_decimal(const char *f, double v, char *out, size_t cap)
{
	const char *dot = strchr(f, '.');
	size_t ilen = dot ? (size_t)(dot - f) : strlen(f);
	int min_int = 0, min_frac = 0, max_frac = 0, group = 0;
	const char *lastc = NULL;
	for (size_t i = 0; i < ilen; i++) {
		if (f[i] == '0')
			min_int++;
		if (f[i] == ',')
			lastc = f + i;
	}
	if (lastc)
		group = (int)(f + ilen - lastc - 1);
	if (dot)
		for (const char *p = dot + 1; *p; p++) {
			if (*p == '0')
				min_frac++;
			max_frac++;
		}
	if (max_frac > 30)
		max_frac = 30;
	if (min_frac > max_frac)
		min_frac = max_frac;
	char num[400];
	snprintf(num, sizeof num, "%.*f", max_frac, fabs(v));
	char *ip = num, *fp = strchr(num, '.');
	if (fp)
		*fp++ = 0;
	size_t flen = fp ? strlen(fp) : 0;
	while ((int)flen > min_frac && fp[flen - 1] == '0')
		flen--;
	if (min_int == 0 && !strcmp(ip, "0") && flen)
		ip++; /* "#.##" prints 0.5 as ".5" */
	size_t il = strlen(ip);
	char o[512];
	size_t n = 0;
	if (v < 0)
		o[n++] = '-';
	for (int i = (int)il; i < min_int && n < 100; i++)
		o[n++] = '0';
	for (size_t i = 0; i < il && n < 480; i++) {
		o[n++] = ip[i];
		size_t left = il - i - 1;
		if (group > 0 && left > 0 && left % (size_t)group == 0)
			o[n++] = ',';
	}
	if (flen) {
		o[n++] = '.';
		for (size_t i = 0; i < flen && n < 510; i++)
			o[n++] = fp[i];
	}
	if (n == 0 || (n == 1 && v < 0))
		o[n++] = '0';
	o[n] = 0;
	snprintf(out, cap, "%s", o);
}

bool
agg_decimal_format(const char *pattern, double v, char *out, size_t cap)
{
	char pat[256], pre[128], num[128], suf[128];
	snprintf(pat, sizeof pat, "%s", pattern);
	char *semi = strchr(pat, ';'); /* the negative subpattern: '-' and the positive one */
	if (semi)
		*semi = 0;
	size_t np = 0, nn = 0, ns = 0;
	bool quoted = false, in_num = false, after = false, pct = false;
	for (const char *c = pat; *c; c++) {
		if (*c == '\'') {
			if (c[1] == '\'') { /* '' is a quote */
				c++;
			} else {
				quoted = !quoted;
				continue;
			}
		} else if (!quoted && !after && strchr("#0,.", *c)) {
			in_num = true;
			if (nn + 1 < sizeof num)
				num[nn++] = *c;
			continue;
		}
		if (in_num)
			after = true;
		if (!quoted && *c == '%')
			pct = true;
		if (after) {
			if (ns + 1 < sizeof suf)
				suf[ns++] = *c;
		} else if (np + 1 < sizeof pre)
			pre[np++] = *c;
	}
	pre[np] = num[nn] = suf[ns] = 0;
	if (!nn || !fmt_ok(num) || !isfinite(v))
		return false;
	char digits[512];
	fmt_decimal(num, fabs(pct ? v * 100 : v), digits, sizeof digits);
	snprintf(out, cap, "%s%s%s%s", v < 0 && strcmp(digits, "0") ? "-" : "", pre, digits, suf);
	return true;
}

/* ---- parsing ---- */

static cm_err
pipe_parse_path(agg_pipe *p, const char *type, const cJSON *v, cm_error *err)
{
	if (cJSON_IsString(v)) {
		p->paths = cm_calloc(AGG_MEM, 1, sizeof *p->paths);
		p->paths[0] = cm_strdup(AGG_MEM, v->valuestring);
		p->npaths = 1;
		return CM_OK;
	}
	if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 &&
	    cJSON_IsString(cJSON_GetArrayItem(v, 0))) {
		p->paths = cm_calloc(AGG_MEM, 1, sizeof *p->paths);
		p->paths[0] = cm_strdup(AGG_MEM, cJSON_GetArrayItem(v, 0)->valuestring);
		p->npaths = 1;
		return CM_OK;
	}
	if (cJSON_IsObject(v) && (p->kind == PK_BUCKET_SCRIPT || p->kind == PK_BUCKET_SELECTOR)) {
		size_t n = (size_t)cJSON_GetArraySize(v);
		if (n > 64)
			return cm_error_set(err, CM_EINVAL, "[%s] too many buckets_path entries",
			                    type);
		p->paths = cm_calloc(AGG_MEM, n ? n : 1, sizeof *p->paths);
		p->vars = cm_calloc(AGG_MEM, n ? n : 1, sizeof *p->vars);
		for (const cJSON *c = v->child; c; c = c->next) {
			if (!cJSON_IsString(c))
				return cm_error_set(err, CM_EPARSE,
				                    "[%s] failed to parse field [buckets_path]",
				                    type);
			p->vars[p->npaths] = cm_strdup(AGG_MEM, c->string);
			p->paths[p->npaths++] = cm_strdup(AGG_MEM, c->valuestring);
		}
		return CM_OK;
	}
	return cm_error_set(err, CM_EPARSE, "[%s] failed to parse field [buckets_path]", type);
}

static cm_err
pipe_parse_sort(agg_pipe *p, const cJSON *v, cm_error *err)
{
	const cJSON *one = v;
	size_t n = cJSON_IsArray(v) ? (size_t)cJSON_GetArraySize(v) : 1;
	if (n > 64)
		return cm_error_set(err, CM_EINVAL, "[bucket_sort] too many sort fields");
	p->sort_paths = cm_calloc(AGG_MEM, n ? n : 1, sizeof *p->sort_paths);
	p->sort_desc = cm_calloc(AGG_MEM, n ? n : 1, sizeof *p->sort_desc);
	for (size_t i = 0; i < n; i++) {
		const cJSON *s = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, (int)i) : one;
		const char *field = NULL;
		bool desc = false;
		if (cJSON_IsString(s))
			field = s->valuestring;
		else if (cJSON_IsObject(s) && s->child && !s->child->next) {
			field = s->child->string;
			const cJSON *o = s->child;
			if (cJSON_IsObject(o))
				o = cJSON_GetObjectItemCaseSensitive(o, "order");
			if (o) {
				if (!cJSON_IsString(o) || (strcmp(o->valuestring, "asc") &&
				                           strcmp(o->valuestring, "desc")))
					return cm_error_set(
					    err, CM_EINVAL,
					    "No sort order for [%s]: must be [asc] or [desc]",
					    field);
				desc = !strcmp(o->valuestring, "desc");
			}
		} else
			return cm_error_set(err, CM_EPARSE,
			                    "[bucket_sort] failed to parse field [sort]");
		p->sort_paths[p->nsort] = cm_strdup(AGG_MEM, field);
		p->sort_desc[p->nsort++] = desc;
	}
	return CM_OK;
}

/* derivative "unit": a date_histogram unit or a time value, in ms */
static bool
parse_unit(const char *s, double *ms)
{
	static const struct {
		const char *name;
		double ms;
	} units[] = {
	    {"year", 31556952000.0}, {"1y", 31556952000.0},   {"quarter", 7889238000.0},
	    {"1q", 7889238000.0},    {"month", 2629746000.0}, {"1M", 2629746000.0},
	    {"week", 604800000.0},   {"1w", 604800000.0},     {"day", 86400000.0},
	    {"1d", 86400000.0},      {"hour", 3600000.0},     {"1h", 3600000.0},
	    {"minute", 60000.0},     {"1m", 60000.0},         {"second", 1000.0},
	    {"1s", 1000.0},
	};
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
		if (!strcmp(units[i].name, s)) {
			*ms = units[i].ms;
			return true;
		}
	char *end;
	double d = strtod(s, &end);
	if (end == s || d < 0)
		return false;
	double mul = !strcmp(end, "ms")       ? 1
	             : !strcmp(end, "s")      ? 1000
	             : !strcmp(end, "m")      ? 60000
	             : !strcmp(end, "h")      ? 3600000
	             : !strcmp(end, "d")      ? 86400000
	             : !strcmp(end, "micros") ? 0.001
	             : !strcmp(end, "nanos")  ? 0.000001
	                                      : -1;
	if (mul < 0)
		return false;
	*ms = d * mul;
	return true;
}

cm_err
agg_pipe_parse(const char *name, const char *type, const cJSON *body, const cJSON *meta,
               agg_pipe **out, cm_error *err)
{
	agg_pipe *p = cm_calloc(AGG_MEM, 1, sizeof *p);
	p->name = cm_strdup(AGG_MEM, name);
	for (size_t i = 0; i < sizeof pipe_names / sizeof pipe_names[0]; i++)
		if (!strcmp(pipe_names[i], type))
			p->kind = (pipe_kind)i;
	if (meta) {
		char *m = cJSON_PrintUnformatted(meta);
		p->meta = cm_strdup(AGG_MEM, m ? m : "{}");
		cJSON_free(m);
	}
	p->lag = 1;
	p->size = -1;
	p->keyed = true;
	p->sigma = 2;
	p->window = -1;
	cm_err rc = CM_OK;
	const cJSON *script = NULL, *bp = NULL;
	for (const cJSON *c = body->child; c; c = c->next) {
		const char *k = c->string;
		if (!strcmp(k, "buckets_path")) {
			bp = c;
			if ((rc = pipe_parse_path(p, type, c, err)))
				goto fail;
		} else if (!strcmp(k, "gap_policy") && p->kind != PK_CUMULATIVE_SUM) {
			if (!cJSON_IsString(c) || (strcmp(c->valuestring, "skip") &&
			                           strcmp(c->valuestring, "insert_zeros"))) {
				rc = cm_error_set(
				    err, CM_EPARSE,
				    "Invalid gap policy: [%s], accepted values: [insert_zeros, "
				    "skip]",
				    cJSON_IsString(c) ? c->valuestring : "?");
				goto fail;
			}
			p->insert_zeros = !strcmp(c->valuestring, "insert_zeros");
		} else if (!strcmp(k, "format") && p->kind != PK_BUCKET_SELECTOR &&
		           p->kind != PK_BUCKET_SORT) {
			if (!cJSON_IsString(c)) {
				rc = cm_error_set(err, CM_EPARSE, "[%s] format must be a string",
				                  type);
				goto fail;
			}
			if (!fmt_ok(c->valuestring)) {
				rc = cm_error_set(
				    err, CM_EINVAL,
				    "format [%s] of [%s] is not supported by Shoal: only "
				    "DecimalFormat digit patterns such as \"#,##0.00\"",
				    c->valuestring, name);
				goto fail;
			}
			p->format = cm_strdup(AGG_MEM, c->valuestring);
		} else if (!strcmp(k, "unit") && p->kind == PK_DERIVATIVE) {
			if (!cJSON_IsString(c) || !parse_unit(c->valuestring, &p->unit_ms) ||
			    p->unit_ms <= 0) {
				rc = cm_error_set(
				    err, CM_EPARSE,
				    "failed to parse setting [DerivativePipelineAggregator.unit]"
				    " with value [%s] as a time value",
				    cJSON_IsString(c) ? c->valuestring : "?");
				goto fail;
			}
		} else if (!strcmp(k, "window") && p->kind == PK_MOVING_FN) {
			if ((rc = agg_parse_int(c, type, k, INT32_MIN, INT32_MAX, &p->window, err)))
				goto fail;
			if (p->window <= 0) {
				rc = cm_error_set(err, CM_EINVAL,
				                  "[window] must be a positive, non-zero integer.");
				goto fail;
			}
		} else if (!strcmp(k, "shift") && p->kind == PK_MOVING_FN) {
			if ((rc = agg_parse_int(c, type, k, -1000000, 1000000, &p->shift, err)))
				goto fail;
		} else if (!strcmp(k, "lag") && p->kind == PK_SERIAL_DIFF) {
			if ((rc = agg_parse_int(c, type, k, INT32_MIN, INT32_MAX, &p->lag, err)))
				goto fail;
			if (p->lag <= 0) {
				rc = cm_error_set(err, CM_EINVAL,
				                  "[lag] must be a positive integer: [%s]", name);
				goto fail;
			}
		} else if (!strcmp(k, "script") &&
		           (p->kind == PK_MOVING_FN || p->kind == PK_BUCKET_SCRIPT ||
		            p->kind == PK_BUCKET_SELECTOR)) {
			script = c;
		} else if (!strcmp(k, "sort") && p->kind == PK_BUCKET_SORT) {
			if ((rc = pipe_parse_sort(p, c, err)))
				goto fail;
		} else if (!strcmp(k, "from") && p->kind == PK_BUCKET_SORT) {
			if ((rc = agg_parse_int(c, type, k, INT32_MIN, INT32_MAX, &p->from, err)))
				goto fail;
			if (p->from < 0) {
				rc = cm_error_set(err, CM_EINVAL,
				                  "[from] must be a non-negative integer: [%lld]",
				                  (long long)p->from);
				goto fail;
			}
		} else if (!strcmp(k, "size") && p->kind == PK_BUCKET_SORT) {
			if ((rc = agg_parse_int(c, type, k, INT32_MIN, INT32_MAX, &p->size, err)))
				goto fail;
			if (p->size <= 0) {
				rc = cm_error_set(err, CM_EINVAL,
				                  "[size] must be a positive integer: [%lld]",
				                  (long long)p->size);
				goto fail;
			}
		} else if (!strcmp(k, "percents") && p->kind == PK_PERCENTILES_BUCKET) {
			if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) > 1000) {
				rc = cm_error_set(err, CM_EPARSE,
				                  "[%s] failed to parse field [percents]", type);
				goto fail;
			}
			size_t n = (size_t)cJSON_GetArraySize(c);
			cm_free(AGG_MEM, p->percents);
			p->percents = cm_calloc(AGG_MEM, n ? n : 1, sizeof *p->percents);
			p->npercents = 0;
			for (const cJSON *e = c->child; e; e = e->next) {
				double d;
				if ((rc = agg_parse_num(e, type, "percents", &d, err)))
					goto fail;
				if (d < 0 || d > 100) {
					rc = cm_error_set(
					    err, CM_EINVAL,
					    "percent must be in [0,100], got [%s]: [%s]",
					    cJSON_IsString(e) ? e->valuestring : "?", name);
					goto fail;
				}
				p->percents[p->npercents++] = d;
			}
		} else if (!strcmp(k, "keyed") && p->kind == PK_PERCENTILES_BUCKET) {
			if ((rc = agg_parse_bool(c, type, k, &p->keyed, err)))
				goto fail;
		} else if (!strcmp(k, "sigma") && p->kind == PK_EXTENDED_STATS_BUCKET) {
			if ((rc = agg_parse_num(c, type, k, &p->sigma, err)))
				goto fail;
			if (p->sigma < 0) {
				char num[64]; /* as Java prints a double: -1.0 */
				agg_double_str(num, sizeof num, p->sigma);
				rc = cm_error_set(err, CM_EINVAL,
				                  "[sigma] must be greater than or equal to 0. "
				                  "Found [%s] in [%s]",
				                  num, name);
				goto fail;
			}
		} else {
			rc = cm_error_set(err, CM_EPARSE, "[%s] unknown field [%s]", type, k);
			goto fail;
		}
	}
	if (!bp && p->kind != PK_BUCKET_SORT) {
		rc = cm_error_set(
		    err, CM_EPARSE,
		    "Required parameter [buckets_path] missing for %s aggregation [%s]", type,
		    name);
		goto fail;
	}
	if (bp && p->kind == PK_BUCKET_SORT) {
		rc = cm_error_set(err, CM_EPARSE, "[%s] unknown field [buckets_path]", type);
		goto fail;
	}
	if (p->kind == PK_MOVING_FN && p->window < 0) {
		rc = cm_error_set(err, CM_EPARSE,
		                  "[window] is required for moving_fn aggregation [%s]", name);
		goto fail;
	}
	if ((p->kind == PK_MOVING_FN || p->kind == PK_BUCKET_SCRIPT ||
	     p->kind == PK_BUCKET_SELECTOR) &&
	    !script) {
		rc = cm_error_set(err, CM_EPARSE,
		                  "Required parameter [script] missing for %s "
		                  "aggregation [%s]",
		                  type, name);
		goto fail;
	}
	if (script) {
		const cJSON *src = script, *params = NULL;
		if (cJSON_IsObject(script)) {
			src = cJSON_GetObjectItemCaseSensitive(script, "source");
			if (!src)
				src = cJSON_GetObjectItemCaseSensitive(script, "inline");
			params = cJSON_GetObjectItemCaseSensitive(script, "params");
		}
		if (p->kind == PK_MOVING_FN) {
			if (!cJSON_IsString(src) || !(p->mf = mf_parse(src->valuestring, params))) {
				rc = cm_error_set_type(
				    err, CM_EINVAL, "script_exception",
				    "moving_fn script [%.200s] is not supported by Shoal: it must "
				    "be one "
				    "call of MovingFunctions (max, min, sum, unweightedAvg, "
				    "linearWeightedAvg, ewma, holt, holtWinters, stdDev) on values "
				    "with "
				    "numeric arguments",
				    cJSON_IsString(src) ? src->valuestring : "?");
				goto fail;
			}
		} else {
			const cJSON *pp = NULL;
			if ((rc = ps_from_json(script, &p->script, &pp, err)))
				goto fail;
			p->params = pp ? cJSON_Duplicate(pp, true) : NULL;
		}
	}
	if (p->kind == PK_PERCENTILES_BUCKET && !p->percents) {
		static const double def[] = {1, 5, 25, 50, 75, 95, 99};
		p->percents = cm_calloc(AGG_MEM, 7, sizeof *p->percents);
		memcpy(p->percents, def, sizeof def);
		p->npercents = 7;
	}
	*out = p;
	return CM_OK;
fail:
	agg_pipe_free(p);
	return rc;
}

/* ---- checks on the spec tree ---- */

bool
agg_kind_multi_bucket(agg_kind k)
{
	return k == AGG_TERMS || k == AGG_HISTOGRAM || k == AGG_DATE_HISTOGRAM || k == AGG_RANGE ||
	       k == AGG_DATE_RANGE || k == AGG_FILTERS || k == AGG_COMPOSITE ||
	       k == AGG_RARE_TERMS || k == AGG_ADJACENCY_MATRIX || k == AGG_SIGNIFICANT_TERMS ||
	       k == AGG_GEOHASH_GRID || k == AGG_GEOTILE_GRID || k == AGG_MULTI_TERMS ||
	       k == AGG_AUTO_DATE_HISTOGRAM || k == AGG_VARIABLE_WIDTH_HISTOGRAM;
}

bool
agg_kind_single_bucket(agg_kind k)
{
	return k == AGG_FILTER || k == AGG_MISSING || k == AGG_GLOBAL || k == AGG_SAMPLER ||
	       k == AGG_DIVERSIFIED_SAMPLER || k == AGG_NESTED || k == AGG_REVERSE_NESTED;
}

static const sr_agg *
sub_named(const sr_agg *parent, const char *name, size_t len)
{
	for (size_t i = 0; i < parent->nsubs; i++)
		if (strlen(parent->subs[i]->name) == len &&
		    !memcmp(parent->subs[i]->name, name, len))
			return parent->subs[i];
	return NULL;
}

static const agg_pipe *
pipe_named(const sr_agg *parent, const char *name, size_t len)
{
	for (size_t i = 0; i < parent->npipes; i++)
		if (strlen(parent->pipes[i]->name) == len &&
		    !memcmp(parent->pipes[i]->name, name, len))
			return parent->pipes[i];
	return NULL;
}

static cm_err
no_path(const char *path, cm_error *err)
{
	return cm_error_set(err, CM_EINVAL, "No aggregation found for path [%s]", path);
}

/* A path read inside each bucket of ctx: "_count", "_key", "a>b.metric". */
static cm_err
path_check(const sr_agg *ctx, const char *full, const char *path, cm_error *err)
{
	if (!strcmp(path, "_count") || !strcmp(path, "_key"))
		return CM_OK;
	for (;;) {
		size_t len = strcspn(path, ".>[");
		if (!len)
			return no_path(full, err);
		const sr_agg *a = sub_named(ctx, path, len);
		if (path[len] == '>') {
			if (!a)
				return no_path(full, err);
			if (!agg_kind_single_bucket(a->kind))
				return cm_error_set(
				    err, CM_EINVAL,
				    "buckets_path must reference either a number value or a "
				    "single value numeric metric aggregation, got: [%s] at "
				    "aggregation [%s]",
				    a->ops->name, a->name);
			ctx = a;
			path += len + 1;
			if (!strcmp(path, "_count"))
				return CM_OK;
			continue;
		}
		if (a) {
			if (a->ops->metric_value || agg_kind_single_bucket(a->kind))
				return CM_OK;
			return cm_error_set(
			    err, CM_EINVAL,
			    "buckets_path must reference either a number value or a single "
			    "value numeric metric aggregation, got: [%s] at aggregation [%s]",
			    a->ops->name, a->name);
		}
		if (pipe_named(ctx, path, len))
			return CM_OK;
		return no_path(full, err);
	}
}

static size_t
first_len(const char *path)
{
	return strcspn(path, ".>[");
}

static cm_err
validation(cm_error *err, const char *msg)
{
	return cm_error_set(err, CM_EVALIDATE, "Validation Failed: 1: %s;", msg);
}

static cm_err
check_pipe(const sr_agg *parent, const agg_pipe *p, cm_error *err)
{
	char msg[600];
	const char *type = pipe_names[p->kind];
	if (pipe_is_parent(p->kind)) {
		if (parent->kind == AGG_ROOT) {
			snprintf(
			    msg, sizeof msg,
			    "%s aggregation [%s] must be declared inside of another aggregation",
			    type, p->name);
			return validation(err, msg);
		}
		if (pipe_is_sequential(p->kind)) {
			if (parent->kind != AGG_HISTOGRAM && parent->kind != AGG_DATE_HISTOGRAM) {
				snprintf(
				    msg, sizeof msg,
				    "%s aggregation [%s] must have a histogram, date_histogram or "
				    "auto_date_histogram as parent",
				    type, p->name);
				return validation(err, msg);
			}
			if (agg_hist_min_doc_count(parent) != 0) {
				snprintf(msg, sizeof msg,
				         "parent histogram of %s aggregation [%s] must have "
				         "min_doc_count of 0",
				         type, p->name);
				return validation(err, msg);
			}
		} else if (!agg_kind_multi_bucket(parent->kind)) {
			snprintf(
			    msg, sizeof msg,
			    "%s aggregation [%s] must have a multi-bucket aggregation as parent, "
			    "found [%s]",
			    type, p->name, parent->ops->name);
			return validation(err, msg);
		}
		for (size_t i = 0; i < p->npaths; i++) {
			cm_err rc = path_check(parent, p->paths[i], p->paths[i], err);
			if (rc)
				return rc;
		}
		for (size_t i = 0; i < p->nsort; i++) {
			cm_err rc = path_check(parent, p->sort_paths[i], p->sort_paths[i], err);
			if (rc)
				return rc;
		}
		return CM_OK;
	}
	/* sibling: the first element names a multi-bucket sibling */
	const char *path = p->paths[0];
	size_t len = first_len(path);
	const sr_agg *a = sub_named(parent, path, len);
	if (!a)
		return no_path(path, err);
	if (!agg_kind_multi_bucket(a->kind)) {
		snprintf(
		    msg, sizeof msg,
		    "The first aggregation in buckets_path must be a multi-bucket aggregation for "
		    "aggregation [%s] found :%s for buckets path: %s",
		    p->name, a->ops->name, path);
		return validation(err, msg);
	}
	if (path[len] != '>')
		return cm_error_set(
		    err, CM_EINVAL,
		    "buckets_path must reference either a number value or a single "
		    "value numeric metric aggregation, got: [%s] at aggregation [%s]",
		    a->ops->name, a->name);
	return path_check(a, path, path + len + 1, err);
}

/* Orders a level's pipelines so that each comes after the pipelines its
 * paths start with (ES resolves the same order). */
static cm_err
order_pipes(sr_agg *parent, cm_error *err)
{
	size_t n = parent->npipes;
	agg_pipe **out = cm_calloc(AGG_MEM, n, sizeof *out);
	bool *done = cm_calloc(AGG_MEM, n, sizeof *done);
	size_t k = 0;
	while (k < n) {
		bool progress = false;
		for (size_t i = 0; i < n; i++) {
			if (done[i])
				continue;
			const agg_pipe *p = parent->pipes[i];
			bool ready = true;
			for (size_t j = 0; j < n && ready; j++) {
				if (j == i || done[j])
					continue;
				const char *nm = parent->pipes[j]->name;
				for (size_t q = 0; q < p->npaths + p->nsort && ready; q++) {
					const char *path = q < p->npaths
					                       ? p->paths[q]
					                       : p->sort_paths[q - p->npaths];
					size_t len = first_len(path);
					if (strlen(nm) == len && !memcmp(nm, path, len))
						ready = false;
				}
			}
			if (ready) {
				done[i] = true;
				out[k++] = parent->pipes[i];
				progress = true;
			}
		}
		if (!progress) {
			for (size_t i = 0; i < n; i++)
				if (!done[i]) {
					cm_error_set(err, CM_EINVAL,
					             "Cyclical dependency found with pipeline "
					             "aggregator [%s]",
					             parent->pipes[i]->name);
					break;
				}
			cm_free(AGG_MEM, out);
			cm_free(AGG_MEM, done);
			return CM_EINVAL;
		}
	}
	memcpy(parent->pipes, out, n * sizeof *out);
	cm_free(AGG_MEM, out);
	cm_free(AGG_MEM, done);
	return CM_OK;
}

static cm_err
check_level(sr_agg *root, sr_agg *a, cm_error *err)
{
	if (a->npipes) {
		root->any_pipes = true;
		cm_err rc = order_pipes(a, err);
		if (rc)
			return rc;
		for (size_t i = 0; i < a->npipes; i++)
			if ((rc = check_pipe(a, a->pipes[i], err)))
				return rc;
	}
	for (size_t i = 0; i < a->nsubs; i++) {
		cm_err rc = check_level(root, a->subs[i], err);
		if (rc)
			return rc;
	}
	return CM_OK;
}

cm_err
agg_pipe_check(sr_agg *root, cm_error *err)
{
	return check_level(root, root, err);
}

/* ================================================================ the tree */

typedef enum { JV_OBJ, JV_ARR, JV_STR, JV_NUM, JV_LIT } jv_kind;

typedef struct jv jv;
struct jv {
	jv_kind k;
	const char *raw; /* STR (quotes included), NUM, LIT text */
	size_t rawn;
	double num;
	jv **kids;
	jv **keys;  /* OBJ: parallel to kids (STR nodes) */
	size_t pfx; /* key under typed_keys: length of its "type#" */
	size_t n, cap;
};

#define PL_MAX_DEPTH 1000

typedef struct pl {
	void **allocs;
	size_t nalloc, acap;
	cm_error *err;
	const char *s;
	size_t len, i;
	bool bad;
	bool typed; /* typed_keys: aggregation keys are "type#name" */
} pl;

static void *
pl_alloc(pl *P, size_t n)
{
	if (P->nalloc == P->acap) {
		P->acap = P->acap ? P->acap * 2 : 256;
		P->allocs = cm_realloc(AGG_MEM, P->allocs, P->acap * sizeof *P->allocs);
	}
	void *p = cm_calloc(AGG_MEM, 1, n ? n : 1);
	P->allocs[P->nalloc++] = p;
	return p;
}

static void
pl_free(pl *P)
{
	for (size_t i = 0; i < P->nalloc; i++)
		cm_free(AGG_MEM, P->allocs[i]);
	cm_free(AGG_MEM, P->allocs);
}

static jv *
jv_new(pl *P, jv_kind k)
{
	jv *v = pl_alloc(P, sizeof *v);
	v->k = k;
	return v;
}

static void
jv_push(pl *P, jv *o, jv *key, jv *val)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 8;
		jv **kids = pl_alloc(P, cap * sizeof *kids);
		if (o->n)
			memcpy(kids, o->kids, o->n * sizeof *kids);
		o->kids = kids;
		if (o->k == JV_OBJ) {
			jv **keys = pl_alloc(P, cap * sizeof *keys);
			if (o->n)
				memcpy(keys, o->keys, o->n * sizeof *keys);
			o->keys = keys;
		}
		o->cap = cap;
	}
	if (o->k == JV_OBJ)
		o->keys[o->n] = key;
	o->kids[o->n++] = val;
}

static void
jp_ws(pl *P)
{
	while (P->i < P->len && (P->s[P->i] == ' ' || P->s[P->i] == '\n' || P->s[P->i] == '\t' ||
	                         P->s[P->i] == '\r'))
		P->i++;
}

static jv *
jp_string(pl *P)
{
	size_t st = P->i++;
	while (P->i < P->len && P->s[P->i] != '"') {
		if (P->s[P->i] == '\\')
			P->i++;
		P->i++;
	}
	if (P->i >= P->len) {
		P->bad = true;
		return NULL;
	}
	P->i++;
	jv *v = jv_new(P, JV_STR);
	v->raw = P->s + st;
	v->rawn = P->i - st;
	return v;
}

/* "sterms#x": the length of "sterms#" (types are [a-z_]+), else 0. */
static size_t
type_prefix(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '#')
			return i ? i + 1 : 0;
		if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == '_'))
			return 0;
	}
	return 0;
}

static jv *
jp_value(pl *P, int depth)
{
	jp_ws(P);
	if (P->i >= P->len || depth > PL_MAX_DEPTH) {
		P->bad = true;
		return NULL;
	}
	char c = P->s[P->i];
	if (c == '{' || c == '[') {
		jv *o = jv_new(P, c == '{' ? JV_OBJ : JV_ARR);
		char close = c == '{' ? '}' : ']';
		P->i++;
		jp_ws(P);
		if (P->i < P->len && P->s[P->i] == close) {
			P->i++;
			return o;
		}
		for (;;) {
			jv *key = NULL;
			if (o->k == JV_OBJ) {
				jp_ws(P);
				if (P->i >= P->len || P->s[P->i] != '"' || !(key = jp_string(P))) {
					P->bad = true;
					return NULL;
				}
				if (P->typed)
					key->pfx = type_prefix(key->raw + 1, key->rawn - 2);
				jp_ws(P);
				if (P->i >= P->len || P->s[P->i] != ':') {
					P->bad = true;
					return NULL;
				}
				P->i++;
			}
			jv *val = jp_value(P, depth + 1);
			if (!val)
				return NULL;
			jv_push(P, o, key, val);
			jp_ws(P);
			if (P->i < P->len && P->s[P->i] == ',') {
				P->i++;
				continue;
			}
			if (P->i < P->len && P->s[P->i] == close) {
				P->i++;
				return o;
			}
			P->bad = true;
			return NULL;
		}
	}
	if (c == '"')
		return jp_string(P);
	size_t st = P->i;
	while (P->i < P->len && strchr("+-0123456789.eEtruefalsn", P->s[P->i]))
		P->i++;
	if (P->i == st) {
		P->bad = true;
		return NULL;
	}
	jv *v = jv_new(P, (c == 't' || c == 'f' || c == 'n') ? JV_LIT : JV_NUM);
	v->raw = P->s + st;
	v->rawn = P->i - st;
	if (v->k == JV_NUM) {
		char tmp[64];
		size_t n = v->rawn < sizeof tmp - 1 ? v->rawn : sizeof tmp - 1;
		memcpy(tmp, v->raw, n);
		tmp[n] = 0;
		v->num = strtod(tmp, NULL);
	} else
		v->num = NAN;
	return v;
}

static void
jv_print(const jv *v, cm_buf *b)
{
	switch (v->k) {
	case JV_OBJ:
	case JV_ARR:
		cm_buf_put_u8(b, v->k == JV_OBJ ? '{' : '[');
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				cm_buf_put_u8(b, ',');
			if (v->k == JV_OBJ) {
				cm_buf_put(b, v->keys[i]->raw, v->keys[i]->rawn);
				cm_buf_put_u8(b, ':');
			}
			jv_print(v->kids[i], b);
		}
		cm_buf_put_u8(b, v->k == JV_OBJ ? '}' : ']');
		break;
	default:
		cm_buf_put(b, v->raw, v->rawn);
	}
}

static bool
key_is_raw(const char *raw, size_t rawn, const char *name)
{
	size_t n = strlen(name);
	if (!strpbrk(name, "\"\\") && rawn == n + 2)
		return !memcmp(raw + 1, name, n);
	cm_buf t;
	cm_buf_init(&t, AGG_MEM);
	agg_json_str(&t, name, n);
	bool eq = t.len == rawn && !memcmp(t.data, raw, t.len);
	cm_buf_free(&t);
	return eq;
}

/* A typed key ("avg#x") also answers to its name alone. */
static bool
key_is(const jv *k, const char *name)
{
	if (key_is_raw(k->raw, k->rawn, name))
		return true;
	if (!k->pfx)
		return false;
	/* compare "x" against the raw text past the prefix, quote restored */
	size_t n = k->rawn - k->pfx;
	char stack[256], *t = n <= sizeof stack ? stack : cm_malloc(AGG_MEM, n);
	t[0] = '"';
	memcpy(t + 1, k->raw + 1 + k->pfx, n - 1);
	bool eq = key_is_raw(t, n, name);
	if (t != stack)
		cm_free(AGG_MEM, t);
	return eq;
}

static jv *
jv_get(const jv *o, const char *name)
{
	if (!o || o->k != JV_OBJ)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (key_is(o->keys[i], name))
			return o->kids[i];
	return NULL;
}

static jv *
mk_raw(pl *P, jv_kind k, const char *s, size_t n)
{
	jv *v = jv_new(P, k);
	char *c = pl_alloc(P, n + 1);
	memcpy(c, s, n);
	v->raw = c;
	v->rawn = n;
	return v;
}

static jv *
mk_str(pl *P, const char *s)
{
	cm_buf t;
	cm_buf_init(&t, AGG_MEM);
	agg_json_str(&t, s, strlen(s));
	jv *v = mk_raw(P, JV_STR, (const char *)t.data, t.len);
	cm_buf_free(&t);
	return v;
}

static jv *
mk_num(pl *P, double d)
{
	if (isnan(d) || isinf(d))
		return mk_raw(P, JV_LIT, "null", 4);
	char buf[64];
	agg_double_str(buf, sizeof buf, d);
	jv *v = mk_raw(P, JV_NUM, buf, strlen(buf));
	v->num = d;
	return v;
}

static jv *
mk_long(pl *P, uint64_t n)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%llu", (unsigned long long)n);
	jv *v = mk_raw(P, JV_NUM, buf, strlen(buf));
	v->num = (double)n;
	return v;
}

static void
obj_put(pl *P, jv *o, const char *key, jv *val)
{
	jv_push(P, o, mk_str(P, key), val);
}

/* The response type of a pipeline's value (typed_keys), as ES names it. */
static const char *
pipe_type_name(pipe_kind k)
{
	switch (k) {
	case PK_DERIVATIVE:
		return "derivative";
	case PK_MAX_BUCKET:
	case PK_MIN_BUCKET:
		return "bucket_metric_value"; /* InternalBucketMetricValue.NAME */
	case PK_STATS_BUCKET:
	case PK_EXTENDED_STATS_BUCKET:
	case PK_PERCENTILES_BUCKET:
		return pipe_names[k];
	default:
		return "simple_value";
	}
}

/* Adds a pipeline's value under its name ("type#name" with typed_keys). */
static void
pipe_put(pl *P, jv *o, const agg_pipe *p, jv *val)
{
	if (!P->typed) {
		obj_put(P, o, p->name, val);
		return;
	}
	cm_buf t;
	cm_buf_init(&t, AGG_MEM);
	const char *ty = pipe_type_name(p->kind);
	cm_buf_printf(&t, "%s#%s", ty, p->name);
	cm_buf_put_u8(&t, 0);
	jv *k = mk_str(P, (const char *)t.data);
	k->pfx = strlen(ty) + 1;
	cm_buf_free(&t);
	jv_push(P, o, k, val);
}

/* An output object: "meta" first, like every aggregation. */
static jv *
out_obj(pl *P, const agg_pipe *p)
{
	jv *o = jv_new(P, JV_OBJ);
	if (p->meta) {
		pl sub = {0};
		sub.s = p->meta;
		sub.len = strlen(p->meta);
		/* parse into P's arena so the nodes live as long as the tree */
		size_t save_i = P->i, save_len = P->len;
		const char *save_s = P->s;
		char *copy = pl_alloc(P, sub.len + 1);
		memcpy(copy, p->meta, sub.len);
		P->s = copy;
		P->len = sub.len;
		P->i = 0;
		jv *m = jp_value(P, 0);
		P->s = save_s;
		P->len = save_len;
		P->i = save_i;
		if (m)
			obj_put(P, o, "meta", m);
		P->bad = false;
	}
	return o;
}

static void
put_value(pl *P, const agg_pipe *p, jv *o, const char *key, double v)
{
	obj_put(P, o, key, mk_num(P, v));
	if (p->format && !isnan(v) && !isinf(v)) {
		char buf[400], k[64];
		fmt_decimal(p->format, v, buf, sizeof buf);
		snprintf(k, sizeof k, "%s_as_string", key);
		obj_put(P, o, k, mk_str(P, buf));
	}
}

static jv *
simple_value(pl *P, const agg_pipe *p, double v)
{
	jv *o = out_obj(P, p);
	put_value(P, p, o, "value", v);
	return o;
}

/* ---- reading values out of buckets ---- */

static double
jv_num(const jv *v)
{
	return v && v->k == JV_NUM ? v->num : NAN;
}

static jv *
jv_buckets(const jv *aggobj)
{
	jv *b = jv_get(aggobj, "buckets");
	return b && (b->k == JV_ARR || b->k == JV_OBJ) ? b : NULL;
}

static bool
key_num_eq(const char *raw, size_t n, double want)
{
	char tmp[64];
	if (n >= sizeof tmp)
		return false;
	memcpy(tmp, raw, n);
	tmp[n] = 0;
	char *end;
	double d = strtod(tmp, &end);
	return end != tmp && *end == 0 && d == want;
}

/* The value named by key inside a metric's rendered object. */
/* top_metrics: the first doc's metrics (a NULL key: its only metric). */
static bool
top_metric(const jv *ao, const char *key, double *v)
{
	const jv *top = jv_get(ao, "top");
	if (!top || top->k != JV_ARR)
		return false;
	const jv *m = top->n ? jv_get(top->kids[0], "metrics") : NULL;
	if (!m) {
		*v = NAN;
		return true;
	}
	if (!key) {
		if (m->n != 1)
			return false;
		*v = jv_num(m->kids[0]);
		return true;
	}
	const jv *x = jv_get(m, key);
	if (!x)
		return false;
	*v = jv_num(x);
	return true;
}

static bool
metric_key(const jv *ao, const char *key, double *v)
{
	if (top_metric(ao, key, v))
		return true;
	const jv *vals = jv_get(ao, "values");
	if (vals) {
		char *end;
		double want = strtod(key, &end);
		if (end == key || *end)
			return false;
		for (size_t i = 0; i < vals->n; i++) {
			if (vals->k == JV_OBJ) {
				const jv *k = vals->keys[i];
				if (key_num_eq(k->raw + 1, k->rawn - 2, want)) {
					*v = jv_num(vals->kids[i]);
					return true;
				}
			} else {
				const jv *e = vals->kids[i];
				if (jv_num(jv_get(e, "key")) == want) {
					*v = jv_num(jv_get(e, "value"));
					return true;
				}
			}
		}
		return false;
	}
	const jv *x = jv_get(ao, key);
	if (!x)
		return false;
	*v = jv_num(x);
	return true;
}

/* A buckets_path value inside bucket b, before the gap policy; false with
 * err set when the path does not lead to a number. */
static bool
resolve_raw(pl *P, const jv *b, const char *path, double *v)
{
	if (!strcmp(path, "_count")) {
		*v = jv_num(jv_get(b, "doc_count"));
		return true;
	}
	if (!strcmp(path, "_key")) {
		*v = jv_num(jv_get(b, "key"));
		return true;
	}
	const jv *ctx = b;
	const char *p = path;
	char name[AGG_MAX_NAME + 2], key[128];
	for (;;) {
		size_t len = strcspn(p, ".>[");
		if (len > AGG_MAX_NAME)
			break;
		memcpy(name, p, len);
		name[len] = 0;
		const jv *ao = jv_get(ctx, name);
		if (!ao) {
			/* a pipeline value absent from this bucket (a derivative's
			 * first bucket): null, as in ES */
			*v = NAN;
			return true;
		}
		if (p[len] == '>') {
			ctx = ao;
			p += len + 1;
			if (!strcmp(p, "_count")) {
				*v = jv_num(jv_get(ctx, "doc_count"));
				return true;
			}
			continue;
		}
		if (p[len] == '.' || p[len] == '[') {
			const char *k = p + len + 1;
			size_t kl = p[len] == '[' ? strcspn(k, "]") : strlen(k);
			if (kl >= sizeof key)
				break;
			memcpy(key, k, kl);
			key[kl] = 0;
			if (metric_key(ao, key, v))
				return true;
			break;
		}
		if (top_metric(ao, NULL, v))
			return true;
		const jv *val = jv_get(ao, "value");
		if (val) {
			*v = jv_num(val);
			return true;
		}
		if (jv_get(ao, "doc_count") && !jv_buckets(ao)) {
			*v = jv_num(jv_get(ao, "doc_count"));
			return true;
		}
		break;
	}
	cm_error_set(P->err, CM_EINVAL,
	             "buckets_path must reference either a number value or a single value numeric "
	             "metric aggregation, got: [%s]",
	             path);
	return false;
}

/* With the gap policy: NaN for a skipped gap. */
static bool
resolve(pl *P, const agg_pipe *p, const jv *b, const char *path, double *v)
{
	if (!resolve_raw(P, b, path, v))
		return false;
	bool count = !strcmp(path, "_count");
	if (isnan(*v) || isinf(*v) || (!count && jv_num(jv_get(b, "doc_count")) == 0))
		*v = p->insert_zeros ? 0 : NAN;
	return true;
}

/* ---- parent pipelines ---- */

static cm_err
run_derivative(pl *P, const agg_pipe *p, jv *bl)
{
	bool have_last = false;
	double last = 0, last_key = 0;
	for (size_t i = 0; i < bl->n; i++) {
		jv *b = bl->kids[i];
		double v, key = jv_num(jv_get(b, "key"));
		if (!resolve(P, p, b, p->paths[0], &v))
			return P->err->code;
		if (have_last) {
			jv *o = out_obj(P, p);
			double g = v - last;
			put_value(P, p, o, "value", g);
			if (p->unit_ms > 0) {
				double xdiff = (key - last_key) / p->unit_ms;
				put_value(P, p, o, "normalized_value", xdiff > 0 ? g / xdiff : g);
			}
			pipe_put(P, b, p, o);
		}
		have_last = true;
		last = v;
		last_key = key;
	}
	return CM_OK;
}

static cm_err
run_cumulative_sum(pl *P, const agg_pipe *p, jv *bl)
{
	double sum = 0;
	agg_pipe q = *p;
	q.insert_zeros = true;
	for (size_t i = 0; i < bl->n; i++) {
		double v;
		if (!resolve(P, &q, bl->kids[i], p->paths[0], &v))
			return P->err->code;
		if (!isnan(v) && !isinf(v))
			sum += v;
		pipe_put(P, bl->kids[i], p, simple_value(P, p, sum));
	}
	return CM_OK;
}

static cm_err
run_serial_diff(pl *P, const agg_pipe *p, jv *bl)
{
	double *hist = cm_calloc(AGG_MEM, bl->n ? bl->n : 1, sizeof *hist);
	for (size_t i = 0; i < bl->n; i++) {
		double v;
		if (!resolve(P, p, bl->kids[i], p->paths[0], &v)) {
			cm_free(AGG_MEM, hist);
			return P->err->code;
		}
		hist[i] = v;
		double lagv = (int64_t)i >= p->lag ? hist[i - (size_t)p->lag] : NAN;
		if (!isnan(v) && !isnan(lagv))
			pipe_put(P, bl->kids[i], p, simple_value(P, p, v - lagv));
	}
	cm_free(AGG_MEM, hist);
	return CM_OK;
}

static size_t
clampz(int64_t i, size_t n)
{
	return i < 0 ? 0 : (size_t)i > n ? n : (size_t)i;
}

static cm_err
run_moving_fn(pl *P, const agg_pipe *p, jv *bl)
{
	double *all = cm_calloc(AGG_MEM, bl->n ? bl->n : 1, sizeof *all);
	double *vals = cm_calloc(AGG_MEM, bl->n ? bl->n : 1, sizeof *vals);
	size_t nv = 0;
	cm_err rc = CM_OK;
	for (size_t i = 0; i < bl->n; i++) {
		if (!resolve(P, p, bl->kids[i], p->paths[0], &all[i])) {
			rc = P->err->code;
			goto done;
		}
		if (!isnan(all[i]))
			vals[nv++] = all[i];
	}
	int64_t index = 0;
	for (size_t i = 0; i < bl->n; i++) {
		if (isnan(all[i]))
			continue;
		size_t from = clampz(index - p->window + p->shift, nv);
		size_t to = clampz(index + p->shift, nv);
		double r;
		if ((rc = mf_eval(p->mf, vals + from, to > from ? to - from : 0, &r, P->err)))
			goto done;
		pipe_put(P, bl->kids[i], p, simple_value(P, p, r));
		index++;
	}
done:
	cm_free(AGG_MEM, all);
	cm_free(AGG_MEM, vals);
	return rc;
}

/* Script params plus the bucket's values, or NULL when a skip gap says the
 * bucket is left alone. */
static cJSON *
script_vars(pl *P, const agg_pipe *p, const jv *b, bool skip_gaps, bool *failed)
{
	cJSON *params = p->params ? cJSON_Duplicate(p->params, true) : cJSON_CreateObject();
	*failed = false;
	for (size_t i = 0; i < p->npaths; i++) {
		double v;
		if (!resolve(P, p, b, p->paths[i], &v)) {
			*failed = true;
			cJSON_Delete(params);
			return NULL;
		}
		if (skip_gaps && isnan(v)) {
			cJSON_Delete(params);
			return NULL;
		}
		const char *var = p->vars ? p->vars[i] : "_value0";
		cJSON_DeleteItemFromObjectCaseSensitive(params, var);
		cJSON_AddItemToObject(params, var, ps_double(v));
	}
	return params;
}

static cm_err
run_bucket_script(pl *P, const agg_pipe *p, jv *bl)
{
	for (size_t i = 0; i < bl->n; i++) {
		bool failed;
		cJSON *vars = script_vars(P, p, bl->kids[i], !p->insert_zeros, &failed);
		if (failed)
			return P->err->code;
		if (!vars)
			continue;
		cJSON *res = NULL;
		cm_err rc = ps_eval(p->script, vars, &res, P->err);
		cJSON_Delete(vars);
		if (rc)
			return rc;
		if (res && !cJSON_IsNull(res)) {
			if (!cJSON_IsNumber(res)) {
				cJSON_Delete(res);
				return cm_error_set(
				    P->err, CM_EAGGEXEC,
				    "series_arithmetic script for reducer [%s] must return "
				    "a Number",
				    p->name);
			}
			pipe_put(P, bl->kids[i], p, simple_value(P, p, res->valuedouble));
		}
		cJSON_Delete(res);
	}
	return CM_OK;
}

static cm_err
run_bucket_selector(pl *P, const agg_pipe *p, jv *bl)
{
	size_t k = 0;
	for (size_t i = 0; i < bl->n; i++) {
		bool failed;
		cJSON *vars = script_vars(P, p, bl->kids[i], false, &failed);
		if (failed)
			return P->err->code;
		cJSON *res = NULL;
		cm_err rc = ps_eval(p->script, vars, &res, P->err);
		cJSON_Delete(vars);
		if (rc)
			return rc;
		if (!cJSON_IsBool(res)) {
			cJSON_Delete(res);
			return cm_error_set_type(
			    P->err, CM_EINVAL, "script_exception",
			    "bucket_selector script for [%s] must return a boolean", p->name);
		}
		bool keep = cJSON_IsTrue(res);
		cJSON_Delete(res);
		if (keep) {
			bl->kids[k] = bl->kids[i];
			if (bl->keys)
				bl->keys[k] = bl->keys[i];
			k++;
		}
	}
	bl->n = k;
	return CM_OK;
}

typedef struct sort_item {
	jv *b, *key;
	size_t pos;
	double *v;       /* per sort field; NaN = none (sorts last) */
	const jv **skey; /* per sort field: the "_key" node when sorting on it */
} sort_item;


static int
jv_key_cmp(const jv *a, const jv *b)
{
	if (a->k == JV_NUM && b->k == JV_NUM)
		return a->num < b->num ? -1 : a->num > b->num;
	size_t n = a->rawn < b->rawn ? a->rawn : b->rawn;
	int c = memcmp(a->raw, b->raw, n);
	return c ? c : (a->rawn > b->rawn) - (a->rawn < b->rawn);
}

static int
sort_cmp(const void *x, const void *y, void *pipe)
{
	const sort_item *a = x, *b = y;
	const agg_pipe *p = pipe;
	for (size_t i = 0; i < p->nsort; i++) {
		int c;
		if (a->skey[i] || b->skey[i]) {
			if (!a->skey[i] || !b->skey[i])
				return a->skey[i] ? -1 : 1;
			c = jv_key_cmp(a->skey[i], b->skey[i]);
		} else {
			bool an = isnan(a->v[i]), bn = isnan(b->v[i]);
			if (an && bn)
				continue;
			if (an)
				return 1;
			if (bn)
				return -1;
			c = a->v[i] < b->v[i] ? -1 : a->v[i] > b->v[i];
		}
		if (p->sort_desc[i])
			c = -c;
		if (c)
			return c;
	}
	return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static cm_err
run_bucket_sort(pl *P, const agg_pipe *p, jv *bl)
{
	size_t n = bl->n;
	if (p->nsort) {
		sort_item *it = pl_alloc(P, (n ? n : 1) * sizeof *it);
		for (size_t i = 0; i < n; i++) {
			it[i].b = bl->kids[i];
			it[i].key = bl->keys ? bl->keys[i] : NULL;
			it[i].pos = i;
			it[i].v = pl_alloc(P, p->nsort * sizeof(double));
			it[i].skey = pl_alloc(P, p->nsort * sizeof(jv *));
			for (size_t s = 0; s < p->nsort; s++) {
				if (!strcmp(p->sort_paths[s], "_key")) {
					const jv *k = jv_get(it[i].b, "key");
					it[i].skey[s] = k ? k : it[i].key;
					it[i].v[s] = NAN;
				} else if (!resolve(P, p, it[i].b, p->sort_paths[s], &it[i].v[s]))
					return P->err->code;
			}
		}
		qsort_r(it, n, sizeof *it, sort_cmp, (void *)(uintptr_t)p);
		for (size_t i = 0; i < n; i++) {
			bl->kids[i] = it[i].b;
			if (bl->keys)
				bl->keys[i] = it[i].key;
		}
	}
	size_t from = (size_t)p->from < n ? (size_t)p->from : n;
	size_t to = p->size < 0 ? n : from + (size_t)p->size < n ? from + (size_t)p->size : n;
	if (to > from && from > 0) {
		memmove(bl->kids, bl->kids + from, (to - from) * sizeof *bl->kids);
		if (bl->keys)
			memmove(bl->keys, bl->keys + from, (to - from) * sizeof *bl->keys);
	}
	bl->n = to - from;
	return CM_OK;
}

static cm_err
run_parent(pl *P, const agg_pipe *p, jv *aggobj)
{
	jv *bl = jv_buckets(aggobj);
	if (!bl)
		return CM_OK;
	switch (p->kind) {
	case PK_DERIVATIVE:
		return run_derivative(P, p, bl);
	case PK_CUMULATIVE_SUM:
		return run_cumulative_sum(P, p, bl);
	case PK_MOVING_FN:
		return run_moving_fn(P, p, bl);
	case PK_SERIAL_DIFF:
		return run_serial_diff(P, p, bl);
	case PK_BUCKET_SCRIPT:
		return run_bucket_script(P, p, bl);
	case PK_BUCKET_SELECTOR:
		return run_bucket_selector(P, p, bl);
	case PK_BUCKET_SORT:
		return run_bucket_sort(P, p, bl);
	default:
		return CM_OK;
	}
}

/* ---- sibling pipelines ---- */

static int
dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The bucket's key as the string ES lists in max_bucket's "keys". */
static jv *
bucket_key_str(pl *P, const jv *b, const jv *objkey)
{
	const jv *k = jv_get(b, "key_as_string");
	if (!k)
		k = jv_get(b, "key");
	if (!k)
		k = objkey;
	if (!k)
		return mk_raw(P, JV_LIT, "null", 4);
	if (k->k == JV_STR)
		return (jv *)k;
	char buf[80];
	snprintf(buf, sizeof buf, "\"%.*s\"", (int)(k->rawn < 70 ? k->rawn : 70), k->raw);
	return mk_raw(P, JV_STR, buf, strlen(buf));
}

static cm_err
run_sibling(pl *P, const agg_pipe *p, jv *container)
{
	const char *path = p->paths[0];
	size_t len = first_len(path);
	char name[AGG_MAX_NAME + 2];
	memcpy(name, path, len < AGG_MAX_NAME ? len : AGG_MAX_NAME);
	name[len < AGG_MAX_NAME ? len : AGG_MAX_NAME] = 0;
	const char *rest = path + len + (path[len] == '>' ? 1 : 0);
	jv *bl = jv_buckets(jv_get(container, name));
	size_t n = bl ? bl->n : 0;
	double *vals = cm_calloc(AGG_MEM, n ? n : 1, sizeof *vals);
	jv **keys = cm_calloc(AGG_MEM, n ? n : 1, sizeof *keys);
	size_t nv = 0;
	for (size_t i = 0; i < n; i++) {
		double v;
		if (!resolve(P, p, bl->kids[i], rest, &v)) {
			cm_free(AGG_MEM, vals);
			cm_free(AGG_MEM, keys);
			return P->err->code;
		}
		if (isnan(v))
			continue;
		keys[nv] = bl->kids[i]
		               ? bucket_key_str(P, bl->kids[i], bl->keys ? bl->keys[i] : NULL)
		               : NULL;
		vals[nv++] = v;
	}
	double sum = 0, sumsq = 0, mn = INFINITY, mx = -INFINITY;
	for (size_t i = 0; i < nv; i++) {
		sum += vals[i];
		sumsq += vals[i] * vals[i];
		if (vals[i] < mn)
			mn = vals[i];
		if (vals[i] > mx)
			mx = vals[i];
	}
	jv *o = NULL;
	switch (p->kind) {
	case PK_AVG_BUCKET:
		o = simple_value(P, p, nv ? sum / (double)nv : NAN);
		break;
	case PK_SUM_BUCKET:
		o = simple_value(P, p, sum);
		break;
	case PK_MAX_BUCKET:
	case PK_MIN_BUCKET: {
		double best = p->kind == PK_MAX_BUCKET ? mx : mn;
		o = simple_value(P, p, best);
		jv *ks = jv_new(P, JV_ARR);
		for (size_t i = 0; i < nv; i++)
			if (vals[i] == best)
				jv_push(P, ks, NULL, keys[i]);
		obj_put(P, o, "keys", ks);
		break;
	}
	case PK_STATS_BUCKET:
	case PK_EXTENDED_STATS_BUCKET: {
		o = out_obj(P, p);
		bool has = nv > 0;
		obj_put(P, o, "count", mk_long(P, nv));
		obj_put(P, o, "min", mk_num(P, has ? mn : NAN));
		obj_put(P, o, "max", mk_num(P, has ? mx : NAN));
		double avg = has ? sum / (double)nv : NAN;
		obj_put(P, o, "avg", mk_num(P, avg));
		obj_put(P, o, "sum", mk_num(P, sum));
		if (p->kind == PK_EXTENDED_STATS_BUCKET) {
			double vp = has ? (sumsq - sum * sum / (double)nv) / (double)nv : NAN;
			if (vp < 0)
				vp = 0;
			double vs = nv > 1 ? (sumsq - sum * sum / (double)nv) / (double)(nv - 1)
			            : has  ? 0
			                   : NAN;
			if (vs < 0)
				vs = 0;
			double sp = sqrt(vp), ss = sqrt(vs);
			obj_put(P, o, "sum_of_squares", mk_num(P, has ? sumsq : NAN));
			obj_put(P, o, "variance", mk_num(P, vp));
			obj_put(P, o, "variance_population", mk_num(P, vp));
			obj_put(P, o, "variance_sampling", mk_num(P, vs));
			obj_put(P, o, "std_deviation", mk_num(P, sp));
			obj_put(P, o, "std_deviation_population", mk_num(P, sp));
			obj_put(P, o, "std_deviation_sampling", mk_num(P, ss));
			jv *bd = jv_new(P, JV_OBJ);
			obj_put(P, bd, "upper", mk_num(P, avg + p->sigma * sp));
			obj_put(P, bd, "lower", mk_num(P, avg - p->sigma * sp));
			obj_put(P, bd, "upper_population", mk_num(P, avg + p->sigma * sp));
			obj_put(P, bd, "lower_population", mk_num(P, avg - p->sigma * sp));
			obj_put(P, bd, "upper_sampling", mk_num(P, avg + p->sigma * ss));
			obj_put(P, bd, "lower_sampling", mk_num(P, avg - p->sigma * ss));
			obj_put(P, o, "std_deviation_bounds", bd);
		}
		if (has && p->format) {
			const char *names[] = {"min", "max", "avg", "sum"};
			double v4[] = {mn, mx, avg, sum};
			for (int i = 0; i < 4; i++) {
				char buf[400], k[32];
				fmt_decimal(p->format, v4[i], buf, sizeof buf);
				snprintf(k, sizeof k, "%s_as_string", names[i]);
				obj_put(P, o, k, mk_str(P, buf));
			}
		}
		break;
	}
	case PK_PERCENTILES_BUCKET: {
		qsort(vals, nv, sizeof *vals, dbl_cmp);
		o = out_obj(P, p);
		jv *vs = jv_new(P, p->keyed ? JV_OBJ : JV_ARR);
		for (size_t i = 0; i < p->npercents; i++) {
			double pc = p->percents[i], v = NAN;
			if (nv) {
				double idx = round(pc / 100.0 * (double)(nv - 1));
				v = vals[(size_t)idx < nv ? (size_t)idx : nv - 1];
			}
			char ks[64];
			agg_double_str(ks, sizeof ks, pc);
			if (p->keyed) {
				obj_put(P, vs, ks, mk_num(P, v));
			} else {
				jv *e = jv_new(P, JV_OBJ);
				obj_put(P, e, "key", mk_num(P, pc));
				obj_put(P, e, "value", mk_num(P, v));
				jv_push(P, vs, NULL, e);
			}
		}
		obj_put(P, o, "values", vs);
		break;
	}
	default:
		break;
	}
	cm_free(AGG_MEM, vals);
	cm_free(AGG_MEM, keys);
	if (o)
		pipe_put(P, container, p, o);
	return CM_OK;
}

/* ---- walking the tree ---- */

static cm_err apply_agg(pl *P, const sr_agg *x, jv *xo);

static cm_err
apply_subs(pl *P, const sr_agg *s, jv *c)
{
	for (size_t i = 0; i < s->nsubs; i++) {
		jv *xo = jv_get(c, s->subs[i]->name);
		if (xo) {
			cm_err rc = apply_agg(P, s->subs[i], xo);
			if (rc)
				return rc;
		}
	}
	return CM_OK;
}

static cm_err
apply_agg(pl *P, const sr_agg *x, jv *xo)
{
	cm_err rc;
	jv *bl = agg_kind_multi_bucket(x->kind) ? jv_buckets(xo) : NULL;
	if (bl) {
		for (size_t i = 0; i < bl->n; i++)
			if ((rc = apply_subs(P, x, bl->kids[i])))
				return rc;
		for (size_t k = 0; k < x->npipes; k++) {
			const agg_pipe *p = x->pipes[k];
			if (pipe_is_parent(p->kind)) {
				if ((rc = run_parent(P, p, xo)))
					return rc;
			} else
				for (size_t i = 0; i < bl->n; i++)
					if ((rc = run_sibling(P, p, bl->kids[i])))
						return rc;
		}
	} else if (agg_kind_single_bucket(x->kind)) {
		if ((rc = apply_subs(P, x, xo)))
			return rc;
		for (size_t k = 0; k < x->npipes; k++)
			if ((rc = run_sibling(P, x->pipes[k], xo)))
				return rc;
	}
	return CM_OK;
}

cm_err
agg_pipe_apply(const sr_agg *root, cm_buf *out, size_t start, bool typed, cm_error *err)
{
	cm_error local = {0};
	pl P = {0};
	P.typed = typed;
	P.err = err ? err : &local;
	size_t n = out->len - start;
	char *copy = cm_malloc(AGG_MEM, n + 1);
	memcpy(copy, out->data + start, n);
	copy[n] = 0;
	P.s = copy;
	P.len = n;
	cm_err rc = CM_OK;
	jv *top = jp_value(&P, 0);
	if (!top || P.bad || top->k != JV_OBJ) {
		rc =
		    cm_error_set(P.err, CM_EINTERNAL, "pipeline aggregations: unreadable response");
		goto done;
	}
	if ((rc = apply_subs(&P, root, top)))
		goto done;
	for (size_t k = 0; k < root->npipes; k++)
		if ((rc = run_sibling(&P, root->pipes[k], top)))
			goto done;
	out->len = start;
	jv_print(top, out);
done:
	pl_free(&P);
	cm_free(AGG_MEM, copy);
	return rc;
}
