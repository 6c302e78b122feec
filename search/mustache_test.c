/* The search template renderer against outputs worked out by hand from
 * Elasticsearch's mustache rules. */
#include <cjson/cJSON.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "check.h"
#include "search/sr.h"

/* Renders tmpl with params (JSON text); "ERR:<type>" on failure. */
static char out_text[4096];

static const char *
render(const char *tmpl, const char *params)
{
	cJSON *p = params ? cJSON_Parse(params) : NULL;
	cm_buf b;
	cm_error e;
	cm_error_clear(&e);
	cm_buf_init(&b, CM_MEM_SEARCH);
	if (sr_mustache_render(tmpl, strlen(tmpl), p, &b, &e))
		snprintf(out_text, sizeof out_text, "ERR:%s", cm_error_type(&e));
	else
		snprintf(out_text, sizeof out_text, "%.*s", (int)b.len, (const char *)b.data);
	cm_buf_free(&b);
	cJSON_Delete(p);
	return out_text;
}

#define RENDERS(tmpl, params, want)                                                                \
	do {                                                                                       \
		const char *got = render(tmpl, params);                                            \
		CHECKF(!strcmp(got, want), "%s -> [%s], want [%s]", tmpl, got, want);              \
	} while (0)

int
main(void)
{
	/* variables: escaped for a JSON string, numbers, booleans, missing */
	RENDERS("{\"q\":\"{{q}}\"}", "{\"q\":\"a \\\"b\\\"\\n\"}", "{\"q\":\"a \\\"b\\\"\\n\"}");
	RENDERS("{{n}}|{{f}}|{{t}}|{{nil}}|{{missing}}|",
	        "{\"n\":10,\"f\":1.5,\"t\":true,\"nil\":null}", "10|1.5|true|||");
	RENDERS("{{{raw}}}|{{&raw}}|{{raw}}", "{\"raw\":\"a\\\"b\"}", "a\"b|a\"b|a\\\"b");
	RENDERS("{{ a.b.c }}", "{\"a\":{\"b\":{\"c\":\"deep\"}}}", "deep");
	RENDERS("{{l.1}}", "{\"l\":[\"x\",\"y\"]}", "y");
	RENDERS("no tags at all", NULL, "no tags at all");
	RENDERS("{{! a comment }}x", "{}", "x");
	/* toJson and join */
	RENDERS("{\"terms\":{\"f\":{{#toJson}}vals{{/toJson}}}}", "{\"vals\":[1,\"a\",null]}",
	        "{\"terms\":{\"f\":[1,\"a\",null]}}");
	RENDERS("{{#toJson}}obj{{/toJson}}", "{\"obj\":{\"k\":[true]}}", "{\"k\":[true]}");
	RENDERS("{{#toJson}}nothing{{/toJson}}", "{}", "null");
	RENDERS("{{#join}}l{{/join}}", "{\"l\":[\"a\",\"b\",3]}", "a,b,3");
	/* sections: lists, objects, truthy scalars, falsy values, inverted */
	RENDERS("[{{#l}}{{.}};{{/l}}]", "{\"l\":[1,2,3]}", "[1;2;3;]");
	RENDERS("{{#l}}{{name}}={{v}} {{/l}}",
	        "{\"l\":[{\"name\":\"a\",\"v\":1},{\"name\":\"b\"}],\"v\":9}", "a=1 b=9 ");
	RENDERS("{{#o}}{{x}}{{/o}}", "{\"o\":{\"x\":\"in\"}}", "in");
	RENDERS("{{#on}}yes{{/on}}{{^on}}no{{/on}}", "{\"on\":true}", "yes");
	RENDERS("{{#on}}yes{{/on}}{{^on}}no{{/on}}", "{\"on\":false}", "no");
	RENDERS("{{#on}}yes{{/on}}{{^on}}no{{/on}}", "{}", "no");
	RENDERS("{{#l}}x{{/l}}{{^l}}empty{{/l}}", "{\"l\":[]}", "empty");
	RENDERS("{{#a}}{{#b}}{{c}}{{/b}}{{/a}}", "{\"a\":{\"b\":[{\"c\":1},{\"c\":2}]}}", "12");
	RENDERS("{\"from\":{{#from}}{{from}}{{/from}}{{^from}}0{{/from}}}", "{\"from\":20}",
	        "{\"from\":20}");
	/* errors: where the template is malformed */
	RENDERS("{{#a}}never closed", "{}", "ERR:general_script_exception");
	RENDERS("{{#a}}x{{/b}}", "{}", "ERR:general_script_exception");
	RENDERS("{{/a}}", "{}", "ERR:general_script_exception");
	RENDERS("{{unterminated", "{}", "ERR:general_script_exception");
	RENDERS("{{> partial}}", "{}", "ERR:general_script_exception");
	RENDERS("{{=<% %>=}}", "{}", "ERR:general_script_exception");
	RENDERS("{{}}", "{}", "ERR:general_script_exception");
	/* a deeply nested template fails instead of recursing without end */
	{
		char deep[2000] = "", *p = deep;
		for (int i = 0; i < 100; i++)
			p += sprintf(p, "{{#a}}");
		for (int i = 0; i < 100; i++)
			p += sprintf(p, "{{/a}}");
		/* "a" is found again up the context stack at every level */
		CHECK(!strcmp(render(deep, "{\"a\":{\"a\":1}}"), "ERR:general_script_exception"));
		RENDERS(deep, "{\"a\":false}", "");
		RENDERS("{{#a}}{{#a}}{{#a}}x{{/a}}{{/a}}{{/a}}", "{\"a\":1}", "x");
	}
	return check_report("mustache_test");
}
