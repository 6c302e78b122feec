/* Bit-packing, the postings block codec, Lucene's norm byte and the
 * sortable double mapping. */
#include "codec.h"

#include <string.h>

#include "st_segment.h"
#include "st_types.h"

/* ---- bit-packing ---- */

void
codec_pack32(cm_buf *out, const uint32_t *v, size_t n, unsigned bits)
{
	size_t bytes = codec_packed_size(n, bits);
	if (bytes == 0)
		return;
	cm_buf_reserve(out, bytes + 8);
	uint8_t *p = out->data + out->len;
	uint64_t acc = 0;
	unsigned have = 0;
	for (size_t i = 0; i < n; i++) {
		acc |= (uint64_t)v[i] << have;
		have += bits;
		while (have >= 8) {
			*p++ = (uint8_t)acc;
			acc >>= 8;
			have -= 8;
		}
	}
	if (have)
		*p++ = (uint8_t)acc;
	out->len += bytes;
}

void
codec_pack64(cm_buf *out, const uint64_t *v, size_t n, unsigned bits)
{
	size_t bytes = codec_packed_size(n, bits);
	if (bytes == 0)
		return;
	cm_buf_reserve(out, bytes + 8);
	uint8_t *p = out->data + out->len;
	/* 128-bit accumulator so 64-bit values never overflow it. */
	unsigned __int128 acc = 0;
	unsigned have = 0;
	for (size_t i = 0; i < n; i++) {
		acc |= (unsigned __int128)v[i] << have;
		have += bits;
		while (have >= 8) {
			*p++ = (uint8_t)acc;
			acc >>= 8;
			have -= 8;
		}
	}
	if (have)
		*p++ = (uint8_t)acc;
	out->len += bytes;
}

/* Slow path: assembles value i byte by byte; never reads past in_len. */
static uint64_t
unpack_one(const uint8_t *in, size_t in_len, size_t i, unsigned bits)
{
	size_t bit = i * bits;
	uint64_t v = 0;
	unsigned got = 0;
	while (got < bits) {
		size_t byte = bit >> 3;
		unsigned off = bit & 7;
		unsigned take = 8 - off;
		if (take > bits - got)
			take = bits - got;
		uint64_t b = byte < in_len ? in[byte] : 0;
		v |= ((b >> off) & ((1u << take) - 1)) << got;
		got += take;
		bit += take;
	}
	return v;
}

/* How many leading values can use an 8-byte load without passing in_len. */
static size_t
fast_count(size_t in_len, size_t n, unsigned bits)
{
	if (in_len < 8)
		return 0;
	size_t k = (in_len - 8) * 8 / bits + 1;
	return k < n ? k : n;
}

static inline uint64_t
load64(const uint8_t *p)
{
	uint64_t w;
	memcpy(&w, p, 8);
	return w;
}

/* The bytes of values from..n-1 (bits <= 57) copied into pad, zeros after
 * in_len as unpack_one reads them, so those values take 8-byte loads too:
 * unpack_one's loop per value was a tenth of a dense filter's cost (a
 * postings block of 1-bit deltas at the end of its buffer left half its
 * 128 values to it). *b0: the byte pad starts at. False when they do not
 * fit. */
#define TAIL_PAD 96
static bool
tail_pad(const uint8_t *in, size_t in_len, size_t from, size_t n, unsigned bits,
         uint8_t pad[TAIL_PAD + 8], size_t *b0)
{
	size_t first = from * bits >> 3, need = ((n * bits + 7) >> 3) - first;
	if (bits > 57 || need > TAIL_PAD)
		return false;
	size_t have = first < in_len ? in_len - first : 0;
	if (have > need)
		have = need;
	memcpy(pad, in + first, have);
	memset(pad + have, 0, TAIL_PAD + 8 - have);
	*b0 = first;
	return true;
}

/* The width is a compile-time constant in each instantiation and the
 * 8 values of a group (exactly B bytes) sit at constant byte offsets and
 * shifts, so each value is one load, one shift and one mask. */
