/* Immutable segments: one LMDB environment per file (seg-<gen>.mdb),
 * written once in key order with MDB_APPEND, then read-only and zero-copy.
 * This is the interface the query engine reads through.
 *
 * Concurrency: an st_segment is shared by all threads. Every read goes
 * through an st_seg_txn, which one thread uses at a time; pointers it hands
 * out (terms, norms, column data) stay valid until st_seg_txn_end. */
#ifndef ST_SEGMENT_H
#define ST_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../common/cm_sys.h"
#include "st_types.h"

#define ST_NO_MORE_DOCS UINT32_MAX
#define ST_BLOCK 128        /* docs per postings block */
#define ST_IMPACTS 6        /* at most this many impacts per block or group */
#define ST_IMPACT_GROUP 16  /* blocks per second-level impact group */
#define ST_COL_BLOCK 4096   /* docs per column block */

typedef struct st_segment st_segment;
typedef struct st_seg_txn st_seg_txn;

enum {
	ST_FI_POSTINGS = 1 << 0,  /* terms + postings ('T') */
	ST_FI_POSITIONS = 1 << 1, /* positions ('P'), text only */
	ST_FI_NORMS = 1 << 2,     /* one byte per doc ('N'), text only */
	ST_FI_COLUMN = 1 << 3,    /* column blocks ('C') */
	ST_FI_MULTI = 1 << 4,     /* some doc has more than one value */
};

typedef struct st_field_info {
	const char *name;
	uint16_t id; /* segment-local */
	st_field_type type;
	st_analyzer_kind analyzer;
	uint8_t flags;
	uint32_t doc_count;           /* docs with at least one value */
	uint64_t sum_total_term_freq; /* text: tokens; keyword: values */
	uint64_t sum_doc_freq;
	uint64_t num_terms;           /* distinct terms; keyword: number of ordinals */
	int64_t col_min, col_max;     /* column fields: over all values (sortable form for doubles) */
} st_field_info;

cm_err st_segment_open(const char *path, st_segment **out, cm_error *err);
void st_segment_close(st_segment *s);
uint32_t st_segment_max_doc(const st_segment *s);
uint64_t st_segment_generation(const st_segment *s);
uint32_t st_segment_format(const st_segment *s); /* the file format it was written in */
const char *st_segment_path(const st_segment *s);
uint64_t st_segment_bytes(const st_segment *s); /* file size */
/* Where a segment's bytes are: the keys and values of each section (a
 * key's first byte, the tags in segment_private.h) summed, for size
 * tables; what the file holds beyond them is LMDB's pages and trailer. */
typedef struct st_seg_section {
	uint64_t entries, key_bytes, value_bytes;
	/* values on LMDB overflow pages, their bytes, and those pages'
	 * unused bytes */
	uint64_t big_values, big_bytes, big_slack;
} st_seg_section;
cm_err st_segment_sections(const st_segment *s, st_seg_section by_tag[256]);
/* LMDB's side of the same file: its page size and tree depth, the pages of
 * each kind its main tree holds, the pages on its free list, and the pages
 * the file holds (last page number + 1, so the meta pages count). */
typedef struct st_seg_pages {
	uint64_t psize, depth, branch, leaf, overflow, free, total;
} st_seg_pages;
cm_err st_segment_pages(const st_segment *s, st_seg_pages *out);
size_t st_segment_nfields(const st_segment *s);
const st_field_info *st_segment_field_at(const st_segment *s, size_t i);
const st_field_info *st_segment_field(const st_segment *s, const char *name); /* NULL if absent */

cm_err st_seg_txn_begin(const st_segment *s, st_seg_txn **out);
void st_seg_txn_end(st_seg_txn *t);
const st_segment *st_seg_txn_segment(const st_seg_txn *t);

/* ---- postings ---- */

/* Cursor over one term's postings. Decodes a block of up to 128 docs at a
 * time into docs[]/freqs[]; callers may read those arrays directly (bulk
 * path) between st_postings_next_block calls. */
