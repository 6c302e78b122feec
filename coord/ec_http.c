/* The client and one call to the gateway: endpoints in turn, deadlines,
 * cancellation, and etcd's error replies as cm_err. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "ec_private.h"

#define EC_IDLE_MAX 4
#define EC_POLL_MS 100 /* how long a call waits before looking at its cancel flag */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void
curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

cm_err
ec_open(const char *const *endpoints, size_t n, const ec_opts *o, ec_client **out, cm_error *err)
{
	*out = NULL;
	if (n == 0 || endpoints == NULL)
		return cm_error_set(err, CM_EINVAL, "etcd: no endpoints");
	for (size_t i = 0; i < n; i++) {
		size_t len = endpoints[i] ? strlen(endpoints[i]) : 0;
		if (len == 0 || len > 200 || strpbrk(endpoints[i], " \t\r\n") != NULL)
			return cm_error_set(err, CM_EINVAL, "etcd: bad endpoint '%.200s'",
			                    endpoints[i] ? endpoints[i] : "");
	}
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return cm_error_set(err, CM_EINTERNAL, "etcd: curl_global_init: %s",
		                    curl_easy_strerror(curl_init_rc));
	ec_client *c = cm_calloc(EC_MEM, 1, sizeof(*c));
	c->endpoints = cm_calloc(EC_MEM, n, sizeof(char *));
	c->nendpoints = n;
	for (size_t i = 0; i < n; i++) {
		const char *e = endpoints[i];
		size_t len = strlen(e);
		while (len > 0 && e[len - 1] == '/')
			len--;
		bool scheme = strstr(e, "://") != NULL;
		c->endpoints[i] = cm_malloc(EC_MEM, len + 8);
		snprintf(c->endpoints[i], len + 8, "%s%.*s", scheme ? "" : "http://", (int)len, e);
	}
	if (o != NULL)
		c->o = *o;
	if (c->o.request_timeout_ms == 0)
		c->o.request_timeout_ms = 5000;
	if (c->o.connect_timeout_ms == 0)
		c->o.connect_timeout_ms = 1000;
	if (c->o.attempt_timeout_ms == 0)
		c->o.attempt_timeout_ms = 2000;
	if (c->o.attempt_timeout_ms > c->o.request_timeout_ms)
		c->o.attempt_timeout_ms = c->o.request_timeout_ms;
	if (c->o.watch_retry_ms == 0)
		c->o.watch_retry_ms = 100;
	if (c->o.max_reply_bytes == 0)
		c->o.max_reply_bytes = 64u << 20;
	pthread_mutex_init(&c->mu, NULL);
	*out = c;
	return CM_OK;
}

static void
conn_free(ec_conn *k)
{
	curl_multi_cleanup(k->multi);
	curl_easy_cleanup(k->easy);
	cm_free(EC_MEM, k);
}

void
ec_close(ec_client *c)
{
	if (c == NULL)
		return;
	while (c->idle) {
		ec_conn *k = c->idle;
		c->idle = k->next;
		conn_free(k);
	}
	for (size_t i = 0; i < c->nendpoints; i++)
		cm_free(EC_MEM, c->endpoints[i]);
	cm_free(EC_MEM, c->endpoints);
	pthread_mutex_destroy(&c->mu);
	cm_free(EC_MEM, c);
}

ec_conn *
ec_conn_get(ec_client *c)
{
	pthread_mutex_lock(&c->mu);
	ec_conn *k = c->idle;
	if (k) {
		c->idle = k->next;
		c->nidle--;
	}
	pthread_mutex_unlock(&c->mu);
	if (k)
		return k;
	k = cm_calloc(EC_MEM, 1, sizeof(*k));
	k->easy = curl_easy_init();
	k->multi = curl_multi_init();
	if (k->easy == NULL || k->multi == NULL) {
		fprintf(stderr, "shoal: curl: out of memory\n");
		abort();
	}
	return k;
}

