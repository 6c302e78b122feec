/* The cluster on etcd: membership under leases, the master elected
 * through etcd's election API, the cluster state kept in etcd (one key per
 * index and one for the rest) and watched by every node. Nothing on the
 * search or write path calls etcd.
 *
 * Keys, under /shoal/<cluster>/:
 *   nodes/<name>          {"name","http","transport","roles","boot"}, under the node's lease
 *   master                the election (etcd's election API; value: the leader's name)
 *   state/global          ClusterState without indices: joined boot ids, cluster settings
 *   state/indices/<name>  ClusterState with that index alone
 * The state's version is the newest mod revision of the state keys; the
 * master's term is the create revision of its election key, and every
 * state write is a transaction that holds only while that key is the one
 * it created.
 *
 * A member whose process is gone (its own transport port refuses
 * connections, twice) has its lease revoked by the node that saw it
 * (cl_etcd_reap), so its registration and any election key go at once
 * rather than when the lease expires, when that node still reaches at
 * least half of the other members; a member that does not answer for any
 * other reason (a partition, a stall) waits for its lease.
 *
 * Threads: the lease thread keeps the lease alive (and registers again,
 * with a new boot id, when it expired); the campaign thread stands for
 * master; the watch thread only marks the state dirty and wakes the
 * monitor, which re-reads. Locks: e->mu (lease, leader) is a leaf; the
 * commit runs with meta_lock held (the serialization point of state
 * changes), bounded by the etcd request timeout. docs/cluster.md. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../coord/ec.h"
#include "../proto/pr.h"
#include "nd_cluster_private.h"

#define MEM CM_MEM_NODE
#define STATE_WAIT_NS 500000000ull /* cl_may_serve_reads: the master's state on its way */
#define SEC 1000000000ull

typedef struct cl_etcd {
	ec_client *ec;
	char prefix[256]; /* /shoal/<cluster>/ */
	char election[300];
	int64_t ttl_s;
	pthread_mutex_t mu; /* lease, leader: a leaf */
	int64_t lease;
	uint64_t lease_until_ns; /* monotonic: the lease may have expired after this */
	ec_leader_key leader;    /* while leading (rev 0: not) */
	atomic_bool stop;
	atomic_bool dirty;   /* the watch saw a change: re-read */
	atomic_bool rewatch; /* the watch ended (compaction): start it again */
	_Atomic int64_t term;
	pthread_t lease_thread, campaign_thread;
	bool lease_started, campaign_started;
	ec_watch *watch;
	bool have_state; /* etcd held a state when last read */
	/* The state as etcd holds it through mirror_rev, kept current from the
	 * watch's changes (readmu; taken before meta_lock). The watch thread
	 * queues changes to state keys under evmu (a leaf); q_lost: the queue
	 * overflowed, read everything. */
	pthread_mutex_t readmu, evmu;
	rp_state *mirror;
	int64_t mirror_rev;
	struct cl_change *q;
	size_t nq, qcap;
	bool q_lost;
	atomic_bool members_dirty;
	/* figures (_nodes/stats cluster_state) */
	_Atomic uint64_t keys_written, bytes_read, full_reads, incremental_reads, commits;
	unsigned round;
	/* the master compacts etcd's history (cluster.etcd_compaction_*) */
	uint64_t compact_every_ns; /* 0: never */
	int64_t compact_keep;      /* revisions kept behind the oldest applied */
	uint64_t compacted_at_ns;
	int64_t compacted_rev;
	size_t max_txn_ops; /* operations one etcd transaction may hold */
	_Atomic uint64_t full_read_ns; /* when the state keys were last read whole */
} cl_etcd;

static void
keyf(const cl_etcd *e, char *buf, size_t cap, const char *rest, const char *name)
{
	snprintf(buf, cap, "%s%s%s", e->prefix, rest, name ? name : "");
}

cm_err
cl_etcd_open(nd_cluster *cl, const char *endpoints, cm_error *err)
{
	char *copy = cm_strdup(MEM, endpoints), *save = NULL, *tok;
	const char *eps[16];
	size_t n = 0;
	for (tok = strtok_r(copy, ",", &save); tok && n < 16; tok = strtok_r(NULL, ",", &save))
		if (*tok)
			eps[n++] = tok;
	if (!n) {
		cm_free(MEM, copy);
		return cm_error_set(err, CM_EINVAL, "--etcd needs at least one HOST:PORT");
	}
	cl_etcd *e = cm_calloc(MEM, 1, sizeof(*e));
	ec_opts o = {
	    .request_timeout_ms = 3000, .connect_timeout_ms = 500, .attempt_timeout_ms = 1500};
	cm_err rc = ec_open(eps, n, &o, &e->ec, err);
	cm_free(MEM, copy);
	if (rc) {
		cm_free(MEM, e);
		return rc;
	}
	pthread_mutex_init(&e->mu, NULL);
	pthread_mutex_init(&e->readmu, NULL);
	pthread_mutex_init(&e->evmu, NULL);
	snprintf(e->prefix, sizeof(e->prefix), "/shoal/%s/", cl->cluster_name);
	snprintf(e->election, sizeof(e->election), "%smaster", e->prefix);
	e->ttl_s = 10;
	e->compact_every_ns = 60 * SEC;
	e->compact_keep = 1000;
	e->max_txn_ops = 128; /* etcd's default --max-txn-ops */
	cl->etcd = e;
	return CM_OK;
}

/* cluster.lease_ttl (seconds, "10s"); cluster.etcd_compaction_interval
 * ("60s", "0" never) and cluster.etcd_compaction_retention (revisions). */
cm_err
cl_etcd_setting(nd_cluster *cl, const char *key, const char *value, cm_error *err)
{
	if (!cl->etcd)
		return CM_ENOTFOUND;
	if (strcmp(key, "cluster.etcd_compaction_interval") == 0) {
		uint64_t ns = 0;
		if (strcmp(value, "0") != 0 &&
		    (!cm_parse_duration_ns(value, &ns) || ns < SEC || ns > 86400 * SEC))
			return cm_error_set(err, CM_EINVAL,
			                    "cluster.etcd_compaction_interval wants 0 or 1s..1d, got [%s]",
			                    value);
		cl->etcd->compact_every_ns = ns;
		return CM_OK;
	}
	if (strcmp(key, "cluster.etcd_compaction_retention") == 0) {
		char *end;
		long long v = strtoll(value, &end, 10);
		if (*end || end == value || v < 1 || v > 100000000)
			return cm_error_set(err, CM_EINVAL,
			                    "cluster.etcd_compaction_retention wants a number of "
			                    "revisions >= 1, got [%s]",
			                    value);
		cl->etcd->compact_keep = v;
		return CM_OK;
	}
	if (strcmp(key, "cluster.etcd_max_txn_ops") == 0) {
		char *end;
		long long v = strtoll(value, &end, 10);
		if (*end || end == value || v < 8 || v > 1000000)
			return cm_error_set(err, CM_EINVAL,
			                    "cluster.etcd_max_txn_ops wants a number >= 8 (etcd's "
			                    "--max-txn-ops), got [%s]",
			                    value);
		cl->etcd->max_txn_ops = (size_t)v;
		return CM_OK;
	}
	if (strcmp(key, "cluster.lease_ttl") != 0)
		return CM_ENOTFOUND;
	uint64_t ns;
	if (!cm_parse_duration_ns(value, &ns) || ns < 2 * SEC || ns > 600 * SEC)
		return cm_error_set(err, CM_EINVAL, "cluster.lease_ttl wants 2s..600s, got [%s]",
		                    value);
	cl->etcd->ttl_s = (int64_t)(ns / SEC);
	return CM_OK;
}

