/* Segment write -> read against a model: every field type, multi-valued
 * and missing values, Unicode terms, deletes, stored source, postings
 * (next/advance/next_block/find_block/positions), terms, norms, columns,
 * ordinals, ids; then a merge of three segments with deletes. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include <lmdb.h>

#include "check.h"
#include "storage/segment_private.h"
#include "storage/st_segment.h"

#define NVOCAB 40
#define NTAGS 200
#define MAXV 3

static const char *vocab[NVOCAB];
static char *tags[NTAGS];

static st_field_def f_title = {.path = "title", .type = ST_FT_TEXT, .analyzer = ST_AN_STANDARD,
                               .index = true};
static st_field_def f_tag = {.path = "tag", .type = ST_FT_KEYWORD, .index = true,
                             .doc_values = true};
static st_field_def f_n = {.path = "n", .type = ST_FT_LONG, .index = true, .doc_values = true};
static st_field_def f_price = {.path = "price", .type = ST_FT_DOUBLE, .index = true,
                               .doc_values = true};
static st_field_def f_flag = {.path = "flag", .type = ST_FT_BOOLEAN, .index = true,
                              .doc_values = true};
static st_field_def f_when = {.path = "when", .type = ST_FT_DATE, .index = true,
                              .doc_values = true};

typedef struct mdoc {
	char id[32];
	char src[256];
	int ntitle;
	char title[MAXV][200];
	int ntag;
	int tag[MAXV];
	int nn;
	int64_t n[MAXV];
	int has_price, has_flag, has_when;
	double price;
	int flag;
	int64_t when;
	uint64_t seq;
	int64_t version;
} mdoc;

static uint64_t rng = 88172645463325252ull;
static uint64_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void
gen_doc(mdoc *d, uint32_t i, const char *prefix)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->id, sizeof(d->id), "%s-%u", prefix, i);
	snprintf(d->src, sizeof(d->src), "{\"i\":%u,\"s\":\"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac %llu\"}",
	         i, (unsigned long long)(rnd() % 100000));
	d->ntitle = (int)(rnd() % 3); /* 0..2 values */
	for (int v = 0; v < d->ntitle; v++) {
		int nw = (int)(rnd() % 8);
		char *p = d->title[v];
		p[0] = 0;
		for (int w = 0; w < nw; w++) {
			/* skewed: low word ids are frequent, so long postings exist */
			uint64_t r = rnd() % NVOCAB;
			int wi = (int)(r * (rnd() % NVOCAB) / NVOCAB);
			strcat(p, vocab[wi]);
			strcat(p, w + 1 < nw ? " " : "");
		}
	}
	d->ntag = (int)(rnd() % 4);
	if (d->ntag > MAXV)
		d->ntag = MAXV;
	for (int v = 0; v < d->ntag; v++)
		d->tag[v] = (int)(rnd() % NTAGS);
	d->nn = (int)(rnd() % 3);
	for (int v = 0; v < d->nn; v++)
		d->n[v] = (int64_t)(rnd() % 2000000) - 1000000;
	if (i % 97 == 5 && d->nn)
		d->n[0] = INT64_MIN + 5; /* extreme values in a block */
	d->has_price = rnd() % 5 != 0;
	d->price = ((double)(int64_t)(rnd() % 200000) - 100000) / 7.0;
	d->has_flag = rnd() % 3 != 0;
	d->flag = (int)(rnd() % 2);
	d->has_when = 1;
	d->when = 1700000000000LL + (int64_t)(rnd() % 1000000);
	d->seq = i * 3 + 1;
	d->version = i + 7;
}

static void
to_doc(const mdoc *m, st_doc *d, st_value *vals)
{
	size_t n = 0;
	for (int v = 0; v < m->ntitle; v++)
		vals[n++] = (st_value){.field = &f_title, .s = m->title[v], .n = strlen(m->title[v])};
	for (int v = 0; v < m->ntag; v++)
		vals[n++] = (st_value){.field = &f_tag, .s = tags[m->tag[v]], .n = strlen(tags[m->tag[v]])};
	for (int v = 0; v < m->nn; v++)
		vals[n++] = (st_value){.field = &f_n, .i = m->n[v]};
	if (m->has_price)
		vals[n++] = (st_value){.field = &f_price, .d = m->price};
	if (m->has_flag)
		vals[n++] = (st_value){.field = &f_flag, .i = m->flag};
	if (m->has_when)
		vals[n++] = (st_value){.field = &f_when, .i = m->when};
	*d = (st_doc){.id = m->id, .id_len = strlen(m->id), .source = m->src,
	              .source_len = strlen(m->src), .values = vals, .nvalues = n};
}

/* ---- expected postings from the model ---- */

typedef struct exp_post {
	uint32_t n, cap;
	uint32_t *docs, *freqs;
	uint32_t *pos; /* MAXPOS per doc */
} exp_post;
#define MAXPOS 64

static void
exp_add(exp_post *e, uint32_t doc, uint32_t pos)
{
	if (e->n && e->docs[e->n - 1] == doc) {
		if (e->freqs[e->n - 1] < MAXPOS)
			e->pos[(e->n - 1) * MAXPOS + e->freqs[e->n - 1]] = pos;
		e->freqs[e->n - 1]++;
		return;
	}
	if (e->n == e->cap) {
		e->cap = e->cap ? e->cap * 2 : 16;
		e->docs = realloc(e->docs, e->cap * sizeof(uint32_t));
		e->freqs = realloc(e->freqs, e->cap * sizeof(uint32_t));
		e->pos = realloc(e->pos, (size_t)e->cap * MAXPOS * sizeof(uint32_t));
	}
	e->docs[e->n] = doc;
	e->freqs[e->n] = 1;
	e->pos[e->n * MAXPOS] = pos;
	e->n++;
}

static int
word_id(const char *w, size_t n)
{
	for (int i = 0; i < NVOCAB; i++)
		if (strlen(vocab[i]) == n && memcmp(vocab[i], w, n) == 0)
			return i;
	return -1;
}

