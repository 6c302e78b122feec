/* Time zones for date aggregations (fixed offsets and IANA zones read from
 * the system's TZif files, with the POSIX rule in the footer for instants
 * past the last listed transition), date formatting with Java patterns,
 * and date parsing with ES date math. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_sys.h"
#include "agg_int.h"

#define TZ_DIR "/usr/share/zoneinfo/"
#define TZ_MAX_FILE (1 << 20)

/* POSIX TZ rule: "CET-1CEST,M3.5.0,M10.5.0/3" */
typedef struct tz_rule_date {
	char kind; /* 'M', 'J', 'D' */
	int m, w, d, n;
	int32_t secs; /* local time of day of the change */
} tz_rule_date;

typedef struct tz_rule {
	bool valid, has_dst;
	int32_t std_off, dst_off; /* seconds east */
	tz_rule_date start, end;
} tz_rule;

struct agg_tz {
	int64_t fixed_ms; /* fixed-offset zones */
	bool fixed;
	int64_t *trans;   /* transition instants, seconds */
	int32_t *toff;    /* offset in seconds after each transition */
	size_t ntrans;
	int32_t first_off; /* before the first transition */
	tz_rule rule;
};

/* ---- civil calendar (Howard Hinnant's algorithms) ---- */

int64_t
agg_days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

void
agg_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	unsigned doe = (unsigned)(z - era * 146097);
	unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t yy = (int64_t)yoe + era * 400;
	unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	unsigned mp = (5 * doy + 2) / 153;
	*d = doy - (153 * mp + 2) / 5 + 1;
	*m = mp < 10 ? mp + 3 : mp - 9;
	*y = yy + (*m <= 2);
}

static int64_t
fdiv(int64_t a, int64_t b)
{
	int64_t q = a / b;
	if ((a % b != 0) && ((a < 0) != (b < 0)))
		q--;
	return q;
}

static bool
is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* ---- POSIX rule ---- */

static const char *
rule_name(const char *s)
{
	if (*s == '<') {
		const char *e = strchr(s, '>');
		return e ? e + 1 : NULL;
	}
	const char *b = s;
	while (isalpha((unsigned char)*s))
		s++;
	return s - b >= 3 ? s : NULL;
}

/* [+-]hh[:mm[:ss]] → seconds */
static const char *
rule_time(const char *s, int32_t *out)
{
	int sign = 1;
	if (*s == '+' || *s == '-')
		sign = *s++ == '-' ? -1 : 1;
	if (!isdigit((unsigned char)*s))
		return NULL;
	int32_t h = 0, m = 0, sec = 0;
	while (isdigit((unsigned char)*s))
		h = h * 10 + (*s++ - '0');
	if (*s == ':') {
		s++;
		while (isdigit((unsigned char)*s))
			m = m * 10 + (*s++ - '0');
		if (*s == ':') {
			s++;
			while (isdigit((unsigned char)*s))
				sec = sec * 10 + (*s++ - '0');
		}
	}
	if (h > 167)
		return NULL;
	*out = sign * (h * 3600 + m * 60 + sec);
	return s;
}

static const char *
rule_date(const char *s, tz_rule_date *d)
{
	memset(d, 0, sizeof *d);
	d->secs = 7200;
	if (*s == 'M') {
		d->kind = 'M';
		if (sscanf(s + 1, "%d.%d.%d", &d->m, &d->w, &d->d) != 3 || d->m < 1 || d->m > 12 ||
		    d->w < 1 || d->w > 5 || d->d < 0 || d->d > 6)
			return NULL;
		s++;
		while (*s && *s != '/' && *s != ',')
			s++;
	} else if (*s == 'J' || isdigit((unsigned char)*s)) {
		d->kind = *s == 'J' ? 'J' : 'D';
		if (*s == 'J')
			s++;
		while (isdigit((unsigned char)*s))
			d->n = d->n * 10 + (*s++ - '0');
	} else
		return NULL;
	if (*s == '/') {
		s = rule_time(s + 1, &d->secs);
		if (!s)
			return NULL;
	}
	return s;
}

