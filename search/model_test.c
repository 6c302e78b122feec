/* Query execution against a brute-force model: a random corpus (text,
 * keyword, long, double, date, boolean, multi-values, missing values,
 * updates and deletes, several segments) and thousands of random query
 * trees of every type and nesting. Checks exact counts, hit sets, field
 * sorted orders with pagination and search_after, that block-max top-k
 * equals exhaustive top-k, and all of it again after a force merge to one
 * segment. */
#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/cm_alloc.h"
#include "common/cm_sys.h"
#include "search/sr.h"
#include "storage/st_shard.h"

#define NDOCS 2000
#define NVOCAB 48
#define NKW 24
#ifndef NQUERIES
#define NQUERIES 5200
#endif
#define MAXTOK 14
#define DAY 86400000LL
#define T0 1577836800000LL /* 2020-01-01 */

typedef struct mdoc {
	bool live;
	int ntok, tok[MAXTOK];
	int nk, k[3];
	int nl;
	int64_t l[3]; /* ascending */
	bool hasf;
	double f;
	bool hasdt;
	int64_t dt;
	int b; /* -1 missing */
	int64_t u;
} mdoc;

static mdoc M[NDOCS];
static char vocab[NVOCAB][8];
static char kws[NKW][8];
static st_shard *shard;
static st_reader *reader;
static int64_t next_u = 1;

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t
rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return rs;
}
static int
rn(int n)
{
	return (int)(rnd() % (uint64_t)n);
}

static void
make_word(char *w, int minlen, int maxlen, const char *alpha)
{
	int n = minlen + rn(maxlen - minlen + 1), na = (int)strlen(alpha);
	for (int i = 0; i < n; i++)
		w[i] = alpha[rn(na)];
	w[n] = 0;
}

static void
make_vocab(void)
{
	for (int i = 0; i < NVOCAB; i++) {
	again:
		make_word(vocab[i], 2, 6, "abcdefg");
		for (int j = 0; j < i; j++)
			if (!strcmp(vocab[i], vocab[j]))
				goto again;
	}
	for (int i = 0; i < NKW; i++) {
	again2:
		make_word(kws[i], 1, 4, "pqrsXY");
		for (int j = 0; j < i; j++)
			if (!strcmp(kws[i], kws[j]))
				goto again2;
	}
}

/* Zipf-ish pick */
static int
zipf(int n)
{
	int a = rn(n), b = rn(n);
	return a < b ? a : b;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void
random_doc(mdoc *d)
{
	memset(d, 0, sizeof *d);
	d->live = true;
	d->ntok = rn(MAXTOK + 1);
	for (int i = 0; i < d->ntok; i++)
		d->tok[i] = zipf(NVOCAB);
	d->nk = rn(4);
	for (int i = 0; i < d->nk; i++)
		d->k[i] = zipf(NKW);
	d->nl = rn(10) < 2 ? 0 : rn(10) < 7 ? 1 : 1 + rn(3);
	for (int i = 0; i < d->nl; i++)
		d->l[i] = rn(101) - 50;
	qsort(d->l, d->nl, sizeof(int64_t), cmp_i64);
	d->hasf = rn(4) != 0;
	if (d->hasf) {
		char buf[32];
		snprintf(buf, sizeof buf, "%.2f", (rn(20001) - 10000) / 100.0);
		d->f = strtod(buf, NULL);
	}
	d->hasdt = rn(5) != 0;
	if (d->hasdt)
		d->dt = T0 + (int64_t)rn(120) * DAY + (int64_t)rn(86400) * 1000;
	d->b = rn(3) - 1;
	d->u = next_u++;
}

static char *
doc_json(const mdoc *d)
{
	cJSON *o = cJSON_CreateObject();
	char text[MAXTOK * 8 + 1] = "";
	for (int i = 0; i < d->ntok; i++) {
		if (i)
			strcat(text, " ");
		strcat(text, vocab[d->tok[i]]);
	}
	if (d->ntok)
		cJSON_AddStringToObject(o, "t", text);
	if (d->nk == 1)
		cJSON_AddStringToObject(o, "k", kws[d->k[0]]);
	else if (d->nk > 1) {
		cJSON *a = cJSON_AddArrayToObject(o, "k");
		for (int i = 0; i < d->nk; i++)
			cJSON_AddItemToArray(a, cJSON_CreateString(kws[d->k[i]]));
	}
	if (d->nl == 1)
		cJSON_AddNumberToObject(o, "l", (double)d->l[0]);
	else if (d->nl > 1) {
		cJSON *a = cJSON_AddArrayToObject(o, "l");
		for (int i = 0; i < d->nl; i++)
			cJSON_AddItemToArray(a, cJSON_CreateNumber((double)d->l[i]));
	}
	if (d->hasf)
		cJSON_AddNumberToObject(o, "f", d->f);
	if (d->hasdt) {
		char buf[40];
		st_date_format(d->dt, buf, sizeof buf);
		cJSON_AddStringToObject(o, "dt", buf);
	}
	if (d->b >= 0)
		cJSON_AddBoolToObject(o, "b", d->b);
	cJSON_AddNumberToObject(o, "u", (double)d->u);
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return s;
}

/* Ops are applied in batches: each batch is one durable log write. */
#define OPBATCH 100
static st_op pend[OPBATCH];
static char *pend_src[OPBATCH];
static char pend_id[OPBATCH][16];
static int npend;

static void
flush_ops(void)
{
	if (!npend)
		return;
	st_op_result res[OPBATCH];
	REQUIRE(st_shard_apply(shard, pend, npend, res) == CM_OK);
	for (int i = 0; i < npend; i++) {
		REQUIRE(res[i].err == CM_OK);
		free(pend_src[i]);
	}
	npend = 0;
}

static void
apply_doc(int id, bool del)
{
	int i = npend++;
	snprintf(pend_id[i], sizeof pend_id[i], "%d", id);
	pend_src[i] = del ? NULL : doc_json(&M[id]);
	st_op *op = &pend[i];
	memset(op, 0, sizeof *op);
	op->type = del ? ST_OP_DELETE : ST_OP_INDEX;
	op->id = pend_id[i];
	op->id_len = strlen(pend_id[i]);
	op->source = pend_src[i];
	op->source_len = pend_src[i] ? strlen(pend_src[i]) : 0;
	op->seq_no = ST_NO_SEQ;
	op->if_seq_no = ST_NO_SEQ;
	if (npend == OPBATCH)
		flush_ops();
}

static void
refresh(void)
{
	flush_ops();
	REQUIRE(st_shard_refresh(shard) == CM_OK);
}

static void
build(const char *dir)
{
	const char *mj = "{\"properties\":{\"t\":{\"type\":\"text\"},\"k\":{\"type\":\"keyword\"},"
	                 "\"l\":{\"type\":\"long\"},\"f\":{\"type\":\"double\"},"
	                 "\"dt\":{\"type\":\"date\"},\"b\":{\"type\":\"boolean\"},"
	                 "\"u\":{\"type\":\"long\"}}}";
	cJSON *j = cJSON_Parse(mj);
	st_mapping *m = NULL;
	cm_error err = {0};
	REQUIRE(st_mapping_from_json(j, &m, &err) == CM_OK);
	cJSON_Delete(j);
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.background_merges = false;
	cm_rm_rf(dir);
	REQUIRE(st_shard_open(dir, m, &o, &shard, &err) == CM_OK);
	st_mapping_unref(m);
	for (int i = 0; i < NDOCS; i++) {
		random_doc(&M[i]);
		apply_doc(i, false);
		if (i % 450 == 449)
			refresh();
	}
	/* updates and deletes across segments */
	for (int n = 0; n < NDOCS / 8; n++) {
		int id = rn(NDOCS);
		if (rn(2)) {
			M[id].live = false;
			apply_doc(id, true);
		} else {
			random_doc(&M[id]);
			apply_doc(id, false);
		}
		if (n % 150 == 149)
			refresh();
	}
	refresh();
	reader = st_shard_reader(shard);
}

/* ---- model evaluation ---- */

static bool
has_tok(const mdoc *d, const char *w)
{
	for (int i = 0; i < d->ntok; i++)
		if (!strcmp(vocab[d->tok[i]], w))
			return true;
	return false;
}

static int
osa(const char *a, const char *b)
{
	int n = (int)strlen(a), m = (int)strlen(b);
	int D[16][16];
	for (int i = 0; i <= n; i++)
		D[i][0] = i;
	for (int j = 0; j <= m; j++)
		D[0][j] = j;
	for (int i = 1; i <= n; i++)
		for (int j = 1; j <= m; j++) {
			int c = a[i - 1] != b[j - 1];
			int v = D[i - 1][j] + 1;
			if (D[i][j - 1] + 1 < v)
				v = D[i][j - 1] + 1;
			if (D[i - 1][j - 1] + c < v)
				v = D[i - 1][j - 1] + c;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    D[i - 2][j - 2] + 1 < v)
				v = D[i - 2][j - 2] + 1;
			D[i][j] = v;
		}
	return D[n][m];
}

