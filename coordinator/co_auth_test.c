/* Authentication pieces: base64, durations, the users file checks, Basic
 * and ApiKey verification (and the cache), API key limits, and a role on
 * every route of the table. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cm_sys.h"
#include "check.h"
#include "co_auth.h"
#include "co_private.h"

static char dir[256];

static void
write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	REQUIRE(f);
	fputs(text, f);
	fclose(f);
}

static void
basic_header(const char *user, const char *pw, char *out, size_t cap)
{
	char pair[600];
	snprintf(pair, sizeof(pair), "%s:%s", user, pw);
	strcpy(out, "Basic ");
	co_base64_encode((const unsigned char *)pair, strlen(pair), out + 6, cap - 6);
}

static void
test_pieces(void)
{
	unsigned char out[64];
	char enc[64];
	CHECK(co_base64_encode((const unsigned char *)"alice:pw", 8, enc, sizeof(enc)) == 12);
	CHECK(strcmp(enc, "YWxpY2U6cHc=") == 0);
	CHECK(co_base64_decode("YWxpY2U6cHc=", 12, out, sizeof(out)) == 8);
	CHECK(memcmp(out, "alice:pw", 8) == 0);
	CHECK(co_base64_decode("YQ==", 4, out, sizeof(out)) == 1 && out[0] == 'a');
	CHECK(co_base64_decode("YWI=", 4, out, sizeof(out)) == 2);
	CHECK(co_base64_decode("Y", 1, out, sizeof(out)) == -1);
	CHECK(co_base64_decode("YW!x", 4, out, sizeof(out)) == -1);
	CHECK(co_base64_decode("YWxpY2U6cHc=", 12, out, 4) == -1); /* bounded */
	CHECK(co_auth_parse_duration("1d") == 86400000);
	CHECK(co_auth_parse_duration("30m") == 1800000);
	CHECK(co_auth_parse_duration("500ms") == 500);
	CHECK(co_auth_parse_duration("2h") == 7200000);
	CHECK(co_auth_parse_duration("1y") == -1);
	CHECK(co_auth_parse_duration("-1d") == -1);
	CHECK(co_auth_parse_duration("") == -1);
	CHECK(co_auth_parse_duration("99999999999999999999d") == -1);
	CHECK(co_ct_equal("abcd", "abcd", 4));
	CHECK(!co_ct_equal("abcd", "abce", 4));
}

/* Every route carries a role and an action name; a few representative
 * ones carry the role the docs promise. */
static void
test_routes(void)
{
	size_t n;
	const co_route *rt = co_routes(&n);
	static const struct {
		co_method m;
		const char *pattern;
		co_role role;
	} want[] = {
	    {CO_GET, "/", CO_ROLE_READ},
	    {CO_GET, "/{index}/_search", CO_ROLE_READ},
	    {CO_POST, "/_msearch", CO_ROLE_READ},
	    {CO_GET, "/_cat/{what}", CO_ROLE_READ},
	    {CO_GET, "/_cluster/health", CO_ROLE_READ},
	    {CO_POST, "/_bulk", CO_ROLE_WRITE},
	    {CO_PUT, "/{index}/_doc/{id}", CO_ROLE_WRITE},
	    {CO_POST, "/{index}/_update/{id}", CO_ROLE_WRITE},
	    {CO_POST, "/{index}/_delete_by_query", CO_ROLE_WRITE},
	    {CO_POST, "/{index}/_refresh", CO_ROLE_WRITE},
	    {CO_PUT, "/{index}", CO_ROLE_ADMIN},
	    {CO_DELETE, "/{index}", CO_ROLE_ADMIN},
	    {CO_PUT, "/{index}/_mapping", CO_ROLE_ADMIN},
	    {CO_PUT, "/{index}/_settings", CO_ROLE_ADMIN},
	    {CO_POST, "/{index}/_forcemerge", CO_ROLE_ADMIN},
	    {CO_POST, "/{index}/_flush", CO_ROLE_ADMIN},
	    {CO_PUT, "/_cluster/settings", CO_ROLE_ADMIN},
	    {CO_POST, "/_security/api_key", CO_ROLE_ADMIN},
	    {CO_DELETE, "/_security/api_key", CO_ROLE_ADMIN},
	    {CO_GET, "/_security/_authenticate", CO_ROLE_NONE},
	    {CO_GET, "/_shoal/ui", CO_ROLE_READ},
	    {CO_GET, "/_shoal/ui/{file}", CO_ROLE_READ},
	    {CO_GET, "/_shoal/stats/fanout", CO_ROLE_READ},
	    {CO_GET, "/_shoal/stats/nodes", CO_ROLE_READ},
	};
	for (size_t i = 0; i < n; i++) {
		CHECKF(rt[i].role != CO_ROLE_UNSET, "route %s has no role", rt[i].pattern);
		CHECKF(rt[i].action && strchr(rt[i].action, ':'), "route %s has no action name",
		       rt[i].pattern);
		/* only the identity endpoint is open to users without roles */
		CHECKF(rt[i].role != CO_ROLE_NONE || rt[i].handler == co_h_security_authenticate,
		       "route %s needs no role", rt[i].pattern);
	}
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		bool found = false;
		for (size_t i = 0; i < n; i++)
			if (rt[i].method == want[k].m &&
			    strcmp(rt[i].pattern, want[k].pattern) == 0) {
				found = true;
				CHECKF(rt[i].role == want[k].role, "route %s: role %s, want %s",
				       want[k].pattern, co_role_name(rt[i].role),
				       co_role_name(want[k].role));
			}
		CHECKF(found, "route %s missing", want[k].pattern);
	}
}

