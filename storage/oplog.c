/* The shard's operation log: one LMDB named DB in shard.mdb, keyed by
 * seq_no. Records carry a checksum because LMDB 0.9 has none and the log
 * is what replays acknowledged writes after a crash. */
#include <errno.h>
#include <string.h>

#include "shard_private.h"

/* Bounds a record may claim before we trust it (the REST layer caps bodies
 * at 100 MB; ids are at most 512 bytes in ES). */
#define OPLOG_MAX_ID 4096
#define OPLOG_MAX_SOURCE ((uint64_t)1 << 31)

cm_err
st_mdb_err(int rc)
{
	switch (rc) {
	case 0:
		return CM_OK;
	case MDB_NOTFOUND:
		return CM_ENOTFOUND;
	case MDB_MAP_FULL:
		return CM_EFULL;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH:
		return CM_ECORRUPT;
	case ENOMEM:
		return CM_ENOMEM;
	default:
		return CM_EIO;
	}
}

void
st_oplog_encode(cm_buf *out, st_op_type type, const char *id, size_t id_len, const char *source,
                size_t source_len, uint64_t primary_term, int64_t version)
{
	cm_buf_reset(out);
	cm_buf_put_u8(out, (uint8_t)type);
	cm_buf_put_varint(out, primary_term);
	cm_buf_put_varint(out, (uint64_t)version);
	cm_buf_put_str(out, id, id_len);
	if (type == ST_OP_INDEX)
		cm_buf_put_str(out, source, source_len);
	cm_buf_put_checksum(out, 0);
}

cm_err
st_oplog_decode(const void *val, size_t len, uint64_t seq_no, st_op *op, int64_t *version)
{
	if (!cm_checksum_ok(val, &len))
		return CM_ECORRUPT;
	cm_rd r;
	cm_rd_init(&r, val, len);
	uint8_t type;
	uint64_t term, ver;
	const char *id = NULL, *src = NULL;
	size_t id_len = 0, src_len = 0;
	if (!cm_rd_u8(&r, &type) || !cm_rd_varint(&r, &term) || !cm_rd_varint(&r, &ver) ||
	    !cm_rd_str(&r, &id, &id_len))
		return CM_ECORRUPT;
	if (type != ST_OP_INDEX && type != ST_OP_DELETE)
		return CM_ECORRUPT;
	if (type == ST_OP_INDEX && !cm_rd_str(&r, &src, &src_len))
		return CM_ECORRUPT;
	if (id_len > OPLOG_MAX_ID || src_len > OPLOG_MAX_SOURCE || cm_rd_left(&r) != 0)
		return CM_ECORRUPT;
	memset(op, 0, sizeof(*op));
	op->type = (st_op_type)type;
	op->id = id;
	op->id_len = id_len;
	op->source = src;
	op->source_len = src_len;
	op->seq_no = seq_no;
	op->primary_term = term;
	op->if_seq_no = ST_NO_SEQ;
	op->version = (int64_t)ver;
	*version = (int64_t)ver;
	return CM_OK;
}

cm_err
st_oplog_trim(MDB_txn *txn, MDB_dbi dbi, uint64_t upto, size_t max, size_t *deleted)
{
	MDB_cursor *c;
	*deleted = 0;
	int rc = mdb_cursor_open(txn, dbi, &c);
	if (rc)
		return st_mdb_err(rc);
	MDB_val k, v;
	/* Re-seek the first record each time: simpler than reasoning about
	 * where LMDB leaves a cursor after a delete. */
	while (*deleted < max && (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST)) == 0) {
		if (k.mv_size != 8 || cm_get_u64_be(k.mv_data) > upto)
			break;
		if ((rc = mdb_cursor_del(c, 0)) != 0)
			break;
		(*deleted)++;
	}
	mdb_cursor_close(c);
	return rc == MDB_NOTFOUND || rc == 0 ? CM_OK : st_mdb_err(rc);
}

cm_err
st_oplog_scan(MDB_txn *txn, MDB_dbi dbi, uint64_t from, st_oplog_fn fn, void *ctx)
{
	MDB_cursor *c;
	int rc = mdb_cursor_open(txn, dbi, &c);
	if (rc)
		return st_mdb_err(rc);
	uint8_t kb[8];
	uint64_t start = from == ST_NO_SEQ ? 0 : from + 1;
	for (int i = 0; i < 8; i++)
		kb[i] = (uint8_t)(start >> (56 - 8 * i));
	MDB_val k = {8, kb}, v;
	cm_err err = CM_OK;
	rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
	while (rc == 0) {
		if (k.mv_size != 8) {
			err = CM_ECORRUPT;
			break;
		}
		st_op op;
		int64_t version;
		err =
		    st_oplog_decode(v.mv_data, v.mv_size, cm_get_u64_be(k.mv_data), &op, &version);
		if (err || fn(ctx, &op, version))
			break;
		rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(c);
	if (err)
		return err;
	return rc == MDB_NOTFOUND || rc == 0 ? CM_OK : st_mdb_err(rc);
}

cm_err
st_oplog_last(MDB_txn *txn, MDB_dbi dbi, uint64_t *seq, bool *found)
{
	MDB_cursor *c;
	int rc = mdb_cursor_open(txn, dbi, &c);
	if (rc)
		return st_mdb_err(rc);
	MDB_val k, v;
	rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
	mdb_cursor_close(c);
	*found = false;
	*seq = 0;
	if (rc == MDB_NOTFOUND)
		return CM_OK;
	if (rc)
		return st_mdb_err(rc);
	if (k.mv_size != 8)
		return CM_ECORRUPT;
	*seq = cm_get_u64_be(k.mv_data);
	*found = true;
	return CM_OK;
}
