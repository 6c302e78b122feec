/* Date parsing and rendering for date fields: ISO-8601 (Elasticsearch's
 * strict_date_optional_time), epoch forms, the common named formats and a
 * subset of Java date patterns ("yyyy/MM/dd HH:mm"), with "a||b"
 * alternatives. All arithmetic is proleptic Gregorian UTC done here, so
 * nothing depends on the process's locale or time zone. */
#include "st_types.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MS_PER_DAY 86400000LL
/* Bound on years so day counts and millis never overflow int64. */
#define MAX_YEAR 200000000LL

typedef struct {
	int64_t year;
	int month, day, hour, minute, second;
	int64_t nanos;
	int offset_min; /* minutes east of UTC */
} civil;

/* Days since 1970-01-01 (Howard Hinnant's days_from_civil). */
static int64_t
days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void
civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

static int
days_in_month(int64_t y, int m)
{
	static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
		return 29;
	return dm[m - 1];
}

static bool
civil_to_ms(const civil *c, int64_t *out)
{
	if (c->year > MAX_YEAR || c->year < -MAX_YEAR || c->month < 1 || c->month > 12 ||
	    c->day < 1 || c->day > days_in_month(c->year, c->month) || c->hour < 0 ||
	    c->hour > 23 || c->minute < 0 || c->minute > 59 || c->second < 0 || c->second > 59)
		return false;
	int64_t days = days_from_civil(c->year, c->month, c->day);
	*out = days * MS_PER_DAY + (int64_t)c->hour * 3600000 + (int64_t)c->minute * 60000 +
	       (int64_t)c->second * 1000 + c->nanos / 1000000 - (int64_t)c->offset_min * 60000;
	return true;
}

/* Reads between min and max digits; returns the count read (0 = failure). */
static int
digits(const char *s, size_t n, size_t *p, int min, int max, int64_t *v)
{
	int k = 0;
	int64_t x = 0;
	while (*p + k < n && k < max && s[*p + k] >= '0' && s[*p + k] <= '9') {
		x = x * 10 + (s[*p + k] - '0');
		k++;
	}
	if (k < min)
		return 0;
	*p += (size_t)k;
	*v = x;
	return k;
}

static bool
fraction(const char *s, size_t n, size_t *p, int min, int max, int64_t *nanos)
{
	int64_t v;
	int k = digits(s, n, p, min, max, &v);
	if (k == 0)
		return false;
	for (int i = k; i < 9; i++)
		v *= 10;
	*nanos = v;
	return true;
}

/* Z, z, +HH, +HHmm, +HH:mm (and '-'). */
static bool
zone(const char *s, size_t n, size_t *p, int *offset_min)
{
	if (*p < n && (s[*p] == 'Z' || s[*p] == 'z')) {
		(*p)++;
		*offset_min = 0;
		return true;
	}
	if (*p >= n || (s[*p] != '+' && s[*p] != '-'))
		return false;
	int sign = s[*p] == '-' ? -1 : 1;
	size_t q = *p + 1;
	int64_t h, m = 0;
	if (digits(s, n, &q, 2, 2, &h) == 0 || h > 18)
		return false;
	if (q < n && s[q] == ':') {
		q++;
		if (digits(s, n, &q, 2, 2, &m) == 0)
			return false;
	} else if (q < n && s[q] >= '0' && s[q] <= '9') {
		if (digits(s, n, &q, 2, 2, &m) == 0)
			return false;
	}
	if (m > 59)
		return false;
	*offset_min = sign * (int)(h * 60 + m);
	*p = q;
	return true;
}

/* yyyy[-MM[-dd[THH[:mm[:ss[.fff]]][zone]]]]; `strict` wants two-digit
 * month/day/hour fields (strict_date_optional_time vs date_optional_time). */
