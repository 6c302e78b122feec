/* Query execution over one shard: the query tree, the search request, the
 * per-shard result and the merge of shard results. The coordinator's merge
 * is the same stage whether shard results come from this process or over
 * the network. */
#ifndef SR_H
#define SR_H

#include <stdatomic.h>
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
	SR_Q_GEO_BOUNDING_BOX, /* geo[]: top, left, bottom, right (degrees) */
	SR_Q_GEO_DISTANCE,     /* geo[]: lat, lon, distance in meters */
	SR_Q_NESTED,           /* field: path, inner: query, score_mode, inner_hits */
	/* match whose last term is a prefix (Lucene's bool of terms and a
	 * prefix); the match family's fields */
	SR_Q_MATCH_BOOL_PREFIX,
	SR_Q_INTERVALS, /* field, intervals: the rule tree */
} sr_query_kind;

/* nested query score_mode */
typedef enum { SR_NEST_AVG, SR_NEST_MAX, SR_NEST_MIN, SR_NEST_SUM, SR_NEST_NONE } sr_nest_mode;

typedef struct sr_query sr_query;

/* An intervals query's rule (ES's IntervalsSourceProvider): a leaf
 * (match, prefix, wildcard, fuzzy) or a combination (all_of, any_of),
 * each with an optional filter rule. Strings and kids are owned. */
typedef enum {
	SR_IV_MATCH,
	SR_IV_PREFIX,
	SR_IV_WILDCARD,
	SR_IV_FUZZY,
	SR_IV_ALL_OF,
	SR_IV_ANY_OF,
} sr_iv_kind;
typedef enum {
	SR_IVF_NONE,
	SR_IVF_AFTER,
	SR_IVF_BEFORE,
	SR_IVF_CONTAINED_BY,
	SR_IVF_CONTAINING,
	SR_IVF_NOT_CONTAINED_BY,
	SR_IVF_NOT_CONTAINING,
	SR_IVF_NOT_OVERLAPPING,
	SR_IVF_OVERLAPPING,
} sr_iv_filter;
/* A filter's name in the DSL ("containing", ...); "" for none. */
const char *sr_iv_filter_name(sr_iv_filter f);
typedef struct sr_interval sr_interval;
struct sr_interval {
	sr_iv_kind kind;
	char *text;      /* match: query; prefix: prefix; wildcard: pattern; fuzzy: term */
	char *analyzer;  /* NULL: the field's search analyzer */
	char *use_field; /* NULL: the query's field */
	int max_gaps;    /* match, all_of: -1 = unlimited */
	bool ordered;    /* match, all_of */
	char *fuzziness; /* fuzzy: NULL = AUTO */
	int prefix_length;
	bool transpositions;
	sr_interval **kids; /* all_of, any_of */
	size_t nkids;
	sr_iv_filter filter;
	sr_interval *filter_rule;
};
void sr_interval_free(sr_interval *r);

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
	uint8_t relation; /* range on a range field: st_range_rel (intersects by default) */
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
	/* Added by the DSL parser (query.c). multi_match / query_string /
	 * simple_query_string: per-field boosts parallel to values ("title^3"
	 * → values[i] "title", field_boosts[i] 3); NULL = all 1.0. */
	float *field_boosts;
	char *flags;         /* regexp flags ("ALL", "INTERSECTION|COMPLEMENT"); simple_query_string flags */
	bool zero_terms_all; /* match family: zero_terms_query "all" */
	bool lenient;
	/* Set on prefix/wildcard/fuzzy/regexp/range nodes built from query_string
	 * text: ES normalizes such values with the field's search analyzer
	 * (lowercases them for text fields) before matching. */
	bool analyze_multiterm;
	/* geo_bounding_box / geo_distance (see the kinds) */
	double geo[4];
	bool ignore_unmapped;
	/* nested: how children's scores make the parent's, and "inner_hits"
	 * as given (validated JSON text; NULL when none) */
	sr_nest_mode score_mode;
	char *inner_hits;
	/* intervals: the rule over field */
	sr_interval *intervals;
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
/* Expands a SR_Q_QUERY_STRING or SR_Q_SIMPLE_QUERY_STRING node into an
 * ordinary tree (bool/match/match_phrase/prefix/wildcard/regexp/fuzzy/
 * range/exists/match_all leaves) honouring its fields, default_operator,
 * fuzziness, phrase_slop, boost and _name. A field of "*" (the default
 * when neither default_field nor fields is given) means every searchable
 * field, as ES's index.query.default_field "*": the executor expands it,
 * like any pattern field. A term over several fields becomes a dis_max
 * (tie_breaker from the node for query_string, 1.0 for simple). Other
 * kinds are deep-copied. *out is owned by the caller (sr_query_free).
 * simple_query_string never fails on syntax (like ES). */
