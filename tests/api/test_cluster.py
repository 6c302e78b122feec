"""A static cluster of real processes: 3 data nodes and a coordinator-only
node, an index with 6 shards and 1 replica. Bulk through one node, search
through every node, compare with a model and with a solo node over the same
documents; kill -9 nodes (complete results from the other copies, yellow;
both copies of a shard gone: partial results, never a hang); restart (green,
same answers); master down (metadata 503, reads and writes go on); a node
with a wrong secret is refused; an oversized transport message is refused."""
import json
import os
import random
import shutil
import socket
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-cluster-test-")
CFILE = os.path.join(TMP, "cluster.json")
NAMES = ["node-1", "node-2", "node-3"]
PORTS = cluster_file(CFILE, [(n, None) for n in NAMES] + [("coord", ["coordinator"])])
NODES = {}
SOLO = None
N_DOCS = 600
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
DOCS = {}
ALL = ["node-1", "node-2", "node-3", "coord"]


def start(name):
    data = os.path.join(TMP, name)
    os.makedirs(data, exist_ok=True)
    args = ["--role", "coordinator"] if name == "coord" else []
    NODES[name] = ClusterNode(CFILE, name, PORTS[name][0], data=data, args=args)
    return NODES[name]


def health(node, want=None, timeout="20s"):
    q = "?wait_for_status=%s&timeout=%s" % (want, timeout) if want else ""
    if want == "green":
        q += "&wait_for_nodes=4"
    st, b = NODES[node].req("GET", "/_cluster/health" + q, timeout=40)
    return st, b


def all_green():
    """Every node's own view: green with all 4 nodes reachable."""
    for n in ALL:
        st, b = health(n, "green", "30s")
        eq((st, b["status"], b["number_of_nodes"]), (200, "green", 4), "health on " + n)


def make_docs():
    rnd = random.Random(7)
    for i in range(N_DOCS):
        DOCS[str(i)] = {
            "n": i,
            "price": rnd.randint(1, 1000),
            "tag": rnd.choice(["red", "green", "blue", "black"]),
            "body": " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(2, 9))),
        }


def bulk_lines(index, ids):
    out = []
    for i in ids:
        out.append({"index": {"_index": index, "_id": i}})
        out.append(DOCS[i])
    return out


CREATE = {"settings": {"number_of_shards": 6, "number_of_replicas": 1},
          "mappings": {"properties": {"n": {"type": "long"}, "price": {"type": "long"},
                                      "tag": {"type": "keyword"}, "body": {"type": "text"}}}}

QUERIES = [
    {"query": {"match": {"body": "alpha delta"}}, "size": 25},
    {"query": {"match_all": {}}, "sort": [{"price": "desc"}, {"n": "asc"}], "from": 40,
     "size": 30},
    {"query": {"term": {"tag": "red"}}, "sort": ["n"], "size": 10, "from": 100},
    {"size": 0, "aggs": {"tags": {"terms": {"field": "tag"}},
                         "p": {"stats": {"field": "price"}},
                         "h": {"histogram": {"field": "price", "interval": 250},
                               "aggs": {"avg_n": {"avg": {"field": "n"}}}}}},
    {"query": {"bool": {"must": {"match": {"body": "echo"}},
                        "filter": {"range": {"price": {"gte": 200, "lt": 700}}}}},
     "size": 15},
]


def strip(b):
    """The parts of a search reply that must agree across nodes."""
    b = dict(b)
    b.pop("took", None)
    return b


def same_scores(a, b, what):
    ha, hb = a["hits"]["hits"], b["hits"]["hits"]
    eq([h["_id"] for h in ha], [h["_id"] for h in hb], what + " ids")
    for x, y in zip(ha, hb):
        if (x["_score"] is None) != (y["_score"] is None) or (
                x["_score"] is not None and abs(x["_score"] - y["_score"]) > 1e-6):
            raise AssertionError("%s: score %r vs %r" % (what, x["_score"], y["_score"]))
        eq(x.get("sort"), y.get("sort"), what + " sort values")
        eq(x["_source"], y["_source"], what + " source")
    eq(a["hits"]["total"], b["hits"]["total"], what + " total")
    eq(a.get("aggregations"), b.get("aggregations"), what + " aggregations")