static bool
parse_iso(const char *s, size_t n, bool strict, int64_t *out, int64_t *sub)
{
	civil c = {.month = 1, .day = 1};
	size_t p = 0;
	int64_t v;
	int mn = strict ? 2 : 1;
	bool neg = false;
	if (!strict && p < n && (s[p] == '-' || s[p] == '+'))
		neg = s[p++] == '-';
	if (digits(s, n, &p, 4, strict ? 4 : 9, &v) == 0)
		return false;
	c.year = neg ? -v : v;
	if (p < n && s[p] == '-') {
		p++;
		if (digits(s, n, &p, mn, 2, &v) == 0)
			return false;
		c.month = (int)v;
		if (p < n && s[p] == '-') {
			p++;
			if (digits(s, n, &p, mn, 2, &v) == 0)
				return false;
			c.day = (int)v;
			if (p < n && (s[p] == 'T' || s[p] == 't')) {
				p++;
				if (digits(s, n, &p, mn, 2, &v) == 0)
					return false;
				c.hour = (int)v;
				if (p < n && s[p] == ':') {
					p++;
					if (digits(s, n, &p, mn, 2, &v) == 0)
						return false;
					c.minute = (int)v;
					if (p < n && s[p] == ':') {
						p++;
						if (digits(s, n, &p, mn, 2, &v) == 0)
							return false;
						c.second = (int)v;
						if (p < n && (s[p] == '.' || s[p] == ',')) {
							p++;
							if (!fraction(s, n, &p, 1, 9, &c.nanos))
								return false;
						}
					}
				}
				if (p < n && !zone(s, n, &p, &c.offset_min))
					return false;
			}
		}
	}
	*sub = c.nanos % 1000000;
	return p == n && civil_to_ms(&c, out);
}

/* [-]digits[.digits] scaled by `scale` to millis. */
static bool
parse_epoch(const char *s, size_t n, int64_t scale, int64_t *out, int64_t *sub)
{
	size_t p = 0;
	bool neg = false;
	if (p < n && s[p] == '-') {
		neg = true;
		p++;
	}
	int64_t v = 0;
	size_t d0 = p;
	while (p < n && s[p] >= '0' && s[p] <= '9') {
		if (v > (INT64_MAX - 9) / 10 / scale)
			return false;
		v = v * 10 + (s[p++] - '0');
	}
	if (p == d0)
		return false;
	v *= scale;
	if (p < n && s[p] == '.') {
		/* sub-millisecond digits are dropped; seconds keep three */
		p++;
		size_t f0 = p;
		int k = 0;
		int64_t frac = 0, ns = 0;
		/* the digits below a millisecond, for date_nanos */
		int skip = scale == 1000 ? 3 : 0;
		while (p < n && s[p] >= '0' && s[p] <= '9') {
			if (scale == 1000 && k < 3)
				frac = frac * 10 + (s[p] - '0');
			else if (k >= skip && k < skip + 6)
				ns = ns * 10 + (s[p] - '0');
			k++;
			p++;
		}
		for (int i = k - skip < 0 ? 0 : k - skip; i < 6; i++)
			ns *= 10;
		*sub = neg ? -ns : ns;
		if (p == f0)
			return false;
		if (scale == 1000) {
			for (int i = k < 3 ? k : 3; i < 3; i++)
				frac *= 10;
			v += frac;
		}
	}
	if (p != n)
		return false;
	*out = neg ? -v : v;
	return true;
}

/* ---- Java-style patterns (a subset: y M d H m s S X Z, 'literal', [optional]) ---- */

typedef struct {
	const char *s;
	size_t n;
	size_t p;
	civil c;
} pat_state;

/* Runs pattern [pat, end) against the input. Returns false on mismatch;
 * *bad is set when the pattern itself is unsupported. */
