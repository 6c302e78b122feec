/* Segment internals shared by the writer (segbuild.c, segment_write.c),
 * the reader (segment_read.c) and merge.c.
 *
 * File layout: one LMDB environment (MDB_NOSUBDIR) holding one database
 * whose keys start with a section tag, followed by a 24-byte trailer
 * ("SHOALSG1", u64 LE length of the LMDB part, u64 LE XXH3 of it) that
 * st_segment_open verifies before LMDB touches the file, so a flipped byte
 * inside LMDB's own pages is an error and not a wild pointer.
 *
 * Values (all end in, or carry, an xxh32 checksum):
 *   C field(BE16) block(BE32)  i64 min, i64 max, u32 nvalues, u32 xxh32 of
 *                             those 20 bytes | u8 layout (0: one value per
 *                             doc, 1: counts follow) [u8 bits, packed counts]
 *                             u8 bits, packed (v - min), u32 xxh32 of body
 *   F                         varint nfields, per field: str name, u8 type,
 *                             u8 analyzer, u8 flags, varint doc_count,
 *                             sum_ttf, sum_df, num_terms, zz col_min, zz col_max
 *   I id                      varint doc, xxh32; format 5: blocks of TBLOCK
 *                             ids keyed by the first (I id), laid out as T
 *                             blocks below with the ids for terms
 *   K field(BE16) n(BE32)     the term of ordinal n * KDICT_STEP
 *   M                         u32 format (SEG_FORMAT), varint max_doc, varint
 *                             generation, varint stored docs
 *   N field(BE16)             max_doc norm bytes
 *   P field(BE16) term        formats 1 and 2 only: the positions of a term,
 *                             as format 3 appends them to its T value
 *   S 0 last_doc(BE32)        block index: varint first_doc, varint raw length,
 *                             varint offset, varint length of its zstd frame
 *                             (of str id, str source per doc) in the chunk stream
 *   S 1 chunk(BE32)           the concatenated frames in STORED_CHUNK-byte
 *                             pieces: each fills exactly one LMDB overflow page,
 *                             where whole frames would waste ~2 KB apiece
 *   T field(BE16) term        format 5: a block of up to TBLOCK consecutive
 *                             terms of the field (the n-th block of a field
 *                             starts at its ordinal n * TBLOCK), keyed by its
 *                             first term: varint nterms, varint dir length,
 *                             the directory (first term: varint vlen; each
 *                             other: varint shared prefix with the term
 *                             before, varint suffix length, suffix, varint
 *                             vlen), u32 seg_sum4 of all so far, then the
 *                             terms' values as below, one after another.
 *                             Formats 1-4: one entry per term, its value:
 *                             varint df, varint ttf, [keyword: varint ord]
 *                             df == 1: varint doc (freq = ttf)
 *                             df <= 128: varint last, varint max_freq, u8 min_norm,
 *                                        one block, xxh32 of all
 *                             else, formats 1-3: nblocks x SKIP_ENTRY, u32 xxh32 of
 *                                   all so far, then the blocks
 *                             format 4: u32 seg_sum4 of the header so far, nblocks x
 *                                   SKIP_ENTRY4, ngroups x IMP_BYTES (the impacts
 *                                   of each IMP_GROUP blocks, the second level),
 *                                   u32 seg_sum4 of both tables, then the blocks
 *                             format 3, field with positions: then its positions
 *                             per postings block (u8 bits, then per doc its first
 *                             position and deltas, bit-packed; one block: bytes
 *                             + xxh32; more: nblocks x (u32 end, u32 xxh32), u32
 *                             xxh32 of the table, then the bytes; format 4: the
 *                             same with seg_sum4 for xxh32), and last the
 *                             length of the value up to the positions, a varint
 *                             written backwards (its low 7 bits in the last byte,
 *                             0x80 on every byte but its first)
 *   Z                         zstd dictionary for S
 */
#ifndef ST_SEGMENT_PRIVATE_H
#define ST_SEGMENT_PRIVATE_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <xxhash.h>

#include "st_bcache.h"
#include "st_segment.h"

