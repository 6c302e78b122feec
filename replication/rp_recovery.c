/* Peer recovery. The copy's side runs on its own thread, one shard at a
 * time per node: it sends its checkpoints and its (seq_no, term) history
 * above the global checkpoint (RecStart); the primary answers ops-based
 * when that history agrees with its log and the log still holds what the
 * copy misses, else file-based with a snapshot of its files (RecFile
 * chunks, throttled). The copy then pulls ops in batches (RecOps) and
 * finalizes (RecShard): the primary sends what is still missing and has
 * the master count the copy in (STARTED). From RecStart on, the primary
 * also forwards every new op to the copy ("tracking"); from the finalize
 * on, a failed forward to it is not acknowledged ("pending"). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../proto/pr.h"
#include "proto/shoal.pb-c.h"
#include "rp_private.h"

#define REC_OPS_BATCH 2000
#define REC_CHUNK (1u << 20)
#define REC_HISTORY_MAX 200000
#define REC_CALL_NS 60000000000ull

#define PACK(kind, m, out)                                                                         \
	do {                                                                                       \
		size_t n_ = shoal__##kind##__get_packed_size(m);                                   \
		cm_buf_reserve(out, n_ + 1);                                                       \
		shoal__##kind##__pack(m, (out)->data + (out)->len);                                \
		(out)->len += n_;                                                                  \
	} while (0)

static void
snap_root(rp *r, char *out, size_t cap)
{
	snprintf(out, cap, "%s/recovery-out", r->data_dir);
}

static void
incoming_dir(rp *r, const char *uuid, int shard, char *out, size_t cap)
{
	snprintf(out, cap, "%s/recovery-in/%s-%d", r->data_dir, uuid, shard);
}

void
rp_rec_reset_dirs(rp *r)
{
	char path[1200];
	/* Snapshots and partial copies of an earlier run are useless now. */
	snap_root(r, path, sizeof(path));
	cm_rm_rf(path);
	snprintf(path, sizeof(path), "%s/recovery-in", r->data_dir);
	cm_rm_rf(path);
}

static int
node_num(rp *r, const char *name)
{
	for (int i = 0; i < rp_nn(r); i++)
		if (strcmp(r->names[i], name) == 0)
			return i;
	return -1;
}

static bool
snap_name_ok(const char *s)
{
	if (!*s || strlen(s) > 200)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
			return false;
	return true;
}

/* ---- the recovery log (_cat/recovery) ---- */

static void
rec_log_new(rp *r, const char *index, int shard, const char *source)
{
	pthread_mutex_lock(&r->mu);
	if (r->nlog == REC_LOG_MAX) {
		memmove(r->log, r->log + 1, (REC_LOG_MAX - 1) * sizeof(rec_rec));
		r->nlog--;
	}
	rec_rec *x = &r->log[r->nlog++];
	memset(x, 0, sizeof(*x));
	snprintf(x->index, sizeof(x->index), "%s", index);
	x->shard = shard;
	snprintf(x->type, sizeof(x->type), "peer");
	snprintf(x->stage, sizeof(x->stage), "init");
	snprintf(x->source, sizeof(x->source), "%s", source);
	snprintf(x->target, sizeof(x->target), "%s", r->names[r->self]);
	x->start_ms = cm_wall_ms();
	pthread_mutex_unlock(&r->mu);
}

/* The recovery thread is the only writer of its (last) record; the
 * mutex keeps readers consistent. */
static void
rec_log_set(rp *r, const char *type, const char *stage, uint64_t files, uint64_t bytes,
            uint64_t ops, bool done, bool failed)
{
	pthread_mutex_lock(&r->mu);
	if (r->nlog) {
		rec_rec *x = &r->log[r->nlog - 1];
		if (type)
			snprintf(x->type, sizeof(x->type), "%s", type);
		if (stage)
			snprintf(x->stage, sizeof(x->stage), "%s", stage);
		x->files += files;
		x->bytes += bytes;
		x->ops += ops;
		if (done) {
			x->stop_ms = cm_wall_ms();
			x->failed = failed;
		}
	}
	pthread_mutex_unlock(&r->mu);
}

/* ---- the primary's side ---- */

typedef struct hist_ctx {
	const uint64_t *seq, *term;
	size_t i, n;
	bool ok;
} hist_ctx;

static int
hist_cmp(void *ctx, const st_op *op, int64_t version)
{
	hist_ctx *h = ctx;
	(void)version;
	if (h->i == h->n)
		return 1; /* past the copy's history */
	uint64_t s = h->seq[h->i], t = h->term[h->i];
	if (s > op->seq_no)
		return 0;
	if (s < op->seq_no) {
		h->ok = false; /* the copy has an op this log lacks */
		return 1;
	}
	h->i++;
	if (t != op->primary_term) {
		h->ok = false;
		return 1;
	}
	return 0;
}

