/* Percentiles: a merging t-digest (Dunning & Ertl) with the k1 (arcsine)
 * scale function and ES's default compression of 100. Quantiles
 * interpolate between centroid centres the way t-digest 3.2 does (the
 * version ES 7.10 ships): below, agg_td_quantile. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agg_int.h"

typedef struct centroid {
	double mean, w;
} centroid;

struct agg_tdigest {
	double compression;
	centroid *c; /* merged, sorted by mean */
	size_t n, cap;
	centroid *buf; /* unmerged */
	size_t bn, bcap;
	double total, min, max;
};

agg_tdigest *
agg_td_new(double compression)
{
	agg_tdigest *t = cm_calloc(AGG_MEM, 1, sizeof *t);
	t->compression = compression;
	t->bcap = (size_t)(compression * 10) + 16;
	t->buf = cm_malloc(AGG_MEM, t->bcap * sizeof *t->buf);
	t->min = INFINITY;
	t->max = -INFINITY;
	return t;
}

void
agg_td_free(agg_tdigest *t)
{
	if (!t)
		return;
	cm_free(AGG_MEM, t->c);
	cm_free(AGG_MEM, t->buf);
	cm_free(AGG_MEM, t);
}

/* Inline quicksort by mean: the buffer sort is the digest's hot spot, and
 * qsort's indirect comparisons cost several times more. */
