/* The allocator (rp_state_allocate) as the master runs it, round after
 * round, with recoveries finishing between rounds: a node that joins gets
 * its share, a drained node empties (its primaries handed over with a new
 * term), a node gone past the delayed timeout has its copies rebuilt
 * elsewhere and not before, recoveries are throttled per node, and a
 * balanced state stays as it is. Also the state's parts for etcd. */
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "check.h"
#include "replication/rp.h"

static const char *names[] = {"n0", "n1", "n2", "n3"};

static uint64_t
delay_10s(void *arg, const rp_index *ix)
{
	(void)arg, (void)ix;
	return 10000000000ull;
}

/* Every recovery under way finishes. */
static void
settle(rp_state *st)
{
	for (size_t i = 0; i < st->nindices; i++)
		for (int s = 0; s < st->indices[i].nshards; s++) {
			rp_route *ro = &st->indices[i].routes[s];
			for (int c = 0; c < ro->ncopies; c++)
				ro->in_sync |= 1ull << ro->copies[c];
		}
}

static int
on(const rp_state *st, const char *index, int node)
{
	int n = 0;
	for (size_t i = 0; i < st->nindices; i++) {
		if (index && strcmp(st->indices[i].name, index))
			continue;
		for (int s = 0; s < st->indices[i].nshards; s++)
			for (int c = 0; c < st->indices[i].routes[s].ncopies; c++)
				n += st->indices[i].routes[s].copies[c] == node;
	}
	return n;
}

/* Never two copies of a shard on a node; every shard has want copies, all
 * in sync, a primary among them, nothing relocating. */
static bool
sound(const rp_state *st, int want)
{
	for (size_t i = 0; i < st->nindices; i++)
		for (int s = 0; s < st->indices[i].nshards; s++) {
			const rp_route *ro = &st->indices[i].routes[s];
			if (ro->ncopies != want || ro->relocating_from >= 0)
				return false;
			bool prim = false;
			for (int c = 0; c < ro->ncopies; c++) {
				prim |= ro->copies[c] == ro->primary;
				if (!((ro->in_sync >> ro->copies[c]) & 1))
					return false;
				for (int d = c + 1; d < ro->ncopies; d++)
					if (ro->copies[c] == ro->copies[d])
						return false;
			}
			if (!prim)
				return false;
		}
	return true;
}

/* Rounds until nothing changes; returns how many changed. Checks the
 * throttle in every round. */
static int
converge(rp_state *st, rp_alloc *a)
{
	int rounds = 0;
	while (rounds < 100 && rp_state_allocate(st, a)) {
		rounds++;
		for (int k = 0; k < a->ndata; k++) {
			int n = a->data[k], incoming = 0;
			for (size_t i = 0; i < st->nindices; i++)
				for (int s = 0; s < st->indices[i].nshards; s++) {
					const rp_route *ro = &st->indices[i].routes[s];
					for (int c = 0; c < ro->ncopies; c++)
						incoming +=
						    ro->copies[c] == n && !((ro->in_sync >> n) & 1);
				}
			CHECKF(incoming <= a->max_recoveries, "node %d recovers %d at once", n,
			       incoming);
		}
		settle(st);
	}
	return rounds;
}

