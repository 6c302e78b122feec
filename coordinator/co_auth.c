/* Users, API keys and the verification cache (see co_auth.h).
 *
 * Secrets: passwords are kept only as the argon2 PHC strings of the users
 * file. An API key's secret is 128 random bits (getrandom); the key file
 * holds an argon2id hash of it at the lowest cost (t=1, 8 KiB, ~20 us):
 * with that much entropy a slow hash buys nothing, while argon2 (BLAKE2b
 * inside) keeps it a one-way function without another crypto library.
 * Successful verifications are cached for CACHE_TTL_NS under a digest of
 * (credentials, stored hash) computed with the same cheap argon2 and a
 * salt drawn at start, kept only in memory. */
#define _GNU_SOURCE
#include <argon2.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "co_auth.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR

#define USERS_FILE_MAX (4u << 20)
#define KEYS_FILE_MAX (64u << 20)
#define MAX_USERS 10000
#define MAX_ROLES_PER_USER 16
#define KEY_SECRET_BYTES 16 /* 128 bits -> 22 base64url characters */
#define KEY_SECRET_LEN 22
#define KEY_META_MAX 4096                         /* bytes of API key metadata, as JSON */
#define KEY_RETENTION_MS (7ll * 24 * 3600 * 1000) /* ES's delete.retention_period */
#define CACHE_SLOTS 4096
#define CACHE_WAYS 8
#define CACHE_TTL_NS (300ull * 1000000000ull)
#define SLOW_VERIFIES 4             /* argon2 runs at once (8 MiB each) */
#define MAX_ARGON2_M_KIB (1u << 20) /* refuse hashes asking for more than 1 GiB */
#define MAX_ARGON2_T 64
#define FAIL_LOGS_PER_SEC 10 /* failed-login lines; the rest are counted */

typedef struct user {
	char *name;
	char *hash; /* PHC string */
	argon2_type type;
	co_role role; /* the highest of its roles */
	char **roles; /* as written in the file */
	int nroles;
	char *full_name, *email;
} user;

typedef struct api_key {
	char id[CO_AUTH_KEY_ID_LEN + 1];
	char *name;
	char *hash;     /* PHC string of the secret */
	char *username; /* creator */
	co_role role;
	int64_t creation, expiration, invalidation; /* epoch ms; 0 = none */
	cJSON *metadata;                            /* may be NULL */
} api_key;

typedef struct cache_ent {
	uint8_t digest[32];
	uint64_t expires_ns;
	uint64_t gen;
	int64_t key_expiration; /* epoch ms, 0 = none */
	bool used;
	co_principal p;
} cache_ent;

struct co_auth {
	char *users_path;
	char *keys_path;
	char *keys_dir;
	user *users;
	int nusers;
	char *dummy_hash;   /* verified for unknown users so they take as long */
	pthread_mutex_t mu; /* keys, cache, gen */
	api_key *keys;
	int nkeys;
	uint64_t gen; /* bumped when a key is invalidated: older cache entries die */
	cache_ent *cache;
	uint8_t cache_salt[16];
	pthread_mutex_t gate_mu;
	pthread_cond_t gate_cv;
	int slow_running;
	pthread_mutex_t log_mu;
	uint64_t log_second; /* the second fail_logs counts in */
	int fail_logs;
	uint64_t fail_suppressed;
};

/* ---- small pieces ---- */

const char *
co_role_name(co_role r)
{
	switch (r) {
	case CO_ROLE_NONE:
		return "none";
	case CO_ROLE_READ:
		return "read";
	case CO_ROLE_WRITE:
		return "write";
	case CO_ROLE_ADMIN:
	case CO_ROLE_UNSET:
		return "admin";
	}
	return "admin";
}

bool
co_role_parse(const char *s, co_role *out)
{
	if (strcmp(s, "read") == 0)
		*out = CO_ROLE_READ;
	else if (strcmp(s, "write") == 0)
		*out = CO_ROLE_WRITE;
	else if (strcmp(s, "admin") == 0)
		*out = CO_ROLE_ADMIN;
	else
		return false;
	return true;
}

bool
co_ct_equal(const void *a, const void *b, size_t n)
{
	const volatile unsigned char *x = a, *y = b;
	unsigned char d = 0;
	for (size_t i = 0; i < n; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static size_t
encode_with(const char *alpha, bool pad, const unsigned char *in, size_t len, char *out, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		size_t n = len - i < 3 ? len - i : 3;
		if (n > 1)
			v |= (uint32_t)in[i + 1] << 8;
		if (n > 2)
			v |= in[i + 2];
		char c[4] = {alpha[(v >> 18) & 63], alpha[(v >> 12) & 63], alpha[(v >> 6) & 63],
		             alpha[v & 63]};
		size_t emit = pad ? 4 : n + 1;
		if (n < 3 && pad) {
			c[3] = '=';
			if (n < 2)
				c[2] = '=';
		}
		for (size_t k = 0; k < emit; k++) {
			if (o + 1 >= cap)
				return 0;
			out[o++] = c[k];
		}
	}
	if (o >= cap)
		return 0;
	out[o] = 0;
	return o;
}

size_t
co_base64_encode(const unsigned char *in, size_t len, char *out, size_t cap)
{
	return encode_with(b64, true, in, len, out, cap);
}

static int
b64_val(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;
	return p ? (int)(p - b64) : -1;
}

long
co_base64_decode(const char *in, size_t len, unsigned char *out, size_t cap)
{
	size_t o = 0;
	uint32_t acc = 0;
	int bits = 0;
	size_t padding = 0;

	while (len > 0 && in[len - 1] == '=' && padding < 2) {
		len--;
		padding++;
	}
	if ((len + padding) % 4 != 0 && padding)
		return -1;
	for (size_t i = 0; i < len; i++) {
		int v = b64_val(in[i]);
		if (v < 0)
			return -1;
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o >= cap)
				return -1;
			out[o++] = (unsigned char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	if (bits >= 6) /* one lone character cannot encode a byte */
		return -1;
	return (long)o;
}

static bool
random_bytes(void *buf, size_t n)
{
	unsigned char *p = buf;
	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		p += got;
		n -= (size_t)got;
	}
	return true;
}

int64_t
co_auth_parse_duration(const char *s)
{
	char *end;
	if (!s || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || v < 0)
		return -1;
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].unit) == 0) {
			if (v > INT64_MAX / units[i].ms / 2)
				return -1;
			return v * units[i].ms;
		}
	return -1;
}

/* Checks "$argon2id$v=19$m=..,t=..,p=..$salt$hash" without running it, and
 * bounds the cost a file can ask of every verification. */
