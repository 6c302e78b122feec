/* The in-memory segment builder (indexing buffer) and its writer.
 *
 * Per field: a hash of term -> term id; per term, two byte streams in a
 * shared slice pool (Lucene's ByteBlockPool idea): (doc delta, freq)
 * varints and position deltas. Columns keep per-doc start offsets into a
 * value array; stored docs are raw (id, source) pairs until written. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "codec.h"
#include "segment_private.h"

#define NONE UINT32_MAX
#define POOL_BLOCK_BITS 16
#define POOL_BLOCK (1u << POOL_BLOCK_BITS)
#define POOL_MAX_BLOCKS (1u << (32 - POOL_BLOCK_BITS))

static const uint32_t slice_sizes[] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
#define SLICE_LEVELS (sizeof(slice_sizes) / sizeof(slice_sizes[0]))

typedef struct bpool {
	uint8_t **blocks;
	uint32_t nblocks, cap, used; /* used: bytes taken in the last block */
} bpool;

typedef struct bstream {
	uint32_t start, upto, end;
	uint8_t level;
} bstream;

typedef struct bterm {
	uint32_t hash;
	uint32_t text_off;
	uint16_t text_len;
	uint32_t flushed_doc; /* last doc written to the doc stream */
	uint32_t cur_freq;    /* in the doc being added; 0 = untouched */
	uint32_t last_pos;
	bstream docs, pos;
} bterm;

typedef struct bfield {
	char *name;
	st_field_type type;
	st_analyzer_kind analyzer;
	bool postings, positions, norms, column, multi;
	bool none; /* neither indexed nor with doc values: nothing to keep */
	/* terms */
	bterm *terms;
	uint32_t nterms, terms_cap;
	uint32_t *table; /* term id + 1, 0 empty */
	uint32_t table_cap;
	cm_buf arena;
	/* the doc being added */
	uint32_t cur_doc, cur_len, next_pos, cur_values;
	uint32_t *touched;
	uint32_t ntouched, touched_cap;
	/* per doc */
	uint64_t *present;
	uint8_t *normv;
	size_t present_cap, norms_cap;
	/* column */
	uint32_t *starts; /* col_ndocs + 1 entries */
	uint32_t col_ndocs;
	size_t starts_cap;
	int64_t *vals;
	size_t nvals, vals_cap;
} bfield;

struct st_segbuild {
	bfield *fields;
	size_t nfields, fields_cap;
	uint32_t *fmap; /* open addressing over fields by name hash: index + 1 */
	size_t fmap_cap;
	uint32_t *touched_fields;
	size_t ntouched_fields, touched_fields_cap;
	bpool pool;
	uint32_t ndocs;
	size_t docs_cap;
	uint64_t *seq, *pterm;
	int64_t *version;
	cm_buf stored;    /* str id, str source per doc */
	uint64_t *stored_off;
	uint64_t *failed; /* docs whose add failed half way: written as deleted */
	uint32_t nfailed;
	uint64_t *nested; /* hidden nested docs, NULL when none */
	size_t nested_words;
	uint32_t nnested;
	size_t ram;
};

/* ---- memory helpers ---- */

static void *
grow(st_segbuild *b, void *p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return p;
	size_t nc = *cap ? *cap : 8;
	while (nc < need)
		nc += nc / 2 + 8;
	p = cm_realloc(CM_MEM_STORAGE, p, nc * elem);
	memset((char *)p + *cap * elem, 0, (nc - *cap) * elem);
	b->ram += (nc - *cap) * elem;
	*cap = nc;
	return p;
}

/* ---- slice pool ---- */

static uint8_t *
pool_at(const bpool *p, uint32_t addr)
{
	return p->blocks[addr >> POOL_BLOCK_BITS] + (addr & (POOL_BLOCK - 1));
}

static uint32_t
pool_alloc(st_segbuild *b, uint32_t size)
{
	bpool *p = &b->pool;
	if (p->nblocks == 0 || p->used + size > POOL_BLOCK) {
		if (p->nblocks == POOL_MAX_BLOCKS)
			abort(); /* 4 GB in one buffer: the RAM budget forces refreshes long before */
		if (p->nblocks == p->cap) {
			size_t cap = p->cap;
			p->blocks = grow(b, p->blocks, &cap, p->nblocks + 1, sizeof(*p->blocks));
			p->cap = (uint32_t)cap;
		}
		p->blocks[p->nblocks++] = cm_malloc(CM_MEM_STORAGE, POOL_BLOCK);
		b->ram += POOL_BLOCK;
		p->used = 0;
	}
	uint32_t addr = ((p->nblocks - 1) << POOL_BLOCK_BITS) | p->used;
	p->used += size;
	return addr;
}

static void
stream_init(st_segbuild *b, bstream *s)
{
	s->start = s->upto = pool_alloc(b, slice_sizes[0]);
	s->end = s->start + slice_sizes[0] - 4;
	s->level = 0;
}

static inline void
stream_byte(st_segbuild *b, bstream *s, uint8_t v)
{
	if (s->upto == s->end) {
		if (s->level + 1 < (int)SLICE_LEVELS)
			s->level++;
		uint32_t size = slice_sizes[s->level];
		uint32_t next = pool_alloc(b, size);
		uint8_t *fw = pool_at(&b->pool, s->end);
		memcpy(fw, &next, 4);
		s->upto = next;
		s->end = next + size - 4;
	}
	*pool_at(&b->pool, s->upto) = v;
	s->upto++;
}

