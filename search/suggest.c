/* Suggesters: "term" (Lucene's DirectSpellChecker over the shard's terms
 * dictionary), "phrase" (ES's noisy-channel spell checker: direct
 * candidate generators and an n-gram language model with stupid backoff,
 * laplace or linear interpolation smoothing) and "completion" (a prefix
 * walk over a completion field's analysed-input|weight|input terms). A
 * shard writes its partial suggestions as JSON; the coordinator folds
 * partials (term/phrase options merged by text: term freqs summed, scores
 * max; completion options are documents) and renders them once. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"
#include "jsonw.h"
#include "sr.h"

#define T CM_MEM_SEARCH
#define MAX_SUGGESTIONS 64
#define MAX_TOKENS 256
#define MAX_PATHS 1000000 /* phrase: correction paths scored per shard */

typedef enum { SG_TERM, SG_PHRASE, SG_COMPLETION } sg_kind;
typedef enum { MODE_MISSING, MODE_POPULAR, MODE_ALWAYS } sg_mode;
typedef enum { DIST_INTERNAL, DIST_LEVENSHTEIN, DIST_DAMERAU } sg_dist;
typedef enum { SM_STUPID, SM_LAPLACE, SM_LINEAR } sg_smooth;

/* DirectSpellChecker settings (term suggester, direct_generator). */
typedef struct sg_gen {
	char *field;
	sg_mode mode;
	int max_edits, prefix_length, min_word_length, max_inspections, size;
	float accuracy, min_doc_freq, max_term_freq;
	sg_dist dist;
	bool sort_freq;
} sg_gen;

typedef struct sg_one {
	char *name;
	sg_kind kind;
	char *text, *field, *analyzer;
	int size, shard_size; /* shard_size 0: max(size, 5) */
	sg_gen gen;           /* term */
	/* phrase */
	int gram_size; /* 0: from the field's shingles, else 1 */
	float rwel, confidence, max_errors;
	int token_limit;
	char *separator, *pre_tag, *post_tag;
	sg_smooth smooth;
	double sm[3]; /* discount | alpha | trigram, bigram, unigram lambdas */
	sg_gen *gens;
	size_t ngens;
	bool skip_duplicates; /* completion */
} sg_one;

struct sr_suggest {
	sg_one *v;
	size_t n;
	bool typed_keys;
};

/* qsort, but an empty array may be NULL */
static void
sort_n(void *v, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
	if (n > 1)
		qsort(v, n, size, cmp);
}

/* ---- parsing ---- */

static void
gen_defaults(sg_gen *g)
{
	memset(g, 0, sizeof *g);
	g->mode = MODE_MISSING;
	g->max_edits = 2;
	g->prefix_length = 1;
	g->min_word_length = 4;
	g->max_inspections = 5;
	g->size = 5;
	g->accuracy = 0.5f;
	g->max_term_freq = 0.01f;
}

static cm_err
xparse(cm_error *err, const char *fmt, const char *a, const char *b)
{
	return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception", fmt, a, b);
}

static cm_err
num_opt(const cJSON *v, const char *ctx, double *out, cm_error *err)
{
	char *end;
	if (cJSON_IsNumber(v))
		*out = v->valuedouble;
	else if (cJSON_IsString(v) &&
	         (*out = strtod(v->valuestring, &end), end != v->valuestring) && !*end)
		;
	else
		return xparse(err, "[%s] failed to parse field [%s]", ctx, v->string);
	if (!isfinite(*out))
		return xparse(err, "[%s] failed to parse field [%s]", ctx, v->string);
	return CM_OK;
}

static cm_err
int_opt(const cJSON *v, const char *ctx, int *out, cm_error *err)
{
	double d = 0;
	cm_err rc = num_opt(v, ctx, &d, err);
	if (rc)
		return rc;
	if (d != floor(d) || d < -1e9 || d > 1e9)
		return xparse(err, "[%s] failed to parse field [%s]", ctx, v->string);
	*out = (int)d;
	return CM_OK;
}

static cm_err
str_opt(const cJSON *v, const char *ctx, char **out, cm_error *err)
{
	if (!cJSON_IsString(v))
		return xparse(err, "[%s] failed to parse field [%s]", ctx, v->string);
	cm_free(T, *out);
	*out = cm_strdup(T, v->valuestring);
	return CM_OK;
}

/* One DirectSpellChecker option; 1 when k is not one. */
static int
gen_opt(sg_gen *g, const cJSON *v, const char *ctx, cm_error *err, cm_err *rc)
{
	const char *k = v->string;
	double d;
	char *s = NULL;
	if (!strcmp(k, "field")) {
		*rc = str_opt(v, ctx, &g->field, err);
	} else if (!strcmp(k, "suggest_mode")) {
		if (!(*rc = str_opt(v, ctx, &s, err))) {
			if (!strcasecmp(s, "missing"))
				g->mode = MODE_MISSING;
			else if (!strcasecmp(s, "popular"))
				g->mode = MODE_POPULAR;
			else if (!strcasecmp(s, "always"))
				g->mode = MODE_ALWAYS;
			else
				*rc = cm_error_set(err, CM_EINVAL, "Illegal suggest mode %s", s);
		}
	} else if (!strcmp(k, "sort")) {
		if (!(*rc = str_opt(v, ctx, &s, err))) {
			if (!strcasecmp(s, "score"))
				g->sort_freq = false;
			else if (!strcasecmp(s, "frequency"))
				g->sort_freq = true;
			else
				*rc = cm_error_set(err, CM_EINVAL, "Illegal suggest sort %s", s);
		}
	} else if (!strcmp(k, "string_distance")) {
		if (!(*rc = str_opt(v, ctx, &s, err))) {
			if (!strcasecmp(s, "internal"))
				g->dist = DIST_INTERNAL;
			else if (!strcasecmp(s, "levenshtein"))
				g->dist = DIST_LEVENSHTEIN;
			else if (!strcasecmp(s, "damerau_levenshtein"))
				g->dist = DIST_DAMERAU;
			else if (!strcasecmp(s, "jaro_winkler") || !strcasecmp(s, "ngram"))
				*rc =
				    cm_error_set(err, CM_EINVAL,
				                 "string_distance [%s] is not supported (internal, "
				                 "levenshtein and damerau_levenshtein are)",
				                 s);
			else
				*rc = cm_error_set(err, CM_EINVAL, "Illegal distance option %s", s);
		}
	} else if (!strcmp(k, "max_edits")) {
		if (!(*rc = int_opt(v, ctx, &g->max_edits, err)) &&
		    (g->max_edits < 1 || g->max_edits > 2))
			*rc = cm_error_set(err, CM_EINVAL, "Illegal max_edits value %d",
			                   g->max_edits);
	} else if (!strcmp(k, "prefix_length") || !strcmp(k, "prefix_len")) {
		if (!(*rc = int_opt(v, ctx, &g->prefix_length, err)) && g->prefix_length < 0)
			*rc = cm_error_set(err, CM_EINVAL, "prefix_length must be non-negative");
	} else if (!strcmp(k, "min_word_length") || !strcmp(k, "min_word_len")) {
		if (!(*rc = int_opt(v, ctx, &g->min_word_length, err)) && g->min_word_length < 1)
			*rc = cm_error_set(err, CM_EINVAL,
			                   "minWordLength must be greater or equal to 1");
	} else if (!strcmp(k, "max_inspections")) {
		if (!(*rc = int_opt(v, ctx, &g->max_inspections, err)) && g->max_inspections < 0)
			*rc = cm_error_set(err, CM_EINVAL, "maxInspections must be positive");
	} else if (!strcmp(k, "min_doc_freq")) {
		if (!(*rc = num_opt(v, ctx, &d, err))) {
			g->min_doc_freq = (float)d;
			if (d < 0 || (d > 1 && d != floor(d)))
				*rc = cm_error_set(err, CM_EINVAL,
				                   "minDocFreq must be positive (or a whole number "
				                   "above 1)");
		}
	} else if (!strcmp(k, "max_term_freq")) {
		if (!(*rc = num_opt(v, ctx, &d, err))) {
			g->max_term_freq = (float)d;
			if (d < 0 || (d > 1 && d != floor(d)))
				*rc =
				    cm_error_set(err, CM_EINVAL,
				                 "maxTermFreq must be positive (or a whole number "
				                 "above 1)");
		}
	} else if (!strcmp(k, "accuracy")) {
		if (!(*rc = num_opt(v, ctx, &d, err))) {
			g->accuracy = (float)d;
			if (d < 0 || d > 1)
				*rc = cm_error_set(err, CM_EINVAL,
				                   "accuracy must be between 0 and 1");
		}
	} else {
		return 1;
	}
	cm_free(T, s);
	return 0;
}

static cm_err
parse_term(sg_one *o, const cJSON *body, cm_error *err)
{
	cm_err rc = CM_OK;
	gen_defaults(&o->gen);
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		const char *k = v->string;
		if (!gen_opt(&o->gen, v, "term", err, &rc))
			continue;
		if (!strcmp(k, "analyzer"))
			rc = str_opt(v, "term", &o->analyzer, err);
		else if (!strcmp(k, "size"))
			rc = int_opt(v, "term", &o->size, err);
		else if (!strcmp(k, "shard_size"))
			rc = int_opt(v, "term", &o->shard_size, err);
		else if (!strcmp(k, "lowercase_terms")) {
			if (!cJSON_IsBool(v))
				rc = xparse(err, "[%s] failed to parse field [%s]", "term", k);
			else if (cJSON_IsTrue(v))
				rc =
				    cm_error_set(err, CM_EINVAL,
				                 "[term] suggester option [lowercase_terms] is not "
				                 "supported");
		} else
			rc = cm_error_set(err, CM_EPARSE,
			                  "suggester[term] doesn't support field [%s]", k);
	}
	if (rc)
		return rc;
	if (!o->gen.field)
		return cm_error_set_type(err, CM_EPARSE, "parse_exception",
		                         "the required field option [field] is missing");
	o->field = cm_strdup(T, o->gen.field);
	return CM_OK;
}

