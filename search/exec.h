/* Private to search/: the compiled query (a shard-level plan, Lucene's
 * Weight) and the per-segment iterators it builds (Lucene's Scorer), with
 * one ops table. Every iterator has a bulk path, `fill`, which writes the
 * matches of a window of docs into a bitset (and adds scores into a float
 * array); the executor drives windows and checks the deadline once per
 * window, so no wrapper ever hides the bulk path. */
#ifndef SR_EXEC_H
#define SR_EXEC_H

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sr.h"

#define SR_WIN 4096 /* docs per window == docs per column block */
#define SR_WIN_WORDS (SR_WIN / 64)
#define SR_WIN_FIRST 256 /* the first window of a segment that may stop early */

/* Docs in the window starting at lo (aligned to its size): SR_WIN, or
 * with ramp, within the first block, SR_WIN_FIRST doubling (0, 256, 512,
 * 1024, 2048, 4096, ...). */
static inline uint32_t
sr_window_span(uint32_t lo, bool ramp)
{
	if (!ramp || lo >= SR_WIN)
		return SR_WIN;
	return lo < SR_WIN_FIRST ? SR_WIN_FIRST : lo;
}
#define SR_MAX_CLAUSES 4096     /* indices.query.bool.max_clause_count (ES 7: 1024; generous) */
#define SR_MAX_DET_STATES 10000 /* Lucene's default max determinized states */

/* ---- shard-level field statistics (BM25) ---- */

/* A field's statistics over a reader's segments, with the mapping's part
 * for queries. Made once per reader and shared by every search of it
 * (st_reader_aux): read-only but for the score cache, set once. */
typedef struct sr_fstat {
	char *name;
	st_field_type type;
	st_analyzer_kind analyzer;           /* the query's: the mapping's search analyzer */
	const st_analyzer *custom_analyzer; /* its chain when custom (owned by the mapping) */
	const st_analyzer *normalizer;      /* keyword: normalizes query terms */
	uint8_t flags;          /* union of ST_FI_* over segments */
	uint64_t doc_count;     /* summed over segments, deleted docs included (as Lucene) */
	uint64_t sum_ttf;
	float avgdl;
	double scale;           /* scaled_float: the mapping's scaling_factor (else 0) */
	/* range fields (keyword terms in segments): the mapping's type, else 0 */
	st_field_type range_type;
	/* 1 / (k1 * (1 - b + b * len / avgdl)) per norm byte: 256 floats made
	 * on first scoring use (a search names a few of a shard's dozens of
	 * fields), by whichever search comes first; NULL until then */
	_Atomic(float *) cache;
} sr_fstat;

/* score = weight - weight / (1 + freq * cache[norm]) (Lucene 8 BM25Scorer) */
static inline float
sr_bm25(float weight, const float *cache, float freq, uint8_t norm)
{
	return weight - weight / (1.0f + freq * cache[norm]);
}
float sr_idf(uint64_t df, uint64_t doc_count);
const float *sr_fstat_init_cache(sr_fstat *fs);
/* The field's BM25 cache, made on first use. */
static inline const float *
sr_fstat_cache(const sr_fstat *fs)
{
	const float *c = atomic_load_explicit(&((sr_fstat *)fs)->cache, memory_order_acquire);
	return c ? c : sr_fstat_init_cache((sr_fstat *)fs);
}

/* ---- automata (multiterm.c) ---- */

typedef struct sr_dfa sr_dfa;
/* Compiles a Lucene regexp (subset: . * + ? | () [] [^] {n} {n,} {n,m}
 * escapes "quoted") into a DFA over code points. CM_ELIMIT when more
 * than max_states DFA states would be needed. */
cm_err sr_dfa_regexp(const char *re, bool case_insensitive, int max_states, sr_dfa **out,
                     cm_error *err);
/* Wildcard: * any string, ? any one char, \ escapes. */
cm_err sr_dfa_wildcard(const char *pat, bool case_insensitive, sr_dfa **out, cm_error *err);
bool sr_dfa_match(const sr_dfa *d, const uint8_t *s, size_t n);
/* The literal prefix every match starts with (for seeking the terms dict). */
const char *sr_dfa_prefix(const sr_dfa *d, size_t *len);
/* A wildcard's literal tail every match ends with, when its first wildcard
 * is a '*' (then no term with the prefix dies in the automaton, and a term
 * is dropped by its last bytes without a walk); NULL otherwise. */
