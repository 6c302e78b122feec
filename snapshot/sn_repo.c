/* The fs repository: blobs, manifests, the catalogue (see sn.h). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "../common/cm_alloc.h"
#include "../common/cm_sys.h"
#include "sn.h"

#define MEM CM_MEM_NODE
#define CHUNK (64u << 10)
#define MAX_META (256u << 20) /* manifests and catalogues */

#define ZSTD_LEVEL 3
/* a zstd frame's first bytes (0xFD2FB528, little endian): a compressed
 * metadata file; JSON never starts so */
static const uint8_t ZMAGIC[4] = {0x28, 0xb5, 0x2f, 0xfd};

struct sn_repo {
	char loc[PATH_MAX];
	uint64_t max_bps;
	int lock_fd;
	const _Atomic bool *cancel;
	bool compress;
	char node[SN_NAME_MAX]; /* who takes the snapshots begun here */
};

/* time spent waiting in throttle(), over every repository of the process */
static _Atomic uint64_t g_throttle_ns;

uint64_t
sn_throttle_ns(void)
{
	return atomic_load(&g_throttle_ns);
}

void
sn_repo_set_compress(sn_repo *r, bool on)
{
	r->compress = on;
}

void
sn_repo_set_node(sn_repo *r, const char *node)
{
	snprintf(r->node, sizeof(r->node), "%s", node ? node : "");
}

void
sn_repo_set_cancel(sn_repo *r, const _Atomic bool *flag)
{
	r->cancel = flag;
}

const char *
sn_repo_location(const sn_repo *r)
{
	return r->loc;
}

static cm_err
repo_err(cm_error *err, const char *fmt, const char *a, const char *b)
{
	return cm_error_set_type(err, CM_EINVAL, "repository_exception", fmt, a, b);
}

/* realpath of the longest existing prefix of p, plus the rest appended. */
static bool
resolve(const char *p, char *out, size_t cap)
{
	char buf[PATH_MAX], rest[PATH_MAX] = "";
	if (strlen(p) >= sizeof(buf))
		return false;
	strcpy(buf, p);
	for (;;) {
		char rp[PATH_MAX];
		if (realpath(buf, rp)) {
			/* the rest must not climb: no ".." segments */
			for (char *s = rest; *s;) {
				char *e = strchr(s + 1, '/');
				size_t n = e ? (size_t)(e - s - 1) : strlen(s + 1);
				if ((n == 2 && strncmp(s + 1, "..", 2) == 0) ||
				    (n == 1 && s[1] == '.'))
					return false;
				s = e ? e : s + strlen(s);
			}
			return snprintf(out, cap, "%s%s", rp, rest) < (int)cap;
		}
		if (errno != ENOENT)
			return false;
		char *slash = strrchr(buf, '/');
		if (!slash || slash == buf)
			return false;
		char tmp[PATH_MAX];
		snprintf(tmp, sizeof(tmp), "%s%s", slash, rest);
		strcpy(rest, tmp);
		*slash = 0;
	}
}

cm_err
sn_location_check(const char *path_repo, const char *location, char *resolved, size_t cap,
                  cm_error *err)
{
	char base[PATH_MAX], loc[PATH_MAX];
	if (!location || !*location)
		return repo_err(err, "[%s%s] missing location", "", "");
	if (!path_repo || !*path_repo)
		return repo_err(err,
		                "location [%s] doesn't match any of the locations specified by "
		                "path.repo because this setting is empty%s",
		                location, "");
	if (!realpath(path_repo, base))
		return repo_err(err, "path.repo [%s] does not exist%s", path_repo, "");
	char joined[PATH_MAX];
	if (location[0] == '/')
		snprintf(joined, sizeof(joined), "%s", location);
	else if (snprintf(joined, sizeof(joined), "%s/%s", base, location) >= (int)sizeof(joined))
		return repo_err(err, "location [%s] is too long%s", location, "");
	size_t bl = strlen(base);
	if (!resolve(joined, loc, sizeof(loc)) || strncmp(loc, base, bl) != 0 ||
	    (loc[bl] != '/' && loc[bl] != 0))
		return repo_err(err,
		                "location [%s] doesn't match any of the locations specified by "
		                "path.repo [%s]",
		                location, path_repo);
	if (snprintf(resolved, cap, "%s", loc) >= (int)cap)
		return repo_err(err, "location [%s] is too long%s", location, "");
	return CM_OK;
}

bool
sn_parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	if (!s || !*s)
		return false;
	if (strcmp(s, "-1") == 0) {
		*out = 0;
		return true;
	}
	errno = 0;
	double n = strtod(s, &end);
	if (errno || n < 0 || end == s)
		return false;
	double mul = strcasecmp(end, "kb") == 0 || strcasecmp(end, "k") == 0   ? 1024.0
	             : strcasecmp(end, "mb") == 0 || strcasecmp(end, "m") == 0 ? 1048576.0
	             : strcasecmp(end, "gb") == 0 || strcasecmp(end, "g") == 0 ? 1073741824.0
	             : strcasecmp(end, "tb") == 0                              ? 1099511627776.0
	             : strcasecmp(end, "b") == 0 || !*end                      ? 1.0
	                                                                       : -1.0;
	if (mul < 0 || n * mul > 1e18)
		return false;
	*out = (uint64_t)(n * mul);
	return true;
}

static cm_err
io_err(cm_error *err, const char *what, const char *path)
{
	return cm_error_set_type(err, CM_EIO, "repository_exception", "%s [%s]: %s", what, path,
	                         strerror(errno));
}

