/* The master's allocator: where shard copies go as nodes come, go and
 * are drained. A pure function of the state and what the master knows of
 * the nodes (rp_alloc); the master runs one round every monitor tick and
 * commits the result like any other state change. docs/cluster.md. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../common/cm_log.h"
#include "rp_private.h"

#define BIT(n) (1ull << (n))


/* A node's name for the log, or its number in brackets. */
static const char *
nm(const rp_alloc *a, int node, char *buf, size_t size)
{
	if (a->names && node >= 0 && node < a->nnames && a->names[node])
		return a->names[node];
	snprintf(buf, size, "#%d", node);
	return buf;
}

static bool
in_sync(const rp_route *ro, int node)
{
	return node >= 0 && node < RP_MAX_NODES && ((ro->in_sync >> node) & 1);
}

static void
drop_copy(rp_route *ro, int c)
{
	int node = ro->copies[c];
	ro->in_sync &= ~BIT(node);
	if (ro->relocating_from == node)
		ro->relocating_from = -1;
	memmove(&ro->copies[c], &ro->copies[c + 1], (size_t)(ro->ncopies - c - 1) * sizeof(int));
	ro->ncopies--;
}

typedef struct loads {
	int copies[RP_MAX_NODES];   /* copies on each node */
	int incoming[RP_MAX_NODES]; /* copies recovering to it */
} loads;

static void
count(const rp_state *st, loads *l)
{
	memset(l, 0, sizeof(*l));
	for (size_t i = 0; i < st->nindices; i++)
		for (int s = 0; s < st->indices[i].nshards; s++) {
			const rp_route *ro = &st->indices[i].routes[s];
			for (int c = 0; c < ro->ncopies; c++) {
				int n = ro->copies[c];
				/* a copy moving away counts where it goes, not where it was */
				if (n < 0 || n >= RP_MAX_NODES || n == ro->relocating_from)
					continue;
				l->copies[n]++;
				l->incoming[n] += !in_sync(ro, n);
			}
		}
}

static bool
eligible(const rp_alloc *a, int node)
{
	for (int k = 0; k < a->ndata; k++)
		if (a->data[k] == node)
			return true;
	return false;
}

/* The copies a shard wants: 1 + replicas, at most one per data node. */
static int
wanted(const rp_index *ix, const rp_alloc *a, const rp_route *ro)
{
	int n = a->ndata;
	/* copies on nodes that are merely down (not yet evicted) still count
	 * as places: they come back */
	for (int c = 0; c < ro->ncopies; c++)
		if (!eligible(a, ro->copies[c]) && !((a->drain >> ro->copies[c]) & 1))
			n++;
	int w = 1 + ix->nreplicas;
	if (w > n)
		w = n;
	if (w > RP_MAX_COPIES)
		w = RP_MAX_COPIES;
	return w < 1 ? 1 : w;
}

/* Hands the primary of ro to an in-sync copy other than `from` that is
 * not drained; false when there is none. */
static bool
hand_over(const char *index, int shard, rp_route *ro, int from, const rp_alloc *a)
{
	for (int c = 0; c < ro->ncopies; c++) {
		int n = ro->copies[c];
		if (n != from && in_sync(ro, n) && eligible(a, n)) {
			/* Without a prepared hand-over the old primary may still
			 * have had batches in flight: one copy took one before it
			 * learned the new term, another refused it. The other
			 * copies then leave the in-sync set and resync from the
			 * new primary (ops-based, or file-based where they hold
			 * an op it lacks), so no two in-sync copies can differ.
			 * Prepared (the old primary held its writes with none in
			 * flight), the copies holding every op stay in sync. */
			uint64_t keep = 0;
			if (a->handover && !a->handover(a->arg, index, shard, from, n, ro->term, &keep))
				return false;
			keep = (keep & ro->in_sync & ~(1ull << from)) | (1ull << n);
			char b[16];
			cm_info("replication",
			        "[%s][%d] primary moves off its node: the copy on [%s] leads in "
			        "term %" PRIu64 " (%d copies stay in sync)",
			        index, shard, nm(a, n, b, sizeof(b)), ro->term + 1,
			        __builtin_popcountll(keep));
			ro->primary = n;
			ro->term++;
			ro->in_sync = keep;
			return true;
		}
	}
	return false;
}

/* A copy goes once enough others are in sync: the one being relocated,
 * then one on a drained node, then (all in sync) one on the fullest node. */