const char *sr_dfa_suffix(const sr_dfa *d, size_t *len);
void sr_dfa_free(sr_dfa *d);

/* Walks a sorted terms dictionary against a DFA (as Lucene's
 * AutomatonTermsEnum): each term reuses the states of the prefix it shares
 * with the term before, and a term that cannot match gives the smallest
 * key the next term that can match is at least (SR_WALK_SEEK), so runs of
 * terms are skipped by one seek. Terms must come in byte order. */
#define SR_WALK_MAX 512
#define SR_WALK_SEEK_MAX (SR_WALK_MAX + 64)
typedef enum { SR_WALK_MATCH, SR_WALK_NEXT, SR_WALK_SEEK, SR_WALK_END } sr_walk_verdict;
typedef struct sr_dfa_walk {
	const sr_dfa *dfa;
	int st[SR_WALK_MAX + 1]; /* the state after prev[0..i), -2 inside a code point */
	uint8_t prev[SR_WALK_MAX];
	size_t prev_valid; /* st[0..prev_valid] hold */
} sr_dfa_walk;
void sr_dfa_walk_init(sr_dfa_walk *w, const sr_dfa *d);
/* SR_WALK_SEEK: seek[0..*seek_len) (at most SR_WALK_SEEK_MAX bytes) is a
 * lower bound of the next matching term, not always above t; SR_WALK_END:
 * no later term matches. */
sr_walk_verdict sr_dfa_walk_term(sr_dfa_walk *w, const uint8_t *t, size_t n, uint8_t *seek,
                                 size_t *seek_len);

/* Damerau (optimal string alignment) edit distance on code points, or
 * max+1 if it exceeds max. */
int sr_edit_distance(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen, int max,
                     bool transpositions);
size_t sr_utf8_len(const uint8_t *s, size_t n); /* code points */
/* Edits a fuzziness ("AUTO", "AUTO:lo,hi", 0-2; NULL = AUTO) allows for a
 * term of cp_len code points. */
int sr_fuzzy_edits(const char *fuzziness, size_t cp_len);

/* ---- the plan ---- */

typedef enum {
	P_ALL,
	P_NONE,
	P_TERM,      /* scored term over postings */
	P_COLUMN,    /* numeric/date/boolean column: range [lo,hi] or value set */
	P_TERMSET,   /* constant-score set of terms (terms query) */
	P_TERMRANGE, /* keyword/text range over the terms dict */
	P_MULTI,     /* prefix / wildcard / regexp / case-insensitive term over the terms dict */
	P_IDS,
	P_EXISTS,
	P_BOOL,
	P_DISMAX,
	P_CONST,
	P_BOOSTING,
	P_PHRASE,
	P_GEO, /* geo_point column: a box (geo: top, left, bottom, right) or a circle (lat, lon,
	          meters) */
	/* kids[0] over the nested docs of nest_path, joined to their parents */
	P_NESTED,
	P_INTERVALS, /* iv: the interval tree a doc must yield an interval of */
	/* range field: the ranges (terms) in relation rel to [rq[0], rq[1]] */
	P_RANGEREL,
} sr_pkind;

enum { OCC_MUST, OCC_SHOULD, OCC_MUST_NOT, OCC_FILTER };

typedef struct sr_bytes {
	uint8_t *p;
	size_t n;
} sr_bytes;

/* The compiled rule of an intervals query (Lucene's IntervalsSource):
 * leaves are terms at a position of a field (any of them), inner nodes
 * combine their kids' intervals. */
typedef enum {
	SR_IVN_TERMS,     /* any of terms (prefix, wildcard, fuzzy: expanded) */
	SR_IVN_ORDERED,   /* kids in order, not overlapping */
	SR_IVN_UNORDERED, /* kids in any order */
	SR_IVN_OR,        /* any kid */
} sr_ivn_kind;
typedef struct sr_ivnode sr_ivnode;
struct sr_ivnode {
	sr_ivn_kind kind;
	const sr_fstat *fs; /* SR_IVN_TERMS */
	sr_bytes *terms;
	size_t nterms;
	sr_ivnode **kids;
	size_t nkids;
	int max_gaps; /* ordered, unordered: -1 = any */
	sr_iv_filter filter;
	sr_ivnode *filter_node;
};
void sr_ivnode_free(sr_ivnode *n);
/* The P_INTERVALS iterator of segment si (intervals.c); NULL: none match. */
typedef struct sr_plan sr_plan;
typedef struct sr_exec sr_exec;
typedef struct sr_it sr_it;
sr_it *sr_intervals_it_new(sr_exec *x, size_t si, const sr_plan *pl);

