/* The routing / in-sync state machine: join, shard failed and started,
 * promotion, stale terms; every event applied twice changes nothing the
 * second time; the protobuf form round-trips. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "replication/rp.h"

static const char *names[] = {"node-1", "node-2", "node-3"};
static const int data[] = {0, 1, 2};

static rp_state *
three_shards(void)
{
	rp_state *st = rp_state_new();
	rp_index *ix = rp_state_add_index(st, "logs", "u1", 3, 1, data, 3);
	rp_index_set_text(&ix->body, "{\"settings\":{}}");
	rp_index_set_text(&ix->mappings, "{\"properties\":{}}");
	rp_index_add_setting(ix, "{\"index\":{\"refresh_interval\":\"1s\"}}");
	st->version = 7;
	return st;
}

static rp_event
ev_of(rp_event_kind k, int shard, int node, int primary, uint64_t term)
{
	return (rp_event){.kind = k,
	                  .index = "logs",
	                  .uuid = "u1",
	                  .shard = shard,
	                  .node = node,
	                  .primary = primary,
	                  .term = term,
	                  .reason = "test"};
}

static void
test_placement(void)
{
	rp_state *st = three_shards();
	rp_index *ix = rp_state_index(st, "logs");
	REQUIRE(ix && ix->nshards == 3);
	for (int s = 0; s < 3; s++) {
		CHECK(ix->routes[s].primary == s);
		CHECK(ix->routes[s].ncopies == 2);
		CHECK(ix->routes[s].copies[1] == (s + 1) % 3);
		CHECK(ix->routes[s].in_sync == ((1ull << s) | (1ull << ((s + 1) % 3))));
		CHECK(ix->routes[s].term == 1);
	}
	/* more replicas than data nodes: one copy per node */
	rp_index *b = rp_state_add_index(st, "big", "u2", 1, 5, data, 3);
	CHECK(b->routes[0].ncopies == 3);
	CHECK(rp_state_remove_index(st, "big"));
	CHECK(!rp_state_remove_index(st, "big"));
	CHECK(st->nindices == 1);
	rp_state_free(st);
}

static void
test_failed_started(void)
{
	rp_state *st = three_shards();
	rp_index *ix = rp_state_index(st, "logs");
	cm_error err;
	bool changed;

	/* shard 0: primary node-1 (0), replica node-2 (1) */
	rp_event f = ev_of(RP_EV_FAILED, 0, 1, 0, 1);
	cm_error_clear(&err);
	CHECK(rp_state_apply(st, &f, &changed, &err) == CM_OK && changed);
	CHECK(ix->routes[0].in_sync == 1ull);
	CHECK(rp_state_apply(st, &f, &changed, &err) == CM_OK && !changed);

	rp_event s = ev_of(RP_EV_STARTED, 0, 1, 0, 1);
	CHECK(rp_state_apply(st, &s, &changed, &err) == CM_OK && changed);
	CHECK(ix->routes[0].in_sync == 3ull);
	CHECK(rp_state_apply(st, &s, &changed, &err) == CM_OK && !changed);

	/* a node without a copy of the shard cannot start one */
	rp_event bad = ev_of(RP_EV_STARTED, 0, 2, 0, 1);
	cm_error_clear(&err);
	CHECK(rp_state_apply(st, &bad, &changed, &err) == CM_EINVAL && !changed);

	/* stale: another term, another primary, another uuid, no such shard */
	rp_event stale = ev_of(RP_EV_FAILED, 0, 1, 0, 2);
	cm_error_clear(&err);
	CHECK(rp_state_apply(st, &stale, &changed, &err) == CM_ECONFLICT && !changed);
	CHECK(strcmp(cm_error_type(&err), "shard_state_exception") == 0);
	stale = ev_of(RP_EV_FAILED, 0, 1, 2, 1);
	cm_error_clear(&err);
	CHECK(rp_state_apply(st, &stale, &changed, &err) == CM_ECONFLICT);
	stale = ev_of(RP_EV_FAILED, 0, 1, 0, 1);
	stale.uuid = "other";
	cm_error_clear(&err);
	CHECK(rp_state_apply(st, &stale, &changed, &err) == CM_ECONFLICT);
	stale = ev_of(RP_EV_FAILED, 9, 1, 0, 1);
	cm_error_clear(&err);
	CHECK(rp_state_apply(st, &stale, &changed, &err) == CM_ENOINDEX);
	CHECK(ix->routes[0].in_sync == 3ull);
	rp_state_free(st);
}

