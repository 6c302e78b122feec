/* The Painless subset (ps.h): a lexer, a recursive-descent parser to a
 * small tree (compiled once per request), and a tree walker over JSON
 * values. Bounded: source size, nesting depth, steps per run, string size. */
#define _GNU_SOURCE
#include "ps.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"

#define MEM CM_MEM_COORDINATOR
#define MAX_DEPTH 256 /* nesting and operator chains (a + b + ... is that deep) */
#define MAX_VARS 64

/* ---- lexer ---- */

typedef enum {
	T_EOF,
	T_NUM,
	T_STR,
	T_ID,
	T_OP, /* punctuation and operators, text in op */
} tok_kind;

typedef struct tok {
	tok_kind k;
	int pos;
	double num;
	bool is_int;
	char *s; /* T_STR / T_ID (owned by the token list) */
	char op[4];
} tok;

typedef struct lexer {
	const char *src;
	size_t len, i;
	tok *t;
	size_t n, cap;
} lexer;

static const char *const OPS[] = {"++", "--", "+=", "-=", "*=", "/=", "==", "!=", "<=", ">=", "&&",
                                  "||", "?.", "+",  "-",  "*",  "/",  "%",  "=",  "<",  ">",  "!",
                                  "(",  ")",  "{",  "}",  "[",  "]",  ".",  ",",  ";",  "?",  ":"};

static tok *
push(lexer *L, tok_kind k, int pos)
{
	if (L->n == L->cap) {
		L->cap = L->cap ? 2 * L->cap : 64;
		L->t = cm_realloc(MEM, L->t, L->cap * sizeof(tok));
	}
	tok *t = &L->t[L->n++];
	memset(t, 0, sizeof(*t));
	t->k = k;
	t->pos = pos;
	return t;
}

static cm_err
lex(lexer *L, int *epos, cm_error *err)
{
	while (L->i < L->len) {
		char c = L->src[L->i];
		int pos = (int)L->i;
		if (isspace((unsigned char)c)) {
			L->i++;
			continue;
		}
		if (c == '/' && L->i + 1 < L->len && L->src[L->i + 1] == '/') {
			while (L->i < L->len && L->src[L->i] != '\n')
				L->i++;
			continue;
		}
		if (c == '/' && L->i + 1 < L->len && L->src[L->i + 1] == '*') {
			const char *e = memmem(L->src + L->i + 2, L->len - L->i - 2, "*/", 2);
			if (!e) {
				*epos = pos;
				return cm_error_set_type(
				    err, CM_EINVAL, "script_exception",
				    "compile error: unterminated comment at position [%d]", pos);
			}
			L->i = (size_t)(e - L->src) + 2;
			continue;
		}
		if (isdigit((unsigned char)c)) {
			/* the source need not end in a NUL: parse a bounded copy */
			char buf[64], *end;
			size_t k = 0;
			while (L->i + k < L->len && k < sizeof(buf) - 1 &&
			       (isdigit((unsigned char)L->src[L->i + k]) ||
			        L->src[L->i + k] == '.' ||
			        ((L->src[L->i + k] == 'e' || L->src[L->i + k] == 'E') && k > 0) ||
			        ((L->src[L->i + k] == '+' || L->src[L->i + k] == '-') && k > 0 &&
			         (L->src[L->i + k - 1] == 'e' || L->src[L->i + k - 1] == 'E'))))
				k++;
			memcpy(buf, L->src + L->i, k);
			buf[k] = 0;
			double d = strtod(buf, &end);
			size_t used = (size_t)(end - buf);
			bool is_int = !memchr(buf, '.', used) && !memchr(buf, 'e', used) &&
			              !memchr(buf, 'E', used);
			L->i += used;
			/* long / float / double suffixes */
			if (L->i < L->len && L->src[L->i] && strchr("lLfFdD", L->src[L->i])) {
				if (strchr("fFdD", L->src[L->i]))
					is_int = false;
				L->i++;
			}
			tok *t = push(L, T_NUM, pos);
			t->num = d;
			t->is_int = is_int;
			continue;
		}
		if (isalpha((unsigned char)c) || c == '_') {
			size_t b = L->i;
			while (L->i < L->len &&
			       (isalnum((unsigned char)L->src[L->i]) || L->src[L->i] == '_'))
				L->i++;
			tok *t = push(L, T_ID, pos);
			t->s = cm_strndup(MEM, L->src + b, L->i - b);
			continue;
		}
		if (c == '\'' || c == '"') {
			char q = c;
			size_t cap = 16, n = 0;
			char *s = cm_malloc(MEM, cap);
			L->i++;
			while (L->i < L->len && L->src[L->i] != q) {
				char ch = L->src[L->i++];
				if (ch == '\\' && L->i < L->len) {
					char e = L->src[L->i++];
					ch = e == 'n'   ? '\n'
					     : e == 't' ? '\t'
					     : e == 'r' ? '\r'
					                : e;
				}
				if (n + 2 > cap) {
					cap *= 2;
					s = cm_realloc(MEM, s, cap);
				}
				s[n++] = ch;
			}
			s[n] = 0;
			if (L->i >= L->len) {
				cm_free(MEM, s);
				*epos = pos;
				return cm_error_set_type(
				    err, CM_EINVAL, "script_exception",
				    "compile error: unterminated string at position [%d]", pos);
			}
			L->i++;
			tok *t = push(L, T_STR, pos);
			t->s = s;
			continue;
		}
		size_t k = 0;
		for (; k < sizeof(OPS) / sizeof(OPS[0]); k++) {
			size_t ol = strlen(OPS[k]);
			if (L->i + ol <= L->len && memcmp(L->src + L->i, OPS[k], ol) == 0)
				break;
		}
		if (k == sizeof(OPS) / sizeof(OPS[0])) {
			*epos = pos;
			return cm_error_set_type(
			    err, CM_EINVAL, "script_exception",
			    "compile error: unexpected character [%c] at position [%d]",
			    isprint((unsigned char)c) ? c : '?', pos);
		}
		tok *t = push(L, T_OP, pos);
		snprintf(t->op, sizeof(t->op), "%s", OPS[k]);
		L->i += strlen(OPS[k]);
	}
	push(L, T_EOF, (int)L->len);
	return CM_OK;
}

/* ---- the tree ---- */

typedef enum {
	N_NUM,
	N_STR,
	N_BOOL,
	N_NULL,
	N_VAR,    /* s: name; slot */
	N_FIELD,  /* a.s (postfix: a?.s, null when a is) */
	N_INDEX,  /* a[b] */
	N_CALL,   /* a.s(args) (postfix: a?.s(args)) */
	N_LIST,   /* [args] */
	N_MAP,    /* [:] */
	N_UNARY,  /* op a */
	N_BINARY, /* a op b */
	N_ASSIGN, /* a op= b ("=" too) */
	N_INCDEC, /* ++/-- a (prefix) or a ++/-- (postfix: flag) */
	N_TERN,   /* a ? b : c (b NULL: the elvis a ?: c) */
	N_DECL,   /* slot = a (may be NULL) */
	N_BLOCK,  /* args */
	N_IF,     /* a cond, b then, c else */
	N_FOR,    /* a init, b cond, c step, d body */
	N_RETURN, /* a (may be NULL) */
	N_EXPR,   /* a; */
} node_kind;

