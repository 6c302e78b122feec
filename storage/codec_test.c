/* Codec round trips: bit-packing at every width, postings blocks at the
 * boundaries (0, 1, 127, 128, 129 docs, equal deltas, the largest doc
 * number), random postings against a model, Lucene's norm byte and the
 * sortable double mapping; plus a decode speed figure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "codec.h"
#include "st_segment.h"

#ifndef REPS
#define REPS 5
#endif

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void
test_pack(void)
{
	static const size_t ns[] = {0, 1, 2, 7, 8, 9, 127, 128, 129, 1000};
	uint32_t in32[1000], out32[1000];
	uint64_t in64[1000], out64[1000];
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	for (unsigned bits = 0; bits <= 64; bits++) {
		for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
			size_t n = ns[k];
			uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
			for (size_t i = 0; i < n; i++) {
				in64[i] = rnd() & mask;
				if (i % 5 == 0)
					in64[i] = mask; /* all ones at the width */
				in32[i] = (uint32_t)in64[i];
			}
			if (bits <= 32) {
				cm_buf_reset(&b);
				codec_pack32(&b, in32, n, bits);
				CHECK(b.len == codec_packed_size(n, bits));
				/* exact length: the tail takes the careful path */
				codec_unpack32(b.data, b.len, n, bits, out32);
				CHECKF(memcmp(in32, out32, n * 4) == 0, "pack32 bits %u n %zu", bits, n);
			}
			cm_buf_reset(&b);
			codec_pack64(&b, in64, n, bits);
			CHECK(b.len == codec_packed_size(n, bits));
			codec_unpack64(b.data, b.len, n, bits, out64);
			CHECKF(memcmp(in64, out64, n * 8) == 0, "pack64 bits %u n %zu", bits, n);
			/* a buffer cut short (a byte less, ones after it): the
			 * missing bits read as 0, as the byte-wise path reads them */
			if (b.len > 0) {
				uint8_t cut[8200];
				memcpy(cut, b.data, b.len);
				memset(cut + b.len - 1, 0xff, 9);
				uint64_t want[1000];
				for (size_t i = 0; i < n; i++) {
					uint64_t v = 0;
					for (unsigned q = 0; q < bits; q++) {
						size_t bit = i * bits + q;
						if ((bit >> 3) < b.len - 1)
							v |= (uint64_t)(b.data[bit >> 3] >>
							                    (bit & 7) &
							                1)
							     << q;
					}
					want[i] = v;
				}
				codec_unpack64(cut, b.len - 1, n, bits, out64);
				CHECKF(memcmp(want, out64, n * 8) == 0, "cut64 bits %u n %zu", bits,
				       n);
				if (bits <= 32) {
					codec_unpack32(cut, b.len - 1, n, bits, out32);
					bool ok = true;
					for (size_t i = 0; i < n; i++)
						ok &= out32[i] == (uint32_t)want[i];
					CHECKF(ok, "cut32 bits %u n %zu", bits, n);
				}
			}
			/* range bits on the packed values, against the unpacked */
			for (int r = 0; r < 3; r++) {
				uint64_t a = n ? in64[rnd() % n] : 0, z = n ? in64[rnd() % n] : 0;
				if (r == 2)
					a = 0, z = mask;
				uint64_t lo = a < z ? a : z, hi = a < z ? z : a;
				uint64_t bb[80], any = 0;
				bool got = codec_packed_range_bits(b.data, b.len, n, bits, lo, hi, bb);
				bool ok = true;
				for (size_t i = 0; i < n; i++) {
					bool in = in64[i] >= lo && in64[i] <= hi;
					any |= in;
					ok &= in == !!(bb[i >> 6] & ((uint64_t)1 << (i & 63)));
				}
				CHECKF(ok && got == (any != 0), "range bits %u n %zu [%llu, %llu]", bits, n,
				       (unsigned long long)lo, (unsigned long long)hi);
			}
		}
	}
	cm_buf_free(&b);
}