static inline void
stream_varint(st_segbuild *b, bstream *s, uint32_t v)
{
	if (s->end - s->upto >= 5) { /* common case: room in the slice */
		uint8_t *p = pool_at(&b->pool, s->upto), *q = p;
		while (v >= 0x80) {
			*q++ = (uint8_t)(v | 0x80);
			v >>= 7;
		}
		*q++ = (uint8_t)v;
		s->upto += (uint32_t)(q - p);
		return;
	}
	while (v >= 0x80) {
		stream_byte(b, s, (uint8_t)(v | 0x80));
		v >>= 7;
	}
	stream_byte(b, s, (uint8_t)v);
}

typedef struct sreader {
	const bpool *pool;
	uint32_t at, end, stop;
	uint8_t level;
} sreader;

static void
sreader_init(sreader *r, const bpool *pool, const bstream *s)
{
	r->pool = pool;
	r->at = s->start;
	r->end = s->start + slice_sizes[0] - 4;
	r->stop = s->upto;
	r->level = 0;
}

static inline uint32_t
sreader_varint(sreader *r)
{
	uint32_t v = 0;
	for (unsigned shift = 0;; shift += 7) {
		if (r->at == r->end) {
			uint32_t next;
			memcpy(&next, pool_at(r->pool, r->end), 4);
			if (r->level + 1 < (int)SLICE_LEVELS)
				r->level++;
			r->at = next;
			r->end = next + slice_sizes[r->level] - 4;
		}
		uint8_t c = *pool_at(r->pool, r->at);
		r->at++;
		v |= (uint32_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return v;
	}
}

/* ---- fields ---- */

st_segbuild *
st_segbuild_create(void)
{
	st_segbuild *b = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*b));
	cm_buf_init(&b->stored, CM_MEM_STORAGE);
	b->ram = sizeof(*b);
	return b;
}

static void
field_free(bfield *f)
{
	cm_free(CM_MEM_STORAGE, f->name);
	cm_free(CM_MEM_STORAGE, f->terms);
	cm_free(CM_MEM_STORAGE, f->table);
	cm_buf_free(&f->arena);
	cm_free(CM_MEM_STORAGE, f->touched);
	cm_free(CM_MEM_STORAGE, f->present);
	cm_free(CM_MEM_STORAGE, f->normv);
	cm_free(CM_MEM_STORAGE, f->starts);
	cm_free(CM_MEM_STORAGE, f->vals);
}

void
st_segbuild_destroy(st_segbuild *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->nfields; i++)
		field_free(&b->fields[i]);
	cm_free(CM_MEM_STORAGE, b->fields);
	cm_free(CM_MEM_STORAGE, b->fmap);
	cm_free(CM_MEM_STORAGE, b->touched_fields);
	for (uint32_t i = 0; i < b->pool.nblocks; i++)
		cm_free(CM_MEM_STORAGE, b->pool.blocks[i]);
	cm_free(CM_MEM_STORAGE, b->pool.blocks);
	cm_free(CM_MEM_STORAGE, b->seq);
	cm_free(CM_MEM_STORAGE, b->pterm);
	cm_free(CM_MEM_STORAGE, b->version);
	cm_free(CM_MEM_STORAGE, b->stored_off);
	cm_free(CM_MEM_STORAGE, b->failed);
	cm_free(CM_MEM_STORAGE, b->nested);
	cm_buf_free(&b->stored);
	cm_free(CM_MEM_STORAGE, b);
}

uint32_t
st_segbuild_docs(const st_segbuild *b)
{
	return b->ndocs;
}

size_t
st_segbuild_ram(const st_segbuild *b)
{
	return b->ram + b->stored.cap;
}

static void
field_setup(bfield *f, const char *name, st_field_type type, st_analyzer_kind an, bool index,
            bool doc_values)
{
	memset(f, 0, sizeof(*f));
	f->name = cm_strdup(CM_MEM_STORAGE, name);
	f->type = type;
	f->analyzer = an;
	f->cur_doc = NONE;
	cm_buf_init(&f->arena, CM_MEM_STORAGE);
	switch (type) {
	case ST_FT_TEXT:
		f->postings = f->positions = f->norms = index;
		break;
	case ST_FT_KEYWORD:
	case ST_FT_IP:
		/* The term dictionary doubles as the ordinal dictionary, so a
		 * keyword always has postings; the column follows doc_values. */
		f->postings = true;
		f->column = doc_values || !index;
		break;
	case ST_FT_BOOLEAN:
		f->postings = index;
		f->column = index || doc_values;
		break;
	default:
		f->column = index || doc_values;
		break;
	}
	f->none = !f->postings && !f->column;
}

static bfield *
field_get(st_segbuild *b, const st_field_def *def)
{
	const char *name = def->path;
	size_t len = strlen(name);
	uint32_t h = (uint32_t)XXH3_64bits(name, len);
	if (b->fmap_cap) {
		for (size_t i = h & (b->fmap_cap - 1);; i = (i + 1) & (b->fmap_cap - 1)) {
			uint32_t v = b->fmap[i];
			if (!v)
				break;
			if (strcmp(b->fields[v - 1].name, name) == 0)
				return &b->fields[v - 1];
		}
	}
	if (b->nfields >= MAX_FIELDS - 3)
		return NULL;
	b->fields = grow(b, b->fields, &b->fields_cap, b->nfields + 1, sizeof(*b->fields));
	bfield *f = &b->fields[b->nfields++];
	field_setup(f, name, def->type, def->analyzer, def->index, def->doc_values);
	b->ram += len + 1;
	if (b->nfields * 2 > b->fmap_cap) {
		size_t cap = b->fmap_cap ? b->fmap_cap * 2 : 64;
		cm_free(CM_MEM_STORAGE, b->fmap);
		b->ram += (cap - b->fmap_cap) * sizeof(uint32_t);
		b->fmap = cm_calloc(CM_MEM_STORAGE, cap, sizeof(uint32_t));
		b->fmap_cap = cap;
		for (size_t k = 0; k < b->nfields; k++) {
			const char *n = b->fields[k].name;
			size_t i = (uint32_t)XXH3_64bits(n, strlen(n)) & (cap - 1);
			while (b->fmap[i])
				i = (i + 1) & (cap - 1);
			b->fmap[i] = (uint32_t)k + 1;
		}
	} else {
		size_t i = h & (b->fmap_cap - 1);
		while (b->fmap[i])
			i = (i + 1) & (b->fmap_cap - 1);
		b->fmap[i] = (uint32_t)b->nfields;
	}
	return f;
}

