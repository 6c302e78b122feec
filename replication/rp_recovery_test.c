/* Recovery between two rp instances wired through a fake host over shards
 * in temp dirs: ops-based, file-based (a copy whose history diverged),
 * cancel mid-file, the primary dying mid-recovery, the master's answer to
 * a finalize lost, a write failing on a copy the master counts in while
 * the primary cannot have it taken out, a prepared hand-over; and the
 * write path
 * (a replica that fails leaves the in-sync set before the write is
 * acknowledged; a deposed primary acknowledges nothing). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/cm_alloc.h"
#include "common/cm_sys.h"
#include "proto/pr.h"
#include "replication/rp_private.h"

#define NODES 2
static const char *names[NODES] = {"node-1", "node-2"};
static const int data[NODES] = {0, 1};

typedef struct fake {
	int id;
	rp *r;
	st_shard *s;
	char dir[256];
} fake;

static fake nodes[NODES];
static pthread_mutex_t master_mu = PTHREAD_MUTEX_INITIALIZER;
static rp_state *master; /* the fake master's state */
static _Atomic bool down[NODES];
static _Atomic int fail_file_chunks; /* PR_REC_FILE calls to fail */
static _Atomic int file_chunks, fail_replica_bulks;
static st_mapping *mapping;

/* test_promoted_term: the node being promoted, the new term, and whether
 * its routes already named it primary in that term when its copy was
 * taken to be given the term. */
static _Atomic int promoting = -1;
static _Atomic uint64_t promoted_term;
static _Atomic bool routes_before_term;
static _Atomic int takes[NODES]; /* f_take calls per node (test_route_table) */

static st_shard *
f_take(void *h, const char *index, const char *uuid, int shard, void **ref)
{
	fake *f = h;
	*ref = NULL;
	atomic_fetch_add(&takes[f->id], 1);
	if (atomic_load(&promoting) == f->id) {
		rp_route ro;
		if (rp_route_get(f->r, "ix", 0, &ro) && ro.primary == f->id &&
		    ro.term == atomic_load(&promoted_term))
			atomic_store(&routes_before_term, true);
	}
	if (strcmp(index, "ix") || (uuid[0] && strcmp(uuid, "u1")) || shard != 0)
		return NULL;
	*ref = f;
	return f->s;
}

static void
f_release(void *h, void *ref)
{
	(void)h, (void)ref;
}

static cm_err
f_apply(void *h, void *ref, int shard, const st_op *ops, size_t n, st_op_result *res, bool replica)
{
	fake *f = h;
	(void)ref, (void)shard, (void)replica;
	return st_shard_apply(f->s, ops, n, res);
}

static void
f_call(void *h, int node, uint32_t type, const void *p, size_t len, uint64_t deadline_ns,
       rp_reply_fn fn, void *arg)
{
	fake *f = h;
	(void)deadline_ns;
	if (node < 0 || node >= NODES || atomic_load(&down[node]) || atomic_load(&down[f->id])) {
		fn(arg, CM_EUNAVAIL, 0, NULL, 0);
		return;
	}
	fake *to = &nodes[node];
	cm_buf reply;
	uint32_t rtype = 0;
	cm_buf_init(&reply, CM_MEM_COMMON);
	if (type == PR_REC_FILE) {
		atomic_fetch_add(&file_chunks, 1);
		if (atomic_load(&fail_file_chunks) > 0) {
			atomic_fetch_sub(&fail_file_chunks, 1);
			cm_buf_free(&reply);
			fn(arg, CM_ETIMEDOUT, 0, NULL, 0);
			return;
		}
	}
	if (type == PR_BULK) {
		pr_bulk_req rq;
		cm_error err;
		cm_error_clear(&err);
		if (atomic_load(&fail_replica_bulks) > 0) {
			atomic_fetch_sub(&fail_replica_bulks, 1);
			cm_buf_free(&reply);
			fn(arg, CM_ETIMEDOUT, 0, NULL, 0);
			return;
		}
		REQUIRE(pr_bulk_req_decode(p, len, &rq, &err) == CM_OK);
		rp_serve_replica(to->r, to, "u1", &rq, &reply);
		pr_bulk_req_free(&rq);
		rtype = PR_BULK_REPLY;
	} else {
		REQUIRE(rp_handles(type));
		rp_serve(to->r, type, p, len, &reply, &rtype);
	}
	fn(arg, CM_OK, rtype, reply.data, reply.len);
	cm_buf_free(&reply);
}