static cm_err
parse_generators(sg_one *o, const cJSON *arr, cm_error *err)
{
	if (!cJSON_IsArray(arr))
		return xparse(err, "[%s] failed to parse field [%s]", "phrase", "direct_generator");
	for (const cJSON *g = arr->child; g; g = g->next) {
		if (!cJSON_IsObject(g))
			return xparse(err, "[%s] failed to parse field [%s]", "phrase",
			              "direct_generator");
		if (o->ngens >= 16)
			return cm_error_set(err, CM_EINVAL,
			                    "too many direct generators (at most 16)");
		o->gens = cm_realloc(T, o->gens, (o->ngens + 1) * sizeof *o->gens);
		sg_gen *dg = &o->gens[o->ngens++];
		gen_defaults(dg);
		cm_err rc = CM_OK;
		for (const cJSON *v = g->child; v && !rc; v = v->next) {
			if (!gen_opt(dg, v, "direct_generator", err, &rc))
				continue;
			if (!strcmp(v->string, "size")) {
				if (!(rc = int_opt(v, "direct_generator", &dg->size, err)) &&
				    dg->size <= 0)
					rc = cm_error_set(err, CM_EINVAL, "Size must be positive");
			} else if (!strcmp(v->string, "pre_filter") ||
			           !strcmp(v->string, "post_filter"))
				rc = cm_error_set(err, CM_EINVAL,
				                  "[direct_generator] option [%s] is not supported",
				                  v->string);
			else
				rc = xparse(err, "[%s] unknown field [%s]", "direct_generator",
				            v->string);
		}
		if (rc)
			return rc;
		if (!dg->field)
			return xparse(err, "[%s] %s", "direct_generator", "Required [field]");
	}
	return CM_OK;
}

static cm_err
parse_smoothing(sg_one *o, const cJSON *v, cm_error *err)
{
	if (!cJSON_IsObject(v) || !v->child || v->child->next || !cJSON_IsObject(v->child))
		return xparse(err, "[%s] failed to parse field [%s]", "phrase", "smoothing");
	const cJSON *m = v->child;
	cm_err rc = CM_OK;
	if (!strcmp(m->string, "stupid_backoff")) {
		o->smooth = SM_STUPID;
		o->sm[0] = 0.4;
		for (const cJSON *e = m->child; e && !rc; e = e->next)
			if (!strcmp(e->string, "discount"))
				rc = num_opt(e, "stupid_backoff", &o->sm[0], err);
			else
				rc = cm_error_set(
				    err, CM_EINVAL,
				    "[stupid_backoff] unknown token [%s] after [discount]",
				    e->string);
	} else if (!strcmp(m->string, "laplace")) {
		o->smooth = SM_LAPLACE;
		o->sm[0] = 0.5;
		for (const cJSON *e = m->child; e && !rc; e = e->next)
			if (!strcmp(e->string, "alpha"))
				rc = num_opt(e, "laplace", &o->sm[0], err);
			else
				rc = cm_error_set(err, CM_EINVAL,
				                  "[laplace] unknown token [%s] after [alpha]",
				                  e->string);
	} else if (!strcmp(m->string, "linear_interpolation") || !strcmp(m->string, "linear")) {
		o->smooth = SM_LINEAR;
		bool seen[3] = {false, false, false};
		static const char *names[] = {"trigram_lambda", "bigram_lambda", "unigram_lambda"};
		for (const cJSON *e = m->child; e && !rc; e = e->next) {
			int i = 0;
			while (i < 3 && strcmp(e->string, names[i]))
				i++;
			if (i == 3)
				rc = cm_error_set(
				    err, CM_EINVAL,
				    "suggester[phrase][smoothing] doesn't support field [%s]",
				    e->string);
			else if (!(rc = num_opt(e, "linear_interpolation", &o->sm[i], err)))
				seen[i] = true;
		}
		if (!rc && (!seen[0] || !seen[1] || !seen[2]))
			rc = cm_error_set(err, CM_EINVAL,
			                  "trigram_lambda, bigram_lambda and unigram_lambda are "
			                  "required for linear_interpolation");
		if (!rc && fabs(o->sm[0] + o->sm[1] + o->sm[2] - 1.0) > 0.001)
			rc = cm_error_set(err, CM_EINVAL, "linear smoothing lambdas must sum to 1");
	} else {
		rc = cm_error_set(err, CM_EINVAL,
		                  "suggester[phrase] doesn't support object field [%s]", m->string);
	}
	return rc;
}

static cm_err
parse_phrase(sg_one *o, const cJSON *body, cm_error *err)
{
	cm_err rc = CM_OK;
	o->rwel = 0.95f;
	o->confidence = 1.0f;
	o->max_errors = 1.0f;
	o->token_limit = 10;
	o->smooth = SM_STUPID;
	o->sm[0] = 0.4;
	double d;
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		const char *k = v->string;
		if (!strcmp(k, "field"))
			rc = str_opt(v, "phrase", &o->field, err);
		else if (!strcmp(k, "analyzer"))
			rc = str_opt(v, "phrase", &o->analyzer, err);
		else if (!strcmp(k, "size"))
			rc = int_opt(v, "phrase", &o->size, err);
		else if (!strcmp(k, "shard_size"))
			rc = int_opt(v, "phrase", &o->shard_size, err);
		else if (!strcmp(k, "gram_size")) {
			if (!(rc = int_opt(v, "phrase", &o->gram_size, err)) &&
			    (o->gram_size < 1 || o->gram_size > 3))
				rc = cm_error_set(
				    err, CM_EINVAL,
				    "gram_size must be between 1 and 3 (Shoal scores up "
				    "to trigrams)");
		} else if (!strcmp(k, "real_word_error_likelihood")) {
			if (!(rc = num_opt(v, "phrase", &d, err))) {
				o->rwel = (float)d;
				if (d <= 0)
					rc = cm_error_set(
					    err, CM_EINVAL,
					    "real_word_error_likelihood must be > 0.0");
			}
		} else if (!strcmp(k, "confidence")) {
			if (!(rc = num_opt(v, "phrase", &d, err))) {
				o->confidence = (float)d;
				if (d < 0)
					rc = cm_error_set(err, CM_EINVAL,
					                  "confidence must be >= 0.0");
			}
		} else if (!strcmp(k, "max_errors")) {
			if (!(rc = num_opt(v, "phrase", &d, err))) {
				o->max_errors = (float)d;
				if (d <= 0)
					rc =
					    cm_error_set(err, CM_EINVAL, "max_error must be > 0.0");
			}
		} else if (!strcmp(k, "token_limit")) {
			if (!(rc = int_opt(v, "phrase", &o->token_limit, err)) &&
			    o->token_limit <= 0)
				rc = cm_error_set(err, CM_EINVAL, "token_limit must be >= 1");
		} else if (!strcmp(k, "separator"))
			rc = str_opt(v, "phrase", &o->separator, err);
		else if (!strcmp(k, "highlight")) {
			if (!cJSON_IsObject(v))
				rc = xparse(err, "[%s] failed to parse field [%s]", "phrase", k);
			for (const cJSON *h = cJSON_IsObject(v) ? v->child : NULL; h && !rc;
			     h = h->next)
				if (!strcmp(h->string, "pre_tag"))
					rc = str_opt(h, "highlight", &o->pre_tag, err);
				else if (!strcmp(h->string, "post_tag"))
					rc = str_opt(h, "highlight", &o->post_tag, err);
				else
					rc = cm_error_set(
					    err, CM_EINVAL,
					    "suggester[phrase][highlight] doesn't support "
					    "field [%s]",
					    h->string);
			if (!rc && (!o->pre_tag || !o->post_tag))
				rc = cm_error_set(
				    err, CM_EINVAL,
				    "Pre and post tag must both be null or both not be "
				    "null.");
		} else if (!strcmp(k, "direct_generator"))
			rc = parse_generators(o, v, err);
		else if (!strcmp(k, "smoothing"))
			rc = parse_smoothing(o, v, err);
		else if (!strcmp(k, "force_unigrams")) {
			if (!cJSON_IsBool(v))
				rc = xparse(err, "[%s] failed to parse field [%s]", "phrase", k);
			else if (!cJSON_IsTrue(v))
				rc = cm_error_set(
				    err, CM_EINVAL,
				    "[phrase] suggester option [force_unigrams] false is "
				    "not supported");
		} else if (!strcmp(k, "collate"))
			rc = cm_error_set(err, CM_EINVAL,
			                  "[phrase] suggester option [collate] is not supported");
		else
			rc = cm_error_set(err, CM_EPARSE,
			                  "suggester[phrase] doesn't support field [%s]", k);
	}
	if (rc)
		return rc;
	if (!o->field)
		return cm_error_set_type(err, CM_EPARSE, "parse_exception",
		                         "the required field option [field] is missing");
	if (!o->ngens) { /* ES's default generator: the suggest field, default settings */
		o->gens = cm_calloc(T, 1, sizeof *o->gens);
		gen_defaults(&o->gens[0]);
		o->gens[0].field = cm_strdup(T, o->field);
		o->ngens = 1;
	}
	return CM_OK;
}

static cm_err
parse_completion(sg_one *o, const cJSON *body, cm_error *err)
{
	cm_err rc = CM_OK;
	for (const cJSON *v = body->child; v && !rc; v = v->next) {
		const char *k = v->string;
		if (!strcmp(k, "field"))
			rc = str_opt(v, "completion", &o->field, err);
		else if (!strcmp(k, "analyzer"))
			rc = str_opt(v, "completion", &o->analyzer, err);
		else if (!strcmp(k, "size"))
			rc = int_opt(v, "completion", &o->size, err);
		else if (!strcmp(k, "shard_size"))
			rc = int_opt(v, "completion", &o->shard_size, err);
		else if (!strcmp(k, "skip_duplicates")) {
			if (!cJSON_IsBool(v))
				rc =
				    xparse(err, "[%s] failed to parse field [%s]", "completion", k);
			o->skip_duplicates = cJSON_IsTrue(v);
		} else if (!strcmp(k, "fuzzy") || !strcmp(k, "contexts"))
			rc = cm_error_set(err, CM_EINVAL,
			                  "[completion] suggester option [%s] is not supported", k);
		else
			rc = xparse(err, "[%s] unknown field [%s]", "completion", k);
	}
	if (!rc && !o->field)
		rc = cm_error_set_type(err, CM_EPARSE, "parse_exception",
		                       "the required field option [field] is missing");
	return rc;
}

