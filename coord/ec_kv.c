/* Keys, transactions, compaction and leases: one POST each. */
#include <inttypes.h>
#include <string.h>

#include "ec_private.h"

/* POSTs body (deleted here) to path within the request timeout. */
static cm_err
post(ec_client *c, const char *path, cJSON *body, bool once, cJSON **reply, cm_error *err)
{
	char *text = ec_j_print(body);
	ec_call call = {.path = path, .body = text, .once = once, .deadline_ns = ec_deadline(c, 0)};
	cm_err rc = ec_do(c, &call, err);
	cm_free(EC_MEM, text);
	*reply = call.reply;
	return rc;
}

static bool
parse_range(const cJSON *r, ec_kvs *out)
{
	return ec_j_header_rev(r, &out->revision) &&
	       ec_j_kvs(cJSON_GetObjectItemCaseSensitive(r, "kvs"), out) &&
	       ec_j_int(r, "count", &out->count) && ec_j_bool(r, "more", &out->more);
}

cm_err
ec_get(ec_client *c, const char *key, ec_kv *out, int64_t *revision, cm_error *err)
{
	memset(out, 0, sizeof(*out));
	if (revision)
		*revision = 0;
	cJSON *b = cJSON_CreateObject(), *r;
	ec_j_add_b64(b, "key", key, strlen(key));
	cm_err rc = post(c, "/v3/kv/range", b, false, &r, err);
	if (rc != CM_OK)
		return rc;
	ec_kvs kvs = {0};
	if (!parse_range(r, &kvs))
		rc = ec_bad_reply(err, "/v3/kv/range", "kvs");
	else if (kvs.n == 0)
		rc = cm_error_set(err, CM_ENOTFOUND, "etcd: no key '%.200s'", key);
	else {
		*out = kvs.kv[0];
		memset(&kvs.kv[0], 0, sizeof(ec_kv));
	}
	if (revision)
		*revision = kvs.revision;
	ec_kvs_free(&kvs);
	cJSON_Delete(r);
	return rc;
}

cm_err
ec_range_prefix(ec_client *c, const char *prefix, size_t limit, ec_kvs *out, cm_error *err)
{
	memset(out, 0, sizeof(*out));
	cJSON *b = cJSON_CreateObject(), *r;
	ec_j_add_prefix(b, prefix);
	if (limit)
		ec_j_add_int(b, "limit", (int64_t)limit);
	cm_err rc = post(c, "/v3/kv/range", b, false, &r, err);
	if (rc != CM_OK)
		return rc;
	if (!parse_range(r, out)) {
		ec_kvs_free(out);
		rc = ec_bad_reply(err, "/v3/kv/range", "kvs");
	}
	cJSON_Delete(r);
	return rc;
}

static cJSON *
put_request(const char *key, const void *val, size_t len, int64_t lease)
{
	cJSON *b = cJSON_CreateObject();
	ec_j_add_b64(b, "key", key, strlen(key));
	ec_j_add_b64(b, "value", val, len);
	if (lease)
		ec_j_add_int(b, "lease", lease);
	return b;
}

cm_err
ec_put(ec_client *c, const char *key, const void *val, size_t len, int64_t lease, int64_t *revision,
       cm_error *err)
{
	cJSON *r;
	cm_err rc = post(c, "/v3/kv/put", put_request(key, val, len, lease), false, &r, err);
	if (rc != CM_OK)
		return rc;
	int64_t rev;
	if (!ec_j_header_rev(r, &rev))
		rc = ec_bad_reply(err, "/v3/kv/put", "header");
	else if (revision)
		*revision = rev;
	cJSON_Delete(r);
	return rc;
}

static cm_err
delete_range(ec_client *c, const char *key, bool prefix, int64_t *deleted, cm_error *err)
{
	cJSON *b = cJSON_CreateObject(), *r;
	if (prefix)
		ec_j_add_prefix(b, key);
	else
		ec_j_add_b64(b, "key", key, strlen(key));
	cm_err rc = post(c, "/v3/kv/deleterange", b, false, &r, err);
	if (rc != CM_OK)
		return rc;
	int64_t n;
	if (!ec_j_int(r, "deleted", &n))
		rc = ec_bad_reply(err, "/v3/kv/deleterange", "deleted");
	else if (deleted)
		*deleted = n;
	cJSON_Delete(r);
	return rc;
}

cm_err
ec_delete(ec_client *c, const char *key, int64_t *deleted, cm_error *err)
{
	return delete_range(c, key, false, deleted, err);
}

cm_err
ec_delete_prefix(ec_client *c, const char *prefix, int64_t *deleted, cm_error *err)
{
	return delete_range(c, prefix, true, deleted, err);
}

/* ---- transactions ---- */

