/* The cluster calls' messages (proto/cluster.proto, pr_cluster.c): each
 * request and reply round-trips exactly (64-bit figures above 2^53,
 * binary ids and sources with NULs), unknown kinds are refused, and bad
 * bytes fail cleanly with everything freed. */
#include <string.h>

#include "../common/cm_alloc.h"
#include "check.h"
#include "pr.h"

static void
test_meta(void)
{
	char *ix[] = {"a", "b-2"};
	pr_meta_change in = {.kind = PR_META_PUT_SETTINGS,
	                     .indices = ix,
	                     .nindices = 2,
	                     .source = "{\"index\":{\"refresh_interval\":\"1s\"}}",
	                     .source_len = 34};
	cm_buf b;
	cm_error e;
	pr_meta_change out;
	cm_buf_init(&b, CM_MEM_NODE);
	cm_error_clear(&e);
	pr_meta_change_encode(&in, &b);
	REQUIRE(pr_meta_change_decode(b.data, b.len, &out, &e) == CM_OK);
	CHECK(out.kind == PR_META_PUT_SETTINGS && out.nindices == 2);
	CHECK(strcmp(out.indices[0], "a") == 0 && strcmp(out.indices[1], "b-2") == 0);
	CHECK(out.source_len == 34 && memcmp(out.source, in.source, 34) == 0);
	CHECK(strcmp(pr_meta_kind_name(out.kind), "put_settings") == 0);
	pr_meta_change_free(&out);
	/* a kind this node does not know is refused, and freed */
	in.kind = (pr_meta_kind)42;
	cm_buf_reset(&b);
	pr_meta_change_encode(&in, &b);
	cm_error_clear(&e);
	CHECK(pr_meta_change_decode(b.data, b.len, &out, &e) == CM_EINVAL);
	CHECK(strstr(e.reason, "unknown metadata change") != NULL);
	pr_meta_change_free(&out);
	CHECK(strcmp(pr_meta_kind_name((pr_meta_kind)42), "unknown") == 0);
	/* a mapping per index, in the order of the indices */
	char *docs[] = {"{\"properties\":{}}", "{}"};
	size_t lens[] = {17, 2};
	in.kind = PR_META_PUT_MAPPING;
	in.source = "";
	in.source_len = 0;
	in.sources = docs;
	in.source_lens = lens;
	in.nsources = 2;
	cm_buf_reset(&b);
	pr_meta_change_encode(&in, &b);
	cm_error_clear(&e);
	REQUIRE(pr_meta_change_decode(b.data, b.len, &out, &e) == CM_OK);
	CHECK(out.nsources == 2 && out.source_lens[0] == 17 && out.source_lens[1] == 2);
	CHECK(memcmp(out.sources[0], docs[0], 17) == 0 && memcmp(out.sources[1], "{}", 2) == 0);
	pr_meta_change_free(&out);
	/* as many documents as indices, or none */
	in.nsources = 1;
	cm_buf_reset(&b);
	pr_meta_change_encode(&in, &b);
	cm_error_clear(&e);
	CHECK(pr_meta_change_decode(b.data, b.len, &out, &e) == CM_EINVAL);
	CHECK(strstr(e.reason, "carries 1 documents") != NULL);
	pr_meta_change_free(&out);

	pr_meta_reply r = {.acknowledged = true, .index = "new", .reroute = "{}", .reroute_len = 2},
	              r2;
	cm_buf_reset(&b);
	pr_meta_reply_encode(&r, &b);
	REQUIRE(pr_meta_reply_decode(b.data, b.len, &r2, &e) == CM_OK);
	CHECK(r2.acknowledged && strcmp(r2.index, "new") == 0 && r2.reroute_len == 2);
	pr_meta_reply_free(&r2);
	cm_buf_free(&b);
}