static cm_err
parse_one(sg_one *o, const cJSON *def, const char *global_text, cm_error *err)
{
	if (!cJSON_IsObject(def))
		return cm_error_set(err, CM_EINVAL, "suggestion must be an object");
	o->size = o->shard_size = -1; /* unset */
	const cJSON *body = NULL;
	bool has_prefix = false;
	cm_err rc = CM_OK;
	for (const cJSON *v = def->child; v && !rc; v = v->next) {
		const char *k = v->string;
		if (!strcmp(k, "text")) {
			rc = str_opt(v, "suggestion", &o->text, err);
		} else if (!strcmp(k, "prefix")) { /* completion's text */
			rc = str_opt(v, "suggestion", &o->text, err);
			has_prefix = true;
		} else if (!strcmp(k, "regex")) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "[regex] of the completion suggester is not supported");
		} else if (cJSON_IsObject(v)) {
			if (body)
				return cm_error_set(err, CM_EINVAL,
				                    "suggestion [%s] has more than one suggester",
				                    o->name);
			if (!strcmp(k, "term"))
				o->kind = SG_TERM;
			else if (!strcmp(k, "phrase"))
				o->kind = SG_PHRASE;
			else if (!strcmp(k, "completion"))
				o->kind = SG_COMPLETION;
			else
				return cm_error_set_type(err, CM_EPARSE,
				                         "named_object_not_found_exception",
				                         "unable to parse SuggestionBuilder with "
				                         "name [%s]: parser not found",
				                         k);
			body = v;
		} else {
			rc = cm_error_set(err, CM_EPARSE, "suggestion does not support [%s]", k);
		}
	}
	if (rc)
		return rc;
	if (!body)
		return cm_error_set(err, CM_EINVAL, "suggestion [%s] has no suggester", o->name);
	if (has_prefix && o->kind != SG_COMPLETION)
		return cm_error_set(err, CM_EINVAL,
		                    "[prefix] is only for the completion suggester");
	rc = o->kind == SG_TERM     ? parse_term(o, body, err)
	     : o->kind == SG_PHRASE ? parse_phrase(o, body, err)
	                            : parse_completion(o, body, err);
	if (rc)
		return rc;
	if (!o->text && global_text)
		o->text = cm_strdup(T, global_text);
	if (!o->text)
		return cm_error_set(err, CM_EINVAL, "The required text option is missing");
	if (o->size == -1)
		o->size = 5;
	if (o->size <= 0)
		return cm_error_set(err, CM_EINVAL, "size must be positive");
	if (o->shard_size == -1)
		o->shard_size = o->size > 5 ? o->size : 5;
	if (o->shard_size <= 0)
		return cm_error_set(err, CM_EINVAL, "shard_size must be positive");
	if (o->size > 10000 || o->shard_size > 10000)
		return cm_error_set(err, CM_EINVAL, "suggestion size too large (at most 10000)");
	return CM_OK;
}

static void
gen_free(sg_gen *g)
{
	cm_free(T, g->field);
}

void
sr_suggest_free(sr_suggest *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		sg_one *o = &s->v[i];
		cm_free(T, o->name);
		cm_free(T, o->text);
		cm_free(T, o->field);
		cm_free(T, o->analyzer);
		cm_free(T, o->separator);
		cm_free(T, o->pre_tag);
		cm_free(T, o->post_tag);
		gen_free(&o->gen);
		for (size_t g = 0; g < o->ngens; g++)
			gen_free(&o->gens[g]);
		cm_free(T, o->gens);
	}
	cm_free(T, s->v);
	cm_free(T, s);
}

cm_err
sr_suggest_from_json(const cJSON *v, sr_suggest **out, cm_error *err)
{
	*out = NULL;
	if (!cJSON_IsObject(v))
		return cm_error_set(err, CM_EPARSE, "Unknown key for a %s in [suggest].",
		                    cJSON_IsArray(v) ? "START_ARRAY" : "VALUE");
	const cJSON *gt = cJSON_GetObjectItemCaseSensitive(v, "text");
	if (gt && !cJSON_IsString(gt))
		return cm_error_set(err, CM_EINVAL, "[suggest] global text must be a string");
	sr_suggest *s = cm_calloc(T, 1, sizeof *s);
	cm_err rc = CM_OK;
	for (const cJSON *e = v->child; e && !rc; e = e->next) {
		if (!strcmp(e->string, "text"))
			continue;
		if (s->n >= MAX_SUGGESTIONS) {
			rc = cm_error_set(err, CM_EINVAL, "too many suggestions (at most %d)",
			                  MAX_SUGGESTIONS);
			break;
		}
		s->v = cm_realloc(T, s->v, (s->n + 1) * sizeof *s->v);
		sg_one *o = &s->v[s->n++];
		memset(o, 0, sizeof *o);
		o->name = cm_strdup(T, e->string);
		rc = parse_one(o, e, gt ? gt->valuestring : NULL, err);
	}
	if (rc || !s->n) { /* an empty "suggest" suggests nothing */
		sr_suggest_free(s);
		return rc;
	}
	*out = s;
	return CM_OK;
}

void
sr_suggest_set_typed_keys(sr_suggest *s, bool on)
{
	if (s)
		s->typed_keys = on;
}

/* ---- shard side: statistics ---- */

typedef struct fstats {
	const char *name;
	uint64_t max_doc;  /* the shard's, deleted docs included (as Lucene) */
	uint64_t sum_ttf;  /* sumTotalTermFreq */
	int64_t num_terms; /* one segment: its distinct terms; several: -1 (MultiTerms) */
	bool present;      /* some segment has terms for it */
} fstats;

static void
fstats_get(sr_exec *x, const char *name, fstats *fs)
{
	memset(fs, 0, sizeof *fs);
	fs->name = name;
	fs->num_terms = -1;
	for (size_t i = 0; i < x->nseg; i++) {
		fs->max_doc += st_segment_max_doc(x->segs[i].seg);
		const st_field_info *fi = st_segment_field(x->segs[i].seg, name);
		if (!fi || !(fi->flags & ST_FI_POSTINGS))
			continue;
		fs->present = true;
		fs->sum_ttf += fi->sum_total_term_freq;
		if (x->nseg == 1)
			fs->num_terms = (int64_t)fi->num_terms;
	}
}

/* docFreq and totalTermFreq of a term, summed over segments. */
static void
term_stats(sr_exec *x, st_postings *p, const char *field, const void *t, size_t n, uint64_t *df,
           uint64_t *ttf)
{
	*df = *ttf = 0;
	for (size_t i = 0; i < x->nseg; i++) {
		const st_field_info *fi = st_segment_field(x->segs[i].seg, field);
		if (!fi || !(fi->flags & ST_FI_POSTINGS))
			continue;
		if (st_postings_open(x->segs[i].txn, fi, t, n, p) == CM_OK) {
			*df += p->doc_freq;
			*ttf += p->total_term_freq ? p->total_term_freq : p->doc_freq;
		}
	}
}

/* ---- the direct spell checker ---- */

typedef struct cand {
	char *t;
	size_t n;
	uint64_t df;
	float score;
} cand;

typedef struct cands {
	cand *v;
	size_t n, cap;
} cands;

static void
cands_push(cands *c, const uint8_t *t, size_t n, uint64_t df, float score)
{
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 16;
		c->v = cm_realloc(T, c->v, c->cap * sizeof *c->v);
	}
	cand *e = &c->v[c->n++];
	e->t = cm_malloc(T, n + 1);
	memcpy(e->t, t, n);
	e->t[n] = 0;
	e->n = n;
	e->df = df;
	e->score = score;
}

static void
cands_free(cands *c)
{
	for (size_t i = 0; i < c->n; i++)
		cm_free(T, c->v[i].t);
	cm_free(T, c->v);
	memset(c, 0, sizeof *c);
}

static int
bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);
	return c ? c : (an > bn) - (an < bn);
}

static int
by_term(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	return bytes_cmp(x->t, x->n, y->t, y->n);
}

/* Lucene's ScoreTerm order for the inspection queue: boost desc, term asc. */
static int
by_boost(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return bytes_cmp(x->t, x->n, y->t, y->n);
}

static int
by_score_sw(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	if (x->df != y->df)
		return x->df > y->df ? -1 : 1;
	return bytes_cmp(x->t, x->n, y->t, y->n);
}

static int
by_freq_sw(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->df != y->df)
		return x->df > y->df ? -1 : 1;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return bytes_cmp(x->t, x->n, y->t, y->n);
}

/* Lucene's LevenshteinDistance (1 - d / max len) and
 * LuceneLevenshteinDistance (Damerau, 1 - d / min len), on code points. */
static float
string_distance(sg_dist d, const char *a, size_t an, const char *b, size_t bn)
{
	size_t la = sr_utf8_len((const uint8_t *)a, an), lb = sr_utf8_len((const uint8_t *)b, bn);
	size_t mx = la > lb ? la : lb, mn = la < lb ? la : lb;
	int ed = sr_edit_distance((const uint8_t *)a, an, (const uint8_t *)b, bn, (int)mx,
	                          d == DIST_DAMERAU);
	if (d == DIST_LEVENSHTEIN)
		return mx ? 1.0f - (float)ed / (float)mx : 1.0f;
	return mn ? 1.0f - (float)ed / (float)mn : (ed ? 0.0f : 1.0f);
}

