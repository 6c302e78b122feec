/* Highlighting as Elasticsearch's unified highlighter does it, on the
 * hit's _source: the query is reduced to per-field matchers (terms,
 * phrases, automata, fuzzy terms, term ranges), each highlighted field's
 * values are analyzed again, matching tokens become spans, and spans are
 * cut into passages on sentence boundaries bounded by fragment_size,
 * scored like Lucene's PassageScorer and returned in text order. */
#include "highlight.h"

#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"
#include "jsonw.h"

#define T CM_MEM_SEARCH
#define MAX_TAGS 16
#define MAX_ANALYZED (1u << 20) /* re-analysed text kept, whatever the index allows */
enum { HL_UNIFIED, HL_PLAIN, HL_FVH };
#define MAX_MATCHERS 1024

/* ---- options ---- */

typedef struct hl_opts {
	char **pre, **post; /* NULL = inherited */
	size_t npre, npost;
	int fragment_size, nfrags, no_match_size; /* -1 = inherited */
	int rfm, order_score, html;               /* -1 = inherited, else 0/1 */
	int type;                                 /* -1 = inherited, else HL_UNIFIED.. */
	sr_query *hq;                             /* highlight_query, NULL = inherited */
} hl_opts;

typedef struct hl_field {
	char *name;
	hl_opts o;
} hl_field;

struct sr_highlight {
	hl_opts g;
	hl_field *fields;
	size_t nfields;
};

static void
strs_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cm_free(T, v[i]);
	cm_free(T, v);
}

static void
opts_free(hl_opts *o)
{
	strs_free(o->pre, o->npre);
	strs_free(o->post, o->npost);
	sr_query_free(o->hq);
}

void
sr_highlight_free(sr_highlight *h)
{
	if (!h)
		return;
	opts_free(&h->g);
	for (size_t i = 0; i < h->nfields; i++) {
		cm_free(T, h->fields[i].name);
		opts_free(&h->fields[i].o);
	}
	cm_free(T, h->fields);
	cm_free(T, h);
}

static cm_err
unknown_key(const char *k, cm_error *err)
{
	return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
	                         "[highlight] unknown field [%s]", k);
}

static cm_err
bad_value(const char *k, cm_error *err)
{
	return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
	                         "[highlight] failed to parse field [%s]", k);
}

static cm_err
parse_tags(const cJSON *v, const char *k, char ***out, size_t *n, cm_error *err)
{
	if (cJSON_IsString(v)) { /* ES takes a single string too */
		*out = cm_malloc(T, sizeof(char *));
		(*out)[0] = cm_strdup(T, v->valuestring);
		*n = 1;
		return CM_OK;
	}
	int cnt = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
	if (cnt < 1 || cnt > MAX_TAGS)
		return bad_value(k, err);
	const cJSON *e;
	cJSON_ArrayForEach(e, v) if (!cJSON_IsString(e) ||
	                             strlen(e->valuestring) > 256) return bad_value(k, err);
	strs_free(*out, *n);
	*out = cm_malloc(T, (size_t)cnt * sizeof(char *));
	*n = 0;
	cJSON_ArrayForEach(e, v)(*out)[(*n)++] = cm_strdup(T, e->valuestring);
	return CM_OK;
}

static cm_err
parse_int(const cJSON *v, const char *k, int *out, cm_error *err)
{
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble > 1e9)
		return bad_value(k, err);
	if (v->valuedouble < 0)
		return cm_error_set_type(err, CM_EINVAL, "illegal_argument_exception",
		                         "[%s] must be a non-negative integer, got [%d]", k,
		                         (int)v->valuedouble);
	*out = (int)v->valuedouble;
	return CM_OK;
}

static cm_err
parse_bool(const cJSON *v, const char *k, int *out, cm_error *err)
{
	if (!cJSON_IsBool(v))
		return bad_value(k, err);
	*out = cJSON_IsTrue(v);
	return CM_OK;
}

static bool
str_in(const char *s, const char *const *set)
{
	for (; *set; set++)
		if (!strcmp(s, *set))
			return true;
	return false;
}