bool
cl_etcd_leading(nd_cluster *cl)
{
	cl_etcd *e = cl->etcd;
	if (!e)
		return cl->master == cl->self;
	pthread_mutex_lock(&e->mu);
	bool lead = e->leader.rev != 0 && cm_now_ns() < e->lease_until_ns;
	pthread_mutex_unlock(&e->mu);
	return lead;
}

bool
cl_etcd_member_now(nd_cluster *cl)
{
	cl_etcd *e = cl->etcd;
	if (!e)
		return true;
	pthread_mutex_lock(&e->mu);
	bool live = e->lease != 0 && cm_now_ns() < e->lease_until_ns;
	pthread_mutex_unlock(&e->mu);
	return live && atomic_load(&cl->nodes[cl->self].registered);
}

bool
cl_may_serve_reads(nd_cluster *cl, cm_error *err)
{
	if (!cl->etcd)
		return true;
	if (!cl_etcd_member_now(cl)) {
		cm_error_set(err, CM_EUNAVAIL,
		             "node [%s] may have left the cluster (its etcd lease may have expired): "
		             "its copies do not answer realtime gets",
		             cl->nodes[cl->self].name);
		return false;
	}
	int m = cl->master;
	if (m == cl->self)
		return true;
	if (m < 0) {
		/* a node between masters (one that just registered again after
		 * its lease expired) cannot tell whether its copies are current:
		 * the old master's GET right after healing read its old primary
		 * copy (fault scenario P1) */
		cm_error_set(err, CM_EUNAVAIL,
		             "node [%s] knows no master: its copies do not answer realtime gets",
		             cl->nodes[cl->self].name);
		return false;
	}
	/* pongs only: the master knows when it sent them (cl_reads_stopped) */
	uint64_t ok = atomic_load(&cl->nodes[m].pong_ok_ns), now = cm_now_ns();
	uint64_t want = atomic_load(&cl->nodes[m].master_version),
	         have = atomic_load(&cl->state_version);
	/* a pong may come in a moment before the publish of the same state:
	 * the state is waited for briefly (as local_get waits for its
	 * checkpoint), not refused at once */
	for (uint64_t until = now + STATE_WAIT_NS;
	     have < want && ok && cm_now_ns() < until && cm_now_ns() - ok < cl_read_window_ns(cl);)
	{
		usleep(1000);
		have = atomic_load(&cl->state_version);
	}
	now = cm_now_ns();
	if (ok && now - ok < cl_read_window_ns(cl) && have >= want)
		return true;
	if (ok && now - ok < cl_read_window_ns(cl)) {
		cm_error_set(err, CM_EUNAVAIL,
		             "node [%s] has not applied the master's cluster state version %" PRIu64
		             " yet (it holds %" PRIu64 "): its copies do not answer realtime gets",
		             cl->nodes[cl->self].name, want, have);
		return false;
	}
	cm_error_set(err, CM_EUNAVAIL,
	             "node [%s] has not heard from the master [%s] for %.1f s: its copies do not "
	             "answer realtime gets (another may lead their shards by now)",
	             cl->nodes[cl->self].name, cl->nodes[m].name,
	             ok ? (double)(now - ok) / 1e9 : -1.0);
	return false;
}

static void
step_down(nd_cluster *cl, const char *why)
{
	cl_etcd *e = cl->etcd;
	pthread_mutex_lock(&e->mu);
	bool was = e->leader.rev != 0;
	ec_leader_key_free(&e->leader);
	memset(&e->leader, 0, sizeof(e->leader));
	atomic_store(&e->term, 0);
	pthread_mutex_unlock(&e->mu);
	int self = cl->self;
	atomic_compare_exchange_strong(&cl->master, &self, -1);
	if (was)
		cm_warn("cluster", "node [%s] stops acting as master: %s", cl->nodes[cl->self].name,
		        why);
}

/* ---- the node table ---- */

int
cl_node_slot(nd_cluster *cl, const char *name)
{
	if (!name || !*name || strlen(name) >= sizeof(cl->nodes[0].name))
		return -1;
	pthread_mutex_lock(&cl->members_mu);
	int nn = cl->nn;
	for (int i = 0; i < nn; i++)
		if (strcmp(cl->nodes[i].name, name) == 0) {
			pthread_mutex_unlock(&cl->members_mu);
			return i;
		}
	if (!cl->etcd || nn >= ND_CL_MAX_NODES) {
		pthread_mutex_unlock(&cl->members_mu);
		return -1;
	}
	nd_cl_node *nd = &cl->nodes[nn];
	snprintf(nd->name, sizeof(nd->name), "%s", name);
	nd->data_ord = -1;
	nd->ewma_us = 1000.0;
	atomic_store(&nd->alive, false);
	atomic_store(&nd->down_since_ns, cm_now_ns());
	atomic_store(&cl->nn, nn + 1); /* the name is set before the count covers it */
	pthread_mutex_unlock(&cl->members_mu);
	return nn;
}

static void
reg_name(void *arg, const char *name)
{
	cl_node_slot(arg, name);
}

