/* Field types, analyzers, mappings and parsed documents: the vocabulary
 * shared by storage, search and the REST layer. */
#ifndef ST_TYPES_H
#define ST_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_err.h"

typedef struct cJSON cJSON;

typedef enum {
	ST_FT_TEXT,
	ST_FT_KEYWORD,
	ST_FT_LONG,
	ST_FT_INTEGER,
	ST_FT_SHORT,
	ST_FT_BYTE,
	ST_FT_DOUBLE,
	ST_FT_FLOAT,
	ST_FT_DATE,
	ST_FT_BOOLEAN,
	ST_FT_OBJECT, /* only in mappings; never stored as a segment field */
	ST_FT_BINARY, /* base64 in _source only: not indexed, no doc values */
	/* Added later; the numbers are stored in segment field infos, so they
	 * only ever grow. */
	ST_FT_IP,            /* 16-byte terms (IPv4 mapped into IPv6), ordinal column */
	ST_FT_DATE_NANOS,    /* column of nanoseconds since the epoch */
	ST_FT_HALF_FLOAT,    /* column of sortable doubles holding half-precision values */
	ST_FT_SCALED_FLOAT,  /* column of the scaled long: round(value * scaling_factor) */
	ST_FT_UNSIGNED_LONG, /* column of value ^ 2^63 (signed order = unsigned order) */
	ST_FT_GEO_POINT,     /* column of st_geo_encode(lat, lon) */
	/* Mapping only, like object: a document's leaves become keyword
	 * segment fields "<path>" (every leaf value) and "<path>.<key>"
	 * (that leaf's values), see docparse.c */
	ST_FT_FLATTENED,
	/* Mapping only: each input is a keyword term of the segment field
	 * "<path>" holding the analysed text, the weight and the input
	 * (st_completion_term), read by the completion suggester */
	ST_FT_COMPLETION,
	/* Mapping only: each range is a keyword term of the segment field
	 * "<path>", its inclusive bounds in order-preserving bytes
	 * (st_range_encode), so terms sort by lower then upper bound */
	ST_FT_INTEGER_RANGE,
	ST_FT_LONG_RANGE,
	ST_FT_FLOAT_RANGE,
	ST_FT_DOUBLE_RANGE,
	ST_FT_DATE_RANGE,
	ST_FT_IP_RANGE,
} st_field_type;

#define ST_FT_LAST ST_FT_GEO_POINT

typedef enum {
	ST_AN_STANDARD,
	ST_AN_SIMPLE,
	ST_AN_WHITESPACE,
	ST_AN_KEYWORD,
	ST_AN_ENGLISH,
} st_analyzer_kind;

const char *st_field_type_name(st_field_type t);
bool st_field_type_from_name(const char *name, st_field_type *out);
bool st_field_type_is_numeric(st_field_type t); /* long..float, date, boolean: column-only */
/* Kept as terms whose ordinals fill the column: keyword and ip. */
bool st_field_type_is_ordinal(st_field_type t);
/* Column holds sortable doubles: double, float, half_float. */
bool st_field_type_is_double(st_field_type t);
/* integer_range .. ip_range. */
bool st_field_type_is_range(st_field_type t);
/* Field types a segment may hold (not object or binary). */
bool st_field_type_stored(unsigned t);

/* ---- ip addresses (Lucene's InetAddressPoint encoding) ---- */

#define ST_IP_LEN 16
/* Parses an IPv4 (no leading zeros, as ES) or IPv6 address (RFC 4291 text
 * forms, "::" and a trailing dotted quad) into 16 bytes, IPv4 as
 * ::ffff:a.b.c.d. False when s is not an address. */
bool st_ip_parse(const char *s, size_t n, uint8_t out[ST_IP_LEN]);

/* geo_point: a point as ES takes it ({"lat":..,"lon":..}, "lat,lon", a
 * geohash, "POINT (lon lat)", [lon, lat]; a third coordinate is allowed
 * and dropped), and its column value: latitude and longitude each as 32
 * bits (Lucene's LatLonPoint encoding, ~1e-7 degrees), latitude high. */