cm_err
sn_repo_open(const char *location, uint64_t max_bps, sn_repo **out, cm_error *err)
{
	char p[PATH_MAX + 32];
	static const char *const dirs[] = {"", "/blobs", "/pending", "/tmp"};
	if (strlen(location) >= PATH_MAX - 64)
		return repo_err(err, "location [%s] is too long%s", location, "");
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", location, dirs[i]);
		if (cm_mkdir_p(p))
			return io_err(err, "cannot create repository directory", p);
	}
	snprintf(p, sizeof(p), "%s/lock", location);
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return io_err(err, "cannot open repository lock", p);
	sn_repo *r = cm_calloc(MEM, 1, sizeof(*r));
	snprintf(r->loc, sizeof(r->loc), "%s", location);
	r->max_bps = max_bps;
	r->lock_fd = fd;
	*out = r;
	return CM_OK;
}

void
sn_repo_close(sn_repo *r)
{
	if (!r)
		return;
	close(r->lock_fd);
	cm_free(MEM, r);
}

/* flock is per open file description: each call opens its own, so two
 * threads of one process exclude each other too. */
static int
lock_take(sn_repo *r, bool exclusive)
{
	char p[PATH_MAX + 8];
	snprintf(p, sizeof(p), "%s/lock", r->loc);
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0 && flock(fd, exclusive ? LOCK_EX : LOCK_SH) != 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void
lock_drop(int fd)
{
	if (fd >= 0)
		close(fd); /* releases the flock */
}

/* ---- blobs ---- */

/* The path of blob key stored raw. */
static void
raw_path(const sn_repo *r, const char *key, char *out, size_t cap)
{
	snprintf(out, cap, "%s/blobs/%.2s/%s", r->loc, key, key);
}

/* The path of blob key stored compressed (zstd). */
static void
zst_path(const sn_repo *r, const char *key, char *out, size_t cap)
{
	snprintf(out, cap, "%s/blobs/%.2s/%s.zst", r->loc, key, key);
}

void
sn_blob_path(const sn_repo *r, const char *key, char *out, size_t cap)
{
	zst_path(r, key, out, cap);
	if (access(out, F_OK) != 0)
		raw_path(r, key, out, cap);
}

static void
hex128(XXH128_hash_t h, char out[33])
{
	snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
}

/* max_bps is a budget of the process per repository (every copy, read or
 * write, through a throttled handle of that location): each chunk
 * reserves its share of time after the chunks before it, then waits for
 * it. Locations share a slot only when their hashes collide. */
#define BUDGET_SLOTS 64
static pthread_mutex_t g_budget_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_budget_next[BUDGET_SLOTS]; /* cm_now_ns() when free again */

static void
throttle(const sn_repo *r, uint64_t bytes)
{
	if (!r->max_bps || !bytes)
		return;
	uint64_t cost = (uint64_t)((double)bytes * 1e9 / (double)r->max_bps), now = cm_now_ns();
	uint64_t *next = &g_budget_next[XXH3_64bits(r->loc, strlen(r->loc)) % BUDGET_SLOTS];
	pthread_mutex_lock(&g_budget_mu);
	uint64_t due = (*next > now ? *next : now) + cost;
	*next = due;
	pthread_mutex_unlock(&g_budget_mu);
	/* in slices of at most 100 ms, so a cancel is seen soon */
	for (; due > now && !(r->cancel && *r->cancel); now = cm_now_ns()) {
		uint64_t d = due - now < 100000000ull ? due - now : 100000000ull;
		struct timespec ts = {0, (long)d};
		nanosleep(&ts, NULL);
		atomic_fetch_add(&g_throttle_ns, cm_now_ns() - now);
	}
}

static cm_err
hash_file(const char *path, char key[33], uint64_t *size, cm_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return io_err(err, "cannot read", path);
	XXH3_state_t *st = XXH3_createState();
	uint8_t *buf = cm_malloc(MEM, CHUNK);
	uint64_t total = 0;
	ssize_t n;
	XXH3_128bits_reset(st);
	while ((n = read(fd, buf, CHUNK)) > 0) {
		XXH3_128bits_update(st, buf, (size_t)n);
		total += (uint64_t)n;
	}
	cm_err rc = n < 0 ? io_err(err, "cannot read", path) : CM_OK;
	hex128(XXH3_128bits_digest(st), key);
	*size = total;
	XXH3_freeState(st);
	cm_free(MEM, buf);
	close(fd);
	return rc;
}

/* Copies src to a new file dst (O_EXCL), hashing and throttling; fsyncs. */
static cm_err
copy_hash(const sn_repo *r, const char *src, const char *dst, char key[33], uint64_t *size,
          cm_error *err)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return errno == ENOENT ? CM_ENOTFOUND : io_err(err, "cannot read", src);
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (out < 0) {
		close(in);
		return io_err(err, "cannot create", dst);
	}
	XXH3_state_t *st = XXH3_createState();
	uint8_t *buf = cm_malloc(MEM, CHUNK);
	uint64_t total = 0;
	cm_err rc = CM_OK;
	ssize_t n;
	XXH3_128bits_reset(st);
	while ((n = read(in, buf, CHUNK)) > 0) {
		XXH3_128bits_update(st, buf, (size_t)n);
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0) {
				rc = io_err(err, "cannot write", dst);
				goto done;
			}
			off += w;
		}
		total += (uint64_t)n;
		if (r->cancel && *r->cancel) {
			rc = cm_error_set(err, CM_ECLOSED, "copy to [%s] cancelled: shutting down",
			                  dst);
			goto done;
		}
		throttle(r, (uint64_t)n);
	}
	if (n < 0)
		rc = io_err(err, "cannot read", src);
	else if (fsync(out) != 0)
		rc = io_err(err, "cannot sync", dst);