typedef struct node node;
struct node {
	node_kind k;
	int pos;
	double num;
	bool is_int, postfix;
	char *s;
	char op[4];
	int slot;
	node *a, *b, *c, *d;
	node **args;
	size_t nargs;
};

struct ps_script {
	node *root;
	int nslots;
};

typedef struct parser {
	tok *t;
	size_t i;
	int depth;
	char *vars[MAX_VARS];
	int nvars;
	int epos;
	cm_error *err;
} parser;

static node *
mk(node_kind k, int pos)
{
	node *n = cm_calloc(MEM, 1, sizeof(*n));
	n->k = k;
	n->pos = pos;
	return n;
}

static void
node_free(node *n)
{
	if (!n)
		return;
	node_free(n->a);
	node_free(n->b);
	node_free(n->c);
	node_free(n->d);
	for (size_t i = 0; i < n->nargs; i++)
		node_free(n->args[i]);
	cm_free(MEM, n->args);
	cm_free(MEM, n->s);
	cm_free(MEM, n);
}

static void
add_arg(node *n, node *a)
{
	n->args = cm_realloc(MEM, n->args, (n->nargs + 1) * sizeof(node *));
	n->args[n->nargs++] = a;
}

static tok *
cur(parser *P)
{
	return &P->t[P->i];
}

static bool
is_op(parser *P, const char *op)
{
	return cur(P)->k == T_OP && strcmp(cur(P)->op, op) == 0;
}

static bool
is_id(parser *P, const char *id)
{
	return cur(P)->k == T_ID && strcmp(cur(P)->s, id) == 0;
}

static node *
fail(parser *P, const char *what)
{
	if (!P->err->code) {
		tok *t = cur(P);
		P->epos = t->pos;
		cm_error_set_type(P->err, CM_EINVAL, "script_exception",
		                  "compile error: %s, found [%s] at position [%d]", what,
		                  t->k == T_EOF  ? "end of script"
		                  : t->k == T_OP ? t->op
		                  : t->s         ? t->s
		                                 : "number",
		                  t->pos);
	}
	return NULL;
}

static bool
expect(parser *P, const char *op)
{
	if (!is_op(P, op)) {
		char what[32];
		snprintf(what, sizeof(what), "expected [%s]", op);
		fail(P, what);
		return false;
	}
	P->i++;
	return true;
}

static int
var_slot(parser *P, const char *name)
{
	for (int i = P->nvars - 1; i >= 0; i--)
		if (strcmp(P->vars[i], name) == 0)
			return i;
	return -1;
}

static node *expr(parser *P);
static node *stmt(parser *P);
static bool is_lvalue(const node *n);

static bool
enter(parser *P)
{
	if (++P->depth > MAX_DEPTH) {
		fail(P, "the script nests too deeply");
		return false;
	}
	return true;
}

static node *
primary(parser *P)
{
	tok *t = cur(P);
	node *n;
	if (t->k == T_NUM) {
		n = mk(N_NUM, t->pos);
		n->num = t->num;
		n->is_int = t->is_int;
		P->i++;
		return n;
	}
	if (t->k == T_STR) {
		n = mk(N_STR, t->pos);
		n->s = cm_strdup(MEM, t->s);
		P->i++;
		return n;
	}
	if (t->k == T_ID) {
		if (!strcmp(t->s, "true") || !strcmp(t->s, "false")) {
			n = mk(N_BOOL, t->pos);
			n->num = t->s[0] == 't';
			P->i++;
			return n;
		}
		if (!strcmp(t->s, "null")) {
			P->i++;
			return mk(N_NULL, t->pos);
		}
		int slot = var_slot(P, t->s);
		if (slot < 0 && strcmp(t->s, "ctx") && strcmp(t->s, "params"))
			return fail(P, "unknown variable");
		n = mk(N_VAR, t->pos);
		n->s = cm_strdup(MEM, t->s);
		n->slot = slot; /* -1: ctx or params */
		P->i++;
		return n;
	}
	if (is_op(P, "(")) {
		P->i++;
		n = expr(P);
		if (!n || !expect(P, ")")) {
			node_free(n);
			return NULL;
		}
		return n;
	}
	if (is_op(P, "[")) {
		int pos = t->pos;
		P->i++;
		if (is_op(P, ":")) {
			P->i++;
			if (!expect(P, "]"))
				return NULL;
			return mk(N_MAP, pos);
		}
		n = mk(N_LIST, pos);
		while (!is_op(P, "]")) {
			node *e = expr(P);
			if (!e) {
				node_free(n);
				return NULL;
			}
			add_arg(n, e);
			if (!is_op(P, ","))
				break;
			P->i++;
		}
		if (!expect(P, "]")) {
			node_free(n);
			return NULL;
		}
		return n;
	}
	return fail(P, "expected a value");
}

static node *
postfix(parser *P)
{
	node *n = primary(P);
	int links = 0;
	while (n) {
		int pos = cur(P)->pos;
		if ((is_op(P, ".") || is_op(P, "?.") || is_op(P, "[") || is_op(P, "++") ||
		     is_op(P, "--")) &&
		    (links++, !enter(P))) {
			node_free(n);
			return NULL;
		}
		if (is_op(P, ".") || is_op(P, "?.")) {
			bool null_safe = is_op(P, "?.");
			P->i++;
			if (cur(P)->k != T_ID) {
				node_free(n);
				return fail(P, "expected a field or method name");
			}
			char *name = cm_strdup(MEM, cur(P)->s);
			P->i++;
			if (is_op(P, "(")) {
				node *c = mk(N_CALL, pos);
				c->a = n;
				c->s = name;
				c->postfix = null_safe;
				P->i++;
				while (!is_op(P, ")")) {
					node *e = expr(P);
					if (!e) {
						node_free(c);
						return NULL;
					}
					add_arg(c, e);
					if (!is_op(P, ","))
						break;
					P->i++;
				}
				if (!expect(P, ")")) {
					node_free(c);
					return NULL;
				}
				n = c;
			} else {
				node *f = mk(N_FIELD, pos);
				f->a = n;
				f->s = name;
				f->postfix = null_safe;
				n = f;
			}
		} else if (is_op(P, "[")) {
			P->i++;
			node *x = mk(N_INDEX, pos);
			x->a = n;
			x->b = expr(P);
			if (!x->b || !expect(P, "]")) {
				node_free(x);
				return NULL;
			}
			n = x;
		} else if (is_op(P, "++") || is_op(P, "--")) {
			if (!is_lvalue(n)) {
				node_free(n);
				return fail(P, "cannot increment this");
			}
			node *x = mk(N_INCDEC, pos);
			snprintf(x->op, sizeof(x->op), "%s", cur(P)->op);
			x->postfix = true;
			x->a = n;
			P->i++;
			n = x;
		} else {
			break;
		}
	}
	P->depth -= links;
	return n;
}

