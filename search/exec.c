/* Per-segment iterators. Each has a doc-at-a-time path (next / advance /
 * score), used to leapfrog conjunctions and verify candidates, and a bulk
 * path (fill) that writes a window of matches into a bitset with scores,
 * used by the executor and by composites whose children are dense.
 * Postings are decoded a block at a time; term fills walk the decoded
 * block arrays directly and skip whole blocks by their impacts when the
 * caller says which score is needed to be competitive. */
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"

#define DENSE_DIV 16 /* a child with cost >= max_doc/16 is filled, not probed */

static inline int
ctz64(uint64_t w)
{
	return __builtin_ctzll(w);
}

static inline size_t
win_words(uint32_t lo, uint32_t hi)
{
	return ((size_t)(hi - lo) + 63) / 64;
}

/* ---- generic pieces ---- */

void
sr_it_fill_generic(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores,
                   float min_score)
{
	(void)min_score;
	uint32_t d = it->doc;
	if (d < lo)
		d = it->ops->advance(it, lo);
	while (d < hi) {
		sr_win_put(bits, scores, d - lo, scores && it->scoring ? it->ops->score(it) : 0.0f);
		d = it->ops->next(it);
	}
}

float
sr_it_upper_inf(sr_it *it, uint32_t lo, uint32_t hi)
{
	(void)lo;
	(void)hi;
	return it->scoring ? INFINITY : 0.0f;
}

static void
it_free_plain(sr_it *it)
{
	cm_free(CM_MEM_SEARCH, it);
}

/* Adds window matches (bits, optional scores) into out with add semantics. */
static void
win_merge(const uint64_t *src, const float *ssc, size_t nw, uint64_t *bits, float *scores,
          float constant)
{
	for (size_t w = 0; w < nw; w++) {
		uint64_t m = src[w];
		if (!m)
			continue;
		if (!scores) {
			bits[w] |= m;
			continue;
		}
		while (m) {
			uint32_t j = (uint32_t)(w * 64 + ctz64(m));
			m &= m - 1;
			sr_win_put(bits, scores, j, ssc ? ssc[j] : constant);
		}
	}
}

/* ---- none ---- */

static uint32_t
none_next(sr_it *it)
{
	return it->doc = ST_NO_MORE_DOCS;
}
static uint32_t
none_advance(sr_it *it, uint32_t t)
{
	(void)t;
	return it->doc = ST_NO_MORE_DOCS;
}
static float
zero_score(sr_it *it)
{
	(void)it;
	return 0.0f;
}
static void
none_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
}
static float
zero_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	return 0.0f;
}
static const sr_it_ops none_ops = {none_next, none_advance, zero_score, none_fill, zero_upper,
                                   it_free_plain};

static sr_it *
none_it(void)
{
	sr_it *it = cm_calloc(CM_MEM_SEARCH, 1, sizeof *it);
	it->ops = &none_ops;
	it->doc = ST_NO_MORE_DOCS;
	return it;
}

static bool
is_none(const sr_it *it)
{
	return it->ops == &none_ops;
}

/* ---- all docs ---- */

typedef struct all_it {
	sr_it base;
	uint32_t max_doc;
	float score;
} all_it;

static uint32_t
all_next(sr_it *it)
{
	all_it *a = (all_it *)it;
	if (it->doc == ST_NO_MORE_DOCS)
		return it->doc;
	return it->doc = it->doc + 1 < a->max_doc ? it->doc + 1 : ST_NO_MORE_DOCS;
}
static uint32_t
all_advance(sr_it *it, uint32_t t)
{
	all_it *a = (all_it *)it;
	if (t <= it->doc)
		return it->doc;
	return it->doc = t < a->max_doc ? t : ST_NO_MORE_DOCS;
}
static float
all_score(sr_it *it)
{
	return ((all_it *)it)->score;
}
static void
all_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
	all_it *a = (all_it *)it;
	uint32_t from = it->doc > lo ? it->doc : lo;
	if (hi > a->max_doc)
		hi = a->max_doc;
	if (scores && it->scoring && a->score < min) {
		all_advance(it, hi);
		return;
	}
	for (uint32_t d = from; d < hi; d++)
		sr_win_put(bits, scores, d - lo, a->score);
	all_advance(it, hi);
}
static float
all_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	return ((all_it *)it)->score;
}
static const sr_it_ops all_ops = {all_next, all_advance, all_score, all_fill, all_upper,
                                  it_free_plain};

static sr_it *
all_new(uint32_t max_doc, float score, bool scoring)
{
	if (!max_doc)
		return none_it();
	all_it *a = cm_calloc(CM_MEM_SEARCH, 1, sizeof *a);
	a->base.ops = &all_ops;
	a->base.cost = max_doc;
	a->base.scoring = scoring;
	a->base.doc = 0;
	a->max_doc = max_doc;
	a->score = scoring ? score : 0.0f;
	return &a->base;
}

/* ---- term ---- */

typedef struct term_it {
	sr_it base;
	st_postings p;
	const uint8_t *norms;
	const float *cache;
	float weight;
	float *bmax; /* per-block max score, NaN until computed */
	float *gmax; /* the same per group of ST_IMPACT_GROUP blocks */
	bool rising; /* the root of a top-k: min only rises from fill to fill */
} term_it;

static inline float
term_doc_score(const term_it *t, uint32_t doc, uint32_t freq)
{
	return sr_bm25(t->weight, t->cache, (float)freq, t->norms ? t->norms[doc] : 1);
}

static uint32_t
term_next(sr_it *it)
{
	return it->doc = st_postings_next(&((term_it *)it)->p);
}
static uint32_t
term_advance(sr_it *it, uint32_t t)
{
	if (t <= it->doc)
		return it->doc;
	return it->doc = st_postings_advance(&((term_it *)it)->p, t);
}
static float
term_score(sr_it *it)
{
	term_it *t = (term_it *)it;
	return it->scoring ? term_doc_score(t, t->p.doc, t->p.freq) : 0.0f;
}

/* BM25's bound over impacts: the best score any doc they cover can get. */
static float
impacts_bound(const term_it *t, const st_impact *imp, unsigned n)
{
	float ub = 0.0f;
	for (unsigned k = 0; k < n; k++) {
		/* any freq: BM25 tends to the weight */
		float s = imp[k].freq == UINT32_MAX
		              ? t->weight
		              : sr_bm25(t->weight, t->cache, (float)(imp[k].freq ? imp[k].freq : 1),
		                        t->norms ? imp[k].norm : 1);
		if (s > ub)
			ub = s;
	}
	return ub;
}

static float *
nan_array(uint32_t n)
{
	float *a = cm_malloc(CM_MEM_SEARCH, (n ? n : 1) * sizeof(float));
	for (uint32_t i = 0; i < n; i++)
		a[i] = NAN;
	return a;
}

static float
term_block_max(term_it *t, uint32_t b)
{
	if (!t->bmax)
		t->bmax = nan_array(t->p.nblocks);
	if (b >= t->p.nblocks)
		return 0.0f;
	if (isnan(t->bmax[b])) {
		st_impact imp[ST_IMPACTS];
		unsigned n = st_postings_block_impacts(&t->p, b, imp);
		t->bmax[b] = impacts_bound(t, imp, n);
	}
	return t->bmax[b];
}

/* The bound of group g's blocks: the segment's second level, else the
 * best of its blocks'. */
static float
term_group_max(term_it *t, uint32_t g)
{
	uint32_t ng = (t->p.nblocks + ST_IMPACT_GROUP - 1) / ST_IMPACT_GROUP;
	if (!t->gmax)
		t->gmax = nan_array(ng);
	if (g >= ng)
		return 0.0f;
	if (isnan(t->gmax[g])) {
		st_impact imp[ST_IMPACTS];
		unsigned n = st_postings_group_impacts(&t->p, g, imp);
		float ub = 0.0f;
		if (n)
			ub = impacts_bound(t, imp, n);
		else
			for (uint32_t b = g * ST_IMPACT_GROUP; b < (g + 1) * ST_IMPACT_GROUP; b++) {
				float m = term_block_max(t, b);
				ub = m > ub ? m : ub;
			}
		t->gmax[g] = ub;
	}
	return t->gmax[g];
}

/* The first block from b whose bound reaches min, or whose last doc is at
 * or past limit (nblocks if none): the blocks before it are passed over
 * undecoded, a group of them at a time where the group's bound allows.
 * A fill stops at its window's end (limit = hi: a composite's next window
 * may ask for less); the root of a top-k, whose bar only rises, does not. */
static uint32_t
term_next_competitive(term_it *t, uint32_t b, float min, uint32_t limit)
{
	const st_postings *p = &t->p;
	bool entering = true; /* a group's bound is looked at once, on entering it */
	while (b < p->nblocks) {
		if (entering || b % ST_IMPACT_GROUP == 0) {
			entering = false;
			uint32_t gend = (b / ST_IMPACT_GROUP + 1) * ST_IMPACT_GROUP;
			if (gend > p->nblocks)
				gend = p->nblocks;
			if (term_group_max(t, b / ST_IMPACT_GROUP) < min &&
			    st_postings_block_last(p, gend - 1) < limit) {
				b = gend;
				continue;
			}
		}
		if (term_block_max(t, b) >= min || st_postings_block_last(p, b) >= limit)
			return b;
		b++;
	}
	return b;
}

static void
term_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
	term_it *t = (term_it *)it;
	st_postings *p = &t->p;
	bool sc = scores && it->scoring;
	bool skip = sc && min > -INFINITY;
	uint32_t d = it->doc;
	if (d < lo)
		d = st_postings_advance(p, lo);
	while (d < hi) {
		if (skip && term_block_max(t, p->block) < min) {
			/* no doc of this block can enter the top-k: on to the next
			 * block that may, those between left undecoded */
			d = st_postings_seek_block(
			    p, term_next_competitive(t, p->block + 1, min, t->rising ? ST_NO_MORE_DOCS : hi));
			continue;
		}
		uint32_t k = p->i, n = p->n;
		const uint32_t *docs = p->docs;
		if (skip) {
			/* a doc below the bar cannot enter the top-k: left out */
			for (; k < n && docs[k] < hi; k++) {
				float s = term_doc_score(t, docs[k], p->freqs[k]);
				if (s >= min)
					sr_win_put(bits, scores, docs[k] - lo, s);
			}
		} else if (sc) {
			for (; k < n && docs[k] < hi; k++)
				sr_win_put(bits, scores, docs[k] - lo, term_doc_score(t, docs[k], p->freqs[k]));
		} else if (scores) {
			for (; k < n && docs[k] < hi; k++)
				sr_win_put(bits, scores, docs[k] - lo, 0.0f);
		} else {
			for (; k < n && docs[k] < hi; k++) {
				uint32_t j = docs[k] - lo;
				bits[j >> 6] |= (uint64_t)1 << (j & 63);
			}
		}
		if (k < n) {
			d = st_postings_advance(p, hi);
			break;
		}
		if (!st_postings_next_block(p)) {
			d = ST_NO_MORE_DOCS;
			break;
		}
		d = p->doc;
	}
	it->doc = p->doc;
}

/* The root of a top-k once its count is settled: from a block that
 * cannot reach min straight to the next one that may (min only rises, so
 * the blocks passed need no later look). */
static void
term_skip_to_competitive(term_it *t, float min)
{
	st_postings *p = &t->p;
	t->rising = true;
	if (!t->base.scoring || t->base.doc == ST_NO_MORE_DOCS || term_block_max(t, p->block) >= min)
		return;
	t->base.doc = st_postings_seek_block(p, term_next_competitive(t, p->block + 1, min,
	                                                              ST_NO_MORE_DOCS));
}

