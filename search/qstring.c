/* Query strings: Lucene's classic query parser syntax (q= and
 * query_string) and Lucene's SimpleQueryParser (simple_query_string),
 * turned into ordinary query trees. The boolean logic mirrors Lucene's
 * QueryParserBase.addClause and SimpleQueryParser.buildQueryTree so that
 * "a AND b OR c", "+a -b" and friends select what Elasticsearch selects.
 * Terms become match queries (analyzed by the field's search analyzer),
 * quoted text match_phrase; a term without a field goes to the default
 * fields ("*" = every searchable field, expanded by the executor). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "sr.h"

#define T CM_MEM_SEARCH
#define MAX_DEPTH 100
#define MAX_CLAUSES 1024

typedef struct qs_opts {
	char *const *fields;
	const float *boosts;
	size_t nfields;
	bool default_and;
	const char *fuzziness; /* for a bare "term~" */
	int prefix_length, max_expansions;
	bool transpositions;
	int phrase_slop;
	const char *analyzer, *time_zone;
	float tie_breaker;
	bool lenient;
	int max_det_states;
	unsigned flags; /* simple_query_string operators */
} qs_opts;

enum { OCC_MUST, OCC_SHOULD, OCC_MUST_NOT };

typedef struct qs_ctx {
	const qs_opts *o;
	cm_error *err;
	size_t clauses;
	bool limit_hit;
} qs_ctx;

static sr_query *
bool_new(void)
{
	return sr_query_new(SR_Q_BOOL);
}

static void
bool_add(qs_ctx *c, sr_query *b, int occ, sr_query *q)
{
	sr_query ***list;
	size_t *n;
	if (++c->clauses > MAX_CLAUSES)
		c->limit_hit = true;
	switch (occ) {
	case OCC_MUST:
		list = &b->must;
		n = &b->nmust;
		break;
	case OCC_MUST_NOT:
		list = &b->must_not;
		n = &b->nmust_not;
		break;
	default:
		list = &b->should;
		n = &b->nshould;
	}
	*list = cm_realloc(T, *list, (*n + 1) * sizeof(**list));
	(*list)[(*n)++] = q;
}

/* Puts a leaf on the default fields: itself for one field, a dis_max of
 * per-field copies for several (ES: best_fields / tie_breaker). */
static sr_query *
on_fields(qs_ctx *c, const char *field, sr_query *tmpl)
{
	const qs_opts *o = c->o;
	if (field || o->nfields <= 1) {
		const char *f = field ? field : o->nfields ? o->fields[0] : "*";
		tmpl->field = cm_strdup(T, f);
		if (!field && o->nfields && o->boosts)
			tmpl->boost *= o->boosts[0];
		if (!strcmp(f, "*") || strchr(f, '*'))
			tmpl->lenient = true; /* ES: wildcard field lists are lenient */
		return tmpl;
	}
	sr_query *d = sr_query_new(SR_Q_DIS_MAX);
	d->tie_breaker = o->tie_breaker;
	d->queries = cm_calloc(T, o->nfields, sizeof(sr_query *));
	for (size_t i = 0; i < o->nfields; i++) {
		sr_query *q = sr_query_clone(tmpl);
		q->field = cm_strdup(T, o->fields[i]);
		if (o->boosts)
			q->boost *= o->boosts[i];
		if (strchr(q->field, '*'))
			q->lenient = true;
		d->queries[d->nqueries++] = q;
	}
	c->clauses += o->nfields;
	if (c->clauses > MAX_CLAUSES)
		c->limit_hit = true;
	sr_query_free(tmpl);
	return d;
}

static sr_query *
leaf(qs_ctx *c, sr_query_kind kind, const char *value)
{
	sr_query *q = sr_query_new(kind);
	q->value = cm_strdup(T, value);
	q->lenient = c->o->lenient;
	if (c->o->analyzer && (kind == SR_Q_MATCH || kind == SR_Q_MATCH_PHRASE))
		q->analyzer = cm_strdup(T, c->o->analyzer);
	if (kind == SR_Q_MATCH)
		q->op_and = c->o->default_and;
	if (kind == SR_Q_PREFIX || kind == SR_Q_WILDCARD || kind == SR_Q_REGEXP ||
	    kind == SR_Q_FUZZY)
		q->analyze_multiterm = true;
	if (kind == SR_Q_FUZZY) {
		q->prefix_length = c->o->prefix_length;
		q->max_expansions = c->o->max_expansions;
		q->transpositions = c->o->transpositions;
	}
	if (kind == SR_Q_REGEXP)
		q->max_determinized_states = c->o->max_det_states;
	return q;
}

/* ---- classic query parser ---- */

typedef enum {
	TK_EOF,
	TK_AND,
	TK_OR,
	TK_NOT,
	TK_PLUS,
	TK_MINUS,
	TK_LPAREN,
	TK_RPAREN,
	TK_COLON,
	TK_BOOST, /* ^N */
	TK_FUZZY, /* ~ or ~N */
	TK_TERM,
	TK_QUOTED,
	TK_REGEX,
	TK_RANGE,
	TK_BAD,
} tk_type;

