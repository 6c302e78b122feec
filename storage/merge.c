/* Segment merge: k-way merge of term dictionaries with doc renumbering,
 * re-encoded postings/positions, remapped keyword ordinals, concatenated
 * norms and columns, recompressed stored docs and merged ids.
 *
 * The work is a list of small tasks (dictionary samples, per field, large
 * text fields per term range, stored-doc ranges, ids) whose split depends
 * on the inputs only, never on the thread count, so every pool size writes
 * the same file. The pool's threads take tasks in the order the file needs
 * their output; the calling thread appends each stream with MDB_APPEND as
 * soon as its task is done (and runs tasks itself while it would wait), so
 * the append overlaps the merging instead of following it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "segment_private.h"

#define NONE UINT32_MAX
#define RANGE_MIN_TERMS 20000 /* text fields with more terms are split by term range */
#define RANGE_COST 100000     /* about this many postings (+ terms) per range */
#define MAX_RANGES 256
#define STORED_TASK_BYTES (256u * 1024) /* input bytes per stored-doc task */
#define STORED_TASK_MIN_DOCS 256
#define MAX_STORED_TASKS 4096
#define SAMPLE_MAX_BYTES (512u * 1024) /* dictionary training sample */
#define SAMPLE_DOCS 2048
#define SAMPLE_RUN 16 /* consecutive docs per sample run: one block read, not 16 */
#define SAMPLES_PER_TASK 256

typedef struct mfield {
	st_field_info info;               /* merged; name borrowed from a segment */
	const st_field_info **src;        /* per segment, NULL when absent */
	uint8_t *norms;                   /* merged norms (text) */
	uint32_t nranges;
	uint8_t **bounds;                 /* nranges - 1 lower bounds of ranges 1.. */
	size_t *bound_len;
	size_t first_part;
} mfield;

typedef struct mctx {
	st_segment *const *segs;
	size_t n;
	uint32_t **docmap; /* per segment: old -> new */
	uint32_t *inv_seg, *inv_doc;
	uint32_t max_doc;
	mfield *fields;
	size_t nfields;
	segw *w;
	const void *cdict;
	/* dictionary samples: runs of SAMPLE_RUN docs, sample_stride apart */
	uint32_t sample_stride, nsamples;
} mctx;

enum { MT_FIELD, MT_STORED, MT_IDS, MT_SAMPLE };

/* Per thread: what tasks reuse rather than build each time. */
typedef struct mworker {
	void *cctx;
} mworker;

typedef struct mtask {
	mctx *c;
	int kind;
	size_t field;
	uint32_t range;
	uint32_t lo, hi; /* stored: new doc range */
	size_t out;
	/* per-task accumulators merged after the run */
	uint64_t sum_df, sum_ttf, nterms;
	uint64_t *present; /* postings fields without norms: docs seen */
	/* samples [lo, hi), concatenated (str id, str source each) */
	cm_buf samples;
	size_t *sizes, nsizes;
	bool sample_failed;
	int state; /* MS_OPEN, MS_TAKEN, MS_DONE (under the scheduler's lock) */
	cm_err err;
} mtask;

enum { MS_OPEN, MS_TAKEN, MS_DONE };

typedef struct mbuf {
	uint32_t *docs, *freqs, *pos;
	size_t cap, pos_cap;
} mbuf;

static void
mbuf_need(mbuf *b, size_t docs, size_t pos)
{
	if (docs > b->cap) {
		b->cap = docs * 2 + 256;
		b->docs = cm_realloc(CM_MEM_STORAGE, b->docs, b->cap * sizeof(uint32_t));
		b->freqs = cm_realloc(CM_MEM_STORAGE, b->freqs, b->cap * sizeof(uint32_t));
	}
	if (pos > b->pos_cap) {
		b->pos_cap = pos * 2 + 1024;
		b->pos = cm_realloc(CM_MEM_STORAGE, b->pos, b->pos_cap * sizeof(uint32_t));
	}
}

static void
mbuf_free(mbuf *b)
{
	cm_free(CM_MEM_STORAGE, b->docs);
	cm_free(CM_MEM_STORAGE, b->freqs);
	cm_free(CM_MEM_STORAGE, b->pos);
}

static int
term_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	if (c)
		return c;
	return (al > bl) - (al < bl);
}

/* Appends the live docs (and positions) of one segment's postings. */
static cm_err
gather(mctx *c, size_t si, st_postings *p, bool positions, mbuf *b, uint32_t *df, size_t *np,
       uint64_t *present)
{
	const uint32_t *map = c->docmap[si];
	for (uint32_t n = st_postings_next_block(p); n; n = st_postings_next_block(p)) {
		mbuf_need(b, *df + n, 0);
		for (uint32_t k = 0; k < n; k++) {
			uint32_t nd = map[p->docs[k]];
			if (nd == NONE)
				continue;
			if (positions) {
				uint32_t f = p->freqs[k];
				mbuf_need(b, 0, *np + f);
				p->i = k;
				p->doc = p->docs[k];
				p->freq = f;
				if (st_postings_positions(p, b->pos + *np, f) != (int)f)
					return CM_ECORRUPT;
				*np += f;
			}
			if (present)
				st_bit_set(present, nd);
			b->docs[*df] = nd;
			b->freqs[*df] = p->freqs[k];
			(*df)++;
		}
	}
	return st_postings_corrupt(p) ? CM_ECORRUPT : CM_OK;
}

/* Merges the terms of one field in [lo bound, hi bound); fills ordmaps for
 * keyword fields (old ordinal = rank in that segment's dictionary). */