static float
term_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	term_it *t = (term_it *)it;
	if (!it->scoring)
		return 0.0f;
	float ub = 0.0f;
	const st_postings *p = &t->p;
	for (uint32_t b = st_postings_find_block(p, lo); b < p->nblocks;) {
		/* a whole group inside the range at once (a segment's bound
		 * read every block's impacts) */
		uint32_t gend = b + ST_IMPACT_GROUP < p->nblocks ? b + ST_IMPACT_GROUP : p->nblocks;
		bool group = b % ST_IMPACT_GROUP == 0 && st_postings_block_last(p, gend - 1) < hi;
		float m = group ? term_group_max(t, b / ST_IMPACT_GROUP) : term_block_max(t, b);
		if (m > ub)
			ub = m;
		b = group ? gend : b + 1;
		if (st_postings_block_last(p, b - 1) >= hi - 1)
			break;
	}
	return ub;
}

static void
term_free(sr_it *it)
{
	cm_free(CM_MEM_SEARCH, ((term_it *)it)->bmax);
	cm_free(CM_MEM_SEARCH, ((term_it *)it)->gmax);
	cm_free(CM_MEM_SEARCH, it);
}

static const sr_it_ops term_ops = {term_next, term_advance, term_score, term_fill, term_upper,
                                   term_free};

static sr_it *
term_new(sr_exec *x, size_t si, const sr_plan *pl)
{
	const sr_seg_ctx *c = &x->segs[si];
	const st_field_info *fi = st_segment_field(c->seg, pl->fs->name);
	if (!fi || !(fi->flags & ST_FI_POSTINGS))
		return none_it();
	term_it *t = cm_calloc(CM_MEM_SEARCH, 1, sizeof *t);
	cm_err rc = st_postings_open(c->txn, fi, pl->term.p, pl->term.n, &t->p);
	if (rc) {
		cm_free(CM_MEM_SEARCH, t);
		if (rc != CM_ENOTFOUND)
			cm_error_set(x->err, rc, "cannot read postings of [%s]", pl->fs->name);
		return none_it();
	}
	t->base.ops = &term_ops;
	t->base.scoring = pl->scoring;
	t->base.cost = t->p.doc_freq;
	t->norms = (fi->flags & ST_FI_NORMS) ? st_norms(c->txn, fi) : NULL;
	/* a filter never scores: the field's BM25 cache (256 norms decoded
	 * and divided) was 6% of a selective aggregation's cost */
	t->cache = pl->scoring ? sr_fstat_cache(pl->fs) : NULL;
	t->weight = pl->weight;
	t->base.doc = st_postings_next(&t->p);
	return &t->base;
}

/* ---- materialized bitset ---- */

typedef struct bits_it {
	sr_it base;
	uint64_t *bits;
	uint32_t max_doc;
	size_t nwords;
	float score;
} bits_it;

static uint32_t
bits_from(bits_it *b, uint32_t from)
{
	if (from >= b->max_doc)
		return ST_NO_MORE_DOCS;
	size_t w = from >> 6;
	uint64_t m = b->bits[w] & (~(uint64_t)0 << (from & 63));
	while (!m) {
		if (++w >= b->nwords)
			return ST_NO_MORE_DOCS;
		m = b->bits[w];
	}
	uint32_t d = (uint32_t)(w * 64 + ctz64(m));
	return d < b->max_doc ? d : ST_NO_MORE_DOCS;
}

static uint32_t
bits_next(sr_it *it)
{
	if (it->doc == ST_NO_MORE_DOCS)
		return it->doc;
	return it->doc = bits_from((bits_it *)it, it->doc + 1);
}
static uint32_t
bits_advance(sr_it *it, uint32_t t)
{
	if (t <= it->doc)
		return it->doc;
	return it->doc = bits_from((bits_it *)it, t);
}
static float
bits_score(sr_it *it)
{
	return ((bits_it *)it)->score;
}
static void
bits_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *out, float *scores, float min)
{
	bits_it *b = (bits_it *)it;
	if (hi > b->max_doc)
		hi = b->max_doc;
	if (it->doc >= hi || lo >= hi) {
		bits_advance(it, hi);
		return;
	}
	if (scores && it->scoring && b->score < min) {
		bits_advance(it, hi);
		return;
	}
	if ((lo & 63) == 0) {
		size_t w0 = lo >> 6, nw = win_words(lo, hi);
		uint32_t first = it->doc > lo ? it->doc : lo;
		for (size_t w = 0; w < nw; w++) {
			uint64_t m = b->bits[w0 + w];
			uint32_t base = (uint32_t)(w * 64);
			if (lo + base + 64 > hi)
				m &= ((uint64_t)1 << ((hi - lo - base) & 63)) - 1;
			if (lo + base < first) {
				uint32_t sh = first - lo - base;
				m = sh >= 64 ? 0 : m & (~(uint64_t)0 << sh);
			}
			if (!m)
				continue;
			if (!scores)
				out[w] |= m;
			else
				win_merge(&m, NULL, 1, out + w, scores + base, it->scoring ? b->score : 0.0f);
		}
		bits_advance(it, hi);
		return;
	}
	sr_it_fill_generic(it, lo, hi, out, scores, min);
}
static float
bits_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	return ((bits_it *)it)->score;
}
static void
bits_free(sr_it *it)
{
	cm_free(CM_MEM_SEARCH, ((bits_it *)it)->bits);
	cm_free(CM_MEM_SEARCH, it);
}
static const sr_it_ops bits_ops = {bits_next, bits_advance, bits_score, bits_fill, bits_upper,
                                   bits_free};

/* Takes ownership of bits. */
static sr_it *
bits_new(uint64_t *bits, uint32_t max_doc, float score, bool scoring)
{
	size_t nw = st_bit_words(max_doc);
	uint64_t cnt = 0;
	for (size_t i = 0; i < nw; i++)
		cnt += (uint64_t)__builtin_popcountll(bits[i]);
	if (!cnt) {
		cm_free(CM_MEM_SEARCH, bits);
		return none_it();
	}
	bits_it *b = cm_calloc(CM_MEM_SEARCH, 1, sizeof *b);
	b->base.ops = &bits_ops;
	b->base.scoring = scoring;
	b->base.cost = cnt;
	b->bits = bits;
	b->max_doc = max_doc;
	b->nwords = nw;
	b->score = scoring ? score : 0.0f;
	b->base.doc = bits_from(b, 0);
	return &b->base;
}

/* ---- materializing multi-term leaves ---- */

static void
postings_or(st_postings *p, uint64_t *bits)
{
	uint32_t n;
	while ((n = st_postings_next_block(p)) > 0)
		for (uint32_t k = 0; k < n; k++)
			st_bit_set(bits, p->docs[k]);
}

static bool
term_matches(const sr_plan *pl, const uint8_t *t, size_t n)
{
	if (pl->dfa)
		return sr_dfa_match(pl->dfa, t, n);
	return true;
}

static int
bcmp_bytes(const uint8_t *a, size_t an, const sr_bytes *b)
{
	size_t n = an < b->n ? an : b->n;
	int r = memcmp(a, b->p, n);
	return r ? r : (an > b->n) - (an < b->n);
}

/* Walks a range of the terms dictionary ORing matching terms' postings. */
static cm_err
terms_walk(sr_exec *x, size_t si, const sr_plan *pl, const st_field_info *fi, uint64_t *bits)
{
	st_terms *it;
	cm_err rc = st_terms_open(x->segs[si].txn, fi, &it);
	if (rc)
		return cm_error_set(x->err, rc, "cannot read terms of [%s]", fi->name);
	st_postings *p = cm_malloc(CM_MEM_SEARCH, sizeof *p);
	const uint8_t *seek = NULL, *prefix = NULL;
	size_t seek_len = 0, plen = 0;
	const sr_bytes *hi = NULL;
	if (pl->kind == P_TERMRANGE) {
		if (pl->terms[0].p) {
			seek = pl->terms[0].p;
			seek_len = pl->terms[0].n;
		}
		if (pl->terms[1].p)
			hi = &pl->terms[1];
	} else if (pl->dfa) {
		prefix = (const uint8_t *)sr_dfa_prefix(pl->dfa, &plen);
		seek = prefix;
		seek_len = plen;
	} else {
		prefix = seek = pl->terms[0].p;
		plen = seek_len = pl->terms[0].n;
	}
	size_t seen = 0;
	sr_dfa_walk *walk = NULL;
	uint8_t target[SR_WALK_SEEK_MAX];
	size_t target_len = 0;
	const char *sfx = NULL;
	size_t sfx_len = 0;
	if (pl->kind != P_TERMRANGE && pl->dfa) {
		walk = cm_malloc(CM_MEM_SEARCH, sizeof *walk);
		sr_dfa_walk_init(walk, pl->dfa);
		sfx = sr_dfa_suffix(pl->dfa, &sfx_len);
	}
	bool ok = st_terms_seek(it, seek_len ? seek : NULL, seek_len);
	for (; ok; ok = st_terms_next(it)) {
		size_t tl;
		const uint8_t *t = st_terms_term(it, &tl);
		if ((++seen & 255) == 0 && sr_deadline_passed(x))
			break;
		if (walk) {
			/* "pre*...suf": a term with the prefix that does not end in
			 * the suffix cannot match, and none with the prefix makes
			 * the automaton seek */
			if (sfx && tl >= plen && memcmp(t, prefix, plen) == 0 &&
			    (tl < plen + sfx_len || memcmp(t + tl - sfx_len, sfx, sfx_len) != 0))
				continue;
			/* The automaton against the dictionary: a term that cannot
			 * match names the least key worth reading next; the next
			 * term is read first, and the cursor seeks only when that
			 * one is still below it. */
			sr_walk_verdict v;
			while ((v = sr_dfa_walk_term(walk, t, tl, target, &target_len)) == SR_WALK_SEEK) {
				if (!(ok = st_terms_next(it)))
					break;
				t = st_terms_term(it, &tl);
				if (bcmp_bytes(t, tl, &(sr_bytes){target, target_len}) < 0) {
					if (!(ok = st_terms_seek(it, target, target_len)))
						break;
					t = st_terms_term(it, &tl);
				}
			}
			if (!ok || v == SR_WALK_END)
				break;
			if (v == SR_WALK_NEXT)
				continue;
			goto take;
		}
		if (pl->kind == P_TERMRANGE) {
			if (seek && !pl->lo_incl && bcmp_bytes(t, tl, &pl->terms[0]) == 0)
				continue;
			if (hi) {
				int c = bcmp_bytes(t, tl, hi);
				if (c > 0 || (c == 0 && !pl->hi_incl))
					break;
			}
		} else {
			if (tl < plen || memcmp(t, prefix, plen))
				break;
			if (!term_matches(pl, t, tl))
				continue;
		}
	take:
		rc = st_terms_postings(it, p);
		if (rc) {
			cm_error_set(x->err, rc, "cannot read postings of [%s]", fi->name);
			break;
		}
		postings_or(p, bits);
	}
	cm_free(CM_MEM_SEARCH, walk);
	cm_free(CM_MEM_SEARCH, p);
	st_terms_close(it);
	return rc;
}

/* A range field's terms (st_range_encode: sorted by lower bound) in the
 * plan's relation to its bounds, their postings ORed. Every relation
 * needs lo <= rq[1] (intersects, within) or lo <= rq[0] (contains), so
 * the walk stops at the first term past that; within starts at rq[0]. */
