/* Grok: the pattern library (written for Shoal after the names and
 * meanings of the Logstash/Elasticsearch legacy patterns, not copied), the
 * expansion of %{...} references into one PCRE2 regex with a named group
 * per captured field, and matching. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "co_grok.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"

#define MEM CM_MEM_COORDINATOR
#define MAX_NEST 64             /* references inside references */
#define MAX_EXPANDED (1u << 20) /* bytes of one expanded regex */
#define MAX_CAPS 1024           /* captured fields of one pattern */
#define MATCH_LIMIT 5000000     /* PCRE2 backtracking steps per match */

typedef struct grok_def {
	const char *name, *pattern;
} grok_def;

/* clang-format off */
static const grok_def LIBRARY[] = {
    {"USERNAME", "[a-zA-Z0-9._-]+"},
    {"USER", "%{USERNAME}"},
    {"EMAILLOCALPART", "[a-zA-Z0-9!#$%&'*+\\-/=?^_`{|}~]{1,64}(?:\\.[a-zA-Z0-9!#$%&'*+\\-/=?^_`{|}~]{1,62}){0,63}"},
    {"EMAILADDRESS", "%{EMAILLOCALPART}@%{HOSTNAME}"},
    {"INT", "(?:[+-]?(?:[0-9]+))"},
    {"BASE10NUM", "(?<![0-9.+-])(?>[+-]?(?:(?:[0-9]+(?:\\.[0-9]+)?)|(?:\\.[0-9]+)))"},
    {"NUMBER", "(?:%{BASE10NUM})"},
    {"BASE16NUM", "(?<![0-9A-Fa-f])(?:[+-]?(?:0x)?(?:[0-9A-Fa-f]+))"},
    {"BASE16FLOAT", "\\b(?<![0-9A-Fa-f.])(?:[+-]?(?:0x)?(?:(?:[0-9A-Fa-f]+(?:\\.[0-9A-Fa-f]*)?)|(?:\\.[0-9A-Fa-f]+)))\\b"},
    {"POSINT", "\\b(?:[1-9][0-9]*)\\b"},
    {"NONNEGINT", "\\b(?:[0-9]+)\\b"},
    {"WORD", "\\b\\w+\\b"},
    {"NOTSPACE", "\\S+"},
    {"SPACE", "\\s*"},
    {"DATA", ".*?"},
    {"GREEDYDATA", ".*"},
    {"QUOTEDSTRING", "(?>(?<!\\\\)(?>\"(?>\\\\.|[^\\\\\"]+)+\"|\"\"|(?>'(?>\\\\.|[^\\\\']+)+')|''|(?>`(?>\\\\.|[^\\\\`]+)+`)|``))"},
    {"QS", "%{QUOTEDSTRING}"},
    {"UUID", "[A-Fa-f0-9]{8}-(?:[A-Fa-f0-9]{4}-){3}[A-Fa-f0-9]{12}"},
    {"URN", "urn:[0-9A-Za-z][0-9A-Za-z-]{0,31}:(?:%[0-9a-fA-F]{2}|[0-9A-Za-z()+,.:=@;$_!*'/?#-])+"},
    {"MAC", "(?:%{CISCOMAC}|%{WINDOWSMAC}|%{COMMONMAC})"},
    {"CISCOMAC", "(?:(?:[A-Fa-f0-9]{4}\\.){2}[A-Fa-f0-9]{4})"},
    {"WINDOWSMAC", "(?:(?:[A-Fa-f0-9]{2}-){5}[A-Fa-f0-9]{2})"},
    {"COMMONMAC", "(?:(?:[A-Fa-f0-9]{2}:){5}[A-Fa-f0-9]{2})"},
    {"IPV6", "(?:(?:[0-9A-Fa-f]{1,4}:){7}(?:[0-9A-Fa-f]{1,4}|:)|(?:[0-9A-Fa-f]{1,4}:){6}%{IPV4}|(?:[0-9A-Fa-f]{1,4}:){1,5}:%{IPV4}|::(?:[Ff]{4}(?::0{1,4})?:)?%{IPV4}|(?:[0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}|(?:[0-9A-Fa-f]{1,4}:){1,5}(?::[0-9A-Fa-f]{1,4}){1,2}|(?:[0-9A-Fa-f]{1,4}:){1,4}(?::[0-9A-Fa-f]{1,4}){1,3}|(?:[0-9A-Fa-f]{1,4}:){1,3}(?::[0-9A-Fa-f]{1,4}){1,4}|(?:[0-9A-Fa-f]{1,4}:){1,2}(?::[0-9A-Fa-f]{1,4}){1,5}|[0-9A-Fa-f]{1,4}:(?::[0-9A-Fa-f]{1,4}){1,6}|:(?:(?::[0-9A-Fa-f]{1,4}){1,7}|:)|(?:[0-9A-Fa-f]{1,4}:){1,7}:)(?:%[0-9A-Za-z]+)?"},
    {"IPV4", "(?<![0-9])(?:(?:[0-1]?[0-9]{1,2}|2[0-4][0-9]|25[0-5])[.](?:[0-1]?[0-9]{1,2}|2[0-4][0-9]|25[0-5])[.](?:[0-1]?[0-9]{1,2}|2[0-4][0-9]|25[0-5])[.](?:[0-1]?[0-9]{1,2}|2[0-4][0-9]|25[0-5]))(?![0-9])"},
    {"IP", "(?:%{IPV6}|%{IPV4})"},
    {"HOSTNAME", "\\b(?:[0-9A-Za-z][0-9A-Za-z-]{0,62})(?:\\.(?:[0-9A-Za-z][0-9A-Za-z-]{0,62}))*(?:\\.?|\\b)"},
    {"IPORHOST", "(?:%{IP}|%{HOSTNAME})"},
    {"HOSTPORT", "%{IPORHOST}:%{POSINT}"},
    {"PATH", "(?:%{UNIXPATH}|%{WINPATH})"},
    {"UNIXPATH", "(?:/(?:[\\w_%!$@:.,+~-]+|\\\\.)*)+"},
    {"TTY", "(?:/dev/(?:pts|tty(?:[pq])?)(?:\\w+)?/?(?:[0-9]+))"},
    {"WINPATH", "(?>[A-Za-z]+:|\\\\)(?:\\\\[^\\\\?*]*)+"},
    {"URIPROTO", "[A-Za-z](?:[A-Za-z0-9+\\-.]+)+"},
    {"URIHOST", "%{IPORHOST}(?::%{POSINT:port})?"},
    {"URIPATH", "(?:/[A-Za-z0-9$.+!*'(){},~:;=@#%&_\\-]*)+"},
    {"URIPARAM", "\\?[A-Za-z0-9$.+!*'|(){},~@#%&/=:;_?\\-\\[\\]<>]*"},
    {"URIPATHPARAM", "%{URIPATH}(?:%{URIPARAM})?"},
    {"URI", "%{URIPROTO}://(?:%{USER}(?::[^@]*)?@)?(?:%{URIHOST})?(?:%{URIPATHPARAM})?"},
    {"MONTH", "\\b(?:[Jj]an(?:uary|uar)?|[Ff]eb(?:ruary|ruar)?|[Mm](?:a|ä)?r(?:ch|z)?|[Aa]pr(?:il)?|[Mm]a(?:y|i)?|[Jj]un(?:e|i)?|[Jj]ul(?:y|i)?|[Aa]ug(?:ust)?|[Ss]ep(?:tember)?|[Oo](?:c|k)?t(?:ober)?|[Nn]ov(?:ember)?|[Dd]e(?:c|z)(?:ember)?)\\b"},
    {"MONTHNUM", "(?:0?[1-9]|1[0-2])"},
    {"MONTHNUM2", "(?:0[1-9]|1[0-2])"},
    {"MONTHDAY", "(?:(?:0[1-9])|(?:[12][0-9])|(?:3[01])|[1-9])"},
    {"DAY", "(?:Mon(?:day)?|Tue(?:sday)?|Wed(?:nesday)?|Thu(?:rsday)?|Fri(?:day)?|Sat(?:urday)?|Sun(?:day)?)"},
    {"YEAR", "(?>\\d\\d){1,2}"},
    {"HOUR", "(?:2[0123]|[01]?[0-9])"},
    {"MINUTE", "(?:[0-5][0-9])"},
    {"SECOND", "(?:(?:[0-5]?[0-9]|60)(?:[:.,][0-9]+)?)"},
    {"TIME", "(?<![0-9])%{HOUR}:%{MINUTE}(?::%{SECOND})(?![0-9])"},
    {"DATE_US", "%{MONTHNUM}[/-]%{MONTHDAY}[/-]%{YEAR}"},
    {"DATE_EU", "%{MONTHDAY}[./-]%{MONTHNUM}[./-]%{YEAR}"},
    {"ISO8601_TIMEZONE", "(?:Z|[+-]%{HOUR}(?::?%{MINUTE}))"},
    {"ISO8601_SECOND", "(?:%{SECOND}|60)"},
    {"TIMESTAMP_ISO8601", "%{YEAR}-%{MONTHNUM}-%{MONTHDAY}[T ]%{HOUR}:?%{MINUTE}(?::?%{SECOND})?%{ISO8601_TIMEZONE}?"},
    {"DATE", "%{DATE_US}|%{DATE_EU}"},
    {"DATESTAMP", "%{DATE}[- ]%{TIME}"},
    {"TZ", "(?:[APMCE][SD]T|UTC)"},
    {"DATESTAMP_RFC822", "%{DAY} %{MONTH} %{MONTHDAY} %{YEAR} %{TIME} %{TZ}"},
    {"DATESTAMP_RFC2822", "%{DAY}, %{MONTHDAY} %{MONTH} %{YEAR} %{TIME} %{ISO8601_TIMEZONE}"},
    {"DATESTAMP_OTHER", "%{DAY} %{MONTH} %{MONTHDAY} %{TIME} %{TZ} %{YEAR}"},
    {"DATESTAMP_EVENTLOG", "%{YEAR}%{MONTHNUM2}%{MONTHDAY}%{HOUR}%{MINUTE}%{SECOND}"},
    {"HTTPDATE", "%{MONTHDAY}/%{MONTH}/%{YEAR}:%{TIME} %{INT}"},
    {"SYSLOGTIMESTAMP", "%{MONTH} +%{MONTHDAY} %{TIME}"},
    {"PROG", "[\\x21-\\x5a\\x5c\\x5e-\\x7e]+"},
    {"SYSLOGPROG", "%{PROG:program}(?:\\[%{POSINT:pid}\\])?"},
    {"SYSLOGHOST", "%{IPORHOST}"},
    {"SYSLOGFACILITY", "<%{NONNEGINT:facility}.%{NONNEGINT:priority}>"},
    {"SYSLOGBASE", "%{SYSLOGTIMESTAMP:timestamp} (?:%{SYSLOGFACILITY} )?%{SYSLOGHOST:logsource} %{SYSLOGPROG}:"},
    {"LOGLEVEL", "(?:[Aa]lert|ALERT|[Tt]race|TRACE|[Dd]ebug|DEBUG|[Nn]otice|NOTICE|[Ii]nfo?(?:rmation)?|INFO?(?:RMATION)?|[Ww]arn?(?:ing)?|WARN?(?:ING)?|[Ee]rr?(?:or)?|ERR?(?:OR)?|[Cc]rit?(?:ical)?|CRIT?(?:ICAL)?|[Ff]atal|FATAL|[Ss]evere|SEVERE|EMERG(?:ENCY)?|[Ee]merg(?:ency)?)"},
    {"HTTPDUSER", "%{EMAILADDRESS}|%{USER}"},
    {"HTTPDERROR_DATE", "%{DAY} %{MONTH} %{MONTHDAY} %{TIME} %{YEAR}"},
    {"COMMONAPACHELOG", "%{IPORHOST:clientip} %{HTTPDUSER:ident} %{USER:auth} \\[%{HTTPDATE:timestamp}\\] \"(?:%{WORD:verb} %{NOTSPACE:request}(?: HTTP/%{NUMBER:httpversion})?|%{DATA:rawrequest})\" %{NUMBER:response} (?:%{NUMBER:bytes}|-)"},
    {"COMBINEDAPACHELOG", "%{COMMONAPACHELOG} %{QS:referrer} %{QS:agent}"},
};
/* clang-format on */