static uint32_t
term_get(st_segbuild *b, bfield *f, const char *term, size_t len)
{
	uint32_t h = (uint32_t)XXH3_64bits(term, len);
	if (f->table_cap) {
		uint32_t mask = f->table_cap - 1;
		for (uint32_t i = h & mask;; i = (i + 1) & mask) {
			uint32_t v = f->table[i];
			if (!v)
				break;
			bterm *t = &f->terms[v - 1];
			/* (the empty term may be there before the arena has a byte) */
			if (t->hash == h && t->text_len == len &&
			    (len == 0 || memcmp(f->arena.data + t->text_off, term, len) == 0))
				return v - 1;
		}
	}
	size_t cap = f->terms_cap;
	f->terms = grow(b, f->terms, &cap, f->nterms + 1, sizeof(*f->terms));
	f->terms_cap = (uint32_t)cap;
	uint32_t id = f->nterms++;
	bterm *t = &f->terms[id];
	size_t before = f->arena.cap;
	t->hash = h;
	t->text_off = (uint32_t)f->arena.len;
	t->text_len = (uint16_t)len;
	cm_buf_put(&f->arena, term, len);
	b->ram += f->arena.cap - before;
	t->flushed_doc = NONE;
	t->cur_freq = 0;
	t->last_pos = 0;
	stream_init(b, &t->docs);
	if (f->positions)
		stream_init(b, &t->pos);
	if ((size_t)f->nterms * 2 > f->table_cap) {
		uint32_t nc = f->table_cap ? f->table_cap * 2 : 256;
		cm_free(CM_MEM_STORAGE, f->table);
		b->ram += (size_t)(nc - f->table_cap) * sizeof(uint32_t);
		f->table = cm_calloc(CM_MEM_STORAGE, nc, sizeof(uint32_t));
		f->table_cap = nc;
		for (uint32_t k = 0; k < f->nterms; k++) {
			uint32_t i = f->terms[k].hash & (nc - 1);
			while (f->table[i])
				i = (i + 1) & (nc - 1);
			f->table[i] = k + 1;
		}
	} else {
		uint32_t i = h & (f->table_cap - 1);
		while (f->table[i])
			i = (i + 1) & (f->table_cap - 1);
		f->table[i] = id + 1;
	}
	return id;
}

static void
term_occurs(st_segbuild *b, bfield *f, uint32_t tid, uint32_t pos)
{
	bterm *t = &f->terms[tid];
	if (t->cur_freq == 0) {
		size_t cap = f->touched_cap;
		f->touched = grow(b, f->touched, &cap, f->ntouched + 1, sizeof(uint32_t));
		f->touched_cap = (uint32_t)cap;
		f->touched[f->ntouched++] = tid;
		t->last_pos = 0;
	}
	t->cur_freq++;
	if (f->positions) {
		stream_varint(b, &t->pos, pos - t->last_pos);
		t->last_pos = pos;
	}
}

static void
col_add(st_segbuild *b, bfield *f, uint32_t doc, int64_t v)
{
	if (f->col_ndocs == 0 && f->starts_cap == 0) {
		f->starts = grow(b, f->starts, &f->starts_cap, 1, sizeof(uint32_t));
		f->starts[0] = 0;
	}
	if (doc >= f->col_ndocs) {
		f->starts = grow(b, f->starts, &f->starts_cap, (size_t)doc + 2, sizeof(uint32_t));
		for (uint32_t d = f->col_ndocs + 1; d <= doc + 1; d++)
			f->starts[d] = (uint32_t)f->nvals;
		f->col_ndocs = doc + 1;
	}
	f->vals = grow(b, f->vals, &f->vals_cap, f->nvals + 1, sizeof(int64_t));
	f->vals[f->nvals++] = v;
	f->starts[f->col_ndocs] = (uint32_t)f->nvals;
}

static void
mark_present(st_segbuild *b, bfield *f, uint32_t doc)
{
	f->present = grow(b, f->present, &f->present_cap, st_bit_words(doc + 1), sizeof(uint64_t));
	st_bit_set(f->present, doc);
}

typedef struct tokctx {
	st_segbuild *b;
	bfield *f;
} tokctx;

static int
on_token(void *arg, const st_token *tok)
{
	tokctx *c = arg;
	if (tok->len == 0 || tok->len > SEG_MAX_TERM)
		return 0; /* cannot be a key; Lucene would refuse the doc past 32 KB */
	uint32_t tid = term_get(c->b, c->f, tok->term, tok->len);
	term_occurs(c->b, c->f, tid, tok->position);
	c->f->cur_len++;
	return 0;
}

/* Writes the doc's (delta, freq) for every term it touched. */
static void
field_end_doc(st_segbuild *b, bfield *f, uint32_t doc)
{
	for (uint32_t i = 0; i < f->ntouched; i++) {
		bterm *t = &f->terms[f->touched[i]];
		stream_varint(b, &t->docs, doc - t->flushed_doc - 1);
		stream_varint(b, &t->docs, t->cur_freq);
		t->flushed_doc = doc;
		t->cur_freq = 0;
	}
	if (f->ntouched)
		mark_present(b, f, doc);
	f->ntouched = 0;
	if (f->norms && f->cur_len) {
		f->normv = grow(b, f->normv, &f->norms_cap, (size_t)doc + 1, 1);
		f->normv[doc] = st_norm_encode(f->cur_len);
	}
	if (f->cur_values > 1)
		f->multi = true;
}