static void
block_round_trip(const uint32_t *docs, const uint32_t *freqs, uint32_t n, uint32_t prev)
{
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	codec_block_encode(&b, docs, freqs, n, prev);
	uint32_t d[ST_BLOCK], f[ST_BLOCK];
	CHECK(codec_block_size(b.data, b.len, n) == b.len);
	CHECKF(codec_block_decode(b.data, b.len, n, prev, d, f), "decode n=%u", n);
	CHECK(memcmp(d, docs, n * 4) == 0 && memcmp(f, freqs, n * 4) == 0);
	/* truncated bytes are refused, never read past */
	if (b.len > 2)
		CHECK(codec_block_size(b.data, b.len - 1, n) == 0 &&
		      !codec_block_decode(b.data, b.len - 1, n, prev, d, f));
	cm_buf_free(&b);
}

static void
test_blocks(void)
{
	uint32_t docs[ST_BLOCK], freqs[ST_BLOCK];
	/* one doc: 0 with no previous block, and the largest doc number */
	docs[0] = 0;
	freqs[0] = 1;
	block_round_trip(docs, freqs, 1, UINT32_MAX);
	docs[0] = UINT32_MAX - 2;
	freqs[0] = UINT32_MAX;
	block_round_trip(docs, freqs, 1, UINT32_MAX);
	block_round_trip(docs, freqs, 1, UINT32_MAX - 3);
	/* equal deltas: consecutive docs cost zero bits */
	for (uint32_t i = 0; i < ST_BLOCK; i++) {
		docs[i] = 1000 + i;
		freqs[i] = 1;
	}
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	codec_block_encode(&b, docs, freqs, ST_BLOCK, 999);
	CHECK(b.len == 2);
	cm_buf_free(&b);
	block_round_trip(docs, freqs, ST_BLOCK, 999);
	/* equal non-unit deltas, a block ending at the largest doc */
	for (uint32_t i = 0; i < ST_BLOCK; i++) {
		docs[i] = UINT32_MAX - 2 - (ST_BLOCK - 1 - i) * 1000;
		freqs[i] = 1 + i;
	}
	block_round_trip(docs, freqs, ST_BLOCK, docs[0] - 5);
	block_round_trip(docs, freqs, 127, UINT32_MAX);
	/* a delta that would pass UINT32_MAX - 2 is refused */
	uint32_t d[ST_BLOCK], f[ST_BLOCK];
	cm_buf_init(&b, CM_MEM_STORAGE);
	docs[0] = UINT32_MAX - 2;
	freqs[0] = 1;
	codec_block_encode(&b, docs, freqs, 1, UINT32_MAX);
	CHECK(!codec_block_decode(b.data, b.len, 1, 5, d, f));
	cm_buf_free(&b);
	/* random blocks of every size */
	for (int trial = 0; trial < 2000; trial++) {
		uint32_t n = 1 + (uint32_t)(rnd() % ST_BLOCK);
		uint32_t prev = trial % 3 ? (uint32_t)(rnd() % 1000000) : UINT32_MAX;
		uint32_t x = prev == UINT32_MAX ? 0 : prev + 1;
		unsigned spread = 1 + (unsigned)(rnd() % 20);
		for (uint32_t i = 0; i < n; i++) {
			x += (uint32_t)(rnd() % (1u << spread)) + (i ? 1 : 0);
			docs[i] = x;
			freqs[i] = 1 + (uint32_t)(rnd() % (trial % 2 ? 3 : 100000));
		}
		block_round_trip(docs, freqs, n, prev);
	}
}