static void
bad_users(const char *text, const char *expect)
{
	char path[300];
	co_auth *a = NULL;
	cm_error err;
	snprintf(path, sizeof(path), "%s/bad-users.json", dir);
	write_file(path, text);
	cm_error_clear(&err);
	CHECKF(co_auth_open(path, dir, &a, &err) != CM_OK, "accepted %s", text);
	CHECKF(strstr(err.reason, path) && strstr(err.reason, expect), "reason [%s] for %s",
	       err.reason, text);
	CHECK(!strchr(err.reason, '\n'));
	if (a)
		co_auth_close(a);
}

static void
test_users_file(const char *hash)
{
	char text[1024];
	co_auth *a = NULL;
	cm_error err;

	cm_error_clear(&err);
	CHECK(co_auth_open("/nonexistent/users.json", dir, &a, &err) != CM_OK);
	CHECK(strstr(err.reason, "/nonexistent/users.json") && strstr(err.reason, "no such file"));
	bad_users("{\"users\":[", "not valid JSON");
	bad_users("[]", "want {\"users\"");
	bad_users("{\"users\":[]}", "no users");
	snprintf(text, sizeof(text),
	         "{\"users\":[{\"username\":\"a\",\"hash\":\"%s\",\"roles\":[\"root\"]}]}", hash);
	bad_users(text, "unknown role [root]");
	bad_users("{\"users\":[{\"username\":\"a\",\"hash\":\"plain\",\"roles\":[\"read\"]}]}",
	          "not an argon2 PHC string");
	bad_users(
	    "{\"users\":[{\"username\":\"a\",\"hash\":\"$argon2id$v=19$m=99999999,t=1,p=1$c2FsdA$"
	    "aGFzaA\",\"roles\":[\"read\"]}]}",
	    "cost out of bounds");
	bad_users(
	    "{\"users\":[{\"username\":\"a\",\"hash\":\"$argon2id$v=19$m=8,t=1$x$y\",\"roles\":"
	    "[\"read\"]}]}",
	    "malformed");
	snprintf(
	    text, sizeof(text),
	    "{\"users\":[{\"username\":\"a\",\"hash\":\"%s\",\"roles\":[]},{\"username\":\"a\","
	    "\"hash\":\"%s\",\"roles\":[]}]}",
	    hash, hash);
	bad_users(text, "appears twice");
	snprintf(text, sizeof(text),
	         "{\"users\":[{\"username\":\"a:b\",\"hash\":\"%s\",\"roles\":[]}]}", hash);
	bad_users(text, "without ':'");
	snprintf(text, sizeof(text),
	         "{\"users\":[{\"username\":\"a\",\"hash\":\"%s\",\"role\":\"read\"}]}", hash);
	bad_users(text, "unknown field [role]");
}

static co_auth *
open_auth(const char *users_path)
{
	co_auth *a = NULL;
	cm_error err;
	cm_error_clear(&err);
	CHECKF(co_auth_open(users_path, dir, &a, &err) == CM_OK, "%s", err.reason);
	REQUIRE(a);
	return a;
}

