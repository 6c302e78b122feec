/* Corruption: flipped bytes in a segment file give errors, never crashes.
 *
 * Mode 1 flips bytes anywhere: the file trailer's hash must refuse the
 * open. Mode 2 flips bytes inside one LMDB value and then re-seals the
 * trailer (as if the damage predates the hash), so the per-value xxh32
 * checks are what must catch it: a full read sweep has to report an error
 * on every trial. Mode 3 does the same inside the term dictionary's and
 * the ids' blocks only (format 5: directories of prefix-compressed terms
 * or ids and the values they frame). Run under ASan too. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "check.h"
#include "storage/st_segment.h"

static uint64_t rng = 0x1234567887654321ull;
static uint64_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static const char *words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta",
                              "theta", "iota", "kappa", "lambda", "mu"};

static void
make_segment(const char *path)
{
	st_field_def ft = {.path = "body", .type = ST_FT_TEXT, .analyzer = ST_AN_STANDARD,
	                   .index = true};
	st_field_def fk = {.path = "k", .type = ST_FT_KEYWORD, .index = true, .doc_values = true};
	st_field_def fl = {.path = "n", .type = ST_FT_LONG, .index = true, .doc_values = true};
	st_field_def fd = {.path = "d", .type = ST_FT_DOUBLE, .index = true, .doc_values = true};
	st_segbuild *b = st_segbuild_create();
	for (uint32_t i = 0; i < 700; i++) {
		char text[256] = "", kw[32], id[32], src[512];
		int nw = 1 + (int)(rnd() % 12);
		for (int w = 0; w < nw; w++) {
			strcat(text, words[rnd() % 12]);
			strcat(text, " ");
		}
		/* rarer terms too: the dictionary spans many blocks */
		char rare[32];
		snprintf(rare, sizeof(rare), "r%ux ", (unsigned)(rnd() % 400));
		strcat(text, rare);
		snprintf(kw, sizeof(kw), "k%u", (unsigned)(rnd() % 90));
		snprintf(id, sizeof(id), "id%u", i);
		snprintf(src, sizeof(src), "{\"body\":\"%s\",\"k\":\"%s\",\"n\":%u}", text, kw, i);
		st_value vals[4] = {
		    {.field = &ft, .s = text, .n = strlen(text)},
		    {.field = &fk, .s = kw, .n = strlen(kw)},
		    {.field = &fl, .i = (int64_t)(rnd() % 100000)},
		    {.field = &fd, .d = (double)i / 3},
		};
		st_doc d = {.id = id, .id_len = strlen(id), .source = src, .source_len = strlen(src),
		            .values = vals, .nvalues = 4};
		uint32_t no;
		cm_error err = {0};
		REQUIRE(st_segbuild_add(b, &d, i, 1, 1, &no, &err) == CM_OK);
	}
	cm_error err = {0};
	REQUIRE(st_segbuild_write(b, NULL, path, 1, NULL, &err) == CM_OK);
	st_segbuild_destroy(b);
}