static bool
trim(const char *index, int shard, rp_route *ro, int want, const rp_alloc *a, loads *l)
{
	bool changed = false;
	while (ro->ncopies > want) {
		int staying = 0, drop = -1;
		for (int c = 0; c < ro->ncopies; c++)
			staying += in_sync(ro, ro->copies[c]) &&
			           !((a->drain >> ro->copies[c]) & 1) &&
			           ro->copies[c] != ro->relocating_from;
		/* an out-of-sync copy on a drained node is simply dropped */
		for (int c = 0; c < ro->ncopies && drop < 0; c++)
			if (((a->drain >> ro->copies[c]) & 1) && !in_sync(ro, ro->copies[c]) &&
			    ro->copies[c] != ro->primary)
				drop = c;
		if (drop < 0 && staying >= want) {
			for (int c = 0; c < ro->ncopies && drop < 0; c++)
				if (ro->copies[c] == ro->relocating_from)
					drop = c;
			for (int c = 0; c < ro->ncopies && drop < 0; c++)
				if ((a->drain >> ro->copies[c]) & 1)
					drop = c;
		}
		if (drop < 0) {
			bool all = true;
			for (int c = 0; c < ro->ncopies; c++)
				all &= in_sync(ro, ro->copies[c]);
			if (!all)
				break; /* a recovery is under way: wait for it */
			int best = -1;
			for (int c = 0; c < ro->ncopies; c++)
				if (ro->copies[c] != ro->primary &&
				    (best < 0 ||
				     l->copies[ro->copies[c]] > l->copies[ro->copies[best]]))
					best = c;
			drop = best;
		}
		if (drop < 0)
			break;
		int node = ro->copies[drop];
		if (node == ro->primary && !hand_over(index, shard, ro, node, a))
			break;
		char b[16];
		cm_info("replication", "[%s][%d] copy on [%s] leaves the routing", index, shard,
		        nm(a, node, b, sizeof(b)));
		if (node != ro->relocating_from)
			l->copies[node]--;
		drop_copy(ro, drop);
		changed = true;
	}
	return changed;
}

/* The emptiest eligible node without a copy of ro that may take one more
 * recovery; -1 when none. */
static int
emptiest(const rp_route *ro, const rp_alloc *a, const loads *l)
{
	int pick = -1;
	for (int k = 0; k < a->ndata; k++) {
		int n = a->data[k];
		if (n < 0 || n >= RP_MAX_NODES || has_copy(ro, n) || ((a->drain >> n) & 1) ||
		    l->incoming[n] >= a->max_recoveries)
			continue;
		if (pick < 0 || l->copies[n] < l->copies[pick])
			pick = n;
	}
	return pick;
}

static void
add_copy(rp_route *ro, int node, int from, loads *l)
{
	ro->copies[ro->ncopies++] = node; /* out of sync: it recovers */
	if (from >= 0) {
		ro->relocating_from = from;
		l->copies[from]--;
	}
	l->copies[node]++;
	l->incoming[node]++;
}

static bool
settled(const rp_route *ro)
{
	if (ro->relocating_from >= 0 || ro->ncopies >= RP_MAX_COPIES)
		return false;
	for (int c = 0; c < ro->ncopies; c++)
		if (!in_sync(ro, ro->copies[c]))
			return false;
	return true;
}

/* Copies of ix on node, a copy moving away counted where it goes. */
static int
index_copies(const rp_index *ix, int node)
{
	int n = 0;
	for (int s = 0; s < ix->nshards; s++)
		for (int c = 0; c < ix->routes[s].ncopies; c++)
			n += ix->routes[s].copies[c] == node &&
			     ix->routes[s].copies[c] != ix->routes[s].relocating_from;
	return n;
}

/* Starts moving a settled copy of ix (any index when NULL) from node hi to
 * node lo, of the kind rebalance.enable lets move; true if it did.
 *
 * Balancing must end. A move within an index (only) needs the totals of
 * lo not above hi's; a move of the totals takes a copy of an index with
 * more copies on hi than on lo. Then no move makes the sum of squares of
 * the counts (per index and node, plus per node) grow, a move of the
 * totals makes it shrink, and moves within indices alone make the
 * per-index part shrink: no placement comes back. (A move of the totals
 * from any index once undid the index's own balance, for ever.) */
static bool
move_one(rp_state *st, const rp_alloc *a, rp_index *only, int hi, int lo, loads *l)
{
	/* a replica when there is one; else a primary (it hands over to an
	 * in-sync copy, with term + 1, once the new copy is in sync) */
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < st->nindices; i++) {
			rp_index *ix = &st->indices[i];
			if ((only && ix != only) ||
			    (!only && index_copies(ix, hi) <= index_copies(ix, lo)))
				continue;
			for (int s = 0; s < ix->nshards; s++) {
				rp_route *ro = &ix->routes[s];
				if (!settled(ro) || !has_copy(ro, hi) || has_copy(ro, lo) ||
				    (pass == 0 && ro->primary == hi))
					continue;
				if ((ro->primary == hi && a->rebalance == RP_REBALANCE_REPLICAS) ||
				    (ro->primary != hi && a->rebalance == RP_REBALANCE_PRIMARIES))
					continue;
				char b1[16], b2[16];
				cm_info("replication", "[%s][%d] relocates from [%s] to [%s]", ix->name,
				        s, nm(a, hi, b1, sizeof(b1)), nm(a, lo, b2, sizeof(b2)));
				add_copy(ro, lo, hi, l);
				return true;
			}
		}
	return false;
}