#define UNPACK32_CASE(B)                                                                  \
	case B:                                                                           \
		for (size_t g = 0; g < ng; g++) {                                         \
			const uint8_t *q = in + g * B;                                    \
			uint32_t *o = out + g * 8;                                        \
			_Pragma("GCC unroll 8") for (unsigned k = 0; k < 8; k++) o[k] =     \
			    (uint32_t)((load64(q + ((k * B) >> 3)) >> ((k * B) & 7)) &       \
			               ((1ull << B) - 1));                                \
		}                                                                         \
		break;

void
codec_unpack32(const uint8_t *in, size_t in_len, size_t n, unsigned bits, uint32_t *out)
{
	if (n == 0)
		return;
	if (bits == 0) {
		memset(out, 0, n * sizeof(*out));
		return;
	}
	/* groups whose last 8-byte load stays inside in_len */
	size_t ng = 0;
	size_t tail = ((7 * bits) >> 3) + 8;
	if (in_len >= tail)
		ng = (in_len - tail) / bits + 1;
	if (ng > n / 8)
		ng = n / 8;
	switch (bits) {
		UNPACK32_CASE(1)
		UNPACK32_CASE(2)
		UNPACK32_CASE(3)
		UNPACK32_CASE(4)
		UNPACK32_CASE(5)
		UNPACK32_CASE(6)
		UNPACK32_CASE(7)
		UNPACK32_CASE(8)
		UNPACK32_CASE(9)
		UNPACK32_CASE(10)
		UNPACK32_CASE(11)
		UNPACK32_CASE(12)
		UNPACK32_CASE(13)
		UNPACK32_CASE(14)
		UNPACK32_CASE(15)
		UNPACK32_CASE(16)
		UNPACK32_CASE(17)
		UNPACK32_CASE(18)
		UNPACK32_CASE(19)
		UNPACK32_CASE(20)
		UNPACK32_CASE(21)
		UNPACK32_CASE(22)
		UNPACK32_CASE(23)
		UNPACK32_CASE(24)
		UNPACK32_CASE(25)
		UNPACK32_CASE(26)
		UNPACK32_CASE(27)
		UNPACK32_CASE(28)
		UNPACK32_CASE(29)
		UNPACK32_CASE(30)
		UNPACK32_CASE(31)
		UNPACK32_CASE(32)
	default:
		ng = 0;
		break;
	}
	size_t nf = ng * 8;
	size_t nq = fast_count(in_len, n, bits);
	for (size_t i = nf; i < nq; i++) {
		size_t bp = i * bits;
		out[i] = (uint32_t)((load64(in + (bp >> 3)) >> (bp & 7)) & ((1ull << bits) - 1));
	}
	if (nq < nf)
		nq = nf;
	uint8_t pad[TAIL_PAD + 8];
	size_t b0;
	if (nq < n && tail_pad(in, in_len, nq, n, bits, pad, &b0)) {
		for (size_t i = nq; i < n; i++) {
			size_t bp = i * bits - b0 * 8;
			out[i] = (uint32_t)((load64(pad + (bp >> 3)) >> (bp & 7)) &
			                    ((1ull << bits) - 1));
		}
		return;
	}
	for (size_t i = nq; i < n; i++)
		out[i] = (uint32_t)unpack_one(in, in_len, i, bits);
}

void
codec_unpack32_at(const uint8_t *in, size_t in_len, size_t first, size_t n, unsigned bits,
                  uint32_t *out)
{
	if (bits == 0) {
		if (n)
			memset(out, 0, n * sizeof(*out));
		return;
	}
	uint64_t mask = (1ull << bits) - 1;
	for (size_t j = 0; j < n; j++) {
		size_t bp = (first + j) * bits;
		if ((bp >> 3) + 8 <= in_len)
			out[j] = (uint32_t)((load64(in + (bp >> 3)) >> (bp & 7)) & mask);
		else
			out[j] = (uint32_t)unpack_one(in, in_len, first + j, bits);
	}
}

