/* Index settings "analysis" into chain definitions, ES's validation and
 * messages; built-in component names resolve to definitions made on use. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/cm_alloc.h"
#include "an_chain.h"

#define M CM_MEM_STORAGE
#define MAX_COMPONENTS 1024
#define MAX_SYN_RULES 100000

struct st_analysis {
	int refs;
	cJSON *json;
	int max_ngram_diff, max_shingle_diff;
	an_defs defs; /* named in settings (and built-ins made on use) */
	st_analyzer **analyzers;
	size_t nanalyzers;
	st_analyzer **normalizers;
	size_t nnormalizers;
};

/* Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (ES's _english_). */
static const char *const english_stop[] = {
    "a",   "an",    "and",  "are",   "as",    "at",   "be",   "but", "by",  "for",  "if",
    "in",  "into",  "is",   "it",    "no",    "not",  "of",   "on",  "or",  "such", "that",
    "the", "their", "then", "there", "these", "they", "this", "to",  "was", "will", "with",
};

/* ---- small JSON readers ---- */

static cm_err
bad(cm_error *err, const char *fmt, const char *a, const char *b)
{
	return cm_error_set(err, CM_EINVAL, fmt, a, b);
}

static bool
get_int(const cJSON *o, const char *k, int dflt, int *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	*out = dflt;
	if (v == NULL)
		return true;
	if (cJSON_IsNumber(v) && v->valuedouble == (double)(int)v->valuedouble) {
		*out = (int)v->valuedouble;
		return true;
	}
	if (cJSON_IsString(v)) {
		char *end;
		long x = strtol(v->valuestring, &end, 10);
		if (*v->valuestring && *end == 0 && x >= INT32_MIN && x <= INT32_MAX) {
			*out = (int)x;
			return true;
		}
	}
	return false;
}

static bool
get_bool(const cJSON *o, const char *k, bool dflt, bool *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	*out = dflt;
	if (v == NULL)
		return true;
	if (cJSON_IsBool(v)) {
		*out = cJSON_IsTrue(v);
		return true;
	}
	if (cJSON_IsString(v) &&
	    (!strcmp(v->valuestring, "true") || !strcmp(v->valuestring, "false"))) {
		*out = v->valuestring[0] == 't';
		return true;
	}
	return false;
}

static const char *
get_str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A list setting: a JSON array of strings, or one comma-separated string. */
static bool
get_list(const cJSON *o, const char *k, char ***out, size_t *n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	*out = NULL;
	*n = 0;
	if (v == NULL)
		return true;
	if (cJSON_IsString(v)) {
		const char *s = v->valuestring;
		size_t cnt = 1;
		for (const char *p = s; *p; p++)
			cnt += *p == ',';
		*out = cm_calloc(M, cnt, sizeof(char *));
		while (*s) {
			const char *e = strchr(s, ',');
			size_t l = e ? (size_t)(e - s) : strlen(s);
			while (l > 0 && isspace((unsigned char)*s)) {
				s++;
				l--;
			}
			while (l > 0 && isspace((unsigned char)s[l - 1]))
				l--;
			if (l > 0)
				(*out)[(*n)++] = cm_strndup(M, s, l);
			s += e ? (size_t)(e - s) + 1 : strlen(s);
		}
		return true;
	}
	if (!cJSON_IsArray(v))
		return false;
	*out = cm_calloc(M, (size_t)cJSON_GetArraySize(v) + 1, sizeof(char *));
	const cJSON *it;
	cJSON_ArrayForEach(it, v)
	{
		if (!cJSON_IsString(it))
			return false;
		(*out)[(*n)++] = cm_strdup(M, it->valuestring);
	}
	return true;
}

static void
strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cm_free(M, v[i]);
	cm_free(M, v);
}

static const char *
json_type_or(const cJSON *def, const char *fallback)
{
	const char *t = get_str(def, "type");
	return t ? t : fallback;
}

/* ---- definitions ---- */

static void
tok_def_free(tok_def *d)
{
	if (d == NULL)
		return;
	if (d->has_re)
		regfree(&d->re);
	cm_free(M, d->name);
	cm_free(M, d->custom_chars);
	strv_free(d->split_on, d->nsplit_on);
	cm_free(M, d);
}

static void
filter_def_free(filter_def *d)
{
	if (d == NULL)
		return;
	cm_free(M, d->name);
	strv_free(d->words, d->nwords);
	strv_free(d->syn_rules, d->nsyn);
	cm_free(M, d->separator);
	cm_free(M, d->filler);
	if (d->has_re)
		regfree(&d->re);
	cm_free(M, d->replacement);
	strv_free(d->over_from, d->nover);
	strv_free(d->over_to, d->nover);
	cm_free(M, d);
}

static void
cf_def_free(cf_def *d)
{
	if (d == NULL)
		return;
	if (d->has_re)
		regfree(&d->re);
	cm_free(M, d->name);
	strv_free(d->escaped_tags, d->nescaped_tags);
	strv_free(d->map_from, d->nmap);
	strv_free(d->map_to, d->nmap);
	cm_free(M, d->replacement);
	cm_free(M, d);
}

static void
defs_free(an_defs *o)
{
	for (size_t i = 0; i < o->ntoks; i++)
		tok_def_free(o->toks[i]);
	for (size_t i = 0; i < o->nfilters; i++)
		filter_def_free(o->filters[i]);
	for (size_t i = 0; i < o->ncfs; i++)
		cf_def_free(o->cfs[i]);
	cm_free(M, o->toks);
	cm_free(M, o->filters);
	cm_free(M, o->cfs);
	memset(o, 0, sizeof(*o));
}

#define PUSH(arr, n, v)                                                                            \
	do {                                                                                       \
		(arr) = cm_realloc(M, (arr), ((n) + 1) * sizeof(*(arr)));                          \
		(arr)[(n)++] = (v);                                                                \
	} while (0)

static cm_err
compile_re(regex_t *re, bool *has, const char *pattern, const char *flags, const char *what,
           cm_error *err)
{
	int cf = REG_EXTENDED;
	if (flags != NULL && *flags) {
		char *copy = cm_strdup(M, flags), *save = NULL;
		for (char *f = strtok_r(copy, "|", &save); f; f = strtok_r(NULL, "|", &save)) {
			while (*f == ' ')
				f++;
			if (!strcmp(f, "CASE_INSENSITIVE"))
				cf |= REG_ICASE;
			else if (!strcmp(f, "MULTILINE"))
				cf |= REG_NEWLINE;
			else if (strcmp(f, "UNICODE_CASE") &&
			         strcmp(f, "UNICODE_CHARACTER_CLASS") && strcmp(f, "COMMENTS") &&
			         strcmp(f, "DOTALL")) {
				cm_error_set(err, CM_EINVAL, "Unknown regex flag [%s]", f);
				cm_free(M, copy);
				return CM_EINVAL;
			}
		}
		cm_free(M, copy);
	}
	/* Java's shorthands that POSIX lacks; (?i) as a leading flag */
	cm_buf px;
	cm_buf_init(&px, M);
	bool in_class = false;
	if (strncmp(pattern, "(?i)", 4) == 0) {
		cf |= REG_ICASE;
		pattern += 4;
	}
	for (const char *p = pattern; *p; p++) {
		if (*p == '\\' && p[1]) {
			const char *cls = NULL;
			switch (p[1]) {
			case 'd':
				cls = in_class ? "[:digit:]" : "[[:digit:]]";
				break;
			case 'D':
				cls = in_class ? NULL : "[^[:digit:]]";
				break;
			case 's':
				cls = in_class ? "[:space:]" : NULL;
				break;
			case 'w':
				cls = in_class ? "[:alnum:]_" : NULL;
				break;
			case 't':
				cls = "\t";
				break;
			case 'n':
				cls = "\n";
				break;
			default:
				break;
			}
			if (cls != NULL) {
				cm_buf_put(&px, cls, strlen(cls));
			} else {
				cm_buf_put(&px, p, 2);
			}
			p++;
			continue;
		}
		if (*p == '[' && !in_class)
			in_class = true;
		else if (*p == ']' && in_class && p[-1] != '[' &&
		         !(p - pattern >= 2 && p[-1] == '^' && p[-2] == '['))
			in_class = false;
		cm_buf_put(&px, p, 1);
	}
	cm_buf_put(&px, "", 1);
	int rc = regcomp(re, (const char *)px.data, cf);
	cm_buf_free(&px);
	if (rc != 0) {
		char msg[128];
		regerror(rc, re, msg, sizeof(msg));
		return cm_error_set(err, CM_EINVAL, "Invalid regex pattern [%s] in %s: %s", pattern,
		                    what, msg);
	}
	*has = true;
	return CM_OK;
}

static char *unescape(const char *s, size_t n);