cm_err sr_query_string_expand(const sr_query *q, sr_query **out, cm_error *err);
/* Deep copy of a tree; the caller owns the copy. */
sr_query *sr_query_clone(const sr_query *q);

/* ---- search request ---- */

/* SR_SORT_SHARD_DOC: _shard_doc, the request-wide shard number << 32 | the
 * shard's doc (the tiebreaker of point-in-time paging). */
typedef enum { SR_SORT_SCORE, SR_SORT_DOC, SR_SORT_FIELD, SR_SORT_SHARD_DOC } sr_sort_kind;

typedef enum {
	SR_SORT_MODE_DEFAULT, /* ES: min for asc, max for desc */
	SR_SORT_MODE_MIN,
	SR_SORT_MODE_MAX,
	SR_SORT_MODE_SUM,
	SR_SORT_MODE_AVG,
	SR_SORT_MODE_MEDIAN,
} sr_sort_mode;

typedef struct sr_sort_key {
	sr_sort_kind kind;
	char *field;
	bool desc;
	bool missing_first; /* default: last */
	sr_sort_mode mode;    /* multi-valued fields */
	char *unmapped_type;  /* NULL, or the type to sort an unmapped field as */
	char *format;         /* NULL, or the date format hit sort values render in
	                       * and search_after values parse with */
	/* "numeric_type" date / date_nanos: dates of either resolution sort
	 * (and render) in this one, so an index of each merges in order */
	enum { SR_NT_NONE, SR_NT_DATE, SR_NT_DATE_NANOS } numeric_type;
	/* _geo_distance: distance of the field's points from (lat, lon), in
	 * units of geo_unit meters */
	bool geo, geo_ignore_unmapped;
	double geo_lat, geo_lon, geo_unit;
	/* "nested": {"path", "filter"}: the values of the root doc's nested
	 * objects of path (those the filter matches) */
	char *nested_path;
	sr_query *nested_filter;
} sr_sort_key;

/* A sort value as it appears in hit.sort / search_after. */
typedef struct sr_sort_value {
	/* SR_SV_ULONG: l is an unsigned_long column value (st_col_to_ulong);
	 * SR_SV_IP: s is the address as ES prints it, ordered as addresses.
	 * SR_SV_LONG a shard exports: d is SR_SV_DATE_MILLIS or
	 * SR_SV_DATE_NANOS when l is a date (0: a number), so the coordinator
	 * can render the sort's "format"; it travels in SortValue.unit. */
	enum { SR_SV_NULL, SR_SV_LONG, SR_SV_DOUBLE, SR_SV_STRING, SR_SV_ULONG, SR_SV_IP } type;
	int64_t l;
	double d;
	char *s;
} sr_sort_value;
#define SR_SV_DATE_MILLIS 1.0
#define SR_SV_DATE_NANOS 2.0

typedef struct sr_agg sr_agg; /* aggregation spec tree: search/sr_agg.h */

#define SR_TRACK_ALL INT64_MAX

/* One entry of "fields" or "docvalue_fields". */
typedef struct sr_fetch_field {
	char *field;           /* a name or a pattern with '*' wildcards */
	char *format;          /* date format to render with; NULL = the field's */
	bool include_unmapped; /* "fields" only: unmapped source values too, as sent */
} sr_fetch_field;

/* One query rescorer of "rescore" (ES's QueryRescorer). */
typedef enum {
	SR_RESCORE_TOTAL,
	SR_RESCORE_MULTIPLY,
	SR_RESCORE_AVG,
	SR_RESCORE_MAX,
	SR_RESCORE_MIN,
} sr_rescore_mode;

typedef struct sr_rescore {
	uint32_t window_size;       /* default 10 */
	sr_query *query;            /* rescore_query, owned */
	float query_weight;         /* default 1 */
	float rescore_query_weight; /* default 1 */
	sr_rescore_mode mode;       /* default total */
} sr_rescore;

