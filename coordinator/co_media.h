/* Versioned media types ("application/vnd.elasticsearch+json;
 * compatible-with=N") on requests and replies. */
#ifndef CO_MEDIA_H
#define CO_MEDIA_H

#include <stdbool.h>
#include <stddef.h>

/* The compatible version a request asks for through its Accept and
 * Content-Type headers (either may be NULL): 0 for none, 7, 8 or 9; -1 when
 * the headers are invalid (an unsupported version, versions that differ,
 * one side versioned and the other not), with Elasticsearch's reason in
 * why. Content-Type counts only when the request has a body. */
int co_media_compat(const char *accept, const char *ctype, bool has_body, char *why, size_t cap);
/* The Content-Type of a reply: a JSON type answered in the requested
 * version, anything else (text, or compat 0) unchanged. Static strings. */
const char *co_media_reply_type(int compat, const char *ctype);

#endif