static cm_err
parse_tokenizer(st_analysis *a, const char *name, const cJSON *o, tok_def **out, cm_error *err)
{
	const char *type = json_type_or(o, NULL);
	if (type == NULL)
		return bad(err, "tokenizer [%s] must specify type%s", name, "");
	tok_def *d = cm_calloc(M, 1, sizeof(*d));
	d->name = cm_strdup(M, name);
	d->group = -1;
	bool ok = get_int(o, "max_token_length", 255, &d->max_token_length);
	cm_err rc = CM_OK;
	if (!strcmp(type, "standard"))
		d->kind = TK_STANDARD;
	else if (!strcmp(type, "whitespace"))
		d->kind = TK_WHITESPACE;
	else if (!strcmp(type, "keyword"))
		d->kind = TK_KEYWORD;
	else if (!strcmp(type, "letter"))
		d->kind = TK_LETTER;
	else if (!strcmp(type, "lowercase"))
		d->kind = TK_LOWERCASE;
	else if (!strcmp(type, "pattern"))
		d->kind = TK_PATTERN;
	else if (!strcmp(type, "simple_pattern")) {
		d->kind = TK_PATTERN;
		d->group = 0;
	} else if (!strcmp(type, "simple_pattern_split"))
		d->kind = TK_PATTERN;
	else if (!strcmp(type, "char_group"))
		d->kind = TK_CHAR_GROUP;
	else if (!strcmp(type, "path_hierarchy") || !strcmp(type, "PathHierarchy"))
		d->kind = TK_PATH_HIERARCHY;
	else if (!strcmp(type, "ngram") || !strcmp(type, "nGram"))
		d->kind = TK_NGRAM;
	else if (!strcmp(type, "edge_ngram") || !strcmp(type, "edgeNGram"))
		d->kind = TK_EDGE_NGRAM;
	else {
		rc = bad(err, "Unknown tokenizer type [%s] for [%s]", type, name);
		goto fail;
	}
	if (!ok || d->max_token_length < 1 || d->max_token_length > 1024 * 1024) {
		rc = bad(err,
		         "Failed to parse value for setting [max_token_length] of tokenizer [%s]%s",
		         name, "");
		goto fail;
	}
	if (d->kind == TK_CHAR_GROUP) {
		char **chars;
		size_t nc;
		if (!get_list(o, "tokenize_on_chars", &chars, &nc)) {
			strv_free(chars, nc);
			rc = bad(err, "[tokenize_on_chars] of tokenizer [%s] must be a list%s",
			         name, "");
			goto fail;
		}
		for (size_t i = 0; i < nc && !rc; i++) {
			const char *c = chars[i];
			if (!strcmp(c, "letter"))
				d->token_chars |= TC_LETTER;
			else if (!strcmp(c, "digit"))
				d->token_chars |= TC_DIGIT;
			else if (!strcmp(c, "whitespace"))
				d->token_chars |= TC_WHITESPACE;
			else if (!strcmp(c, "punctuation"))
				d->token_chars |= TC_PUNCTUATION;
			else if (!strcmp(c, "symbol"))
				d->token_chars |= TC_SYMBOL;
			else {
				char *u = unescape(c, strlen(c));
				size_t l = strlen(u), k = 1;
				while (k < l && ((uint8_t)u[k] & 0xC0) == 0x80)
					k++;
				if (l == 0 || k != l) {
					cm_free(M, u);
					rc = bad(err, "Invalid escaped char in [%s]%s", c, "");
					break;
				}
				d->split_on =
				    cm_realloc(M, d->split_on, (d->nsplit_on + 1) * sizeof(char *));
				d->split_on[d->nsplit_on++] = u;
			}
		}
		strv_free(chars, nc);
		if (rc)
			goto fail;
	}
	if (d->kind == TK_PATH_HIERARCHY) {
		const char *del = get_str(o, "delimiter"), *rep = get_str(o, "replacement");
		bool reverse;
		if (!get_bool(o, "reverse", false, &reverse) || reverse) {
			rc = bad(
			    err,
			    "path_hierarchy tokenizer [%s]: reverse is not supported by Shoal%s",
			    name, "");
			goto fail;
		}
		if ((del && (strlen(del) == 0 || strlen(del) > 4)) || (rep && strlen(rep) > 4)) {
			rc = cm_error_set(err, CM_EINVAL, "delimiter must be a one char value");
			goto fail;
		}
		snprintf(d->delimiter, sizeof(d->delimiter), "%s", del ? del : "/");
		snprintf(d->replacement, sizeof(d->replacement), "%s", rep ? rep : d->delimiter);
		if (!get_int(o, "skip", 0, &d->skip) || d->skip < 0) {
			rc = bad(err, "Failed to parse [skip] of tokenizer [%s]%s", name, "");
			goto fail;
		}
	}
	if (d->kind == TK_PATTERN) {
		const char *pat = get_str(o, "pattern");
		int dflt_group = d->group;
		if (!get_int(o, "group", dflt_group, &d->group) || d->group < -1 || d->group > 9) {
			rc = bad(err,
			         "Failed to parse value for setting [group] of tokenizer [%s]%s",
			         name, "");
			goto fail;
		}
		if ((rc = compile_re(&d->re, &d->has_re, pat ? pat : "\\W+", get_str(o, "flags"),
		                     "pattern tokenizer", err)))
			goto fail;
		if (d->group > (int)d->re.re_nsub) {
			rc =
			    bad(err,
			        "pattern tokenizer [%s]: group [%s] is beyond the pattern's groups",
			        name, "");
			goto fail;
		}
	}
	if (d->kind == TK_NGRAM || d->kind == TK_EDGE_NGRAM) {
		if (!get_int(o, "min_gram", 1, &d->min_gram) ||
		    !get_int(o, "max_gram", 2, &d->max_gram) || d->min_gram < 1) {
			rc = bad(err, "Failed to parse ngram settings of tokenizer [%s]%s", name,
			         "");
			goto fail;
		}
		if (d->min_gram > d->max_gram) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "minGram must not be greater than maxGram");
			goto fail;
		}
		if (d->kind == TK_NGRAM &&
		    d->max_gram - d->min_gram > (a ? a->max_ngram_diff : 1)) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "The difference between max_gram and min_gram in NGram "
			                  "Tokenizer must be "
			                  "less than or equal to: [%d] but was [%d]. This limit "
			                  "can be set by changing "
			                  "the [index.max_ngram_diff] index level setting.",
			                  (a ? a->max_ngram_diff : 1), d->max_gram - d->min_gram);
			goto fail;
		}
		char **tc;
		size_t ntc;
		if (!get_list(o, "token_chars", &tc, &ntc)) {
			strv_free(tc, ntc);
			rc = bad(err, "[token_chars] of tokenizer [%s] must be a list%s", name, "");
			goto fail;
		}
		for (size_t i = 0; i < ntc && !rc; i++) {
			if (!strcmp(tc[i], "letter"))
				d->token_chars |= TC_LETTER;
			else if (!strcmp(tc[i], "digit"))
				d->token_chars |= TC_DIGIT;
			else if (!strcmp(tc[i], "whitespace"))
				d->token_chars |= TC_WHITESPACE;
			else if (!strcmp(tc[i], "punctuation"))
				d->token_chars |= TC_PUNCTUATION;
			else if (!strcmp(tc[i], "symbol"))
				d->token_chars |= TC_SYMBOL;
			else if (!strcmp(tc[i], "custom"))
				d->token_chars |= TC_CUSTOM;
			else
				rc = bad(
				    err,
				    "Unknown token type: '%s', must be one of [symbol, "
				    "private_use, "
				    "paragraph_separator, start_punctuation, unassigned, "
				    "enclosing_mark, connector_punctuation, letter_number, "
				    "other_number, math_symbol, lowercase_letter, space_separator, "
				    "surrogate, initial_quote_punctuation, decimal_digit_number, "
				    "digit, other_punctuation, dash_punctuation, currency_symbol, "
				    "non_spacing_mark, format, modifier_letter, control, "
				    "uppercase_letter, other_symbol, end_punctuation, "
				    "modifier_symbol, other_letter, line_separator, "
				    "titlecase_letter, "
				    "letter, punctuation, combining_spacing_mark, "
				    "final_quote_punctuation, whitespace]%s",
				    tc[i], "");
		}
		strv_free(tc, ntc);
		if (rc)
			goto fail;
		const char *cc = get_str(o, "custom_token_chars");
		if ((d->token_chars & TC_CUSTOM) && cc == NULL) {
			rc = bad(err,
			         "Token type: 'custom' requires setting `custom_token_chars`%s%s",
			         "", "");
			goto fail;
		}
		if (cc)
			d->custom_chars = cm_strdup(M, cc);
	}
	*out = d;
	return CM_OK;
fail:
	tok_def_free(d);
	return rc;
}