/* Whether the copy's history above `from` agrees with this log. */
static bool
history_agrees(st_shard *s, int64_t from, const Shoal__RecStart *m)
{
	if (m->n_history_seq != m->n_history_term)
		return false;
	hist_ctx h = {m->history_seq, m->history_term, 0, m->n_history_seq, true};
	if (!h.n)
		return true;
	if (st_shard_oplog_read(s, seq_u(from), hist_cmp, &h))
		return false;
	return h.ok && h.i == h.n;
}

/* Retention markers, one per recovering copy: the primary's log keeps
 * every op above the lowest, so what a copy still needs is not trimmed.
 * A copy that starts again replaces its own marker (one that never comes
 * back leaves its marker until this node restarts). from = INT64_MAX
 * clears the target's marker. */
void
rp_retain(rp *r, rp_shard *rs, st_shard *s, int target, int64_t from)
{
	pthread_mutex_lock(&r->mu);
	rs->rec_from[target] = from;
	int64_t low = INT64_MAX;
	for (int i = 0; i < RP_MAX_NODES; i++)
		if (rs->rec_from[i] < low)
			low = rs->rec_from[i];
	pthread_mutex_unlock(&r->mu);
	st_shard_set_oplog_retention(s, low == INT64_MAX ? ST_NO_SEQ : low < 0 ? 0 : (uint64_t)low);
}

typedef struct ops_ctx {
	st_op *ops;
	size_t n, cap, bytes;
	cm_buf strs;
	size_t max;
} ops_ctx;

static int
collect_op(void *ctx, const st_op *op, int64_t version)
{
	ops_ctx *c = ctx;
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 256;
		c->ops = cm_realloc(MEM, c->ops, c->cap * sizeof(st_op));
	}
	st_op o = *op;
	o.version = version;
	o.has_version = true;
	/* Strings go to one buffer; pointers are fixed up after it stops growing. */
	o.id = (const char *)(uintptr_t)c->strs.len;
	cm_buf_put(&c->strs, op->id, op->id_len);
	o.source = (const char *)(uintptr_t)c->strs.len;
	if (op->source_len)
		cm_buf_put(&c->strs, op->source, op->source_len);
	o.if_seq_no = ST_NO_SEQ;
	o.if_primary_term = 0;
	o.create_only = false;
	o.version_gte = false;
	c->ops[c->n++] = o;
	c->bytes += op->id_len + op->source_len + 64;
	return c->n >= c->max || (c->max != SIZE_MAX && c->bytes >= (8u << 20));
}

static cm_err
ops_read(st_shard *s, int64_t from, size_t max, ops_ctx *c)
{
	memset(c, 0, sizeof(*c));
	c->max = max;
	cm_buf_init(&c->strs, MEM);
	cm_err rc = st_shard_oplog_read(s, seq_u(from), collect_op, c);
	for (size_t i = 0; i < c->n; i++) {
		c->ops[i].id = (const char *)c->strs.data + (uintptr_t)c->ops[i].id;
		c->ops[i].source = (const char *)c->strs.data + (uintptr_t)c->ops[i].source;
	}
	return rc;
}

static void
ops_free(ops_ctx *c)
{
	cm_free(MEM, c->ops);
	cm_buf_free(&c->strs);
}

static void
serve_file(rp *r, const Shoal__RecFileChunk *m, cm_error *err, cm_buf *body)
{
	char path[1600];
	if (!snap_name_ok(m->snapshot) || !snap_name_ok(m->name) || m->length > REC_CHUNK) {
		cm_error_set(err, CM_EINVAL, "bad snapshot file request");
		return;
	}
	snap_root(r, path, sizeof(path));
	size_t pl = strlen(path);
	snprintf(path + pl, sizeof(path) - pl, "/%s/%s", m->snapshot, m->name);
	FILE *f = fopen(path, "rb");
	if (!f) {
		cm_error_set(err, CM_ENOTFOUND, "snapshot file [%s/%s] is gone", m->snapshot,
		             m->name);
		return;
	}
	cm_buf_reserve(body, m->length + 1);
	size_t got = 0;
	if (fseeko(f, (off_t)m->offset, SEEK_SET) == 0)
		got = fread(body->data + body->len, 1, m->length, f);
	body->len += got;
	fclose(f);
}