done:
	hex128(XXH3_128bits_digest(st), key);
	*size = total;
	XXH3_freeState(st);
	cm_free(MEM, buf);
	close(in);
	if (close(out) != 0 && !rc)
		rc = io_err(err, "cannot write", dst);
	if (rc)
		unlink(dst);
	return rc;
}

static cm_err
write_all(int fd, const void *p, size_t n, const char *dst, cm_error *err)
{
	for (size_t off = 0; off < n;) {
		ssize_t w = write(fd, (const uint8_t *)p + off, n - off);
		if (w < 0)
			return io_err(err, "cannot write", dst);
		off += (size_t)w;
	}
	return CM_OK;
}

/* copy_hash for a compressed repository: src is hashed as it is and
 * written to dst as one zstd frame; the throttle counts bytes written. */
static cm_err
copy_zstd(const sn_repo *r, const char *src, const char *dst, char key[33], uint64_t *size,
          cm_error *err)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return errno == ENOENT ? CM_ENOTFOUND : io_err(err, "cannot read", src);
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (out < 0) {
		close(in);
		return io_err(err, "cannot create", dst);
	}
	XXH3_state_t *st = XXH3_createState();
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	size_t ocap = ZSTD_CStreamOutSize();
	uint8_t *buf = cm_malloc(MEM, CHUNK), *obuf = cm_malloc(MEM, ocap);
	uint64_t total = 0, written = 0, throttled = 0;
	cm_err rc = CM_OK;
	ssize_t n;
	XXH3_128bits_reset(st);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, ZSTD_LEVEL);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
	for (;;) {
		n = read(in, buf, CHUNK);
		if (n < 0) {
			rc = io_err(err, "cannot read", src);
			break;
		}
		XXH3_128bits_update(st, buf, (size_t)n);
		total += (uint64_t)n;
		ZSTD_EndDirective mode = n == 0 ? ZSTD_e_end : ZSTD_e_continue;
		ZSTD_inBuffer ib = {buf, (size_t)n, 0};
		bool finished = false;
		do {
			ZSTD_outBuffer ob = {obuf, ocap, 0};
			size_t left = ZSTD_compressStream2(cc, &ob, &ib, mode);
			if (ZSTD_isError(left)) {
				rc = cm_error_set_type(err, CM_EIO, "repository_exception",
				                       "cannot compress [%s]: %s", src,
				                       ZSTD_getErrorName(left));
				break;
			}
			if ((rc = write_all(out, obuf, ob.pos, dst, err)))
				break;
			written += ob.pos;
			finished = mode == ZSTD_e_end ? left == 0 : ib.pos == ib.size;
		} while (!finished);
		if (rc || n == 0)
			break;
		if (r->cancel && *r->cancel) {
			rc = cm_error_set(err, CM_ECLOSED, "copy to [%s] cancelled: shutting down",
			                  dst);
			break;
		}
		throttle(r, written - throttled);
		throttled = written;
	}
	if (!rc && fsync(out) != 0)
		rc = io_err(err, "cannot sync", dst);
	hex128(XXH3_128bits_digest(st), key);
	*size = total;
	XXH3_freeState(st);
	ZSTD_freeCCtx(cc);
	cm_free(MEM, buf);
	cm_free(MEM, obuf);
	close(in);
	if (close(out) != 0 && !rc)
		rc = io_err(err, "cannot write", dst);
	if (rc)
		unlink(dst);
	return rc;
}

/* Decompresses the zstd blob at src into dst (NULL: only hashed), hashing
 * what comes out; stops past limit bytes (a corrupt or hostile frame).
 * A damaged or cut frame is not an error here: *size and key then
 * disagree with the manifest's, which the caller reports. */