static void
test_join(void)
{
	rp_state *st = three_shards();
	rp_index *ix = rp_state_index(st, "logs");
	cm_error err;
	bool changed;
	rp_event j = {.kind = RP_EV_JOIN, .node = 1, .primary = -1, .boot = 0xabc};
	cm_error_clear(&err);
	CHECK(rp_state_apply(st, &j, &changed, &err) == CM_OK && changed);
	CHECK(st->joined[1] == 0xabc);
	/* node-2 leads shard 1: its replica (node-3) resyncs from it */
	CHECK(ix->routes[1].in_sync == (1ull << 1));
	/* node-2 is the replica of shard 0: it leaves the set */
	CHECK(ix->routes[0].in_sync == 1ull);
	/* shard 2 (node-3, node-1) is untouched */
	CHECK(ix->routes[2].in_sync == ((1ull << 2) | 1ull));
	/* the same process again: nothing changes, not even after recovery */
	rp_event s = ev_of(RP_EV_STARTED, 0, 1, 0, 1);
	CHECK(rp_state_apply(st, &s, &changed, &err) == CM_OK && changed);
	CHECK(rp_state_apply(st, &j, &changed, &err) == CM_OK && !changed);
	CHECK(ix->routes[0].in_sync == 3ull);
	/* a new process of the same node joins again */
	j.boot = 0xdef;
	CHECK(rp_state_apply(st, &j, &changed, &err) == CM_OK && changed);
	CHECK(ix->routes[0].in_sync == 1ull);
	rp_state_free(st);
}

static void
test_failover(void)
{
	rp_state *st = three_shards();
	rp_index *ix = rp_state_index(st, "logs");
	cm_error err;
	bool changed;
	uint64_t all = 7;
	/* node-1 (0) is gone: shard 0 moves to node-2, term 2 */
	CHECK(rp_state_failover(st, 1ull, all & ~1ull));
	CHECK(ix->routes[0].primary == 1 && ix->routes[0].term == 2);
	CHECK(ix->routes[0].in_sync == (1ull << 1));
	CHECK(ix->routes[1].primary == 1 && ix->routes[1].term == 1);
	CHECK(ix->routes[2].primary == 2 && ix->routes[2].term == 1);
	/* twice: the new primary is not gone, nothing changes */
	CHECK(!rp_state_failover(st, 1ull, all & ~1ull));
	/* the old primary's events carry a stale term now */
	rp_event f = ev_of(RP_EV_FAILED, 0, 1, 0, 1);
	cm_error_clear(&err);
	CHECK(rp_state_apply(st, &f, &changed, &err) == CM_ECONFLICT && !changed);
	/* no in-sync copy alive: the shard stays without a new primary */
	rp_state *st2 = three_shards();
	rp_index *ix2 = rp_state_index(st2, "logs");
	CHECK(!rp_state_failover(st2, 1ull, 0));
	CHECK(ix2->routes[0].primary == 0 && ix2->routes[0].term == 1);
	/* an out-of-sync replica is never promoted */
	rp_event f2 = ev_of(RP_EV_FAILED, 0, 1, 0, 1);
	CHECK(rp_state_apply(st2, &f2, &changed, &err) == CM_OK && changed);
	CHECK(!rp_state_failover(st2, 1ull, 6));
	CHECK(ix2->routes[0].primary == 0);
	rp_state_free(st);
	rp_state_free(st2);
}