void
codec_unpack64_at(const uint8_t *in, size_t in_len, size_t first, size_t n, unsigned bits,
                  uint64_t *out)
{
	if (bits == 0) {
		if (n)
			memset(out, 0, n * sizeof(*out));
		return;
	}
	uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
	for (size_t j = 0; j < n; j++) {
		size_t bp = (first + j) * bits;
		if (bits <= 57 && (bp >> 3) + 8 <= in_len)
			out[j] = (load64(in + (bp >> 3)) >> (bp & 7)) & mask;
		else
			out[j] = unpack_one(in, in_len, first + j, bits);
	}
}

void
codec_unpack64(const uint8_t *in, size_t in_len, size_t n, unsigned bits, uint64_t *out)
{
	if (n == 0)
		return;
	if (bits == 0) {
		memset(out, 0, n * sizeof(*out));
		return;
	}
	size_t nf = 0;
	if (bits <= 57) {
		uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
		nf = fast_count(in_len, n, bits);
		for (size_t i = 0; i < nf; i++) {
			size_t bp = i * bits;
			out[i] = (load64(in + (bp >> 3)) >> (bp & 7)) & mask;
		}
	}
	uint8_t pad[TAIL_PAD + 8];
	size_t b0;
	if (nf < n && tail_pad(in, in_len, nf, n, bits, pad, &b0)) {
		uint64_t mask = (1ull << bits) - 1;
		for (size_t i = nf; i < n; i++) {
			size_t bp = i * bits - b0 * 8;
			out[i] = (load64(pad + (bp >> 3)) >> (bp & 7)) & mask;
		}
		return;
	}
	for (size_t i = nf; i < n; i++)
		out[i] = unpack_one(in, in_len, i, bits);
}

void
codec_unpack64_gather(const uint8_t *in, size_t in_len, const uint32_t *idx, size_t n,
                      uint32_t base, unsigned bits, uint64_t *out)
{
	if (bits == 0) {
		memset(out, 0, n * sizeof *out);
		return;
	}
	uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
	for (size_t j = 0; j < n; j++) {
		size_t i = idx[j] - base, bp = i * bits;
		if (bits <= 57 && (bp >> 3) + 8 <= in_len)
			out[j] = (load64(in + (bp >> 3)) >> (bp & 7)) & mask;
		else
			out[j] = unpack_one(in, in_len, i, bits);
	}
}

void
codec_count_gather(const uint8_t *in, size_t in_len, const uint32_t *idx, size_t n, uint32_t base,
                   unsigned bits, uint64_t add, uint32_t *counts, uint64_t ncounts)
{
	if (bits == 0) {
		if (add < ncounts)
			counts[add] += (uint32_t)n;
		return;
	}
	/* no values array between the unpack and the count: it was a third of
	 * counting a dense filter's ordinals */
	uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
	for (size_t j = 0; j < n; j++) {
		size_t i = idx[j] - base, bp = i * bits;
		uint64_t v;
		if (bits <= 57 && (bp >> 3) + 8 <= in_len)
			v = (load64(in + (bp >> 3)) >> (bp & 7)) & mask;
		else
			v = unpack_one(in, in_len, i, bits);
		v += add;
		if (v < ncounts)
			counts[v]++;
	}
}

/* 64 values of `bits` bits from in (64 * bits / 8 bytes, plus 8 readable),
 * compared: a constant `bits` makes every load and shift a constant. */
static inline __attribute__((always_inline)) uint64_t
range_word(const uint8_t *in, unsigned bits, uint64_t lo, uint64_t span)
{
	uint64_t mask = (1ull << bits) - 1, m = 0;
#pragma GCC unroll 64
	for (unsigned k = 0; k < 64; k++) {
		unsigned bp = k * bits;
		uint64_t v = (load64(in + (bp >> 3)) >> (bp & 7)) & mask;
		m |= (uint64_t)(v - lo <= span) << k;
	}
	return m;
}

