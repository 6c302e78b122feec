"""Scroll over search contexts (issue #11, step 1) on a 3-node cluster and on
a solo node: one context per shard copy on the node that holds it, pages
served by any node, every document exactly once while writes go on (the
contexts are points in time), open_contexts in _nodes/stats, expiry,
clear, the search.max_open_scroll_context limit, slices (by shard, and
with more slices than shards by _id hash: disjoint, covering, the same
for a scroll and a point in time), and a node killed
mid-scroll (the next page fails with search_context_missing_exception in
bounded time, never hangs).

    SHOAL_BIN=build/bin python3 tests/api/test_scroll.py
    SHOAL_TEST_ONLY=solo ...   one test (substring of its name)
"""
import base64
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, error_is, run_tests, test  # noqa: E402

DOCS = 20000
PAGE = 1000
LIMIT = 12  # -E search.max_open_scroll_context, per node
TMP = tempfile.mkdtemp(prefix="shoal-scroll-test-")
CFILE = os.path.join(TMP, "cluster.json")
NAMES = ["node-1", "node-2", "node-3"]
PORTS = cluster_file(CFILE, [(n, None) for n in NAMES])
NODES = {}
SOLO = []


def start(name):
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    NODES[name] = ClusterNode(CFILE, name, PORTS[name][0], data=d,
                              args=["-E", "search.max_open_scroll_context=%d" % LIMIT])


def solo():
    if not SOLO:
        SOLO.append(Node(args=["-E", "search.max_open_scroll_context=%d" % LIMIT]))
    return SOLO[0]


def wait_until(what, fn, timeout=30.0, step=0.05):
    """Polls fn() until it returns a true value; fails after timeout."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(step)
    raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))


def load(n, index, shards, replicas):
    st, b = n.req("PUT", "/" + index, {
        "settings": {"number_of_shards": shards, "number_of_replicas": replicas},
        "mappings": {"properties": {"n": {"type": "long"}, "v": {"type": "long"},
                                    "k": {"type": "keyword"}, "t": {"type": "text"}}}})
    eq(st, 200, "create %s: %s" % (index, b))
    for start_i in range(0, DOCS, 2000):
        lines = []
        for i in range(start_i, min(DOCS, start_i + 2000)):
            lines += [{"index": {"_index": index, "_id": "d%d" % i}},
                      {"n": i, "v": 0, "k": "k%d" % (i % 7), "t": "word%d common" % (i % 13)}]
        st, b = n.bulk(lines)
        eq((st, b.get("errors")), (200, False), "bulk")
    st, b = n.req("POST", "/%s/_refresh" % index)
    eq(st, 200, "refresh")


def open_contexts(nodes):
    """Sum of indices.search.open_contexts over the nodes' own _nodes/stats."""
    total = 0
    for n in nodes:
        st, b = n.req("GET", "/_nodes/stats")
        eq(st, 200, "_nodes/stats")
        for e in b["nodes"].values():
            if len(nodes) == 1 or e["name"] == getattr(n, "name", e["name"]):
                total += e["indices"]["search"]["open_contexts"]
    return total


def context_nodes(scroll_id):
    """The node names a scroll id says its contexts live on."""
    raw = base64.urlsafe_b64decode(scroll_id + "=" * (-len(scroll_id) % 4))
    pos = 2

    def varint():
        nonlocal pos
        v = shift = 0
        while True:
            c = raw[pos]
            pos += 1
            v |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                return v
    varint()  # page size
    names = []
    for _ in range(varint()):
        ln = varint()
        names.append(raw[pos:pos + ln].decode())
        pos += ln + 8
    return names


