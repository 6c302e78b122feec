/* `shoal-engine query --index DIR --queries Q.ndjson [--repeat N] [--fetch]`: runs
 * Elasticsearch _search bodies against one shard directory in process,
 * single-threaded. Each line is {"class":..,"body":{..}[,"expect":N]} or a
 * plain body. Every query runs once untimed with an exact total (the hit
 * count), then N timed rounds; one JSON line per class is printed
 * (engine, class, queries, runs, qps, p50_us, p99_us, cpu_us (mean thread CPU
 * time per run, steadier than wall time on a shared machine), counts,
 * mismatches). Timed runs are ES's query phase only (hits without _id or
 * _source, like Lucene's TopDocs) unless --fetch is given. Exits 1 if a
 * query matched nothing or a count differs from "expect". */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "sr.h"
#include "sr_agg.h"
#include "sr_engine.h"

#define MAX_LINE ((size_t)16 << 20)
#define MAX_QUERIES 1000000

typedef struct equery {
	char *cls;
	sr_request req;
	int64_t expect; /* -1 none */
	uint64_t count;
} equery;

static int
usage(void)
{
	fprintf(stderr, "usage: shoal-engine query --index DIR --queries Q.ndjson [--repeat N] "
	                "[--mapping M.json] [--fetch]\n");
	return 2;
}

static uint64_t
thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static st_mapping *
load_mapping(const char *path)
{
	if (!path)
		return st_mapping_new();
	char *data;
	size_t len;
	if (cm_file_read(path, 64 << 20, &data, &len)) {
		fprintf(stderr, "cannot read %s\n", path);
		return NULL;
	}
	cJSON *j = cJSON_ParseWithLength(data, len);
	cm_free(CM_MEM_COMMON, data);
	if (!j)
		return NULL;
	const cJSON *body = cJSON_GetObjectItemCaseSensitive(j, "mappings");
	st_mapping *m = NULL;
	cm_error err = {0};
	if (st_mapping_from_json(body ? body : j, &m, &err))
		fprintf(stderr, "bad mapping: %s\n", err.reason);
	cJSON_Delete(j);
	return m;
}

static int
read_queries(const char *path, equery **out, size_t *n)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "cannot open %s\n", path);
		return -1;
	}
	char *line = NULL;
	size_t cap = 0, nq = 0, qcap = 0;
	ssize_t len;
	equery *qs = NULL;
	int rc = 0;
	size_t lineno = 0;
	while ((len = getline(&line, &cap, f)) > 0) {
		lineno++;
		if ((size_t)len > MAX_LINE || nq >= MAX_QUERIES) {
			fprintf(stderr, "line %zu: too long or too many queries\n", lineno);
			rc = -1;
			break;
		}
		cJSON *j = cJSON_ParseWithLength(line, (size_t)len);
		if (!j) {
			bool blank = true;
			for (ssize_t i = 0; i < len; i++)
				blank &= line[i] == ' ' || line[i] == '\n' || line[i] == '\r' || line[i] == '\t';
			if (blank)
				continue;
			fprintf(stderr, "line %zu: invalid JSON\n", lineno);
			rc = -1;
			break;
		}
		const cJSON *cls = cJSON_GetObjectItemCaseSensitive(j, "class");
		const cJSON *body = cJSON_GetObjectItemCaseSensitive(j, "body");
		const cJSON *expect = cJSON_GetObjectItemCaseSensitive(j, "expect");
		if (!cJSON_IsString(cls) || !cJSON_IsObject(body)) {
			cls = NULL;
			body = j;
			expect = NULL;
		}
		if (nq == qcap) {
			qcap = qcap ? qcap * 2 : 64;
			qs = cm_realloc(CM_MEM_SEARCH, qs, qcap * sizeof(equery));
		}
		equery *q = &qs[nq];
		memset(q, 0, sizeof *q);
		q->cls = cm_strdup(CM_MEM_SEARCH, cls ? cls->valuestring : "default");
		q->expect = cJSON_IsNumber(expect) ? (int64_t)expect->valuedouble : -1;
		sr_request_init(&q->req);
		cm_error err = {0};
		if (sr_request_from_json(body, &q->req, &err)) {
			fprintf(stderr, "line %zu: %s\n", lineno, err.reason);
			sr_request_free(&q->req);
			cm_free(CM_MEM_SEARCH, q->cls);
			cJSON_Delete(j);
			rc = -1;
			break;
		}
		nq++;
		cJSON_Delete(j);
	}
	free(line);
	fclose(f);
	*out = qs;
	*n = nq;
	return rc;
}

static int
run_one(st_reader *r, const sr_request *req, uint64_t *total)
{
	sr_shard_result res;
	cm_error err = {0};
	cm_err rc = sr_search_shard(r, 0, req, &res, &err);
	if (rc) {
		fprintf(stderr, "query failed: %s: %s\n", cm_err_name(rc), err.reason);
		return -1;
	}
	if (total)
		*total = res.total;
	sr_shard_result_free(&res);
	return 0;
}