static cm_err
range_walk(sr_exec *x, size_t si, const sr_plan *pl, const st_field_info *fi, uint64_t *bits)
{
	st_field_type t = pl->fs->range_type;
	st_terms *it;
	cm_err rc = st_terms_open(x->segs[si].txn, fi, &it);
	if (rc)
		return cm_error_set(x->err, rc, "cannot read terms of [%s]", fi->name);
	st_postings *p = cm_malloc(CM_MEM_SEARCH, sizeof *p);
	const st_range_bound *stop = pl->rel == ST_REL_CONTAINS ? &pl->rq[0] : &pl->rq[1];
	uint8_t seek[ST_RANGE_TERM_MAX];
	size_t seek_len = 0;
	if (pl->rel == ST_REL_WITHIN) {
		st_range_bound least;
		st_range_min(t, &least);
		seek_len = st_range_encode(t, &pl->rq[0], &least, seek);
	}
	size_t seen = 0;
	for (bool ok = st_terms_seek(it, seek_len ? seek : NULL, seek_len); ok;
	     ok = st_terms_next(it)) {
		size_t tl;
		const uint8_t *term = st_terms_term(it, &tl);
		if ((++seen & 255) == 0 && sr_deadline_passed(x))
			break;
		st_range_bound lo, hi;
		if (!st_range_decode(t, term, tl, &lo, &hi))
			continue;
		if (st_range_cmp(t, &lo, stop) > 0)
			break;
		if (!st_range_matches(t, pl->rel, &lo, &hi, &pl->rq[0], &pl->rq[1]))
			continue;
		rc = st_terms_postings(it, p);
		if (rc) {
			cm_error_set(x->err, rc, "cannot read postings of [%s]", fi->name);
			break;
		}
		postings_or(p, bits);
	}
	cm_free(CM_MEM_SEARCH, p);
	st_terms_close(it);
	return rc;
}

static cm_err
exists_field(sr_exec *x, size_t si, const st_field_info *fi, uint32_t max_doc, uint64_t *bits)
{
	st_seg_txn *txn = x->segs[si].txn;
	if (fi->flags & ST_FI_NORMS) {
		const uint8_t *norms = st_norms(txn, fi);
		if (norms) {
			for (uint32_t d = 0; d < max_doc; d++)
				if (norms[d])
					st_bit_set(bits, d);
			return CM_OK;
		}
	}
	if (fi->flags & ST_FI_COLUMN) {
		st_colblock cb = {0};
		cm_err rc = CM_OK;
		for (uint32_t b = 0; (uint64_t)b * ST_COL_BLOCK < max_doc; b++) {
			int64_t mn, mx;
			uint32_t nv;
			rc = st_col_zone(txn, fi, b, &mn, &mx, &nv);
			if (rc)
				break;
			if (!nv)
				continue;
			rc = st_col_load(txn, fi, b, &cb);
			if (rc)
				break;
			for (uint32_t i = 0; i < cb.ndocs; i++)
				if (cb.starts[i + 1] > cb.starts[i])
					st_bit_set(bits, cb.first_doc + i);
		}
		st_colblock_free(&cb);
		if (rc)
			cm_error_set(x->err, rc, "cannot read column [%s]", fi->name);
		return rc;
	}
	if (fi->flags & ST_FI_POSTINGS) {
		sr_plan all = {.kind = P_MULTI};
		sr_bytes empty = {(uint8_t *)"", 0};
		all.terms = &empty;
		all.nterms = 1;
		return terms_walk(x, si, &all, fi, bits);
	}
	return CM_OK;
}

/* Whether a geo_point value is in the plan's box or circle. A box whose
 * left is east of its right crosses the dateline. */
static bool
geo_in(const sr_plan *pl, int64_t v)
{
	double lat, lon;
	st_geo_decode(v, &lat, &lon);
	if (pl->geo_circle)
		return st_geo_distance(pl->geo[0], pl->geo[1], lat, lon) <= pl->geo[2];
	if (lat > pl->geo[0] || lat < pl->geo[2])
		return false;
	return pl->geo[1] <= pl->geo[3] ? lon >= pl->geo[1] && lon <= pl->geo[3]
	                                : lon >= pl->geo[1] || lon <= pl->geo[3];
}

/* The latitudes a plan can match, to skip column blocks by their zone:
 * values order by latitude first (st_geo_encode). */
static void
geo_lat_range(const sr_plan *pl, double *lo, double *hi)
{
	if (!pl->geo_circle) {
		*lo = pl->geo[2];
		*hi = pl->geo[0];
		return;
	}
	double d = pl->geo[2] / 111194.9266 + 1e-6; /* meters per degree of latitude */
	*lo = pl->geo[0] - d;
	*hi = pl->geo[0] + d;
}

/* Docs with a value of the geo_point column inside the plan's shape. */
static cm_err
geo_scan(sr_exec *x, size_t si, const sr_plan *pl, const st_field_info *fi, uint32_t max_doc,
         uint64_t *bits)
{
	st_seg_txn *txn = x->segs[si].txn;
	st_colblock cb = {0};
	cm_err rc = CM_OK;
	double lo, hi;
	geo_lat_range(pl, &lo, &hi);
	int64_t zlo = st_geo_encode(lo < -90 ? -90 : lo, -180);
	int64_t zhi = st_geo_encode(hi > 90 ? 90 : hi, 180);
	for (uint32_t b = 0; (uint64_t)b * ST_COL_BLOCK < max_doc; b++) {
		int64_t mn, mx;
		uint32_t nv;
		if ((b & 15) == 15 && sr_deadline_passed(x))
			break;
		rc = st_col_zone(txn, fi, b, &mn, &mx, &nv);
		if (rc)
			break;
		if (!nv || mx < zlo || mn > zhi)
			continue;
		rc = st_col_load(txn, fi, b, &cb);
		if (rc)
			break;
		for (uint32_t i = 0; i < cb.ndocs; i++)
			for (uint32_t k = cb.starts[i]; k < cb.starts[i + 1]; k++)
				if (geo_in(pl, cb.vals[k])) {
					st_bit_set(bits, cb.first_doc + i);
					break;
				}
	}
	st_colblock_free(&cb);
	if (rc)
		cm_error_set(x->err, rc, "cannot read column [%s]", fi->name);
	return rc;
}

static sr_it *
materialize(sr_exec *x, size_t si, const sr_plan *pl)
{
	const sr_seg_ctx *c = &x->segs[si];
	uint32_t max_doc = st_segment_max_doc(c->seg);
	if (!max_doc)
		return none_it();
	uint64_t *bits = cm_calloc(CM_MEM_SEARCH, st_bit_words(max_doc), sizeof(uint64_t));
	cm_err rc = CM_OK;
	switch (pl->kind) {
	case P_IDS:
		for (size_t i = 0; i < pl->nterms; i++) {
			uint32_t d;
			if (st_id_lookup(c->txn, (const char *)pl->terms[i].p, pl->terms[i].n, &d) == CM_OK &&
			    d < max_doc)
				st_bit_set(bits, d);
		}
		break;
	case P_EXISTS:
		for (size_t i = 0; i < pl->nfields && !rc; i++) {
			const st_field_info *fi = st_segment_field(c->seg, pl->fields[i]->name);
			if (fi)
				rc = exists_field(x, si, fi, max_doc, bits);
		}
		break;
	case P_TERMSET: {
		const st_field_info *fi = st_segment_field(c->seg, pl->fs->name);
		if (!fi || !(fi->flags & ST_FI_POSTINGS))
			break;
		st_postings *p = cm_malloc(CM_MEM_SEARCH, sizeof *p);
		for (size_t i = 0; i < pl->nterms; i++) {
			if ((i & 63) == 63 && sr_deadline_passed(x))
				break;
			if (st_postings_open(c->txn, fi, pl->terms[i].p, pl->terms[i].n, p) == CM_OK)
				postings_or(p, bits);
		}
		cm_free(CM_MEM_SEARCH, p);
		break;
	}
	case P_TERMRANGE:
	case P_MULTI: {
		const st_field_info *fi = st_segment_field(c->seg, pl->fs->name);
		if (fi && (fi->flags & ST_FI_POSTINGS))
			rc = terms_walk(x, si, pl, fi, bits);
		break;
	}
	case P_RANGEREL: {
		const st_field_info *fi = st_segment_field(c->seg, pl->fs->name);
		if (fi && (fi->flags & ST_FI_POSTINGS))
			rc = range_walk(x, si, pl, fi, bits);
		break;
	}
	case P_GEO: {
		const st_field_info *fi = st_segment_field(c->seg, pl->fs->name);
		if (fi && (fi->flags & ST_FI_COLUMN))
			rc = geo_scan(x, si, pl, fi, max_doc, bits);
		break;
	}
	default:
		break;
	}
	(void)rc;
	return bits_new(bits, max_doc, pl->boost, pl->scoring);
}

/* ---- numeric / date / boolean column ---- */

typedef struct col_it {
	sr_it base;
	sr_exec *x;
	const sr_plan *pl;
	st_seg_txn *txn;
	const st_field_info *fi;
	st_colblock cb;
	uint32_t max_doc, nblocks, cur; /* cur: block whose match bits are in bb */
	uint64_t bb[ST_COL_BLOCK / 64];
	float score;
} col_it;

static inline bool
col_match(const sr_plan *pl, const int64_t *v, uint32_t n)
{
	if (!pl->set) {
		for (uint32_t k = 0; k < n; k++) {
			if (v[k] > pl->hi)
				return false; /* values are ascending */
			if (v[k] >= pl->lo)
				return true;
		}
		return false;
	}
	for (uint32_t k = 0; k < n; k++) {
		size_t a = 0, b = pl->nset;
		while (a < b) {
			size_t m = (a + b) / 2;
			if (pl->set[m] < v[k])
				a = m + 1;
			else
				b = m;
		}
		if (a < pl->nset && pl->set[a] == v[k])
			return true;
	}
	return false;
}

/* Computes block b's match bits; false when none match (zone map skip). */
static bool
col_load(col_it *c, uint32_t b)
{
	if (c->cur == b)
		return true;
	c->cur = b;
	memset(c->bb, 0, sizeof c->bb);
	int64_t mn, mx;
	uint32_t nv;
	const sr_plan *pl = c->pl;
	int64_t lo = pl->set ? pl->set[0] : pl->lo, hi = pl->set ? pl->set[pl->nset - 1] : pl->hi;
	cm_err rc = st_col_zone(c->txn, c->fi, b, &mn, &mx, &nv);
	if (rc || !nv || mx < lo || mn > hi) {
		if (rc)
			cm_error_set(c->x->err, rc, "cannot read column [%s]", c->fi->name);
		return false;
	}
	if (!pl->set) {
		/* one value per doc: compared packed, 64 to a word */
		int matched;
		rc = st_col_range_bits(c->txn, c->fi, b, lo, hi, &c->cb, c->bb, &matched);
		if (rc) {
			cm_error_set(c->x->err, rc, "cannot read column [%s]", c->fi->name);
			return false;
		}
		if (matched >= 0)
			return matched;
	}
	rc = st_col_load(c->txn, c->fi, b, &c->cb);
	if (rc) {
		cm_error_set(c->x->err, rc, "cannot read column [%s]", c->fi->name);
		return false;
	}
	const st_colblock *cb = &c->cb;
	bool all_in = !pl->set && mn >= lo && mx <= hi;
	bool any = false;
	for (uint32_t i = 0; i < cb->ndocs; i++) {
		uint32_t s = cb->starts[i], e = cb->starts[i + 1];
		if (e > s && (all_in || col_match(pl, cb->vals + s, e - s))) {
			c->bb[i >> 6] |= (uint64_t)1 << (i & 63);
			any = true;
		}
	}
	return any;
}

static uint32_t
col_from(col_it *c, uint32_t from)
{
	while (from < c->max_doc) {
		uint32_t b = from / ST_COL_BLOCK;
		if (col_load(c, b)) {
			uint32_t i = from - b * ST_COL_BLOCK;
			size_t w = i >> 6;
			uint64_t m = c->bb[w] & (~(uint64_t)0 << (i & 63));
			while (!m && ++w < ST_COL_BLOCK / 64)
				m = c->bb[w];
			if (m) {
				uint32_t d = b * ST_COL_BLOCK + (uint32_t)(w * 64 + ctz64(m));
				return d < c->max_doc ? d : ST_NO_MORE_DOCS;
			}
		}
		from = (b + 1) * ST_COL_BLOCK;
	}
	return ST_NO_MORE_DOCS;
}