static size_t
prefix_bytes(const char *v, size_t vlen, int cps)
{
	size_t plen = 0;
	for (int k = 0; plen < vlen && k < cps; k++) {
		plen++;
		while (plen < vlen && ((unsigned char)v[plen] & 0xC0) == 0x80)
			plen++;
	}
	return plen;
}

/* One FuzzyTermsEnum pass: the best `keep` terms within `edits` (prefix
 * max(prefix_length, edits - 1)) whose df exceeds min_df, by boost. */
static void
fuzzy_pass(sr_exec *x, const sg_gen *g, const char *term, size_t tlen, int edits, uint64_t min_df,
           size_t keep, cands *out)
{
	int pcp = g->prefix_length > edits - 1 ? g->prefix_length : edits - 1;
	size_t plen = prefix_bytes(term, tlen, pcp);
	size_t tcp = sr_utf8_len((const uint8_t *)term, tlen);
	cands all = {0};
	for (size_t si = 0; si < x->nseg; si++) {
		const st_field_info *fi = st_segment_field(x->segs[si].seg, g->field);
		if (!fi || !(fi->flags & ST_FI_POSTINGS))
			continue;
		st_terms *it;
		if (st_terms_open(x->segs[si].txn, fi, &it))
			continue;
		size_t seen = 0;
		for (bool ok = st_terms_seek(it, plen ? term : NULL, plen); ok;
		     ok = st_terms_next(it)) {
			size_t n;
			const uint8_t *t = st_terms_term(it, &n);
			if (n < plen || memcmp(t, term, plen))
				break;
			if ((++seen & 1023) == 0 && sr_deadline_passed(x))
				break;
			size_t ncp = sr_utf8_len(t, n);
			if ((ncp > tcp ? ncp - tcp : tcp - ncp) > (size_t)edits)
				continue;
			/* the automaton matches the suffix after the exact prefix */
			int ed = sr_edit_distance((const uint8_t *)term + plen, tlen - plen,
			                          t + plen, n - plen, edits, true);
			if (ed > edits)
				continue;
			size_t mn = ncp < tcp ? ncp : tcp;
			float boost = ed == 0 ? 1.0f : mn ? 1.0f - (float)ed / (float)mn : 0.0f;
			cands_push(&all, t, n, st_terms_doc_freq(it), boost);
		}
		st_terms_close(it);
	}
	/* one entry per term, dfs summed over segments */
	sort_n(all.v, all.n, sizeof(cand), by_term);
	size_t w = 0;
	for (size_t i = 0; i < all.n; i++) {
		if (w && !by_term(&all.v[w - 1], &all.v[i])) {
			all.v[w - 1].df += all.v[i].df;
			cm_free(T, all.v[i].t);
			continue;
		}
		all.v[w++] = all.v[i];
	}
	all.n = w;
	for (size_t i = 0; i < all.n; i++) {
		cand *c = &all.v[i];
		bool drop = (c->n == tlen && !memcmp(c->t, term, tlen)) || c->df <= min_df;
		if (!drop && g->dist != DIST_INTERNAL)
			c->score = string_distance(g->dist, term, tlen, c->t, c->n);
		if (!drop && c->score < g->accuracy)
			drop = true;
		if (drop) {
			cm_free(T, c->t);
			c->t = NULL;
		}
	}
	w = 0;
	for (size_t i = 0; i < all.n; i++)
		if (all.v[i].t)
			all.v[w++] = all.v[i];
	all.n = w;
	sort_n(all.v, all.n, sizeof(cand), by_boost);
	for (size_t i = 0; i < all.n && i < keep; i++)
		cands_push(out, (const uint8_t *)all.v[i].t, all.v[i].n, all.v[i].df,
		           all.v[i].score);
	cands_free(&all);
}

/* DirectSpellChecker.suggestSimilar: up to num suggestions for term.
 * min_df_override >= 0 replaces the thresholdFrequency (phrase generators). */
static void
spell_check(sr_exec *x, st_postings *p, const sg_gen *g, const char *term, size_t tlen, size_t num,
            int64_t min_df_override, cands *out)
{
	memset(out, 0, sizeof *out);
	if (g->min_word_length > 0 &&
	    sr_utf8_len((const uint8_t *)term, tlen) < (size_t)g->min_word_length)
		return;
	fstats fs;
	fstats_get(x, g->field, &fs);
	if (!fs.present)
		return;
	uint64_t df, ttf;
	term_stats(x, p, g->field, term, tlen, &df, &ttf);
	if (g->mode == MODE_MISSING && df > 0)
		return;
	float mqf = g->max_term_freq;
	if (mqf >= 1.0f && (double)df > mqf)
		return;
	else if ((double)df > ceil((double)(mqf * (float)fs.max_doc)))
		return;
	uint64_t min_df = g->mode == MODE_POPULAR ? df : 0;
	float thr = min_df_override >= 0 ? (float)min_df_override : g->min_doc_freq;
	if (thr >= 1.0f) {
		if ((uint64_t)thr > min_df)
			min_df = (uint64_t)thr;
	} else if (thr > 0.0f) {
		int64_t t = (int64_t)(thr * (float)fs.max_doc) - 1;
		if (t > 0 && (uint64_t)t > min_df)
			min_df = (uint64_t)t;
	}
	size_t inspections = num * (size_t)g->max_inspections;
	fuzzy_pass(x, g, term, tlen, 1, min_df, inspections, out);
	if (g->max_edits > 1 && out->n < inspections) {
		cands more = {0};
		fuzzy_pass(x, g, term, tlen, g->max_edits, min_df, inspections, &more);
		for (size_t i = 0; i < more.n; i++) {
			bool dup = false;
			for (size_t j = 0; j < out->n && !dup; j++)
				dup = !by_term(&out->v[j], &more.v[i]);
			if (!dup)
				cands_push(out, (const uint8_t *)more.v[i].t, more.v[i].n,
				           more.v[i].df, more.v[i].score);
		}
		cands_free(&more);
	}
	sort_n(out->v, out->n, sizeof(cand), g->sort_freq ? by_freq_sw : by_score_sw);
	while (out->n > num)
		cm_free(T, out->v[--out->n].t);
}

/* ---- analysis ---- */

typedef struct stok {
	char *t;
	size_t n;
	uint32_t start, end;
} stok;

typedef struct stoks {
	stok *v;
	size_t n;
	bool skip_shingles;
	bool overflow;
} stoks;

static int
stok_cb(void *ctx, const st_token *t)
{
	stoks *ts = ctx;
	if (ts->skip_shingles && t->type && !strcmp(t->type, "shingle"))
		return 0;
	if (ts->n >= MAX_TOKENS) {
		ts->overflow = true;
		return 1;
	}
	ts->v = cm_realloc(T, ts->v, (ts->n + 1) * sizeof *ts->v);
	stok *e = &ts->v[ts->n++];
	e->t = cm_malloc(T, t->len + 1);
	memcpy(e->t, t->term, t->len);
	e->t[t->len] = 0;
	e->n = t->len;
	e->start = t->start;
	e->end = t->end;
	return 0;
}

static void
stoks_free(stoks *ts)
{
	for (size_t i = 0; i < ts->n; i++)
		cm_free(T, ts->v[i].t);
	cm_free(T, ts->v);
}

static cm_err
analyze_text(const st_mapping *m, const st_field_def *d, const char *analyzer, const char *text,
             stoks *ts, cm_error *err)
{
	st_analyzer_kind an = d->type == ST_FT_TEXT ? d->search_analyzer : ST_AN_KEYWORD;
	const st_analyzer *custom =
	    d->type == ST_FT_TEXT ? d->custom_search_analyzer : d->normalizer;
	if (analyzer && !st_analysis_resolve(m->analysis, analyzer, &an, &custom))
		return cm_error_set(err, CM_EINVAL, "analyzer [%s] not found", analyzer);
	cm_err rc = st_analyze_with(custom, an, text, strlen(text), 0, stok_cb, ts, NULL);
	if (!rc && ts->overflow)
		rc = cm_error_set(err, CM_EINVAL, "too many tokens in suggest text (at most %d)",
		                  MAX_TOKENS);
	if (rc && !err->code)
		cm_error_set(err, rc, "analysis failed");
	return rc;
}

/* ES counts offsets in UTF-16 units. */
static uint32_t
u16_units(const char *s, size_t n)
{
	uint32_t u = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c & 0xC0) != 0x80)
			u += c >= 0xF0 ? 2 : 1;
	}
	return u;
}

static const st_field_def *
field_def(const st_mapping *m, const char *field, bool phrase, cm_error *err)
{
	static const st_field_def flat_key = {.type = ST_FT_KEYWORD, .analyzer = ST_AN_KEYWORD};
	const st_field_def *d = m ? st_mapping_find(m, field) : NULL;
	if ((!d && st_mapping_flattened_owner(m, field)) || (d && d->type == ST_FT_FLATTENED))
		return &flat_key; /* a flattened field's values and keys are keywords */
	if (!d || d->type == ST_FT_OBJECT) {
		cm_error_set(err, CM_EINVAL, "%s mapping found for field [%s]",
		             phrase ? "No" : "no", field);
		return NULL;
	}
	if (d->type != ST_FT_TEXT && d->type != ST_FT_KEYWORD) {
		cm_error_set(err, CM_EINVAL,
		             "suggesters run on text and keyword fields; [%s] is of type [%s]",
		             field, st_field_type_name(d->type));
		return NULL;
	}
	return d;
}

/* ---- term suggester (shard) ---- */

