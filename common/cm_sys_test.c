/* cm_pool_run_all: every item runs exactly once and the call returns only
 * after all have finished, with the caller taking items beside the pool
 * (so it finishes with every worker busy, and nested in a pool task). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/cm_sys.h"

typedef struct item {
	_Atomic int runs;
	_Atomic int *finished; /* items done so far, shared */
} item;

static void
run_item(void *arg)
{
	item *it = arg;
	atomic_fetch_add(&it->runs, 1);
	atomic_fetch_add(it->finished, 1);
}

static void
check_once(cm_pool *p, size_t n)
{
	item *items = calloc(n ? n : 1, sizeof(*items));
	_Atomic int finished = 0;
	for (size_t i = 0; i < n; i++)
		items[i].finished = &finished;
	cm_pool_run_all(p, run_item, items, sizeof(item), n);
	/* all done when the call returns: nothing may still be running */
	CHECKF(atomic_load(&finished) == (int)n, "n %zu: %d finished", n, atomic_load(&finished));
	for (size_t i = 0; i < n; i++)
		CHECKF(atomic_load(&items[i].runs) == 1, "n %zu item %zu ran %d times", n, i,
		       atomic_load(&items[i].runs));
	free(items);
}

/* ---- a pool whose only worker is held: the caller runs everything ---- */

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open;

static void
hold_worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gate_mu);
	while (!gate_open)
		pthread_cond_wait(&gate_cv, &gate_mu);
	pthread_mutex_unlock(&gate_mu);
}

/* ---- cm_pool_run_some: helpers only when asked for and idle ---- */

typedef struct owner_item {
	pthread_t ran_on;
	int order; /* when it ran among the items run inline */
	_Atomic int *clock;
} owner_item;

static void
note_owner(void *arg)
{
	owner_item *it = arg;
	it->ran_on = pthread_self();
	it->order = atomic_fetch_add(it->clock, 1);
}

/* With no helper allowed, or none idle, every item runs on the caller in
 * order; else each still runs once, with no more helpers than asked. */
static void
check_some(cm_pool *p, size_t n, size_t max_helpers, bool expect_inline)
{
	owner_item items[32];
	_Atomic int clock = 0;
	REQUIRE(n <= 32);
	for (size_t i = 0; i < n; i++)
		items[i] = (owner_item){.order = -1, .clock = &clock};
	size_t k = cm_pool_run_some(p, note_owner, items, sizeof(items[0]), n, max_helpers);
	CHECKF(k <= max_helpers && (n == 0 || k < n), "n %zu max %zu: %zu helpers", n, max_helpers,
	       k);
	CHECKF(atomic_load(&clock) == (int)n, "n %zu: %d ran", n, atomic_load(&clock));
	if (!expect_inline)
		return;
	CHECKF(k == 0, "n %zu max %zu: %zu helpers, none expected", n, max_helpers, k);
	for (size_t i = 0; i < n; i++) {
		CHECKF(pthread_equal(items[i].ran_on, pthread_self()), "item %zu not on the caller", i);
		CHECKF(items[i].order == (int)i, "item %zu ran %d-th", i, items[i].order);
	}
}

/* ---- a run nested in a pool task, on a one-thread pool ---- */

typedef struct nested {
	cm_pool *p;
	_Atomic int inner;
} nested;

static void
inner_item(void *arg)
{
	atomic_fetch_add((_Atomic int *)arg, 1);
}

static void
outer_item(void *arg)
{
	nested *ns = arg;
	_Atomic int cells[8];
	for (int i = 0; i < 8; i++)
		atomic_init(&cells[i], 0);
	cm_pool_run_all(ns->p, inner_item, cells, sizeof(cells[0]), 8);
	int sum = 0;
	for (int i = 0; i < 8; i++)
		sum += atomic_load(&cells[i]);
	atomic_fetch_add(&ns->inner, sum);
}

/* ---- several callers at once on one pool ---- */

static cm_pool *shared_pool;

static void *
caller_thread(void *arg)
{
	(void)arg;
	for (int round = 0; round < 300; round++)
		check_once(shared_pool, (size_t)(round % 17));
	return NULL;
}

static void
test_did_you_mean(void)
{
	char out[128];
	/* ES: "jlp" -> [jlh] (2/3 similar); "gnd" is 0 similar */
	CHECK(cm_did_you_mean("jlp", "field,jlh,gnd,chi_square", out, sizeof out));
	CHECKF(!strcmp(out, "[jlh]"), "got %s", out);
	CHECK(cm_did_you_mean("dac", "doc,upsert,script,doc_as_upsert", out, sizeof out));
	CHECKF(!strcmp(out, "[doc]"), "got %s", out);
	CHECK(cm_did_you_mean("fieldata", "docs,fielddata,store", out, sizeof out));
	CHECKF(!strcmp(out, "[fielddata]"), "got %s", out);
	/* several: most similar first, ties by name */
	CHECK(cm_did_you_mean("abcd", "abcx,abxd,abcde,zzzz", out, sizeof out));
	CHECKF(!strcmp(out, "any of [abcde, abcx, abxd]"), "got %s", out);
	/* exactly 0.5 is not enough */
	CHECK(!cm_did_you_mean("ab", "ax,q", out, sizeof out) && out[0] == 0);
	CHECK(!cm_did_you_mean("x", "", out, sizeof out));
	/* a small buffer is cut, never overrun */
	char tiny[6];
	cm_did_you_mean("abcd", "abcx,abxd", tiny, sizeof tiny);
	CHECK(strlen(tiny) < sizeof tiny);
}

int
main(void)
{
	test_did_you_mean();
	cm_pool *p = cm_pool_create(3, "t");
	for (size_t n = 0; n < 40; n++)
		check_once(p, n);
	check_once(NULL, 5);
	/* no helper asked for: the caller's own, in order */
	for (size_t n = 0; n < 20; n++)
		check_some(p, n, 0, true);
	check_some(NULL, 6, 8, true);
	/* helpers allowed: whichever are idle; each item still runs once */
	for (size_t n = 0; n < 32; n++)
		check_some(p, n, n, false);
	CHECK(cm_pool_idle(NULL) == 0);
	CHECK(cm_pool_idle(p) <= cm_pool_threads(p));

	/* the only worker of p1 is held: run_all still completes on the caller */
	cm_pool *p1 = cm_pool_create(1, "t1");
	cm_pool_submit(p1, hold_worker, NULL);
	check_once(p1, 64);
	/* its worker busy: none idle, so all run on the caller */
	CHECK(cm_pool_idle(p1) == 0);
	check_some(p1, 7, 3, true);
	pthread_mutex_lock(&gate_mu);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);

	/* nested: outer items on p1 each run an inner run_all on p1 */
	nested ns[4];
	for (int i = 0; i < 4; i++) {
		ns[i].p = p1;
		atomic_init(&ns[i].inner, 0);
	}
	cm_pool_run_all(p1, outer_item, ns, sizeof(ns[0]), 4);
	for (int i = 0; i < 4; i++)
		CHECKF(atomic_load(&ns[i].inner) == 8, "nested %d: %d", i, atomic_load(&ns[i].inner));

	shared_pool = p;
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, caller_thread, NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	cm_pool_destroy(p1);
	cm_pool_destroy(p);
	return check_report("cm_sys_test");
}