/* One options object: the top level (fields allowed) or a field's. */
static cm_err
parse_opts(const cJSON *j, hl_opts *o, const char *field, cm_error *err)
{
	static const char *const ignored_str[] = {"boundary_scanner", "boundary_chars",
	                                          "boundary_scanner_locale", "fragmenter", NULL};
	static const char *const ignored_num[] = {"boundary_max_scan", "phrase_limit",
	                                          "max_analyzed_offset", "fragment_offset", NULL};
	static const char *const ignored_bool[] = {"force_source", "highlight_filter", NULL};
	const cJSON *v;
	cm_err rc = CM_OK;
	cJSON_ArrayForEach(v, j)
	{
		const char *k = v->string;
		if (!strcmp(k, "fields")) {
			if (field)
				return unknown_key(k, err);
			continue; /* the caller reads it */
		} else if (!strcmp(k, "pre_tags")) {
			rc = parse_tags(v, k, &o->pre, &o->npre, err);
		} else if (!strcmp(k, "post_tags")) {
			rc = parse_tags(v, k, &o->post, &o->npost, err);
		} else if (!strcmp(k, "fragment_size")) {
			rc = parse_int(v, k, &o->fragment_size, err);
		} else if (!strcmp(k, "number_of_fragments")) {
			rc = parse_int(v, k, &o->nfrags, err);
		} else if (!strcmp(k, "no_match_size")) {
			rc = parse_int(v, k, &o->no_match_size, err);
		} else if (!strcmp(k, "require_field_match")) {
			rc = parse_bool(v, k, &o->rfm, err);
		} else if (!strcmp(k, "highlight_query")) {
			sr_query *q = NULL;
			if ((rc = sr_query_from_json(v, &q, err)) == CM_OK) {
				sr_query_free(o->hq);
				o->hq = q;
			}
		} else if (!strcmp(k, "type")) {
			static const char *const types[] = {"unified", "plain", "fvh", NULL};
			if (!cJSON_IsString(v))
				return bad_value(k, err);
			if (!str_in(v->valuestring, types))
				return cm_error_set_type(
				    err, CM_EINVAL, "illegal_argument_exception",
				    "unknown highlighter type [%s] for the field [%s]",
				    v->valuestring, field ? field : "*");
			o->type = !strcmp(v->valuestring, "plain") ? HL_PLAIN
			          : !strcmp(v->valuestring, "fvh") ? HL_FVH
			                                           : HL_UNIFIED;
		} else if (!strcmp(k, "order")) {
			if (!cJSON_IsString(v) ||
			    (strcmp(v->valuestring, "score") && strcmp(v->valuestring, "none")))
				return cm_error_set_type(
				    err, CM_EINVAL, "illegal_argument_exception",
				    "Unknown Order [%s]", cJSON_IsString(v) ? v->valuestring : "?");
			o->order_score = !strcmp(v->valuestring, "score");
		} else if (!strcmp(k, "encoder")) {
			if (!cJSON_IsString(v) ||
			    (strcmp(v->valuestring, "default") && strcmp(v->valuestring, "html")))
				return bad_value(k, err);
			o->html = !strcmp(v->valuestring, "html");
		} else if (!strcmp(k, "tags_schema")) {
			if (!cJSON_IsString(v) || strcmp(v->valuestring, "styled"))
				return cm_error_set_type(err, CM_EINVAL,
				                         "illegal_argument_exception",
				                         "Unknown tag schema [%s]",
				                         cJSON_IsString(v) ? v->valuestring : "?");
			/* ES's styled schema: <em class="hlt1"> .. <em class="hlt10"> */
			strs_free(o->pre, o->npre);
			o->pre = cm_malloc(T, 10 * sizeof(char *));
			for (int i = 0; i < 10; i++) {
				char tag[32];
				snprintf(tag, sizeof tag, "<em class=\"hlt%d\">", i + 1);
				o->pre[i] = cm_strdup(T, tag);
			}
			o->npre = 10;
		} else if (!strcmp(k, "matched_fields") && field) {
			if (!cJSON_IsArray(v) && !cJSON_IsString(v))
				return bad_value(k, err);
		} else if (str_in(k, ignored_str)) {
			if (!cJSON_IsString(v))
				return bad_value(k, err);
		} else if (str_in(k, ignored_num)) {
			if (!cJSON_IsNumber(v))
				return bad_value(k, err);
		} else if (str_in(k, ignored_bool)) {
			if (!cJSON_IsBool(v))
				return bad_value(k, err);
		} else {
			return unknown_key(k, err);
		}
		if (rc)
			return rc;
	}
	return CM_OK;
}

static void
opts_init(hl_opts *o)
{
	memset(o, 0, sizeof *o);
	o->fragment_size = o->nfrags = o->no_match_size = -1;
	o->rfm = o->order_score = o->html = o->type = -1;
}

static cm_err
add_field(sr_highlight *h, const char *name, const cJSON *spec, cm_error *err)
{
	if (!cJSON_IsObject(spec))
		return bad_value(name, err);
	if (h->nfields >= 1024)
		return cm_error_set(err, CM_ELIMIT, "[highlight] has too many fields");
	h->fields = cm_realloc(T, h->fields, (h->nfields + 1) * sizeof(hl_field));
	hl_field *f = &h->fields[h->nfields++];
	f->name = cm_strdup(T, name);
	opts_init(&f->o);
	return parse_opts(spec, &f->o, name, err);
}

cm_err
sr_highlight_parse(const cJSON *j, sr_highlight **out, cm_error *err)
{
	*out = NULL;
	if (!cJSON_IsObject(j))
		return cm_error_set_type(err, CM_EPARSE, "parsing_exception",
		                         "[highlight] must be an object");
	sr_highlight *h = cm_calloc(T, 1, sizeof *h);
	opts_init(&h->g);
	cm_err rc = parse_opts(j, &h->g, NULL, err);
	const cJSON *fields = cJSON_GetObjectItemCaseSensitive(j, "fields");
	if (!rc && !fields)
		rc = cm_error_set_type(err, CM_EPARSE, "parsing_exception",
		                       "[highlight] requires [fields]");
	if (!rc && cJSON_IsObject(fields)) {
		const cJSON *f;
		cJSON_ArrayForEach(f, fields) if (!rc) rc = add_field(h, f->string, f, err);
	} else if (!rc && cJSON_IsArray(fields)) {
		/* [{"a": {}}, {"b": {}}]: an explicit order, one field each */
		const cJSON *e;
		cJSON_ArrayForEach(e, fields)
		{
			if (rc)
				break;
			if (!cJSON_IsObject(e) || cJSON_GetArraySize(e) != 1)
				rc = cm_error_set_type(
				    err, CM_EPARSE, "parsing_exception",
				    "If highlighter fields is an array it must contain "
				    "objects containing a single field");
			else
				rc = add_field(h, e->child->string, e->child, err);
		}
	} else if (!rc) {
		rc = bad_value("fields", err);
	}
	if (rc) {
		sr_highlight_free(h);
		return rc;
	}
	*out = h;
	return CM_OK;
}

/* ---- matchers: what the query asks for, per field ---- */

typedef enum { M_TERMS, M_PHRASE, M_DFA, M_FUZZY, M_RANGE } mkind;

typedef struct matcher {
	mkind kind;
	const char *field;    /* the query's field (may be a pattern) */
	const char *text;     /* the query text */
	bool analyzed;        /* match family: analyze with the field's search analyzer */
	bool caseless;        /* term: case_insensitive */
	const char *analyzer; /* an explicit analyzer name, NULL = the field's */
	const st_analysis *an; /* resolves a custom analyzer name (the mapping's) */
	int slop;
	bool prefix_last; /* match_phrase_prefix */
	const char *fuzziness;
	int prefix_length;
	bool transpositions;
	sr_dfa *dfa;
	const char *lo, *hi; /* range bounds (NULL open) */
	bool lo_incl, hi_incl;
} matcher;

typedef struct mset {
	matcher *v;
	size_t n, cap;
	sr_query **owned; /* expanded query_string trees */
	size_t nowned;
	cm_error *err;
	const st_analysis *an; /* the index's custom analysis */
} mset;

