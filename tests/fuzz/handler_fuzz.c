/* libFuzzer target: what a data node does with each transport message it
 * serves (node/nd_cluster.c serve()), short of the cluster itself. The
 * first input byte picks the message type, the rest is its payload:
 *  0 PR_SEARCH   pr_search_req_decode, nd_cl_request_build (body and
 *                typed_keys), the ordinals, then the search itself on a
 *                fixed local index (sr_search_shard, as cl_serve_search
 *                runs it) and the reply's encode/decode round trip,
 *                aggregation partials included.
 *  1 PR_BULK     pr_bulk_req_decode, documents prepared under the index
 *                mapping (dynamic fields), ops applied to a shard as a
 *                replica or primary copy would (nd_index_apply).
 *  2 PR_META_CHANGE pr_meta_change_decode, then what the master does with
 *                it locally: create (settings, mappings, name checks),
 *                put_mapping, put_settings.
 *  3 PR_METADATA pr_metadata_decode, the typed cluster state decoded,
 *                re-encoded (the same bytes twice), applied as
 *                state_apply_locked does (create with uuid, merge mappings,
 *                settings log); the same bytes as a shard event applied to
 *                it twice (the second changes nothing), and a failover.
 *  4 PR_BROADCAST pr_broadcast_decode, then refresh or flush over an
 *                index expression.
 *  5 PR_GET      pr_get_req_decode, the realtime get on the local copy (as
 *                cl_serve_get runs it) and the reply's encode/decode round
 *                trip.
 * A solo node runs in a temp directory (tmpfs when there is one): index
 * "fz" (searched, never written by inputs, so runs are repeatable) and
 * "fzw" (written: recreated every BULK_RESET bulk inputs and every
 * WRITE_RESET mapping or settings changes, to bound its size).
 * HANDLER_FUZZ_SEEDS=<dir> writes seed inputs there and exits. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/cm_alloc.h"
#include "../../common/cm_log.h"
#include "../../common/cm_sys.h"
#include "../../node/nd.h"
#include "../../node/nd_cluster.h"
#include "../../proto/pr.h"
#include "../../replication/rp.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
void __sanitizer_set_death_callback(void (*callback)(void));
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define WRITE_RESET 500
#define BULK_RESET 16
#define MAX_CREATE_SHARDS 8

static char dir[256];
static nd_node *node;
static unsigned writes, bulks;
static bool debug; /* HANDLER_FUZZ_DEBUG: say what each input came to */

static void
note(const char *what, const cm_error *e)
{
	if (debug)
		fprintf(stderr, "%s: %s\n", what, e && e->code ? e->reason : "ok");
}

static const char *fz_body =
    "{\"settings\":{\"number_of_shards\":1},\"mappings\":{\"properties\":{"
    "\"title\":{\"type\":\"text\",\"fields\":{\"raw\":{\"type\":\"keyword\"}}},"
    "\"tag\":{\"type\":\"keyword\"},\"n\":{\"type\":\"long\"},\"price\":{\"type\":\"double\"},"
    "\"at\":{\"type\":\"date\"},\"ok\":{\"type\":\"boolean\"}}}}";

static void
cleanup(void)
{
	if (node)
		nd_node_close(node);
	node = NULL;
	cm_rm_rf(dir);
}

static void
remove_dir(void)
{
	cm_rm_rf(dir);
}

static nd_index *
create(const char *name, const char *body)
{
	cJSON *j = cJSON_Parse(body);
	nd_index *ix = NULL;
	cm_error err;
	cm_error_clear(&err);
	if (nd_index_create(node, name, j, &ix, &err)) {
		fprintf(stderr, "create %s: %s\n", name, err.reason);
		abort();
	}
	cJSON_Delete(j);
	return ix;
}

