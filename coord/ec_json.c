/* base64 and the JSON shapes of etcd's gateway: int64s travel as strings,
 * bytes as base64, and fields equal to their default (0, false, "") are
 * left out of replies. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ec_private.h"

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *
ec_b64_encode(const void *src, size_t n)
{
	const uint8_t *p = src;
	char *out = cm_malloc(EC_MEM, (n + 2) / 3 * 4 + 1), *o = out;
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		*o++ = b64_alphabet[v >> 18];
		*o++ = b64_alphabet[(v >> 12) & 63];
		*o++ = b64_alphabet[(v >> 6) & 63];
		*o++ = b64_alphabet[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
		*o++ = b64_alphabet[v >> 18];
		*o++ = b64_alphabet[(v >> 12) & 63];
		*o++ = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	*o = '\0';
	return out;
}

static int
b64_value(unsigned char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+')
		return 62;
	if (ch == '/')
		return 63;
	return -1;
}

bool
ec_b64_decode(const char *s, size_t slen, uint8_t **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (slen % 4 != 0)
		return false;
	uint8_t *buf = cm_malloc(EC_MEM, slen / 4 * 3 + 1), *o = buf;
	for (size_t i = 0; i < slen; i += 4) {
		int v[4], pad = 0;
		for (int k = 0; k < 4; k++) {
			unsigned char ch = (unsigned char)s[i + k];
			if (ch == '=' && i + 4 == slen && k >= 2) {
				v[k] = 0;
				pad++;
				continue;
			}
			v[k] = pad ? -1 : b64_value(ch); /* data after '=' is bad */
			if (v[k] < 0) {
				cm_free(EC_MEM, buf);
				return false;
			}
		}
		if (pad == 1 && s[i + 2] == '=') { /* "x=y=" */
			cm_free(EC_MEM, buf);
			return false;
		}
		uint32_t w =
		    (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | v[3];
		*o++ = (uint8_t)(w >> 16);
		if (pad < 2)
			*o++ = (uint8_t)(w >> 8);
		if (pad < 1)
			*o++ = (uint8_t)w;
	}
	*o = '\0';
	*out = buf;
	*n = (size_t)(o - buf);
	return true;
}

bool
ec_j_int(const cJSON *o, const char *name, int64_t *v)
{
	*v = 0;
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
	if (f == NULL || cJSON_IsNull(f))
		return true;
	if (cJSON_IsNumber(f)) { /* the gateway sends strings; accept numbers too */
		double d = f->valuedouble;
		if (d != d || d < -9.2e18 || d > 9.2e18 || d != (double)(int64_t)d)
			return false;
		*v = (int64_t)d;
		return true;
	}
	if (!cJSON_IsString(f) || f->valuestring[0] == '\0')
		return false;
	char *end;
	errno = 0;
	long long x = strtoll(f->valuestring, &end, 10);
	if (errno != 0 || *end != '\0')
		return false;
	*v = x;
	return true;
}

bool
ec_j_bool(const cJSON *o, const char *name, bool *v)
{
	*v = false;
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
	if (f == NULL || cJSON_IsNull(f))
		return true;
	if (!cJSON_IsBool(f))
		return false;
	*v = cJSON_IsTrue(f);
	return true;
}

bool
ec_j_bytes(const cJSON *o, const char *name, uint8_t **out, size_t *n)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
	if (f == NULL || cJSON_IsNull(f))
		return ec_b64_decode("", 0, out, n);
	if (!cJSON_IsString(f)) {
		*out = NULL;
		*n = 0;
		return false;
	}
	return ec_b64_decode(f->valuestring, strlen(f->valuestring), out, n);
}

void
ec_kv_free(ec_kv *kv)
{
	if (kv == NULL)
		return;
	cm_free(EC_MEM, kv->key);
	cm_free(EC_MEM, kv->value);
	memset(kv, 0, sizeof(*kv));
}

void
ec_kvs_free(ec_kvs *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->n; i++)
		ec_kv_free(&r->kv[i]);
	cm_free(EC_MEM, r->kv);
	memset(r, 0, sizeof(*r));
}

bool
ec_j_kv(const cJSON *o, ec_kv *kv)
{
	memset(kv, 0, sizeof(*kv));
	if (!cJSON_IsObject(o))
		return false;
	uint8_t *key;
	bool ok = ec_j_bytes(o, "key", &key, &kv->key_len) &&
	          ec_j_bytes(o, "value", &kv->value, &kv->value_len);
	kv->key = (char *)key;
	ok = ok && ec_j_int(o, "create_revision", &kv->create_revision) &&
	     ec_j_int(o, "mod_revision", &kv->mod_revision) &&
	     ec_j_int(o, "version", &kv->version) && ec_j_int(o, "lease", &kv->lease);
	if (!ok)
		ec_kv_free(kv);
	return ok;
}

bool
ec_j_kvs(const cJSON *arr, ec_kvs *out)
{
	if (arr == NULL || cJSON_IsNull(arr))
		return true;
	if (!cJSON_IsArray(arr))
		return false;
	size_t n = (size_t)cJSON_GetArraySize(arr);
	out->kv = cm_realloc(EC_MEM, out->kv, (out->n + n + 1) * sizeof(ec_kv));
	const cJSON *it;
	cJSON_ArrayForEach(it, arr)
	{
		if (!ec_j_kv(it, &out->kv[out->n]))
			return false;
		out->n++;
	}
	return true;
}

bool
ec_j_header_rev(const cJSON *o, int64_t *rev)
{
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "header");
	if (h != NULL && !cJSON_IsObject(h)) {
		*rev = 0;
		return false;
	}
	return ec_j_int(h, "revision", rev);
}

cm_err
ec_bad_reply(cm_error *err, const char *where, const char *what)
{
	return cm_error_set(err, CM_EPARSE, "etcd %s: malformed reply (%s)", where, what);
}

void
ec_j_add_b64(cJSON *o, const char *name, const void *p, size_t n)
{
	char *s = ec_b64_encode(p, n);
	cJSON_AddStringToObject(o, name, s);
	cm_free(EC_MEM, s);
}

void
ec_j_add_int(cJSON *o, const char *name, int64_t v)
{
	char s[24];
	snprintf(s, sizeof(s), "%lld", (long long)v);
	cJSON_AddStringToObject(o, name, s);
}

void
ec_j_add_prefix(cJSON *o, const char *prefix)
{
	size_t n = strlen(prefix);
	if (n == 0) { /* key "\0", range_end "\0": every key */
		ec_j_add_b64(o, "key", "", 1);
		ec_j_add_b64(o, "range_end", "", 1);
		return;
	}
	ec_j_add_b64(o, "key", prefix, n);
	/* range_end: the prefix with its last byte below 0xff incremented */
	uint8_t *end = cm_malloc(EC_MEM, n);
	memcpy(end, prefix, n);
	size_t m = n;
	while (m > 0 && end[m - 1] == 0xff)
		m--;
	if (m == 0)
		ec_j_add_b64(o, "range_end", "", 1); /* all 0xff: to the end */
	else {
		end[m - 1]++;
		ec_j_add_b64(o, "range_end", end, m);
	}
	cm_free(EC_MEM, end);
}

char *
ec_j_print(cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (s == NULL) {
		fprintf(stderr, "shoal: out of memory printing JSON\n");
		abort();
	}
	char *r = cm_strdup(EC_MEM, s);
	cJSON_free(s);
	return r;
}