@test
def t01_start_and_create():
    make_docs()
    for n in ALL:
        start(n)
    for n in ALL:
        st, b = NODES[n].req("GET", "/_cluster/health?wait_for_nodes=4&timeout=20s", timeout=30)
        eq((st, b["number_of_nodes"]), (200, 4), "every node sees the others (%s)" % n)
    # created through a node that is not the master: forwarded to it
    st, b = NODES["node-2"].req("PUT", "/ix", CREATE)
    eq(st, 200, "create %s" % b)
    st, b = NODES["node-3"].req("PUT", "/small", {
        "settings": {"number_of_shards": 3, "number_of_replicas": 1}})
    eq(st, 200, "create small %s" % b)
    st, b = health("coord", "green")
    eq((st, b["status"]), (200, "green"), "health %s" % b)
    eq(b["number_of_nodes"], 4, "nodes")
    eq(b["number_of_data_nodes"], 3, "data nodes")
    eq(b["active_shards"], 18, "6x2 + 3x2 copies")
    # every node knows the mapping the master published
    for n in ALL:
        st, m = NODES[n].req("GET", "/ix/_mapping")
        eq(m["ix"]["mappings"]["properties"]["tag"], {"type": "keyword"}, "mapping on " + n)
    # ... and names the index with the master's uuid
    uuids = set()
    for n in ALL:
        st, s = NODES[n].req("GET", "/ix/_settings")
        uuids.add(s["ix"]["settings"]["index"]["uuid"])
    eq(len(uuids), 1, "one uuid for [ix] on every node: %s" % uuids)


@test
def t02_bulk_through_one_node():
    ids = list(DOCS)
    st, b = NODES["node-2"].bulk(bulk_lines("ix", ids))
    eq(st, 200, "bulk")
    eq(b["errors"], False, "bulk errors %s" % [i for i in b["items"] if "error" in
                                               list(i.values())[0]][:2])
    st, b = NODES["coord"].bulk(bulk_lines("small", ids[:90]))
    eq(b["errors"], False, "bulk small")
    st, b = NODES["node-1"].req("POST", "/ix,small/_refresh")
    eq(b["_shards"]["failed"], 0, "refresh")
    # every copy holds its shard's documents (replicas included)
    st, rows = NODES["node-1"].req("GET", "/_cat/shards/ix?format=json")
    docs = {}
    for r in rows:
        if r["index"] == "ix":
            docs.setdefault(r["shard"], []).append(int(r["docs"]))
    eq(len(docs), 6, "shards in _cat/shards")
    for s, d in docs.items():
        eq(len(d), 2, "copies of shard %s" % s)
        eq(d[0], d[1], "primary and replica docs of shard %s" % s)
    eq(sum(d[0] for d in docs.values()), N_DOCS, "docs over the primaries")


