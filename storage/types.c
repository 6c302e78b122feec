/* Name tables for field types and analyzers, as Elasticsearch spells them. */
#define _GNU_SOURCE
#include "st_types.h"

#include <strings.h>

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const field_type_names[] = {
    [ST_FT_TEXT] = "text",       [ST_FT_KEYWORD] = "keyword", [ST_FT_LONG] = "long",
    [ST_FT_INTEGER] = "integer", [ST_FT_SHORT] = "short",     [ST_FT_BYTE] = "byte",
    [ST_FT_DOUBLE] = "double",   [ST_FT_FLOAT] = "float",     [ST_FT_DATE] = "date",
    [ST_FT_BOOLEAN] = "boolean", [ST_FT_OBJECT] = "object",   [ST_FT_BINARY] = "binary",
    [ST_FT_IP] = "ip",           [ST_FT_DATE_NANOS] = "date_nanos",
    [ST_FT_HALF_FLOAT] = "half_float", [ST_FT_SCALED_FLOAT] = "scaled_float",
    [ST_FT_UNSIGNED_LONG] = "unsigned_long", [ST_FT_GEO_POINT] = "geo_point",
    [ST_FT_FLATTENED] = "flattened",
    [ST_FT_COMPLETION] = "completion",
    [ST_FT_INTEGER_RANGE] = "integer_range", [ST_FT_LONG_RANGE] = "long_range",
    [ST_FT_FLOAT_RANGE] = "float_range",     [ST_FT_DOUBLE_RANGE] = "double_range",
    [ST_FT_DATE_RANGE] = "date_range",       [ST_FT_IP_RANGE] = "ip_range",
};