/* Reads everything; returns the number of problems reported. */
static int
sweep(st_segment *s)
{
	int bad = 0;
	st_seg_txn *t;
	if (st_seg_txn_begin(s, &t))
		return 1;
	uint32_t pos[4096];
	st_colblock cb = {0};
	for (size_t i = 0; i < st_segment_nfields(s); i++) {
		const st_field_info *f = st_segment_field_at(s, i);
		if (f->flags & ST_FI_POSTINGS) {
			st_terms *it;
			if (st_terms_open(t, f, &it)) {
				bad++;
				continue;
			}
			for (bool ok = st_terms_seek(it, NULL, 0); ok; ok = st_terms_next(it)) {
				st_postings p;
				(void)st_terms_doc_freq(it);
				if (st_terms_postings(it, &p)) {
					bad++;
					continue;
				}
				while (st_postings_next(&p) != ST_NO_MORE_DOCS) {
					if ((f->flags & ST_FI_POSITIONS) &&
					    st_postings_positions(&p, pos, 4096) < 0)
						bad++;
				}
				bad += st_postings_corrupt(&p);
				/* skip data paths */
				if (!st_terms_postings(it, &p)) {
					for (uint32_t b = 0; b < p.nblocks; b++) {
						uint32_t mf;
						uint8_t mn;
						st_postings_block_impact(&p, b, &mf, &mn);
						st_postings_advance(&p, st_postings_block_last(&p, b));
					}
					bad += st_postings_corrupt(&p);
				}
			}
			bad += st_terms_corrupt(it);
			st_terms_close(it);
		}
		if ((f->flags & ST_FI_NORMS) && !st_norms(t, f))
			bad++;
		if (f->flags & ST_FI_COLUMN) {
			for (uint32_t b = 0; (uint64_t)b * ST_COL_BLOCK < st_segment_max_doc(s); b++) {
				int64_t mn, mx;
				uint32_t nv;
				bad += st_col_zone(t, f, b, &mn, &mx, &nv) != CM_OK;
				bad += st_col_load(t, f, b, &cb) != CM_OK;
			}
		}
		if (f->type == ST_FT_KEYWORD) {
			for (uint64_t o = 0; o < f->num_terms; o++) {
				const uint8_t *term;
				size_t len;
				uint64_t back;
				if (st_ord_term(t, f, o, &term, &len)) {
					bad++;
					continue;
				}
				bad += st_term_ord(t, f, term, len, &back) != CM_OK;
			}
		}
	}
	cm_buf id, src;
	cm_buf_init(&id, CM_MEM_STORAGE);
	cm_buf_init(&src, CM_MEM_STORAGE);
	for (uint32_t d = 0; d < st_segment_max_doc(s); d++) {
		cm_buf_reset(&id);
		cm_buf_reset(&src);
		if (st_stored_get(t, d, &id, &src)) {
			bad++;
			continue;
		}
		uint32_t back;
		bad += st_id_lookup(t, (const char *)id.data, id.len, &back) != CM_OK;
	}
	cm_buf_free(&id);
	cm_buf_free(&src);
	st_colblock_free(&cb);
	st_seg_txn_end(t);
	return bad;
}

static uint8_t *
read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	REQUIRE(f);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc(*len);
	REQUIRE(fread(p, 1, *len, f) == *len);
	fclose(f);
	return p;
}

static void
write_file(const char *path, const uint8_t *p, size_t len)
{
	FILE *f = fopen(path, "wb");
	REQUIRE(f);
	REQUIRE(fwrite(p, 1, len, f) == len);
	fclose(f);
}

typedef struct span {
	size_t off, len;
	uint8_t tag;
} span;

/* File offsets of every LMDB value, found through LMDB's own map. */
static span *
value_spans(const char *path, const uint8_t *file, size_t flen, size_t *n)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_cursor *cur;
	REQUIRE(mdb_env_create(&env) == 0);
	REQUIRE(mdb_env_open(env, path, MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR, 0) == 0);
	REQUIRE(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0);
	REQUIRE(mdb_dbi_open(txn, NULL, 0, &dbi) == 0);
	REQUIRE(mdb_cursor_open(txn, dbi, &cur) == 0);
	size_t cap = 1024;
	span *s = malloc(cap * sizeof(span));
	*n = 0;
	MDB_val k, v;
	/* The map base: where a large (unique) value sits in the file bytes. */
	const uint8_t *base = NULL;
	for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !base;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (v.mv_size < 64)
			continue;
		const uint8_t *hit = memmem(file, flen, v.mv_data, v.mv_size);
		if (hit)
			base = (const uint8_t *)v.mv_data - (hit - file);
	}
	REQUIRE(base);
	for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (*n == cap)
			s = realloc(s, (cap *= 2) * sizeof(span));
		s[(*n)++] = (span){(size_t)((const uint8_t *)v.mv_data - base), v.mv_size,
		                   k.mv_size ? *(const uint8_t *)k.mv_data : 0};
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	return s;
}

