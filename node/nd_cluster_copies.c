/* Which copy answers: the preference parameter (checked as Elasticsearch
 * reads it) and the order in which a shard's copies are tried (in-sync
 * copies only; the local copy first; then ranked by adaptive selection
 * or round-trip latency). */
#define _GNU_SOURCE
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "nd_cluster_private.h"
#include "nd_rank.h"

#define MEM CM_MEM_NODE

static uint32_t
str_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

static bool
name_in(const char *list, const char *name)
{
	char *copy = cm_strdup(MEM, list), *save = NULL, *tok;
	bool hit = false;
	for (tok = strtok_r(copy, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save))
		hit = fnmatch(tok, name, 0) == 0;
	cm_free(MEM, copy);
	return hit;
}

#define SHARDS_PREFIX "_shards:"
#define SHARDS_PREFIX_LEN 8

/* The list of a preference=_shards:LIST[|OTHER] and its length; NULL when
 * pref is not of that form. */
static const char *
pref_list(const char *pref, size_t *len)
{
	if (!pref || strncmp(pref, SHARDS_PREFIX, SHARDS_PREFIX_LEN) != 0)
		return NULL;
	const char *list = pref + SHARDS_PREFIX_LEN, *bar = strchr(list, '|');
	*len = bar ? (size_t)(bar - list) : strlen(list);
	return list;
}

/* Checks the list of _shards: (comma separated shard numbers, as ES's
 * Integer.parseInt reads them; a number no index has matches nothing). */
static cm_err
pref_list_check(const char *pref, const char *list, size_t len, cm_error *err)
{
	const char *p = list, *end = list + len;
	int n = 0;
	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p)), *e = comma ? comma : end;
		const char *d = p;
		while (d < e && (*d == ' ' || *d == '\t'))
			d++;
		const char *t = e;
		while (t > d && (t[-1] == ' ' || t[-1] == '\t'))
			t--;
		if (t > d) { /* ES drops empty items of a comma list */
			const char *q = d + (*d == '-' || *d == '+');
			bool digits = q < t && (size_t)(t - d) <= 10;
			for (const char *c = q; c < t && digits; c++)
				digits = *c >= '0' && *c <= '9';
			if (!digits || strtoll(d, NULL, 10) > INT32_MAX ||
			    strtoll(d, NULL, 10) < INT32_MIN)
				return cm_error_set(
				    err, CM_EINVAL,
				    "preference [%.100s]: [%.*s] is not a shard number", pref,
				    (int)(t - d > 40 ? 40 : t - d), d);
			n++;
		}
		p = comma ? comma + 1 : end;
	}
	if (n == 0)
		return cm_error_set(err, CM_EINVAL,
		                    "preference [%.100s]: no shard numbers after [_shards:]", pref);
	return CM_OK;
}

bool
nd_cl_pref_shard(const char *pref, int shard)
{
	size_t len;
	const char *list = pref_list(pref, &len), *p = list, *end = list + len;
	if (!list)
		return true;
	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		char *e;
		long v = strtol(p, &e, 10);
		if (e != p && e <= (comma ? comma : end) && v == shard)
			return true;
		p = comma ? comma + 1 : end;
	}
	return false;
}

const char *
nd_cl_pref_copies(const char *pref)
{
	size_t len;
	const char *list = pref_list(pref, &len);
	if (!list)
		return pref;
	return list[len] == '|' && list[len + 1] ? list + len + 1 : NULL;
}

cm_err
nd_cl_preference_check(const char *pref, cm_error *err)
{
	size_t len;
	const char *list = pref_list(pref, &len);
	if (list) {
		cm_err rc = pref_list_check(pref, list, len, err);
		const char *other = nd_cl_pref_copies(pref);
		if (rc)
			return rc;
		if (other && strncmp(other, SHARDS_PREFIX, SHARDS_PREFIX_LEN) == 0)
			return cm_error_set(err, CM_EINVAL,
			                    "preference [%.100s]: [_shards:] given twice", pref);
		if (!other || nd_cl_preference_check(other, err) == CM_OK)
			return CM_OK;
		cm_error_clear(err);
		return cm_error_set(err, CM_EINVAL, "no Preference for [%.100s]", other);
	}
	if (!pref || !*pref || *pref != '_' || strcmp(pref, "_local") == 0 ||
	    strcmp(pref, "_only_local") == 0 || strcmp(pref, "_primary") == 0)
		return CM_OK;
	if ((strncmp(pref, "_prefer_nodes:", 14) == 0 && pref[14]) ||
	    (strncmp(pref, "_only_nodes:", 12) == 0 && pref[12]))
		return CM_OK;
	return cm_error_set(err, CM_EINVAL, "no Preference for [%.100s]", pref);
}

/* Whether a search with this preference may hedge: not when it pins its
 * copies (by node, locality, primary or a sticky session string). */
bool
cl_pref_hedges(const char *pref)
{
	return !pref || !*pref || strcmp(pref, "_local") == 0 ||
	       strncmp(pref, "_prefer_nodes:", 14) == 0;
}

/* Appends cand[0..n) to order, best first: by the adaptive rank
 * (nd_rank.c: round trips seen here, a slow node's excess, the load
 * spread among near-equal copies), else by round-trip latency; dead
 * copies last. */