static bool
f_alive(void *h, int node)
{
	(void)h;
	return !atomic_load(&down[node]);
}

static void
f_mark_down(void *h, int node)
{
	(void)h, (void)node;
}

static void
publish(void)
{
	for (int i = 0; i < NODES; i++)
		rp_set_state(nodes[i].r, master);
}

static _Atomic bool lose_started; /* the master applies a STARTED, its answer is lost */
/* test_finalize_failed_write: when the master is asked STARTED, a write
 * first fails on the copy (the primary's forwards aborted as it stops);
 * the primary learns nothing and cannot ask the master FAILED after. */
static _Atomic bool fail_write_at_started, refuse_failed;
static int write_docs(int from, int to);

static cm_err
f_master_event(void *h, const rp_event *ev, cm_error *err)
{
	fake *f = h;
	bool changed, hide_started = false;
	if (atomic_load(&down[f->id]))
		return cm_error_set(err, CM_EUNAVAIL, "master unreachable");
	if (ev->kind == RP_EV_FAILED && atomic_load(&refuse_failed))
		return cm_error_set(err, CM_EUNAVAIL, "master unreachable (stopping)");
	if (ev->kind == RP_EV_STARTED && atomic_exchange(&fail_write_at_started, false)) {
		atomic_store(&fail_replica_bulks, 1);
		CHECK(write_docs(141, 142) == 0); /* not acknowledged: the copy is pending */
		atomic_store(&fail_replica_bulks, 0);
		hide_started = true; /* applied, answered, but the primary's routes stay */
	}
	pthread_mutex_lock(&master_mu);
	cm_err rc = rp_state_apply(master, ev, &changed, err);
	bool lost = !rc && ev->kind == RP_EV_STARTED && atomic_exchange(&lose_started, false);
	if (!rc && changed) {
		master->version++;
		if (lost || hide_started)
			rp_set_state(nodes[1].r, master); /* the primary does not learn it */
		else
			publish();
	}
	pthread_mutex_unlock(&master_mu);
	if (lost)
		return cm_error_set(err, CM_EUNAVAIL, "the master's answer was lost");
	return rc;
}

static void
f_refresh(void *h)
{
	(void)h;
}

static const rp_host_ops ops = {f_take,  f_release,   f_apply,        f_call,
                                f_alive, f_mark_down, f_master_event, f_refresh};

static st_shard *
open_shard(const char *dir)
{
	st_shard_opts o;
	st_shard *s = NULL;
	cm_error err;
	cm_error_clear(&err);
	st_shard_opts_default(&o);
	o.replicated = true;
	o.background_merges = false;
	REQUIRE(st_shard_open(dir, mapping, &o, &s, &err) == CM_OK);
	return s;
}

static void
setup(void)
{
	cJSON *j = cJSON_Parse("{\"properties\":{\"n\":{\"type\":\"long\"}}}");
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(st_mapping_from_json(j, &mapping, &err) == CM_OK);
	cJSON_Delete(j);
	master = rp_state_new();
	rp_state_add_index(master, "ix", "u1", 1, 1, data, NODES);
	master->version = 1;
	for (int i = 0; i < NODES; i++) {
		fake *f = &nodes[i];
		f->id = i;
		snprintf(f->dir, sizeof(f->dir), "/tmp/rp_recovery_test.%d.%d", (int)getpid(), i);
		cm_rm_rf(f->dir);
		REQUIRE(cm_mkdir_p(f->dir) == CM_OK);
		char sd[300];
		snprintf(sd, sizeof(sd), "%s/shard", f->dir);
		f->s = open_shard(sd);
		rp_config cfg = {.nn = NODES, .self = i, .names = names};
		f->r = rp_create(&ops, f, &cfg);
		rp_start(f->r, f->dir);
		REQUIRE(rp_setting(f->r, "cluster.replica_timeout", "1s", &err) == CM_OK);
		rp_set_joined(f->r, true);
	}
	publish();
}