@test
def t03_every_node_equals_model():
    expect_ids = sorted(DOCS, key=lambda i: (-DOCS[i]["price"], int(i)))
    for n in ALL:
        st, b = NODES[n].req("GET", "/ix/_count")
        eq(b["count"], N_DOCS, "_count via " + n)
        st, b = NODES[n].req("POST", "/ix/_search", {
            "sort": [{"price": "desc"}, {"n": "asc"}], "size": 50, "from": 120})
        eq(st, 200, "search via " + n)
        eq(b["_shards"], {"total": 6, "successful": 6, "skipped": 0, "failed": 0}, "shards")
        eq([h["_id"] for h in b["hits"]["hits"]], expect_ids[120:170], "page via " + n)
        st, b = NODES[n].req("POST", "/ix/_search", {
            "size": 0, "aggs": {"t": {"terms": {"field": "tag"}},
                                "s": {"sum": {"field": "price"}}}})
        model = {}
        for d in DOCS.values():
            model[d["tag"]] = model.get(d["tag"], 0) + 1
        eq({x["key"]: x["doc_count"] for x in b["aggregations"]["t"]["buckets"]}, model,
           "terms via " + n)
        eq(b["aggregations"]["s"]["value"], sum(d["price"] for d in DOCS.values()), "sum")
        st, b = NODES[n].req("GET", "/ix/_doc/17")
        eq((st, b["_source"]), (200, DOCS["17"]), "GET via " + n)
        st, b = NODES[n].req("GET", "/_cat/count/ix?format=json")
        eq(b[0]["count"], str(N_DOCS), "_cat/count via " + n)
        st, b = NODES[n].req("GET", "/ix/_search?q=tag:blue&size=0")
        eq(b["hits"]["total"]["value"], sum(1 for d in DOCS.values() if d["tag"] == "blue"),
           "q= via " + n)


@test
def t04_equal_to_solo_node():
    global SOLO
    SOLO = Node()
    st, _ = SOLO.req("PUT", "/ix", CREATE)
    eq(st, 200, "solo create")
    st, b = SOLO.bulk(bulk_lines("ix", list(DOCS)))
    eq(b["errors"], False, "solo bulk")
    SOLO.refresh("ix")
    for qi, q in enumerate(QUERIES):
        st, want = SOLO.req("POST", "/ix/_search", q)
        eq(st, 200, "solo q%d" % qi)
        for n in ALL:
            for mode in ("per_shard", "serial", "per_node"):
                st, got = NODES[n].req("POST", "/ix/_search?fanout=" + mode, q)
                eq(st, 200, "q%d via %s %s: %s" % (qi, n, mode, got))
                same_scores(got, want, "q%d via %s %s" % (qi, n, mode))


@test
def t05_preference():
    q = {"sort": ["n"], "size": 5}
    for pref in ("_local", "_primary", "abc", "xyz"):
        st, b = NODES["node-1"].req("POST", "/ix/_search?preference=" + pref, q)
        eq(b["_shards"]["successful"], 6, "preference " + pref)
        eq([h["_id"] for h in b["hits"]["hits"]], ["0", "1", "2", "3", "4"], pref)
    # node-1 holds copies of shards 0, 2, 3, 5 (copy r of s on (s + r) mod 3)
    st, b = NODES["coord"].req("POST", "/ix/_search?preference=_only_nodes:node-1", q)
    eq((b["_shards"]["successful"], b["_shards"]["failed"]), (4, 2), "_only_nodes:node-1")
    # a shard with no copy the preference allows fails as ES's
    # NoShardAvailableActionException
    eq(sorted(f["reason"]["type"] for f in b["_shards"]["failures"]),
       ["no_shard_available_action_exception"] * 2, "failure type: %s" % b["_shards"])
    st, b = NODES["node-2"].req("POST", "/ix/_search?preference=_only_local", q)
    eq(b["_shards"]["successful"], 4, "_only_local on node-2")