static node *
unary(parser *P)
{
	if (!enter(P))
		return NULL;
	node *n;
	int pos = cur(P)->pos;
	if (is_op(P, "!") || is_op(P, "-")) {
		n = mk(N_UNARY, pos);
		snprintf(n->op, sizeof(n->op), "%s", cur(P)->op);
		P->i++;
		n->a = unary(P);
		if (!n->a) {
			node_free(n);
			n = NULL;
		}
	} else if (is_op(P, "++") || is_op(P, "--")) {
		n = mk(N_INCDEC, pos);
		snprintf(n->op, sizeof(n->op), "%s", cur(P)->op);
		P->i++;
		n->a = unary(P);
		if (!n->a || !is_lvalue(n->a)) {
			bool parsed = n->a != NULL;
			node_free(n);
			n = parsed ? fail(P, "cannot increment this") : NULL;
		}
	} else {
		n = postfix(P);
	}
	P->depth--;
	return n;
}

/* Binary levels, loosest last. */
static const char *const LEVELS[][4] = {
    {"*", "/", "%", NULL}, {"+", "-", NULL}, {"<", "<=", ">", ">="},
    {"==", "!=", NULL},    {"&&", NULL},     {"||", NULL},
};

static node *
binary(parser *P, int level)
{
	if (level < 0)
		return unary(P);
	node *n = binary(P, level - 1);
	int links = 0;
	while (n) {
		const char *const *ops = LEVELS[level];
		const char *hit = NULL;
		for (int k = 0; k < 4 && ops[k]; k++)
			if (is_op(P, ops[k]))
				hit = ops[k];
		if (!hit)
			break;
		/* each link makes the tree one deeper (evaluation recurses) */
		links++;
		if (!enter(P)) {
			node_free(n);
			return NULL;
		}
		node *b = mk(N_BINARY, cur(P)->pos);
		snprintf(b->op, sizeof(b->op), "%s", hit);
		P->i++;
		b->a = n;
		b->b = binary(P, level - 1);
		if (!b->b) {
			node_free(b);
			return NULL;
		}
		n = b;
	}
	P->depth -= links;
	return n;
}

static bool
is_lvalue(const node *n)
{
	return n->k == N_FIELD || n->k == N_INDEX || (n->k == N_VAR && n->slot >= 0);
}

static node *
expr(parser *P)
{
	if (!enter(P))
		return NULL;
	node *n = binary(P, 5);
	if (n && is_op(P, "?") && P->t[P->i + 1].k == T_OP && !strcmp(P->t[P->i + 1].op, ":")) {
		node *t = mk(N_TERN, cur(P)->pos);
		P->i += 2;
		t->a = n;
		if (!(t->c = expr(P))) {
			node_free(t);
			P->depth--;
			return NULL;
		}
		n = t;
	} else if (n && is_op(P, "?")) {
		node *t = mk(N_TERN, cur(P)->pos);
		P->i++;
		t->a = n;
		t->b = expr(P);
		if (!t->b || !expect(P, ":") || !(t->c = expr(P))) {
			node_free(t);
			P->depth--;
			return NULL;
		}
		n = t;
	}
	if (n && (is_op(P, "=") || is_op(P, "+=") || is_op(P, "-=") || is_op(P, "*=") ||
	          is_op(P, "/="))) {
		if (!is_lvalue(n)) {
			node_free(n);
			P->depth--;
			return fail(P, "cannot assign to this");
		}
		node *x = mk(N_ASSIGN, cur(P)->pos);
		snprintf(x->op, sizeof(x->op), "%s", cur(P)->op);
		P->i++;
		x->a = n;
		x->b = expr(P);
		if (!x->b) {
			node_free(x);
			P->depth--;
			return NULL;
		}
		n = x;
	}
	if (n && n->k == N_INCDEC && !is_lvalue(n->a)) {
		node_free(n);
		P->depth--;
		return fail(P, "cannot increment this");
	}
	P->depth--;
	return n;
}

static bool
type_name(parser *P)
{
	static const char *const types[] = {"def",   "var",    "int",     "long",  "double",
	                                    "float", "String", "boolean", "short", "byte",
	                                    "Map",   "List",   "Object"};
	if (cur(P)->k != T_ID || P->t[P->i + 1].k != T_ID)
		return false;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (is_id(P, types[i]))
			return true;
	return false;
}

static node *
decl(parser *P)
{
	int pos = cur(P)->pos;
	P->i++; /* the type: values are dynamic */
	if (cur(P)->k != T_ID)
		return fail(P, "expected a variable name");
	if (P->nvars == MAX_VARS)
		return fail(P, "too many variables");
	if (var_slot(P, cur(P)->s) >= 0 || !strcmp(cur(P)->s, "ctx") ||
	    !strcmp(cur(P)->s, "params"))
		return fail(P, "variable already defined");
	node *n = mk(N_DECL, pos);
	n->s = cm_strdup(MEM, cur(P)->s);
	P->i++;
	if (is_op(P, "=")) {
		P->i++;
		if (!(n->a = expr(P))) {
			node_free(n);
			return NULL;
		}
	}
	n->slot = P->nvars;
	P->vars[P->nvars++] = n->s;
	return n;
}

static node *
stmt(parser *P)
{
	if (!enter(P))
		return NULL;
	node *n = NULL;
	int pos = cur(P)->pos;
	if (is_op(P, "{")) {
		int saved = P->nvars;
		P->i++;
		n = mk(N_BLOCK, pos);
		while (!is_op(P, "}")) {
			if (cur(P)->k == T_EOF) {
				node_free(n);
				n = fail(P, "expected [}]");
				goto out;
			}
			node *s = stmt(P);
			if (!s) {
				node_free(n);
				n = NULL;
				goto out;
			}
			add_arg(n, s);
		}
		P->i++;
		P->nvars = saved;
	} else if (is_id(P, "if")) {
		P->i++;
		n = mk(N_IF, pos);
		if (!expect(P, "(") || !(n->a = expr(P)) || !expect(P, ")") || !(n->b = stmt(P))) {
			node_free(n);
			n = NULL;
			goto out;
		}
		if (is_id(P, "else")) {
			P->i++;
			if (!(n->c = stmt(P))) {
				node_free(n);
				n = NULL;
			}
		}
	} else if (is_id(P, "while")) {
		P->i++;
		n = mk(N_FOR, pos);
		if (!expect(P, "(") || !(n->b = expr(P)) || !expect(P, ")") || !(n->d = stmt(P))) {
			node_free(n);
			n = NULL;
		}
	} else if (is_id(P, "for")) {
		int saved = P->nvars;
		P->i++;
		n = mk(N_FOR, pos);
		if (!expect(P, "(")) {
			node_free(n);
			n = NULL;
			goto out;
		}
		if (!is_op(P, ";") && !(n->a = type_name(P) ? decl(P) : expr(P)))
			goto bad_for;
		if (!expect(P, ";") || (!is_op(P, ";") && !(n->b = expr(P))) || !expect(P, ";"))
			goto bad_for;
		if (!is_op(P, ")") && !(n->c = expr(P)))
			goto bad_for;
		if (!expect(P, ")") || !(n->d = stmt(P)))
			goto bad_for;
		P->nvars = saved;
		goto out;
	bad_for:
		node_free(n);
		n = NULL;
	} else if (is_id(P, "return")) {
		P->i++;
		n = mk(N_RETURN, pos);
		if (!is_op(P, ";") && cur(P)->k != T_EOF && !(n->a = expr(P))) {
			node_free(n);
			n = NULL;
			goto out;
		}
		if (is_op(P, ";"))
			P->i++;
	} else if (is_op(P, ";")) {
		P->i++;
		n = mk(N_BLOCK, pos);
	} else if (type_name(P)) {
		n = decl(P);
		if (n && !expect(P, ";")) {
			node_free(n);
			n = NULL;
		}
	} else {
		n = mk(N_EXPR, pos);
		if (!(n->a = expr(P))) {
			node_free(n);
			n = NULL;
			goto out;
		}
		/* the last statement of a block or script may omit its ';' */
		if (cur(P)->k != T_EOF && !is_op(P, "}") && !expect(P, ";")) {
			node_free(n);
			n = NULL;
		}
	}
out:
	P->depth--;
	return n;
}