static cm_err
merge_terms(mtask *t, st_seg_txn **txns, uint32_t **ordmap)
{
	mctx *c = t->c;
	mfield *mf = &c->fields[t->field];
	segw_part *part = &c->w->parts[mf->first_part + t->range];
	bool keyword = st_field_type_is_ordinal(mf->info.type);
	bool positions = (mf->info.flags & ST_FI_POSITIONS) != 0;
	const uint8_t *lo = t->range ? mf->bounds[t->range - 1] : NULL;
	size_t lo_len = t->range ? mf->bound_len[t->range - 1] : 0;
	const uint8_t *hi = t->range + 1 < mf->nranges ? mf->bounds[t->range] : NULL;
	size_t hi_len = hi ? mf->bound_len[t->range] : 0;
	st_terms **its = cm_calloc(CM_MEM_STORAGE, c->n, sizeof(st_terms *));
	uint64_t *rank = cm_calloc(CM_MEM_STORAGE, c->n, sizeof(uint64_t));
	bool *valid = cm_calloc(CM_MEM_STORAGE, c->n, sizeof(bool));
	st_postings *p = cm_malloc(CM_MEM_STORAGE, sizeof(st_postings));
	mbuf b = {0};
	postenc pe;
	postenc_init(&pe);
	cm_err e = CM_OK;
	for (size_t i = 0; i < c->n && !e; i++) {
		if (!mf->src[i] || !(mf->src[i]->flags & ST_FI_POSTINGS))
			continue;
		e = st_terms_open(txns[i], mf->src[i], &its[i]);
		if (!e)
			valid[i] = st_terms_seek(its[i], lo, lo_len);
	}
	uint64_t nout = 0;
	while (!e) {
		const uint8_t *min = NULL;
		size_t min_len = 0;
		for (size_t i = 0; i < c->n; i++) {
			if (!valid[i])
				continue;
			size_t l;
			const uint8_t *tb = st_terms_term(its[i], &l);
			if (!min || term_cmp(tb, l, min, min_len) < 0) {
				min = tb;
				min_len = l;
			}
		}
		if (!min || (hi && term_cmp(min, min_len, hi, hi_len) >= 0))
			break;
		uint32_t df = 0;
		size_t np = 0;
		/* the min term lives in a segment's map: copy before cursors move */
		uint8_t term[SEG_MAX_KEY + 1];
		memcpy(term, min, min_len);
		size_t tl = min_len;
		for (size_t i = 0; i < c->n && !e; i++) {
			if (!valid[i])
				continue;
			size_t l;
			const uint8_t *tb = st_terms_term(its[i], &l);
			if (term_cmp(tb, l, term, tl) != 0)
				continue;
			e = st_terms_postings(its[i], p);
			if (!e)
				e = gather(c, i, p, positions, &b, &df, &np, t->present);
			if (keyword)
				ordmap[i][rank[i]] = NONE;
			if (keyword && df)
				ordmap[i][rank[i]] = (uint32_t)nout;
			rank[i]++;
			valid[i] = st_terms_next(its[i]);
		}
		if (e || df == 0)
			continue;
		if (keyword) {
			if (nout % KDICT_STEP == 0)
				kdict_put(&part->sec[SEC_KDICT], mf->info.id, (uint32_t)(nout / KDICT_STEP),
				          term, tl);
		}
		postenc_term(&pe, &part->sec[SEC_TERM], mf->info.id, term, tl, keyword, nout, b.docs,
		             b.freqs, df, positions ? b.pos : NULL, mf->norms);
		nout++;
		if (!e)
			e = segw_spill_out(c->w, &part->sec[SEC_TERM], &part->spill[SEC_TERM], c->w->spill_at);
		t->sum_df += df;
		for (uint32_t k = 0; k < df; k++)
			t->sum_ttf += b.freqs[k];
	}
	t->nterms = nout;
	for (size_t i = 0; i < c->n; i++) {
		/* a dictionary that ended at a bad block would lose its terms */
		if (!e && its[i] && st_terms_corrupt(its[i]))
			e = CM_ECORRUPT;
		st_terms_close(its[i]);
	}
	postenc_free(&pe);
	mbuf_free(&b);
	cm_free(CM_MEM_STORAGE, p);
	cm_free(CM_MEM_STORAGE, its);
	cm_free(CM_MEM_STORAGE, rank);
	cm_free(CM_MEM_STORAGE, valid);
	return e;
}

