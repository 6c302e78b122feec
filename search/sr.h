/* Query execution over one shard: the query tree, the search request, the
 * per-shard result and the merge of shard results. The coordinator's merge
 * is the same stage whether shard results come from this process or over
 * the network. */
#ifndef SR_H
#define SR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "../storage/st_segment.h"
#include "../storage/st_shard.h"
#include "../storage/st_types.h"

typedef struct cJSON cJSON;

/* ---- query tree ---- */

typedef enum {
	SR_Q_MATCH_ALL,
	SR_Q_MATCH_NONE,
	SR_Q_TERM,
	SR_Q_TERMS,
	SR_Q_IDS,
	SR_Q_EXISTS,
	SR_Q_RANGE,
	SR_Q_PREFIX,
	SR_Q_WILDCARD,
	SR_Q_REGEXP,
	SR_Q_FUZZY,
	SR_Q_MATCH,
	SR_Q_MATCH_PHRASE,
	SR_Q_MATCH_PHRASE_PREFIX,
	SR_Q_MULTI_MATCH,
	SR_Q_BOOL,
	SR_Q_CONSTANT_SCORE,
	SR_Q_DIS_MAX,
	SR_Q_BOOSTING,
	SR_Q_QUERY_STRING,
	SR_Q_SIMPLE_QUERY_STRING,
} sr_query_kind;

typedef struct sr_query sr_query;

/* A query node. Strings are owned by the node (NUL-terminated copies).
 * Field names may be patterns ("name.*") where ES allows them. */
struct sr_query {
	sr_query_kind kind;
	float boost; /* 1.0 default */
	char *field;
	char *name;  /* _name, optional */
	/* term/prefix/wildcard/regexp/fuzzy/match*: the value as given */
	char *value;
	/* terms / ids / multi_match fields */
	char **values;
	size_t nvalues;
	/* range: bounds as strings (numbers, dates with date math, keywords) */
	char *gt, *gte, *lt, *lte;
	char *format, *time_zone;
	/* match family */
	bool op_and;           /* operator: and */
	char *minimum_should_match;
	char *fuzziness;       /* "AUTO", "0", "1", "2", NULL */
	int prefix_length, max_expansions;
	bool transpositions;
	char *analyzer;        /* NULL: the field's search analyzer */
	int slop;
	bool case_insensitive;
	char *multi_type;      /* multi_match type: best_fields, most_fields, phrase, ... */
	float tie_breaker;
	/* bool */
	sr_query **must, **should, **must_not, **filter;
	size_t nmust, nshould, nmust_not, nfilter;
	/* constant_score (filter), boosting (positive, negative), dis_max (queries) */
	sr_query *inner, *negative;
	float negative_boost;
	sr_query **queries;
	size_t nqueries;
	/* query_string / simple_query_string */
	char *default_field;
	bool default_op_and;
	int max_determinized_states;
};

sr_query *sr_query_new(sr_query_kind kind);
void sr_query_free(sr_query *q);
const char *sr_query_kind_name(sr_query_kind k);

/* Elasticsearch query DSL (the value of "query") to a tree. Unknown query
 * names and malformed shapes → CM_EPARSE with ES's wording, e.g.
 * "unknown query [foo]". */
cm_err sr_query_from_json(const cJSON *json, sr_query **out, cm_error *err);
/* The q= / query_string syntax (field:value, AND/OR/NOT, +/-, "phrases",
 * wildcards, [a TO b]). */
cm_err sr_query_string_parse(const char *text, const char *default_field, bool default_and,
                             sr_query **out, cm_error *err);

/* ---- search request ---- */

typedef enum { SR_SORT_SCORE, SR_SORT_DOC, SR_SORT_FIELD } sr_sort_kind;

typedef struct sr_sort_key {
	sr_sort_kind kind;
	char *field;
	bool desc;
	bool missing_first; /* default: last */
} sr_sort_key;

/* A sort value as it appears in hit.sort / search_after. */
typedef struct sr_sort_value {
	enum { SR_SV_NULL, SR_SV_LONG, SR_SV_DOUBLE, SR_SV_STRING } type;
	int64_t l;
	double d;
	char *s;
} sr_sort_value;

typedef struct sr_agg sr_agg; /* aggregation spec tree: search/sr_agg.h */

#define SR_TRACK_ALL INT64_MAX