static void
order_ranked(nd_cluster *cl, nd_index *ix, int shard, const int *cand, int n,
             const nd_tail_cfg *cfg, int *order, int *norder)
{
	if (n <= 0)
		return;
	if (cfg && cfg->ars) {
		bool alive[ND_CL_MAX_COPIES];
		nd_rank_copy cp = {nd_index_name(ix), nd_index_uuid(ix), shard};
		for (int i = 0; i < n; i++)
			alive[i] = cl_alive(cl, cand[i]);
		nd_rank_order(&cp, cand, alive, n, cl->nn, order + *norder);
		*norder += n;
		return;
	}
	double lat[ND_CL_MAX_COPIES];
	pthread_mutex_lock(&cl->lock);
	for (int i = 0; i < n; i++)
		lat[i] = !cl_alive(cl, cand[i]) ? 1e18 : cl->nodes[cand[i]].ewma_us;
	pthread_mutex_unlock(&cl->lock);
	for (int i = 0; i < n; i++) {
		int best = -1;
		for (int k = 0; k < n; k++)
			if (lat[k] < 1e300 && (best < 0 || lat[k] < lat[best]))
				best = k;
		order[(*norder)++] = cand[best];
		lat[best] = 1e301;
	}
}

int
cl_copy_pick(const cl_copy_in *in, const char *pref, int *order)
{
	int norder = 0, cand[ND_CL_MAX_COPIES], n = 0;
	if (pref && strncmp(pref, "_only_nodes:", 12) == 0) {
		/* Asked for by name: any copy, in sync or not (to inspect it). */
		for (int c = 0; c < in->ncopies; c++)
			if (name_in(pref + 12, in->names[in->copies[c]]))
				order[norder++] = in->copies[c];
		return norder;
	}
	/* Only copies in the in-sync set answer: a copy that is recovering or
	 * was dropped may be missing acknowledged writes. */
	for (int c = 0; c < in->ncopies; c++)
		if (!in->routed || ((in->in_sync >> in->copies[c]) & 1))
			cand[n++] = in->copies[c];
	if (n == 0)
		return norder;
	if (pref && strcmp(pref, "_primary") == 0) {
		order[norder++] = in->routed && in->primary >= 0 ? in->primary : cand[0];
		return norder;
	}
	if (pref && strcmp(pref, "_only_local") == 0) {
		for (int i = 0; i < n; i++)
			if (cand[i] == in->self)
				order[norder++] = cand[i];
		return norder;
	}
	if (pref && *pref && *pref != '_') {
		/* Custom string: the same copy every time (while it lives). */
		int rot = (int)(str_hash(pref) % (uint32_t)n);
		for (int i = 0; i < n; i++)
			order[norder++] = cand[(rot + i) % n];
		return norder;
	}
	/* Default and _local: the local copy, then the others ranked;
	 * _prefer_nodes: those nodes' copies ranked, then the rest. */
	int first[ND_CL_MAX_COPIES], rest[ND_CL_MAX_COPIES], nf = 0, nr = 0;
	bool prefer = pref && strncmp(pref, "_prefer_nodes:", 14) == 0;
	for (int i = 0; i < n; i++) {
		if (!prefer && cand[i] == in->self)
			order[norder++] = cand[i];
		else if (prefer && name_in(pref + 14, in->names[cand[i]]))
			first[nf++] = cand[i];
		else
			rest[nr++] = cand[i];
	}
	/* the local copy among the preferred (or the rest) goes first there */
	for (int pass = 0; pass < 2; pass++) {
		int *v = pass ? rest : first, nv = pass ? nr : nf, k = 0, local = -1;
		for (int i = 0; i < nv; i++)
			if (v[i] == in->self)
				local = i;
			else
				v[k++] = v[i];
		if (local >= 0)
			order[norder++] = in->self;
		if (k > 0)
			in->rank(in->arg, v, k, order, &norder);
	}
	return norder;
}

typedef struct rank_arg {
	nd_cluster *cl;
	nd_index *ix;
	int shard;
	const nd_tail_cfg *cfg;
} rank_arg;

static void
rank_live(void *arg, const int *cand, int n, int *order, int *norder)
{
	rank_arg *a = arg;
	order_ranked(a->cl, a->ix, a->shard, cand, n, a->cfg, order, norder);
}

int
cl_copy_order(nd_cluster *cl, nd_index *ix, int shard, const char *pref, const nd_tail_cfg *cfg,
              int *order)
{
	int copies[ND_CL_MAX_COPIES];
	cl_route ro;
	rank_arg ra = {cl, ix, shard, cfg};
	bool routed = cl_route_get(cl, nd_index_name(ix), shard, &ro);
	cl_copy_in in = {.copies = copies,
	                 .ncopies = cl_shard_copies(cl, ix, shard, copies),
	                 .routed = routed,
	                 .in_sync = ro.in_sync,
	                 .primary = ro.primary,
	                 .self = cl->self,
	                 .names = (const char *const *)cl->names,
	                 .rank = rank_live,
	                 .arg = &ra};
	return cl_copy_pick(&in, pref, order);
}