static void
test_join(void)
{
	int two[] = {0, 1}, three[] = {0, 1, 2};
	rp_state *st = rp_state_new();
	rp_state_add_index(st, "a", "ua", 6, 1, two, 2);
	rp_state_add_index(st, "b", "ub", 3, 1, two, 2);
	rp_alloc a = {.data = two, .ndata = 2, .max_recoveries = 2};
	CHECK(!rp_state_allocate(st, &a)); /* balanced: nothing moves */
	a.data = three;
	a.ndata = 3;
	/* rebalance.enable: none moves nothing to the new node; replicas
	 * moves only replicas, primaries only primaries */
	a.rebalance = RP_REBALANCE_NONE;
	CHECK(!rp_state_allocate(st, &a) && on(st, NULL, 2) == 0);
	rp_state *t = rp_state_dup(st);
	a.rebalance = RP_REBALANCE_REPLICAS;
	CHECK(rp_state_allocate(t, &a));
	for (size_t i = 0; i < t->nindices; i++)
		for (int s = 0; s < t->indices[i].nshards; s++)
			CHECK(t->indices[i].routes[s].relocating_from !=
			      t->indices[i].routes[s].primary);
	rp_state_free(t);
	t = rp_state_dup(st);
	a.rebalance = RP_REBALANCE_PRIMARIES;
	CHECK(rp_state_allocate(t, &a));
	for (size_t i = 0; i < t->nindices; i++)
		for (int s = 0; s < t->indices[i].nshards; s++) {
			const rp_route *ro = &t->indices[i].routes[s];
			CHECK(ro->relocating_from < 0 || ro->relocating_from == ro->primary);
		}
	rp_state_free(t);
	a.rebalance = RP_REBALANCE_ALL;
	int rounds = converge(st, &a);
	CHECK(rounds > 0 && rounds < 100);
	CHECK(sound(st, 2));
	for (int n = 0; n < 3; n++) {
		CHECKF(on(st, NULL, n) == 6, "node %d holds %d copies", n, on(st, NULL, n));
		CHECKF(on(st, "a", n) == 4, "node %d holds %d copies of a", n, on(st, "a", n));
		CHECKF(on(st, "b", n) == 2, "node %d holds %d copies of b", n, on(st, "b", n));
	}
	CHECK(!rp_state_allocate(st, &a));
	/* a fourth node: 18 copies over 4, within one of each other */
	int four[] = {0, 1, 2, 3};
	a.data = four;
	a.ndata = 4;
	converge(st, &a);
	CHECK(sound(st, 2));
	int lo = 99, hi = 0;
	for (int n = 0; n < 4; n++) {
		int c = on(st, NULL, n);
		lo = c < lo ? c : lo;
		hi = c > hi ? c : hi;
	}
	CHECKF(hi - lo <= 1, "counts %d..%d", lo, hi);
	rp_state_free(st);
}

static void
test_drain(void)
{
	int three[] = {0, 1, 2}, rest[] = {1, 2};
	rp_state *st = rp_state_new();
	rp_state_add_index(st, "a", "ua", 6, 1, three, 3);
	uint64_t terms[6];
	int prim0 = 0;
	for (int s = 0; s < 6; s++) {
		terms[s] = st->indices[0].routes[s].term;
		prim0 += st->indices[0].routes[s].primary == 0;
	}
	CHECK(prim0 == 2);
	rp_alloc a = {.data = rest, .ndata = 2, .drain = 1ull << 0, .max_recoveries = 2};
	converge(st, &a);
	CHECK(sound(st, 2));
	CHECK(on(st, NULL, 0) == 0);
	CHECK(on(st, NULL, 1) == 6 && on(st, NULL, 2) == 6);
	int bumped = 0;
	for (int s = 0; s < 6; s++)
		bumped += st->indices[0].routes[s].term == terms[s] + 1;
	CHECKF(bumped == 2, "%d primaries handed over", bumped);
	/* the exclusion lifted: the node fills again */
	a.data = three;
	a.ndata = 3;
	a.drain = 0;
	converge(st, &a);
	CHECK(sound(st, 2));
	for (int n = 0; n < 3; n++)
		CHECK(on(st, NULL, n) == 4);
	rp_state_free(st);
}