static cm_err
merge_column(mtask *t, st_seg_txn **txns, uint32_t **ordmap)
{
	mctx *c = t->c;
	mfield *mf = &c->fields[t->field];
	st_field_info *info = &mf->info;
	segw_part *part = &c->w->parts[mf->first_part];
	st_colblock *cbs = cm_calloc(CM_MEM_STORAGE, c->n, sizeof(st_colblock));
	uint32_t *counts = cm_malloc(CM_MEM_STORAGE, ST_COL_BLOCK * sizeof(uint32_t));
	size_t vcap = ST_COL_BLOCK * 2;
	int64_t *vals = cm_malloc(CM_MEM_STORAGE, vcap * sizeof(int64_t));
	cm_buf tmp;
	cm_buf_init(&tmp, CM_MEM_STORAGE);
	cm_err e = CM_OK;
	bool first = true;
	bool keyword = st_field_type_is_ordinal(info->type);
	uint32_t nblocks = (c->max_doc + ST_COL_BLOCK - 1) / ST_COL_BLOCK;
	for (uint32_t blk = 0; blk < nblocks && !e; blk++) {
		uint32_t lo = blk * ST_COL_BLOCK;
		uint32_t n = c->max_doc - lo < ST_COL_BLOCK ? c->max_doc - lo : ST_COL_BLOCK;
		size_t nv = 0;
		for (uint32_t k = 0; k < n; k++) {
			uint32_t s = c->inv_seg[lo + k], od = c->inv_doc[lo + k];
			const st_field_info *sf = mf->src[s];
			int cnt = 0;
			const int64_t *v = NULL;
			if (sf && (sf->flags & ST_FI_COLUMN)) {
				cnt = st_col_values(txns[s], sf, &cbs[s], od, &v);
				if (cnt < 0) {
					e = CM_ECORRUPT;
					break;
				}
			}
			if (nv + (size_t)cnt > vcap) {
				vcap = (nv + (size_t)cnt) * 2;
				vals = cm_realloc(CM_MEM_STORAGE, vals, vcap * sizeof(int64_t));
			}
			for (int q = 0; q < cnt; q++) {
				int64_t x = v[q];
				if (keyword) {
					/* the old ordinal must be in range and live-mapped */
					if (x < 0 || (uint64_t)x >= sf->num_terms || ordmap[s][x] == NONE) {
						e = CM_ECORRUPT;
						break;
					}
					x = ordmap[s][x];
				}
				vals[nv + q] = x;
				if (first || x < info->col_min)
					info->col_min = x;
				if (first || x > info->col_max)
					info->col_max = x;
				first = false;
			}
			if (e)
				break;
			if (cnt > 1)
				info->flags |= ST_FI_MULTI;
			if (cnt && !(info->flags & ST_FI_POSTINGS))
				info->doc_count++;
			counts[k] = (uint32_t)cnt;
			nv += (size_t)cnt;
		}
		if (!e)
			colenc_block(&part->sec[SEC_COL], info->id, blk, counts, n, vals, (uint32_t)nv,
			             &tmp);
		if (!e)
			e = segw_spill_out(c->w, &part->sec[SEC_COL], &part->spill[SEC_COL], c->w->spill_at);
	}
	for (size_t i = 0; i < c->n; i++)
		st_colblock_free(&cbs[i]);
	cm_free(CM_MEM_STORAGE, cbs);
	cm_free(CM_MEM_STORAGE, counts);
	cm_free(CM_MEM_STORAGE, vals);
	cm_buf_free(&tmp);
	return e;
}

static cm_err
open_txns(mctx *c, st_seg_txn **txns)
{
	for (size_t i = 0; i < c->n; i++) {
		cm_err e = st_seg_txn_begin(c->segs[i], &txns[i]);
		if (e)
			return e;
	}
	return CM_OK;
}

static void
close_txns(mctx *c, st_seg_txn **txns)
{
	for (size_t i = 0; i < c->n; i++)
		st_seg_txn_end(txns[i]);
}

static cm_err
task_field(mtask *t, st_seg_txn **txns)
{
	mctx *c = t->c;
	mfield *mf = &c->fields[t->field];
	uint32_t **ordmap = NULL;
	cm_err e = CM_OK;
	bool keyword = st_field_type_is_ordinal(mf->info.type);
	if (keyword) {
		ordmap = cm_calloc(CM_MEM_STORAGE, c->n, sizeof(uint32_t *));
		for (size_t i = 0; i < c->n; i++)
			if (mf->src[i])
				ordmap[i] = cm_malloc(CM_MEM_STORAGE,
				                      (mf->src[i]->num_terms + 1) * sizeof(uint32_t));
	}
	if (mf->info.flags & ST_FI_POSTINGS) {
		if (!(mf->info.flags & ST_FI_NORMS))
			t->present = cm_calloc(CM_MEM_STORAGE, st_bit_words(c->max_doc) + 1, 8);
		e = merge_terms(t, txns, ordmap);
	}
	if (!e && t->range == 0 && (mf->info.flags & ST_FI_COLUMN))
		e = merge_column(t, txns, ordmap);
	if (ordmap) {
		for (size_t i = 0; i < c->n; i++)
			cm_free(CM_MEM_STORAGE, ordmap[i]);
		cm_free(CM_MEM_STORAGE, ordmap);
	}
	/* norms were written at setup: the writer may be appending them */
	segw_part *part = &c->w->parts[mf->first_part + t->range];
	for (int s = 0; s < SEC_N && !e; s++)
		if (s != SEC_NORMS)
			e = segw_spill_out(c->w, &part->sec[s], &part->spill[s], 1);
	return e;
}

static cm_err
task_stored(mtask *t, st_seg_txn **txns, mworker *wk)
{
	mctx *c = t->c;
	if (t->lo >= t->hi)
		return CM_OK;
	storedenc se;
	cm_buf id, src;
	cm_buf_init(&id, CM_MEM_STORAGE);
	cm_buf_init(&src, CM_MEM_STORAGE);
	if (!wk->cctx)
		wk->cctx = stored_cctx_create();
	storedenc_init_ctx(&se, &c->w->stored[t->out], c->cdict, STORED_LEVEL_MERGE, t->lo,
	                   wk->cctx);
	cm_err e = CM_OK;
	for (uint32_t nd = t->lo; nd < t->hi && !e; nd++) {
		cm_buf_reset(&id);
		cm_buf_reset(&src);
		e = st_stored_get(txns[c->inv_seg[nd]], c->inv_doc[nd], &id, &src);
		if (!e)
			storedenc_add(&se, (const char *)id.data, id.len, (const char *)src.data, src.len);
		if (!e)
			e = segw_spill_out(c->w, &c->w->stored[t->out], &c->w->stored_spill[t->out],
			               c->w->spill_at);
	}
	storedenc_finish(&se);
	if (!e)
		e = segw_spill_out(c->w, &c->w->stored[t->out], &c->w->stored_spill[t->out], 1);
	cm_buf_free(&id);
	cm_buf_free(&src);
	return e;
}