@test
def t05d_realtime_get_from_remote_copies():
    """The coordinator-only node holds no copy: every realtime get is a typed
    GetRequest to a data node, and the reply keeps 64-bit figures exact and
    the source byte for byte."""
    big = 2 ** 53 + 1  # a double would read it as 2^53
    st, b = NODES["node-1"].req("PUT", "/rtget", {
        "settings": {"number_of_shards": 2, "number_of_replicas": 1}})
    eq(st, 200, "create rtget %s" % b)
    st, b = health("coord", "green")
    eq(b["status"], "green", "green with rtget")
    src = '{"tag":"t\\u00e9\\"q\\"","n":-0.5,"s":"\\\\ \\n x"}'
    st, b = NODES["coord"].req("PUT", "/rtget/_doc/gbig?version=%d&version_type=external" % big,
                               json.loads(src))
    eq((st, b["_version"]), (201, big), "external version %s" % b)
    for pref in ["", "_primary", "_local", "sess-7", "_prefer_nodes:node-3"]:
        q = "?preference=" + pref if pref else ""
        st, g = NODES["coord"].req("GET", "/rtget/_doc/gbig" + q)
        eq((st, g["found"], g["_version"]), (200, True, big), "get %s: %s" % (pref, g))
        eq(g["_source"], json.loads(src), "source through %s" % (pref or "any copy"))
        eq(g["_primary_term"] >= 1 and g["_seq_no"] >= 0, True, "seq_no and term")
    st, g = NODES["coord"].req("GET", "/rtget/_source/gbig")
    eq((st, g), (200, json.loads(src)), "_source endpoint")
    st, g = NODES["coord"].req("POST", "/_mget?preference=_primary",
                               {"docs": [{"_index": "rtget", "_id": "gbig"},
                                         {"_index": "rtget", "_id": "nope"}]})
    eq([d["found"] for d in g["docs"]], [True, False], "mget %s" % g)
    eq(g["docs"][0]["_version"], big, "mget version")
    st, g = NODES["coord"].req("GET", "/rtget/_doc/nope")
    eq((st, g["found"]), (404, False), "a missing document")
    st, g = NODES["coord"].req("GET", "/rtget/_doc/gbig?preference=_shards:x")
    eq(st, 400, "a malformed preference: %s" % g)
    st, b = NODES["coord"].req("DELETE", "/rtget/_doc/gbig?version=%d&version_type=external" %
                               (big + 1))
    eq((st, b["result"]), (200, "deleted"), "delete")
    st, b = NODES["coord"].req("DELETE", "/rtget")
    eq(st, 200, "delete rtget %s" % b)


@test
def t05b_dynamic_mapping_and_auto_create():
    # a new field through a non-master coordinator reaches every node's
    # mapping through the master; an index auto-created by a bulk exists
    # everywhere and takes writes on every primary
    st, b = NODES["coord"].bulk([{"index": {"_index": "ix", "_id": "extra"}},
                                 {"n": 10000, "color": "teal"},
                                 {"index": {"_index": "auto", "_id": "a1"}}, {"x": 1},
                                 {"index": {"_index": "auto", "_id": "a2"}}, {"x": 2},
                                 {"index": {"_index": "auto", "_id": "a3"}}, {"x": 3}])
    eq(b["errors"], False, "bulk with a new field and a new index: %s" % b)
    time.sleep(0.2)
    for n in ALL:
        st, m = NODES[n].req("GET", "/ix/_mapping")
        if "color" not in m["ix"]["mappings"]["properties"]:
            raise AssertionError("dynamic field missing on %s" % n)
        st, _ = NODES[n].req("HEAD", "/auto")
        eq(st, 200, "auto-created index on " + n)
    NODES["node-3"].req("POST", "/ix,auto/_refresh")
    st, b = NODES["node-1"].req("GET", "/auto/_count")
    eq(b["count"], 3, "auto index count")
    st, b = NODES["node-2"].req("GET", "/ix/_search?q=color:teal")
    eq([h["_id"] for h in b["hits"]["hits"]], ["extra"], "search on the new field")
    st, b = NODES["node-2"].req("DELETE", "/ix/_doc/extra?refresh=true")
    eq(st, 200, "delete through a node: %s" % b)
    st, b = NODES["coord"].req("GET", "/ix/_count")
    eq(b["count"], N_DOCS, "count after the delete")


@test
def t05a_settings_through_the_master():
    st, b = NODES["node-3"].req("PUT", "/ix/_settings", {"index": {"refresh_interval": "2s"}})
    eq(st, 200, "put settings: %s" % b)
    for n in ALL:
        st, b = NODES[n].req("GET", "/ix/_settings")
        eq(b["ix"]["settings"]["index"].get("refresh_interval"), "2s", "settings on " + n)
    # the replica count changes through the master too (new copies recover;
    # see test_replica_count.py), and back
    for reps in (2, 1):
        st, b = NODES["coord"].req("PUT", "/ix/_settings", {"index": {"number_of_replicas": reps}})
        eq((st, b.get("acknowledged")), (200, True), "replicas -> %d: %s" % (reps, b))
        all_green()
        st, b = NODES["node-2"].req("GET", "/_cat/shards/ix?format=json")
        eq(len(b), 6 * (1 + reps), "copies with %d replicas" % reps)


