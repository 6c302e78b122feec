/* Analysis components from their JSON definitions (tokenizers, token
 * filters, char filters) with ES's validation and messages, and the
 * small JSON readers the settings share. */
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
#define MAX_SYN_RULES 100000

/* Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (ES's _english_). */
static const char *const english_stop[] = {
    "a",   "an",    "and",  "are",   "as",    "at",   "be",   "but", "by",  "for",  "if",
    "in",  "into",  "is",   "it",    "no",    "not",  "of",   "on",  "or",  "such", "that",
    "the", "their", "then", "there", "these", "they", "this", "to",  "was", "will", "with",
};

/* ---- small JSON readers ---- */

cm_err
an_bad(cm_error *err, const char *fmt, const char *a, const char *b)
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

bool
an_get_bool(const cJSON *o, const char *k, bool dflt, bool *out)
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

const char *
an_get_str(const cJSON *o, const char *k)
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
	const char *t = an_get_str(def, "type");
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

void
an_defs_free(an_defs *o)
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

cm_err
an_parse_tokenizer(const an_limits *a, const char *name, const cJSON *o, tok_def **out,
                   cm_error *err)
{
	const char *type = json_type_or(o, NULL);
	if (type == NULL)
		return an_bad(err, "tokenizer [%s] must specify type%s", name, "");
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
		rc = an_bad(err, "Unknown tokenizer type [%s] for [%s]", type, name);
		goto fail;
	}
	if (!ok || d->max_token_length < 1 || d->max_token_length > 1024 * 1024) {
		rc = an_bad(
		    err, "Failed to parse value for setting [max_token_length] of tokenizer [%s]%s",
		    name, "");
		goto fail;
	}
	if (d->kind == TK_CHAR_GROUP) {
		char **chars;
		size_t nc;
		if (!get_list(o, "tokenize_on_chars", &chars, &nc)) {
			strv_free(chars, nc);
			rc = an_bad(err, "[tokenize_on_chars] of tokenizer [%s] must be a list%s",
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
				char *u = an_unescape(c, strlen(c));
				size_t l = strlen(u), k = 1;
				while (k < l && ((uint8_t)u[k] & 0xC0) == 0x80)
					k++;
				if (l == 0 || k != l) {
					cm_free(M, u);
					rc = an_bad(err, "Invalid escaped char in [%s]%s", c, "");
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
		const char *del = an_get_str(o, "delimiter"), *rep = an_get_str(o, "replacement");
		bool reverse;
		if (!an_get_bool(o, "reverse", false, &reverse) || reverse) {
			rc = an_bad(
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
			rc = an_bad(err, "Failed to parse [skip] of tokenizer [%s]%s", name, "");
			goto fail;
		}
	}
	if (d->kind == TK_PATTERN) {
		const char *pat = an_get_str(o, "pattern");
		int dflt_group = d->group;
		if (!get_int(o, "group", dflt_group, &d->group) || d->group < -1 || d->group > 9) {
			rc = an_bad(err,
			            "Failed to parse value for setting [group] of tokenizer [%s]%s",
			            name, "");
			goto fail;
		}
		if ((rc = compile_re(&d->re, &d->has_re, pat ? pat : "\\W+", an_get_str(o, "flags"),
		                     "pattern tokenizer", err)))
			goto fail;
		if (d->group > (int)d->re.re_nsub) {
			rc = an_bad(
			    err,
			    "pattern tokenizer [%s]: group [%s] is beyond the pattern's groups",
			    name, "");
			goto fail;
		}
	}
	if (d->kind == TK_NGRAM || d->kind == TK_EDGE_NGRAM) {
		if (!get_int(o, "min_gram", 1, &d->min_gram) ||
		    !get_int(o, "max_gram", 2, &d->max_gram) || d->min_gram < 1) {
			rc = an_bad(err, "Failed to parse ngram settings of tokenizer [%s]%s", name,
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
			rc = an_bad(err, "[token_chars] of tokenizer [%s] must be a list%s", name,
			            "");
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
				rc = an_bad(
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
		const char *cc = an_get_str(o, "custom_token_chars");
		if ((d->token_chars & TC_CUSTOM) && cc == NULL) {
			rc = an_bad(
			    err, "Token type: 'custom' requires setting `custom_token_chars`%s%s",
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
	if (an_get_str(o, pk) != NULL)
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

cm_err
an_parse_filter(const an_limits *a, const char *name, const cJSON *o, filter_def **out,
                cm_error *err)
{
	const char *type = json_type_or(o, NULL);
	if (type == NULL)
		return an_bad(err, "filter [%s] must specify type%s", name, "");
	filter_def *d = cm_calloc(M, 1, sizeof(*d));
	d->name = cm_strdup(M, name);
	cm_err rc = CM_OK;
	bool ok = true;
	if (!strcmp(type, "lowercase")) {
		d->kind = F_LOWERCASE;
		const char *lang = an_get_str(o, "language");
		if (lang != NULL) {
			rc = an_bad(
			    err, "lowercase filter [%s]: language [%s] is not supported by Shoal",
			    name, lang);
			goto fail;
		}
	} else if (!strcmp(type, "uppercase")) {
		d->kind = F_UPPERCASE;
	} else if (!strcmp(type, "asciifolding")) {
		d->kind = F_ASCIIFOLDING;
		ok = an_get_bool(o, "preserve_original", false, &d->preserve_original);
	} else if (!strcmp(type, "stop")) {
		d->kind = F_STOP;
		ok = an_get_bool(o, "ignore_case", false, &d->ignore_case) &&
		     an_get_bool(o, "remove_trailing", true, &d->remove_trailing);
		if ((rc = parse_stopwords(o, "stopwords", "_english_", d, err)))
			goto fail;
	} else if (!strcmp(type, "stemmer") || !strcmp(type, "snowball") ||
	           !strcmp(type, "porter_stem")) {
		d->kind = F_STEMMER;
		bool snow = !strcmp(type, "snowball");
		const char *lang = an_get_str(o, "language");
		if (lang == NULL)
			lang = an_get_str(o, "name");
		if (lang == NULL)
			lang = snow ? "English" : "english";
		if (!strcmp(type, "porter_stem"))
			lang = "porter";
		d->stem_alg = stem_alg_for(lang, &d->possessive, snow);
		if (d->stem_alg == NULL) {
			rc = an_bad(err,
			            "%s language [%s] is not available in Shoal (libstemmer's "
			            "Snowball languages, porter, porter2, possessive_english)",
			            snow ? "snowball" : "stemmer", lang);
			goto fail;
		}
	} else if (!strcmp(type, "synonym") || !strcmp(type, "synonym_graph")) {
		d->kind = F_SYNONYM;
		ok = an_get_bool(o, "expand", true, &d->expand) &&
		     an_get_bool(o, "lenient", false, &d->lenient);
		if (an_get_str(o, "synonyms_path") != NULL) {
			rc = an_bad(
			    err,
			    "synonym filter [%s]: [synonyms_path] is not supported by Shoal, "
			    "give [synonyms] inline%s",
			    name, "");
			goto fail;
		}
		const char *fmt = an_get_str(o, "format");
		if (fmt != NULL && strcmp(fmt, "solr") != 0) {
			rc = an_bad(
			    err,
			    "synonym filter [%s]: format [%s] is not supported by Shoal (solr "
			    "only)",
			    name, fmt);
			goto fail;
		}
		if (!get_list(o, "synonyms", &d->syn_rules, &d->nsyn) ||
		    !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "synonyms"))) {
			rc = an_bad(err,
			            "synonym requires either `synonyms` or `synonyms_path` to be "
			            "configured%s%s",
			            "", "");
			goto fail;
		}
		if (d->nsyn > MAX_SYN_RULES) {
			rc = an_bad(err, "synonym filter [%s]: too many rules%s", name, "");
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
		ok = an_get_bool(o, "only_on_same_position", false, &d->only_on_same_position);
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
		ok = an_get_bool(o, "generate_word_parts", true, &d->generate_word_parts) &&
		     an_get_bool(o, "generate_number_parts", true, &d->generate_number_parts) &&
		     an_get_bool(o, "catenate_words", false, &d->catenate_words) &&
		     an_get_bool(o, "catenate_numbers", false, &d->catenate_numbers) &&
		     an_get_bool(o, "catenate_all", false, &d->catenate_all) &&
		     an_get_bool(o, "split_on_case_change", true, &d->split_on_case_change) &&
		     an_get_bool(o, "split_on_numerics", true, &d->split_on_numerics) &&
		     an_get_bool(o, "stem_english_possessive", true, &d->stem_english_possessive) &&
		     an_get_bool(o, "preserve_original", false, &d->preserve_original);
		if (cJSON_GetObjectItemCaseSensitive(o, "protected_words") ||
		    cJSON_GetObjectItemCaseSensitive(o, "type_table")) {
			rc =
			    an_bad(err,
			           "word_delimiter filter [%s]: protected_words and type_table are "
			           "not supported by Shoal%s",
			           name, "");
			goto fail;
		}
	} else if (!strcmp(type, "shingle")) {
		d->kind = F_SHINGLE;
		ok = get_int(o, "min_shingle_size", 2, &d->min_shingle) &&
		     get_int(o, "max_shingle_size", 2, &d->max_shingle) &&
		     an_get_bool(o, "output_unigrams", true, &d->output_unigrams);
		const char *sep = an_get_str(o, "token_separator"),
		           *fill = an_get_str(o, "filler_token");
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
		     an_get_bool(o, "preserve_original", false, &d->preserve_original) &&
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
		ok = an_get_bool(o, "keep_words_case", false, &lower);
		if (an_get_str(o, "keep_words_path") != NULL) {
			rc = an_bad(
			    err, "keep filter [%s]: [keep_words_path] is not supported by Shoal%s",
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
		const char *mode = an_get_str(o, "mode");
		if (mode && strcmp(mode, "include") && strcmp(mode, "exclude")) {
			rc = an_bad(err,
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
			     an_get_bool(o, "articles_case", false, &d->ignore_case);
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
		const char *pat = an_get_str(o, "pattern"), *rep = an_get_str(o, "replacement");
		if (pat == NULL) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "pattern is missing for [%s] token filter of type "
			                  "'pattern_replace'",
			                  name);
			goto fail;
		}
		ok = an_get_bool(o, "all", true, &d->replace_all);
		if ((rc = compile_re(&d->re, &d->has_re, pat, an_get_str(o, "flags"),
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
		if (an_get_str(o, "rules_path") != NULL) {
			rc =
			    an_bad(err,
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
				rc =
				    an_bad(err, "Invalid Keyword override Rule:%s%s", rules[i], "");
				break;
			}
			const char *to = arrow + 2;
			while (isspace((unsigned char)*to))
				to++;
			size_t tl = strlen(to);
			while (tl > 0 && isspace((unsigned char)to[tl - 1]))
				tl--;
			nl = an_split_commas(rules[i], (size_t)(arrow - rules[i]), lp, ll, 64);
			if (nl == 0 || tl == 0) {
				rc =
				    an_bad(err, "Invalid Keyword override Rule:%s%s", rules[i], "");
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
		const char *sep = an_get_str(o, "separator");
		d->separator = cm_strdup(M, sep ? sep : " ");
		ok = get_int(o, "max_output_size", 255, &d->max_count) && d->max_count >= 0;
	} else if (!strcmp(type, "keyword_marker")) {
		d->kind = F_KEYWORD_MARKER;
		ok = an_get_bool(o, "ignore_case", false, &d->ignore_case) &&
		     get_list(o, "keywords", &d->words, &d->nwords);
	} else {
		rc = an_bad(err, "Unknown filter type [%s] for [%s]", type, name);
		goto fail;
	}
	if (!ok) {
		rc = an_bad(err, "Failed to parse the settings of filter [%s] of type [%s]", name,
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
char *
an_unescape(const char *s, size_t n)
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

cm_err
an_parse_char_filter(const char *name, const cJSON *o, cf_def **out, cm_error *err)
{
	const char *type = json_type_or(o, NULL);
	if (type == NULL)
		return an_bad(err, "char_filter [%s] must specify type%s", name, "");
	cf_def *d = cm_calloc(M, 1, sizeof(*d));
	d->name = cm_strdup(M, name);
	cm_err rc = CM_OK;
	if (!strcmp(type, "html_strip")) {
		d->kind = CF_HTML_STRIP;
		if (!get_list(o, "escaped_tags", &d->escaped_tags, &d->nescaped_tags)) {
			rc = an_bad(err, "[escaped_tags] of char_filter [%s] must be a list%s",
			            name, "");
			goto fail;
		}
	} else if (!strcmp(type, "mapping")) {
		d->kind = CF_MAPPING;
		char **rules;
		size_t nr;
		if (an_get_str(o, "mappings_path") != NULL) {
			rc = an_bad(err,
			            "char_filter [%s]: [mappings_path] is not supported by Shoal%s",
			            name, "");
			goto fail;
		}
		if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "mappings")) ||
		    !get_list(o, "mappings", &rules, &nr)) {
			rc = an_bad(err,
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
				rc = an_bad(err, "Invalid Mapping Rule : [%s]%s", rules[i], "");
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
				rc = an_bad(err, "Invalid Mapping Rule : [%s]%s", rules[i], "");
				break;
			}
			d->map_from[d->nmap] = an_unescape(l, (size_t)(le - l));
			d->map_to[d->nmap] = an_unescape(r, (size_t)(re - r));
			d->nmap++;
		}
		strv_free(rules, nr);
		if (rc)
			goto fail;
	} else if (!strcmp(type, "pattern_replace")) {
		d->kind = CF_PATTERN_REPLACE;
		const char *pat = an_get_str(o, "pattern"), *rep = an_get_str(o, "replacement");
		if (pat == NULL) {
			rc = cm_error_set(err, CM_EINVAL,
			                  "pattern is missing for [%s] char filter of type "
			                  "'pattern_replace'",
			                  name);
			goto fail;
		}
		if ((rc = compile_re(&d->re, &d->has_re, pat, an_get_str(o, "flags"),
		                     "pattern_replace char filter", err)))
			goto fail;
		d->replacement = cm_strdup(M, rep ? rep : "");
	} else {
		rc = an_bad(err, "Unknown char_filter type [%s] for [%s]", type, name);
		goto fail;
	}
	*out = d;
	return CM_OK;
fail:
	cf_def_free(d);
	return rc;
}

/* Splits on unescaped commas. */
size_t
an_split_commas(const char *s, size_t n, const char **parts, size_t *lens, size_t cap)
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
