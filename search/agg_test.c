/* Aggregations against a brute-force model: three shards built through
 * the st_shard API (several segments each, with deletes), collected the
 * way query execution feeds the collector, rendered, and compared with
 * values computed directly from the generated documents. Also: merging
 * partial states in different orders and through the wire encoding,
 * 3-deep sub-aggregations, a DST-crossing date_histogram in Europe/Paris,
 * HLL and t-digest accuracy, and ES's error messages. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "common/cm_sys.h"
#include "search/agg_int.h"
#include "search/sr_agg.h"
#include "storage/st_shard.h"

#define NDOCS 3000
#define NSHARDS 3
#define NKW 40

typedef struct mdoc {
	int64_t uid;
	int nkw;
	char kw[3][16];
	bool has_num;
	int64_t num;
	int ndbl;
	double dbl[2];
	bool has_dt;
	int64_t dt;
	bool flag;
	int shard;
	bool deleted;
} mdoc;

static mdoc docs[NDOCS];
static st_shard *shards[NSHARDS];
static st_mapping *mapping;
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t
rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static int
rndn(int n)
{
	return (int)(rnd() % (uint64_t)n);
}

static bool select_none;

/* the "query": which docs the collector sees */
static bool
selected(const mdoc *d)
{
	return !select_none && !d->deleted && d->uid % 4 != 0;
}

static float
score_of(int64_t uid)
{
	return (float)(uid % 97) / 10.0f;
}

static const char *mapping_json =
    "{\"properties\":{\"kw\":{\"type\":\"keyword\"},\"num\":{\"type\":\"long\"},"
    "\"dbl\":{\"type\":\"double\"},\"dt\":{\"type\":\"date\"},\"flag\":{\"type\":\"boolean\"},"
    "\"txt\":{\"type\":\"text\"},\"uid\":{\"type\":\"long\"}}}";

static void
gen_doc(int i, char *src, size_t cap)
{
	mdoc *d = &docs[i];
	d->uid = i;
	d->shard = rndn(NSHARDS);
	/* skewed keywords: low numbers are frequent */
	d->nkw = rndn(10) == 0 ? 0 : 1 + (rndn(4) == 0) + (rndn(8) == 0);
	for (int k = 0; k < d->nkw; k++) {
		int v;
	again:
		v = (int)(sqrt((double)rndn(NKW * NKW)));
		v = NKW - 1 - v;
		snprintf(d->kw[k], sizeof d->kw[k], "k%02d", v);
		for (int j = 0; j < k; j++)
			if (!strcmp(d->kw[j], d->kw[k]))
				goto again;
	}
	d->has_num = rndn(8) != 0;
	d->num = rndn(1000) - 100;
	d->ndbl = rndn(10) == 0 ? 0 : 1 + (rndn(5) == 0);
	for (int k = 0; k < d->ndbl; k++) {
		char t[32];
		snprintf(t, sizeof t, "%.3f", (double)rndn(1100000) / 1000.0 - 100.0);
		d->dbl[k] = strtod(t, NULL);
	}
	d->has_dt = rndn(12) != 0;
	/* 2020-01-01 .. 2021-12-31 */
	d->dt = 1577836800000LL + (int64_t)(rnd() % (730ull * 86400000ull));
	d->flag = rndn(3) == 0;
	size_t o = 0;
	o += (size_t)snprintf(src + o, cap - o, "{\"uid\":%lld,\"txt\":\"some words %d\"",
	                      (long long)d->uid, i);
	if (d->nkw) {
		o += (size_t)snprintf(src + o, cap - o, ",\"kw\":[");
		for (int k = 0; k < d->nkw; k++)
			o += (size_t)snprintf(src + o, cap - o, "%s\"%s\"", k ? "," : "", d->kw[k]);
		o += (size_t)snprintf(src + o, cap - o, "]");
	}
	if (d->has_num)
		o += (size_t)snprintf(src + o, cap - o, ",\"num\":%lld", (long long)d->num);
	if (d->ndbl == 1)
		o += (size_t)snprintf(src + o, cap - o, ",\"dbl\":%.3f", d->dbl[0]);
	else if (d->ndbl == 2)
		o += (size_t)snprintf(src + o, cap - o, ",\"dbl\":[%.3f,%.3f]", d->dbl[0], d->dbl[1]);
	if (d->has_dt)
		o += (size_t)snprintf(src + o, cap - o, ",\"dt\":%lld", (long long)d->dt);
	o += (size_t)snprintf(src + o, cap - o, ",\"flag\":%s}", d->flag ? "true" : "false");
}

static char tmpdir[64];

static void
build_shards(void)
{
	cJSON *mj = cJSON_Parse(mapping_json);
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(st_mapping_from_json(mj, &mapping, &err) == CM_OK);
	cJSON_Delete(mj);
	snprintf(tmpdir, sizeof tmpdir, "/tmp/agg_test.XXXXXX");
	REQUIRE(mkdtemp(tmpdir) != NULL);
	for (int s = 0; s < NSHARDS; s++) {
		char dir[128];
		snprintf(dir, sizeof dir, "%s/%d", tmpdir, s);
		st_shard_opts o;
		st_shard_opts_default(&o);
		o.background_merges = false;
		cm_error_clear(&err);
		cm_err e = st_shard_open(dir, mapping, &o, &shards[s], &err);
		if (e)
			fprintf(stderr, "shard open: %s\n", err.reason);
		REQUIRE(e == CM_OK);
	}
	static char srcs[NDOCS][512];
	static char ids[NDOCS][16];
	for (int i = 0; i < NDOCS; i++) {
		gen_doc(i, srcs[i], sizeof srcs[i]);
		snprintf(ids[i], sizeof ids[i], "d%d", i);
	}
	/* index in chunks with refreshes in between → several segments; one
	 * synced batch per shard and chunk keeps the test fast */
	static st_op ops[NSHARDS][700];
	static st_op_result res[700];
	size_t nops[NSHARDS] = {0};
	for (int i = 0; i < NDOCS; i++) {
		st_op *op = &ops[docs[i].shard][nops[docs[i].shard]++];
		memset(op, 0, sizeof *op);
		op->type = ST_OP_INDEX;
		op->id = ids[i];
		op->id_len = strlen(ids[i]);
		op->source = srcs[i];
		op->source_len = strlen(srcs[i]);
		op->seq_no = ST_NO_SEQ;
		op->if_seq_no = ST_NO_SEQ;
		if (i % 700 == 699 || i == NDOCS - 1)
			for (int s = 0; s < NSHARDS; s++) {
				REQUIRE(st_shard_apply(shards[s], ops[s], nops[s], res) == CM_OK);
				for (size_t k = 0; k < nops[s]; k++) {
					if (res[k].err)
						fprintf(stderr, "index: %s\n", res[k].reason);
					REQUIRE(res[k].err == CM_OK);
				}
				nops[s] = 0;
				REQUIRE(st_shard_refresh(shards[s]) == CM_OK);
			}
	}
	/* deletes land in already written segments */
	for (int i = 0; i < NDOCS; i++) {
		if (rndn(20))
			continue;
		st_op *op = &ops[docs[i].shard][nops[docs[i].shard]++];
		memset(op, 0, sizeof *op);
		op->type = ST_OP_DELETE;
		op->id = ids[i];
		op->id_len = strlen(ids[i]);
		op->seq_no = ST_NO_SEQ;
		op->if_seq_no = ST_NO_SEQ;
		docs[i].deleted = true;
	}
	for (int s = 0; s < NSHARDS; s++) {
		REQUIRE(nops[s] <= 700);
		REQUIRE(st_shard_apply(shards[s], ops[s], nops[s], res) == CM_OK);
		for (size_t k = 0; k < nops[s]; k++)
			REQUIRE(res[k].err == CM_OK);
	}
	for (int s = 0; s < NSHARDS; s++)
		REQUIRE(st_shard_refresh(shards[s]) == CM_OK);
}

/* Feeds shard s's selected docs to the collector, like query execution:
 * per segment, ascending, in batches. */
static cm_err
collect_shard(int s, sr_agg_state *st)
{
	st_reader *r = st_shard_reader(shards[s]);
	sr_collector c = sr_agg_collector(st);
	cm_err rc = CM_OK;
	for (size_t i = 0; i < st_reader_nsegments(r) && !rc; i++) {
		sr_seg_ctx ctx;
		memset(&ctx, 0, sizeof ctx);
		ctx.reader = r;
		ctx.seg_index = i;
		ctx.seg = st_reader_segment(r, i);
		ctx.live = st_reader_live(r, i);
		REQUIRE(st_seg_txn_begin(ctx.seg, &ctx.txn) == CM_OK);
		rc = c.begin_segment(c.self, &ctx);
		if (rc) {
			st_seg_txn_end(ctx.txn);
			break;
		}
		const st_field_info *uidf = st_segment_field(ctx.seg, "uid");
		st_colblock cb;
		memset(&cb, 0, sizeof cb);
		uint32_t batch[64];
		float scores[64];
		size_t n = 0;
		uint32_t max = st_segment_max_doc(ctx.seg);
		for (uint32_t d = 0; d < max; d++) {
			if (ctx.live && !st_bit_get(ctx.live, d))
				continue;
			const int64_t *v;
			REQUIRE(st_col_values(ctx.txn, uidf, &cb, d, &v) == 1);
			REQUIRE(v[0] >= 0 && v[0] < NDOCS);
			REQUIRE(!docs[v[0]].deleted);
			if (!selected(&docs[v[0]]))
				continue;
			scores[n] = score_of(v[0]);
			batch[n++] = d;
			if (n == 64) {
				c.collect(c.self, batch, scores, n);
				n = 0;
			}
		}
		if (n)
			c.collect(c.self, batch, scores, n);
		c.end_segment(c.self);
		st_colblock_free(&cb);
		st_seg_txn_end(ctx.txn);
	}
	st_reader_release(r);
	return rc;
}

static sr_agg *
parse_aggs(const char *json)
{
	cJSON *j = cJSON_Parse(json);
	REQUIRE(j != NULL);
	sr_agg *a = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = sr_agg_from_json(j, &a, &err);
	if (rc)
		fprintf(stderr, "parse: %s: %s\n", cm_err_name(rc), err.reason);
	REQUIRE(rc == CM_OK);
	cJSON_Delete(j);
	return a;
}

static cJSON *
render_json(sr_agg_state *st)
{
	cm_buf out;
	cm_buf_init(&out, CM_MEM_SEARCH);
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = sr_agg_render(st, &out, &err);
	if (rc)
		fprintf(stderr, "render: %s %s\n", cm_err_name(rc), err.reason);
	REQUIRE(rc == CM_OK);
	cJSON *j = cJSON_ParseWithLength((const char *)out.data, out.len);
	if (!j)
		fprintf(stderr, "bad JSON: %.*s\n", (int)out.len, (const char *)out.data);
	REQUIRE(j != NULL);
	cm_buf_free(&out);
	return j;
}

/* Everything in one state, as if one shard. */
static cJSON *
run_single(const sr_agg *a)
{
	sr_agg_state *st = sr_agg_state_new(a);
	for (int s = 0; s < NSHARDS; s++)
		REQUIRE(collect_shard(s, st) == CM_OK);
	cJSON *j = render_json(st);
	sr_agg_state_free(st);
	return j;
}

/* One state per shard, merged in the given order; wire round trip when
 * asked. */
static cJSON *
run_merged(const sr_agg *a, const int *order, bool wire)
{
	sr_agg_state *parts[NSHARDS];
	for (int s = 0; s < NSHARDS; s++) {
		parts[s] = sr_agg_state_new(a);
		sr_agg_state_set_index(parts[s], "idx", (uint32_t)s);
		REQUIRE(collect_shard(s, parts[s]) == CM_OK);
		if (wire) {
			cm_buf b;
			cm_buf_init(&b, CM_MEM_SEARCH);
			REQUIRE(sr_agg_state_encode(parts[s], &b) == CM_OK);
			sr_agg_state *d = NULL;
			cm_error err;
			cm_error_clear(&err);
			REQUIRE(sr_agg_state_decode(a, b.data, b.len, &d, &err) == CM_OK);
			/* a flipped byte must be caught, never crash */
			if (b.len > 8) {
				b.data[b.len / 2] ^= 0x5a;
				sr_agg_state *bad = NULL;
				CHECK(sr_agg_state_decode(a, b.data, b.len, &bad, &err) == CM_ECORRUPT);
				sr_agg_state_free(bad);
			}
			/* bytes corrupted behind a valid checksum: an error, never a crash */
			if (b.len > 8) {
				b.data[b.len / 2] ^= 0x5a; /* undo */
				for (int t = 0; t < 40; t++) {
					cm_buf c;
					cm_buf_init(&c, CM_MEM_SEARCH);
					size_t cut = 4 + (size_t)rndn((int)(b.len - 4));
					cm_buf_put(&c, b.data, t % 2 ? cut : b.len - 4);
					for (int f = 0; f < 3; f++)
						c.data[rndn((int)c.len)] ^= (uint8_t)(1 + rndn(255));
					cm_buf_put_checksum(&c, 0);
					sr_agg_state *bad = NULL;
					cm_err rc = sr_agg_state_decode(a, c.data, c.len, &bad, &err);
					if (rc == CM_OK) {
						/* a state that decodes must also merge and render */
						cm_buf o;
						cm_buf_init(&o, CM_MEM_SEARCH);
						cm_error e2;
						cm_error_clear(&e2);
						sr_agg_render(bad, &o, &e2);
						cm_buf_free(&o);
					}
					sr_agg_state_free(bad);
					cm_buf_free(&c);
				}
			}
			cm_buf_free(&b);
			sr_agg_state_free(parts[s]);
			parts[s] = d;
		}
	}
	sr_agg_state *into = parts[order[0]];
	for (int i = 1; i < NSHARDS; i++) {
		sr_agg_state_merge(into, parts[order[i]]);
		sr_agg_state_free(parts[order[i]]);
	}
	cJSON *j = render_json(into);
	sr_agg_state_free(into);
	return j;
}