static cm_err
unzstd_hash(const sn_repo *r, const char *src, const char *dst, uint64_t limit, char key[33],
            uint64_t *size, cm_error *err)
{
	int in = open(src, O_RDONLY | O_CLOEXEC), out = -1;
	if (in < 0)
		return errno == ENOENT ? CM_ENOTFOUND : io_err(err, "cannot read", src);
	if (dst && (out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) {
		close(in);
		return io_err(err, "cannot create", dst);
	}
	XXH3_state_t *st = XXH3_createState();
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	size_t ocap = ZSTD_DStreamOutSize();
	uint8_t *buf = cm_malloc(MEM, CHUNK), *obuf = cm_malloc(MEM, ocap);
	uint64_t total = 0;
	cm_err rc = CM_OK;
	bool bad = false;
	size_t pending = 1;
	ssize_t n;
	XXH3_128bits_reset(st);
	while (!bad && !rc && (n = read(in, buf, CHUNK)) != 0) {
		if (n < 0) {
			rc = io_err(err, "cannot read", src);
			break;
		}
		ZSTD_inBuffer ib = {buf, (size_t)n, 0};
		while (ib.pos < ib.size && !bad && !rc) {
			ZSTD_outBuffer ob = {obuf, ocap, 0};
			pending = ZSTD_decompressStream(dc, &ob, &ib);
			if (ZSTD_isError(pending)) {
				bad = true;
				break;
			}
			XXH3_128bits_update(st, obuf, ob.pos);
			total += ob.pos;
			if (total > limit) {
				bad = true;
				break;
			}
			if (out >= 0)
				rc = write_all(out, obuf, ob.pos, dst, err);
		}
		if (r->cancel && *r->cancel && !rc)
			rc = cm_error_set(err, CM_ECLOSED, "copy of [%s] cancelled: shutting down",
			                  src);
		throttle(r, (uint64_t)n);
	}
	/* an incomplete frame (a cut file): one byte too few or too many makes
	 * the size and hash wrong */
	if (!rc && !bad && pending != 0 && total == limit)
		total = limit + 1;
	if (!rc && out >= 0 && fsync(out) != 0)
		rc = io_err(err, "cannot sync", dst);
	hex128(XXH3_128bits_digest(st), key);
	if (bad) { /* the frame does not decode: reported as a checksum mismatch */
		total = limit;
		key[0] = '!';
	}
	*size = total;
	XXH3_freeState(st);
	ZSTD_freeDCtx(dc);
	cm_free(MEM, buf);
	cm_free(MEM, obuf);
	close(in);
	if (out >= 0 && close(out) != 0 && !rc)
		rc = io_err(err, "cannot write", dst);
	if (rc && out >= 0)
		unlink(dst);
	return rc;
}

static void
tmp_name(const sn_repo *r, char *out, size_t cap)
{
	static _Atomic uint64_t seq;
	snprintf(out, cap, "%s/tmp/%d-%" PRIu64 "-%" PRIu64 ".tmp", r->loc, (int)getpid(),
	         (uint64_t)cm_now_ns(), (uint64_t)++seq);
}

cm_err
sn_blob_put(sn_repo *r, const char *path, sn_blob *out, uint64_t *written, cm_error *err)
{
	char key[33], key2[33], dst[PATH_MAX + 80], tmp[PATH_MAX + 80], dir[PATH_MAX + 16];
	uint64_t size, size2;
	struct stat sb;
	cm_err rc;

	*written = 0;
	if ((rc = hash_file(path, key, &size, err)))
		return rc;
	/* held already, raw or compressed, whatever this repository writes */
	char zdst[PATH_MAX + 80];
	raw_path(r, key, dst, sizeof(dst));
	zst_path(r, key, zdst, sizeof(zdst));
	int lk = lock_take(r, false);
	if (stat(dst, &sb) == 0 && (uint64_t)sb.st_size == size) {
		utimensat(AT_FDCWD, dst, NULL, 0); /* keep it from a concurrent delete */
		lock_drop(lk);
		goto found;
	}
	if (stat(zdst, &sb) == 0 && sb.st_size > 0) {
		utimensat(AT_FDCWD, zdst, NULL, 0);
		lock_drop(lk);
		goto found;
	}
	lock_drop(lk);
	if (r->compress)
		memcpy(dst, zdst, sizeof(zdst));
	tmp_name(r, tmp, sizeof(tmp));
	if ((rc = (r->compress ? copy_zstd : copy_hash)(r, path, tmp, key2, &size2, err)))
		return rc == CM_ENOTFOUND ? io_err(err, "cannot read", path) : rc;
	if (strcmp(key, key2) != 0 || size != size2) {
		unlink(tmp);
		return cm_error_set_type(err, CM_ECORRUPT, "repository_exception",
		                         "file [%s] changed while it was copied", path);
	}
	snprintf(dir, sizeof(dir), "%s/blobs/%.2s", r->loc, key);
	if (cm_mkdir_p(dir)) {
		unlink(tmp);
		return io_err(err, "cannot create", dir);
	}
	lk = lock_take(r, false);
	if (rename(tmp, dst) != 0) {
		rc = io_err(err, "cannot rename into", dst);
		unlink(tmp);
	} else {
		cm_fsync_dir(dir);
		*written = size;
	}
	lock_drop(lk);
	if (rc)
		return rc;
found:
	memcpy(out->key, key, sizeof(out->key));
	out->size = size;
	return CM_OK;
}

static cm_err
blob_verify_to(sn_repo *r, const sn_blob *b, const char *name, const char *dst, cm_error *err)
{
	char src[PATH_MAX + 80], key[33], sink[PATH_MAX + 80];
	uint64_t size;
	cm_err rc;
	zst_path(r, b->key, src, sizeof(src));
	if (access(src, F_OK) == 0) { /* a compressed blob */
		rc = unzstd_hash(r, src, dst, b->size, key, &size, err);
		sink[0] = 0;
	} else {
		raw_path(r, b->key, src, sizeof(src));
		if (!dst) {
			tmp_name(r, sink, sizeof(sink));
			dst = sink;
		}
		rc = copy_hash(r, src, dst, key, &size, err);
	}
	if (dst == sink)
		unlink(sink);
	if (rc == CM_ENOTFOUND)
		return cm_error_set_type(err, CM_ECORRUPT, "snapshot_restore_exception",
		                         "file [%s] is missing from the repository (blob [%s])",
		                         name, b->key);
	if (rc)
		return rc;
	if (size != b->size) {
		if (dst && dst != sink)
			unlink(dst);
		return cm_error_set_type(
		    err, CM_ECORRUPT, "snapshot_restore_exception",
		    "file [%s] is truncated in the repository (blob [%s]: %" PRIu64 " of %" PRIu64
		    " bytes)",
		    name, b->key, size, b->size);
	}
	if (strcmp(key, b->key) != 0) {
		if (dst && dst != sink)
			unlink(dst);
		return cm_error_set_type(
		    err, CM_ECORRUPT, "snapshot_restore_exception",
		    "file [%s] is corrupt in the repository (blob [%s]: checksum "
		    "mismatch, read %s)",
		    name, b->key, key);
	}
	return CM_OK;
}

cm_err
sn_blob_get(sn_repo *r, const sn_blob *b, const char *name, const char *dst, cm_error *err)
{
	return blob_verify_to(r, b, name, dst, err);
}

cm_err
sn_blob_check(sn_repo *r, const sn_blob *b, const char *name, cm_error *err)
{
	/* a plain read-through: no copy needed, but the same checks */
	char src[PATH_MAX + 80], key[33];
	uint64_t size;
	cm_err rc;
	zst_path(r, b->key, src, sizeof(src));
	if (access(src, F_OK) == 0) {
		rc = unzstd_hash(r, src, NULL, b->size, key, &size, err);
		if (rc == CM_ENOTFOUND)
			return cm_error_set_type(
			    err, CM_ECORRUPT, "snapshot_restore_exception",
			    "file [%s] is missing from the repository (blob [%s])", name, b->key);
		goto check;
	}
	raw_path(r, b->key, src, sizeof(src));
	if (access(src, F_OK) != 0)
		return cm_error_set_type(err, CM_ECORRUPT, "snapshot_restore_exception",
		                         "file [%s] is missing from the repository (blob [%s])",
		                         name, b->key);
	rc = hash_file(src, key, &size, err);
check:
	if (rc)
		return rc;
	if (size != b->size)
		return cm_error_set_type(
		    err, CM_ECORRUPT, "snapshot_restore_exception",
		    "file [%s] is truncated in the repository (blob [%s]: %" PRIu64 " of %" PRIu64
		    " bytes)",
		    name, b->key, size, b->size);
	if (strcmp(key, b->key) != 0)
		return cm_error_set_type(
		    err, CM_ECORRUPT, "snapshot_restore_exception",
		    "file [%s] is corrupt in the repository (blob [%s]: checksum "
		    "mismatch, read %s)",
		    name, b->key, key);
	return CM_OK;
}

static bool
key_ok(const char *k)
{
	if (strlen(k) != 32)
		return false;
	for (int i = 0; i < 32; i++)
		if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'f')))
			return false;
	return true;
}

