/* Shard against a model: random batches of index/update/delete (with
 * if_seq_no, create and external-version conditions), refresh, flush,
 * merges and reopen; realtime get, reader snapshots, replication from the
 * operation log. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/cm_sys.h"
#include "storage/shard_private.h"
#include "storage/st_shard.h"

#define NIDS 48
#define SRC_MAX 160

typedef struct mdoc {
	bool exists, tomb;
	char src[SRC_MAX];
	uint64_t seq, term;
	int64_t ver;
} mdoc;

typedef struct model {
	mdoc d[NIDS];
	int64_t seq;
	/* what the last refresh made searchable */
	bool vis[NIDS];
	char vsrc[NIDS][SRC_MAX];
} model;

static uint64_t rng_state = 88172645463325252ull;
static uint64_t
rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}
static int
rndn(int n)
{
	return (int)(rnd() % (uint64_t)n);
}

/* A mapping from its JSON text; the test stops if it does not parse. */
static st_mapping *
mapping_of(const char *js)
{
	cJSON *j = cJSON_Parse(js);
	REQUIRE(j != NULL);
	st_mapping *m = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err e = st_mapping_from_json(j, &m, &err);
	cJSON_Delete(j);
	if (e)
		fprintf(stderr, "mapping: %s\n", err.reason);
	REQUIRE(e == CM_OK && m != NULL);
	return m;
}

static st_mapping *
test_mapping(void)
{
	return mapping_of("{\"properties\":{\"k\":{\"type\":\"keyword\"},\"n\":{\"type\":\"long\"},"
	                  "\"body\":{\"type\":\"text\"}}}");
}

static void
mkid(int k, char *out)
{
	sprintf(out, "d%d", k);
}

static int
parse_id(const uint8_t *p, size_t n)
{
	if (n < 2 || n > 8 || p[0] != 'd')
		return -1;
	int k = 0;
	for (size_t i = 1; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		k = k * 10 + (p[i] - '0');
	}
	return k < NIDS ? k : -1;
}

/* ---- model semantics (must mirror Elasticsearch's) ---- */

typedef struct expect {
	cm_err err;
	st_op_result_kind result;
	uint64_t seq;
	int64_t ver;
} expect;

static expect
model_apply(model *m, const st_op *op, int k)
{
	expect x = {0};
	mdoc *d = &m->d[k];
	bool known = d->exists || d->tomb;
	if (op->if_seq_no != ST_NO_SEQ &&
	    (!d->exists || d->seq != op->if_seq_no || d->term != op->if_primary_term)) {
		x.err = CM_ECONFLICT;
		return x;
	}
	if (op->has_version && known && op->version <= d->ver) {
		x.err = CM_ECONFLICT;
		return x;
	}
	if (op->create_only && op->type == ST_OP_INDEX && d->exists) {
		x.err = CM_ECONFLICT;
		return x;
	}
	x.seq = (uint64_t)++m->seq;
	x.ver = op->has_version ? op->version : known ? d->ver + 1 : 1;
	if (op->type == ST_OP_INDEX) {
		x.result = d->exists ? ST_RESULT_UPDATED : ST_RESULT_CREATED;
		d->exists = true;
		d->tomb = false;
		snprintf(d->src, SRC_MAX, "%.*s", (int)op->source_len, op->source);
	} else {
		x.result = d->exists ? ST_RESULT_DELETED : ST_RESULT_NOT_FOUND;
		d->exists = false;
		d->tomb = true;
	}
	d->seq = x.seq;
	d->term = 1;
	d->ver = x.ver;
	return x;
}

static void
model_refresh(model *m)
{
	for (int k = 0; k < NIDS; k++) {
		m->d[k].tomb = false; /* tombstones are pruned at refresh on a primary */
		m->vis[k] = m->d[k].exists;
		memcpy(m->vsrc[k], m->d[k].src, SRC_MAX);
	}
}

/* ---- checks ---- */

static void
check_gets(st_shard *s, const model *m, const char *when)
{
	cm_buf src;
	cm_buf_init(&src, CM_MEM_STORAGE);
	for (int k = 0; k < NIDS; k++) {
		char id[16];
		mkid(k, id);
		st_doc_meta meta;
		cm_buf_reset(&src);
		cm_err e = st_shard_get(s, id, strlen(id), &meta, &src);
		const mdoc *d = &m->d[k];
		if (!d->exists) {
			CHECKF(e == CM_ENOTFOUND, "%s: get %s: expected missing, got %s", when, id,
			       cm_err_name(e));
			continue;
		}
		CHECKF(e == CM_OK, "%s: get %s: %s", when, id, cm_err_name(e));
		if (e)
			continue;
		CHECKF(src.len == strlen(d->src) && memcmp(src.data, d->src, src.len) == 0,
		       "%s: get %s: source %.*s, expected %s", when, id, (int)src.len, src.data,
		       d->src);
		CHECKF(meta.seq_no == d->seq && meta.version == d->ver &&
		           meta.primary_term == d->term,
		       "%s: get %s: seq %" PRIu64 " ver %" PRId64 ", expected %" PRIu64 " %" PRId64,
		       when, id, meta.seq_no, meta.version, d->seq, d->ver);
	}
	cm_buf_free(&src);
}

/* Every live doc of the reader, once each, equal to vis/vsrc. */
static void
check_reader(st_reader *r, const bool *vis, char (*vsrc)[SRC_MAX], const char *when)
{
	int seen[NIDS] = {0};
	uint64_t live = 0;
	cm_buf id, src;
	cm_buf_init(&id, CM_MEM_STORAGE);
	cm_buf_init(&src, CM_MEM_STORAGE);
	for (size_t i = 0; i < st_reader_nsegments(r); i++) {
		st_segment *seg = st_reader_segment(r, i);
		const uint64_t *bits = st_reader_live(r, i);
		st_seg_txn *t;
		REQUIRE(st_seg_txn_begin(seg, &t) == CM_OK);
		uint32_t nlive = 0;
		for (uint32_t d = 0; d < st_segment_max_doc(seg); d++) {
			if (bits && !st_bit_get(bits, d))
				continue;
			nlive++;
			cm_buf_reset(&id);
			cm_buf_reset(&src);
			cm_err e = st_stored_get(t, d, &id, &src);
			CHECKF(e == CM_OK, "%s: stored_get: %s", when, cm_err_name(e));
			int k = parse_id(id.data, id.len);
			CHECKF(k >= 0, "%s: bad id %.*s", when, (int)id.len, id.data);
			if (k < 0)
				continue;
			seen[k]++;
			CHECKF(vis[k], "%s: d%d visible but should not be", when, k);
			if (vis[k])
				CHECKF(src.len == strlen(vsrc[k]) &&
				           memcmp(src.data, vsrc[k], src.len) == 0,
				       "%s: d%d source %.*s expected %s", when, k, (int)src.len,
				       src.data, vsrc[k]);
		}
		CHECK(nlive == st_reader_live_count(r, i));
		live += nlive;
		st_seg_txn_end(t);
	}
	for (int k = 0; k < NIDS; k++)
		CHECKF(seen[k] == (vis[k] ? 1 : 0), "%s: d%d seen %d times, visible %d", when, k,
		       seen[k], vis[k]);
	CHECK(live == st_reader_doc_count(r));
	cm_buf_free(&id);
	cm_buf_free(&src);
}

/* ---- random run ---- */

static void
make_source(char *out, int k)
{
	static const char *words[] = {"quick", "brown", "fox",  "jumps",
	                              "lazy",  "dog",   "élan", "数据"};
	snprintf(out, SRC_MAX, "{\"k\":\"v%d\",\"n\":%d,\"body\":\"%s %s d%d\"}", rndn(50),
	         rndn(100000), words[rndn(8)], words[rndn(8)], k);
}

/* When set, shards opened by open_shard spread batches over it. */
static cm_pool *g_index_pool;

static st_shard *
open_shard(const char *dir, st_mapping *m, cm_pool *pool)
{
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.merge_pool = pool;
	o.index_pool = g_index_pool;
	o.index_part_ops = 2;
	o.merge_factor = 3;
	st_shard *s = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err e = st_shard_open(dir, m, &o, &s, &err);
	if (e)
		fprintf(stderr, "open %s: %s %s\n", dir, cm_err_name(e), err.reason);
	REQUIRE(e == CM_OK);
	return s;
}