bool st_geo_point(const cJSON *j, double *lat, double *lon);
int64_t st_geo_encode(double lat, double lon);
void st_geo_decode(int64_t v, double *lat, double *lon);
/* Great-circle distance in meters (haversine, ES's mean earth radius). */
double st_geo_distance(double lat1, double lon1, double lat2, double lon2);
/* "addr/len" into the first and last address of the block; len counts
 * bits of the address as written (0-32 for IPv4, 0-128 for IPv6). */
bool st_cidr_parse(const char *s, size_t n, uint8_t lo[ST_IP_LEN], uint8_t hi[ST_IP_LEN]);
/* Renders as ES does: dotted IPv4 for mapped addresses, RFC 5952 IPv6.
 * buf holds at least ST_IP_STRLEN bytes. */
#define ST_IP_STRLEN 48
void st_ip_format(const uint8_t ip[ST_IP_LEN], char *buf, size_t cap);

/* ---- half floats, unsigned longs ---- */

/* The nearest IEEE half-precision value (ties to even), as a double;
 * +-inf beyond the half range. */
double st_half_round(double d);
/* The next half value above (dir > 0) or below h, itself a half value. */
double st_half_next(double h, int dir);
/* A whole unsigned_long in 0..2^64-1 from decimal text; with `coerce`,
 * fractions truncate and exponents are read ("1.5" is 1, "1e3" is 1000).
 * False for negatives, out of range or not a number. */
bool st_ulong_parse(const char *s, bool coerce, uint64_t *out);
/* unsigned_long column encoding, order preserving. */
static inline int64_t
st_ulong_to_col(uint64_t u)
{
	return (int64_t)(u ^ 0x8000000000000000ull);
}
static inline uint64_t
st_col_to_ulong(int64_t v)
{
	return (uint64_t)v ^ 0x8000000000000000ull;
}
/* ---- range fields ---- */

/* A range's term: lower then upper bound, both inclusive, each 16 bytes
 * for ip_range and 8 (int64 or sortable double, sign bit flipped, big
 * endian) otherwise; byte order is value order. */
#define ST_RANGE_TERM_MAX (2 * ST_IP_LEN)
typedef struct st_range_bound {
	int64_t i; /* integer, long, date: the value; float, double: sortable form */
	uint8_t ip[ST_IP_LEN];
} st_range_bound;
size_t st_range_encode(st_field_type t, const st_range_bound *lo, const st_range_bound *hi,
                       uint8_t out[ST_RANGE_TERM_MAX]);
bool st_range_decode(st_field_type t, const uint8_t *term, size_t n, st_range_bound *lo,
                     st_range_bound *hi);
/* Compares two bounds of a field of type t. */
int st_range_cmp(st_field_type t, const st_range_bound *a, const st_range_bound *b);
/* How a query range [qlo, qhi] relates to a stored range [lo, hi]
 * (all inclusive), as ES's range query "relation" reads it. */
typedef enum { ST_REL_INTERSECTS, ST_REL_WITHIN, ST_REL_CONTAINS } st_range_rel;
bool st_range_matches(st_field_type t, st_range_rel rel, const st_range_bound *lo,
                      const st_range_bound *hi, const st_range_bound *qlo,
                      const st_range_bound *qhi);
/* The least and greatest bound of a range type (an open end). */
void st_range_min(st_field_type t, st_range_bound *b);
void st_range_max(st_field_type t, st_range_bound *b);
/* The next bound above (dir > 0) or below v; false when v is already
 * the greatest (least) value: ES turns gt/lt into inclusive bounds so. */
bool st_range_step(st_field_type t, st_range_bound *v, int dir);

const char *st_analyzer_name(st_analyzer_kind a);
bool st_analyzer_from_name(const char *name, st_analyzer_kind *out);

/* ---- analysis ---- */

#define ST_MAX_TOKEN_LEN 255 /* Lucene's StandardAnalyzer default */

typedef struct st_token {
	const char *term; /* valid only during the callback */
	size_t len;
	uint32_t position;
	uint32_t start, end; /* byte offsets into the input */
	const char *type;    /* custom chains: "<ALPHANUM>", "word", "SYNONYM"...; NULL from st_analyze */
} st_token;

