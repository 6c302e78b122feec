/* Private to the aggregation code: spec tree, per-bucket state nodes, the
 * per-segment runtime and the ops table each aggregation kind fills in.
 *
 * Shape: an sr_agg spec node has sub-specs. A bucket's sub-aggregation
 * states are an array `agg_node **` parallel to spec->subs. Per-segment
 * reading (column block cache, filter bitsets, per-segment scratch lists)
 * lives in one agg_rt per spec node, shared by every bucket's state of
 * that spec, so nested states stay small. */
#ifndef SR_AGG_INT_H
#define SR_AGG_INT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "sr_agg.h"

#define AGG_MEM CM_MEM_SEARCH
#define AGG_MAX_DEPTH 32
#define AGG_MAX_NAME 256

typedef enum {
	AGG_ROOT,
	AGG_TERMS,
	AGG_HISTOGRAM,
	AGG_DATE_HISTOGRAM,
	AGG_RANGE,
	AGG_DATE_RANGE,
	AGG_FILTER,
	AGG_FILTERS,
	AGG_MISSING,
	AGG_MIN,
	AGG_MAX,
	AGG_SUM,
	AGG_AVG,
	AGG_STATS,
	AGG_EXTENDED_STATS,
	AGG_VALUE_COUNT,
	AGG_CARDINALITY,
	AGG_PERCENTILES,
	AGG_TOP_HITS,
	AGG_COMPOSITE,
	AGG_PERCENTILE_RANKS,
	AGG_WEIGHTED_AVG,
	AGG_RARE_TERMS,
	AGG_TOP_METRICS,
	AGG_GLOBAL,
	AGG_ADJACENCY_MATRIX,
	AGG_SIGNIFICANT_TERMS,
	AGG_SAMPLER,
	AGG_DIVERSIFIED_SAMPLER,
	AGG_GEO_BOUNDS,
	AGG_GEO_CENTROID,
	AGG_GEOHASH_GRID,
	AGG_GEOTILE_GRID,
	AGG_MULTI_TERMS,
	AGG_AUTO_DATE_HISTOGRAM,
	AGG_VARIABLE_WIDTH_HISTOGRAM,
	AGG_NESTED,
	AGG_REVERSE_NESTED,
	AGG_MEDIAN_ABSOLUTE_DEVIATION,
	AGG_KIND_COUNT
} agg_kind;

typedef struct agg_ops agg_ops;
enum { CONV_NONE, CONV_NANOS, CONV_SCALED, CONV_ULONG };

typedef struct agg_rt agg_rt;
typedef struct agg_node agg_node;

/* "missing": the value a doc without the field counts as. */
typedef struct agg_missing {
	bool set;
	bool is_num;
	double d;
	int64_t l;   /* integral form (dates: epoch ms) */
	char *s;     /* as given (string form), owned */
	size_t slen;
} agg_missing;

struct sr_agg {
	char *name;
	agg_kind kind;
	const agg_ops *ops;
	char *field;
	agg_missing missing;
	char *format; /* date format / numeric format, NULL = default */
	/* "value_type": the type an unmapped field's "missing" takes */
	bool has_value_type;
	st_field_type value_type;
	sr_agg **subs;
	size_t nsubs;
	void *p;      /* kind-specific parameters */
	int id;       /* index into the root state's runtime array */
	int nspecs;   /* root only: number of spec nodes */
	char *meta;   /* "meta" printed as JSON, echoed in the response; or NULL */
	struct agg_pipe **pipes; /* pipeline aggregations declared beside subs */
	size_t npipes;
	bool any_pipes; /* root only: some level declares a pipeline */
};

/* State of one aggregation inside one bucket. */
struct agg_node {
	const sr_agg *spec;
	int ftype;        /* st_field_type of the field when seen, -1 unknown */
	uint32_t epoch;   /* segment epoch when last registered dirty */
	void *d;          /* kind-specific */
};

typedef struct agg_root agg_root;

