/* Encoders for every section and the file writer shared by
 * st_segbuild_write and st_segment_merge. */
#define _GNU_SOURCE /* sync_file_range */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#define ZDICT_STATIC_LINKING_ONLY
#include <zdict.h>
#include <zstd.h>

#include "codec.h"
#include "segment_private.h"

/* ---- key/value streams ---- */

size_t
kv_begin(cm_buf *s, const void *key, size_t klen)
{
	cm_buf_put_u16(s, (uint16_t)klen);
	cm_buf_put(s, key, klen);
	cm_buf_put_u32(s, 0);
	return s->len;
}

void
kv_end(cm_buf *s, size_t at, bool checksum)
{
	if (checksum)
		cm_buf_put_checksum(s, at);
	uint32_t vlen = (uint32_t)(s->len - at);
	uint8_t *p = s->data + at - 4;
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(vlen >> (8 * i));
}

size_t
seg_term_key(uint8_t *key, uint8_t tag, uint16_t field, const void *term, size_t len)
{
	key[0] = tag;
	key[1] = (uint8_t)(field >> 8);
	key[2] = (uint8_t)field;
	if (len)
		memcpy(key + 3, term, len);
	return 3 + len;
}

static void
spill_free(segw_spill *sp)
{
	cm_free(CM_MEM_STORAGE, sp->off);
	cm_free(CM_MEM_STORAGE, sp->len);
	memset(sp, 0, sizeof(*sp));
}

void
segw_part_init(segw_part *p)
{
	for (int i = 0; i < SEC_N; i++)
		cm_buf_init(&p->sec[i], CM_MEM_STORAGE);
}

void
segw_part_free(segw_part *p)
{
	for (int i = 0; i < SEC_N; i++) {
		cm_buf_free(&p->sec[i]);
		spill_free(&p->spill[i]);
	}
}

cm_err
segw_spill_open(segw *w, const char *path, size_t spill_at, cm_error *err)
{
	size_t pl = strlen(path);
	char *tmpl = cm_malloc(CM_MEM_STORAGE, pl + 16);
	memcpy(tmpl, path, pl);
	memcpy(tmpl + pl, ".spill.XXXXXX", 14);
	int fd = mkstemp(tmpl);
	if (fd >= 0)
		unlink(tmpl);
	cm_free(CM_MEM_STORAGE, tmpl);
	if (fd < 0)
		return cm_error_set(err, CM_EIO, "spill file for %s: %s", path, strerror(errno));
	w->spill_fd = fd;
	w->spill_at = spill_at ? spill_at : 1;
	atomic_store(&w->spill_end, 0);
	return CM_OK;
}

cm_err
segw_spill_out(segw *w, cm_buf *s, segw_spill *sp, size_t at)
{
	if (!w->spill_at || s->len == 0 || s->len < at)
		return CM_OK;
	uint64_t off = atomic_fetch_add(&w->spill_end, s->len);
	size_t done = 0;
	while (done < s->len) {
		ssize_t n = pwrite(w->spill_fd, s->data + done, s->len - done, (off_t)(off + done));
		if (n <= 0)
			return CM_EIO;
		done += (size_t)n;
	}
	if (sp->n == sp->cap) {
		sp->cap = sp->cap ? sp->cap * 2 : 8;
		sp->off = cm_realloc(CM_MEM_STORAGE, sp->off, sp->cap * sizeof(uint64_t));
		sp->len = cm_realloc(CM_MEM_STORAGE, sp->len, sp->cap * sizeof(uint64_t));
	}
	sp->off[sp->n] = off;
	sp->len[sp->n] = s->len;
	sp->n++;
	/* give the memory back: the point of spilling */
	cm_buf_free(s);
	return CM_OK;
}

void
segw_init(segw *w)
{
	memset(w, 0, sizeof(*w));
	w->spill_fd = -1;
	cm_buf_init(&w->ids, CM_MEM_STORAGE);
	cm_buf_init(&w->dict, CM_MEM_STORAGE);
}

void
segw_free(segw *w)
{
	for (size_t i = 0; i < w->nfields; i++)
		cm_free(CM_MEM_STORAGE, (void *)w->fields[i].name);
	cm_free(CM_MEM_STORAGE, w->fields);
	for (size_t i = 0; i < w->nparts; i++)
		segw_part_free(&w->parts[i]);
	cm_free(CM_MEM_STORAGE, w->parts);
	for (size_t i = 0; i < w->nstored; i++) {
		cm_buf_free(&w->stored[i]);
		if (w->stored_spill)
			spill_free(&w->stored_spill[i]);
	}
	cm_free(CM_MEM_STORAGE, w->stored);
	cm_free(CM_MEM_STORAGE, w->stored_spill);
	cm_buf_free(&w->ids);
	spill_free(&w->ids_spill);
	cm_buf_free(&w->dict);
	if (w->spill_fd >= 0)
		close(w->spill_fd);
	memset(w, 0, sizeof(*w));
	w->spill_fd = -1;
}

/* ---- postings ---- */

void
postenc_init(postenc *e)
{
	memset(e, 0, sizeof(*e));
	cm_buf_init(&e->blocks, CM_MEM_STORAGE);
	cm_buf_init(&e->tmp, CM_MEM_STORAGE);
	cm_buf_init(&e->pos, CM_MEM_STORAGE);
}

void
postenc_free(postenc *e)
{
	cm_buf_free(&e->blocks);
	cm_buf_free(&e->tmp);
	cm_buf_free(&e->pos);
	cm_free(CM_MEM_STORAGE, e->ends);
}

