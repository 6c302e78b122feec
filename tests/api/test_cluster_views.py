"""Cluster-wide views on a 3-node cluster (the cluster issue's "cluster-wide
views"): _cat/health, _cat/indices, _cat/recovery, _nodes, _nodes/stats and
_cluster/state describe the whole cluster from whichever node is asked,
list the nodes that did not answer, and follow a node's kill and
restart."""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, cluster_file, eq, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-views-test-")
CFILE = os.path.join(TMP, "cluster.json")
NAMES = ["node-1", "node-2", "node-3"]
PORTS = cluster_file(CFILE, [(n, None) for n in NAMES])
NODES = {}
SHARDS = 3
DOCS = 300


def start(n):
    d = os.path.join(TMP, n)
    os.makedirs(d, exist_ok=True)
    NODES[n] = ClusterNode(CFILE, n, PORTS[n][0], data=d)


def green(node="node-1", nodes=3):
    st, b = NODES[node].req("GET", "/_cluster/health?wait_for_status=green&wait_for_nodes=%d"
                            "&timeout=60s" % nodes, timeout=80)
    eq((st, b.get("status")), (200, "green"), "green via %s: %s" % (node, b))


def cat(node, what):
    st, b = NODES[node].req("GET", "/_cat/%s?format=json" % what)
    eq(st, 200, "_cat/%s via %s" % (what, node))
    return b