static cm_err add_one(st_segbuild *b, const st_doc *doc, uint64_t seq_no, uint64_t primary_term,
                      int64_t version, uint32_t *docno, cm_error *err);

/* A doc's hidden nested docs go right before it (Lucene's block join);
 * the write drops them with their parent. */
cm_err
st_segbuild_add(st_segbuild *b, const st_doc *doc, uint64_t seq_no, uint64_t primary_term,
                int64_t version, uint32_t *docno, cm_error *err)
{
	cm_err first = CM_OK;
	for (size_t i = 0; i < doc->nnested; i++) {
		uint32_t nd;
		cm_err e = add_one(b, &doc->nested[i], seq_no, primary_term, version, &nd, err);
		if (e && !first)
			first = e;
		if (b->ndocs <= nd)
			continue;
		size_t words = st_bit_words((uint32_t)b->docs_cap);
		if (b->nested == NULL || b->nested_words < words) {
			b->nested = cm_realloc(CM_MEM_STORAGE, b->nested, words * 8);
			memset(b->nested + b->nested_words, 0, (words - b->nested_words) * 8);
			b->nested_words = words;
		}
		st_bit_set(b->nested, nd);
		b->nnested++;
	}
	cm_err e = add_one(b, doc, seq_no, primary_term, version, docno, err);
	if (first && !e && !st_bit_get(b->failed, *docno)) {
		/* a nested object failed: the whole document is out */
		st_bit_set(b->failed, *docno);
		b->nfailed++;
	}
	return e ? e : first;
}

static cm_err
add_one(st_segbuild *b, const st_doc *doc, uint64_t seq_no, uint64_t primary_term, int64_t version,
        uint32_t *docno, cm_error *err)
{
	if (b->ndocs >= ST_SEGBUILD_MAX_DOCS)
		return cm_error_set(err, CM_ELIMIT, "segment is full");
	/* Below this point every doc takes its number, a refused one as
	 * failed (left out like a deleted one): the shard hands out doc
	 * numbers before the docs are added (st_segbuild_add's contract). */
	cm_err e = CM_OK;
	const char *id = doc->id;
	size_t id_len = doc->id_len;
	if (doc->id_len > SEG_MAX_ID) {
		e = cm_error_set(err, CM_EINVAL, "id is too long, must be no longer than %d bytes",
		                 SEG_MAX_ID);
		id_len = 0;
	}
	for (size_t i = 0; i < doc->nvalues && !e; i++) {
		const st_value *v = &doc->values[i];
		if (v->field->type == ST_FT_KEYWORD && v->n > SEG_MAX_TERM)
			e = cm_error_set(err, CM_EINVAL,
			                 "Document contains at least one immense term in field=\"%s\" "
			                 "(longer than %d bytes)",
			                 v->field->path, SEG_MAX_TERM);
	}
	uint32_t d = b->ndocs;
	b->ntouched_fields = 0;
	for (size_t i = 0; i < doc->nvalues && !e; i++) {
		const st_value *v = &doc->values[i];
		if (v->field->type == ST_FT_OBJECT)
			continue;
		bfield *f = field_get(b, v->field);
		if (!f) {
			e = cm_error_set(err, CM_ELIMIT, "too many fields in one segment");
			break;
		}
		if (f->cur_doc != d) {
			f->cur_doc = d;
			f->cur_len = f->next_pos = f->cur_values = 0;
			b->touched_fields = grow(b, b->touched_fields, &b->touched_fields_cap,
			                         b->ntouched_fields + 1, sizeof(uint32_t));
			b->touched_fields[b->ntouched_fields++] = (uint32_t)(f - b->fields);
		}
		f->cur_values++;
		switch (f->type) {
		case ST_FT_TEXT: {
			if (f->none)
				break;
			tokctx c = {b, f};
			uint32_t first = f->cur_values > 1 ? f->next_pos + POS_GAP : 0;
			e = st_analyze_with(v->field->custom_analyzer, f->analyzer, v->s, v->n, first,
			                    on_token, &c, &f->next_pos);
			if (e)
				cm_error_set(err, e, "analysis failed for field [%s]", f->name);
			break;
		}
		case ST_FT_KEYWORD:
		case ST_FT_IP: {
			uint32_t tid;
			if (v->field->normalizer != NULL) {
				/* normalized keywords only: the plain path stays copy-free */
				cm_buf nb;
				cm_buf_init(&nb, CM_MEM_STORAGE);
				e = st_normalize(v->field->normalizer, v->s, v->n, &nb);
				if (!e && nb.len > SEG_MAX_TERM)
					e = CM_EINVAL;
				if (e) {
					cm_error_set(err, e, "normalizer failed for field [%s]", f->name);
					cm_buf_free(&nb);
					break;
				}
				tid = term_get(b, f, nb.len ? (const char *)nb.data : "", nb.len);
				cm_buf_free(&nb);
			} else {
				tid = term_get(b, f, v->s, v->n);
			}
			term_occurs(b, f, tid, 0);
			if (f->column)
				col_add(b, f, d, tid);
			break;
		}
		case ST_FT_BOOLEAN:
			if (f->none)
				break;
			if (f->postings) {
				const char *s = v->i ? "true" : "false";
				term_occurs(b, f, term_get(b, f, s, strlen(s)), 0);
			}
			col_add(b, f, d, v->i ? 1 : 0);
			mark_present(b, f, d);
			break;
		case ST_FT_DOUBLE:
		case ST_FT_FLOAT:
		case ST_FT_HALF_FLOAT:
			if (f->none)
				break;
			col_add(b, f, d, st_double_to_sortable(v->d));
			mark_present(b, f, d);
			break;
		default:
			if (f->none)
				break;
			col_add(b, f, d, v->i);
			mark_present(b, f, d);
			break;
		}
		if (e)
			break;
	}
	/* Even on error every touched term is closed for this doc number so
	 * the streams stay consistent; the doc is then recorded as failed and
	 * st_segbuild_write leaves it out like a deleted one. */
	for (size_t i = 0; i < b->ntouched_fields; i++) {
		bfield *f = &b->fields[b->touched_fields[i]];
		field_end_doc(b, f, d);
		f->cur_doc = NONE;
	}
	if ((size_t)d + 1 > b->docs_cap) {
		size_t nc = b->docs_cap ? b->docs_cap * 2 : 1024;
		b->seq = cm_realloc(CM_MEM_STORAGE, b->seq, nc * sizeof(uint64_t));
		b->pterm = cm_realloc(CM_MEM_STORAGE, b->pterm, nc * sizeof(uint64_t));
		b->version = cm_realloc(CM_MEM_STORAGE, b->version, nc * sizeof(int64_t));
		b->stored_off = cm_realloc(CM_MEM_STORAGE, b->stored_off, (nc + 1) * sizeof(uint64_t));
		b->failed = cm_realloc(CM_MEM_STORAGE, b->failed, st_bit_words((uint32_t)nc) * 8);
		memset(b->failed + st_bit_words((uint32_t)b->docs_cap), 0,
		       (st_bit_words((uint32_t)nc) - st_bit_words((uint32_t)b->docs_cap)) * 8);
		b->ram += (nc - b->docs_cap) * 33;
		b->docs_cap = nc;
	}
	if (e) {
		st_bit_set(b->failed, d);
		b->nfailed++;
	}
	b->seq[d] = seq_no;
	b->pterm[d] = primary_term;
	b->version[d] = version;
	if (d == 0)
		b->stored_off[0] = 0;
	cm_buf_put_str(&b->stored, id, id_len);
	if (e)
		cm_buf_put_str(&b->stored, "", 0);
	else if (doc->stored)
		cm_buf_put_str(&b->stored, doc->stored, doc->stored_len);
	else
		cm_buf_put_str(&b->stored, doc->source, doc->source_len);
	b->stored_off[d + 1] = b->stored.len;
	b->ndocs = d + 1;
	*docno = d;
	return e;
}