/* rec_start: track the copy, then ops-based or a snapshot. */
static void
serve_start(rp *r, const Shoal__RecStart *m, rp_shard *rs, st_shard *s, int target, uint64_t term,
            cm_error *err, cm_buf *body)
{
	uint64_t bit = 1ull << target;
	int64_t gcp = seq_i(m->global_checkpoint), ckp = seq_i(m->local_checkpoint);
	Shoal__RecStartReply rep = SHOAL__REC_START_REPLY__INIT;
	/* From now on every new op also goes to the copy; what came before
	 * it pulls from the log, or gets with the files. */
	pthread_rwlock_wrlock(&rs->lock);
	pthread_mutex_lock(&r->mu);
	rs->tracking |= bit;
	rs->pending &= ~bit;
	pthread_mutex_unlock(&r->mu);
	pthread_rwlock_unlock(&rs->lock);
	bool ops = !m->force_file && history_agrees(s, gcp, m);
	if (ops) {
		/* The log must still hold everything above the copy's checkpoint. */
		ops_ctx probe;
		ops = ops_read(s, ckp, 1, &probe) == CM_OK;
		ops_free(&probe);
	}
	rep.term = term;
	if (ops) {
		rp_retain(r, rs, s, target, ckp);
		PACK(rec_start_reply, &rep, body);
		return;
	}
	char snap[160], path[1600];
	uint64_t maxseq = ST_NO_SEQ;
	pthread_mutex_lock(&r->mu);
	uint64_t id = ++r->snap_seq;
	pthread_mutex_unlock(&r->mu);
	snprintf(snap, sizeof(snap), "%s-%d-%s-%" PRIu64, rs->uuid, rs->shard, r->names[target],
	         id);
	snap_root(r, path, sizeof(path));
	cm_mkdir_p(path);
	size_t pl = strlen(path);
	snprintf(path + pl, sizeof(path) - pl, "/%s", snap);
	/* Keep the log above the snapshot until the copy has replayed it. */
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	rp_retain(r, rs, s, target, seq_i(st.local_checkpoint));
	if (st_shard_snapshot(s, path, &maxseq, err)) {
		rp_retain(r, rs, s, target, INT64_MAX);
		return;
	}
	char **names = NULL;
	size_t nn = 0;
	Shoal__RecFile *files = NULL, **fp = NULL;
	if (st_shard_dir_files(path, &names, &nn) == CM_OK) {
		files = cm_calloc(MEM, nn + 1, sizeof(*files));
		fp = cm_calloc(MEM, nn + 1, sizeof(*fp));
		for (size_t i = 0; i < nn; i++) {
			char f[1900];
			struct stat sb;
			snprintf(f, sizeof(f), "%s/%s", path, names[i]);
			shoal__rec_file__init(&files[i]);
			files[i].name = names[i];
			files[i].size = stat(f, &sb) == 0 ? (uint64_t)sb.st_size : 0;
			fp[i] = &files[i];
		}
	}
	rep.file_based = true;
	rep.snapshot = snap;
	rep.n_files = nn;
	rep.files = fp;
	PACK(rec_start_reply, &rep, body);
	cm_free(MEM, files);
	cm_free(MEM, fp);
	if (names)
		st_shard_dir_files_free(names, nn);
}

static void
serve_ops(rp *r, const Shoal__RecOps *m, rp_shard *rs, st_shard *s, uint64_t term, cm_error *err,
          cm_buf *body)
{
	ops_ctx c;
	int64_t from = seq_i(m->from);
	if (ops_read(s, from, REC_OPS_BATCH, &c)) {
		cm_error_set(err, CM_ENOTFOUND,
		             "[%s][%d] log no longer holds operations above %" PRId64, rs->index,
		             rs->shard, from);
	} else {
		pthread_mutex_lock(&r->mu);
		int64_t gcp = rs->gcp;
		pthread_mutex_unlock(&r->mu);
		pr_bulk_req rq = {.index = rs->index,
		                  .index_uuid = rs->uuid,
		                  .shard = (uint32_t)rs->shard,
		                  .ops = c.ops,
		                  .nops = c.n,
		                  .replica = true,
		                  .primary_term = term,
		                  .global_checkpoint = seq_u(gcp),
		                  .source_node = (char *)(uintptr_t)r->names[r->self]};
		pr_bulk_req_encode(&rq, body);
	}
	ops_free(&c);
}

/* Finalize: with the write lock held only to read the log (nothing new is
 * numbered meanwhile), the copy becomes "pending": every later op goes to
 * it and a failure there is not acknowledged. What it lacks is sent, then
 * the master counts it in. A forward that failed on it while pending
 * takes it out again. */