static void
index_docs(nd_index *ix, int n)
{
	static const char *words[] = {"quick", "brown", "fox", "jumps", "over", "lazy", "dog"};
	for (int i = 0; i < n; i++) {
		char id[16], src[256];
		snprintf(id, sizeof(id), "d%d", i);
		snprintf(src, sizeof(src),
		         "{\"title\":\"%s %s %s\",\"tag\":\"t%d\",\"n\":%d,\"price\":%d.5,"
		         "\"at\":\"2024-0%d-1%dT10:00:00Z\",\"ok\":%s}",
		         words[i % 7], words[(i * 3) % 7], words[(i * 5 + 1) % 7], i % 5,
		         i * 7 - 20, i % 13, 1 + i % 9, i % 10, i % 2 ? "true" : "false");
		st_op op = {.type = ST_OP_INDEX,
		            .id = id,
		            .id_len = strlen(id),
		            .source = src,
		            .source_len = strlen(src),
		            .seq_no = ST_NO_SEQ,
		            .if_seq_no = ST_NO_SEQ};
		st_op_result res;
		cm_error err;
		cm_error_clear(&err);
		if (nd_index_prepare_doc(ix, id, op.id_len, src, op.source_len, &err) ||
		    nd_index_apply(ix, 0, &op, 1, &res) || res.err)
			abort();
	}
	nd_index_refresh(ix);
}

static void
reset_write_index(void)
{
	nd_index *ix = nd_index_get(node, "fzw");
	cm_error err;
	cm_error_clear(&err);
	if (ix) {
		nd_index_delete(node, ix, &err);
		nd_index_release(ix);
	}
	/* no refresh timer: an input's effect must not depend on timing */
	ix = create("fzw", "{\"settings\":{\"number_of_shards\":2,\"refresh_interval\":\"-1\"}}");
	nd_index_release(ix);
}

/* ---- PR_SEARCH ---- */

static void
fuzz_search(const uint8_t *p, size_t n)
{
	pr_search_req rq;
	sr_request req;
	cm_error err;
	cm_error_clear(&err);
	sr_request_init(&req);
	if (pr_search_req_decode(p, n, &rq, &err) != CM_OK) {
		sr_request_free(&req);
		return;
	}
	nd_index *ix = nd_index_get(node, "fz");
	if (nd_cl_request_build(rq.body, rq.body_len, rq.typed_keys, &req, &err) == CM_OK) {
		/* the ordinals a per-node request carries, read as the handler does */
		bool use_ords = rq.nordinals == rq.nshards && rq.nshards > 0;
		uint32_t ord = use_ords && rq.ordinals[0] < 1000000 ? rq.ordinals[0] : 0;
		/* a hostile request must stop at its deadline */
		req.deadline_ns = cm_now_ns() + 2000000000ull;
		st_reader *r = st_shard_reader(nd_index_shard(ix, 0));
		sr_shard_result res;
		memset(&res, 0, sizeof(res));
		cm_error e2;
		cm_error_clear(&e2);
		cm_err src = sr_search_shard(r, ord, &req, &res, &e2);
		if (debug)
			fprintf(stderr, "search: %s, %llu hits\n", src ? e2.reason : "ok",
			        (unsigned long long)res.total);
		if (src == CM_OK) {
			cm_buf out;
			sr_shard_result *one = &res, *back = NULL;
			size_t nback = 0;
			pr_strings *strs = NULL;
			cm_buf_init(&out, CM_MEM_NODE);
			pr_shard_results_encode(&one, 1, &out);
			cm_error_clear(&e2);
			if (pr_shard_results_decode(out.data, out.len, req.aggs, &back, &nback,
			                            &strs, &e2) != CM_OK ||
			    nback != 1) {
				fprintf(stderr, "reply round trip: %s\n", e2.reason);
				abort(); /* what a shard encodes must decode */
			}
			for (size_t i = 0; i < nback; i++)
				sr_shard_result_free(&back[i]);
			cm_free(CM_MEM_NODE, back);
			pr_strings_free(strs);
			cm_buf_free(&out);
		}
		sr_shard_result_free(&res);
		st_reader_release(r);
	} else {
		note("request", &err);
	}
	nd_index_release(ix);
	sr_request_free(&req);
	pr_search_req_free(&rq);
}

/* ---- PR_BULK ---- */

