/* Query execution on a small hand-built shard (two segments, a delete):
 * every query type's hit set, sorting, search_after, BM25 statistics,
 * counts, bitsets, and the regexp/wildcard/fuzzy building blocks. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/cm_sys.h"
#include "search/exec.h"
#include "search/sr.h"
#include "search/sr_agg.h"
#include "storage/st_shard.h"

static st_shard *shard;
static st_reader *reader;

static const char *docs[] = {
    /* 1 */ "{\"title\":\"The quick brown fox\",\"tag\":\"a\",\"n\":5,\"price\":1.5,"
            "\"d\":\"2020-01-01\",\"b\":true}",
    /* 2 */ "{\"title\":\"quick brown dogs jump\",\"tag\":\"b\",\"n\":10,\"price\":2.5,"
            "\"d\":\"2020-02-15T10:00:00Z\",\"b\":false}",
    /* 3 */ "{\"title\":\"lazy dog sleeps\",\"tag\":[\"a\",\"c\"],\"n\":[1,20],\"d\":\"2021-06-01\"}",
    /* 4 */ "{\"title\":\"the fox and the dog\",\"tag\":\"c\",\"n\":-3,\"price\":-0.5}",
    /* 5 */ "{\"title\":\"brown brown brown\",\"tag\":\"d\"}",
    /* 6 */ "{\"title\":\"fuzzy foxes\",\"n\":7}",
    /* 7 */ "{\"title\":\"deleted quick fox\",\"tag\":\"a\",\"n\":6}",
};

static void
apply(const char *id, const char *src, bool del)
{
	st_op op = {0};
	op.type = del ? ST_OP_DELETE : ST_OP_INDEX;
	op.id = id;
	op.id_len = strlen(id);
	op.source = src;
	op.source_len = src ? strlen(src) : 0;
	op.seq_no = ST_NO_SEQ;
	op.if_seq_no = ST_NO_SEQ;
	st_op_result res;
	REQUIRE(st_shard_apply(shard, &op, 1, &res) == CM_OK);
	CHECKF(res.err == CM_OK, "apply %s: %s", id, res.reason);
}

/* A fresh shard in dir with mapping mj (JSON), merges by hand only. */
static st_shard *
open_shard(const char *dir, const char *mj)
{
	cJSON *j = cJSON_Parse(mj);
	st_mapping *m = NULL;
	cm_error err = {0};
	REQUIRE(st_mapping_from_json(j, &m, &err) == CM_OK);
	cJSON_Delete(j);
	st_shard_opts o;
	st_shard_opts_default(&o);
	o.background_merges = false;
	cm_rm_rf(dir);
	st_shard *sh = NULL;
	REQUIRE(st_shard_open(dir, m, &o, &sh, &err) == CM_OK);
	st_mapping_unref(m);
	return sh;
}

static void
setup(const char *dir)
{
	shard = open_shard(dir, "{\"properties\":{\"title\":{\"type\":\"text\"},"
	                        "\"tag\":{\"type\":\"keyword\"},\"n\":{\"type\":\"long\"},"
	                        "\"price\":{\"type\":\"double\"},\"d\":{\"type\":\"date\"},"
	                        "\"b\":{\"type\":\"boolean\"}}}");
	char id[8];
	for (int i = 0; i < 4; i++) {
		snprintf(id, sizeof id, "%d", i + 1);
		apply(id, docs[i], false);
	}
	REQUIRE(st_shard_refresh(shard) == CM_OK);
	for (int i = 4; i < 7; i++) {
		snprintf(id, sizeof id, "%d", i + 1);
		apply(id, docs[i], false);
	}
	REQUIRE(st_shard_refresh(shard) == CM_OK);
	apply("7", NULL, true);
	REQUIRE(st_shard_refresh(shard) == CM_OK);
	reader = st_shard_reader(shard);
}

static cm_err
search(const char *body, sr_request *req, sr_shard_result *res, cm_error *err)
{
	cJSON *j = cJSON_Parse(body);
	REQUIRE(j != NULL);
	sr_request_init(req);
	cm_err rc = sr_request_from_json(j, req, err);
	cJSON_Delete(j);
	if (rc)
		return rc;
	return sr_search_shard(reader, 0, req, res, err);
}

/* Checks the hit ids in order ("1,4") or as a set when sorted is false. */
static void
expect_ids(const char *body, const char *want, bool ordered)
{
	sr_request req;
	sr_shard_result res;
	cm_error err = {0};
	cm_err rc = search(body, &req, &res, &err);
	CHECKF(rc == CM_OK, "%s: %s", body, err.reason);
	if (rc) {
		sr_request_free(&req);
		return;
	}
	char got[256] = "";
	if (ordered) {
		for (size_t i = 0; i < res.nhits; i++) {
			strcat(got, i ? "," : "");
			strcat(got, res.hits[i].id);
		}
	} else {
		for (int id = 1; id <= 9; id++) {
			char s[4];
			snprintf(s, sizeof s, "%d", id);
			for (size_t i = 0; i < res.nhits; i++)
				if (!strcmp(res.hits[i].id, s)) {
					strcat(got, *got ? "," : "");
					strcat(got, s);
				}
		}
	}
	CHECKF(!strcmp(got, want), "%s: got [%s] want [%s]", body, got, want);
	sr_shard_result_free(&res);
	sr_request_free(&req);
}

static void
expect_error(const char *body, const char *needle)
{
	sr_request req;
	sr_shard_result res;
	cm_error err = {0};
	cm_err rc = search(body, &req, &res, &err);
	CHECKF(rc != CM_OK && strstr(err.reason, needle), "%s: rc %d reason [%s]", body, rc,
	       err.reason);
	if (!rc)
		sr_shard_result_free(&res);
	sr_request_free(&req);
}

#define Q(q) "{\"query\":" q ",\"size\":20}"