static bool
run_pattern(const char *pat, const char *end, pat_state *st, bool *bad)
{
	while (pat < end) {
		char ch = *pat;
		if (ch == '[') {
			/* find the matching ']' */
			int depth = 1;
			const char *q = pat + 1;
			while (q < end && depth > 0) {
				if (*q == '[')
					depth++;
				else if (*q == ']')
					depth--;
				if (depth > 0)
					q++;
			}
			if (q >= end) {
				*bad = true;
				return false;
			}
			pat_state save = *st;
			if (!run_pattern(pat + 1, q, st, bad)) {
				if (*bad)
					return false;
				*st = save;
			}
			pat = q + 1;
			continue;
		}
		if (ch == '\'') {
			const char *q = pat + 1;
			while (q < end && *q != '\'')
				q++;
			if (q >= end) {
				*bad = true;
				return false;
			}
			size_t len = (size_t)(q - pat - 1);
			if (len == 0) { /* '' is a literal quote */
				if (st->p >= st->n || st->s[st->p] != '\'')
					return false;
				st->p++;
			} else {
				if (st->n - st->p < len || memcmp(st->s + st->p, pat + 1, len) != 0)
					return false;
				st->p += len;
			}
			pat = q + 1;
			continue;
		}
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))) {
			if (st->p >= st->n || st->s[st->p] != ch)
				return false;
			st->p++;
			pat++;
			continue;
		}
		int count = 1;
		while (pat + count < end && pat[count] == ch)
			count++;
		pat += count;
		int64_t v;
		int mn = count, mx = count < 2 ? 2 : count;
		switch (ch) {
		case 'y':
		case 'u':
			if (count == 2) {
				if (digits(st->s, st->n, &st->p, 2, 2, &v) == 0)
					return false;
				st->c.year = 2000 + v;
			} else {
				if (digits(st->s, st->n, &st->p, count < 4 ? 1 : 4,
				           count < 4 ? 9 : count, &v) == 0)
					return false;
				st->c.year = v;
			}
			break;
		case 'M':
			if (count > 2 || digits(st->s, st->n, &st->p, mn, mx, &v) == 0)
				return false;
			st->c.month = (int)v;
			break;
		case 'd':
			if (count > 2 || digits(st->s, st->n, &st->p, mn, mx, &v) == 0)
				return false;
			st->c.day = (int)v;
			break;
		case 'H':
			if (count > 2 || digits(st->s, st->n, &st->p, mn, mx, &v) == 0)
				return false;
			st->c.hour = (int)v;
			break;
		case 'm':
			if (count > 2 || digits(st->s, st->n, &st->p, mn, mx, &v) == 0)
				return false;
			st->c.minute = (int)v;
			break;
		case 's':
			if (count > 2 || digits(st->s, st->n, &st->p, mn, mx, &v) == 0)
				return false;
			st->c.second = (int)v;
			break;
		case 'S':
			if (count > 9 || !fraction(st->s, st->n, &st->p, 1, count, &st->c.nanos))
				return false;
			break;
		case 'X':
		case 'Z':
		case 'x':
			if (count > 5 || !zone(st->s, st->n, &st->p, &st->c.offset_min))
				return false;
			break;
		default:
			*bad = true;
			return false;
		}
	}
	return true;
}

static bool
parse_pattern(const char *pat, size_t plen, const char *s, size_t n, int64_t *out, int64_t *sub,
              bool *bad)
{
	pat_state st = {.s = s, .n = n, .c = {.year = 1970, .month = 1, .day = 1}};
	if (!run_pattern(pat, pat + plen, &st, bad) || st.p != n)
		return false;
	*sub = st.c.nanos % 1000000;
	return civil_to_ms(&st.c, out);
}

