/* libFuzzer target for the coordinator's parsers: the query DSL, the
 * _search body, query strings (classic and simple) and _source filtering.
 * Not part of the CMake build (the glob skips *_fuzz.c). Build and run:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. search/dsl_fuzz.c \
 *     search/query.c search/qstring.c search/request.c search/source_filter.c \
 *     search/jsonw.c search/merge.c build/libshoal_search.a build/libshoal_storage.a \
 *     build/libshoal_common.a $(pkg-config --libs libcjson libzstd lmdb libutf8proc \
 *     libxxhash) -lstemmer -lstreamvbyte -lroaring -lm -lpthread -o /tmp/dsl_fuzz
 *   /tmp/dsl_fuzz -max_total_time=60
 *
 * (the instrumented copies of the parser files win over the library's;
 * the rest links from a normal build). The first input byte picks the
 * parser. Run for 60 s on 2026-11-30: ~97k inputs, no failure. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "sr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 1 << 16)
		return 0;
	uint8_t mode = data[0] % 5;
	char *text = malloc(size);
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	cm_error err = {0};
	sr_query *q = NULL;
	switch (mode) {
	case 0: {
		cJSON *j = cJSON_Parse(text);
		if (j && sr_query_from_json(j, &q, &err) == CM_OK) {
			sr_query *c = sr_query_clone(q);
			sr_query_free(c);
		}
		cJSON_Delete(j);
		break;
	}
	case 1: {
		cJSON *j = cJSON_Parse(text);
		sr_request r;
		sr_request_init(&r);
		if (j)
			sr_request_from_json(j, &r, &err);
		sr_request_free(&r);
		cJSON_Delete(j);
		break;
	}
	case 2:
		sr_query_string_parse(text, "f", size & 1, &q, &err);
		break;
	case 3: {
		sr_query *n = sr_query_new(SR_Q_SIMPLE_QUERY_STRING);
		n->value = cm_strdup(CM_MEM_SEARCH, text);
		sr_query_string_expand(n, &q, &err);
		sr_query_free(n);
		break;
	}
	case 4: {
		char *inc[] = {"a.*", "*b"}, *exc[] = {"a.c"};
		cm_buf out;
		cm_buf_init(&out, CM_MEM_SEARCH);
		sr_source_filter(text, size - 1, inc, 2, exc, 1, &out);
		cm_buf_free(&out);
		break;
	}
	}
	sr_query_free(q);
	free(text);
	return 0;
}