static void
test_replicas(void)
{
	rp_state *st = three_shards();
	rp_index *ix = rp_state_index(st, "logs");
	/* 1 -> 2: a third copy per shard, out of sync, on the missing node */
	CHECK(rp_state_set_replicas(st, "logs", 2, data, 3));
	for (int s = 0; s < 3; s++) {
		rp_route *ro = &ix->routes[s];
		CHECK(ro->ncopies == 3);
		CHECK(ro->copies[2] == (s + 2) % 3);
		CHECK(!((ro->in_sync >> ro->copies[2]) & 1));
		CHECK(ro->primary == s);
	}
	CHECK(!rp_state_set_replicas(st, "logs", 2, data, 3));
	/* more than the data nodes: capped */
	CHECK(rp_state_set_replicas(st, "logs", 5, data, 3));
	CHECK(ix->routes[0].ncopies == 3 && ix->nreplicas == 5);
	/* 2 -> 1: the out-of-sync copy goes first */
	CHECK(rp_state_set_replicas(st, "logs", 1, data, 3));
	for (int s = 0; s < 3; s++) {
		rp_route *ro = &ix->routes[s];
		CHECK(ro->ncopies == 2 && ro->copies[0] == s && ro->copies[1] == (s + 1) % 3);
		CHECK(ro->in_sync == ((1ull << s) | (1ull << ((s + 1) % 3))));
	}
	/* -> 0: only the primary stays, even when it is not copy 0 */
	ix->routes[1].primary = 2;
	CHECK(rp_state_set_replicas(st, "logs", 0, data, 3));
	CHECK(ix->routes[1].ncopies == 1 && ix->routes[1].copies[0] == 2);
	CHECK(ix->routes[1].in_sync == (1ull << 2));
	CHECK(!rp_state_set_replicas(st, "nope", 1, data, 3));
	CHECK(!rp_state_set_replicas(st, "logs", -1, data, 3));
	rp_state_free(st);
}

static void
test_wire(void)
{
	rp_state *st = three_shards();
	rp_event j = {.kind = RP_EV_JOIN, .node = 2, .primary = -1, .boot = 0x1234};
	cm_error err;
	bool changed;
	cm_error_clear(&err);
	CHECK(rp_state_apply(st, &j, &changed, &err) == CM_OK);
	rp_index_set_text(&rp_state_index(st, "logs")->mappings, "{\"properties\":{\"a\":1}}");
	cm_buf b;
	cm_buf_init(&b, CM_MEM_REPLICATION);
	rp_state_encode(st, names, 3, &b);
	rp_state *d = NULL;
	REQUIRE(rp_state_decode(b.data, b.len, names, 3, &d, &err) == CM_OK);
	CHECK(d->version == 7 && d->nindices == 1 && d->joined[2] == 0x1234);
	rp_index *x = rp_state_index(d, "logs"), *y = rp_state_index(st, "logs");
	CHECK(strcmp(x->uuid, "u1") == 0 && x->nshards == 3 && x->nreplicas == 1);
	CHECK(strcmp(x->mappings, y->mappings) == 0 && strcmp(x->body, y->body) == 0);
	CHECK(x->nsettings == 1 && strcmp(x->settings_log[0], y->settings_log[0]) == 0);
	CHECK(memcmp(x->routes, y->routes, 3 * sizeof(rp_route)) == 0);
	/* a node the reader does not know is neither a copy nor in sync */
	rp_state *e = NULL;
	REQUIRE(rp_state_decode(b.data, b.len, names, 2, &e, &err) == CM_OK);
	CHECK(rp_state_index(e, "logs")->routes[2].primary == -1);
	CHECK(rp_state_index(e, "logs")->routes[1].in_sync == (1ull << 1));
	/* bad bytes fail cleanly */
	cm_error_clear(&err);
	rp_state *z = NULL;
	CHECK(rp_state_decode("\xff\xff\xff", 3, names, 3, &z, &err) == CM_EPARSE && !z);
	/* dup is deep */
	rp_state *c = rp_state_dup(st);
	rp_index_set_text(&rp_state_index(c, "logs")->body, "{}");
	CHECK(strcmp(rp_state_index(st, "logs")->body, "{\"settings\":{}}") == 0);
	/* events round-trip */
	rp_event f = ev_of(RP_EV_FAILED, 2, 0, 2, 1), g;
	void *keep = NULL;
	cm_buf_reset(&b);
	rp_event_encode(&f, names, &b);
	cm_error_clear(&err);
	REQUIRE(rp_event_decode(b.data, b.len, names, 3, &g, &keep, &err) == CM_OK);
	CHECK(g.kind == RP_EV_FAILED && g.shard == 2 && g.node == 0 && g.primary == 2 &&
	      g.term == 1 && strcmp(g.index, "logs") == 0 && strcmp(g.reason, "test") == 0);
	rp_event_free(keep);
	rp_state_free(c);
	rp_state_free(d);
	rp_state_free(e);
	rp_state_free(st);
	cm_buf_free(&b);
}