/* k-way merge of the I sections; on a repeated id the later segment wins. */
static cm_err
task_ids(mtask *t, st_seg_txn **txns)
{
	mctx *c = t->c;
	seg_keys *it = cm_calloc(CM_MEM_STORAGE, c->n, sizeof(seg_keys));
	cm_err e = CM_OK;
	for (size_t i = 0; i < c->n && !e; i++)
		if (!seg_ids_first(&it[i], txns[i]) && it[i].bad)
			e = CM_ECORRUPT;
	uint8_t key[SEG_MAX_KEY + 1];
	while (!e) {
		size_t best = c->n;
		for (size_t i = 0; i < c->n; i++)
			if (it[i].valid &&
			    (best == c->n ||
			     term_cmp(it[i].key, it[i].klen, it[best].key, it[best].klen) < 0))
				best = i;
		if (best == c->n)
			break;
		/* the id lives in its iterator (format 5): copy before they move */
		size_t kl = it[best].klen;
		memcpy(key, it[best].key, kl);
		uint32_t out = NONE;
		for (size_t i = 0; i < c->n && !e; i++) {
			if (!it[i].valid || term_cmp(it[i].key, it[i].klen, key, kl) != 0)
				continue;
			size_t vl = it[i].vlen;
			const uint8_t *p = it[i].val;
			uint64_t d;
			if (!cm_checksum_ok(p, &vl) || !codec_varint(&p, p + vl, &d) ||
			    d >= c->segs[i]->max_doc) {
				e = CM_ECORRUPT;
				break;
			}
			if (c->docmap[i][d] != NONE)
				out = c->docmap[i][d];
			if (!seg_keys_next(&it[i]) && it[i].bad)
				e = CM_ECORRUPT;
		}
		if (!e && out != NONE)
			ids_put(&c->w->ids, key, kl, out);
		if (!e)
			e = segw_spill_out(c->w, &c->w->ids, &c->w->ids_spill, c->w->spill_at);
	}
	if (!e)
		e = segw_spill_out(c->w, &c->w->ids, &c->w->ids_spill, 1);
	cm_free(CM_MEM_STORAGE, it);
	return e;
}

/* Reads dictionary samples [lo, hi): this task's share of what
 * train_merge_dict concatenates. Past SAMPLE_MAX_BYTES of its own no
 * later sample of it can be used, so it stops there. */
static cm_err
task_sample(mtask *t, st_seg_txn **txns)
{
	mctx *c = t->c;
	cm_buf id, src;
	cm_buf_init(&id, CM_MEM_STORAGE);
	cm_buf_init(&src, CM_MEM_STORAGE);
	t->sizes = cm_calloc(CM_MEM_STORAGE, t->hi - t->lo + 1, sizeof(size_t));
	for (uint32_t j = t->lo; j < t->hi && t->samples.len < SAMPLE_MAX_BYTES; j++) {
		uint32_t nd = j / SAMPLE_RUN * c->sample_stride + j % SAMPLE_RUN;
		cm_buf_reset(&id);
		cm_buf_reset(&src);
		if (st_stored_get(txns[c->inv_seg[nd]], c->inv_doc[nd], &id, &src)) {
			t->sample_failed = true; /* as a serial pass: train on what came before */
			break;
		}
		size_t before = t->samples.len;
		cm_buf_put_str(&t->samples, (const char *)id.data, id.len);
		cm_buf_put_str(&t->samples, (const char *)src.data, src.len);
		t->sizes[t->nsizes++] = t->samples.len - before;
	}
	cm_buf_free(&id);
	cm_buf_free(&src);
	return CM_OK;
}

static void
run_mtask(mtask *t, mworker *wk)
{
	st_seg_txn **txns = cm_calloc(CM_MEM_STORAGE, t->c->n, sizeof(st_seg_txn *));
	cm_err e = open_txns(t->c, txns);
	if (!e) {
		switch (t->kind) {
		case MT_FIELD:
			e = task_field(t, txns);
			break;
		case MT_STORED:
			e = task_stored(t, txns, wk);
			break;
		case MT_IDS:
			e = task_ids(t, txns);
			break;
		case MT_SAMPLE:
			e = task_sample(t, txns);
			break;
		}
	}
	close_txns(t->c, txns);
	cm_free(CM_MEM_STORAGE, txns);
	t->err = e;
}

/* ---- setup ---- */

typedef struct nref {
	const char *name;
	size_t seg;
	const st_field_info *fi;
} nref;

static int
cmp_nref(const void *a, const void *b)
{
	const nref *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	if (c)
		return c;
	return (x->seg > y->seg) - (x->seg < y->seg);
}

static cm_err
setup_fields(mctx *c, cm_error *err)
{
	size_t total = 0;
	for (size_t i = 0; i < c->n; i++)
		total += c->segs[i]->nfields;
	nref *refs = cm_malloc(CM_MEM_STORAGE, (total + 1) * sizeof(nref));
	size_t k = 0;
	for (size_t i = 0; i < c->n; i++)
		for (size_t f = 0; f < c->segs[i]->nfields; f++)
			refs[k++] = (nref){c->segs[i]->fields[f].name, i, &c->segs[i]->fields[f]};
	qsort(refs, k, sizeof(nref), cmp_nref);
	c->fields = cm_calloc(CM_MEM_STORAGE, k + 1, sizeof(mfield));
	cm_err e = CM_OK;
	for (size_t r = 0; r < k && !e; r++) {
		mfield *mf;
		if (c->nfields && strcmp(c->fields[c->nfields - 1].info.name, refs[r].name) == 0) {
			mf = &c->fields[c->nfields - 1];
			if (mf->info.type != refs[r].fi->type)
				e = cm_error_set(err, CM_EINVAL, "field [%s] has different types in merged segments",
				                 refs[r].name);
		} else {
			if (c->nfields >= MAX_FIELDS) {
				e = cm_error_set(err, CM_ELIMIT, "too many fields to merge");
				break;
			}
			mf = &c->fields[c->nfields];
			mf->info.id = (uint16_t)c->nfields;
			c->nfields++;
			mf->info.name = refs[r].name;
			mf->info.type = refs[r].fi->type;
			mf->info.analyzer = refs[r].fi->analyzer;
			mf->src = cm_calloc(CM_MEM_STORAGE, c->n, sizeof(*mf->src));
			mf->nranges = 1;
		}
		mf->src[refs[r].seg] = refs[r].fi;
		mf->info.flags |= refs[r].fi->flags &
		                  (ST_FI_POSTINGS | ST_FI_POSITIONS | ST_FI_NORMS | ST_FI_COLUMN);
	}
	cm_free(CM_MEM_STORAGE, refs);
	return e;
}

