/* Tail-tolerant fan-out (nd_rank.h): settings, copy ranking, hedge budget
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
#define RING 64 /* latencies kept per copy and node for the p95 */
/* Ranking (see docs/fanout-tail.md). R's EWMA: a sample weighs
 * 1 - exp(-dt / TAU_R_NS), within [ALPHA_MIN, ALPHA_MAX]. */
#define TAU_R_NS 100000000.0
#define ALPHA_MIN 0.05
#define ALPHA_MAX 0.5
#define NOISE 1.25                /* copies within this factor of the best ... */
#define BAND_US 100.0             /* ... plus this are equal */
#define TAU_STALE_NS 2e9          /* an unrefreshed R returns to its peers' best */
#define EX_FACTOR 2.0             /* a reply later than its copy's R times this ... */
#define EX_US 1000.0              /* ... plus this is its node's excess */
#define TAU_EX_NS 2e9             /* which decays with this, */
#define EPISODE_NS 1000000000ull  /* doubled for excess after this much quiet (a strike) */
#define FORGIVE_NS 10000000000ull /* a strike is forgiven after this */
#define STRIKES_MAX 5             /* TAU_EX_NS doubled 4 times at most */
#define STALL_GAPS 4.0            /* a node silent this many reply gaps ... */
#define STALL_US 1000.0           /* ... plus this has stalled */
#define IDLE_NS 1000000000ull     /* a copy unused this long takes one at a time ... */
#define WARM 3                    /* ... until it has answered this many */
#define P95_EVERY 8 /* new samples before a ring's p95 is sorted again */
#define BURST 10.0  /* hedge tokens saved up at most */
#define CANCEL_SLOTS 1024
#define CANCEL_WINDOW 32 /* slots an id may take, from its hash on */
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

/* Per node: its excess latency (replies or pings notably slower than
 * their copy's usual, kept as a peak that decays with time), the figures
 * it reports (service time, queue: shown as ES's adaptive_selection, not
 * ranked on) and a summary of its copies for unmeasured ones. */
typedef struct rk_node {
	bool seen;
	double r_us, s_us, q; /* EWMAs: response time, service time, queue */
	uint64_t last_ns;     /* last sample */
	double ex_us;         /* excess latency at bad_ns */
	uint64_t bad_ns;      /* last reply or ping notably slower than usual */
	int strikes;          /* episodes of those, less one per FORGIVE_NS */
	uint64_t strike_ns;   /* the last episode's start */
	uint64_t progress_ns; /* last reply, or the send that found nothing out */
	double ping_us;       /* a ping's usual round trip (low-biased) */
	bool ping_seen;
	uint64_t replies, failures;
	uint32_t ring[RING]; /* latencies, µs */
	int nring, pos;
	int p95_new;     /* samples since p95_us was computed */
	uint32_t p95_us; /* of the ring */
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
	double base_us;        /* the best R among its peers when last ranked */
	uint64_t last_ns;      /* last sample */
	uint64_t last_used_ns; /* last lookup: the set's LRU order */
	uint64_t progress_ns;  /* last reply, or the send that found nothing out */
	uint64_t sent, replies, failures;
	int outstanding;
	int warm; /* replies since it was last sent to after an idle spell */
	uint32_t ring[RING];
	int nring, pos;
	int p95_new;     /* samples since p95_us was computed */
	uint32_t p95_us; /* of the ring */
} rk_copy;

static rk_node fig[ND_CL_MAX_NODES];
static rk_copy copies[COPY_SETS * COPY_WAYS];
static pthread_mutex_t rank_mu = PTHREAD_MUTEX_INITIALIZER;
static double tokens;
static _Atomic uint64_t shard_requests, hedges_sent, hedges_won, hedges_cancelled, hedges_denied,
    cancels_received, stopped;
static _Atomic uint32_t serving, rotation;
static uint64_t (*_Atomic clock_fn)(void) = cm_now_ns;

void
nd_rank_clock(uint64_t (*now_ns)(void))
{
	atomic_store(&clock_fn, now_ns ? now_ns : cm_now_ns);
}