static cJSON *
txn_compare(const ec_cmp *m)
{
	static const char *results[] = {"EQUAL", "NOT_EQUAL", "LESS", "GREATER"};
	static const char *targets[] = {"CREATE", "MOD", "VERSION", "VALUE", "LEASE"};
	static const char *fields[] = {"create_revision", "mod_revision", "version", "value",
	                               "lease"};
	cJSON *o = cJSON_CreateObject();
	ec_j_add_b64(o, "key", m->key, strlen(m->key));
	cJSON_AddStringToObject(o, "result", results[m->op]);
	cJSON_AddStringToObject(o, "target", targets[m->target]);
	if (m->target == EC_CMP_VALUE)
		ec_j_add_b64(o, "value", m->value, m->value_len);
	else
		ec_j_add_int(o, fields[m->target], m->num);
	return o;
}

static cJSON *
txn_op(const ec_op *op)
{
	cJSON *o = cJSON_CreateObject(), *q;
	switch (op->type) {
	case EC_OP_PUT:
		cJSON_AddItemToObject(o, "request_put",
		                      put_request(op->key, op->value, op->value_len, op->lease));
		break;
	case EC_OP_DELETE:
	case EC_OP_DELETE_PREFIX:
		q = cJSON_AddObjectToObject(o, "request_delete_range");
		if (op->type == EC_OP_DELETE_PREFIX)
			ec_j_add_prefix(q, op->key);
		else
			ec_j_add_b64(q, "key", op->key, strlen(op->key));
		break;
	case EC_OP_GET:
	case EC_OP_RANGE_PREFIX:
		q = cJSON_AddObjectToObject(o, "request_range");
		if (op->type == EC_OP_RANGE_PREFIX)
			ec_j_add_prefix(q, op->key);
		else
			ec_j_add_b64(q, "key", op->key, strlen(op->key));
		break;
	}
	return o;
}

static bool
txn_response(const cJSON *item, ec_kvs *res)
{
	const cJSON *r;
	if ((r = cJSON_GetObjectItemCaseSensitive(item, "response_range")) != NULL)
		return cJSON_IsObject(r) && parse_range(r, res);
	if ((r = cJSON_GetObjectItemCaseSensitive(item, "response_delete_range")) != NULL)
		return cJSON_IsObject(r) && ec_j_header_rev(r, &res->revision) &&
		       ec_j_int(r, "deleted", &res->count);
	if ((r = cJSON_GetObjectItemCaseSensitive(item, "response_put")) != NULL)
		return cJSON_IsObject(r) && ec_j_header_rev(r, &res->revision);
	return false;
}

void
ec_txn_result_free(ec_txn_result *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->n; i++)
		ec_kvs_free(&r->res[i]);
	cm_free(EC_MEM, r->res);
	memset(r, 0, sizeof(*r));
}

cm_err
ec_txn(ec_client *c, const ec_cmp *cmp, size_t ncmp, const ec_op *ok, size_t nok, const ec_op *fail,
       size_t nfail, ec_txn_result *out, cm_error *err)
{
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < ncmp; i++)
		if ((unsigned)cmp[i].op > EC_CMP_GT || (unsigned)cmp[i].target > EC_CMP_LEASE)
			return cm_error_set(err, CM_EINVAL, "etcd txn: bad compare %zu", i);
	for (size_t i = 0; i < nok + nfail; i++) {
		const ec_op *op = i < nok ? &ok[i] : &fail[i - nok];
		if ((unsigned)op->type > EC_OP_RANGE_PREFIX || op->key == NULL)
			return cm_error_set(err, CM_EINVAL, "etcd txn: bad op %zu", i);
	}
	cJSON *b = cJSON_CreateObject(), *r;
	cJSON *a = cJSON_AddArrayToObject(b, "compare");
	for (size_t i = 0; i < ncmp; i++)
		cJSON_AddItemToArray(a, txn_compare(&cmp[i]));
	a = cJSON_AddArrayToObject(b, "success");
	for (size_t i = 0; i < nok; i++)
		cJSON_AddItemToArray(a, txn_op(&ok[i]));
	a = cJSON_AddArrayToObject(b, "failure");
	for (size_t i = 0; i < nfail; i++)
		cJSON_AddItemToArray(a, txn_op(&fail[i]));
	cm_err rc = post(c, "/v3/kv/txn", b, true, &r, err);
	if (rc != CM_OK)
		return rc;
	if (!ec_j_bool(r, "succeeded", &out->succeeded) || !ec_j_header_rev(r, &out->revision)) {
		cJSON_Delete(r);
		return ec_bad_reply(err, "/v3/kv/txn", "header");
	}
	size_t want = out->succeeded ? nok : nfail;
	const cJSON *resp = cJSON_GetObjectItemCaseSensitive(r, "responses");
	size_t got = cJSON_IsArray(resp) ? (size_t)cJSON_GetArraySize(resp) : 0;
	if ((resp != NULL && !cJSON_IsArray(resp)) || got != want) {
		cJSON_Delete(r);
		return ec_bad_reply(err, "/v3/kv/txn", "responses");
	}
	out->res = cm_calloc(EC_MEM, want + 1, sizeof(ec_kvs));
	out->n = want;
	size_t i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, resp)
	{
		if (!txn_response(it, &out->res[i++])) {
			ec_txn_result_free(out);
			cJSON_Delete(r);
			return ec_bad_reply(err, "/v3/kv/txn", "response");
		}
	}
	cJSON_Delete(r);
	return CM_OK;
}