typedef struct sr_request {
	sr_query *query;         /* NULL = match_all */
	uint32_t from, size;     /* size default 10 */
	sr_sort_key *sort;
	size_t nsort;            /* 0 = by _score desc */
	sr_sort_value *search_after;
	size_t nsearch_after;
	int64_t track_total_hits; /* default 10000; SR_TRACK_ALL = true; 0 = false */
	uint64_t terminate_after; /* 0 = none */
	uint64_t deadline_ns;     /* absolute cm_now_ns() deadline, 0 = none */
	bool fetch_source;        /* default true */
	char **source_includes, **source_excludes;
	size_t nincludes, nexcludes;
	sr_agg *aggs;
	bool explain_scores;
} sr_request;

void sr_request_init(sr_request *r);
void sr_request_free(sr_request *r);
/* Parses a _search body (query, from, size, sort, search_after, _source,
 * track_total_hits, timeout, terminate_after, aggs/aggregations). */
cm_err sr_request_from_json(const cJSON *body, sr_request *r, cm_error *err);

/* ---- results ---- */

typedef struct sr_hit {
	char *id;
	float score;           /* NaN when not scored (ES "_score": null) */
	sr_sort_value *sort;   /* nsort values when sorting by fields */
	size_t nsort;
	char *source;          /* filtered _source JSON, NULL when not fetched */
	size_t source_len;
	uint32_t shard, doc;   /* tie-breaking: shard index, then global doc */
	uint64_t seq_no, primary_term;
	int64_t version;
} sr_hit;

typedef struct sr_agg_state sr_agg_state; /* mergeable partial aggregation state */

typedef struct sr_shard_result {
	uint32_t shard;
	uint64_t total;
	bool total_is_lower_bound; /* relation "gte" */
	float max_score;
	sr_hit *hits;
	size_t nhits;
	sr_agg_state *aggs;
	bool timed_out, terminated_early;
	cm_error error; /* a failed shard */
	/* Index name the merger renders as each hit's "_index" (one search may
	 * span several indices). Set by the caller of sr_search_shard before
	 * sr_merger_add; borrowed, must outlive the merger. */
	const char *index;
} sr_shard_result;

/* Runs req over one shard's point-in-time view. Returns the top from+size
 * hits (the coordinator pages), exact or lower-bound total, aggregation
 * partials. Deadline checked per block/window. */
cm_err sr_search_shard(st_reader *r, uint32_t shard, const sr_request *req, sr_shard_result *out,
                       cm_error *err);
cm_err sr_count_shard(st_reader *r, const sr_query *q, uint64_t deadline_ns, uint64_t *count,
                      cm_error *err);
void sr_shard_result_free(sr_shard_result *res);

/* Merge stage: shard results are added in the order they arrive. */
typedef struct sr_merger sr_merger;
sr_merger *sr_merger_create(const sr_request *req, size_t expected_shards);
void sr_merger_add(sr_merger *m, sr_shard_result *res); /* takes ownership of res contents */
void sr_merger_fail(sr_merger *m, uint32_t shard, const cm_error *why);
/* Renders the ES _search response body ({"took","timed_out","_shards",
 * "hits","aggregations"}) into out. */
void sr_merger_render(sr_merger *m, uint64_t took_ms, cm_buf *out);
void sr_merger_destroy(sr_merger *m);

/* ---- execution pieces shared with aggregations ---- */

/* Per-segment matching docs as a bitset over [0, max_doc) (deletes
 * applied). Used by filter/filters aggregations and delete_by_query. */
typedef struct sr_seg_ctx {
	st_reader *reader;
	size_t seg_index;
	st_seg_txn *txn;
	const st_segment *seg;
	const uint64_t *live;  /* NULL = all live */
	uint32_t doc_base;     /* global doc number of the segment's doc 0 */
	uint64_t deadline_ns;
} sr_seg_ctx;

cm_err sr_query_bitset(const sr_query *q, const sr_seg_ctx *ctx, uint64_t *bits, cm_error *err);

/* Collector receiving matching docs of one segment in ascending order, in
 * batches. scores may be NULL when scores are not needed. */
typedef struct sr_collector {
	void *self;
	cm_err (*begin_segment)(void *self, const sr_seg_ctx *ctx);
	void (*collect)(void *self, const uint32_t *docs, const float *scores, size_t n);
	void (*end_segment)(void *self);
} sr_collector;

#endif