void
ec_conn_put(ec_client *c, ec_conn *k)
{
	pthread_mutex_lock(&c->mu);
	if (c->nidle < EC_IDLE_MAX) {
		k->next = c->idle;
		c->idle = k;
		c->nidle++;
		k = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	if (k)
		conn_free(k);
}

uint64_t
ec_deadline(const ec_client *c, uint32_t ms)
{
	return cm_now_ns() + (uint64_t)(ms ? ms : c->o.request_timeout_ms) * 1000000u;
}

/* ---- etcd's errors ---- */

static cm_err
grpc_to_cm(int code, const char *msg)
{
	switch (code) {
	case 1: /* Canceled */
		return CM_ECLOSED;
	case 3:  /* InvalidArgument */
	case 7:  /* PermissionDenied */
	case 11: /* OutOfRange: compacted or future revision */
	case 16: /* Unauthenticated */
		return CM_EINVAL;
	case 4: /* DeadlineExceeded */
		return CM_ETIMEDOUT;
	case 5: /* NotFound */
		return CM_ENOTFOUND;
	case 6:
		return CM_EEXISTS;
	case 8: /* ResourceExhausted: too many requests, no space */
		return CM_EBUSY;
	case 9: /* FailedPrecondition */
		return CM_ECONFLICT;
	case 14: /* Unavailable: no leader, request timed out, stopping */
		return CM_EUNAVAIL;
	}
	/* Unknown (2) is what the election service and the gateway answer with */
	if (strstr(msg, "not found") || strstr(msg, "no leader") || strstr(msg, "session expired"))
		return CM_ENOTFOUND;
	if (strstr(msg, "not leader"))
		return CM_ECONFLICT;
	return CM_EINTERNAL;
}

/* The code and message of an error reply, or false when j is none:
 * unary calls {"error":"..","message":"..","code":N}, streams
 * {"error":{"grpc_code":N,"message":".."}}. */
static bool
etcd_error_fields(const cJSON *j, int *code, const char **msg)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
	const cJSON *from = j, *cd = cJSON_GetObjectItemCaseSensitive(j, "code");
	if (cJSON_IsObject(e)) {
		from = e;
		cd = cJSON_GetObjectItemCaseSensitive(e, "grpc_code");
		if (cd == NULL)
			cd = cJSON_GetObjectItemCaseSensitive(e, "code");
	} else if (!cJSON_IsString(e) || !cJSON_IsNumber(cd)) {
		return false;
	}
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(from, "message");
	if (!cJSON_IsString(m))
		m = cJSON_IsString(e) ? e : NULL;
	*code = cJSON_IsNumber(cd) ? cd->valueint : 2;
	*msg = m ? m->valuestring : "unknown error";
	return true;
}

cm_err
ec_etcd_error(const cJSON *j, const char *where, cm_error *err)
{
	int code;
	const char *msg;
	if (!etcd_error_fields(j, &code, &msg))
		return CM_OK;
	return cm_error_set(err, grpc_to_cm(code, msg), "etcd %s: %.300s (code %d)", where, msg,
	                    code);
}

/* ---- one call ---- */

typedef struct wctx {
	ec_call *call;
	CURL *easy;
	long status;
	cm_buf body; /* reply, or an error reply of a stream */
	size_t max;
	bool too_large, streamed, sink_stopped;
} wctx;

static size_t
on_write(char *p, size_t size, size_t nmemb, void *arg)
{
	wctx *w = arg;
	size_t n = size * nmemb;
	if (w->status == 0)
		curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &w->status);
	if (w->call->sink && w->status == 200) {
		w->streamed = true;
		if (!w->call->sink(w->call->sink_arg, p, n)) {
			w->sink_stopped = true;
			return 0;
		}
		return n;
	}
	if (w->body.len + n > w->max) {
		w->too_large = true;
		return 0;
	}
	cm_buf_put(&w->body, p, n);
	return n;
}

typedef enum {
	AT_DONE,     /* answered (rc is the answer) or must not go on */
	AT_UNSENT,   /* not reached: try the next endpoint */
	AT_SENT,     /* lost after sending: the next endpoint, unless call->once */
	AT_UNAVAIL,  /* answered "unavailable": the next endpoint */
	AT_DEADLINE, /* the call's time is up */
	AT_CANCEL,
} at_result;

static bool
cancelled(const ec_call *call)
{
	return call->cancel && atomic_load(call->cancel);
}

/* Runs the transfer on k's multi handle, looking at the cancel flag at least
 * every EC_POLL_MS (curl_multi_wakeup cuts the wait short). */