static matcher *
mpush(mset *s, mkind k, const char *field)
{
	if (s->n >= MAX_MATCHERS)
		return NULL;
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 16;
		s->v = cm_realloc(T, s->v, s->cap * sizeof(matcher));
	}
	matcher *m = &s->v[s->n++];
	memset(m, 0, sizeof *m);
	m->kind = k;
	m->field = field ? field : "*";
	return m;
}

static void
mset_free(mset *s)
{
	for (size_t i = 0; i < s->n; i++)
		sr_dfa_free(s->v[i].dfa);
	cm_free(T, s->v);
	for (size_t i = 0; i < s->nowned; i++)
		sr_query_free(s->owned[i]);
	cm_free(T, s->owned);
}

static char *
escape_wildcard(const char *v, const char *tail)
{
	size_t n = strlen(v), k = 0;
	char *s = cm_malloc(T, 2 * n + strlen(tail) + 1);
	for (size_t i = 0; i < n; i++) {
		if (v[i] == '*' || v[i] == '?' || v[i] == '\\')
			s[k++] = '\\';
		s[k++] = v[i];
	}
	strcpy(s + k, tail);
	return s;
}

static void
add_dfa(mset *s, const sr_query *q)
{
	sr_dfa *d = NULL;
	cm_error e;
	cm_error_clear(&e);
	const char *v = q->value ? q->value : "";
	bool ci = q->case_insensitive || q->analyze_multiterm;
	if (q->kind == SR_Q_REGEXP) {
		sr_dfa_regexp(
		    v, ci, q->max_determinized_states ? q->max_determinized_states : 10000, &d, &e);
	} else {
		char *pat = q->kind == SR_Q_PREFIX ? escape_wildcard(v, "*") : cm_strdup(T, v);
		sr_dfa_wildcard(pat, ci, &d, &e);
		cm_free(T, pat);
	}
	matcher *m = d ? mpush(s, M_DFA, q->field) : NULL;
	if (m)
		m->dfa = d;
	else
		sr_dfa_free(d);
}

static void collect(mset *s, const sr_query *q);

static void
collect_list(mset *s, sr_query *const *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		collect(s, v[i]);
}

static void
add_match(mset *s, const sr_query *q, const char *field, bool phrase, bool prefix)
{
	matcher *m = mpush(s, phrase ? M_PHRASE : q->fuzziness ? M_FUZZY : M_TERMS, field);
	if (!m)
		return;
	m->text = q->value ? q->value : "";
	m->analyzed = true;
	m->analyzer = q->analyzer;
	m->an = s->an;
	m->slop = q->slop;
	m->prefix_last = prefix;
	m->fuzziness = q->fuzziness;
	m->prefix_length = q->prefix_length;
	m->transpositions = q->transpositions;
}

/* Walks the query as ES's highlighter extracts terms: scoring and filter
 * clauses count, must_not and boosting's negative do not. */
static void
collect(mset *s, const sr_query *q)
{
	if (!q)
		return;
	switch (q->kind) {
	case SR_Q_TERM: {
		matcher *m = mpush(s, M_TERMS, q->field);
		if (m) {
			m->text = q->value ? q->value : "";
			m->caseless = q->case_insensitive;
		}
		break;
	}
	case SR_Q_TERMS:
		for (size_t i = 0; i < q->nvalues; i++) {
			matcher *m = mpush(s, M_TERMS, q->field);
			if (m)
				m->text = q->values[i];
		}
		break;
	case SR_Q_PREFIX:
	case SR_Q_WILDCARD:
	case SR_Q_REGEXP:
		add_dfa(s, q);
		break;
	case SR_Q_FUZZY: {
		matcher *m = mpush(s, M_FUZZY, q->field);
		if (m) {
			m->text = q->value ? q->value : "";
			m->fuzziness = q->fuzziness ? q->fuzziness : "AUTO";
			m->prefix_length = q->prefix_length;
			m->transpositions = q->transpositions;
		}
		break;
	}
	case SR_Q_RANGE: {
		matcher *m = mpush(s, M_RANGE, q->field);
		if (m) {
			m->lo = q->gte ? q->gte : q->gt;
			m->hi = q->lte ? q->lte : q->lt;
			m->lo_incl = q->gte != NULL;
			m->hi_incl = q->lte != NULL;
		}
		break;
	}
	case SR_Q_MATCH:
	case SR_Q_MATCH_BOOL_PREFIX: /* its whole terms */
		add_match(s, q, q->field, false, false);
		break;
	case SR_Q_MATCH_PHRASE:
		add_match(s, q, q->field, true, false);
		break;
	case SR_Q_MATCH_PHRASE_PREFIX:
		add_match(s, q, q->field, true, true);
		break;
	case SR_Q_MULTI_MATCH: {
		const char *t = q->multi_type ? q->multi_type : "best_fields";
		bool phrase = !strcmp(t, "phrase") || !strcmp(t, "phrase_prefix");
		bool prefix = !strcmp(t, "phrase_prefix");
		if (q->nvalues == 0)
			add_match(s, q, "*", phrase, prefix);
		for (size_t i = 0; i < q->nvalues; i++)
			add_match(s, q, q->values[i], phrase, prefix);
		break;
	}
	case SR_Q_BOOL:
		collect_list(s, q->must, q->nmust);
		collect_list(s, q->should, q->nshould);
		collect_list(s, q->filter, q->nfilter);
		break;
	case SR_Q_CONSTANT_SCORE:
	case SR_Q_BOOSTING:
		collect(s, q->inner);
		break;
	case SR_Q_DIS_MAX:
		collect_list(s, q->queries, q->nqueries);
		break;
	case SR_Q_QUERY_STRING:
	case SR_Q_SIMPLE_QUERY_STRING: {
		sr_query *x = NULL;
		cm_error e;
		cm_error_clear(&e);
		if (sr_query_string_expand(q, &x, &e) == CM_OK && x) {
			s->owned = cm_realloc(T, s->owned, (s->nowned + 1) * sizeof(sr_query *));
			s->owned[s->nowned++] = x;
			collect(s, x);
		}
		break;
	}
	default:
		break;
	}
}

