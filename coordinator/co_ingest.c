/* Ingest pipelines: `_ingest/pipeline` definitions kept in the template
 * store (kind "pipeline": DATA/templates.json on a solo node, the cluster
 * state on a cluster, so every node has every pipeline), validated when
 * put, compiled into typed processors, and run on a document's source
 * where the write arrives, before it is routed: the `pipeline` parameter
 * of _bulk and the index APIs, a bulk action's "pipeline", the index's
 * `index.default_pipeline` and then its `index.final_pipeline`.
 *
 * A document under a pipeline is its _source object plus metadata
 * (_index, _id, _routing) and _ingest (timestamp; the on_failure_*
 * fields inside on_failure). Field paths are dotted ("a.b.0.c": objects
 * by key, arrays by index); "_source.x" names x; "{{path}}" in a value
 * is replaced by that field's text (mustache's {{{path}}} too). */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <locale.h>
#include <pcre2.h>
#include <pthread.h>
#include <wctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../common/cm_buf.h"
#include "../common/cm_sys.h"
#include "../search/sr.h"
#include "../storage/st_types.h"
#include "co_grok.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR
#define MAX_DEPTH 32      /* pipeline processors calling pipelines */
#define MAX_PROCESSORS 1024
#define MAX_PATH 1024

typedef enum {
	PR_SET,
	PR_APPEND,
	PR_REMOVE,
	PR_RENAME,
	PR_LOWERCASE,
	PR_UPPERCASE,
	PR_TRIM,
	PR_CONVERT,
	PR_SPLIT,
	PR_JOIN,
	PR_GSUB,
	PR_JSON,
	PR_DATE,
	PR_DISSECT,
	PR_KV,
	PR_DOT_EXPANDER,
	PR_DROP,
	PR_FAIL,
	PR_PIPELINE,
	PR_SCRIPT,
	PR_GROK,
	PR_FOREACH,
} proc_kind;

static const char *const proc_names[] = {
    "set",   "append", "remove",   "rename", "lowercase", "uppercase", "trim", "convert",
    "split", "join",   "gsub",     "json",   "date",      "dissect",   "kv",   "dot_expander",
    "drop",  "fail",   "pipeline", "script", "grok",      "foreach",
};

typedef enum { CV_INTEGER, CV_LONG, CV_FLOAT, CV_DOUBLE, CV_BOOLEAN, CV_STRING, CV_IP, CV_AUTO } cv_type;
static const char *const cv_names[] = {"integer", "long",   "float", "double",
                                       "boolean", "string", "ip",    "auto"};

/* dissect: literal delimiters between keys */
typedef enum { DK_NORMAL, DK_SKIP, DK_APPEND, DK_NAMED_SKIP, DK_REF_KEY, DK_REF_VAL } dk_mod;
typedef struct dis_key {
	char *name;    /* "" for %{} */
	dk_mod mod;
	int order;     /* %{+k/2} */
	bool pad;      /* %{k->}: the delimiter after it may repeat */
	char *delim;   /* the literal after it, "" at the end */
} dis_key;

typedef struct proc proc;
struct proc {
	proc_kind kind;
	char *tag;
	bool ignore_failure, ignore_missing;
	char *field, *target;       /* target NULL = field (date: @timestamp) */
	cJSON *value;               /* set, append (owned) */
	bool override, ignore_empty, allow_dup, add_to_root, preserve_trailing;
	char **fields;              /* remove: every field */
	size_t nfields;
	cv_type conv;
	pcre2_code *re, *re2;       /* split/gsub: pattern; kv: field_split, value_split */
	char *text;                 /* gsub replacement, join separator, fail message,
	                             * pipeline name, kv prefix */
	char **formats;             /* date: the input formats */
	size_t nformats;
	char *tz, *out_format;      /* date: time zone (NULL = UTC), output format */
	dis_key *keys;              /* dissect */
	size_t nkeys;
	char *lead;                 /* dissect: the literal before the first key */
	char *append_sep;
	char **incl, **excl;        /* kv include_keys / exclude_keys */
	size_t nincl, nexcl;
	char *trim_key, *trim_value;
	bool strip_brackets;
	proc *on_failure;
	size_t non_failure;
	ps_script *cond;    /* `if` (NULL: always) */
	char *cond_src;     /* its source, for _simulate's verbose answer */
	cJSON *cond_params; /* owned */
	ps_script *script;  /* script processor */
	cJSON *params;      /* its params (owned) */
	co_grok *grok;
	bool trace_match;
	proc *sub; /* foreach: the one processor */
	size_t nsub;
};

typedef struct pipeline {
	char *name;
	proc *procs;
	size_t nprocs;
	proc *on_failure;
	size_t non_failure;
} pipeline;

struct co_ingest {
	nd_node *node;
	cJSON *defs;      /* the stored pipelines, read once per request */
	pipeline **cache; /* compiled, by name */
	size_t ncache;
	char stamp[40];   /* _ingest.timestamp: the request's start */
};

typedef struct idoc {
	cJSON *src;    /* the _source object */
	cJSON *meta;   /* "_index", "_id", "_routing" (strings) */
	cJSON *ingest; /* "timestamp", on_failure_message, ... */
	bool dropped;
} idoc;

/* ES's error for a pipeline definition that does not parse. */
#define parse_err(err, ...) cm_error_set_type(err, CM_EPARSE, "parse_exception", __VA_ARGS__)

/* ---- compiling ---- */

static void proc_clear(proc *p);

static void
procs_free(proc *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		proc_clear(&v[i]);
	cm_free(MEM, v);
}

static void
strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cm_free(MEM, v[i]);
	cm_free(MEM, v);
}

static void
proc_clear(proc *p)
{
	cm_free(MEM, p->tag);
	cm_free(MEM, p->field);
	cm_free(MEM, p->target);
	cJSON_Delete(p->value);
	strv_free(p->fields, p->nfields);
	if (p->re)
		pcre2_code_free(p->re);
	if (p->re2)
		pcre2_code_free(p->re2);
	cm_free(MEM, p->text);
	strv_free(p->formats, p->nformats);
	cm_free(MEM, p->tz);
	cm_free(MEM, p->out_format);
	for (size_t i = 0; i < p->nkeys; i++) {
		cm_free(MEM, p->keys[i].name);
		cm_free(MEM, p->keys[i].delim);
	}
	cm_free(MEM, p->keys);
	cm_free(MEM, p->lead);
	cm_free(MEM, p->append_sep);
	strv_free(p->incl, p->nincl);
	strv_free(p->excl, p->nexcl);
	cm_free(MEM, p->trim_key);
	cm_free(MEM, p->trim_value);
	procs_free(p->on_failure, p->non_failure);
	ps_free(p->cond);
	cm_free(MEM, p->cond_src);
	cJSON_Delete(p->cond_params);
	ps_free(p->script);
	cJSON_Delete(p->params);
	co_grok_free(p->grok);
	procs_free(p->sub, p->nsub);
	memset(p, 0, sizeof(*p));
}

static void
pipeline_free(pipeline *pl)
{
	if (!pl)
		return;
	cm_free(MEM, pl->name);
	procs_free(pl->procs, pl->nprocs);
	procs_free(pl->on_failure, pl->non_failure);
	cm_free(MEM, pl);
}

/* Reads the option `key` of processor `o`: a string (numbers and booleans
 * are taken as their text, as ES reads its config), or an error. */
static cm_err
opt_str(const cJSON *o, const char *key, bool required, char **out, cm_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	char buf[64];
	*out = NULL;
	if (!v || cJSON_IsNull(v)) {
		if (required)
			return parse_err(err, "[%s] required property is missing", key);
		return CM_OK;
	}
	if (cJSON_IsString(v)) {
		*out = cm_strdup(MEM, v->valuestring);
	} else if (cJSON_IsNumber(v)) {
		snprintf(buf, sizeof(buf), "%.17g", v->valuedouble);
		*out = cm_strdup(MEM, buf);
	} else if (cJSON_IsBool(v)) {
		*out = cm_strdup(MEM, cJSON_IsTrue(v) ? "true" : "false");
	} else {
		return parse_err(err, "[%s] property isn't a string, but of type [object]",
		                 key);
	}
	return CM_OK;
}

static cm_err
opt_bool(const cJSON *o, const char *key, bool dflt, bool *out, cm_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	*out = dflt;
	if (!v || cJSON_IsNull(v))
		return CM_OK;
	if (cJSON_IsBool(v))
		*out = cJSON_IsTrue(v);
	else if (cJSON_IsString(v) && !strcmp(v->valuestring, "true"))
		*out = true;
	else if (cJSON_IsString(v) && !strcmp(v->valuestring, "false"))
		*out = false;
	else
		return parse_err(err, "[%s] property isn't a boolean", key);
	return CM_OK;
}

/* A string or a list of strings. */
static cm_err
opt_strv(const cJSON *o, const char *key, bool required, char ***out, size_t *n, cm_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key), *e;
	*out = NULL;
	*n = 0;
	if (!v || cJSON_IsNull(v)) {
		if (required)
			return parse_err(err, "[%s] required property is missing", key);
		return CM_OK;
	}
	if (cJSON_IsString(v)) {
		*out = cm_malloc(MEM, sizeof(char *));
		(*out)[(*n)++] = cm_strdup(MEM, v->valuestring);
		return CM_OK;
	}
	if (!cJSON_IsArray(v))
		return parse_err(err, "[%s] property isn't a list, but of type [object]",
		                 key);
	*out = cm_calloc(MEM, (size_t)cJSON_GetArraySize(v) + 1, sizeof(char *));
	cJSON_ArrayForEach(e, v)
	{
		if (!cJSON_IsString(e))
			return parse_err(err, "[%s] must be a list of strings", key);
		(*out)[(*n)++] = cm_strdup(MEM, e->valuestring);
	}
	return CM_OK;
}

static cm_err
regex_compile(const char *pat, const char *key, pcre2_code **out, cm_error *err)
{
	int code;
	PCRE2_SIZE off;
	*out = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &code, &off, NULL);
	if (!*out) {
		PCRE2_UCHAR msg[128];
		pcre2_get_error_message(code, msg, sizeof(msg));
		return cm_error_set_type(err, CM_EPARSE, "parse_exception",
		                         "[%s] Invalid regex pattern [%.200s]: %s at offset %zu", key,
		                         pat, (const char *)msg, (size_t)off);
	}
	return CM_OK;
}

static cm_err compile_list(const cJSON *list, const char *what, proc **out, size_t *n,
                           int depth, cm_error *err);

/* Options every processor takes, and which ones a kind reads; anything
 * else is ES's "processor [x] doesn't support one or more provided
 * configuration parameters [..]". */
static const char *const common_opts[] = {"tag", "description", "ignore_failure", "on_failure",
                                          "if", NULL};

static bool
opt_known(const char *k, const char *const *kind_opts)
{
	for (int i = 0; common_opts[i]; i++)
		if (!strcmp(common_opts[i], k))
			return true;
	for (int i = 0; kind_opts[i]; i++)
		if (!strcmp(kind_opts[i], k))
			return true;
	return false;
}

