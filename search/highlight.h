/* Highlighting with the unified highlighter's behaviour: the request's
 * "highlight" object, and the fragments of one hit's _source. */
#ifndef SR_HIGHLIGHT_H
#define SR_HIGHLIGHT_H

#include "sr.h"

typedef struct sr_highlight sr_highlight;

/* Parses a "highlight" object; unknown keys and bad values are CM_EPARSE
 * or CM_EINVAL with Elasticsearch's wording. *out is owned by the caller. */
cm_err sr_highlight_parse(const cJSON *j, sr_highlight **out, cm_error *err);
void sr_highlight_free(sr_highlight *h);

/* Appends {"field":["fragment",...],...} for the document source src
 * (fields without fragments left out) to out; nothing when no field has
 * one. q is the search query (NULL = match_all); m the shard's mapping. */
cm_err sr_highlight_render(const sr_highlight *h, const st_mapping *m, const sr_query *q,
                           const char *src, size_t len, cm_buf *out, cm_error *err);
/* The hit being highlighted, for index.highlight.max_analyzed_offset: a
 * field the highlighter must analyse again whose text is longer fails
 * the render (illegal_argument_exception naming the doc and index). */
typedef struct sr_hl_doc {
	const char *id, *index;      /* for the message; may be NULL */
	int64_t max_analyzed_offset; /* <= 0: no bound */
} sr_hl_doc;
cm_err sr_highlight_render_doc(const sr_highlight *h, const st_mapping *m, const sr_query *q,
                               const char *src, size_t len, const sr_hl_doc *hd, cm_buf *out,
                               cm_error *err);

/* One value's passages, exposed for unit tests: spans are the byte ranges
 * [start, end) of the matches, sorted and not overlapping, each with the
 * number of the term it matched (passages score by term). Writes at most
 * nfrags fragments (0 = the whole value) with the tags into out as JSON
 * strings separated by commas; returns how many. */
typedef struct sr_hl_span {
	uint32_t start, end;
	uint32_t term; /* < SR_HL_MAX_TERMS */
} sr_hl_span;
#define SR_HL_MAX_TERMS 256
size_t sr_highlight_fragments(const char *text, size_t len, const sr_hl_span *spans, size_t n,
                              int fragment_size, int nfrags, bool order_score, const char *pre,
                              const char *post, bool html, cm_buf *out);

#endif