/* Named formats that are plain patterns. */
static const struct {
	const char *name, *pattern;
} named_patterns[] = {
    {"basic_date", "yyyyMMdd"},
    {"basic_date_time", "yyyyMMdd'T'HHmmss.SSSZ"},
    {"basic_date_time_no_millis", "yyyyMMdd'T'HHmmssZ"},
    {"strict_date", "yyyy-MM-dd"},
    {"date", "yyyy-MM-dd"},
    {"year_month_day", "yyyy-MM-dd"},
    {"strict_year_month_day", "yyyy-MM-dd"},
    {"strict_date_time", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSSSSZ"},
    {"date_time", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSSSSZ"},
    {"strict_date_time_no_millis", "yyyy-MM-dd'T'HH:mm:ssZ"},
    {"date_time_no_millis", "yyyy-MM-dd'T'HH:mm:ssZ"},
    {"strict_date_hour_minute_second", "yyyy-MM-dd'T'HH:mm:ss"},
    {"date_hour_minute_second", "yyyy-MM-dd'T'HH:mm:ss"},
    {"strict_date_hour_minute_second_millis", "yyyy-MM-dd'T'HH:mm:ss.SSS"},
    {"date_hour_minute_second_millis", "yyyy-MM-dd'T'HH:mm:ss.SSS"},
    {"strict_date_hour_minute", "yyyy-MM-dd'T'HH:mm"},
    {"date_hour_minute", "yyyy-MM-dd'T'HH:mm"},
    {"strict_date_hour", "yyyy-MM-dd'T'HH"},
    {"date_hour", "yyyy-MM-dd'T'HH"},
    {"strict_year_month", "yyyy-MM"},
    {"year_month", "yyyy-MM"},
    {"strict_year", "yyyy"},
    {"year", "yyyy"},
    {"strict_hour_minute_second", "HH:mm:ss"},
    {"hour_minute_second", "HH:mm:ss"},
};

static bool
name_is(const char *a, size_t an, const char *b)
{
	return strlen(b) == an && memcmp(a, b, an) == 0;
}

/* One alternative. Returns false on mismatch, *bad for an unknown format. */
static bool
parse_one(const char *f, size_t fn, const char *s, size_t n, int64_t *out, int64_t *sub,
          bool *bad)
{
	*sub = 0;
	if (name_is(f, fn, "strict_date_optional_time") ||
	    name_is(f, fn, "strict_date_optional_time_nanos"))
		return parse_iso(s, n, true, out, sub);
	if (name_is(f, fn, "date_optional_time") || name_is(f, fn, "iso8601"))
		return parse_iso(s, n, false, out, sub);
	if (name_is(f, fn, "epoch_millis"))
		return parse_epoch(s, n, 1, out, sub);
	if (name_is(f, fn, "epoch_second"))
		return parse_epoch(s, n, 1000, out, sub);
	for (size_t i = 0; i < sizeof(named_patterns) / sizeof(named_patterns[0]); i++) {
		if (name_is(f, fn, named_patterns[i].name)) {
			const char *p = named_patterns[i].pattern;
			return parse_pattern(p, strlen(p), s, n, out, sub, bad);
		}
	}
	/* a name-like word (letters and '_' only, longer than a pattern
	 * letter run) that we do not know is an unknown named format */
	bool word = fn > 0;
	for (size_t i = 0; i < fn; i++)
		word &= (f[i] >= 'a' && f[i] <= 'z') || f[i] == '_';
	if (word && memchr(f, '_', fn) != NULL) {
		*bad = true;
		return false;
	}
	return parse_pattern(f, fn, s, n, out, sub, bad);
}

static bool
parse_formats(const char *s, size_t n, const char *format, int64_t *epoch_ms, int64_t *sub,
              bool *bad)
{
	if (format == NULL)
		format = "strict_date_optional_time||epoch_millis";
	const char *f = format;
	for (;;) {
		const char *sep = strstr(f, "||");
		size_t fn = sep ? (size_t)(sep - f) : strlen(f);
		if (parse_one(f, fn, s, n, epoch_ms, sub, bad))
			return true;
		if (*bad || sep == NULL)
			return false;
		f = sep + 2;
	}
}

bool
st_date_parse(const char *s, size_t n, const char *format, int64_t *epoch_ms)
{
	bool bad = false;
	if (s == NULL || n == 0 || n > 128)
		return false;
	int64_t sub;
	return parse_formats(s, n, format, epoch_ms, &sub, &bad);
}

bool
st_date_parse_ns(const char *s, size_t n, const char *format, int64_t *epoch_ns)
{
	bool bad = false;
	int64_t ms, sub;
	if (s == NULL || n == 0 || n > 128 || !parse_formats(s, n, format, &ms, &sub, &bad))
		return false;
	/* 2262-04-11T23:47:16.854775807Z is the last nanosecond a long holds */
	if (ms < 0 || ms > INT64_MAX / 1000000)
		return false;
	int64_t base = ms * 1000000;
	if (sub > INT64_MAX - base)
		return false;
	int64_t ns = base + sub;
	if (ns < 0)
		return false;
	*epoch_ns = ns;
	return true;
}

/* Checks a pattern's syntax without input: balanced [] and quotes, known
 * letters in supported widths. */
static bool
pattern_valid(const char *f, size_t fn)
{
	int depth = 0;
	for (size_t i = 0; i < fn;) {
		char ch = f[i];
		if (ch == '\'') {
			const char *q = memchr(f + i + 1, '\'', fn - i - 1);
			if (q == NULL)
				return false;
			i = (size_t)(q - f) + 1;
			continue;
		}
		if (ch == '[' || ch == ']') {
			depth += ch == '[' ? 1 : -1;
			if (depth < 0)
				return false;
			i++;
			continue;
		}
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))) {
			i++;
			continue;
		}
		size_t count = 1;
		while (i + count < fn && f[i + count] == ch)
			count++;
		i += count;
		if (strchr("MdHms", ch) != NULL && count <= 2)
			continue;
		if ((ch == 'y' || ch == 'u') && count <= 9)
			continue;
		if (ch == 'S' && count <= 9)
			continue;
		if (strchr("XZx", ch) != NULL && count <= 5)
			continue;
		return false;
	}
	return depth == 0;
}

