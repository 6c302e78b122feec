/* The tail-tolerant fan-out's pieces (nd_rank.h): settings and their
 * errors, C3 order with queues and probes, the hedge delay, the budget,
 * timers, and the cancel registry. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "../proto/pr.h"
#include "check.h"
#include "nd_rank.h"

#define MS 1000000ull

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static void
test_settings(void)
{
	nd_tail_cfg c;
	cm_error e;
	nd_rank_config(&c);
	CHECK(c.ars && c.hedge && c.min_delay_ns == 2 * MS);
	CHECK(c.max_ratio > 0.0499 && c.max_ratio < 0.0501);
	cm_error_clear(&e);
	CHECK(nd_rank_setting("search.hedge.max_ratio", "0.25", &e) == CM_OK);
	CHECK(nd_rank_setting("search.hedge.min_delay", "500micros", &e) == CM_OK);
	CHECK(nd_rank_setting("search.hedge.enabled", "false", &e) == CM_OK);
	nd_rank_config(&c);
	CHECK(!c.hedge && c.min_delay_ns == 500000 && c.max_ratio > 0.2499 && c.max_ratio < 0.2501);
	CHECK(nd_rank_setting("search.other", "1", &e) == CM_ENOTFOUND);
	const char *bad[][2] = {{"search.hedge.max_ratio", "x"},
	                        {"search.hedge.max_ratio", "-1"},
	                        {"search.hedge.max_ratio", "1.5"},
	                        {"search.hedge.max_ratio", ""},
	                        {"search.hedge.min_delay", "5"},
	                        {"search.hedge.min_delay", "2 ms"},
	                        {"search.hedge.min_delay", "61s"},
	                        {"search.hedge.enabled", "yes"},
	                        {"cluster.routing.use_adaptive_replica_selection", "1"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cm_error_clear(&e);
		CHECKF(nd_rank_setting(bad[i][0], bad[i][1], &e) == CM_EINVAL && e.reason[0],
		       "%s=%s", bad[i][0], bad[i][1]);
	}
	nd_rank_config(&c);
	CHECK(c.min_delay_ns == 500000); /* unchanged by the refused ones */
	/* values as JSON (PUT _cluster/settings) */
	cJSON *v = cJSON_CreateNumber(0.5);
	char *norm = NULL;
	CHECK(nd_rank_check("search.hedge.max_ratio", v, &norm, &e) == CM_OK && norm &&
	      strcmp(norm, "0.5") == 0);
	cm_free(CM_MEM_NODE, norm);
	cJSON_Delete(v);
	v = cJSON_CreateNumber(-1);
	cm_error_clear(&e);
	CHECK(nd_rank_check("search.hedge.max_ratio", v, &norm, &e) == CM_EINVAL && !norm &&
	      strstr(e.reason, ">= [0.0]"));
	cJSON_Delete(v);
	v = cJSON_CreateTrue();
	CHECK(nd_rank_check("search.hedge.enabled", v, &norm, &e) == CM_OK && norm &&
	      strcmp(norm, "true") == 0);
	cm_free(CM_MEM_NODE, norm);
	cJSON_Delete(v);
	v = cJSON_CreateNull();
	CHECK(nd_rank_check("search.hedge.enabled", v, &norm, &e) == CM_OK && !norm);
	cJSON_Delete(v);
	v = cJSON_CreateArray();
	cm_error_clear(&e);
	CHECK(nd_rank_check("search.hedge.enabled", v, &norm, &e) == CM_EINVAL);
	cJSON_Delete(v);
	/* back to the defaults for the rest */
	nd_rank_setting("search.hedge.max_ratio", "0.05", &e);
	nd_rank_setting("search.hedge.min_delay", "2ms", &e);
	nd_rank_setting("search.hedge.enabled", "true", &e);
}

/* The copy most tests rank: shard 0 of index "ix". */
static const nd_rank_copy IX0 = {"ix", "uuid-ix", 0};

/* One reply from node for shard `shard` of index (uuid) after rtt_ms,
 * the node reporting svc_ms and queue. */
