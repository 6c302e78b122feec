/* The snapshot messages (MsgType 40-43) to and from protobuf. */
#include <stdio.h>
#include <string.h>

#include "../common/cm_alloc.h"
#include "../proto/pr.h"
#include "proto/shoal.pb-c.h"
#include "sn.h"

#define MEM CM_MEM_NODE

#define PB pr_pb_allocator(MEM)

#define PACK(kind, m, out)                                                                         \
	do {                                                                                       \
		size_t n_ = shoal__##kind##__get_packed_size(m);                                   \
		cm_buf_reserve(out, n_ + 1);                                                       \
		shoal__##kind##__pack(m, (out)->data + (out)->len);                                \
		(out)->len += n_;                                                                  \
	} while (0)

/* Copies a decoded string; false when it does not fit. */
static bool
cp(char *dst, size_t cap, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n >= cap)
		return false;
	memcpy(dst, s ? s : "", n);
	dst[n] = 0;
	return true;
}

static cm_err
bad(cm_error *err, const char *what)
{
	return cm_error_set(err, CM_EPARSE, "malformed %s message", what);
}

void
sn_msg_files_free(sn_file *f)
{
	cm_free(MEM, f);
}

static Shoal__SnapFile **
files_out(const sn_file *f, size_t n, Shoal__SnapFile *store)
{
	Shoal__SnapFile **p = cm_calloc(MEM, n + 1, sizeof(*p));
	for (size_t i = 0; i < n; i++) {
		shoal__snap_file__init(&store[i]);
		store[i].name = (char *)f[i].name;
		store[i].blob = (char *)f[i].b.key;
		store[i].size = f[i].b.size;
		p[i] = &store[i];
	}
	return p;
}

static bool
files_in(Shoal__SnapFile **in, size_t n, sn_file **out, size_t *nout)
{
	if (n > SN_MAX_FILES)
		return false;
	sn_file *f = cm_calloc(MEM, n + 1, sizeof(*f));
	for (size_t i = 0; i < n; i++)
		if (!cp(f[i].name, sizeof(f[i].name), in[i]->name) ||
		    !cp(f[i].b.key, sizeof(f[i].b.key), in[i]->blob)) {
			cm_free(MEM, f);
			return false;
		} else {
			f[i].b.size = in[i]->size;
		}
	*out = f;
	*nout = n;
	return true;
}

void
sn_msg_repo_encode(const sn_msg_repo *m, cm_buf *out)
{
	Shoal__SnapRepo p = SHOAL__SNAP_REPO__INIT;
	p.name = (char *)m->name;
	p.type = (char *)m->type;
	p.location = (char *)m->location;
	p.compress = m->compress;
	p.max_bytes_per_sec = m->max_bps;
	p.remove = m->remove;
	PACK(snap_repo, &p, out);
}

cm_err
sn_msg_repo_decode(const void *buf, size_t n, sn_msg_repo *m, cm_error *err)
{
	Shoal__SnapRepo *p = shoal__snap_repo__unpack(PB, n, buf);
	bool ok = p && cp(m->name, sizeof(m->name), p->name) &&
	          cp(m->type, sizeof(m->type), p->type) &&
	          cp(m->location, sizeof(m->location), p->location);
	if (ok) {
		m->compress = p->compress;
		m->max_bps = p->max_bytes_per_sec;
		m->remove = p->remove;
	}
	if (p)
		shoal__snap_repo__free_unpacked(p, PB);
	return ok ? CM_OK : bad(err, "SnapRepo");
}

void
sn_msg_shard_encode(const sn_msg_shard *m, cm_buf *out)
{
	Shoal__SnapShard p = SHOAL__SNAP_SHARD__INIT;
	p.op = (Shoal__SnapShard__Op)m->op;
	p.location = (char *)m->location;
	p.max_bytes_per_sec = m->max_bps;
	p.index = (char *)m->index;
	p.index_uuid = (char *)m->index_uuid;
	p.shard = m->shard;
	p.token = (char *)m->token;
	p.file = m->file;
	PACK(snap_shard, &p, out);
}