static void
teardown(void)
{
	for (int i = 0; i < NODES; i++) {
		rp_destroy(nodes[i].r);
		st_shard_close(nodes[i].s);
		cm_rm_rf(nodes[i].dir);
	}
	rp_state_free(master);
	st_mapping_unref(mapping);
}

/* Writes docs [from, to) through the primary (node-1). Returns how many
 * were acknowledged. */
/* Doc k's index op; id and src are its buffers (32 and 64 bytes). */
static st_op
doc_op(int k, char *id, char *src)
{
	snprintf(id, 32, "d%d", k);
	snprintf(src, 64, "{\"n\":%d}", k);
	return (st_op){.type = ST_OP_INDEX,
	               .id = id,
	               .id_len = strlen(id),
	               .source = src,
	               .source_len = strlen(src),
	               .seq_no = ST_NO_SEQ,
	               .if_seq_no = ST_NO_SEQ};
}

static int
write_docs(int from, int to)
{
	int acked = 0;
	for (int k = from; k < to; k++) {
		char id[32], src[64];
		st_op op = doc_op(k, id, src);
		st_op_result res;
		memset(&res, 0, sizeof(res));
		CHECK(rp_primary_apply(nodes[0].r, &nodes[0], "ix", "u1", 0, &op, 1, &res, 0) ==
		      CM_OK);
		acked += res.err == CM_OK;
	}
	return acked;
}

static uint64_t
in_sync(void)
{
	rp_route ro;
	pthread_mutex_lock(&master_mu);
	ro = rp_state_index(master, "ix")->routes[0];
	pthread_mutex_unlock(&master_mu);
	return ro.in_sync;
}

static void
drop_replica(void)
{
	pthread_mutex_lock(&master_mu);
	rp_state_index(master, "ix")->routes[0].in_sync = 1;
	master->version++;
	publish();
	pthread_mutex_unlock(&master_mu);
}

/* Runs the copy's ticks until it is in sync or `ms` pass. */
static bool
recover(int ms)
{
	for (int t = 0; t < ms / 10; t++) {
		rp_tick(nodes[1].r);
		if (in_sync() == 3)
			break;
		usleep(10000);
	}
	rp_quiesce(nodes[1].r);
	return in_sync() == 3;
}

/* Every doc of the primary is on the copy with the same seq_no/version. */
static int
same_docs(int n)
{
	int diff = 0;
	for (int k = 0; k < n; k++) {
		char id[32];
		st_doc_meta a, b;
		cm_buf sa, sb;
		cm_buf_init(&sa, CM_MEM_COMMON);
		cm_buf_init(&sb, CM_MEM_COMMON);
		snprintf(id, sizeof(id), "d%d", k);
		cm_err ra = st_shard_get(nodes[0].s, id, strlen(id), &a, &sa);
		cm_err rb = st_shard_get(nodes[1].s, id, strlen(id), &b, &sb);
		if (ra != rb || (!ra && (a.seq_no != b.seq_no || a.version != b.version ||
		                         sa.len != sb.len || memcmp(sa.data, sb.data, sa.len))))
			diff++;
		cm_buf_free(&sa);
		cm_buf_free(&sb);
	}
	return diff;
}