/* Norms concatenated over live docs; also gives text fields' doc_count and
 * their multi-valued flag carries over. */
static void
setup_norms(mctx *c, mfield *mf, st_seg_txn **txns)
{
	mf->norms = cm_calloc(CM_MEM_STORAGE, (size_t)c->max_doc + 1, 1);
	for (size_t i = 0; i < c->n; i++) {
		const st_field_info *sf = mf->src[i];
		if (!sf)
			continue;
		if (sf->flags & ST_FI_MULTI)
			mf->info.flags |= ST_FI_MULTI;
		const uint8_t *nb = st_norms(txns[i], sf);
		if (!nb)
			continue;
		for (uint32_t d = 0; d < c->segs[i]->max_doc; d++)
			if (c->docmap[i][d] != NONE)
				mf->norms[c->docmap[i][d]] = nb[d];
	}
	for (uint32_t d = 0; d < c->max_doc; d++)
		mf->info.doc_count += mf->norms[d] != 0;
}

/* Splits a big text field by term range: bounds from the largest input's
 * dictionary, placed by postings (df + 1 per term) so ranges cost about
 * the same, RANGE_COST each. */
static void
setup_ranges(mctx *c, mfield *mf, st_seg_txn **txns)
{
	size_t big = c->n;
	uint64_t total = 0, cost = 0;
	for (size_t i = 0; i < c->n; i++) {
		if (!mf->src[i])
			continue;
		total += mf->src[i]->num_terms;
		cost += mf->src[i]->num_terms + mf->src[i]->sum_doc_freq;
		if (big == c->n || mf->src[i]->num_terms > mf->src[big]->num_terms)
			big = i;
	}
	if (big == c->n || total < RANGE_MIN_TERMS)
		return;
	uint64_t r = cost / RANGE_COST + 1;
	if (r > MAX_RANGES)
		r = MAX_RANGES;
	uint64_t nt = mf->src[big]->num_terms, weight = nt + mf->src[big]->sum_doc_freq;
	if (r < 2 || nt < r * 2)
		return;
	st_terms *it;
	if (st_terms_open(txns[big], mf->src[big], &it))
		return;
	mf->bounds = cm_calloc(CM_MEM_STORAGE, r, sizeof(uint8_t *));
	mf->bound_len = cm_calloc(CM_MEM_STORAGE, r, sizeof(size_t));
	uint32_t nb = 0;
	uint64_t acc = 0;
	for (bool ok = st_terms_seek(it, NULL, 0); ok && nb + 1 < r; ok = st_terms_next(it)) {
		if (acc > 0 && acc >= (nb + 1) * weight / r) {
			size_t l;
			const uint8_t *tb = st_terms_term(it, &l);
			mf->bounds[nb] = cm_malloc(CM_MEM_STORAGE, l + 1);
			memcpy(mf->bounds[nb], tb, l);
			mf->bound_len[nb] = l;
			nb++;
		}
		acc += (uint64_t)st_terms_doc_freq(it) + 1;
	}
	st_terms_close(it);
	mf->nranges = nb + 1;
}

/* Concatenates the sample tasks' documents in order, up to
 * SAMPLE_MAX_BYTES as one pass over the samples in order would, and
 * trains the stored dictionary on them. */
static void
train_merge_dict(mctx *c, mtask *samples, size_t n)
{
	cm_buf all;
	cm_buf_init(&all, CM_MEM_STORAGE);
	size_t *sizes = cm_calloc(CM_MEM_STORAGE, (size_t)c->nsamples + 1, sizeof(size_t));
	size_t ns = 0;
	bool stop = false;
	for (size_t k = 0; k < n && !stop; k++) {
		mtask *t = &samples[k];
		size_t off = 0;
		for (size_t j = 0; j < t->nsizes; j++) {
			if (all.len >= SAMPLE_MAX_BYTES) {
				stop = true;
				break;
			}
			cm_buf_put(&all, t->samples.data + off, t->sizes[j]);
			sizes[ns++] = t->sizes[j];
			off += t->sizes[j];
		}
		if (t->sample_failed)
			stop = true;
	}
	if (ns && all.len / ns < 4096)
		stored_train_dict(&c->w->dict, all.data, sizes, ns);
	cm_free(CM_MEM_STORAGE, sizes);
	cm_buf_free(&all);
}

/* ---- scheduling ---- */

/* The tasks of one merge, taken in list order (the order the writer
 * appends their output) by the pool's threads and by the writer while it
 * waits. Stored-doc tasks wait for the dictionary, which the thread
 * finishing the last sample task trains while others merge fields. */
typedef struct msched {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	mctx *c;
	mtask *tasks;
	size_t ntasks;
	size_t first_open; /* every task below is taken */
	size_t left;       /* tasks not done */
	size_t samples_left;
	size_t nsample_tasks; /* the first tasks of the list */
	bool dict_ready;
	bool abort; /* a task failed: take no more */
	bool fields_done; /* the field infos summed (writer only) */
	int workers; /* pool workers not yet gone */
	size_t *part_task, *stored_task, ids_task; /* producer of each stream */
	/* per part, the sections its task writes (1 << SEC_*), fixed before
	 * any task runs: the writer must not read field infos tasks update */
	uint8_t *part_secs;
	void *cdict;
} msched;

