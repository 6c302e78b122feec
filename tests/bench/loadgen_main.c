/* loadgen: closed-loop load driver for the W1 benchmark (docs/benchmarks.md).
 *
 * One thread, epoll, N keep-alive connections, each sending its next query as
 * soon as the previous reply is complete. Two protocols:
 *   http   HTTP/1.1 POST; query lines {"path":"/i/_search","body":{...},"expect":N}
 *          (the reply's hits.total.value is compared with expect)
 *   mysql  MySQL text protocol (SphinxQL); lines {"sql":"...","expect":N}
 *          (expect is compared with `total_found` from a SHOW META result in
 *          the same multi-statement, e.g. "SELECT ...; SHOW META")
 * An untimed validation pass runs every query once on one connection first
 * (--validate before, the default), or after the timed run (after: for a cold
 * first pass), or not at all (none); any mismatch makes the exit status 3.
 * The timed run lasts -d seconds (or -n requests). Latencies go into a
 * log-linear histogram (64 sub-buckets per power of two, < 1.6% error).
 * Output: one JSON line on stdout, one table line on stderr. Only libc. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_QUERIES 100000
#define MAX_LINE (1 << 20)
#define MAX_CONNS 1024
#define SUB_BITS 6
#define NBUCKETS (64 << SUB_BITS)

typedef struct {
	char *req; /* full request bytes (http) or COM_QUERY packet (mysql) */
	size_t req_len;
	long expect;
	long got; /* from the validation pass; -1 = not seen */
} query;

typedef enum { P_HTTP, P_MYSQL } proto;

typedef enum { C_CONNECTING, C_GREETING, C_AUTH, C_IDLE, C_SEND, C_RECV } cstate;

typedef struct {
	int fd;
	cstate st;
	int qi;       /* query in flight */
	size_t off;   /* bytes of the request sent */
	char *in;     /* receive buffer */
	size_t in_len, in_cap;
	uint64_t t0;  /* request start, ns */
	long total;   /* total from the reply, -1 if none */
	int http_status;
	int close_after;
} conn;

static query queries[MAX_QUERIES];
static int nq;
static proto pr = P_HTTP;
static const char *host = "127.0.0.1";
static int port;
static int epfd;
static uint64_t hist[NBUCKETS];
static long n_done, n_err;
static int err_shown;

static void
die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "loadgen: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double
cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* ---- histogram */

static int
bucket_of(uint64_t v)
{
	if (v < (2u << SUB_BITS))
		return (int)v;
	int e = 63 - __builtin_clzll(v) - SUB_BITS;
	int idx = (e + 1) * (1 << SUB_BITS) + (int)((v >> e) - (1u << SUB_BITS));
	return idx < NBUCKETS ? idx : NBUCKETS - 1;
}

static uint64_t
bucket_value(int idx)
{
	if (idx < (2 << SUB_BITS))
		return (uint64_t)idx;
	int e = idx / (1 << SUB_BITS) - 1;
	uint64_t m = (uint64_t)(idx % (1 << SUB_BITS)) + (1u << SUB_BITS);
	return (m << e) + ((1ull << e) >> 1);
}

static double
percentile_us(double p)
{
	uint64_t total = 0, acc = 0;
	for (int i = 0; i < NBUCKETS; i++)
		total += hist[i];
	if (!total)
		return 0;
	uint64_t rank = (uint64_t)(p * (double)(total - 1)) + 1;
	for (int i = 0; i < NBUCKETS; i++) {
		acc += hist[i];
		if (acc >= rank)
			return bucket_value(i) / 1e3;
	}
	return 0;
}

/* ---- a tiny JSON scanner for the query lines (our own generated files) */

static const char *
skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	return p;
}

static const char *
skip_string(const char *p)
{
	for (p++; *p && *p != '"'; p++)
		if (*p == '\\' && p[1])
			p++;
	return *p ? p + 1 : NULL;
}