static void
member_update(nd_cluster *cl, int i, const cJSON *j)
{
	nd_cl_node *nd = &cl->nodes[i];
	const cJSON *http = cJSON_GetObjectItemCaseSensitive(j, "http");
	const cJSON *tr = cJSON_GetObjectItemCaseSensitive(j, "transport");
	const cJSON *roles = cJSON_GetObjectItemCaseSensitive(j, "roles"), *r;
	const cJSON *boot = cJSON_GetObjectItemCaseSensitive(j, "boot");
	if (!cJSON_IsString(tr) || strlen(tr->valuestring) >= sizeof(nd->connect) ||
	    !cJSON_IsString(http) || strlen(http->valuestring) >= sizeof(nd->http))
		return;
	pthread_mutex_lock(&cl->members_mu);
	if (strcmp(nd->http, http->valuestring) != 0)
		snprintf(nd->http, sizeof(nd->http), "%s", http->valuestring);
	bool data = false, master = false;
	cJSON_ArrayForEach(r, roles)
	{
		data |= cJSON_IsString(r) && strcmp(r->valuestring, "data") == 0;
		master |= cJSON_IsString(r) && strcmp(r->valuestring, "master") == 0;
	}
	nd->master = master;
	if (data && !nd->data) {
		nd->data = true;
		nd->data_ord = cl->ndata;
		cl->data_nodes[cl->ndata++] = i;
	}
	const char *addr = tr->valuestring;
	for (int k = 0; k < cl->ndial; k++)
		if (strcmp(cl->dial[k].name, nd->name) == 0)
			addr = cl->dial[k].connect; /* this node dials it through there */
	nd_peer *old = nd->peer;
	if (!old || strcmp(nd->connect, addr) != 0) {
		nd_transport_opts o = cl_transport_opts(cl);
		nd_peer *p = NULL;
		cm_error err;
		cm_error_clear(&err);
		snprintf(nd->connect, sizeof(nd->connect), "%s", addr);
		snprintf(nd->transport, sizeof(nd->transport), "%s", tr->valuestring);
		if (nd_peer_open(nd->connect, &o, &p, &err) == CM_OK) {
			nd->peer = p;
			/* a peer in use may not be closed under its callers: the old
			 * one stays open until the node stops */
			if (old && cl->npeers_old < ND_CL_MAX_NODES)
				cl->peers_old[cl->npeers_old++] = old;
		} else {
			cm_warn("cluster", "cannot dial node [%s] at %s: %s", nd->name, nd->connect,
			        err.reason);
		}
	}
	pthread_mutex_unlock(&cl->members_mu);
	uint64_t b = cJSON_IsString(boot) ? strtoull(boot->valuestring, NULL, 16) : 0;
	atomic_store(&nd->reg_boot, b);
	if (!atomic_exchange(&nd->registered, true))
		cm_info("cluster", "node [%s] is a member (http %s, transport %s)", nd->name,
		        nd->http, nd->connect);
	atomic_store(&nd->gone_since_ns, 0);
}

/* Reads nodes/ and the leader. */
static cm_err
members_read(nd_cluster *cl, cm_error *err)
{
	cl_etcd *e = cl->etcd;
	char key[1024];
	ec_kvs kvs;
	keyf(e, key, sizeof(key), "nodes/", NULL);
	cm_err rc = ec_range_prefix(e->ec, key, 0, &kvs, err);
	if (rc)
		return rc;
	bool seen[ND_CL_MAX_NODES] = {0};
	for (size_t k = 0; k < kvs.n; k++) {
		cJSON *j =
		    cJSON_ParseWithLength((const char *)kvs.kv[k].value, kvs.kv[k].value_len);
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
		int i = cJSON_IsString(name) ? cl_node_slot(cl, name->valuestring) : -1;
		if (i >= 0 && i != cl->self) {
			member_update(cl, i, j);
			seen[i] = true;
		}
		cJSON_Delete(j);
	}
	ec_kvs_free(&kvs);
	uint64_t now = cm_now_ns();
	for (int i = 0; i < cl->nn; i++) {
		if (i == cl->self || seen[i])
			continue;
		if (atomic_exchange(&cl->nodes[i].registered, false))
			cm_warn("cluster",
			        "node [%s] left the cluster (its lease expired or it stopped)",
			        cl->nodes[i].name);
		uint64_t z = 0;
		atomic_compare_exchange_strong(&cl->nodes[i].gone_since_ns, &z, now);
		cl_mark(cl, i, false, 0);
	}
	/* the leader */
	ec_kv l;
	cm_error e2;
	cm_error_clear(&e2);
	rc = ec_leader(e->ec, e->election, &l, &e2);
	if (rc == CM_ENOTFOUND) {
		if (!cl_etcd_leading(cl))
			atomic_store(&cl->master, -1);
		return CM_OK;
	}
	if (rc)
		return CM_OK; /* keep the master we knew */
	char name[64];
	snprintf(name, sizeof(name), "%.*s", (int)(l.value_len < 63 ? l.value_len : 63),
	         (const char *)l.value);
	int m = cl_node_slot(cl, name);
	pthread_mutex_lock(&e->mu);
	bool mine = e->leader.rev != 0 && e->leader.key && strcmp(e->leader.key, l.key) == 0;
	pthread_mutex_unlock(&e->mu);
	ec_kv_free(&l);
	if (m == cl->self && !mine)
		m = -1; /* a key of this node's earlier process: it expires */
	if (m != cl->self && cl_etcd_leading(cl))
		step_down(cl, "another node leads");
	if (m != cl->self || cl_etcd_leading(cl)) {
		int was = atomic_exchange(&cl->master, m);
		if (was != m && m >= 0)
			cm_info("cluster", "master is node [%s]", cl->nodes[m].name);
	}
	return CM_OK;
}

/* ---- the state in etcd ---- */

/* A change to a state key the watch delivered, queued for the monitor. */
typedef struct cl_change {
	bool deleted;
	char *key;
	uint8_t *val;
	size_t len;
	int64_t rev;
} cl_change;

static void
changes_free(cl_change *q, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		cm_free(MEM, q[i].key);
		cm_free(MEM, q[i].val);
	}
	cm_free(MEM, q);
}

/* Applies state key k (put at revision rev, or deleted) to st: an index
 * part replaces that index, the global part replaces the rest, a terms key
 * gives its shard the term (the revision of the write that assigned the
 * primary). An index part keeps the terms the index had (its terms keys
 * did not change, else their own changes follow in the same revision). */
static cm_err
state_key_apply(nd_cluster *cl, rp_state *st, bool deleted, const char *k, const uint8_t *val,
                size_t len, int64_t rev, cm_error *err)
{
	cl_etcd *e = cl->etcd;
	size_t pl = strlen(e->prefix);
	if (strncmp(k, e->prefix, pl) != 0 || strncmp(k + pl, "state/", 6) != 0)
		return CM_OK;
	const char *rest = k + pl + 6;
	if (strncmp(rest, "terms/", 6) == 0) {
		const char *slash = strrchr(rest + 6, '/');
		char name[256];
		if (deleted || !slash || (size_t)(slash - (rest + 6)) >= sizeof(name))
			return CM_OK;
		snprintf(name, sizeof(name), "%.*s", (int)(slash - (rest + 6)), rest + 6);
		rp_index *x = rp_state_index(st, name);
		int sh = atoi(slash + 1);
		if (x && sh >= 0 && sh < x->nshards)
			x->routes[sh].term = (uint64_t)rev;
	} else if (strncmp(rest, "indices/", 8) == 0) {
		if (deleted) {
			rp_state_remove_index(st, rest + 8);
			return CM_OK;
		}
		const rp_index *old = rp_state_index(st, rest + 8);
		char uuid[64] = "";
		uint64_t *terms = NULL;
		int nterms = 0;
		if (old) {
			snprintf(uuid, sizeof(uuid), "%s", old->uuid);
			nterms = old->nshards;
			terms = cm_malloc(MEM, ((size_t)nterms + 1) * sizeof(uint64_t));
			for (int i = 0; i < nterms; i++)
				terms[i] = old->routes[i].term;
		}
		rp_state_names(val, len, reg_name, cl);
		cm_err rc = rp_state_merge(st, val, len, cl->names, cl->nn, err);
		rp_index *x = rc ? NULL : rp_state_index(st, rest + 8);
		if (x && terms && strcmp(x->uuid, uuid) == 0)
			for (int i = 0; i < nterms && i < x->nshards; i++)
				x->routes[i].term = terms[i];
		cm_free(MEM, terms);
		if (rc)
			return rc;
	} else if (strcmp(rest, "global") == 0 && !deleted) {
		rp_state *g;
		rp_state_names(val, len, reg_name, cl);
		cm_err rc = rp_state_decode(val, len, cl->names, cl->nn, &g, err);
		if (rc)
			return rc;
		rp_state_take_global(st, g);
		rp_state_free(g);
	}
	if (!deleted && rev > (int64_t)st->version)
		st->version = (uint64_t)rev;
	return CM_OK;
}