static void
reply_on(int node, const char *uuid, int shard, double rtt_ms, double svc_ms, uint32_t queue)
{
	uint64_t svc = (uint64_t)(svc_ms * 1000);
	nd_rank_sent(node, "ix", uuid, &shard, 1);
	nd_rank_done(node, "ix", uuid, &shard, 1, true, (uint64_t)(rtt_ms * MS), &svc, 1, queue,
	             false);
}

static void
reply(int node, double rtt_ms, double svc_ms, uint32_t queue)
{
	reply_on(node, IX0.uuid, IX0.shard, rtt_ms, svc_ms, queue);
}

static void
test_order(void)
{
	int cand[3] = {1, 2, 3}, out[3], zero = 0;
	bool alive[3] = {true, true, true};
	for (int i = 0; i < 5; i++) {
		reply(1, 100, 1, 0); /* slow */
		reply(2, 1, 0.5, 0); /* fast */
		reply(3, 3, 0.5, 0);
	}
	nd_rank_order(&IX0, cand, alive, 3, 4, out);
	CHECKF(out[0] == 2 && out[1] == 3 && out[2] == 1, "%d %d %d", out[0], out[1], out[2]);
	/* a dead copy goes last whatever its figures */
	alive[1] = false;
	nd_rank_order(&IX0, cand, alive, 3, 4, out);
	CHECKF(out[0] == 3 && out[2] == 2, "%d %d %d", out[0], out[1], out[2]);
	alive[1] = true;
	/* requests outstanding count cubed: the fast copy with 3 in flight
	 * ranks below the 3 ms one */
	for (int i = 0; i < 3; i++)
		nd_rank_sent(2, "ix", IX0.uuid, &zero, 1);
	nd_rank_order(&IX0, cand, alive, 3, 4, out);
	CHECKF(out[0] == 3, "%d %d %d", out[0], out[1], out[2]);
	for (int i = 0; i < 3; i++)
		nd_rank_done(2, "ix", IX0.uuid, &zero, 1, false, 0, NULL, 0, 0, false);
	/* so does a queue the node reports */
	reply(2, 1, 0.5, 6);
	nd_rank_order(&IX0, cand, alive, 3, 4, out);
	CHECKF(out[0] == 3, "queue: %d %d %d", out[0], out[1], out[2]);
	reply(2, 1, 0.5, 0);
	reply(2, 1, 0.5, 0);
	reply(2, 1, 0.5, 0);
	/* a copy nothing was sent to for 0.5 s gets one probe */
	sleep_ms(600);
	reply(2, 1, 0.5, 0);
	reply(3, 3, 0.5, 0);
	nd_rank_order(&IX0, cand, alive, 3, 4, out);
	CHECKF(out[0] == 1, "probe: %d %d %d", out[0], out[1], out[2]);
	nd_rank_order(&IX0, cand, alive, 3, 4, out);
	CHECKF(out[0] == 2, "after the probe: %d %d %d", out[0], out[1], out[2]);
	/* after a pause, a recovered copy's first fast reply weighs most: 100
	 * ms, then 1 ms after >= 1 s idle, beats a copy at 50 ms (a fixed
	 * weight of 0.3 would leave it at 70) */
	sleep_ms(600);
	for (int i = 0; i < 5; i++)
		reply(7, 50, 0.5, 0); /* (just sent to: no probe) */
	reply(1, 1, 0.5, 0);
	int c2[2] = {7, 1}, o2[2];
	bool a2[2] = {true, true};
	nd_rank_order(&IX0, c2, a2, 2, 4, o2);
	CHECKF(o2[0] == 1, "recovered: %d %d", o2[0], o2[1]);
}

/* Figures are per copy: two shards on one node rank apart, a per_node
 * reply's service times go to their shards, outstanding returns to 0,
 * and an unmeasured copy borrows its node's figures (or ranks first on
 * an unmeasured node, so it is tried). */