static bool
phc_ok(const char *s, argon2_type *type, char *why, size_t cap)
{
	unsigned v = 19, m, t, p;
	int n = 0;
	const char *rest;

	if (strncmp(s, "$argon2id$", 10) == 0) {
		*type = Argon2_id;
		rest = s + 10;
	} else if (strncmp(s, "$argon2i$", 9) == 0) {
		*type = Argon2_i;
		rest = s + 9;
	} else if (strncmp(s, "$argon2d$", 9) == 0) {
		*type = Argon2_d;
		rest = s + 9;
	} else {
		snprintf(why, cap,
		         "not an argon2 PHC string (want $argon2id$v=19$m=..,t=..,p=..$..$..; "
		         "make one with shoal --hash-password)");
		return false;
	}
	if (strncmp(rest, "v=", 2) == 0) {
		if (sscanf(rest, "v=%u$%n", &v, &n) != 1 || n == 0 || (v != 19 && v != 16))
			goto bad;
		rest += n;
	}
	n = 0;
	if (sscanf(rest, "m=%u,t=%u,p=%u$%n", &m, &t, &p, &n) != 3 || n == 0)
		goto bad;
	rest += n;
	if (m > MAX_ARGON2_M_KIB || t > MAX_ARGON2_T || t < 1 || p < 1 || p > 64 || m < 8 * p) {
		snprintf(why, cap, "argon2 cost out of bounds (m <= %u KiB, 1 <= t <= %u, p <= 64)",
		         MAX_ARGON2_M_KIB, MAX_ARGON2_T);
		return false;
	}
	const char *dollar = strchr(rest, '$');
	if (!dollar || dollar == rest || !dollar[1])
		goto bad;
	for (const char *c = rest; *c; c++)
		if (c != dollar && !isalnum((unsigned char)*c) && *c != '+' && *c != '/')
			goto bad;
	return true;
bad:
	snprintf(why, cap, "malformed argon2 PHC string");
	return false;
}

/* ---- the slow-verification gate ---- */

static void
gate_enter(co_auth *a)
{
	pthread_mutex_lock(&a->gate_mu);
	while (a->slow_running >= SLOW_VERIFIES)
		pthread_cond_wait(&a->gate_cv, &a->gate_mu);
	a->slow_running++;
	pthread_mutex_unlock(&a->gate_mu);
}

static void
gate_leave(co_auth *a)
{
	pthread_mutex_lock(&a->gate_mu);
	a->slow_running--;
	pthread_cond_signal(&a->gate_cv);
	pthread_mutex_unlock(&a->gate_mu);
}

/* ---- users file ---- */

static void
user_free(user *u)
{
	cm_free(MEM, u->name);
	cm_free(MEM, u->hash);
	for (int i = 0; i < u->nroles; i++)
		cm_free(MEM, u->roles[i]);
	cm_free(MEM, u->roles);
	cm_free(MEM, u->full_name);
	cm_free(MEM, u->email);
}

static bool
printable_name(const char *s)
{
	if (!*s)
		return false;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f || *p == ':')
			return false;
	return true;
}

static cm_err
load_user(co_auth *a, const cJSON *o, int i, cm_error *err)
{
	const cJSON *c;
	user *u = &a->users[a->nusers];
	char why[200];
	const char *path = a->users_path;

	if (!cJSON_IsObject(o))
		return cm_error_set(err, CM_EINVAL, "users file %s: users[%d] is not an object",
		                    path, i);
	cJSON_ArrayForEach(c, o)
	{
		if (strcmp(c->string, "username") && strcmp(c->string, "hash") &&
		    strcmp(c->string, "roles") && strcmp(c->string, "full_name") &&
		    strcmp(c->string, "email"))
			return cm_error_set(
			    err, CM_EINVAL,
			    "users file %s: users[%d]: unknown field [%.60s] (username, hash, "
			    "roles, full_name, email)",
			    path, i, c->string);
	}
	c = cJSON_GetObjectItemCaseSensitive(o, "username");
	if (!cJSON_IsString(c) || !printable_name(c->valuestring) ||
	    strlen(c->valuestring) > CO_AUTH_MAX_NAME)
		return cm_error_set(
		    err, CM_EINVAL,
		    "users file %s: users[%d]: username must be a non-empty string of at "
		    "most %d bytes without ':' or control characters",
		    path, i, CO_AUTH_MAX_NAME);
	for (int k = 0; k < a->nusers; k++)
		if (strcmp(a->users[k].name, c->valuestring) == 0)
			return cm_error_set(err, CM_EINVAL,
			                    "users file %s: user [%.100s] appears twice", path,
			                    c->valuestring);
	memset(u, 0, sizeof(*u));
	u->name = cm_strdup(MEM, c->valuestring);
	a->nusers++; /* from here u is freed with the rest on failure */
	c = cJSON_GetObjectItemCaseSensitive(o, "hash");
	if (!cJSON_IsString(c))
		return cm_error_set(err, CM_EINVAL,
		                    "users file %s: user [%.100s]: no \"hash\" string", path,
		                    u->name);
	if (strlen(c->valuestring) > 512 || !phc_ok(c->valuestring, &u->type, why, sizeof(why)))
		return cm_error_set(err, CM_EINVAL, "users file %s: user [%.100s]: %s", path,
		                    u->name, strlen(c->valuestring) > 512 ? "hash too long" : why);
	u->hash = cm_strdup(MEM, c->valuestring);
	c = cJSON_GetObjectItemCaseSensitive(o, "roles");
	if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) > MAX_ROLES_PER_USER)
		return cm_error_set(
		    err, CM_EINVAL,
		    "users file %s: user [%.100s]: \"roles\" must be an array (of read, "
		    "write, admin)",
		    path, u->name);
	u->role = CO_ROLE_NONE;
	u->roles = cm_calloc(MEM, (size_t)cJSON_GetArraySize(c) + 1, sizeof(char *));
	const cJSON *rc;
	cJSON_ArrayForEach(rc, c)
	{
		co_role r;
		if (!cJSON_IsString(rc) || !co_role_parse(rc->valuestring, &r))
			return cm_error_set(
			    err, CM_EINVAL,
			    "users file %s: user [%.100s]: unknown role [%.60s] (read, write, "
			    "admin)",
			    path, u->name, cJSON_IsString(rc) ? rc->valuestring : "?");
		u->roles[u->nroles++] = cm_strdup(MEM, rc->valuestring);
		if (r > u->role)
			u->role = r;
	}
	c = cJSON_GetObjectItemCaseSensitive(o, "full_name");
	if (cJSON_IsString(c))
		u->full_name = cm_strndup(MEM, c->valuestring, strnlen(c->valuestring, 256));
	c = cJSON_GetObjectItemCaseSensitive(o, "email");
	if (cJSON_IsString(c))
		u->email = cm_strndup(MEM, c->valuestring, strnlen(c->valuestring, 256));
	return CM_OK;
}

