/* Pure pieces of the coordinator: filter_path, _source filtering, the
 * ES-style pretty printer and error documents. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "check.h"
#include "co_private.h"

static void
fp(const char *in, const char *filter, const char *want)
{
	cJSON *j = co_filter_path(cJSON_Parse(in), filter);
	char *s = cJSON_PrintUnformatted(j);
	CHECKF(strcmp(s, want) == 0, "filter_path %s on %s: got %s want %s", filter, in, s, want);
	cJSON_free(s);
	cJSON_Delete(j);
}

static void
sf(const char *in, const char *inc, const char *exc, const char *want)
{
	bool fetch;
	char *s = co_source_filter(in, strlen(in), inc, exc, &fetch);
	CHECKF(s && strcmp(s, want) == 0, "source %s -%s on %s: got %s want %s", inc ? inc : "",
	       exc ? exc : "", in, s ? s : "(null)", want);
	cm_free(CM_MEM_COORDINATOR, s);
}

int
main(void)
{
	const char *doc = "{\"took\":3,\"hits\":{\"total\":{\"value\":2,\"relation\":\"eq\"},"
	                  "\"hits\":[{\"_id\":\"1\",\"_source\":{\"a\":1,\"b\":{\"c\":2}}},"
	                  "{\"_id\":\"2\",\"_source\":{\"a\":3}}]}}";
	fp(doc, "took", "{\"took\":3}");
	/* an exclusion through "**" that goes on below the key it meets */
	fp("{\"hits\":{\"hits\":[{\"_id\":\"1\",\"_source\":{\"name\":\"a\",\"properties\":{"
	   "\"size\":1}}}]}}",
	   "-**._source.properties,**._source",
	   "{\"hits\":{\"hits\":[{\"_source\":{\"name\":\"a\"}}]}}");
	fp(doc, "hits.hits._id", "{\"hits\":{\"hits\":[{\"_id\":\"1\"},{\"_id\":\"2\"}]}}");
	fp(doc, "hits.total.value,took", "{\"took\":3,\"hits\":{\"total\":{\"value\":2}}}");
	fp(doc, "**.c", "{\"hits\":{\"hits\":[{\"_source\":{\"b\":{\"c\":2}}}]}}");
	fp(doc, "hits.*.value", "{\"hits\":{\"total\":{\"value\":2}}}");
	fp(doc, "-hits", "{\"took\":3}");
	fp(doc, "-hits.hits._source,-hits.total",
	   "{\"took\":3,\"hits\":{\"hits\":[{\"_id\":\"1\"},{\"_id\":\"2\"}]}}");
	fp(doc, "nothing", "{}");
	fp("[{\"a\":1,\"b\":2}]", "a", "[{\"a\":1}]");

	/* cm_glob: the wildcard matcher index names, aliases and patterns use */
	CHECK(cm_glob("logs-*", "logs-2024") && cm_glob("*", "") && cm_glob("a*b*c", "aXbYbc"));
	CHECK(!cm_glob("logs-*", "log") && !cm_glob("a*b", "aXbY") && !cm_glob("", "x"));
	CHECK(cm_glob("**a**", "bab") && cm_glob("a*", "a") && !cm_glob("*a", "b"));
	{
		/* a pattern that takes exponential time for a recursive matcher */
		char pat[64] = "", str[4096];
		for (int i = 0; i < 20; i++)
			strcat(pat, "*a");
		strcat(pat, "*b");
		memset(str, 'a', sizeof(str) - 1);
		str[sizeof(str) - 1] = 0;
		CHECK(!cm_glob(pat, str));
	}

	/* date-math index names */
	{
		char *out = NULL;
		cm_error de;
		cm_error_clear(&de);
		CHECK(co_date_math_names("plain,other", &out, &de) == CM_OK && !strcmp(out, "plain,other"));
		cm_free(CM_MEM_COORDINATOR, out);
		CHECK(co_date_math_names("<x-{now/y{yyyy}}>,y", &out, &de) == CM_OK && out[0] == 'x' &&
		      strlen(out) == strlen("x-2026,y") && !strcmp(out + 6, ",y"));
		cm_free(CM_MEM_COORDINATOR, out);
		CHECK(co_date_math_names("<a\\{b\\}>", &out, &de) == CM_OK && !strcmp(out, "a{b}"));
		cm_free(CM_MEM_COORDINATOR, out);
		CHECK(co_date_math_names("<x-{now/d>", &out, &de) == CM_EPARSE && !out);
		CHECK(co_date_math_names("<x-{2024-01-01}>", &out, &de) == CM_EPARSE && !out);
	}

	sf("{\"a\":1,\"b\":{\"c\":2,\"d\":3}}", "a", NULL, "{\"a\":1}");
	sf("{\"a\":1,\"b\":{\"c\":2,\"d\":3}}", "b.c", NULL, "{\"b\":{\"c\":2}}");
	sf("{\"a\":1,\"b\":{\"c\":2,\"d\":3}}", "b.*", NULL, "{\"b\":{\"c\":2,\"d\":3}}");
	sf("{\"a\":1,\"b\":{\"c\":2,\"d\":3}}", NULL, "b.d", "{\"a\":1,\"b\":{\"c\":2}}");
	sf("{\"a\":1,\"ab\":2,\"b\":3}", "a*", NULL, "{\"a\":1,\"ab\":2}");
	sf("{\"o\":[{\"x\":1,\"y\":2},{\"x\":3}]}", "o.x", NULL, "{\"o\":[{\"x\":1},{\"x\":3}]}");
	bool fetch = true;
	CHECK(co_source_filter("{}", 2, "\x01", NULL, &fetch) == NULL && !fetch);
	CHECK(co_source_filter("{}", 2, NULL, NULL, &fetch) == NULL && fetch);

	cJSON *j = cJSON_Parse("{\"a\":[1,{\"b\":\"x\"}],\"e\":{},\"f\":[]}");
	cm_buf out;
	cm_buf_init(&out, CM_MEM_COORDINATOR);
	co_json_pretty(j, &out);
	cm_buf_put_u8(&out, 0);
	CHECKF(strcmp((char *)out.data, "{\n  \"a\" : [\n    1,\n    {\n      \"b\" : \"x\"\n    }\n"
	                                "  ],\n  \"e\" : { },\n  \"f\" : [ ]\n}\n") == 0,
	       "pretty: %s", (char *)out.data);
	cm_buf_free(&out);
	cJSON_Delete(j);

	cm_error e;
	cm_error_clear(&e);
	cm_error_set(&e, CM_ENOINDEX, "no such index [x]");
	j = co_error_doc(&e, "x");
	char *s = cJSON_PrintUnformatted(j);
	CHECKF(strcmp(s, "{\"error\":{\"root_cause\":[{\"type\":\"index_not_found_exception\","
	                 "\"reason\":\"no such index [x]\",\"resource.type\":\"index_or_alias\","
	                 "\"resource.id\":\"x\",\"index_uuid\":\"_na_\",\"index\":\"x\"}],"
	                 "\"type\":\"index_not_found_exception\",\"reason\":\"no such index [x]\","
	                 "\"resource.type\":\"index_or_alias\",\"resource.id\":\"x\","
	                 "\"index_uuid\":\"_na_\",\"index\":\"x\"},\"status\":404}") == 0,
	       "%s", s);
	cJSON_free(s);
	cJSON_Delete(j);
	return check_report("co_test");
}