static void
serve_finalize(rp *r, const Shoal__RecShard *m, rp_shard *rs, st_shard *s, int target,
               cm_error *err, cm_buf *body)
{
	uint64_t bit = 1ull << target;
	int64_t ckp = seq_i(m->local_checkpoint);
	fwd_call calls[RP_MAX_NODES];
	rp_route ro;
	ops_ctx c;
	bool read_ok = false, doubt = false;

	memset(calls, 0, sizeof(calls));
	memset(&c, 0, sizeof(c));
	pthread_rwlock_wrlock(&rs->lock);
	rp_route_get(r, rs->index, rs->shard, &ro);
	if (ro.primary != r->self) {
		cm_error_set(err, CM_EUNAVAIL, "primary moved");
	} else if (ops_read(s, ckp, SIZE_MAX, &c)) {
		cm_error_set(err, CM_ENOTFOUND, "log trimmed during the recovery");
	} else {
		read_ok = true;
		pthread_mutex_lock(&r->mu);
		rs->pending |= bit;
		rs->pending_failed &= ~bit;
		pthread_mutex_unlock(&r->mu);
	}
	pthread_rwlock_unlock(&rs->lock);

	bool started = false;
	if (read_ok) {
		pthread_mutex_lock(&r->mu);
		int64_t gcp = rs->gcp;
		pthread_mutex_unlock(&r->mu);
		if (c.n)
			rp_forward(r, rs->index, rs->uuid, rs->shard, c.ops, c.n, ro.term, gcp, bit,
			           cm_now_ns() + r->replica_ns, calls);
		if (c.n && calls[target].rc)
			cm_error_set(err, CM_EUNAVAIL, "final operations not applied: %s",
			             calls[target].why);
		else if (rp_ask_master(r, RP_EV_STARTED, rs->index, rs->uuid, rs->shard, target,
		                       ro.term, NULL, err) == CM_OK)
			started = true;
		else
			doubt = true; /* the master may have counted it in all the same */
	}
	if (started)
		r->ops.refresh_state(r->host); /* learn the in-sync set before dropping pending */
	rp_route now;
	rp_route_get(r, rs->index, rs->shard, &now);
	pthread_mutex_lock(&r->mu);
	bool failed = (rs->pending_failed & bit) != 0;
	rs->pending_failed &= ~bit;
	if (!started || failed || (now.in_sync & bit))
		rs->pending &= ~bit; /* else until the routes show it (rp_tick) */
	rs->tracking &= ~bit;
	if (started || doubt)
		rs->ckp[target] = c.n ? calls[target].ckp : ckp;
	/* Counted in, but a write failed on it: in sync for the master until
	 * the FAILED below is answered, so waited for and counted in the
	 * global checkpoint as one meanwhile (and for good if that ask fails). */
	if ((doubt || (started && failed)) && !(now.in_sync & bit))
		rs->doubt |= bit; /* waited for as in sync until the routes or the master say */
	pthread_mutex_unlock(&r->mu);
	rp_retain(r, rs, s, target, INT64_MAX);
	if (started && failed) {
		cm_error e;
		cm_error_clear(&e);
		if (rp_ask_master(r, RP_EV_FAILED, rs->index, rs->uuid, rs->shard, target, ro.term,
		                  "a write failed on it while it joined the in-sync set",
		                  &e) == CM_OK) {
			pthread_mutex_lock(&r->mu);
			rs->doubt &= ~bit; /* the master has it out */
			pthread_mutex_unlock(&r->mu);
		} else {
			cm_warn(
			    "replication",
			    "[%s][%d] copy on [%s] joined the in-sync set, a write failed on it, "
			    "and the master could not take it out (%s): it stays in sync here",
			    rs->index, rs->shard, r->names[target], e.reason);
		}
		cm_error_set(err, CM_EUNAVAIL,
		             "[%s][%d] a write failed on the copy while it joined the in-sync set",
		             rs->index, rs->shard);
	} else if (started) {
		Shoal__RecFinalizeReply rep = SHOAL__REC_FINALIZE_REPLY__INIT;
		rep.ops = c.n;
		PACK(rec_finalize_reply, &rep, body);
	}
	ops_free(&c);
}

static void
serve_cancel(rp *r, rp_shard *rs, st_shard *s, int target)
{
	uint64_t bit = 1ull << target;
	pthread_mutex_lock(&r->mu);
	rs->tracking &= ~bit;
	rs->pending &= ~bit;
	pthread_mutex_unlock(&r->mu);
	rp_retain(r, rs, s, target, INT64_MAX);
}

