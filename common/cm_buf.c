#include "cm_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

void
cm_buf_init(cm_buf *b, cm_mem_tag tag)
{
	b->data = NULL;
	b->len = b->cap = 0;
	b->tag = tag;
}

void
cm_buf_free(cm_buf *b)
{
	cm_free(b->tag, b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

void
cm_buf_reset(cm_buf *b)
{
	b->len = 0;
}

void
cm_buf_reserve(cm_buf *b, size_t extra)
{
	size_t need = b->len + extra;
	if (need <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	b->data = cm_realloc(b->tag, b->data, cap);
	b->cap = cap;
}

void
cm_buf_put(cm_buf *b, const void *p, size_t n)
{
	if (n == 0)
		return;
	cm_buf_reserve(b, n);
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

void
cm_buf_put_u8(cm_buf *b, uint8_t v)
{
	cm_buf_put(b, &v, 1);
}

void
cm_buf_put_u16(cm_buf *b, uint16_t v)
{
	uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
	cm_buf_put(b, x, 2);
}

void
cm_buf_put_u32(cm_buf *b, uint32_t v)
{
	uint8_t x[4];
	for (int i = 0; i < 4; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	cm_buf_put(b, x, 4);
}

void
cm_buf_put_u64(cm_buf *b, uint64_t v)
{
	uint8_t x[8];
	for (int i = 0; i < 8; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	cm_buf_put(b, x, 8);
}

void
cm_buf_put_u16_be(cm_buf *b, uint16_t v)
{
	uint8_t x[2] = {(uint8_t)(v >> 8), (uint8_t)v};
	cm_buf_put(b, x, 2);
}

void
cm_buf_put_u32_be(cm_buf *b, uint32_t v)
{
	uint8_t x[4];
	for (int i = 0; i < 4; i++)
		x[i] = (uint8_t)(v >> (8 * (3 - i)));
	cm_buf_put(b, x, 4);
}

void
cm_buf_put_u64_be(cm_buf *b, uint64_t v)
{
	uint8_t x[8];
	for (int i = 0; i < 8; i++)
		x[i] = (uint8_t)(v >> (8 * (7 - i)));
	cm_buf_put(b, x, 8);
}

void
cm_buf_put_varint(cm_buf *b, uint64_t v)
{
	uint8_t x[10];
	int n = 0;
	while (v >= 0x80) {
		x[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	x[n++] = (uint8_t)v;
	cm_buf_put(b, x, (size_t)n);
}

void
cm_buf_put_str(cm_buf *b, const char *s, size_t n)
{
	cm_buf_put_varint(b, n);
	cm_buf_put(b, s, n);
}

void
cm_buf_printf(cm_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n <= 0)
		return;
	cm_buf_reserve(b, (size_t)n + 1);
	va_start(ap, fmt);
	vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void
cm_buf_put_checksum(cm_buf *b, size_t start)
{
	cm_buf_put_u32(b, XXH32(b->data + start, b->len - start, 0));
}

void
cm_rd_init(cm_rd *r, const void *p, size_t n)
{
	r->p = p;
	r->end = r->p + n;
	r->bad = false;
}

size_t
cm_rd_left(const cm_rd *r)
{
	return (size_t)(r->end - r->p);
}

bool
cm_rd_bytes(cm_rd *r, size_t n, const uint8_t **out)
{
	if (r->bad || cm_rd_left(r) < n) {
		r->bad = true;
		return false;
	}
	*out = r->p;
	r->p += n;
	return true;
}

bool
cm_rd_u8(cm_rd *r, uint8_t *v)
{
	const uint8_t *p;
	if (!cm_rd_bytes(r, 1, &p))
		return false;
	*v = p[0];
	return true;
}

bool
cm_rd_u16(cm_rd *r, uint16_t *v)
{
	const uint8_t *p;
	if (!cm_rd_bytes(r, 2, &p))
		return false;
	*v = (uint16_t)(p[0] | (p[1] << 8));
	return true;
}

bool
cm_rd_u32(cm_rd *r, uint32_t *v)
{
	const uint8_t *p;
	if (!cm_rd_bytes(r, 4, &p))
		return false;
	*v = cm_get_u32(p);
	return true;
}

bool
cm_rd_u64(cm_rd *r, uint64_t *v)
{
	const uint8_t *p;
	if (!cm_rd_bytes(r, 8, &p))
		return false;
	*v = cm_get_u64(p);
	return true;
}

bool
cm_rd_varint(cm_rd *r, uint64_t *v)
{
	uint64_t x = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (r->bad || r->p >= r->end)
			break;
		uint8_t c = *r->p++;
		x |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*v = x;
			return true;
		}
	}
	r->bad = true;
	return false;
}

bool
cm_rd_str(cm_rd *r, const char **s, size_t *n)
{
	uint64_t len;
	const uint8_t *p;
	if (!cm_rd_varint(r, &len) || !cm_rd_bytes(r, (size_t)len, &p))
		return false;
	*s = (const char *)p;
	*n = (size_t)len;
	return true;
}

bool
cm_checksum_ok(const void *p, size_t *len)
{
	if (*len < 4)
		return false;
	size_t n = *len - 4;
	if (XXH32(p, n, 0) != cm_get_u32((const uint8_t *)p + n))
		return false;
	*len = n;
	return true;
}

uint16_t
cm_get_u16_be(const void *p)
{
	const uint8_t *x = p;
	return (uint16_t)((x[0] << 8) | x[1]);
}

uint32_t
cm_get_u32_be(const void *p)
{
	const uint8_t *x = p;
	return ((uint32_t)x[0] << 24) | ((uint32_t)x[1] << 16) | ((uint32_t)x[2] << 8) | x[3];
}

uint64_t
cm_get_u64_be(const void *p)
{
	const uint8_t *x = p;
	return ((uint64_t)cm_get_u32_be(x) << 32) | cm_get_u32_be(x + 4);
}

uint32_t
cm_get_u32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, 4); /* little-endian hosts only; checked at configure time */
	return v;
}

uint64_t
cm_get_u64(const void *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

void
cm_buf_put_json_str(cm_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	cm_buf_reserve(b, n + 2);
	cm_buf_put_u8(b, '"');
	size_t run = 0; /* copy unescaped runs in one call */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		cm_buf_put(b, s + run, i - run);
		run = i + 1;
		char esc[7] = {'\\', 0};
		switch (c) {
		case '"':
			esc[1] = '"';
			break;
		case '\\':
			esc[1] = '\\';
			break;
		case '\n':
			esc[1] = 'n';
			break;
		case '\r':
			esc[1] = 'r';
			break;
		case '\t':
			esc[1] = 't';
			break;
		case '\b':
			esc[1] = 'b';
			break;
		case '\f':
			esc[1] = 'f';
			break;
		default:
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			cm_buf_put(b, esc, 6);
			continue;
		}
		cm_buf_put(b, esc, 2);
	}
	cm_buf_put(b, s + run, n - run);
	cm_buf_put_u8(b, '"');
}