/* ---- writing ---- */

typedef struct wctx {
	st_segbuild *b;
	uint32_t *docmap; /* old -> new, NONE when left out */
	uint32_t *inv;    /* new -> old */
	uint32_t max_doc;
	segw *w;
	const void *cdict;
} wctx;

enum { TASK_FIELD, TASK_INTERNAL, TASK_STORED, TASK_IDS };

typedef struct wtask {
	wctx *c;
	int kind;
	size_t field; /* builder field, or 0..2 for internal columns */
	uint16_t fid;
	uint32_t lo, hi; /* stored: old doc range */
	size_t out;      /* stored: piece index */
} wtask;

typedef struct scratch {
	uint32_t *docs, *freqs, *pos;
	size_t cap, pos_cap;
	uint32_t *counts;
	int64_t *vals;
	size_t vals_cap;
	cm_buf tmp;
} scratch;

static void
scratch_free(scratch *s)
{
	cm_free(CM_MEM_STORAGE, s->docs);
	cm_free(CM_MEM_STORAGE, s->freqs);
	cm_free(CM_MEM_STORAGE, s->pos);
	cm_free(CM_MEM_STORAGE, s->counts);
	cm_free(CM_MEM_STORAGE, s->vals);
	cm_buf_free(&s->tmp);
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int
cmp_terms(const void *a, const void *b, void *arg)
{
	const bfield *f = arg;
	const bterm *x = &f->terms[*(const uint32_t *)a], *y = &f->terms[*(const uint32_t *)b];
	size_t n = x->text_len < y->text_len ? x->text_len : y->text_len;
	int c = memcmp(f->arena.data + x->text_off, f->arena.data + y->text_off, n);
	if (c)
		return c;
	return (x->text_len > y->text_len) - (x->text_len < y->text_len);
}

/* Column blocks from per-old-doc values; ordmap remaps keyword term ids. */
static void
write_column(wctx *c, const uint32_t *starts, uint32_t col_ndocs, const int64_t *vals,
             const uint32_t *ordmap, uint16_t fid, cm_buf *out, st_field_info *info, scratch *s)
{
	uint32_t nblocks = (c->max_doc + ST_COL_BLOCK - 1) / ST_COL_BLOCK;
	if (!s->counts)
		s->counts = cm_malloc(CM_MEM_STORAGE, ST_COL_BLOCK * sizeof(uint32_t));
	bool first = true;
	for (uint32_t blk = 0; blk < nblocks; blk++) {
		uint32_t lo = blk * ST_COL_BLOCK;
		uint32_t n = c->max_doc - lo < ST_COL_BLOCK ? c->max_doc - lo : ST_COL_BLOCK;
		size_t nv = 0;
		for (uint32_t i = 0; i < n; i++) {
			uint32_t od = c->inv[lo + i];
			uint32_t a = 0, z = 0;
			if (od < col_ndocs) {
				a = starts ? starts[od] : od;
				z = starts ? starts[od + 1] : od + 1;
			}
			if (nv + (z - a) > s->vals_cap) {
				s->vals_cap = (nv + (z - a)) * 2 + 1024;
				s->vals = cm_realloc(CM_MEM_STORAGE, s->vals, s->vals_cap * sizeof(int64_t));
			}
			/* (z > a here is not guaranteed: never offset a NULL array) */
			int64_t *dv = s->vals ? s->vals + nv : NULL;
			for (uint32_t k = a; k < z; k++)
				dv[k - a] = ordmap ? (int64_t)ordmap[vals[k]] : vals[k];
			uint32_t cnt = z - a;
			if (cnt > 1) {
				qsort(dv, cnt, sizeof(int64_t), cmp_i64);
				if (ordmap) { /* sorted-set semantics: one ordinal once */
					uint32_t w = 1;
					for (uint32_t k = 1; k < cnt; k++)
						if (dv[k] != dv[w - 1])
							dv[w++] = dv[k];
					cnt = w;
				}
				if (cnt > 1)
					info->flags |= ST_FI_MULTI;
			}
			for (uint32_t k = 0; k < cnt; k++) {
				if (first || dv[k] < info->col_min)
					info->col_min = dv[k];
				if (first || dv[k] > info->col_max)
					info->col_max = dv[k];
				first = false;
			}
			if (cnt && !(info->flags & ST_FI_POSTINGS))
				info->doc_count++;
			s->counts[i] = cnt;
			nv += cnt;
		}
		colenc_block(out, fid, blk, s->counts, n, s->vals, (uint32_t)nv, &s->tmp);
	}
}

static void
write_postings(wctx *c, bfield *f, uint16_t fid, segw_part *part, st_field_info *info,
               const uint8_t *norms, uint32_t *ordmap, scratch *s)
{
	st_segbuild *b = c->b;
	uint32_t *order = cm_malloc(CM_MEM_STORAGE, (f->nterms + 1) * sizeof(uint32_t));
	for (uint32_t i = 0; i < f->nterms; i++)
		order[i] = i;
	qsort_r(order, f->nterms, sizeof(uint32_t), cmp_terms, f);
	postenc pe;
	postenc_init(&pe);
	bool keyword = st_field_type_is_ordinal(f->type);
	uint64_t nout = 0;
	for (uint32_t oi = 0; oi < f->nterms; oi++) {
		uint32_t tid = order[oi];
		bterm *t = &f->terms[tid];
		sreader dr, pr = {0};
		sreader_init(&dr, &b->pool, &t->docs);
		if (f->positions)
			sreader_init(&pr, &b->pool, &t->pos);
		uint32_t prev = NONE, df = 0;
		size_t np = 0;
		while (dr.at != dr.stop) {
			uint32_t doc = prev + 1 + sreader_varint(&dr);
			uint32_t freq = sreader_varint(&dr);
			prev = doc;
			uint32_t nd = c->docmap[doc];
			if (df + 1 > s->cap) {
				s->cap = s->cap ? s->cap * 2 : 1024;
				s->docs = cm_realloc(CM_MEM_STORAGE, s->docs, s->cap * sizeof(uint32_t));
				s->freqs = cm_realloc(CM_MEM_STORAGE, s->freqs, s->cap * sizeof(uint32_t));
			}
			if (f->positions) {
				if (np + freq > s->pos_cap) {
					s->pos_cap = (np + freq) * 2 + 1024;
					s->pos = cm_realloc(CM_MEM_STORAGE, s->pos,
					                    s->pos_cap * sizeof(uint32_t));
				}
				uint32_t p = 0;
				for (uint32_t k = 0; k < freq; k++) {
					p += sreader_varint(&pr);
					s->pos[np + k] = p;
				}
				if (nd != NONE)
					np += freq;
			}
			if (nd == NONE)
				continue;
			s->docs[df] = nd;
			s->freqs[df] = freq;
			df++;
		}
		if (df == 0) {
			ordmap[tid] = NONE;
			continue;
		}
		ordmap[tid] = (uint32_t)nout;
		/* An empty term in an empty arena: no base to offset. */
		const uint8_t *text =
		    f->arena.data ? f->arena.data + t->text_off : (const uint8_t *)"";
		if (keyword && nout % KDICT_STEP == 0)
			kdict_put(&part->sec[SEC_KDICT], fid, (uint32_t)(nout / KDICT_STEP), text,
			          t->text_len);
		postenc_term(&pe, &part->sec[SEC_TERM], fid, text, t->text_len, keyword, nout, s->docs,
		             s->freqs, df, f->positions ? s->pos : NULL, norms);
		nout++;
		info->sum_doc_freq += df;
		for (uint32_t i = 0; i < df; i++)
			info->sum_total_term_freq += s->freqs[i];
	}
	info->num_terms = nout;
	postenc_free(&pe);
	cm_free(CM_MEM_STORAGE, order);
}

static void
write_field(wtask *t)
{
	wctx *c = t->c;
	bfield *f = &c->b->fields[t->field];
	segw_part *part = &c->w->parts[t->fid];
	st_field_info *info = &c->w->fields[t->fid];
	scratch s = {0};
	cm_buf_init(&s.tmp, CM_MEM_STORAGE);
	uint8_t *norms = NULL;
	if (f->norms) {
		norms = cm_calloc(CM_MEM_STORAGE, c->max_doc + 1, 1);
		for (uint32_t nd = 0; nd < c->max_doc; nd++) {
			uint32_t od = c->inv[nd];
			norms[nd] = od < f->norms_cap ? f->normv[od] : 0;
		}
		norms_put(&part->sec[SEC_NORMS], t->fid, norms, c->max_doc);
	}
	uint32_t *ordmap = NULL;
	if (f->postings) {
		ordmap = cm_malloc(CM_MEM_STORAGE, ((size_t)f->nterms + 1) * sizeof(uint32_t));
		write_postings(c, f, t->fid, part, info, norms, ordmap, &s);
	}
	if (f->postings || !f->column) {
		for (uint32_t nd = 0; nd < c->max_doc; nd++) {
			uint32_t od = c->inv[nd];
			if (od / 64 < f->present_cap && st_bit_get(f->present, od))
				info->doc_count++;
		}
	}
	if (f->column)
		write_column(c, f->starts, f->col_ndocs, f->vals,
		             st_field_type_is_ordinal(f->type) ? ordmap : NULL, t->fid, &part->sec[SEC_COL],
		             info, &s);
	if (f->multi)
		info->flags |= ST_FI_MULTI;
	cm_free(CM_MEM_STORAGE, ordmap);
	cm_free(CM_MEM_STORAGE, norms);
	scratch_free(&s);
}

static void
write_internal(wtask *t)
{
	wctx *c = t->c;
	st_segbuild *b = c->b;
	int64_t *vals = cm_malloc(CM_MEM_STORAGE, ((size_t)b->ndocs + 1) * sizeof(int64_t));
	for (uint32_t d = 0; d < b->ndocs; d++)
		vals[d] = t->field == 0   ? (int64_t)b->pterm[d]
		          : t->field == 1 ? (int64_t)b->seq[d]
		                          : b->version[d];
	scratch s = {0};
	cm_buf_init(&s.tmp, CM_MEM_STORAGE);
	st_field_info *info = &c->w->fields[t->fid];
	write_column(c, NULL, b->ndocs, vals, NULL, t->fid, &c->w->parts[t->fid].sec[SEC_COL], info,
	             &s);
	scratch_free(&s);
	cm_free(CM_MEM_STORAGE, vals);
}

static void
write_stored(wtask *t)
{
	wctx *c = t->c;
	st_segbuild *b = c->b;
	uint32_t first = NONE;
	for (uint32_t d = t->lo; d < t->hi && first == NONE; d++)
		first = c->docmap[d];
	if (first == NONE)
		return;
	storedenc se;
	storedenc_init(&se, &c->w->stored[t->out], c->cdict, STORED_LEVEL_FLUSH, first);
	for (uint32_t d = t->lo; d < t->hi; d++) {
		if (c->docmap[d] == NONE)
			continue;
		cm_rd r;
		cm_rd_init(&r, b->stored.data + b->stored_off[d], b->stored_off[d + 1] - b->stored_off[d]);
		const char *id, *src;
		size_t il, sl;
		cm_rd_str(&r, &id, &il);
		cm_rd_str(&r, &src, &sl);
		storedenc_add(&se, id, il, src, sl);
	}
	storedenc_finish(&se);
}

typedef struct idref {
	const uint8_t *id;
	uint32_t len, doc;
} idref;

static int
cmp_ids(const void *a, const void *b)
{
	const idref *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->id, y->id, n);
	if (c)
		return c;
	if (x->len != y->len)
		return (x->len > y->len) - (x->len < y->len);
	return (x->doc > y->doc) - (x->doc < y->doc);
}