/* Per-spec, per-segment reading context. */
struct agg_rt {
	const sr_agg *spec;
	agg_root *root;
	const sr_seg_ctx *ctx;
	const st_field_info *fi; /* NULL: field absent in this segment */
	bool is_double, is_keyword;
	/* a range field (keyword terms of st_range_encode): the mapping's
	 * type, else 0; histograms read each range's bounds */
	st_field_type range_type;
	/* column values that aggregations see converted: date_nanos to millis,
	 * scaled_float and unsigned_long to sortable doubles */
	int conv; /* CONV_*: how agg_values converts column values */
	double scale;
	int64_t *conv_buf;
	int conv_cap;
	st_colblock cb;
	void *kd;               /* kind-specific per-segment data */
	agg_node **dirty;       /* states holding per-segment scratch */
	size_t ndirty, dirty_cap;
	uint32_t epoch;
	void *persist;          /* kind-specific, kept across segments (ops->rt_free) */
};

struct agg_root {
	const sr_agg *spec; /* the root spec */
	cm_error err;
	agg_rt *rts;       /* nspecs, indexed by spec->id */
	uint32_t epoch;
	bool in_segment;
	size_t seg_index;
	char *index;       /* index name for top_hits, may be NULL */
	uint32_t shard;
	uint64_t buckets;  /* collection-time bucket count guard */
};

struct sr_agg_state {
	agg_root root;
	agg_node **subs;   /* parallel to root.spec->subs */
	bool shard_level;  /* freshly collected, not yet trimmed to shard_size */
};

/* Render context: bucket count accounting across the response. */
typedef struct agg_render {
	cm_buf *out;
	cm_error *err;
	uint64_t buckets;
	bool typed; /* ?typed_keys: names written as "type#name" */
} agg_render;

struct agg_ops {
	const char *name;
	/* the parameter names ES's parser knows, comma-separated, for "did
	 * you mean" on an unknown one; NULL = no suggestions */
	const char *known;
	bool bucket;     /* may hold sub-aggregations */
	bool needs_field;
	cm_err (*parse)(sr_agg *a, const cJSON *body, cm_error *err);
	void (*free_params)(void *p);
	void *(*state_new)(const sr_agg *a);
	void (*state_free)(const sr_agg *a, void *d);
	/* per shard, against its mapping, before any segment (ES's checks when
	 * it builds a shard's aggregators); NULL: none */
	cm_err (*shard_check)(const sr_agg *a, const st_mapping *m, cm_error *err);
	/* per segment: rt->fi already resolved; may set rt->kd */
	cm_err (*seg_begin)(agg_rt *rt, cm_error *err);
	void (*collect)(agg_rt *rt, agg_node *n, const uint32_t *docs, const float *scores,
	                size_t cnt);
	void (*seg_flush)(agg_rt *rt, agg_node *n); /* dirty states at end_segment */
	void (*seg_end)(agg_rt *rt);                 /* frees rt->kd */
	/* Trims a freshly collected shard state (terms: shard_size). */
	void (*shard_finish)(const sr_agg *a, agg_node *n);
	void (*merge)(const sr_agg *a, agg_node *into, agg_node *from);
	cm_err (*render)(const sr_agg *a, const agg_node *n, agg_render *r);
	void (*encode)(const sr_agg *a, const agg_node *n, cm_buf *b);
	bool (*decode)(const sr_agg *a, agg_node *n, cm_rd *r);
	/* value for ordering buckets by this metric; key is the part after
	 * '.' (NULL for single-value metrics). false when unknown key. */
	bool (*metric_value)(const sr_agg *a, const agg_node *n, const char *key, double *v);
	void (*rt_free)(agg_rt *rt); /* frees rt->persist with the state */
};

extern const agg_ops agg_ops_terms, agg_ops_histogram, agg_ops_date_histogram, agg_ops_range,
    agg_ops_date_range, agg_ops_filter, agg_ops_filters, agg_ops_missing;
extern const agg_ops agg_ops_min, agg_ops_max, agg_ops_sum, agg_ops_avg, agg_ops_stats,
    agg_ops_extended_stats, agg_ops_value_count, agg_ops_cardinality, agg_ops_percentiles,
    agg_ops_top_hits;