static const char *
stem_alg_for(const char *lang, bool *possessive, bool snowball)
{
	static const char *const algs[] = {
	    "arabic",    "armenian",   "basque",     "catalan",  "danish",     "dutch",
	    "english",   "finnish",    "french",     "german",   "greek",      "hindi",
	    "hungarian", "indonesian", "irish",      "italian",  "lithuanian", "nepali",
	    "norwegian", "porter",     "portuguese", "romanian", "russian",    "serbian",
	    "spanish",   "swedish",    "tamil",      "turkish",  "yiddish",    "lovins"};
	char low[64];
	size_t n = strlen(lang);
	if (n >= sizeof(low))
		return NULL;
	for (size_t i = 0; i <= n; i++)
		low[i] = (char)tolower((unsigned char)lang[i]);
	*possessive = false;
	if (!snowball) {
		/* ES's stemmer names: english is Lucene's Porter stemmer, porter2 Snowball English
		 */
		if (!strcmp(low, "english") || !strcmp(low, "porter"))
			strcpy(low, "porter");
		else if (!strcmp(low, "porter2"))
			strcpy(low, "english");
		else if (!strcmp(low, "possessive_english")) {
			*possessive = true;
			return "possessive";
		} else if (!strcmp(low, "german2"))
			strcpy(low, "german");
	} else if (!strcmp(low, "german2")) {
		strcpy(low, "german");
	}
	for (size_t i = 0; i < sizeof(algs) / sizeof(*algs); i++)
		if (!strcmp(algs[i], low))
			return an_stemmer_exists(algs[i]) ? algs[i] : NULL;
	return NULL;
}

static cm_err
parse_stopwords(const cJSON *o, const char *key, const char *dflt, filter_def *d, cm_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	const char *set = cJSON_IsString(v) ? v->valuestring : v == NULL ? dflt : NULL;
	char pk[64];
	snprintf(pk, sizeof(pk), "%s_path", key);
	if (get_str(o, pk) != NULL)
		return cm_error_set(err, CM_EINVAL,
		                    "[%s_path] is not supported by Shoal: give the words inline",
		                    key);
	if (set != NULL && set[0] == '_') {
		if (!strcmp(set, "_none_"))
			return CM_OK;
		if (strcmp(set, "_english_") != 0)
			return cm_error_set(err, CM_EINVAL,
			                    "stop word set [%s] is not available in Shoal (only "
			                    "_english_ and _none_; give other words inline)",
			                    set);
		size_t n = sizeof(english_stop) / sizeof(*english_stop);
		d->words = cm_calloc(M, n, sizeof(char *));
		for (size_t i = 0; i < n; i++)
			d->words[d->nwords++] = cm_strdup(M, english_stop[i]);
		return CM_OK;
	}
	if (!get_list(o, key, &d->words, &d->nwords))
		return cm_error_set(err, CM_EINVAL, "[%s] must be a list of words or a set name",
		                    key);
	return CM_OK;
}

static size_t split_commas(const char *s, size_t n, const char **parts, size_t *lens, size_t cap);