static void
test_queries(void)
{
	expect_ids(Q("{\"match_all\":{}}"), "1,2,3,4,5,6", false);
	expect_ids(Q("{\"match_none\":{}}"), "", false);
	expect_ids(Q("{\"term\":{\"title\":\"fox\"}}"), "1,4", false);
	expect_ids(Q("{\"term\":{\"title\":\"Fox\"}}"), "", false);
	expect_ids(Q("{\"term\":{\"title\":{\"value\":\"Fox\",\"case_insensitive\":true}}}"), "1,4",
	           false);
	expect_ids(Q("{\"term\":{\"tag\":\"a\"}}"), "1,3", false);
	expect_ids(Q("{\"term\":{\"n\":20}}"), "3", false);
	expect_ids(Q("{\"term\":{\"b\":true}}"), "1", false);
	expect_ids(Q("{\"term\":{\"d\":\"2020-01-01\"}}"), "1", false);
	expect_ids(Q("{\"terms\":{\"tag\":[\"a\",\"d\"]}}"), "1,3,5", false);
	expect_ids(Q("{\"terms\":{\"n\":[5,7,99]}}"), "1,6", false);
	expect_ids(Q("{\"ids\":{\"values\":[\"2\",\"5\",\"7\",\"x\"]}}"), "2,5", false);
	expect_ids(Q("{\"exists\":{\"field\":\"price\"}}"), "1,2,4", false);
	expect_ids(Q("{\"exists\":{\"field\":\"tag\"}}"), "1,2,3,4,5", false);
	expect_ids(Q("{\"exists\":{\"field\":\"title\"}}"), "1,2,3,4,5,6", false);
	expect_ids(Q("{\"range\":{\"n\":{\"gte\":5,\"lte\":10}}}"), "1,2,6", false);
	expect_ids(Q("{\"range\":{\"n\":{\"gt\":5,\"lt\":10}}}"), "6", false);
	expect_ids(Q("{\"range\":{\"n\":{\"gte\":4.5,\"lte\":7.5}}}"), "1,6", false);
	expect_ids(Q("{\"range\":{\"price\":{\"gt\":1.5}}}"), "2", false);
	expect_ids(Q("{\"range\":{\"price\":{\"lt\":0}}}"), "4", false);
	expect_ids(Q("{\"range\":{\"d\":{\"gte\":\"2020-01-01\",\"lt\":\"2020-03-01\"}}}"), "1,2",
	           false);
	expect_ids(Q("{\"range\":{\"d\":{\"gt\":\"2020-01-01\"}}}"), "2,3", false);
	expect_ids(Q("{\"range\":{\"d\":{\"lte\":\"2020-02-15\"}}}"), "1,2", false);
	expect_ids(Q("{\"range\":{\"d\":{\"lt\":\"2020-02-15\"}}}"), "1", false);
	expect_ids(Q("{\"range\":{\"d\":{\"gte\":\"2020-01-01||+1M/M\"}}}"), "2,3", false);
	expect_ids(Q("{\"range\":{\"d\":{\"gte\":\"now-100y/d\",\"lte\":\"now\"}}}"), "1,2,3", false);
	expect_ids(Q("{\"range\":{\"d\":{\"gte\":\"01/06/2021\",\"format\":\"dd/MM/yyyy\"}}}"), "3",
	           false);
	/* 2020-02-15T10:00Z is 19:00 in Tokyo; 2020-01-01 local Tokyo starts 2019-12-31T15:00Z */
	expect_ids(Q("{\"range\":{\"d\":{\"gte\":\"2020-02-15T18:00:00\",\"time_zone\":\"Asia/Tokyo\"}}}"),
	           "2,3", false);
	expect_ids(Q("{\"range\":{\"d\":{\"gte\":\"2020-02-15T20:00:00\",\"time_zone\":\"+09:00\"}}}"),
	           "3", false);
	expect_ids(Q("{\"range\":{\"d\":{\"lt\":\"2020-01-01\",\"time_zone\":\"America/New_York\"}}}"),
	           "1", false);
	expect_ids(Q("{\"range\":{\"tag\":{\"gte\":\"b\",\"lt\":\"d\"}}}"), "2,3,4", false);
	expect_ids(Q("{\"range\":{\"tag\":{\"gt\":\"a\"}}}"), "2,3,4,5", false);
	expect_ids(Q("{\"range\":{\"b\":{\"lt\":true}}}"), "2", false);
	expect_ids(Q("{\"prefix\":{\"title\":\"fo\"}}"), "1,4,6", false);
	expect_ids(Q("{\"prefix\":{\"tag\":{\"value\":\"A\",\"case_insensitive\":true}}}"), "1,3",
	           false);
	expect_ids(Q("{\"wildcard\":{\"title\":\"d*g*\"}}"), "2,3,4", false);
	expect_ids(Q("{\"wildcard\":{\"title\":\"?ox\"}}"), "1,4", false);
	expect_ids(Q("{\"regexp\":{\"title\":\"fo[xz].*\"}}"), "1,4,6", false);
	expect_ids(Q("{\"regexp\":{\"title\":\"(dog|lazy)s?\"}}"), "2,3,4", false);
	expect_ids(Q("{\"regexp\":{\"title\":\"b.{3}n\"}}"), "1,2,5", false);
	expect_ids(Q("{\"fuzzy\":{\"title\":\"dgo\"}}"), "3,4", false);
	expect_ids(Q("{\"fuzzy\":{\"title\":{\"value\":\"browm\",\"fuzziness\":1}}}"), "1,2,5", false);
	expect_ids(Q("{\"fuzzy\":{\"title\":{\"value\":\"dgo\",\"transpositions\":false}}}"), "",
	           false);
	expect_ids(Q("{\"match\":{\"title\":\"quick fox\"}}"), "1,2,4", false);
	expect_ids(Q("{\"match\":{\"title\":{\"query\":\"quick fox\",\"operator\":\"and\"}}}"), "1",
	           false);
	expect_ids(Q("{\"match\":{\"title\":{\"query\":\"quick brown fox\","
	             "\"minimum_should_match\":\"2\"}}}"),
	           "1,2", false);
	expect_ids(Q("{\"match\":{\"title\":{\"query\":\"quick brown fox\","
	             "\"minimum_should_match\":\"-1\"}}}"),
	           "1,2", false);
	expect_ids(Q("{\"match\":{\"title\":{\"query\":\"quick brown fox\","
	             "\"minimum_should_match\":\"75%\"}}}"),
	           "1,2", false);
	expect_ids(Q("{\"match\":{\"title\":{\"query\":\"quikc fxo\",\"fuzziness\":\"AUTO\"}}}"),
	           "1,2,4", false);
	expect_ids(Q("{\"match\":{\"n\":\"20\"}}"), "3", false);
	expect_ids(Q("{\"match_phrase\":{\"title\":\"quick brown\"}}"), "1,2", false);
	expect_ids(Q("{\"match_phrase\":{\"title\":\"brown fox\"}}"), "1", false);
	expect_ids(Q("{\"match_phrase\":{\"title\":\"quick fox\"}}"), "", false);
	expect_ids(Q("{\"match_phrase\":{\"title\":{\"query\":\"quick fox\",\"slop\":1}}}"), "1",
	           false);
	expect_ids(Q("{\"match_phrase\":{\"title\":{\"query\":\"fox quick\",\"slop\":2}}}"), "",
	           false);
	expect_ids(Q("{\"match_phrase\":{\"title\":{\"query\":\"fox quick\",\"slop\":3}}}"), "1",
	           false);
	expect_ids(Q("{\"match_phrase\":{\"title\":\"brown brown\"}}"), "5", false);
	/* repeated terms need distinct occurrences, also when sloppy */
	expect_ids(Q("{\"match_phrase\":{\"title\":{\"query\":\"brown brown\",\"slop\":3}}}"), "5",
	           false);
	expect_ids(Q("{\"match_phrase\":{\"title\":{\"query\":\"brown brown brown\",\"slop\":2}}}"),
	           "5", false);
	expect_ids(Q("{\"match_phrase\":{\"title\":{\"query\":\"brown fox brown\",\"slop\":4}}}"),
	           "", false);
	expect_ids(Q("{\"match_phrase_prefix\":{\"title\":\"quick br\"}}"), "1,2", false);
	expect_ids(Q("{\"match_phrase_prefix\":{\"title\":\"fo\"}}"), "1,4,6", false);
	expect_ids(Q("{\"multi_match\":{\"query\":\"a fox\",\"fields\":[\"title\",\"tag\"]}}"),
	           "1,4", false);
	expect_ids(Q("{\"multi_match\":{\"query\":\"a\",\"fields\":[\"title\",\"tag^2\"]}}"),
	           "1,3", false);
	expect_ids(Q("{\"multi_match\":{\"query\":\"fox\",\"fields\":[\"ti*\"],"
	             "\"type\":\"most_fields\"}}"),
	           "1,4", false);
	expect_ids(Q("{\"bool\":{\"must\":{\"term\":{\"title\":\"brown\"}},\"must_not\":{\"term\":"
	             "{\"tag\":\"d\"}}}}"),
	           "1,2", false);
	expect_ids(Q("{\"bool\":{\"must_not\":{\"term\":{\"tag\":\"a\"}}}}"), "2,4,5,6", false);
	expect_ids(Q("{\"bool\":{\"filter\":{\"range\":{\"n\":{\"gte\":0}}},\"should\":[{\"term\":"
	             "{\"title\":\"fox\"}},{\"term\":{\"title\":\"dog\"}}],\"minimum_should_match\":1}}"),
	           "1,3", false);
	expect_ids(Q("{\"bool\":{\"should\":[{\"term\":{\"title\":\"fox\"}},{\"term\":{\"title\":"
	             "\"dog\"}},{\"term\":{\"title\":\"the\"}}],\"minimum_should_match\":2}}"),
	           "1,4", false);
	expect_ids(Q("{\"bool\":{\"filter\":[{\"term\":{\"tag\":\"a\"}}],\"should\":[{\"term\":"
	             "{\"title\":\"nothing\"}}]}}"),
	           "1,3", false);
	expect_ids(Q("{\"bool\":{}}"), "1,2,3,4,5,6", false);
	expect_ids(Q("{\"constant_score\":{\"filter\":{\"term\":{\"title\":\"dog\"}},\"boost\":2}}"),
	           "3,4", false);
	expect_ids(Q("{\"dis_max\":{\"queries\":[{\"term\":{\"title\":\"fox\"}},{\"term\":{\"tag\":"
	             "\"d\"}}]}}"),
	           "1,4,5", false);
	expect_ids(Q("{\"boosting\":{\"positive\":{\"term\":{\"title\":\"brown\"}},\"negative\":"
	             "{\"term\":{\"tag\":\"a\"}},\"negative_boost\":0.1}}"),
	           "1,2,5", false);
	expect_ids(Q("{\"query_string\":{\"query\":\"title:fox AND tag:c\"}}"), "4", false);
	expect_ids(Q("{\"query_string\":{\"query\":\"fox dog\",\"default_field\":\"title\"}}"),
	           "1,3,4", false);
	expect_ids(Q("{\"simple_query_string\":{\"query\":\"fox -dog\",\"fields\":[\"title\"],"
	             "\"default_operator\":\"and\"}}"),
	           "1", false);
	/* deleted doc 7 never appears */
	expect_ids(Q("{\"term\":{\"title\":\"deleted\"}}"), "", false);
	expect_ids(Q("{\"match\":{\"title\":\"quick\"}}"), "1,2", false);
}