static void
random_run(const char *dir, st_mapping *map, cm_pool *pool, int steps)
{
	model *m = calloc(1, sizeof(*m));
	m->seq = -1;
	st_shard *s = open_shard(dir, map, pool);
	st_reader *held = NULL;
	bool held_vis[NIDS];
	char(*held_src)[SRC_MAX] = calloc(NIDS, SRC_MAX);
	char srcs[32][SRC_MAX], ids[32][16];
	int reopens = 0, conflicts = 0, merges = 0;
	for (int step = 0; step < steps; step++) {
		int what = rndn(100);
		if (what < 80) {
			int n = 1 + rndn(20);
			st_op ops[32];
			st_op_result res[32];
			expect ex[32];
			memset(ops, 0, sizeof(ops));
			/* model state before the batch, for conditions */
			for (int i = 0; i < n; i++) {
				int k = rndn(NIDS);
				mkid(k, ids[i]);
				st_op *op = &ops[i];
				op->id = ids[i];
				op->id_len = strlen(ids[i]);
				op->seq_no = ST_NO_SEQ;
				op->if_seq_no = ST_NO_SEQ;
				op->type = rndn(100) < 80 ? ST_OP_INDEX : ST_OP_DELETE;
				if (op->type == ST_OP_INDEX) {
					make_source(srcs[i], k);
					op->source = srcs[i];
					op->source_len = strlen(srcs[i]);
				}
				int c = rndn(100);
				const mdoc *d = &m->d[k];
				if (c < 8) {
					op->if_seq_no =
					    d->exists && rndn(2) ? d->seq : (uint64_t)rndn(50);
					op->if_primary_term = 1;
				} else if (c < 14 && op->type == ST_OP_INDEX) {
					op->create_only = true;
				} else if (c < 18) {
					/* external versions, 0 included */
					op->version =
					    (d->exists || d->tomb) ? d->ver + rndn(3) - 1 : rndn(3);
					if (op->version < 0)
						op->version = 0;
					op->has_version = true;
				}
			}
			/* Expected results come from applying in order: within a
			 * batch later ops see earlier ones. */
			for (int i = 0; i < n; i++)
				ex[i] = model_apply(
				    m, &ops[i], parse_id((const uint8_t *)ids[i], strlen(ids[i])));
			cm_err e = st_shard_apply(s, ops, (size_t)n, res);
			REQUIRE(e == CM_OK);
			for (int i = 0; i < n; i++) {
				CHECKF(res[i].err == ex[i].err,
				       "step %d op %d (%s): err %s (%s), expected %s", step, i,
				       ids[i], cm_err_name(res[i].err), res[i].reason,
				       cm_err_name(ex[i].err));
				if (ex[i].err) {
					conflicts++;
					continue;
				}
				CHECKF(res[i].result == ex[i].result &&
				           res[i].seq_no == ex[i].seq &&
				           res[i].version == ex[i].ver && res[i].primary_term == 1,
				       "step %d op %d (%s): result %d seq %" PRIu64 " ver %" PRId64
				       ", expected %d %" PRIu64 " %" PRId64,
				       step, i, ids[i], res[i].result, res[i].seq_no,
				       res[i].version, ex[i].result, ex[i].seq, ex[i].ver);
			}
		} else if (what < 88) {
			REQUIRE(st_shard_refresh(s) == CM_OK);
			model_refresh(m);
			st_reader *r = st_shard_reader(s);
			check_reader(r, m->vis, m->vsrc, "after refresh");
			if (held == NULL || rndn(3) == 0) {
				if (held)
					st_reader_release(held);
				held = r;
				memcpy(held_vis, m->vis, sizeof(held_vis));
				memcpy(held_src, m->vsrc, NIDS * SRC_MAX);
			} else {
				st_reader_release(r);
			}
		} else if (what < 91) {
			REQUIRE(st_shard_flush(s) == CM_OK);
			model_refresh(m);
		} else if (what < 94) {
			int max = 1 + rndn(3);
			REQUIRE(st_shard_force_merge(s, max) == CM_OK);
			merges++;
			st_reader *r = st_shard_reader(s);
			CHECKF(st_reader_nsegments(r) <= (size_t)max, "force merge to %d left %zu",
			       max, st_reader_nsegments(r));
			check_reader(r, m->vis, m->vsrc, "after force merge");
			st_reader_release(r);
		} else if (what < 97) {
			if (held) {
				st_reader_release(held);
				held = NULL;
			}
			st_shard_close(s);
			s = open_shard(dir, map, pool);
			reopens++;
			check_gets(s, m, "after reopen");
			st_reader *r = st_shard_reader(s);
			check_reader(r, m->vis, m->vsrc, "after reopen");
			st_reader_release(r);
		} else {
			check_gets(s, m, "realtime");
		}
		if (held && step % 7 == 0)
			check_reader(held, held_vis, held_src, "held reader");
	}
	check_gets(s, m, "end");
	REQUIRE(st_shard_refresh(s) == CM_OK);
	model_refresh(m);
	st_reader *r = st_shard_reader(s);
	check_reader(r, m->vis, m->vsrc, "end");
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	uint64_t live = 0;
	for (int k = 0; k < NIDS; k++)
		live += m->d[k].exists;
	CHECK(st.docs == live);
	CHECK(st.max_seq_no == (uint64_t)m->seq);
	CHECK(st.local_checkpoint == (uint64_t)m->seq);
	CHECK(st.committed_seq_no == (uint64_t)m->seq);
	printf("random run: %d steps, %d conflicts, %d reopens, %d force merges, %" PRIu64
	       " segments, %" PRIu64 " merges\n",
	       steps, conflicts, reopens, merges, st.segments, st.merges);
	st_reader_release(r);
	if (held)
		st_reader_release(held);
	st_shard_close(s);
	free(held_src);
	free(m);
}

/* ---- fixed cases ---- */

static void
apply1(st_shard *s, st_op *op, st_op_result *r)
{
	REQUIRE(st_shard_apply(s, op, 1, r) == CM_OK);
}

static st_op
index_op(const char *id, const char *src)
{
	return (st_op){.type = ST_OP_INDEX,
	               .id = id,
	               .id_len = strlen(id),
	               .source = src,
	               .source_len = strlen(src),
	               .seq_no = ST_NO_SEQ,
	               .if_seq_no = ST_NO_SEQ};
}

static void
conditions(const char *dir, st_mapping *map)
{
	st_shard *s = open_shard(dir, map, NULL);
	st_op_result r;
	st_op op = index_op("a", "{\"k\":\"x\"}");
	apply1(s, &op, &r);
	CHECK(r.err == CM_OK && r.result == ST_RESULT_CREATED && r.seq_no == 0 && r.version == 1);
	apply1(s, &op, &r);
	CHECK(r.err == CM_OK && r.result == ST_RESULT_UPDATED && r.seq_no == 1 && r.version == 2);

	op.if_seq_no = 0;
	op.if_primary_term = 1;
	apply1(s, &op, &r);
	CHECK(r.err == CM_ECONFLICT && cm_err_status(r.err) == 409);
	CHECKF(strcmp(r.reason, "[a]: version conflict, required seqNo [0], primary term [1]. "
	                        "current document has seqNo [1] and primary term [1]") == 0,
	       "%s", r.reason);
	op.if_seq_no = 1;
	apply1(s, &op, &r);
	CHECK(r.err == CM_OK && r.seq_no == 2 && r.version == 3);

	st_op c = index_op("a", "{\"k\":\"y\"}");
	c.create_only = true;
	apply1(s, &c, &r);
	CHECK(r.err == CM_ECONFLICT);
	CHECKF(strcmp(r.reason,
	              "[a]: version conflict, document already exists (current version [3])") == 0,
	       "%s", r.reason);

	st_op ext = index_op("b", "{\"k\":\"z\"}");
	ext.has_version = true;
	ext.version = 10;
	apply1(s, &ext, &r);
	CHECK(r.err == CM_OK && r.version == 10 && r.result == ST_RESULT_CREATED);
	apply1(s, &ext, &r);
	CHECK(r.err == CM_ECONFLICT);
	CHECKF(strcmp(r.reason, "[b]: version conflict, current version [10] is higher or equal "
	                        "to the one provided [10]") == 0,
	       "%s", r.reason);
	ext.version = 11;
	apply1(s, &ext, &r);
	CHECK(r.err == CM_OK && r.version == 11 && r.result == ST_RESULT_UPDATED);

	/* Delete of a missing doc: logged, not_found, a tombstone with version 1. */
	st_op del = {.type = ST_OP_DELETE,
	             .id = "zz",
	             .id_len = 2,
	             .seq_no = ST_NO_SEQ,
	             .if_seq_no = ST_NO_SEQ};
	apply1(s, &del, &r);
	CHECK(r.err == CM_OK && r.result == ST_RESULT_NOT_FOUND && r.version == 1);
	uint64_t seq_nf = r.seq_no;
	CHECK(seq_nf == 5);
	st_op again = index_op("zz", "{}");
	apply1(s, &again, &r);
	CHECK(r.err == CM_OK && r.result == ST_RESULT_CREATED && r.version == 2);

	/* A doc that does not parse under the mapping: CM_EMAPPING, not logged. */
	st_op bad = index_op("c", "{\"n\":\"not a number\"}");
	apply1(s, &bad, &r);
	CHECKF(r.err == CM_EMAPPING, "%s %s", cm_err_name(r.err), r.reason);
	st_op bad2 = index_op("c", "{\"k\":");
	apply1(s, &bad2, &r);
	CHECKF(r.err == CM_EMAPPING || r.err == CM_EPARSE, "%s", cm_err_name(r.err));
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	CHECK(st.max_seq_no == 6);

	/* if_seq_no on a missing doc */
	st_op cm = index_op("nope", "{}");
	cm.if_seq_no = 3;
	cm.if_primary_term = 1;
	apply1(s, &cm, &r);
	CHECK(r.err == CM_ECONFLICT);
	CHECKF(strstr(r.reason, "but no document was found") != NULL, "%s", r.reason);

	/* Large sources (their own arena block) round-trip through realtime get. */
	{
		size_t big = 300000;
		char *bs = malloc(big + 32);
		int l = sprintf(bs, "{\"body\":\"");
		for (size_t i = 0; i < big; i++)
			bs[l + i] = i % 7 == 6 ? ' ' : (char)('a' + i % 26);
		strcpy(bs + l + big, "\"}");
		st_op bo = index_op("big", bs);
		apply1(s, &bo, &r);
		CHECKF(r.err == CM_OK, "%s", r.reason);
		st_op so = index_op("small", "{\"k\":\"after-big\"}");
		apply1(s, &so, &r);
		cm_buf b1;
		cm_buf_init(&b1, CM_MEM_STORAGE);
		CHECK(st_shard_get(s, "big", 3, NULL, &b1) == CM_OK && b1.len == strlen(bs) &&
		      memcmp(b1.data, bs, b1.len) == 0);
		cm_buf_reset(&b1);
		CHECK(st_shard_get(s, "small", 5, NULL, &b1) == CM_OK && b1.len == 17 &&
		      memcmp(b1.data, "{\"k\":\"after-big\"}", 17) == 0);
		cm_buf_free(&b1);
		st_op d1 = {.type = ST_OP_DELETE,
		            .id = "big",
		            .id_len = 3,
		            .seq_no = ST_NO_SEQ,
		            .if_seq_no = ST_NO_SEQ};
		st_op d2 = d1;
		d2.id = "small";
		d2.id_len = 5;
		apply1(s, &d1, &r);
		apply1(s, &d2, &r);
		free(bs);
	}

	/* Realtime get sees unrefreshed writes, the reader does not. */
	st_doc_meta meta;
	cm_buf src;
	cm_buf_init(&src, CM_MEM_STORAGE);
	CHECK(st_shard_get(s, "a", 1, &meta, &src) == CM_OK);
	CHECK(meta.version == 3 && meta.seq_no == 2);
	CHECK(src.len == 9 && memcmp(src.data, "{\"k\":\"x\"}", 9) == 0);
	st_reader *r0 = st_shard_reader(s);
	CHECK(st_reader_doc_count(r0) == 0);
	REQUIRE(st_shard_refresh(s) == CM_OK);
	st_reader *r1 = st_shard_reader(s);
	CHECK(st_reader_doc_count(r1) == 3);
	CHECK(st_reader_doc_count(r0) == 0);
	/* Delete after refresh: the old reader keeps the doc. */
	st_op da = {.type = ST_OP_DELETE,
	            .id = "a",
	            .id_len = 1,
	            .seq_no = ST_NO_SEQ,
	            .if_seq_no = ST_NO_SEQ};
	apply1(s, &da, &r);
	CHECK(r.result == ST_RESULT_DELETED && r.version == 4);
	CHECK(st_shard_get(s, "a", 1, &meta, NULL) == CM_ENOTFOUND);
	CHECK(st_reader_doc_count(r1) == 3);
	REQUIRE(st_shard_refresh(s) == CM_OK);
	st_reader *r2 = st_shard_reader(s);
	CHECK(st_reader_doc_count(r2) == 2);
	CHECK(st_reader_doc_count(r1) == 3);
	/* Segments stay readable under a held reader even after a merge
	 * dropped them. */
	REQUIRE(st_shard_force_merge(s, 1) == CM_OK);
	st_reader *r3 = st_shard_reader(s);
	CHECK(st_reader_nsegments(r3) == 1 && st_reader_doc_count(r3) == 2);
	CHECK(st_reader_live(r3, 0) == NULL);
	cm_buf idb;
	cm_buf_init(&idb, CM_MEM_STORAGE);
	st_seg_txn *t;
	REQUIRE(st_seg_txn_begin(st_reader_segment(r1, 0), &t) == CM_OK);
	cm_buf_reset(&src);
	CHECK(st_stored_get(t, 0, &idb, &src) == CM_OK && src.len > 0);
	st_seg_txn_end(t);
	cm_buf_free(&idb);
	st_reader_release(r0);
	st_reader_release(r1);
	st_reader_release(r2);
	st_reader_release(r3);

	/* Only the live segment files remain once old readers are gone. */
	int segfiles = 0;
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "ls %s | grep -c '^seg-'", dir);
	FILE *p = popen(cmd, "r");
	if (p) {
		if (fscanf(p, "%d", &segfiles) != 1)
			segfiles = -1;
		pclose(p);
	}
	CHECKF(segfiles == 1, "segment files: %d", segfiles);

	/* Flush trims the log; reading below the trim point says so. */
	REQUIRE(st_shard_flush(s) == CM_OK);
	CHECK(st_shard_oplog_read(s, ST_NO_SEQ, NULL, NULL) == CM_ENOTFOUND);

	/* External version 0 is a version: an equal one conflicts, an internal
	 * write after it makes 1, and a reopened shard replays it as 0. */
	st_op zero = index_op("v0", "{\"k\":\"z\"}");
	zero.has_version = true;
	apply1(s, &zero, &r);
	CHECK(r.err == CM_OK && r.version == 0 && r.result == ST_RESULT_CREATED);
	apply1(s, &zero, &r);
	CHECK(r.err == CM_ECONFLICT);
	st_op zero2 = index_op("v0b", "{\"k\":\"z\"}");
	zero2.has_version = true;
	apply1(s, &zero2, &r);
	CHECK(r.err == CM_OK && r.version == 0);
	st_shard_close(s);
	s = open_shard(dir, map, NULL);
	apply1(s, &zero, &r);
	CHECK(r.err == CM_ECONFLICT);
	zero.has_version = false;
	apply1(s, &zero, &r);
	CHECK(r.err == CM_OK && r.version == 1 && r.result == ST_RESULT_UPDATED);
	st_shard_close(s);
	cm_buf_free(&src);
}