static void
test_check(const char *users_path)
{
	co_auth *a = open_auth(users_path);
	co_principal p;
	char h[700], who[300];

	CHECK(co_auth_check(a, NULL, &p, who, sizeof(who)) == CO_AUTH_MISSING);
	CHECK(co_auth_check(a, "Bearer abc", &p, who, sizeof(who)) == CO_AUTH_MISSING);
	basic_header("alice", "secret-a", h, sizeof(h));
	uint64_t t0 = cm_now_ns();
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_OK);
	uint64_t slow = cm_now_ns() - t0, fast = UINT64_MAX;
	CHECK(strcmp(p.user, "alice") == 0 && p.role == CO_ROLE_ADMIN && !p.api_key);
	/* later checks come from the cache: far quicker than an argon2 run
	 * (the best of three, so one descheduling does not fail the test) */
	for (int i = 0; i < 3; i++) {
		t0 = cm_now_ns();
		CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_OK);
		if (cm_now_ns() - t0 < fast)
			fast = cm_now_ns() - t0;
	}
	CHECKF(fast * 4 < slow, "cached check took %.3f ms, argon2 %.3f ms", fast / 1e6,
	       slow / 1e6);
	basic_header("alice", "secret-b", h, sizeof(h));
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_BAD_USER);
	CHECK(strcmp(who, "alice") == 0);
	basic_header("mallory", "secret-a", h, sizeof(h));
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_BAD_USER);
	CHECK(co_auth_check(a, "Basic !!!", &p, who, sizeof(who)) == CO_AUTH_BAD_USER);
	/* no colon: nothing echoed (it could be a password) */
	CHECK(co_auth_check(a, "Basic c2VjcmV0LWE=", &p, who, sizeof(who)) == CO_AUTH_BAD_USER);
	CHECK(who[0] == 0);
	basic_header("bob", "secret-b", h, sizeof(h));
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_OK && p.role == CO_ROLE_READ);
	basic_header("carol", "secret-c", h, sizeof(h));
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_OK && p.role == CO_ROLE_WRITE);
	co_auth_close(a);
}

static cJSON *
create_key(co_auth *a, const co_principal *creator, const char *body, cm_err *rc, cm_error *err)
{
	cJSON *b = cJSON_Parse(body), *reply = NULL;
	cm_error_clear(err);
	*rc = co_auth_key_create(a, creator, b, &reply, err);
	cJSON_Delete(b);
	return reply;
}