typedef enum { CAP_STRING, CAP_INT, CAP_FLOAT, CAP_BOOL } cap_type;

typedef struct grok_cap {
	int group; /* PCRE2 group number */
	char *field;
	cap_type type;
} grok_cap;

typedef struct grok_expr {
	pcre2_code *re;
	grok_cap *caps;
	size_t ncaps;
} grok_expr;

struct co_grok {
	grok_expr *ex;
	size_t n;
};

/* The expansion of one pattern: the regex text and the fields in the
 * order of their generated groups (_g0, _g1, ...). */
typedef struct expansion {
	cm_buf out;
	char **fields;
	cap_type *types;
	size_t nfields;
	const char *stack[MAX_NEST + 1];
	int depth;
	const cJSON *defs;
	char why[512];
} expansion;

const char *
co_grok_builtin(const char *name)
{
	for (size_t i = 0; i < sizeof(LIBRARY) / sizeof(LIBRARY[0]); i++)
		if (!strcmp(LIBRARY[i].name, name))
			return LIBRARY[i].pattern;
	return NULL;
}

static int
def_cmp(const void *a, const void *b)
{
	return strcmp(((const grok_def *)a)->name, ((const grok_def *)b)->name);
}

cJSON *
co_grok_library(bool sorted)
{
	size_t n = sizeof(LIBRARY) / sizeof(LIBRARY[0]);
	grok_def *v = cm_malloc(MEM, sizeof(LIBRARY));
	memcpy(v, LIBRARY, sizeof(LIBRARY));
	if (sorted)
		qsort(v, n, sizeof(grok_def), def_cmp);
	cJSON *j = cJSON_CreateObject();
	for (size_t i = 0; i < n; i++)
		cJSON_AddStringToObject(j, v[i].name, v[i].pattern);
	cm_free(MEM, v);
	return j;
}