static cm_err
term_shard(sr_exec *x, st_postings *p, const st_mapping *m, const sg_one *o, cm_buf *b,
           cm_error *err)
{
	const st_field_def *d = field_def(m, o->field, false, err);
	if (!d)
		return err->code;
	stoks ts = {0};
	cm_err rc = analyze_text(m, d, o->analyzer, o->text, &ts, err);
	if (rc) {
		stoks_free(&ts);
		return rc;
	}
	cm_buf_put(b, "{\"e\":[", 6);
	for (size_t i = 0; i < ts.n; i++) {
		stok *t = &ts.v[i];
		if (i)
			cm_buf_put_u8(b, ',');
		cm_buf_put(b, "{\"text\":", 8);
		sr_jw_str(b, t->t, t->n);
		cm_buf_printf(b, ",\"offset\":%u,\"length\":%u,\"options\":[",
		              u16_units(o->text, t->start),
		              u16_units(o->text + t->start, t->end - t->start));
		cands c;
		spell_check(x, p, &o->gen, t->t, t->n, (size_t)o->shard_size, -1, &c);
		for (size_t k = 0; k < c.n; k++) {
			if (k)
				cm_buf_put_u8(b, ',');
			cm_buf_put(b, "{\"text\":", 8);
			sr_jw_str(b, c.v[k].t, c.v[k].n);
			cm_buf_printf(b, ",\"score\":%.9g,\"freq\":%llu}", (double)c.v[k].score,
			              (unsigned long long)c.v[k].df);
		}
		cands_free(&c);
		cm_buf_put(b, "]}", 2);
	}
	cm_buf_put(b, "]}", 2);
	stoks_free(&ts);
	return CM_OK;
}

/* ---- phrase suggester (shard) ---- */

typedef struct pcand {
	char *t;
	size_t n;
	uint64_t freq; /* totalTermFreq in the generator's field */
	double dist;   /* stringDistance; 1.0 for the input term */
	double score;  /* dist * (freq + 1) / (dict + 1) */
	bool user_input;
} pcand;

typedef struct pset {
	pcand orig;
	pcand *c;
	size_t n;
} pset;

typedef struct corr {
	double score;
	size_t *pick; /* per token: 0 = original, k = candidate k - 1 */
} corr;

typedef struct lm {
	sr_exec *x;
	st_postings *p;
	const sg_one *o;
	fstats fs; /* the suggest field */
	const char *sep;
	size_t sep_len;
	pset *sets;
	size_t nsets;
	int gram;
	cm_buf key;
	/* best corrections, ascending */
	corr *best;
	size_t nbest, cap;
	double cutoff;
	uint64_t paths;
	/* the suggest field's frequencies looked up so far (open addressing) */
	struct fc_e {
		char *k;
		size_t n;
		uint64_t v;
	} * fc;
	size_t fc_cap, fc_n;
} lm;

static size_t
fc_slot(const struct fc_e *fc, size_t cap, const char *t, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)t[i]) * 1099511628211ull;
	size_t i = (size_t)h & (cap - 1);
	while (fc[i].k && (fc[i].n != n || memcmp(fc[i].k, t, n)))
		i = (i + 1) & (cap - 1);
	return i;
}

/* totalTermFreq in the suggest field, cached: a correction search asks
 * for the same few unigrams and bigrams over and over. */
static uint64_t
lm_freq(lm *l, const char *t, size_t n)
{
	if (l->fc_n * 2 >= l->fc_cap) {
		size_t cap = l->fc_cap ? l->fc_cap * 2 : 64;
		struct fc_e *fc = cm_calloc(T, cap, sizeof *fc);
		for (size_t i = 0; i < l->fc_cap; i++)
			if (l->fc[i].k)
				fc[fc_slot(fc, cap, l->fc[i].k, l->fc[i].n)] = l->fc[i];
		cm_free(T, l->fc);
		l->fc = fc;
		l->fc_cap = cap;
	}
	size_t i = fc_slot(l->fc, l->fc_cap, t, n);
	if (!l->fc[i].k) {
		uint64_t df, ttf;
		term_stats(l->x, l->p, l->o->field, t, n, &df, &ttf);
		l->fc[i].k = cm_malloc(T, n ? n : 1);
		memcpy(l->fc[i].k, t, n);
		l->fc[i].n = n;
		l->fc[i].v = ttf;
		l->fc_n++;
	}
	return l->fc[i].v;
}

static uint64_t
lm_freq_join(lm *l, const pcand *a, const pcand *b, const pcand *c)
{
	cm_buf_reset(&l->key);
	cm_buf_put(&l->key, a->t, a->n);
	cm_buf_put(&l->key, l->sep, l->sep_len);
	cm_buf_put(&l->key, b->t, b->n);
	if (c) {
		cm_buf_put(&l->key, l->sep, l->sep_len);
		cm_buf_put(&l->key, c->t, c->n);
	}
	return lm_freq(l, (const char *)l->key.data, l->key.len);
}

static double
unigram(lm *l, const pcand *w)
{
	double f = (double)lm_freq(l, w->t, w->n);
	double v = (double)l->fs.sum_ttf, nt = (double)l->fs.num_terms;
	if (l->o->smooth == SM_LAPLACE)
		return (l->o->sm[0] + f) / (v + l->o->sm[0] * nt);
	return (1.0 + f) / (v + nt);
}

static double
bigram(lm *l, const pcand *w, const pcand *w1)
{
	double c = (double)lm_freq_join(l, w1, w, NULL);
	switch (l->o->smooth) {
	case SM_LAPLACE:
		return (l->o->sm[0] + c) /
		       ((double)w1->freq + l->o->sm[0] * (double)l->fs.num_terms);
	case SM_LINEAR:
		if (c < 1)
			return l->o->sm[2] * unigram(l, w);
		return l->o->sm[1] * (c / (0.5 + (double)w1->freq)) + l->o->sm[2] * unigram(l, w);
	default:
		if (c < 1)
			return l->o->sm[0] * unigram(l, w);
		return c / ((double)w1->freq + 0.00000000001);
	}
}

static double
trigram(lm *l, const pcand *w, const pcand *w1, const pcand *w2)
{
	switch (l->o->smooth) {
	case SM_LAPLACE: {
		double tc = (double)lm_freq_join(l, w2, w1, w);
		double bc = (double)lm_freq_join(l, w1, w, NULL);
		return (l->o->sm[0] + tc) / (bc + l->o->sm[0] * (double)l->fs.num_terms);
	}
	case SM_LINEAR: {
		/* ES joins this trigram as w, w_1, w_2 */
		double tc = (double)lm_freq_join(l, w, w1, w2);
		if (tc < 1)
			return bigram(l, w, w1);
		double bc = (double)lm_freq_join(l, w, w1, NULL);
		return l->o->sm[0] * (tc / (1.0 + bc)) + bigram(l, w, w1);
	}
	default: {
		double tc = (double)lm_freq_join(l, w2, w1, w);
		if (tc < 1) {
			double c = (double)lm_freq_join(l, w1, w, NULL);
			if (c < 1)
				return l->o->sm[0] * unigram(l, w);
			return l->o->sm[0] * (c / ((double)w1->freq + 0.00000000001));
		}
		double bc = (double)lm_freq_join(l, w1, w, NULL);
		return tc / (bc + 0.00000000001);
	}
	}
}

static const pcand *
picked(lm *l, const size_t *pick, size_t i)
{
	return pick[i] ? &l->sets[i].c[pick[i] - 1] : &l->sets[i].orig;
}

/* WordScorer.score: log10(channel * P(w | history)). */
static double
word_score(lm *l, const size_t *pick, size_t at)
{
	const pcand *w = picked(l, pick, at);
	double channel = w->dist == 1.0 ? (double)l->o->rwel : w->dist;
	double pr;
	if (at == 0 || l->gram == 1)
		pr = unigram(l, w);
	else if (at == 1 || l->gram == 2)
		pr = bigram(l, w, picked(l, pick, at - 1));
	else
		pr = trigram(l, w, picked(l, pick, at - 1), picked(l, pick, at - 2));
	return log10(channel * pr);
}

/* Candidate.compareTo: score, then term. */
static int
pcand_cmp(const pcand *a, const pcand *b)
{
	if (a->score != b->score)
		return a->score < b->score ? -1 : 1;
	return bytes_cmp(a->t, a->n, b->t, b->n);
}

/* Correction.compareTo */
static int
corr_cmp(lm *l, double sa, const size_t *pa, double sb, const size_t *pb)
{
	if (sa != sb)
		return sa < sb ? -1 : 1;
	for (size_t i = 0; i < l->nsets; i++) {
		int c = pcand_cmp(picked(l, pa, i), picked(l, pb, i));
		if (c)
			return -c;
	}
	return 0;
}

static void
update_top(lm *l, const size_t *pick, double log_score)
{
	double score = exp(log_score); /* ES: exp of summed log10s */
	if (!(score > l->cutoff))
		return;
	size_t max = (size_t)l->o->shard_size;
	if (l->nbest == max && corr_cmp(l, l->best[0].score, l->best[0].pick, score, pick) >= 0)
		return;
	size_t *copy = cm_malloc(T, l->nsets * sizeof(size_t));
	memcpy(copy, pick, l->nsets * sizeof(size_t));
	if (l->nbest == max) { /* drop the weakest */
		cm_free(T, l->best[0].pick);
		memmove(l->best, l->best + 1, (l->nbest - 1) * sizeof(corr));
		l->nbest--;
	}
	if (l->nbest == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 8;
		l->best = cm_realloc(T, l->best, l->cap * sizeof(corr));
	}
	size_t i = l->nbest;
	while (i > 0 && corr_cmp(l, l->best[i - 1].score, l->best[i - 1].pick, score, copy) > 0)
		i--;
	memmove(l->best + i + 1, l->best + i, (l->nbest - i) * sizeof(corr));
	l->best[i] = (corr){score, copy};
	l->nbest++;
}

/* CandidateScorer.findCandidates */
static void
find(lm *l, size_t *pick, size_t ord, int left, double path)
{
	if (++l->paths > MAX_PATHS || ((l->paths & 4095) == 0 && sr_deadline_passed(l->x)))
		return;
	pset *cur = &l->sets[ord];
	if (ord == l->nsets - 1) {
		pick[ord] = 0;
		update_top(l, pick, path + word_score(l, pick, ord));
		if (left > 0)
			for (size_t i = 0; i < cur->n; i++) {
				pick[ord] = i + 1;
				update_top(l, pick, path + word_score(l, pick, ord));
			}
		return;
	}
	pick[ord] = 0;
	find(l, pick, ord + 1, left, path + word_score(l, pick, ord));
	if (left > 0)
		for (size_t i = 0; i < cur->n; i++) {
			pick[ord] = i + 1;
			find(l, pick, ord + 1, left - 1, path + word_score(l, pick, ord));
		}
}

