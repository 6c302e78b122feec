"""A live Shoal cluster on etcd for the fault tests: real etcd members
(Debian etcd-server) and real `shoal --etcd` nodes on 127.0.0.1 (each in
its own network namespace under SHOAL_NETNS=1: shoal.host_addr), writers
and searchers that record what was acknowledged, and the per-copy check.
Standard library only; every wait is bounded."""
import base64
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from shoal import Node, free_port, host_addr, shoal_bin, spawn

ETCD = "/usr/bin/etcd"


def log(msg):
    print("  " + msg, flush=True)


class Etcd:
    """1 or 3 etcd members, each with its own client and peer port."""

    def __init__(self, members=1):
        self.dir = tempfile.mkdtemp(prefix="shoal-etcd-")
        self.n = members
        self.ports = [(free_port(), free_port()) for _ in range(members)]
        self.procs = [None] * members
        for k in range(members):
            self.start(k)
        for k in range(members):
            self.wait(k)

    @staticmethod
    def host(k):
        """Member k's host name (its namespace under SHOAL_NETNS=1)."""
        return "etcd-%d" % k

    def addr(self, k):
        return host_addr(self.host(k))

    def endpoints(self):
        return ",".join("%s:%d" % (self.addr(k), c) for k, (c, _) in enumerate(self.ports))

    def start(self, k):
        c, p = self.ports[k]
        a = self.addr(k)
        cluster = ",".join("e%d=http://%s:%d" % (i, self.addr(i), pp)
                           for i, (_, pp) in enumerate(self.ports))
        d = os.path.join(self.dir, "e%d" % k)
        os.makedirs(d, exist_ok=True)
        out = open(os.path.join(d, "etcd.log"), "ab")
        self.procs[k] = spawn(
            self.host(k),
            [ETCD, "--name=e%d" % k, "--data-dir=%s/data" % d,
             "--listen-client-urls=http://%s:%d" % (a, c),
             "--advertise-client-urls=http://%s:%d" % (a, c),
             "--listen-peer-urls=http://%s:%d" % (a, p),
             "--initial-advertise-peer-urls=http://%s:%d" % (a, p),
             "--initial-cluster=%s" % cluster, "--initial-cluster-token=shoal-live-%d" % os.getpid(),
             "--logger=zap", "--log-outputs=stderr", "--log-level=warn"],
            stdout=out, stderr=subprocess.STDOUT)

    def call(self, k, path, body, timeout=5):
        conn = http.client.HTTPConnection(self.addr(k), self.ports[k][0], timeout=timeout)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            conn.close()

    def wait(self, k, timeout=30):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.procs[k].poll() is not None:
                raise RuntimeError("etcd member %d exited during start" % k)
            try:
                st, _ = self.call(k, "/v3/kv/range", {"key": "AA=="}, timeout=1)
                if st == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("etcd member %d did not answer within %ss" % (k, timeout))

    def kill(self, k):
        if self.procs[k] and self.procs[k].poll() is None:
            self.procs[k].kill()
            self.procs[k].wait(10)

    def alive(self):
        return [k for k in range(self.n) if self.procs[k] and self.procs[k].poll() is None]

    def revision(self):
        for k in self.alive():
            try:
                st, b = self.call(k, "/v3/kv/range", {"key": "AA=="})
                if st == 200:
                    return int(b["header"]["revision"])
            except OSError:
                continue
        raise RuntimeError("no etcd member answered")

    def compact(self):
        rev = self.revision()
        for k in self.alive():
            st, b = self.call(k, "/v3/kv/compaction", {"revision": str(rev), "physical": True})
            if st == 200:
                return rev
        raise RuntimeError("compaction failed")

    def close(self):
        for k in range(self.n):
            self.kill(k)
        shutil.rmtree(self.dir, ignore_errors=True)


