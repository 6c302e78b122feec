/* The node as replication's host (replication/rp.h): local shard copies,
 * applying batches, peer calls, liveness and the master; plus what stays
 * the node's: joining through the master and, on the master, applying
 * shard events and failing over primaries whose node is gone. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../proto/pr.h"
#include "nd_cluster_private.h"
#include "nd_rank.h"

#define MEM CM_MEM_NODE

/* ---- host operations ---- */

static st_shard *
host_take(void *h, const char *index, const char *uuid, int shard, void **ref)
{
	nd_cluster *cl = h;
	nd_index *ix = nd_index_get(cl->node, index);
	*ref = NULL;
	if (!ix)
		return NULL;
	if ((uuid[0] && strcmp(uuid, nd_index_uuid(ix)) != 0) || shard < 0 ||
	    shard >= nd_index_nshards(ix)) {
		nd_index_release(ix);
		return NULL;
	}
	*ref = ix;
	return nd_index_shard(ix, shard);
}

static void
host_release(void *h, void *ref)
{
	(void)h;
	nd_index_release(ref);
}

static cm_err
host_apply(void *h, void *ref, int shard, const st_op *ops, size_t n, st_op_result *res,
           bool replica)
{
	nd_cluster *cl = h;
	return replica ? cl_apply_replica(cl, ref, shard, ops, n, res)
	               : nd_index_apply(ref, shard, ops, n, res);
}

static void
host_call(void *h, int node, uint32_t type, const void *p, size_t len, uint64_t deadline_ns,
          rp_reply_fn fn, void *arg)
{
	nd_cluster *cl = h;
	if (node < 0 || node >= cl->nn || !cl->nodes[node].peer) {
		fn(arg, CM_EUNAVAIL, 0, NULL, 0);
		return;
	}
	nd_peer_call(cl->nodes[node].peer, type, p, len, deadline_ns, fn, arg);
}

static bool
host_alive(void *h, int node)
{
	return cl_alive(h, node);
}

static void
host_mark_down(void *h, int node)
{
	cl_mark(h, node, false, 0);
}

static cm_err
host_master_event(void *h, const rp_event *ev, cm_error *err)
{
	nd_cluster *cl = h;
	cm_buf req, rep;
	uint32_t type;
	cm_error remote;
	char *body = NULL;
	size_t bl;
	cm_err rc;

	int master = cl->master;
	if (master < 0)
		return cm_error_set_type(err, CM_EUNAVAIL, "master_not_discovered_exception",
		                         "no master is known");
	if (master == cl->self) {
		if (ev->kind == RP_EV_FAILED)
			cl_reads_stopped(cl, ev->node);
		pthread_mutex_lock(&cl->meta_lock);
		rc = cl_master_event_locked(cl, ev, err);
		pthread_mutex_unlock(&cl->meta_lock);
		if (!rc)
			cl_state_publish(cl);
		return rc;
	}
	cm_buf_init(&req, MEM);
	cm_buf_init(&rep, MEM);
	rp_event_encode(ev, cl->names, &req);
	rc = nd_peer_call_sync(cl->nodes[master].peer, PR_SHARD_EVENT, req.data, req.len,
	                       cm_now_ns() + 10000000000ull, &type, &rep);
	cm_error_clear(&remote);
	if (rc) {
		cl_mark(cl, master, false, 0);
		rc = cm_error_set_type(err, CM_EUNAVAIL, "master_not_discovered_exception",
		                       "master node [%s] is not available (%s)",
		                       cl->nodes[master].name, cm_err_msg(rc));
	} else if (pr_ack_decode(rep.data, rep.len, &remote, &body, &bl) && !remote.code) {
		rc = cm_error_set(err, CM_EINTERNAL, "malformed reply from the master");
	} else if (remote.code) {
		*err = remote;
		rc = remote.code;
	}
	cm_free(MEM, body);
	cm_buf_free(&req);
	cm_buf_free(&rep);
	return rc;
}

static void
host_refresh(void *h)
{
	cl_fetch_state(h);
}

static const rp_host_ops host_ops = {
    .take = host_take,
    .release = host_release,
    .apply = host_apply,
    .call = host_call,
    .alive = host_alive,
    .mark_down = host_mark_down,
    .master_event = host_master_event,
    .refresh_state = host_refresh,
};

