/* Custom analysis inside storage: the parsed component definitions
 * (an_settings.c) and the chain that runs them (an_chain.c). */
#ifndef AN_CHAIN_H
#define AN_CHAIN_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "st_types.h"

/* A token inside a chain: its term lives in the list's arena. */
typedef struct tk {
	uint32_t off, len;
	uint32_t start, end; /* byte offsets into the (char-filtered) text */
	uint32_t posinc;
	const char *type;
	bool keyword; /* keyword_marker: stemmers leave it */
} tk;

typedef struct tks {
	tk *v;
	size_t n, cap;
	cm_buf arena;
} tks;

void tks_init(tks *t);
void tks_free(tks *t);
void tks_reset(tks *t);
tk *tks_add(tks *t, const char *s, size_t n, uint32_t start, uint32_t end, uint32_t posinc,
            const char *type);

typedef enum {
	TK_STANDARD,
	TK_WHITESPACE,
	TK_KEYWORD,
	TK_LETTER,
	TK_LOWERCASE,
	TK_PATTERN,
	TK_NGRAM,
	TK_EDGE_NGRAM,
	TK_CHAR_GROUP,
	TK_PATH_HIERARCHY,
} tok_kind;

enum {
	TC_LETTER = 1,
	TC_DIGIT = 2,
	TC_WHITESPACE = 4,
	TC_PUNCTUATION = 8,
	TC_SYMBOL = 16,
	TC_CUSTOM = 32
};

typedef struct tok_def {
	char *name;
	tok_kind kind;
	int max_token_length;
	regex_t re;
	bool has_re;
	int group;
	int min_gram, max_gram;
	unsigned token_chars;
	char *custom_chars;
	char **split_on; /* char_group: single characters (UTF-8) to split on */
	size_t nsplit_on;
	char delimiter[8], replacement[8]; /* path_hierarchy (UTF-8 characters) */
	int skip;
} tok_def;

typedef enum {
	F_LOWERCASE,
	F_UPPERCASE,
	F_ASCIIFOLDING,
	F_STOP,
	F_STEMMER,
	F_SYNONYM,
	F_LENGTH,
	F_TRIM,
	F_UNIQUE,
	F_TRUNCATE,
	F_REVERSE,
	F_WORD_DELIMITER,
	F_SHINGLE,
	F_NGRAM,
	F_EDGE_NGRAM,
	F_KEYWORD_MARKER,
	F_LIMIT,
	F_KEEP,
	F_KEEP_TYPES,
	F_ELISION,
	F_APOSTROPHE,
	F_DECIMAL_DIGIT,
	F_PATTERN_REPLACE,
	F_FLATTEN_GRAPH,
	F_REMOVE_DUPLICATES,
	F_STEMMER_OVERRIDE,
	F_FINGERPRINT,
} filter_kind;

typedef struct filter_def {
	char *name;
	filter_kind kind;
	bool preserve_original;
	char **words; /* stop: stopwords; keyword_marker: keywords */
	size_t nwords;
	bool ignore_case, remove_trailing;
	const char *stem_alg; /* libstemmer algorithm (static string) */
	bool possessive;      /* stemmer possessive_english */
	char **syn_rules;     /* synonym: the rules as given */
	size_t nsyn;
	bool expand, lenient;
	int min, max; /* length */
	bool only_on_same_position;
	int length; /* truncate */
	bool generate_word_parts, generate_number_parts, catenate_words, catenate_numbers,
	    catenate_all, split_on_case_change, split_on_numerics, stem_english_possessive;
	int min_shingle, max_shingle;
	bool output_unigrams;
	char *separator, *filler;
	int min_gram, max_gram;
	int max_count; /* limit: max_token_count; fingerprint: max_output_size */
	bool exclude;  /* keep_types: mode exclude */
	regex_t re;    /* pattern_replace */
	bool has_re, replace_all;
	char *replacement;
	char **over_from, **over_to; /* stemmer_override rules */
	size_t nover;
} filter_def;

typedef enum { CF_HTML_STRIP, CF_MAPPING, CF_PATTERN_REPLACE } cf_kind;

typedef struct cf_def {
	char *name;
	cf_kind kind;
	char **escaped_tags;
	size_t nescaped_tags;
	char **map_from, **map_to;
	size_t nmap;
	regex_t re;
	bool has_re;
	char *replacement;
} cf_def;

typedef struct syn_rule {
	tks lhs;
	tks *alts;
	size_t nalts;
	bool keep_orig;
} syn_rule;

typedef struct syn_map {
	syn_rule *rules;
	size_t nrules;
} syn_map;

typedef struct filter_inst {
	const filter_def *def;
	syn_map *syn; /* synonym filters: rules analyzed by the chain before them */
} filter_inst;

/* Definitions an owner frees: settings' own and built-ins made on use. */
typedef struct an_defs {
	tok_def **toks;
	size_t ntoks;
	filter_def **filters;
	size_t nfilters;
	cf_def **cfs;
	size_t ncfs;
} an_defs;

struct st_analyzer {
	char *name;
	bool normalizer;
	int builtin_kind; /* >= 0: a built-in analyzer (st_analyze), else the chain */
	const tok_def *tok;
	filter_inst *filters;
	size_t nfilters;
	const cf_def **cf;
	size_t ncf;
	an_defs own; /* transient (_analyze) chains own their inline definitions */
};

/* ---- an_components.c: definitions from JSON, and shared readers ---- */

typedef struct an_limits {
	int max_ngram_diff, max_shingle_diff; /* index.max_ngram_diff, index.max_shingle_diff */
} an_limits;

/* Each parses one definition object (NULL limits: ES's defaults); CM_EINVAL
 * with ES's message when invalid. *out is the caller's. */
cm_err an_parse_tokenizer(const an_limits *a, const char *name, const cJSON *o, tok_def **out,
                          cm_error *err);
cm_err an_parse_filter(const an_limits *a, const char *name, const cJSON *o, filter_def **out,
                       cm_error *err);
cm_err an_parse_char_filter(const char *name, const cJSON *o, cf_def **out, cm_error *err);
void an_defs_free(an_defs *o);
/* A CM_EINVAL error from a format with up to two %s. */
cm_err an_bad(cm_error *err, const char *fmt, const char *a, const char *b);
bool an_get_bool(const cJSON *o, const char *k, bool dflt, bool *out);
const char *an_get_str(const cJSON *o, const char *k);
/* Java-style escapes (\n, \t, \uXXXX) resolved; the caller frees. */
char *an_unescape(const char *s, size_t n);
/* Splits s[0..n) on unescaped commas into trimmed parts (at most cap). */
size_t an_split_commas(const char *s, size_t n, const char **parts, size_t *lens, size_t cap);

/* Tokenizes s and runs the first `upto` filters; returns the position
 * increment of tokens dropped at the end. */
uint32_t an_chain_tokens(const st_analyzer *an, const char *s, size_t n, size_t upto, tks *t);
bool an_stemmer_exists(const char *alg);

#endif