cm_err
ps_compile(const char *source, size_t len, ps_script **out, int *pos, cm_error *err)
{
	lexer L = {source, len, 0, NULL, 0, 0};
	int epos = 0;
	cm_err rc;
	*out = NULL;
	if (len > PS_MAX_SOURCE) {
		if (pos)
			*pos = 0;
		return cm_error_set_type(err, CM_EINVAL, "script_exception",
		                         "compile error: the script is %zu bytes, more than the "
		                         "[%d] allowed",
		                         len, PS_MAX_SOURCE);
	}
	if ((rc = lex(&L, &epos, err)) == CM_OK) {
		parser P;
		memset(&P, 0, sizeof(P));
		P.t = L.t;
		P.err = err;
		node *root = mk(N_BLOCK, 0);
		int maxv = 0;
		while (cur(&P)->k != T_EOF) {
			node *s = stmt(&P);
			if (!s) {
				rc = err->code ? err->code : CM_EINVAL;
				epos = P.epos;
				break;
			}
			add_arg(root, s);
			if (P.nvars > maxv)
				maxv = P.nvars;
		}
		if (rc) {
			node_free(root);
		} else {
			*out = cm_calloc(MEM, 1, sizeof(ps_script));
			(*out)->root = root;
			(*out)->nslots = MAX_VARS;
			(void)maxv;
		}
	}
	for (size_t i = 0; i < L.n; i++)
		cm_free(MEM, L.t[i].s);
	cm_free(MEM, L.t);
	if (pos)
		*pos = epos;
	return rc;
}

void
ps_free(ps_script *s)
{
	if (!s)
		return;
	node_free(s->root);
	cm_free(MEM, s);
}

/* ---- running ---- */

/* A value: j is borrowed (a place inside ctx, params or a variable) unless
 * owned. */
typedef struct val {
	cJSON *j;
	bool owned;
} val;

typedef struct run {
	cJSON *ctx;
	const cJSON *params;
	cJSON *vars[MAX_VARS];
	long steps;
	bool returned;
	bool keep;      /* ps_eval: keep the value of return / the last expression */
	cJSON *result;
	cm_error *err;
} run;

static void
val_drop(val *v)
{
	if (v->owned)
		cJSON_Delete(v->j);
	v->j = NULL;
	v->owned = false;
}

static cm_err
rt_error(run *R, const node *n, const char *fmt, const char *arg)
{
	char what[256];
	snprintf(what, sizeof(what), fmt, arg ? arg : "");
	return cm_error_set_type(R->err, CM_EINVAL, "script_exception",
	                         "runtime error: %s at position [%d]", what, n->pos);
}

static val
owned(cJSON *j)
{
	return (val){j, true};
}

/* A number made as a double (7.0, 7 / 2.0) stays one even when integral;
 * the mark rides in cJSON's type bits, which printing ignores. */
#define PS_DOUBLE 1024

static cJSON *
num(double d, bool dbl)
{
	cJSON *j = cJSON_CreateNumber(d);
	if (dbl)
		j->type |= PS_DOUBLE;
	return j;
}

static bool
is_long(const cJSON *j)
{
	return cJSON_IsNumber(j) && !(j->type & PS_DOUBLE) &&
	       j->valuedouble == floor(j->valuedouble) && fabs(j->valuedouble) < 9007199254740992.0;
}

static bool
truthy(run *R, const node *n, const cJSON *j, bool *out)
{
	if (!cJSON_IsBool(j)) {
		rt_error(R, n, "cannot cast %s to boolean",
		         cJSON_IsNull(j) || !j ? "null"
		         : cJSON_IsNumber(j)   ? "a number"
		                               : "a value");
		return false;
	}
	*out = cJSON_IsTrue(j);
	return true;
}

static cm_err eval(run *R, const node *n, val *out);

/* The string form of a value for concatenation. */
static char *
str_of(const cJSON *j)
{
	if (cJSON_IsString(j))
		return cm_strdup(MEM, j->valuestring);
	if (!j || cJSON_IsNull(j))
		return cm_strdup(MEM, "null");
	if (cJSON_IsBool(j))
		return cm_strdup(MEM, cJSON_IsTrue(j) ? "true" : "false");
	if (is_long(j)) {
		char b[32];
		snprintf(b, sizeof(b), "%lld", (long long)j->valuedouble);
		return cm_strdup(MEM, b);
	}
	char *p = cJSON_PrintUnformatted(j);
	char *s = cm_strdup(MEM, p ? p : "");
	cJSON_free(p);
	return s;
}

static int
json_cmp_eq(const cJSON *a, const cJSON *b)
{
	if ((!a || cJSON_IsNull(a)) && (!b || cJSON_IsNull(b)))
		return 1;
	if (!a || !b)
		return 0;
	return cJSON_Compare(a, b, true);
}

/* Whether evaluating n may change a variable or a value in place
 * (assignment, ++/--, a method call). */
static bool
has_effects(const node *n)
{
	if (!n)
		return false;
	if (n->k == N_ASSIGN || n->k == N_INCDEC || n->k == N_CALL)
		return true;
	if (has_effects(n->a) || has_effects(n->b) || has_effects(n->c) || has_effects(n->d))
		return true;
	for (size_t i = 0; i < n->nargs; i++)
		if (has_effects(n->args[i]))
			return true;
	return false;
}

/* A value borrowed from a variable or a document may be freed by what is
 * evaluated next (i * ++i replaces i): it becomes its own copy first. */
static void
pin(val *v)
{
	if (v->j && !v->owned)
		*v = owned(cJSON_Duplicate(v->j, true));
}