@test
def views_describe_the_cluster():
    for n in NAMES:
        start(n)
    for n in NAMES:
        green(n)  # every node sees the others (calls to a peer not yet connected fail fast)
    st, b = NODES["node-1"].req("PUT", "/v", {"settings": {"number_of_shards": SHARDS,
                                                           "number_of_replicas": 1}})
    eq(st, 200, "create")
    lines = []
    for i in range(DOCS):
        lines += [{"index": {"_index": "v", "_id": str(i)}}, {"n": i}]
    st, b = NODES["node-2"].bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk: %s" % [it for it in b.get("items", []) if it["index"].get("error")][:2])
    green()
    # one cluster, one uuid: every node names the same, in / and the state
    uuids = set()
    for n in NAMES:
        st, b = NODES[n].req("GET", "/")
        st, cs = NODES[n].req("GET", "/_cluster/state")
        uuids |= {b["cluster_uuid"], cs["cluster_uuid"], cs["metadata"]["cluster_uuid"]}
    eq(len(uuids), 1, "the same cluster_uuid from every node: %s" % uuids)
    for n in NAMES:
        h = cat(n, "health")
        eq(len(h), 1, "one health row")
        eq((h[0]["status"], h[0]["node.total"], h[0]["shards"], h[0]["pri"],
            h[0]["active_shards_percent"]), ("green", "3", str(2 * SHARDS), str(SHARDS),
                                             "100.0%"), "_cat/health via " + n)
        # h= picks and orders columns, s= sorts, as on a solo node
        st, text = NODES[n].req("GET", "/_cat/health?h=node.total,status")
        eq((st, text.split() if isinstance(text, str) else text), (200, ["3", "green"]),
           "_cat/health?h= via " + n)
        st, b = NODES[n].req("GET", "/_cat/shards/v?h=shard,prirep&s=shard:desc&format=json")
        eq([r["shard"] for r in b][:2], [str(SHARDS - 1)] * 2, "_cat/shards?s= via " + n)
        eq(set(b[0]), {"shard", "prirep"}, "_cat/shards?h= via " + n)
        st, b = NODES[n].req("GET", "/_cat/health?h=nope")
        eq(st, 400, "_cat/health?h=nope via " + n)
        ix = cat(n, "indices")
        eq([(r["index"], r["health"], r["pri"], r["rep"], r["docs.count"]) for r in ix],
           [("v", "green", str(SHARDS), "1", str(DOCS))], "_cat/indices via " + n)
        st, b = NODES[n].req("GET", "/_nodes")
        eq((b["_nodes"]["total"], b["_nodes"]["successful"], b["_nodes"]["failed"]),
           (3, 3, 0), "_nodes via " + n)
        eq(sorted(e["name"] for e in b["nodes"].values()), NAMES, "_nodes names via " + n)
        # each node gives its own transport address, not a made-up one
        st, cs = NODES[n].req("GET", "/_cluster/state")
        want = {e["name"]: e["transport_address"] for e in cs["nodes"].values()}
        eq({e["name"]: e["transport_address"] for e in b["nodes"].values()}, want,
           "_nodes transport addresses match _cluster/state via " + n)
        eq(len(set(want.values())), 3, "three distinct transport addresses: %s" % want)
        st, b = NODES[n].req("GET", "/_nodes/stats")
        eq(b["_nodes"]["successful"], 3, "_nodes/stats via " + n)
        for e in b["nodes"].values():
            eq(e["shoal"]["memory"]["replication_in_bytes"] > 0, True,
               "replication memory is accounted on " + e["name"])
            eq(e["indices"]["docs"]["count"] > 0, True, "docs on " + e["name"])
        st, b = NODES[n].req("GET", "/v/_stats")
        v = b["indices"]["v"]
        eq((st, b["_shards"]["total"], b["_shards"]["successful"], b["_nodes"]["successful"],
            v["primaries"]["docs"]["count"], v["total"]["docs"]["count"]),
           (200, 2 * SHARDS, 2 * SHARDS, 3, DOCS, 2 * DOCS), "_stats over the cluster via " + n)
        eq(v["total"]["store"]["size_in_bytes"] > v["primaries"]["store"]["size_in_bytes"] > 0,
           True, "store of every copy > primaries' via " + n)
        st, _, text = NODES[n].raw("GET", "/_prometheus/metrics")
        text = text.decode() if isinstance(text, bytes) else text
        for m in NAMES:
            eq('shoal_node_up{node="%s"} 1' % m in text, True, "%s up in the metrics via %s" % (m, n))
            eq('shoal_index_docs{node="%s",index="v"}' % m in text, True,
               "%s's docs in the metrics via %s" % (m, n))
        eq(text.count("# TYPE shoal_index_docs gauge"), 1, "one TYPE line per metric")
        st, b = NODES[n].req("GET", "/_cluster/state")
        eq((b["master_node"], sorted(b["nodes"])), ("node-1", NAMES), "_cluster/state via " + n)
        rt = b["routing_table"]["indices"]["v"]["shards"]
        eq(sorted(rt), [str(s) for s in range(SHARDS)], "routing of every shard")
        for s, copies in rt.items():
            eq(sorted((c["state"], c["primary"]) for c in copies),
               [("STARTED", False), ("STARTED", True)], "copies of shard %s" % s)
            eq(len({c["node"] for c in copies}), 2, "distinct nodes of shard %s" % s)
    # a node goes: the views say so, and list it as not answering
    NODES["node-3"].kill()
    t0 = time.time()
    while time.time() - t0 < 15:
        h = cat("node-1", "health")
        if h[0]["node.total"] == "2":
            break
        time.sleep(0.2)
    eq(h[0]["node.total"], "2", "node-3 gone from _cat/health")
    eq(h[0]["status"] in ("yellow", "red"), True, "not green with a node down: %s" % h)
    st, b = NODES["node-2"].req("GET", "/_nodes/stats")
    eq((b["_nodes"]["total"], b["_nodes"]["successful"], b["_nodes"]["failed"]), (3, 2, 1),
       "_nodes/stats lists the node that did not answer")
    eq(cat("node-2", "indices")[0]["health"] in ("yellow", "red"), True, "index not green")
    # back: green again, and the recoveries it ran are listed on every node
    NODES["node-3"].restart()
    green(nodes=3)
    for n in NAMES:
        # node-3 leads one shard (its replica resyncs from it) and holds a
        # replica of another (it recovers): both recoveries, run on two
        # different nodes, are listed by every node (a record turns "done"
        # just after the master counted the copy in, i.e. after green)
        t0 = time.time()
        while True:
            rows = cat(n, "recovery")
            mine = [r for r in rows if "node-3" in (r["target_node"], r["source_node"])]
            ok = len(mine) >= 2 and all(r["stage"] == "done" for r in mine)
            if ok or time.time() - t0 > 10:
                break
            time.sleep(0.1)
        eq(ok, True,
           "node-3's recoveries listed via %s: %s" % (n, rows))
        green(n, 3)  # each node's own view of its peers catches up


def teardown():
    for n in NODES.values():
        n.stop()
    shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    run_tests(budget_s=200, teardown=teardown)