/* Postings through a real segment: one keyword term per doc count. */
static void
test_postings_lists(void)
{
	static const uint32_t counts[] = {1, 2, 127, 128, 129, 255, 256, 257, 1000};
	const uint32_t ndocs = 3000;
	st_field_def fk = {.path = "k", .type = ST_FT_KEYWORD, .index = true, .doc_values = true};
	st_field_def ft = {.path = "t", .type = ST_FT_TEXT, .analyzer = ST_AN_WHITESPACE,
	                   .index = true};
	char names[16][16];
	uint8_t *member = calloc((size_t)ndocs * 16, 1); /* doc x list */
	uint32_t *tfreq = calloc((size_t)ndocs * 16, sizeof(uint32_t));
	size_t nlists = sizeof(counts) / sizeof(counts[0]);
	for (size_t l = 0; l < nlists; l++) {
		snprintf(names[l], sizeof(names[l]), "c%u", counts[l]);
		/* spread: first list at the very start, others random */
		uint32_t placed = 0;
		while (placed < counts[l]) {
			uint32_t d = l == 0 ? 0 : (l == 2 ? placed : (uint32_t)(rnd() % ndocs));
			if (!member[d * 16 + l]) {
				member[d * 16 + l] = 1;
				tfreq[d * 16 + l] = 1 + (uint32_t)(rnd() % 4);
				placed++;
			}
		}
	}
	/* random sparse lists vs a model */
	for (size_t l = nlists; l < 16; l++) {
		snprintf(names[l], sizeof(names[l]), "r%zu", l);
		uint32_t mod = 1 + (uint32_t)(rnd() % 50);
		for (uint32_t d = 0; d < ndocs; d++)
			if (rnd() % mod == 0) {
				member[d * 16 + l] = 1;
				tfreq[d * 16 + l] = 1 + (uint32_t)(rnd() % 3);
			}
	}
	st_segbuild *b = st_segbuild_create();
	char *text = malloc(16 * 4 * 8 + 1);
	for (uint32_t d = 0; d < ndocs; d++) {
		st_value vals[40];
		size_t nv = 0;
		text[0] = 0;
		for (size_t l = 0; l < 16; l++) {
			if (!member[d * 16 + l])
				continue;
			vals[nv++] = (st_value){.field = &fk, .s = names[l], .n = strlen(names[l])};
			for (uint32_t k = 0; k < tfreq[d * 16 + l]; k++) {
				strcat(text, names[l]);
				strcat(text, " ");
			}
		}
		vals[nv++] = (st_value){.field = &ft, .s = text, .n = strlen(text)};
		char id[16];
		snprintf(id, sizeof(id), "%u", d);
		st_doc doc = {.id = id, .id_len = strlen(id), .source = "{}", .source_len = 2,
		              .values = vals, .nvalues = nv};
		uint32_t no;
		cm_error err = {0};
		REQUIRE(st_segbuild_add(b, &doc, d, 1, 1, &no, &err) == CM_OK);
	}
	char dir[] = "/tmp/codectestXXXXXX";
	REQUIRE(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof(path), "%s/seg-1.mdb", dir);
	cm_error err = {0};
	REQUIRE(st_segbuild_write(b, NULL, path, 1, NULL, &err) == CM_OK);
	st_segbuild_destroy(b);
	st_segment *s;
	REQUIRE(st_segment_open(path, &s, &err) == CM_OK);
	st_seg_txn *t;
	REQUIRE(st_seg_txn_begin(s, &t) == CM_OK);
	const st_field_info *fik = st_segment_field(s, "k"), *fit = st_segment_field(s, "t");
	REQUIRE(fik && fit);
	st_postings p;
	CHECK(st_postings_open(t, fik, "c0", 2, &p) == CM_ENOTFOUND); /* 0 docs */
	for (size_t l = 0; l < 16; l++) {
		for (int fi = 0; fi < 2; fi++) {
			const st_field_info *f = fi ? fit : fik;
			REQUIRE(st_postings_open(t, f, names[l], strlen(names[l]), &p) == CM_OK);
			uint32_t n = 0, d = 0;
			bool ok = true;
			for (uint32_t got = st_postings_next(&p); got != ST_NO_MORE_DOCS;
			     got = st_postings_next(&p)) {
				while (d < ndocs && !member[d * 16 + l])
					d++;
				uint32_t wf = fi ? tfreq[d * 16 + l] : 1;
				if (got != d || p.freq != wf) {
					ok = false;
					break;
				}
				if (fi) {
					uint32_t pos[8];
					int np = st_postings_positions(&p, pos, 8);
					ok &= np == (int)wf;
				}
				n++;
				d++;
			}
			while (d < ndocs && !member[d * 16 + l])
				d++;
			CHECKF(ok && d == ndocs && n == p.doc_freq, "list %s field %d", names[l], fi);
			/* advance to every member from scratch, and past the end */
			REQUIRE(st_postings_open(t, f, names[l], strlen(names[l]), &p) == CM_OK);
			CHECK(st_postings_advance(&p, ndocs) == ST_NO_MORE_DOCS);
		}
	}
	st_seg_txn_end(t);
	st_segment_close(s);
	cm_rm_rf(dir);
	free(member);
	free(tfreq);
	free(text);
}