cm_err
ec_compact(ec_client *c, int64_t revision, cm_error *err)
{
	cJSON *b = cJSON_CreateObject(), *r = NULL;
	ec_j_add_int(b, "revision", revision);
	cm_error e = {0};
	cm_err rc = post(c, "/v3/kv/compaction", b, false, &r, &e);
	cJSON_Delete(r);
	if (rc == CM_EINVAL && strstr(e.reason, "has been compacted"))
		return CM_OK;
	if (rc != CM_OK)
		cm_error_set(err, rc, "%s", e.reason);
	return rc;
}

/* ---- leases ---- */

cm_err
ec_lease_grant(ec_client *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl, cm_error *err)
{
	*id = 0;
	if (ttl_s <= 0)
		return cm_error_set(err, CM_EINVAL, "etcd lease: ttl %" PRId64 " s", ttl_s);
	cJSON *b = cJSON_CreateObject(), *r;
	ec_j_add_int(b, "TTL", ttl_s);
	cm_err rc = post(c, "/v3/lease/grant", b, false, &r, err);
	if (rc != CM_OK)
		return rc;
	const cJSON *e =
	    cJSON_GetObjectItemCaseSensitive(r, "error"); /* LeaseGrantResponse.error */
	int64_t ttl;
	if (cJSON_IsString(e) && e->valuestring[0])
		rc = cm_error_set(err, CM_EINTERNAL, "etcd lease grant: %.300s", e->valuestring);
	else if (!ec_j_int(r, "ID", id) || !ec_j_int(r, "TTL", &ttl) || *id == 0 || ttl <= 0)
		rc = ec_bad_reply(err, "/v3/lease/grant", "ID/TTL");
	else if (granted_ttl)
		*granted_ttl = ttl;
	cJSON_Delete(r);
	return rc;
}

cm_err
ec_lease_keepalive(ec_client *c, int64_t id, int64_t *ttl_left, cm_error *err)
{
	/* The gateway's keep-alive is a stream; one request per POST (several
	 * in one body are not reliably answered one by one). */
	cJSON *b = cJSON_CreateObject(), *r;
	ec_j_add_int(b, "ID", id);
	cm_err rc = post(c, "/v3/lease/keepalive", b, false, &r, err);
	if (rc != CM_OK)
		return rc;
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(r, "result");
	int64_t ttl = 0;
	if (!cJSON_IsObject(res) || !ec_j_int(res, "TTL", &ttl))
		rc = ec_bad_reply(err, "/v3/lease/keepalive", "result");
	else if (ttl <= 0) /* etcd omits TTL (0) for a lease it does not hold */
		rc = cm_error_set(err, CM_ENOTFOUND, "etcd: lease %" PRIx64 " expired or unknown",
		                  (uint64_t)id);
	else if (ttl_left)
		*ttl_left = ttl;
	cJSON_Delete(r);
	return rc;
}

cm_err
ec_lease_revoke(ec_client *c, int64_t id, cm_error *err)
{
	cJSON *b = cJSON_CreateObject(), *r;
	ec_j_add_int(b, "ID", id);
	cm_err rc = post(c, "/v3/lease/revoke", b, false, &r, err);
	cJSON_Delete(r);
	return rc;
}

cm_err
ec_lease_ttl(ec_client *c, int64_t id, int64_t *ttl_left, int64_t *granted, cm_error *err)
{
	cJSON *b = cJSON_CreateObject(), *r;
	ec_j_add_int(b, "ID", id);
	cm_err rc = post(c, "/v3/lease/timetolive", b, false, &r, err);
	if (rc != CM_OK)
		return rc;
	int64_t ttl, g;
	if (!ec_j_int(r, "TTL", &ttl) || !ec_j_int(r, "grantedTTL", &g))
		rc = ec_bad_reply(err, "/v3/lease/timetolive", "TTL");
	else if (ttl < 0) /* -1: expired or never granted */
		rc = cm_error_set(err, CM_ENOTFOUND, "etcd: lease %" PRIx64 " expired or unknown",
		                  (uint64_t)id);
	else {
		*ttl_left = ttl;
		if (granted)
			*granted = g;
	}
	cJSON_Delete(r);
	return rc;
}
