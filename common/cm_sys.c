#define _GNU_SOURCE
#include "cm_sys.h"

#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cm_alloc.h"

uint64_t
cm_now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

uint64_t
cm_rss_bytes(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
			rss = 0;
		fclose(f);
	}
	return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CM_SANITIZED 1
#endif
#endif

#ifndef CM_SANITIZED
static void
crash_report(int sig)
{
	/* only async-signal-safe calls: write(2), strlen, backtrace_symbols_fd */
	const char *name = sig == SIGSEGV  ? "SIGSEGV"
	                   : sig == SIGBUS ? "SIGBUS"
	                   : sig == SIGILL ? "SIGILL"
	                   : sig == SIGFPE ? "SIGFPE"
	                                   : "SIGABRT";
	const char *parts[] = {"shoal: fatal signal ", name, ", stack:\n"};
	for (size_t i = 0; i < 3; i++)
		if (write(STDERR_FILENO, parts[i], strlen(parts[i])) < 0)
			break;
	void *frames[64];
	int depth = backtrace(frames, 64);
	backtrace_symbols_fd(frames, depth, STDERR_FILENO);
	signal(sig, SIG_DFL);
	raise(sig);
}
#endif

void
cm_crash_report_install(void)
{
#ifndef CM_SANITIZED
	/* backtrace() loads libgcc on first use, which may allocate: done
	 * here, not first inside a handler over a broken heap */
	void *warm[1];
	(void)backtrace(warm, 1);
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = crash_report;
		sa.sa_flags = SA_RESETHAND | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
#endif
}

bool
cm_parse_duration_ns(const char *v, uint64_t *out)
{
	char *end;
	double x = strtod(v, &end);
	double mul = strcmp(end, "ms") == 0           ? 1e6
	             : strcmp(end, "s") == 0 || !*end ? 1e9
	             : strcmp(end, "m") == 0          ? 60e9
	                                              : -1;
	if (end == v || !(x >= 0) || mul < 0 || x * mul > 86400e9)
		return false;
	*out = (uint64_t)(x * mul);
	return true;
}

int64_t
cm_wall_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

double
cm_cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

cm_err
cm_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return CM_EIO;
	int rc = fsync(fd);
	close(fd);
	return rc == 0 ? CM_OK : CM_EIO;
}

cm_err
cm_file_write_atomic(const char *path, const void *data, size_t len)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	const char *p = data;
	int fd;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return CM_EINVAL;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return CM_EIO;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto fail;
		p += n;
		len -= (size_t)n;
	}
	if (fsync(fd) != 0)
		goto fail;
	close(fd);
	if (rename(tmp, path) != 0) {
		unlink(tmp);
		return CM_EIO;
	}
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == NULL)
		return cm_fsync_dir(".");
	*slash = '\0';
	return cm_fsync_dir(dir[0] ? dir : "/");
fail:
	close(fd);
	unlink(tmp);
	return CM_EIO;
}

cm_err
cm_file_read(const char *path, size_t max, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return errno == ENOENT ? CM_ENOTFOUND : CM_EIO;
	size_t cap = 4096, n = 0;
	char *buf = cm_malloc(CM_MEM_COMMON, cap + 1);
	for (;;) {
		if (n == cap) {
			if (cap >= max)
				break;
			cap *= 2;
			buf = cm_realloc(CM_MEM_COMMON, buf, cap + 1);
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		if (got == 0)
			break;
		n += got;
	}
	int bad = ferror(f) || n > max;
	fclose(f);
	if (bad) {
		cm_free(CM_MEM_COMMON, buf);
		return n > max ? CM_ETOOLARGE : CM_EIO;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return CM_OK;
}

cm_err
cm_mkdir_p(const char *path)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
		return CM_EINVAL;
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
			return CM_EIO;
		*p = '/';
	}
	if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
		return CM_EIO;
	return CM_OK;
}

static int64_t
dir_walk(const char *path, int remove_all)
{
	struct stat st;
	int64_t total = 0;
	if (lstat(path, &st) != 0)
		return 0;
	if (S_ISDIR(st.st_mode)) {
		DIR *d = opendir(path);
		struct dirent *e;
		char sub[PATH_MAX];
		while (d && (e = readdir(d)) != NULL) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			if (snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name) >=
			    (int)sizeof(sub))
				continue;
			total += dir_walk(sub, remove_all);
		}
		if (d)
			closedir(d);
		if (remove_all)
			rmdir(path);
	} else {
		total += (int64_t)st.st_blocks * 512;
		if (remove_all)
			unlink(path);
	}
	return total;
}

cm_err
cm_rm_rf(const char *path)
{
	dir_walk(path, 1);
	return access(path, F_OK) == 0 ? CM_EIO : CM_OK;
}

