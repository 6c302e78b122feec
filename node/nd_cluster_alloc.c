/* Operators and the allocator: POST _cluster/reroute (move, cancel,
 * allocate_replica), applied by the master to a copy of the state like any
 * change, and GET _cluster/allocation/explain, which says from the routing,
 * the membership and the settings why a copy is where it is or why it is
 * unassigned. docs/cluster.md. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "nd_cluster_private.h"

#define MEM CM_MEM_NODE

static int
node_num(nd_cluster *cl, const char *name)
{
	for (int i = 0; name && i < cl->nn; i++)
		if (strcmp(cl->nodes[i].name, name) == 0)
			return i;
	return -1;
}

static int
copy_at(const rp_route *ro, int node)
{
	for (int c = 0; c < ro->ncopies; c++)
		if (ro->copies[c] == node)
			return c;
	return -1;
}

/* Whether node is in the placeable set (computed before meta_lock:
 * cl_placeable reads the settings under it). */
static bool
placeable(const int *data, int n, int node)
{
	for (int k = 0; k < n; k++)
		if (data[k] == node)
			return true;
	return false;
}

static const char *
str_of(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The shard a command names; NULL (err set) when there is none. */
static rp_route *
cmd_route(rp_state *st, const char *cmd, const cJSON *a, int *shard, cm_error *err)
{
	const char *index = str_of(a, "index");
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(a, "shard");
	rp_index *ix = index ? rp_state_index(st, index) : NULL;
	if (!index || !cJSON_IsNumber(s)) {
		cm_error_set(err, CM_EINVAL, "[%s] requires [index] and [shard]", cmd);
		return NULL;
	}
	if (!ix) {
		cm_error_set(err, CM_ENOINDEX, "no such index [%s]", index);
		return NULL;
	}
	*shard = (int)s->valuedouble;
	if (*shard < 0 || *shard >= ix->nshards) {
		cm_error_set(err, CM_EINVAL, "[%s] shard [%d] is out of range: [%s] has %d shards",
		             cmd, *shard, index, ix->nshards);
		return NULL;
	}
	return &ix->routes[*shard];
}

static cm_err
reroute_one(nd_cluster *cl, rp_state *next, const char *cmd, const cJSON *a, const int *pdata,
            int npdata, cm_error *err)
{
	int shard;
	rp_route *ro = cmd_route(next, cmd, a, &shard, err);
	const char *index = str_of(a, "index");
	if (!ro)
		return err->code;
	if (strcmp(cmd, "move") == 0) {
		const char *fn = str_of(a, "from_node"), *tn = str_of(a, "to_node");
		int from = node_num(cl, fn), to = node_num(cl, tn);
		if (!fn || !tn)
			return cm_error_set(err, CM_EINVAL,
			                    "[move] requires [from_node] and [to_node]");
		if (from < 0 || copy_at(ro, from) < 0 || !((ro->in_sync >> from) & 1))
			return cm_error_set(
			    err, CM_EINVAL,
			    "[move_allocation] can't move [%s][%d], failed to find it "
			    "on node {%s}",
			    index, shard, fn);
		if (to < 0 || !placeable(pdata, npdata, to))
			return cm_error_set(
			    err, CM_EINVAL,
			    "[move_allocation] can't move [%s][%d] from {%s} to {%s}: "
			    "the target is not a member that may take copies",
			    index, shard, fn, tn);
		if (copy_at(ro, to) >= 0)
			return cm_error_set(
			    err, CM_EINVAL,
			    "[move_allocation] can't move [%s][%d] from {%s} to {%s}: "
			    "a copy of the shard is already on {%s}",
			    index, shard, fn, tn, tn);
		if (ro->relocating_from >= 0 || ro->ncopies >= RP_MAX_COPIES)
			return cm_error_set(err, CM_EINVAL,
			                    "[move_allocation] can't move [%s][%d]: it is already "
			                    "relocating",
			                    index, shard);
		ro->copies[ro->ncopies++] = to; /* out of sync: it recovers, then from goes */
		ro->relocating_from = from;
		return CM_OK;
	}
	if (strcmp(cmd, "cancel") == 0) {
		const char *nn = str_of(a, "node");
		const cJSON *ap = cJSON_GetObjectItemCaseSensitive(a, "allow_primary");
		int node = node_num(cl, nn), c = node >= 0 ? copy_at(ro, node) : -1;
		if (c < 0)
			return cm_error_set(
			    err, CM_EINVAL,
			    "[cancel_allocation] can't cancel [%s][%d], failed to find "
			    "it on node {%s}",
			    index, shard, nn ? nn : "");
		if (node == ro->primary && !cJSON_IsTrue(ap))
			return cm_error_set(
			    err, CM_EINVAL,
			    "[cancel_allocation] can't cancel [%s][%d] on node {%s}, "
			    "shard is primary and started",
			    index, shard, nn);
		if (node == ro->primary)
			return cm_error_set(
			    err, CM_EINVAL,
			    "[cancel_allocation] cancelling the primary of [%s][%d] is "
			    "not supported: move it instead",
			    index, shard);
		ro->in_sync &= ~(1ull << node);
		if (ro->relocating_from == node)
			ro->relocating_from = -1;
		else if (ro->relocating_from >= 0 && !((ro->in_sync >> node) & 1))
			ro->relocating_from = -1; /* the relocation target went: nothing moves */
		memmove(&ro->copies[c], &ro->copies[c + 1],
		        (size_t)(ro->ncopies - c - 1) * sizeof(int));
		ro->ncopies--;
		return CM_OK;
	}
	if (strcmp(cmd, "allocate_replica") == 0) {
		const char *nn = str_of(a, "node");
		int node = node_num(cl, nn);
		rp_index *ix = rp_state_index(next, index);
		if (node < 0 || !placeable(pdata, npdata, node))
			return cm_error_set(
			    err, CM_EINVAL,
			    "[allocate_replica] allocation of [%s][%d] on node {%s} is "
			    "not allowed: not a member that may take copies",
			    index, shard, nn ? nn : "");
		if (copy_at(ro, node) >= 0)
			return cm_error_set(
			    err, CM_EINVAL,
			    "[allocate_replica] allocation of [%s][%d] on node {%s} is "
			    "not allowed: a copy of this shard is already there",
			    index, shard, nn);
		int live = 0;
		for (int c = 0; c < ro->ncopies; c++)
			live += atomic_load(&cl->nodes[ro->copies[c]].registered) ||
			        ro->copies[c] == cl->self;
		if (live >= 1 + ix->nreplicas || ro->ncopies >= RP_MAX_COPIES)
			return cm_error_set(err, CM_EINVAL,
			                    "[allocate_replica] all copies of [%s][%d] are already "
			                    "assigned",
			                    index, shard);
		ro->copies[ro->ncopies++] = node;
		return CM_OK;
	}
	return cm_error_set(err, CM_EINVAL, "unknown reroute command [%s]", cmd);
}

/* One entry of the reroute reply's explanations, as Elasticsearch's
 * RerouteExplanation renders it. */
static void
explain_cmd(cJSON *explanations, const cJSON *c, const cm_error *failed)
{
	char decider[64];
	cJSON *x = cJSON_CreateObject(), *d = cJSON_CreateObject();
	cJSON_AddStringToObject(x, "command", c->child->string);
	cJSON_AddItemToObject(x, "parameters", cJSON_Duplicate(c->child, true));
	snprintf(decider, sizeof(decider), "%s_allocation_command",
	         strcmp(c->child->string, "allocate_replica") == 0 ? "allocate_replica"
	                                                             : c->child->string);
	cJSON_AddStringToObject(d, "decider", decider);
	cJSON_AddStringToObject(d, "decision", failed ? "NO" : "YES");
	cJSON_AddStringToObject(d, "explanation",
	                        failed ? failed->reason : "the command can be applied");
	cJSON_AddItemToArray(cJSON_AddArrayToObject(x, "decisions"), d);
	cJSON_AddItemToArray(explanations, x);
}

cm_err
cl_reroute_locked(nd_cluster *cl, rp_state *next, const cJSON *body, const int *pdata, int npdata,
                  cJSON *explanations, cm_error *err)
{
	const cJSON *cmds = cJSON_GetObjectItemCaseSensitive(body, "commands"), *c;
	bool explain = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "explain"));
	if (!cl->etcd)
		return cm_error_set(err, CM_EINVAL,
		                    "_cluster/reroute needs a cluster on etcd (a static cluster "
		                    "places copies by formula)");
	if (cmds && !cJSON_IsArray(cmds))
		return cm_error_set(err, CM_EPARSE, "[commands] must be an array");
	cJSON_ArrayForEach(c, cmds)
	{
		if (!cJSON_IsObject(c) || !c->child || c->child->next || !cJSON_IsObject(c->child))
			return cm_error_set(err, CM_EPARSE,
			                    "each reroute command is an object with one key");
		const char *k = c->child->string;
		if (strcmp(k, "move") && strcmp(k, "cancel") && strcmp(k, "allocate_replica"))
			return cm_error_set(
			    err, CM_EINVAL,
			    "unknown reroute command [%s] (move, cancel, allocate_replica)", k);
	}
	cJSON_ArrayForEach(c, cmds)
	{
		cm_err rc = reroute_one(cl, next, c->child->string, c->child, pdata, npdata, err);
		if (rc && explain && rc != CM_ENOINDEX) {
			explain_cmd(explanations, c, err); /* reported NO, not applied */
			cm_error_clear(err);
			continue;
		}
		if (rc)
			return rc; /* next is dropped whole: nothing is half-applied */
		if (explain)
			explain_cmd(explanations, c, NULL);
	}
	return CM_OK;
}