static cm_err
parse_filter(st_analysis *a, const char *name, const cJSON *o, filter_def **out, cm_error *err)
{
	const char *type = json_type_or(o, NULL);
	if (type == NULL)
		return bad(err, "filter [%s] must specify type%s", name, "");
	filter_def *d = cm_calloc(M, 1, sizeof(*d));
	d->name = cm_strdup(M, name);
	cm_err rc = CM_OK;
	bool ok = true;
	if (!strcmp(type, "lowercase")) {
		d->kind = F_LOWERCASE;
		const char *lang = get_str(o, "language");
		if (lang != NULL) {
			rc = bad(err,
			         "lowercase filter [%s]: language [%s] is not supported by Shoal",
			         name, lang);
			goto fail;
		}
	} else if (!strcmp(type, "uppercase")) {
		d->kind = F_UPPERCASE;
	} else if (!strcmp(type, "asciifolding")) {
		d->kind = F_ASCIIFOLDING;
		ok = get_bool(o, "preserve_original", false, &d->preserve_original);
	} else if (!strcmp(type, "stop")) {
		d->kind = F_STOP;
		ok = get_bool(o, "ignore_case", false, &d->ignore_case) &&
		     get_bool(o, "remove_trailing", true, &d->remove_trailing);
		if ((rc = parse_stopwords(o, "stopwords", "_english_", d, err)))
			goto fail;
	} else if (!strcmp(type, "stemmer") || !strcmp(type, "snowball") ||
	           !strcmp(type, "porter_stem")) {
		d->kind = F_STEMMER;
		bool snow = !strcmp(type, "snowball");
		const char *lang = get_str(o, "language");
		if (lang == NULL)
			lang = get_str(o, "name");
		if (lang == NULL)
			lang = snow ? "English" : "english";
		if (!strcmp(type, "porter_stem"))
			lang = "porter";
		d->stem_alg = stem_alg_for(lang, &d->possessive, snow);
		if (d->stem_alg == NULL) {
			rc = bad(err,
			         "%s language [%s] is not available in Shoal (libstemmer's "
			         "Snowball languages, porter, porter2, possessive_english)",
			         snow ? "snowball" : "stemmer", lang);
			goto fail;
		}
	} else if (!strcmp(type, "synonym") || !strcmp(type, "synonym_graph")) {
		d->kind = F_SYNONYM;
		ok = get_bool(o, "expand", true, &d->expand) &&
		     get_bool(o, "lenient", false, &d->lenient);
		if (get_str(o, "synonyms_path") != NULL) {
			rc = bad(err,
			         "synonym filter [%s]: [synonyms_path] is not supported by Shoal, "
			         "give [synonyms] inline%s",
			         name, "");
			goto fail;
		}
		const char *fmt = get_str(o, "format");
		if (fmt != NULL && strcmp(fmt, "solr") != 0) {
			rc = bad(err,
			         "synonym filter [%s]: format [%s] is not supported by Shoal (solr "
			         "only)",
			         name, fmt);
			goto fail;
		}
		if (!get_list(o, "synonyms", &d->syn_rules, &d->nsyn) ||
		    !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "synonyms"))) {
			rc = bad(err,
			         "synonym requires either `synonyms` or `synonyms_path` to be "
			         "configured%s%s",
			         "", "");
			goto fail;
		}
		if (d->nsyn > MAX_SYN_RULES) {
			rc = bad(err, "synonym filter [%s]: too many rules%s", name, "");
			goto fail;
		}
	} else if (!strcmp(type, "length")) {
		d->kind = F_LENGTH;
		ok = get_int(o, "min", 0, &d->min) && get_int(o, "max", INT32_MAX, &d->max) &&
		     d->min >= 0 && d->max >= 0;
		if (ok && d->min > d->max) {
			rc = cm_error_set(
			    err, CM_EINVAL,
			    "minimum length must be less than or equal to maximum length");
			goto fail;
		}
	} else if (!strcmp(type, "trim")) {
		d->kind = F_TRIM;
	} else if (!strcmp(type, "unique")) {
		d->kind = F_UNIQUE;
		ok = get_bool(o, "only_on_same_position", false, &d->only_on_same_position);
	} else if (!strcmp(type, "truncate")) {
		d->kind = F_TRUNCATE;
		ok = get_int(o, "length", 10, &d->length);
		if (ok && d->length < 1) {
			rc = cm_error_set(err, CM_EINVAL, "length parameter must be provided");
			goto fail;
		}
	} else if (!strcmp(type, "reverse")) {
		d->kind = F_REVERSE;
	} else if (!strcmp(type, "word_delimiter_graph") || !strcmp(type, "word_delimiter")) {
		d->kind = F_WORD_DELIMITER;
		ok = get_bool(o, "generate_word_parts", true, &d->generate_word_parts) &&
		     get_bool(o, "generate_number_parts", true, &d->generate_number_parts) &&
		     get_bool(o, "catenate_words", false, &d->catenate_words) &&
		     get_bool(o, "catenate_numbers", false, &d->catenate_numbers) &&
		     get_bool(o, "catenate_all", false, &d->catenate_all) &&
		     get_bool(o, "split_on_case_change", true, &d->split_on_case_change) &&
		     get_bool(o, "split_on_numerics", true, &d->split_on_numerics) &&
		     get_bool(o, "stem_english_possessive", true, &d->stem_english_possessive) &&
		     get_bool(o, "preserve_original", false, &d->preserve_original);
		if (cJSON_GetObjectItemCaseSensitive(o, "protected_words") ||
		    cJSON_GetObjectItemCaseSensitive(o, "type_table")) {
			rc = bad(err,
			         "word_delimiter filter [%s]: protected_words and type_table are "
			         "not supported by Shoal%s",
			         name, "");
			goto fail;
		}
	} else if (!strcmp(type, "shingle")) {
		d->kind = F_SHINGLE;
		ok = get_int(o, "min_shingle_size", 2, &d->min_shingle) &&
		     get_int(o, "max_shingle_size", 2, &d->max_shingle) &&
		     get_bool(o, "output_unigrams", true, &d->output_unigrams);
		const char *sep = get_str(o, "token_separator"), *fill = get_str(o, "filler_token");
		d->separator = cm_strdup(M, sep ? sep : " ");
		d->filler = cm_strdup(M, fill ? fill : "_");
		if (ok && (d->min_shingle < 2 || d->max_shingle < 2)) {
			rc = cm_error_set(err, CM_EINVAL, "Min shingle size must be >= 2");
			goto fail;
		}
		if (ok && d->min_shingle > d->max_shingle) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "Min shingle size must be <= max shingle size");
			goto fail;
		}
		if (ok && d->max_shingle - d->min_shingle > (a ? a->max_shingle_diff : 3)) {
			rc = cm_error_set(
			    err, CM_EINVAL,
			    "In Shingle TokenFilter the difference between max_shingle_size and "
			    "min_shingle_size (and +1 if outputting unigrams) must be less than or "
			    "equal to: [%d] but was [%d]. This limit can be set by changing the "
			    "[index.max_shingle_diff] index level setting.",
			    (a ? a->max_shingle_diff : 3),
			    d->max_shingle - d->min_shingle + (d->output_unigrams ? 1 : 0));
			goto fail;
		}
	} else if (!strcmp(type, "ngram") || !strcmp(type, "nGram") ||
	           !strcmp(type, "edge_ngram") || !strcmp(type, "edgeNGram")) {
		d->kind = type[0] == 'e' ? F_EDGE_NGRAM : F_NGRAM;
		ok = get_int(o, "min_gram", 1, &d->min_gram) &&
		     get_int(o, "max_gram", 2, &d->max_gram) &&
		     get_bool(o, "preserve_original", false, &d->preserve_original) &&
		     d->min_gram >= 1;
		if (ok && d->min_gram > d->max_gram) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "minGram must not be greater than maxGram");
			goto fail;
		}
		if (ok && d->kind == F_NGRAM &&
		    d->max_gram - d->min_gram > (a ? a->max_ngram_diff : 1)) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "The difference between max_gram and min_gram in NGram "
			                  "Tokenizer must be "
			                  "less than or equal to: [%d] but was [%d]. This limit "
			                  "can be set by changing "
			                  "the [index.max_ngram_diff] index level setting.",
			                  (a ? a->max_ngram_diff : 1), d->max_gram - d->min_gram);
			goto fail;
		}
	} else if (!strcmp(type, "limit")) {
		d->kind = F_LIMIT;
		ok = get_int(o, "max_token_count", 1, &d->max_count) && d->max_count >= 0;
	} else if (!strcmp(type, "keep")) {
		d->kind = F_KEEP;
		bool lower;
		ok = get_bool(o, "keep_words_case", false, &lower);
		if (get_str(o, "keep_words_path") != NULL) {
			rc = bad(err,
			         "keep filter [%s]: [keep_words_path] is not supported by Shoal%s",
			         name, "");
			goto fail;
		}
		if (!cJSON_GetObjectItemCaseSensitive(o, "keep_words")) {
			rc = cm_error_set(
			    err, CM_EINVAL,
			    "keep requires either `keep_words` or `keep_words_path` to be "
			    "configured");
			goto fail;
		}
		ok = ok && get_list(o, "keep_words", &d->words, &d->nwords);
		for (size_t i = 0; ok && lower && i < d->nwords; i++)
			for (char *p = d->words[i]; *p; p++)
				*p = (char)tolower((unsigned char)*p);
	} else if (!strcmp(type, "keep_types")) {
		d->kind = F_KEEP_TYPES;
		const char *mode = get_str(o, "mode");
		if (mode && strcmp(mode, "include") && strcmp(mode, "exclude")) {
			rc = bad(err,
			         "`mode` option for keep_types filter [%s] must be one of "
			         "[include, exclude] but was [%s]",
			         name, mode);
			goto fail;
		}
		d->exclude = mode && !strcmp(mode, "exclude");
		if (!cJSON_GetObjectItemCaseSensitive(o, "types")) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "keep_types requires `types` to be configured");
			goto fail;
		}
		ok = get_list(o, "types", &d->words, &d->nwords);
	} else if (!strcmp(type, "elision")) {
		d->kind = F_ELISION;
		static const char *const fr[] = {"l",      "m",      "t",     "qu", "n",
		                                 "s",      "j",      "d",     "c",  "jusqu",
		                                 "quoiqu", "lorsqu", "puisqu"};
		if (cJSON_GetObjectItemCaseSensitive(o, "articles")) {
			ok = get_list(o, "articles", &d->words, &d->nwords) &&
			     get_bool(o, "articles_case", false, &d->ignore_case);
		} else {
			/* Lucene's French articles, matched ignoring case */
			d->ignore_case = true;
			d->words = cm_calloc(M, sizeof(fr) / sizeof(*fr), sizeof(char *));
			for (size_t i = 0; i < sizeof(fr) / sizeof(*fr); i++)
				d->words[d->nwords++] = cm_strdup(M, fr[i]);
		}
	} else if (!strcmp(type, "apostrophe")) {
		d->kind = F_APOSTROPHE;
	} else if (!strcmp(type, "decimal_digit")) {
		d->kind = F_DECIMAL_DIGIT;
	} else if (!strcmp(type, "pattern_replace")) {
		d->kind = F_PATTERN_REPLACE;
		const char *pat = get_str(o, "pattern"), *rep = get_str(o, "replacement");
		if (pat == NULL) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "pattern is missing for [%s] token filter of type "
			                  "'pattern_replace'",
			                  name);
			goto fail;
		}
		ok = get_bool(o, "all", true, &d->replace_all);
		if ((rc = compile_re(&d->re, &d->has_re, pat, get_str(o, "flags"),
		                     "pattern_replace token filter", err)))
			goto fail;
		d->replacement = cm_strdup(M, rep ? rep : "");
	} else if (!strcmp(type, "flatten_graph")) {
		d->kind = F_FLATTEN_GRAPH;
	} else if (!strcmp(type, "remove_duplicates")) {
		d->kind = F_REMOVE_DUPLICATES;
	} else if (!strcmp(type, "stemmer_override")) {
		d->kind = F_STEMMER_OVERRIDE;
		char **rules;
		size_t nr;
		if (get_str(o, "rules_path") != NULL) {
			rc = bad(err,
			         "stemmer_override filter [%s]: [rules_path] is not supported by "
			         "Shoal%s",
			         name, "");
			goto fail;
		}
		if (!cJSON_GetObjectItemCaseSensitive(o, "rules") ||
		    !get_list(o, "rules", &rules, &nr)) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "stemmer override filter requires either `rules` or "
			                  "`rules_path` to be configured");
			goto fail;
		}
		for (size_t i = 0; i < nr && !rc; i++) {
			const char *arrow = strstr(rules[i], "=>");
			const char *lp[64];
			size_t ll[64], nl;
			if (arrow == NULL) {
				rc = bad(err, "Invalid Keyword override Rule:%s%s", rules[i], "");
				break;
			}
			const char *to = arrow + 2;
			while (isspace((unsigned char)*to))
				to++;
			size_t tl = strlen(to);
			while (tl > 0 && isspace((unsigned char)to[tl - 1]))
				tl--;
			nl = split_commas(rules[i], (size_t)(arrow - rules[i]), lp, ll, 64);
			if (nl == 0 || tl == 0) {
				rc = bad(err, "Invalid Keyword override Rule:%s%s", rules[i], "");
				break;
			}
			for (size_t j = 0; j < nl; j++) {
				d->over_from =
				    cm_realloc(M, d->over_from, (d->nover + 1) * sizeof(char *));
				d->over_to =
				    cm_realloc(M, d->over_to, (d->nover + 1) * sizeof(char *));
				d->over_from[d->nover] = cm_strndup(M, lp[j], ll[j]);
				d->over_to[d->nover++] = cm_strndup(M, to, tl);
			}
		}
		strv_free(rules, nr);
		if (rc)
			goto fail;
	} else if (!strcmp(type, "fingerprint")) {
		d->kind = F_FINGERPRINT;
		const char *sep = get_str(o, "separator");
		d->separator = cm_strdup(M, sep ? sep : " ");
		ok = get_int(o, "max_output_size", 255, &d->max_count) && d->max_count >= 0;
	} else if (!strcmp(type, "keyword_marker")) {
		d->kind = F_KEYWORD_MARKER;
		ok = get_bool(o, "ignore_case", false, &d->ignore_case) &&
		     get_list(o, "keywords", &d->words, &d->nwords);
	} else {
		rc = bad(err, "Unknown filter type [%s] for [%s]", type, name);
		goto fail;
	}
	if (!ok) {
		rc = bad(err, "Failed to parse the settings of filter [%s] of type [%s]", name,
		         type);
		goto fail;
	}
	*out = d;
	return CM_OK;
fail:
	filter_def_free(d);
	return rc;
}

/* "a => b" with Java-style escapes in both sides. */
static char *
unescape(const char *s, size_t n)
{
	char *o = cm_malloc(M, n + 1);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\' && i + 1 < n) {
			char c = s[++i];
			if (c == 'n')
				o[k++] = '\n';
			else if (c == 't')
				o[k++] = '\t';
			else if (c == 'r')
				o[k++] = '\r';
			else if (c == 'u' && i + 4 < n) {
				char hex[5] = {s[i + 1], s[i + 2], s[i + 3], s[i + 4], 0};
				long cp = strtol(hex, NULL, 16);
				i += 4;
				/* BMP code point into UTF-8 */
				if (cp < 0x80)
					o[k++] = (char)cp;
				else if (cp < 0x800) {
					o[k++] = (char)(0xC0 | (cp >> 6));
					o[k++] = (char)(0x80 | (cp & 0x3F));
				} else {
					o = cm_realloc(M, o, n + 8);
					o[k++] = (char)(0xE0 | (cp >> 12));
					o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
					o[k++] = (char)(0x80 | (cp & 0x3F));
				}
			} else
				o[k++] = c;
		} else {
			o[k++] = s[i];
		}
	}
	o[k] = 0;
	return o;
}