void
nd_rank_forget(void)
{
	pthread_mutex_lock(&rank_mu);
	memset(fig, 0, sizeof(fig));
	memset(copies, 0, sizeof(copies));
	atomic_store(&rotation, 0);
	pthread_mutex_unlock(&rank_mu);
}

static uint64_t
now_ns(void)
{
	return atomic_load(&clock_fn)();
}

/* ns from t to now, 0 when t is later (a clock swapped by a test). */
static double
since(uint64_t now, uint64_t t)
{
	return now > t ? (double)(now - t) : 0;
}

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
	return c->used && since(now, c->last_used_ns) < COPY_TTL_NS && c->node == node &&
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
		if (!c->used || since(now, c->last_used_ns) >= COPY_TTL_NS) {
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
	uint64_t now = now_ns();
	const char *key = copy_key(index, uuid);
	pthread_mutex_lock(&rank_mu);
	if (fig[node].outstanding++ == 0)
		fig[node].progress_ns = now;
	fig[node].sent++;
	for (size_t i = 0; i < n; i++) {
		rk_copy *c = copy_locked(node, key, shards[i], index ? index : "", now);
		if (c->outstanding == 0) {
			c->progress_ns = now;
			if (since(now, c->last_ns) > IDLE_NS)
				c->warm = 0; /* back from idle: one at a time again */
		}
		c->outstanding++;
		c->sent++;
	}
	pthread_mutex_unlock(&rank_mu);
}

static double
ewma(double old, double sample, double alpha)
{
	return old + alpha * (sample - old);
}

static void
ring_add(uint32_t *ring, int *nring, int *pos, int *p95_new, uint64_t us)
{
	ring[*pos] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	*pos = (*pos + 1) % RING;
	if (*nring < RING)
		(*nring)++;
	if (*p95_new < INT32_MAX)
		(*p95_new)++;
}

/* A sample's weight grows with the time since the last one, between
 * ALPHA_MIN (dense samples: a spike moves R a little) and ALPHA_MAX (one
 * sample after a pause never replaces R alone). */
static double
alpha_after(bool seen, double dt)
{
	if (!seen)
		return 1;
	double a = 1.0 - exp(-dt / TAU_R_NS);
	return a < ALPHA_MIN ? ALPHA_MIN : a > ALPHA_MAX ? ALPHA_MAX : a;
}

/* A figure r not refreshed for age ns returns toward base (its peers'
 * best) with time constant TAU_STALE_NS: a copy avoided once is tried
 * again after a while, not never and not at the next request. */
static double
stale_decay(double r, double base, double age)
{
	if (!(base < r))
		return r;
	return base + (r - base) * exp(-age / TAU_STALE_NS);
}

/* The node's strikes now: one forgiven per FORGIVE_NS since the last. */
static int
strikes_now(const rk_node *f, uint64_t now)
{
	int k = f->strikes - (int)(since(now, f->strike_ns) / (double)FORGIVE_NS);
	return k > 0 ? k : 0;
}

/* The node's excess latency now: the peak decays with TAU_EX_NS, doubled
 * for each strike past the first (a node slow again as soon as it is
 * tried stays out longer each time, as Envoy's outlier ejection). */
static double
excess_now(const rk_node *f, uint64_t now)
{
	if (!f->bad_ns)
		return 0;
	int k = strikes_now(f, now);
	double tau = TAU_EX_NS * (double)(1u << (k > 1 ? k - 1 : 0));
	return f->ex_us * exp(-since(now, f->bad_ns) / tau);
}

/* Whether sample x (µs) is notably slower than usual u: a delay the
 * node's link or process added, not the noise of a busy machine. */
static bool
is_bad(double x, double u)
{
	return x > u * EX_FACTOR + EX_US;
}

/* Locked: node f answered ex µs later than usual; a first one after
 * EPISODE_NS of quiet is a new strike. */
static void
excess_add(rk_node *f, double ex, uint64_t now)
{
	double cur = excess_now(f, now);
	if (!f->bad_ns || since(now, f->bad_ns) > EPISODE_NS) {
		int k = strikes_now(f, now) + 1;
		f->strikes = k < STRIKES_MAX ? k : STRIKES_MAX;
		f->strike_ns = now;
	}
	f->ex_us = ex > cur ? ex : cur;
	f->bad_ns = now;
}