static void
write_ids(wtask *t)
{
	wctx *c = t->c;
	st_segbuild *b = c->b;
	idref *ids = cm_malloc(CM_MEM_STORAGE, ((size_t)c->max_doc + 1) * sizeof(idref));
	for (uint32_t nd = 0; nd < c->max_doc; nd++) {
		uint32_t od = c->inv[nd];
		cm_rd r;
		cm_rd_init(&r, b->stored.data + b->stored_off[od],
		           b->stored_off[od + 1] - b->stored_off[od]);
		const char *id;
		size_t il;
		cm_rd_str(&r, &id, &il);
		ids[nd] = (idref){(const uint8_t *)id, (uint32_t)il, nd};
	}
	qsort(ids, c->max_doc, sizeof(idref), cmp_ids);
	for (uint32_t i = 0; i < c->max_doc; i++) {
		if (ids[i].len == 0)
			continue; /* hidden nested docs have no id */
		/* A repeated id keeps its latest doc (keys must be unique). */
		if (i + 1 < c->max_doc && ids[i].len == ids[i + 1].len &&
		    memcmp(ids[i].id, ids[i + 1].id, ids[i].len) == 0)
			continue;
		ids_put(&c->w->ids, ids[i].id, ids[i].len, ids[i].doc);
	}
	cm_free(CM_MEM_STORAGE, ids);
}

