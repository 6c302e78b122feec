/* delay-proxy: a userspace TCP proxy that adds a fixed delay each way, for
 * the fan-out experiment (W4) and the overlap test (the kernel here has no
 * netem).
 *
 *   delay-proxy --listen HOST:PORT --to HOST:PORT [--delay-ms D] [--drop]
 *               [--buf-kb KB] [--max-conns N]
 *               [--extra-ms X [--extra-pct P]] [--stall-ms S --stall-every-ms E]
 *               [--impair-off] [--seed N]
 *
 * One thread, epoll. Every chunk read from either side is timestamped and
 * written to the other side no earlier than D ms later (fractional ms
 * allowed; a timerfd with 1 ns slack, so sub-millisecond delays hold), in
 * order. An end of stream travels the same way: it is acted on D after it
 * was read, once the data before it is delivered, and then both directions
 * close together (a link, not a half-closed pipe). A read or write error
 * closes both at once. Each direction holds at most --buf-kb of data in
 * flight; past that the proxy stops reading that side (TCP backpressure), so
 * memory stays bounded whatever the peers send.
 *
 * A slow node (the tail scenario of the fan-out experiment, test_tail.py):
 * --extra-ms X adds X ms to P% of the chunks (--extra-pct, default 100;
 * a pseudo-random draw per chunk, --seed), and --stall-ms S with
 * --stall-every-ms E holds everything in both directions for S ms out of
 * every E (a stalled process). Order is kept: a chunk is never due before
 * the one read before it. These impairments can be switched off and on
 * with SIGUSR2 (--impair-off starts with them off); the base delay stays.
 *
 * SIGUSR1 toggles "drop": every proxied connection is cut at once and new
 * ones are accepted and closed immediately, as if the link were down, until
 * the next SIGUSR1. --drop starts in that state. SIGTERM/SIGINT exit.
 * Addresses may carry a tcp:// prefix (as in a cluster file). One line on
 * stderr once listening. Only libc and Linux. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK (64 * 1024)
#define MAX_EVENTS 64
/* epoll tags for the non-connection descriptors */
#define TAG_LISTEN UINT64_MAX
#define TAG_TIMER (UINT64_MAX - 1)
#define TAG_SIGNAL (UINT64_MAX - 2)

typedef struct chunk {
	struct chunk *next;
	uint64_t due; /* ns, CLOCK_MONOTONIC */
	size_t len, off;
	int eof; /* end-of-stream marker, no data */
	char data[];
} chunk;

typedef struct {
	chunk *head, *tail;
	size_t bytes; /* data bytes queued (bounded by buf_cap) */
} dirq;

/* side 0 = the accepted client, side 1 = the upstream. Queue q[s] holds what
 * was read from side s, to be written to side 1 - s. */
typedef struct {
	int used;
	uint32_t gen; /* bumped on free so stale epoll events are ignored */
	int fd[2];
	int connecting; /* upstream connect in progress */
	int read_eof[2];
	int wblocked[2]; /* writes to side s hit EAGAIN: wait for EPOLLOUT */
	uint32_t ev[2];  /* current epoll interest */
	dirq q[2];
} pair;

static struct sockaddr_in listen_addr, to_addr;
static uint64_t delay_ns;
static uint64_t extra_ns, stall_ns, stall_every_ns;
static double extra_pct = 100;
static int impaired = 1;
static uint64_t rng = 88172645463325252ull, t_start;
static size_t buf_cap = 1024 * 1024;
static int max_pairs = 256;
static pair *pairs;
static int epfd, tfd;
static int dropping;
static uint64_t armed_at; /* 0 = timer disarmed */
static char rbuf[READ_CHUNK];

static void
die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "delay-proxy: ");
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

static void
parse_addr(const char *s, struct sockaddr_in *out)
{
	if (!strncmp(s, "tcp://", 6))
		s += 6;
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s || colon - s >= 64)
		die("bad address '%s' (want HOST:PORT)", s);
	char host[64];
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end || port <= 0 || port > 65535)
		die("bad port in '%s'", s);
	memset(out, 0, sizeof *out);
	out->sin_family = AF_INET;
	out->sin_port = htons((uint16_t)port);
	if (!strcmp(host, "localhost"))
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &out->sin_addr) != 1)
		die("bad IPv4 host '%s'", host);
}

static uint64_t
tag_of(int slot, int side)
{
	return ((uint64_t)pairs[slot].gen << 32) | ((uint64_t)slot << 1) | (uint64_t)side;
}