/* The shard a request names, if this node leads it: taken, with its state. */
static bool
serve_shard(rp *r, const Shoal__ShardRef *ref, rp_copy *c, rp_shard **rs, int *target,
            uint64_t *term, cm_error *err)
{
	rp_route ro;
	if (!ref) {
		cm_error_set(err, CM_EPARSE, "malformed recovery request");
		return false;
	}
	*target = node_num(r, ref->node);
	if (*target < 0 || *target == r->self) {
		cm_error_set(err, CM_EINVAL, "bad recovery request for [%s]", ref->index);
		return false;
	}
	if (!rp_take(r, ref->index, ref->uuid, (int)ref->shard, c)) {
		cm_error_set(err, CM_ENOINDEX, "no such shard [%s][%u] here", ref->index,
		             ref->shard);
		return false;
	}
	if (!rp_route_get(r, ref->index, (int)ref->shard, &ro) || ro.primary != r->self ||
	    !atomic_load(&r->joined)) {
		cm_error_set(err, CM_EUNAVAIL, "[%s][%u] primary is not on [%s]", ref->index,
		             ref->shard, r->names[r->self]);
		rp_release(r, c);
		return false;
	}
	*term = ro.term;
	*rs = rp_shard_get(r, ref->index, ref->uuid, (int)ref->shard);
	return true;
}

void
rp_rec_serve(rp *r, uint32_t type, const uint8_t *p, size_t len, cm_error *err, cm_buf *body)
{
	rp_copy c = {0};
	rp_shard *rs = NULL;
	int target = -1;
	uint64_t term = 0;

	switch (type) {
	case PR_REC_FILE: {
		Shoal__RecFileChunk *m = shoal__rec_file_chunk__unpack(RP_PB, len, p);
		if (!m) {
			cm_error_set(err, CM_EPARSE, "malformed recovery request");
			return;
		}
		serve_file(r, m, err, body);
		shoal__rec_file_chunk__free_unpacked(m, RP_PB);
		return;
	}
	case PR_REC_RELEASE: {
		Shoal__RecRelease *m = shoal__rec_release__unpack(RP_PB, len, p);
		char path[1600];
		if (m && snap_name_ok(m->snapshot)) {
			snap_root(r, path, sizeof(path));
			size_t pl = strlen(path);
			snprintf(path + pl, sizeof(path) - pl, "/%s", m->snapshot);
			cm_rm_rf(path);
		}
		if (m)
			shoal__rec_release__free_unpacked(m, RP_PB);
		return;
	}
	case PR_REC_START: {
		Shoal__RecStart *m = shoal__rec_start__unpack(RP_PB, len, p);
		if (!m)
			cm_error_set(err, CM_EPARSE, "malformed recovery request");
		else if (serve_shard(r, m->ref, &c, &rs, &target, &term, err))
			serve_start(r, m, rs, c.s, target, term, err, body);
		if (m)
			shoal__rec_start__free_unpacked(m, RP_PB);
		break;
	}
	case PR_REC_OPS: {
		Shoal__RecOps *m = shoal__rec_ops__unpack(RP_PB, len, p);
		if (!m)
			cm_error_set(err, CM_EPARSE, "malformed recovery request");
		else if (serve_shard(r, m->ref, &c, &rs, &target, &term, err))
			serve_ops(r, m, rs, c.s, term, err, body);
		if (m)
			shoal__rec_ops__free_unpacked(m, RP_PB);
		break;
	}
	case PR_REC_FINALIZE:
	case PR_REC_CANCEL: {
		Shoal__RecShard *m = shoal__rec_shard__unpack(RP_PB, len, p);
		if (!m)
			cm_error_set(err, CM_EPARSE, "malformed recovery request");
		else if (serve_shard(r, m->ref, &c, &rs, &target, &term, err)) {
			if (type == PR_REC_FINALIZE)
				serve_finalize(r, m, rs, c.s, target, err, body);
			else
				serve_cancel(r, rs, c.s, target);
		}
		if (m)
			shoal__rec_shard__free_unpacked(m, RP_PB);
		break;
	}
	default:
		cm_error_set(err, CM_EINVAL, "unknown recovery message %u", type);
	}
	rp_release(r, &c);
}

/* ---- the copy's side ---- */

typedef struct rec_job {
	rp *r;
	char index[256], uuid[64];
	int shard;
	int primary;
} rec_job;

static void
ref_of(const rec_job *j, Shoal__ShardRef *ref)
{
	shoal__shard_ref__init(ref);
	ref->index = (char *)(uintptr_t)j->index;
	ref->uuid = (char *)(uintptr_t)j->uuid;
	ref->shard = (uint32_t)j->shard;
	ref->node = (char *)(uintptr_t)j->r->names[j->r->self];
}

static cm_err
rec_call(rec_job *j, uint32_t type, const cm_buf *req, uint8_t **body, size_t *len, cm_error *err)
{
	return rp_call_sync(j->r, j->primary, type, req, cm_now_ns() + REC_CALL_NS, body, len, err);
}

typedef struct hist_build {
	uint64_t *seq, *term;
	size_t n, cap;
} hist_build;