static const char *
last_recovery(char *buf, size_t cap)
{
	cm_buf b;
	cm_buf_init(&b, CM_MEM_COMMON);
	rp_cat_recovery(nodes[1].r, &b);
	cm_buf_put_u8(&b, 0);
	const char *s = (const char *)b.data, *last = s, *nl;
	while ((nl = strchr(s, '\n')) && nl[1]) {
		s = nl + 1;
		last = s;
	}
	snprintf(buf, cap, "%s", last);
	cm_buf_free(&b);
	return buf;
}

static void
test_write_path(void)
{
	CHECK(write_docs(0, 50) == 50);
	CHECK(same_docs(50) == 0);
	/* the replica fails: it leaves the in-sync set, then the write is acked */
	atomic_store(&fail_replica_bulks, 1);
	CHECK(write_docs(50, 51) == 1);
	CHECK(in_sync() == 1);
	CHECK(write_docs(51, 60) == 9); /* not forwarded: not in sync, not tracking */
	/* the master cannot be asked: nothing is acknowledged */
	pthread_mutex_lock(&master_mu);
	rp_state_index(master, "ix")->routes[0].in_sync = 3;
	master->version++;
	publish();
	pthread_mutex_unlock(&master_mu);
	atomic_store(&fail_replica_bulks, 1);
	atomic_store(&down[0], true); /* node-1 cannot reach the master or node-2 */
	CHECK(write_docs(60, 61) == 0);
	CHECK(in_sync() == 3); /* not acknowledged, and not removed either */
	atomic_store(&down[0], false);
	atomic_store(&fail_replica_bulks, 0);
	drop_replica();
}

static void
test_ops_based(void)
{
	char row[512];
	CHECK(recover(10000));
	CHECK(same_docs(61) == 0);
	CHECKF(strstr(last_recovery(row, sizeof(row)), "ops_based done"), "%s", row);
	/* in sync: writes reach it again */
	CHECK(write_docs(61, 80) == 19);
	CHECK(same_docs(80) == 0);
	rp_shard *rs = rp_shard_get(nodes[0].r, "ix", "u1", 0);
	CHECK(rs->tracking == 0 && rs->pending == 0);
}

/* The copy holds an op the primary never had: its history disagrees, so
 * it is replaced by the primary's files (the rollback of a deposed
 * primary's unacknowledged ops). */
static void
test_file_based(void)
{
	char row[512];
	drop_replica();
	const char *id = "ghost", *src = "{\"n\":-1}";
	st_op ghost = {.type = ST_OP_INDEX,
	               .id = id,
	               .id_len = strlen(id),
	               .source = src,
	               .source_len = strlen(src),
	               .seq_no = 80,
	               .primary_term = 7,
	               .version = 1,
	               .if_seq_no = ST_NO_SEQ};
	st_op_result res;
	CHECK(st_shard_apply(nodes[1].s, &ghost, 1, &res) == CM_OK && res.err == CM_OK);
	CHECK(write_docs(80, 100) == 20);
	/* the first file chunk fails: the recovery is cancelled, the primary
	 * stops tracking the copy, and the next attempt starts over */
	atomic_store(&fail_file_chunks, 1);
	atomic_store(&file_chunks, 0);
	for (int t = 0; t < 300 && atomic_load(&file_chunks) == 0; t++) {
		rp_tick(nodes[1].r);
		usleep(10000);
	}
	rp_quiesce(nodes[1].r);
	CHECKF(strstr(last_recovery(row, sizeof(row)), "file_based failed"), "%s", row);
	rp_shard *rs = rp_shard_get(nodes[0].r, "ix", "u1", 0);
	CHECK(rs->tracking == 0 && rs->pending == 0);
	CHECK(in_sync() == 1);
	pthread_mutex_lock(&nodes[1].r->mu);
	nodes[1].r->next_rec_ns = 0; /* skip the 2 s back-off */
	pthread_mutex_unlock(&nodes[1].r->mu);
	CHECK(recover(15000));
	CHECKF(strstr(last_recovery(row, sizeof(row)), "file_based done"), "%s", row);
	CHECK(same_docs(100) == 0);
	st_doc_meta m;
	cm_buf sb;
	cm_buf_init(&sb, CM_MEM_COMMON);
	CHECK(st_shard_get(nodes[1].s, "ghost", 5, &m, &sb) == CM_ENOTFOUND);
	cm_buf_free(&sb);
}