static cm_err
load_users(co_auth *a, cm_error *err)
{
	char *text = NULL;
	size_t len;
	cJSON *doc = NULL, *arr, *o;
	cm_err rc;
	int i = 0;

	rc = cm_file_read(a->users_path, USERS_FILE_MAX, &text, &len);
	if (rc)
		return cm_error_set(err, CM_EINVAL, "users file %s: %s", a->users_path,
		                    rc == CM_ENOTFOUND   ? "no such file"
		                    : rc == CM_ETOOLARGE ? "larger than 4 MB"
		                                         : "cannot be read");
	doc = cJSON_ParseWithLength(text, len);
	cm_free(CM_MEM_COMMON, text);
	arr = cJSON_GetObjectItemCaseSensitive(doc, "users");
	if (!cJSON_IsObject(doc) || !cJSON_IsArray(arr)) {
		rc = cm_error_set(err, CM_EINVAL, "users file %s: %s", a->users_path,
		                  doc ? "want {\"users\":[{\"username\",\"hash\",\"roles\"},..]}"
		                      : "not valid JSON");
		goto fail;
	}
	if (cJSON_GetArraySize(arr) == 0 || cJSON_GetArraySize(arr) > MAX_USERS) {
		rc = cm_error_set(err, CM_EINVAL, "users file %s: %s", a->users_path,
		                  cJSON_GetArraySize(arr) ? "more than 10000 users"
		                                          : "no users (nobody could log in)");
		goto fail;
	}
	a->users = cm_calloc(MEM, (size_t)cJSON_GetArraySize(arr), sizeof(user));
	cJSON_ArrayForEach(o, arr)
	{
		if ((rc = load_user(a, o, i++, err)))
			goto fail;
	}
	cJSON_Delete(doc);
	return CM_OK;
fail:
	cJSON_Delete(doc);
	return rc;
}

static const user *
find_user(const co_auth *a, const char *name)
{
	for (int i = 0; i < a->nusers; i++)
		if (strcmp(a->users[i].name, name) == 0)
			return &a->users[i];
	return NULL;
}

/* ---- API key file ---- */

static void
key_free(api_key *k)
{
	cm_free(MEM, k->name);
	cm_free(MEM, k->hash);
	cm_free(MEM, k->username);
	cJSON_Delete(k->metadata);
}

static cJSON *
keys_json(const co_auth *a)
{
	cJSON *doc = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(doc, "api_keys");
	for (int i = 0; i < a->nkeys; i++) {
		const api_key *k = &a->keys[i];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", k->id);
		cJSON_AddStringToObject(o, "name", k->name);
		cJSON_AddStringToObject(o, "hash", k->hash);
		cJSON_AddStringToObject(o, "username", k->username);
		cJSON_AddStringToObject(o, "role", co_role_name(k->role));
		cJSON_AddNumberToObject(o, "creation", (double)k->creation);
		if (k->expiration)
			cJSON_AddNumberToObject(o, "expiration", (double)k->expiration);
		if (k->invalidation)
			cJSON_AddNumberToObject(o, "invalidation", (double)k->invalidation);
		if (k->metadata)
			cJSON_AddItemToObject(o, "metadata", cJSON_Duplicate(k->metadata, true));
		cJSON_AddItemToArray(arr, o);
	}
	return doc;
}

/* Called with a->mu held. */
static cm_err
keys_save(co_auth *a)
{
	cJSON *doc = keys_json(a);
	char *s = cJSON_PrintUnformatted(doc);
	cm_err rc;

	cJSON_Delete(doc);
	if (!s)
		return CM_ENOMEM;
	rc = cm_mkdir_p(a->keys_dir);
	if (!rc)
		rc = cm_file_write_atomic(a->keys_path, s, strlen(s));
	cJSON_free(s);
	return rc;
}

static int64_t
num_field(const cJSON *o, const char *k)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(c) ? (int64_t)c->valuedouble : 0;
}

static cm_err
load_keys(co_auth *a, cm_error *err)
{
	char *text = NULL;
	size_t len;
	cJSON *doc, *arr, *o;
	cm_err rc = cm_file_read(a->keys_path, KEYS_FILE_MAX, &text, &len);
	char why[200];

	if (rc == CM_ENOTFOUND)
		return CM_OK;
	if (rc)
		return cm_error_set(err, CM_EIO, "API key file %s cannot be read", a->keys_path);
	doc = cJSON_ParseWithLength(text, len);
	cm_free(CM_MEM_COMMON, text);
	arr = cJSON_GetObjectItemCaseSensitive(doc, "api_keys");
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > CO_AUTH_MAX_KEYS) {
		cJSON_Delete(doc);
		return cm_error_set(err, CM_ECORRUPT, "API key file %s is malformed", a->keys_path);
	}
	a->keys = cm_calloc(MEM, CO_AUTH_MAX_KEYS, sizeof(api_key));
	cJSON_ArrayForEach(o, arr)
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
		const cJSON *hash = cJSON_GetObjectItemCaseSensitive(o, "hash");
		const cJSON *user = cJSON_GetObjectItemCaseSensitive(o, "username");
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(o, "role");
		const cJSON *meta = cJSON_GetObjectItemCaseSensitive(o, "metadata");
		argon2_type t;
		co_role r;
		if (!cJSON_IsString(id) || strlen(id->valuestring) != CO_AUTH_KEY_ID_LEN ||
		    !cJSON_IsString(name) || !cJSON_IsString(hash) || !cJSON_IsString(user) ||
		    !cJSON_IsString(role) || !co_role_parse(role->valuestring, &r) ||
		    !phc_ok(hash->valuestring, &t, why, sizeof(why))) {
			cJSON_Delete(doc);
			return cm_error_set(err, CM_ECORRUPT,
			                    "API key file %s: entry %d is malformed", a->keys_path,
			                    a->nkeys);
		}
		api_key *k = &a->keys[a->nkeys++];
		memcpy(k->id, id->valuestring, CO_AUTH_KEY_ID_LEN + 1);
		k->name = cm_strdup(MEM, name->valuestring);
		k->hash = cm_strdup(MEM, hash->valuestring);
		k->username = cm_strdup(MEM, user->valuestring);
		k->role = r;
		k->creation = num_field(o, "creation");
		k->expiration = num_field(o, "expiration");
		k->invalidation = num_field(o, "invalidation");
		k->metadata = cJSON_IsObject(meta) ? cJSON_Duplicate(meta, true) : NULL;
	}
	cJSON_Delete(doc);
	return CM_OK;
}

/* ---- open / close ---- */

cm_err
co_auth_open(const char *users_file, const char *data_dir, co_auth **out, cm_error *err)
{
	co_auth *a = cm_calloc(MEM, 1, sizeof(*a));
	size_t n = strlen(data_dir) + 64;
	cm_err rc;
	char enc[256];
	unsigned char salt[16];

	pthread_mutex_init(&a->mu, NULL);
	pthread_mutex_init(&a->gate_mu, NULL);
	pthread_mutex_init(&a->log_mu, NULL);
	pthread_cond_init(&a->gate_cv, NULL);
	a->users_path = cm_strdup(MEM, users_file);
	a->keys_dir = cm_malloc(MEM, n);
	snprintf(a->keys_dir, n, "%s/security", data_dir);
	a->keys_path = cm_malloc(MEM, n);
	snprintf(a->keys_path, n, "%s/security/api_keys.json", data_dir);
	a->cache = cm_calloc(MEM, CACHE_SLOTS, sizeof(cache_ent));
	if (!random_bytes(a->cache_salt, sizeof(a->cache_salt)) ||
	    !random_bytes(salt, sizeof(salt))) {
		rc = cm_error_set(err, CM_EIO, "getrandom failed: %s", strerror(errno));
		goto fail;
	}
	if ((rc = load_users(a, err)))
		goto fail;
	if ((rc = load_keys(a, err)))
		goto fail;
	if (!a->keys)
		a->keys = cm_calloc(MEM, CO_AUTH_MAX_KEYS, sizeof(api_key));
	if (argon2id_hash_encoded(CO_AUTH_ARGON2_T, CO_AUTH_ARGON2_M_KIB, 1, "-", 1, salt,
	                          sizeof(salt), 32, enc, sizeof(enc)) != ARGON2_OK) {
		rc = cm_error_set(err, CM_EINTERNAL, "argon2 failed");
		goto fail;
	}
	a->dummy_hash = cm_strdup(MEM, enc);
	*out = a;
	return CM_OK;
fail:
	co_auth_close(a);
	return rc;
}