static int
msm_of(const char *spec, int n)
{
	if (!spec)
		return 0;
	int len = (int)strlen(spec), r;
	if (spec[len - 1] == '%') {
		int p = atoi(spec);
		float calc = (float)(n * p) * (1 / 100.0f);
		r = calc < 0 ? n + (int)calc : (int)calc;
	} else {
		int v = atoi(spec);
		r = v < 0 ? n + v : v;
	}
	return r < 0 ? 0 : r;
}

static int64_t
day_of(const char *s)
{
	int y, mo, d;
	sscanf(s, "%d-%d-%d", &y, &mo, &d);
	/* only 2020 dates are generated */
	static const int cum[] = {0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335};
	return T0 + (int64_t)(cum[mo - 1] + d - 1) * DAY;
}

static bool eval(const sr_query *q, const mdoc *d, int id);

static bool
eval_range_l(const sr_query *q, int64_t v)
{
	if (q->gte && !(v >= atoll(q->gte)))
		return false;
	if (q->gt && !(v > atoll(q->gt)))
		return false;
	if (q->lte && !(v <= atoll(q->lte)))
		return false;
	if (q->lt && !(v < atoll(q->lt)))
		return false;
	return true;
}

static bool
eval_range_s(const sr_query *q, const char *v)
{
	if (q->gte && !(strcmp(v, q->gte) >= 0))
		return false;
	if (q->gt && !(strcmp(v, q->gt) > 0))
		return false;
	if (q->lte && !(strcmp(v, q->lte) <= 0))
		return false;
	if (q->lt && !(strcmp(v, q->lt) < 0))
		return false;
	return true;
}