/* Locked: copy c's R now, aged toward its base while neither it nor its
 * node has told anything new. */
static double
copy_r_locked(const rk_copy *c, uint64_t now)
{
	const rk_node *f = &fig[c->node];
	uint64_t t = c->last_ns > f->bad_ns ? c->last_ns : f->bad_ns;
	return stale_decay(c->r_us, c->base_us, since(now, t));
}

void
nd_rank_done(int node, const char *index, const char *uuid, const int *shards, size_t n, bool ok,
             uint64_t rtt_ns, const uint64_t *service_us, size_t nservice, uint32_t queue,
             bool censored)
{
	if (!valid(node))
		return;
	rk_node *f = &fig[node];
	uint64_t now = now_ns();
	const char *key = copy_key(index, uuid);
	double r = (double)rtt_ns / 1000.0, smax = 0, excess = 0;
	for (size_t i = 0; i < nservice; i++)
		smax = (double)service_us[i] > smax ? (double)service_us[i] : smax;
	pthread_mutex_lock(&rank_mu);
	if (f->outstanding > 0)
		f->outstanding--;
	f->progress_ns = now;
	for (size_t i = 0; i < n; i++) {
		rk_copy *c = copy_locked(node, key, shards[i], index ? index : "", now);
		if (c->outstanding > 0)
			c->outstanding--; /* 0 when it was evicted meanwhile */
		c->progress_ns = now;
		/* notably slower than this copy's usual: its node is suspect */
		double usual = c->seen ? copy_r_locked(c, now) : 0;
		if (c->seen && is_bad(r, usual) && r - usual > excess)
			excess = r - usual;
		if (!ok) {
			c->failures++;
			continue;
		}
		c->replies++;
		double s = i < nservice ? (double)service_us[i] : smax,
		       a = alpha_after(c->seen, since(now, c->last_ns));
		c->r_us = c->seen ? ewma(usual, r, a) : r;
		if (nservice)
			c->s_us = c->seen ? ewma(c->s_us, s, a) : s;
		c->seen = true;
		c->last_ns = now;
		if (c->warm < WARM)
			c->warm++;
		if (!censored)
			ring_add(c->ring, &c->nring, &c->pos, &c->p95_new, rtt_ns / 1000);
	}
	if (excess > 0)
		excess_add(f, excess, now);
	if (!ok) {
		f->failures++;
		pthread_mutex_unlock(&rank_mu);
		return;
	}
	f->replies++;
	double a = alpha_after(f->seen, since(now, f->last_ns));
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
		ring_add(f->ring, &f->nring, &f->pos, &f->p95_new, rtt_ns / 1000);
	pthread_mutex_unlock(&rank_mu);
}

void
nd_rank_ping(int node, bool ok, uint64_t rtt_ns)
{
	if (!valid(node) || !ok)
		return; /* a failed ping: the node's liveness says it */
	rk_node *f = &fig[node];
	uint64_t now = now_ns();
	double x = (double)rtt_ns / 1000.0;
	pthread_mutex_lock(&rank_mu);
	if (f->ping_seen && is_bad(x, f->ping_us))
		excess_add(f, x - f->ping_us, now);
	/* the usual ping: quick to fall, slow to rise (bad pings are rare
	 * samples of a link, not its usual) */
	f->ping_us = !f->ping_seen ? x : ewma(f->ping_us, x, x < f->ping_us ? 0.5 : 0.05);
	f->ping_seen = true;
	pthread_mutex_unlock(&rank_mu);
}

void
nd_rank_censored(int node, const nd_rank_copy *c, uint64_t ns)
{
	if (!valid(node))
		return;
	uint64_t now = now_ns();
	pthread_mutex_lock(&rank_mu);
	ring_add(fig[node].ring, &fig[node].nring, &fig[node].pos, &fig[node].p95_new,
	         ns / 1000);
	if (c) {
		rk_copy *k = copy_locked(node, copy_key(c->index, c->uuid), c->shard,
		                         c->index ? c->index : "", now);
		ring_add(k->ring, &k->nring, &k->pos, &k->p95_new, ns / 1000);
	}
	pthread_mutex_unlock(&rank_mu);
}

