"""Tail-tolerant fan-out (#15): adaptive copy selection, hedged shard
requests, their cancellation and budget, and `preference`. Three data
nodes and a coordinator-only node; every data node's transport sits behind
a delay-proxy, and node-1's proxy is restarted with impairments (extra
delay, stalls) to make it the slow copy. Assertions are on behaviour with
wide margins (which copy answered, counters, identical results), never on
tight timings. Real processes; stdlib only.

    SHOAL_BIN=build/bin python3 tests/api/test_tail.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import (ClusterNode, Node, error_is, eq, free_port, run_tests,  # noqa: E402
                   shoal_bin, test)

SLOW = "node-1"
DOCS = 3000
TERMS = 20
C = None  # the shared cluster


def proxy_bin():
    return os.path.join(os.path.dirname(shoal_bin()), "delay-proxy")


class TailCluster:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="shoal-tail-")
        self.spec = []
        self.proxies = {}
        self.nodes = {}
        for nm in ["node-0", "node-1", "node-2", "coord"]:
            e = {"name": nm, "http": "127.0.0.1:%d" % free_port(),
                 "transport": "127.0.0.1:%d" % free_port()}
            if nm == "coord":
                e["roles"] = ["coordinator"]
            else:
                e["connect"] = "127.0.0.1:%d" % free_port()
            self.spec.append(e)
        self.file = os.path.join(self.dir, "cluster.json")
        with open(self.file, "w") as f:
            json.dump({"cluster_name": "tail-test", "secret": "tail-secret",
                       "nodes": self.spec}, f)
        try:
            for e in self.spec:
                if "connect" in e:
                    self.proxy(e["name"], [])
            for e in self.spec:
                d = os.path.join(self.dir, e["name"])
                os.makedirs(d)
                args = []
                if e["name"] == "coord":
                    # -E at start: checked in settings_from_e_and_dynamic
                    args = ["--role", "coordinator", "-E", "search.hedge.min_delay=3ms",
                            "-E", "search.hedge.max_ratio=0.25"]
                self.nodes[e["name"]] = ClusterNode(self.file, e["name"],
                                                    int(e["http"].split(":")[1]), d, args)
        except BaseException:
            self.cleanup()
            raise
        self.coord = self.nodes["coord"]

    def proxy(self, name, args):
        """(Re)starts the delay-proxy in front of node `name` with args."""
        e = [x for x in self.spec if x["name"] == name][0]
        old = self.proxies.get(name)
        if old is not None:
            old.terminate()
            old.wait(10)
        log = open(os.path.join(self.dir, "proxy-%s.log" % name), "ab")
        p = subprocess.Popen([proxy_bin(), "--listen", e["connect"], "--to", e["transport"]] +
                             list(args), stdout=log, stderr=log)
        log.close()
        self.proxies[name] = p
        time.sleep(0.1)
        if old is not None:
            self.wait_nodes()

    def wait_nodes(self, timeout=30):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            st, b = self.coord.req("GET", "/_cluster/health", timeout=10)
            last = b
            if st == 200 and b.get("number_of_nodes") == 4 and b.get("status") == "green":
                time.sleep(0.6)  # a ping round: every node marked alive again
                return
            time.sleep(0.2)
        raise AssertionError("cluster not whole: %s" % last)

    def cleanup(self):
        rcs = [(n, x.cleanup()) for n, x in self.nodes.items()]
        for p in self.proxies.values():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rcs


def settings(body):
    st, b = C.coord.req("PUT", "/_cluster/settings", {"transient": body})
    eq(st, 200, "PUT _cluster/settings %s: %s" % (body, b))
    time.sleep(1.2)  # every node takes it in on its next monitor round (500 ms)


def stats(name):
    st, b = C.coord.req("GET", "/_nodes/stats")
    eq(st, 200, "_nodes/stats")
    for v in b["nodes"].values():
        if v.get("name") == name:
            return v
    raise AssertionError("no stats for %s: %s" % (name, list(b["nodes"])))


def hedging(name="coord"):
    return stats(name)["shoal"]["hedging"]


def query(i, profile=False):
    b = {"query": {"term": {"t": "v%d" % (i % TERMS)}}, "sort": [{"n": "asc"}], "size": 10,
         "track_total_hits": True}
    if profile:
        b["profile"] = True
    return b


def search(i, pref=None, profile=True, timeout=30, fanout=None):
    q = []
    if pref:
        q.append("preference=" + pref)
    if fanout:
        q.append("fanout=" + fanout)
    path = "/tail/_search" + ("?" + "&".join(q) if q else "")
    st, b = C.coord.req("POST", path, query(i, profile), timeout=timeout)
    eq(st, 200, "search: %s" % b)
    return b


def answered(b):
    """{shard: (node, hedged, hedge_won)} from a profiled reply."""
    return {s["shard"]: (s["node"], s["hedged"], s["hedge_won"]) for s in b["profile"]["shards"]}


def shape(b):
    return (b["hits"]["total"]["value"], [h["_id"] for h in b["hits"]["hits"]],
            b["_shards"]["successful"], b["_shards"]["failed"])


PLACE = {}  # shard -> {"p": node, "r": node}
BASE = {}   # query number -> shape without hedging and without a slow node


def setup():
    global C
    C = TailCluster()
    C.wait_nodes(60)
    st, b = C.coord.req("PUT", "/tail", {
        "settings": {"number_of_shards": 3, "number_of_replicas": 1},
        "mappings": {"properties": {"t": {"type": "keyword"}, "n": {"type": "integer"},
                                    "body": {"type": "text"}}}})
    eq(st, 200, "create index: %s" % b)
    lines = []
    for i in range(DOCS):
        lines.append({"index": {"_index": "tail", "_id": str(i)}})
        lines.append({"t": "v%d" % (i % TERMS), "n": i,
                      "body": "word%d common text %d" % (i % 97, i)})
    st, b = C.coord.bulk(lines, params="?refresh=true")
    bad = [it for it in (b.get("items") or []) if list(it.values())[0].get("status", 0) >= 300]
    eq((st, b.get("errors")), (200, False), "bulk (first failed items: %s)" % bad[:3])
    C.wait_nodes(60)
    st, rows = C.coord.req("GET", "/_cat/shards/tail?format=json")
    eq(st, 200, "_cat/shards")
    for r in rows:
        PLACE.setdefault(int(r["shard"]), {})[r["prirep"]] = r["node"]
    eq(sorted(PLACE), [0, 1, 2], "placement %s" % rows)
    for s, p in PLACE.items():
        if p.get("p") == p.get("r") or None in (p.get("p"), p.get("r")):
            raise AssertionError("shard %d copies: %s" % (s, p))
    settings({"search.hedge.enabled": False})
    for i in range(TERMS):
        BASE[i] = shape(search(i, profile=False))
        eq(BASE[i][0], DOCS // TERMS, "hits of query %d" % i)
    settings({"search.hedge.enabled": None})


def slow_shards():
    return [s for s, p in PLACE.items() if SLOW in p.values()]


@test
def settings_from_e_and_dynamic():
    h = hedging()
    eq((h["min_delay_ns"], h["max_ratio"]), (3000000, 0.25), "-E values in _nodes/stats")
    for k, v, part in [("search.hedge.max_ratio", "x", "search.hedge.max_ratio"),
                       ("search.hedge.max_ratio", -1, ">= [0.0]"),
                       ("search.hedge.max_ratio", 2, "<= [1.0]"),
                       ("search.hedge.min_delay", "soon", "time value"),
                       ("search.hedge.enabled", "maybe", "[true] or [false]"),
                       ("cluster.routing.use_adaptive_replica_selection", "yes", "[true]")]:
        for sec in ("transient", "persistent"):
            error_is(C.coord.req("PUT", "/_cluster/settings", {sec: {k: v}}), 400,
                     "illegal_argument_exception", part)
    eq(hedging()["max_ratio"], 0.25, "a refused value changes nothing")
    # a bad -E value stops the node at start (exit 2, naming the setting)
    d = tempfile.mkdtemp(prefix="shoal-tail-e-", dir=C.dir)
    f = os.path.join(d, "one.json")
    with open(f, "w") as fh:
        json.dump({"cluster_name": "tail-e", "secret": "s", "nodes": [
            {"name": "solo", "http": "127.0.0.1:%d" % free_port(),
             "transport": "127.0.0.1:%d" % free_port()}]}, fh)
    for kv in ("search.hedge.max_ratio=x", "search.hedge.min_delay=-3ms",
               "cluster.routing.use_adaptive_replica_selection=maybe"):
        p = subprocess.run([shoal_bin(), "--cluster", f, "--name", "solo", "--data", d,
                            "--log-level", "warn", "-E", kv], capture_output=True, timeout=60)
        eq(p.returncode, 2, "exit code with -E %s (%s)" % (kv, p.stderr[-300:]))
        if kv.split("=")[0].encode() not in p.stderr:
            raise AssertionError("-E %s: %s" % (kv, p.stderr[-300:]))
    st, b = C.coord.req("PUT", "/_cluster/settings",
                        {"persistent": {"search": {"hedge": {"max_ratio": 0.5}}},
                         "transient": {"search.hedge.min_delay": "4ms"}})
    eq(st, 200, "nested and flat settings: %s" % b)
    time.sleep(1.2)
    h = hedging()
    eq((h["min_delay_ns"], h["max_ratio"]), (4000000, 0.5), "dynamic values")
    st, b = C.coord.req("GET", "/_cluster/settings?flat_settings=true")
    eq(b["persistent"].get("search.hedge.max_ratio"), "0.5", "GET _cluster/settings")
    C.coord.req("PUT", "/_cluster/settings",
                {"persistent": {"search.hedge.max_ratio": None},
                 "transient": {"search.hedge.min_delay": None}})
    time.sleep(1.2)
    h = hedging()
    eq((h["min_delay_ns"], h["max_ratio"]), (3000000, 0.25), "reset to the -E values")


@test
def preference_values_behave_as_in_es():
    for bad in ("_foo", "_only_nodes:", "_prefer_nodes:", "_shards"):
        error_is(C.coord.req("POST", "/tail/_search?preference=" + bad, query(0)), 400,
                 "illegal_argument_exception", "no Preference for")
        error_is(C.coord.req("GET", "/tail/_doc/1?preference=" + bad), 400,
                 "illegal_argument_exception", "no Preference for")
    # a get follows the preference too: each shard has copies on two of the
    # three data nodes, so exactly one _only_nodes:<node> misses the doc
    for doc in ("1", "2", "3"):
        got = {}
        for nd in ("node-0", "node-1", "node-2"):
            st, b = C.coord.req("GET", "/tail/_doc/%s?preference=_only_nodes:%s" % (doc, nd))
            got[nd] = st
        eq(sorted(got.values()), [200, 200, 503], "get %s by node: %s" % (doc, got))
        st, b = C.coord.req("GET", "/tail/_doc/%s?preference=_prefer_nodes:node-9" % doc)
        eq((st, b.get("found")), (200, True), "get with _prefer_nodes")
    # _only_nodes: only that node's copies answer; the other shards fail
    b = search(1, "_only_nodes:node-0")
    a = answered(b)
    for s, p in PLACE.items():
        if "node-0" in p.values():
            eq(a[s][0], "node-0", "_only_nodes shard %d" % s)
    holds = sum(1 for p in PLACE.values() if "node-0" in p.values())
    eq((b["_shards"]["successful"], b["_shards"]["failed"]), (holds, 3 - holds),
       "_only_nodes:node-0 _shards")
    # _prefer_nodes: that node where it has a copy (unless a hedge to the
    # other copy answered first: _prefer_nodes may hedge), another elsewhere
    for i in range(5):
        a = answered(search(i, "_prefer_nodes:node-2"))
        for s, p in PLACE.items():
            if "node-2" in p.values() and not a[s][2]:
                eq(a[s][0], "node-2", "_prefer_nodes shard %d" % s)
    # _primary: the primary copy
    a = answered(search(2, "_primary"))
    for s, p in PLACE.items():
        eq(a[s][0], p["p"], "_primary shard %d" % s)
    # a custom string: the same copy every time
    seen = {}
    for i in range(8):
        for s, v in answered(search(i, "session-42")).items():
            seen.setdefault(s, set()).add(v[0])
    eq([len(v) for v in seen.values()], [1, 1, 1], "custom preference sticks: %s" % seen)
    # _local / _only_local on a node without copies (the coordinator)
    eq(shape(search(3, "_local", profile=False)), BASE[3], "_local on the coordinator")
    st, b = C.coord.req("POST", "/tail/_search?preference=_only_local", query(3))
    if st == 200:
        eq(b["_shards"]["successful"], 0, "_only_local without local copies")
    else:
        eq(st, 503, "_only_local without local copies: %s" % b)
    # a data node's _only_local: its own copies only
    st, b = C.nodes["node-0"].req("POST", "/tail/_search?preference=_only_local", query(3, True))
    eq(st, 200, "_only_local on node-0: %s" % b)
    for s, v in answered(b).items():
        eq(v[0], "node-0", "_only_local shard %d" % s)


@test
def ranking_avoids_a_slow_node_and_returns_to_it():
    settings({"search.hedge.enabled": False,
              "cluster.routing.use_adaptive_replica_selection": True})
    C.proxy(SLOW, ["--extra-ms", "60"])
    mine = slow_shards()

    def share(secs):
        n = hits = 0
        t_end = time.time() + secs
        i = 0
        while time.time() < t_end:
            a = answered(search(i))
            i += 1
            for s in mine:
                n += 1
                hits += a[s][0] == SLOW
        return hits / max(n, 1), n

    share(2.0)  # learn
    frac, n = share(3.0)
    if frac > 0.35:
        raise AssertionError("slow node still chosen for %.0f%% of %d shard requests" %
                             (frac * 100, n))
    C.proxy(SLOW, [])
    best = 0
    deadline = time.time() + 25
    while time.time() < deadline:
        frac, n = share(2.0)
        best = max(best, frac)
        if frac >= 0.15:
            break
    if best < 0.15:
        raise AssertionError("recovered node chosen for at most %.0f%% of shard requests"
                             % (best * 100))
    st = stats("coord")["adaptive_selection"]
    eq(sorted(st), ["node-0", "node-1", "node-2"], "adaptive_selection nodes")
    for k in ("avg_response_time_ns", "avg_service_time_ns", "avg_queue_size",
              "outgoing_searches", "rank"):
        if k not in st[SLOW]:
            raise AssertionError("adaptive_selection lacks %s: %s" % (k, st[SLOW]))
    if not st[SLOW]["avg_service_time_ns"] > 0:
        raise AssertionError("no service time reported: %s" % st[SLOW])


@test
def hedge_answers_a_stalled_shard_and_cancels_the_loser():
    settings({"search.hedge.enabled": True, "search.hedge.max_ratio": 1,
              "cluster.routing.use_adaptive_replica_selection": False})
    for i in range(30):  # fast samples for the slow node's p95
        search(i, "_prefer_nodes:" + SLOW)
    h0, d0 = hedging(), hedging(SLOW)
    # 200 ms each way: pings (1 s deadline) still pass, so the node stays
    # alive and preferred, and its shard requests need a hedge
    C.proxy(SLOW, ["--extra-ms", "200"])
    mine = slow_shards()
    # until the coordinator holds the slow node alive again through its
    # new, slow link (the first ping after the redial may time out)
    deadline = time.time() + 15
    while time.time() < deadline:
        a = answered(search(0, "_prefer_nodes:" + SLOW))
        if any(a[s][1] for s in mine):
            break
        time.sleep(0.2)
    h0 = hedging()
    won = 0
    seen = []
    for i in range(8):
        t = time.time()
        b = search(i, "_prefer_nodes:" + SLOW)
        took = time.time() - t
        eq(shape(b), BASE[i], "hedged results of query %d" % i)
        a = answered(b)
        seen.append((round(took, 3), a))
        if all(a[s][0] != SLOW and a[s][1] and a[s][2] for s in mine) and took < 0.3:
            won += 1
    if won < 6:
        raise AssertionError("only %d of 8 searches answered by hedges within 0.3 s: %s" %
                             (won, seen))
    h1 = hedging()
    if h1["won"] - h0["won"] < 6 * len(mine) or h1["cancelled"] - h0["cancelled"] < 6:
        raise AssertionError("hedge counters: before %s after %s" % (h0, h1))
    # per_node: the straggling node's shards are hedged together
    won = 0
    seen = []
    for i in range(6):
        t = time.time()
        b = search(i, "_prefer_nodes:" + SLOW, fanout="per_node")
        took = time.time() - t
        eq(shape(b), BASE[i], "per_node hedged results of query %d" % i)
        a = answered(b)
        seen.append((round(took, 3), a))
        if all(a[s][0] != SLOW and a[s][1] and a[s][2] for s in mine) and took < 0.3:
            won += 1
    if won < 4:
        raise AssertionError("per_node: only %d of 6 searches answered by hedges: %s" %
                             (won, seen))
    # _shards: restricts the shards and leaves the hedging to what follows it
    pref = "_shards:%s|_prefer_nodes:%s" % (",".join(map(str, mine)), SLOW)
    won = 0
    seen = []
    for i in range(6):
        a = answered(search(i, pref))
        seen.append(a)
        eq(sorted(a), sorted(mine), "shards searched under %s" % pref)
        if all(a[s][0] != SLOW and a[s][1] and a[s][2] for s in mine):
            won += 1
    if won < 4:
        raise AssertionError("%s: only %d of 6 searches answered by hedges: %s" %
                             (pref, won, seen))
    # the stalled copy's work: its cancels arrive (behind the delayed requests)
    C.proxy(SLOW, ["--stall-ms", "400", "--stall-every-ms", "800"])
    deadline = time.time() + 20
    while time.time() < deadline:
        search(0, "_prefer_nodes:" + SLOW, profile=False)
        d1 = hedging(SLOW)
        if d1["cancels_received"] > d0["cancels_received"] and d1["stopped"] > d0["stopped"]:
            break
    else:
        raise AssertionError("slow node: cancels before %s after %s" % (d0, hedging(SLOW)))
    C.proxy(SLOW, [])


@test
def no_hedge_for_writes_gets_or_pinned_preference():
    settings({"search.hedge.enabled": True, "search.hedge.max_ratio": 1,
              "search.hedge.min_delay": "2ms",
              "cluster.routing.use_adaptive_replica_selection": False})
    C.proxy(SLOW, ["--extra-ms", "40"])
    h0 = hedging()
    for i in range(10):
        lines = [{"index": {"_index": "tail", "_id": "w%d" % i}}, {"t": "w", "n": DOCS + i}]
        st, b = C.coord.bulk(lines)
        eq((st, b.get("errors")), (200, False), "write")
        st, b = C.coord.req("GET", "/tail/_doc/w%d?preference=_prefer_nodes:%s" % (i, SLOW))
        eq(st, 200, "get")
    for i in range(10):
        b = search(i, "_only_nodes:%s,node-0,node-2" % SLOW)
        eq(shape(b)[0], BASE[i][0], "_only_nodes totals")
        for s, v in answered(b).items():
            eq(v[1], False, "hedged under _only_nodes")
        b = search(i, "_shards:0,1,2|_only_nodes:%s,node-0,node-2" % SLOW)
        for s, v in answered(b).items():
            eq(v[1], False, "hedged under _shards:..|_only_nodes")
        search(i, "sticky-%d" % i)
    h1 = hedging()
    eq(h1["sent"] - h0["sent"], 0, "hedges sent for writes, gets, _only_nodes, custom strings")
    C.proxy(SLOW, [])
    st, b = C.coord.req("POST", "/tail/_delete_by_query?refresh=true",
                        {"query": {"term": {"t": "w"}}})
    eq(st, 200, "cleanup: %s" % b)


@test
def budget_holds_and_results_match_over_2000_searches():
    settings({"search.hedge.enabled": True, "search.hedge.max_ratio": 0.05,
              "search.hedge.min_delay": "2ms",
              "cluster.routing.use_adaptive_replica_selection": False})
    C.proxy(SLOW, ["--extra-ms", "25", "--extra-pct", "30"])
    h0 = hedging()
    bad = []
    lock = threading.Lock()
    count = [0]

    def worker(k):
        node = Node.__new__(Node)  # a client only: one connection per thread
        node.port, node.conn = C.coord.port, None
        for i in range(k, 2000, 4):
            pref = "_prefer_nodes:" + SLOW if i % 2 else None
            path = "/tail/_search" + ("?preference=" + pref if pref else "")
            st, b = node.req("POST", path, query(i), timeout=30)
            with lock:
                count[0] += 1
                if st != 200 or shape(b) != BASE[i % TERMS]:
                    bad.append((i, st, shape(b) if st == 200 else b))
        node.close_conn()

    ths = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(120)
    eq(count[0], 2000, "searches run")
    if bad:
        raise AssertionError("%d searches differ from the unhedged results, first %s" %
                             (len(bad), bad[:3]))
    h1 = hedging()
    sent = h1["sent"] - h0["sent"]
    reqs = h1["shard_requests"] - h0["shard_requests"]
    if reqs < 2000 * 3:
        raise AssertionError("shard requests counted: %d" % reqs)
    if sent > 0.05 * reqs + h1["burst"]:
        raise AssertionError("budget exceeded: %d hedges for %d shard requests" % (sent, reqs))
    if sent == 0:
        raise AssertionError("no hedge at all against a slow copy: %s" % h1)
    C.proxy(SLOW, [])


def tail_copies(name="coord"):
    return [c for c in hedging(name)["copies"] if c["index"] == "tail"]


@test
def per_copy_figures_in_nodes_stats():
    settings({"search.hedge.enabled": None, "search.hedge.max_ratio": None,
              "search.hedge.min_delay": None,
              "cluster.routing.use_adaptive_replica_selection": None})
    # every copy measured: each node's copies preferred in turn, then ranked
    for nd in ("node-0", "node-1", "node-2"):
        for i in range(5):
            search(i, "_prefer_nodes:" + nd, profile=False)
    for i in range(40):
        search(i, profile=False, fanout="per_node" if i % 4 == 0 else None)
    # losers' replies may still be on their way: outstanding settles to 0.
    # Each request ends by its deadline (30 s by default,
    # DEFAULT_DEADLINE_NS), so that is the bound; on an idle machine it
    # takes well under a second, but a loaded one (a run beside three
    # builds) once needed more than 10 s.
    deadline = time.time() + 31
    while True:
        cps = tail_copies()
        if all(c["outstanding"] == 0 for c in cps) or time.time() > deadline:
            break
        time.sleep(0.2)
    for c in cps:
        eq(c["outstanding"], 0, "outstanding after the searches: %s" % c)
        for k in ("shard", "node", "ewma_response_ms", "service_ms", "p95_ms", "replies",
                  "failures", "rank", "requests_sent"):
            if k not in c:
                raise AssertionError("copy figures lack %s: %s" % (k, c))
        if c["node"] not in PLACE[c["shard"]].values():
            raise AssertionError("a copy on a node without that shard: %s (%s)" % (c, PLACE))
    keys = sorted((c["shard"], c["node"]) for c in cps)
    eq(len(keys), len(set(keys)), "one entry per copy: %s" % keys)
    eq(sorted({k[0] for k in keys}), [0, 1, 2], "every shard has a copy ranked: %s" % keys)
    used = [c for c in cps if c["replies"] > 0]
    for c in used:
        if not (c["ewma_response_ms"] > 0 and c["p95_ms"] > 0 and c["service_ms"] > 0):
            raise AssertionError("a copy that replied without figures: %s" % c)
    # the figures are the copy's, not its node's: two copies on one node
    # (each node holds two of the six) differ
    by_node = {}
    for c in used:
        by_node.setdefault(c["node"], []).append(c)
    pairs = [v for v in by_node.values() if len(v) >= 2]
    if not pairs:
        raise AssertionError("no node with two copies measured: %s" % cps)
    if not any(len({(c["ewma_response_ms"], c["service_ms"]) for c in v}) > 1 for v in pairs):
        raise AssertionError("copies on one node share their figures: %s" % pairs)
    # the per-node summary is still there (ES's adaptive_selection)
    eq(sorted(stats("coord")["adaptive_selection"]), ["node-0", "node-1", "node-2"],
       "adaptive_selection nodes")


def ids_of(st_b, what):
    st, b = st_b
    eq(st, 200, "%s: %s" % (what, b))
    return b, {h["_id"] for h in b["hits"]["hits"]}


def shards_search(pref, extra="", body=None):
    return C.coord.req("POST", "/tail/_search?preference=%s%s" % (pref, extra),
                       body or {"query": {"range": {"n": {"lt": DOCS}}}, "size": DOCS,
                                "profile": True, "_source": False})


@test
def shards_preference_restricts_the_shards():
    per = {}
    for s in range(3):
        b, ids = ids_of(shards_search("_shards:%d" % s), "_shards:%d" % s)
        eq(b["_shards"]["total"], 1, "_shards:%d total" % s)
        eq(sorted(answered(b)), [s], "_shards:%d searched" % s)
        eq(b["hits"]["total"]["value"], len(ids), "_shards:%d hits" % s)
        if not 0 < len(ids) < DOCS:
            raise AssertionError("_shards:%d: %d docs" % (s, len(ids)))
        per[s] = ids
    eq(per[0] | per[1] | per[2], {str(i) for i in range(DOCS)}, "the shards' docs, together")
    eq(len(per[0]) + len(per[1]) + len(per[2]), DOCS, "each doc in one shard")
    # a list, with spaces and repeats; per_node fan-out alike
    for pref, extra in (("_shards:0,2", ""), ("_shards:2,%200,0", ""),
                        ("_shards:0,2", "&fanout=per_node")):
        b, ids = ids_of(shards_search(pref, extra), pref + extra)
        eq((b["_shards"]["total"], ids), (2, per[0] | per[2]), pref + extra)
    # then another preference picks the copy
    for kind in ("p", "r"):
        nd = PLACE[1][kind]
        b, ids = ids_of(shards_search("_shards:1|_only_nodes:" + nd), "_only_nodes")
        eq((ids, answered(b)[1][0]), (per[1], nd), "_shards:1|_only_nodes:" + nd)
        b, ids = ids_of(shards_search("_shards:1|_prefer_nodes:" + nd), "_prefer_nodes")
        # _prefer_nodes may hedge (only pinning preferences do not): on a
        # busy machine the preferred copy can be slower than the hedge
        # delay and the other copy's answer win; the preferred copy is
        # still the one asked first
        node, hedged, won = answered(b)[1]
        eq(ids, per[1], "_shards:1|_prefer_nodes:" + nd)
        if won:
            eq((hedged, node != nd), (True, True), "a won hedge for _prefer_nodes:" + nd)
        else:
            eq(node, nd, "_shards:1|_prefer_nodes:" + nd)
    b, ids = ids_of(shards_search("_shards:1|_primary"), "_primary")
    eq((ids, answered(b)[1][0]), (per[1], PLACE[1]["p"]), "_shards:1|_primary")
    for pref in ("_shards:1|sticky", "_shards:1|_local", "_shards:1|"):
        b, ids = ids_of(shards_search(pref), pref)
        eq(ids, per[1], pref)
    # a shard number the index does not have matches nothing (as ES)
    b, ids = ids_of(shards_search("_shards:1,7"), "_shards:1,7")
    eq((b["_shards"]["total"], ids), (1, per[1]), "_shards:1,7")
    b, ids = ids_of(shards_search("_shards:9"), "_shards:9")
    eq((b["_shards"]["total"], b["hits"]["total"]["value"]), (0, 0), "_shards:9")
    # _count takes it too
    st, b = C.coord.req("POST", "/tail/_count?preference=_shards:0,1",
                        {"query": {"range": {"n": {"lt": DOCS}}}})
    eq((st, b.get("count"), b.get("_shards", {}).get("total")),
       (200, len(per[0]) + len(per[1]), 2), "_count with _shards:0,1: %s" % b)
    # _msearch: the header's preference, else the URL's
    q = {"query": {"range": {"n": {"lt": DOCS}}}, "size": DOCS, "_source": False}
    body = "".join(json.dumps(x) + "\n" for x in (
        {"index": "tail", "preference": "_shards:0"}, q, {"index": "tail"}, q,
        {"index": "tail", "preference": "_shards:x"}, q))
    st, b = C.coord.req("POST", "/_msearch?preference=_shards:2", body,
                        {"Content-Type": "application/x-ndjson"})
    eq(st, 200, "_msearch: %s" % b)
    r = b["responses"]
    eq(({h["_id"] for h in r[0]["hits"]["hits"]}, r[0]["_shards"]["total"]), (per[0], 1),
       "_msearch header _shards:0")
    eq(({h["_id"] for h in r[1]["hits"]["hits"]}, r[1]["_shards"]["total"]), (per[2], 1),
       "_msearch URL _shards:2")
    eq((r[2].get("status"), r[2].get("error", {}).get("type")),
       (400, "illegal_argument_exception"), "_msearch bad header preference: %s" % r[2])
    # bad forms: 400 with the reason
    for bad, why in (("_shards:", "no shard numbers"), ("_shards:,", "no shard numbers"),
                     ("_shards:x", "not a shard number"), ("_shards:1,2x", "not a shard number"),
                     ("_shards:|_local", "no shard numbers"),
                     ("_shards:1|_bogus", "no Preference for [_bogus]"),
                     ("_shards:1|_shards:2", "given twice")):
        error_is(shards_search(bad), 400, "illegal_argument_exception", why)
        error_is(C.coord.req("POST", "/tail/_count?preference=" + bad, {}), 400,
                 "illegal_argument_exception", why)


@test
def shards_preference_on_a_solo_node():
    n = Node()
    try:
        st, b = n.req("PUT", "/solo", {"settings": {"number_of_shards": 3}})
        eq(st, 200, "create: %s" % b)
        lines = []
        for i in range(300):
            lines.append({"index": {"_index": "solo", "_id": str(i)}})
            lines.append({"n": i})
        st, b = n.bulk(lines, params="?refresh=true")
        eq((st, b.get("errors")), (200, False), "bulk")
        per = {}
        for s in range(3):
            st, b = n.req("POST", "/solo/_search?preference=_shards:%d" % s, {"size": 300})
            eq(st, 200, "solo _shards:%d: %s" % (s, b))
            eq(b["_shards"]["total"], 1, "solo _shards:%d total" % s)
            per[s] = {h["_id"] for h in b["hits"]["hits"]}
            if not 0 < len(per[s]) < 300:
                raise AssertionError("solo _shards:%d: %d docs" % (s, len(per[s])))
            st, c = n.req("GET", "/solo/_count?preference=_shards:%d" % s)
            eq((st, c["count"], c["_shards"]["total"]), (200, len(per[s]), 1), "solo _count")
        eq(per[0] | per[1] | per[2], {str(i) for i in range(300)}, "solo: the shards together")
        st, b = n.req("POST", "/solo/_search?preference=_shards:0,2|_local", {"size": 300})
        eq((st, {h["_id"] for h in b["hits"]["hits"]}), (200, per[0] | per[2]),
           "solo _shards:0,2|_local")
        error_is(n.req("POST", "/solo/_search?preference=_shards:a", {}), 400,
                 "illegal_argument_exception", "not a shard number")
        error_is(n.req("GET", "/solo/_count?preference=_shards:"), 400,
                 "illegal_argument_exception", "no shard numbers")
    finally:
        n.cleanup()


def teardown():
    rcs = C.cleanup() if C else []
    bad = [r for r in rcs if r[1] not in (0, None)]
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        setup()
    except BaseException:
        teardown()  # a setup that failed leaves no node running
        raise
    run_tests(budget_s=200, teardown=teardown)