class Writer(threading.Thread):
    """Updates the original documents (v=1) and adds new ones while a
    scroll runs, on its own connection, refreshing every batch."""

    def __init__(self, port, index):
        threading.Thread.__init__(self, daemon=True)
        self.port, self.index = port, index
        self.stop_ev = threading.Event()
        self.batches = 0
        self.error = None

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        i = 0
        try:
            while not self.stop_ev.is_set():
                lines = []
                for k in range(200):
                    lines.append(json.dumps({"index": {"_index": self.index,
                                                       "_id": "d%d" % ((i * 200 + k) % DOCS)}}))
                    lines.append(json.dumps({"n": -1, "v": 1, "k": "upd"}))
                    lines.append(json.dumps({"index": {"_index": self.index,
                                                       "_id": "new%d-%d" % (i, k)}}))
                    lines.append(json.dumps({"n": DOCS + i, "v": 2, "k": "new"}))
                c.request("POST", "/_bulk?refresh=true", "\n".join(lines) + "\n",
                          {"Content-Type": "application/x-ndjson"})
                r = c.getresponse()
                body = json.loads(r.read())
                if r.status != 200 or body.get("errors"):
                    raise AssertionError("writer bulk: %s %s" % (r.status, str(body)[:300]))
                self.batches += 1
                i += 1
        except Exception as e:  # reported by the test
            self.error = e
        finally:
            c.close()


class Scroll:
    """One scroll, paged through the nodes in turn; checks every page."""

    def __init__(self, nodes, index, body, keep="1m", check_total=True):
        self.nodes, self.keep, self.ids, self.pages, self.done = nodes, keep, [], 0, False
        self.check_total = check_total
        st, b = nodes[0].req("POST", "/%s/_search?scroll=%s" % (index, keep), body)
        eq(st, 200, "scroll start: %s" % b)
        self.sid = b["_scroll_id"]
        self.take(b)

    def take(self, b):
        if self.check_total:
            eq(b["hits"]["total"], {"value": DOCS, "relation": "eq"},
               "total on page %d" % self.pages)
        eq(b["_shards"]["failed"], 0, "shard failures")
        hits = b["hits"]["hits"]
        if not hits:
            self.done = True
            return
        bad = [h for h in hits if self.check_total and h["_source"]["v"] != 0]
        eq(bad[:1], [], "a hit written after the scroll started")
        self.ids += [h["_id"] for h in hits]
        assert len(self.ids) <= DOCS, "more hits than documents"
        self.pages += 1

    def next(self):
        n = self.nodes[self.pages % len(self.nodes)]
        st, b = n.req("POST", "/_search/scroll", {"scroll": self.keep, "scroll_id": self.sid})
        eq(st, 200, "page %d via %s: %s" % (self.pages, getattr(n, "name", "solo"), b))
        eq(b["_scroll_id"], self.sid, "the id stays the same")
        self.take(b)

    def clear(self):
        st, b = self.nodes[-1].req("DELETE", "/_search/scroll", {"scroll_id": self.sid})
        eq(st, 200, "clear: %s" % b)


def exactly_once(ids, what):
    eq(len(ids), DOCS, what + ": hits")
    eq(len(set(ids)), DOCS, what + ": distinct hits")
    eq(set(ids), {"d%d" % i for i in range(DOCS)}, what + ": the documents of the snapshot")


def scrolls_under_writes(nodes, index, port):
    """Three scrolls at once (by _doc, the export order; by a keyword with
    ties; by score), then a writer updating every original document and
    adding new ones while they page: each returns every document of its
    snapshot exactly once, with the source it had."""
    scrolls = {"_doc": Scroll(nodes, index, {"size": PAGE, "sort": ["_doc"]}),
               "keyword": Scroll(nodes, index, {"size": PAGE, "sort": [{"k": "desc"}]}),
               "score": Scroll(nodes, index, {"size": 700, "query": {"match": {"t": "common"}}})}
    w = Writer(port, index)
    w.start()
    try:
        wait_until("the writer's first batch", lambda: w.batches > 0 or w.error)
        while not all(s.done for s in scrolls.values()):
            for s in scrolls.values():
                if not s.done:
                    s.next()
    finally:
        w.stop_ev.set()
        w.join(60)
    assert w.error is None, w.error
    assert w.batches > 1, "the writer ran during the scrolls (%d batches)" % w.batches
    for what, s in scrolls.items():
        exactly_once(s.ids, what)
        s.clear()
    st, b = nodes[0].req("GET", "/%s/_count" % index)
    assert b["count"] > DOCS, "the writes are visible to a new search: %s" % b