static void
fuzz_bulk(const uint8_t *p, size_t n)
{
	pr_bulk_req rq;
	cm_error err;
	cm_error_clear(&err);
	if (pr_bulk_req_decode(p, n, &rq, &err) != CM_OK)
		return;
	/* a fresh index every BULK_RESET inputs: a crash depends on at most
	 * that many earlier bulk inputs (a fresh one per input would cost
	 * ~20 ms each, for index creation) */
	if (++bulks % BULK_RESET == 0)
		reset_write_index();
	/* whatever index the message names, the ops land in fzw */
	nd_index *ix = nd_index_get(node, "fzw");
	int shard = (int)(rq.shard % (uint32_t)nd_index_nshards(ix));
	st_op *ok = cm_calloc(CM_MEM_NODE, rq.nops + 1, sizeof(st_op));
	st_op_result *res = cm_calloc(CM_MEM_NODE, rq.nops + 1, sizeof(st_op_result));
	size_t k = 0;
	for (size_t i = 0; i < rq.nops; i++) {
		cm_error e;
		cm_error_clear(&e);
		if (rq.ops[i].type == ST_OP_INDEX &&
		    nd_index_prepare_doc(ix, rq.ops[i].id, rq.ops[i].id_len, rq.ops[i].source,
		                         rq.ops[i].source_len, &e))
			continue;
		ok[k++] = rq.ops[i];
	}
	if (k)
		nd_index_apply(ix, shard, ok, k, res);
	for (size_t i = 0; debug && i < k; i++)
		fprintf(stderr, "op %zu: %s\n", i, res[i].err ? res[i].reason : "ok");
	if (rq.nops & 1)
		nd_index_refresh(ix);
	cm_free(CM_MEM_NODE, ok);
	cm_free(CM_MEM_NODE, res);
	nd_index_release(ix);
	pr_bulk_req_free(&rq);
}

/* ---- PR_META_CHANGE, PR_BROADCAST, PR_GET and PR_METADATA ---- */

/* Index creation on a fuzzed body may ask for up to 1024 shards; fine for
 * the node, too slow for a fuzzer run. */
static bool
too_many_shards(const cJSON *body)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(body, "settings");
	const cJSON *c[] = {cJSON_GetObjectItemCaseSensitive(s, "number_of_shards"),
	                    cJSON_GetObjectItemCaseSensitive(s, "index.number_of_shards"),
	                    cJSON_GetObjectItemCaseSensitive(
	                        cJSON_GetObjectItemCaseSensitive(s, "index"), "number_of_shards")};
	for (int i = 0; i < 3; i++) {
		if (cJSON_IsNumber(c[i]) && c[i]->valuedouble > MAX_CREATE_SHARDS)
			return true;
		if (cJSON_IsString(c[i]) && atof(c[i]->valuestring) > MAX_CREATE_SHARDS)
			return true;
	}
	return false;
}

static bool
reserved(const char *name)
{
	return strcmp(name, "fz") == 0 || strcmp(name, "fzw") == 0;
}

static void
drop(nd_index *ix)
{
	cm_error err;
	cm_error_clear(&err);
	if (ix && !reserved(nd_index_name(ix)))
		nd_index_delete(node, ix, &err);
	nd_index_release(ix);
}

static void
fuzz_meta(const uint8_t *p, size_t n)
{
	pr_meta_change a;
	cm_error err;
	cm_error_clear(&err);
	if (pr_meta_change_decode(p, n, &a, &err) != CM_OK) {
		pr_meta_change_free(&a);
		return;
	}
	const char *action = pr_meta_kind_name(a.kind);
	const char *index = a.nindices ? a.indices[0] : "";
	cJSON *bj = a.source_len ? cJSON_ParseWithLength(a.source, a.source_len) : NULL;
	if (a.kind == PR_META_CREATE) {
		nd_index *ix = NULL;
		if (!reserved(index) && !too_many_shards(bj) &&
		    nd_index_create(node, index, bj, &ix, &err) == CM_OK) {
			st_mapping *m = nd_index_mapping(ix);
			cJSON *mj = st_mapping_to_json(m);
			cJSON_Delete(mj);
			st_mapping_unref(m);
			cJSON_Delete(nd_index_settings_json(ix));
			drop(ix);
		}
	} else if (a.kind == PR_META_PUT_MAPPING || a.kind == PR_META_PUT_SETTINGS) {
		if (++writes % WRITE_RESET == 0)
			reset_write_index();
		nd_index *ix = nd_index_get(node, "fzw");
		if (bj && a.kind == PR_META_PUT_MAPPING)
			nd_index_put_mapping(ix, bj, &err);
		else if (bj)
			nd_index_put_settings(ix, bj, &err);
		nd_index_release(ix);
	}
	note(action, &err);
	cJSON_Delete(bj);
	pr_meta_change_free(&a);
}