static const char *
definition(const expansion *x, const char *name)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(x->defs, name);
	if (cJSON_IsString(d))
		return d->valuestring;
	return co_grok_builtin(name);
}

/* "[a][b]" is ES's (Logstash's) way of writing "a.b". */
static char *
field_name(const char *s, size_t n)
{
	if (n < 2 || s[0] != '[')
		return cm_strndup(MEM, s, n);
	cm_buf b;
	cm_buf_init(&b, MEM);
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '[') {
			if (b.len)
				cm_buf_put_u8(&b, '.');
		} else if (s[i] != ']') {
			cm_buf_put_u8(&b, (uint8_t)s[i]);
		}
	}
	cm_buf_put_u8(&b, 0);
	return (char *)b.data;
}

static cap_type
type_of(const char *s, size_t n)
{
	if ((n == 3 && !memcmp(s, "int", 3)) || (n == 4 && !memcmp(s, "long", 4)))
		return CAP_INT;
	if ((n == 5 && !memcmp(s, "float", 5)) || (n == 6 && !memcmp(s, "double", 6)))
		return CAP_FLOAT;
	if (n == 7 && !memcmp(s, "boolean", 7))
		return CAP_BOOL;
	return CAP_STRING;
}

static bool expand(expansion *x, const char *pat);