static const cJSON *
jget(const cJSON *j, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	const cJSON *cur = j;
	for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, "."))
		cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
	return cur;
}

static double
jnum(const cJSON *j, const char *path)
{
	const cJSON *v = jget(j, path);
	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static bool
close_rel(double a, double b, double tol)
{
	if (a == b)
		return true;
	return fabs(a - b) <= tol * fmax(fabs(a), fabs(b));
}

/* structural equality with numbers to a relative tolerance */
static bool
json_close(const cJSON *a, const cJSON *b, double tol, char *where, size_t cap)
{
	if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) {
		if (close_rel(a->valuedouble, b->valuedouble, tol))
			return true;
		snprintf(where, cap, "%s: %.17g vs %.17g", a->string ? a->string : "?",
		         a->valuedouble, b->valuedouble);
		return false;
	}
	if ((a->type & 0xff) != (b->type & 0xff)) {
		snprintf(where, cap, "%s: type differs", a->string ? a->string : "?");
		return false;
	}
	if (cJSON_IsString(a)) {
		if (strcmp(a->valuestring, b->valuestring)) {
			snprintf(where, cap, "%s: %s vs %s", a->string ? a->string : "?", a->valuestring,
			         b->valuestring);
			return false;
		}
		return true;
	}
	if (cJSON_IsArray(a) || cJSON_IsObject(a)) {
		const cJSON *x = a->child, *y = b->child;
		for (; x && y; x = x->next, y = y->next) {
			if (cJSON_IsObject(a) && strcmp(x->string, y->string)) {
				snprintf(where, cap, "key %s vs %s", x->string, y->string);
				return false;
			}
			if (!json_close(x, y, tol, where, cap))
				return false;
		}
		if (x || y) {
			snprintf(where, cap, "%s: length differs", a->string ? a->string : "?");
			return false;
		}
	}
	return true;
}

/* ---------------------------------------------------------------- model helpers */

typedef struct kstat {
	uint64_t n;
	double sum, sumsq, min, max;
} kstat;

static void
ks_add(kstat *k, double v)
{
	if (k->n == 0)
		k->min = k->max = v;
	k->n++;
	k->sum += v;
	k->sumsq += v * v;
	if (v < k->min)
		k->min = v;
	if (v > k->max)
		k->max = v;
}

static int
kw_index(const char *k)
{
	return atoi(k + 1);
}

/* ---------------------------------------------------------------- tests */

static void
test_terms_kw(void)
{
	sr_agg *a = parse_aggs("{\"t\":{\"terms\":{\"field\":\"kw\",\"size\":100},\"aggs\":{"
	                       "\"s\":{\"stats\":{\"field\":\"dbl\"}},"
	                       "\"c\":{\"value_count\":{\"field\":\"num\"}}}},"
	                       "\"top5\":{\"terms\":{\"field\":\"kw\",\"size\":5}},"
	                       "\"bykey\":{\"terms\":{\"field\":\"kw\",\"size\":3,\"order\":{\"_key\":"
	                       "\"desc\"}}},"
	                       "\"byavg\":{\"terms\":{\"field\":\"kw\",\"size\":4,\"order\":{\"a\":"
	                       "\"asc\"}},\"aggs\":{\"a\":{\"avg\":{\"field\":\"num\"}}}},"
	                       "\"incl\":{\"terms\":{\"field\":\"kw\",\"include\":\"k0[0-4]\","
	                       "\"exclude\":[\"k02\"]}}}");
	cJSON *j = run_single(a);
	uint64_t cnt[NKW] = {0};
	kstat st[NKW];
	uint64_t vc[NKW] = {0};
	double nsum[NKW] = {0};
	uint64_t ncnt[NKW] = {0};
	memset(st, 0, sizeof st);
	for (int i = 0; i < NDOCS; i++) {
		const mdoc *d = &docs[i];
		if (!selected(d))
			continue;
		for (int k = 0; k < d->nkw; k++) {
			int x = kw_index(d->kw[k]);
			cnt[x]++;
			for (int m = 0; m < d->ndbl; m++)
				ks_add(&st[x], d->dbl[m]);
			vc[x] += d->has_num;
			if (d->has_num) {
				nsum[x] += (double)d->num;
				ncnt[x]++;
			}
		}
	}
	const cJSON *b = jget(j, "t.buckets");
	REQUIRE(cJSON_IsArray(b));
	int nb = 0;
	uint64_t prev = UINT64_MAX;
	const char *prevk = "";
	const cJSON *e;
	cJSON_ArrayForEach(e, b)
	{
		const char *key = jget(e, "key")->valuestring;
		int x = kw_index(key);
		uint64_t dc = (uint64_t)jnum(e, "doc_count");
		CHECKF(dc == cnt[x], "bucket %s: %llu vs %llu", key, (unsigned long long)dc,
		       (unsigned long long)cnt[x]);
		CHECK(dc < prev || (dc == prev && strcmp(key, prevk) > 0));
		prev = dc;
		prevk = key;
		CHECK(jnum(e, "s.count") == (double)st[x].n);
		CHECK(close_rel(jnum(e, "s.sum"), st[x].sum, 1e-9));
		if (st[x].n) {
			CHECK(jnum(e, "s.min") == st[x].min);
			CHECK(jnum(e, "s.max") == st[x].max);
			CHECK(close_rel(jnum(e, "s.avg"), st[x].sum / (double)st[x].n, 1e-9));
		}
		CHECK(jnum(e, "c.value") == (double)vc[x]);
		nb++;
	}
	int expect_nb = 0;
	for (int x = 0; x < NKW; x++)
		expect_nb += cnt[x] > 0;
	CHECK(nb == expect_nb);
	CHECK(jnum(j, "t.sum_other_doc_count") == 0);
	CHECK(jnum(j, "t.doc_count_error_upper_bound") == 0);

	/* top 5 by count, key tiebreak; other = the rest */
	int idx[NKW];
	for (int x = 0; x < NKW; x++)
		idx[x] = x;
	for (int x = 1; x < NKW; x++)
		for (int y = x; y > 0 && (cnt[idx[y]] > cnt[idx[y - 1]]); y--) {
			int t = idx[y];
			idx[y] = idx[y - 1];
			idx[y - 1] = t;
		}
	uint64_t total = 0, top = 0;
	for (int x = 0; x < NKW; x++)
		total += cnt[x];
	b = jget(j, "top5.buckets");
	CHECK(cJSON_GetArraySize(b) == 5);
	int i = 0;
	cJSON_ArrayForEach(e, b)
	{
		char key[16];
		snprintf(key, sizeof key, "k%02d", idx[i]);
		CHECKF(!strcmp(jget(e, "key")->valuestring, key), "top5[%d] %s vs %s", i,
		       jget(e, "key")->valuestring, key);
		top += (uint64_t)jnum(e, "doc_count");
		i++;
	}
	CHECK(jnum(j, "top5.sum_other_doc_count") == (double)(total - top));

	/* _key desc */
	b = jget(j, "bykey.buckets");
	int want = NKW - 1;
	cJSON_ArrayForEach(e, b)
	{
		while (want >= 0 && cnt[want] == 0)
			want--;
		char key[16];
		snprintf(key, sizeof key, "k%02d", want);
		CHECK(!strcmp(jget(e, "key")->valuestring, key));
		want--;
	}

	/* order by avg asc (buckets without num values have a null avg: last) */
	b = jget(j, "byavg.buckets");
	double pa = -INFINITY;
	cJSON_ArrayForEach(e, b)
	{
		int x = kw_index(jget(e, "key")->valuestring);
		double av = ncnt[x] ? nsum[x] / (double)ncnt[x] : NAN;
		CHECK(close_rel(jnum(e, "a.value"), av, 1e-9));
		CHECK(av >= pa);
		pa = av;
		/* nothing smaller was skipped */
		for (int y = 0; y < NKW; y++)
			if (cnt[y] && ncnt[y] && nsum[y] / (double)ncnt[y] < av) {
				bool listed = false;
				const cJSON *f;
				cJSON_ArrayForEach(f, b) listed |= kw_index(jget(f, "key")->valuestring) == y;
				CHECK(listed);
			}
	}

	/* include regex k00..k04 minus k02 */
	b = jget(j, "incl.buckets");
	int seen = 0;
	cJSON_ArrayForEach(e, b)
	{
		int x = kw_index(jget(e, "key")->valuestring);
		CHECK(x <= 4 && x != 2);
		CHECK(jnum(e, "doc_count") == (double)cnt[x]);
		seen++;
	}
	CHECK(seen == (cnt[0] > 0) + (cnt[1] > 0) + (cnt[3] > 0) + (cnt[4] > 0));
	cJSON_Delete(j);

	/* Merged shards with a small size: counts are lower bounds within the
	 * reported error, and sum_other + listed = total. */
	int order[NSHARDS] = {2, 0, 1};
	j = run_merged(a, order, true);
	double err_bound = jnum(j, "top5.doc_count_error_upper_bound");
	CHECK(err_bound >= 0);
	top = 0;
	cJSON_ArrayForEach(e, jget(j, "top5.buckets"))
	{
		int x = kw_index(jget(e, "key")->valuestring);
		double dc = jnum(e, "doc_count");
		CHECK(dc <= (double)cnt[x] && dc + err_bound >= (double)cnt[x]);
		top += (uint64_t)dc;
	}
	CHECK(jnum(j, "top5.sum_other_doc_count") + (double)top == (double)total);
	cJSON_Delete(j);
	sr_agg_free(a);
}

static void
test_terms_numeric(void)
{
	sr_agg *a = parse_aggs("{\"n\":{\"terms\":{\"field\":\"num\",\"size\":2000,\"order\":{\"_key\":"
	                       "\"asc\"}}},\"f\":{\"terms\":{\"field\":\"flag\"}},"
	                       "\"m\":{\"terms\":{\"field\":\"num\",\"missing\":-999,\"size\":1,"
	                       "\"order\":{\"_key\":\"asc\"}}},"
	                       "\"d\":{\"terms\":{\"field\":\"dbl\",\"size\":3,\"order\":{\"_key\":"
	                       "\"desc\"}}}}");
	cJSON *j = run_single(a);
	static uint64_t cnt[1000];
	memset(cnt, 0, sizeof cnt);
	uint64_t nmiss = 0, ntrue = 0, nfalse = 0;
	double dmax[3] = {-INFINITY, -INFINITY, -INFINITY};
	for (int i = 0; i < NDOCS; i++) {
		const mdoc *d = &docs[i];
		if (!selected(d))
			continue;
		if (d->has_num)
			cnt[d->num + 100]++;
		else
			nmiss++;
		if (d->flag)
			ntrue++;
		else
			nfalse++;
		for (int k = 0; k < d->ndbl; k++) {
			double v = d->dbl[k];
			if (v == dmax[0] || v == dmax[1] || v == dmax[2])
				continue;
			if (v > dmax[0]) {
				dmax[2] = dmax[1];
				dmax[1] = dmax[0];
				dmax[0] = v;
			} else if (v > dmax[1]) {
				dmax[2] = dmax[1];
				dmax[1] = v;
			} else if (v > dmax[2])
				dmax[2] = v;
		}
	}
	const cJSON *e;
	int want = 0;
	cJSON_ArrayForEach(e, jget(j, "n.buckets"))
	{
		while (want < 1000 && cnt[want] == 0)
			want++;
		CHECK(cJSON_IsNumber(jget(e, "key")) && jnum(e, "key") == want - 100);
		CHECK(jnum(e, "doc_count") == (double)cnt[want]);
		want++;
	}
	while (want < 1000 && cnt[want] == 0)
		want++;
	CHECK(want == 1000);
	/* booleans: key 1/0 with key_as_string */
	cJSON_ArrayForEach(e, jget(j, "f.buckets"))
	{
		bool t = jnum(e, "key") == 1;
		CHECK(!strcmp(jget(e, "key_as_string")->valuestring, t ? "true" : "false"));
		CHECK(jnum(e, "doc_count") == (double)(t ? ntrue : nfalse));
	}
	e = cJSON_GetArrayItem(jget(j, "m.buckets"), 0);
	CHECK(e && jnum(e, "key") == -999 && jnum(e, "doc_count") == (double)nmiss);
	int i = 0;
	cJSON_ArrayForEach(e, jget(j, "d.buckets"))
	{
		CHECK(i < 3 && jnum(e, "key") == dmax[i]);
		i++;
	}
	cJSON_Delete(j);
	sr_agg_free(a);
}

