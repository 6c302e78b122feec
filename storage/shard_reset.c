/* In-place reset of a shard: its whole content (segments, shard.mdb with
 * commit point, log, checkpoints, primary term) is replaced by another
 * shard directory, or by nothing (wipe), while the st_shard handle, its
 * directory and its mapping stay. File-based recovery uses it: a copy of
 * the primary's snapshot is moved in; a copy that must be rebuilt is wiped.
 *
 * How: every user of the shard is held off (merges waited for and kept
 * from starting; refresh_mu, env_lock and wmu taken, in the shard's lock
 * order), the directory's files are swapped, a second st_shard is opened
 * on the directory (the same code path as a restart: commit point, clean
 * up, log replay) and its content fields are exchanged with the handle's.
 * The old content then closes with that second handle; readers taken
 * before keep their segments (refcounted, mapped after the unlink).
 *
 * Crash safety: a marker file (RESETTING) is made durable before the first
 * old file goes and removed once every new file is in place and the
 * directory is synced. st_shard_open wipes a directory that still has the
 * marker. So kill -9 (or a power loss) at any moment leaves the old
 * content, the new content, or an empty shard, which is a copy outside the
 * in-sync set that recovers again. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cm_log.h"
#include "shard_private.h"

#define RESET_MARKER "RESETTING"

/* ---------------------------------------------------------------- */
/* directory content */

seg_dir *
st__seg_dir_new(void)
{
	seg_dir *d = cm_calloc(CM_MEM_STORAGE, 1, sizeof(*d));
	atomic_init(&d->refs, 1);
	pthread_mutex_init(&d->mu, NULL);
	return d;
}

seg_dir *
st__seg_dir_ref(seg_dir *d)
{
	atomic_fetch_add(&d->refs, 1);
	return d;
}

void
st__seg_dir_release(seg_dir *d)
{
	if (d == NULL || atomic_fetch_sub(&d->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&d->mu);
	cm_free(CM_MEM_STORAGE, d);
}

void
st__seg_dir_unlink(seg_dir *d, const char *path)
{
	pthread_mutex_lock(&d->mu);
	if (!d->stale && unlink(path) != 0 && errno != ENOENT)
		cm_warn("storage", "shard: cannot remove %s: %s", path, strerror(errno));
	pthread_mutex_unlock(&d->mu);
}

/* After this no segment of d's content unlinks anything by name: the
 * reset removes those files itself, and the names may be reused. */
static void
seg_dir_mark_stale(seg_dir *d)
{
	pthread_mutex_lock(&d->mu);
	d->stale = true;
	pthread_mutex_unlock(&d->mu);
}

/* ---------------------------------------------------------------- */
/* files */

static bool
ends_with(const char *s, const char *suffix)
{
	size_t l = strlen(s), m = strlen(suffix);
	return l >= m && strcmp(s + l - m, suffix) == 0;
}

/* A file that belongs to a shard's content: what a wipe removes. */
static bool
content_file(const char *nm)
{
	return strcmp(nm, "shard.mdb") == 0 || strcmp(nm, "shard.mdb-lock") == 0 ||
	       strncmp(nm, "seg-", 4) == 0 || ends_with(nm, ".tmp");
}

/* A file that makes up a shard copy: what a reset moves in. Lock files
 * and partial files stay behind. */
static bool
copy_file_name(const char *nm)
{
	return strcmp(nm, "shard.mdb") == 0 ||
	       (strncmp(nm, "seg-", 4) == 0 && ends_with(nm, ".mdb"));
}

static cm_err
path_join(char *out, size_t cap, const char *dir, const char *name, cm_error *err)
{
	if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap)
		return cm_error_set(err, CM_EINVAL, "shard reset: path too long: %s/%s", dir, name);
	return CM_OK;
}

/* Removes the content files of dir (not the marker; not directories,
 * which no shard makes: whoever put one there owns it). */