static const char *const analyzer_names[] = {
    [ST_AN_STANDARD] = "standard", [ST_AN_SIMPLE] = "simple",   [ST_AN_WHITESPACE] = "whitespace",
    [ST_AN_KEYWORD] = "keyword",   [ST_AN_ENGLISH] = "english",
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const char *
st_field_type_name(st_field_type t)
{
	if ((unsigned)t >= NELEM(field_type_names))
		return "unknown";
	return field_type_names[t];
}

bool
st_field_type_from_name(const char *name, st_field_type *out)
{
	if (name == NULL)
		return false;
	for (size_t i = 0; i < NELEM(field_type_names); i++) {
		if (strcmp(name, field_type_names[i]) == 0) {
			*out = (st_field_type)i;
			return true;
		}
	}
	return false;
}

bool
st_field_type_is_numeric(st_field_type t)
{
	switch (t) {
	case ST_FT_LONG:
	case ST_FT_INTEGER:
	case ST_FT_SHORT:
	case ST_FT_BYTE:
	case ST_FT_DOUBLE:
	case ST_FT_FLOAT:
	case ST_FT_DATE:
	case ST_FT_BOOLEAN:
	case ST_FT_DATE_NANOS:
	case ST_FT_HALF_FLOAT:
	case ST_FT_SCALED_FLOAT:
	case ST_FT_UNSIGNED_LONG:
	case ST_FT_GEO_POINT:
		return true;
	default:
		return false;
	}
}

bool
st_field_type_is_ordinal(st_field_type t)
{
	return t == ST_FT_KEYWORD || t == ST_FT_IP || t == ST_FT_FLATTENED;
}

bool
st_field_type_is_double(st_field_type t)
{
	return t == ST_FT_DOUBLE || t == ST_FT_FLOAT || t == ST_FT_HALF_FLOAT;
}

bool
st_field_type_is_range(st_field_type t)
{
	return t >= ST_FT_INTEGER_RANGE && t <= ST_FT_IP_RANGE;
}

bool
st_field_type_stored(unsigned t)
{
	return t < ST_FT_OBJECT || (t > ST_FT_BINARY && t <= ST_FT_LAST);
}

const char *
st_analyzer_name(st_analyzer_kind a)
{
	if ((unsigned)a >= NELEM(analyzer_names))
		return "unknown";
	return analyzer_names[a];
}

bool
st_analyzer_from_name(const char *name, st_analyzer_kind *out)
{
	if (name == NULL)
		return false;
	for (size_t i = 0; i < NELEM(analyzer_names); i++) {
		if (strcmp(name, analyzer_names[i]) == 0) {
			*out = (st_analyzer_kind)i;
			return true;
		}
	}
	return false;
}

/* ---- ip addresses ---- */

/* One IPv4 octet: 1-3 digits, no leading zero, at most 255. */
static bool
ipv4_octet(const char *s, size_t n, size_t *p, uint8_t *out)
{
	size_t st = *p;
	unsigned v = 0;
	while (*p < n && s[*p] >= '0' && s[*p] <= '9' && *p - st < 3)
		v = v * 10 + (unsigned)(s[(*p)++] - '0');
	size_t len = *p - st;
	if (len == 0 || v > 255 || (len > 1 && s[st] == '0'))
		return false;
	*out = (uint8_t)v;
	return true;
}

static bool
ipv4_parse(const char *s, size_t n, uint8_t out[4])
{
	size_t p = 0;
	for (int i = 0; i < 4; i++) {
		if (i && (p >= n || s[p++] != '.'))
			return false;
		if (!ipv4_octet(s, n, &p, &out[i]))
			return false;
	}
	return p == n;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* RFC 4291 section 2.2: eight groups, one "::", an optional dotted quad
 * in place of the last two groups. */
static bool
ipv6_parse(const char *s, size_t n, uint8_t out[16])
{
	uint16_t g[8];
	int ng = 0, gap = -1;
	size_t p = 0;
	if (n >= 2 && s[0] == ':' && s[1] == ':') {
		gap = 0;
		p = 2;
		if (p == n)
			goto done;
	} else if (n && s[0] == ':') {
		return false;
	}
	for (;;) {
		/* a dotted quad ends the address */
		size_t q = p;
		while (q < n && s[q] != ':' && s[q] != '.')
			q++;
		if (q < n && s[q] == '.') {
			uint8_t v4[4];
			if (ng > 6 || !ipv4_parse(s + p, n - p, v4))
				return false;
			g[ng++] = (uint16_t)(v4[0] << 8 | v4[1]);
			g[ng++] = (uint16_t)(v4[2] << 8 | v4[3]);
			p = n;
			break;
		}
		unsigned v = 0;
		size_t st = p;
		int h;
		while (p < n && p - st < 4 && (h = hexval(s[p])) >= 0) {
			v = v << 4 | (unsigned)h;
			p++;
		}
		if (p == st || ng == 8)
			return false;
		g[ng++] = (uint16_t)v;
		if (p == n)
			break;
		if (s[p] != ':')
			return false;
		p++;
		if (p < n && s[p] == ':') {
			if (gap >= 0)
				return false;
			gap = ng;
			p++;
			if (p == n)
				break;
		} else if (p == n) {
			return false; /* a single trailing ':' */
		}
	}
done:
	if (gap < 0 ? ng != 8 : ng > 7)
		return false;
	memset(out, 0, 16);
	int tail = gap < 0 ? 0 : ng - gap;
	for (int i = 0; i < ng; i++) {
		int at = gap < 0 || i < gap ? i : 8 - tail + (i - gap);
		out[2 * at] = (uint8_t)(g[i] >> 8);
		out[2 * at + 1] = (uint8_t)g[i];
	}
	return true;
}

bool
st_ip_parse(const char *s, size_t n, uint8_t out[ST_IP_LEN])
{
	if (s == NULL || n == 0 || n > 45)
		return false;
	if (memchr(s, ':', n) == NULL) {
		uint8_t v4[4];
		if (!ipv4_parse(s, n, v4))
			return false;
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, v4, 4);
		return true;
	}
	return ipv6_parse(s, n, out);
}

bool
st_cidr_parse(const char *s, size_t n, uint8_t lo[ST_IP_LEN], uint8_t hi[ST_IP_LEN])
{
	const char *slash = s ? memchr(s, '/', n) : NULL;
	if (slash == NULL)
		return false;
	size_t an = (size_t)(slash - s);
	if (!st_ip_parse(s, an, lo))
		return false;
	bool v4 = memchr(s, ':', an) == NULL;
	const char *d = slash + 1, *end = s + n;
	if (d == end || end - d > 3)
		return false;
	unsigned len = 0;
	for (; d < end; d++) {
		if (*d < '0' || *d > '9')
			return false;
		len = len * 10 + (unsigned)(*d - '0');
	}
	if (len > (v4 ? 32u : 128u))
		return false;
	unsigned bits = v4 ? len + 96 : len;
	for (unsigned i = 0; i < 16; i++) {
		unsigned keep = bits > i * 8 ? bits - i * 8 : 0;
		uint8_t mask = keep >= 8 ? 0xff : (uint8_t)(0xff << (8 - keep));
		hi[i] = (uint8_t)(lo[i] | ~mask);
		lo[i] &= mask;
	}
	return true;
}

void
st_ip_format(const uint8_t ip[ST_IP_LEN], char *buf, size_t cap)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (memcmp(ip, mapped, 12) == 0) {
		snprintf(buf, cap, "%u.%u.%u.%u", ip[12], ip[13], ip[14], ip[15]);
		return;
	}
	unsigned g[8];
	for (int i = 0; i < 8; i++)
		g[i] = (unsigned)ip[2 * i] << 8 | ip[2 * i + 1];
	/* RFC 5952: the longest run of two or more zero groups, the first on a tie */
	int best = -1, bestlen = 1;
	for (int i = 0; i < 8;) {
		if (g[i]) {
			i++;
			continue;
		}
		int j = i;
		while (j < 8 && g[j] == 0)
			j++;
		if (j - i > bestlen) {
			best = i;
			bestlen = j - i;
		}
		i = j;
	}
	size_t k = 0;
	for (int i = 0; i < 8 && k < cap; i++) {
		if (i == best) {
			k += (size_t)snprintf(buf + k, cap - k, "::");
			i += bestlen - 1;
			continue;
		}
		bool sep = i > 0 && i != best + bestlen;
		k += (size_t)snprintf(buf + k, cap - k, "%s%x", sep ? ":" : "", g[i]);
	}
	if (cap)
		buf[k < cap ? k : cap - 1] = '\0';
}