def limit_and_clear(nodes, index, contexts_per_scroll_max):
    """Opens scrolls until one is refused with 429; a refused open leaves
    nothing open; clear _all frees every context."""
    before = open_contexts(nodes)
    eq(before, 0, "no context open before")
    opened = []
    refused = None
    for _ in range(LIMIT + 1):
        st, b = nodes[0].req("POST", "/%s/_search?scroll=1m&size=1" % index)
        if st != 200:
            refused = (st, b)
            break
        opened.append(b["_scroll_id"])
    assert refused, "the limit was never reached"
    error_is(refused, 429, "es_rejected_execution_exception", "search.max_open_scroll_context")
    now = open_contexts(nodes)
    assert 0 < now <= len(opened) * contexts_per_scroll_max, (now, len(opened))
    eq(now % len(opened), 0, "only whole scrolls are open (%d contexts, %d scrolls)" %
       (now, len(opened)))
    st, b = nodes[-1].req("DELETE", "/_search/scroll/_all")
    eq((st, b["succeeded"], b["num_freed"]), (200, True, now), "clear _all")
    eq(open_contexts(nodes), 0, "all freed")
    error_is(nodes[0].req("POST", "/_search/scroll", {"scroll_id": opened[0]}), 404,
             "search_context_missing_exception")


def expiry(nodes, index):
    st, b = nodes[0].req("POST", "/%s/_search?scroll=1s" % index, {"size": 10})
    eq(st, 200, "scroll start")
    sid = b["_scroll_id"]
    assert open_contexts(nodes) > 0
    wait_until("the contexts to expire", lambda: open_contexts(nodes) == 0, timeout=20)
    error_is(nodes[-1].req("POST", "/_search/scroll", {"scroll_id": sid}), 404,
             "search_context_missing_exception")


def bad_requests(n, index):
    error_is(n.req("POST", "/_search/scroll", {"scroll_id": "not a scroll id!"}), 400,
             "illegal_argument_exception", "Cannot parse scroll id")
    error_is(n.req("POST", "/_search/scroll", {"scroll_id": "QUJD"}), 400,
             "illegal_argument_exception")
    error_is(n.req("DELETE", "/_search/scroll", {"scroll_id": "%%%"}), 400,
             "illegal_argument_exception")
    error_is(n.req("POST", "/%s/_search?scroll=1m&size=0" % index), 400,
             "action_request_validation_exception")
    error_is(n.req("POST", "/%s/_search?scroll=1m" % index, {"from": 5}), 400,
             "action_request_validation_exception")
    error_is(n.req("POST", "/%s/_search?scroll=2d" % index), 400, "illegal_argument_exception")
    eq(open_contexts([n]) if not NODES else open_contexts(list(NODES.values())), 0,
       "a refused scroll leaves nothing open")


class Pit:
    """search_after paging over a point in time, through the nodes in turn."""

    def __init__(self, nodes, pid, body, size):
        self.nodes, self.pid, self.body, self.size = nodes, pid, body, size
        self.ids, self.pages, self.after, self.done = [], 0, None, False

    def next(self):
        body = dict(self.body, size=self.size, track_total_hits=True,
                    pit={"id": self.pid, "keep_alive": "1m"})
        if self.after is not None:
            body["search_after"] = self.after
        n = self.nodes[self.pages % len(self.nodes)]
        st, b = n.req("POST", "/_search", body)
        eq(st, 200, "pit page %d via %s: %s" % (self.pages, getattr(n, "name", "solo"), b))
        eq(b["pit_id"], self.pid, "pit_id")
        eq(b["hits"]["total"], {"value": DOCS, "relation": "eq"}, "pit total")
        hits = b["hits"]["hits"]
        if not hits:
            self.done = True
            return
        bad = [h for h in hits if h["_source"]["v"] != 0]
        eq(bad[:1], [], "a pit hit written after the pit was opened")
        self.ids += [h["_id"] for h in hits]
        assert len(self.ids) <= DOCS, "more pit hits than documents"
        self.after = hits[-1]["sort"]
        self.pages += 1