static bool
eval_leaf(const sr_query *q, const mdoc *d, int id)
{
	const char *f = q->field;
	switch (q->kind) {
	case SR_Q_MATCH_ALL:
		return true;
	case SR_Q_MATCH_NONE:
		return false;
	case SR_Q_IDS:
		for (size_t i = 0; i < q->nvalues; i++)
			if (atoi(q->values[i]) == id)
				return true;
		return false;
	case SR_Q_TERM:
	case SR_Q_TERMS: {
		size_t n = q->kind == SR_Q_TERM ? 1 : q->nvalues;
		for (size_t i = 0; i < n; i++) {
			const char *v = q->kind == SR_Q_TERM ? q->value : q->values[i];
			if (!strcmp(f, "t") && has_tok(d, v))
				return true;
			if (!strcmp(f, "k"))
				for (int j = 0; j < d->nk; j++)
					if (!strcmp(kws[d->k[j]], v))
						return true;
			if (!strcmp(f, "l"))
				for (int j = 0; j < d->nl; j++)
					if (d->l[j] == atoll(v))
						return true;
			if (!strcmp(f, "b") && d->b >= 0 && d->b == !strcmp(v, "true"))
				return true;
		}
		return false;
	}
	case SR_Q_EXISTS:
		if (!strcmp(f, "t"))
			return d->ntok > 0;
		if (!strcmp(f, "k"))
			return d->nk > 0;
		if (!strcmp(f, "l"))
			return d->nl > 0;
		if (!strcmp(f, "f"))
			return d->hasf;
		if (!strcmp(f, "dt"))
			return d->hasdt;
		return d->b >= 0;
	case SR_Q_RANGE:
		if (!strcmp(f, "l")) {
			for (int j = 0; j < d->nl; j++)
				if (eval_range_l(q, d->l[j]))
					return true;
			return false;
		}
		if (!strcmp(f, "f")) {
			if (!d->hasf)
				return false;
			double v = d->f;
			return (!q->gte || v >= atof(q->gte)) && (!q->gt || v > atof(q->gt)) &&
			       (!q->lte || v <= atof(q->lte)) && (!q->lt || v < atof(q->lt));
		}
		if (!strcmp(f, "dt")) {
			if (!d->hasdt)
				return false;
			int64_t v = d->dt;
			return (!q->gte || v >= day_of(q->gte)) && (!q->gt || v >= day_of(q->gt) + DAY) &&
			       (!q->lte || v < day_of(q->lte) + DAY) && (!q->lt || v < day_of(q->lt));
		}
		for (int j = 0; j < d->nk; j++)
			if (eval_range_s(q, kws[d->k[j]]))
				return true;
		return false;
	case SR_Q_PREFIX:
	case SR_Q_WILDCARD:
	case SR_Q_REGEXP:
	case SR_Q_FUZZY: {
		static regex_t re;
		static char re_for[64];
		if (q->kind == SR_Q_REGEXP && strcmp(re_for, q->value)) {
			char pat[128];
			if (re_for[0])
				regfree(&re);
			snprintf(pat, sizeof pat, "^(%s)$", q->value);
			REQUIRE(regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) == 0);
			snprintf(re_for, sizeof re_for, "%s", q->value);
		}
		bool hit = false;
		int n = !strcmp(f, "t") ? d->ntok : d->nk;
		for (int j = 0; j < n && !hit; j++) {
			const char *w = !strcmp(f, "t") ? vocab[d->tok[j]] : kws[d->k[j]];
			if (q->kind == SR_Q_PREFIX)
				hit = !strncmp(w, q->value, strlen(q->value));
			else if (q->kind == SR_Q_WILDCARD)
				hit = fnmatch(q->value, w, 0) == 0;
			else if (q->kind == SR_Q_REGEXP)
				hit = regexec(&re, w, 0, NULL, 0) == 0;
			else {
				int e = atoi(q->fuzziness);
				hit = !strncmp(w, q->value, q->prefix_length) && osa(w, q->value) <= e;
			}
		}
		return hit;
	}
	case SR_Q_MATCH: {
		/* whitespace-separated lower-case words */
		char buf[128];
		snprintf(buf, sizeof buf, "%s", q->value);
		int n = 0, c = 0;
		for (char *save, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
			n++;
			c += has_tok(d, w);
		}
		if (q->op_and)
			return c == n;
		if (n == 1)
			return c == 1; /* one term: a term query, minimum_should_match does not apply */
		int msm = msm_of(q->minimum_should_match, n);
		if (msm < 1)
			msm = 1;
		return c >= msm;
	}
	case SR_Q_MATCH_PHRASE: {
		char buf[128];
		snprintf(buf, sizeof buf, "%s", q->value);
		char *w[8];
		int n = 0;
		for (char *save, *x = strtok_r(buf, " ", &save); x && n < 8; x = strtok_r(NULL, " ", &save))
			w[n++] = x;
		for (int s = 0; s + n <= d->ntok; s++) {
			int k = 0;
			while (k < n && !strcmp(vocab[d->tok[s + k]], w[k]))
				k++;
			if (k == n)
				return true;
		}
		return false;
	}
	case SR_Q_MULTI_MATCH: {
		if (has_tok(d, q->value))
			return true;
		for (int j = 0; j < d->nk; j++)
			if (!strcmp(kws[d->k[j]], q->value))
				return true;
		return false;
	}
	case SR_Q_MATCH_PHRASE_PREFIX: {
		char buf[64];
		snprintf(buf, sizeof buf, "%s", q->value);
		char *sp = strchr(buf, ' ');
		if (!sp) {
			for (int j = 0; j < d->ntok; j++)
				if (!strncmp(vocab[d->tok[j]], buf, strlen(buf)))
					return true;
			return false;
		}
		*sp = 0;
		const char *pre = sp + 1;
		for (int j = 0; j + 1 < d->ntok; j++)
			if (!strcmp(vocab[d->tok[j]], buf) && !strncmp(vocab[d->tok[j + 1]], pre, strlen(pre)))
				return true;
		return false;
	}
	case SR_Q_QUERY_STRING: {
		char buf[64];
		snprintf(buf, sizeof buf, "%s", q->value);
		char *sp = strchr(buf, ' ');
		*sp = 0;
		bool a = has_tok(d, buf), b = has_tok(d, sp + 1);
		return q->default_op_and ? a && b : a || b;
	}
	default:
		return false;
	}
}

static bool
eval(const sr_query *q, const mdoc *d, int id)
{
	switch (q->kind) {
	case SR_Q_BOOL: {
		for (size_t i = 0; i < q->nmust; i++)
			if (!eval(q->must[i], d, id))
				return false;
		for (size_t i = 0; i < q->nfilter; i++)
			if (!eval(q->filter[i], d, id))
				return false;
		for (size_t i = 0; i < q->nmust_not; i++)
			if (eval(q->must_not[i], d, id))
				return false;
		int c = 0;
		for (size_t i = 0; i < q->nshould; i++)
			c += eval(q->should[i], d, id);
		int msm = q->minimum_should_match ? msm_of(q->minimum_should_match, (int)q->nshould)
		          : (!q->nmust && !q->nfilter && q->nshould) ? 1
		                                                     : 0;
		if (q->nshould && !q->nmust && !q->nfilter && msm < 1)
			msm = 1;
		return c >= msm;
	}
	case SR_Q_CONSTANT_SCORE:
		return eval(q->inner, d, id);
	case SR_Q_BOOSTING:
		return eval(q->inner, d, id);
	case SR_Q_DIS_MAX:
		for (size_t i = 0; i < q->nqueries; i++)
			if (eval(q->queries[i], d, id))
				return true;
		return false;
	default:
		return eval_leaf(q, d, id);
	}
}