/* %{NAME[:field[:type]]} at *p (past "%{" is r, up to the '}' at end). */
static bool
reference(expansion *x, const char *r, const char *end)
{
	const char *c1 = memchr(r, ':', (size_t)(end - r));
	const char *nend = c1 ? c1 : end;
	char name[128];
	size_t nl = (size_t)(nend - r);
	if (nl >= sizeof(name))
		nl = sizeof(name) - 1;
	memcpy(name, r, nl);
	name[nl] = 0;
	const char *def = definition(x, name);
	if (!def) {
		snprintf(x->why, sizeof(x->why),
		         "Unable to find pattern [%s] in Grok's pattern dictionary", name);
		return false;
	}
	for (int i = 0; i < x->depth; i++)
		if (!strcmp(x->stack[i], name)) {
			snprintf(x->why, sizeof(x->why),
			         "circular reference in pattern [%s][%.200s]", name, def);
			return false;
		}
	if (x->depth >= MAX_NEST) {
		snprintf(x->why, sizeof(x->why), "pattern [%s] nests more than %d references deep",
		         name, MAX_NEST);
		return false;
	}
	if (c1 && c1 + 1 < end && c1[1] != ':') { /* %{NAME:} names no field */
		const char *f = c1 + 1;
		const char *c2 = memchr(f, ':', (size_t)(end - f));
		const char *fend = c2 ? c2 : end;
		if (x->nfields >= MAX_CAPS) {
			snprintf(x->why, sizeof(x->why), "more than %d captured fields", MAX_CAPS);
			return false;
		}
		x->fields = cm_realloc(MEM, x->fields, (x->nfields + 1) * sizeof(char *));
		x->types = cm_realloc(MEM, x->types, (x->nfields + 1) * sizeof(cap_type));
		x->fields[x->nfields] = field_name(f, (size_t)(fend - f));
		x->types[x->nfields] = c2 ? type_of(c2 + 1, (size_t)(end - c2 - 1)) : CAP_STRING;
		char open[32];
		snprintf(open, sizeof(open), "(?<_g%zu>", x->nfields++);
		cm_buf_put(&x->out, open, strlen(open));
	} else {
		cm_buf_put(&x->out, "(?:", 3);
	}
	x->stack[x->depth++] = name;
	bool ok = expand(x, def);
	x->depth--;
	cm_buf_put_u8(&x->out, ')');
	return ok;
}