static void
test_per_copy(void)
{
	int cand[2] = {10, 11}, out[2];
	bool alive[2] = {true, true};
	const nd_rank_copy s0 = {"pc", "uuid-pc", 0}, s1 = {"pc", "uuid-pc", 1};
	/* node 10 is slow for shard 0 and fast for shard 1; node 11 the
	 * other way round */
	for (int i = 0; i < 5; i++) {
		reply_on(10, "uuid-pc", 0, 40, 30, 0);
		reply_on(10, "uuid-pc", 1, 2, 1, 0);
		reply_on(11, "uuid-pc", 0, 2, 1, 0);
		reply_on(11, "uuid-pc", 1, 40, 30, 0);
	}
	nd_rank_order(&s0, cand, alive, 2, 4, out);
	CHECKF(out[0] == 11, "shard 0: %d %d", out[0], out[1]);
	nd_rank_order(&s1, cand, alive, 2, 4, out);
	CHECKF(out[0] == 10, "shard 1: %d %d", out[0], out[1]);
	double r, sv;
	int os;
	REQUIRE(nd_rank_copy_figures(10, "uuid-pc", 0, &r, &sv, &os));
	CHECKF(r > 39000 && r < 41000 && sv > 29000 && sv < 31000 && os == 0, "%g %g %d", r, sv,
	       os);
	REQUIRE(nd_rank_copy_figures(10, "uuid-pc", 1, &r, &sv, &os));
	CHECKF(r > 1900 && r < 2100 && sv > 900 && sv < 1100, "%g %g", r, sv);
	/* one per_node message for shards 2, 3 and 4 of node 12: one round
	 * trip, a service time each; outstanding is counted per copy */
	int sh[3] = {2, 3, 4};
	uint64_t svc[3] = {1000, 5000, 9000};
	nd_rank_sent(12, "pc", "uuid-pc", sh, 3);
	REQUIRE(nd_rank_copy_figures(12, "uuid-pc", 3, &r, &sv, &os));
	CHECKF(os == 1, "outstanding %d", os);
	nd_rank_done(12, "pc", "uuid-pc", sh, 3, true, 10 * MS, svc, 3, 0, false);
	for (int i = 0; i < 3; i++) {
		REQUIRE(nd_rank_copy_figures(12, "uuid-pc", sh[i], &r, &sv, &os));
		CHECKF(os == 0 && r > 9999 && r < 10001 && sv == (double)svc[i],
		       "shard %d: %g %g %d", sh[i], r, sv, os);
	}
	/* a reply with fewer service times than shards: the rest take the
	 * largest */
	int sh2[2] = {5, 6};
	nd_rank_sent(12, "pc", "uuid-pc", sh2, 2);
	nd_rank_done(12, "pc", "uuid-pc", sh2, 2, true, 10 * MS, svc, 1, 0, false);
	REQUIRE(nd_rank_copy_figures(12, "uuid-pc", 6, &r, &sv, &os));
	CHECKF(sv == 1000, "%g", sv);
	/* a done after its copy was gone never makes outstanding negative */
	nd_rank_done(12, "pc", "uuid-pc", &sh[0], 1, false, 0, NULL, 0, 0, false);
	REQUIRE(nd_rank_copy_figures(12, "uuid-pc", 2, &r, &sv, &os));
	CHECK(os == 0);
	/* shard 7, never measured, follows its nodes' figures (measured on
	 * another index): node 13 slow, node 14 fast */
	for (int i = 0; i < 5; i++) {
		reply_on(13, "uuid-other", 0, 80, 60, 0);
		reply_on(14, "uuid-other", 0, 1, 0.5, 0);
	}
	const nd_rank_copy s7 = {"pc", "uuid-pc", 7};
	int c3[2] = {13, 14}, o3[2];
	nd_rank_order(&s7, c3, alive, 2, 4, o3);
	CHECKF(o3[0] == 14, "unmeasured copy, node figures: %d %d", o3[0], o3[1]);
	/* on a node never heard from, an unmeasured copy is tried first */
	int c4[2] = {14, 15}, o4[2];
	nd_rank_order(&s7, c4, alive, 2, 4, o4);
	CHECKF(o4[0] == 15, "unmeasured node: %d %d", o4[0], o4[1]);
	CHECK(!nd_rank_copy_figures(15, "uuid-pc", 7, &r, &sv, &os));
}