static void
test_histogram(void)
{
	sr_agg *a = parse_aggs("{\"h\":{\"histogram\":{\"field\":\"dbl\",\"interval\":50,"
	                       "\"extended_bounds\":{\"min\":-300,\"max\":1300}},"
	                       "\"aggs\":{\"mx\":{\"max\":{\"field\":\"num\"}}}},"
	                       "\"h2\":{\"histogram\":{\"field\":\"num\",\"interval\":7,\"offset\":3,"
	                       "\"min_doc_count\":1}}}");
	cJSON *j = run_single(a);
	uint64_t cnt[40] = {0};
	double mx[40];
	for (int i = 0; i < 40; i++)
		mx[i] = -INFINITY;
	static uint64_t c2[400];
	memset(c2, 0, sizeof c2);
	for (int i = 0; i < NDOCS; i++) {
		const mdoc *d = &docs[i];
		if (!selected(d))
			continue;
		int last = -1;
		for (int k = 0; k < d->ndbl; k++) {
			int b = (int)floor(d->dbl[k] / 50) + 6;
			if (b == last)
				continue;
			last = b;
			cnt[b]++;
			if (d->has_num && d->num > mx[b])
				mx[b] = (double)d->num;
		}
		if (d->has_num)
			c2[(int)floor((double)(d->num - 3) / 7) + 20]++;
	}
	const cJSON *e;
	int b = 0;
	cJSON_ArrayForEach(e, jget(j, "h.buckets"))
	{
		CHECKF(jnum(e, "key") == (b - 6) * 50.0, "key %g vs %g", jnum(e, "key"), (b - 6) * 50.0);
		CHECK(jnum(e, "doc_count") == (double)cnt[b]);
		if (cnt[b] && isfinite(mx[b]))
			CHECK(jnum(e, "mx.value") == mx[b]);
		else
			CHECK(cJSON_IsNull(jget(e, "mx.value")));
		b++;
	}
	CHECK(b == 33); /* -300 .. 1300: the bounds are bucket keys */
	b = 0;
	cJSON_ArrayForEach(e, jget(j, "h2.buckets"))
	{
		while (b < 400 && !c2[b])
			b++;
		CHECK(jnum(e, "key") == (b - 20) * 7.0 + 3);
		CHECK(jnum(e, "doc_count") == (double)c2[b]);
		b++;
	}
	cJSON_Delete(j);
	sr_agg_free(a);
}

/* the UTC ms of local midnight of t's local day in zone tzname (libc) */
static int64_t
libc_local_day(const char *tzname, int64_t t_ms)
{
	setenv("TZ", tzname, 1);
	tzset();
	time_t s = (time_t)(t_ms >= 0 ? t_ms / 1000 : (t_ms - 999) / 1000);
	struct tm tm;
	localtime_r(&s, &tm);
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	tm.tm_isdst = -1;
	int64_t r = (int64_t)mktime(&tm) * 1000;
	return r;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void
test_date_histogram(void)
{
	sr_agg *a = parse_aggs(
	    "{\"mon\":{\"date_histogram\":{\"field\":\"dt\",\"calendar_interval\":\"month\"}},"
	    "\"paris\":{\"date_histogram\":{\"field\":\"dt\",\"calendar_interval\":\"1d\","
	    "\"time_zone\":\"Europe/Paris\",\"min_doc_count\":1}},"
	    "\"fixed\":{\"date_histogram\":{\"field\":\"dt\",\"fixed_interval\":\"6h\","
	    "\"time_zone\":\"+05:30\",\"format\":\"yyyy-MM-dd HH:mm\",\"min_doc_count\":1}},"
	    "\"wk\":{\"date_histogram\":{\"field\":\"dt\",\"calendar_interval\":\"week\","
	    "\"min_doc_count\":1}}}");
	cJSON *j = run_single(a);
	/* months: 24 buckets, keyed at the first of each month UTC */
	uint64_t mc[24] = {0};
	static int64_t pk[NDOCS], fk[NDOCS], wk[NDOCS];
	size_t np = 0;
	for (int i = 0; i < NDOCS; i++) {
		const mdoc *d = &docs[i];
		if (!selected(d) || !d->has_dt)
			continue;
		time_t s = (time_t)(d->dt / 1000);
		struct tm tm;
		gmtime_r(&s, &tm);
		mc[(tm.tm_year - 120) * 12 + tm.tm_mon]++;
		pk[np] = libc_local_day("Europe/Paris", d->dt);
		int64_t off = 19800000;
		fk[np] = (d->dt + off) / 21600000 * 21600000 - off;
		int64_t days = d->dt / 86400000;
		wk[np] = (days - ((days + 3) % 7)) * 86400000;
		np++;
	}
	const cJSON *e;
	int m = 0;
	cJSON_ArrayForEach(e, jget(j, "mon.buckets"))
	{
		struct tm tm;
		memset(&tm, 0, sizeof tm);
		tm.tm_year = 120 + m / 12;
		tm.tm_mon = m % 12;
		tm.tm_mday = 1;
		int64_t key = (int64_t)timegm(&tm) * 1000;
		CHECK(jnum(e, "key") == (double)key);
		CHECK(jnum(e, "doc_count") == (double)mc[m]);
		char ks[40];
		snprintf(ks, sizeof ks, "%04d-%02d-01T00:00:00.000Z", 2020 + m / 12, m % 12 + 1);
		CHECK(!strcmp(jget(e, "key_as_string")->valuestring, ks));
		m++;
	}
	CHECK(m == 24);
	/* Paris days against libc, including both DST switches */
	int64_t *keys[3] = {pk, fk, wk};
	const char *names[3] = {"paris", "fixed", "wk"};
	for (int t = 0; t < 3; t++) {
		qsort(keys[t], np, sizeof(int64_t), cmp_i64);
		size_t i = 0;
		int nb = 0;
		const cJSON *bs = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(j, names[t]), "buckets");
		cJSON_ArrayForEach(e, bs)
		{
			REQUIRE(i < np);
			int64_t key = keys[t][i];
			size_t c = 0;
			while (i < np && keys[t][i] == key) {
				i++;
				c++;
			}
			CHECKF(jnum(e, "key") == (double)key, "%s bucket %d: key %.0f vs %lld", names[t],
			       nb, jnum(e, "key"), (long long)key);
			CHECKF(jnum(e, "doc_count") == (double)c, "%s bucket %d: %g vs %zu", names[t], nb,
			       jnum(e, "doc_count"), c);
			nb++;
		}
		CHECK(i == np);
	}
	/* the spring-forward day is 23 hours long, and rendered with offsets */
	bool saw_spring = false, saw_fall = false;
	cJSON_ArrayForEach(e, jget(j, "paris.buckets"))
	{
		const char *ks = jget(e, "key_as_string")->valuestring;
		if (!strcmp(ks, "2020-03-29T00:00:00.000+01:00")) {
			saw_spring = true;
			CHECK(jnum(e, "key") == 1585436400000.0); /* 2020-03-28T23:00Z */
		}
		if (!strcmp(ks, "2020-03-30T00:00:00.000+02:00"))
			CHECK(jnum(e, "key") == 1585519200000.0); /* 23 h later */
		if (!strcmp(ks, "2020-10-25T00:00:00.000+02:00"))
			saw_fall = true;
	}
	CHECK(saw_spring && saw_fall);
	e = cJSON_GetArrayItem(jget(j, "fixed.buckets"), 0);
	REQUIRE(e);
	char ks[40];
	char fmt[64];
	agg_date_format(NULL, "yyyy-MM-dd HH:mm", (int64_t)jnum(e, "key") + 19800000, ks, sizeof ks);
	snprintf(fmt, sizeof fmt, "%s", jget(e, "key_as_string")->valuestring);
	CHECK(!strcmp(ks, fmt));
	CHECK(strlen(fmt) == 16 && (fmt[11] == '0' || fmt[11] == '1'));
	cJSON_Delete(j);
	sr_agg_free(a);

	/* gap filling across the fall-back day: consecutive keys in Paris hours */
	a = parse_aggs("{\"h\":{\"date_histogram\":{\"field\":\"dt\",\"calendar_interval\":\"hour\","
	               "\"time_zone\":\"Europe/Paris\",\"extended_bounds\":{\"min\":"
	               "\"2020-10-24T22:00:00Z\",\"max\":\"2020-10-25T04:00:00Z\"}}}}");
	sr_agg_state *st = sr_agg_state_new(a);
	j = render_json(st); /* nothing collected: only the bounds */
	int n = 0;
	double prev = 0;
	cJSON_ArrayForEach(e, jget(j, "h.buckets"))
	{
		if (n)
			CHECK(jnum(e, "key") - prev == 3600000.0);
		prev = jnum(e, "key");
		n++;
	}
	CHECK(n == 7); /* 22:00Z .. 04:00Z, the repeated 02:00 local hour included */
	cJSON_Delete(j);
	sr_agg_state_free(st);
	sr_agg_free(a);
}

static void
test_ranges_filters_missing(void)
{
	sr_agg *a = parse_aggs(
	    "{\"r\":{\"range\":{\"field\":\"num\",\"ranges\":[{\"from\":500},{\"to\":100},"
	    "{\"from\":100,\"to\":500,\"key\":\"mid\"}]},\"aggs\":{\"s\":{\"sum\":{\"field\":"
	    "\"dbl\"}}}},"
	    "\"rk\":{\"range\":{\"field\":\"dbl\",\"keyed\":true,\"ranges\":[{\"to\":0.5},{\"from\":0.5}]}},"
	    "\"dr\":{\"date_range\":{\"field\":\"dt\",\"ranges\":[{\"to\":\"2021-01-01\"},"
	    "{\"from\":\"2021-01-01T00:00:00Z\"}]}},"
	    "\"f\":{\"filter\":{\"term\":{\"kw\":\"k01\"}},\"aggs\":{\"mx\":{\"max\":{\"field\":"
	    "\"num\"}}}},"
	    "\"fs\":{\"filters\":{\"other_bucket\":true,\"filters\":{\"a\":{\"term\":{\"kw\":\"k02\"}},"
	    "\"b\":{\"range\":{\"num\":{\"gte\":500}}}}}},"
	    "\"fa\":{\"filters\":{\"filters\":[{\"term\":{\"flag\":true}},{\"match_all\":{}}]}},"
	    "\"none\":{\"filter\":{\"term\":{\"kw\":\"nope\"}},\"aggs\":{\"mn\":{\"min\":{\"field\":"
	    "\"num\"}},\"av\":{\"avg\":{\"field\":\"num\"}},\"sm\":{\"sum\":{\"field\":\"num\"}},"
	    "\"es\":{\"extended_stats\":{\"field\":\"num\"}}}},"
	    "\"mi\":{\"missing\":{\"field\":\"num\"},\"aggs\":{\"c\":{\"value_count\":{\"field\":"
	    "\"kw\"}}}}}");
	cJSON *j = run_single(a);
	uint64_t rlo = 0, rmid = 0, rhi = 0, k05lo = 0, k05hi = 0, d20 = 0, d21 = 0, f01 = 0, fa = 0,
	         fb = 0, fo = 0, ftrue = 0, all = 0, miss = 0, misskw = 0;
	double slo = 0, smid = 0, shi = 0, mx01 = -INFINITY;
	for (int i = 0; i < NDOCS; i++) {
		const mdoc *d = &docs[i];
		if (!selected(d))
			continue;
		all++;
		double ds = 0;
		for (int k = 0; k < d->ndbl; k++)
			ds += d->dbl[k];
		if (d->has_num) {
			if (d->num < 100) {
				rlo++;
				slo += ds;
			} else if (d->num < 500) {
				rmid++;
				smid += ds;
			}
			if (d->num >= 500) {
				rhi++;
				shi += ds;
			}
		} else {
			miss++;
			misskw += (uint64_t)d->nkw;
		}
		bool lo = false, hi = false;
		for (int k = 0; k < d->ndbl; k++) {
			lo |= d->dbl[k] < 0.5;
			hi |= d->dbl[k] >= 0.5;
		}
		k05lo += lo;
		k05hi += hi;
		if (d->has_dt) {
			if (d->dt < 1609459200000LL)
				d20++;
			else
				d21++;
		}
		bool has01 = false, has02 = false;
		for (int k = 0; k < d->nkw; k++) {
			has01 |= !strcmp(d->kw[k], "k01");
			has02 |= !strcmp(d->kw[k], "k02");
		}
		if (has01) {
			f01++;
			if (d->has_num && d->num > mx01)
				mx01 = (double)d->num;
		}
		bool b = d->has_num && d->num >= 500;
		fa += has02;
		fb += b;
		fo += !has02 && !b;
		ftrue += d->flag;
	}
	/* sorted by from: *-100, mid, 500-* */
	const cJSON *b = jget(j, "r.buckets");
	CHECK(cJSON_GetArraySize(b) == 3);
	const cJSON *b0 = cJSON_GetArrayItem(b, 0), *b1 = cJSON_GetArrayItem(b, 1),
	            *b2 = cJSON_GetArrayItem(b, 2);
	CHECK(!strcmp(jget(b0, "key")->valuestring, "*-100.0") && jnum(b0, "to") == 100 &&
	      !jget(b0, "from"));
	CHECK(!strcmp(jget(b1, "key")->valuestring, "mid") && jnum(b1, "from") == 100);
	CHECK(!strcmp(jget(b2, "key")->valuestring, "500.0-*"));
	CHECK(jnum(b0, "doc_count") == (double)rlo && jnum(b1, "doc_count") == (double)rmid &&
	      jnum(b2, "doc_count") == (double)rhi);
	CHECK(close_rel(jnum(b0, "s.value"), slo, 1e-9) && close_rel(jnum(b1, "s.value"), smid, 1e-9) &&
	      close_rel(jnum(b2, "s.value"), shi, 1e-9));
	const cJSON *rk = jget(j, "rk.buckets");
	CHECK(jnum(cJSON_GetObjectItemCaseSensitive(rk, "*-0.5"), "doc_count") == (double)k05lo);
	CHECK(jnum(cJSON_GetObjectItemCaseSensitive(rk, "0.5-*"), "doc_count") == (double)k05hi);
	CHECK(!strcmp(jget(cJSON_GetObjectItemCaseSensitive(rk, "0.5-*"), "key")->valuestring,
	              "0.5-*"));
	b = jget(j, "dr.buckets");
	b0 = cJSON_GetArrayItem(b, 0);
	b1 = cJSON_GetArrayItem(b, 1);
	CHECK(b0 && !strcmp(jget(b0, "key")->valuestring, "*-2021-01-01T00:00:00.000Z"));
	CHECK(b0 && !strcmp(jget(b0, "to_as_string")->valuestring, "2021-01-01T00:00:00.000Z"));
	CHECK(b0 && jnum(b0, "doc_count") == (double)d20);
	CHECK(b1 && jnum(b1, "doc_count") == (double)d21 && jnum(b1, "from") == 1609459200000.0);
	CHECK(jnum(j, "f.doc_count") == (double)f01);
	CHECK(jnum(j, "f.mx.value") == mx01);
	CHECK(jnum(j, "fs.buckets.a.doc_count") == (double)fa);
	CHECK(jnum(j, "fs.buckets.b.doc_count") == (double)fb);
	CHECK(jnum(j, "fs.buckets._other_.doc_count") == (double)fo);
	b = jget(j, "fa.buckets");
	CHECK(cJSON_IsArray(b) && jnum(cJSON_GetArrayItem(b, 0), "doc_count") == (double)ftrue &&
	      jnum(cJSON_GetArrayItem(b, 1), "doc_count") == (double)all);
	CHECK(jnum(j, "none.doc_count") == 0);
	CHECK(cJSON_IsNull(jget(j, "none.mn.value")) && cJSON_IsNull(jget(j, "none.av.value")));
	CHECK(jnum(j, "none.sm.value") == 0);
	CHECK(jnum(j, "none.es.count") == 0 && cJSON_IsNull(jget(j, "none.es.std_deviation")));
	CHECK(jnum(j, "mi.doc_count") == (double)miss && jnum(j, "mi.c.value") == (double)misskw);
	cJSON_Delete(j);
	sr_agg_free(a);
}

