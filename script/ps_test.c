/* The Painless subset against a table of expected results, and hostile
 * scripts refused in bounded time. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/cm_alloc.h"
#include "check.h"
#include "ps.h"

typedef struct tcase {
	const char *script, *source, *params;
	const char *want;    /* the _source after, or NULL when an error is expected */
	const char *want_op; /* NULL: "index" */
	const char *err;     /* a part of the error reason */
} tcase;

static const tcase CASES[] = {
    {"ctx._source.n = 5", "{}", NULL, "{\"n\":5}", NULL, NULL},
    {"ctx._source.n += 2", "{\"n\":3}", NULL, "{\"n\":5}", NULL, NULL},
    {"ctx._source.n -= 2;", "{\"n\":3}", NULL, "{\"n\":1}", NULL, NULL},
    {"ctx._source.n++", "{\"n\":3}", NULL, "{\"n\":4}", NULL, NULL},
    {"ctx._source.n--; ++ctx._source.n; ctx._source.n *= 3", "{\"n\":3}", NULL, "{\"n\":9}", NULL,
     NULL},
    {"ctx._source.n = 7 / 2", "{}", NULL, "{\"n\":3}", NULL, NULL},
    {"ctx._source.n = 7.0 / 2", "{}", NULL, "{\"n\":3.5}", NULL, NULL},
    {"ctx._source.n = 7 % 3 + 2 * 3 - 1", "{}", NULL, "{\"n\":6}", NULL, NULL},
    {"ctx._source.remove('a')", "{\"a\":1,\"b\":2}", NULL, "{\"b\":2}", NULL, NULL},
    {"ctx._source.tags.add(params.t)", "{\"tags\":[\"x\"]}", "{\"t\":\"y\"}",
     "{\"tags\":[\"x\",\"y\"]}", NULL, NULL},
    {"if (!ctx._source.tags.contains(params.t)) { ctx._source.tags.add(params.t) }",
     "{\"tags\":[\"x\"]}", "{\"t\":\"x\"}", "{\"tags\":[\"x\"]}", NULL, NULL},
    {"if (ctx._source.n > 10) { ctx._source.big = true } else { ctx._source.big = false }",
     "{\"n\":11}", NULL, "{\"n\":11,\"big\":true}", NULL, NULL},
    {"if (ctx._source.n > 10) ctx._source.big = true; else ctx._source.big = false;", "{\"n\":1}",
     NULL, "{\"n\":1,\"big\":false}", NULL, NULL},
    {"ctx._source.s = ctx._source.a + '-' + ctx._source.b + 1", "{\"a\":\"x\",\"b\":\"y\"}", NULL,
     "{\"a\":\"x\",\"b\":\"y\",\"s\":\"x-y1\"}", NULL, NULL},
    {"ctx._source.ok = ctx._source.n >= 2 && ctx._source.n <= 4 || ctx._source.n == 9", "{\"n\":9}",
     NULL, "{\"n\":9,\"ok\":true}", NULL, NULL},
    {"ctx._source.ok = !(ctx._source.n != 3)", "{\"n\":3}", NULL, "{\"n\":3,\"ok\":true}", NULL,
     NULL},
    {"ctx._source.k = ctx._source.n > 1 ? 'many' : 'one'", "{\"n\":2}", NULL,
     "{\"n\":2,\"k\":\"many\"}", NULL, NULL},
    {"ctx.op = 'noop'", "{\"n\":1}", NULL, "{\"n\":1}", "noop", NULL},
    {"if (ctx._source.n == 1) { ctx.op = 'delete' }", "{\"n\":1}", NULL, "{\"n\":1}", "delete",
     NULL},
    {"def t = 0; for (int i = 0; i < 5; i++) { t += i } ctx._source.t = t", "{}", NULL,
     "{\"t\":10}", NULL, NULL},
    {"int i = 0; while (i < 3) { i++; } ctx._source.i = i;", "{}", NULL, "{\"i\":3}", NULL, NULL},
    /* an operand borrowed from a variable survives what is evaluated after
     * it (the right side replaces i): 3 * 4, and the arguments in order */
    {"int i = 3; ctx._source.p = i * ++i", "{}", NULL, "{\"p\":12}", NULL, NULL},
    {"int i = 1; ctx._source.l = [:]; ctx._source.l.put('k' + i, ++i)", "{}", NULL,
     "{\"l\":{\"k1\":2}}", NULL, NULL},
    {"def l = [5, 6]; int i = 0; ctx._source.v = l[i++] + l[i]", "{}", NULL, "{\"v\":11}", NULL,
     NULL},
    {"ctx._source.a.b = params.v", "{\"a\":{}}", "{\"v\":[1,2]}", "{\"a\":{\"b\":[1,2]}}", NULL,
     NULL},
    {"ctx._source['x y'] = ctx._source.list[1]", "{\"list\":[5,6]}", NULL,
     "{\"list\":[5,6],\"x y\":6}", NULL, NULL},
    {"ctx._source.m = [:]; ctx._source.m.put('k', 1); ctx._source.l = [1, 'a', null]", "{}", NULL,
     "{\"m\":{\"k\":1},\"l\":[1,\"a\",null]}", NULL, NULL},
    {"ctx._source.c = ctx._source.containsKey('n') && ctx._source.tags.size() == 1",
     "{\"n\":1,\"tags\":[1]}", NULL, "{\"n\":1,\"tags\":[1],\"c\":true}", NULL, NULL},
    {"if (ctx._source.missing == null) { ctx._source.missing = 0 }", "{}", NULL, "{\"missing\":0}",
     NULL, NULL},
    {"// a comment\nctx._source.n = 1; /* and another */", "{}", NULL, "{\"n\":1}", NULL, NULL},
    {"ctx._source.n = -ctx._source.n", "{\"n\":4}", NULL, "{\"n\":-4}", NULL, NULL},
    {"return; ctx._source.n = 1", "{}", NULL, "{}", NULL, NULL},
    /* run-time errors */
    {"ctx._source.n += 1", "{}", NULL, NULL, NULL, "missing value"},
    {"ctx._source.n = 1 / 0", "{}", NULL, NULL, NULL, "by zero"},
    {"ctx._source.n.x = 1", "{\"n\":3}", NULL, NULL, NULL, "non-object"},
    {"ctx._source.l[5] = 1", "{\"l\":[1]}", NULL, NULL, NULL, "out of bounds"},
    {"if (ctx._source.n) {}", "{\"n\":1}", NULL, NULL, NULL, "boolean"},
    {"ctx.op = 'explode'", "{}", NULL, NULL, NULL, "ctx.op"},
    {"params.x = 1", "{}", "{\"x\":0}", NULL, NULL, "read-only"},
    {"ctx._source.x.foo()", "{\"x\":1}", NULL, NULL, NULL, "unknown method"},
    {"while (true) {}", "{}", NULL, NULL, NULL, "more than"},
    {"for (;;) { ctx._source.n = 1 }", "{}", NULL, NULL, NULL, "more than"},
    {"def s = 'xxxxxxxxxxxxxxxx'; while (true) { s = s + s }", "{}", NULL, NULL, NULL,
     "longer than"},
    {"ctx._source = 5", "{}", NULL, NULL, NULL, "object"},
};