static uint32_t
col_next(sr_it *it)
{
	if (it->doc == ST_NO_MORE_DOCS)
		return it->doc;
	return it->doc = col_from((col_it *)it, it->doc + 1);
}
static uint32_t
col_advance(sr_it *it, uint32_t t)
{
	if (t <= it->doc)
		return it->doc;
	return it->doc = col_from((col_it *)it, t);
}
static float
col_score(sr_it *it)
{
	return ((col_it *)it)->score;
}
static void
col_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
	col_it *c = (col_it *)it;
	if (hi > c->max_doc)
		hi = c->max_doc;
	if (it->doc >= hi) {
		return;
	}
	if (scores && it->scoring && c->score < min) {
		col_advance(it, hi);
		return;
	}
	if (lo % ST_COL_BLOCK == 0 && hi - lo <= ST_COL_BLOCK) {
		/* the window is one column block: its match bits from the
		 * current doc on (a conjunction's window starts below it) */
		uint32_t from = it->doc > lo ? it->doc - lo : 0;
		if (col_load(c, lo / ST_COL_BLOCK)) {
			size_t nw = win_words(lo, hi);
			for (size_t w = from >> 6; w < nw; w++) {
				uint64_t m = c->bb[w];
				if (w == from >> 6)
					m &= ~(uint64_t)0 << (from & 63);
				if (!m)
					continue;
				if (!scores)
					bits[w] |= m;
				else
					win_merge(&m, NULL, 1, bits + w, scores + w * 64, c->score);
			}
		}
		it->doc = col_from(c, hi);
		return;
	}
	sr_it_fill_generic(it, lo, hi, bits, scores, min);
}
static float
col_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	return ((col_it *)it)->score;
}
static void
col_free(sr_it *it)
{
	st_colblock_free(&((col_it *)it)->cb);
	cm_free(CM_MEM_SEARCH, it);
}
static const sr_it_ops col_ops = {col_next, col_advance, col_score, col_fill, col_upper, col_free};

static sr_it *
col_new(sr_exec *x, size_t si, const sr_plan *pl)
{
	const sr_seg_ctx *sc = &x->segs[si];
	const st_field_info *fi = st_segment_field(sc->seg, pl->fs->name);
	if (!fi || !(fi->flags & ST_FI_COLUMN) || !fi->doc_count)
		return none_it();
	int64_t lo = pl->set ? pl->set[0] : pl->lo, hi = pl->set ? pl->set[pl->nset - 1] : pl->hi;
	if (fi->col_max < lo || fi->col_min > hi)
		return none_it();
	col_it *c = cm_calloc(CM_MEM_SEARCH, 1, sizeof *c);
	c->base.ops = &col_ops;
	c->base.scoring = pl->scoring;
	c->x = x;
	c->pl = pl;
	c->txn = sc->txn;
	c->fi = fi;
	c->max_doc = st_segment_max_doc(sc->seg);
	c->base.cost = fi->doc_count;
	c->cur = UINT32_MAX;
	c->score = pl->scoring ? pl->boost : 0.0f;
	c->base.doc = col_from(c, 0);
	return &c->base;
}

/* ---- shared window temporaries for composites ---- */

typedef struct wtmp {
	uint64_t b[SR_WIN_WORDS];
	float s[SR_WIN];
} wtmp;

static wtmp *
wtmp_new(void)
{
	return cm_malloc(CM_MEM_SEARCH, sizeof(wtmp));
}

/* ---- conjunction ---- */

typedef struct conj_it {
	sr_it base;
	sr_it **k;
	size_t n;
	uint32_t max_doc;
	wtmp *a, *b;
} conj_it;

static uint32_t
conj_leap(conj_it *c, uint32_t target)
{
	sr_it **k = c->k;
	uint32_t d = k[0]->ops->advance(k[0], target);
	for (size_t i = 1; i < c->n && d != ST_NO_MORE_DOCS;) {
		uint32_t di = k[i]->ops->advance(k[i], d);
		if (di > d) {
			d = k[0]->ops->advance(k[0], di);
			i = 1;
		} else {
			i++;
		}
	}
	return c->base.doc = d;
}

static uint32_t
conj_next(sr_it *it)
{
	if (it->doc == ST_NO_MORE_DOCS)
		return it->doc;
	return conj_leap((conj_it *)it, it->doc + 1);
}
static uint32_t
conj_advance(sr_it *it, uint32_t t)
{
	if (t <= it->doc)
		return it->doc;
	return conj_leap((conj_it *)it, t);
}
static float
conj_score(sr_it *it)
{
	conj_it *c = (conj_it *)it;
	double s = 0;
	for (size_t i = 0; i < c->n; i++)
		if (c->k[i]->scoring)
			s += c->k[i]->ops->score(c->k[i]);
	return (float)s;
}
static float
conj_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	conj_it *c = (conj_it *)it;
	float u = 0;
	for (size_t i = 0; i < c->n; i++)
		if (c->k[i]->scoring)
			u += c->k[i]->ops->upper(c->k[i], lo, hi);
	return u;
}

static void
conj_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
	conj_it *c = (conj_it *)it;
	if (it->doc >= hi) {
		return;
	}
	size_t nw = win_words(lo, hi);
	bool sc = scores && it->scoring;
	if (!c->a) {
		c->a = wtmp_new();
		c->b = wtmp_new();
	}
	uint64_t *A = c->a->b;
	float *As = sc ? c->a->s : NULL;
	memset(A, 0, nw * sizeof(uint64_t));
	float lead_min = -INFINITY;
	if (sc && min > -INFINITY) {
		float rest = 0;
		for (size_t i = 1; i < c->n; i++)
			if (c->k[i]->scoring)
				rest += c->k[i]->ops->upper(c->k[i], lo, hi);
		lead_min = min - rest;
	}
	sr_it *lead = c->k[0];
	lead->ops->fill(lead, lo, hi, A, lead->scoring ? As : NULL, lead_min);
	if (As && !lead->scoring)
		for (size_t w = 0; w < nw; w++)
			for (uint64_t m = A[w]; m; m &= m - 1)
				As[w * 64 + ctz64(m)] = 0.0f;
	for (size_t i = 1; i < c->n; i++) {
		sr_it *k = c->k[i];
		uint64_t na = 0;
		for (size_t w = 0; w < nw; w++)
			na += (uint64_t)__builtin_popcountll(A[w]);
		if (!na)
			break;
		bool ks = As && k->scoring;
		/* Filled when dense, unless the docs left are few against the
		 * child's expected docs in the window: probing those (skip
		 * data, one block decoded per probe at most) beats decoding and
		 * scoring all of the child's. */
		uint64_t expect = k->cost * (uint64_t)(hi - lo) / (c->max_doc ? c->max_doc : 1);
		if (k->cost * DENSE_DIV >= c->max_doc && na * 4 >= expect) {
			uint64_t *B = c->b->b;
			memset(B, 0, nw * sizeof(uint64_t));
			/* as the lead's: a doc of k under min less the others'
			 * bounds cannot make the conjunction reach min */
			float kmin = -INFINITY;
			if (ks && min > -INFINITY) {
				float others = 0;
				for (size_t o = 0; o < c->n; o++)
					if (o != i && c->k[o]->scoring)
						others += c->k[o]->ops->upper(c->k[o], lo, hi);
				kmin = min - others;
			}
			k->ops->fill(k, lo, hi, B, ks ? c->b->s : NULL, kmin);
			for (size_t w = 0; w < nw; w++) {
				A[w] &= B[w];
				if (ks)
					for (uint64_t m = A[w]; m; m &= m - 1) {
						uint32_t j = (uint32_t)(w * 64 + ctz64(m));
						As[j] += c->b->s[j];
					}
			}
		} else {
			for (size_t w = 0; w < nw; w++) {
				for (uint64_t m = A[w]; m; m &= m - 1) {
					uint32_t j = (uint32_t)(w * 64 + ctz64(m));
					uint32_t d = lo + j;
					if (k->ops->advance(k, d) != d)
						A[w] &= ~((uint64_t)1 << (j & 63));
					else if (ks)
						As[j] += k->ops->score(k);
				}
			}
		}
	}
	win_merge(A, As, nw, bits, scores, 0.0f);
	conj_leap(c, hi);
}

static void
conj_free(sr_it *it)
{
	conj_it *c = (conj_it *)it;
	for (size_t i = 0; i < c->n; i++)
		sr_it_free(c->k[i]);
	cm_free(CM_MEM_SEARCH, c->k);
	cm_free(CM_MEM_SEARCH, c->a);
	cm_free(CM_MEM_SEARCH, c->b);
	cm_free(CM_MEM_SEARCH, c);
}
static const sr_it_ops conj_ops = {conj_next, conj_advance, conj_score, conj_fill, conj_upper,
                                   conj_free};

static int
cost_cmp(const void *a, const void *b)
{
	const sr_it *x = *(sr_it *const *)a, *y = *(sr_it *const *)b;
	return (x->cost > y->cost) - (x->cost < y->cost);
}

/* Takes ownership of k (array and iterators). */
static sr_it *
conj_new(sr_it **k, size_t n, uint32_t max_doc)
{
	if (n == 1) {
		sr_it *r = k[0];
		cm_free(CM_MEM_SEARCH, k);
		return r;
	}
	qsort(k, n, sizeof(sr_it *), cost_cmp);
	conj_it *c = cm_calloc(CM_MEM_SEARCH, 1, sizeof *c);
	c->base.ops = &conj_ops;
	c->k = k;
	c->n = n;
	c->max_doc = max_doc;
	c->base.cost = k[0]->cost;
	for (size_t i = 0; i < n; i++)
		c->base.scoring |= k[i]->scoring;
	c->base.doc = 0;
	conj_leap(c, 0);
	return &c->base;
}

/* ---- disjunction (sum, dis_max, minimum_should_match) ---- */

typedef struct disj_it {
	sr_it base;
	sr_it **k;
	size_t n;
	int msm;
	bool dismax;
	float tie;
	wtmp *t;
	wtmp *ms; /* MaxScore: the essential children's window */
	uint64_t *acc_bits;
	float *acc, *mx;
	uint16_t *cnt;
} disj_it;

static uint32_t
disj_settle(disj_it *d)
{
	for (;;) {
		uint32_t m = ST_NO_MORE_DOCS;
		for (size_t i = 0; i < d->n; i++)
			if (d->k[i]->doc < m)
				m = d->k[i]->doc;
		if (m == ST_NO_MORE_DOCS || d->msm <= 1)
			return d->base.doc = m;
		int c = 0;
		for (size_t i = 0; i < d->n; i++)
			c += d->k[i]->doc == m;
		if (c >= d->msm)
			return d->base.doc = m;
		for (size_t i = 0; i < d->n; i++)
			if (d->k[i]->doc == m)
				d->k[i]->ops->next(d->k[i]);
	}
}

static uint32_t
disj_next(sr_it *it)
{
	disj_it *d = (disj_it *)it;
	if (it->doc == ST_NO_MORE_DOCS)
		return it->doc;
	uint32_t cur = it->doc;
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i]->doc == cur)
			d->k[i]->ops->next(d->k[i]);
	return disj_settle(d);
}
static uint32_t
disj_advance(sr_it *it, uint32_t t)
{
	disj_it *d = (disj_it *)it;
	if (t <= it->doc)
		return it->doc;
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i]->doc < t)
			d->k[i]->ops->advance(d->k[i], t);
	return disj_settle(d);
}
static float
disj_score(sr_it *it)
{
	disj_it *d = (disj_it *)it;
	if (!it->scoring)
		return 0.0f;
	double sum = 0;
	float mx = -INFINITY;
	for (size_t i = 0; i < d->n; i++) {
		if (d->k[i]->doc != it->doc)
			continue;
		float s = d->k[i]->ops->score(d->k[i]);
		sum += s;
		if (s > mx)
			mx = s;
	}
	if (d->dismax)
		return mx + d->tie * ((float)sum - mx);
	return (float)sum;
}
static float
disj_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	disj_it *d = (disj_it *)it;
	if (!it->scoring)
		return 0.0f;
	float u = 0, mx = 0;
	for (size_t i = 0; i < d->n; i++) {
		float ki = d->k[i]->ops->upper(d->k[i], lo, hi);
		u += ki;
		if (ki > mx)
			mx = ki;
	}
	if (d->dismax && d->tie <= 1.0f)
		return mx + d->tie * (u - mx) + 1e-6f * u;
	return u;
}

