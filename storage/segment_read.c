/* Segment reader: open/verify, postings cursors, terms, norms, columns,
 * ordinals, stored documents and ids. Every value's checksum is verified
 * before it is parsed; bad bytes give CM_ECORRUPT (or a corrupt cursor). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "codec.h"
#include "segment_private.h"
#include "st_bcache.h"

#define BEFORE_FIRST (UINT32_MAX - 1)

/* ---- open ---- */

static cm_err
verify_file(const char *path, uint64_t *bytes, cm_error *err)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return cm_error_set(err, errno == ENOENT ? CM_ENOTFOUND : CM_EIO, "segment %s: %s",
		                    path, strerror(errno));
	cm_err e = CM_OK;
	void *map = MAP_FAILED;
	struct stat st;
	uint8_t tr[SEG_TRAILER_LEN];
	if (fstat(fd, &st) != 0) {
		e = cm_error_set(err, CM_EIO, "segment %s: %s", path, strerror(errno));
		goto fail;
	}
	*bytes = (uint64_t)st.st_size;
	if (st.st_size < 2 * 4096 + SEG_TRAILER_LEN ||
	    pread(fd, tr, sizeof(tr), st.st_size - SEG_TRAILER_LEN) != (ssize_t)sizeof(tr) ||
	    memcmp(tr, SEG_MAGIC, 8) != 0 ||
	    cm_get_u64(tr + 8) != (uint64_t)st.st_size - SEG_TRAILER_LEN) {
		e = cm_error_set(err, CM_ECORRUPT, "segment %s: bad trailer", path);
		goto fail;
	}
	size_t len = (size_t)st.st_size - SEG_TRAILER_LEN;
	map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		e = cm_error_set(err, CM_EIO, "segment %s: mmap: %s", path, strerror(errno));
		goto fail;
	}
	if (XXH3_64bits(map, len) != cm_get_u64(tr + 16))
		e = cm_error_set(err, CM_ECORRUPT, "segment %s: checksum mismatch", path);
fail:
	if (map != MAP_FAILED)
		munmap(map, (size_t)st.st_size - SEG_TRAILER_LEN);
	close(fd);
	return e;
}

cm_err
seg_get(st_seg_txn *t, const void *key, size_t klen, MDB_val *v)
{
	MDB_val k = {klen, (void *)key};
	int rc = mdb_get(t->txn, t->seg->dbi, &k, v);
	return seg_err(rc);
}

static bool
valid_type(uint8_t t)
{
	return st_field_type_stored(t);
}

static cm_err
parse_fields(st_segment *s, const uint8_t *p, size_t len)
{
	if (!cm_checksum_ok(p, &len))
		return CM_ECORRUPT;
	cm_rd r;
	cm_rd_init(&r, p, len);
	uint64_t n;
	if (!cm_rd_varint(&r, &n) || n > MAX_FIELDS || n > cm_rd_left(&r))
		return CM_ECORRUPT;
	s->fields = cm_calloc(CM_MEM_STORAGE, n + 1, sizeof(st_field_info));
	s->names = cm_malloc(CM_MEM_STORAGE, len + 1);
	s->norms_state = cm_calloc(CM_MEM_STORAGE, n + 1, 1);
	s->nfields = n;
	size_t used = 0;
	for (size_t i = 0; i < n; i++) {
		st_field_info *f = &s->fields[i];
		const char *name;
		size_t nl;
		uint8_t type, an, flags;
		uint64_t dc, ttf, sdf, nt, mn, mx;
		if (!cm_rd_str(&r, &name, &nl) || !cm_rd_u8(&r, &type) || !cm_rd_u8(&r, &an) ||
		    !cm_rd_u8(&r, &flags) || !cm_rd_varint(&r, &dc) || !cm_rd_varint(&r, &ttf) ||
		    !cm_rd_varint(&r, &sdf) || !cm_rd_varint(&r, &nt) || !cm_rd_varint(&r, &mn) ||
		    !cm_rd_varint(&r, &mx) || !valid_type(type) || an > ST_AN_CUSTOM ||
		    dc > s->max_doc || nt > UINT32_MAX || memchr(name, 0, nl))
			return CM_ECORRUPT;
		memcpy(s->names + used, name, nl);
		s->names[used + nl] = 0;
		f->name = s->names + used;
		used += nl + 1;
		f->id = (uint16_t)i;
		f->type = type;
		f->analyzer = an;
		f->flags = flags;
		f->doc_count = (uint32_t)dc;
		f->sum_total_term_freq = ttf;
		f->sum_doc_freq = sdf;
		f->num_terms = nt;
		f->col_min = codec_unzz(mn);
		f->col_max = codec_unzz(mx);
		if (i && strcmp(s->fields[i - 1].name, f->name) >= 0)
			return CM_ECORRUPT; /* lookups binary-search by name */
	}
	return CM_OK;
}

static cm_err
parse_meta(st_segment *s, const uint8_t *p, size_t len)
{
	if (!cm_checksum_ok(p, &len))
		return CM_ECORRUPT;
	cm_rd r;
	cm_rd_init(&r, p, len);
	uint32_t fmt;
	uint64_t md, gen, sd;
	if (!cm_rd_u32(&r, &fmt) ||
	    fmt < SEG_FORMAT_V1 || fmt > SEG_FORMAT ||
	    !cm_rd_varint(&r, &md) || !cm_rd_varint(&r, &gen) || !cm_rd_varint(&r, &sd) ||
	    md > UINT32_MAX - 3 || sd > md)
		return CM_ECORRUPT;
	s->max_doc = (uint32_t)md;
	s->format = fmt;
	s->pos_inline = fmt >= SEG_FORMAT_POS_INLINE;
	s->impacts = fmt >= SEG_FORMAT_IMPACTS;
	s->tblocks = fmt >= SEG_FORMAT;
	s->gen = gen;
	s->stored_docs = (uint32_t)sd;
	return CM_OK;
}

/* The hidden nested docs: every doc with a _nested_path term. Segments
 * written before nested existed have no such field (and no mask). */
static cm_err
load_nested(st_segment *s, cm_error *err)
{
	const st_field_info *f = st_segment_field(s, ST_FIELD_NESTED_PATH);
	if (f == NULL || !(f->flags & ST_FI_POSTINGS) || s->max_doc == 0)
		return CM_OK;
	st_seg_txn *t;
	cm_err e = st_seg_txn_begin(s, &t);
	if (e)
		return cm_error_set(err, e, "segment %s: cannot read nested docs", s->path);
	st_terms *it = NULL;
	s->nested = cm_calloc(CM_MEM_STORAGE, st_bit_words(s->max_doc), sizeof(uint64_t));
	e = st_terms_open(t, f, &it);
	for (bool ok = !e && st_terms_seek(it, NULL, 0); !e && ok; ok = st_terms_next(it)) {
		st_postings p;
		if ((e = st_terms_postings(it, &p)) != CM_OK)
			break;
		for (uint32_t d = st_postings_next(&p); d != ST_NO_MORE_DOCS;
		     d = st_postings_next(&p))
			if (d < s->max_doc && !st_bit_get(s->nested, d)) {
				st_bit_set(s->nested, d);
				s->nnested++;
			}
		if (st_postings_corrupt(&p))
			e = CM_ECORRUPT;
	}
	if (it)
		st_terms_close(it);
	st_seg_txn_end(t);
	if (e)
		return cm_error_set(err, CM_ECORRUPT, "segment %s: bad nested docs", s->path);
	return CM_OK;
}

const uint64_t *
st_segment_nested(const st_segment *s)
{
	return s->nested;
}

uint32_t
st_segment_nested_count(const st_segment *s)
{
	return s->nnested;
}

cm_err
st_segment_open(const char *path, st_segment **out, cm_error *err)
{
	*out = NULL;
	st_segment *s = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*s));
	pthread_mutex_init(&s->dict_mu, NULL);
	pthread_mutex_init(&s->ord_mu, NULL);
	s->uid = st_bcache_uid();
	s->path = cm_strdup(CM_MEM_STORAGE, path);
	MDB_txn *txn = NULL;
	cm_err e = verify_file(path, &s->bytes, err);
	if (e)
		goto fail;
	int rc = mdb_env_create(&s->env);
	if (rc == 0)
		rc = mdb_env_open(s->env, path, MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR | MDB_NORDAHEAD,
		                  0);
	if (rc == 0)
		rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
	if (rc == 0)
		rc = mdb_dbi_open(txn, NULL, 0, &s->dbi);
	if (rc) {
		e = cm_error_set(err, seg_err(rc) == CM_ENOTFOUND ? CM_ECORRUPT : seg_err(rc),
		                 "segment %s: %s", path, mdb_strerror(rc));
		goto fail;
	}
	MDB_val k = {1, "M"}, v;
	rc = mdb_get(txn, s->dbi, &k, &v);
	if (rc || parse_meta(s, v.mv_data, v.mv_size)) {
		e = cm_error_set(err, CM_ECORRUPT, "segment %s: bad meta", path);
		goto fail;
	}
	k.mv_data = "F";
	rc = mdb_get(txn, s->dbi, &k, &v);
	if (rc || parse_fields(s, v.mv_data, v.mv_size)) {
		e = cm_error_set(err, CM_ECORRUPT, "segment %s: bad field infos", path);
		goto fail;
	}
	mdb_txn_abort(txn);
	s->col_blocks = (uint32_t)((s->max_doc + ST_COL_BLOCK - 1) / ST_COL_BLOCK);
	s->col_ok = cm_calloc(CM_MEM_STORAGE, s->nfields * s->col_blocks + 1, 1);
	s->col_loc = cm_calloc(CM_MEM_STORAGE, s->nfields * s->col_blocks + 1, sizeof(st_col_loc));
	s->ord_tabs = cm_calloc(CM_MEM_STORAGE, s->nfields + 1, sizeof *s->ord_tabs);
	s->ord_tab_max = ORD_TAB_MAX;
	if (s->tblocks) {
		/* about a slot per block: blocks hold up to 32 terms (or ids) */
		uint64_t blocks = s->max_doc / 32 + 1;
		uint32_t slots = 64;
		for (size_t i = 0; i < s->nfields; i++)
			blocks += s->fields[i].num_terms / 16;
		while (slots < blocks && slots < (1u << 15))
			slots <<= 1;
		s->tdir = cm_calloc(CM_MEM_STORAGE, 1, sizeof *s->tdir + slots * sizeof(uintptr_t));
		s->tdir->slots = slots;
	}
	txn = NULL;
	if ((e = load_nested(s, err)) != CM_OK)
		goto fail;
	*out = s;
	return CM_OK;
fail:
	if (txn)
		mdb_txn_abort(txn);
	if (!s->env)
		s->env = NULL;
	st_segment_close(s);
	return e;
}

/* Marks a field whose dictionary did not check out: not walked again. */
static st_ord_tab ord_tab_bad;
static void ord_tab_free(st_ord_tab *ot);