/* Next task to run, or NULL (lock held). */
static mtask *
sched_pick(msched *m)
{
	if (m->abort)
		return NULL;
	while (m->first_open < m->ntasks && m->tasks[m->first_open].state != MS_OPEN)
		m->first_open++;
	for (size_t i = m->first_open; i < m->ntasks; i++) {
		mtask *t = &m->tasks[i];
		if (t->state != MS_OPEN || (t->kind == MT_STORED && !m->dict_ready))
			continue;
		t->state = MS_TAKEN;
		return t;
	}
	return NULL;
}

/* Runs t (lock held on entry and exit, dropped while it runs). */
static void
sched_run(msched *m, mtask *t, mworker *wk)
{
	pthread_mutex_unlock(&m->mu);
	run_mtask(t, wk);
	bool train = false;
	pthread_mutex_lock(&m->mu);
	if (t->kind == MT_SAMPLE && --m->samples_left == 0)
		train = true;
	if (train) {
		pthread_mutex_unlock(&m->mu);
		train_merge_dict(m->c, m->tasks, m->nsample_tasks);
		m->cdict = stored_cdict_create(&m->c->w->dict, STORED_LEVEL_MERGE);
		m->c->cdict = m->cdict;
		for (size_t i = 0; i < m->nsample_tasks; i++) {
			cm_buf_free(&m->tasks[i].samples);
			cm_free(CM_MEM_STORAGE, m->tasks[i].sizes);
			m->tasks[i].sizes = NULL;
		}
		pthread_mutex_lock(&m->mu);
		m->dict_ready = true;
	}
	t->state = MS_DONE;
	m->left--;
	if (t->err)
		m->abort = true;
	pthread_cond_broadcast(&m->cv);
}

static void
sched_worker(void *arg)
{
	msched *m = arg;
	mworker wk = {0};
	pthread_mutex_lock(&m->mu);
	for (;;) {
		mtask *t = sched_pick(m);
		if (t) {
			sched_run(m, t, &wk);
			continue;
		}
		bool open = false;
		for (size_t i = m->first_open; i < m->ntasks && !open && !m->abort; i++)
			open = m->tasks[i].state == MS_OPEN;
		if (!open)
			break;
		pthread_cond_wait(&m->cv, &m->mu);
	}
	m->workers--;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	stored_cctx_free(wk.cctx);
}

typedef struct mwriter {
	msched *m;
	mworker wk; /* the writer's own, for tasks it runs while waiting */
} mwriter;

/* Until task i (SIZE_MAX: every task) is done, running tasks meanwhile. */
static cm_err
sched_wait(mwriter *mw, size_t i)
{
	msched *m = mw->m;
	pthread_mutex_lock(&m->mu);
	for (;;) {
		if (m->abort)
			break;
		if (i == SIZE_MAX ? m->left == 0 : m->tasks[i].state == MS_DONE)
			break;
		mtask *t = sched_pick(m);
		if (t)
			sched_run(m, t, &mw->wk);
		else
			pthread_cond_wait(&m->cv, &m->mu);
	}
	cm_err e = CM_OK;
	if (m->abort)
		for (size_t k = 0; k < m->ntasks && !e; k++)
			e = m->tasks[k].err;
	pthread_mutex_unlock(&m->mu);
	return m->abort && !e ? CM_EINTERNAL : e;
}

/* Field infos from the tasks' sums (every task done): keyword/boolean
 * doc counts from the union of their postings. */
static void
finish_fields(mctx *c, msched *m)
{
	for (size_t i = 0; i < m->ntasks; i++) {
		mtask *t = &m->tasks[i];
		if (t->kind != MT_FIELD)
			continue;
		mfield *mf = &c->fields[t->field];
		mf->info.sum_doc_freq += t->sum_df;
		mf->info.sum_total_term_freq += t->sum_ttf;
		mf->info.num_terms += t->nterms;
		size_t words = t->present ? st_bit_words(c->max_doc) : 0;
		for (size_t wd = 0; wd < words; wd++)
			mf->info.doc_count += (uint32_t)__builtin_popcountll(t->present[wd]);
	}
	for (size_t f = 0; f < c->nfields; f++) {
		c->w->fields[f] = c->fields[f].info;
		c->w->fields[f].name = cm_strdup(CM_MEM_STORAGE, c->fields[f].info.name);
	}
}

static cm_err
writer_wait(void *ctx, int what, size_t index, int sec)
{
	mwriter *mw = ctx;
	msched *m = mw->m;
	switch (what) {
	case SEGW_PART:
		if (!(m->part_secs[index] & (1u << sec)))
			return CM_OK;
		return sched_wait(mw, m->part_task[index]);
	case SEGW_STORED:
		return sched_wait(mw, m->stored_task[index]);
	case SEGW_IDS:
		return sched_wait(mw, m->ids_task);
	default: {
		cm_err e = sched_wait(mw, SIZE_MAX);
		if (!e && !m->fields_done) /* once: a write retried on a full map asks again */
			finish_fields(m->c, m);
		m->fields_done = !e;
		return e;
	}
	}
}

/* The sections (1 << SEC_*) the task of a field's range r writes; norms
 * are written at setup, so the writer never waits for them. */
static uint8_t
part_sections(const mfield *mf, uint32_t r)
{
	unsigned secs = 0;
	if (mf->info.flags & ST_FI_POSTINGS)
		secs |= 1u << SEC_TERM;
	if (st_field_type_is_ordinal(mf->info.type))
		secs |= 1u << SEC_KDICT;
	if (r == 0 && (mf->info.flags & ST_FI_COLUMN))
		secs |= 1u << SEC_COL;
	return (uint8_t)secs;
}

/* Whether a field's task writes C or K (the first sections of the file):
 * those tasks go first. */
static bool
field_early(const mfield *mf)
{
	return (mf->info.flags & ST_FI_COLUMN) || st_field_type_is_ordinal(mf->info.type);
}