/* Hands a copy of the mirror to the node when it is news (or when force). */
static void
mirror_adopt(nd_cluster *cl, bool force)
{
	rp_state *m = cl->etcd->mirror;
	pthread_mutex_lock(&cl->meta_lock);
	bool news = m && (m->version > cl->state->version ||
	                  (force && m->version != cl->state->version));
	pthread_mutex_unlock(&cl->meta_lock);
	if (news)
		cl_state_adopt(cl, rp_state_dup(m), force);
}

/* Reads every state key: the mirror starts over at the read's revision,
 * and queued changes it already covers are dropped. Caller holds readmu. */
static cm_err
state_read_locked(nd_cluster *cl, bool force, cm_error *err)
{
	cl_etcd *e = cl->etcd;
	char key[1024];
	ec_kvs kvs;
	keyf(e, key, sizeof(key), "state/", NULL);
	cm_err rc = ec_range_prefix(e->ec, key, 0, &kvs, err);
	if (rc)
		return rc;
	atomic_fetch_add(&e->full_reads, 1);
	e->full_read_ns = cm_now_ns();
	e->have_state = kvs.n > 0;
	rp_state *st = rp_state_new();
	uint64_t bytes = 0;
	for (size_t k = 0; k < kvs.n && !rc; k++) {
		const ec_kv *kv = &kvs.kv[k];
		bytes += kv->value_len;
		rc = state_key_apply(cl, st, false, kv->key, kv->value, kv->value_len,
		                     kv->mod_revision, err);
	}
	atomic_fetch_add(&e->bytes_read, bytes);
	int64_t rev = kvs.revision;
	size_t nkeys = kvs.n;
	ec_kvs_free(&kvs);
	if (rc) {
		rp_state_free(st);
		return rc;
	}
	rp_state_free(e->mirror);
	e->mirror = nkeys ? st : NULL;
	if (!nkeys)
		rp_state_free(st);
	e->mirror_rev = rev;
	pthread_mutex_lock(&e->evmu);
	size_t keep = 0;
	for (size_t i = 0; i < e->nq; i++) {
		if (e->q[i].rev > rev)
			e->q[keep++] = e->q[i];
		else {
			cm_free(MEM, e->q[i].key);
			cm_free(MEM, e->q[i].val);
		}
	}
	e->nq = keep;
	e->q_lost = false;
	pthread_mutex_unlock(&e->evmu);
	mirror_adopt(cl, force);
	return CM_OK;
}

static cm_err
state_read(nd_cluster *cl, bool force, cm_error *err)
{
	cl_etcd *e = cl->etcd;
	pthread_mutex_lock(&e->readmu);
	cm_err rc = state_read_locked(cl, force, err);
	pthread_mutex_unlock(&e->readmu);
	return rc;
}

/* Applies what the watch delivered since the mirror's revision: a state
 * change costs what it changed, not the size of the state. With no mirror,
 * or when the queue overflowed, everything is read instead. */
static cm_err
state_catch_up(nd_cluster *cl, cm_error *err)
{
	cl_etcd *e = cl->etcd;
	cm_err rc = CM_OK;
	pthread_mutex_lock(&e->readmu);
	pthread_mutex_lock(&e->evmu);
	cl_change *q = e->q;
	size_t n = e->nq;
	bool lost = e->q_lost;
	e->q = NULL;
	e->nq = e->qcap = 0;
	pthread_mutex_unlock(&e->evmu);
	if (lost || !e->mirror) {
		changes_free(q, n);
		rc = state_read_locked(cl, false, err);
		pthread_mutex_unlock(&e->readmu);
		return rc;
	}
	uint64_t bytes = 0;
	bool any = false;
	for (size_t i = 0; i < n && !rc; i++) {
		if (q[i].rev <= e->mirror_rev)
			continue; /* a full read covered it */
		bytes += q[i].len;
		rc = state_key_apply(cl, e->mirror, q[i].deleted, q[i].key, q[i].val, q[i].len,
		                     q[i].rev, err);
		any = true;
	}
	if (n && q[n - 1].rev > e->mirror_rev)
		e->mirror_rev = q[n - 1].rev;
	changes_free(q, n);
	atomic_fetch_add(&e->bytes_read, bytes);
	if (rc) /* a part that does not decode: start over from etcd */
		rc = state_read_locked(cl, false, err);
	else if (any) {
		atomic_fetch_add(&e->incremental_reads, 1);
		mirror_adopt(cl, false);
	}
	pthread_mutex_unlock(&e->readmu);
	return rc;
}

/* Whether the write of next assigns shard s of next's index x a primary
 * (a new index, or a new term): its term becomes the write's revision. */
static bool
term_assigned(const rp_state *prev, const rp_index *x, int s)
{
	const rp_index *p = prev ? rp_state_index(prev, x->name) : NULL;
	if (!p || strcmp(p->uuid, x->uuid) != 0 || s >= p->nshards)
		return true;
	return p->routes[s].term != x->routes[s].term;
}

void
cl_etcd_stamp_terms(const rp_state *prev, rp_state *next, uint64_t revision)
{
	for (size_t i = 0; i < next->nindices; i++)
		for (int s = 0; s < next->indices[i].nshards; s++)
			if (term_assigned(prev, &next->indices[i], s))
				next->indices[i].routes[s].term = revision;
}

typedef struct txn_parts {
	char **keys;
	cm_buf *vals;
	ec_op *ops;
	size_t n, cap;
} txn_parts;

static void
parts_add(txn_parts *t, ec_op_type type, const char *key, cm_buf *val)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 8;
		t->keys = cm_realloc(MEM, t->keys, t->cap * sizeof(char *));
		t->vals = cm_realloc(MEM, t->vals, t->cap * sizeof(cm_buf));
		t->ops = cm_realloc(MEM, t->ops, t->cap * sizeof(ec_op));
	}
	t->keys[t->n] = cm_strdup(MEM, key);
	cm_buf_init(&t->vals[t->n], MEM);
	if (val) {
		t->vals[t->n] = *val;
		cm_buf_init(val, MEM);
	}
	t->ops[t->n] = (ec_op){.type = type, .key = t->keys[t->n]};
	t->n++;
}

static void
parts_free(txn_parts *t)
{
	for (size_t i = 0; i < t->n; i++) {
		cm_free(MEM, t->keys[i]);
		cm_buf_free(&t->vals[i]);
	}
	cm_free(MEM, t->keys);
	cm_free(MEM, t->vals);
	cm_free(MEM, t->ops);
}