/* ---- tokens of a value and the spans they match ---- */

typedef struct tok {
	char *term;
	size_t len;
	uint32_t pos, start, end;
	bool hit;
} tok;

typedef struct toks {
	tok *v;
	size_t n, cap;
} toks;

static int
on_tok(void *ctx, const st_token *t)
{
	toks *ts = ctx;
	if (ts->n == ts->cap) {
		ts->cap = ts->cap ? 2 * ts->cap : 32;
		ts->v = cm_realloc(T, ts->v, ts->cap * sizeof(tok));
	}
	tok *k = &ts->v[ts->n++];
	k->term = cm_strndup(T, t->term, t->len);
	k->len = t->len;
	k->pos = t->position;
	k->start = t->start;
	k->end = t->end;
	k->hit = false;
	return 0;
}

static void
toks_free(toks *ts)
{
	for (size_t i = 0; i < ts->n; i++)
		cm_free(T, ts->v[i].term);
	cm_free(T, ts->v);
	memset(ts, 0, sizeof *ts);
}

/* An analyzer: a built-in kind, or a custom chain of the mapping. */
typedef struct an_pick {
	st_analyzer_kind kind;
	const st_analyzer *custom;
} an_pick;

static void
analyze(an_pick a, const char *s, size_t n, toks *out)
{
	st_analyze_with(a.custom, a.kind, s, n > MAX_ANALYZED ? MAX_ANALYZED : n, 0, on_tok, out,
	                NULL);
}

static bool
term_eq(const tok *t, const char *s, size_t n, bool caseless)
{
	if (t->len != n)
		return false;
	return caseless ? strncasecmp(t->term, s, n) == 0 : memcmp(t->term, s, n) == 0;
}

/* The field's analyzer for the query text of a match-family matcher. */
static an_pick
query_analyzer(const matcher *m, const st_field_def *def)
{
	an_pick p;
	if (def->type != ST_FT_TEXT)
		return (an_pick){ST_AN_KEYWORD, def->normalizer};
	if (m->analyzer && st_analysis_resolve(m->an, m->analyzer, &p.kind, &p.custom))
		return p;
	return (an_pick){def->search_analyzer, def->custom_search_analyzer};
}

static bool
phrase_term_is(const tok *t, const tok *w, bool prefix)
{
	return term_eq(t, w->term, w->len, false) ||
	       (prefix && t->len >= w->len && !memcmp(t->term, w->term, w->len));
}

/* In idx (token indexes in position order), the first whose position is
 * at least p. */
static size_t
first_at(const toks *ts, const size_t *idx, size_t n, int64_t p)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if ((int64_t)ts->v[idx[mid]].pos < p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Marks the tokens of each occurrence of the phrase: every next phrase
 * term at its relative position, give or take slop. Each term's tokens
 * are listed once, so a lookup is a binary search whatever the slop. */
static void
mark_phrase(toks *ts, const toks *qt, int slop, bool prefix_last)
{
	if (qt->n == 0 || ts->n == 0)
		return;
	size_t **occ = cm_calloc(T, qt->n, sizeof(size_t *));
	size_t *nocc = cm_calloc(T, qt->n, sizeof(size_t));
	for (size_t k = 0; k < qt->n; k++) {
		occ[k] = cm_malloc(T, ts->n * sizeof(size_t));
		bool prefix = prefix_last && k + 1 == qt->n;
		for (size_t i = 0; i < ts->n; i++)
			if (phrase_term_is(&ts->v[i], &qt->v[k], prefix))
				occ[k][nocc[k]++] = i;
	}
	size_t *at = cm_malloc(T, qt->n * sizeof(size_t));
	uint32_t p0 = qt->v[0].pos;
	for (size_t c = 0; c < nocc[0]; c++) {
		size_t i = occ[0][c];
		at[0] = i;
		bool ok = true;
		for (size_t k = 1; k < qt->n && ok; k++) {
			int64_t want = (int64_t)ts->v[i].pos + (qt->v[k].pos - p0);
			size_t j = first_at(ts, occ[k], nocc[k], want - slop);
			while (j < nocc[k] && occ[k][j] == at[k - 1])
				j++;
			ok = j < nocc[k] && (int64_t)ts->v[occ[k][j]].pos <= want + slop;
			if (ok)
				at[k] = occ[k][j];
		}
		if (ok)
			for (size_t k = 0; k < qt->n; k++)
				ts->v[at[k]].hit = true;
	}
	cm_free(T, at);
	for (size_t k = 0; k < qt->n; k++)
		cm_free(T, occ[k]);
	cm_free(T, occ);
	cm_free(T, nocc);
}

static int
bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
	size_t n = an < bn ? an : bn;
	int c = memcmp(a, b, n);
	return c ? c : (an > bn) - (an < bn);
}