static void
test_sorting(void)
{
	expect_ids("{\"sort\":[{\"n\":\"asc\"}],\"size\":10}", "4,3,1,6,2,5", true);
	expect_ids("{\"sort\":[{\"n\":\"desc\"}],\"size\":10}", "3,2,6,1,4,5", true);
	expect_ids("{\"sort\":[{\"n\":{\"order\":\"asc\",\"missing\":\"_first\"}}],\"size\":10}",
	           "5,4,3,1,6,2", true);
	expect_ids("{\"sort\":[{\"tag\":\"asc\"}],\"size\":10}", "1,3,2,4,5,6", true);
	expect_ids("{\"sort\":[{\"tag\":\"desc\"},{\"n\":\"asc\"}],\"size\":10}", "5,4,3,2,1,6", true);
	expect_ids("{\"sort\":[{\"price\":\"desc\"}],\"size\":2}", "2,1", true);
	expect_ids("{\"sort\":[{\"d\":\"asc\"}],\"size\":10}", "1,2,3,4,5,6", true);
	expect_ids("{\"sort\":[\"_doc\"],\"size\":3}", "1,2,3", true);
	expect_ids("{\"sort\":[{\"n\":\"asc\"}],\"search_after\":[5],\"size\":10}", "6,2,5", true);
	expect_ids("{\"sort\":[{\"tag\":\"asc\"}],\"search_after\":[\"b\"],\"size\":10}", "4,5,6",
	           true);
	expect_ids("{\"sort\":[{\"n\":{\"order\":\"asc\",\"mode\":\"max\"}}],\"size\":10}",
	           "4,1,6,2,3,5", true);
	expect_ids("{\"from\":2,\"size\":2,\"sort\":[{\"n\":\"asc\"}]}", "4,3,1,6", true);
	/* score order: doc 5 has "brown" three times in a short field */
	expect_ids("{\"query\":{\"match\":{\"title\":\"brown\"}}}", "5,1,2", true);
	expect_error("{\"sort\":[{\"nope\":\"asc\"}]}", "No mapping found for [nope]");
	expect_error("{\"sort\":[{\"title\":\"asc\"}]}", "Text fields are not optimised");
}

/* BM25 with Lucene's formula, computed independently from raw figures. */
static void
test_scores(void)
{
	sr_request req;
	sr_shard_result res;
	cm_error err = {0};
	REQUIRE(search("{\"query\":{\"term\":{\"title\":\"dog\"}}}", &req, &res, &err) == CM_OK);
	/* docCount 7 (deleted doc counts, as Lucene), df(dog) = 2; titles by token count:
	 * 4,4,3,5,3,2,3 → sumTTF 24 */
	double N = 7, df = 2, avgdl = (float)(24.0 / 7.0);
	float idf = (float)log(1 + (N - df + 0.5) / (df + 0.5));
	for (size_t i = 0; i < res.nhits; i++) {
		int dl = !strcmp(res.hits[i].id, "3") ? 3 : 5;
		float norm = 1.2f * (0.25f + 0.75f * (float)dl / (float)avgdl);
		float want = idf - idf / (1.0f + 1.0f / norm);
		CHECKF(fabsf(res.hits[i].score - want) <= 1e-5f * want, "doc %s score %g want %g",
		       res.hits[i].id, res.hits[i].score, want);
	}
	CHECK(res.nhits == 2 && !strcmp(res.hits[0].id, "3"));
	CHECK(res.max_score == res.hits[0].score);
	sr_shard_result_free(&res);
	sr_request_free(&req);
	/* constant score and filter context */
	REQUIRE(search("{\"query\":{\"constant_score\":{\"filter\":{\"term\":{\"tag\":\"a\"}},"
	               "\"boost\":3}}}",
	               &req, &res, &err) == CM_OK);
	CHECK(res.nhits == 2 && res.hits[0].score == 3.0f && res.hits[1].score == 3.0f);
	sr_shard_result_free(&res);
	sr_request_free(&req);
	REQUIRE(search("{\"query\":{\"bool\":{\"filter\":{\"term\":{\"tag\":\"a\"}}}}}", &req, &res,
	               &err) == CM_OK);
	CHECK(res.nhits == 2 && res.hits[0].score == 0.0f);
	sr_shard_result_free(&res);
	sr_request_free(&req);
	/* bool sums must + should; boost multiplies */
	sr_shard_result a, b;
	sr_request ra, rb;
	REQUIRE(search("{\"query\":{\"term\":{\"title\":{\"value\":\"fox\",\"boost\":2}}}}", &ra, &a,
	               &err) == CM_OK);
	REQUIRE(search("{\"query\":{\"term\":{\"title\":\"fox\"}}}", &rb, &b, &err) == CM_OK);
	CHECK(a.nhits == 2 && b.nhits == 2 && fabsf(a.hits[0].score - 2 * b.hits[0].score) < 1e-5f);
	sr_shard_result_free(&a);
	sr_shard_result_free(&b);
	sr_request_free(&ra);
	sr_request_free(&rb);
	/* seq_no / version are carried */
	REQUIRE(search("{\"query\":{\"ids\":{\"values\":[\"1\"]}},\"version\":true,\"seq_no_primary_term\":true}", &req, &res, &err) == CM_OK);
	CHECK(res.nhits == 1 && res.hits[0].version == 1 && res.hits[0].primary_term >= 1);
	CHECK(res.hits[0].source && strstr(res.hits[0].source, "quick brown fox"));
	sr_shard_result_free(&res);
	sr_request_free(&req);
	REQUIRE(search("{\"query\":{\"ids\":{\"values\":[\"1\"]}},\"_source\":[\"tag\"]}", &req, &res,
	               &err) == CM_OK);
	CHECK(res.nhits == 1 && res.hits[0].source && !strcmp(res.hits[0].source, "{\"tag\":\"a\"}"));
	sr_shard_result_free(&res);
	sr_request_free(&req);
}