/* Scripts that must not compile, with the position of the error. */
static const struct {
	const char *script;
	int pos;
} BAD[] = {
    {"ctx._source.n = ", 16},
    {"ctx._source.n = 1 +", 19},
    {"if (x) {}", 4},
    {"ctx._source.n = 'abc", 16},
    {"ctx._source.n = 1 ) ", 18},
    {"ctx._source.n @ 1", 14},
    {"{ ctx._source.n = 1", 19},
    {"5 = ctx", 2},
    {"def ctx = 1", 4},
    {"ctx._source.n = 1 2", 18},
    {"---8", 4},
    {"ctx._source.n = ++5", 19},
    {"(1)++", 3},
};

static void
table(void)
{
	for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
		const tcase *c = &CASES[i];
		ps_script *s = NULL;
		cm_error err;
		cm_error_clear(&err);
		cm_err rc = ps_compile(c->script, strlen(c->script), &s, NULL, &err);
		CHECKF(rc == CM_OK, "compile [%s]: %s", c->script, err.reason);
		if (rc)
			continue;
		cJSON *ctx = cJSON_CreateObject();
		cJSON_AddItemToObject(ctx, "_source", cJSON_Parse(c->source));
		cJSON_AddStringToObject(ctx, "op", "index");
		cJSON *params = c->params ? cJSON_Parse(c->params) : NULL;
		cm_error_clear(&err);
		rc = ps_run(s, ctx, params, &err);
		if (c->want) {
			CHECKF(rc == CM_OK, "run [%s]: %s", c->script, err.reason);
			cJSON *want = cJSON_Parse(c->want);
			CHECKF(cJSON_Compare(want, cJSON_GetObjectItem(ctx, "_source"), true),
			       "[%s] gave %s", c->script,
			       cJSON_PrintUnformatted(cJSON_GetObjectItem(ctx, "_source")));
			cJSON_Delete(want);
			const char *op = cJSON_GetObjectItem(ctx, "op")->valuestring;
			CHECKF(!strcmp(op, c->want_op ? c->want_op : "index"), "[%s] op %s",
			       c->script, op);
		} else {
			CHECKF(rc == CM_EINVAL && !strcmp(err.type_override, "script_exception") &&
			           strstr(err.reason, c->err),
			       "[%s]: rc %d, %s", c->script, rc, err.reason);
		}
		cJSON_Delete(ctx);
		cJSON_Delete(params);
		ps_free(s);
	}
	for (size_t i = 0; i < sizeof(BAD) / sizeof(BAD[0]); i++) {
		ps_script *s = NULL;
		cm_error err;
		int pos = -1;
		cm_error_clear(&err);
		cm_err rc = ps_compile(BAD[i].script, strlen(BAD[i].script), &s, &pos, &err);
		CHECKF(rc == CM_EINVAL && !s && pos == BAD[i].pos &&
		           !strcmp(err.type_override, "script_exception") &&
		           strstr(err.reason, "position"),
		       "[%s]: rc %d pos %d: %s", BAD[i].script, rc, pos, err.reason);
	}
}