/* ---- explain ---- */

static void
decider(cJSON *list, const char *name, const char *decision, const char *fmt, ...)
{
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "decider", name);
	cJSON_AddStringToObject(d, "decision", decision);
	cJSON_AddStringToObject(d, "explanation", text);
	cJSON_AddItemToArray(list, d);
}

/* Why node i may or may not take a copy of ro: the deciders that say no. */
static const char *
node_decision(nd_cluster *cl, const cl_settings *set, const rp_route *ro, int i, int max_rec,
              const char *enable, cJSON *deciders)
{
	const nd_cl_node *nd = &cl->nodes[i];
	const char *verdict = "yes";
	bool member = atomic_load(&nd->registered);
	if (!member) {
		decider(deciders, "node_left", "NO",
		        "node [%s] is not a member (its lease expired)", nd->name);
		return "no";
	}
	if (copy_at(ro, i) >= 0) {
		decider(deciders, "same_shard", "NO",
		        "a copy of this shard is already allocated to this node [%s]", nd->name);
		verdict = "no";
	}
	if (cl_excluded_in(cl, set, i)) {
		decider(
		    deciders, "filter", "NO",
		    "node matches cluster setting [cluster.routing.allocation.exclude] filters");
		verdict = "no";
	}
	if (strcmp(enable, "all") != 0) {
		decider(deciders, "enable", "NO",
		        "replica allocations are forbidden due to cluster setting "
		        "[cluster.routing.allocation.enable=%s]",
		        enable);
		verdict = "no";
	}
	if (!cl_node_joined(cl, i)) {
		decider(deciders, "node_version", "NO",
		        "node [%s] has not joined since it (re)started", nd->name);
		verdict = "no";
	}
	if (strcmp(verdict, "yes") == 0) {
		int incoming = 0;
		pthread_mutex_lock(&cl->meta_lock);
		for (size_t x = 0; x < cl->state->nindices; x++)
			for (int s = 0; s < cl->state->indices[x].nshards; s++) {
				const rp_route *r = &cl->state->indices[x].routes[s];
				incoming += copy_at(r, i) >= 0 && !((r->in_sync >> i) & 1);
			}
		pthread_mutex_unlock(&cl->meta_lock);
		if (incoming >= max_rec) {
			decider(
			    deciders, "throttling", "THROTTLE",
			    "reached the limit of incoming shard recoveries [%d], cluster setting "
			    "[cluster.routing.allocation.node_concurrent_recoveries=%d]",
			    incoming, max_rec);
			verdict = "throttled";
		}
	}
	return verdict;
}

