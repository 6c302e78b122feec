/* The node's index registry: names, settings, mappings, routing, writes,
 * counts, scroll contexts, persistence across reopen, the data-dir lock. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "check.h"
#include "nd.h"
#include "nd_private.h"

static nd_node *
open_node(const char *dir)
{
	nd_node_opts o = {
	    .data_dir = dir, .name = "t", .search_threads = 2, .destructive_requires_name = true};
	nd_node *n = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = nd_node_open(&o, &n, &err);
	CHECKF(rc == CM_OK, "open: %s", err.reason);
	return n;
}

static cm_err
put(nd_index *ix, const char *id, const char *src, st_op_result *res)
{
	st_op op;
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = nd_index_prepare_doc(ix, id, strlen(id), src, strlen(src), &err);
	if (rc)
		return rc;
	memset(&op, 0, sizeof(op));
	op.type = ST_OP_INDEX;
	op.id = id;
	op.id_len = strlen(id);
	op.source = src;
	op.source_len = strlen(src);
	op.seq_no = ST_NO_SEQ;
	op.if_seq_no = ST_NO_SEQ;
	return nd_index_apply(ix, nd_index_route(ix, id, strlen(id)), &op, 1, res);
}

static uint64_t
count_all(nd_node *n, nd_index *ix)
{
	nd_target *t = nd_targets_open(&ix, 1);
	sr_query *q = sr_query_new(SR_Q_MATCH_ALL);
	uint64_t c = 0;
	cm_error err;
	cm_error_clear(&err);
	CHECK(nd_count(n, t, 1, q, 0, &c, &err) == CM_OK);
	sr_query_free(q);
	nd_targets_close(t, 1);
	return c;
}

static void
test_names(void)
{
	cm_error e;
	const char *bad[] = {"",    "UP",  "_x",   "-x",  "+x",  "a b", "a*", "a?",
	                     "a,b", "a/b", "a\\b", "a#b", "a:b", ".",   ".."};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cm_error_clear(&e);
		CHECKF(nd_index_name_check(bad[i], &e) == CM_EBADNAME, "%s", bad[i]);
	}
	cm_error_clear(&e);
	CHECK(nd_index_name_check("logs-2024.01.31_x", &e) == CM_OK);
	int64_t ms;
	CHECK(nd_parse_time("1s", &ms) && ms == 1000);
	CHECK(nd_parse_time("250ms", &ms) && ms == 250);
	CHECK(nd_parse_time("2m", &ms) && ms == 120000);
	CHECK(nd_parse_time("-1", &ms) && ms == -1);
	CHECK(nd_parse_time("0", &ms) && ms == 0);
	CHECK(!nd_parse_time("soon", &ms) && !nd_parse_time("", &ms) && !nd_parse_time("5", &ms));
	char a[21], b[21];
	nd_gen_id(a);
	nd_gen_id(b);
	CHECK(strlen(a) == 20 && strcmp(a, b) != 0);
}

static void
test_registry(const char *dir)
{
	nd_node *n = open_node(dir), *n2 = NULL;
	nd_index *ix = NULL, **list;
	size_t cnt;
	cm_error err;
	st_op_result res;
	cJSON *body = cJSON_Parse("{\"settings\":{\"index\":{\"number_of_shards\":3},"
	                          "\"refresh_interval\":\"-1\"},"
	                          "\"mappings\":{\"properties\":{\"k\":{\"type\":\"keyword\"}}}}");

	if (!n)
		return;
	/* a second node on the same directory is refused */
	nd_node_opts o = {.data_dir = dir};
	cm_error_clear(&err);
	CHECK(nd_node_open(&o, &n2, &err) == CM_EBUSY);
	CHECKF(strstr(err.reason, "in use by another shoal node") != NULL, "%s", err.reason);

	cm_error_clear(&err);
	CHECK(nd_index_create(n, "books", body, &ix, &err) == CM_OK);
	cJSON_Delete(body);
	cm_error_clear(&err);
	CHECK(nd_index_create(n, "books", NULL, NULL, &err) == CM_EEXISTS);
	CHECK(nd_index_nshards(ix) == 3);
	CHECK(nd_index_settings(ix)->refresh_interval_ms == -1);
	CHECK(strlen(nd_index_uuid(ix)) == 22);

	/* routing is xxh64 % shards and spreads ids */
	int hits[3] = {0, 0, 0};
	for (int i = 0; i < 300; i++) {
		char id[16];
		snprintf(id, sizeof(id), "%d", i);
		hits[nd_index_route(ix, id, strlen(id))]++;
	}
	CHECK(hits[0] > 50 && hits[1] > 50 && hits[2] > 50);

	/* writes with a dynamic field: mapping merged before the doc lands */
	for (int i = 0; i < 20; i++) {
		char id[16], src[64];
		snprintf(id, sizeof(id), "d%d", i);
		snprintf(src, sizeof(src), "{\"k\":\"v%d\",\"n\":%d}", i % 3, i);
		CHECK(put(ix, id, src, &res) == CM_OK && res.err == CM_OK);
	}
	st_mapping *m = nd_index_mapping(ix);
	const st_field_def *f = st_mapping_find(m, "n");
	CHECK(f && f->type == ST_FT_LONG);
	st_mapping_unref(m);
	CHECK(put(ix, "bad", "{\"n\":\"abc\"}", &res) == CM_EMAPPING);
	CHECK(count_all(n, ix) == 0); /* refresh_interval -1: not yet visible */
	CHECK(nd_index_refresh(ix) == CM_OK);
	CHECK(count_all(n, ix) == 20);

	/* settings updates: dynamic ok, static refused */
	cJSON *s = cJSON_Parse("{\"index\":{\"refresh_interval\":\"5s\"}}");
	cm_error_clear(&err);
	CHECK(nd_index_put_settings(ix, s, &err) == CM_OK);
	cJSON_Delete(s);
	s = cJSON_Parse("{\"number_of_shards\":2}");
	cm_error_clear(&err);
	CHECK(nd_index_put_settings(ix, s, &err) == CM_EINVAL);
	cJSON_Delete(s);

	/* scroll contexts: pages of 5 over the 20 docs, each exactly once */
	{
		char *sid = NULL, *next = NULL;
		size_t nctx = 0, freed = 0, pages = 0;
		cm_buf out;
		cm_buf_init(&out, CM_MEM_NODE);
		cm_error_clear(&err);
		CHECK(nd_scroll_open(n, &ix, 1, "{\"size\":5,\"sort\":[\"_doc\"]}", 60000, 0, 0,
		                     false, &out, &sid, &err) == CM_OK);
		CHECK(sid != NULL && nd_ctx_open_count(n) == 3); /* one per shard */
		for (;;) {
			cm_buf_put_u8(&out, 0); /* a C string for strstr */
			if (!strstr((const char *)out.data, "\"_id\""))
				break;
			pages++;
			cm_buf_reset(&out);
			cm_error_clear(&err);
			CHECK(nd_scroll_next(n, sid, 0, &out, &next, &err) == CM_OK);
			cm_free(CM_MEM_NODE, sid);
			sid = next;
			if (pages > 10)
				break;
		}
		CHECKF(pages == 4, "%zu pages", pages);
		cm_error_clear(&err);
		CHECK(nd_scroll_clear(n, sid, &nctx, &freed, &err) == CM_OK && nctx == 3 &&
		      freed == 3);
		CHECK(nd_ctx_open_count(n) == 0);
		cm_buf_reset(&out);
		cm_error_clear(&err);
		CHECK(nd_scroll_next(n, sid, 0, &out, &next, &err) == CM_ENOTFOUND);
		cm_error_clear(&err);
		CHECK(nd_scroll_next(n, "not*base64", 0, &out, &next, &err) == CM_EINVAL);
		cm_free(CM_MEM_NODE, sid);
		cm_buf_free(&out);
	}

	/* resolve */
	nd_index *tmp = NULL;
	cm_error_clear(&err);
	CHECK(nd_index_create(n, "books-2", NULL, &tmp, &err) == CM_OK);
	nd_index_release(tmp);
	cm_error_clear(&err);
	CHECK(nd_resolve(n, "books*", false, &list, &cnt, &err) == CM_OK && cnt == 2);
	for (size_t i = 0; i < cnt; i++)
		nd_index_release(list[i]);
	cm_free(CM_MEM_NODE, list);
	cm_error_clear(&err);
	CHECK(nd_resolve(n, "books*,-books-2", false, &list, &cnt, &err) == CM_OK && cnt == 1);
	for (size_t i = 0; i < cnt; i++)
		nd_index_release(list[i]);
	cm_free(CM_MEM_NODE, list);
	cm_error_clear(&err);
	CHECK(nd_resolve(n, "nope", false, &list, &cnt, &err) == CM_ENOINDEX);
	tmp = nd_index_get(n, "books-2");
	cm_error_clear(&err);
	CHECK(tmp && nd_index_delete(n, tmp, &err) == CM_OK);
	nd_index_release(tmp);
	CHECK(nd_index_get(n, "books-2") == NULL);

	nd_index_release(ix);
	nd_node_close(n);

	/* reopen: index, settings, mapping and documents are back */
	n = open_node(dir);
	if (!n)
		return;
	ix = nd_index_get(n, "books");
	CHECK(ix != NULL);
	if (ix) {
		CHECK(nd_index_nshards(ix) == 3);
		CHECK(nd_index_settings(ix)->refresh_interval_ms == 5000);
		m = nd_index_mapping(ix);
		CHECK(st_mapping_find(m, "k") && st_mapping_find(m, "n"));
		st_mapping_unref(m);
		CHECK(count_all(n, ix) == 20);
		nd_index_release(ix);
	}
	CHECK(nd_index_get(n, "books-2") == NULL);
	nd_node_close(n);
}

/* Search threads woken for a search's shards: one per ND_DOCS_PER_HELPER
 * live docs, fewer than the shards (the caller takes shards too). */
static void
test_search_helpers(void)
{
	CHECK(nd_search_helpers(0, 0) == 0);
	CHECK(nd_search_helpers(10000000, 1) == 0);
	CHECK(nd_search_helpers(20000, 5) == 0); /* W1: five shards of 4,000 docs */
	CHECK(nd_search_helpers(ND_DOCS_PER_HELPER - 1, 16) == 0);
	CHECK(nd_search_helpers(ND_DOCS_PER_HELPER, 16) == 1);
	CHECK(nd_search_helpers(3 * (uint64_t)ND_DOCS_PER_HELPER + 5, 16) == 3);
	CHECK(nd_search_helpers(100 * (uint64_t)ND_DOCS_PER_HELPER, 5) == 4);
}

int
main(void)
{
	char dir[] = "/tmp/nd_test.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	test_names();
	test_search_helpers();
	test_registry(dir);
	cm_rm_rf(dir);
	return check_report("nd_test");
}