/* The matches of q over every segment, from its per-segment bitsets. */
static uint64_t
bitset_total(sr_exec *x, const sr_query *q)
{
	cm_error err = {0};
	uint64_t total = 0;
	for (size_t si = 0; si < x->nseg; si++) {
		uint32_t md = st_segment_max_doc(x->segs[si].seg);
		uint64_t *bits = calloc(st_bit_words(md) + 1, 8);
		CHECK(sr_query_bitset(q, &x->segs[si], bits, &err) == CM_OK);
		for (size_t w = 0; w < st_bit_words(md); w++)
			total += (uint64_t)__builtin_popcountll(bits[w]);
		free(bits);
	}
	return total;
}

static void
test_counts(void)
{
	sr_request req;
	sr_shard_result res;
	cm_error err = {0};
	REQUIRE(search("{\"query\":{\"match_all\":{}},\"size\":1,\"track_total_hits\":2}", &req, &res,
	               &err) == CM_OK);
	CHECK(res.nhits == 1 && res.total >= 2);
	sr_shard_result_free(&res);
	sr_request_free(&req);
	REQUIRE(search("{\"query\":{\"match_all\":{}},\"terminate_after\":2}", &req, &res, &err) ==
	        CM_OK);
	CHECK(res.total == 2 && res.terminated_early);
	sr_shard_result_free(&res);
	sr_request_free(&req);
	uint64_t n = 0;
	sr_query *q = sr_query_new(SR_Q_MATCH_ALL);
	CHECK(sr_count_shard(reader, q, 0, &n, &err) == CM_OK && n == 6);
	sr_query_free(q);
	/* bitset per segment */
	sr_exec x;
	REQUIRE(sr_exec_open(&x, reader, 0, &err) == CM_OK);
	q = sr_query_new(SR_Q_TERM);
	q->field = cm_strdup(CM_MEM_SEARCH, "title");
	q->value = cm_strdup(CM_MEM_SEARCH, "quick");
	CHECK(bitset_total(&x, q) == 2);
	sr_query_free(q);
	/* Counts known without visiting (doc_freq, live docs) equal what the
	 * iterators find, and are used only where exact: not in a segment
	 * with deletions. */
	static const char *const words[] = {"quick", "fox", "brown", "dog", "deleted", "nope"};
	bool shortcut = false, visited = false;
	for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
		q = sr_query_new(SR_Q_TERM);
		q->field = cm_strdup(CM_MEM_SEARCH, "title");
		q->value = cm_strdup(CM_MEM_SEARCH, words[w]);
		uint64_t seen = bitset_total(&x, q);
		CHECK(sr_count_shard(reader, q, 0, &n, &err) == CM_OK);
		CHECKF(n == seen, "count of [%s]: %llu, its iterator finds %llu", words[w],
		       (unsigned long long)n, (unsigned long long)seen);
		sr_plan *pl = NULL;
		REQUIRE(sr_plan_compile(&x, q, false, &pl) == CM_OK);
		for (size_t si = 0; si < x.nseg; si++) {
			uint64_t known;
			bool k = sr_plan_seg_count(&x, si, pl, &known);
			CHECK(!k || !x.segs[si].live);
			shortcut |= k;
			visited |= !k;
		}
		sr_plan_free(pl);
		sr_query_free(q);
	}
	CHECK(shortcut && visited); /* both paths ran */
	char body[160];
	snprintf(body, sizeof(body),
	         "{\"query\":{\"term\":{\"title\":\"fox\"}},\"size\":0,"
	         "\"track_total_hits\":true}");
	REQUIRE(search(body, &req, &res, &err) == CM_OK);
	CHECK(res.total == 2 && res.nhits == 0); /* docs 1 and 4 (7 is deleted) */
	sr_shard_result_free(&res);
	sr_request_free(&req);
	sr_exec_close(&x);
	expect_error(Q("{\"regexp\":{\"title\":\"(a|b)*a(a|b){20}\"}}"), "more than 10000 states");
	expect_error(Q("{\"range\":{\"n\":{\"gte\":\"abc\"}}}"), "failed to parse value [abc]");
	expect_error(Q("{\"prefix\":{\"n\":\"1\"}}"), "Can only use prefix queries");
	expect_ids(Q("{\"match\":{\"n\":{\"query\":\"abc\",\"lenient\":true}}}"), "", false);
	expect_error(Q("{\"match\":{\"n\":{\"query\":\"abc\"}}}"), "failed to parse value [abc]");
}

/* Aggregations ride the same windows: terms over the matches, deletes applied. */
static void
test_aggs(void)
{
	sr_request req;
	sr_shard_result res;
	cm_error err = {0};
	REQUIRE(search("{\"query\":{\"match\":{\"title\":\"quick fox dog\"}},\"size\":0,"
	               "\"aggs\":{\"t\":{\"terms\":{\"field\":\"tag\"}}}}",
	               &req, &res, &err) == CM_OK);
	REQUIRE(res.aggs != NULL);
	cm_buf out;
	cm_buf_init(&out, CM_MEM_SEARCH);
	CHECK(sr_agg_render(res.aggs, &out, &err) == CM_OK);
	cm_buf_put_u8(&out, 0);
	/* matches 1 (a), 2 (b), 3 (a,c), 4 (c); doc 7 (a) is deleted */
	CHECKF(strstr((char *)out.data, "{\"key\":\"a\",\"doc_count\":2}") &&
	           strstr((char *)out.data, "{\"key\":\"c\",\"doc_count\":2}") &&
	           strstr((char *)out.data, "{\"key\":\"b\",\"doc_count\":1}"),
	       "aggs: %s", (char *)out.data);
	CHECK(res.total == 4 && res.nhits == 0);
	cm_buf_free(&out);
	sr_shard_result_free(&res);
	sr_request_free(&req);
}

