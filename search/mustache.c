/* The mustache renderer of search templates (sr_mustache_render, sr.h). A recursive
 * walk over the template text: sections render their body once per
 * context, found by scanning for the matching close tag. */
#include "sr.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "jsonw.h"

#define MAX_DEPTH 64        /* nested sections */
#define MAX_OUT (16u << 20) /* a rendered template's size bound */

typedef struct mctx {
	const cJSON *stack[MAX_DEPTH + 1];
	int depth;
	const char *src; /* the whole template, for positions */
	cm_error *err;
	cm_buf *out;
} mctx;

static cm_err
fail(mctx *m, const char *at, const char *what)
{
	int line = 1;
	for (const char *p = m->src; p < at; p++)
		line += *p == '\n';
	return cm_error_set_type(m->err, CM_EINVAL, "general_script_exception",
	                         "Failed to compile inline script using lang [mustache]: %s "
	                         "@[query-template:%d]",
	                         what, line);
}

/* A dotted name through the context stack, innermost first for its
 * first part (mustache's lookup). */
static const cJSON *
lookup(const mctx *m, const char *name, size_t n)
{
	if (n == 1 && name[0] == '.')
		return m->stack[m->depth];
	const char *dot = memchr(name, '.', n);
	size_t first = dot ? (size_t)(dot - name) : n;
	const cJSON *v = NULL;
	for (int d = m->depth; d >= 0 && !v; d--) {
		const cJSON *c = m->stack[d];
		if (!cJSON_IsObject(c))
			continue;
		for (const cJSON *e = c->child; e; e = e->next)
			if (strlen(e->string) == first && !memcmp(e->string, name, first)) {
				v = e;
				break;
			}
	}
	while (v && dot) {
		const char *p = dot + 1;
		dot = memchr(p, '.', n - (size_t)(p - name));
		size_t len = dot ? (size_t)(dot - p) : n - (size_t)(p - name);
		const cJSON *next = NULL;
		if (cJSON_IsObject(v)) {
			for (const cJSON *e = v->child; e; e = e->next)
				if (strlen(e->string) == len && !memcmp(e->string, p, len)) {
					next = e;
					break;
				}
		} else if (cJSON_IsArray(v) && len > 0 && len < 10) {
			/* list.0: an item by position, as mustache.java allows */
			int idx = 0;
			bool digits = true;
			for (size_t i = 0; i < len; i++) {
				digits &= p[i] >= '0' && p[i] <= '9';
				idx = idx * 10 + (p[i] - '0');
			}
			next = digits ? cJSON_GetArrayItem(v, idx) : NULL;
		}
		v = next;
	}
	return v;
}

static void
put_escaped(cm_buf *b, const char *s, size_t n)
{
	/* a JSON string's inside: sr_jw_str adds quotes, strip them */
	size_t at = b->len;
	sr_jw_str(b, s, n);
	memmove(b->data + at, b->data + at + 1, b->len - at - 2);
	b->len -= 2;
}

static void
put_json(cm_buf *b, const cJSON *v)
{
	char *s = cJSON_PrintUnformatted(v);
	if (s) {
		cm_buf_put(b, s, strlen(s));
		cJSON_free(s);
	}
}

static void
put_value(cm_buf *b, const cJSON *v, bool escape)
{
	if (!v || cJSON_IsNull(v))
		return;
	if (cJSON_IsString(v)) {
		if (escape)
			put_escaped(b, v->valuestring, strlen(v->valuestring));
		else
			cm_buf_put(b, v->valuestring, strlen(v->valuestring));
	} else if (cJSON_IsNumber(v)) {
		char t[32];
		sr_jw_number_text(v->valuedouble, t, sizeof t);
		cm_buf_put(b, t, strlen(t));
	} else if (cJSON_IsBool(v)) {
		cm_buf_put(b, cJSON_IsTrue(v) ? "true" : "false", cJSON_IsTrue(v) ? 4 : 5);
	} else {
		put_json(b, v);
	}
}

static bool
falsy(const cJSON *v)
{
	return !v || cJSON_IsNull(v) || cJSON_IsFalse(v) || (cJSON_IsArray(v) && !v->child);
}

/* A tag {{...}} starting at p (p[0..1] == "{{"): its kind, name and end. */
typedef struct tag {
	char kind;        /* 0 variable, '{' or '&' unescaped, '#', '^', '/', '!', '>', '=' */
	const char *name; /* trimmed */
	size_t nlen;
	const char *end; /* just past the closing braces */
} tag;

static bool
read_tag(const char *p, const char *lim, tag *t)
{
	const char *q = p + 2;
	t->kind = 0;
	if (q < lim && strchr("{&#^/!>=", *q))
		t->kind = *q++;
	const char *close = NULL;
	for (const char *s = q; s + 1 < lim; s++)
		if (s[0] == '}' && s[1] == '}') {
			close = s;
			break;
		}
	if (!close)
		return false;
	t->end = close + 2;
	if (t->kind == '{') {
		if (t->end >= lim || *t->end != '}')
			return false;
		t->end++;
	}
	const char *ne = close;
	if (t->kind == '=' && ne > q && ne[-1] == '=')
		ne--;
	while (q < ne && (*q == ' ' || *q == '\t'))
		q++;
	while (ne > q && (ne[-1] == ' ' || ne[-1] == '\t'))
		ne--;
	t->name = q;
	t->nlen = (size_t)(ne - q);
	return true;
}