static bool
alternative_valid(const char *f, size_t fn)
{
	static const char *const special[] = {"strict_date_optional_time",
	                                      "strict_date_optional_time_nanos",
	                                      "date_optional_time",
	                                      "iso8601",
	                                      "epoch_millis",
	                                      "epoch_second"};
	if (fn == 0)
		return false;
	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
		if (name_is(f, fn, special[i]))
			return true;
	for (size_t i = 0; i < sizeof(named_patterns) / sizeof(named_patterns[0]); i++)
		if (name_is(f, fn, named_patterns[i].name))
			return true;
	return pattern_valid(f, fn);
}

bool
st_date_format_valid(const char *format)
{
	if (format == NULL)
		return true;
	const char *f = format;
	for (;;) {
		const char *sep = strstr(f, "||");
		size_t fn = sep ? (size_t)(sep - f) : strlen(f);
		if (!alternative_valid(f, fn))
			return false;
		if (sep == NULL)
			return true;
		f = sep + 2;
	}
}

void
st_date_format(int64_t epoch_ms, char *buf, size_t cap)
{
	int64_t days = epoch_ms / MS_PER_DAY, rem = epoch_ms % MS_PER_DAY;
	if (rem < 0) {
		rem += MS_PER_DAY;
		days--;
	}
	int64_t y;
	int m, d;
	civil_from_days(days, &y, &m, &d);
	int ms = (int)(rem % 1000), sec = (int)(rem / 1000 % 60), min = (int)(rem / 60000 % 60),
	    hour = (int)(rem / 3600000);
	snprintf(buf, cap, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02d.%03dZ", y, m, d, hour, min, sec,
	         ms);
}

void
st_date_format_ns(int64_t epoch_ns, char *buf, size_t cap)
{
	int64_t ms = epoch_ns / 1000000, sub = epoch_ns % 1000000;
	if (sub < 0) {
		sub += 1000000;
		ms--;
	}
	char tmp[48];
	st_date_format(ms, tmp, sizeof(tmp));
	size_t len = strlen(tmp); /* ends ".fffZ" */
	if (sub && len >= 1 && len + 6 < sizeof(tmp)) {
		char digits[8];
		snprintf(digits, sizeof(digits), "%06d", (int)sub);
		int keep = 6;
		while (keep > 0 && digits[keep - 1] == '0')
			keep--;
		memcpy(tmp + len - 1, digits, (size_t)keep);
		tmp[len - 1 + (size_t)keep] = 'Z';
		tmp[len + (size_t)keep] = '\0';
	}
	snprintf(buf, cap, "%s", tmp);
}