static bool
rule_parse(const char *s, tz_rule *r)
{
	memset(r, 0, sizeof *r);
	int32_t t;
	s = rule_name(s);
	if (!s || !(s = rule_time(s, &t)))
		return false;
	r->std_off = -t;
	r->valid = true;
	if (!*s)
		return true;
	s = rule_name(s);
	if (!s)
		return false;
	r->has_dst = true;
	r->dst_off = r->std_off + 3600;
	if (*s && *s != ',') {
		if (!(s = rule_time(s, &t)))
			return false;
		r->dst_off = -t;
	}
	if (*s != ',') {
		/* no rule given: POSIX default (US rules); rare in TZif footers */
		r->start = (tz_rule_date){'M', 3, 2, 0, 0, 7200};
		r->end = (tz_rule_date){'M', 11, 1, 0, 0, 7200};
		return true;
	}
	if (!(s = rule_date(s + 1, &r->start)) || *s != ',' || !(s = rule_date(s + 1, &r->end)))
		return false;
	return true;
}

/* Local seconds since epoch (in the zone's then-current local time) at
 * which the rule date happens in year y. */
static int64_t
rule_local(const tz_rule_date *d, int64_t y)
{
	int64_t day;
	if (d->kind == 'M') {
		int64_t first = agg_days_from_civil(y, (unsigned)d->m, 1);
		int64_t dow = ((first + 4) % 7 + 7) % 7; /* 0 = Sunday; 1970-01-01 Thursday */
		int64_t off = ((d->d - dow) % 7 + 7) % 7;
		day = first + off + (int64_t)(d->w - 1) * 7;
		unsigned mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
		int64_t last = first + mdays[d->m - 1] + (d->m == 2 && is_leap(y)) - 1;
		while (day > last)
			day -= 7;
	} else if (d->kind == 'J') {
		day = agg_days_from_civil(y, 1, 1) + d->n - 1;
		if (is_leap(y) && d->n >= 60)
			day++;
	} else
		day = agg_days_from_civil(y, 1, 1) + d->n;
	return day * 86400 + d->secs;
}

static int32_t
rule_offset(const tz_rule *r, int64_t utc_s)
{
	if (!r->has_dst)
		return r->std_off;
	int64_t y;
	unsigned m, d;
	agg_civil_from_days(fdiv(utc_s + r->std_off, 86400), &y, &m, &d);
	int64_t start = rule_local(&r->start, y) - r->std_off;
	int64_t end = rule_local(&r->end, y) - r->dst_off;
	bool dst = start < end ? (utc_s >= start && utc_s < end) : !(utc_s >= end && utc_s < start);
	return dst ? r->dst_off : r->std_off;
}

/* ---- TZif ---- */

static uint32_t
be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static bool
tzif_parse(const uint8_t *p, size_t n, agg_tz *tz)
{
	if (n < 44 || memcmp(p, "TZif", 4))
		return false;
	int ver = p[4];
	uint32_t c[6];
	for (int i = 0; i < 6; i++)
		c[i] = be32(p + 20 + 4 * i);
	/* isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt */
	size_t v1 = (size_t)c[3] * 5 + (size_t)c[4] * 6 + c[5] + (size_t)c[2] * 8 + c[1] + c[0];
	size_t off = 44;
	int tsz = 4;
	if (ver >= '2') {
		off += v1;
		if (off + 44 > n || memcmp(p + off, "TZif", 4))
			return false;
		for (int i = 0; i < 6; i++)
			c[i] = be32(p + off + 20 + 4 * i);
		off += 44;
		tsz = 8;
	}
	uint32_t timecnt = c[3], typecnt = c[4];
	if (typecnt == 0 || typecnt > 256 || timecnt > 100000)
		return false;
	size_t need = (size_t)timecnt * (tsz + 1) + (size_t)typecnt * 6 + c[5] +
	              (size_t)c[2] * (tsz + 4) + c[1] + c[0];
	if (off + need > n)
		return false;
	const uint8_t *times = p + off, *idx = times + (size_t)timecnt * tsz,
	              *types = idx + timecnt;
	tz->trans = cm_calloc(AGG_MEM, timecnt ? timecnt : 1, sizeof *tz->trans);
	tz->toff = cm_calloc(AGG_MEM, timecnt ? timecnt : 1, sizeof *tz->toff);
	tz->ntrans = timecnt;
	for (uint32_t i = 0; i < timecnt; i++) {
		int64_t t = tsz == 8 ? (int64_t)((uint64_t)be32(times + 8 * i) << 32 |
		                                 be32(times + 8 * i + 4))
		                     : (int32_t)be32(times + 4 * i);
		if (idx[i] >= typecnt)
			return false;
		tz->trans[i] = t;
		tz->toff[i] = (int32_t)be32(types + 6 * idx[i]);
	}
	tz->first_off = (int32_t)be32(types);
	off += need;
	if (ver >= '2' && off < n && p[off] == '\n') {
		const uint8_t *e = memchr(p + off + 1, '\n', n - off - 1);
		if (e && e - (p + off + 1) < 128) {
			char footer[128];
			size_t fl = (size_t)(e - (p + off + 1));
			memcpy(footer, p + off + 1, fl);
			footer[fl] = 0;
			if (fl)
				rule_parse(footer, &tz->rule);
		}
	}
	return true;
}

