/* Tail-tolerant fan-out (nd_rank.h): settings, C3 ranking, hedge budget
 * and timer, cancellation on the data node, figures. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "../proto/pr.h"
#include "nd_cluster_private.h"
#include "nd_rank.h"

#define MEM CM_MEM_NODE
#define RING 64               /* latencies kept per node for its p95 */
#define TAU_NS 500000000.0    /* EWMA time constant */
#define ALPHA_MIN 0.3         /* EWMA weight of a sample at least (ES's) */
#define PROBE_NS 500000000ull /* a node idle this long gets one probe */
#define BURST 10.0            /* hedge tokens saved up at most */
#define CANCEL_SLOTS 1024
#define TOMB_NS 10000000000ull /* an early cancel waits this long for its request */
#define COPY_SETS 128          /* the copy table: sets of COPY_WAYS copies */
#define COPY_WAYS 8
#define COPY_TTL_NS 600000000000ull /* a copy unused this long is free */

/* ================= settings ================= */

enum { K_ARS, K_HEDGE, K_MIN_DELAY, K_MAX_RATIO, K_N };
static const char *const keys[K_N] = {
    "cluster.routing.use_adaptive_replica_selection",
    "search.hedge.enabled",
    "search.hedge.min_delay",
    "search.hedge.max_ratio",
};

/* Each as the -E value (base) and the cluster state's (dyn, when set);
 * values are bool 0/1, ns, or the ratio in millionths. */
static _Atomic uint64_t base[K_N] = {1, 1, 2000000, 50000};
static _Atomic uint64_t dyn[K_N];
static _Atomic bool dyn_set[K_N];

static int
key_of(const char *key)
{
	for (int i = 0; i < K_N; i++)
		if (strcmp(keys[i], key) == 0)
			return i;
	return -1;
}

bool
nd_rank_key(const char *key)
{
	return key_of(key) >= 0;
}

static uint64_t
get(int k)
{
	return atomic_load(&dyn_set[k]) ? atomic_load(&dyn[k]) : atomic_load(&base[k]);
}

void
nd_rank_config(nd_tail_cfg *out)
{
	out->ars = get(K_ARS) != 0;
	out->hedge = get(K_HEDGE) != 0;
	out->min_delay_ns = get(K_MIN_DELAY);
	out->max_ratio = (double)get(K_MAX_RATIO) / 1e6;
}

/* "2ms", "500micros", "1s", "0": ES's time units. */
static bool
parse_time_ns(const char *s, uint64_t *ns)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || !(v >= 0) || v > 1e12)
		return false;
	static const struct {
		const char *unit;
		double ns;
	} units[] = {{"nanos", 1}, {"micros", 1e3}, {"ms", 1e6},   {"s", 1e9},
	             {"m", 60e9},  {"h", 3600e9},   {"d", 86400e9}};
	if (*end == 0 && v == 0) {
		*ns = 0;
		return true;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].unit) == 0) {
			double t = v * units[i].ns;
			if (t > 60e9)
				return false;
			*ns = (uint64_t)t;
			return true;
		}
	return false;
}

/* text to the stored form of setting k, or an ES-shaped reason. */
static cm_err
parse_value(int k, const char *text, uint64_t *out, cm_error *err)
{
	char *end;
	switch (k) {
	case K_ARS:
	case K_HEDGE:
		if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) {
			*out = text[0] == 't';
			return CM_OK;
		}
		return cm_error_set(err, CM_EINVAL,
		                    "Failed to parse value [%.60s] as only [true] or [false] are "
		                    "allowed.",
		                    text);
	case K_MIN_DELAY:
		if (parse_time_ns(text, out))
			return CM_OK;
		return cm_error_set(
		    err, CM_EINVAL,
		    "failed to parse setting [%s] with value [%.60s] as a time value "
		    "(0 to 60s, with a unit: nanos, micros, ms, s)",
		    keys[k], text);
	default: {
		double v = strtod(text, &end);
		if (end == text || *end || !isfinite(v))
			return cm_error_set(err, CM_EINVAL,
			                    "failed to parse value [%.60s] for setting [%s]", text,
			                    keys[k]);
		if (v < 0 || v > 1)
			return cm_error_set(
			    err, CM_EINVAL,
			    "failed to parse value [%.60s] for setting [%s], must be "
			    "%s [%s]",
			    text, keys[k], v < 0 ? ">=" : "<=", v < 0 ? "0.0" : "1.0");
		*out = (uint64_t)llround(v * 1e6);
		return CM_OK;
	}
	}
}

