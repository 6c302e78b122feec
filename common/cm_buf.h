/* Growable byte buffer and a bounds-checked reader, with the varint and
 * fixed-width encodings every on-disk and wire format here uses. Fixed
 * widths are little-endian, except *_be helpers used for LMDB keys (so
 * memcmp order equals numeric order). */
#ifndef CM_BUF_H
#define CM_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_alloc.h"

typedef struct cm_buf {
	uint8_t *data;
	size_t len, cap;
	cm_mem_tag tag;
} cm_buf;

void cm_buf_init(cm_buf *b, cm_mem_tag tag);
void cm_buf_free(cm_buf *b);
void cm_buf_reset(cm_buf *b);                  /* len = 0, keeps memory */
void cm_buf_reserve(cm_buf *b, size_t extra);  /* room for `extra` more bytes */
void cm_buf_put(cm_buf *b, const void *p, size_t n);
void cm_buf_put_u8(cm_buf *b, uint8_t v);
void cm_buf_put_u16(cm_buf *b, uint16_t v);
void cm_buf_put_u32(cm_buf *b, uint32_t v);
void cm_buf_put_u64(cm_buf *b, uint64_t v);
void cm_buf_put_u16_be(cm_buf *b, uint16_t v);
void cm_buf_put_u32_be(cm_buf *b, uint32_t v);
void cm_buf_put_u64_be(cm_buf *b, uint64_t v);
void cm_buf_put_varint(cm_buf *b, uint64_t v);
void cm_buf_put_str(cm_buf *b, const char *s, size_t n); /* varint length + bytes */
void cm_buf_printf(cm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..n) as a quoted JSON string: '"', '\\' and control bytes
 * escaped, everything else (UTF-8 included) as it is. */
void cm_buf_put_json_str(cm_buf *b, const char *s, size_t n);
/* Appends a 4-byte xxh32 of the bytes written since `start`. */
void cm_buf_put_checksum(cm_buf *b, size_t start);

/* Reader: every get fails (returns false, sets r->bad) instead of reading
 * past the end, so corrupt bytes give an error, never a crash. */
typedef struct cm_rd {
	const uint8_t *p, *end;
	bool bad;
} cm_rd;

void cm_rd_init(cm_rd *r, const void *p, size_t n);
bool cm_rd_u8(cm_rd *r, uint8_t *v);
bool cm_rd_u16(cm_rd *r, uint16_t *v);
bool cm_rd_u32(cm_rd *r, uint32_t *v);
bool cm_rd_u64(cm_rd *r, uint64_t *v);
bool cm_rd_varint(cm_rd *r, uint64_t *v);
bool cm_rd_bytes(cm_rd *r, size_t n, const uint8_t **out);
bool cm_rd_str(cm_rd *r, const char **s, size_t *n); /* varint length + bytes, not NUL-terminated */
size_t cm_rd_left(const cm_rd *r);

/* Verifies and strips a trailing xxh32 checksum: on success *len shrinks
 * by 4. Returns false for a short or mismatching value. */
bool cm_checksum_ok(const void *p, size_t *len);

uint16_t cm_get_u16_be(const void *p);
uint32_t cm_get_u32_be(const void *p);
uint64_t cm_get_u64_be(const void *p);
uint32_t cm_get_u32(const void *p);
uint64_t cm_get_u64(const void *p);

#endif