/* ---- query generation ---- */

static char *
S(const char *s)
{
	return cm_strdup(CM_MEM_SEARCH, s);
}

static char *
Sfmt(const char *fmt, long long v)
{
	char b[64];
	snprintf(b, sizeof b, fmt, v);
	return S(b);
}

static const char *num_fields[] = {"l", "f", "dt", "k"};

static sr_query *
gen_leaf(void)
{
	sr_query *q;
	int kind = rn(18);
	switch (kind) {
	case 0:
		q = sr_query_new(rn(6) ? SR_Q_TERM : SR_Q_MATCH_ALL);
		if (q->kind == SR_Q_TERM) {
			q->field = S("t");
			q->value = S(vocab[zipf(NVOCAB)]);
		}
		return q;
	case 1: {
		q = sr_query_new(SR_Q_TERM);
		int f = rn(3);
		q->field = S(f == 0 ? "k" : f == 1 ? "l" : "b");
		q->value = f == 0 ? S(kws[zipf(NKW)]) : f == 1 ? Sfmt("%lld", rn(101) - 50)
		                                               : S(rn(2) ? "true" : "false");
		return q;
	}
	case 2: {
		q = sr_query_new(SR_Q_TERMS);
		bool kw = rn(2);
		q->field = S(kw ? "k" : rn(2) ? "t" : "l");
		q->nvalues = 1 + rn(4);
		q->values = cm_calloc(CM_MEM_SEARCH, q->nvalues, sizeof(char *));
		for (size_t i = 0; i < q->nvalues; i++)
			q->values[i] = !strcmp(q->field, "k")   ? S(kws[rn(NKW)])
			               : !strcmp(q->field, "t") ? S(vocab[rn(NVOCAB)])
			                                        : Sfmt("%lld", rn(101) - 50);
		return q;
	}
	case 3:
	case 4: {
		q = sr_query_new(SR_Q_RANGE);
		const char *f = num_fields[rn(4)];
		q->field = S(f);
		for (int side = 0; side < 2; side++) {
			if (rn(4) == 0)
				continue;
			char *v;
			if (!strcmp(f, "l"))
				v = Sfmt("%lld", rn(101) - 50);
			else if (!strcmp(f, "f"))
				v = Sfmt("%lld.5", rn(200) - 100);
			else if (!strcmp(f, "dt")) {
				char b[32];
				int day = rn(120), mo = 1, dd = day;
				static const int ml[] = {31, 29, 31, 30, 31};
				while (dd >= ml[mo - 1]) {
					dd -= ml[mo - 1];
					mo++;
				}
				snprintf(b, sizeof b, "2020-%02d-%02d", mo, dd + 1);
				v = S(b);
			} else
				v = S(kws[rn(NKW)]);
			bool incl = rn(2);
			if (side == 0) {
				if (incl)
					q->gte = v;
				else
					q->gt = v;
			} else {
				if (incl)
					q->lte = v;
				else
					q->lt = v;
			}
		}
		return q;
	}
	case 5: {
		q = sr_query_new(SR_Q_EXISTS);
		static const char *fs[] = {"t", "k", "l", "f", "dt", "b"};
		q->field = S(fs[rn(6)]);
		return q;
	}
	case 6: {
		q = sr_query_new(SR_Q_PREFIX);
		bool t = rn(2);
		q->field = S(t ? "t" : "k");
		char w[8];
		snprintf(w, sizeof w, "%s", t ? vocab[rn(NVOCAB)] : kws[rn(NKW)]);
		w[1 + rn(2)] = 0;
		q->value = S(w);
		return q;
	}
	case 7: {
		q = sr_query_new(SR_Q_WILDCARD);
		q->field = S("t");
		char w[16];
		snprintf(w, sizeof w, "%s", vocab[rn(NVOCAB)]);
		size_t n = strlen(w);
		w[rn((int)n)] = '?';
		if (rn(2))
			strcpy(w + rn((int)n), "*");
		q->value = S(w);
		return q;
	}
	case 8: {
		static const char *pats[] = {"[a-c]b.*", "a(b|c)+d?", "..", "[^a]c{1,2}.*", "(ab|cd)*e?",
		                             ".*g",      "d.{2,3}",   "[efg]+", "b[a-d]?c.*", "(a|b|c)(d|e)"};
		q = sr_query_new(SR_Q_REGEXP);
		q->field = S("t");
		q->value = S(pats[rn(10)]);
		return q;
	}
	case 9: {
		q = sr_query_new(SR_Q_FUZZY);
		q->field = S("t");
		char w[16];
		snprintf(w, sizeof w, "%s", vocab[rn(NVOCAB)]);
		size_t n = strlen(w);
		w[rn((int)n)] = "abcdefg"[rn(7)];
		if (rn(2) && n > 2) {
			char c = w[0];
			w[0] = w[1];
			w[1] = c;
		}
		q->value = S(w);
		q->fuzziness = Sfmt("%lld", 1 + rn(2));
		q->prefix_length = rn(2);
		q->max_expansions = 1000;
		return q;
	}
	case 10:
	case 11: {
		q = sr_query_new(SR_Q_MATCH);
		q->field = S("t");
		char b[64] = "";
		int n = 1 + rn(3);
		for (int i = 0; i < n; i++) {
			strcat(b, i ? " " : "");
			strcat(b, vocab[zipf(NVOCAB)]);
		}
		q->value = S(b);
		q->op_and = rn(3) == 0;
		static const char *msm[] = {NULL, "1", "2", "-1", "50%", "-34%"};
		if (!q->op_and && rn(2)) {
			const char *m = msm[rn(6)];
			q->minimum_should_match = m ? S(m) : NULL;
		}
		return q;
	}
	case 12: {
		q = sr_query_new(SR_Q_MATCH_PHRASE);
		q->field = S("t");
		const mdoc *d = &M[rn(NDOCS)];
		char b[64] = "";
		if (d->ntok >= 2) {
			int s = rn(d->ntok - 1), n = 2 + rn(2);
			if (s + n > d->ntok)
				n = d->ntok - s;
			for (int i = 0; i < n; i++) {
				strcat(b, i ? " " : "");
				strcat(b, vocab[d->tok[s + i]]);
			}
		} else {
			snprintf(b, sizeof b, "%s %s", vocab[0], vocab[1]);
		}
		q->value = S(b);
		return q;
	}
	case 13: {
		q = sr_query_new(SR_Q_IDS);
		q->nvalues = 1 + rn(5);
		q->values = cm_calloc(CM_MEM_SEARCH, q->nvalues, sizeof(char *));
		for (size_t i = 0; i < q->nvalues; i++)
			q->values[i] = Sfmt("%lld", rn(NDOCS));
		return q;
	}
	case 14: {
		q = sr_query_new(SR_Q_MULTI_MATCH);
		q->value = S(rn(2) ? vocab[zipf(NVOCAB)] : kws[zipf(NKW)]);
		q->nvalues = 2;
		q->values = cm_calloc(CM_MEM_SEARCH, 2, sizeof(char *));
		q->values[0] = S("t");
		q->values[1] = S("k^2");
		q->multi_type = S(rn(2) ? "best_fields" : "most_fields");
		return q;
	}
	case 15: {
		q = sr_query_new(SR_Q_MATCH_PHRASE_PREFIX);
		q->field = S("t");
		const mdoc *d = &M[rn(NDOCS)];
		char b[64];
		if (d->ntok >= 2) {
			int st = rn(d->ntok - 1);
			char last[8];
			snprintf(last, sizeof last, "%s", vocab[d->tok[st + 1]]);
			last[1 + rn((int)strlen(last))] = 0;
			snprintf(b, sizeof b, "%s %s", vocab[d->tok[st]], last);
		} else {
			snprintf(b, sizeof b, "%s", vocab[0]);
			b[1] = 0;
		}
		q->value = S(b);
		return q;
	}
	case 16: {
		q = sr_query_new(SR_Q_QUERY_STRING);
		char b[64];
		snprintf(b, sizeof b, "%s %s", vocab[zipf(NVOCAB)], vocab[zipf(NVOCAB)]);
		q->value = S(b);
		q->default_field = S("t");
		q->default_op_and = rn(2);
		return q;
	}
	default:
		q = sr_query_new(SR_Q_TERM);
		q->field = S("t");
		q->value = S(vocab[rn(NVOCAB)]);
		return q;
	}
}