size_t
cl_etcd_index_ops(const rp_state *prev, const rp_index *x)
{
	const rp_index *was = prev ? rp_state_index(prev, x->name) : NULL;
	size_t n = !was || !rp_index_same(was, x);
	for (int s = 0; s < x->nshards; s++)
		n += term_assigned(prev, x, s);
	return n;
}

size_t
cl_etcd_txn_ops(const rp_state *prev, const rp_state *next)
{
	size_t n = 1; /* state/global */
	for (size_t i = 0; i < next->nindices; i++)
		n += cl_etcd_index_ops(prev, &next->indices[i]);
	for (size_t i = 0; prev && i < prev->nindices; i++) {
		const rp_index *nx = rp_state_index(next, prev->indices[i].name);
		if (!nx || strcmp(nx->uuid, prev->indices[i].uuid) != 0)
			n += nx ? 1 : 2;
	}
	return n;
}

size_t
cl_etcd_max_txn_ops(const nd_cluster *cl)
{
	return cl->etcd ? cl->etcd->max_txn_ops : (size_t)-1;
}

cm_err
cl_etcd_commit(nd_cluster *cl, const rp_state *prev, const rp_state *next, uint64_t *version,
               cm_error *err)
{
	cl_etcd *e = cl->etcd;
	char key[1024];
	int nn = cl->nn;
	txn_parts t = {0};
	cm_buf b;

	pthread_mutex_lock(&e->mu);
	bool lead = e->leader.rev != 0 && cm_now_ns() < e->lease_until_ns;
	char *lkey = lead ? cm_strdup(MEM, e->leader.key) : NULL;
	int64_t lrev = e->leader.rev;
	pthread_mutex_unlock(&e->mu);
	if (!lead)
		return cm_error_set_type(err, CM_EUNAVAIL, "master_not_discovered_exception",
		                         "node [%s] is not the master (any more): the cluster "
		                         "state was not changed",
		                         cl->nodes[cl->self].name);
	for (size_t i = 0; i < next->nindices; i++) {
		const rp_index *was = prev ? rp_state_index(prev, next->indices[i].name) : NULL;
		if (was && rp_index_same(was, &next->indices[i]))
			continue;
		cm_buf_init(&b, MEM);
		rp_state_encode_index(next, i, cl->names, nn, &b);
		keyf(e, key, sizeof(key), "state/indices/", next->indices[i].name);
		parts_add(&t, EC_OP_PUT, key, &b);
	}
	for (size_t i = 0; prev && i < prev->nindices; i++) {
		const rp_index *nx = rp_state_index(next, prev->indices[i].name);
		if (!nx || strcmp(nx->uuid, prev->indices[i].uuid) != 0) {
			if (!nx) {
				keyf(e, key, sizeof(key), "state/indices/", prev->indices[i].name);
				parts_add(&t, EC_OP_DELETE, key, NULL);
			}
			char pfx[400];
			snprintf(pfx, sizeof(pfx), "state/terms/%s/", prev->indices[i].name);
			keyf(e, key, sizeof(key), pfx, NULL);
			parts_add(&t, EC_OP_DELETE_PREFIX, key, NULL);
		}
	}
	/* a shard given a primary: its terms key is written, and the term is
	 * that write's revision (readers take it from the key) */
	for (size_t i = 0; i < next->nindices; i++)
		for (int s = 0; s < next->indices[i].nshards; s++) {
			const rp_route *ro = &next->indices[i].routes[s];
			if (!term_assigned(prev, &next->indices[i], s))
				continue;
			char rest[400];
			snprintf(rest, sizeof(rest), "state/terms/%s/%d", next->indices[i].name, s);
			keyf(e, key, sizeof(key), rest, NULL);
			cm_buf_init(&b, MEM);
			const char *pn =
			    ro->primary >= 0 && ro->primary < nn ? cl->names[ro->primary] : "";
			cm_buf_put(&b, pn, strlen(pn));
			parts_add(&t, EC_OP_PUT, key, &b);
		}
	cm_buf_init(&b, MEM);
	rp_state_encode_global(next, cl->names, nn, &b);
	keyf(e, key, sizeof(key), "state/global", NULL);
	parts_add(&t, EC_OP_PUT, key, &b);
	for (size_t i = 0; i < t.n; i++) {
		t.ops[i].value = t.vals[i].data;
		t.ops[i].value_len = t.vals[i].len;
	}
	ec_cmp cmp = {.key = lkey, .target = EC_CMP_CREATE, .op = EC_CMP_EQ, .num = lrev};
	ec_txn_result res = {0};
	cm_error e2;
	cm_error_clear(&e2);
	cm_err rc = ec_txn(e->ec, &cmp, 1, t.ops, t.n, NULL, 0, &res, &e2);
	parts_free(&t);
	cm_free(MEM, lkey);
	if (rc && strstr(e2.reason, "too many operations"))
		return cm_error_set_type(err, CM_EINVAL, "illegal_argument_exception",
		                         "this change writes %zu keys of the cluster state, more "
		                         "than etcd takes in one transaction (its --max-txn-ops; "
		                         "cluster.etcd_max_txn_ops is %zu): nothing was changed",
		                         t.n, e->max_txn_ops);
	if (rc && strstr(e2.reason, "space exceeded"))
		return cm_error_set_type(err, CM_EUNAVAIL, "cluster_block_exception",
		                         "etcd's database is full (%s; its NOSPACE alarm is raised): "
		                         "compact and defragment etcd, then disarm the alarm "
		                         "(docs/operations.md); the cluster state was not changed",
		                         e2.reason);
	if (rc)
		return cm_error_set_type(err, CM_EUNAVAIL, "master_not_discovered_exception",
		                         "cannot write the cluster state to etcd (%s): not changed",
		                         e2.reason[0] ? e2.reason : cm_err_msg(rc));
	bool ok = res.succeeded;
	*version = (uint64_t)res.revision;
	if (ok) {
		atomic_fetch_add(&e->commits, 1);
		atomic_fetch_add(&e->keys_written, t.n);
	}
	ec_txn_result_free(&res);
	if (!ok) {
		step_down(cl, "its election key is gone (a newer master leads)");
		return cm_error_set_type(err, CM_EUNAVAIL, "master_not_discovered_exception",
		                         "node [%s] is no longer the master: the cluster state "
		                         "was not changed",
		                         cl->nodes[cl->self].name);
	}
	return CM_OK;
}

/* ---- lease and registration ---- */

static cm_err
register_self(nd_cluster *cl, int64_t lease, cm_error *err)
{
	cl_etcd *e = cl->etcd;
	nd_cl_node *me = &cl->nodes[cl->self];
	char key[1024], boot[32];
	cJSON *j = cJSON_CreateObject(), *roles = cJSON_AddArrayToObject(j, "roles");
	cJSON_AddStringToObject(j, "name", me->name);
	cJSON_AddStringToObject(j, "http", me->http);
	cJSON_AddStringToObject(j, "transport", me->connect);
	if (me->master)
		cJSON_AddItemToArray(roles, cJSON_CreateString("master"));
	if (me->data)
		cJSON_AddItemToArray(roles, cJSON_CreateString("data"));
	snprintf(boot, sizeof(boot), "%" PRIx64, atomic_load(&me->boot));
	cJSON_AddStringToObject(j, "boot", boot);
	char *text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	keyf(e, key, sizeof(key), "nodes/", me->name);
	cm_err rc = ec_put(e->ec, key, text, strlen(text), lease, NULL, err);
	cJSON_free(text);
	return rc;
}