/* The table is bounded: far more copies than it holds evict the least
 * recently used, and a copy in use all along stays. */
static void
test_eviction(void)
{
	size_t cap;
	nd_rank_copies(&cap);
	REQUIRE(cap >= 64);
	int keep = 0;
	double r, sv;
	int os;
	char uuid[32];
	for (size_t i = 0; i < 4 * cap; i++) {
		int shard = (int)i;
		snprintf(uuid, sizeof(uuid), "uuid-ev-%zu", i % 7);
		nd_rank_sent(20 + (int)(i % 3), "ev", uuid, &shard, 1);
		nd_rank_done(20 + (int)(i % 3), "ev", uuid, &shard, 1, true, MS, NULL, 0, 0, false);
		/* a copy searched all along */
		nd_rank_sent(30, "keep", "uuid-keep", &keep, 1);
		nd_rank_done(30, "keep", "uuid-keep", &keep, 1, true, 3 * MS, NULL, 0, 0, false);
		CHECK(nd_rank_copies(NULL) <= cap);
	}
	CHECK(nd_rank_copies(NULL) <= cap);
	CHECK(nd_rank_copy_figures(30, "uuid-keep", 0, &r, &sv, &os));
	CHECK(r > 2900 && r < 3100);
	/* the first copies went */
	CHECK(!nd_rank_copy_figures(20, "uuid-ev-0", 0, &r, &sv, &os));
	CHECK(!nd_rank_copy_figures(21, "uuid-ev-1", 1, &r, &sv, &os));
	/* the newest are there */
	int last = (int)(4 * cap - 1);
	snprintf(uuid, sizeof(uuid), "uuid-ev-%d", last % 7);
	CHECK(nd_rank_copy_figures(20 + last % 3, uuid, last, &r, &sv, &os));
	/* an evicted copy is still ranked (as unmeasured, by its node) and
	 * so tried again */
	const nd_rank_copy gone = {"ev", "uuid-ev-0", 0};
	int c[2] = {20, 40}, o[2];
	bool alive[2] = {true, true};
	nd_rank_order(&gone, c, alive, 2, 4, o);
	CHECKF(o[0] == 40 && o[1] == 20, "%d %d", o[0], o[1]);
}

static void
test_hedge_delay(void)
{
	int z = 0;
	/* node 5: unknown -> the floor; few samples -> twice the EWMA */
	CHECK(nd_rank_hedge_delay(5, "ix", IX0.uuid, &z, 1, 2 * MS) == 2 * MS);
	reply(5, 10, 1, 0);
	uint64_t d = nd_rank_hedge_delay(5, "ix", IX0.uuid, &z, 1, 2 * MS);
	CHECKF(d >= 19 * MS && d <= 21 * MS, "%llu", (unsigned long long)d);
	/* 64 samples 1..64 ms: the p95 is the 61st */
	for (int i = 1; i <= 64; i++)
		reply(6, i, 0.1, 0);
	d = nd_rank_hedge_delay(6, "ix", IX0.uuid, &z, 1, 2 * MS);
	CHECKF(d >= 60 * MS && d <= 62 * MS, "%llu", (unsigned long long)d);
	CHECK(nd_rank_hedge_delay(6, "ix", IX0.uuid, &z, 1, 100 * MS) == 100 * MS);
	/* per copy: shard 1 on node 6 is fast, so a message for shard 1
	 * alone waits less than one for shards 0 and 1 (the largest) */
	int one = 1, both[2] = {0, 1};
	for (int i = 0; i < 20; i++)
		reply_on(6, IX0.uuid, 1, 3, 0.1, 0);
	d = nd_rank_hedge_delay(6, "ix", IX0.uuid, &one, 1, 2 * MS);
	CHECKF(d >= 2 * MS && d <= 4 * MS, "%llu", (unsigned long long)d);
	d = nd_rank_hedge_delay(6, "ix", IX0.uuid, both, 2, 2 * MS);
	CHECKF(d >= 60 * MS && d <= 62 * MS, "%llu", (unsigned long long)d);
	/* a lost race counts its elapsed time */
	for (int i = 0; i < 64; i++)
		nd_rank_censored(6, &IX0, 500 * MS);
	d = nd_rank_hedge_delay(6, "ix", IX0.uuid, &z, 1, 2 * MS);
	CHECK(d >= 499 * MS && d <= 501 * MS);
	CHECK(nd_rank_hedge_delay(-1, "ix", IX0.uuid, &z, 1, 3 * MS) == 3 * MS);
}

