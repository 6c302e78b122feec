/* _bulk NDJSON parsing, apart from applying: action lines validated into
 * items, each paired with its source line. Pure (no node, no I/O), so the
 * streaming handler (co_bulk.c) and the fuzz target (bulk_fuzz.c) run the
 * same code; feeding a body in any chunking yields the same items and the
 * same error. */
#ifndef CO_BULK_PARSE_H
#define CO_BULK_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"
#include "co_doc.h"

typedef enum { CO_BULK_INDEX, CO_BULK_CREATE, CO_BULK_UPDATE, CO_BULK_DELETE } co_bulk_kind;

extern const char *const co_bulk_action_names[4];

/* One validated action. */
typedef struct co_bulk_action {
	co_bulk_kind kind;
	char *index;   /* owned (CM_MEM_COORDINATOR); never NULL */
	char *id;      /* owned; NULL = generate one */
	char *routing; /* owned; may be NULL */
	char *pipeline; /* owned; the action's "pipeline", may be NULL */
	co_write_opts w;
	long retries; /* retry_on_conflict, clamped to [0, 1000000] */
	int8_t require_alias; /* the item's "require_alias": 0, 1, or -1 unset */
	bool empty_id;        /* "_id": "" on index/create: the item fails (ES) */
	char *source;         /* the item's "_source" (JSON text, owned), or NULL */
} co_bulk_action;

/* Called once per complete item, in body order: a delete at its action
 * line, the others at their source line (src/len: the raw line without its
 * line end, valid only during the call). The callee takes ownership of the
 * action's strings (co_bulk_action_clear frees them). */
typedef void (*co_bulk_item_fn)(void *ctx, co_bulk_action *a, const char *src, size_t len);

typedef struct co_bulk_parser {
	const char *dflt_index;   /* borrowed; from the path, may be NULL */
	const char *dflt_routing; /* borrowed; ?routing=, may be NULL */
	uint64_t max_line;        /* a longer line fails the request with 413 */
	co_bulk_item_fn on_item;
	void *ctx;
	/* state */
	cm_buf line;         /* a partial line carried to the next feed */
	co_bulk_action pend; /* the action awaiting its source line */
	bool want_source;
	uint64_t line_no;
	uint64_t items; /* items handed to on_item */
	bool failed;
	cm_error err; /* why, when failed (the whole request's 4xx) */
} co_bulk_parser;

/* dflt_index and dflt_routing are borrowed for the parser's life. */
void co_bulk_parser_init(co_bulk_parser *p, const char *dflt_index, const char *dflt_routing,
                         uint64_t max_line, co_bulk_item_fn on_item, void *ctx);
/* Consumes data (any split of the body); false once the request failed
 * (p->err says why; later feeds do nothing). */
bool co_bulk_parser_feed(co_bulk_parser *p, const char *data, size_t len);
/* The body ended: a last line without its newline, a missing source line,
 * an empty body. False when the request failed. */
bool co_bulk_parser_end(co_bulk_parser *p);
/* Frees the parser's buffers and a pending action; not p itself. */
void co_bulk_parser_free(co_bulk_parser *p);
void co_bulk_action_clear(co_bulk_action *a);

#endif