static bool
expand(expansion *x, const char *pat)
{
	const char *s = pat, *o;
	while ((o = strstr(s, "%{"))) {
		const char *r = o + 2, *end = r;
		while (*end && (isalnum((unsigned char)*end) || strchr("_-:.[]@", *end)))
			end++;
		cm_buf_put(&x->out, s, (size_t)(o - s));
		if (*end != '}' || end == r || *r == ':') { /* not a reference: literal text */
			cm_buf_put(&x->out, o, 2);
			s = r;
			continue;
		}
		if (!reference(x, r, end))
			return false;
		if (x->out.len > MAX_EXPANDED) {
			snprintf(x->why, sizeof(x->why),
			         "the expanded pattern is longer than %u bytes", MAX_EXPANDED);
			return false;
		}
		s = end + 1;
	}
	cm_buf_put(&x->out, s, strlen(s));
	return true;
}

static void
expr_clear(grok_expr *e)
{
	if (e->re)
		pcre2_code_free(e->re);
	for (size_t i = 0; i < e->ncaps; i++)
		cm_free(MEM, e->caps[i].field);
	cm_free(MEM, e->caps);
}

void
co_grok_free(co_grok *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n; i++)
		expr_clear(&g->ex[i]);
	cm_free(MEM, g->ex);
	cm_free(MEM, g);
}

/* The expansion's fields and any named group written in the pattern
 * itself ((?<name>...)) become the captures. */
static void
collect_caps(grok_expr *e, expansion *x)
{
	uint32_t count = 0, entry = 0;
	PCRE2_SPTR table;
	pcre2_pattern_info(e->re, PCRE2_INFO_NAMECOUNT, &count);
	pcre2_pattern_info(e->re, PCRE2_INFO_NAMEENTRYSIZE, &entry);
	pcre2_pattern_info(e->re, PCRE2_INFO_NAMETABLE, &table);
	e->caps = cm_calloc(MEM, count + 1, sizeof(grok_cap));
	for (uint32_t i = 0; i < count; i++) {
		PCRE2_SPTR t = table + (size_t)i * entry;
		int group = (t[0] << 8) | t[1];
		const char *name = (const char *)t + 2;
		grok_cap *c = &e->caps[e->ncaps++];
		c->group = group;
		char *endp = (char *)"";
		unsigned long k =
		    name[0] == '_' && name[1] == 'g' && isdigit((unsigned char)name[2])
		        ? strtoul(name + 2, &endp, 10)
		        : (unsigned long)-1;
		if (k < x->nfields && !*endp) {
			c->field = x->fields[k];
			c->type = x->types[k];
			x->fields[k] = NULL;
		} else {
			c->field = cm_strdup(MEM, name);
			c->type = CAP_STRING;
		}
	}
	/* in group order: the leftmost capture of a field is the one kept */
	for (size_t i = 1; i < e->ncaps; i++)
		for (size_t j = i; j > 0 && e->caps[j - 1].group > e->caps[j].group; j--) {
			grok_cap t = e->caps[j];
			e->caps[j] = e->caps[j - 1];
			e->caps[j - 1] = t;
		}
}