struct sr_plan {
	sr_pkind kind;
	bool scoring;
	float boost;          /* constant score / multiplier already folded in */
	const sr_fstat *fs;   /* field (NULL for ALL/NONE/IDS/composites) */
	/* P_TERM */
	sr_bytes term;
	float weight;         /* boost * idf */
	/* P_COLUMN */
	int64_t lo, hi;       /* inclusive, in column space */
	int64_t *set;         /* sorted value set, NULL for a range */
	size_t nset;
	/* P_TERMSET / P_IDS / P_TERMRANGE (terms[0], terms[1]; p NULL = open) */
	sr_bytes *terms;
	size_t nterms;
	bool lo_incl, hi_incl;
	/* P_MULTI */
	sr_dfa *dfa;          /* NULL: prefix = terms[0] */
	/* P_EXISTS: fields */
	const sr_fstat **fields;
	size_t nfields;
	/* composites */
	sr_plan **kids;
	uint8_t *occur;       /* P_BOOL */
	size_t nkids;
	int msm;              /* P_BOOL: minimum should match (already resolved) */
	float tie;            /* P_DISMAX */
	float neg_boost;      /* P_BOOSTING: kids[0] positive, kids[1] negative */
	/* P_PHRASE: npos positions, each kids-free list of alternatives */
	uint32_t npos;
	uint32_t *pos_offset; /* relative position of each */
	sr_bytes **pos_terms;
	size_t *pos_nterms;
	int slop;
	/* P_GEO */
	bool geo_circle;
	double geo[4];
	/* P_NESTED: the nested path, the enclosing nested path (NULL: the
	 * root docs), how child scores combine */
	char *nest_path, *nest_parent;
	sr_nest_mode nest_mode;
	/* P_INTERVALS (weight: the query's boost) */
	sr_ivnode *iv;
	/* P_RANGEREL: inclusive query bounds, how stored ranges must relate */
	st_range_bound rq[2];
	st_range_rel rel;
};

typedef struct sr_exec {
	st_reader *reader;
	size_t nseg;
	sr_seg_ctx *segs;
	const sr_fstat *fstats; /* the reader's, in name order (shared) */
	size_t nfstats;
	uint64_t deadline_ns;
	const _Atomic _Bool *cancel; /* sr_request.cancel */
	bool timed_out;
	cm_error *err;
	cm_error own_err; /* when the caller passed none */
	/* positions phrase iterators read (added as each is freed): docs whose
	 * positions were decoded, positions, position blocks located */
	uint64_t pos_docs, pos_read, pos_blocks;
} sr_exec;

/* Opens a txn per segment and gathers field statistics. */
cm_err sr_exec_open(sr_exec *x, st_reader *r, uint64_t deadline_ns, cm_error *err);
void sr_exec_close(sr_exec *x);
const sr_fstat *sr_exec_field(const sr_exec *x, const char *name);
/* Compiles q (NULL = match_all). scoring: whether scores are wanted. */
cm_err sr_plan_compile(sr_exec *x, const sr_query *q, bool scoring, sr_plan **out);
void sr_plan_free(sr_plan *p);
static inline bool
sr_deadline_passed(sr_exec *x)
{
	if (x->deadline_ns && cm_now_ns() > x->deadline_ns)
		x->timed_out = true;
	if (x->cancel && *x->cancel)
		x->timed_out = true;
	return x->timed_out;
}

/* ---- per-segment iterators ---- */

typedef struct sr_it sr_it;
typedef struct sr_it_ops {
	/* Doc-at-a-time: next doc, or first doc >= target (a no-op when the
	 * iterator is already there). ST_NO_MORE_DOCS at the end. */
	uint32_t (*next)(sr_it *it);
	uint32_t (*advance)(sr_it *it, uint32_t target);
	float (*score)(sr_it *it); /* at the current doc */
	/* Bulk: for each match d in [lo, hi), set bit d-lo of bits and, with
	 * scores, store (first setter) or add its score at scores[d-lo]. Docs
	 * whose score cannot reach min_score may be left out (block-max
	 * skipping); pass -INFINITY to get them all. Leaves doc >= hi. */
	void (*fill)(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores,
	             float min_score);
	/* An upper bound of the score of docs in [lo, hi). */
	float (*upper)(sr_it *it, uint32_t lo, uint32_t hi);
	void (*destroy)(sr_it *it);
} sr_it_ops;

