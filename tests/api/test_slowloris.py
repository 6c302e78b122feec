"""Slow clients (issue "Slowloris"): a request head has a total deadline
(http.header_timeout, from the accept or the end of the previous request)
that trickled bytes do not extend, a body has one too (http.body_timeout),
and connections slow to send their head cannot lock new clients out: past
http.max_open_connections a fresh client is served by closing one of them.
One solo node with a small limit and short deadlines, everything on
127.0.0.1, every wait bounded.
"""
import json
import os
import resource
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node, error_is, run_tests, shoal_bin, test  # noqa: E402

LIMIT = 200        # http.max_open_connections (MHD's own limit is LIMIT + 64)
TRICKLERS = 240    # more than LIMIT, fewer than LIMIT + 64 - 16
HEADER_S = 4.0     # http.header_timeout
BODY_S = 2.0       # http.body_timeout
SLACK_S = 3.0      # how late past a deadline a close may be seen on a loaded machine
TRICKLE_EVERY_S = 0.5

node = None


def setup():
    global node
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = TRICKLERS + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            raise RuntimeError("RLIMIT_NOFILE hard limit %d < %d" % (hard, want))
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the node inherits it
    node = Node(args=["-E", "http.max_open_connections=%d" % LIMIT,
                      "-E", "http.header_timeout=%gs" % HEADER_S,
                      "-E", "http.body_timeout=%gs" % BODY_S])
    st, b = node.req("PUT", "/slow")
    assert st == 200, (st, b)
    st, b = node.req("PUT", "/slow/_doc/1?refresh=true", {"a": 1})
    assert st in (200, 201), (st, b)
    node.close_conn()


def connect():
    return socket.create_connection(("127.0.0.1", node.port), timeout=10)


def read_reply(s):
    """(status, lower-case head, body) of one reply; raises EOFError when
    the server closes first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise EOFError("closed before a reply head (%r)" % buf[:80])
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(rest) < length:
        d = s.recv(65536)
        if not d:
            raise EOFError("closed inside a reply body")
        rest += d
    return int(head.split()[1]), head.decode("latin-1").lower(), rest[:length]


def fresh_get():
    """GET / on a new connection: (status, body)."""
    c = connect()
    try:
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        st, _, body = read_reply(c)
        return st, body
    finally:
        c.close()


def is_closed(s):
    """True once the server has closed s (EOF or reset), without blocking."""
    p = select.poll()
    p.register(s, select.POLLIN)
    ev = p.poll(0)
    if not ev:
        return False
    if ev[0][1] & (select.POLLHUP | select.POLLERR):
        return True
    try:
        return s.recv(1, socket.MSG_PEEK) == b""  # readable: does not block
    except OSError:
        return True


class KeepAlive(threading.Thread):
    """One keep-alive connection doing GET / and POST _count back to back
    until stopped; any disconnect or bad status is recorded."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.ok = 0
        self.error = None
        self.sock = connect()
        self.t_open = time.time()
        self.one()

    def one(self):
        if self.ok % 2:
            body = b'{"query":{"match_all":{}}}'
            self.sock.sendall(b"POST /slow/_count HTTP/1.1\r\nHost: x\r\n"
                              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                              % (len(body), body))
            st, head, data = read_reply(self.sock)
            assert st == 200 and json.loads(data)["count"] == 1, (st, data)
        else:
            self.sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            st, head, data = read_reply(self.sock)
            assert st == 200, (st, data)
        assert "connection: close" not in head, head
        self.ok += 1

    def run(self):
        try:
            while not self.stop.wait(0.05):
                self.one()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = "after %d requests in %.1fs: %r" % (self.ok, time.time() - self.t_open, e)

    def finish(self):
        self.stop.set()
        self.join(15)
        self.sock.close()


class Trickle(threading.Thread):
    """Sends one more byte of an unfinished header line on every socket
    every TRICKLE_EVERY_S until stopped."""

    def __init__(self, socks):
        super().__init__(daemon=True)
        self.socks = socks
        self.stop = threading.Event()
        self.sent = 0

    def run(self):
        while not self.stop.wait(TRICKLE_EVERY_S):
            for s in self.socks:
                try:
                    s.send(b"a")
                    self.sent += 1
                except OSError:
                    pass


@test
def timeout_settings_checked():
    for bad in ("http.header_timeout=banana", "http.header_timeout=0", "http.body_timeout=50ms",
                "http.body_timeout=-1s", "http.header_timeout=2d"):
        with tempfile.TemporaryDirectory(prefix="shoal-slow-") as d:
            p = subprocess.run([shoal_bin(), "--solo", "--data", d, "--http", "127.0.0.1:1",
                                "-E", bad], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=20)
        assert p.returncode == 2, (bad, p.returncode, p.stderr)
        assert b"bad value" in p.stderr, (bad, p.stderr)


