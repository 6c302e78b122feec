/* A watch: one streaming POST to /v3/watch on a thread of its own. The
 * reply is a sequence of JSON objects ({"result":{...}}), cut out of the
 * byte stream as they complete. After a lost stream the watch starts again
 * from the revision after the last one delivered. */
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "../common/cm_log.h"
#include "ec_private.h"

struct ec_watch {
	ec_client *c;
	char *prefix;
	ec_watch_fn fn;
	void *arg;
	pthread_t thread;
	atomic_bool stop;
	ec_conn *conn;      /* this watch's own, so stop can wake its poll */
	pthread_mutex_t mu; /* the pause between reconnects */
	pthread_cond_t cv;
	int64_t next_rev; /* start revision of the next connection; 0: now */
	bool ended;       /* compacted: nothing more to do */
	bool progressed;  /* this connection delivered or was created */
	/* the message being cut out of the stream */
	cm_buf buf;
	size_t scan; /* bytes of buf already scanned */
	int depth;   /* brace depth at scan */
	bool in_str, esc;
};

static void
deliver_events(ec_watch *w, const cJSON *res, int64_t rev)
{
	const cJSON *evs = cJSON_GetObjectItemCaseSensitive(res, "events"), *it;
	size_t n = cJSON_IsArray(evs) ? (size_t)cJSON_GetArraySize(evs) : 0;
	if (n == 0)
		return;
	ec_event *ev = cm_calloc(EC_MEM, n, sizeof(ec_event));
	size_t k = 0;
	int64_t last = 0;
	cJSON_ArrayForEach(it, evs)
	{
		const cJSON *kv = cJSON_GetObjectItemCaseSensitive(it, "kv");
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
		ec_event e = {0};
		if (!ec_j_kv(kv, &e.kv)) {
			cm_warn("coord", "watch %s: an event with a malformed kv, skipped",
			        w->prefix);
			continue;
		}
		e.deleted = cJSON_IsString(type) && strcmp(type->valuestring, "DELETE") == 0;
		/* after a reconnect etcd starts at next_rev; older is a repeat */
		if (e.kv.mod_revision < w->next_rev || e.kv.mod_revision < last) {
			ec_kv_free(&e.kv);
			continue;
		}
		last = e.kv.mod_revision;
		ev[k++] = e;
	}
	if (k > 0) {
		ec_watch_msg m = {.kind = EC_WATCH_EVENTS, .revision = rev, .events = ev, .n = k};
		w->fn(w->arg, &m);
		w->next_rev = last + 1;
	}
	for (size_t i = 0; i < k; i++)
		ec_kv_free(&ev[i].kv);
	cm_free(EC_MEM, ev);
}

/* One message of the stream; false ends this connection. */
static bool
on_message(ec_watch *w, const char *p, size_t n)
{
	cJSON *j = cJSON_ParseWithLength(p, n);
	bool go_on = false;
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "result");
	int64_t rev = 0, compact = 0;
	bool created = false, canceled = false;
	if (!cJSON_IsObject(res)) {
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
		const cJSON *m =
		    cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
		cm_warn("coord", "watch %s: %.200s", w->prefix,
		        cJSON_IsString(m) ? m->valuestring : "a message that is not a watch reply");
	} else if (!ec_j_header_rev(res, &rev) || !ec_j_bool(res, "created", &created) ||
	           !ec_j_bool(res, "canceled", &canceled) ||
	           !ec_j_int(res, "compact_revision", &compact)) {
		cm_warn("coord", "watch %s: a malformed reply", w->prefix);
	} else if (compact > 0) {
		ec_watch_msg m = {
		    .kind = EC_WATCH_COMPACTED, .revision = rev, .compact_revision = compact};
		w->fn(w->arg, &m);
		w->ended = true;
	} else if (canceled) {
		const cJSON *why = cJSON_GetObjectItemCaseSensitive(res, "cancel_reason");
		cm_warn("coord", "watch %s: cancelled by etcd: %.200s", w->prefix,
		        cJSON_IsString(why) ? why->valuestring : "no reason");
	} else {
		if (created && w->next_rev == 0)
			w->next_rev = rev + 1; /* "from now": nothing older will come */
		w->progressed = true;
		deliver_events(w, res, rev);
		go_on = true;
	}
	cJSON_Delete(j);
	return go_on;
}