static const char *const *
kind_opts(proc_kind k)
{
	static const char *const field_t[] = {"field", "target_field", "ignore_missing", NULL};
	static const char *const set_o[] = {"field", "value", "override", "ignore_empty_value", NULL};
	static const char *const append_o[] = {"field", "value", "allow_duplicates", NULL};
	static const char *const remove_o[] = {"field", "ignore_missing", NULL};
	static const char *const convert_o[] = {"field", "target_field", "ignore_missing", "type",
	                                        NULL};
	static const char *const split_o[] = {"field", "target_field", "ignore_missing",
	                                      "separator", "preserve_trailing", NULL};
	static const char *const join_o[] = {"field", "target_field", "separator", NULL};
	static const char *const gsub_o[] = {"field",   "target_field", "ignore_missing",
	                                     "pattern", "replacement",  NULL};
	static const char *const json_o[] = {"field", "target_field", "add_to_root", NULL};
	static const char *const date_o[] = {"field",    "target_field", "formats",
	                                     "timezone", "locale",       "output_format", NULL};
	static const char *const dissect_o[] = {"field", "pattern", "append_separator",
	                                        "ignore_missing", NULL};
	static const char *const kv_o[] = {"field",       "field_split",   "value_split",
	                                   "target_field", "include_keys", "exclude_keys",
	                                   "ignore_missing", "prefix",     "trim_key",
	                                   "trim_value",  "strip_brackets", NULL};
	static const char *const dot_o[] = {"field", "path", NULL};
	static const char *const none_o[] = {NULL};
	static const char *const fail_o[] = {"message", NULL};
	static const char *const pipe_o[] = {"name", NULL};
	static const char *const script_o[] = {"source", "id", "lang", "params", NULL};
	static const char *const grok_o[] = {"field",
	                                     "patterns",
	                                     "pattern_definitions",
	                                     "ignore_missing",
	                                     "trace_match",
	                                     "ecs_compatibility",
	                                     NULL};
	static const char *const foreach_o[] = {"field", "processor", "ignore_missing", NULL};
	switch (k) {
	case PR_SET:
		return set_o;
	case PR_APPEND:
		return append_o;
	case PR_REMOVE:
		return remove_o;
	case PR_RENAME:
	case PR_LOWERCASE:
	case PR_UPPERCASE:
	case PR_TRIM:
		return field_t;
	case PR_CONVERT:
		return convert_o;
	case PR_SPLIT:
		return split_o;
	case PR_JOIN:
		return join_o;
	case PR_GSUB:
		return gsub_o;
	case PR_JSON:
		return json_o;
	case PR_DATE:
		return date_o;
	case PR_DISSECT:
		return dissect_o;
	case PR_KV:
		return kv_o;
	case PR_DOT_EXPANDER:
		return dot_o;
	case PR_DROP:
		return none_o;
	case PR_FAIL:
		return fail_o;
	case PR_PIPELINE:
		return pipe_o;
	case PR_SCRIPT:
		return script_o;
	case PR_GROK:
		return grok_o;
	case PR_FOREACH:
		return foreach_o;
	}
	return none_o;
}

/* `if`: a Painless condition, a string or a script object, compiled now so
 * that one that does not compile refuses the pipeline. */
static cm_err
compile_cond(const cJSON *o, proc *p, cm_error *err)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "if"), *params;
	if (!c || cJSON_IsNull(c))
		return CM_OK;
	cm_err rc = ps_from_json(c, &p->cond, &params, err);
	if (rc)
		return rc;
	const cJSON *src = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "source") : c;
	if (!cJSON_IsString(src))
		src = cJSON_GetObjectItemCaseSensitive(c, "inline");
	p->cond_src = cm_strdup(MEM, cJSON_IsString(src) ? src->valuestring : "");
	if (params)
		p->cond_params = cJSON_Duplicate(params, true);
	return CM_OK;
}

/* script: inline painless only (stored scripts hold mustache only). */
static cm_err
compile_script(const cJSON *o, proc *p, cm_error *err)
{
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(o, "source");
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
	const cJSON *lang = cJSON_GetObjectItemCaseSensitive(o, "lang");
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "params");
	if (src && id)
		return parse_err(err, "%s", "Only one of [id] or [source] may be configured");
	if (id)
		return parse_err(
		    err, "%s",
		    "[id] stored scripts are not supported by Shoal's script processor "
		    "(only mustache search templates can be stored): use [source]");
	if (!src)
		return parse_err(err, "%s",
		                 "Need [source] for an inline script or [id] for a stored script");
	if (!cJSON_IsString(src))
		return parse_err(err, "[%s] property isn't a string, but of type [object]",
		                 "source");
	if (lang && !(cJSON_IsString(lang) && !strcmp(lang->valuestring, "painless")))
		return cm_error_set(err, CM_EINVAL,
		                    "script_lang not supported [%.40s]: Shoal runs painless only",
		                    cJSON_IsString(lang) ? lang->valuestring : "?");
	if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
		return parse_err(err, "[%s] property isn't a map, but of type [list]", "params");
	if (cJSON_IsObject(params))
		p->params = cJSON_Duplicate(params, true);
	return ps_compile(src->valuestring, strlen(src->valuestring), &p->script, NULL, err);
}

static cm_err
compile_grok(const cJSON *o, proc *p, cm_error *err)
{
	char **pats, *ecs;
	size_t n;
	cm_err rc;
	const cJSON *defs = cJSON_GetObjectItemCaseSensitive(o, "pattern_definitions"), *e;
	if ((rc = opt_bool(o, "trace_match", false, &p->trace_match, err)) ||
	    (rc = opt_str(o, "ecs_compatibility", false, &ecs, err)))
		return rc;
	if (ecs && strcmp(ecs, "disabled")) {
		rc =
		    parse_err(err,
		              "[ecs_compatibility] [%.40s] is not supported by Shoal: its patterns "
		              "are the legacy (\"disabled\") ones",
		              ecs);
		cm_free(MEM, ecs);
		return rc;
	}
	cm_free(MEM, ecs);
	if (defs && !cJSON_IsNull(defs)) {
		if (!cJSON_IsObject(defs))
			return parse_err(err, "[%s] property isn't a map, but of type [list]",
			                 "pattern_definitions");
		cJSON_ArrayForEach(e, defs)
		{
			if (!cJSON_IsString(e))
				return parse_err(err, "[%s] pattern [%.100s] must be a string",
				                 "pattern_definitions", e->string);
		}
	}
	rc = opt_strv(o, "patterns", true, &pats, &n, err);
	if (rc)
		;
	else if (!n)
		rc = parse_err(err, "[%s] List of patterns must not be empty", "patterns");
	else
		rc = co_grok_compile(pats, n, cJSON_IsObject(defs) ? defs : NULL, &p->grok, err);
	strv_free(pats, n);
	return rc;
}

/* "%{a} %{+a} - %{?x}:%{b->} %{}": keys and the literals between them. */
static cm_err
dissect_compile(proc *p, const char *pat, cm_error *err)
{
	const char *s = pat, *open;
	size_t cap = 0;
	cm_buf lit;
	cm_buf_init(&lit, MEM);
	while ((open = strstr(s, "%{"))) {
		const char *close = strchr(open + 2, '}');
		if (!close)
			break;
		cm_buf_put(&lit, s, (size_t)(open - s));
		cm_buf_put_u8(&lit, 0);
		if (p->nkeys == 0) {
			p->lead = cm_strdup(MEM, (const char *)lit.data);
		} else {
			p->keys[p->nkeys - 1].delim = cm_strdup(MEM, (const char *)lit.data);
		}
		cm_buf_reset(&lit);
		if (p->nkeys == cap) {
			cap = cap ? cap * 2 : 8;
			p->keys = cm_realloc(MEM, p->keys, cap * sizeof(dis_key));
		}
		dis_key *k = &p->keys[p->nkeys++];
		memset(k, 0, sizeof(*k));
		const char *a = open + 2, *b = close;
		if (b - a >= 2 && !strncmp(b - 2, "->", 2)) {
			k->pad = true;
			b -= 2;
		}
		if (a < b && (*a == '+' || *a == '?' || *a == '*' || *a == '&')) {
			k->mod = *a == '+' ? DK_APPEND : *a == '?' ? DK_NAMED_SKIP : *a == '*' ? DK_REF_KEY
			                                                                        : DK_REF_VAL;
			a++;
		}
		const char *slash = k->mod == DK_APPEND ? memchr(a, '/', (size_t)(b - a)) : NULL;
		if (slash) {
			k->order = atoi(slash + 1);
			k->name = cm_strndup(MEM, a, (size_t)(slash - a));
		} else {
			k->name = cm_strndup(MEM, a, (size_t)(b - a));
		}
		if (!k->name[0] && k->mod == DK_NORMAL)
			k->mod = DK_SKIP;
		s = close + 1;
	}
	cm_buf_put(&lit, s, strlen(s));
	cm_buf_put_u8(&lit, 0);
	if (p->nkeys == 0) {
		cm_buf_free(&lit);
		return cm_error_set_type(err, CM_EPARSE, "dissect_exception",
		                         "Unable to parse pattern: %.200s", pat);
	}
	p->keys[p->nkeys - 1].delim = cm_strdup(MEM, (const char *)lit.data);
	cm_buf_free(&lit);
	for (size_t i = 0; i + 1 < p->nkeys; i++)
		if (!p->keys[i].delim[0])
			return cm_error_set_type(err, CM_EPARSE, "dissect_exception",
			                         "Unable to parse pattern: %.200s (two keys without a "
			                         "delimiter between them)",
			                         pat);
	size_t refk = 0, refv = 0;
	for (size_t i = 0; i < p->nkeys; i++) {
		refk += p->keys[i].mod == DK_REF_KEY;
		refv += p->keys[i].mod == DK_REF_VAL;
	}
	if (refk != refv)
		return cm_error_set_type(err, CM_EPARSE, "dissect_exception",
		                         "Unable to parse pattern: %.200s (every %%{*key} needs its "
		                         "%%{&key})",
		                         pat);
	return CM_OK;
}

