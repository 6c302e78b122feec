/* The cluster's logic that needs no running cluster: cluster settings
 * parsed once (nd_cluster_settings.c: transient over persistent, values as
 * text, the allocation fields and their defaults, exclude lists) and the
 * preference parser (nd_cluster_copies.c). */
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

int
main(void)
{
	test_settings_defaults();
	test_settings_parsed();
	test_preference();
	return check_report("cluster_test");
}
