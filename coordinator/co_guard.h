/* Checks on untrusted JSON text before it reaches cJSON (which accepts
 * invalid UTF-8, nests 1000 deep and turns 1e400 into infinity). */
#ifndef CO_GUARD_H
#define CO_GUARD_H

#include <stdbool.h>
#include <stddef.h>

/* Elasticsearch's limit on JSON nesting depth for request bodies. */
#define CO_JSON_MAX_DEPTH 100

/* Returns true when text[0..len) is valid UTF-8, nests at most
 * CO_JSON_MAX_DEPTH arrays/objects and holds no number that overflows a
 * double. Otherwise false, with a reason in msg (always terminated). Does
 * not check the JSON grammar itself; cJSON does that afterwards. */
bool co_json_guard(const char *text, size_t len, char *msg, size_t msgcap);

/* Returns true when s[0..len) is valid UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
bool co_utf8_valid(const unsigned char *s, size_t len, size_t *bad_at);

#endif