static cm_err
compile_proc(const char *type, const cJSON *o, proc *p, int depth, cm_error *err)
{
	cm_err rc;
	int k = -1;
	for (size_t i = 0; i < sizeof(proc_names) / sizeof(proc_names[0]); i++)
		if (!strcmp(proc_names[i], type))
			k = (int)i;
	memset(p, 0, sizeof(*p));
	if (k < 0) {
		if (!strcmp(type, "enrich") || !strcmp(type, "geoip") ||
		    !strcmp(type, "user_agent") || !strcmp(type, "inference") ||
		    !strcmp(type, "attachment"))
			return cm_error_set_type(err, CM_EPARSE, "parse_exception",
			                         "processor [%s] is not supported by Shoal (docs/api.md, "
			                         "\"Ingest pipelines\")",
			                         type);
		return cm_error_set_type(err, CM_EPARSE, "parse_exception",
		                         "No processor type exists with name [%.100s]", type);
	}
	p->kind = (proc_kind)k;
	if (!cJSON_IsObject(o))
		return cm_error_set_type(err, CM_EPARSE, "parse_exception",
		                         "[%s] processor config must be an object", type);
	const cJSON *c;
	cJSON_ArrayForEach(c, o)
	{
		if (!opt_known(c->string, kind_opts(p->kind)))
			return cm_error_set_type(err, CM_EPARSE, "parse_exception",
			                         "processor [%s] doesn't support one or more provided "
			                         "configuration parameters [%.100s]",
			                         type, c->string);
	}
	if ((rc = compile_cond(o, p, err)))
		return rc;
	if ((rc = opt_str(o, "tag", false, &p->tag, err)) ||
	    (rc = opt_bool(o, "ignore_failure", false, &p->ignore_failure, err)))
		return rc;
	const cJSON *of = cJSON_GetObjectItemCaseSensitive(o, "on_failure");
	if (of && (rc = compile_list(of, "on_failure", &p->on_failure, &p->non_failure, depth + 1,
	                             err)))
		return rc;
	bool needs_field = p->kind != PR_DROP && p->kind != PR_FAIL && p->kind != PR_PIPELINE &&
	                   p->kind != PR_SCRIPT;
	if (p->kind == PR_REMOVE) {
		if ((rc = opt_strv(o, "field", true, &p->fields, &p->nfields, err)))
			return rc;
	} else if (needs_field && (rc = opt_str(o, "field", true, &p->field, err))) {
		return rc;
	}
	if ((rc = opt_bool(o, "ignore_missing", false, &p->ignore_missing, err)))
		return rc;
	switch (p->kind) {
	case PR_SET:
	case PR_APPEND: {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "value");
		if (!v)
			return parse_err(err, "[%s] required property is missing", "value");
		p->value = cJSON_Duplicate(v, true);
		if ((rc = opt_bool(o, "override", true, &p->override, err)) ||
		    (rc = opt_bool(o, "ignore_empty_value", false, &p->ignore_empty, err)) ||
		    (rc = opt_bool(o, "allow_duplicates", true, &p->allow_dup, err)))
			return rc;
		break;
	}
	case PR_RENAME:
		if ((rc = opt_str(o, "target_field", true, &p->target, err)))
			return rc;
		break;
	case PR_LOWERCASE:
	case PR_UPPERCASE:
	case PR_TRIM:
	case PR_JOIN:
		if ((rc = opt_str(o, "target_field", false, &p->target, err)))
			return rc;
		if (p->kind == PR_JOIN && (rc = opt_str(o, "separator", true, &p->text, err)))
			return rc;
		break;
	case PR_CONVERT: {
		char *t;
		if ((rc = opt_str(o, "target_field", false, &p->target, err)) ||
		    (rc = opt_str(o, "type", true, &t, err)))
			return rc;
		int found = -1;
		for (int i = 0; i < 8; i++)
			if (!strcasecmp(cv_names[i], t))
				found = i;
		if (found < 0) {
			cm_error_set_type(err, CM_EPARSE, "parse_exception",
			                  "[type] type [%.60s] not supported, cannot convert field.", t);
			cm_free(MEM, t);
			return CM_EPARSE;
		}
		cm_free(MEM, t);
		p->conv = (cv_type)found;
		break;
	}
	case PR_SPLIT:
	case PR_GSUB: {
		char *pat;
		if ((rc = opt_str(o, "target_field", false, &p->target, err)) ||
		    (rc = opt_str(o, p->kind == PR_SPLIT ? "separator" : "pattern", true, &pat, err)))
			return rc;
		rc = regex_compile(pat, p->kind == PR_SPLIT ? "separator" : "pattern", &p->re, err);
		cm_free(MEM, pat);
		if (rc)
			return rc;
		if (p->kind == PR_GSUB && (rc = opt_str(o, "replacement", true, &p->text, err)))
			return rc;
		if ((rc = opt_bool(o, "preserve_trailing", false, &p->preserve_trailing, err)))
			return rc;
		break;
	}
	case PR_JSON:
		if ((rc = opt_str(o, "target_field", false, &p->target, err)) ||
		    (rc = opt_bool(o, "add_to_root", false, &p->add_to_root, err)))
			return rc;
		if (p->add_to_root && p->target)
			return parse_err(err, "[%s] Cannot set a target field while also setting "
			                 "`add_to_root` to true",
			                 "target_field");
		break;
	case PR_DATE: {
		char *loc = NULL;
		if ((rc = opt_str(o, "target_field", false, &p->target, err)) ||
		    (rc = opt_strv(o, "formats", true, &p->formats, &p->nformats, err)))
			return rc;
		if (!p->target)
			p->target = cm_strdup(MEM, "@timestamp");
		for (size_t i = 0; i < p->nformats; i++) {
			char *f = p->formats[i];
			const char *map = !strcmp(f, "ISO8601")    ? "date_optional_time"
			                  : !strcmp(f, "UNIX")     ? "epoch_second"
			                  : !strcmp(f, "UNIX_MS")  ? "epoch_millis"
			                                           : NULL;
			if (!strcmp(f, "TAI64N"))
				return parse_err(err, "[formats] format [%s] is not supported by Shoal", f);
			if (map) {
				p->formats[i] = cm_strdup(MEM, map);
				cm_free(MEM, f);
			} else if (!st_date_format_valid(f)) {
				return cm_error_set_type(err, CM_EPARSE, "parse_exception",
				                         "[formats] Invalid format: [%.100s]", f);
			}
		}
		if ((rc = opt_str(o, "timezone", false, &p->tz, err)) ||
		    (rc = opt_str(o, "output_format", false, &p->out_format, err)) ||
		    (rc = opt_str(o, "locale", false, &loc, err)))
			return rc;
		cm_free(MEM, loc);
		if (p->out_format && !st_date_format_valid(p->out_format))
			return parse_err(err, "[output_format] Invalid format: [%.100s]", p->out_format);
		if (p->tz && !strstr(p->tz, "{{")) {
			char probe[64];
			cm_error e;
			cm_error_clear(&e);
			if (sr_date_format(0, NULL, p->tz, probe, sizeof(probe), &e))
				return parse_err(err, "[timezone] %s", e.reason);
		}
		break;
	}
	case PR_DISSECT: {
		char *pat;
		if ((rc = opt_str(o, "pattern", true, &pat, err)))
			return rc;
		rc = dissect_compile(p, pat, err);
		cm_free(MEM, pat);
		if (rc || (rc = opt_str(o, "append_separator", false, &p->append_sep, err)))
			return rc;
		if (!p->append_sep)
			p->append_sep = cm_strdup(MEM, "");
		break;
	}
	case PR_KV: {
		char *fs, *vs;
		if ((rc = opt_str(o, "field_split", true, &fs, err)))
			return rc;
		if ((rc = opt_str(o, "value_split", true, &vs, err))) {
			cm_free(MEM, fs);
			return rc;
		}
		rc = regex_compile(fs, "field_split", &p->re, err);
		if (!rc)
			rc = regex_compile(vs, "value_split", &p->re2, err);
		cm_free(MEM, fs);
		cm_free(MEM, vs);
		if (rc || (rc = opt_str(o, "target_field", false, &p->target, err)) ||
		    (rc = opt_strv(o, "include_keys", false, &p->incl, &p->nincl, err)) ||
		    (rc = opt_strv(o, "exclude_keys", false, &p->excl, &p->nexcl, err)) ||
		    (rc = opt_str(o, "prefix", false, &p->text, err)) ||
		    (rc = opt_str(o, "trim_key", false, &p->trim_key, err)) ||
		    (rc = opt_str(o, "trim_value", false, &p->trim_value, err)) ||
		    (rc = opt_bool(o, "strip_brackets", false, &p->strip_brackets, err)))
			return rc;
		break;
	}
	case PR_DOT_EXPANDER:
		if ((rc = opt_str(o, "path", false, &p->target, err)))
			return rc;
		if (!strchr(p->field, '.') && strcmp(p->field, "*"))
			return parse_err(err, "[%s] field does not contain a dot", "field");
		break;
	case PR_FAIL:
		if ((rc = opt_str(o, "message", true, &p->text, err)))
			return rc;
		break;
	case PR_PIPELINE:
		if ((rc = opt_str(o, "name", true, &p->text, err)))
			return rc;
		break;
	case PR_SCRIPT:
		return compile_script(o, p, err);
	case PR_GROK:
		return compile_grok(o, p, err);
	case PR_FOREACH: {
		const cJSON *sub = cJSON_GetObjectItemCaseSensitive(o, "processor");
		if (!sub)
			return parse_err(err, "[%s] required property is missing", "processor");
		if (!cJSON_IsObject(sub) || cJSON_GetArraySize(sub) != 1)
			return parse_err(err, "[%s] Must specify exactly one processor type",
			                 "processor");
		if (depth + 1 > MAX_DEPTH)
			return parse_err(err, "[%s] nested too deeply", "processor");
		p->sub = cm_calloc(MEM, 1, sizeof(proc));
		p->nsub = 1;
		return compile_proc(sub->child->string, sub->child, p->sub, depth + 1, err);
	}
	case PR_REMOVE:
	case PR_DROP:
		break;
	}
	return CM_OK;
}

/* [{"type": {config}}, ...] */
static cm_err
compile_list(const cJSON *list, const char *what, proc **out, size_t *n, int depth, cm_error *err)
{
	const cJSON *e;
	*out = NULL;
	*n = 0;
	if (depth > MAX_DEPTH)
		return parse_err(err, "[%s] nested too deeply", what);
	if (!cJSON_IsArray(list))
		return parse_err(err, "[%s] property isn't a list, but of type [object]",
		                 what);
	int cnt = cJSON_GetArraySize(list);
	if (cnt > MAX_PROCESSORS)
		return parse_err(err, "[%s] has too many processors", what);
	*out = cm_calloc(MEM, (size_t)cnt + 1, sizeof(proc));
	cJSON_ArrayForEach(e, list)
	{
		if (!cJSON_IsObject(e) || cJSON_GetArraySize(e) != 1)
			return parse_err(err, "[%s] each processor must be an object with one processor type",
			                 what);
		cm_err rc = compile_proc(e->child->string, e->child, &(*out)[*n], depth, err);
		(*n)++;
		if (rc)
			return rc;
	}
	return CM_OK;
}

static cm_err
compile_pipeline(const char *name, const cJSON *def, pipeline **out, cm_error *err)
{
	pipeline *pl = cm_calloc(MEM, 1, sizeof(*pl));
	cm_err rc;
	const cJSON *c;
	*out = NULL;
	pl->name = cm_strdup(MEM, name);
	if (!cJSON_IsObject(def)) {
		rc = cm_error_set_type(err, CM_EPARSE, "parse_exception",
		                       "a pipeline must be an object");
		goto fail;
	}
	cJSON_ArrayForEach(c, def)
	{
		if (strcmp(c->string, "description") && strcmp(c->string, "processors") &&
		    strcmp(c->string, "on_failure") && strcmp(c->string, "version") &&
		    strcmp(c->string, "_meta")) {
			rc = cm_error_set_type(err, CM_EPARSE, "parse_exception",
			                       "pipeline [%s] doesn't support one or more provided "
			                       "configuration parameters [%.100s]",
			                       name, c->string);
			goto fail;
		}
	}
	const cJSON *procs = cJSON_GetObjectItemCaseSensitive(def, "processors");
	if (!procs) {
		rc = parse_err(err, "[%s] required property is missing", "processors");
		goto fail;
	}
	if ((rc = compile_list(procs, "processors", &pl->procs, &pl->nprocs, 0, err)))
		goto fail;
	const cJSON *of = cJSON_GetObjectItemCaseSensitive(def, "on_failure");
	if (of) {
		if ((rc = compile_list(of, "on_failure", &pl->on_failure, &pl->non_failure, 0, err)))
			goto fail;
		if (!pl->non_failure) {
			rc = parse_err(err, "%s",
			               "pipeline [on_failure] processors cannot be empty");
			goto fail;
		}
	}
	*out = pl;
	return CM_OK;
fail:
	pipeline_free(pl);
	return rc;
}

/* ---- the document ---- */

static void value_text(const cJSON *v, cm_buf *out);

static const char *
java_type(const cJSON *v)
{
	if (cJSON_IsString(v))
		return "java.lang.String";
	if (cJSON_IsBool(v))
		return "java.lang.Boolean";
	if (cJSON_IsNumber(v))
		return v->valuedouble == (double)(int32_t)v->valuedouble ? "java.lang.Integer"
		       : v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9.2e18
		           ? "java.lang.Long"
		           : "java.lang.Double";
	if (cJSON_IsArray(v))
		return "java.util.ArrayList";
	if (cJSON_IsObject(v))
		return "java.util.HashMap";
	return "null";
}

/* The container a path starts in, and the path within it. */
static cJSON *
path_root(idoc *d, const char **path)
{
	const char *p = *path;
	if (!strncmp(p, "_source.", 8)) {
		*path = p + 8;
		return d->src;
	}
	if (!strncmp(p, "_ingest.", 8)) {
		*path = p + 8;
		return d->ingest;
	}
	if (!strcmp(p, "_index") || !strcmp(p, "_id") || !strcmp(p, "_routing"))
		return d->meta;
	return d->src;
}

static cJSON *
child_of(cJSON *c, const char *seg)
{
	if (cJSON_IsObject(c))
		return cJSON_GetObjectItemCaseSensitive(c, seg);
	if (cJSON_IsArray(c)) {
		char *end;
		errno = 0;
		long i = strtol(seg, &end, 10);
		if (*seg && !*end && !errno && i >= 0 && i < cJSON_GetArraySize(c))
			return cJSON_GetArrayItem(c, (int)i);
	}
	return NULL;
}

/* Next segment of a dotted path into seg; false at the end. */
static bool
next_seg(const char **p, char *seg)
{
	if (!**p)
		return false;
	const char *dot = strchr(*p, '.');
	size_t n = dot ? (size_t)(dot - *p) : strlen(*p);
	if (n >= MAX_PATH)
		n = MAX_PATH - 1;
	memcpy(seg, *p, n);
	seg[n] = 0;
	*p += n + (dot ? 1 : 0);
	return true;
}

/* The value at path, or NULL (err, when given, says which part was not
 * there, as ES does). */
static cJSON *
doc_get(idoc *d, const char *path, cm_error *err)
{
	const char *p = path;
	char seg[MAX_PATH];
	cJSON *c = path_root(d, &p);
	while (next_seg(&p, seg)) {
		cJSON *n = child_of(c, seg);
		if (!n) {
			if (err)
				cm_error_set(err, CM_EINVAL, "field [%.200s] not present as part of path [%.300s]",
				             seg, path);
			return NULL;
		}
		c = n;
	}
	return c;
}