static void
test_node_left(void)
{
	int three[] = {0, 1, 2}, rest[] = {0, 1};
	uint64_t gone[RP_MAX_NODES] = {0};
	rp_state *st = rp_state_new();
	rp_state_add_index(st, "a", "ua", 6, 1, three, 3);
	/* node 2 gone 3 s: its copies wait (its primaries were failed over) */
	CHECK(rp_state_failover(st, 1ull << 2, 3));
	gone[2] = 3000000000ull;
	rp_alloc a = {
	    .data = rest, .ndata = 2, .gone_ns = gone, .delay_ns = delay_10s, .max_recoveries = 2};
	CHECK(!rp_state_allocate(st, &a));
	CHECK(on(st, NULL, 2) == 4);
	/* past the delayed timeout: rebuilt on the others */
	gone[2] = 11000000000ull;
	converge(st, &a);
	CHECK(sound(st, 2));
	CHECK(on(st, NULL, 2) == 0);
	CHECK(on(st, NULL, 0) == 6 && on(st, NULL, 1) == 6);
	/* allocation off: a missing copy stays missing */
	rp_state *s2 = rp_state_new();
	rp_state_add_index(s2, "b", "ub", 2, 2, rest, 2);
	int all[] = {0, 1, 2};
	rp_alloc off = {.data = all, .ndata = 3, .enable = RP_ALLOC_NONE, .max_recoveries = 2};
	CHECK(!rp_state_allocate(s2, &off));
	off.enable = RP_ALLOC_ALL;
	CHECK(rp_state_allocate(s2, &off));
	settle(s2);
	CHECK(sound(s2, 3));
	rp_state_free(s2);
	rp_state_free(st);
}

/* A node evicted while a shard relocates: the copy it held is rebuilt
 * elsewhere and the relocation ends (it once stayed RELOCATING for ever:
 * the source left only while more copies were left than wanted). Both
 * the other copy and the relocation's target. */
static void
test_lost_during_relocation(void)
{
	int all[] = {0, 1, 2, 3}, up[] = {0, 2, 3}, up2[] = {0, 1, 3};
	for (int lose = 0; lose < 2; lose++) {
		uint64_t gone[RP_MAX_NODES] = {0};
		rp_state *st = rp_state_new();
		rp_state_add_index(st, "a", "ua", 1, 1, all, 2); /* copies on nodes 0 and 1 */
		rp_route *ro = &st->indices[0].routes[0];
		CHECK(ro->ncopies == 2 && ro->primary == 0 && ro->copies[1] == 1);
		ro->copies[ro->ncopies++] = 2; /* the primary relocates to node 2 */
		ro->relocating_from = 0;
		int victim = lose ? 2 : 1;
		if (!lose)
			ro->in_sync |= 1ull << 2; /* the target caught up */
		gone[victim] = 11000000000ull;
		rp_alloc a = {.data = lose ? up2 : up,
		              .ndata = 3,
		              .gone_ns = gone,
		              .delay_ns = delay_10s,
		              .max_recoveries = 2};
		converge(st, &a);
		ro = &st->indices[0].routes[0];
		CHECKF(sound(st, 2), "lost node %d: %d copies, relocating from %d", victim,
		       ro->ncopies, ro->relocating_from);
		CHECK(on(st, NULL, victim) == 0 && on(st, NULL, 0) == 0);
		rp_state_free(st);
	}
}

static bool
prepared(void *arg, const char *index, int shard, int from, int to, uint64_t term,
         uint64_t *keep)
{
	(void)arg, (void)index, (void)shard, (void)from, (void)to, (void)term;
	*keep = ~0ull;
	return true;
}

/* Balancing ends: from random placements (indices of 1 to 6 shards with
 * 0 to 2 replicas, the copies put anywhere, 2 to 4 nodes) the rounds stop
 * moving copies, with the totals per node within one of each other. It
 * once moved two copies back and forth for ever: a move toward an
 * index's balance, then one of the totals that undid it. */