static int
cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void
test_metrics(void)
{
	sr_agg *a = parse_aggs(
	    "{\"mn\":{\"min\":{\"field\":\"dbl\"}},\"mx\":{\"max\":{\"field\":\"dbl\"}},"
	    "\"sm\":{\"sum\":{\"field\":\"dbl\"}},\"av\":{\"avg\":{\"field\":\"num\"}},"
	    "\"st\":{\"stats\":{\"field\":\"num\"}},\"es\":{\"extended_stats\":{\"field\":\"dbl\"}},"
	    "\"vc\":{\"value_count\":{\"field\":\"dbl\"}},\"avm\":{\"avg\":{\"field\":\"num\","
	    "\"missing\":1000}},"
	    "\"dmin\":{\"min\":{\"field\":\"dt\"}},"
	    "\"ck\":{\"cardinality\":{\"field\":\"kw\"}},\"cu\":{\"cardinality\":{\"field\":\"uid\"}},"
	    "\"cuh\":{\"cardinality\":{\"field\":\"uid\",\"precision_threshold\":100}},"
	    "\"cd\":{\"cardinality\":{\"field\":\"dbl\"}},"
	    "\"p\":{\"percentiles\":{\"field\":\"dbl\"}},"
	    "\"p2\":{\"percentiles\":{\"field\":\"num\",\"percents\":[50,99.9],\"keyed\":false}}}");
	cJSON *j = run_single(a);
	kstat d, n, nm;
	memset(&d, 0, sizeof d);
	memset(&n, 0, sizeof n);
	memset(&nm, 0, sizeof nm);
	static double dv[NDOCS * 2], nv[NDOCS];
	size_t ndv = 0, nnv = 0;
	int64_t dtmin = INT64_MAX;
	bool kwseen[NKW] = {0};
	uint64_t uids = 0;
	for (int i = 0; i < NDOCS; i++) {
		const mdoc *x = &docs[i];
		if (!selected(x))
			continue;
		uids++;
		for (int k = 0; k < x->ndbl; k++) {
			ks_add(&d, x->dbl[k]);
			dv[ndv++] = x->dbl[k];
		}
		if (x->has_num) {
			ks_add(&n, (double)x->num);
			nv[nnv++] = (double)x->num;
		}
		ks_add(&nm, x->has_num ? (double)x->num : 1000.0);
		if (x->has_dt && x->dt < dtmin)
			dtmin = x->dt;
		for (int k = 0; k < x->nkw; k++)
			kwseen[kw_index(x->kw[k])] = true;
	}
	CHECK(jnum(j, "mn.value") == d.min && jnum(j, "mx.value") == d.max);
	CHECK(close_rel(jnum(j, "sm.value"), d.sum, 1e-9));
	CHECK(close_rel(jnum(j, "av.value"), n.sum / (double)n.n, 1e-9));
	CHECK(close_rel(jnum(j, "avm.value"), nm.sum / (double)nm.n, 1e-9));
	CHECK(jnum(j, "st.count") == (double)n.n && jnum(j, "st.min") == n.min &&
	      jnum(j, "st.max") == n.max && close_rel(jnum(j, "st.sum"), n.sum, 1e-9));
	double mean = d.sum / (double)d.n;
	double var = d.sumsq / (double)d.n - mean * mean;
	double vars = (d.sumsq - d.sum * mean) / (double)(d.n - 1);
	CHECK(jnum(j, "es.count") == (double)d.n);
	CHECK(close_rel(jnum(j, "es.sum_of_squares"), d.sumsq, 1e-9));
	CHECK(close_rel(jnum(j, "es.variance"), var, 1e-9));
	CHECK(close_rel(jnum(j, "es.variance_sampling"), vars, 1e-9));
	CHECK(close_rel(jnum(j, "es.std_deviation"), sqrt(var), 1e-9));
	CHECK(close_rel(jnum(j, "es.std_deviation_bounds.upper"), mean + 2 * sqrt(var), 1e-9));
	CHECK(close_rel(jnum(j, "es.std_deviation_bounds.lower"), mean - 2 * sqrt(var), 1e-9));
	CHECK(jnum(j, "vc.value") == (double)d.n);
	CHECK(jnum(j, "dmin.value") == (double)dtmin);
	char ds[40];
	agg_date_format(NULL, NULL, dtmin, ds, sizeof ds);
	CHECK(!strcmp(jget(j, "dmin.value_as_string")->valuestring, ds));
	int nk = 0;
	for (int k = 0; k < NKW; k++)
		nk += kwseen[k];
	CHECK(jnum(j, "ck.value") == nk);
	CHECK(jnum(j, "cu.value") == (double)uids); /* below the default threshold: exact */
	double cuh = jnum(j, "cuh.value");
	CHECKF(fabs(cuh - (double)uids) <= 0.1 * (double)uids, "hll %g vs %llu", cuh,
	       (unsigned long long)uids);
	qsort(dv, ndv, sizeof *dv, cmp_dbl);
	size_t distinct = 0;
	for (size_t i = 0; i < ndv; i++)
		distinct += i == 0 || dv[i] != dv[i - 1];
	CHECK(jnum(j, "cd.value") == (double)distinct);
	/* percentiles: the estimate lies between the true quantiles at q±1% */
	static const double pcts[] = {1, 5, 25, 50, 75, 95, 99};
	const cJSON *vals = jget(j, "p.values");
	REQUIRE(cJSON_IsObject(vals));
	int i = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, vals)
	{
		char key[16];
		snprintf(key, sizeof key, "%.1f", pcts[i]);
		CHECK(!strcmp(e->string, key));
		double q = pcts[i] / 100;
		double lo = dv[(size_t)fmax(0, floor((q - 0.01) * (double)(ndv - 1)))];
		double hi = dv[(size_t)fmin((double)ndv - 1, ceil((q + 0.01) * (double)(ndv - 1)))];
		CHECKF(e->valuedouble >= lo && e->valuedouble <= hi, "p%g = %g not in [%g, %g]",
		       pcts[i], e->valuedouble, lo, hi);
		i++;
	}
	CHECK(i == 7);
	qsort(nv, nnv, sizeof *nv, cmp_dbl);
	e = cJSON_GetArrayItem(jget(j, "p2.values"), 1);
	CHECK(e && jnum(e, "key") == 99.9);
	double v = jnum(e, "value");
	CHECK(v >= nv[(size_t)(0.98 * (double)(nnv - 1))] && v <= nv[nnv - 1]);
	cJSON_Delete(j);
	sr_agg_free(a);
}

static void
test_top_hits_and_depth(void)
{
	/* terms > date_histogram > terms > (avg, top_hits): four levels */
	sr_agg *a = parse_aggs(
	    "{\"t\":{\"terms\":{\"field\":\"kw\",\"size\":3},\"aggs\":{"
	    "\"top\":{\"top_hits\":{\"size\":2,\"sort\":[{\"uid\":\"desc\"}],\"_source\":{"
	    "\"includes\":[\"uid\",\"kw\"]}}},"
	    "\"best\":{\"top_hits\":{\"size\":1}},"
	    "\"y\":{\"date_histogram\":{\"field\":\"dt\",\"calendar_interval\":\"year\"},\"aggs\":{"
	    "\"f\":{\"terms\":{\"field\":\"flag\"},\"aggs\":{\"a\":{\"avg\":{\"field\":\"num\"}},"
	    "\"c\":{\"cardinality\":{\"field\":\"kw\"}}}}}}}}}");
	cJSON *j = run_single(a);
	const cJSON *e;
	cJSON_ArrayForEach(e, jget(j, "t.buckets"))
	{
		const char *key = jget(e, "key")->valuestring;
		/* model: docs having key */
		int64_t best_uid[2] = {-1, -1};
		float best_score = -1;
		int64_t best_score_uid = -1;
		double sum[2][2] = {{0}}, cnt[2][2] = {{0}}, dc[2][2] = {{0}};
		int nkw[2][2] = {{0}};
		bool kws[2][2][NKW];
		memset(kws, 0, sizeof kws);
		for (int i = 0; i < NDOCS; i++) {
			const mdoc *d = &docs[i];
			if (!selected(d))
				continue;
			bool has = false;
			for (int k = 0; k < d->nkw; k++)
				has |= !strcmp(d->kw[k], key);
			if (!has)
				continue;
			if (d->uid > best_uid[0]) {
				best_uid[1] = best_uid[0];
				best_uid[0] = d->uid;
			} else if (d->uid > best_uid[1])
				best_uid[1] = d->uid;
			float sc = score_of(d->uid);
			if (sc > best_score) {
				best_score = sc;
				best_score_uid = d->uid;
			}
			if (!d->has_dt)
				continue;
			int y = d->dt >= 1609459200000LL;
			dc[y][d->flag]++;
			if (d->has_num) {
				sum[y][d->flag] += (double)d->num;
				cnt[y][d->flag]++;
			}
			for (int k = 0; k < d->nkw; k++) {
				int x = kw_index(d->kw[k]);
				if (!kws[y][d->flag][x]) {
					kws[y][d->flag][x] = true;
					nkw[y][d->flag]++;
				}
			}
		}
		const cJSON *hits = jget(e, "top.hits.hits");
		REQUIRE(cJSON_GetArraySize(hits) == 2);
		for (int h = 0; h < 2; h++) {
			const cJSON *hit = cJSON_GetArrayItem(hits, h);
			char id[16];
			snprintf(id, sizeof id, "d%lld", (long long)best_uid[h]);
			CHECKF(!strcmp(jget(hit, "_id")->valuestring, id), "top_hits %s: %s vs %s", key,
			       jget(hit, "_id")->valuestring, id);
			CHECK(jnum(hit, "_source.uid") == (double)best_uid[h]);
			CHECK(jget(hit, "_source.kw") && !jget(hit, "_source.num") &&
			      !jget(hit, "_source.txt"));
			CHECK(jnum(cJSON_GetArrayItem(jget(hit, "sort"), 0), "") != 0 ||
			      cJSON_GetArrayItem(jget(hit, "sort"), 0)->valuedouble == (double)best_uid[h]);
		}
		CHECK(jnum(e, "top.hits.total.value") == jnum(e, "doc_count"));
		const cJSON *bh = cJSON_GetArrayItem(jget(e, "best.hits.hits"), 0);
		CHECK(bh && close_rel(jnum(bh, "_score"), best_score, 1e-6));
		/* highest score: ties broken by doc order, so compare the score only */
		(void)best_score_uid;
		const cJSON *ye;
		cJSON_ArrayForEach(ye, jget(e, "y.buckets"))
		{
			int y = jnum(ye, "key") >= 1609459200000.0;
			const cJSON *fe;
			cJSON_ArrayForEach(fe, jget(ye, "f.buckets"))
			{
				int fl = jnum(fe, "key") == 1;
				CHECK(jnum(fe, "doc_count") == dc[y][fl]);
				if (cnt[y][fl])
					CHECK(close_rel(jnum(fe, "a.value"), sum[y][fl] / cnt[y][fl], 1e-9));
				CHECK(jnum(fe, "c.value") == nkw[y][fl]);
			}
		}
	}
	cJSON_Delete(j);
	sr_agg_free(a);
}

/* Merging partial states in any order (and over the wire) gives the
 * single-state result. */