static CURLcode
run_transfer(ec_conn *k, ec_call *call, bool *was_cancelled)
{
	*was_cancelled = false;
	if (curl_multi_add_handle(k->multi, k->easy) != CURLM_OK)
		return CURLE_FAILED_INIT;
	CURLcode res = CURLE_OK;
	for (;;) {
		int running = 0;
		if (curl_multi_perform(k->multi, &running) != CURLM_OK) {
			res = CURLE_FAILED_INIT;
			break;
		}
		if (running == 0) {
			int left;
			CURLMsg *m;
			while ((m = curl_multi_info_read(k->multi, &left)) != NULL)
				if (m->msg == CURLMSG_DONE)
					res = m->data.result;
			break;
		}
		if (cancelled(call)) {
			*was_cancelled = true;
			break;
		}
		curl_multi_poll(k->multi, NULL, 0, EC_POLL_MS, NULL);
		if (cancelled(call)) {
			*was_cancelled = true;
			break;
		}
	}
	curl_multi_remove_handle(k->multi, k->easy);
	return res;
}

static at_result
attempt(ec_client *c, ec_conn *k, ec_call *call, size_t ep, cm_buf *why, cm_error *err, cm_err *rc)
{
	const char *base = c->endpoints[ep];
	char where[300];
	snprintf(where, sizeof(where), "%s%s", base, call->path);
	uint64_t now = cm_now_ns();
	long left_ms = 0;
	if (call->deadline_ns) {
		if (now >= call->deadline_ns)
			return AT_DEADLINE;
		left_ms = (long)((call->deadline_ns - now) / 1000000u) + 1;
		if (c->nendpoints > 1 && !call->once && !call->long_poll &&
		    left_ms > (long)c->o.attempt_timeout_ms)
			left_ms = c->o.attempt_timeout_ms;
	}
	long conn_ms = c->o.connect_timeout_ms;
	if (left_ms && left_ms < conn_ms)
		conn_ms = left_ms;

	CURL *e = k->easy;
	curl_easy_reset(e);
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	hdr = curl_slist_append(hdr, "Expect:"); /* no 100-continue round trip */
	wctx w = {.call = call, .easy = e, .max = c->o.max_reply_bytes};
	cm_buf_init(&w.body, EC_MEM);
	curl_easy_setopt(e, CURLOPT_URL, where);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, call->body);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(call->body));
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, conn_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, left_ms);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 10L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 5L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &w);

	bool was_cancelled;
	CURLcode res = run_transfer(k, call, &was_cancelled);
	long sent = 0; /* request bytes sent: 0 when it never left */
	curl_easy_getinfo(e, CURLINFO_REQUEST_SIZE, &sent);
	if (w.status == 0)
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &w.status);
	curl_slist_free_all(hdr);

	at_result r = AT_DONE;
	if (was_cancelled) {
		*rc = cm_error_set(err, CM_ECLOSED, "etcd %s: cancelled", where);
		r = AT_CANCEL;
	} else if (res == CURLE_WRITE_ERROR && w.too_large) {
		*rc = cm_error_set(err, CM_ETOOLARGE, "etcd %s: reply over %zu bytes", where,
		                   c->o.max_reply_bytes);
	} else if (res != CURLE_OK && w.streamed) {
		/* a stream that ran and broke (or whose sink stopped it): the sink
		 * decides what comes next */
		*rc = cm_error_set(err, CM_EUNAVAIL, "etcd %s: stream ended: %s", where,
		                   curl_easy_strerror(res));
	} else if (res != CURLE_OK) {
		bool deadline = call->deadline_ns && cm_now_ns() + 1000000u >= call->deadline_ns;
		bool unsent =
		    res == CURLE_COULDNT_CONNECT || res == CURLE_COULDNT_RESOLVE_HOST || sent == 0;
		cm_buf_printf(why, "%s%s (%s)", why->len ? ", " : "", base,
		              curl_easy_strerror(res));
		if (deadline && !unsent) {
			*rc = cm_error_set(err, CM_ETIMEDOUT,
			                   "etcd %s: no reply within the deadline%s", where,
			                   call->once ? " (it may have been applied)" : "");
		} else if (unsent) {
			r = deadline ? AT_DEADLINE : AT_UNSENT;
		} else if (call->once) {
			*rc = cm_error_set(err, CM_EUNAVAIL,
			                   "etcd %s: %s after the request was sent (it may have "
			                   "been applied)",
			                   where, curl_easy_strerror(res));
		} else {
			r = AT_SENT;
		}
	} else if (call->sink && w.status == 200) {
		*rc = CM_OK; /* the stream ended cleanly */
	} else {
		cJSON *j = cJSON_ParseWithLength((const char *)w.body.data, w.body.len);
		int code;
		const char *msg;
		if (j != NULL && cJSON_IsObject(j) && etcd_error_fields(j, &code, &msg)) {
			if (grpc_to_cm(code, msg) == CM_EUNAVAIL && !call->once) {
				cm_buf_printf(why, "%s%s (%.200s)", why->len ? ", " : "", base,
				              msg);
				r = AT_UNAVAIL;
			} else {
				*rc = ec_etcd_error(j, where, err);
			}
			cJSON_Delete(j);
		} else if (w.status == 200 && j != NULL && cJSON_IsObject(j)) {
			call->reply = j;
			call->endpoint = ep;
			*rc = CM_OK;
		} else {
			cJSON_Delete(j);
			if (w.status >= 500 && !call->once) {
				cm_buf_printf(why, "%s%s (HTTP %ld)", why->len ? ", " : "", base,
				              w.status);
				r = AT_UNAVAIL;
			} else {
				*rc = cm_error_set(err, CM_EPARSE,
				                   "etcd %s: HTTP %ld with a reply that is not "
				                   "etcd's JSON",
				                   where, w.status);
			}
		}
	}
	cm_buf_free(&w.body);
	return r;
}