/* live docs in new numbering: models[k] for k in order */
static void
build_expected(mdoc **live, uint32_t nlive, exp_post *title, exp_post *tag, uint32_t *lens)
{
	for (uint32_t d = 0; d < nlive; d++) {
		mdoc *m = live[d];
		uint32_t pos = 0, len = 0;
		for (int v = 0; v < m->ntitle; v++) {
			if (v)
				pos += 100;
			const char *p = m->title[v];
			while (*p) {
				const char *e = strchr(p, ' ');
				size_t n = e ? (size_t)(e - p) : strlen(p);
				exp_add(&title[word_id(p, n)], d, pos++);
				len++;
				p += n + (e ? 1 : 0);
			}
		}
		lens[d] = len;
		for (int v = 0; v < m->ntag; v++) {
			exp_post *e = &tag[m->tag[v]];
			exp_add(e, d, 0);
		}
	}
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
check_postings(st_seg_txn *t, const st_field_info *fi, const char *term, const exp_post *e,
               bool positions)
{
	st_postings p;
	cm_err rc = st_postings_open(t, fi, term, strlen(term), &p);
	if (e->n == 0) {
		CHECKF(rc == CM_ENOTFOUND, "term %s should be absent", term);
		return;
	}
	REQUIRE(rc == CM_OK);
	CHECK(p.doc_freq == e->n);
	uint64_t ttf = 0;
	for (uint32_t i = 0; i < e->n; i++)
		ttf += e->freqs[i];
	CHECK(p.total_term_freq == ttf);
	/* next(), positions */
	uint32_t i = 0, pos[MAXPOS + 8];
	for (uint32_t d = st_postings_next(&p); d != ST_NO_MORE_DOCS; d = st_postings_next(&p), i++) {
		if (i >= e->n || d != e->docs[i] || p.freq != e->freqs[i]) {
			CHECKF(0, "term %s doc %u/%u freq %u", term, d, i < e->n ? e->docs[i] : 0, p.freq);
			break;
		}
		if (positions && (i % 3 == 0 || e->n < 50)) {
			int np = st_postings_positions(&p, pos, MAXPOS + 8);
			CHECK(np == (int)e->freqs[i]);
			for (int k = 0; k < np && k < MAXPOS; k++)
				CHECKF(pos[k] == e->pos[i * MAXPOS + k], "term %s doc %u pos %d", term, d, k);
		}
	}
	CHECK(i == e->n);
	CHECK(!st_postings_corrupt(&p));
	/* next_block() + block_last + impact */
	REQUIRE(st_postings_open(t, fi, term, strlen(term), &p) == CM_OK);
	i = 0;
	uint32_t nb = 0;
	for (uint32_t n = st_postings_next_block(&p); n; n = st_postings_next_block(&p), nb++) {
		CHECK(st_postings_block_last(&p, p.block) == p.docs[n - 1]);
		uint32_t mf;
		uint8_t mn;
		st_postings_block_impact(&p, p.block, &mf, &mn);
		uint32_t real_mf = 0;
		for (uint32_t k = 0; k < n; k++) {
			CHECK(i + k < e->n && p.docs[k] == e->docs[i + k] && p.freqs[k] == e->freqs[i + k]);
			if (p.freqs[k] > real_mf)
				real_mf = p.freqs[k];
		}
		CHECK(mf == real_mf);
		i += n;
	}
	CHECK(i == e->n);
	CHECK(nb == p.nblocks && nb == (e->n + ST_BLOCK - 1) / ST_BLOCK);
	/* advance() to random targets, with positions after jumps */
	REQUIRE(st_postings_open(t, fi, term, strlen(term), &p) == CM_OK);
	uint32_t target = 0, j = 0;
	for (;;) {
		target += (uint32_t)(rnd() % 300);
		uint32_t d = st_postings_advance(&p, target);
		while (j < e->n && e->docs[j] < target)
			j++;
		if (j == e->n) {
			CHECK(d == ST_NO_MORE_DOCS);
			break;
		}
		CHECKF(d == e->docs[j] && p.freq == e->freqs[j], "advance %s to %u: %u vs %u", term,
		       target, d, e->docs[j]);
		if (positions) {
			int np = st_postings_positions(&p, pos, MAXPOS + 8);
			CHECK(np == (int)e->freqs[j] && pos[0] == e->pos[j * MAXPOS]);
		}
		uint32_t fb = st_postings_find_block(&p, target);
		CHECK(fb == j / ST_BLOCK);
		target = d + 1;
	}
}

static void
check_segment(const char *path, mdoc **live, uint32_t nlive, uint64_t gen)
{
	cm_error err = {0};
	st_segment *s;
	cm_err rc = st_segment_open(path, &s, &err);
	REQUIRE(rc == CM_OK);
	CHECK(st_segment_max_doc(s) == nlive);
	CHECK(st_segment_generation(s) == gen);
	st_seg_txn *t;
	REQUIRE(st_seg_txn_begin(s, &t) == CM_OK);

	exp_post *title = calloc(NVOCAB, sizeof(exp_post)), *tag = calloc(NTAGS, sizeof(exp_post));
	uint32_t *lens = calloc(nlive + 1, sizeof(uint32_t));
	build_expected(live, nlive, title, tag, lens);

	const st_field_info *ft = st_segment_field(s, "title");
	const st_field_info *fk = st_segment_field(s, "tag");
	const st_field_info *fn = st_segment_field(s, "n");
	const st_field_info *fp = st_segment_field(s, "price");
	const st_field_info *fb = st_segment_field(s, "flag");
	const st_field_info *fw = st_segment_field(s, "when");
	const st_field_info *fseq = st_segment_field(s, ST_FIELD_SEQ_NO);
	const st_field_info *fver = st_segment_field(s, ST_FIELD_VERSION);
	REQUIRE(ft && fk && fn && fp && fb && fw && fseq && fver);
	CHECK(ft->flags == (ST_FI_POSTINGS | ST_FI_POSITIONS | ST_FI_NORMS | ST_FI_MULTI));
	CHECK((fk->flags & (ST_FI_POSTINGS | ST_FI_COLUMN)) == (ST_FI_POSTINGS | ST_FI_COLUMN));
	CHECK(fn->flags == (ST_FI_COLUMN | ST_FI_MULTI));
	CHECK(fb->flags == (ST_FI_COLUMN | ST_FI_POSTINGS));
	CHECK(st_segment_field(s, "nope") == NULL);

	/* text postings, terms dictionary */
	uint64_t sum_ttf = 0;
	uint32_t nterms = 0, title_docs = 0;
	for (int w = 0; w < NVOCAB; w++) {
		check_postings(t, ft, vocab[w], &title[w], true);
		for (uint32_t k = 0; k < title[w].n; k++)
			sum_ttf += title[w].freqs[k];
		nterms += title[w].n > 0;
	}
	for (uint32_t d = 0; d < nlive; d++)
		title_docs += lens[d] > 0;
	CHECK(ft->sum_total_term_freq == sum_ttf);
	CHECK(ft->num_terms == nterms);
	CHECK(ft->doc_count == title_docs);
	st_terms *it;
	REQUIRE(st_terms_open(t, ft, &it) == CM_OK);
	const char **sorted = malloc(NVOCAB * sizeof(char *));
	memcpy(sorted, vocab, NVOCAB * sizeof(char *));
	qsort(sorted, NVOCAB, sizeof(char *), cmp_str);
	int si = 0;
	for (bool ok = st_terms_seek(it, NULL, 0); ok; ok = st_terms_next(it)) {
		while (si < NVOCAB && title[word_id(sorted[si], strlen(sorted[si]))].n == 0)
			si++;
		size_t len;
		const uint8_t *tb = st_terms_term(it, &len);
		REQUIRE(si < NVOCAB);
		CHECK(len == strlen(sorted[si]) && memcmp(tb, sorted[si], len) == 0);
		CHECK(st_terms_doc_freq(it) == title[word_id(sorted[si], strlen(sorted[si]))].n);
		si++;
	}
	size_t tl = 0;
	const uint8_t *tb = NULL;
	if (nlive) {
		CHECK(st_terms_seek(it, "m", 1));
		tb = st_terms_term(it, &tl);
		CHECK(tl > 0 && tb[0] >= 'm');
	}
	CHECK(!st_terms_seek(it, "\xff", 1));
	st_terms_close(it);

	/* norms */
	const uint8_t *norms = st_norms(t, ft);
	REQUIRE(norms);
	for (uint32_t d = 0; d < nlive; d++)
		CHECKF(norms[d] == st_norm_encode(lens[d]), "norm doc %u", d);
	CHECK(st_norms(t, fk) == NULL);

	/* keyword postings, ords, column */
	char **used = malloc(NTAGS * sizeof(char *));
	int nused = 0;
	for (int k = 0; k < NTAGS; k++) {
		check_postings(t, fk, tags[k], &tag[k], false);
		if (tag[k].n)
			used[nused++] = tags[k];
	}
	qsort(used, nused, sizeof(char *), cmp_str);
	CHECK(fk->num_terms == (uint64_t)nused);
	for (int o = 0; o < nused; o++) {
		const uint8_t *term;
		size_t len;
		uint64_t ord;
		REQUIRE(st_ord_term(t, fk, (uint64_t)o, &term, &len) == CM_OK);
		CHECKF(len == strlen(used[o]) && memcmp(term, used[o], len) == 0, "ord %d", o);
		CHECK(st_term_ord(t, fk, used[o], strlen(used[o]), &ord) == CM_OK && ord == (uint64_t)o);
	}
	/* the same without the ordinal table (fields past ORD_TAB_MAX terms):
	 * the K sample, then the block (format 5) or the T keys */
	s->ord_tab_max = 0;
	for (int o = 0; o < nused; o++) {
		const uint8_t *term;
		size_t len;
		REQUIRE(st_ord_term(t, fk, (uint64_t)o, &term, &len) == CM_OK);
		CHECKF(len == strlen(used[o]) && memcmp(term, used[o], len) == 0, "slow ord %d", o);
	}
	s->ord_tab_max = ORD_TAB_MAX;
	uint64_t ord;
	CHECK(st_term_ord(t, fk, "", 0, &ord) == CM_ENOTFOUND && ord == 0);
	CHECK(st_term_ord(t, fk, "\xff\xff", 2, &ord) == CM_ENOTFOUND && ord == (uint64_t)nused);
	CHECK(st_ord_term(t, fk, (uint64_t)nused, &tb, &tl) == CM_ENOTFOUND);

	st_colblock cbk = {0}, cbn = {0}, cbp = {0}, cbb = {0}, cbw = {0}, cbs = {0}, cbv = {0};
	cm_buf idb, srcb;
	cm_buf_init(&idb, CM_MEM_STORAGE);
	cm_buf_init(&srcb, CM_MEM_STORAGE);
	for (uint32_t d = 0; d < nlive; d++) {
		mdoc *m = live[d];
		const int64_t *v;
		/* keyword ordinals: sorted, deduplicated */
		int nv = st_col_values(t, fk, &cbk, d, &v);
		int64_t want[MAXV];
		int nw = 0;
		for (int k = 0; k < m->ntag; k++) {
			const char *s = tags[m->tag[k]];
			int o = (int)((char **)bsearch(&s, used, nused, sizeof(char *), cmp_str) - used);
			bool dup = false;
			for (int q = 0; q < nw; q++)
				dup |= want[q] == o;
			if (!dup)
				want[nw++] = o;
		}
		for (int a = 0; a < nw; a++)
			for (int b = a + 1; b < nw; b++)
				if (want[b] < want[a]) {
					int64_t x = want[a];
					want[a] = want[b];
					want[b] = x;
				}
		CHECKF(nv == nw, "doc %u tag count %d vs %d", d, nv, nw);
		for (int k = 0; k < nv && k < nw; k++)
			CHECK(v[k] == want[k]);
		/* longs, sorted */
		nv = st_col_values(t, fn, &cbn, d, &v);
		int64_t ln[MAXV];
		memcpy(ln, m->n, sizeof(ln));
		for (int a = 0; a < m->nn; a++)
			for (int b = a + 1; b < m->nn; b++)
				if (ln[b] < ln[a]) {
					int64_t x = ln[a];
					ln[a] = ln[b];
					ln[b] = x;
				}
		CHECK(nv == m->nn);
		for (int k = 0; k < nv && k < m->nn; k++)
			CHECK(v[k] == ln[k]);
		nv = st_col_values(t, fp, &cbp, d, &v);
		CHECK(nv == m->has_price);
		if (nv == 1)
			CHECK(st_sortable_to_double(v[0]) == m->price);
		nv = st_col_values(t, fb, &cbb, d, &v);
		CHECK(nv == m->has_flag && (!nv || v[0] == m->flag));
		nv = st_col_values(t, fw, &cbw, d, &v);
		CHECK(nv == 1 && v[0] == m->when);
		nv = st_col_values(t, fseq, &cbs, d, &v);
		CHECK(nv == 1 && v[0] == (int64_t)m->seq);
		nv = st_col_values(t, fver, &cbv, d, &v);
		CHECK(nv == 1 && v[0] == m->version);
		/* stored, ids */
		if (d % 3 == 0 || nlive < 500) {
			cm_buf_reset(&idb);
			cm_buf_reset(&srcb);
			REQUIRE(st_stored_get(t, d, &idb, &srcb) == CM_OK);
			CHECK(idb.len == strlen(m->id) && memcmp(idb.data, m->id, idb.len) == 0);
			CHECK(srcb.len == strlen(m->src) && memcmp(srcb.data, m->src, srcb.len) == 0);
		}
		uint32_t got;
		CHECK(st_id_lookup(t, m->id, strlen(m->id), &got) == CM_OK && got == d);
	}
	uint32_t got;
	CHECK(st_id_lookup(t, "missing", 7, &got) == CM_ENOTFOUND);
	CHECK(st_stored_get(t, nlive, &idb, &srcb) == CM_ENOTFOUND);
	/* the sparse reader gives what the block reader gives, at strides that
	 * stay sparse, turn dense within a block, and skip blocks */
	const st_field_info *cols[] = {fk, fn, fp};
	const uint32_t strides[] = {1, 2, 15, 17, 97, 1001, 4099};
	for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++)
		for (size_t k = 0; k < sizeof(strides) / sizeof(strides[0]); k++) {
			st_colblock full = {0}, sp = {0};
			bool same = true;
			for (uint32_t d = (uint32_t)k; d < nlive && same; d += strides[k]) {
				const int64_t *a, *b;
				int na = st_col_values(t, cols[c], &full, d, &a);
				int nb = st_col_values_sparse(t, cols[c], &sp, d, &b);
				same = na == nb && (na <= 0 || memcmp(a, b, (size_t)na * 8) == 0);
				CHECKF(same, "column %s doc %u stride %u: %d vs %d values",
				       cols[c]->name, d, strides[k], na, nb);
			}
			st_colblock_free(&full);
			st_colblock_free(&sp);
		}
	/* st_col_count_one (the doc it stops at read with st_col_values_sparse
	 * on the same cb, which may decode the block whole) counts what the
	 * block reader gives, values at or past ncounts left out */
	const st_field_info *ccols[] = {fk, fn, fp, fseq};
	static uint32_t cdocs[1 << 14], cgot[1 << 12], cwant[1 << 12];
	for (size_t c = 0; c < sizeof(ccols) / sizeof(ccols[0]); c++)
		for (size_t k = 0; k < sizeof(strides) / sizeof(strides[0]); k++) {
			st_colblock full = {0}, cb = {0};
			size_t nd = 0;
			memset(cgot, 0, sizeof cgot);
			memset(cwant, 0, sizeof cwant);
			for (uint32_t d = (uint32_t)k; d < nlive && nd < 1 << 14; d += strides[k]) {
				const int64_t *a;
				int na = st_col_values(t, ccols[c], &full, d, &a);
				for (int i = 0; i < na; i++)
					if ((uint64_t)a[i] < 1 << 12)
						cwant[a[i]]++;
				cdocs[nd++] = d;
			}
			bool ok = true;
			for (size_t i = 0; i < nd && ok;) {
				int r = st_col_count_one(t, ccols[c], &cb, cdocs + i, nd - i, cgot,
				                         1 << 12);
				ok = r >= 0;
				i += (size_t)(r > 0 ? r : 0);
				if (ok && i < nd) {
					const int64_t *b;
					int nb =
					    st_col_values_sparse(t, ccols[c], &cb, cdocs[i++], &b);
					ok = nb >= 0;
					for (int j = 0; j < nb; j++)
						if ((uint64_t)b[j] < 1 << 12)
							cgot[b[j]]++;
				}
			}
			CHECKF(ok && memcmp(cgot, cwant, sizeof cgot) == 0,
			       "count_one %s stride %u", ccols[c]->name, strides[k]);
			st_colblock_free(&full);
			st_colblock_free(&cb);
		}
	/* zone maps agree with decoded blocks */
	for (uint32_t b = 0; b * ST_COL_BLOCK < nlive; b++) {
		int64_t mn, mx;
		uint32_t nv;
		REQUIRE(st_col_zone(t, fn, b, &mn, &mx, &nv) == CM_OK);
		REQUIRE(st_col_load(t, fn, b, &cbn) == CM_OK);
		CHECK(nv == cbn.nvalues && (nv == 0 || (mn == cbn.min && mx == cbn.max)));
		for (uint32_t k = 0; k < cbn.nvalues; k++)
			CHECK(cbn.vals[k] >= mn && cbn.vals[k] <= mx);
	}
	/* boolean terms */
	exp_post bt = {0}, bf = {0};
	for (uint32_t d = 0; d < nlive; d++)
		if (live[d]->has_flag)
			exp_add(live[d]->flag ? &bt : &bf, d, 0);
	check_postings(t, fb, "true", &bt, false);
	check_postings(t, fb, "false", &bf, false);

	st_colblock_free(&cbk);
	st_colblock_free(&cbn);
	st_colblock_free(&cbp);
	st_colblock_free(&cbb);
	st_colblock_free(&cbw);
	st_colblock_free(&cbs);
	st_colblock_free(&cbv);
	cm_buf_free(&idb);
	cm_buf_free(&srcb);
	for (int w = 0; w < NVOCAB; w++)
		free(title[w].docs), free(title[w].freqs), free(title[w].pos);
	for (int k = 0; k < NTAGS; k++)
		free(tag[k].docs), free(tag[k].freqs), free(tag[k].pos);
	free(bt.docs), free(bt.freqs), free(bt.pos), free(bf.docs), free(bf.freqs), free(bf.pos);
	free(title);
	free(tag);
	free(lens);
	free(sorted);
	free(used);
	st_seg_txn_end(t);
	st_segment_close(s);
}