static int
pcand_desc(const void *a, const void *b)
{
	return -pcand_cmp(a, b);
}

static int
pcand_score_desc(const void *a, const void *b)
{
	const pcand *x = a, *y = b;
	return x->score == y->score ? 0 : x->score > y->score ? -1 : 1;
}

/* A stable sort (Java's Arrays.sort on objects) by score desc. */
static void
stable_by_score(pcand *v, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		pcand k = v[i];
		size_t j = i;
		while (j > 0 && pcand_score_desc(&v[j - 1], &k) > 0) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = k;
	}
}

/* The candidates of one token from every generator (MultiCandidateGeneratorWrapper). */
static void
draw(lm *l, pset *s)
{
	const sg_one *o = l->o;
	for (size_t g = 0; g < o->ngens; g++) {
		const sg_gen *gen = &o->gens[g];
		fstats fs;
		fstats_get(l->x, gen->field, &fs);
		if (!fs.present)
			continue;
		/* thresholdFrequency uses the input's frequency in the first generator */
		int64_t thr = 0;
		double of = (double)s->orig.freq;
		if (gen->mode != MODE_ALWAYS && of > 0) {
			double t = round(of * (log10(of - 5.0) + 1.0));
			thr = isnan(t) || t < 0 ? 0 : (int64_t)t;
		}
		cands c;
		spell_check(l->x, l->p, gen, s->orig.t, s->orig.n, (size_t)gen->size, thr, &c);
		for (size_t i = 0; i < c.n; i++) {
			/* CandidateSet.addCandidates: a term drawn again takes the
			 * newer generator's values */
			size_t at = s->n;
			for (size_t k = 0; k < s->n && at == s->n; k++)
				if (!bytes_cmp(s->c[k].t, s->c[k].n, c.v[i].t, c.v[i].n))
					at = k;
			uint64_t cdf, cttf;
			term_stats(l->x, l->p, gen->field, c.v[i].t, c.v[i].n, &cdf, &cttf);
			if (at == s->n) {
				s->c = cm_realloc(T, s->c, (s->n + 1) * sizeof(pcand));
				s->n++;
			} else {
				cm_free(T, s->c[at].t);
			}
			pcand *pc = &s->c[at];
			pc->t = c.v[i].t;
			pc->n = c.v[i].n;
			c.v[i].t = NULL;
			pc->freq = cttf;
			pc->dist = c.v[i].score;
			pc->score = pc->dist * ((double)cttf + 1) / ((double)fs.sum_ttf + 1);
			pc->user_input = false;
		}
		cands_free(&c);
		sort_n(s->c, s->n, sizeof(pcand), pcand_desc);
	}
	stable_by_score(s->c, s->n);
	while (s->n > (size_t)o->shard_size)
		cm_free(T, s->c[--s->n].t);
}

/* The gram size ES derives from a field's shingle filter (max_shingle_size),
 * else 1. */
static int
shingle_size(const st_mapping *m, const st_field_def *d)
{
	if (!d || d->type != ST_FT_TEXT || !d->custom_search_analyzer || !m->analysis)
		return 1;
	const cJSON *an = st_analysis_json(m->analysis);
	const char *name = st_analyzer_get_name(d->custom_search_analyzer);
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(an, "analyzer"), name ? name : "");
	const cJSON *filters = cJSON_GetObjectItemCaseSensitive(a, "filter");
	const cJSON *defs = cJSON_GetObjectItemCaseSensitive(an, "filter");
	const cJSON *f;
	cJSON_ArrayForEach(f, filters)
	{
		if (!cJSON_IsString(f))
			continue;
		if (!strcmp(f->valuestring, "shingle"))
			return 2;
		const cJSON *def = cJSON_GetObjectItemCaseSensitive(defs, f->valuestring);
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(def, "type");
		if (cJSON_IsString(type) && !strcmp(type->valuestring, "shingle")) {
			const cJSON *mx = cJSON_GetObjectItemCaseSensitive(def, "max_shingle_size");
			if (cJSON_IsNumber(mx))
				return mx->valueint > 3 ? 3 : mx->valueint < 2 ? 2 : mx->valueint;
			if (cJSON_IsString(mx))
				return atoi(mx->valuestring) > 3 ? 3 : 2;
			return 2;
		}
	}
	return 1;
}

static void
join_words(cm_buf *b, lm *l, const size_t *pick, const char *pre, const char *post)
{
	for (size_t i = 0; i < l->nsets; i++) {
		const pcand *c = picked(l, pick, i);
		if (i)
			cm_buf_put_u8(b, ' ');
		if (pre && !c->user_input && (i == 0 || picked(l, pick, i - 1)->user_input))
			cm_buf_put(b, pre, strlen(pre));
		cm_buf_put(b, c->t, c->n);
		if (pre && !c->user_input &&
		    (i + 1 == l->nsets || picked(l, pick, i + 1)->user_input))
			cm_buf_put(b, post, strlen(post));
	}
}

static cm_err
phrase_shard(sr_exec *x, st_postings *p, const st_mapping *m, const sg_one *o, cm_buf *b,
             cm_error *err)
{
	const st_field_def *d = field_def(m, o->field, true, err);
	if (!d)
		return err->code;
	for (size_t g = 0; g < o->ngens; g++)
		if (!field_def(m, o->gens[g].field, true, err))
			return err->code;
	lm l;
	memset(&l, 0, sizeof l);
	l.x = x;
	l.p = p;
	l.o = o;
	l.sep = o->separator ? o->separator : " ";
	l.sep_len = strlen(l.sep);
	l.gram = o->gram_size ? o->gram_size : shingle_size(m, d);
	l.cutoff = 4.9e-324; /* Double.MIN_VALUE */
	cm_buf_init(&l.key, T);
	fstats_get(x, o->field, &l.fs);
	fstats gfs;
	fstats_get(x, o->gens[0].field, &gfs);
	stoks ts = {.skip_shingles = true};
	cm_err rc = analyze_text(m, d, o->analyzer, o->text, &ts, err);
	bool any_gen = false;
	for (size_t g = 0; g < o->ngens; g++) {
		fstats fs;
		fstats_get(x, o->gens[g].field, &fs);
		any_gen |= fs.present;
	}
	if (!rc && ts.n && ts.n < (size_t)o->token_limit && any_gen && l.fs.present) {
		l.nsets = ts.n;
		l.sets = cm_calloc(T, ts.n, sizeof(pset));
		for (size_t i = 0; i < ts.n; i++) {
			pset *s = &l.sets[i];
			uint64_t df, ttf;
			term_stats(x, p, o->gens[0].field, ts.v[i].t, ts.v[i].n, &df, &ttf);
			s->orig = (pcand){ts.v[i].t,
			                  ts.v[i].n,
			                  ttf,
			                  1.0,
			                  ((double)ttf + 1) / ((double)gfs.sum_ttf + 1),
			                  true};
			ts.v[i].t = NULL;
			draw(&l, s);
		}
		size_t *pick = cm_calloc(T, l.nsets, sizeof(size_t));
		if (o->confidence > 0) {
			double sum = 0;
			for (size_t i = 0; i < l.nsets; i++)
				sum += word_score(&l, pick, i);
			l.cutoff = exp(sum) * o->confidence;
		}
		int miss = o->max_errors >= 1.0f ? (int)o->max_errors
		                                 : (int)lroundf(o->max_errors * (float)l.nsets);
		find(&l, pick, 0, miss > 1 ? miss : 1, 0.0);
		cm_free(T, pick);
	}
	cm_buf_printf(b, "{\"cut\":%.17g,\"e\":[{\"text\":", l.cutoff);
	sr_jw_cstr(b, o->text);
	cm_buf_printf(b, ",\"offset\":0,\"length\":%u,\"options\":[",
	              u16_units(o->text, strlen(o->text)));
	cm_buf tmp;
	cm_buf_init(&tmp, T);
	for (size_t i = l.nbest; i-- > 0;) {
		if (i + 1 < l.nbest)
			cm_buf_put_u8(b, ',');
		cm_buf_reset(&tmp);
		join_words(&tmp, &l, l.best[i].pick, NULL, NULL);
		cm_buf_put(b, "{\"text\":", 8);
		sr_jw_str(b, (const char *)tmp.data, tmp.len);
		if (o->pre_tag) {
			cm_buf_reset(&tmp);
			join_words(&tmp, &l, l.best[i].pick, o->pre_tag, o->post_tag);
			cm_buf_put(b, ",\"highlighted\":", 15);
			sr_jw_str(b, (const char *)tmp.data, tmp.len);
		}
		cm_buf_printf(b, ",\"score\":%.9g}", (double)(float)l.best[i].score);
	}
	cm_buf_put(b, "]}]}", 4);
	cm_buf_free(&tmp);
	for (size_t i = 0; i < l.nbest; i++)
		cm_free(T, l.best[i].pick);
	cm_free(T, l.best);
	for (size_t i = 0; i < l.nsets; i++) {
		cm_free(T, l.sets[i].orig.t);
		for (size_t k = 0; k < l.sets[i].n; k++)
			cm_free(T, l.sets[i].c[k].t);
		cm_free(T, l.sets[i].c);
	}
	cm_free(T, l.sets);
	cm_buf_free(&l.key);
	for (size_t i = 0; i < l.fc_cap; i++)
		cm_free(T, l.fc[i].k);
	cm_free(T, l.fc);
	stoks_free(&ts);
	return rc;
}

/* ---- completion suggester (shard) ---- */

typedef struct comp_hit {
	uint32_t weight;
	const char *text; /* into term copies below */
	size_t n;
	size_t seg;
	uint32_t doc;
} comp_hit;

