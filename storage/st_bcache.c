/* Decompressed stored blocks shared by every reader (st_bcache.h). */
#include "st_bcache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
	pthread_mutex_t mu;
	uint64_t uid; /* 0: empty */
	uint32_t first, last;
	void *raw;
	size_t len, cap;
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

uint64_t
st_bcache_uid(void)
{
	return atomic_fetch_add(&next_uid, 1);
}

bool
st_bcache_get(uint64_t uid, uint32_t last, cm_buf *raw, uint32_t *first)
{
	slot *s = slot_of(uid, last);
	bool hit = false;
	pthread_mutex_lock(&s->mu);
	if (s->uid == uid && s->last == last) {
		cm_buf_reset(raw);
		cm_buf_put(raw, s->raw, s->len);
		*first = s->first;
		hit = true;
	}
	pthread_mutex_unlock(&s->mu);
	atomic_fetch_add(hit ? &hits : &misses, 1);
	return hit;
}

void
st_bcache_put(uint64_t uid, uint32_t first, uint32_t last, const void *raw, size_t len)
{
	if (len > ST_BCACHE_MAX_RAW || uid == 0)
		return;
	slot *s = slot_of(uid, last);
	pthread_mutex_lock(&s->mu);
	if (s->cap < len) {
		void *p = realloc(s->raw, len);
		if (!p) {
			s->uid = 0;
			pthread_mutex_unlock(&s->mu);
			return;
		}
		s->raw = p;
		s->cap = len;
	}
	memcpy(s->raw, raw, len);
	s->len = len;
	s->uid = uid;
	s->first = first;
	s->last = last;
	pthread_mutex_unlock(&s->mu);
}

void
st_bcache_stats(uint64_t *h, uint64_t *m)
{
	*h = atomic_load(&hits);
	*m = atomic_load(&misses);
}
