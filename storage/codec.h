/* Integer codecs for segment files: bit-packing (postings blocks, column
 * values) and the postings block layout. Private to storage/. */
#ifndef ST_CODEC_H
#define ST_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_buf.h"

/* Bytes needed for n values of `bits` bits. */
static inline size_t
codec_packed_size(size_t n, unsigned bits)
{
	return (n * bits + 7) / 8;
}

/* Bits needed for v (0 for 0). */
static inline unsigned
codec_bits32(uint32_t v)
{
	return v ? 32 - (unsigned)__builtin_clz(v) : 0;
}
static inline unsigned
codec_bits64(uint64_t v)
{
	return v ? 64 - (unsigned)__builtin_clzll(v) : 0;
}

/* Appends n values of `bits` bits (0..32 / 0..64), LSB first. Values must
 * fit in `bits`. */
void codec_pack32(cm_buf *out, const uint32_t *v, size_t n, unsigned bits);
void codec_pack64(cm_buf *out, const uint64_t *v, size_t n, unsigned bits);
/* Decodes n values from in (which must hold codec_packed_size bytes; the
 * caller checks). */
void codec_unpack32(const uint8_t *in, size_t in_len, size_t n, unsigned bits, uint32_t *out);
void codec_unpack64(const uint8_t *in, size_t in_len, size_t n, unsigned bits, uint64_t *out);
/* Gathers out[j] = value idx[j] - base of the packed values (in range). */
void codec_unpack64_gather(const uint8_t *in, size_t in_len, const uint32_t *idx, size_t n,
                           uint32_t base, unsigned bits, uint64_t *out);
/* counts[v]++ for each gathered value v = (value idx[j] - base) + add
 * below ncounts (others are skipped): codec_unpack64_gather and a count. */
void codec_count_gather(const uint8_t *in, size_t in_len, const uint32_t *idx, size_t n,
                        uint32_t base, unsigned bits, uint64_t add, uint32_t *counts,
                        uint64_t ncounts);
/* Without unpacking: sets bit i of bb (cleared first, n bits) for each of
 * the n packed values in [lo, hi]; returns whether any is. */
bool codec_packed_range_bits(const uint8_t *in, size_t in_len, size_t n, unsigned bits,
                             uint64_t lo, uint64_t hi, uint64_t *bb);

/* Decodes n values starting at value index `first` (positions inside a
 * block); the caller checks the bytes cover them. */
void codec_unpack32_at(const uint8_t *in, size_t in_len, size_t first, size_t n, unsigned bits,
                       uint32_t *out);
void codec_unpack64_at(const uint8_t *in, size_t in_len, size_t first, size_t n, unsigned bits,
                       uint64_t *out);

/* Postings block: n (1..128) docs ascending after `prev` (UINT32_MAX for
 * none: the first doc may then be 0) and their freqs (>= 1):
 *   u8 doc_bits, u8 freq_bits, packed (doc - prev - 1), packed (freq - 1).
 * Fields without frequencies have freq_bits 0 and cost nothing for them. */
void codec_block_encode(cm_buf *out, const uint32_t *docs, const uint32_t *freqs, uint32_t n,
                        uint32_t prev);
/* Decodes a block of n docs from [in, in+len); false if the bytes are
 * short or inconsistent (the docs would pass UINT32_MAX - 1). */
bool codec_block_decode(const uint8_t *in, size_t len, uint32_t n, uint32_t prev, uint32_t *docs,
                        uint32_t *freqs);
/* Byte length of an encoded block (0 when corrupt). */
size_t codec_block_size(const uint8_t *in, size_t len, uint32_t n);

/* ZigZag for signed varints. */
static inline uint64_t
codec_zz(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}
static inline int64_t
codec_unzz(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* Fast varint decode with bounds (false at end or overlong). */
static inline bool
codec_varint(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
	const uint8_t *p = *pp;
	uint64_t x = 0;
	for (unsigned shift = 0; shift < 64 && p < end; shift += 7) {
		uint8_t b = *p++;
		x |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*pp = p;
			*v = x;
			return true;
		}
	}
	return false;
}

#endif