static cm_err
wipe_files(const char *dir, cm_error *err)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return cm_error_set(err, CM_EIO, "shard reset: cannot list %s: %s", dir,
		                    strerror(errno));
	cm_err e = CM_OK;
	char path[4096];
	struct dirent *de;
	while ((de = readdir(d)) != NULL && e == CM_OK) {
		if (!content_file(de->d_name))
			continue;
		if ((e = path_join(path, sizeof(path), dir, de->d_name, err)) != CM_OK)
			break;
		struct stat sb;
		if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
			continue;
		if (unlink(path) != 0 && errno != ENOENT)
			e = cm_error_set(err, CM_EIO, "shard reset: cannot remove %s: %s", path,
			                 strerror(errno));
	}
	closedir(d);
	return e;
}

/* Calls fn for each file of a shard copy in src. */
static cm_err
each_copy_file(const char *src,
               cm_err (*fn)(const char *src, const char *name, void *ctx, cm_error *err), void *ctx,
               cm_error *err)
{
	DIR *d = opendir(src);
	if (d == NULL)
		return cm_error_set(err, errno == ENOENT ? CM_ENOTFOUND : CM_EIO,
		                    "shard reset: cannot list %s: %s", src, strerror(errno));
	cm_err e = CM_OK;
	struct dirent *de;
	while ((de = readdir(d)) != NULL && e == CM_OK)
		if (copy_file_name(de->d_name))
			e = fn(src, de->d_name, ctx, err);
	closedir(d);
	return e;
}

/* The copy may have been written without syncs (a transfer from another
 * node): make it durable before it can replace anything. */
static cm_err
sync_one(const char *src, const char *name, void *ctx, cm_error *err)
{
	(void)ctx;
	char path[4096];
	cm_err e = path_join(path, sizeof(path), src, name, err);
	if (e)
		return e;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) != 0)
		e = cm_error_set(err, CM_EIO, "shard reset: cannot sync %s: %s", path,
		                 strerror(errno));
	if (fd >= 0)
		close(fd);
	return e;
}

static cm_err
move_one(const char *src, const char *name, void *ctx, cm_error *err)
{
	const char *dst = ctx;
	char from[4096], to[4096];
	cm_err e = path_join(from, sizeof(from), src, name, err);
	if (e == CM_OK)
		e = path_join(to, sizeof(to), dst, name, err);
	if (e == CM_OK && rename(from, to) != 0)
		e = cm_error_set(err, CM_EIO, "shard reset: cannot move %s to %s: %s", from, to,
		                 strerror(errno));
	return e;
}

/* What the copy leaves behind once its files are in: its lock file, and
 * the directory when nothing else is in it. */
static void
tidy_source(const char *src)
{
	char path[4096];
	if ((size_t)snprintf(path, sizeof(path), "%s/shard.mdb-lock", src) < sizeof(path))
		unlink(path);
	rmdir(src);
}

static cm_err
marker_path(const st_shard *s, char *out, size_t cap, cm_error *err)
{
	return path_join(out, cap, s->dir, RESET_MARKER, err);
}

cm_err
st__reset_recover(const char *dir, cm_error *err)
{
	char marker[4096];
	cm_err e = path_join(marker, sizeof(marker), dir, RESET_MARKER, err);
	if (e)
		return e;
	struct stat sb;
	if (stat(marker, &sb) != 0) {
		if (errno == ENOENT)
			return CM_OK;
		return cm_error_set(err, CM_EIO, "shard %s: cannot check for %s: %s", dir,
		                    RESET_MARKER, strerror(errno));
	}
	cm_warn("storage",
	        "shard %s: a reset did not finish; the copy starts empty and must recover", dir);
	if ((e = wipe_files(dir, err)) != CM_OK)
		return e;
	if ((e = cm_fsync_dir(dir)) != CM_OK)
		return cm_error_set(err, e, "shard %s: cannot sync the directory", dir);
	if (unlink(marker) != 0)
		return cm_error_set(err, CM_EIO, "shard %s: cannot remove %s: %s", dir,
		                    RESET_MARKER, strerror(errno));
	if ((e = cm_fsync_dir(dir)) != CM_OK)
		return cm_error_set(err, e, "shard %s: cannot sync the directory", dir);
	return CM_OK;
}