/* A key of this node's name under another lease is this node's earlier
 * process (killed, or stalled past its lease): its lease goes now, with
 * its registration and any election key, so the cluster need not wait
 * out its TTL. */
static void
revoke_predecessor(nd_cluster *cl)
{
	cl_etcd *e = cl->etcd;
	char key[1024];
	ec_kv kv;
	cm_error err;
	cm_error_clear(&err);
	keyf(e, key, sizeof(key), "nodes/", cl->nodes[cl->self].name);
	if (ec_get(e->ec, key, &kv, NULL, &err) != CM_OK)
		return;
	if (kv.lease && kv.lease != e->lease) {
		cm_info("cluster", "revoking lease %" PRIx64 " of this node's earlier process",
		        (uint64_t)kv.lease);
		ec_lease_revoke(e->ec, kv.lease, &err);
	}
	ec_kv_free(&kv);
}

static cm_err
lease_new(nd_cluster *cl, cm_error *err)
{
	cl_etcd *e = cl->etcd;
	int64_t id, granted;
	uint64_t t0 = cm_now_ns();
	cm_err rc = ec_lease_grant(e->ec, e->ttl_s, &id, &granted, err);
	if (rc)
		return rc;
	pthread_mutex_lock(&e->mu);
	e->lease = id;
	/* the master stops a second before etcd could expire it */
	e->lease_until_ns = t0 + (uint64_t)granted * SEC - SEC;
	pthread_mutex_unlock(&e->mu);
	if ((rc = register_self(cl, id, err)))
		return rc;
	atomic_store(&cl->nodes[cl->self].registered, true);
	return CM_OK;
}

static bool
sleep_stop(cl_etcd *e, uint64_t ns)
{
	for (uint64_t t = 0; t < ns && !atomic_load(&e->stop); t += 50000000ull)
		usleep(50000);
	return atomic_load(&e->stop);
}

static void *
lease_main(void *arg)
{
	nd_cluster *cl = arg;
	cl_etcd *e = cl->etcd;
	uint64_t every = (uint64_t)e->ttl_s * SEC / 3;
	while (!sleep_stop(e, every)) {
		cm_error err;
		cm_error_clear(&err);
		pthread_mutex_lock(&e->mu);
		int64_t lease = e->lease;
		pthread_mutex_unlock(&e->mu);
		uint64_t t0 = cm_now_ns();
		int64_t left = 0;
		cm_err rc = lease ? ec_lease_keepalive(e->ec, lease, &left, &err) : CM_ENOTFOUND;
		if (rc == CM_OK && left > 0) {
			pthread_mutex_lock(&e->mu);
			if (e->lease == lease)
				e->lease_until_ns = t0 + (uint64_t)left * SEC - SEC;
			pthread_mutex_unlock(&e->mu);
			continue;
		}
		if (rc != CM_ENOTFOUND && !(rc == CM_OK && left <= 0)) {
			if (cm_now_ns() >= e->lease_until_ns)
				step_down(cl, "etcd is unreachable past the lease");
			cm_warn("cluster", "lease keep-alive failed: %s",
			        err.reason[0] ? err.reason : cm_err_msg(rc));
			every = SEC; /* retry sooner */
			continue;
		}
		/* Expired: never renewed. This process registers again as a
		 * new boot; its copies recover before they count. */
		step_down(cl, "its lease expired");
		atomic_store(&cl->nodes[cl->self].registered, false);
		uint64_t boot = ((uint64_t)getpid() << 40) ^ cm_now_ns();
		atomic_store(&cl->nodes[cl->self].boot, boot ? boot : 1);
		rp_set_joined(cl->rp, false);
		cm_error_clear(&err);
		if (lease_new(cl, &err))
			cm_warn("cluster", "cannot register again: %s", err.reason);
		else
			cm_warn("cluster",
			        "lease expired: node [%s] registered again as a new process",
			        cl->nodes[cl->self].name);
		every = (uint64_t)e->ttl_s * SEC / 3;
	}
	return NULL;
}

/* ---- the campaign ---- */

static void
become_master(nd_cluster *cl)
{
	cl_etcd *e = cl->etcd;
	cm_error err;
	cm_error_clear(&err);
	/* the newest state first: this node may have missed the last ones */
	if (state_read(cl, false, &err)) {
		cm_warn("cluster", "elected, but cannot read the state: %s", err.reason);
		step_down(cl, "cannot read the cluster state");
		return;
	}
	atomic_store(&cl->master, cl->self);
	cm_info("cluster", "node [%s] is the master, term %" PRId64, cl->nodes[cl->self].name,
	        atomic_load(&e->term));
	if (!e->have_state) {
		/* a new cluster, or one started from static-cluster data: the
		 * local state seeds etcd */
		pthread_mutex_lock(&cl->meta_lock);
		rp_state *next = rp_state_dup(cl->state);
		cm_err rc = cl_state_commit_locked(cl, next, &err);
		pthread_mutex_unlock(&cl->meta_lock);
		if (rc)
			cm_warn("cluster", "cannot write the first state to etcd: %s", err.reason);
		else
			e->have_state = true;
	}
	cl_state_publish(cl);
}

static void *
campaign_main(void *arg)
{
	nd_cluster *cl = arg;
	cl_etcd *e = cl->etcd;
	const char *name = cl->nodes[cl->self].name;
	while (!atomic_load(&e->stop)) {
		pthread_mutex_lock(&e->mu);
		int64_t lease = e->lease;
		bool valid = cm_now_ns() < e->lease_until_ns;
		pthread_mutex_unlock(&e->mu);
		if (!lease || !valid) {
			sleep_stop(e, 200000000ull);
			continue;
		}
		ec_leader_key lk = {0};
		cm_error err;
		cm_error_clear(&err);
		cm_err rc = ec_campaign(e->ec, e->election, lease, name, strlen(name), 2000,
		                        &e->stop, &lk, &err);
		if (rc == CM_ETIMEDOUT)
			continue;
		if (rc) {
			if (rc != CM_ECLOSED)
				cm_debug("cluster", "campaign: %s", err.reason);
			sleep_stop(e, 500000000ull);
			continue;
		}
		pthread_mutex_lock(&e->mu);
		bool current = lease == e->lease && cm_now_ns() < e->lease_until_ns;
		if (current) {
			ec_leader_key_free(&e->leader);
			e->leader = lk;
			atomic_store(&e->term, lk.rev);
		}
		pthread_mutex_unlock(&e->mu);
		if (!current) {
			ec_leader_key_free(&lk);
			continue;
		}
		become_master(cl);
		while (!atomic_load(&e->stop) && cl_etcd_leading(cl))
			sleep_stop(e, 100000000ull);
		/* whoever noticed first (the membership read may already name
		 * the new master), the leader key this node held goes now */
		step_down(cl, atomic_load(&e->stop) ? "stopping" : "its lease may have expired");
	}
	return NULL;
}

