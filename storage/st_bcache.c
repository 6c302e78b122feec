/* Decompressed stored blocks shared by every reader (st_bcache.h). */
#include "st_bcache.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct slot {
	pthread_mutex_t mu;
	uint64_t uid; /* 0: empty */
	uint32_t last;
	st_block *b;
} slot;

static slot slots[ST_BCACHE_SLOTS];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t next_uid = 1, hits, misses;

static void
init(void)
{
	for (size_t i = 0; i < ST_BCACHE_SLOTS; i++)
		pthread_mutex_init(&slots[i].mu, NULL);
}

static slot *
slot_of(uint64_t uid, uint32_t last)
{
	pthread_once(&once, init);
	uint64_t h = (uid * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)last * 0xC2B2AE3D27D4EB4Full);
	return &slots[(h >> 32) % ST_BCACHE_SLOTS];
}

st_block *
st_block_new(size_t cap)
{
	st_block *b = malloc(sizeof(*b) + cap);
	if (!b)
		return NULL;
	atomic_init(&b->refs, 1);
	b->first = 1;
	b->last = 0;
	b->len = 0;
	return b;
}

void
st_block_ref(st_block *b)
{
	atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void
st_block_unref(st_block *b)
{
	if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
		free(b);
}

uint64_t
st_bcache_uid(void)
{
	return atomic_fetch_add(&next_uid, 1);
}

st_block *
st_bcache_get(uint64_t uid, uint32_t last)
{
	slot *s = slot_of(uid, last);
	st_block *b = NULL;
	pthread_mutex_lock(&s->mu);
	if (s->uid == uid && s->last == last) {
		b = s->b;
		st_block_ref(b);
	}
	pthread_mutex_unlock(&s->mu);
	atomic_fetch_add(b ? &hits : &misses, 1);
	return b;
}

void
st_bcache_put(uint64_t uid, st_block *b)
{
	if (b->len > ST_BCACHE_MAX_RAW || uid == 0)
		return;
	slot *s = slot_of(uid, b->last);
	st_block_ref(b);
	pthread_mutex_lock(&s->mu);
	st_block *old = s->b;
	s->b = b;
	s->uid = uid;
	s->last = b->last;
	pthread_mutex_unlock(&s->mu);
	st_block_unref(old);
}

void
st_bcache_stats(uint64_t *h, uint64_t *m)
{
	*h = atomic_load(&hits);
	*m = atomic_load(&misses);
}