/* Returns the end of the JSON value starting at p, or NULL. */
static const char *
skip_value(const char *p)
{
	p = skip_ws(p);
	if (*p == '"')
		return skip_string(p);
	if (*p == '{' || *p == '[') {
		int depth = 0;
		for (; *p; p++) {
			if (*p == '"') {
				p = skip_string(p);
				if (!p)
					return NULL;
				p--;
			} else if (*p == '{' || *p == '[') {
				depth++;
			} else if (*p == '}' || *p == ']') {
				if (--depth == 0)
					return p + 1;
			}
		}
		return NULL;
	}
	while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ')
		p++;
	return p;
}

/* Finds top-level key k in object text; returns its value's start or NULL. */
static const char *
find_key(const char *obj, const char *k, const char **end)
{
	const char *p = skip_ws(obj);
	if (*p != '{')
		return NULL;
	p++;
	size_t kl = strlen(k);
	while (1) {
		p = skip_ws(p);
		if (*p != '"')
			return NULL;
		const char *ks = p + 1, *ke = skip_string(p);
		if (!ke)
			return NULL;
		p = skip_ws(ke);
		if (*p != ':')
			return NULL;
		const char *v = skip_ws(p + 1), *ve = skip_value(v);
		if (!ve)
			return NULL;
		if ((size_t)(ke - 1 - ks) == kl && !memcmp(ks, k, kl)) {
			*end = ve;
			return v;
		}
		p = skip_ws(ve);
		if (*p != ',')
			return NULL;
		p++;
	}
}

/* Decodes a JSON string value (simple escapes; \u only below 0x80). */
static char *
json_string(const char *v, const char *ve)
{
	char *out = malloc((size_t)(ve - v) + 1), *o = out;
	if (!out)
		die("out of memory");
	for (const char *p = v + 1; p < ve - 1; p++) {
		if (*p != '\\') {
			*o++ = *p;
			continue;
		}
		p++;
		switch (*p) {
		case 'n': *o++ = '\n'; break;
		case 't': *o++ = '\t'; break;
		case 'r': *o++ = '\r'; break;
		case 'u': *o++ = (char)strtol((char[]){p[1], p[2], p[3], p[4], 0}, NULL, 16); p += 4; break;
		default: *o++ = *p;
		}
	}
	*o = 0;
	return out;
}

static void
put_packet(char *dst, size_t len, uint8_t seq)
{
	dst[0] = (char)(len & 0xff);
	dst[1] = (char)((len >> 8) & 0xff);
	dst[2] = (char)((len >> 16) & 0xff);
	dst[3] = (char)seq;
}

static void
load_queries(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		die("%s: %s", path, strerror(errno));
	char *line = malloc(MAX_LINE);
	if (!line)
		die("out of memory");
	while (fgets(line, MAX_LINE, f)) {
		if (strlen(line) >= MAX_LINE - 1)
			die("%s: line over %d bytes", path, MAX_LINE);
		if (!*skip_ws(line))
			continue;
		if (nq == MAX_QUERIES)
			die("more than %d queries", MAX_QUERIES);
		query *q = &queries[nq];
		const char *e, *v = find_key(line, "expect", &e);
		q->expect = v ? strtol(v, NULL, 10) : -1;
		q->got = -1;
		if (pr == P_HTTP) {
			const char *pe, *pv = find_key(line, "path", &pe);
			const char *be, *bv = find_key(line, "body", &be);
			if (!pv || !bv || *pv != '"')
				die("%s:%d: need \"path\" and \"body\"", path, nq + 1);
			char *p = json_string(pv, pe);
			size_t blen = (size_t)(be - bv);
			size_t cap = strlen(p) + strlen(host) + blen + 200;
			q->req = malloc(cap);
			if (!q->req)
				die("out of memory");
			int n = snprintf(q->req, cap,
			                 "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
			                 "Content-Length: %zu\r\n\r\n",
			                 p, host, port, blen);
			memcpy(q->req + n, bv, blen);
			q->req_len = (size_t)n + blen;
			free(p);
		} else {
			const char *se, *sv = find_key(line, "sql", &se);
			if (!sv || *sv != '"')
				die("%s:%d: need \"sql\"", path, nq + 1);
			char *sql = json_string(sv, se);
			size_t len = strlen(sql) + 1;
			q->req = malloc(len + 4);
			if (!q->req)
				die("out of memory");
			put_packet(q->req, len, 0);
			q->req[4] = 0x03; /* COM_QUERY */
			memcpy(q->req + 5, sql, len - 1);
			q->req_len = len + 4;
			free(sql);
		}
		nq++;
	}
	free(line);
	fclose(f);
	if (!nq)
		die("%s: no queries", path);
}