void
co_auth_close(co_auth *a)
{
	if (!a)
		return;
	for (int i = 0; i < a->nusers; i++)
		user_free(&a->users[i]);
	cm_free(MEM, a->users);
	for (int i = 0; i < a->nkeys; i++)
		key_free(&a->keys[i]);
	cm_free(MEM, a->keys);
	if (a->cache)
		memset(a->cache, 0, CACHE_SLOTS * sizeof(cache_ent)); /* digests don't outlive us */
	cm_free(MEM, a->cache);
	cm_free(MEM, a->dummy_hash);
	cm_free(MEM, a->users_path);
	cm_free(MEM, a->keys_path);
	cm_free(MEM, a->keys_dir);
	pthread_mutex_destroy(&a->mu);
	pthread_mutex_destroy(&a->gate_mu);
	pthread_mutex_destroy(&a->log_mu);
	pthread_cond_destroy(&a->gate_cv);
	cm_free(MEM, a);
}

cm_err
co_auth_hash_password(const char *pw, size_t len, char *out, size_t cap, cm_error *err)
{
	unsigned char salt[16];
	if (!random_bytes(salt, sizeof(salt)))
		return cm_error_set(err, CM_EIO, "getrandom failed: %s", strerror(errno));
	int rc = argon2id_hash_encoded(CO_AUTH_ARGON2_T, CO_AUTH_ARGON2_M_KIB, 1, pw, len, salt,
	                               sizeof(salt), 32, out, cap);
	if (rc != ARGON2_OK)
		return cm_error_set(err, CM_EINTERNAL, "argon2: %s", argon2_error_message(rc));
	return CM_OK;
}

/* ---- the cache ---- */

/* digest = argon2id(t=1, 8 KiB) of the parts, salted per process. */
static bool
cache_digest(const co_auth *a, const char *const *parts, const size_t *lens, int nparts,
             uint8_t out[32])
{
	char buf[2048];
	size_t n = 0;
	for (int i = 0; i < nparts; i++) {
		if (n + lens[i] + 1 > sizeof(buf))
			return false;
		memcpy(buf + n, parts[i], lens[i]);
		n += lens[i];
		buf[n++] = 0;
	}
	bool ok = argon2id_hash_raw(1, 8, 1, buf, n, a->cache_salt, sizeof(a->cache_salt), out,
	                            32) == ARGON2_OK;
	memset(buf, 0, sizeof(buf));
	return ok;
}

static size_t
cache_home(const uint8_t d[32])
{
	return ((size_t)d[0] | (size_t)d[1] << 8) % CACHE_SLOTS;
}

static bool
cache_get(co_auth *a, const uint8_t d[32], co_principal *p)
{
	uint64_t now = cm_now_ns();
	int64_t wall = cm_wall_ms();
	bool hit = false;
	size_t h = cache_home(d);

	pthread_mutex_lock(&a->mu);
	for (int w = 0; w < CACHE_WAYS; w++) {
		cache_ent *e = &a->cache[(h + (size_t)w) % CACHE_SLOTS];
		if (!e->used || !co_ct_equal(e->digest, d, 32))
			continue;
		if (e->expires_ns > now && e->gen == a->gen &&
		    (!e->key_expiration || e->key_expiration > wall)) {
			*p = e->p;
			hit = true;
		} else {
			e->used = false;
		}
		break;
	}
	pthread_mutex_unlock(&a->mu);
	return hit;
}

/* gen: a->gen when the verification began, so a key invalidated meanwhile
 * never enters the cache as valid. */
static void
cache_put(co_auth *a, const uint8_t d[32], const co_principal *p, int64_t key_exp, uint64_t gen)
{
	uint64_t now = cm_now_ns();
	size_t h = cache_home(d);
	cache_ent *victim = NULL;

	pthread_mutex_lock(&a->mu);
	if (gen == a->gen) {
		for (int w = 0; w < CACHE_WAYS; w++) {
			cache_ent *e = &a->cache[(h + (size_t)w) % CACHE_SLOTS];
			if (!e->used || e->expires_ns <= now || e->gen != a->gen) {
				victim = e;
				break;
			}
			if (!victim || e->expires_ns < victim->expires_ns)
				victim = e;
		}
		memcpy(victim->digest, d, 32);
		victim->expires_ns = now + CACHE_TTL_NS;
		victim->gen = gen;
		victim->key_expiration = key_exp;
		victim->p = *p;
		victim->used = true;
	}
	pthread_mutex_unlock(&a->mu);
}

/* ---- checking credentials ---- */

/* A failed login is logged, but at most FAIL_LOGS_PER_SEC lines a second,
 * so password guessing cannot flood the log; the rest are counted and
 * reported once the second is over. */
static bool
fail_log_ok(co_auth *a)
{
	uint64_t sec = cm_now_ns() / 1000000000ull, skipped = 0;
	bool ok;

	pthread_mutex_lock(&a->log_mu);
	if (sec != a->log_second) {
		skipped = a->fail_suppressed;
		a->fail_suppressed = 0;
		a->fail_logs = 0;
		a->log_second = sec;
	}
	ok = a->fail_logs < FAIL_LOGS_PER_SEC;
	if (ok)
		a->fail_logs++;
	else
		a->fail_suppressed++;
	pthread_mutex_unlock(&a->log_mu);
	if (skipped)
		cm_warn("auth", "%llu more authentication failures were not logged",
		        (unsigned long long)skipped);
	return ok;
}

static uint64_t
cur_gen(co_auth *a)
{
	pthread_mutex_lock(&a->mu);
	uint64_t g = a->gen;
	pthread_mutex_unlock(&a->mu);
	return g;
}

static void
fill_user(co_principal *p, const user *u)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->user, sizeof(p->user), "%s", u->name);
	p->role = u->role;
}