#define RANGE_CASE(B)                                                                              \
	case B:                                                                                    \
		for (; i + 64 <= nf; i += 64) {                                                    \
			uint64_t m = range_word(in + i * B / 8, B, lo, span);                        \
			bb[i >> 6] = m;                                                            \
			any |= m;                                                                  \
		}                                                                                  \
		break;

bool
codec_packed_range_bits(const uint8_t *in, size_t in_len, size_t n, unsigned bits, uint64_t lo,
                        uint64_t hi, uint64_t *bb)
{
	memset(bb, 0, (n + 63) / 64 * sizeof(uint64_t));
	uint64_t span = hi - lo, any = 0;
	if (bits == 0) {
		if (lo == 0 && n) /* every value is 0 */
			for (size_t i = 0; i < n; i++)
				bb[i >> 6] |= (uint64_t)1 << (i & 63);
		return lo == 0 && n;
	}
	uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
	size_t nf = bits <= 57 ? fast_count(in_len, n, bits) : 0;
	size_t i = 0;
	switch (bits) {
		RANGE_CASE(1)
		RANGE_CASE(2)
		RANGE_CASE(3)
		RANGE_CASE(4)
		RANGE_CASE(5)
		RANGE_CASE(6)
		RANGE_CASE(7)
		RANGE_CASE(8)
		RANGE_CASE(9)
		RANGE_CASE(10)
		RANGE_CASE(11)
		RANGE_CASE(12)
		RANGE_CASE(13)
		RANGE_CASE(14)
		RANGE_CASE(15)
		RANGE_CASE(16)
		RANGE_CASE(17)
		RANGE_CASE(18)
		RANGE_CASE(19)
		RANGE_CASE(20)
		RANGE_CASE(21)
		RANGE_CASE(22)
		RANGE_CASE(23)
		RANGE_CASE(24)
		RANGE_CASE(25)
		RANGE_CASE(26)
		RANGE_CASE(27)
		RANGE_CASE(28)
		RANGE_CASE(29)
		RANGE_CASE(30)
		RANGE_CASE(31)
		RANGE_CASE(32)
		RANGE_CASE(33)
		RANGE_CASE(34)
		RANGE_CASE(35)
		RANGE_CASE(36)
		RANGE_CASE(37)
		RANGE_CASE(38)
		RANGE_CASE(39)
		RANGE_CASE(40)
		RANGE_CASE(41)
		RANGE_CASE(42)
		RANGE_CASE(43)
		RANGE_CASE(44)
		RANGE_CASE(45)
		RANGE_CASE(46)
		RANGE_CASE(47)
		RANGE_CASE(48)
	default:
		break;
	}
	for (; i + 64 <= nf; i += 64) {
		uint64_t m = 0;
		for (size_t k = 0; k < 64; k++) {
			size_t bp = (i + k) * bits;
			uint64_t v = (load64(in + (bp >> 3)) >> (bp & 7)) & mask;
			m |= (uint64_t)(v - lo <= span) << k;
		}
		bb[i >> 6] = m;
		any |= m;
	}
	for (; i < n; i++) {
		uint64_t v = i < nf ? (load64(in + ((i * bits) >> 3)) >> ((i * bits) & 7)) & mask
		                    : unpack_one(in, in_len, i, bits);
		if (v - lo <= span) {
			bb[i >> 6] |= (uint64_t)1 << (i & 63);
			any = 1;
		}
	}
	return any != 0;
}

/* ---- postings blocks ---- */

void
codec_block_encode(cm_buf *out, const uint32_t *docs, const uint32_t *freqs, uint32_t n,
                   uint32_t prev)
{
	uint32_t d[ST_BLOCK], f[ST_BLOCK];
	uint32_t dor = 0, f_or = 0;
	for (uint32_t i = 0; i < n; i++) {
		d[i] = docs[i] - prev - 1;
		prev = docs[i];
		f[i] = freqs[i] - 1;
		dor |= d[i];
		f_or |= f[i];
	}
	unsigned db = codec_bits32(dor), fb = codec_bits32(f_or);
	cm_buf_put_u8(out, (uint8_t)db);
	cm_buf_put_u8(out, (uint8_t)fb);
	codec_pack32(out, d, n, db);
	codec_pack32(out, f, n, fb);
}

