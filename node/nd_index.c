/* The index registry: create/delete/load indices, their settings and
 * mappings persisted as DATA/indices/<uuid>/index.json, shard directories
 * DATA/indices/<uuid>/<shard>/, routing and the refresh timer. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include "../common/cm_alloc.h"
#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "nd.h"
#include "nd_private.h"
#include "nd_reqcache.h"

#define META_MAX (64u << 20)

static void
random_bytes(uint8_t *p, size_t n)
{
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	size_t got = 0;
	if (fd >= 0) {
		while (got < n) {
			ssize_t r = read(fd, p + got, n - got);
			if (r <= 0)
				break;
			got += (size_t)r;
		}
		close(fd);
	}
	for (; got < n; got++) /* no urandom: still unique enough for ids */
		p[got] = (uint8_t)(cm_now_ns() >> (got % 8));
}

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static void
b64url_encode(const uint8_t *in, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
		out[o++] = b64url[(v >> 18) & 63];
		out[o++] = b64url[(v >> 12) & 63];
		out[o++] = b64url[(v >> 6) & 63];
		out[o++] = b64url[v & 63];
	}
	out[o] = 0;
}

static uint8_t id_rand[6];

static void
gen_id_init(void)
{
	random_bytes(id_rand, sizeof(id_rand));
}

void
nd_gen_id(char buf[21])
{
	static _Atomic uint32_t seq;
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	uint8_t b[15];
	uint64_t ms = (uint64_t)cm_wall_ms();
	uint32_t s = atomic_fetch_add(&seq, 1);

	pthread_once(&once, gen_id_init);
	/* Time first so ids of one node sort roughly by creation, as ES's do. */
	for (int i = 0; i < 6; i++)
		b[i] = (uint8_t)(ms >> (8 * (5 - i)));
	b[6] = (uint8_t)(s >> 16);
	b[7] = (uint8_t)(s >> 8);
	b[8] = (uint8_t)s;
	memcpy(b + 9, id_rand, 6);
	b64url_encode(b, 15, buf);
}

void
nd_uuid(char out[23])
{
	uint8_t b[18];
	char tmp[25];
	random_bytes(b, sizeof(b));
	b64url_encode(b, 18, tmp);
	memcpy(out, tmp, 22);
	out[22] = 0;
}

/* ---- settings ---- */

/* "1s", "500ms", "2m", "-1" → millis; false when malformed. */
bool
nd_parse_time(const char *s, int64_t *ms)
{
	char *end;
	double v;
	if (!s || !*s)
		return false;
	if (strcmp(s, "-1") == 0 || strcmp(s, "0") == 0) { /* ES: the two unitless values */
		*ms = s[0] == '-' ? -1 : 0;
		return true;
	}
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return false;
	if (strcmp(end, "ms") == 0)
		*ms = (int64_t)v;
	else if (strcmp(end, "s") == 0)
		*ms = (int64_t)(v * 1000);
	else if (strcmp(end, "m") == 0)
		*ms = (int64_t)(v * 60000);
	else if (strcmp(end, "h") == 0)
		*ms = (int64_t)(v * 3600000);
	else if (strcmp(end, "d") == 0)
		*ms = (int64_t)(v * 86400000);
	else if (strcmp(end, "nanos") == 0)
		*ms = (int64_t)(v / 1e6);
	else if (strcmp(end, "micros") == 0)
		*ms = (int64_t)(v / 1e3);
	else
		return false;
	return true;
}

static void
settings_default(nd_settings *s)
{
	memset(s, 0, sizeof(*s));
	s->number_of_shards = 1;
	s->number_of_replicas = 1;
	s->refresh_interval_ms = 1000;
	s->max_result_window = 10000;
	s->delayed_timeout_ms = 60000;
	s->total_fields_limit = 1000;
	s->max_ngram_diff = 1;
	s->max_shingle_diff = 3;
}

/* A setting value as ES accepts it: number or string holding a number. */
static bool
json_int(const cJSON *v, long long *out)
{
	char *end;
	if (cJSON_IsNumber(v)) {
		if (v->valuedouble != (double)(long long)v->valuedouble)
			return false;
		*out = (long long)v->valuedouble;
		return true;
	}
	if (cJSON_IsString(v) && v->valuestring[0]) {
		errno = 0;
		*out = strtoll(v->valuestring, &end, 10);
		return !errno && *end == 0;
	}
	return false;
}

/* Index settings Shoal accepts and keeps but that change nothing here
 * (docs/api.md, "Index settings", says why for each), by the kind of value
 * ES takes: 'i' integer >= 0, 'b' boolean, 's' string, 't' time value,
 * 'a' string or list of strings. A key ending in '.' takes any key under
 * it with a string or number value. */
static const struct accepted_setting {
	const char *key;
	char kind;
} accepted_settings[] = {
    {"codec", 's'},
    {"max_docvalue_fields_search", 'i'},
    {"max_terms_count", 'i'},
    {"max_inner_result_window", 'i'},
    {"max_script_fields", 'i'},
    {"max_rescore_window", 'i'},
    {"max_regex_length", 'i'},
    {"max_slices_per_scroll", 'i'},
    {"max_refresh_listeners", 'i'},
    {"max_adjacency_matrix_filters", 'i'},
    {"mapping.depth.limit", 'i'},
    {"mapping.nested_fields.limit", 'i'},
    {"mapping.nested_objects.limit", 'i'},
    {"mapping.field_name_length.limit", 'i'},
    {"mapping.ignore_malformed", 'b'},
    {"mapping.coerce", 'b'},
    {"auto_expand_replicas", 's'},
    {"hidden", 'b'},
    {"priority", 'i'},
    {"query.default_field", 'a'},
    {"query_string.lenient", 'b'},
    {"number_of_routing_shards", 'i'},
    {"routing_partition_size", 'i'},
    {"translog.durability", 's'},
    {"translog.sync_interval", 't'},
    {"translog.flush_threshold_size", 's'},
    {"search.idle.after", 't'},
    {"highlight.max_analyzed_offset", 'i'},
    {"analyze.max_token_count", 'i'},
    {"soft_deletes.enabled", 'b'},
    {"soft_deletes.retention_lease.period", 't'},
    {"translog.retention.size", 's'},
    {"translog.retention.age", 't'},
    {"shard.check_on_startup", 's'},
    {"gc_deletes", 't'},
    {"write.wait_for_active_shards", 's'},
    {"load_fixed_bitset_filters_eagerly", 'b'},
    {"sort.field", 'a'},
    {"sort.order", 'a'},
    {"format", 'i'},
    {"lifecycle.", 's'},
    {"routing.allocation.", 's'},
    {"routing.rebalance.", 's'},
    {"merge.", 's'},
    {"indexing.slowlog.", 's'},
    {"search.slowlog.", 's'},
    {"store.", 's'},
};

static const struct accepted_setting *
accepted_lookup(const char *k)
{
	for (size_t i = 0; i < sizeof(accepted_settings) / sizeof(accepted_settings[0]); i++) {
		const char *a = accepted_settings[i].key;
		size_t n = strlen(a);
		if (a[n - 1] == '.' ? !strncmp(k, a, n) && k[n] : !strcmp(k, a))
			return &accepted_settings[i];
	}
	return NULL;
}

static bool
accepted_value_ok(char kind, const cJSON *v)
{
	long long n;
	int64_t ms;
	const cJSON *e;
	switch (kind) {
	case 'i':
		return json_int(v, &n) && n >= 0;
	case 'b':
		return cJSON_IsBool(v) ||
		       (cJSON_IsString(v) &&
		        (!strcmp(v->valuestring, "true") || !strcmp(v->valuestring, "false")));
	case 't':
		return (cJSON_IsString(v) && nd_parse_time(v->valuestring, &ms)) ||
		       (cJSON_IsNumber(v) && (v->valuedouble == -1 || v->valuedouble >= 0));
	case 'a':
		if (cJSON_IsArray(v)) {
			cJSON_ArrayForEach(e, v) if (!cJSON_IsString(e)) return false;
			return true;
		}
		return cJSON_IsString(v);
	default:
		return cJSON_IsString(v) || cJSON_IsNumber(v) || cJSON_IsBool(v);
	}
}

long long
nd_index_setting_int(nd_index *ix, const char *key, long long dflt)
{
	char text[sizeof(ix->settings.accepted)];
	long long n = dflt;
	pthread_mutex_lock(&ix->lock);
	snprintf(text, sizeof(text), "%s", ix->settings.accepted);
	pthread_mutex_unlock(&ix->lock);
	if (!text[0] || !strstr(text, key)) /* the common case: not set, no parse */
		return dflt;
	cJSON *all = cJSON_Parse(text);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(all, key);
	if (!v || !json_int(v, &n))
		n = dflt;
	cJSON_Delete(all);
	return n;
}

/* index.mapping.nested_fields.limit (kept among the accepted settings),
 * default 50. */
static long long
nested_fields_limit(const nd_settings *s)
{
	long long n = 50;
	cJSON *all = s->accepted[0] ? cJSON_Parse(s->accepted) : NULL;
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(all, "mapping.nested_fields.limit");
	if (v != NULL && !json_int(v, &n))
		n = 50;
	cJSON_Delete(all);
	return n;
}

/* index.mapping.nested_objects.limit, default 10000. */
static uint32_t
nested_objects_limit(const nd_settings *s)
{
	long long n = ST_NESTED_OBJECTS_LIMIT;
	cJSON *all = s->accepted[0] ? cJSON_Parse(s->accepted) : NULL;
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(all, "mapping.nested_objects.limit");
	if (v != NULL && (!json_int(v, &n) || n < 1 || n > UINT32_MAX))
		n = ST_NESTED_OBJECTS_LIMIT;
	cJSON_Delete(all);
	return (uint32_t)n;
}

