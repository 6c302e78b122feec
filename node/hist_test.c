/* The fan-out latency histogram (nd_hist.h): bucket bounds, percentiles
 * against exact ones, the sliding window, concurrent recording. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nd_hist.h"

#define S 1000000000ull

static void
test_buckets(void)
{
	/* every value falls inside its bucket's bounds, buckets are contiguous */
	for (uint64_t v = 0; v < 5000000; v = v < 100 ? v + 1 : v * 11 / 10) {
		int b = nd_hist_bucket(v);
		CHECKF(v >= nd_hist_lower_us(b) && v < nd_hist_upper_us(b), "v=%llu b=%d",
		       (unsigned long long)v, b);
	}
	for (int b = 0; b + 1 < ND_HIST_BUCKETS; b++)
		CHECKF(nd_hist_upper_us(b) == nd_hist_lower_us(b + 1), "b=%d", b);
	/* a bucket is at most 1/4 of its lower bound wide */
	for (int b = 8; b < ND_HIST_BUCKETS; b++)
		CHECK(nd_hist_upper_us(b) - nd_hist_lower_us(b) <= nd_hist_lower_us(b) / 4);
	CHECK(nd_hist_bucket(UINT64_MAX / 2) == ND_HIST_BUCKETS - 1);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void
test_percentiles(void)
{
	static nd_hist h;
	enum { N = 20000 };
	static uint64_t v[N];
	nd_hist_summary s;
	uint64_t now = 1000 * S;
	srand(7);
	memset(&h, 0, sizeof(h));
	for (int i = 0; i < N; i++) {
		/* log-normal-ish: 50 µs .. 50 ms */
		double x = exp(log(50.0) + (log(50000.0) - log(50.0)) * (rand() / (double)RAND_MAX) *
		                               (rand() / (double)RAND_MAX));
		v[i] = (uint64_t)x;
		nd_hist_record(&h, now, v[i] * 1000);
	}
	qsort(v, N, sizeof(v[0]), cmp_u64);
	nd_hist_read(&h, now, &s);
	CHECK(s.n == N);
	struct {
		double q, got;
	} qs[] = {{0.5, s.p50_us}, {0.9, s.p90_us}, {0.99, s.p99_us}};
	for (int i = 0; i < 3; i++) {
		double exact = (double)v[(size_t)(qs[i].q * N) - 1];
		CHECKF(fabs(qs[i].got - exact) <= exact * 0.125 + 1, "q=%.2f got %.1f exact %.1f",
		       qs[i].q, qs[i].got, exact);
	}
	CHECK(s.max_us == (double)v[N - 1]);
	CHECK(s.p99_us <= s.max_us);
	CHECK(s.p50_us <= s.p90_us && s.p90_us <= s.p99_us);
}

static void
test_window(void)
{
	static nd_hist h;
	nd_hist_summary s;
	uint64_t t0 = 7000 * S; /* a period boundary */
	memset(&h, 0, sizeof(h));
	nd_hist_read(&h, t0, &s);
	CHECK(s.n == 0 && s.p99_us == 0);
	nd_hist_record(&h, t0, 100000);           /* 100 µs at 0 s */
	nd_hist_record(&h, t0 + 15 * S, 200000);  /* 15 s */
	nd_hist_record(&h, t0 + 25 * S, 300000);  /* 25 s */
	nd_hist_read(&h, t0 + 30 * S, &s);
	CHECK(s.n == 3);
	CHECK(s.max_us == 300);
	nd_hist_read(&h, t0 + 59 * S, &s); /* periods 0..5 are all in the window */
	CHECK(s.n == 3);
	nd_hist_read(&h, t0 + 60 * S, &s); /* period 0 left it */
	CHECK(s.n == 2);
	nd_hist_read(&h, t0 + 70 * S, &s); /* periods 2..7 */
	CHECK(s.n == 1 && s.max_us == 300);
	nd_hist_read(&h, t0 + 200 * S, &s);
	CHECK(s.n == 0);
	/* a slot reused for a new period starts from zero */
	nd_hist_record(&h, t0 + 60 * S, 5000000); /* period 6, slot 0 */
	nd_hist_read(&h, t0 + 61 * S, &s);
	CHECK(s.n == 3 && s.max_us == 5000); /* 15 s, 25 s and the new one */
	/* a value stamped with a period that was rotated out is dropped */
	nd_hist_record(&h, t0, 100000);
	nd_hist_read(&h, t0 + 61 * S, &s);
	CHECK(s.n == 3);
}

static nd_hist shared;

static void *
writer(void *arg)
{
	uint64_t now = *(uint64_t *)arg;
	for (int i = 0; i < 200000; i++)
		nd_hist_record(&shared, now, (uint64_t)(i % 5000) * 1000);
	return NULL;
}

static void
test_threads(void)
{
	pthread_t t[4];
	nd_hist_summary s;
	uint64_t now = 9000 * S + S / 2;
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, writer, &now);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	nd_hist_read(&shared, now, &s);
	/* four writers start the period at once: the slot is zeroed once, nothing lost */
	CHECKF(s.n == 800000, "n=%llu", (unsigned long long)s.n);
	uint64_t sum = 0;
	for (int b = 0; b < ND_HIST_BUCKETS; b++)
		sum += s.count[b];
	CHECK(sum == 800000);
	CHECK(s.max_us == 4999);
}

int
main(void)
{
	test_buckets();
	test_percentiles();
	test_window();
	test_threads();
	return check_report("hist_test");
}