static co_auth_result
check_basic(co_auth *a, const char *cred, size_t clen, co_principal *p, char *who, size_t whocap)
{
	unsigned char dec[CO_AUTH_MAX_NAME + CO_AUTH_MAX_SECRET + 2];
	long n = co_base64_decode(cred, clen, dec, sizeof(dec) - 1);
	co_auth_result res = CO_AUTH_BAD_USER;
	uint8_t d[32];

	if (n < 0)
		return CO_AUTH_BAD_USER;
	dec[n] = 0;
	unsigned char *colon = memchr(dec, ':', (size_t)n);
	/* no colon: the whole value might be a password, so nothing is echoed */
	if (!colon || memchr(dec, 0, (size_t)n) || colon - dec > CO_AUTH_MAX_NAME) {
		memset(dec, 0, sizeof(dec));
		return CO_AUTH_BAD_USER;
	}
	*colon = 0;
	const char *name = (const char *)dec, *pw = (const char *)colon + 1;
	size_t pwlen = (size_t)(n - (colon + 1 - dec));
	snprintf(who, whocap, "%s", name);
	const user *u = find_user(a, name);
	if (!u) {
		/* as slow as a real user, so names cannot be probed by timing */
		gate_enter(a);
		argon2_verify(a->dummy_hash, pw, pwlen, Argon2_id);
		gate_leave(a);
		if (fail_log_ok(a))
			cm_warn("auth", "authentication failed: unknown user");
		goto done;
	}
	uint64_t gen = cur_gen(a);
	const char *parts[] = {"basic", name, pw, u->hash};
	size_t lens[] = {5, strlen(name), pwlen, strlen(u->hash)};
	bool have_digest = cache_digest(a, parts, lens, 4, d);
	if (have_digest && cache_get(a, d, p)) {
		res = CO_AUTH_OK;
		goto done;
	}
	gate_enter(a);
	int vr = argon2_verify(u->hash, pw, pwlen, u->type);
	gate_leave(a);
	if (vr != ARGON2_OK) {
		if (fail_log_ok(a))
			cm_warn("auth", "authentication failed for user [%s]%s", u->name,
			        vr == ARGON2_VERIFY_MISMATCH
			            ? ""
			            : " (the stored hash cannot be verified)");
		goto done;
	}
	fill_user(p, u);
	if (have_digest)
		cache_put(a, d, p, 0, gen);
	res = CO_AUTH_OK;
done:
	memset(dec, 0, sizeof(dec));
	return res;
}

static co_auth_result
check_api_key(co_auth *a, const char *cred, size_t clen, co_principal *p)
{
	unsigned char dec[CO_AUTH_KEY_ID_LEN + KEY_SECRET_LEN + 8];
	long n = co_base64_decode(cred, clen, dec, sizeof(dec) - 1);
	co_auth_result res = CO_AUTH_BAD_KEY;
	uint8_t d[32];
	char hash[256];
	int64_t exp = 0;
	uint64_t gen;
	bool found = false;

	if (n != CO_AUTH_KEY_ID_LEN + 1 + KEY_SECRET_LEN || dec[CO_AUTH_KEY_ID_LEN] != ':') {
		memset(dec, 0, sizeof(dec));
		return CO_AUTH_BAD_KEY;
	}
	dec[n] = 0;
	dec[CO_AUTH_KEY_ID_LEN] = 0;
	const char *id = (const char *)dec, *secret = (const char *)dec + CO_AUTH_KEY_ID_LEN + 1;
	const char *parts[] = {"apikey", id, secret};
	size_t lens[] = {6, CO_AUTH_KEY_ID_LEN, KEY_SECRET_LEN};
	bool have_digest = cache_digest(a, parts, lens, 3, d);
	if (have_digest && cache_get(a, d, p)) {
		res = CO_AUTH_OK;
		goto done;
	}
	/* copy what is needed out of the lock; the argon2 run happens outside */
	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&a->mu);
	gen = a->gen;
	for (int i = 0; i < a->nkeys; i++) {
		const api_key *k = &a->keys[i];
		if (strcmp(k->id, id) != 0)
			continue;
		const user *u = find_user(a, k->username);
		if (!k->invalidation && (!k->expiration || k->expiration > cm_wall_ms()) && u &&
		    strlen(k->hash) < sizeof(hash)) {
			found = true;
			snprintf(hash, sizeof(hash), "%s", k->hash);
			exp = k->expiration;
			snprintf(p->user, sizeof(p->user), "%s", k->username);
			/* never more than the creator holds today */
			p->role = k->role < u->role ? k->role : u->role;
			p->api_key = true;
			snprintf(p->key_id, sizeof(p->key_id), "%s", k->id);
			snprintf(p->key_name, sizeof(p->key_name), "%s", k->name);
		}
		break;
	}
	pthread_mutex_unlock(&a->mu);
	if (!found) {
		if (fail_log_ok(a))
			cm_warn("auth",
			        "authentication failed: unknown, expired or invalidated API key");
		goto done;
	}
	if (argon2_verify(hash, secret, KEY_SECRET_LEN, Argon2_id) != ARGON2_OK) {
		if (fail_log_ok(a))
			cm_warn("auth", "authentication failed for API key [%s]", p->key_id);
		goto done;
	}
	if (have_digest)
		cache_put(a, d, p, exp, gen);
	res = CO_AUTH_OK;
done:
	memset(dec, 0, sizeof(dec));
	if (res != CO_AUTH_OK)
		memset(p, 0, sizeof(*p));
	return res;
}

co_auth_result
co_auth_check(co_auth *a, const char *h, co_principal *p, char *who, size_t whocap)
{
	size_t sl;
	if (whocap)
		who[0] = 0;
	if (!h)
		return CO_AUTH_MISSING;
	while (*h == ' ')
		h++;
	sl = strcspn(h, " ");
	const char *cred = h + sl;
	while (*cred == ' ')
		cred++;
	size_t clen = strlen(cred);
	while (clen > 0 && cred[clen - 1] == ' ')
		clen--;
	if (sl == 5 && strncasecmp(h, "Basic", 5) == 0)
		return check_basic(a, cred, clen, p, who, whocap);
	if (sl == 6 && strncasecmp(h, "ApiKey", 6) == 0)
		return check_api_key(a, cred, clen, p);
	return CO_AUTH_MISSING;
}

/* ---- API keys ---- */

static bool
priv_in(const char *p, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(p, *list) == 0)
			return true;
	return false;
}

/* Maps Elasticsearch role descriptors onto one of our roles: the highest
 * role any privilege in them needs. What we cannot honour (per-index
 * restrictions, field or document security, run_as) is refused rather
 * than silently widened. */
