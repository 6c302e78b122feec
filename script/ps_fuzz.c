/* libFuzzer target for update scripts (script/ps.h): every input is
 * compiled and, when it compiles, run on a small document with params; a
 * crash, a sanitizer report or a hang (past libFuzzer's -timeout) is a
 * failure. Not part of the CMake build (the glob skips *_fuzz.c); built and
 * run by tests/fuzz/run.sh (FUZZ_TARGETS=ps_fuzz). Its first runs found two
 * bugs (now seeds in tests/fuzz/corpus/ps/); then 60 s on 2026-12-01:
 * ~540k inputs, no failure. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ps_script *s = NULL;
	cm_error err = {0};
	int pos = 0;
	if (ps_compile((const char *)data, size, &s, &pos, &err) != CM_OK) {
		if (pos < 0 || (size_t)pos > size || !err.reason[0])
			abort(); /* a compile error must name a position inside the source */
		return 0;
	}
	cJSON *ctx = cJSON_Parse("{\"_source\":{\"n\":3,\"s\":\"ab\",\"l\":[1,2,\"x\"],"
	                         "\"m\":{\"k\":{\"d\":1.5}}},\"op\":\"index\",\"_id\":\"1\"}");
	cJSON *params = cJSON_Parse("{\"x\":2,\"t\":\"tag\",\"v\":[1]}");
	cm_error rerr = {0};
	ps_run(s, ctx, params, &rerr);
	/* whatever happened, the context is still printable JSON */
	char *out = cJSON_PrintUnformatted(ctx);
	if (!out)
		abort();
	cJSON_free(out);
	cJSON_Delete(ctx);
	cJSON_Delete(params);
	ps_free(s);
	return 0;
}