void
st_segment_close(st_segment *s)
{
	if (!s)
		return;
	if (s->env)
		mdb_env_close(s->env);
	if (s->ddict)
		ZSTD_freeDDict(s->ddict);
	pthread_mutex_destroy(&s->dict_mu);
	pthread_mutex_destroy(&s->ord_mu);
	for (size_t i = 0; s->ord_tabs && i < s->nfields; i++) {
		st_ord_tab *ot = atomic_load(&s->ord_tabs[i]);
		if (ot && ot != &ord_tab_bad)
			ord_tab_free(ot);
	}
	cm_free(CM_MEM_STORAGE, (void *)s->ord_tabs);
	cm_free(CM_MEM_STORAGE, s->fields);
	cm_free(CM_MEM_STORAGE, s->names);
	cm_free(CM_MEM_STORAGE, (void *)s->norms_state);
	cm_free(CM_MEM_STORAGE, (void *)s->col_ok);
	cm_free(CM_MEM_STORAGE, s->tdir);
	cm_free(CM_MEM_STORAGE, s->col_loc);
	cm_free(CM_MEM_STORAGE, s->nested);
	cm_free(CM_MEM_STORAGE, s->path);
	cm_free(CM_MEM_STORAGE, s);
}

uint32_t
st_segment_max_doc(const st_segment *s)
{
	return s->max_doc;
}

uint64_t
st_segment_generation(const st_segment *s)
{
	return s->gen;
}

uint32_t
st_segment_format(const st_segment *s)
{
	return s->format;
}

const char *
st_segment_path(const st_segment *s)
{
	return s->path;
}

uint64_t
st_segment_bytes(const st_segment *s)
{
	return s->bytes;
}

static bool term_split(const st_segment *s, const st_field_info *f, const uint8_t *val,
                       size_t *vlen, const uint8_t **pos, size_t *pos_len);
static bool tblock_open(tblock_rd *b, const MDB_val *k, const MDB_val *v);
static bool tblock_next(tblock_rd *b, bool *bad);

cm_err
st_segment_sections(const st_segment *s, st_seg_section by_tag[256])
{
	memset(by_tag, 0, 256 * sizeof *by_tag);
	MDB_txn *txn;
	MDB_cursor *cur;
	if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn))
		return CM_EIO;
	if (mdb_cursor_open(txn, s->dbi, &cur)) {
		mdb_txn_abort(txn);
		return CM_EIO;
	}
	MDB_stat ms;
	size_t psize = mdb_stat(txn, s->dbi, &ms) == 0 ? ms.ms_psize : 4096;
	/* LMDB's rule: a node (8-byte header, key, value) larger than
	 * me_nodemax goes to its own run of overflow pages. */
	size_t nodemax = (((psize - 16) / 2) & ~(size_t)1) - 2;
	MDB_val k, v;
	for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		const uint8_t *kp = k.mv_data;
		st_seg_section *sec = &by_tag[k.mv_size ? kp[0] : 0];
		sec->entries++;
		sec->key_bytes += k.mv_size;
		sec->value_bytes += v.mv_size;
		size_t fid = k.mv_size >= 3 ? (size_t)kp[1] << 8 | kp[2] : SIZE_MAX;
		size_t vlen = v.mv_size, pos_len;
		const uint8_t *pos;
		tblock_rd b;
		if (s->tblocks && k.mv_size && kp[0] == TAG_ID && tblock_open(&b, &k, &v)) {
			sec->key_bytes += v.mv_size - b.vals_len;
			sec->value_bytes -= v.mv_size - b.vals_len;
		} else if (s->tblocks && k.mv_size && kp[0] == TAG_TERM && fid < s->nfields &&
		           tblock_open(&b, &k, &v)) {
			/* format 5: the block's directory counts with the keys */
			sec->key_bytes += v.mv_size - b.vals_len;
			sec->value_bytes -= v.mv_size - b.vals_len;
			bool bad = false;
			while (tblock_next(&b, &bad)) {
				size_t bl = b.vlen;
				if (term_split(s, &s->fields[fid], b.val, &bl, &pos, &pos_len) &&
				    pos) {
					sec->value_bytes -= pos_len;
					by_tag[TAG_POS].value_bytes += pos_len;
				}
			}
		} else if (k.mv_size && kp[0] == TAG_TERM && fid < s->nfields &&
		           term_split(s, &s->fields[fid], v.mv_data, &vlen, &pos, &pos_len) &&
		           pos) {
			/* format 3: the positions in T values count as P */
			sec->value_bytes -= pos_len;
			by_tag[TAG_POS].value_bytes += pos_len;
		}
		if (8 + k.mv_size + v.mv_size > nodemax) {
			sec->big_values++;
			sec->big_bytes += v.mv_size;
			sec->big_slack += (16 + v.mv_size + psize - 1) / psize * psize - v.mv_size;
		}
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return CM_OK;
}

cm_err
st_segment_pages(const st_segment *s, st_seg_pages *out)
{
	memset(out, 0, sizeof(*out));
	MDB_txn *txn;
	if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn))
		return CM_EIO;
	MDB_stat ms;
	MDB_envinfo ei;
	MDB_cursor *cur = NULL;
	int rc = mdb_stat(txn, s->dbi, &ms);
	if (rc == 0) {
		out->psize = ms.ms_psize;
		out->depth = ms.ms_depth;
		out->branch = ms.ms_branch_pages;
		out->leaf = ms.ms_leaf_pages;
		out->overflow = ms.ms_overflow_pages;
		rc = mdb_env_info(s->env, &ei);
	}
	if (rc == 0)
		out->total = (uint64_t)ei.me_last_pgno + 1;
	/* the free list (database 0): each value is a count, then that many
	 * page numbers (mdb_stat -f) */
	if (rc == 0)
		rc = mdb_cursor_open(txn, 0, &cur);
	MDB_val k, v;
	for (int g = rc ? rc : mdb_cursor_get(cur, &k, &v, MDB_FIRST); g == 0;
	     g = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
		if (v.mv_size >= sizeof(size_t)) {
			size_t n; /* LMDB keeps nodes 2-byte aligned only */
			memcpy(&n, v.mv_data, sizeof(n));
			out->free += n;
		}
	if (cur)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc ? CM_EIO : CM_OK;
}

size_t
st_segment_nfields(const st_segment *s)
{
	return s->nfields;
}

const st_field_info *
st_segment_field_at(const st_segment *s, size_t i)
{
	return i < s->nfields ? &s->fields[i] : NULL;
}

const st_field_info *
st_segment_field(const st_segment *s, const char *name)
{
	size_t lo = 0, hi = s->nfields;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(s->fields[mid].name, name);
		if (c == 0)
			return &s->fields[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

cm_err
st_seg_txn_begin(const st_segment *s, st_seg_txn **out)
{
	st_seg_txn *t = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*t));
	t->seg = s;
	cm_buf_init(&t->frame, CM_MEM_STORAGE);
	int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &t->txn);
	if (rc == 0)
		rc = mdb_cursor_open(t->txn, s->dbi, &t->cur);
	if (rc) {
		if (t->txn)
			mdb_txn_abort(t->txn);
		cm_free(CM_MEM_STORAGE, t);
		*out = NULL;
		return seg_err(rc);
	}
	*out = t;
	return CM_OK;
}

void
st_seg_txn_end(st_seg_txn *t)
{
	if (!t)
		return;
	mdb_cursor_close(t->cur);
	if (t->ord_cur)
		mdb_cursor_close(t->ord_cur);
	while (t->arena) {
		seg_arena *a = t->arena;
		t->arena = a->next;
		cm_free(CM_MEM_STORAGE, a);
	}
	mdb_txn_abort(t->txn);
	st_block_unref(t->raw);
	cm_buf_free(&t->frame);
	cm_free(CM_MEM_STORAGE, t);
}

const st_segment *
st_seg_txn_segment(const st_seg_txn *t)
{
	return t->seg;
}

/* ---- the term dictionary in blocks (format 5) ---- */

static int
term_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	return c ? c : (al > bl) - (al < bl);
}

/* The bytes before the term (or id) in a block's key: tag and field id
 * for T, the tag alone for I. */
static size_t
tag_pfx(uint8_t tag)
{
	return tag == TAG_ID ? 1 : 3;
}

/* Verifies a block's directory (its sum unless seen says it was checked
 * before) and readies its first term. */
static bool
tblock_open_seen(tblock_rd *b, const MDB_val *k, const MDB_val *v, bool seen)
{
	const uint8_t *start = v->mv_data, *p = start, *end = p + v->mv_size;
	uint64_t n, dl;
	if (k->mv_size < 1 || k->mv_size < tag_pfx(*(const uint8_t *)k->mv_data) ||
	    k->mv_size > SEG_MAX_KEY || !codec_varint(&p, end, &n) || n == 0 || n > TBLOCK ||
	    !codec_varint(&p, end, &dl) || dl > (size_t)(end - p) || (size_t)(end - p) - dl < 4)
		return false;
	b->dir = p;
	b->dir_end = p + dl;
	if (!seen && seg_sum4(start, (size_t)(b->dir_end - start)) != cm_get_u32(b->dir_end))
		return false;
	b->vals = b->dir_end + 4;
	b->vals_len = (size_t)(end - b->vals);
	b->voff = 0;
	b->n = (uint32_t)n;
	b->i = 0;
	b->pfx = (uint8_t)tag_pfx(*(const uint8_t *)k->mv_data);
	b->term_len = k->mv_size - b->pfx;
	memcpy(b->term, (const uint8_t *)k->mv_data + b->pfx, b->term_len);
	return true;
}

static bool
tblock_open(tblock_rd *b, const MDB_val *k, const MDB_val *v)
{
	return tblock_open_seen(b, k, v, false);
}

/* tblock_open for a lookup: a block whose directory sum was checked
 * before (the same value in the read-only map) is not hashed again. A
 * slot holds one block; another block hashing there replaces it. */
static bool
tblock_open_lookup(seg_tdir_set *set, tblock_rd *b, const MDB_val *k, const MDB_val *v)
{
	if (!set)
		return tblock_open(b, k, v);
	uintptr_t a = (uintptr_t)v->mv_data;
	size_t i = (size_t)(((uint64_t)a * 0x9E3779B97F4A7C15ull) >> 40) & (set->slots - 1);
	bool seen = atomic_load_explicit(&set->slot[i], memory_order_relaxed) == a;
	if (!tblock_open_seen(b, k, v, seen))
		return false;
	if (!seen) {
		atomic_fetch_add_explicit(&set->sums, 1, memory_order_relaxed);
		atomic_store_explicit(&set->slot[i], a, memory_order_relaxed);
	}
	return true;
}

/* Steps to the block's next term; false at its end, or with *bad set
 * when the directory does not add up. */