static void
test_automata(void)
{
	cm_error err = {0};
	sr_dfa *d;
	REQUIRE(sr_dfa_regexp("ab+c?[x-z]{1,2}", false, 10000, &d, &err) == CM_OK);
	CHECK(sr_dfa_match(d, (const uint8_t *)"abx", 3));
	CHECK(sr_dfa_match(d, (const uint8_t *)"abbbcyz", 7));
	CHECK(!sr_dfa_match(d, (const uint8_t *)"ac", 2));
	CHECK(!sr_dfa_match(d, (const uint8_t *)"abxyz", 5));
	size_t pl;
	const char *p = sr_dfa_prefix(d, &pl);
	CHECK(pl == 2 && !memcmp(p, "ab", 2));
	sr_dfa_free(d);
	REQUIRE(sr_dfa_regexp("[^a-c]é.", false, 10000, &d, &err) == CM_OK);
	CHECK(sr_dfa_match(d, (const uint8_t *)"dé€", strlen("dé€")));
	CHECK(!sr_dfa_match(d, (const uint8_t *)"aéx", strlen("aéx")));
	sr_dfa_free(d);
	REQUIRE(sr_dfa_wildcard("f*o?", false, &d, &err) == CM_OK);
	CHECK(sr_dfa_match(d, (const uint8_t *)"foox", 4));
	CHECK(sr_dfa_match(d, (const uint8_t *)"fox", 3));
	CHECK(!sr_dfa_match(d, (const uint8_t *)"fo", 2));
	sr_dfa_free(d);
	CHECK(sr_edit_distance((const uint8_t *)"abcd", 4, (const uint8_t *)"acbd", 4, 2, true) == 1);
	CHECK(sr_edit_distance((const uint8_t *)"abcd", 4, (const uint8_t *)"acbd", 4, 2, false) == 2);
	CHECK(sr_edit_distance((const uint8_t *)"kitten", 6, (const uint8_t *)"sitting", 7, 2, true) ==
	      3);
	CHECK(sr_edit_distance((const uint8_t *)"", 0, (const uint8_t *)"ab", 2, 2, true) == 2);
}

/* A shard still to run leaves out the hits ranked after the merge's worst
 * kept one (sr_hit_bar): by score, then by shard ordinal on ties. */
static void
bar_search(const char *body, bool with_bar, float score, uint32_t bar_shard, sr_shard_result *res)
{
	cJSON *j = cJSON_Parse(body);
	REQUIRE(j != NULL);
	sr_request req;
	sr_request_init(&req);
	cm_error err = {0};
	REQUIRE(sr_request_from_json(j, &req, &err) == CM_OK);
	cJSON_Delete(j);
	sr_hit_bar bar = {0};
	if (with_bar) {
		atomic_store(&bar.score, score);
		atomic_store(&bar.shard, bar_shard);
		atomic_store(&bar.set, true);
	}
	memset(res, 0, sizeof *res);
	CHECK(sr_search_shard_bar(reader, 5, NULL, &req, &bar, res, &err) == CM_OK);
	sr_request_free(&req);
}

static size_t
bar_hits(const char *body, bool with_bar, float score, uint32_t bar_shard, float *scores)
{
	sr_shard_result res;
	bar_search(body, with_bar, score, bar_shard, &res);
	size_t n = res.nhits;
	for (size_t i = 0; scores && i < n; i++)
		scores[i] = res.hits[i].score;
	sr_shard_result_free(&res);
	return n;
}

/* The bar starts as the shard's floor: the hits it leaves out are not
 * scored or not visited at all, but the shard's count stays exact and
 * the hits it keeps are those it kept without the bar. */
static void
check_bar_floor(const char *body, float score, uint32_t bar_shard)
{
	sr_shard_result a, b;
	bar_search(body, false, 0, 0, &a);
	bar_search(body, true, score, bar_shard, &b);
	CHECKF(a.total == b.total, "%s: total %llu with the bar, %llu without", body,
	       (unsigned long long)b.total, (unsigned long long)a.total);
	size_t kept = 0;
	for (size_t i = 0; i < a.nhits; i++)
		kept += a.hits[i].score > score || (a.hits[i].score == score && 5 < bar_shard);
	CHECKF(b.nhits == kept, "%s: %zu hits with the bar, %zu expected", body, b.nhits, kept);
	for (size_t i = 0; i < b.nhits && i < a.nhits; i++)
		CHECKF(!strcmp(a.hits[i].id, b.hits[i].id) && a.hits[i].score == b.hits[i].score,
		       "%s: hit %zu differs", body, i);
	if (b.nhits)
		CHECKF(a.max_score == b.max_score, "%s: max_score %g, %g without the bar", body,
		       b.max_score, a.max_score);
	sr_shard_result_free(&a);
	sr_shard_result_free(&b);
}

static void
test_bar(void)
{
	const char *all = "{\"query\":{\"match_all\":{}},\"size\":10}";
	float s[16];
	size_t n = bar_hits(all, false, 0, 0, s);
	CHECK(n == 6);
	/* ties with a bar from a lower shard rank after it; from a higher, before */
	CHECKF(bar_hits(all, true, s[0], 3, NULL) == 0, "ties after the bar's shard left out");
	CHECKF(bar_hits(all, true, s[0], 7, NULL) == n, "ties before the bar's shard kept");
	CHECKF(bar_hits(all, true, s[0] + 1.0f, 7, NULL) == 0, "all below the bar left out");
	const char *scored = "{\"query\":{\"match\":{\"title\":\"quick brown fox\"}},\"size\":10}";
	n = bar_hits(scored, false, 0, 0, s);
	REQUIRE(n >= 3);
	size_t ge = 0, gt = 0;
	for (size_t i = 0; i < n; i++) {
		ge += s[i] >= s[2];
		gt += s[i] > s[2];
	}
	CHECKF(bar_hits(scored, true, s[2], 7, NULL) == ge, "a tie with a later shard's bar is kept");
	CHECKF(bar_hits(scored, true, s[2], 3, NULL) == gt, "a tie with an earlier shard's bar is not");
	/* sorted searches ignore the bar (the merge publishes none for them) */
	CHECK(bar_hits("{\"query\":{\"match_all\":{}},\"sort\":[\"n\"]}", true, 1e9f, 0, NULL) ==
	      6);
	/* exact counts under the bar's floor */
	const char *bodies[] = {
	    "{\"query\":{\"match_all\":{}},\"size\":10,\"track_total_hits\":true}",
	    "{\"query\":{\"match\":{\"title\":\"quick brown fox\"}},\"size\":10,"
	    "\"track_total_hits\":true}",
	    "{\"query\":{\"match\":{\"title\":\"quick brown fox\"}},\"size\":2}",
	    "{\"query\":{\"bool\":{\"must\":[{\"match\":{\"title\":\"fox\"}},{\"range\":{\"n\":"
	    "{\"gte\":0}}}]}},\"size\":10,\"track_total_hits\":true}",
	};
	for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
		size_t nh = bar_hits(bodies[i], false, 0, 0, s);
		REQUIRE(nh >= 1);
		for (size_t j = 0; j < nh; j++) {
			check_bar_floor(bodies[i], s[j], 3);
			check_bar_floor(bodies[i], s[j], 7);
		}
		check_bar_floor(bodies[i], s[0] + 1.0f, 3);
		check_bar_floor(bodies[i], 0.0f, 3);
	}
}