static int
hist_add(void *ctx, const st_op *op, int64_t version)
{
	hist_build *h = ctx;
	(void)version;
	if (h->n == h->cap) {
		h->cap = h->cap ? 2 * h->cap : 1024;
		h->seq = cm_realloc(MEM, h->seq, h->cap * sizeof(uint64_t));
		h->term = cm_realloc(MEM, h->term, h->cap * sizeof(uint64_t));
	}
	h->seq[h->n] = op->seq_no;
	h->term[h->n] = op->primary_term;
	return ++h->n >= REC_HISTORY_MAX;
}

static cm_err
rec_files(rec_job *j, st_shard *s, const Shoal__RecStartReply *rep, uint64_t *bytes, cm_error *err)
{
	rp *r = j->r;
	char dir[1400];
	cm_err rc = CM_OK;
	incoming_dir(r, j->uuid, j->shard, dir, sizeof(dir));
	cm_rm_rf(dir);
	if (cm_mkdir_p(dir))
		return cm_error_set(err, CM_EIO, "cannot create %s", dir);
	uint64_t t0 = cm_now_ns(), sent = 0;
	for (size_t i = 0; i < rep->n_files; i++) {
		const char *name = rep->files[i]->name;
		uint64_t size = rep->files[i]->size;
		char path[1700];
		if (!snap_name_ok(name))
			return cm_error_set(err, CM_EINVAL, "bad file name from the primary");
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		FILE *out = fopen(path, "wb");
		if (!out)
			return cm_error_set(err, CM_EIO, "cannot write %s: %s", path,
			                    strerror(errno));
		for (uint64_t off = 0; off < size && !rc;) {
			Shoal__RecFileChunk q = SHOAL__REC_FILE_CHUNK__INIT;
			cm_buf req;
			uint8_t *data = NULL;
			size_t got = 0;
			q.snapshot = rep->snapshot;
			q.name = (char *)(uintptr_t)name;
			q.offset = off;
			q.length = size - off < REC_CHUNK ? size - off : REC_CHUNK;
			cm_buf_init(&req, MEM);
			PACK(rec_file_chunk, &q, &req);
			rc = rec_call(j, PR_REC_FILE, &req, &data, &got, err);
			cm_buf_free(&req);
			if (!rc && got == 0)
				rc =
				    cm_error_set(err, CM_EIO, "snapshot file %s ended early", name);
			if (!rc && fwrite(data, 1, got, out) != got)
				rc = cm_error_set(err, CM_EIO, "cannot write %s", path);
			cm_free(MEM, data);
			off += got;
			sent += got;
			rec_log_set(r, NULL, NULL, 0, got, 0, false, false);
			/* Throttle: searches and writes go on while files stream. */
			uint64_t due =
			    t0 + (uint64_t)((double)sent * 1e9 / (double)r->rec_bytes_per_s);
			uint64_t now = cm_now_ns();
			if (due > now)
				usleep((useconds_t)((due - now) / 1000));
		}
		if (fflush(out) || fsync(fileno(out)))
			rc = rc ? rc : cm_error_set(err, CM_EIO, "cannot sync %s", path);
		fclose(out);
		if (rc)
			return rc;
		rec_log_set(r, NULL, NULL, 1, 0, 0, false, false);
	}
	*bytes = sent;
	if ((rc = st_shard_reset_from(s, dir, err)))
		return rc;
	cm_rm_rf(dir);
	return CM_OK;
}

/* Pulls the primary's ops above this copy's checkpoint, batch after
 * batch. It moves on from the last op pulled, not from the checkpoint: a
 * primary promoted with a gap in its history (ops of the old primary that
 * never reached it, never acknowledged) leaves the same gap here, and the
 * checkpoint stays below it. */