/* One "indices_boost" entry: a concrete index name (the coordinator
 * resolves aliases and patterns before the shards see it) and its boost. */
typedef struct sr_index_boost {
	char *index;
	float boost;
} sr_index_boost;

typedef struct sr_request {
	sr_query *query;         /* NULL = match_all */
	/* "post_filter": narrows hits and total, not aggregations; NULL = none */
	sr_query *post_filter;
	bool has_min_score; /* "min_score": docs scoring below it are left out */
	float min_score;
	sr_rescore *rescore; /* "rescore", applied in order */
	size_t nrescore;
	sr_index_boost *index_boosts; /* "indices_boost", first match wins */
	size_t nindex_boosts;
	/* "collapse": one hit per value of this keyword or numeric field (its
	 * inner_hits are the coordinator's: shards only validate them) */
	char *collapse_field;
	bool profile;            /* "profile": time the shard's phases */
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
	uint64_t timeout_ns;      /* the relative "timeout" (0 = none), for remote shards */
	bool version;             /* render _version per hit */
	bool seq_no_primary_term; /* render _seq_no and _primary_term per hit */
	bool track_scores;        /* compute scores even when sorting by fields */
	sr_fetch_field *fields;   /* "fields": values read from _source by the mapping */
	size_t nfields;
	sr_fetch_field *docvalue_fields; /* "docvalue_fields": the same in doc-value form */
	size_t ndocvalue_fields;
	bool stored_fields_none; /* "stored_fields": "_none_": hits without _id and _source */
	struct sr_highlight *highlight; /* "highlight" (highlight.h), NULL = none */
	struct sr_suggest *suggest;     /* "suggest" (suggest.c), NULL = none */
	/* ES's query phase alone: hits carry score, sort values and doc
	 * numbers but no _id/_source/metadata (no stored-document reads).
	 * Used by benchmarks, scroll pages and a node's search over several
	 * shards (query then fetch: sr_fetch_hits); default false. */
	bool query_phase_only;
	/* Set by another thread: the search stops at its next block check, as
	 * on its deadline (a hedged shard request whose other copy answered
	 * first). NULL: never. */
	const _Atomic _Bool *cancel;
	/* ?typed_keys (a URL parameter, never the body): aggregation names
	 * rendered as "type#name"; suggesters are to prefix theirs (term#,
	 * phrase#) by the same flag. Default false. */
	bool typed_keys;
	/* "stats": the search stats groups the request counts in (the node's
	 * _stats search.groups), never read here; NULL = none */
	char **stats_groups;
	size_t nstats_groups;
	/* For the node's shard request cache (node/nd_reqcache.h), never read
	 * here: the body's bytes as the shards receive it (borrowed, NULL =
	 * not cacheable) and ?request_cache (SR_RC_*). */
	const char *cache_key;
	size_t cache_key_len;
	enum { SR_RC_UNSET, SR_RC_FALSE, SR_RC_TRUE } request_cache;
} sr_request;

void sr_request_init(sr_request *r);
void sr_request_free(sr_request *r);
/* Parses a _search body (query, from, size, sort, search_after, _source,
 * track_total_hits, timeout, terminate_after, aggs/aggregations, version,
 * seq_no_primary_term, track_scores, explain, fields, docvalue_fields,
 * stored_fields, and empty script_fields and runtime_mappings). body may be NULL (all
 * defaults). Unknown keys → CM_EPARSE "Unknown key for a START_OBJECT in
 * [x]."; ES features not implemented (highlight, post_filter, ...) →
 * CM_EINVAL naming them. On error r holds what was parsed so far; the
 * caller still calls sr_request_free. */
cm_err sr_request_from_json(const cJSON *body, sr_request *r, cm_error *err);
/* cJSON reads numbers as doubles. This turns each number node of root
 * (parsed from src) that is an integer beyond 2^53 into a string node of
 * its exact text, which term/range/search_after values read as numbers,
 * so long and unsigned_long values stay exact (also in the body a
 * coordinator forwards). A tree whose numbers cannot be paired with the
 * text is left as it is. */
void sr_json_exact_integers(cJSON *root, const char *src, size_t len);
/* The same pairing, but the nodes stay numbers and carry their text in
 * valuestring (for readers that know to look). */
void sr_json_number_texts(cJSON *root, const char *src, size_t len);
/* URL parameter forms, applied on top of a parsed body: sort=
 * "f1:desc,f2,_score" and _source / _source_includes / _source_excludes
 * (comma lists; _source may be true/false). NULL arguments are skipped. */