static void
test_get(void)
{
	char id[] = {'i', 0, 'd'};
	pr_get_req g = {.index = "ix",
	                .shard = 7,
	                .id = id,
	                .id_len = 3,
	                .any_copy = true,
	                .refreshed = true},
	           g2;
	cm_buf b, src;
	cm_error e;
	cm_buf_init(&b, CM_MEM_NODE);
	cm_buf_init(&src, CM_MEM_NODE);
	cm_error_clear(&e);
	pr_get_req_encode(&g, &b);
	REQUIRE(pr_get_req_decode(b.data, b.len, &g2, &e) == CM_OK);
	CHECK(strcmp(g2.index, "ix") == 0 && g2.shard == 7 && g2.id_len == 3);
	CHECK(memcmp(g2.id, id, 3) == 0 && g2.any_copy && g2.refreshed);
	pr_get_req_free(&g2);

	st_doc_meta m = {.seq_no = (1ull << 53) + 1,
	                 .primary_term = UINT64_MAX - 1,
	                 .version = (int64_t)(1ull << 62) + 3},
	            m2;
	const char source[] = "{\"a\":\"\\u0000 \\\"x\\\"\"}";
	cm_buf_reset(&b);
	pr_get_reply_encode(true, &m, source, sizeof(source) - 1, &b);
	bool found = false;
	REQUIRE(pr_get_reply_decode(b.data, b.len, &found, &m2, &src, &e) == CM_OK);
	CHECK(found && m2.seq_no == m.seq_no && m2.primary_term == m.primary_term &&
	      m2.version == m.version);
	CHECK(src.len == sizeof(source) - 1 && memcmp(src.data, source, src.len) == 0);
	cm_buf_reset(&b);
	cm_buf_reset(&src);
	pr_get_reply_encode(false, NULL, NULL, 0, &b);
	REQUIRE(pr_get_reply_decode(b.data, b.len, &found, &m2, &src, &e) == CM_OK);
	CHECK(!found && src.len == 0);
	cm_buf_free(&b);
	cm_buf_free(&src);
}

static void
test_figures(void)
{
	uint64_t docs[] = {1, 2, 3}, bytes[] = {10, 20, 30}, del[] = {0, 1, 0};
	pr_index_stats ixs[] = {{"x", 3, docs, bytes, del}, {"y", 0, NULL, NULL, NULL}};
	pr_shard_stats s = {ixs, 2}, s2;
	cm_buf b, rows;
	cm_error e;
	cm_buf_init(&b, CM_MEM_NODE);
	cm_buf_init(&rows, CM_MEM_NODE);
	cm_error_clear(&e);
	pr_shard_stats_encode(&s, &b);
	REQUIRE(pr_shard_stats_decode(b.data, b.len, &s2, &e) == CM_OK);
	CHECK(s2.n == 2 && strcmp(s2.indices[0].index, "x") == 0 && s2.indices[0].nshards == 3);
	CHECK(s2.indices[0].docs[2] == 3 && s2.indices[0].store_bytes[1] == 20 &&
	      s2.indices[0].deleted[1] == 1);
	CHECK(strcmp(s2.indices[1].index, "y") == 0 && s2.indices[1].nshards == 0);
	pr_shard_stats_free(&s2);

	const char text[] = "ix 0 peer done\nix 1 file done\n";
	cm_buf_reset(&b);
	pr_recovery_rows_encode(text, sizeof(text) - 1, &b);
	REQUIRE(pr_recovery_rows_decode(b.data, b.len, &rows, &e) == CM_OK);
	CHECK(rows.len == sizeof(text) - 1 && memcmp(rows.data, text, rows.len) == 0);
	/* a last row without its newline gets one */
	cm_buf_reset(&b);
	cm_buf_reset(&rows);
	pr_recovery_rows_encode("a\n\nb", 4, &b);
	REQUIRE(pr_recovery_rows_decode(b.data, b.len, &rows, &e) == CM_OK);
	CHECK(rows.len == 4 && memcmp(rows.data, "a\nb\n", 4) == 0);
	cm_buf_free(&b);
	cm_buf_free(&rows);
}

static void
count_keep(void *arg, const char *name)
{
	CHECK(strncmp(name, "node-", 5) == 0);
	(*(int *)arg)++;
}

