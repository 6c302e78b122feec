/* Grok: every library pattern compiles alone, references expand with
 * their captures (nested, typed, [a][b] names, custom definitions), and
 * bad patterns are refused in ES's words. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "co_grok.h"

/* Compiles one pattern (defs may be NULL) or fails the test. */
static co_grok *
compile1(const char *pat, const char *defs_json)
{
	cm_error err;
	cm_error_clear(&err);
	cJSON *defs = defs_json ? cJSON_Parse(defs_json) : NULL;
	char *v[1] = {(char *)pat};
	co_grok *g = NULL;
	cm_err rc = co_grok_compile(v, 1, defs, &g, &err);
	CHECKF(!rc, "%s: %s", pat, err.reason);
	cJSON_Delete(defs);
	return g;
}

/* The fields pat captures from s, printed, or "-1" when it does not match. */
static void
match_is(const char *pat, const char *defs, const char *s, const char *want)
{
	co_grok *g = compile1(pat, defs);
	if (!g)
		return;
	cm_error err;
	cm_error_clear(&err);
	cJSON *f;
	int hit = co_grok_match(g, s, &f, &err);
	char *got = f ? cJSON_PrintUnformatted(f) : strdup("-1");
	CHECKF(!strcmp(got, want), "%s on [%s]: %s, not %s (%d)", pat, s, got, want, hit);
	free(got);
	cJSON_Delete(f);
	co_grok_free(g);
}

static void
refused(const char *pat, const char *want)
{
	cm_error err;
	cm_error_clear(&err);
	char *v[1] = {(char *)pat};
	co_grok *g = NULL;
	cm_err rc = co_grok_compile(v, 1, NULL, &g, &err);
	CHECKF(rc == CM_EPARSE && strstr(err.reason, want) && !g, "%s: %s", pat, err.reason);
	co_grok_free(g);
}