cm_err
st_segment_merge(st_segment *const *segs, const uint64_t *const *live, size_t n, const char *path,
                 uint64_t gen, cm_pool *pool, size_t ram_budget, cm_error *err)
{
	mctx c = {.segs = segs, .n = n};
	msched m = {0};
	mwriter mw = {0};
	bool sched_on = false;
	segw w;
	segw_init(&w);
	c.w = &w;
	cm_err e = CM_OK;
	mtask *tasks = NULL;
	size_t ntasks = 0;
	st_seg_txn **txns = cm_calloc(CM_MEM_STORAGE, n + 1, sizeof(st_seg_txn *));
	c.docmap = cm_calloc(CM_MEM_STORAGE, n + 1, sizeof(uint32_t *));
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t md = segs[i]->max_doc;
		c.docmap[i] = cm_malloc(CM_MEM_STORAGE, ((size_t)md + 1) * sizeof(uint32_t));
		const uint64_t *nested = segs[i]->nested;
		if (nested && live && live[i]) {
			/* a nested doc lives as long as its parent (the next doc
			 * that is not nested): NONE marks the dead ones first */
			bool palive = false;
			for (uint32_t d = md; d-- > 0;) {
				bool alive = st_bit_get(live[i], d);
				if (!st_bit_get(nested, d))
					palive = alive;
				c.docmap[i][d] = alive && palive ? 0 : NONE;
			}
		}
		for (uint32_t d = 0; d < md; d++) {
			bool alive = !live || !live[i] || st_bit_get(live[i], d);
			if (nested && live && live[i])
				alive = c.docmap[i][d] != NONE;
			c.docmap[i][d] = alive ? (uint32_t)total : NONE;
			total += alive;
		}
	}
	if (total > UINT32_MAX - 3) {
		e = cm_error_set(err, CM_ELIMIT, "merged segment would hold too many documents");
		goto fail;
	}
	c.max_doc = (uint32_t)total;
	c.inv_seg = cm_malloc(CM_MEM_STORAGE, (total + 1) * sizeof(uint32_t));
	c.inv_doc = cm_malloc(CM_MEM_STORAGE, (total + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < n; i++)
		for (uint32_t d = 0; d < segs[i]->max_doc; d++)
			if (c.docmap[i][d] != NONE) {
				c.inv_seg[c.docmap[i][d]] = (uint32_t)i;
				c.inv_doc[c.docmap[i][d]] = d;
			}
	e = setup_fields(&c, err);
	if (e)
		goto fail;
	e = open_txns(&c, txns);
	if (e) {
		cm_error_set(err, e, "merge: cannot read a segment");
		goto fail;
	}
	size_t nparts = 0;
	for (size_t f = 0; f < c.nfields; f++) {
		mfield *mf = &c.fields[f];
		if (mf->info.flags & ST_FI_NORMS)
			setup_norms(&c, mf, txns);
		if (mf->info.type == ST_FT_TEXT)
			setup_ranges(&c, mf, txns);
		mf->first_part = nparts;
		nparts += mf->nranges;
	}
	close_txns(&c, txns);
	memset(txns, 0, (n + 1) * sizeof(*txns));

	w.max_doc = w.stored_docs = c.max_doc;
	w.gen = gen;
	w.nfields = c.nfields;
	w.fields = cm_calloc(CM_MEM_STORAGE, c.nfields + 1, sizeof(st_field_info));
	/* the rest of the infos comes at the end; the types are needed from
	 * the start (a keyword field's term blocks follow its ordinals) */
	for (size_t f = 0; f < c.nfields; f++)
		w.fields[f].type = c.fields[f].info.type;
	w.nparts = nparts;
	w.parts = cm_calloc(CM_MEM_STORAGE, nparts + 1, sizeof(segw_part));
	for (size_t i = 0; i < nparts; i++)
		segw_part_init(&w.parts[i]);
	/* The split depends on the inputs only: any pool writes this file. */
	uint64_t in_bytes = 0;
	for (size_t i = 0; i < n; i++)
		in_bytes += segs[i]->bytes;
	size_t nstored = (size_t)(in_bytes / STORED_TASK_BYTES) + 1;
	if (nstored > c.max_doc / STORED_TASK_MIN_DOCS + 1)
		nstored = c.max_doc / STORED_TASK_MIN_DOCS + 1;
	if (nstored > MAX_STORED_TASKS)
		nstored = MAX_STORED_TASKS;
	w.nstored = nstored;
	w.stored = cm_calloc(CM_MEM_STORAGE, nstored, sizeof(cm_buf));
	w.stored_spill = cm_calloc(CM_MEM_STORAGE, nstored, sizeof(segw_spill));
	for (size_t i = 0; i < nstored; i++)
		cm_buf_init(&w.stored[i], CM_MEM_STORAGE);
	/* Over the budget, finished output goes to a spill file instead of
	 * waiting in memory for the append (the merged segment is about as big
	 * as its inputs). */
	int threads = pool ? cm_pool_threads(pool) : 1;
	if (ram_budget && in_bytes > ram_budget / 2) {
		size_t at = ram_budget / (8 * (size_t)(threads + 1));
		e = segw_spill_open(&w, path, at < 65536 ? 65536 : at, err);
		if (e)
			goto fail;
	}
	/* Norms are whole-field values known now: written before any task. */
	for (size_t f = 0; f < c.nfields && !e; f++) {
		mfield *mf = &c.fields[f];
		if (!(mf->info.flags & ST_FI_NORMS))
			continue;
		segw_part *part = &w.parts[mf->first_part];
		norms_put(&part->sec[SEC_NORMS], mf->info.id, mf->norms, c.max_doc);
		e = segw_spill_out(&w, &part->sec[SEC_NORMS], &part->spill[SEC_NORMS], 1);
	}
	if (e) {
		cm_error_set(err, e, "merge into %s: spill failed", path);
		goto fail;
	}

	/* Tasks in the order the writer needs their output: dictionary
	 * samples (the stored tasks wait for the dictionary), fields with
	 * columns or ordinals (C and K come first in the file), ids, stored
	 * docs, then the other fields' term ranges. */
	c.nsamples = c.max_doc < SAMPLE_DOCS ? c.max_doc : SAMPLE_DOCS;
	c.sample_stride = c.max_doc <= SAMPLE_DOCS ? SAMPLE_RUN
	                                           : c.max_doc / (SAMPLE_DOCS / SAMPLE_RUN);
	size_t nsample_tasks = (c.nsamples + SAMPLES_PER_TASK - 1) / SAMPLES_PER_TASK;
	tasks = cm_calloc(CM_MEM_STORAGE, nsample_tasks + nparts + nstored + 2, sizeof(mtask));
	m.part_task = cm_calloc(CM_MEM_STORAGE, nparts + 1, sizeof(size_t));
	m.stored_task = cm_calloc(CM_MEM_STORAGE, nstored + 1, sizeof(size_t));
	m.part_secs = cm_calloc(CM_MEM_STORAGE, nparts + 1, 1);
	for (size_t i = 0; i < nsample_tasks; i++) {
		uint32_t hi = (uint32_t)(i + 1) * SAMPLES_PER_TASK;
		tasks[ntasks] = (mtask){.c = &c, .kind = MT_SAMPLE,
		                        .lo = (uint32_t)i * SAMPLES_PER_TASK,
		                        .hi = hi < c.nsamples ? hi : c.nsamples};
		cm_buf_init(&tasks[ntasks++].samples, CM_MEM_STORAGE);
	}
	for (int early = 1; early >= 0; early--) {
		for (size_t f = 0; f < c.nfields; f++) {
			if (field_early(&c.fields[f]) != (early == 1))
				continue;
			const mfield *mf = &c.fields[f];
			for (uint32_t r = 0; r < mf->nranges; r++) {
				m.part_secs[mf->first_part + r] = part_sections(mf, r);
				m.part_task[mf->first_part + r] = ntasks;
				tasks[ntasks++] =
				    (mtask){.c = &c, .kind = MT_FIELD, .field = f, .range = r};
			}
		}
		if (!early)
			break;
		m.ids_task = ntasks;
		tasks[ntasks++] = (mtask){.c = &c, .kind = MT_IDS};
		for (size_t i = 0; i < nstored; i++) {
			m.stored_task[i] = ntasks;
			uint64_t md = c.max_doc;
			tasks[ntasks++] = (mtask){.c = &c, .kind = MT_STORED, .out = i,
			                          .lo = (uint32_t)(md * i / nstored),
			                          .hi = (uint32_t)(md * (i + 1) / nstored)};
		}
	}
	m.c = &c;
	m.tasks = tasks;
	m.ntasks = m.left = ntasks;
	m.nsample_tasks = m.samples_left = nsample_tasks;
	m.dict_ready = nsample_tasks == 0;
	pthread_mutex_init(&m.mu, NULL);
	pthread_cond_init(&m.cv, NULL);
	sched_on = true;
	mw.m = &m;
	w.wait = writer_wait;
	w.wait_ctx = &mw;
	/* a merged segment is at most about as big as its inputs */
	w.map_hint = (size_t)in_bytes + (size_t)in_bytes / 2 + (16u << 20);
	/* small slices: their writes and writeback overlap the merging, and
	 * the final commit and sync wait for the last slice only */
	w.commit_bytes = 4u << 20;
	size_t nworkers = pool ? (size_t)threads : 0;
	if (nworkers > ntasks)
		nworkers = ntasks;
	m.workers = (int)nworkers;
	for (size_t i = 0; i < nworkers; i++)
		cm_pool_submit(pool, sched_worker, &m);
	e = segw_write_file(&w, path, err);
	if (e) {
		pthread_mutex_lock(&m.mu);
		m.abort = true;
		pthread_mutex_unlock(&m.mu);
	}
fail:
	if (sched_on) {
		/* the workers hold m until they leave */
		pthread_mutex_lock(&m.mu);
		while (m.workers > 0)
			pthread_cond_wait(&m.cv, &m.mu);
		pthread_mutex_unlock(&m.mu);
		pthread_mutex_destroy(&m.mu);
		pthread_cond_destroy(&m.cv);
		stored_cctx_free(mw.wk.cctx);
	}
	stored_cdict_free(m.cdict);
	cm_free(CM_MEM_STORAGE, m.part_task);
	cm_free(CM_MEM_STORAGE, m.stored_task);
	cm_free(CM_MEM_STORAGE, m.part_secs);
	for (size_t i = 0; i < ntasks; i++) {
		cm_free(CM_MEM_STORAGE, tasks[i].present);
		cm_buf_free(&tasks[i].samples);
		cm_free(CM_MEM_STORAGE, tasks[i].sizes);
	}
	cm_free(CM_MEM_STORAGE, tasks);
	close_txns(&c, txns);
	cm_free(CM_MEM_STORAGE, txns);
	for (size_t i = 0; i < n; i++)
		cm_free(CM_MEM_STORAGE, c.docmap[i]);
	cm_free(CM_MEM_STORAGE, c.docmap);
	cm_free(CM_MEM_STORAGE, c.inv_seg);
	cm_free(CM_MEM_STORAGE, c.inv_doc);
	for (size_t f = 0; f < c.nfields; f++) {
		mfield *mf = &c.fields[f];
		cm_free(CM_MEM_STORAGE, mf->src);
		cm_free(CM_MEM_STORAGE, mf->norms);
		for (uint32_t r = 0; r + 1 < mf->nranges; r++)
			cm_free(CM_MEM_STORAGE, mf->bounds[r]);
		cm_free(CM_MEM_STORAGE, mf->bounds);
		cm_free(CM_MEM_STORAGE, mf->bound_len);
	}
	cm_free(CM_MEM_STORAGE, c.fields);
	segw_free(&w);
	return e;
}