static int
comp_hit_cmp(const void *a, const void *b)
{
	const comp_hit *x = a, *y = b;
	if (x->weight != y->weight)
		return x->weight > y->weight ? -1 : 1;
	int c = bytes_cmp(x->text, x->n, y->text, y->n);
	if (c)
		return c;
	if (x->seg != y->seg)
		return x->seg < y->seg ? -1 : 1;
	return (x->doc > y->doc) - (x->doc < y->doc);
}

static int
comp_doc_cmp(const void *a, const void *b)
{
	const comp_hit *x = a, *y = b;
	if (x->seg != y->seg)
		return x->seg < y->seg ? -1 : 1;
	if (x->doc != y->doc)
		return x->doc < y->doc ? -1 : 1;
	return comp_hit_cmp(a, b);
}

/* The inputs of docs whose analysed form starts with the analysed prefix,
 * best weight first, one per document (as Lucene's TopSuggestDocs). */
static cm_err
completion_shard(sr_exec *x, st_postings *p, const st_mapping *m, const sg_one *o, cm_buf *b,
                 cm_error *err)
{
	const st_field_def *d = m ? st_mapping_find(m, o->field) : NULL;
	if (!d)
		return cm_error_set(err, CM_EINVAL, "no mapping found for field [%s]", o->field);
	if (d->type != ST_FT_COMPLETION)
		return cm_error_set(err, CM_EINVAL, "Field [%s] is not a completion suggest field",
		                    o->field);
	st_analyzer_kind an = d->search_analyzer;
	const st_analyzer *custom = d->custom_search_analyzer;
	if (o->analyzer && !st_analysis_resolve(m->analysis, o->analyzer, &an, &custom))
		return cm_error_set(err, CM_EINVAL, "analyzer [%s] not found", o->analyzer);
	stoks ts = {0};
	cm_err rc = st_analyze_with(custom, an, o->text, strlen(o->text), 0, stok_cb, &ts, NULL);
	cm_buf key, terms;
	cm_buf_init(&key, T);
	cm_buf_init(&terms, T);
	for (size_t i = 0; !rc && i < ts.n; i++) {
		if (i)
			cm_buf_put_u8(&key, ' ');
		cm_buf_put(&key, ts.v[i].t, ts.v[i].n);
	}
	stoks_free(&ts);
	comp_hit *hits = NULL;
	size_t nhits = 0, cap = 0;
	/* hits point into terms by offset until it stops growing */
	size_t *offs = NULL;
	for (size_t si = 0; !rc && key.len && si < x->nseg; si++) {
		const st_field_info *fi = st_segment_field(x->segs[si].seg, o->field);
		st_terms *it;
		if (!fi || !(fi->flags & ST_FI_POSTINGS) || st_terms_open(x->segs[si].txn, fi, &it))
			continue;
		const uint64_t *live = x->segs[si].live;
		for (bool ok = st_terms_seek(it, key.data, key.len); ok; ok = st_terms_next(it)) {
			size_t n;
			const uint8_t *t = st_terms_term(it, &n);
			if (n < key.len || memcmp(t, key.data, key.len))
				break;
			const uint8_t *sep = memchr(t, ST_COMPLETION_SEP, n);
			if (!sep || (size_t)(t + n - sep) < 12 || sep[11] != ST_COMPLETION_SEP)
				continue;
			uint32_t weight = (uint32_t)strtoul((const char *)sep + 1, NULL, 10);
			size_t off = terms.len, tl = (size_t)(t + n - (sep + 12));
			cm_buf_put(&terms, sep + 12, tl);
			if (st_terms_postings(it, p))
				continue;
			for (uint32_t doc = st_postings_next(p); doc != ST_NO_MORE_DOCS;
			     doc = st_postings_next(p)) {
				if (live && !st_bit_get(live, doc))
					continue;
				if (nhits == cap) {
					cap = cap ? cap * 2 : 16;
					hits = cm_realloc(T, hits, cap * sizeof *hits);
					offs = cm_realloc(T, offs, cap * sizeof *offs);
				}
				offs[nhits] = off;
				hits[nhits++] = (comp_hit){weight, NULL, tl, si, doc};
			}
		}
		st_terms_close(it);
	}
	for (size_t i = 0; i < nhits; i++)
		hits[i].text = (const char *)terms.data + offs[i];
	cm_free(T, offs);
	/* one per document: its best input */
	sort_n(hits, nhits, sizeof *hits, comp_doc_cmp);
	size_t w = 0;
	for (size_t i = 0; i < nhits; i++)
		if (!w || hits[w - 1].seg != hits[i].seg || hits[w - 1].doc != hits[i].doc)
			hits[w++] = hits[i];
	nhits = w;
	sort_n(hits, nhits, sizeof *hits, comp_hit_cmp);
	cm_buf_put(b, "{\"e\":[{\"text\":", 14);
	sr_jw_cstr(b, o->text);
	cm_buf_printf(b, ",\"offset\":0,\"length\":%u,\"options\":[",
	              u16_units(o->text, strlen(o->text)));
	cm_buf id, src;
	cm_buf_init(&id, T);
	cm_buf_init(&src, T);
	size_t taken = 0, *kept = cm_calloc(T, (size_t)o->shard_size + 1, sizeof(size_t));
	for (size_t i = 0; !rc && i < nhits && taken < (size_t)o->shard_size; i++) {
		bool dup = false; /* skip_duplicates: a text already taken */
		for (size_t k = 0; o->skip_duplicates && k < taken && !dup; k++)
			dup = !bytes_cmp(hits[kept[k]].text, hits[kept[k]].n, hits[i].text,
			                 hits[i].n);
		if (dup)
			continue;
		cm_buf_reset(&id);
		cm_buf_reset(&src);
		if (st_stored_get(x->segs[hits[i].seg].txn, hits[i].doc, &id, &src))
			continue;
		kept[taken] = i;
		if (taken++)
			cm_buf_put_u8(b, ',');
		cm_buf_put(b, "{\"text\":", 8);
		sr_jw_str(b, hits[i].text, hits[i].n);
		cm_buf_put(b, ",\"_id\":", 7);
		sr_jw_str(b, (const char *)id.data, id.len);
		cm_buf_printf(b, ",\"_score\":%u,\"_source\":", hits[i].weight);
		if (src.len)
			cm_buf_put(b, src.data, src.len);
		else
			cm_buf_put(b, "{}", 2);
		cm_buf_put_u8(b, '}');
	}
	cm_buf_put(b, "]}]}", 4);
	cm_free(T, kept);
	cm_buf_free(&id);
	cm_buf_free(&src);
	cm_free(T, hits);
	cm_buf_free(&terms);
	cm_buf_free(&key);
	if (rc && !err->code)
		cm_error_set(err, rc, "analysis failed");
	return rc;
}

cm_err
sr_suggest_shard(const sr_suggest *s, st_reader *r, uint64_t deadline_ns, sr_shard_result *res,
                 cm_error *err)
{
	sr_exec x;
	cm_err rc = sr_exec_open(&x, r, deadline_ns, err);
	if (rc)
		return rc;
	const st_mapping *m = st_reader_mapping(r);
	st_postings *p = cm_malloc(T, sizeof *p);
	cm_buf b;
	cm_buf_init(&b, T);
	cm_buf_put_u8(&b, '{');
	for (size_t i = 0; i < s->n && !rc; i++) {
		const sg_one *o = &s->v[i];
		if (i)
			cm_buf_put_u8(&b, ',');
		sr_jw_cstr(&b, o->name);
		cm_buf_put_u8(&b, ':');
		rc = o->kind == SG_TERM     ? term_shard(&x, p, m, o, &b, err)
		     : o->kind == SG_PHRASE ? phrase_shard(&x, p, m, o, &b, err)
		                            : completion_shard(&x, p, m, o, &b, err);
	}
	cm_buf_put_u8(&b, '}');
	if (!rc) {
		cm_free(T, res->suggest);
		res->suggest = cm_strndup(T, (const char *)b.data, b.len);
		res->suggest_len = b.len;
		if (x.timed_out)
			res->timed_out = true; /* the term walks stopped early */
	}
	cm_buf_free(&b);
	cm_free(T, p);
	sr_exec_close(&x);
	return rc;
}

/* ---- the coordinator's fold ---- */

struct sr_suggest_acc {
	const sr_suggest *s;
	cJSON *acc; /* the folded partial, NULL before the first */
};

sr_suggest_acc *
sr_suggest_acc_new(const sr_suggest *s)
{
	sr_suggest_acc *a = cm_calloc(T, 1, sizeof *a);
	a->s = s;
	return a;
}

void
sr_suggest_acc_free(sr_suggest_acc *a)
{
	if (!a)
		return;
	cJSON_Delete(a->acc);
	cm_free(T, a);
}

static double
num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *
str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : "";
}

static cJSON *
find_option(cJSON *opts, const char *text)
{
	cJSON *o;
	cJSON_ArrayForEach(o, opts) if (!strcmp(str(o, "text"), text)) return o;
	return NULL;
}

static void
set_num(cJSON *o, const char *k, double v)
{
	cJSON *n = cJSON_GetObjectItemCaseSensitive(o, k);
	if (n)
		cJSON_SetNumberValue(n, v);
	else
		cJSON_AddNumberToObject(o, k, v);
}