/* ---- half floats ---- */

double
st_half_round(double d)
{
	if (!isfinite(d) || d == 0)
		return d;
	double a = fabs(d);
	if (a >= 65520.0)
		return copysign(INFINITY, d);
	int e;
	frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): 11 significant bits */
	int q = e - 11;
	if (q < -24) /* subnormal halves share the quantum 2^-24 */
		q = -24;
	return copysign(ldexp(nearbyint(ldexp(a, -q)), q), d);
}

/* The quantum of halves in the binade just above |h| (h itself a half). */
static double
half_ulp_above(double a)
{
	if (a == 0)
		return ldexp(1, -24);
	int e;
	frexp(a, &e);
	int q = e - 11;
	return ldexp(1, q < -24 ? -24 : q);
}

double
st_half_next(double h, int dir)
{
	if (isnan(h))
		return h;
	if (dir < 0)
		return -st_half_next(-h, 1);
	if (h == INFINITY)
		return h;
	if (h < 0) {
		/* going toward zero: the step is the quantum of the binade below */
		double a = -h;
		int e;
		double m = frexp(a, &e);
		double step = m == 0.5 && e - 12 >= -24 ? ldexp(1, e - 12) : half_ulp_above(a);
		double r = a - step;
		return r == 0 ? 0.0 : -r;
	}
	double r = h + half_ulp_above(h);
	return r > 65504.0 ? INFINITY : r;
}

/* ---- unsigned longs ---- */

