/* Automata for multi-term queries: Lucene's regexp syntax (a subset) and
 * wildcards parse to a small syntax tree, then a Thompson NFA over code
 * point intervals, then a DFA by subset construction over the alphabet
 * classes the intervals induce, capped like Lucene's determinization.
 * Also the bounded Damerau edit distance for fuzzy queries. */
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "exec.h"

#define MAX_CP 0x10FFFFu
#define MAX_NFA_STATES 100000
#define MAX_REPEAT 1000
#define MAX_PATTERN 4096
/* Subset construction's work budget, in NFA states and edges visited (the
 * set of each DFA state scanned per alphabet class, plus the epsilon
 * closures). The state cap alone let patterns under it run for a minute
 * ('.{0,1000}(.{0,1000}){0,30}': 18.6 s of CPU, '(.{0,1000}){0,90}': 69 s),
 * so the work is bounded too: ~10-20 ns a unit here at -O2, ~0.3 s of CPU
 * before such a pattern is refused (search/multiterm_test.c);
 * '.{0,1000}.{0,1000}.{0,1000}' (3001 states) needs 21M and compiles. */
#define MAX_DET_WORK 25000000ull
/* The DFA's transition table (states x alphabet classes, 4 bytes each):
 * 16 MB at most. 10000 states over 400 classes fit. */
#define MAX_DET_TRANSITIONS ((size_t)4 << 20)

/* ---- UTF-8 ---- */

/* Decodes one code point; invalid bytes decode as themselves (Latin-1). */
static uint32_t
utf8_next(const uint8_t *s, size_t n, size_t *i)
{
	uint8_t c = s[*i];
	uint32_t cp;
	int extra;
	if (c < 0x80) {
		(*i)++;
		return c;
	} else if ((c & 0xE0) == 0xC0) {
		cp = c & 0x1F, extra = 1;
	} else if ((c & 0xF0) == 0xE0) {
		cp = c & 0x0F, extra = 2;
	} else if ((c & 0xF8) == 0xF0) {
		cp = c & 0x07, extra = 3;
	} else {
		(*i)++;
		return c;
	}
	if (*i + extra >= n) {
		(*i)++;
		return c;
	}
	for (int k = 1; k <= extra; k++) {
		if ((s[*i + k] & 0xC0) != 0x80) {
			(*i)++;
			return c;
		}
		cp = (cp << 6) | (s[*i + k] & 0x3F);
	}
	*i += extra + 1;
	return cp;
}

static size_t
utf8_put(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	} else if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	} else if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

size_t
sr_utf8_len(const uint8_t *s, size_t n)
{
	size_t i = 0, k = 0;
	while (i < n) {
		utf8_next(s, n, &i);
		k++;
	}
	return k;
}

/* ---- syntax tree ---- */

typedef enum { A_SET, A_CAT, A_ALT, A_STAR, A_PLUS, A_OPT, A_REP, A_EPS, A_NONE } ast_kind;

typedef struct ivl {
	uint32_t lo, hi;
} ivl;

typedef struct ast {
	ast_kind kind;
	struct ast *a, *b;
	int min, max; /* A_REP; max -1 = unbounded */
	ivl *iv;
	size_t niv;
} ast;

typedef struct parser {
	const uint8_t *s;
	size_t n, i;
	bool ci;
	cm_error *err;
	bool failed;
	size_t nodes;
} parser;

static ast *
ast_new(parser *p, ast_kind k)
{
	if (++p->nodes > 100000) {
		p->failed = true;
		cm_error_set(p->err, CM_ELIMIT, "regexp too complex");
	}
	ast *a = cm_calloc(CM_MEM_SEARCH, 1, sizeof *a);
	a->kind = k;
	return a;
}

static void
ast_free(ast *a)
{
	if (!a)
		return;
	ast_free(a->a);
	ast_free(a->b);
	cm_free(CM_MEM_SEARCH, a->iv);
	cm_free(CM_MEM_SEARCH, a);
}

static void
set_add(ast *a, uint32_t lo, uint32_t hi)
{
	a->iv = cm_realloc(CM_MEM_SEARCH, a->iv, (a->niv + 1) * sizeof(ivl));
	a->iv[a->niv].lo = lo;
	a->iv[a->niv].hi = hi;
	a->niv++;
}