struct sr_it {
	const sr_it_ops *ops;
	uint32_t doc; /* iterators are positioned on their first doc when built */
	uint64_t cost;
	bool scoring;
};

/* Builds the iterator tree of plan p for segment si. NULL on error (set in
 * x->err) or timeout; an empty segment gets a P_NONE iterator. */
cm_err sr_it_build(sr_exec *x, size_t si, const sr_plan *p, sr_it **out);
/* How many live documents of segment si p matches, when that is known
 * without visiting them (Lucene's Weight#count): match_all, match_none,
 * and a term in a segment without deletions (its doc_freq). false: run
 * the iterator. */
bool sr_plan_seg_count(sr_exec *x, size_t si, const sr_plan *p, uint64_t *n);
static inline void
sr_it_free(sr_it *it)
{
	if (it)
		it->ops->destroy(it);
}
/* Generic fill through next() for iterators without a bulk path. */
void sr_it_fill_generic(sr_it *it, uint32_t lo, uint32_t hi, uint64_t *bits, float *scores,
                        float min_score);
float sr_it_upper_inf(sr_it *it, uint32_t lo, uint32_t hi);

/* Receives each window's matches (deletes applied) of segment si; may
 * raise *min_score (the score a doc needs to be competitive). */
typedef cm_err (*sr_window_fn)(void *self, size_t si, uint32_t lo, uint32_t hi,
                               const uint64_t *bits, const float *scores, float *min_score);
/* Drives `it` over segment si window by window (SR_WIN docs), checking the
 * deadline once per window. */
cm_err sr_run_windows(sr_exec *x, size_t si, sr_it *it, bool want_scores, sr_window_fn fn,
                      void *self);
/* The same, and a window whose score bound (ops->upper) is at most *floor
 * is filled and handed over without scores: none of its docs can compete,
 * only their count is wanted (a full top-k heap counting every hit). With
 * rest non-NULL the caller knows the segment's count without visiting
 * (sr_plan_seg_count): the run stops, and sets *rest, once the bound of
 * every doc left is at most *floor. min0 is where min_score starts
 * (-INFINITY, or the bar a top-k whose count is settled already holds
 * when the segment begins: no window of it is then scored in full). */
cm_err sr_run_windows_floor(sr_exec *x, size_t si, sr_it *it, bool want_scores, sr_window_fn fn,
                            void *self, const float *floor, bool *rest, float min0);

static inline void
sr_win_put(uint64_t *bits, float *scores, uint32_t i, float s)
{
	uint64_t m = (uint64_t)1 << (i & 63);
	if (scores) {
		if (bits[i >> 6] & m)
			scores[i] += s;
		else
			scores[i] = s;
	}
	bits[i >> 6] |= m;
}

/* ---- nested documents (nested.c) ---- */

/* The P_NESTED iterator of segment si: the parents of the children of
 * pl->nest_path that pl->kids[0] matches, scored by pl->nest_mode. NULL
 * when none match (or on error, set in x->err). */
sr_it *sr_nested_it_new(sr_exec *x, size_t si, const sr_plan *pl);
/* The docs of nested path `path` in segment si that are live (their root
 * is), as a new bitset of max_doc bits; NULL when there are none. */
uint64_t *sr_nested_docs(sr_exec *x, size_t si, const char *path);
/* The parent level of a nested path: `parent` NULL means the root docs.
 * A new bitset of max_doc bits (not filtered for liveness). */
uint64_t *sr_nested_parents(sr_exec *x, size_t si, const char *parent);

/* The docs of segment c having nested path `path` (live or not), a new
 * bitset; NULL when none (or on error, set in err). */