bool
st_ulong_parse(const char *s, bool coerce, uint64_t *out)
{
	const char *p = s;
	if (*p == '+')
		p++;
	uint64_t v = 0;
	const char *d0 = p;
	bool over = false;
	while (*p >= '0' && *p <= '9') {
		unsigned dg = (unsigned)(*p++ - '0');
		if (v > (UINT64_MAX - dg) / 10)
			over = true;
		v = v * 10 + dg;
	}
	bool digits = p > d0;
	if (*p == '\0') {
		if (!digits || over)
			return false;
		*out = v;
		return true;
	}
	if (!coerce)
		return false;
	if (*p == '.' && !over) {
		const char *f0 = ++p;
		while (*p >= '0' && *p <= '9')
			p++;
		if (*p == '\0' && (digits || p > f0)) {
			*out = v; /* truncated, as ES coerces */
			return true;
		}
	}
	/* exponents and the rest: through a double, exact below 2^53 */
	char *end;
	double d = strtod(s, &end);
	if (*end || end == s || !isfinite(d) || d < 0 || d >= 18446744073709551616.0)
		return false;
	for (const char *q = s; *q; q++)
		if (!((*q >= '0' && *q <= '9') || *q == '.' || *q == '-' || *q == '+' || *q == 'e' ||
		      *q == 'E'))
			return false;
	*out = d <= 0 ? 0 : (uint64_t)d;
	return true;
}

/* ---- geo_point ---- */

#define LAT_SCALE (4294967296.0 / 180.0)
#define LON_SCALE (4294967296.0 / 360.0)

int64_t
st_geo_encode(double lat, double lon)
{
	/* Lucene's GeoEncodingUtils: floor(v * 2^32/range), the top value
	 * folded into the last cell */
	double la = floor(lat * LAT_SCALE), lo = floor(lon * LON_SCALE);
	if (la > 2147483647.0)
		la = 2147483647.0;
	if (lo > 2147483647.0)
		lo = 2147483647.0;
	int32_t a = (int32_t)la, o = (int32_t)lo;
	return (int64_t)(((uint64_t)(uint32_t)a << 32) | (uint32_t)o);
}

void
st_geo_decode(int64_t v, double *lat, double *lon)
{
	int32_t a = (int32_t)(uint32_t)((uint64_t)v >> 32), o = (int32_t)(uint32_t)(uint64_t)v;
	*lat = a / LAT_SCALE;
	*lon = o / LON_SCALE;
}

double
st_geo_distance(double lat1, double lon1, double lat2, double lon2)
{
	const double r = 6371008.7714, d2r = M_PI / 180.0; /* ES GeoUtils.EARTH_MEAN_RADIUS */
	double dlat = (lat2 - lat1) * d2r, dlon = (lon2 - lon1) * d2r;
	double a = sin(dlat / 2) * sin(dlat / 2) +
	           cos(lat1 * d2r) * cos(lat2 * d2r) * sin(dlon / 2) * sin(dlon / 2);
	if (a > 1)
		a = 1;
	return 2 * r * asin(sqrt(a));
}

static bool
geo_valid(double lat, double lon)
{
	return isfinite(lat) && isfinite(lon) && lat >= -90 && lat <= 90 && lon >= -180 &&
	       lon <= 180;
}

static bool
geohash_decode(const char *s, double *lat, double *lon)
{
	static const char b32[] = "0123456789bcdefghjkmnpqrstuvwxyz";
	double la[2] = {-90, 90}, lo[2] = {-180, 180};
	bool even = true;
	size_t n = strlen(s);
	if (n == 0 || n > 12)
		return false;
	for (size_t i = 0; i < n; i++) {
		const char *p = strchr(b32, tolower((unsigned char)s[i]));
		if (!p || !*p)
			return false;
		int v = (int)(p - b32);
		for (int bit = 4; bit >= 0; bit--) {
			double *r = even ? lo : la;
			double mid = (r[0] + r[1]) / 2;
			if (v & (1 << bit))
				r[0] = mid;
			else
				r[1] = mid;
			even = !even;
		}
	}
	*lat = (la[0] + la[1]) / 2;
	*lon = (lo[0] + lo[1]) / 2;
	return true;
}

