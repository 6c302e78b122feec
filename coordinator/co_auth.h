/* Authentication and roles for the HTTP API: users from a file (argon2
 * password hashes), HTTP Basic and Elasticsearch-style API keys, a cache
 * of successful verifications, and one role per route. */
#ifndef CO_AUTH_H
#define CO_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/cm_err.h"

typedef struct cJSON cJSON;

/* Ordered: a role includes every role below it (admin ⊇ write ⊇ read).
 * UNSET is what a route table entry without a role holds; it is treated
 * as ADMIN, so a forgotten role fails closed. NONE is a user without
 * roles: authenticated, allowed only what needs no role. */
typedef enum {
	CO_ROLE_UNSET = 0,
	CO_ROLE_NONE,
	CO_ROLE_READ,
	CO_ROLE_WRITE,
	CO_ROLE_ADMIN
} co_role;

#define CO_AUTH_MAX_NAME 256   /* username, API key name (bytes) */
#define CO_AUTH_MAX_SECRET 512 /* password (bytes) */
#define CO_AUTH_KEY_ID_LEN 20  /* API key ids, as long as Elasticsearch's */
#define CO_AUTH_MAX_KEYS 10000 /* API keys held (valid or not) */

/* argon2id cost for password hashes: about 15 ms per verification on the
 * development machine (see docs/operations.md). */
#define CO_AUTH_ARGON2_T 3
#define CO_AUTH_ARGON2_M_KIB 8192

typedef struct co_auth co_auth;

/* Who a request runs as. */
typedef struct co_principal {
	char user[CO_AUTH_MAX_NAME + 1];
	co_role role;
	bool api_key;                        /* authenticated by an API key */
	char key_id[CO_AUTH_KEY_ID_LEN + 1]; /* when api_key */
	char key_name[CO_AUTH_MAX_NAME + 1]; /* when api_key */
} co_principal;

typedef enum {
	CO_AUTH_OK,
	CO_AUTH_MISSING,  /* no Authorization header, or a scheme we don't take */
	CO_AUTH_BAD_USER, /* Basic credentials that don't verify */
	CO_AUTH_BAD_KEY   /* an ApiKey that is unknown, wrong, expired or invalidated */
} co_auth_result;

const char *co_role_name(co_role r);
bool co_role_parse(const char *s, co_role *out);

/* Loads the users file and <data_dir>/security/api_keys.json (when it
 * exists). On a bad file returns an error whose reason names the file and
 * the problem in one line. *out is owned by the caller (co_auth_close). */
cm_err co_auth_open(const char *users_file, const char *data_dir, co_auth **out, cm_error *err);
void co_auth_close(co_auth *a);

/* Checks an Authorization header value (may be NULL). On CO_AUTH_OK fills
 * *p. On CO_AUTH_BAD_USER the username (input, for the 401 reason, never
 * for logs) is copied to who. Thread-safe. */
co_auth_result co_auth_check(co_auth *a, const char *authorization, co_principal *p, char *who,
                             size_t whocap);

/* An argon2id PHC string for the password (random salt), into out. */
cm_err co_auth_hash_password(const char *pw, size_t len, char *out, size_t cap, cm_error *err);

/* API keys (Elasticsearch's request and reply bodies). The returned cJSON
 * is owned by the caller. Create and invalidate persist the key file
 * atomically before answering. */
cm_err co_auth_key_create(co_auth *a, const co_principal *creator, const cJSON *body, cJSON **reply,
                          cm_error *err);
cJSON *co_auth_key_list(co_auth *a, const char *id, const char *name, const char *username,
                        const co_principal *owner);
cm_err co_auth_key_invalidate(co_auth *a, const co_principal *caller, const cJSON *body,
                              cJSON **reply, cm_error *err);

/* Pieces exposed for the unit test. */
/* Standard base64 (with padding); returns the decoded length or -1. */
long co_base64_decode(const char *in, size_t len, unsigned char *out, size_t cap);
size_t co_base64_encode(const unsigned char *in, size_t len, char *out, size_t cap);
/* "1d", "12h", "30m", "45s", "500ms" -> milliseconds; -1 when malformed. */
int64_t co_auth_parse_duration(const char *s);
/* Constant-time equality of two byte strings of length n. */
bool co_ct_equal(const void *a, const void *b, size_t n);

#endif