uint64_t *sr_nested_path_docs(const sr_seg_ctx *c, const char *path, cm_error *err);
/* First set bit of bits >= from, or max_doc when none. */
uint32_t sr_nested_next_bit(const uint64_t *bits, uint32_t from, uint32_t max_doc);
/* Compiles q as the query of a nested query on nest_path. */
cm_err sr_plan_compile_in(sr_exec *x, const sr_query *q, const char *nest_path, bool scoring,
                          sr_plan **out);
/* True when q holds a nested query asking for inner_hits. */
bool sr_nested_wants_inner_hits(const sr_query *q);
/* The "inner_hits" object of root doc `doc` of segment si (whose stored
 * _source is src), appended to out; nothing when q asks for none. Each
 * inner hit starts with a \x01 byte where the merger puts "_index" and
 * "_type" (a raw control byte never occurs in JSON text). */
cm_err sr_nested_inner_hits(sr_exec *x, size_t si, uint32_t doc, const sr_query *q, const char *id,
                            const char *src, size_t src_len, cm_buf *out);

/* ---- sorting (sort.c) ---- */

typedef struct sr_sortval {
	bool missing;
	int64_t l;        /* long/date/boolean, doubles in sortable form, _doc */
	float f;          /* _score */
	const uint8_t *s; /* keyword bytes (valid while the segment txns are open) */
	size_t n;
} sr_sortval;

typedef struct sr_sort_field {
	sr_sort_kind kind;
	bool desc, missing_first;
	sr_sort_mode mode;
	const sr_fstat *fs;     /* NULL: unknown field (all missing) */
	bool is_double, is_keyword;
	bool is_id; /* _id: read from the stored document (ES 7 allows it) */
	int ftype;  /* st_field_type when known (else -1): how values are exported */
	double scale;                /* scaled_float */
	uint8_t after_ip[ST_IP_LEN]; /* ip: the search_after address */
	bool geo;                    /* _geo_distance from (geo_lat, geo_lon), in geo_unit m */
	double geo_lat, geo_lon, geo_unit;
	const char *nested_path; /* the request's: values come from nested docs */
	const sr_query *nested_filter;
} sr_sort_field;

typedef struct sr_sorter {
	sr_sort_field *keys;
	size_t nkeys;
	sr_sortval *after; /* search_after, NULL if none */
	/* per-segment state */
	const st_field_info **fi;
	st_colblock *cb;
	uint64_t **nchild;        /* nested keys: the segment's nested docs to read */
	struct sr_ordterm **ordc; /* keyword keys: ordinal -> term, filled lazily */
	size_t *nordc;
	uint32_t shard; /* the request-wide shard number, for _shard_doc */
	/* _id sort keys: the ids read so far (live until sr_sorter_free) */
	char **ids;
	size_t nids, capids;
	cm_buf idb;
} sr_sorter;

cm_err sr_sorter_init(sr_sorter *s, sr_exec *x, const sr_request *req, cm_error *err);
void sr_sorter_free(sr_sorter *s);
cm_err sr_sorter_segment(sr_sorter *s, sr_exec *x, size_t si);
/* Fills vals (nkeys) for doc of the current segment. */
cm_err sr_sorter_values(sr_sorter *s, sr_exec *x, size_t si, uint32_t doc, uint32_t gdoc,
                        float score, sr_sortval *vals);
/* One key's value (the others untouched). */
cm_err sr_sorter_key_value(sr_sorter *s, sr_exec *x, size_t si, size_t key, uint32_t doc,
                           uint32_t gdoc, float score, sr_sortval *v);
/* <0 when a sorts before b. */
int sr_sorter_cmp(const sr_sorter *s, const sr_sortval *a, const sr_sortval *b);
int sr_sorter_cmp_key(const sr_sorter *s, size_t key, const sr_sortval *a, const sr_sortval *b);
void sr_sorter_export(const sr_sorter *s, const sr_sortval *v, sr_sort_value *out);

/* ---- top-k (topk.c) ---- */

typedef struct sr_topk_entry {
	float score;
	uint32_t gdoc, seg, doc;
	sr_sortval *vals; /* nkeys, field sort only */
	uint32_t group;   /* collapse: the entry's group */
} sr_topk_entry;

/* ---- rescore (rescore.c) ---- */

/* Rescores the first rs->window_size of e[0..n) (best first) with rs and
 * re-sorts them by their new scores; the rest keep their place after
 * them. */
cm_err sr_rescore_window(sr_exec *x, const sr_rescore *rs, sr_topk_entry *e, size_t n);

#endif