static bool
tblock_next(tblock_rd *b, bool *bad)
{
	if (b->i >= b->n)
		return false;
	const uint8_t *p = b->dir, *end = b->dir_end;
	uint64_t shared, sl, vl;
	if (b->i > 0) {
		if (!codec_varint(&p, end, &shared) || !codec_varint(&p, end, &sl) ||
		    shared > b->term_len || sl > (size_t)(end - p) ||
		    shared + sl > SEG_MAX_KEY - b->pfx)
			goto bad;
		memcpy(b->term + shared, p, sl);
		p += sl;
		b->term_len = shared + sl;
	}
	if (!codec_varint(&p, end, &vl) || vl > b->vals_len - b->voff)
		goto bad;
	b->val = b->vals + b->voff;
	b->vlen = vl;
	b->voff += vl;
	b->dir = p;
	b->i++;
	return true;
bad:
	*bad = true;
	b->i = b->n;
	return false;
}

/* The first term of the next block of the field named by pfx (tag and
 * field id, 3 bytes; for ids the tag alone). */
static bool
tdict_next_block(MDB_cursor *cur, const uint8_t *pfx, tblock_rd *b, bool *bad)
{
	MDB_val k, v;
	size_t pl = tag_pfx(pfx[0]);
	int rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	if (rc || k.mv_size < pl || memcmp(k.mv_data, pfx, pl) != 0) {
		if (rc && rc != MDB_NOTFOUND)
			*bad = true;
		return false;
	}
	if (!tblock_open(b, &k, &v)) {
		*bad = true;
		return false;
	}
	return tblock_next(b, bad);
}

/* Puts b on the first term >= key (a T key: tag, field, term) of key's
 * field, the cursor on its block: the last block whose first term is <=
 * key, or the field's first block when key precedes it. false when the
 * field has no such term, or with *bad set on a corrupt block. seen: the
 * segment's set of checked blocks (NULL: hash the directory anyway). */
static bool
tdict_seek(seg_tdir_set *seen, MDB_cursor *cur, const uint8_t *key, size_t kl, tblock_rd *b,
           bool *bad)
{
	size_t pl = tag_pfx(key[0]);
	MDB_val k = {kl, (void *)key}, v;
	int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	if (rc && rc != MDB_NOTFOUND)
		goto fail;
	if (rc != 0 || k.mv_size != kl || memcmp(k.mv_data, key, kl) != 0) {
		/* the block before holds key if it is of the same field */
		int rp = mdb_cursor_get(cur, &k, &v, rc == MDB_NOTFOUND ? MDB_LAST : MDB_PREV);
		if (rp && rp != MDB_NOTFOUND) {
			rc = rp;
			goto fail;
		}
		if (rp || k.mv_size < pl || memcmp(k.mv_data, key, pl) != 0) {
			/* key precedes the field's first block, if there is one */
			if (rc == MDB_NOTFOUND)
				return false;
			k = (MDB_val){kl, (void *)key};
			if ((rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE)) != 0)
				goto fail;
			if (k.mv_size < pl || memcmp(k.mv_data, key, pl) != 0)
				return false;
		}
	}
	if (!tblock_open_lookup(seen, b, &k, &v)) {
		*bad = true;
		return false;
	}
	while (tblock_next(b, bad))
		if (term_cmp(b->term, b->term_len, key + pl, kl - pl) >= 0)
			return true;
	return !*bad && tdict_next_block(cur, key, b, bad);
fail:
	if (rc != MDB_NOTFOUND)
		*bad = true;
	return false;
}

/* A term's value by its T key: its own entry (formats 1-4) or its slice
 * of a block (format 5, found with the transaction's cursor). */
static cm_err
term_get(st_seg_txn *t, const uint8_t *key, size_t kl, MDB_val *v)
{
	if (!t->seg->tblocks)
		return seg_get(t, key, kl, v);
	tblock_rd b;
	bool bad = false;
	if (!tdict_seek(t->seg->tdir, t->cur, key, kl, &b, &bad))
		return bad ? CM_ECORRUPT : CM_ENOTFOUND;
	if (b.term_len != kl - 3 || memcmp(b.term, key + 3, kl - 3) != 0)
		return CM_ENOTFOUND;
	*v = (MDB_val){b.vlen, (void *)b.val};
	return CM_OK;
}

/* ---- postings ---- */

typedef struct term_head {
	uint64_t df, ttf, ord;
	const uint8_t *rest; /* after the header */
	size_t rest_len;     /* up to the checksum (one block) or the end (more) */
} term_head;

/* Verifies and parses a T value's header. For terms with more than one
 * block, rest is the skip table(s) + checksum + blocks. impacts: format 4
 * (its header has a checksum of its own, and the tables one apart). */
static bool
parse_term(const uint8_t *p, size_t len, bool keyword, bool impacts, term_head *h)
{
	cm_rd r;
	cm_rd_init(&r, p, len);
	if (!cm_rd_varint(&r, &h->df) || h->df == 0 || h->df > UINT32_MAX - 2)
		return false;
	uint64_t nblocks = (h->df + ST_BLOCK - 1) / ST_BLOCK;
	if (nblocks == 1) {
		if (!cm_checksum_ok(p, &len))
			return false;
		cm_rd_init(&r, p, len);
		cm_rd_varint(&r, &h->df);
	}
	h->ord = 0;
	if (!cm_rd_varint(&r, &h->ttf) || h->ttf < h->df || (keyword && !cm_rd_varint(&r, &h->ord)))
		return false;
	if (nblocks > 1) {
		size_t head = (size_t)(r.p - p);
		if (impacts) {
			size_t table = (size_t)nblocks * SKIP_ENTRY4 +
			               (size_t)((nblocks + IMP_GROUP - 1) / IMP_GROUP) * IMP_BYTES;
			if (cm_rd_left(&r) < 4 + table + 4 || seg_sum4(p, head) != cm_get_u32(p + head) ||
			    seg_sum4(p + head + 4, table) != cm_get_u32(p + head + 4 + table))
				return false;
			r.p += 4;
		} else {
			size_t table = (size_t)nblocks * SKIP_ENTRY;
			if (cm_rd_left(&r) < table + 4)
				return false;
			if (XXH32(p, head + table, 0) != cm_get_u32(p + head + table))
				return false;
		}
	}
	h->rest = r.p;
	h->rest_len = cm_rd_left(&r);
	return true;
}

/* Splits a T value of a format-3 segment's positions field into its
 * postings (*vlen shrinks to them) and its positions. */