static void
mark(toks *ts, const matcher *m, const st_field_def *def)
{
	switch (m->kind) {
	case M_TERMS:
	case M_FUZZY: {
		toks qt = {0};
		if (m->analyzed)
			analyze(query_analyzer(m, def), m->text, strlen(m->text), &qt);
		else
			on_tok(&qt, &(st_token){.term = m->text, .len = strlen(m->text)});
		for (size_t k = 0; k < qt.n; k++) {
			const tok *w = &qt.v[k];
			size_t wcp = sr_utf8_len((const uint8_t *)w->term, w->len);
			int edits = m->kind == M_FUZZY ? sr_fuzzy_edits(m->fuzziness, wcp) : 0;
			for (size_t i = 0; i < ts->n; i++) {
				tok *t = &ts->v[i];
				if (term_eq(t, w->term, w->len, m->caseless)) {
					t->hit = true;
				} else if (edits > 0) {
					/* prefix_length code points must agree */
					size_t pb = 0;
					for (int c = 0; c < m->prefix_length && pb < w->len; c++) {
						pb++;
						while (pb < w->len && (w->term[pb] & 0xC0) == 0x80)
							pb++;
					}
					if (t->len >= pb && !memcmp(t->term, w->term, pb) &&
					    sr_edit_distance((const uint8_t *)w->term, w->len,
					                     (const uint8_t *)t->term, t->len,
					                     edits, m->transpositions) <= edits)
						t->hit = true;
				}
			}
		}
		toks_free(&qt);
		break;
	}
	case M_PHRASE: {
		toks qt = {0};
		analyze(query_analyzer(m, def), m->text, strlen(m->text), &qt);
		mark_phrase(ts, &qt, m->slop, m->prefix_last);
		toks_free(&qt);
		break;
	}
	case M_DFA:
		for (size_t i = 0; i < ts->n; i++)
			if (sr_dfa_match(m->dfa, (const uint8_t *)ts->v[i].term, ts->v[i].len))
				ts->v[i].hit = true;
		break;
	case M_RANGE:
		for (size_t i = 0; i < ts->n; i++) {
			tok *t = &ts->v[i];
			int lo = m->lo ? bytes_cmp(t->term, t->len, m->lo, strlen(m->lo)) : 1;
			int hi = m->hi ? bytes_cmp(t->term, t->len, m->hi, strlen(m->hi)) : -1;
			if ((lo > 0 || (lo == 0 && m->lo_incl)) &&
			    (hi < 0 || (hi == 0 && m->hi_incl)))
				t->hit = true;
		}
		break;
	}
}

/* ---- passages ---- */

typedef struct passage {
	uint32_t value;      /* index of the field value */
	uint32_t start, end; /* byte range in the value */
	uint32_t first_span, nspans;
	double score;
} passage;

static bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* A sentence ends after [.!?] and white space unless a lowercase letter
 * follows ("e.g. this" goes on, as in Unicode's sentence rules). */
static bool
ends_before(const char *s, uint32_t len, uint32_t i)
{
	if (!(s[i] == '.' || s[i] == '!' || s[i] == '?'))
		return false;
	uint32_t j = i + 1;
	if (j < len && !is_space(s[j]))
		return false;
	while (j < len && is_space(s[j]))
		j++;
	return j == len || !(s[j] >= 'a' && s[j] <= 'z');
}

#define WORD_SCAN 256 /* longest run looked through for a word boundary */

/* Start of the sentence holding offset: after a sentence end or a newline;
 * UINT32_MAX when it is more than reach bytes back (scans stay bounded). */
static uint32_t
sentence_start(const char *s, uint32_t off, uint32_t reach)
{
	uint32_t i = off, floor = off > reach ? off - reach : 0;
	while (i > 0) {
		if (i == floor)
			return UINT32_MAX;
		char p = s[i - 1];
		if (p == '\n')
			break;
		if (is_space(p)) {
			uint32_t j = i - 1;
			while (j > 0 && is_space(s[j - 1]))
				j--;
			if (j > 0 && ends_before(s, off + 1 > i ? off + 1 : i, j - 1))
				break;
		}
		i--;
	}
	while (i < off && is_space(s[i]))
		i++;
	return i;
}

/* End of the sentence holding offset (after its terminator), looking no
 * further than stop: stop + 1 when it ends later. */
static uint32_t
sentence_end(const char *s, uint32_t len, uint32_t off, uint32_t stop)
{
	uint32_t i = off;
	while (i < len) {
		if (i > stop)
			return stop + 1;
		char c = s[i];
		if (c == '\n')
			return i;
		if (ends_before(s, len, i))
			return i + 1;
		i++;
	}
	return len;
}

/* Word boundaries, at most WORD_SCAN bytes away; a longer word is cut
 * there, on a UTF-8 character boundary. */
static uint32_t
word_start(const char *s, uint32_t off)
{
	uint32_t floor = off > WORD_SCAN ? off - WORD_SCAN : 0, o = off;
	while (off > floor && !is_space(s[off - 1]))
		off--;
	while (off < o && ((unsigned char)s[off] & 0xC0) == 0x80)
		off++;
	return off;
}

static uint32_t
word_end(const char *s, uint32_t len, uint32_t off)
{
	uint32_t top = len - off > WORD_SCAN ? off + WORD_SCAN : len, o = off;
	while (off < top && !is_space(s[off]))
		off++;
	while (off > o && off < len && ((unsigned char)s[off] & 0xC0) == 0x80)
		off--;
	return off;
}

/* ES's bounded sentence scanner: a passage starts at its sentence unless
 * that is more than fragment_size before the match (then at the match's
 * word), and ends at the sentence end, or past fragment_size at the next
 * word boundary. */
/* The byte offset n characters (code points) after from, at most len. */
static uint32_t
chars_after(const char *s, uint32_t len, uint32_t from, uint32_t n)
{
	uint32_t i = from;
	while (i < len && n) {
		i++;
		while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80)
			i++;
		n--;
	}
	return i;
}

static void
passage_bounds(const char *s, uint32_t len, uint32_t mstart, uint32_t mend, int fsize, uint32_t *ps,
               uint32_t *pe)
{
	/* fragment_size counts characters; 4 bytes each at most */
	uint32_t st = sentence_start(s, mstart, 4 * (uint32_t)fsize + WORD_SCAN);
	if (st == UINT32_MAX || chars_after(s, mstart, st, (uint32_t)fsize) < mstart)
		st = word_start(s, mstart);
	uint32_t lim = chars_after(s, len, st, (uint32_t)fsize);
	uint32_t en = sentence_end(s, len, mend, lim > mend ? lim : mend);
	if (en > lim)
		en = word_end(s, len, lim > mend ? lim : mend);
	while (en > st && is_space(s[en - 1]))
		en--;
	*ps = st;
	*pe = en;
}

/* Lucene's PassageScorer: BM25 over the passage (k1 1.2, b 0.75, pivot
 * 87), each term weighted by how rare it is in the field's content
 * (weight = (k1 + 1) ln(1 + (numDocs + 0.5) / (ttf + 0.5)) with numDocs
 * approximated as 1 + contentLength / pivot), times 1 + 1 / ln(pivot +
 * passage start). */