/* ---------------------------------------------------------------- */
/* holding the shard still */

/* Waits for merges (background and forced) to finish and keeps new ones
 * from starting, then takes the shard's locks in its order. */
static void
quiesce(st_shard *s)
{
	pthread_mutex_lock(&s->wmu);
	while (s->resetting)
		pthread_cond_wait(&s->merge_cv, &s->wmu);
	s->resetting = true;
	/* As a force merge does: the merge thread picks nothing meanwhile. */
	s->force_merging++;
	while (s->merges_running > 0 || s->force_merging > 1)
		pthread_cond_wait(&s->merge_cv, &s->wmu);
	pthread_mutex_unlock(&s->wmu);
	/* No merge can start now (merges start under wmu, seeing the flags),
	 * so taking the locks in order cannot let one slip in. */
	pthread_mutex_lock(&s->refresh_mu);
	pthread_rwlock_wrlock(&s->env_lock);
	pthread_mutex_lock(&s->wmu);
	st__bufs_hold(s);
}

static void
resume(st_shard *s)
{
	s->resetting = false;
	s->force_merging--;
	/* The new content may already warrant a merge, as after an open. */
	s->merge_wanted = true;
	pthread_cond_broadcast(&s->merge_cv);
	st__bufs_release(s);
	pthread_mutex_unlock(&s->wmu);
	pthread_rwlock_unlock(&s->env_lock);
	pthread_mutex_unlock(&s->refresh_mu);
}

#define SWAP(a, b)                                                                                 \
	do {                                                                                       \
		__typeof__(a) swap_tmp_ = (a);                                                     \
		(a) = (b);                                                                         \
		(b) = swap_tmp_;                                                                   \
	} while (0)

/* Gives s the content t was opened on, and t the content s had, so that
 * closing t releases the old content. The locks, the group-commit state,
 * the merge thread, the options and the directory stay with s. Every lock
 * of s is held; t is private to the caller. */
static void
content_swap(st_shard *s, st_shard *t, const st_mapping *opened_with)
{
	SWAP(s->env, t->env);
	SWAP(s->db_meta, t->db_meta);
	SWAP(s->db_deletes, t->db_deletes);
	SWAP(s->db_oplog, t->db_oplog);
	SWAP(s->segs, t->segs);
	SWAP(s->nsegs, t->nsegs);
	SWAP(s->segs_cap, t->segs_cap);
	SWAP(s->cp, t->cp);
	SWAP(s->max_seq, t->max_seq);
	SWAP(s->ckp, t->ckp);
	SWAP(s->pending, t->pending);
	SWAP(s->npending, t->npending);
	SWAP(s->pending_cap, t->pending_cap);
	SWAP(s->log_last, t->log_last);
	SWAP(s->ops_since_commit, t->ops_since_commit);
	/* A retention marker was for readers of the old log; as after an open,
	 * none is set. */
	SWAP(s->retain_above, t->retain_above);
	SWAP(s->gcp, t->gcp);
	SWAP(s->act, t->act);
	SWAP(s->frz, t->frz);
	SWAP(s->sdir, t->sdir);

	pthread_mutex_lock(&s->rmu);
	SWAP(s->cur, t->cur);
	pthread_mutex_unlock(&s->rmu);

	/* Stats count from the reset, as from an open. The log tickets keep
	 * growing: a writer may still wait on one it took before. */
	atomic_store(&s->n_refresh, atomic_load(&t->n_refresh));
	atomic_store(&s->n_merge, atomic_load(&t->n_merge));
	atomic_store(&s->n_flush, atomic_load(&t->n_flush));
	atomic_store(&s->n_syncs, atomic_load(&t->n_syncs));
	s->ticket_base = atomic_load(&s->commit_ticket);
	/* Log transactions of the old content need no sync any more; the new
	 * store was synced when t opened it. */
	pthread_mutex_lock(&s->sync_mu);
	if (s->synced_ticket < s->ticket_base)
		s->synced_ticket = s->ticket_base;
	pthread_cond_broadcast(&s->sync_cv);
	pthread_mutex_unlock(&s->sync_mu);

	/* The replay may have added dynamic fields to t's mapping: the shard
	 * keeps its own mapping plus those, as an open with it would give. */
	pthread_mutex_lock(&s->map_mu);
	if (t->mapping != opened_with) {
		if (s->mapping == opened_with) {
			SWAP(s->mapping, t->mapping);
		} else {
			st_mapping *merged = NULL;
			cm_error cerr;
			cm_error_clear(&cerr);
			if (st_mapping_merge(s->mapping, t->mapping, &merged, &cerr) == CM_OK) {
				st_mapping_unref(s->mapping);
				s->mapping = merged;
			} else {
				cm_warn("storage",
				        "shard %s: fields from the replayed log do not merge into "
				        "the mapping: %s",
				        s->dir, cerr.reason);
			}
		}
	}
	pthread_mutex_unlock(&s->map_mu);
}