extern const agg_ops agg_ops_composite, agg_ops_percentile_ranks, agg_ops_weighted_avg,
    agg_ops_rare_terms, agg_ops_top_metrics, agg_ops_global,
    agg_ops_adjacency_matrix, agg_ops_significant_terms;
extern const agg_ops agg_ops_sampler, agg_ops_diversified_sampler, agg_ops_geo_bounds,
    agg_ops_geo_centroid, agg_ops_geohash_grid, agg_ops_geotile_grid, agg_ops_multi_terms,
    agg_ops_auto_date_histogram, agg_ops_variable_width_histogram;
extern const agg_ops agg_ops_nested, agg_ops_reverse_nested, agg_ops_median_absolute_deviation;
/* agg_nested.c: sets each nested/reverse_nested spec's level and refuses
 * a reverse_nested outside a nested aggregation. */
cm_err agg_nested_check(sr_agg *root, cm_error *err);
bool agg_nested_value(const sr_agg *a, const agg_node *n, const char *rest, double *v);

/* ---- agg.c: shared machinery ---- */

agg_node *agg_node_new(const sr_agg *a);
void agg_node_free(agg_node *n);
agg_node **agg_subs_new(const sr_agg *parent);
void agg_subs_free(const sr_agg *parent, agg_node **subs);
void agg_subs_collect(agg_root *root, const sr_agg *parent, agg_node **subs, const uint32_t *docs,
                      const float *scores, size_t n);
/* from's sub states are folded into into's (both non-NULL). */
void agg_subs_merge(const sr_agg *parent, agg_node **into, agg_node **from);
void agg_subs_shard_finish(const sr_agg *parent, agg_node **subs);
void agg_insert_meta(cm_buf *b, size_t at, const char *meta);
/* Writes ,"name":{...} for each sub (leading comma included). */
cm_err agg_subs_render(const sr_agg *parent, agg_node *const *subs, agg_render *r);
void agg_subs_encode(const sr_agg *parent, agg_node *const *subs, cm_buf *b);
bool agg_subs_decode(const sr_agg *parent, agg_node **subs, cm_rd *r);
/* Orders buckets by a sub-aggregation value: path "name" or "name.key". */
bool agg_subs_value(const sr_agg *parent, agg_node *const *subs, const char *path, double *v);
bool agg_subs_path_ok(const sr_agg *parent, const char *path);

/* Opens / closes the per-segment runtimes of parent's sub-aggregations for
 * ctx (a sampler's replay feeds them outside the shard's own pass). */
cm_err agg_subs_rt_begin(agg_root *root, const sr_agg *parent, const sr_seg_ctx *ctx);
void agg_subs_rt_end(agg_root *root, const sr_agg *parent);
/* Replays every sampler's chosen docs under a (agg_sampler.c). */
cm_err agg_sampler_shard_end(agg_root *root, const sr_agg *a);
/* Registers n for a seg_flush at the end of the current segment. */
void agg_mark_dirty(agg_rt *rt, agg_node *n);
/* Values of doc in the current segment for rt's field: raw column values
 * (sortable longs for doubles, ordinals for keywords). */
int agg_values(agg_rt *rt, uint32_t doc, const int64_t **vals);
static inline double
agg_num(const agg_rt *rt, int64_t v)
{
	return rt->is_double ? st_sortable_to_double(v) : (double)v;
}
/* Counts buckets created while collecting; false (and sets the root error)
 * past the limit. */
bool agg_bucket_guard(agg_root *root, uint64_t more);
void agg_too_many_buckets(cm_error *err, uint64_t n);
bool agg_field_numeric_or_fail(agg_rt *rt, cm_error *err);
/* The type an aggregation treats a field as (date_nanos as date, the
 * scaled and unsigned numbers as double). */
int agg_ftype(st_field_type t);

/* ---- parsing helpers ---- */
cm_err agg_parse_num(const cJSON *v, const char *agg, const char *key, double *out,
                     cm_error *err);
cm_err agg_parse_int(const cJSON *v, const char *agg, const char *key, int64_t lo, int64_t hi,
                     int64_t *out, cm_error *err);