cm_err
sn_msg_shard_decode(const void *buf, size_t n, sn_msg_shard *m, cm_error *err)
{
	Shoal__SnapShard *p = shoal__snap_shard__unpack(PB, n, buf);
	bool ok = p && p->op >= 1 && p->op <= 3 &&
	          cp(m->location, sizeof(m->location), p->location) &&
	          cp(m->index, sizeof(m->index), p->index) &&
	          cp(m->index_uuid, sizeof(m->index_uuid), p->index_uuid) &&
	          cp(m->token, sizeof(m->token), p->token);
	if (ok) {
		m->op = (sn_shard_op)p->op;
		m->max_bps = p->max_bytes_per_sec;
		m->shard = p->shard;
		m->file = p->file;
	}
	if (p)
		shoal__snap_shard__free_unpacked(p, PB);
	return ok ? CM_OK : bad(err, "SnapShard");
}

void
sn_msg_shard_reply_encode(const sn_msg_shard_reply *m, cm_buf *out)
{
	Shoal__SnapShardReply p = SHOAL__SNAP_SHARD_REPLY__INIT;
	Shoal__SnapFile *store = cm_calloc(MEM, m->nfiles + 1, sizeof(*store));
	p.token = (char *)m->token;
	p.n_files = m->nfiles;
	p.files = files_out(m->files, m->nfiles, store);
	p.max_seq_no = m->max_seq_no;
	p.written = m->written;
	PACK(snap_shard_reply, &p, out);
	cm_free(MEM, p.files);
	cm_free(MEM, store);
}

cm_err
sn_msg_shard_reply_decode(const void *buf, size_t n, sn_msg_shard_reply *m, cm_error *err)
{
	Shoal__SnapShardReply *p = shoal__snap_shard_reply__unpack(PB, n, buf);
	memset(m, 0, sizeof(*m));
	bool ok = p && cp(m->token, sizeof(m->token), p->token) &&
	          files_in(p->files, p->n_files, &m->files, &m->nfiles);
	if (ok) {
		m->max_seq_no = p->max_seq_no;
		m->written = p->written;
	}
	if (p)
		shoal__snap_shard_reply__free_unpacked(p, PB);
	return ok ? CM_OK : bad(err, "SnapShardReply");
}

void
sn_msg_restore_encode(const sn_msg_restore *m, cm_buf *out)
{
	Shoal__SnapRestore p = SHOAL__SNAP_RESTORE__INIT;
	Shoal__SnapFile *store = cm_calloc(MEM, m->nfiles + 1, sizeof(*store));
	p.location = (char *)m->location;
	p.max_bytes_per_sec = m->max_bps;
	p.index = (char *)m->index;
	p.index_uuid = (char *)m->index_uuid;
	p.shard = m->shard;
	p.n_files = m->nfiles;
	p.files = files_out(m->files, m->nfiles, store);
	p.source = (char *)m->source;
	PACK(snap_restore, &p, out);
	cm_free(MEM, p.files);
	cm_free(MEM, store);
}

cm_err
sn_msg_restore_decode(const void *buf, size_t n, sn_msg_restore *m, cm_error *err)
{
	Shoal__SnapRestore *p = shoal__snap_restore__unpack(PB, n, buf);
	m->files = NULL;
	m->nfiles = 0;
	bool ok = p && cp(m->location, sizeof(m->location), p->location) &&
	          cp(m->index, sizeof(m->index), p->index) &&
	          cp(m->index_uuid, sizeof(m->index_uuid), p->index_uuid) &&
	          cp(m->source, sizeof(m->source), p->source) &&
	          files_in(p->files, p->n_files, &m->files, &m->nfiles);
	if (ok) {
		m->max_bps = p->max_bytes_per_sec;
		m->shard = p->shard;
	}
	if (p)
		shoal__snap_restore__free_unpacked(p, PB);
	return ok ? CM_OK : bad(err, "SnapRestore");
}

void
sn_msg_verify_encode(const sn_msg_verify *m, cm_buf *out)
{
	Shoal__SnapVerify p = SHOAL__SNAP_VERIFY__INIT;
	p.location = (char *)m->location;
	p.token = (char *)m->token;
	p.node = (char *)m->node;
	PACK(snap_verify, &p, out);
}

cm_err
sn_msg_verify_decode(const void *buf, size_t n, sn_msg_verify *m, cm_error *err)
{
	Shoal__SnapVerify *p = shoal__snap_verify__unpack(PB, n, buf);
	bool ok = p && cp(m->location, sizeof(m->location), p->location) &&
	          cp(m->token, sizeof(m->token), p->token) && cp(m->node, sizeof(m->node), p->node);
	if (p)
		shoal__snap_verify__free_unpacked(p, PB);
	return ok ? CM_OK : bad(err, "SnapVerify");
}