static size_t
mapping_nested_count(const st_mapping *m)
{
	size_t n = 0;
	for (size_t i = 0; i < m->nfields; i++)
		n += m->fields[i].nested;
	return n;
}

/* Keeps (or, for null, drops) an accepted setting in s->accepted. */
static cm_err
accepted_put(nd_settings *s, const char *k, const cJSON *v, cm_error *err)
{
	cJSON *all = s->accepted[0] ? cJSON_Parse(s->accepted) : NULL;
	if (!all)
		all = cJSON_CreateObject();
	cJSON_DeleteItemFromObjectCaseSensitive(all, k);
	if (!cJSON_IsNull(v)) {
		cJSON *val;
		if (cJSON_IsArray(v)) {
			val = cJSON_Duplicate(v, true);
		} else {
			char buf[64];
			if (cJSON_IsString(v))
				val = cJSON_CreateString(v->valuestring);
			else if (cJSON_IsBool(v))
				val = cJSON_CreateString(cJSON_IsTrue(v) ? "true" : "false");
			else {
				snprintf(buf, sizeof(buf), "%.17g", v->valuedouble);
				val = cJSON_CreateString(buf);
			}
		}
		cJSON_AddItemToObject(all, k, val);
	}
	char *text = cJSON_PrintUnformatted(all);
	cJSON_Delete(all);
	size_t len = text ? strlen(text) : 0;
	if (!text || len >= sizeof(s->accepted)) {
		cJSON_free(text);
		return cm_error_set(err, CM_EINVAL, "too many index settings of the accepted kind");
	}
	memcpy(s->accepted, len > 2 ? text : "", len > 2 ? len + 1 : 1);
	cJSON_free(text);
	return CM_OK;
}

/* index.blocks.{write,read_only,read_only_allow_delete,read,metadata} */
static cm_err
block_apply(nd_settings *s, const char *name, const cJSON *v, cm_error *err)
{
	static const struct {
		const char *name;
		unsigned bit;
	} blocks[] = {{"write", ND_BLOCK_WRITE},
	              {"read_only", ND_BLOCK_READ_ONLY},
	              {"read_only_allow_delete", ND_BLOCK_READ_ONLY_ALLOW_DELETE},
	              {"read", ND_BLOCK_READ},
	              {"metadata", ND_BLOCK_METADATA}};
	for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
		if (strcmp(blocks[i].name, name))
			continue;
		bool on;
		if (cJSON_IsNull(v))
			on = false;
		else if (cJSON_IsBool(v))
			on = cJSON_IsTrue(v);
		else if (cJSON_IsString(v) && (!strcmp(v->valuestring, "true") ||
		                               !strcmp(v->valuestring, "false")))
			on = !strcmp(v->valuestring, "true");
		else
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse value for setting [index.blocks.%s]: only "
			                    "[true] or [false] are allowed",
			                    name);
		s->blocks = on ? s->blocks | blocks[i].bit : s->blocks & ~blocks[i].bit;
		return CM_OK;
	}
	return cm_error_set(err, CM_EINVAL,
	                    "unknown setting [index.blocks.%s] please check that any required "
	                    "plugins are installed, or check the breaking changes documentation for "
	                    "removed settings",
	                    name);
}

/* Applies one flat setting "index.x" = v. `creating` allows static ones. */
static cm_err
setting_apply(nd_settings *s, const char *key, const cJSON *v, bool creating, cm_error *err)
{
	long long n;
	char buf[64];
	const char *k = key;

	if (strncmp(k, "index.", 6) == 0)
		k += 6;
	if (strcmp(k, "number_of_shards") == 0) {
		if (!creating)
			return cm_error_set(
			    err, CM_EINVAL,
			    "final index setting [index.number_of_shards], not updateable");
		if (!json_int(v, &n))
			return cm_error_set(
			    err, CM_EINVAL,
			    "Failed to parse value for setting [index.number_of_shards]");
		if (n < 1 || n > ND_MAX_SHARDS)
			return cm_error_set(
			    err, CM_EINVAL,
			    "Failed to parse value [%lld] for setting [index.number_of_shards] "
			    "must be >= 1 and <= %d",
			    n, ND_MAX_SHARDS);
		s->number_of_shards = (int)n;
	} else if (strcmp(k, "number_of_replicas") == 0) {
		if (!json_int(v, &n) || n < 0 || n > 64)
			return cm_error_set(
			    err, CM_EINVAL,
			    "Failed to parse value for setting [index.number_of_replicas] "
			    "must be >= 0");
		s->number_of_replicas = (int)n;
	} else if (strcmp(k, "max_result_window") == 0) {
		if (!json_int(v, &n) || n < 1 || n > INT32_MAX)
			return cm_error_set(
			    err, CM_EINVAL,
			    "Failed to parse value for setting [index.max_result_window] "
			    "must be >= 1");
		s->max_result_window = (int)n;
	} else if (strcmp(k, "refresh_interval") == 0) {
		int64_t ms;
		if (cJSON_IsNumber(v)) /* ES reads a number as its text: -1 and 0 only */
			snprintf(buf, sizeof(buf), "%.17g", v->valuedouble);
		else if (cJSON_IsString(v))
			snprintf(buf, sizeof(buf), "%s", v->valuestring);
		else if (cJSON_IsNull(v))
			snprintf(buf, sizeof(buf), "1s");
		else
			buf[0] = 0;
		if (!nd_parse_time(buf, &ms))
			return cm_error_set(
			    err, CM_EINVAL,
			    "failed to parse setting [index.refresh_interval] with value [%s] "
			    "as a time value: unit is missing or unrecognized",
			    buf);
		s->refresh_interval_ms = ms;
		snprintf(s->refresh_interval, sizeof(s->refresh_interval), "%s", buf);
	} else if (strcmp(k, "max_ngram_diff") == 0 || strcmp(k, "max_shingle_diff") == 0) {
		if (!json_int(v, &n) || n < 0 || n > INT32_MAX)
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse value for setting [index.%s] must be >= 0",
			                    k);
		*(k[4] == 'n' ? &s->max_ngram_diff : &s->max_shingle_diff) = (int)n;
	} else if (strcmp(k, "unassigned.node_left.delayed_timeout") == 0) {
		int64_t ms;
		if (!cJSON_IsString(v) || !nd_parse_time(v->valuestring, &ms) || ms < 0)
			return cm_error_set(
			    err, CM_EINVAL,
			    "failed to parse setting [index.unassigned.node_left.delayed_timeout]: "
			    "a time value such as \"1m\" or \"30s\" is expected");
		s->delayed_timeout_ms = ms;
	} else if (strcmp(k, "default_pipeline") == 0 || strcmp(k, "final_pipeline") == 0) {
		/* ingest pipelines (coordinator/co_ingest.c); "_none" or null = none */
		char *dst = k[0] == 'd' ? s->default_pipeline : s->final_pipeline;
		if (!cJSON_IsString(v) && !cJSON_IsNull(v))
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse value for setting [index.%s]: a string is "
			                    "expected",
			                    k);
		const char *pv = cJSON_IsString(v) ? v->valuestring : "";
		if (strlen(pv) >= sizeof(s->default_pipeline))
			return cm_error_set(err, CM_EINVAL, "setting [index.%s] is too long", k);
		snprintf(dst, sizeof(s->default_pipeline), "%s", strcmp(pv, "_none") ? pv : "");
	} else if (strcmp(k, "mapping.total_fields.limit") == 0) {
		if (cJSON_IsNull(v)) {
			s->total_fields_limit = 1000;
			return CM_OK;
		}
		if (!json_int(v, &n) || n < 1 || n > 10000)
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse value for setting "
			                    "[index.mapping.total_fields.limit]: an integer from 1 to "
			                    "10000 (Shoal's most) is expected");
		s->total_fields_limit = (int)n;
	} else if (strcmp(k, "verified_before_close") == 0) {
		/* set by _close, cleared by _open (coordinator/co_rest.c) */
		if (cJSON_IsNull(v) || cJSON_IsFalse(v) ||
		    (cJSON_IsString(v) && !strcmp(v->valuestring, "false")))
			s->closed = false;
		else if (cJSON_IsTrue(v) || (cJSON_IsString(v) && !strcmp(v->valuestring, "true")))
			s->closed = true;
		else
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse value for setting "
			                    "[index.verified_before_close]");
	} else if (strncmp(k, "blocks.", 7) == 0) {
		return block_apply(s, k + 7, v, err);
	} else if (strcmp(k, "requests.cache.enable") == 0) {
		/* dynamic, default true: size-0 searches use the shard request
		 * cache (nd_reqcache.h); kept with the accepted ones for display */
		if (!cJSON_IsNull(v) && !accepted_value_ok('b', v))
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse value [%s] as only [true] or [false] are "
			                    "allowed.",
			                    cJSON_IsString(v) ? v->valuestring : "");
		s->request_cache_off =
		    cJSON_IsFalse(v) || (cJSON_IsString(v) && !strcmp(v->valuestring, "false"));
		return accepted_put(s, k, v, err);
	} else if (strcmp(k, "uuid") == 0 || strcmp(k, "creation_date") == 0 ||
	           strcmp(k, "provided_name") == 0 || strncmp(k, "version.", 8) == 0) {
		if (!creating)
			return cm_error_set(err, CM_EINVAL,
			                    "final index setting [index.%s], not updateable", k);
		/* private settings: ignored on create like ES ignores them on restore */
	} else if (accepted_lookup(k)) {
		char kind = accepted_lookup(k)->kind;
		if (!cJSON_IsNull(v) && !accepted_value_ok(kind, v))
			return cm_error_set(err, CM_EINVAL,
			                    "Failed to parse value for setting [index.%s]: %s expected", k,
			                    kind == 'i'   ? "a non-negative integer"
			                    : kind == 'b' ? "[true] or [false]"
			                    : kind == 't' ? "a time value such as \"30s\""
			                    : kind == 'a' ? "a string or a list of strings"
			                                  : "a string");
		return accepted_put(s, k, v, err);
	} else {
		return cm_error_set(
		    err, CM_EINVAL,
		    "unknown setting [index.%s] please check that any required plugins are "
		    "installed, or check the breaking changes documentation for removed "
		    "settings",
		    k);
	}
	return CM_OK;
}