static cm_err
descriptors_role(const cJSON *rd, co_role *out, cm_error *err)
{
	static const char *const c_read[] = {"monitor", "none", NULL};
	static const char *const c_admin[] = {"all",
	                                      "manage",
	                                      "manage_security",
	                                      "manage_api_key",
	                                      "manage_own_api_key",
	                                      "manage_index_templates",
	                                      NULL};
	static const char *const i_read[] = {
	    "read", "view_index_metadata", "monitor", "read_cross_cluster", "none", NULL};
	static const char *const i_write[] = {"write",      "index",  "create",
	                                      "create_doc", "delete", NULL};
	static const char *const i_admin[] = {"all",          "manage",      "create_index",
	                                      "delete_index", "maintenance", NULL};
	const cJSON *d, *c, *x;
	co_role role = CO_ROLE_NONE;

	if (!cJSON_IsObject(rd))
		return cm_error_set(err, CM_EPARSE, "[role_descriptors] must be an object");
	cJSON_ArrayForEach(d, rd)
	{
		if (!cJSON_IsObject(d))
			return cm_error_set(err, CM_EPARSE,
			                    "role descriptor [%.60s] must be an object", d->string);
		cJSON_ArrayForEach(c, d)
		{
			if (strcmp(c->string, "cluster") == 0) {
				if (!cJSON_IsArray(c))
					return cm_error_set(err, CM_EPARSE,
					                    "[cluster] must be an array");
				cJSON_ArrayForEach(x, c)
				{
					if (!cJSON_IsString(x))
						return cm_error_set(err, CM_EPARSE,
						                    "[cluster] holds strings");
					if (priv_in(x->valuestring, c_admin))
						role = CO_ROLE_ADMIN;
					else if (priv_in(x->valuestring, c_read)) {
						if (strcmp(x->valuestring, "none") &&
						    role < CO_ROLE_READ)
							role = CO_ROLE_READ;
					} else
						return cm_error_set(
						    err, CM_EINVAL,
						    "unknown cluster privilege [%.60s]",
						    x->valuestring);
				}
			} else if (strcmp(c->string, "indices") == 0) {
				if (!cJSON_IsArray(c))
					return cm_error_set(err, CM_EPARSE,
					                    "[indices] must be an array");
				cJSON_ArrayForEach(x, c)
				{
					const cJSON *names =
					    cJSON_GetObjectItemCaseSensitive(x, "names");
					const cJSON *privs =
					    cJSON_GetObjectItemCaseSensitive(x, "privileges");
					const cJSON *y;
					if (cJSON_GetObjectItemCaseSensitive(x, "field_security") ||
					    cJSON_GetObjectItemCaseSensitive(x, "query"))
						return cm_error_set(
						    err, CM_EINVAL,
						    "field and document level security are not "
						    "supported");
					bool all =
					    (cJSON_IsString(names) &&
					     strcmp(names->valuestring, "*") == 0) ||
					    (cJSON_IsArray(names) &&
					     cJSON_GetArraySize(names) == 1 &&
					     cJSON_IsString(cJSON_GetArrayItem(names, 0)) &&
					     strcmp(cJSON_GetArrayItem(names, 0)->valuestring,
					            "*") == 0);
					if (!all)
						return cm_error_set(
						    err, CM_EINVAL,
						    "API keys limited to some indices are not "
						    "supported: use \"names\": [\"*\"] and a role");
					if (!cJSON_IsArray(privs))
						return cm_error_set(
						    err, CM_EPARSE,
						    "[privileges] must be an array");
					cJSON_ArrayForEach(y, privs)
					{
						co_role need;
						if (!cJSON_IsString(y))
							return cm_error_set(
							    err, CM_EPARSE,
							    "[privileges] holds strings");
						if (priv_in(y->valuestring, i_admin))
							need = CO_ROLE_ADMIN;
						else if (priv_in(y->valuestring, i_write))
							need = CO_ROLE_WRITE;
						else if (priv_in(y->valuestring, i_read))
							need = strcmp(y->valuestring, "none")
							           ? CO_ROLE_READ
							           : CO_ROLE_NONE;
						else
							return cm_error_set(
							    err, CM_EINVAL,
							    "unknown index privilege [%.60s]",
							    y->valuestring);
						if (need > role)
							role = need;
					}
				}
			} else if (strcmp(c->string, "metadata") == 0 ||
			           strcmp(c->string, "transient_metadata") == 0) {
				continue;
			} else if ((strcmp(c->string, "run_as") == 0 ||
			            strcmp(c->string, "applications") == 0) &&
			           cJSON_IsArray(c) && cJSON_GetArraySize(c) == 0) {
				continue;
			} else {
				return cm_error_set(
				    err, CM_EINVAL,
				    "role descriptor field [%.60s] is not supported", c->string);
			}
		}
	}
	*out = role;
	return CM_OK;
}

/* Drops keys invalidated or expired longer ago than the retention
 * period, as Elasticsearch does. Called with a->mu held. */
static void
purge_old_keys(co_auth *a, int64_t now)
{
	int o = 0;
	for (int i = 0; i < a->nkeys; i++) {
		api_key *k = &a->keys[i];
		int64_t dead = k->invalidation ? k->invalidation : k->expiration;
		if (dead && dead + KEY_RETENTION_MS < now) {
			key_free(k);
			continue;
		}
		a->keys[o++] = *k;
	}
	a->nkeys = o;
}