static void
run_task(void *arg)
{
	wtask *t = arg;
	switch (t->kind) {
	case TASK_FIELD:
		write_field(t);
		break;
	case TASK_INTERNAL:
		write_internal(t);
		break;
	case TASK_STORED:
		write_stored(t);
		break;
	case TASK_IDS:
		write_ids(t);
		break;
	}
}

typedef struct fname {
	const char *name;
	int kind;
	size_t idx;
} fname;

static int
cmp_fname(const void *a, const void *b)
{
	return strcmp(((const fname *)a)->name, ((const fname *)b)->name);
}

static const char *const internal_names[3] = {ST_FIELD_PRIMARY_TERM, ST_FIELD_SEQ_NO,
                                              ST_FIELD_VERSION};

/* Samples evenly spaced live docs (their raw stored entries) and trains
 * the segment's dictionary when documents are small. */
static void
train_dict(wctx *c)
{
	st_segbuild *b = c->b;
	if (c->max_doc == 0)
		return;
	uint64_t total = 0;
	for (uint32_t nd = 0; nd < c->max_doc; nd++) {
		uint32_t od = c->inv[nd];
		total += b->stored_off[od + 1] - b->stored_off[od];
	}
	/* Training costs ~0.04 s: worth it for big flushes only; small refresh
	 * segments are merged (and get a dictionary) soon. */
	if (total / c->max_doc >= 4096 || total < (1u << 20))
		return;
	size_t budget = total / 4 < 512 * 1024 ? total / 4 : 512 * 1024;
	uint32_t step = total > budget ? (uint32_t)(total / budget) + 1 : 1;
	cm_buf samples;
	cm_buf_init(&samples, CM_MEM_STORAGE);
	size_t n = 0, cap = 0;
	size_t *sizes = NULL;
	for (uint32_t nd = 0; nd < c->max_doc; nd += step) {
		uint32_t od = c->inv[nd];
		size_t len = b->stored_off[od + 1] - b->stored_off[od];
		cm_buf_put(&samples, b->stored.data + b->stored_off[od], len);
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			sizes = cm_realloc(CM_MEM_STORAGE, sizes, cap * sizeof(size_t));
		}
		sizes[n++] = len;
	}
	stored_train_dict(&c->w->dict, samples.data, sizes, n);
	cm_free(CM_MEM_STORAGE, sizes);
	cm_buf_free(&samples);
}