static void
push(sr_query ***v, size_t *n, sr_query *q)
{
	*v = cm_realloc(CM_MEM_SEARCH, *v, (*n + 1) * sizeof(sr_query *));
	(*v)[(*n)++] = q;
}

static sr_query *
gen(int depth)
{
	if (depth <= 0 || rn(3) == 0)
		return gen_leaf();
	int k = rn(6);
	sr_query *q;
	if (k <= 2) {
		q = sr_query_new(SR_Q_BOOL);
		int nm = rn(3), ns = rn(4), nn = rn(2), nf = rn(2);
		for (int i = 0; i < nm; i++)
			push(&q->must, &q->nmust, gen(depth - 1));
		for (int i = 0; i < ns; i++)
			push(&q->should, &q->nshould, gen(depth - 1));
		for (int i = 0; i < nn; i++)
			push(&q->must_not, &q->nmust_not, gen(depth - 1));
		for (int i = 0; i < nf; i++)
			push(&q->filter, &q->nfilter, gen(depth - 1));
		if (ns && rn(3) == 0)
			q->minimum_should_match = Sfmt("%lld", rn(ns + 1));
		return q;
	}
	if (k == 3) {
		q = sr_query_new(SR_Q_CONSTANT_SCORE);
		q->inner = gen(depth - 1);
		q->boost = 2.0f;
		return q;
	}
	if (k == 4) {
		q = sr_query_new(SR_Q_DIS_MAX);
		int n = 1 + rn(3);
		for (int i = 0; i < n; i++)
			push(&q->queries, &q->nqueries, gen(depth - 1));
		q->tie_breaker = rn(2) ? 0.3f : 0.0f;
		return q;
	}
	q = sr_query_new(SR_Q_BOOSTING);
	q->inner = gen(depth - 1);
	q->negative = gen(depth - 1);
	q->negative_boost = 0.5f;
	return q;
}

/* ---- sorting in the model ---- */

typedef struct skey {
	int field; /* 0 l, 1 k, 2 f, 3 dt, 4 b, 5 u */
	bool desc, missing_first;
} skey;

static const char *sort_fields[] = {"l", "k", "f", "dt", "b", "u"};

/* value of key for doc; false if missing. Numbers in *v, keyword index in *s */
static bool
sval(const mdoc *d, const skey *k, double *v, const char **s)
{
	switch (k->field) {
	case 0:
		if (!d->nl)
			return false;
		*v = (double)(k->desc ? d->l[d->nl - 1] : d->l[0]);
		return true;
	case 1: {
		if (!d->nk)
			return false;
		const char *best = kws[d->k[0]];
		for (int i = 1; i < d->nk; i++) {
			int c = strcmp(kws[d->k[i]], best);
			if (k->desc ? c > 0 : c < 0)
				best = kws[d->k[i]];
		}
		*s = best;
		return true;
	}
	case 2:
		*v = d->f;
		return d->hasf;
	case 3:
		*v = (double)d->dt;
		return d->hasdt;
	case 4:
		*v = d->b;
		return d->b >= 0;
	default:
		*v = (double)d->u;
		return true;
	}
}

static skey g_keys[4];
static int g_nkeys;