static bool
num_of(const cJSON *v, double *out)
{
	char *end;
	if (cJSON_IsNumber(v)) {
		*out = v->valuedouble;
		return true;
	}
	if (cJSON_IsString(v) && v->valuestring[0]) {
		*out = strtod(v->valuestring, &end);
		while (*end == ' ')
			end++;
		return !*end;
	}
	return false;
}

bool
st_geo_point(const cJSON *j, double *lat, double *lon)
{
	if (cJSON_IsObject(j)) {
		const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "lat");
		const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "lon");
		int n = cJSON_GetArraySize(j);
		const cJSON *z = cJSON_GetObjectItemCaseSensitive(j, "z");
		if (!a || !o || n > 3 || (n == 3 && !z))
			return false;
		return num_of(a, lat) && num_of(o, lon) && geo_valid(*lat, *lon);
	}
	if (cJSON_IsArray(j)) {
		int n = cJSON_GetArraySize(j);
		if (n < 2 || n > 3)
			return false;
		const cJSON *o = cJSON_GetArrayItem(j, 0), *a = cJSON_GetArrayItem(j, 1);
		if (!cJSON_IsNumber(o) || !cJSON_IsNumber(a))
			return false;
		*lon = o->valuedouble;
		*lat = a->valuedouble;
		return geo_valid(*lat, *lon);
	}
	if (!cJSON_IsString(j))
		return false;
	const char *s = j->valuestring;
	while (*s == ' ')
		s++;
	if (!strncasecmp(s, "POINT", 5)) {
		double x, y;
		char close = 0;
		if (sscanf(s + 5, " ( %lf %lf %*[0-9.eE+-] %c", &x, &y, &close) == 3 ||
		    sscanf(s + 5, " ( %lf %lf %c", &x, &y, &close) == 3) {
			if (close != ')')
				return false;
			*lon = x;
			*lat = y;
			return geo_valid(*lat, *lon);
		}
		return false;
	}
	const char *comma = strchr(s, ',');
	if (comma) {
		char *end;
		*lat = strtod(s, &end);
		while (*end == ' ')
			end++;
		if (end != comma)
			return false;
		*lon = strtod(comma + 1, &end);
		while (*end == ' ')
			end++;
		if (*end == ',') { /* "lat,lon,z" */
			strtod(end + 1, &end);
			while (*end == ' ')
				end++;
		}
		return !*end && geo_valid(*lat, *lon);
	}
	return geohash_decode(s, lat, lon);
}

/* ---- range fields ---- */

static void
put_be64(uint8_t *p, uint64_t v)
{
	for (int k = 7; k >= 0; k--, v >>= 8)
		p[k] = (uint8_t)v;
}

static uint64_t
get_be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int k = 0; k < 8; k++)
		v = v << 8 | p[k];
	return v;
}

size_t
st_range_encode(st_field_type t, const st_range_bound *lo, const st_range_bound *hi,
                uint8_t out[ST_RANGE_TERM_MAX])
{
	if (t == ST_FT_IP_RANGE) {
		memcpy(out, lo->ip, ST_IP_LEN);
		memcpy(out + ST_IP_LEN, hi->ip, ST_IP_LEN);
		return 2 * ST_IP_LEN;
	}
	put_be64(out, (uint64_t)lo->i ^ 0x8000000000000000ull);
	put_be64(out + 8, (uint64_t)hi->i ^ 0x8000000000000000ull);
	return 16;
}