/* How a candidate ranks: its latency figure (µs), its requests out,
 * whether it is in slow start with one out, and its class. */
enum { RK_BAND, RK_RANKED, RK_STALLED, RK_DEAD };
typedef struct rk_cand {
	double lat;
	int out, node_out, cls, pos;
	bool warming, known; /* known: measured, or its node is */
} rk_cand;

/* Locked: whether node has answered nothing for several times the gap
 * its replies usually leave with this many requests out (a stall: a
 * link or process that stopped). Seen node-wide, it is caught after a
 * few gaps, not after a whole response time of each copy. */
static bool
node_stalled(const rk_node *f, uint64_t now)
{
	if (f->outstanding <= 0 || !f->seen)
		return false;
	double gap_us = f->r_us / f->outstanding;
	return since(now, f->progress_ns) / 1000.0 > STALL_GAPS * gap_us + STALL_US;
}

/* Locked: the latency this coordinator expects from copy c on node (c
 * NULL: not in the table), apart from its node's excess (*ex): its R, aged
 * toward base while stale; a copy on a node never heard from ranks 0 (it
 * is tried). *stalled: it or its node has answered nothing for too long
 * while requests are out. *warming: it has one out and is new or back
 * from idle (until WARM replies): equal copies go first. */
static double
lat_locked(int node, const rk_copy *c, double base, uint64_t now, bool *stalled, bool *warming,
           double *ex)
{
	const rk_node *f = &fig[node];
	*stalled = node_stalled(f, now);
	*ex = excess_now(f, now);
	if (c && c->seen) {
		double r = copy_r_locked(c, now), stuck = since(now, c->progress_ns) / 1000.0;
		*stalled = *stalled || (c->outstanding > 0 && stuck > 2 * r + BAND_US);
		*warming = c->outstanding > 0 && c->warm < WARM;
		/* a stall is seen before its replies come: it counts as latency */
		return *stalled && stuck > r ? stuck : r;
	}
	*warming = c && c->outstanding > 0;
	if (!f->seen)
		return 0;
	uint64_t t = f->last_ns > f->bad_ns ? f->last_ns : f->bad_ns;
	return stale_decay(f->r_us, base, since(now, t));
}

/* a before b: class, then in the band those not warming, fewest out
 * (the copy's, then its node's) and the turn; elsewhere latency. */
static bool
cand_before(const rk_cand *a, const rk_cand *b)
{
	if (a->cls != b->cls)
		return a->cls < b->cls;
	if (a->cls == RK_BAND) {
		if (a->warming != b->warming)
			return !a->warming;
		if (a->out != b->out)
			return a->out < b->out;
		if (a->node_out != b->node_out)
			return a->node_out < b->node_out;
		return a->pos < b->pos;
	}
	if (a->cls == RK_DEAD || a->lat == b->lat)
		return a->pos < b->pos;
	return a->lat < b->lat;
}

/* The ranking. Not C3's R - S + (1 + o·n + q)³·S (Elasticsearch's
 * adaptive replica selection): on a saturated machine its cubed queue
 * term swamps R, the only figure that sees a slow link, and its S and q
 * (measured on the data node) track CPU contention, not the copy; see
 * docs/fanout-tail.md. */
