/* Replication's runtime: routes from the adopted state, the primary's
 * write path, the replica's side, global checkpoints. The rules, in one
 * place:
 *
 *  - The master's state gives every shard a primary, a primary term and
 *    an in-sync set. Only the master changes them, persisting and
 *    publishing each change before answering the node that asked.
 *  - A primary logs (synced) and applies a batch, forwards it to every
 *    in-sync copy and to copies in recovery, and acknowledges only when
 *    every in-sync copy logged it. An in-sync copy that fails or stays
 *    silent past cluster.replica_timeout is removed by the master first
 *    (FAILED); if the master cannot be asked, nothing is acknowledged.
 *  - A copy refuses a batch whose term is older than the one it knows, so
 *    a deposed primary can never gather acknowledgements.
 *  - A node that starts asks the master to take it in (JOIN): its copies
 *    leave the in-sync sets, and where it is the primary the replicas
 *    leave instead (they resync from it, since it may hold
 *    unacknowledged operations they lack). Copies outside the in-sync set
 *    recover from the primary (rp_recovery.c): ops-based when their
 *    history above the global checkpoint agrees with the primary's log
 *    and the log still holds what they miss, else file-based (a snapshot
 *    of the primary's files replaces the copy, which is also how
 *    operations of a deposed primary are rolled back).
 *  - The master promotes an in-sync copy, with a new term, when a
 *    primary's node stays unreachable for cluster.primary_failover_timeout
 *    (rp_state_failover). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../proto/pr.h"
#include "rp_private.h"

/* ---- life ---- */

rp *
rp_create(const rp_host_ops *ops, void *host, const rp_config *cfg)
{
	rp *r = cm_calloc(MEM, 1, sizeof(*r));
	r->ops = *ops;
	r->host = host;
	r->nn = cfg->nn;
	r->nn_live = cfg->nn_live;
	r->self = cfg->self;
	r->names = cfg->names;
	pthread_rwlock_init(&r->route_lock, NULL);
	pthread_mutex_init(&r->mu, NULL);
	r->failover_ns = 30000000000ull;
	r->replica_ns = 10000000000ull;
	r->rec_bytes_per_s = 40ull << 20;
	return r;
}

void
rp_start(rp *r, const char *data_dir)
{
	snprintf(r->data_dir, sizeof(r->data_dir), "%s", data_dir);
	rp_rec_reset_dirs(r);
}

void
rp_quiesce(rp *r)
{
	if (r && r->rec_running) {
		pthread_join(r->rec_thread, NULL);
		r->rec_running = false;
	}
}

static void
routes_free(route_ix *rt, size_t n, uint32_t *slot)
{
	for (size_t i = 0; i < n; i++)
		cm_free(MEM, rt[i].shards);
	cm_free(MEM, rt);
	cm_free(MEM, slot);
}

void
rp_destroy(rp *r)
{
	if (!r)
		return;
	rp_quiesce(r);
	routes_free(r->routes, r->nroutes, r->route_slot);
	for (rp_shard *s = r->shards, *nx; s; s = nx) {
		nx = s->next;
		pthread_rwlock_destroy(&s->lock);
		cm_free(MEM, s);
	}
	pthread_rwlock_destroy(&r->route_lock);
	pthread_mutex_destroy(&r->mu);
	cm_free(MEM, r);
}

cm_err
rp_setting(rp *r, const char *key, const char *value, cm_error *err)
{
	uint64_t ns;
	if (strcmp(key, "cluster.primary_failover_timeout") == 0 ||
	    strcmp(key, "cluster.replica_timeout") == 0) {
		if (!cm_parse_duration_ns(value, &ns) || ns < 100000000ull)
			return cm_error_set(
			    err, CM_EINVAL,
			    "[%s] wants a duration of at least 100ms like 30s, got [%s]", key,
			    value);
		if (key[8] == 'p')
			r->failover_ns = ns;
		else
			r->replica_ns = ns;
		return CM_OK;
	}
	if (strcmp(key, "cluster.recovery_max_bytes_per_sec") == 0) {
		char *end;
		double x = strtod(value, &end);
		double mul = strcasecmp(end, "kb") == 0   ? 1024.0
		             : strcasecmp(end, "mb") == 0 ? 1048576.0
		             : strcasecmp(end, "gb") == 0 ? 1073741824.0
		             : !*end                      ? 1.0
		                                          : -1.0;
		if (end == value || x <= 0 || mul < 0)
			return cm_error_set(err, CM_EINVAL, "[%s] wants a size like 40mb, got [%s]",
			                    key, value);
		r->rec_bytes_per_s = (uint64_t)(x * mul);
		return CM_OK;
	}
	return cm_error_set(err, CM_EINVAL, "unknown setting [%s]", key);
}