/* The windows of a segment that may stop early ramp up within its first
 * block, each aligned to its size, then go a block at a time. */
static void
test_window_span(void)
{
	uint32_t lo = 0, want[] = {0, 256, 512, 1024, 2048, 4096, 8192, 12288};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
		CHECKF(lo == want[i], "window %zu starts at %u, want %u", i, lo, want[i]);
		uint32_t span = sr_window_span(lo, true);
		CHECKF(lo % span == 0 && span <= SR_WIN, "window at %u spans %u", lo, span);
		lo += span;
	}
	CHECK(sr_window_span(0, false) == SR_WIN && sr_window_span(SR_WIN, false) == SR_WIN);
}

/* Query then fetch: the query phase's hits (score, doc) fetched afterwards
 * by sr_fetch_hits, in any order, equal the hits fetched in one pass. */
static void
check_fetch_phase(const char *body)
{
	sr_request req;
	sr_shard_result one, q;
	cm_error err = {0};
	REQUIRE(search(body, &req, &one, &err) == CM_OK);
	CHECKF(sr_fetch_deferrable(&req), "%s: not deferrable", body);
	req.query_phase_only = true;
	REQUIRE(sr_search_shard(reader, 0, &req, &q, &err) == CM_OK);
	req.query_phase_only = false;
	REQUIRE(q.nhits == one.nhits);
	sr_hit **ptrs = calloc(q.nhits + 1, sizeof(*ptrs));
	for (size_t i = 0; i < q.nhits; i++) {
		CHECKF(q.hits[i].id == NULL && q.hits[i].source == NULL, "%s: hit %zu fetched", body,
		       i);
		ptrs[q.nhits - 1 - i] = &q.hits[i]; /* reversed: the fetch reorders */
	}
	CHECK(sr_fetch_hits(reader, &req, ptrs, q.nhits, &err) == CM_OK);
	for (size_t i = 0; i < q.nhits; i++) {
		const sr_hit *a = &one.hits[i], *b = &q.hits[i];
		bool same = a->doc == b->doc && !strcmp(a->id, b->id) &&
		            a->source_len == b->source_len &&
		            (!a->source || !memcmp(a->source, b->source, a->source_len)) &&
		            !a->source == !b->source && a->seq_no == b->seq_no &&
		            a->primary_term == b->primary_term && a->version == b->version &&
		            (a->score == b->score || (isnan(a->score) && isnan(b->score)));
		CHECKF(same, "%s: hit %zu: %s/%s", body, i, a->id, b->id ? b->id : "(none)");
	}
	free(ptrs);
	sr_shard_result_free(&one);
	sr_shard_result_free(&q);
	sr_request_free(&req);
}

static void
test_fetch_phase(void)
{
	check_fetch_phase("{\"query\":{\"match\":{\"title\":\"quick brown fox dog\"}}}");
	check_fetch_phase("{\"query\":{\"match_all\":{}},\"size\":20,\"version\":true,"
	                  "\"seq_no_primary_term\":true}");
	check_fetch_phase("{\"query\":{\"match_all\":{}},\"_source\":false,\"sort\":[\"n\"]}");
	check_fetch_phase("{\"query\":{\"range\":{\"n\":{\"gte\":0}}},\"from\":1,"
	                  "\"_source\":{\"includes\":[\"t*\"],\"excludes\":[\"tag\"]}}");
	/* what needs the shard's query state is fetched in the query phase */
	static const char *const in_query[] = {
	    "{\"query\":{\"match\":{\"title\":\"fox\"}},\"highlight\":{\"fields\":{\"title\":{}}}}",
	    "{\"query\":{\"match_all\":{}},\"collapse\":{\"field\":\"tag\"}}",
	    "{\"query\":{\"match_all\":{}},\"docvalue_fields\":[\"n\"]}",
	    "{\"query\":{\"match_all\":{}},\"profile\":true}",
	    "{\"query\":{\"match_all\":{}},\"size\":0}",
	};
	for (size_t i = 0; i < sizeof in_query / sizeof *in_query; i++) {
		sr_request req;
		sr_request_init(&req);
		cm_error err = {0};
		cJSON *j = cJSON_Parse(in_query[i]);
		REQUIRE(j != NULL);
		REQUIRE(sr_request_from_json(j, &req, &err) == CM_OK);
		cJSON_Delete(j);
		CHECKF(!sr_fetch_deferrable(&req), "%s: deferrable", in_query[i]);
		sr_request_free(&req);
	}
}

/* The rest of a segment counted without visiting it (sr_plan_seg_count,
 * once the heap is full and no doc left can enter): a constant-score
 * match_all or keyword term over two segments of more than one window each,
 * then with deletes (the term's count is then not known: it is visited). */
static void
test_known_rest(const char *dir)
{
	st_shard *keep_shard = shard;
	st_reader *keep_reader = reader;
	cm_error err = {0};
	shard = open_shard(dir, "{\"properties\":{\"tag\":{\"type\":\"keyword\"}}}");
	char id[16], src[32];
	for (int i = 1; i <= 10000; i++) {
		snprintf(id, sizeof id, "%d", i);
		snprintf(src, sizeof src, "{\"tag\":\"%s\"}", i % 2 ? "a" : "b");
		apply(id, src, false);
		if (i == 6000)
			REQUIRE(st_shard_refresh(shard) == CM_OK);
	}
	REQUIRE(st_shard_refresh(shard) == CM_OK);
	for (int pass = 0; pass < 2; pass++) {
		reader = st_shard_reader(shard);
		static const struct {
			const char *body;
			uint64_t total[2];
			const char *ids[2];
		} cases[] = {
		    {"{\"query\":{\"match_all\":{}},\"size\":3,\"track_total_hits\":true}",
		     {10000, 9996},
		     {"1,2,3", "2,3,4"}},
		    {"{\"query\":{\"term\":{\"tag\":\"a\"}},\"size\":3,\"track_total_hits\":true}",
		     {5000, 4997},
		     {"1,3,5", "3,5,9"}},
		    {"{\"query\":{\"constant_score\":{\"filter\":{\"term\":{\"tag\":\"b\"}}}},"
		     "\"size\":2,\"track_total_hits\":true}",
		     {5000, 4999},
		     {"2,4", "2,4"}},
		};
		for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
			sr_request req;
			sr_shard_result res;
			cm_err rc = search(cases[c].body, &req, &res, &err);
			CHECKF(rc == CM_OK, "%s: %s", cases[c].body, err.reason);
			if (rc) {
				sr_request_free(&req);
				continue;
			}
			char got[64] = "";
			for (size_t i = 0; i < res.nhits; i++) {
				strcat(got, i ? "," : "");
				strcat(got, res.hits[i].id);
			}
			CHECKF(res.total == cases[c].total[pass] && !strcmp(got, cases[c].ids[pass]),
			       "pass %d %s: total %llu [%s], want %llu [%s]", pass, cases[c].body,
			       (unsigned long long)res.total, got,
			       (unsigned long long)cases[c].total[pass], cases[c].ids[pass]);
			sr_shard_result_free(&res);
			sr_request_free(&req);
		}
		/* hits in both segments fetched after the query phase */
		check_fetch_phase("{\"query\":{\"term\":{\"tag\":\"b\"}},\"size\":5000,"
		                  "\"version\":true}");
		/* a bar no doc of this shard can beat: nothing kept, every doc
		 * counted (known counts, or windows counted unscored) */
		for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
			sr_shard_result res;
			bar_search(cases[c].body, true, 100.0f, 0, &res);
			CHECKF(res.total == cases[c].total[pass] && res.nhits == 0,
			       "pass %d %s under a bar: total %llu, %zu hits", pass, cases[c].body,
			       (unsigned long long)res.total, res.nhits);
			sr_shard_result_free(&res);
		}
		st_reader_release(reader);
		if (pass == 0) { /* a's at the head and in the second segment, a b there */
			apply("1", NULL, true);
			apply("7", NULL, true);
			apply("6001", NULL, true);
			apply("6002", NULL, true);
			REQUIRE(st_shard_refresh(shard) == CM_OK);
		}
	}
	st_shard_close(shard);
	cm_rm_rf(dir);
	shard = keep_shard;
	reader = keep_reader;
}