typedef struct st_postings {
	uint32_t doc_freq;
	uint64_t total_term_freq;
	uint32_t doc;     /* current doc, ST_NO_MORE_DOCS at end; UINT32_MAX-1 before first */
	uint32_t freq;    /* of the current doc */
	uint32_t block;   /* index of the decoded block */
	uint32_t nblocks;
	uint32_t n, i;    /* docs in the decoded block, cursor within it */
	uint32_t docs[ST_BLOCK];
	uint32_t freqs[ST_BLOCK];
	/* what st_postings_positions read: docs, positions, position blocks
	 * located (a block's checksum and offsets); counts for tests */
	uint32_t pos_docs, pos_blocks;
	uint64_t pos_read;
	/* private */
	st_seg_txn *txn;
	uint16_t field;
	const uint8_t *skip, *data, *pos_data;
	size_t data_len, pos_len;
	uint32_t pos_block; /* block whose positions are located */
	const uint8_t *pos_cur;
	uint32_t pos_i;
	bool corrupt;
	const uint8_t *pos_table, *pos_end;
	uint32_t one_last, one_maxf; /* single-block terms keep their skip data here */
	const uint8_t *groups;       /* format 4: the second level of impacts */
	uint8_t skip_entry;          /* bytes per skip entry: SKIP_ENTRY or SKIP_ENTRY4 */
	uint8_t one_norm;
	uint8_t pos_bits;  /* width of the located block's packed positions */
	uint32_t pos_idx;  /* index of doc pos_i's first position in the block */
	bool with_freqs;
	const uint8_t *pos_inl; /* positions inside the T value (format 3) */
	size_t pos_inl_len;
	uint16_t pos_key_len; /* formats 1-2: 'P' key, looked up on the first positions call */
	uint8_t pos_key[3 + ST_MAX_TOKEN_LEN];
} st_postings;

/* True when a block failed its checksum or did not decode: the cursor then
 * ended early (doc == ST_NO_MORE_DOCS) and results are incomplete. */
static inline bool
st_postings_corrupt(const st_postings *p)
{
	return p->corrupt;
}

/* CM_ENOTFOUND when the term is absent. */
cm_err st_postings_open(st_seg_txn *t, const st_field_info *f, const void *term, size_t len,
                        st_postings *p);
uint32_t st_postings_next(st_postings *p);
uint32_t st_postings_advance(st_postings *p, uint32_t target); /* first doc >= target */
/* Bulk: decodes the next block (the first on the first call); returns the
 * number of docs in it, 0 at the end. Sets doc to docs[0]. */
uint32_t st_postings_next_block(st_postings *p);
/* Skip data without decoding: last doc of block b, and the block's max
 * impact (the largest freq and the smallest norm byte among its docs, an
 * upper bound for BM25 over the block). */
static inline uint32_t
st_postings_block_last(const st_postings *p, uint32_t b)
{
	/* inline: block-max skipping asks it of every block it passes */
	if (b >= p->nblocks)
		return ST_NO_MORE_DOCS;
	if (!p->skip)
		return p->one_last;
	uint32_t v;
	memcpy(&v, p->skip + (size_t)b * p->skip_entry, 4); /* little-endian, as cm_get_u32 */
	return v;
}
void st_postings_block_impact(const st_postings *p, uint32_t b, uint32_t *max_freq,
                              uint8_t *min_norm);
/* The competitive impacts of block b: n (returned, 1..ST_IMPACTS) pairs
 * such that every doc of the block has one with freq >= its freq and
 * norm <= its norm, so BM25 over the pairs bounds the block's scores for
 * any idf and avgdl. freq UINT32_MAX: any freq (bound by the weight).
 * Segments before format 4 have one pair (max freq, min norm). */
typedef struct st_impact {
	uint32_t freq;
	uint8_t norm;
} st_impact;
unsigned st_postings_block_impacts(const st_postings *p, uint32_t b, st_impact *imp);
/* The same over group g, blocks [g * ST_IMPACT_GROUP, (g + 1) *
 * ST_IMPACT_GROUP): 0 when the segment has no second level (before
 * format 4, or a term of one block); the caller then takes its blocks'. */
unsigned st_postings_group_impacts(const st_postings *p, uint32_t g, st_impact *imp);
/* Decodes block b and moves to its first doc, without decoding the blocks
 * between (block-max skipping); returns that doc, ST_NO_MORE_DOCS past the
 * end or on corruption. A b before the current block means the current
 * one, whose cursor then stays where it is (never backwards). */
uint32_t st_postings_seek_block(st_postings *p, uint32_t b);
/* A term's doc_freq from the dictionary alone (the count of a term query
 * in a segment without deletions); CM_ENOTFOUND when the term is absent,
 * CM_ECORRUPT when its header fails its checksum. */
cm_err st_term_doc_freq(st_seg_txn *t, const st_field_info *f, const void *term, size_t len,
                        uint32_t *df);