void
cl_host_init(nd_cluster *cl)
{
	/* on etcd the table grows: every slot's name buffer is there from
	 * the start, filled before the count covers it */
	int slots = cl->etcd ? ND_CL_MAX_NODES : cl->nn;
	cl->names = cm_calloc(MEM, (size_t)slots + 1, sizeof(char *));
	for (int i = 0; i < slots; i++)
		cl->names[i] = cl->nodes[i].name;
	rp_config cfg = {.nn = cl->nn,
	                 .self = cl->self,
	                 .names = cl->names,
	                 .nn_live = cl->etcd ? &cl->nn : NULL};
	cl->rp = rp_create(&host_ops, cl, &cfg);
}

/* ---- routes and joins ---- */

bool
cl_route_get(nd_cluster *cl, const char *index, int shard, cl_route *r)
{
	return rp_route_get(cl->rp, index, shard, r);
}

void
cl_host_adopted(nd_cluster *cl)
{
	cl_settings_apply_locked(cl); /* parsed once per state */
	for (int i = 0; i < cl->nn; i++)
		atomic_store(&cl->nodes[i].boot_joined, cl->state->joined[i]);
	/* The state shows this process taken in: joined, even before the
	 * master's answer to our join arrives. */
	uint64_t boot = atomic_load(&cl->nodes[cl->self].boot);
	if (boot && cl->state->joined[cl->self] == boot)
		rp_set_joined(cl->rp, true);
	rp_set_state(cl->rp, cl->state);
}

bool
cl_rep_joined(nd_cluster *cl)
{
	return rp_joined(cl->rp);
}

bool
cl_node_joined(nd_cluster *cl, int i)
{
	if (i == cl->self)
		return cl_rep_joined(cl);
	uint64_t b = atomic_load(&cl->nodes[i].boot);
	return b != 0 && b == atomic_load(&cl->nodes[i].boot_joined);
}

/* ---- the master's side ---- */

cm_err
cl_master_event_locked(nd_cluster *cl, const rp_event *ev, cm_error *err)
{
	rp_state *next = rp_state_dup(cl->state);
	bool changed = false;
	cm_err rc = rp_state_apply(next, ev, &changed, err);
	if (rc || !changed) {
		rp_state_free(next);
		return rc;
	}
	const char *node = cl->nodes[ev->node].name;
	if ((rc = cl_state_commit_locked(cl, next, err)))
		return rc;
	if (ev->kind == RP_EV_JOIN) {
		atomic_store(&cl->nodes[ev->node].boot, ev->boot);
		cm_info("cluster", "node [%s] joined: its copies recover before they count", node);
	} else if (ev->kind == RP_EV_FAILED) {
		cm_warn("cluster", "[%s][%d] copy on [%s] leaves the in-sync set: %s", ev->index,
		        ev->shard, node, ev->reason ? ev->reason : "");
	} else {
		cm_info("cluster", "[%s][%d] copy on [%s] recovered and is in sync", ev->index,
		        ev->shard, node);
	}
	return CM_OK;
}

/* Master: one change of the state by fn (true: changed), committed and
 * published; a commit that fails is logged and changes nothing. */
static void
change_state(nd_cluster *cl, bool (*fn)(rp_state *next, void *arg), void *arg, const char *what)
{
	bool publish = false;
	pthread_mutex_lock(&cl->meta_lock);
	rp_state *next = rp_state_dup(cl->state);
	if (fn(next, arg)) {
		cm_error err;
		cm_error_clear(&err);
		if (cl_state_commit_locked(cl, next, &err))
			cm_warn("cluster", "%s not applied: %s", what, err.reason);
		else
			publish = true;
	} else {
		rp_state_free(next);
	}
	pthread_mutex_unlock(&cl->meta_lock);
	if (publish)
		cl_state_publish(cl);
}

typedef struct failover_arg {
	uint64_t gone, alive;
} failover_arg;

static bool
do_failover(rp_state *next, void *arg)
{
	failover_arg *fa = arg;
	return rp_state_failover(next, fa->gone, fa->alive);
}

static bool
do_allocate(rp_state *next, void *arg)
{
	return rp_state_allocate(next, arg);
}

/* Master: promotes an in-sync copy of every shard whose primary's node
 * has been unreachable past the failover timeout. */