static cm_err
parse_char_filter(const char *name, const cJSON *o, cf_def **out, cm_error *err)
{
	const char *type = json_type_or(o, NULL);
	if (type == NULL)
		return bad(err, "char_filter [%s] must specify type%s", name, "");
	cf_def *d = cm_calloc(M, 1, sizeof(*d));
	d->name = cm_strdup(M, name);
	cm_err rc = CM_OK;
	if (!strcmp(type, "html_strip")) {
		d->kind = CF_HTML_STRIP;
		if (!get_list(o, "escaped_tags", &d->escaped_tags, &d->nescaped_tags)) {
			rc = bad(err, "[escaped_tags] of char_filter [%s] must be a list%s", name,
			         "");
			goto fail;
		}
	} else if (!strcmp(type, "mapping")) {
		d->kind = CF_MAPPING;
		char **rules;
		size_t nr;
		if (get_str(o, "mappings_path") != NULL) {
			rc = bad(err,
			         "char_filter [%s]: [mappings_path] is not supported by Shoal%s",
			         name, "");
			goto fail;
		}
		if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "mappings")) ||
		    !get_list(o, "mappings", &rules, &nr)) {
			rc = bad(err,
			         "mapping requires either `mappings` or `mappings_path` to be "
			         "configured%s%s",
			         "", "");
			goto fail;
		}
		d->map_from = cm_calloc(M, nr + 1, sizeof(char *));
		d->map_to = cm_calloc(M, nr + 1, sizeof(char *));
		for (size_t i = 0; i < nr && !rc; i++) {
			const char *arrow = strstr(rules[i], "=>");
			if (arrow == NULL) {
				rc = bad(err, "Invalid Mapping Rule : [%s]%s", rules[i], "");
				break;
			}
			const char *l = rules[i], *le = arrow, *r = arrow + 2, *re = r + strlen(r);
			while (l < le && isspace((unsigned char)*l))
				l++;
			while (le > l && isspace((unsigned char)le[-1]))
				le--;
			while (r < re && isspace((unsigned char)*r))
				r++;
			while (re > r && isspace((unsigned char)re[-1]))
				re--;
			if (le == l) {
				rc = bad(err, "Invalid Mapping Rule : [%s]%s", rules[i], "");
				break;
			}
			d->map_from[d->nmap] = unescape(l, (size_t)(le - l));
			d->map_to[d->nmap] = unescape(r, (size_t)(re - r));
			d->nmap++;
		}
		strv_free(rules, nr);
		if (rc)
			goto fail;
	} else if (!strcmp(type, "pattern_replace")) {
		d->kind = CF_PATTERN_REPLACE;
		const char *pat = get_str(o, "pattern"), *rep = get_str(o, "replacement");
		if (pat == NULL) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "pattern is missing for [%s] char filter of type "
			                  "'pattern_replace'",
			                  name);
			goto fail;
		}
		if ((rc = compile_re(&d->re, &d->has_re, pat, get_str(o, "flags"),
		                     "pattern_replace char filter", err)))
			goto fail;
		d->replacement = cm_strdup(M, rep ? rep : "");
	} else {
		rc = bad(err, "Unknown char_filter type [%s] for [%s]", type, name);
		goto fail;
	}
	*out = d;
	return CM_OK;
fail:
	cf_def_free(d);
	return rc;
}

/* ---- lookups: settings first, then built-in names (made on use) ---- */

static const tok_def *
find_tok(const an_defs *o, const char *name)
{
	for (size_t i = 0; i < o->ntoks; i++)
		if (!strcmp(o->toks[i]->name, name))
			return o->toks[i];
	return NULL;
}

static const filter_def *
find_filter(const an_defs *o, const char *name)
{
	for (size_t i = 0; i < o->nfilters; i++)
		if (!strcmp(o->filters[i]->name, name))
			return o->filters[i];
	return NULL;
}

static const cf_def *
find_cf(const an_defs *o, const char *name)
{
	for (size_t i = 0; i < o->ncfs; i++)
		if (!strcmp(o->cfs[i]->name, name))
			return o->cfs[i];
	return NULL;
}

/* Resolves a component: a name in `a`, a built-in made into `own`, or an
 * inline definition object (into `own`). NULL with err set when unknown. */
static const tok_def *
resolve_tok(st_analysis *a, an_defs *own, const cJSON *ref, cm_error *err)
{
	tok_def *d = NULL;
	if (cJSON_IsObject(ref)) {
		if (parse_tokenizer(a, "_anonymous_tokenizer", ref, &d, err))
			return NULL;
		PUSH(own->toks, own->ntoks, d);
		return d;
	}
	const char *name = ref->valuestring;
	const tok_def *f = a ? find_tok(&a->defs, name) : NULL;
	if (f == NULL)
		f = find_tok(own, name);
	if (f != NULL)
		return f;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", name);
	cm_error tmp = {0};
	cm_err rc = parse_tokenizer(a, name, o, &d, &tmp);
	cJSON_Delete(o);
	if (rc)
		return NULL;
	PUSH(own->toks, own->ntoks, d);
	return d;
}

static const filter_def *
resolve_filter(st_analysis *a, an_defs *own, const cJSON *ref, cm_error *err, bool *bad_params)
{
	filter_def *d = NULL;
	*bad_params = false;
	if (cJSON_IsObject(ref)) {
		*bad_params = true;
		if (parse_filter(a, "_anonymous_tokenfilter", ref, &d, err))
			return NULL;
		PUSH(own->filters, own->nfilters, d);
		return d;
	}
	const char *name = ref->valuestring;
	const filter_def *f = a ? find_filter(&a->defs, name) : NULL;
	if (f == NULL)
		f = find_filter(own, name);
	if (f != NULL)
		return f;
	/* synonym, keyword_marker and friends need parameters: not usable by bare name */
	if (!strcmp(name, "synonym") || !strcmp(name, "synonym_graph") ||
	    !strcmp(name, "keyword_marker"))
		return NULL;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", name);
	cm_error tmp = {0};
	cm_err rc = parse_filter(a, name, o, &d, &tmp);
	cJSON_Delete(o);
	if (rc)
		return NULL;
	PUSH(own->filters, own->nfilters, d);
	return d;
}

static const cf_def *
resolve_cf(st_analysis *a, an_defs *own, const cJSON *ref, cm_error *err, bool *inline_bad)
{
	cf_def *d = NULL;
	*inline_bad = false;
	if (cJSON_IsObject(ref)) {
		*inline_bad = true;
		if (parse_char_filter("_anonymous_charfilter", ref, &d, err))
			return NULL;
		PUSH(own->cfs, own->ncfs, d);
		return d;
	}
	const char *name = ref->valuestring;
	const cf_def *f = a ? find_cf(&a->defs, name) : NULL;
	if (f == NULL)
		f = find_cf(own, name);
	if (f != NULL)
		return f;
	if (strcmp(name, "html_strip") != 0)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", name);
	cm_error tmp = {0};
	cm_err rc = parse_char_filter(name, o, &d, &tmp);
	cJSON_Delete(o);
	if (rc)
		return NULL;
	PUSH(own->cfs, own->ncfs, d);
	return d;
}

/* ---- analyzers ---- */

static void
syn_map_free(syn_map *m)
{
	if (m == NULL)
		return;
	for (size_t i = 0; i < m->nrules; i++) {
		tks_free(&m->rules[i].lhs);
		for (size_t j = 0; j < m->rules[i].nalts; j++)
			tks_free(&m->rules[i].alts[j]);
		cm_free(M, m->rules[i].alts);
	}
	cm_free(M, m->rules);
	cm_free(M, m);
}

void
st_analyzer_free(st_analyzer *an)
{
	if (an == NULL)
		return;
	for (size_t i = 0; i < an->nfilters; i++)
		syn_map_free(an->filters[i].syn);
	cm_free(M, an->filters);
	cm_free(M, an->cf);
	defs_free(&an->own);
	cm_free(M, an->name);
	cm_free(M, an);
}

/* One side of a rule: terms analyzed by the chain before the filter. */
static bool
syn_side(const st_analyzer *an, size_t upto, const char *s, size_t n, tks *out)
{
	char *w = unescape(s, n);
	tks_init(out);
	an_chain_tokens(an, w, strlen(w), upto, out);
	cm_free(M, w);
	return out->n > 0;
}