static void
put_u32_at(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The impacts of n docs into IMP_BYTES at out: the pairs (freq, norm)
 * that no other pair beats on both (Lucene's competitive impacts), so
 * BM25's bound over them is the docs' best score under any avgdl and
 * idf, not the loose max freq with min norm (short documents put a very
 * short doc and a high freq in nearly every block). Beyond IMP_SLOTS
 * pairs, neighbours merge into (the higher freq, the lower norm), which
 * still bounds both; the merge that raises the bound least goes first,
 * judged at the docs' own mean length. Freqs from IMP_FREQ_ANY up are
 * stored as IMP_FREQ_ANY (any freq); empty slots have freq 0. */
static void
impacts_put(uint8_t *out, const uint32_t *docs, const uint32_t *freqs, uint32_t n,
            const uint8_t *norms)
{
	uint32_t best[256], count[256];
	uint64_t seen[4] = {0}; /* norms present: walked in ascending order below */
	for (uint32_t i = 0; i < n; i++) {
		uint8_t nb = norms ? norms[docs[i]] : 0;
		uint64_t bit = (uint64_t)1 << (nb & 63);
		if (!(seen[nb >> 6] & bit)) {
			seen[nb >> 6] |= bit;
			best[nb] = count[nb] = 0;
		}
		if (freqs[i] > best[nb])
			best[nb] = freqs[i];
		count[nb]++;
	}
	double len_sum = 0;
	for (unsigned w = 0; w < 4; w++)
		for (uint64_t bits = seen[w]; bits; bits &= bits - 1) {
			unsigned nb = w * 64 + (unsigned)__builtin_ctzll(bits);
			len_sum += (double)count[nb] * st_norm_decode((uint8_t)nb);
		}
	/* norms ascending; a pair stays only when its freq beats every lower
	 * norm's */
	uint32_t pf[256];
	uint8_t pn[256];
	unsigned m = 0;
	for (unsigned w = 0; w < 4; w++)
		for (uint64_t bits = seen[w]; bits; bits &= bits - 1) {
			unsigned nb = w * 64 + (unsigned)__builtin_ctzll(bits);
			uint32_t f = best[nb];
			if (m && f <= pf[m - 1])
				continue;
			pf[m] = f;
			pn[m] = (uint8_t)nb;
			m++;
			if (f >= IMP_FREQ_ANY)
				goto frontier; /* stored as any freq: it covers every higher norm */
		}
frontier:;
	double avg = n && len_sum > 0 ? len_sum / n : 1.0;
	while (m > IMP_SLOTS) {
		/* merging i and i + 1 gives (pf[i + 1], pn[i]) */
		unsigned at = 0;
		double least = INFINITY;
		for (unsigned i = 0; i + 1 < m; i++) {
			double key = pf[i + 1] / (0.25 + 0.75 * st_norm_decode(pn[i]) / avg);
			if (key < least) {
				least = key;
				at = i;
			}
		}
		pf[at] = pf[at + 1];
		memmove(pf + at + 1, pf + at + 2, (m - at - 2) * sizeof pf[0]);
		memmove(pn + at + 1, pn + at + 2, (m - at - 2) * sizeof pn[0]);
		m--;
	}
	memset(out, 0, IMP_BYTES);
	for (unsigned k = 0; k < m; k++) {
		out[2 * k] = (uint8_t)(pf[k] < IMP_FREQ_ANY ? pf[k] : IMP_FREQ_ANY);
		out[2 * k + 1] = pn[k];
	}
}

/* One block's positions: per doc, the first position then deltas, all
 * bit-packed at one width (u8 bits, packed values). */
static void
put_block_positions(postenc *e, cm_buf *out, const uint32_t *pos, const uint32_t *freqs,
                    uint32_t n)
{
	size_t total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += freqs[i];
	cm_buf_reset(&e->tmp);
	cm_buf_reserve(&e->tmp, total * sizeof(uint32_t));
	uint32_t *v = (uint32_t *)e->tmp.data, or = 0;
	size_t k = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t prev = 0;
		for (uint32_t j = 0; j < freqs[i]; j++, k++) {
			v[k] = pos[k] - prev;
			prev = pos[k];
			or |= v[k];
		}
	}
	unsigned bits = codec_bits32(or);
	cm_buf_put_u8(out, (uint8_t)bits);
	codec_pack32(out, v, total, bits);
}

/* A term's positions, appended to out from `at` (where its T value
 * ends): one block's bytes and checksum, or a table of (end, checksum)
 * per block, its checksum, then the blocks (seg_sum4, format 4). */
static void
postenc_positions(postenc *e, cm_buf *out, const uint32_t *freqs, uint32_t df, const uint32_t *pos)
{
	size_t at = out->len;
	uint32_t nblocks = (df + ST_BLOCK - 1) / ST_BLOCK;
	if (nblocks <= 1) {
		put_block_positions(e, out, pos, freqs, df);
		cm_buf_put_u32(out, seg_sum4(out->data + at, out->len - at));
		return;
	}
	cm_buf_reset(&e->pos);
	size_t table = out->len;
	cm_buf_reserve(out, (size_t)nblocks * 8 + 4);
	out->len += (size_t)nblocks * 8;
	for (uint32_t b = 0; b < nblocks; b++) {
		size_t start = e->pos.len;
		uint32_t lo = b * ST_BLOCK;
		uint32_t n = df - lo < ST_BLOCK ? df - lo : ST_BLOCK;
		put_block_positions(e, &e->pos, pos, freqs + lo, n);
		for (uint32_t i = lo; i < lo + n; i++)
			pos += freqs[i];
		put_u32_at(out->data + table + b * 8, (uint32_t)e->pos.len);
		put_u32_at(out->data + table + b * 8 + 4,
		           seg_sum4(e->pos.data + start, e->pos.len - start));
	}
	cm_buf_put_u32(out, seg_sum4(out->data + at, out->len - at));
	cm_buf_put(out, e->pos.data, e->pos.len);
}

void
postenc_term(postenc *e, cm_buf *tstream, uint16_t field, const uint8_t *term, size_t tlen,
             bool with_ord, uint64_t ord, const uint32_t *docs, const uint32_t *freqs, uint32_t df,
             const uint32_t *pos, const uint8_t *norms)
{
	uint8_t key[SEG_MAX_KEY + 1];
	size_t kl = seg_term_key(key, TAG_TERM, field, term, tlen);
	uint64_t ttf = 0;
	for (uint32_t i = 0; i < df; i++)
		ttf += freqs[i];
	size_t at = kv_begin(tstream, key, kl);
	cm_buf_put_varint(tstream, df);
	cm_buf_put_varint(tstream, ttf);
	if (with_ord)
		cm_buf_put_varint(tstream, ord);
	uint32_t nblocks = (df + ST_BLOCK - 1) / ST_BLOCK;
	if (df == 1) {
		cm_buf_put_varint(tstream, docs[0]);
		kv_end(tstream, at, true);
	} else if (nblocks == 1) {
		uint32_t maxf = 0;
		uint8_t minn = 255;
		for (uint32_t i = 0; i < df; i++) {
			if (freqs[i] > maxf)
				maxf = freqs[i];
			uint8_t nb = norms ? norms[docs[i]] : 0;
			if (nb < minn)
				minn = nb;
		}
		cm_buf_put_varint(tstream, docs[df - 1]);
		cm_buf_put_varint(tstream, maxf);
		cm_buf_put_u8(tstream, minn);
		codec_block_encode(tstream, docs, freqs, df, UINT32_MAX);
		kv_end(tstream, at, true);
	} else {
		/* the header's own checksum lets a count read doc_freq without
		 * hashing the skip table */
		cm_buf_put_u32(tstream, seg_sum4(tstream->data + at, tstream->len - at));
		cm_buf_reset(&e->blocks);
		uint32_t ngroups = (nblocks + IMP_GROUP - 1) / IMP_GROUP;
		size_t skip = tstream->len, table = (size_t)nblocks * SKIP_ENTRY4;
		size_t groups = (size_t)ngroups * IMP_BYTES;
		cm_buf_reserve(tstream, table + groups + 4);
		tstream->len += table + groups;
		uint32_t prev = UINT32_MAX;
		for (uint32_t b = 0; b < nblocks; b++) {
			uint32_t lo = b * ST_BLOCK;
			uint32_t n = df - lo < ST_BLOCK ? df - lo : ST_BLOCK;
			size_t start = e->blocks.len;
			codec_block_encode(&e->blocks, docs + lo, freqs + lo, n, prev);
			prev = docs[lo + n - 1];
			uint8_t *s = tstream->data + skip + (size_t)b * SKIP_ENTRY4;
			put_u32_at(s, prev);
			put_u32_at(s + 4, (uint32_t)e->blocks.len);
			put_u32_at(s + 8, seg_sum4(e->blocks.data + start, e->blocks.len - start));
			impacts_put(s + 12, docs + lo, freqs + lo, n, norms);
			if (b % IMP_GROUP == IMP_GROUP - 1 || b + 1 == nblocks) {
				uint32_t g = b / IMP_GROUP, glo = g * IMP_GROUP * ST_BLOCK;
				impacts_put(tstream->data + skip + table + (size_t)g * IMP_BYTES, docs + glo,
				            freqs + glo, lo + n - glo, norms);
			}
		}
		cm_buf_put_u32(tstream, seg_sum4(tstream->data + skip, tstream->len - skip));
		cm_buf_put(tstream, e->blocks.data, e->blocks.len);
		kv_end(tstream, at, false);
	}
	if (pos) {
		/* the positions go in the same value, after the postings, and
		 * the postings' length last: a separate P entry repeated the
		 * term as its key and cost a node (14% of a text index). */
		size_t plen = tstream->len - at;
		postenc_positions(e, tstream, freqs, df, pos);
		/* read from the end, as seg_rvarint does: the low 7 bits last */
		uint8_t g[5];
		int n = 0;
		do {
			g[n++] = (uint8_t)(plen & 0x7f);
			plen >>= 7;
		} while (plen);
		for (int i = n - 1; i >= 0; i--)
			cm_buf_put_u8(tstream, (uint8_t)(g[i] | (i < n - 1 ? 0x80 : 0)));
		kv_end(tstream, at, false);
	}
}

/* ---- columns, ordinals dictionary, norms, ids ---- */

void
colenc_block(cm_buf *cstream, uint16_t field, uint32_t block, const uint32_t *counts,
             uint32_t ndocs, const int64_t *vals, uint32_t nvals, cm_buf *tmp)
{
	uint8_t key[7] = {TAG_COL, (uint8_t)(field >> 8), (uint8_t)field, (uint8_t)(block >> 24),
	                  (uint8_t)(block >> 16), (uint8_t)(block >> 8), (uint8_t)block};
	size_t at = kv_begin(cstream, key, sizeof(key));
	int64_t mn = 0, mx = 0;
	if (nvals) {
		mn = mx = vals[0];
		for (uint32_t i = 1; i < nvals; i++) {
			if (vals[i] < mn)
				mn = vals[i];
			if (vals[i] > mx)
				mx = vals[i];
		}
	}
	cm_buf_put_u64(cstream, (uint64_t)mn);
	cm_buf_put_u64(cstream, (uint64_t)mx);
	cm_buf_put_u32(cstream, nvals);
	cm_buf_put_checksum(cstream, at);
	size_t body = cstream->len;
	bool single = nvals == ndocs;
	uint32_t cmax = 0;
	for (uint32_t i = 0; i < ndocs; i++) {
		if (counts[i] != 1)
			single = false;
		if (counts[i] > cmax)
			cmax = counts[i];
	}
	cm_buf_put_u8(cstream, single ? 0 : 1);
	if (!single) {
		unsigned cb = codec_bits32(cmax);
		cm_buf_put_u8(cstream, (uint8_t)cb);
		codec_pack32(cstream, counts, ndocs, cb);
	}
	unsigned vb = codec_bits64((uint64_t)mx - (uint64_t)mn);
	cm_buf_put_u8(cstream, (uint8_t)vb);
	if (vb) {
		cm_buf_reset(tmp);
		cm_buf_reserve(tmp, (size_t)nvals * 8);
		uint64_t *d = (uint64_t *)tmp->data;
		for (uint32_t i = 0; i < nvals; i++)
			d[i] = (uint64_t)vals[i] - (uint64_t)mn;
		codec_pack64(cstream, d, nvals, vb);
	}
	cm_buf_put_checksum(cstream, body);
	kv_end(cstream, at, false);
}

void
kdict_put(cm_buf *kstream, uint16_t field, uint32_t n, const uint8_t *term, size_t len)
{
	uint8_t key[7] = {TAG_KDICT, (uint8_t)(field >> 8), (uint8_t)field, (uint8_t)(n >> 24),
	                  (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
	size_t at = kv_begin(kstream, key, sizeof(key));
	cm_buf_put(kstream, term, len);
	kv_end(kstream, at, true);
}

void
norms_put(cm_buf *nstream, uint16_t field, const uint8_t *norms, uint32_t max_doc)
{
	uint8_t key[3] = {TAG_NORMS, (uint8_t)(field >> 8), (uint8_t)field};
	size_t at = kv_begin(nstream, key, sizeof(key));
	cm_buf_put(nstream, norms, max_doc);
	kv_end(nstream, at, true);
}

void
ids_put(cm_buf *istream, const uint8_t *id, size_t len, uint32_t doc)
{
	uint8_t key[SEG_MAX_KEY + 1];
	key[0] = TAG_ID;
	memcpy(key + 1, id, len);
	size_t at = kv_begin(istream, key, len + 1);
	cm_buf_put_varint(istream, doc);
	kv_end(istream, at, true);
}

/* ---- stored documents ---- */

void
storedenc_init(storedenc *e, cm_buf *stream, const void *cdict, int level, uint32_t first_doc)
{
	e->level = level;
	cm_buf_init(&e->raw, CM_MEM_STORAGE);
	cm_buf_init(&e->out, CM_MEM_STORAGE);
	e->stream = stream;
	e->first = e->next = first_doc;
	e->cctx = ZSTD_createCCtx();
	e->own_cctx = true;
	e->cdict = cdict;
}

void
storedenc_init_ctx(storedenc *e, cm_buf *stream, const void *cdict, int level, uint32_t first_doc,
                   void *cctx)
{
	e->level = level;
	cm_buf_init(&e->raw, CM_MEM_STORAGE);
	cm_buf_init(&e->out, CM_MEM_STORAGE);
	e->stream = stream;
	e->first = e->next = first_doc;
	e->cctx = cctx;
	e->own_cctx = false;
	e->cdict = cdict;
}

void *
stored_cctx_create(void)
{
	return ZSTD_createCCtx();
}

void
stored_cctx_free(void *cctx)
{
	ZSTD_freeCCtx(cctx);
}

static void
storedenc_flush(storedenc *e)
{
	if (e->next == e->first)
		return;
	uint32_t last = e->next - 1;
	uint8_t key[5] = {TAG_STORED, (uint8_t)(last >> 24), (uint8_t)(last >> 16),
	                  (uint8_t)(last >> 8), (uint8_t)last};
	size_t at = kv_begin(e->stream, key, sizeof(key));
	cm_buf_put_varint(e->stream, e->first);
	cm_buf_put_varint(e->stream, e->raw.len);
	size_t bound = ZSTD_compressBound(e->raw.len);
	cm_buf_reserve(e->stream, bound + 4);
	size_t n;
	if (e->cdict)
		n = ZSTD_compress_usingCDict(e->cctx, e->stream->data + e->stream->len, bound,
		                             e->raw.data, e->raw.len, e->cdict);
	else
		n = ZSTD_compressCCtx(e->cctx, e->stream->data + e->stream->len, bound, e->raw.data,
		                      e->raw.len, e->level);
	if (ZSTD_isError(n))
		abort(); /* only on a programming error: the bound was reserved */
	e->stream->len += n;
	kv_end(e->stream, at, false); /* a record: segw_write_file chunks it */
	cm_buf_reset(&e->raw);
	e->first = e->next;
}

void
storedenc_add(storedenc *e, const char *id, size_t id_len, const char *src, size_t src_len)
{
	cm_buf_put_str(&e->raw, id, id_len);
	cm_buf_put_str(&e->raw, src, src_len);
	e->next++;
	if (e->raw.len >= STORED_BLOCK_BYTES)
		storedenc_flush(e);
}

void
storedenc_finish(storedenc *e)
{
	storedenc_flush(e);
	if (e->own_cctx)
		ZSTD_freeCCtx(e->cctx);
	e->cctx = NULL;
	cm_buf_free(&e->raw);
	cm_buf_free(&e->out);
}

void
stored_train_dict(cm_buf *dict, const void *samples, const size_t *sizes, size_t n)
{
	cm_buf_reset(dict);
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += sizes[i];
	if (n < 32 || total < 32 * 1024)
		return;
	size_t cap = total / 16;
	if (cap > 32 * 1024)
		cap = 32 * 1024;
	cm_buf_reserve(dict, cap);
	/* One fastCover pass with fixed parameters: ZDICT_trainFromBuffer
	 * searches over k and costs ~0.1 s per segment, this a fraction. */
	ZDICT_fastCover_params_t prm;
	memset(&prm, 0, sizeof(prm));
	prm.k = 256;
	prm.d = 8;
	prm.f = 20;
	prm.accel = 1;
	prm.splitPoint = 1.0;
	prm.zParams.compressionLevel = 3;
	size_t got = ZDICT_trainFromBuffer_fastCover(dict->data, cap, samples, sizes, (unsigned)n, prm);
	if (ZDICT_isError(got))
		return;
	dict->len = got;
}

void *
stored_cdict_create(const cm_buf *dict, int level)
{
	if (dict->len == 0)
		return NULL;
	return ZSTD_createCDict(dict->data, dict->len, level);
}

void
stored_cdict_free(void *cdict)
{
	ZSTD_freeCDict(cdict);
}

/* ---- the file ---- */

cm_err
seg_err(int rc)
{
	switch (rc) {
	case 0:
		return CM_OK;
	case MDB_NOTFOUND:
		return CM_ENOTFOUND;
	case MDB_MAP_FULL:
		return CM_EFULL;
	case ENOMEM:
		return CM_ENOMEM;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH:
	case MDB_BAD_TXN:
	case MDB_BAD_VALSIZE:
		return CM_ECORRUPT;
	default:
		return CM_EIO;
	}
}

/* Pages a value needs, roughly as LMDB lays it out. */
static size_t
entry_cost(size_t klen, size_t vlen)
{
	if (klen + vlen + 8 > 2000)
		return ((vlen + 16 + 4095) / 4096) * 4096 + klen + 16;
	return klen + vlen + 12;
}

static size_t
bytes_cost(const uint8_t *d, size_t len)
{
	size_t cost = 0, i = 0;
	while (i + 2 <= len) {
		size_t kl = d[i] | (size_t)d[i + 1] << 8;
		size_t vl = cm_get_u32(d + i + 2 + kl);
		cost += entry_cost(kl, vl);
		i += 2 + kl + 4 + vl;
	}
	return cost;
}

/* Maps one spilled chunk (from the page holding its start): a merge's
 * spill file grows while the writer appends, so chunks are mapped one at
 * a time, once complete. */
static const uint8_t *
spill_view(const segw *w, uint64_t off, size_t len, void **base, size_t *maplen)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t a = off - off % pg;
	*maplen = (size_t)(off - a) + len;
	*base = mmap(NULL, *maplen, PROT_READ, MAP_SHARED, w->spill_fd, (off_t)a);
	if (*base == MAP_FAILED)
		return NULL;
	return (const uint8_t *)*base + (off - a);
}

static size_t
stream_cost(const segw *w, const cm_buf *s, const segw_spill *sp)
{
	size_t cost = bytes_cost(s->data, s->len);
	for (size_t c = 0; sp && c < sp->n; c++) {
		void *base;
		size_t ml;
		const uint8_t *d = spill_view(w, sp->off[c], sp->len[c], &base, &ml);
		if (d == NULL)
			return SIZE_MAX / 4; /* the write fails later, with its error */
		cost += bytes_cost(d, sp->len[c]);
		munmap(base, ml);
	}
	return cost;
}

/* The term dictionary and the ids in blocks (format 5): up to TBLOCK
 * consecutive T entries of a field, or I entries, become one LMDB entry
 * keyed by the first one's key (segment_private.h). */
typedef struct tblock_out {
	cm_buf dir, vals, out;
	uint8_t first[SEG_MAX_KEY + 1], prev[SEG_MAX_KEY + 1];
	size_t first_len, prev_len;
	size_t pfx; /* key bytes before the term: 3 (T: tag, field), 1 (I) */
	uint32_t n;
} tblock_out;

typedef struct writer {
	const segw *w;
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	tblock_out *tb; /* set while the I and T sections are written */
	/* kept on the last key across puts: MDB_APPEND through a fresh cursor
	 * (mdb_put) searches the tree from its root every time; closed by
	 * LMDB when its transaction ends */
	MDB_cursor *cur;
	size_t since_commit;
	cm_error *err;
} writer;

static cm_err
writer_put(writer *wr, const void *key, size_t klen, const void *val, size_t vlen)
{
	MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
	int rc = wr->cur ? 0 : mdb_cursor_open(wr->txn, wr->dbi, &wr->cur);
	if (rc == 0)
		rc = mdb_cursor_put(wr->cur, &k, &v, MDB_APPEND);
	if (rc == MDB_MAP_FULL)
		return CM_EFULL;
	if (rc == MDB_KEYEXIST)
		return cm_error_set(wr->err, CM_EINTERNAL, "segment keys out of order");
	if (rc)
		return cm_error_set(wr->err, seg_err(rc), "segment write: %s", mdb_strerror(rc));
	/* Commit in slices so dirty pages never pile up in memory. */
	wr->since_commit += klen + vlen;
	if (wr->since_commit > (wr->w->commit_bytes ? wr->w->commit_bytes : (64u << 20))) {
		rc = mdb_txn_commit(wr->txn);
		wr->txn = NULL;
		wr->cur = NULL;
		/* start writing back what is committed, so the final sync
		 * waits for the last slice only */
		int fd;
		if (rc == 0 && mdb_env_get_fd(wr->env, &fd) == 0)
			(void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
		if (rc == 0)
			rc = mdb_txn_begin(wr->env, NULL, 0, &wr->txn);
		if (rc == MDB_MAP_FULL)
			return CM_EFULL;
		if (rc)
			return cm_error_set(wr->err, seg_err(rc), "segment commit: %s",
			                    mdb_strerror(rc));
		wr->since_commit = 0;
	}
	return CM_OK;
}

static void
tblock_init(writer *wr, tblock_out *b)
{
	cm_buf_init(&b->dir, CM_MEM_STORAGE);
	cm_buf_init(&b->vals, CM_MEM_STORAGE);
	cm_buf_init(&b->out, CM_MEM_STORAGE);
	wr->tb = b;
}

static void
tblock_done(writer *wr, tblock_out *b)
{
	cm_buf_free(&b->dir);
	cm_buf_free(&b->vals);
	cm_buf_free(&b->out);
	wr->tb = NULL;
}

static cm_err
tblock_flush(writer *wr)
{
	tblock_out *b = wr->tb;
	if (b->n == 0)
		return CM_OK;
	cm_buf_reset(&b->out);
	cm_buf_put_varint(&b->out, b->n);
	cm_buf_put_varint(&b->out, b->dir.len);
	cm_buf_put(&b->out, b->dir.data, b->dir.len);
	cm_buf_put_u32(&b->out, seg_sum4(b->out.data, b->out.len));
	cm_buf_put(&b->out, b->vals.data, b->vals.len);
	cm_err e = writer_put(wr, b->first, b->first_len, b->out.data, b->out.len);
	cm_buf_reset(&b->dir);
	cm_buf_reset(&b->vals);
	b->n = 0;
	return e;
}

/* One T entry into the open block: the first term is the block's key,
 * each later one its shared prefix with the one before and the rest. */
static cm_err
tblock_add(writer *wr, const uint8_t *key, size_t kl, const uint8_t *val, size_t vl)
{
	tblock_out *b = wr->tb;
	size_t pl = b->pfx;
	if (kl < pl || kl > SEG_MAX_KEY)
		return cm_error_set(wr->err, CM_EINTERNAL, "bad term key");
	/* A keyword field's blocks hold TBLOCK terms each (ordinal n is in
	 * block n / TBLOCK); other fields close a block that still fits on a
	 * leaf page rather than push it onto overflow pages, whose unused
	 * tail would cost ~2 KB: one that is there already takes more terms
	 * into that tail. */
	size_t fid = pl == 3 ? (size_t)key[1] << 8 | key[2] : SIZE_MAX;
	bool ordinal = fid < wr->w->nfields && st_field_type_is_ordinal(wr->w->fields[fid].type);
	ordinal = ordinal || pl != 3; /* ids: blocks of TBLOCK too */
	size_t have = b->dir.len + b->vals.len + 12;
	bool leaf_full = !ordinal && have <= TBLOCK_LEAF_MAX && have + kl + vl > TBLOCK_LEAF;
	if (b->n && (b->n == TBLOCK || leaf_full || memcmp(key, b->first, pl) != 0)) {
		cm_err e = tblock_flush(wr);
		if (e)
			return e;
	}
	if (b->n == 0) {
		memcpy(b->first, key, kl);
		b->first_len = kl;
	} else {
		size_t shared = 0, ptl = b->prev_len - pl, tl = kl - pl;
		while (shared < ptl && shared < tl && b->prev[pl + shared] == key[pl + shared])
			shared++;
		cm_buf_put_varint(&b->dir, shared);
		cm_buf_put_varint(&b->dir, tl - shared);
		cm_buf_put(&b->dir, key + pl + shared, tl - shared);
	}
	cm_buf_put_varint(&b->dir, vl);
	cm_buf_put(&b->vals, val, vl);
	memcpy(b->prev, key, kl);
	b->prev_len = kl;
	b->n++;
	return CM_OK;
}

static cm_err
writer_bytes(writer *wr, const uint8_t *d, size_t len)
{
	size_t i = 0;
	while (i + 2 <= len) {
		size_t kl = d[i] | (size_t)d[i + 1] << 8;
		size_t vl = cm_get_u32(d + i + 2 + kl);
		cm_err e = wr->tb ? tblock_add(wr, d + i + 2, kl, d + i + 2 + kl + 4, vl)
		                  : writer_put(wr, d + i + 2, kl, d + i + 2 + kl + 4, vl);
		if (e)
			return e;
		i += 2 + kl + 4 + vl;
	}
	return CM_OK;
}

static cm_err
writer_stream(writer *wr, const cm_buf *s, const segw_spill *sp)
{
	for (size_t c = 0; sp && c < sp->n; c++) {
		void *base;
		size_t ml;
		const uint8_t *d = spill_view(wr->w, sp->off[c], sp->len[c], &base, &ml);
		if (d == NULL)
			return cm_error_set(wr->err, CM_EIO, "spill map: %s", strerror(errno));
		cm_err e = writer_bytes(wr, d, sp->len[c]);
		munmap(base, ml);
		if (e)
			return e;
	}
	return writer_bytes(wr, s->data, s->len);
}

/* ---- stored section: block index, then the frames in exact chunks ---- */

typedef cm_err (*record_fn)(writer *wr, void *ctx, const uint8_t *key, size_t klen,
                            const uint8_t *val, size_t vlen);

static cm_err
records_bytes(writer *wr, const uint8_t *d, size_t len, record_fn fn, void *ctx)
{
	size_t i = 0;
	while (i + 2 <= len) {
		size_t kl = d[i] | (size_t)d[i + 1] << 8;
		size_t vl = cm_get_u32(d + i + 2 + kl);
		cm_err e = fn(wr, ctx, d + i + 2, kl, d + i + 2 + kl + 4, vl);
		if (e)
			return e;
		i += 2 + kl + 4 + vl;
	}
	return CM_OK;
}

static cm_err
stored_stream_records(writer *wr, size_t i, record_fn fn, void *ctx)
{
	const segw *w = wr->w;
	const segw_spill *sp = w->stored_spill ? &w->stored_spill[i] : NULL;
	for (size_t c = 0; sp && c < sp->n; c++) {
		void *base;
		size_t ml;
		const uint8_t *d = spill_view(w, sp->off[c], sp->len[c], &base, &ml);
		if (d == NULL)
			return cm_error_set(wr->err, CM_EIO, "spill map: %s", strerror(errno));
		cm_err e = records_bytes(wr, d, sp->len[c], fn, ctx);
		munmap(base, ml);
		if (e)
			return e;
	}
	return records_bytes(wr, w->stored[i].data, w->stored[i].len, fn, ctx);
}

/* Every stored record, in doc order; with waiting on, each stream once
 * its producer is done (the first pass, the block index, waits; the
 * chunks follow it). */
static cm_err
stored_records(const segw *w, writer *wr, record_fn fn, void *ctx, bool wait)
{
	for (size_t i = 0; i < w->nstored; i++) {
		cm_err e = wait && w->wait ? w->wait(w->wait_ctx, SEGW_STORED, i, 0) : CM_OK;
		if (e)
			return cm_error_set(wr->err, e, "segment write: %s", cm_err_msg(e));
		e = stored_stream_records(wr, i, fn, ctx);
		if (e)
			return e;
	}
	return CM_OK;
}

typedef struct stored_out {
	uint64_t off;
	uint32_t chunk;
	cm_buf buf;
} stored_out;

static bool
parse_record(const uint8_t *val, size_t vlen, uint64_t *first, uint64_t *raw,
             const uint8_t **frame, size_t *flen)
{
	const uint8_t *p = val, *end = val + vlen;
	if (!codec_varint(&p, end, first) || !codec_varint(&p, end, raw))
		return false;
	*frame = p;
	*flen = (size_t)(end - p);
	return true;
}

static cm_err
put_index(writer *wr, void *ctx, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
	stored_out *o = ctx;
	uint64_t first, raw;
	const uint8_t *frame;
	size_t flen;
	if (klen != 5 || !parse_record(val, vlen, &first, &raw, &frame, &flen))
		return cm_error_set(wr->err, CM_EINTERNAL, "bad stored record");
	uint8_t ik[6] = {TAG_STORED, 0, key[1], key[2], key[3], key[4]};
	cm_buf_reset(&o->buf);
	cm_buf_put_varint(&o->buf, first);
	cm_buf_put_varint(&o->buf, raw);
	cm_buf_put_varint(&o->buf, o->off);
	cm_buf_put_varint(&o->buf, flen);
	cm_buf_put_checksum(&o->buf, 0);
	o->off += flen;
	return writer_put(wr, ik, sizeof(ik), o->buf.data, o->buf.len);
}

static cm_err
flush_chunk(writer *wr, stored_out *o)
{
	uint32_t c = o->chunk++;
	uint8_t ck[6] = {TAG_STORED, 1, (uint8_t)(c >> 24), (uint8_t)(c >> 16), (uint8_t)(c >> 8),
	                 (uint8_t)c};
	cm_buf_put_checksum(&o->buf, 0);
	cm_err e = writer_put(wr, ck, sizeof(ck), o->buf.data, o->buf.len);
	cm_buf_reset(&o->buf);
	return e;
}

static cm_err
put_chunks(writer *wr, void *ctx, const uint8_t *key, size_t klen, const uint8_t *val,
           size_t vlen)
{
	stored_out *o = ctx;
	uint64_t first, raw;
	const uint8_t *frame;
	size_t flen;
	if (!parse_record(val, vlen, &first, &raw, &frame, &flen))
		return cm_error_set(wr->err, CM_EINTERNAL, "bad stored record");
	while (flen) {
		size_t take = STORED_CHUNK - o->buf.len;
		if (take > flen)
			take = flen;
		cm_buf_put(&o->buf, frame, take);
		frame += take;
		flen -= take;
		if (o->buf.len == STORED_CHUNK) {
			cm_err e = flush_chunk(wr, o);
			if (e)
				return e;
		}
	}
	return CM_OK;
}

static cm_err
write_stored_section(const segw *w, writer *wr)
{
	stored_out o = {0};
	cm_buf_init(&o.buf, CM_MEM_STORAGE);
	cm_err e = stored_records(w, wr, put_index, &o, true);
	o.off = 0;
	cm_buf_reset(&o.buf);
	if (!e)
		e = stored_records(w, wr, put_chunks, &o, false);
	if (!e && o.buf.len)
		e = flush_chunk(wr, &o);
	cm_buf_free(&o.buf);
	return e;
}

static void
build_fields_value(const segw *w, cm_buf *b)
{
	cm_buf_put_varint(b, w->nfields);
	for (size_t i = 0; i < w->nfields; i++) {
		const st_field_info *f = &w->fields[i];
		cm_buf_put_str(b, f->name, strlen(f->name));
		cm_buf_put_u8(b, (uint8_t)f->type);
		cm_buf_put_u8(b, (uint8_t)f->analyzer);
		cm_buf_put_u8(b, f->flags);
		cm_buf_put_varint(b, f->doc_count);
		cm_buf_put_varint(b, f->sum_total_term_freq);
		cm_buf_put_varint(b, f->sum_doc_freq);
		cm_buf_put_varint(b, f->num_terms);
		cm_buf_put_varint(b, codec_zz(f->col_min));
		cm_buf_put_varint(b, codec_zz(f->col_max));
	}
	cm_buf_put_checksum(b, 0);
}

static cm_err
wait_for(const segw *w, writer *wr, int what, size_t index, int sec)
{
	if (!w->wait)
		return CM_OK;
	cm_err e = w->wait(w->wait_ctx, what, index, sec);
	if (e)
		return cm_error_set(wr->err, e, "segment write: %s", cm_err_msg(e));
	return CM_OK;
}

static cm_err
write_parts(const segw *w, writer *wr, int sec)
{
	cm_err e = CM_OK;
	for (size_t i = 0; i < w->nparts && !e; i++) {
		e = wait_for(w, wr, SEGW_PART, i, sec);
		if (!e)
			e = writer_stream(wr, &w->parts[i].sec[sec], &w->parts[i].spill[sec]);
	}
	return e;
}

/* fv: the F value, or NULL when the field infos come last (w->wait set):
 * F then goes in as a placeholder, replaced in place once everything is
 * written and SEGW_ALL says the infos are final. */
static cm_err
write_all(const segw *w, writer *wr, const cm_buf *fv, const cm_buf *mv)
{
	static const uint8_t placeholder[1] = {0};
	cm_err e = CM_OK;
	/* Section order is key order: C F I K M N P S T Z. */
	e = write_parts(w, wr, SEC_COL);
	if (!e)
		e = fv ? writer_put(wr, "F", 1, fv->data, fv->len)
		       : writer_put(wr, "F", 1, placeholder, sizeof(placeholder));
	if (!e)
		e = wait_for(w, wr, SEGW_IDS, 0, 0);
	if (!e) {
		tblock_out tb = {.pfx = 1};
		tblock_init(wr, &tb);
		e = writer_stream(wr, &w->ids, &w->ids_spill);
		if (!e)
			e = tblock_flush(wr);
		tblock_done(wr, &tb);
	}
	if (!e)
		e = write_parts(w, wr, SEC_KDICT);
	if (!e)
		e = writer_put(wr, "M", 1, mv->data, mv->len);
	if (!e)
		e = write_parts(w, wr, SEC_NORMS);
	if (!e)
		e = write_stored_section(w, wr);
	if (!e) {
		tblock_out tb = {.pfx = 3};
		tblock_init(wr, &tb);
		e = write_parts(w, wr, SEC_TERM);
		if (!e)
			e = tblock_flush(wr);
		tblock_done(wr, &tb);
	}
	if (!e)
		e = wait_for(w, wr, SEGW_ALL, 0, 0);
	if (!e && w->dict.len) {
		cm_buf z;
		cm_buf_init(&z, CM_MEM_STORAGE);
		cm_buf_put(&z, w->dict.data, w->dict.len);
		cm_buf_put_checksum(&z, 0);
		e = writer_put(wr, "Z", 1, z.data, z.len);
		cm_buf_free(&z);
	}
	if (!e && !fv) {
		cm_buf f;
		cm_buf_init(&f, CM_MEM_STORAGE);
		build_fields_value(w, &f);
		MDB_val k = {1, "F"}, v = {f.len, f.data};
		int rc = mdb_put(wr->txn, wr->dbi, &k, &v, 0);
		cm_buf_free(&f);
		if (rc == MDB_MAP_FULL)
			e = CM_EFULL;
		else if (rc)
			e = cm_error_set(wr->err, seg_err(rc), "segment write: %s",
			                 mdb_strerror(rc));
	}
	return e;
}

static cm_err
append_trailer(const char *tmp, cm_error *err)
{
	int fd = open(tmp, O_RDWR);
	if (fd < 0)
		return cm_error_set(err, CM_EIO, "open %s: %s", tmp, strerror(errno));
	cm_err e = CM_OK;
	struct stat st;
	void *map = MAP_FAILED;
	if (fstat(fd, &st) != 0 || st.st_size <= 0) {
		e = cm_error_set(err, CM_EIO, "stat %s: %s", tmp, strerror(errno));
		goto fail;
	}
	/* the disk writes LMDB's pages while the hash reads them */
	(void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		e = cm_error_set(err, CM_EIO, "mmap %s: %s", tmp, strerror(errno));
		goto fail;
	}
	uint8_t tr[SEG_TRAILER_LEN];
	memcpy(tr, SEG_MAGIC, 8);
	uint64_t len = (uint64_t)st.st_size, h = XXH3_64bits(map, (size_t)st.st_size);
	for (int i = 0; i < 8; i++) {
		tr[8 + i] = (uint8_t)(len >> (8 * i));
		tr[16 + i] = (uint8_t)(h >> (8 * i));
	}
	if (pwrite(fd, tr, sizeof(tr), st.st_size) != (ssize_t)sizeof(tr) || fsync(fd) != 0) {
		e = cm_error_set(err, CM_EIO, "write %s: %s", tmp, strerror(errno));
		goto fail;
	}
fail:
	if (map != MAP_FAILED)
		munmap(map, (size_t)st.st_size);
	close(fd);
	return e;
}

cm_err
segw_write_file(const segw *w, const char *path, cm_error *err)
{
	cm_buf fv, mv;
	cm_buf_init(&fv, CM_MEM_STORAGE);
	cm_buf_init(&mv, CM_MEM_STORAGE);
	if (!w->wait)
		build_fields_value(w, &fv);
	cm_buf_put_u32(&mv, SEG_FORMAT);
	cm_buf_put_varint(&mv, w->max_doc);
	cm_buf_put_varint(&mv, w->gen);
	cm_buf_put_varint(&mv, w->stored_docs);
	cm_buf_put_checksum(&mv, 0);

	size_t mapsize = w->map_hint;
	if (!w->wait) {
		size_t est = entry_cost(1, fv.len) + entry_cost(1, mv.len) +
		             entry_cost(1, w->dict.len) + stream_cost(w, &w->ids, &w->ids_spill);
		for (size_t i = 0; i < w->nparts; i++)
			for (int s = 0; s < SEC_N; s++)
				est += stream_cost(w, &w->parts[i].sec[s], &w->parts[i].spill[s]);
		for (size_t i = 0; i < w->nstored; i++)
			est += stream_cost(w, &w->stored[i],
			                   w->stored_spill ? &w->stored_spill[i] : NULL);
		mapsize = est + est / 2 + (4u << 20);
	}

	size_t plen = strlen(path);
	char *tmp = cm_malloc(CM_MEM_STORAGE, plen + 5);
	memcpy(tmp, path, plen);
	memcpy(tmp + plen, ".tmp", 5);
	cm_err e = CM_OK;
	for (int attempt = 0; attempt < 8; attempt++) {
		unlink(tmp);
		writer wr = {.err = err, .w = w};
		int rc = mdb_env_create(&wr.env);
		if (rc == 0)
			rc = mdb_env_set_mapsize(wr.env, mapsize);
		if (rc == 0)
			rc = mdb_env_open(wr.env, tmp, MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644);
		if (rc == 0)
			rc = mdb_txn_begin(wr.env, NULL, 0, &wr.txn);
		if (rc == 0)
			rc = mdb_dbi_open(wr.txn, NULL, 0, &wr.dbi);
		if (rc) {
			e = cm_error_set(err, seg_err(rc), "segment %s: %s", tmp, mdb_strerror(rc));
			if (wr.txn)
				mdb_txn_abort(wr.txn);
			mdb_env_close(wr.env);
			break;
		}
		e = write_all(w, &wr, w->wait ? NULL : &fv, &mv);
		if (!e) {
			rc = mdb_txn_commit(wr.txn);
			wr.txn = NULL;
			if (rc == MDB_MAP_FULL)
				e = CM_EFULL;
			else if (rc)
				e = cm_error_set(err, seg_err(rc), "segment commit: %s", mdb_strerror(rc));
		}
		/* no sync here: append_trailer's fsync makes the pages and the
		 * trailer durable at once */
		if (wr.txn)
			mdb_txn_abort(wr.txn);
		mdb_env_close(wr.env);
		if (e == CM_EFULL) {
			mapsize *= 2;
			continue;
		}
		break;
	}
	if (e == CM_EFULL)
		e = cm_error_set(err, CM_EFULL, "segment %s: map full", path);
	if (!e)
		e = append_trailer(tmp, err);
	if (!e && rename(tmp, path) != 0)
		e = cm_error_set(err, CM_EIO, "rename %s: %s", tmp, strerror(errno));
	if (!e) {
		char *dir = cm_strdup(CM_MEM_STORAGE, path);
		char *slash = strrchr(dir, '/');
		if (slash == dir)
			slash[1] = 0;
		else if (slash)
			*slash = 0;
		else
			strcpy(dir, ".");
		e = cm_fsync_dir(dir);
		if (e)
			cm_error_set(err, e, "fsync dir %s", dir);
		cm_free(CM_MEM_STORAGE, dir);
	}
	if (e)
		unlink(tmp);
	cm_free(CM_MEM_STORAGE, tmp);
	cm_buf_free(&fv);
	cm_buf_free(&mv);
	return e;
}
