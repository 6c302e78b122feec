/* Log-scale sliding-window latency histograms (nd_hist.h). */
#include "nd_hist.h"

#include <string.h>

int
nd_hist_bucket(uint64_t us)
{
	if (us < ND_HIST_SUB)
		return (int)us;
	int e = 63 - __builtin_clzll(us); /* >= 2 */
	int b = ND_HIST_SUB * (e - 1) + (int)((us >> (e - 2)) & (ND_HIST_SUB - 1));
	return b < ND_HIST_BUCKETS ? b : ND_HIST_BUCKETS - 1;
}

uint64_t
nd_hist_lower_us(int b)
{
	if (b < ND_HIST_SUB)
		return (uint64_t)b;
	int e = b / ND_HIST_SUB + 1, sub = b % ND_HIST_SUB;
	return (uint64_t)(ND_HIST_SUB + sub) << (e - 2);
}

uint64_t
nd_hist_upper_us(int b)
{
	if (b < ND_HIST_SUB)
		return (uint64_t)b + 1;
	return nd_hist_lower_us(b) + (1ull << (b / ND_HIST_SUB - 1));
}

/* Set in a slot's epoch while its first writer of a new period zeroes it. */
#define BUSY (1ull << 63)

void
nd_hist_record(nd_hist *h, uint64_t now_ns, uint64_t value_ns)
{
	uint64_t period = now_ns / ND_HIST_SLOT_NS, us = value_ns / 1000;
	nd_hist_slot *s = &h->slot[period % ND_HIST_SLOTS];
	uint64_t want = period + 1;

	for (;;) {
		uint64_t e = atomic_load_explicit(&s->epoch, memory_order_acquire);
		if (e == want)
			break;
		if ((e & ~BUSY) > want)
			return; /* a late value from a period already rotated out */
		if (e == (want | BUSY))
			continue; /* zeroed by another writer right now: a few stores */
		if ((e & BUSY) == 0 && atomic_compare_exchange_strong(&s->epoch, &e, want | BUSY)) {
			atomic_store_explicit(&s->n, 0, memory_order_relaxed);
			atomic_store_explicit(&s->sum_us, 0, memory_order_relaxed);
			atomic_store_explicit(&s->max_us, 0, memory_order_relaxed);
			for (int i = 0; i < ND_HIST_BUCKETS; i++)
				atomic_store_explicit(&s->count[i], 0, memory_order_relaxed);
			atomic_store_explicit(&s->epoch, want, memory_order_release);
			break;
		}
	}
	atomic_fetch_add_explicit(&s->count[nd_hist_bucket(us)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->n, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->sum_us, us, memory_order_relaxed);
	uint64_t m = atomic_load_explicit(&s->max_us, memory_order_relaxed);
	while (us > m &&
	       !atomic_compare_exchange_weak_explicit(&s->max_us, &m, us, memory_order_relaxed,
	                                              memory_order_relaxed))
		;
}

double
nd_hist_quantile(const nd_hist_summary *s, double q)
{
	if (!s->n)
		return 0;
	double rank = q * (double)s->n, seen = 0;
	for (int b = 0; b < ND_HIST_BUCKETS; b++) {
		if (!s->count[b])
			continue;
		if (seen + s->count[b] >= rank) {
			double lo = (double)nd_hist_lower_us(b), hi = (double)nd_hist_upper_us(b);
			double v = lo + (hi - lo) * ((rank - seen) / s->count[b]);
			return v < s->max_us ? v : s->max_us;
		}
		seen += s->count[b];
	}
	return s->max_us;
}

void
nd_hist_read(nd_hist *h, uint64_t now_ns, nd_hist_summary *out)
{
	uint64_t period = now_ns / ND_HIST_SLOT_NS, sum = 0, max = 0;

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < ND_HIST_SLOTS; i++) {
		nd_hist_slot *s = &h->slot[i];
		uint64_t e = atomic_load_explicit(&s->epoch, memory_order_acquire);
		if (!e || (e & BUSY) || e - 1 > period || period - (e - 1) >= ND_HIST_SLOTS)
			continue;
		for (int b = 0; b < ND_HIST_BUCKETS; b++)
			out->count[b] += atomic_load_explicit(&s->count[b], memory_order_relaxed);
		out->n += atomic_load_explicit(&s->n, memory_order_relaxed);
		sum += atomic_load_explicit(&s->sum_us, memory_order_relaxed);
		uint64_t m = atomic_load_explicit(&s->max_us, memory_order_relaxed);
		if (m > max)
			max = m;
	}
	out->max_us = (double)max;
	out->mean_us = out->n ? (double)sum / (double)out->n : 0;
	out->p50_us = nd_hist_quantile(out, 0.50);
	out->p90_us = nd_hist_quantile(out, 0.90);
	out->p99_us = nd_hist_quantile(out, 0.99);
}