cJSON *
sn_file_json(const char *name, const sn_blob *b)
{
	cJSON *f = cJSON_CreateObject();
	cJSON_AddStringToObject(f, "name", name);
	cJSON_AddStringToObject(f, "blob", b->key);
	cJSON_AddNumberToObject(f, "size", (double)b->size);
	return f;
}

bool
sn_file_parse(const cJSON *f, char name[SN_NAME_MAX], sn_blob *b)
{
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(f, "blob");
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(f, "size");
	if (!cJSON_IsString(n) || !cJSON_IsString(k) || !cJSON_IsNumber(s) ||
	    !key_ok(k->valuestring) || s->valuedouble < 0 ||
	    strlen(n->valuestring) >= SN_NAME_MAX || strchr(n->valuestring, '/') ||
	    n->valuestring[0] == '.' || !n->valuestring[0])
		return false;
	snprintf(name, SN_NAME_MAX, "%s", n->valuestring);
	memcpy(b->key, k->valuestring, 33);
	b->size = (uint64_t)s->valuedouble;
	return true;
}

/* ---- metadata files ---- */

static cm_err
json_write(sn_repo *r, const char *file, const cJSON *j, cm_error *err)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/%s", r->loc, file);
	char *t = cJSON_PrintUnformatted(j);
	cm_err rc;
	if (r->compress) { /* one zstd frame with its size: json_read knows it by its magic */
		size_t len = strlen(t), cap = ZSTD_compressBound(len);
		uint8_t *z = cm_malloc(MEM, cap);
		size_t zn = ZSTD_compress(z, cap, t, len, ZSTD_LEVEL);
		rc = ZSTD_isError(zn) ? CM_EIO : cm_file_write_atomic(p, z, zn);
		cm_free(MEM, z);
	} else {
		rc = cm_file_write_atomic(p, t, strlen(t));
	}
	cJSON_free(t);
	if (rc)
		return io_err(err, "cannot write", p);
	return CM_OK;
}

static cm_err
json_read(sn_repo *r, const char *file, cJSON **out, cm_error *err)
{
	char p[PATH_MAX + 64], *buf;
	size_t n;
	snprintf(p, sizeof(p), "%s/%s", r->loc, file);
	*out = NULL;
	cm_err rc = cm_file_read(p, MAX_META, &buf, &n);
	if (rc)
		return rc;
	if (n >= 4 && memcmp(buf, ZMAGIC, 4) == 0) {
		/* compressed: its size is in the frame header, bounded first */
		unsigned long long want = ZSTD_getFrameContentSize(buf, n);
		char *plain = NULL;
		size_t got = 0;
		if (want != ZSTD_CONTENTSIZE_ERROR && want != ZSTD_CONTENTSIZE_UNKNOWN &&
		    want <= MAX_META) {
			plain = cm_malloc(MEM, (size_t)want + 1);
			got = ZSTD_decompress(plain, (size_t)want, buf, n);
		}
		if (plain && !ZSTD_isError(got) && got == want)
			*out = cJSON_ParseWithLength(plain, got);
		cm_free(MEM, plain);
	} else {
		*out = cJSON_ParseWithLength(buf, n);
	}
	cm_free(CM_MEM_COMMON, buf);
	if (!*out)
		return cm_error_set_type(err, CM_ECORRUPT, "repository_exception",
		                         "[%s] in repository [%s] is not valid JSON", file, r->loc);
	return CM_OK;
}

/* The newest catalogue generation: index.latest, else the highest index-N
 * in the directory; 0 when none. */