/* ---- replication from the log ---- */

typedef struct collect {
	st_op *ops;
	cm_buf *store;
	size_t n, cap;
} collect;

static int
collect_fn(void *ctx, const st_op *op, int64_t version)
{
	collect *c = ctx;
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 256;
		c->ops = realloc(c->ops, c->cap * sizeof(*c->ops));
		c->store = realloc(c->store, c->cap * sizeof(*c->store));
	}
	cm_buf *b = &c->store[c->n];
	cm_buf_init(b, CM_MEM_STORAGE);
	cm_buf_put(b, op->id, op->id_len);
	cm_buf_put(b, op->source ? op->source : "", op->source_len);
	st_op o = *op;
	o.version = version;
	c->ops[c->n++] = o;
	return 0;
}

static void
fix_ptrs(collect *c)
{
	for (size_t i = 0; i < c->n; i++) {
		c->ops[i].id = (const char *)c->store[i].data;
		c->ops[i].source = (const char *)c->store[i].data + c->ops[i].id_len;
	}
}

static void
compare_shards(st_shard *a, st_shard *b, const char *when)
{
	cm_buf sa, sb;
	cm_buf_init(&sa, CM_MEM_STORAGE);
	cm_buf_init(&sb, CM_MEM_STORAGE);
	for (int k = 0; k < NIDS; k++) {
		char id[16];
		mkid(k, id);
		st_doc_meta ma, mb;
		cm_buf_reset(&sa);
		cm_buf_reset(&sb);
		cm_err ea = st_shard_get(a, id, strlen(id), &ma, &sa);
		cm_err eb = st_shard_get(b, id, strlen(id), &mb, &sb);
		CHECKF(ea == eb, "%s: %s: %s vs %s", when, id, cm_err_name(ea), cm_err_name(eb));
		if (ea || eb)
			continue;
		CHECKF(ma.seq_no == mb.seq_no && ma.version == mb.version &&
		           ma.primary_term == mb.primary_term && sa.len == sb.len &&
		           memcmp(sa.data, sb.data, sa.len) == 0,
		       "%s: %s differs", when, id);
	}
	cm_buf_free(&sa);
	cm_buf_free(&sb);
}

static void
replication(const char *dir_a, const char *dir_b, st_mapping *map)
{
	st_shard *a = open_shard(dir_a, map, NULL);
	char ids[16], src[SRC_MAX];
	for (int i = 0; i < 400; i++) {
		int k = rndn(NIDS);
		mkid(k, ids);
		st_op op;
		if (rndn(5) == 0) {
			op = (st_op){.type = ST_OP_DELETE,
			             .id = ids,
			             .id_len = strlen(ids),
			             .seq_no = ST_NO_SEQ,
			             .if_seq_no = ST_NO_SEQ};
		} else {
			make_source(src, k);
			op = index_op(ids, src);
		}
		st_op_result r;
		apply1(a, &op, &r);
		REQUIRE(r.err == CM_OK);
		if (i == 150)
			REQUIRE(st_shard_refresh(a) == CM_OK);
	}
	collect c = {0};
	REQUIRE(st_shard_oplog_read(a, ST_NO_SEQ, collect_fn, &c) == CM_OK);
	CHECK(c.n == 400);
	fix_ptrs(&c);
	/* Partial read from the middle. */
	collect c2 = {0};
	REQUIRE(st_shard_oplog_read(a, 299, collect_fn, &c2) == CM_OK);
	CHECK(c2.n == 100 && c2.n > 0 && c2.ops[0].seq_no == 300);

	/* Replica: ops delivered out of order in small batches, each batch
	 * twice, with a refresh in the middle and a reopen. */
	st_shard *b = open_shard(dir_b, map, NULL);
	for (size_t i = 0; i + 1 < c.n; i++) {
		/* Local reordering, like concurrent batches racing. */
		size_t span = c.n - i < 40 ? c.n - i : 40;
		size_t j = i + (size_t)rndn((int)span);
		st_op t = c.ops[i];
		c.ops[i] = c.ops[j];
		c.ops[j] = t;
		cm_buf tb = c.store[i];
		c.store[i] = c.store[j];
		c.store[j] = tb;
	}
	st_op_result *res = calloc(c.n, sizeof(*res));
	for (size_t at = 0; at < c.n;) {
		size_t n = 1 + (size_t)rndn(30);
		if (at + n > c.n)
			n = c.n - at;
		REQUIRE(st_shard_apply(b, c.ops + at, n, res) == CM_OK);
		for (size_t i = 0; i < n; i++)
			CHECKF(res[i].err == CM_OK && res[i].seq_no == c.ops[at + i].seq_no,
			       "replica apply: %s", res[i].reason);
		REQUIRE(st_shard_apply(b, c.ops + at, n, res) == CM_OK);
		for (size_t i = 0; i < n; i++)
			CHECK(res[i].err == CM_OK && res[i].result == ST_RESULT_NOOP);
		at += n;
		if (at > 200 && at - n <= 200)
			REQUIRE(st_shard_refresh(b) == CM_OK);
	}
	compare_shards(a, b, "replica");
	st_shard_stats sa, sb;
	st_shard_stats_get(a, &sa);
	st_shard_stats_get(b, &sb);
	CHECK(sb.local_checkpoint == 399 && sb.max_seq_no == 399);
	st_shard_close(b);
	b = open_shard(dir_b, map, NULL);
	compare_shards(a, b, "replica reopened");
	REQUIRE(st_shard_refresh(a) == CM_OK);
	REQUIRE(st_shard_refresh(b) == CM_OK);
	st_shard_stats_get(a, &sa);
	st_shard_stats_get(b, &sb);
	CHECK(sa.docs == sb.docs);
	/* Flush trims the log up to the retention marker, and no further. */
	st_shard_set_oplog_retention(a, 299);
	REQUIRE(st_shard_flush(a) == CM_OK);
	collect c3 = {0};
	CHECK(st_shard_oplog_read(a, 299, collect_fn, &c3) == CM_OK && c3.n == 100);
	CHECK(st_shard_oplog_read(a, 250, collect_fn, &c3) == CM_ENOTFOUND);
	st_shard_set_oplog_retention(a, ST_NO_SEQ);
	REQUIRE(st_shard_flush(a) == CM_OK);
	size_t before = c3.n;
	CHECK(st_shard_oplog_read(a, 399, collect_fn, &c3) == CM_OK && c3.n == before);
	CHECK(st_shard_oplog_read(a, 300, collect_fn, &c3) == CM_ENOTFOUND);
	st_shard_close(a);
	a = open_shard(dir_a, map, NULL);
	CHECK(st_shard_oplog_read(a, 300, collect_fn, &c3) == CM_ENOTFOUND);
	compare_shards(a, b, "after trim and reopen");
	for (size_t i = 0; i < c3.n; i++)
		cm_buf_free(&c3.store[i]);
	free(c3.ops);
	free(c3.store);
	st_shard_close(a);
	st_shard_close(b);
	for (size_t i = 0; i < c.n; i++)
		cm_buf_free(&c.store[i]);
	for (size_t i = 0; i < c2.n; i++)
		cm_buf_free(&c2.store[i]);
	free(c.ops);
	free(c.store);
	free(c2.ops);
	free(c2.store);
	free(res);
}