/* The primary goes away mid-recovery: the recovery fails, the copy stays
 * out of the in-sync set, nothing hangs; once it is back, the copy
 * recovers. */
static void
test_primary_dies(void)
{
	char row[512];
	drop_replica();
	CHECK(write_docs(100, 130) == 30);
	atomic_store(&down[0], true);
	pthread_mutex_lock(&nodes[1].r->mu);
	nodes[1].r->next_rec_ns = 0;
	pthread_mutex_unlock(&nodes[1].r->mu);
	/* the copy does not even start while the primary is unreachable */
	CHECK(!recover(300));
	/* now it dies during the recovery: the first file chunk times out */
	atomic_store(&down[0], false);
	atomic_store(&fail_file_chunks, 0);
	st_op ghost = {.type = ST_OP_INDEX,
	               .id = "g2",
	               .id_len = 2,
	               .source = "{}",
	               .source_len = 2,
	               .seq_no = 130,
	               .primary_term = 9,
	               .version = 1,
	               .if_seq_no = ST_NO_SEQ};
	st_op_result res;
	CHECK(st_shard_apply(nodes[1].s, &ghost, 1, &res) == CM_OK);
	CHECK(write_docs(130, 131) == 1);
	atomic_store(&fail_file_chunks, 1000000);
	atomic_store(&file_chunks, 0);
	for (int t = 0; t < 300 && atomic_load(&file_chunks) == 0; t++) {
		rp_tick(nodes[1].r);
		usleep(10000);
	}
	atomic_store(&down[0], true);
	rp_quiesce(nodes[1].r);
	CHECKF(strstr(last_recovery(row, sizeof(row)), "failed"), "%s", row);
	CHECK(in_sync() == 1);
	atomic_store(&down[0], false);
	atomic_store(&fail_file_chunks, 0);
	pthread_mutex_lock(&nodes[1].r->mu);
	nodes[1].r->next_rec_ns = 0;
	pthread_mutex_unlock(&nodes[1].r->mu);
	CHECK(recover(15000));
	CHECK(same_docs(131) == 0);
}

/* The master counts the copy in, but its answer to the primary is lost (a
 * primary stopping aborts its calls): the primary must still wait for the
 * copy as for an in-sync one, so nothing is acknowledged that the copy
 * lacks while the master holds it in sync (R8 on etcd lost writes so). */
static void
test_started_answer_lost(void)
{
	drop_replica();
	CHECK(write_docs(131, 140) == 9);
	atomic_store(&lose_started, true);
	nodes[1].r->next_rec_ns = 0;
	CHECK(recover(10000)); /* the master has it in sync ... */
	CHECK(!atomic_load(&lose_started));
	rp_route ro;
	CHECK(rp_route_get(nodes[0].r, "ix", 0, &ro) && ro.in_sync == 1); /* ... the primary not */
	/* the copy goes: a write is acknowledged only once the master took it out */
	atomic_store(&fail_replica_bulks, 1000);
	int acked = write_docs(140, 141);
	atomic_store(&fail_replica_bulks, 0);
	CHECKF(acked == 0 || in_sync() == 1,
	       "a write was acknowledged while the master held in sync a copy that lacks it "
	       "(acked %d, in sync %llu)",
	       acked, (unsigned long long)in_sync());
	CHECK(acked == 1 && in_sync() == 1);
	/* it recovers again and has everything */
	nodes[1].r->next_rec_ns = 0;
	CHECK(recover(15000));
	CHECK(same_docs(141) == 0);
}