/* MaxScore (Turtle and Flood; Lucene's MaxScoreBulkScorer): the children
 * with the smallest bounds, while their bounds add up below min, are
 * non-essential: a doc only they match cannot compete. The essential ones
 * fill the window, and the non-essential ones are probed (advance, skip
 * data) only at the docs that fill gives. Taken when the sums keep their
 * order (two children, or the non-essential ones last), so scores are
 * bit-identical to filling every child. Returns false when it does not
 * apply. */
static bool
disj_maxscore(disj_it *d, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min,
              const float *ups, float total)
{
	bool ne[16] = {false};
	size_t nne = 0;
	float nes = 0;
	for (;;) { /* the smallest bound not yet taken, while the sum stays below min */
		size_t best = d->n;
		for (size_t i = 0; i < d->n; i++)
			if (!ne[i] && (best == d->n || ups[i] < ups[best]))
				best = i;
		if (best == d->n || !(nes + ups[best] < min))
			break;
		nes += ups[best];
		ne[best] = true;
		nne++;
	}
	if (nne == 0 || nne == d->n)
		return false;
	/* probing pays when the essential docs are few against the others' */
	uint64_t ecost = 0, ncost = 0;
	for (size_t i = 0; i < d->n; i++)
		*(ne[i] ? &ncost : &ecost) += d->k[i]->cost;
	if (ecost * 4 > ncost)
		return false;
	if (d->n > 2)
		for (size_t i = 0; i + 1 < d->n; i++)
			if (ne[i] && !ne[i + 1])
				return false; /* the sum's order would change */
	size_t nw = win_words(lo, hi);
	if (!d->ms)
		d->ms = wtmp_new();
	uint64_t *B = d->ms->b;
	float *S = d->ms->s;
	memset(B, 0, nw * sizeof(uint64_t));
	for (size_t i = 0; i < d->n; i++)
		if (!ne[i])
			d->k[i]->ops->fill(d->k[i], lo, hi, B, S, min - (total - ups[i]));
	for (size_t w = 0; w < nw; w++)
		for (uint64_t m = B[w]; m; m &= m - 1) {
			uint32_t j = (uint32_t)(w * 64 + ctz64(m)), doc = lo + j;
			for (size_t i = 0; i < d->n; i++) {
				sr_it *k = d->k[i];
				if (ne[i] && k->doc <= doc && k->ops->advance(k, doc) == doc)
					S[j] += k->ops->score(k);
			}
		}
	for (size_t i = 0; i < d->n; i++)
		if (ne[i] && d->k[i]->doc < hi)
			d->k[i]->ops->advance(d->k[i], hi);
	win_merge(B, S, nw, bits, scores, 0.0f);
	disj_settle(d);
	return true;
}

static void
disj_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
	disj_it *d = (disj_it *)it;
	if (it->doc >= hi) {
		return;
	}
	bool sc = scores && it->scoring;
	if (!d->dismax && d->msm <= 1) {
		float *ups = NULL, total = 0;
		float kbuf[16];
		if (sc && min > -INFINITY && d->n <= 16) {
			ups = kbuf;
			for (size_t i = 0; i < d->n; i++) {
				ups[i] = d->k[i]->ops->upper(d->k[i], lo, hi);
				total += ups[i];
			}
		}
		if (ups && isfinite(total) && disj_maxscore(d, lo, hi, bits, scores, min, ups, total))
			return;
		for (size_t i = 0; i < d->n; i++) {
			float kmin = ups && isfinite(total) ? min - (total - ups[i]) : -INFINITY;
			d->k[i]->ops->fill(d->k[i], lo, hi, bits, scores, kmin);
		}
		disj_settle(d);
		return;
	}
	size_t nw = win_words(lo, hi);
	if (!d->t) {
		d->t = wtmp_new();
		d->acc_bits = cm_malloc(CM_MEM_SEARCH, SR_WIN_WORDS * sizeof(uint64_t));
		d->acc = cm_malloc(CM_MEM_SEARCH, SR_WIN * sizeof(float));
		d->mx = cm_malloc(CM_MEM_SEARCH, SR_WIN * sizeof(float));
		d->cnt = cm_malloc(CM_MEM_SEARCH, SR_WIN * sizeof(uint16_t));
	}
	memset(d->acc_bits, 0, nw * sizeof(uint64_t));
	for (size_t i = 0; i < d->n; i++) {
		sr_it *k = d->k[i];
		if (k->doc >= hi)
			continue;
		memset(d->t->b, 0, nw * sizeof(uint64_t));
		bool ks = sc && k->scoring;
		k->ops->fill(k, lo, hi, d->t->b, ks ? d->t->s : NULL, -INFINITY);
		for (size_t w = 0; w < nw; w++) {
			for (uint64_t m = d->t->b[w]; m; m &= m - 1) {
				uint32_t j = (uint32_t)(w * 64 + ctz64(m));
				float s = ks ? d->t->s[j] : 0.0f;
				if (d->acc_bits[w] & ((uint64_t)1 << (j & 63))) {
					d->acc[j] += s;
					if (s > d->mx[j])
						d->mx[j] = s;
					d->cnt[j]++;
				} else {
					d->acc_bits[w] |= (uint64_t)1 << (j & 63);
					d->acc[j] = s;
					d->mx[j] = s;
					d->cnt[j] = 1;
				}
			}
		}
	}
	int need = d->msm < 1 ? 1 : d->msm;
	for (size_t w = 0; w < nw; w++) {
		for (uint64_t m = d->acc_bits[w]; m; m &= m - 1) {
			uint32_t j = (uint32_t)(w * 64 + ctz64(m));
			if (d->cnt[j] < need)
				continue;
			float s = d->dismax ? d->mx[j] + d->tie * (d->acc[j] - d->mx[j]) : d->acc[j];
			sr_win_put(bits, scores, j, sc ? s : 0.0f);
		}
	}
	disj_settle(d);
}

static void
disj_free(sr_it *it)
{
	disj_it *d = (disj_it *)it;
	for (size_t i = 0; i < d->n; i++)
		sr_it_free(d->k[i]);
	cm_free(CM_MEM_SEARCH, d->k);
	cm_free(CM_MEM_SEARCH, d->t);
	cm_free(CM_MEM_SEARCH, d->ms);
	cm_free(CM_MEM_SEARCH, d->acc_bits);
	cm_free(CM_MEM_SEARCH, d->acc);
	cm_free(CM_MEM_SEARCH, d->mx);
	cm_free(CM_MEM_SEARCH, d->cnt);
	cm_free(CM_MEM_SEARCH, d);
}
static const sr_it_ops disj_ops = {disj_next, disj_advance, disj_score, disj_fill, disj_upper,
                                   disj_free};

/* Takes ownership of k. */
static sr_it *
disj_new(sr_it **k, size_t n, int msm, bool dismax, float tie)
{
	if ((size_t)(msm < 1 ? 1 : msm) > n) {
		for (size_t i = 0; i < n; i++)
			sr_it_free(k[i]);
		cm_free(CM_MEM_SEARCH, k);
		return none_it();
	}
	if (n == 1) {
		sr_it *r = k[0];
		cm_free(CM_MEM_SEARCH, k);
		return r;
	}
	disj_it *d = cm_calloc(CM_MEM_SEARCH, 1, sizeof *d);
	d->base.ops = &disj_ops;
	d->k = k;
	d->n = n;
	d->msm = msm;
	d->dismax = dismax;
	d->tie = tie;
	uint64_t cost = 0;
	for (size_t i = 0; i < n; i++) {
		cost += k[i]->cost;
		d->base.scoring |= k[i]->scoring;
	}
	d->base.cost = cost;
	d->base.doc = 0;
	disj_settle(d);
	return &d->base;
}

/* ---- required minus excluded ---- */

typedef struct excl_it {
	sr_it base;
	sr_it *req, *ex;
	wtmp *a;
	uint64_t eb[SR_WIN_WORDS];
} excl_it;

static uint32_t
excl_settle(excl_it *e)
{
	uint32_t d = e->req->doc;
	while (d != ST_NO_MORE_DOCS && e->ex->ops->advance(e->ex, d) == d)
		d = e->req->ops->next(e->req);
	return e->base.doc = d;
}
static uint32_t
excl_next(sr_it *it)
{
	excl_it *e = (excl_it *)it;
	if (it->doc == ST_NO_MORE_DOCS)
		return it->doc;
	e->req->ops->next(e->req);
	return excl_settle(e);
}
static uint32_t
excl_advance(sr_it *it, uint32_t t)
{
	excl_it *e = (excl_it *)it;
	if (t <= it->doc)
		return it->doc;
	e->req->ops->advance(e->req, t);
	return excl_settle(e);
}
static float
excl_score(sr_it *it)
{
	excl_it *e = (excl_it *)it;
	return e->req->ops->score(e->req);
}
static float
excl_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	excl_it *e = (excl_it *)it;
	return e->req->ops->upper(e->req, lo, hi);
}
static void
excl_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
	excl_it *e = (excl_it *)it;
	if (it->doc >= hi)
		return;
	size_t nw = win_words(lo, hi);
	if (!e->a)
		e->a = wtmp_new();
	bool sc = scores && it->scoring;
	memset(e->a->b, 0, nw * sizeof(uint64_t));
	e->req->ops->fill(e->req, lo, hi, e->a->b, sc ? e->a->s : NULL, min);
	memset(e->eb, 0, nw * sizeof(uint64_t));
	e->ex->ops->fill(e->ex, lo, hi, e->eb, NULL, -INFINITY);
	for (size_t w = 0; w < nw; w++)
		e->a->b[w] &= ~e->eb[w];
	win_merge(e->a->b, sc ? e->a->s : NULL, nw, bits, scores, 0.0f);
	excl_settle(e);
}
static void
excl_free(sr_it *it)
{
	excl_it *e = (excl_it *)it;
	sr_it_free(e->req);
	sr_it_free(e->ex);
	cm_free(CM_MEM_SEARCH, e->a);
	cm_free(CM_MEM_SEARCH, e);
}
static const sr_it_ops excl_ops = {excl_next, excl_advance, excl_score, excl_fill, excl_upper,
                                   excl_free};

static sr_it *
excl_new(sr_it *req, sr_it *ex)
{
	if (is_none(ex)) {
		sr_it_free(ex);
		return req;
	}
	excl_it *e = cm_calloc(CM_MEM_SEARCH, 1, sizeof *e);
	e->base.ops = &excl_ops;
	e->base.scoring = req->scoring;
	e->base.cost = req->cost;
	e->req = req;
	e->ex = ex;
	excl_settle(e);
	return &e->base;
}

/* ---- required plus optional (scores only) ---- */

typedef struct reqopt_it {
	sr_it base;
	sr_it *req, *opt;
	uint32_t max_doc;
	wtmp *a, *b;
} reqopt_it;