static cm_err
arith(run *R, const node *n, const char *op, const cJSON *a, const cJSON *b, val *out)
{
	if (op[0] == '+' && (cJSON_IsString(a) || cJSON_IsString(b))) {
		char *x = str_of(a), *y = str_of(b);
		size_t lx = strlen(x), ly = strlen(y);
		if (lx + ly > PS_MAX_STRING) {
			cm_free(MEM, x);
			cm_free(MEM, y);
			return rt_error(R, n, "a string longer than %s bytes", "1048576");
		}
		char *s = cm_malloc(MEM, lx + ly + 1);
		memcpy(s, x, lx);
		memcpy(s + lx, y, ly + 1);
		*out = owned(cJSON_CreateString(s));
		cm_free(MEM, s);
		cm_free(MEM, x);
		cm_free(MEM, y);
		return CM_OK;
	}
	if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b))
		return rt_error(R, n, "[%s] needs numbers (or a string for +)", op);
	double x = a->valuedouble, y = b->valuedouble, r;
	bool ints = is_long(a) && is_long(b);
	switch (op[0]) {
	case '+':
		r = x + y;
		break;
	case '-':
		r = x - y;
		break;
	case '*':
		r = x * y;
		break;
	case '/':
		if (ints && y == 0)
			return rt_error(R, n, "/ by zero%s", NULL);
		r = ints ? (double)((long long)x / (long long)y) : x / y;
		break;
	case '%':
		if (ints && y == 0)
			return rt_error(R, n, "/ by zero%s", NULL);
		r = ints ? (double)((long long)x % (long long)y) : fmod(x, y);
		break;
	default:
		return rt_error(R, n, "unknown operator [%s]", op);
	}
	*out = owned(num(r, !ints));
	return CM_OK;
}

static cm_err
binop(run *R, const node *n, val *out)
{
	val a = {0}, b = {0};
	cm_err rc;
	if (!strcmp(n->op, "&&") || !strcmp(n->op, "||")) {
		bool x, y;
		if ((rc = eval(R, n->a, &a)))
			return rc;
		if (!truthy(R, n->a, a.j, &x)) {
			val_drop(&a);
			return R->err->code;
		}
		val_drop(&a);
		if ((n->op[0] == '&' && !x) || (n->op[0] == '|' && x)) {
			*out = owned(cJSON_CreateBool(x));
			return CM_OK;
		}
		if ((rc = eval(R, n->b, &b)))
			return rc;
		if (!truthy(R, n->b, b.j, &y)) {
			val_drop(&b);
			return R->err->code;
		}
		val_drop(&b);
		*out = owned(cJSON_CreateBool(y));
		return CM_OK;
	}
	if ((rc = eval(R, n->a, &a)))
		return rc;
	if (has_effects(n->b))
		pin(&a);
	if ((rc = eval(R, n->b, &b))) {
		val_drop(&a);
		return rc;
	}
	if (!strcmp(n->op, "==") || !strcmp(n->op, "!=")) {
		int eq = json_cmp_eq(a.j, b.j);
		*out = owned(cJSON_CreateBool(n->op[0] == '=' ? eq : !eq));
	} else if (n->op[0] == '<' || n->op[0] == '>') {
		int c;
		if (cJSON_IsNumber(a.j) && cJSON_IsNumber(b.j))
			c = a.j->valuedouble < b.j->valuedouble
			        ? -1
			        : a.j->valuedouble > b.j->valuedouble;
		else if (cJSON_IsString(a.j) && cJSON_IsString(b.j))
			c = strcmp(a.j->valuestring, b.j->valuestring);
		else {
			val_drop(&a);
			val_drop(&b);
			return rt_error(R, n, "[%s] compares numbers or strings", n->op);
		}
		bool r = !strcmp(n->op, "<")    ? c < 0
		         : !strcmp(n->op, "<=") ? c <= 0
		         : !strcmp(n->op, ">")  ? c > 0
		                                : c >= 0;
		*out = owned(cJSON_CreateBool(r));
	} else {
		rc = arith(R, n, n->op, a.j, b.j, out);
	}
	val_drop(&a);
	val_drop(&b);
	return rc;
}

/* The container and key of an lvalue: *obj is a place inside the run's
 * values; key is a field name (objects) or an index (arrays). */
typedef struct place {
	cJSON *obj;
	char *key; /* owned */
	int index;
	int slot; /* a variable, or -1 */
} place;

static cm_err
place_of(run *R, const node *n, place *p)
{
	memset(p, 0, sizeof(*p));
	p->slot = -1;
	if (n->k == N_VAR) {
		p->slot = n->slot;
		return CM_OK;
	}
	if (n->k != N_FIELD && n->k != N_INDEX)
		return rt_error(R, n, "cannot assign to this%s", NULL);
	val c = {0}, k = {0};
	cm_err rc = eval(R, n->a, &c);
	if (rc)
		return rc;
	if (c.owned) {
		val_drop(&c);
		return rt_error(R, n, "cannot assign into a temporary value%s", NULL);
	}
	if (n->a->k == N_VAR && n->a->slot < 0 && !strcmp(n->a->s, "params")) {
		return rt_error(R, n, "params are read-only%s", NULL);
	}
	p->obj = c.j;
	if (n->k == N_FIELD) {
		if (!cJSON_IsObject(c.j))
			return rt_error(R, n, "cannot set field [%s] of a non-object", n->s);
		p->key = cm_strdup(MEM, n->s);
		return CM_OK;
	}
	if ((rc = eval(R, n->b, &k)))
		return rc;
	if (cJSON_IsObject(c.j) && cJSON_IsString(k.j)) {
		p->key = cm_strdup(MEM, k.j->valuestring);
	} else if (cJSON_IsArray(c.j) && is_long(k.j)) {
		p->index = (int)k.j->valuedouble;
		if (p->index < 0 || p->index >= cJSON_GetArraySize(c.j)) {
			val_drop(&k);
			return rt_error(R, n, "index out of bounds%s", NULL);
		}
	} else {
		val_drop(&k);
		return rt_error(R, n, "cannot index this value%s", NULL);
	}
	val_drop(&k);
	return CM_OK;
}

static cJSON *
place_get(run *R, const place *p)
{
	if (p->slot >= 0)
		return R->vars[p->slot];
	if (p->key)
		return cJSON_GetObjectItemCaseSensitive(p->obj, p->key);
	return cJSON_GetArrayItem(p->obj, p->index);
}

/* Stores v (taken) at p. */
static void
place_set(run *R, place *p, cJSON *v)
{
	if (p->slot >= 0) {
		cJSON_Delete(R->vars[p->slot]);
		R->vars[p->slot] = v;
	} else if (p->key) {
		if (cJSON_GetObjectItemCaseSensitive(p->obj, p->key))
			cJSON_ReplaceItemInObjectCaseSensitive(p->obj, p->key, v);
		else
			cJSON_AddItemToObject(p->obj, p->key, v);
	} else {
		cJSON_ReplaceItemInArray(p->obj, p->index, v);
	}
}

static cJSON *
copy_of(val *v)
{
	if (!v->j)
		return cJSON_CreateNull();
	if (v->owned) {
		cJSON *j = v->j;
		v->j = NULL;
		v->owned = false;
		return j;
	}
	return cJSON_Duplicate(v->j, true);
}

