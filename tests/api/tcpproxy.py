"""A userspace TCP proxy for fault tests, in-process (threads), loopback
only. Standard library only.

One Proxy object holds any number of links. A link listens on a free
loopback port and forwards every connection to one target address. Links
are named by the ordered pair of cluster nodes they carry, (src, dst): node
src's cluster file gives node dst's "connect" as the listener of link
(src, dst), so everything src sends to dst (and dst's replies, on the same
connections) crosses that link and nothing else does.

Each link is in one of three modes:
  "forward"  bytes flow both ways (the default);
  "drop"     existing connections are closed at once and new ones are
             accepted and closed immediately (a peer sees resets: a
             crashed or firewalled-with-reject host);
  "stall"    connections stay open but no byte moves either way; new
             connections are accepted and held (a partition where TCP
             notices nothing). Healing a stalled link delivers everything
             that was held back, in order, as TCP would after a partition.

    p = Proxy()
    port = p.add(("a", "b"), ("127.0.0.1", 9301))
    p.cut("b")            # every link with "b" at either end: drop
    p.cut("b", "stall")
    p.heal("b")           # forward again
    p.close()
"""
import select
import socket
import threading
import time

BUF = 65536


class _Conn:
    """One proxied connection: a client socket and an upstream socket,
    pumped by one thread."""

    def __init__(self, link, client):
        self.link = link
        self.client = client
        self.upstream = None
        self.closed = False
        self.bytes = 0

    def close(self):
        if self.closed:
            return
        self.closed = True
        for s in (self.client, self.upstream):
            if s is None:
                continue
            try:
                # RST rather than FIN: the peer learns at once that the
                # connection is gone, as after a crash
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def send(self, dst, data):
        """Sends all of data, waiting for room in 0.1 s steps so a drop
        (which closes the sockets) ends the wait. False when the
        connection is gone."""
        while data:
            if self.closed or self.link.mode == "drop":
                return False
            try:
                _, w, _ = select.select([], [dst], [], 0.1)
                if not w:
                    continue
                n = dst.send(data)
            except BlockingIOError:
                continue
            except (OSError, ValueError):
                return False
            data = data[n:]
        return True

    def pump(self, src, dst):
        """Copies src to dst until either end closes or the link drops.
        While the link is stalled nothing is read, so the kernel buffers
        fill and the sender blocks, as behind a partition."""
        link = self.link
        try:
            while not self.closed and not link.proxy.stopped:
                mode = link.mode
                if mode == "drop":
                    return
                if mode == "stall":
                    time.sleep(0.05)
                    continue
                try:
                    r, _, _ = select.select([src], [], [], 0.1)
                    if not r:
                        continue
                    data = src.recv(BUF)
                except BlockingIOError:
                    continue
                except (OSError, ValueError):
                    return
                if not data:
                    return
                # a stall that starts now holds this chunk back too
                while link.mode == "stall" and not self.closed:
                    time.sleep(0.05)
                if link.mode == "drop" or self.closed:
                    return
                if not self.send(dst, data):
                    return
                self.bytes += len(data)
        finally:
            self.close()

    def run(self):
        link = self.link
        try:
            if link.mode == "drop":
                return
            # the upstream connection is made even while stalled (the
            # bytes are held back, not the TCP connection)
            try:
                self.upstream = socket.create_connection(link.target, timeout=5)
            except OSError:
                return
            for s in (self.client, self.upstream):
                # non-blocking: every wait is a select with a short
                # timeout, so a drop ends it
                s.setblocking(False)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = threading.Thread(target=self.pump, args=(self.upstream, self.client),
                                 daemon=True, name="proxy-up-%s-%s" % link.name)
            t.start()
            self.pump(self.client, self.upstream)
            t.join()
        finally:
            self.close()
            link.forget(self)


class _Link:
    def __init__(self, proxy, name, target):
        self.proxy = proxy
        self.name = name
        self.target = target
        self.mode = "forward"
        self.lock = threading.Lock()
        self.conns = set()
        self.accepted = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.accept_loop, name="proxy-%s-%s" % name,
                                       daemon=True)
        self.thread.start()

    def accept_loop(self):
        while not self.proxy.stopped:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            if self.mode == "drop":
                conn = _Conn(self, c)
                conn.close()
                continue
            conn = _Conn(self, c)
            with self.lock:
                self.conns.add(conn)
            threading.Thread(target=conn.run, daemon=True,
                             name="proxy-conn-%s-%s" % self.name).start()

    def forget(self, conn):
        with self.lock:
            self.conns.discard(conn)

    def set_mode(self, mode):
        self.mode = mode
        if mode == "drop":
            with self.lock:
                conns = list(self.conns)
            for c in conns:
                c.close()


class Proxy:
    """Links keyed by (src, dst); see the module docstring."""

    def __init__(self):
        self.links = {}
        self.stopped = False

    def add(self, name, target):
        """name: (src, dst); target: (host, port). Returns the listen port."""
        link = _Link(self, name, target)
        self.links[name] = link
        return link.port

    def set(self, name, mode):
        if mode not in ("forward", "drop", "stall"):
            raise ValueError(mode)
        self.links[name].set_mode(mode)

    def cut(self, node, mode="drop"):
        """Every link with node at either end stops carrying bytes."""
        for name, link in self.links.items():
            if node in name:
                link.set_mode(mode)

    def heal(self, node=None):
        """Every link with node at either end (every link when None) forwards again."""
        for name, link in self.links.items():
            if node is None or node in name:
                link.set_mode("forward")

    def stats(self):
        return {name: (l.accepted, len(l.conns), l.mode) for name, l in self.links.items()}

    def close(self):
        self.stopped = True
        for link in self.links.values():
            link.set_mode("drop")
            try:
                link.sock.close()
            except OSError:
                pass
        for link in self.links.values():
            link.thread.join(2)


def self_check():
    """Echo server behind a link: forward (small and 1 MB), stall holds
    bytes back and heal delivers them, drop resets existing and new
    connections, heal again. Raises AssertionError on any difference."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def echo():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return

            def one(c=c):
                while True:
                    try:
                        d = c.recv(BUF)
                    except OSError:
                        return
                    if not d:
                        c.close()
                        return
                    c.sendall(d)
            threading.Thread(target=one, daemon=True).start()

    threading.Thread(target=echo, daemon=True).start()
    p = Proxy()
    port = p.add(("a", "b"), srv.getsockname())
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.sendall(b"hello")
    assert s.recv(100) == b"hello"
    big = bytes(range(256)) * 4096
    s.sendall(big)
    got = b""
    while len(got) < len(big):
        got += s.recv(BUF)
    assert got == big
    p.cut("b", "stall")
    time.sleep(0.2)
    s.sendall(b"held")
    s.settimeout(0.5)
    try:
        s.recv(100)
        raise AssertionError("stalled link passed bytes")
    except socket.timeout:
        pass
    p.heal("b")
    s.settimeout(2)
    assert s.recv(100) == b"held"
    p.cut("a")
    try:
        d = s.recv(100)
        assert d == b"", d
    except ConnectionResetError:
        pass
    try:
        s2 = socket.create_connection(("127.0.0.1", port), timeout=2)
        d = s2.recv(100)
        assert d == b"", d
    except (ConnectionResetError, BrokenPipeError):
        pass
    p.heal()
    s3 = socket.create_connection(("127.0.0.1", port), timeout=2)
    s3.sendall(b"again")
    assert s3.recv(100) == b"again"
    p.close()
    srv.close()


if __name__ == "__main__":
    self_check()
    print("tcpproxy self-check ok")