static void
reseal(uint8_t *p, size_t len)
{
	uint64_t h = XXH3_64bits(p, len - 24);
	for (int i = 0; i < 8; i++)
		p[len - 8 + i] = (uint8_t)(h >> (8 * i));
}

int
main(void)
{
	char dir[] = "/tmp/segcorruptXXXXXX";
	REQUIRE(mkdtemp(dir));
	char path[256], bad_path[256];
	snprintf(path, sizeof(path), "%s/seg-1.mdb", dir);
	snprintf(bad_path, sizeof(bad_path), "%s/seg-bad.mdb", dir);
	make_segment(path);
	st_segment *s;
	cm_error err = {0};
	REQUIRE(st_segment_open(path, &s, &err) == CM_OK);
	CHECK(sweep(s) == 0);
	st_segment_close(s);
	size_t len;
	uint8_t *orig = read_file(path, &len);
	uint8_t *copy = malloc(len);

	/* mode 1: anywhere, including LMDB's pages and the trailer */
	int refused = 0;
	for (int trial = 0; trial < 60; trial++) {
		memcpy(copy, orig, len);
		int flips = 1 + (int)(rnd() % 3);
		for (int k = 0; k < flips; k++)
			copy[rnd() % len] ^= (uint8_t)(1 + rnd() % 255);
		write_file(bad_path, copy, len);
		cm_error e2 = {0};
		if (st_segment_open(bad_path, &s, &e2) != CM_OK) {
			refused++;
			continue;
		}
		sweep(s);
		st_segment_close(s);
	}
	CHECKF(refused == 60, "refused %d of 60", refused);
	/* truncated files */
	for (size_t cut = 0; cut < len; cut += len / 7 + 1) {
		write_file(bad_path, orig, cut);
		cm_error e2 = {0};
		CHECK(st_segment_open(bad_path, &s, &e2) != CM_OK);
	}

	/* mode 2: inside values, trailer re-sealed; mode 3: inside T and I blocks */
	size_t nspans, nterm = 0;
	span *spans = value_spans(path, orig, len, &nspans);
	REQUIRE(nspans > 10);
	span *tspans = malloc(nspans * sizeof(span));
	for (size_t i = 0; i < nspans; i++)
		if (spans[i].tag == 'T' || spans[i].tag == 'I')
			tspans[nterm++] = spans[i];
	CHECKF(nterm > 10, "%zu term blocks", nterm);
	for (int mode = 2; mode <= 3; mode++) {
		int detected = 0, trials = 400;
		for (int trial = 0; trial < trials; trial++) {
			memcpy(copy, orig, len);
			span sp = mode == 2 ? spans[rnd() % nspans] : tspans[rnd() % nterm];
			if (sp.len == 0)
				continue;
			size_t at = sp.off + rnd() % sp.len;
			REQUIRE(at < len - 24);
			copy[at] ^= (uint8_t)(1 + rnd() % 255);
			if (trial % 4 == 0) /* sometimes a second byte in the same value */
				copy[sp.off + rnd() % sp.len] ^= 0x10;
			reseal(copy, len);
			write_file(bad_path, copy, len);
			cm_error e2 = {0};
			if (st_segment_open(bad_path, &s, &e2) != CM_OK) {
				detected++;
				continue;
			}
			int bad = sweep(s);
			st_segment_close(s);
			if (bad)
				detected++;
			else
				CHECKF(0, "undetected flip at offset %zu (value at %zu, %zu bytes)",
				       at, sp.off, sp.len);
		}
		printf("mode %d: %d of %d value corruptions reported\n", mode, detected, trials);
	}
	free(tspans);
	free(spans);
	free(orig);
	free(copy);
	cm_rm_rf(dir);
	return check_report("segment_corrupt_test");
}
