/* The stored-block cache: a block put is got back whole under its own
 * segment uid and last doc only; a slot taken by another block answers no
 * more for the old one; blocks above the size bound are not kept; many
 * threads putting and getting at once always read a block whole (each
 * block's bytes name it). */
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "st_bcache.h"

static void
fill(uint8_t *p, size_t n, uint64_t uid, uint32_t last)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(uid * 31 + last * 7 + i);
}

static bool
whole(const cm_buf *b, size_t n, uint64_t uid, uint32_t last)
{
	if (b->len != n)
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
	uint8_t blk[3000];
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	int bad = 0;
	for (uint32_t r = 0; r < 20000; r++) {
		uint32_t last = r % 1500, first;
		if (st_bcache_get(uid, last, &b, &first))
			bad += first != last / 2 || !whole(&b, 1000 + last, uid, last);
		else {
			fill(blk, 1000 + last, uid, last);
			st_bcache_put(uid, last / 2, last, blk, 1000 + last);
		}
	}
	cm_buf_free(&b);
	return (void *)(uintptr_t)bad;
}

int
main(void)
{
	uint64_t a = st_bcache_uid(), b = st_bcache_uid();
	CHECK(a != 0 && b != a);
	uint8_t blk[4096];
	cm_buf out;
	cm_buf_init(&out, CM_MEM_STORAGE);
	uint32_t first = 0;
	CHECK(!st_bcache_get(a, 99, &out, &first));
	fill(blk, sizeof(blk), a, 99);
	st_bcache_put(a, 50, 99, blk, sizeof(blk));
	CHECK(st_bcache_get(a, 99, &out, &first) && first == 50 && whole(&out, sizeof(blk), a, 99));
	CHECK(!st_bcache_get(b, 99, &out, &first)); /* another segment's block 99 */
	CHECK(!st_bcache_get(a, 98, &out, &first));
	/* too large to keep */
	static uint8_t big[ST_BCACHE_MAX_RAW + 1];
	st_bcache_put(a, 0, 7, big, sizeof(big));
	CHECK(!st_bcache_get(a, 7, &out, &first));
	/* a slot reused: filling every slot many times over evicts block 99 */
	for (uint32_t last = 1000; last < 1000 + 8 * ST_BCACHE_SLOTS; last++)
		st_bcache_put(b, last, last, blk, 16);
	CHECK(!st_bcache_get(a, 99, &out, &first));
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
	cm_buf_free(&out);
	CHECK(cm_mem_used(CM_MEM_STORAGE) == 0);
	return check_report("bcache_test");
}