def pit_under_writes(nodes, index, port, shards):
    st, b = nodes[0].req("POST", "/%s/_pit?keep_alive=1m" % index)
    eq(st, 200, "pit open: %s" % b)
    pid = b["id"]
    eq(open_contexts(nodes), shards, "one context per shard")
    pages = {"keyword": Pit(nodes, pid, {"sort": [{"k": "asc"}]}, PAGE),
             "score": Pit(nodes, pid, {"query": {"match": {"t": "common"}}}, 900),
             "field desc": Pit(nodes, pid, {"sort": [{"n": "desc"}]}, 1500)}
    w = Writer(port, index)
    w.start()
    try:
        wait_until("the writer's first batch", lambda: w.batches > 0 or w.error)
        while not all(p.done for p in pages.values()):
            for p in pages.values():
                if not p.done:
                    p.next()
    finally:
        w.stop_ev.set()
        w.join(60)
    assert w.error is None, w.error
    assert w.batches > 1, "the writer ran during the paging (%d batches)" % w.batches
    for what, p in pages.items():
        exactly_once(p.ids, "pit " + what)
    # the sort values end with the implicit _shard_doc tiebreaker
    st, b = nodes[-1].req("POST", "/_search", {"size": 1, "sort": ["n"],
                                               "pit": {"id": pid}})
    eq(len(b["hits"]["hits"][0]["sort"]), 2, "sort values: n and _shard_doc")
    # sort on _id, paged with search_after over the same point in time
    sub = Pit(nodes, pid, {"query": {"term": {"k": "k3"}}, "sort": [{"_id": "asc"}]}, 400)
    sub_total = None
    while not sub.done:
        body = dict(sub.body, size=sub.size, pit={"id": pid})
        if sub.after is not None:
            body["search_after"] = sub.after
        st, b = nodes[sub.pages % len(nodes)].req("POST", "/_search", body)
        eq(st, 200, "_id page: %s" % b)
        sub_total = b["hits"]["total"]["value"]
        hits = b["hits"]["hits"]
        if not hits:
            break
        sub.ids += [h["_id"] for h in hits]
        sub.after = hits[-1]["sort"]
        sub.pages += 1
    want = sorted("d%d" % i for i in range(DOCS) if i % 7 == 3)
    eq(sub.ids, want, "sorted by _id, every k3 document once")
    eq(sub_total, len(want), "k3 total")
    # slices of the point in time: disjoint, together everything
    got = []
    for i in range(2):
        sl = Pit(nodes, pid, {"sort": ["_doc"], "slice": {"id": i, "max": 2}}, 2000)
        while not sl.done:
            body = dict(sl.body, size=sl.size, pit={"id": pid})
            if sl.after is not None:
                body["search_after"] = sl.after
            st, b = nodes[i % len(nodes)].req("POST", "/_search", body)
            eq(st, 200, "slice page: %s" % b)
            if not b["hits"]["hits"]:
                break
            sl.ids += [h["_id"] for h in b["hits"]["hits"]]
            sl.after = b["hits"]["hits"][-1]["sort"]
        assert 0 < len(sl.ids) < DOCS, "slice %d has %d hits" % (i, len(sl.ids))
        got += sl.ids
    exactly_once(got, "pit slices")
    st, b = nodes[-1].req("DELETE", "/_pit", {"id": pid})
    eq((st, b), (200, {"succeeded": True, "num_freed": shards}), "pit close")
    eq(open_contexts(nodes), 0, "pit contexts freed")
    error_is(nodes[0].req("POST", "/_search", {"pit": {"id": pid}}), 404,
             "search_context_missing_exception")