class LiveNode(Node):
    def __init__(self, etcd, name, args=()):
        self.etcd = etcd
        self.name = name
        self.host = name
        self.tport = free_port()
        Node.__init__(self, args=args, start=False)

    def command(self):
        return ([shoal_bin(), "--etcd", self.etcd.endpoints(), "--cluster-name", "live",
                 "--name", self.name, "--http", "%s:%d" % (self.addr, self.port),
                 "--transport", "%s:%d" % (self.addr, self.tport), "--data", self.data,
                 "--log-level", "info"] + self.args)

    def start(self):
        # not live until it answers: a searcher once picked a node just
        # spawned, before it listened, and counted the refused connection
        self.ready = False
        Node.start(self)
        self.ready = True
        return self

    def running(self):
        return (self.proc is not None and self.proc.poll() is None and
                getattr(self, "ready", False))

    def sigstop(self):
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True

    def sigcont(self):
        self.proc.send_signal(signal.SIGCONT)
        self.stopped = False


def one_req(port, method, path, body=None, timeout=10, addr="127.0.0.1"):
    conn = http.client.HTTPConnection(addr, port, timeout=timeout)
    try:
        data, hdr = None, {}
        if isinstance(body, (bytes, str)):
            data = body.encode() if isinstance(body, str) else body
            hdr["Content-Type"] = "application/x-ndjson"
        elif body is not None:
            data = json.dumps(body)
            hdr["Content-Type"] = "application/json"
        conn.request(method, path, data, hdr)
        r = conn.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw.decode("utf-8", "replace")
    finally:
        conn.close()