static cm_err
rec_pull_ops(rec_job *j, rp_copy *c, uint64_t *nops, cm_error *err)
{
	rp *r = j->r;
	st_shard_stats st;
	st_shard_stats_get(c->s, &st);
	uint64_t from = st.local_checkpoint;
	for (;;) {
		Shoal__RecOps q = SHOAL__REC_OPS__INIT;
		Shoal__ShardRef ref;
		cm_buf req;
		uint8_t *data = NULL;
		size_t len = 0;
		pr_bulk_req rq;
		ref_of(j, &ref);
		q.ref = &ref;
		q.from = from;
		cm_buf_init(&req, MEM);
		PACK(rec_ops, &q, &req);
		cm_err rc = rec_call(j, PR_REC_OPS, &req, &data, &len, err);
		cm_buf_free(&req);
		if (rc)
			return rc;
		rc = pr_bulk_req_decode(data, len, &rq, err);
		cm_free(MEM, data);
		if (rc)
			return rc;
		size_t n = rq.nops;
		if (n) {
			st_op_result *res = cm_calloc(MEM, n, sizeof(st_op_result));
			rc = r->ops.apply(r->host, c->ref, j->shard, rq.ops, n, res, true);
			for (size_t i = 0; i < n && !rc; i++)
				if (res[i].err)
					rc = cm_error_set(err, res[i].err,
					                  "op %" PRIu64 " not applied: %s",
					                  rq.ops[i].seq_no, res[i].reason);
			cm_free(MEM, res);
			if (!rc && rq.ops[n - 1].seq_no != ST_NO_SEQ &&
			    (from == ST_NO_SEQ || rq.ops[n - 1].seq_no > from))
				from = rq.ops[n - 1].seq_no;
			else if (!rc)
				rc = cm_error_set(err, CM_EINTERNAL,
				                  "the primary's log went backwards at %" PRIu64,
				                  from);
		}
		if (!rc && rq.global_checkpoint != ST_NO_SEQ)
			st_shard_set_global_checkpoint(c->s, rq.global_checkpoint);
		pr_bulk_req_free(&rq);
		if (rc)
			return rc;
		*nops += n;
		rec_log_set(r, NULL, NULL, 0, 0, n, false, false);
		/* A short batch: what is left is small and finalize sends it
		 * (a copy chasing a busy primary's tail batch by batch might never
		 * catch it). */
		if (n < REC_OPS_BATCH)
			return CM_OK;
	}
}

static void
rec_simple(rec_job *j, uint32_t type, uint64_t ckp)
{
	Shoal__RecShard q = SHOAL__REC_SHARD__INIT;
	Shoal__ShardRef ref;
	cm_buf req;
	uint8_t *d = NULL;
	size_t l;
	cm_error e;
	cm_error_clear(&e);
	ref_of(j, &ref);
	q.ref = &ref;
	q.local_checkpoint = ckp;
	cm_buf_init(&req, MEM);
	PACK(rec_shard, &q, &req);
	rec_call(j, type, &req, &d, &l, &e);
	cm_buf_free(&req);
	cm_free(MEM, d);
}

