/* IP and CIDR parsing and printing, half-float rounding, unsigned_long
 * text, date_nanos: the value codecs the newer field types rest on. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "../tests/support/check.h"
#include "st_types.h"

static int
ip_is(const char *s, const char *hex)
{
	uint8_t ip[ST_IP_LEN];
	if (!st_ip_parse(s, strlen(s), ip))
		return 0;
	char got[33];
	for (int i = 0; i < 16; i++)
		snprintf(got + 2 * i, 3, "%02x", ip[i]);
	if (strcmp(got, hex) != 0) {
		fprintf(stderr, "%s: got %s want %s\n", s, got, hex);
		return 0;
	}
	return 1;
}

static int
prints_as(const char *s, const char *want)
{
	uint8_t ip[ST_IP_LEN];
	char buf[ST_IP_STRLEN];
	if (!st_ip_parse(s, strlen(s), ip))
		return 0;
	st_ip_format(ip, buf, sizeof buf);
	if (strcmp(buf, want) != 0) {
		fprintf(stderr, "%s: printed %s want %s\n", s, buf, want);
		return 0;
	}
	return 1;
}

static void
test_ip_parse(void)
{
	CHECK(ip_is("1.2.3.4", "00000000000000000000ffff01020304"));
	CHECK(ip_is("0.0.0.0", "00000000000000000000ffff00000000"));
	CHECK(ip_is("255.255.255.255", "00000000000000000000ffffffffffff"));
	CHECK(ip_is("::", "00000000000000000000000000000000"));
	CHECK(ip_is("::1", "00000000000000000000000000000001"));
	CHECK(ip_is("1::", "00010000000000000000000000000000"));
	CHECK(ip_is("2001:db8::ff00:42:8329", "20010db8000000000000ff0000428329"));
	CHECK(ip_is("2001:0DB8:0000:0000:0000:ff00:0042:8329", "20010db8000000000000ff0000428329"));
	CHECK(ip_is("::ffff:1.2.3.4", "00000000000000000000ffff01020304"));
	CHECK(ip_is("64:ff9b::192.0.2.33", "0064ff9b0000000000000000c0000221"));
	CHECK(ip_is("1:2:3:4:5:6:7:8", "00010002000300040005000600070008"));
	CHECK(ip_is("1:2:3:4:5:6::8", "00010002000300040005000600000008"));
	const char *bad[] = {"",
	                     "1.2.3",
	                     "1.2.3.4.5",
	                     "256.1.1.1",
	                     "01.2.3.4",
	                     "1.2.3.-4",
	                     "1..2.3",
	                     "1.2.3.4 ",
	                     " 1.2.3.4",
	                     "a.b.c.d",
	                     ":",
	                     ":::",
	                     "1::2::3",
	                     "1:2:3:4:5:6:7:8:9",
	                     "1:2:3:4:5:6:7",
	                     "12345::",
	                     "g::",
	                     ":1::",
	                     "1::2:",
	                     "fe80::1%eth0",
	                     "::1.2.3",
	                     "1.2.3.4::",
	                     "::1.2.3.4:5",
	                     "1:2:3:4:5:6:7:1.2.3.4",
	                     "1:2:3:4:5:6:7::8"};
	uint8_t ip[ST_IP_LEN];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECKF(!st_ip_parse(bad[i], strlen(bad[i]), ip), "[%s] accepted", bad[i]);
}

static void
test_ip_format(void)
{
	CHECK(prints_as("1.2.3.4", "1.2.3.4"));
	CHECK(prints_as("::ffff:10.0.0.2", "10.0.0.2"));
	CHECK(prints_as("0:0:0:0:0:0:0:1", "::1"));
	CHECK(prints_as("::", "::"));
	CHECK(prints_as("2001:0db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"));   /* first longest run */
	CHECK(prints_as("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1")); /* one zero group stays */
	CHECK(prints_as("1:0:0:2:0:0:0:3", "1:0:0:2::3"));
	CHECK(prints_as("1::", "1::"));
	CHECK(prints_as("::2:3", "::2:3"));
	CHECK(prints_as("::1.2.3.4", "::102:304"));
}

static int
cidr_is(const char *s, const char *lo_s, const char *hi_s)
{
	uint8_t lo[16], hi[16], wl[16], wh[16];
	if (!st_cidr_parse(s, strlen(s), lo, hi))
		return 0;
	st_ip_parse(lo_s, strlen(lo_s), wl);
	st_ip_parse(hi_s, strlen(hi_s), wh);
	return memcmp(lo, wl, 16) == 0 && memcmp(hi, wh, 16) == 0;
}