typedef struct tok {
	tk_type type;
	size_t end;    /* input offset after the token */
	char *text;    /* TERM/QUOTED/REGEX: unescaped text */
	char *pattern; /* TERM with wildcards: text with \-escapes kept for * ? \ */
	bool wild;     /* TERM: an unescaped * or ? */
	bool escaped;  /* TERM: some character was escaped */
	bool has_num;  /* FUZZY */
	double num;    /* BOOST / FUZZY */
	/* RANGE */
	char *lo, *hi;
	bool incl_lo, incl_hi;
	const char *why; /* TK_BAD */
} tok;

typedef struct qp {
	qs_ctx *c;
	const char *s;
	size_t n, pos;
	int depth;
	const char *why; /* first syntax error */
	tok la;          /* the token peeked at la_pos, so it is lexed once */
	size_t la_pos;
	bool la_ok;
} qp;

static void
tok_clear(tok *t)
{
	cm_free(T, t->text);
	cm_free(T, t->pattern);
	cm_free(T, t->lo);
	cm_free(T, t->hi);
	memset(t, 0, sizeof(*t));
}

static bool
is_ws(const char *s, size_t n, size_t i, size_t *len)
{
	unsigned char ch = (unsigned char)s[i];
	*len = 1;
	if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f')
		return true;
	/* U+3000 IDEOGRAPHIC SPACE, which Lucene's grammar also skips */
	if (ch == 0xE3 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
	    (unsigned char)s[i + 2] == 0x80) {
		*len = 3;
		return true;
	}
	return false;
}

static bool
special(char ch)
{
	return strchr("+-!():^[]\"{}~*?\\/", ch) != NULL;
}

typedef struct sbuf {
	char *p;
	size_t len, cap;
} sbuf;