static uint64_t
catalog_gen(sn_repo *r)
{
	char p[PATH_MAX + 32], *buf;
	size_t n;
	uint64_t g = 0;
	snprintf(p, sizeof(p), "%s/index.latest", r->loc);
	if (cm_file_read(p, 64, &buf, &n) == CM_OK) {
		char t[64];
		snprintf(t, sizeof(t), "%.*s", (int)n, buf);
		cm_free(CM_MEM_COMMON, buf);
		g = strtoull(t, NULL, 10);
		snprintf(p, sizeof(p), "%s/index-%" PRIu64, r->loc, g);
		if (access(p, F_OK) == 0)
			return g;
		g = 0;
	}
	DIR *d = opendir(r->loc);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char *end;
		if (strncmp(e->d_name, "index-", 6) != 0)
			continue;
		uint64_t v = strtoull(e->d_name + 6, &end, 10);
		if (!*end && v > g)
			g = v;
	}
	if (d)
		closedir(d);
	return g;
}

static cm_err
catalog_load(sn_repo *r, cJSON **cat, uint64_t *gen, cm_error *err)
{
	char f[64];
	*gen = catalog_gen(r);
	if (*gen == 0) {
		*cat = cJSON_CreateObject();
		cJSON_AddArrayToObject(*cat, "snapshots");
		return CM_OK;
	}
	snprintf(f, sizeof(f), "index-%" PRIu64, *gen);
	cm_err rc = json_read(r, f, cat, err);
	if (rc == CM_OK && !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(*cat, "snapshots"))) {
		cJSON_Delete(*cat);
		*cat = NULL;
		rc = cm_error_set_type(err, CM_ECORRUPT, "repository_exception",
		                       "catalogue [%s] of repository [%s] has no snapshots", f,
		                       r->loc);
	} else if (rc && !err->code) {
		rc = io_err(err, "cannot read catalogue", f);
	}
	return rc;
}

/* Under the exclusive lock: writes generation gen+1 and points
 * index.latest at it; the generation before gen goes. */
static cm_err
catalog_store(sn_repo *r, cJSON *cat, uint64_t gen, cm_error *err)
{
	char f[64], p[PATH_MAX + 64], t[32];
	cJSON_DeleteItemFromObject(cat, "generation");
	cJSON_AddNumberToObject(cat, "generation", (double)(gen + 1));
	snprintf(f, sizeof(f), "index-%" PRIu64, gen + 1);
	cm_err rc = json_write(r, f, cat, err);
	if (rc)
		return rc;
	snprintf(p, sizeof(p), "%s/index.latest", r->loc);
	snprintf(t, sizeof(t), "%" PRIu64, gen + 1);
	if (cm_file_write_atomic(p, t, strlen(t)))
		return io_err(err, "cannot write", p);
	if (gen > 1) {
		snprintf(p, sizeof(p), "%s/index-%" PRIu64, r->loc, gen - 1);
		unlink(p);
	}
	return CM_OK;
}

static void
entry_from(const cJSON *s, sn_entry *e)
{
	const cJSON *v;
	memset(e, 0, sizeof(*e));
	if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(s, "snapshot")))
		snprintf(e->name, sizeof(e->name), "%s", v->valuestring);
	if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(s, "uuid")))
		snprintf(e->uuid, sizeof(e->uuid), "%s", v->valuestring);
	if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(s, "state")))
		snprintf(e->state, sizeof(e->state), "%s", v->valuestring);
	if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(s, "start_time_in_millis")))
		e->start_ms = (int64_t)v->valuedouble;
	if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(s, "end_time_in_millis")))
		e->end_ms = (int64_t)v->valuedouble;
}

cm_err
sn_catalog_read(sn_repo *r, sn_entry **out, size_t *n, cm_error *err)
{
	cJSON *cat;
	uint64_t gen;
	*out = NULL;
	*n = 0;
	/* a writer may drop the generation we just found: try again */
	cm_err rc = CM_OK;
	for (int attempt = 0; attempt < 5; attempt++) {
		cm_error e2;
		cm_error_clear(&e2);
		if ((rc = catalog_load(r, &cat, &gen, &e2)) == CM_OK)
			break;
		if (attempt == 4) {
			*err = e2;
			return rc;
		}
	}
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cat, "snapshots"), *s;
	size_t k = (size_t)cJSON_GetArraySize(arr), i = 0;
	*out = cm_calloc(MEM, k + 1, sizeof(sn_entry));
	cJSON_ArrayForEach(s, arr) entry_from(s, &(*out)[i++]);
	*n = i;
	cJSON_Delete(cat);
	return CM_OK;
}

cm_err
sn_name_check(const char *name, cm_error *err)
{
	static const char bad[] = " ,#/\\*?\"<>|:";
	if (!name || !*name || strlen(name) >= SN_NAME_MAX || name[0] == '_' || name[0] == '-' ||
	    strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		goto bad;
	for (const char *p = name; *p; p++)
		if (strchr(bad, *p) || (*p >= 'A' && *p <= 'Z') || (unsigned char)*p < 32)
			goto bad;
	return CM_OK;
bad:
	return cm_error_set_type(
	    err, CM_EINVAL, "invalid_snapshot_name_exception",
	    "[%s] Invalid snapshot name, must be lowercase, not start with '_' "
	    "or '-' and not contain whitespace or any of [\\, /, *, ?, \", <, >, "
	    "|, ,, #, :]",
	    name ? name : "");
}

static const cJSON *
catalog_find(const cJSON *cat, const char *name, int *idx)
{
	const cJSON *s;
	int i = 0;
	cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(cat, "snapshots"))
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "snapshot");
		if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) {
			if (idx)
				*idx = i;
			return s;
		}
		i++;
	}
	return NULL;
}

bool
sn_snapshot_pending_owner(sn_repo *r, const char *name, char *owner, size_t cap)
{
	char p[PATH_MAX + SN_NAME_MAX + 16], buf[40 + SN_NAME_MAX + 2];
	if (sn_name_check(name, &(cm_error){0}))
		return false;
	snprintf(p, sizeof(p), "%s/pending/%s", r->loc, name);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	const char *nl = strchr(buf, '\n');
	snprintf(owner, cap, "%s", nl ? nl + 1 : "");
	return true;
}