static void
test_merge_orders(void)
{
	sr_agg *a = parse_aggs(
	    "{\"t\":{\"terms\":{\"field\":\"kw\",\"size\":100},\"aggs\":{"
	    "\"h\":{\"histogram\":{\"field\":\"num\",\"interval\":100},\"aggs\":{"
	    "\"s\":{\"extended_stats\":{\"field\":\"dbl\"}},\"c\":{\"cardinality\":{\"field\":"
	    "\"uid\",\"precision_threshold\":50}}}}}},"
	    "\"n\":{\"terms\":{\"field\":\"num\",\"size\":2000}},"
	    "\"d\":{\"date_histogram\":{\"field\":\"dt\",\"calendar_interval\":\"quarter\","
	    "\"time_zone\":\"America/New_York\"},\"aggs\":{\"m\":{\"min\":{\"field\":\"dbl\"}}}},"
	    "\"r\":{\"range\":{\"field\":\"dbl\",\"ranges\":[{\"to\":10},{\"from\":10,\"to\":20}]}},"
	    "\"fs\":{\"filters\":{\"filters\":{\"x\":{\"term\":{\"flag\":false}}}},\"aggs\":{\"v\":{"
	    "\"value_count\":{\"field\":\"kw\"}}}},"
	    "\"mi\":{\"missing\":{\"field\":\"dt\"}},"
	    "\"top\":{\"top_hits\":{\"size\":5,\"sort\":[{\"uid\":\"asc\"}],\"_source\":false}},"
	    "\"st\":{\"stats\":{\"field\":\"num\"}}}");
	cJSON *single = run_single(a);
	static const int orders[][NSHARDS] = {{0, 1, 2}, {2, 1, 0}, {1, 2, 0}};
	for (int o = 0; o < 3; o++) {
		for (int wire = 0; wire < 2; wire++) {
			cJSON *m = run_merged(a, orders[o], wire);
			/* _index differs: the merged hits carry it */
			cJSON *th = cJSON_GetObjectItemCaseSensitive(m, "top");
			const cJSON *h;
			cJSON_ArrayForEach(h, jget(th, "hits.hits"))
			{
				CHECK(!strcmp(jget(h, "_index")->valuestring, "idx"));
				cJSON_DeleteItemFromObjectCaseSensitive((cJSON *)h, "_index");
			}
			char where[256] = "";
			bool same = json_close(single, m, 1e-9, where, sizeof where);
			CHECKF(same, "order %d wire %d: %s", o, wire, where);
			cJSON_Delete(m);
		}
	}
	cJSON_Delete(single);
	sr_agg_free(a);

	/* percentiles merge: within tolerance of the truth too */
	a = parse_aggs("{\"p\":{\"percentiles\":{\"field\":\"num\",\"percents\":[10,50,90]}}}");
	int order[NSHARDS] = {1, 0, 2};
	cJSON *m = run_merged(a, order, true);
	static double nv[NDOCS];
	size_t nn = 0;
	for (int i = 0; i < NDOCS; i++)
		if (selected(&docs[i]) && docs[i].has_num)
			nv[nn++] = (double)docs[i].num;
	qsort(nv, nn, sizeof *nv, cmp_dbl);
	const char *keys[] = {"p.values.10.0", "p.values.50.0", "p.values.90.0"};
	double qs[] = {0.1, 0.5, 0.9};
	for (int i = 0; i < 3; i++) {
		const cJSON *vals = jget(m, "p.values");
		const cJSON *v = cJSON_GetArrayItem(vals, i);
		(void)keys;
		double lo = nv[(size_t)((qs[i] - 0.01) * (double)(nn - 1))];
		double hi = nv[(size_t)ceil((qs[i] + 0.01) * (double)(nn - 1))];
		CHECKF(v && v->valuedouble >= lo && v->valuedouble <= hi, "merged p%g", qs[i] * 100);
	}
	cJSON_Delete(m);
	sr_agg_free(a);
}

/* min_doc_count 0 lists the field's terms even where nothing matched */
static void
test_terms_zero(void)
{
	sr_agg *a = parse_aggs("{\"z\":{\"terms\":{\"field\":\"kw\",\"size\":100,"
	                       "\"min_doc_count\":0}}}");
	select_none = true;
	sr_agg_state *st = sr_agg_state_new(a);
	REQUIRE(collect_shard(1, st) == CM_OK);
	select_none = false;
	cJSON *j = render_json(st);
	bool want[NKW] = {0};
	int nwant = 0;
	for (int i = 0; i < NDOCS; i++)
		if (docs[i].shard == 1)
			for (int k = 0; k < docs[i].nkw; k++)
				if (!want[kw_index(docs[i].kw[k])]) {
					want[kw_index(docs[i].kw[k])] = true;
					nwant++;
				}
	const cJSON *e;
	int n = 0;
	const char *prev = "";
	cJSON_ArrayForEach(e, jget(j, "z.buckets"))
	{
		const char *k = jget(e, "key")->valuestring;
		CHECK(want[kw_index(k)] && jnum(e, "doc_count") == 0);
		CHECK(strcmp(k, prev) > 0); /* equal counts: by key */
		prev = k;
		n++;
	}
	CHECK(n == nwant && n > 0);
	cJSON_Delete(j);
	sr_agg_state_free(st);
	sr_agg_free(a);
}

/* ---------------------------------------------------------------- one segment */

/* A shard of one segment and a keyword field of more than 1024 terms: a
 * terms agg then counts a filtered set's ordinals in a small table (or,
 * past 1 ordinal in 16, in a counts array) and keeps only the top
 * shard_size by count, ties by key, the rest summed into
 * sum_other_doc_count; checked exactly, for filters from a few docs to
 * all, against counts made here. Most counts are 1 or 2, so the cut runs
 * through long ties. */
#define ONE_DOCS 6000
#define ONE_TERMS 3000

static int one_val[ONE_DOCS];

static int
one_sel(int uid, int mod)
{
	return uid % mod == 0;
}

static cJSON *
one_run(st_shard *sh, const sr_agg *a, int mod)
{
	st_reader *r = st_shard_reader(sh);
	REQUIRE(st_reader_nsegments(r) == 1);
	sr_agg_state *st = sr_agg_state_new(a);
	sr_collector c = sr_agg_collector(st);
	sr_seg_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	ctx.reader = r;
	ctx.seg = st_reader_segment(r, 0);
	ctx.live = st_reader_live(r, 0);
	REQUIRE(st_seg_txn_begin(ctx.seg, &ctx.txn) == CM_OK);
	REQUIRE(c.begin_segment(c.self, &ctx) == CM_OK);
	const st_field_info *uidf = st_segment_field(ctx.seg, "uid");
	st_colblock cb;
	memset(&cb, 0, sizeof cb);
	uint32_t batch[64];
	size_t n = 0;
	for (uint32_t d = 0; d < st_segment_max_doc(ctx.seg); d++) {
		const int64_t *v;
		REQUIRE(st_col_values(ctx.txn, uidf, &cb, d, &v) == 1);
		if (!one_sel((int)v[0], mod))
			continue;
		batch[n++] = d;
		if (n == 64) {
			c.collect(c.self, batch, NULL, n);
			n = 0;
		}
	}
	if (n)
		c.collect(c.self, batch, NULL, n);
	c.end_segment(c.self);
	st_colblock_free(&cb);
	st_seg_txn_end(ctx.txn);
	st_reader_release(r);
	cJSON *j = render_json(st);
	sr_agg_state_free(st);
	return j;
}

static void
test_terms_one_segment(void)
{
	cJSON *mj = cJSON_Parse("{\"properties\":{\"hk\":{\"type\":\"keyword\"},"
	                        "\"uid\":{\"type\":\"long\"}}}");
	st_mapping *m = NULL;
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(st_mapping_from_json(mj, &m, &err) == CM_OK);
	cJSON_Delete(mj);
	char dir[128];
	snprintf(dir, sizeof dir, "%s/one", tmpdir);
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.background_merges = false;
	st_shard *sh = NULL;
	REQUIRE(st_shard_open(dir, m, &o, &sh, &err) == CM_OK);
	static char srcs[ONE_DOCS][64], ids[ONE_DOCS][16];
	static st_op ops[ONE_DOCS];
	static st_op_result res[ONE_DOCS];
	for (int i = 0; i < ONE_DOCS; i++) {
		/* skewed: low values are frequent, most of the rest seen once */
		one_val[i] = rndn(4) ? rndn(ONE_TERMS) : rndn(1 + rndn(ONE_TERMS));
		snprintf(srcs[i], sizeof srcs[i], "{\"uid\":%d,\"hk\":\"h%05d\"}", i, one_val[i]);
		snprintf(ids[i], sizeof ids[i], "o%d", i);
		st_op *op = &ops[i];
		memset(op, 0, sizeof *op);
		op->type = ST_OP_INDEX;
		op->id = ids[i];
		op->id_len = strlen(ids[i]);
		op->source = srcs[i];
		op->source_len = strlen(srcs[i]);
		op->seq_no = ST_NO_SEQ;
		op->if_seq_no = ST_NO_SEQ;
	}
	REQUIRE(st_shard_apply(sh, ops, ONE_DOCS, res) == CM_OK);
	for (int i = 0; i < ONE_DOCS; i++)
		REQUIRE(res[i].err == CM_OK);
	REQUIRE(st_shard_refresh(sh) == CM_OK);

	/* 1 doc in 97 (62 docs: the table, a cut after 17 of some 60
	 * ordinals), 1 in 7 (the table spills to the array), all */
	static const int mods[] = {97, 7, 1};
	static const char *specs[] = {"\"size\":5", "\"size\":1", "\"size\":3,\"shard_size\":3",
	                              "\"size\":40"};
	for (size_t mi = 0; mi < sizeof mods / sizeof *mods; mi++) {
		static uint64_t cnt[ONE_TERMS];
		memset(cnt, 0, sizeof cnt);
		uint64_t total = 0;
		for (int i = 0; i < ONE_DOCS; i++)
			if (one_sel(i, mods[mi])) {
				cnt[one_val[i]]++;
				total++;
			}
		/* terms by count descending, then key (= value) ascending */
		static int idx[ONE_TERMS];
		int nidx = 0;
		for (int v = 0; v < ONE_TERMS; v++)
			if (cnt[v])
				idx[nidx++] = v;
		for (int x = 1; x < nidx; x++)
			for (int y = x; y > 0 && cnt[idx[y]] > cnt[idx[y - 1]]; y--) {
				int t = idx[y];
				idx[y] = idx[y - 1];
				idx[y - 1] = t;
			}
		for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
			char q[128];
			snprintf(q, sizeof q, "{\"t\":{\"terms\":{\"field\":\"hk\",%s}}}",
			         specs[si]);
			sr_agg *a = parse_aggs(q);
			int size = atoi(strchr(specs[si], ':') + 1);
			cJSON *j = one_run(sh, a, mods[mi]);
			const cJSON *e;
			int i = 0;
			uint64_t top = 0;
			cJSON_ArrayForEach(e, jget(j, "t.buckets"))
			{
				char key[16];
				snprintf(key, sizeof key, "h%05d", i < nidx ? idx[i] : -1);
				uint64_t want = i < nidx ? cnt[idx[i]] : 0;
				CHECKF(!strcmp(jget(e, "key")->valuestring, key) &&
				           jnum(e, "doc_count") == (double)want,
				       "1/%d %s: bucket %d %s %g, want %s %llu", mods[mi],
				       specs[si], i, jget(e, "key")->valuestring,
				       jnum(e, "doc_count"), key, (unsigned long long)want);
				top += (uint64_t)jnum(e, "doc_count");
				i++;
			}
			CHECKF(i == (nidx < size ? nidx : size), "1/%d %s: %d buckets", mods[mi],
			       specs[si], i);
			CHECKF(jnum(j, "t.sum_other_doc_count") == (double)(total - top),
			       "1/%d %s: other %g, want %llu", mods[mi], specs[si],
			       jnum(j, "t.sum_other_doc_count"), (unsigned long long)(total - top));
			CHECK(jnum(j, "t.doc_count_error_upper_bound") == 0);
			cJSON_Delete(j);
			sr_agg_free(a);
		}
	}
	st_shard_close(sh);
	st_mapping_unref(m);
}

/* Ten terms, so their counts are an array the collector counts packed
 * column blocks into: the first block has docs of two values (the doc the
 * direct count stops at), the others one, or none (missing: not counted). */
#define DENSE_DOCS 9000
static void
test_terms_dense_direct(void)
{
	cJSON *mj = cJSON_Parse("{\"properties\":{\"lk\":{\"type\":\"keyword\"},"
	                        "\"uid\":{\"type\":\"long\"}}}");
	st_mapping *m = NULL;
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(st_mapping_from_json(mj, &m, &err) == CM_OK);
	cJSON_Delete(mj);
	char dir[128];
	snprintf(dir, sizeof dir, "%s/dense", tmpdir);
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.background_merges = false;
	st_shard *sh = NULL;
	REQUIRE(st_shard_open(dir, m, &o, &sh, &err) == CM_OK);
	static char srcs[DENSE_DOCS][64], ids[DENSE_DOCS][16];
	static st_op ops[DENSE_DOCS];
	static st_op_result res[DENSE_DOCS];
	static int va[DENSE_DOCS], vb[DENSE_DOCS]; /* -1: none */
	for (int i = 0; i < DENSE_DOCS; i++) {
		va[i] = rndn(10);
		vb[i] = i < 4096 && i % 7 == 3 ? (va[i] + 1 + rndn(9)) % 10 : -1;
		if (i % 11 == 5)
			va[i] = vb[i] = -1;
		if (vb[i] >= 0)
			snprintf(srcs[i], sizeof srcs[i], "{\"uid\":%d,\"lk\":[\"l%d\",\"l%d\"]}",
			         i, va[i], vb[i]);
		else if (va[i] >= 0)
			snprintf(srcs[i], sizeof srcs[i], "{\"uid\":%d,\"lk\":\"l%d\"}", i, va[i]);
		else
			snprintf(srcs[i], sizeof srcs[i], "{\"uid\":%d}", i);
		snprintf(ids[i], sizeof ids[i], "d%d", i);
		st_op *op = &ops[i];
		memset(op, 0, sizeof *op);
		op->type = ST_OP_INDEX;
		op->id = ids[i];
		op->id_len = strlen(ids[i]);
		op->source = srcs[i];
		op->source_len = strlen(srcs[i]);
		op->seq_no = ST_NO_SEQ;
		op->if_seq_no = ST_NO_SEQ;
	}
	REQUIRE(st_shard_apply(sh, ops, DENSE_DOCS, res) == CM_OK);
	for (int i = 0; i < DENSE_DOCS; i++)
		REQUIRE(res[i].err == CM_OK);
	REQUIRE(st_shard_refresh(sh) == CM_OK);
	static const int mods[] = {1, 2, 3};
	for (size_t mi = 0; mi < sizeof mods / sizeof *mods; mi++) {
		uint64_t cnt[10] = {0};
		for (int i = 0; i < DENSE_DOCS; i++)
			if (one_sel(i, mods[mi])) {
				if (va[i] >= 0)
					cnt[va[i]]++;
				if (vb[i] >= 0)
					cnt[vb[i]]++;
			}
		sr_agg *a = parse_aggs("{\"t\":{\"terms\":{\"field\":\"lk\",\"size\":10}}}");
		cJSON *j = one_run(sh, a, mods[mi]);
		const cJSON *e;
		int nb = 0;
		uint64_t sum = 0;
		cJSON_ArrayForEach(e, jget(j, "t.buckets"))
		{
			int v = atoi(jget(e, "key")->valuestring + 1);
			CHECKF(v >= 0 && v < 10 && jnum(e, "doc_count") == (double)cnt[v],
			       "dense 1/%d: %s %g, want %llu", mods[mi],
			       jget(e, "key")->valuestring, jnum(e, "doc_count"),
			       (unsigned long long)cnt[v < 0 || v > 9 ? 0 : v]);
			sum += (uint64_t)jnum(e, "doc_count");
			nb++;
		}
		uint64_t want = 0;
		for (int v = 0; v < 10; v++)
			want += cnt[v];
		CHECKF(nb == 10 && sum == want, "dense 1/%d: %d buckets, %llu counted", mods[mi],
		       nb, (unsigned long long)sum);
		cJSON_Delete(j);
		sr_agg_free(a);
	}
	st_shard_close(sh);
	st_mapping_unref(m);
}