/* Runs `node`'s ticks until both copies are in sync or `ms` pass. */
static bool
recover_on(int node, int ms)
{
	for (int t = 0; t < ms / 10; t++) {
		rp_tick(nodes[node].r);
		if (in_sync() == 3)
			break;
		usleep(10000);
	}
	rp_quiesce(nodes[node].r);
	return in_sync() == 3;
}

static void
set_primary(int primary, uint64_t in_sync_set)
{
	pthread_mutex_lock(&master_mu);
	rp_route *mr = &rp_state_index(master, "ix")->routes[0];
	mr->primary = primary;
	mr->term++;
	mr->in_sync = in_sync_set;
	master->version++;
	publish();
	pthread_mutex_unlock(&master_mu);
}

/* A write fails on the copy while it finalizes; the master counts the
 * copy in (STARTED answered) but the primary neither learns the new
 * routes nor can ask the master to take the copy out again (a primary
 * being stopped: its calls are aborted). The master holds the copy in
 * sync, so the primary must go on counting it: its global checkpoint
 * must not pass the op the copy lacks. Else, once the copy is promoted
 * and numbers other ops of the new term there, the old primary's
 * recovery compares histories only above that checkpoint, agrees, and
 * keeps its op (R8 on etcd in namespaces: copies differed). */
static void
test_finalize_failed_write(void)
{
	drop_replica();
	CHECK(write_docs(142, 145) == 3);
	atomic_store(&fail_write_at_started, true);
	atomic_store(&refuse_failed, true);
	nodes[1].r->next_rec_ns = 0;
	CHECK(recover(10000)); /* the master has it in sync ... */
	CHECK(!atomic_load(&fail_write_at_started));
	rp_route ro;
	CHECK(rp_route_get(nodes[0].r, "ix", 0, &ro) && ro.in_sync == 1); /* ... the primary not */
	st_shard_stats p, c;
	st_shard_stats_get(nodes[0].s, &p);
	st_shard_stats_get(nodes[1].s, &c);
	CHECK(p.local_checkpoint != ST_NO_SEQ && c.local_checkpoint < p.local_checkpoint);
	for (int i = 0; i < 3; i++)
		rp_tick(nodes[0].r); /* the idle global checkpoint */
	uint64_t g = st_shard_global_checkpoint(nodes[0].s);
	CHECKF(g == ST_NO_SEQ || g <= c.local_checkpoint,
	       "the primary's global checkpoint %llu passed the local checkpoint %llu of a copy "
	       "the master holds in sync",
	       (unsigned long long)g, (unsigned long long)c.local_checkpoint);
	/* a write goes to the copy too, or is not acknowledged */
	char id[32], src[64];
	st_doc_meta m;
	cm_buf sb;
	cm_buf_init(&sb, CM_MEM_COMMON);
	int acked = write_docs(145, 146);
	snprintf(id, sizeof(id), "d145");
	CHECKF(!acked || st_shard_get(nodes[1].s, id, strlen(id), &m, &sb) == CM_OK,
	       "a write was acknowledged while the master held in sync a copy that lacks it");
	cm_buf_free(&sb);
	atomic_store(&refuse_failed, false);
	/* the primary stops; the copy is promoted and numbers its own ops */
	set_primary(1, 2);
	st_op op = doc_op(146, id, src);
	st_op_result res;
	memset(&res, 0, sizeof(res));
	CHECK(rp_primary_apply(nodes[1].r, &nodes[1], "ix", "u1", 0, &op, 1, &res, 0) == CM_OK &&
	      res.err == CM_OK);
	/* the old primary returns and recovers: afterwards the copies agree */
	nodes[0].r->next_rec_ns = 0;
	CHECK(recover_on(0, 15000));
	CHECKF(same_docs(147) == 0, "%d docs differ after the old primary's recovery",
	       same_docs(147));
	set_primary(0, 3); /* node-1 leads again, for the rows after */
}

