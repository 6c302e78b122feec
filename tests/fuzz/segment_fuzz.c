/* libFuzzer target: the segment reader (storage/segment_read.c) over
 * arbitrary file contents. Every path must return an error or a corrupt
 * cursor, never crash, leak or hang. Built and run by tests/fuzz/run.sh.
 *
 * The first input byte picks the mode:
 *  - odd: the rest is the whole file, written as is. The XXH3 trailer must
 *    refuse it (only verify_file runs; a mutated real segment never gets
 *    past the hash).
 *  - even: the rest is a list of LMDB entries (varint key length, key,
 *    varint value length, value), written through LMDB's own API, then
 *    sealed with a correct trailer, as an attacker with write access to
 *    the data directory could. LMDB trusts its page structure (it has no
 *    page checksums), so the file's pages are LMDB's; what is fuzzed is
 *    every value our decoders read. With bit 1 set, the per-value xxh32
 *    checksums are recomputed too (reseal(), following the layout in
 *    storage/segment_private.h), so the decoders behind them (postings
 *    blocks, positions, columns, stored chunks, zstd, ordinals) see the
 *    mutated bytes.
 * The other bits vary the read pattern (seeks, advances).
 *
 * Seeds: SEGMENT_FUZZ_SEEDS=<dir> ./segment_fuzz writes seed inputs made
 * from small real segments (st_segbuild_write) into <dir> and exits. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "../../common/cm_alloc.h"
#include "../../storage/st_segment.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
void __sanitizer_set_death_callback(void (*callback)(void));
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SKIP_ENTRY 17  /* storage/segment_private.h, formats 1-3 */
#define SKIP_ENTRY4 24 /* format 4: u32 last, u32 end, u32 sum, 6 x (u8 freq, u8 norm) */
#define IMP_BYTES 12   /* format 4: one impact group's pairs */
#define IMP_GROUP 16   /* format 4: blocks per impact group */
#define MAX_SWEEP 2000 /* ordinals, docs and column blocks read per input */
/* format 5: T values are blocks of terms (segment_private.h) */

static char dir[256], path[320];