static void
test_cidr(void)
{
	CHECK(cidr_is("192.168.0.0/16", "192.168.0.0", "192.168.255.255"));
	CHECK(cidr_is("192.168.7.9/16", "192.168.0.0", "192.168.255.255"));
	CHECK(cidr_is("10.1.2.3/32", "10.1.2.3", "10.1.2.3"));
	CHECK(cidr_is("10.1.2.3/0", "0.0.0.0", "255.255.255.255"));
	CHECK(cidr_is("10.1.2.3/9", "10.0.0.0", "10.127.255.255"));
	CHECK(cidr_is("2001:db8::/32", "2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"));
	CHECK(cidr_is("::/0", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
	CHECK(cidr_is("::1/128", "::1", "::1"));
	CHECK(cidr_is("2001:db8::1/127", "2001:db8::", "2001:db8::1"));
	const char *bad[] = {"10.0.0.0/33", "10.0.0.0/",    "10.0.0.0", "/8",
	                     "10.0.0.0/-1", "10.0.0.0/8/8", "::/129",   "::/1x",
	                     "300.0.0.0/8", "10.0.0.0/0008"};
	uint8_t lo[16], hi[16];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECKF(!st_cidr_parse(bad[i], strlen(bad[i]), lo, hi), "[%s] accepted", bad[i]);
}

static void
test_half(void)
{
	CHECK(st_half_round(0.1) == 0.0999755859375);
	CHECK(st_half_round(1.5) == 1.5);
	CHECK(st_half_round(2049) == 2048); /* tie to even */
	CHECK(st_half_round(2051) == 2052);
	CHECK(st_half_round(65504) == 65504);
	CHECK(st_half_round(65519) == 65504);
	CHECK(isinf(st_half_round(65520)));
	CHECK(st_half_round(-3.14159) == -3.140625);
	CHECK(st_half_round(ldexp(1, -24)) == ldexp(1, -24)); /* smallest subnormal */
	CHECK(st_half_round(ldexp(1, -26)) == 0);
	CHECK(st_half_next(1, 1) == 1 + ldexp(1, -10));
	CHECK(st_half_next(1, -1) == 1 - ldexp(1, -11));
	CHECK(st_half_next(0, 1) == ldexp(1, -24));
	CHECK(st_half_next(0, -1) == -ldexp(1, -24));
	CHECK(st_half_next(-1, 1) == -(1 - ldexp(1, -11)));
	CHECK(st_half_next(-1, -1) == -(1 + ldexp(1, -10)));
	CHECK(isinf(st_half_next(65504, 1)));
	CHECK(st_half_next(ldexp(1, -14), -1) == ldexp(1, -14) - ldexp(1, -24));
	/* every step lands on a half and walks them all in order */
	double h = -65504;
	int steps = 0;
	while (h < 65504 && steps < 70000) {
		double nx = st_half_next(h, 1);
		CHECK(nx > h && st_half_round(nx) == nx);
		CHECK(st_half_next(nx, -1) == h || (h == 0 && nx == ldexp(1, -24)));
		h = nx;
		steps++;
	}
	/* 2 * (30 binades * 1024 + 1023 subnormals) + zero = 63487 finite halves */
	CHECKF(steps == 63486, "steps %d", steps);
}

static void
test_ulong(void)
{
	uint64_t u;
	CHECK(st_ulong_parse("0", false, &u) && u == 0);
	CHECK(st_ulong_parse("18446744073709551615", false, &u) && u == UINT64_MAX);
	CHECK(!st_ulong_parse("18446744073709551616", false, &u));
	CHECK(!st_ulong_parse("-1", true, &u));
	CHECK(!st_ulong_parse("1.5", false, &u));
	CHECK(st_ulong_parse("1.5", true, &u) && u == 1);
	CHECK(st_ulong_parse("1e3", true, &u) && u == 1000);
	CHECK(!st_ulong_parse("", true, &u));
	CHECK(!st_ulong_parse("12x", true, &u));
	CHECK(!st_ulong_parse("nan", true, &u));
	CHECK(st_ulong_to_col(0) < st_ulong_to_col(1));
	CHECK(st_ulong_to_col(INT64_MAX) < st_ulong_to_col((uint64_t)INT64_MAX + 1));
	CHECK(st_col_to_ulong(st_ulong_to_col(UINT64_MAX)) == UINT64_MAX);
}

static void
test_nanos(void)
{
	int64_t ns;
	char buf[48];
	CHECK(st_date_parse_ns("2024-01-01T00:00:00.123456789Z", 30, NULL, &ns) &&
	      ns == 1704067200123456789LL);
	CHECK(st_date_parse_ns("1704067200123", 13, NULL, &ns) && ns == 1704067200123000000LL);
	CHECK(st_date_parse_ns("1704067200123.5", 15, NULL, &ns) && ns == 1704067200123500000LL);
	CHECK(st_date_parse_ns("1704067200.000000001", 20, "epoch_second", &ns) &&
	      ns == 1704067200000000001LL);
	CHECK(!st_date_parse_ns("1969-12-31T23:59:59Z", 20, NULL, &ns));
	CHECK(st_date_parse_ns("2262-04-11T23:47:16.854775807Z", 30, NULL, &ns) && ns == INT64_MAX);
	CHECK(!st_date_parse_ns("2262-04-11T23:47:16.854775808Z", 30, NULL, &ns));
	st_date_format_ns(1704067200123456789LL, buf, sizeof buf);
	CHECK(strcmp(buf, "2024-01-01T00:00:00.123456789Z") == 0);
	st_date_format_ns(1704067200120000000LL, buf, sizeof buf);
	CHECK(strcmp(buf, "2024-01-01T00:00:00.120Z") == 0);
	st_date_format_ns(1704067200123400000LL, buf, sizeof buf);
	CHECK(strcmp(buf, "2024-01-01T00:00:00.1234Z") == 0);
}

static bool
geo_of(const char *json, double *lat, double *lon)
{
	cJSON *j = cJSON_Parse(json);
	bool ok = st_geo_point(j, lat, lon);
	cJSON_Delete(j);
	return ok;
}

static void
test_geo(void)
{
	double lat, lon;
	CHECK(geo_of("{\"lat\":41.12,\"lon\":-71.34}", &lat, &lon) && lat == 41.12 && lon == -71.34);
	CHECK(geo_of("\"41.12,-71.34\"", &lat, &lon) && lat == 41.12 && lon == -71.34);
	CHECK(geo_of("\" 41.12 , -71.34 \"", &lat, &lon) && lat == 41.12);
	CHECK(geo_of("[-71.34, 41.12]", &lat, &lon) && lat == 41.12 && lon == -71.34);
	CHECK(geo_of("[-71.34, 41.12, 10]", &lat, &lon) && lat == 41.12); /* z dropped */
	CHECK(geo_of("\"POINT (-71.34 41.12)\"", &lat, &lon) && lat == 41.12 && lon == -71.34);
	/* ES's documented geohash: drm3btev3e86 is 41.12, -71.34 */
	CHECK(geo_of("\"drm3btev3e86\"", &lat, &lon) && fabs(lat - 41.12) < 1e-6 &&
	      fabs(lon + 71.34) < 1e-6);
	CHECK(!geo_of("\"91,0\"", &lat, &lon));
	CHECK(!geo_of("{\"lat\":1}", &lat, &lon));
	CHECK(!geo_of("[1]", &lat, &lon));
	CHECK(!geo_of("\"not a hash!\"", &lat, &lon));
	CHECK(!geo_of("\"POINT (1 2\"", &lat, &lon));
	CHECK(!geo_of("{\"lat\":1,\"lon\":2,\"x\":3}", &lat, &lon));
	/* encoding: within a cell of ~1e-7 degrees, monotonic in latitude */
	double la, lo;
	st_geo_decode(st_geo_encode(41.12, -71.34), &la, &lo);
	CHECK(fabs(la - 41.12) < 1e-7 && fabs(lo + 71.34) < 1e-7 && la <= 41.12 && lo <= -71.34);
	st_geo_decode(st_geo_encode(90, 180), &la, &lo);
	CHECK(la > 89.9999999 && lo > 179.9999999);
	st_geo_decode(st_geo_encode(-90, -180), &la, &lo);
	CHECK(la == -90 && lo == -180);
	CHECK(st_geo_encode(10, 179) < st_geo_encode(10.001, -179));
	/* Amsterdam - Paris: 430 km by ES's haversine */
	double d = st_geo_distance(52.37, 4.89, 48.85, 2.35);
	CHECK(d > 429000 && d < 432000);
	CHECK(st_geo_distance(1, 2, 1, 2) == 0);
}

static st_range_bound
lb(int64_t i)
{
	st_range_bound b;
	memset(&b, 0, sizeof b);
	b.i = i;
	return b;
}

/* Relations of a query range to a stored one, ES's range query on range
 * fields; the term encoding sorts by lower then upper bound. */
static void
test_ranges(void)
{
	const st_field_type L = ST_FT_LONG_RANGE;
	st_range_bound lo = lb(10), hi = lb(20);
	struct {
		int64_t qlo, qhi;
		bool intersects, within, contains;
	} cases[] = {
	    {0, 9, false, false, false},  {0, 10, true, false, false},
	    {15, 15, true, false, true},  {10, 20, true, true, true},
	    {5, 25, true, true, false},   {12, 30, true, false, false},
	    {20, 30, true, false, false}, {21, 30, false, false, false},
	    {10, 19, true, false, true},  {11, 20, true, false, true},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		st_range_bound ql = lb(cases[k].qlo), qh = lb(cases[k].qhi);
		CHECKF(st_range_matches(L, ST_REL_INTERSECTS, &lo, &hi, &ql, &qh) ==
		           cases[k].intersects,
		       "intersects %zu", k);
		CHECKF(st_range_matches(L, ST_REL_WITHIN, &lo, &hi, &ql, &qh) == cases[k].within,
		       "within %zu", k);
		CHECKF(st_range_matches(L, ST_REL_CONTAINS, &lo, &hi, &ql, &qh) ==
		           cases[k].contains,
		       "contains %zu", k);
	}
	/* the encoding round-trips and its bytes sort as (lo, hi) */
	uint8_t a[ST_RANGE_TERM_MAX], b[ST_RANGE_TERM_MAX];
	st_range_bound x = lb(-5), y = lb(3), dlo, dhi;
	size_t na = st_range_encode(L, &x, &y, a);
	CHECK(na == 16 && st_range_decode(L, a, na, &dlo, &dhi) && dlo.i == -5 && dhi.i == 3);
	st_range_bound z = lb(-4), w = lb(-100);
	size_t nb = st_range_encode(L, &z, &w, b);
	CHECK(memcmp(a, b, na) < 0 && nb == na);
	CHECK(!st_range_decode(L, a, 15, &dlo, &dhi));
	/* exclusive bounds step to the next value; the extremes do not */
	st_range_bound v = lb(7);
	CHECK(st_range_step(ST_FT_INTEGER_RANGE, &v, 1) && v.i == 8);
	st_range_max(ST_FT_INTEGER_RANGE, &v);
	CHECK(v.i == INT32_MAX && !st_range_step(ST_FT_INTEGER_RANGE, &v, 1));
	v = lb(st_double_to_sortable(1.0));
	CHECK(st_range_step(ST_FT_FLOAT_RANGE, &v, 1) &&
	      st_sortable_to_double(v.i) == (double)nextafterf(1.0f, 2.0f));
	v = lb(st_double_to_sortable(1.0));
	CHECK(st_range_step(ST_FT_DOUBLE_RANGE, &v, -1) &&
	      st_sortable_to_double(v.i) == nextafter(1.0, 0.0));
	/* ip: CIDR ends, +-1 with carry, ordered by address */
	st_range_bound ilo, ihi;
	memset(&ilo, 0, sizeof ilo);
	memset(&ihi, 0, sizeof ihi);
	CHECK(st_cidr_parse("10.0.0.0/8", 10, ilo.ip, ihi.ip));
	st_range_bound q = ihi;
	CHECK(st_range_step(ST_FT_IP_RANGE, &q, 1) && q.ip[12] == 11 && q.ip[15] == 0);
	CHECK(st_range_step(ST_FT_IP_RANGE, &q, -1) && memcmp(q.ip, ihi.ip, ST_IP_LEN) == 0);
	st_range_bound one;
	memset(&one, 0, sizeof one);
	CHECK(st_ip_parse("10.1.2.3", 8, one.ip));
	CHECK(st_range_matches(ST_FT_IP_RANGE, ST_REL_CONTAINS, &ilo, &ihi, &one, &one));
	CHECK(!st_range_matches(ST_FT_IP_RANGE, ST_REL_WITHIN, &ilo, &ihi, &one, &one));
	st_range_min(ST_FT_IP_RANGE, &q);
	CHECK(!st_range_step(ST_FT_IP_RANGE, &q, -1));
}

int
main(void)
{
	test_ranges();
	test_geo();
	test_ip_parse();
	test_ip_format();
	test_cidr();
	test_half();
	test_ulong();
	test_nanos();
	return check_report("types_test");
}
