"""Replication fault matrix R0-R7 (issue #6), plus R6b (a stalled node
during searches) and R8 (SIGTERM rolling restart), against real processes.

Every row starts its own 3-node cluster (node-1 is the metadata master),
an index with 6 shards and 1 replica, runs Python writer threads against a
model, injects its fault, waits for green, and then checks:
  - no acknowledged write is lost: a document whose last acknowledged
    operation is W holds W's source, or the source of a later attempted
    (possibly unacknowledged) operation, or is absent only when a later
    attempted operation was a delete; while running, an index reply
    "created" for a document the model says must exist also counts as lost;
  - every copy is identical: each id is on exactly two nodes with the same
    _version, _seq_no, _primary_term and _source (read with
    preference=_only_nodes:NAME; a sample also with the real-time GET).
Each row prints one figure line (writes attempted/acknowledged/lost,
recoveries ops-based/file-based from _cat/recovery, seconds to green).

Node-to-node traffic crosses tcpproxy.Proxy: node X's cluster file names,
as node Y's "connect", a proxy listener dedicated to the pair X->Y, so R4
can cut one node off in both directions. With SHOAL_NETNS=1 every node
(and the etcd member) runs in its own network namespace instead
(shoal.host_addr), the nodes dial each other directly, and a cut is made
with iptables inside the namespaces: "stall" drops the packets between
the node and the others (DROP: TCP notices nothing, what was held back is
retransmitted after healing), "drop" answers them with resets (REJECT
--reject-with tcp-reset: connections reset, new ones refused).

    SHOAL_BIN=build/bin python3 tests/api/test_replication.py
    SHOAL_TEST_ONLY=r4 ...        one row
    SHOAL_REPL_KEEP=1 ...         keep the data dirs and logs of failed rows
    SHOAL_REPL_BUDGET=900 ...     time budget in seconds (default 360; rows
                                  past it are skipped and count as failed)
    SHOAL_REPL_NO_SETTINGS=1 ...  omit the -E cluster.* settings (only to try
                                  the harness on a build that refuses them)
"""
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import NETNS, ClusterNode, eq, free_port, host_addr, netns, run_tests, test  # noqa: E402
from tcpproxy import Proxy, self_check  # noqa: E402

NAMES = ["node-1", "node-2", "node-3"]  # node-1 is the metadata master
MASTER = "node-1"
SHARDS, REPLICAS = 6, 1
COPIES = REPLICAS + 1
INDEX = "repl"
FAILOVER = "3s"
FAILOVER_S = 3.0
REPLICA_TIMEOUT = "2s"
REQ_TIMEOUT = 30.0  # every client request carries this unless it says otherwise
GREEN_TIMEOUT = 60
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
CREATE = {"settings": {"number_of_shards": SHARDS, "number_of_replicas": REPLICAS},
          "mappings": {"properties": {"w": {"type": "long"}, "op": {"type": "long"},
                                      "k": {"type": "keyword"}, "body": {"type": "text"}}}}
KEEP = os.environ.get("SHOAL_REPL_KEEP") == "1"
ETCD = os.environ.get("SHOAL_REPL_ETCD") == "1"
FIGURES = []