static void
test_budget(void)
{
	while (nd_rank_take(1)) /* whatever the other tests earned */
		;
	CHECK(!nd_rank_take(1));
	nd_rank_earn(100, 0.05);
	CHECK(nd_rank_take(5));
	CHECK(!nd_rank_take(1));
	nd_rank_earn(100000, 0.5); /* saved up: 10 at most */
	CHECK(nd_rank_take(10));
	CHECK(!nd_rank_take(1));
	nd_rank_earn(40, 0.05);
	CHECK(!nd_rank_take(3)); /* all or none */
	CHECK(nd_rank_take(2));
}

static pthread_mutex_t fired_mu = PTHREAD_MUTEX_INITIALIZER;
static int fired[8], nfired;

static void
on_timer(void *arg)
{
	pthread_mutex_lock(&fired_mu);
	fired[nfired++] = (int)(intptr_t)arg;
	pthread_mutex_unlock(&fired_mu);
}

static void
test_timers(void)
{
	uint64_t now = cm_now_ns();
	nd_rank_timer(now + 60 * MS, on_timer, (void *)3);
	nd_rank_timer(now + 20 * MS, on_timer, (void *)1);
	nd_rank_timer(now + 40 * MS, on_timer, (void *)2);
	nd_rank_timer(now, on_timer, (void *)0);
	for (int i = 0; i < 200; i++) {
		pthread_mutex_lock(&fired_mu);
		int n = nfired;
		pthread_mutex_unlock(&fired_mu);
		if (n == 4)
			break;
		sleep_ms(10);
	}
	CHECK(nfired == 4);
	CHECK(fired[0] == 0 && fired[1] == 1 && fired[2] == 2 && fired[3] == 3);
	CHECK(cm_now_ns() - now >= 60 * MS);
}

static void
cancel(uint64_t id)
{
	cm_buf in, out;
	uint32_t type;
	cm_buf_init(&in, CM_MEM_NODE);
	cm_buf_init(&out, CM_MEM_NODE);
	pr_search_cancel_encode(&id, 1, &in);
	nd_rank_serve_cancel(in.data, in.len, &out, &type);
	CHECK(type == PR_ACK);
	cm_buf_free(&in);
	cm_buf_free(&out);
}

static void
test_cancel(void)
{
	const _Atomic _Bool *flag;
	uint64_t a = nd_rank_cancel_id(), b = nd_rank_cancel_id();
	CHECK(a && b && a != b);
	CHECK(nd_rank_begin(0, &flag) == NULL && flag == NULL);
	/* cancelled while running */
	nd_rank_run *r = nd_rank_begin(a, &flag);
	REQUIRE(r && flag);
	CHECK(!*flag);
	cancel(a);
	CHECK(*flag);
	nd_rank_end(r);
	/* cancelled before it started: it starts stopped */
	cancel(b);
	r = nd_rank_begin(b, &flag);
	REQUIRE(r && flag);
	CHECK(*flag);
	nd_rank_end(r);
	/* another request is not touched */
	uint64_t c = nd_rank_cancel_id();
	r = nd_rank_begin(c, &flag);
	REQUIRE(r && flag);
	CHECK(!*flag);
	nd_rank_end(r);
	/* a malformed cancel is an error reply */
	cm_buf out;
	uint32_t type;
	cm_buf_init(&out, CM_MEM_NODE);
	nd_rank_serve_cancel((const uint8_t *)"\xff\xff\xff", 3, &out, &type);
	CHECK(type == PR_ERROR);
	cm_buf_free(&out);
}

int
main(void)
{
	test_settings();
	test_order();
	test_per_copy();
	test_eviction();
	test_hedge_delay();
	test_budget();
	test_timers();
	test_cancel();
	return check_report("rank_test");
}