cm_err sr_request_sort_param(sr_request *r, const char *sort, cm_error *err);
cm_err sr_request_source_params(sr_request *r, const char *source, const char *includes,
                                const char *excludes, cm_error *err);
/* ---- suggesters (suggest.c) ---- */

typedef struct sr_suggest sr_suggest;
/* Parses the value of "suggest" (term, phrase and completion suggesters). *out is owned by the
 * caller (sr_suggest_free). */
cm_err sr_suggest_from_json(const cJSON *v, sr_suggest **out, cm_error *err);
void sr_suggest_free(sr_suggest *s);
/* ?typed_keys=true: names render as "term#name", "phrase#name", "completion#name". */
void sr_suggest_set_typed_keys(sr_suggest *s, bool on);
/* Runs the suggesters over one shard's view into res->suggest (JSON);
 * past deadline_ns (0 = none) the term walks stop and res->timed_out is set. */
struct sr_shard_result;
cm_err sr_suggest_shard(const sr_suggest *s, st_reader *r, uint64_t deadline_ns,
                        struct sr_shard_result *res, cm_error *err);
/* The coordinator's side: partials folded in any order, rendered once. */
typedef struct sr_suggest_acc sr_suggest_acc;
sr_suggest_acc *sr_suggest_acc_new(const sr_suggest *s);
/* index names the completion options of a shard's partial that carry none. */
void sr_suggest_acc_add(sr_suggest_acc *a, const char *partial, size_t len, const char *index);
/* The folded partial (for a node-level merge), owned by the caller. */
char *sr_suggest_acc_take(sr_suggest_acc *a, size_t *len);
/* Appends ,"suggest":{...} to out. */
void sr_suggest_acc_render(sr_suggest_acc *a, cm_buf *out);
void sr_suggest_acc_free(sr_suggest_acc *a);

/* ---- search templates (mustache.c) ---- */

/* Appends the rendering of tmpl[0..len) with params (an object, or NULL)
 * to out. {{name}}, {{a.b}} and {{.}} write a value, strings escaped for
 * a JSON string (ES's JSON-escaping mustache factory), numbers as their
 * shortest text, true/false, missing and null as nothing, arrays and
 * objects as JSON; {{{name}}} and {{&name}} unescaped; {{#name}}..{{/name}}
 * a section (once per array item, once with an object or another truthy
 * value as context, not at all for missing, null, false or []);
 * {{^name}}..{{/name}} its inverse; {{#toJson}}name{{/toJson}} the JSON
 * of a value; {{#join}}name{{/join}} an array's items joined with ",";
 * {{! comments}}. Unclosed or mismatched tags, partials and delimiter
 * changes → CM_EINVAL (type general_script_exception) saying where. */
cm_err sr_mustache_render(const char *tmpl, size_t len, const cJSON *params, cm_buf *out,
                          cm_error *err);

/* "1ms", "5s", "1m", "2h", "1d", "100micros", "10nanos"; "-1" = none (0).
 * CM_EPARSE with ES's message otherwise. */
cm_err sr_parse_time_value(const char *s, const char *setting, uint64_t *ns, cm_error *err);

/* _source filtering (st_source_filter in storage/st_types.h). */
static inline cm_err
sr_source_filter(const char *src, size_t len, char *const *includes, size_t ni,
                 char *const *excludes, size_t ne, cm_buf *out)
{
	return st_source_filter(src, len, includes, ni, excludes, ne, out);
}

/* ---- dates, for the other modules ---- */

/* A date in `format` (NULL = strict_date_optional_time||epoch_millis),
 * or date math ("now-1d/d", "2024-01-31||+1M/M"), to epoch ms; a date
 * without an offset is local to tz ("+01:00", "UTC", an IANA name; NULL =
 * UTC). CM_EINVAL when tz is unknown or the value does not parse. */
cm_err sr_date_parse(const char *s, const char *format, const char *tz, int64_t *out_ms,
                     cm_error *err);
/* Formats epoch ms with a Java pattern or ES named format (NULL =
 * strict_date_optional_time) in tz (NULL = UTC). */
cm_err sr_date_format(int64_t ms, const char *format, const char *tz, char *buf, size_t cap,
                      cm_error *err);

/* ---- results ---- */