/* Suggestion.Entry.reduce: options by text, score max, term freqs summed. */
static void
fold_entries(cJSON *into, const cJSON *from, bool term)
{
	cJSON *ie = cJSON_GetObjectItemCaseSensitive(into, "e");
	const cJSON *fe = cJSON_GetObjectItemCaseSensitive(from, "e");
	if (term == false && num(from, "cut") > num(into, "cut"))
		set_num(into, "cut", num(from, "cut"));
	cJSON *a = ie ? ie->child : NULL;
	const cJSON *b = fe ? fe->child : NULL;
	for (; a && b; a = a->next, b = b->next) {
		cJSON *aopts = cJSON_GetObjectItemCaseSensitive(a, "options");
		const cJSON *bo;
		cJSON_ArrayForEach(bo, cJSON_GetObjectItemCaseSensitive(b, "options"))
		{
			cJSON *ao = find_option(aopts, str(bo, "text"));
			if (!ao) {
				cJSON_AddItemToArray(aopts, cJSON_Duplicate(bo, true));
				continue;
			}
			if (num(bo, "score") > num(ao, "score")) {
				set_num(ao, "score", num(bo, "score"));
				const cJSON *hl =
				    cJSON_GetObjectItemCaseSensitive(bo, "highlighted");
				if (hl)
					cJSON_ReplaceItemInObjectCaseSensitive(
					    ao, "highlighted", cJSON_Duplicate(hl, true));
			}
			if (term)
				set_num(ao, "freq", num(ao, "freq") + num(bo, "freq"));
		}
	}
}

/* Completion options are documents: each keeps its own entry, named by
 * the index it came from. */
static void
name_index(cJSON *p, const sr_suggest *s, const char *index)
{
	for (size_t i = 0; index && i < s->n; i++) {
		if (s->v[i].kind != SG_COMPLETION)
			continue;
		const cJSON *e;
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(
		                          cJSON_GetObjectItemCaseSensitive(p, s->v[i].name), "e"))
		{
			cJSON *op;
			cJSON_ArrayForEach(
			    op,
			    cJSON_GetObjectItemCaseSensitive(
			        e, "options")) if (!cJSON_GetObjectItemCaseSensitive(op, "_index"))
			    cJSON_AddStringToObject(op, "_index", index);
		}
	}
}

static void
fold_completion(cJSON *into, const cJSON *from)
{
	cJSON *ie = cJSON_GetObjectItemCaseSensitive(into, "e");
	const cJSON *fe = cJSON_GetObjectItemCaseSensitive(from, "e");
	cJSON *a = ie ? ie->child : NULL;
	const cJSON *b = fe ? fe->child : NULL;
	for (; a && b; a = a->next, b = b->next) {
		cJSON *aopts = cJSON_GetObjectItemCaseSensitive(a, "options");
		const cJSON *bo;
		cJSON_ArrayForEach(bo, cJSON_GetObjectItemCaseSensitive(b, "options"))
		    cJSON_AddItemToArray(aopts, cJSON_Duplicate(bo, true));
	}
}

void
sr_suggest_acc_add(sr_suggest_acc *a, const char *partial, size_t len, const char *index)
{
	cJSON *p = cJSON_ParseWithLength(partial, len);
	if (!cJSON_IsObject(p)) {
		cJSON_Delete(p);
		return;
	}
	name_index(p, a->s, index);
	if (!a->acc) {
		a->acc = p;
		return;
	}
	for (size_t i = 0; i < a->s->n; i++) {
		const sg_one *o = &a->s->v[i];
		cJSON *into = cJSON_GetObjectItemCaseSensitive(a->acc, o->name);
		const cJSON *from = cJSON_GetObjectItemCaseSensitive(p, o->name);
		if (!into && from)
			cJSON_AddItemToObject(a->acc, o->name, cJSON_Duplicate(from, true));
		else if (into && from && o->kind == SG_COMPLETION)
			fold_completion(into, from);
		else if (into && from)
			fold_entries(into, from, o->kind == SG_TERM);
	}
	cJSON_Delete(p);
}

char *
sr_suggest_acc_take(sr_suggest_acc *a, size_t *len)
{
	*len = 0;
	if (!a->acc)
		return NULL;
	char *s = cJSON_PrintUnformatted(a->acc);
	if (!s)
		return NULL;
	*len = strlen(s);
	char *out = cm_strndup(T, s, *len);
	cJSON_free(s);
	cJSON_Delete(a->acc);
	a->acc = NULL;
	return out;
}

typedef struct ropt {
	const char *text, *hl;
	float score;
	double freq;
} ropt;

static int
ropt_score(const void *a, const void *b)
{
	const ropt *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	if (x->freq != y->freq)
		return x->freq > y->freq ? -1 : 1;
	return strcmp(x->text, y->text);
}

static int
ropt_freq(const void *a, const void *b)
{
	const ropt *x = a, *y = b;
	if (x->freq != y->freq)
		return x->freq > y->freq ? -1 : 1;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return strcmp(x->text, y->text);
}

typedef struct copt {
	const cJSON *o;
	const char *text, *index, *id;
	double score;
} copt;

static int
copt_cmp(const void *a, const void *b)
{
	const copt *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	int c = strcmp(x->text, y->text);
	if (c)
		return c;
	c = strcmp(x->index, y->index);
	return c ? c : strcmp(x->id, y->id);
}

static void
render_completion(const sg_one *o, const cJSON *e, cm_buf *out)
{
	const cJSON *opts = cJSON_GetObjectItemCaseSensitive(e, "options");
	size_t n = (size_t)cJSON_GetArraySize(opts), k = 0;
	copt *v = cm_calloc(T, n + 1, sizeof *v);
	const cJSON *op;
	cJSON_ArrayForEach(op, opts) v[k++] =
	    (copt){op, str(op, "text"), str(op, "_index"), str(op, "_id"), num(op, "_score")};
	sort_n(v, k, sizeof *v, copt_cmp);
	size_t shown = 0, *kept = cm_calloc(T, (size_t)o->size + 1, sizeof(size_t));
	for (size_t i = 0; i < k && shown < (size_t)o->size; i++) {
		bool dup = false; /* skip_duplicates: a text already shown */
		for (size_t j = 0; o->skip_duplicates && j < shown && !dup; j++)
			dup = !strcmp(v[kept[j]].text, v[i].text);
		if (dup)
			continue;
		kept[shown] = i;
		if (shown++)
			cm_buf_put_u8(out, ',');
		cm_buf_put(out, "{\"text\":", 8);
		sr_jw_cstr(out, v[i].text);
		cm_buf_put(out, ",\"_index\":", 10);
		sr_jw_cstr(out, v[i].index);
		cm_buf_put(out, ",\"_type\":\"_doc\",\"_id\":", 22);
		sr_jw_cstr(out, v[i].id);
		cm_buf_put(out, ",\"_score\":", 10);
		sr_jw_float(out, (float)v[i].score);
		cm_buf_put(out, ",\"_source\":", 11);
		char *src =
		    cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(v[i].o, "_source"));
		if (src)
			cm_buf_put(out, src, strlen(src));
		else
			cm_buf_put(out, "{}", 2);
		cJSON_free(src);
		cm_buf_put_u8(out, '}');
	}
	cm_free(T, kept);
	cm_free(T, v);
}

static void
render_entry(const sg_one *o, const cJSON *e, double cut, cm_buf *out)
{
	cm_buf_put(out, "{\"text\":", 8);
	sr_jw_cstr(out, str(e, "text"));
	cm_buf_printf(out, ",\"offset\":%.0f,\"length\":%.0f,\"options\":[", num(e, "offset"),
	              num(e, "length"));
	if (o->kind == SG_COMPLETION) {
		render_completion(o, e, out);
		cm_buf_put(out, "]}", 2);
		return;
	}
	const cJSON *opts = cJSON_GetObjectItemCaseSensitive(e, "options");
	size_t n = (size_t)cJSON_GetArraySize(opts), k = 0;
	ropt *v = cm_calloc(T, n + 1, sizeof *v);
	const cJSON *op;
	cJSON_ArrayForEach(op, opts)
	{
		ropt r = {str(op, "text"), NULL, (float)num(op, "score"), num(op, "freq")};
		const cJSON *hl = cJSON_GetObjectItemCaseSensitive(op, "highlighted");
		r.hl = cJSON_IsString(hl) ? hl->valuestring : NULL;
		if (o->kind == SG_PHRASE) {
			r.freq = 0;
			if (!(r.score > cut))
				continue;
		}
		v[k++] = r;
	}
	sort_n(v, k, sizeof *v, o->kind == SG_TERM && o->gen.sort_freq ? ropt_freq : ropt_score);
	for (size_t i = 0; i < k && i < (size_t)o->size; i++) {
		if (i)
			cm_buf_put_u8(out, ',');
		cm_buf_put(out, "{\"text\":", 8);
		sr_jw_cstr(out, v[i].text);
		if (v[i].hl) {
			cm_buf_put(out, ",\"highlighted\":", 15);
			sr_jw_cstr(out, v[i].hl);
		}
		cm_buf_put(out, ",\"score\":", 9);
		sr_jw_float(out, v[i].score);
		if (o->kind == SG_TERM)
			cm_buf_printf(out, ",\"freq\":%.0f", v[i].freq);
		cm_buf_put_u8(out, '}');
	}
	cm_buf_put(out, "]}", 2);
	cm_free(T, v);
}

void
sr_suggest_acc_render(sr_suggest_acc *a, cm_buf *out)
{
	cm_buf_put(out, ",\"suggest\":{", 12);
	for (size_t i = 0; i < a->s->n; i++) {
		const sg_one *o = &a->s->v[i];
		if (i)
			cm_buf_put_u8(out, ',');
		if (a->s->typed_keys) {
			cm_buf tk;
			cm_buf_init(&tk, T);
			cm_buf_printf(&tk, "%s#%s",
			              o->kind == SG_TERM     ? "term"
			              : o->kind == SG_PHRASE ? "phrase"
			                                     : "completion",
			              o->name);
			sr_jw_str(out, (const char *)tk.data, tk.len);
			cm_buf_free(&tk);
		} else {
			sr_jw_cstr(out, o->name);
		}
		cm_buf_put(out, ":[", 2);
		const cJSON *sg = a->acc ? cJSON_GetObjectItemCaseSensitive(a->acc, o->name) : NULL;
		double cut = num(sg, "cut");
		const cJSON *e;
		size_t k = 0;
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(sg, "e"))
		{
			if (k++)
				cm_buf_put_u8(out, ',');
			render_entry(o, e, cut, out);
		}
		cm_buf_put_u8(out, ']');
	}
	cm_buf_put_u8(out, '}');
}