cm_err
nd_rank_check(const char *key, const cJSON *v, char **norm, cm_error *err)
{
	int k = key_of(key);
	char text[128];
	uint64_t x;
	*norm = NULL;
	if (k < 0)
		return cm_error_set(err, CM_ENOTFOUND, "unknown setting [%.100s]", key);
	if (cJSON_IsNull(v))
		return CM_OK;
	if (cJSON_IsBool(v))
		snprintf(text, sizeof(text), "%s", cJSON_IsTrue(v) ? "true" : "false");
	else if (cJSON_IsNumber(v))
		snprintf(text, sizeof(text), "%.17g", v->valuedouble);
	else if (cJSON_IsString(v))
		snprintf(text, sizeof(text), "%s", v->valuestring);
	else
		return cm_error_set(err, CM_EINVAL, "invalid value for setting [%s]", keys[k]);
	cm_err rc = parse_value(k, text, &x, err);
	if (!rc)
		*norm = cm_strdup(MEM, text);
	return rc;
}

cm_err
nd_rank_setting(const char *key, const char *value, cm_error *err)
{
	int k = key_of(key);
	uint64_t x;
	if (k < 0)
		return CM_ENOTFOUND;
	cm_err rc = parse_value(k, value, &x, err);
	if (!rc)
		atomic_store(&base[k], x);
	return rc;
}

void
nd_rank_refresh(nd_cluster *cl)
{
	cl_settings *set = cl_settings_get(cl); /* parsed once per state */
	for (int k = 0; k < K_N; k++) {
		char v[128];
		uint64_t x;
		cm_error e;
		cm_error_clear(&e);
		if (cl_setting_in(set, keys[k], v, sizeof(v)) &&
		    parse_value(k, v, &x, &e) == CM_OK) {
			atomic_store(&dyn[k], x);
			atomic_store(&dyn_set[k], true);
		} else {
			atomic_store(&dyn_set[k], false);
		}
	}
	cl_settings_put(set);
}

/* ================= figures per node and per copy ================= */

/* Per node: the queue it reports (C3's server queue) and a summary of its
 * copies for the per-node view (ES's adaptive_selection). */
typedef struct rk_node {
	bool seen;
	double r_us, s_us, q; /* EWMAs: response time, service time, queue */
	uint64_t last_ns;     /* last sample */
	uint64_t replies, failures;
	uint32_t ring[RING]; /* latencies, µs */
	int nring, pos;
	int outstanding;
	uint64_t sent;
} rk_node;

/* Per copy (node, index, shard): what ranks it and sets its hedge delay. */
typedef struct rk_copy {
	bool used, seen;
	int node, shard;
	char key[256];   /* the index uuid, or its name when it has none */
	char index[256]; /* the name, for _nodes/stats */
	double r_us, s_us;
	uint64_t last_ns;      /* last sample */
	uint64_t last_used_ns; /* last lookup: the set's LRU order */
	uint64_t last_sent_ns; /* last request: a probe when long ago */
	uint64_t sent, replies, failures;
	int outstanding;
	uint32_t ring[RING];
	int nring, pos;
} rk_copy;

static rk_node fig[ND_CL_MAX_NODES];
static rk_copy copies[COPY_SETS * COPY_WAYS];
static pthread_mutex_t rank_mu = PTHREAD_MUTEX_INITIALIZER;
static double tokens;
static _Atomic uint64_t shard_requests, hedges_sent, hedges_won, hedges_cancelled, hedges_denied,
    cancels_received, stopped;
static _Atomic uint32_t serving;

static bool
valid(int node)
{
	return node >= 0 && node < ND_CL_MAX_NODES;
}

static const char *
copy_key(const char *index, const char *uuid)
{
	return uuid && *uuid ? uuid : index ? index : "";
}