static void
failover(nd_cluster *cl)
{
	uint64_t now = cm_now_ns(), gone = 0, alive = 0;
	for (int i = 0; i < cl->nn; i++) {
		if (cl->etcd && i != cl->self && !atomic_load(&cl->nodes[i].registered)) {
			/* on etcd a node is gone when its lease is; one that keeps
			 * its lease but stops answering the master (a partition)
			 * goes after the failover timeout, as below */
			gone |= 1ull << i;
			continue;
		}
		if (cl_alive(cl, i)) {
			alive |= 1ull << i;
			continue;
		}
		uint64_t since = atomic_load(&cl->nodes[i].down_since_ns);
		if (i != cl->self && since && now - since >= rp_failover_ns(cl->rp))
			gone |= 1ull << i;
	}
	if (!gone)
		return;
	failover_arg fa = {gone, alive};
	change_state(cl, do_failover, &fa, "failover");
}

static uint64_t
delay_of(void *arg, const rp_index *x)
{
	nd_cluster *cl = arg;
	nd_index *ix = nd_index_get(cl->node, x->name);
	uint64_t ns =
	    ix ? (uint64_t)nd_index_settings(ix)->delayed_timeout_ms * 1000000ull : 60000000000ull;
	nd_index_release(ix);
	return ns;
}

/* ---- prepared hand-overs ----
 *
 * A primary leaving a live node (drain, rebalance) first has its node hold
 * the shard's writes with none in flight (rp_handoff_prepare); the copies
 * that then hold every operation stay in sync under the new primary, so
 * the shard stays green. The allocator asks through handover_cb; the
 * master prepares between rounds. Only the monitor thread touches the
 * table (cl->handoffs). */

#define CL_MAX_HANDOFFS 16
/* Writes are held on the old primary at most HANDOFF_HOLD_NS from when
 * it was asked; the master uses a prepared hand-over only within
 * HANDOFF_READY_NS of asking, so the old primary learns the new routes
 * (published at once, and watched in etcd) long before it would take
 * writes in its term again. Normally the hold lasts milliseconds. */
#define HANDOFF_HOLD_NS 10000000000ull
#define HANDOFF_READY_NS 1500000000ull

typedef struct cl_handoff {
	char index[256];
	int shard, from, to;
	uint64_t term, keep, ready_until_ns;
	bool ready, asked, used; /* asked: by this round's allocator; used: by it */
	int failures;
} cl_handoff;

struct cl_handoffs {
	cl_handoff h[CL_MAX_HANDOFFS];
	int n;
};

static void
handoff_drop(struct cl_handoffs *t, int i)
{
	t->h[i] = t->h[--t->n];
}

static bool handoff_ask(nd_cluster *cl, cl_handoff *h, uint64_t hold_ns);

static bool
handover_cb(void *arg, const char *index, int shard, int from, int to, uint64_t term,
            uint64_t *keep)
{
	struct cl_handoffs *t = ((nd_cluster *)arg)->handoffs;
	uint64_t now = cm_now_ns();
	for (int i = 0; i < t->n; i++) {
		cl_handoff *h = &t->h[i];
		if (strcmp(h->index, index) || h->shard != shard)
			continue;
		h->asked = true;
		if (h->term != term || h->from != from || h->to != to) {
			*h = (cl_handoff){
			    .shard = shard, .from = from, .to = to, .term = term, .asked = true};
			snprintf(h->index, sizeof(h->index), "%s", index);
			return false;
		}
		if (h->used)
			return false; /* the round that made it failed to commit: next one */
		if (h->ready && now < h->ready_until_ns) {
			*keep = h->keep;
			h->used = true;
			return true;
		}
		if (h->failures >= 3) {
			/* its node cannot prepare: hand over all the same; the
			 * other copies resync */
			*keep = 0;
			handoff_drop(t, i);
			return true;
		}
		if (h->ready)
			h->failures++; /* prepared, not used in time: prepared again */
		h->ready = false;
		return false;
	}
	if (t->n == CL_MAX_HANDOFFS) {
		*keep = 0; /* too many at once: this one resyncs its other copies */
		return true;
	}
	cl_handoff *h = &t->h[t->n++];
	*h = (cl_handoff){.shard = shard, .from = from, .to = to, .term = term, .asked = true};
	snprintf(h->index, sizeof(h->index), "%s", index);
	return false;
}