/* ---- concurrency: writers, a refresher and searchers at once ---- */

#define CW 4
#define CW_OPS 1200

typedef struct cw_arg {
	st_shard *s;
	int w;
	uint64_t *seqs; /* CW_OPS per writer */
	char last[16][SRC_MAX];
	bool exists[16];
	bool stop;
} cw_arg;

static void *
cw_writer(void *p)
{
	cw_arg *a = p;
	uint64_t x = 0x1234567ull * (uint64_t)(a->w + 1);
	for (int i = 0; i < CW_OPS; i += 6) {
		st_op ops[6];
		st_op_result res[6];
		char ids[6][16], srcs[6][SRC_MAX];
		for (int j = 0; j < 6; j++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			int k = (int)((x >> 33) % 16);
			snprintf(ids[j], sizeof(ids[j]), "w%d-%d", a->w, k);
			bool del = ((x >> 20) & 7) == 0;
			snprintf(srcs[j], SRC_MAX, "{\"k\":\"w%d\",\"n\":%d}", a->w, i + j);
			ops[j] = (st_op){.type = del ? ST_OP_DELETE : ST_OP_INDEX,
			                 .id = ids[j],
			                 .id_len = strlen(ids[j]),
			                 .source = del ? NULL : srcs[j],
			                 .source_len = del ? 0 : strlen(srcs[j]),
			                 .seq_no = ST_NO_SEQ,
			                 .if_seq_no = ST_NO_SEQ};
			a->exists[k] = !del;
			if (!del)
				memcpy(a->last[k], srcs[j], SRC_MAX);
		}
		if (st_shard_apply(a->s, ops, 6, res) != CM_OK)
			return (void *)1;
		for (int j = 0; j < 6; j++) {
			if (res[j].err)
				return (void *)2;
			a->seqs[i + j] = res[j].seq_no;
		}
	}
	return NULL;
}

static void *
cw_refresher(void *p)
{
	cw_arg *a = p;
	int n = 0;
	while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
		st_shard_refresh(a->s);
		st_reader *r = st_shard_reader(a->s);
		uint64_t docs = 0;
		for (size_t i = 0; i < st_reader_nsegments(r); i++)
			docs += st_reader_live_count(r, i);
		if (docs != st_reader_doc_count(r))
			return (void *)1;
		st_reader_release(r);
		if (++n % 8 == 0)
			st_shard_force_merge(a->s, 2);
		usleep(2000);
	}
	return NULL;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void
concurrency(const char *dir, st_mapping *map, cm_pool *pool)
{
	st_shard *s = open_shard(dir, map, pool);
	cw_arg *args = calloc(CW + 1, sizeof(*args));
	uint64_t *seqs = calloc(CW * CW_OPS, sizeof(*seqs));
	pthread_t th[CW + 1];
	for (int w = 0; w <= CW; w++) {
		args[w].s = s;
		args[w].w = w;
		args[w].seqs = seqs + (size_t)w * CW_OPS;
	}
	pthread_create(&th[CW], NULL, cw_refresher, &args[CW]);
	for (int w = 0; w < CW; w++)
		pthread_create(&th[w], NULL, cw_writer, &args[w]);
	for (int w = 0; w < CW; w++) {
		void *rv;
		pthread_join(th[w], &rv);
		CHECK(rv == NULL);
	}
	__atomic_store_n(&args[CW].stop, true, __ATOMIC_RELEASE);
	void *rv;
	pthread_join(th[CW], &rv);
	CHECK(rv == NULL);
	/* seq_nos: unique and contiguous from 0 */
	qsort(seqs, CW * CW_OPS, sizeof(*seqs), cmp_u64);
	bool contiguous = true;
	for (size_t i = 0; i < CW * CW_OPS; i++)
		contiguous &= seqs[i] == i;
	CHECK(contiguous);
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	CHECK(st.log_batches == CW * CW_OPS / 6);
	CHECK(st.log_syncs <= st.log_batches);
	printf("concurrency: %d writers, %" PRIu64 " log batches shared %" PRIu64 " syncs, %" PRIu64
	       " refreshes, %" PRIu64 " merges\n",
	       CW, st.log_batches, st.log_syncs, st.refreshes, st.merges);
	for (int round = 0; round < 2; round++) {
		cm_buf src;
		cm_buf_init(&src, CM_MEM_STORAGE);
		for (int w = 0; w < CW; w++) {
			for (int k = 0; k < 16; k++) {
				char id[16];
				snprintf(id, sizeof(id), "w%d-%d", w, k);
				cm_buf_reset(&src);
				cm_err e = st_shard_get(s, id, strlen(id), NULL, &src);
				if (!args[w].exists[k]) {
					CHECKF(e == CM_ENOTFOUND, "%s should be gone", id);
					continue;
				}
				CHECKF(e == CM_OK && src.len == strlen(args[w].last[k]) &&
				           memcmp(src.data, args[w].last[k], src.len) == 0,
				       "%s: %s", id, cm_err_name(e));
			}
		}
		cm_buf_free(&src);
		st_shard_close(s);
		s = open_shard(dir, map, pool);
	}
	st_shard_close(s);
	free(args);
	free(seqs);
}

/* ---- flush compacts shard.mdb once the log is trimmed ---- */

static long
file_size(const char *dir, const char *name)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fclose(f);
	return n;
}

static void
compaction(const char *dir, st_mapping *map)
{
	st_shard *s = open_shard(dir, map, NULL);
	char body[600];
	memset(body, 'x', 500);
	body[500] = 0;
	static char srcs[100][620], ids[100][16];
	for (int b = 0; b < 40; b++) {
		st_op ops[100];
		st_op_result res[100];
		for (int i = 0; i < 100; i++) {
			snprintf(ids[i], sizeof(ids[i]), "c%d", b * 100 + i);
			snprintf(srcs[i], sizeof(srcs[i]), "{\"body\":\"%s %d\"}", body,
			         b * 100 + i);
			ops[i] = index_op(ids[i], srcs[i]);
		}
		REQUIRE(st_shard_apply(s, ops, 100, res) == CM_OK);
	}
	long before = file_size(dir, "shard.mdb");
	REQUIRE(st_shard_flush(s) == CM_OK);
	long after = file_size(dir, "shard.mdb");
	CHECKF(before > 2000000 && after < before / 4, "shard.mdb %ld -> %ld bytes", before, after);
	CHECK(file_size(dir, "shard.mdb.compact.tmp") < 0);
	/* Still a working shard: log, reads, writes, reopen. */
	CHECK(st_shard_oplog_read(s, 100, NULL, NULL) == CM_ENOTFOUND);
	collect c = {0};
	CHECK(st_shard_oplog_read(s, 3999, collect_fn, &c) == CM_OK && c.n == 0);
	st_op one = index_op("c7", "{\"k\":\"again\"}");
	st_op_result r;
	apply1(s, &one, &r);
	CHECK(r.err == CM_OK && r.seq_no == 4000 && r.version == 2);
	CHECK(st_shard_oplog_read(s, 3999, collect_fn, &c) == CM_OK && c.n == 1);
	st_shard_close(s);
	s = open_shard(dir, map, NULL);
	st_doc_meta meta;
	cm_buf src;
	cm_buf_init(&src, CM_MEM_STORAGE);
	CHECK(st_shard_get(s, "c7", 2, &meta, &src) == CM_OK && meta.version == 2 &&
	      src.len == strlen("{\"k\":\"again\"}"));
	cm_buf_reset(&src);
	CHECK(st_shard_get(s, "c3999", 5, &meta, &src) == CM_OK && meta.seq_no == 3999);
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	CHECK(st.docs == 4000 && st.max_seq_no == 4000);
	cm_buf_free(&src);
	for (size_t i = 0; i < c.n; i++)
		cm_buf_free(&c.store[i]);
	free(c.ops);
	free(c.store);
	st_shard_close(s);
}

/* ---- replication support: global checkpoint, stale ops, snapshots ---- */

static st_shard *
open_shard_repl(const char *dir, st_mapping *m, cm_pool *pool, bool replicated)
{
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.merge_pool = pool;
	o.merge_factor = 3;
	o.replicated = replicated;
	st_shard *s = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err e = st_shard_open(dir, m, &o, &s, &err);
	if (e)
		fprintf(stderr, "open %s: %s %s\n", dir, cm_err_name(e), err.reason);
	REQUIRE(e == CM_OK);
	return s;
}

static void
collect_free(collect *c)
{
	for (size_t i = 0; i < c->n; i++)
		cm_buf_free(&c->store[i]);
	free(c->ops);
	free(c->store);
	memset(c, 0, sizeof(*c));
}

/* Ops in the log above `from`: -1 when the log was trimmed past it, else
 * how many, and whether their seq_nos run from+1 on without a gap. */
static long
log_count(st_shard *s, uint64_t from, bool *contiguous)
{
	collect c = {0};
	cm_err e = st_shard_oplog_read(s, from, collect_fn, &c);
	long n = e == CM_OK ? (long)c.n : -1;
	if (contiguous) {
		*contiguous = true;
		uint64_t want = from == ST_NO_SEQ ? 0 : from + 1;
		for (size_t i = 0; i < c.n; i++)
			*contiguous &= c.ops[i].seq_no == want + i;
	}
	collect_free(&c);
	return n;
}