static bool
tz_name_ok(const char *s)
{
	if (!*s || *s == '/' || strstr(s, "..") || strlen(s) > 64)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("/_+-", *s))
			return false;
	return true;
}

static bool
parse_fixed(const char *s, int64_t *ms)
{
	if (!strcmp(s, "Z") || !strcmp(s, "UTC") || !strcmp(s, "GMT") || !strcmp(s, "UT") ||
	    !strcmp(s, "Etc/UTC") || !strcmp(s, "Etc/GMT")) {
		*ms = 0;
		return true;
	}
	if (!strncmp(s, "UTC", 3) || !strncmp(s, "GMT", 3))
		s += 3;
	if (*s != '+' && *s != '-')
		return false;
	int sign = *s++ == '-' ? -1 : 1;
	int h, m = 0, sec = 0;
	size_t n = strlen(s);
	if (n == 2 || n == 1) {
		if (sscanf(s, "%d", &h) != 1)
			return false;
	} else if (n == 4 && isdigit((unsigned char)s[2])) {
		if (sscanf(s, "%2d%2d", &h, &m) != 2)
			return false;
	} else if (n == 5 && s[2] == ':') {
		if (sscanf(s, "%2d:%2d", &h, &m) != 2)
			return false;
	} else if (n == 8 && s[2] == ':' && s[5] == ':') {
		if (sscanf(s, "%2d:%2d:%2d", &h, &m, &sec) != 3)
			return false;
	} else
		return false;
	for (const char *c = s; *c; c++)
		if (!isdigit((unsigned char)*c) && *c != ':')
			return false;
	if (h > 18 || m > 59 || sec > 59)
		return false;
	*ms = sign * ((int64_t)h * 3600000 + m * 60000 + sec * 1000);
	return true;
}

cm_err
agg_tz_parse(const char *name, agg_tz **out, cm_error *err)
{
	agg_tz *tz = cm_calloc(AGG_MEM, 1, sizeof *tz);
	int64_t ms;
	if (parse_fixed(name, &ms)) {
		tz->fixed = true;
		tz->fixed_ms = ms;
		*out = tz;
		return CM_OK;
	}
	char path[128];
	char *data = NULL;
	size_t len = 0;
	if (tz_name_ok(name)) {
		snprintf(path, sizeof path, TZ_DIR "%s", name);
		if (cm_file_read(path, TZ_MAX_FILE, &data, &len) == CM_OK) {
			bool ok = tzif_parse((const uint8_t *)data, len, tz);
			cm_free(CM_MEM_COMMON, data);
			if (ok) {
				*out = tz;
				return CM_OK;
			}
		}
	}
	agg_tz_free(tz);
	return cm_error_set(err, CM_EINVAL, "Unknown time-zone ID: %s", name);
}

void
agg_tz_free(agg_tz *tz)
{
	if (!tz)
		return;
	cm_free(AGG_MEM, tz->trans);
	cm_free(AGG_MEM, tz->toff);
	cm_free(AGG_MEM, tz);
}