static int
model_cmp(const void *a, const void *b)
{
	const mdoc *x = &M[*(const int *)a], *y = &M[*(const int *)b];
	for (int i = 0; i < g_nkeys; i++) {
		const skey *k = &g_keys[i];
		double vx = 0, vy = 0;
		const char *sx = NULL, *sy = NULL;
		bool hx = sval(x, k, &vx, &sx), hy = sval(y, k, &vy, &sy);
		if (!hx || !hy) {
			if (hx != hy)
				return (!hx ? -1 : 1) * (k->missing_first ? 1 : -1);
			continue;
		}
		int c = k->field == 1 ? strcmp(sx, sy) : (vx > vy) - (vx < vy);
		c = c < 0 ? -1 : c > 0;
		if (k->desc)
			c = -c;
		if (c)
			return c;
	}
	return 0;
}

/* ---- running ---- */

static uint64_t sig_before[NQUERIES];

static void
set_sort(sr_request *r)
{
	g_nkeys = 1 + rn(3);
	r->nsort = (size_t)g_nkeys;
	r->sort = cm_calloc(CM_MEM_SEARCH, r->nsort, sizeof(sr_sort_key));
	for (int i = 0; i < g_nkeys; i++) {
		skey *k = &g_keys[i];
		k->field = i == g_nkeys - 1 ? 5 : rn(5);
		k->desc = rn(2);
		k->missing_first = rn(4) == 0;
		r->sort[i].kind = SR_SORT_FIELD;
		r->sort[i].field = S(sort_fields[k->field]);
		r->sort[i].desc = k->desc;
		r->sort[i].missing_first = k->missing_first;
	}
}

static void
copy_after(sr_request *r, const sr_hit *h)
{
	for (size_t i = 0; i < r->nsearch_after; i++)
		sr_sort_value_clear(&r->search_after[i]);
	cm_free(CM_MEM_SEARCH, r->search_after);
	r->nsearch_after = h->nsort;
	r->search_after = cm_calloc(CM_MEM_SEARCH, h->nsort, sizeof(sr_sort_value));
	for (size_t i = 0; i < h->nsort; i++) {
		r->search_after[i] = h->sort[i];
		if (h->sort[i].s)
			r->search_after[i].s = S(h->sort[i].s);
	}
}

static int failures_reported;

static void
dump(const sr_query *q, int depth)
{
	fprintf(stderr, "%*s%s field=%s value=%s op_and=%d msm=%s fz=%s pl=%d gt=%s gte=%s lt=%s lte=%s",
	        depth * 2, "", sr_query_kind_name(q->kind), q->field ? q->field : "-",
	        q->value ? q->value : "-", q->op_and,
	        q->minimum_should_match ? q->minimum_should_match : "-", q->fuzziness ? q->fuzziness : "-",
	        q->prefix_length, q->gt ? q->gt : "-", q->gte ? q->gte : "-", q->lt ? q->lt : "-",
	        q->lte ? q->lte : "-");
	for (size_t i = 0; i < q->nvalues; i++)
		fprintf(stderr, " v=%s", q->values[i]);
	fprintf(stderr, "\n");
	struct {
		sr_query **v;
		size_t n;
		const char *name;
	} g[] = {{q->must, q->nmust, "must"}, {q->should, q->nshould, "should"},
	         {q->must_not, q->nmust_not, "must_not"}, {q->filter, q->nfilter, "filter"},
	         {q->queries, q->nqueries, "queries"}};
	for (int k = 0; k < 5; k++)
		for (size_t i = 0; i < g[k].n; i++) {
			fprintf(stderr, "%*s%s:\n", depth * 2 + 1, "", g[k].name);
			dump(g[k].v[i], depth + 1);
		}
	if (q->inner) {
		fprintf(stderr, "%*sinner:\n", depth * 2 + 1, "");
		dump(q->inner, depth + 1);
	}
	if (q->negative) {
		fprintf(stderr, "%*snegative:\n", depth * 2 + 1, "");
		dump(q->negative, depth + 1);
	}
}

static int
model_count(const sr_query *q)
{
	int n = 0;
	for (int i = 0; i < NDOCS; i++)
		n += M[i].live && eval(q, &M[i], i);
	return n;
}

/* Reports the smallest subtrees whose count differs from the model. */
static bool
blame(const sr_query *q)
{
	bool kid_bad = false;
	sr_query **lists[] = {q->must, q->should, q->must_not, q->filter, q->queries};
	size_t ns[] = {q->nmust, q->nshould, q->nmust_not, q->nfilter, q->nqueries};
	for (int k = 0; k < 5; k++)
		for (size_t i = 0; i < ns[k]; i++)
			kid_bad |= blame(lists[k][i]);
	if (q->inner)
		kid_bad |= blame(q->inner);
	if (q->negative)
		kid_bad |= blame(q->negative);
	uint64_t c = 0;
	cm_error err = {0};
	sr_count_shard(reader, q, 0, &c, &err);
	int m = model_count(q);
	if (c != (uint64_t)m && !kid_bad) {
		fprintf(stderr, "smallest differing subtree: count %" PRIu64 " model %d\n", c, m);
		dump(q, 1);
	}
	return kid_bad || c != (uint64_t)m;
}