static syn_rule *
syn_rule_for(syn_map *m, const tks *lhs, bool keep_orig)
{
	for (size_t i = 0; i < m->nrules; i++) {
		syn_rule *r = &m->rules[i];
		if (r->lhs.n != lhs->n || r->keep_orig != keep_orig)
			continue;
		bool same = true;
		for (size_t j = 0; j < lhs->n && same; j++)
			same = r->lhs.v[j].len == lhs->v[j].len &&
			       !memcmp(r->lhs.arena.data + r->lhs.v[j].off,
			               lhs->arena.data + lhs->v[j].off, lhs->v[j].len);
		if (same)
			return r;
	}
	m->rules = cm_realloc(M, m->rules, (m->nrules + 1) * sizeof(syn_rule));
	syn_rule *r = &m->rules[m->nrules++];
	memset(r, 0, sizeof(*r));
	tks_init(&r->lhs);
	for (size_t j = 0; j < lhs->n; j++)
		tks_add(&r->lhs, (const char *)lhs->arena.data + lhs->v[j].off, lhs->v[j].len, 0, 0,
		        1, NULL);
	r->keep_orig = keep_orig;
	return r;
}

static bool
tks_same_terms(const tks *a, const tks *b)
{
	if (a->n != b->n)
		return false;
	for (size_t j = 0; j < a->n; j++)
		if (a->v[j].len != b->v[j].len ||
		    memcmp(a->arena.data + a->v[j].off, b->arena.data + b->v[j].off, a->v[j].len))
			return false;
	return true;
}

/* Adds an alternative unless the rule has it (Lucene's builder dedups). */
static void
syn_add_alt(syn_rule *r, const tks *alt)
{
	for (size_t i = 0; i < r->nalts; i++)
		if (tks_same_terms(&r->alts[i], alt))
			return;
	r->alts = cm_realloc(M, r->alts, (r->nalts + 1) * sizeof(tks));
	tks *a = &r->alts[r->nalts++];
	tks_init(a);
	for (size_t j = 0; j < alt->n; j++)
		tks_add(a, (const char *)alt->arena.data + alt->v[j].off, alt->v[j].len, 0, 0, 1,
		        NULL);
}

/* Splits on unescaped commas. */
static size_t
split_commas(const char *s, size_t n, const char **parts, size_t *lens, size_t cap)
{
	size_t k = 0, start = 0;
	for (size_t i = 0; i <= n && k < cap; i++) {
		if (i < n && s[i] == '\\') {
			i++;
			continue;
		}
		if (i == n || s[i] == ',') {
			size_t a = start, b = i;
			while (a < b && isspace((unsigned char)s[a]))
				a++;
			while (b > a && isspace((unsigned char)s[b - 1]))
				b--;
			if (b > a) {
				parts[k] = s + a;
				lens[k++] = b - a;
			}
			start = i + 1;
		}
	}
	return k;
}

#define MAX_SYN_TERMS 64

static cm_err
build_synonyms(st_analyzer *an, size_t fi, const filter_def *d, cm_error *err)
{
	syn_map *m = cm_calloc(M, 1, sizeof(*m));
	an->filters[fi].syn = m;
	for (size_t r = 0; r < d->nsyn; r++) {
		const char *rule = d->syn_rules[r];
		while (isspace((unsigned char)*rule))
			rule++;
		if (*rule == 0 || *rule == '#')
			continue;
		const char *arrow = strstr(rule, "=>");
		const char *lp[MAX_SYN_TERMS], *rp[MAX_SYN_TERMS];
		size_t ll[MAX_SYN_TERMS], rl[MAX_SYN_TERMS], nl, nr = 0;
		nl = split_commas(rule, arrow ? (size_t)(arrow - rule) : strlen(rule), lp, ll,
		                  MAX_SYN_TERMS);
		if (arrow)
			nr = split_commas(arrow + 2, strlen(arrow + 2), rp, rl, MAX_SYN_TERMS);
		/* Solr: "more than one explicit mapping specified on the same line" */
		if (nl == 0 || (arrow && nr == 0) || (arrow && strstr(arrow + 2, "=>"))) {
			if (d->lenient)
				continue;
			return cm_error_set(
			    err, CM_EINVAL,
			    "failed to build synonyms: Invalid synonym rule at line %zu", r + 1);
		}
		tks L[MAX_SYN_TERMS], R[MAX_SYN_TERMS];
		size_t okl = 0, okr = 0;
		bool failed = false;
		for (size_t i = 0; i < nl; i++) {
			if (syn_side(an, fi, lp[i], ll[i], &L[okl]))
				okl++;
			else {
				tks_free(&L[okl]);
				failed = true;
			}
		}
		for (size_t i = 0; i < nr; i++) {
			if (syn_side(an, fi, rp[i], rl[i], &R[okr]))
				okr++;
			else {
				tks_free(&R[okr]);
				failed = true;
			}
		}
		if (failed && !d->lenient) {
			for (size_t i = 0; i < okl; i++)
				tks_free(&L[i]);
			for (size_t i = 0; i < okr; i++)
				tks_free(&R[i]);
			return cm_error_set(
			    err, CM_EINVAL,
			    "failed to build synonyms: term of rule [%s] was completely "
			    "eliminated by analyzer",
			    d->syn_rules[r]);
		}
		if (arrow) {
			for (size_t i = 0; i < okl && okr > 0; i++) {
				syn_rule *ru = syn_rule_for(m, &L[i], false);
				for (size_t j = 0; j < okr; j++)
					syn_add_alt(ru, &R[j]);
			}
		} else if (d->expand) {
			for (size_t i = 0; i < okl && okl > 1; i++) {
				syn_rule *ru = syn_rule_for(m, &L[i], true);
				for (size_t j = 0; j < okl; j++)
					if (j != i)
						syn_add_alt(ru, &L[j]);
			}
		} else {
			for (size_t i = 0; i < okl && okl > 1; i++)
				syn_add_alt(syn_rule_for(m, &L[i], false), &L[0]);
		}
		for (size_t i = 0; i < okl; i++)
			tks_free(&L[i]);
		for (size_t i = 0; i < okr; i++)
			tks_free(&R[i]);
	}
	return CM_OK;
}

static bool
normalizer_filter_ok(const filter_def *d)
{
	return d->kind == F_LOWERCASE || d->kind == F_UPPERCASE || d->kind == F_ASCIIFOLDING ||
	       d->kind == F_TRIM || d->kind == F_ELISION || d->kind == F_DECIMAL_DIGIT;
}

static const char *
ref_name(const cJSON *ref)
{
	return cJSON_IsString(ref) ? ref->valuestring : "_anonymous_";
}

/* Builds a chain from a tokenizer reference and lists (arrays, or one
 * name) of filters and char filters. `what` names the analyzer in errors. */