/* Builds a segment from docs[0..n), deleting those with del[i]. */
static void
build(const char *path, mdoc *docs, uint32_t n, const uint64_t *del, uint64_t gen, cm_pool *pool)
{
	st_segbuild *b = st_segbuild_create();
	st_value vals[32];
	for (uint32_t i = 0; i < n; i++) {
		st_doc d;
		to_doc(&docs[i], &d, vals);
		uint32_t no;
		cm_error err = {0};
		REQUIRE(st_segbuild_add(b, &d, docs[i].seq, 1, docs[i].version, &no, &err) == CM_OK);
		CHECK(no == i);
	}
	CHECK(st_segbuild_docs(b) == n);
	CHECK(st_segbuild_ram(b) > 0);
	cm_error err = {0};
	cm_err rc = st_segbuild_write(b, del, path, gen, pool, &err);
	if (rc)
		fprintf(stderr, "write: %s\n", err.reason);
	REQUIRE(rc == CM_OK);
	st_segbuild_destroy(b);
}

/* Accounts sample x20 (the W1 data): indexing rate, segment bytes, merge. */
static st_mapping *
converge_mapping(char **lines, size_t n)
{
	st_mapping *m = st_mapping_new();
	for (size_t i = 0; i < n; i++) {
		for (int attempt = 0; attempt < 3; attempt++) {
			st_doc d = {0};
			st_mapping *add = NULL;
			cm_error err = {0};
			if (st_doc_parse(m, "1", 1, lines[i], strlen(lines[i]), &d, &add, &err)) {
				st_mapping_unref(add);
				break;
			}
			st_doc_free(&d);
			if (!add)
				break;
			st_mapping *merged = NULL;
			if (st_mapping_merge(m, add, &merged, &err) == CM_OK) {
				st_mapping_unref(m);
				m = merged;
			}
			st_mapping_unref(add);
		}
	}
	return m;
}