/* ---- field sort skipping non-competitive docs by packed compare ---- */

enum { CS_N1 = 13000, CS_N = 22000 }; /* two segments of several windows */

typedef struct cs_doc {
	bool live, fa, sy, has_mis;
	int64_t v, w, mv[2], mis;
	int nmv;
	double dv;
} cs_doc;

static cs_doc *cs_docs;

typedef struct cs_spec {
	int field; /* 0 v, 1 dv, 2 mv, 3 mis */
	bool desc, second;
} cs_spec;

static const cs_spec *cs_cur;

/* <0, 0, >0: key of a against b ascending, missing last */
static int
cs_key_cmp(const cs_doc *a, const cs_doc *b, int field, bool desc)
{
	if (field == 3 && (!a->has_mis || !b->has_mis))
		return a->has_mis == b->has_mis ? 0 : a->has_mis ? -1 : 1;
	int c;
	if (field == 0)
		c = (a->v > b->v) - (a->v < b->v);
	else if (field == 1)
		c = (a->dv > b->dv) - (a->dv < b->dv);
	else if (field == 3)
		c = (a->mis > b->mis) - (a->mis < b->mis);
	else {
		/* default mode: min ascending, max descending */
		int64_t x = desc ? a->mv[a->nmv - 1] : a->mv[0],
		        y = desc ? b->mv[b->nmv - 1] : b->mv[0];
		c = (x > y) - (x < y);
	}
	return desc ? -c : c;
}

static int
cs_cmp(const void *pa, const void *pb)
{
	int a = *(const int *)pa, b = *(const int *)pb;
	int c = cs_key_cmp(&cs_docs[a], &cs_docs[b], cs_cur->field, cs_cur->desc);
	if (!c && cs_cur->second)
		c = -((cs_docs[a].w > cs_docs[b].w) - (cs_docs[a].w < cs_docs[b].w));
	return c ? c : (a > b) - (a < b);
}

/* One sorted search against the brute-force order; false when it differs. */
static bool
cs_check(const cs_spec *sp, int fl, int size, bool tth, int *ids, bool quiet)
{
	static const char *const fields[] = {"v", "dv", "mv", "mis"};
	static const char *const filters[] = {"{\"bool\":{\"filter\":[{\"term\":{\"f\":\"a\"}}]}}",
	                                      "{\"bool\":{\"filter\":[{\"term\":{\"s\":\"y\"}}]}}",
	                                      "{\"match_all\":{}}"};
	size_t n = 0;
	for (int i = 0; i < CS_N; i++)
		if (cs_docs[i].live && (fl == 2 || (fl == 0 ? cs_docs[i].fa : cs_docs[i].sy)))
			ids[n++] = i;
	cs_cur = sp;
	qsort(ids, n, sizeof(int), cs_cmp);
	char body[512];
	snprintf(body, sizeof body,
	         "{\"size\":%d,\"track_total_hits\":%s,\"_source\":false,\"query\":%s,"
	         "\"sort\":[{\"%s\":\"%s\"}%s]}",
	         size, tth ? "true" : "false", filters[fl], fields[sp->field],
	         sp->desc ? "desc" : "asc", sp->second ? ",{\"w\":\"desc\"}" : "");
	sr_request req;
	sr_shard_result res;
	cm_error err = {0};
	cm_err rc = search(body, &req, &res, &err);
	CHECKF(rc == CM_OK, "%s: %s", body, err.reason);
	if (rc) {
		sr_request_free(&req);
		return false;
	}
	size_t want = n < (size_t)size ? n : (size_t)size;
	bool ok = res.nhits == want && (!tth || res.total == n);
	for (size_t i = 0; ok && i < want; i++)
		ok = res.hits[i].id && atoi(res.hits[i].id) == ids[i];
	CHECKF(ok || quiet, "%s: %zu hits (want %zu), total %llu (want %zu), first %s (want %d)",
	       body, res.nhits, want, (unsigned long long)res.total, n,
	       res.nhits ? res.hits[0].id : "-", n ? ids[0] : -1);
	sr_shard_result_free(&res);
	sr_request_free(&req);
	return ok;
}

/* Top-k field sorts under a filter against brute force: more than one
 * window per segment, many ties at the heap's bar (and a second key that
 * breaks them), deletes, asc and desc, doubles with negatives; the
 * multi-valued and missing-value keys take the per-doc path. */