static void
test_norms(void)
{
	for (uint32_t i = 0; i < 24; i++)
		CHECK(st_norm_encode(i) == i && st_norm_decode((uint8_t)i) == i);
	/* Lucene values: intToByte4(24) = 24 + longToInt4(0) = 24, (25) = 25,
	 * (40) = 24 + longToInt4(16) = 24 + 16 = 40, byte4ToInt(255) = 2013265944 */
	CHECK(st_norm_encode(25) == 25);
	CHECK(st_norm_encode(40) == 40 && st_norm_decode(40) == 40);
	CHECK(st_norm_encode(UINT32_MAX) == 255 && st_norm_encode(INT32_MAX) == 255);
	CHECK(st_norm_decode(255) == 2013265944u);
	uint8_t last = 0;
	for (uint64_t i = 0; i <= INT32_MAX; i += 1 + i / 64) {
		uint8_t e = st_norm_encode((uint32_t)i);
		uint32_t dec = st_norm_decode(e);
		CHECK(e >= last);
		last = e;
		if (dec > i || st_norm_encode(dec) != e) {
			CHECKF(0, "norm %llu", (unsigned long long)i);
			break;
		}
	}
	for (int b = 1; b < 256; b++)
		CHECK(st_norm_decode((uint8_t)b) > st_norm_decode((uint8_t)(b - 1)));
}

static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void
test_sortable(void)
{
	CHECK(st_double_to_sortable(0.0) == 0);
	CHECK(st_double_to_sortable(-0.0) == -1);
	CHECK(st_double_to_sortable(1.0) == 0x3ff0000000000000LL);
	CHECK(st_double_to_sortable(-1.0) == (int64_t)(0xbff0000000000000ull ^ 0x7fffffffffffffffull));
	double v[2000];
	int n = 0;
	v[n++] = -INFINITY;
	v[n++] = INFINITY;
	v[n++] = 4.9e-324;
	v[n++] = -4.9e-324;
	v[n++] = 1.7976931348623157e308;
	v[n++] = -1.7976931348623157e308;
	while (n < 2000) {
		uint64_t bits = rnd();
		double d;
		memcpy(&d, &bits, 8);
		if (d == d)
			v[n++] = d;
	}
	qsort(v, n, sizeof(double), cmp_d);
	for (int i = 0; i < n; i++) {
		CHECK(st_sortable_to_double(st_double_to_sortable(v[i])) == v[i]);
		if (i && v[i] > v[i - 1])
			CHECK(st_double_to_sortable(v[i]) > st_double_to_sortable(v[i - 1]));
	}
	double nan = NAN;
	CHECK(st_double_to_sortable(nan) > st_double_to_sortable(INFINITY));
}

static void
bench_decode(void)
{
	enum { NB = 20000 };
	cm_buf b;
	cm_buf_init(&b, CM_MEM_STORAGE);
	uint32_t docs[ST_BLOCK], freqs[ST_BLOCK];
	size_t *off = malloc((NB + 1) * sizeof(size_t));
	uint32_t x = 0;
	for (int k = 0; k < NB; k++) {
		uint32_t prev = x ? x - 1 : UINT32_MAX;
		for (int i = 0; i < ST_BLOCK; i++) {
			x += 1 + (uint32_t)(rnd() % 100);
			docs[i] = x;
			freqs[i] = 1 + (uint32_t)(rnd() % 4);
		}
		off[k] = b.len;
		codec_block_encode(&b, docs, freqs, ST_BLOCK, prev);
		x++;
	}
	off[NB] = b.len;
	uint64_t t0 = cm_now_ns();
	uint64_t sum = 0;
	for (int rep = 0; rep < REPS; rep++)
		for (int k = 0; k < NB; k++) {
			codec_block_decode(b.data + off[k], b.len - off[k], ST_BLOCK, 7, docs, freqs);
			sum += docs[ST_BLOCK - 1];
		}
	double ns = (double)(cm_now_ns() - t0) / ((double)REPS * NB * ST_BLOCK);
	printf("block decode: %.2f ns/doc (%.2f bytes/doc), checksum %llu\n", ns,
	       (double)b.len / (NB * ST_BLOCK), (unsigned long long)(sum & 0xff));
	free(off);
	cm_buf_free(&b);
}

int
main(void)
{
	test_pack();
	test_blocks();
	test_postings_lists();
	test_norms();
	test_sortable();
	bench_decode();
	return check_report("codec_test");
}
