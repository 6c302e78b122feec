/* Suggesters' coordinator side: parsing (defaults and ES's errors) and the
 * fold of shard partials (options merged by text, term freqs summed,
 * scores max, sort and size, the phrase cutoff, typed_keys), with every
 * allocation returned. The shard side is tested from Python
 * (tests/api/test_suggest.py) against a model. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "check.h"
#include "search/sr.h"

static sr_suggest *
parse(const char *json, cm_err want, const char *why)
{
	cJSON *j = cJSON_Parse(json);
	REQUIRE(j);
	sr_suggest *s = NULL;
	cm_error err;
	cm_error_clear(&err);
	cm_err rc = sr_suggest_from_json(j, &s, &err);
	cJSON_Delete(j);
	CHECKF(rc == want, "%s: rc %d, want %d (%s)", json, rc, want, err.reason);
	if (why)
		CHECKF(strstr(err.reason, why) != NULL, "%s: reason [%s] lacks [%s]", json,
		       err.reason, why);
	return s;
}

static void
render(sr_suggest_acc *a, char *out, size_t cap)
{
	cm_buf b;
	cm_buf_init(&b, CM_MEM_SEARCH);
	sr_suggest_acc_render(a, &b);
	snprintf(out, cap, "%.*s", (int)b.len, (const char *)b.data);
	cm_buf_free(&b);
}

static void
test_parse_errors(void)
{
	static const struct {
		const char *json;
		cm_err rc;
		const char *why;
	} cases[] = {
	    {"{\"s\":{\"text\":\"x\",\"completion\":{\"field\":\"f\",\"fuzzy\":{}}}}", CM_EINVAL,
	     "[completion] suggester option [fuzzy] is not supported"},
	    {"{\"s\":{\"text\":\"x\",\"term\":{\"field\":\"f\",\"zz\":1}}}", CM_EPARSE,
	     "suggester[term] doesn't support field [zz]"},
	    {"{\"s\":{\"text\":\"x\",\"term\":{}}}", CM_EPARSE,
	     "the required field option [field] is missing"},
	    {"{\"s\":{\"term\":{\"field\":\"f\"}}}", CM_EINVAL,
	     "The required text option is missing"},
	    {"{\"s\":{\"text\":\"x\",\"term\":{\"field\":\"f\",\"max_edits\":0}}}", CM_EINVAL,
	     "Illegal max_edits value 0"},
	    {"{\"s\":{\"text\":\"x\",\"term\":{\"field\":\"f\",\"size\":0}}}", CM_EINVAL,
	     "size must be positive"},
	    {"{\"s\":{\"text\":\"x\",\"term\":{\"field\":\"f\",\"accuracy\":2}}}", CM_EINVAL,
	     "accuracy must be between 0 and 1"},
	    {"{\"s\":{\"text\":\"x\",\"phrase\":{\"field\":\"f\",\"gram_size\":4}}}", CM_EINVAL,
	     "gram_size must be between 1 and 3"},
	    {"{\"s\":{\"text\":\"x\",\"phrase\":{\"field\":\"f\",\"direct_generator\":{}}}}",
	     CM_EPARSE, "failed to parse field [direct_generator]"},
	    {"{\"s\":{\"text\":\"x\",\"term\":{\"field\":\"f\"},\"phrase\":{\"field\":\"f\"}}}",
	     CM_EINVAL, "has more than one suggester"},
	    {"{\"s\":{\"prefix\":\"a\",\"term\":{\"field\":\"f\"}}}", CM_EINVAL,
	     "only for the completion suggester"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sr_suggest *s = parse(cases[i].json, cases[i].rc, cases[i].why);
		CHECK(s == NULL);
	}
	/* an empty "suggest" suggests nothing */
	CHECK(parse("{}", CM_OK, NULL) == NULL);
	CHECK(parse("{\"text\":\"only global\"}", CM_OK, NULL) == NULL);
}

