/* Percentiles with "hdr": the answers of HdrHistogram 2.1.9's
 * DoubleHistogram, the one ES 7.10 records into (auto-resizing, ranges
 * kept as powers of two).
 *
 * A DoubleHistogram with d significant digits keeps 2^h values per binary
 * order of magnitude, 2^(h+1) being the first power of two at or above
 * 2 * 10^d. Its integer histogram starts at the lowest value recorded
 * (rounded down to a power of two, L), which becomes integer 2^h; a lower
 * value later shifts the counts by whole orders of magnitude, a higher one
 * grows the histogram, and neither moves a recorded value's range. So a
 * value v > 0 falls in [lo, lo + w) with w = 2^(floor(log2 v) - h) and
 * lo = floor(v / w) * w, whatever came before it; only the answer's last
 * integer unit, L / 2^h, depends on the lowest value: a percentile is the
 * highest value of its range, lo + w - L / 2^h. A merge adds the counts
 * range by range (ES's reduce records each range's lowest value). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agg_int.h"

typedef struct hdr_range {
	double lo; /* the range's lowest value, > 0 */
	uint64_t n;
} hdr_range;

struct agg_hdr {
	int h;          /* log2 of the values per binary order of magnitude */
	uint64_t zeros; /* values of 0 */
	hdr_range *r;   /* sorted by lo, one per range */
	size_t n, cap;
	size_t merged; /* r[0..merged) is sorted and distinct; the rest is not yet */
};

agg_hdr *
agg_hdr_new(int digits)
{
	agg_hdr *t = cm_calloc(AGG_MEM, 1, sizeof *t);
	/* 2^(h + 1) >= 2 * 10^digits, h at least 0 */
	double top = 2 * pow(10, digits);
	int bits = 0;
	while ((double)(1ULL << bits) < top)
		bits++;
	t->h = bits > 1 ? bits - 1 : 0;
	return t;
}

void
agg_hdr_free(agg_hdr *t)
{
	if (!t)
		return;
	cm_free(AGG_MEM, t->r);
	cm_free(AGG_MEM, t);
}

/* The range of v > 0: its lowest value and its width. */
static double
range_lo(const agg_hdr *t, double v, double *width)
{
	int e;
	frexp(v, &e); /* v in [2^(e-1), 2^e) */
	double w = ldexp(1, e - 1 - t->h);
	if (width)
		*width = w;
	return floor(v / w) * w;
}

static int
range_cmp(const void *a, const void *b)
{
	double x = ((const hdr_range *)a)->lo, y = ((const hdr_range *)b)->lo;
	return x < y ? -1 : x > y;
}

/* Sorts the ranges added since the last call and folds equal ones. */
static void
hdr_compact(agg_hdr *t)
{
	if (t->merged == t->n)
		return;
	qsort(t->r, t->n, sizeof *t->r, range_cmp);
	size_t out = 0;
	for (size_t i = 0; i < t->n; i++) {
		if (out && t->r[out - 1].lo == t->r[i].lo)
			t->r[out - 1].n += t->r[i].n;
		else
			t->r[out++] = t->r[i];
	}
	t->n = t->merged = out;
}

static void
hdr_put(agg_hdr *t, double lo, uint64_t n)
{
	if (t->n == t->cap) {
		hdr_compact(t);
		if (t->n * 2 >= t->cap) {
			size_t cap = t->cap ? t->cap * 2 : 64;
			t->r = cm_realloc(AGG_MEM, t->r, cap * sizeof *t->r);
			t->cap = cap;
		}
	}
	t->r[t->n].lo = lo;
	t->r[t->n].n = n;
	t->n++;
}

bool
agg_hdr_add(agg_hdr *t, double v, uint64_t n)
{
	if (v != v || n == 0)
		return true;
	if (v < 0 || isinf(v))
		return false;
	if (v == 0)
		t->zeros += n;
	else
		hdr_put(t, range_lo(t, v, NULL), n);
	return true;
}

void
agg_hdr_merge(agg_hdr *into, agg_hdr *from)
{
	hdr_compact(from);
	into->zeros += from->zeros;
	for (size_t i = 0; i < from->n; i++)
		hdr_put(into, from->r[i].lo, from->r[i].n);
}

static uint64_t
hdr_total(agg_hdr *t)
{
	hdr_compact(t);
	uint64_t total = t->zeros;
	for (size_t i = 0; i < t->n; i++)
		total += t->r[i].n;
	return total;
}

/* The last integer unit: the lowest value recorded, rounded down to a
 * power of two, is integer 2^h. */
static double
hdr_unit(const agg_hdr *t)
{
	int e;
	frexp(t->r[0].lo, &e);
	return ldexp(1, e - 1 - t->h);
}

double
agg_hdr_percentile(agg_hdr *t, double percent)
{
	uint64_t total = hdr_total(t);
	if (total == 0)
		return NAN;
	double p = percent < 100 ? percent : 100;
	/* the count to reach, rounded to the nearest, at least the first */
	uint64_t want = (uint64_t)(p / 100 * (double)total + 0.5);
	if (want < 1)
		want = 1;
	uint64_t seen = t->zeros;
	if (seen >= want)
		return 0;
	for (size_t i = 0; i < t->n; i++) {
		seen += t->r[i].n;
		if (seen >= want) {
			if (percent == 0)
				return t->r[i].lo;
			double w;
			range_lo(t, t->r[i].lo, &w);
			return t->r[i].lo + w - hdr_unit(t);
		}
	}
	return 0;
}

double
agg_hdr_rank(agg_hdr *t, double x)
{
	uint64_t total = hdr_total(t);
	if (total == 0 || x != x)
		return NAN;
	if (x < 0)
		return 0;
	uint64_t seen = t->zeros;
	/* below the lowest recorded value only the zeros rank under x */
	if (t->n && x >= ldexp(hdr_unit(t), t->h)) {
		double lo = range_lo(t, x, NULL);
		for (size_t i = 0; i < t->n && t->r[i].lo <= lo; i++)
			seen += t->r[i].n;
	}
	return 100.0 * (double)seen / (double)total;
}

void
agg_hdr_encode(agg_hdr *t, cm_buf *b)
{
	hdr_compact(t);
	cm_buf_put_varint(b, t->zeros);
	cm_buf_put_varint(b, t->n);
	for (size_t i = 0; i < t->n; i++) {
		agg_put_double(b, t->r[i].lo);
		cm_buf_put_varint(b, t->r[i].n);
	}
}

agg_hdr *
agg_hdr_decode(cm_rd *r, int digits)
{
	uint64_t zeros, n;
	/* each range takes at least 9 bytes */
	if (!cm_rd_varint(r, &zeros) || !cm_rd_varint(r, &n) || n > cm_rd_left(r) / 9)
		return NULL;
	agg_hdr *t = agg_hdr_new(digits);
	t->zeros = zeros;
	for (uint64_t i = 0; i < n; i++) {
		double lo;
		uint64_t c;
		if (!agg_get_double(r, &lo) || !cm_rd_varint(r, &c) || !(lo > 0) || isinf(lo) ||
		    c == 0 || range_lo(t, lo, NULL) != lo)
			goto fail;
		hdr_put(t, lo, c);
	}
	return t;
fail:
	agg_hdr_free(t);
	return NULL;
}