static void
sb_put(sbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = cm_realloc(T, b->p, b->cap);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void
sb_putc(sbuf *b, char ch)
{
	sb_put(b, &ch, 1);
}

static char *
sb_take(sbuf *b)
{
	if (!b->p)
		return cm_strdup(T, "");
	char *p = b->p;
	b->p = NULL;
	b->len = b->cap = 0;
	return p;
}

/* Appends the character after a backslash at s[i] (i points at '\');
 * \uXXXX is a code point. Returns the bytes consumed, 0 when malformed. */
static size_t
put_escaped(const char *s, size_t n, size_t i, sbuf *b, char *ch_out)
{
	if (i + 1 >= n)
		return 0;
	if (s[i + 1] == 'u') {
		if (i + 6 > n)
			return 0;
		unsigned cp = 0;
		for (size_t k = i + 2; k < i + 6; k++) {
			if (!isxdigit((unsigned char)s[k]))
				return 0;
			cp = cp * 16 + (unsigned)(isdigit((unsigned char)s[k])
			                              ? s[k] - '0'
			                              : (tolower((unsigned char)s[k]) - 'a' + 10));
		}
		/* NUL would cut the term short in every C string after this, and a
		 * lone surrogate is not UTF-8: both are malformed here. */
		if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		char u[4];
		size_t un;
		if (cp < 0x80) {
			u[0] = (char)cp;
			un = 1;
		} else if (cp < 0x800) {
			u[0] = (char)(0xC0 | (cp >> 6));
			u[1] = (char)(0x80 | (cp & 0x3F));
			un = 2;
		} else {
			u[0] = (char)(0xE0 | (cp >> 12));
			u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
			u[2] = (char)(0x80 | (cp & 0x3F));
			un = 3;
		}
		sb_put(b, u, un);
		*ch_out = un == 1 ? u[0] : 'u';
		return 6;
	}
	sb_putc(b, s[i + 1]);
	*ch_out = s[i + 1];
	return 2;
}

static double
read_number(const char *s, size_t n, size_t *i, bool *ok)
{
	size_t start = *i;
	while (*i < n && isdigit((unsigned char)s[*i]))
		(*i)++;
	if (*i < n && s[*i] == '.' && *i + 1 < n && isdigit((unsigned char)s[*i + 1])) {
		(*i)++;
		while (*i < n && isdigit((unsigned char)s[*i]))
			(*i)++;
	}
	*ok = *i > start;
	if (!*ok)
		return 0;
	char tmp[64];
	size_t len = *i - start < sizeof(tmp) - 1 ? *i - start : sizeof(tmp) - 1;
	memcpy(tmp, s + start, len);
	tmp[len] = '\0';
	return strtod(tmp, NULL);
}

static bool
range_bound(const char *s, size_t n, size_t *i, char **out)
{
	size_t wl;
	sbuf b = {0};
	while (*i < n && is_ws(s, n, *i, &wl))
		*i += wl;
	if (*i >= n)
		return false;
	if (s[*i] == '"') {
		(*i)++;
		while (*i < n && s[*i] != '"') {
			char ch;
			if (s[*i] == '\\') {
				size_t k = put_escaped(s, n, *i, &b, &ch);
				if (!k) {
					cm_free(T, b.p);
					return false;
				}
				*i += k;
			} else
				sb_putc(&b, s[(*i)++]);
		}
		if (*i >= n) {
			cm_free(T, b.p);
			return false;
		}
		(*i)++;
		*out = sb_take(&b);
		return true;
	}
	size_t start = *i;
	while (*i < n && !is_ws(s, n, *i, &wl) && s[*i] != ']' && s[*i] != '}') {
		char ch;
		if (s[*i] == '\\') {
			size_t k = put_escaped(s, n, *i, &b, &ch);
			if (!k) {
				cm_free(T, b.p);
				return false;
			}
			*i += k;
		} else
			sb_putc(&b, s[(*i)++]);
	}
	if (*i == start) {
		cm_free(T, b.p);
		return false;
	}
	*out = sb_take(&b);
	return true;
}

/* Lexes the token at offset i. */
static void
lex(const qp *p, size_t i, tok *t)
{
	const char *s = p->s;
	size_t n = p->n, wl;
	memset(t, 0, sizeof(*t));
	/* a lone + - ! followed by white space is a "bare operator": Lucene
	 * makes it a term that analyzes to nothing, i.e. it is dropped */
	for (;;) {
		while (i < n && is_ws(s, n, i, &wl))
			i += wl;
		if (i < n && (s[i] == '+' || s[i] == '-' || s[i] == '!') &&
		    (i + 1 == n || is_ws(s, n, i + 1, &wl)))
			i++;
		else
			break;
	}
	if (i >= n) {
		t->type = TK_EOF;
		t->end = i;
		return;
	}
	char ch = s[i];
	t->end = i + 1;
	switch (ch) {
	case '(':
		t->type = TK_LPAREN;
		return;
	case ')':
		t->type = TK_RPAREN;
		return;
	case ':':
		t->type = TK_COLON;
		return;
	case '+':
		t->type = TK_PLUS;
		return;
	case '-':
		t->type = TK_MINUS;
		return;
	case '!':
		t->type = TK_NOT;
		return;
	case '^': {
		size_t k = i + 1;
		bool ok;
		t->num = read_number(s, n, &k, &ok);
		t->type = ok ? TK_BOOST : TK_BAD;
		t->why = "boost without a number";
		t->end = k;
		return;
	}
	case '~': {
		size_t k = i + 1;
		bool ok;
		t->num = read_number(s, n, &k, &ok);
		t->has_num = ok;
		t->type = TK_FUZZY;
		t->end = k;
		return;
	}
	case '"': {
		sbuf b = {0};
		size_t k = i + 1;
		while (k < n && s[k] != '"') {
			if (s[k] == '\\') {
				char e;
				size_t used = put_escaped(s, n, k, &b, &e);
				if (!used)
					break;
				k += used;
			} else
				sb_putc(&b, s[k++]);
		}
		if (k >= n) {
			cm_free(T, b.p);
			t->type = TK_BAD;
			t->why = "unterminated phrase";
			return;
		}
		t->type = TK_QUOTED;
		t->text = sb_take(&b);
		t->end = k + 1;
		return;
	}
	case '/': {
		sbuf b = {0};
		size_t k = i + 1;
		while (k < n && s[k] != '/') {
			if (s[k] == '\\' && k + 1 < n) {
				/* keep escapes: they are regexp syntax, except \/ */
				if (s[k + 1] != '/')
					sb_putc(&b, '\\');
				sb_putc(&b, s[k + 1]);
				k += 2;
			} else
				sb_putc(&b, s[k++]);
		}
		if (k >= n) {
			cm_free(T, b.p);
			t->type = TK_BAD;
			t->why = "unterminated regular expression";
			return;
		}
		t->type = TK_REGEX;
		t->text = sb_take(&b);
		t->end = k + 1;
		return;
	}
	case '[':
	case '{': {
		size_t k = i + 1;
		t->incl_lo = ch == '[';
		t->type = TK_BAD;
		t->why = "malformed range";
		if (!range_bound(s, n, &k, &t->lo))
			return;
		size_t save = k;
		while (k < n && is_ws(s, n, k, &wl))
			k += wl;
		if (k + 2 <= n && s[k] == 'T' && s[k + 1] == 'O' &&
		    (k + 2 == n || is_ws(s, n, k + 2, &wl) || s[k + 2] == '"'))
			k += 2;
		else
			k = save;
		if (!range_bound(s, n, &k, &t->hi))
			return;
		while (k < n && is_ws(s, n, k, &wl))
			k += wl;
		if (k >= n || (s[k] != ']' && s[k] != '}'))
			return;
		t->incl_hi = s[k] == ']';
		t->type = TK_RANGE;
		t->end = k + 1;
		return;
	}
	}
	/* a term */
	sbuf text = {0}, pat = {0};
	size_t k = i;
	bool first = true;
	while (k < n) {
		char c = s[k];
		if (c == '\\') {
			char e;
			size_t before = text.len;
			size_t used = put_escaped(s, n, k, &text, &e);
			if (!used) {
				cm_free(T, text.p);
				cm_free(T, pat.p);
				t->type = TK_BAD;
				t->why = "Term can not end with escape character.";
				return;
			}
			if (e == '*' || e == '?' || e == '\\')
				sb_putc(&pat, '\\');
			sb_put(&pat, text.p + before, text.len - before);
			t->escaped = true;
			k += used;
		} else if (is_ws(s, n, k, &wl)) {
			break;
		} else if (c == '*' || c == '?') {
			t->wild = true;
			sb_putc(&text, c);
			sb_putc(&pat, c);
			k++;
		} else if (!special(c) || (!first && (c == '-' || c == '+'))) {
			sb_putc(&text, c);
			sb_putc(&pat, c);
			k++;
		} else
			break;
		first = false;
	}
	if (k == i) { /* a lone special char that starts nothing */
		t->type = TK_BAD;
		t->why = "unexpected character";
		return;
	}
	t->end = k;
	t->type = TK_TERM;
	t->text = sb_take(&text);
	t->pattern = sb_take(&pat);
	if (!t->escaped && !t->wild) {
		if (!strcmp(t->text, "AND") || !strcmp(t->text, "&&"))
			t->type = TK_AND;
		else if (!strcmp(t->text, "OR") || !strcmp(t->text, "||"))
			t->type = TK_OR;
		else if (!strcmp(t->text, "NOT"))
			t->type = TK_NOT;
		if (t->type != TK_TERM) {
			cm_free(T, t->text);
			cm_free(T, t->pattern);
			t->text = t->pattern = NULL;
		}
	}
}

static tk_type
peek(qp *p)
{
	if (!p->la_ok || p->la_pos != p->pos) {
		if (p->la_ok)
			tok_clear(&p->la);
		lex(p, p->pos, &p->la);
		p->la_pos = p->pos;
		p->la_ok = true;
	}
	return p->la.type;
}

static void
next(qp *p, tok *t)
{
	if (p->la_ok && p->la_pos == p->pos) {
		*t = p->la; /* hand the peeked token over */
		p->la_ok = false;
	} else
		lex(p, p->pos, t);
	p->pos = t->end;
}

static sr_query *
fail(qp *p, const char *why)
{
	if (!p->why)
		p->why = why;
	return NULL;
}

enum { CONJ_NONE, CONJ_AND, CONJ_OR };
enum { MOD_NONE, MOD_REQ, MOD_NOT };

typedef struct clause {
	sr_query *q;
	int occ;
} clause;

typedef struct clist {
	clause *v;
	size_t n;
} clist;

/* Lucene QueryParserBase.addClause, verbatim in logic. */
static void
add_clause(qp *p, clist *cl, int conj, int mods, sr_query *q)
{
	bool required, prohibited;
	if (cl->n > 0 && conj == CONJ_AND && cl->v[cl->n - 1].occ != OCC_MUST_NOT)
		cl->v[cl->n - 1].occ = OCC_MUST;
	if (cl->n > 0 && p->c->o->default_and && conj == CONJ_OR &&
	    cl->v[cl->n - 1].occ != OCC_MUST_NOT)
		cl->v[cl->n - 1].occ = OCC_SHOULD;
	if (!q)
		return;
	if (!p->c->o->default_and) {
		prohibited = mods == MOD_NOT;
		required = mods == MOD_REQ;
		if (conj == CONJ_AND && !prohibited)
			required = true;
	} else {
		prohibited = mods == MOD_NOT;
		required = !prohibited && conj != CONJ_OR;
	}
	cl->v = cm_realloc(T, cl->v, (cl->n + 1) * sizeof(clause));
	cl->v[cl->n].q = q;
	cl->v[cl->n].occ = prohibited ? OCC_MUST_NOT : required ? OCC_MUST : OCC_SHOULD;
	cl->n++;
}

static sr_query *parse_query(qp *p, const char *field);

static void
apply_boost(sr_query *q, double b)
{
	if (q)
		q->boost *= (float)b;
}

static char *
fuzzy_edits(double v, bool has_num, const char *dflt)
{
	char b[16];
	if (!has_num)
		return cm_strdup(T, dflt ? dflt : "AUTO");
	int e = v >= 2 ? 2 : v <= 0 ? 0 : (int)v;
	snprintf(b, sizeof(b), "%d", e);
	return cm_strdup(T, b);
}

static bool
effective_all(qp *p, const char *field)
{
	if (field)
		return !strcmp(field, "*");
	const qs_opts *o = p->c->o;
	return o->nfields == 0 || (o->nfields == 1 && !strcmp(o->fields[0], "*"));
}

/* A bare term: field query, wildcard, prefix, fuzzy, >=/< range forms. */
static sr_query *
term_query(qp *p, const char *field, tok *t, bool fuzzy, bool fuzzy_num, double fuzzy_v)
{
	qs_ctx *c = p->c;
	if (field && !strcmp(field, "_exists_")) {
		sr_query *q = sr_query_new(SR_Q_EXISTS);
		q->field = cm_strdup(T, t->text);
		return q;
	}
	if (t->wild) {
		if (!strcmp(t->pattern, "*")) {
			if (effective_all(p, field))
				return sr_query_new(SR_Q_MATCH_ALL);
			return on_fields(c, field, sr_query_new(SR_Q_EXISTS));
		}
		size_t len = strlen(t->pattern);
		/* (an escaped NUL can leave the pattern empty: found by dsl_fuzz) */
		bool prefix = len > 0 && t->pattern[len - 1] == '*' &&
		              (len < 2 || t->pattern[len - 2] != '\\');
		if (prefix)
			for (size_t k = 0; k + 1 < len; k++) {
				if (t->pattern[k] == '\\') {
					k++;
					continue;
				}
				if (t->pattern[k] == '*' || t->pattern[k] == '?')
					prefix = false;
			}
		if (prefix) {
			/* the prefix's text: the pattern minus '*', unescaped */
			sbuf b = {0};
			for (size_t k = 0; k + 1 < len; k++) {
				if (t->pattern[k] == '\\')
					k++;
				sb_putc(&b, t->pattern[k]);
			}
			char *v = sb_take(&b);
			sr_query *q = leaf(c, SR_Q_PREFIX, v);
			cm_free(T, v);
			return on_fields(c, field, q);
		}
		return on_fields(c, field, leaf(c, SR_Q_WILDCARD, t->pattern));
	}
	if (fuzzy) {
		sr_query *q = leaf(c, SR_Q_FUZZY, t->text);
		q->fuzziness = fuzzy_edits(fuzzy_v, fuzzy_num, c->o->fuzziness);
		return on_fields(c, field, q);
	}
	const char *s = t->text;
	if (!t->escaped && (s[0] == '>' || s[0] == '<') && s[1]) {
		bool eq = s[1] == '=';
		const char *v = s + (eq ? 2 : 1);
		if (*v) {
			sr_query *q = sr_query_new(SR_Q_RANGE);
			char **dst =
			    s[0] == '>' ? (eq ? &q->gte : &q->gt) : (eq ? &q->lte : &q->lt);
			*dst = cm_strdup(T, v);
			if (c->o->time_zone)
				q->time_zone = cm_strdup(T, c->o->time_zone);
			q->analyze_multiterm = true;
			return on_fields(c, field, q);
		}
	}
	return on_fields(c, field, leaf(c, SR_Q_MATCH, s));
}

static sr_query *
parse_term(qp *p, const char *field)
{
	tok t;
	next(p, &t);
	sr_query *q = NULL;
	switch (t.type) {
	case TK_TERM: {
		bool fuzzy = false, fnum = false;
		double fv = 0, boost = 1;
		if (peek(p) == TK_FUZZY) {
			tok f;
			next(p, &f);
			fuzzy = true;
			fnum = f.has_num;
			fv = f.num;
		}
		if (peek(p) == TK_BOOST) {
			tok b;
			next(p, &b);
			boost = b.num;
			if (!fuzzy && peek(p) == TK_FUZZY) {
				tok f;
				next(p, &f);
				fuzzy = true;
				fnum = f.has_num;
				fv = f.num;
			}
		}
		if (fuzzy && fnum && fv >= 1 && fv != floor(fv)) {
			tok_clear(&t);
			return fail(p, "Fractional edit distances are not allowed!");
		}
		q = term_query(p, field, &t, fuzzy, fnum, fv);
		apply_boost(q, boost);
		break;
	}
	case TK_QUOTED: {
		int slop = p->c->o->phrase_slop;
		if (peek(p) == TK_FUZZY) {
			tok f;
			next(p, &f);
			/* "~N" on a phrase: N clamped into int range (found by
			 * dsl_fuzz: "~2e62" was an out-of-range cast) */
			if (f.has_num)
				slop = f.num <= 0 ? 0 : f.num >= 1e6 ? 1000000 : (int)f.num;
		}
		q = leaf(p->c, SR_Q_MATCH_PHRASE, t.text);
		q->slop = slop;
		q = on_fields(p->c, field, q);
		if (peek(p) == TK_BOOST) {
			tok b;
			next(p, &b);
			apply_boost(q, b.num);
		}
		break;
	}
	case TK_REGEX:
		q = on_fields(p->c, field, leaf(p->c, SR_Q_REGEXP, t.text));
		if (peek(p) == TK_BOOST) {
			tok b;
			next(p, &b);
			apply_boost(q, b.num);
		}
		break;
	case TK_RANGE: {
		q = sr_query_new(SR_Q_RANGE);
		if (strcmp(t.lo, "*"))
			*(t.incl_lo ? &q->gte : &q->gt) = cm_strdup(T, t.lo);
		if (strcmp(t.hi, "*"))
			*(t.incl_hi ? &q->lte : &q->lt) = cm_strdup(T, t.hi);
		if (p->c->o->time_zone)
			q->time_zone = cm_strdup(T, p->c->o->time_zone);
		q->analyze_multiterm = true;
		q = on_fields(p->c, field, q);
		if (peek(p) == TK_BOOST) {
			tok b;
			next(p, &b);
			apply_boost(q, b.num);
		}
		break;
	}
	case TK_BAD:
		fail(p, t.why);
		break;
	default:
		fail(p, "Encountered an unexpected token");
	}
	tok_clear(&t);
	return q;
}

static sr_query *
parse_clause(qp *p, const char *field)
{
	char *own_field = NULL;
	tok a, b;
	lex(p, p->pos, &a);
	if (a.type == TK_TERM) {
		lex(p, a.end, &b);
		if (b.type == TK_COLON) {
			own_field = cm_strdup(T, a.wild ? a.pattern : a.text);
			p->pos = b.end;
			field = own_field;
		}
		tok_clear(&b);
	}
	tok_clear(&a);
	sr_query *q;
	if (peek(p) == TK_LPAREN) {
		tok lp;
		next(p, &lp);
		if (++p->depth > MAX_DEPTH) {
			cm_free(T, own_field);
			return fail(p, "too many nested parentheses");
		}
		q = parse_query(p, field);
		p->depth--;
		tok rp;
		next(p, &rp);
		if (q && rp.type != TK_RPAREN) {
			sr_query_free(q);
			q = fail(p, "missing ')'");
		}
		tok_clear(&rp);
		if (q && peek(p) == TK_BOOST) {
			tok bt;
			next(p, &bt);
			apply_boost(q, bt.num);
		}
	} else
		q = parse_term(p, field);
	cm_free(T, own_field);
	return q;
}

static bool
starts_clause(tk_type t)
{
	return t == TK_TERM || t == TK_QUOTED || t == TK_REGEX || t == TK_RANGE || t == TK_LPAREN ||
	       t == TK_AND || t == TK_OR || t == TK_NOT || t == TK_PLUS || t == TK_MINUS ||
	       t == TK_BAD;
}

static int
modifiers(qp *p)
{
	tk_type ty = peek(p);
	tok t;
	if (ty == TK_PLUS || ty == TK_MINUS || ty == TK_NOT) {
		next(p, &t);
		return ty == TK_PLUS ? MOD_REQ : MOD_NOT;
	}
	return MOD_NONE;
}

static sr_query *
parse_query(qp *p, const char *field)
{
	clist cl = {0};
	sr_query *first = NULL;
	int mods = modifiers(p);
	sr_query *q = parse_clause(p, field);
	if (!q)
		goto fail;
	add_clause(p, &cl, CONJ_NONE, mods, q);
	if (mods == MOD_NONE)
		first = q;
	for (;;) {
		tk_type ty = peek(p);
		if (!starts_clause(ty))
			break;
		int conj = CONJ_NONE;
		if (ty == TK_AND || ty == TK_OR) {
			tok t;
			next(p, &t);
			conj = ty == TK_AND ? CONJ_AND : CONJ_OR;
		}
		mods = modifiers(p);
		q = parse_clause(p, field);
		if (!q)
			goto fail;
		add_clause(p, &cl, conj, mods, q);
	}
	if (cl.n == 1 && first) {
		cm_free(T, cl.v);
		return first;
	}
	sr_query *b = bool_new();
	for (size_t i = 0; i < cl.n; i++)
		bool_add(p->c, b, cl.v[i].occ, cl.v[i].q);
	cm_free(T, cl.v);
	return b;
fail:
	for (size_t i = 0; i < cl.n; i++)
		sr_query_free(cl.v[i].q);
	cm_free(T, cl.v);
	return NULL;
}

static cm_err
classic_parse(qs_ctx *c, const char *text, sr_query **out)
{
	qp p = {.c = c, .s = text, .n = strlen(text)};
	sr_query *q = NULL;
	*out = NULL;
	if (peek(&p) == TK_EOF) {
		/* ES: an empty query string matches nothing */
		tok_clear(&p.la);
		*out = sr_query_new(SR_Q_MATCH_NONE);
		return CM_OK;
	}
	q = parse_query(&p, NULL);
	if (q && peek(&p) != TK_EOF) {
		sr_query_free(q);
		q = fail(&p, "unexpected trailing input");
	}
	if (p.la_ok)
		tok_clear(&p.la);
	if (c->limit_hit) {
		sr_query_free(q);
		return cm_error_set_type(c->err, CM_ELIMIT, "too_many_clauses",
		                         "maxClauseCount is set to %d", MAX_CLAUSES);
	}
	if (!q)
		return cm_error_set_type(c->err, CM_EPARSE, "query_shard_exception",
		                         "Failed to parse query [%s]", text);
	*out = q;
	return CM_OK;
}

/* ---- simple_query_string (Lucene SimpleQueryParser) ---- */

enum {
	F_AND = 1 << 0,
	F_NOT = 1 << 1,
	F_OR = 1 << 2,
	F_PREFIX = 1 << 3,
	F_PHRASE = 1 << 4,
	F_PRECEDENCE = 1 << 5,
	F_ESCAPE = 1 << 6,
	F_WHITESPACE = 1 << 7,
	F_FUZZY = 1 << 8,
	F_NEAR = 1 << 9,
	F_ALL = (1 << 10) - 1,
};

static cm_err
simple_flags(const char *s, unsigned *out, cm_error *err)
{
	static const struct {
		const char *name;
		unsigned bit;
	} names[] = {{"ALL", F_ALL},       {"NONE", 0},
	             {"AND", F_AND},       {"NOT", F_NOT},
	             {"OR", F_OR},         {"PREFIX", F_PREFIX},
	             {"PHRASE", F_PHRASE}, {"PRECEDENCE", F_PRECEDENCE},
	             {"ESCAPE", F_ESCAPE}, {"WHITESPACE", F_WHITESPACE},
	             {"FUZZY", F_FUZZY},   {"NEAR", F_NEAR},
	             {"SLOP", F_NEAR}};
	if (!s) {
		*out = F_ALL;
		return CM_OK;
	}
	char *end;
	long v = strtol(s, &end, 10);
	if (end != s && *end == '\0') {
		*out = v == -1 ? F_ALL : (unsigned)v & F_ALL;
		return CM_OK;
	}
	*out = 0;
	const char *p = s;
	while (*p) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		size_t i;
		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strlen(names[i].name) == len && !strncasecmp(names[i].name, p, len))
				break;
		if (i == sizeof(names) / sizeof(names[0]))
			return cm_error_set(err, CM_EINVAL,
			                    "Unknown simple_query_string flag [%.*s]", (int)len, p);
		if (names[i].bit == 0 && len == 4) /* NONE */
			*out = 0;
		else
			*out |= names[i].bit;
		p += len;
		if (*p == '|')
			p++;
	}
	return CM_OK;
}

