/* Elasticsearch's versioned media types (REST API compatibility):
 * "application/vnd.elasticsearch+json; compatible-with=8" on Accept and
 * Content-Type, checked the way Elasticsearch checks them, and the reply
 * answered in the version asked for. Versions 7 to 9 are taken: the 7.x
 * clients send 7, the 8.x clients 8 and the 9.x clients 9, and the REST
 * surface Shoal serves is the same to each. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "co_media.h"

#define MIN_COMPAT 7
#define MAX_COMPAT 9

/* The compatible-with version of one header value: 0 when it names none
 * (absent, "application/json", a wildcard), -1 when the vnd type is
 * malformed or its version is not a number. */
static int
header_version(const char *v)
{
	const char *p, *q;
	if (!v)
		return 0;
	while (*v == ' ' || *v == '\t')
		v++;
	if (strncasecmp(v, "application/vnd.elasticsearch+", 30) != 0)
		return 0;
	p = strcasestr(v, "compatible-with");
	if (!p)
		return -1;
	p += 15;
	while (*p == ' ')
		p++;
	if (*p++ != '=')
		return -1;
	while (*p == ' ')
		p++;
	if (!isdigit((unsigned char)*p))
		return -1;
	long n = strtol(p, (char **)&q, 10);
	while (*q == ' ')
		q++;
	if ((*q && *q != ';' && *q != ',') || n > 99)
		return -1;
	return (int)n;
}

/* Is the Accept value explicitly a JSON type without a version (not
 * absent, not a wildcard)? */
static bool
accept_plain(const char *v)
{
	if (!v)
		return false;
	while (*v == ' ')
		v++;
	return *v && strncmp(v, "*/*", 3) != 0 && header_version(v) == 0;
}

int
co_media_compat(const char *accept, const char *ctype, bool has_body, char *why, size_t cap)
{
	int a = header_version(accept), c = has_body ? header_version(ctype) : 0;

	if (a < 0 || (a && (a < MIN_COMPAT || a > MAX_COMPAT))) {
		snprintf(why, cap,
		         "Accept version must be one of versions %d to %d, but found %d. "
		         "Accept=%.200s",
		         MIN_COMPAT, MAX_COMPAT, a, accept);
		return -1;
	}
	if (c < 0 || (c && (c < MIN_COMPAT || c > MAX_COMPAT))) {
		snprintf(why, cap,
		         "Content-Type version must be one of versions %d to %d, but found "
		         "%d. Content-Type=%.200s",
		         MIN_COMPAT, MAX_COMPAT, c, ctype);
		return -1;
	}
	if (has_body && a && c && a != c) {
		snprintf(why, cap,
		         "A compatible version is required on both Content-Type and Accept "
		         "headers if either one has requested a compatible version and the "
		         "compatible versions must match. Accept=%.200s, Content-Type=%.200s",
		         accept, ctype);
		return -1;
	}
	/* one side versioned, the other an explicit unversioned type */
	if (has_body && ((a && ctype && !c) || (c && accept_plain(accept)))) {
		snprintf(why, cap,
		         "A compatible version is required on both Content-Type and Accept "
		         "headers if either one has requested a compatible version. Accept=%.200s, "
		         "Content-Type=%.200s",
		         accept ? accept : "null", ctype ? ctype : "null");
		return -1;
	}
	return a ? a : c;
}

const char *
co_media_reply_type(int compat, const char *ctype)
{
	if (!compat || (ctype && strncmp(ctype, "application/json", 16) != 0))
		return ctype;
	return compat == 7   ? "application/vnd.elasticsearch+json;compatible-with=7"
	       : compat == 8 ? "application/vnd.elasticsearch+json;compatible-with=8"
	                     : "application/vnd.elasticsearch+json;compatible-with=9";
}