static void
test_sort_competitive(const char *dir)
{
	st_shard *keep_shard = shard;
	st_reader *keep_reader = reader;
	const char *mj =
	    "{\"properties\":{\"f\":{\"type\":\"keyword\"},\"s\":{\"type\":\"keyword\"},"
	    "\"v\":{\"type\":\"long\"},\"w\":{\"type\":\"long\"},"
	    "\"dv\":{\"type\":\"double\"},\"mv\":{\"type\":\"long\"},"
	    "\"mis\":{\"type\":\"long\"}}}";
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
	cs_docs = calloc(CS_N, sizeof *cs_docs);
	REQUIRE(cs_docs != NULL);
	uint64_t h = 42;
	char id[16], src[256];
	enum { CS_BATCH = 500 };
	static st_op ops[CS_BATCH];
	static st_op_result res[CS_BATCH];
	static char bid[CS_BATCH][16], *bsrc[CS_BATCH];
	size_t nops = 0;
	for (int i = 0; i < CS_N; i++) {
		cs_doc *d = &cs_docs[i];
#define CS_NEXT() (h = h * 6364136223846793005ull + 1442695040888963407ull, h >> 33)
		d->live = true;
		d->fa = CS_NEXT() % 10 < 7;
		d->sy = CS_NEXT() % 100 == 0;
		d->v = (int64_t)(CS_NEXT() % 700) - 100;
		d->w = (int64_t)(CS_NEXT() % 1000);
		d->dv = ((double)(CS_NEXT() % 2001) - 1000) / 8.0;
		d->nmv = CS_NEXT() % 5 ? 1 : 2;
		d->mv[0] = (int64_t)(CS_NEXT() % 500);
		d->mv[1] = d->mv[0] + (int64_t)(CS_NEXT() % 500);
		d->has_mis = CS_NEXT() % 3 != 0;
		d->mis = (int64_t)(CS_NEXT() % 300);
#undef CS_NEXT
		int n = snprintf(src, sizeof src,
		                 "{\"f\":\"%s\",\"s\":\"%s\",\"v\":%lld,\"w\":%lld,\"dv\":%.3f,",
		                 d->fa ? "a" : "b", d->sy ? "y" : "n", (long long)d->v,
		                 (long long)d->w, d->dv);
		if (d->nmv == 2)
			n += snprintf(src + n, sizeof src - n, "\"mv\":[%lld,%lld]",
			              (long long)d->mv[0], (long long)d->mv[1]);
		else
			n += snprintf(src + n, sizeof src - n, "\"mv\":%lld", (long long)d->mv[0]);
		if (d->has_mis)
			n += snprintf(src + n, sizeof src - n, ",\"mis\":%lld", (long long)d->mis);
		snprintf(src + n, sizeof src - n, "}");
		/* in batches: one translog sync per batch, not per doc */
		st_op *op = &ops[nops];
		memset(op, 0, sizeof *op);
		op->type = ST_OP_INDEX;
		snprintf(bid[nops], sizeof bid[nops], "%d", i);
		op->id = bid[nops];
		op->id_len = strlen(bid[nops]);
		op->source = bsrc[nops] = strdup(src);
		op->source_len = strlen(src);
		op->seq_no = ST_NO_SEQ;
		op->if_seq_no = ST_NO_SEQ;
		if (++nops == CS_BATCH || i + 1 == CS_N1 || i + 1 == CS_N) {
			REQUIRE(st_shard_apply(shard, ops, nops, res) == CM_OK);
			for (size_t b = 0; b < nops; b++) {
				CHECK(res[b].err == CM_OK);
				free(bsrc[b]);
			}
			nops = 0;
		}
		if (i + 1 == CS_N1)
			REQUIRE(st_shard_refresh(shard) == CM_OK);
	}
	REQUIRE(st_shard_refresh(shard) == CM_OK);
	/* deletes in both segments, among them docs that would rank first */
	for (int i = 0; i < CS_N; i++)
		if (i % 13 == 5 || (cs_docs[i].v == -100 && i % 2)) {
			snprintf(id, sizeof id, "%d", i);
			apply(id, NULL, true);
			cs_docs[i].live = false;
		}
	REQUIRE(st_shard_refresh(shard) == CM_OK);
	reader = st_shard_reader(shard);
	int *ids = malloc(CS_N * sizeof(int));
	REQUIRE(ids != NULL);
	int failures = 0;
	/* every key, order, second key, filter, size and total tracking */
	for (int c = 0; c < 4 * 2 * 2 * 3 * 2 * 2; c++) {
		cs_spec sp = {c % 4, c / 4 % 2, c / 8 % 2};
		int fl = c / 16 % 3, size = c / 48 % 2 ? 100 : 10;
		bool tth = c / 96 % 2;
		failures += !cs_check(&sp, fl, size, tth, ids, failures > 10);
	}
	free(ids);
	free(cs_docs);
	st_reader_release(reader);
	st_shard_close(shard);
	cm_rm_rf(dir);
	shard = keep_shard;
	reader = keep_reader;
}

/* A phrase of a rare and a frequent term reads positions only on the docs
 * holding both (the rare term leads), not on every doc of the frequent one. */
static void
test_phrase_positions(const char *dir)
{
	st_shard *sh = open_shard(dir, "{\"properties\":{\"t\":{\"type\":\"text\"}}}");
	st_shard *keep = shard;
	shard = sh;
	char id[16], src[96];
	uint32_t ndocs = 2000, both = 0;
	for (uint32_t i = 0; i < ndocs; i++) {
		/* "rare common" in 7 docs, both terms apart in 7 more */
		const char *body = i % 300 == 7   ? "rare common filler"
		                   : i % 300 == 9 ? "common filler rare"
		                                  : "common filler common words";
		if (i % 300 == 7 || i % 300 == 9)
			both++;
		snprintf(id, sizeof id, "%u", i);
		snprintf(src, sizeof src, "{\"t\":\"%s\"}", body);
		apply(id, src, false);
	}
	REQUIRE(st_shard_refresh(sh) == CM_OK);
	st_reader *r = st_shard_reader(sh);
	cm_error err = {0};
	cJSON *j = cJSON_Parse("{\"query\":{\"match_phrase\":{\"t\":\"rare common\"}}}");
	sr_request req;
	sr_request_init(&req);
	REQUIRE(sr_request_from_json(j, &req, &err) == CM_OK);
	cJSON_Delete(j);
	sr_exec x;
	REQUIRE(sr_exec_open(&x, r, 0, &err) == CM_OK);
	sr_plan *pl = NULL;
	REQUIRE(sr_plan_compile(&x, req.query, false, &pl) == CM_OK);
	uint64_t hits = 0;
	for (size_t si = 0; si < x.nseg; si++) {
		sr_it *it = NULL;
		REQUIRE(sr_it_build(&x, si, pl, &it) == CM_OK);
		while (it->doc != ST_NO_MORE_DOCS) {
			hits++;
			it->ops->next(it);
		}
		sr_it_free(it);
	}
	CHECKF(hits == 7, "phrase hits %llu", (unsigned long long)hits);
	/* two terms' positions on each of the 14 docs holding both */
	CHECKF(x.pos_docs == 2 * (uint64_t)both, "positions read on %llu docs, want %u",
	       (unsigned long long)x.pos_docs, 2 * both);
	CHECKF(x.pos_read == 2 * (uint64_t)both, "%llu positions read",
	       (unsigned long long)x.pos_read);
	/* of the frequent term's 16 position blocks only the 7 holding a
	 * candidate are located, plus the rare term's one */
	CHECKF(x.pos_blocks <= 8, "%llu position blocks", (unsigned long long)x.pos_blocks);
	printf("phrase [rare common] over %u docs: positions of %llu docs read (%llu positions, "
	       "%llu blocks)\n",
	       ndocs, (unsigned long long)x.pos_docs, (unsigned long long)x.pos_read,
	       (unsigned long long)x.pos_blocks);
	sr_plan_free(pl);
	sr_exec_close(&x);
	sr_request_free(&req);
	st_reader_release(r);
	st_shard_close(sh);
	shard = keep;
	cm_rm_rf(dir);
}

int
main(void)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/tmp/shoal-exec-test-%d", (int)getpid());
	setup(dir);
	test_queries();
	test_sorting();
	test_scores();
	test_counts();
	test_aggs();
	test_automata();
	test_bar();
	test_fetch_phase();
	test_window_span();
	char dir2[80];
	snprintf(dir2, sizeof dir2, "%s-rest", dir);
	test_known_rest(dir2);
	snprintf(dir2, sizeof dir2, "%s-csort", dir);
	test_sort_competitive(dir2);
	snprintf(dir2, sizeof dir2, "%s-phrase", dir);
	test_phrase_positions(dir2);
	st_reader_release(reader);
	st_shard_close(shard);
	cm_rm_rf(dir);
	return check_report("exec_test");
}
