/* _bulk NDJSON: line splitting, action/metadata validation and source
 * pairing (see co_bulk_parse.h). Error texts follow Elasticsearch's. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "co_bulk_parse.h"

#define MEM CM_MEM_COORDINATOR
#define MAX_RETRIES 1000000

const char *const co_bulk_action_names[4] = {"index", "create", "update", "delete"};

void
co_bulk_parser_init(co_bulk_parser *p, const char *dflt_index, const char *dflt_routing,
                    uint64_t max_line, co_bulk_item_fn on_item, void *ctx)
{
	memset(p, 0, sizeof(*p));
	p->dflt_index = dflt_index;
	p->dflt_routing = dflt_routing;
	p->max_line = max_line;
	p->on_item = on_item;
	p->ctx = ctx;
	cm_buf_init(&p->line, MEM);
	cm_error_clear(&p->err);
}

void
co_bulk_action_clear(co_bulk_action *a)
{
	cm_free(MEM, a->index);
	cm_free(MEM, a->id);
	cm_free(MEM, a->routing);
	cm_free(MEM, a->pipeline);
	cm_free(MEM, a->source);
	memset(a, 0, sizeof(*a));
}

void
co_bulk_parser_free(co_bulk_parser *p)
{
	co_bulk_action_clear(&p->pend);
	cm_buf_free(&p->line);
}

static void fail(co_bulk_parser *p, cm_err code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
fail(co_bulk_parser *p, cm_err code, const char *fmt, ...)
{
	va_list ap;
	if (p->failed)
		return;
	cm_error_clear(&p->err);
	p->err.code = code;
	va_start(ap, fmt);
	vsnprintf(p->err.reason, sizeof(p->err.reason), fmt, ap);
	va_end(ap);
	p->failed = true;
}

/* A metadata value as a string (ids and versions may be numbers). */
static char *
meta_str(const cJSON *v)
{
	char buf[64];
	if (cJSON_IsString(v))
		return cm_strdup(MEM, v->valuestring);
	if (cJSON_IsNumber(v)) {
		snprintf(buf, sizeof(buf), "%.0f", v->valuedouble);
		return cm_strdup(MEM, buf);
	}
	return NULL;
}

