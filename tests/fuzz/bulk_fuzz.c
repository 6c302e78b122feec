/* libFuzzer target: the _bulk NDJSON parser (coordinator/co_bulk_parse.c)
 * over arbitrary bytes. The first input byte picks the defaults (index,
 * routing from the path/query) and the line limit, the second seeds the
 * chunking. The body is parsed once in one piece and once in random
 * chunks (as libmicrohttpd hands them over): both must yield the same
 * items and the same error, or the target aborts. Built and run by
 * tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/cm_alloc.h"
#include "../../coordinator/co_bulk_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every item rendered into one buffer, so two runs compare with memcmp. */
static void
record(void *ctx, co_bulk_action *a, const char *src, size_t len)
{
	cm_buf *b = ctx;
	const char *strs[3] = {a->index, a->id, a->routing};

	if (a->index == NULL || a->kind > CO_BULK_DELETE)
		abort(); /* the parser promises an index and a known action */
	if ((a->kind == CO_BULK_DELETE) != (src == NULL))
		abort(); /* deletes alone have no source line */
	cm_buf_put_u8(b, (uint8_t)a->kind);
	for (int i = 0; i < 3; i++) {
		size_t n = strs[i] ? strlen(strs[i]) + 1 : 0;
		cm_buf_put_varint(b, n);
		cm_buf_put(b, strs[i] ? strs[i] : "", n);
	}
	/* field by field: struct padding is not part of the value */
	cm_buf_put_u8(b, (uint8_t)a->w.create);
	cm_buf_put_varint(b, (uint64_t)a->w.refresh);
	cm_buf_put_varint(b, a->w.if_seq_no);
	cm_buf_put_varint(b, a->w.if_primary_term);
	cm_buf_put_varint(b, (uint64_t)a->w.version);
	cm_buf_put_varint(b, (uint64_t)a->retries);
	cm_buf_put_varint(b, len);
	if (len)
		cm_buf_put(b, src, len);
	co_bulk_action_clear(a);
}

static void
run(const char *body, size_t n, uint8_t opts, uint32_t seed, cm_buf *out, cm_error *err)
{
	co_bulk_parser p;
	uint64_t max_line = opts & 8 ? 16 + (opts >> 4) * 64 : 1u << 20;

	co_bulk_parser_init(&p, opts & 1 ? "dflt" : NULL, opts & 2 ? "r1" : NULL, max_line, record,
	                    out);
	if (seed == 0) {
		co_bulk_parser_feed(&p, body, n);
	} else {
		size_t off = 0;
		while (off < n) {
			seed = seed * 1103515245u + 12345u;
			/* mostly small pieces, so lines straddle chunk boundaries */
			size_t piece = 1 + (seed >> 16) % (seed & 0x100 ? 4096 : 7);
			if (piece > n - off)
				piece = n - off;
			if (!co_bulk_parser_feed(&p, body + off, piece))
				break;
			off += piece;
		}
	}
	co_bulk_parser_end(&p);
	*err = p.err;
	/* the result: every item, then the error */
	cm_buf_put_u8(out, 0xff);
	cm_buf_put(out, &p.err.code, sizeof(p.err.code));
	cm_buf_put(out, p.err.reason, strlen(p.err.reason));
	co_bulk_parser_free(&p);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cm_buf one, many;
	cm_error e1, e2;

	if (size < 2 || size > 1 << 20)
		return 0;
	const char *body = (const char *)data + 2;
	size_t n = size - 2;
	cm_buf_init(&one, CM_MEM_COORDINATOR);
	cm_buf_init(&many, CM_MEM_COORDINATOR);
	run(body, n, data[0], 0, &one, &e1);
	run(body, n, data[0], 1 + data[1] * 2654435761u, &many, &e2);
	if (one.len != many.len || memcmp(one.data, many.data, one.len) != 0)
		abort(); /* the chunking changed what the body means */
	if (e1.code != CM_OK && (cm_err_status(e1.code) < 400 || cm_err_status(e1.code) > 499))
		abort(); /* a bad body is the client's error */
	cm_buf_free(&one);
	cm_buf_free(&many);
	return 0;
}