class Live:
    """etcd plus nodes node-1..node-N, every node master-eligible and data."""

    def __init__(self, nodes=3, etcd_members=1, args=()):
        self.etcd = Etcd(etcd_members)
        self.args = list(args)
        self.nodes = {}
        self.seq = 0
        try:
            for _ in range(nodes):
                self.add(wait=False)
            for n in self.nodes.values():
                n.start()
        except Exception:
            self.close()
            raise

    def add(self, wait=True):
        self.seq += 1
        name = "node-%d" % self.seq
        n = LiveNode(self.etcd, name, self.args)
        n.stopped = False
        self.nodes[name] = n
        if wait:
            n.start()
        return name

    def live(self, exclude=()):
        # a copy: add() may insert a node while writer and searcher threads ask
        return [k for k, n in list(self.nodes.items())
                if n.running() and not n.stopped and not getattr(n, "leaving", False)
                and k not in exclude]

    def full_log(self, name):
        with open(os.path.join(self.nodes[name].data, "test-node.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def req(self, name, method, path, body=None, timeout=10):
        n = self.nodes[name]
        return one_req(n.port, method, path, body, timeout, n.addr)

    def any_req(self, method, path, body=None, timeout=10):
        for name in self.live():
            try:
                return self.req(name, method, path, body, timeout)
            except OSError:
                continue
        raise RuntimeError("no live node answered")

    def master(self, via):
        try:
            st, rows = self.req(via, "GET", "/_cat/master?format=json", timeout=3)
        except OSError:
            return None
        if st == 200 and isinstance(rows, list) and rows:
            return rows[0].get("node")
        return None

    def wait_master(self, not_name=None, timeout=30):
        """Until every live node names the same master (not not_name);
        returns (name, seconds)."""
        t0 = time.time()
        while time.time() - t0 < timeout:
            ms = {self.master(n) for n in self.live()}
            if len(ms) == 1:
                m = ms.pop()
                if m and m != not_name and m in self.live():
                    return m, time.time() - t0
            time.sleep(0.1)
        raise AssertionError("no agreed master within %ss: %s" %
                             (timeout, {n: self.master(n) for n in self.live()}))

    def health(self, via):
        st, b = self.req(via, "GET", "/_cluster/health", timeout=5)
        return b if st == 200 else {}

    def wait_green(self, timeout=60, settled=True):
        """Green on every live node with every live node counted and, with
        settled, nothing relocating or initializing; returns seconds."""
        t0 = time.time()
        want = len(self.live())
        last = None
        while time.time() - t0 < timeout:
            ok = True
            for n in self.live():
                try:
                    h = self.health(n)
                except OSError:
                    ok = False
                    break
                last = (n, h.get("status"), h.get("number_of_nodes"),
                        h.get("relocating_shards"), h.get("initializing_shards"))
                if h.get("status") != "green" or h.get("number_of_nodes") != want or \
                        (settled and (h.get("relocating_shards") or h.get("initializing_shards"))):
                    ok = False
                    break
            if ok:
                return time.time() - t0
            time.sleep(0.1)
        raise AssertionError("not green with %d nodes within %ss: %s\n%s" % (
            want, timeout, last, self.unsettled()))

    def unsettled(self):
        """The copies not STARTED, and every node's log lines on their
        shards (the last 60), for a failure message."""
        names = self.live()
        try:
            st, rows = self.req(names[0], "GET", "/_cat/shards?format=json", timeout=10)
        except (OSError, IndexError):
            return "(no node to ask)"
        bad = [r for r in rows if r.get("state") != "STARTED"] if st == 200 else []
        tags = {"[%s][%s]" % (r["index"], r["shard"]) for r in bad}
        lines = []
        for name in list(self.nodes):
            try:
                text = self.full_log(name)
            except OSError:
                continue
            lines += ["%s %s" % (name, l) for l in text.splitlines()
                      if any(t in l for t in tags)]
        lines.sort(key=lambda l: l.split(" ", 1)[1])
        return "unsettled copies: %s\n%s" % (
            [(r["index"], r["shard"], r["prirep"], r["state"], r.get("node")) for r in bad],
            "\n".join(lines[-60:]))

    def shards(self, via, index):
        st, rows = self.req(via, "GET", "/_cat/shards/%s?format=json" % index, timeout=10)
        assert st == 200, (st, rows)
        return rows

    def per_node(self, via, index=None):
        st, rows = self.req(via, "GET", "/_cat/shards%s?format=json" %
                            ("/" + index if index else ""), timeout=10)
        counts = {n: 0 for n in self.live()}
        for r in rows:
            if r.get("node"):
                counts[r["node"]] = counts.get(r["node"], 0) + 1
        return counts

    def log_tail(self, name, n=3000):
        return self.nodes[name].log_tail(n)

    def close(self):
        """Stops every node and etcd; etcd goes also when a node's stop or
        cleanup fails (a node that never started has no log: its error
        must not leave etcd members running after the test)."""
        rcs = {}
        keep = os.environ.get("SHOAL_KEEP_LOGS")
        try:
            for name, n in self.nodes.items():
                if getattr(n, "stopped", False):
                    try:
                        n.sigcont()
                    except Exception:
                        pass
                if keep:
                    os.makedirs(keep, exist_ok=True)
                    n.stop_failed = False
                rc = None
                try:
                    rc = n.stop()
                except RuntimeError:
                    rc = -1
                if keep:
                    shutil.copy(os.path.join(n.data, "test-node.log"),
                                os.path.join(keep, name + ".log"))
                try:
                    rcs[name] = n.cleanup() if rc in (0, None) else (n.cleanup(), rc)[1]
                except Exception as e:  # noqa: BLE001
                    n.kill()
                    rcs[name] = "cleanup failed: %r" % (e,)
        finally:
            self.etcd.close()
        return rcs


class Writer(threading.Thread):
    """Bulk-indexes new documents (ids w<wid>-<i>, source {k: id, v: i})
    through the live nodes in turn; records acknowledged ids."""

    def __init__(self, live, index, wid, batch=20, pause=0.01):
        threading.Thread.__init__(self, daemon=True)
        self.live, self.index, self.wid, self.batch, self.pause = live, index, wid, batch, pause
        self.acked, self.attempted, self.failed = set(), 0, 0
        self.stop = threading.Event()
        self.hold = threading.Event()  # set: no new batch starts
        self.idle = threading.Event()  # set while held and no batch in flight
        self.i = 0
        self.rnd = random.Random(wid)
        self.last_ack = 0.0
        self.max_gap = 0.0
        self.why = []  # (time, via, what) of the first failures

    def fail(self, n, via, what):
        self.failed += n
        if len(self.why) < 10:
            self.why.append((round(time.time(), 2), via, str(what)[:300]))

    def run(self):
        while not self.stop.is_set():
            if self.hold.is_set():
                self.idle.set()
                time.sleep(0.02)
                continue
            self.idle.clear()
            names = self.live.live()
            if not names:
                time.sleep(0.05)
                continue
            via = self.rnd.choice(names)
            lines, ids = [], []
            for _ in range(self.batch):
                self.i += 1
                i = "w%d-%d" % (self.wid, self.i)
                ids.append(i)
                lines.append(json.dumps({"index": {"_index": self.index, "_id": i}}))
                lines.append(json.dumps({"k": i, "v": self.i}))
            self.attempted += len(ids)
            try:
                st, b = self.live.req(via, "POST", "/_bulk", "\n".join(lines) + "\n", timeout=15)
            except OSError as e:
                self.fail(len(ids), via, e)
                continue
            if st != 200 or not isinstance(b, dict):
                self.fail(len(ids), via, (st, b))
                continue
            now = time.time()
            for i, it in zip(ids, b.get("items", [])):
                r = it.get("index", {})
                if r.get("status") in (200, 201) and r.get("_id") == i:
                    self.acked.add(i)
                    if self.last_ack:
                        self.max_gap = max(self.max_gap, now - self.last_ack)
                    self.last_ack = now
                else:
                    self.fail(1, via, r)
            time.sleep(self.pause)


class Searcher(threading.Thread):
    """match_all counts through the live nodes; a search fails on a non-200
    or a failed shard."""

    def __init__(self, live, index):
        threading.Thread.__init__(self, daemon=True)
        self.live, self.index = live, index
        self.done = self.failed = 0
        self.failures = []
        self.stop = threading.Event()
        self.rnd = random.Random(7)

    def run(self):
        while not self.stop.is_set():
            names = self.live.live()
            if not names:
                time.sleep(0.05)
                continue
            via = self.rnd.choice(names)
            try:
                st, b = self.live.req(via, "POST", "/%s/_search?size=0" % self.index,
                                      {"track_total_hits": True}, timeout=15)
                ok = st == 200 and b["_shards"]["failed"] == 0
            except (OSError, KeyError, TypeError):
                ok, st, b = False, "conn", None
            self.done += 1
            if not ok:
                self.failed += 1
                if len(self.failures) < 5:
                    self.failures.append((via, st, str(b)[:300]))
            time.sleep(0.02)

    def reset(self):
        self.done = self.failed = 0
        self.failures = []


def read_copies(live, name, index, page=5000):
    """{id: (version, seq_no, term, source)} of the copies on node name."""
    out, after = {}, None
    while True:
        body = {"query": {"match_all": {}}, "size": page, "version": True,
                "seq_no_primary_term": True, "sort": [{"k": "asc"}]}
        if after is not None:
            body["search_after"] = [after]
        st, b = live.req(name, "POST", "/%s/_search?preference=_only_nodes:%s" % (index, name),
                         body, timeout=60)
        assert st == 200, "read of the copies on %s: %s %s" % (name, st, str(b)[:300])
        other = [f for f in b["_shards"].get("failures", [])
                 if "preference" not in json.dumps(f.get("reason"))]
        assert not other, "read of the copies on %s: %s" % (name, other)
        hits = b["hits"]["hits"]
        for h in hits:
            out[h["_id"]] = (h.get("_version"), h.get("_seq_no"), h.get("_primary_term"),
                             json.dumps(h.get("_source"), sort_keys=True))
        if len(hits) < page:
            return out
        after = hits[-1]["sort"][0]


def check_copies(live, index, copies, acked):
    """Every acknowledged id on exactly `copies` nodes, identical there;
    returns (documents, differing, lost)."""
    st, b = live.any_req("POST", "/%s/_refresh" % index, timeout=60)
    assert st == 200, (st, b)
    per = {n: read_copies(live, n, index) for n in live.live()}
    ids = set()
    for m in per.values():
        ids.update(m)
    differ = []
    for i in ids:
        vals = [m[i] for m in per.values() if i in m]
        if len(vals) != copies or len(set(vals)) != 1:
            differ.append((i, len(vals)))
    lost = sorted(acked - ids)
    return len(ids), differ, lost