/* Puts leaf v at the dotted path under *root (created on first use), so
 * {"analysis":{"analyzer":..}} and "index.analysis.analyzer.x.type" build
 * the same object. */
static cm_err
analysis_put(cJSON **root, const char *path, const cJSON *v, cm_error *err)
{
	char buf[256], *save = NULL, *seg, *next;
	snprintf(buf, sizeof(buf), "%s", path);
	if (*root == NULL)
		*root = cJSON_CreateObject();
	cJSON *o = *root;
	seg = strtok_r(buf, ".", &save);
	while (seg != NULL) {
		next = strtok_r(NULL, ".", &save);
		cJSON *c = cJSON_GetObjectItemCaseSensitive(o, seg);
		if (next == NULL) {
			if (c != NULL)
				cJSON_DeleteItemFromObjectCaseSensitive(o, seg);
			cJSON_AddItemToObject(o, seg, cJSON_Duplicate(v, true));
			return CM_OK;
		}
		if (c == NULL)
			c = cJSON_AddObjectToObject(o, seg);
		else if (!cJSON_IsObject(c))
			return cm_error_set(err, CM_EINVAL, "invalid analysis setting [index.analysis.%s]",
			                    path);
		o = c;
		seg = next;
	}
	return cm_error_set(err, CM_EINVAL, "invalid analysis setting [index.analysis]");
}

/* Walks {"index":{"number_of_shards":1}}, {"number_of_shards":1} and
 * {"index.number_of_shards":1} alike. `analysis` collects index.analysis
 * (static: NULL when not creating, and then refused as ES refuses it on
 * an open index). */
static cm_err
settings_walk(nd_index *ix, nd_settings *s, cJSON **analysis, const cJSON *obj, const char *prefix,
              bool creating, cm_error *err)
{
	const cJSON *c;
	char key[256];
	cm_err rc;

	if (!cJSON_IsObject(obj))
		return cm_error_set(err, CM_EPARSE, "settings must be an object");
	cJSON_ArrayForEach(c, obj)
	{
		if (snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", c->string) >=
		    (int)sizeof(key))
			return cm_error_set(err, CM_EINVAL, "setting name too long");
		const char *k = strncmp(key, "index.", 6) == 0 ? key + 6 : key;
		bool an = strncmp(k, "analysis", 8) == 0 && (k[8] == 0 || k[8] == '.');
		if (an && analysis == NULL)
			return cm_error_set(err, CM_EINVAL,
			                    "Can't update non dynamic settings [[index.%s]] for open "
			                    "indices [[%s/%s]]",
			                    k, ix ? ix->name : "", ix ? ix->uuid : "");
		if (cJSON_IsObject(c))
			rc = settings_walk(ix, s, analysis, c, key, creating, err);
		else if (an && k[8] == '.')
			rc = analysis_put(analysis, k + 9, c, err);
		else if (an)
			rc = cm_error_set(err, CM_EINVAL, "[index.analysis] must be an object");
		else
			rc = setting_apply(s, key, c, creating, err);
		if (rc)
			return rc;
	}
	return CM_OK;
}

static const char *const block_names[] = {"write", "read_only", "read_only_allow_delete", "read",
                                          "metadata"};

/* Adds the blocks and the accepted settings to `idx`: nested objects
 * ("mapping":{"total_fields":{"limit":"5000"}}), or flat keys. */
void
nd_settings_extra_json(const nd_settings *s, cJSON *idx, bool flat)
{
	if (s->closed)
		cJSON_AddStringToObject(idx, "verified_before_close", "true");
	if (s->total_fields_limit != 1000) {
		char v[16];
		snprintf(v, sizeof(v), "%d", s->total_fields_limit);
		if (flat) {
			cJSON_AddStringToObject(idx, "mapping.total_fields.limit", v);
		} else {
			cJSON *m = cJSON_GetObjectItemCaseSensitive(idx, "mapping");
			if (!m)
				m = cJSON_AddObjectToObject(idx, "mapping");
			cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "total_fields"), "limit", v);
		}
	}
	for (int i = 0; i < 5; i++) {
		if (!(s->blocks & (1u << i)))
			continue;
		if (flat) {
			char k[64];
			snprintf(k, sizeof(k), "blocks.%s", block_names[i]);
			cJSON_AddStringToObject(idx, k, "true");
			continue;
		}
		cJSON *b = cJSON_GetObjectItemCaseSensitive(idx, "blocks");
		if (!b)
			b = cJSON_AddObjectToObject(idx, "blocks");
		cJSON_AddStringToObject(b, block_names[i], "true");
	}
	cJSON *all = s->accepted[0] ? cJSON_Parse(s->accepted) : NULL, *e;
	cJSON_ArrayForEach(e, all)
	{
		if (flat) {
			cJSON_AddItemToObject(idx, e->string, cJSON_Duplicate(e, true));
			continue;
		}
		char key[256], *save = NULL, *part, *next;
		snprintf(key, sizeof(key), "%s", e->string);
		cJSON *at = idx;
		part = strtok_r(key, ".", &save);
		while (part && (next = strtok_r(NULL, ".", &save))) {
			cJSON *c = cJSON_GetObjectItemCaseSensitive(at, part);
			if (!cJSON_IsObject(c))
				c = cJSON_AddObjectToObject(at, part);
			at = c;
			part = next;
		}
		if (part)
			cJSON_AddItemToObject(at, part, cJSON_Duplicate(e, true));
	}
	cJSON_Delete(all);
}

cm_err
nd_index_blocked(nd_index *ix, char op, cm_error *err)
{
	pthread_mutex_lock(&ix->lock);
	unsigned b = ix->settings.blocks;
	pthread_mutex_unlock(&ix->lock);
	const char *why = NULL;
	if (nd_index_closed(ix) && op != 's')
		return cm_error_set(err, CM_EINDEXCLOSED, "closed");
	if (op == 's')
		op = 'm';
	if ((op == 'w' || op == 'd') && (b & ND_BLOCK_READ_ONLY))
		why = "FORBIDDEN/5/index read-only (api)";
	else if (op == 'w' && (b & ND_BLOCK_READ_ONLY_ALLOW_DELETE))
		why = "FORBIDDEN/12/index read-only / allow delete (api)";
	else if ((op == 'w' || op == 'd') && (b & ND_BLOCK_WRITE))
		why = "FORBIDDEN/8/index write (api)";
	else if (op == 'r' && (b & ND_BLOCK_READ))
		why = "FORBIDDEN/7/index read (api)";
	else if (op == 'm' && (b & ND_BLOCK_READ_ONLY))
		why = "FORBIDDEN/5/index read-only (api)";
	else if (op == 'm' && (b & ND_BLOCK_READ_ONLY_ALLOW_DELETE))
		why = "FORBIDDEN/12/index read-only / allow delete (api)";
	else if (op == 'm' && (b & ND_BLOCK_METADATA))
		why = "FORBIDDEN/9/index metadata (api)";
	if (!why)
		return CM_OK;
	return cm_error_set(err, CM_EBLOCKED, "index [%s] blocked by: [%s];", ix->name, why);
}

cJSON *
nd_index_settings_json(const nd_index *ix)
{
	cJSON *root = cJSON_CreateObject(), *idx = cJSON_AddObjectToObject(root, "index"), *ver;
	char buf[64];
	const nd_settings *s = &ix->settings;

	if (s->refresh_interval[0])
		cJSON_AddStringToObject(idx, "refresh_interval", s->refresh_interval);
	snprintf(buf, sizeof(buf), "%d", s->number_of_shards);
	cJSON_AddStringToObject(idx, "number_of_shards", buf);
	if (s->max_result_window != 10000) {
		snprintf(buf, sizeof(buf), "%d", s->max_result_window);
		cJSON_AddStringToObject(idx, "max_result_window", buf);
	}
	if (s->delayed_timeout_ms != 60000) {
		cJSON *u = cJSON_AddObjectToObject(idx, "unassigned");
		cJSON *nl = cJSON_AddObjectToObject(u, "node_left");
		snprintf(buf, sizeof(buf), "%lldms", (long long)s->delayed_timeout_ms);
		cJSON_AddStringToObject(nl, "delayed_timeout", buf);
	}
	if (s->default_pipeline[0])
		cJSON_AddStringToObject(idx, "default_pipeline", s->default_pipeline);
	if (s->final_pipeline[0])
		cJSON_AddStringToObject(idx, "final_pipeline", s->final_pipeline);
	nd_settings_extra_json(s, idx, false);
	snprintf(buf, sizeof(buf), "%lld", (long long)ix->creation_ms);
	cJSON_AddStringToObject(idx, "creation_date", buf);
	snprintf(buf, sizeof(buf), "%d", s->number_of_replicas);
	cJSON_AddStringToObject(idx, "number_of_replicas", buf);
	cJSON_AddStringToObject(idx, "uuid", ix->uuid);
	ver = cJSON_AddObjectToObject(idx, "version");
	cJSON_AddStringToObject(ver, "created", "7100299");
	cJSON_AddStringToObject(idx, "provided_name", ix->name);
	if (s->max_ngram_diff != 1) {
		snprintf(buf, sizeof(buf), "%d", s->max_ngram_diff);
		cJSON_AddStringToObject(idx, "max_ngram_diff", buf);
	}
	if (s->max_shingle_diff != 3) {
		snprintf(buf, sizeof(buf), "%d", s->max_shingle_diff);
		cJSON_AddStringToObject(idx, "max_shingle_diff", buf);
	}
	st_mapping *m = nd_index_mapping((nd_index *)ix);
	const cJSON *an = st_analysis_json(m ? m->analysis : NULL);
	if (an != NULL)
		cJSON_AddItemToObject(idx, "analysis", cJSON_Duplicate(an, true));
	st_mapping_unref(m);
	return root;
}