static void
run_query(int qi, bool second_pass)
{
	sr_query *q = gen(3);
	/* model */
	static int ids[NDOCS];
	int n = 0;
	for (int i = 0; i < NDOCS; i++)
		if (M[i].live && eval(q, &M[i], i))
			ids[n++] = i;
	cm_error err = {0};
	uint64_t count = 0;
	cm_err rc = sr_count_shard(reader, q, 0, &count, &err);
	CHECKF(rc == CM_OK, "count: %s", err.reason);
	bool bad = count != (uint64_t)n;
	CHECKF(!bad || failures_reported > 20, "query %d: count %" PRIu64 " model %d", qi, count, n);
	/* sorted page, pagination and search_after */
	sr_request r;
	sr_request_init(&r);
	r.query = q;
	r.track_total_hits = SR_TRACK_ALL;
	r.fetch_source = false;
	set_sort(&r);
	qsort(ids, n, sizeof(int), model_cmp);
	int page = 1 + rn(15);
	r.from = (uint32_t)rn(3) * page;
	r.size = (uint32_t)page;
	sr_shard_result res;
	rc = sr_search_shard(reader, 0, &r, &res, &err);
	CHECKF(rc == CM_OK, "search: %s", err.reason);
	uint64_t sig = 1469598103934665603ull ^ count;
	if (!rc) {
		bool ok = res.total == (uint64_t)n;
		size_t want = (size_t)n < r.from + r.size ? (size_t)n : r.from + r.size;
		ok &= res.nhits == want;
		for (size_t i = 0; ok && i < res.nhits; i++) {
			ok &= atoi(res.hits[i].id) == ids[i];
			sig = (sig ^ (uint64_t)atoi(res.hits[i].id)) * 1099511628211ull;
		}
		bad |= !ok;
		CHECKF(ok || failures_reported > 20, "query %d: sorted page differs (total %" PRIu64
		                                     " model %d, hits %zu)",
		       qi, res.total, n, res.nhits);
		/* search_after from the last hit continues the model order */
		if (ok && res.nhits && res.nhits < (size_t)n && qi % 2 == 0) {
			sr_request r2 = r;
			r2.from = 0;
			r2.search_after = NULL;
			r2.nsearch_after = 0;
			copy_after(&r2, &res.hits[res.nhits - 1]);
			sr_shard_result res2;
			rc = sr_search_shard(reader, 0, &r2, &res2, &err);
			CHECKF(rc == CM_OK, "search_after: %s", err.reason);
			if (!rc) {
				bool ok2 = true;
				for (size_t i = 0; i < res2.nhits; i++)
					ok2 &= res.nhits + i < (size_t)n && atoi(res2.hits[i].id) == ids[res.nhits + i];
				CHECKF(ok2, "query %d: search_after page differs", qi);
				bad |= !ok2;
				sr_shard_result_free(&res2);
			}
			for (size_t i = 0; i < r2.nsearch_after; i++)
				sr_sort_value_clear(&r2.search_after[i]);
			cm_free(CM_MEM_SEARCH, r2.search_after);
		}
		sr_shard_result_free(&res);
	}
	/* scored top-10: block-max (threshold 0) equals exhaustive */
	if (qi % 4 == 0) {
		sr_request a, b;
		sr_request_init(&a);
		sr_request_init(&b);
		a.query = b.query = q;
		a.fetch_source = b.fetch_source = false;
		a.track_total_hits = SR_TRACK_ALL;
		/* a min_score below every score: no block-max skipping */
		a.has_min_score = true;
		a.min_score = -INFINITY;
		b.track_total_hits = rn(3) == 0 ? 0 : rn(2) ? 5 : SR_TRACK_ALL;
		sr_shard_result ra, rb;
		cm_err e1 = sr_search_shard(reader, 0, &a, &ra, &err);
		cm_err e2 = sr_search_shard(reader, 0, &b, &rb, &err);
		CHECK(e1 == CM_OK && e2 == CM_OK);
		if (!e1 && !e2) {
			bool ok = ra.nhits == rb.nhits && ra.total == (uint64_t)n;
			for (size_t i = 0; ok && i < ra.nhits; i++)
				ok &= !strcmp(ra.hits[i].id, rb.hits[i].id) && ra.hits[i].score == rb.hits[i].score;
			for (size_t i = 1; ok && i < ra.nhits; i++)
				ok &= ra.hits[i - 1].score >= ra.hits[i].score;
			CHECKF(ok, "query %d: block-max top-10 differs from exhaustive", qi);
			bad |= !ok;
		}
		if (!e1)
			sr_shard_result_free(&ra);
		if (!e2)
			sr_shard_result_free(&rb);
	}
	if (bad && failures_reported < 12 && !second_pass)
		blame(q);
	if (bad)
		failures_reported++;
	if (second_pass)
		CHECKF(sig == sig_before[qi], "query %d: differs after force merge", qi);
	else
		sig_before[qi] = sig;
	sr_request_free(&r); /* frees q */
}

/* ---- block-max skipping against exhaustive scoring ----
 * A corpus of mostly short documents (a few long ones, words drawn very
 * unevenly and repeated) so the heap fills early and its bar rises while
 * blocks and groups of blocks are skipped: single terms, a term under
 * bool filters, conjunctions, disjunctions, at several sizes and every
 * kind of track_total_hits, against the same query with skipping off
 * (min_score below every score); over several segments, with deletes, and
 * merged to one. */
#define SK_DOCS 24000
#define SK_VOCAB 36

static st_shard *sk_shard;

static void
sk_apply(int id, bool del)
{
	char idb[16], body[4096];
	snprintf(idb, sizeof idb, "%d", id);
	size_t at = 0;
	if (!del) {
		int r = rn(100), len = r < 80 ? 1 + rn(8) : r < 98 ? 10 + rn(70) : 100 + rn(300);
		at = (size_t)snprintf(body, sizeof body, "{\"body\":\"");
		for (int w = 0; w < len; w++) {
			int a = rn(SK_VOCAB), b = rn(SK_VOCAB), c = rn(SK_VOCAB);
			int v = a < b ? (a < c ? a : c) : (b < c ? b : c);
			int rep = rn(10) == 0 ? 1 + rn(6) : 1;
			for (int k = 0; k < rep && at + 16 < sizeof body; k++)
				at += (size_t)snprintf(body + at, sizeof body - at, "%sw%d", w || k ? " " : "", v);
		}
		at += (size_t)snprintf(body + at, sizeof body - at, "\"}");
	}
	st_op op;
	memset(&op, 0, sizeof op);
	op.type = del ? ST_OP_DELETE : ST_OP_INDEX;
	op.id = idb;
	op.id_len = strlen(idb);
	op.source = del ? NULL : body;
	op.source_len = at;
	op.seq_no = ST_NO_SEQ;
	op.if_seq_no = ST_NO_SEQ;
	st_op_result res;
	REQUIRE(st_shard_apply(sk_shard, &op, 1, &res) == CM_OK && res.err == CM_OK);
}