static void
hostile(void)
{
	/* deep nesting: refused at compile time, without blowing the stack */
	size_t n = 100000;
	char *deep = malloc(2 * n + 32);
	strcpy(deep, "ctx._source.n = ");
	size_t l = strlen(deep);
	for (size_t i = 0; i < n; i++)
		deep[l++] = '(';
	deep[l++] = '1';
	for (size_t i = 0; i < n; i++)
		deep[l++] = ')';
	deep[l] = 0;
	ps_script *s = NULL;
	cm_error err;
	cm_error_clear(&err);
	CHECK(ps_compile(deep, 200, &s, NULL, &err) == CM_EINVAL && strstr(err.reason, "deeply"));
	cm_error_clear(&err);
	CHECK(ps_compile(deep, l, &s, NULL, &err) == CM_EINVAL && strstr(err.reason, "bytes"));
	free(deep);
	/* long operator and field chains: bounded like nesting */
	char *chain = malloc(70000);
	strcpy(chain, "ctx._source.n = 1");
	for (size_t i = 0, l = strlen(chain); i < 20000; i++, l += 2)
		memcpy(chain + l, "+1", 3);
	cm_error_clear(&err);
	CHECK(ps_compile(chain, strlen(chain), &s, NULL, &err) == CM_EINVAL &&
	      strstr(err.reason, "deeply"));
	strcpy(chain, "ctx._source");
	for (size_t i = 0, l = strlen(chain); i < 5000; i++, l += 2)
		memcpy(chain + l, ".a", 3);
	cm_error_clear(&err);
	CHECK(ps_compile(chain, strlen(chain), &s, NULL, &err) == CM_EINVAL &&
	      strstr(err.reason, "deeply"));
	/* a long but allowed chain runs */
	strcpy(chain, "ctx._source.n = 1");
	for (size_t i = 0; i < 200; i++)
		strcat(chain, " + 1");
	cm_error_clear(&err);
	REQUIRE(ps_compile(chain, strlen(chain), &s, NULL, &err) == CM_OK);
	cJSON *c2 = cJSON_Parse("{\"_source\":{},\"op\":\"index\"}");
	CHECK(ps_run(s, c2, NULL, &err) == CM_OK &&
	      cJSON_GetObjectItem(cJSON_GetObjectItem(c2, "_source"), "n")->valuedouble == 201);
	cJSON_Delete(c2);
	ps_free(s);
	free(chain);
	/* an endless loop stops within the step bound, quickly */
	clock_t t0 = clock();
	cm_error_clear(&err);
	REQUIRE(ps_compile("while (1 < 2) { }", 17, &s, NULL, &err) == CM_OK);
	cJSON *ctx = cJSON_Parse("{\"_source\":{},\"op\":\"index\"}");
	CHECK(ps_run(s, ctx, NULL, &err) == CM_EINVAL);
	CHECKF((double)(clock() - t0) / CLOCKS_PER_SEC < 5, "%.1fs",
	       (double)(clock() - t0) / CLOCKS_PER_SEC);
	ps_free(s);
	cJSON_Delete(ctx);
	/* ps_from_json shapes */
	const cJSON *params;
	cJSON *j = cJSON_Parse("{\"source\":\"ctx._source.n = params.v\",\"lang\":\"painless\","
	                       "\"params\":{\"v\":1}}");
	cm_error_clear(&err);
	CHECK(ps_from_json(j, &s, &params, &err) == CM_OK && cJSON_IsObject(params));
	ps_free(s);
	cJSON_Delete(j);
	j = cJSON_Parse("{\"source\":\"1\",\"lang\":\"expression\"}");
	cm_error_clear(&err);
	CHECK(ps_from_json(j, &s, &params, &err) == CM_EINVAL);
	cJSON_Delete(j);
	j = cJSON_Parse("\"ctx._source.n = 1\"");
	cm_error_clear(&err);
	CHECK(ps_from_json(j, &s, &params, &err) == CM_OK && !params);
	ps_free(s);
	cJSON_Delete(j);
}