static void
bench_accounts(const char *dir, cm_pool *pool)
{
	FILE *f = fopen("../cluster-scripts/sample/accounts-es.ndjson", "r");
	if (!f)
		f = fopen("cluster-scripts/sample/accounts-es.ndjson", "r");
	if (!f) {
		printf("accounts sample not found; skipping the benchmark\n");
		return;
	}
	char *line = NULL;
	size_t cap = 0, n = 0, lcap = 0;
	char **lines = NULL;
	ssize_t len;
	while ((len = getline(&line, &cap, f)) > 0) {
		if (len < 3)
			continue;
		if (n == lcap)
			lines = realloc(lines, (lcap = lcap ? lcap * 2 : 1024) * sizeof(char *));
		line[strcspn(line, "\n")] = 0;
		lines[n++] = strdup(line);
	}
	free(line);
	fclose(f);
	st_mapping *m = converge_mapping(lines, n);
	const int copies = 20;
	size_t total = n * copies;
	st_doc *docs = calloc(total, sizeof(st_doc));
	char (*ids)[24] = calloc(total, 24);
	uint64_t t0 = cm_now_ns();
	double pc0 = cm_cpu_seconds();
	size_t src_bytes = 0;
	for (size_t i = 0; i < total; i++) {
		snprintf(ids[i], 24, "%zu", i);
		st_mapping *add = NULL;
		cm_error err = {0};
		const char *src = lines[i % n];
		src_bytes += strlen(src);
		REQUIRE(st_doc_parse(m, ids[i], strlen(ids[i]), src, strlen(src), &docs[i], &add, &err) ==
		        CM_OK);
		REQUIRE(add == NULL);
	}
	uint64_t t1 = cm_now_ns();
	printf("accounts: parse %.0f docs/cpu-s\n", total / (cm_cpu_seconds() - pc0));
	/* four buffers of 5,000 docs, then a merge to one segment */
	st_segment *segs[4];
	uint64_t bytes4 = 0;
	double add_s = 0, write_s = 0, add_cpu = 0, write_cpu = 0;
	size_t ram = 0;
	for (int s = 0; s < 4; s++) {
		uint64_t a = cm_now_ns();
		double ca = cm_cpu_seconds();
		st_segbuild *b = st_segbuild_create();
		for (size_t i = s * total / 4; i < (s + 1) * total / 4; i++) {
			uint32_t no;
			cm_error err = {0};
			REQUIRE(st_segbuild_add(b, &docs[i], i, 1, 1, &no, &err) == CM_OK);
		}
		uint64_t w = cm_now_ns();
		double cw = cm_cpu_seconds();
		ram += st_segbuild_ram(b);
		char path[256];
		snprintf(path, sizeof(path), "%s/acc-%d.mdb", dir, s);
		cm_error err = {0};
		REQUIRE(st_segbuild_write(b, NULL, path, 100 + s, pool, &err) == CM_OK);
		st_segbuild_destroy(b);
		add_cpu += cw - ca;
		write_cpu += cm_cpu_seconds() - cw;
		add_s += (double)(w - a) / 1e9;
		write_s += (double)(cm_now_ns() - w) / 1e9;
		REQUIRE(st_segment_open(path, &segs[s], &err) == CM_OK);
		bytes4 += st_segment_bytes(segs[s]);
	}
	char path[256];
	snprintf(path, sizeof(path), "%s/acc-merged.mdb", dir);
	cm_error err = {0};
	double cpu0 = cm_cpu_seconds();
	uint64_t m0 = cm_now_ns();
	REQUIRE(st_segment_merge(segs, NULL, 4, path, 200, pool, 256u << 20, &err) == CM_OK);
	double merge_s = (double)(cm_now_ns() - m0) / 1e9, merge_cpu = cm_cpu_seconds() - cpu0;
	st_segment *merged;
	REQUIRE(st_segment_open(path, &merged, &err) == CM_OK);
	CHECK(st_segment_max_doc(merged) == total);
	printf("accounts x%d: %zu docs, %.1f MB source; parse %.0f docs/s; add %.0f docs/s "
	       "(builder %.1f MB); write %.2f s; add+write %.0f docs/s\n",
	       copies, total, src_bytes / 1e6, total / ((double)(t1 - t0) / 1e9), total / add_s,
	       ram / 1e6, write_s, total / (add_s + write_s));
	printf("accounts x%d: cpu: add %.3f s (%.0f docs/cpu-s), write %.3f cpu-s\n", copies, add_cpu,
	       total / add_cpu, write_cpu);
	printf("accounts x%d: 4 segments %.2f MB; merged %.2f MB in %.2f s (%.2f cpu-s, %.2f busy "
	       "threads)\n",
	       copies, bytes4 / 1e6, st_segment_bytes(merged) / 1e6, merge_s, merge_cpu,
	       merge_cpu / merge_s);
	/* where the bytes go: value bytes per section (and per field for T, P, C) */
	{
		MDB_env *env;
		MDB_txn *txn;
		MDB_dbi dbi;
		MDB_cursor *cur;
		REQUIRE(mdb_env_create(&env) == 0);
		REQUIRE(mdb_env_open(env, path, MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR, 0) == 0);
		REQUIRE(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0);
		REQUIRE(mdb_dbi_open(txn, NULL, 0, &dbi) == 0);
		MDB_stat st;
		mdb_stat(txn, dbi, &st);
		printf("  pages: branch %zu leaf %zu overflow %zu entries %zu\n", st.ms_branch_pages,
		       st.ms_leaf_pages, st.ms_overflow_pages, st.ms_entries);
		REQUIRE(mdb_cursor_open(txn, dbi, &cur) == 0);
		MDB_val k, v;
		uint64_t sec[256] = {0}, keys[256] = {0}, cnt[256] = {0};
		uint64_t fsz[4][1024] = {{0}};
		for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
		     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
			uint8_t tag = *(uint8_t *)k.mv_data;
			sec[tag] += v.mv_size;
			keys[tag] += k.mv_size;
			cnt[tag]++;
			int which = tag == 'T' ? 0 : tag == 'P' ? 1 : tag == 'C' ? 2 : tag == 'K' ? 3 : -1;
			if (which >= 0 && k.mv_size >= 3) {
				unsigned fid = ((uint8_t *)k.mv_data)[1] << 8 | ((uint8_t *)k.mv_data)[2];
				if (fid < 1024)
					fsz[which][fid] += v.mv_size + k.mv_size;
			}
		}
		for (int tg = 0; tg < 256; tg++)
			if (cnt[tg])
				printf("  %c: %llu entries, %.2f MB values, %.2f MB keys\n", tg,
				       (unsigned long long)cnt[tg], sec[tg] / 1e6, keys[tg] / 1e6);
		for (size_t fi = 0; fi < st_segment_nfields(merged) && fi < 1024; fi++) {
			const st_field_info *info = st_segment_field_at(merged, fi);
			if (fsz[0][fi] + fsz[1][fi] + fsz[2][fi] + fsz[3][fi] > 100000)
				printf("    %-28s T %.2f P %.2f C %.2f K %.2f MB (%llu terms)\n", info->name,
				       fsz[0][fi] / 1e6, fsz[1][fi] / 1e6, fsz[2][fi] / 1e6, fsz[3][fi] / 1e6,
				       (unsigned long long)info->num_terms);
		}
		mdb_cursor_close(cur);
		mdb_txn_abort(txn);
		mdb_env_close(env);
	}
	/* spot-check the merged segment */
	st_seg_txn *t;
	REQUIRE(st_seg_txn_begin(merged, &t) == CM_OK);
	cm_buf idb, srcb;
	cm_buf_init(&idb, CM_MEM_STORAGE);
	cm_buf_init(&srcb, CM_MEM_STORAGE);
	for (size_t i = 0; i < total; i += 997) {
		cm_buf_reset(&idb);
		cm_buf_reset(&srcb);
		REQUIRE(st_stored_get(t, (uint32_t)i, &idb, &srcb) == CM_OK);
		CHECK(srcb.len == strlen(lines[i % n]) && memcmp(srcb.data, lines[i % n], srcb.len) == 0);
	}
	cm_buf_free(&idb);
	cm_buf_free(&srcb);
	st_seg_txn_end(t);
	st_segment_close(merged);
	for (int s = 0; s < 4; s++)
		st_segment_close(segs[s]);
	for (size_t i = 0; i < total; i++)
		st_doc_free(&docs[i]);
	free(docs);
	free(ids);
	st_mapping_unref(m);
	for (size_t i = 0; i < n; i++)
		free(lines[i]);
	free(lines);
}