static bool
term_split(const st_segment *s, const st_field_info *f, const uint8_t *val, size_t *vlen,
           const uint8_t **pos, size_t *pos_len)
{
	*pos = NULL;
	*pos_len = 0;
	if (!s->pos_inline || !(f->flags & ST_FI_POSITIONS))
		return true;
	/* the postings' length, a varint read backwards from the end */
	size_t plen = 0, i = *vlen;
	for (unsigned shift = 0;; shift += 7) {
		if (i == 0 || shift > 28)
			return false;
		uint8_t b = val[--i];
		plen |= (size_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			break;
	}
	if (plen > i)
		return false;
	*pos = val + plen;
	*pos_len = i - plen;
	*vlen = plen;
	return true;
}

static void
postings_fail(st_postings *p)
{
	p->corrupt = true;
	p->doc = ST_NO_MORE_DOCS;
	p->n = p->i = 0;
	p->block = p->nblocks;
}

static cm_err
postings_init(st_seg_txn *t, const st_field_info *f, const uint8_t *val, size_t vlen,
              const void *term, size_t tlen, st_postings *p)
{
	term_head h;
	p->txn = t;
	p->field = f->id;
	p->corrupt = false;
	p->doc = BEFORE_FIRST;
	p->freq = 0;
	p->n = p->i = 0;
	p->block = UINT32_MAX;
	p->pos_data = p->pos_cur = p->pos_table = p->pos_end = NULL;
	p->pos_len = 0;
	p->pos_block = UINT32_MAX;
	p->pos_i = 0;
	p->pos_docs = p->pos_blocks = 0;
	p->pos_read = 0;
	p->with_freqs = f->type == ST_FT_TEXT;
	p->pos_key_len = 0;
	bool split = term_split(t->seg, f, val, &vlen, &p->pos_inl, &p->pos_inl_len);
	if (split && !p->pos_inl && (f->flags & ST_FI_POSITIONS) && tlen <= ST_MAX_TOKEN_LEN)
		p->pos_key_len = (uint16_t)seg_term_key(p->pos_key, TAG_POS, f->id, term, tlen);
	p->skip_entry = t->seg->impacts ? SKIP_ENTRY4 : SKIP_ENTRY;
	p->groups = NULL;
	if (!split ||
	    !parse_term(val, vlen, st_field_type_is_ordinal(f->type), t->seg->impacts, &h)) {
		p->doc_freq = 0;
		p->total_term_freq = 0;
		p->nblocks = 0;
		postings_fail(p);
		return CM_ECORRUPT;
	}
	p->doc_freq = (uint32_t)h.df;
	p->total_term_freq = h.ttf;
	p->nblocks = (uint32_t)((h.df + ST_BLOCK - 1) / ST_BLOCK);
	p->skip = NULL;
	if (h.df == 1) {
		uint64_t doc;
		cm_rd r;
		cm_rd_init(&r, h.rest, h.rest_len);
		if (!cm_rd_varint(&r, &doc) || doc >= t->seg->max_doc || h.ttf > UINT32_MAX) {
			postings_fail(p);
			return CM_ECORRUPT;
		}
		p->one_last = (uint32_t)doc;
		p->one_maxf = (uint32_t)h.ttf;
		p->one_norm = 0;
		p->data = NULL;
		p->data_len = 0;
	} else if (p->nblocks == 1) {
		cm_rd r;
		uint64_t last, maxf;
		uint8_t mn;
		cm_rd_init(&r, h.rest, h.rest_len);
		if (!cm_rd_varint(&r, &last) || !cm_rd_varint(&r, &maxf) || !cm_rd_u8(&r, &mn) ||
		    last >= t->seg->max_doc || maxf > UINT32_MAX) {
			postings_fail(p);
			return CM_ECORRUPT;
		}
		p->one_last = (uint32_t)last;
		p->one_maxf = (uint32_t)maxf;
		p->one_norm = mn;
		p->data = r.p;
		p->data_len = cm_rd_left(&r);
	} else {
		p->skip = h.rest;
		size_t table = (size_t)p->nblocks * p->skip_entry + 4;
		if (t->seg->impacts) {
			p->groups = h.rest + (size_t)p->nblocks * SKIP_ENTRY4;
			table += (size_t)((p->nblocks + IMP_GROUP - 1) / IMP_GROUP) * IMP_BYTES;
		}
		p->data = h.rest + table;
		p->data_len = h.rest_len - table;
	}
	return CM_OK;
}

cm_err
st_postings_open(st_seg_txn *t, const st_field_info *f, const void *term, size_t len,
                 st_postings *p)
{
	if (!(f->flags & ST_FI_POSTINGS) || len > SEG_MAX_TERM || f->id >= t->seg->nfields)
		return CM_ENOTFOUND;
	uint8_t key[SEG_MAX_KEY + 1];
	size_t kl = seg_term_key(key, TAG_TERM, f->id, term, len);
	MDB_val v;
	cm_err e = term_get(t, key, kl, &v);
	if (e)
		return e;
	return postings_init(t, f, v.mv_data, v.mv_size, term, len, p);
}

cm_err
st_term_doc_freq(st_seg_txn *t, const st_field_info *f, const void *term, size_t len,
                 uint32_t *df)
{
	*df = 0;
	if (!(f->flags & ST_FI_POSTINGS) || len > SEG_MAX_TERM || f->id >= t->seg->nfields)
		return CM_ENOTFOUND;
	uint8_t key[SEG_MAX_KEY + 1];
	size_t kl = seg_term_key(key, TAG_TERM, f->id, term, len);
	MDB_val v;
	cm_err e = term_get(t, key, kl, &v);
	if (e)
		return e;
	const uint8_t *val = v.mv_data, *pos;
	size_t vlen = v.mv_size, pos_len;
	cm_rd r;
	uint64_t n, ttf, ord;
	cm_rd_init(&r, val, vlen);
	if (!cm_rd_varint(&r, &n) || n == 0 || n > t->seg->max_doc)
		return CM_ECORRUPT;
	if (n > ST_BLOCK && t->seg->impacts) {
		/* the header alone is checked: the tables are the iterator's */
		if (!cm_rd_varint(&r, &ttf) ||
		    (st_field_type_is_ordinal(f->type) && !cm_rd_varint(&r, &ord)) ||
		    cm_rd_left(&r) < 4 || seg_sum4(val, (size_t)(r.p - val)) != cm_get_u32(r.p))
			return CM_ECORRUPT;
		*df = (uint32_t)n;
		return CM_OK;
	}
	term_head h;
	if (!term_split(t->seg, f, val, &vlen, &pos, &pos_len) ||
	    !parse_term(val, vlen, st_field_type_is_ordinal(f->type), t->seg->impacts, &h))
		return CM_ECORRUPT;
	*df = (uint32_t)h.df;
	return CM_OK;
}

static unsigned
impacts_get(const uint8_t *s, st_impact *imp)
{
	unsigned n = 0;
	for (unsigned k = 0; k < IMP_SLOTS && s[2 * k]; k++, n++) {
		imp[n].freq = s[2 * k] == IMP_FREQ_ANY ? UINT32_MAX : s[2 * k];
		imp[n].norm = s[2 * k + 1];
	}
	if (!n) { /* not written so: the loosest bound */
		imp[0].freq = UINT32_MAX;
		imp[0].norm = 0;
		n = 1;
	}
	return n;
}

unsigned
st_postings_block_impacts(const st_postings *p, uint32_t b, st_impact *imp)
{
	if (b < p->nblocks && p->skip && p->groups)
		return impacts_get(p->skip + (size_t)b * SKIP_ENTRY4 + 12, imp);
	uint32_t mf;
	uint8_t mn;
	st_postings_block_impact(p, b, &mf, &mn);
	imp[0].freq = mf;
	imp[0].norm = mn;
	return 1;
}

unsigned
st_postings_group_impacts(const st_postings *p, uint32_t g, st_impact *imp)
{
	if (!p->groups || (uint64_t)g * IMP_GROUP >= p->nblocks)
		return 0;
	return impacts_get(p->groups + (size_t)g * IMP_BYTES, imp);
}

void
st_postings_block_impact(const st_postings *p, uint32_t b, uint32_t *max_freq, uint8_t *min_norm)
{
	if (b >= p->nblocks) {
		*max_freq = 0;
		*min_norm = 255;
	} else if (!p->skip) {
		*max_freq = p->one_maxf;
		*min_norm = p->one_norm;
	} else if (p->groups) {
		st_impact imp[ST_IMPACTS];
		unsigned n = impacts_get(p->skip + (size_t)b * SKIP_ENTRY4 + 12, imp);
		*max_freq = 0;
		*min_norm = 255;
		for (unsigned k = 0; k < n; k++) {
			if (imp[k].freq > *max_freq)
				*max_freq = imp[k].freq;
			if (imp[k].norm < *min_norm)
				*min_norm = imp[k].norm;
		}
	} else {
		const uint8_t *s = p->skip + (size_t)b * SKIP_ENTRY;
		*max_freq = cm_get_u32(s + 8);
		*min_norm = s[12];
	}
}

uint32_t
st_postings_find_block(const st_postings *p, uint32_t target)
{
	if (!p->skip)
		return p->nblocks && p->one_last >= target ? 0 : p->nblocks;
	uint32_t lo = p->block == UINT32_MAX || p->block >= p->nblocks ? 0 : p->block;
	size_t es = p->skip_entry;
	if (lo < p->nblocks && cm_get_u32(p->skip + (size_t)lo * es) >= target)
		lo = 0; /* target behind the cursor: search everything */
	uint32_t hi = p->nblocks;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (cm_get_u32(p->skip + (size_t)mid * es) >= target)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* Decodes block b into docs/freqs; false (and the cursor ends) if corrupt. */
static bool
load_block(st_postings *p, uint32_t b)
{
	if (b >= p->nblocks) {
		p->block = p->nblocks;
		p->n = p->i = 0;
		p->doc = ST_NO_MORE_DOCS;
		return false;
	}
	if (p->doc_freq == 1) {
		p->docs[0] = p->one_last;
		p->freqs[0] = p->one_maxf;
		p->n = 1;
	} else if (!p->skip) {
		if (!codec_block_decode(p->data, p->data_len, p->doc_freq, UINT32_MAX, p->docs,
		                        p->freqs) ||
		    p->docs[p->doc_freq - 1] != p->one_last) {
			postings_fail(p);
			return false;
		}
		p->n = p->doc_freq;
	} else {
		size_t es = p->skip_entry;
		const uint8_t *s = p->skip + (size_t)b * es;
		uint32_t start = b ? cm_get_u32(s - es + 4) : 0;
		uint32_t end = cm_get_u32(s + 4);
		uint32_t prev = b ? cm_get_u32(s - es) : UINT32_MAX;
		uint32_t n = b + 1 < p->nblocks ? ST_BLOCK : p->doc_freq - b * ST_BLOCK;
		if (start > end || end > p->data_len ||
		    (es == SKIP_ENTRY4 ? seg_sum4(p->data + start, end - start)
		                       : XXH32(p->data + start, end - start, 0)) !=
		        cm_get_u32(s + (es == SKIP_ENTRY4 ? 8 : 13)) ||
		    !codec_block_decode(p->data + start, end - start, n, prev, p->docs, p->freqs) ||
		    p->docs[n - 1] != cm_get_u32(s) || p->docs[n - 1] >= p->txn->seg->max_doc) {
			postings_fail(p);
			return false;
		}
		p->n = n;
	}
	p->block = b;
	p->i = 0;
	p->doc = p->docs[0];
	p->freq = p->freqs[0];
	return true;
}

uint32_t
st_postings_seek_block(st_postings *p, uint32_t b)
{
	if (p->doc == ST_NO_MORE_DOCS)
		return ST_NO_MORE_DOCS;
	if (p->block != UINT32_MAX && p->block < p->nblocks && b < p->block)
		b = p->block; /* never backwards */
	if (b == p->block)
		return p->doc;
	load_block(p, b);
	return p->doc;
}

uint32_t
st_postings_next_block(st_postings *p)
{
	if (p->doc == ST_NO_MORE_DOCS)
		return 0;
	uint32_t b = p->block == UINT32_MAX ? 0 : p->block + 1;
	return load_block(p, b) ? p->n : 0;
}

uint32_t
st_postings_next(st_postings *p)
{
	if (p->i + 1 < p->n) {
		p->i++;
		p->doc = p->docs[p->i];
		p->freq = p->freqs[p->i];
		return p->doc;
	}
	if (p->doc == ST_NO_MORE_DOCS)
		return ST_NO_MORE_DOCS;
	uint32_t b = p->block == UINT32_MAX ? 0 : p->block + 1;
	load_block(p, b);
	return p->doc;
}

uint32_t
st_postings_advance(st_postings *p, uint32_t target)
{
	if (p->doc == ST_NO_MORE_DOCS)
		return ST_NO_MORE_DOCS;
	if (p->doc != BEFORE_FIRST && p->doc >= target)
		return p->doc;
	if (p->n == 0 || p->docs[p->n - 1] < target) {
		uint32_t b = st_postings_find_block(p, target);
		if (p->block != UINT32_MAX && b <= p->block && p->block < p->nblocks)
			b = p->block + 1; /* never move backwards */
		if (!load_block(p, b))
			return ST_NO_MORE_DOCS;
		if (p->docs[p->n - 1] < target) { /* skip data lied: treat as corrupt */
			postings_fail(p);
			return ST_NO_MORE_DOCS;
		}
	}
	uint32_t i = p->i;
	while (p->docs[i] < target)
		i++;
	p->i = i;
	p->doc = p->docs[i];
	p->freq = p->freqs[i];
	return p->doc;
}

static bool
load_positions(st_postings *p)
{
	const uint8_t *d = p->pos_inl;
	size_t len = p->pos_inl_len;
	if (!d) {
		MDB_val v;
		if (!p->pos_key_len || seg_get(p->txn, p->pos_key, p->pos_key_len, &v))
			return false;
		d = v.mv_data;
		len = v.mv_size;
	}
	bool sum4 = p->txn->seg->impacts && p->pos_inl; /* format 4 */
	if (p->nblocks <= 1) {
		if (sum4 ? len < 4 || seg_sum4(d, len - 4) != cm_get_u32(d + len - 4)
		         : !cm_checksum_ok(d, &len))
			return false;
		if (sum4)
			len -= 4;
		p->pos_table = NULL;
		p->pos_data = d;
		p->pos_len = len;
	} else {
		size_t table = (size_t)p->nblocks * 8;
		if (len < table + 4 ||
		    (sum4 ? seg_sum4(d, table) : XXH32(d, table, 0)) != cm_get_u32(d + table))
			return false;
		p->pos_table = d;
		p->pos_data = d + table + 4;
		p->pos_len = len - table - 4;
	}
	return true;
}

static bool
locate_positions(st_postings *p)
{
	size_t start = 0, end = p->pos_len;
	if (p->pos_table) {
		const uint8_t *e = p->pos_table + (size_t)p->block * 8;
		start = p->block ? cm_get_u32(e - 8) : 0;
		end = cm_get_u32(e);
		if (start > end || end > p->pos_len ||
		    (p->txn->seg->impacts ? seg_sum4(p->pos_data + start, end - start)
		                          : XXH32(p->pos_data + start, end - start, 0)) !=
		        cm_get_u32(e + 4))
			return false;
	}
	if (end - start < 1 || p->pos_data[start] > 32)
		return false;
	/* the block must hold every position its docs' freqs promise */
	uint64_t total = 0;
	for (uint32_t i = 0; i < p->n; i++)
		total += p->freqs[i];
	unsigned bits = p->pos_data[start];
	if (codec_packed_size(total, bits) > end - start - 1)
		return false;
	p->pos_bits = (uint8_t)bits;
	p->pos_cur = p->pos_data + start + 1;
	p->pos_end = p->pos_data + end;
	p->pos_block = p->block;
	p->pos_i = 0;
	p->pos_idx = 0;
	p->pos_blocks++;
	return true;
}

int
st_postings_positions(st_postings *p, uint32_t *pos, uint32_t cap)
{
	if (p->doc >= BEFORE_FIRST || p->corrupt || p->freq > cap)
		return -1;
	if (!p->pos_data && !load_positions(p))
		return -1;
	if (p->pos_block != p->block || p->pos_i > p->i) {
		if (!locate_positions(p))
			return -1;
	}
	while (p->pos_i < p->i)
		p->pos_idx += p->freqs[p->pos_i++];
	/* locate_positions checked the block holds all of them */
	codec_unpack32_at(p->pos_cur, (size_t)(p->pos_end - p->pos_cur), p->pos_idx, p->freq,
	                  p->pos_bits, pos);
	uint64_t acc = 0;
	for (uint32_t k = 0; k < p->freq; k++) {
		acc += pos[k];
		if (acc > UINT32_MAX)
			return -1;
		pos[k] = (uint32_t)acc;
	}
	p->pos_idx += p->freq;
	p->pos_i++;
	p->pos_docs++;
	p->pos_read += p->freq;
	return (int)p->freq;
}

/* ---- terms ---- */

cm_err
st_terms_open(st_seg_txn *t, const st_field_info *f, st_terms **out)
{
	*out = NULL;
	if (!(f->flags & ST_FI_POSTINGS))
		return CM_ENOTFOUND;
	st_terms *it = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*it));
	MDB_cursor *cur;
	int rc = mdb_cursor_open(t->txn, t->seg->dbi, &cur);
	if (rc) {
		cm_free(CM_MEM_STORAGE, it);
		return seg_err(rc);
	}
	it->txn = t;
	it->f = f;
	uint8_t prefix[3];
	seg_term_key(prefix, TAG_TERM, f->id, NULL, 0);
	seg_keys_init(&it->k, t, cur, prefix, t->seg->tdir);
	*out = it;
	return CM_OK;
}