static void
expect_parse_error(const char *json, cm_err code, const char *msg_prefix)
{
	cJSON *j = cJSON_Parse(json);
	REQUIRE(j);
	sr_agg *a = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = sr_agg_from_json(j, &a, &err);
	CHECKF(rc == code, "%s: got %s (%s)", json, cm_err_name(rc), err.reason);
	CHECKF(!strncmp(err.reason, msg_prefix, strlen(msg_prefix)), "%s: reason [%s]", json,
	       err.reason);
	sr_agg_free(a);
	cJSON_Delete(j);
}

static void
test_errors(void)
{
	expect_parse_error("{\"x\":{\"foo\":{\"field\":\"a\"}}}", CM_EPARSE,
	                   "Unknown aggregation type [foo]");
	expect_parse_error("{\"x\":{\"terms\":{}}}", CM_EINVAL,
	                   "Required one of fields [field, script], but none were specified.");
	expect_parse_error("{\"x\":{\"avg\":{\"field\":\"a\"},\"aggs\":{\"y\":{\"max\":{\"field\":"
	                   "\"b\"}}}}}",
	                   CM_EPARSE, "Aggregator [x] of type [avg] cannot accept sub-aggregations");
	expect_parse_error("{\"x\":{\"terms\":{\"field\":\"a\"},\"avg\":{\"field\":\"b\"}}}", CM_EPARSE,
	                   "Found two aggregation type definitions in [x]: [terms] and [avg]");
	expect_parse_error("{\"x\":{\"histogram\":{\"field\":\"a\"}}}", CM_EINVAL,
	                   "[interval] must be >0");
	expect_parse_error("{\"x\":{\"date_histogram\":{\"field\":\"a\",\"calendar_interval\":\"2d\"}}}",
	                   CM_EINVAL, "The supplied interval [2d] could not be parsed");
	expect_parse_error("{\"x\":{\"date_histogram\":{\"field\":\"a\",\"fixed_interval\":\"1h\","
	                   "\"time_zone\":\"Mars/Olympus\"}}}",
	                   CM_EINVAL, "Unknown time-zone ID: Mars/Olympus");
	expect_parse_error("{\"x\":{\"terms\":{\"field\":\"a\",\"order\":{\"nope\":\"asc\"}}}}",
	                   CM_EAGGEXEC, "Invalid aggregator order path [nope]");
	expect_parse_error("{\"x[1]\":{\"terms\":{\"field\":\"a\"}}}", CM_EPARSE,
	                   "Invalid aggregation name [x[1]]");
	expect_parse_error("{\"x\":{\"terms\":{\"field\":\"a\",\"bogus\":1}}}", CM_EPARSE,
	                   "[terms] unknown field [bogus]");

	/* text field: rejected by validation and when collecting */
	sr_agg *a = parse_aggs("{\"x\":{\"terms\":{\"field\":\"txt\"}}}");
	cm_error err;
	cm_error_clear(&err);
	CHECK(sr_agg_validate(a, mapping, &err) == CM_EINVAL);
	CHECK(!strncmp(err.reason, "Text fields are not optimised", 29));
	sr_agg_state *st = sr_agg_state_new(a);
	CHECK(collect_shard(0, st) == CM_EINVAL);
	const cm_error *ce = sr_agg_state_error(st);
	CHECK(ce && strstr(ce->reason, "Please use a keyword field instead") &&
	      strstr(ce->reason, "[txt]"));
	cm_buf out;
	cm_buf_init(&out, CM_MEM_SEARCH);
	cm_error_clear(&err);
	CHECK(sr_agg_render(st, &out, &err) == CM_EINVAL);
	sr_agg_state_free(st);
	sr_agg_free(a);
	a = parse_aggs("{\"x\":{\"sum\":{\"field\":\"kw\"}}}");
	cm_error_clear(&err);
	CHECK(sr_agg_validate(a, mapping, &err) == CM_EINVAL &&
	      strstr(err.reason, "of type [keyword] is not supported for aggregation [sum]"));
	sr_agg_free(a);

	/* too many buckets */
	a = parse_aggs("{\"x\":{\"histogram\":{\"field\":\"dbl\",\"interval\":0.01}}}");
	st = sr_agg_state_new(a);
	REQUIRE(collect_shard(1, st) == CM_OK);
	cm_buf_reset(&out);
	cm_error_clear(&err);
	CHECK(sr_agg_render(st, &out, &err) == CM_ELIMIT);
	CHECK(!strcmp(cm_error_type(&err), "too_many_buckets_exception"));
	CHECK(!strncmp(err.reason, "Trying to create too many buckets. Must be less than or equal "
	                           "to: [65535]",
	               60));
	sr_agg_state_free(st);
	sr_agg_free(a);
	cm_buf_free(&out);
}

static void
test_hll_tdigest(void)
{
	/* HLL at p=14 (threshold 3000): within 3 standard errors */
	for (uint64_t n = 5000; n <= 500000; n *= 10) {
		agg_hll *h = agg_hll_new(3000);
		agg_hll *h2 = agg_hll_new(3000);
		for (uint64_t i = 0; i < n; i++) {
			uint64_t x = i * 0x9E3779B97F4A7C15ull;
			x ^= x >> 31;
			x *= 0xBF58476D1CE4E5B9ull;
			x ^= x >> 29;
			agg_hll_add(i % 2 ? h : h2, x);
			if (i % 3 == 0)
				agg_hll_add(h2, x); /* overlap */
		}
		agg_hll_merge(h, h2);
		double est = (double)agg_hll_cardinality(h);
		double se = 1.04 / sqrt(16384.0);
		CHECKF(fabs(est - (double)n) <= 3 * se * (double)n, "hll %llu: %g",
		       (unsigned long long)n, est);
		agg_hll_free(h);
		agg_hll_free(h2);
	}
	/* exact below the threshold */
	agg_hll *h = agg_hll_new(3000);
	for (int i = 0; i < 2999; i++)
		agg_hll_add(h, (uint64_t)i * 7919);
	CHECK(agg_hll_cardinality(h) == 2999);
	agg_hll_free(h);
	CHECK(agg_hll_precision(3000) == 14 && agg_hll_precision(100) == 10);

	/* t-digest over 100k skewed values, split in two and merged */
	agg_tdigest *t1 = agg_td_new(100), *t2 = agg_td_new(100);
	static double v[100000];
	for (int i = 0; i < 100000; i++) {
		double u = (double)(rnd() % 1000000) / 1000000.0;
		v[i] = u * u * 1000;
		agg_td_add(i % 2 ? t1 : t2, v[i], 1);
	}
	agg_td_merge(t1, t2);
	qsort(v, 100000, sizeof *v, cmp_dbl);
	static const double qs[] = {0.001, 0.01, 0.25, 0.5, 0.75, 0.99, 0.999};
	for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
		double est = agg_td_quantile(t1, qs[i]);
		double lo = v[(size_t)fmax(0, (qs[i] - 0.005) * 99999)];
		double hi = v[(size_t)fmin(99999, (qs[i] + 0.005) * 99999)];
		CHECKF(est >= lo && est <= hi, "q%g: %g not in [%g,%g]", qs[i], est, lo, hi);
	}
	agg_td_free(t1);
	agg_td_free(t2);
	/* small inputs interpolate exactly */
	agg_tdigest *t = agg_td_new(100);
	for (int i = 1; i <= 4; i++)
		agg_td_add(t, i, 1);
	CHECK(agg_td_quantile(t, 0.5) == 2.5 && agg_td_quantile(t, 0) == 1 &&
	      agg_td_quantile(t, 1) == 4);
	/* ranks as t-digest 3.2: 2 holds [1.5, 2.5); past 3's span is 1 */
	CHECK(agg_td_cdf(t, 2.5) == 0.5 && agg_td_cdf(t, 2) == 0.375 && agg_td_cdf(t, 0) == 0 &&
	      agg_td_cdf(t, 3.6) == 1 && agg_td_cdf(t, 1) == 0.125);
	agg_td_free(t);

	/* HdrHistogram, 3 digits: ES's answers for 1, 51, 101, 151 (its YAML
	 * tests); split over two histograms whose lowest values differ, merged
	 * after a trip through the wire form */
	agg_hdr *h1 = agg_hdr_new(3), *h2 = agg_hdr_new(3);
	CHECK(agg_hdr_add(h1, 51, 1) && agg_hdr_add(h1, 151, 1) && agg_hdr_add(h2, 101, 1) &&
	      agg_hdr_add(h2, 1, 1) && !agg_hdr_add(h2, -1, 1));
	CHECK(agg_hdr_percentile(h1, 50) == 51.0 && agg_hdr_percentile(h1, 99) == 151.09375);
	cm_buf hb;
	cm_buf_init(&hb, CM_MEM_SEARCH);
	agg_hdr_encode(h2, &hb);
	cm_rd hr;
	cm_rd_init(&hr, hb.data, hb.len);
	agg_hdr *h3 = agg_hdr_decode(&hr, 3);
	CHECK(h3 != NULL);
	if (h3) {
		agg_hdr_merge(h1, h3);
		agg_hdr_free(h3);
	}
	CHECK(agg_hdr_percentile(h1, 25) == 1.0 && agg_hdr_percentile(h1, 50) == 51.0302734375 &&
	      agg_hdr_percentile(h1, 75) == 101.0615234375 &&
	      agg_hdr_percentile(h1, 95) == 151.1240234375);
	CHECK(agg_hdr_rank(h1, 0.5) == 0 && agg_hdr_rank(h1, 51.03) == 50 &&
	      agg_hdr_rank(h1, 151) == 100);
	cm_buf_free(&hb);
	agg_hdr_free(h1);
	agg_hdr_free(h2);

	/* dates: parsing with zones and date math, formatting with patterns */
	agg_tz *paris = NULL, *ist = NULL;
	cm_error e;
	cm_error_clear(&e);
	REQUIRE(agg_tz_parse("Europe/Paris", &paris, &e) == CM_OK);
	REQUIRE(agg_tz_parse("+05:30", &ist, &e) == CM_OK);
	int64_t ms;
	CHECK(agg_date_parse("2020-03-29T02:30:00", NULL, paris, false, &ms) &&
	      ms == 1585445400000LL); /* in the gap: moved to 03:30 CEST = 01:30Z */
	CHECK(agg_date_parse("2020-10-25T02:30:00", NULL, paris, false, &ms) &&
	      ms == 1603585800000LL); /* overlap: the earlier instant, 00:30Z */
	CHECK(agg_date_parse("2020-01-01", NULL, ist, false, &ms) && ms == 1577817000000LL);
	CHECK(agg_date_parse("2020-01-01T00:00:00Z||+1M/M", NULL, NULL, false, &ms) &&
	      ms == 1580515200000LL);
	CHECK(agg_date_parse("2020-01-15||/M", NULL, NULL, true, &ms) && ms == 1580515199999LL);
	CHECK(agg_date_parse("1577836800000", NULL, NULL, false, &ms) && ms == 1577836800000LL);
	int64_t now = cm_wall_ms();
	CHECK(agg_date_parse("now-1d/d", NULL, NULL, false, &ms) && ms % 86400000 == 0 &&
	      now - ms >= 86400000 && now - ms < 2 * 86400000);
	CHECK(!agg_date_parse("2020-13-01", NULL, NULL, false, &ms));
	CHECK(!agg_date_parse("now+1x", NULL, NULL, false, &ms));
	char fb[64];
	agg_date_format(paris, NULL, 1585519200000LL, fb, sizeof fb);
	CHECK(!strcmp(fb, "2020-03-30T00:00:00.000+02:00"));
	agg_date_format(NULL, "yyyy/MM/dd HH:mm:ss EEE MMM", 1585519200000LL, fb, sizeof fb);
	CHECK(!strcmp(fb, "2020/03/29 22:00:00 Sun Mar"));
	agg_date_format(NULL, "epoch_millis", 1585519200000LL, fb, sizeof fb);
	CHECK(!strcmp(fb, "1585519200000"));
	agg_date_format(ist, "date||epoch_millis", 1585519200000LL, fb, sizeof fb);
	CHECK(!strcmp(fb, "2020-03-30"));
	/* far future: past the TZif table, the POSIX rule decides */
	CHECK(agg_tz_offset(paris, 4102444800000LL + 200LL * 86400000) == 7200000); /* 2100 July */
	CHECK(agg_tz_offset(paris, 4102444800000LL) == 3600000);                    /* 2100 Jan */
	agg_tz_free(paris);
	agg_tz_free(ist);

	/* Java-style doubles */
	char b[64];
	agg_double_str(b, sizeof b, 1);
	CHECK(!strcmp(b, "1.0"));
	agg_double_str(b, sizeof b, 0.1);
	CHECK(!strcmp(b, "0.1"));
	agg_double_str(b, sizeof b, 1e7);
	CHECK(!strcmp(b, "1.0E7"));
	agg_double_str(b, sizeof b, 1585436400000.0);
	CHECK(!strcmp(b, "1.5854364E12"));
	agg_double_str(b, sizeof b, 99.9);
	CHECK(!strcmp(b, "99.9"));
	agg_double_str(b, sizeof b, -0.00025);
	CHECK(!strcmp(b, "-2.5E-4"));
}