static cm_err
assign(run *R, const node *n, val *out)
{
	place p;
	val rhs = {0};
	cm_err rc = place_of(R, n->a, &p);
	if (!rc)
		rc = eval(R, n->b, &rhs);
	if (rc) {
		cm_free(MEM, p.key);
		return rc;
	}
	cJSON *nv;
	if (!strcmp(n->op, "=")) {
		nv = copy_of(&rhs);
	} else {
		val r = {0};
		char op[2] = {n->op[0], 0};
		cJSON *cur_v = place_get(R, &p);
		if (!cur_v) {
			val_drop(&rhs);
			cm_free(MEM, p.key);
			return rt_error(R, n, "[%s] on a missing value", n->op);
		}
		if ((rc = arith(R, n, op, cur_v, rhs.j, &r))) {
			val_drop(&rhs);
			cm_free(MEM, p.key);
			return rc;
		}
		nv = r.j;
	}
	val_drop(&rhs);
	place_set(R, &p, nv);
	*out = owned(cJSON_Duplicate(nv, true));
	cm_free(MEM, p.key);
	return CM_OK;
}

static cm_err
incdec(run *R, const node *n, val *out)
{
	place p;
	cm_err rc = place_of(R, n->a, &p);
	if (rc) {
		cm_free(MEM, p.key);
		return rc;
	}
	cJSON *cur_v = place_get(R, &p);
	if (!cJSON_IsNumber(cur_v)) {
		cm_free(MEM, p.key);
		return rt_error(R, n, "[%s] needs a number", n->op);
	}
	double old = cur_v->valuedouble, nw = old + (n->op[0] == '+' ? 1 : -1);
	bool dbl = !is_long(cur_v);
	place_set(R, &p, num(nw, dbl));
	*out = owned(num(n->postfix ? old : nw, dbl));
	cm_free(MEM, p.key);
	return CM_OK;
}

static cm_err step(run *R, const node *n);

static cm_err
call(run *R, const node *n, val *out)
{
	val self = {0};
	val args[4] = {{0}};
	if (n->nargs > 4)
		return rt_error(R, n, "too many arguments to [%s]", n->s);
	/* Arguments that change things are evaluated before the receiver (a
	 * method changes its receiver in place, so it cannot be a copy), and
	 * earlier arguments are pinned before a later one runs. */
	bool effects = false;
	for (size_t i = 0; i < n->nargs; i++)
		effects |= has_effects(n->args[i]);
	cm_err rc = effects ? CM_OK : eval(R, n->a, &self);
	if (rc)
		return rc;
	for (size_t i = 0; i < n->nargs && !rc; i++) {
		for (size_t k = 0; k < i && has_effects(n->args[i]); k++)
			pin(&args[k]);
		rc = eval(R, n->args[i], &args[i]);
	}
	if (!rc && effects)
		rc = eval(R, n->a, &self);
	cJSON *s = self.j;
	const char *m = n->s;
	size_t na = n->nargs;
	if (rc)
		goto done;
	if (n->postfix && (!s || cJSON_IsNull(s))) {
		*out = owned(cJSON_CreateNull());
		goto done;
	}
	/* list and map methods walk the elements: they count as steps */
	if (cJSON_IsArray(s) || cJSON_IsObject(s)) {
		R->steps += cJSON_GetArraySize(s) / 16;
		if ((rc = step(R, n)))
			goto done;
	}
	if (!strcmp(m, "size") && na == 0 && (cJSON_IsArray(s) || cJSON_IsObject(s))) {
		*out = owned(cJSON_CreateNumber(cJSON_GetArraySize(s)));
	} else if (!strcmp(m, "isEmpty") && na == 0 && (cJSON_IsArray(s) || cJSON_IsObject(s))) {
		*out = owned(cJSON_CreateBool(cJSON_GetArraySize(s) == 0));
	} else if (!strcmp(m, "length") && na == 0 && cJSON_IsString(s)) {
		*out = owned(cJSON_CreateNumber((double)strlen(s->valuestring)));
	} else if (!strcmp(m, "add") && na == 1 && cJSON_IsArray(s) && !self.owned) {
		if (cJSON_GetArraySize(s) >= 100000) {
			rc = rt_error(R, n, "a list longer than %s", "100000");
			goto done;
		}
		cJSON_AddItemToArray(s, copy_of(&args[0]));
		*out = owned(cJSON_CreateTrue());
	} else if (!strcmp(m, "contains") && na == 1 && cJSON_IsArray(s)) {
		bool hit = false;
		const cJSON *e;
		cJSON_ArrayForEach(e, s) hit = hit || json_cmp_eq(e, args[0].j);
		*out = owned(cJSON_CreateBool(hit));
	} else if (!strcmp(m, "contains") && na == 1 && cJSON_IsString(s) &&
	           cJSON_IsString(args[0].j)) {
		*out =
		    owned(cJSON_CreateBool(strstr(s->valuestring, args[0].j->valuestring) != NULL));
	} else if ((!strcmp(m, "startsWith") || !strcmp(m, "endsWith")) && na == 1 &&
	           cJSON_IsString(s) && cJSON_IsString(args[0].j)) {
		size_t ls = strlen(s->valuestring), la = strlen(args[0].j->valuestring);
		bool hit = la <= ls && !memcmp(s->valuestring + (m[0] == 's' ? 0 : ls - la),
		                               args[0].j->valuestring, la);
		*out = owned(cJSON_CreateBool(hit));
	} else if (!strcmp(m, "equals") && na == 1) {
		*out = owned(cJSON_CreateBool(s && !cJSON_IsNull(s) && json_cmp_eq(s, args[0].j)));
	} else if (!strcmp(m, "isEmpty") && na == 0 && cJSON_IsString(s)) {
		*out = owned(cJSON_CreateBool(!s->valuestring[0]));
	} else if ((!strcmp(m, "toLowerCase") || !strcmp(m, "toUpperCase") || !strcmp(m, "trim")) &&
	           na == 0 && cJSON_IsString(s)) {
		/* ASCII case mapping: other letters keep their case */
		const char *b = s->valuestring, *e = b + strlen(b);
		if (m[0] == 't' && m[1] == 'r') {
			while (b < e && (unsigned char)*b <= ' ')
				b++;
			while (e > b && (unsigned char)e[-1] <= ' ')
				e--;
		}
		char *t = cm_strndup(MEM, b, (size_t)(e - b));
		for (char *q = t; *q && m[1] == 'o'; q++)
			*q = m[2] == 'L' ? (char)tolower((unsigned char)*q)
			                 : (char)toupper((unsigned char)*q);
		*out = owned(cJSON_CreateString(t));
		cm_free(MEM, t);
	} else if (!strcmp(m, "indexOf") && na == 1 && cJSON_IsArray(s)) {
		int k = 0, at = -1;
		const cJSON *e;
		cJSON_ArrayForEach(e, s)
		{
			if (at < 0 && json_cmp_eq(e, args[0].j))
				at = k;
			k++;
		}
		*out = owned(cJSON_CreateNumber(at));
	} else if (!strcmp(m, "containsKey") && na == 1 && cJSON_IsObject(s) &&
	           cJSON_IsString(args[0].j)) {
		*out = owned(cJSON_CreateBool(
		    cJSON_GetObjectItemCaseSensitive(s, args[0].j->valuestring) != NULL));
	} else if (!strcmp(m, "get") && na == 1 && cJSON_IsObject(s) && cJSON_IsString(args[0].j)) {
		cJSON *v = cJSON_GetObjectItemCaseSensitive(s, args[0].j->valuestring);
		*out = v ? (val){v, false} : owned(cJSON_CreateNull());
		if (self.owned && v)
			*out = owned(cJSON_Duplicate(v, true));
	} else if (!strcmp(m, "get") && na == 1 && cJSON_IsArray(s) && is_long(args[0].j)) {
		cJSON *v = cJSON_GetArrayItem(s, (int)args[0].j->valuedouble);
		if (!v) {
			rc = rt_error(R, n, "index out of bounds%s", NULL);
			goto done;
		}
		*out = self.owned ? owned(cJSON_Duplicate(v, true)) : (val){v, false};
	} else if (!strcmp(m, "put") && na == 2 && cJSON_IsObject(s) && !self.owned &&
	           cJSON_IsString(args[0].j)) {
		const char *k = args[0].j->valuestring;
		cJSON *v = copy_of(&args[1]);
		if (cJSON_GetObjectItemCaseSensitive(s, k))
			cJSON_ReplaceItemInObjectCaseSensitive(s, k, v);
		else
			cJSON_AddItemToObject(s, k, v);
		*out = owned(cJSON_CreateNull());
	} else if (!strcmp(m, "remove") && na == 1 && cJSON_IsObject(s) && !self.owned &&
	           cJSON_IsString(args[0].j)) {
		cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(s, args[0].j->valuestring);
		*out = owned(v ? v : cJSON_CreateNull());
	} else if (!strcmp(m, "remove") && na == 1 && cJSON_IsArray(s) && !self.owned &&
	           is_long(args[0].j)) {
		int i = (int)args[0].j->valuedouble;
		if (i < 0 || i >= cJSON_GetArraySize(s)) {
			rc = rt_error(R, n, "index out of bounds%s", NULL);
			goto done;
		}
		*out = owned(cJSON_DetachItemFromArray(s, i));
	} else {
		rc = rt_error(R, n, "unknown method [%s] for this value (or wrong arguments)", m);
	}
done:
	for (size_t i = 0; i < 4; i++)
		val_drop(&args[i]);
	val_drop(&self);
	return rc;
}