static void
fuzz_broadcast(const uint8_t *p, size_t n)
{
	pr_broadcast_op op;
	char *index = NULL;
	cm_error err;
	nd_index **ixs;
	size_t nix;
	cm_error_clear(&err);
	if (pr_broadcast_decode(p, n, &op, &index, &err) == CM_OK && op != PR_BROADCAST_FORCEMERGE &&
	    nd_resolve(node, index, true, &ixs, &nix, &err) == CM_OK) {
		for (size_t i = 0; i < nix; i++) {
			if (op == PR_BROADCAST_REFRESH)
				nd_index_refresh(ixs[i]);
			else
				nd_index_flush(ixs[i]);
			nd_index_release(ixs[i]);
		}
		cm_free(CM_MEM_NODE, ixs);
	}
	note(pr_broadcast_op_name(op), &err);
	cm_free(CM_MEM_NODE, index);
}

static void
fuzz_get(const uint8_t *p, size_t n)
{
	pr_get_req g;
	cm_error err;
	cm_buf src, out, back;
	st_doc_meta meta, meta2;
	bool found = false;
	cm_error_clear(&err);
	cm_buf_init(&src, CM_MEM_NODE);
	cm_buf_init(&out, CM_MEM_NODE);
	cm_buf_init(&back, CM_MEM_NODE);
	if (pr_get_req_decode(p, n, &g, &err) == CM_OK) {
		nd_index *ix = nd_index_get(node, g.index);
		if (ix && g.shard < (uint32_t)nd_index_nshards(ix)) {
			cm_err rc = st_shard_get(nd_index_shard(ix, (int)g.shard), g.id, g.id_len,
			                         &meta, &src);
			pr_get_reply_encode(rc == CM_OK, &meta, src.data, src.len, &out);
			if (pr_get_reply_decode(out.data, out.len, &found, &meta2, &back, &err) ||
			    found != (rc == CM_OK) ||
			    (found && (meta2.seq_no != meta.seq_no || meta2.version != meta.version ||
			               back.len != src.len ||
			               memcmp(back.data, src.data, src.len) != 0)))
				abort(); /* the reply must round-trip */
		}
		nd_index_release(ix);
	}
	note("get", &err);
	pr_get_req_free(&g);
	cm_buf_free(&src);
	cm_buf_free(&out);
	cm_buf_free(&back);
}

static const char *fz_names[] = {"node-1", "node-2", "node-3"};

/* A published state: decoded (replication/rp_state_decode), encoded back
 * and decoded again to the same bytes, then applied as state_apply_locked
 * does (create with uuid, merge mappings, replay the settings log). */
static void
fuzz_metadata(const uint8_t *p, size_t n)
{
	pr_metadata md;
	cm_error err;
	rp_state *st = NULL, *again = NULL;
	cm_error_clear(&err);
	if (pr_metadata_decode(p, n, &md, &err) != CM_OK) {
		pr_metadata_free(&md);
		return;
	}
	char *text = md.state;
	size_t len = md.len;
	md.state = NULL;
	pr_metadata_free(&md);
	if (rp_state_decode(text, len, fz_names, 3, &st, &err) != CM_OK) {
		note("state", &err);
		cm_free(CM_MEM_NODE, text);
		return;
	}
	cm_buf b1, b2;
	cm_buf_init(&b1, CM_MEM_NODE);
	cm_buf_init(&b2, CM_MEM_NODE);
	rp_state_encode(st, fz_names, 3, &b1);
	if (rp_state_decode(b1.data, b1.len, fz_names, 3, &again, &err) != CM_OK)
		abort();
	rp_state_encode(again, fz_names, 3, &b2);
	if (b1.len != b2.len || memcmp(b1.data, b2.data, b1.len) != 0)
		abort();
	for (size_t i = 0; i < st->nindices && i < 4; i++) {
		const rp_index *e = &st->indices[i];
		if (reserved(e->name))
			continue;
		cJSON *body = cJSON_Parse(e->body), *maps = cJSON_Parse(e->mappings);
		nd_index *ix = nd_index_get(node, e->name);
		cm_error_clear(&err);
		if (!ix && (too_many_shards(body) ||
		            nd_index_create_as(node, e->name, e->uuid,
		                               cJSON_IsObject(body) ? body : NULL, &ix, &err))) {
			cJSON_Delete(body);
			cJSON_Delete(maps);
			continue;
		}
		cm_error_clear(&err);
		if (cJSON_IsObject(maps))
			nd_index_put_mapping(ix, maps, &err);
		for (size_t k = 0; k < e->nsettings; k++) {
			cJSON *sb = cJSON_Parse(e->settings_log[k]);
			cm_error_clear(&err);
			if (sb)
				nd_index_put_settings(ix, sb, &err);
			cJSON_Delete(sb);
		}
		note(e->name, &err);
		drop(ix);
		cJSON_Delete(body);
		cJSON_Delete(maps);
	}
	/* the shard events a master applies to it, from the same bytes */
	rp_event ev;
	void *keep = NULL;
	cm_error_clear(&err);
	if (rp_event_decode(text, len, fz_names, 3, &ev, &keep, &err) == CM_OK) {
		bool changed;
		rp_state_apply(st, &ev, &changed, &err);
		rp_state_apply(st, &ev, &changed, &err);
		if (changed)
			abort(); /* an event applied twice changes nothing the second time */
	}
	rp_event_free(keep);
	rp_state_failover(st, 1, 6);
	cm_buf_free(&b1);
	cm_buf_free(&b2);
	rp_state_free(again);
	rp_state_free(st);
	cm_free(CM_MEM_NODE, text);
}