static void
test_balance_ends(void)
{
	uint64_t seed = 88172645463325252ull;
	int nodes[] = {0, 1, 2, 3};
	for (int trial = 0; trial < 300; trial++) {
		seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
		int nn = 2 + (int)(seed % 3), nix = 1 + (int)((seed >> 8) % 4);
		rp_state *st = rp_state_new();
		for (int i = 0; i < nix; i++) {
			char name[8];
			snprintf(name, sizeof(name), "i%d", i);
			seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
			int nshards = 1 + (int)(seed % 6), nrep = (int)((seed >> 8) % 3);
			/* every copy on a node drawn at random (distinct per shard) */
			int order[4] = {0, 1, 2, 3};
			for (int k = 3; k > 0; k--) {
				int j = (int)((seed >> (16 + 2 * k)) % (uint64_t)(k + 1)), t = order[k];
				order[k] = order[j], order[j] = t;
			}
			rp_state_add_index(st, name, name, nshards, nrep, order,
			                   1 + (int)((seed >> 40) % (uint64_t)nn));
		}
		/* hand-overs prepared (an unprepared one resyncs the other
		 * copies, beyond the throttle) */
		rp_alloc a = {
		    .data = nodes, .ndata = nn, .max_recoveries = 2, .handover = prepared};
		int rounds = converge(st, &a);
		CHECKF(rounds < 100, "trial %d: %d nodes, %d indices still moving after %d rounds",
		       trial, nn, nix, rounds);
		int lo = 1 << 30, hi = 0;
		for (int n = 0; n < nn; n++) {
			int c = on(st, NULL, n);
			lo = c < lo ? c : lo;
			hi = c > hi ? c : hi;
		}
		CHECKF(hi - lo <= 1, "trial %d: totals %d..%d", trial, lo, hi);
		rp_state_free(st);
	}
}

static void
test_parts(void)
{
	int three[] = {0, 1, 2};
	rp_state *st = rp_state_new();
	rp_state_add_index(st, "a", "ua", 2, 1, three, 3);
	rp_state_add_index(st, "b", "ub", 1, 2, three, 3);
	st->indices[1].routes[0].relocating_from = 2;
	st->joined[1] = 77;
	rp_state_set_settings(st, "{\"persistent\":{\"x\":\"y\"}}");
	cm_buf g, p0, p1;
	cm_buf_init(&g, CM_MEM_REPLICATION);
	cm_buf_init(&p0, CM_MEM_REPLICATION);
	cm_buf_init(&p1, CM_MEM_REPLICATION);
	rp_state_encode_global(st, names, 4, &g);
	rp_state_encode_index(st, 0, names, 4, &p0);
	rp_state_encode_index(st, 1, names, 4, &p1);
	rp_state *m = rp_state_new();
	cm_error err;
	cm_error_clear(&err);
	CHECK(rp_state_merge(m, p1.data, p1.len, names, 4, &err) == CM_OK);
	CHECK(rp_state_merge(m, g.data, g.len, names, 4, &err) == CM_OK);
	CHECK(rp_state_merge(m, p0.data, p0.len, names, 4, &err) == CM_OK);
	CHECK(m->nindices == 2 && rp_state_index(m, "a") && rp_state_index(m, "b"));
	CHECK(m->joined[1] == 77);
	CHECK(m->settings && strcmp(m->settings, st->settings) == 0);
	CHECK(rp_state_index(m, "b")->routes[0].relocating_from == 2);
	CHECK(rp_state_index(m, "a")->routes[1].relocating_from == -1);
	CHECK(memcmp(rp_state_index(m, "a")->routes, st->indices[0].routes, 2 * sizeof(rp_route)) ==
	      0);
	/* a part merged again replaces its index */
	CHECK(rp_state_merge(m, p0.data, p0.len, names, 4, &err) == CM_OK);
	CHECK(m->nindices == 2);
	rp_state_free(m);
	cm_buf_free(&g);
	cm_buf_free(&p0);
	cm_buf_free(&p1);
	rp_state_free(st);
}

int
main(void)
{
	test_join();
	test_drain();
	test_node_left();
	test_lost_during_relocation();
	test_balance_ends();
	test_parts();
	CHECK(cm_mem_used(CM_MEM_REPLICATION) == 0);
	return check_report("rp_alloc_test");
}
