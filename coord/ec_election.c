/* etcd's election service (v3election over the gateway). A campaign is one
 * long POST that etcd answers once this lease leads; giving it up (cancel,
 * deadline) closes the connection, and etcd then withdraws the candidacy. */
#include <string.h>

#include "ec_private.h"

void
ec_leader_key_free(ec_leader_key *l)
{
	if (l == NULL)
		return;
	cm_free(EC_MEM, l->name);
	cm_free(EC_MEM, l->key);
	memset(l, 0, sizeof(*l));
}

static cJSON *
leader_json(const ec_leader_key *l)
{
	cJSON *o = cJSON_CreateObject();
	ec_j_add_b64(o, "name", l->name, strlen(l->name));
	ec_j_add_b64(o, "key", l->key, strlen(l->key));
	ec_j_add_int(o, "rev", l->rev);
	ec_j_add_int(o, "lease", l->lease);
	return o;
}

/* deadline: the campaign's own (a long poll), else 0 for the request timeout. */
static cm_err
call(ec_client *c, const char *path, cJSON *body, uint64_t deadline, const atomic_bool *cancel,
     cJSON **reply, cm_error *err)
{
	char *text = ec_j_print(body);
	ec_call k = {.path = path,
	             .body = text,
	             .deadline_ns = deadline ? deadline : ec_deadline(c, 0),
	             .cancel = cancel,
	             .long_poll = deadline != 0};
	cm_err rc = ec_do(c, &k, err);
	cm_free(EC_MEM, text);
	*reply = k.reply;
	return rc;
}

cm_err
ec_campaign(ec_client *c, const char *name, int64_t lease, const void *val, size_t len,
            uint32_t timeout_ms, const atomic_bool *cancel, ec_leader_key *out, cm_error *err)
{
	memset(out, 0, sizeof(*out));
	if (name == NULL || name[0] == '\0' || lease == 0)
		return cm_error_set(err, CM_EINVAL, "etcd campaign: needs a name and a lease");
	cJSON *b = cJSON_CreateObject(), *r;
	ec_j_add_b64(b, "name", name, strlen(name));
	ec_j_add_int(b, "lease", lease);
	ec_j_add_b64(b, "value", val, len);
	/* Campaigning again with the same lease keeps its key, so resending on
	 * another endpoint is safe. */
	cm_err rc =
	    call(c, "/v3/election/campaign", b, ec_deadline(c, timeout_ms), cancel, &r, err);
	if (rc != CM_OK)
		return rc;
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(r, "leader");
	uint8_t *nm = NULL, *key = NULL;
	size_t nn, kn;
	if (!cJSON_IsObject(l) || !ec_j_bytes(l, "name", &nm, &nn) ||
	    !ec_j_bytes(l, "key", &key, &kn) || !ec_j_int(l, "rev", &out->rev) ||
	    !ec_j_int(l, "lease", &out->lease) || kn == 0 || out->rev <= 0) {
		cm_free(EC_MEM, nm);
		cm_free(EC_MEM, key);
		memset(out, 0, sizeof(*out));
		rc = ec_bad_reply(err, "/v3/election/campaign", "leader");
	} else {
		out->name = (char *)nm;
		out->key = (char *)key;
	}
	cJSON_Delete(r);
	return rc;
}

cm_err
ec_leader(ec_client *c, const char *name, ec_kv *out, cm_error *err)
{
	memset(out, 0, sizeof(*out));
	cJSON *b = cJSON_CreateObject(), *r;
	ec_j_add_b64(b, "name", name, strlen(name));
	cm_err rc = call(c, "/v3/election/leader", b, 0, NULL, &r, err);
	if (rc != CM_OK)
		return rc;
	const cJSON *kv = cJSON_GetObjectItemCaseSensitive(r, "kv");
	if (kv == NULL)
		rc = cm_error_set(err, CM_ENOTFOUND, "etcd: election '%.200s' has no leader", name);
	else if (!ec_j_kv(kv, out))
		rc = ec_bad_reply(err, "/v3/election/leader", "kv");
	cJSON_Delete(r);
	return rc;
}

cm_err
ec_proclaim(ec_client *c, const ec_leader_key *l, const void *val, size_t len, cm_error *err)
{
	cJSON *b = cJSON_CreateObject(), *r;
	cJSON_AddItemToObject(b, "leader", leader_json(l));
	ec_j_add_b64(b, "value", val, len);
	cm_err rc = call(c, "/v3/election/proclaim", b, 0, NULL, &r, err);
	cJSON_Delete(r);
	return rc;
}

cm_err
ec_resign(ec_client *c, const ec_leader_key *l, cm_error *err)
{
	cJSON *b = cJSON_CreateObject(), *r;
	cJSON_AddItemToObject(b, "leader", leader_json(l));
	cm_err rc = call(c, "/v3/election/resign", b, 0, NULL, &r, err);
	cJSON_Delete(r);
	return rc;
}