static void
test_keys(const char *users_path)
{
	co_auth *a = open_auth(users_path);
	co_principal admin, writer, p;
	char h[300], who[64];
	cm_error err;
	cm_err rc;
	cJSON *k;

	memset(&admin, 0, sizeof(admin));
	strcpy(admin.user, "alice");
	admin.role = CO_ROLE_ADMIN;
	memset(&writer, 0, sizeof(writer));
	strcpy(writer.user, "carol");
	writer.role = CO_ROLE_WRITE;

	k = create_key(a, &admin, "{\"name\":\"r\",\"role\":\"read\"}", &rc, &err);
	REQUIRE(rc == CM_OK && k);
	snprintf(h, sizeof(h), "ApiKey %s", cJSON_GetObjectItem(k, "encoded")->valuestring);
	char id[32];
	snprintf(id, sizeof(id), "%s", cJSON_GetObjectItem(k, "id")->valuestring);
	CHECK(strlen(id) == CO_AUTH_KEY_ID_LEN);
	CHECK(strlen(cJSON_GetObjectItem(k, "api_key")->valuestring) == 22);
	cJSON_Delete(k);
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_OK);
	CHECK(p.api_key && p.role == CO_ROLE_READ && strcmp(p.user, "alice") == 0);
	CHECK(strcmp(p.key_id, id) == 0 && strcmp(p.key_name, "r") == 0);
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_OK); /* cached */
	/* a wrong secret with the right id */
	char bad[300];
	snprintf(bad, sizeof(bad), "%s:AAAAAAAAAAAAAAAAAAAAAA", id);
	char badh[300] = "ApiKey ";
	co_base64_encode((const unsigned char *)bad, strlen(bad), badh + 7, sizeof(badh) - 7);
	CHECK(co_auth_check(a, badh, &p, who, sizeof(who)) == CO_AUTH_BAD_KEY);
	CHECK(co_auth_check(a, "ApiKey Zm9v", &p, who, sizeof(who)) == CO_AUTH_BAD_KEY);

	/* never more than the creator */
	k = create_key(a, &writer, "{\"name\":\"x\",\"role\":\"admin\"}", &rc, &err);
	CHECK(rc != CM_OK && !k && strstr(err.reason, "more than its creator"));
	k = create_key(a, &writer, "{\"name\":\"x\"}", &rc, &err);
	CHECK(rc == CM_OK && strcmp(cJSON_GetObjectItem(k, "role")->valuestring, "write") == 0);
	cJSON_Delete(k);
	/* role descriptors map onto roles; what we cannot honour is refused */
	k = create_key(a, &admin,
	               "{\"name\":\"d\",\"role_descriptors\":{\"r1\":{\"cluster\":[\"monitor\"],"
	               "\"indices\":[{\"names\":[\"*\"],\"privileges\":[\"read\"]}]}}}",
	               &rc, &err);
	CHECK(rc == CM_OK && strcmp(cJSON_GetObjectItem(k, "role")->valuestring, "read") == 0);
	cJSON_Delete(k);
	k = create_key(a, &admin,
	               "{\"name\":\"d\",\"role_descriptors\":{\"r1\":{\"indices\":[{\"names\":"
	               "[\"logs-*\"],\"privileges\":[\"read\"]}]}}}",
	               &rc, &err);
	CHECK(rc != CM_OK && strstr(err.reason, "some indices"));
	k = create_key(a, &admin,
	               "{\"name\":\"d\",\"role_descriptors\":{\"r\":{\"cluster\":[\"x\"]}}}", &rc,
	               &err);
	CHECK(rc != CM_OK && strstr(err.reason, "unknown cluster privilege"));
	k = create_key(a, &admin, "{\"role\":\"read\"}", &rc, &err);
	CHECK(rc != CM_OK && strstr(err.reason, "name is required"));
	k = create_key(a, &admin, "{\"name\":\"n\",\"expiration\":\"soon\"}", &rc, &err);
	CHECK(rc != CM_OK && strstr(err.reason, "expiration"));
	k = create_key(a, &admin, "{\"name\":\"n\",\"bogus\":1}", &rc, &err);
	CHECK(rc != CM_OK && strstr(err.reason, "unknown field [bogus]"));

	/* an expired key stops working */
	k = create_key(a, &admin, "{\"name\":\"short\",\"expiration\":\"1ms\"}", &rc, &err);
	REQUIRE(rc == CM_OK && k);
	char eh[300];
	snprintf(eh, sizeof(eh), "ApiKey %s", cJSON_GetObjectItem(k, "encoded")->valuestring);
	cJSON_Delete(k);
	usleep(5000);
	CHECK(co_auth_check(a, eh, &p, who, sizeof(who)) == CO_AUTH_BAD_KEY);

	/* keys survive a restart; invalidation sticks and drops the cache */
	co_auth_close(a);
	a = open_auth(users_path);
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_OK);
	cJSON *list = co_auth_key_list(a, id, NULL, NULL, NULL);
	char *ls = cJSON_PrintUnformatted(list);
	CHECK(strstr(ls, id) && !strstr(ls, "hash") && !strstr(ls, "api_key\":\""));
	cJSON_free(ls);
	cJSON_Delete(list);
	cJSON *body = cJSON_Parse("{\"ids\":[]}"), *reply = NULL;
	cm_error_clear(&err);
	CHECK(co_auth_key_invalidate(a, &admin, body, &reply, &err) != CM_OK);
	cJSON_Delete(body);
	char inv[100];
	snprintf(inv, sizeof(inv), "{\"ids\":[\"%s\"]}", id);
	body = cJSON_Parse(inv);
	cm_error_clear(&err);
	CHECK(co_auth_key_invalidate(a, &admin, body, &reply, &err) == CM_OK);
	CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(reply, "invalidated_api_keys")) == 1);
	cJSON_Delete(reply);
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_BAD_KEY);
	reply = NULL;
	CHECK(co_auth_key_invalidate(a, &admin, body, &reply, &err) == CM_OK);
	CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(reply, "previously_invalidated_api_keys")) ==
	      1);
	cJSON_Delete(reply);
	cJSON_Delete(body);
	co_auth_close(a);
	a = open_auth(users_path);
	CHECK(co_auth_check(a, h, &p, who, sizeof(who)) == CO_AUTH_BAD_KEY);
	co_auth_close(a);
}

int
main(void)
{
	char ha[256], hb[256], hc[256], text[1200], users[300];
	cm_error err;

	snprintf(dir, sizeof(dir), "/tmp/co_auth_test.%d", (int)getpid());
	cm_rm_rf(dir);
	REQUIRE(cm_mkdir_p(dir) == CM_OK);
	test_pieces();
	test_routes();
	cm_error_clear(&err);
	REQUIRE(co_auth_hash_password("secret-a", 8, ha, sizeof(ha), &err) == CM_OK);
	REQUIRE(co_auth_hash_password("secret-b", 8, hb, sizeof(hb), &err) == CM_OK);
	REQUIRE(co_auth_hash_password("secret-c", 8, hc, sizeof(hc), &err) == CM_OK);
	CHECK(strncmp(ha, "$argon2id$v=19$m=8192,t=3,p=1$", 30) == 0);
	test_users_file(ha);
	snprintf(users, sizeof(users), "%s/users.json", dir);
	snprintf(text, sizeof(text),
	         "{\"users\":[{\"username\":\"alice\",\"hash\":\"%s\",\"roles\":[\"admin\"]},"
	         "{\"username\":\"bob\",\"hash\":\"%s\",\"roles\":[\"read\"]},"
	         "{\"username\":\"carol\",\"hash\":\"%s\",\"roles\":[\"read\",\"write\"]}]}",
	         ha, hb, hc);
	write_file(users, text);
	test_check(users);
	test_keys(users);
	cm_rm_rf(dir);
	return check_report("co_auth_test");
}