cm_err
co_auth_key_create(co_auth *a, const co_principal *creator, const cJSON *body, cJSON **reply,
                   cm_error *err)
{
	const cJSON *c, *name, *exp, *role_j, *rd, *meta;
	co_role role = creator->role;
	int64_t exp_ms = 0, now = cm_wall_ms();
	unsigned char idraw[15], secret_raw[KEY_SECRET_BYTES], salt[16];
	char id[CO_AUTH_KEY_ID_LEN + 1], secret[KEY_SECRET_LEN + 1], hash[256];
	char pair[CO_AUTH_KEY_ID_LEN + KEY_SECRET_LEN + 2], encoded[80];
	cm_err rc;

	if (!cJSON_IsObject(body))
		return cm_error_set(err, CM_EVALIDATE,
		                    "Validation Failed: 1: api key name is required;");
	cJSON_ArrayForEach(c, body)
	{
		if (strcmp(c->string, "name") && strcmp(c->string, "expiration") &&
		    strcmp(c->string, "role_descriptors") && strcmp(c->string, "role") &&
		    strcmp(c->string, "metadata"))
			return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
			                         "[api_key_request] unknown field [%.60s]",
			                         c->string);
	}
	name = cJSON_GetObjectItemCaseSensitive(body, "name");
	if (!cJSON_IsString(name) || !name->valuestring[0])
		return cm_error_set(err, CM_EVALIDATE,
		                    "Validation Failed: 1: api key name is required;");
	if (strlen(name->valuestring) > CO_AUTH_MAX_NAME || name->valuestring[0] == '_' ||
	    !printable_name(name->valuestring) || strchr(name->valuestring, ':') ||
	    name->valuestring[strlen(name->valuestring) - 1] == ' ' || name->valuestring[0] == ' ')
		return cm_error_set(
		    err, CM_EVALIDATE,
		    "Validation Failed: 1: api key name must be at most %d bytes, not "
		    "begin with an underscore or whitespace, and hold no control "
		    "characters;",
		    CO_AUTH_MAX_NAME);
	exp = cJSON_GetObjectItemCaseSensitive(body, "expiration");
	if (exp && !cJSON_IsNull(exp)) {
		int64_t d = cJSON_IsString(exp) ? co_auth_parse_duration(exp->valuestring) : -1;
		if (d <= 0)
			return cm_error_set(
			    err, CM_EPARSE,
			    "failed to parse [expiration]: want a positive time value such "
			    "as 1d, 12h, 30m");
		exp_ms = now + d;
	}
	/* role descriptors (mapped) and our "role" both limit the key; with
	 * neither it holds its creator's role */
	bool limited = false;
	rd = cJSON_GetObjectItemCaseSensitive(body, "role_descriptors");
	if (rd && !cJSON_IsNull(rd) && !cJSON_IsObject(rd))
		return cm_error_set(err, CM_EPARSE, "[role_descriptors] must be an object");
	if (cJSON_IsObject(rd) && cJSON_GetArraySize(rd) > 0) {
		co_role r = CO_ROLE_NONE;
		if ((rc = descriptors_role(rd, &r, err)))
			return rc;
		role = r;
		limited = true;
	}
	role_j = cJSON_GetObjectItemCaseSensitive(body, "role");
	if (role_j && !cJSON_IsNull(role_j)) {
		co_role r = CO_ROLE_NONE;
		if (!cJSON_IsString(role_j) || !co_role_parse(role_j->valuestring, &r))
			return cm_error_set(err, CM_EINVAL,
			                    "[role] must be one of read, write, admin");
		if (!limited || r < role)
			role = r;
	}
	if (role > creator->role)
		return cm_error_set_type(err, CM_EINVAL, "security_exception",
		                         "an API key cannot hold more than its creator: role [%s] "
		                         "requested, user [%s] has [%s]",
		                         co_role_name(role), creator->user,
		                         co_role_name(creator->role));
	meta = cJSON_GetObjectItemCaseSensitive(body, "metadata");
	if (meta && !cJSON_IsNull(meta)) {
		char *m = cJSON_IsObject(meta) ? cJSON_PrintUnformatted(meta) : NULL;
		bool ok = m && strlen(m) <= KEY_META_MAX;
		cJSON_free(m);
		if (!ok)
			return cm_error_set(err, CM_EINVAL,
			                    "[metadata] must be an object of at most %d "
			                    "bytes",
			                    KEY_META_MAX);
	}
	if (!random_bytes(idraw, sizeof(idraw)) || !random_bytes(secret_raw, sizeof(secret_raw)) ||
	    !random_bytes(salt, sizeof(salt)))
		return cm_error_set(err, CM_EIO, "getrandom failed");
	encode_with(b64url, false, idraw, sizeof(idraw), id, sizeof(id));
	encode_with(b64url, false, secret_raw, sizeof(secret_raw), secret, sizeof(secret));
	if (argon2id_hash_encoded(1, 8, 1, secret, KEY_SECRET_LEN, salt, sizeof(salt), 32, hash,
	                          sizeof(hash)) != ARGON2_OK)
		return cm_error_set(err, CM_EINTERNAL, "argon2 failed");

	pthread_mutex_lock(&a->mu);
	purge_old_keys(a, now);
	if (a->nkeys >= CO_AUTH_MAX_KEYS) {
		pthread_mutex_unlock(&a->mu);
		return cm_error_set(
		    err, CM_EBUSY,
		    "this node holds %d API keys, the most it keeps; invalidate some",
		    CO_AUTH_MAX_KEYS);
	}
	api_key *k = &a->keys[a->nkeys++];
	memset(k, 0, sizeof(*k));
	memcpy(k->id, id, sizeof(k->id));
	k->name = cm_strdup(MEM, name->valuestring);
	k->hash = cm_strdup(MEM, hash);
	k->username = cm_strdup(MEM, creator->user);
	k->role = role;
	k->creation = now;
	k->expiration = exp_ms;
	k->metadata = meta && cJSON_IsObject(meta) ? cJSON_Duplicate(meta, true) : NULL;
	rc = keys_save(a);
	if (rc) {
		key_free(k);
		a->nkeys--;
	}
	pthread_mutex_unlock(&a->mu);
	if (rc) {
		memset(secret, 0, sizeof(secret));
		return cm_error_set(err, rc, "cannot write the API key file");
	}
	snprintf(pair, sizeof(pair), "%s:%s", id, secret);
	co_base64_encode((const unsigned char *)pair, strlen(pair), encoded, sizeof(encoded));
	*reply = cJSON_CreateObject();
	cJSON_AddStringToObject(*reply, "id", id);
	cJSON_AddStringToObject(*reply, "name", name->valuestring);
	if (exp_ms)
		cJSON_AddNumberToObject(*reply, "expiration", (double)exp_ms);
	cJSON_AddStringToObject(*reply, "api_key", secret);
	cJSON_AddStringToObject(*reply, "encoded", encoded);
	cJSON_AddStringToObject(*reply, "role", co_role_name(role));
	memset(secret, 0, sizeof(secret));
	memset(pair, 0, sizeof(pair));
	memset(encoded, 0, sizeof(encoded));
	return CM_OK;
}

cJSON *
co_auth_key_list(co_auth *a, const char *id, const char *name, const char *username,
                 const co_principal *owner)
{
	cJSON *doc = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(doc, "api_keys");
	int64_t now = cm_wall_ms();

	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < a->nkeys; i++) {
		const api_key *k = &a->keys[i];
		if ((id && strcmp(id, k->id)) || (name && strcmp(name, k->name)) ||
		    (username && strcmp(username, k->username)) ||
		    (owner && strcmp(owner->user, k->username)))
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", k->id);
		cJSON_AddStringToObject(o, "name", k->name);
		cJSON_AddNumberToObject(o, "creation", (double)k->creation);
		if (k->expiration)
			cJSON_AddNumberToObject(o, "expiration", (double)k->expiration);
		cJSON_AddBoolToObject(o, "invalidated", k->invalidation != 0);
		cJSON_AddStringToObject(o, "username", k->username);
		cJSON_AddStringToObject(o, "realm", "file");
		cJSON_AddItemToObject(o, "metadata",
		                      k->metadata ? cJSON_Duplicate(k->metadata, true)
		                                  : cJSON_CreateObject());
		cJSON_AddStringToObject(o, "role", co_role_name(k->role));
		cJSON_AddBoolToObject(o, "expired", k->expiration && k->expiration <= now);
		cJSON_AddItemToArray(arr, o);
	}
	pthread_mutex_unlock(&a->mu);
	return doc;
}

static bool
str_in(const cJSON *arr, const char *s)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, arr)
	{
		if (cJSON_IsString(c) && strcmp(c->valuestring, s) == 0)
			return true;
	}
	return false;
}