/* ---- a section's keys, whichever the format ---- */

void
seg_keys_init(seg_keys *k, const st_seg_txn *t, MDB_cursor *cur, const uint8_t *prefix,
              seg_tdir_set *tdir)
{
	memset(k, 0, sizeof(*k));
	k->cur = cur;
	k->blocks = t->seg->tblocks;
	k->tdir = tdir;
	memcpy(k->prefix, prefix, tag_pfx(prefix[0]));
}

static bool
keys_take(seg_keys *k, int rc, const MDB_val *key, const MDB_val *val)
{
	size_t pl = tag_pfx(k->prefix[0]);
	k->valid = rc == 0 && key->mv_size >= pl && memcmp(key->mv_data, k->prefix, pl) == 0;
	k->bad = rc && rc != MDB_NOTFOUND;
	if (k->valid) {
		k->key = (const uint8_t *)key->mv_data + pl;
		k->klen = key->mv_size - pl;
		k->val = val->mv_data;
		k->vlen = val->mv_size;
	}
	return k->valid;
}

static bool
keys_take_block(seg_keys *k, bool ok, bool bad)
{
	k->valid = ok;
	k->bad = bad;
	if (ok) {
		k->key = k->blk.term;
		k->klen = k->blk.term_len;
		k->val = k->blk.val;
		k->vlen = k->blk.vlen;
	}
	return ok;
}

bool
seg_keys_seek(seg_keys *k, const uint8_t *kb, size_t kl)
{
	if (k->blocks) {
		bool bad = false;
		bool ok = tdict_seek(k->tdir, k->cur, kb, kl, &k->blk, &bad);
		return keys_take_block(k, ok, bad);
	}
	MDB_val key = {kl, (void *)kb}, val;
	int rc = mdb_cursor_get(k->cur, &key, &val, MDB_SET_RANGE);
	return keys_take(k, rc, &key, &val);
}

bool
seg_keys_next(seg_keys *k)
{
	if (!k->valid)
		return false;
	if (k->blocks) {
		bool bad = false;
		bool ok = tblock_next(&k->blk, &bad) ||
		          (!bad && tdict_next_block(k->cur, k->prefix, &k->blk, &bad));
		return keys_take_block(k, ok, bad);
	}
	MDB_val key, val;
	int rc = mdb_cursor_get(k->cur, &key, &val, MDB_NEXT);
	return keys_take(k, rc, &key, &val);
}

/* ---- terms ---- */

bool
st_terms_seek(st_terms *it, const void *key, size_t len)
{
	uint8_t kb[SEG_MAX_KEY + 1];
	if (len > SEG_MAX_TERM)
		len = SEG_MAX_TERM; /* no stored term is longer; the prefix seeks the same spot */
	size_t kl = seg_term_key(kb, TAG_TERM, it->f->id, key, key ? len : 0);
	if (!seg_keys_seek(&it->k, kb, kl))
		return false;
	/* A truncated seek key may land on a term equal to its prefix. */
	if (key && len == SEG_MAX_TERM && it->k.klen == len && memcmp(it->k.key, key, len) == 0)
		return st_terms_next(it);
	return true;
}

bool
st_terms_next(st_terms *it)
{
	return seg_keys_next(&it->k);
}

const uint8_t *
st_terms_term(const st_terms *it, size_t *len)
{
	*len = it->k.klen;
	return it->k.key;
}

bool
st_terms_corrupt(const st_terms *it)
{
	return it->k.bad;
}

uint32_t
st_terms_doc_freq(const st_terms *it)
{
	const uint8_t *p = it->k.val;
	uint64_t df;
	if (!it->k.valid || !codec_varint(&p, p + it->k.vlen, &df) || df > UINT32_MAX)
		return 0;
	return (uint32_t)df;
}

cm_err
st_terms_postings(st_terms *it, st_postings *p)
{
	if (!it->k.valid)
		return CM_ENOTFOUND;
	return postings_init(it->txn, it->f, it->k.val, it->k.vlen, it->k.key, it->k.klen, p);
}

void
st_terms_close(st_terms *it)
{
	if (!it)
		return;
	mdb_cursor_close(it->k.cur);
	cm_free(CM_MEM_STORAGE, it);
}

/* ---- norms ---- */

const uint8_t *
st_norms(st_seg_txn *t, const st_field_info *f)
{
	if (!(f->flags & ST_FI_NORMS) || f->id >= t->seg->nfields)
		return NULL;
	uint8_t key[3] = {TAG_NORMS, (uint8_t)(f->id >> 8), (uint8_t)f->id};
	MDB_val v;
	if (seg_get(t, key, 3, &v) || v.mv_size != (size_t)t->seg->max_doc + 4)
		return NULL;
	_Atomic uint8_t *state = &t->seg->norms_state[f->id];
	uint8_t st = atomic_load_explicit(state, memory_order_acquire);
	if (st == 0) {
		size_t len = v.mv_size;
		st = cm_checksum_ok(v.mv_data, &len) ? 1 : 2;
		atomic_store_explicit(state, st, memory_order_release);
	}
	return st == 1 ? v.mv_data : NULL;
}

/* ---- columns ---- */

static size_t
col_key(uint8_t *key, uint16_t field, uint32_t block)
{
	key[0] = TAG_COL;
	key[1] = (uint8_t)(field >> 8);
	key[2] = (uint8_t)field;
	key[3] = (uint8_t)(block >> 24);
	key[4] = (uint8_t)(block >> 16);
	key[5] = (uint8_t)(block >> 8);
	key[6] = (uint8_t)block;
	return 7;
}

static cm_err
col_get(st_seg_txn *t, const st_field_info *f, uint32_t block, MDB_val *v)
{
	if (!(f->flags & ST_FI_COLUMN) || f->id >= t->seg->nfields ||
	    (uint64_t)block * ST_COL_BLOCK >= t->seg->max_doc)
		return CM_ENOTFOUND;
	st_col_loc *loc =
	    t->seg->col_loc ? &t->seg->col_loc[(size_t)f->id * t->seg->col_blocks + block] : NULL;
	const void *at = loc ? atomic_load_explicit(&loc->data, memory_order_acquire) : NULL;
	if (at) {
		v->mv_data = (void *)at;
		v->mv_size = atomic_load_explicit(&loc->size, memory_order_relaxed);
		return CM_OK;
	}
	uint8_t key[7];
	cm_err e = seg_get(t, key, col_key(key, f->id, block), v);
	if (e == CM_ENOTFOUND)
		return CM_ECORRUPT; /* every block of a column field is written */
	if (e)
		return e;
	if (v->mv_size < 24 + 2 + 4 ||
	    XXH32(v->mv_data, 20, 0) != cm_get_u32((const uint8_t *)v->mv_data + 20))
		return CM_ECORRUPT;
	if (loc) {
		atomic_store_explicit(&loc->size, v->mv_size, memory_order_relaxed);
		atomic_store_explicit(&loc->data, v->mv_data, memory_order_release);
	}
	return CM_OK;
}

cm_err
st_col_zone(st_seg_txn *t, const st_field_info *f, uint32_t block, int64_t *min, int64_t *max,
            uint32_t *nvalues)
{
	MDB_val v;
	cm_err e = col_get(t, f, block, &v);
	if (e)
		return e;
	const uint8_t *p = v.mv_data;
	*min = (int64_t)cm_get_u64(p);
	*max = (int64_t)cm_get_u64(p + 8);
	*nvalues = cm_get_u32(p + 16);
	return CM_OK;
}

void
st_colblock_free(st_colblock *cb)
{
	cm_free(CM_MEM_STORAGE, cb->starts);
	cm_free(CM_MEM_STORAGE, cb->vals);
	memset(cb, 0, sizeof(*cb));
}

static cm_err col_decode(st_seg_txn *t, const st_field_info *f, uint32_t block, st_colblock *cb,
                         bool values);

cm_err
st_col_load(st_seg_txn *t, const st_field_info *f, uint32_t block, st_colblock *cb)
{
	return col_decode(t, f, block, cb, true);
}

cm_err
st_col_range_bits(st_seg_txn *t, const st_field_info *f, uint32_t block, int64_t lo, int64_t hi,
                  st_colblock *cb, uint64_t *bb, int *matched)
{
	*matched = -1;
	cm_err e = col_decode(t, f, block, cb, false);
	if (e)
		return e;
	if (!cb->single)
		return CM_OK;
	if (!cb->nvalues || cb->max < lo || cb->min > hi || lo > hi) {
		memset(bb, 0, (cb->ndocs + 63) / 64 * sizeof(uint64_t));
		*matched = 0;
		return CM_OK;
	}
	/* value = min + packed: the bounds relative to min, exact unsigned */
	uint64_t rlo = lo <= cb->min ? 0 : (uint64_t)lo - (uint64_t)cb->min;
	uint64_t rhi = (uint64_t)(hi >= cb->max ? cb->max : hi) - (uint64_t)cb->min;
	*matched = codec_packed_range_bits(cb->packed, cb->packed_len, cb->ndocs, cb->vbits, rlo, rhi,
	                                   bb);
	return CM_OK;
}