/* ---- metadata files ---- */

static cm_err
index_persist_locked(nd_index *ix)
{
	cJSON *root = cJSON_CreateObject(), *settings = cJSON_CreateObject();
	char path[PATH_MAX], *text;
	cm_err rc;

	cJSON_AddStringToObject(root, "name", ix->name);
	cJSON_AddStringToObject(root, "uuid", ix->uuid);
	cJSON_AddNumberToObject(root, "creation_date", (double)ix->creation_ms);
	cJSON_AddNumberToObject(settings, "number_of_shards", ix->settings.number_of_shards);
	cJSON_AddNumberToObject(settings, "number_of_replicas", ix->settings.number_of_replicas);
	cJSON_AddNumberToObject(settings, "max_result_window", ix->settings.max_result_window);
	if (ix->settings.refresh_interval[0])
		cJSON_AddStringToObject(settings, "refresh_interval",
		                        ix->settings.refresh_interval);
	if (ix->settings.delayed_timeout_ms != 60000) {
		char dt[32];
		snprintf(dt, sizeof(dt), "%lldms", (long long)ix->settings.delayed_timeout_ms);
		cJSON_AddStringToObject(settings, "unassigned.node_left.delayed_timeout", dt);
	}
	if (ix->settings.default_pipeline[0])
		cJSON_AddStringToObject(settings, "default_pipeline", ix->settings.default_pipeline);
	if (ix->settings.final_pipeline[0])
		cJSON_AddStringToObject(settings, "final_pipeline", ix->settings.final_pipeline);
	nd_settings_extra_json(&ix->settings, settings, true);
	if (ix->settings.max_ngram_diff != 1)
		cJSON_AddNumberToObject(settings, "max_ngram_diff", ix->settings.max_ngram_diff);
	if (ix->settings.max_shingle_diff != 3)
		cJSON_AddNumberToObject(settings, "max_shingle_diff", ix->settings.max_shingle_diff);
	const cJSON *an = st_analysis_json(ix->mapping->analysis);
	if (an != NULL)
		cJSON_AddItemToObject(settings, "analysis", cJSON_Duplicate(an, true));
	cJSON_AddItemToObject(root, "settings", settings);
	cJSON_AddItemToObject(root, "mappings", st_mapping_to_json(ix->mapping));
	if (ix->aliases)
		cJSON_AddItemToObject(root, "aliases", cJSON_Duplicate(ix->aliases, true));
	text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (!text)
		return CM_ENOMEM;
	snprintf(path, sizeof(path), "%s/index.json", ix->dir);
	rc = cm_file_write_atomic(path, text, strlen(text));
	cJSON_free(text);
	return rc;
}

cm_err
nd_index_persist_locked(nd_index *ix)
{
	return index_persist_locked(ix);
}

static void
index_free(nd_index *ix)
{
	cJSON_Delete(ix->aliases);
	if (ix->shards) {
		for (int i = 0; i < ix->settings.number_of_shards; i++)
			if (ix->shards[i])
				st_shard_close(ix->shards[i]);
		cm_free(CM_MEM_NODE, ix->shards);
	}
	if (ix->dirty)
		cm_free(CM_MEM_NODE, (void *)ix->dirty);
	if (ix->mapping)
		st_mapping_unref(ix->mapping);
	if (ix->deleted)
		cm_rm_rf(ix->dir);
	pthread_mutex_destroy(&ix->lock);
	pthread_mutex_destroy(&ix->groups_lock);
	cm_free(CM_MEM_NODE, ix->groups);
	pthread_mutex_destroy(&ix->refresh_lock);
	pthread_cond_destroy(&ix->refresh_cond);
	cm_free(CM_MEM_NODE, ix);
}

static cm_err
index_open_shards(nd_index *ix, cm_error *err)
{
	st_shard_opts o;
	char dir[PATH_MAX];
	int ns = ix->settings.number_of_shards;

	st_shard_opts_default(&o);
	o.merge_pool = ix->node->merge_pool;
	o.index_pool = ix->node->index_pool;
	o.replicated = ix->node->replicated;
	o.nested_objects_limit = nested_objects_limit(&ix->settings);
	atomic_store(&ix->nested_limit, o.nested_objects_limit);
	ix->shards = cm_calloc(CM_MEM_NODE, (size_t)ns, sizeof(st_shard *));
	ix->dirty = cm_calloc(CM_MEM_NODE, (size_t)ns, sizeof(*ix->dirty));
	for (int i = 0; i < ns; i++) {
		snprintf(dir, sizeof(dir), "%s/%d", ix->dir, i);
		if (cm_mkdir_p(dir))
			return cm_error_set(err, CM_EIO, "cannot create shard directory");
		cm_err rc = st_shard_open(dir, ix->mapping, &o, &ix->shards[i], err);
		if (rc)
			return rc;
	}
	return CM_OK;
}

static nd_index *
index_alloc(nd_node *n, const char *name, const char *uuid)
{
	nd_index *ix = cm_calloc(CM_MEM_NODE, 1, sizeof(*ix));
	ix->node = n;
	atomic_init(&ix->refs, 1);
	atomic_init(&ix->nested_limit, ST_NESTED_OBJECTS_LIMIT);
	snprintf(ix->name, sizeof(ix->name), "%s", name);
	snprintf(ix->uuid, sizeof(ix->uuid), "%s", uuid);
	snprintf(ix->dir, sizeof(ix->dir), "%s/indices/%s", n->data_dir, uuid);
	pthread_mutex_init(&ix->lock, NULL);
	pthread_mutex_init(&ix->groups_lock, NULL);
	pthread_mutex_init(&ix->refresh_lock, NULL);
	pthread_cond_init(&ix->refresh_cond, NULL);
	ix->last_refresh_ns = cm_now_ns();
	ix->last_flush_ns = ix->last_refresh_ns;
	return ix;
}

/* Loads DATA/indices/<uuid>/index.json. */
static cm_err
index_load(nd_node *n, const char *uuid, nd_index **out, cm_error *err)
{
	char path[PATH_MAX], *text = NULL;
	size_t len;
	cJSON *root = NULL;
	nd_index *ix = NULL;
	const cJSON *name, *settings, *mappings, *cd;
	cJSON *anj = NULL;
	st_analysis *an = NULL;
	cm_err rc;

	snprintf(path, sizeof(path), "%s/indices/%s/index.json", n->data_dir, uuid);
	if ((rc = cm_file_read(path, META_MAX, &text, &len)))
		return cm_error_set(err, rc, "cannot read %s", path);
	root = cJSON_ParseWithLength(text, len);
	cm_free(CM_MEM_COMMON, text);
	name = cJSON_GetObjectItemCaseSensitive(root, "name");
	settings = cJSON_GetObjectItemCaseSensitive(root, "settings");
	mappings = cJSON_GetObjectItemCaseSensitive(root, "mappings");
	cd = cJSON_GetObjectItemCaseSensitive(root, "creation_date");
	if (!cJSON_IsString(name) || !cJSON_IsObject(settings) || !cJSON_IsObject(mappings)) {
		rc = cm_error_set(err, CM_ECORRUPT, "index metadata %s is malformed", path);
		goto fail;
	}
	ix = index_alloc(n, name->valuestring, uuid);
	ix->creation_ms = cJSON_IsNumber(cd) ? (int64_t)cd->valuedouble : cm_wall_ms();
	settings_default(&ix->settings);
	if ((rc = settings_walk(ix, &ix->settings, &anj, settings, "", true, err)))
		goto fail;
	if ((rc = st_analysis_parse(anj, ix->settings.max_ngram_diff, ix->settings.max_shingle_diff,
	                            &an, err)))
		goto fail;
	if ((rc = st_mapping_from_json_an(mappings, an, &ix->mapping, err)))
		goto fail;
	if ((rc = nd_alias_entries(cJSON_GetObjectItemCaseSensitive(root, "aliases"), &ix->aliases,
	                           err)))
		goto fail;
	if ((rc = index_open_shards(ix, err)))
		goto fail;
	/* Operations replayed from the log sit in the buffer: make them
	 * searchable now, as a recovered Elasticsearch shard is. */
	for (int i = 0; i < ix->settings.number_of_shards; i++)
		if (st_shard_refresh(ix->shards[i]))
			cm_warn("node", "refresh of [%s][%d] after recovery failed", ix->name, i);
	cJSON_Delete(root);
	cJSON_Delete(anj);
	st_analysis_unref(an);
	*out = ix;
	return CM_OK;
fail:
	cJSON_Delete(root);
	cJSON_Delete(anj);
	st_analysis_unref(an);
	if (ix)
		index_free(ix);
	return rc;
}

/* ---- registry ---- */

/* The position of name in the registry (sorted by name), or where it
 * would go. Callers hold n->reg_lock. */