/* ---- connections */

static void
conn_open(conn *c)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die("bad host %s (IPv4 loopback address expected)", host);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (c->fd < 0)
		die("socket: %s", strerror(errno));
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	int r = connect(c->fd, (struct sockaddr *)&sa, sizeof sa);
	if (r < 0 && errno != EINPROGRESS)
		die("connect %s:%d: %s", host, port, strerror(errno));
	c->st = C_CONNECTING;
	c->in_len = 0;
	c->off = 0;
	struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
		die("epoll_ctl: %s", strerror(errno));
}

static void
conn_want(conn *c, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = c};
	epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void
conn_close(conn *c)
{
	epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
}

/* Case-insensitive search for header name at a line start within [h, e). */
static const char *
find_header(const char *h, const char *e, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = h; p + n < e; p++) {
		if ((p == h || p[-1] == '\n') && !strncasecmp(p, name, n))
			return p + n;
	}
	return NULL;
}

static long
scan_total(const char *b, size_t len)
{
	/* hits.total.value (ES 7) or hits.total as a number (ES 6 shape) */
	const char *end = b + len;
	const char *h = memmem(b, len, "\"hits\"", 6);
	if (!h)
		return -1;
	const char *t = memmem(h, (size_t)(end - h), "\"total\"", 7);
	if (!t)
		return -1;
	const char *p = t + 7;
	while (p < end && (*p == ' ' || *p == ':'))
		p++;
	if (p < end && *p == '{') {
		const char *v = memmem(p, (size_t)(end - p), "\"value\"", 7);
		if (!v)
			return -1;
		p = v + 7;
		while (p < end && (*p == ' ' || *p == ':'))
			p++;
	}
	if (p >= end || *p < '0' || *p > '9')
		return -1;
	return strtol(p, NULL, 10);
}

/* HTTP: returns 1 when a full response is buffered (and consumes it), 0 if
 * more bytes are needed, -1 on a malformed response. */
static int
http_parse(conn *c)
{
	char *b = c->in;
	char *he = memmem(b, c->in_len, "\r\n\r\n", 4);
	if (!he)
		return 0;
	size_t hlen = (size_t)(he - b) + 4;
	if (c->in_len < 12 || strncmp(b, "HTTP/1.", 7))
		return -1;
	c->http_status = atoi(b + 9);
	const char *cl = find_header(b, he, "content-length:");
	const char *te = find_header(b, he, "transfer-encoding:");
	const char *cn = find_header(b, he, "connection:");
	c->close_after = cn && !strncasecmp(cn + strspn(cn, " "), "close", 5);
	size_t consumed;
	if (te && !strncasecmp(te + strspn(te, " "), "chunked", 7)) {
		/* de-chunk in place behind the headers as chunks complete */
		size_t r = hlen;
		while (1) {
			char *nl = memmem(b + r, c->in_len - r, "\r\n", 2);
			if (!nl)
				return 0;
			size_t sz = strtoul(b + r, NULL, 16);
			size_t data = (size_t)(nl - b) + 2;
			if (sz == 0) {
				char *fin = memmem(b + data - 2, c->in_len - (data - 2), "\r\n\r\n", 4);
				if (!fin)
					return 0;
				consumed = (size_t)(fin - b) + 4;
				break;
			}
			if (data + sz + 2 > c->in_len)
				return 0;
			r = data + sz + 2;
		}
		/* second pass: gather the body for the total scan */
		size_t r2 = hlen, blen = 0;
		char *body = malloc(consumed);
		if (!body)
			die("out of memory");
		while (1) {
			char *nl = memmem(b + r2, consumed - r2, "\r\n", 2);
			size_t sz = strtoul(b + r2, NULL, 16);
			size_t data = (size_t)(nl - b) + 2;
			if (!sz)
				break;
			memcpy(body + blen, b + data, sz);
			blen += sz;
			r2 = data + sz + 2;
		}
		c->total = scan_total(body, blen);
		free(body);
	} else if (cl) {
		size_t len = strtoul(cl, NULL, 10);
		if (c->in_len < hlen + len)
			return 0;
		c->total = scan_total(b + hlen, len);
		consumed = hlen + len;
	} else {
		return -1;
	}
	if (c->http_status != 200 && err_shown < 3) {
		err_shown++;
		fprintf(stderr, "loadgen: HTTP %d: %.300s\n", c->http_status, b + hlen);
	}
	memmove(b, b + consumed, c->in_len - consumed);
	c->in_len -= consumed;
	return 1;
}

