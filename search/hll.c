/* Cardinality: exact below precision_threshold (a set of 64-bit hashes),
 * then HyperLogLog with ES's precision for that threshold (ES's
 * HyperLogLogPlusPlus: linear counting, then HLL). The estimate uses
 * Ertl's improved raw estimator ("New cardinality estimation algorithms
 * for HyperLogLog sketches", 2017), which needs no empirical bias tables
 * and stays within HLL's standard error (1.04/sqrt(m)) at every range. */
#include <math.h>
#include <string.h>

#include "agg_int.h"

#define HLL_MIN_P 4
#define HLL_MAX_P 18

struct agg_hll {
	uint32_t threshold;
	int p;
	/* exact mode */
	uint64_t *set; /* open addressing; 0 marks empty, hash 0 kept in has_zero */
	size_t cap, n;
	bool has_zero;
	/* HLL mode when regs != NULL */
	uint8_t *regs;
};

int
agg_hll_precision(uint32_t threshold)
{
	uint64_t entries = (uint64_t)ceil(threshold / 0.75);
	uint64_t bytes = entries * 4;
	int bits = 0;
	while (bits < 64 && (bytes >> bits) != 0)
		bits++;
	if (bits < HLL_MIN_P)
		bits = HLL_MIN_P;
	if (bits > HLL_MAX_P)
		bits = HLL_MAX_P;
	return bits;
}

agg_hll *
agg_hll_new(uint32_t threshold)
{
	agg_hll *h = cm_calloc(AGG_MEM, 1, sizeof *h);
	h->threshold = threshold;
	h->p = agg_hll_precision(threshold);
	return h;
}

void
agg_hll_free(agg_hll *h)
{
	if (!h)
		return;
	cm_free(AGG_MEM, h->set);
	cm_free(AGG_MEM, h->regs);
	cm_free(AGG_MEM, h);
}

static void
regs_add(agg_hll *h, uint64_t hash)
{
	int p = h->p, q = 64 - p;
	size_t idx = (size_t)(hash >> q);
	uint64_t w = hash << p;
	uint8_t rank = w ? (uint8_t)(__builtin_clzll(w) + 1) : (uint8_t)(q + 1);
	if (rank > q + 1)
		rank = (uint8_t)(q + 1);
	if (rank > h->regs[idx])
		h->regs[idx] = rank;
}

static void
to_hll(agg_hll *h)
{
	h->regs = cm_calloc(AGG_MEM, (size_t)1 << h->p, 1);
	for (size_t i = 0; i < h->cap; i++)
		if (h->set[i])
			regs_add(h, h->set[i]);
	if (h->has_zero)
		regs_add(h, 0);
	cm_free(AGG_MEM, h->set);
	h->set = NULL;
	h->cap = h->n = 0;
	h->has_zero = false;
}

static bool
set_insert(uint64_t *set, size_t cap, uint64_t v)
{
	size_t i = (size_t)(v * 0x9E3779B97F4A7C15ull >> 7) & (cap - 1);
	while (set[i]) {
		if (set[i] == v)
			return false;
		i = (i + 1) & (cap - 1);
	}
	set[i] = v;
	return true;
}

void
agg_hll_add(agg_hll *h, uint64_t hash)
{
	if (h->regs) {
		regs_add(h, hash);
		return;
	}
	if (hash == 0) {
		if (!h->has_zero) {
			h->has_zero = true;
			h->n++;
		}
	} else {
		if ((h->n + 1) * 4 > h->cap * 3) {
			size_t ncap = h->cap ? h->cap * 2 : 16;
			uint64_t *ns = cm_calloc(AGG_MEM, ncap, sizeof *ns);
			for (size_t i = 0; i < h->cap; i++)
				if (h->set[i])
					set_insert(ns, ncap, h->set[i]);
			cm_free(AGG_MEM, h->set);
			h->set = ns;
			h->cap = ncap;
		}
		if (set_insert(h->set, h->cap, hash))
			h->n++;
	}
	if (h->n > h->threshold)
		to_hll(h);
}