static cm_err
parent_type_err(cJSON *v, const char *seg, const cJSON *parent, const char *path, cm_error *err)
{
	cJSON_Delete(v);
	return cm_error_set(err, CM_EINVAL,
	                    "cannot set [%.100s] with parent object of type [%s] as part of path "
	                    "[%.300s]",
	                    seg, java_type(parent), path);
}

/* Moves v's elements (or v itself) to the end of the array arr; takes v. */
static void
append_values(cJSON *arr, cJSON *v)
{
	if (!cJSON_IsArray(v)) {
		cJSON_AddItemToArray(arr, v);
		return;
	}
	cJSON *e;
	while ((e = cJSON_DetachItemFromArray(v, 0)))
		cJSON_AddItemToArray(arr, e);
	cJSON_Delete(v);
}

/* Sets (or, with append, appends to) the value at path, creating the
 * objects on the way; takes v. The metadata fields hold strings. */
static cm_err
doc_set(idoc *d, const char *path, cJSON *v, bool append, cm_error *err)
{
	const char *p = path;
	char seg[MAX_PATH];
	cJSON *c = path_root(d, &p);
	if (c == d->meta && !cJSON_IsString(v) && !cJSON_IsNull(v)) {
		cm_buf t;
		cm_buf_init(&t, MEM);
		value_text(v, &t);
		cm_buf_put_u8(&t, 0);
		cJSON_Delete(v);
		v = cJSON_CreateString((const char *)t.data);
		cm_buf_free(&t);
	}
	if (!next_seg(&p, seg)) {
		cJSON_Delete(v);
		return cm_error_set(err, CM_EINVAL, "path cannot be null nor empty");
	}
	while (*p) { /* the parents */
		cJSON *n = child_of(c, seg);
		if (!n) {
			if (!cJSON_IsObject(c))
				return parent_type_err(v, seg, c, path, err);
			n = cJSON_AddObjectToObject(c, seg);
		}
		c = n;
		next_seg(&p, seg);
	}
	cJSON *cur = child_of(c, seg);
	if (append) {
		if (cJSON_IsArray(cur)) {
			append_values(cur, v);
			return CM_OK;
		}
		cJSON *arr = cJSON_CreateArray();
		if (cur)
			cJSON_AddItemToArray(arr, cJSON_Duplicate(cur, true));
		append_values(arr, v);
		v = arr;
	}
	if (cJSON_IsObject(c)) {
		if (cur)
			cJSON_ReplaceItemInObjectCaseSensitive(c, seg, v);
		else
			cJSON_AddItemToObject(c, seg, v);
		return CM_OK;
	}
	if (cJSON_IsArray(c) && cur) {
		cJSON_ReplaceItemInArray(c, atoi(seg), v);
		return CM_OK;
	}
	if (cJSON_IsArray(c)) {
		cJSON_Delete(v);
		return cm_error_set(err, CM_EINVAL,
		                    "[%.100s] is not an integer, cannot be used as an index as part of "
		                    "path [%.300s]",
		                    seg, path);
	}
	return parent_type_err(v, seg, c, path, err);
}

static cm_err
doc_remove(idoc *d, const char *path, cm_error *err)
{
	const char *p = path;
	char seg[MAX_PATH];
	cJSON *c = path_root(d, &p);
	while (next_seg(&p, seg)) {
		if (!*p) {
			if (cJSON_IsObject(c) && cJSON_GetObjectItemCaseSensitive(c, seg)) {
				cJSON_DeleteItemFromObjectCaseSensitive(c, seg);
				return CM_OK;
			}
			if (cJSON_IsArray(c) && child_of(c, seg)) {
				cJSON_DeleteItemFromArray(c, atoi(seg));
				return CM_OK;
			}
			break;
		}
		if (!(c = child_of(c, seg)))
			break;
	}
	return cm_error_set(err, CM_EINVAL, "field [%.200s] not present as part of path [%.300s]", seg,
	                    path);
}

/* A value's text as a template or a conversion sees it. */
static void
value_text(const cJSON *v, cm_buf *out)
{
	char buf[64];
	if (cJSON_IsString(v)) {
		cm_buf_put(out, v->valuestring, strlen(v->valuestring));
	} else if (cJSON_IsNumber(v)) {
		double x = v->valuedouble;
		if (x == floor(x) && fabs(x) < 9e15)
			snprintf(buf, sizeof(buf), "%lld", (long long)x);
		else
			snprintf(buf, sizeof(buf), "%.17g", x);
		cm_buf_put(out, buf, strlen(buf));
	} else if (cJSON_IsBool(v)) {
		cm_buf_put(out, cJSON_IsTrue(v) ? "true" : "false", cJSON_IsTrue(v) ? 4 : 5);
	} else if (v && !cJSON_IsNull(v)) {
		char *t = cJSON_PrintUnformatted(v);
		if (t)
			cm_buf_put(out, t, strlen(t));
		cJSON_free(t);
	}
}

/* Mustache's {{path}} / {{{path}}}: the field's text, "" when missing. */
static char *
render(idoc *d, const char *tpl)
{
	cm_buf out;
	const char *s = tpl, *o;
	cm_buf_init(&out, MEM);
	while ((o = strstr(s, "{{"))) {
		bool triple = o[2] == '{';
		const char *a = o + (triple ? 3 : 2);
		const char *c = strstr(a, triple ? "}}}" : "}}");
		if (!c)
			break;
		cm_buf_put(&out, s, (size_t)(o - s));
		while (a < c && isspace((unsigned char)*a))
			a++;
		const char *b = c;
		while (b > a && isspace((unsigned char)b[-1]))
			b--;
		char key[MAX_PATH];
		size_t n = (size_t)(b - a) < sizeof(key) - 1 ? (size_t)(b - a) : sizeof(key) - 1;
		memcpy(key, a, n);
		key[n] = 0;
		value_text(doc_get(d, key, NULL), &out);
		s = c + (triple ? 3 : 2);
	}
	cm_buf_put(&out, s, strlen(s));
	cm_buf_put_u8(&out, 0);
	return (char *)out.data;
}

/* A processor's configured value with its strings rendered; new. */
static cJSON *
render_value(idoc *d, const cJSON *v)
{
	if (cJSON_IsString(v)) {
		if (!strstr(v->valuestring, "{{"))
			return cJSON_CreateString(v->valuestring);
		char *t = render(d, v->valuestring);
		cJSON *r = cJSON_CreateString(t);
		cm_free(MEM, t);
		return r;
	}
	if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
		cJSON *r = cJSON_IsArray(v) ? cJSON_CreateArray() : cJSON_CreateObject(), *e;
		cJSON_ArrayForEach(e, v)
		{
			cJSON *x = render_value(d, e);
			if (cJSON_IsArray(v))
				cJSON_AddItemToArray(r, x);
			else
				cJSON_AddItemToObject(r, e->string, x);
		}
		return r;
	}
	return cJSON_Duplicate(v, true);
}

/* ---- processors ---- */

typedef struct run_ctx {
	co_ingest *g;
	const char *stack[MAX_DEPTH + 1]; /* the pipelines being run, outermost first */
	int depth;
} run_ctx;

static cm_err run_pipeline(run_ctx *rx, const char *name, idoc *d, cm_error *err);

/* The processor's input field: NULL with CM_OK when it is missing or null
 * and ignore_missing is set (the processor then does nothing). */
static cm_err
input(const proc *p, idoc *d, cJSON **out, cm_error *err)
{
	cm_error miss;
	cm_error_clear(&miss);
	*out = doc_get(d, p->field, &miss);
	if (*out && !cJSON_IsNull(*out))
		return CM_OK;
	*out = NULL;
	if (p->ignore_missing)
		return CM_OK;
	if (!cJSON_IsNull(doc_get(d, p->field, NULL))) {
		*err = miss;
		return CM_EINVAL;
	}
	return cm_error_set(err, CM_EINVAL, "field [%.200s] is null, cannot process it.", p->field);
}

static pthread_once_t case_once = PTHREAD_ONCE_INIT;
static locale_t case_loc; /* C.UTF-8, for towlower_l / towupper_l */

static void
case_init(void)
{
	case_loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

/* Lower- or upper-cases UTF-8 text code point by code point (as Java's
 * toLowerCase(Locale.ROOT) does for all but its few context rules);
 * invalid bytes stay. New string. */
static char *
map_case(const char *s, bool upper)
{
	pthread_once(&case_once, case_init);
	size_t n = strlen(s);
	char *out = cm_malloc(MEM, n * 2 + 5), *o = out;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		uint32_t cp = c;
		size_t k = 1;
		if (c >= 0xC0 && c < 0xF8) {
			k = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
			cp = c & (0x7F >> k);
			for (size_t j = 1; j < k; j++) {
				if (i + j >= n || ((unsigned char)s[i + j] & 0xC0) != 0x80) {
					k = 0;
					break;
				}
				cp = (cp << 6) | ((unsigned char)s[i + j] & 0x3F);
			}
		} else if (c >= 0x80) {
			k = 0;
		}
		if (!k) { /* invalid: copied */
			*o++ = (char)c;
			i++;
			continue;
		}
		uint32_t m = cp;
		if (cp < 0x80)
			m = (uint32_t)(upper ? toupper((int)cp) : tolower((int)cp));
		else if (case_loc)
			m = (uint32_t)(upper ? towupper_l((wint_t)cp, case_loc)
			                     : towlower_l((wint_t)cp, case_loc));
		if (m < 0x80) {
			*o++ = (char)m;
		} else if (m < 0x800) {
			*o++ = (char)(0xC0 | (m >> 6));
			*o++ = (char)(0x80 | (m & 0x3F));
		} else if (m < 0x10000) {
			*o++ = (char)(0xE0 | (m >> 12));
			*o++ = (char)(0x80 | ((m >> 6) & 0x3F));
			*o++ = (char)(0x80 | (m & 0x3F));
		} else {
			*o++ = (char)(0xF0 | (m >> 18));
			*o++ = (char)(0x80 | ((m >> 12) & 0x3F));
			*o++ = (char)(0x80 | ((m >> 6) & 0x3F));
			*o++ = (char)(0x80 | (m & 0x3F));
		}
		i += k;
	}
	*o = 0;
	return out;
}