cm_err
nd_cluster_allocation_explain(nd_cluster *cl, const char *body, char **out, cm_error *err)
{
	cJSON *b = body && *body ? cJSON_Parse(body) : NULL;
	*out = NULL;
	if (body && *body && !cJSON_IsObject(b)) {
		cJSON_Delete(b);
		return cm_error_set(err, CM_EPARSE, "allocation explain body must be an object");
	}
	const char *want_index = str_of(b, "index"), *want_node = str_of(b, "current_node");
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(b, "shard");
	const cJSON *wp = cJSON_GetObjectItemCaseSensitive(b, "primary");
	if (b && (!want_index || !cJSON_IsNumber(ws) || (wp && !cJSON_IsBool(wp)))) {
		cJSON_Delete(b);
		return cm_error_set(err, CM_EINVAL,
		                    "explain needs [index], [shard] and [primary] (or no body: the "
		                    "first unassigned copy)");
	}
	cl_settings *set = cl_settings_get(cl);
	const char *enable = set->enable_text;
	int max_rec = set->max_recoveries;

	/* find the copy: named, or the first unassigned one */
	char index[256] = "";
	int shard = -1, node = -1;
	bool primary = wp && cJSON_IsTrue(wp), found = false, unassigned = false;
	rp_route ro;
	uint64_t delay_ms = 60000;
	pthread_mutex_lock(&cl->meta_lock);
	for (size_t x = 0; x < cl->state->nindices && !found; x++) {
		const rp_index *ix = &cl->state->indices[x];
		if (want_index && strcmp(ix->name, want_index))
			continue;
		for (int s = 0; s < ix->nshards && !found; s++) {
			const rp_route *r = &ix->routes[s];
			if (cJSON_IsNumber(ws) && s != (int)ws->valuedouble)
				continue;
			if (b) {
				int n = -1;
				for (int c = 0; c < r->ncopies && n < 0; c++) {
					int cn = r->copies[c];
					bool isp = cn == r->primary;
					if (isp == primary &&
					    (!want_node ||
					     strcmp(cl->nodes[cn].name, want_node) == 0))
						n = cn;
				}
				if (n < 0 && !primary && !want_node)
					unassigned = true; /* a replica that has no node */
				else if (n < 0)
					continue;
				node = n;
			} else {
				/* a shard short of copies: its first copy on a node that
				 * left, or a copy the routing does not have yet */
				int live = 0, away = -1;
				for (int c = 0; c < r->ncopies; c++) {
					int cn = r->copies[c];
					if (cn == cl->self ||
					    (cl_alive(cl, cn) &&
					     atomic_load(&cl->nodes[cn].registered)))
						live++;
					else if (away < 0)
						away = cn;
				}
				if (live >= 1 + ix->nreplicas)
					continue;
				node = away;
				unassigned = away < 0;
				primary = away >= 0 && away == r->primary;
			}
			snprintf(index, sizeof(index), "%s", ix->name);
			shard = s;
			ro = *r;
			found = true;
		}
	}
	pthread_mutex_unlock(&cl->meta_lock);
	if (!found) {
		/* the message first: want_index and want_node live in b */
		cm_err rc =
		    b ? cm_error_set(err, CM_EINVAL, "no such copy: [%s][%d] %s%s%s", want_index,
		                     (int)ws->valuedouble, primary ? "primary" : "replica",
		                     want_node ? " on node " : "", want_node ? want_node : "")
		      : cm_error_set(
		            err, CM_EINVAL,
		            "unable to find any unassigned shards to explain "
		            "[ClusterAllocationExplainRequest[useAnyUnassignedShard=true]]");
		cJSON_Delete(b);
		cl_settings_put(set);
		return rc;
	}
	nd_index *nix = nd_index_get(cl->node, index);
	if (nix) {
		delay_ms = (uint64_t)nd_index_settings(nix)->delayed_timeout_ms;
		nd_index_release(nix);
	}
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "index", index);
	cJSON_AddNumberToObject(j, "shard", shard);
	cJSON_AddBoolToObject(j, "primary", primary);
	bool gone = node >= 0 && !(cl_alive(cl, node) &&
	                           (node == cl->self || atomic_load(&cl->nodes[node].registered)));
	if (unassigned || gone) {
		cJSON_AddStringToObject(j, "current_state", "unassigned");
		cJSON *ui = cJSON_AddObjectToObject(j, "unassigned_info");
		if (gone) {
			uint64_t since = atomic_load(&cl->nodes[node].gone_since_ns);
			uint64_t away_ms = since ? (cm_now_ns() - since) / 1000000ull : 0;
			bool delayed = !primary && away_ms < delay_ms;
			cJSON_AddStringToObject(ui, "reason", "NODE_LEFT");
			char det[160];
			snprintf(det, sizeof(det), "node_left [%s]", cl->nodes[node].name);
			cJSON_AddStringToObject(ui, "details", det);
			cJSON_AddBoolToObject(ui, "delayed", delayed);
			cJSON_AddStringToObject(
			    j, "allocate_explanation",
			    primary   ? "the primary's node left and no in-sync copy "
			                "is on a member: the shard is red until it "
			                "comes back"
			    : delayed ? "the copy's node left; it may come back before "
			                "[index.unassigned.node_left.delayed_timeout]"
			              : "the copy's node left past the delayed timeout: "
			                "the copy is rebuilt on a node below that says yes");
			if (delayed) {
				cJSON_AddNumberToObject(j, "configured_delay_in_millis",
				                        (double)delay_ms);
				cJSON_AddNumberToObject(j, "remaining_delay_in_millis",
				                        (double)(delay_ms - away_ms));
			}
		} else {
			cJSON_AddStringToObject(ui, "reason", "REPLICA_ADDED");
			cJSON_AddBoolToObject(ui, "delayed", false);
			cJSON_AddStringToObject(
			    j, "allocate_explanation",
			    "no node can take this copy now (see the deciders)");
		}
		const cJSON *dl = cJSON_GetObjectItemCaseSensitive(ui, "delayed");
		cJSON_AddStringToObject(j, "can_allocate",
		                        cJSON_IsTrue(dl) ? "allocation_delayed" : "no");
	} else {
		bool insync = (ro.in_sync >> node) & 1;
		cJSON_AddStringToObject(j, "current_state",
		                        ro.relocating_from == node ? "relocating"
		                        : insync                   ? "started"
		                                                   : "initializing");
		cJSON *cn = cJSON_AddObjectToObject(j, "current_node");
		cJSON_AddStringToObject(cn, "name", cl->nodes[node].name);
		cJSON_AddStringToObject(cn, "transport_address", cl->nodes[node].connect);
		bool excluded = cl_excluded_in(cl, set, node);
		cJSON_AddStringToObject(j, "can_remain_on_current_node", excluded ? "no" : "yes");
		if (excluded) {
			cJSON *rd = cJSON_AddArrayToObject(j, "can_remain_decisions");
			decider(rd, "filter", "NO",
			        "node matches cluster setting [cluster.routing.allocation.exclude] "
			        "filters: the copy moves away");
		}
		cJSON_AddStringToObject(j, "can_rebalance_cluster",
		                        strcmp(enable, "all") == 0 ? "yes" : "no");
		cJSON_AddStringToObject(
		    j, "explanation",
		    ro.relocating_from == node
		        ? "the copy moves to another node; it goes once the new copy is in sync"
		    : excluded ? "the copy is on an excluded node: it is being moved away"
		    : insync   ? "the copy is started and in sync; it can remain on its node"
		               : "the copy recovers from the primary before it counts");
	}
	cJSON *nds = cJSON_AddArrayToObject(j, "node_allocation_decisions");
	for (int i = 0; i < cl->nn; i++) {
		if (!cl->nodes[i].data)
			continue;
		cJSON *d = cJSON_CreateObject(), *dec = cJSON_CreateArray();
		cJSON_AddStringToObject(d, "node_name", cl->nodes[i].name);
		cJSON_AddStringToObject(d, "transport_address", cl->nodes[i].connect);
		cJSON_AddStringToObject(d, "node_decision",
		                        node_decision(cl, set, &ro, i, max_rec, enable, dec));
		if (cJSON_GetArraySize(dec))
			cJSON_AddItemToObject(d, "deciders", dec);
		else
			cJSON_Delete(dec);
		cJSON_AddItemToArray(nds, d);
	}
	char *t = cJSON_PrintUnformatted(j);
	*out = cm_strdup(MEM, t);
	cJSON_free(t);
	cJSON_Delete(j);
	cJSON_Delete(b);
	cl_settings_put(set);
	return CM_OK;
}