bool
st_range_decode(st_field_type t, const uint8_t *term, size_t n, st_range_bound *lo,
                st_range_bound *hi)
{
	memset(lo, 0, sizeof(*lo));
	memset(hi, 0, sizeof(*hi));
	if (t == ST_FT_IP_RANGE) {
		if (n != 2 * ST_IP_LEN)
			return false;
		memcpy(lo->ip, term, ST_IP_LEN);
		memcpy(hi->ip, term + ST_IP_LEN, ST_IP_LEN);
		return true;
	}
	if (n != 16)
		return false;
	lo->i = (int64_t)(get_be64(term) ^ 0x8000000000000000ull);
	hi->i = (int64_t)(get_be64(term + 8) ^ 0x8000000000000000ull);
	return true;
}

int
st_range_cmp(st_field_type t, const st_range_bound *a, const st_range_bound *b)
{
	if (t == ST_FT_IP_RANGE)
		return memcmp(a->ip, b->ip, ST_IP_LEN);
	return a->i < b->i ? -1 : a->i > b->i;
}

bool
st_range_matches(st_field_type t, st_range_rel rel, const st_range_bound *lo,
                 const st_range_bound *hi, const st_range_bound *qlo, const st_range_bound *qhi)
{
	switch (rel) {
	case ST_REL_WITHIN: /* the stored range lies inside the query's */
		return st_range_cmp(t, qlo, lo) <= 0 && st_range_cmp(t, hi, qhi) <= 0;
	case ST_REL_CONTAINS: /* the stored range holds the query's */
		return st_range_cmp(t, lo, qlo) <= 0 && st_range_cmp(t, qhi, hi) <= 0;
	default:
		return st_range_cmp(t, lo, qhi) <= 0 && st_range_cmp(t, qlo, hi) <= 0;
	}
}

void
st_range_min(st_field_type t, st_range_bound *b)
{
	memset(b, 0, sizeof(*b));
	switch (t) {
	case ST_FT_INTEGER_RANGE:
		b->i = INT32_MIN;
		break;
	case ST_FT_FLOAT_RANGE:
	case ST_FT_DOUBLE_RANGE:
		b->i = st_double_to_sortable(-INFINITY);
		break;
	case ST_FT_IP_RANGE:
		break; /* :: */
	default:
		b->i = INT64_MIN;
		break;
	}
}

void
st_range_max(st_field_type t, st_range_bound *b)
{
	memset(b, 0, sizeof(*b));
	switch (t) {
	case ST_FT_INTEGER_RANGE:
		b->i = INT32_MAX;
		break;
	case ST_FT_FLOAT_RANGE:
	case ST_FT_DOUBLE_RANGE:
		b->i = st_double_to_sortable(INFINITY);
		break;
	case ST_FT_IP_RANGE:
		memset(b->ip, 0xff, ST_IP_LEN);
		break;
	default:
		b->i = INT64_MAX;
		break;
	}
}

bool
st_range_step(st_field_type t, st_range_bound *v, int dir)
{
	st_range_bound end;
	if (dir > 0)
		st_range_max(t, &end);
	else
		st_range_min(t, &end);
	if (st_range_cmp(t, v, &end) == 0)
		return false;
	if (t == ST_FT_IP_RANGE) {
		/* add or subtract one, carrying */
		for (int k = ST_IP_LEN - 1; k >= 0; k--) {
			v->ip[k] = (uint8_t)(v->ip[k] + (dir > 0 ? 1 : -1));
			if (v->ip[k] != (dir > 0 ? 0x00 : 0xff))
				break;
		}
		return true;
	}
	if (t == ST_FT_FLOAT_RANGE) {
		float f = (float)st_sortable_to_double(v->i);
		f = nextafterf(f, dir > 0 ? INFINITY : -INFINITY);
		v->i = st_double_to_sortable((double)f);
		return true;
	}
	if (t == ST_FT_DOUBLE_RANGE) {
		double d = st_sortable_to_double(v->i);
		v->i = st_double_to_sortable(nextafter(d, dir > 0 ? INFINITY : -INFINITY));
		return true;
	}
	v->i += dir > 0 ? 1 : -1;
	return true;
}