/* One move toward balance: first within an index (its copies spread
 * over the nodes, when that does not make the totals worse), then of the
 * totals per node; only while the fullest and the emptiest differ by
 * more than one. */
static bool
rebalance(rp_state *st, const rp_alloc *a, loads *l)
{
	for (size_t i = 0; i < st->nindices; i++) {
		rp_index *ix = &st->indices[i];
		int per[RP_MAX_NODES] = {0}, hi = -1, lo = -1;
		for (int s = 0; s < ix->nshards; s++)
			for (int c = 0; c < ix->routes[s].ncopies; c++) {
				int n = ix->routes[s].copies[c];
				if (n >= 0 && n < RP_MAX_NODES &&
				    n != ix->routes[s].relocating_from)
					per[n]++;
			}
		for (int k = 0; k < a->ndata; k++) {
			int n = a->data[k];
			if (n < 0 || n >= RP_MAX_NODES || ((a->drain >> n) & 1))
				continue;
			if (hi < 0 || per[n] > per[hi])
				hi = n;
			if (lo < 0 || per[n] < per[lo] ||
			    (per[n] == per[lo] && l->copies[n] < l->copies[lo]))
				lo = n;
		}
		if (hi >= 0 && lo >= 0 && per[hi] - per[lo] > 1 && l->copies[lo] <= l->copies[hi] &&
		    l->incoming[lo] < a->max_recoveries && move_one(st, a, ix, hi, lo, l))
			return true;
	}
	int hi = -1, lo = -1;
	for (int k = 0; k < a->ndata; k++) {
		int n = a->data[k];
		if (n < 0 || n >= RP_MAX_NODES || ((a->drain >> n) & 1))
			continue;
		if (hi < 0 || l->copies[n] > l->copies[hi])
			hi = n;
		if (lo < 0 || l->copies[n] < l->copies[lo])
			lo = n;
	}
	if (hi < 0 || lo < 0 || l->copies[hi] - l->copies[lo] <= 1 ||
	    l->incoming[lo] >= a->max_recoveries)
		return false;
	return move_one(st, a, NULL, hi, lo, l);
}

bool
rp_state_allocate(rp_state *st, const rp_alloc *a)
{
	loads l;
	bool changed = false;
	int max = a->max_recoveries > 0 ? a->max_recoveries : 2;
	rp_alloc al = *a;
	al.max_recoveries = max;

	/* copies of nodes gone past the delay leave (a primary there has no
	 * in-sync copy to fail over to: it stays, and the shard red) */
	for (size_t i = 0; i < st->nindices && a->gone_ns; i++) {
		uint64_t delay = UINT64_MAX; /* asked of the host once a copy's node is gone */
		for (int s = 0; s < st->indices[i].nshards; s++) {
			rp_route *ro = &st->indices[i].routes[s];
			for (int c = ro->ncopies - 1; c >= 0; c--) {
				int n = ro->copies[c];
				if (n < 0 || n >= RP_MAX_NODES || !a->gone_ns[n])
					continue;
				if (delay == UINT64_MAX)
					delay = a->delay_ns ? a->delay_ns(a->arg, &st->indices[i])
					                    : 60000000000ull;
				if (a->gone_ns[n] >= delay && n != ro->primary) {
					char b[16];
					cm_info("replication",
					        "[%s][%d] copy on [%s] is dropped: its node left "
					        "past the delayed timeout",
					        st->indices[i].name, s, nm(a, n, b, sizeof(b)));
					drop_copy(ro, c);
					changed = true;
				}
			}
		}
	}
	count(st, &l);
	for (size_t i = 0; i < st->nindices; i++) {
		rp_index *ix = &st->indices[i];
		for (int s = 0; s < ix->nshards; s++) {
			rp_route *ro = &ix->routes[s];
			int want = wanted(ix, &al, ro);
			changed |= trim(ix->name, s, ro, want, &al, &l);
			if (al.enable != RP_ALLOC_ALL)
				continue;
			/* The copy being relocated is leaving: a shard that lost
			 * another copy meanwhile (its node evicted) gets a new one,
			 * else the relocation could never end (the source goes only
			 * while more copies are left than wanted). */
			int staying = 0, drained = -1;
			for (int c = 0; c < ro->ncopies; c++) {
				if ((al.drain >> ro->copies[c]) & 1)
					drained = ro->copies[c];
				else if (ro->copies[c] != ro->relocating_from)
					staying++;
			}
			while (staying < want && ro->ncopies < RP_MAX_COPIES) {
				int n = emptiest(ro, &al, &l);
				if (n < 0)
					break;
				add_copy(ro, n, ro->relocating_from < 0 ? drained : -1, &l);
				drained = -1;
				staying++;
				changed = true;
			}
		}
	}
	if (al.enable == RP_ALLOC_ALL && al.rebalance != RP_REBALANCE_NONE)
		for (int k = 0; k < max * al.ndata && rebalance(st, &al, &l); k++)
			changed = true;
	return changed;
}