/* Returns nonzero to stop early. */
typedef int (*st_token_fn)(void *ctx, const st_token *tok);

/* Tokenizes `text` with analyzer `a`, calling fn per token in order.
 * Positions start at `first_pos` (stop words leave gaps, as in Lucene).
 * Returns the position after the last token in *next_pos (may be NULL). */
cm_err st_analyze(st_analyzer_kind a, const char *text, size_t len, uint32_t first_pos,
                  st_token_fn fn, void *ctx, uint32_t *next_pos);

/* ---- custom analysis (index settings "analysis") ---- */

/* Marks a field whose analyzer is a custom one (st_field_def.custom_*);
 * segments record it so, and readers take the chain from the mapping. */
#define ST_AN_CUSTOM 5

struct cm_buf;
typedef struct st_analysis st_analysis; /* an index's parsed analysis settings */
typedef struct st_analyzer st_analyzer; /* one chain: char filters, tokenizer, filters */

/* Parses ES `analysis` settings ({"analyzer":{..},"tokenizer":{..},
 * "filter":{..},"char_filter":{..},"normalizer":{..}}); json may be NULL
 * (no custom components). max_ngram_diff and max_shingle_diff are the
 * index's limits. Errors are CM_EINVAL with ES's messages. *out has one
 * reference and keeps a copy of json. */
cm_err st_analysis_parse(const cJSON *json, int max_ngram_diff, int max_shingle_diff,
                         st_analysis **out, cm_error *err);
st_analysis *st_analysis_ref(st_analysis *a);
void st_analysis_unref(st_analysis *a); /* NULL is fine */
/* The settings as given (borrowed; NULL when none). */
const cJSON *st_analysis_json(const st_analysis *a);
/* A custom analyzer or normalizer by name (borrowed from a, which may be
 * NULL); NULL when a defines none by that name. The built-in "lowercase"
 * normalizer is found without settings. */
const st_analyzer *st_analysis_analyzer(const st_analysis *a, const char *name);
const st_analyzer *st_analysis_normalizer(const st_analysis *a, const char *name);
/* Resolves an analyzer name as a mapping does: a custom one of a first,
 * then the built-ins. False when neither has it. */
bool st_analysis_resolve(const st_analysis *a, const char *name, st_analyzer_kind *kind,
                         const st_analyzer **custom);
/* A transient chain for _analyze from a tokenizer and lists of filters
 * and char filters, each a name (of a or a built-in) or an inline
 * definition object. tokenizer NULL with normalizer set builds a
 * normalizer. The caller frees *out with st_analyzer_free. */
cm_err st_analyzer_build(const st_analysis *a, const cJSON *tokenizer, const cJSON *filters,
                         const cJSON *char_filters, bool normalizer, st_analyzer **out,
                         cm_error *err);
void st_analyzer_free(st_analyzer *an);
const char *st_analyzer_get_name(const st_analyzer *an);
bool st_analyzer_is_normalizer(const st_analyzer *an);
/* Runs a chain like st_analyze (tokens carry a type; stop gaps and
 * synonyms at one position as Lucene). */
cm_err st_analyzer_run(const st_analyzer *an, const char *text, size_t len, uint32_t first_pos,
                       st_token_fn fn, void *ctx, uint32_t *next_pos);
/* The type ES reports for a token a built-in analyzer made from
 * text[0..n): "<ALPHANUM>", "<NUM>", ... for standard and english,
 * "word" for the others. */
const char *st_token_type(st_analyzer_kind kind, const char *text, size_t n);
/* _analyze's explain: a chain's stages are its tokenizer (stage 0) and
 * each filter (stage k: after k filters); char filters are counted apart
 * (*ncharfilters). Built-in analyzers have no stages (0). */
size_t st_analyzer_stages(const st_analyzer *an, size_t *ncharfilters);
const char *st_analyzer_stage_name(const st_analyzer *an, bool charfilter, size_t i);
/* Runs the chain up to a stage (offsets into the original text). */
cm_err st_analyzer_run_stage(const st_analyzer *an, const char *text, size_t len,
                             uint32_t first_pos, size_t stage, st_token_fn fn, void *ctx,
                             uint32_t *next_pos);