static size_t
registry_pos(const nd_node *n, const char *name, bool *found)
{
	size_t lo = 0, hi = n->nindices;
	*found = false;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(n->indices[mid]->name, name);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Callers hold n->reg_lock for writing. */
static void
registry_add(nd_node *n, nd_index *ix)
{
	if (n->nindices == n->capindices) {
		n->capindices = n->capindices ? n->capindices * 2 : 16;
		n->indices =
		    cm_realloc(CM_MEM_NODE, n->indices, n->capindices * sizeof(nd_index *));
	}
	bool found;
	size_t at = registry_pos(n, ix->name, &found);
	memmove(&n->indices[at + 1], &n->indices[at], (n->nindices - at) * sizeof(nd_index *));
	n->indices[at] = ix;
	n->nindices++;
}

static nd_index *
registry_find(nd_node *n, const char *name)
{
	bool found;
	size_t at = registry_pos(n, name, &found);
	return found ? n->indices[at] : NULL;
}

cm_err
nd_registry_load(nd_node *n, cm_error *err)
{
	char path[1100];
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof(path), "%s/indices", n->data_dir);
	if (cm_mkdir_p(path))
		return cm_error_set(err, CM_EIO, "cannot create %s", path);
	if (!(d = opendir(path)))
		return cm_error_set(err, CM_EIO, "cannot list %s", path);
	while ((e = readdir(d))) {
		nd_index *ix = NULL;
		char meta[PATH_MAX];
		if (e->d_name[0] == '.')
			continue;
		snprintf(meta, sizeof(meta), "%s/%s/index.json", path, e->d_name);
		if (access(meta, F_OK) != 0) {
			/* A create that died before its metadata was written, or a
			 * delete that died after removing it: nothing refers to it. */
			snprintf(meta, sizeof(meta), "%s/%s", path, e->d_name);
			cm_warn("node", "removing incomplete index directory %s", meta);
			cm_rm_rf(meta);
			continue;
		}
		cm_err rc = index_load(n, e->d_name, &ix, err);
		if (rc) {
			closedir(d);
			return rc;
		}
		registry_add(n, ix);
		cm_info("node", "loaded index [%s] (%d shards)", ix->name,
		        ix->settings.number_of_shards);
	}
	closedir(d);
	return CM_OK;
}

void
nd_registry_close(nd_node *n)
{
	for (size_t i = 0; i < n->nindices; i++)
		nd_index_release(n->indices[i]);
	cm_free(CM_MEM_NODE, n->indices);
	n->indices = NULL;
	n->nindices = 0;
}

cm_err
nd_index_name_check(const char *name, cm_error *err)
{
	size_t len = strlen(name);
	static const char bad[] = "\\/*?\"<>| ,#:";

	if (len == 0)
		return cm_error_set(err, CM_EBADNAME, "Invalid index name [%s], must not be empty",
		                    name);
	for (const char *p = name; *p; p++)
		if (isupper((unsigned char)*p))
			return cm_error_set(err, CM_EBADNAME,
			                    "Invalid index name [%s], must be lowercase", name);
	for (const char *p = name; *p; p++)
		if (strchr(bad, *p))
			return cm_error_set(
			    err, CM_EBADNAME,
			    "Invalid index name [%s], must not contain the following "
			    "characters [ , \", *, \\, <, |, ,, >, /, ?]",
			    name);
	if (name[0] == '_' || name[0] == '-' || name[0] == '+')
		return cm_error_set(err, CM_EBADNAME,
		                    "Invalid index name [%s], must not start with '_', '-', or '+'",
		                    name);
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return cm_error_set(err, CM_EBADNAME,
		                    "Invalid index name [%s], must not be '.' or '..'", name);
	if (len > 255)
		return cm_error_set(err, CM_EBADNAME,
		                    "Invalid index name [%s], index name is too long, (%zu > 255)",
		                    name, len);
	return CM_OK;
}

cm_err
nd_index_create(nd_node *n, const char *name, const cJSON *body, nd_index **out, cm_error *err)
{
	return nd_index_create_as(n, name, NULL, body, out, err);
}

cm_err
nd_index_create_as(nd_node *n, const char *name, const char *given_uuid, const cJSON *body,
                   nd_index **out, cm_error *err)
{
	nd_index *ix = NULL;
	char uuid[23];
	const cJSON *c;
	cJSON *aliases = NULL, *anj = NULL;
	st_analysis *an = NULL;
	cm_err rc;

	if ((rc = nd_index_name_check(name, err)))
		return rc;
	if (body && !cJSON_IsObject(body))
		return cm_error_set(err, CM_EPARSE, "request body must be an object");
	if (body) {
		cJSON_ArrayForEach(c, body)
		{
			if (strcmp(c->string, "settings") && strcmp(c->string, "mappings") &&
			    strcmp(c->string, "aliases"))
				return cm_error_set(err, CM_EPARSE,
				                    "unknown key [%s] for create index", c->string);
		}
		c = cJSON_GetObjectItemCaseSensitive(body, "aliases");
		if (c && (rc = nd_alias_entries(c, &aliases, err)))
			return rc;
	}
	/* a create the master or a solo node decides (not one replayed from
	 * the cluster state) is checked against the other indices' aliases */
	if (!given_uuid && (rc = nd_alias_create_check(n, name, aliases, err))) {
		cJSON_Delete(aliases);
		return rc;
	}
	if (given_uuid && given_uuid[0] && strlen(given_uuid) < sizeof(uuid) &&
	    !strchr(given_uuid, '/') && given_uuid[0] != '.')
		snprintf(uuid, sizeof(uuid), "%s", given_uuid);
	else
		nd_uuid(uuid);
	ix = index_alloc(n, name, uuid);
	ix->creation_ms = cm_wall_ms();
	if (cJSON_GetArraySize(aliases))
		ix->aliases = aliases;
	else
		cJSON_Delete(aliases);
	settings_default(&ix->settings);
	if (body && (c = cJSON_GetObjectItemCaseSensitive(body, "settings")) &&
	    (rc = settings_walk(ix, &ix->settings, &anj, c, "", true, err)))
		goto fail;
	if ((rc = st_analysis_parse(anj, ix->settings.max_ngram_diff, ix->settings.max_shingle_diff,
	                            &an, err)))
		goto fail;
	/* ES 7 still accepts a type name wrapper only with include_type_name. */
	c = body ? cJSON_GetObjectItemCaseSensitive(body, "mappings") : NULL;
	if ((rc = st_mapping_from_json_an(c, an, &ix->mapping, err)))
		goto fail;
	cJSON_Delete(anj);
	anj = NULL;
	if (!given_uuid && ix->mapping->nfields > (size_t)ix->settings.total_fields_limit) {
		/* a new index (not one the cluster state replays) */
		rc = cm_error_set(err, CM_EINVAL, "Limit of total fields [%d] has been exceeded",
		                  ix->settings.total_fields_limit);
		goto fail;
	}
	if (!given_uuid &&
	    (long long)mapping_nested_count(ix->mapping) > nested_fields_limit(&ix->settings)) {
		rc = cm_error_set(err, CM_EINVAL, "Limit of nested fields [%lld] has been exceeded",
		                  nested_fields_limit(&ix->settings));
		goto fail;
	}

	pthread_rwlock_wrlock(&n->reg_lock);
	if (registry_find(n, name)) {
		nd_index *old = registry_find(n, name);
		rc = cm_error_set_type(err, CM_EEXISTS, "resource_already_exists_exception",
		                       "index [%s/%s] already exists", name, old->uuid);
		pthread_rwlock_unlock(&n->reg_lock);
		goto fail;
	}
	/* Shards first, metadata last: a crash in between leaves a directory
	 * without index.json, which the next start removes. */
	if ((rc = cm_mkdir_p(ix->dir)) || (rc = index_open_shards(ix, err)) ||
	    (rc = index_persist_locked(ix))) {
		cm_error_set(err, rc, "cannot create index [%s]", name);
		ix->deleted = true;
		pthread_rwlock_unlock(&n->reg_lock);
		goto fail;
	}
	registry_add(n, ix);
	pthread_rwlock_unlock(&n->reg_lock);
	cm_info("node", "created index [%s] uuid %s shards %d", name, uuid,
	        ix->settings.number_of_shards);
	if (out)
		*out = nd_index_ref(ix);
	st_analysis_unref(an);
	return CM_OK;
fail:
	cJSON_Delete(anj);
	st_analysis_unref(an);
	index_free(ix);
	return rc;
}

cm_err
nd_index_delete(nd_node *n, nd_index *ix, cm_error *err)
{
	char path[PATH_MAX];
	bool found = false;

	pthread_rwlock_wrlock(&n->reg_lock);
	for (size_t i = 0; i < n->nindices; i++) {
		if (n->indices[i] == ix) {
			memmove(&n->indices[i], &n->indices[i + 1],
			        (n->nindices - i - 1) * sizeof(nd_index *));
			n->nindices--;
			found = true;
			break;
		}
	}
	if (found) {
		/* The metadata file goes first so a crash mid-delete never brings
		 * the index back half-removed. */
		snprintf(path, sizeof(path), "%s/index.json", ix->dir);
		unlink(path);
		cm_fsync_dir(ix->dir);
		ix->deleted = true;
	}
	pthread_rwlock_unlock(&n->reg_lock);
	if (!found)
		return cm_error_set(err, CM_ENOINDEX, "no such index [%s]", ix->name);
	cm_info("node", "deleted index [%s]", ix->name);
	if (n->reqcache) /* its results can never be asked for again */
		nd_reqcache_clear(n->reqcache, ix->uuid, true);
	nd_index_release(ix); /* the registry's reference */
	return CM_OK;
}