static bool
copy_is(const rk_copy *c, int node, const char *key, int shard, uint64_t now)
{
	return c->used && now - c->last_used_ns < COPY_TTL_NS && c->node == node &&
	       c->shard == shard && strcmp(c->key, key) == 0;
}

/* Locked: the copy (node, key, shard), touched; NULL when absent and
 * !index. With index, an absent copy takes a free way of its set, else
 * the least recently used one (one with nothing outstanding first). */
static rk_copy *
copy_locked(int node, const char *key, int shard, const char *index, uint64_t now)
{
	uint32_t h = 2166136261u;
	for (const char *p = key; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	h = (h ^ (uint32_t)shard * 0x9e3779b1u) * 16777619u;
	h = (h ^ (uint32_t)node) * 16777619u;
	rk_copy *set = &copies[(h >> 7) % COPY_SETS], *victim = NULL;
	for (int w = 0; w < COPY_WAYS; w++)
		if (copy_is(&set[w], node, key, shard, now)) {
			set[w].last_used_ns = now;
			return &set[w];
		}
	if (!index)
		return NULL;
	for (int w = 0; w < COPY_WAYS; w++) {
		rk_copy *c = &set[w];
		if (!c->used || now - c->last_used_ns >= COPY_TTL_NS) {
			victim = c;
			break;
		}
		bool idle = c->outstanding == 0, vidle = victim && victim->outstanding == 0;
		if (!victim || (idle && !vidle) ||
		    (idle == vidle && c->last_used_ns < victim->last_used_ns))
			victim = c;
	}
	memset(victim, 0, sizeof(*victim));
	victim->used = true;
	victim->node = node;
	victim->shard = shard;
	snprintf(victim->key, sizeof(victim->key), "%s", key);
	snprintf(victim->index, sizeof(victim->index), "%s", index);
	victim->last_used_ns = now;
	return victim;
}

void
nd_rank_sent(int node, const char *index, const char *uuid, const int *shards, size_t n)
{
	if (!valid(node))
		return;
	uint64_t now = cm_now_ns();
	const char *key = copy_key(index, uuid);
	pthread_mutex_lock(&rank_mu);
	fig[node].outstanding++;
	fig[node].sent++;
	for (size_t i = 0; i < n; i++) {
		rk_copy *c = copy_locked(node, key, shards[i], index ? index : "", now);
		c->outstanding++;
		c->sent++;
		c->last_sent_ns = now;
	}
	pthread_mutex_unlock(&rank_mu);
}

static double
ewma(double old, double sample, double alpha)
{
	return old + alpha * (sample - old);
}

static void
ring_add(uint32_t *ring, int *nring, int *pos, uint64_t us)
{
	ring[*pos] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	*pos = (*pos + 1) % RING;
	if (*nring < RING)
		(*nring)++;
}

/* A sample after an idle time dt weighs more (time-decayed), so a
 * recovered node or copy is seen at once. */
static double
alpha_after(bool seen, uint64_t last_ns, uint64_t now)
{
	double dt = seen ? (double)(now - last_ns) : TAU_NS * 100;
	double alpha = 1.0 - exp(-dt / TAU_NS);
	return alpha < ALPHA_MIN ? ALPHA_MIN : alpha;
}

void
nd_rank_done(int node, const char *index, const char *uuid, const int *shards, size_t n, bool ok,
             uint64_t rtt_ns, const uint64_t *service_us, size_t nservice, uint32_t queue,
             bool censored)
{
	if (!valid(node))
		return;
	rk_node *f = &fig[node];
	uint64_t now = cm_now_ns();
	const char *key = copy_key(index, uuid);
	double r = (double)rtt_ns / 1000.0, smax = 0;
	for (size_t i = 0; i < nservice; i++)
		smax = (double)service_us[i] > smax ? (double)service_us[i] : smax;
	pthread_mutex_lock(&rank_mu);
	if (f->outstanding > 0)
		f->outstanding--;
	for (size_t i = 0; i < n; i++) {
		rk_copy *c = copy_locked(node, key, shards[i], index ? index : "", now);
		if (c->outstanding > 0)
			c->outstanding--; /* 0 when it was evicted meanwhile */
		if (!ok) {
			c->failures++;
			continue;
		}
		c->replies++;
		double s = i < nservice ? (double)service_us[i] : smax,
		       a = alpha_after(c->seen, c->last_ns, now);
		c->r_us = c->seen ? ewma(c->r_us, r, a) : r;
		if (nservice)
			c->s_us = c->seen ? ewma(c->s_us, s, a) : s;
		c->seen = true;
		c->last_ns = now;
		if (!censored)
			ring_add(c->ring, &c->nring, &c->pos, rtt_ns / 1000);
	}
	if (!ok) {
		f->failures++;
		pthread_mutex_unlock(&rank_mu);
		return;
	}
	f->replies++;
	double a = alpha_after(f->seen, f->last_ns, now);
	if (!f->seen) {
		f->r_us = r;
		f->s_us = smax;
		f->q = queue;
	} else {
		f->r_us = ewma(f->r_us, r, a);
		if (nservice)
			f->s_us = ewma(f->s_us, smax, a);
		f->q = ewma(f->q, queue, a);
	}
	f->seen = true;
	f->last_ns = now;
	if (!censored)
		ring_add(f->ring, &f->nring, &f->pos, rtt_ns / 1000);
	pthread_mutex_unlock(&rank_mu);
}

void
nd_rank_censored(int node, const nd_rank_copy *c, uint64_t ns)
{
	if (!valid(node))
		return;
	uint64_t now = cm_now_ns();
	pthread_mutex_lock(&rank_mu);
	ring_add(fig[node].ring, &fig[node].nring, &fig[node].pos, ns / 1000);
	if (c) {
		rk_copy *k = copy_locked(node, copy_key(c->index, c->uuid), c->shard,
		                         c->index ? c->index : "", now);
		ring_add(k->ring, &k->nring, &k->pos, ns / 1000);
	}
	pthread_mutex_unlock(&rank_mu);
}

/* C3 (Suresh et al., NSDI '15), as Elasticsearch's adaptive replica
 * selection computes it: R - S + q^3 * S, with q = 1 + outstanding * n +
 * the node's queue. R, S and outstanding are the copy's; a copy without a
 * figure yet borrows its node's R and S (0 when the node has none: try
 * it). Locked; c may be NULL (the node's own figures). */
static double
rank_locked(int node, const rk_copy *c, int nnodes)
{
	rk_node *f = &fig[node];
	bool seen = c && c->seen;
	if (!seen && !f->seen)
		return 0;
	double r = seen ? c->r_us : f->r_us, s = seen ? c->s_us : f->s_us;
	int out = c ? c->outstanding : f->outstanding;
	double qhat = 1.0 + (double)out * nnodes + (f->seen ? f->q : 0);
	return r - s + qhat * qhat * qhat * s;
}

void
nd_rank_order(const nd_rank_copy *copy, const int *cand, const bool *alive, int n, int nnodes,
              int *out)
{
	double rk[ND_CL_MAX_COPIES];
	int probe = -1, best = 0;
	uint64_t now = cm_now_ns();
	const char *key = copy_key(copy->index, copy->uuid);
	rk_copy *c[ND_CL_MAX_COPIES];
	pthread_mutex_lock(&rank_mu);
	for (int i = 0; i < n; i++) {
		c[i] = valid(cand[i]) ? copy_locked(cand[i], key, copy->shard, NULL, now) : NULL;
		rk[i] =
		    !alive[i] || !valid(cand[i]) ? INFINITY : rank_locked(cand[i], c[i], nnodes);
	}
	for (int i = 1; i < n; i++)
		if (rk[i] < rk[best])
			best = i;
	/* The best copy, unless a live one has had nothing for a while: it
	 * gets this request (its clock is reset at once, so one caller
	 * probes), so its figures stay current. A copy not in the table has
	 * rank 0 or its node's: it is tried soon enough either way. */
	for (int i = 0; i < n && probe < 0; i++) {
		if (i == best || !alive[i] || !c[i] || rk[i] == INFINITY)
			continue;
		if (now > c[i]->last_sent_ns + PROBE_NS) {
			c[i]->last_sent_ns = now;
			probe = i;
		}
	}
	pthread_mutex_unlock(&rank_mu);
	int k = 0;
	if (probe >= 0) {
		out[k++] = cand[probe];
		rk[probe] = NAN;
	}
	while (k < n) {
		int b = -1;
		for (int i = 0; i < n; i++)
			if (!isnan(rk[i]) && (b < 0 || rk[i] < rk[b]))
				b = i;
		out[k++] = cand[b];
		rk[b] = NAN;
	}
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* The p95 of ring[0..n) in ns, or twice r_us with too few samples. */
static uint64_t
p95_ns(uint32_t *v, int n, double r_us)
{
	if (n < 16)
		return (uint64_t)(2 * r_us * 1000);
	qsort(v, (size_t)n, sizeof(v[0]), cmp_u32);
	return (uint64_t)v[(n * 95 + 99) / 100 - 1] * 1000;
}

uint64_t
nd_rank_hedge_delay(int node, const char *index, const char *uuid, const int *shards, size_t n,
                    uint64_t min_delay_ns)
{
	const char *key = copy_key(index, uuid);
	uint32_t v[RING];
	uint64_t d = 0, now = cm_now_ns();
	if (!valid(node))
		return min_delay_ns;
	for (size_t i = 0; i < n; i++) {
		int nr = 0;
		double r = 0;
		pthread_mutex_lock(&rank_mu);
		rk_copy *c = copy_locked(node, key, shards[i], NULL, now);
		if (c) {
			nr = c->nring;
			memcpy(v, c->ring, sizeof(v));
			r = c->seen ? c->r_us : 0;
		} else if (fig[node].seen) {
			/* not measured yet: its node's figures stand in */
			nr = fig[node].nring;
			memcpy(v, fig[node].ring, sizeof(v));
			r = fig[node].r_us;
		}
		pthread_mutex_unlock(&rank_mu);
		uint64_t x = p95_ns(v, nr, r);
		d = x > d ? x : d;
	}
	return d > min_delay_ns ? d : min_delay_ns;
}

size_t
nd_rank_copies(size_t *cap)
{
	size_t k = 0;
	uint64_t now = cm_now_ns();
	pthread_mutex_lock(&rank_mu);
	for (size_t i = 0; i < COPY_SETS * COPY_WAYS; i++)
		k += copies[i].used && now - copies[i].last_used_ns < COPY_TTL_NS;
	pthread_mutex_unlock(&rank_mu);
	if (cap)
		*cap = COPY_SETS * COPY_WAYS;
	return k;
}

bool
nd_rank_copy_figures(int node, const char *uuid, int shard, double *r_us, double *s_us,
                     int *outstanding)
{
	uint64_t now = cm_now_ns();
	pthread_mutex_lock(&rank_mu);
	rk_copy *c = valid(node) ? copy_locked(node, uuid, shard, NULL, now) : NULL;
	if (c) {
		*r_us = c->r_us;
		*s_us = c->s_us;
		*outstanding = c->outstanding;
	}
	pthread_mutex_unlock(&rank_mu);
	return c != NULL;
}

/* ================= budget and counters ================= */

void
nd_rank_earn(size_t n, double max_ratio)
{
	atomic_fetch_add(&shard_requests, n);
	pthread_mutex_lock(&rank_mu);
	tokens += (double)n * max_ratio;
	if (tokens > BURST)
		tokens = BURST;
	pthread_mutex_unlock(&rank_mu);
}

bool
nd_rank_take(size_t n)
{
	pthread_mutex_lock(&rank_mu);
	bool ok = tokens >= (double)n;
	if (ok)
		tokens -= (double)n;
	pthread_mutex_unlock(&rank_mu);
	if (!ok)
		atomic_fetch_add(&hedges_denied, n);
	return ok;
}

void
nd_rank_count_hedge(size_t sent)
{
	atomic_fetch_add(&hedges_sent, sent);
}

void
nd_rank_count_won(void)
{
	atomic_fetch_add(&hedges_won, 1);
}

void
nd_rank_count_cancelled(size_t n)
{
	atomic_fetch_add(&hedges_cancelled, n);
}

/* ================= timers ================= */

typedef struct rk_timer {
	struct rk_timer *next;
	uint64_t at;
	nd_rank_timer_fn fn;
	void *arg;
} rk_timer;

static pthread_mutex_t timer_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t timer_cv;
static rk_timer *timers; /* sorted by at */
static pthread_once_t timer_once = PTHREAD_ONCE_INIT;

static void *
timer_main(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&timer_mu);
	for (;;) {
		uint64_t now = cm_now_ns();
		if (timers && timers->at <= now) {
			rk_timer *t = timers;
			timers = t->next;
			pthread_mutex_unlock(&timer_mu);
			t->fn(t->arg);
			cm_free(MEM, t);
			pthread_mutex_lock(&timer_mu);
			continue;
		}
		if (!timers) {
			pthread_cond_wait(&timer_cv, &timer_mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t wait = timers->at - now, ns = (uint64_t)ts.tv_nsec + wait % 1000000000ull;
		ts.tv_sec += (time_t)(wait / 1000000000ull + ns / 1000000000ull);
		ts.tv_nsec = (long)(ns % 1000000000ull);
		pthread_cond_timedwait(&timer_cv, &timer_mu, &ts);
	}
	return NULL;
}

static void
timer_start(void)
{
	pthread_condattr_t a;
	pthread_t th;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&timer_cv, &a);
	pthread_condattr_destroy(&a);
	pthread_create(&th, NULL, timer_main, NULL);
	pthread_detach(th);
}

void
nd_rank_timer(uint64_t at_ns, nd_rank_timer_fn fn, void *arg)
{
	pthread_once(&timer_once, timer_start);
	rk_timer *t = cm_calloc(MEM, 1, sizeof(*t)), **p;
	t->at = at_ns;
	t->fn = fn;
	t->arg = arg;
	pthread_mutex_lock(&timer_mu);
	for (p = &timers; *p && (*p)->at <= at_ns; p = &(*p)->next)
		;
	t->next = *p;
	*p = t;
	pthread_cond_signal(&timer_cv);
	pthread_mutex_unlock(&timer_mu);
}

/* ================= cancellation ================= */

struct nd_rank_run {
	uint64_t id;
	uint64_t tomb_ns; /* a cancel that came first: when */
	bool used, running;
	_Atomic _Bool flag;
};

static nd_rank_run runs[CANCEL_SLOTS];
static pthread_mutex_t cancel_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t next_id;

static pthread_once_t id_once = PTHREAD_ONCE_INIT;

static void
id_seed(void)
{
	uint64_t seed = cm_now_ns() ^ ((uint64_t)getpid() << 32);
	seed = (seed ^ (seed >> 31)) * 0x9e3779b97f4a7c15ull;
	atomic_store(&next_id, (seed & 0xffffffff00000000ull) | 1);
}

uint64_t
nd_rank_cancel_id(void)
{
	pthread_once(&id_once, id_seed);
	uint64_t id = atomic_fetch_add(&next_id, 1);
	return id ? id : atomic_fetch_add(&next_id, 1);
}

/* A slot for id: the one it already has, else a free or expired one.
 * Locked. */
static nd_rank_run *
slot_locked(uint64_t id, uint64_t now, bool *found)
{
	nd_rank_run *free_slot = NULL;
	*found = false;
	for (int i = 0; i < CANCEL_SLOTS; i++) {
		nd_rank_run *r = &runs[i];
		if (r->used && r->id == id) {
			*found = true;
			return r;
		}
		if (!free_slot &&
		    (!r->used || (!r->running && r->tomb_ns && now - r->tomb_ns > TOMB_NS)))
			free_slot = r;
	}
	return free_slot;
}

nd_rank_run *
nd_rank_begin(uint64_t id, const _Atomic _Bool **flag)
{
	bool found;
	*flag = NULL;
	if (!id)
		return NULL;
	pthread_mutex_lock(&cancel_mu);
	nd_rank_run *r = slot_locked(id, cm_now_ns(), &found);
	if (r) {
		if (!found) {
			r->id = id;
			r->used = true;
			r->tomb_ns = 0;
			atomic_store(&r->flag, false);
		}
		r->running = true;
		*flag = &r->flag;
	}
	pthread_mutex_unlock(&cancel_mu);
	return r;
}

void
nd_rank_end(nd_rank_run *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&cancel_mu);
	if (atomic_load(&r->flag))
		atomic_fetch_add(&stopped, 1);
	r->used = r->running = false;
	r->id = 0;
	pthread_mutex_unlock(&cancel_mu);
}

void
nd_rank_serve_cancel(const uint8_t *p, size_t len, cm_buf *reply, uint32_t *reply_type)
{
	uint64_t ids[256];
	size_t n;
	cm_error err;
	cm_error_clear(&err);
	if (pr_search_cancel_decode(p, len, ids, 256, &n, &err) == CM_OK) {
		uint64_t now = cm_now_ns();
		pthread_mutex_lock(&cancel_mu);
		for (size_t i = 0; i < n; i++) {
			bool found;
			nd_rank_run *r = slot_locked(ids[i], now, &found);
			atomic_fetch_add(&cancels_received, 1);
			if (!r)
				continue; /* table full: that request runs to its end */
			if (!found) {     /* came before its request: waits for it */
				r->id = ids[i];
				r->used = true;
				r->running = false;
				r->tomb_ns = now;
			}
			atomic_store(&r->flag, true);
		}
		pthread_mutex_unlock(&cancel_mu);
	}
	*reply_type = err.code ? PR_ERROR : PR_ACK;
	pr_ack_encode(&err, NULL, 0, reply);
}

uint32_t
nd_rank_serving(int delta)
{
	return atomic_fetch_add(&serving, (uint32_t)delta) + (uint32_t)delta;
}

/* ================= figures ================= */

static int
cmp_copy(const void *a, const void *b)
{
	const rk_copy *x = a, *y = b;
	int c = strcmp(x->index, y->index);
	if (c)
		return c;
	if (x->shard != y->shard)
		return x->shard < y->shard ? -1 : 1;
	return x->node < y->node ? -1 : x->node > y->node;
}

/* "copies": one object per remote copy in the table, by index, shard and
 * node. */
static void
copies_json(nd_cluster *cl, int nn, cJSON *into)
{
	size_t cap = COPY_SETS * COPY_WAYS, k = 0;
	rk_copy *v = cm_calloc(MEM, cap, sizeof(*v));
	double *rk = cm_calloc(MEM, cap, sizeof(double));
	uint64_t now = cm_now_ns();
	pthread_mutex_lock(&rank_mu);
	for (size_t i = 0; i < cap; i++)
		if (copies[i].used && now - copies[i].last_used_ns < COPY_TTL_NS &&
		    copies[i].node < nn)
			v[k++] = copies[i];
	pthread_mutex_unlock(&rank_mu);
	qsort(v, k, sizeof(*v), cmp_copy);
	pthread_mutex_lock(&rank_mu); /* ranks with the nodes' queues of now */
	for (size_t i = 0; i < k; i++)
		rk[i] = rank_locked(v[i].node, &v[i], nn);
	pthread_mutex_unlock(&rank_mu);
	cJSON *arr = cJSON_AddArrayToObject(into, "copies");
	for (size_t i = 0; i < k; i++) {
		rk_copy *c = &v[i];
		cJSON *o = cJSON_CreateObject();
		char buf[64];
		cJSON_AddStringToObject(o, "index", c->index);
		cJSON_AddNumberToObject(o, "shard", c->shard);
		cJSON_AddStringToObject(o, "node", cl->nodes[c->node].name);
		cJSON_AddNumberToObject(o, "ewma_response_ms", c->seen ? c->r_us / 1000.0 : 0);
		cJSON_AddNumberToObject(o, "service_ms", c->seen ? c->s_us / 1000.0 : 0);
		cJSON_AddNumberToObject(o, "outstanding", c->outstanding);
		cJSON_AddNumberToObject(
		    o, "p95_ms", (double)p95_ns(c->ring, c->nring, c->seen ? c->r_us : 0) / 1e6);
		cJSON_AddNumberToObject(o, "requests_sent", (double)c->sent);
		cJSON_AddNumberToObject(o, "replies", (double)c->replies);
		cJSON_AddNumberToObject(o, "failures", (double)c->failures);
		snprintf(buf, sizeof(buf), "%.1f", c->seen ? rk[i] / 1000.0 : 0.0);
		cJSON_AddStringToObject(o, "rank", buf);
		cJSON_AddItemToArray(arr, o);
	}
	cm_free(MEM, rk);
	cm_free(MEM, v);
}

void
nd_rank_stats_json(nd_cluster *cl, cJSON *into)
{
	nd_tail_cfg c;
	nd_rank_config(&c);
	cJSON *as = cJSON_AddObjectToObject(into, "adaptive_selection");
	int nn = cl->nn;
	for (int i = 0; i < nn && i < ND_CL_MAX_NODES; i++) {
		if (i == cl->self || !cl->nodes[i].data)
			continue;
		rk_node *f = &fig[i];
		uint32_t ring[RING];
		pthread_mutex_lock(&rank_mu);
		bool seen = f->seen;
		double r = f->r_us, s = f->s_us, q = f->q, rk = rank_locked(i, NULL, nn);
		uint64_t replies = f->replies, failures = f->failures, sent = f->sent;
		int out = f->outstanding, nring = f->nring;
		memcpy(ring, f->ring, sizeof(ring));
		pthread_mutex_unlock(&rank_mu);
		uint64_t d = p95_ns(ring, nring, seen ? r : 0);
		cJSON *o = cJSON_AddObjectToObject(as, cl->nodes[i].name);
		char buf[64];
		cJSON_AddNumberToObject(o, "outgoing_searches", out);
		cJSON_AddNumberToObject(o, "avg_queue_size", seen ? llround(q) : 0);
		cJSON_AddNumberToObject(o, "avg_service_time_ns", seen ? llround(s * 1000) : 0);
		cJSON_AddNumberToObject(o, "avg_response_time_ns", seen ? llround(r * 1000) : 0);
		snprintf(buf, sizeof(buf), "%.1f", seen ? rk / 1000.0 : 0.0);
		cJSON_AddStringToObject(o, "rank", buf);
		cJSON_AddNumberToObject(o, "hedge_delay_ns",
		                        (double)(d > c.min_delay_ns ? d : c.min_delay_ns));
		cJSON_AddNumberToObject(o, "requests_sent", (double)sent);
		cJSON_AddNumberToObject(o, "replies", (double)replies);
		cJSON_AddNumberToObject(o, "failures", (double)failures);
	}
	cJSON *sh = cJSON_GetObjectItemCaseSensitive(into, "shoal");
	cJSON *h = cJSON_AddObjectToObject(sh ? sh : into, "hedging");
	pthread_mutex_lock(&rank_mu);
	double tk = tokens;
	pthread_mutex_unlock(&rank_mu);
	cJSON_AddBoolToObject(h, "enabled", c.hedge);
	cJSON_AddBoolToObject(h, "adaptive_replica_selection", c.ars);
	cJSON_AddNumberToObject(h, "min_delay_ns", (double)c.min_delay_ns);
	cJSON_AddNumberToObject(h, "max_ratio", c.max_ratio);
	cJSON_AddNumberToObject(h, "shard_requests", (double)atomic_load(&shard_requests));
	cJSON_AddNumberToObject(h, "sent", (double)atomic_load(&hedges_sent));
	cJSON_AddNumberToObject(h, "won", (double)atomic_load(&hedges_won));
	cJSON_AddNumberToObject(h, "cancelled", (double)atomic_load(&hedges_cancelled));
	cJSON_AddNumberToObject(h, "budget_denied", (double)atomic_load(&hedges_denied));
	cJSON_AddNumberToObject(h, "tokens", tk);
	cJSON_AddNumberToObject(h, "burst", BURST);
	/* as a data node: cancels received, and requests they stopped */
	cJSON_AddNumberToObject(h, "cancels_received", (double)atomic_load(&cancels_received));
	cJSON_AddNumberToObject(h, "stopped", (double)atomic_load(&stopped));
	copies_json(cl, nn < ND_CL_MAX_NODES ? nn : ND_CL_MAX_NODES, h);
}

void
nd_cluster_tail_stats(nd_cluster *cl, cJSON *into)
{
	if (cl && into)
		nd_rank_stats_json(cl, into);
}