/* MySQL length-encoded integer; returns bytes used or 0 if truncated. */
static size_t
lenenc(const uint8_t *p, size_t avail, uint64_t *v)
{
	if (!avail)
		return 0;
	if (p[0] < 0xfb) {
		*v = p[0];
		return 1;
	}
	size_t n = p[0] == 0xfc ? 2 : p[0] == 0xfd ? 3 : p[0] == 0xfe ? 8 : 0;
	if (!n || avail < n + 1) {
		*v = 0;
		return p[0] == 0xfb ? 1 : 0;
	}
	*v = 0;
	for (size_t i = 0; i < n; i++)
		*v |= (uint64_t)p[1 + i] << (8 * i);
	return n + 1;
}

/* MySQL: walks the buffered packets of one (multi-)result; returns 1 when the
 * last result set is complete, 0 if more bytes are needed, -1 on ERR. */
static int
mysql_parse(conn *c)
{
	const uint8_t *b = (const uint8_t *)c->in;
	size_t pos = 0;
	c->total = -1;
	int ret = 0;
	while (1) {
		/* one result: first packet */
		if (c->in_len - pos < 4)
			return 0;
		size_t len = b[pos] | b[pos + 1] << 8 | (size_t)b[pos + 2] << 16;
		if (c->in_len - pos < 4 + len)
			return 0;
		const uint8_t *p = b + pos + 4;
		pos += 4 + len;
		uint16_t status = 0;
		if (p[0] == 0xff) {
			if (err_shown < 3) {
				err_shown++;
				fprintf(stderr, "loadgen: SQL error: %.*s\n", (int)(len > 9 ? len - 9 : 0), p + 9);
			}
			ret = -1;
			break;
		}
		if (p[0] == 0x00) { /* OK */
			uint64_t x;
			size_t o = 1;
			o += lenenc(p + o, len - o, &x);
			o += lenenc(p + o, len - o, &x);
			if (o + 2 <= len)
				status = (uint16_t)(p[o] | p[o + 1] << 8);
		} else {
			uint64_t ncols;
			lenenc(p, len, &ncols);
			int eofs = 0;
			while (eofs < 2) {
				if (c->in_len - pos < 4)
					return 0;
				size_t l2 = b[pos] | b[pos + 1] << 8 | (size_t)b[pos + 2] << 16;
				if (c->in_len - pos < 4 + l2)
					return 0;
				const uint8_t *q = b + pos + 4;
				pos += 4 + l2;
				if (q[0] == 0xfe && l2 < 9) {
					eofs++;
					if (eofs == 2 && l2 >= 5)
						status = (uint16_t)(q[3] | q[4] << 8);
					continue;
				}
				if (q[0] == 0xff) {
					ret = -1;
					eofs = 2;
					break;
				}
				if (eofs == 1 && ncols >= 2) { /* a row: look for total_found */
					uint64_t l;
					size_t o = lenenc(q, l2, &l);
					if (o && l == 11 && o + l <= l2 && !memcmp(q + o, "total_found", 11)) {
						size_t o2 = o + l;
						uint64_t l3;
						size_t u = lenenc(q + o2, l2 - o2, &l3);
						char num[32] = {0};
						memcpy(num, q + o2 + u, l3 < 31 ? l3 : 31);
						c->total = strtol(num, NULL, 10);
					}
				}
			}
			if (ret < 0)
				break;
		}
		if (!(status & 0x0008)) { /* SERVER_MORE_RESULTS_EXISTS */
			ret = 1;
			break;
		}
	}
	memmove(c->in, c->in + pos, c->in_len - pos);
	c->in_len -= pos;
	return ret;
}