def log(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- HTTP


class Client:
    """One keep-alive HTTP connection to one node; every request has a
    timeout. Errors come back as status None (connection refused/reset,
    timeout) instead of exceptions, with the exception kept."""

    def __init__(self, addr):
        self.addr = addr  # (host, port)
        self.conn = None

    def close(self):
        if self.conn:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None

    def req(self, method, path, body=None, timeout=REQ_TIMEOUT, ndjson=False):
        """Returns (status or None, parsed body or exception)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        hdrs = {"Content-Type": "application/x-ndjson" if ndjson else "application/json"}
        for attempt in range(2):
            reused = self.conn is not None and self.conn.sock is not None
            try:
                if not self.conn:
                    self.conn = http.client.HTTPConnection(*self.addr, timeout=timeout)
                self.conn.timeout = timeout
                if self.conn.sock:
                    self.conn.sock.settimeout(timeout)
                self.conn.request(method, path, body=body, headers=hdrs)
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.getheader("connection", "").lower() == "close":
                    self.close()
                break
            except (BrokenPipeError, ConnectionResetError,
                    http.client.RemoteDisconnected) as e:
                # the server drops keep-alive connections idle for 10 s:
                # a reused one may be gone before our request; try once
                # on a new connection (a dead node refuses that one)
                self.close()
                if not reused or attempt == 1:
                    return None, e
            except (OSError, http.client.HTTPException) as e:
                self.close()
                return None, e
        try:
            return resp.status, json.loads(data) if data else None
        except ValueError:
            return resp.status, data.decode("utf-8", "replace")


def one_req(addr, method, path, body=None, timeout=REQ_TIMEOUT, ndjson=False):
    c = Client(addr)
    try:
        return c.req(method, path, body, timeout, ndjson)
    finally:
        c.close()


# ---------------------------------------------------------------- cluster


class Cluster:
    """Three `shoal --cluster` processes, each with its own cluster file
    whose "connect" addresses of the other nodes go through the proxy link
    dedicated to that ordered pair; under SHOAL_NETNS=1, each in its own
    namespace, dialling the others directly."""

    def __init__(self, tag, settings=True):
        self.tag = tag
        self.tmp = tempfile.mkdtemp(prefix="shoal-repl-%s-" % tag)
        self.proxy = None if NETNS else Proxy()
        self.ports = {n: (free_port(), free_port()) for n in NAMES}
        self.nodes = {}
        self.stopped = set()  # SIGSTOPped
        self.args = ["--log-level", "info"]
        if settings and os.environ.get("SHOAL_REPL_NO_SETTINGS") != "1":
            self.args += ["-E", "cluster.primary_failover_timeout=" + FAILOVER,
                          "-E", "cluster.replica_timeout=" + REPLICA_TIMEOUT]
        link = {}
        for a in NAMES:
            for b in NAMES:
                if a != b and self.proxy:
                    link[(a, b)] = self.proxy.add((a, b), ("127.0.0.1", self.ports[b][1]))
        self.files = {}
        self.etcd = None
        if ETCD:
            # the same matrix on the live cluster: membership, election and
            # the state on etcd; each node's file keeps the proxied
            # "connect" of the others (how it dials them)
            from live import Etcd
            self.etcd = Etcd(1)
            self.args += ["-E", "cluster.lease_ttl=" + FAILOVER]
        for a in NAMES:
            spec = {"cluster_name": "shoal-repl-" + tag, "secret": "repl-secret", "nodes": []}
            if self.etcd:
                spec["etcd"] = [self.etcd.endpoints()]
            for b in NAMES:
                hp, tp = self.ports[b]
                h = host_addr(b)
                e = {"name": b, "http": "%s:%d" % (h, hp), "transport": "%s:%d" % (h, tp)}
                if a != b and self.proxy:
                    e["connect"] = "127.0.0.1:%d" % link[(a, b)]
                spec["nodes"].append(e)
            path = os.path.join(self.tmp, "cluster-%s.json" % a)
            with open(path, "w") as f:
                json.dump(spec, f, indent=1)
            self.files[a] = path
            os.makedirs(os.path.join(self.tmp, a), exist_ok=True)

    def port(self, name):
        return self.ports[name][0]

    def addr(self, name):
        """(host, port) of name's HTTP."""
        return host_addr(name), self.ports[name][0]

    def cut(self, victim, mode):
        """victim's links with the other nodes: "drop" (resets) or "stall"
        (nothing moves); etcd stays reachable."""
        if self.proxy:
            self.proxy.cut(victim, mode)
            return
        others = [n for n in NAMES if n != victim]
        netns().isolate(victim, from_=others, reset=mode == "drop")

    def heal(self, victim):
        if self.proxy:
            self.proxy.heal(victim)
        else:
            netns().heal()

    def start(self, name):
        n = self.nodes.get(name)
        if n is None:
            n = ClusterNode(self.files[name], name, self.port(name),
                            data=os.path.join(self.tmp, name), args=self.args, start=False)
            self.nodes[name] = n
        n.start()
        return n

    def start_all(self):
        for name in NAMES:
            self.start(name)

    def alive(self, name):
        n = self.nodes.get(name)
        return bool(n and n.proc and n.proc.poll() is None)

    def kill(self, name):
        self.cont(name)
        self.nodes[name].kill()

    def sigstop(self, name):
        self.nodes[name].proc.send_signal(signal.SIGSTOP)
        self.stopped.add(name)

    def cont(self, name):
        if name in self.stopped:
            n = self.nodes[name]
            if n.proc and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGCONT)
            self.stopped.discard(name)

    def req(self, name, method, path, body=None, timeout=REQ_TIMEOUT):
        return one_req(self.addr(name), method, path, body, timeout)

    def wait_green(self, timeout=GREEN_TIMEOUT, via=MASTER):
        """Seconds until every live node says green with 3 nodes; raises
        after timeout."""
        t0 = time.time()
        deadline = t0 + timeout
        for name in NAMES:
            while True:
                left = deadline - time.time()
                if left <= 0:
                    raise AssertionError("%s: not green within %ss on %s: %s; copies not "
                                         "started there: %s" % (self.tag, timeout, name,
                                                                self.health_body(name),
                                                                self.unstarted(name)))
                st, b = self.req(name, "GET", "/_cluster/health?wait_for_status=green"
                                 "&wait_for_nodes=3&timeout=%ds" % max(1, int(left)),
                                 timeout=left + 10)
                if st == 200 and isinstance(b, dict) and b.get("status") == "green":
                    break
                time.sleep(0.2)
        return time.time() - t0

    def unstarted(self, name):
        """(index, shard, prirep, state, node) of every copy that name's
        _cat/shards does not list as STARTED, for failure messages."""
        st, rows = self.req(name, "GET", "/_cat/shards?format=json", timeout=10)
        if st != 200 or not isinstance(rows, list):
            return "_cat/shards: %s %s" % (st, str(rows)[:200])
        return [(r.get("index"), r.get("shard"), r.get("prirep"), r.get("state"), r.get("node"))
                for r in rows if r.get("state") != "STARTED"]

    def health_body(self, name):
        st, b = self.req(name, "GET", "/_cluster/health", timeout=10)
        return b if st == 200 and isinstance(b, dict) else "%s %s" % (st, b)

    def health(self, name=MASTER):
        st, b = self.req(name, "GET", "/_cluster/health", timeout=10)
        return b.get("status") if st == 200 and isinstance(b, dict) else "?(%s %s)" % (st, b)

    def shards(self, via=MASTER, index=INDEX):
        st, rows = self.req(via, "GET", "/_cat/shards/%s?format=json" % index, timeout=10)
        if st != 200 or not isinstance(rows, list):
            raise AssertionError("_cat/shards via %s: %s %s" % (via, st, rows))
        return rows

    def log_tail(self, name, n=4000):
        try:
            with open(os.path.join(self.tmp, name, "test-node.log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def grep_logs(self, words, limit=12):
        """Log lines of every node naming one of words (for the report)."""
        out = []
        for name in NAMES:
            try:
                with open(os.path.join(self.tmp, name, "test-node.log"), "rb") as f:
                    for line in f.read().decode("utf-8", "replace").splitlines():
                        if any(w in line for w in words):
                            out.append("%s: %s" % (name, line))
            except OSError:
                pass
        return out[-limit:]

    def close(self, failed):
        rc = 0
        for name in NAMES:
            self.cont(name)
        for name, n in self.nodes.items():
            try:
                r = n.stop(timeout=15) if n.proc and n.proc.poll() is None else 0
            except RuntimeError:
                r = -1
            n.kill()
            if n.log:
                n.log.close()
            if r not in (0, None):
                rc = r
                log("%s: %s exited with %s at shutdown; log tail:\n%s" %
                    (self.tag, name, r, self.log_tail(name, 3000)))
        if self.proxy:
            self.proxy.close()
        else:
            netns().heal()  # a row that failed inside its cut
        if self.etcd:
            self.etcd.close()
        if failed and KEEP:
            log("%s: data and logs kept in %s" % (self.tag, self.tmp))
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return rc


# ---------------------------------------------------------------- model


class Model:
    """Per id, the operations attempted on it in order (each id belongs to
    one writer thread, so its operations are sequential). An operation is
    [kind 'i'|'d', source or None, state] with state 'pending', 'ack' or
    'fail' (unacknowledged: it may or may not have happened)."""

    def __init__(self):
        self.ops = {}
        self.lock = threading.Lock()
        self.anomalies = []  # lost writes seen while running

    def begin(self, doc_id, kind, src):
        op = [kind, src, "pending"]
        with self.lock:
            self.ops.setdefault(doc_id, []).append(op)
        return op

    def possible_before(self, doc_id, op):
        """States the document may be in just before op: 'present'/'absent'."""
        with self.lock:
            ops = list(self.ops[doc_id])
        i = next(k for k, o in enumerate(ops) if o is op)
        last = None
        for k in range(i):
            if ops[k][2] == "ack":
                last = k
        states = set()
        if last is None:
            states.add("absent")
            start = 0
        else:
            start = last
        for k in range(start, i):
            states.add("present" if ops[k][0] == "i" else "absent")
        return states

    def allowed(self, doc_id):
        """(sources allowed as the final state, absent allowed, has an ack)."""
        ops = self.ops.get(doc_id, [])
        last = None
        for k, o in enumerate(ops):
            if o[2] == "ack":
                last = k
        start = 0 if last is None else last
        srcs, absent = [], last is None
        for o in ops[start:]:
            if o[0] == "i":
                srcs.append(o[1])
            else:
                absent = True
        return srcs, absent, last is not None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.attempted = self.acked = self.failed = 0
        self.requests = self.req_errors = self.hangs = 0
        self.max_latency = 0.0
        self.ack_times = []  # (time, items acknowledged)
        self.rate = None  # items per second over all writers, when limited
        self.t0 = time.time()
        self.statuses = {}

    def add(self, attempted, acked, failed, latency, err=False, hang=False):
        with self.lock:
            self.attempted += attempted
            self.acked += acked
            self.failed += failed
            self.requests += 1
            self.req_errors += 1 if err else 0
            self.hangs += 1 if hang else 0
            self.max_latency = max(self.max_latency, latency)
            if acked:
                self.ack_times.append((time.time(), acked))

    def status(self, st):
        with self.lock:
            self.statuses[st] = self.statuses.get(st, 0) + 1

    def acked_between(self, t0, t1):
        with self.lock:
            return sum(n for t, n in self.ack_times if t0 <= t < t1)


class Writer(threading.Thread):
    """Writes to its own ids through the nodes targets() names: bulks of
    10-50 items (some deletes), single PUTs and DELETEs. bulk_params (e.g.
    "?timeout=10s") goes on every write request."""

    def __init__(self, cl, wid, model, stats, ids, targets, seed, stop, bulk_params="",
                 timeout=REQ_TIMEOUT, pause=0.0):
        threading.Thread.__init__(self, daemon=True, name="writer-%d" % wid)
        self.cl, self.wid, self.model, self.stats = cl, wid, model, stats
        self.ids = ids
        self.targets = targets
        self.rnd = random.Random(seed)
        self.stop = stop
        self.bulk_params = bulk_params
        self.timeout = timeout
        self.pause = pause
        self.opn = 0
        self.clients = {}
        self.error = None

    def client(self, name):
        c = self.clients.get(name)
        if c is None:
            c = self.clients[name] = Client(self.cl.addr(name))
        return c

    def source(self, doc_id):
        self.opn += 1
        return {"w": self.wid, "op": self.opn, "k": doc_id,
                "body": " ".join(self.rnd.choice(WORDS) for _ in range(self.rnd.randint(1, 6)))}

    def run(self):
        try:
            while not self.stop.is_set():
                names = self.targets(self.wid)
                if not names:
                    time.sleep(0.05)
                    continue
                rate = self.stats.rate
                if rate and self.stats.attempted > rate * (time.time() - self.stats.t0):
                    # spread the writes over the faults instead of racing
                    # through them before the first one
                    time.sleep(0.02)
                    continue
                name = self.rnd.choice(names)
                r = self.rnd.random()
                if r < 0.7:
                    self.bulk(name)
                elif r < 0.9:
                    self.single(name, "i")
                else:
                    self.single(name, "d")
                if self.pause:
                    time.sleep(self.pause)
        except Exception as e:  # noqa: BLE001 - reported by the row
            self.error = repr(e)
        finally:
            for c in self.clients.values():
                c.close()

    def settle(self, op, doc_id, ok, result):
        """Marks op acknowledged or not; checks a 'created' reply against
        the model."""
        if not ok:
            op[2] = "fail"
            return
        if op[0] == "i" and result == "created":
            if "absent" not in self.model.possible_before(doc_id, op):
                with self.model.lock:
                    self.model.anomalies.append(
                        "%s: index answered 'created' but an acknowledged earlier write "
                        "must still be there" % doc_id)
        op[2] = "ack"

    def bulk(self, name):
        ids = self.rnd.sample(self.ids, min(len(self.ids), self.rnd.randint(10, 50)))
        lines, ops = [], []
        for doc_id in ids:
            if self.rnd.random() < 0.1:
                lines.append(json.dumps({"delete": {"_index": INDEX, "_id": doc_id}}))
                ops.append((doc_id, self.model.begin(doc_id, "d", None)))
            else:
                src = self.source(doc_id)
                lines.append(json.dumps({"index": {"_index": INDEX, "_id": doc_id}}))
                lines.append(json.dumps(src))
                ops.append((doc_id, self.model.begin(doc_id, "i", src)))
        body = "\n".join(lines) + "\n"
        t0 = time.time()
        st, b = self.client(name).req("POST", "/_bulk" + self.bulk_params, body,
                                      timeout=self.timeout, ndjson=True)
        lat = time.time() - t0
        acked = 0
        items = b.get("items") if st == 200 and isinstance(b, dict) else None
        if items is not None and len(items) != len(ops):
            raise AssertionError("bulk of %d answered %d items" % (len(ops), len(items)))
        for k, (doc_id, op) in enumerate(ops):
            it = list(items[k].values())[0] if items else {}
            s = it.get("status")
            self.stats.status(s if items else ("http %s" % st if st else type(b).__name__))
            ok = s in (200, 201) or (op[0] == "d" and s == 404 and
                                     it.get("result") == "not_found")
            self.settle(op, doc_id, ok, it.get("result"))
            acked += 1 if ok else 0
        self.stats.add(len(ops), acked, len(ops) - acked, lat, err=st is None,
                       hang=isinstance(b, socket.timeout))

    def single(self, name, kind):
        doc_id = self.rnd.choice(self.ids)
        if kind == "i":
            src = self.source(doc_id)
            op = self.model.begin(doc_id, "i", src)
            t0 = time.time()
            st, b = self.client(name).req("PUT", "/%s/_doc/%s%s" % (INDEX, doc_id,
                                                                     self.bulk_params),
                                          src, timeout=self.timeout)
            ok = st in (200, 201)
        else:
            op = self.model.begin(doc_id, "d", None)
            t0 = time.time()
            st, b = self.client(name).req("DELETE", "/%s/_doc/%s%s" % (INDEX, doc_id,
                                                                        self.bulk_params),
                                          timeout=self.timeout)
            ok = st == 200 or (st == 404 and isinstance(b, dict) and
                               b.get("result") == "not_found")
        lat = time.time() - t0
        self.stats.status(st if st else type(b).__name__)
        self.settle(op, doc_id, ok, b.get("result") if isinstance(b, dict) else None)
        self.stats.add(1, 1 if ok else 0, 0 if ok else 1, lat, err=st is None,
                       hang=isinstance(b, socket.timeout))


class Writers:
    """n writer threads, each over its own slice of the ids."""

    def __init__(self, cl, model, n, n_ids, targets, seed=1, prefix="d", rate=None, **kw):
        self.stop = threading.Event()
        self.stats = Stats()
        self.stats.rate = rate
        self.stats.t0 = time.time()
        self.threads = []
        for w in range(n):
            ids = ["%s%d-%d" % (prefix, w, i) for i in range(n_ids // n)]
            self.threads.append(Writer(cl, w, model, self.stats, ids, targets, seed * 100 + w,
                                       self.stop, **kw))

    def start(self):
        self.stats.t0 = time.time()
        for t in self.threads:
            t.start()
        return self

    def wait_attempted(self, n, timeout):
        deadline = time.time() + timeout
        while self.stats.attempted < n and time.time() < deadline:
            if not any(t.is_alive() for t in self.threads):
                break
            time.sleep(0.05)
        return self.stats.attempted >= n

    def finish(self, timeout=REQ_TIMEOUT + 15):
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
            if t.is_alive():
                raise AssertionError("writer %s still running %ss after stop (a hang)" %
                                     (t.name, timeout))
        errs = [t.error for t in self.threads if t.error]
        if errs:
            raise AssertionError("writer failed: %s" % errs[0])


def live_names(cl, exclude=()):
    return [n for n in NAMES if cl.alive(n) and n not in cl.stopped and n not in exclude]


# ---------------------------------------------------------------- checks


class Recoveries:
    """Distinct rows of GET /_cat/recovery?format=json over every node,
    collected after each recovery (a node lists the recoveries it was the
    target of)."""

    def __init__(self):
        self.seen = set()
        self.supported = None

    def collect(self, cl, index=INDEX):
        for name in live_names(cl):
            st, rows = cl.req(name, "GET", "/_cat/recovery/%s?format=json" % index, timeout=10)
            if st != 200 or not isinstance(rows, list):
                if self.supported is None:
                    self.supported = False
                continue
            self.supported = True
            for r in rows:
                if not isinstance(r, dict) or r.get("index") != index:
                    continue
                self.seen.add(tuple(sorted((k, str(v)) for k, v in r.items())))

    def counts(self):
        ops = files = 0
        for row in self.seen:
            r = dict(row)
            t = r.get("type", "")
            if "file" in t:
                files += 1
            elif "ops" in t or "translog" in t:
                ops += 1
            elif t == "peer":
                try:
                    nfiles = int(r.get("files") or 0)
                except ValueError:
                    nfiles = 0
                if nfiles > 0:
                    files += 1
                else:
                    ops += 1
        return ops, files

    def figure(self):
        if not self.supported:
            return "recoveries n/a(no _cat/recovery)"
        ops, files = self.counts()
        return "recoveries ops=%d file=%d" % (ops, files)


def read_copy(cl, name, index=INDEX, page=5000):
    """{id: (_version, _seq_no, _primary_term, _source)} of the copies on
    node name, read through that node, in pages sorted by the keyword "k"
    (every source written here carries its id there). Also returns how
    many shards answered."""
    out = {}
    after = None
    successful = None
    while True:
        body = {"query": {"match_all": {}}, "size": page, "version": True,
                "seq_no_primary_term": True, "track_total_hits": True, "sort": [{"k": "asc"}]}
        if after is not None:
            body["search_after"] = [after]
        st, b = cl.req(name, "POST", "/%s/_search?preference=_only_nodes:%s" % (index, name),
                       body, timeout=60)
        if st != 200 or not isinstance(b, dict):
            raise AssertionError("read of the copies on %s: %s %s" % (name, st, str(b)[:300]))
        sh = b.get("_shards", {})
        # the shards with no copy on this node fail as not matching the
        # preference; any other failure is an error
        other = [f for f in sh.get("failures", [])
                 if "preference" not in json.dumps(f.get("reason"))]
        if other:
            raise AssertionError("read of the copies on %s: failed shards %s" % (name, other))
        if successful is None:
            successful = sh.get("successful", 0)
            total = b["hits"]["total"]["value"]
        hits = b["hits"]["hits"]
        for h in hits:
            if h["_id"] in out:
                raise AssertionError("%s: id %s twice in the pages" % (name, h["_id"]))
            out[h["_id"]] = (h.get("_version"), h.get("_seq_no"), h.get("_primary_term"),
                             json.dumps(h.get("_source"), sort_keys=True))
        if len(hits) < page:
            break
        after = hits[-1]["sort"][0]
    if len(out) != total:
        raise AssertionError("%s: %d docs read, total says %d" % (name, len(out), total))
    return out, successful


def check_copies(cl, index=INDEX):
    """Reads every copy. Returns (union, differ): union maps each id to
    the list of distinct sources its copies hold; differ lists the ids
    not on exactly COPIES nodes with identical (_version, _seq_no,
    _primary_term, _source), with what each node holds."""
    # a copy being moved (balance after a node joined, a relocation) is
    # read on its old and its new node: wait until none moves (bounded)
    t0 = time.time()
    while True:
        st, h = cl.req(MASTER, "GET", "/_cluster/health", timeout=10)
        if st == 200 and isinstance(h, dict) and not h.get("relocating_shards") and \
                not h.get("initializing_shards"):
            break
        if time.time() - t0 > 60:
            raise AssertionError("copies still moving after 60 s: %s" % (h,))
        time.sleep(0.2)
    st, b = cl.req(MASTER, "POST", "/%s/_refresh" % index, timeout=60)
    if st != 200:
        raise AssertionError("refresh: %s %s" % (st, b))
    per = {}
    shards_held = 0
    for name in NAMES:
        per[name], n = read_copy(cl, name, index)
        shards_held += n
    if shards_held != SHARDS * COPIES:
        raise AssertionError("copies answering: %d, want %d" % (shards_held, SHARDS * COPIES))
    union, differ = {}, []
    ids = set()
    for name in NAMES:
        ids.update(per[name])
    for i in sorted(ids):
        vals = [(name, per[name][i]) for name in NAMES if i in per[name]]
        if len(vals) != COPIES or len(set(v for _, v in vals)) != 1:
            differ.append((i, vals))
        union[i] = []
        for _, v in vals:
            s = json.loads(v[3])
            if s not in union[i]:
                union[i].append(s)
    # the real-time GET of a sample, on each copy, agrees with the search
    for i in random.Random(len(ids)).sample(sorted(ids), min(40, len(ids))):
        for name in NAMES:
            if i not in per[name]:
                continue
            st, d = cl.req(name, "GET", "/%s/_doc/%s?preference=_only_nodes:%s" % (index, i, name),
                           timeout=20)
            got = (d.get("_version"), d.get("_seq_no"), d.get("_primary_term"),
                   json.dumps(d.get("_source"), sort_keys=True)) if st == 200 and \
                isinstance(d, dict) else ("GET %s" % st, None, None, str(d)[:80])
            if got != per[name][i]:
                differ.append((i, [(name + " search", per[name][i]), (name + " GET", got)]))
    return union, differ


def check_model(model, union):
    """Returns (lost, strange). lost: ids whose last acknowledged write
    no copy reflects (absent everywhere though it must exist, or every
    copy holding something older). strange: sources never attempted,
    ids never written."""
    lost, strange = [], []
    for doc_id in set(model.ops) | set(union):
        srcs, absent_ok, has_ack = model.allowed(doc_id)
        got = union.get(doc_id)
        if doc_id not in model.ops:
            strange.append("%s present, never written" % doc_id)
            continue
        if got is None:
            if not absent_ok:
                lost.append("%s absent on every copy; last acknowledged write op %s" %
                            (doc_id, srcs[0]["op"]))
            continue
        everything = [o[1] for o in model.ops[doc_id] if o[0] == "i"]
        if any(g not in everything for g in got):
            strange.append("%s holds a source never written: %s" % (doc_id, got))
        elif not any(g in srcs for g in got):
            (lost if has_ack else strange).append(
                "%s: every copy holds an op older than its last acknowledged write (%s)" %
                (doc_id, [g.get("op") for g in got]))
    return lost, strange


def finish_row(cl, tag, model, stats, rec, extra="", green_s=None, problems=None):
    """Waits for green, compares copies and the model, prints the figure
    line (also when something is wrong); raises when anything is lost,
    differs, or the cluster never went green, or problems (the row's own
    findings) is not empty."""
    problems = list(problems or [])
    g = None
    try:
        g = cl.wait_green()
    except AssertionError as e:
        problems.append(str(e))
    rec.collect(cl)
    union, differ = check_copies(cl)
    lost, strange = check_model(model, union)
    lost += model.anomalies
    green = green_s if green_s is not None else g
    line = ("%s: attempted %d acknowledged %d lost %d docs %d copies_differ %d %s green_after=%s"
            " client_timeouts=%d%s" % (
                tag, stats.attempted, stats.acked, len(lost), len(union), len(differ),
                rec.figure(), "%.1fs" % green if green is not None else "never", stats.hangs,
                extra))
    log(line)
    FIGURES.append(line)
    if stats.statuses:
        log("    item statuses: %s" % ", ".join("%s=%d" % (k, v) for k, v in
                                              sorted(stats.statuses.items(), key=str)))
    if lost or strange:
        problems.append("%d lost, %d strange, e.g.\n  %s" % (
            len(lost), len(strange), "\n  ".join((lost + strange)[:8])))
    if differ:
        ex = ["%s: %s" % (i, " | ".join("%s v%s seq%s t%s %s" % (n, v[0], v[1], v[2], v[3][:50])
                                         for n, v in vals) or "-") for i, vals in differ[:6]]
        problems.append("%d ids differ between copies, e.g.\n  %s" % (len(differ), "\n  ".join(ex)))
    if stats.acked == 0:
        problems.append("nothing was acknowledged")
    if problems:
        raise AssertionError("%s: %s" % (tag, "\n".join(problems)))
    return union


def row(fn):
    """A row: runs fn(cluster) with a fresh cluster and index; closes the
    cluster whatever happens."""
    def wrapper():
        tag = fn.__name__.split("_")[0].upper()
        cl = Cluster(tag)
        failed = True
        try:
            cl.start_all()
            st, b = cl.req(MASTER, "PUT", "/" + INDEX, CREATE)
            if st != 200:
                raise AssertionError("create index: %s %s" % (st, b))
            cl.wait_green(30)
            fn(cl, tag)
            failed = False
        except BaseException:
            for line in cl.grep_logs(("ERROR", "error", "WARN", "warn", "lost", "recover",
                                      "promot", "in-sync", "in_sync"))[-10:]:
                log("    log " + line[:300])
            for name in NAMES:  # a node that died: how (its crash report is in the tail)
                n = cl.nodes.get(name)
                if n and n.proc and n.proc.poll() is not None and name not in cl.stopped:
                    log("    %s exited with %s; log tail:\n%s" % (
                        name, n.proc.returncode, cl.log_tail(name, 3000)))
            raise
        finally:
            rc = cl.close(failed)
            if rc not in (0, None) and not failed:
                raise AssertionError("%s: a node exited with %s at shutdown" % (tag, rc))
    wrapper.__name__ = fn.__name__
    return wrapper


def all_live(cl):
    return lambda wid: live_names(cl)


def probe_all_shards(cl, via, n=60, prefix="probe"):
    """A bulk of n fresh ids (every shard gets some): (all items
    acknowledged, the reply). The probe ids are written once and never
    again; the caller records them in the model."""
    lines = []
    srcs = {}
    for i in range(n):
        doc_id = "%s-%d" % (prefix, i)
        src = {"w": 99, "op": i, "k": doc_id, "body": "probe"}
        srcs[doc_id] = src
        lines.append(json.dumps({"index": {"_index": INDEX, "_id": doc_id}}))
        lines.append(json.dumps(src))
    st, b = one_req(cl.addr(via), "POST", "/_bulk?timeout=10s", "\n".join(lines) + "\n",
                    timeout=20, ndjson=True)
    ok = st == 200 and isinstance(b, dict) and not b.get("errors")
    return ok, b, srcs


def probe_summary(b):
    """What went wrong with a probe bulk, briefly."""
    if not isinstance(b, dict):
        return repr(b)[:200]
    errs = {}
    for it in b.get("items", []):
        it = list(it.values())[0]
        if it.get("status") not in (200, 201):
            e = it.get("error") or {}
            key = "%s %s" % (it.get("status"), e.get("type") if isinstance(e, dict) else e)
            errs[key] = errs.get(key, 0) + 1
    return ", ".join("%s x%d" % kv for kv in errs.items()) or str(b)[:200]


def record_probe(model, b, srcs):
    items = b.get("items", []) if isinstance(b, dict) else []
    for k, (doc_id, src) in enumerate(srcs.items()):
        op = model.begin(doc_id, "i", src)
        it = list(items[k].values())[0] if k < len(items) else {}
        op[2] = "ack" if it.get("status") in (200, 201) else "fail"


# ---------------------------------------------------------------- rows


def green_step(cl, greens, problems, timeout=40):
    """wait_green inside a fault loop: the seconds go to greens; a
    timeout becomes a problem (and False: the caller stops its loop)."""
    try:
        greens.append(cl.wait_green(timeout))
        return True
    except AssertionError as e:
        problems.append(str(e)[:600])
        return False


def greens_figure(greens):
    return " (green after each: %s)" % " ".join("%.1f" % g for g in greens)


class Searcher(threading.Thread):
    """Searches with ?timeout through targets(); records every latency and
    outcome."""

    def __init__(self, cl, targets, stop, n=None, timeout_s=2.0, client_timeout=15.0,
                 expect_total=None, seed=0, spread=False):
        threading.Thread.__init__(self, daemon=True)
        self.spread = spread
        self.cl, self.targets, self.stop, self.n = cl, targets, stop, n
        self.timeout_s, self.client_timeout = timeout_s, client_timeout
        self.expect_total = expect_total
        self.rnd = random.Random(seed)
        self.results = []  # (node, latency, outcome)
        self.odd = []  # the first replies that were neither complete nor partial
        self.error = None

    def who(self, name):
        """What the node at name's port says of itself and its indices right
        after an odd reply (a fresh connection), for the failure message."""
        c = Client(self.cl.addr(name))
        try:
            st1, b1 = c.req("GET", "/", timeout=5)
            st2, b2 = c.req("GET", "/_cat/indices?format=json&h=index,uuid,health", timeout=5)
            return "GET / %s %s; indices %s %s" % (st1, str(b1)[:200], st2, str(b2)[:300])
        finally:
            c.close()

    def run(self):
        clients = {}
        try:
            while not self.stop.is_set() and (self.n is None or len(self.results) < self.n):
                names = self.targets()
                if not names:
                    time.sleep(0.05)
                    continue
                name = self.rnd.choice(names)
                c = clients.get(name) or clients.setdefault(name, Client(self.cl.addr(name)))
                q = self.rnd.choice([
                    {"query": {"match_all": {}}, "size": 5, "track_total_hits": True},
                    {"query": {"match": {"body": self.rnd.choice(WORDS)}}, "size": 10},
                    {"size": 0, "aggs": {"w": {"terms": {"field": "w"}}}},
                ])
                q["timeout"] = "%dms" % int(self.timeout_s * 1000)
                t0 = time.time()
                path = "/%s/_search" % INDEX
                if self.spread:
                    path += "?preference=p%d" % self.rnd.randint(0, 1 << 30)
                st, b = c.req("POST", path, q, timeout=self.client_timeout)
                lat = time.time() - t0
                if st is None:
                    outcome = "hang" if isinstance(b, socket.timeout) else "conn_error"
                elif st != 200 or not isinstance(b, dict):
                    outcome = "http_%s" % st
                else:
                    sh = b.get("_shards", {})
                    if sh.get("successful", 0) + sh.get("skipped", 0) + sh.get("failed", 0) \
                            != sh.get("total"):
                        outcome = "bad_shards"
                    elif sh.get("failed"):
                        outcome = "partial" if sh.get("failures") else "partial_no_failures"
                    else:
                        outcome = "complete"
                        if (self.expect_total is not None and "match_all" in q.get("query", {})
                                and b["hits"]["total"]["value"] != self.expect_total):
                            outcome = "wrong_total_%s" % b["hits"]["total"]["value"]
                self.results.append((name, lat, outcome))
                if outcome not in ("complete", "partial") and len(self.odd) < 3:
                    self.odd.append("%s via %s after %.1fs: %s | %s" % (
                        outcome, name, lat, str(b)[:300], self.who(name)))
        except Exception as e:  # noqa: BLE001
            self.error = repr(e)
        finally:
            for c in clients.values():
                c.close()


@test
def cut_self_check():
    # the rows' partitions are only as good as the proxy (or, under
    # SHOAL_NETNS=1, the iptables rules)
    if not NETNS:
        self_check()
        return
    net = netns()
    a, b = host_addr("node-1"), host_addr("node-2")
    port = free_port()
    server = net.popen("node-2", [sys.executable, "-c", (
        "import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind((%r, %d)); s.listen(16)\n"
        "while True:\n"
        "    c, _ = s.accept(); c.sendall(b'x'); c.close()\n") % (b, port)])
    probe = ("import socket\n"
             "try:\n"
             "    c = socket.create_connection((%r, %d), timeout=1); c.settimeout(1)\n"
             "    print('ok' if c.recv(1) == b'x' else 'eof')\n"
             "except ConnectionRefusedError:\n"
             "    print('refused')\n"
             "except socket.timeout:\n"
             "    print('timeout')\n") % (b, port)

    def connect():
        r = subprocess.run(["ip", "netns", "exec", net.hosts["node-1"][0], sys.executable,
                            "-c", probe], stdout=subprocess.PIPE, timeout=10)
        return r.stdout.decode().strip()
    try:
        deadline = time.time() + 5
        while connect() != "ok":
            assert time.time() < deadline, "no connection from node-1 to node-2 at all"
            time.sleep(0.1)
        net.cut("node-1", "node-2")
        eq(connect(), "timeout", "a dropping cut")
        net.heal()
        eq(connect(), "ok", "healed")
        net.cut("node-1", "node-2", reset=True)
        eq(connect(), "refused", "a resetting cut")
        net.heal()
        eq(connect(), "ok", "healed again")
    finally:
        net.heal()
        server.kill()
        server.wait(10)


@test
@row
def r0_baseline(cl, tag):
    model = Model()
    rec = Recoveries()
    n_docs = 5000
    w = Writers(cl, model, 3, n_docs, all_live(cl), seed=10)
    # every id written once first (bulks of 50 through each node in turn),
    # so the index holds ~5,000 docs; then mixed writes
    for wr in w.threads:
        for k in range(0, len(wr.ids), 50):
            lines, ops = [], []
            for doc_id in wr.ids[k:k + 50]:
                src = wr.source(doc_id)
                lines.append(json.dumps({"index": {"_index": INDEX, "_id": doc_id}}))
                lines.append(json.dumps(src))
                ops.append((doc_id, model.begin(doc_id, "i", src)))
            st, b = one_req(cl.addr(NAMES[(k // 50) % 3]), "POST", "/_bulk",
                            "\n".join(lines) + "\n", ndjson=True)
            if st != 200:
                raise AssertionError("initial bulk: %s %s" % (st, str(b)[:300]))
            for (doc_id, op), it in zip(ops, b["items"]):
                it = list(it.values())[0]
                ok = it.get("status") in (200, 201)
                wr.settle(op, doc_id, ok, it.get("result"))
                w.stats.add(1, 1 if ok else 0, 0 if ok else 1, 0)
    w.start()
    w.wait_attempted(n_docs + 3000, 60)
    w.finish()
    problems = []
    if w.stats.failed:
        problems.append("without faults %d writes were not acknowledged (%s)" %
                        (w.stats.failed, w.stats.statuses))
    finish_row(cl, "R0 baseline", model, w.stats, rec, problems=problems)


@test
@row
def r1_kill_restart(cl, tag):
    model = Model()
    rec = Recoveries()
    victim = "node-2"  # not the master
    target, cycles = 8000, 6
    w = Writers(cl, model, 3, 2400, all_live(cl), seed=11, rate=500).start()
    greens, problems = [], []
    rnd = random.Random(11)
    for c in range(cycles):
        w.wait_attempted(target * (c + 0.5) / (cycles + 1), 30)
        cl.kill(victim)
        time.sleep(0.5 + rnd.random())
        cl.start(victim)
        if not green_step(cl, greens, problems):
            break
        rec.collect(cl)
    w.wait_attempted(target, 60)
    w.finish()
    finish_row(cl, "R1 kill-restart x%d" % cycles, model, w.stats, rec,
               green_s=max(greens) if greens else None, extra=greens_figure(greens),
               problems=problems)


@test
@row
def r2_kill_coordinator_mid_bulk(cl, tag):
    model = Model()
    rec = Recoveries()
    victim = "node-3"  # coordinates the big bulks; not the master
    # background writers through the other nodes
    w = Writers(cl, model, 2, 1000, lambda wid: live_names(cl, exclude=(victim,)),
                seed=12, rate=300).start()
    mid = tries = big_items = big_acked = 0
    greens, problems = [], []
    rnd = random.Random(12)
    for c in range(3):
        w.wait_attempted(800 * (c + 1), 30)
        delay = 0.15
        while tries < 12:
            tries += 1
            lines, ops = [], []
            for i in range(3000):
                doc_id = "big%d-%d" % (tries, i)
                src = {"w": 50, "op": tries, "k": doc_id,
                       "body": " ".join(rnd.choice(WORDS) for _ in range(4))}
                lines.append(json.dumps({"index": {"_index": INDEX, "_id": doc_id}}))
                lines.append(json.dumps(src))
                ops.append((doc_id, model.begin(doc_id, "i", src)))
            result = {}

            def send(body="\n".join(lines) + "\n"):
                result["r"] = one_req(cl.addr(victim), "POST", "/_bulk", body, ndjson=True)
            t = threading.Thread(target=send, daemon=True)
            t.start()
            time.sleep(delay)
            replied = not t.is_alive()
            cl.kill(victim)
            t.join(REQ_TIMEOUT + 5)
            st, b = result.get("r", (None, None))
            items = b.get("items") if st == 200 and isinstance(b, dict) else None
            for k, (doc_id, op) in enumerate(ops):
                s = list(items[k].values())[0].get("status") if items else None
                op[2] = "ack" if s in (200, 201) else "fail"
                big_acked += 1 if s in (200, 201) else 0
            big_items += len(ops)
            cl.start(victim)
            ok = green_step(cl, greens, problems)
            rec.collect(cl)
            if not replied and items is None:
                mid += 1
                break
            delay /= 2  # the bulk was done before the kill: kill sooner
            if not ok:
                break
        if problems:
            break
    w.wait_attempted(3000, 30)
    w.finish()
    if mid < 3:
        problems.append("only %d of %d kills landed mid-request" % (mid, tries))
    # the items of the killed bulks count with the background writes
    w.stats.attempted += big_items
    w.stats.acked += big_acked
    finish_row(cl, "R2 kill-coordinator-mid-bulk x3", model, w.stats, rec,
               green_s=max(greens) if greens else None,
               extra=" (kills mid-request %d of %d; %d items in the killed bulks, "
                     "acknowledged %d)%s" % (mid, tries, big_items, big_acked,
                                            greens_figure(greens)),
               problems=problems)


@test
@row
def r3_kill_all(cl, tag):
    model = Model()
    rec = Recoveries()
    w = Writers(cl, model, 3, 1500, all_live(cl), seed=13, rate=500).start()
    greens, problems = [], []
    for c in range(3):
        w.wait_attempted(1500 * (c + 1), 30)
        for name in NAMES:
            cl.kill(name)
        time.sleep(0.5)
        for name in NAMES:
            cl.start(name)
        if not green_step(cl, greens, problems):
            break
        rec.collect(cl)
    w.wait_attempted(6000, 30)
    w.finish()
    finish_row(cl, "R3 kill-all x3", model, w.stats, rec,
               green_s=max(greens) if greens else None, extra=greens_figure(greens),
               problems=problems)


@test
@row
def r4_partition(cl, tag):
    model = Model()
    rec = Recoveries()
    victim = "node-3"  # not the master
    cut = {"on": False}

    def targets(wid):
        # writer 0 keeps talking to the cut node (its HTTP is reachable);
        # the others use the majority side while it is cut
        if wid == 0 or not cut["on"]:
            return live_names(cl)
        return live_names(cl, exclude=(victim,))
    w = Writers(cl, model, 3, 1500, targets, seed=14, bulk_params="?timeout=10s",
                timeout=20, rate=300).start()
    figures, greens, problems = [], [], []
    for c, mode in enumerate(("drop", "stall")):
        w.wait_attempted(1000 * (2 * c + 1), 30)
        t_cut = time.time()
        cut["on"] = True
        cl.cut(victim, mode)
        # the majority takes writes again on every shard (after the
        # replica timeout and, for the cut node's primaries, failover)
        resumed = None
        yellow = False
        k = 0
        last_probe = ""
        while time.time() < t_cut + FAILOVER_S + 15:
            k += 1
            ok, b, srcs = probe_all_shards(cl, MASTER, prefix="p%d-%d" % (c, k))
            record_probe(model, b, srcs)
            if cl.health(MASTER) != "green":
                yellow = True
            if ok:
                resumed = time.time() - t_cut
                break
            last_probe = probe_summary(b)
            time.sleep(0.3)
        hold = t_cut + FAILOVER_S + 5 - time.time()
        if hold > 0:
            time.sleep(hold)
        if cl.health(MASTER) != "green":
            yellow = True
        acked_late = w.stats.acked_between(t_cut + FAILOVER_S + 2, time.time())
        seen = cl.shards(MASTER)
        cl.heal(victim)
        cut["on"] = False
        ok = green_step(cl, greens, problems)
        rec.collect(cl)
        figures.append("%s: writes_resumed=%s acked_late_in_cut=%d" % (
            mode, "%.1fs" % resumed if resumed is not None else "never", acked_late))
        if resumed is None:
            problems.append("cut (%s): writes to every shard never resumed on the majority "
                            "within %.0fs; last probe: %s; _cat/shards: %s" % (
                                mode, FAILOVER_S + 15, last_probe,
                                [(r["shard"], r["prirep"], r["state"], r.get("node"))
                                 for r in seen]))
        if acked_late == 0:
            problems.append("cut (%s): no write acknowledged late in the cut" % mode)
        # the cut node's copies left the in-sync set: the master no longer
        # lists any of them as a started copy
        still = [(r["shard"], r["prirep"]) for r in seen
                 if r.get("node") == victim and r.get("state") == "STARTED"]
        if still:
            problems.append("cut (%s): the master still lists %s's copies %s as STARTED late "
                            "in the cut" % (mode, victim, still))
        if not yellow:
            problems.append("cut (%s): health stayed green with a node cut off" % mode)
        if not ok:
            break
    w.wait_attempted(5000, 30)
    w.finish()
    if w.stats.hangs:
        # bulks carry ?timeout=10s, the client waits 20 s
        problems.append("%d writes got no answer within 20 s (bulk timeout 10s)" % w.stats.hangs)
    finish_row(cl, "R4 partition drop+stall", model, w.stats, rec,
               green_s=max(greens) if greens else None,
               extra=" (%s)%s" % ("; ".join(figures), greens_figure(greens)), problems=problems)


@test
@row
def r5_sigstop(cl, tag):
    model = Model()
    rec = Recoveries()
    victim = "node-3"  # not the master
    w = Writers(cl, model, 2, 1000, all_live(cl), seed=15, bulk_params="?timeout=10s",
                rate=300).start()
    stop = threading.Event()
    s = Searcher(cl, lambda: NAMES, stop, seed=15)
    s.start()
    greens, problems = [], []
    for c in range(3):
        w.wait_attempted(800 * (c + 1), 30)
        cl.sigstop(victim)
        time.sleep(5)
        cl.cont(victim)
        if not green_step(cl, greens, problems):
            break
        rec.collect(cl)
    w.wait_attempted(3200, 30)
    stop.set()
    s.join(30)
    w.finish()
    if s.error:
        problems.append("searcher: %s" % s.error)
    outcomes = {}
    for _, _, o in s.results:
        outcomes[o] = outcomes.get(o, 0) + 1
    # a search through a running node returns within its timeout plus
    # slack; one sent to the stopped node also waits for SIGCONT (5 s)
    slow = [(n, round(lat, 1), o) for n, lat, o in s.results
            if lat > s.timeout_s + 3 + (5 if n == victim else 0)]
    max_lat = max((lat for _, lat, _ in s.results), default=0)
    # a search sent to the stopped node itself may find its deadline gone
    # when the process resumes: a timeout or unavailable error is an
    # answer then, not a hang; through a running node it must not happen
    bad = {}
    for n, _, o in s.results:
        if o not in ("complete", "partial") and not (n == victim and o in ("http_504",
                                                                           "http_503")):
            bad[o] = bad.get(o, 0) + 1
    if bad or slow or w.stats.hangs:
        problems.append("requests past their timeout or malformed: %s slow=%s write_hangs=%d %s"
                        % (bad, slow[:5], w.stats.hangs, s.odd))
    finish_row(cl, "R5 sigstop-5s x3", model, w.stats, rec,
               green_s=max(greens) if greens else None,
               extra=" searches %d %s max_search=%.1fs max_write=%.1fs write_hangs=%d%s" % (
                   len(s.results), outcomes, max_lat, w.stats.max_latency, w.stats.hangs,
                   greens_figure(greens)), problems=problems)


def searches_with_a_node_lost(cl, tag, how):
    """300 searches from 3 threads through node-1 and node-2; after the
    first 100, node-3 is lost: how="kill" (kill -9, connections reset) or
    "stall" (its links stall: connections stay open, nothing answers).
    Every search must come back within its timeout (2 s) plus 3 s,
    complete or partial with failures."""
    model = Model()
    rec = Recoveries()
    victim = "node-3"  # not the master
    w = Writers(cl, model, 2, 2000, all_live(cl), seed=16)  # a fixed corpus first
    w.start()
    w.wait_attempted(3000, 60)
    w.finish()
    cl.wait_green()
    cl.req(MASTER, "POST", "/%s/_refresh" % INDEX)
    st, b = cl.req(MASTER, "GET", "/%s/_count" % INDEX)
    total = b["count"] if st == 200 else None
    stop = threading.Event()
    # a random preference string per search spreads the shard requests
    # over both copies, so the victim's copies are in use when it is lost
    searchers = [Searcher(cl, lambda: ["node-1", "node-2"], stop, n=100, seed=60 + i,
                          client_timeout=10.0, expect_total=total, spread=True)
                 for i in range(3)]
    for s in searchers:
        s.start()
    deadline = time.time() + 60
    while sum(len(s.results) for s in searchers) < 100 and time.time() < deadline:
        time.sleep(0.005)
    if how == "kill":
        cl.kill(victim)
    else:
        cl.cut(victim, "stall")
    for s in searchers:
        s.join(60)
    stop.set()
    results = [r for s in searchers for r in s.results]
    problems = [s.error for s in searchers if s.error]
    outcomes = {}
    for _, _, o in results:
        outcomes[o] = outcomes.get(o, 0) + 1
    lats = sorted(lat for _, lat, _ in results)
    if len(results) != 300:
        problems.append("%d of 300 searches ran" % len(results))
    bad = {o: k for o, k in outcomes.items() if o not in ("complete", "partial")}
    slow = [round(lat, 1) for lat in lats if lat > 2.0 + 3]
    if bad or slow:
        problems.append("searches failed or past their timeout: %s slow=%s %s" % (
            bad, slow[:8], [o for s in searchers for o in s.odd][:3]))
    if how == "kill":
        cl.start(victim)
    else:
        cl.heal(victim)
    finish_row(cl, tag, model, w.stats, rec,
               extra=" searches %d %s p50=%.2fs max=%.2fs (timeout 2s)" % (
                   len(results), outcomes, lats[len(lats) // 2] if lats else 0,
                   lats[-1] if lats else 0), problems=problems)


@test
@row
def r6_node_lost_during_searches(cl, tag):
    searches_with_a_node_lost(cl, "R6 node-killed-during-300-searches", "kill")


@test
@row
def r6b_node_cut_during_searches(cl, tag):
    searches_with_a_node_lost(cl, "R6b node-stalled-during-300-searches", "stall")


@test
@row
def r7_failover(cl, tag):
    model = Model()
    rec = Recoveries()
    victim = "node-2"  # not the master; primary of shards 1 and 4
    before = {(r["shard"], r["prirep"]): r.get("node") for r in cl.shards()}
    victim_primaries = sorted(s for (s, p), n in before.items() if p == "p" and n == victim)
    w = Writers(cl, model, 3, 1500, all_live(cl), seed=17, bulk_params="?timeout=10s",
                timeout=20, rate=300).start()
    w.wait_attempted(1500, 30)
    problems = []
    cl.kill(victim)
    t_kill = time.time()
    resumed, terms, k, last_probe = None, [], 0, ""
    while time.time() < t_kill + FAILOVER_S + 20:
        k += 1
        ok, b, srcs = probe_all_shards(cl, MASTER, prefix="p7-%d" % k)
        record_probe(model, b, srcs)
        if ok:
            resumed = time.time() - t_kill
            terms = sorted(set(list(it.values())[0].get("_primary_term") for it in b["items"]),
                           key=str)
            break
        last_probe = probe_summary(b)
        time.sleep(0.3)
    during = cl.shards()
    promoted = {r["shard"]: r.get("node") for r in during if r["prirep"] == "p"}
    if resumed is None:
        problems.append("writes to every shard never resumed with %s down; last probe: %s; %s" % (
            victim, last_probe, [(r["shard"], r["prirep"], r["state"], r.get("node")) for r in during]))
    w.wait_attempted(3000, 30)
    down_s = time.time() - t_kill
    cl.start(victim)
    greens = []
    green_step(cl, greens, problems)
    rec.collect(cl)
    w.wait_attempted(4500, 30)
    w.finish()
    after = cl.shards()
    roles = sorted((r["shard"], r["prirep"]) for r in after if r.get("node") == victim)
    for s in victim_primaries:
        if promoted.get(s) in (victim, None):
            problems.append("shard %s: no replica promoted while %s was down" % (s, victim))
        elif (s, "r") not in roles:
            problems.append("shard %s: old primary %s did not return as a replica: %s" %
                            (s, victim, roles))
    if w.stats.hangs:
        problems.append("%d writes got no answer within 20 s (bulk timeout 10s)" % w.stats.hangs)
    if resumed is not None and not any(isinstance(t, int) and t >= 2 for t in terms):
        problems.append("primary term not bumped after failover: %s" % terms)
    finish_row(cl, "R7 failover", model, w.stats, rec, green_s=greens[0] if greens else None,
               extra=" writes_resumed_after=%s (failover timeout %s) down=%.1fs terms=%s "
                     "old_primary_roles=%s" % (
                         "%.1fs" % resumed if resumed is not None else "never", FAILOVER,
                         down_s, terms, roles), problems=problems)


@test
@row
def r8_graceful_restarts(cl, tag):
    """Not in the issue's matrix: a rolling restart with SIGTERM under
    writes, each node in turn (the master last), the first one while
    node-3's links were stalled and have just healed (held-back requests
    arrive during the shutdown). Every stop must exit 0 within 20 s."""
    model = Model()
    rec = Recoveries()
    w = Writers(cl, model, 3, 1500, all_live(cl), seed=18, bulk_params="?timeout=10s",
                timeout=40, rate=400).start()
    greens, problems, codes = [], [], []
    for c, name in enumerate(["node-2", "node-3", "node-1"]):
        w.wait_attempted(1000 * (c + 1), 30)
        if c == 0:
            cl.cut("node-3", "stall")
            time.sleep(3)
            cl.heal("node-3")
        try:
            rc = cl.nodes[name].stop(timeout=20)
        except RuntimeError as e:
            rc = str(e)
        codes.append(rc)
        if rc != 0:
            problems.append("%s: SIGTERM under writes exited with %s; log tail:\n%s" % (
                name, rc, cl.log_tail(name, 2500)))
        cl.start(name)
        if not green_step(cl, greens, problems):
            break
        rec.collect(cl)
    w.wait_attempted(4000, 30)
    w.finish()
    finish_row(cl, "R8 sigterm-rolling-restart", model, w.stats, rec,
               green_s=max(greens) if greens else None,
               extra=" exit codes %s%s" % (codes, greens_figure(greens)), problems=problems)


def teardown():
    log("figures:")
    for line in FIGURES:
        log("  " + line)
    return 0


if __name__ == "__main__":
    # 6 minutes on the release build; a sanitizer build may need more
    run_tests(budget_s=float(os.environ.get("SHOAL_REPL_BUDGET", "360")), teardown=teardown)