static void *
rec_main(void *arg)
{
	rec_job *j = arg;
	rp *r = j->r;
	cm_error err;
	rp_copy c;
	uint8_t *data = NULL;
	size_t len = 0;
	Shoal__RecStartReply *rep = NULL;
	uint64_t nops = 0, bytes = 0;
	bool started = false, file = false;
	cm_err rc = CM_OK;
	hist_build h = {0};

	cm_error_clear(&err);
	if (!rp_take(r, j->index, j->uuid, j->shard, &c))
		goto done;
	uint64_t t0 = cm_now_ns();
	rec_log_new(r, j->index, j->shard, r->names[j->primary]);
	st_shard_stats st;
	st_shard_stats_get(c.s, &st);
	Shoal__RecStart q = SHOAL__REC_START__INIT;
	Shoal__ShardRef ref;
	ref_of(j, &ref);
	q.ref = &ref;
	q.global_checkpoint = st.global_checkpoint;
	q.local_checkpoint = st.local_checkpoint;
	q.max_seq_no = st.max_seq_no;
	if (st.max_seq_no != ST_NO_SEQ &&
	    (st.global_checkpoint == ST_NO_SEQ || st.max_seq_no > st.global_checkpoint) &&
	    (st_shard_oplog_read(c.s, st.global_checkpoint, hist_add, &h) ||
	     h.n >= REC_HISTORY_MAX))
		q.force_file = true;
	q.n_history_seq = q.n_history_term = q.force_file ? 0 : h.n;
	q.history_seq = h.seq;
	q.history_term = h.term;
	cm_buf req;
	cm_buf_init(&req, MEM);
	PACK(rec_start, &q, &req);
	cm_free(MEM, h.seq);
	cm_free(MEM, h.term);
	rc = rec_call(j, PR_REC_START, &req, &data, &len, &err);
	cm_buf_free(&req);
	if (rc)
		goto out;
	started = true;
	rep = shoal__rec_start_reply__unpack(RP_PB, len, data);
	if (!rep) {
		rc = cm_error_set(&err, CM_EPARSE, "malformed recovery start reply");
		goto out;
	}
	file = rep->file_based;
	cm_info("replication", "[%s][%d] recovering from [%s]: %s-based (checkpoint %" PRId64 ")",
	        j->index, j->shard, r->names[j->primary], file ? "file" : "ops",
	        seq_i(st.local_checkpoint));
	rec_log_set(r, file ? "file_based" : "ops_based", file ? "index" : "translog", 0, 0, 0,
	            false, false);
	if (file) {
		rc = rec_files(j, c.s, rep, &bytes, &err);
		Shoal__RecRelease rel = SHOAL__REC_RELEASE__INIT;
		uint8_t *d2 = NULL;
		size_t l2;
		cm_error e2;
		rel.snapshot = rep->snapshot;
		cm_buf_init(&req, MEM);
		PACK(rec_release, &rel, &req);
		rec_call(j, PR_REC_RELEASE, &req, &d2, &l2, &e2);
		cm_buf_free(&req);
		cm_free(MEM, d2);
		if (rc)
			goto out;
		rec_log_set(r, NULL, "translog", 0, 0, 0, false, false);
	}
	if ((rc = rec_pull_ops(j, &c, &nops, &err)))
		goto out;
	rec_log_set(r, NULL, "finalize", 0, 0, 0, false, false);
	/* searchable before it counts: once in sync it answers searches */
	st_shard_refresh(c.s);
	st_shard_stats_get(c.s, &st);
	{
		Shoal__RecShard f = SHOAL__REC_SHARD__INIT;
		uint8_t *d3 = NULL;
		size_t l3;
		ref_of(j, &ref);
		f.ref = &ref;
		f.local_checkpoint = st.local_checkpoint;
		cm_buf_init(&req, MEM);
		PACK(rec_shard, &f, &req);
		rc = rec_call(j, PR_REC_FINALIZE, &req, &d3, &l3, &err);
		cm_buf_free(&req);
		cm_free(MEM, d3);
	}
	started = false; /* finalize releases the primary's side either way */
	if (rc)
		goto out;
	rec_log_set(r, NULL, "done", 0, 0, 0, true, false);
	/* The master's publish may not reach us (its dialer reconnects on a
	 * backoff): learn the in-sync set now, not at the next poll. */
	r->ops.refresh_state(r->host);
	cm_info("replication",
	        "[%s][%d] recovered from [%s] in %.2fs: %s, %" PRIu64 " ops, %" PRIu64 " bytes",
	        j->index, j->shard, r->names[j->primary], (double)(cm_now_ns() - t0) / 1e9,
	        file ? "file-based" : "ops-based", nops, bytes);
out:
	if (rc) {
		cm_warn("replication", "[%s][%d] recovery from [%s] failed: %s", j->index, j->shard,
		        r->names[j->primary], err.reason[0] ? err.reason : cm_err_msg(rc));
		rec_log_set(r, NULL, NULL, 0, 0, 0, true, true);
		if (started)
			rec_simple(j, PR_REC_CANCEL, ST_NO_SEQ);
		pthread_mutex_lock(&r->mu);
		r->next_rec_ns = cm_now_ns() + 2000000000ull;
		pthread_mutex_unlock(&r->mu);
	}
	rp_release(r, &c);
done:
	if (rep)
		shoal__rec_start_reply__free_unpacked(rep, RP_PB);
	cm_free(MEM, data);
	cm_free(MEM, j);
	atomic_store(&r->rec_busy, false);
	return NULL;
}

/* Starts the recovery of the first local copy that needs one. */
void
rp_rec_maybe_start(rp *r)
{
	pthread_mutex_lock(&r->mu);
	bool wait = atomic_load(&r->rec_busy) || cm_now_ns() < r->next_rec_ns;
	pthread_mutex_unlock(&r->mu);
	if (wait)
		return;
	if (r->rec_running) {
		pthread_join(r->rec_thread, NULL);
		r->rec_running = false;
	}
	rec_job *pick = NULL;
	pthread_rwlock_rdlock(&r->route_lock);
	for (size_t i = 0; i < r->nroutes && !pick; i++) {
		for (int s = 0; s < r->routes[i].nshards && !pick; s++) {
			const rp_route *ro = &r->routes[i].shards[s];
			bool mine = false;
			for (int k = 0; k < ro->ncopies; k++)
				mine |= ro->copies[k] == r->self;
			if (!mine || ro->primary < 0 || ro->primary == r->self ||
			    ((ro->in_sync >> r->self) & 1) || !r->ops.alive(r->host, ro->primary))
				continue;
			pick = cm_calloc(MEM, 1, sizeof(*pick));
			pick->r = r;
			snprintf(pick->index, sizeof(pick->index), "%s", r->routes[i].name);
			snprintf(pick->uuid, sizeof(pick->uuid), "%s", r->routes[i].uuid);
			pick->shard = s;
			pick->primary = ro->primary;
		}
	}
	pthread_rwlock_unlock(&r->route_lock);
	if (!pick)
		return;
	atomic_store(&r->rec_busy, true);
	if (pthread_create(&r->rec_thread, NULL, rec_main, pick)) {
		atomic_store(&r->rec_busy, false);
		cm_free(MEM, pick);
		return;
	}
	r->rec_running = true;
}
