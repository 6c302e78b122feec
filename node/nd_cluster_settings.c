/* Cluster settings as the node acts on them: parsed once per adopted
 * state (cl_settings_apply_locked) into a sorted key table, transient over
 * persistent, and the allocation fields the allocator, the allocation
 * explain and membership read, with their defaults in one place. Readers
 * take a reference (cl_settings_get) and keep one table for a round of
 * decisions; a newer state swaps in a new table. */
#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "nd_cluster_private.h"

#define MEM CM_MEM_NODE

typedef struct kv {
	char *key, *val;
} kv;

static int
kv_cmp(const void *a, const void *b)
{
	return strcmp(((const kv *)a)->key, ((const kv *)b)->key);
}

/* A value as text: strings as they are, numbers as integers (what every
 * cluster key takes), booleans as true/false; NULL for anything else. */
static char *
value_text(const cJSON *v)
{
	char buf[64];
	if (cJSON_IsString(v))
		return cm_strdup(MEM, v->valuestring);
	if (cJSON_IsNumber(v))
		snprintf(buf, sizeof(buf), "%lld", (long long)v->valuedouble);
	else if (cJSON_IsBool(v))
		snprintf(buf, sizeof(buf), "%s", cJSON_IsTrue(v) ? "true" : "false");
	else
		return NULL;
	return cm_strdup(MEM, buf);
}

static const char *
lookup(const cl_settings *s, const char *key)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(s->kv[mid].key, key);
		if (c == 0)
			return s->kv[mid].val;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

cl_settings *
cl_settings_parse(const char *text)
{
	cl_settings *s = cm_calloc(MEM, 1, sizeof(*s));
	cJSON *j = text ? cJSON_Parse(text) : NULL;
	const char *secs[] = {"transient", "persistent"};
	size_t cap = 0;
	atomic_init(&s->refs, 1);
	for (int k = 0; k < 2; k++) {
		const cJSON *c, *sec = cJSON_GetObjectItemCaseSensitive(j, secs[k]);
		cJSON_ArrayForEach(c, sec) cap++;
	}
	s->kv = cm_calloc(MEM, cap + 1, sizeof(kv));
	for (int k = 0; k < 2; k++) {
		const cJSON *c, *sec = cJSON_GetObjectItemCaseSensitive(j, secs[k]);
		cJSON_ArrayForEach(c, sec)
		{
			char *v = c->string ? value_text(c) : NULL;
			bool seen = false;
			for (size_t i = 0; v && i < s->n && !seen; i++)
				seen = strcmp(s->kv[i].key, c->string) == 0; /* transient first */
			if (!v || seen) {
				cm_free(MEM, v);
				continue;
			}
			s->kv[s->n++] = (kv){cm_strdup(MEM, c->string), v};
		}
	}
	cJSON_Delete(j);
	qsort(s->kv, s->n, sizeof(kv), kv_cmp);

	const char *v = lookup(s, "cluster.routing.allocation.enable");
	s->enable = !v                                ? RP_ALLOC_ALL
	            : strcmp(v, "primaries") == 0     ? RP_ALLOC_PRIMARIES
	            : strcmp(v, "new_primaries") == 0 ? RP_ALLOC_NEW_PRIMARIES
	            : strcmp(v, "none") == 0          ? RP_ALLOC_NONE
	                                              : RP_ALLOC_ALL;
	snprintf(s->enable_text, sizeof(s->enable_text), "%s", v ? v : "all");
	v = lookup(s, "cluster.routing.rebalance.enable");
	s->rebalance = !v                            ? RP_REBALANCE_ALL
	               : strcmp(v, "primaries") == 0 ? RP_REBALANCE_PRIMARIES
	               : strcmp(v, "replicas") == 0  ? RP_REBALANCE_REPLICAS
	               : strcmp(v, "none") == 0      ? RP_REBALANCE_NONE
	                                             : RP_REBALANCE_ALL;
	v = lookup(s, "cluster.routing.allocation.node_concurrent_recoveries");
	s->max_recoveries = v && atoi(v) > 0 ? atoi(v) : 2;
	s->exclude_name = lookup(s, "cluster.routing.allocation.exclude._name");
	s->exclude_ip = lookup(s, "cluster.routing.allocation.exclude._ip");
	return s;
}

void
cl_settings_put(cl_settings *s)
{
	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	for (size_t i = 0; i < s->n; i++) {
		cm_free(MEM, s->kv[i].key);
		cm_free(MEM, s->kv[i].val);
	}
	cm_free(MEM, s->kv);
	cm_free(MEM, s);
}

void
cl_settings_apply_locked(nd_cluster *cl)
{
	cl_settings *s = cl_settings_parse(cl->state ? cl->state->settings : NULL), *old;
	pthread_mutex_lock(&cl->settings_mu);
	old = cl->settings;
	cl->settings = s;
	pthread_mutex_unlock(&cl->settings_mu);
	cl_settings_put(old);
}

cl_settings *
cl_settings_get(nd_cluster *cl)
{
	pthread_mutex_lock(&cl->settings_mu);
	cl_settings *s = cl->settings;
	if (s)
		atomic_fetch_add(&s->refs, 1);
	pthread_mutex_unlock(&cl->settings_mu);
	if (!s) /* before the first state: the defaults */
		s = cl_settings_parse(NULL);
	return s;
}

bool
cl_setting_in(const cl_settings *s, const char *key, char *out, size_t cap)
{
	const char *v = s ? lookup(s, key) : NULL;
	if (v)
		snprintf(out, cap, "%s", v);
	return v != NULL;
}

static bool
listed(const char *list, const char *value)
{
	char *copy = cm_strdup(MEM, list), *save = NULL, *tok;
	bool hit = false;
	for (tok = strtok_r(copy, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		hit = *tok && fnmatch(tok, value, 0) == 0;
	}
	cm_free(MEM, copy);
	return hit;
}

bool
cl_excluded_in(nd_cluster *cl, const cl_settings *s, int i)
{
	const nd_cl_node *nd = &cl->nodes[i];
	if (s->exclude_name && listed(s->exclude_name, nd->name))
		return true;
	if (s->exclude_ip) {
		char host[ND_CL_ADDR];
		snprintf(host, sizeof(host), "%s", nd->http);
		char *colon = strrchr(host, ':');
		if (colon)
			*colon = 0;
		if (listed(s->exclude_ip, host))
			return true;
	}
	return false;
}

int
cl_placeable(nd_cluster *cl, int *out)
{
	cl_settings *s = cl_settings_get(cl);
	int n = cl_placeable_in(cl, s, out);
	cl_settings_put(s);
	return n;
}

int
cl_placeable_in(nd_cluster *cl, const cl_settings *s, int *out)
{
	int n = 0;
	for (int i = 0; i < cl->nn; i++) {
		const nd_cl_node *nd = &cl->nodes[i];
		bool up = i == cl->self
		              ? atomic_load(&nd->registered) || !cl->etcd
		              : (cl->etcd ? atomic_load(&nd->registered) : cl_alive(cl, i));
		if (nd->data && up && cl_node_joined(cl, i) && !cl_excluded_in(cl, s, i))
			out[n++] = i;
	}
	return n;
}