bool
sn_snapshot_pending(sn_repo *r, const char *name)
{
	char p[PATH_MAX + SN_NAME_MAX + 16];
	snprintf(p, sizeof(p), "%s/pending/%s", r->loc, name);
	return access(p, F_OK) == 0;
}

cm_err
sn_snapshot_begin(sn_repo *r, const char *name, char uuid[40], cm_error *err)
{
	char p[PATH_MAX + SN_NAME_MAX + 16];
	cJSON *cat;
	uint64_t gen;
	cm_err rc;
	if ((rc = sn_name_check(name, err)))
		return rc;
	int lk = lock_take(r, true);
	if ((rc = catalog_load(r, &cat, &gen, err)))
		goto out;
	bool exists = catalog_find(cat, name, NULL) != NULL;
	cJSON_Delete(cat);
	if (exists) {
		rc = cm_error_set_type(err, CM_EINVAL, "invalid_snapshot_name_exception",
		                       "[%s:%s] Invalid snapshot name [%s], snapshot with the same "
		                       "name already exists",
		                       r->loc, name, name);
		goto out;
	}
	snprintf(p, sizeof(p), "%s/pending/%s", r->loc, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = errno == EEXIST
		         ? cm_error_set_type(err, CM_EINVAL, "invalid_snapshot_name_exception",
		                             "[%s] Invalid snapshot name [%s], snapshot "
		                             "with the same name is already in-progress",
		                             name, name)
		         : io_err(err, "cannot create", p);
		goto out;
	}
	/* a uuid from the clock and the process: unique enough within one
	 * repository, and names never collide (checked above) */
	uint64_t a = (uint64_t)cm_wall_ms() ^ ((uint64_t)getpid() << 40);
	uint64_t b = XXH64(name, strlen(name), cm_now_ns());
	snprintf(uuid, 40, "%016" PRIx64 "%016" PRIx64, a, b);
	/* the uuid, then the node taking it (for _status asked elsewhere) */
	char marker[40 + SN_NAME_MAX + 2];
	int ml = snprintf(marker, sizeof(marker), "%s\n%s", uuid, r->node);
	if (write(fd, marker, (size_t)ml) < 0 || fsync(fd) != 0)
		rc = io_err(err, "cannot write", p);
	close(fd);
	if (rc)
		unlink(p);
	else {
		snprintf(p, sizeof(p), "%s/pending", r->loc);
		cm_fsync_dir(p);
	}
out:
	lock_drop(lk);
	return rc;
}

void
sn_snapshot_abort(sn_repo *r, const char *name)
{
	char p[PATH_MAX + SN_NAME_MAX + 16];
	snprintf(p, sizeof(p), "%s/pending/%s", r->loc, name);
	unlink(p);
}

cm_err
sn_snapshot_commit(sn_repo *r, const sn_entry *e, const cJSON *manifest, cm_error *err)
{
	char f[80];
	cJSON *cat;
	uint64_t gen;
	cm_err rc;
	snprintf(f, sizeof(f), "snap-%s.json", e->uuid);
	if ((rc = json_write(r, f, manifest, err)))
		return rc;
	int lk = lock_take(r, true);
	if ((rc = catalog_load(r, &cat, &gen, err)))
		goto out;
	if (catalog_find(cat, e->name, NULL)) {
		rc = cm_error_set_type(err, CM_EINVAL, "invalid_snapshot_name_exception",
		                       "snapshot [%s] already exists", e->name);
	} else {
		cJSON *s = cJSON_CreateObject();
		cJSON_AddStringToObject(s, "snapshot", e->name);
		cJSON_AddStringToObject(s, "uuid", e->uuid);
		cJSON_AddStringToObject(s, "state", e->state);
		cJSON_AddNumberToObject(s, "start_time_in_millis", (double)e->start_ms);
		cJSON_AddNumberToObject(s, "end_time_in_millis", (double)e->end_ms);
		cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(cat, "snapshots"), s);
		rc = catalog_store(r, cat, gen, err);
	}
	cJSON_Delete(cat);
	if (!rc)
		sn_snapshot_abort(r, e->name);
out:
	lock_drop(lk);
	return rc;
}

static cm_err
missing(sn_repo *r, const char *name, cm_error *err)
{
	return cm_error_set_type(err, CM_ENOTFOUND, "snapshot_missing_exception",
	                         "[%s:%s] is missing", r->loc, name);
}

cm_err
sn_snapshot_read(sn_repo *r, const char *name, cJSON **manifest, sn_entry *e, cm_error *err)
{
	sn_entry *all;
	size_t n;
	char f[80];
	cm_err rc = sn_catalog_read(r, &all, &n, err);
	if (rc)
		return rc;
	size_t i = 0;
	while (i < n && strcmp(all[i].name, name) != 0)
		i++;
	if (i == n) {
		cm_free(MEM, all);
		return missing(r, name, err);
	}
	*e = all[i];
	cm_free(MEM, all);
	snprintf(f, sizeof(f), "snap-%s.json", e->uuid);
	if (!manifest)
		return CM_OK;
	if ((rc = json_read(r, f, manifest, err)) && !err->code)
		rc = cm_error_set_type(err, CM_ECORRUPT, "repository_exception",
		                       "manifest [%s] of snapshot [%s] cannot be read", f, name);
	return rc;
}

/* ---- delete and garbage collection ---- */

typedef struct keyset {
	char (*k)[33];
	size_t n, cap;
} keyset;