static cm_err
chain_build(st_analysis *a, an_defs *own, const char *name, const cJSON *tokenizer,
            const cJSON *filters, const cJSON *char_filters, bool normalizer, bool request,
            st_analyzer **out, cm_error *err)
{
	st_analyzer *an = cm_calloc(M, 1, sizeof(*an));
	an->name = cm_strdup(M, name);
	an->normalizer = normalizer;
	an->builtin_kind = -1;
	cm_err rc = CM_OK;
	const cJSON *it;
	const char *who = normalizer ? "Custom normalizer" : "Custom Analyzer";
	if (normalizer) {
		static const tok_def keyword_tok = {.name = (char *)"keyword", .kind = TK_KEYWORD};
		an->tok = &keyword_tok;
	} else {
		if (tokenizer == NULL ||
		    !(cJSON_IsString(tokenizer) || cJSON_IsObject(tokenizer))) {
			rc = request ? cm_error_set(err, CM_EINVAL,
			                            "failed to find %stokenizer under [%s]",
			                            a ? "" : "global ", ref_name(tokenizer))
			             : cm_error_set(err, CM_EINVAL,
			                            "%s [%s] must be configured with a tokenizer",
			                            who, name);
			goto fail;
		}
		an->tok = resolve_tok(a, own, tokenizer, err);
		if (an->tok == NULL) {
			if (!err || !err->code)
				rc = request
				         ? cm_error_set(err, CM_EINVAL,
				                        "failed to find %stokenizer under [%s]",
				                        a ? "" : "global ", tokenizer->valuestring)
				         : cm_error_set(
				               err, CM_EINVAL,
				               "%s [%s] failed to find tokenizer under name [%s]",
				               who, name, tokenizer->valuestring);
			else
				rc = err->code;
			goto fail;
		}
	}
	if (char_filters != NULL) {
		cJSON *single = NULL;
		if (cJSON_IsString(char_filters) || cJSON_IsObject(char_filters)) {
			single = cJSON_CreateArray();
			cJSON_AddItemReferenceToArray(single, (cJSON *)char_filters);
			char_filters = single;
		}
		if (!cJSON_IsArray(char_filters)) {
			rc = cm_error_set(err, CM_EINVAL, "[char_filter] must be a list of names");
			cJSON_Delete(single);
			goto fail;
		}
		cJSON_ArrayForEach(it, char_filters)
		{
			bool inl;
			if (!cJSON_IsString(it) && !cJSON_IsObject(it)) {
				rc = cm_error_set(err, CM_EINVAL,
				                  "[char_filter] must be a list of names");
				break;
			}
			const cf_def *d = resolve_cf(a, own, it, err, &inl);
			if (d == NULL) {
				rc = inl ? err->code
				     : request
				         ? cm_error_set(err, CM_EINVAL,
				                        "failed to find %schar_filter under [%s]",
				                        a ? "" : "global ", it->valuestring)
				         : cm_error_set(
				               err, CM_EINVAL,
				               "%s [%s] failed to find char_filter under name "
				               "[%s]",
				               who, name, it->valuestring);
				break;
			}
			if (normalizer && d->kind == CF_HTML_STRIP) {
				rc = cm_error_set(err, CM_EINVAL,
				                  "%s [%s] may not use char filter [%s]", who, name,
				                  d->name);
				break;
			}
			an->cf = cm_realloc(M, an->cf, (an->ncf + 1) * sizeof(*an->cf));
			an->cf[an->ncf++] = d;
		}
		cJSON_Delete(single);
		if (rc)
			goto fail;
	}
	if (filters != NULL) {
		cJSON *single = NULL;
		if (cJSON_IsString(filters) || cJSON_IsObject(filters)) {
			single = cJSON_CreateArray();
			cJSON_AddItemReferenceToArray(single, (cJSON *)filters);
			filters = single;
		}
		if (!cJSON_IsArray(filters)) {
			rc = cm_error_set(err, CM_EINVAL, "[filter] must be a list of names");
			cJSON_Delete(single);
			goto fail;
		}
		an->filters =
		    cm_calloc(M, (size_t)cJSON_GetArraySize(filters) + 1, sizeof(filter_inst));
		cJSON_ArrayForEach(it, filters)
		{
			bool inl;
			if (!cJSON_IsString(it) && !cJSON_IsObject(it)) {
				rc = cm_error_set(err, CM_EINVAL,
				                  "[filter] must be a list of names");
				break;
			}
			const filter_def *d = resolve_filter(a, own, it, err, &inl);
			if (d == NULL) {
				rc = inl ? err->code
				     : request
				         ? cm_error_set(err, CM_EINVAL,
				                        "failed to find %sfilter under [%s]",
				                        a ? "" : "global ", it->valuestring)
				         : cm_error_set(
				               err, CM_EINVAL,
				               "%s [%s] failed to find filter under name [%s]", who,
				               name, it->valuestring);
				break;
			}
			if (normalizer && !normalizer_filter_ok(d)) {
				rc = cm_error_set(err, CM_EINVAL, "%s [%s] may not use filter [%s]",
				                  who, name, d->name);
				break;
			}
			size_t fi = an->nfilters++;
			an->filters[fi].def = d;
			if (d->kind == F_SYNONYM && (rc = build_synonyms(an, fi, d, err)))
				break;
		}
		cJSON_Delete(single);
		if (rc)
			goto fail;
	}
	*out = an;
	return CM_OK;
fail:
	st_analyzer_free(an);
	return rc;
}

/* An analyzer of a built-in type configured in settings ("type":
 * "standard" with stopwords, ...) becomes the equivalent chain. */
static cm_err
parse_analyzer(st_analysis *a, const char *name, const cJSON *o, st_analyzer **out, cm_error *err)
{
	const char *type = get_str(o, "type");
	const cJSON *tok = cJSON_GetObjectItemCaseSensitive(o, "tokenizer");
	if (type == NULL && tok == NULL)
		return bad(err,
		           "analyzer [%s] must specify either an analyzer type, or a tokenizer%s",
		           name, "");
	if (type == NULL || !strcmp(type, "custom"))
		return chain_build(
		    a, &a->defs, name, tok, cJSON_GetObjectItemCaseSensitive(o, "filter"),
		    cJSON_GetObjectItemCaseSensitive(o, "char_filter"), false, false, out, err);
	st_analyzer_kind k;
	bool plain = cJSON_GetArraySize(o) == 1; /* only "type" */
	cJSON *tj = NULL, *fj = cJSON_CreateArray();
	cm_err rc;
	char fname[300];
	if (plain && st_analyzer_from_name(type, &k)) {
		st_analyzer *an = cm_calloc(M, 1, sizeof(*an));
		an->name = cm_strdup(M, name);
		an->builtin_kind = (int)k;
		cJSON_Delete(fj);
		*out = an;
		return CM_OK;
	}
	if (!strcmp(type, "standard") || !strcmp(type, "stop") || !strcmp(type, "english") ||
	    !strcmp(type, "snowball") || !strcmp(type, "simple") || !strcmp(type, "whitespace") ||
	    !strcmp(type, "keyword") || !strcmp(type, "pattern")) {
		tj = cJSON_CreateObject();
		const char *tt = !strcmp(type, "stop") || !strcmp(type, "simple") ? "lowercase"
		                 : !strcmp(type, "whitespace")                    ? "whitespace"
		                 : !strcmp(type, "keyword")                       ? "keyword"
		                 : !strcmp(type, "pattern")                       ? "pattern"
		                                                                  : "standard";
		cJSON_AddStringToObject(tj, "type", tt);
		const cJSON *mtl = cJSON_GetObjectItemCaseSensitive(o, "max_token_length");
		if (mtl && !strcmp(tt, "standard"))
			cJSON_AddItemToObject(tj, "max_token_length", cJSON_Duplicate(mtl, true));
		if (!strcmp(tt, "pattern")) {
			const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
			const cJSON *fl = cJSON_GetObjectItemCaseSensitive(o, "flags");
			if (p)
				cJSON_AddItemToObject(tj, "pattern", cJSON_Duplicate(p, true));
			if (fl)
				cJSON_AddItemToObject(tj, "flags", cJSON_Duplicate(fl, true));
		}
		bool lower = true;
		if (!strcmp(type, "pattern") && !get_bool(o, "lowercase", true, &lower)) {
			rc = bad(err, "Failed to parse [lowercase] of analyzer [%s]%s", name, "");
			goto out;
		}
		if (lower && strcmp(tt, "lowercase") && strcmp(tt, "whitespace") &&
		    strcmp(tt, "keyword"))
			cJSON_AddItemToArray(fj, cJSON_CreateString("lowercase"));
		/* ES's snowball analyzer stops English words when its language is English */
		const char *sl = get_str(o, "language");
		bool stops = !strcmp(type, "stop") || !strcmp(type, "english") ||
		             (!strcmp(type, "snowball") && (!sl || !strcasecmp(sl, "english"))) ||
		             cJSON_GetObjectItemCaseSensitive(o, "stopwords") != NULL;
		if (stops) {
			filter_def *sd = NULL;
			cJSON *so = cJSON_CreateObject();
			cJSON_AddStringToObject(so, "type", "stop");
			const cJSON *sw = cJSON_GetObjectItemCaseSensitive(o, "stopwords");
			cJSON_AddItemToObject(so, "stopwords",
			                      sw ? cJSON_Duplicate(sw, true)
			                         : cJSON_CreateString("_english_"));
			snprintf(fname, sizeof(fname), "_%s_stop", name);
			rc = parse_filter(a, fname, so, &sd, err);
			cJSON_Delete(so);
			if (rc)
				goto out;
			PUSH(a->defs.filters, a->defs.nfilters, sd);
			cJSON_AddItemToArray(fj, cJSON_CreateString(fname));
		}
		if (!strcmp(type, "english") || !strcmp(type, "snowball")) {
			filter_def *sd = NULL;
			cJSON *so = cJSON_CreateObject();
			const char *lang = get_str(o, "language");
			cJSON_AddStringToObject(so, "type", "snowball");
			cJSON_AddStringToObject(so, "language", lang ? lang : "English");
			snprintf(fname, sizeof(fname), "_%s_stem", name);
			rc = parse_filter(a, fname, so, &sd, err);
			cJSON_Delete(so);
			if (rc)
				goto out;
			PUSH(a->defs.filters, a->defs.nfilters, sd);
			if (!strcmp(type, "english"))
				cJSON_AddItemToArray(fj, cJSON_CreateString("possessive_english_"));
			cJSON_AddItemToArray(fj, cJSON_CreateString(fname));
		}
		if (!strcmp(type, "english") && !find_filter(&a->defs, "possessive_english_")) {
			filter_def *pd = cm_calloc(M, 1, sizeof(*pd));
			pd->name = cm_strdup(M, "possessive_english_");
			pd->kind = F_STEMMER;
			pd->possessive = true;
			pd->stem_alg = "possessive";
			PUSH(a->defs.filters, a->defs.nfilters, pd);
		}
		rc = chain_build(a, &a->defs, name, tj, fj, NULL, false, false, out, err);
		goto out;
	}
	rc = bad(err, "Unknown analyzer type [%s] for [%s]", type, name);
out:
	cJSON_Delete(tj);
	cJSON_Delete(fj);
	return rc;
}

/* ---- the registry ---- */

st_analysis *
st_analysis_ref(st_analysis *a)
{
	if (a != NULL)
		__atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED);
	return a;
}