/* Formats: 1 the first; 2 may hold hidden nested docs (a _nested_path
 * field: older binaries refuse it rather than show those docs as
 * documents); 3 keeps positions inside the T values; 4 gives each
 * postings block its competitive impacts (several (freq, norm) pairs, not
 * one max freq and min norm), a second level of them per IMP_GROUP
 * blocks, and the multi-block header its own checksum; 5, written now,
 * keeps the term dictionary in prefix-compressed blocks of TBLOCK terms
 * (one LMDB entry per block, not per term: its node and whole key cost
 * ~20 bytes a term). All five are read; a binary older than 5 refuses a
 * format 5 segment ("bad meta"). */
#define SEG_FORMAT_V1 1
#define SEG_FORMAT_NESTED 2
#define SEG_FORMAT_POS_INLINE 3
#define SEG_FORMAT_IMPACTS 4
#define SEG_FORMAT 5
#define SEG_TRAILER_LEN 24
#define SEG_MAGIC "SHOALSG1"
#define SEG_MAX_KEY 511       /* LMDB's default max key size */
#define SEG_MAX_TERM (SEG_MAX_KEY - 3)
#define SEG_MAX_ID (SEG_MAX_KEY - 1)
#define KDICT_STEP 32         /* one K entry per this many ordinals */
#define TBLOCK KDICT_STEP     /* terms per T block: a K entry names a block's key */
/* A block of a field without ordinals closes at TBLOCK_LEAF bytes while
 * it is on a leaf page (up to TBLOCK_LEAF_MAX: LMDB's node max is 2,038
 * bytes with the key and node header); smaller nodes leave less of a
 * leaf page unused. */
#define TBLOCK_LEAF 1000
#define TBLOCK_LEAF_MAX 1900
#define SKIP_ENTRY 17         /* u32 last, u32 end offset, u32 max freq, u8 min norm, u32 xxh32 */
/* format 4: u32 last, u32 end offset, u32 seg_sum4 of the block, IMP_BYTES of impacts */
#define IMP_SLOTS ST_IMPACTS  /* (u8 freq, u8 norm) pairs, norms ascending; freq 0: unused */
#define IMP_BYTES (2 * IMP_SLOTS)
#define IMP_FREQ_ANY 255      /* a freq of 255 or more: the bound takes any freq */
#define IMP_GROUP ST_IMPACT_GROUP
#define SKIP_ENTRY4 (12 + IMP_BYTES)

/* Format 4's postings checksums (header, tables, blocks): the low 32 bits
 * of XXH3, about three times XXH32's speed (a frequent term's tables are
 * hashed at every open). */
static inline uint32_t
seg_sum4(const void *p, size_t n)
{
	return (uint32_t)XXH3_64bits(p, n);
}
#define STORED_BLOCK_BYTES (16 * 1024)
#define STORED_CHUNK (4096 - 16 - 4) /* page - LMDB page header - checksum */
#define STORED_MAX_RAW (256u * 1024 * 1024) /* bound on one stored block's raw size */
#define POS_GAP 100           /* ES position_increment_gap between values */
#define MAX_FIELDS 65535

enum {
	TAG_COL = 'C',
	TAG_FIELDS = 'F',
	TAG_ID = 'I',
	TAG_KDICT = 'K',
	TAG_META = 'M',
	TAG_NORMS = 'N',
	TAG_POS = 'P',
	TAG_STORED = 'S',
	TAG_TERM = 'T',
	TAG_DICT = 'Z',
};

/* ---- reader ---- */

typedef struct st_col_loc {
	_Atomic(const void *) data; /* NULL: not looked up yet */
	_Atomic size_t size;
} st_col_loc;

