/* A merge writes the same file on any pool: no pool (every task on the
 * calling thread), one thread, and more threads than cores, with and
 * without spilling, give byte-identical segments; every entry is compared
 * too, so a difference names its key. The inputs are big enough for the
 * split to matter: a text field over several term ranges, many stored-doc
 * ranges, a keyword field with a column, deletes. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lmdb.h>

#include "check.h"
#include "common/cm_sys.h"
#include "storage/st_segment.h"

enum { NSEG = 3, NDOC = 5000, NW = 60, VOCAB = 40000 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static st_field_def f_body = {.path = "body", .type = ST_FT_TEXT, .analyzer = ST_AN_WHITESPACE,
                              .index = true};
static st_field_def f_tag = {.path = "tag", .type = ST_FT_KEYWORD, .index = true,
                             .doc_values = true};
static st_field_def f_n = {.path = "n", .type = ST_FT_LONG, .index = true, .doc_values = true};

static void
build_input(const char *path, int s, uint64_t gen)
{
	st_segbuild *b = st_segbuild_create();
	char *text = malloc(NW * 8 + 1), src[NW * 8 + 64], id[32], tag[32];
	for (uint32_t d = 0; d < NDOC; d++) {
		text[0] = 0;
		size_t tl = 0;
		for (int w = 0; w < NW; w++) {
			/* skewed: a few words in most docs, most words rare */
			uint64_t r = rnd() % VOCAB;
			uint32_t word = (uint32_t)(r * (rnd() % VOCAB) / VOCAB);
			tl += (size_t)snprintf(text + tl, 8, "w%05u ", word);
		}
		snprintf(src, sizeof(src), "{\"body\":\"%s\",\"d\":%u}", text, d);
		snprintf(id, sizeof(id), "s%d-%u", s, d);
		snprintf(tag, sizeof(tag), "t%u", (uint32_t)(rnd() % 3000));
		st_value vals[3] = {{.field = &f_body, .s = text, .n = tl},
		                    {.field = &f_tag, .s = tag, .n = strlen(tag)},
		                    {.field = &f_n, .i = (int64_t)(rnd() % 100000) - 50000}};
		st_doc doc = {.id = id, .id_len = strlen(id), .source = src,
		              .source_len = strlen(src), .values = vals, .nvalues = d % 11 ? 3 : 1};
		uint32_t no;
		cm_error err = {0};
		REQUIRE(st_segbuild_add(b, &doc, d, 1, 1, &no, &err) == CM_OK);
	}
	cm_error err = {0};
	REQUIRE(st_segbuild_write(b, NULL, path, gen, NULL, &err) == CM_OK);
	st_segbuild_destroy(b);
	free(text);
}

