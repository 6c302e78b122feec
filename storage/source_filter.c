/* _source filtering with Elasticsearch's rules (XContentMapValues.filter):
 * include and exclude patterns are '*' globs over dotted paths, a pattern
 * also matches everything below what it matches ("obj" keeps obj.x.y),
 * objects are kept when something inside survives, array elements are
 * filtered one by one. Works on the raw bytes in one pass, so the output
 * keeps the source's key order and number text exactly. */
#include <stdbool.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"
#include "st_types.h"

/* Here, not in search/, because a mapping's _source includes/excludes
 * filter what a segment stores; searches use it through sr_source_filter. */
#define T CM_MEM_STORAGE
#define MAX_NEST 512

/* One pattern against a path: accepted (the pattern matches the path or
 * a dot-bounded prefix of it) and live (some extension could be). */
static void
glob_eval(const char *pat, const char *s, size_t n, bool *accept, bool *live)
{
	size_t m = strlen(pat);
	if (!memchr(pat, '*', m)) {
		/* a literal: the path is the pattern or below it, or on the way */
		size_t k = n < m ? n : m;
		bool same = memcmp(pat, s, k) == 0;
		*accept = same && n >= m && (n == m || s[m] == '.');
		*live = *accept || (same && n < m);
		return;
	}
	unsigned char stack_a[256], stack_b[256];
	unsigned char *cur = m + 1 <= sizeof(stack_a) ? stack_a : cm_malloc(T, m + 1);
	unsigned char *nxt = m + 1 <= sizeof(stack_b) ? stack_b : cm_malloc(T, m + 1);
	bool any, dot_match = false;

	memset(cur, 0, m + 1);
	cur[0] = 1;
	for (size_t i = 0; i < m && cur[i] && pat[i] == '*'; i++)
		cur[i + 1] = 1;
	any = true;
	for (size_t j = 0; j < n && any; j++) {
		if (s[j] == '.' && cur[m])
			dot_match = true;
		memset(nxt, 0, m + 1);
		any = false;
		for (size_t i = 0; i < m; i++) {
			if (!cur[i])
				continue;
			if (pat[i] == '*')
				nxt[i] = 1;
			else if (pat[i] == s[j])
				nxt[i + 1] = 1;
		}
		/* closure: a '*' may match nothing */
		for (size_t i = 0; i < m; i++)
			if (nxt[i] && pat[i] == '*')
				nxt[i + 1] = 1;
		for (size_t i = 0; i <= m; i++)
			any |= nxt[i];
		unsigned char *t = cur;
		cur = nxt;
		nxt = t;
	}
	*accept = dot_match || (any && cur[m]);
	*live = *accept || any;
	if (cur != stack_a && cur != stack_b)
		cm_free(T, cur);
	if (nxt != stack_a && nxt != stack_b)
		cm_free(T, nxt);
}

static void
set_eval(char *const *pats, size_t np, const char *s, size_t n, bool *accept, bool *live)
{
	*accept = *live = false;
	for (size_t i = 0; i < np && !*accept; i++) {
		bool a, l;
		glob_eval(pats[i], s, n, &a, &l);
		*accept |= a;
		*live |= l;
	}
}

typedef struct sf {
	char *const *inc, *const *exc;
	size_t ni, ne;
	const char *s;
	size_t n, i;
	cm_buf *out;
	char *path;
	size_t path_len, path_cap;
	bool bad;
} sf;

typedef struct fst {
	bool inc_all;  /* everything below is included */
	bool exc_dead; /* no exclude can match below */
} fst;

static void
ws(sf *f)
{
	while (f->i < f->n && (f->s[f->i] == ' ' || f->s[f->i] == '\t' || f->s[f->i] == '\n' ||
	                       f->s[f->i] == '\r'))
		f->i++;
}

