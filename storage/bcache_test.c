/* The stored-block cache: a block put is got back whole under its own
 * segment uid and last doc only; a slot taken by another block answers no
 * more for the old one, while a reader still holding the old block reads
 * it whole; blocks above the size bound are not kept; many threads putting
 * and getting at once always read a block whole (each block's bytes name
 * it). */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "check.h"
#include "st_bcache.h"

static st_block *
make(size_t n, uint64_t uid, uint32_t first, uint32_t last)
{
	st_block *b = st_block_new(n);
	for (size_t i = 0; i < n; i++)
		b->data[i] = (uint8_t)(uid * 31 + last * 7 + i);
	b->len = n;
	b->first = first;
	b->last = last;
	return b;
}

static bool
whole(const st_block *b, size_t n, uint64_t uid, uint32_t last)
{
	if (b->len != n || b->last != last)
		return false;
	for (size_t i = 0; i < n; i++)
		if (b->data[i] != (uint8_t)(uid * 31 + last * 7 + i))
			return false;
	return true;
}

static void *
worker(void *arg)
{
	uint64_t uid = (uint64_t)(uintptr_t)arg;
	int bad = 0;
	for (uint32_t r = 0; r < 20000; r++) {
		uint32_t last = r % 1500;
		st_block *b = st_bcache_get(uid, last);
		if (b) {
			bad += b->first != last / 2 || !whole(b, 1000 + last, uid, last);
		} else {
			b = make(1000 + last, uid, last / 2, last);
			st_bcache_put(uid, b);
		}
		st_block_unref(b);
	}
	return (void *)(uintptr_t)bad;
}

int
main(void)
{
	uint64_t a = st_bcache_uid(), b = st_bcache_uid();
	CHECK(a != 0 && b != a);
	CHECK(st_bcache_get(a, 99) == NULL);
	st_block *put = make(4096, a, 50, 99);
	st_bcache_put(a, put);
	st_block *got = st_bcache_get(a, 99);
	CHECK(got == put && got->first == 50 && whole(got, 4096, a, 99));
	CHECK(st_bcache_get(b, 99) == NULL); /* another segment's block 99 */
	CHECK(st_bcache_get(a, 98) == NULL);
	/* too large to keep */
	st_block *big = make(ST_BCACHE_MAX_RAW + 1, a, 0, 7);
	st_bcache_put(a, big);
	CHECK(st_bcache_get(a, 7) == NULL);
	st_block_unref(big);
	/* a slot reused: filling every slot many times over evicts block 99,
	 * and the readers holding it still read it whole */
	for (uint32_t last = 1000; last < 1000 + 8 * ST_BCACHE_SLOTS; last++) {
		st_block *x = make(16, b, last, last);
		st_bcache_put(b, x);
		st_block_unref(x);
	}
	CHECK(st_bcache_get(a, 99) == NULL);
	CHECK(whole(put, 4096, a, 99) && whole(got, 4096, a, 99));
	st_block_unref(got);
	st_block_unref(put);
	/* threads */
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)st_bcache_uid());
	for (int i = 0; i < 4; i++) {
		void *bad;
		pthread_join(th[i], &bad);
		CHECKF(bad == NULL, "thread %d read %zu torn or wrong blocks", i, (size_t)(uintptr_t)bad);
	}
	uint64_t h, m;
	st_bcache_stats(&h, &m);
	CHECK(h > 0 && m > 0);
	CHECK(cm_mem_used(CM_MEM_STORAGE) == 0);
	return check_report("bcache_test");
}