static bool
sk_search(st_reader *r, const char *body, bool exhaustive, sr_shard_result *res)
{
	cJSON *j = cJSON_Parse(body);
	REQUIRE(j);
	sr_request req;
	sr_request_init(&req);
	cm_error err = {0};
	cm_err rc = sr_request_from_json(j, &req, &err);
	cJSON_Delete(j);
	CHECKF(rc == CM_OK, "%s: %s", body, err.reason);
	if (rc)
		return false;
	req.fetch_source = false;
	if (exhaustive) {
		req.track_total_hits = SR_TRACK_ALL;
		req.has_min_score = true;
		req.min_score = -INFINITY;
	}
	rc = sr_search_shard(r, 0, &req, res, &err);
	CHECKF(rc == CM_OK, "%s: %s", body, err.reason);
	sr_request_free(&req);
	return rc == CM_OK;
}

static void
sk_queries(const char *stage)
{
	st_reader *r = st_shard_reader(sk_shard);
	static const char *tth[] = {"false", "5", "100", "10000", "true"};
	static const int sizes[] = {1, 3, 10, 50, 200};
	int bad = 0;
	for (int qi = 0; qi < 400; qi++) {
		int a = rn(6) ? rn(8) : rn(SK_VOCAB), b = rn(SK_VOCAB);
		char q[512], body[768];
		switch (qi % 6) {
		case 0:
		case 1:
			snprintf(q, sizeof q, "{\"term\":{\"body\":\"w%d\"}}", a);
			break;
		case 2:
			snprintf(q, sizeof q,
			         "{\"bool\":{\"must\":[{\"term\":{\"body\":\"w%d\"}}],"
			         "\"filter\":[{\"term\":{\"body\":\"w%d\"}}]}}",
			         a, b);
			break;
		case 3:
			snprintf(q, sizeof q,
			         "{\"bool\":{\"must\":[{\"term\":{\"body\":\"w%d\"}},"
			         "{\"term\":{\"body\":\"w%d\"}}]}}",
			         a, b);
			break;
		case 4:
			snprintf(q, sizeof q, "{\"match\":{\"body\":\"w%d w%d\"}}", a, b);
			break;
		default:
			snprintf(q, sizeof q, "{\"bool\":{\"filter\":[{\"term\":{\"body\":\"w%d\"}}]}}", a);
			break;
		}
		const char *tt = tth[rn(5)];
		snprintf(body, sizeof body, "{\"query\":%s,\"size\":%d,\"track_total_hits\":%s}", q,
		         sizes[rn(5)], tt);
		sr_shard_result x, y;
		if (!sk_search(r, body, false, &x))
			continue;
		if (!sk_search(r, body, true, &y)) {
			sr_shard_result_free(&x);
			continue;
		}
		bool ok = x.nhits == y.nhits;
		for (size_t i = 0; ok && i < x.nhits; i++)
			ok = !strcmp(x.hits[i].id, y.hits[i].id) && x.hits[i].score == y.hits[i].score;
		ok &= (isnan(x.max_score) && isnan(y.max_score)) || x.max_score == y.max_score;
		if (!strcmp(tt, "true"))
			ok &= x.total == y.total && !x.total_is_lower_bound;
		else if (x.total_is_lower_bound)
			ok &= x.total <= y.total && x.total >= (uint64_t)atoi(tt);
		else
			ok &= x.total == y.total;
		CHECKF(ok || bad > 10, "%s: %s: hits %zu/%zu total %llu%s/%llu", stage, body, x.nhits,
		       y.nhits, (unsigned long long)x.total, x.total_is_lower_bound ? "+" : "",
		       (unsigned long long)y.total);
		bad += !ok;
		sr_shard_result_free(&x);
		sr_shard_result_free(&y);
	}
	st_reader_release(r);
}

static void
test_skipping(void)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/tmp/shoal-model-skip-%d", (int)getpid());
	cJSON *j = cJSON_Parse("{\"properties\":{\"body\":{\"type\":\"text\"}}}");
	st_mapping *m = NULL;
	cm_error err = {0};
	REQUIRE(st_mapping_from_json(j, &m, &err) == CM_OK);
	cJSON_Delete(j);
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.background_merges = false;
	cm_rm_rf(dir);
	REQUIRE(st_shard_open(dir, m, &o, &sk_shard, &err) == CM_OK);
	st_mapping_unref(m);
	for (int i = 0; i < SK_DOCS; i++) {
		sk_apply(i, false);
		if (i % 9000 == 8999)
			REQUIRE(st_shard_refresh(sk_shard) == CM_OK);
	}
	REQUIRE(st_shard_refresh(sk_shard) == CM_OK);
	sk_queries("segments");
	REQUIRE(st_shard_force_merge(sk_shard, 1) == CM_OK);
	sk_queries("merged");
	for (int i = 0; i < SK_DOCS; i += 1 + rn(40))
		sk_apply(i, true);
	REQUIRE(st_shard_refresh(sk_shard) == CM_OK);
	sk_queries("deletes");
	st_shard_close(sk_shard);
	cm_rm_rf(dir);
}

static int nqueries = NQUERIES;

static void
run_all(bool second)
{
	rs = 0xC0FFEE123456789ull;
	for (int i = 0; i < nqueries; i++)
		run_query(i, second);
}

int
main(void)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/tmp/shoal-model-test-%d", (int)getpid());
	if (getenv("MODEL_QUERIES") && atoi(getenv("MODEL_QUERIES")) > 0 &&
	    atoi(getenv("MODEL_QUERIES")) < NQUERIES)
		nqueries = atoi(getenv("MODEL_QUERIES")); /* quicker local runs */
	make_vocab();
	test_skipping();
	build(dir);
	printf("segments before merge: %zu\n", st_reader_nsegments(reader));
	uint64_t t0 = cm_now_ns();
	run_all(false);
	printf("%d queries in %.2f s\n", nqueries, (double)(cm_now_ns() - t0) / 1e9);
	st_reader_release(reader);
	REQUIRE(st_shard_force_merge(shard, 1) == CM_OK);
	reader = st_shard_reader(shard);
	printf("segments after merge: %zu\n", st_reader_nsegments(reader));
	run_all(true);
	st_reader_release(reader);
	st_shard_close(shard);
	cm_rm_rf(dir);
	return check_report("model_test");
}