nd_index *
nd_index_ref(nd_index *ix)
{
	atomic_fetch_add(&ix->refs, 1);
	return ix;
}

void
nd_index_release(nd_index *ix)
{
	if (ix && atomic_fetch_sub(&ix->refs, 1) == 1)
		index_free(ix);
}

nd_index *
nd_index_get(nd_node *n, const char *name)
{
	nd_index *ix;
	pthread_rwlock_rdlock(&n->reg_lock);
	ix = registry_find(n, name);
	if (ix)
		nd_index_ref(ix);
	pthread_rwlock_unlock(&n->reg_lock);
	return ix;
}

cm_err
nd_index_get_or_create(nd_node *n, const char *name, nd_index **out, cm_error *err)
{
	cm_err rc;
	for (int tries = 0; tries < 3; tries++) {
		if ((*out = nd_index_get(n, name)))
			return CM_OK;
		rc = nd_index_create(n, name, NULL, out, err);
		if (rc != CM_EEXISTS)
			return rc;
		cm_error_clear(err); /* lost a race with another creator */
	}
	return cm_error_set(err, CM_EINTERNAL, "could not create index [%s]", name);
}

void
nd_index_list(nd_node *n, nd_index ***out, size_t *nout)
{
	pthread_rwlock_rdlock(&n->reg_lock);
	*out = cm_malloc(CM_MEM_NODE, (n->nindices + 1) * sizeof(nd_index *));
	for (size_t i = 0; i < n->nindices; i++)
		(*out)[i] = nd_index_ref(n->indices[i]);
	*nout = n->nindices;
	pthread_rwlock_unlock(&n->reg_lock);
}


cm_err
nd_resolve(nd_node *n, const char *expr, bool ignore_unavailable, nd_index ***out, size_t *nout,
           cm_error *err)
{
	return nd_resolve_ex(n, expr,
	                     ND_RESOLVE_OPEN | ND_RESOLVE_CLOSED |
	                         (ignore_unavailable ? ND_RESOLVE_IGNORE_UNAVAILABLE : 0),
	                     out, nout, err);
}

bool
nd_index_closed(nd_index *ix)
{
	pthread_mutex_lock(&ix->lock);
	bool c = ix->settings.closed;
	pthread_mutex_unlock(&ix->lock);
	return c;
}

bool
nd_index_hidden(nd_index *ix)
{
	char text[sizeof(ix->settings.accepted)];
	pthread_mutex_lock(&ix->lock);
	snprintf(text, sizeof(text), "%s", ix->settings.accepted);
	pthread_mutex_unlock(&ix->lock);
	if (!strstr(text, "\"hidden\"")) /* the common case: not set, no parse */
		return false;
	cJSON *all = cJSON_Parse(text);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(all, "hidden");
	bool hidden = cJSON_IsTrue(v) || (cJSON_IsString(v) && !strcmp(v->valuestring, "true"));
	cJSON_Delete(all);
	return hidden;
}

/* Whether a wildcard (tok) may select ix (expand_wildcards). */
static bool
wild_ok(nd_index *ix, unsigned flags, const char *tok)
{
	if (!(flags & ND_RESOLVE_HIDDEN) && !(tok[0] == '.' && ix->name[0] == '.') &&
	    nd_index_hidden(ix))
		return false;
	return nd_index_closed(ix) ? (flags & ND_RESOLVE_CLOSED) != 0 : (flags & ND_RESOLVE_OPEN) != 0;
}

cm_err
nd_resolve_ex(nd_node *n, const char *expr, unsigned flags, nd_index ***out, size_t *nout,
              cm_error *err)
{
	bool ignore_unavailable = flags & ND_RESOLVE_IGNORE_UNAVAILABLE;
	bool *sel;
	char *copy, *save = NULL, *tok;
	cm_err rc = CM_OK;
	size_t k = 0;

	pthread_rwlock_rdlock(&n->reg_lock);
	sel = cm_calloc(CM_MEM_NODE, n->nindices + 1, sizeof(bool));
	copy = cm_strdup(CM_MEM_NODE, expr && *expr ? expr : "_all");
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		bool neg = false, any = false;
		if (*tok == '-' && k > 0) {
			neg = true;
			tok++;
		}
		k++;
		if (strcmp(tok, "_all") == 0 || strcmp(tok, "*") == 0) {
			for (size_t i = 0; i < n->nindices; i++)
				if (neg || wild_ok(n->indices[i], flags, tok))
					sel[i] = !neg;
			continue;
		}
		if (strchr(tok, '*')) {
			for (size_t i = 0; i < n->nindices; i++)
				if (cm_glob(tok, n->indices[i]->name) &&
				    (n->indices[i]->name[0] != '.' || tok[0] == '.') &&
				    (neg || wild_ok(n->indices[i], flags, tok))) {
					sel[i] = !neg;
					any = true;
				}
			if (!(flags & ND_RESOLVE_NO_ALIASES) &&
			    nd_alias_select_locked(n, tok, true, (flags & ND_RESOLVE_HIDDEN) != 0,
			                           sel, !neg))
				any = true;
			/* allow_no_indices=false: each wildcard must select something,
			 * as ES resolves it, not only the whole expression */
			if (!any && !neg && (flags & ND_RESOLVE_NONE_FAILS)) {
				rc = cm_error_set(err, CM_ENOINDEX, "no such index [%s]", tok);
				break;
			}
			continue;
		}
		for (size_t i = 0; i < n->nindices; i++) {
			if (strcmp(tok, n->indices[i]->name) == 0) {
				/* a closed index is unavailable where closed ones are not
				 * wanted: skipped with ignore_unavailable, as ES */
				if (neg || !ignore_unavailable || (flags & ND_RESOLVE_CLOSED) ||
				    !nd_index_closed(n->indices[i]))
					sel[i] = !neg;
				any = true;
			}
		}
		if (!any && !(flags & ND_RESOLVE_NO_ALIASES))
			any = nd_alias_select_locked(n, tok, false, false, sel, !neg);
		if (!any && !neg && !ignore_unavailable) {
			rc = cm_error_set(err, CM_ENOINDEX, "no such index [%s]", tok);
			break;
		}
	}
	*out = NULL;
	*nout = 0;
	if (!rc) {
		*out = cm_malloc(CM_MEM_NODE, (n->nindices + 1) * sizeof(nd_index *));
		for (size_t i = 0; i < n->nindices; i++)
			if (sel[i])
				(*out)[(*nout)++] = nd_index_ref(n->indices[i]);
		if (!*nout && (flags & ND_RESOLVE_NONE_FAILS)) {
			cm_free(CM_MEM_NODE, *out);
			*out = NULL;
			rc = cm_error_set(err, CM_ENOINDEX, "no such index [%s]", expr ? expr : "_all");
		}
	}
	pthread_rwlock_unlock(&n->reg_lock);
	cm_free(CM_MEM_NODE, copy);
	cm_free(CM_MEM_NODE, sel);
	return rc;
}

/* ---- accessors ---- */

const char *
nd_index_name(const nd_index *ix)
{
	return ix->name;
}
const char *
nd_index_uuid(const nd_index *ix)
{
	return ix->uuid;
}
int64_t
nd_index_creation_ms(const nd_index *ix)
{
	return ix->creation_ms;
}
const nd_settings *
nd_index_settings(const nd_index *ix)
{
	return &ix->settings;
}
int
nd_index_nshards(const nd_index *ix)
{
	return ix->settings.number_of_shards;
}
st_shard *
nd_index_shard(nd_index *ix, int i)
{
	return ix->shards[i];
}
nd_index_stats *
nd_index_counters(nd_index *ix)
{
	return &ix->stats;
}

static void
add_u64(uint64_t *c, uint64_t v)
{
	atomic_fetch_add((_Atomic uint64_t *)c, v);
}

void
nd_index_count_search(nd_index *ix, const sr_request *req, uint64_t query_ns, bool fetched,
                      bool scroll)
{
	nd_index_stats *st = &ix->stats;
	add_u64(&st->query_total, 1);
	add_u64(&st->query_time_ns, query_ns);
	if (fetched)
		add_u64(&st->fetch_total, 1);
	if (scroll)
		add_u64(&st->scroll_total, 1);
	if (!req || !req->nstats_groups)
		return;
	pthread_mutex_lock(&ix->groups_lock);
	for (size_t i = 0; i < req->nstats_groups; i++) {
		const char *name = req->stats_groups[i];
		size_t g = 0;
		while (g < ix->ngroups && strcmp(ix->groups[g].name, name))
			g++;
		if (g == ix->ngroups) {
			ix->groups = cm_realloc(CM_MEM_NODE, ix->groups,
			                        (ix->ngroups + 1) * sizeof(*ix->groups));
			memset(&ix->groups[g], 0, sizeof(ix->groups[g]));
			snprintf(ix->groups[g].name, sizeof(ix->groups[g].name), "%s", name);
			ix->ngroups++;
		}
		nd_search_group *gr = &ix->groups[g];
		gr->query_total++;
		gr->query_time_ns += query_ns;
		gr->fetch_total += fetched;
		gr->scroll_total += scroll;
	}
	pthread_mutex_unlock(&ix->groups_lock);
}

size_t
nd_index_search_groups(nd_index *ix, nd_search_group **out)
{
	pthread_mutex_lock(&ix->groups_lock);
	size_t n = ix->ngroups;
	*out = cm_malloc(CM_MEM_NODE, (n ? n : 1) * sizeof(**out));
	if (n)
		memcpy(*out, ix->groups, n * sizeof(**out));
	pthread_mutex_unlock(&ix->groups_lock);
	return n;
}