/* Lookups by name go through the state's table: right after adds,
 * removes (positions shift), merges, a decode and a copy, with thousands
 * of indices; rp_index_same sees every encoded field. */
static void
test_many_indices(void)
{
	rp_state *st = rp_state_new();
	char name[32];
	for (int i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "ix-%04d", i);
		rp_state_add_index(st, name, "u", 1, 1, data, 3);
	}
	CHECK(st->nindices == 3000);
	for (int i = 0; i < 3000; i += 2) {
		snprintf(name, sizeof(name), "ix-%04d", i);
		CHECK(rp_state_remove_index(st, name));
	}
	CHECK(st->nindices == 1500);
	for (int i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "ix-%04d", i);
		rp_index *x = rp_state_index(st, name);
		CHECK((x != NULL) == (i % 2 == 1));
		if (x)
			CHECK(strcmp(x->name, name) == 0);
	}
	CHECK(rp_state_index(st, "nope") == NULL);
	rp_state_add_index(st, "ix-0001", "u2", 2, 0, data, 3); /* replaces */
	CHECK(st->nindices == 1500);
	CHECK(strcmp(rp_state_index(st, "ix-0001")->uuid, "u2") == 0);

	cm_buf b;
	cm_buf_init(&b, CM_MEM_REPLICATION);
	rp_state_encode(st, names, 3, &b);
	rp_state *back = NULL;
	cm_error err;
	CHECK(rp_state_decode(b.data, b.len, names, 3, &back, &err) == CM_OK);
	rp_state *dup = rp_state_dup(back);
	for (int i = 1; i < 3000; i += 2) {
		snprintf(name, sizeof(name), "ix-%04d", i);
		rp_index *x = rp_state_index(back, name), *y = rp_state_index(dup, name);
		CHECK(x && y && strcmp(x->name, name) == 0 && strcmp(y->name, name) == 0);
		CHECK(x && y && rp_index_same(x, y));
		CHECK(x && rp_index_same(x, rp_state_index(st, name)));
	}
	/* a part merged in replaces its index; a new one is found */
	rp_state *part = rp_state_new();
	rp_state_add_index(part, "ix-0003", "u3", 1, 1, data, 3);
	rp_state_add_index(part, "fresh", "u4", 1, 1, data, 3);
	cm_buf_reset(&b);
	rp_state_encode(part, names, 3, &b);
	CHECK(rp_state_merge(dup, b.data, b.len, names, 3, &err) == CM_OK);
	CHECK(dup->nindices == 1501);
	CHECK(strcmp(rp_state_index(dup, "ix-0003")->uuid, "u3") == 0);
	CHECK(rp_state_index(dup, "fresh") != NULL);
	CHECK(!rp_index_same(rp_state_index(dup, "ix-0003"), rp_state_index(back, "ix-0003")));
	/* each field the encoding carries makes a difference */
	rp_index *x = rp_state_index(dup, "ix-0005"), *y = rp_state_index(back, "ix-0005");
	CHECK(rp_index_same(x, y));
	x->routes[0].in_sync ^= 1;
	CHECK(!rp_index_same(x, y));
	x->routes[0].in_sync ^= 1;
	x->routes[0].term++;
	CHECK(!rp_index_same(x, y));
	x->routes[0].term--;
	rp_index_set_text(&x->mappings, "{\"properties\":{\"a\":{}}}");
	CHECK(!rp_index_same(x, y));
	cm_buf_free(&b);
	rp_state_free(part);
	rp_state_free(dup);
	rp_state_free(back);
	rp_state_free(st);
}

int
main(void)
{
	test_many_indices();
	test_placement();
	test_failed_started();
	test_join();
	test_failover();
	test_replicas();
	test_wire();
	CHECK(cm_mem_used(CM_MEM_REPLICATION) == 0);
	return check_report("rp_state_test");
}