static char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	REQUIRE(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *d = malloc((size_t)n + 1);
	REQUIRE(fread(d, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return d;
}

/* Every key and value of a against b, in order. */
static void
compare_entries(const char *a, const char *b, uint64_t *entries)
{
	MDB_env *env[2];
	MDB_txn *txn[2];
	MDB_dbi dbi[2];
	MDB_cursor *cur[2];
	const char *paths[2] = {a, b};
	for (int i = 0; i < 2; i++) {
		REQUIRE(mdb_env_create(&env[i]) == 0);
		unsigned flags = MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR;
		REQUIRE(mdb_env_open(env[i], paths[i], flags, 0) == 0);
		REQUIRE(mdb_txn_begin(env[i], NULL, MDB_RDONLY, &txn[i]) == 0);
		REQUIRE(mdb_dbi_open(txn[i], NULL, 0, &dbi[i]) == 0);
		REQUIRE(mdb_cursor_open(txn[i], dbi[i], &cur[i]) == 0);
	}
	MDB_val k[2], v[2];
	int rc[2];
	*entries = 0;
	for (MDB_cursor_op op = MDB_FIRST;; op = MDB_NEXT) {
		for (int i = 0; i < 2; i++)
			rc[i] = mdb_cursor_get(cur[i], &k[i], &v[i], op);
		CHECK(rc[0] == rc[1]);
		if (rc[0] || rc[1])
			break;
		bool same = k[0].mv_size == k[1].mv_size && v[0].mv_size == v[1].mv_size &&
		            memcmp(k[0].mv_data, k[1].mv_data, k[0].mv_size) == 0 &&
		            memcmp(v[0].mv_data, v[1].mv_data, v[0].mv_size) == 0;
		CHECKF(same, "%s vs %s: entry %llu differs (key tag %c, %zu bytes)", a, b,
		       (unsigned long long)*entries, *(const char *)k[0].mv_data, k[0].mv_size);
		if (!same)
			break;
		(*entries)++;
	}
	for (int i = 0; i < 2; i++) {
		mdb_cursor_close(cur[i]);
		mdb_txn_abort(txn[i]);
		mdb_env_close(env[i]);
	}
}

int
main(void)
{
	char dir[] = "/tmp/mergepartestXXXXXX";
	REQUIRE(mkdtemp(dir));
	char path[256];
	st_segment *segs[NSEG];
	uint64_t *live[NSEG];
	uint64_t in_bytes = 0;
	for (int s = 0; s < NSEG; s++) {
		snprintf(path, sizeof(path), "%s/in-%d.mdb", dir, s);
		build_input(path, s, 10 + (uint64_t)s);
		cm_error err = {0};
		REQUIRE(st_segment_open(path, &segs[s], &err) == CM_OK);
		in_bytes += st_segment_bytes(segs[s]);
		live[s] = calloc(st_bit_words(NDOC), 8);
		for (uint32_t d = 0; d < NDOC; d++)
			if (rnd() % 9)
				st_bit_set(live[s], d);
	}
	/* big enough to be split: many stored-doc ranges (~256 KB of input
	 * each) and several term ranges of body */
	CHECK(in_bytes > 4u << 20);
	uint64_t body_terms = 0, body_df = 0;
	for (int s = 0; s < NSEG; s++) {
		const st_field_info *f = st_segment_field(segs[s], "body");
		REQUIRE(f);
		body_terms += f->num_terms;
		body_df += f->sum_doc_freq;
	}
	CHECK(body_terms > 40000 && body_df > 600000);

	static const struct {
		int threads; /* 0: no pool */
		size_t budget;
	} runs[] = {{0, 256u << 20}, {1, 256u << 20}, {4, 256u << 20}, {4, 1u << 20},
	            {0, 1u << 20}};
	size_t nruns = sizeof(runs) / sizeof(runs[0]);
	char first[256];
	size_t first_len = 0;
	char *first_data = NULL;
	for (size_t r = 0; r < nruns; r++) {
		int threads = runs[r].threads;
		cm_pool *pool = threads ? cm_pool_create(threads, "mergetest") : NULL;
		snprintf(path, sizeof(path), "%s/merged-%zu.mdb", dir, r);
		cm_error err = {0};
		cm_err rc = st_segment_merge(segs, (const uint64_t *const *)live, NSEG, path, 99,
		                             pool, runs[r].budget, &err);
		if (rc)
			fprintf(stderr, "merge: %s\n", err.reason);
		REQUIRE(rc == CM_OK);
		if (pool)
			cm_pool_destroy(pool);
		st_segment *m;
		REQUIRE(st_segment_open(path, &m, &err) == CM_OK);
		uint32_t nlive = 0;
		for (int s = 0; s < NSEG; s++)
			for (uint32_t d = 0; d < NDOC; d++)
				nlive += st_bit_get(live[s], d);
		CHECK(st_segment_max_doc(m) == nlive);
		st_segment_close(m);
		size_t len;
		char *data = slurp(path, &len);
		if (r == 0) {
			snprintf(first, sizeof(first), "%s", path);
			first_data = data;
			first_len = len;
			continue;
		}
		CHECKF(len == first_len && memcmp(data, first_data, len) == 0,
		       "%s (%d threads, budget %zu) differs from %s", path, runs[r].threads,
		       runs[r].budget, first);
		uint64_t entries;
		compare_entries(first, path, &entries);
		CHECK(entries > 1000); /* LMDB entries: blocks of 32 terms or ids (format 5) */
		free(data);
	}
	free(first_data);
	for (int s = 0; s < NSEG; s++) {
		st_segment_close(segs[s]);
		free(live[s]);
	}
	cm_rm_rf(dir);
	return check_report("merge_parallel_test");
}