typedef struct held_write {
	int k;
	st_op_result res;
	_Atomic bool done;
} held_write;

static void *
held_write_main(void *arg)
{
	held_write *w = arg;
	char id[32], src[64];
	st_op op = doc_op(w->k, id, src);
	memset(&w->res, 0, sizeof(w->res));
	rp_primary_apply(nodes[0].r, &nodes[0], "ix", "u1", 0, &op, 1, &w->res, 0);
	atomic_store(&w->done, true);
	return NULL;
}

/* A prepared hand-over: with no write in flight both copies hold every
 * op (both are kept); a write waits while held, and once the routes name
 * the new primary it fails as moved (applied nowhere, so it may go there);
 * a released hold lets writes go on at once. */
static void
test_handoff(void)
{
	cm_error err;
	uint64_t keep = 0;
	CHECK(write_docs(141, 150) == 9);
	pthread_mutex_lock(&master_mu);
	rp_route ro = rp_state_index(master, "ix")->routes[0];
	pthread_mutex_unlock(&master_mu);
	CHECK(ro.primary == 0 && ro.in_sync == 3);
	cm_error_clear(&err);
	CHECK(rp_handoff_prepare(nodes[0].r, "ix", "u1", 0, ro.term + 1, 1000000000ull, &keep,
	                         &err) == CM_ECONFLICT); /* not its term */
	/* prepared, then released: writes go on */
	CHECK(rp_handoff_prepare(nodes[0].r, "ix", "u1", 0, ro.term, 10000000000ull, &keep, &err) ==
	      CM_OK);
	CHECK(keep == 3);
	CHECK(rp_handoff_prepare(nodes[0].r, "ix", "u1", 0, ro.term, 0, &keep, &err) == CM_OK);
	uint64_t t0 = cm_now_ns();
	CHECK(write_docs(150, 151) == 1 && cm_now_ns() - t0 < 1000000000ull);
	/* prepared, then handed over: the held write is refused as moved */
	CHECK(rp_handoff_prepare(nodes[0].r, "ix", "u1", 0, ro.term, 10000000000ull, &keep, &err) ==
	      CM_OK);
	CHECK(keep == 3);
	held_write w = {.k = 151};
	pthread_t th;
	pthread_create(&th, NULL, held_write_main, &w);
	usleep(100000);
	CHECK(!atomic_load(&w.done)); /* held */
	pthread_mutex_lock(&master_mu);
	rp_route *mr = &rp_state_index(master, "ix")->routes[0];
	mr->primary = 1;
	mr->term++;
	mr->in_sync = keep; /* both stay in sync */
	master->version++;
	publish();
	pthread_mutex_unlock(&master_mu);
	pthread_join(th, NULL);
	CHECKF(w.res.err == CM_EMOVED, "held write: %s", w.res.reason);
	CHECK(same_docs(151) == 0); /* the copies are identical: nothing to resync */
	/* back to node-1 leading, for the rows after */
	pthread_mutex_lock(&master_mu);
	mr->primary = 0;
	mr->term++;
	master->version++;
	publish();
	pthread_mutex_unlock(&master_mu);
}

/* A deposed primary (the copy learned a newer term) acknowledges nothing. */
static void
test_deposed(void)
{
	pthread_mutex_lock(&master_mu);
	rp_route *ro = &rp_state_index(master, "ix")->routes[0];
	ro->term = 5;
	ro->primary = 1;
	master->version++;
	rp_set_state(nodes[1].r, master); /* node-1 misses the change */
	pthread_mutex_unlock(&master_mu);
	CHECK(write_docs(200, 201) == 0);
}

/* A copy promoted to primary numbers its ops in the new term from the
 * moment its routes say it leads: the term is given to the copy before
 * the routes are swapped (a write in between numbered its op in the
 * copy's old term, 1 for a copy that never led, so a newer version had a
 * lower term; found by fault scenario P1). */