/* Merge of segments whose big text field is split by term range, and of
 * segments with different field sets. */
#define BIGV 30000
static void
test_range_merge(const char *dir, cm_pool *pool)
{
	st_field_def fb = {.path = "body", .type = ST_FT_TEXT, .analyzer = ST_AN_WHITESPACE,
	                   .index = true};
	st_field_def fo = {.path = "only0", .type = ST_FT_LONG, .index = true, .doc_values = true};
	st_field_def fk = {.path = "only2", .type = ST_FT_KEYWORD, .index = true, .doc_values = true};
	enum { NSEG = 3, NDOC = 3000, NW = 12 };
	static uint32_t words[NSEG][NDOC][NW];
	uint64_t *live[NSEG];
	st_segment *segs[NSEG];
	char path[256];
	for (int s = 0; s < NSEG; s++) {
		live[s] = calloc(st_bit_words(NDOC), 8);
		st_segbuild *b = st_segbuild_create();
		for (uint32_t d = 0; d < NDOC; d++) {
			char text[NW * 8 + 1] = "", id[32], kw[16];
			for (int w = 0; w < NW; w++) {
				words[s][d][w] = (uint32_t)(rnd() % BIGV);
				char wb[8];
				snprintf(wb, sizeof(wb), "w%05u ", words[s][d][w]);
				strcat(text, wb);
			}
			snprintf(id, sizeof(id), "r%d-%u", s, d);
			snprintf(kw, sizeof(kw), "k%u", d % 7);
			st_value vals[3] = {{.field = &fb, .s = text, .n = strlen(text)}};
			size_t nv = 1;
			if (s == 0)
				vals[nv++] = (st_value){.field = &fo, .i = d};
			if (s == 2)
				vals[nv++] = (st_value){.field = &fk, .s = kw, .n = strlen(kw)};
			st_doc doc = {.id = id, .id_len = strlen(id), .source = text, .source_len = strlen(text),
			              .values = vals, .nvalues = nv};
			uint32_t no;
			cm_error err = {0};
			REQUIRE(st_segbuild_add(b, &doc, d, 1, 1, &no, &err) == CM_OK);
			if (rnd() % 5)
				st_bit_set(live[s], d);
		}
		snprintf(path, sizeof(path), "%s/range-%d.mdb", dir, s);
		cm_error err = {0};
		REQUIRE(st_segbuild_write(b, NULL, path, 50 + s, NULL, &err) == CM_OK);
		st_segbuild_destroy(b);
		REQUIRE(st_segment_open(path, &segs[s], &err) == CM_OK);
	}
	snprintf(path, sizeof(path), "%s/range-merged.mdb", dir);
	cm_error err = {0};
	cm_err rc = st_segment_merge(segs, (const uint64_t *const *)live, NSEG, path, 60, pool,
	                             8u << 20, &err);
	if (rc)
		fprintf(stderr, "merge: %s\n", err.reason);
	REQUIRE(rc == CM_OK);
	st_segment *m;
	REQUIRE(st_segment_open(path, &m, &err) == CM_OK);
	/* model: per word, the live (new doc, position) pairs in order */
	uint32_t *cnt = calloc(BIGV, sizeof(uint32_t));
	uint32_t nd = 0;
	for (int s = 0; s < NSEG; s++)
		for (uint32_t d = 0; d < NDOC; d++)
			if (st_bit_get(live[s], d)) {
				for (int w = 0; w < NW; w++)
					cnt[words[s][d][w]]++;
				nd++;
			}
	CHECK(st_segment_max_doc(m) == nd);
	st_seg_txn *t;
	REQUIRE(st_seg_txn_begin(m, &t) == CM_OK);
	const st_field_info *f = st_segment_field(m, "body");
	REQUIRE(f);
	uint64_t nterms = 0;
	for (uint32_t w = 0; w < BIGV; w++)
		nterms += cnt[w] > 0;
	CHECK(f->num_terms == nterms);
	/* walk a sample of words fully: docs, freqs, positions */
	for (uint32_t w = 0; w < BIGV; w += 7) {
		char term[8];
		snprintf(term, sizeof(term), "w%05u", w);
		st_postings p;
		rc = st_postings_open(t, f, term, strlen(term), &p);
		if (!cnt[w]) {
			CHECK(rc == CM_ENOTFOUND);
			continue;
		}
		REQUIRE(rc == CM_OK);
		uint32_t nnd = 0, seen = 0;
		bool ok = true;
		uint32_t doc = st_postings_next(&p);
		for (int s = 0; s < NSEG && ok; s++)
			for (uint32_t d = 0; d < NDOC && ok; d++) {
				if (!st_bit_get(live[s], d))
					continue;
				uint32_t pos[NW], np = 0;
				for (int k = 0; k < NW; k++)
					if (words[s][d][k] == w)
						pos[np++] = (uint32_t)k;
				if (np) {
					uint32_t got[NW + 4];
					ok = doc == nnd && p.freq == np &&
					     st_postings_positions(&p, got, NW + 4) == (int)np &&
					     memcmp(got, pos, np * 4) == 0;
					seen += np;
					doc = st_postings_next(&p);
				}
				nnd++;
			}
		CHECKF(ok && doc == ST_NO_MORE_DOCS && seen == cnt[w], "word %u", w);
	}
	/* fields present in one input only */
	const st_field_info *o0 = st_segment_field(m, "only0"), *o2 = st_segment_field(m, "only2");
	REQUIRE(o0 && o2);
	st_colblock cb0 = {0}, cb2 = {0};
	uint32_t d = 0;
	for (int s = 0; s < NSEG; s++)
		for (uint32_t od = 0; od < NDOC; od++) {
			if (!st_bit_get(live[s], od))
				continue;
			const int64_t *v;
			int n0 = st_col_values(t, o0, &cb0, d, &v);
			CHECK(n0 == (s == 0) && (!n0 || v[0] == od));
			int n2 = st_col_values(t, o2, &cb2, d, &v);
			CHECK(n2 == (s == 2));
			if (n2 == 1) {
				const uint8_t *term;
				size_t len;
				char want[16];
				snprintf(want, sizeof(want), "k%u", od % 7);
				CHECK(st_ord_term(t, o2, (uint64_t)v[0], &term, &len) == CM_OK &&
				      len == strlen(want) && memcmp(term, want, len) == 0);
			}
			d++;
		}
	st_colblock_free(&cb0);
	st_colblock_free(&cb2);
	st_seg_txn_end(t);
	st_segment_close(m);
	for (int s = 0; s < NSEG; s++) {
		st_segment_close(segs[s]);
		free(live[s]);
	}
	free(cnt);
}