int
main(void)
{
	static const char *const names[] = {"WORD",
	                                    "NOTSPACE",
	                                    "SPACE",
	                                    "DATA",
	                                    "GREEDYDATA",
	                                    "QUOTEDSTRING",
	                                    "UUID",
	                                    "INT",
	                                    "NUMBER",
	                                    "BASE10NUM",
	                                    "POSINT",
	                                    "NONNEGINT",
	                                    "IP",
	                                    "IPV4",
	                                    "IPV6",
	                                    "HOSTNAME",
	                                    "IPORHOST",
	                                    "HOSTPORT",
	                                    "URIPATH",
	                                    "URIPARAM",
	                                    "URIPATHPARAM",
	                                    "URI",
	                                    "USER",
	                                    "USERNAME",
	                                    "EMAILADDRESS",
	                                    "MONTH",
	                                    "MONTHNUM",
	                                    "MONTHDAY",
	                                    "YEAR",
	                                    "DAY",
	                                    "HOUR",
	                                    "MINUTE",
	                                    "SECOND",
	                                    "TIME",
	                                    "DATE",
	                                    "DATESTAMP",
	                                    "TIMESTAMP_ISO8601",
	                                    "HTTPDATE",
	                                    "SYSLOGTIMESTAMP",
	                                    "SYSLOGBASE",
	                                    "LOGLEVEL",
	                                    "COMMONAPACHELOG",
	                                    "COMBINEDAPACHELOG",
	                                    "MAC",
	                                    "PATH",
	                                    "URN",
	                                    "TZ",
	                                    "QS"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char pat[64];
		CHECKF(co_grok_builtin(names[i]) != NULL, "%s", names[i]);
		snprintf(pat, sizeof(pat), "%%{%s}", names[i]);
		co_grok_free(compile1(pat, NULL));
	}
	match_is("%{IP:ip} %{WORD:w}", NULL, "10.1.2.3 hello",
	         "{\"ip\":\"10.1.2.3\",\"w\":\"hello\"}");
	match_is("%{IP:ip}", NULL, "addr fe80::1 end", "{\"ip\":\"fe80::1\"}");
	match_is("^%{IP:ip}$", NULL, "2001:db8:85a3::8a2e:370:7334",
	         "{\"ip\":\"2001:db8:85a3::8a2e:370:7334\"}");
	match_is("^%{IPV4:ip}$", NULL, "256.1.1.1", "-1");
	match_is("%{NUMBER:n:int} %{NUMBER:f:float} %{NUMBER:s}", NULL, "42 2.5 7",
	         "{\"n\":42,\"f\":2.5,\"s\":\"7\"}");
	match_is("%{WORD:a.b} %{WORD:[c][d]}", NULL, "x y", "{\"a.b\":\"x\",\"c.d\":\"y\"}");
	match_is("%{FOO:f}-%{WORD}", "{\"FOO\":\"[a-z]+%{INT:n:long}\"}", "ab12-cd",
	         "{\"f\":\"ab12\",\"n\":12}");
	match_is("(?<raw>[a-z]+)=%{INT:v:int}", NULL, "k=5", "{\"raw\":\"k\",\"v\":5}");
	match_is("%{TIMESTAMP_ISO8601:ts} %{LOGLEVEL:level} %{GREEDYDATA:msg}", NULL,
	         "2024-03-01T10:20:30.123Z WARN disk almost full",
	         "{\"ts\":\"2024-03-01T10:20:30.123Z\",\"level\":\"WARN\",\"msg\":\"disk almost "
	         "full\"}");
	match_is("%{SYSLOGBASE} %{GREEDYDATA:message}", NULL,
	         "Mar  7 04:02:16 web1 sshd[1234]: Accepted publickey",
	         "{\"timestamp\":\"Mar  7 04:02:16\",\"logsource\":\"web1\",\"program\":\"sshd\","
	         "\"pid\":\"1234\",\"message\":\"Accepted publickey\"}");
	match_is("%{URI:u}", NULL, "see https://user@example.com:8080/a/b?x=1 now",
	         "{\"u\":\"https://user@example.com:8080/a/b?x=1\",\"port\":\"8080\"}");
	match_is("%{EMAILADDRESS:e} %{UUID:id}", NULL,
	         "a.b@ex.org 123e4567-e89b-12d3-a456-426614174000",
	         "{\"e\":\"a.b@ex.org\",\"id\":\"123e4567-e89b-12d3-a456-426614174000\"}");
	match_is("%{QUOTEDSTRING:q}", NULL, "say \"hi \\\"there\\\"\" ok",
	         "{\"q\":\"\\\"hi \\\\\\\"there\\\\\\\"\\\"\"}");
	match_is("%{COMBINEDAPACHELOG}", NULL,
	         "127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] \"GET /a.gif HTTP/1.0\" 200 2326 "
	         "\"http://x/\" \"Mozilla/4.08\"",
	         "{\"clientip\":\"127.0.0.1\",\"ident\":\"-\",\"auth\":\"frank\",\"timestamp\":"
	         "\"10/Oct/2000:13:55:36 -0700\",\"verb\":\"GET\",\"request\":\"/a.gif\","
	         "\"httpversion\":\"1.0\",\"response\":\"200\",\"bytes\":\"2326\",\"referrer\":"
	         "\"\\\"http://x/\\\"\",\"agent\":\"\\\"Mozilla/4.08\\\"\"}");
	match_is("%{WORD:w}", NULL, "   ", "-1");
	/* a second pattern is tried when the first does not match */
	{
		cm_error err;
		cm_error_clear(&err);
		char *v[2] = {"^%{INT:i}$", "^%{WORD:w}$"};
		co_grok *g = NULL;
		REQUIRE(co_grok_compile(v, 2, NULL, &g, &err) == CM_OK);
		cJSON *f;
		CHECK(co_grok_match(g, "abc", &f, &err) == 1 && f);
		cJSON_Delete(f);
		CHECK(co_grok_match(g, "12", &f, &err) == 0 && f);
		cJSON_Delete(f);
		CHECK(co_grok_match(g, "a b", &f, &err) == -1 && !f);
		co_grok_free(g);
	}
	refused("%{NOPE:x}", "Unable to find pattern [NOPE] in Grok's pattern dictionary");
	refused("%{WORD:x} (", "[patterns] Invalid regex pattern found in: [%{WORD:x} (]");
	{
		cm_error err;
		cm_error_clear(&err);
		cJSON *defs = cJSON_Parse("{\"A\":\"%{B}\",\"B\":\"x%{A}\"}");
		char *v[1] = {"%{A:a}"};
		co_grok *g = NULL;
		CHECK(co_grok_compile(v, 1, defs, &g, &err) == CM_EPARSE &&
		      strstr(err.reason, "circular reference in pattern [A]"));
		cJSON_Delete(defs);
	}
	match_is("%{INT:}-%{INT::int}", NULL, "1-2", "{}");
	/* not a reference: kept as literal text */
	match_is("%{ x", NULL, "a%{ x", "{}");
	return check_report("co_grok_test");
}