/* Validates one action line into a (owned by the caller on success). */
static bool
parse_action(co_bulk_parser *p, const char *line, size_t len, co_bulk_action *out)
{
	cJSON *j = cJSON_ParseWithLength(line, len), *a, *c;
	co_bulk_action it;
	char *ver = NULL, *vt = NULL, *sq = NULL, *pt = NULL, *opt = NULL;
	unsigned long long ln = (unsigned long long)p->line_no;
	cm_error err;
	bool ok = false;

	memset(&it, 0, sizeof(it));
	it.require_alias = -1;
	if (!j || !cJSON_IsObject(j)) {
		fail(p, CM_EINVAL,
		     "Malformed action/metadata line [%llu], expected START_OBJECT but found [%s]",
		     ln, j ? "VALUE" : "malformed JSON");
		goto done;
	}
	a = j->child;
	if (!a) { /* {} : ES's parser meets the object's end where a name should be */
		fail(p, CM_EINVAL,
		     "Malformed action/metadata line [%llu], expected FIELD_NAME but found "
		     "[END_OBJECT]",
		     ln);
		goto done;
	}
	if (a->next) {
		fail(p, CM_EINVAL,
		     "Malformed action/metadata line [%llu], expected a single action", ln);
		goto done;
	}
	if (strcmp(a->string, "index") == 0)
		it.kind = CO_BULK_INDEX;
	else if (strcmp(a->string, "create") == 0)
		it.kind = CO_BULK_CREATE;
	else if (strcmp(a->string, "update") == 0)
		it.kind = CO_BULK_UPDATE;
	else if (strcmp(a->string, "delete") == 0)
		it.kind = CO_BULK_DELETE;
	else {
		fail(p, CM_EINVAL,
		     "Malformed action/metadata line [%llu], expected field [create], [delete], "
		     "[index] or [update] but found [%.60s]",
		     ln, a->string);
		goto done;
	}
	if (!cJSON_IsObject(a)) {
		fail(p, CM_EINVAL, "Malformed action/metadata line [%llu], expected START_OBJECT",
		     ln);
		goto done;
	}
	cJSON_ArrayForEach(c, a)
	{
		const char *k = c->string;
		/* a repeated key keeps its last value, as ES's parser does */
		if (strcmp(k, "_index") == 0 && cJSON_IsString(c)) {
			cm_free(MEM, it.index);
			it.index = cm_strdup(MEM, c->valuestring);
		} else if (strcmp(k, "_id") == 0 && (cJSON_IsString(c) || cJSON_IsNumber(c))) {
			cm_free(MEM, it.id);
			it.id = meta_str(c);
		} else if (strcmp(k, "routing") == 0 && (cJSON_IsString(c) || cJSON_IsNumber(c))) {
			cm_free(MEM, it.routing);
			it.routing = meta_str(c);
		} else if (strcmp(k, "version") == 0) {
			cm_free(MEM, ver);
			ver = meta_str(c);
		} else if (strcmp(k, "version_type") == 0) {
			cm_free(MEM, vt);
			vt = meta_str(c);
		} else if (strcmp(k, "if_seq_no") == 0) {
			cm_free(MEM, sq);
			sq = meta_str(c);
		} else if (strcmp(k, "if_primary_term") == 0) {
			cm_free(MEM, pt);
			pt = meta_str(c);
		} else if (strcmp(k, "op_type") == 0) {
			cm_free(MEM, opt);
			opt = meta_str(c);
		} else if (strcmp(k, "retry_on_conflict") == 0 && cJSON_IsNumber(c)) {
			/* clamped before the cast: a huge double into long is undefined */
			double d = c->valuedouble;
			it.retries = d > MAX_RETRIES ? MAX_RETRIES : d > 0 ? (long)d : 0;
		} else if (strcmp(k, "pipeline") == 0 && cJSON_IsString(c)) {
			cm_free(MEM, it.pipeline);
			it.pipeline = cm_strdup(MEM, c->valuestring);
		} else if (strcmp(k, "require_alias") == 0) {
			if (cJSON_IsBool(c))
				it.require_alias = cJSON_IsTrue(c);
			else if (cJSON_IsString(c) && (!strcmp(c->valuestring, "true") ||
			                               !strcmp(c->valuestring, "false")))
				it.require_alias = c->valuestring[0] == 't';
			else {
				fail(p, CM_EINVAL,
				     "Action/metadata line [%llu]: [require_alias] must be a boolean", ln);
				goto done;
			}
		} else if (strcmp(k, "_source") == 0) {
			char *t = cJSON_PrintUnformatted(c); /* what an update's "get" returns */
			cm_free(MEM, it.source);
			it.source = t ? cm_strdup(MEM, t) : NULL;
			cJSON_free(t);
		} else if (strcmp(k, "_type") == 0) {
			;
		} else {
			fail(p, CM_EINVAL,
			     "Action/metadata line [%llu] contains an unknown parameter [%.60s]",
			     ln, k);
			goto done;
		}
	}
	if (!it.index && p->dflt_index)
		it.index = cm_strdup(MEM, p->dflt_index);
	if (!it.index) {
		fail(p, CM_EVALIDATE, "Validation Failed: 1: index is missing;");
		goto done;
	}
	if (!it.routing && p->dflt_routing)
		it.routing = cm_strdup(MEM, p->dflt_routing);
	if ((it.kind == CO_BULK_DELETE || it.kind == CO_BULK_UPDATE) && (!it.id || !*it.id)) {
		fail(p, CM_EVALIDATE, "Validation Failed: 1: id is missing;");
		goto done;
	}
	cm_error_clear(&err);
	if (co_write_opts_parse(it.kind == CO_BULK_CREATE ? "create" : opt, ver, vt, sq, pt, NULL,
	                        &it.w, &err)) {
		fail(p, err.code, "%s", err.reason);
		goto done;
	}
	if (it.kind == CO_BULK_INDEX && it.w.create)
		it.kind = CO_BULK_CREATE; /* "op_type": "create": ES answers a create item */
	if (it.id && !*it.id && (it.kind == CO_BULK_INDEX || it.kind == CO_BULK_CREATE)) {
		/* the item fails, the others run (ES) */
		it.empty_id = true;
		cm_free(MEM, it.id);
		it.id = NULL;
	}
	if (it.id && !co_id_check(it.id, strlen(it.id), &err)) {
		fail(p, err.code, "%s", err.reason);
		goto done;
	}
	*out = it;
	memset(&it, 0, sizeof(it));
	ok = true;
done:
	co_bulk_action_clear(&it);
	cm_free(MEM, ver);
	cm_free(MEM, vt);
	cm_free(MEM, sq);
	cm_free(MEM, pt);
	cm_free(MEM, opt);
	cJSON_Delete(j);
	return ok;
}

