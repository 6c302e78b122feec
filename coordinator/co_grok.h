/* Grok (co_grok.c): the ingest grok processor's expressions. A pattern is
 * a regex with %{NAME}, %{NAME:field} and %{NAME:field:type} references
 * (type int, long, float, double, boolean or string), expanded from the
 * processor's pattern_definitions and then the built-in library, and
 * compiled with PCRE2 once, when the pipeline is compiled. */
#ifndef CO_GROK_H
#define CO_GROK_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/cm_err.h"

typedef struct cJSON cJSON;
typedef struct co_grok co_grok;

/* Compiles the n patterns with defs (an object NAME -> pattern, may be
 * NULL) over the library. A pattern that names an unknown or circular
 * definition, or is not a regex → CM_EPARSE parse_exception in ES's words
 * ("[patterns] Invalid regex pattern found in: [..]. Unable to find
 * pattern [X] in Grok's pattern dictionary"). *out is the caller's
 * (co_grok_free). */
cm_err co_grok_compile(char *const *patterns, size_t n, const cJSON *defs, co_grok **out,
                       cm_error *err);
void co_grok_free(co_grok *g);

/* Matches s (NUL-terminated) against the patterns in turn: the index of
 * the first that matches, with *fields (new, the caller's) an object from
 * each captured field's dotted name to its value (a string, or a typed
 * capture's number or boolean; captures that took no part are left out).
 * -1 when none matches, -2 when matching ran over its backtracking limit
 * (err says so); *fields is NULL then. */
int co_grok_match(const co_grok *g, const char *s, cJSON **fields, cm_error *err);

/* The built-in definition of name, or NULL. */
const char *co_grok_builtin(const char *name);
/* The library as an object NAME -> pattern (new, the caller's), in the
 * library's order or, sorted, by name. */
cJSON *co_grok_library(bool sorted);

#endif