static void
keys_add(keyset *s, const char *k)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 256;
		s->k = cm_realloc(MEM, s->k, s->cap * sizeof(*s->k));
	}
	memcpy(s->k[s->n++], k, 33);
}

static int
key_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 33);
}

/* Every blob a manifest references. */
static void
manifest_keys(const cJSON *m, keyset *s)
{
	const cJSON *ix, *sh, *f;
	cJSON_ArrayForEach(ix, cJSON_GetObjectItemCaseSensitive(m, "indices"))
	{
		cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(ix, "shards"))
		{
			cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(sh, "files"))
			{
				char name[SN_NAME_MAX];
				sn_blob b;
				if (sn_file_parse(f, name, &b))
					keys_add(s, b.key);
			}
		}
	}
}

/* Blobs and temp files touched at or after the cutoff stay: a snapshot
 * being taken writes or touches every blob it uses after making its
 * pending marker, so the cutoff is the oldest marker's mtime less a second
 * of slack for coarse file times. With no marker (the exclusive lock keeps
 * new ones out) nothing can be in use: no cutoff. */
static int64_t
gc_cutoff(sn_repo *r)
{
	char p[PATH_MAX + 16], f[PATH_MAX + SN_NAME_MAX + 16];
	int64_t cut = INT64_MAX;
	snprintf(p, sizeof(p), "%s/pending", r->loc);
	DIR *d = opendir(p);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		struct stat sb;
		if (e->d_name[0] == '.')
			continue;
		snprintf(f, sizeof(f), "%s/%s", p, e->d_name);
		if (stat(f, &sb) == 0) {
			int64_t t = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
			if (t < cut)
				cut = t;
		}
	}
	if (d)
		closedir(d);
	return cut == INT64_MAX ? cut : cut - 1000000000;
}

static void
gc_dir(const char *dir, const keyset *keep, int64_t cutoff, bool blobs, uint64_t *nrm,
       uint64_t *bytes)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char f[PATH_MAX + 300];
	while (d && (e = readdir(d))) {
		struct stat sb;
		if (e->d_name[0] == '.')
			continue;
		snprintf(f, sizeof(f), "%s/%s", dir, e->d_name);
		if (lstat(f, &sb) != 0)
			continue;
		if (S_ISDIR(sb.st_mode)) {
			if (blobs)
				gc_dir(f, keep, cutoff, blobs, nrm, bytes);
			continue;
		}
		int64_t t = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
		if (t >= cutoff)
			continue;
		size_t nl = strlen(e->d_name);
		char key[33];
		snprintf(key, sizeof(key), "%.32s", e->d_name);
		if (blobs && keep->n &&
		    (nl == 32 || (nl == 36 && strcmp(e->d_name + 32, ".zst") == 0)) &&
		    bsearch(key, keep->k, keep->n, sizeof(*keep->k), key_cmp))
			continue;
		if (unlink(f) == 0) {
			(*nrm)++;
			*bytes += (uint64_t)sb.st_size;
		}
	}
	if (d)
		closedir(d);
}

cm_err
sn_snapshot_delete(sn_repo *r, const char *name, uint64_t *blobs_removed, uint64_t *bytes_removed,
                   cm_error *err)
{
	cJSON *cat;
	uint64_t gen, tmpn = 0, tmpb = 0;
	int idx = -1;
	char f[80], p[PATH_MAX + 80];
	cm_err rc;
	*blobs_removed = *bytes_removed = 0;
	int lk = lock_take(r, true);
	if ((rc = catalog_load(r, &cat, &gen, err)))
		goto out;
	const cJSON *s = catalog_find(cat, name, &idx);
	if (!s) {
		rc = missing(r, name, err);
		cJSON_Delete(cat);
		goto out;
	}
	sn_entry gone;
	entry_from(s, &gone);
	cJSON_DeleteItemFromArray(cJSON_GetObjectItemCaseSensitive(cat, "snapshots"), idx);
	if ((rc = catalog_store(r, cat, gen, err))) {
		cJSON_Delete(cat);
		goto out;
	}
	snprintf(f, sizeof(f), "snap-%s.json", gone.uuid);
	snprintf(p, sizeof(p), "%s/%s", r->loc, f);
	unlink(p);
	/* what the remaining snapshots need */
	keyset keep = {0};
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(cat, "snapshots"))
	{
		sn_entry x;
		cJSON *m;
		cm_error e2;
		entry_from(e, &x);
		snprintf(f, sizeof(f), "snap-%s.json", x.uuid);
		cm_error_clear(&e2);
		if (json_read(r, f, &m, &e2) != CM_OK) {
			/* an unreadable manifest: removing blobs could hurt it */
			rc =
			    cm_error_set_type(err, CM_ECORRUPT, "repository_exception",
			                      "snapshot [%s] was deleted, but its files were kept: "
			                      "the manifest of [%s] cannot be read",
			                      name, x.name);
			cJSON_Delete(m);
			cm_free(MEM, keep.k);
			cJSON_Delete(cat);
			goto out;
		}
		manifest_keys(m, &keep);
		cJSON_Delete(m);
	}
	cJSON_Delete(cat);
	if (keep.n)
		qsort(keep.k, keep.n, sizeof(*keep.k), key_cmp);
	int64_t cut = gc_cutoff(r);
	snprintf(p, sizeof(p), "%s/blobs", r->loc);
	gc_dir(p, &keep, cut, true, blobs_removed, bytes_removed);
	snprintf(p, sizeof(p), "%s/tmp", r->loc);
	gc_dir(p, &keep, cut, false, &tmpn, &tmpb);
	cm_free(MEM, keep.k);
out:
	lock_drop(lk);
	return rc;
}