static void
test_term_fold(void)
{
	sr_suggest *s =
	    parse("{\"text\":\"g\",\"a\":{\"term\":{\"field\":\"f\",\"size\":2}},"
	          "\"b\":{\"text\":\"x\",\"term\":{\"field\":\"f\",\"sort\":\"frequency\"}}}",
	          CM_OK, NULL);
	REQUIRE(s);
	sr_suggest_acc *acc = sr_suggest_acc_new(s);
	const char *p1 =
	    "{\"a\":{\"e\":[{\"text\":\"qick\",\"offset\":0,\"length\":4,\"options\":["
	    "{\"text\":\"quick\",\"score\":0.75,\"freq\":2},{\"text\":\"thick\",\"score\":0.5,"
	    "\"freq\":9}]}]},\"b\":{\"e\":[{\"text\":\"x\",\"offset\":0,\"length\":1,\"options\":["
	    "{\"text\":\"xa\",\"score\":0.5,\"freq\":1},{\"text\":\"xb\",\"score\":0.9,\"freq\":1}]"
	    "}]}}";
	const char *p2 =
	    "{\"a\":{\"e\":[{\"text\":\"qick\",\"offset\":0,\"length\":4,\"options\":["
	    "{\"text\":\"thick\",\"score\":0.5,\"freq\":1},{\"text\":\"quack\",\"score\":0.75,"
	    "\"freq\":3}]}]},\"b\":{\"e\":[{\"text\":\"x\",\"offset\":0,\"length\":1,\"options\":["
	    "{\"text\":\"xa\",\"score\":0.5,\"freq\":5}]}]}}";
	sr_suggest_acc_add(acc, p1, strlen(p1), "i");
	sr_suggest_acc_add(acc, p2, strlen(p2), "i");
	char out[2048];
	render(acc, out, sizeof out);
	/* a: by score then freq (quack 3 before quick 2), size 2; b: by freq (xa 6) */
	const char *want =
	    ",\"suggest\":{\"a\":[{\"text\":\"qick\",\"offset\":0,\"length\":4,\"options\":["
	    "{\"text\":\"quack\",\"score\":0.75,\"freq\":3},{\"text\":\"quick\",\"score\":0.75,"
	    "\"freq\":2}]}],\"b\":[{\"text\":\"x\",\"offset\":0,\"length\":1,\"options\":["
	    "{\"text\":\"xa\",\"score\":0.5,\"freq\":6},{\"text\":\"xb\",\"score\":0.9,\"freq\":1}]"
	    "}]}";
	CHECKF(!strcmp(out, want), "got %s", out);
	/* a node-level fold hands its partial on, and folding it again is the same */
	size_t len;
	char *part = sr_suggest_acc_take(acc, &len);
	REQUIRE(part);
	sr_suggest_acc_add(acc, part, len, "i");
	cm_free(CM_MEM_SEARCH, part);
	sr_suggest_set_typed_keys(s, true);
	render(acc, out, sizeof out);
	CHECKF(strstr(out, "\"term#a\":[") && strstr(out, "\"term#b\":[") &&
	           strstr(out, "\"freq\":6"),
	       "typed: %s", out);
	sr_suggest_acc_free(acc);
	sr_suggest_free(s);
}

static void
test_phrase_fold(void)
{
	sr_suggest *s = parse(
	    "{\"p\":{\"text\":\"qick fox\",\"phrase\":{\"field\":\"f\",\"size\":2}}}", CM_OK, NULL);
	REQUIRE(s);
	sr_suggest_acc *acc = sr_suggest_acc_new(s);
	/* the highest shard cutoff drops options at or below it */
	const char *p1 =
	    "{\"p\":{\"cut\":0.01,\"e\":[{\"text\":\"qick fox\",\"offset\":0,\"length\":8,"
	    "\"options\":[{\"text\":\"quick fox\",\"highlighted\":\"<em>quick</em> fox\","
	    "\"score\":0.2},{\"text\":\"thick fox\",\"score\":0.015}]}]}}";
	const char *p2 =
	    "{\"p\":{\"cut\":0.02,\"e\":[{\"text\":\"qick fox\",\"offset\":0,\"length\":8,"
	    "\"options\":[{\"text\":\"quick fox\",\"highlighted\":\"<em>quick</em> fox\","
	    "\"score\":0.3},{\"text\":\"quack fox\",\"score\":0.1}]}]}}";
	sr_suggest_acc_add(acc, p1, strlen(p1), "i");
	sr_suggest_acc_add(acc, p2, strlen(p2), "i");
	char out[2048];
	render(acc, out, sizeof out);
	const char *want =
	    ",\"suggest\":{\"p\":[{\"text\":\"qick fox\",\"offset\":0,\"length\":8,\"options\":["
	    "{\"text\":\"quick fox\",\"highlighted\":\"<em>quick</em> fox\",\"score\":0.3},"
	    "{\"text\":\"quack fox\",\"score\":0.1}]}]}";
	CHECKF(!strcmp(out, want), "got %s", out);
	sr_suggest_acc_free(acc);
	/* no shard answered: the names with no entries */
	acc = sr_suggest_acc_new(s);
	render(acc, out, sizeof out);
	CHECKF(!strcmp(out, ",\"suggest\":{\"p\":[]}"), "empty: %s", out);
	sr_suggest_acc_free(acc);
	sr_suggest_free(s);
}

int
main(void)
{
	void (*tests[])(void) = {test_parse_errors, test_term_fold, test_phrase_fold};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		tests[i]();
		CHECKF(cm_mem_used(CM_MEM_SEARCH) == 0, "test %zu leaks %lld bytes", i,
		       (long long)cm_mem_used(CM_MEM_SEARCH));
	}
	return check_report("suggest_test");
}