static void
start_query(conn *c, int qi)
{
	c->qi = qi;
	c->off = 0;
	c->t0 = now_ns();
	c->st = C_SEND;
	conn_want(c, EPOLLOUT);
}

/* Handshake response for MySQL protocol 4.1, user root, empty password. */
static void
mysql_auth(conn *c)
{
	static char pkt[128];
	uint32_t caps = 0x00000200 /* PROTOCOL_41 */ | 0x00008000 /* SECURE_CONNECTION */ |
	                0x00010000 /* MULTI_STATEMENTS */ | 0x00020000 /* MULTI_RESULTS */ |
	                0x00000001 /* LONG_PASSWORD */;
	size_t n = 4;
	memcpy(pkt + n, &caps, 4);
	n += 4;
	uint32_t maxp = 1 << 24;
	memcpy(pkt + n, &maxp, 4);
	n += 4;
	pkt[n++] = 33; /* utf8 */
	memset(pkt + n, 0, 23);
	n += 23;
	memcpy(pkt + n, "root", 5);
	n += 5;
	pkt[n++] = 0; /* auth response length */
	put_packet(pkt, n - 4, 1);
	c->off = 0;
	c->st = C_AUTH;
	ssize_t w = send(c->fd, pkt, n, MSG_NOSIGNAL);
	if (w != (ssize_t)n)
		die("mysql handshake send failed");
	conn_want(c, EPOLLIN);
}

typedef struct {
	int validate; /* 1: every reply's total is recorded as queries[qi].got */
	int next_q;   /* next query index (round robin) */
	int stride;   /* per-connection offsets */
	long max_req;
	long issued;
	uint64_t t_end;
	int record;
} run_ctl;

static run_ctl ctl;

/* Handles a complete reply on c; issues the next query or idles. */
static void
reply_done(conn *c, int ok)
{
	uint64_t t = now_ns();
	if (ctl.record && t <= ctl.t_end) {
		hist[bucket_of(t - c->t0)]++;
		n_done++;
		if (!ok)
			n_err++;
	}
	if (ctl.validate)
		queries[c->qi].got = ok ? c->total : -2;
	int next = -1;
	if (t < ctl.t_end && ctl.issued < ctl.max_req) {
		ctl.issued++;
		next = ctl.next_q;
		ctl.next_q = (ctl.next_q + 1) % nq;
	}
	if (c->close_after) { /* the server ended keep-alive: reconnect, then go on */
		conn_close(c);
		conn_open(c);
		c->qi = next;
		return;
	}
	if (next < 0) {
		c->st = C_IDLE;
		c->qi = -1;
		conn_want(c, 0);
		return;
	}
	start_query(c, next);
}