void
st_analysis_unref(st_analysis *a)
{
	if (a == NULL || __atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	for (size_t i = 0; i < a->nanalyzers; i++)
		st_analyzer_free(a->analyzers[i]);
	for (size_t i = 0; i < a->nnormalizers; i++)
		st_analyzer_free(a->normalizers[i]);
	cm_free(M, a->analyzers);
	cm_free(M, a->normalizers);
	defs_free(&a->defs);
	cJSON_Delete(a->json);
	cm_free(M, a);
}

const cJSON *
st_analysis_json(const st_analysis *a)
{
	return a ? a->json : NULL;
}

static cm_err
section(const cJSON *json, const char *key, const cJSON **out, cm_error *err)
{
	*out = cJSON_GetObjectItemCaseSensitive(json, key);
	if (*out != NULL && !cJSON_IsObject(*out))
		return cm_error_set(err, CM_EINVAL, "[index.analysis.%s] must be an object", key);
	if (*out != NULL && cJSON_GetArraySize(*out) > MAX_COMPONENTS)
		return cm_error_set(err, CM_EINVAL, "too many entries in [index.analysis.%s]", key);
	return CM_OK;
}

cm_err
st_analysis_parse(const cJSON *json, int max_ngram_diff, int max_shingle_diff, st_analysis **out,
                  cm_error *err)
{
	st_analysis *a = cm_calloc(M, 1, sizeof(*a));
	a->refs = 1;
	a->max_ngram_diff = max_ngram_diff;
	a->max_shingle_diff = max_shingle_diff;
	const cJSON *sec, *it;
	cm_err rc = CM_OK;
	*out = NULL;
	if (json != NULL && !cJSON_IsObject(json)) {
		rc = cm_error_set(err, CM_EINVAL, "[index.analysis] must be an object");
		goto fail;
	}
	if (json == NULL) {
		*out = a;
		return CM_OK;
	}
	cJSON_ArrayForEach(it, json)
	{
		if (strcmp(it->string, "analyzer") && strcmp(it->string, "tokenizer") &&
		    strcmp(it->string, "filter") && strcmp(it->string, "char_filter") &&
		    strcmp(it->string, "normalizer")) {
			rc = cm_error_set(
			    err, CM_EINVAL,
			    "unknown setting [index.analysis.%s] please check that any "
			    "required plugins are installed, or check the breaking changes "
			    "documentation for removed settings",
			    it->string);
			goto fail;
		}
	}
	a->json = cJSON_Duplicate(json, true);
	if ((rc = section(json, "tokenizer", &sec, err)))
		goto fail;
	cJSON_ArrayForEach(it, sec)
	{
		tok_def *d;
		if (!cJSON_IsObject(it)) {
			rc = bad(err, "tokenizer [%s] must specify type%s", it->string, "");
			goto fail;
		}
		if ((rc = parse_tokenizer(a, it->string, it, &d, err)))
			goto fail;
		PUSH(a->defs.toks, a->defs.ntoks, d);
	}
	if ((rc = section(json, "filter", &sec, err)))
		goto fail;
	cJSON_ArrayForEach(it, sec)
	{
		filter_def *d;
		if (!cJSON_IsObject(it)) {
			rc = bad(err, "filter [%s] must specify type%s", it->string, "");
			goto fail;
		}
		if ((rc = parse_filter(a, it->string, it, &d, err)))
			goto fail;
		PUSH(a->defs.filters, a->defs.nfilters, d);
	}
	if ((rc = section(json, "char_filter", &sec, err)))
		goto fail;
	cJSON_ArrayForEach(it, sec)
	{
		cf_def *d;
		if (!cJSON_IsObject(it)) {
			rc = bad(err, "char_filter [%s] must specify type%s", it->string, "");
			goto fail;
		}
		if ((rc = parse_char_filter(it->string, it, &d, err)))
			goto fail;
		PUSH(a->defs.cfs, a->defs.ncfs, d);
	}
	if ((rc = section(json, "analyzer", &sec, err)))
		goto fail;
	cJSON_ArrayForEach(it, sec)
	{
		st_analyzer *an;
		if (!cJSON_IsObject(it)) {
			rc = bad(err,
			         "analyzer [%s] must specify either an analyzer type, or a "
			         "tokenizer%s",
			         it->string, "");
			goto fail;
		}
		if ((rc = parse_analyzer(a, it->string, it, &an, err)))
			goto fail;
		PUSH(a->analyzers, a->nanalyzers, an);
	}
	if ((rc = section(json, "normalizer", &sec, err)))
		goto fail;
	cJSON_ArrayForEach(it, sec)
	{
		st_analyzer *an;
		const char *type = cJSON_IsObject(it) ? get_str(it, "type") : NULL;
		if (!cJSON_IsObject(it) || (type != NULL && strcmp(type, "custom") != 0)) {
			rc = bad(err, "Unknown normalizer type [%s] for [%s]", type ? type : "null",
			         it->string);
			goto fail;
		}
		if (cJSON_GetObjectItemCaseSensitive(it, "tokenizer") != NULL) {
			rc = bad(err, "Custom normalizer [%s] cannot configure a tokenizer%s",
			         it->string, "");
			goto fail;
		}
		if ((rc = chain_build(a, &a->defs, it->string, NULL,
		                      cJSON_GetObjectItemCaseSensitive(it, "filter"),
		                      cJSON_GetObjectItemCaseSensitive(it, "char_filter"), true,
		                      false, &an, err)))
			goto fail;
		PUSH(a->normalizers, a->nnormalizers, an);
	}
	*out = a;
	return CM_OK;
fail:
	st_analysis_unref(a);
	return rc;
}

const st_analyzer *
st_analysis_analyzer(const st_analysis *a, const char *name)
{
	for (size_t i = 0; a != NULL && i < a->nanalyzers; i++)
		if (!strcmp(a->analyzers[i]->name, name))
			return a->analyzers[i];
	return NULL;
}

const st_analyzer *
st_analysis_normalizer(const st_analysis *a, const char *name)
{
	/* ES's one built-in normalizer */
	static const tok_def kw = {.name = (char *)"keyword", .kind = TK_KEYWORD};
	static const filter_def lower = {.name = (char *)"lowercase", .kind = F_LOWERCASE};
	static filter_inst lower_inst = {.def = &lower};
	static const st_analyzer lowercase = {.name = (char *)"lowercase",
	                                      .normalizer = true,
	                                      .builtin_kind = -1,
	                                      .tok = &kw,
	                                      .filters = &lower_inst,
	                                      .nfilters = 1};
	for (size_t i = 0; a != NULL && i < a->nnormalizers; i++)
		if (!strcmp(a->normalizers[i]->name, name))
			return a->normalizers[i];
	if (!strcmp(name, "lowercase"))
		return &lowercase;
	return NULL;
}

/* ES's built-in analyzers that Shoal's fast path lacks, as chains made
 * once per process (never freed: fields point at them for good). */
static st_analysis *builtins;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

static void
builtins_init(void)
{
	cJSON *j = cJSON_Parse("{\"analyzer\":{\"stop\":{\"type\":\"stop\"},"
	                       "\"pattern\":{\"type\":\"pattern\"},"
	                       "\"snowball\":{\"type\":\"snowball\"}}}");
	cm_error err = {0};
	if (st_analysis_parse(j, 1, 3, &builtins, &err) != CM_OK)
		builtins = NULL;
	cJSON_Delete(j);
}

bool
st_analysis_resolve(const st_analysis *a, const char *name, st_analyzer_kind *kind,
                    const st_analyzer **custom)
{
	const st_analyzer *an = st_analysis_analyzer(a, name);
	if (an == NULL &&
	    (!strcmp(name, "stop") || !strcmp(name, "pattern") || !strcmp(name, "snowball"))) {
		pthread_once(&builtins_once, builtins_init);
		an = st_analysis_analyzer(builtins, name);
	}
	if (an != NULL) {
		if (an->builtin_kind >= 0) {
			*kind = (st_analyzer_kind)an->builtin_kind;
			*custom = NULL;
		} else {
			*kind = (st_analyzer_kind)ST_AN_CUSTOM;
			*custom = an;
		}
		return true;
	}
	if (!st_analyzer_from_name(name, kind))
		return false;
	*custom = NULL;
	return true;
}

cm_err
st_analyzer_build(const st_analysis *a, const cJSON *tokenizer, const cJSON *filters,
                  const cJSON *char_filters, bool normalizer, st_analyzer **out, cm_error *err)
{
	/* built-ins made on use go into the chain's own list, not into a */
	st_analyzer *an = NULL;
	an_defs own = {0};
	cm_err rc = chain_build((st_analysis *)a, &own, "_anonymous_", tokenizer, filters,
	                        char_filters, normalizer, true, &an, err);
	if (rc) {
		defs_free(&own);
		return rc;
	}
	an->own = own;
	*out = an;
	return CM_OK;
}

const char *
st_analyzer_get_name(const st_analyzer *an)
{
	return an->name;
}

bool
st_analyzer_is_normalizer(const st_analyzer *an)
{
	return an->normalizer;
}
