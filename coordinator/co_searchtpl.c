/* Search templates: _search/template, _msearch/template and
 * _render/template. A template (inline "source", a string or an object,
 * or a stored script's "id") is rendered with its "params" by
 * search/mustache.c; the rendered body then goes through _search or
 * _msearch as if the client had sent it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../search/sr.h"
#include "co_private.h"

#define MEM CM_MEM_COORDINATOR

/* Renders one template request ({"source"|"id", "params", "explain",
 * "profile"}) into the text of a search body, in out. */
static cm_err
render_request(co_req *r, const cJSON *t, cm_buf *out, cm_error *err)
{
	const cJSON *src = NULL, *id = NULL, *params = NULL, *explain = NULL, *profile = NULL;
	if (!cJSON_IsObject(t))
		return cm_error_set(err, CM_EPARSE, "[search_template] expected an object");
	for (const cJSON *v = t->child; v; v = v->next) {
		const char *k = v->string;
		if (!strcmp(k, "source") || !strcmp(k, "inline"))
			src = v;
		else if (!strcmp(k, "id"))
			id = v;
		else if (!strcmp(k, "params"))
			params = v;
		else if (!strcmp(k, "explain"))
			explain = v;
		else if (!strcmp(k, "profile"))
			profile = v;
		else
			return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
			                         "[search_template] unknown field [%s]", k);
	}
	if (params && !cJSON_IsObject(params))
		return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                         "[search_template] params must be an object, found %s",
		                         cJSON_IsArray(params) ? "START_ARRAY" : "a value");
	if ((explain && !cJSON_IsBool(explain)) || (profile && !cJSON_IsBool(profile)))
		return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                         "[search_template] %s must be a boolean",
		                         explain && !cJSON_IsBool(explain) ? "explain" : "profile");
	if (src && id)
		return cm_error_set(err, CM_EINVAL,
		                    "[search_template] takes one of [source] or [id], not both");
	char *text = NULL;
	if (src && cJSON_IsString(src))
		text = cm_strdup(MEM, src->valuestring);
	else if (src && cJSON_IsObject(src)) {
		char *p = cJSON_PrintUnformatted(src);
		text = cm_strdup(MEM, p ? p : "{}");
		cJSON_free(p);
	} else if (src)
		return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                         "[search_template] source must be a string or an object");
	else if (id && cJSON_IsString(id)) {
		if (!(text = co_script_source(r->node, id->valuestring)))
			return cm_error_set(err, CM_ENOTFOUND, "unable to find script [%s]",
			                    id->valuestring);
	} else if (id)
		return cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                         "[search_template] id must be a string");
	else
		return cm_error_set(err, CM_EVALIDATE,
		                    "Validation Failed: 1: template's script is missing;");
	cm_buf rendered;
	cm_buf_init(&rendered, MEM);
	cm_err rc = sr_mustache_render(text, strlen(text), params, &rendered, err);
	cm_buf_put_u8(&rendered, 0); /* for the error message; not part of the text */
	rendered.len--;
	cm_free(MEM, text);
	cJSON *body = NULL;
	if (!rc) {
		/* one JSON object and nothing after it but spaces */
		const char *end = NULL, *lim = (const char *)rendered.data + rendered.len;
		body = cJSON_ParseWithLengthOpts((const char *)rendered.data, rendered.len, &end,
		                                 false);
		while (body && end && end < lim && strchr(" \t\r\n", *end))
			end++;
		if (body && end != lim) {
			cJSON_Delete(body);
			body = NULL;
		}
	}
	if (!rc && !cJSON_IsObject(body))
		rc = cm_error_set_type(err, CM_EPARSE, "x_content_parse_exception",
		                       "the rendered template is not a JSON object: %.200s",
		                       rendered.len ? (const char *)rendered.data : "(empty)");
	cm_buf_free(&rendered);
	if (!rc) {
		if (explain)
			cJSON_AddBoolToObject(body, "explain", cJSON_IsTrue(explain));
		if (profile)
			cJSON_AddBoolToObject(body, "profile", cJSON_IsTrue(profile));
		char *p = cJSON_PrintUnformatted(body);
		cm_buf_put(out, p, strlen(p));
		cJSON_free(p);
	}
	cJSON_Delete(body);
	return rc;
}