bool
agg_tz_is_utc(const agg_tz *tz)
{
	return !tz || (tz->fixed && tz->fixed_ms == 0);
}

int64_t
agg_tz_offset(const agg_tz *tz, int64_t utc_ms)
{
	if (!tz)
		return 0;
	if (tz->fixed)
		return tz->fixed_ms;
	int64_t s = fdiv(utc_ms, 1000);
	if (tz->ntrans == 0 || s < tz->trans[0])
		return (int64_t)(tz->ntrans == 0 && tz->rule.valid ? rule_offset(&tz->rule, s)
		                                                  : tz->first_off) *
		       1000;
	if (s >= tz->trans[tz->ntrans - 1] && tz->rule.valid)
		return (int64_t)rule_offset(&tz->rule, s) * 1000;
	size_t lo = 0, hi = tz->ntrans; /* last transition <= s */
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (tz->trans[mid] <= s)
			lo = mid;
		else
			hi = mid;
	}
	return (int64_t)tz->toff[lo] * 1000;
}

int64_t
agg_tz_offset_span(const agg_tz *tz, int64_t utc_ms, int64_t *lo, int64_t *hi)
{
	*lo = utc_ms;
	*hi = utc_ms + 1;
	if (!tz || tz->fixed) {
		*lo = INT64_MIN;
		*hi = INT64_MAX;
		return tz ? tz->fixed_ms : 0;
	}
	int64_t s = fdiv(utc_ms, 1000);
	if (tz->ntrans == 0 || (s >= tz->trans[tz->ntrans - 1] && tz->rule.valid))
		return agg_tz_offset(tz, utc_ms); /* rule region: no span cached */
	if (s < tz->trans[0]) {
		*lo = INT64_MIN;
		*hi = tz->trans[0] * 1000;
		return (int64_t)tz->first_off * 1000;
	}
	size_t l = 0, h = tz->ntrans;
	while (h - l > 1) {
		size_t mid = (l + h) / 2;
		if (tz->trans[mid] <= s)
			l = mid;
		else
			h = mid;
	}
	*lo = tz->trans[l] * 1000;
	*hi = l + 1 < tz->ntrans ? tz->trans[l + 1] * 1000 : INT64_MAX;
	return (int64_t)tz->toff[l] * 1000;
}

int64_t
agg_tz_local_to_utc(const agg_tz *tz, int64_t local_ms)
{
	if (!tz)
		return local_ms;
	if (tz->fixed)
		return local_ms - tz->fixed_ms;
	int64_t before = agg_tz_offset(tz, local_ms - 86400000);
	int64_t after = agg_tz_offset(tz, local_ms + 86400000);
	int64_t best = INT64_MAX;
	int64_t cand[3] = {before, after, agg_tz_offset(tz, local_ms)};
	for (int i = 0; i < 3; i++) {
		int64_t u = local_ms - cand[i];
		if (agg_tz_offset(tz, u) == cand[i] && u < best)
			best = u;
	}
	if (best != INT64_MAX)
		return best;
	/* a gap: java.time moves forward by the gap's length */
	return local_ms - before;
}

/* ---- formatting ---- */