/* Opens an empty shard on s's directory after wiping it (marker first).
 * On failure the marker stays, so the next open starts empty too. */
static cm_err
open_empty(st_shard *s, const st_mapping *m, const st_shard_opts *o, st_shard **out, cm_error *err)
{
	char marker[4096];
	cm_err e = marker_path(s, marker, sizeof(marker), err);
	if (e == CM_OK && (e = cm_file_write_atomic(marker, "reset\n", 6)) != CM_OK)
		cm_error_set(err, e, "shard %s: cannot write %s", s->dir, RESET_MARKER);
	if (e == CM_OK)
		e = wipe_files(s->dir, err);
	if (e == CM_OK && (e = cm_fsync_dir(s->dir)) != CM_OK)
		cm_error_set(err, e, "shard %s: cannot sync the directory", s->dir);
	/* st_shard_open removes the marker (and finds nothing else to wipe). */
	if (e == CM_OK)
		e = st_shard_open(s->dir, m, o, out, err);
	return e;
}

/* The reset proper, with the copy (src, or NULL for empty) checked. */
static cm_err
reset_run(st_shard *s, const char *src, cm_error *err)
{
	st_mapping *m = st_shard_mapping(s);
	st_shard_opts o = s->opts;
	o.background_merges = false; /* the handle's own merge thread goes on */
	st_shard *t = NULL;
	char marker[4096];
	uint64_t t0 = cm_now_ns();

	quiesce(s);
	uint64_t t1 = cm_now_ns();
	cm_err e = marker_path(s, marker, sizeof(marker), err);
	if (e == CM_OK && (e = cm_file_write_atomic(marker, "reset\n", 6)) != CM_OK)
		cm_error_set(err, e, "shard %s: cannot write %s", s->dir, RESET_MARKER);
	if (e)
		goto out; /* nothing changed */

	/* From here on the old content is gone from the directory whatever
	 * happens; s goes on serving it from memory until the swap. The old
	 * env keeps its (unlinked) files open; the new one gets new ones. */
	seg_dir_mark_stale(s->sdir);
	e = wipe_files(s->dir, err);
	if (e == CM_OK && src)
		e = each_copy_file(src, move_one, s->dir, err);
	if (e == CM_OK && (e = cm_fsync_dir(s->dir)) != CM_OK)
		cm_error_set(err, e, "shard %s: cannot sync the directory", s->dir);
	if (e == CM_OK && unlink(marker) != 0)
		e = cm_error_set(err, CM_EIO, "shard %s: cannot remove %s: %s", s->dir,
		                 RESET_MARKER, strerror(errno));
	if (e == CM_OK && (e = cm_fsync_dir(s->dir)) != CM_OK)
		cm_error_set(err, e, "shard %s: cannot sync the directory", s->dir);
	if (e == CM_OK)
		e = st_shard_open(s->dir, m, &o, &t, err);
	if (e) {
		/* The copy was checked before, so this is I/O trouble: fall back
		 * to empty rather than keep a directory that does not match. */
		cm_errorlog("storage", "shard %s: reset failed (%s); the shard is now empty",
		            s->dir, err && err->reason[0] ? err->reason : cm_err_msg(e));
		cm_error ferr;
		cm_error_clear(&ferr);
		if (open_empty(s, m, &o, &t, &ferr) != CM_OK) {
			/* Still serving the old content from memory; its files are
			 * gone and the marker makes the next open start empty. */
			cm_errorlog("storage",
			            "shard %s: cannot even start empty (%s); close and reopen it",
			            s->dir, ferr.reason);
			goto out;
		}
	}
	content_swap(s, t, m);
out:
	resume(s);
	uint64_t held_ms = (cm_now_ns() - t1) / 1000000;
	/* t now holds the old content (or nothing): release it without the
	 * shard's locks. Old readers keep their own references. */
	if (t)
		st_shard_close(t);
	st_mapping_unref(m);
	if (e == CM_OK) {
		st_shard_stats st;
		st_shard_stats_get(s, &st);
		cm_info("storage",
		        "shard %s: reset to %s in %" PRIu64 " ms (shard held %" PRIu64
		        " ms): %" PRIu64 " docs, max seq_no %" PRId64,
		        s->dir, src ? src : "empty", (cm_now_ns() - t0) / 1000000, held_ms, st.docs,
		        (int64_t)st.max_seq_no);
	}
	return e;
}