static int
ivl_cmp(const void *x, const void *y)
{
	const ivl *a = x, *b = y;
	return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Sorts and merges intervals; adds ASCII case variants when asked. */
static void
set_normalize(ast *a, bool ci)
{
	if (ci) {
		size_t n = a->niv;
		for (size_t k = 0; k < n; k++) {
			uint32_t lo = a->iv[k].lo, hi = a->iv[k].hi;
			uint32_t l1 = lo > 'a' ? lo : 'a', h1 = hi < 'z' ? hi : 'z';
			if (l1 <= h1)
				set_add(a, l1 - 32, h1 - 32);
			uint32_t l2 = lo > 'A' ? lo : 'A', h2 = hi < 'Z' ? hi : 'Z';
			if (l2 <= h2)
				set_add(a, l2 + 32, h2 + 32);
		}
	}
	qsort(a->iv, a->niv, sizeof(ivl), ivl_cmp);
	size_t w = 0;
	for (size_t k = 0; k < a->niv; k++) {
		if (w && a->iv[k].lo <= a->iv[w - 1].hi + 1) {
			if (a->iv[k].hi > a->iv[w - 1].hi)
				a->iv[w - 1].hi = a->iv[k].hi;
		} else {
			a->iv[w++] = a->iv[k];
		}
	}
	a->niv = w;
}

static void
set_negate(ast *a)
{
	ivl *old = a->iv;
	size_t n = a->niv;
	a->iv = NULL;
	a->niv = 0;
	uint32_t next = 0;
	for (size_t k = 0; k < n; k++) {
		if (old[k].lo > next)
			set_add(a, next, old[k].lo - 1);
		next = old[k].hi + 1;
	}
	if (next <= MAX_CP)
		set_add(a, next, MAX_CP);
	cm_free(CM_MEM_SEARCH, old);
}

static ast *
lit(parser *p, uint32_t cp)
{
	ast *a = ast_new(p, A_SET);
	set_add(a, cp, cp);
	set_normalize(a, p->ci);
	return a;
}

static ast *
any_char(parser *p)
{
	ast *a = ast_new(p, A_SET);
	set_add(a, 0, MAX_CP);
	return a;
}

static ast *
cat(parser *p, ast *x, ast *y)
{
	if (!x)
		return y;
	if (!y)
		return x;
	ast *a = ast_new(p, A_CAT);
	a->a = x;
	a->b = y;
	return a;
}

static bool
more(parser *p)
{
	return !p->failed && p->i < p->n;
}
static bool
peek(parser *p, char c)
{
	return more(p) && p->s[p->i] == (uint8_t)c;
}
static uint32_t
take(parser *p)
{
	return utf8_next(p->s, p->n, &p->i);
}

static ast *
fail(parser *p, const char *msg)
{
	if (!p->failed)
		cm_error_set(p->err, CM_EINVAL, "%s at position %zu", msg, p->i);
	p->failed = true;
	return NULL;
}

static ast *parse_alt(parser *p);

static ast *
parse_class(parser *p)
{
	/* after '[' */
	ast *a = ast_new(p, A_SET);
	bool neg = false;
	if (peek(p, '^')) {
		neg = true;
		p->i++;
	}
	bool first = true;
	while (more(p) && (first || !peek(p, ']'))) {
		first = false;
		uint32_t c = take(p);
		if (c == '\\') {
			if (!more(p))
				break;
			c = take(p);
		}
		uint32_t hi = c;
		if (peek(p, '-') && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
			p->i++;
			hi = take(p);
			if (hi == '\\' && more(p))
				hi = take(p);
			if (hi < c) {
				ast_free(a);
				return fail(p, "invalid character class range");
			}
		}
		set_add(a, c, hi);
	}
	if (!peek(p, ']')) {
		ast_free(a);
		return fail(p, "expected ']'");
	}
	p->i++;
	set_normalize(a, p->ci);
	if (neg)
		set_negate(a);
	if (!a->niv)
		a->kind = A_NONE;
	return a;
}

static ast *
parse_simple(parser *p)
{
	uint32_t c = take(p);
	switch (c) {
	case '.':
		return any_char(p);
	case '@': {
		ast *s = ast_new(p, A_STAR);
		s->a = any_char(p);
		return s;
	}
	case '#':
		return ast_new(p, A_NONE);
	case '[':
		return parse_class(p);
	case '"': {
		ast *r = ast_new(p, A_EPS);
		while (more(p) && !peek(p, '"'))
			r = cat(p, r, lit(p, take(p)));
		if (!peek(p, '"')) {
			ast_free(r);
			return fail(p, "expected '\"'");
		}
		p->i++;
		return r;
	}
	case '(': {
		if (peek(p, ')')) {
			p->i++;
			return ast_new(p, A_EPS);
		}
		ast *r = parse_alt(p);
		if (!r)
			return NULL;
		if (!peek(p, ')')) {
			ast_free(r);
			return fail(p, "expected ')'");
		}
		p->i++;
		return r;
	}
	case '~':
	case '&':
	case '<':
		p->i--;
		return fail(p, "unsupported regexp operator");
	case '\\':
		if (!more(p))
			return fail(p, "dangling escape");
		return lit(p, take(p));
	case '*':
	case '+':
	case '?':
	case '{':
	case ')':
	case '|':
		p->i--;
		return fail(p, "unexpected character");
	default:
		return lit(p, c);
	}
}

static int
parse_int(parser *p)
{
	int v = -1;
	while (more(p) && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
		v = (v < 0 ? 0 : v) * 10 + (p->s[p->i] - '0');
		if (v > MAX_REPEAT * 10)
			v = MAX_REPEAT * 10;
		p->i++;
	}
	return v;
}

static ast *
parse_repeat(parser *p)
{
	ast *a = parse_simple(p);
	while (a && more(p)) {
		uint8_t c = p->s[p->i];
		ast_kind k;
		if (c == '*')
			k = A_STAR;
		else if (c == '+')
			k = A_PLUS;
		else if (c == '?')
			k = A_OPT;
		else if (c == '{')
			k = A_REP;
		else
			break;
		p->i++;
		ast *r = ast_new(p, k);
		r->a = a;
		a = r;
		if (k == A_REP) {
			int mn = parse_int(p), mx = mn;
			if (peek(p, ',')) {
				p->i++;
				mx = parse_int(p);
			}
			if (mn < 0 || !peek(p, '}') || (mx >= 0 && mx < mn) || mn > MAX_REPEAT ||
			    mx > MAX_REPEAT) {
				ast_free(a);
				return fail(p, "invalid repetition");
			}
			p->i++;
			r->min = mn;
			r->max = mx;
		}
	}
	return a;
}

static ast *
parse_cat(parser *p)
{
	ast *r = NULL;
	while (more(p) && !peek(p, '|') && !peek(p, ')')) {
		ast *x = parse_repeat(p);
		if (!x) {
			ast_free(r);
			return NULL;
		}
		r = cat(p, r, x);
	}
	return r ? r : ast_new(p, A_EPS);
}

static ast *
parse_alt(parser *p)
{
	ast *r = parse_cat(p);
	while (r && peek(p, '|')) {
		p->i++;
		ast *y = parse_cat(p);
		if (!y) {
			ast_free(r);
			return NULL;
		}
		ast *a = ast_new(p, A_ALT);
		a->a = r;
		a->b = y;
		r = a;
	}
	return r;
}

/* ---- NFA ---- */

typedef struct edge {
	int to;
	uint32_t lo, hi; /* lo > hi: epsilon */
	int next;        /* next edge of the same state */
} edge;

typedef struct nfa {
	int *first; /* per state: first edge index or -1 */
	int nstates, cap_states;
	edge *e;
	int ne, cap_e;
	bool overflow;
} nfa;

static int
nfa_state(nfa *m)
{
	if (m->nstates >= MAX_NFA_STATES) {
		m->overflow = true;
		return 0;
	}
	if (m->nstates == m->cap_states) {
		m->cap_states = m->cap_states ? m->cap_states * 2 : 64;
		m->first = cm_realloc(CM_MEM_SEARCH, m->first, m->cap_states * sizeof(int));
	}
	m->first[m->nstates] = -1;
	return m->nstates++;
}

static void
nfa_edge(nfa *m, int from, int to, uint32_t lo, uint32_t hi)
{
	if (m->overflow)
		return;
	if (m->ne == m->cap_e) {
		m->cap_e = m->cap_e ? m->cap_e * 2 : 128;
		m->e = cm_realloc(CM_MEM_SEARCH, m->e, m->cap_e * sizeof(edge));
	}
	m->e[m->ne] = (edge){to, lo, hi, m->first[from]};
	m->first[from] = m->ne++;
}
#define EPS(m, a, b) nfa_edge(m, a, b, 1, 0)

/* Builds a's fragment from state s; returns its end state. */
static int
nfa_build(nfa *m, const ast *a, int s)
{
	if (m->overflow)
		return s;
	switch (a->kind) {
	case A_SET: {
		int t = nfa_state(m);
		for (size_t k = 0; k < a->niv; k++)
			nfa_edge(m, s, t, a->iv[k].lo, a->iv[k].hi);
		return t;
	}
	case A_NONE:
		return nfa_state(m); /* unreachable end */
	case A_EPS:
		return s;
	case A_CAT:
		return nfa_build(m, a->b, nfa_build(m, a->a, s));
	case A_ALT: {
		int t = nfa_state(m), s1 = nfa_state(m), s2 = nfa_state(m);
		EPS(m, s, s1);
		EPS(m, s, s2);
		EPS(m, nfa_build(m, a->a, s1), t);
		EPS(m, nfa_build(m, a->b, s2), t);
		return t;
	}
	case A_STAR:
	case A_PLUS:
	case A_OPT: {
		int in = nfa_state(m), t = nfa_state(m);
		EPS(m, s, in);
		int e = nfa_build(m, a->a, in);
		EPS(m, e, t);
		if (a->kind != A_PLUS)
			EPS(m, s, t);
		if (a->kind != A_OPT)
			EPS(m, e, in);
		return t;
	}
	case A_REP: {
		int cur = s;
		for (int k = 0; k < a->min && !m->overflow; k++)
			cur = nfa_build(m, a->a, cur);
		if (a->max < 0) {
			ast star = {.kind = A_STAR, .a = a->a};
			return nfa_build(m, &star, cur);
		}
		int t = nfa_state(m);
		EPS(m, cur, t);
		for (int k = a->min; k < a->max && !m->overflow; k++) {
			cur = nfa_build(m, a->a, cur);
			EPS(m, cur, t);
		}
		return t;
	}
	}
	return s;
}

/* ---- DFA ---- */

struct sr_dfa {
	uint32_t *bounds; /* class k = [bounds[k], bounds[k+1]) */
	int nclass;
	int nstates;
	int *delta; /* nstates * nclass, -1 dead */
	bool *accept;
	bool *live;       /* an accepting state is reachable */
	int aclass[128];  /* the class of each ASCII code point */
	char *prefix;
	size_t prefix_len;
	char *suffix; /* sr_dfa_suffix; NULL when none */
	size_t suffix_len;
};

typedef struct sset {
	int *v;
	int n;
} sset;

static int
int_cmp(const void *x, const void *y)
{
	int a = *(const int *)x, b = *(const int *)y;
	return (a > b) - (a < b);
}

/* Returns the states visited, for the work budget. */
static uint64_t
closure(const nfa *m, int *stack, uint8_t *mark, sset *out)
{
	int sp = 0;
	uint64_t visits = 0;
	for (int k = 0; k < out->n; k++) {
		mark[out->v[k]] = 1;
		stack[sp++] = out->v[k];
	}
	while (sp) {
		int s = stack[--sp];
		visits++;
		for (int e = m->first[s]; e >= 0; e = m->e[e].next) {
			visits++;
			if (m->e[e].lo > m->e[e].hi && !mark[m->e[e].to]) {
				mark[m->e[e].to] = 1;
				out->v[out->n++] = m->e[e].to;
				stack[sp++] = m->e[e].to;
			}
		}
	}
	for (int k = 0; k < out->n; k++)
		mark[out->v[k]] = 0;
	qsort(out->v, out->n, sizeof(int), int_cmp);
	return visits + (uint64_t)out->n;
}

static int
u32_cmp(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return (a > b) - (a < b);
}

/* open-addressing map from state sets to DFA ids */
typedef struct smap {
	sset *keys;
	int *ids;
	size_t cap;
} smap;

static uint64_t
sset_hash(const sset *s)
{
	uint64_t h = 1469598103934665603ull;
	for (int k = 0; k < s->n; k++)
		h = (h ^ (uint64_t)s->v[k]) * 1099511628211ull;
	return h ^ (uint64_t)s->n;
}

static int
smap_find(const smap *m, const sset *s, size_t *slot)
{
	size_t i = sset_hash(s) & (m->cap - 1);
	while (m->ids[i] >= 0) {
		if (m->keys[i].n == s->n && !memcmp(m->keys[i].v, s->v, s->n * sizeof(int))) {
			*slot = i;
			return m->ids[i];
		}
		i = (i + 1) & (m->cap - 1);
	}
	*slot = i;
	return -1;
}

/* Lucene's error for an automaton past its determinization limits; a 400,
 * as Elasticsearch answers it. */
static cm_err
too_complex(cm_error *err, int max_states)
{
	return cm_error_set_type(err, CM_ELIMIT, "too_complex_to_determinize_exception",
	                         "Determinizing automaton would result in more than %d states.",
	                         max_states);
}

/* The same past the work or transition-table budget. */
static cm_err
too_much_work(cm_error *err)
{
	return cm_error_set_type(err, CM_ELIMIT, "too_complex_to_determinize_exception",
	                         "Determinizing automaton would take more than %llu steps or %zu "
	                         "transitions; simplify the pattern",
	                         (unsigned long long)MAX_DET_WORK, MAX_DET_TRANSITIONS);
}

static cm_err
determinize(const nfa *m, int start, int accept, int max_states, sr_dfa *d, cm_error *err)
{
	cm_err rc = CM_OK;
	/* alphabet classes */
	size_t nb = 0;
	uint32_t *b = cm_malloc(CM_MEM_SEARCH, (2 * (size_t)m->ne + 2) * sizeof(uint32_t));
	b[nb++] = 0;
	for (int e = 0; e < m->ne; e++) {
		if (m->e[e].lo > m->e[e].hi)
			continue;
		b[nb++] = m->e[e].lo;
		if (m->e[e].hi < MAX_CP)
			b[nb++] = m->e[e].hi + 1;
	}
	qsort(b, nb, sizeof(uint32_t), u32_cmp);
	size_t w = 0;
	for (size_t k = 0; k < nb; k++)
		if (!w || b[k] != b[w - 1])
			b[w++] = b[k];
	d->bounds = b;
	d->nclass = (int)w;

	int *stack = cm_malloc(CM_MEM_SEARCH, (m->nstates + 1) * sizeof(int));
	uint8_t *mark = cm_calloc(CM_MEM_SEARCH, m->nstates + 1, 1);
	int *tmp = cm_malloc(CM_MEM_SEARCH, (m->nstates + 1) * sizeof(int));
	smap map = {0};
	map.cap = 1024;
	map.keys = cm_calloc(CM_MEM_SEARCH, map.cap, sizeof(sset));
	map.ids = cm_malloc(CM_MEM_SEARCH, map.cap * sizeof(int));
	memset(map.ids, 0xff, map.cap * sizeof(int));
	sset *states = NULL;
	size_t cap_states = 0;
	int nst = 0;
	size_t cap_delta = 0;
	uint64_t work = 0;

	sset s0 = {cm_malloc(CM_MEM_SEARCH, (m->nstates + 1) * sizeof(int)), 1};
	s0.v[0] = start;
	closure(m, stack, mark, &s0);
	size_t slot;
	smap_find(&map, &s0, &slot);
	map.keys[slot] = s0;
	map.ids[slot] = 0;
	cap_states = 64;
	states = cm_malloc(CM_MEM_SEARCH, cap_states * sizeof(sset));
	states[nst++] = s0;

	for (int cur = 0; cur < nst; cur++) {
		size_t need = (size_t)(cur + 1) * d->nclass;
		if (need > MAX_DET_TRANSITIONS) {
			rc = too_much_work(err);
			goto out;
		}
		if (need > cap_delta) {
			cap_delta = cap_delta ? cap_delta * 2 : 64 * (size_t)d->nclass;
			if (cap_delta > MAX_DET_TRANSITIONS)
				cap_delta = MAX_DET_TRANSITIONS;
			if (cap_delta < need)
				cap_delta = need;
			d->delta = cm_realloc(CM_MEM_SEARCH, d->delta, cap_delta * sizeof(int));
		}
		for (int c = 0; c < d->nclass; c++) {
			uint32_t rep = b[c];
			sset nx = {tmp, 0};
			sset S = states[cur];
			if (work > MAX_DET_WORK) {
				rc = too_much_work(err);
				goto out;
			}
			for (int k = 0; k < S.n; k++) {
				work++;
				for (int e = m->first[S.v[k]]; e >= 0; e = m->e[e].next) {
					const edge *ed = &m->e[e];
					work++;
					if (ed->lo <= ed->hi && ed->lo <= rep && rep <= ed->hi && !mark[ed->to]) {
						mark[ed->to] = 1;
						nx.v[nx.n++] = ed->to;
					}
				}
			}
			for (int k = 0; k < nx.n; k++)
				mark[nx.v[k]] = 0;
			if (!nx.n) {
				d->delta[(size_t)cur * d->nclass + c] = -1;
				continue;
			}
			work += closure(m, stack, mark, &nx);
			int id = smap_find(&map, &nx, &slot);
			if (id < 0) {
				if (nst >= max_states) {
					rc = too_complex(err, max_states);
					goto out;
				}
				sset copy = {cm_malloc(CM_MEM_SEARCH, nx.n * sizeof(int)), nx.n};
				memcpy(copy.v, nx.v, nx.n * sizeof(int));
				if ((size_t)nst == cap_states) {
					cap_states *= 2;
					states = cm_realloc(CM_MEM_SEARCH, states, cap_states * sizeof(sset));
				}
				id = nst;
				states[nst++] = copy;
				map.keys[slot] = copy;
				map.ids[slot] = id;
				if ((size_t)nst * 2 > map.cap) {
					smap nm = {cm_calloc(CM_MEM_SEARCH, map.cap * 2, sizeof(sset)),
					           cm_malloc(CM_MEM_SEARCH, map.cap * 2 * sizeof(int)), map.cap * 2};
					memset(nm.ids, 0xff, nm.cap * sizeof(int));
					for (size_t k = 0; k < map.cap; k++) {
						if (map.ids[k] < 0)
							continue;
						size_t sl;
						smap_find(&nm, &map.keys[k], &sl);
						nm.keys[sl] = map.keys[k];
						nm.ids[sl] = map.ids[k];
					}
					cm_free(CM_MEM_SEARCH, map.keys);
					cm_free(CM_MEM_SEARCH, map.ids);
					map = nm;
				}
			}
			d->delta[(size_t)cur * d->nclass + c] = id;
		}
	}
	d->nstates = nst;
	d->accept = cm_calloc(CM_MEM_SEARCH, nst ? nst : 1, sizeof(bool));
	for (int k = 0; k < nst; k++) {
		const sset *S = &states[k];
		d->accept[k] = bsearch(&accept, S->v, S->n, sizeof(int), int_cmp) != NULL;
	}
out:
	for (int k = 0; k < nst; k++)
		cm_free(CM_MEM_SEARCH, states[k].v);
	cm_free(CM_MEM_SEARCH, states);
	cm_free(CM_MEM_SEARCH, map.keys);
	cm_free(CM_MEM_SEARCH, map.ids);
	cm_free(CM_MEM_SEARCH, stack);
	cm_free(CM_MEM_SEARCH, mark);
	cm_free(CM_MEM_SEARCH, tmp);
	return rc;
}

static int
dfa_class(const sr_dfa *d, uint32_t cp)
{
	int lo = 0, hi = d->nclass - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (d->bounds[mid] <= cp)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

static inline int
dfa_step(const sr_dfa *d, int st, uint32_t cp)
{
	int c = cp < 128 ? d->aclass[cp] : dfa_class(d, cp);
	return d->delta[(size_t)st * d->nclass + c];
}

bool
sr_dfa_match(const sr_dfa *d, const uint8_t *s, size_t n)
{
	int st = 0;
	size_t i = 0;
	while (i < n) {
		uint32_t cp = s[i] < 0x80 ? s[i++] : utf8_next(s, n, &i);
		st = dfa_step(d, st, cp);
		if (st < 0)
			return false;
	}
	return d->accept[st];
}

const char *
sr_dfa_prefix(const sr_dfa *d, size_t *len)
{
	*len = d->prefix_len;
	return d->prefix;
}

const char *
sr_dfa_suffix(const sr_dfa *d, size_t *len)
{
	*len = d->suffix_len;
	return d->suffix;
}

void
sr_dfa_free(sr_dfa *d)
{
	if (!d)
		return;
	cm_free(CM_MEM_SEARCH, d->bounds);
	cm_free(CM_MEM_SEARCH, d->delta);
	cm_free(CM_MEM_SEARCH, d->accept);
	cm_free(CM_MEM_SEARCH, d->live);
	cm_free(CM_MEM_SEARCH, d->prefix);
	cm_free(CM_MEM_SEARCH, d->suffix);
	cm_free(CM_MEM_SEARCH, d);
}

/* The literal prefix: follow states with exactly one live single-code-point
 * transition that are not accepting. */
static void
dfa_compute_prefix(sr_dfa *d)
{
	char buf[260];
	size_t n = 0;
	int st = 0;
	for (int steps = 0; steps < 64 && !d->accept[st]; steps++) {
		int only = -1, cnt = 0;
		for (int c = 0; c < d->nclass; c++) {
			if (d->delta[(size_t)st * d->nclass + c] >= 0) {
				only = c;
				cnt++;
			}
		}
		if (cnt != 1)
			break;
		uint32_t lo = d->bounds[only];
		uint32_t hi = only + 1 < d->nclass ? d->bounds[only + 1] - 1 : MAX_CP;
		if (lo != hi || n + 4 > 256)
			break;
		n += utf8_put(lo, buf + n);
		st = d->delta[(size_t)st * d->nclass + only];
	}
	d->prefix = cm_strndup(CM_MEM_SEARCH, buf, n);
	d->prefix_len = n;
}

/* The ASCII class table, and which states can still reach an accepting
 * one: the states a term's walk may continue through (reverse reachability
 * over the transition table, one pass per edge). */
static void
dfa_compute_live(sr_dfa *d)
{
	for (uint32_t cp = 0; cp < 128; cp++)
		d->aclass[cp] = dfa_class(d, cp);
	int n = d->nstates > 0 ? d->nstates : 1;
	size_t ne = (size_t)d->nstates * d->nclass;
	d->live = cm_calloc(CM_MEM_SEARCH, (size_t)n, sizeof(bool));
	int *first = cm_calloc(CM_MEM_SEARCH, (size_t)n + 1, sizeof(int));
	int *from = cm_malloc(CM_MEM_SEARCH, (ne ? ne : 1) * sizeof(int));
	int *queue = cm_malloc(CM_MEM_SEARCH, (size_t)n * sizeof(int));
	for (size_t e = 0; e < ne; e++)
		if (d->delta[e] >= 0)
			first[d->delta[e] + 1]++;
	for (int s = 0; s < n; s++)
		first[s + 1] += first[s];
	int *fill = cm_malloc(CM_MEM_SEARCH, (size_t)n * sizeof(int));
	memcpy(fill, first, (size_t)n * sizeof(int));
	for (size_t e = 0; e < ne; e++)
		if (d->delta[e] >= 0)
			from[fill[d->delta[e]]++] = (int)(e / (size_t)d->nclass);
	int qn = 0;
	for (int s = 0; s < d->nstates; s++)
		if (d->accept[s]) {
			d->live[s] = true;
			queue[qn++] = s;
		}
	for (int qi = 0; qi < qn; qi++)
		for (int k = first[queue[qi]]; k < first[queue[qi] + 1]; k++)
			if (!d->live[from[k]]) {
				d->live[from[k]] = true;
				queue[qn++] = from[k];
			}
	cm_free(CM_MEM_SEARCH, fill);
	cm_free(CM_MEM_SEARCH, queue);
	cm_free(CM_MEM_SEARCH, from);
	cm_free(CM_MEM_SEARCH, first);
}

static cm_err
compile_ast(ast *a, int max_states, sr_dfa **out, cm_error *err)
{
	nfa m = {0};
	int s = nfa_state(&m);
	int t = nfa_build(&m, a, s);
	cm_err rc;
	if (m.overflow) {
		rc = too_complex(err, max_states);
		goto out;
	}
	sr_dfa *d = cm_calloc(CM_MEM_SEARCH, 1, sizeof *d);
	rc = determinize(&m, s, t, max_states, d, err);
	if (rc) {
		sr_dfa_free(d);
		goto out;
	}
	dfa_compute_prefix(d);
	dfa_compute_live(d);
	*out = d;
out:
	cm_free(CM_MEM_SEARCH, m.first);
	cm_free(CM_MEM_SEARCH, m.e);
	return rc;
}

cm_err
sr_dfa_regexp(const char *re, bool ci, int max_states, sr_dfa **out, cm_error *err)
{
	size_t n = strlen(re);
	if (n > MAX_PATTERN)
		return cm_error_set(err, CM_ELIMIT, "regexp longer than %d bytes", MAX_PATTERN);
	parser p = {(const uint8_t *)re, n, 0, ci, err, false, 0};
	ast *a = parse_alt(&p);
	if (a && p.i < p.n && !p.failed)
		fail(&p, "unexpected character");
	if (p.failed || !a) {
		ast_free(a);
		if (!err || !err->code)
			cm_error_set(err, CM_EINVAL, "invalid regexp");
		return err && err->code ? err->code : CM_EINVAL;
	}
	cm_err rc = compile_ast(a, max_states > 0 ? max_states : SR_MAX_DET_STATES, out, err);
	ast_free(a);
	return rc;
}

cm_err
sr_dfa_wildcard(const char *pat, bool ci, sr_dfa **out, cm_error *err)
{
	size_t n = strlen(pat);
	if (n > MAX_PATTERN)
		return cm_error_set(err, CM_ELIMIT, "wildcard pattern longer than %d bytes", MAX_PATTERN);
	parser p = {(const uint8_t *)pat, n, 0, ci, err, false, 0};
	ast *r = ast_new(&p, A_EPS);
	/* the literal tail after the last wildcard, and the first wildcard */
	char *tail = cm_malloc(CM_MEM_SEARCH, 4 * n + 1);
	size_t tail_len = 0;
	uint32_t first_wild = 0;
	while (p.i < p.n && !p.failed) {
		uint32_t c = take(&p);
		ast *x;
		if (c == '*' || c == '?') {
			if (!first_wild)
				first_wild = c;
			tail_len = 0;
			x = c == '*' ? ast_new(&p, A_STAR) : any_char(&p);
			if (c == '*')
				x->a = any_char(&p);
		} else {
			if (c == '\\' && p.i < p.n)
				c = take(&p);
			tail_len += utf8_put(c, tail + tail_len);
			x = lit(&p, c);
		}
		r = cat(&p, r, x);
	}
	cm_err rc = p.failed ? err->code : compile_ast(r, SR_MAX_DET_STATES, out, err);
	if (!rc && !ci && first_wild == '*' && tail_len) {
		(*out)->suffix = cm_strndup(CM_MEM_SEARCH, tail, tail_len);
		(*out)->suffix_len = tail_len;
	}
	cm_free(CM_MEM_SEARCH, tail);
	ast_free(r);
	return rc;
}

/* ---- walking a sorted terms dictionary ---- */

/* The code point at *i, or UINT32_MAX where the bytes are not UTF-8
 * (overlong forms included): the walk's skips rely on byte order and code
 * point order agreeing, which only UTF-8 guarantees. */
static uint32_t
utf8_strict(const uint8_t *s, size_t n, size_t *i)
{
	size_t j = *i;
	uint32_t cp = utf8_next(s, n, i);
	size_t l = *i - j;
	if ((l == 1 && cp >= 0x80) || (l == 2 && cp < 0x80) || (l == 3 && cp < 0x800) ||
	    (l == 4 && (cp < 0x10000 || cp > MAX_CP)))
		return UINT32_MAX;
	return cp;
}

/* The smallest code point >= lo on which st goes to a live state (*to),
 * or UINT32_MAX. */
static uint32_t
live_above(const sr_dfa *d, int st, uint32_t lo, int *to)
{
	if (lo > MAX_CP)
		return UINT32_MAX;
	for (int c = lo < 128 ? d->aclass[lo] : dfa_class(d, lo); c < d->nclass; c++) {
		int t = d->delta[(size_t)st * d->nclass + c];
		if (t >= 0 && d->live[t]) {
			*to = t;
			return d->bounds[c] > lo ? d->bounds[c] : lo;
		}
	}
	return UINT32_MAX;
}

/* Appends to out[0..n) the smallest completion from st, cut short (so
 * still a lower bound of it) at a cycle, at a non-ASCII code point or at
 * cap; returns the new length. */
static size_t
walk_fill(const sr_dfa *d, int st, uint8_t *out, size_t n, size_t cap)
{
	int seen[16];
	int ns = 0;
	while (!d->accept[st] && n < cap && ns < 16) {
		for (int k = 0; k < ns; k++)
			if (seen[k] == st)
				return n;
		seen[ns++] = st;
		int to;
		uint32_t cp = live_above(d, st, 0, &to);
		if (cp >= 0x80)
			break;
		out[n++] = (uint8_t)cp;
		st = to;
	}
	return n;
}

void
sr_dfa_walk_init(sr_dfa_walk *w, const sr_dfa *d)
{
	w->dfa = d;
	w->st[0] = 0;
	w->prev_valid = 0;
}

/* t[0..i) walks to live states and the code point cp at i does not: the
 * next term that can match starts past cp at i, or past an earlier code
 * point when no larger one at i leads anywhere. Skips are taken only over
 * ASCII code points, where invalid bytes in a term cannot interleave. */
static sr_walk_verdict
walk_skip(sr_dfa_walk *w, const uint8_t *t, size_t n, size_t i, uint32_t cp, uint8_t *seek,
          size_t *seek_len)
{
	const sr_dfa *d = w->dfa;
	for (;;) {
		if (cp >= 0x80)
			return SR_WALK_NEXT;
		int to;
		uint32_t nx = live_above(d, w->st[i], cp + 1, &to);
		if (nx < 0x80) {
			memcpy(seek, t, i);
			seek[i] = (uint8_t)nx;
			*seek_len = walk_fill(d, to, seek, i + 1, SR_WALK_SEEK_MAX);
			return SR_WALK_SEEK;
		}
		if (nx != UINT32_MAX)
			return SR_WALK_NEXT;
		if (i == 0)
			return SR_WALK_END;
		size_t b = i - 1;
		while (b > 0 && w->st[b] == -2)
			b--;
		size_t k = b;
		cp = utf8_strict(t, n, &k);
		i = b;
	}
}

sr_walk_verdict
sr_dfa_walk_term(sr_dfa_walk *w, const uint8_t *t, size_t n, uint8_t *seek, size_t *seek_len)
{
	const sr_dfa *d = w->dfa;
	if (n > SR_WALK_MAX) {
		w->prev_valid = 0;
		return sr_dfa_match(d, t, n) ? SR_WALK_MATCH : SR_WALK_NEXT;
	}
	size_t i = 0, lim = w->prev_valid < n ? w->prev_valid : n;
	while (i < lim && t[i] == w->prev[i])
		i++;
	while (i > 0 && w->st[i] == -2)
		i--;
	memcpy(w->prev + i, t + i, n - i);
	while (i < n) {
		size_t k = i;
		uint32_t cp = t[i] < 0x80 ? t[k++] : utf8_strict(t, n, &k);
		if (cp == UINT32_MAX) {
			w->prev_valid = i;
			return sr_dfa_match(d, t, n) ? SR_WALK_MATCH : SR_WALK_NEXT;
		}
		int to = dfa_step(d, w->st[i], cp);
		if (to < 0 || !d->live[to]) {
			w->prev_valid = i;
			return walk_skip(w, t, n, i, cp, seek, seek_len);
		}
		for (size_t m = i + 1; m < k; m++)
			w->st[m] = -2;
		w->st[k] = to;
		i = k;
	}
	w->prev_valid = n;
	int s = w->st[n];
	if (d->accept[s])
		return SR_WALK_MATCH;
	if (!d->live[s])
		return n ? SR_WALK_NEXT : SR_WALK_END;
	/* A live prefix: the next candidate extends it. */
	int to;
	uint32_t cp = live_above(d, s, 0, &to);
	if (cp >= 0x80 || n + 1 > SR_WALK_SEEK_MAX)
		return SR_WALK_NEXT;
	memcpy(seek, t, n);
	seek[n] = (uint8_t)cp;
	*seek_len = walk_fill(d, to, seek, n + 1, SR_WALK_SEEK_MAX);
	return SR_WALK_SEEK;
}

/* ---- edit distance ---- */

#define ED_MAX_LEN 256

static size_t
to_cps(const uint8_t *s, size_t n, uint32_t *out)
{
	size_t i = 0, k = 0;
	while (i < n && k < ED_MAX_LEN)
		out[k++] = utf8_next(s, n, &i);
	return k;
}

int
sr_edit_distance(const uint8_t *as, size_t alen, const uint8_t *bs, size_t blen, int max,
                 bool transpositions)
{
	uint32_t a[ED_MAX_LEN], b[ED_MAX_LEN];
	size_t n = to_cps(as, alen, a), m = to_cps(bs, blen, b);
	if ((n > m ? n - m : m - n) > (size_t)max)
		return max + 1;
	int rows[3][ED_MAX_LEN + 1];
	int *pp = rows[0], *p = rows[1], *c = rows[2];
	for (size_t j = 0; j <= m; j++)
		p[j] = (int)j;
	for (size_t i = 1; i <= n; i++) {
		c[0] = (int)i;
		int rowmin = c[0];
		for (size_t j = 1; j <= m; j++) {
			int cost = a[i - 1] != b[j - 1];
			int v = p[j] + 1;
			if (c[j - 1] + 1 < v)
				v = c[j - 1] + 1;
			if (p[j - 1] + cost < v)
				v = p[j - 1] + cost;
			if (transpositions && i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1;
			c[j] = v;
			if (v < rowmin)
				rowmin = v;
		}
		if (rowmin > max)
			return max + 1;
		int *t = pp;
		pp = p;
		p = c;
		c = t;
	}
	return p[m] > max ? max + 1 : p[m];
}