cm_err
co_auth_key_invalidate(co_auth *a, const co_principal *caller, const cJSON *body, cJSON **reply,
                       cm_error *err)
{
	const cJSON *ids, *id, *name, *username, *realm, *owner, *c;
	cJSON *inv, *prev;
	int64_t now = cm_wall_ms();
	int changed = 0;
	cm_err rc = CM_OK;

	if (!cJSON_IsObject(body))
		return cm_error_set(
		    err, CM_EVALIDATE,
		    "Validation Failed: 1: One of [api key id(s), api key name, username, "
		    "realm name] must be specified if [owner] flag is false;");
	cJSON_ArrayForEach(c, body)
	{
		if (strcmp(c->string, "ids") && strcmp(c->string, "id") &&
		    strcmp(c->string, "name") && strcmp(c->string, "username") &&
		    strcmp(c->string, "realm_name") && strcmp(c->string, "owner"))
			return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
			                         "[invalidate_api_key] unknown field [%.60s]",
			                         c->string);
	}
	ids = cJSON_GetObjectItemCaseSensitive(body, "ids");
	id = cJSON_GetObjectItemCaseSensitive(body, "id");
	name = cJSON_GetObjectItemCaseSensitive(body, "name");
	username = cJSON_GetObjectItemCaseSensitive(body, "username");
	realm = cJSON_GetObjectItemCaseSensitive(body, "realm_name");
	owner = cJSON_GetObjectItemCaseSensitive(body, "owner");
	if ((ids && !cJSON_IsArray(ids)) || (id && !cJSON_IsString(id)) ||
	    (name && !cJSON_IsString(name)) || (username && !cJSON_IsString(username)) ||
	    (realm && !cJSON_IsString(realm)) || (owner && !cJSON_IsBool(owner)))
		return cm_error_set(err, CM_EPARSE,
		                    "[ids] is an array of strings; [id], [name], [username], "
		                    "[realm_name] are strings; [owner] is a boolean");
	bool own = cJSON_IsTrue(owner);
	if (!(ids && cJSON_GetArraySize(ids)) && !id && !name && !username && !realm && !own)
		return cm_error_set(
		    err, CM_EVALIDATE,
		    "Validation Failed: 1: One of [api key id(s), api key name, username, "
		    "realm name] must be specified if [owner] flag is false;");
	inv = cJSON_CreateArray();
	prev = cJSON_CreateArray();
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < a->nkeys; i++) {
		api_key *k = &a->keys[i];
		if ((ids && cJSON_GetArraySize(ids) && !str_in(ids, k->id)) ||
		    (id && strcmp(id->valuestring, k->id)) ||
		    (name && strcmp(name->valuestring, k->name)) ||
		    (username && strcmp(username->valuestring, k->username)) ||
		    (realm && strcmp(realm->valuestring, "file")) ||
		    (own && strcmp(caller->user, k->username)))
			continue;
		if (k->invalidation) {
			cJSON_AddItemToArray(prev, cJSON_CreateString(k->id));
			continue;
		}
		k->invalidation = now;
		changed++;
		cJSON_AddItemToArray(inv, cJSON_CreateString(k->id));
	}
	if (changed) {
		a->gen++; /* every cached verification is dropped */
		rc = keys_save(a);
	}
	pthread_mutex_unlock(&a->mu);
	if (rc) {
		/* in memory they stay invalid; the file may still list them valid */
		cJSON_Delete(inv);
		cJSON_Delete(prev);
		return cm_error_set(err, rc, "cannot write the API key file");
	}
	*reply = cJSON_CreateObject();
	cJSON_AddItemToObject(*reply, "invalidated_api_keys", inv);
	cJSON_AddItemToObject(*reply, "previously_invalidated_api_keys", prev);
	cJSON_AddNumberToObject(*reply, "error_count", 0);
	return CM_OK;
}

/* ---- the security endpoints ---- */

static bool
security_enabled(co_req *r)
{
	if (r->auth)
		return true;
	co_reply_errorf(r, CM_EINVAL, "security_exception",
	                "security is not enabled on this node: start it with --users FILE");
	return false;
}

void
co_h_security_authenticate(co_req *r)
{
	const co_principal *p = &r->principal;
	cJSON *j, *realm, *roles;

	if (!security_enabled(r))
		return;
	j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "username", p->user);
	roles = cJSON_AddArrayToObject(j, "roles");
	const user *u = find_user(r->auth, p->user);
	if (p->api_key || !u) {
		if (p->role > CO_ROLE_NONE)
			cJSON_AddItemToArray(roles, cJSON_CreateString(co_role_name(p->role)));
	} else {
		for (int i = 0; i < u->nroles; i++)
			cJSON_AddItemToArray(roles, cJSON_CreateString(u->roles[i]));
	}
	if (u && u->full_name)
		cJSON_AddStringToObject(j, "full_name", u->full_name);
	else
		cJSON_AddNullToObject(j, "full_name");
	if (u && u->email)
		cJSON_AddStringToObject(j, "email", u->email);
	else
		cJSON_AddNullToObject(j, "email");
	cJSON_AddObjectToObject(j, "metadata");
	cJSON_AddBoolToObject(j, "enabled", true);
	realm = cJSON_AddObjectToObject(j, "authentication_realm");
	cJSON_AddStringToObject(realm, "name", p->api_key ? "_es_api_key" : "file");
	cJSON_AddStringToObject(realm, "type", p->api_key ? "_es_api_key" : "file");
	realm = cJSON_AddObjectToObject(j, "lookup_realm");
	cJSON_AddStringToObject(realm, "name", p->api_key ? "_es_api_key" : "file");
	cJSON_AddStringToObject(realm, "type", p->api_key ? "_es_api_key" : "file");
	cJSON_AddStringToObject(j, "authentication_type", p->api_key ? "api_key" : "realm");
	if (p->api_key) {
		cJSON *k = cJSON_AddObjectToObject(j, "api_key");
		cJSON_AddStringToObject(k, "id", p->key_id);
		cJSON_AddStringToObject(k, "name", p->key_name);
	}
	/* Shoal's one effective role (admin includes write includes read) */
	cJSON_AddStringToObject(j, "role", p->role > CO_ROLE_NONE ? co_role_name(p->role) : "none");
	co_reply_json(r, 200, j);
}

void
co_h_api_key_create(co_req *r)
{
	bool bad;
	cJSON *body, *reply = NULL;
	cm_error err;

	if (!security_enabled(r))
		return;
	body = co_body_json(r, &bad);
	if (bad)
		return;
	cm_error_clear(&err);
	if (co_auth_key_create(r->auth, &r->principal, body, &reply, &err))
		co_reply_error(r, &err, NULL);
	else
		co_reply_json(r, 200, reply);
	cJSON_Delete(body);
}

void
co_h_api_key_get(co_req *r)
{
	const char *id = co_param_get(r, "id"), *name = co_param_get(r, "name");
	const char *user = co_param_get(r, "username"), *realm = co_param_get(r, "realm_name");
	bool owner = co_param_bool(r, "owner", false);
	cJSON *j;

	if (!security_enabled(r))
		return;
	j = co_auth_key_list(r->auth, id && *id ? id : NULL, name && *name ? name : NULL,
	                     user && *user ? user : NULL, owner ? &r->principal : NULL);
	if (realm && *realm && strcmp(realm, "file") != 0)
		cJSON_ReplaceItemInObject(j, "api_keys", cJSON_CreateArray()); /* one realm here */
	co_reply_json(r, 200, j);
}

void
co_h_api_key_invalidate(co_req *r)
{
	bool bad;
	cJSON *body, *reply = NULL;
	cm_error err;

	if (!security_enabled(r))
		return;
	body = co_body_json(r, &bad);
	if (bad)
		return;
	cm_error_clear(&err);
	if (co_auth_key_invalidate(r->auth, &r->principal, body, &reply, &err))
		co_reply_error(r, &err, NULL);
	else
		co_reply_json(r, 200, reply);
	cJSON_Delete(body);
}