/* Longest keys: a 508-byte keyword term and a 510-byte id fit; one more
 * byte is refused at add time, never at write time. */
static void
test_long_keys(const char *dir)
{
	st_field_def fk = {.path = "k", .type = ST_FT_KEYWORD, .index = true, .doc_values = true};
	char term[600], id[600];
	memset(term, 'x', sizeof(term));
	memset(id, 'i', sizeof(id));
	st_segbuild *b = st_segbuild_create();
	st_value v = {.field = &fk, .s = term, .n = 508};
	st_doc d = {.id = id, .id_len = 510, .source = "{}", .source_len = 2, .values = &v,
	            .nvalues = 1};
	uint32_t no;
	cm_error err = {0};
	CHECK(st_segbuild_add(b, &d, 1, 1, 1, &no, &err) == CM_OK);
	v.n = 509;
	d.id_len = 3;
	CHECK(st_segbuild_add(b, &d, 2, 1, 1, &no, &err) == CM_EINVAL);
	v.n = 10;
	d.id_len = 511;
	CHECK(st_segbuild_add(b, &d, 3, 1, 1, &no, &err) == CM_EINVAL);
	d.id_len = 4;
	CHECK(st_segbuild_add(b, &d, 4, 1, 1, &no, &err) == CM_OK);
	char path[256];
	snprintf(path, sizeof(path), "%s/long.mdb", dir);
	REQUIRE(st_segbuild_write(b, NULL, path, 70, NULL, &err) == CM_OK);
	st_segbuild_destroy(b);
	st_segment *s;
	REQUIRE(st_segment_open(path, &s, &err) == CM_OK);
	CHECK(st_segment_max_doc(s) == 2);
	st_seg_txn *t;
	REQUIRE(st_seg_txn_begin(s, &t) == CM_OK);
	const st_field_info *f = st_segment_field(s, "k");
	REQUIRE(f);
	uint32_t doc;
	CHECK(st_id_lookup(t, id, 510, &doc) == CM_OK && doc == 0);
	CHECK(st_id_lookup(t, id, 4, &doc) == CM_OK && doc == 1);
	CHECK(st_id_lookup(t, id, 600, &doc) == CM_ENOTFOUND);
	st_postings p;
	CHECK(st_postings_open(t, f, term, 508, &p) == CM_OK && st_postings_next(&p) == 0);
	CHECK(st_postings_open(t, f, term, 600, &p) == CM_ENOTFOUND);
	uint64_t ord;
	CHECK(st_term_ord(t, f, term, 10, &ord) == CM_OK && ord == 0);
	CHECK(st_term_ord(t, f, term, 508, &ord) == CM_OK && ord == 1);
	CHECK(st_term_ord(t, f, term, 600, &ord) == CM_ENOTFOUND && ord == 2);
	CHECK(st_term_ord(t, f, term, 300, &ord) == CM_ENOTFOUND && ord == 1);
	st_terms *it;
	REQUIRE(st_terms_open(t, f, &it) == CM_OK);
	size_t len;
	CHECK(st_terms_seek(it, term, 300) && (st_terms_term(it, &len), len == 508));
	CHECK(!st_terms_seek(it, term, 600));
	st_terms_close(it);
	st_seg_txn_end(t);
	st_segment_close(s);
}