typedef struct sr_hit {
	char *id;
	float score;           /* NaN when not scored (ES "_score": null) */
	sr_sort_value *sort;   /* nsort values when sorting by fields */
	size_t nsort;
	char *source;          /* filtered _source JSON, NULL when not fetched */
	size_t source_len;
	char *fields;          /* the hit's "fields" (JSON), NULL when none */
	size_t fields_len;
	char *highlight;       /* the hit's "highlight" (JSON), NULL when none */
	size_t highlight_len;
	/* nested inner hits (JSON; each inner hit opens with a \x01 byte the
	 * merger replaces with its "_index" and "_type"), NULL when none */
	char *inner_hits;
	size_t inner_hits_len;
	/* "_ignored": the fields whose malformed values the document skipped
	 * (a JSON array), NULL when none */
	char *ignored;
	size_t ignored_len;
	uint32_t shard, doc;   /* tie-breaking: shard index, then global doc */
	uint64_t seq_no, primary_term;
	int64_t version;
	/* "_index" of this hit when it differs from its shard result's (a
	 * node-level merge over several indices); borrowed, usually NULL. */
	const char *index;
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
	const char *node; /* node that served the shard, for failures; borrowed, may be NULL */
	/* A node-level merge (sr_merger_take) standing for this many successful
	 * shards; 0 means one. */
	uint32_t shards_merged;
	/* "profile": true: this shard's {"searches":[...],"aggregations":[...]}
	 * (JSON, owned), NULL otherwise */
	char *profile;
	size_t profile_len;
	/* "suggest": this shard's (or node's) partial suggestions (JSON,
	 * owned; see suggest.c), NULL when the request has none */
	char *suggest;
	size_t suggest_len;
} sr_shard_result;

/* Runs req over one shard's point-in-time view. Returns the top from+size
 * hits (the coordinator pages), exact or lower-bound total, aggregation
 * partials. Deadline checked per block/window. */
cm_err sr_search_shard(st_reader *r, uint32_t shard, const sr_request *req, sr_shard_result *out,
                       cm_error *err);
/* The same for a shard of index `index` (indices_boost applies by name;
 * NULL = no boost). */
cm_err sr_search_shard_in(st_reader *r, uint32_t shard, const char *index, const sr_request *req,
                          sr_shard_result *out, cm_error *err);
/* The worst hit the merge keeps once it holds from+size of them, for
 * shards of the same search still to run (sr_merger_bar fills it): a hit
 * ranked after it cannot reach the page, so the shard neither fetches
 * nor sends it. Only for searches ranked by score alone. */
typedef struct sr_hit_bar {
	_Atomic bool set;
	_Atomic float score;
	_Atomic uint32_t shard;
} sr_hit_bar;
cm_err sr_search_shard_bar(st_reader *r, uint32_t shard, const char *index, const sr_request *req,
                           sr_hit_bar *bar, sr_shard_result *out, cm_error *err);
/* ES's default index.highlight.max_analyzed_offset */
#define SR_HL_MAX_ANALYZED_OFFSET 1000000
/* The same, with the index's highlight.max_analyzed_offset (the bar
 * above and the others take SR_HL_MAX_ANALYZED_OFFSET). */
cm_err sr_search_shard_hl(st_reader *r, uint32_t shard, const char *index, const sr_request *req,
                          sr_hit_bar *bar, int64_t hl_max_analyzed_offset, sr_shard_result *out,
                          cm_error *err);
/* Query then fetch: whether every field a hit renders can be fetched
 * after the merge, from the hit's shard and doc alone (no collapse,
 * rescore, profile, highlight, fields or inner hits). A search over
 * several shards then runs them with query_phase_only and fetches only
 * the page it renders (sr_fetch_hits), not from+size hits per shard. */
bool sr_fetch_deferrable(const sr_request *req);
/* The fetch phase over one shard's reader: fills in place the _id,
 * _source and metadata of hits[0..n), each found by its doc (the shard's
 * doc number, as the query phase sets it); reorders hits[] (storage
 * order). The strings are the hits' own. */
cm_err sr_fetch_hits(st_reader *r, const sr_request *req, sr_hit **hits, size_t n, cm_error *err);
/* Names a shard's profile "[node][index][shard]" (after sr_search_shard). */
void sr_profile_set_id(sr_shard_result *res, const char *node, const char *index, int shard);
/* The boost indices_boost gives index (1 when none names it). */
float sr_request_index_boost(const sr_request *req, const char *index);
cm_err sr_count_shard(st_reader *r, const sr_query *q, uint64_t deadline_ns, uint64_t *count,
                      cm_error *err);