cm_err agg_parse_bool(const cJSON *v, const char *agg, const char *key, bool *out,
                      cm_error *err);
cm_err agg_parse_str(const cJSON *v, const char *agg, const char *key, char **out,
                     cm_error *err);
cm_err agg_unknown_param(const sr_agg *a, const char *key, cm_error *err);

/* ---- rendering helpers ---- */
void agg_json_str(cm_buf *b, const char *s, size_t n);
/* Doubles the way Java's Double.toString prints them (ES responses):
 * 1.0, 0.5, 1.0E7; NaN/inf as null. */
void agg_json_double(cm_buf *b, double v);
void agg_double_str(char *buf, size_t cap, double v);
/* v formatted with a java.text.DecimalFormat pattern ("Value is ##0.0",
 * "#,##0.00", "0.0%") into out; false when the pattern is not one of
 * those (then there is no text form). */
bool agg_decimal_format(const char *pattern, double v, char *out, size_t cap);
void agg_json_double_or_null(cm_buf *b, double v, bool present);

/* ---- encoding helpers ---- */
void agg_put_double(cm_buf *b, double v);
bool agg_get_double(cm_rd *r, double *v);
bool agg_get_count(cm_rd *r, uint64_t max, uint64_t *v);

/* ---- pipelines (agg_pipeline.c): run once on the rendered response ---- */
typedef struct agg_pipe agg_pipe;
bool agg_pipe_is_type(const char *type);
/* Parses the body of one pipeline aggregation; meta (may be NULL) is
 * copied. *out is the caller's (agg_pipe_free). */
cm_err agg_pipe_parse(const char *name, const char *type, const cJSON *body, const cJSON *meta,
                      agg_pipe **out, cm_error *err);
void agg_pipe_free(agg_pipe *p);
const char *agg_pipe_name(const agg_pipe *p);
/* Checks parents and buckets_path over the whole spec tree and orders each
 * level's pipelines after the ones they read. */
cm_err agg_pipe_check(sr_agg *root, cm_error *err);
/* Rewrites out[start..] (the rendered "aggregations" object) with every
 * pipeline applied. */
cm_err agg_pipe_apply(const sr_agg *root, cm_buf *out, size_t start, bool typed, cm_error *err);
/* ES's MovingFunctions (NaN values are skipped); holt_winters is false
 * with fewer than two periods of values. */
double agg_mf_max(const double *v, size_t n);
double agg_mf_min(const double *v, size_t n);
double agg_mf_sum(const double *v, size_t n);
double agg_mf_unweighted_avg(const double *v, size_t n);
double agg_mf_linear_weighted_avg(const double *v, size_t n);
double agg_mf_ewma(const double *v, size_t n, double alpha);
double agg_mf_holt(const double *v, size_t n, double alpha, double beta);
bool agg_mf_holt_winters(const double *v, size_t n, double alpha, double beta, double gamma,
                         int64_t period, bool multiplicative, double *out);
double agg_mf_std_dev(const double *v, size_t n, double avg);
/* ES's response type of the terms family (sterms, lterms, dterms, ...)
 * for typed_keys (agg_bucket.c). */
const char *agg_terms_type_name(const sr_agg *a, const agg_node *n);
/* histogram/date_histogram min_doc_count (agg_bucket.c) */
uint64_t agg_hist_min_doc_count(const sr_agg *a);
/* The bucket key of v under histogram spec h / of instant t (UTC ms) under
 * date_histogram spec h; h's time zone (NULL = UTC). Composite reuses them. */
double agg_hist_round_value(const sr_agg *h, double v);
int64_t agg_dh_round(const sr_agg *h, int64_t t);
const struct agg_tz *agg_hist_tz(const sr_agg *h);
/* Resolves a's field in ctx's segment into rt (agg.c). */
cm_err agg_rt_field(agg_root *root, agg_rt *rt, const sr_agg *a, const sr_seg_ctx *ctx);
bool agg_kind_multi_bucket(agg_kind k);
bool agg_kind_single_bucket(agg_kind k);