/* Index of the first block whose last doc >= target (nblocks if none). */
uint32_t st_postings_find_block(const st_postings *p, uint32_t target);
/* Positions of the current doc (field must have ST_FI_POSITIONS); returns
 * the count (== freq) written to pos (cap >= freq), or -1 on corruption. */
int st_postings_positions(st_postings *p, uint32_t *pos, uint32_t cap);

/* ---- terms dictionary ---- */

typedef struct st_terms st_terms;
cm_err st_terms_open(st_seg_txn *t, const st_field_info *f, st_terms **out);
/* Positions at the first term >= key (key NULL: the first term). false at end. */
bool st_terms_seek(st_terms *it, const void *key, size_t len);
bool st_terms_next(st_terms *it);
/* The current term: valid until the iterator moves or closes. */
const uint8_t *st_terms_term(const st_terms *it, size_t *len);
/* Whether the iterator stopped at a corrupt block rather than the end. */
bool st_terms_corrupt(const st_terms *it);
uint32_t st_terms_doc_freq(const st_terms *it);
cm_err st_terms_postings(st_terms *it, st_postings *p);
void st_terms_close(st_terms *it);

/* ---- norms ---- */

/* max_doc bytes, one per doc: st_norm_encode(length), 0 = no value. NULL
 * when the field has no norms. */
const uint8_t *st_norms(st_seg_txn *t, const st_field_info *f);

/* ---- columns ---- */

/* One decoded column block: values of docs [first_doc, first_doc+ndocs).
 * Doc d's values are vals[starts[d-first_doc] .. starts[d-first_doc+1]),
 * ascending. Doubles are in sortable form (st_sortable_to_double);
 * keywords are segment ordinals. Buffers are owned by the struct and reused. */
typedef struct st_colblock {
	uint32_t block, first_doc, ndocs, nvalues;
	int64_t min, max; /* over present values; meaningless when nvalues == 0 */
	uint32_t *starts;
	int64_t *vals; /* every value of the block; sparse: the last doc's */
	size_t starts_cap, vals_cap;
	/* sparse (st_col_values_sparse): values read per doc from the packed
	 * block in the segment (valid for the read transaction) */
	bool sparse, dense; /* dense: the last block had many visits, decode whole */
	bool single;        /* sparse, one value per doc: starts not filled */
	uint32_t visits;    /* docs read in this block */
	unsigned vbits;
	const uint8_t *packed;
	size_t packed_len;
} st_colblock;

/* Zone map only (no decode): for range queries to skip blocks. */
cm_err st_col_zone(st_seg_txn *t, const st_field_info *f, uint32_t block, int64_t *min,
                   int64_t *max, uint32_t *nvalues);
cm_err st_col_load(st_seg_txn *t, const st_field_info *f, uint32_t block, st_colblock *cb);
/* A range over block `block` without decoding it: bit i of bb (the
 * block's docs, cleared first) set for each doc whose one value is in
 * [lo, hi]. *matched: 1 some doc is, 0 none, -1 the block is not one
 * value per doc (bb untouched: decode it with st_col_load). */
cm_err st_col_range_bits(st_seg_txn *t, const st_field_info *f, uint32_t block, int64_t lo,
                         int64_t hi, st_colblock *cb, uint64_t *bb, int *matched);
void st_colblock_free(st_colblock *cb);
/* Convenience for per-doc access in ascending or random order: loads the
 * doc's block into cb if it is not already there. Returns the value count
 * and points *vals at them. Negative on error. */
int st_col_values(st_seg_txn *t, const st_field_info *f, st_colblock *cb, uint32_t doc,
                  const int64_t **vals);
/* The same for visits of a few docs per block (aggregations over a
 * filtered set): only the doc's values are decoded, not the block's 4096
 * docs' (a query matching 1% of the docs decoded them all). *vals is good
 * until the next call on cb. Do not mix with st_col_values on one cb. */
int st_col_values_sparse(st_seg_txn *t, const st_field_info *f, st_colblock *cb, uint32_t doc,
                         const int64_t **vals);
/* The one value of each of n ascending docs into out[0..k), k returned:
 * k < n when docs[k]'s block is not one value per doc (read it with
 * st_col_values_sparse, then call again past it), -1 on a bad block.
 * For per-doc aggregations over whole windows of docs. Shares cb with
 * st_col_values_sparse. */
int st_col_values_one(st_seg_txn *t, const st_field_info *f, st_colblock *cb,
                      const uint32_t *docs, size_t n, int64_t *out);
/* The same, counted: counts[v]++ for each of those values v below
 * ncounts (as unsigned; keyword ordinals into a per-ordinal array), k
 * returned as above, the docs before it counted. */