void
st_segbuild_kept(const st_segbuild *b, const uint64_t *deleted, uint64_t *kept)
{
	memset(kept, 0, st_bit_words(b->ndocs) * 8);
	/* a nested doc goes with its parent, the next doc that is not nested */
	bool pgone = false;
	for (uint32_t d = b->ndocs; d-- > 0;) {
		bool nest = b->nnested && d < b->nested_words * 64 && st_bit_get(b->nested, d);
		bool g =
		    (deleted && st_bit_get(deleted, d)) || (b->nfailed && st_bit_get(b->failed, d));
		if (!nest)
			pgone = g;
		else
			g = g || pgone;
		if (!g)
			st_bit_set(kept, d);
	}
}

cm_err
st_segbuild_write(st_segbuild *b, const uint64_t *deleted, const char *path, uint64_t gen,
                  cm_pool *pool, cm_error *err)
{
	wctx c = {.b = b};
	segw w;
	segw_init(&w);
	c.w = &w;
	c.docmap = cm_malloc(CM_MEM_STORAGE, ((size_t)b->ndocs + 1) * sizeof(uint32_t));
	c.inv = cm_malloc(CM_MEM_STORAGE, ((size_t)b->ndocs + 1) * sizeof(uint32_t));
	uint64_t *kept = cm_malloc(CM_MEM_STORAGE, (st_bit_words(b->ndocs) + 1) * 8);
	st_segbuild_kept(b, deleted, kept);
	for (uint32_t d = 0; d < b->ndocs; d++) {
		bool gone = !st_bit_get(kept, d);
		c.docmap[d] = gone ? NONE : c.max_doc;
		if (!gone)
			c.inv[c.max_doc++] = d;
	}
	cm_free(CM_MEM_STORAGE, kept);
	w.max_doc = w.stored_docs = c.max_doc;
	w.gen = gen;

	/* Field ids in name order, the internal columns among them. */
	size_t nf = b->nfields + 3;
	fname *names = cm_malloc(CM_MEM_STORAGE, nf * sizeof(fname));
	for (size_t i = 0; i < b->nfields; i++)
		names[i] = (fname){b->fields[i].name, TASK_FIELD, i};
	for (size_t i = 0; i < 3; i++)
		names[b->nfields + i] = (fname){internal_names[i], TASK_INTERNAL, i};
	qsort(names, nf, sizeof(fname), cmp_fname);
	w.nfields = w.nparts = nf;
	w.fields = cm_calloc(CM_MEM_STORAGE, nf, sizeof(st_field_info));
	w.parts = cm_calloc(CM_MEM_STORAGE, nf, sizeof(segw_part));

	size_t nstored = 1;
	if (pool && b->stored.len > (1u << 20))
		nstored = (size_t)cm_pool_threads(pool) * 2;
	if (nstored > b->ndocs / 64 + 1)
		nstored = b->ndocs / 64 + 1;
	w.nstored = nstored;
	w.stored = cm_calloc(CM_MEM_STORAGE, nstored, sizeof(cm_buf));
	size_t ntasks = nf + nstored + 1;
	wtask *tasks = cm_calloc(CM_MEM_STORAGE, ntasks, sizeof(wtask));
	size_t k = 0;
	for (size_t i = 0; i < nf; i++) {
		st_field_info *fi = &w.fields[i];
		segw_part_init(&w.parts[i]);
		fi->name = cm_strdup(CM_MEM_STORAGE, names[i].name);
		fi->id = (uint16_t)i;
		if (names[i].kind == TASK_FIELD) {
			bfield *f = &b->fields[names[i].idx];
			fi->type = f->type;
			fi->analyzer = f->analyzer;
			fi->flags = (f->postings ? ST_FI_POSTINGS : 0) | (f->positions ? ST_FI_POSITIONS : 0) |
			            (f->norms ? ST_FI_NORMS : 0) | (f->column ? ST_FI_COLUMN : 0);
		} else {
			fi->type = ST_FT_LONG;
			fi->analyzer = ST_AN_KEYWORD;
			fi->flags = ST_FI_COLUMN;
		}
		tasks[k++] = (wtask){.c = &c, .kind = names[i].kind, .field = names[i].idx,
		                     .fid = (uint16_t)i};
	}
	for (size_t i = 0; i < nstored; i++) {
		cm_buf_init(&w.stored[i], CM_MEM_STORAGE);
		tasks[k++] = (wtask){.c = &c, .kind = TASK_STORED,
		                     .lo = (uint32_t)((uint64_t)b->ndocs * i / nstored),
		                     .hi = (uint32_t)((uint64_t)b->ndocs * (i + 1) / nstored), .out = i};
	}
	tasks[k++] = (wtask){.c = &c, .kind = TASK_IDS};
	train_dict(&c);
	void *cdict = stored_cdict_create(&w.dict, STORED_LEVEL_FLUSH);
	c.cdict = cdict;
	cm_pool_run_all(pool, run_task, tasks, sizeof(wtask), k);
	stored_cdict_free(cdict);

	cm_err e = segw_write_file(&w, path, err);
	cm_free(CM_MEM_STORAGE, tasks);
	cm_free(CM_MEM_STORAGE, names);
	cm_free(CM_MEM_STORAGE, c.docmap);
	cm_free(CM_MEM_STORAGE, c.inv);
	segw_free(&w);
	return e;
}