size_t
codec_block_size(const uint8_t *in, size_t len, uint32_t n)
{
	if (len < 2 || in[0] > 32 || in[1] > 32)
		return 0;
	size_t sz = 2 + codec_packed_size(n, in[0]) + codec_packed_size(n, in[1]);
	return sz <= len ? sz : 0;
}

bool
codec_block_decode(const uint8_t *in, size_t len, uint32_t n, uint32_t prev, uint32_t *docs,
                   uint32_t *freqs)
{
	if (n == 0 || n > ST_BLOCK || codec_block_size(in, len, n) == 0)
		return false;
	unsigned db = in[0], fb = in[1];
	size_t dl = codec_packed_size(n, db);
	codec_unpack32(in + 2, len - 2, n, db, docs);
	codec_unpack32(in + 2 + dl, len - 2 - dl, n, fb, freqs);
	/* Prefix sum in 64 bits so a corrupt delta cannot wrap around. */
	uint64_t d = prev == UINT32_MAX ? 0 : (uint64_t)prev + 1;
	/* Docs only grow, so checking the last one bounds them all. */
	for (uint32_t i = 0; i < n; i++) {
		d += docs[i];
		docs[i] = (uint32_t)d;
		d++;
	}
	bool bad = d - 1 > UINT32_MAX - 2;
	if (fb == 32) {
		for (uint32_t i = 0; i < n; i++)
			bad |= freqs[i] == UINT32_MAX;
	}
	for (uint32_t i = 0; i < n; i++)
		freqs[i] += 1;
	return !bad;
}

/* ---- Lucene SmallFloat.intToByte4 / byte4ToInt ---- */

static uint32_t
long_to_int4(uint64_t i)
{
	unsigned nbits = codec_bits64(i);
	if (nbits < 4)
		return (uint32_t)i; /* subnormal */
	unsigned shift = nbits - 4;
	uint32_t enc = (uint32_t)(i >> shift) & 0x07;
	return enc | ((shift + 1) << 3);
}

static uint64_t
int4_to_long(uint32_t i)
{
	uint64_t bits = i & 0x07;
	int shift = (int)(i >> 3) - 1;
	return shift == -1 ? bits : (bits | 0x08) << shift;
}

/* 255 - longToInt4(Integer.MAX_VALUE) = 255 - 231 */
#define NORM_FREE_VALUES 24u

uint8_t
st_norm_encode(uint32_t length)
{
	if (length > INT32_MAX)
		length = INT32_MAX; /* Lucene's lengths are Java ints */
	if (length < NORM_FREE_VALUES)
		return (uint8_t)length;
	return (uint8_t)(NORM_FREE_VALUES + long_to_int4(length - NORM_FREE_VALUES));
}

uint32_t
st_norm_decode(uint8_t norm)
{
	if (norm < NORM_FREE_VALUES)
		return norm;
	uint64_t v = NORM_FREE_VALUES + int4_to_long(norm - NORM_FREE_VALUES);
	return v > INT32_MAX ? INT32_MAX : (uint32_t)v;
}

/* ---- NumericUtils.doubleToSortableLong ---- */

int64_t
st_double_to_sortable(double d)
{
	int64_t bits;
	if (d != d) {
		bits = 0x7ff8000000000000LL; /* Double.doubleToLongBits canonical NaN */
	} else {
		memcpy(&bits, &d, 8);
	}
	return bits ^ ((bits >> 63) & 0x7fffffffffffffffLL);
}

double
st_sortable_to_double(int64_t v)
{
	int64_t bits = v ^ ((v >> 63) & 0x7fffffffffffffffLL);
	double d;
	memcpy(&d, &bits, 8);
	return d;
}
