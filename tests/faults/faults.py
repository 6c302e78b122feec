"""Fault scenarios between machines (issue #29): a cluster of real etcd and
`shoal --etcd` processes, every one in its own network namespace
(netns.py), clients in the root namespace running compare-and-set writes,
plain writes and realtime GETs on a few documents and a bulk writer, while
links are cut. After each scenario the links heal and the run checks:
every acknowledged bulk document is there and none that was never sent,
and the register history of every document (CAS, writes, GETs with
preference=_primary) is linearizable (linear.py). Histories are written
as JSON beside the logs so they can be checked again.

    tests/faults/run.sh [--seed S] [--secs N] [--scenarios P1,P2,...]

Each scenario prints: writes attempted / acknowledged / lost, the
linearizability verdict, seconds without a master, seconds to green."""
import argparse
import http.client
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linear  # noqa: E402
import netns  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = 5
TTL = 3


def shoal_bin():
    """The binary: in $SHOAL_BIN (a folder, as the API tests take it) or build/bin."""
    return os.path.join(os.environ.get("SHOAL_BIN") or os.path.join(ROOT, "build", "bin"), "shoal")


def req(addr, method, path, body=None, timeout=3.0):
    """(status, parsed JSON) or (None, error text) on a transport error."""
    conn = http.client.HTTPConnection(addr, 9200, timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw or b"null")
        except ValueError:
            return r.status, raw.decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        return None, repr(e)
    finally:
        conn.close()


class Cluster:
    def __init__(self, net, nodes=3, workdir=None):
        self.net = net
        self.dir = workdir or tempfile.mkdtemp(prefix="shoal-faults-")
        self.etcd_addr = net.host("etcd")
        d = os.path.join(self.dir, "etcd")
        os.makedirs(d, exist_ok=True)
        a = self.etcd_addr
        net.popen("etcd", ["etcd", "--name=e0", "--data-dir=%s/data" % d,
                           "--listen-client-urls=http://%s:2379" % a,
                           "--advertise-client-urls=http://%s:2379" % a,
                           "--listen-peer-urls=http://%s:2380" % a,
                           "--initial-advertise-peer-urls=http://%s:2380" % a,
                           "--initial-cluster=e0=http://%s:2380" % a,
                           "--logger=zap", "--log-outputs=stderr", "--log-level=warn"],
                  stdout=open(os.path.join(d, "etcd.log"), "ab"), stderr=subprocess_stdout())
        self.names = ["n%d" % (i + 1) for i in range(nodes)]
        self.addr = {n: net.host(n) for n in self.names}
        for n in self.names:
            self.start(n)

    def start(self, n):
        d = os.path.join(self.dir, n)
        os.makedirs(d, exist_ok=True)
        a = self.addr[n]
        self.net.popen(n, [shoal_bin(), "--etcd", "%s:2379" % self.etcd_addr,
                           "--cluster-name", "faults", "--name", n,
                           "--http", "%s:9200" % a, "--transport", "%s:9300" % a,
                           "--data", os.path.join(d, "data"), "--log-level", "info",
                           "-E", "cluster.lease_ttl=%ds" % TTL],
                       stdout=open(os.path.join(d, "node.log"), "ab"), stderr=subprocess_stdout())

    def any(self, f, timeout=30, what="condition"):
        t0 = time.time()
        while time.time() - t0 < timeout:
            for n in self.names:
                r = f(n)
                if r:
                    return r
            time.sleep(0.2)
        raise AssertionError("%s not reached within %ss" % (what, timeout))

    def master(self, n):
        st, b = req(self.addr[n], "GET", "/_cat/master?format=json", timeout=1)
        return b[0]["node"] if st == 200 and isinstance(b, list) and b and b[0].get("node") else None

    def green(self, timeout=60):
        def ok(n):
            st, b = req(self.addr[n], "GET", "/_cluster/health?wait_for_status=green&timeout=2s",
                        timeout=5)
            return st == 200 and b.get("status") == "green" and \
                b.get("number_of_nodes") == len(self.names)
        return self.any(ok, timeout, "green with every node")


