/* Crash safety: a child indexes, refreshes, flushes and merges in a loop,
 * reporting every acknowledged batch over a pipe; the parent SIGKILLs it
 * at a random moment, reopens the shard and checks that every
 * acknowledged op is there and the shard equals the model (the one batch
 * in flight at the kill may be wholly present or wholly absent). The
 * same directory carries over from trial to trial. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/cm_sys.h"
#include "storage/st_shard.h"

#define NIDS 300
#define SRC_MAX 120
#define MAX_BATCH 40
#define TRIALS 24

/* Pipe records, each one write() of <= PIPE_BUF bytes, so atomic. */
typedef struct rec_op {
	char tag; /* 'O' */
	uint8_t type;
	uint16_t k;
	char src[SRC_MAX];
} rec_op;

typedef struct rec_res {
	char tag; /* 'R' */
	uint8_t ok;
	uint8_t result;
	uint64_t seq;
	int64_t ver;
} rec_res;

typedef struct mdoc {
	bool exists;
	char src[SRC_MAX];
	uint64_t seq;
	int64_t ver;
	bool known_meta; /* false for a doc that came from the in-flight batch */
} mdoc;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}
static int
rndn(int n)
{
	return (int)(rnd() % (uint64_t)n);
}

static st_mapping *
test_mapping(void)
{
	cJSON *j = cJSON_Parse("{\"properties\":{\"k\":{\"type\":\"keyword\"},\"n\":{\"type\":"
	                       "\"long\"},\"body\":{\"type\":\"text\"}}}");
	st_mapping *m = NULL;
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(j && st_mapping_from_json(j, &m, &err) == CM_OK);
	cJSON_Delete(j);
	return m;
}

static st_shard_opts
shard_opts(cm_pool *pool)
{
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.merge_pool = pool;
	o.merge_factor = 3;
	o.indexing_max_ram_mb = 1; /* refreshes forced by the budget too */
	return o;
}

static void
write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(3);
		c += w;
		n -= (size_t)w;
	}
}

static void
child(const char *dir, int fd, uint64_t seed)
{
	/* splitmix64: children must not walk the parent's own xorshift
	 * sequence, or a later child would replay an earlier child's batches. */
	uint64_t z = seed + 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	rng = (z ^ (z >> 31)) | 1;
	st_mapping *m = test_mapping();
	cm_pool *pool = cm_pool_create(2, "merge");
	st_shard_opts o = shard_opts(pool);
	/* Batches spread over indexing buffers on a pool too (parts of 4
	 * ops): a kill may land while several buffers are being filled. */
	o.index_pool = cm_pool_create(3, "index");
	o.index_part_ops = 4;
	st_shard *s;
	cm_error err;
	cm_error_clear(&err);
	if (st_shard_open(dir, m, &o, &s, &err) != CM_OK) {
		fprintf(stderr, "child open: %s\n", err.reason);
		_exit(2);
	}
	write_all(fd, "S", 1); /* open (and replay) done: the kill timer starts now */
	static const char *words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"};
	st_op ops[MAX_BATCH];
	st_op_result res[MAX_BATCH];
	rec_op ro[MAX_BATCH];
	char ids[MAX_BATCH][8];
	for (;;) {
		int n = 1 + rndn(MAX_BATCH);
		for (int i = 0; i < n; i++) {
			int k = rndn(NIDS);
			memset(&ro[i], 0, sizeof(ro[i]));
			ro[i].tag = 'O';
			ro[i].k = (uint16_t)k;
			ro[i].type = rndn(100) < 80 ? ST_OP_INDEX : ST_OP_DELETE;
			snprintf(ids[i], sizeof(ids[i]), "c%d", k);
			ops[i] = (st_op){.type = ro[i].type,
			                 .id = ids[i],
			                 .id_len = strlen(ids[i]),
			                 .seq_no = ST_NO_SEQ,
			                 .if_seq_no = ST_NO_SEQ};
			if (ro[i].type == ST_OP_INDEX) {
				snprintf(ro[i].src, SRC_MAX,
				         "{\"k\":\"v%d\",\"n\":%d,\"body\":\"%s %s %s\"}", rndn(20),
				         rndn(1000000), words[rndn(6)], words[rndn(6)], ids[i]);
				ops[i].source = ro[i].src;
				ops[i].source_len = strlen(ro[i].src);
			}
			write_all(fd, &ro[i], sizeof(ro[i]));
		}
		if (st_shard_apply(s, ops, (size_t)n, res) != CM_OK)
			_exit(4);
		for (int i = 0; i < n; i++) {
			rec_res rr = {.tag = 'R',
			              .ok = res[i].err == CM_OK,
			              .result = res[i].result,
			              .seq = res[i].seq_no,
			              .ver = res[i].version};
			write_all(fd, &rr, sizeof(rr));
		}
		write_all(fd, "E", 1);
		int w = rndn(100);
		if (w < 25)
			st_shard_refresh(s);
		else if (w < 28)
			st_shard_flush(s);
		else if (w < 31)
			st_shard_force_merge(s, 1 + rndn(2));
	}
}