int st_col_count_one(st_seg_txn *t, const st_field_info *f, st_colblock *cb, const uint32_t *docs,
                     size_t n, uint32_t *counts, uint64_t ncounts);

/* Keyword ordinals <-> terms (ordinals are ranks in the sorted dictionary). */
cm_err st_ord_term(st_seg_txn *t, const st_field_info *f, uint64_t ord, const uint8_t **term,
                   size_t *len);
/* CM_ENOTFOUND if absent; *ord is then the insertion point. */
cm_err st_term_ord(st_seg_txn *t, const st_field_info *f, const void *term, size_t len,
                   uint64_t *ord);

/* ---- nested documents ---- */

/* Bitset (max_doc bits) of the hidden docs of nested objects, NULL when
 * the segment has none. Each block of them sits right before its root
 * doc, children before their nested parents (Lucene's block join); they
 * have no id and an empty _source. Valid as long as s. */
const uint64_t *st_segment_nested(const st_segment *s);
uint32_t st_segment_nested_count(const st_segment *s);

/* ---- stored documents and ids ---- */

/* Appends doc's _id and _source (decompressed) to the buffers. */
cm_err st_stored_get(st_seg_txn *t, uint32_t doc, cm_buf *id, cm_buf *source);
cm_err st_id_lookup(st_seg_txn *t, const char *id, size_t len, uint32_t *doc);

/* Internal per-doc metadata, kept as ordinary long columns. */
#define ST_FIELD_SEQ_NO "_seq_no"
#define ST_FIELD_VERSION "_version"
#define ST_FIELD_PRIMARY_TERM "_primary_term"

/* ---- writing ---- */

/* In-memory segment builder (the indexing buffer). Not thread-safe. */
typedef struct st_segbuild st_segbuild;
st_segbuild *st_segbuild_create(void);
void st_segbuild_destroy(st_segbuild *b);
/* Adds a parsed doc with its metadata; text values are analyzed here.
 * *docno receives its number in the future segment: the next one, also
 * when the doc is refused (it is then kept as failed and never written),
 * so a doc with n nested objects takes exactly n + 1 numbers. Only a
 * builder holding ST_SEGBUILD_MAX_DOCS docs takes none (CM_ELIMIT). */
#define ST_SEGBUILD_MAX_DOCS (UINT32_MAX - 3)
cm_err st_segbuild_add(st_segbuild *b, const st_doc *doc, uint64_t seq_no, uint64_t primary_term,
                       int64_t version, uint32_t *docno, cm_error *err);
uint32_t st_segbuild_docs(const st_segbuild *b);
size_t st_segbuild_ram(const st_segbuild *b); /* bytes held, for the memory budget */
/* The docs st_segbuild_write keeps given `deleted` (may be NULL): not
 * deleted, not failed, and for a hidden nested doc, its root kept too.
 * kept holds st_bit_words(st_segbuild_docs) words. */
void st_segbuild_kept(const st_segbuild *b, const uint64_t *deleted, uint64_t *kept);
/* Writes the buffered docs as segment file `path` (generation gen), docs
 * marked in `deleted` (bitset of st_segbuild_docs bits, may be NULL) left
 * out. Writes to path + ".tmp", syncs, renames; on failure nothing is left
 * at `path`. Independent parts (fields) are built on `pool` if not NULL. */
cm_err st_segbuild_write(st_segbuild *b, const uint64_t *deleted, const char *path, uint64_t gen,
                         cm_pool *pool, cm_error *err);

/* Merges segments into one new file: live docs only (live[i] is a bitset
 * over segs[i]'s max_doc, NULL = all live), in segment order then doc
 * order. Work is split per field (and large fields by term range) onto
 * `pool`, bounded by ram_budget bytes. Same file discipline as above. */
cm_err st_segment_merge(st_segment *const *segs, const uint64_t *const *live, size_t n,
                        const char *path, uint64_t gen, cm_pool *pool, size_t ram_budget,
                        cm_error *err);

/* Bitset helpers (64-bit words, bit i of word i/64). */
static inline bool
st_bit_get(const uint64_t *bits, uint32_t i)
{
	return (bits[i >> 6] >> (i & 63)) & 1;
}
static inline void
st_bit_set(uint64_t *bits, uint32_t i)
{
	bits[i >> 6] |= (uint64_t)1 << (i & 63);
}
static inline size_t
st_bit_words(uint32_t nbits)
{
	return ((size_t)nbits + 63) / 64;
}

#endif