static void
test_handoff_and_views(void)
{
	pr_handoff h = {.index = "ix", .uuid = "u", .shard = 3, .term = (1ull << 60) + 1,
	                .release = true},
	           h2;
	cm_buf b;
	cm_error e;
	cm_buf_init(&b, CM_MEM_NODE);
	cm_error_clear(&e);
	pr_handoff_encode(&h, &b);
	REQUIRE(pr_handoff_decode(b.data, b.len, &h2, &e) == CM_OK);
	CHECK(strcmp(h2.index, "ix") == 0 && strcmp(h2.uuid, "u") == 0 && h2.shard == 3 &&
	      h2.term == h.term && h2.release);
	pr_handoff_free(&h2);
	const char *keep[] = {"node-1", "node-3"};
	int n = 0;
	cm_buf_reset(&b);
	pr_handoff_reply_encode(keep, 2, &b);
	REQUIRE(pr_handoff_reply_decode(b.data, b.len, count_keep, &n, &e) == CM_OK);
	CHECK(n == 2);

	char *kind = NULL, *view = NULL;
	size_t vl = 0;
	cm_buf_reset(&b);
	pr_node_view_req_encode("tasks abc", &b);
	REQUIRE(pr_node_view_req_decode(b.data, b.len, &kind, &e) == CM_OK);
	CHECK(strcmp(kind, "tasks abc") == 0);
	cm_free(CM_MEM_NODE, kind);
	cm_buf_reset(&b);
	pr_node_view_reply_encode("{\"a\":1}", 7, &b);
	REQUIRE(pr_node_view_reply_decode(b.data, b.len, &view, &vl, &e) == CM_OK);
	CHECK(vl == 7 && strcmp(view, "{\"a\":1}") == 0);
	cm_free(CM_MEM_NODE, view);

	pr_broadcast_op op;
	char *ixs = NULL;
	cm_buf_reset(&b);
	pr_broadcast_encode(PR_BROADCAST_FLUSH, "a*,-b", &b);
	REQUIRE(pr_broadcast_decode(b.data, b.len, &op, &ixs, &e) == CM_OK);
	CHECK(op == PR_BROADCAST_FLUSH && strcmp(ixs, "a*,-b") == 0);
	CHECK(strcmp(pr_broadcast_op_name(op), "flush") == 0);
	cm_free(CM_MEM_NODE, ixs);
	cm_buf_reset(&b);
	pr_broadcast_encode((pr_broadcast_op)9, "a", &b);
	cm_error_clear(&e);
	CHECK(pr_broadcast_decode(b.data, b.len, &op, &ixs, &e) == CM_EINVAL && ixs == NULL);
	cm_buf_free(&b);
}

/* Truncated and garbled messages: a clean CM_EPARSE, nothing leaked
 * (the sanitizer build checks). */
static void
test_bad_bytes(void)
{
	const uint8_t junk[][6] = {{0x0a, 0x05, 'a'}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	                           {0x12, 0x80}};
	for (size_t i = 0; i < 3; i++) {
		cm_error e;
		pr_meta_change m;
		pr_get_req g;
		pr_shard_stats s;
		pr_handoff h;
		char *k = NULL;
		cm_error_clear(&e);
		CHECK(pr_meta_change_decode(junk[i], sizeof(junk[i]), &m, &e) != CM_OK);
		pr_meta_change_free(&m);
		cm_error_clear(&e);
		CHECK(pr_get_req_decode(junk[i], sizeof(junk[i]), &g, &e) != CM_OK);
		pr_get_req_free(&g);
		cm_error_clear(&e);
		CHECK(pr_shard_stats_decode(junk[i], sizeof(junk[i]), &s, &e) != CM_OK);
		pr_shard_stats_free(&s);
		cm_error_clear(&e);
		CHECK(pr_handoff_decode(junk[i], sizeof(junk[i]), &h, &e) != CM_OK);
		pr_handoff_free(&h);
		cm_error_clear(&e);
		CHECK(pr_node_view_req_decode(junk[i], sizeof(junk[i]), &k, &e) != CM_OK && !k);
	}
}

int
main(void)
{
	test_meta();
	test_get();
	test_figures();
	test_handoff_and_views();
	test_bad_bytes();
	return check_report("cluster_msg_test");
}