uint64_t
rp_failover_ns(const rp *r)
{
	return r->failover_ns;
}

void
rp_set_joined(rp *r, bool joined)
{
	atomic_store(&r->joined, joined);
}

bool
rp_joined(const rp *r)
{
	return atomic_load(&r->joined);
}

/* ---- routes ---- */

bool
rp_take(rp *r, const char *index, const char *uuid, int shard, rp_copy *c)
{
	c->ref = NULL;
	c->s = r->ops.take(r->host, index, uuid ? uuid : "", shard, &c->ref);
	return c->s != NULL;
}

void
rp_release(rp *r, rp_copy *c)
{
	if (c->ref)
		r->ops.release(r->host, c->ref);
	c->ref = NULL;
	c->s = NULL;
}

static uint64_t
route_hash(const char *s)
{
	uint64_t h = 14695981039346656037ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* The route of index in a table (rt, cap slots), or NULL. */
static const route_ix *
route_find(const route_ix *rt, const uint32_t *slot, size_t cap, const char *index)
{
	if (!cap)
		return NULL;
	for (size_t i = route_hash(index) & (cap - 1); slot[i]; i = (i + 1) & (cap - 1))
		if (strcmp(rt[slot[i] - 1].name, index) == 0)
			return &rt[slot[i] - 1];
	return NULL;
}

/* Whether the table before named this node the primary of shard s of x in
 * the same term: the shard's copy holds that term already (this function
 * set it, and the shard persists it), so it is not taken again. A change
 * of one index in a state of thousands then takes one index's shards, not
 * every shard this node leads. */
static bool
term_set_before(const route_ix *old, const route_ix *x, int s, int self)
{
	return old && strcmp(old->uuid, x->uuid) == 0 && s < old->nshards &&
	       old->shards[s].primary == self && old->shards[s].term == x->shards[s].term;
}

void
rp_set_state(rp *r, const rp_state *st)
{
	route_ix *rt = cm_calloc(MEM, st->nindices + 1, sizeof(route_ix));
	size_t cap = 16;
	while (cap < 2 * st->nindices + 2)
		cap *= 2;
	uint32_t *slot = cm_calloc(MEM, cap, sizeof(uint32_t));
	size_t k = 0;
	for (size_t i = 0; i < st->nindices; i++) {
		const rp_index *x = &st->indices[i];
		if (route_find(rt, slot, cap, x->name))
			continue; /* a state names an index once; the first stands */
		route_ix *ri = &rt[k++];
		snprintf(ri->name, sizeof(ri->name), "%s", x->name);
		snprintf(ri->uuid, sizeof(ri->uuid), "%s", x->uuid);
		ri->nshards = x->nshards;
		ri->shards = cm_calloc(MEM, (size_t)x->nshards + 1, sizeof(rp_route));
		if (x->nshards)
			memcpy(ri->shards, x->routes, (size_t)x->nshards * sizeof(rp_route));
		size_t h = route_hash(ri->name) & (cap - 1);
		while (slot[h])
			h = (h + 1) & (cap - 1);
		slot[h] = (uint32_t)k;
	}
	/* Where this node leads, its shards number ops in the new term before
	 * the routes say it leads: a write that finds itself primary by the
	 * new routes must not number its op in the copy's old term (a copy
	 * promoted from replica numbered the first writes in term 1 while the
	 * term was persisted, found by fault scenario P1; a lower term on a
	 * newer op turns the order of versions around). Only this function
	 * writes the table, under the caller's one state lock: the old table
	 * is read without the route lock. */
	for (size_t i = 0; i < k; i++) {
		const route_ix *old =
		    route_find(r->routes, r->route_slot, r->route_cap, rt[i].name);
		for (int s = 0; s < rt[i].nshards; s++) {
			rp_copy c;
			if (rt[i].shards[s].primary != r->self ||
			    term_set_before(old, &rt[i], s, r->self) ||
			    !rp_take(r, rt[i].name, rt[i].uuid, s, &c))
				continue;
			st_shard_set_primary_term(c.s, rt[i].shards[s].term);
			rp_release(r, &c);
		}
	}
	pthread_rwlock_wrlock(&r->route_lock);
	route_ix *old = r->routes;
	size_t nold = r->nroutes;
	uint32_t *old_slot = r->route_slot;
	r->routes = rt;
	r->nroutes = k;
	r->route_slot = slot;
	r->route_cap = cap;
	pthread_rwlock_unlock(&r->route_lock);
	routes_free(old, nold, old_slot);
}

bool
rp_route_get(rp *r, const char *index, int shard, rp_route *out)
{
	bool found = false;
	pthread_rwlock_rdlock(&r->route_lock);
	const route_ix *ri = route_find(r->routes, r->route_slot, r->route_cap, index);
	if (ri && shard >= 0 && shard < ri->nshards) {
		*out = ri->shards[shard];
		found = true;
	}
	pthread_rwlock_unlock(&r->route_lock);
	if (!found)
		memset(out, 0, sizeof(*out)), out->primary = -1;
	return found;
}

rp_shard *
rp_shard_get(rp *r, const char *index, const char *uuid, int shard)
{
	rp_shard *s;
	pthread_mutex_lock(&r->mu);
	for (s = r->shards; s; s = s->next)
		if (s->shard == shard && strcmp(s->uuid, uuid) == 0)
			break;
	if (!s) {
		s = cm_calloc(MEM, 1, sizeof(*s));
		snprintf(s->uuid, sizeof(s->uuid), "%s", uuid);
		snprintf(s->index, sizeof(s->index), "%s", index);
		s->gcp_sent = NONE;
		s->shard = shard;
		pthread_rwlock_init(&s->lock, NULL);
		for (int i = 0; i < RP_MAX_NODES; i++) {
			s->ckp[i] = NONE;
			s->rec_from[i] = INT64_MAX;
		}
		s->gcp = NONE;
		s->next = r->shards;
		r->shards = s;
	}
	pthread_mutex_unlock(&r->mu);
	return s;
}

/* ---- calls ---- */

typedef struct sync_call {
	cm_wait *w;
	cm_err rc;
	uint32_t type;
	cm_buf rep;
} sync_call;

static void
sync_done(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	sync_call *c = arg;
	c->rc = rc;
	c->type = type;
	if (!rc && len)
		cm_buf_put(&c->rep, p, len);
	cm_wait_done(c->w);
}

cm_err
rp_call_sync(rp *r, int node, uint32_t type, const cm_buf *req, uint64_t deadline_ns,
             uint8_t **body, size_t *len, cm_error *err)
{
	sync_call c = {.w = cm_wait_create(1)};
	cm_error remote;
	char *b = NULL;
	size_t bl = 0;
	cm_buf_init(&c.rep, MEM);
	r->ops.call(r->host, node, type, req->data, req->len, deadline_ns, sync_done, &c);
	cm_wait_wait(c.w);
	cm_wait_destroy(c.w);
	*body = NULL;
	*len = 0;
	cm_error_clear(&remote);
	cm_err rc = c.rc;
	if (rc)
		rc = cm_error_set(err, rc, "node [%s] did not answer: %s", r->names[node],
		                  cm_err_msg(rc));
	else if (pr_ack_decode(c.rep.data, c.rep.len, &remote, &b, &bl) && !remote.code)
		rc = cm_error_set(err, CM_EPARSE, "malformed reply from node [%s]", r->names[node]);
	else if (remote.code) {
		*err = remote;
		rc = remote.code;
	} else {
		/* the Ack's body is NODE-accounted: copy it under ours */
		*body = cm_malloc(MEM, bl + 1);
		if (bl)
			memcpy(*body, b, bl);
		(*body)[bl] = 0;
		*len = bl;
	}
	cm_free(CM_MEM_NODE, b);
	cm_buf_free(&c.rep);
	return rc;
}

cm_err
rp_ask_master(rp *r, rp_event_kind kind, const char *index, const char *uuid, int shard, int node,
              uint64_t term, const char *reason, cm_error *err)
{
	rp_event ev = {.kind = kind,
	               .index = index,
	               .uuid = uuid,
	               .shard = shard,
	               .node = node,
	               .primary = r->self,
	               .term = term,
	               .reason = reason};
	return r->ops.master_event(r->host, &ev, err);
}

/* ---- the primary's write path ---- */

static void
fwd_done(void *arg, cm_err rc, uint32_t type, const uint8_t *p, size_t len)
{
	fwd_call *c = arg;
	cm_error e;
	(void)type;
	cm_error_clear(&e);
	if (!rc) {
		/* The whole-batch outcome: a replica applies what the primary
		 * applied, so per-op results carry nothing new. */
		uint64_t ckp;
		rc = pr_bulk_reply_whole(p, len, &ckp, &e);
		if (rc) {
			snprintf(c->why, sizeof(c->why), "%.190s", e.reason);
			c->stale = e.code == CM_ECONFLICT;
		} else {
			c->ckp = seq_i(ckp);
		}
	} else {
		snprintf(c->why, sizeof(c->why), "%s", cm_err_msg(rc));
		if (rc == CM_EUNAVAIL)
			c->r->ops.mark_down(c->r->host, c->node);
	}
	c->rc = rc;
	cm_wait_done(c->w);
}

void
rp_forward(rp *r, const char *index, const char *uuid, int shard, const st_op *ops, size_t n,
           uint64_t term, int64_t gcp, uint64_t mask, uint64_t deadline_ns, fwd_call *calls)
{
	cm_buf b;
	int cnt = 0;
	for (int i = 0; i < rp_nn(r); i++)
		cnt += (mask >> i) & 1;
	if (!cnt)
		return;
	pr_bulk_req rq = {.index = (char *)(uintptr_t)index,
	                  .index_uuid = (char *)(uintptr_t)uuid,
	                  .shard = (uint32_t)shard,
	                  .ops = (st_op *)(uintptr_t)ops,
	                  .nops = n,
	                  .replica = true,
	                  .primary_term = term,
	                  .global_checkpoint = seq_u(gcp),
	                  .source_node = (char *)(uintptr_t)r->names[r->self]};
	cm_buf_init(&b, MEM);
	pr_bulk_req_encode(&rq, &b);
	cm_wait *w = cm_wait_create(cnt);
	for (int i = 0; i < rp_nn(r); i++) {
		if (!((mask >> i) & 1))
			continue;
		calls[i] = (fwd_call){.w = w, .r = r, .node = i, .ckp = NONE};
		if (i == r->self || !r->ops.alive(r->host, i)) {
			/* Known unreachable: fail it now rather than at the timeout. */
			calls[i].rc = CM_EUNAVAIL;
			snprintf(calls[i].why, sizeof(calls[i].why), "node is unreachable");
			cm_wait_done(w);
			continue;
		}
		r->ops.call(r->host, i, PR_BULK, b.data, b.len, deadline_ns, fwd_done, &calls[i]);
	}
	cm_wait_wait(w);
	cm_wait_destroy(w);
	cm_buf_free(&b);
}

static void fail_all(const st_op_result *ores, st_op_result *res, size_t n, cm_err code,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void
fail_all(const st_op_result *ores, st_op_result *res, size_t n, cm_err code, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	for (size_t i = 0; i < n; i++) {
		if (ores && ores[i].err)
			continue;
		res[i].err = code;
		snprintf(res[i].reason, sizeof(res[i].reason), "%s", why);
	}
}

static int64_t
gcp_of(rp *r, rp_shard *rs, uint64_t in_sync, int64_t self_ckp)
{
	int64_t g = self_ckp;
	for (int i = 0; i < rp_nn(r); i++)
		if (i != r->self && ((in_sync >> i) & 1) && rs->ckp[i] < g)
			g = rs->ckp[i];
	return g;
}

static const char *
name_or(rp *r, int n)
{
	return n >= 0 && n < rp_nn(r) ? r->names[n] : "?";
}

cm_err
rp_primary_apply(rp *r, void *ref, const char *name, const char *uuid, int shard, const st_op *ops,
                 size_t n, st_op_result *res, uint64_t deadline_ns)
{
	rp_route ro;
	fwd_call calls[RP_MAX_NODES];
	st_op *rops = NULL;
	size_t k = 0;
	cm_err rc;

	if (!rp_route_get(r, name, shard, &ro) || ro.primary != r->self) {
		fail_all(NULL, res, n, CM_EMOVED,
		         "[%s][%d] primary is not on node [%s] (it is on [%s]); retry", name, shard,
		         r->names[r->self], name_or(r, ro.primary));
		return CM_OK;
	}
	/* A primary that is starting waits for the master to take it in, as
	 * ES waits for an inactive primary, bounded by the write's deadline. */
	uint64_t wait_until = cm_now_ns() + 5000000000ull;
	if (deadline_ns && deadline_ns < wait_until)
		wait_until = deadline_ns;
	while (!atomic_load(&r->joined) && cm_now_ns() < wait_until)
		usleep(10000);
	if (!atomic_load(&r->joined)) {
		fail_all(NULL, res, n, CM_EUNAVAIL,
		         "[%s][%d] primary on [%s] is starting: the master has not taken it in yet",
		         name, shard, r->names[r->self]);
		return CM_OK;
	}
	rp_copy c;
	if (!rp_take(r, name, uuid, shard, &c)) {
		fail_all(NULL, res, n, CM_EUNAVAIL, "[%s][%d] has no copy here", name, shard);
		return CM_OK;
	}
	rp_shard *rs = rp_shard_get(r, name, uuid, shard);
	pthread_rwlock_rdlock(&rs->lock);
	/* The route may have changed while we waited for the lock. */
	rp_route_get(r, name, shard, &ro);
	/* A hand-over being prepared: wait for the new primary's route (the
	 * write then goes there) or the end of the hold. */
	for (;;) {
		pthread_mutex_lock(&r->mu);
		bool held = rs->hold_term == ro.term && cm_now_ns() < rs->hold_until_ns;
		pthread_mutex_unlock(&r->mu);
		if (!held || ro.primary != r->self)
			break;
		if (deadline_ns && cm_now_ns() >= deadline_ns) {
			pthread_rwlock_unlock(&rs->lock);
			rp_release(r, &c);
			fail_all(NULL, res, n, CM_EUNAVAIL,
			         "[%s][%d] primary is handing over; timed out waiting for it", name,
			         shard);
			return CM_OK;
		}
		pthread_rwlock_unlock(&rs->lock);
		usleep(2000);
		pthread_rwlock_rdlock(&rs->lock);
		rp_route_get(r, name, shard, &ro);
	}
	if (ro.primary != r->self) {
		pthread_rwlock_unlock(&rs->lock);
		rp_release(r, &c);
		fail_all(NULL, res, n, CM_EMOVED, "[%s][%d] primary moved to [%s]; retry", name, shard,
		         name_or(r, ro.primary));
		return CM_OK;
	}
	pthread_mutex_lock(&r->mu);
	if (rs->term != ro.term) {
		/* Checkpoints gathered under another primary may predate a
		 * rollback of the copy: start over. */
		for (int i = 0; i < RP_MAX_NODES; i++)
			rs->ckp[i] = NONE;
		rs->term = ro.term;
		rs->doubt = 0; /* the new term's in-sync set is the master's word */
	}
	uint64_t tracking = rs->tracking, pending = rs->pending, doubt = rs->doubt;
	pthread_mutex_unlock(&r->mu);
	if ((rc = r->ops.apply(r->host, ref, shard, ops, n, res, false)))
		goto out;
	rops = cm_calloc(MEM, n + 1, sizeof(st_op));
	for (size_t i = 0; i < n; i++) {
		if (res[i].err)
			continue;
		rops[k] = ops[i];
		rops[k].seq_no = res[i].seq_no;
		rops[k].primary_term = res[i].primary_term;
		rops[k].version = res[i].version;
		rops[k].has_version = true;
		rops[k].if_seq_no = ST_NO_SEQ;
		rops[k].if_primary_term = 0;
		rops[k].create_only = false;
		rops[k].version_gte = false;
		k++;
	}
	uint64_t self = 1ull << r->self;
	/* A copy the master may count in sync is waited for as one. */
	uint64_t in_sync = (ro.in_sync | doubt) & ~self;
	uint64_t mask = (in_sync | tracking | pending) & ~self;
	if (k && mask) {
		uint64_t dl = cm_now_ns() + r->replica_ns;
		if (deadline_ns && deadline_ns < dl)
			dl = deadline_ns;
		memset(calls, 0, sizeof(calls));
		rp_forward(r, name, uuid, shard, rops, k, ro.term, rs->gcp, mask, dl, calls);
		pthread_mutex_lock(&r->mu);
		if (rs->gcp > rs->gcp_sent)
			rs->gcp_sent = rs->gcp;
		pthread_mutex_unlock(&r->mu);
		for (int i = 0; i < rp_nn(r); i++) {
			uint64_t bit = 1ull << i;
			if (!(mask & bit))
				continue;
			if (calls[i].rc == CM_OK) {
				pthread_mutex_lock(&r->mu);
				if (calls[i].ckp > rs->ckp[i])
					rs->ckp[i] = calls[i].ckp;
				pthread_mutex_unlock(&r->mu);
				continue;
			}
			if (calls[i].stale) {
				cm_warn("replication",
				        "[%s][%d] copy on [%s] refused primary term %" PRIu64
				        " (%s): this node is no longer the primary",
				        name, shard, r->names[i], ro.term, calls[i].why);
				fail_all(res, res, n, CM_EUNAVAIL,
				         "[%s][%d] this primary was deposed (%s); retry", name,
				         shard, calls[i].why);
				goto out;
			}
			if (!(in_sync & bit)) {
				pthread_mutex_lock(&r->mu);
				bool finalizing = (rs->pending & bit) != 0;
				if (finalizing)
					rs->pending_failed |= bit;
				else
					rs->tracking &=
					    ~bit; /* a copy in recovery retries on its own */
				pthread_mutex_unlock(&r->mu);
				if (finalizing) {
					/* It may be in the in-sync set by now: not acknowledged
					 * (the finalize takes it out again). */
					fail_all(
					    res, res, n, CM_EUNAVAIL,
					    "[%s][%d] copy on [%s] is joining the in-sync set and "
					    "failed (%s); retry",
					    name, shard, r->names[i], calls[i].why);
					goto out;
				}
				continue;
			}
			/* Not acknowledged until the master took the copy out. */
			cm_error e;
			cm_error_clear(&e);
			if (rp_ask_master(r, RP_EV_FAILED, name, uuid, shard, i, ro.term,
			                  calls[i].why, &e)) {
				cm_warn(
				    "replication",
				    "[%s][%d] replica on [%s] failed (%s) and the master could not "
				    "remove it (%s): not acknowledging",
				    name, shard, r->names[i], calls[i].why, e.reason);
				fail_all(res, res, n, CM_EUNAVAIL,
				         "[%s][%d] replica on [%s] failed (%s) and could not be "
				         "removed from the in-sync set (%s)",
				         name, shard, r->names[i], calls[i].why, e.reason);
				goto out;
			}
			cm_warn("replication", "[%s][%d] copy on [%s] left the in-sync set: %s",
			        name, shard, r->names[i], calls[i].why);
			in_sync &= ~bit;
			pthread_mutex_lock(&r->mu);
			rs->doubt &= ~bit; /* the master has it out */
			pthread_mutex_unlock(&r->mu);
		}
	}
	/* Global checkpoint: the lowest local checkpoint of the in-sync copies. */
	{
		st_shard_stats st;
		st_shard_stats_get(c.s, &st);
		pthread_mutex_lock(&r->mu);
		/* a finalizing copy counts: the master may count it in before
		 * this node learns so, and an op it lacks must stay above the
		 * checkpoint that a later recovery compares histories from */
		int64_t g = gcp_of(r, rs, in_sync | (rs->pending & ~self), seq_i(st.local_checkpoint));
		bool moved = g > rs->gcp;
		if (moved)
			rs->gcp = g;
		pthread_mutex_unlock(&r->mu);
		if (moved)
			st_shard_set_global_checkpoint(c.s, (uint64_t)g);
	}
out:
	pthread_rwlock_unlock(&rs->lock);
	rp_release(r, &c);
	cm_free(MEM, rops);
	return rc;
}

/* ---- the replica's side ---- */

void
rp_serve_replica(rp *r, void *ref, const char *uuid, const void *bulk_req, cm_buf *reply)
{
	const pr_bulk_req *rq = bulk_req;
	rp_route ro;
	int shard = (int)rq->shard;
	rp_copy c;
	if (!rp_take(r, rq->index, uuid, shard, &c)) {
		pr_bulk_reply_encode(NULL, 0, CM_ENOINDEX, "no such shard copy here", reply);
		return;
	}
	if (rp_route_get(r, rq->index, shard, &ro)) {
		if (rq->index_uuid[0] && strcmp(rq->index_uuid, uuid) != 0) {
			pr_bulk_reply_encode(NULL, 0, CM_ECONFLICT,
			                     "index uuid differs: the index was re-created", reply);
			rp_release(r, &c);
			return;
		}
		if (rq->primary_term < ro.term ||
		    (ro.primary == r->self && rq->primary_term <= ro.term)) {
			char why[256];
			snprintf(why, sizeof(why),
			         "stale primary term %" PRIu64
			         " from [%s]: [%s][%d] is in term %" PRIu64
			         " with its primary on [%s]",
			         rq->primary_term, rq->source_node ? rq->source_node : "?",
			         rq->index, shard, ro.term, name_or(r, ro.primary));
			pr_bulk_reply_encode(NULL, 0, CM_ECONFLICT, why, reply);
			rp_release(r, &c);
			return;
		}
	}
	st_op_result *res = cm_calloc(MEM, rq->nops + 1, sizeof(st_op_result));
	cm_err rc =
	    rq->nops ? r->ops.apply(r->host, ref, shard, rq->ops, rq->nops, res, true) : CM_OK;
	st_shard_stats st;
	st_shard_stats_get(c.s, &st);
	if (!rc && rq->global_checkpoint != ST_NO_SEQ)
		st_shard_set_global_checkpoint(c.s, rq->global_checkpoint);
	pr_bulk_reply_encode_ckp(res, rq->nops, rc, rc ? cm_err_msg(rc) : NULL,
	                         rc ? ST_NO_SEQ : st.local_checkpoint, reply);
	cm_free(MEM, res);
	rp_release(r, &c);
}

/* ---- hand-over ---- */

cm_err
rp_handoff_prepare(rp *r, const char *index, const char *uuid, int shard, uint64_t term,
                   uint64_t hold_ns, uint64_t *keep, cm_error *err)
{
	rp_route ro;
	rp_copy c;
	fwd_call calls[RP_MAX_NODES];
	*keep = 0;
	if (hold_ns == 0) { /* released: the master made no hand-over */
		rp_shard *rs = rp_shard_get(r, index, uuid, shard);
		pthread_mutex_lock(&r->mu);
		if (rs->hold_term == term)
			rs->hold_until_ns = 0;
		pthread_mutex_unlock(&r->mu);
		return CM_OK;
	}
	if (!rp_route_get(r, index, shard, &ro) || ro.primary != r->self || ro.term != term)
		return cm_error_set(err, CM_ECONFLICT,
		                    "[%s][%d] is not led by [%s] in term %" PRIu64, index, shard,
		                    r->names[r->self], term);
	if (!rp_take(r, index, uuid, shard, &c))
		return cm_error_set(err, CM_ENOINDEX, "[%s][%d] has no copy here", index, shard);
	rp_shard *rs = rp_shard_get(r, index, uuid, shard);
	/* Nothing in flight from here: every write holds the lock shared. */
	pthread_rwlock_wrlock(&rs->lock);
	rp_route_get(r, index, shard, &ro);
	cm_err rc = CM_OK;
	if (ro.primary != r->self || ro.term != term) {
		rc = cm_error_set(err, CM_ECONFLICT, "[%s][%d] moved while it was prepared", index,
		                  shard);
		goto out;
	}
	st_shard_stats st;
	st_shard_stats_get(c.s, &st);
	int64_t mine = seq_i(st.local_checkpoint);
	uint64_t in_sync = ro.in_sync & ~(1ull << r->self);
	pthread_mutex_lock(&r->mu);
	int64_t gcp = rs->gcp;
	pthread_mutex_unlock(&r->mu);
	/* an empty batch: each copy answers with its checkpoint now */
	memset(calls, 0, sizeof(calls));
	rp_forward(r, index, uuid, shard, NULL, 0, ro.term, gcp, in_sync,
	           cm_now_ns() + 1000000000ull, calls);
	uint64_t k = 1ull << r->self;
	for (int i = 0; i < rp_nn(r); i++)
		if (((in_sync >> i) & 1) && calls[i].rc == CM_OK && calls[i].ckp == mine)
			k |= 1ull << i;
	pthread_mutex_lock(&r->mu);
	rs->hold_term = term;
	rs->hold_until_ns = cm_now_ns() + hold_ns;
	pthread_mutex_unlock(&r->mu);
	*keep = k;
	cm_info("replication",
	        "[%s][%d] hand-over prepared: writes held, %d of %d in-sync copies hold every "
	        "operation (checkpoint %" PRId64 ")",
	        index, shard, __builtin_popcountll(k), __builtin_popcountll(ro.in_sync), mine);
out:
	pthread_rwlock_unlock(&rs->lock);
	rp_release(r, &c);
	return rc;
}

/* ---- idle global checkpoints ---- */

/* Primary, when writes stop: the last batch's replies raised the global
 * checkpoint, but the copies learn it only with the next batch. An empty
 * batch tells them, so their logs can be trimmed and a restart recovers
 * from an up-to-date point. */
static void
gcp_sync(rp *r)
{
	rp_shard *list[256];
	int n = 0;
	pthread_mutex_lock(&r->mu);
	for (rp_shard *s = r->shards; s && n < 256; s = s->next)
		list[n++] = s;
	pthread_mutex_unlock(&r->mu);
	for (int i = 0; i < n; i++) {
		rp_shard *rs = list[i];
		rp_route ro;
		rp_copy c;
		if (!rp_take(r, rs->index, rs->uuid, rs->shard, &c))
			continue;
		bool routed = rp_route_get(r, rs->index, rs->shard, &ro);
		pthread_mutex_lock(&r->mu);
		rs->pending &= ~ro.in_sync; /* finalized copies the routes now show */
		rs->doubt &= ~ro.in_sync;
		uint64_t held = rs->pending | rs->doubt;
		pthread_mutex_unlock(&r->mu);
		if (!routed || ro.primary != r->self || pthread_rwlock_tryrdlock(&rs->lock) != 0) {
			rp_release(r, &c);
			continue;
		}
		st_shard_stats st;
		st_shard_stats_get(c.s, &st);
		uint64_t in_sync = ro.in_sync & ~(1ull << r->self);
		pthread_mutex_lock(&r->mu);
		int64_t g = rs->term == ro.term ? gcp_of(r, rs, (in_sync | held) & ~(1ull << r->self),
		                                         seq_i(st.local_checkpoint))
		                                : NONE;
		if (g > rs->gcp)
			rs->gcp = g;
		g = rs->gcp;
		bool send = g > rs->gcp_sent && in_sync;
		if (send)
			rs->gcp_sent = g;
		pthread_mutex_unlock(&r->mu);
		if (g >= 0)
			st_shard_set_global_checkpoint(c.s, (uint64_t)g);
		if (send) {
			fwd_call calls[RP_MAX_NODES];
			memset(calls, 0, sizeof(calls));
			rp_forward(r, rs->index, rs->uuid, rs->shard, NULL, 0, ro.term, g, in_sync,
			           cm_now_ns() + 2000000000ull, calls);
		}
		pthread_rwlock_unlock(&rs->lock);
		rp_release(r, &c);
	}
}

void
rp_tick(rp *r)
{
	if (!atomic_load(&r->joined))
		return;
	rp_rec_maybe_start(r);
	gcp_sync(r);
}

/* ---- messages ---- */

bool
rp_handles(uint32_t type)
{
	return type >= PR_REC_START && type <= PR_REC_RELEASE;
}

void
rp_serve(rp *r, uint32_t type, const uint8_t *p, size_t len, cm_buf *reply, uint32_t *reply_type)
{
	cm_error err;
	cm_buf body;
	cm_error_clear(&err);
	cm_buf_init(&body, MEM);
	rp_rec_serve(r, type, p, len, &err, &body);
	pr_ack_encode(&err, err.code ? NULL : (const char *)body.data, err.code ? 0 : body.len,
	              reply);
	*reply_type = PR_ACK;
	cm_buf_free(&body);
}

/* ---- _cat/recovery ---- */

void
rp_cat_recovery(rp *r, cm_buf *out)
{
	pthread_mutex_lock(&r->mu);
	for (size_t i = 0; i < r->nlog; i++) {
		rec_rec *x = &r->log[i];
		int64_t t = (x->stop_ms ? x->stop_ms : cm_wall_ms()) - x->start_ms;
		cm_buf_printf(out, "%s %d %.3fs %s %s %s %s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
		              x->index, x->shard, (double)t / 1000.0, x->type,
		              x->failed ? "failed" : x->stage, x->source, x->target, x->files,
		              x->bytes, x->ops);
	}
	pthread_mutex_unlock(&r->mu);
}