/* ---- the watch ---- */

static void
wake_monitor(nd_cluster *cl)
{
	pthread_mutex_lock(&cl->stop_mu);
	pthread_cond_broadcast(&cl->stop_cv);
	pthread_mutex_unlock(&cl->stop_mu);
}

#define CL_QUEUE_MAX 65536 /* changes queued for the monitor before it reads everything */

/* Queues the changes to state keys (whole revisions: a message holds
 * complete ones) for the monitor, notes a change of membership, and
 * wakes the monitor. */
static void
watch_fn(void *arg, const ec_watch_msg *m)
{
	nd_cluster *cl = arg;
	cl_etcd *e = cl->etcd;
	char spfx[300];
	keyf(e, spfx, sizeof(spfx), "state/", NULL);
	size_t sl = strlen(spfx);
	if (m->kind == EC_WATCH_COMPACTED)
		atomic_store(&e->rewatch, true);
	pthread_mutex_lock(&e->evmu);
	for (size_t i = 0; m->kind == EC_WATCH_EVENTS && i < m->n; i++) {
		const ec_event *ev = &m->events[i];
		if (strncmp(ev->kv.key, spfx, sl) != 0) {
			atomic_store(&e->members_dirty, true);
			continue;
		}
		if (e->q_lost)
			continue;
		if (e->nq == CL_QUEUE_MAX) {
			changes_free(e->q, e->nq);
			e->q = NULL;
			e->nq = e->qcap = 0;
			e->q_lost = true;
			continue;
		}
		if (e->nq == e->qcap) {
			e->qcap = e->qcap ? 2 * e->qcap : 64;
			e->q = cm_realloc(MEM, e->q, e->qcap * sizeof(cl_change));
		}
		cl_change *c = &e->q[e->nq++];
		c->deleted = ev->deleted;
		c->key = cm_strdup(MEM, ev->kv.key);
		c->len = ev->deleted ? 0 : ev->kv.value_len;
		c->val = cm_malloc(MEM, c->len + 1);
		if (c->len)
			memcpy(c->val, ev->kv.value, c->len);
		c->rev = ev->kv.mod_revision;
	}
	pthread_mutex_unlock(&e->evmu);
	atomic_store(&e->dirty, true);
	wake_monitor(cl);
}

static void
watch_start(nd_cluster *cl, int64_t from)
{
	cl_etcd *e = cl->etcd;
	cm_error err;
	cm_error_clear(&err);
	if (ec_watch_start(e->ec, e->prefix, from, watch_fn, cl, &e->watch, &err)) {
		cm_warn("cluster", "cannot watch %s: %s", e->prefix, err.reason);
		e->watch = NULL;
	}
}

cm_err
cl_etcd_start(nd_cluster *cl, cm_error *err)
{
	cl_etcd *e = cl->etcd;
	cm_err rc;
	revoke_predecessor(cl);
	if ((rc = lease_new(cl, err)))
		return cm_error_set(err, rc, "cannot register with etcd: %s", err->reason);
	if ((rc = members_read(cl, err)) || (rc = state_read(cl, true, err)))
		return cm_error_set(err, rc, "cannot read the cluster from etcd: %s", err->reason);
	/* from the revision read on: no change between the read and the watch
	 * is missed */
	watch_start(cl, e->mirror_rev + 1);
	pthread_create(&e->lease_thread, NULL, lease_main, cl);
	e->lease_started = true;
	if (cl->nodes[cl->self].master) {
		pthread_create(&e->campaign_thread, NULL, campaign_main, cl);
		e->campaign_started = true;
	}
	return CM_OK;
}

/* The master drops etcd's history older than every live node has applied,
 * less a margin (compact_keep revisions), every compact_every_ns: the
 * database stays bounded under any churn. A node whose watch falls behind
 * the compaction reads the state again (EC_WATCH_COMPACTED). */
static void
compact_history(nd_cluster *cl)
{
	cl_etcd *e = cl->etcd;
	uint64_t now = cm_now_ns();
	if (!e->compact_every_ns || now - e->compacted_at_ns < e->compact_every_ns ||
	    !cl_is_master(cl))
		return;
	e->compacted_at_ns = now;
	pthread_mutex_lock(&cl->meta_lock);
	uint64_t oldest = cl->state->version;
	pthread_mutex_unlock(&cl->meta_lock);
	for (int i = 0; i < cl->nn; i++) {
		uint64_t a = atomic_load(&cl->nodes[i].applied);
		if (i != cl->self && atomic_load(&cl->nodes[i].registered) && cl_alive(cl, i) &&
		    a < oldest)
			oldest = a;
	}
	int64_t rev = (int64_t)oldest - e->compact_keep;
	if (rev <= e->compacted_rev || rev <= 0)
		return;
	cm_error err;
	cm_error_clear(&err);
	if (ec_compact(e->ec, rev, &err)) {
		cm_warn("cluster", "compacting etcd's history to revision %" PRId64 ": %s", rev,
		        err.reason);
		return;
	}
	e->compacted_rev = rev;
	cm_info("cluster", "etcd history compacted to revision %" PRId64, rev);
}

void
cl_etcd_tick(nd_cluster *cl)
{
	cl_etcd *e = cl->etcd;
	cm_error err;
	if (!e)
		return;
	if (atomic_exchange(&e->rewatch, false) || !e->watch) {
		/* compacted past the watch (or never started): read everything,
		 * then watch from the revision read */
		if (e->watch)
			cm_info("cluster", "etcd history was compacted past this node's watch: "
			                   "reading the state again");
		ec_watch_stop(e->watch);
		e->watch = NULL;
		cm_error_clear(&err);
		if (state_read(cl, false, &err)) {
			cm_debug("cluster", "etcd read failed: %s", err.reason);
			atomic_store(&e->rewatch, true);
			return;
		}
		watch_start(cl, e->mirror_rev + 1);
	}
	compact_history(cl);
	/* membership every 2 s anyway (cheap: one key a node); the whole state
	 * every 60 s, in case a change was ever missed */
	unsigned round = e->round++;
	bool members = atomic_exchange(&e->members_dirty, false) || round % 4 == 0;
	bool dirty = atomic_exchange(&e->dirty, false);
	cm_error_clear(&err);
	if (members && members_read(cl, &err)) {
		atomic_store(&e->members_dirty, true);
		cm_debug("cluster", "etcd read failed: %s", err.reason);
	}
	cm_error_clear(&err);
	bool full = cm_now_ns() - e->full_read_ns >= 60 * SEC;
	if (full ? state_read(cl, false, &err) : dirty ? state_catch_up(cl, &err) : CM_OK) {
		atomic_store(&e->dirty, true);
		cm_debug("cluster", "etcd read failed: %s", err.reason);
	}
}

/* ---- members whose process is gone ---- */

/* Whether nothing listens at url ("tcp://host:port", "tls+tcp://..."): a
 * TCP connect answered by a reset. A connect that succeeds, times out
 * (200 ms: a partition drops packets) or cannot be tried is no such
 * answer. */