struct st_segment {
	MDB_env *env;
	MDB_dbi dbi;
	char *path;
	uint64_t gen, bytes;
	uint32_t max_doc;
	uint32_t stored_docs;
	uint32_t format; /* SEG_FORMAT_* the segment was written in */
	bool pos_inline; /* format 3 on: positions at the end of T values, no P */
	bool impacts;    /* format 4 on: SKIP_ENTRY4 tables with impact pairs */
	bool tblocks;    /* format 5 on: T entries are blocks of TBLOCK terms */
	st_field_info *fields; /* by id; ids are assigned in name order */
	size_t nfields;
	char *names; /* storage for fields[i].name */
	/* Per-field verification of the big whole-field values (norms), done
	 * once: 0 unknown, 1 good, 2 corrupt. */
	_Atomic uint8_t *norms_state;
	pthread_mutex_t dict_mu;
	bool dict_loaded;
	void *ddict; /* ZSTD_DDict, NULL when the segment has no dictionary */
	uint64_t uid; /* names its stored blocks in st_bcache */
	/* Column blocks whose checksum has been verified (field * blocks +
	 * block): each is checked once, not at every load */
	_Atomic uint8_t *col_ok;
	uint32_t col_blocks;
	/* Where each column block's value is in the map (same index as
	 * col_ok), found once: the file is opened read-only and never written
	 * again, so LMDB's pointers into it hold until the env closes. A block
	 * costs a B-tree descent otherwise, 30% of a filtered terms
	 * aggregation that visits 49 blocks for 244 docs. */
	st_col_loc *col_loc;
	/* Ordinal -> term of a keyword field, by field id, built on first use
	 * (for fields of at most ORD_TAB_MAX terms) from one walk of its
	 * dictionary: pointers into the read-only map as col_loc. A terms
	 * aggregation resolves each bucket's ordinal; a B-tree descent and up
	 * to 31 steps each was a third of a filtered one's CPU. */
	pthread_mutex_t ord_mu;
	_Atomic(struct st_ord_tab *) *ord_tabs;
	uint64_t ord_tab_max; /* ORD_TAB_MAX; tests lower it to reach the other path */
	uint64_t *nested; /* hidden nested docs (bitset), NULL when none */
	uint32_t nnested;
	/* Format 5: where in the map the T and I blocks whose directory sum
	 * a lookup checked are (pointers hold as col_loc's), so a lookup that
	 * lands on a block seen before does not hash its directory again. */
	struct seg_tdir_set *tdir;
};

/* A direct-mapped set of block addresses, about one slot per block. */
typedef struct seg_tdir_set {
	_Atomic uint64_t sums; /* directory sums lookups computed (tests) */
	uint32_t slots;        /* a power of two */
	_Atomic uintptr_t slot[];
} seg_tdir_set;

#define ORD_TAB_MAX (1u << 18)
typedef struct st_ord_tab {
	const uint8_t **term;
	uint32_t *len;
	uint8_t *terms; /* format 5: the terms, decoded (term[] points here) */
} st_ord_tab;

/* One T or I block being read (format 5): the term (or id) at index
 * i - 1 and its value, decoded from the block's directory. */
typedef struct tblock_rd {
	const uint8_t *dir, *dir_end, *vals;
	size_t vals_len, voff;
	uint32_t n, i;
	uint8_t pfx; /* key bytes before the term: 3 (T), 1 (I) */
	uint8_t term[SEG_MAX_KEY + 1];
	size_t term_len;
	const uint8_t *val;
	size_t vlen;
} tblock_rd;

/* A chunk of terms decoded for st_ord_term (format 5), kept until the
 * transaction ends as its callers expect of a term in the map. */
typedef struct seg_arena {
	struct seg_arena *next;
	size_t used, cap;
	uint8_t data[];
} seg_arena;

struct st_seg_txn {
	const st_segment *seg;
	MDB_txn *txn;
	MDB_cursor *cur;
	st_block *raw; /* the decompressed stored block last read, or NULL */
	cm_buf frame;  /* a compressed frame, gathered from its chunks */
	/* st_ord_term's own cursor, left on ordinal ord_at of field ord_fid
	 * (ord_valid): a later ordinal close ahead steps there (terms
	 * aggregations resolve their ordinals in ascending order) */
	MDB_cursor *ord_cur;
	uint64_t ord_at;
	uint32_t ord_fid;
	bool ord_valid;
	seg_arena *arena;
};