static void
apply_n(st_shard *s, int from, int n)
{
	char ids[16], src[SRC_MAX];
	for (int i = from; i < from + n; i++) {
		int k = i % NIDS;
		mkid(k, ids);
		st_op op;
		if (i % 7 == 3) {
			op = (st_op){.type = ST_OP_DELETE,
			             .id = ids,
			             .id_len = strlen(ids),
			             .seq_no = ST_NO_SEQ,
			             .if_seq_no = ST_NO_SEQ};
		} else {
			make_source(src, k);
			op = index_op(ids, src);
		}
		st_op_result r;
		apply1(s, &op, &r);
		REQUIRE(r.err == CM_OK);
	}
}

static uint64_t
gcp_of(st_shard *s)
{
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	return st.global_checkpoint;
}

static void
global_checkpoint(const char *dir, const char *dir_solo, st_mapping *map)
{
	st_shard *s = open_shard_repl(dir, map, NULL, true);
	CHECK(gcp_of(s) == ST_NO_SEQ);
	apply_n(s, 0, 100); /* seq 0..99 */
	/* Replicated, no gcp yet: a flush commits but keeps the whole log. */
	REQUIRE(st_shard_flush(s) == CM_OK);
	bool contig;
	CHECK(log_count(s, ST_NO_SEQ, &contig) == 100 && contig);

	/* Only forward; ST_NO_SEQ is no value; out of range is refused. */
	CHECK(st_shard_set_global_checkpoint(s, 40) == CM_OK && gcp_of(s) == 40);
	CHECK(st_shard_set_global_checkpoint(s, 30) == CM_OK && gcp_of(s) == 40);
	CHECK(st_shard_set_global_checkpoint(s, ST_NO_SEQ) == CM_OK && gcp_of(s) == 40);
	CHECK(st_shard_set_global_checkpoint(s, (uint64_t)INT64_MAX + 5) == CM_EINVAL);
	CHECK(gcp_of(s) == 40);

	/* Flush trims up to the gcp (the commit is at 99), no further. */
	REQUIRE(st_shard_flush(s) == CM_OK);
	CHECK(log_count(s, 39, NULL) == -1);
	CHECK(log_count(s, 40, &contig) == 59 && contig);

	/* The retention marker below the gcp holds the log at the marker. */
	REQUIRE(st_shard_set_global_checkpoint(s, 70) == CM_OK);
	st_shard_set_oplog_retention(s, 55);
	REQUIRE(st_shard_flush(s) == CM_OK);
	CHECK(log_count(s, 54, NULL) == -1);
	CHECK(log_count(s, 55, &contig) == 44 && contig);
	st_shard_set_oplog_retention(s, ST_NO_SEQ);
	REQUIRE(st_shard_flush(s) == CM_OK);
	CHECK(log_count(s, 69, NULL) == -1);
	CHECK(log_count(s, 70, &contig) == 29 && contig);

	/* Clamped to the local checkpoint (99), persisted across close/open. */
	CHECK(st_shard_set_global_checkpoint(s, 1000) == CM_OK && gcp_of(s) == 99);
	st_shard_close(s);
	s = open_shard_repl(dir, map, NULL, true);
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	CHECK(st.global_checkpoint == 99 && st.local_checkpoint == 99);
	/* Unsynced on its own, but kept when the process goes on. */
	apply_n(s, 100, 20); /* seq 100..119, not refreshed */
	CHECK(st_shard_set_global_checkpoint(s, 110) == CM_OK && gcp_of(s) == 110);
	st_shard_close(s);
	s = open_shard_repl(dir, map, NULL, true);
	st_shard_stats_get(s, &st);
	CHECK(st.global_checkpoint == 110 && st.local_checkpoint == 119 &&
	      st.committed_seq_no == 99);
	/* The copy reads its own log from its persisted gcp after a restart. */
	CHECK(log_count(s, 110, &contig) == 9 && contig);
	CHECK(log_count(s, 70, &contig) == 49 && contig);
	REQUIRE(st_shard_flush(s) == CM_OK);
	CHECK(log_count(s, 109, NULL) == -1);
	CHECK(log_count(s, 110, &contig) == 9 && contig);
	st_shard_close(s);

	/* A solo shard without a gcp trims to its commit as before; once a
	 * gcp is set, that bounds it too. */
	s = open_shard_repl(dir_solo, map, NULL, false);
	apply_n(s, 0, 50);
	REQUIRE(st_shard_flush(s) == CM_OK);
	CHECK(log_count(s, 48, NULL) == -1 && log_count(s, 49, NULL) == 0);
	apply_n(s, 50, 50);
	REQUIRE(st_shard_set_global_checkpoint(s, 60) == CM_OK);
	REQUIRE(st_shard_flush(s) == CM_OK);
	CHECK(log_count(s, 59, NULL) == -1);
	CHECK(log_count(s, 60, &contig) == 39 && contig);
	st_shard_close(s);
}

/* A replica that got ops out of order logs the older ones as stale
 * no-ops; its log above the gcp still holds every op with its term. */
static void
stale_ops(const char *dir_p, const char *dir_r, st_mapping *map)
{
	st_shard *a = open_shard(dir_p, map, NULL);
	char ids[16], src[SRC_MAX];
	for (int i = 0; i < 90; i++) {
		if (i == 30)
			st_shard_set_primary_term(a, 2);
		if (i == 60)
			st_shard_set_primary_term(a, 3);
		int k = rndn(5); /* few ids: many ops per id */
		mkid(k, ids);
		make_source(src, k);
		st_op op = index_op(ids, src);
		if (i % 9 == 4)
			op = (st_op){.type = ST_OP_DELETE,
			             .id = ids,
			             .id_len = strlen(ids),
			             .seq_no = ST_NO_SEQ,
			             .if_seq_no = ST_NO_SEQ};
		st_op_result r;
		apply1(a, &op, &r);
		REQUIRE(r.err == CM_OK);
	}
	collect c = {0};
	REQUIRE(st_shard_oplog_read(a, ST_NO_SEQ, collect_fn, &c) == CM_OK && c.n == 90);
	fix_ptrs(&c);

	/* Blocks of ten, each delivered newest first, one op per batch. */
	st_shard *b = open_shard_repl(dir_r, map, NULL, true);
	int stale = 0;
	for (size_t blk = 0; blk < c.n; blk += 10)
		for (size_t j = 10; j-- > 0;) {
			st_op_result r;
			REQUIRE(st_shard_apply(b, &c.ops[blk + j], 1, &r) == CM_OK);
			CHECKF(r.err == CM_OK, "replica: %s", r.reason);
			stale += r.result == ST_RESULT_NOOP;
		}
	CHECKF(stale > 10, "stale ops: %d", stale);
	compare_shards(a, b, "stale replica");
	REQUIRE(st_shard_set_global_checkpoint(b, 25) == CM_OK);
	REQUIRE(st_shard_refresh(b) == CM_OK);
	REQUIRE(st_shard_flush(b) == CM_OK);

	for (int round = 0; round < 2; round++) {
		collect rc = {0};
		CHECK(st_shard_oplog_read(b, 24, collect_fn, &rc) == CM_ENOTFOUND);
		collect_free(&rc);
		REQUIRE(st_shard_oplog_read(b, 25, collect_fn, &rc) == CM_OK);
		CHECKF(rc.n == 64, "replica log above gcp: %zu ops", rc.n);
		fix_ptrs(&rc);
		for (size_t i = 0; i < rc.n && i < 64; i++) {
			const st_op *x = &rc.ops[i], *y = &c.ops[26 + i];
			CHECKF(x->seq_no == y->seq_no && x->primary_term == y->primary_term &&
			           x->type == y->type && x->version == y->version &&
			           x->id_len == y->id_len && memcmp(x->id, y->id, x->id_len) == 0 &&
			           x->source_len == y->source_len &&
			           memcmp(x->source, y->source, x->source_len) == 0,
			       "replica log op %zu (seq %" PRIu64 " term %" PRIu64
			       ") differs from the primary's",
			       i, x->seq_no, x->primary_term);
		}
		collect_free(&rc);
		/* After a restart, from the persisted gcp. */
		st_shard_close(b);
		b = open_shard_repl(dir_r, map, NULL, true);
		CHECK(gcp_of(b) == 25);
	}
	compare_shards(a, b, "stale replica reopened");
	st_shard_close(a);
	st_shard_close(b);
	collect_free(&c);
}