static void
cleanup(void)
{
	char p[400];
	unlink(path);
	snprintf(p, sizeof(p), "%s/writer.mdb", dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s-lock", path);
	unlink(p);
	rmdir(dir);
}

static void
put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- resealing per-value checksums ---- */

typedef struct kv {
	const uint8_t *k;
	size_t klen;
	uint8_t *v; /* a private copy, resealed in place */
	size_t vlen;
} kv;

static void
seal_tail(uint8_t *v, size_t len)
{
	if (len >= 4)
		put_le32(v + len - 4, XXH32(v, len - 4, 0));
}

/* Field ids of keyword fields, from the F entry (their T values carry an
 * ordinal). */
static void
keyword_fields(const kv *e, size_t n, uint8_t *kw /* 65536 */)
{
	for (size_t i = 0; i < n; i++) {
		if (e[i].klen != 1 || e[i].k[0] != 'F' || e[i].vlen < 4)
			continue;
		cm_rd r;
		uint64_t nf, x;
		cm_rd_init(&r, e[i].v, e[i].vlen - 4);
		if (!cm_rd_varint(&r, &nf))
			return;
		for (uint64_t f = 0; f < nf && f < 65536; f++) {
			const char *name;
			size_t nl;
			uint8_t type, an, flags;
			if (!cm_rd_str(&r, &name, &nl) || !cm_rd_u8(&r, &type) ||
			    !cm_rd_u8(&r, &an) || !cm_rd_u8(&r, &flags))
				return;
			for (int j = 0; j < 6; j++)
				if (!cm_rd_varint(&r, &x))
					return;
			kw[f] = type == ST_FT_KEYWORD;
		}
	}
}

/* Blocks of a term's postings (0 when its T value does not parse). */
static uint64_t
term_blocks(const kv *e, size_t n, const uint8_t *key, size_t klen)
{
	for (size_t i = 0; i < n; i++)
		if (e[i].klen == klen && e[i].k[0] == 'T' &&
		    memcmp(e[i].k + 1, key + 1, klen - 1) == 0) {
			cm_rd r;
			uint64_t df;
			cm_rd_init(&r, e[i].v, e[i].vlen);
			if (!cm_rd_varint(&r, &df) || df == 0)
				return 0;
			return (df + ST_BLOCK - 1) / ST_BLOCK;
		}
	return 0;
}

/* Multi-block tables: nblocks entries of `width` bytes, entry b holding
 * its block's end offset at +end_at and checksum at +sum_at. */
/* Format 4's postings sums: the low 32 bits of XXH3 (seg_sum4). */
static uint32_t
sum4(const void *p, size_t n)
{
	return (uint32_t)XXH3_64bits(p, n);
}

static void
seal_blocks(uint8_t *table, uint64_t nblocks, size_t width, size_t end_at, size_t sum_at,
            const uint8_t *data, size_t data_len, bool xxh3)
{
	for (uint64_t b = 0; b < nblocks; b++) {
		uint8_t *s = table + b * width;
		uint32_t start = b ? cm_get_u32(s - width + end_at) : 0;
		uint32_t end = cm_get_u32(s + end_at);
		if (start <= end && end <= data_len)
			put_le32(s + sum_at, xxh3 ? sum4(data + start, end - start)
			                          : XXH32(data + start, end - start, 0));
	}
}

/* The segment's format, from its M entry (0 when it does not parse). */
static uint32_t
seg_format(const kv *e, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (e[i].klen == 1 && e[i].k[0] == 'M' && e[i].vlen >= 8)
			return cm_get_u32(e[i].v);
	return 0;
}

/* One term's value (formats 1-4 a T entry's, format 5 a slice of a block). */
static void
reseal_term(uint8_t *v, size_t len, bool keyword, bool fmt4)
{
	cm_rd r;
	uint64_t df, ttf, ord;
	cm_rd_init(&r, v, len);
	if (!cm_rd_varint(&r, &df) || df == 0)
		return;
	uint64_t nb = (df + ST_BLOCK - 1) / ST_BLOCK;
	if (nb == 1) {
		seal_tail(v, len);
		return;
	}
	if (!cm_rd_varint(&r, &ttf) || (keyword && !cm_rd_varint(&r, &ord)))
		return;
	size_t head = (size_t)(r.p - v);
	if (fmt4) {
		/* header sum, tables (blocks, then impact groups), their sum */
		size_t table = (size_t)nb * SKIP_ENTRY4 +
		               (size_t)((nb + IMP_GROUP - 1) / IMP_GROUP) * IMP_BYTES;
		if (nb > len || len - head < 4 + table + 4)
			return;
		put_le32(v + head, sum4(v, head));
		uint8_t *t = v + head + 4;
		seal_blocks(t, nb, SKIP_ENTRY4, 4, 8, t + table + 4, len - head - 4 - table - 4, true);
		put_le32(t + table, sum4(t, table));
		return;
	}
	size_t table = (size_t)nb * SKIP_ENTRY;
	if (nb > len || len - head < table + 4)
		return;
	seal_blocks(v + head, nb, SKIP_ENTRY, 4, 13, v + head + table + 4, len - head - table - 4,
	            false);
	put_le32(v + head + table, XXH32(v, head + table, 0));
}

/* Format 5: a block of terms or ids (varint n, varint dir length,
 * directory, u32 sum4, values): its directory's sum, then each value's own
 * (ids = -1: an I block, whose values end in an xxh32). */
static void
reseal_term_block(uint8_t *v, size_t len, int keyword)
{
	cm_rd r;
	uint64_t nt, dl;
	cm_rd_init(&r, v, len);
	if (!cm_rd_varint(&r, &nt) || !cm_rd_varint(&r, &dl) || dl > cm_rd_left(&r) ||
	    cm_rd_left(&r) - dl < 4)
		return;
	uint8_t *dir_end = (uint8_t *)r.p + dl, *vals = dir_end + 4;
	size_t vals_len = len - (size_t)(vals - v), off = 0;
	put_le32(dir_end, sum4(v, (size_t)(dir_end - v)));
	cm_rd_init(&r, r.p, dl);
	for (uint64_t i = 0; i < nt; i++) {
		uint64_t shared, sl, vl;
		if (i && (!cm_rd_varint(&r, &shared) || !cm_rd_varint(&r, &sl) ||
		          sl > cm_rd_left(&r)))
			return;
		if (i)
			r.p += sl;
		if (!cm_rd_varint(&r, &vl) || vl > vals_len - off)
			return;
		if (keyword < 0)
			seal_tail(vals + off, vl);
		else
			reseal_term(vals + off, vl, keyword, true);
		off += vl;
	}
}

static void
reseal(kv *e, size_t n)
{
	static uint8_t kw[65536];
	memset(kw, 0, sizeof(kw));
	for (size_t i = 0; i < n; i++)
		if (e[i].klen == 1 && e[i].k[0] == 'F')
			seal_tail(e[i].v, e[i].vlen);
	keyword_fields(e, n, kw);
	bool fmt4 = seg_format(e, n) >= 4, fmt5 = seg_format(e, n) >= 5;
	for (size_t i = 0; i < n; i++) {
		uint8_t *v = e[i].v;
		size_t len = e[i].vlen;
		switch (e[i].k[0]) {
		case 'C':
			if (len >= 28) {
				put_le32(v + 20, XXH32(v, 20, 0));
				seal_tail(v + 24, len - 24);
			}
			break;
		case 'T': {
			bool keyword = e[i].klen >= 3 && kw[cm_get_u16_be(e[i].k + 1)];
			if (fmt5)
				reseal_term_block(v, len, keyword);
			else
				reseal_term(v, len, keyword, fmt4);
			break;
		}
		case 'P': {
			uint64_t nb = e[i].klen >= 3 ? term_blocks(e, n, e[i].k, e[i].klen) : 0;
			if (nb <= 1) {
				seal_tail(v, len);
				break;
			}
			size_t table = (size_t)nb * 8;
			if (nb > len || len < table + 4)
				break;
			seal_blocks(v, nb, 8, 0, 4, v + table + 4, len - table - 4, false);
			put_le32(v + table, XXH32(v, table, 0));
			break;
		}
		case 'I':
			if (fmt5)
				reseal_term_block(v, len, -1);
			else
				seal_tail(v, len);
			break;
		case 'F':
			break; /* done first */
		default:       /* I, K, M, N, S, Z: a trailing xxh32 of the whole value */
			seal_tail(v, len);
			break;
		}
	}
}

/* ---- writing the file ---- */

static bool
write_trailer(const char *p)
{
	int fd = open(p, O_RDWR);
	if (fd < 0)
		return false;
	struct stat st;
	bool ok = false;
	if (fstat(fd, &st) == 0 && st.st_size > 0) {
		uint8_t *buf = malloc((size_t)st.st_size), tr[24];
		if (pread(fd, buf, (size_t)st.st_size, 0) == st.st_size) {
			uint64_t len = (uint64_t)st.st_size,
			         h = XXH3_64bits(buf, (size_t)st.st_size);
			memcpy(tr, "SHOALSG1", 8);
			for (int i = 0; i < 8; i++) {
				tr[8 + i] = (uint8_t)(len >> (8 * i));
				tr[16 + i] = (uint8_t)(h >> (8 * i));
			}
			ok = pwrite(fd, tr, sizeof(tr), st.st_size) == (ssize_t)sizeof(tr);
		}
		free(buf);
	}
	close(fd);
	return ok;
}

/* One writable environment for the whole run: opening one per input costs
 * LMDB's 2 MB dirty list (calloc'd, so ASan touches every page) each time. */
static MDB_env *wenv;
static MDB_dbi wdbi;

static void
writer_open(void)
{
	char p[400];
	MDB_txn *txn;
	snprintf(p, sizeof(p), "%s/writer.mdb", dir);
	if (mdb_env_create(&wenv) || mdb_env_set_mapsize(wenv, 64u << 20) ||
	    mdb_env_open(wenv, p, MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0600) ||
	    mdb_txn_begin(wenv, NULL, 0, &txn) || mdb_dbi_open(txn, NULL, 0, &wdbi) ||
	    mdb_txn_commit(txn))
		abort();
}

/* Writes the entries as an LMDB file at path; false if LMDB refuses. */
static bool
write_lmdb(kv *e, size_t n)
{
	MDB_txn *txn = NULL;
	if (mdb_txn_begin(wenv, NULL, 0, &txn))
		abort();
	mdb_drop(txn, wdbi, 0);
	for (size_t i = 0; i < n; i++) {
		MDB_val k = {e[i].klen, (void *)e[i].k}, v = {e[i].vlen, e[i].v};
		if (mdb_put(txn, wdbi, &k, &v, 0)) {
			mdb_txn_abort(txn);
			return false;
		}
	}
	if (mdb_txn_commit(txn))
		return false;
	/* a plain (not compacting) copy: meta pages plus the used map */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		abort();
	int rc = mdb_env_copyfd2(wenv, fd, 0);
	close(fd);
	return rc == 0 && write_trailer(path);
}

/* ---- reading everything ---- */

static void
sweep_postings(st_postings *p, const st_field_info *f, unsigned variant)
{
	static uint32_t pos[4096];
	uint32_t n = 0;
	if (variant & 1) {
		while (st_postings_next_block(p) && ++n < 100000)
			;
	} else if (variant & 2) {
		uint32_t target = 0;
		while (st_postings_advance(p, target) != ST_NO_MORE_DOCS && ++n < 100000) {
			target = p->doc + 1 + (p->doc % 97);
			if ((f->flags & ST_FI_POSITIONS))
				st_postings_positions(p, pos, 4096);
		}
	} else {
		while (st_postings_next(p) != ST_NO_MORE_DOCS && ++n < 1000000)
			if ((f->flags & ST_FI_POSITIONS))
				st_postings_positions(p, pos, 4096);
	}
}

static void
sweep_terms(st_seg_txn *t, const st_field_info *f, unsigned variant)
{
	st_terms *it;
	if (st_terms_open(t, f, &it))
		return;
	bool ok = variant & 4 ? st_terms_seek(it, "b", 1) : st_terms_seek(it, NULL, 0);
	for (int n = 0; ok && n < MAX_SWEEP; ok = st_terms_next(it), n++) {
		st_postings p;
		size_t len;
		const uint8_t *term = st_terms_term(it, &len);
		(void)st_terms_doc_freq(it);
		if (st_terms_postings(it, &p) == CM_OK) {
			sweep_postings(&p, f, variant);
			st_postings_corrupt(&p);
		}
		if (st_terms_postings(it, &p) == CM_OK) {
			for (uint32_t b = 0; b < p.nblocks && b < MAX_SWEEP; b++) {
				uint32_t mf;
				uint8_t mn;
				st_impact imp[ST_IMPACTS];
				st_postings_block_impact(&p, b, &mf, &mn);
				(void)st_postings_block_impacts(&p, b, imp);
				if (b % ST_IMPACT_GROUP == 0)
					(void)st_postings_group_impacts(&p, b / ST_IMPACT_GROUP, imp);
				(void)st_postings_find_block(&p, st_postings_block_last(&p, b));
				if (variant & 8)
					st_postings_seek_block(&p, b);
				else
					st_postings_advance(&p, st_postings_block_last(&p, b));
			}
		}
		uint32_t df;
		(void)st_term_doc_freq(t, f, term, len, &df);
		/* the same term by key, and its ordinal */
		uint8_t copy[512];
		if (len <= sizeof(copy)) {
			memcpy(copy, term, len);
			if (st_postings_open(t, f, copy, len, &p) == CM_OK)
				st_postings_next(&p);
			uint64_t ord;
			if (f->type == ST_FT_KEYWORD)
				st_term_ord(t, f, copy, len, &ord);
		}
	}
	st_terms_close(it);
}

static void
sweep(st_segment *s, unsigned variant)
{
	st_seg_txn *t;
	if (st_seg_txn_begin(s, &t))
		return;
	st_colblock cb = {0};
	uint32_t max_doc = st_segment_max_doc(s);
	for (size_t i = 0; i < st_segment_nfields(s); i++) {
		const st_field_info *f = st_segment_field_at(s, i);
		if (st_segment_field(s, f->name) != f)
			abort(); /* names are unique and sorted: lookup finds the same */
		if (f->flags & ST_FI_POSTINGS)
			sweep_terms(t, f, variant);
		const uint8_t *norms = st_norms(t, f);
		if (norms) {
			unsigned sum = 0;
			for (uint32_t d = 0; d < max_doc; d++)
				sum += norms[d]; /* max_doc bytes, as promised */
			(void)sum;
		}
		if (f->flags & ST_FI_COLUMN) {
			for (uint32_t b = 0; (uint64_t)b * ST_COL_BLOCK < max_doc && b < 64; b++) {
				int64_t mn, mx;
				uint32_t nv;
				st_col_zone(t, f, b, &mn, &mx, &nv);
				if (st_col_load(t, f, b, &cb) == CM_OK)
					for (uint32_t d = 0; d < cb.ndocs; d++)
						if (cb.starts[d] > cb.starts[d + 1] ||
						    cb.starts[d + 1] > cb.nvalues)
							abort(); /* a decoded block is consistent */
			}
			const int64_t *vals;
			for (uint32_t d = 0; d < max_doc && d < MAX_SWEEP; d += 1 + d % 7)
				st_col_values(t, f, &cb, d, &vals);
		}
		if (f->type == ST_FT_KEYWORD) {
			for (uint64_t o = 0; o < f->num_terms && o < MAX_SWEEP; o++) {
				const uint8_t *term;
				size_t len;
				uint64_t back;
				if (st_ord_term(t, f, o, &term, &len) == CM_OK)
					st_term_ord(t, f, term, len, &back);
			}
		}
	}
	cm_buf id, src;
	cm_buf_init(&id, CM_MEM_STORAGE);
	cm_buf_init(&src, CM_MEM_STORAGE);
	/* each get decodes its whole block: a sample of docs, not all */
	for (uint32_t d = 0, k = 0; d < max_doc && k < 48; d += 1 + (d >= 16) * 37, k++) {
		cm_buf_reset(&id);
		cm_buf_reset(&src);
		uint32_t back;
		if (st_stored_get(t, d, &id, &src) == CM_OK)
			st_id_lookup(t, (const char *)id.data, id.len, &back);
	}
	cm_buf_free(&id);
	cm_buf_free(&src);
	st_colblock_free(&cb);
	st_seg_txn_end(t);
}

static void
open_and_sweep(unsigned variant)
{
	st_segment *s;
	cm_error err;
	cm_error_clear(&err);
	if (st_segment_open(path, &s, &err) != CM_OK) {
		if (getenv("SEGMENT_FUZZ_DEBUG"))
			fprintf(stderr, "open: %s\n", err.reason);
		return;
	}
	sweep(s, variant);
	st_segment_close(s);
}

/* ---- seeds ---- */

static void
make_segment(const char *p, uint32_t ndocs, uint32_t seed)
{
	static const char *words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"};
	st_field_def ft = {
	    .path = "body", .type = ST_FT_TEXT, .analyzer = ST_AN_STANDARD, .index = true};
	st_field_def fk = {.path = "k", .type = ST_FT_KEYWORD, .index = true, .doc_values = true};
	st_field_def fl = {.path = "n", .type = ST_FT_LONG, .index = true, .doc_values = true};
	st_field_def fd = {.path = "d", .type = ST_FT_DOUBLE, .index = true, .doc_values = true};
	st_segbuild *b = st_segbuild_create();
	for (uint32_t i = 0; i < ndocs; i++) {
		char text[128] = "", kw[16], id[16], src[256];
		for (uint32_t w = 0; w < 1 + (i * seed) % 5; w++) {
			strcat(text, words[(i + w * seed) % 6]);
			strcat(text, " ");
		}
		snprintf(kw, sizeof(kw), "k%u", (i * 7 + seed) % 40);
		snprintf(id, sizeof(id), "id%u", i);
		snprintf(src, sizeof(src), "{\"body\":\"%s\",\"k\":\"%s\",\"n\":%u}", text, kw, i);
		st_value vals[5] = {
		    {.field = &ft, .s = text, .n = strlen(text)},
		    {.field = &fk, .s = kw, .n = strlen(kw)},
		    {.field = &fl, .i = (int64_t)(i * 37 % 1000) - 300},
		    {.field = &fd, .d = (double)i / 3},
		    {.field = &fl, .i = (int64_t)i},
		};
		st_doc d = {.id = id,
		            .id_len = strlen(id),
		            .source = src,
		            .source_len = strlen(src),
		            .values = vals,
		            .nvalues = i % 3 ? 4 : 5};
		uint32_t no;
		cm_error err;
		cm_error_clear(&err);
		if (st_segbuild_add(b, &d, i, 1, 1, &no, &err))
			abort();
	}
	cm_error err;
	cm_error_clear(&err);
	if (st_segbuild_write(b, NULL, p, 1, NULL, &err))
		abort();
	st_segbuild_destroy(b);
}

static void
put_varint(FILE *f, uint64_t v)
{
	while (v >= 0x80) {
		fputc((int)(v & 0x7f) | 0x80, f);
		v >>= 7;
	}
	fputc((int)v, f);
}

/* One seed in the entry-list form, from a real segment's LMDB entries. */
static void
write_seeds(const char *outdir)
{
	static const uint32_t sizes[] = {3, 150, 300};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		make_segment(path, sizes[i], (uint32_t)i + 2);
		for (int mode = 0; mode < 2; mode++) {
			char out[512];
			snprintf(out, sizeof(out), "%s/seg%u-%s", outdir, sizes[i],
			         mode ? "resealed" : "entries");
			FILE *f = fopen(out, "wb");
			MDB_env *env;
			MDB_txn *txn;
			MDB_dbi dbi;
			MDB_cursor *cur;
			MDB_val k, v;
			if (!f || mdb_env_create(&env) ||
			    mdb_env_open(env, path, MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR, 0) ||
			    mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) ||
			    mdb_dbi_open(txn, NULL, 0, &dbi) || mdb_cursor_open(txn, dbi, &cur))
				abort();
			fputc(mode ? 2 : 0, f);
			for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
			     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
				put_varint(f, k.mv_size);
				fwrite(k.mv_data, 1, k.mv_size, f);
				put_varint(f, v.mv_size);
				fwrite(v.mv_data, 1, v.mv_size, f);
			}
			mdb_cursor_close(cur);
			mdb_txn_abort(txn);
			mdb_env_close(env);
			fclose(f);
		}
		struct stat st;
		if (stat(path, &st) == 0 && st.st_size < 65536) {
			/* the raw file, for the trailer check */
			char out[512];
			snprintf(out, sizeof(out), "%s/seg%u-file", outdir, sizes[i]);
			FILE *in = fopen(path, "rb"), *f = fopen(out, "wb");
			fputc(1, f);
			int c;
			while ((c = fgetc(in)) != EOF)
				fputc(c, f);
			fclose(in);
			fclose(f);
		}
	}
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* run.sh's scratch directory (it removes it: libFuzzer leaves without
	 * running atexit handlers), else tmpfs, else /tmp */
	const char *base = getenv("SHOAL_FUZZ_TMP");
	if (!base || !*base)
		base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/segfuzzXXXXXX", base);
	if (!mkdtemp(dir))
		abort();
	snprintf(path, sizeof(path), "%s/seg-1.mdb", dir);
	atexit(cleanup);
	__sanitizer_set_death_callback(cleanup); /* a crash leaves no temp dir */
	writer_open();
	const char *seeds = getenv("SEGMENT_FUZZ_SEEDS");
	if (seeds) {
		write_seeds(seeds);
		exit(0);
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 1 << 20)
		return 0;
	uint8_t mode = data[0];
	if (mode & 1) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || write(fd, data + 1, size - 1) != (ssize_t)(size - 1))
			abort();
		close(fd);
		open_and_sweep(mode >> 2);
		return 0;
	}
	/* the entry list */
	kv *e = NULL;
	size_t n = 0, cap = 0;
	cm_rd r;
	cm_rd_init(&r, data + 1, size - 1);
	while (cm_rd_left(&r) > 0 && n < 4096) {
		uint64_t kl, vl;
		const uint8_t *k, *v;
		if (!cm_rd_varint(&r, &kl) || kl > cm_rd_left(&r) ||
		    !cm_rd_bytes(&r, (size_t)kl, &k) || !cm_rd_varint(&r, &vl) ||
		    vl > cm_rd_left(&r) || !cm_rd_bytes(&r, (size_t)vl, &v))
			break;
		if (kl == 0 || kl > 511)
			continue; /* LMDB's key limits */
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			e = realloc(e, cap * sizeof(kv));
		}
		e[n].k = k;
		e[n].klen = (size_t)kl;
		e[n].v = malloc(vl ? (size_t)vl : 1);
		memcpy(e[n].v, v, (size_t)vl);
		e[n].vlen = (size_t)vl;
		n++;
	}
	if (mode & 2)
		reseal(e, n);
	if (write_lmdb(e, n))
		open_and_sweep(mode >> 2);
	for (size_t i = 0; i < n; i++)
		free(e[i].v);
	free(e);
	return 0;
}
