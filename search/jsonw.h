/* Private to search/: small JSON writing helpers shared by the merge stage
 * and source filtering. Numbers are written the way Elasticsearch (Java,
 * Jackson) writes them, so responses compare equal byte for byte. */
#ifndef SR_JSONW_H
#define SR_JSONW_H

#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"

/* Appends s[0..n) as a quoted, escaped JSON string. */
void sr_jw_str(cm_buf *b, const char *s, size_t n);
void sr_jw_cstr(cm_buf *b, const char *s);
/* Java Float.toString form ("1.0", "0.2876821", "1.0E-4"); NaN → null. */
void sr_jw_float(cm_buf *b, float f);
/* Java Double.toString form; NaN/Inf → null. */
void sr_jw_double(cm_buf *b, double d);
/* Shortest decimal text that reads back as d (for parsed JSON numbers
 * turned into strings: 5 → "5", 0.1 → "0.1"). out must hold 32 bytes. */
void sr_jw_number_text(double d, char *out, size_t cap);

#endif