/* The text after the first k+1 char filters, appended to out. */
void st_analyzer_char_filtered(const st_analyzer *an, const char *text, size_t len, size_t k,
                               struct cm_buf *out);
/* Runs custom when given, else the built-in kind. */
cm_err st_analyze_with(const st_analyzer *custom, st_analyzer_kind kind, const char *text,
                       size_t len, uint32_t first_pos, st_token_fn fn, void *ctx,
                       uint32_t *next_pos);
/* A normalizer's output for one keyword value, appended to out (the
 * tokens concatenated, as ES's keyword tokenizer yields one). */
cm_err st_normalize(const st_analyzer *norm, const char *s, size_t n, struct cm_buf *out);

/* ---- mappings ---- */

typedef enum { ST_DYNAMIC_TRUE, ST_DYNAMIC_FALSE, ST_DYNAMIC_STRICT } st_dynamic;

typedef struct st_field_def {
	char *path;    /* full dotted path: "name.firstName", "name.firstName.keyword" */
	char *parent;  /* multi-field: the field it copies from ("name.firstName"), else NULL */
	st_field_type type;
	st_analyzer_kind analyzer;        /* text only */
	st_analyzer_kind search_analyzer; /* text only; defaults to analyzer */
	/* ST_AN_CUSTOM above: the chains, owned by the mapping's analysis */
	const st_analyzer *custom_analyzer, *custom_search_analyzer;
	const st_analyzer *normalizer; /* keyword: NULL = none */
	int ignore_above;                 /* keyword: 0 = unlimited */
	bool index;                       /* searchable (default true) */
	bool doc_values;                  /* column (default true except text) */
	/* binary, geo_point: "doc_values" as given (0 none, 1 true, 2 false), echoed
	 * back; storage ignores it: binary keeps no column, geo_point always one */
	uint8_t doc_values_shown;
	char *format;                     /* date format, NULL = strict_date_optional_time||epoch_millis */
	st_dynamic dynamic;               /* object fields only; effective (inherited) value */
	bool dynamic_set;                 /* object: "dynamic" given explicitly (else inherited) */
	char *null_value;      /* indexed in place of a JSON null (as if sent as this text); NULL = none */
	bool ignore_malformed; /* numeric/date: a value that does not parse is skipped, not an error */
	bool no_coerce;        /* numeric: "coerce": false (no strings, no fractions into integers) */
	bool disabled;         /* object: "enabled": false (contents kept in _source only) */
	double scaling_factor; /* scaled_float: required, > 0 */
	char **copy_to;        /* paths this field's values are also indexed into */
	int ncopy_to;
	char *meta;            /* "meta" as given (JSON object text), NULL when none */
	int depth_limit;       /* flattened: object depth allowed (0 = ES's default, 20) */
	int max_input_length;  /* completion: characters of an input kept (default 50) */
	/* object of type "nested": each object is indexed as its own hidden
	 * document (st_doc.nested), its fields copied into the parent or root
	 * document too when asked */
	bool nested, include_in_parent, include_in_root;
	/* object made only from a dotted name ("a.b"): takes the existing one's kind */
	bool implied;
	/* text: "index_options" and "term_vector" as given (indexes into
	 * st_index_options_names / st_term_vector_names, 0 = not given). They
	 * change no storage here; offsets in either spare a highlighter the
	 * re-analysis index.highlight.max_analyzed_offset bounds. */
	uint8_t index_options, term_vector;
	/* "store": true: GET and _mget return the field under "fields" when
	 * stored_fields names it (its values read from _source) */
	bool store;
} st_field_def;

extern const char *const st_index_options_names[]; /* NULL-terminated, [0] = "" */
extern const char *const st_term_vector_names[];   /* NULL-terminated, [0] = "" */
/* Text whose offsets are indexed (index_options or term_vector). */
bool st_field_has_offsets(const st_field_def *f);

/* An immutable mapping version. Fields are sorted by path. Object fields
 * are listed too (type ST_FT_OBJECT), so "name" resolves. */
