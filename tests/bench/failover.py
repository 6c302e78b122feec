#!/usr/bin/env python3
"""Failover after kill -9, as a user of local-cluster.sh meets it (issue #29).

Starts a cluster with cluster-scripts/local-cluster.sh (3 nodes, 1 etcd
member, the default lease of 10 s unless SHOAL_NODE_ARGS says otherwise),
an index of 6 shards x 1 replica, and a writer that sends bulks of 60
unique ids (every shard in nearly every bulk) through a node that is not
killed. Each trial kills one node with SIGKILL and measures, from the kill:

  master  seconds until a surviving node names a live master whose state
          places no copy on the killed node any more (`_cat/shards` on the
          master: its primaries promoted elsewhere, its replicas unassigned):
          a master acting
  writes  seconds until the first bulk started after the kill is acknowledged
          in full (items that wait for a new primary count toward it)
  gap     the longest time between two fully acknowledged bulks around the kill

then restarts the node and waits for green and no relocations before the
next trial. Kinds: "master" (kill the elected master) and "data" (kill a
node that is not the master and holds primaries). At the end every
acknowledged id is read back (_mget): none may be missing.

Usage: failover.py [--trials 10] [--kinds master,data] [--base-port 9600]
                   [--etcd-port 2479] [--bin DIR]
Prints one row per trial and a table of medians and maxima. A measurement,
not a test: run it alone on the machine (see docs/benchmarks.md)."""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LC = os.path.join(ROOT, "cluster-scripts", "local-cluster.sh")
INDEX = "failover"