/* The request body as a template request, replying on error. */
static cJSON *
template_body(co_req *r)
{
	bool bad;
	cJSON *t = co_body_json(r, &bad);
	if (bad)
		return NULL;
	if (!t) {
		co_reply_errorf(r, CM_EVALIDATE, NULL,
		                "Validation Failed: 1: template's script is missing;");
		return NULL;
	}
	return t;
}

void
co_h_search_template(co_req *r)
{
	cJSON *t = template_body(r);
	cm_buf out;
	cm_error err;
	if (!t)
		return;
	cm_error_clear(&err);
	cm_buf_init(&out, MEM);
	if (render_request(r, t, &out, &err)) {
		co_reply_error(r, &err, NULL);
	} else {
		/* the rendered body stands for the request's */
		cm_buf_reset(&r->body);
		cm_buf_put(&r->body, out.data, out.len);
		co_h_search(r);
	}
	cm_buf_free(&out);
	cJSON_Delete(t);
}

void
co_h_render_template(co_req *r)
{
	cJSON *t = NULL;
	cm_buf out;
	cm_error err;
	const char *id = co_seg(r, 2);
	cm_error_clear(&err);
	if (id) {
		/* GET /_render/template/{id}: the stored script with the body's params */
		bool bad;
		cJSON *b = co_body_json(r, &bad);
		if (bad)
			return;
		t = cJSON_CreateObject();
		cJSON_AddStringToObject(t, "id", id);
		cJSON *p = cJSON_DetachItemFromObjectCaseSensitive(b, "params");
		if (p)
			cJSON_AddItemToObject(t, "params", p);
		cJSON_Delete(b);
	} else if (!(t = template_body(r))) {
		return;
	}
	cm_buf_init(&out, MEM);
	if (render_request(r, t, &out, &err)) {
		co_reply_error(r, &err, NULL);
	} else {
		cJSON *j = cJSON_CreateObject();
		cJSON_AddItemToObject(j, "template_output",
		                      cJSON_ParseWithLength((const char *)out.data, out.len));
		co_reply_json(r, 200, j);
	}
	cm_buf_free(&out);
	cJSON_Delete(t);
}

/* Header and template lines, each template rendered to a search body:
 * the whole request then runs as an _msearch. A template that cannot be
 * rendered answers its error in its place in "responses", as in ES. */
void
co_h_msearch_template(co_req *r)
{
	const char *p = (const char *)r->body.data, *end = p + r->body.len;
	cm_buf nd, one;
	cm_error *errs = NULL;
	size_t nerrs = 0;
	int line = 0;
	bool header = true;
	cm_buf_init(&nd, MEM);
	cm_buf_init(&one, MEM);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		const char *lp = p;
		p = nl ? nl + 1 : end;
		line++;
		while (len && strchr(" \t\r", lp[len - 1]))
			len--;
		if (header) {
			if (!len)
				continue;
			cm_buf_put(&nd, lp, len);
			cm_buf_put_u8(&nd, '\n');
			header = false;
			continue;
		}
		header = true;
		if (nerrs >= 4096) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "too many searches in one _msearch/template");
			cm_buf_free(&nd);
			cm_buf_free(&one);
			cm_free(MEM, errs);
			return;
		}
		errs = cm_realloc(MEM, errs, (nerrs + 1) * sizeof(*errs));
		cm_error *e = &errs[nerrs++];
		cm_error_clear(e);
		cJSON *t = cJSON_ParseWithLength(lp, len);
		cm_buf_reset(&one);
		cm_err rc = t ? render_request(r, t, &one, e)
		              : cm_error_set(e, CM_EPARSE, "malformed template on line [%d]", line);
		cJSON_Delete(t);
		if (rc)
			cm_buf_put(&nd, "{}", 2);
		else
			cm_buf_put(&nd, one.data, one.len);
		cm_buf_put_u8(&nd, '\n');
	}
	cm_buf_reset(&r->body);
	cm_buf_put(&r->body, nd.data, nd.len);
	cm_buf_free(&nd);
	cm_buf_free(&one);
	co_msearch_run(r, errs, nerrs);
	cm_free(MEM, errs);
}