static char *
trim_ws(const char *s)
{
	while (*s && isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	return cm_strndup(MEM, s, n);
}

typedef cJSON *(*value_fn)(const proc *p, const cJSON *v, cm_error *err);

/* fn on v, or on each element of the list v (a new list); NULL when fn
 * failed on one (err says why). */
static cJSON *
map_values(const proc *p, const cJSON *v, value_fn fn, cm_error *err)
{
	if (!cJSON_IsArray(v))
		return fn(p, v, err);
	cJSON *r = cJSON_CreateArray(), *e;
	cJSON_ArrayForEach(e, v)
	{
		cJSON *x = fn(p, e, err);
		if (!x) {
			cJSON_Delete(r);
			return NULL;
		}
		cJSON_AddItemToArray(r, x);
	}
	return r;
}

/* ES's error for an input of the wrong type. */
static cm_err
cast_err(const proc *p, const cJSON *v, const char *to, cm_error *err)
{
	return cm_error_set(err, CM_EINVAL, "field [%.200s] of type [%s] cannot be cast to [%s]",
	                    p->field, java_type(v), to);
}

/* lowercase, uppercase, trim of one string. */
static cJSON *
string_one(const proc *p, const cJSON *v, cm_error *err)
{
	if (!cJSON_IsString(v)) {
		cast_err(p, v, "java.lang.String", err);
		return NULL;
	}
	char *t = p->kind == PR_TRIM ? trim_ws(v->valuestring)
	                             : map_case(v->valuestring, p->kind == PR_UPPERCASE);
	cJSON *r = cJSON_CreateString(t);
	cm_free(MEM, t);
	return r;
}

static bool
parse_long(const char *s, long long *out)
{
	char *end;
	int base = 10;
	const char *t = s;
	if (*t == '-' || *t == '+')
		t++;
	if (t[0] == '0' && (t[1] == 'x' || t[1] == 'X'))
		base = 16;
	if (!*s || isspace((unsigned char)*s))
		return false;
	errno = 0;
	*out = strtoll(s, &end, base);
	return !errno && !*end;
}

static bool
parse_double(const char *s, double *out)
{
	char *end;
	if (!*s || isspace((unsigned char)*s))
		return false;
	errno = 0;
	*out = strtod(s, &end);
	while (*end && isspace((unsigned char)*end))
		end++;
	return !*end && end != s;
}

static cJSON *
convert_one(const proc *p, const cJSON *v, cm_error *err)
{
	cm_buf t;
	cm_buf_init(&t, MEM);
	value_text(v, &t);
	cm_buf_put_u8(&t, 0);
	const char *s = (const char *)t.data;
	cJSON *r = NULL;
	long long l;
	double x;
	unsigned char addr[16];
	switch (p->conv) {
	case CV_INTEGER:
		if (parse_long(s, &l) && l >= INT32_MIN && l <= INT32_MAX)
			r = cJSON_CreateNumber((double)l);
		break;
	case CV_LONG:
		if (parse_long(s, &l))
			r = cJSON_CreateNumber((double)l);
		break;
	case CV_FLOAT:
	case CV_DOUBLE:
		if (parse_double(s, &x))
			r = cJSON_CreateNumber(p->conv == CV_FLOAT ? (double)(float)x : x);
		break;
	case CV_BOOLEAN:
		if (!strcasecmp(s, "true"))
			r = cJSON_CreateTrue();
		else if (!strcasecmp(s, "false"))
			r = cJSON_CreateFalse();
		else
			cm_error_set(err, CM_EINVAL, "[%.200s] is not a boolean value, cannot convert to boolean",
			             s);
		break;
	case CV_STRING:
		r = cJSON_CreateString(s);
		break;
	case CV_IP:
		if (cJSON_IsString(v) && (inet_pton(AF_INET, s, addr) == 1 || inet_pton(AF_INET6, s, addr) == 1))
			r = cJSON_CreateString(s);
		else
			cm_error_set(err, CM_EINVAL, "'%.200s' is not an IP string literal.", s);
		break;
	case CV_AUTO:
		if (!cJSON_IsString(v))
			r = cJSON_Duplicate(v, true);
		else if (parse_long(s, &l))
			r = cJSON_CreateNumber((double)l);
		else if (parse_double(s, &x))
			r = cJSON_CreateNumber(x);
		else if (!strcasecmp(s, "true") || !strcasecmp(s, "false"))
			r = cJSON_CreateBool(!strcasecmp(s, "true"));
		else
			r = cJSON_CreateString(s);
		break;
	}
	if (!r && !err->code)
		cm_error_set(err, CM_EINVAL, "unable to convert [%.200s] to %s", s, cv_names[p->conv]);
	cm_buf_free(&t);
	return r;
}

/* Java's String.split(regex): the pieces between matches; trailing
 * empty pieces dropped unless keep_trailing; a piece per match even when
 * empty. limit 0 = no limit. */
static cJSON *
regex_split(const pcre2_code *re, const char *s, bool keep_trailing, int limit)
{
	cJSON *r = cJSON_CreateArray();
	size_t n = strlen(s), at = 0, from = 0;
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	int pieces = 0;
	while (from <= n && (limit <= 0 || pieces + 1 < limit)) {
		int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, 0, md, NULL);
		if (rc < 0)
			break;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		if (ov[1] == ov[0]) { /* an empty match: step over one character */
			if (ov[0] == 0 || ov[0] >= n) {
				from = ov[0] + 1;
				continue;
			}
		}
		char *piece = cm_strndup(MEM, s + at, ov[0] - at);
		cJSON_AddItemToArray(r, cJSON_CreateString(piece));
		cm_free(MEM, piece);
		pieces++;
		at = ov[1];
		from = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
	}
	cJSON_AddItemToArray(r, cJSON_CreateString(s + at));
	pcre2_match_data_free(md);
	if (!keep_trailing && limit <= 0) {
		int k;
		while ((k = cJSON_GetArraySize(r)) > 1 &&
		       !cJSON_GetArrayItem(r, k - 1)->valuestring[0])
			cJSON_DeleteItemFromArray(r, k - 1);
		if (cJSON_GetArraySize(r) == 1 && !cJSON_GetArrayItem(r, 0)->valuestring[0] && n)
			cJSON_DeleteItemFromArray(r, 0);
	}
	return r;
}

static char *
regex_replace(const pcre2_code *re, const char *s, const char *repl, cm_error *err)
{
	PCRE2_SIZE cap = strlen(s) * 2 + 64;
	for (int tries = 0; tries < 2; tries++) {
		PCRE2_UCHAR *out = cm_malloc(MEM, cap);
		PCRE2_SIZE len = cap;
		int rc = pcre2_substitute(re, (PCRE2_SPTR)s, PCRE2_ZERO_TERMINATED, 0,
		                          PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH, NULL,
		                          NULL, (PCRE2_SPTR)repl, PCRE2_ZERO_TERMINATED, out, &len);
		if (rc >= 0)
			return (char *)out;
		cm_free(MEM, out);
		if (rc != PCRE2_ERROR_NOMEMORY) {
			PCRE2_UCHAR msg[128];
			pcre2_get_error_message(rc, msg, sizeof(msg));
			cm_error_set(err, CM_EINVAL, "gsub failed: %s", (const char *)msg);
			return NULL;
		}
		cap = len + 1;
	}
	cm_error_set(err, CM_EINVAL, "gsub failed: the result does not fit");
	return NULL;
}

/* split or gsub of one string. */
static cJSON *
regex_one(const proc *p, const cJSON *v, cm_error *err)
{
	if (!cJSON_IsString(v)) {
		cast_err(p, v, "java.lang.String", err);
		return NULL;
	}
	if (p->kind == PR_SPLIT)
		return regex_split(p->re, v->valuestring, p->preserve_trailing, 0);
	char *t = regex_replace(p->re, v->valuestring, p->text, err);
	if (!t)
		return NULL;
	cJSON *r = cJSON_CreateString(t);
	cm_free(MEM, t);
	return r;
}

static cm_err
exec_date(const proc *p, idoc *d, const cJSON *v, cm_error *err)
{
	cm_buf t;
	cm_buf_init(&t, MEM);
	value_text(v, &t);
	cm_buf_put_u8(&t, 0);
	char *tz = p->tz ? render(d, p->tz) : NULL;
	const char *s = (const char *)t.data;
	int64_t ms;
	cm_err rc = CM_EINVAL;
	cm_error e;
	for (size_t i = 0; i < p->nformats && rc; i++) {
		cm_error_clear(&e);
		/* "now..." is date math to sr_date_parse, not a date */
		rc = strncmp(s, "now", 3) ? sr_date_parse(s, p->formats[i], tz, &ms, &e) : CM_EINVAL;
	}
	if (rc) {
		cm_error_set(err, CM_EINVAL, "unable to parse date [%.200s]", s);
	} else {
		char out[128];
		cm_error_clear(&e);
		if ((rc = sr_date_format(ms, p->out_format ? p->out_format
		                                           : "yyyy-MM-dd'T'HH:mm:ss.SSSXXX",
		                         tz, out, sizeof(out), &e)))
			*err = e;
		else
			rc = doc_set(d, p->target, cJSON_CreateString(out), false, err);
	}
	cm_free(MEM, tz);
	cm_buf_free(&t);
	return rc;
}

static cm_err
dissect_fail(const proc *p, const char *s, cm_error *err)
{
	return cm_error_set_type(err, CM_EINVAL, "dissect_exception",
	                         "Unable to find match for dissect pattern against source: [%.300s]",
	                         s);
}

typedef struct dis_val {
	const dis_key *k;
	const char *v;
	size_t n;
	size_t at; /* order of appearance */
} dis_val;

static int
dis_val_cmp(const void *a, const void *b)
{
	const dis_val *x = a, *y = b;
	int c = strcmp(x->k->name, y->k->name);
	if (c)
		return c;
	if (x->k->order != y->k->order)
		return x->k->order < y->k->order ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

static cm_err
exec_dissect(const proc *p, idoc *d, const cJSON *v, cm_error *err)
{
	if (!cJSON_IsString(v))
		return cast_err(p, v, "java.lang.String", err);
	const char *s = v->valuestring, *cur = s;
	size_t ll = strlen(p->lead);
	if (strncmp(cur, p->lead, ll))
		return dissect_fail(p, s, err);
	cur += ll;
	dis_val *vals = cm_calloc(MEM, p->nkeys, sizeof(dis_val));
	for (size_t i = 0; i < p->nkeys; i++) {
		const dis_key *k = &p->keys[i];
		size_t dl = strlen(k->delim);
		const char *end = dl ? strstr(cur, k->delim) : cur + strlen(cur);
		if (!end) {
			cm_free(MEM, vals);
			return dissect_fail(p, s, err);
		}
		vals[i] = (dis_val){k, cur, (size_t)(end - cur), i};
		cur = end + dl;
		if (k->pad && dl)
			while (!strncmp(cur, k->delim, dl))
				cur += dl;
	}
	cm_err rc = CM_OK;
	/* references: %{*k} names the field %{&k} fills */
	for (size_t i = 0; i < p->nkeys && !rc; i++) {
		if (vals[i].k->mod != DK_REF_KEY)
			continue;
		for (size_t j = 0; j < p->nkeys; j++)
			if (vals[j].k->mod == DK_REF_VAL && !strcmp(vals[j].k->name, vals[i].k->name)) {
				char *key = cm_strndup(MEM, vals[i].v, vals[i].n);
				char *val = cm_strndup(MEM, vals[j].v, vals[j].n);
				rc = doc_set(d, key, cJSON_CreateString(val), false, err);
				cm_free(MEM, key);
				cm_free(MEM, val);
				break;
			}
	}
	/* appends: joined in their order (then appearance), per name */
	size_t na = 0;
	dis_val *app = cm_calloc(MEM, p->nkeys, sizeof(dis_val));
	for (size_t i = 0; i < p->nkeys; i++)
		if (vals[i].k->mod == DK_APPEND)
			app[na++] = vals[i];
	qsort(app, na, sizeof(dis_val), dis_val_cmp);
	for (size_t i = 0; i < na && !rc;) {
		cm_buf b;
		cm_buf_init(&b, MEM);
		size_t j = i;
		for (; j < na && !strcmp(app[j].k->name, app[i].k->name); j++) {
			if (j > i)
				cm_buf_put(&b, p->append_sep, strlen(p->append_sep));
			cm_buf_put(&b, app[j].v, app[j].n);
		}
		cm_buf_put_u8(&b, 0);
		rc = doc_set(d, app[i].k->name, cJSON_CreateString((const char *)b.data), false, err);
		cm_buf_free(&b);
		i = j;
	}
	cm_free(MEM, app);
	for (size_t i = 0; i < p->nkeys && !rc; i++) {
		if (vals[i].k->mod != DK_NORMAL)
			continue;
		char *val = cm_strndup(MEM, vals[i].v, vals[i].n);
		rc = doc_set(d, vals[i].k->name, cJSON_CreateString(val), false, err);
		cm_free(MEM, val);
	}
	cm_free(MEM, vals);
	return rc;
}

static char *
trim_chars(const char *s, const char *set)
{
	if (!set)
		return cm_strdup(MEM, s);
	while (*s && strchr(set, *s))
		s++;
	size_t n = strlen(s);
	while (n && strchr(set, s[n - 1]))
		n--;
	return cm_strndup(MEM, s, n);
}

static bool
in_list(char **v, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i], s))
			return true;
	return false;
}

static cm_err
exec_kv(const proc *p, idoc *d, const cJSON *v, cm_error *err)
{
	if (!cJSON_IsString(v))
		return cast_err(p, v, "java.lang.String", err);
	cJSON *parts = regex_split(p->re, v->valuestring, false, 0), *e;
	cm_err rc = CM_OK;
	cJSON_ArrayForEach(e, parts)
	{
		cJSON *kvp = regex_split(p->re2, e->valuestring, true, 2);
		if (cJSON_GetArraySize(kvp) != 2) {
			cJSON_Delete(kvp);
			rc = cm_error_set(err, CM_EINVAL,
			                  "field [%.200s] does not contain value_split [%.60s]", p->field,
			                  e->valuestring);
			break;
		}
		char *key = trim_chars(cJSON_GetArrayItem(kvp, 0)->valuestring, p->trim_key);
		char *val = trim_chars(cJSON_GetArrayItem(kvp, 1)->valuestring, p->trim_value);
		cJSON_Delete(kvp);
		size_t vl = strlen(val);
		if (p->strip_brackets && vl >= 2) {
			char a = val[0], z = val[vl - 1];
			if ((a == '(' && z == ')') || (a == '<' && z == '>') || (a == '[' && z == ']') ||
			    (a == '"' && z == '"') || (a == '\'' && z == '\'')) {
				memmove(val, val + 1, vl - 2);
				val[vl - 2] = 0;
			}
		}
		bool keep = (!p->nincl || in_list(p->incl, p->nincl, key)) &&
		            !in_list(p->excl, p->nexcl, key);
		if (keep) {
			char path[MAX_PATH * 2];
			snprintf(path, sizeof(path), "%s%s%s%s", p->target ? p->target : "",
			         p->target ? "." : "", p->text ? p->text : "", key);
			bool exists = doc_get(d, path, NULL) != NULL;
			rc = doc_set(d, path, cJSON_CreateString(val), exists, err);
		}
		cm_free(MEM, key);
		cm_free(MEM, val);
		if (rc)
			break;
	}
	cJSON_Delete(parts);
	return rc;
}