/* ---- pipelines and composite (issue 13) ---- */

static bool
near(double a, double b)
{
	return fabs(a - b) <= 1e-12 * (fabs(b) > 1 ? fabs(b) : 1);
}

/* MovingFunctions against values worked out by hand. */
static void
test_moving_functions(void)
{
	const double v[] = {1, 2, 3, 4, 5};
	CHECK(agg_mf_max(v, 5) == 5 && agg_mf_min(v, 5) == 1 && agg_mf_sum(v, 5) == 15);
	CHECK(agg_mf_unweighted_avg(v, 5) == 3);
	/* ES's weights start the total at 1: (1+4+9+16+25) / (1+1+2+3+4+5) */
	CHECK(near(agg_mf_linear_weighted_avg(v, 5), 55.0 / 16.0));
	/* 1 → 1.5 → 2.25 → 3.125 → 4.0625 */
	CHECK(near(agg_mf_ewma(v, 5, 0.5), 4.0625));
	/* s: 1, 1.5, 2.375, 3.46875, 4.6484375 (b: 0, .25, .5625, .828125) */
	CHECK(near(agg_mf_holt(v, 5, 0.5, 0.5), 4.6484375));
	CHECK(near(agg_mf_std_dev(v, 5, 3), sqrt(2.0)));
	double hw = 0;
	/* additive, period 2 on 1,2,3,4: level 115/48, trend 11/32, season 13/12 */
	CHECK(agg_mf_holt_winters(v, 4, 0.5, 0.5, 0.5, 2, false, &hw) && near(hw, 367.0 / 96.0));
	CHECK(!agg_mf_holt_winters(v, 3, 0.5, 0.5, 0.5, 2, false, &hw));
	CHECK(agg_mf_holt_winters(v, 0, 0.5, 0.5, 0.5, 2, false, &hw) && isnan(hw));
	/* multiplicative, period 2 on 1,2,3,4 (padding 1e-10 aside): level 1.5,
	 * trend 1, seasons 2/3, 4/3, last trend 0; i=2: s 3, b .75, season 4/3;
	 * i=3: s 3.375, b .5625; forecast (3.375 + .5625) * 4/3 = 5.25 */
	CHECK(agg_mf_holt_winters(v, 4, 0.5, 0.5, 0.5, 2, true, &hw) && fabs(hw - 5.25) < 1e-6);
	const double g[] = {NAN, 2, NAN, 4};
	CHECK(agg_mf_max(g, 4) == 4 && agg_mf_min(g, 4) == 2 && agg_mf_unweighted_avg(g, 4) == 3);
	CHECK(isnan(agg_mf_max(v, 0)) && agg_mf_sum(v, 0) == 0 && isnan(agg_mf_unweighted_avg(v, 0)));
	CHECK(isnan(agg_mf_linear_weighted_avg(v, 0)) && isnan(agg_mf_ewma(v, 0, 0.3)));
	CHECK(isnan(agg_mf_holt(v, 0, 0.3, 0.1)) && isnan(agg_mf_std_dev(v, 0, 0)));
}

/* Applies the pipelines of spec to a hand-written rendered response. */
static char *
apply_pipes(const char *spec, const char *rendered, cm_err *rc_out)
{
	sr_agg *a = parse_aggs(spec);
	cm_buf b;
	cm_buf_init(&b, CM_MEM_SEARCH);
	cm_buf_put(&b, rendered, strlen(rendered));
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = agg_pipe_apply(a, &b, 0, false, &err);
	if (rc_out)
		*rc_out = rc;
	char *s = strndup((const char *)b.data, b.len);
	cm_buf_free(&b);
	sr_agg_free(a);
	return s;
}

static void
test_pipeline_paths(void)
{
	const char *spec =
	    "{\"h\":{\"histogram\":{\"field\":\"num\",\"interval\":10},\"aggs\":{"
	    "\"f\":{\"filter\":{\"match_all\":{}},\"aggs\":{\"p\":{\"percentiles\":{\"field\":\"dbl\"}}}},"
	    "\"st\":{\"stats\":{\"field\":\"num\"}},"
	    "\"d\":{\"derivative\":{\"buckets_path\":\"f>p[99.0]\"}},"
	    "\"c\":{\"cumulative_sum\":{\"buckets_path\":\"f>_count\"}},"
	    "\"z\":{\"derivative\":{\"buckets_path\":\"st.max\",\"gap_policy\":\"insert_zeros\"}}}},"
	    "\"mx\":{\"max_bucket\":{\"buckets_path\":\"h>st.max\"}}}";
	const char *in =
	    "{\"h\":{\"buckets\":["
	    "{\"key\":0.0,\"doc_count\":2,\"f\":{\"doc_count\":2,\"p\":{\"values\":{\"99.0\":5.5}}},"
	    "\"st\":{\"count\":2,\"min\":1.0,\"max\":7.0,\"avg\":4.0,\"sum\":8.0}},"
	    "{\"key\":10.0,\"doc_count\":0,\"f\":{\"doc_count\":0,\"p\":{\"values\":{\"99.0\":null}}},"
	    "\"st\":{\"count\":0,\"min\":null,\"max\":null,\"avg\":null,\"sum\":0.0}},"
	    "{\"key\":20.0,\"doc_count\":1,\"f\":{\"doc_count\":1,\"p\":{\"values\":{\"99.0\":1.25}}},"
	    "\"st\":{\"count\":1,\"min\":7.0,\"max\":7.0,\"avg\":7.0,\"sum\":7.0}}]}}";
	const char *want =
	    "{\"h\":{\"buckets\":["
	    "{\"key\":0.0,\"doc_count\":2,\"f\":{\"doc_count\":2,\"p\":{\"values\":{\"99.0\":5.5}}},"
	    "\"st\":{\"count\":2,\"min\":1.0,\"max\":7.0,\"avg\":4.0,\"sum\":8.0},"
	    "\"c\":{\"value\":2.0}},"
	    "{\"key\":10.0,\"doc_count\":0,\"f\":{\"doc_count\":0,\"p\":{\"values\":{\"99.0\":null}}},"
	    "\"st\":{\"count\":0,\"min\":null,\"max\":null,\"avg\":null,\"sum\":0.0},"
	    "\"d\":{\"value\":null},\"c\":{\"value\":2.0},\"z\":{\"value\":-7.0}},"
	    "{\"key\":20.0,\"doc_count\":1,\"f\":{\"doc_count\":1,\"p\":{\"values\":{\"99.0\":1.25}}},"
	    "\"st\":{\"count\":1,\"min\":7.0,\"max\":7.0,\"avg\":7.0,\"sum\":7.0},"
	    "\"d\":{\"value\":null},\"c\":{\"value\":3.0},\"z\":{\"value\":7.0}}]},"
	    "\"mx\":{\"value\":7.0,\"keys\":[\"0.0\",\"20.0\"]}}";
	cm_err rc;
	char *got = apply_pipes(spec, in, &rc);
	CHECKF(rc == CM_OK && !strcmp(got, want), "got %s", got);
	free(got);

	/* bucket_sort and bucket_selector, a script reading two paths */
	const char *spec2 =
	    "{\"t\":{\"terms\":{\"field\":\"kw\"},\"aggs\":{\"s\":{\"sum\":{\"field\":\"num\"}},"
	    "\"sel\":{\"bucket_selector\":{\"buckets_path\":{\"a\":\"s\",\"n\":\"_count\"},"
	    "\"script\":\"params.a / params.n >= 2\"}},"
	    "\"srt\":{\"bucket_sort\":{\"sort\":[{\"s\":{\"order\":\"asc\"}},\"_key\"],\"size\":2}}}}}";
	const char *in2 =
	    "{\"t\":{\"doc_count_error_upper_bound\":0,\"sum_other_doc_count\":0,\"buckets\":["
	    "{\"key\":\"a\",\"doc_count\":3,\"s\":{\"value\":9.0}},"
	    "{\"key\":\"b\",\"doc_count\":2,\"s\":{\"value\":3.0}},"
	    "{\"key\":\"c\",\"doc_count\":2,\"s\":{\"value\":4.0}},"
	    "{\"key\":\"d\",\"doc_count\":1,\"s\":{\"value\":4.0}}]}}";
	const char *want2 =
	    "{\"t\":{\"doc_count_error_upper_bound\":0,\"sum_other_doc_count\":0,\"buckets\":["
	    "{\"key\":\"c\",\"doc_count\":2,\"s\":{\"value\":4.0}},"
	    "{\"key\":\"d\",\"doc_count\":1,\"s\":{\"value\":4.0}}]}}";
	got = apply_pipes(spec2, in2, &rc);
	CHECKF(rc == CM_OK && !strcmp(got, want2), "got %s", got);
	free(got);

	/* paths that lead nowhere are refused when parsing */
	const char *bad[] = {
	    "{\"h\":{\"histogram\":{\"field\":\"num\",\"interval\":1},\"aggs\":{\"d\":{\"derivative\":"
	    "{\"buckets_path\":\"nope\"}}}}}",
	    "{\"h\":{\"histogram\":{\"field\":\"num\",\"interval\":1},\"aggs\":{\"m\":{\"max\":{\"field\":"
	    "\"num\"}},\"d\":{\"derivative\":{\"buckets_path\":\"m>x\"}}}}}",
	    "{\"x\":{\"sum_bucket\":{\"buckets_path\":\"h>_count\"}}}",
	    "{\"h\":{\"histogram\":{\"field\":\"num\",\"interval\":1},\"aggs\":{"
	    "\"a\":{\"derivative\":{\"buckets_path\":\"b\"}},\"b\":{\"derivative\":{\"buckets_path\":\"a\"}}}}}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cJSON *j = cJSON_Parse(bad[i]);
		sr_agg *a = NULL;
		cm_error err;
		cm_error_clear(&err);
		CHECKF(sr_agg_from_json(j, &a, &err) != CM_OK, "accepted %s", bad[i]);
		CHECK(i != 0 || strstr(err.reason, "No aggregation found for path [nope]"));
		CHECK(i != 3 || strstr(err.reason, "Cyclical dependency"));
		sr_agg_free(a);
		cJSON_Delete(j);
	}
}

typedef struct ckey {
	const char *kw; /* NULL: no keyword (missing bucket) */
	int64_t bucket;
	uint64_t count;
} ckey;

static int
ckey_cmp(const void *x, const void *y)
{
	const ckey *a = x, *b = y;
	if (!a->kw != !b->kw)
		return a->kw ? 1 : -1;
	int c = a->kw ? strcmp(a->kw, b->kw) : 0;
	if (c)
		return c;
	return (a->bucket < b->bucket) ? 1 : (a->bucket > b->bucket) ? -1 : 0; /* desc */
}

/* Composite pages through 3 shards merged over the wire, concatenated,
 * against every (kw, num histogram) pair counted from the documents. */
static void
test_composite_paging(void)
{
	static ckey model[NDOCS * 3];
	size_t nm = 0;
	for (int i = 0; i < NDOCS; i++) {
		const mdoc *d = &docs[i];
		if (!selected(d) || !d->has_num)
			continue;
		int64_t bk = (int64_t)floor((double)d->num / 100.0) * 100;
		for (int k = 0; k < (d->nkw ? d->nkw : 1); k++) {
			const char *kw = d->nkw ? d->kw[k] : NULL;
			size_t j = 0;
			for (; j < nm; j++)
				if (model[j].bucket == bk && (kw && model[j].kw ? !strcmp(kw, model[j].kw)
				                                                 : kw == model[j].kw))
					break;
			if (j == nm)
				model[nm++] = (ckey){kw, bk, 0};
			model[j].count++;
		}
	}
	qsort(model, nm, sizeof *model, ckey_cmp);
	size_t seen = 0;
	char after[256] = "";
	const int order[NSHARDS] = {2, 0, 1};
	for (int page = 0; page < 1000; page++) {
		char spec[1024];
		snprintf(spec, sizeof spec,
		         "{\"c\":{\"composite\":{\"size\":13,%s\"sources\":["
		         "{\"kw\":{\"terms\":{\"field\":\"kw\",\"missing_bucket\":true}}},"
		         "{\"h\":{\"histogram\":{\"field\":\"num\",\"interval\":100,\"order\":\"desc\"}}}]}}}",
		         after);
		sr_agg *a = parse_aggs(spec);
		cJSON *j = run_merged(a, order, true);
		const cJSON *c = cJSON_GetObjectItem(j, "c");
		const cJSON *bs = cJSON_GetObjectItem(c, "buckets");
		int n = cJSON_GetArraySize(bs);
		for (int i = 0; i < n; i++, seen++) {
			const cJSON *b = cJSON_GetArrayItem(bs, i);
			const cJSON *key = cJSON_GetObjectItem(b, "key");
			const cJSON *kw = cJSON_GetObjectItem(key, "kw");
			double h = cJSON_GetObjectItem(key, "h")->valuedouble;
			uint64_t cnt = (uint64_t)cJSON_GetObjectItem(b, "doc_count")->valuedouble;
			REQUIRE(seen < nm);
			const ckey *m = &model[seen];
			CHECKF((cJSON_IsNull(kw) ? !m->kw : m->kw && !strcmp(kw->valuestring, m->kw)) &&
			           h == (double)m->bucket && cnt == m->count,
			       "bucket %zu: got %s/%g/%llu, want %s/%lld/%llu", seen,
			       cJSON_IsNull(kw) ? "null" : kw->valuestring, h, (unsigned long long)cnt,
			       m->kw ? m->kw : "null", (long long)m->bucket,
			       (unsigned long long)m->count);
		}
		const cJSON *ak = cJSON_GetObjectItem(c, "after_key");
		if (n == 0) {
			CHECK(ak == NULL);
			cJSON_Delete(j);
			sr_agg_free(a);
			break;
		}
		char *aks = cJSON_PrintUnformatted(ak);
		snprintf(after, sizeof after, "\"after\":%s,", aks);
		free(aks);
		cJSON_Delete(j);
		sr_agg_free(a);
	}
	CHECKF(seen == nm, "saw %zu of %zu composite buckets", seen, nm);
}