@test
def t05e_max_shards_per_node():
    """cluster.max_shards_per_node times the 3 data nodes bounds the shard
    copies of open indices: a create or a replica change past it is a 400
    validation_exception, as in Elasticsearch, and changes nothing."""
    st, b = NODES["node-2"].req("PUT", "/_cluster/settings",
                                {"persistent": {"cluster.max_shards_per_node": 0}})
    eq((st, b["error"]["type"]), (400, "illegal_argument_exception"), "a limit of 0: %s" % b)
    st, b = NODES["node-2"].req("PUT", "/_cluster/settings",
                                {"persistent": {"cluster.max_shards_per_node": 10}})
    eq(st, 200, "limit 10 per node: %s" % b)
    st, rows = NODES["coord"].req("GET", "/_cat/shards?format=json")
    held = len(rows)
    st, b = NODES["coord"].req("PUT", "/toomany", {
        "settings": {"number_of_shards": 16, "number_of_replicas": 0}})
    eq((st, b["error"]["type"]), (400, "validation_exception"), "create past the limit: %s" % b)
    eq(b["error"]["reason"],
       "Validation Failed: 1: this action would add [16] total shards, but this cluster "
       "currently has [%d]/[30] maximum shards open;" % held, "the reason")
    for n in ALL:
        st, _ = NODES[n].req("HEAD", "/toomany")
        eq(st, 404, "no [toomany] on " + n)
    st, b = NODES["node-1"].req("PUT", "/small/_settings", {"index": {"number_of_replicas": 9}})
    eq((st, b["error"]["type"]), (400, "validation_exception"), "replicas past it: %s" % b)
    st, s = NODES["node-3"].req("GET", "/small/_settings")
    eq(s["small"]["settings"]["index"]["number_of_replicas"], "1", "replicas unchanged")
    st, b = NODES["coord"].req("PUT", "/fits", {
        "settings": {"number_of_shards": 1, "number_of_replicas": 0}})
    eq(st, 200, "a create under the limit: %s" % b)
    st, b = NODES["coord"].req("DELETE", "/fits")
    eq(st, 200, "delete fits")
    st, b = NODES["node-2"].req("PUT", "/_cluster/settings",
                                {"persistent": {"cluster.max_shards_per_node": None}})
    eq(st, 200, "limit reset: %s" % b)
    st, b = NODES["coord"].req("PUT", "/toomany", {
        "settings": {"number_of_shards": 16, "number_of_replicas": 0}})
    eq(st, 200, "the default limit (1,000 per node) takes it: %s" % b)
    st, b = NODES["coord"].req("DELETE", "/toomany")
    eq(st, 200, "delete toomany")
    all_green()