/* Checks and decodes a column block: the per-doc value counts always, the
 * values themselves when asked (else they stay packed, cb->sparse). */
static cm_err
col_decode(st_seg_txn *t, const st_field_info *f, uint32_t block, st_colblock *cb, bool values)
{
	MDB_val v;
	cm_err e = col_get(t, f, block, &v);
	if (e)
		return e;
	const uint8_t *p = v.mv_data;
	size_t blen = v.mv_size - 24;
	_Atomic uint8_t *ok =
	    t->seg->col_ok ? &t->seg->col_ok[(size_t)f->id * t->seg->col_blocks + block] : NULL;
	if (ok && atomic_load_explicit(ok, memory_order_relaxed))
		blen -= 4; /* verified before: the segment is immutable */
	else if (!cm_checksum_ok(p + 24, &blen))
		return CM_ECORRUPT;
	else if (ok)
		atomic_store_explicit(ok, 1, memory_order_relaxed);
	int64_t mn = (int64_t)cm_get_u64(p), mx = (int64_t)cm_get_u64(p + 8);
	uint32_t nv = cm_get_u32(p + 16);
	uint32_t first = block * ST_COL_BLOCK;
	uint32_t nd = t->seg->max_doc - first < ST_COL_BLOCK ? t->seg->max_doc - first : ST_COL_BLOCK;
	const uint8_t *b = p + 24, *end = p + 24 + blen;
	/* Mark the block unloaded until it decodes completely. */
	cb->starts_cap = cb->starts ? cb->starts_cap : 0;
	if (cb->starts_cap < ST_COL_BLOCK + 1) {
		cb->starts = cm_realloc(CM_MEM_STORAGE, cb->starts, (ST_COL_BLOCK + 1) * sizeof(uint32_t));
		cb->starts_cap = ST_COL_BLOCK + 1;
	}
	cb->ndocs = 0;
	cb->block = UINT32_MAX;
	if (b >= end || *b > 1)
		return CM_ECORRUPT;
	cb->single = false;
	if (*b++ == 0) {
		if (nv != nd)
			return CM_ECORRUPT;
		if (values)
			for (uint32_t i = 0; i <= nd; i++)
				cb->starts[i] = i;
		else
			cb->single = true; /* doc i's value is value i */
	} else {
		if (b >= end || *b > 32)
			return CM_ECORRUPT;
		unsigned cbits = *b++;
		size_t sz = codec_packed_size(nd, cbits);
		if ((size_t)(end - b) < sz)
			return CM_ECORRUPT;
		codec_unpack32(b, (size_t)(end - b), nd, cbits, cb->starts + 1);
		b += sz;
		uint64_t sum = 0;
		cb->starts[0] = 0;
		for (uint32_t i = 1; i <= nd; i++) {
			sum += cb->starts[i];
			if (sum > nv)
				return CM_ECORRUPT;
			cb->starts[i] = (uint32_t)sum;
		}
		if (sum != nv)
			return CM_ECORRUPT;
	}
	if (b >= end || *b > 64)
		return CM_ECORRUPT;
	unsigned vbits = *b++;
	if ((size_t)(end - b) < codec_packed_size(nv, vbits) || (vbits == 0 && nv && mn != mx))
		return CM_ECORRUPT;
	cb->sparse = !values;
	cb->vbits = vbits;
	cb->packed = b;
	cb->packed_len = (size_t)(end - b);
	if (values) {
		if (cb->vals_cap < nv) {
			cb->vals =
			    cm_realloc(CM_MEM_STORAGE, cb->vals, ((size_t)nv + 1) * sizeof(int64_t));
			cb->vals_cap = nv;
		}
		codec_unpack64(b, (size_t)(end - b), nv, vbits, (uint64_t *)cb->vals);
		for (uint32_t i = 0; i < nv; i++)
			cb->vals[i] = (int64_t)((uint64_t)cb->vals[i] + (uint64_t)mn);
	}
	cb->block = block;
	cb->first_doc = first;
	cb->ndocs = nd;
	cb->nvalues = nv;
	cb->min = mn;
	cb->max = mx;
	return CM_OK;
}

int
st_col_values(st_seg_txn *t, const st_field_info *f, st_colblock *cb, uint32_t doc,
              const int64_t **vals)
{
	if (doc >= t->seg->max_doc)
		return -1;
	uint32_t block = doc / ST_COL_BLOCK;
	if (!cb->starts || cb->block != block || cb->ndocs == 0 || cb->sparse) {
		if (st_col_load(t, f, block, cb))
			return -1;
	}
	uint32_t i = doc - cb->first_doc;
	*vals = cb->vals + cb->starts[i];
	return (int)(cb->starts[i + 1] - cb->starts[i]);
}

int
st_col_values_sparse(st_seg_txn *t, const st_field_info *f, st_colblock *cb, uint32_t doc,
                     const int64_t **vals)
{
	if (doc >= t->seg->max_doc)
		return -1;
	uint32_t block = doc / ST_COL_BLOCK;
	if (!cb->starts || cb->block != block || cb->ndocs == 0) {
		/* a block read at more than 1 doc in 32 decodes whole: cheaper
		 * than value by value (and the next block starts so too) */
		if (cb->starts && cb->ndocs)
			cb->dense = cb->visits > ST_COL_BLOCK / 32;
		if (col_decode(t, f, block, cb, cb->dense))
			return -1;
		cb->visits = 0;
	}
	if (cb->sparse && ++cb->visits > ST_COL_BLOCK / 32) {
		cb->dense = true;
		if (col_decode(t, f, block, cb, true))
			return -1;
	} else if (!cb->sparse) {
		cb->visits++;
	}
	uint32_t i = doc - cb->first_doc;
	uint32_t first = cb->single ? i : cb->starts[i];
	uint32_t n = cb->single ? 1 : cb->starts[i + 1] - first;
	if (!cb->sparse) {
		*vals = cb->vals + first;
		return (int)n;
	}
	if (cb->vals_cap < n || !cb->vals) {
		size_t cap = n > 16 ? n : 16;
		cb->vals = cm_realloc(CM_MEM_STORAGE, cb->vals, (cap + 1) * sizeof(int64_t));
		cb->vals_cap = cap;
	}
	codec_unpack64_at(cb->packed, cb->packed_len, first, n, cb->vbits, (uint64_t *)cb->vals);
	for (uint32_t k = 0; k < n; k++)
		cb->vals[k] = (int64_t)((uint64_t)cb->vals[k] + (uint64_t)cb->min);
	*vals = cb->vals;
	return (int)n;
}

int
st_col_values_one(st_seg_txn *t, const st_field_info *f, st_colblock *cb, const uint32_t *docs,
                  size_t n, int64_t *out)
{
	size_t k = 0;
	while (k < n) {
		uint32_t doc = docs[k];
		if (doc >= t->seg->max_doc)
			return -1;
		uint32_t block = doc / ST_COL_BLOCK;
		if (!cb->starts || cb->block != block || cb->ndocs == 0) {
			if (col_decode(t, f, block, cb, false))
				return -1;
			cb->visits = 0;
		}
		if (cb->sparse && !cb->single)
			return (int)k;
		uint32_t end = cb->first_doc + cb->ndocs;
		size_t e = k;
		while (e < n && docs[e] < end)
			e++;
		/* a quarter of the block or more: decoding it whole is cheaper */
		if (cb->sparse && (e - k) * 4 > cb->ndocs && col_decode(t, f, block, cb, true))
			return -1;
		if (cb->sparse) {
			codec_unpack64_gather(cb->packed, cb->packed_len, docs + k, e - k, cb->first_doc,
			                      cb->vbits, (uint64_t *)out + k);
			for (size_t j = k; j < e; j++)
				out[j] = (int64_t)((uint64_t)out[j] + (uint64_t)cb->min);
		} else {
			for (size_t j = k; j < e; j++) {
				uint32_t i = docs[j] - cb->first_doc;
				if (cb->starts[i + 1] - cb->starts[i] != 1)
					return (int)j;
				out[j] = cb->vals[cb->starts[i]];
			}
		}
		k = e;
	}
	return (int)k;
}

int
st_col_count_one(st_seg_txn *t, const st_field_info *f, st_colblock *cb, const uint32_t *docs,
                 size_t n, uint32_t *counts, uint64_t ncounts)
{
	size_t k = 0;
	while (k < n) {
		uint32_t doc = docs[k];
		if (doc >= t->seg->max_doc)
			return -1;
		uint32_t block = doc / ST_COL_BLOCK;
		if (!cb->starts || cb->block != block || cb->ndocs == 0) {
			if (col_decode(t, f, block, cb, false))
				return -1;
			cb->visits = 0;
		}
		if (cb->sparse && !cb->single)
			return (int)k;
		uint32_t end = cb->first_doc + cb->ndocs;
		size_t e = k;
		while (e < n && docs[e] < end)
			e++;
		if (cb->sparse) {
			codec_count_gather(cb->packed, cb->packed_len, docs + k, e - k,
			                   cb->first_doc, cb->vbits, (uint64_t)cb->min, counts,
			                   ncounts);
		} else {
			/* decoded by st_col_values_sparse on the same cb */
			for (size_t j = k; j < e; j++) {
				uint32_t i = docs[j] - cb->first_doc;
				if (cb->starts[i + 1] - cb->starts[i] != 1)
					return (int)j;
				uint64_t v = (uint64_t)cb->vals[cb->starts[i]];
				if (v < ncounts)
					counts[v]++;
			}
		}
		k = e;
	}
	return (int)k;
}

/* ---- ordinals ---- */

static void
ord_tab_free(st_ord_tab *ot)
{
	if (!ot)
		return;
	cm_free(CM_MEM_STORAGE, ot->term);
	cm_free(CM_MEM_STORAGE, ot->len);
	cm_free(CM_MEM_STORAGE, ot->terms);
	cm_free(CM_MEM_STORAGE, ot);
}

/* The ordinal of a keyword term's value (df, ttf, ord). */
static bool
value_ord(const uint8_t *p, size_t len, uint64_t *ord)
{
	const uint8_t *pe = p + len;
	uint64_t df, ttf;
	return codec_varint(&p, pe, &df) && codec_varint(&p, pe, &ttf) && codec_varint(&p, pe, ord);
}

/* Format 5: the field's terms decoded out of their blocks into one
 * buffer, each checked to name its ordinal; NULL when one does not. */
