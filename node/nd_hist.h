/* A latency histogram over a sliding window: fixed log-scale buckets (four
 * per power of two, so a percentile is within 12.5% of the true value)
 * counted in six 10-second slots. Recording is a few relaxed atomic adds,
 * no lock and no allocation (the first writer of a new period zeroes its
 * slot while the others wait a few stores); reading sums the slots of the
 * last minute.
 * Private to node/ (the fan-out figures, nd_stats.c). */
#ifndef ND_HIST_H
#define ND_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define ND_HIST_SUB 4        /* buckets per power of two */
#define ND_HIST_BUCKETS 112  /* 0 µs .. 2^28 µs (about 4.5 minutes); above: the last */
#define ND_HIST_SLOTS 6
#define ND_HIST_SLOT_NS 10000000000ull /* 10 s: the window is 50-60 s */

typedef struct nd_hist_slot {
	_Atomic uint64_t epoch; /* 1 + the 10 s period it counts; 0 = never used */
	_Atomic uint64_t n, sum_us, max_us;
	_Atomic uint32_t count[ND_HIST_BUCKETS];
} nd_hist_slot;

/* Zeroed memory is an empty histogram. */
typedef struct nd_hist {
	nd_hist_slot slot[ND_HIST_SLOTS];
} nd_hist;

/* What the window holds. Percentiles interpolate inside their bucket and
 * never exceed the largest value seen. */
typedef struct nd_hist_summary {
	uint64_t n;
	double mean_us, p50_us, p90_us, p99_us, max_us;
	uint32_t count[ND_HIST_BUCKETS];
} nd_hist_summary;

/* The bucket of a value (µs) and a bucket's bounds [lower, upper). */
int nd_hist_bucket(uint64_t us);
uint64_t nd_hist_lower_us(int b);
uint64_t nd_hist_upper_us(int b);

/* Counts one value at monotonic time now_ns. Safe from any thread. A value
 * stamped with a period already rotated out is dropped. A reader racing a
 * writer may see a count without its sum (figures for display). */
void nd_hist_record(nd_hist *h, uint64_t now_ns, uint64_t value_ns);
/* The last ND_HIST_SLOTS periods up to now_ns (the current one included). */
void nd_hist_read(nd_hist *h, uint64_t now_ns, nd_hist_summary *out);
/* The value at quantile q (0..1) of a summary's counts, in µs. */
double nd_hist_quantile(const nd_hist_summary *s, double q);

#endif