static cm_err
exec_dot_expander(const proc *p, idoc *d, cm_error *err)
{
	cJSON *at = d->src;
	if (p->target && !(at = doc_get(d, p->target, NULL)))
		return CM_OK;
	if (!cJSON_IsObject(at))
		return CM_OK;
	cm_err rc = CM_OK;
	for (cJSON *c = at->child, *next; c && !rc; c = next) {
		next = c->next;
		if (strcmp(p->field, "*") ? strcmp(c->string, p->field) : !strchr(c->string, '.'))
			continue;
		char path[MAX_PATH * 2];
		snprintf(path, sizeof(path), "%s%s%s", p->target ? p->target : "", p->target ? "." : "",
		         c->string);
		cJSON *v = cJSON_DetachItemViaPointer(at, c);
		bool exists = doc_get(d, path, NULL) != NULL;
		rc = doc_set(d, path, v, exists, err);
	}
	return rc;
}

static bool
contains_value(const cJSON *arr, const cJSON *v)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, arr)
	if (cJSON_Compare(e, v, true))
		return true;
	return false;
}

/* The ctx a script or a condition sees: the source's fields with _index,
 * _id, _routing and _ingest beside them (a copy). */
static cJSON *
script_ctx(const idoc *d)
{
	cJSON *ctx = cJSON_Duplicate(d->src, true);
	static const char *const keys[] = {"_index", "_id", "_routing"};
	for (int i = 0; i < 3; i++) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(d->meta, keys[i]);
		cJSON_DeleteItemFromObjectCaseSensitive(ctx, keys[i]);
		if (m)
			cJSON_AddItemToObject(ctx, keys[i], cJSON_Duplicate(m, true));
	}
	cJSON_DeleteItemFromObjectCaseSensitive(ctx, "_ingest");
	cJSON_AddItemToObject(ctx, "_ingest", cJSON_Duplicate(d->ingest, true));
	return ctx;
}

/* Evaluates p's `if`: *yes. A condition that fails or does not give a
 * boolean is the processor's failure. */
static cm_err
cond_eval(const proc *p, const idoc *d, bool *yes, cm_error *err)
{
	*yes = true;
	if (!p->cond)
		return CM_OK;
	cJSON *ctx = script_ctx(d), *res = NULL;
	cm_err rc = ps_exec(p->cond, ctx, p->cond_params, &res, err);
	if (!rc && !cJSON_IsBool(res))
		rc = cm_error_set_type(
		    err, CM_EINVAL, "script_exception",
		    "runtime error: %s cannot be cast to java.lang.Boolean: the [if] "
		    "condition [%.200s] must return a boolean",
		    res ? java_type(res) : "null", p->cond_src);
	else if (!rc)
		*yes = cJSON_IsTrue(res);
	cJSON_Delete(res);
	cJSON_Delete(ctx);
	return rc;
}

/* script: runs on a copy of the document; a script that fails leaves it
 * as it was. The metadata keys go back to their places, _ingest._value
 * and _ingest._key (inside foreach only) back to _ingest, the rest is the
 * new source. */
static cm_err
exec_script(const proc *p, idoc *d, cm_error *err)
{
	cJSON *ctx = script_ctx(d);
	cm_err rc = ps_exec(p->script, ctx, p->params, NULL, err);
	if (rc) {
		cJSON_Delete(ctx);
		return rc;
	}
	static const char *const keys[] = {"_index", "_id", "_routing"};
	for (int i = 0; i < 3; i++) {
		cJSON *m = cJSON_DetachItemFromObjectCaseSensitive(ctx, keys[i]);
		if (!m || cJSON_IsNull(m)) {
			cJSON_Delete(m);
			if (i == 2) /* _routing removed: none; _index and _id stay */
				cJSON_DeleteItemFromObjectCaseSensitive(d->meta, keys[i]);
			continue;
		}
		cm_error ignore;
		cm_error_clear(&ignore);
		doc_set(d, keys[i], m, false, &ignore);
	}
	cJSON *ing = cJSON_DetachItemFromObjectCaseSensitive(ctx, "_ingest");
	static const char *const loop[] = {"_value", "_key"};
	for (int i = 0; i < 2; i++) {
		cJSON *val = cJSON_DetachItemFromObjectCaseSensitive(ing, loop[i]);
		if (val && cJSON_GetObjectItemCaseSensitive(d->ingest, loop[i])) {
			cJSON_DeleteItemFromObjectCaseSensitive(d->ingest, loop[i]);
			cJSON_AddItemToObject(d->ingest, loop[i], val);
		} else {
			cJSON_Delete(val);
		}
	}
	cJSON_Delete(ing);
	cJSON_Delete(d->src);
	d->src = ctx;
	return CM_OK;
}

static cm_err
exec_grok(const proc *p, idoc *d, const cJSON *v, cm_error *err)
{
	cJSON *fields, *e;
	if (!cJSON_IsString(v))
		return cast_err(p, v, "java.lang.String", err);
	int hit = co_grok_match(p->grok, v->valuestring, &fields, err);
	if (hit == -2)
		return CM_EINVAL;
	if (hit < 0)
		return cm_error_set(err, CM_EINVAL,
		                    "Provided Grok expressions do not match field value: [%.300s]",
		                    v->valuestring);
	cm_err rc = CM_OK;
	while (!rc && (e = fields->child)) {
		cJSON_DetachItemViaPointer(fields, e);
		char *k = e->string;
		e->string = NULL;
		rc = doc_set(d, k, e, false, err);
		cJSON_free(k);
	}
	cJSON_Delete(fields);
	if (!rc && p->trace_match) {
		char idx[16];
		snprintf(idx, sizeof(idx), "%d", hit);
		cJSON_DeleteItemFromObjectCaseSensitive(d->ingest, "_grok_match_index");
		cJSON_AddStringToObject(d->ingest, "_grok_match_index", idx);
	}
	return rc;
}

static cm_err run_list(run_ctx *rx, const proc *v, size_t n, idoc *d, cm_error *err);

/* foreach: the processor on each element as _ingest._value, the list of
 * what it left there written back to the field; over an object (ES 8),
 * on each entry as _ingest._key and _ingest._value, the entries it left
 * (a changed key renames the entry) written back. */
static cm_err
exec_foreach(run_ctx *rx, const proc *p, idoc *d, cm_error *err)
{
	cJSON *v = doc_get(d, p->field, NULL);
	if (cJSON_IsNull(v) && !p->ignore_missing)
		return cm_error_set(err, CM_EINVAL,
		                    "field [%.200s] is null, cannot loop over its elements.",
		                    p->field);
	cm_err rc = input(p, d, &v, err);
	if (rc || !v)
		return rc;
	bool map = cJSON_IsObject(v);
	if (!cJSON_IsArray(v) && !map)
		return cast_err(p, v, "java.util.List", err);
	cJSON *items = cJSON_Duplicate(v, true), *e;
	cJSON *out = map ? cJSON_CreateObject() : cJSON_CreateArray();
	cJSON *saved = cJSON_DetachItemFromObjectCaseSensitive(d->ingest, "_value");
	cJSON *saved_key = cJSON_DetachItemFromObjectCaseSensitive(d->ingest, "_key");
	cJSON_ArrayForEach(e, items)
	{
		if (map)
			cJSON_AddStringToObject(d->ingest, "_key", e->string);
		cJSON_AddItemToObject(d->ingest, "_value", cJSON_Duplicate(e, true));
		rc = run_list(rx, p->sub, p->nsub, d, err);
		cJSON *nv = cJSON_DetachItemFromObjectCaseSensitive(d->ingest, "_value");
		if (!nv)
			nv = cJSON_CreateNull();
		if (map) {
			cJSON *k = cJSON_DetachItemFromObjectCaseSensitive(d->ingest, "_key");
			cm_buf kt;
			cm_buf_init(&kt, MEM);
			value_text(k, &kt);
			cm_buf_put_u8(&kt, 0);
			const char *key = (const char *)kt.data;
			if (cJSON_GetObjectItemCaseSensitive(out, key))
				cJSON_ReplaceItemInObjectCaseSensitive(out, key, nv);
			else
				cJSON_AddItemToObject(out, key, nv);
			cm_buf_free(&kt);
			cJSON_Delete(k);
		} else {
			cJSON_AddItemToArray(out, nv);
		}
		if (rc || d->dropped)
			break;
	}
	if (saved)
		cJSON_AddItemToObject(d->ingest, "_value", saved);
	if (saved_key)
		cJSON_AddItemToObject(d->ingest, "_key", saved_key);
	cJSON_Delete(items);
	if (rc || d->dropped) {
		cJSON_Delete(out);
		return rc;
	}
	return doc_set(d, p->field, out, false, err);
}