static st_ord_tab *
ord_tab_walk(st_seg_txn *t, const st_field_info *f)
{
	uint64_t n = f->num_terms, i = 0;
	st_terms *it;
	if (st_terms_open(t, f, &it))
		return NULL;
	st_ord_tab *ot = cm_calloc(CM_MEM_STORAGE, 1, sizeof *ot);
	ot->term = cm_malloc(CM_MEM_STORAGE, (n ? n : 1) * sizeof *ot->term);
	ot->len = cm_malloc(CM_MEM_STORAGE, (n ? n : 1) * sizeof *ot->len);
	cm_buf terms;
	cm_buf_init(&terms, CM_MEM_STORAGE);
	bool ok = true;
	for (bool more = st_terms_seek(it, NULL, 0); more; more = st_terms_next(it)) {
		uint64_t o;
		if (i == n || !value_ord(it->k.val, it->k.vlen, &o) || o != i) {
			ok = false;
			break;
		}
		ot->term[i] = (const uint8_t *)(uintptr_t)terms.len; /* an offset until the end */
		ot->len[i] = (uint32_t)it->k.klen;
		cm_buf_put(&terms, it->k.key, it->k.klen);
		i++;
	}
	st_terms_close(it);
	ot->terms = terms.data; /* the buffer's storage, owned by ot from here */
	for (uint64_t j = 0; j < i; j++)
		ot->term[j] = ot->terms + (uintptr_t)ot->term[j];
	if (!ok || i != n) {
		ord_tab_free(ot);
		return NULL;
	}
	return ot;
}

/* One walk of the field's dictionary, checking that the n-th term names
 * ordinal n; NULL when it does not (the slow path then reports it). */
static st_ord_tab *
ord_tab_build(st_seg_txn *t, const st_field_info *f)
{
	st_segment *seg = (st_segment *)t->seg;
	pthread_mutex_lock(&seg->ord_mu);
	st_ord_tab *ot = atomic_load_explicit(&seg->ord_tabs[f->id], memory_order_acquire);
	if (ot) {
		pthread_mutex_unlock(&seg->ord_mu);
		return ot == &ord_tab_bad ? NULL : ot;
	}
	uint64_t n = f->num_terms;
	uint64_t i = 0;
	bool ok = true;
	if (seg->tblocks) {
		ot = ord_tab_walk(t, f);
		ok = ot != NULL;
		i = n;
		goto samples;
	}
	MDB_cursor *cur;
	if (mdb_cursor_open(t->txn, seg->dbi, &cur)) {
		pthread_mutex_unlock(&seg->ord_mu);
		return NULL;
	}
	ot = cm_calloc(CM_MEM_STORAGE, 1, sizeof *ot);
	ot->term = cm_malloc(CM_MEM_STORAGE, (n ? n : 1) * sizeof *ot->term);
	ot->len = cm_malloc(CM_MEM_STORAGE, (n ? n : 1) * sizeof *ot->len);
	uint8_t key[3];
	size_t kl = seg_term_key(key, TAG_TERM, f->id, NULL, 0);
	MDB_val k = {kl, key}, v;
	for (int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0 && i <= n;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size < 3 || memcmp(k.mv_data, key, 3) != 0)
			break;
		const uint8_t *p = v.mv_data, *pe = p + v.mv_size;
		uint64_t df, ttf, o;
		if (i == n || !codec_varint(&p, pe, &df) || !codec_varint(&p, pe, &ttf) ||
		    !codec_varint(&p, pe, &o) || o != i) {
			ok = false;
			break;
		}
		ot->term[i] = (const uint8_t *)k.mv_data + 3;
		ot->len[i] = (uint32_t)(k.mv_size - 3);
		i++;
	}
	mdb_cursor_close(cur);
samples:
	/* the sampled K entries the slow path seeks by must agree with it */
	for (uint64_t s0 = 0; ok && i == n && s0 < n; s0 += KDICT_STEP) {
		uint32_t b = (uint32_t)(s0 / KDICT_STEP);
		uint8_t kk[7] = {TAG_KDICT,          (uint8_t)(f->id >> 8), (uint8_t)f->id,
		                 (uint8_t)(b >> 24), (uint8_t)(b >> 16),    (uint8_t)(b >> 8),
		                 (uint8_t)b};
		MDB_val kv;
		size_t tl;
		ok = seg_get(t, kk, 7, &kv) == CM_OK &&
		     (tl = kv.mv_size, cm_checksum_ok(kv.mv_data, &tl)) && tl == ot->len[s0] &&
		     memcmp(kv.mv_data, ot->term[s0], tl) == 0;
	}
	if (!ok || i != n) {
		ord_tab_free(ot);
		atomic_store_explicit(&seg->ord_tabs[f->id], &ord_tab_bad, memory_order_release);
		pthread_mutex_unlock(&seg->ord_mu);
		return NULL;
	}
	atomic_store_explicit(&seg->ord_tabs[f->id], ot, memory_order_release);
	pthread_mutex_unlock(&seg->ord_mu);
	return ot;
}

/* A copy of n bytes that lives until the transaction ends. */
static const uint8_t *
txn_keep(st_seg_txn *t, const uint8_t *p, size_t n)
{
	seg_arena *a = t->arena;
	if (!a || a->cap - a->used < n) {
		size_t cap = n > 4000 ? n : 4000;
		a = cm_malloc(CM_MEM_STORAGE, sizeof(*a) + cap);
		a->next = t->arena;
		a->used = 0;
		a->cap = cap;
		t->arena = a;
	}
	uint8_t *d = a->data + a->used;
	memcpy(d, p, n);
	a->used += n;
	return d;
}

/* Format 5: ordinal ord is term ord % TBLOCK of the block the K entry of
 * ord / KDICT_STEP names. */
static cm_err
ord_term_block(st_seg_txn *t, const st_field_info *f, uint64_t ord, const uint8_t **term,
               size_t *len)
{
	uint32_t n = (uint32_t)(ord / KDICT_STEP);
	uint8_t key[SEG_MAX_KEY + 1] = {
	    TAG_KDICT,          (uint8_t)(f->id >> 8), (uint8_t)f->id, (uint8_t)(n >> 24),
	    (uint8_t)(n >> 16), (uint8_t)(n >> 8),     (uint8_t)n};
	MDB_val v;
	cm_err e = seg_get(t, key, 7, &v);
	if (e)
		return e == CM_ENOTFOUND ? CM_ECORRUPT : e;
	size_t tl = v.mv_size;
	if (!cm_checksum_ok(v.mv_data, &tl) || tl > SEG_MAX_TERM)
		return CM_ECORRUPT;
	size_t kl = seg_term_key(key, TAG_TERM, f->id, v.mv_data, tl);
	MDB_val k = {kl, key};
	if ((e = seg_get(t, key, kl, &v)) != CM_OK)
		return e == CM_ENOTFOUND ? CM_ECORRUPT : e;
	tblock_rd b;
	bool bad = false;
	if (!tblock_open(&b, &k, &v))
		return CM_ECORRUPT;
	for (uint64_t i = 0; i <= ord % KDICT_STEP; i++)
		if (!tblock_next(&b, &bad))
			return CM_ECORRUPT;
	/* the value names its ordinal: cheap proof we landed right */
	uint64_t o;
	if (!value_ord(b.val, b.vlen, &o) || o != ord)
		return CM_ECORRUPT;
	*term = txn_keep(t, b.term, b.term_len);
	*len = b.term_len;
	return CM_OK;
}

cm_err
st_ord_term(st_seg_txn *t, const st_field_info *f, uint64_t ord, const uint8_t **term, size_t *len)
{
	if (!st_field_type_is_ordinal(f->type) || ord >= f->num_terms)
		return CM_ENOTFOUND;
	if (f->num_terms <= t->seg->ord_tab_max && t->seg->ord_tabs && f->id < t->seg->nfields) {
		st_ord_tab *ot =
		    atomic_load_explicit(&t->seg->ord_tabs[f->id], memory_order_acquire);
		if (!ot)
			ot = ord_tab_build(t, f);
		if (ot && ot != &ord_tab_bad) {
			*term = ot->term[ord];
			*len = ot->len[ord];
			return CM_OK;
		}
	}
	if (t->seg->tblocks)
		return ord_term_block(t, f, ord, term, len);
	if (!t->ord_cur && mdb_cursor_open(t->txn, t->seg->dbi, &t->ord_cur))
		return CM_EIO;
	uint8_t key[SEG_MAX_KEY + 1];
	uint32_t n = (uint32_t)(ord / KDICT_STEP);
	MDB_val k, tv;
	int rc;
	if (t->ord_valid && t->ord_fid == f->id && ord >= t->ord_at &&
	    ord - t->ord_at <= ord % KDICT_STEP) {
		/* from where the last lookup left the cursor */
		rc = mdb_cursor_get(t->ord_cur, &k, &tv, MDB_GET_CURRENT);
		for (uint64_t i = t->ord_at; rc == 0 && i < ord; i++)
			rc = mdb_cursor_get(t->ord_cur, &k, &tv, MDB_NEXT);
		goto check;
	}
	key[0] = TAG_KDICT;
	key[1] = (uint8_t)(f->id >> 8);
	key[2] = (uint8_t)f->id;
	key[3] = (uint8_t)(n >> 24);
	key[4] = (uint8_t)(n >> 16);
	key[5] = (uint8_t)(n >> 8);
	key[6] = (uint8_t)n;
	MDB_val v;
	cm_err e = seg_get(t, key, 7, &v);
	if (e)
		return e == CM_ENOTFOUND ? CM_ECORRUPT : e;
	size_t tl = v.mv_size;
	if (!cm_checksum_ok(v.mv_data, &tl) || tl > SEG_MAX_TERM)
		return CM_ECORRUPT;
	size_t kl = seg_term_key(key, TAG_TERM, f->id, v.mv_data, tl);
	k = (MDB_val){kl, key};
	rc = mdb_cursor_get(t->ord_cur, &k, &tv, MDB_SET_KEY);
	for (uint64_t i = n * (uint64_t)KDICT_STEP; rc == 0 && i < ord; i++)
		rc = mdb_cursor_get(t->ord_cur, &k, &tv, MDB_NEXT);
check:
	t->ord_valid = false;
	/* the key's tag and field: TAG_TERM then the field id, big-endian */
	if (rc || k.mv_size < 3 || ((const uint8_t *)k.mv_data)[0] != TAG_TERM ||
	    ((const uint8_t *)k.mv_data)[1] != (uint8_t)(f->id >> 8) ||
	    ((const uint8_t *)k.mv_data)[2] != (uint8_t)f->id)
		return CM_ECORRUPT;
	/* The T value names its ordinal: cheap proof we landed right. */
	const uint8_t *p = tv.mv_data, *pe = p + tv.mv_size;
	uint64_t df, ttf, o;
	if (!codec_varint(&p, pe, &df) || !codec_varint(&p, pe, &ttf) || !codec_varint(&p, pe, &o) ||
	    o != ord)
		return CM_ECORRUPT;
	t->ord_valid = true;
	t->ord_fid = f->id;
	t->ord_at = ord;
	*term = (const uint8_t *)k.mv_data + 3;
	*len = k.mv_size - 3;
	return CM_OK;
}

/* Format 5's st_term_ord: key is the (possibly truncated) T key of a
 * probe len bytes long. */