@test
def t05f_health_of_some_indices():
    """_cluster/health/{index} answers for those indices' shards (it
    answered for the whole cluster); a missing index is red and, as in
    Elasticsearch, waited for until the timeout (408)."""
    st, b = NODES["coord"].req("PUT", "/lonely", {
        "settings": {"number_of_shards": 1, "number_of_replicas": 3}})
    eq(st, 200, "create lonely (1 primary, 3 replicas, 3 data nodes): %s" % b)
    for n in ("coord", "node-2"):
        st, b = NODES[n].req("GET", "/_cluster/health/lonely?wait_for_active_shards=3&timeout=30s",
                             timeout=40)
        eq((st, b["status"], b["active_primary_shards"], b["active_shards"],
            b["unassigned_shards"], b["number_of_nodes"]), (200, "yellow", 1, 3, 1, 4),
           "health of lonely on %s: %s" % (n, b))
        st, b = NODES[n].req("GET", "/_cluster/health/ix?wait_for_status=green&timeout=30s",
                             timeout=40)
        eq((st, b["status"], b["active_primary_shards"], b["active_shards"],
            b["unassigned_shards"]), (200, "green", 6, 12, 0), "health of ix on %s: %s" % (n, b))
        st, b = NODES[n].req("GET", "/_cluster/health/ix,lonely")
        eq((st, b["status"], b["active_primary_shards"]), (200, "yellow", 7),
           "health of both on %s: %s" % (n, b))
        st, b = NODES[n].req("GET", "/_cluster/health")
        eq(b["status"], "yellow", "the cluster's health on %s: %s" % (n, b))
        st, b = NODES[n].req("GET", "/_cluster/health/nosuch?timeout=500ms", timeout=10)
        eq((st, b["status"], b["timed_out"]), (408, "red", True), "a missing index: %s" % b)
    st, b = NODES["coord"].req("DELETE", "/lonely")
    eq(st, 200, "delete lonely")
    all_green()


@test
def t05c_hung_node_retried_within_deadline():
    # SIGSTOP: the node holds its connections but never answers; the
    # coordinator gives each attempt half the time left, then retries on
    # another copy, within the request's timeout
    import signal
    p = NODES["node-3"].proc
    p.send_signal(signal.SIGSTOP)
    try:
        t0 = time.time()
        st, b = NODES["coord"].req("POST", "/ix/_search?preference=_only_nodes:node-3,node-1,node-2",
                                   dict(QUERIES[1], timeout="3s"), timeout=20)
        took = time.time() - t0
        eq(st, 200, "search with a hung node")
        eq(b["_shards"]["successful"], 6, "every shard from a live copy: %s" % b["_shards"])
        if took > 4:
            raise AssertionError("took %.1fs with a 3s timeout" % took)
    finally:
        p.send_signal(signal.SIGCONT)
    all_green()


@test
def t06_kill_one_node():
    st, before = NODES["coord"].req("POST", "/ix/_search", QUERIES[1])
    NODES["node-2"].kill()
    for n in ("node-1", "node-3", "coord"):
        t0 = time.time()
        st, b = NODES[n].req("POST", "/ix/_search", QUERIES[1])
        eq(b["_shards"]["successful"], 6, "complete results via %s after kill: %s" %
           (n, b["_shards"]))
        same_scores(b, before, "after kill via " + n)
        if time.time() - t0 > 5:
            raise AssertionError("search took %.1fs" % (time.time() - t0))
        st, c = NODES[n].req("GET", "/ix/_count")
        eq(c["count"], N_DOCS, "count after kill")
    deadline = time.time() + 5  # the liveness check pings every 0.5 s
    while True:
        st, b = health("coord")
        if b["status"] != "green" or time.time() > deadline:
            break
        time.sleep(0.1)
    # node-2 held primaries: red until the master promotes their replicas
    # (cluster.primary_failover_timeout, 30 s by default).
    eq(b["status"], "red", "health after one kill")
    eq(b["number_of_nodes"], 3, "nodes after one kill")
    st, b = NODES["node-1"].req("GET", "/ix/_doc/1")
    eq((st, b.get("found")), (200, True), "GET with a copy down")


@test
def t07_write_with_a_primary_down():
    # A scratch index without replicas: items on node-2's shards fail
    # (503) while it is down, the others are acknowledged.
    st, b = NODES["node-1"].req("PUT", "/w", {
        "settings": {"number_of_shards": 3, "number_of_replicas": 0}})
    eq(st, 200, "create w with node-2 down (master up): %s" % b)
    lines = []
    for i in range(30):
        lines.append({"index": {"_index": "w", "_id": str(i)}})
        lines.append({"n": i})
    st, b = NODES["coord"].bulk(lines)
    eq(st, 200, "bulk")
    failed = [list(i.values())[0] for i in b["items"] if list(i.values())[0].get("error")]
    ok = [list(i.values())[0] for i in b["items"] if not list(i.values())[0].get("error")]
    if not failed or not ok:
        raise AssertionError("expected some items on node-2's shard to fail: %d/%d" %
                             (len(failed), len(ok)))
    for f in failed:
        eq(f["status"], 503, "status of an item whose primary is down")
        eq(f["error"]["type"], "unavailable_shards_exception", "type")
    NODES["coord"].req("POST", "/w/_refresh")
    st, c = NODES["node-1"].req("GET", "/w/_search?size=0&preference=_only_nodes:node-1,node-3")
    eq(c["hits"]["total"]["value"], len(ok), "acknowledged writes are searchable")