def scroll_slices(nodes, index, shards):
    got = []
    for i in range(3):
        sc = Scroll(nodes, index, {"size": PAGE, "sort": ["_doc"],
                                   "slice": {"id": i, "max": 3}}, check_total=False)
        while not sc.done:
            sc.next()
        assert 0 < len(sc.ids) < DOCS, "slice %d has %d hits" % (i, len(sc.ids))
        got += sc.ids
        sc.clear()
    eq(len(got), len(set(got)), "slices are disjoint")
    eq(len(got) >= DOCS, True, "slices cover the index")
    # more slices than shards (ES: each shard's documents split by a hash
    # of _id among the slices it has): disjoint, together every document,
    # none empty, and sliced the same on every page and for a point in time
    st, b = nodes[0].req("GET", "/%s/_count" % index)
    want = b["count"]
    m = shards * 2 + 1
    got, sizes = [], []
    for i in range(m):
        sc = Scroll(nodes, index, {"size": PAGE, "sort": ["_doc"], "query": {"match_all": {}},
                                   "slice": {"id": i, "max": m}}, check_total=False)
        while not sc.done:
            sc.next()
        sizes.append(len(sc.ids))
        got += sc.ids
        sc.clear()
    assert min(sizes) > 0 and max(sizes) < want, "slice sizes %s of %d" % (sizes, want)
    eq((len(got), len(set(got))), (want, want), "%d slices of %d shards" % (m, shards))
    st, b = nodes[0].req("POST", "/%s/_pit?keep_alive=1m" % index)
    eq(st, 200, "pit: %s" % b)
    pid, pgot = b["id"], []
    for i in range(m):
        sl = Pit(nodes, pid, {"sort": ["_doc"], "slice": {"id": i, "max": m}}, 2000)
        sl.ids, after = [], None
        while True:
            body = dict(sl.body, size=sl.size, pit={"id": pid})
            if after is not None:
                body["search_after"] = after
            st, b = nodes[i % len(nodes)].req("POST", "/_search", body)
            eq(st, 200, "pit slice page: %s" % b)
            if not b["hits"]["hits"]:
                break
            sl.ids += [h["_id"] for h in b["hits"]["hits"]]
            after = b["hits"]["hits"][-1]["sort"]
        eq(len(sl.ids), sizes[i], "pit slice %d is the scroll's slice %d" % (i, i))
        pgot += sl.ids
    eq(sorted(pgot), sorted(got), "pit slices = scroll slices")
    nodes[0].req("DELETE", "/_pit", {"id": pid})
    error_is(nodes[0].req("POST", "/%s/_search?scroll=1m" % index,
                          {"slice": {"id": 0, "max": 3, "field": "n"}}), 400,
             "illegal_argument_exception")
    error_is(nodes[0].req("POST", "/%s/_search" % index, {"slice": {"id": 0, "max": 2}}),
             400, "action_request_validation_exception")
    error_is(nodes[0].req("POST", "/%s/_search?scroll=1m" % index,
                          {"slice": {"id": 2, "max": 2}}), 400, "illegal_argument_exception")


def pit_errors(n, index):
    error_is(n.req("POST", "/%s/_pit" % index), 400, "action_request_validation_exception")
    error_is(n.req("POST", "/%s/_pit?keep_alive=soon" % index), 400,
             "illegal_argument_exception")
    error_is(n.req("POST", "/nope/_pit?keep_alive=1m"), 404, "index_not_found_exception")
    error_is(n.req("POST", "/_search", {"pit": {"id": "!!"}}), 400, "illegal_argument_exception")
    error_is(n.req("POST", "/_search", {"pit": {"id": 5}}), 400, "parsing_exception")
    error_is(n.req("POST", "/%s/_search" % index, {"pit": {"id": "UAE"}}), 400,
             "action_request_validation_exception")
    error_is(n.req("DELETE", "/_pit", {}), 400, "action_request_validation_exception")


# ---- solo ----

@test
def solo_scroll_exactly_once_under_writes():
    n = solo()
    load(n, "s", 3, 0)
    scrolls_under_writes([n], "s", n.port)
    eq(open_contexts([n]), 0, "cleared")


@test
def solo_scroll_limit_expiry_clear_and_errors():
    n = solo()
    limit_and_clear([n], "s", 3)
    expiry([n], "s")
    bad_requests(n, "s")


@test
def solo_pit_slices_and_id_sort():
    n = solo()
    load(n, "sp", 3, 0)
    pit_under_writes([n], "sp", n.port, 3)
    scroll_slices([n], "s", 3)
    pit_errors(n, "s")