st_mapping *
nd_index_mapping(nd_index *ix)
{
	st_mapping *m;
	pthread_mutex_lock(&ix->lock);
	m = st_mapping_ref(ix->mapping);
	pthread_mutex_unlock(&ix->lock);
	return m;
}

/* Installs a merged mapping: persisted first, then handed to the shards.
 * Caller holds ix->lock. */
static cm_err
mapping_install_locked(nd_index *ix, st_mapping *merged, cm_error *err)
{
	st_mapping *old = ix->mapping;
	cm_err rc;

	if (merged->nfields > (size_t)ix->settings.total_fields_limit &&
	    merged->nfields > old->nfields) {
		st_mapping_unref(merged);
		return cm_error_set(err, CM_EINVAL, "Limit of total fields [%d] has been exceeded",
		                    ix->settings.total_fields_limit);
	}
	if (mapping_nested_count(merged) > mapping_nested_count(old) &&
	    (long long)mapping_nested_count(merged) > nested_fields_limit(&ix->settings)) {
		long long lim = nested_fields_limit(&ix->settings);
		st_mapping_unref(merged);
		return cm_error_set(err, CM_EINVAL,
		                    "Limit of nested fields [%lld] has been exceeded", lim);
	}
	merged->version = old->version + 1;
	ix->mapping = merged;
	if ((rc = index_persist_locked(ix))) {
		ix->mapping = old;
		st_mapping_unref(merged);
		return cm_error_set(err, rc, "cannot persist the mapping of [%s]", ix->name);
	}
	for (int i = 0; i < ix->settings.number_of_shards; i++)
		st_shard_set_mapping(ix->shards[i], merged);
	st_mapping_unref(old);
	return CM_OK;
}

cm_err
nd_index_put_mapping(nd_index *ix, const cJSON *mappings, cm_error *err)
{
	st_mapping *add = NULL, *merged = NULL;
	cm_err rc;

	pthread_mutex_lock(&ix->lock);
	st_analysis *an = st_analysis_ref(ix->mapping->analysis);
	pthread_mutex_unlock(&ix->lock);
	rc = st_mapping_from_json_an(mappings, an, &add, err);
	st_analysis_unref(an);
	if (rc)
		return rc;
	pthread_mutex_lock(&ix->lock);
	rc = st_mapping_merge(ix->mapping, add, &merged, err);
	if (!rc)
		rc = mapping_install_locked(ix, merged, err);
	pthread_mutex_unlock(&ix->lock);
	st_mapping_unref(add);
	return rc;
}

/* Appends the leaf keys of an analysis object ("index.analysis.a.b", an
 * array is one leaf) to keys, one per string. */
static void
analysis_keys(const cJSON *o, const char *prefix, cJSON *keys)
{
	const cJSON *c;
	char key[512];
	cJSON_ArrayForEach(c, o)
	{
		if (snprintf(key, sizeof(key), "%s.%s", prefix, c->string) >= (int)sizeof(key))
			continue; /* no setting has so long a name */
		if (cJSON_IsObject(c))
			analysis_keys(c, key, keys);
		else
			cJSON_AddItemToArray(keys, cJSON_CreateString(key));
	}
}

static int
key_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ES's refusal of index.analysis.* on an open index, the keys sorted. */
static cm_err
analysis_open_refused(const nd_index *ix, const cJSON *anj, cm_error *err)
{
	cJSON *keys = cJSON_CreateArray();
	analysis_keys(anj, "index.analysis", keys);
	int nk = cJSON_GetArraySize(keys), k = 0;
	const char **v = cm_calloc(CM_MEM_NODE, (size_t)nk + 1, sizeof(*v));
	const cJSON *e;
	cJSON_ArrayForEach(e, keys) v[k++] = e->valuestring;
	qsort(v, (size_t)nk, sizeof(*v), key_cmp);
	char list[1024];
	size_t at = 0;
	list[0] = 0;
	for (k = 0; k < nk && at < sizeof(list) - 1; k++)
		at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s", k ? ", " : "", v[k]);
	cm_err rc = cm_error_set(
	    err, CM_EINVAL, "Can't update non dynamic settings [[%s]] for open indices [[%s/%s]]",
	    list, ix->name, ix->uuid);
	cm_free(CM_MEM_NODE, v);
	cJSON_Delete(keys);
	return rc;
}

/* Merges the leaves of add into into (a null leaf removes the key, as a
 * null setting resets it in ES). */
static void
analysis_merge(cJSON *into, const cJSON *add)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, add)
	{
		cJSON *have = cJSON_GetObjectItemCaseSensitive(into, c->string);
		if (cJSON_IsObject(c) && cJSON_IsObject(have)) {
			analysis_merge(have, c);
			continue;
		}
		if (have)
			cJSON_DeleteItemFromObjectCaseSensitive(into, c->string);
		if (!cJSON_IsNull(c))
			cJSON_AddItemToObject(into, c->string, cJSON_Duplicate(c, true));
	}
}

/* Applies index.analysis changes to a closed index: the merged analysis is
 * parsed and the mapping rebuilt over it (fields name analyzers), then
 * both are persisted with settings s. Segments keep the tokens they were
 * indexed with. Caller holds ix->lock; on error nothing changed. */
static cm_err
analysis_update_locked(nd_index *ix, const nd_settings *s, const cJSON *anj, cm_error *err)
{
	const cJSON *cur = st_analysis_json(ix->mapping->analysis);
	cJSON *merged = cur ? cJSON_Duplicate(cur, true) : cJSON_CreateObject(), *mj = NULL;
	st_analysis *an = NULL;
	st_mapping *m = NULL;
	nd_settings old = ix->settings;
	cm_err rc;

	analysis_merge(merged, anj);
	if (cur && cJSON_Compare(cur, merged, true)) {
		cJSON_Delete(merged); /* a replay of a change already applied */
		ix->settings = *s;
		if ((rc = index_persist_locked(ix))) {
			ix->settings = old;
			return cm_error_set(err, rc, "cannot persist settings");
		}
		return CM_OK;
	}
	rc = st_analysis_parse(cJSON_GetArraySize(merged) ? merged : NULL, s->max_ngram_diff,
	                       s->max_shingle_diff, &an, err);
	if (!rc) {
		mj = st_mapping_to_json(ix->mapping);
		rc = st_mapping_from_json_an(mj, an, &m, err);
	}
	if (!rc) {
		ix->settings = *s;
		if ((rc = mapping_install_locked(ix, m, err))) /* takes m */
			ix->settings = old;
	}
	cJSON_Delete(mj);
	cJSON_Delete(merged);
	st_analysis_unref(an);
	return rc;
}

/* The settings body applied to a copy of ix's (*s), its analysis part in
 * *anj; analysis changes are refused on an open index. ix->lock held. */
static cm_err
settings_prepare_locked(nd_index *ix, nd_settings *s, cJSON **anj, const cJSON *body,
                        cm_error *err)
{
	*s = ix->settings;
	cm_err rc = settings_walk(ix, s, anj, body, "", false, err);
	if (!rc && *anj && !ix->settings.closed)
		rc = analysis_open_refused(ix, *anj, err);
	return rc;
}

cm_err
nd_index_settings_check(nd_index *ix, const cJSON *body, cm_error *err)
{
	nd_settings s;
	cJSON *anj = NULL;

	pthread_mutex_lock(&ix->lock);
	cm_err rc = settings_prepare_locked(ix, &s, &anj, body, err);
	pthread_mutex_unlock(&ix->lock);
	cJSON_Delete(anj);
	return rc;
}

cm_err
nd_index_put_settings(nd_index *ix, const cJSON *body, cm_error *err)
{
	nd_settings s;
	cJSON *anj = NULL;
	cm_err rc;

	pthread_mutex_lock(&ix->lock);
	rc = settings_prepare_locked(ix, &s, &anj, body, err);
	if (!rc && anj) {
		rc = analysis_update_locked(ix, &s, anj, err);
	} else if (!rc) {
		nd_settings old = ix->settings;
		ix->settings = s;
		if ((rc = index_persist_locked(ix))) {
			ix->settings = old;
			cm_error_set(err, rc, "cannot persist settings");
		}
		uint32_t lim = nested_objects_limit(&ix->settings);
		atomic_store(&ix->nested_limit, lim);
		for (int i = 0; !rc && ix->shards && i < ix->settings.number_of_shards; i++)
			if (ix->shards[i])
				st_shard_set_nested_objects_limit(ix->shards[i], lim);
	}
	pthread_mutex_unlock(&ix->lock);
	cJSON_Delete(anj);
	return rc;
}

void
nd_index_pipelines(nd_index *ix, char *dflt, char *final)
{
	pthread_mutex_lock(&ix->lock);
	memcpy(dflt, ix->settings.default_pipeline, sizeof(ix->settings.default_pipeline));
	memcpy(final, ix->settings.final_pipeline, sizeof(ix->settings.final_pipeline));
	pthread_mutex_unlock(&ix->lock);
}

int
nd_index_route(const nd_index *ix, const char *routing, size_t len)
{
	return (int)(XXH64(routing, len, 0) % (uint64_t)ix->settings.number_of_shards);
}

cm_err
nd_index_prepare_doc(nd_index *ix, const char *id, size_t id_len, const char *src, size_t len,
                     cm_error *err)
{
	st_mapping *m = nd_index_mapping(ix), *add = NULL, *merged = NULL;
	st_doc doc;
	cm_err rc;

	memset(&doc, 0, sizeof(doc));
	rc = st_doc_parse_limit(m, id, id_len, src, len, atomic_load(&ix->nested_limit), &doc, &add,
	                        err);
	st_doc_free(&doc);
	st_mapping_unref(m);
	if (rc || !add)
		return rc;
	/* Merge against the current mapping, which may have moved on since we
	 * parsed; the merge is idempotent for fields another writer added. */
	pthread_mutex_lock(&ix->lock);
	rc = st_mapping_merge(ix->mapping, add, &merged, err);
	if (!rc)
		rc = mapping_install_locked(ix, merged, err);
	pthread_mutex_unlock(&ix->lock);
	st_mapping_unref(add);
	if (rc == CM_EINVAL) /* a dynamic field clashing with a concurrent one */
		rc = CM_EMAPPING;
	return rc;
}