typedef struct sstate {
	const char *data;
	size_t index, length;
	sr_query *top;
	int cur_op, prev_op; /* -1 = none */
	int not ;
} sstate;

typedef struct sp {
	qs_ctx *c;
	unsigned flags;
	char *buf; /* scratch as long as the input */
	int depth;
} sp;

static sr_query *
s_term_query(sp *p, const char *text)
{
	return on_fields(p->c, NULL, leaf(p->c, SR_Q_MATCH, text));
}

/* Lucene SimpleQueryParser.buildQueryTree. */
static void
build_tree(sp *p, sstate *st, sr_query *branch)
{
	if (!branch)
		return;
	if (st->not % 2 == 1) {
		sr_query *nq = bool_new();
		bool_add(p->c, nq, OCC_MUST_NOT, branch);
		bool_add(p->c, nq, OCC_SHOULD, sr_query_new(SR_Q_MATCH_ALL));
		branch = nq;
	}
	if (!st->top) {
		st->top = branch;
	} else {
		if (st->cur_op < 0)
			st->cur_op = p->c->o->default_and ? OCC_MUST : OCC_SHOULD;
		if (st->prev_op != st->cur_op) {
			sr_query *b = bool_new();
			bool_add(p->c, b, st->cur_op, st->top);
			st->top = b;
		}
		bool_add(p->c, st->top, st->cur_op, branch);
		st->prev_op = st->cur_op;
	}
	st->cur_op = -1;
}