int
sr_engine_query_main(int argc, char **argv)
{
	const char *index = NULL, *queries = NULL, *mapping = NULL;
	long repeat = 10;
	bool fetch = false;
	for (int i = 1; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(k, "--fetch")) {
			fetch = true;
			continue;
		}
		if (!v)
			return usage();
		if (!strcmp(k, "--index"))
			index = v;
		else if (!strcmp(k, "--queries"))
			queries = v;
		else if (!strcmp(k, "--repeat"))
			repeat = strtol(v, NULL, 10);
		else if (!strcmp(k, "--mapping"))
			mapping = v;
		else
			return usage();
		i++;
	}
	if (!index || !queries || repeat < 0 || repeat > 1000000)
		return usage();
	st_mapping *m = load_mapping(mapping);
	if (!m)
		return 2;
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.background_merges = false;
	st_shard *s = NULL;
	cm_error err = {0};
	if (st_shard_open(index, m, &o, &s, &err)) {
		fprintf(stderr, "cannot open %s: %s\n", index, err.reason);
		st_mapping_unref(m);
		return 2;
	}
	st_reader *r = st_shard_reader(s);
	equery *qs = NULL;
	size_t nq = 0;
	int status = read_queries(queries, &qs, &nq) ? 2 : 0;
	for (size_t i = 0; i < nq; i++)
		qs[i].req.query_phase_only = !fetch;
	/* untimed: exact counts */
	for (size_t i = 0; i < nq && !status; i++) {
		sr_request exact = qs[i].req;
		exact.track_total_hits = SR_TRACK_ALL;
		if (run_one(r, &exact, &qs[i].count)) {
			status = 2;
			break;
		}
		if (qs[i].count == 0) {
			fprintf(stderr, "query %zu (class %s) matched nothing\n", i, qs[i].cls);
			status = 1;
		}
	}
	/* classes in first-seen order */
	for (size_t i = 0; i < nq && status != 2; i++) {
		bool first = true;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(qs[j].cls, qs[i].cls))
				first = false;
		if (!first)
			continue;
		size_t nidx = 0;
		size_t *idx = cm_malloc(CM_MEM_SEARCH, nq * sizeof(size_t));
		for (size_t j = i; j < nq; j++)
			if (!strcmp(qs[j].cls, qs[i].cls))
				idx[nidx++] = j;
		size_t runs = nidx * (size_t)repeat;
		uint64_t *lat = cm_malloc(CM_MEM_SEARCH, (runs ? runs : 1) * sizeof(uint64_t));
		size_t nl = 0;
		for (size_t k = 0; k < nidx; k++) /* warm-up */
			run_one(r, &qs[idx[k]].req, NULL);
		uint64_t t0 = cm_now_ns(), c0 = thread_cpu_ns();
		for (long rep = 0; rep < repeat; rep++) {
			for (size_t k = 0; k < nidx; k++) {
				uint64_t q0 = cm_now_ns();
				if (run_one(r, &qs[idx[k]].req, NULL))
					status = 2;
				lat[nl++] = cm_now_ns() - q0;
			}
		}
		double el = (double)(cm_now_ns() - t0) / 1e9;
		double cpu_us = nl ? (double)(thread_cpu_ns() - c0) / 1e3 / (double)nl : 0.0;
		qsort(lat, nl, sizeof(uint64_t), cmp_u64);
		int mism = 0;
		printf("{\"engine\":\"shoal\",\"class\":\"%s\",\"queries\":%zu,\"runs\":%zu,\"qps\":%.1f,"
		       "\"p50_us\":%.1f,\"p99_us\":%.1f,\"cpu_us\":%.1f,\"counts\":[",
		       qs[i].cls, nidx, nl, el > 0 ? (double)nl / el : 0.0,
		       nl ? (double)lat[(nl - 1) / 2] / 1e3 : 0.0,
		       nl ? (double)lat[(size_t)((nl - 1) * 0.99)] / 1e3 : 0.0, cpu_us);
		for (size_t k = 0; k < nidx; k++) {
			const equery *q = &qs[idx[k]];
			printf("%s%" PRIu64, k ? "," : "", q->count);
			if (q->expect >= 0 && (uint64_t)q->expect != q->count)
				mism++;
		}
		printf("],\"mismatches\":%d}\n", mism);
		fflush(stdout);
		if (mism)
			status = status ? status : 1;
		cm_free(CM_MEM_SEARCH, lat);
		cm_free(CM_MEM_SEARCH, idx);
	}
	for (size_t i = 0; i < nq; i++) {
		sr_request_free(&qs[i].req);
		cm_free(CM_MEM_SEARCH, qs[i].cls);
	}
	cm_free(CM_MEM_SEARCH, qs);
	st_reader_release(r);
	st_shard_close(s);
	st_mapping_unref(m);
	return status;
}