/* ---- seeds ---- */

static void
seed(const char *outdir, const char *name, uint8_t type, const cm_buf *b)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", outdir, name);
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	fputc(type, f);
	fwrite(b->data, 1, b->len, f);
	fclose(f);
}

static void
search_seed(const char *outdir, const char *name, const char *body, int ordinal)
{
	uint32_t shards[1] = {0}, ords[1] = {(uint32_t)(ordinal < 0 ? 0 : ordinal)};
	pr_search_req r = {.index = "fz",
	                   .index_uuid = "u",
	                   .shards = shards,
	                   .nshards = 1,
	                   .body = (char *)body,
	                   .body_len = strlen(body),
	                   .ordinals = ords,
	                   .nordinals = ordinal < 0 ? 0 : 1,
	                   .typed_keys = ordinal > 0};
	cm_buf b;
	cm_buf_init(&b, CM_MEM_NODE);
	pr_search_req_encode(&r, &b);
	seed(outdir, name, 0, &b);
	cm_buf_free(&b);
}

static void
write_seeds(const char *outdir)
{
	cm_buf b;
	cm_buf_init(&b, CM_MEM_NODE);
	search_seed(outdir, "search-match", "{\"query\":{\"match\":{\"title\":\"quick fox\"}}}",
	            -1);
	search_seed(
	    outdir, "search-bool-aggs",
	    "{\"size\":3,\"query\":{\"bool\":{\"must\":[{\"range\":{\"n\":{\"gte\":0}}}],"
	    "\"should\":[{\"prefix\":{\"tag\":\"t\"}},{\"wildcard\":{\"title.raw\":\"*o*\"}}],"
	    "\"filter\":{\"term\":{\"ok\":true}}}},\"aggs\":{\"tags\":{\"terms\":{\"field\":"
	    "\"tag\"},\"aggs\":{\"p\":{\"avg\":{\"field\":\"price\"}}}},\"h\":{\"histogram\":{"
	    "\"field\":\"n\",\"interval\":10}},\"c\":{\"cardinality\":{\"field\":\"tag\"}},"
	    "\"pc\":{\"percentiles\":{\"field\":\"price\"}}}}",
	    3);
	search_seed(
	    outdir, "search-sort-dates",
	    "{\"sort\":[{\"at\":\"desc\"},\"_score\"],\"query\":{\"regexp\":{\"title.raw\":"
	    "\"(quick|lazy).*\"}},\"aggs\":{\"d\":{\"date_histogram\":{\"field\":\"at\","
	    "\"calendar_interval\":\"month\"}},\"s\":{\"stats\":{\"field\":\"n\"}},\"top\":{"
	    "\"top_hits\":{\"size\":1}}},\"_source\":[\"title\"],\"search_after\":["
	    "\"2030-01-01T00:00:00Z\",1],\"track_total_hits\":true}",
	    -1);
	search_seed(outdir, "search-qs",
	            "{\"query\":{\"query_string\":{\"query\":\"title:(quick OR dog~1) AND n:[1 TO "
	            "50]\"}},\"aggs\":{\"r\":{\"range\":{\"field\":\"price\",\"ranges\":[{\"to\":"
	            "20},{\"from\":20}]}},\"f\":{\"filters\":{\"filters\":{\"a\":{\"match\":{"
	            "\"title\":\"fox\"}}}}}},\"size\":2}",
	            0);

	st_op ops[3] = {
	    {.type = ST_OP_INDEX,
	     .id = "a",
	     .id_len = 1,
	     .source = "{\"x\":1,\"s\":\"hello\"}",
	     .source_len = 19,
	     .seq_no = ST_NO_SEQ,
	     .if_seq_no = ST_NO_SEQ},
	    {.type = ST_OP_INDEX,
	     .id = "b",
	     .id_len = 1,
	     .source = "{\"x\":\"2\",\"o\":{\"p\":true}}",
	     .source_len = 23,
	     .seq_no = 5,
	     .primary_term = 1,
	     .if_seq_no = ST_NO_SEQ,
	     .version = 3},
	    {.type = ST_OP_DELETE,
	     .id = "a",
	     .id_len = 1,
	     .seq_no = ST_NO_SEQ,
	     .if_seq_no = 0,
	     .if_primary_term = 1},
	};
	pr_bulk_req br = {.index = "fzw",
	                  .index_uuid = "u",
	                  .shard = 1,
	                  .ops = ops,
	                  .nops = 3,
	                  .primary_term = 1,
	                  .global_checkpoint = ST_NO_SEQ,
	                  .source_node = "n1"};
	cm_buf_reset(&b);
	pr_bulk_req_encode(&br, &b);
	seed(outdir, "bulk-primary", 1, &b);
	br.replica = true;
	br.nops = 2;
	cm_buf_reset(&b);
	pr_bulk_req_encode(&br, &b);
	seed(outdir, "bulk-replica", 1, &b);

	/* findings, kept as regression inputs: an external version at
	 * INT64_MAX then an internally versioned write of the same id (the
	 * version overflows; reachable over HTTP), and a replica op carrying
	 * seq_no INT64_MAX then a primary op (the next seq_no overflows) */
	st_op vmax[2] = {
	    {.type = ST_OP_INDEX,
	     .id = "v",
	     .id_len = 1,
	     .source = "{}",
	     .source_len = 2,
	     .seq_no = ST_NO_SEQ,
	     .if_seq_no = ST_NO_SEQ,
	     .version = INT64_MAX},
	    {.type = ST_OP_INDEX,
	     .id = "v",
	     .id_len = 1,
	     .source = "{}",
	     .source_len = 2,
	     .seq_no = ST_NO_SEQ,
	     .if_seq_no = ST_NO_SEQ},
	};
	br.ops = vmax;
	br.nops = 2;
	br.replica = false;
	cm_buf_reset(&b);
	pr_bulk_req_encode(&br, &b);
	seed(outdir, "regress-version-overflow", 1, &b);
	st_op smax[2] = {
	    {.type = ST_OP_INDEX,
	     .id = "s",
	     .id_len = 1,
	     .source = "{}",
	     .source_len = 2,
	     .seq_no = INT64_MAX,
	     .primary_term = 1,
	     .if_seq_no = ST_NO_SEQ},
	    {.type = ST_OP_INDEX,
	     .id = "t",
	     .id_len = 1,
	     .source = "{}",
	     .source_len = 2,
	     .seq_no = ST_NO_SEQ,
	     .if_seq_no = ST_NO_SEQ},
	};
	br.ops = smax;
	cm_buf_reset(&b);
	pr_bulk_req_encode(&br, &b);
	seed(outdir, "regress-seq-no-overflow", 1, &b);

	static const struct {
		const char *name;
		pr_meta_kind kind;
		const char *index, *body;
	} admin[] = {
	    {"admin-create", PR_META_CREATE, "x1",
	     "{\"settings\":{\"number_of_shards\":2,\"number_of_replicas\":0,\"refresh_interval\":"
	     "\"5s\"},\"mappings\":{\"dynamic\":\"strict\",\"properties\":{\"a\":{\"type\":"
	     "\"keyword\",\"ignore_above\":10},\"b\":{\"type\":\"date\",\"format\":"
	     "\"yyyy-MM-dd||epoch_millis\"},\"c\":{\"properties\":{\"d\":{\"type\":\"float\"}}}}}"
	     "}"},
	    {"admin-put-mapping", PR_META_PUT_MAPPING, "fzw",
	     "{\"properties\":{\"k\":{\"type\":\"text\",\"analyzer\":\"english\"}}}"},
	    {"admin-put-settings", PR_META_PUT_SETTINGS, "fzw",
	     "{\"index\":{\"refresh_interval\":\"-1\",\"max_result_window\":500}}"},
	};
	for (size_t i = 0; i < sizeof(admin) / sizeof(admin[0]); i++) {
		char *ixname = (char *)(uintptr_t)admin[i].index;
		pr_meta_change mc = {.kind = admin[i].kind,
		                     .indices = &ixname,
		                     .nindices = 1,
		                     .source = (char *)(uintptr_t)admin[i].body,
		                     .source_len = strlen(admin[i].body)};
		cm_buf_reset(&b);
		pr_meta_change_encode(&mc, &b);
		seed(outdir, admin[i].name, 2, &b);
	}
	cm_buf_reset(&b);
	pr_broadcast_encode(PR_BROADCAST_REFRESH, "fz*,-fzw", &b);
	seed(outdir, "broadcast-refresh", 4, &b);
	pr_get_req gr = {.index = "fz", .shard = 0, .id = "d3", .id_len = 2};
	cm_buf_reset(&b);
	pr_get_req_encode(&gr, &b);
	seed(outdir, "get", 5, &b);
	rp_state *st = rp_state_new();
	static const int data3[] = {0, 1, 2};
	rp_index *mi = rp_state_add_index(st, "m1", "abcdefghijklmnopqrstuv", 1, 1, data3, 3);
	rp_index_set_text(&mi->body, "{\"settings\":{\"number_of_shards\":1}}");
	rp_index_set_text(&mi->mappings, "{\"properties\":{\"t\":{\"type\":\"text\"}}}");
	rp_index_add_setting(mi, "{\"index\":{\"refresh_interval\":\"2s\"}}");
	st->version = 7;
	st->joined[1] = 0x1234;
	cm_buf sb;
	cm_buf_init(&sb, CM_MEM_NODE);
	rp_state_encode(st, fz_names, 3, &sb);
	cm_buf_reset(&b);
	pr_metadata_encode(&(pr_metadata){.version = 7, .state = (char *)sb.data, .len = sb.len}, &b);
	cm_buf_free(&sb);
	rp_state_free(st);
	seed(outdir, "metadata", 3, &b);
	cm_buf_free(&b);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* run.sh's scratch directory (it removes it: libFuzzer leaves without
	 * running atexit handlers), else tmpfs, else /tmp */
	const char *base = getenv("SHOAL_FUZZ_TMP");
	if (!base || !*base)
		base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/handlerfuzzXXXXXX", base);
	if (!mkdtemp(dir))
		abort();
	atexit(cleanup);
	__sanitizer_set_death_callback(remove_dir); /* a crash leaves no temp dir */
	debug = getenv("HANDLER_FUZZ_DEBUG") != NULL;
	cm_log_set_level(CM_LOG_ERROR);
	nd_node_opts o = {.data_dir = dir, .name = "fuzz", .search_threads = 1};
	cm_error err;
	cm_error_clear(&err);
	if (nd_node_open(&o, &node, &err)) {
		fprintf(stderr, "node: %s\n", err.reason);
		abort();
	}
	nd_index *ix = create("fz", fz_body);
	index_docs(ix, 60);
	nd_index_release(ix);
	reset_write_index();
	const char *seeds = getenv("HANDLER_FUZZ_SEEDS");
	if (seeds) {
		write_seeds(seeds);
		exit(0);
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 1 << 20)
		return 0;
	switch (data[0] % 6) {
	case 0:
		fuzz_search(data + 1, size - 1);
		break;
	case 1:
		fuzz_bulk(data + 1, size - 1);
		break;
	case 2:
		fuzz_meta(data + 1, size - 1);
		break;
	case 3:
		fuzz_metadata(data + 1, size - 1);
		break;
	case 4:
		fuzz_broadcast(data + 1, size - 1);
		break;
	default:
		fuzz_get(data + 1, size - 1);
		break;
	}
	return 0;
}