typedef struct st_mapping {
	st_field_def *fields;
	size_t nfields;
	st_dynamic dynamic; /* root */
	uint64_t version;
	int refs;
	bool dynamic_set; /* root "dynamic" given explicitly (a merge keeps base's otherwise) */
	int8_t date_detection;    /* root "date_detection": 0 unset (on), 1 true, -1 false */
	int8_t numeric_detection; /* root "numeric_detection": 0 unset (off), 1 true, -1 false */
	/* root "_source": what a segment stores of each document */
	bool source_set;      /* "_source" given (rendered back) */
	bool source_disabled; /* "enabled": false: nothing stored */
	char **source_includes, **source_excludes;
	size_t nsource_includes, nsource_excludes;
	/* root "dynamic_templates" as validated (a JSON array text), NULL when
	 * none: new fields take the first template that matches them */
	char *dynamic_templates;
	st_analysis *analysis; /* the index's custom analysis (a reference), NULL = none */
} st_mapping;

st_mapping *st_mapping_new(void); /* empty, dynamic=true, refs=1 */
/* True when the mapping's _source options change what is stored. */
bool st_mapping_source_filtered(const st_mapping *m);
st_mapping *st_mapping_ref(st_mapping *m);
void st_mapping_unref(st_mapping *m);
const st_field_def *st_mapping_find(const st_mapping *m, const char *path);
/* A completion field's segment term: the analysed input, ST_COMPLETION_SEP,
 * the weight in 10 digits, ST_COMPLETION_SEP, the input as sent. */
#define ST_COMPLETION_SEP '\x1f'
/* The flattened field whose key `path` names ("labels.release" under a
 * flattened "labels"), NULL when there is none. */
const st_field_def *st_mapping_flattened_owner(const st_mapping *m, const char *path);
/* Parses the body of ES `mappings` ({"properties":...,"dynamic":...}). */
cm_err st_mapping_from_json(const cJSON *json, st_mapping **out, cm_error *err);
/* A dynamic template's "mapping" with "{name}" and "{dynamic_type}"
 * filled in (new JSON). */
cJSON *st_dynamic_template_mapping(const cJSON *mapping, const char *name,
                                   const char *dynamic_type);
/* Same, resolving analyzer and normalizer names in `an` (may be NULL);
 * the mapping takes a reference to it. */
cm_err st_mapping_from_json_an(const cJSON *json, st_analysis *an, st_mapping **out,
                               cm_error *err);
/* Renders ES shape {"dynamic":..,"properties":{...}} (nested objects, "fields"). */
cJSON *st_mapping_to_json(const st_mapping *m);
/* New version = base + additions. Conflicting type changes are CM_EINVAL
 * ("mapper [x] cannot be changed from type [a] to [b]"). */
cm_err st_mapping_merge(const st_mapping *base, const st_mapping *add, st_mapping **out,
                        cm_error *err);

/* ---- _source filtering ---- */

struct cm_buf;
/* Filters a _source document: keeps paths matching any include pattern
 * (all when ni == 0) and drops paths matching an exclude pattern, with
 * ES's rules: patterns use '*' wildcards and match whole dotted paths;
 * "obj" keeps obj's whole subtree, "obj.*" its children, "*Name" any path
 * ending in Name; objects emptied by filtering are dropped; arrays are
 * filtered element by element. Appends the filtered JSON to out, in the
 * source's key order with its original number text. CM_EPARSE when src
 * is not valid JSON. */
cm_err st_source_filter(const char *src, size_t len, char *const *includes, size_t ni,
                        char *const *excludes, size_t ne, struct cm_buf *out);

/* ---- parsed documents ---- */

typedef struct st_value {
	const st_field_def *field; /* points into the mapping used to parse */
	int64_t i;                 /* long/int/short/byte, date (epoch ms), boolean 0/1 */
	double d;                  /* double/float */
	const char *s;             /* text/keyword: bytes (not NUL-terminated) */
	size_t n;
	uint32_t ordinal;          /* index of this value among the field's values in the doc */
} st_value;

