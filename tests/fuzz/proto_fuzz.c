/* libFuzzer target: every protobuf message decoder of the transport
 * (proto/pr.c) over arbitrary bytes. The first input byte picks the
 * decoder; a decode error is fine, a crash, leak or sanitizer report is
 * not. Built and run by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/cm_alloc.h"
#include "../../proto/pr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cm_error err;

	if (size < 1 || size > 1 << 20)
		return 0;
	cm_error_clear(&err);
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	switch (data[0] % 8) {
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
		uint64_t version = 0;
		char *state = NULL;
		size_t len = 0;
		if (pr_metadata_decode(p, n, &version, &state, &len, &err) == CM_OK)
			cm_free(CM_MEM_NODE, state);
		break;
	}
	case 6: {
		pr_admin a;
		if (pr_admin_decode(p, n, &a, &err) == CM_OK)
			pr_admin_free(&a);
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