static void
pause_ms(const ec_call *call, uint32_t ms)
{
	for (uint32_t t = 0; t < ms && !cancelled(call); t += 20) {
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
}

cm_err
ec_do(ec_client *c, ec_call *call, cm_error *err)
{
	call->reply = NULL;
	ec_conn *k = call->conn ? call->conn : ec_conn_get(c);
	cm_buf why;
	cm_buf_init(&why, EC_MEM);
	size_t n = c->nendpoints, start = atomic_load(&c->cur) % n;
	uint32_t pause = 50;
	cm_err rc = CM_OK;
	at_result r = AT_DONE;
	bool sent = false; /* some endpoint got the request */
	for (;;) {
		bool retry_pass = false;
		for (size_t i = 0; i < n; i++) {
			size_t ep = (start + i) % n;
			r = attempt(c, k, call, ep, &why, err, &rc);
			if (r == AT_DONE) {
				if (rc == CM_OK || rc != CM_EUNAVAIL)
					atomic_store(&c->cur, ep);
				goto out;
			}
			if (r == AT_CANCEL || r == AT_DEADLINE)
				goto out;
			if (r == AT_UNAVAIL || r == AT_SENT)
				retry_pass = sent = true;
		}
		/* Members answered but could not serve (an election, a restart):
		 * another pass while there is time. Nobody answered: say so now. */
		if (!retry_pass || call->deadline_ns == 0 || cancelled(call))
			break;
		pause_ms(call, pause);
		if (cm_now_ns() + (uint64_t)pause * 1000000u >= call->deadline_ns)
			break;
		pause = pause < 400 ? pause * 2 : 500;
		cm_buf_reset(&why);
	}
out:
	if (r == AT_DEADLINE && sent)
		rc = cm_error_set(err, CM_ETIMEDOUT, "etcd %s: deadline passed; tried %.*s",
		                  call->path, (int)why.len, (char *)why.data);
	else if (r == AT_DEADLINE)
		rc =
		    cm_error_set(err, CM_EUNAVAIL, "etcd unreachable within the deadline: %s: %.*s",
		                 call->path, (int)why.len, why.len ? (char *)why.data : "no time");
	else if (r != AT_DONE && r != AT_CANCEL)
		rc = cm_error_set(err, CM_EUNAVAIL, "etcd unreachable: %s: %.*s", call->path,
		                  (int)why.len, (char *)why.data);
	cm_buf_free(&why);
	if (call->conn == NULL)
		ec_conn_put(c, k);
	return rc;
}
