/* Clocks, durable file writes and a worker pool. */
#ifndef CM_SYS_H
#define CM_SYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_err.h"

uint64_t cm_now_ns(void); /* CLOCK_MONOTONIC */
int64_t cm_wall_ms(void); /* CLOCK_REALTIME, epoch millis */
/* A duration setting: "500ms", "10s", "2m", a bare number is seconds;
 * 0 .. 1 day. False when malformed or out of range. */
bool cm_parse_duration_ns(const char *v, uint64_t *out);
double cm_cpu_seconds(void); /* this process, user + system */
uint64_t cm_rss_bytes(void); /* this process's resident set (/proc/self/statm) */
/* On SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT: the signal and a stack
 * (addresses for addr2line) on stderr, then the default action (a core
 * where enabled). Not installed under a sanitizer, which reports itself. */
void cm_crash_report_install(void);

/* Temp file, write, fsync, rename, fsync the directory. */
cm_err cm_file_write_atomic(const char *path, const void *data, size_t len);
/* Reads a whole file (at most max bytes) into a cm_malloc'd buffer the
 * caller frees with cm_free(CM_MEM_COMMON, ...). */
cm_err cm_file_read(const char *path, size_t max, char **out, size_t *len);
cm_err cm_fsync_dir(const char *dir);
cm_err cm_mkdir_p(const char *path);
cm_err cm_rm_rf(const char *path);
/* Sum of file sizes under a directory (bytes). */
int64_t cm_dir_bytes(const char *path);

/* A fixed pool of worker threads running submitted tasks in FIFO order. */
typedef struct cm_pool cm_pool;
typedef void (*cm_task_fn)(void *arg);

cm_pool *cm_pool_create(int nthreads, const char *name);
/* Waits for queued tasks to finish, then joins the workers. */
void cm_pool_destroy(cm_pool *p);
void cm_pool_submit(cm_pool *p, cm_task_fn fn, void *arg);
int cm_pool_threads(const cm_pool *p);

/* A countdown a caller waits on while its tasks run on a pool. */
typedef struct cm_wait cm_wait;
cm_wait *cm_wait_create(int count);
void cm_wait_done(cm_wait *w); /* one task finished */
void cm_wait_wait(cm_wait *w); /* until count reaches 0 */
void cm_wait_destroy(cm_wait *w);

/* Runs fn(arg_i) for each i in [0,n) and waits for all: the caller takes
 * items too, beside up to the pool's threads (so a run nested in a pool
 * task cannot starve). With a NULL pool, runs them inline in order. */
void cm_pool_run_all(cm_pool *p, cm_task_fn fn, void *args, size_t stride, size_t n);
/* The same, for items too small to be worth a thread's wake-up unless
 * there are many: at most max_helpers workers join the caller, and only
 * workers idle now (a worker already busy would only queue them behind
 * its work; on a loaded node the caller runs them all on its own core).
 * Returns the number of workers asked to help (0: all ran inline, in
 * order). */
size_t cm_pool_run_some(cm_pool *p, cm_task_fn fn, void *args, size_t stride, size_t n,
                        size_t max_helpers);
/* Workers asleep less tasks queued, read without the queue's lock: a
 * hint, 0 for a NULL pool. */
int cm_pool_idle(cm_pool *p);

/* Wildcard match of a whole string: '*' stands for any run of bytes
 * (none too), every other byte for itself; linear in practice (the
 * classic two-pointer walk, which backs up only to the last '*'). */
bool cm_glob(const char *pat, const char *s);

/* Elasticsearch's "did you mean" for an unknown name: the candidates of
 * the comma-separated list whose Levenshtein similarity to key (1 - edits
 * / longer length, over bytes) is above 0.5, most similar first, then by
 * name. Writes "[a]", "any of [a, b]" or "" (none) into out; returns
 * whether any. */
bool cm_did_you_mean(const char *key, const char *candidates, char *out, size_t cap);

#endif