void
agg_hll_merge(agg_hll *into, const agg_hll *from)
{
	if (from->regs) {
		if (!into->regs)
			to_hll(into);
		size_t m = (size_t)1 << into->p;
		if (from->p == into->p) {
			for (size_t i = 0; i < m; i++)
				if (from->regs[i] > into->regs[i])
					into->regs[i] = from->regs[i];
		}
		return;
	}
	for (size_t i = 0; i < from->cap; i++)
		if (from->set[i])
			agg_hll_add(into, from->set[i]);
	if (from->has_zero)
		agg_hll_add(into, 0);
}

static double
hll_sigma(double x)
{
	if (x == 1)
		return INFINITY;
	double y = 1, z = x, zo;
	do {
		x *= x;
		zo = z;
		z += x * y;
		y += y;
	} while (z != zo);
	return z;
}

static double
hll_tau(double x)
{
	if (x == 0 || x == 1)
		return 0;
	double y = 1, z = 1 - x, zo;
	do {
		x = sqrt(x);
		zo = z;
		y *= 0.5;
		z -= (1 - x) * (1 - x) * y;
	} while (z != zo);
	return z / 3;
}

uint64_t
agg_hll_cardinality(const agg_hll *h)
{
	if (!h->regs)
		return h->n;
	int p = h->p, q = 64 - p;
	size_t m = (size_t)1 << p;
	uint32_t c[66] = {0};
	for (size_t i = 0; i < m; i++)
		c[h->regs[i]]++;
	double dm = (double)m;
	double z = dm * hll_tau((dm - c[q + 1]) / dm);
	for (int k = q; k >= 1; k--)
		z = 0.5 * (z + c[k]);
	z += dm * hll_sigma(c[0] / dm);
	double e = (0.5 / log(2)) * dm * dm / z;
	return (uint64_t)llround(e);
}

void
agg_hll_encode(const agg_hll *h, cm_buf *b)
{
	if (h->regs) {
		cm_buf_put_u8(b, 1);
		cm_buf_put_u8(b, (uint8_t)h->p);
		/* registers are mostly small: run-length of zeros keeps sparse
		 * sketches small on the wire */
		size_t m = (size_t)1 << h->p;
		for (size_t i = 0; i < m;) {
			if (h->regs[i] == 0) {
				size_t j = i;
				while (j < m && h->regs[j] == 0 && j - i < 255)
					j++;
				cm_buf_put_u8(b, 0);
				cm_buf_put_u8(b, (uint8_t)(j - i));
				i = j;
			} else
				cm_buf_put_u8(b, h->regs[i++]);
		}
		return;
	}
	cm_buf_put_u8(b, 0);
	cm_buf_put_varint(b, h->n);
	for (size_t i = 0; i < h->cap; i++)
		if (h->set[i])
			cm_buf_put_u64(b, h->set[i]);
	if (h->has_zero)
		cm_buf_put_u64(b, 0);
}

agg_hll *
agg_hll_decode(cm_rd *r, uint32_t threshold)
{
	uint8_t mode;
	if (!cm_rd_u8(r, &mode))
		return NULL;
	agg_hll *h = agg_hll_new(threshold);
	if (mode == 1) {
		uint8_t p;
		if (!cm_rd_u8(r, &p) || p != h->p)
			goto fail;
		size_t m = (size_t)1 << p;
		h->regs = cm_calloc(AGG_MEM, m, 1);
		for (size_t i = 0; i < m;) {
			uint8_t v, run;
			if (!cm_rd_u8(r, &v))
				goto fail;
			if (v == 0) {
				if (!cm_rd_u8(r, &run) || run == 0 || i + run > m)
					goto fail;
				i += run;
			} else {
				if (v > 64 - p + 1)
					goto fail;
				h->regs[i++] = v;
			}
		}
		return h;
	}
	if (mode != 0)
		goto fail;
	uint64_t n;
	if (!cm_rd_varint(r, &n) || n > threshold + 1 || n * 8 > cm_rd_left(r))
		goto fail;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v;
		if (!cm_rd_u64(r, &v))
			goto fail;
		agg_hll_add(h, v);
	}
	return h;
fail:
	agg_hll_free(h);
	return NULL;
}
