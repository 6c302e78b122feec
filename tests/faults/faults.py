"""Fault scenarios between machines (issue #29): a cluster of three etcd
members and three `shoal --etcd` processes, every one in its own network
namespace (netns.py), clients in the root namespace running
compare-and-set writes, plain writes and realtime GETs on a few documents
and a bulk writer, while links are cut. After each scenario the links heal
and the run checks: every acknowledged bulk document is there and none
that was never sent; the register history of every document (CAS, writes,
GETs with preference=_primary) is linearizable (linear.py); no
default-preference GET returned a version older than a write acknowledged
before it began (stale_reads(), which also counts the allowed stale reads);
and the scenario's own checks (P5). Histories are written as JSON beside
the logs so they can be checked again.

    tests/faults/run.sh [--seed S] [--secs N] [--scenarios P1,P2,...]

Each scenario prints: writes attempted / acknowledged / lost, the
linearizability verdict, default GETs and stale ones, seconds without a
master, seconds to green."""
import argparse
import bisect
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

WALL_OFFSET = time.time() - time.monotonic()


def wall(t):
    """A monotonic time as the nodes' logs write it (UTC)."""
    return time.strftime("%H:%M:%S", time.gmtime(t + WALL_OFFSET)) + \
        (".%03d" % int(((t + WALL_OFFSET) % 1) * 1000))


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
    def __init__(self, net, nodes=3, etcd_members=3, workdir=None):
        self.net = net
        self.dir = workdir or tempfile.mkdtemp(prefix="shoal-faults-")
        # every etcd member in its own namespace: e1, e2, ...
        self.etcds = ["e%d" % (i + 1) for i in range(etcd_members)]
        eaddr = {e: net.host(e) for e in self.etcds}
        self.etcd_addr = eaddr
        initial = ",".join("%s=http://%s:2380" % (e, eaddr[e]) for e in self.etcds)
        for e in self.etcds:
            d = os.path.join(self.dir, e)
            os.makedirs(d, exist_ok=True)
            a = eaddr[e]
            net.popen(e, ["etcd", "--name=%s" % e, "--data-dir=%s/data" % d,
                          "--listen-client-urls=http://%s:2379" % a,
                          "--advertise-client-urls=http://%s:2379" % a,
                          "--listen-peer-urls=http://%s:2380" % a,
                          "--initial-advertise-peer-urls=http://%s:2380" % a,
                          "--initial-cluster=%s" % initial,
                          "--initial-cluster-state=new",
                          "--initial-cluster-token=faults-%d" % os.getpid(),
                          "--logger=zap", "--log-outputs=stderr", "--log-level=warn"],
                      stdout=open(os.path.join(d, "etcd.log"), "ab"), stderr=subprocess_stdout())
        self.names = ["n%d" % (i + 1) for i in range(nodes)]
        self.addr = {n: net.host(n) for n in self.names}
        for n in self.names:
            self.start(n)

    def etcd_leader(self):
        """The member that leads etcd now, or None."""
        for e in self.etcds:
            try:
                conn = http.client.HTTPConnection(self.etcd_addr[e], 2379, timeout=2)
                conn.request("POST", "/v3/maintenance/status", "{}")
                b = json.loads(conn.getresponse().read() or b"null")
                conn.close()
            except (OSError, ValueError, http.client.HTTPException):
                continue
            if isinstance(b, dict) and b.get("leader") and \
                    b.get("leader") == b.get("header", {}).get("member_id"):
                return e
        return None

    def start(self, n):
        d = os.path.join(self.dir, n)
        os.makedirs(d, exist_ok=True)
        a = self.addr[n]
        eps = ",".join("%s:2379" % self.etcd_addr[e] for e in self.etcds)
        self.net.popen(n, [shoal_bin(), "--etcd", eps,
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


def version(b):
    """[primary term, seq_no] of a write's answer (the order of a document's versions)."""
    if isinstance(b, dict) and "_seq_no" in b and "_primary_term" in b:
        return [b["_primary_term"], b["_seq_no"]]
    return None


def newest_by(pairs):
    """Sorted (end, version) pairs -> (ends, running newest version)."""
    ends, best, cur = [], [], (-1, -1)
    for end, v in pairs:
        cur = max(cur, v)
        ends.append(end)
        best.append(cur)
    return ends, best


def before(table, t):
    """The newest version among those whose call ended before t."""
    ends, best = table
    i = bisect.bisect_left(ends, t)
    return best[i - 1] if i else (-1, -1)


def stale_reads(hist, dreads):
    """Default-preference GETs against what others saw and what was acknowledged.
    Returns (GETs, stale, violations): stale counts GETs that returned a
    version older than one a GET that ended before it began had returned
    (allowed: a replica that has not yet applied a write still in flight);
    violations lists GETs that returned a version older than a write
    acknowledged before the GET began (never allowed). A missing document
    is older than every version; versions order by (term, seq_no)."""
    none = (-1, -1)
    total, stale, bad = 0, 0, []
    for doc, ops in hist.items():
        acked = sorted((o["end"], tuple(o["ver"])) for o in ops
                       if o["op"] in ("write", "cas") and o.get("ok") is True and o.get("ver"))
        seen = sorted((o["end"], tuple(o["ver"]) if o.get("ver") else none)
                      for o in ops + dreads.get(doc, []) if o["op"] == "read")

        acked, seen = newest_by(acked), newest_by(seen)
        for o in dreads.get(doc, []):
            total += 1
            v = tuple(o["ver"]) if o.get("ver") else none
            if v < before(acked, o["start"]):
                bad.append((doc, o))
            if v < before(seen, o["start"]):
                stale += 1
        for o in ops:  # the _primary GETs answer to the same rule
            if o["op"] == "read":
                v = tuple(o["ver"]) if o.get("ver") else none
                if v < before(acked, o["start"]):
                    bad.append((doc, o))
    return total, stale, bad


class Workload:
    """Register clients and a bulk writer, all through random live nodes.
    The register clients run compare-and-set writes, plain writes,
    preference=_primary GETs (all three checked for linearizability) and
    default-preference GETs (checked for stale reads: stale_reads())."""

    def __init__(self, cl, seed, tag, index="reg", routing=None):
        self.cl = cl
        self.routing = routing  # every register call's ?routing=, or None
        self.tag = tag  # documents of this scenario only: ids start with it
        self.index = index
        self.rnd = random.Random(seed)
        self.hist = {"%s-%d" % (tag, d): [] for d in range(DOCS)}
        self.dreads = {k: [] for k in self.hist}  # default-preference GETs
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

    def _rec(self, doc, op, into=None):
        with self.lock:
            (into if into is not None else self.hist)[doc].append(op)

    def register(self, k):
        rnd = random.Random(self.rnd.random() + k)
        base = "/%s/_doc/" % self.index
        r = "routing=%s&" % self.routing if self.routing else ""
        while not self.stop.is_set():
            n = rnd.choice(self.cl.names)
            a = self.cl.addr[n]
            doc = "%s-%d" % (self.tag, rnd.randrange(DOCS))
            kind = rnd.choice(["write", "cas", "cas", "read", "dread"])
            if kind == "write":
                v = "w%d" % self._next()
                t0 = time.monotonic()
                st, b = req(a, "PUT", base + doc + "?" + r, {"v": v}, timeout=3)
                t1 = time.monotonic()
                ok = True if st in (200, 201) else None
                self._rec(doc, {"op": "write", "value": v, "start": t0, "end": t1, "ok": ok,
                                "ver": version(b) if ok else None, "node": n})
                continue
            t0 = time.monotonic()
            st, b = req(a, "GET", base + doc + "?" + r + ("" if kind == "dread" else "preference=_primary"),
                        timeout=3)
            t1 = time.monotonic()
            if st == 200 and b.get("found"):
                seen, sq, tm = b["_source"]["v"], b["_seq_no"], b["_primary_term"]
            elif st == 404:
                seen, sq, tm = None, None, None
            else:
                continue  # a read that failed tells nothing
            op = {"op": "read", "value": seen, "start": t0, "end": t1, "ok": True,
                  "ver": [tm, sq] if seen is not None else None, "node": n}
            if kind == "dread":
                self._rec(doc, op, self.dreads)
                continue
            self._rec(doc, op)
            if kind == "read" or seen is None:
                continue
            v = "c%d" % self._next()
            t2 = time.monotonic()
            st, b = req(a, "PUT", base + doc + "?%sif_seq_no=%d&if_primary_term=%d" % (r, sq, tm),
                        {"v": v}, timeout=3)
            t3 = time.monotonic()
            ok = True if st in (200, 201) else False if st == 409 else None
            self._rec(doc, {"op": "cas", "expect": seen, "value": v, "start": t2, "end": t3,
                            "ok": ok, "ver": version(b) if ok else None, "node": n})

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


def shards(cl, index):
    """[(shard, 'p'|'r', node name)] of the started copies of index."""
    st, b = req(cl.addr[cl.names[0]], "GET", "/_cat/shards/%s?format=json" % index, timeout=5)
    if st != 200 or not isinstance(b, list):
        raise AssertionError("_cat/shards %s: %s %s" % (index, st, b))
    return [(int(x["shard"]), x["prirep"], x["node"]) for x in b
            if x.get("state") == "STARTED" and x.get("node")]


def create(cl, index, body):
    st, b = req(cl.addr[cl.names[0]], "PUT", "/" + index, body, timeout=20)
    if st != 200:
        raise AssertionError("create %s: %s %s" % (index, st, b))
    cl.green(timeout=60)


class Fault:
    """A scenario: prepare() sets up what it needs before the workload
    starts (and names the register index), cut() injects the fault and
    says what it cut, hold() keeps it for secs seconds, check() gives
    (ok, text) of the scenario's own checks after healing."""
    index = "reg"
    secs = 0.0  # how long the fault lasts: set by scenario()

    def prepare(self, cl, m):
        return self.index

    def cut(self, cl, m):
        raise NotImplementedError

    def hold(self, cl, secs):
        time.sleep(secs)

    def check(self, cl):
        return True, ""


class P1(Fault):
    def cut(self, cl, m):
        cl.net.isolate(m)
        return "(master %s cut off from every node and from etcd)" % m


class P2(Fault):
    def cut(self, cl, m):
        cl.net.isolate(m, from_=[n for n in cl.names if n != m])
        return "(master %s cut off from the nodes, not from etcd)" % m


class P3(Fault):
    """A primary cut off from its replica, not from the master or etcd.
    The register documents live in p3reg (3 shards, one replica each):
    new indices place shard s on the s-th and (s+1)-th data node, so one
    shard has both copies off the master; the documents are routed there."""
    routing = None

    def prepare(self, cl, m):
        a = cl.addr[cl.names[0]]
        st, _ = req(a, "HEAD", "/p3reg", timeout=5)
        if st != 200:
            create(cl, "p3reg", {"settings": {"number_of_shards": 3, "number_of_replicas": 1}})
        layout = shards(cl, "p3reg")
        off = [s for s in range(3) if all(node != m for x, _, node in layout if x == s)]
        if not off:
            raise AssertionError("no shard of p3reg off the master %s: %s" % (m, layout))
        self.shard = off[0]
        copies = [(pr, node) for x, pr, node in layout if x == self.shard]
        self.primary = [node for pr, node in copies if pr == "p"][0]
        self.replica = [node for pr, node in copies if pr == "r"][0]
        for k in range(200):  # a routing value that lands on that shard
            st, _ = req(a, "PUT", "/p3reg/_doc/probe%d?routing=k%d&refresh=true" % (k, k), {},
                        timeout=10)
            st, b = req(a, "POST", "/p3reg/_search?preference=_shards:%d" % self.shard,
                        {"query": {"ids": {"values": ["probe%d" % k]}}}, timeout=10)
            if st == 200 and b["hits"]["hits"]:
                self.routing = "k%d" % k
                break
        else:
            raise AssertionError("no routing value lands on shard %d of p3reg" % self.shard)
        return "p3reg"

    def cut(self, cl, m):
        cl.net.cut(self.primary, self.replica)
        return "(primary %s of p3reg[%d] cut off from its replica %s, not from master %s or " \
            "etcd)" % (self.primary, self.shard, self.replica, m)


class P4(Fault):
    def cut(self, cl, m):
        a, b = [n for n in cl.names if n != m][:2]
        cl.net.cut(a, b, oneway=True)
        return "(%s cannot reach %s, %s reaches %s)" % (a, b, b, a)


class P5(Fault):
    """A coordinating node cut off from one data node (not the master).
    Searches through it on an index without replicas (so no other copy
    can answer) must be partial with _shards.failed under
    allow_partial_search_results=true and an error under false: until the
    coordinator has noticed (its pings, every 0.5 s with a 1-s deadline)
    they carry "timeout": "1s", as a call already sent to a silent node
    waits for its deadline; once it has noticed (its local health counts
    one node less), without any timeout, each answered within 2 s, its
    shard failures saying that the node is not connected
    (node_not_connected_exception, or connect_transport_exception when
    no connection is up), not timeout_exception, as Elasticsearch says.
    Searches through a node that reaches everything stay complete. Bulk
    writes through the cut coordinator (?timeout=2s) answer every item,
    written or an error, within 4 s, and the written ones are there after
    healing."""
    ANSWER_S = 2.0  # a search once the coordinator knows, or a bulk past its timeout
    UNREACHABLE = ("node_not_connected_exception", "connect_transport_exception")

    def prepare(self, cl, m):
        st, _ = req(cl.addr[cl.names[0]], "HEAD", "/p5", timeout=5)
        if st != 200:
            create(cl, "p5", {"settings": {"number_of_shards": 3, "number_of_replicas": 0}})
            body = "".join(json.dumps({"index": {"_index": "p5", "_id": "seed%d" % i}}) + "\n" +
                           json.dumps({"k": i}) + "\n" for i in range(60))
            conn = http.client.HTTPConnection(cl.addr[cl.names[0]], 9200, timeout=20)
            conn.request("POST", "/_bulk?refresh=true", body,
                         {"Content-Type": "application/x-ndjson"})
            r = conn.getresponse()
            r.read()
            conn.close()
        layout = shards(cl, "p5")
        holders = {node for _, _, node in layout}
        others = [n for n in cl.names if n != m]
        # the coordinator and the data node: not the master where possible
        pairs = [(c, d) for c in others for d in others if c != d and d in holders] + \
                [(c, d) for c in cl.names for d in cl.names if c != d and d in holders]
        self.coord, self.data = pairs[0]
        self.control = [n for n in cl.names if n not in (self.coord, self.data)][0]
        self.cut_shards = sum(1 for _, _, node in layout if node == self.data)
        self.stats = {"partial": 0, "error": 0, "complete": 0, "bad": [], "items_ok": 0,
                      "items_failed": 0, "bulks": 0, "noticed": None, "slowest": 0.0,
                      "reasons": {}}
        self.acked = set()
        return self.index

    def cut(self, cl, m):
        cl.net.cut(self.coord, self.data)
        self.t_cut = time.monotonic()
        return "(coordinator %s cut off from data node %s, which holds %d of p5's 3 shards)" % (
            self.coord, self.data, self.cut_shards)

    def _search(self, cl, node, partial, timeout):
        body = {"query": {"match_all": {}}, "size": 1}
        if timeout:
            body["timeout"] = timeout
        t0 = time.monotonic()
        st, b = req(cl.addr[node], "POST", "/p5/_search?allow_partial_search_results=%s" %
                    ("true" if partial else "false"), body, timeout=40)
        return st, b, time.monotonic() - t0

    def _bulk(self, cl, k):
        st = self.stats
        ids = ["p5-%d-%d" % (k, i) for i in range(10)]
        body = "".join(json.dumps({"index": {"_index": "p5", "_id": i}}) + "\n" +
                       json.dumps({"k": k}) + "\n" for i in ids)
        t0 = time.monotonic()
        conn = http.client.HTTPConnection(cl.addr[self.coord], 9200, timeout=40)
        try:
            conn.request("POST", "/_bulk?timeout=2s", body,
                         {"Content-Type": "application/x-ndjson"})
            r = conn.getresponse()
            b = json.loads(r.read() or b"null")
        except (OSError, ValueError, http.client.HTTPException) as e:
            st["bad"].append("bulk: no answer after %.1f s: %r" % (time.monotonic() - t0, e))
            return
        finally:
            conn.close()
        took = time.monotonic() - t0
        st["bulks"] += 1
        if took > 2.0 + self.ANSWER_S:
            st["bad"].append("bulk answered after %.1f s" % took)
        if r.status != 200 or not isinstance(b, dict) or len(b.get("items", [])) != len(ids):
            st["bad"].append("bulk %s: %s" % (r.status, str(b)[:300]))
            return
        for it in b["items"]:
            x = it["index"]
            if x.get("status") in (200, 201):
                self.acked.add(x["_id"])
                st["items_ok"] += 1
            elif isinstance(x.get("error"), dict) and x["error"].get("type"):
                st["items_failed"] += 1
            else:
                st["bad"].append("bulk item without a status or error: %s" % x)

    def _noticed(self, cl):
        code, b = req(cl.addr[self.coord], "GET", "/_cluster/health?local=true", timeout=2)
        return code == 200 and b.get("number_of_nodes", 99) < len(cl.names)

    def hold(self, cl, secs):
        t_end = time.monotonic() + secs
        st = self.stats

        def writer():
            j = 0
            while time.monotonic() < t_end:
                self._bulk(cl, j)
                j += 1
        wt = threading.Thread(target=writer, daemon=True)
        wt.start()
        k = 0
        while time.monotonic() < t_end:
            k += 1
            partial = k % 2 == 1
            if st["noticed"] is None and self._noticed(cl):
                st["noticed"] = time.monotonic() - self.t_cut
            knows = st["noticed"] is not None
            code, b, took = self._search(cl, self.coord, partial, None if knows else "1s")
            if time.monotonic() > t_end:
                break  # may have straddled the heal
            if knows:
                st["slowest"] = max(st["slowest"], took)
            if took > (self.ANSWER_S if knows else 1.0 + self.ANSWER_S):
                st["bad"].append("a search through %s answered after %.1f s" % (self.coord, took))
            sh = b.get("_shards", {}) if isinstance(b, dict) else {}
            if partial and code == 200 and sh.get("failed", 0) == self.cut_shards and \
                    sh.get("successful", 0) == 3 - self.cut_shards and sh.get("failures") and \
                    (not knows or b.get("timed_out") is False):
                # once the coordinator holds the node unreachable its copies
                # fail at once: a shard failure, not a timed-out search
                st["partial"] += 1
                for f in sh["failures"] if knows else ():
                    t = f.get("reason", {}).get("type") if isinstance(f, dict) else None
                    st["reasons"][t] = st["reasons"].get(t, 0) + 1
                    if t not in self.UNREACHABLE:
                        st["bad"].append("through %s: a shard failure says %s, not that %s "
                                         "is not connected: %s" % (self.coord, t, self.data,
                                                                   str(f)[:300]))
            elif not partial and code is not None and code >= 400 and \
                    isinstance(b, dict) and isinstance(b.get("error"), dict):
                st["error"] += 1
            else:
                st["bad"].append("through %s partial=%s: %s %s" % (
                    self.coord, partial, code, str(b)[:300]))
            code, b, took = self._search(cl, self.control, partial, None)
            if code == 200 and b.get("_shards", {}).get("failed") == 0:
                st["complete"] += 1
            elif time.monotonic() <= t_end:
                st["bad"].append("through %s (reaches all) partial=%s: %s %s" % (
                    self.control, partial, code, str(b)[:300]))
        wt.join(10)

    def check(self, cl):
        st = self.stats
        a = cl.addr[self.control]
        req(a, "POST", "/p5/_refresh")
        code, b = req(a, "POST", "/p5/_search?size=10000&_source=false",
                      {"query": {"match_all": {}}}, timeout=30)
        present = {h["_id"] for h in b["hits"]["hits"]} if code == 200 else set()
        lost = self.acked - present
        ok = not st["bad"] and not lost and st["partial"] and st["error"] and \
            st["noticed"] is not None and st["reasons"]
        text = ("%s noticed %s unreachable after %s; searches through it: %d partial "
                "(allow_partial true), %d errors (false), slowest once noticed %.2f s, "
                "shard failures once noticed %s; "
                "%d complete through %s; %d bulks through %s: %d items written, "
                "%d failed, %d lost" % (
                    self.coord, self.data,
                    "%.1f s" % st["noticed"] if st["noticed"] is not None else "never",
                    st["partial"], st["error"], st["slowest"],
                    ", ".join("%s x%d" % kv for kv in sorted(st["reasons"].items(), key=str)) or "none",
                    st["complete"], self.control,
                    st["bulks"], self.coord, st["items_ok"], st["items_failed"], len(lost)))
        for x in st["bad"][:5]:
            text += "\n    " + x
        return ok, text


class P6(Fault):
    def cut(self, cl, m):
        for n in cl.names:
            cl.net.loss(n, 0.2)
        return "(20% packet loss on every node)"


class P7(Fault):
    """An etcd member (the leader when one can be told) cut off from the
    other members; every node still reaches it."""

    def cut(self, cl, m):
        leader = cl.etcd_leader()
        e = leader or cl.etcds[0]
        cl.net.isolate(e, from_=[x for x in cl.etcds if x != e])
        return "(etcd member %s%s cut off from the other members)" % (
            e, ", the leader," if e == leader else "")


class P8(Fault):
    """A partition that moves: one node after another (the master first)
    cut off from every node and from etcd, every ROLL seconds (5; the
    short run scales it to half its fault time, at least three moves)."""
    ROLL = 5.0

    def cut(self, cl, m):
        self.order = [m] + [n for n in cl.names if n != m]
        self.roll = min(self.ROLL, self.secs / 2)
        return "(each node in turn, master %s first, cut off from everyone for %.1f s)" % (
            m, self.roll)

    def hold(self, cl, secs):
        t_end = time.monotonic() + max(secs, 3 * self.roll)
        i = 0
        while time.monotonic() < t_end:
            cl.net.heal()
            cl.net.isolate(self.order[i % len(self.order)])
            i += 1
            time.sleep(min(self.roll, max(0.0, t_end - time.monotonic())))


SCENARIOS = {"P1": P1, "P2": P2, "P3": P3, "P4": P4, "P5": P5, "P6": P6, "P7": P7, "P8": P8}


def scenario(name, cl, fault, secs, seed=1):
    """Runs fault for secs seconds under the workload, heals, and checks."""
    m = cl.any(cl.master, 30, "a master")
    index = fault.prepare(cl, m)
    m = cl.any(cl.master, 30, "a master")
    w = Workload(cl, seed * 1000 + int(name[1:]), name, index, getattr(fault, "routing", None))
    watch = MasterWatch(cl)
    w.start()
    time.sleep(1.0)
    fault.secs = secs
    t_cut = time.monotonic()
    what = fault.cut(cl, m)
    fault.hold(cl, secs)
    cl.net.heal()
    t_heal = time.monotonic()
    time.sleep(1.0)
    w.finish()
    gap = watch.end()
    try:
        cl.green(timeout=90)
    except AssertionError:
        for n in cl.names:
            print("  %s not green after healing: %s health %s\n  shards %s" % (
                name, n, req(cl.addr[n], "GET", "/_cluster/health", timeout=5),
                req(cl.addr[n], "GET", "/_cat/shards?format=json", timeout=5)), flush=True)
        print("  %s cut at %s, healed at %s (UTC, as the nodes log)" % (
            name, wall(t_cut), wall(t_heal)), flush=True)
        raise
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
    gets, stale, older = stale_reads(w.hist, w.dreads)
    f_ok, f_text = fault.check(cl)
    path = os.path.join(cl.dir, "history-%s.json" % name)
    with open(path, "w") as f:
        # times are time.monotonic(); wall = monotonic + wall_offset (the nodes' logs)
        json.dump({"register": w.hist, "default_gets": w.dreads, "wall_offset": WALL_OFFSET,
                   "cut": t_cut, "heal": t_heal}, f)
    nops = sum(len(v) for v in w.hist.values())
    rw = [o for v in w.hist.values() for o in v if o["op"] != "read"]
    print("%s %s: writes attempted %d acknowledged %d lost %d unknown %d; %d register ops "
          "(%d of %d writes acknowledged, %d refused) %s; "
          "%d default GETs, %d stale (%.4f%%), %d older than an acknowledged write; "
          "%.1f s without a master; green %.1f s after healing" % (
              name, what, w.attempted, len(w.acked), len(lost), len(unknown), nops,
              sum(1 for o in rw if o["ok"] is True), len(rw),
              sum(1 for o in rw if o["ok"] is False),
              "linearizable" if ok else "NOT linearizable (docs %s, %s)" % (bad, path),
              gets, stale, 100.0 * stale / max(gets, 1), len(older), gap, green_s), flush=True)
    if f_text:
        print("  %s %s" % (name, f_text), flush=True)
    for doc, o in older[:5]:
        print("  %s STALE READ of an acknowledged write: %s %s at %s (%s)" % (
            name, doc, o, wall(o["start"]), path), flush=True)
    passed = not lost and not unknown and ok and not older and f_ok
    if not passed:
        print("  %s cut at %s, healed at %s (UTC, as the nodes log)" % (
            name, wall(t_cut), wall(t_heal)), flush=True)
    return passed


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
    broke = True  # an exception (a wait that timed out) keeps the logs too
    try:
        cl = Cluster(net)
        cl.any(cl.master, 60, "a master")
        cl.green(timeout=60)  # every node up, before any index
        a = cl.addr[cl.names[0]]
        for index, body in (("reg", {"settings": {"number_of_shards": 1, "number_of_replicas": 2}}),
                            ("acks", {"settings": {"number_of_shards": 3, "number_of_replicas": 1},
                                      "mappings": {"properties": {"s": {"type": "keyword"}}}})):
            t0 = time.monotonic()
            while True:
                st, b = req(a, "PUT", "/" + index, body, timeout=20)
                # setup, not a check: a master elected a moment ago may not
                # have taken the nodes in yet, and says so
                if st == 503 and "no data node may take copies" in str(b) and \
                        time.monotonic() - t0 < 30:
                    time.sleep(0.2)
                    continue
                break
            if st != 200:
                raise AssertionError("create %s: %s %s" % (index, st, b))
        cl.green(timeout=60)
        for name in args.scenarios.split(","):
            if not scenario(name, cl, SCENARIOS[name](), args.secs, args.seed):
                failed += 1
        broke = False
    finally:
        net.close()
        if cl and not failed and not broke and not args.keep:
            shutil.rmtree(cl.dir, ignore_errors=True)
        elif cl:
            print("logs and histories in %s" % cl.dir)
    print("%d scenarios failed" % failed if failed else "every scenario passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