/* The keys of one section (a field's terms, the ids) in key order with
 * their values, through a cursor, whichever the format. key (past the
 * section's prefix) and val are valid until the cursor moves. bad: it
 * stopped at a corrupt block or an LMDB error rather than the end. */
typedef struct seg_keys {
	MDB_cursor *cur;
	seg_tdir_set *tdir; /* format 5: the checked block directories, or NULL */
	bool blocks;        /* format 5: keys packed in blocks */
	uint8_t prefix[3];  /* the section's key prefix: tag (and field id) */
	tblock_rd blk;      /* format 5: the block the cursor is on */
	const uint8_t *key, *val;
	size_t klen, vlen;
	bool valid, bad;
} seg_keys;
void seg_keys_init(seg_keys *k, const st_seg_txn *t, MDB_cursor *cur, const uint8_t *prefix,
                   seg_tdir_set *tdir);
/* Positions at the first key >= the full key kb[0..kl) (prefix first). */
bool seg_keys_seek(seg_keys *k, const uint8_t *kb, size_t kl);
bool seg_keys_next(seg_keys *k);

struct st_terms {
	st_seg_txn *txn;
	const st_field_info *f;
	seg_keys k;
};

/* Positions k at the first of a segment's ids (their values: varint doc,
 * xxh32), through the transaction's cursor; seg_keys_next goes on. */
bool seg_ids_first(seg_keys *k, st_seg_txn *t);

/* Fetches a value by key; CM_ENOTFOUND, CM_EIO. */
cm_err seg_get(st_seg_txn *t, const void *key, size_t klen, MDB_val *v);
cm_err seg_err(int mdb_rc);
size_t seg_term_key(uint8_t *key, uint8_t tag, uint16_t field, const void *term, size_t len);

/* ---- writer ---- */

enum { SEC_COL, SEC_KDICT, SEC_NORMS, SEC_TERM, SEC_N };

/* A stream of key/value pairs in key order: u16 klen, key, u32 vlen, value. */
size_t kv_begin(cm_buf *s, const void *key, size_t klen);
void kv_end(cm_buf *s, size_t at, bool checksum); /* appends the xxh32 when asked */

/* Output that went to the segment's spill file (merges over the memory
 * budget): chunks of whole entries, in order, before what is still in the
 * stream's cm_buf. */
typedef struct segw_spill {
	uint64_t *off, *len;
	size_t n, cap;
} segw_spill;

/* One field's output, or one term range of it: its pieces of the C, K, N,
 * P and T sections. */
typedef struct segw_part {
	cm_buf sec[SEC_N];
	segw_spill spill[SEC_N];
} segw_part;

typedef struct segw {
	/* names owned (cm_strdup); the types must be set before the write
	 * starts (T blocks of ordinal fields hold TBLOCK terms each), the
	 * rest may come at SEGW_ALL */
	st_field_info *fields;
	size_t nfields;
	segw_part *parts; /* ordered by field id, then term range */
	size_t nparts;
	cm_buf *stored; /* block records in doc order: key S last_doc(BE32),
	                 * value varint first, varint raw length, frame */
	segw_spill *stored_spill;
	size_t nstored;
	cm_buf ids;  /* I stream */
	segw_spill ids_spill;
	/* Spilling: off when spill_at == 0; else streams holding spill_at bytes
	 * or more move to an unlinked temp file beside the output. */
	size_t spill_at;
	int spill_fd;
	_Atomic uint64_t spill_end;
	cm_buf dict; /* Z value (raw dictionary), empty when none */
	uint32_t max_doc, stored_docs;
	uint64_t gen;
	/* Pipelined writing (merges): when wait is set, segw_write_file
	 * appends each stream as soon as wait(wait_ctx, what, index, sec)
	 * says it is complete (SEGW_PART: part index's section sec,
	 * SEGW_STORED: stored stream index, SEGW_IDS; SEGW_ALL: every stream,
	 * the dictionary and the field infos are final). F goes in as a
	 * placeholder and is replaced once SEGW_ALL returns; the map starts at
	 * map_hint bytes. A nonzero return aborts the write with that error. */
	cm_err (*wait)(void *ctx, int what, size_t index, int sec);
	void *wait_ctx;
	size_t map_hint;
	size_t commit_bytes; /* commit every this many bytes (0: 64 MB) */
} segw;