static int
run_loop(int nc)
{
	struct epoll_event evs[256];
	int busy = nc;
	while (busy > 0) {
		int n = epoll_wait(epfd, evs, 256, 100);
		if (n < 0 && errno != EINTR)
			die("epoll_wait: %s", strerror(errno));
		for (int i = 0; i < n; i++) {
			conn *c = evs[i].data.ptr;
			if (c->st == C_CONNECTING) {
				int err = 0;
				socklen_t el = sizeof err;
				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
				if (err)
					die("connect %s:%d: %s", host, port, strerror(err));
				if (pr == P_MYSQL) {
					c->st = C_GREETING;
					conn_want(c, EPOLLIN);
					continue;
				}
				if (c->qi < 0) {
					c->st = C_IDLE;
					conn_want(c, 0);
					continue;
				}
				start_query(c, c->qi);
				continue;
			}
			if (c->st == C_SEND) {
				query *q = &queries[c->qi];
				ssize_t w = send(c->fd, q->req + c->off, q->req_len - c->off, MSG_NOSIGNAL);
				if (w < 0 && errno != EAGAIN)
					die("send: %s", strerror(errno));
				if (w > 0)
					c->off += (size_t)w;
				if (c->off == q->req_len) {
					c->st = C_RECV;
					c->in_len = 0;
					conn_want(c, EPOLLIN);
				}
				continue;
			}
			/* readable */
			if (c->in_cap - c->in_len < 65536) {
				c->in_cap = c->in_cap ? c->in_cap * 2 : 131072;
				c->in = realloc(c->in, c->in_cap);
				if (!c->in)
					die("out of memory");
			}
			ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
			if (r < 0 && errno == EAGAIN)
				continue;
			if (r <= 0)
				die("connection closed by server (%s)", r < 0 ? strerror(errno) : "EOF");
			c->in_len += (size_t)r;
			if (c->st == C_GREETING || c->st == C_AUTH) {
				if (c->in_len < 4)
					continue;
				size_t len = (uint8_t)c->in[0] | (uint8_t)c->in[1] << 8 | (size_t)(uint8_t)c->in[2] << 16;
				if (c->in_len < 4 + len)
					continue;
				if ((uint8_t)c->in[4] == 0xff)
					die("mysql handshake refused: %.*s", (int)len - 3, c->in + 7);
				c->in_len = 0;
				if (c->st == C_GREETING) {
					mysql_auth(c);
				} else if (c->qi >= 0) {
					start_query(c, c->qi);
				} else {
					c->st = C_IDLE;
					conn_want(c, 0);
				}
				continue;
			}
			int done = pr == P_HTTP ? http_parse(c) : mysql_parse(c);
			if (done == 0)
				continue;
			int ok = done > 0 && (pr == P_MYSQL || c->http_status == 200);
			reply_done(c, ok);
			if (c->qi < 0)
				busy--;
		}
		if (n == 0 && now_ns() > ctl.t_end + 30000000000ull)
			die("no reply within 30 s after the end of the run");
	}
	return 0;
}

/* Runs queries on all connections: each connection starts at its own offset. */
static void
run_phase(conn *cs, int nc, double secs, long max_req, int record, int validate)
{
	ctl.validate = validate;
	ctl.record = record;
	ctl.max_req = max_req;
	ctl.issued = 0;
	ctl.t_end = now_ns() + (uint64_t)(secs * 1e9);
	for (int i = 0; i < nc; i++) {
		if (ctl.issued >= max_req) {
			cs[i].qi = -1;
			continue;
		}
		ctl.issued++;
		int qi = (int)((long)i * 7 % nq);
		if (cs[i].st == C_IDLE)
			start_query(&cs[i], qi);
		else /* still connecting: the handshake path starts it */
			cs[i].qi = qi;
	}
	ctl.next_q = nc % nq;
	int active = 0;
	for (int i = 0; i < nc; i++)
		active += cs[i].qi >= 0;
	run_loop(active ? nc : 0);
}

/* Validation: every query once, in order, on connection 0. */
static int
validate(conn *cs)
{
	int bad = 0;
	for (int i = 0; i < nq; i++) {
		ctl.validate = 1;
		ctl.record = 0;
		ctl.max_req = 1;
		ctl.issued = 1;
		ctl.t_end = now_ns() + 60000000000ull;
		if (cs[0].st == C_IDLE)
			start_query(&cs[0], i);
		else
			cs[0].qi = i;
		run_loop(1);
		long got = queries[i].got;
		if (queries[i].expect >= 0 && got != queries[i].expect) {
			fprintf(stderr, "loadgen: query %d: expected %ld hits, got %ld\n", i + 1,
			        queries[i].expect, got);
			bad++;
		} else if (got == 0) {
			fprintf(stderr, "loadgen: query %d matches nothing\n", i + 1);
			bad++;
		}
	}
	return bad;
}

