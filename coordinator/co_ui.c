/* The cluster page: its static files (GET /_shoal/ui/, compiled in, with
 * an ETag), and the JSON it reads besides the Elasticsearch APIs:
 * /_shoal/stats/fanout and /_shoal/stats/nodes. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "co_private.h"
#include "co_ui.h"

#define MEM CM_MEM_COORDINATOR

/* Same-origin only: the page loads nothing from elsewhere (works offline)
 * and cannot be framed. */
static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                          "base-uri 'none'; form-action 'none'";

static bool
etag_matches(const char *header, const char *etag)
{
	/* If-None-Match: "a", "b" or * */
	if (!header)
		return false;
	if (strcmp(header, "*") == 0)
		return true;
	size_t n = strlen(etag);
	for (const char *p = strstr(header, etag); p; p = strstr(p + 1, etag))
		if ((p == header || p[-1] == ' ' || p[-1] == ',' || p[-1] == '/') &&
		    (p[n] == 0 || p[n] == ',' || p[n] == ' '))
			return true;
	return false;
}

void
co_h_ui_file(co_req *r)
{
	const char *file = co_seg(r, 2);
	size_t pl = strlen(r->path);

	if (!file) {
		/* "/_shoal/ui" without the slash: relative links need it */
		if (pl == 0 || r->path[pl - 1] != '/') {
			co_reply_header(r, "Location", "/_shoal/ui/");
			co_reply_text(r, 301, "text/plain; charset=UTF-8", "/_shoal/ui/\n", 12);
			return;
		}
		file = "index.html";
	}
	for (size_t i = 0; i < co_ui_nassets; i++) {
		const co_ui_asset *a = &co_ui_assets[i];
		if (strcmp(a->name, file) != 0)
			continue;
		co_reply_header(r, "ETag", a->etag);
		/* revalidate every time: a new binary serves a new page at once,
		 * an unchanged one costs a 304 */
		co_reply_header(r, "Cache-Control", "no-cache");
		co_reply_header(r, "X-Content-Type-Options", "nosniff");
		co_reply_header(r, "Content-Security-Policy", csp);
		co_reply_header(r, "Referrer-Policy", "no-referrer");
		if (etag_matches(r->if_none_match, a->etag)) {
			co_reply_text(r, 304, a->type, "", 0);
			return;
		}
		co_reply_text(r, 200, a->type, (const char *)a->data, a->len);
		return;
	}
	co_reply_errorf(r, CM_ENOTFOUND, "resource_not_found_exception",
	                "no file [%.100s] in the cluster page", file);
}

void
co_h_stats_fanout(co_req *r)
{
	cm_buf out;
	cm_buf_init(&out, MEM);
	nd_cluster_fanout_json(nd_cluster_of(r->node), &out);
	co_reply_raw_json(r, 200, (const char *)out.data, out.len);
	cm_buf_free(&out);
}

/* Who the page runs as, so it can say so without asking
 * _security/_authenticate (a 400 when security is off). */
static void
add_security(co_req *r, cJSON *j)
{
	cJSON *o = cJSON_AddObjectToObject(j, "security");
	cJSON_AddBoolToObject(o, "enabled", r->auth != NULL);
	if (r->auth) {
		cJSON_AddStringToObject(o, "user", r->principal.user);
		cJSON_AddStringToObject(o, "role", co_role_name(r->principal.role));
	}
}

void
co_h_stats_nodes(co_req *r)
{
	nd_cluster *cl = nd_cluster_of(r->node);
	cJSON *j = NULL;
	cm_buf out;
	cm_buf_init(&out, MEM);
	if (cl) {
		nd_cluster_nodes_json(cl, &out);
		j = cJSON_ParseWithLength((const char *)out.data, out.len);
	}
	if (!j) {
		/* solo: no cluster to ask; _nodes/stats has this node */
		j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "cluster_name", nd_cluster_name(r->node));
		cJSON_AddStringToObject(j, "self", nd_node_name(r->node));
		cJSON_AddBoolToObject(j, "solo", true);
		cJSON_AddArrayToObject(j, "nodes");
	}
	cm_buf_free(&out);
	add_security(r, j);
	co_reply_json(r, 200, j);
}