void
nd_rank_order(const nd_rank_copy *copy, const int *cand, const bool *alive, int n, int nnodes,
              int *out)
{
	rk_cand k[ND_CL_MAX_COPIES];
	bool live[ND_CL_MAX_COPIES];
	double ex[ND_CL_MAX_COPIES];
	rk_copy *c[ND_CL_MAX_COPIES];
	uint64_t now = now_ns();
	const char *key = copy_key(copy->index, copy->uuid);
	uint32_t turn = atomic_fetch_add(&rotation, 1);
	double base = INFINITY, best = INFINITY;
	(void)nnodes;
	if (n > ND_CL_MAX_COPIES)
		n = ND_CL_MAX_COPIES;
	if (n <= 0)
		return;
	pthread_mutex_lock(&rank_mu);
	/* the best fresh R among the live candidates: what stale ones age to */
	for (int i = 0; i < n; i++) {
		live[i] = valid(cand[i]) && alive[i];
		c[i] = live[i] ? copy_locked(cand[i], key, copy->shard, NULL, now) : NULL;
		double r = c[i] && c[i]->seen        ? c[i]->r_us
		           : live[i] && fig[cand[i]].seen ? fig[cand[i]].r_us
		                                          : INFINITY;
		base = r < base ? r : base;
	}
	for (int i = 0; i < n; i++) {
		bool stalled = false;
		if (!live[i]) {
			k[i] = (rk_cand){INFINITY, 0, 0, RK_DEAD, i, false, false};
			continue;
		}
		if (c[i] && isfinite(base))
			c[i]->base_us = base;
		k[i].lat = lat_locked(cand[i], c[i], base, now, &stalled, &k[i].warming, &ex[i]);
		k[i].out = c[i] ? c[i]->outstanding : 0;
		k[i].node_out = fig[cand[i]].outstanding;
		k[i].known = (c[i] && c[i]->seen) || fig[cand[i]].seen;
		k[i].cls = stalled ? RK_STALLED : RK_RANKED;
		/* the turn: equal copies take requests in rotation */
		k[i].pos = (int)(((uint32_t)i + (uint32_t)n - turn % (uint32_t)n) % (uint32_t)n);
	}
	pthread_mutex_unlock(&rank_mu);
	/* a node's excess adds to its latency; the band is relative, so on
	 * a busy machine where every node is late now and then it widens
	 * (one node's recent hiccup against another's older one is noise).
	 * A copy not known yet with one out does not set the band (it
	 * ranks 0 until it answers). */
	for (int i = 0; i < n; i++)
		if (k[i].cls != RK_DEAD) {
			k[i].lat += ex[i];
			if (k[i].cls == RK_RANKED && (k[i].known || !k[i].warming) &&
			    k[i].lat < best)
				best = k[i].lat;
		}
	for (int i = 0; i < n; i++)
		if (k[i].cls == RK_RANKED && k[i].lat <= best * NOISE + BAND_US)
			k[i].cls = RK_BAND;
	/* n is a handful: selection by cand_before */
	bool taken[ND_CL_MAX_COPIES] = {false};
	for (int o = 0; o < n; o++) {
		int b = -1;
		for (int i = 0; i < n; i++)
			if (!taken[i] && (b < 0 || cand_before(&k[i], &k[b])))
				b = i;
		taken[b] = true;
		out[o] = cand[b];
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

/* Locked: the p95 of a ring in ns, or twice r_us with too few samples;
 * the sort runs every P95_EVERY new samples, not for every message a
 * hedge timer is armed for. */
static uint64_t
p95_cached_ns(const uint32_t *ring, int nring, int *p95_new, uint32_t *p95_us, double r_us)
{
	if (nring < 16)
		return (uint64_t)(2 * r_us * 1000);
	if (*p95_new >= P95_EVERY || *p95_us == 0) {
		uint32_t v[RING];
		memcpy(v, ring, sizeof(v));
		*p95_us = (uint32_t)(p95_ns(v, nring, r_us) / 1000);
		*p95_new = 0;
	}
	return (uint64_t)*p95_us * 1000;
}

uint64_t
nd_rank_hedge_delay(int node, const char *index, const char *uuid, const int *shards, size_t n,
                    uint64_t min_delay_ns)
{
	const char *key = copy_key(index, uuid);
	uint64_t d = 0, now = now_ns();
	if (!valid(node))
		return min_delay_ns;
	rk_node *f = &fig[node];
	pthread_mutex_lock(&rank_mu);
	for (size_t i = 0; i < n; i++) {
		uint64_t x = 0;
		rk_copy *c = copy_locked(node, key, shards[i], NULL, now);
		if (c)
			x = p95_cached_ns(c->ring, c->nring, &c->p95_new, &c->p95_us,
			                  c->seen ? c->r_us : 0);
		else if (f->seen) /* not measured yet: its node's figures stand in */
			x = p95_cached_ns(f->ring, f->nring, &f->p95_new, &f->p95_us, f->r_us);
		d = x > d ? x : d;
	}
	pthread_mutex_unlock(&rank_mu);
	return d > min_delay_ns ? d : min_delay_ns;
}

size_t
nd_rank_copies(size_t *cap)
{
	size_t k = 0;
	uint64_t now = now_ns();
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
	uint64_t now = now_ns();
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

/* Pending hedges: a binary heap by deadline (then arrival), so arming
 * one costs O(log n) and wakes the timer thread only when it is the new
 * earliest — every hedgeable message arms one. */
typedef struct rk_timer {
	uint64_t at, seq;
	nd_rank_timer_fn fn;
	void *arg;
} rk_timer;

static pthread_mutex_t timer_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t timer_cv;
static rk_timer *heap;
static size_t nheap, capheap;
static uint64_t timer_seq;
static pthread_once_t timer_once = PTHREAD_ONCE_INIT;

static bool
timer_before(const rk_timer *a, const rk_timer *b)
{
	return a->at != b->at ? a->at < b->at : a->seq < b->seq;
}

static void
timer_swap(size_t i, size_t j)
{
	rk_timer t = heap[i];
	heap[i] = heap[j];
	heap[j] = t;
}

/* Locked: removes the earliest into *out. */
static void
timer_pop(rk_timer *out)
{
	*out = heap[0];
	heap[0] = heap[--nheap];
	for (size_t i = 0;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < nheap && timer_before(&heap[l], &heap[m]))
			m = l;
		if (r < nheap && timer_before(&heap[r], &heap[m]))
			m = r;
		if (m == i)
			break;
		timer_swap(i, m);
		i = m;
	}
}

static void *
timer_main(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&timer_mu);
	for (;;) {
		uint64_t now = cm_now_ns();
		if (nheap && heap[0].at <= now) {
			rk_timer t;
			timer_pop(&t);
			pthread_mutex_unlock(&timer_mu);
			t.fn(t.arg);
			pthread_mutex_lock(&timer_mu);
			continue;
		}
		if (!nheap) {
			pthread_cond_wait(&timer_cv, &timer_mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t wait = heap[0].at - now, ns = (uint64_t)ts.tv_nsec + wait % 1000000000ull;
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
	pthread_mutex_lock(&timer_mu);
	if (nheap == capheap) {
		capheap = capheap ? 2 * capheap : 64;
		heap = cm_realloc(MEM, heap, capheap * sizeof(*heap));
	}
	size_t i = nheap++;
	heap[i] = (rk_timer){at_ns, timer_seq++, fn, arg};
	while (i > 0 && timer_before(&heap[i], &heap[(i - 1) / 2])) {
		timer_swap(i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	if (i == 0) /* the new earliest: the thread's wait is too long */
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

/* A slot for id among the CANCEL_WINDOW from its hash on: the one it
 * already has, else a free or expired one (NULL: none; that request
 * runs uncancellable to its end). Every search a hedging coordinator
 * sends comes here, so it looks at a window, not the whole table. Locked. */
static nd_rank_run *
slot_locked(uint64_t id, uint64_t now, bool *found)
{
	nd_rank_run *free_slot = NULL;
	size_t home = (size_t)((id * 0x9e3779b97f4a7c15ull) >> 32) % CANCEL_SLOTS;
	*found = false;
	for (int w = 0; w < CANCEL_WINDOW; w++) {
		nd_rank_run *r = &runs[(home + (size_t)w) % CANCEL_SLOTS];
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
	uint64_t now = now_ns();
	pthread_mutex_lock(&rank_mu);
	for (size_t i = 0; i < cap; i++)
		if (copies[i].used && now - copies[i].last_used_ns < COPY_TTL_NS &&
		    copies[i].node < nn)
			v[k++] = copies[i];
	pthread_mutex_unlock(&rank_mu);
	qsort(v, k, sizeof(*v), cmp_copy);
	pthread_mutex_lock(&rank_mu); /* ranks with the nodes' excess of now */
	for (size_t i = 0; i < k; i++) {
		bool stalled, warming;
		double ex;
		rk[i] = lat_locked(v[i].node, &v[i], v[i].base_us, now, &stalled, &warming, &ex) +
		        ex;
	}
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
		bool stalled, warming;
		double ex, r = f->r_us, s = f->s_us, q = f->q,
		           rk = lat_locked(i, NULL, INFINITY, now_ns(), &stalled, &warming, &ex);
		rk += ex;
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