static bool
blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

static void
emit(co_bulk_parser *p, co_bulk_action *a, const char *src, size_t len)
{
	p->items++;
	p->on_item(p->ctx, a, src, len);
}

static void
process_line(co_bulk_parser *p, const char *s, size_t n)
{
	co_bulk_action a;

	p->line_no++;
	if (n && s[n - 1] == '\r')
		n--;
	if (p->want_source) {
		/* any line, even a blank one, is the pending action's source */
		p->want_source = false;
		a = p->pend;
		memset(&p->pend, 0, sizeof(p->pend));
		emit(p, &a, s, n);
		return;
	}
	if (blank(s, n) || !parse_action(p, s, n, &a))
		return;
	if (a.kind == CO_BULK_DELETE) {
		emit(p, &a, NULL, 0);
	} else {
		p->pend = a;
		p->want_source = true;
	}
}

static bool
line_too_long(co_bulk_parser *p, size_t len)
{
	if (len <= p->max_line)
		return false;
	fail(p, CM_ETOOLARGE, "bulk line [%llu] is too long", (unsigned long long)p->line_no + 1);
	return true;
}

bool
co_bulk_parser_feed(co_bulk_parser *p, const char *data, size_t len)
{
	const char *s = data, *end = data + len;

	while (s < end && !p->failed) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		size_t n = (size_t)((nl ? nl : end) - s);
		/* checked before buffering, so a line never grows past the limit */
		if (line_too_long(p, p->line.len + n))
			break;
		if (!nl) {
			cm_buf_put(&p->line, s, n);
			break;
		}
		if (p->line.len) {
			cm_buf_put(&p->line, s, n);
			process_line(p, (const char *)p->line.data, p->line.len);
			cm_buf_reset(&p->line);
		} else {
			process_line(p, s, n);
		}
		s = nl + 1;
	}
	return !p->failed;
}

bool
co_bulk_parser_end(co_bulk_parser *p)
{
	if (p->failed)
		return false;
	if (p->line.len && !blank((const char *)p->line.data, p->line.len)) {
		/* ES requires the final newline; accept it missing only for a
		 * source line, which is unambiguous. */
		if (p->want_source)
			process_line(p, (const char *)p->line.data, p->line.len);
		else
			fail(p, CM_EINVAL,
			     "The bulk request must be terminated by a newline [\\n]");
	}
	cm_buf_reset(&p->line);
	if (!p->failed && p->want_source)
		fail(p, CM_EINVAL,
		     "Malformed action/metadata line [%llu], the action is missing its source line",
		     (unsigned long long)p->line_no);
	if (!p->failed && p->items == 0)
		fail(p, CM_EVALIDATE, "Validation Failed: 1: no requests added;");
	return !p->failed;
}
