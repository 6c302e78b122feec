/* The shard request cache (nd_reqcache.h): keys, reader generations, the
 * byte budget with LRU eviction, clears and figures. */
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "check.h"
#include "nd_reqcache.h"

static nd_rc_key
key(const char *uuid, uint32_t shard, uint64_t gen, const char *req)
{
	return (nd_rc_key){.uuid = uuid, .shard = shard, .gen = gen, .req = req,
	                   .req_len = strlen(req)};
}

static bool
get(nd_reqcache *c, nd_rc_key k, const char *want)
{
	cm_buf b;
	cm_buf_init(&b, CM_MEM_NODE);
	bool hit = nd_reqcache_get(c, &k, &b);
	bool ok = hit && b.len == strlen(want) && !memcmp(b.data, want, b.len);
	cm_buf_free(&b);
	return hit && ok;
}

static void
put(nd_reqcache *c, nd_rc_key k, const char *v)
{
	nd_reqcache_put(c, &k, v, strlen(v));
}

static void
test_keys(void)
{
	nd_reqcache *c = nd_reqcache_new(1 << 20);
	CHECK(!get(c, key("a", 0, 1, "{}"), "x"));
	put(c, key("a", 0, 1, "{}"), "x");
	CHECK(get(c, key("a", 0, 1, "{}"), "x"));
	/* another request, shard or index is another key */
	CHECK(!get(c, key("a", 0, 1, "{ }"), "x"));
	CHECK(!get(c, key("a", 1, 1, "{}"), "x"));
	CHECK(!get(c, key("b", 0, 1, "{}"), "x"));
	/* a second put of a key keeps the first value */
	put(c, key("a", 0, 1, "{}"), "y");
	CHECK(get(c, key("a", 0, 1, "{}"), "x"));
	nd_rc_stats s = {0};
	nd_reqcache_stats(c, "a", &s);
	CHECKF(s.hits == 2 && s.misses == 3 && s.entries == 1, "hits %llu misses %llu",
	       (unsigned long long)s.hits, (unsigned long long)s.misses);
	nd_reqcache_free(c);
}

static void
test_generations(void)
{
	nd_reqcache *c = nd_reqcache_new(1 << 20);
	put(c, key("a", 0, 5, "q1"), "r1");
	put(c, key("a", 0, 5, "q2"), "r2");
	put(c, key("a", 1, 5, "q1"), "s1");
	/* a search over an older reader neither sees nor stores */
	CHECK(!get(c, key("a", 0, 4, "q1"), "r1"));
	put(c, key("a", 0, 4, "q3"), "old");
	nd_rc_stats s = {0};
	nd_reqcache_stats(c, "a", &s);
	CHECK(s.entries == 3);
	/* a newer reader of shard 0 drops shard 0's entries, not shard 1's */
	CHECK(!get(c, key("a", 0, 6, "q1"), "r1"));
	memset(&s, 0, sizeof(s));
	nd_reqcache_stats(c, "a", &s);
	CHECKF(s.entries == 1, "entries %llu", (unsigned long long)s.entries);
	CHECK(get(c, key("a", 1, 5, "q1"), "s1"));
	CHECK(!get(c, key("a", 0, 5, "q1"), "r1"));
	nd_reqcache_free(c);
}

static void
test_lru_bytes(void)
{
	char req[32], val[256];
	memset(val, 'v', sizeof(val) - 1);
	val[sizeof(val) - 1] = 0;
	/* room for about eight entries of ~360 bytes: one shard, so one
	 * stripe and one LRU order */
	nd_reqcache *c = nd_reqcache_new(3000);
	for (int i = 0; i < 10; i++) {
		snprintf(req, sizeof(req), "q%d", i);
		put(c, key("a", 0, 1, req), val);
	}
	nd_rc_stats s = {0};
	nd_reqcache_stats(c, NULL, &s);
	CHECKF(s.memory_bytes <= 4000, "memory %llu", (unsigned long long)s.memory_bytes);
	CHECK(s.evictions > 0);
	CHECK(s.entries + s.evictions == 10);
	/* the newest are kept, the oldest went first */
	CHECK(get(c, key("a", 0, 1, "q9"), val));
	CHECK(!get(c, key("a", 0, 1, "q0"), val));
	/* touching an entry keeps it past newer ones */
	uint64_t kept = s.entries;
	int oldest = 10 - (int)kept;
	snprintf(req, sizeof(req), "q%d", oldest);
	CHECK(get(c, key("a", 0, 1, req), val));
	put(c, key("a", 0, 1, "new"), val);
	CHECK(get(c, key("a", 0, 1, req), val));
	snprintf(req, sizeof(req), "q%d", oldest + 1);
	CHECK(!get(c, key("a", 0, 1, req), val));
	/* other shards (other stripes) share the one budget */
	for (int i = 0; i < 30; i++) {
		snprintf(req, sizeof(req), "r%d", i);
		put(c, key("b", (uint32_t)i, 1, req), val);
	}
	memset(&s, 0, sizeof(s));
	nd_reqcache_stats(c, NULL, &s);
	CHECKF(s.memory_bytes <= 3000, "memory %llu", (unsigned long long)s.memory_bytes);
	/* an entry bigger than the whole budget is not kept */
	char big[5000];
	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	put(c, key("a", 0, 1, "big"), big);
	CHECK(!get(c, key("a", 0, 1, "big"), big));
	nd_reqcache_free(c);
}

static void
test_clear(void)
{
	nd_reqcache *c = nd_reqcache_new(1 << 20);
	put(c, key("a", 0, 1, "q"), "1");
	put(c, key("b", 0, 1, "q"), "2");
	nd_reqcache_clear(c, "a", false);
	CHECK(!get(c, key("a", 0, 1, "q"), "1"));
	CHECK(get(c, key("b", 0, 1, "q"), "2"));
	nd_rc_stats s = {0};
	nd_reqcache_stats(c, "a", &s);
	CHECK(s.memory_bytes == 0 && s.misses == 1);
	nd_reqcache_clear(c, NULL, true);
	memset(&s, 0, sizeof(s));
	nd_reqcache_stats(c, NULL, &s);
	CHECK(s.memory_bytes == 0 && s.hits == 0 && s.entries == 0);
	nd_reqcache_free(c);
}

static void
test_size(void)
{
	uint64_t b = 0;
	CHECK(nd_reqcache_parse_size("10mb", &b) && b == 10485760);
	CHECK(nd_reqcache_parse_size("512", &b) && b == 512);
	CHECK(nd_reqcache_parse_size("1%", &b) && b > 0);
	CHECK(!nd_reqcache_parse_size("lots", &b));
	CHECK(!nd_reqcache_parse_size("200%", &b));
}

int
main(void)
{
	test_keys();
	test_generations();
	test_lru_bytes();
	test_clear();
	test_size();
	return check_report("reqcache_test");
}