static void
term_weights(const sr_hl_span *spans, size_t n, size_t content_len, double *w)
{
	uint32_t ttf[SR_HL_MAX_TERMS] = {0};
	for (size_t i = 0; i < n; i++)
		ttf[spans[i].term]++;
	double docs = 1 + (double)content_len / 87.0;
	for (size_t t = 0; t < SR_HL_MAX_TERMS; t++)
		w[t] = ttf[t] ? 2.2 * log(1 + (docs + 0.5) / (ttf[t] + 0.5)) : 0;
}

static double
passage_score(const sr_hl_span *spans, size_t n, uint32_t pstart, uint32_t plen, const double *w)
{
	double score = 0, len_norm = 1.2 * (0.25 + 0.75 * plen / 87.0);
	for (size_t i = 0; i < n; i++) {
		bool seen = false; /* each term once, with its frequency here */
		for (size_t k = 0; k < i && !seen; k++)
			seen = spans[k].term == spans[i].term;
		if (seen)
			continue;
		double tf = 0;
		for (size_t k = i; k < n; k++)
			tf += spans[k].term == spans[i].term;
		score += w[spans[i].term] * (tf * 2.2) / (tf + len_norm);
	}
	return score * (1 + 1 / log(87.0 + pstart));
}

typedef struct plist {
	passage *v;
	size_t n, cap;
} plist;

static void
build_passages(const char *s, uint32_t len, const sr_hl_span *spans, size_t n, int fsize,
               uint32_t value, uint32_t span_base, plist *out)
{
	size_t i = 0;
	while (i < n) {
		uint32_t ps, pe;
		passage_bounds(s, len, spans[i].start, spans[i].end, fsize, &ps, &pe);
		size_t j = i + 1;
		while (j < n && spans[j].start < pe) {
			/* a later match inside the passage may stretch its end */
			uint32_t s2, e2;
			passage_bounds(s, len, spans[j].start, spans[j].end, fsize, &s2, &e2);
			if (spans[j].end > pe)
				pe = e2 > spans[j].end ? e2 : spans[j].end;
			j++;
		}
		if (out->n == out->cap) {
			out->cap = out->cap ? 2 * out->cap : 8;
			out->v = cm_realloc(T, out->v, out->cap * sizeof(passage));
		}
		passage *p = &out->v[out->n++];
		p->value = value;
		p->start = ps;
		p->end = pe;
		p->first_span = span_base + (uint32_t)i;
		p->nspans = (uint32_t)(j - i);
		p->score = 0; /* once every value's terms are counted */
		i = j;
	}
}

static void
put_text(cm_buf *b, const char *s, size_t n, bool html)
{
	if (!html) {
		cm_buf_put(b, s, n);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		switch (s[i]) {
		case '&':
			cm_buf_put(b, "&amp;", 5);
			break;
		case '<':
			cm_buf_put(b, "&lt;", 4);
			break;
		case '>':
			cm_buf_put(b, "&gt;", 4);
			break;
		case '"':
			cm_buf_put(b, "&quot;", 6);
			break;
		case '\'':
			cm_buf_put(b, "&#x27;", 6);
			break;
		default:
			cm_buf_put_u8(b, (uint8_t)s[i]);
		}
	}
}

typedef struct tags {
	char *const *pre, *const *post;
	size_t npre, npost;
	bool html;
} tags;

/* One fragment as a JSON string: text[start, end) with each span tagged
 * (the i-th span of a passage takes the i-th tag, cycling, as ES). */
static void
put_fragment(cm_buf *out, const char *s, uint32_t start, uint32_t end, const sr_hl_span *spans,
             size_t n, const tags *tg)
{
	cm_buf f;
	cm_buf_init(&f, T);
	uint32_t at = start;
	for (size_t i = 0; i < n; i++) {
		uint32_t a = spans[i].start < start ? start : spans[i].start;
		uint32_t z = spans[i].end > end ? end : spans[i].end;
		if (a >= z)
			continue;
		put_text(&f, s + at, a - at, tg->html);
		const char *pre = tg->pre[i % tg->npre], *post = tg->post[i % tg->npost];
		cm_buf_put(&f, pre, strlen(pre));
		put_text(&f, s + a, z - a, tg->html);
		cm_buf_put(&f, post, strlen(post));
		at = z;
	}
	put_text(&f, s + at, end - at, tg->html);
	sr_jw_str(out, (const char *)f.data, f.len);
	cm_buf_free(&f);
}

