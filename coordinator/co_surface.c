/* The parts of Elasticsearch's surface that clients probe before they do
 * any work: GET /_license and GET /_xpack answered as a basic-license
 * cluster, and the node and metric selection of GET /_nodes/{node}/{metric}
 * that sniffing clients use (/_nodes/_all/http). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/cm_sys.h"
#include "co_private.h"

/* ---- _license, _xpack ---- */

/* A stable license uid, the same from every node: from the cluster's
 * uuid (kept in the cluster state). Two FNV-1a hashes laid out as a
 * UUID. */
static void
license_uid(co_req *r, char *out, size_t cap)
{
	char buf[64];
	const char *u = co_cluster_uuid(r, buf, sizeof(buf));
	uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
	for (const char *p = u; *p; p++) {
		a = (a ^ (unsigned char)*p) * 0x100000001b3ull;
		b = (b ^ (unsigned char)*p) * 0x100000001b3ull + 1;
	}
	snprintf(out, cap, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32),
	         (unsigned)(a >> 16 & 0xffff), (unsigned)(a & 0xffff), (unsigned)(b >> 48),
	         (unsigned long long)(b & 0xffffffffffffull));
}

/* The basic license is self-issued: its date is when this node first
 * answered for it (there is no purchase date to show). */
static int64_t license_ms;
static pthread_once_t license_once = PTHREAD_ONCE_INIT;

static void
license_init(void)
{
	license_ms = cm_wall_ms();
}

static void
iso_ms(int64_t ms, char *buf, size_t cap)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
	         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

void
co_h_license(co_req *r)
{
	char uid[40], date[64];
	pthread_once(&license_once, license_init);
	license_uid(r, uid, sizeof(uid));
	iso_ms(license_ms, date, sizeof(date));
	cJSON *j = cJSON_CreateObject(), *l = cJSON_AddObjectToObject(j, "license");
	cJSON_AddStringToObject(l, "status", "active");
	cJSON_AddStringToObject(l, "uid", uid);
	cJSON_AddStringToObject(l, "type", "basic");
	cJSON_AddStringToObject(l, "issue_date", date);
	cJSON_AddNumberToObject(l, "issue_date_in_millis", (double)license_ms);
	cJSON_AddNumberToObject(l, "max_nodes", 1000);
	cJSON_AddNullToObject(l, "max_resource_units");
	cJSON_AddStringToObject(l, "issued_to", nd_cluster_name(r->node));
	cJSON_AddStringToObject(l, "issuer", "elasticsearch");
	cJSON_AddNumberToObject(l, "start_date_in_millis", -1);
	co_reply_json(r, 200, j);
}

/* X-Pack features: "available" is what a basic license allows in
 * Elasticsearch 7.10, "enabled" whether Shoal implements it. Only
 * security (users, roles, API keys) is implemented, and only when users
 * are configured. */
static const struct {
	const char *name;
	bool basic;
} features[] = {
    {"analytics", true},
    {"ccr", false},
    {"data_frame", true},
    {"data_science", true},
    {"data_streams", true},
    {"data_tiers", true},
    {"enrich", true},
    {"eql", true},
    {"flattened", true},
    {"frozen_indices", true},
    {"graph", false},
    {"ilm", true},
    {"logstash", false},
    {"ml", false},
    {"monitoring", true},
    {"rollup", true},
    {"searchable_snapshots", false},
    {"security", true},
    {"slm", true},
    {"spatial", true},
    {"sql", true},
    {"transform", true},
    {"vectors", true},
    {"voting_only", true},
    {"watcher", false},
};

static bool
category(const char *list, const char *name)
{
	if (!list || !*list)
		return true;
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == n && strncmp(p, name, n) == 0)
			return true;
		p += l + (e ? 1 : 0);
	}
	return false;
}