static const char *
path_of(const char *dir, int gen)
{
	static char p[256];
	snprintf(p, sizeof(p), "%s/seg-%d.mdb", dir, gen);
	return p;
}

/* Several threads reading one segment through their own txns: the lazily
 * loaded dictionary and norms state are shared. */
typedef struct reader_arg {
	st_segment *s;
	int bad;
} reader_arg;

static void *
reader_main(void *arg)
{
	reader_arg *a = arg;
	st_seg_txn *t;
	if (st_seg_txn_begin(a->s, &t)) {
		a->bad++;
		return NULL;
	}
	cm_buf id, src;
	cm_buf_init(&id, CM_MEM_STORAGE);
	cm_buf_init(&src, CM_MEM_STORAGE);
	const st_field_info *ft = st_segment_field(a->s, "title");
	for (uint32_t d = 0; d < st_segment_max_doc(a->s); d += 3) {
		cm_buf_reset(&id);
		cm_buf_reset(&src);
		a->bad += st_stored_get(t, d, &id, &src) != CM_OK;
	}
	a->bad += ft && !st_norms(t, ft);
	st_postings p;
	if (ft && st_postings_open(t, ft, "the", 3, &p) == CM_OK)
		while (st_postings_next_block(&p))
			;
	cm_buf_free(&id);
	cm_buf_free(&src);
	st_seg_txn_end(t);
	return NULL;
}

