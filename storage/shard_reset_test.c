/* In-place shard reset (st_shard_reset_from, st_shard_wipe): exact equality
 * with opening the copy, readers taken before, writes after, concurrent
 * writers/searchers/merges, bad copies, the RESETTING marker, and kill -9
 * at random moments of a reset in a child process. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/cm_sys.h"
#include "storage/st_shard.h"

#define NIDS 400 /* ids d0..d399 are compared one by one */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t
rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static st_mapping *
test_mapping(void)
{
	const char *js = "{\"properties\":{\"k\":{\"type\":\"keyword\"},\"n\":{\"type\":\"long\"},"
	                 "\"body\":{\"type\":\"text\"}}}";
	cJSON *j = cJSON_Parse(js);
	REQUIRE(j != NULL);
	st_mapping *m = NULL;
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(st_mapping_from_json(j, &m, &err) == CM_OK && m != NULL);
	cJSON_Delete(j);
	return m;
}

static st_shard *
open_shard_f(const char *dir, st_mapping *map, cm_pool *pool, bool merges, int factor)
{
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.merge_pool = pool;
	o.background_merges = merges;
	o.merge_factor = factor;
	st_shard *s = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err e = st_shard_open(dir, map, &o, &s, &err);
	if (e)
		fprintf(stderr, "open %s: %s\n", dir, err.reason);
	REQUIRE(e == CM_OK);
	return s;
}

/* Background merges, if on, happen often (3 segments per tier). */
static st_shard *
open_shard(const char *dir, st_mapping *map, cm_pool *pool, bool merges)
{
	return open_shard_f(dir, map, pool, merges, 3);
}

/* Index (or, every `del_every`th, delete) ids d<from>..d<from+n-1>, each
 * with a source naming `tag`, in batches of 20. */
static void
write_docs(st_shard *s, const char *tag, int from, int n, int del_every)
{
	for (int i = 0; i < n; i += 20) {
		st_op ops[20];
		st_op_result res[20];
		char ids[20][16], srcs[20][96];
		int k = n - i < 20 ? n - i : 20;
		for (int j = 0; j < k; j++) {
			int d = from + i + j;
			snprintf(ids[j], sizeof(ids[j]), "d%d", d);
			snprintf(srcs[j], sizeof(srcs[j]),
			         "{\"k\":\"%s\",\"n\":%d,\"body\":\"%s words for doc %d\"}", tag, d,
			         tag, d);
			/* A field the mapping lacks, only in the source's log. */
			if (strcmp(tag, "srclog") == 0 && d == 200)
				snprintf(srcs[j], sizeof(srcs[j]), "{\"k\":\"%s\",\"dyn\":\"new\"}",
				         tag);
			memset(&ops[j], 0, sizeof(ops[j]));
			ops[j].type = del_every && d % del_every == 0 ? ST_OP_DELETE : ST_OP_INDEX;
			ops[j].id = ids[j];
			ops[j].id_len = strlen(ids[j]);
			ops[j].source = srcs[j];
			ops[j].source_len = strlen(srcs[j]);
			ops[j].seq_no = ST_NO_SEQ;
			ops[j].if_seq_no = ST_NO_SEQ;
		}
		REQUIRE(st_shard_apply(s, ops, (size_t)k, res) == CM_OK);
		for (int j = 0; j < k; j++)
			CHECKF(res[j].err == CM_OK, "write %s: %s", ids[j], res[j].reason);
	}
}

/* Copies the regular files of a shard directory (no lock, no partial
 * files), as a transfer from another node would. */
static void
copy_dir(const char *from, const char *to)
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

/* File names of a shard directory joined by spaces. */
static void
dir_listing(const char *dir, char *out, size_t cap)
{
	char **names;
	size_t n;
	out[0] = 0;
	REQUIRE(st_shard_dir_files(dir, &names, &n) == CM_OK);
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(names[i]);
		REQUIRE(len + l + 2 <= cap);
		memcpy(out + len, names[i], l);
		out[len + l] = ' ';
		len += l + 1;
		out[len] = 0;
	}
	st_shard_dir_files_free(names, n);
}