static void
test_promoted_term(void)
{
	pthread_mutex_lock(&master_mu);
	rp_route *ro = &rp_state_index(master, "ix")->routes[0];
	ro->term += 1;
	ro->primary = 0;
	ro->in_sync = (1ull << 0) | (1ull << 1);
	master->version++;
	atomic_store(&promoted_term, ro->term);
	atomic_store(&promoting, 0);
	rp_set_state(nodes[0].r, master);
	atomic_store(&promoting, -1);
	rp_set_state(nodes[1].r, master);
	uint64_t term = ro->term;
	pthread_mutex_unlock(&master_mu);
	CHECK(!atomic_load(&routes_before_term));
	char id[32], src[64];
	st_op op = doc_op(900, id, src); /* numbered by the copy, as a primary does */
	st_op_result res;
	memset(&res, 0, sizeof(res));
	REQUIRE(st_shard_apply(nodes[0].s, &op, 1, &res) == CM_OK);
	CHECK(res.err == CM_OK && res.primary_term == term);
}

/* The route table of a state of many indices: every one found by name
 * (a hash), an unknown name not; a state that changes nothing of this
 * node's primaries takes none of its shards, one that gives its primary a
 * new term takes that shard. */
static void
test_route_table(void)
{
	pthread_mutex_lock(&master_mu);
	rp_state *st = rp_state_dup(master);
	pthread_mutex_unlock(&master_mu);
	enum { MANY = 700 };
	char name[32];
	for (int i = 0; i < MANY; i++) {
		snprintf(name, sizeof(name), "many-%03d", i);
		rp_state_add_index(st, name, "um", 1 + i % 3, 1, data, NODES);
	}
	st->version += 1;
	rp *r = nodes[0].r;
	rp_set_state(r, st);
	for (int i = 0; i < MANY; i++) {
		snprintf(name, sizeof(name), "many-%03d", i);
		rp_route ro;
		CHECK(rp_route_get(r, name, i % 3, &ro));
		CHECK(ro.primary == rp_state_index(st, name)->routes[i % 3].primary);
		CHECK(!rp_route_get(r, name, 1 + i % 3, &ro) && ro.primary == -1);
	}
	rp_route ro;
	CHECK(!rp_route_get(r, "many-", 0, &ro) && ro.primary == -1);
	CHECK(rp_route_get(r, "ix", 0, &ro));
	/* the same routes again: no shard of node 0 taken */
	int before = atomic_load(&takes[0]);
	st->version += 1;
	rp_set_state(r, st);
	CHECK(atomic_load(&takes[0]) == before);
	/* node 0 leads ix's shard in a new term: that shard is taken */
	rp_route *x = &rp_state_index(st, "ix")->routes[0];
	uint64_t was_term = x->term;
	int was_primary = x->primary;
	x->primary = 0;
	x->term += 7;
	st->version += 1;
	rp_set_state(r, st);
	CHECK(atomic_load(&takes[0]) > before);
	char id[32], src[64];
	st_op op = doc_op(901, id, src); /* numbered by the copy in the term it was given */
	st_op_result res;
	memset(&res, 0, sizeof(res));
	REQUIRE(st_shard_apply(nodes[0].s, &op, 1, &res) == CM_OK);
	CHECK(res.err == CM_OK && res.primary_term == x->term);
	/* back to the test's own state */
	x->primary = was_primary;
	x->term = was_term;
	pthread_mutex_lock(&master_mu);
	rp_set_state(r, master);
	pthread_mutex_unlock(&master_mu);
	rp_state_free(st);
}

int
main(void)
{
	setup();
	test_write_path();
	test_ops_based();
	test_file_based();
	test_primary_dies();
	test_started_answer_lost();
	test_finalize_failed_write();
	test_handoff();
	test_deposed();
	test_promoted_term();
	test_route_table();
	teardown();
	CHECK(cm_mem_used(CM_MEM_REPLICATION) == 0);
	return check_report("rp_recovery_test");
}