static bool
token_finished(sp *p, const sstate *st)
{
	char ch = st->data[st->index];
	unsigned f = p->flags;
	return (ch == '"' && (f & F_PHRASE)) || (ch == '|' && (f & F_OR)) ||
	       (ch == '+' && (f & F_AND)) || (ch == '(' && (f & F_PRECEDENCE)) ||
	       (ch == ')' && (f & F_PRECEDENCE)) ||
	       ((ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') && (f & F_WHITESPACE));
}

static int
parse_fuzziness(sp *p, sstate *st)
{
	char num[16];
	size_t len = 0;
	bool too_long = false;
	if (st->data[st->index] != '~')
		return 0;
	while (st->index < st->length) {
		st->index++;
		if (st->index < st->length) {
			if (token_finished(p, st))
				break;
			if (len < sizeof(num) - 1)
				num[len++] = st->data[st->index];
			else
				too_long = true;
		}
	}
	num[len] = '\0';
	if (len == 0)
		return 2; /* "~" alone: automatic, two edits */
	char *end;
	long v = strtol(num, &end, 10);
	if (too_long || *end != '\0' || end == num)
		return 0; /* Lucene swallows a bad number */
	return v < 0 ? 0 : v > 1000 ? 1000 : (int)v;
}

static void s_parse_sub(sp *p, sstate *st);

static void
consume_sub(sp *p, sstate *st)
{
	size_t start = ++st->index;
	int prec = 1;
	bool esc = false;
	while (st->index < st->length) {
		if (!esc) {
			char ch = st->data[st->index];
			if (ch == '\\' && (p->flags & F_ESCAPE)) {
				esc = true;
				st->index++;
				continue;
			} else if (ch == '(')
				prec++;
			else if (ch == ')') {
				if (--prec == 0)
					break;
			}
		}
		esc = false;
		st->index++;
	}
	if (st->index == st->length) {
		st->index = start; /* no closing paren: the '(' is ignored */
	} else if (st->index == start) {
		st->cur_op = -1;
		st->index++;
	} else {
		sstate sub = {.data = st->data,
		              .index = start,
		              .length = st->index,
		              .cur_op = -1,
		              .prev_op = -1};
		if (p->depth < MAX_DEPTH) {
			p->depth++;
			s_parse_sub(p, &sub);
			p->depth--;
		} else {
			/* too deep: the group's text is taken as one term */
			memcpy(p->buf, st->data + start, st->index - start);
			p->buf[st->index - start] = '\0';
			sub.top = s_term_query(p, p->buf);
		}
		build_tree(p, st, sub.top);
		st->index++;
	}
}

static void
consume_phrase(sp *p, sstate *st)
{
	size_t start = ++st->index, copied = 0;
	bool esc = false, has_slop = false;
	while (st->index < st->length) {
		if (!esc) {
			char ch = st->data[st->index];
			if (ch == '\\' && (p->flags & F_ESCAPE)) {
				esc = true;
				st->index++;
				continue;
			} else if (ch == '"') {
				if (st->length > st->index + 1 && st->data[st->index + 1] == '~' &&
				    (p->flags & F_NEAR)) {
					st->index++;
					if (st->length > st->index + 1)
						has_slop = true;
				}
				break;
			}
		}
		esc = false;
		p->buf[copied++] = st->data[st->index++];
	}
	if (st->index == st->length) {
		st->index = start; /* no closing quote: the '"' is ignored */
	} else if (st->index == start) {
		st->cur_op = -1;
		st->index++;
	} else {
		p->buf[copied] = '\0';
		int slop = has_slop ? parse_fuzziness(p, st) : 0;
		sr_query *q = leaf(p->c, SR_Q_MATCH_PHRASE, p->buf);
		q->slop = slop;
		build_tree(p, st, on_fields(p->c, NULL, q));
		st->index++;
	}
}

static void
consume_term(sp *p, sstate *st)
{
	size_t copied = 0;
	bool esc = false, prefix = false, fuzzy = false;
	while (st->index < st->length) {
		if (!esc) {
			char ch = st->data[st->index];
			if (ch == '\\' && (p->flags & F_ESCAPE)) {
				esc = true;
				prefix = false;
				st->index++;
				continue;
			} else if (token_finished(p, st)) {
				break;
			} else if (copied > 0 && ch == '~' && (p->flags & F_FUZZY)) {
				fuzzy = true;
				break;
			}
			prefix = copied > 0 && ch == '*' && (p->flags & F_PREFIX);
		}
		esc = false;
		p->buf[copied++] = st->data[st->index++];
	}
	if (copied == 0)
		return;
	sr_query *q;
	if (fuzzy && (p->flags & F_FUZZY)) {
		p->buf[copied] = '\0';
		int edits = parse_fuzziness(p, st);
		if (edits == 0)
			q = s_term_query(p, p->buf);
		else {
			q = leaf(p->c, SR_Q_FUZZY, p->buf);
			q->fuzziness = fuzzy_edits(edits, true, NULL);
			q = on_fields(p->c, NULL, q);
		}
	} else if (prefix) {
		p->buf[copied - 1] = '\0';
		q = on_fields(p->c, NULL, leaf(p->c, SR_Q_PREFIX, p->buf));
	} else {
		p->buf[copied] = '\0';
		q = s_term_query(p, p->buf);
	}
	build_tree(p, st, q);
}

static void
s_parse_sub(sp *p, sstate *st)
{
	while (st->index < st->length) {
		char ch = st->data[st->index];
		if (ch == '(' && (p->flags & F_PRECEDENCE)) {
			consume_sub(p, st);
		} else if (ch == ')' && (p->flags & F_PRECEDENCE)) {
			st->index++; /* extraneous */
		} else if (ch == '"' && (p->flags & F_PHRASE)) {
			consume_phrase(p, st);
		} else if (ch == '+' && (p->flags & F_AND)) {
			if (st->cur_op < 0 && st->top)
				st->cur_op = OCC_MUST;
			st->index++;
		} else if (ch == '|' && (p->flags & F_OR)) {
			if (st->cur_op < 0 && st->top)
				st->cur_op = OCC_SHOULD;
			st->index++;
		} else if (ch == '-' && (p->flags & F_NOT)) {
			st->not ++;
			st->index++;
			continue; /* the not applies to what follows */
		} else if ((ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') &&
		           (p->flags & F_WHITESPACE)) {
			st->index++;
		} else {
			consume_term(p, st);
		}
		st->not = 0;
	}
}

static cm_err
simple_parse(qs_ctx *c, const char *text, unsigned flags, sr_query **out)
{
	size_t n = strlen(text);
	sp p = {.c = c, .flags = flags, .buf = cm_malloc(T, n + 1)};
	sstate st = {.data = text, .length = n, .cur_op = -1, .prev_op = -1};
	s_parse_sub(&p, &st);
	cm_free(T, p.buf);
	if (c->limit_hit) {
		sr_query_free(st.top);
		*out = NULL;
		return cm_error_set_type(c->err, CM_ELIMIT, "too_many_clauses",
		                         "maxClauseCount is set to %d", MAX_CLAUSES);
	}
	*out = st.top ? st.top : sr_query_new(SR_Q_MATCH_NONE);
	return CM_OK;
}

/* ---- public entry points ---- */

cm_err
sr_query_string_parse(const char *text, const char *default_field, bool default_and, sr_query **out,
                      cm_error *err)
{
	char *f = (char *)(default_field ? default_field : "*");
	qs_opts o = {.fields = &f,
	             .nfields = 1,
	             .default_and = default_and,
	             .fuzziness = "AUTO",
	             .max_expansions = 50,
	             .transpositions = true,
	             .max_det_states = 10000};
	qs_ctx c = {.o = &o, .err = err};
	return classic_parse(&c, text ? text : "", out);
}

cm_err
sr_query_string_expand(const sr_query *q, sr_query **out, cm_error *err)
{
	*out = NULL;
	if (q->kind != SR_Q_QUERY_STRING && q->kind != SR_Q_SIMPLE_QUERY_STRING) {
		*out = sr_query_clone(q);
		return CM_OK;
	}
	char *df = (char *)(q->default_field ? q->default_field : "*");
	qs_opts o = {
	    .fields = q->nvalues ? q->values : &df,
	    .boosts = q->nvalues ? q->field_boosts : NULL,
	    .nfields = q->nvalues ? q->nvalues : 1,
	    .default_and = q->default_op_and,
	    .fuzziness = q->fuzziness ? q->fuzziness : "AUTO",
	    .prefix_length = q->prefix_length,
	    .max_expansions = q->max_expansions,
	    .transpositions = q->transpositions,
	    .phrase_slop = q->slop,
	    .analyzer = q->analyzer,
	    .time_zone = q->time_zone,
	    .tie_breaker = q->tie_breaker,
	    .lenient = q->lenient,
	    .max_det_states = q->max_determinized_states,
	};
	qs_ctx c = {.o = &o, .err = err};
	sr_query *t;
	cm_err rc;
	if (q->kind == SR_Q_SIMPLE_QUERY_STRING) {
		unsigned flags;
		if ((rc = simple_flags(q->flags, &flags, err)))
			return rc;
		rc = simple_parse(&c, q->value ? q->value : "", flags, &t);
	} else
		rc = classic_parse(&c, q->value ? q->value : "", &t);
	if (rc)
		return rc;
	t->boost *= q->boost;
	if (q->name && !t->name)
		t->name = cm_strdup(T, q->name);
	if (q->minimum_should_match && t->kind == SR_Q_BOOL && !t->minimum_should_match)
		t->minimum_should_match = cm_strdup(T, q->minimum_should_match);
	*out = t;
	return CM_OK;
}