/* ps_exec over a plain ctx, as ingest conditions and the script
 * processor use it: the value, or an error containing want_err. */
static void
exec_case(const char *src, const char *ctx_json, const char *want, const char *want_err)
{
	ps_script *s;
	cm_error err;
	cm_error_clear(&err);
	cJSON *ctx = cJSON_Parse(ctx_json), *res = NULL;
	REQUIRE(ctx);
	cm_err rc = ps_compile(src, strlen(src), &s, NULL, &err);
	if (!rc) {
		rc = ps_exec(s, ctx, NULL, &res, &err);
		ps_free(s);
	}
	if (want_err) {
		CHECKF(rc && strstr(err.reason, want_err), "%s: %s", src, err.reason);
	} else {
		char *got = res ? cJSON_PrintUnformatted(res) : NULL;
		CHECKF(!rc && got && !strcmp(got, want), "%s: %s %s", src, got ? got : "(none)",
		       err.reason);
		cJSON_free(got);
	}
	cJSON_Delete(res);
	cJSON_Delete(ctx);
}

static void
ingest_ctx(void)
{
	exec_case("ctx.status == 'error'", "{\"status\":\"error\"}", "true", NULL);
	exec_case("ctx.status == 'error'", "{}", "false", NULL);
	exec_case("ctx.tags != null && ctx.tags.contains('x')", "{\"tags\":[\"y\",\"x\"]}", "true",
	          NULL);
	exec_case("ctx.tags != null && ctx.tags.contains('x')", "{}", "false", NULL);
	exec_case("ctx?.a?.b == 1", "{\"a\":{\"b\":1}}", "true", NULL);
	exec_case("ctx?.a?.b == 1", "{}", "false", NULL);
	exec_case("ctx.a?.b?.c", "{\"a\":null}", "null", NULL);
	exec_case("ctx.m?.startsWith('GET')", "{}", "null", NULL);
	exec_case("ctx.m.startsWith('GET') && ctx.m.endsWith('1')", "{\"m\":\"GET /x 1\"}", "true",
	          NULL);
	exec_case("ctx.m.endsWith('GET /x 1 2')", "{\"m\":\"GET /x 1\"}", "false", NULL);
	exec_case("ctx.m.toLowerCase() + ctx.m.toUpperCase()", "{\"m\":\"aB\"}", "\"abAB\"", NULL);
	exec_case("ctx.m.trim().isEmpty()", "{\"m\":\"  \"}", "true", NULL);
	exec_case("'x'.equals(ctx.m)", "{\"m\":\"x\"}", "true", NULL);
	exec_case("ctx.n = 2; ctx._index = 'b-' + ctx._index", "{\"_index\":\"a\"}", "\"b-a\"",
	          NULL);
	/* without ?. a field of null is an error */
	exec_case("ctx.a.b == 1", "{}", NULL, "cannot access field [b]");
	exec_case("ctx.a ?. b", "{}", "null", NULL);
	exec_case("ctx.n > 1 ? 'y' : 'n'", "{\"n\":2}", "\"y\"", NULL);
	exec_case("ctx.a ?: 'dflt'", "{}", "\"dflt\"", NULL);
	exec_case("ctx.a ?: 'dflt'", "{\"a\":\"x\"}", "\"x\"", NULL);
	exec_case("(ctx?.a?.b ?: 0) + 1 == 3", "{\"a\":{\"b\":2}}", "true", NULL);
	exec_case("ctx.a ?: ctx.b ?: 'c'", "{\"b\":false}", "false", NULL);
}

int
main(void)
{
	table();
	ingest_ctx();
	hostile();
	return check_report("ps_test");
}