/* The copies a HandoffReply names, as a node mask. */
typedef struct keep_of {
	nd_cluster *cl;
	uint64_t keep;
} keep_of;

static void
keep_add(void *arg, const char *name)
{
	keep_of *k = arg;
	int n = cl_node_slot(k->cl, name);
	if (n >= 0 && n < RP_MAX_NODES)
		k->keep |= 1ull << n;
}

/* Has the old primary prepare h (hold_ns 0: release it); true when it did. */
static bool
handoff_ask(nd_cluster *cl, cl_handoff *h, uint64_t hold_ns)
{
	cm_error err;
	cm_error_clear(&err);
	nd_index *ix = nd_index_get(cl->node, h->index);
	if (!ix)
		return false;
	char uuid[64];
	snprintf(uuid, sizeof(uuid), "%s", nd_index_uuid(ix));
	nd_index_release(ix);
	uint64_t keep = 0;
	cm_err rc;
	if (h->from == cl->self) {
		rc = rp_handoff_prepare(cl->rp, h->index, uuid, h->shard, h->term, hold_ns, &keep,
		                        &err);
	} else {
		pr_handoff ho = {.index = (char *)(uintptr_t)h->index,
		                 .uuid = uuid,
		                 .shard = (uint32_t)h->shard,
		                 .term = h->term,
		                 .release = !hold_ns};
		cm_buf req;
		char *body = NULL;
		size_t len;
		cm_buf_init(&req, MEM);
		pr_handoff_encode(&ho, &req);
		rc = cl_call(cl, h->from, PR_HANDOFF, &req, &body, &len, &err);
		keep_of ko = {cl, 0};
		if (!rc)
			rc = pr_handoff_reply_decode(body, len, keep_add, &ko, &err);
		keep = ko.keep;
		cm_free(MEM, body);
		cm_buf_free(&req);
	}
	if (rc) {
		cm_warn("cluster", "[%s][%d] hand-over from [%s] not prepared: %s", h->index,
		        h->shard, cl->nodes[h->from].name, err.reason);
		return false;
	}
	h->keep = keep;
	return true;
}

void
cl_serve_handoff(nd_cluster *cl, const uint8_t *p, size_t len, uint64_t deadline_ns,
                 cm_buf *reply, uint32_t *reply_type)
{
	pr_handoff h;
	cm_error err;
	cm_buf out;
	uint64_t keep = 0;
	(void)deadline_ns;
	cm_error_clear(&err);
	cm_buf_init(&out, MEM);
	if (pr_handoff_decode(p, len, &h, &err) == CM_OK &&
	    rp_handoff_prepare(cl->rp, h.index, h.uuid, (int)h.shard, h.term,
	                       h.release ? 0 : HANDOFF_HOLD_NS, &keep, &err) == CM_OK) {
		const char *names[RP_MAX_NODES];
		size_t n = 0;
		for (int i = 0; i < cl->nn && i < RP_MAX_NODES; i++)
			if ((keep >> i) & 1)
				names[n++] = cl->nodes[i].name;
		pr_handoff_reply_encode(names, n, &out);
	}
	pr_handoff_free(&h);
	pr_ack_encode(&err, err.code ? NULL : (const char *)out.data, err.code ? 0 : out.len, reply);
	*reply_type = PR_ACK;
	cm_buf_free(&out);
}

/* Master on etcd: one allocation round (rp_state_allocate) with what the
 * membership says and the cluster settings; then the hand-overs it asked
 * for are prepared, and a second round makes them. */