static void
cent_sort(centroid *v, size_t n)
{
	while (n > 16) {
		centroid *a = &v[0], *b = &v[n / 2], *c = &v[n - 1], *m;
		if (a->mean < b->mean)
			m = b->mean < c->mean ? b : (a->mean < c->mean ? c : a);
		else
			m = a->mean < c->mean ? a : (b->mean < c->mean ? c : b);
		double pivot = m->mean;
		size_t i = 0, j = n - 1;
		for (;;) {
			while (v[i].mean < pivot)
				i++;
			while (v[j].mean > pivot)
				j--;
			if (i >= j)
				break;
			centroid t = v[i];
			v[i] = v[j];
			v[j] = t;
			i++;
			j--;
		}
		/* recurse into the smaller side, loop on the larger */
		size_t left = j + 1;
		if (left < n - left) {
			cent_sort(v, left);
			v += left;
			n -= left;
		} else {
			cent_sort(v + left, n - left);
			n = left;
		}
	}
	for (size_t i = 1; i < n; i++) {
		centroid x = v[i];
		size_t j = i;
		while (j > 0 && v[j - 1].mean > x.mean) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

static double
k1(double q, double d)
{
	return d / (2 * M_PI) * asin(2 * q - 1);
}

static double
k1_inv(double k, double d)
{
	double x = k * 2 * M_PI / d;
	if (x >= M_PI / 2)
		return 1;
	return (sin(x) + 1) / 2;
}

static void
td_compress(agg_tdigest *t)
{
	if (t->bn == 0)
		return;
	size_t all = t->n + t->bn;
	/* sort only the buffer, then merge it with the sorted centroids */
	cent_sort(t->buf, t->bn);
	centroid *v = cm_malloc(AGG_MEM, all * sizeof *v);
	size_t i = 0, j = 0, k = 0;
	while (i < t->n && j < t->bn)
		v[k++] = t->c[i].mean <= t->buf[j].mean ? t->c[i++] : t->buf[j++];
	while (i < t->n)
		v[k++] = t->c[i++];
	while (j < t->bn)
		v[k++] = t->buf[j++];
	t->bn = 0;
	double total = 0;
	for (size_t i = 0; i < all; i++)
		total += v[i].w;
	double d = t->compression;
	size_t out = 0;
	centroid cur = v[0];
	double wsofar = 0;
	double qlimit = k1_inv(k1(0, d) + 1, d);
	for (i = 1; i < all; i++) {
		double q = (wsofar + cur.w + v[i].w) / total;
		if (q <= qlimit) {
			cur.w += v[i].w;
			cur.mean += (v[i].mean - cur.mean) * v[i].w / cur.w;
		} else {
			v[out++] = cur;
			wsofar += cur.w;
			qlimit = k1_inv(k1(wsofar / total, d) + 1, d);
			cur = v[i];
		}
	}
	v[out++] = cur;
	cm_free(AGG_MEM, t->c);
	t->c = v;
	t->n = out;
	t->cap = all;
	t->total = total;
}

void
agg_td_add(agg_tdigest *t, double x, double w)
{
	if (x != x || w <= 0)
		return;
	if (t->bn == t->bcap)
		td_compress(t);
	t->buf[t->bn].mean = x;
	t->buf[t->bn].w = w;
	t->bn++;
	if (x < t->min)
		t->min = x;
	if (x > t->max)
		t->max = x;
}

void
agg_td_merge(agg_tdigest *into, agg_tdigest *from)
{
	td_compress(from);
	for (size_t i = 0; i < from->n; i++)
		agg_td_add(into, from->c[i].mean, from->c[i].w);
	if (from->min < into->min)
		into->min = from->min;
	if (from->max > into->max)
		into->max = from->max;
}

double
agg_td_count(const agg_tdigest *t)
{
	double n = t->total;
	for (size_t i = 0; i < t->bn; i++)
		n += t->buf[i].w;
	return n;
}

/* t-digest 3.2's AVLTreeDigest.quantile, which ES 7.10 answers with: the
 * q * total-th unit of weight, interpolated between centroid centres (a
 * centroid of weight w centred w / 2 into its run), towards min before
 * the first centre and towards max after the last. Four values 1, 51,
 * 101, 151 give 26 at 25% (not 38.5, the interpolation between sorted
 * values). */
static double
weighted_average(double x1, double w1, double x2, double w2)
{
	double lo = x1 < x2 ? x1 : x2, hi = x1 < x2 ? x2 : x1;
	double v = (x1 * w1 + x2 * w2) / (w1 + w2);
	return v < lo ? lo : v > hi ? hi : v;
}

double
agg_td_quantile(agg_tdigest *t, double q)
{
	td_compress(t);
	if (t->n == 0)
		return NAN;
	if (t->n == 1)
		return t->c[0].mean;
	double index = q * t->total;
	if (index <= 0)
		return t->min;
	if (index >= t->total)
		return t->max;
	double w0 = t->c[0].w;
	if (index < w0 / 2)
		return t->min + (t->c[0].mean - t->min) * index / (w0 / 2);
	double so_far = w0 / 2;
	for (size_t i = 0; i + 1 < t->n; i++) {
		double dw = (t->c[i].w + t->c[i + 1].w) / 2;
		if (so_far + dw > index) {
			double z1 = index - so_far, z2 = so_far + dw - index;
			return weighted_average(t->c[i].mean, z2, t->c[i + 1].mean, z1);
		}
		so_far += dw;
	}
	double z1 = index - so_far, z2 = t->c[t->n - 1].w / 2 - z1;
	return weighted_average(t->c[t->n - 1].mean, z2, t->max, z1);
}

double
agg_td_mad(agg_tdigest *t)
{
	double med = agg_td_quantile(t, 0.5);
	if (med != med)
		return NAN;
	agg_tdigest *d = agg_td_new(t->compression);
	for (size_t i = 0; i < t->n; i++)
		agg_td_add(d, fabs(t->c[i].mean - med), t->c[i].w);
	double v = agg_td_quantile(d, 0.5);
	agg_td_free(d);
	return v;
}

/* t-digest 3.2's AVLTreeDigest.cdf, which ES 7.10's percentile_ranks
 * answers with: each centroid spreads its weight evenly over the span
 * from half-way to its left neighbour to half-way to its right one (the
 * first centroid's span is as wide on the left as on the right). The walk
 * stops at the next-to-last centroid and gives its span the width of the
 * one before, so a value past that span ranks at 1, as in ES. */
static double
span_share(double x, double lo, double hi)
{
	if (hi <= lo)
		return x < lo ? 0 : 1;
	return (x - lo) / (hi - lo);
}

double
agg_td_cdf(agg_tdigest *t, double x)
{
	td_compress(t);
	if (t->n == 0 || x != x)
		return NAN;
	if (t->n == 1)
		return x < t->c[0].mean ? 0 : 1;
	double below = 0;
	double left = (t->c[1].mean - t->c[0].mean) / 2, right = left;
	size_t a = 0;
	for (; a + 2 < t->n; a++) {
		double m = t->c[a].mean;
		if (x < m + right) {
			double v =
			    (below + t->c[a].w * span_share(x, m - left, m + right)) / t->total;
			return v > 0 ? v : 0;
		}
		below += t->c[a].w;
		left = right;
		right = (t->c[a + 2].mean - t->c[a + 1].mean) / 2;
	}
	double m = t->c[a].mean;
	if (x >= m + right)
		return 1;
	double v = (below + t->c[a].w * span_share(x, m - left, m + right)) / t->total;
	return v < 0 ? 0 : v > 1 ? 1 : v;
}

void
agg_td_encode(agg_tdigest *t, cm_buf *b)
{
	td_compress(t);
	cm_buf_put_varint(b, t->n);
	agg_put_double(b, t->min);
	agg_put_double(b, t->max);
	for (size_t i = 0; i < t->n; i++) {
		agg_put_double(b, t->c[i].mean);
		agg_put_double(b, t->c[i].w);
	}
}

agg_tdigest *
agg_td_decode(cm_rd *r, double compression)
{
	uint64_t n;
	if (!cm_rd_varint(r, &n) || n * 16 > cm_rd_left(r) || n > (uint64_t)compression * 20 + 64)
		return NULL;
	agg_tdigest *t = agg_td_new(compression);
	double mn, mx;
	if (!agg_get_double(r, &mn) || !agg_get_double(r, &mx))
		goto fail;
	for (uint64_t i = 0; i < n; i++) {
		double m, w;
		if (!agg_get_double(r, &m) || !agg_get_double(r, &w) || m != m || !(w > 0))
			goto fail;
		agg_td_add(t, m, w);
	}
	if (n) {
		t->min = mn;
		t->max = mx;
	}
	return t;
fail:
	agg_td_free(t);
	return NULL;
}