static cm_err
step(run *R, const node *n)
{
	if (++R->steps > PS_MAX_STEPS)
		return rt_error(R, n, "the script ran more than %s statements and loop turns",
		                "1000000");
	return CM_OK;
}

static cm_err
eval(run *R, const node *n, val *out)
{
	cm_err rc;
	*out = (val){0};
	switch (n->k) {
	case N_NUM:
		*out = owned(num(n->num, !n->is_int));
		return CM_OK;
	case N_STR:
		*out = owned(cJSON_CreateString(n->s));
		return CM_OK;
	case N_BOOL:
		*out = owned(cJSON_CreateBool(n->num != 0));
		return CM_OK;
	case N_NULL:
		*out = owned(cJSON_CreateNull());
		return CM_OK;
	case N_VAR:
		if (n->slot >= 0)
			*out = (val){R->vars[n->slot], false};
		else if (!strcmp(n->s, "ctx"))
			*out = (val){R->ctx, false};
		else
			*out = (val){(cJSON *)R->params, false};
		if (!out->j)
			*out = owned(cJSON_CreateNull());
		return CM_OK;
	case N_FIELD:
	case N_INDEX: {
		val c = {0}, k = {0};
		if ((rc = eval(R, n->a, &c)))
			return rc;
		cJSON *v = NULL;
		if (n->k == N_FIELD && n->postfix && (!c.j || cJSON_IsNull(c.j))) {
			val_drop(&c);
			*out = owned(cJSON_CreateNull());
			return CM_OK;
		}
		if (n->k == N_FIELD) {
			if (cJSON_IsObject(c.j))
				v = cJSON_GetObjectItemCaseSensitive(c.j, n->s);
			else if (!strcmp(n->s, "length") && cJSON_IsArray(c.j))
				v = NULL;
			else {
				val_drop(&c);
				return rt_error(R, n, "cannot access field [%s] of a non-object",
				                n->s);
			}
		} else {
			if (has_effects(n->b))
				pin(&c);
			if ((rc = eval(R, n->b, &k))) {
				val_drop(&c);
				return rc;
			}
			if (cJSON_IsObject(c.j) && cJSON_IsString(k.j))
				v = cJSON_GetObjectItemCaseSensitive(c.j, k.j->valuestring);
			else if (cJSON_IsArray(c.j) && is_long(k.j)) {
				v = cJSON_GetArrayItem(c.j, (int)k.j->valuedouble);
				if (!v) {
					val_drop(&c);
					val_drop(&k);
					return rt_error(R, n, "index out of bounds%s", NULL);
				}
			} else {
				val_drop(&c);
				val_drop(&k);
				return rt_error(R, n, "cannot index this value%s", NULL);
			}
			val_drop(&k);
		}
		if (!v)
			*out = owned(cJSON_CreateNull());
		else if (c.owned)
			*out = owned(cJSON_Duplicate(v, true));
		else
			*out = (val){v, false};
		val_drop(&c);
		return CM_OK;
	}
	case N_CALL:
		return call(R, n, out);
	case N_LIST: {
		cJSON *a = cJSON_CreateArray();
		for (size_t i = 0; i < n->nargs; i++) {
			val e;
			if ((rc = eval(R, n->args[i], &e))) {
				cJSON_Delete(a);
				return rc;
			}
			cJSON_AddItemToArray(a, copy_of(&e));
		}
		*out = owned(a);
		return CM_OK;
	}
	case N_MAP:
		*out = owned(cJSON_CreateObject());
		return CM_OK;
	case N_UNARY: {
		val a;
		if ((rc = eval(R, n->a, &a)))
			return rc;
		if (n->op[0] == '!') {
			bool b;
			if (!truthy(R, n->a, a.j, &b)) {
				val_drop(&a);
				return R->err->code;
			}
			*out = owned(cJSON_CreateBool(!b));
		} else if (cJSON_IsNumber(a.j)) {
			*out = owned(num(-a.j->valuedouble, !is_long(a.j)));
		} else {
			val_drop(&a);
			return rt_error(R, n, "[-] needs a number%s", NULL);
		}
		val_drop(&a);
		return CM_OK;
	}
	case N_BINARY:
		return binop(R, n, out);
	case N_ASSIGN:
		return assign(R, n, out);
	case N_INCDEC:
		return incdec(R, n, out);
	case N_TERN: {
		val c;
		bool b;
		if ((rc = eval(R, n->a, &c)))
			return rc;
		if (!n->b) { /* elvis: a unless it is null */
			if (c.j && !cJSON_IsNull(c.j)) {
				*out = c;
				return CM_OK;
			}
			val_drop(&c);
			return eval(R, n->c, out);
		}
		if (!truthy(R, n->a, c.j, &b)) {
			val_drop(&c);
			return R->err->code;
		}
		val_drop(&c);
		return eval(R, b ? n->b : n->c, out);
	}
	default:
		return rt_error(R, n, "not an expression%s", NULL);
	}
}