static void
test_concurrent_readers(const char *path)
{
	st_segment *s;
	cm_error err = {0};
	REQUIRE(st_segment_open(path, &s, &err) == CM_OK);
	pthread_t th[4];
	reader_arg args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (reader_arg){s, 0};
		pthread_create(&th[i], NULL, reader_main, &args[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(args[i].bad == 0);
	}
	st_segment_close(s);
}

/* Every doc of `docs` (n, in the postings' order) covered by one of the
 * impacts: a pair with freq >= its freq and norm <= its norm. */
static bool
impacts_cover(const st_impact *imp, unsigned ni, const uint32_t *docs, const uint32_t *freqs,
              uint32_t n, const uint8_t *norms)
{
	if (ni < 1 || ni > ST_IMPACTS)
		return false;
	for (uint32_t k = 0; k < n; k++) {
		bool ok = false;
		for (unsigned j = 0; j < ni && !ok; j++)
			ok = imp[j].freq >= freqs[k] && imp[j].norm <= (norms ? norms[docs[k]] : 0);
		if (!ok)
			return false;
	}
	return true;
}

/* Format 4's impacts: per block and per group of ST_IMPACT_GROUP blocks,
 * on a term whose (freq, norm) pairs have far more than ST_IMPACTS on
 * their frontier (merged pairs must still cover every doc) and a few
 * freqs past 255; doc_freq from the dictionary; seek_block. */
static void
test_impacts(const char *dir)
{
	st_field_def fb = {.path = "body", .type = ST_FT_TEXT, .analyzer = ST_AN_STANDARD,
	                   .index = true};
	enum { N = 6000 };
	st_segbuild *b = st_segbuild_create();
	char *text = malloc(8 * 1024);
	uint32_t *want = calloc(N, sizeof(uint32_t));
	for (uint32_t i = 0; i < N; i++) {
		uint32_t f = i % 3 == 0 ? 0 : 1 + (uint32_t)(rnd() % 40);
		if (i % 1000 == 7)
			f = 300 + (uint32_t)(rnd() % 50);
		uint32_t z = (uint32_t)(rnd() % 300);
		size_t at = 0;
		for (uint32_t k = 0; k < f; k++)
			at += (size_t)sprintf(text + at, "w ");
		for (uint32_t k = 0; k < z; k++)
			at += (size_t)sprintf(text + at, "z ");
		at += (size_t)sprintf(text + at, "x");
		want[i] = f;
		char id[16];
		snprintf(id, sizeof id, "i%u", i);
		st_value v = {.field = &fb, .s = text, .n = at};
		st_doc d = {.id = id, .id_len = strlen(id), .source = "{}", .source_len = 2,
		            .values = &v, .nvalues = 1};
		uint32_t no;
		cm_error err = {0};
		REQUIRE(st_segbuild_add(b, &d, i + 1, 1, 1, &no, &err) == CM_OK);
	}
	char path[256];
	snprintf(path, sizeof(path), "%s/impacts.mdb", dir);
	cm_error err = {0};
	REQUIRE(st_segbuild_write(b, NULL, path, 80, NULL, &err) == CM_OK);
	st_segbuild_destroy(b);
	st_segment *s;
	REQUIRE(st_segment_open(path, &s, &err) == CM_OK);
	st_seg_txn *t;
	REQUIRE(st_seg_txn_begin(s, &t) == CM_OK);
	const st_field_info *f = st_segment_field(s, "body");
	REQUIRE(f);
	const uint8_t *norms = st_norms(t, f);
	REQUIRE(norms);
	static const char *terms[] = {"w", "z", "x"};
	for (int ti = 0; ti < 3; ti++) {
		const char *term = terms[ti];
		uint32_t df;
		st_postings p;
		REQUIRE(st_postings_open(t, f, term, 1, &p) == CM_OK);
		CHECK(st_term_doc_freq(t, f, term, 1, &df) == CM_OK && df == p.doc_freq);
		CHECK(p.nblocks > ST_IMPACT_GROUP);
		static uint32_t gdocs[ST_IMPACT_GROUP * ST_BLOCK], gfreqs[ST_IMPACT_GROUP * ST_BLOCK];
		uint32_t gn = 0, merged = 0, any = 0;
		for (uint32_t n = st_postings_next_block(&p); n; n = st_postings_next_block(&p)) {
			st_impact imp[ST_IMPACTS];
			unsigned ni = st_postings_block_impacts(&p, p.block, imp);
			CHECKF(impacts_cover(imp, ni, p.docs, p.freqs, n, norms), "%s block %u", term,
			       p.block);
			for (unsigned j = 0; j < ni; j++) {
				any += imp[j].freq == UINT32_MAX;
				/* the frontier: freqs and norms both ascending */
				CHECK(j == 0 || (imp[j].freq > imp[j - 1].freq && imp[j].norm > imp[j - 1].norm));
			}
			merged += ni == ST_IMPACTS;
			if (ti == 0)
				for (uint32_t k = 0; k < n; k++)
					CHECK(p.freqs[k] == want[p.docs[k]]);
			memcpy(gdocs + gn, p.docs, n * sizeof(uint32_t));
			memcpy(gfreqs + gn, p.freqs, n * sizeof(uint32_t));
			gn += n;
			if (p.block % ST_IMPACT_GROUP == ST_IMPACT_GROUP - 1 || p.block + 1 == p.nblocks) {
				unsigned gi = st_postings_group_impacts(&p, p.block / ST_IMPACT_GROUP, imp);
				CHECKF(impacts_cover(imp, gi, gdocs, gfreqs, gn, norms), "%s group %u", term,
				       p.block / ST_IMPACT_GROUP);
				gn = 0;
			}
		}
		CHECK(st_postings_group_impacts(&p, p.nblocks / ST_IMPACT_GROUP + 1, NULL) == 0);
		if (ti == 0)
			CHECK(merged > 0 && any > 0); /* the cases this test is for happened */
		/* seek_block: to block b's first doc, undecoded blocks between */
		REQUIRE(st_postings_open(t, f, term, 1, &p) == CM_OK);
		uint32_t first = st_postings_next(&p);
		CHECK(first != ST_NO_MORE_DOCS);
		for (uint32_t bk = 1; bk < p.nblocks; bk += 1 + (uint32_t)(rnd() % 5)) {
			uint32_t d = st_postings_seek_block(&p, bk);
			CHECK(p.block == bk);
			CHECK(d > st_postings_block_last(&p, bk - 1) && d <= st_postings_block_last(&p, bk));
			CHECK(st_postings_next(&p) > d);
		}
		CHECK(st_postings_seek_block(&p, p.nblocks) == ST_NO_MORE_DOCS);
	}
	uint32_t df;
	CHECK(st_term_doc_freq(t, f, "nope", 4, &df) == CM_ENOTFOUND);
	/* a lookup hashes a block's directory the first time only: the three
	 * terms share one block, checked once by the lookups above */
	REQUIRE(s->tdir);
	uint64_t sums = atomic_load(&s->tdir->sums);
	CHECKF(sums == 1, "%llu directory sums", (unsigned long long)sums);
	for (int k = 0; k < 100; k++)
		CHECK(st_term_doc_freq(t, f, terms[k % 3], 1, &df) == CM_OK && df > 0);
	CHECK(atomic_load(&s->tdir->sums) == sums);
	st_seg_txn_end(t);
	st_segment_close(s);
	free(text);
	free(want);
}

int
main(void)
{
	static const char *words[NVOCAB] = {
	    "the", "of", "and", "a", "to", "in", "is", "you", "that", "it", "he", "was", "for",
	    "on", "are", "as", "with", "his", "they", "at", "be", "this", "have", "from", "or",
	    "one", "had", "by", "word", "but", "not", "what", "all", "were", "we", "when", "your",
	    "can", "said", "there"};
	memcpy(vocab, words, sizeof(words));
	for (int k = 0; k < NTAGS; k++) {
		char buf[64];
		static const char *stems[] = {"tag", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
		                              "\xf0\x9f\x98\x80", "Zeta", ""};
		snprintf(buf, sizeof(buf), "%s%d", stems[k % 6], k);
		tags[k] = strdup(buf);
	}
	char dir[] = "/tmp/segtestXXXXXX";
	REQUIRE(mkdtemp(dir));
	char path[256];
	cm_pool *pool = cm_pool_create(2, "segtest");
	/* SEGMENT_BENCH=1 ./segment_test: the accounts figures only */
	if (getenv("SEGMENT_BENCH")) {
		bench_accounts(dir, pool);
		cm_pool_destroy(pool);
		cm_rm_rf(dir);
		return check_report("segment_test");
	}

	/* 1. small segment, no deletes, inline (no pool) */
	{
		uint32_t n = 300;
		mdoc *docs = calloc(n, sizeof(mdoc));
		mdoc **live = calloc(n, sizeof(mdoc *));
		for (uint32_t i = 0; i < n; i++) {
			gen_doc(&docs[i], i, "a");
			live[i] = &docs[i];
		}
		snprintf(path, sizeof(path), "%s/seg-1.mdb", dir);
		build(path, docs, n, NULL, 1, NULL);
		CHECK(access(path, F_OK) == 0);
		check_segment(path, live, n, 1);
		free(docs);
		free(live);
	}
	/* 2. larger segment with deletes, on the pool: several column blocks */
	mdoc *all[3];
	uint64_t *dels[3];
	uint32_t sizes[3] = {9000, 500, 3000};
	for (int s = 0; s < 3; s++) {
		uint32_t n = sizes[s];
		all[s] = calloc(n, sizeof(mdoc));
		dels[s] = calloc(st_bit_words(n), 8);
		char pre[8];
		snprintf(pre, sizeof(pre), "s%d", s);
		for (uint32_t i = 0; i < n; i++) {
			gen_doc(&all[s][i], i, pre);
			if (rnd() % 7 == 0)
				st_bit_set(dels[s], i);
		}
	}
	{
		mdoc **live = calloc(sizes[0], sizeof(mdoc *));
		uint32_t nl = 0;
		for (uint32_t i = 0; i < sizes[0]; i++)
			if (!st_bit_get(dels[0], i))
				live[nl++] = &all[0][i];
		snprintf(path, sizeof(path), "%s/seg-2.mdb", dir);
		build(path, all[0], sizes[0], dels[0], 2, pool);
		check_segment(path, live, nl, 2);
		free(live);
	}
	/* 3. merge: three segments written without deletes, merged with
	 * deletes applied through live bitsets */
	{
		st_segment *segs[3];
		uint64_t *lives[3];
		mdoc **live = calloc(sizes[0] + sizes[1] + sizes[2], sizeof(mdoc *));
		uint32_t nl = 0;
		for (int s = 0; s < 3; s++) {
			snprintf(path, sizeof(path), "%s/seg-%d.mdb", dir, 10 + s);
			build(path, all[s], sizes[s], NULL, 10 + s, NULL);
			cm_error err = {0};
			REQUIRE(st_segment_open(path, &segs[s], &err) == CM_OK);
			lives[s] = calloc(st_bit_words(sizes[s]), 8);
			for (uint32_t i = 0; i < sizes[s]; i++)
				if (!st_bit_get(dels[s], i)) {
					st_bit_set(lives[s], i);
					live[nl++] = &all[s][i];
				}
		}
		snprintf(path, sizeof(path), "%s/seg-20.mdb", dir);
		cm_error err = {0};
		cm_err rc = st_segment_merge(segs, (const uint64_t *const *)lives, 3, path, 20, pool,
		                             64u << 20, &err);
		if (rc)
			fprintf(stderr, "merge: %s\n", err.reason);
		REQUIRE(rc == CM_OK);
		check_segment(path, live, nl, 20);
		test_concurrent_readers(path_of(dir, 20));
		/* merge again with everything live (NULL bitsets) */
		nl = 0;
		for (int s = 0; s < 3; s++)
			for (uint32_t i = 0; i < sizes[s]; i++)
				live[nl++] = &all[s][i];
		snprintf(path, sizeof(path), "%s/seg-21.mdb", dir);
		rc = st_segment_merge(segs, NULL, 3, path, 21, NULL, 1u << 20, &err);
		REQUIRE(rc == CM_OK);
		check_segment(path, live, nl, 21);
		for (int s = 0; s < 3; s++) {
			st_segment_close(segs[s]);
			free(lives[s]);
		}
		free(live);
	}
	test_range_merge(dir, pool);
	test_long_keys(dir);
	test_impacts(dir);
	/* 4. empty segment (every doc deleted) */
	{
		uint64_t alld[1] = {~0ull};
		snprintf(path, sizeof(path), "%s/seg-30.mdb", dir);
		build(path, all[1], 10, alld, 30, NULL);
		check_segment(path, NULL, 0, 30);
	}
	for (int s = 0; s < 3; s++) {
		free(all[s]);
		free(dels[s]);
	}
	for (int k = 0; k < NTAGS; k++)
		free(tags[k]);
	cm_pool_destroy(pool);
	cm_rm_rf(dir);
	return check_report("segment_test");
}