static const char *month_short[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *month_long[] = {"January", "February", "March",     "April",
                                   "May",     "June",     "July",      "August",
                                   "September", "October", "November", "December"};
static const char *day_short[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
static const char *day_long[] = {"Monday", "Tuesday", "Wednesday", "Thursday",
                                 "Friday", "Saturday", "Sunday"};

static const struct {
	const char *name, *pattern;
} named_formats[] = {
    {"strict_date_optional_time", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"},
    {"iso8601", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"}, /* ES prints it as the one above */
    {"date_optional_time", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"},
    {"strict_date_optional_time_nanos", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSSSSXXX"},
    {"date_time", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"},
    {"strict_date_time", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"},
    {"date_time_no_millis", "yyyy-MM-dd'T'HH:mm:ssXXX"},
    {"strict_date_time_no_millis", "yyyy-MM-dd'T'HH:mm:ssXXX"},
    {"date", "yyyy-MM-dd"},
    {"strict_date", "yyyy-MM-dd"},
    {"year_month_day", "yyyy-MM-dd"},
    {"strict_year_month_day", "yyyy-MM-dd"},
    {"year_month", "yyyy-MM"},
    {"strict_year_month", "yyyy-MM"},
    {"year", "yyyy"},
    {"strict_year", "yyyy"},
    {"basic_date", "yyyyMMdd"},
    {"basic_date_time", "yyyyMMdd'T'HHmmss.SSSXX"},
    {"date_hour", "yyyy-MM-dd'T'HH"},
    {"strict_date_hour", "yyyy-MM-dd'T'HH"},
    {"date_hour_minute", "yyyy-MM-dd'T'HH:mm"},
    {"strict_date_hour_minute", "yyyy-MM-dd'T'HH:mm"},
    {"date_hour_minute_second", "yyyy-MM-dd'T'HH:mm:ss"},
    {"strict_date_hour_minute_second", "yyyy-MM-dd'T'HH:mm:ss"},
    {"date_hour_minute_second_millis", "yyyy-MM-dd'T'HH:mm:ss.SSS"},
    {"strict_date_hour_minute_second_millis", "yyyy-MM-dd'T'HH:mm:ss.SSS"},
    {"date_hour_minute_second_fraction", "yyyy-MM-dd'T'HH:mm:ss.SSS"},
    {"hour_minute", "HH:mm"},
    {"hour_minute_second", "HH:mm:ss"},
    {"time", "HH:mm:ss.SSSXXX"},
    {"time_no_millis", "HH:mm:ssXXX"},
    {"week_date", "YYYY-'W'ww-e"},
};

static void
put(char *buf, size_t cap, size_t *o, const char *s, size_t n)
{
	for (size_t i = 0; i < n && *o + 1 < cap; i++)
		buf[(*o)++] = s[i];
}

static void
put_num(char *buf, size_t cap, size_t *o, int64_t v, int width)
{
	char t[32];
	int n = snprintf(t, sizeof t, "%0*lld", width, (long long)v);
	put(buf, cap, o, t, (size_t)n);
}

void
agg_date_format(const agg_tz *tz, const char *format, int64_t utc_ms, char *buf, size_t cap)
{
	const char *pat = NULL;
	char first[128];
	if (format) {
		/* "a||b": format with the first */
		const char *bar = strstr(format, "||");
		size_t fl = bar ? (size_t)(bar - format) : strlen(format);
		if (fl >= sizeof first)
			fl = sizeof first - 1;
		memcpy(first, format, fl);
		first[fl] = 0;
		if (!strcmp(first, "epoch_millis")) {
			snprintf(buf, cap, "%lld", (long long)utc_ms);
			return;
		}
		if (!strcmp(first, "epoch_second")) {
			snprintf(buf, cap, "%lld", (long long)fdiv(utc_ms, 1000));
			return;
		}
		for (size_t i = 0; i < sizeof named_formats / sizeof named_formats[0]; i++)
			if (!strcmp(first, named_formats[i].name))
				pat = named_formats[i].pattern;
		if (!pat)
			pat = first;
	} else
		pat = named_formats[0].pattern;
	int64_t off = agg_tz_offset(tz, utc_ms);
	int64_t local = utc_ms + off;
	int64_t days = fdiv(local, 86400000);
	int64_t msday = local - days * 86400000;
	int64_t y;
	unsigned mo, d;
	agg_civil_from_days(days, &y, &mo, &d);
	int dow = (int)(((days + 3) % 7 + 7) % 7); /* 0 Monday */
	int64_t H = msday / 3600000, Mi = msday / 60000 % 60, S = msday / 1000 % 60,
	        ms = msday % 1000;
	size_t o = 0;
	for (const char *p = pat; *p;) {
		char c = *p;
		if (c == '\'') {
			p++;
			if (*p == '\'') {
				put(buf, cap, &o, "'", 1);
				p++;
				continue;
			}
			while (*p && *p != '\'')
				put(buf, cap, &o, p++, 1);
			if (*p)
				p++;
			continue;
		}
		if (!isalpha((unsigned char)c)) {
			put(buf, cap, &o, p++, 1);
			continue;
		}
		int n = 0;
		while (p[n] == c)
			n++;
		p += n;
		switch (c) {
		case 'y':
		case 'u':
		case 'Y':
			if (n == 2)
				put_num(buf, cap, &o, ((y % 100) + 100) % 100, 2);
			else
				put_num(buf, cap, &o, y, n < 4 ? 4 : n);
			break;
		case 'M':
		case 'L':
			if (n >= 4)
				put(buf, cap, &o, month_long[mo - 1], strlen(month_long[mo - 1]));
			else if (n == 3)
				put(buf, cap, &o, month_short[mo - 1], 3);
			else
				put_num(buf, cap, &o, mo, n);
			break;
		case 'd': put_num(buf, cap, &o, d, n); break;
		case 'D': put_num(buf, cap, &o, days - agg_days_from_civil(y, 1, 1) + 1, n); break;
		case 'H': put_num(buf, cap, &o, H, n); break;
		case 'k': put_num(buf, cap, &o, H ? H : 24, n); break;
		case 'h': put_num(buf, cap, &o, H % 12 ? H % 12 : 12, n); break;
		case 'K': put_num(buf, cap, &o, H % 12, n); break;
		case 'm': put_num(buf, cap, &o, Mi, n); break;
		case 's': put_num(buf, cap, &o, S, n); break;
		case 'S': {
			char f[16];
			snprintf(f, sizeof f, "%03lld000000", (long long)ms);
			put(buf, cap, &o, f, (size_t)(n > 9 ? 9 : n));
			break;
		}
		case 'a': put(buf, cap, &o, H < 12 ? "AM" : "PM", 2); break;
		case 'E':
		case 'e':
			if (c == 'e' && n < 3)
				put_num(buf, cap, &o, dow + 1, n);
			else if (n >= 4)
				put(buf, cap, &o, day_long[dow], strlen(day_long[dow]));
			else
				put(buf, cap, &o, day_short[dow], 3);
			break;
		case 'w': {
			/* ISO week of year */
			int64_t thursday = days - dow + 3;
			int64_t ty;
			unsigned tm, td;
			agg_civil_from_days(thursday, &ty, &tm, &td);
			int64_t wk = (thursday - agg_days_from_civil(ty, 1, 1)) / 7 + 1;
			put_num(buf, cap, &o, wk, n);
			break;
		}
		case 'X':
		case 'x':
		case 'Z':
		case 'z':
		case 'O': {
			if (off == 0 && (c == 'X' || (c == 'Z' && n >= 4))) {
				put(buf, cap, &o, "Z", 1);
				break;
			}
			int64_t a = off < 0 ? -off : off;
			char t[40];
			if (c == 'Z' && n < 4)
				snprintf(t, sizeof t, "%c%02lld%02lld", off < 0 ? '-' : '+',
				         (long long)(a / 3600000), (long long)(a / 60000 % 60));
			else if (n == 2 || (c == 'X' && n == 1))
				snprintf(t, sizeof t, "%c%02lld%02lld", off < 0 ? '-' : '+',
				         (long long)(a / 3600000), (long long)(a / 60000 % 60));
			else
				snprintf(t, sizeof t, "%c%02lld:%02lld", off < 0 ? '-' : '+',
				         (long long)(a / 3600000), (long long)(a / 60000 % 60));
			put(buf, cap, &o, t, strlen(t));
			break;
		}
		default:
			for (int i = 0; i < n; i++)
				put(buf, cap, &o, &c, 1);
		}
	}
	if (cap)
		buf[o < cap ? o : cap - 1] = 0;
}

/* ---- parsing ---- */

static bool
digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return false;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return true;
}

/* ISO 8601 subset: yyyy[-MM[-dd]][T|' 'HH[:mm[:ss[.fff]]]][Z|±HH[:mm]]; a
 * date without an offset is local to tz. */
static bool
parse_iso(const char *s, const agg_tz *tz, int64_t *out)
{
	const char *p = s;
	int sign = 1;
	if (*p == '-' || *p == '+')
		sign = *p++ == '-' ? -1 : 1;
	int y, mo = 1, d = 1, h = 0, mi = 0, sec = 0, ms = 0;
	if (!digits(&p, 4, &y))
		return false;
	if (*p == '-') {
		p++;
		if (!digits(&p, 2, &mo))
			return false;
		if (*p == '-') {
			p++;
			if (!digits(&p, 2, &d))
				return false;
		}
	}
	if (*p == 'T' || *p == ' ') {
		p++;
		if (!digits(&p, 2, &h))
			return false;
		if (*p == ':') {
			p++;
			if (!digits(&p, 2, &mi))
				return false;
			if (*p == ':') {
				p++;
				if (!digits(&p, 2, &sec))
					return false;
				if (*p == '.' || *p == ',') {
					p++;
					int nd = 0;
					while (isdigit((unsigned char)*p)) {
						if (nd < 3)
							ms = ms * 10 + (*p - '0');
						nd++;
						p++;
					}
					if (!nd)
						return false;
					for (; nd < 3; nd++)
						ms *= 10;
				}
			}
		}
	}
	if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 24 || mi > 59 || sec > 60)
		return false;
	int64_t local = (agg_days_from_civil(sign * y, (unsigned)mo, (unsigned)d) * 86400 +
	                 h * 3600 + mi * 60 + sec) *
	                    1000 +
	                ms;
	if (!*p) {
		*out = agg_tz_local_to_utc(tz, local);
		return true;
	}
	int64_t off;
	if (!parse_fixed(p, &off))
		return false;
	*out = local - off;
	return true;
}

static bool
parse_base(const char *s, size_t n, const char *format, const agg_tz *tz, int64_t *out)
{
	char buf[128];
	if (n >= sizeof buf)
		return false;
	memcpy(buf, s, n);
	buf[n] = 0;
	bool epoch_ok = !format || strstr(format, "epoch_millis") || strstr(format, "epoch_second");
	bool all_digits = n > 0;
	for (size_t i = (buf[0] == '-'); i < n; i++)
		if (!isdigit((unsigned char)buf[i]))
			all_digits = false;
	if (all_digits && epoch_ok && (n > 4 || (format && strstr(format, "epoch")))) {
		long long v = strtoll(buf, NULL, 10);
		*out = format && strstr(format, "epoch_second") && !strstr(format, "epoch_millis")
		           ? v * 1000
		           : v;
		return true;
	}
	if (parse_iso(buf, tz, out))
		return true;
	if (all_digits) {
		*out = strtoll(buf, NULL, 10);
		return true;
	}
	return st_date_parse(buf, n, format, out);
}

static int64_t
round_unit(const agg_tz *tz, char u, int64_t t, bool up)
{
	int64_t local = t + agg_tz_offset(tz, t);
	int64_t days = fdiv(local, 86400000), fl, next;
	int64_t y;
	unsigned m, d;
	agg_civil_from_days(days, &y, &m, &d);
	switch (u) {
	case 's': fl = fdiv(local, 1000) * 1000; next = fl + 1000; break;
	case 'm': fl = fdiv(local, 60000) * 60000; next = fl + 60000; break;
	case 'h':
	case 'H': fl = fdiv(local, 3600000) * 3600000; next = fl + 3600000; break;
	case 'd': fl = days * 86400000; next = fl + 86400000; break;
	case 'w': {
		int64_t dow = ((days + 3) % 7 + 7) % 7;
		fl = (days - dow) * 86400000;
		next = fl + 7 * 86400000LL;
		break;
	}
	case 'M':
		fl = agg_days_from_civil(y, m, 1) * 86400000;
		next = agg_days_from_civil(m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1) * 86400000;
		break;
	case 'y':
		fl = agg_days_from_civil(y, 1, 1) * 86400000;
		next = agg_days_from_civil(y + 1, 1, 1) * 86400000;
		break;
	default: return t;
	}
	return up ? agg_tz_local_to_utc(tz, next) - 1 : agg_tz_local_to_utc(tz, fl);
}

static int64_t
add_unit(const agg_tz *tz, char u, int64_t t, int64_t n)
{
	switch (u) {
	case 's': return t + n * 1000;
	case 'm': return t + n * 60000;
	case 'h':
	case 'H': return t + n * 3600000;
	default: break;
	}
	int64_t local = t + agg_tz_offset(tz, t);
	int64_t days = fdiv(local, 86400000), ms = local - days * 86400000;
	if (u == 'd' || u == 'w')
		return agg_tz_local_to_utc(tz, (days + n * (u == 'w' ? 7 : 1)) * 86400000 + ms);
	int64_t y;
	unsigned m, d;
	agg_civil_from_days(days, &y, &m, &d);
	int64_t mm = (int64_t)m - 1 + (u == 'y' ? 12 * n : n);
	y += fdiv(mm, 12);
	m = (unsigned)(mm - fdiv(mm, 12) * 12) + 1;
	unsigned mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	unsigned lim = mdays[m - 1] + (m == 2 && is_leap(y));
	if (d > lim)
		d = lim;
	return agg_tz_local_to_utc(tz, agg_days_from_civil(y, m, d) * 86400000 + ms);
}

bool
agg_date_parse(const char *s, const char *format, const agg_tz *tz, bool round_up, int64_t *out)
{
	const char *math;
	int64_t t;
	if (!strncmp(s, "now", 3)) {
		t = cm_wall_ms();
		math = s + 3;
	} else {
		const char *bars = strstr(s, "||");
		size_t n = bars ? (size_t)(bars - s) : strlen(s);
		if (!parse_base(s, n, format, tz, &t))
			return false;
		math = bars ? bars + 2 : s + n;
	}
	while (*math) {
		char op = *math++;
		if (op == '/') {
			if (!*math || math[1])
				return false;
			t = round_unit(tz, *math, t, round_up);
			math++;
		} else if (op == '+' || op == '-') {
			int64_t n = 0;
			bool any = false;
			while (isdigit((unsigned char)*math)) {
				n = n * 10 + (*math++ - '0');
				any = true;
				if (n > 1000000000)
					return false;
			}
			if (!any)
				n = 1;
			if (!*math || !strchr("yMwdhHms", *math))
				return false;
			t = add_unit(tz, *math++, t, op == '-' ? -n : n);
		} else
			return false;
	}
	*out = t;
	return true;
}

/* ---- sr.h: dates for the other modules ---- */

static cm_err
tz_of(const char *tz, agg_tz **out, cm_error *err)
{
	*out = NULL;
	return agg_tz_parse(tz ? tz : "UTC", out, err);
}

/* A Java pattern (not a named format) with no zone letter outside quotes. */
static bool
zoneless_pattern(const char *format)
{
	if (!format || strstr(format, "||") || !strncmp(format, "epoch_", 6))
		return false;
	for (size_t i = 0; i < sizeof named_formats / sizeof named_formats[0]; i++)
		if (!strcmp(format, named_formats[i].name))
			return false;
	bool quoted = false;
	for (const char *p = format; *p; p++) {
		if (*p == '\'')
			quoted = !quoted;
		else if (!quoted && strchr("XZxzOV", *p))
			return false;
	}
	return true;
}

cm_err
sr_date_parse(const char *s, const char *format, const char *tz, int64_t *out_ms, cm_error *err)
{
	agg_tz *z;
	cm_err rc = tz_of(tz, &z, err);
	if (rc)
		return rc;
	bool ok;
	if (strncmp(s, "now", 3) && zoneless_pattern(format)) {
		/* a pattern without a zone: the local time in tz */
		ok = st_date_parse(s, strlen(s), format, out_ms);
		if (ok)
			*out_ms = agg_tz_local_to_utc(z, *out_ms);
	} else {
		ok = agg_date_parse(s, format, z, false, out_ms);
	}
	agg_tz_free(z);
	if (!ok)
		return cm_error_set(err, CM_EINVAL, "failed to parse date field [%.200s]", s);
	return CM_OK;
}

cm_err
sr_date_format(int64_t ms, const char *format, const char *tz, char *buf, size_t cap,
               cm_error *err)
{
	agg_tz *z;
	cm_err rc = tz_of(tz, &z, err);
	if (rc)
		return rc;
	agg_date_format(z, format, ms, buf, cap);
	agg_tz_free(z);
	return CM_OK;
}