enum { SEGW_PART, SEGW_STORED, SEGW_IDS, SEGW_ALL };

void segw_init(segw *w);
void segw_free(segw *w);
void segw_part_init(segw_part *p);
void segw_part_free(segw_part *p);
/* Opens the spill file in path's directory (unlinked at once). */
cm_err segw_spill_open(segw *w, const char *path, size_t spill_at, cm_error *err);
/* Moves s to the spill file if spilling is on and s holds >= at bytes
 * (callers pass w->spill_at while producing, 1 when done). Thread-safe
 * across distinct streams. */
cm_err segw_spill_out(segw *w, cm_buf *s, segw_spill *sp, size_t at);
/* Writes the file (tmp, trailer, one fsync, rename, fsync dir). */
cm_err segw_write_file(const segw *w, const char *path, cm_error *err);

/* Encodes one term's postings (and positions when pos != NULL) into the T
 * stream. docs ascending, freqs >= 1; pos holds sum(freqs) positions
 * in doc order. norms (by doc) feed the per-block min norm, may be NULL. */
typedef struct postenc {
	cm_buf blocks, tmp, pos;
	uint32_t *ends; /* per block end offsets */
	size_t ends_cap;
} postenc;
void postenc_init(postenc *e);
void postenc_free(postenc *e);
void postenc_term(postenc *e, cm_buf *tstream, uint16_t field, const uint8_t *term, size_t tlen,
                  bool with_ord, uint64_t ord, const uint32_t *docs, const uint32_t *freqs,
                  uint32_t df, const uint32_t *pos, const uint8_t *norms);

/* Encodes column block `block` of a field: counts[i] values for doc i,
 * values in vals (ascending per doc). */
void colenc_block(cm_buf *cstream, uint16_t field, uint32_t block, const uint32_t *counts,
                  uint32_t ndocs, const int64_t *vals, uint32_t nvals, cm_buf *tmp);
void kdict_put(cm_buf *kstream, uint16_t field, uint32_t n, const uint8_t *term, size_t len);
void norms_put(cm_buf *nstream, uint16_t field, const uint8_t *norms, uint32_t max_doc);

/* Stored docs: blocks of ~16 KB raw, compressed with an optional shared
 * dictionary (ZSTD_CDict). */
typedef struct storedenc {
	cm_buf raw, out;
	cm_buf *stream;
	uint32_t first, next; /* doc range in raw */
	void *cctx;
	bool own_cctx;
	const void *cdict;
	int level;
} storedenc;
/* Refresh segments compress at level 1 (they are merged soon, and merges
 * recompress at level 3). */
#define STORED_LEVEL_FLUSH 1
#define STORED_LEVEL_MERGE 3
void storedenc_init(storedenc *e, cm_buf *stream, const void *cdict, int level, uint32_t first_doc);
/* The same with a caller's ZSTD_CCtx, reused across encoders (not freed
 * by storedenc_finish): the output does not depend on the context. */
void storedenc_init_ctx(storedenc *e, cm_buf *stream, const void *cdict, int level,
                        uint32_t first_doc, void *cctx);
void *stored_cctx_create(void);
void stored_cctx_free(void *cctx);
void storedenc_add(storedenc *e, const char *id, size_t id_len, const char *src, size_t src_len);
void storedenc_finish(storedenc *e); /* flushes and frees the context */
/* Trains a dictionary from samples (concatenated, sizes[]) into dict;
 * leaves dict empty when training fails or is not worth it. */
void stored_train_dict(cm_buf *dict, const void *samples, const size_t *sizes, size_t n);
void *stored_cdict_create(const cm_buf *dict, int level); /* NULL when dict is empty */
void stored_cdict_free(void *cdict);

/* ids: sorted (key order) list written into the I stream. */
void ids_put(cm_buf *istream, const uint8_t *id, size_t len, uint32_t doc);

#endif