static void
usage(void)
{
	fprintf(stderr,
	        "usage: loadgen -p PORT -f QUERIES [-h 127.0.0.1] [-c CONNS] [-d SECS] [-n MAXREQ]\n"
	        "               [-w WARMUP_SECS] [--proto http|mysql] [--validate before|after|none]\n"
	        "               [--label TEXT]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	int nc = 16;
	double secs = 8, warm = 0;
	long max_req = 1L << 60;
	const char *file = NULL, *label = "", *vmode = "before";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			usage();
		if (!strcmp(a, "-p")) port = atoi(v);
		else if (!strcmp(a, "-h")) host = v;
		else if (!strcmp(a, "-c")) nc = atoi(v);
		else if (!strcmp(a, "-d")) secs = atof(v);
		else if (!strcmp(a, "-n")) max_req = atol(v);
		else if (!strcmp(a, "-w")) warm = atof(v);
		else if (!strcmp(a, "-f")) file = v;
		else if (!strcmp(a, "--label")) label = v;
		else if (!strcmp(a, "--validate")) vmode = v;
		else if (!strcmp(a, "--proto")) {
			if (!strcmp(v, "http")) pr = P_HTTP;
			else if (!strcmp(v, "mysql")) pr = P_MYSQL;
			else usage();
		} else usage();
		i++;
	}
	if (!file || port <= 0 || port > 65535 || nc < 1 || nc > MAX_CONNS || secs <= 0 || secs > 600)
		usage();
	if (strncmp(host, "127.", 4))
		die("refusing non-loopback host %s", host);
	load_queries(file);
	epfd = epoll_create1(0);
	conn *cs = calloc((size_t)nc, sizeof *cs);
	if (!cs)
		die("out of memory");
	for (int i = 0; i < nc; i++) {
		cs[i].qi = -1;
		conn_open(&cs[i]);
	}
	int bad = 0;
	if (!strcmp(vmode, "before"))
		bad = validate(cs);
	if (bad)
		fprintf(stderr, "loadgen: %d of %d queries failed validation\n", bad, nq);
	if (warm > 0)
		run_phase(cs, nc, warm, 1L << 60, 0, 0);
	memset(hist, 0, sizeof hist);
	n_done = n_err = 0;
	double c0 = cpu_s();
	uint64_t t0 = now_ns();
	run_phase(cs, nc, secs, max_req, 1, 0);
	double el = (now_ns() - t0) / 1e9;
	double cpu = cpu_s() - c0;
	/* replies after the deadline are not counted, so the window is secs */
	if (el > secs)
		el = secs;
	if (!strcmp(vmode, "after")) {
		bad = validate(cs);
		if (bad)
			fprintf(stderr, "loadgen: %d of %d queries failed validation\n", bad, nq);
	}
	printf("{\"label\":\"%s\",\"proto\":\"%s\",\"conns\":%d,\"secs\":%.3f,\"requests\":%ld,"
	       "\"errors\":%ld,\"qps\":%.1f,\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,"
	       "\"p999_us\":%.1f,\"max_us\":%.1f,\"driver_cpu_s\":%.3f,\"validation_failures\":%d,\"counts\":[",
	       label, pr == P_HTTP ? "http" : "mysql", nc, el, n_done, n_err, n_done / el,
	       percentile_us(0.50), percentile_us(0.90), percentile_us(0.99), percentile_us(0.999),
	       percentile_us(1.0), cpu, bad);
	for (int i = 0; i < nq; i++)
		printf("%s%ld", i ? "," : "", queries[i].got);
	printf("]}\n");
	fprintf(stderr,
	        "%-20s conns=%d requests=%ld errors=%ld qps=%.0f lat_us p50=%.0f p90=%.0f p99=%.0f "
	        "p99.9=%.0f driver_cpu=%.2fs\n",
	        label, nc, n_done, n_err, n_done / el, percentile_us(0.50), percentile_us(0.90),
	        percentile_us(0.99), percentile_us(0.999), cpu);
	for (int i = 0; i < nc; i++) {
		if (cs[i].fd >= 0)
			close(cs[i].fd);
		free(cs[i].in);
	}
	free(cs);
	return bad ? 3 : (n_err ? 1 : 0);
}