/* The new kinds merge in any order and through the wire (with the
 * corruption rounds of run_merged) to what one state gives; global, rare
 * and weighted values against the model. */
static void
test_new_kinds_merge(void)
{
	sr_agg *a = parse_aggs(
	    "{\"g\":{\"global\":{},\"aggs\":{\"n\":{\"value_count\":{\"field\":\"uid\"}}}},"
	    "\"rt\":{\"rare_terms\":{\"field\":\"num\",\"max_doc_count\":2}},"
	    "\"w\":{\"weighted_avg\":{\"value\":{\"field\":\"num\"},\"weight\":{\"field\":\"uid\","
	    "\"missing\":1}}},"
	    "\"tm\":{\"top_metrics\":{\"metrics\":[{\"field\":\"num\"},{\"field\":\"dbl\"}],"
	    "\"sort\":{\"uid\":\"desc\"},\"size\":3}},"
	    "\"am\":{\"adjacency_matrix\":{\"filters\":{\"f\":{\"term\":{\"flag\":true}},"
	    "\"k\":{\"term\":{\"kw\":\"k39\"}}}},\"aggs\":{\"m\":{\"max\":{\"field\":\"num\"}}}}}");
	cJSON *single = run_single(a);
	static const int orders[][NSHARDS] = {{0, 1, 2}, {2, 0, 1}};
	for (int o = 0; o < 2; o++)
		for (int wire = 0; wire < 2; wire++) {
			cJSON *m = run_merged(a, orders[o], wire);
			char where[256] = "";
			CHECKF(json_close(single, m, 1e-9, where, sizeof where), "order %d wire %d: %s", o,
			       wire, where);
			cJSON_Delete(m);
		}
	uint64_t live = 0, cnt[1000] = {0};
	double num = 0, den = 0;
	for (int i = 0; i < NDOCS; i++) {
		const mdoc *d = &docs[i];
		if (d->deleted)
			continue;
		live++;
		if (!selected(d) || !d->has_num)
			continue;
		cnt[d->num + 100]++;
		num += (double)d->num * (double)d->uid;
		den += (double)d->uid;
	}
	CHECK((uint64_t)jget(single, "g.doc_count")->valuedouble == live);
	CHECK((uint64_t)jget(single, "g.n.value")->valuedouble == live);
	CHECK(fabs(jget(single, "w.value")->valuedouble - num / den) < 1e-9 * fabs(num / den));
	/* rare_terms: by count, then key */
	const cJSON *b = jget(single, "rt.buckets")->child;
	for (uint64_t c = 1; c <= 2; c++)
		for (int v = 0; v < 1000; v++)
			if (cnt[v] == c) {
				CHECKF(b && (int)b->child->valuedouble == v - 100 &&
				           (uint64_t)jget(b, "doc_count")->valuedouble == c,
				       "rare term %d", v - 100);
				b = b ? b->next : NULL;
			}
	CHECK(b == NULL);
	cJSON_Delete(single);
	sr_agg_free(a);

	/* percentile_ranks: approximate, within a point of the true share */
	a = parse_aggs("{\"pr\":{\"percentile_ranks\":{\"field\":\"num\",\"values\":[0,450]}}}");
	int order[NSHARDS] = {2, 1, 0};
	cJSON *m = run_merged(a, order, true);
	uint64_t below[2] = {0, 0}, all = 0;
	for (int i = 0; i < NDOCS; i++)
		if (selected(&docs[i]) && docs[i].has_num) {
			all++;
			below[0] += docs[i].num < 0;
			below[1] += docs[i].num < 450;
		}
	const cJSON *pv = jget(m, "pr.values");
	const char *keys[2] = {"0.0", "450.0"};
	for (int i = 0; i < 2; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(pv, keys[i]);
		double want = 100.0 * (double)below[i] / (double)all;
		CHECKF(cJSON_IsNumber(v) && fabs(v->valuedouble - want) < 1.0, "rank of %s: want %g",
		       keys[i], want);
	}
	cJSON_Delete(m);
	sr_agg_free(a);
}

/* significant_terms in one state (the whole index as one shard) against
 * the model: JLH over the selected docs and every live doc. */
static void
test_significant_terms(void)
{
	sr_agg *a = parse_aggs("{\"s\":{\"significant_terms\":{\"field\":\"kw\",\"min_doc_count\":1,"
	                       "\"size\":5}}}");
	cJSON *j = run_single(a);
	uint64_t fg[NKW] = {0}, bg[NKW] = {0}, sub = 0, sup = 0;
	for (int i = 0; i < NDOCS; i++) {
		const mdoc *d = &docs[i];
		if (d->deleted)
			continue;
		sup++;
		bool sel = selected(d);
		sub += sel;
		for (int k = 0; k < d->nkw; k++) {
			int t = atoi(d->kw[k] + 1);
			bg[t]++;
			fg[t] += sel;
		}
	}
	double score[NKW];
	int order[NKW], n = 0;
	for (int t = 0; t < NKW; t++) {
		double x = fg[t] ? (double)fg[t] / (double)sub : 0, y = (double)bg[t] / (double)sup;
		score[t] = fg[t] && x > y ? (x - y) * (x / y) : 0;
		if (score[t] > 0)
			order[n++] = t;
	}
	for (int i = 1; i < n; i++) /* by score desc, then key */
		for (int k = i; k > 0 && (score[order[k]] > score[order[k - 1]]); k--) {
			int t = order[k];
			order[k] = order[k - 1];
			order[k - 1] = t;
		}
	CHECK((uint64_t)jnum(j, "s.doc_count") == sub && (uint64_t)jnum(j, "s.bg_count") == sup);
	const cJSON *b = jget(j, "s.buckets")->child;
	for (int i = 0; i < n && i < 5; i++, b = b ? b->next : NULL) {
		char key[8];
		snprintf(key, sizeof key, "k%02d", order[i]);
		CHECKF(b && !strcmp(jget(b, "key")->valuestring, key) &&
		           (uint64_t)jnum(b, "doc_count") == fg[order[i]] &&
		           (uint64_t)jnum(b, "bg_count") == bg[order[i]] &&
		           close_rel(jnum(b, "score"), score[order[i]], 1e-12),
		       "significant term %d: want %s", i, key);
	}
	CHECK(b == NULL);
	cJSON_Delete(j);
	/* through the wire (and its corruption rounds): sizes add up */
	int ord[NSHARDS] = {1, 2, 0};
	j = run_merged(a, ord, true);
	CHECK((uint64_t)jnum(j, "s.doc_count") == sub && (uint64_t)jnum(j, "s.bg_count") == sup);
	cJSON_Delete(j);
	sr_agg_free(a);
}

/* The aggregations added with typed_keys: a merge of shard states (also
 * through the wire) renders what one state of every doc renders, where
 * the result does not depend on how docs are spread (auto_date_histogram
 * by construction; grids, multi_terms and variable_width_histogram when
 * no shard cuts or clusters anything away). */
static void
test_extra_kinds_merge(void)
{
	static const char *const specs[] = {
	    "{\"h\":{\"auto_date_histogram\":{\"field\":\"dt\",\"buckets\":7},"
	    "\"aggs\":{\"t\":{\"terms\":{\"field\":\"kw\",\"size\":100,\"shard_size\":1000}},"
	    "\"s\":{\"sum\":{\"field\":\"num\"}}}}}",
	    "{\"h\":{\"auto_date_histogram\":{\"field\":\"dt\",\"buckets\":50}}}",
	    "{\"h\":{\"auto_date_histogram\":{\"field\":\"dt\",\"buckets\":400}}}",
	    "{\"h\":{\"auto_date_histogram\":{\"field\":\"dt\",\"buckets\":3,"
	    "\"minimum_interval\":\"month\"}}}",
	    "{\"m\":{\"multi_terms\":{\"terms\":[{\"field\":\"kw\"},{\"field\":\"flag\"}],"
	    "\"size\":1000,\"shard_size\":100000},\"aggs\":{\"a\":{\"avg\":{\"field\":"
	    "\"num\"}}}}}",
	    "{\"m\":{\"multi_terms\":{\"terms\":[{\"field\":\"flag\"},{\"field\":\"num\","
	    "\"missing\":-1}],\"size\":100000,\"order\":{\"_key\":\"desc\"}}}}",
	    "{\"v\":{\"variable_width_histogram\":{\"field\":\"num\",\"buckets\":6,"
	    "\"shard_size\":5000,\"initial_buffer\":50000},\"aggs\":{\"c\":{\"value_count\":"
	    "{\"field\":\"kw\"}}}}}",
	};
	int orders[2][NSHARDS] = {{0, 1, 2}, {2, 0, 1}};
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		sr_agg *a = parse_aggs(specs[i]);
		cJSON *one = run_single(a);
		for (int o = 0; o < 2; o++) {
			cJSON *m = run_merged(a, orders[o], o == 1);
			CHECKF(cJSON_Compare(one, m, true), "merged differs for %s", specs[i]);
			cJSON_Delete(m);
		}
		cJSON_Delete(one);
		sr_agg_free(a);
	}
	/* auto_date_histogram: the interval is ES's and the buckets fit */
	sr_agg *a = parse_aggs("{\"h\":{\"auto_date_histogram\":{\"field\":\"dt\","
	                       "\"buckets\":10}}}");
	cJSON *j = run_single(a);
	/* two years of dates: months (24) do not fit 10 but merge by 3 into 8 */
	CHECK(!strcmp(jget(j, "h.interval")->valuestring, "3M"));
	CHECK(cJSON_GetArraySize(jget(j, "h.buckets")) == 8);
	cJSON_Delete(j);
	sr_agg_free(a);
	/* variable_width_histogram: buckets never overlap and hold every doc */
	a = parse_aggs("{\"v\":{\"variable_width_histogram\":{\"field\":\"dbl\","
	               "\"buckets\":8,\"shard_size\":20,\"initial_buffer\":40}}}");
	int ord[NSHARDS] = {1, 0, 2};
	j = run_merged(a, ord, true);
	const cJSON *bl = jget(j, "v.buckets");
	CHECK(cJSON_GetArraySize(bl) == 8);
	double prev_max = -INFINITY, total = 0;
	for (const cJSON *b = bl ? bl->child : NULL; b; b = b->next) {
		CHECK(jnum(b, "min") >= prev_max && jnum(b, "min") <= jnum(b, "key") &&
		      jnum(b, "key") <= jnum(b, "max"));
		prev_max = jnum(b, "max");
		total += jnum(b, "doc_count");
	}
	double want = 0;
	for (int d = 0; d < NDOCS; d++)
		want += selected(&docs[d]) && docs[d].ndbl > 0;
	CHECK(total >= want && total <= 2 * want); /* two values may fall in two buckets */
	cJSON_Delete(j);
	sr_agg_free(a);
	/* typed_keys: names carry the types, to any depth */
	a = parse_aggs("{\"m\":{\"multi_terms\":{\"terms\":[{\"field\":\"kw\"},"
	               "{\"field\":\"flag\"}]},\"aggs\":{\"p\":{\"percentiles\":{\"field\":"
	               "\"num\"}},\"d\":{\"terms\":{\"field\":\"dbl\"}}}},"
	               "\"g\":{\"global\":{},\"aggs\":{\"t\":{\"terms\":{\"field\":\"num\"}}}}}");
	sr_agg_state *st = sr_agg_state_new(a);
	for (int s = 0; s < NSHARDS; s++)
		REQUIRE(collect_shard(s, st) == CM_OK);
	cm_buf out;
	cm_buf_init(&out, CM_MEM_SEARCH);
	cm_error err;
	cm_error_clear(&err);
	REQUIRE(sr_agg_render_typed(st, &out, true, &err) == CM_OK);
	j = cJSON_ParseWithLength((const char *)out.data, out.len);
	REQUIRE(j != NULL);
	const cJSON *mb = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "multi_terms#m"), "buckets");
	CHECK(mb && mb->child && cJSON_GetObjectItem(mb->child, "tdigest_percentiles#p") &&
	      cJSON_GetObjectItem(mb->child, "dterms#d"));
	CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "global#g"), "lterms#t") != NULL);
	cJSON_Delete(j);
	cm_buf_free(&out);
	sr_agg_state_free(st);
	sr_agg_free(a);
}

int
main(void)
{
	build_shards();
	test_hll_tdigest();
	test_terms_kw();
	test_terms_numeric();
	test_histogram();
	test_date_histogram();
	test_ranges_filters_missing();
	test_metrics();
	test_top_hits_and_depth();
	test_merge_orders();
	test_terms_zero();
	test_terms_one_segment();
	test_terms_dense_direct();
	test_errors();
	test_moving_functions();
	test_pipeline_paths();
	test_composite_paging();
	test_new_kinds_merge();
	test_significant_terms();
	test_extra_kinds_merge();
	for (int s = 0; s < NSHARDS; s++)
		st_shard_close(shards[s]);
	st_mapping_unref(mapping);
	cm_rm_rf(tmpdir);
	return check_report("agg_test");
}