static bool
file_exists(const char *dir, const char *name)
{
	char path[1200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

/* ---- comparing shards ---- */

/* Order-independent digest of what a reader shows: (id, source) of every
 * live doc, plus the count. Also checks the reader is self-consistent. */
typedef struct view {
	uint64_t docs, sum, x;
	bool bad; /* a doc did not read, or the counts disagree */
} view;

static uint64_t
fnv(const void *p, size_t n, uint64_t h)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static view
reader_view(st_reader *r)
{
	view v = {0};
	cm_buf id, src;
	cm_buf_init(&id, CM_MEM_STORAGE);
	cm_buf_init(&src, CM_MEM_STORAGE);
	uint64_t live_total = 0;
	for (size_t i = 0; i < st_reader_nsegments(r); i++) {
		st_segment *seg = st_reader_segment(r, i);
		const uint64_t *live = st_reader_live(r, i);
		uint32_t max = st_segment_max_doc(seg), cnt = 0;
		st_seg_txn *t;
		if (st_seg_txn_begin(seg, &t) != CM_OK) {
			v.bad = true;
			continue;
		}
		for (uint32_t d = 0; d < max; d++) {
			if (live && !st_bit_get(live, d))
				continue;
			cnt++;
			cm_buf_reset(&id);
			cm_buf_reset(&src);
			if (st_stored_get(t, d, &id, &src) != CM_OK)
				v.bad = true;
			uint64_t h = fnv(id.data, id.len, 14695981039346656037ull);
			h = fnv("|", 1, h);
			h = fnv(src.data, src.len, h);
			v.sum += h;
			v.x ^= h * 0x9e3779b97f4a7c15ull;
			v.docs++;
		}
		st_seg_txn_end(t);
		v.bad |= cnt != st_reader_live_count(r, i);
		live_total += cnt;
	}
	v.bad |= live_total != st_reader_doc_count(r);
	cm_buf_free(&id);
	cm_buf_free(&src);
	return v;
}

static view
shard_view(st_shard *s)
{
	st_reader *r = st_shard_reader(s);
	view v = reader_view(r);
	st_reader_release(r);
	return v;
}

static bool
view_eq(view a, view b)
{
	return !a.bad && !b.bad && a.docs == b.docs && a.sum == b.sum && a.x == b.x;
}

typedef struct oplog {
	size_t n;
	uint64_t digest;
	cm_err err;
} oplog;

static int
oplog_fn(void *ctx, const st_op *op, int64_t version)
{
	oplog *l = ctx;
	uint64_t h = fnv(&op->seq_no, sizeof(op->seq_no), 14695981039346656037ull);
	h = fnv(&op->primary_term, sizeof(op->primary_term), h);
	h = fnv(&version, sizeof(version), h);
	h = fnv(&op->type, sizeof(op->type), h);
	h = fnv(op->id, op->id_len, h);
	h = fnv(op->source ? op->source : "", op->source_len, h);
	l->digest = fnv(&h, sizeof(h), l->digest);
	l->n++;
	return 0;
}

static oplog
read_log(st_shard *s, uint64_t from)
{
	oplog l = {.digest = 1};
	l.err = st_shard_oplog_read(s, from, oplog_fn, &l);
	return l;
}

enum {
	CMP_SEGMENTS = 1, /* segments, deleted docs, bytes, merges: not after a background merge */
	CMP_COUNTERS = 2, /* refreshes, flushes, log batches: only with the same history */
	CMP_ALL = 3,
};

/* Everything observable through the public API: stats, realtime gets of
 * ids d0..d(NIDS-1) and extra ids, the reader's docs, the log. */
static void
compare_exact(st_shard *a, st_shard *b, const char *when, int what)
{
	st_shard_stats x, y;
	st_shard_stats_get(a, &x);
	st_shard_stats_get(b, &y);
	if (!(what & CMP_SEGMENTS)) {
		x.deleted_docs = y.deleted_docs;
		x.segments = y.segments;
		x.store_bytes = y.store_bytes;
		x.merges = y.merges;
	}
	if (!(what & CMP_COUNTERS)) {
		x.refreshes = y.refreshes;
		x.flushes = y.flushes;
		x.log_batches = y.log_batches;
	}
	CHECKF(x.docs == y.docs && x.deleted_docs == y.deleted_docs && x.segments == y.segments &&
	           x.buffered_docs == y.buffered_docs,
	       "%s: docs %" PRIu64 "/%" PRIu64 " deleted %" PRIu64 "/%" PRIu64 " segments %" PRIu64
	       "/%" PRIu64 " buffered %" PRIu64 "/%" PRIu64,
	       when, x.docs, y.docs, x.deleted_docs, y.deleted_docs, x.segments, y.segments,
	       x.buffered_docs, y.buffered_docs);
	CHECKF(x.max_seq_no == y.max_seq_no && x.local_checkpoint == y.local_checkpoint &&
	           x.committed_seq_no == y.committed_seq_no &&
	           x.global_checkpoint == y.global_checkpoint && x.primary_term == y.primary_term,
	       "%s: seq %" PRIu64 "/%" PRIu64 " ckp %" PRIu64 "/%" PRIu64 " commit %" PRIu64
	       "/%" PRIu64 " gcp %" PRIu64 "/%" PRIu64 " term %" PRIu64 "/%" PRIu64,
	       when, x.max_seq_no, y.max_seq_no, x.local_checkpoint, y.local_checkpoint,
	       x.committed_seq_no, y.committed_seq_no, x.global_checkpoint, y.global_checkpoint,
	       x.primary_term, y.primary_term);
	CHECKF(x.refreshes == y.refreshes && x.merges == y.merges && x.flushes == y.flushes &&
	           x.log_batches == y.log_batches,
	       "%s: refreshes %" PRIu64 "/%" PRIu64 " merges %" PRIu64 "/%" PRIu64
	       " flushes %" PRIu64 "/%" PRIu64 " batches %" PRIu64 "/%" PRIu64,
	       when, x.refreshes, y.refreshes, x.merges, y.merges, x.flushes, y.flushes,
	       x.log_batches, y.log_batches);
	CHECKF(x.store_bytes == y.store_bytes, "%s: store %" PRIu64 "/%" PRIu64, when,
	       x.store_bytes, y.store_bytes);

	cm_buf sa, sb;
	cm_buf_init(&sa, CM_MEM_STORAGE);
	cm_buf_init(&sb, CM_MEM_STORAGE);
	int diff = 0;
	for (int k = 0; k < NIDS + 40; k++) {
		char id[24];
		if (k < NIDS)
			snprintf(id, sizeof(id), "d%d", k);
		else
			snprintf(id, sizeof(id), "new%d", k - NIDS);
		st_doc_meta ma = {0}, mb = {0};
		cm_buf_reset(&sa);
		cm_buf_reset(&sb);
		cm_err ea = st_shard_get(a, id, strlen(id), &ma, &sa);
		cm_err eb = st_shard_get(b, id, strlen(id), &mb, &sb);
		bool same =
		    ea == eb &&
		    (ea != CM_OK || (ma.seq_no == mb.seq_no && ma.primary_term == mb.primary_term &&
		                     ma.version == mb.version && sa.len == sb.len &&
		                     memcmp(sa.data, sb.data, sa.len) == 0));
		if (!same && diff++ < 3)
			CHECKF(same, "%s: %s differs: %s/%s seq %" PRIu64 "/%" PRIu64, when, id,
			       cm_err_name(ea), cm_err_name(eb), ma.seq_no, mb.seq_no);
	}
	CHECKF(diff == 0, "%s: %d ids differ", when, diff);
	cm_buf_free(&sa);
	cm_buf_free(&sb);

	CHECKF(view_eq(shard_view(a), shard_view(b)), "%s: searchable docs differ", when);
	uint64_t froms[3] = {ST_NO_SEQ, x.committed_seq_no, x.global_checkpoint};
	for (int i = 0; i < 3; i++) {
		oplog la = read_log(a, froms[i]), lb = read_log(b, froms[i]);
		CHECKF(la.err == lb.err && la.n == lb.n && la.digest == lb.digest,
		       "%s: log from %" PRId64 ": %s/%s, %zu/%zu ops", when, (int64_t)froms[i],
		       cm_err_name(la.err), cm_err_name(lb.err), la.n, lb.n);
	}
}

/* ---- a source shard and a target with other content ---- */

/* Source: term 3, two segments with deletes, a global checkpoint, and ops
 * only in the log (the copy replays them). Closed afterwards, so the
 * directory is a complete shard copy. */
static void
make_source(const char *dir, st_mapping *map)
{
	st_shard *a = open_shard(dir, map, NULL, false);
	st_shard_set_primary_term(a, 3);
	write_docs(a, "src", 0, 150, 0);
	REQUIRE(st_shard_refresh(a) == CM_OK);
	write_docs(a, "src2", 100, 100, 7); /* updates and deletes */
	REQUIRE(st_shard_refresh(a) == CM_OK);
	REQUIRE(st_shard_set_global_checkpoint(a, 200) == CM_OK);
	write_docs(a, "srclog", 180, 60, 11); /* log and buffer only */
	st_shard_close(a);
}

/* Target: term 5, more ops than the source (a reset rolls max_seq back),
 * several segments and merges, a retention marker. Reopened with merges
 * every `factor` segments: with 10 the copy's 3 segments stay as they are,
 * so the reset shard can be compared segment by segment. */
static st_shard *
make_target(const char *dir, st_mapping *map, cm_pool *pool, int factor)
{
	st_shard *t = open_shard(dir, map, pool, true);
	st_shard_set_primary_term(t, 5);
	for (int r = 0; r < 8; r++) {
		write_docs(t, "tgt", 50 * r, 60, 5);
		REQUIRE(st_shard_refresh(t) == CM_OK);
	}
	st_shard_close(t);
	t = open_shard_f(dir, map, pool, true, factor);
	write_docs(t, "tgtbuf", 0, 30, 0);
	st_shard_set_oplog_retention(t, 10);
	return t;
}

static void
reset_basic(const char *base, st_mapping *map, cm_pool *pool)
{
	char src[700], c1[700], c2[700], tdir[700];
	snprintf(src, sizeof(src), "%s/basic-src", base);
	snprintf(c1, sizeof(c1), "%s/basic-c1", base);
	snprintf(c2, sizeof(c2), "%s/basic-c2", base);
	snprintf(tdir, sizeof(tdir), "%s/basic-t", base);
	make_source(src, map);
	copy_dir(src, c1);
	copy_dir(src, c2);
	st_shard *t = make_target(tdir, map, pool, 10);

	/* A reader before the reset, and what it shows. */
	st_reader *old = st_shard_reader(t);
	view before = reader_view(old);
	CHECK(before.docs > 0);

	cm_error err;
	cm_error_clear(&err);
	cm_err e = st_shard_reset_from(t, c1, &err);
	CHECKF(e == CM_OK, "reset: %s", err.reason);
	CHECK(access(c1, F_OK) != 0); /* consumed */

	st_shard *o = open_shard(c2, map, NULL, false);
	compare_exact(t, o, "after reset", CMP_ALL);
	st_shard_stats st;
	st_shard_stats_get(t, &st);
	CHECK(st.primary_term == 3 && st.global_checkpoint == 200 && st.max_seq_no == 309);
	/* The replay brought a dynamic field: the shard's mapping has it, as
	 * the copy opened on its own does. */
	st_mapping *mt = st_shard_mapping(t), *mo = st_shard_mapping(o);
	CHECK(st_mapping_find(mt, "dyn") != NULL && st_mapping_find(mo, "dyn") != NULL);
	CHECK(st_mapping_find(map, "dyn") == NULL);
	st_mapping_unref(mt);
	st_mapping_unref(mo);

	/* The old reader still reads the old docs. */
	CHECKF(view_eq(reader_view(old), before), "old reader changed");
	st_reader_release(old);

	/* Once the old reader is gone, the directory holds exactly the copy's
	 * files: nothing old left, nothing new deleted. */
	char lt[4096], lo[4096];
	dir_listing(tdir, lt, sizeof(lt));
	dir_listing(c2, lo, sizeof(lo));
	CHECKF(strcmp(lt, lo) == 0, "files: [%s] vs [%s]", lt, lo);

	/* Writes continue from the copy's max seq_no, as on the copy. */
	write_docs(t, "after", 300, 40, 9);
	write_docs(o, "after", 300, 40, 9);
	st_shard_stats_get(t, &st);
	CHECK(st.max_seq_no == 349 && st.primary_term == 3);
	compare_exact(t, o, "writes after reset", CMP_ALL);
	REQUIRE(st_shard_refresh(t) == CM_OK);
	REQUIRE(st_shard_refresh(o) == CM_OK);
	compare_exact(t, o, "refreshed after reset", CMP_ALL);
	REQUIRE(st_shard_force_merge(t, 1) == CM_OK);
	REQUIRE(st_shard_force_merge(o, 1) == CM_OK);
	REQUIRE(st_shard_flush(t) == CM_OK);
	REQUIRE(st_shard_flush(o) == CM_OK);
	CHECKF(view_eq(shard_view(t), shard_view(o)), "merged after reset");

	/* What is on disk is the new content. */
	st_shard_close(t);
	t = open_shard(tdir, map, pool, true);
	st_shard_close(o);
	o = open_shard(c2, map, NULL, false);
	compare_exact(t, o, "reopened after reset", CMP_ALL);
	st_shard_close(t);
	st_shard_close(o);
}

/* Segments merged away before the reset but still held by a reader carry
 * "unlink on release"; the copy brings files of the same names (both
 * shards numbered their segments 1, 2, 3). Releasing the reader after the
 * reset must not remove the new files. */
static void
reset_name_reuse(const char *base, st_mapping *map)
{
	char src[700], c1[700], c2[700], tdir[700];
	snprintf(src, sizeof(src), "%s/reuse-src", base);
	snprintf(c1, sizeof(c1), "%s/reuse-c1", base);
	snprintf(c2, sizeof(c2), "%s/reuse-c2", base);
	snprintf(tdir, sizeof(tdir), "%s/reuse-t", base);
	st_shard *a = open_shard(src, map, NULL, false);
	st_shard *t = open_shard(tdir, map, NULL, false);
	for (int i = 0; i < 3; i++) {
		write_docs(a, "reuse-src", 40 * i, 40, 0);
		REQUIRE(st_shard_refresh(a) == CM_OK);
		write_docs(t, "reuse-tgt", 30 * i, 50, 0);
		REQUIRE(st_shard_refresh(t) == CM_OK);
	}
	st_shard_close(a);
	copy_dir(src, c1);
	copy_dir(src, c2);
	CHECK(file_exists(c1, "seg-1.mdb") && file_exists(tdir, "seg-1.mdb"));
	st_reader *old = st_shard_reader(t);
	view before = reader_view(old);
	REQUIRE(st_shard_force_merge(t, 1) == CM_OK); /* seg-1..3 dropped, held by old */
	cm_error err;
	cm_error_clear(&err);
	CHECKF(st_shard_reset_from(t, c1, &err) == CM_OK, "reset: %s", err.reason);
	CHECK(view_eq(reader_view(old), before));
	st_reader_release(old);
	char lt[4096], lo[4096];
	dir_listing(tdir, lt, sizeof(lt));
	dir_listing(c2, lo, sizeof(lo));
	CHECKF(strcmp(lt, lo) == 0, "files: [%s] vs [%s]", lt, lo);
	st_shard *o = open_shard(c2, map, NULL, false);
	compare_exact(t, o, "segment names reused", CMP_ALL);
	st_shard_close(t);
	t = open_shard(tdir, map, NULL, false);
	compare_exact(t, o, "segment names reused, reopened", CMP_ALL);
	st_shard_close(t);
	st_shard_close(o);
}

/* A copy made by st_shard_snapshot of a live shard, twice. */
static void
reset_snapshot(const char *base, st_mapping *map, cm_pool *pool)
{
	char src[700], s1[700], s2[700], tdir[700];
	snprintf(src, sizeof(src), "%s/snap-src", base);
	snprintf(s1, sizeof(s1), "%s/snap-1", base);
	snprintf(s2, sizeof(s2), "%s/snap-2", base);
	snprintf(tdir, sizeof(tdir), "%s/snap-t", base);
	make_source(src, map);
	st_shard *a = open_shard(src, map, NULL, false);
	uint64_t m1, m2;
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(st_shard_snapshot(a, s1, &m1, &err) == CM_OK);
	REQUIRE(st_shard_snapshot(a, s2, &m2, &err) == CM_OK);
	CHECK(m1 == 309 && m2 == 309);
	st_shard *t = make_target(tdir, map, pool, 10);
	cm_err e = st_shard_reset_from(t, s1, &err);
	CHECKF(e == CM_OK, "reset: %s", err.reason);
	st_shard *o = open_shard(s2, map, NULL, false);
	compare_exact(t, o, "reset to a snapshot", CMP_ALL);
	/* The source goes on; the reset shard catches up from its log. */
	write_docs(a, "later", 0, 20, 0);
	st_shard_stats st;
	st_shard_stats_get(t, &st);
	oplog l = read_log(a, st.max_seq_no);
	CHECK(l.err == CM_OK && l.n == 20);
	st_shard_close(a);
	st_shard_close(t);
	st_shard_close(o);
}

static void
reset_wipe(const char *base, st_mapping *map, cm_pool *pool)
{
	char tdir[700], edir[700];
	snprintf(tdir, sizeof(tdir), "%s/wipe-t", base);
	snprintf(edir, sizeof(edir), "%s/wipe-empty", base);
	st_shard *t = make_target(tdir, map, pool, 10);
	st_reader *old = st_shard_reader(t);
	view before = reader_view(old);
	cm_error err;
	cm_error_clear(&err);
	CHECK(st_shard_wipe(t, &err) == CM_OK);
	st_shard *o = open_shard(edir, map, NULL, false);
	compare_exact(t, o, "wiped", CMP_ALL);
	st_shard_stats st;
	st_shard_stats_get(t, &st);
	CHECK(st.docs == 0 && st.buffered_docs == 0 && st.max_seq_no == ST_NO_SEQ &&
	      st.local_checkpoint == ST_NO_SEQ && st.primary_term == 1);
	CHECK(view_eq(reader_view(old), before));
	st_reader_release(old);
	char lt[4096];
	dir_listing(tdir, lt, sizeof(lt));
	CHECKF(strcmp(lt, "shard.mdb ") == 0, "files after wipe: [%s]", lt);
	write_docs(t, "w", 0, 10, 0);
	write_docs(o, "w", 0, 10, 0);
	compare_exact(t, o, "written after wipe", CMP_ALL);
	st_shard_close(t);
	t = open_shard(tdir, map, pool, true);
	compare_exact(t, o, "reopened after wipe", CMP_SEGMENTS);
	st_shard_close(t);
	st_shard_close(o);
}

/* Copies that must be refused, leaving the shard as it was. */
static void
reset_refused(const char *base, st_mapping *map)
{
	char tdir[700], bad[700], ref[700], path[800];
	snprintf(tdir, sizeof(tdir), "%s/refuse-t", base);
	snprintf(bad, sizeof(bad), "%s/refuse-bad", base);
	snprintf(ref, sizeof(ref), "%s/refuse-ref", base);
	make_source(tdir, map);
	copy_dir(tdir, ref);
	st_shard *t = open_shard(tdir, map, NULL, false);
	st_shard *o = open_shard(ref, map, NULL, false);
	cm_error err;

	/* shard.mdb is garbage */
	REQUIRE(cm_mkdir_p(bad) == CM_OK);
	snprintf(path, sizeof(path), "%s/shard.mdb", bad);
	char junk[8192];
	memset(junk, 0x5a, sizeof(junk));
	REQUIRE(cm_file_write_atomic(path, junk, sizeof(junk)) == CM_OK);
	cm_error_clear(&err);
	CHECK(st_shard_reset_from(t, bad, &err) != CM_OK && err.reason[0]);
	compare_exact(t, o, "after a garbage copy", CMP_ALL);

	/* a segment the commit lists is missing */
	cm_rm_rf(bad);
	make_source(bad, map);
	char **names;
	size_t n;
	REQUIRE(st_shard_dir_files(bad, &names, &n) == CM_OK);
	for (size_t i = 0; i < n; i++)
		if (strncmp(names[i], "seg-", 4) == 0) {
			snprintf(path, sizeof(path), "%s/%s", bad, names[i]);
			unlink(path);
			break;
		}
	st_shard_dir_files_free(names, n);
	cm_error_clear(&err);
	CHECK(st_shard_reset_from(t, bad, &err) != CM_OK && err.reason[0]);
	compare_exact(t, o, "after a copy missing a segment", CMP_ALL);

	cm_error_clear(&err);
	CHECK(st_shard_reset_from(t, tdir, &err) == CM_EINVAL);
	cm_error_clear(&err);
	snprintf(path, sizeof(path), "%s/nonexistent", base);
	CHECK(st_shard_reset_from(t, path, &err) == CM_ENOTFOUND);
	struct stat a, b;
	if (stat("/dev/shm", &a) == 0 && stat(base, &b) == 0 && a.st_dev != b.st_dev) {
		char other[] = "/dev/shm/shard_reset_test.XXXXXX";
		if (mkdtemp(other)) {
			cm_error_clear(&err);
			CHECK(st_shard_reset_from(t, other, &err) == CM_EINVAL);
			cm_rm_rf(other);
		}
	}
	compare_exact(t, o, "after refused resets", CMP_ALL);
	st_shard_close(t);
	st_shard_close(o);
}

/* The copy is fine but moving it in fails (a directory squats on one of
 * its names) after the old files went: the shard ends up empty, usable,
 * and says why; a reopen finds it empty too. */
static void
reset_io_failure(const char *base, st_mapping *map)
{
	char tdir[700], src[700], path[800];
	snprintf(tdir, sizeof(tdir), "%s/iofail-t", base);
	snprintf(src, sizeof(src), "%s/iofail-src", base);
	make_source(src, map);
	st_shard *t = open_shard(tdir, map, NULL, false);
	write_docs(t, "iofail", 0, 50, 0);
	REQUIRE(st_shard_refresh(t) == CM_OK);
	snprintf(path, sizeof(path), "%s/seg-2.mdb", tdir); /* the source has seg-1, seg-2 */
	REQUIRE(mkdir(path, 0755) == 0);
	st_reader *old = st_shard_reader(t);
	view before = reader_view(old);
	cm_error err;
	cm_error_clear(&err);
	cm_err e = st_shard_reset_from(t, src, &err);
	CHECKF(e != CM_OK && strstr(err.reason, "cannot move"), "reset: %s %s", cm_err_name(e),
	       err.reason);
	CHECK(view_eq(reader_view(old), before));
	st_reader_release(old);
	st_shard_stats st;
	st_shard_stats_get(t, &st);
	CHECK(st.docs == 0 && st.buffered_docs == 0 && st.max_seq_no == ST_NO_SEQ);
	CHECK(!file_exists(tdir, "RESETTING"));
	write_docs(t, "iofail-after", 0, 5, 0);
	st_shard_stats_get(t, &st);
	CHECK(st.max_seq_no == 4);
	st_shard_close(t);
	rmdir(path);
	t = open_shard(tdir, map, NULL, false);
	st_shard_stats_get(t, &st);
	CHECK(st.max_seq_no == 4 && st.buffered_docs == 5);
	st_shard_close(t);
}

/* A reset killed before it finished leaves the marker: the next open
 * wipes the directory and starts empty. */
static void
reset_marker(const char *base, st_mapping *map)
{
	char tdir[700], path[800];
	snprintf(tdir, sizeof(tdir), "%s/marker-t", base);
	make_source(tdir, map);
	/* Half of a copy moved in already: a stray segment and partial file. */
	snprintf(path, sizeof(path), "%s/seg-999.mdb", tdir);
	REQUIRE(cm_file_write_atomic(path, "x", 1) == CM_OK);
	snprintf(path, sizeof(path), "%s/RESETTING", tdir);
	REQUIRE(cm_file_write_atomic(path, "reset\n", 6) == CM_OK);
	st_shard *t = open_shard(tdir, map, NULL, false);
	st_shard_stats st;
	st_shard_stats_get(t, &st);
	CHECK(st.docs == 0 && st.buffered_docs == 0 && st.max_seq_no == ST_NO_SEQ &&
	      st.segments == 0 && st.primary_term == 1);
	CHECK(!file_exists(tdir, "RESETTING") && !file_exists(tdir, "seg-999.mdb"));
	CHECK(st_shard_get(t, "d1", 2, NULL, NULL) == CM_ENOTFOUND);
	write_docs(t, "m", 0, 5, 0);
	st_shard_stats_get(t, &st);
	CHECK(st.max_seq_no == 4);
	st_shard_close(t);
}

/* ---- kill -9 during a reset ---- */

/* What a shard holds, for telling contents apart: stats, the searchable
 * docs, and every id's realtime state. */
typedef struct content {
	st_shard_stats st;
	view v;
	uint64_t ids[NIDS]; /* hash of (err, seq_no, version, source) */
} content;

static void
content_of(st_shard *s, content *c)
{
	st_shard_stats_get(s, &c->st);
	c->v = shard_view(s);
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	for (int k = 0; k < NIDS; k++) {
		char id[16];
		snprintf(id, sizeof(id), "d%d", k);
		st_doc_meta m = {0};
		cm_buf_reset(&b);
		cm_err e = st_shard_get(s, id, strlen(id), &m, &b);
		uint64_t h = fnv(&e, sizeof(e), 14695981039346656037ull);
		if (e == CM_OK) {
			h = fnv(&m.seq_no, sizeof(m.seq_no), h);
			h = fnv(&m.version, sizeof(m.version), h);
			h = fnv(b.data, b.len, h);
		}
		c->ids[k] = h;
	}
	cm_buf_free(&b);
}

/* Which content a directory opened with: 1 old, 2 new, 0 empty, -1 none
 * of them. */
static int
classify(st_shard *t, const content *old, const content *new)
{
	content *c = malloc(sizeof(*c));
	content_of(t, c);
	int kind = -1;
	if (c->st.max_seq_no == ST_NO_SEQ && c->st.docs == 0 && c->st.buffered_docs == 0)
		kind = 0;
	const content *refs[2] = {old, new};
	for (int r = 0; r < 2 && kind < 0; r++) {
		const st_shard_stats *x = &c->st, *y = &refs[r]->st;
		if (x->max_seq_no == y->max_seq_no && x->local_checkpoint == y->local_checkpoint &&
		    x->primary_term == y->primary_term && x->docs == y->docs &&
		    x->buffered_docs == y->buffered_docs && view_eq(c->v, refs[r]->v) &&
		    memcmp(c->ids, refs[r]->ids, sizeof(c->ids)) == 0)
			kind = r + 1;
	}
	free(c);
	return kind;
}

static void
reset_crash(const char *base, st_mapping *map)
{
	char told[700], tnew[700], tdir[700], src[700], rold[700], rnew[700];
	snprintf(told, sizeof(told), "%s/crash-old", base);
	snprintf(tnew, sizeof(tnew), "%s/crash-new", base);
	snprintf(tdir, sizeof(tdir), "%s/crash-t", base);
	snprintf(src, sizeof(src), "%s/crash-src", base);
	snprintf(rold, sizeof(rold), "%s/crash-ref-old", base);
	snprintf(rnew, sizeof(rnew), "%s/crash-ref-new", base);
	/* Old: the target's content (closed); new: the source's. */
	{
		st_shard *t = make_target(told, map, NULL, 10);
		st_shard_close(t);
	}
	make_source(tnew, map);
	copy_dir(told, rold);
	copy_dir(tnew, rnew);

	content *ref = malloc(2 * sizeof(*ref));
	st_shard *r = open_shard(rold, map, NULL, false);
	content_of(r, &ref[0]);
	st_shard_close(r);
	r = open_shard(rnew, map, NULL, false);
	content_of(r, &ref[1]);
	st_shard_close(r);
	CHECK(ref[0].st.docs > 0 && ref[1].st.docs > 0 && ref[0].v.sum != ref[1].v.sum);
	enum { ROUNDS = 24 };
	int seen[4] = {0};
	uint64_t full_us = 0;
	for (int round = 0; round < ROUNDS; round++) {
		cm_rm_rf(tdir);
		cm_rm_rf(src);
		copy_dir(told, tdir);
		copy_dir(tnew, src);
		/* It tells us through the pipe when the reset starts. */
		int pfd[2];
		REQUIRE(pipe(pfd) == 0);
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			st_shard_opts o;
			st_shard_opts_default(&o);
			o.background_merges = false;
			st_shard *t;
			cm_error err;
			if (st_shard_open(tdir, map, &o, &t, &err) != CM_OK)
				_exit(2);
			if (write(pfd[1], "x", 1) != 1)
				_exit(4);
			cm_err e = st_shard_reset_from(t, src, &err);
			st_shard_close(t);
			_exit(e == CM_OK ? 0 : 3);
		}
		close(pfd[1]);
		char x;
		bool started = read(pfd[0], &x, 1) == 1;
		uint64_t t0 = cm_now_ns();
		close(pfd[0]);
		CHECK(started);
		int status = 0;
		if (round == 0) {
			/* A full run first: how long a reset takes here. */
			REQUIRE(waitpid(pid, &status, 0) == pid);
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
			full_us = (cm_now_ns() - t0) / 1000;
		} else {
			/* Anywhere in the reset, or just after it. */
			usleep((useconds_t)(rnd() % (full_us + full_us / 8 + 1)));
			kill(pid, SIGKILL);
			REQUIRE(waitpid(pid, &status, 0) == pid);
		}
		st_shard *t = open_shard(tdir, map, NULL, false);
		int c = classify(t, &ref[0], &ref[1]);
		CHECKF(c >= 0, "round %d: the directory holds neither old, new nor empty content",
		       round);
		seen[c + 1]++;
		st_shard_close(t);
		if (round == 0)
			CHECK(c == 2);
	}
	free(ref);
	printf("kill -9 during reset (a reset takes %.1f ms): %d old, %d new, %d empty, %d bad\n",
	       (double)full_us / 1000, seen[2], seen[3], seen[1], seen[0]);
}

/* ---- concurrent writers, searchers, refreshes and merges ---- */

typedef struct conc {
	st_shard *s;
	atomic_bool stop_writers, stop_maint, stop_others;
	atomic_long writes, searches, maint, failures;
	atomic_int next_id;
} conc;

/* Per-thread xorshift (the global one is the main thread's). */
static uint64_t
trnd(uint64_t *st)
{
	*st ^= *st << 13;
	*st ^= *st >> 7;
	*st ^= *st << 17;
	return *st;
}

static void *
conc_writer(void *p)
{
	conc *c = p;
	int me = atomic_fetch_add(&c->next_id, 1);
	uint64_t rs = 0x2545f4914f6cdd1dull + (uint64_t)me;
	for (long i = 0; !atomic_load(&c->stop_writers); i++) {
		st_op ops[8];
		st_op_result res[8];
		char ids[8][32], src[8][96];
		for (int j = 0; j < 8; j++) {
			/* New ids, and updates/deletes of ids the copies hold. */
			if (j < 4)
				snprintf(ids[j], sizeof(ids[j]), "w%d-%ld-%d", me, i, j);
			else
				snprintf(ids[j], sizeof(ids[j]), "d%d", (int)(trnd(&rs) % NIDS));
			snprintf(src[j], sizeof(src[j]),
			         "{\"k\":\"w%d\",\"n\":%ld,\"body\":\"x y\"}", me, i);
			memset(&ops[j], 0, sizeof(ops[j]));
			ops[j].type = j == 7 ? ST_OP_DELETE : ST_OP_INDEX;
			ops[j].id = ids[j];
			ops[j].id_len = strlen(ids[j]);
			ops[j].source = src[j];
			ops[j].source_len = strlen(src[j]);
			ops[j].seq_no = ST_NO_SEQ;
			ops[j].if_seq_no = ST_NO_SEQ;
		}
		cm_err e = st_shard_apply(c->s, ops, 8, res);
		if (e != CM_OK && e != CM_EUNAVAIL)
			atomic_fetch_add(&c->failures, 1);
		for (int j = 0; j < 8 && e == CM_OK; j++)
			if (res[j].err != CM_OK && res[j].err != CM_EUNAVAIL)
				atomic_fetch_add(&c->failures, 1);
		atomic_fetch_add(&c->writes, 8);
	}
	return NULL;
}

static void *
conc_searcher(void *p)
{
	conc *c = p;
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	uint64_t rs = 0x853c49e6748fea9bull;
	while (!atomic_load(&c->stop_others)) {
		/* Every live doc reads, the counts agree, and the view stays
		 * the same however many resets go by meanwhile. */
		st_reader *r = st_shard_reader(c->s);
		view v1 = reader_view(r);
		usleep(500);
		view v2 = reader_view(r);
		st_reader_release(r);
		if (!view_eq(v1, v2))
			atomic_fetch_add(&c->failures, 1);
		char id[16];
		snprintf(id, sizeof(id), "d%d", (int)(trnd(&rs) % NIDS));
		cm_buf_reset(&b);
		cm_err e = st_shard_get(c->s, id, strlen(id), NULL, &b);
		if (e != CM_OK && e != CM_ENOTFOUND && e != CM_EUNAVAIL)
			atomic_fetch_add(&c->failures, 1);
		st_shard_stats st;
		st_shard_stats_get(c->s, &st);
		oplog l = read_log(c->s, st.committed_seq_no);
		if (l.err != CM_OK && l.err != CM_ENOTFOUND)
			atomic_fetch_add(&c->failures, 1);
		atomic_fetch_add(&c->searches, 1);
	}
	cm_buf_free(&b);
	return NULL;
}

static void *
conc_maint(void *p)
{
	conc *c = p;
	for (int i = 0; !atomic_load(&c->stop_maint); i++) {
		cm_err e = st_shard_refresh(c->s);
		if (e == CM_OK && i % 5 == 4)
			e = st_shard_flush(c->s);
		if (e == CM_OK && i % 7 == 6)
			e = st_shard_force_merge(c->s, 2);
		if (e != CM_OK && e != CM_EUNAVAIL)
			atomic_fetch_add(&c->failures, 1);
		atomic_fetch_add(&c->maint, 1);
		usleep(2000);
	}
	return NULL;
}

static void
reset_concurrent(const char *base, st_mapping *map, cm_pool *pool)
{
	char tmpl[700], tdir[700], copy[700], ref[700];
	snprintf(tmpl, sizeof(tmpl), "%s/conc-tmpl", base);
	snprintf(tdir, sizeof(tdir), "%s/conc-t", base);
	snprintf(ref, sizeof(ref), "%s/conc-ref", base);
	make_source(tmpl, map);
	conc c = {0};
	c.s = make_target(tdir, map, pool, 3);
	enum { NW = 2 };
	pthread_t th[NW + 2];
	for (int i = 0; i < NW; i++)
		pthread_create(&th[i], NULL, conc_writer, &c);
	pthread_create(&th[NW], NULL, conc_searcher, &c);
	pthread_create(&th[NW + 1], NULL, conc_maint, &c);

	enum { RESETS = 6 };
	double worst_ms = 0;
	for (int r = 0; r < RESETS; r++) {
		usleep(30000);
		snprintf(copy, sizeof(copy), "%s/conc-copy-%d", base, r);
		copy_dir(tmpl, copy);
		cm_error err;
		cm_error_clear(&err);
		uint64_t t0 = cm_now_ns();
		cm_err e = r == 3 ? st_shard_wipe(c.s, &err) : st_shard_reset_from(c.s, copy, &err);
		double ms = (double)(cm_now_ns() - t0) / 1e6;
		worst_ms = ms > worst_ms ? ms : worst_ms;
		CHECKF(e == CM_OK, "reset %d: %s", r, err.reason);
		st_shard_stats st;
		st_shard_stats_get(c.s, &st);
		/* Writers go on right away, numbering from the copy's max. */
		if (r != 3)
			CHECKF(st.max_seq_no != ST_NO_SEQ && st.max_seq_no >= 309 &&
			           st.primary_term == 3,
			       "reset %d: max seq %" PRIu64 " term %" PRIu64, r, st.max_seq_no,
			       st.primary_term);
		if (r == 3)
			cm_rm_rf(copy);
		/* What was written before the reset is gone; a write after it
		 * lands in the new content, above the copy's max seq_no. */
		char mark[16];
		if (r > 0) {
			snprintf(mark, sizeof(mark), "mark%d", r - 1);
			CHECK(st_shard_get(c.s, mark, strlen(mark), NULL, NULL) == CM_ENOTFOUND);
		}
		snprintf(mark, sizeof(mark), "mark%d", r);
		st_op op = {.type = ST_OP_INDEX,
		            .id = mark,
		            .id_len = strlen(mark),
		            .source = "{\"k\":\"mark\"}",
		            .source_len = 12,
		            .seq_no = ST_NO_SEQ,
		            .if_seq_no = ST_NO_SEQ};
		st_op_result res;
		REQUIRE(st_shard_apply(c.s, &op, 1, &res) == CM_OK);
		CHECK(res.err == CM_OK && res.result == ST_RESULT_CREATED &&
		      (r == 3 || res.seq_no > 309));
		st_doc_meta meta;
		CHECK(st_shard_get(c.s, mark, strlen(mark), &meta, NULL) == CM_OK &&
		      meta.seq_no == res.seq_no);
	}
	atomic_store(&c.stop_writers, true);
	for (int i = 0; i < NW; i++)
		pthread_join(th[i], NULL);
	atomic_store(&c.stop_maint, true);
	pthread_join(th[NW + 1], NULL);

	/* Searchers and background merges still running: a last reset, then
	 * exact (a background merge may change the segments, not the docs). */
	snprintf(copy, sizeof(copy), "%s/conc-copy-last", base);
	copy_dir(tmpl, copy);
	copy_dir(tmpl, ref);
	cm_error err;
	cm_error_clear(&err);
	CHECKF(st_shard_reset_from(c.s, copy, &err) == CM_OK, "last reset: %s", err.reason);
	atomic_store(&c.stop_others, true);
	pthread_join(th[NW], NULL);
	st_shard *o = open_shard(ref, map, NULL, false);
	compare_exact(c.s, o, "after concurrent resets", CMP_COUNTERS);
	CHECK(atomic_load(&c.failures) == 0);
	printf("concurrent: %d resets, %ld writes, %ld searches, %ld refresh/flush/merge, "
	       "slowest reset %.1f ms, failures %ld\n",
	       RESETS + 1, atomic_load(&c.writes), atomic_load(&c.searches), atomic_load(&c.maint),
	       worst_ms, atomic_load(&c.failures));
	st_shard_close(c.s);
	st_shard_close(o);
}

int
main(void)
{
	char base[] = "/tmp/shard_reset_test.XXXXXX";
	REQUIRE(mkdtemp(base) != NULL);
	st_mapping *map = test_mapping();
	uint64_t t0 = cm_now_ns();
#define STEP(call)                                                                                 \
	do {                                                                                       \
		call;                                                                              \
		printf("%-40s %6.2f s\n", #call, (double)(cm_now_ns() - t0) / 1e9);                \
		t0 = cm_now_ns();                                                                  \
	} while (0)
	/* The crash test forks: it runs before any pool or shard thread. */
	STEP(reset_crash(base, map));
	STEP(reset_marker(base, map));
	STEP(reset_refused(base, map));
	STEP(reset_io_failure(base, map));
	cm_pool *pool = cm_pool_create(2, "merge");
	STEP(reset_name_reuse(base, map));
	STEP(reset_basic(base, map, pool));
	STEP(reset_snapshot(base, map, pool));
	STEP(reset_wipe(base, map, pool));
	STEP(reset_concurrent(base, map, pool));
	cm_pool_destroy(pool);
	st_mapping_unref(map);
	cm_rm_rf(base);
	return check_report("shard_reset_test");
}