static cm_err
exec_proc(run_ctx *rx, const proc *p, idoc *d, cm_error *err)
{
	cJSON *v = NULL, *r;
	cm_err rc = CM_OK;
	switch (p->kind) {
	case PR_SET: {
		char *field = render(d, p->field);
		cJSON *cur = doc_get(d, field, NULL);
		if (!p->override && cur && !cJSON_IsNull(cur)) {
			cm_free(MEM, field);
			return CM_OK;
		}
		r = render_value(d, p->value);
		if (p->ignore_empty &&
		    (cJSON_IsNull(r) || (cJSON_IsString(r) && !r->valuestring[0]))) {
			cJSON_Delete(r);
			cm_free(MEM, field);
			return CM_OK;
		}
		rc = doc_set(d, field, r, false, err);
		cm_free(MEM, field);
		return rc;
	}
	case PR_APPEND: {
		char *field = render(d, p->field);
		r = render_value(d, p->value);
		if (!p->allow_dup) {
			cJSON *cur = doc_get(d, field, NULL);
			cJSON *add = cJSON_CreateArray(), *e;
			cJSON *vals = cJSON_IsArray(r) ? r : NULL;
			if (!vals) {
				vals = cJSON_CreateArray();
				cJSON_AddItemToArray(vals, r);
			}
			cJSON_ArrayForEach(e, vals)
			{
				bool dup = cur && (cJSON_IsArray(cur) ? contains_value(cur, e)
				                                      : cJSON_Compare(cur, e, true));
				if (!dup && !contains_value(add, e))
					cJSON_AddItemToArray(add, cJSON_Duplicate(e, true));
			}
			cJSON_Delete(vals);
			r = add;
		}
		rc = doc_set(d, field, r, true, err);
		cm_free(MEM, field);
		return rc;
	}
	case PR_REMOVE:
		for (size_t i = 0; i < p->nfields && !rc; i++) {
			char *field = render(d, p->fields[i]);
			if (!doc_get(d, field, NULL) && p->ignore_missing) {
				cm_free(MEM, field);
				continue;
			}
			rc = doc_remove(d, field, err);
			cm_free(MEM, field);
		}
		return rc;
	case PR_RENAME: {
		char *to = render(d, p->target);
		if ((rc = input(p, d, &v, err)) || !v) {
			cm_free(MEM, to);
			return rc;
		}
		if (doc_get(d, to, NULL)) {
			rc = cm_error_set(err, CM_EINVAL, "field [%.200s] already exists", to);
			cm_free(MEM, to);
			return rc;
		}
		r = cJSON_Duplicate(v, true);
		if (!(rc = doc_remove(d, p->field, err)))
			rc = doc_set(d, to, r, false, err);
		else
			cJSON_Delete(r);
		cm_free(MEM, to);
		return rc;
	}
	case PR_DROP:
		d->dropped = true;
		return CM_OK;
	case PR_FAIL: {
		char *m = render(d, p->text);
		rc = cm_error_set_type(err, CM_EINTERNAL, "fail_processor_exception", "%.400s", m);
		cm_free(MEM, m);
		return rc;
	}
	case PR_PIPELINE:
		return run_pipeline(rx, p->text, d, err);
	case PR_DOT_EXPANDER:
		return exec_dot_expander(p, d, err);
	case PR_SCRIPT:
		return exec_script(p, d, err);
	case PR_FOREACH:
		return exec_foreach(rx, p, d, err);
	default:
		break;
	}
	/* the rest read one input field */
	if ((rc = input(p, d, &v, err)) || !v)
		return rc;
	const char *target = p->target ? p->target : p->field;
	switch (p->kind) {
	case PR_LOWERCASE:
	case PR_UPPERCASE:
	case PR_TRIM:
		if (!(r = map_values(p, v, string_one, err)))
			return CM_EINVAL;
		return doc_set(d, target, r, false, err);
	case PR_CONVERT:
		if (!(r = map_values(p, v, convert_one, err)))
			return CM_EINVAL;
		return doc_set(d, target, r, false, err);
	case PR_SPLIT:
	case PR_GSUB:
		r = p->kind == PR_GSUB ? map_values(p, v, regex_one, err) : regex_one(p, v, err);
		if (!r)
			return CM_EINVAL;
		return doc_set(d, target, r, false, err);
	case PR_JOIN: {
		if (!cJSON_IsArray(v))
			return cast_err(p, v, "java.util.List", err);
		cm_buf b;
		cm_buf_init(&b, MEM);
		cJSON *e;
		bool first = true;
		cJSON_ArrayForEach(e, v)
		{
			if (!first)
				cm_buf_put(&b, p->text, strlen(p->text));
			first = false;
			value_text(e, &b);
		}
		cm_buf_put_u8(&b, 0);
		r = cJSON_CreateString((const char *)b.data);
		cm_buf_free(&b);
		return doc_set(d, target, r, false, err);
	}
	case PR_JSON: {
		if (!cJSON_IsString(v))
			return cast_err(p, v, "java.lang.String", err);
		r = cJSON_Parse(v->valuestring);
		if (!r)
			return cm_error_set(err, CM_EINVAL,
			                    "field [%.200s] does not hold valid JSON: [%.200s]", p->field,
			                    v->valuestring);
		if (!p->add_to_root)
			return doc_set(d, target, r, false, err);
		if (!cJSON_IsObject(r)) {
			cJSON_Delete(r);
			return cm_error_set(err, CM_EINVAL,
			                    "cannot add non-map fields to root of document");
		}
		cJSON *e;
		while ((e = r->child)) {
			cJSON_DetachItemViaPointer(r, e);
			char *k = e->string;
			e->string = NULL;
			if (cJSON_GetObjectItemCaseSensitive(d->src, k))
				cJSON_ReplaceItemInObjectCaseSensitive(d->src, k, e);
			else
				cJSON_AddItemToObject(d->src, k, e);
			cJSON_free(k);
		}
		cJSON_Delete(r);
		return CM_OK;
	}
	case PR_DATE:
		return exec_date(p, d, v, err);
	case PR_DISSECT:
		return exec_dissect(p, d, v, err);
	case PR_KV:
		return exec_kv(p, d, v, err);
	case PR_GROK:
		return exec_grok(p, d, v, err);
	default:
		return cm_error_set(err, CM_EINTERNAL, "processor [%s] has no runner",
		                    proc_names[p->kind]);
	}
}

/* ---- running ---- */

static void
failure_meta(idoc *d, const proc *p, const cm_error *e)
{
	cJSON_DeleteItemFromObjectCaseSensitive(d->ingest, "on_failure_message");
	cJSON_DeleteItemFromObjectCaseSensitive(d->ingest, "on_failure_processor_type");
	cJSON_DeleteItemFromObjectCaseSensitive(d->ingest, "on_failure_processor_tag");
	if (!e)
		return;
	cJSON_AddStringToObject(d->ingest, "on_failure_message",
	                        e->reason[0] ? e->reason : cm_err_msg(e->code));
	cJSON_AddStringToObject(d->ingest, "on_failure_processor_type", proc_names[p->kind]);
	if (p->tag)
		cJSON_AddStringToObject(d->ingest, "on_failure_processor_tag", p->tag);
}

/* Runs processors in order: a failing one is skipped with
 * ignore_failure, handled by its on_failure list, or fails the run. */
static cm_err
run_list(run_ctx *rx, const proc *v, size_t n, idoc *d, cm_error *err)
{
	for (size_t i = 0; i < n && !d->dropped; i++) {
		const proc *p = &v[i];
		cm_error e;
		bool yes;
		cm_error_clear(&e);
		cm_err rc = cond_eval(p, d, &yes, &e);
		if (!rc && !yes)
			continue;
		if (!rc)
			rc = exec_proc(rx, p, d, &e);
		if (!rc || p->ignore_failure)
			continue;
		if (!p->non_failure) {
			*err = e;
			return rc;
		}
		failure_meta(d, p, &e);
		rc = run_list(rx, p->on_failure, p->non_failure, d, err);
		failure_meta(d, p, NULL);
		if (rc)
			return rc;
	}
	return CM_OK;
}

static cm_err
lookup(co_ingest *g, const char *name, pipeline **out, cm_error *err)
{
	for (size_t i = 0; i < g->ncache; i++)
		if (!strcmp(g->cache[i]->name, name)) {
			*out = g->cache[i];
			return CM_OK;
		}
	if (!g->defs)
		g->defs = co_store_get(g->node, "pipeline");
	const cJSON *def = cJSON_GetObjectItemCaseSensitive(g->defs, name);
	if (!def)
		return cm_error_set(err, CM_EINVAL, "pipeline with id [%.200s] does not exist", name);
	cm_err rc = compile_pipeline(name, def, out, err);
	if (rc)
		return rc;
	g->cache = cm_realloc(MEM, g->cache, (g->ncache + 1) * sizeof(pipeline *));
	g->cache[g->ncache++] = *out;
	return CM_OK;
}

static cm_err
run_compiled(run_ctx *rx, const pipeline *pl, idoc *d, cm_error *err)
{
	cm_error e;
	cm_error_clear(&e);
	cm_err rc = run_list(rx, pl->procs, pl->nprocs, d, &e);
	if (!rc)
		return CM_OK;
	if (!pl->non_failure) {
		*err = e;
		return rc;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(d->ingest, "on_failure_message");
	cJSON_AddStringToObject(d->ingest, "on_failure_message",
	                        e.reason[0] ? e.reason : cm_err_msg(e.code));
	rc = run_list(rx, pl->on_failure, pl->non_failure, d, err);
	cJSON_DeleteItemFromObjectCaseSensitive(d->ingest, "on_failure_message");
	return rc;
}

static cm_err
run_pipeline(run_ctx *rx, const char *name, idoc *d, cm_error *err)
{
	pipeline *pl;
	for (int i = 0; i < rx->depth; i++)
		if (!strcmp(rx->stack[i], name))
			return cm_error_set(err, CM_EINVAL, "Cycle detected for pipeline: %.200s", name);
	if (rx->depth >= MAX_DEPTH)
		return cm_error_set(err, CM_EINVAL, "pipelines nested more than %d deep", MAX_DEPTH);
	cm_err rc = lookup(rx->g, name, &pl, err);
	if (rc) {
		if (rx->depth > 0 && rc == CM_EINVAL && strstr(err->reason, "does not exist")) {
			cm_error_clear(err);
			return cm_error_set(err, CM_EINVAL,
			                    "Pipeline processor configured for non-existent pipeline "
			                    "[%.200s]",
			                    name);
		}
		return rc;
	}
	rx->stack[rx->depth++] = name;
	rc = run_compiled(rx, pl, d, err);
	rx->depth--;
	return rc;
}

static void
timestamp_now(char *buf, size_t cap)
{
	int64_t ns = (int64_t)cm_wall_ms() * 1000000;
	st_date_format_ns(ns, buf, cap);
}

co_ingest *
co_ingest_new(nd_node *n)
{
	co_ingest *g = cm_calloc(MEM, 1, sizeof(*g));
	g->node = n;
	timestamp_now(g->stamp, sizeof(g->stamp));
	return g;
}

void
co_ingest_free(co_ingest *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->ncache; i++)
		pipeline_free(g->cache[i]);
	cm_free(MEM, g->cache);
	cJSON_Delete(g->defs);
	cm_free(MEM, g);
}

static void
idoc_init(idoc *d, cJSON *src, const char *index, const char *id, const char *routing,
          const char *stamp)
{
	memset(d, 0, sizeof(*d));
	d->src = src;
	d->meta = cJSON_CreateObject();
	cJSON_AddStringToObject(d->meta, "_index", index ? index : "");
	if (id)
		cJSON_AddStringToObject(d->meta, "_id", id);
	if (routing)
		cJSON_AddStringToObject(d->meta, "_routing", routing);
	d->ingest = cJSON_CreateObject();
	cJSON_AddStringToObject(d->ingest, "timestamp", stamp);
}

static void
idoc_free(idoc *d)
{
	cJSON_Delete(d->src);
	cJSON_Delete(d->meta);
	cJSON_Delete(d->ingest);
}

/* The metadata field back into an owned string. */
static void
meta_out(const idoc *d, const char *key, char **s)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->meta, key);
	if (!cJSON_IsString(v)) {
		if (!strcmp(key, "_routing") && *s) {
			cm_free(MEM, *s);
			*s = NULL;
		}
		return;
	}
	if (*s && !strcmp(*s, v->valuestring))
		return;
	cm_free(MEM, *s);
	*s = v->valuestring[0] || strcmp(key, "_routing") ? cm_strdup(MEM, v->valuestring) : NULL;
}

cm_err
co_ingest_run(co_ingest *g, nd_index *ix, const char *pipeline, char **index, char **id,
              char **routing, const char *src, size_t len, char **out, size_t *out_len,
              bool *dropped, cm_error *err)
{
	char dflt[sizeof(((nd_settings *)0)->default_pipeline)], fin[sizeof(dflt)];
	*out = NULL;
	*out_len = 0;
	*dropped = false;
	dflt[0] = fin[0] = 0;
	if (ix)
		nd_index_pipelines(ix, dflt, fin);
	const char *first = pipeline ? (strcmp(pipeline, "_none") ? pipeline : NULL)
	                             : (dflt[0] ? dflt : NULL);
	if (!first && !fin[0])
		return CM_OK;
	cJSON *doc = cJSON_ParseWithLength(src, len);
	if (!cJSON_IsObject(doc)) {
		cJSON_Delete(doc);
		return cm_error_set(err, CM_EMAPPING, "failed to parse");
	}
	idoc d;
	idoc_init(&d, doc, *index, *id, *routing, g->stamp);
	run_ctx rx = {.g = g};
	cm_err rc = CM_OK;
	if (first)
		rc = run_pipeline(&rx, first, &d, err);
	if (!rc && !d.dropped && fin[0])
		rc = run_pipeline(&rx, fin, &d, err);
	if (!rc && d.dropped) {
		*dropped = true;
	} else if (!rc) {
		char *text = cJSON_PrintUnformatted(d.src);
		if (!text) {
			rc = cm_error_set(err, CM_ENOMEM, "cannot render the document");
		} else {
			*out_len = strlen(text);
			*out = cm_strndup(MEM, text, *out_len);
			cJSON_free(text);
			meta_out(&d, "_index", index);
			meta_out(&d, "_id", id);
			meta_out(&d, "_routing", routing);
		}
	}
	idoc_free(&d);
	return rc;
}

/* ---- _ingest/pipeline ---- */


/* The ids of `all` that the comma list `names` (NULL = every one, "*"
 * patterns) selects, as a new array; *missing when a plain name is not
 * there. */