void sr_shard_result_free(sr_shard_result *res);
/* Frees the strings and sort values a hit owns (not the hit itself). */
void sr_hit_clear(sr_hit *h);
/* Moves *src into *dst (dst's old contents are not freed); src is zeroed. */
void sr_hit_move(sr_hit *dst, sr_hit *src);
void sr_sort_value_clear(sr_sort_value *v);

/* Merge stage: shard results are added in the order they arrive. The
 * result does not depend on that order: hits are ranked by the request's
 * sort, ties by shard then doc; aggregation partials are folded in shard
 * order (those arriving early wait for the gap to close) so float sums
 * come out the same too. res->shard must be a distinct number in
 * [0, expected_shards) per fan-out target for that (others merge at once).
 * req must outlive the merger. */
typedef struct sr_merger sr_merger;
sr_merger *sr_merger_create(const sr_request *req, size_t expected_shards);
/* Default "_index" for hits and failures (copied). */
void sr_merger_set_index(sr_merger *m, const char *index_name);
/* Takes the contents of res (hits, aggs, strings); res is left zeroed. A
 * res with error.code set counts as a failed shard. */
void sr_merger_add(sr_merger *m, sr_shard_result *res);
void sr_merger_fail(sr_merger *m, uint32_t shard, const cm_error *why);
/* Same with the index and node to report (either may be NULL); a
 * CM_ETIMEDOUT here does not by itself make the reply timed out (a copy
 * on a node held unreachable that misses its short wait is a shard
 * failure): the caller marks that (sr_merger_mark_timed_out), as
 * sr_merger_fail and a result carrying the error do. */
void sr_merger_fail_at(sr_merger *m, uint32_t shard, const char *index, const char *node,
                       const cm_error *why);
/* The reply says "timed_out": true (a shard lost to the deadline before it
 * could even report, e.g. a remote copy that never answered). */
void sr_merger_mark_timed_out(sr_merger *m);
/* Finishes the reduce: the error the whole request should fail with, if
 * any — every shard failed (first failure's status, type
 * "search_phase_execution_exception", "all shards failed"), or the
 * aggregations could not be rendered (too many buckets). Call before
 * sr_merger_render and answer with the error instead when it fails. */
cm_err sr_merger_reduce(sr_merger *m, cm_error *err);
/* Renders the ES _search response body ({"took","timed_out","_shards",
 * "hits","aggregations"}) into out (reduces first if not done). */
void sr_merger_render(sr_merger *m, uint64_t took_ms, cm_buf *out);
/* Per-node mode: instead of rendering, hands the merged partial result
 * (the best from+size hits in rank order, summed total and relation,
 * max_score, timed_out, the merged aggregation state) to out, which the
 * coordinator then sr_merger_add()s like one shard's result. out->shard
 * is set to `ordinal`; out->shards_merged to the successful shards. The
 * failures stay readable with sr_merger_failure() to forward them. */
void sr_merger_take(sr_merger *m, uint32_t ordinal, sr_shard_result *out);
/* The i-th failed shard (i < sr_merger_failed(m)); pointers valid while m
 * lives. */
void sr_merger_failure(const sr_merger *m, size_t i, uint32_t *shard, const char **index,
                       const char **node, const cm_error **why);
/* Counters for the caller (e.g. _count, logging). */
uint64_t sr_merger_total(const sr_merger *m);
/* Publishes the merge's worst kept hit to bar once from+size are kept (a
 * search ranked by score alone, no collapse or rescore); else nothing. */
void sr_merger_bar(const sr_merger *m, sr_hit_bar *bar);
size_t sr_merger_failed(const sr_merger *m);
/* After sr_merger_reduce: how many hits the page holds (ranks them), and
 * the shard and doc of its i-th (which shard a scroll page takes from). */
size_t sr_merger_page_len(sr_merger *m);
void sr_merger_page_hit(const sr_merger *m, size_t i, uint32_t *shard, uint32_t *doc);
/* After sr_merger_page_len: the page's i-th hit, the merger's, for a
 * fetch phase to fill before sr_merger_render. */
sr_hit *sr_merger_page_at(sr_merger *m, size_t i);
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