static uint32_t
reqopt_next(sr_it *it)
{
	reqopt_it *r = (reqopt_it *)it;
	return it->doc = r->req->ops->next(r->req);
}
static uint32_t
reqopt_advance(sr_it *it, uint32_t t)
{
	reqopt_it *r = (reqopt_it *)it;
	if (t <= it->doc)
		return it->doc;
	return it->doc = r->req->ops->advance(r->req, t);
}
static float
reqopt_score(sr_it *it)
{
	reqopt_it *r = (reqopt_it *)it;
	float s = r->req->ops->score(r->req);
	if (r->opt->ops->advance(r->opt, it->doc) == it->doc)
		s += r->opt->ops->score(r->opt);
	return s;
}
static float
reqopt_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	reqopt_it *r = (reqopt_it *)it;
	return r->req->ops->upper(r->req, lo, hi) + r->opt->ops->upper(r->opt, lo, hi);
}
static void
reqopt_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
	reqopt_it *r = (reqopt_it *)it;
	if (it->doc >= hi)
		return;
	if (!scores) {
		r->req->ops->fill(r->req, lo, hi, bits, NULL, -INFINITY);
		it->doc = r->req->doc;
		return;
	}
	size_t nw = win_words(lo, hi);
	if (!r->a) {
		r->a = wtmp_new();
		r->b = wtmp_new();
	}
	uint64_t *A = r->a->b;
	float *As = r->a->s;
	memset(A, 0, nw * sizeof(uint64_t));
	float rmin = min > -INFINITY ? min - r->opt->ops->upper(r->opt, lo, hi) : -INFINITY;
	r->req->ops->fill(r->req, lo, hi, A, As, rmin);
	if (r->opt->cost * DENSE_DIV >= r->max_doc) {
		uint64_t *B = r->b->b;
		memset(B, 0, nw * sizeof(uint64_t));
		r->opt->ops->fill(r->opt, lo, hi, B, r->b->s, -INFINITY);
		for (size_t w = 0; w < nw; w++)
			for (uint64_t m = A[w] & B[w]; m; m &= m - 1) {
				uint32_t j = (uint32_t)(w * 64 + ctz64(m));
				As[j] += r->b->s[j];
			}
	} else {
		for (size_t w = 0; w < nw; w++)
			for (uint64_t m = A[w]; m; m &= m - 1) {
				uint32_t j = (uint32_t)(w * 64 + ctz64(m));
				if (r->opt->ops->advance(r->opt, lo + j) == lo + j)
					As[j] += r->opt->ops->score(r->opt);
			}
	}
	win_merge(A, As, nw, bits, scores, 0.0f);
	it->doc = r->req->doc;
}
static void
reqopt_free(sr_it *it)
{
	reqopt_it *r = (reqopt_it *)it;
	sr_it_free(r->req);
	sr_it_free(r->opt);
	cm_free(CM_MEM_SEARCH, r->a);
	cm_free(CM_MEM_SEARCH, r->b);
	cm_free(CM_MEM_SEARCH, r);
}
static const sr_it_ops reqopt_ops = {reqopt_next, reqopt_advance, reqopt_score,
                                     reqopt_fill, reqopt_upper,   reqopt_free};

static sr_it *
reqopt_new(sr_it *req, sr_it *opt, uint32_t max_doc)
{
	if (is_none(opt) || !opt->scoring) {
		sr_it_free(opt);
		return req;
	}
	reqopt_it *r = cm_calloc(CM_MEM_SEARCH, 1, sizeof *r);
	r->base.ops = &reqopt_ops;
	r->base.scoring = true;
	r->base.cost = req->cost;
	r->req = req;
	r->opt = opt;
	r->max_doc = max_doc;
	r->base.doc = req->doc;
	return &r->base;
}

/* ---- constant score ---- */

typedef struct const_it {
	sr_it base;
	sr_it *k;
	float score;
	uint64_t tb[SR_WIN_WORDS];
} const_it;

static uint32_t
const_next(sr_it *it)
{
	const_it *c = (const_it *)it;
	return it->doc = c->k->ops->next(c->k);
}
static uint32_t
const_advance(sr_it *it, uint32_t t)
{
	const_it *c = (const_it *)it;
	if (t <= it->doc)
		return it->doc;
	return it->doc = c->k->ops->advance(c->k, t);
}
static float
const_score(sr_it *it)
{
	return ((const_it *)it)->score;
}
static float
const_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	return ((const_it *)it)->score;
}
static void
const_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
	const_it *c = (const_it *)it;
	if (it->doc >= hi)
		return;
	if (!scores) {
		c->k->ops->fill(c->k, lo, hi, bits, NULL, -INFINITY);
	} else if (it->scoring && c->score < min) {
		c->k->ops->advance(c->k, hi);
	} else {
		size_t nw = win_words(lo, hi);
		memset(c->tb, 0, nw * sizeof(uint64_t));
		c->k->ops->fill(c->k, lo, hi, c->tb, NULL, -INFINITY);
		win_merge(c->tb, NULL, nw, bits, scores, c->score);
	}
	it->doc = c->k->doc;
}
static void
const_free(sr_it *it)
{
	sr_it_free(((const_it *)it)->k);
	cm_free(CM_MEM_SEARCH, it);
}
static const sr_it_ops const_ops = {const_next, const_advance, const_score, const_fill, const_upper,
                                    const_free};

static sr_it *
const_new(sr_it *k, float score, bool scoring)
{
	if (is_none(k))
		return k;
	const_it *c = cm_calloc(CM_MEM_SEARCH, 1, sizeof *c);
	c->base.ops = &const_ops;
	c->base.scoring = scoring;
	c->base.cost = k->cost;
	c->k = k;
	c->score = scoring ? score : 0.0f;
	c->base.doc = k->doc;
	return &c->base;
}

/* ---- boosting ---- */

typedef struct boosting_it {
	sr_it base;
	sr_it *pos, *neg;
	float nb;
	wtmp *a;
	uint64_t nbits[SR_WIN_WORDS];
} boosting_it;

static uint32_t
boosting_next(sr_it *it)
{
	boosting_it *b = (boosting_it *)it;
	return it->doc = b->pos->ops->next(b->pos);
}
static uint32_t
boosting_advance(sr_it *it, uint32_t t)
{
	boosting_it *b = (boosting_it *)it;
	if (t <= it->doc)
		return it->doc;
	return it->doc = b->pos->ops->advance(b->pos, t);
}
static float
boosting_score(sr_it *it)
{
	boosting_it *b = (boosting_it *)it;
	float s = b->pos->ops->score(b->pos);
	if (b->neg->ops->advance(b->neg, it->doc) == it->doc)
		s *= b->nb;
	return s;
}
static float
boosting_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	boosting_it *b = (boosting_it *)it;
	float u = b->pos->ops->upper(b->pos, lo, hi);
	return b->nb > 1 ? u * b->nb : u;
}
static void
boosting_fill(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores, float min)
{
	boosting_it *b = (boosting_it *)it;
	if (it->doc >= hi)
		return;
	if (!scores || !it->scoring) {
		b->pos->ops->fill(b->pos, lo, hi, bits, scores, -INFINITY);
		it->doc = b->pos->doc;
		return;
	}
	size_t nw = win_words(lo, hi);
	if (!b->a)
		b->a = wtmp_new();
	memset(b->a->b, 0, nw * sizeof(uint64_t));
	b->pos->ops->fill(b->pos, lo, hi, b->a->b, b->a->s, b->nb > 1 ? -INFINITY : min);
	memset(b->nbits, 0, nw * sizeof(uint64_t));
	b->neg->ops->fill(b->neg, lo, hi, b->nbits, NULL, -INFINITY);
	for (size_t w = 0; w < nw; w++)
		for (uint64_t m = b->a->b[w] & b->nbits[w]; m; m &= m - 1)
			b->a->s[w * 64 + ctz64(m)] *= b->nb;
	win_merge(b->a->b, b->a->s, nw, bits, scores, 0.0f);
	it->doc = b->pos->doc;
}
static void
boosting_free(sr_it *it)
{
	boosting_it *b = (boosting_it *)it;
	sr_it_free(b->pos);
	sr_it_free(b->neg);
	cm_free(CM_MEM_SEARCH, b->a);
	cm_free(CM_MEM_SEARCH, b);
}
static const sr_it_ops boosting_ops = {boosting_next, boosting_advance, boosting_score,
                                       boosting_fill, boosting_upper,   boosting_free};

/* ---- phrase ---- */

typedef struct ppos {
	st_postings *alts;
	size_t nalt;
	uint32_t off, doc;
	uint32_t *pos;
	uint32_t npos, cap;
	uint32_t idx; /* sloppy matcher cursor */
	int64_t cur;  /* position - offset */
	int group;    /* first position with the same (single) term: repeats */
} ppos;

typedef struct phrase_it {
	sr_it base;
	sr_exec *x;
	ppos *p;
	size_t n;
	size_t *order; /* rarest first */
	int slop;
	const uint8_t *norms;
	const float *cache;
	float weight, freq;
	bool corrupt, has_rpts;
} phrase_it;

static uint32_t
pp_advance(ppos *pp, uint32_t t)
{
	uint32_t m = ST_NO_MORE_DOCS;
	for (size_t a = 0; a < pp->nalt; a++) {
		st_postings *p = &pp->alts[a];
		if (p->doc < t || p->doc == UINT32_MAX - 1)
			st_postings_advance(p, t);
		if (p->doc < m)
			m = p->doc;
	}
	return pp->doc = m;
}

static int
u32cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static bool
pp_load(phrase_it *ph, ppos *pp)
{
	pp->npos = 0;
	for (size_t a = 0; a < pp->nalt; a++) {
		st_postings *p = &pp->alts[a];
		if (p->doc != pp->doc)
			continue;
		if (pp->npos + p->freq > pp->cap) {
			pp->cap = (pp->npos + p->freq) * 2;
			pp->pos = cm_realloc(CM_MEM_SEARCH, pp->pos, pp->cap * sizeof(uint32_t));
		}
		int got = st_postings_positions(p, pp->pos + pp->npos, pp->cap - pp->npos);
		if (got < 0) {
			ph->corrupt = true;
			return false;
		}
		pp->npos += (uint32_t)got;
	}
	if (pp->nalt > 1)
		qsort(pp->pos, pp->npos, sizeof(uint32_t), u32cmp);
	return pp->npos > 0;
}

static float
exact_freq(phrase_it *ph)
{
	ppos *p0 = &ph->p[0];
	/* a cursor per term, on the stack for short phrases: an allocation
	 * per matching doc was a tenth of a phrase query */
	size_t jbuf[8] = {0};
	size_t *j = ph->n <= 8 ? jbuf : cm_calloc(CM_MEM_SEARCH, ph->n, sizeof(size_t));
	float freq = 0;
	for (uint32_t a = 0; a < p0->npos; a++) {
		int64_t start = (int64_t)p0->pos[a] - p0->off;
		bool ok = true;
		for (size_t k = 1; k < ph->n && ok; k++) {
			ppos *pk = &ph->p[k];
			int64_t want = start + pk->off;
			while (j[k] < pk->npos && (int64_t)pk->pos[j[k]] < want)
				j[k]++;
			if (j[k] >= pk->npos) {
				ok = false;
				a = p0->npos; /* no later start can match either */
			} else if ((int64_t)pk->pos[j[k]] != want) {
				ok = false;
			}
		}
		if (ok)
			freq += 1.0f;
	}
	if (j != jbuf)
		cm_free(CM_MEM_SEARCH, j);
	return freq;
}

/* Lucene's SloppyPhraseMatcher (without its handling of repeated terms):
 * the sum over matches of 1 / (1 + match length). */
/* Repeated terms never share a position (Lucene's advanceRpts, simplified:
 * the moving one skips positions its twins hold). */
static bool
rpt_taken(const phrase_it *ph, const ppos *pp)
{
	for (size_t k = 0; k < ph->n; k++) {
		const ppos *o = &ph->p[k];
		if (o != pp && o->group == pp->group && o->idx == pp->idx)
			return true;
	}
	return false;
}