/* Parser state for the pipe stream. */
typedef struct stream {
	char *buf;
	size_t len, cap;
} stream;

static void
stream_read(stream *st, int fd)
{
	for (;;) {
		if (st->cap - st->len < 65536) {
			st->cap = st->cap ? st->cap * 2 : 1 << 20;
			st->buf = realloc(st->buf, st->cap);
		}
		ssize_t r = read(fd, st->buf + st->len, st->cap - st->len);
		if (r > 0) {
			st->len += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		return; /* 0: EOF, or EAGAIN */
	}
}

static bool
same(const mdoc *d, bool exists, const char *src, size_t len)
{
	if (d->exists != exists)
		return false;
	return !exists || (strlen(d->src) == len && memcmp(d->src, src, len) == 0);
}

int
main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "--child") == 0) {
		child(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 10));
		return 0;
	}
	char base[] = "/tmp/shard_crash.XXXXXX";
	REQUIRE(mkdtemp(base) != NULL);
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/shard", base);
	mdoc *model = calloc(NIDS, sizeof(*model));
	mdoc *alt = calloc(NIDS, sizeof(*alt));
	rec_op *pending = calloc(MAX_BATCH, sizeof(*pending));
	rec_res *pres = calloc(MAX_BATCH, sizeof(*pres));
	st_mapping *map = test_mapping();
	uint64_t total_acked = 0, inflight_present = 0, inflight_absent = 0;
	int64_t max_acked_seq = -1;
	uint64_t t0 = cm_now_ns();
	rng ^= (uint64_t)time(NULL);
	printf("seed %" PRIu64 "\n", rng);

	for (int trial = 0; trial < TRIALS; trial++) {
		int pfd[2];
		REQUIRE(pipe(pfd) == 0);
		uint64_t seed = rnd() | 1;
		fflush(stdout);
		/* The child is this program started again: a fork alone would
		 * copy the merge scheduler's locks in whatever state the
		 * parent's threads (from its checks) held them. */
		char fd[16], sd[24];
		snprintf(fd, sizeof(fd), "%d", pfd[1]);
		snprintf(sd, sizeof(sd), "%" PRIu64, seed);
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			execl("/proc/self/exe", "shard_crash_test", "--child", dir, fd, sd,
			      (char *)NULL);
			_exit(127);
		}
		close(pfd[1]);
		stream st = {0};
		/* Wait for the child's open to finish (slow under sanitizers),
		 * so every trial kills it while it works. */
		char ready = 0;
		struct pollfd rp = {.fd = pfd[0], .events = POLLIN};
		if (poll(&rp, 1, 20000) > 0 && read(pfd[0], &ready, 1) == 1)
			CHECK(ready == 'S');
		else
			CHECKF(false, "trial %d: child did not open the shard", trial);
		/* Read while the child runs, so it never blocks on a full pipe. */
		int ms = 10 + rndn(200);
		uint64_t until = cm_now_ns() + (uint64_t)ms * 1000000;
		while (cm_now_ns() < until) {
			struct pollfd p = {.fd = pfd[0], .events = POLLIN};
			int left = (int)((until - cm_now_ns()) / 1000000) + 1;
			if (poll(&p, 1, left) > 0) {
				if (p.revents & POLLIN) {
					char tmp[65536];
					ssize_t r = read(pfd[0], tmp, sizeof(tmp));
					if (r > 0) {
						if (st.cap - st.len < (size_t)r) {
							st.cap = (st.cap + (size_t)r) * 2;
							st.buf = realloc(st.buf, st.cap);
						}
						memcpy(st.buf + st.len, tmp, (size_t)r);
						st.len += (size_t)r;
					}
				} else if (p.revents & (POLLHUP | POLLERR)) {
					break;
				}
			}
		}
		kill(pid, SIGKILL);
		int status;
		waitpid(pid, &status, 0);
		CHECKF(WIFSIGNALED(status), "child exited by itself (status %d)", status);
		stream_read(&st, pfd[0]);
		close(pfd[0]);

		/* Replay the stream into the model: a batch counts once 'E' came. */
		size_t np = 0, nr = 0, at = 0;
		uint64_t acked = 0;
		while (at < st.len) {
			char tag = st.buf[at];
			if (tag == 'O' && at + sizeof(rec_op) <= st.len) {
				if (nr > 0) { /* results of an unfinished batch: cannot happen */
					CHECK(false);
				}
				REQUIRE(np < MAX_BATCH);
				memcpy(&pending[np++], st.buf + at, sizeof(rec_op));
				at += sizeof(rec_op);
			} else if (tag == 'R' && at + sizeof(rec_res) <= st.len) {
				REQUIRE(nr < np);
				memcpy(&pres[nr++], st.buf + at, sizeof(rec_res));
				at += sizeof(rec_res);
			} else if (tag == 'E') {
				REQUIRE(nr == np);
				for (size_t i = 0; i < np; i++) {
					CHECK(pres[i].ok);
					mdoc *d = &model[pending[i].k];
					d->exists = pending[i].type == ST_OP_INDEX;
					if (d->exists)
						memcpy(d->src, pending[i].src, SRC_MAX);
					d->seq = pres[i].seq;
					d->ver = pres[i].ver;
					d->known_meta = true;
					if ((int64_t)pres[i].seq > max_acked_seq)
						max_acked_seq = (int64_t)pres[i].seq;
				}
				acked += np;
				np = nr = 0;
				at++;
			} else {
				break; /* a record cut by the kill cannot happen (atomic writes) */
			}
		}
		total_acked += acked;
		free(st.buf);

		/* The in-flight batch (ops sent, no 'E'), applied to a copy. */
		memcpy(alt, model, NIDS * sizeof(*alt));
		for (size_t i = 0; i < np; i++) {
			mdoc *d = &alt[pending[i].k];
			d->exists = pending[i].type == ST_OP_INDEX;
			if (d->exists)
				memcpy(d->src, pending[i].src, SRC_MAX);
			d->known_meta = false;
		}

		/* Reopen: must succeed; compare realtime gets. */
		cm_pool *pool = cm_pool_create(2, "merge");
		st_shard_opts o = shard_opts(pool);
		o.background_merges = false; /* so the file count below is stable */
		o.index_pool = cm_pool_create(2, "index"); /* the replay spreads too */
		o.index_part_ops = 8;
		st_shard *s = NULL;
		cm_error err;
		cm_error_clear(&err);
		cm_err e = st_shard_open(dir, map, &o, &s, &err);
		CHECKF(e == CM_OK, "trial %d: reopen failed: %s %s", trial, cm_err_name(e),
		       err.reason);
		if (e) {
			cm_pool_destroy(pool);
			cm_pool_destroy(o.index_pool);
			break;
		}
		st_doc_meta *meta = calloc(NIDS, sizeof(*meta));
		bool *exists = calloc(NIDS, sizeof(*exists));
		cm_buf *srcs = calloc(NIDS, sizeof(*srcs));
		int match_model = 0, match_alt = 0;
		for (int k = 0; k < NIDS; k++) {
			char id[16];
			snprintf(id, sizeof(id), "c%d", k);
			cm_buf_init(&srcs[k], CM_MEM_STORAGE);
			cm_err ge = st_shard_get(s, id, strlen(id), &meta[k], &srcs[k]);
			CHECKF(ge == CM_OK || ge == CM_ENOTFOUND, "get %s: %s", id,
			       cm_err_name(ge));
			exists[k] = ge == CM_OK;
			match_model +=
			    same(&model[k], exists[k], (char *)srcs[k].data, srcs[k].len);
			match_alt += same(&alt[k], exists[k], (char *)srcs[k].data, srcs[k].len);
		}
		/* The in-flight batch was logged iff the shard numbered ops past
		 * everything acknowledged (sources alone cannot tell when a batch
		 * rewrites the same content). */
		st_shard_stats stats;
		st_shard_stats_get(s, &stats);
		int64_t smax = stats.max_seq_no == ST_NO_SEQ ? -1 : (int64_t)stats.max_seq_no;
		CHECKF(smax >= max_acked_seq,
		       "trial %d: max_seq_no %" PRId64 " below acknowledged %" PRId64, trial, smax,
		       max_acked_seq);
		CHECKF(np > 0 || smax == max_acked_seq,
		       "trial %d: max_seq_no %" PRId64 " above acknowledged %" PRId64
		       " with nothing in flight",
		       trial, smax, max_acked_seq);
		bool took_alt = np > 0 && smax > max_acked_seq;
		CHECKF(took_alt ? match_alt == NIDS : match_model == NIDS,
		       "trial %d: shard differs from the model (%d/%d match acked, %d/%d with the "
		       "in-flight batch of %zu, which is %s)",
		       trial, match_model, NIDS, match_alt, NIDS, np,
		       took_alt ? "logged" : "not logged");
		if (np) {
			if (took_alt)
				inflight_present++;
			else
				inflight_absent++;
		}
		mdoc *truth = took_alt ? alt : model;
		for (int k = 0; k < NIDS; k++) {
			if (truth[k].exists && truth[k].known_meta && exists[k])
				CHECKF(meta[k].seq_no == truth[k].seq &&
				           meta[k].version == truth[k].ver,
				       "trial %d: c%d seq/version %" PRIu64 "/%" PRId64
				       " expected %" PRIu64 "/%" PRId64,
				       trial, k, meta[k].seq_no, meta[k].version, truth[k].seq,
				       truth[k].ver);
			if (truth[k].exists && !truth[k].known_meta && exists[k]) {
				truth[k].seq = meta[k].seq_no;
				truth[k].ver = meta[k].version;
				truth[k].known_meta = true;
			}
		}
		if (took_alt)
			memcpy(model, alt, NIDS * sizeof(*model));
		max_acked_seq = smax; /* everything up to here is accounted for */

		/* Searchable contents after a refresh: each live id exactly once. */
		REQUIRE(st_shard_refresh(s) == CM_OK);
		st_reader *r = st_shard_reader(s);
		int *seen = calloc(NIDS, sizeof(int));
		cm_buf idb, sb;
		cm_buf_init(&idb, CM_MEM_STORAGE);
		cm_buf_init(&sb, CM_MEM_STORAGE);
		for (size_t i = 0; i < st_reader_nsegments(r); i++) {
			st_segment *seg = st_reader_segment(r, i);
			const uint64_t *live = st_reader_live(r, i);
			st_seg_txn *t;
			REQUIRE(st_seg_txn_begin(seg, &t) == CM_OK);
			for (uint32_t d = 0; d < st_segment_max_doc(seg); d++) {
				if (live && !st_bit_get(live, d))
					continue;
				cm_buf_reset(&idb);
				cm_buf_reset(&sb);
				if (st_stored_get(t, d, &idb, &sb) != CM_OK) {
					CHECK(false);
					continue;
				}
				int k = -1;
				char tmp[8] = {0};
				if (idb.len > 1 && idb.len < sizeof(tmp)) {
					memcpy(tmp, idb.data + 1, idb.len - 1);
					k = atoi(tmp);
				}
				if (k < 0 || k >= NIDS) {
					CHECK(false);
					continue;
				}
				seen[k]++;
				CHECKF(model[k].exists &&
				           same(&model[k], true, (char *)sb.data, sb.len),
				       "trial %d: segment doc c%d does not match", trial, k);
			}
			st_seg_txn_end(t);
		}
		for (int k = 0; k < NIDS; k++)
			CHECKF(seen[k] == (model[k].exists ? 1 : 0), "trial %d: c%d seen %d times",
			       trial, k, seen[k]);
		st_reader_release(r);
		st_shard_stats_get(s, &stats);
		cm_buf_free(&idb);
		cm_buf_free(&sb);
		free(seen);
		for (int k = 0; k < NIDS; k++)
			cm_buf_free(&srcs[k]);
		free(srcs);
		free(meta);
		free(exists);
		printf("trial %2d: killed after %3d ms, %4" PRIu64
		       " ops acknowledged, in flight %2zu "
		       "(%s), %" PRIu64 " segments\n",
		       trial, ms, acked, np, np ? (took_alt ? "present" : "absent") : "-",
		       stats.segments);
		st_shard_close(s);
		cm_pool_destroy(pool);
		cm_pool_destroy(o.index_pool);
		/* Partial and unreferenced files are gone once the shard was
		 * opened and closed. */
		int segfiles = 0, tmpfiles = 0;
		DIR *dd = opendir(dir);
		for (struct dirent *de; dd && (de = readdir(dd));) {
			segfiles += strncmp(de->d_name, "seg-", 4) == 0;
			tmpfiles += strstr(de->d_name, ".tmp") != NULL;
		}
		if (dd)
			closedir(dd);
		CHECKF(segfiles == (int)stats.segments && tmpfiles == 0,
		       "trial %d: %d segment files, %d temp files, %" PRIu64 " segments", trial,
		       segfiles, tmpfiles, stats.segments);
		if (check_failures)
			break;
	}
	printf("%" PRIu64 " ops acknowledged over %d kills, in-flight batches present %" PRIu64
	       " absent %" PRIu64 ", %.1f s\n",
	       total_acked, TRIALS, inflight_present, inflight_absent,
	       (double)(cm_now_ns() - t0) / 1e9);
	CHECK(total_acked > 0);
	st_mapping_unref(map);
	free(model);
	free(alt);
	free(pending);
	free(pres);
	cm_rm_rf(base);
	return check_report("shard_crash_test");
}