cm_err
co_grok_compile(char *const *patterns, size_t n, const cJSON *defs, co_grok **out, cm_error *err)
{
	co_grok *g = cm_calloc(MEM, 1, sizeof(*g));
	cm_err rc = CM_OK;
	*out = NULL;
	g->ex = cm_calloc(MEM, n + 1, sizeof(grok_expr));
	for (size_t i = 0; i < n && !rc; i++) {
		expansion x;
		memset(&x, 0, sizeof(x));
		x.defs = defs;
		cm_buf_init(&x.out, MEM);
		bool ok = expand(&x, patterns[i]);
		if (ok) {
			int code;
			PCRE2_SIZE off;
			cm_buf_put_u8(&x.out, 0);
			g->ex[i].re = pcre2_compile((PCRE2_SPTR)x.out.data, PCRE2_ZERO_TERMINATED,
			                            PCRE2_UTF, &code, &off, NULL);
			g->n = i + 1;
			if (!g->ex[i].re) {
				PCRE2_UCHAR msg[128];
				pcre2_get_error_message(code, msg, sizeof(msg));
				snprintf(x.why, sizeof(x.why), "%s at offset %zu",
				         (const char *)msg, (size_t)off);
				ok = false;
			} else {
				collect_caps(&g->ex[i], &x);
			}
		}
		if (!ok) {
			/* ES names every pattern of the processor */
			cm_buf list;
			cm_buf_init(&list, MEM);
			for (size_t k = 0; k < n; k++) {
				if (k)
					cm_buf_put(&list, ", ", 2);
				cm_buf_put(&list, patterns[k], strlen(patterns[k]));
			}
			cm_buf_put_u8(&list, 0);
			rc = cm_error_set_type(
			    err, CM_EPARSE, "parse_exception",
			    "[patterns] Invalid regex pattern found in: [%.300s]. %s",
			    (const char *)list.data, x.why);
			cm_buf_free(&list);
		}
		for (size_t k = 0; k < x.nfields; k++)
			cm_free(MEM, x.fields[k]);
		cm_free(MEM, x.fields);
		cm_free(MEM, x.types);
		cm_buf_free(&x.out);
	}
	if (rc) {
		co_grok_free(g);
		return rc;
	}
	g->n = n;
	*out = g;
	return CM_OK;
}

static cJSON *
typed(const char *s, size_t n, cap_type t)
{
	char buf[64], *end;
	if (t == CAP_STRING || n >= sizeof(buf)) {
		char *v = cm_strndup(MEM, s, n);
		cJSON *j = cJSON_CreateString(v);
		cm_free(MEM, v);
		return j;
	}
	memcpy(buf, s, n);
	buf[n] = 0;
	if (t == CAP_BOOL)
		return cJSON_CreateBool(!strcasecmp(buf, "true"));
	errno = 0;
	double d = t == CAP_INT ? (double)strtoll(buf, &end, 10) : strtod(buf, &end);
	if (end == buf || *end || errno)
		return cJSON_CreateString(buf); /* not a number: kept as text */
	return cJSON_CreateNumber(d);
}

int
co_grok_match(const co_grok *g, const char *s, cJSON **fields, cm_error *err)
{
	*fields = NULL;
	pcre2_match_context *mc = pcre2_match_context_create(NULL);
	pcre2_set_match_limit(mc, MATCH_LIMIT);
	int hit = -1;
	for (size_t i = 0; i < g->n && hit == -1; i++) {
		const grok_expr *e = &g->ex[i];
		pcre2_match_data *md = pcre2_match_data_create_from_pattern(e->re, NULL);
		int rc = pcre2_match(e->re, (PCRE2_SPTR)s, PCRE2_ZERO_TERMINATED, 0, 0, md, mc);
		if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
		    rc == PCRE2_ERROR_HEAPLIMIT) {
			cm_error_set(
			    err, CM_EINVAL,
			    "grok pattern matching was interrupted after [%d] backtracking "
			    "steps",
			    MATCH_LIMIT);
			hit = -2;
		} else if (rc >= 0) {
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
			uint32_t pairs = pcre2_get_ovector_count(md);
			cJSON *o = cJSON_CreateObject();
			for (size_t k = 0; k < e->ncaps; k++) {
				const grok_cap *c = &e->caps[k];
				if ((uint32_t)c->group >= pairs ||
				    ov[2 * c->group] == PCRE2_UNSET ||
				    cJSON_GetObjectItemCaseSensitive(o, c->field))
					continue;
				cJSON_AddItemToObject(o, c->field,
				                      typed(s + ov[2 * c->group],
				                            ov[2 * c->group + 1] - ov[2 * c->group],
				                            c->type));
			}
			*fields = o;
			hit = (int)i;
		}
		pcre2_match_data_free(md);
	}
	pcre2_match_context_free(mc);
	return hit;
}