static bool
file_exists(const char *dir, const char *name)
{
	char path[1200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

static void
compare_stats(st_shard *a, st_shard *b, const char *when)
{
	st_shard_stats x, y;
	st_shard_stats_get(a, &x);
	st_shard_stats_get(b, &y);
	/* Not the commit: that follows each shard's own refreshes. */
	CHECKF(x.max_seq_no == y.max_seq_no && x.local_checkpoint == y.local_checkpoint &&
	           x.global_checkpoint == y.global_checkpoint && x.primary_term == y.primary_term,
	       "%s: seq %" PRIu64 "/%" PRIu64 " ckp %" PRIu64 "/%" PRIu64 " gcp %" PRIu64
	       "/%" PRIu64 " term %" PRIu64 "/%" PRIu64,
	       when, x.max_seq_no, y.max_seq_no, x.local_checkpoint, y.local_checkpoint,
	       x.global_checkpoint, y.global_checkpoint, x.primary_term, y.primary_term);
}

/* Writes the listed files of `from` into a fresh `to`, as a receiving
 * node would after a transfer. */
static void
transfer(const char *from, const char *to)
{
	char **names;
	size_t n;
	REQUIRE(st_shard_dir_files(from, &names, &n) == CM_OK);
	REQUIRE(cm_mkdir_p(to) == CM_OK);
	for (size_t i = 0; i < n; i++) {
		char src[1200], dst[1200];
		snprintf(src, sizeof(src), "%s/%s", from, names[i]);
		snprintf(dst, sizeof(dst), "%s/%s", to, names[i]);
		FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
		REQUIRE(in && out);
		char buf[65536];
		size_t k;
		while ((k = fread(buf, 1, sizeof(buf), in)) > 0)
			REQUIRE(fwrite(buf, 1, k, out) == k);
		fclose(in);
		REQUIRE(fclose(out) == 0);
	}
	st_shard_dir_files_free(names, n);
}

static void
snapshot_basic(const char *base, st_mapping *map)
{
	char dir[700], copy[700], moved[700];
	snprintf(dir, sizeof(dir), "%s/snap-src", base);
	snprintf(copy, sizeof(copy), "%s/snap/copy", base); /* parent made too */
	snprintf(moved, sizeof(moved), "%s/snap-moved", base);
	st_shard *a = open_shard_repl(dir, map, NULL, true);
	apply_n(a, 0, 150);
	REQUIRE(st_shard_refresh(a) == CM_OK);
	st_shard_set_primary_term(a, 4);
	apply_n(a, 150, 150);
	REQUIRE(st_shard_refresh(a) == CM_OK);
	REQUIRE(st_shard_set_global_checkpoint(a, 200) == CM_OK);
	apply_n(a, 300, 40); /* only in the log and the buffer */

	uint64_t max = 0;
	cm_error err;
	cm_error_clear(&err);
	cm_err e = st_shard_snapshot(a, copy, &max, &err);
	CHECKF(e == CM_OK, "snapshot: %s", err.reason);
	CHECK(max == 339);
	cm_error_clear(&err);
	CHECK(st_shard_snapshot(a, copy, &max, &err) == CM_EEXISTS && max == ST_NO_SEQ);
	CHECK(file_exists(copy, "shard.mdb"));

	/* The listing: shard.mdb and the committed segments, no lock file. */
	char **names;
	size_t n;
	REQUIRE(st_shard_dir_files(copy, &names, &n) == CM_OK);
	st_reader *r = st_shard_reader(a);
	CHECKF(n == st_reader_nsegments(r) + 1, "%zu files, %zu segments", n,
	       st_reader_nsegments(r));
	st_reader_release(r);
	bool only_ours = true;
	for (size_t i = 0; i < n; i++)
		only_ours &= strcmp(names[i], "shard.mdb") == 0 || strncmp(names[i], "seg-", 4) == 0;
	CHECK(only_ours);
	st_shard_dir_files_free(names, n);
	char **none;
	CHECK(st_shard_dir_files(moved, &none, &n) == CM_ENOTFOUND && n == 0);

	/* Writes after the snapshot are not in it. */
	apply_n(a, 340, 10);

	/* Open the copy where it lies, and again after a "transfer". */
	transfer(copy, moved);
	const char *where[2] = {copy, moved};
	for (int w = 0; w < 2; w++) {
		st_shard *b = open_shard_repl(where[w], map, NULL, true);
		st_shard_stats sb;
		st_shard_stats_get(b, &sb);
		CHECKF(sb.max_seq_no == 339 && sb.local_checkpoint == 339 &&
		           sb.committed_seq_no == 339 && sb.global_checkpoint == 200 &&
		           sb.primary_term == 4,
		       "copy %d: seq %" PRIu64 " ckp %" PRIu64 " commit %" PRIu64 " gcp %" PRIu64
		       " term %" PRIu64,
		       w, sb.max_seq_no, sb.local_checkpoint, sb.committed_seq_no,
		       sb.global_checkpoint, sb.primary_term);
		/* The retained log came along: ops above the gcp, as the source has
		 * them. */
		bool contig;
		CHECK(log_count(b, 200, &contig) == 139 && contig);
		/* Catch up on what the source took after the snapshot, from its
		 * log, and compare. */
		collect c = {0};
		REQUIRE(st_shard_oplog_read(a, sb.max_seq_no, collect_fn, &c) == CM_OK);
		CHECK(c.n == 10);
		fix_ptrs(&c);
		st_op_result res[16];
		REQUIRE(st_shard_apply(b, c.ops, c.n, res) == CM_OK);
		for (size_t i = 0; i < c.n; i++)
			CHECK(res[i].err == CM_OK && res[i].result != ST_RESULT_NOOP);
		collect_free(&c);
		compare_shards(a, b, w ? "moved copy" : "copy");
		compare_stats(a, b, w ? "moved copy" : "copy");
		REQUIRE(st_shard_refresh(a) == CM_OK);
		REQUIRE(st_shard_refresh(b) == CM_OK);
		st_shard_stats sa;
		st_shard_stats_get(a, &sa);
		st_shard_stats_get(b, &sb);
		CHECK(sa.docs == sb.docs && sb.docs > 0);
		st_shard_close(b);
	}
	st_shard_close(a);
}

/* ---- snapshot while writers, refreshes and merges run ---- */

#define SW 2
#define SW_OPS 1500

typedef struct sw_arg {
	st_shard *s;
	int w;
	_Atomic long acked;   /* ops [0, acked) of this writer are acknowledged */
	uint64_t seq[SW_OPS]; /* seq_no of each op */
} sw_arg;

static void *
sw_writer(void *p)
{
	sw_arg *a = p;
	for (int i = 0; i < SW_OPS; i += 10) {
		st_op ops[10];
		st_op_result res[10];
		char ids[10][24], srcs[10][64];
		for (int j = 0; j < 10; j++) {
			snprintf(ids[j], sizeof(ids[j]), "s%d-%d", a->w, i + j);
			snprintf(srcs[j], sizeof(srcs[j]), "{\"k\":\"s%d\",\"n\":%d}", a->w, i + j);
			ops[j] = index_op(ids[j], srcs[j]);
		}
		if (st_shard_apply(a->s, ops, 10, res) != CM_OK)
			return (void *)1;
		for (int j = 0; j < 10; j++) {
			if (res[j].err)
				return (void *)2;
			a->seq[i + j] = res[j].seq_no;
		}
		atomic_store(&a->acked, i + 10);
	}
	return NULL;
}

static void
snapshot_concurrent(const char *base, st_mapping *map, cm_pool *pool)
{
	char dir[700];
	snprintf(dir, sizeof(dir), "%s/snapc-src", base);
	st_shard *s = open_shard(dir, map, pool);
	sw_arg *args = calloc(SW, sizeof(*args));
	cw_arg ref = {.s = s};
	pthread_t th[SW + 1];
	pthread_create(&th[SW], NULL, cw_refresher, &ref);
	for (int w = 0; w < SW; w++) {
		args[w].s = s;
		args[w].w = w;
		pthread_create(&th[w], NULL, sw_writer, &args[w]);
	}
	enum { NSNAP = 4 };
	long acked[NSNAP][SW];
	uint64_t maxs[NSNAP];
	int nsnap = 0;
	while (nsnap < NSNAP) {
		usleep(20000);
		for (int w = 0; w < SW; w++)
			acked[nsnap][w] = atomic_load(&args[w].acked);
		char copy[700];
		snprintf(copy, sizeof(copy), "%s/snapc-%d", base, nsnap);
		cm_error err;
		cm_error_clear(&err);
		uint64_t t0 = cm_now_ns();
		cm_err e = st_shard_snapshot(s, copy, &maxs[nsnap], &err);
		CHECKF(e == CM_OK, "snapshot %d: %s", nsnap, err.reason);
		printf("snapshot %d: up to seq_no %" PRIu64 " in %.1f ms\n", nsnap, maxs[nsnap],
		       (double)(cm_now_ns() - t0) / 1e6);
		nsnap++;
	}
	for (int w = 0; w < SW; w++) {
		void *rv;
		pthread_join(th[w], &rv);
		CHECK(rv == NULL);
	}
	atomic_store(&ref.stop, true);
	void *rv;
	pthread_join(th[SW], &rv);
	CHECK(rv == NULL);
	st_shard_stats ss;
	st_shard_stats_get(s, &ss);
	printf("snapshots under load: source made %" PRIu64 " refreshes and %" PRIu64
	       " merges meanwhile\n",
	       ss.refreshes, ss.merges);

	int replayed_any = 0;
	cm_buf src;
	cm_buf_init(&src, CM_MEM_STORAGE);
	for (int k = 0; k < nsnap; k++) {
		char copy[700];
		snprintf(copy, sizeof(copy), "%s/snapc-%d", base, k);
		st_shard *b = open_shard(copy, map, pool);
		st_shard_stats st;
		st_shard_stats_get(b, &st);
		/* A primary logs in seq_no order: the copy holds exactly the ops up
		 * to what the snapshot reported, no gap. */
		CHECKF(st.max_seq_no == maxs[k] && st.local_checkpoint == maxs[k],
		       "copy %d: max %" PRIu64 " ckp %" PRIu64 " reported %" PRIu64, k,
		       st.max_seq_no, st.local_checkpoint, maxs[k]);
		replayed_any += st.committed_seq_no < st.max_seq_no;
		long missing = 0, extra = 0, wrong = 0;
		for (int w = 0; w < SW; w++) {
			for (long i = 0; i < SW_OPS; i++) {
				char id[24], want[64];
				snprintf(id, sizeof(id), "s%d-%ld", w, i);
				snprintf(want, sizeof(want), "{\"k\":\"s%d\",\"n\":%ld}", w, i);
				bool in = args[w].seq[i] <= maxs[k];
				st_doc_meta meta;
				cm_buf_reset(&src);
				cm_err e = st_shard_get(b, id, strlen(id), &meta, &src);
				if (i < acked[k][w] && !in)
					wrong++; /* acknowledged before, yet beyond the copy */
				if (in && e != CM_OK)
					missing++;
				else if (!in && e != CM_ENOTFOUND)
					extra++;
				else if (in && (meta.seq_no != args[w].seq[i] || src.len != strlen(want) ||
				                memcmp(src.data, want, src.len) != 0))
					wrong++;
			}
		}
		CHECKF(missing == 0 && extra == 0 && wrong == 0,
		       "copy %d: %ld missing, %ld extra, %ld wrong", k, missing, extra, wrong);
		REQUIRE(st_shard_refresh(b) == CM_OK);
		st_shard_stats_get(b, &st);
		CHECKF(st.docs == maxs[k] + 1, "copy %d: %" PRIu64 " docs", k, st.docs);
		st_shard_close(b);
	}
	/* Writers never pause, so ops land between the snapshot's flush and
	 * its copy: those reach the copy through its log alone. */
	CHECK(replayed_any > 0);
	printf("snapshots under load: %d of %d copies replayed log ops above their commit\n",
	       replayed_any, nsnap);
	cm_buf_free(&src);
	st_shard_close(s);
	free(args);
}

/* ---- kill -9 while the gcp moves: the log stays readable from it ----
 * (a few short trials: each batch and flush is synced, slow on a loaded
 * machine) */

typedef struct gcp_rec {
	uint64_t gcp, acked; /* gcp as the shard stored it; highest acknowledged seq_no */
} gcp_rec;

static void
gcp_child(const char *dir, st_mapping *map, int wfd)
{
	st_shard *s = open_shard_repl(dir, map, NULL, true);
	st_shard_stats st;
	st_shard_stats_get(s, &st);
	int base = st.max_seq_no == ST_NO_SEQ ? 0 : (int)st.max_seq_no + 1;
	for (int b = 0;; b++) {
		char ids[10][16], srcs[10][48];
		st_op ops[10];
		st_op_result res[10];
		for (int j = 0; j < 10; j++) {
			snprintf(ids[j], sizeof(ids[j]), "g%d", (base + b * 10 + j) % 500);
			snprintf(srcs[j], sizeof(srcs[j]), "{\"n\":%d}", base + b * 10 + j);
			ops[j] = index_op(ids[j], srcs[j]);
		}
		if (st_shard_apply(s, ops, 10, res) != CM_OK)
			_exit(2);
		/* The primary's gcp trails what this copy holds. */
		uint64_t acked = res[9].seq_no;
		if (acked >= 25 && st_shard_set_global_checkpoint(s, acked - 25) != CM_OK)
			_exit(3);
		st_shard_stats_get(s, &st);
		gcp_rec r = {st.global_checkpoint, acked};
		if (write(wfd, &r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(4);
		if (b % 5 == 4 && st_shard_flush(s) != CM_OK)
			_exit(5);
	}
}

static void
gcp_crash(const char *dir, st_mapping *map)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (int trial = 0; trial < 4; trial++) {
		int pfd[2];
		REQUIRE(pipe(pfd) == 0);
		fflush(NULL);
		/* The child is this program started again: a fork alone would
		 * copy the merge scheduler's locks in whatever state its threads
		 * held them, and the child could wait on one for ever. */
		char fd[16];
		snprintf(fd, sizeof(fd), "%d", pfd[1]);
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			execl("/proc/self/exe", "shard_test", "--gcp-child", dir, fd, (char *)NULL);
			_exit(127);
		}
		close(pfd[1]);
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		int target = 10 + (int)((seed >> 33) % 30); /* batches before the kill */
		gcp_rec last = {ST_NO_SEQ, ST_NO_SEQ}, r;
		int got = 0;
		while (got < target && read(pfd[0], &r, sizeof(r)) == (ssize_t)sizeof(r)) {
			last = r;
			got++;
		}
		kill(pid, SIGKILL);
		int status;
		waitpid(pid, &status, 0);
		/* Records written before the kill may still sit in the pipe. */
		while (read(pfd[0], &r, sizeof(r)) == (ssize_t)sizeof(r))
			last = r;
		close(pfd[0]);
		CHECKF(WIFSIGNALED(status), "child exited with %d", WEXITSTATUS(status));

		st_shard *s = open_shard_repl(dir, map, NULL, true);
		st_shard_stats st;
		st_shard_stats_get(s, &st);
		CHECKF(st.global_checkpoint != ST_NO_SEQ && st.global_checkpoint >= last.gcp &&
		           st.global_checkpoint <= st.local_checkpoint &&
		           st.local_checkpoint >= last.acked,
		       "trial %d: gcp %" PRIu64 " (reported %" PRIu64 "), ckp %" PRIu64
		       " (acked %" PRIu64 ")",
		       trial, st.global_checkpoint, last.gcp, st.local_checkpoint, last.acked);
		bool contig;
		long n = log_count(s, st.global_checkpoint, &contig);
		CHECKF(n >= 0 && contig && (uint64_t)n == st.max_seq_no - st.global_checkpoint,
		       "trial %d: log from gcp %" PRIu64 ": %ld ops, max %" PRIu64, trial,
		       st.global_checkpoint, n, st.max_seq_no);
		st_shard_close(s);
	}
}

/* ---- merge policy ---- */

static void
policy(void)
{
	uint64_t sizes[] = {100, 120, 5000000, 90, 110, 4000000, 80};
	size_t out[8];
	size_t k = st_merge_pick_tiered(sizes, NULL, 7, 3, 1000, out);
	CHECK(k == 3);
	for (size_t i = 0; i < k; i++)
		CHECK(sizes[out[i]] < 1000);
	bool busy[7] = {true, true, false, true, false, false, false};
	CHECK(st_merge_pick_tiered(sizes, busy, 7, 3, 1000, out) == 0);
	CHECK(st_merge_pick_forced(sizes, NULL, 7, 1, out) == 7);
	CHECK(st_merge_pick_forced(sizes, NULL, 7, 5, out) == 3);
	CHECK(st_merge_pick_forced(sizes, NULL, 3, 5, out) == 0);
	bool dels[1] = {true};
	CHECK(st_merge_pick_forced(sizes, dels, 1, 1, out) == 1);
}

/* Nested objects: hidden docs before their root, invisible to the
 * reader's live docs and counts, dropped with their root by refresh
 * writes (buffer deletes), merges (segment deletes, and a delete that
 * lands while the merge runs is not modelled here) and late deletes. */
static uint32_t
popcount_bits(const uint64_t *b, uint32_t n)
{
	uint32_t c = 0;
	for (uint32_t i = 0; b && i < n; i++)
		c += st_bit_get(b, i);
	return c;
}

static void
nested_docs(const char *dir, cm_pool *pool)
{
	st_mapping *m = mapping_of("{\"properties\":{\"c\":{\"type\":\"nested\","
	                           "\"properties\":{\"a\":{\"type\":\"keyword\"}}}}}");
	cm_error err;
	cm_error_clear(&err);
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.merge_pool = pool;
	o.background_merges = false;
	st_shard *s;
	REQUIRE(st_shard_open(dir, m, &o, &s, &err) == CM_OK);
	/* n1: 2 objects, n2: 1, n3: 3; then n2 replaced (buffer delete) */
	const char *src[] = {"{\"c\":[{\"a\":\"x\"},{\"a\":\"y\"}]}", "{\"c\":{\"a\":\"z\"}}",
	                     "{\"c\":[{\"a\":\"x\"},{\"a\":\"x\"},{\"a\":\"w\"}]}", "{\"c\":[]}"};
	const char *ids[] = {"n1", "n2", "n3", "n2"};
	for (int i = 0; i < 4; i++) {
		st_op op = {.type = ST_OP_INDEX,
		            .id = ids[i],
		            .id_len = 2,
		            .source = src[i],
		            .source_len = strlen(src[i]),
		            .seq_no = ST_NO_SEQ,
		            .if_seq_no = ST_NO_SEQ};
		st_op_result r;
		REQUIRE(st_shard_apply(s, &op, 1, &r) == CM_OK && r.err == CM_OK);
		if (i == 1)
			REQUIRE(st_shard_refresh(s) == CM_OK);
	}
	REQUIRE(st_shard_refresh(s) == CM_OK);
	st_reader *r = st_shard_reader(s);
	CHECK(st_reader_doc_count(r) == 3);
	uint32_t nested = 0, roots = 0;
	for (size_t i = 0; i < st_reader_nsegments(r); i++) {
		uint32_t md = st_segment_max_doc(st_reader_segment(r, i));
		nested += popcount_bits(st_reader_nested_live(r, i), md);
		roots += st_reader_live_count(r, i);
	}
	CHECK(roots == 3);
	CHECK(nested == 5); /* n1's 2, n3's 3; the replaced n2's object is gone */
	st_reader_release(r);
	/* delete n3 (in a segment), then merge everything into one */
	st_op del = {.type = ST_OP_DELETE,
	             .id = "n3",
	             .id_len = 2,
	             .seq_no = ST_NO_SEQ,
	             .if_seq_no = ST_NO_SEQ};
	st_op_result dr;
	REQUIRE(st_shard_apply(s, &del, 1, &dr) == CM_OK && dr.err == CM_OK);
	REQUIRE(st_shard_refresh(s) == CM_OK);
	REQUIRE(st_shard_force_merge(s, 1) == CM_OK);
	r = st_shard_reader(s);
	CHECK(st_reader_nsegments(r) == 1);
	if (st_reader_nsegments(r) == 1) {
		const st_segment *seg = st_reader_segment(r, 0);
		CHECK(st_segment_max_doc(seg) == 4); /* n1 + 2 objects, n2 */
		CHECK(st_segment_nested_count(seg) == 2);
		CHECK(st_reader_live_count(r, 0) == 2);
		CHECK(popcount_bits(st_reader_nested_live(r, 0), 4) == 2);
		/* the block structure: objects right before their root */
		const uint64_t *nb = st_segment_nested(seg);
		CHECK(nb && st_bit_get(nb, 0) && st_bit_get(nb, 1) && !st_bit_get(nb, 2) &&
		      !st_bit_get(nb, 3));
	}
	st_reader_release(r);
	st_shard_close(s);
	st_mapping_unref(m);
}

/* ---- a batch spread over indexing buffers, against the same batches
 * applied by one thread into one buffer ---- */

#define PM_IDS 120

static st_mapping *
pm_mapping(void)
{
	return mapping_of("{\"properties\":{\"k\":{\"type\":\"keyword\"},\"n\":{\"type\":\"long\"},"
	                  "\"body\":{\"type\":\"text\"},\"c\":{\"type\":\"nested\","
	                  "\"properties\":{\"a\":{\"type\":\"keyword\"}}}}}");
}

static void
pm_source(char *out, size_t cap, int i)
{
	int kind = rndn(100);
	if (kind < 2) {
		snprintf(out, cap, "{\"k\":"); /* malformed: refused while parsing */
	} else if (kind < 4) {
		snprintf(out, cap, "{\"n\":\"not a number %d\"}", i); /* refused while parsing */
	} else if (kind < 6) {
		/* an immense keyword term: refused while its buffer adds it */
		int len = snprintf(out, cap, "{\"k\":\"");
		while (len < 700)
			out[len++] = 'x';
		snprintf(out + len, cap - (size_t)len, "\",\"n\":%d}", i);
	} else if (kind < 20) {
		snprintf(out, cap, "{\"k\":\"v%d\",\"c\":[{\"a\":\"x%d\"},{\"a\":\"y\"}],\"n\":%d}",
		         rndn(9), rndn(5), i);
	} else {
		snprintf(out, cap, "{\"k\":\"v%d\",\"n\":%d,\"body\":\"fox %d dog\"}", rndn(9), i,
		         rndn(30));
	}
}

static bool
pm_same_gets(st_shard *a, st_shard *b)
{
	bool same = true;
	cm_buf sa, sb;
	cm_buf_init(&sa, CM_MEM_STORAGE);
	cm_buf_init(&sb, CM_MEM_STORAGE);
	for (int k = 0; k < PM_IDS; k++) {
		char id[16];
		snprintf(id, sizeof(id), "p%d", k);
		st_doc_meta ma = {0}, mb = {0};
		cm_buf_reset(&sa);
		cm_buf_reset(&sb);
		cm_err ea = st_shard_get(a, id, strlen(id), &ma, &sa);
		cm_err eb = st_shard_get(b, id, strlen(id), &mb, &sb);
		bool ok = ea == eb && ma.seq_no == mb.seq_no && ma.version == mb.version &&
		          ma.primary_term == mb.primary_term && sa.len == sb.len &&
		          (sa.len == 0 || memcmp(sa.data, sb.data, sa.len) == 0);
		CHECKF(ok, "get %s: %s/%s seq %" PRIu64 "/%" PRIu64 " version %" PRId64 "/%" PRId64
		           " source %.*s / %.*s",
		       id, cm_err_name(ea), cm_err_name(eb), ma.seq_no, mb.seq_no, ma.version,
		       mb.version, (int)(sa.len > 60 ? 60 : sa.len), (const char *)sa.data,
		       (int)(sb.len > 60 ? 60 : sb.len), (const char *)sb.data);
		same &= ok;
	}
	cm_buf_free(&sa);
	cm_buf_free(&sb);
	return same;
}

static void
pm_same_readers(st_shard *a, st_shard *b)
{
	st_reader *ra = st_shard_reader(a), *rb = st_shard_reader(b);
	CHECKF(st_reader_doc_count(ra) == st_reader_doc_count(rb), "docs %" PRIu64 " / %" PRIu64,
	       st_reader_doc_count(ra), st_reader_doc_count(rb));
	uint64_t na = 0, nb = 0;
	for (size_t i = 0; i < st_reader_nsegments(ra); i++)
		na += popcount_bits(st_reader_nested_live(ra, i),
		                    st_segment_max_doc(st_reader_segment(ra, i)));
	for (size_t i = 0; i < st_reader_nsegments(rb); i++)
		nb += popcount_bits(st_reader_nested_live(rb, i),
		                    st_segment_max_doc(st_reader_segment(rb, i)));
	CHECKF(na == nb, "nested docs %" PRIu64 " / %" PRIu64, na, nb);
	st_reader_release(ra);
	st_reader_release(rb);
}

static void
parallel_model(const char *da, const char *db, cm_pool *pool)
{
	st_mapping *m = pm_mapping();
	cm_pool *ipool = cm_pool_create(3, "index");
	st_shard_opts oa, ob;
	st_shard_opts_default(&oa);
	oa.merge_pool = pool;
	oa.index_pool = ipool;
	oa.index_part_ops = 3;
	oa.background_merges = false;
	ob = oa;
	ob.index_pool = NULL;
	st_shard *a, *b;
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(st_shard_open(da, m, &oa, &a, &err) == CM_OK);
	REQUIRE(st_shard_open(db, m, &ob, &b, &err) == CM_OK);
	enum { MAXN = 400 };
	static st_op ops[MAXN];
	static st_op_result ra[MAXN], rb[MAXN];
	static char ids[MAXN][16], srcs[MAXN][800];
	uint64_t most_buffers = 0, most_segments = 0;
	int bad = 0;
	for (int round = 0; round < 60 && bad < 5; round++) {
		int n = 1 + rndn(round % 3 == 0 ? MAXN : 40);
		for (int i = 0; i < n; i++) {
			snprintf(ids[i], sizeof(ids[i]), "p%d", rndn(PM_IDS));
			int t = rndn(100);
			pm_source(srcs[i], sizeof(srcs[i]), round * MAXN + i);
			ops[i] = (st_op){.type = t < 15 ? ST_OP_DELETE : ST_OP_INDEX,
			                 .id = ids[i],
			                 .id_len = strlen(ids[i]),
			                 .source = t < 15 ? NULL : srcs[i],
			                 .source_len = t < 15 ? 0 : strlen(srcs[i]),
			                 .seq_no = ST_NO_SEQ,
			                 .if_seq_no = ST_NO_SEQ};
			if (t >= 15 && t < 20)
				ops[i].create_only = true;
			if (t >= 20 && t < 25) {
				st_doc_meta md;
				if (st_shard_get(b, ids[i], strlen(ids[i]), &md, NULL) == CM_OK) {
					/* right or one behind: both outcomes are compared */
					ops[i].if_seq_no = md.seq_no - (uint64_t)(rndn(2) && md.seq_no);
					ops[i].if_primary_term = md.primary_term;
				}
			}
		}
		CHECK(st_shard_apply(a, ops, (size_t)n, ra) == CM_OK);
		CHECK(st_shard_apply(b, ops, (size_t)n, rb) == CM_OK);
		for (int i = 0; i < n; i++) {
			bool ok = ra[i].err == rb[i].err && ra[i].result == rb[i].result &&
			          ra[i].seq_no == rb[i].seq_no && ra[i].version == rb[i].version;
			CHECKF(ok,
			       "round %d op %d (%s): %s/%s result %d/%d seq %" PRIu64 "/%" PRIu64
			       " version %" PRId64 "/%" PRId64,
			       round, i, ids[i], cm_err_name(ra[i].err), cm_err_name(rb[i].err),
			       (int)ra[i].result, (int)rb[i].result, ra[i].seq_no, rb[i].seq_no,
			       ra[i].version, rb[i].version);
			bad += !ok;
		}
		st_shard_stats st;
		st_shard_stats_get(a, &st);
		if (st.indexing_buffers > most_buffers)
			most_buffers = st.indexing_buffers;
		if (!pm_same_gets(a, b))
			bad++;
		int w = rndn(10);
		if (w < 4) {
			/* both sides: a refresh drops tombstones at or below the
			 * checkpoint, and with them the version a delete leaves */
			uint64_t before = st.segments;
			CHECK(st_shard_refresh(a) == CM_OK);
			CHECK(st_shard_refresh(b) == CM_OK);
			st_shard_stats_get(a, &st);
			if (st.segments > before && st.segments - before > most_segments)
				most_segments = st.segments - before;
			pm_same_readers(a, b);
		} else if (w == 4) {
			CHECK(st_shard_force_merge(a, 1) == CM_OK);
		}
	}
	/* every batch of a 3-thread pool in parts of 3 ops fills several
	 * buffers, and a refresh writes one segment per buffer */
	CHECKF(most_buffers >= 2, "at most %" PRIu64 " buffers", most_buffers);
	CHECKF(most_segments >= 2, "at most %" PRIu64 " segments by one refresh", most_segments);
	/* reopen: the log replay also spreads over the pool */
	st_shard_close(a);
	REQUIRE(st_shard_open(da, m, &oa, &a, &err) == CM_OK);
	pm_same_gets(a, b);
	CHECK(st_shard_refresh(a) == CM_OK && st_shard_refresh(b) == CM_OK);
	pm_same_readers(a, b);
	CHECK(st_shard_force_merge(a, 1) == CM_OK);
	pm_same_readers(a, b);
	pm_same_gets(a, b);
	printf("parallel_model: up to %" PRIu64 " buffers, %" PRIu64 " segments by one refresh\n",
	       most_buffers, most_segments);
	st_shard_close(a);
	st_shard_close(b);
	cm_pool_destroy(ipool);
	st_mapping_unref(m);
}

int
main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--gcp-child") == 0) {
		gcp_child(argv[2], test_mapping(), atoi(argv[3]));
		return 0;
	}
	char base[] = "/tmp/shard_test.XXXXXX";
	REQUIRE(mkdtemp(base) != NULL);
	char d1[600], d2[600], d3[600], d4[600], d5[600], d6[600];
	snprintf(d1, sizeof(d1), "%s/random", base);
	snprintf(d2, sizeof(d2), "%s/cond", base);
	snprintf(d3, sizeof(d3), "%s/primary", base);
	snprintf(d4, sizeof(d4), "%s/replica", base);
	snprintf(d5, sizeof(d5), "%s/concurrent", base);
	snprintf(d6, sizeof(d6), "%s/compact", base);
	st_mapping *map = test_mapping();
	cm_pool *pool = cm_pool_create(2, "merge");
	policy();
	conditions(d2, map);
	replication(d3, d4, map);
	compaction(d6, map);
	random_run(d1, map, pool, 1000);
	concurrency(d5, map, pool);
	char d7[600], d8[600], d9[600], d10[600];
	snprintf(d7, sizeof(d7), "%s/gcp", base);
	snprintf(d8, sizeof(d8), "%s/gcp-solo", base);
	snprintf(d9, sizeof(d9), "%s/stale-primary", base);
	snprintf(d10, sizeof(d10), "%s/stale-replica", base);
	global_checkpoint(d7, d8, map);
	stale_ops(d9, d10, map);
	snapshot_basic(base, map);
	snapshot_concurrent(base, map, pool);
	char d11[600];
	snprintf(d11, sizeof(d11), "%s/gcp-crash", base);
	gcp_crash(d11, map);
	char d12[600];
	snprintf(d12, sizeof(d12), "%s/nested", base);
	nested_docs(d12, pool);
	char d13[600], d14[600], d15[600];
	snprintf(d13, sizeof(d13), "%s/parallel-a", base);
	snprintf(d14, sizeof(d14), "%s/parallel-b", base);
	snprintf(d15, sizeof(d15), "%s/concurrent-pool", base);
	parallel_model(d13, d14, pool);
	g_index_pool = cm_pool_create(3, "index");
	concurrency(d15, map, pool);
	cm_pool_destroy(g_index_pool);
	g_index_pool = NULL;
	cm_pool_destroy(pool);
	st_mapping_unref(map);
	cm_rm_rf(base);
	return check_report("shard_test");
}