static const char *
find_open(const char *p, const char *lim)
{
	for (const char *s = p; s + 1 < lim; s++)
		if (s[0] == '{' && s[1] == '{')
			return s;
	return NULL;
}

/* The close tag {{/name}} matching the section opened before p, skipping
 * nested sections of any name: sets *body_end (start of the close tag)
 * and *after (past it). */
static bool
find_close(const char *p, const char *lim, const char *name, size_t n, const char **body_end,
           const char **after)
{
	int level = 0;
	while (p < lim) {
		const char *o = find_open(p, lim);
		if (!o)
			return false;
		tag t;
		if (!read_tag(o, lim, &t))
			return false;
		if (t.kind == '#' || t.kind == '^') {
			level++;
		} else if (t.kind == '/') {
			if (level == 0) {
				if (t.nlen != n || memcmp(t.name, name, n))
					return false;
				*body_end = o;
				*after = t.end;
				return true;
			}
			level--;
		}
		p = t.end;
	}
	return false;
}

static cm_err render(mctx *m, const char *p, const char *lim);

static cm_err
section(mctx *m, const tag *t, const char *body, const char *body_end)
{
	cm_buf *b = m->out;
	if (t->kind == '#' && t->nlen == 6 && !memcmp(t->name, "toJson", 6)) {
		/* the body names a value: write it as JSON */
		const char *s = body, *e = body_end;
		while (s < e && (*s == ' ' || *s == '\n' || *s == '\t'))
			s++;
		while (e > s && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\t'))
			e--;
		const cJSON *v = lookup(m, s, (size_t)(e - s));
		if (v)
			put_json(b, v);
		else
			cm_buf_put(b, "null", 4);
		return CM_OK;
	}
	if (t->kind == '#' && t->nlen == 4 && !memcmp(t->name, "join", 4)) {
		const char *s = body, *e = body_end;
		while (s < e && *s == ' ')
			s++;
		while (e > s && e[-1] == ' ')
			e--;
		const cJSON *v = lookup(m, s, (size_t)(e - s)), *x;
		const cJSON *arr = cJSON_IsArray(v) ? v : NULL;
		bool first = true;
		cJSON_ArrayForEach(x, arr)
		{
			if (!first)
				cm_buf_put_u8(b, ',');
			first = false;
			put_value(b, x, true);
		}
		return CM_OK;
	}
	const cJSON *v = lookup(m, t->name, t->nlen);
	if (t->kind == '^')
		return falsy(v) ? render(m, body, body_end) : CM_OK;
	if (falsy(v))
		return CM_OK;
	if (m->depth >= MAX_DEPTH)
		return fail(m, t->name, "sections nested too deeply");
	cm_err rc = CM_OK;
	if (cJSON_IsArray(v)) {
		const cJSON *x;
		cJSON_ArrayForEach(x, v)
		{
			m->stack[++m->depth] = x;
			rc = render(m, body, body_end);
			m->depth--;
			if (rc)
				break;
		}
		return rc;
	}
	m->stack[++m->depth] = v;
	rc = render(m, body, body_end);
	m->depth--;
	return rc;
}

static cm_err
render(mctx *m, const char *p, const char *lim)
{
	cm_buf *b = m->out;
	while (p < lim) {
		if (b->len > MAX_OUT)
			return fail(m, p, "the rendered template is too large");
		const char *o = find_open(p, lim);
		if (!o) {
			cm_buf_put(b, p, (size_t)(lim - p));
			return CM_OK;
		}
		cm_buf_put(b, p, (size_t)(o - p));
		tag t;
		if (!read_tag(o, lim, &t))
			return fail(m, o, "Improperly closed variable");
		switch (t.kind) {
		case '!':
			break;
		case '>':
			return fail(m, o, "partials are not supported");
		case '=':
			return fail(m, o, "changing delimiters is not supported");
		case '/':
			return fail(m, o, "Unopened section closed");
		case '#':
		case '^': {
			const char *body_end, *after;
			if (!t.nlen)
				return fail(m, o, "Empty section name");
			if (!find_close(t.end, lim, t.name, t.nlen, &body_end, &after))
				return fail(m, o, "Section not closed or closed by another name");
			cm_err rc = section(m, &t, t.end, body_end);
			if (rc)
				return rc;
			p = after;
			continue;
		}
		default:
			if (!t.nlen)
				return fail(m, o, "Empty variable name");
			put_value(b, lookup(m, t.name, t.nlen), t.kind == 0);
		}
		p = t.end;
	}
	return CM_OK;
}

cm_err
sr_mustache_render(const char *tmpl, size_t len, const cJSON *params, cm_buf *out, cm_error *err)
{
	mctx m;
	memset(&m, 0, sizeof m);
	m.stack[0] = params;
	m.src = tmpl;
	m.err = err;
	m.out = out;
	return render(&m, tmpl, tmpl + len);
}
