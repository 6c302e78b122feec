"""Measures how long fresh clients are refused (429 or no answer) while N
connections send half a request head and then stop or trickle a byte every
0.5 s; a fresh GET / on a new connection every 0.1 s. Not a test (no
pass/fail): the figures for docs and reviews.

    SHOAL_BIN=build/bin python3 tests/api/measure_slowloris.py [N] [stop|trickle] [seconds] [-E k=v ...]
"""
import os
import resource
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1200
mode = sys.argv[2] if len(sys.argv) > 2 else "trickle"
dur = float(sys.argv[3]) if len(sys.argv) > 3 else 15
extra = sys.argv[4:]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 500)), hard))

def fresh(port):
    t = time.time()
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=2)
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        buf = b""
        while len(buf) < 12:
            d = c.recv(4096)
            if not d:
                break
            buf += d
        c.close()
        return buf[9:12].decode() or "eof", time.time() - t
    except OSError as e:
        return type(e).__name__, time.time() - t

with Node(args=list(extra)) as node:
    node.close_conn()
    socks = []
    t0 = time.time()
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", node.port), timeout=5)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(s)
    t_open = time.time()
    stop = threading.Event()
    def trickle():
        while not stop.wait(0.5):
            for s in socks:
                try:
                    s.send(b"a")
                except OSError:
                    pass
    if mode == "trickle":
        threading.Thread(target=trickle, daemon=True).start()
    res = []
    while time.time() - t_open < dur:
        t = time.time() - t_open
        st, took = fresh(node.port)
        res.append((t, st, took))
        time.sleep(0.1)
    stop.set()
    bad = [r for r in res if r[1] != "200"]
    ok = [r for r in res if r[1] == "200"]
    print("%d %s connections opened in %.2fs; %d fresh requests over %.0fs: %d x 200, %d refused"
          % (n, mode, t_open - t0, len(res), dur, len(ok), len(bad)))
    if bad:
        print("  refused from %.2fs to %.2fs (%s)" % (bad[0][0], bad[-1][0],
              ",".join(sorted(set(r[1] for r in bad)))))
    if ok:
        print("  first 200 at %.2fs, slowest 200 %.3fs" % (ok[0][0], max(r[2] for r in ok)))
    for s in socks:
        s.close()