@test
def trickled_heads_neither_lock_out_nor_outlive_their_deadline():
    keep = KeepAlive()  # opened first: inside the limit
    keep.start()
    socks = []
    trickle = Trickle(socks)
    try:
        t_first = time.time()
        for i in range(TRICKLERS):
            s = connect()
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Trickle: ")
            socks.append(s)
        t_last = time.time()
        trickle.start()

        # (a) a fresh client is served while the trickle goes on: at first
        # maybe 429 (the slow sockets are all new), soon 200
        got, refused = None, 0
        while time.time() < t_last + 3.0:
            st, body = fresh_get()
            if st == 200:
                got = time.time()
                break
            error_is((st, json.loads(body)), 429, "es_rejected_execution_exception",
                     "too many connections")
            refused += 1
            time.sleep(0.1)
        still_open = sum(not is_closed(s) for s in socks)
        assert got, "no 200 within 3 s beside %d trickling connections (%d x 429)" % (
            TRICKLERS, refused)
        print("  first 200 %.2fs after the last slow socket (%d x 429 before); %d of %d slow "
              "sockets open then" % (got - t_last, refused, still_open, TRICKLERS))
        # served by closing a slow socket, not because the deadline had passed
        assert still_open >= TRICKLERS - 40, "only %d slow sockets open at the 200" % still_open
        for i in range(10):
            st, body = fresh_get()
            assert st == 200, (i, st, body)

        # (b) the trickling sockets are closed at their head deadline
        closed_at = {}
        limit_t = t_last + HEADER_S + SLACK_S
        while len(closed_at) < len(socks) and time.time() < limit_t:
            now = time.time()
            for i, s in enumerate(socks):
                if i not in closed_at and is_closed(s):
                    closed_at[i] = now
            time.sleep(0.1)
        left = len(socks) - len(closed_at)
        assert left == 0, "%d trickling sockets still open %.1fs after the last opened" % (
            left, HEADER_S + SLACK_S)
        times = sorted(t - t_first for t in closed_at.values())
        median = times[len(times) // 2]
        print("  slow sockets closed %.2f..%.2fs after the first opened (median %.2fs, "
              "%d bytes trickled)" % (times[0], times[-1], median, trickle.sent))
        # most of them (all but those closed to make room) lived to the deadline
        assert median >= HEADER_S - 0.5, "closed early: median %.2fs" % median

        # (d) the keep-alive client went on all along, past one head deadline
        while time.time() < keep.t_open + HEADER_S + 1.0:
            time.sleep(0.1)
        keep.finish()
        assert keep.error is None, keep.error
        span = time.time() - keep.t_open
        assert keep.ok >= 20 and span > HEADER_S, (keep.ok, span)
        print("  keep-alive client: %d requests over %.1fs on one connection" % (keep.ok, span))
    finally:
        trickle.stop.set()
        keep.stop.set()
        for s in socks:
            s.close()
        trickle.join(10)
        keep.join(10)


@test
def slow_body_closed_at_its_deadline():
    head = (b"POST /slow/_count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 400\r\n\r\n{")
    slow, stalled = connect(), connect()
    try:
        t0 = time.time()  # before the server's body clock starts
        slow.sendall(head)
        stalled.sendall(head)
        closed = {}
        while len(closed) < 2 and time.time() < t0 + BODY_S + SLACK_S:
            try:
                slow.send(b" ")  # (c) a body trickled a byte every 0.25 s
            except OSError:
                pass
            for name, s in (("slow", slow), ("stalled", stalled)):
                if name not in closed and is_closed(s):
                    closed[name] = time.time() - t0
            time.sleep(0.25)
        assert set(closed) == {"slow", "stalled"}, "open %.1fs after the head: %s" % (
            BODY_S + SLACK_S, sorted({"slow", "stalled"} - set(closed)))
        print("  trickled body closed after %.2fs, stalled body after %.2fs" % (
            closed["slow"], closed["stalled"]))
        assert min(closed.values()) >= BODY_S - 0.2, closed
    finally:
        slow.close()
        stalled.close()

    # a body that is slow but complete within the deadline is served, and
    # the connection goes on
    c = connect()
    try:
        body = b'{"query":{"match_all":{}}}'
        c.sendall(b"POST /slow/_count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 7):
            time.sleep(0.15)
            c.sendall(body[i:i + 7])
        st, _, data = read_reply(c)
        assert st == 200 and json.loads(data)["count"] == 1, (st, data)
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        st, _, _ = read_reply(c)
        assert st == 200, st
    finally:
        c.close()


def teardown():
    return node.cleanup() if node else None


if __name__ == "__main__":
    setup()
    run_tests(budget_s=50, teardown=teardown)