static bool
pp_step(phrase_it *ph, ppos *pp, int64_t *end)
{
	do {
		if (++pp->idx >= pp->npos)
			return false;
	} while (ph->has_rpts && rpt_taken(ph, pp));
	pp->cur = (int64_t)pp->pos[pp->idx] - pp->off;
	if (pp->cur > *end)
		*end = pp->cur;
	return true;
}

static bool
pq_less(const ppos *a, const ppos *b)
{
	if (a->cur != b->cur)
		return a->cur < b->cur;
	return a->off < b->off;
}

static void
pq_sift(ppos **h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && pq_less(h[l], h[m]))
			m = l;
		if (r < n && pq_less(h[r], h[m]))
			m = r;
		if (m == i)
			return;
		ppos *t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static void
pq_push(ppos **h, size_t *n, ppos *p)
{
	size_t i = (*n)++;
	h[i] = p;
	while (i && pq_less(h[i], h[(i - 1) / 2])) {
		ppos *t = h[i];
		h[i] = h[(i - 1) / 2];
		h[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
}

static ppos *
pq_pop(ppos **h, size_t *n)
{
	ppos *top = h[0];
	h[0] = h[--*n];
	pq_sift(h, *n, 0);
	return top;
}

static float
sloppy_freq(phrase_it *ph)
{
	size_t n = ph->n, hn = 0;
	ppos **h = cm_malloc(CM_MEM_SEARCH, n * sizeof(ppos *));
	int64_t end = INT64_MIN;
	for (size_t k = 0; k < n; k++) {
		ppos *pp = &ph->p[k];
		pp->idx = 0;
		if (ph->has_rpts) /* the j-th twin starts on the j-th occurrence */
			for (size_t o = 0; o < k; o++)
				pp->idx += ph->p[o].group == pp->group;
		if (pp->idx >= pp->npos) {
			cm_free(CM_MEM_SEARCH, h);
			return 0;
		}
		pp->cur = (int64_t)pp->pos[pp->idx] - pp->off;
		if (pp->cur > end)
			end = pp->cur;
		pq_push(h, &hn, pp);
	}
	float freq = 0;
	bool positioned = true;
	while (positioned) {
		ppos *pp = pq_pop(h, &hn);
		int64_t ml = end - pp->cur;
		int64_t next = h[0]->cur;
		bool matched = false;
		while (pp_step(ph, pp, &end)) {
			if (pp->cur > next) {
				pq_push(h, &hn, pp);
				if (ml <= ph->slop) {
					freq += 1.0f / (1.0f + (float)ml);
					matched = true;
					break;
				}
				pp = pq_pop(h, &hn);
				next = h[0]->cur;
				ml = end - pp->cur;
			} else if (end - pp->cur < ml) {
				ml = end - pp->cur;
			}
		}
		if (matched)
			continue;
		positioned = false;
		if (ml <= ph->slop)
			freq += 1.0f / (1.0f + (float)ml);
	}
	cm_free(CM_MEM_SEARCH, h);
	return freq;
}

static uint32_t
phrase_leap(phrase_it *ph, uint32_t target)
{
	for (;;) {
		ppos *lead = &ph->p[ph->order[0]];
		uint32_t d = pp_advance(lead, target);
		for (size_t i = 1; i < ph->n && d != ST_NO_MORE_DOCS;) {
			ppos *pp = &ph->p[ph->order[i]];
			uint32_t di = pp_advance(pp, d);
			if (di > d) {
				d = pp_advance(lead, di);
				i = 1;
			} else {
				i++;
			}
		}
		if (d == ST_NO_MORE_DOCS)
			return ph->base.doc = d;
		/* every term is on d: positions are read only here, rarest first */
		bool ok = true;
		for (size_t k = 0; k < ph->n && ok; k++)
			ok = pp_load(ph, &ph->p[ph->order[k]]);
		if (ok) {
			float f = ph->slop > 0 ? sloppy_freq(ph) : exact_freq(ph);
			if (f > 0) {
				ph->freq = f;
				return ph->base.doc = d;
			}
		}
		if (ph->corrupt)
			return ph->base.doc = ST_NO_MORE_DOCS;
		target = d + 1;
	}
}

static uint32_t
phrase_next(sr_it *it)
{
	if (it->doc == ST_NO_MORE_DOCS)
		return it->doc;
	return phrase_leap((phrase_it *)it, it->doc + 1);
}
static uint32_t
phrase_advance(sr_it *it, uint32_t t)
{
	if (t <= it->doc)
		return it->doc;
	return phrase_leap((phrase_it *)it, t);
}
static float
phrase_score(sr_it *it)
{
	phrase_it *ph = (phrase_it *)it;
	if (!it->scoring)
		return 0.0f;
	return sr_bm25(ph->weight, ph->cache, ph->freq, ph->norms ? ph->norms[it->doc] : 1);
}
static float
phrase_upper(sr_it *it, uint32_t lo, uint32_t hi)
{
	phrase_it *ph = (phrase_it *)it;
	return it->scoring ? ph->weight : 0.0f;
}
static void
phrase_free(sr_it *it)
{
	phrase_it *ph = (phrase_it *)it;
	for (size_t k = 0; k < ph->n; k++) {
		for (size_t a = 0; a < ph->p[k].nalt; a++) {
			ph->x->pos_docs += ph->p[k].alts[a].pos_docs;
			ph->x->pos_read += ph->p[k].alts[a].pos_read;
			ph->x->pos_blocks += ph->p[k].alts[a].pos_blocks;
		}
		cm_free(CM_MEM_SEARCH, ph->p[k].alts);
		cm_free(CM_MEM_SEARCH, ph->p[k].pos);
	}
	cm_free(CM_MEM_SEARCH, ph->p);
	cm_free(CM_MEM_SEARCH, ph->order);
	cm_free(CM_MEM_SEARCH, ph);
}
static const sr_it_ops phrase_ops = {phrase_next, phrase_advance, phrase_score,
                                     sr_it_fill_generic, phrase_upper, phrase_free};

static sr_it *
phrase_new(sr_exec *x, size_t si, const sr_plan *pl)
{
	const sr_seg_ctx *c = &x->segs[si];
	const st_field_info *fi = st_segment_field(c->seg, pl->fs->name);
	if (!fi || !(fi->flags & ST_FI_POSITIONS))
		return none_it();
	phrase_it *ph = cm_calloc(CM_MEM_SEARCH, 1, sizeof *ph);
	ph->base.ops = &phrase_ops;
	ph->base.scoring = pl->scoring;
	ph->x = x;
	ph->n = pl->npos;
	ph->p = cm_calloc(CM_MEM_SEARCH, ph->n, sizeof(ppos));
	ph->order = cm_calloc(CM_MEM_SEARCH, ph->n, sizeof(size_t));
	ph->slop = pl->slop;
	ph->norms = (fi->flags & ST_FI_NORMS) ? st_norms(c->txn, fi) : NULL;
	ph->cache = sr_fstat_cache(pl->fs);
	ph->weight = pl->weight;
	uint64_t mincost = UINT64_MAX;
	for (size_t k = 0; k < ph->n; k++) {
		ppos *pp = &ph->p[k];
		pp->off = pl->pos_offset[k];
		pp->alts = cm_calloc(CM_MEM_SEARCH, pl->pos_nterms[k], sizeof(st_postings));
		uint64_t cost = 0;
		for (size_t a = 0; a < pl->pos_nterms[k]; a++) {
			st_postings *p = &pp->alts[pp->nalt];
			if (st_postings_open(c->txn, fi, pl->pos_terms[k][a].p, pl->pos_terms[k][a].n, p) ==
			    CM_OK) {
				cost += p->doc_freq;
				st_postings_next(p);
				pp->nalt++;
			}
		}
		if (!pp->nalt) {
			phrase_free(&ph->base);
			return none_it();
		}
		pp->doc = pp_advance(pp, 0);
		pp->group = (int)k;
		for (size_t o = 0; o < k && pl->pos_nterms[k] == 1; o++) {
			if (pl->pos_nterms[o] == 1 && pl->pos_terms[o][0].n == pl->pos_terms[k][0].n &&
			    !memcmp(pl->pos_terms[o][0].p, pl->pos_terms[k][0].p, pl->pos_terms[k][0].n)) {
				pp->group = ph->p[o].group;
				ph->has_rpts = true;
				break;
			}
		}
		ph->order[k] = k;
		/* insertion by cost */
		size_t j = k;
		while (j && ph->p[ph->order[j - 1]].alts[0].doc_freq > pp->alts[0].doc_freq) {
			ph->order[j] = ph->order[j - 1];
			j--;
		}
		ph->order[j] = k;
		if (cost < mincost)
			mincost = cost;
	}
	ph->base.cost = mincost;
	ph->base.doc = 0;
	phrase_leap(ph, 0);
	return &ph->base;
}

/* ---- building ---- */

static sr_it *
bool_build(sr_exec *x, size_t si, const sr_plan *pl, uint32_t max_doc)
{
	size_t n = pl->nkids;
	sr_it **req = cm_calloc(CM_MEM_SEARCH, n + 1, sizeof(sr_it *));
	sr_it **opt = cm_calloc(CM_MEM_SEARCH, n + 1, sizeof(sr_it *));
	sr_it **neg = cm_calloc(CM_MEM_SEARCH, n + 1, sizeof(sr_it *));
	size_t nreq = 0, nopt = 0, nneg = 0;
	bool dead = false;
	for (size_t i = 0; i < n && !dead; i++) {
		uint8_t occ = pl->occur[i];
		if (occ == OCC_SHOULD && !pl->scoring && pl->msm <= 0) {
			/* optional clauses only add scores; without scores they are moot
			 * unless they are what matches */
			bool has_req = false;
			for (size_t k = 0; k < n; k++)
				has_req |= pl->occur[k] == OCC_MUST || pl->occur[k] == OCC_FILTER;
			if (has_req)
				continue;
		}
		sr_it *k = NULL;
		if (sr_it_build(x, si, pl->kids[i], &k)) {
			dead = true;
			sr_it_free(k);
			break;
		}
		if (is_none(k)) {
			sr_it_free(k);
			if (occ == OCC_MUST || occ == OCC_FILTER)
				dead = true;
			continue;
		}
		if (occ == OCC_MUST || occ == OCC_FILTER)
			req[nreq++] = k;
		else if (occ == OCC_SHOULD)
			opt[nopt++] = k;
		else
			neg[nneg++] = k;
	}
	size_t plan_req = 0, plan_opt = 0;
	for (size_t i = 0; i < n; i++) {
		plan_req += pl->occur[i] == OCC_MUST || pl->occur[i] == OCC_FILTER;
		plan_opt += pl->occur[i] == OCC_SHOULD;
	}
	if (!dead && (size_t)(pl->msm > 0 ? pl->msm : 0) > nopt)
		dead = true;
	if (!dead && !plan_req && plan_opt && !nopt)
		dead = true; /* a pure disjunction whose clauses are all absent */
	if (dead) {
		for (size_t i = 0; i < nreq; i++)
			sr_it_free(req[i]);
		for (size_t i = 0; i < nopt; i++)
			sr_it_free(opt[i]);
		for (size_t i = 0; i < nneg; i++)
			sr_it_free(neg[i]);
		cm_free(CM_MEM_SEARCH, req);
		cm_free(CM_MEM_SEARCH, opt);
		cm_free(CM_MEM_SEARCH, neg);
		return none_it();
	}
	sr_it *main;
	if (!nreq) {
		if (nopt) {
			main = disj_new(opt, nopt, pl->msm > 0 ? pl->msm : 1, false, 0);
			opt = NULL;
		} else {
			/* only must_not: ES adds a match_all filter (score 0) */
			main = all_new(max_doc, 0.0f, false);
		}
	} else {
		sr_it *r = conj_new(req, nreq, max_doc);
		req = NULL;
		if (nopt && pl->msm > 0) {
			sr_it **two = cm_calloc(CM_MEM_SEARCH, 2, sizeof(sr_it *));
			two[0] = r;
			two[1] = disj_new(opt, nopt, pl->msm, false, 0);
			opt = NULL;
			main = conj_new(two, 2, max_doc);
		} else if (nopt) {
			main = reqopt_new(r, disj_new(opt, nopt, 1, false, 0), max_doc);
			opt = NULL;
		} else {
			main = r;
		}
	}
	cm_free(CM_MEM_SEARCH, req);
	cm_free(CM_MEM_SEARCH, opt);
	if (nneg) {
		main = excl_new(main, disj_new(neg, nneg, 1, false, 0));
	} else {
		cm_free(CM_MEM_SEARCH, neg);
	}
	return main;
}

cm_err
sr_it_build(sr_exec *x, size_t si, const sr_plan *pl, sr_it **out)
{
	const sr_seg_ctx *c = &x->segs[si];
	uint32_t max_doc = st_segment_max_doc(c->seg);
	sr_it *it = NULL;
	*out = NULL;
	if (!max_doc) {
		*out = none_it();
		return CM_OK;
	}
	switch (pl->kind) {
	case P_ALL:
		it = all_new(max_doc, pl->boost, pl->scoring);
		break;
	case P_NONE:
		it = none_it();
		break;
	case P_TERM:
		it = term_new(x, si, pl);
		break;
	case P_COLUMN:
		it = col_new(x, si, pl);
		break;
	case P_TERMSET:
	case P_TERMRANGE:
	case P_MULTI:
	case P_IDS:
	case P_EXISTS:
	case P_GEO:
	case P_RANGEREL:
		it = materialize(x, si, pl);
		break;
	case P_BOOL:
		it = bool_build(x, si, pl, max_doc);
		break;
	case P_DISMAX: {
		sr_it **k = cm_calloc(CM_MEM_SEARCH, pl->nkids + 1, sizeof(sr_it *));
		size_t n = 0;
		for (size_t i = 0; i < pl->nkids; i++) {
			sr_it *ki;
			sr_it_build(x, si, pl->kids[i], &ki);
			if (is_none(ki))
				sr_it_free(ki);
			else
				k[n++] = ki;
		}
		if (!n) {
			cm_free(CM_MEM_SEARCH, k);
			it = none_it();
		} else {
			it = disj_new(k, n, 1, true, pl->tie);
		}
		break;
	}
	case P_CONST: {
		sr_it *k;
		sr_it_build(x, si, pl->kids[0], &k);
		it = const_new(k, pl->boost, pl->scoring);
		break;
	}
	case P_BOOSTING: {
		sr_it *pos, *neg;
		sr_it_build(x, si, pl->kids[0], &pos);
		if (is_none(pos)) {
			it = pos;
			break;
		}
		sr_it_build(x, si, pl->kids[1], &neg);
		if (is_none(neg)) {
			sr_it_free(neg);
			it = pos;
			break;
		}
		boosting_it *b = cm_calloc(CM_MEM_SEARCH, 1, sizeof *b);
		b->base.ops = &boosting_ops;
		b->base.scoring = pos->scoring;
		b->base.cost = pos->cost;
		b->pos = pos;
		b->neg = neg;
		b->nb = pl->neg_boost;
		b->base.doc = pos->doc;
		it = &b->base;
		break;
	}
	case P_PHRASE:
		it = phrase_new(x, si, pl);
		break;
	case P_NESTED:
		it = sr_nested_it_new(x, si, pl);
		break;
	case P_INTERVALS:
		it = sr_intervals_it_new(x, si, pl);
		break;
	}
	*out = it ? it : none_it();
	return x->err->code ? x->err->code : CM_OK;
}

bool
sr_plan_seg_count(sr_exec *x, size_t si, const sr_plan *pl, uint64_t *n)
{
	const sr_seg_ctx *c = &x->segs[si];
	uint32_t max_doc = st_segment_max_doc(c->seg);
	switch (pl->kind) {
	case P_NONE:
		*n = 0;
		return true;
	case P_ALL:
		*n = max_doc;
		if (c->live) {
			*n = 0;
			for (size_t w = 0; w < st_bit_words(max_doc); w++)
				*n += (uint64_t)__builtin_popcountll(c->live[w]);
		}
		return true;
	case P_TERM: {
		if (c->live)
			return false; /* deleted docs still count in doc_freq */
		const st_field_info *fi = st_segment_field(c->seg, pl->fs->name);
		uint32_t df;
		*n = 0;
		if (!fi || !(fi->flags & ST_FI_POSTINGS))
			return true;
		/* the dictionary alone: the postings' skip tables stay unread */
		cm_err rc = st_term_doc_freq(c->txn, fi, pl->term.p, pl->term.n, &df);
		if (rc == CM_ENOTFOUND)
			return true;
		if (rc)
			return false; /* the iterator reports it */
		*n = df;
		return true;
	}
	case P_CONST:
		return sr_plan_seg_count(x, si, pl->kids[0], n);
	default:
		return false;
	}
}

/* ---- running a segment in windows ---- */

cm_err
sr_run_windows(sr_exec *x, size_t si, sr_it *it, bool want_scores, sr_window_fn fn, void *self)
{
	return sr_run_windows_floor(x, si, it, want_scores, fn, self, NULL, NULL, -INFINITY);
}

/* Vector stores, not memset: gcc made that rep stos, whose lines the
 * window's reader then stalled on (a sparse filter's windows, one doc or
 * so each: a fifth of the query). */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) static void
win_clear(uint64_t *bits, size_t nw)
{
	typedef uint64_t v2 __attribute__((vector_size(16), may_alias));
	size_t w = 0;
	for (; w + 2 <= nw; w += 2)
		*(v2 *)(bits + w) = (v2){0, 0};
	if (w < nw)
		bits[w] = 0;
}

cm_err
sr_run_windows_floor(sr_exec *x, size_t si, sr_it *it, bool want_scores, sr_window_fn fn,
                     void *self, const float *floor, bool *rest, float min0)
{
	const sr_seg_ctx *c = &x->segs[si];
	uint32_t max_doc = st_segment_max_doc(c->seg);
	/* the segment's bound, once: a constant-score query (match_all, a
	 * keyword term) stops as soon as the heap is full */
	float seg_bound = rest && floor ? it->ops->upper(it, 0, max_doc) : INFINITY;
	if (rest)
		*rest = false;
	/* a count known without visiting: the segment may stop once a few
	 * hits are kept, so the first block runs in windows from SR_WIN_FIRST
	 * docs doubling, each aligned to its size: a top 10 of a keyword term
	 * decodes a few postings blocks, not a whole window's */
	bool ramp = rest && floor;
	uint64_t bits[SR_WIN_WORDS];
	float *scores = want_scores ? cm_malloc(CM_MEM_SEARCH, SR_WIN * sizeof(float)) : NULL;
	cm_err rc = CM_OK;
	float min = min0;
	for (uint32_t lo = 0; lo < max_doc && it->doc != ST_NO_MORE_DOCS;) {
		uint32_t span = sr_window_span(lo, ramp);
		bool term_root = min > -INFINITY && it->ops == &term_ops;
		if (term_root)
			term_skip_to_competitive((term_it *)it, min);
		if (it->doc >= lo + span) {
			lo = it->doc < SR_WIN ? lo + span : it->doc & ~(uint32_t)(SR_WIN - 1);
			continue;
		}
		if (sr_deadline_passed(x))
			break;
		if (rest && floor && seg_bound <= *floor) {
			*rest = true;
			break;
		}
		uint32_t hi = max_doc - lo > span ? lo + span : max_doc;
		size_t nw = win_words(lo, hi);
		win_clear(bits, nw);
		float *sc = scores;
		/* a root term is on a block that reaches min, above the floor:
		 * its bound over the window needs no look */
		if (sc && floor && *floor > -INFINITY && !(term_root && *floor < min) &&
		    it->ops->upper(it, lo, hi) <= *floor) {
			if (min > -INFINITY) {
				/* the count is settled and no doc here can enter the
				 * heap: nothing to fill */
				it->ops->advance(it, hi);
				lo = hi;
				continue;
			}
			sc = NULL;
		}
		it->ops->fill(it, lo, hi, bits, sc, min);
		if (c->live)
			for (size_t w = 0; w < nw; w++)
				bits[w] &= c->live[(lo >> 6) + w];
		rc = fn(self, si, lo, hi, bits, sc, &min);
		if (rc)
			break;
		if (x->err->code) {
			rc = x->err->code;
			break;
		}
		lo = hi;
	}
	cm_free(CM_MEM_SEARCH, scores);
	return rc;
}

/* ---- counting and bitsets ---- */

static cm_err
count_window(void *self, size_t si, uint32_t lo, uint32_t hi, const uint64_t *bits,
             const float *scores, float *min)
{
	uint64_t *n = self;
	size_t nw = win_words(lo, hi);
	for (size_t w = 0; w < nw; w++)
		*n += (uint64_t)__builtin_popcountll(bits[w]);
	return CM_OK;
}

cm_err
sr_count_shard(st_reader *r, const sr_query *q, uint64_t deadline_ns, uint64_t *count,
               cm_error *err)
{
	sr_exec x;
	*count = 0;
	cm_err rc = sr_exec_open(&x, r, deadline_ns, err);
	if (rc)
		return rc;
	sr_plan *pl = NULL;
	rc = sr_plan_compile(&x, q, false, &pl);
	for (size_t si = 0; !rc && si < x.nseg; si++) {
		sr_it *it;
		uint64_t known;
		if (sr_plan_seg_count(&x, si, pl, &known)) {
			*count += known;
			continue;
		}
		rc = sr_it_build(&x, si, pl, &it);
		if (!rc)
			rc = sr_run_windows(&x, si, it, false, count_window, count);
		sr_it_free(it);
		if (x.timed_out)
			break;
	}
	if (!rc && x.timed_out)
		rc = cm_error_set(x.err, CM_ETIMEDOUT, "count timed out");
	sr_plan_free(pl);
	sr_exec_close(&x);
	return rc;
}

typedef struct bitset_sink {
	uint64_t *out;
} bitset_sink;

static cm_err
bitset_window(void *self, size_t si, uint32_t lo, uint32_t hi, const uint64_t *bits,
              const float *scores, float *min)
{
	bitset_sink *s = self;
	size_t nw = win_words(lo, hi);
	memcpy(s->out + (lo >> 6), bits, nw * sizeof(uint64_t));
	return CM_OK;
}

cm_err
sr_query_bitset(const sr_query *q, const sr_seg_ctx *ctx, uint64_t *bits, cm_error *err)
{
	sr_exec x;
	uint32_t max_doc = st_segment_max_doc(ctx->seg);
	memset(bits, 0, st_bit_words(max_doc) * sizeof(uint64_t));
	cm_err rc = sr_exec_open(&x, ctx->reader, ctx->deadline_ns, err);
	if (rc)
		return rc;
	size_t si = ctx->seg_index;
	if (si >= x.nseg || x.segs[si].seg != ctx->seg) {
		sr_exec_close(&x);
		return cm_error_set(err, CM_EINVAL, "segment context does not match its reader");
	}
	sr_plan *pl = NULL;
	rc = sr_plan_compile(&x, q, false, &pl);
	if (!rc) {
		sr_it *it;
		rc = sr_it_build(&x, si, pl, &it);
		bitset_sink s = {bits};
		if (!rc)
			rc = sr_run_windows(&x, si, it, false, bitset_window, &s);
		sr_it_free(it);
	}
	if (!rc && x.timed_out)
		rc = cm_error_set(x.err, CM_ETIMEDOUT, "timed out");
	sr_plan_free(pl);
	sr_exec_close(&x);
	return rc;
}