/* ---- dates (agg_tz.c) ---- */
typedef struct agg_tz agg_tz;
/* "+01:00", "-0530", "Z", "UTC", or an IANA name from the system tz data.
 * CM_EINVAL with ES's wording when unknown. */
cm_err agg_tz_parse(const char *name, agg_tz **out, cm_error *err);
void agg_tz_free(agg_tz *tz);
bool agg_tz_is_utc(const agg_tz *tz);
/* Offset east of UTC in ms at instant utc_ms. */
int64_t agg_tz_offset(const agg_tz *tz, int64_t utc_ms);
/* Same, plus the span [*lo, *hi) of instants sharing that offset (a
 * single instant when unknown), so callers can cache it. */
int64_t agg_tz_offset_span(const agg_tz *tz, int64_t utc_ms, int64_t *lo, int64_t *hi);
/* The UTC instant for local time local_ms (gaps: moved forward, overlaps:
 * the earlier instant, like java.time). */
int64_t agg_tz_local_to_utc(const agg_tz *tz, int64_t local_ms);
/* Formats utc_ms in tz with a Java date pattern or ES named format
 * (NULL = strict_date_optional_time). */
void agg_date_format(const agg_tz *tz, const char *format, int64_t utc_ms, char *buf,
                     size_t cap);
/* Parses a date, epoch millis or date math ("now-1d/d") to epoch ms. */
bool agg_date_parse(const char *s, const char *format, const agg_tz *tz, bool round_up,
                    int64_t *out);

/* civil calendar */
int64_t agg_days_from_civil(int64_t y, unsigned m, unsigned d);
void agg_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d);

/* ---- cardinality (hll.c) ---- */
typedef struct agg_hll agg_hll;
agg_hll *agg_hll_new(uint32_t precision_threshold);
void agg_hll_free(agg_hll *h);
void agg_hll_add(agg_hll *h, uint64_t hash);
void agg_hll_merge(agg_hll *into, const agg_hll *from);
uint64_t agg_hll_cardinality(const agg_hll *h);
void agg_hll_encode(const agg_hll *h, cm_buf *b);
agg_hll *agg_hll_decode(cm_rd *r, uint32_t precision_threshold);
int agg_hll_precision(uint32_t precision_threshold);

/* ---- percentiles (tdigest.c) ---- */
typedef struct agg_tdigest agg_tdigest;
agg_tdigest *agg_td_new(double compression);
void agg_td_free(agg_tdigest *t);
void agg_td_add(agg_tdigest *t, double x, double w);
void agg_td_merge(agg_tdigest *into, agg_tdigest *from);
double agg_td_quantile(agg_tdigest *t, double q); /* NaN when empty */
double agg_td_cdf(agg_tdigest *t, double x);      /* in [0, 1]; NaN when empty */
double agg_td_count(const agg_tdigest *t);
/* median absolute deviation; NaN when empty */
double agg_td_mad(agg_tdigest *t);
void agg_td_encode(agg_tdigest *t, cm_buf *b);
agg_tdigest *agg_td_decode(cm_rd *r, double compression);

/* "tdigest_percentiles", "hdr_percentile_ranks", ...: for typed_keys */
const char *agg_pct_type_name(const sr_agg *a);

/* ---- percentiles with "hdr" (hdr.c) ---- */
typedef struct agg_hdr agg_hdr;
agg_hdr *agg_hdr_new(int digits); /* digits: 0..5 */
void agg_hdr_free(agg_hdr *t);
/* false for a negative or infinite value, which is not recorded */
bool agg_hdr_add(agg_hdr *t, double v, uint64_t n);
void agg_hdr_merge(agg_hdr *into, agg_hdr *from);
double agg_hdr_percentile(agg_hdr *t, double percent); /* NaN when empty */
double agg_hdr_rank(agg_hdr *t, double x);             /* in [0, 100]; NaN when empty */
void agg_hdr_encode(agg_hdr *t, cm_buf *b);
agg_hdr *agg_hdr_decode(cm_rd *r, int digits);

#endif