/* Cuts complete top-level objects out of the bytes as they arrive. */
static bool
on_bytes(void *arg, const char *p, size_t n)
{
	ec_watch *w = arg;
	if (atomic_load(&w->stop))
		return false;
	if (w->buf.len + n > w->c->o.max_reply_bytes) {
		cm_warn("coord", "watch %s: a message over %zu bytes", w->prefix,
		        w->c->o.max_reply_bytes);
		return false;
	}
	cm_buf_put(&w->buf, p, n);
	size_t start = 0;
	for (size_t i = w->scan; i < w->buf.len; i++) {
		char ch = (char)w->buf.data[i];
		if (w->in_str) {
			if (w->esc)
				w->esc = false;
			else if (ch == '\\')
				w->esc = true;
			else if (ch == '"')
				w->in_str = false;
			continue;
		}
		if (w->depth == 0) {
			if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') {
				start = i + 1;
				continue;
			}
			if (ch != '{') {
				cm_warn("coord", "watch %s: the stream is not JSON objects",
				        w->prefix);
				return false;
			}
		}
		if (ch == '"')
			w->in_str = true;
		else if (ch == '{' || ch == '[')
			w->depth++;
		else if (ch == '}' || ch == ']') {
			if (--w->depth == 0) {
				if (!on_message(w, (const char *)w->buf.data + start,
				                i + 1 - start))
					return false;
				start = i + 1;
			}
		}
	}
	memmove(w->buf.data, w->buf.data + start, w->buf.len - start);
	w->buf.len -= start;
	w->scan = w->buf.len;
	return true;
}

static char *
watch_body(const ec_watch *w)
{
	cJSON *b = cJSON_CreateObject();
	cJSON *q = cJSON_AddObjectToObject(b, "create_request");
	ec_j_add_prefix(q, w->prefix);
	if (w->next_rev > 0)
		ec_j_add_int(q, "start_revision", w->next_rev);
	return ec_j_print(b);
}

static void *
watch_main(void *arg)
{
	ec_watch *w = arg;
	uint32_t pause = w->c->o.watch_retry_ms;
	while (!atomic_load(&w->stop) && !w->ended) {
		char *body = watch_body(w);
		cm_buf_reset(&w->buf);
		w->scan = 0;
		w->depth = 0;
		w->in_str = w->esc = false;
		w->progressed = false;
		ec_call call = {.path = "/v3/watch",
		                .body = body,
		                .cancel = &w->stop,
		                .long_poll = true,
		                .conn = w->conn,
		                .sink = on_bytes,
		                .sink_arg = w};
		cm_error err = {0};
		cm_err rc = ec_do(w->c, &call, &err);
		cm_free(EC_MEM, body);
		cJSON_Delete(call.reply);
		if (atomic_load(&w->stop) || w->ended)
			break;
		if (w->progressed)
			pause = w->c->o.watch_retry_ms;
		cm_info("coord", "watch %s: %s; again from revision %" PRId64 " in %u ms",
		        w->prefix, rc ? err.reason : "stream ended", w->next_rev, pause);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += pause / 1000;
		ts.tv_nsec += (long)(pause % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&w->mu);
		while (!atomic_load(&w->stop) && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0)
			;
		pthread_mutex_unlock(&w->mu);
		pause = pause < 1000 ? pause * 2 : 2000;
	}
	return NULL;
}

cm_err
ec_watch_start(ec_client *c, const char *prefix, int64_t start_revision, ec_watch_fn fn, void *arg,
               ec_watch **out, cm_error *err)
{
	*out = NULL;
	if (fn == NULL || start_revision < 0)
		return cm_error_set(err, CM_EINVAL, "etcd watch: needs a callback and a revision");
	ec_watch *w = cm_calloc(EC_MEM, 1, sizeof(*w));
	w->c = c;
	w->prefix = cm_strdup(EC_MEM, prefix);
	w->fn = fn;
	w->arg = arg;
	w->next_rev = start_revision;
	w->conn = ec_conn_get(c);
	cm_buf_init(&w->buf, EC_MEM);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
		ec_conn_put(c, w->conn);
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		cm_free(EC_MEM, w->prefix);
		cm_free(EC_MEM, w);
		return cm_error_set(err, CM_EINTERNAL, "etcd watch: cannot start a thread");
	}
	*out = w;
	return CM_OK;
}

void
ec_watch_stop(ec_watch *w)
{
	if (w == NULL)
		return;
	pthread_mutex_lock(&w->mu);
	atomic_store(&w->stop, true);
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	curl_multi_wakeup(w->conn->multi);
	pthread_join(w->thread, NULL);
	ec_conn_put(w->c, w->conn);
	cm_buf_free(&w->buf);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	cm_free(EC_MEM, w->prefix);
	cm_free(EC_MEM, w);
}