static cm_err
exec(run *R, const node *n)
{
	cm_err rc;
	val v;
	if (R->returned)
		return CM_OK;
	if ((rc = step(R, n)))
		return rc;
	switch (n->k) {
	case N_BLOCK:
		for (size_t i = 0; i < n->nargs && !R->returned; i++)
			if ((rc = exec(R, n->args[i])))
				return rc;
		return CM_OK;
	case N_EXPR:
		if ((rc = eval(R, n->a, &v)))
			return rc;
		if (R->keep) {
			cJSON_Delete(R->result);
			R->result = copy_of(&v);
		} else
			val_drop(&v);
		return CM_OK;
	case N_DECL:
		cJSON_Delete(R->vars[n->slot]);
		R->vars[n->slot] = NULL;
		if (n->a) {
			if ((rc = eval(R, n->a, &v)))
				return rc;
			R->vars[n->slot] = copy_of(&v);
		} else {
			R->vars[n->slot] = cJSON_CreateNull();
		}
		return CM_OK;
	case N_IF: {
		bool b;
		if ((rc = eval(R, n->a, &v)))
			return rc;
		if (!truthy(R, n->a, v.j, &b)) {
			val_drop(&v);
			return R->err->code;
		}
		val_drop(&v);
		if (b)
			return exec(R, n->b);
		return n->c ? exec(R, n->c) : CM_OK;
	}
	case N_FOR:
		if (n->a) {
			if (n->a->k == N_DECL)
				rc = exec(R, n->a);
			else if (!(rc = eval(R, n->a, &v)))
				val_drop(&v);
			if (rc)
				return rc;
		}
		for (;;) {
			if ((rc = step(R, n)))
				return rc;
			if (n->b) {
				bool b;
				if ((rc = eval(R, n->b, &v)))
					return rc;
				if (!truthy(R, n->b, v.j, &b)) {
					val_drop(&v);
					return R->err->code;
				}
				val_drop(&v);
				if (!b)
					break;
			}
			if ((rc = exec(R, n->d)))
				return rc;
			if (R->returned)
				break;
			if (n->c) {
				if ((rc = eval(R, n->c, &v)))
					return rc;
				val_drop(&v);
			}
		}
		return CM_OK;
	case N_RETURN:
		if (n->a) {
			if ((rc = eval(R, n->a, &v)))
				return rc;
			if (R->keep) {
				cJSON_Delete(R->result);
				R->result = copy_of(&v);
			} else
				val_drop(&v);
		}
		R->returned = true;
		return CM_OK;
	default:
		return rt_error(R, n, "not a statement%s", NULL);
	}
}

cm_err
ps_run(const ps_script *s, cJSON *ctx, const cJSON *params, cm_error *err)
{
	run R;
	memset(&R, 0, sizeof(R));
	R.ctx = ctx;
	R.params = params;
	R.err = err;
	cm_err rc = exec(&R, s->root);
	for (int i = 0; i < MAX_VARS; i++)
		cJSON_Delete(R.vars[i]);
	if (!rc) {
		const cJSON *op = cJSON_GetObjectItemCaseSensitive(ctx, "op");
		if (op &&
		    !(cJSON_IsString(op) &&
		      (!strcmp(op->valuestring, "index") || !strcmp(op->valuestring, "create") ||
		       !strcmp(op->valuestring, "noop") || !strcmp(op->valuestring, "none") ||
		       !strcmp(op->valuestring, "delete"))))
			rc = cm_error_set_type(
			    err, CM_EINVAL, "script_exception",
			    "runtime error: ctx.op must be one of [index, create, noop, "
			    "delete]");
		else if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(ctx, "_source")))
			rc = cm_error_set_type(err, CM_EINVAL, "script_exception",
			                       "runtime error: ctx._source must stay an object");
	}
	return rc;
}

cm_err
ps_eval(const ps_script *s, const cJSON *params, cJSON **result, cm_error *err)
{
	run R;
	memset(&R, 0, sizeof(R));
	cJSON *ctx = cJSON_CreateObject();
	cJSON_AddItemToObject(ctx, "_source", cJSON_CreateObject());
	R.ctx = ctx;
	R.params = params;
	R.err = err;
	R.keep = true;
	cm_err rc = exec(&R, s->root);
	for (int i = 0; i < MAX_VARS; i++)
		cJSON_Delete(R.vars[i]);
	cJSON_Delete(ctx);
	if (rc) {
		cJSON_Delete(R.result);
		R.result = NULL;
	}
	*result = R.result;
	return rc;
}

cm_err
ps_exec(const ps_script *s, cJSON *ctx, const cJSON *params, cJSON **result, cm_error *err)
{
	run R;
	memset(&R, 0, sizeof(R));
	R.ctx = ctx;
	R.params = params;
	R.err = err;
	R.keep = result != NULL;
	cm_err rc = exec(&R, s->root);
	for (int i = 0; i < MAX_VARS; i++)
		cJSON_Delete(R.vars[i]);
	if (rc || !result) {
		cJSON_Delete(R.result);
		R.result = NULL;
	}
	if (result)
		*result = R.result;
	return rc;
}

cJSON *
ps_double(double d)
{
	return num(d, true);
}

cm_err
ps_from_json(const cJSON *v, ps_script **out, const cJSON **params, cm_error *err)
{
	const cJSON *src = v, *lang = NULL, *e;
	*out = NULL;
	*params = NULL;
	if (cJSON_IsObject(v)) {
		cJSON_ArrayForEach(e, v)
		{
			if (!strcmp(e->string, "source") || !strcmp(e->string, "inline"))
				src = e;
			else if (!strcmp(e->string, "lang"))
				lang = e;
			else if (!strcmp(e->string, "params"))
				*params = e;
			else if (!strcmp(e->string, "id"))
				return cm_error_set(
				    err, CM_EINVAL,
				    "stored scripts ([script.id]) are not supported by Shoal");
			else if (strcmp(e->string, "options"))
				return cm_error_set_type(err, CM_EPARSE, "parsing_exception",
				                         "[script] unknown field [%.60s]",
				                         e->string);
		}
		if (src == v)
			return cm_error_set_type(
			    err, CM_EPARSE, "parsing_exception",
			    "must specify either [source] for an inline script or "
			    "[id] for a stored script");
	}
	if (!cJSON_IsString(src))
		return cm_error_set_type(err, CM_EPARSE, "parsing_exception",
		                         "[script] must be a string or an object with [source]");
	if (lang && !(cJSON_IsString(lang) && !strcmp(lang->valuestring, "painless")))
		return cm_error_set(err, CM_EINVAL,
		                    "script_lang not supported [%.40s]: Shoal runs painless only",
		                    cJSON_IsString(lang) ? lang->valuestring : "?");
	if (*params && !cJSON_IsObject(*params))
		return cm_error_set_type(err, CM_EPARSE, "parsing_exception",
		                         "[params] must be an object");
	return ps_compile(src->valuestring, strlen(src->valuestring), out, NULL, err);
}