cm_err
st_shard_reset_from(st_shard *s, const char *src_dir, cm_error *err)
{
	struct stat ss, ds;
	if (src_dir == NULL || stat(src_dir, &ss) != 0 || !S_ISDIR(ss.st_mode))
		return cm_error_set(err, CM_ENOTFOUND, "shard reset: %s is not a directory",
		                    src_dir ? src_dir : "(null)");
	if (stat(s->dir, &ds) != 0)
		return cm_error_set(err, CM_EIO, "shard reset: cannot stat %s: %s", s->dir,
		                    strerror(errno));
	if (ss.st_dev == ds.st_dev && ss.st_ino == ds.st_ino)
		return cm_error_set(err, CM_EINVAL, "shard reset: %s is the shard's own directory",
		                    src_dir);
	if (ss.st_dev != ds.st_dev)
		return cm_error_set(err, CM_EINVAL,
		                    "shard reset: %s is not on the file system of %s (files are "
		                    "moved, not copied)",
		                    src_dir, s->dir);

	/* Check the copy the way a restart would read it (commit point,
	 * segments, log replay), before anything of s is touched: a bad copy
	 * fails here and s stays as it was. */
	st_mapping *m = st_shard_mapping(s);
	st_shard_opts o = s->opts;
	o.background_merges = false;
	st_shard *chk = NULL;
	cm_err e = st_shard_open(src_dir, m, &o, &chk, err);
	st_mapping_unref(m);
	if (e)
		return e;
	st_shard_close(chk);
	if ((e = each_copy_file(src_dir, sync_one, NULL, err)) != CM_OK)
		return e;
	if ((e = reset_run(s, src_dir, err)) != CM_OK)
		return e;
	tidy_source(src_dir);
	return CM_OK;
}

cm_err
st_shard_wipe(st_shard *s, cm_error *err)
{
	return reset_run(s, NULL, err);
}