void
co_h_xpack(co_req *r)
{
	const char *cats = co_param_get(r, "categories");
	char uid[40];
	cJSON *j = cJSON_CreateObject(), *o;

	if (cats) {
		for (const char *p = cats; *p;) {
			const char *e = strchr(p, ',');
			size_t l = e ? (size_t)(e - p) : strlen(p);
			if (!((l == 5 && !strncmp(p, "build", 5)) ||
			      (l == 7 && !strncmp(p, "license", 7)) ||
			      (l == 8 && !strncmp(p, "features", 8)))) {
				cJSON_Delete(j);
				co_reply_errorf(r, CM_EINVAL, NULL, "Unknown category [%.*s]",
				                (int)(l > 60 ? 60 : l), p);
				return;
			}
			p += l + (e ? 1 : 0);
		}
	}
	if (category(cats, "build")) {
		o = cJSON_AddObjectToObject(j, "build");
		cJSON_AddStringToObject(o, "hash", "747e1cc71def077253878a59143c1f785afa92b9");
		cJSON_AddStringToObject(o, "date", "2021-01-13T00:42:12.435326Z");
	}
	if (category(cats, "license")) {
		license_uid(r, uid, sizeof(uid));
		o = cJSON_AddObjectToObject(j, "license");
		cJSON_AddStringToObject(o, "uid", uid);
		cJSON_AddStringToObject(o, "type", "basic");
		cJSON_AddStringToObject(o, "mode", "basic");
		cJSON_AddStringToObject(o, "status", "active");
	}
	if (category(cats, "features")) {
		o = cJSON_AddObjectToObject(j, "features");
		for (size_t i = 0; i < sizeof(features) / sizeof(features[0]); i++) {
			cJSON *f = cJSON_AddObjectToObject(o, features[i].name);
			bool on = !strcmp(features[i].name, "security") && r->auth != NULL;
			cJSON_AddBoolToObject(f, "available", features[i].basic);
			cJSON_AddBoolToObject(f, "enabled", on);
		}
	}
	cJSON_AddStringToObject(j, "tagline", "You know, for X");
	co_reply_json(r, 200, j);
}

/* ---- _nodes/{node}/{metric} ---- */

static const char *const node_metrics[] = {
    "settings", "os",      "process", "jvm",          "thread_pool", "transport",
    "http",     "plugins", "ingest",  "aggregations", "indices",
};

static bool
is_metric(const char *s, size_t n)
{
	if (n == 4 && !strncmp(s, "_all", 4))
		return true;
	for (size_t i = 0; i < sizeof(node_metrics) / sizeof(node_metrics[0]); i++)
		if (strlen(node_metrics[i]) == n && !strncmp(s, node_metrics[i], n))
			return true;
	return false;
}

/* Every comma-separated part of s is a metric name. */
static bool
all_metrics(const char *s)
{
	for (const char *p = s; *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (!is_metric(p, l))
			return false;
		p += l + (e ? 1 : 0);
	}
	return true;
}

/* Does node (id, entry) match one of the comma-separated selectors? */
static bool
node_selected(co_req *r, const char *sel, const char *id, const cJSON *entry)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(entry, "name");
	char one[256];
	for (const char *p = sel; *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		snprintf(one, sizeof(one), "%.*s", (int)(l < 255 ? l : 255), p);
		p += l + (e ? 1 : 0);
		if (!strcmp(one, "_all") || !strcmp(one, "*"))
			return true;
		if (!strcmp(one, "_local") &&
		    (!strcmp(id, nd_node_id(r->node)) ||
		     (cJSON_IsString(name) && !strcmp(name->valuestring, nd_node_name(r->node)))))
			return true;
		if (!fnmatch(one, id, 0) ||
		    (cJSON_IsString(name) && !fnmatch(one, name->valuestring, 0)))
			return true;
	}
	return false;
}

bool
co_nodes_parse(co_req *r, const char **node_sel, const char **metric_sel)
{
	const char *a = co_seg(r, 1), *b = co_seg(r, 2);
	*node_sel = "_all";
	*metric_sel = "_all";
	if (a && b) {
		*node_sel = a;
		*metric_sel = b;
		if (!all_metrics(b)) {
			co_reply_errorf(r, CM_EINVAL, NULL,
			                "request [%.300s] contains unrecognized metric: [%.100s]",
			                r->path, b);
			return false;
		}
	} else if (a) {
		/* one segment: metrics when every part is one, else node ids */
		if (all_metrics(a))
			*metric_sel = a;
		else
			*node_sel = a;
	}
	return true;
}

void
co_nodes_select(co_req *r, cJSON *nodes, const char *node_sel, const char *metric_sel)
{
	cJSON *c, *next;
	for (c = nodes->child; c; c = next) {
		next = c->next;
		if (!node_selected(r, node_sel, c->string, c)) {
			cJSON_Delete(cJSON_DetachItemViaPointer(nodes, c));
			continue;
		}
		if (category(metric_sel, "_all"))
			continue;
		for (size_t i = 0; i < sizeof(node_metrics) / sizeof(node_metrics[0]); i++)
			if (!category(metric_sel, node_metrics[i]))
				cJSON_DeleteItemFromObjectCaseSensitive(c, node_metrics[i]);
	}
}