static void
allocate(nd_cluster *cl)
{
	int data[ND_CL_MAX_NODES];
	uint64_t gone[RP_MAX_NODES] = {0}, drain = 0, now = cm_now_ns();
	rp_alloc a = {
	    .data = data,
	    .gone_ns = gone,
	    .delay_ns = delay_of,
	    .arg = cl,
	    .handover = handover_cb,
	    .names = (const char *const *)cl->names,
	    .nnames = cl->nn};
	cl_settings *set = cl_settings_get(cl); /* one table for the round */
	a.ndata = cl_placeable_in(cl, set, data);
	for (int i = 0; i < cl->nn && i < RP_MAX_NODES; i++) {
		uint64_t since = atomic_load(&cl->nodes[i].gone_since_ns);
		if (i != cl->self && !atomic_load(&cl->nodes[i].registered) && since)
			gone[i] = now - since > 0 ? now - since : 1;
		if (cl->nodes[i].data && cl_excluded_in(cl, set, i))
			drain |= 1ull << i;
	}
	a.drain = drain;
	a.max_recoveries = set->max_recoveries;
	a.enable = set->enable;
	a.rebalance = set->rebalance;
	cl_settings_put(set);
	if (a.ndata == 0)
		return;
	if (!cl->handoffs) /* the first round as master */
		cl->handoffs = cm_calloc(MEM, 1, sizeof(*cl->handoffs));
	struct cl_handoffs *t = cl->handoffs;
	for (int i = 0; i < t->n; i++)
		t->h[i].asked = false;
	change_state(cl, do_allocate, &a, "allocation");
	bool prepared = false;
	for (int i = 0; i < t->n; i++) {
		cl_handoff *h = &t->h[i];
		if (!h->asked) { /* no longer wanted (the routing moved on) */
			if (h->ready)
				handoff_ask(cl, h, 0); /* its writes go on at once */
			handoff_drop(t, i--);
			continue;
		}
		if (h->ready)
			continue;
		uint64_t asked = cm_now_ns();
		if (!handoff_ask(cl, h, HANDOFF_HOLD_NS)) {
			h->failures++;
		} else if (cm_now_ns() + HANDOFF_READY_NS / 4 >= asked + HANDOFF_READY_NS) {
			/* prepared too slowly to be used in time: its writes go on,
			 * and it counts as a failure (three, and the hand-over is
			 * made without a hold) */
			cm_warn("cluster", "[%s][%d] hand-over from [%s] prepared too slowly (%.1f s)",
			        h->index, h->shard, cl->nodes[h->from].name,
			        (double)(cm_now_ns() - asked) / 1e9);
			handoff_ask(cl, h, 0);
			h->failures++;
		} else {
			h->ready = true;
			h->ready_until_ns = asked + HANDOFF_READY_NS;
			prepared = true;
		}
	}
	if (prepared)
		change_state(cl, do_allocate, &a, "hand-over");
	for (int i = 0; i < t->n; i++) {
		cl_handoff *h = &t->h[i];
		if (!h->used)
			continue;
		cl_route ro;
		if (cl_route_get(cl, h->index, h->shard, &ro) && ro.primary == h->from &&
		    ro.term == h->term) {
			handoff_ask(cl, h, 0); /* not committed: its writes go on */
			h->used = h->ready = false;
			h->failures++;
			continue;
		}
		handoff_drop(t, i--);
	}
}

void
cl_host_tick(nd_cluster *cl)
{
	int master = cl->master;
	if (!rp_joined(cl->rp) && master >= 0 && cl_alive(cl, master)) {
		cm_error err;
		cm_error_clear(&err);
		rp_event ev = {.kind = RP_EV_JOIN,
		               .node = cl->self,
		               .primary = -1,
		               .boot = atomic_load(&cl->nodes[cl->self].boot)};
		if (host_master_event(cl, &ev, &err) == CM_OK) {
			rp_set_joined(cl->rp, true);
			if (master != cl->self)
				cl_fetch_state(cl);
		} else {
			cm_warn("cluster", "cannot join through the master yet: %s", err.reason);
		}
	}
	if (cl_is_master(cl)) {
		failover(cl);
		if (cl->etcd)
			allocate(cl);
	}
	if (cl->nodes[cl->self].data)
		rp_tick(cl->rp);
}

/* ---- settings ---- */

cm_err
nd_cluster_setting(nd_cluster *cl, const char *kv, cm_error *err)
{
	const char *eq = strchr(kv, '=');
	char key[128];
	if (!eq || (size_t)(eq - kv) >= sizeof(key))
		return cm_error_set(err, CM_EINVAL, "settings are key=value");
	memcpy(key, kv, (size_t)(eq - kv));
	key[eq - kv] = 0;
	cm_err rc = nd_rank_setting(key, eq + 1, err); /* the tail-tolerant fan-out's */
	if (rc != CM_ENOTFOUND)
		return rc;
	rc = cl_etcd_setting(cl, key, eq + 1, err);
	if (rc != CM_ENOTFOUND)
		return rc;
	return rp_setting(cl->rp, key, eq + 1, err);
}