def req(url, method="GET", body=None, timeout=5.0, ndjson=False):
    data = None
    headers = {}
    if body is not None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        headers["Content-Type"] = "application/x-ndjson" if ndjson else "application/json"
    r = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(r, timeout=timeout) as f:
            return f.status, json.loads(f.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None
    except (OSError, ValueError):
        return None, None


class Cluster:
    def __init__(self, a):
        self.env = dict(os.environ)
        self.env["SHOAL_BASE_PORT"] = str(a.base_port)
        self.env["SHOAL_ETCD_PORT"] = str(a.etcd_port)
        self.env["SHOAL_DATA_DIR"] = a.data
        if a.bin:
            self.env["SHOAL_BIN"] = a.bin
        self.base = a.base_port
        self.names = ["node-1", "node-2", "node-3"]

    def lc(self, *args):
        p = subprocess.run(["bash", LC] + list(args), env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if p.returncode:
            sys.stdout.write(p.stdout)
            raise SystemExit("local-cluster.sh %s failed" % " ".join(args))
        return p.stdout

    def url(self, name):
        return "http://127.0.0.1:%d" % (self.base + int(name.split("-")[1]) - 1)

    def master(self, via):
        st, b = req(self.url(via) + "/_cat/master?format=json", timeout=1.0)
        if st == 200 and isinstance(b, list) and b:
            return b[0].get("node")
        return None

    def copy_nodes(self, via):
        """The nodes holding a copy of the index in the state of via."""
        st, b = req(self.url(via) + "/_cat/shards/%s?format=json" % INDEX, timeout=1.0)
        if st == 200 and isinstance(b, list):
            return {r.get("node") for r in b}
        return None

    def primaries_on(self, via):
        st, b = req(self.url(via) + "/_cat/shards/%s?format=json" % INDEX, timeout=5.0)
        out = {}
        for r in b if st == 200 and isinstance(b, list) else []:
            if r.get("prirep") == "p" and r.get("state") == "STARTED":
                out[r.get("node")] = out.get(r.get("node"), 0) + 1
        return out

    def settle(self, via):
        st, b = req(self.url(via) + "/_cluster/health?wait_for_status=green&wait_for_nodes=3"
                    "&wait_for_no_relocating_shards=true&wait_for_no_initializing_shards=true"
                    "&timeout=60s", timeout=70.0)
        if st != 200 or b.get("status") != "green":
            raise SystemExit("cluster not green and settled after 60 s: %s %s" % (st, b))


class Writer(threading.Thread):
    """Bulks of unique ids through one node; records (start, end, all_acked)."""

    def __init__(self, url):
        threading.Thread.__init__(self, daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.log = []
        self.acked = []
        self.n = 0

    def set_url(self, url):
        with self.lock:
            self.url = url

    def run(self):
        while not self.stop.is_set():
            ids = ["d%07d" % (self.n + k) for k in range(60)]
            self.n += 60
            body = "".join('{"index":{"_index":"%s","_id":"%s"}}\n{"n":%d}\n' % (INDEX, i, k)
                           for k, i in enumerate(ids))
            with self.lock:
                url = self.url
            t0 = time.time()
            st, b = req(url + "/_bulk?timeout=30s", "POST", body, timeout=40.0, ndjson=True)
            t1 = time.time()
            ok = []
            if st == 200 and isinstance(b, dict):
                for i, it in zip(ids, b.get("items", [])):
                    r = list(it.values())[0]
                    if r.get("status") in (200, 201):
                        ok.append(i)
            with self.lock:
                self.log.append((t0, t1, len(ok) == len(ids)))
                self.acked.extend(ok)
            time.sleep(0.02)

    def after(self, t_kill):
        with self.lock:
            log = list(self.log)
        resumed = next((t1 - t_kill for t0, t1, full in log if t0 >= t_kill and full), None)
        ends = [t1 for t0, t1, full in log if full]
        before = [t for t in ends if t <= t_kill]
        gaps = [b - a for a, b in zip(ends, ends[1:]) if b > t_kill and a <= t_kill + 30]
        return resumed, (max(gaps) if gaps and before else None)


def trial(cl, w, kind):
    survivors_hint = cl.names
    m = None
    for n in survivors_hint:
        m = cl.master(n)
        if m:
            break
    if not m:
        raise SystemExit("no master before the trial")
    if kind == "master":
        victim = m
    else:
        prim = cl.primaries_on(m)
        cand = [n for n in cl.names if n != m and prim.get(n, 0) > 0]
        if not cand:
            raise SystemExit("no non-master node holds a primary: %s" % prim)
        victim = random.choice(cand)
    via = next(n for n in cl.names if n != victim and n != (m if kind == "data" else None))
    w.set_url(cl.url(via))
    time.sleep(1.0)
    pid = int(open(os.path.join(cl.env["SHOAL_DATA_DIR"], victim, "shoal.pid")).read())
    t_kill = time.time()
    os.kill(pid, 9)
    survivors = [n for n in cl.names if n != victim]
    acting = None
    deadline = t_kill + 60
    while time.time() < deadline and acting is None:
        for n in survivors:
            mm = cl.master(n)
            if mm and mm != victim:
                names = cl.copy_nodes(mm)
                if names is not None and victim not in names:
                    acting = time.time() - t_kill
                    break
        if acting is None:
            time.sleep(0.02)
    while time.time() < deadline:
        resumed, gap = w.after(t_kill)
        if resumed is not None:
            break
        time.sleep(0.05)
    time.sleep(1.0)
    resumed, gap = w.after(t_kill)
    cl.lc("restart", victim)
    cl.settle(survivors[0])
    return victim, acting, resumed, gap


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--kinds", default="master,data")
    ap.add_argument("--base-port", type=int, default=9600)
    ap.add_argument("--etcd-port", type=int, default=2479)
    ap.add_argument("--bin", default=os.environ.get("SHOAL_BIN", ""))
    ap.add_argument("--data", default="/tmp/shoal-failover")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up at the end")
    a = ap.parse_args()
    random.seed(29)
    cl = Cluster(a)
    cl.lc("down")
    subprocess.run(["rm", "-rf", a.data])
    print("# failover.py: nproc %d, loadavg %s" % (os.cpu_count(), open("/proc/loadavg").read().strip()))
    cl.lc("up", "--nodes", "3", "--no-sample")
    st, b = req(cl.url("node-1") + "/" + INDEX, "PUT",
                {"settings": {"number_of_shards": 6, "number_of_replicas": 1}}, timeout=30)
    if st != 200:
        raise SystemExit("create failed: %s %s" % (st, b))
    cl.settle("node-1")
    w = Writer(cl.url("node-1"))
    w.start()
    rows = {}
    try:
        for t in range(a.trials):
            for kind in a.kinds.split(","):
                victim, acting, resumed, gap = trial(cl, w, kind)
                rows.setdefault(kind, []).append((acting, resumed, gap))
                f = lambda x: "never" if x is None else "%.2f" % x  # noqa: E731
                print("trial %2d %-6s killed %s: master acting %s s, writes resumed %s s, "
                      "longest gap %s s" % (t + 1, kind, victim, f(acting), f(resumed), f(gap)),
                      flush=True)
    finally:
        w.stop.set()
        w.join(60)
    req(cl.url("node-1") + "/%s/_refresh" % INDEX, "POST", timeout=30)
    missing = 0
    for k in range(0, len(w.acked), 1000):
        ids = w.acked[k:k + 1000]
        st, b = req(cl.url("node-1") + "/%s/_mget" % INDEX, "POST", {"ids": ids}, timeout=60)
        found = {d["_id"] for d in (b or {}).get("docs", []) if d.get("found")}
        missing += len(set(ids) - found)
    print("\nacknowledged ids %d, missing after the trials %d" % (len(w.acked), missing))
    print("\n| kill -9 of | trials | master acting s median / max | writes resumed s median / max "
          "| longest write gap s median / max |")
    print("|---|---|---|---|---|")
    for kind, rs in rows.items():
        def mm(i):
            v = [r[i] for r in rs if r[i] is not None]
            never = len(rs) - len(v)
            s = "%.2f / %.2f" % (statistics.median(v), max(v)) if v else "-"
            return s + (" (%d never)" % never if never else "")
        print("| %s | %d | %s | %s | %s |" % ("the master" if kind == "master" else
                                              "a data node with primaries", len(rs), mm(0),
                                              mm(1), mm(2)))
    print("# loadavg at the end %s" % open("/proc/loadavg").read().strip())
    if not a.keep:
        cl.lc("down")
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