def subprocess_stdout():
    import subprocess
    return subprocess.STDOUT


class Workload:
    """Register clients and a bulk writer, all through random live nodes."""

    def __init__(self, cl, seed, tag):
        self.cl = cl
        self.tag = tag  # documents of this scenario only: ids start with it
        self.rnd = random.Random(seed)
        self.hist = {"%s-%d" % (tag, d): [] for d in range(DOCS)}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.seq = 0
        self.sent, self.acked = set(), set()
        self.attempted = 0
        self.threads = []

    def _next(self):
        with self.lock:
            self.seq += 1
            return self.seq

    def _rec(self, doc, op):
        with self.lock:
            self.hist[doc].append(op)

    def register(self, k):
        rnd = random.Random(self.rnd.random() + k)
        while not self.stop.is_set():
            n = rnd.choice(self.cl.names)
            a = self.cl.addr[n]
            doc = "%s-%d" % (self.tag, rnd.randrange(DOCS))
            kind = rnd.choice(["write", "cas", "cas", "read"])
            if kind == "write":
                v = "w%d" % self._next()
                t0 = time.monotonic()
                st, b = req(a, "PUT", "/reg/_doc/%s" % doc, {"v": v}, timeout=3)
                t1 = time.monotonic()
                ok = True if st in (200, 201) else None
                self._rec(doc, {"op": "write", "value": v, "start": t0, "end": t1, "ok": ok})
                continue
            t0 = time.monotonic()
            st, b = req(a, "GET", "/reg/_doc/%s?preference=_primary" % doc, timeout=3)
            t1 = time.monotonic()
            if st == 200 and b.get("found"):
                seen, sq, tm = b["_source"]["v"], b["_seq_no"], b["_primary_term"]
            elif st == 404:
                seen, sq, tm = None, None, None
            else:
                continue  # a read that failed tells nothing
            self._rec(doc, {"op": "read", "value": seen, "start": t0, "end": t1, "ok": True})
            if kind == "read" or seen is None:
                continue
            v = "c%d" % self._next()
            t2 = time.monotonic()
            st, b = req(a, "PUT", "/reg/_doc/%s?if_seq_no=%d&if_primary_term=%d" % (doc, sq, tm),
                        {"v": v}, timeout=3)
            t3 = time.monotonic()
            ok = True if st in (200, 201) else False if st == 409 else None
            self._rec(doc, {"op": "cas", "expect": seen, "value": v, "start": t2, "end": t3,
                            "ok": ok})

    def bulk(self):
        rnd = random.Random(self.rnd.random())
        while not self.stop.is_set():
            n = rnd.choice(self.cl.names)
            ids = ["%s-b%d" % (self.tag, self._next()) for _ in range(20)]
            body = "".join(json.dumps({"index": {"_index": "acks", "_id": i}}) + "\n" +
                           json.dumps({"i": i, "s": self.tag}) + "\n" for i in ids)
            conn = http.client.HTTPConnection(self.cl.addr[n], 9200, timeout=5)
            with self.lock:
                self.sent.update(ids)
                self.attempted += len(ids)
            try:
                conn.request("POST", "/_bulk", body, {"Content-Type": "application/x-ndjson"})
                r = conn.getresponse()
                b = json.loads(r.read() or b"null")
                if r.status == 200:
                    with self.lock:
                        for it in b["items"]:
                            x = it["index"]
                            if x.get("status") in (200, 201):
                                self.acked.add(x["_id"])
            except (OSError, ValueError, http.client.HTTPException):
                pass
            finally:
                conn.close()
            time.sleep(0.02)

    def start(self):
        self.threads = [threading.Thread(target=self.register, args=(k,), daemon=True)
                        for k in range(4)]
        self.threads.append(threading.Thread(target=self.bulk, daemon=True))
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(15)


