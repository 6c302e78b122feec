/* Index settings "analysis": the registry of an index's components and
 * analyzers, chains built from names or inline definitions (built-in
 * component names resolve to definitions made on use), synonym rules
 * analyzed by the chain before their filter. */
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

struct st_analysis {
	int refs;
	cJSON *json;
	an_limits limits;
	an_defs defs; /* named in settings (and built-ins made on use) */
	st_analyzer **analyzers;
	size_t nanalyzers;
	st_analyzer **normalizers;
	size_t nnormalizers;
};

#define PUSH(arr, n, v)                                                                            \
	do {                                                                                       \
		(arr) = cm_realloc(M, (arr), ((n) + 1) * sizeof(*(arr)));                          \
		(arr)[(n)++] = (v);                                                                \
	} while (0)

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
		if (an_parse_tokenizer(a ? &a->limits : NULL, "_anonymous_tokenizer", ref, &d, err))
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
	cm_err rc = an_parse_tokenizer(a ? &a->limits : NULL, name, o, &d, &tmp);
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
		if (an_parse_filter(a ? &a->limits : NULL, "_anonymous_tokenfilter", ref, &d, err))
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
	cm_err rc = an_parse_filter(a ? &a->limits : NULL, name, o, &d, &tmp);
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
		if (an_parse_char_filter("_anonymous_charfilter", ref, &d, err))
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
	cm_err rc = an_parse_char_filter(name, o, &d, &tmp);
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
	an_defs_free(&an->own);
	cm_free(M, an->name);
	cm_free(M, an);
}

/* One side of a rule: terms analyzed by the chain before the filter. */
static bool
syn_side(const st_analyzer *an, size_t upto, const char *s, size_t n, tks *out)
{
	char *w = an_unescape(s, n);
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
		nl = an_split_commas(rule, arrow ? (size_t)(arrow - rule) : strlen(rule), lp, ll,
		                     MAX_SYN_TERMS);
		if (arrow)
			nr = an_split_commas(arrow + 2, strlen(arrow + 2), rp, rl, MAX_SYN_TERMS);
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
	const char *type = an_get_str(o, "type");
	const cJSON *tok = cJSON_GetObjectItemCaseSensitive(o, "tokenizer");
	if (type == NULL && tok == NULL)
		return an_bad(
		    err, "analyzer [%s] must specify either an analyzer type, or a tokenizer%s",
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
		if (!strcmp(type, "pattern") && !an_get_bool(o, "lowercase", true, &lower)) {
			rc =
			    an_bad(err, "Failed to parse [lowercase] of analyzer [%s]%s", name, "");
			goto out;
		}
		if (lower && strcmp(tt, "lowercase") && strcmp(tt, "whitespace") &&
		    strcmp(tt, "keyword"))
			cJSON_AddItemToArray(fj, cJSON_CreateString("lowercase"));
		/* ES's snowball analyzer stops English words when its language is English */
		const char *sl = an_get_str(o, "language");
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
			rc = an_parse_filter(a ? &a->limits : NULL, fname, so, &sd, err);
			cJSON_Delete(so);
			if (rc)
				goto out;
			PUSH(a->defs.filters, a->defs.nfilters, sd);
			cJSON_AddItemToArray(fj, cJSON_CreateString(fname));
		}
		if (!strcmp(type, "english") || !strcmp(type, "snowball")) {
			filter_def *sd = NULL;
			cJSON *so = cJSON_CreateObject();
			const char *lang = an_get_str(o, "language");
			cJSON_AddStringToObject(so, "type", "snowball");
			cJSON_AddStringToObject(so, "language", lang ? lang : "English");
			snprintf(fname, sizeof(fname), "_%s_stem", name);
			rc = an_parse_filter(a ? &a->limits : NULL, fname, so, &sd, err);
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
	rc = an_bad(err, "Unknown analyzer type [%s] for [%s]", type, name);
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
	an_defs_free(&a->defs);
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
	a->limits.max_ngram_diff = max_ngram_diff;
	a->limits.max_shingle_diff = max_shingle_diff;
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
			rc = an_bad(err, "tokenizer [%s] must specify type%s", it->string, "");
			goto fail;
		}
		if ((rc = an_parse_tokenizer(a ? &a->limits : NULL, it->string, it, &d, err)))
			goto fail;
		PUSH(a->defs.toks, a->defs.ntoks, d);
	}
	if ((rc = section(json, "filter", &sec, err)))
		goto fail;
	cJSON_ArrayForEach(it, sec)
	{
		filter_def *d;
		if (!cJSON_IsObject(it)) {
			rc = an_bad(err, "filter [%s] must specify type%s", it->string, "");
			goto fail;
		}
		if ((rc = an_parse_filter(a ? &a->limits : NULL, it->string, it, &d, err)))
			goto fail;
		PUSH(a->defs.filters, a->defs.nfilters, d);
	}
	if ((rc = section(json, "char_filter", &sec, err)))
		goto fail;
	cJSON_ArrayForEach(it, sec)
	{
		cf_def *d;
		if (!cJSON_IsObject(it)) {
			rc = an_bad(err, "char_filter [%s] must specify type%s", it->string, "");
			goto fail;
		}
		if ((rc = an_parse_char_filter(it->string, it, &d, err)))
			goto fail;
		PUSH(a->defs.cfs, a->defs.ncfs, d);
	}
	if ((rc = section(json, "analyzer", &sec, err)))
		goto fail;
	cJSON_ArrayForEach(it, sec)
	{
		st_analyzer *an;
		if (!cJSON_IsObject(it)) {
			rc = an_bad(err,
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
		const char *type = cJSON_IsObject(it) ? an_get_str(it, "type") : NULL;
		if (!cJSON_IsObject(it) || (type != NULL && strcmp(type, "custom") != 0)) {
			rc = an_bad(err, "Unknown normalizer type [%s] for [%s]",
			            type ? type : "null", it->string);
			goto fail;
		}
		if (cJSON_GetObjectItemCaseSensitive(it, "tokenizer") != NULL) {
			rc = an_bad(err, "Custom normalizer [%s] cannot configure a tokenizer%s",
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
		an_defs_free(&own);
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
