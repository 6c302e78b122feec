/* libFuzzer target: every protobuf message decoder of the transport
 * (proto/pr.c, pr_cluster.c) over arbitrary bytes. The first input byte picks the
 * decoder; a decode error is fine, a crash, leak or sanitizer report is
 * not. Built and run by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/cm_alloc.h"
#include "../../proto/pr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
count_name(void *arg, const char *name)
{
	(void)name;
	(*(size_t *)arg)++;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cm_error err;

	if (size < 1 || size > 1 << 20)
		return 0;
	cm_error_clear(&err);
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	switch (data[0] % 18) {
	case 0: {
		pr_envelope e;
		memset(&e, 0, sizeof(e));
		if (pr_envelope_unpack(p, n, "fuzz-cluster", "fuzz-secret", &e, &err) == CM_OK)
			pr_envelope_free(&e);
		break;
	}
	case 1: {
		pr_search_req r;
		if (pr_search_req_decode(p, n, &r, &err) == CM_OK)
			pr_search_req_free(&r);
		break;
	}
	case 2: {
		sr_shard_result *res = NULL;
		size_t nres = 0;
		pr_strings *strs = NULL;
		if (pr_shard_results_decode(p, n, NULL, &res, &nres, &strs, &err) == CM_OK) {
			for (size_t i = 0; i < nres; i++)
				sr_shard_result_free(&res[i]);
			cm_free(CM_MEM_NODE, res);
			pr_strings_free(strs);
		}
		break;
	}
	case 3: {
		pr_bulk_req r;
		if (pr_bulk_req_decode(p, n, &r, &err) == CM_OK)
			pr_bulk_req_free(&r);
		break;
	}
	case 4: {
		st_op_result res[8];
		memset(res, 0, sizeof(res));
		pr_bulk_reply_decode(p, n, res, 1 + (n % 8), &err);
		break;
	}
	case 5: {
		pr_metadata md;
		pr_metadata_decode(p, n, &md, &err);
		pr_metadata_free(&md); /* also after a failed decode */
		break;
	}
	case 6: {
		pr_meta_change m;
		pr_meta_change_decode(p, n, &m, &err);
		pr_meta_change_free(&m); /* also after a failed decode */
		break;
	}
	case 8: {
		pr_meta_reply m;
		pr_meta_reply_decode(p, n, &m, &err);
		pr_meta_reply_free(&m);
		break;
	}
	case 9: {
		pr_broadcast_op op;
		char *ix = NULL;
		pr_broadcast_decode(p, n, &op, &ix, &err);
		cm_free(CM_MEM_NODE, ix);
		break;
	}
	case 10: {
		pr_get_req g;
		pr_get_req_decode(p, n, &g, &err);
		pr_get_req_free(&g);
		break;
	}
	case 11: {
		bool found;
		st_doc_meta meta;
		cm_buf src;
		cm_buf_init(&src, CM_MEM_NODE);
		pr_get_reply_decode(p, n, &found, &meta, &src, &err);
		cm_buf_free(&src);
		break;
	}
	case 12: {
		pr_shard_stats s;
		pr_shard_stats_decode(p, n, &s, &err);
		pr_shard_stats_free(&s);
		break;
	}
	case 13: {
		cm_buf rows;
		cm_buf_init(&rows, CM_MEM_NODE);
		pr_recovery_rows_decode(p, n, &rows, &err);
		cm_buf_free(&rows);
		break;
	}
	case 14: {
		pr_handoff h;
		pr_handoff_decode(p, n, &h, &err);
		pr_handoff_free(&h);
		break;
	}
	case 15: {
		size_t count = 0;
		pr_handoff_reply_decode(p, n, count_name, &count, &err);
		break;
	}
	case 16: {
		char *kind = NULL;
		pr_node_view_req_decode(p, n, &kind, &err);
		cm_free(CM_MEM_NODE, kind);
		break;
	}
	case 17: {
		char *view = NULL;
		size_t len;
		pr_node_view_reply_decode(p, n, &view, &len, &err);
		cm_free(CM_MEM_NODE, view);
		break;
	}
	default: {
		cm_error e;
		char *body = NULL;
		size_t len = 0;
		cm_error_clear(&e);
		if (pr_ack_decode(p, n, &e, &body, &len) == CM_OK)
			cm_free(CM_MEM_NODE, body);
		break;
	}
	}
	return 0;
}