# ---- 3-node cluster ----

@test
def cluster_scroll_exactly_once_under_writes():
    for name in NAMES:
        start(name)
    for name in NAMES:
        st, b = NODES[name].req("GET", "/_cluster/health?wait_for_status=green&wait_for_nodes=3"
                                "&timeout=60s", timeout=80)
        eq((st, b.get("status")), (200, "green"), "green via %s" % name)
    load(NODES["node-2"], "c", 6, 1)
    st, b = NODES["node-1"].req("GET", "/_cluster/health?wait_for_status=green&timeout=60s",
                                timeout=80)
    eq(b.get("status"), "green", "green after the load")
    nodes = [NODES[x] for x in NAMES]
    scrolls_under_writes(nodes, "c", NODES["node-3"].port)
    eq(open_contexts(nodes), 0, "cleared")


@test
def cluster_scroll_contexts_live_on_the_copies():
    nodes = [NODES[x] for x in NAMES]
    st, b = nodes[0].req("POST", "/c/_search?scroll=1m", {"size": 5, "sort": ["_doc"]})
    eq(st, 200, "scroll start")
    sid = b["_scroll_id"]
    where = context_nodes(sid)
    eq(len(where), 6, "one context per shard")
    per_node = {}
    for n in nodes:
        st, s = n.req("GET", "/_nodes/stats")
        for e in s["nodes"].values():
            if e["name"] == n.name:
                per_node[n.name] = e["indices"]["search"]["open_contexts"]
    eq(per_node, {x: where.count(x) for x in NAMES}, "open_contexts per node match the id")
    st, b = nodes[2].req("DELETE", "/_search/scroll/" + sid)
    eq((st, b["num_freed"]), (200, 6), "clear by path")
    eq(open_contexts(nodes), 0, "freed on every node")


@test
def cluster_scroll_limit_expiry_clear_and_errors():
    nodes = [NODES[x] for x in NAMES]
    limit_and_clear(nodes, "c", 6)
    expiry(nodes, "c")
    bad_requests(nodes[1], "c")


@test
def cluster_pit_slices_and_id_sort():
    nodes = [NODES[x] for x in NAMES]
    load(NODES["node-3"], "cp", 6, 1)
    st, b = nodes[0].req("GET", "/_cluster/health?wait_for_status=green&timeout=60s",
                         timeout=80)
    eq(b.get("status"), "green", "green after the load")
    pit_under_writes(nodes, "cp", NODES["node-2"].port, 6)
    scroll_slices(nodes, "c", 6)
    pit_errors(nodes[1], "c")


@test
def cluster_node_killed_mid_scroll():
    nodes = [NODES[x] for x in NAMES]
    st, b = nodes[0].req("POST", "/c/_search?scroll=1m", {"size": 100, "sort": ["_doc"]})
    eq(st, 200, "scroll start")
    sid = b["_scroll_id"]
    where = context_nodes(sid)
    victim = next(x for x in where if x != "node-1")  # keep the master
    st, b = nodes[0].req("POST", "/_search/scroll", {"scroll": "1m", "scroll_id": sid})
    eq(st, 200, "a page before the kill")
    NODES[victim].kill()
    t0 = time.time()
    resp = nodes[0].req("POST", "/_search/scroll", {"scroll": "1m", "scroll_id": sid},
                        timeout=40)
    took = time.time() - t0
    error_is(resp, 404, "search_context_missing_exception", victim)
    assert took < 20, "the failed page took %.1fs" % took
    # the contexts on the live nodes are still freed by a clear
    st, b = nodes[0].req("DELETE", "/_search/scroll", {"scroll_id": sid})
    eq(st, 200, "clear after the kill: %s" % b)
    live = [NODES[x] for x in NAMES if x != victim]
    eq(open_contexts(live), 0, "the live nodes' contexts are freed")


def teardown():
    rc = 0
    for n in list(NODES.values()) + SOLO:
        r = n.cleanup()
        if r not in (0, None, -9) and n.proc and n.proc.returncode != -9:
            rc = r
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=600, teardown=teardown)