static int
by_score(const void *a, const void *b)
{
	const passage *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	if (x->value != y->value)
		return x->value < y->value ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static int
by_offset(const void *a, const void *b)
{
	const passage *x = a, *y = b;
	if (x->value != y->value)
		return x->value < y->value ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* Picks the best nfrags passages and writes them; returns how many. */
static size_t
emit_passages(plist *pl, int nfrags, bool order_score, const char *const *texts,
              const sr_hl_span *spans, size_t nspans, size_t content_len, const tags *tg,
              cm_buf *out)
{
	if (pl->n == 0)
		return 0;
	double w[SR_HL_MAX_TERMS];
	term_weights(spans, nspans, content_len, w);
	for (size_t i = 0; i < pl->n; i++) {
		passage *p = &pl->v[i];
		p->score =
		    passage_score(spans + p->first_span, p->nspans, p->start, p->end - p->start, w);
	}
	qsort(pl->v, pl->n, sizeof(passage), by_score);
	size_t keep = pl->n < (size_t)nfrags ? pl->n : (size_t)nfrags;
	if (!order_score)
		qsort(pl->v, keep, sizeof(passage), by_offset);
	for (size_t i = 0; i < keep; i++) {
		const passage *p = &pl->v[i];
		if (i)
			cm_buf_put_u8(out, ',');
		put_fragment(out, texts[p->value], p->start, p->end, spans + p->first_span,
		             p->nspans, tg);
	}
	return keep;
}

size_t
sr_highlight_fragments(const char *text, size_t len, const sr_hl_span *spans, size_t n,
                       int fragment_size, int nfrags, bool order_score, const char *pre,
                       const char *post, bool html, cm_buf *out)
{
	char *pv[1] = {(char *)pre}, *qv[1] = {(char *)post};
	tags tg = {pv, qv, 1, 1, html};
	if (nfrags == 0) {
		put_fragment(out, text, 0, (uint32_t)len, spans, n, &tg);
		return 1;
	}
	plist pl = {0};
	build_passages(text, (uint32_t)len, spans, n, fragment_size, 0, 0, &pl);
	const char *texts[1] = {text};
	size_t k = emit_passages(&pl, nfrags, order_score, texts, spans, n, len, &tg, out);
	cm_free(T, pl.v);
	return k;
}

/* ---- the values of a field in the source ---- */

typedef struct vals {
	const char **v;
	size_t n, cap;
} vals;

static void
push_val(vals *vs, const char *s)
{
	if (vs->n == vs->cap) {
		vs->cap = vs->cap ? 2 * vs->cap : 4;
		vs->v = cm_realloc(T, vs->v, vs->cap * sizeof(char *));
	}
	vs->v[vs->n++] = s;
}

/* Values at dotted path below j: keys may hold dots themselves, arrays
 * hold several values. Numbers and booleans are not text to highlight. */
static void
find_values(const cJSON *j, const char *path, vals *out, int depth)
{
	if (depth > 64)
		return;
	if (cJSON_IsArray(j)) {
		const cJSON *e;
		cJSON_ArrayForEach(e, j) find_values(e, path, out, depth + 1);
		return;
	}
	if (*path == '\0') {
		if (cJSON_IsString(j))
			push_val(out, j->valuestring);
		return;
	}
	if (!cJSON_IsObject(j))
		return;
	const cJSON *c;
	cJSON_ArrayForEach(c, j)
	{
		size_t kl = strlen(c->string);
		if (!strncmp(path, c->string, kl) && (path[kl] == '\0' || path[kl] == '.'))
			find_values(c, path[kl] ? path + kl + 1 : path + kl, out, depth + 1);
	}
}

/* ---- rendering ---- */

static int
pick(int field, int global, int dflt)
{
	return field >= 0 ? field : global >= 0 ? global : dflt;
}

typedef struct eff {
	tags tg;
	int fsize, nfrags, no_match;
	bool rfm, order_score;
	int type;
	const sr_query *hq;
} eff;

static void
effective(const sr_highlight *h, const hl_field *f, eff *e)
{
	static char *const em_pre[] = {"<em>"}, *const em_post[] = {"</em>"};
	const hl_opts *o = &f->o, *g = &h->g;
	e->tg.pre = o->pre ? o->pre : g->pre ? g->pre : em_pre;
	e->tg.npre = o->pre ? o->npre : g->pre ? g->npre : 1;
	e->tg.post = o->post ? o->post : g->post ? g->post : em_post;
	e->tg.npost = o->post ? o->npost : g->post ? g->npost : 1;
	e->tg.html = pick(o->html, g->html, 0);
	e->fsize = pick(o->fragment_size, g->fragment_size, 100);
	e->nfrags = pick(o->nfrags, g->nfrags, 5);
	e->no_match = pick(o->no_match_size, g->no_match_size, 0);
	e->rfm = pick(o->rfm, g->rfm, 1); /* ES: true by default */
	e->order_score = pick(o->order_score, g->order_score, 0);
	e->hq = o->hq ? o->hq : g->hq;
	e->type = pick(o->type, g->type, HL_UNIFIED);
}

static bool
applies(const matcher *m, const char *field, bool rfm)
{
	if (!rfm)
		return true;
	return !strcmp(m->field, field) || fnmatch(m->field, field, 0) == 0;
}

static uint32_t
term_id(toks *terms, const tok *t)
{
	for (size_t i = 0; i < terms->n; i++)
		if (term_eq(&terms->v[i], t->term, t->len, false))
			return (uint32_t)i;
	if (terms->n == SR_HL_MAX_TERMS)
		return SR_HL_MAX_TERMS - 1;
	on_tok(terms, &(st_token){.term = t->term, .len = t->len});
	return (uint32_t)(terms->n - 1);
}

/* ES's index.highlight.max_analyzed_offset: text a highlighter would
 * analyse again (plain always; unified unless offsets are indexed) may be
 * at most that long, all values of the field together for unified, each
 * value for plain. */
static cm_err
over_analyzed_limit(const st_field_def *def, const eff *e, const vals *vs, const sr_hl_doc *hd,
                    cm_error *err)
{
	if (!hd || hd->max_analyzed_offset <= 0 || e->type == HL_FVH ||
	    (e->type == HL_UNIFIED && st_field_has_offsets(def)))
		return CM_OK;
	size_t total = 0, most = 0;
	for (size_t v = 0; v < vs->n; v++) {
		size_t l = sr_utf8_len((const uint8_t *)vs->v[v], strlen(vs->v[v]));
		total += l + (v > 0);
		most = l > most ? l : most;
	}
	if ((e->type == HL_PLAIN ? most : total) <= (size_t)hd->max_analyzed_offset)
		return CM_OK;
	return cm_error_set_type(
	    err, CM_EINVAL, "illegal_argument_exception",
	    "The length of [%s] field of [%s] doc of [%s] index has exceeded [%lld] - maximum "
	    "allowed to be analyzed for highlighting. This maximum can be set by changing the "
	    "[index.highlight.max_analyzed_offset] index level setting. For large texts, "
	    "indexing with offsets or term vectors%s is recommended!",
	    def->path, hd->id ? hd->id : "", hd->index ? hd->index : "",
	    (long long)hd->max_analyzed_offset,
	    e->type == HL_PLAIN ? ", and highlighting with unified or fvh highlighter" : "");
}

/* Highlights one field; appends "name":[...] (with a leading comma when
 * *first is false) when it yields fragments. */
static cm_err
field_render(const st_field_def *def, const eff *e, const mset *ms, const cJSON *doc,
             const sr_hl_doc *hd, cm_buf *out, bool *first, cm_error *err)
{
	vals vs = {0};
	find_values(doc, def->parent ? def->parent : def->path, &vs, 0);
	if (!vs.n) {
		cm_free(T, vs.v);
		return CM_OK;
	}
	if (over_analyzed_limit(def, e, &vs, hd, err)) {
		cm_free(T, vs.v);
		return err->code;
	}
	an_pick an = def->type == ST_FT_TEXT ? (an_pick){def->analyzer, def->custom_analyzer}
	                                     : (an_pick){ST_AN_KEYWORD, def->normalizer};
	sr_hl_span *spans = NULL;
	size_t nspans = 0, cap = 0;
	plist pl = {0};
	cm_buf frags;
	cm_buf_init(&frags, T);
	size_t nfr = 0, content = 0;
	toks terms = {0}; /* the distinct matched terms: a span's term is its index */
	for (size_t v = 0; v < vs.n; v++) {
		const char *s = vs.v[v];
		size_t len = strlen(s);
		content += len + (v > 0);
		if (def->type == ST_FT_KEYWORD && def->ignore_above > 0 &&
		    sr_utf8_len((const uint8_t *)s, len) > (size_t)def->ignore_above)
			continue; /* not indexed, not highlighted */
		toks ts = {0};
		analyze(an, s, len, &ts);
		for (size_t i = 0; i < ms->n; i++)
			if (applies(&ms->v[i], def->path, e->rfm))
				mark(&ts, &ms->v[i], def);
		size_t base = nspans;
		for (size_t i = 0; i < ts.n; i++) {
			if (!ts.v[i].hit)
				continue;
			if (nspans && nspans > base && ts.v[i].start < spans[nspans - 1].end) {
				if (ts.v[i].end > spans[nspans - 1].end)
					spans[nspans - 1].end = ts.v[i].end;
				continue;
			}
			if (nspans == cap) {
				cap = cap ? 2 * cap : 16;
				spans = cm_realloc(T, spans, cap * sizeof(sr_hl_span));
			}
			spans[nspans++] =
			    (sr_hl_span){ts.v[i].start, ts.v[i].end, term_id(&terms, &ts.v[i])};
		}
		toks_free(&ts);
		if (nspans == base)
			continue;
		if (e->nfrags == 0) {
			/* the whole value, for each value that matched */
			if (nfr++)
				cm_buf_put_u8(&frags, ',');
			put_fragment(&frags, s, 0, (uint32_t)len, spans + base, nspans - base,
			             &e->tg);
		} else {
			build_passages(s, (uint32_t)len, spans + base, nspans - base, e->fsize,
			               (uint32_t)v, (uint32_t)base, &pl);
		}
	}
	if (e->nfrags > 0 && pl.n)
		nfr = emit_passages(&pl, e->nfrags, e->order_score, vs.v, spans, nspans, content,
		                    &e->tg, &frags);
	toks_free(&terms);
	if (!nfr && e->no_match > 0) {
		/* the start of the first value, cut like a passage */
		const char *s = vs.v[0];
		uint32_t len = (uint32_t)strlen(s);
		uint32_t lim = chars_after(s, len, 0, (uint32_t)e->no_match);
		uint32_t en = sentence_end(s, len, 0, lim);
		if (en > lim)
			en = word_end(s, len, lim);
		while (en > 0 && is_space(s[en - 1]))
			en--;
		if (en) {
			put_fragment(&frags, s, 0, en, NULL, 0, &e->tg);
			nfr = 1;
		}
	}
	if (nfr) {
		if (!*first)
			cm_buf_put_u8(out, ',');
		*first = false;
		sr_jw_cstr(out, def->path);
		cm_buf_put(out, ":[", 2);
		cm_buf_put(out, frags.data, frags.len);
		cm_buf_put_u8(out, ']');
	}
	cm_buf_free(&frags);
	cm_free(T, pl.v);
	cm_free(T, spans);
	cm_free(T, vs.v);
	return CM_OK;
}

static bool
highlightable(const st_field_def *d)
{
	return d->type == ST_FT_TEXT || d->type == ST_FT_KEYWORD;
}

cm_err
sr_highlight_render(const sr_highlight *h, const st_mapping *m, const sr_query *q, const char *src,
                    size_t len, cm_buf *out, cm_error *err)
{
	return sr_highlight_render_doc(h, m, q, src, len, NULL, out, err);
}

cm_err
sr_highlight_render_doc(const sr_highlight *h, const st_mapping *m, const sr_query *q,
                        const char *src, size_t len, const sr_hl_doc *hd, cm_buf *out,
                        cm_error *err)
{
	if (!h || !m || !len)
		return CM_OK;
	cJSON *doc = cJSON_ParseWithLength(src, len);
	if (!doc)
		return cm_error_set(err, CM_EINTERNAL, "stored _source does not parse");
	mset base = {.an = m->analysis}, alt = {.an = m->analysis};
	collect(&base, q);
	size_t start = out->len;
	bool first = true;
	cm_buf_put_u8(out, '{');
	/* each field once, in the request's order, patterns in mapping order */
	bool *done = cm_calloc(T, m->nfields ? m->nfields : 1, sizeof(bool));
	cm_err rc = CM_OK;
	for (size_t i = 0; i < h->nfields && !rc; i++) {
		const hl_field *f = &h->fields[i];
		eff e;
		effective(h, f, &e);
		const mset *ms = &base;
		if (e.hq) {
			mset_free(&alt);
			memset(&alt, 0, sizeof alt);
			alt.an = m->analysis;
			collect(&alt, e.hq);
			ms = &alt;
		}
		bool pattern = strchr(f->name, '*') != NULL;
		for (size_t k = 0; k < m->nfields && !rc; k++) {
			const st_field_def *d = &m->fields[k];
			if (done[k] || !highlightable(d))
				continue;
			if (pattern ? fnmatch(f->name, d->path, 0) != 0
			            : strcmp(f->name, d->path) != 0)
				continue;
			done[k] = true;
			/* which clauses light it up: applies() */
			rc = field_render(d, &e, ms, doc, hd, out, &first, err);
		}
	}
	cm_free(T, done);
	mset_free(&alt);
	mset_free(&base);
	cJSON_Delete(doc);
	if (first || rc)
		out->len = start; /* no field had a fragment */
	else
		cm_buf_put_u8(out, '}');
	return rc;
}