static cm_err
term_ord_block(st_seg_txn *t, const st_field_info *f, const uint8_t *key, size_t kl, size_t len,
               uint64_t *ord)
{
	tblock_rd b;
	bool bad = false;
	bool found = tdict_seek(t->seg->tdir, t->cur, key, kl, &b, &bad);
	bool same = found && b.term_len == kl - 3 && memcmp(b.term, key + 3, kl - 3) == 0;
	if (same && len > SEG_MAX_TERM)
		/* the stored term is a prefix of a longer probe: insertion point is after it */
		found = tblock_next(&b, &bad) || (!bad && tdict_next_block(t->cur, key, &b, &bad));
	if (bad)
		return CM_ECORRUPT;
	if (!found) {
		*ord = f->num_terms;
		return CM_ENOTFOUND;
	}
	term_head h;
	const uint8_t *pos;
	size_t vlen = b.vlen, pos_len;
	if (!term_split(t->seg, f, b.val, &vlen, &pos, &pos_len) ||
	    !parse_term(b.val, vlen, true, t->seg->impacts, &h) || h.ord >= f->num_terms)
		return CM_ECORRUPT;
	*ord = h.ord;
	return same && len <= SEG_MAX_TERM ? CM_OK : CM_ENOTFOUND;
}

cm_err
st_term_ord(st_seg_txn *t, const st_field_info *f, const void *term, size_t len, uint64_t *ord)
{
	if (!st_field_type_is_ordinal(f->type))
		return CM_EINVAL;
	uint8_t key[SEG_MAX_KEY + 1];
	size_t kl = seg_term_key(key, TAG_TERM, f->id, term, len > SEG_MAX_TERM ? SEG_MAX_TERM : len);
	if (t->seg->tblocks)
		return term_ord_block(t, f, key, kl, len, ord);
	MDB_val k = {kl, key}, v;
	int rc = mdb_cursor_get(t->cur, &k, &v, MDB_SET_RANGE);
	if (rc == MDB_NOTFOUND || (rc == 0 && (k.mv_size < 3 || memcmp(k.mv_data, key, 3) != 0))) {
		*ord = f->num_terms;
		return CM_ENOTFOUND;
	}
	if (rc)
		return seg_err(rc);
	bool exact = len <= SEG_MAX_TERM && k.mv_size == kl && memcmp(k.mv_data, key, kl) == 0;
	if (!exact && len > SEG_MAX_TERM && k.mv_size == kl && memcmp(k.mv_data, key, kl) == 0) {
		/* the stored term is a prefix of a longer probe: insertion point is after it */
		rc = mdb_cursor_get(t->cur, &k, &v, MDB_NEXT);
		if (rc || k.mv_size < 3 || memcmp(k.mv_data, key, 3) != 0) {
			*ord = f->num_terms;
			return CM_ENOTFOUND;
		}
	}
	term_head h;
	const uint8_t *pos;
	size_t vlen = v.mv_size, pos_len;
	if (!term_split(t->seg, f, v.mv_data, &vlen, &pos, &pos_len) ||
	    !parse_term(v.mv_data, vlen, true, t->seg->impacts, &h) || h.ord >= f->num_terms)
		return CM_ECORRUPT;
	*ord = h.ord;
	return exact ? CM_OK : CM_ENOTFOUND;
}

/* ---- stored documents and ids ---- */

static cm_err
load_dict(st_seg_txn *t)
{
	st_segment *s = (st_segment *)t->seg; /* the dictionary is a lazily filled cache */
	cm_err e = CM_OK;
	pthread_mutex_lock(&s->dict_mu);
	if (!s->dict_loaded) {
		MDB_val v;
		e = seg_get(t, "Z", 1, &v);
		if (e == CM_ENOTFOUND) {
			e = CM_OK;
			s->dict_loaded = true;
		} else if (!e) {
			size_t len = v.mv_size;
			if (!cm_checksum_ok(v.mv_data, &len)) {
				e = CM_ECORRUPT;
			} else {
				s->ddict = ZSTD_createDDict(v.mv_data, len);
				if (!s->ddict)
					e = CM_ECORRUPT;
				else
					s->dict_loaded = true;
			}
		}
	}
	pthread_mutex_unlock(&s->dict_mu);
	return e;
}
/* One zstd decompression context per thread (made once, not per read
 * transaction: that was 5% of a W1 search), freed when the thread ends. */
static pthread_key_t dctx_key;
static pthread_once_t dctx_once = PTHREAD_ONCE_INIT;

static void
dctx_free(void *p)
{
	ZSTD_freeDCtx(p);
}

static void
dctx_init(void)
{
	pthread_key_create(&dctx_key, dctx_free);
}

static ZSTD_DCtx *
thread_dctx(void)
{
	pthread_once(&dctx_once, dctx_init);
	ZSTD_DCtx *d = pthread_getspecific(dctx_key);
	if (!d && (d = ZSTD_createDCtx()) && pthread_setspecific(dctx_key, d)) {
		ZSTD_freeDCtx(d);
		d = NULL;
	}
	return d;
}


static cm_err
load_stored_block(st_seg_txn *t, uint32_t doc)
{
	uint8_t key[6] = {TAG_STORED, 0, (uint8_t)(doc >> 24), (uint8_t)(doc >> 16),
	                  (uint8_t)(doc >> 8), (uint8_t)doc};
	MDB_val k = {6, key}, v;
	int rc = mdb_cursor_get(t->cur, &k, &v, MDB_SET_RANGE);
	if (rc == MDB_NOTFOUND || (rc == 0 && (k.mv_size != 6 || memcmp(k.mv_data, key, 2) != 0)))
		return CM_ECORRUPT; /* doc < max_doc must have a block */
	if (rc)
		return seg_err(rc);
	uint32_t last = cm_get_u32_be((const uint8_t *)k.mv_data + 2);
	size_t len = v.mv_size;
	if (!cm_checksum_ok(v.mv_data, &len))
		return CM_ECORRUPT;
	cm_rd r;
	cm_rd_init(&r, v.mv_data, len);
	uint64_t first, raw_len, off, flen;
	if (!cm_rd_varint(&r, &first) || !cm_rd_varint(&r, &raw_len) || !cm_rd_varint(&r, &off) ||
	    !cm_rd_varint(&r, &flen) || first > doc || last < doc || raw_len > STORED_MAX_RAW ||
	    flen == 0 || flen > ZSTD_compressBound(raw_len) || off > UINT64_MAX / 2)
		return CM_ECORRUPT;
	st_block_unref(t->raw);
	t->raw = st_bcache_get(t->seg->uid, last);
	if (t->raw && t->raw->first == first && t->raw->len == raw_len)
		return CM_OK;
	st_block_unref(t->raw);
	t->raw = NULL;
	/* gather the frame from its chunks */
	cm_buf_reset(&t->frame);
	cm_buf_reserve(&t->frame, flen);
	for (uint64_t c = off / STORED_CHUNK; t->frame.len < flen; c++) {
		if (c > UINT32_MAX)
			return CM_ECORRUPT;
		uint8_t ck[6] = {TAG_STORED, 1, (uint8_t)(c >> 24), (uint8_t)(c >> 16), (uint8_t)(c >> 8),
		                 (uint8_t)c};
		MDB_val cv;
		cm_err e = seg_get(t, ck, sizeof(ck), &cv);
		if (e)
			return e == CM_ENOTFOUND ? CM_ECORRUPT : e;
		size_t cl = cv.mv_size;
		if (!cm_checksum_ok(cv.mv_data, &cl) || cl > STORED_CHUNK)
			return CM_ECORRUPT;
		uint64_t start = c * STORED_CHUNK;
		size_t from = off > start ? (size_t)(off - start) : 0;
		size_t want = flen - t->frame.len;
		if (from >= cl)
			return CM_ECORRUPT;
		size_t take = cl - from < want ? cl - from : want;
		cm_buf_put(&t->frame, (const uint8_t *)cv.mv_data + from, take);
	}
	cm_err e = load_dict(t);
	if (e)
		return e;
	ZSTD_DCtx *dctx = thread_dctx();
	if (!dctx)
		return CM_ENOMEM;
	st_block *b = st_block_new(raw_len + 1);
	if (!b)
		return CM_ENOMEM;
	size_t n;
	if (t->seg->ddict)
		n = ZSTD_decompress_usingDDict(dctx, b->data, raw_len, t->frame.data, flen,
		                               t->seg->ddict);
	else
		n = ZSTD_decompressDCtx(dctx, b->data, raw_len, t->frame.data, flen);
	if (ZSTD_isError(n) || n != raw_len) {
		st_block_unref(b);
		return CM_ECORRUPT;
	}
	b->len = n;
	b->first = (uint32_t)first;
	b->last = last;
	st_bcache_put(t->seg->uid, b);
	t->raw = b;
	return CM_OK;
}

cm_err
st_stored_get(st_seg_txn *t, uint32_t doc, cm_buf *id, cm_buf *source)
{
	if (doc >= t->seg->max_doc)
		return CM_ENOTFOUND;
	if (!t->raw || !(t->raw->first <= doc && doc <= t->raw->last)) {
		cm_err e = load_stored_block(t, doc);
		if (e)
			return e;
	}
	cm_rd r;
	cm_rd_init(&r, t->raw->data, t->raw->len);
	const char *is, *ss;
	size_t il, sl;
	for (uint32_t d = t->raw->first; d <= doc; d++) {
		if (!cm_rd_str(&r, &is, &il) || !cm_rd_str(&r, &ss, &sl)) {
			st_block_unref(t->raw);
			t->raw = NULL;
			return CM_ECORRUPT;
		}
	}
	if (id)
		cm_buf_put(id, is, il);
	if (source)
		cm_buf_put(source, ss, sl);
	return CM_OK;
}

bool
seg_ids_first(seg_keys *k, st_seg_txn *t)
{
	static const uint8_t key[1] = {TAG_ID};
	seg_keys_init(k, t, t->cur, key, NULL);
	return seg_keys_seek(k, key, 1);
}

cm_err
st_id_lookup(st_seg_txn *t, const char *id, size_t len, uint32_t *doc)
{
	if (len > SEG_MAX_ID)
		return CM_ENOTFOUND;
	uint8_t key[SEG_MAX_KEY + 1];
	key[0] = TAG_ID;
	memcpy(key + 1, id, len);
	MDB_val v;
	cm_err e;
	if (t->seg->tblocks) {
		tblock_rd b;
		bool bad = false;
		if (!tdict_seek(t->seg->tdir, t->cur, key, len + 1, &b, &bad))
			return bad ? CM_ECORRUPT : CM_ENOTFOUND;
		if (b.term_len != len || memcmp(b.term, id, len) != 0)
			return CM_ENOTFOUND;
		v = (MDB_val){b.vlen, (void *)b.val};
	} else if ((e = seg_get(t, key, len + 1, &v)) != CM_OK) {
		return e;
	}
	size_t vl = v.mv_size;
	const uint8_t *p = v.mv_data;
	uint64_t d;
	if (!cm_checksum_ok(p, &vl) || !codec_varint(&p, p + vl, &d) || d >= t->seg->max_doc)
		return CM_ECORRUPT;
	*doc = (uint32_t)d;
	return CM_OK;
}