int64_t
cm_dir_bytes(const char *path)
{
	return dir_walk(path, 0);
}

/* ---- worker pool ---- */

typedef struct cm_task {
	cm_task_fn fn;
	void *arg;
	struct cm_task *next;
} cm_task;

struct cm_pool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	cm_task *head, *tail;
	int stopping;
	int nthreads;
	pthread_t *threads;
	/* Workers asleep on cv and tasks queued, both changed under mu and
	 * read without it: their difference is a hint of how many workers a
	 * new task would find idle (cm_pool_run_some). */
	_Atomic int sleeping, queued;
};

static void *
pool_worker(void *arg)
{
	cm_pool *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (p->head == NULL && !p->stopping) {
			atomic_fetch_add_explicit(&p->sleeping, 1, memory_order_relaxed);
			pthread_cond_wait(&p->cv, &p->mu);
			atomic_fetch_sub_explicit(&p->sleeping, 1, memory_order_relaxed);
		}
		cm_task *t = p->head;
		if (t == NULL) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
		p->head = t->next;
		if (p->head == NULL)
			p->tail = NULL;
		pthread_mutex_unlock(&p->mu);
		t->fn(t->arg);
		cm_free(CM_MEM_COMMON, t);
	}
}

cm_pool *
cm_pool_create(int nthreads, const char *name)
{
	cm_pool *p = cm_calloc(CM_MEM_COMMON, 1, sizeof(*p));
	if (nthreads < 1)
		nthreads = 1;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->nthreads = nthreads;
	p->threads = cm_calloc(CM_MEM_COMMON, (size_t)nthreads, sizeof(pthread_t));
	for (int i = 0; i < nthreads; i++) {
		pthread_create(&p->threads[i], NULL, pool_worker, p);
		if (name) {
			char tn[16];
			snprintf(tn, sizeof(tn), "%.8s-%d", name, i % 1000);
			pthread_setname_np(p->threads[i], tn);
		}
	}
	return p;
}

void
cm_pool_destroy(cm_pool *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	p->stopping = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	cm_free(CM_MEM_COMMON, p->threads);
	cm_free(CM_MEM_COMMON, p);
}

void
cm_pool_submit(cm_pool *p, cm_task_fn fn, void *arg)
{
	cm_task *t = cm_malloc(CM_MEM_COMMON, sizeof(*t));
	t->fn = fn;
	t->arg = arg;
	t->next = NULL;
	pthread_mutex_lock(&p->mu);
	if (p->tail)
		p->tail->next = t;
	else
		p->head = t;
	p->tail = t;
	atomic_fetch_add_explicit(&p->queued, 1, memory_order_relaxed);
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

int
cm_pool_threads(const cm_pool *p)
{
	return p ? p->nthreads : 1;
}

int
cm_pool_idle(cm_pool *p)
{
	if (p == NULL)
		return 0;
	int idle = atomic_load_explicit(&p->sleeping, memory_order_relaxed) -
	           atomic_load_explicit(&p->queued, memory_order_relaxed);
	return idle > 0 ? idle : 0;
}

struct cm_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int count;
};

cm_wait *
cm_wait_create(int count)
{
	cm_wait *w = cm_malloc(CM_MEM_COMMON, sizeof(*w));
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->count = count;
	return w;
}

