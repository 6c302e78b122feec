/* Date-math index names, as Elasticsearch takes them wherever an index
 * name is read: "<logs-{now/d}>" is logs-2026.12.01 today;
 * "<logs-{now/M{yyyy.MM}}>", "<logs-{now/d{yyyy.MM.dd|+01:00}}>" give
 * the format (a Java pattern, default yyyy.MM.dd) and the time zone the
 * date is rounded and printed in; "\{" and "\}" are literal braces. A
 * comma list may mix such names with plain ones. */
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"
#include "../search/sr.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define MAX_PART 256

static cm_err
bad(const char *expr, const char *why, cm_error *err)
{
	return cm_error_set_type(err, CM_EPARSE, "parse_exception",
	                         "invalid dynamic name expression [%.200s]. %s", expr, why);
}

/* One "<...>" element (without a list) into out. */
static cm_err
resolve_one(const char *e, size_t n, cm_buf *out, cm_error *err)
{
	char whole[MAX_PART * 2];
	snprintf(whole, sizeof(whole), "%.*s", (int)(n < sizeof(whole) - 1 ? n : sizeof(whole) - 1), e);
	if (n < 2 || e[0] != '<' || e[n - 1] != '>') {
		cm_buf_put(out, e, n);
		return CM_OK;
	}
	for (size_t i = 1; i + 1 < n; i++) {
		char c = e[i];
		if (c == '\\' && i + 2 < n) {
			cm_buf_put_u8(out, (uint8_t)e[++i]);
			continue;
		}
		if (c == '}')
			return bad(whole, "invalid character `}` outside a date math expression", err);
		if (c != '{') {
			cm_buf_put_u8(out, (uint8_t)c);
			continue;
		}
		/* {math} or {math{format|tz}} */
		char math[MAX_PART] = "", fmt[MAX_PART] = "yyyy.MM.dd", tz[MAX_PART] = "";
		size_t j = i + 1, ml = 0;
		while (j + 1 < n && e[j] != '{' && e[j] != '}' && ml + 1 < sizeof(math))
			math[ml++] = e[j++];
		math[ml] = 0;
		if (j + 1 >= n)
			return bad(whole, "missing closing `}` for date math format", err);
		if (e[j] == '{') {
			size_t k = j + 1, fl = 0;
			char spec[MAX_PART];
			while (k + 1 < n && e[k] != '}' && fl + 1 < sizeof(spec))
				spec[fl++] = e[k++];
			spec[fl] = 0;
			if (k + 1 >= n || e[k] != '}')
				return bad(whole, "missing closing `}` for date math format", err);
			char *bar = strchr(spec, '|');
			if (bar) {
				*bar = 0;
				snprintf(tz, sizeof(tz), "%s", bar + 1);
			}
			if (!spec[0])
				return bad(whole, "missing date format", err);
			snprintf(fmt, sizeof(fmt), "%s", spec);
			j = k + 1;
		}
		if (j + 1 >= n || e[j] != '}')
			return bad(whole, "missing closing `}` for date math expression", err);
		if (strncmp(math, "now", 3))
			return bad(whole, "only date math based on [now] is supported", err);
		int64_t ms;
		char date[128];
		cm_error e2;
		cm_error_clear(&e2);
		if (sr_date_parse(math, NULL, tz[0] ? tz : NULL, &ms, &e2))
			return bad(whole, tz[0] && e2.code ? e2.reason : "invalid date math", err);
		if (sr_date_format(ms, fmt, tz[0] ? tz : NULL, date, sizeof(date), &e2))
			return bad(whole, e2.reason, err);
		cm_buf_put(out, date, strlen(date));
		i = j;
	}
	return CM_OK;
}

cm_err
co_date_math_names(const char *expr, char **out, cm_error *err)
{
	cm_buf b;
	cm_buf_init(&b, MEM);
	*out = NULL;
	const char *p = expr;
	for (;;) {
		/* a comma ends an element, except inside braces */
		const char *q = p;
		int depth = 0;
		while (*q && (depth || *q != ',')) {
			if (*q == '\\' && q[1])
				q++;
			else if (*q == '{')
				depth++;
			else if (*q == '}' && depth)
				depth--;
			q++;
		}
		cm_err rc = resolve_one(p, (size_t)(q - p), &b, err);
		if (rc) {
			cm_buf_free(&b);
			return rc;
		}
		if (!*q)
			break;
		cm_buf_put_u8(&b, ',');
		p = q + 1;
	}
	cm_buf_put_u8(&b, 0);
	*out = (char *)b.data;
	return CM_OK;
}