static cJSON *
select_ids(const cJSON *all, const char *names, bool *missing)
{
	cJSON *sel = cJSON_CreateArray();
	*missing = false;
	char *list = cm_strdup(MEM, names ? names : "*"), *save = NULL;
	for (char *n = strtok_r(list, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
		bool hit = false;
		for (const cJSON *c = all ? all->child : NULL; c; c = c->next)
			if (cm_glob(n, c->string)) {
				hit = true;
				bool dup = false;
				const cJSON *e;
				cJSON_ArrayForEach(e, sel) dup |= !strcmp(e->valuestring, c->string);
				if (!dup)
					cJSON_AddItemToArray(sel, cJSON_CreateString(c->string));
			}
		if (!hit && !strchr(n, '*'))
			*missing = true;
	}
	cm_free(MEM, list);
	return sel;
}

/* GET _ingest/processor/grok: the built-in patterns (?s sorts them). */
void
co_h_grok_patterns(co_req *r)
{
	const char *s = co_param_get(r, "s"), *ecs = co_param_get(r, "ecs_compatibility");
	if (ecs && strcmp(ecs, "disabled")) {
		co_reply_errorf(
		    r, CM_EINVAL, NULL,
		    "[ecs_compatibility] [%s] is not supported by Shoal: its grok patterns "
		    "are the legacy (\"disabled\") ones",
		    ecs);
		return;
	}
	if (s && *s && strcmp(s, "true") && strcmp(s, "false")) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "Failed to parse value [%s] as only [true] or [false] are allowed.",
		                s);
		return;
	}
	cJSON *j = cJSON_CreateObject();
	cJSON_AddItemToObject(j, "patterns", co_grok_library(s && (!*s || !strcmp(s, "true"))));
	co_reply_json(r, 200, j);
}

void
co_h_pipeline_put(co_req *r)
{
	const char *id = co_seg(r, 2);
	bool bad;
	cm_error err;
	cm_error_clear(&err);
	co_param_get(r, "master_timeout");
	co_param_get(r, "timeout");
	cJSON *body = co_body_json(r, &bad);
	if (bad || !cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EPARSE, "parse_exception",
		                bad ? "request body is not valid JSON" : "request body is required");
		return;
	}
	pipeline *pl;
	if (compile_pipeline(id, body, &pl, &err)) {
		cJSON_Delete(body);
		co_reply_error(r, &err, NULL);
		return;
	}
	pipeline_free(pl);
	co_store_change(r, "put", "pipeline", id, body);
	cJSON_Delete(body);
}

void
co_h_pipeline_get(co_req *r)
{
	const char *names = co_seg(r, 2);
	bool missing;
	co_param_get(r, "master_timeout");
	cJSON *all = co_store_get(r->node, "pipeline"), *j = cJSON_CreateObject();
	cJSON *sel = select_ids(all, names, &missing), *e;
	cJSON_ArrayForEach(e, sel)
	cJSON_AddItemToObject(j, e->valuestring,
	                      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(all, e->valuestring),
	                                      true));
	cJSON_Delete(sel);
	cJSON_Delete(all);
	/* ES answers a missing pipeline with 404 and an empty object */
	co_reply_json(r, missing && !cJSON_GetArraySize(j) ? 404 : 200, j);
}

void
co_h_pipeline_delete(co_req *r)
{
	const char *names = co_seg(r, 2);
	bool missing;
	co_param_get(r, "master_timeout");
	co_param_get(r, "timeout");
	cJSON *all = co_store_get(r->node, "pipeline");
	cJSON *sel = select_ids(all, names, &missing);
	cJSON_Delete(all);
	int n = cJSON_GetArraySize(sel);
	if (missing || !n) {
		cJSON_Delete(sel);
		co_reply_errorf(r, CM_ENOTFOUND, NULL, "pipeline [%s] is missing", names);
		return;
	}
	if (n == 1) {
		co_store_change(r, "delete", "pipeline", cJSON_GetArrayItem(sel, 0)->valuestring, NULL);
		cJSON_Delete(sel);
		return;
	}
	/* several (a pattern): each a change of its own, the last one replies */
	for (int i = 0; i + 1 < n; i++) {
		cm_error err;
		cm_error_clear(&err);
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "op", "delete");
		cJSON_AddStringToObject(o, "kind", "pipeline");
		cJSON_AddStringToObject(o, "name", cJSON_GetArrayItem(sel, i)->valuestring);
		cm_err rc = co_store_apply(r->node, o, &err);
		cJSON_Delete(o);
		if (rc) {
			cJSON_Delete(sel);
			co_reply_error(r, &err, NULL);
			return;
		}
	}
	co_store_change(r, "delete", "pipeline", cJSON_GetArrayItem(sel, n - 1)->valuestring, NULL);
	cJSON_Delete(sel);
}

static cJSON *
error_json(const cm_error *e)
{
	cJSON *j = cJSON_CreateObject(), *rc = cJSON_AddArrayToObject(j, "root_cause");
	cJSON *c = cJSON_CreateObject();
	const char *reason = e->reason[0] ? e->reason : cm_err_msg(e->code);
	cJSON_AddStringToObject(c, "type", cm_error_type(e));
	cJSON_AddStringToObject(c, "reason", reason);
	cJSON_AddItemToArray(rc, c);
	cJSON_AddStringToObject(j, "type", cm_error_type(e));
	cJSON_AddStringToObject(j, "reason", reason);
	return j;
}

static cJSON *
doc_json(const idoc *d)
{
	cJSON *j = cJSON_CreateObject();
	const cJSON *m;
	m = cJSON_GetObjectItemCaseSensitive(d->meta, "_index");
	cJSON_AddStringToObject(j, "_index", cJSON_IsString(m) ? m->valuestring : "_index");
	cJSON_AddStringToObject(j, "_type", "_doc");
	m = cJSON_GetObjectItemCaseSensitive(d->meta, "_id");
	cJSON_AddStringToObject(j, "_id", cJSON_IsString(m) ? m->valuestring : "_id");
	m = cJSON_GetObjectItemCaseSensitive(d->meta, "_routing");
	if (cJSON_IsString(m))
		cJSON_AddStringToObject(j, "_routing", m->valuestring);
	cJSON_AddItemToObject(j, "_source", cJSON_Duplicate(d->src, true));
	cJSON *ing = cJSON_AddObjectToObject(j, "_ingest");
	cJSON_AddItemToObject(ing, "timestamp",
	                      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(d->ingest, "timestamp"),
	                                      true));
	m = cJSON_GetObjectItemCaseSensitive(d->ingest, "_grok_match_index");
	if (m)
		cJSON_AddItemToObject(ing, "_grok_match_index", cJSON_Duplicate(m, true));
	return j;
}

/* One simulated document: {"doc"} or {"error"}; verbose: each top-level
 * processor's result in turn. */
static cJSON *
simulate_doc(co_ingest *g, const pipeline *pl, const cJSON *in, bool verbose)
{
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(in, "_source");
	cJSON *j = cJSON_CreateObject();
	cm_error err;
	cm_error_clear(&err);
	if (!cJSON_IsObject(src)) {
		cm_error_set_type(&err, CM_EPARSE, "parse_exception",
		                  "[_source] required property is missing");
		cJSON_AddItemToObject(j, "error", error_json(&err));
		return j;
	}
	const cJSON *ix = cJSON_GetObjectItemCaseSensitive(in, "_index");
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(in, "_id");
	const cJSON *rt = cJSON_GetObjectItemCaseSensitive(in, "_routing");
	idoc d;
	idoc_init(&d, cJSON_Duplicate(src, true), cJSON_IsString(ix) ? ix->valuestring : "_index",
	          cJSON_IsString(id) ? id->valuestring : "_id",
	          cJSON_IsString(rt) ? rt->valuestring : NULL, g->stamp);
	run_ctx rx = {.g = g};
	rx.stack[rx.depth++] = pl->name;
	if (!verbose) {
		if (run_compiled(&rx, pl, &d, &err)) {
			cJSON_AddItemToObject(j, "error", error_json(&err));
		} else if (d.dropped) {
			cJSON_Delete(j);
			j = cJSON_CreateNull();
		} else {
			cJSON_AddItemToObject(j, "doc", doc_json(&d));
		}
		idoc_free(&d);
		return j;
	}
	cJSON *res = cJSON_AddArrayToObject(j, "processor_results");
	for (size_t i = 0; i < pl->nprocs && !d.dropped; i++) {
		const proc *p = &pl->procs[i];
		cJSON *r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "processor_type", proc_names[p->kind]);
		if (p->tag)
			cJSON_AddStringToObject(r, "tag", p->tag);
		cm_error_clear(&err);
		/* the condition first, to report it (run_list evaluates it again:
		 * conditions change nothing) */
		bool yes = true;
		if (p->cond && !cond_eval(p, &d, &yes, &err)) {
			cJSON *cj = cJSON_AddObjectToObject(r, "if");
			cJSON_AddStringToObject(cj, "condition", p->cond_src);
			cJSON_AddBoolToObject(cj, "result", yes);
			if (!yes) {
				cJSON_AddStringToObject(r, "status", "skipped");
				cJSON_AddItemToArray(res, r);
				continue;
			}
		}
		cm_error_clear(&err);
		/* an ignored failure is reported (ES's error_ignored): run a copy
		 * that does not ignore it (without on_failure, ignore_failure is
		 * all that differs) */
		proc probe = *p;
		bool report = p->ignore_failure && !p->non_failure;
		probe.ignore_failure = false;
		cm_err rc = run_list(&rx, report ? &probe : p, 1, &d, &err);
		if (rc && report) {
			cJSON_AddStringToObject(r, "status", "error_ignored");
			cJSON *ie = cJSON_AddObjectToObject(r, "ignored_error");
			cJSON_AddItemToObject(ie, "error", error_json(&err));
			cJSON_AddItemToObject(r, "doc", doc_json(&d));
			cJSON_AddItemToArray(res, r);
			continue;
		}
		if (rc) {
			cJSON_AddStringToObject(r, "status", "error");
			cJSON_AddItemToObject(r, "error", error_json(&err));
			cJSON_AddItemToArray(res, r);
			break;
		}
		cJSON_AddStringToObject(r, "status", d.dropped ? "dropped" : "success");
		if (!d.dropped)
			cJSON_AddItemToObject(r, "doc", doc_json(&d));
		cJSON_AddItemToArray(res, r);
	}
	idoc_free(&d);
	return j;
}

void
co_h_pipeline_simulate(co_req *r)
{
	const char *id = co_seg(r, 2);
	bool bad, verbose = false;
	const char *vb = co_param_get(r, "verbose");
	cm_error err;
	cm_error_clear(&err);
	if (vb && strcmp(vb, "true") && strcmp(vb, "false") && *vb) {
		co_reply_errorf(r, CM_EINVAL, NULL,
		                "Failed to parse value [%s] as only [true] or [false] are allowed.", vb);
		return;
	}
	verbose = vb && (!*vb || !strcmp(vb, "true"));
	if (id && !strcmp(id, "_simulate"))
		id = NULL;
	cJSON *body = co_body_json(r, &bad);
	if (bad || !cJSON_IsObject(body)) {
		cJSON_Delete(body);
		co_reply_errorf(r, CM_EPARSE, "parse_exception",
		                bad ? "request body is not valid JSON" : "request body is required");
		return;
	}
	co_ingest *g = co_ingest_new(r->node);
	pipeline *pl = NULL, *own = NULL;
	const cJSON *docs = cJSON_GetObjectItemCaseSensitive(body, "docs");
	cm_err rc;
	if (id) {
		rc = lookup(g, id, &pl, &err);
	} else {
		const cJSON *def = cJSON_GetObjectItemCaseSensitive(body, "pipeline");
		rc = def ? compile_pipeline("_simulate_pipeline", def, &own, &err)
		         : cm_error_set_type(&err, CM_EPARSE, "parse_exception",
		                             "[pipeline] required property is missing");
		pl = own;
	}
	if (!rc && !cJSON_IsArray(docs))
		rc = cm_error_set_type(&err, CM_EPARSE, "parse_exception",
		                       docs ? "[docs] property isn't a list, but of type [object]"
		                            : "[docs] required property is missing");
	if (!rc && !cJSON_GetArraySize(docs))
		rc = cm_error_set_type(&err, CM_EPARSE, "parse_exception",
		                       "must specify at least one document in [docs]");
	if (rc) {
		co_reply_error(r, &err, NULL);
	} else {
		cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "docs");
		const cJSON *e;
		cJSON_ArrayForEach(e, docs)
		cJSON_AddItemToArray(arr, simulate_doc(g, pl, e, verbose));
		co_reply_json(r, 200, j);
	}
	pipeline_free(own);
	co_ingest_free(g);
	cJSON_Delete(body);
}