def unreachable_failure(b, what):
    # a copy whose node is gone fails as Elasticsearch says it: not
    # connected (the connection went during the call) or a failed
    # connect (none is up), not a timeout, and the search did not time out
    t = b["_shards"]["failures"][0]["reason"]["type"]
    if t not in ("node_not_connected_exception", "connect_transport_exception"):
        raise AssertionError("%s: the failure says %s: %s" % (what, t, b["_shards"]))
    eq(b["timed_out"], False, "%s: timed_out" % what)


@test
def t08_both_copies_down_partial_never_hangs():
    # shard 1 of "small" lives on node-2 and node-3 only
    NODES["node-3"].kill()
    t0 = time.time()
    st, b = NODES["coord"].req("GET", "/small/_search?size=100", timeout=20)
    took = time.time() - t0
    eq(st, 200, "partial search %s" % b)
    eq(b["_shards"]["failed"], 1, "failed shards")
    eq(b["_shards"]["successful"], 2, "successful shards")
    eq(len(b["_shards"]["failures"]), 1, "failures[]")
    eq(b["_shards"]["failures"][0]["shard"], 1, "the failed shard")
    unreachable_failure(b, "default fan-out")
    if took > 10:
        raise AssertionError("partial search took %.1fs" % took)
    for mode in ("serial", "per_node"):
        st, b = NODES["coord"].req("GET", "/small/_search?size=100&fanout=" + mode, timeout=20)
        eq((b["_shards"]["failed"], b["_shards"]["successful"]), (1, 2), "partial " + mode)
        unreachable_failure(b, mode)
    # a timeout bounds it too
    st, b = NODES["coord"].req("GET", "/small/_search?size=0&timeout=2s", timeout=20)
    eq(b["_shards"]["failed"], 1, "with timeout")
    unreachable_failure(b, "with timeout")
    st, b = health("coord")
    eq(b["status"], "red", "health with both copies of a shard gone")


@test
def t09_restart_green_same_answers():
    start("node-2")
    start("node-3")
    all_green()
    for qi, q in enumerate(QUERIES):
        st, want = SOLO.req("POST", "/ix/_search", q)
        for n in ALL:
            st, got = NODES[n].req("POST", "/ix/_search", q)
            eq(got["_shards"]["failed"], 0, "after restart via " + n)
            same_scores(got, want, "after restart q%d via %s" % (qi, n))


@test
def t10_master_down():
    NODES["node-1"].stop()
    deadline = time.time() + 10
    while True:
        st, b = NODES["coord"].req("PUT", "/later")
        if st == 503 or time.time() > deadline:
            break
        time.sleep(0.2)
    eq(st, 503, "create with the master down: %s" % b)
    eq(b["error"]["type"], "master_not_discovered_exception", "type")
    if "master" not in b["error"]["reason"]:
        raise AssertionError("reason should name the master: %s" % b["error"]["reason"])
    st, b = NODES["coord"].req("POST", "/ix/_search", QUERIES[1])
    eq(b["_shards"]["successful"], 6, "searches go on")
    # a write to a shard whose primary lives on node-2 goes on too (shard 1)
    st, b = NODES["node-3"].req("GET", "/ix/_doc/17")
    eq(st, 200, "gets go on")
    start("node-1")
    all_green()
    st, b = NODES["coord"].req("PUT", "/later")
    eq(st, 200, "create once the master is back: %s" % b)
    st, b = NODES["node-3"].req("DELETE", "/later")
    eq(st, 200, "delete through a non-master")
    time.sleep(0.3)
    for n in ALL:
        st, _ = NODES[n].req("HEAD", "/later")
        eq(st, 404, "deleted everywhere (%s)" % n)