class MasterWatch:
    """Samples the master every 0.1 s from the live nodes: the longest run
    of samples in which no node named one."""

    def __init__(self, cl):
        self.cl, self.stop = cl, threading.Event()
        self.gap = self.cur = 0.0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        last = time.monotonic()
        while not self.stop.is_set():
            ms = {self.cl.master(n) for n in self.cl.names} - {None}
            now = time.monotonic()
            self.cur = 0.0 if ms else self.cur + (now - last)
            self.gap = max(self.gap, self.cur)
            last = now
            time.sleep(0.1)

    def end(self):
        self.stop.set()
        self.t.join(5)
        return self.gap


def scenario(name, cl, fault, secs):
    """Runs fault (a function of the cluster, returning what it cut) for
    secs seconds under the workload, heals, and checks."""
    m = cl.any(cl.master, 30, "a master")
    w = Workload(cl, hash(name) & 0xffff, name)
    watch = MasterWatch(cl)
    w.start()
    time.sleep(1.0)
    what = fault(cl, m)
    time.sleep(secs)
    cl.net.heal()
    t_heal = time.monotonic()
    time.sleep(1.0)
    w.finish()
    gap = watch.end()
    cl.green(timeout=90)
    green_s = time.monotonic() - t_heal
    # every acknowledged bulk document is there, none that was never sent
    a = cl.addr[cl.names[0]]
    req(a, "POST", "/acks/_refresh")
    st, b = req(a, "POST", "/acks/_search?size=10000&_source=false",
                {"query": {"term": {"s": name}}}, timeout=30)
    present = {h["_id"] for h in b["hits"]["hits"]} if st == 200 else set()
    lost = w.acked - present
    unknown = present - w.sent
    ok, bad = linear.check(w.hist)
    path = os.path.join(cl.dir, "history-%s.json" % name)
    with open(path, "w") as f:
        json.dump(w.hist, f)
    nops = sum(len(v) for v in w.hist.values())
    print("%s %s: writes attempted %d acknowledged %d lost %d unknown %d; %d register ops %s; "
          "%.1f s without a master; green %.1f s after healing" % (
              name, what, w.attempted, len(w.acked), len(lost), len(unknown), nops,
              "linearizable" if ok else "NOT linearizable (docs %s, %s)" % (bad, path),
              gap, green_s), flush=True)
    return not lost and not unknown and ok


def p1(cl, m):
    cl.net.isolate(m)
    return "(master %s cut off from every node and from etcd)" % m


def p2(cl, m):
    cl.net.isolate(m, from_=[n for n in cl.names if n != m])
    return "(master %s cut off from the nodes, not from etcd)" % m


def p4(cl, m):
    a, b = [n for n in cl.names if n != m][:2]
    cl.net.cut(a, b, oneway=True)
    return "(%s cannot reach %s, %s reaches %s)" % (a, b, b, a)


def p6(cl, m):
    for n in cl.names:
        cl.net.loss(n, 0.2)
    return "(20% packet loss on every node)"


SCENARIOS = {"P1": p1, "P2": p2, "P4": p4, "P6": p6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--secs", type=float, default=6.0)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--keep", action="store_true", help="keep the logs and histories")
    args = ap.parse_args()
    why = netns.usable()
    if why:
        print("SKIP faults: %s" % why)
        return 0
    random.seed(args.seed)
    net = netns.Net()
    cl = None
    failed = 0
    try:
        cl = Cluster(net)
        cl.any(cl.master, 60, "a master")
        a = cl.addr[cl.names[0]]
        for index, body in (("reg", {"settings": {"number_of_shards": 1, "number_of_replicas": 2}}),
                            ("acks", {"settings": {"number_of_shards": 3, "number_of_replicas": 1},
                                      "mappings": {"properties": {"s": {"type": "keyword"}}}})):
            st, b = req(a, "PUT", "/" + index, body, timeout=20)
            if st != 200:
                raise AssertionError("create %s: %s %s" % (index, st, b))
        cl.green(timeout=60)
        for name in args.scenarios.split(","):
            if not scenario(name, cl, SCENARIOS[name], args.secs):
                failed += 1
    finally:
        net.close()
        if cl and not failed and not args.keep:
            shutil.rmtree(cl.dir, ignore_errors=True)
        elif cl:
            print("logs and histories in %s" % cl.dir)
    print("%d scenarios failed" % failed if failed else "every scenario passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