static void
path_put(sf *f, const char *p, size_t n)
{
	if (f->path_len + n + 1 > f->path_cap) {
		f->path_cap = (f->path_len + n + 1) * 2;
		f->path = cm_realloc(T, f->path, f->path_cap);
	}
	memcpy(f->path + f->path_len, p, n);
	f->path_len += n;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool
read_hex4(sf *f, size_t at, unsigned *cp)
{
	if (at + 4 > f->n)
		return false;
	*cp = 0;
	for (size_t k = at; k < at + 4; k++) {
		int h = hexval(f->s[k]);
		if (h < 0)
			return false;
		*cp = *cp * 16 + (unsigned)h;
	}
	return true;
}

/* Scans a string at f->i ('"'); when decode, appends its text to the path. */
static bool
scan_string(sf *f, bool decode)
{
	if (f->i >= f->n || f->s[f->i] != '"')
		return false;
	f->i++;
	size_t run = f->i;
	while (f->i < f->n) {
		unsigned char c = (unsigned char)f->s[f->i];
		if (c == '"') {
			if (decode)
				path_put(f, f->s + run, f->i - run);
			f->i++;
			return true;
		}
		if (c < 0x20)
			return false;
		if (c != '\\') {
			f->i++;
			continue;
		}
		if (decode)
			path_put(f, f->s + run, f->i - run);
		if (f->i + 1 >= f->n)
			return false;
		char e = f->s[f->i + 1];
		const char *simple = strchr("\"\\/bfnrt", e);
		if (e && simple) {
			static const char map[] = "\"\\/\b\f\n\r\t";
			if (decode)
				path_put(f, &map[simple - "\"\\/bfnrt"], 1);
			f->i += 2;
		} else if (e == 'u') {
			unsigned cp;
			if (!read_hex4(f, f->i + 2, &cp))
				return false;
			f->i += 6;
			if (cp >= 0xD800 && cp < 0xDC00 && f->i + 6 <= f->n && f->s[f->i] == '\\' &&
			    f->s[f->i + 1] == 'u') {
				unsigned lo;
				if (read_hex4(f, f->i + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					f->i += 6;
				}
			}
			if (decode) {
				char u[4];
				size_t un;
				if (cp < 0x80) {
					u[0] = (char)cp;
					un = 1;
				} else if (cp < 0x800) {
					u[0] = (char)(0xC0 | (cp >> 6));
					u[1] = (char)(0x80 | (cp & 0x3F));
					un = 2;
				} else if (cp < 0x10000) {
					u[0] = (char)(0xE0 | (cp >> 12));
					u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
					u[2] = (char)(0x80 | (cp & 0x3F));
					un = 3;
				} else {
					u[0] = (char)(0xF0 | (cp >> 18));
					u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
					u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
					u[3] = (char)(0x80 | (cp & 0x3F));
					un = 4;
				}
				path_put(f, u, un);
			}
		} else
			return false;
		run = f->i;
	}
	return false;
}

/* Skips one value, checking its syntax. */
static bool
skip_value(sf *f, int depth)
{
	if (depth > MAX_NEST)
		return false;
	ws(f);
	if (f->i >= f->n)
		return false;
	char c = f->s[f->i];
	if (c == '"')
		return scan_string(f, false);
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		f->i++;
		ws(f);
		if (f->i < f->n && f->s[f->i] == close) {
			f->i++;
			return true;
		}
		for (;;) {
			if (c == '{') {
				ws(f);
				if (!scan_string(f, false))
					return false;
				ws(f);
				if (f->i >= f->n || f->s[f->i] != ':')
					return false;
				f->i++;
			}
			if (!skip_value(f, depth + 1))
				return false;
			ws(f);
			if (f->i >= f->n)
				return false;
			if (f->s[f->i] == ',') {
				f->i++;
				continue;
			}
			if (f->s[f->i] != close)
				return false;
			f->i++;
			return true;
		}
	}
	size_t start = f->i;
	if (c == 't' || c == 'f' || c == 'n') {
		const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
		size_t l = strlen(lit);
		if (f->n - f->i < l || memcmp(f->s + f->i, lit, l))
			return false;
		f->i += l;
		return true;
	}
	while (f->i < f->n && strchr("+-0123456789.eE", f->s[f->i]))
		f->i++;
	return f->i > start;
}

static bool filter_object(sf *f, fst st, int depth, bool *nonempty);
static bool filter_array(sf *f, fst st, bool inc_here, int depth, bool *nonempty);

static void
states_at(sf *f, bool *inc_acc, bool *inc_live, bool *exc_acc, bool *exc_live, fst st)
{
	if (st.inc_all)
		*inc_acc = *inc_live = true;
	else
		set_eval(f->inc, f->ni, f->path, f->path_len, inc_acc, inc_live);
	if (st.exc_dead)
		*exc_acc = *exc_live = false;
	else
		set_eval(f->exc, f->ne, f->path, f->path_len, exc_acc, exc_live);
}

/* f->i at '{'. Writes the filtered object; *nonempty when a member kept. */
static bool
filter_object(sf *f, fst st, int depth, bool *nonempty)
{
	size_t base = f->path_len;
	bool first = true;
	if (depth > MAX_NEST)
		return false;
	f->i++; /* '{' */
	cm_buf_put_u8(f->out, '{');
	*nonempty = false;
	ws(f);
	if (f->i < f->n && f->s[f->i] == '}') {
		f->i++;
		cm_buf_put_u8(f->out, '}');
		return true;
	}
	for (;;) {
		ws(f);
		size_t key_start = f->i;
		f->path_len = base;
		if (!scan_string(f, true))
			return false;
		size_t key_end = f->i;
		ws(f);
		if (f->i >= f->n || f->s[f->i] != ':')
			return false;
		f->i++;
		ws(f);
		if (f->i >= f->n)
			return false;

		bool inc_acc, inc_live, exc_acc, exc_live;
		states_at(f, &inc_acc, &inc_live, &exc_acc, &exc_live, st);
		bool keep_whole = false, skip = !inc_live || exc_acc;
		fst sub = {.inc_all = st.inc_all, .exc_dead = st.exc_dead || !exc_live};
		if (!skip && inc_acc) {
			bool ea = false, el = false;
			if (!sub.exc_dead) {
				path_put(f, ".", 1);
				set_eval(f->exc, f->ne, f->path, f->path_len, &ea, &el);
				f->path_len--;
			}
			if (!el)
				keep_whole = true;
			else
				sub.inc_all = true;
		}
		size_t mark = f->out->len;
		if (!skip) {
			if (!first)
				cm_buf_put_u8(f->out, ',');
			cm_buf_put(f->out, f->s + key_start, key_end - key_start);
			cm_buf_put_u8(f->out, ':');
		}
		char c = f->s[f->i];
		bool kept = false;
		if (skip) {
			if (!skip_value(f, depth + 1))
				return false;
		} else if (keep_whole) {
			size_t vs = f->i;
			if (!skip_value(f, depth + 1))
				return false;
			cm_buf_put(f->out, f->s + vs, f->i - vs);
			kept = true;
		} else if (c == '{') {
			path_put(f, ".", 1);
			bool dead = false;
			if (!sub.inc_all) {
				bool a, l;
				set_eval(f->inc, f->ni, f->path, f->path_len, &a, &l);
				dead = !l;
			}
			if (!sub.exc_dead) {
				bool a, l;
				set_eval(f->exc, f->ne, f->path, f->path_len, &a, &l);
				sub.exc_dead = !l;
			}
			bool ne = false;
			if (dead) {
				if (!skip_value(f, depth + 1))
					return false;
			} else if (!filter_object(f, sub, depth + 1, &ne))
				return false;
			kept = !dead && (inc_acc || ne);
		} else if (c == '[') {
			bool ne = false;
			if (!filter_array(f, sub, inc_acc || sub.inc_all, depth + 1, &ne))
				return false;
			kept = inc_acc || ne;
		} else {
			size_t vs = f->i;
			if (!skip_value(f, depth + 1))
				return false;
			if (inc_acc) {
				cm_buf_put(f->out, f->s + vs, f->i - vs);
				kept = true;
			}
		}
		if (!skip && !kept)
			f->out->len = mark;
		if (kept) {
			first = false;
			*nonempty = true;
		}
		ws(f);
		if (f->i >= f->n)
			return false;
		if (f->s[f->i] == ',') {
			f->i++;
			continue;
		}
		if (f->s[f->i] != '}')
			return false;
		f->i++;
		f->path_len = base;
		cm_buf_put_u8(f->out, '}');
		return true;
	}
}

/* f->i at '['; the path is the array's field path. */
static bool
filter_array(sf *f, fst st, bool inc_here, int depth, bool *nonempty)
{
	bool first = true;
	size_t base = f->path_len;
	if (depth > MAX_NEST)
		return false;
	f->i++;
	cm_buf_put_u8(f->out, '[');
	*nonempty = false;
	ws(f);
	if (f->i < f->n && f->s[f->i] == ']') {
		f->i++;
		cm_buf_put_u8(f->out, ']');
		return true;
	}
	for (;;) {
		ws(f);
		if (f->i >= f->n)
			return false;
		size_t mark = f->out->len;
		if (!first)
			cm_buf_put_u8(f->out, ',');
		char c = f->s[f->i];
		bool kept = false, ne = false;
		if (c == '{') {
			fst sub = st;
			f->path_len = base;
			path_put(f, ".", 1);
			bool dead = false;
			if (!sub.inc_all) {
				bool a, l;
				set_eval(f->inc, f->ni, f->path, f->path_len, &a, &l);
				dead = !l;
			}
			if (!sub.exc_dead) {
				bool a, l;
				set_eval(f->exc, f->ne, f->path, f->path_len, &a, &l);
				sub.exc_dead = !l;
			}
			if (dead) {
				if (!skip_value(f, depth + 1))
					return false;
			} else if (!filter_object(f, sub, depth + 1, &ne))
				return false;
			f->path_len = base;
			kept = !dead && ne;
		} else if (c == '[') {
			if (!filter_array(f, st, inc_here, depth + 1, &ne))
				return false;
			kept = ne;
		} else {
			size_t vs = f->i;
			if (!skip_value(f, depth + 1))
				return false;
			if (inc_here) {
				cm_buf_put(f->out, f->s + vs, f->i - vs);
				kept = true;
			}
		}
		if (!kept)
			f->out->len = mark;
		else {
			first = false;
			*nonempty = true;
		}
		ws(f);
		if (f->i >= f->n)
			return false;
		if (f->s[f->i] == ',') {
			f->i++;
			continue;
		}
		if (f->s[f->i] != ']')
			return false;
		f->i++;
		cm_buf_put_u8(f->out, ']');
		return true;
	}
}

cm_err
st_source_filter(const char *src, size_t len, char *const *includes, size_t ni,
                 char *const *excludes, size_t ne, cm_buf *out)
{
	sf f = {
	    .inc = includes, .exc = excludes, .ni = ni, .ne = ne, .s = src, .n = len, .out = out};
	size_t start = out->len;
	bool ok, nonempty;
	ws(&f);
	if (ni == 0 && ne == 0) {
		ok = skip_value(&f, 0);
		if (ok)
			cm_buf_put(out, src, len);
	} else if (f.i < f.n && src[f.i] == '{') {
		fst st = {.inc_all = ni == 0, .exc_dead = ne == 0};
		ok = filter_object(&f, st, 0, &nonempty);
	} else
		ok = false;
	if (ok) {
		ws(&f);
		ok = f.i == f.n;
	}
	cm_free(T, f.path);
	if (!ok) {
		out->len = start;
		return CM_EPARSE;
	}
	return CM_OK;
}
