/* The cluster's logic that needs no running cluster: cluster settings
 * parsed once (nd_cluster_settings.c: transient over persistent, values as
 * text, the allocation fields and their defaults, exclude lists), the
 * preference parser and the order a shard's copies are tried in
 * (nd_cluster_copies.c), and one shard's health (nd_cluster_views.c). */
#include <stdatomic.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "check.h"
#include "nd_cluster_private.h"

static void
test_settings_defaults(void)
{
	cl_settings *s = cl_settings_parse(NULL);
	char v[64];
	CHECK(s->n == 0);
	CHECK(s->enable == RP_ALLOC_ALL && strcmp(s->enable_text, "all") == 0);
	CHECK(s->rebalance == RP_REBALANCE_ALL);
	CHECK(s->max_recoveries == 2);
	CHECK(!s->exclude_name && !s->exclude_ip);
	CHECK(!cl_setting_in(s, "cluster.routing.allocation.enable", v, sizeof(v)));
	cl_settings_put(s);
	/* malformed text is no settings, not a crash */
	s = cl_settings_parse("{\"persistent\":");
	CHECK(s->n == 0 && s->max_recoveries == 2);
	cl_settings_put(s);
}

static void
test_settings_parsed(void)
{
	cl_settings *s = cl_settings_parse(
	    "{\"persistent\":{\"cluster.routing.allocation.enable\":\"none\","
	    "\"cluster.routing.allocation.node_concurrent_recoveries\":5,"
	    "\"search.hedge.enabled\":false,\"zeta\":\"p\",\"alpha\":\"p\"},"
	    "\"transient\":{\"cluster.routing.allocation.enable\":\"primaries\","
	    "\"cluster.routing.rebalance.enable\":\"replicas\","
	    "\"cluster.routing.allocation.exclude._name\":\"node-2, n*-9\","
	    "\"zeta\":\"t\",\"obj\":{\"x\":1},\"arr\":[1]}}");
	char v[64];
	CHECK(s->enable == RP_ALLOC_PRIMARIES); /* transient wins */
	CHECK(strcmp(s->enable_text, "primaries") == 0);
	CHECK(s->rebalance == RP_REBALANCE_REPLICAS);
	CHECK(s->max_recoveries == 5);
	CHECK(s->exclude_name && strcmp(s->exclude_name, "node-2, n*-9") == 0);
	CHECK(cl_setting_in(s, "zeta", v, sizeof(v)) && strcmp(v, "t") == 0);
	CHECK(cl_setting_in(s, "alpha", v, sizeof(v)) && strcmp(v, "p") == 0);
	CHECK(cl_setting_in(s, "search.hedge.enabled", v, sizeof(v)) && strcmp(v, "false") == 0);
	CHECK(cl_setting_in(s, "cluster.routing.allocation.node_concurrent_recoveries", v,
	                    sizeof(v)) &&
	      strcmp(v, "5") == 0);
	CHECK(!cl_setting_in(s, "obj", v, sizeof(v)) && !cl_setting_in(s, "arr", v, sizeof(v)));
	CHECK(!cl_setting_in(s, "zet", v, sizeof(v)));
	/* the table is sorted: every key is found by its binary search */
	const char *keys[] = {"alpha", "zeta", "cluster.routing.rebalance.enable",
	                      "cluster.routing.allocation.exclude._name"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		CHECKF(cl_setting_in(s, keys[i], v, sizeof(v)), "%s", keys[i]);
	/* a reference outlives the table's owner */
	atomic_fetch_add(&s->refs, 1);
	cl_settings_put(s);
	CHECK(cl_setting_in(s, "alpha", v, sizeof(v)));
	cl_settings_put(s);
	/* unknown or bad values fall back to the defaults */
	s = cl_settings_parse(
	    "{\"persistent\":{\"cluster.routing.allocation.enable\":\"sometimes\","
	    "\"cluster.routing.allocation.node_concurrent_recoveries\":\"-3\"}}");
	CHECK(s->enable == RP_ALLOC_ALL && strcmp(s->enable_text, "sometimes") == 0);
	CHECK(s->max_recoveries == 2);
	cl_settings_put(s);
}

static void
test_preference(void)
{
	cm_error e;
	const char *good[] = {NULL,         "",          "_local",           "_only_local",
	                      "_primary",   "custom-7",  "_only_nodes:a,b",  "_prefer_nodes:x",
	                      "_shards:0",  "_shards:1, 3", "_shards:2|_local", "_shards:0|abc"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		cm_error_clear(&e);
		CHECKF(nd_cl_preference_check(good[i], &e) == CM_OK, "%s: %s",
		       good[i] ? good[i] : "(null)", e.reason);
	}
	const char *bad[] = {"_shards:",  "_shards:x",       "_shards:1|_shards:2", "_replica",
	                     "_only_nodes:", "_shards:99999999999", "_prefer_nodes:", "_bogus"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cm_error_clear(&e);
		CHECKF(nd_cl_preference_check(bad[i], &e) == CM_EINVAL, "%s", bad[i]);
		CHECK(e.reason[0] != 0);
	}
	CHECK(nd_cl_pref_shard(NULL, 3) && nd_cl_pref_shard("_local", 3));
	CHECK(nd_cl_pref_shard("_shards:1, 3", 3) && !nd_cl_pref_shard("_shards:1, 3", 2));
	CHECK(nd_cl_pref_shard("_shards:2|_local", 2) && !nd_cl_pref_shard("_shards:2|_local", 0));
	CHECK(nd_cl_pref_copies("_shards:2") == NULL);
	CHECK(strcmp(nd_cl_pref_copies("_shards:2|_local"), "_local") == 0);
	CHECK(strcmp(nd_cl_pref_copies("_primary"), "_primary") == 0);
	CHECK(nd_cl_pref_copies(NULL) == NULL);
}

/* Ranks by a fixed latency per node, as order_ranked does by its EWMAs. */
static const double lat_of[] = {5, 1, 3, 2, 9, 4};

static void
rank_by_latency(void *arg, const int *cand, int n, int *order, int *norder)
{
	int *calls = arg, v[ND_CL_MAX_COPIES];
	(*calls)++;
	memcpy(v, cand, (size_t)n * sizeof(int));
	for (int i = 0; i < n; i++) {
		int best = i;
		for (int k = i + 1; k < n; k++)
			if (lat_of[v[k]] < lat_of[v[best]])
				best = k;
		int t = v[i];
		v[i] = v[best];
		v[best] = t;
		order[(*norder)++] = v[i];
	}
}

static int
pick(const cl_copy_in *in, const char *pref, char *out)
{
	int order[ND_CL_MAX_COPIES], n = cl_copy_pick(in, pref, order);
	out[0] = 0;
	for (int i = 0; i < n; i++)
		sprintf(out + strlen(out), "%s%d", i ? "," : "", order[i]);
	return n;
}

static void
test_copy_order(void)
{
	static const char *const names[] = {"n0", "n1", "n2", "n3", "n4", "n5"};
	int copies[] = {4, 0, 2, 1}, calls = 0;
	char got[64];
	cl_copy_in in = {.copies = copies,
	                 .ncopies = 4,
	                 .routed = true,
	                 .in_sync = (1u << 4) | (1u << 0) | (1u << 2), /* 1 is recovering */
	                 .primary = 0,
	                 .self = 2,
	                 .names = names,
	                 .rank = rank_by_latency,
	                 .arg = &calls};
	/* default: the local copy, then the other in-sync copies by latency */
	pick(&in, NULL, got);
	CHECKF(strcmp(got, "2,0,4") == 0, "%s", got);
	pick(&in, "_local", got);
	CHECKF(strcmp(got, "2,0,4") == 0, "%s", got);
	/* not a copy here: every in-sync copy ranked */
	in.self = 5;
	pick(&in, "", got);
	CHECKF(strcmp(got, "2,0,4") == 0, "%s", got); /* 3, 5 and 9 ms */
	in.self = 2;
	/* _primary: the primary only */
	pick(&in, "_primary", got);
	CHECKF(strcmp(got, "0") == 0, "%s", got);
	/* _only_local: this node's copy or nothing */
	pick(&in, "_only_local", got);
	CHECKF(strcmp(got, "2") == 0, "%s", got);
	in.self = 3;
	CHECK(pick(&in, "_only_local", got) == 0);
	in.self = 2;
	/* _only_nodes: the named copies in placement order, in sync or not */
	pick(&in, "_only_nodes:n1,n4", got);
	CHECKF(strcmp(got, "4,1") == 0, "%s", got);
	pick(&in, "_only_nodes:n*", got);
	CHECKF(strcmp(got, "4,0,2,1") == 0, "%s", got);
	/* _prefer_nodes: those copies first (ranked), then the rest (local first) */
	pick(&in, "_prefer_nodes:n4", got);
	CHECKF(strcmp(got, "4,2,0") == 0, "%s", got);
	pick(&in, "_prefer_nodes:n0,n2", got);
	CHECKF(strcmp(got, "2,0,4") == 0, "%s", got);
	/* a custom string: every in-sync copy, the same rotation every time */
	char a[64], b[64];
	pick(&in, "session-1", a);
	pick(&in, "session-1", b);
	CHECK(strcmp(a, b) == 0 && strlen(a) == 5);
	int hit[6] = {0};
	for (int s = 0; s < 60; s++) {
		char pref[16];
		snprintf(pref, sizeof(pref), "s%d", s);
		pick(&in, pref, got);
		hit[got[0] - '0']++;
	}
	CHECKF(hit[0] && hit[2] && hit[4] && !hit[1], "sessions spread %d %d %d", hit[0], hit[2],
	       hit[4]);
	/* no routing known (a static cluster's formula): every copy counts */
	in.routed = false;
	pick(&in, NULL, got);
	CHECKF(strcmp(got, "2,1,0,4") == 0, "%s", got);
	in.routed = true;
	/* no copy in sync: nothing to ask */
	in.in_sync = 1u << 1 | 1u << 3;
	calls = 0;
	CHECK(pick(&in, NULL, got) == 1); /* node 1: in sync again */
	in.in_sync = 1u << 3;
	CHECK(pick(&in, NULL, got) == 0 && pick(&in, "_primary", got) == 0);
}

static cl_shard_health
health(const int *copies, int nc, bool routed, uint64_t in_sync, int primary, int reloc,
       int want, uint64_t alive, uint64_t joined)
{
	cl_shard_view v = {copies, nc, routed, in_sync, primary, reloc, want, alive, joined};
	cl_shard_health h;
	cl_shard_health_of(&v, &h);
	return h;
}

static void
test_shard_health(void)
{
	int c2[] = {0, 1}, c3[] = {0, 1, 2};
	uint64_t all = 0x7, none = 0;
	/* two copies in sync on live, joined nodes: green */
	cl_shard_health h = health(c2, 2, true, 0x3, 0, -1, 2, all, all);
	CHECK(h.primary_up && !h.yellow && !h.relocating);
	CHECK(h.active == 2 && h.initializing == 0 && h.unassigned == 0);
	/* the primary's node is down: red; the replica still counts */
	h = health(c2, 2, true, 0x3, 0, -1, 2, 0x6, all);
	CHECK(!h.primary_up && h.yellow && h.active == 1 && h.unassigned == 1);
	/* a replica recovering (out of sync): yellow, initializing */
	h = health(c2, 2, true, 0x1, 0, -1, 2, all, all);
	CHECK(h.primary_up && h.yellow && h.active == 1 && h.initializing == 1 &&
	      h.unassigned == 0);
	/* a node up but not yet taken in since its restart: initializing */
	h = health(c2, 2, true, 0x3, 0, -1, 2, all, 0x1);
	CHECK(h.yellow && h.active == 1 && h.initializing == 1);
	/* a relocation: the new copy (out of sync) is the move, not a missing one */
	h = health(c3, 3, true, 0x3, 0, 1, 2, all, all);
	CHECK(h.relocating && !h.yellow && h.active == 2 && h.initializing == 0 &&
	      h.unassigned == 0);
	/* one copy more than wanted, all in sync: moving, counted as wanted */
	h = health(c3, 3, true, 0x7, 0, -1, 2, all, all);
	CHECK(h.relocating && !h.yellow && h.active == 2);
	/* a replica that has no node at all: unassigned */
	h = health(c2, 1, true, 0x1, 0, -1, 2, all, all);
	CHECK(h.yellow && h.active == 1 && h.unassigned == 1);
	/* nothing alive */
	h = health(c2, 2, true, 0x3, 0, -1, 2, none, all);
	CHECK(!h.primary_up && h.active == 0 && h.unassigned == 2);
	/* no routing (a static cluster's formula): the first copy leads */
	h = health(c2, 2, false, 0, -1, -1, 2, 0x2, all);
	CHECK(!h.primary_up && h.active == 1);
	h = health(c2, 2, false, 0, -1, -1, 2, all, all);
	CHECK(h.primary_up && !h.yellow);
}

int
main(void)
{
	test_settings_defaults();
	test_settings_parsed();
	test_preference();
	test_copy_order();
	test_shard_health();
	return check_report("cluster_test");
}