typedef struct prep_run {
	nd_prep *items;
	size_t n;
} prep_run;

static void
prep_run_fn(void *arg)
{
	prep_run *r = arg;
	for (size_t i = 0; i < r->n; i++) {
		nd_prep *p = &r->items[i];
		cm_error_clear(&p->err);
		p->rc = nd_index_prepare_doc(p->ix, p->id, p->id_len, p->src, p->len, &p->err);
	}
}

void
nd_index_prepare_docs(nd_node *n, nd_prep *items, size_t nitems)
{
	size_t nruns = (nitems + ND_PREP_RUN - 1) / ND_PREP_RUN;
	if (nruns <= 1 || !n->index_pool) {
		prep_run r = {items, nitems};
		prep_run_fn(&r);
		return;
	}
	prep_run *runs = cm_calloc(CM_MEM_NODE, nruns, sizeof(prep_run));
	for (size_t k = 0; k < nruns; k++) {
		runs[k].items = items + k * ND_PREP_RUN;
		runs[k].n = k + 1 < nruns ? ND_PREP_RUN : nitems - k * ND_PREP_RUN;
	}
	cm_pool_run_some(n->index_pool, prep_run_fn, runs, sizeof(prep_run), nruns, nruns - 1);
	cm_free(CM_MEM_NODE, runs);
}

cm_err
nd_index_apply(nd_index *ix, int shard, const st_op *ops, size_t n, st_op_result *res)
{
	uint64_t t0 = cm_now_ns(), dt;
	cm_err rc = st_shard_apply(ix->shards[shard], ops, n, res);
	dt = cm_now_ns() - t0;
	for (size_t i = 0; i < n; i++) {
		if (rc || res[i].err) {
			atomic_fetch_add((_Atomic uint64_t *)&ix->stats.index_failed, 1);
			continue;
		}
		if (ops[i].type == ST_OP_DELETE) {
			atomic_fetch_add((_Atomic uint64_t *)&ix->stats.delete_total, 1);
			atomic_fetch_add((_Atomic uint64_t *)&ix->stats.delete_time_ns, dt / n);
		} else {
			atomic_fetch_add((_Atomic uint64_t *)&ix->stats.index_total, 1);
			atomic_fetch_add((_Atomic uint64_t *)&ix->stats.index_time_ns, dt / n);
		}
	}
	atomic_fetch_add(&ix->dirty[shard], 1);
	atomic_fetch_add(&ix->unflushed, 1);
	return rc;
}

size_t
nd_index_segments(nd_index *ix, int s, nd_segment_info **out)
{
	*out = NULL;
	st_shard *sh = s >= 0 && s < nd_index_nshards(ix) ? ix->shards[s] : NULL;
	st_reader *rd = sh ? st_shard_reader(sh) : NULL;
	size_t n = rd ? st_reader_nsegments(rd) : 0;
	if (n)
		*out = cm_calloc(CM_MEM_NODE, n, sizeof(nd_segment_info));
	for (size_t k = 0; k < n; k++) {
		st_segment *seg = st_reader_segment(rd, k);
		uint32_t live = st_reader_live_count(rd, k);
		uint32_t roots = st_segment_max_doc(seg) - st_segment_nested_count(seg);
		(*out)[k] = (nd_segment_info){.generation = st_segment_generation(seg),
		                              .bytes = st_segment_bytes(seg),
		                              .live = live,
		                              .deleted = roots > live ? roots - live : 0,
		                              .format = st_segment_format(seg)};
	}
	if (rd)
		st_reader_release(rd);
	return n;
}

cm_err
nd_index_refresh(nd_index *ix)
{
	cm_err rc = CM_OK, r;
	uint64_t my_no;

	pthread_mutex_lock(&ix->refresh_lock);
	my_no = ++ix->refresh_started;
	pthread_mutex_unlock(&ix->refresh_lock);
	for (int i = 0; i < ix->settings.number_of_shards; i++) {
		uint64_t d = atomic_load(&ix->dirty[i]);
		if ((r = st_shard_refresh(ix->shards[i])) && !rc)
			rc = r;
		else if (!r)
			atomic_fetch_sub(&ix->dirty[i], d);
	}
	ix->last_refresh_ns = cm_now_ns();
	atomic_fetch_add((_Atomic uint64_t *)&ix->stats.refresh_total, 1);
	pthread_mutex_lock(&ix->refresh_lock);
	if (my_no > ix->refresh_done_max)
		ix->refresh_done_max = my_no;
	pthread_cond_broadcast(&ix->refresh_cond);
	pthread_mutex_unlock(&ix->refresh_lock);
	return rc;
}

cm_err
nd_index_wait_refresh(nd_index *ix)
{
	int64_t iv = ix->settings.refresh_interval_ms;
	uint64_t after;
	bool seen = false;
	struct timespec ts;

	/* With scheduled refreshes off (or rare), waiting would hang: refresh. */
	if (iv < 0 || iv > 30000)
		return nd_index_refresh(ix);
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t wait_ms = 2 * iv + 1000;
	ts.tv_sec += wait_ms / 1000;
	ts.tv_nsec += (wait_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&ix->refresh_lock);
	after = ix->refresh_started;
	while (!(seen = ix->refresh_done_max > after))
		if (pthread_cond_timedwait(&ix->refresh_cond, &ix->refresh_lock, &ts) != 0)
			break;
	seen = ix->refresh_done_max > after;
	pthread_mutex_unlock(&ix->refresh_lock);
	return seen ? CM_OK : nd_index_refresh(ix);
}

cm_err
nd_index_flush(nd_index *ix)
{
	cm_err rc = CM_OK, r;
	uint64_t pending = atomic_load(&ix->unflushed);

	ix->last_flush_ns = cm_now_ns();
	for (int i = 0; i < ix->settings.number_of_shards; i++)
		if ((r = st_shard_flush(ix->shards[i])) && !rc)
			rc = r;
	atomic_fetch_add((_Atomic uint64_t *)&ix->stats.flush_total, 1);
	if (!rc)
		atomic_fetch_sub(&ix->unflushed, pending);
	return rc;
}

cm_err
nd_index_force_merge(nd_index *ix, int max_segments)
{
	cm_err rc = CM_OK, r;
	/* Elasticsearch's _forcemerge flushes afterwards by default: the log is
	 * trimmed and shard.mdb compacted, so the index shows its merged size. */
	for (int i = 0; i < ix->settings.number_of_shards; i++) {
		if ((r = st_shard_force_merge(ix->shards[i], max_segments)) && !rc)
			rc = r;
		if (!r && (r = st_shard_flush(ix->shards[i])) && !rc)
			rc = r;
	}
	return rc;
}

void
nd_index_shard_stats(nd_index *ix, st_shard_stats *sum)
{
	memset(sum, 0, sizeof(*sum));
	for (int i = 0; i < ix->settings.number_of_shards; i++) {
		st_shard_stats s;
		st_shard_stats_get(ix->shards[i], &s);
		sum->docs += s.docs;
		sum->deleted_docs += s.deleted_docs;
		sum->segments += s.segments;
		sum->store_bytes += s.store_bytes;
		sum->buffered_docs += s.buffered_docs;
		sum->refreshes += s.refreshes;
		sum->merges += s.merges;
		sum->flushes += s.flushes;
		sum->indexing_buffers += s.indexing_buffers;
		sum->indexing_buffer_bytes += s.indexing_buffer_bytes;
		if (s.max_seq_no != ST_NO_SEQ &&
		    (sum->max_seq_no == 0 || s.max_seq_no > sum->max_seq_no))
			sum->max_seq_no = s.max_seq_no;
		sum->primary_term = s.primary_term;
	}
}

/* ---- refresh timer ---- */

/* Refreshes each index whose interval has passed and whose shards saw
 * writes since the last refresh. */
void
nd_refresh_tick(nd_node *n)
{
	nd_index **list;
	size_t cnt;
	uint64_t now = cm_now_ns();

	nd_index_list(n, &list, &cnt);
	for (size_t i = 0; i < cnt; i++) {
		nd_index *ix = list[i];
		int64_t iv = ix->settings.refresh_interval_ms;
		if (iv >= 0 && now - ix->last_refresh_ns >= (uint64_t)iv * 1000000ull) {
			bool dirty = false;
			for (int s = 0; s < ix->settings.number_of_shards; s++)
				dirty |= atomic_load(&ix->dirty[s]) > 0;
			if (dirty) {
				cm_err rc = nd_index_refresh(ix);
				if (rc)
					cm_warn("node", "scheduled refresh of [%s] failed: %s",
					        ix->name, cm_err_msg(rc));
			} else {
				ix->last_refresh_ns = now;
			}
		}
		/* A flush also refreshes here, so indices with refreshes turned
		 * off are flushed only when asked. */
		if (iv >= 0 && atomic_load(&ix->unflushed) > 0 &&
		    now - ix->last_flush_ns >= ND_FLUSH_INTERVAL_NS) {
			cm_err rc = nd_index_flush(ix);
			if (rc)
				cm_warn("node", "scheduled flush of [%s] failed: %s", ix->name,
				        cm_err_msg(rc));
		}
		nd_index_release(ix);
	}
	cm_free(CM_MEM_NODE, list);
}