typedef struct st_doc {
	const char *id;
	size_t id_len;
	const char *source; /* _source exactly as sent */
	size_t source_len;
	st_value *values;
	size_t nvalues;
	cJSON *json; /* parse tree the string values point into */
	/* what segments store: source, filtered by the mapping's _source
	 * options (empty when disabled); owned when it differs */
	const char *stored;
	size_t stored_len;
	char **owned; /* value bytes not in the tree (ip addresses), freed with the doc */
	size_t nowned, owned_cap;
	size_t cap;
	/* The hidden documents of the objects under nested fields, children
	 * before their parents (post-order), all before this root document in
	 * a segment. Each holds its fields' values plus ST_FIELD_NESTED_PATH
	 * and ST_FIELD_NESTED_OFFSET; id and source are empty. Root only. */
	struct st_doc *nested;
	size_t nnested, nested_cap;
} st_doc;

/* Hidden fields of nested documents: the nested path (keyword, postings)
 * and the object's index in its parent's array (long column). */
#define ST_FIELD_NESTED_PATH "_nested_path"
/* The fields whose malformed values a document skipped (keyword terms). */
#define ST_FIELD_IGNORED "_ignored"
#define ST_FIELD_NESTED_OFFSET "_nested_offset"
#define ST_NESTED_OBJECTS_LIMIT 10000 /* index.mapping.nested_objects.limit */

/* Parses `source` under mapping m. Fields not in m are added to *dynamic_add
 * (a new mapping holding only the additions, or NULL if none) when the
 * mapping's dynamic setting allows; strict → CM_EMAPPING with
 * "strict_dynamic_mapping_exception". Values for fields in *dynamic_add are
 * not emitted: merge the mapping, then parse again. Multi-fields get their
 * parent's values. Objects flatten to dotted paths; arrays are multi-valued.
 * Wrong types ("abc" for a long) → CM_EMAPPING naming the field. */
cm_err st_doc_parse(const st_mapping *m, const char *id, size_t id_len, const char *source,
                    size_t source_len, st_doc *out, st_mapping **dynamic_add, cm_error *err);
/* The same with index.mapping.nested_objects.limit (st_doc_parse: the
 * default, ST_NESTED_OBJECTS_LIMIT). */
cm_err st_doc_parse_limit(const st_mapping *m, const char *id, size_t id_len, const char *source,
                          size_t source_len, uint32_t nested_limit, st_doc *out,
                          st_mapping **dynamic_add, cm_error *err);
void st_doc_free(st_doc *d);

/* Dates: ISO-8601 forms (2024-01-31, 2024-01-31T10:00:00Z, with fraction
 * and offsets) and epoch millis. `format` may be NULL for the default
 * "strict_date_optional_time||epoch_millis"; supported names are listed in
 * docs/mapping.md. Returns false when the value does not parse. */
bool st_date_parse(const char *s, size_t n, const char *format, int64_t *epoch_ms);
/* True when every "||" alternative of `format` is a supported named
 * format or Java-style pattern (NULL = the default, valid). */
bool st_date_format_valid(const char *format);
/* Renders epoch millis as "2024-01-31T10:00:00.000Z" into buf (>= 32 bytes). */
void st_date_format(int64_t epoch_ms, char *buf, size_t cap);
/* date_nanos: as st_date_parse, keeping the fraction's nanoseconds. False
 * also outside what a long of nanoseconds holds from 1970 on (ES refuses
 * dates before the epoch for date_nanos). */
bool st_date_parse_ns(const char *s, size_t n, const char *format, int64_t *epoch_ns);
/* Renders nanoseconds as ES's strict_date_optional_time_nanos does: the
 * fraction with 3 to 9 digits, trailing zeros dropped (>= 40 bytes). */
void st_date_format_ns(int64_t epoch_ns, char *buf, size_t cap);

/* Lucene's norm: SmallFloat.intToByte4(length) and its inverse. */
uint8_t st_norm_encode(uint32_t length);
uint32_t st_norm_decode(uint8_t norm);

/* Order-preserving map between doubles and int64 (Lucene's
 * NumericUtils.doubleToSortableLong), so double columns compare as ints. */
int64_t st_double_to_sortable(double d);
double st_sortable_to_double(int64_t v);

#endif