static void
set_interest(int slot, int side)
{
	pair *p = &pairs[slot];
	if (p->fd[side] < 0)
		return;
	uint32_t ev = 0;
	if (!p->read_eof[side] && p->q[side].bytes < buf_cap && !(side == 1 && p->connecting))
		ev |= EPOLLIN;
	if (p->wblocked[side] || (side == 1 && p->connecting))
		ev |= EPOLLOUT;
	if (ev == p->ev[side])
		return;
	struct epoll_event e = {.events = ev, .data.u64 = tag_of(slot, side)};
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, p->fd[side], &e) < 0)
		die("epoll_ctl: %s", strerror(errno));
	p->ev[side] = ev;
}

static void
close_pair(int slot)
{
	pair *p = &pairs[slot];
	for (int s = 0; s < 2; s++) {
		if (p->fd[s] >= 0)
			close(p->fd[s]); /* also leaves the epoll set */
		p->fd[s] = -1;
		chunk *c = p->q[s].head;
		while (c) {
			chunk *n = c->next;
			free(c);
			c = n;
		}
		p->q[s].head = p->q[s].tail = NULL;
		p->q[s].bytes = 0;
	}
	p->used = 0;
	p->gen++;
}

static void
nodelay_nonblock(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static uint64_t
xorshift(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* When a stall covering now ends, or 0 when none does. */
static uint64_t
stall_end(uint64_t now)
{
	if (!impaired || !stall_ns || !stall_every_ns)
		return 0;
	uint64_t in = (now - t_start) % stall_every_ns;
	return in < stall_ns ? now + (stall_ns - in) : 0;
}

static int
enqueue(pair *p, int side, const char *data, size_t len, int eof, uint64_t now)
{
	chunk *c = malloc(sizeof *c + len);
	if (!c)
		return -1;
	c->next = NULL;
	c->due = now + delay_ns;
	if (impaired && extra_ns && (double)(xorshift() % 10000) < extra_pct * 100)
		c->due += extra_ns;
	uint64_t se = stall_end(now);
	if (se > c->due)
		c->due = se;
	if (p->q[side].tail && p->q[side].tail->due > c->due)
		c->due = p->q[side].tail->due; /* in order */
	c->len = len;
	c->off = 0;
	c->eof = eof;
	if (len)
		memcpy(c->data, data, len);
	dirq *q = &p->q[side];
	if (q->tail)
		q->tail->next = c;
	else
		q->head = c;
	q->tail = c;
	q->bytes += len;
	return 0;
}

/* Writes the due part of queue q[from] to side 1 - from. Returns -1 when the
 * pair was closed. */
static int
flush_dir(int slot, int from, uint64_t now)
{
	pair *p = &pairs[slot];
	int to = 1 - from;
	dirq *q = &p->q[from];
	if (p->wblocked[to] || (to == 1 && p->connecting) || stall_end(now))
		return 0;
	size_t before = q->bytes;
	while (q->head && q->head->due <= now) {
		chunk *c = q->head;
		if (c->eof) {
			close_pair(slot);
			return -1;
		}
		ssize_t n = send(p->fd[to], c->data + c->off, c->len - c->off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				p->wblocked[to] = 1;
				set_interest(slot, to);
				break;
			}
			if (errno == EINTR)
				continue;
			close_pair(slot);
			return -1;
		}
		c->off += (size_t)n;
		if (c->off < c->len)
			continue;
		q->head = c->next;
		if (!q->head)
			q->tail = NULL;
		q->bytes -= c->len;
		free(c);
	}
	/* reading from `from` may have been paused by a full queue */
	if (before >= buf_cap && q->bytes < buf_cap)
		set_interest(slot, from);
	return 0;
}

static void
flush_all(uint64_t now)
{
	for (int i = 0; i < max_pairs; i++)
		for (int s = 0; s < 2 && pairs[i].used; s++)
			flush_dir(i, s, now);
}

/* Arms the timer for the earliest due chunk that can be written now. */
static void
arm_timer(void)
{
	uint64_t next = 0;
	for (int i = 0; i < max_pairs; i++) {
		pair *p = &pairs[i];
		if (!p->used)
			continue;
		for (int s = 0; s < 2; s++) {
			int to = 1 - s;
			if (!p->q[s].head || p->wblocked[to] || (to == 1 && p->connecting))
				continue;
			if (!next || p->q[s].head->due < next)
				next = p->q[s].head->due;
		}
	}
	uint64_t se = stall_end(now_ns());
	if (next && se > next)
		next = se;
	if (next == armed_at)
		return;
	struct itimerspec its = {0};
	if (next) {
		its.it_value.tv_sec = (time_t)(next / 1000000000u);
		its.it_value.tv_nsec = (long)(next % 1000000000u);
	}
	if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
		die("timerfd_settime: %s", strerror(errno));
	armed_at = next;
}

static void
on_readable(int slot, int side)
{
	pair *p = &pairs[slot];
	uint64_t now = now_ns();
	/* a few reads per event so one busy connection cannot starve others */
	for (int round = 0; round < 4 && p->used && !p->read_eof[side]; round++) {
		if (p->q[side].bytes >= buf_cap)
			break;
		size_t room = buf_cap - p->q[side].bytes;
		ssize_t n = recv(p->fd[side], rbuf, room < sizeof rbuf ? room : sizeof rbuf, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			close_pair(slot);
			return;
		}
		if (enqueue(p, side, rbuf, (size_t)n, n == 0, now) < 0) {
			fprintf(stderr, "delay-proxy: out of memory, closing a connection\n");
			close_pair(slot);
			return;
		}
		if (n == 0)
			p->read_eof[side] = 1;
		if ((size_t)n < sizeof rbuf)
			break;
	}
	set_interest(slot, side);
	if (delay_ns == 0 && !(impaired && extra_ns))
		flush_dir(slot, side, now);
}

static void
on_writable(int slot, int side)
{
	pair *p = &pairs[slot];
	if (side == 1 && p->connecting) {
		int err = 0;
		socklen_t len = sizeof err;
		getsockopt(p->fd[1], SOL_SOCKET, SO_ERROR, &err, &len);
		if (err) {
			close_pair(slot);
			return;
		}
		p->connecting = 0;
		set_interest(slot, 1);
	} else {
		p->wblocked[side] = 0;
		set_interest(slot, side);
	}
	flush_dir(slot, 1 - side, now_ns());
}

static void
on_accept(int lfd)
{
	for (;;) {
		int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0) {
			if (errno == EINTR)
				continue;
			return; /* EAGAIN, or EMFILE and friends: try again later */
		}
		if (dropping) {
			close(cfd);
			continue;
		}
		int slot = -1;
		for (int i = 0; i < max_pairs; i++)
			if (!pairs[i].used) {
				slot = i;
				break;
			}
		if (slot < 0) {
			fprintf(stderr, "delay-proxy: %d connections in use, refusing one\n",
			        max_pairs);
			close(cfd);
			continue;
		}
		int ufd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (ufd < 0) {
			close(cfd);
			continue;
		}
		nodelay_nonblock(cfd);
		nodelay_nonblock(ufd);
		pair *p = &pairs[slot];
		uint32_t gen = p->gen;
		memset(p, 0, sizeof *p);
		p->gen = gen;
		p->used = 1;
		p->fd[0] = cfd;
		p->fd[1] = ufd;
		int r = connect(ufd, (struct sockaddr *)&to_addr, sizeof to_addr);
		if (r < 0 && errno != EINPROGRESS) {
			close_pair(slot);
			continue;
		}
		p->connecting = r < 0;
		for (int s = 0; s < 2; s++) {
			p->ev[s] = 0;
			struct epoll_event e = {.events = 0, .data.u64 = tag_of(slot, s)};
			if (epoll_ctl(epfd, EPOLL_CTL_ADD, p->fd[s], &e) < 0)
				die("epoll_ctl add: %s", strerror(errno));
			set_interest(slot, s);
		}
	}
}