void
cm_wait_done(cm_wait *w)
{
	pthread_mutex_lock(&w->mu);
	if (--w->count == 0)
		pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void
cm_wait_wait(cm_wait *w)
{
	pthread_mutex_lock(&w->mu);
	while (w->count > 0)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

void
cm_wait_destroy(cm_wait *w)
{
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	cm_free(CM_MEM_COMMON, w);
}

/* One cm_pool_run_all: its items are taken in order from `next` by the
 * caller and by up to nthreads pool tasks alike, so small items mostly run
 * on the caller without waiting for a worker to wake; a task that wakes
 * after the last item was taken just leaves. Freed by whoever drops the
 * last reference (the caller, or a task waking late). */
typedef struct run_all {
	cm_task_fn fn;
	char *args;
	size_t stride, n;
	_Atomic size_t next, done;
	_Atomic int refs;
	pthread_mutex_t mu;
	pthread_cond_t cv;
} run_all;

static void
run_all_unref(run_all *r)
{
	if (atomic_fetch_sub(&r->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	cm_free(CM_MEM_COMMON, r);
}

static void
run_all_take(run_all *r)
{
	for (size_t i; (i = atomic_fetch_add(&r->next, 1)) < r->n;) {
		r->fn(r->args + i * r->stride);
		if (atomic_fetch_add(&r->done, 1) + 1 == r->n) {
			pthread_mutex_lock(&r->mu);
			pthread_cond_broadcast(&r->cv);
			pthread_mutex_unlock(&r->mu);
		}
	}
}

static void
run_all_task(void *arg)
{
	run_all *r = arg;
	run_all_take(r);
	run_all_unref(r);
}

static void
run_helped(cm_pool *p, cm_task_fn fn, void *args, size_t stride, size_t n, size_t helpers)
{
	if (helpers == 0) {
		for (size_t i = 0; i < n; i++)
			fn((char *)args + i * stride);
		return;
	}
	run_all *r = cm_malloc(CM_MEM_COMMON, sizeof(*r));
	r->fn = fn;
	r->args = args;
	r->stride = stride;
	r->n = n;
	atomic_init(&r->next, 0);
	atomic_init(&r->done, 0);
	atomic_init(&r->refs, (int)helpers + 1);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	for (size_t i = 0; i < helpers; i++)
		cm_pool_submit(p, run_all_task, r);
	run_all_take(r);
	pthread_mutex_lock(&r->mu);
	while (atomic_load(&r->done) < n)
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	run_all_unref(r);
}

void
cm_pool_run_all(cm_pool *p, cm_task_fn fn, void *args, size_t stride, size_t n)
{
	size_t k = 0;
	if (p != NULL && n > 1)
		k = n - 1 < (size_t)p->nthreads ? n - 1 : (size_t)p->nthreads;
	run_helped(p, fn, args, stride, n, k);
}

size_t
cm_pool_run_some(cm_pool *p, cm_task_fn fn, void *args, size_t stride, size_t n,
                 size_t max_helpers)
{
	size_t k = 0;
	if (p != NULL && n > 1) {
		k = n - 1;
		if (k > max_helpers)
			k = max_helpers;
		size_t idle = (size_t)cm_pool_idle(p);
		if (k > idle)
			k = idle;
	}
	run_helped(p, fn, args, stride, n, k);
	return k;
}

#define DYM_MAX 16  /* suggestions kept */
#define DYM_LEN 128 /* names longer than this are not compared */

static float
similarity(const char *a, size_t la, const char *b, size_t lb)
{
	unsigned row[DYM_LEN + 1];
	if (la > DYM_LEN || lb > DYM_LEN)
		return 0;
	if (!la && !lb)
		return 1;
	for (size_t j = 0; j <= lb; j++)
		row[j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		unsigned diag = row[0];
		row[0] = (unsigned)i;
		for (size_t j = 1; j <= lb; j++) {
			unsigned up = row[j];
			unsigned best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return 1.0f - (float)row[lb] / (float)(la > lb ? la : lb);
}

bool
cm_did_you_mean(const char *key, const char *candidates, char *out, size_t cap)
{
	struct {
		float score;
		const char *s;
		size_t n;
	} hit[DYM_MAX];
	size_t nhit = 0, kl = strlen(key);
	if (cap)
		out[0] = 0;
	for (const char *p = candidates; p && *p;) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		float sc = similarity(key, kl, p, n);
		if (sc > 0.5f && nhit < DYM_MAX) {
			size_t at = nhit++;
			/* insertion sort: most similar first, then by name */
			while (at > 0) {
				int c = strncmp(hit[at - 1].s, p,
				                n < hit[at - 1].n ? n : hit[at - 1].n);
				bool after = hit[at - 1].score > sc ||
				             (hit[at - 1].score == sc &&
				              (c < 0 || (c == 0 && hit[at - 1].n <= n)));
				if (after)
					break;
				hit[at] = hit[at - 1];
				at--;
			}
			hit[at].score = sc;
			hit[at].s = p;
			hit[at].n = n;
		}
		p = e ? e + 1 : NULL;
	}
	if (!nhit || !cap)
		return nhit > 0;
	size_t len = 0;
	int w = snprintf(out, cap, "%s[", nhit > 1 ? "any of " : "");
	len = w > 0 && (size_t)w < cap ? (size_t)w : cap - 1;
	for (size_t i = 0; i < nhit && len + 1 < cap; i++) {
		w = snprintf(out + len, cap - len, "%s%.*s", i ? ", " : "", (int)hit[i].n,
		             hit[i].s);
		len = w > 0 && (size_t)w < cap - len ? len + (size_t)w : cap - 1;
	}
	if (len + 1 < cap) {
		out[len++] = ']';
		out[len] = 0;
	}
	return true;
}

bool
cm_glob(const char *pat, const char *s)
{
	const char *star = NULL, *mark = NULL;
	while (*s) {
		if (*pat == '*') {
			star = pat++;
			mark = s;
		} else if (*pat == *s) {
			pat++;
			s++;
		} else if (star) {
			pat = star + 1;
			s = ++mark;
		} else {
			return false;
		}
	}
	while (*pat == '*')
		pat++;
	return *pat == 0;
}