@test
def t11_wrong_secret_refused():
    bad_file = os.path.join(TMP, "bad.json")
    spec = json.load(open(CFILE))
    spec["secret"] = "not-the-secret"
    hp = PORTS["coord"][0]
    # the intruder takes a new name and ports, everything else is the same
    import shoal
    ihp, itp = shoal.free_port(), shoal.free_port()
    spec["nodes"].append({"name": "intruder", "http": "127.0.0.1:%d" % ihp,
                          "transport": "127.0.0.1:%d" % itp, "roles": ["coordinator"]})
    json.dump(spec, open(bad_file, "w"))
    d = os.path.join(TMP, "intruder")
    os.makedirs(d, exist_ok=True)

    st, b = NODES["coord"].req("GET", "/_cat/master?h=node")
    master = NODES.get(b.strip()) if st == 200 else None
    eq(master is not None, True, "the master is known: %s" % (b,))

    def refusals():
        # how often the master refused a message (the wrong secret)
        total = 0
        for node in (master,):
            try:
                with open(os.path.join(node.data, "test-node.log"), "rb") as f:
                    total += f.read().count(b"refused a message")
            except OSError:
                pass
        return total

    before = refusals()
    bad = ClusterNode(bad_file, "intruder", ihp, data=d, args=["--role", "coordinator"])
    try:
        # The intruder's first messages go out once its dialers connect,
        # which its HTTP port does not wait for; until then a change is
        # "not available" rather than "refused". Wait for the master to
        # have refused one of them (its state poll), then ask.
        deadline = time.time() + 30
        while refusals() == before and time.time() < deadline:
            time.sleep(0.1)
        eq(refusals() > before, True, "the master refused the intruder's messages")
        st, b = bad.req("PUT", "/intrusion")
        eq(st, 503, "create through a wrong-secret node: %s" % b)
        if "refused" not in b["error"]["reason"]:
            raise AssertionError("reason: %s" % b["error"]["reason"])
        st, _ = NODES["coord"].req("HEAD", "/intrusion")
        eq(st, 404, "nothing created")
        st, b = bad.req("GET", "/ix/_search")
        eq(st, 404, "the intruder never got the metadata")
    finally:
        bad.cleanup()
    assert hp


@test
def t12_oversized_transport_message_refused():
    port = PORTS["node-3"][1]
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        # SP handshake as a REQ peer (protocol 0x30), then a 1 GiB frame
        s.sendall(b"\x00SP\x00\x00\x30\x00\x00")
        hdr = s.recv(8)
        eq(hdr[:4], b"\x00SP\x00", "handshake")
        s.sendall(struct.pack(">Q", 1 << 30) + b"\x80\x00\x00\x01" + b"x" * 1000)
        t0 = time.time()
        closed = False
        while time.time() - t0 < 5:
            try:
                if s.recv(4096) == b"":
                    closed = True
                    break
            except ConnectionResetError:
                closed = True
                break
            except socket.timeout:
                break
        if not closed:
            raise AssertionError("node-3 kept the connection of an oversized message open")
    finally:
        s.close()
    st, b = NODES["coord"].req("GET", "/ix/_count")
    eq(b["count"], N_DOCS, "the cluster still serves")


def teardown():
    rc = 0
    # every node is stopped even when one of them fails to
    for n in list(NODES.values()) + ([SOLO] if SOLO else []):
        try:
            r = n.cleanup()
        except Exception as e:  # noqa: BLE001
            print("cleanup failed: %r" % (e,))
            n.kill()
            r = -1
        if r not in (0, None):
            rc = r
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=170, teardown=teardown)
