/* Search templates: the mustache dialect of Elasticsearch's search
 * templates, rendered to text (normally a _search body). */
#ifndef SR_MUSTACHE_H
#define SR_MUSTACHE_H

#include <stddef.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"

typedef struct cJSON cJSON;

/* Appends the rendering of tmpl[0..len) with params (an object, or NULL)
 * to out. {{name}}, {{a.b}} and {{.}} write a value, strings escaped for
 * a JSON string (ES's JSON-escaping mustache factory), numbers as their
 * shortest text, true/false, missing and null as nothing, arrays and
 * objects as JSON; {{{name}}} and {{&name}} unescaped; {{#name}}..{{/name}}
 * a section (once per array item, once with an object or another truthy
 * value as context, not at all for missing, null, false or []);
 * {{^name}}..{{/name}} its inverse; {{#toJson}}name{{/toJson}} the JSON
 * of a value; {{#join}}name{{/join}} an array's items joined with ",";
 * {{! comments}}. Unclosed or mismatched tags, partials and delimiter
 * changes → CM_EINVAL (type general_script_exception) saying where. */
cm_err sr_mustache_render(const char *tmpl, size_t len, const cJSON *params, cm_buf *out,
                          cm_error *err);

#endif