static void
usage(void)
{
	fprintf(stderr,
	        "usage: delay-proxy --listen HOST:PORT --to HOST:PORT [--delay-ms D] [--drop]\n"
	        "                   [--buf-kb KB] [--max-conns N]\n"
	        "                   [--extra-ms X [--extra-pct P]] [--stall-ms S "
	        "--stall-every-ms E]\n"
	        "                   [--impair-off] [--seed N]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	const char *listen_s = NULL, *to_s = NULL;
	double delay_ms = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--drop")) {
			dropping = 1;
			continue;
		}
		if (!strcmp(a, "--impair-off")) {
			impaired = 0;
			continue;
		}
		const char *v = i + 1 < argc ? argv[++i] : NULL;
		if (!v)
			usage();
		if (!strcmp(a, "--listen"))
			listen_s = v;
		else if (!strcmp(a, "--to"))
			to_s = v;
		else if (!strcmp(a, "--delay-ms"))
			delay_ms = atof(v);
		else if (!strcmp(a, "--buf-kb"))
			buf_cap = (size_t)atol(v) * 1024;
		else if (!strcmp(a, "--max-conns"))
			max_pairs = atoi(v);
		else if (!strcmp(a, "--extra-ms"))
			extra_ns = (uint64_t)(atof(v) * 1e6 + 0.5);
		else if (!strcmp(a, "--extra-pct"))
			extra_pct = atof(v);
		else if (!strcmp(a, "--stall-ms"))
			stall_ns = (uint64_t)(atof(v) * 1e6 + 0.5);
		else if (!strcmp(a, "--stall-every-ms"))
			stall_every_ns = (uint64_t)(atof(v) * 1e6 + 0.5);
		else if (!strcmp(a, "--seed"))
			rng = strtoull(v, NULL, 10) | 1;
		else
			usage();
	}
	if (extra_pct < 0 || extra_pct > 100 || extra_ns > 60000000000ull ||
	    (stall_ns && stall_every_ns <= stall_ns))
		usage();
	t_start = now_ns();
	if (!listen_s || !to_s || delay_ms < 0 || delay_ms > 60000 || buf_cap < 1024 ||
	    buf_cap > (size_t)1 << 30 || max_pairs < 1 || max_pairs > 65536)
		usage();
	parse_addr(listen_s, &listen_addr);
	parse_addr(to_s, &to_addr);
	delay_ns = (uint64_t)(delay_ms * 1e6 + 0.5);
	/* the default 50 us timer slack would blur sub-millisecond delays */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	pairs = calloc((size_t)max_pairs, sizeof *pairs);
	if (!pairs)
		die("out of memory");
	for (int i = 0; i < max_pairs; i++)
		pairs[i].fd[0] = pairs[i].fd[1] = -1;

	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(lfd, (struct sockaddr *)&listen_addr, sizeof listen_addr) < 0)
		die("bind %s: %s", listen_s, strerror(errno));
	if (listen(lfd, 256) < 0)
		die("listen: %s", strerror(errno));

	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	sigaddset(&mask, SIGUSR2);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (sfd < 0 || tfd < 0 || epfd < 0)
		die("signalfd/timerfd/epoll: %s", strerror(errno));
	struct epoll_event e = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
	epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &e);
	e.data.u64 = TAG_TIMER;
	epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &e);
	e.data.u64 = TAG_SIGNAL;
	epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &e);
	fprintf(stderr, "delay-proxy: %s -> %s, %.3f ms each way%s\n", listen_s, to_s, delay_ms,
	        dropping ? ", dropping" : "");

	struct epoll_event evs[MAX_EVENTS];
	for (;;) {
		int n = epoll_wait(epfd, evs, MAX_EVENTS, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait: %s", strerror(errno));
		}
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;
			uint32_t ev = evs[i].events;
			if (tag == TAG_LISTEN) {
				on_accept(lfd);
			} else if (tag == TAG_TIMER) {
				uint64_t x;
				while (read(tfd, &x, sizeof x) > 0)
					;
				armed_at = 0; /* fired: re-armed below */
			} else if (tag == TAG_SIGNAL) {
				struct signalfd_siginfo si;
				while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
					if (si.ssi_signo == SIGUSR2) {
						impaired = !impaired;
						fprintf(stderr, "delay-proxy: impairments %s\n",
						        impaired ? "on" : "off");
						continue;
					}
					if (si.ssi_signo != SIGUSR1) {
						fprintf(stderr, "delay-proxy: exiting\n");
						return 0;
					}
					dropping = !dropping;
					if (dropping)
						for (int k = 0; k < max_pairs; k++)
							if (pairs[k].used)
								close_pair(k);
					fprintf(stderr, "delay-proxy: link %s\n",
					        dropping ? "cut (dropping)" : "restored");
				}
			} else {
				int slot = (int)((tag & 0xffffffffu) >> 1), side = (int)(tag & 1);
				if (slot >= max_pairs || !pairs[slot].used ||
				    pairs[slot].gen != (uint32_t)(tag >> 32))
					continue; /* closed earlier in this batch */
				if (ev & EPOLLOUT)
					on_writable(slot, side);
				if (!pairs[slot].used || pairs[slot].gen != (uint32_t)(tag >> 32))
					continue;
				/* a reset or a dead socket: the link is gone both ways
				 * (a plain FIN arrives as EPOLLIN and travels delayed) */
				if (ev & (EPOLLHUP | EPOLLERR)) {
					close_pair(slot);
					continue;
				}
				if (ev & EPOLLIN)
					on_readable(slot, side);
			}
		}
		flush_all(now_ns());
		arm_timer();
	}
}