static bool
port_refused(const char *url)
{
	const char *hp = strstr(url, "://");
	char host[ND_CL_ADDR], *colon;
	hp = hp ? hp + 3 : url;
	snprintf(host, sizeof(host), "%s", hp);
	if (!(colon = strrchr(host, ':')))
		return false;
	*colon = 0;
	const char *port = colon + 1;
	if (host[0] == '[') { /* [v6]:port */
		memmove(host, host + 1, strlen(host));
		char *rb = strchr(host, ']');
		if (rb)
			*rb = 0;
	}
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
		return false;
	bool refused = false;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
		if (rc < 0 && errno == ECONNREFUSED) {
			refused = true;
		} else if (rc < 0 && errno == EINPROGRESS) {
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			int soerr = 0;
			socklen_t sl = sizeof(soerr);
			if (poll(&pf, 1, 200) == 1 &&
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0)
				refused = soerr == ECONNREFUSED;
		}
		close(fd);
	}
	freeaddrinfo(ai);
	return refused;
}

/* Whether this node reaches (pinged now) at least half of the members
 * other than itself and node gone. A node cut off from every other by a
 * firewall that answers with resets sees every port refuse: it must not
 * revoke the leases of the members that are fine (found in namespaces,
 * R4 on etcd: the cut node revoked the two others', and the shards whose
 * primary it held had no in-sync copy left). */
static bool
others_reached(nd_cluster *cl, int gone)
{
	uint32_t self = (uint32_t)cl->self, type;
	int members = 0, reached = 0;
	for (int i = 0; i < cl->nn; i++) {
		if (i == cl->self || i == gone || !atomic_load(&cl->nodes[i].registered))
			continue;
		members++;
		reached += nd_peer_call_sync(cl->nodes[i].peer, PR_PING, &self, sizeof(self),
		                             cm_now_ns() + 300000000ull, &type, NULL) == CM_OK;
	}
	return 2 * reached >= members;
}

/* Node i's process is gone when its own transport address (as it
 * registered it, not a proxy this node may dial it through) refuses
 * connections, again after its registration was read, and this node
 * still reaches at least half of the other members: its lease is
 * revoked, with its registration and any election key. */
static void
reap_node(nd_cluster *cl, int i)
{
	cl_etcd *e = cl->etcd;
	nd_cl_node *nd = &cl->nodes[i];
	char key[1024], url[sizeof(nd->transport)];
	ec_kv kv;
	cm_error err;
	pthread_mutex_lock(&cl->members_mu);
	snprintf(url, sizeof(url), "%s", nd->transport);
	pthread_mutex_unlock(&cl->members_mu);
	if (!url[0] || !port_refused(url))
		return;
	usleep(200000); /* a closing listener, a port being rebound: ask twice */
	if (!port_refused(url) || !others_reached(cl, i))
		return;
	cm_error_clear(&err);
	keyf(e, key, sizeof(key), "nodes/", nd->name);
	if (ec_get(e->ec, key, &kv, NULL, &err) != CM_OK)
		return;
	pthread_mutex_lock(&e->mu);
	bool mine = kv.lease == e->lease;
	pthread_mutex_unlock(&e->mu);
	/* a process registered since listens before it registers: its port
	 * answers, and it is left alone */
	if (kv.lease && !mine && port_refused(url)) {
		cm_info("cluster",
		        "node [%s] is gone (nothing listens at %s): its lease %" PRIx64
		        " is revoked so the cluster need not wait out its TTL",
		        nd->name, url, (uint64_t)kv.lease);
		/* another node may have revoked it first: "not found" is fine */
		if (ec_lease_revoke(e->ec, kv.lease, &err) && !strstr(err.reason, "not found"))
			cm_warn("cluster", "revoking the lease of node [%s]: %s", nd->name,
			        err.reason);
		atomic_store(&e->dirty, true);
	}
	ec_kv_free(&kv);
}

void
cl_etcd_reap(nd_cluster *cl)
{
	if (!cl->etcd || !atomic_load(&cl->nodes[cl->self].registered))
		return;
	for (int i = 0; i < cl->nn; i++)
		if (i != cl->self && atomic_load(&cl->nodes[i].registered) && !cl_alive(cl, i))
			reap_node(cl, i);
}

void
cl_etcd_stop(nd_cluster *cl)
{
	cl_etcd *e = cl->etcd;
	if (!e)
		return;
	atomic_store(&e->stop, true);
	if (e->campaign_started)
		pthread_join(e->campaign_thread, NULL);
	if (e->lease_started)
		pthread_join(e->lease_thread, NULL);
	e->campaign_started = e->lease_started = false;
	ec_watch_stop(e->watch);
	e->watch = NULL;
	cm_error err;
	cm_error_clear(&err);
	pthread_mutex_lock(&e->mu);
	if (e->leader.rev)
		ec_resign(e->ec, &e->leader, &err);
	ec_leader_key_free(&e->leader);
	memset(&e->leader, 0, sizeof(e->leader));
	int64_t lease = e->lease;
	e->lease = 0;
	pthread_mutex_unlock(&e->mu);
	/* the others see this node leave at once, not after its lease */
	if (lease)
		ec_lease_revoke(e->ec, lease, &err);
}

void
cl_etcd_free(nd_cluster *cl)
{
	cl_etcd *e = cl->etcd;
	if (!e)
		return;
	ec_close(e->ec);
	pthread_mutex_destroy(&e->mu);
	pthread_mutex_destroy(&e->readmu);
	pthread_mutex_destroy(&e->evmu);
	rp_state_free(e->mirror);
	changes_free(e->q, e->nq);
	cm_free(MEM, e);
	cl->etcd = NULL;
}

void
nd_cluster_state_stats(nd_cluster *cl, cJSON *into)
{
	if (!cl || !into)
		return;
	cJSON *d = cJSON_AddObjectToObject(into, "discovery");
	cJSON *p = cJSON_AddObjectToObject(d, "published_cluster_states");
	cJSON_AddNumberToObject(p, "full_states", (double)atomic_load(&cl->pub_full));
	cJSON_AddNumberToObject(p, "incompatible_diffs", (double)atomic_load(&cl->pub_refused));
	cJSON_AddNumberToObject(p, "compatible_diffs", (double)atomic_load(&cl->pub_diffs));
	cl_etcd *e = cl->etcd;
	if (!e)
		return;
	cJSON *x = cJSON_AddObjectToObject(d, "etcd");
	cJSON_AddNumberToObject(x, "full_reads", (double)atomic_load(&e->full_reads));
	cJSON_AddNumberToObject(x, "changes_applied", (double)atomic_load(&e->incremental_reads));
	cJSON_AddNumberToObject(x, "state_bytes_read", (double)atomic_load(&e->bytes_read));
	cJSON_AddNumberToObject(x, "commits", (double)atomic_load(&e->commits));
	cJSON_AddNumberToObject(x, "keys_written", (double)atomic_load(&e->keys_written));
}

/* ---- placement inputs ---- */

