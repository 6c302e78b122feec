"""number_of_replicas on a live index of a 3-node cluster (M8 of the
cluster issue): 1 -> 2 -> 0 -> 1 while a writer loads documents. After each
change the health follows (yellow while new copies recover, then green),
_cat/shards lists exactly 1 + replicas copies per shard on distinct nodes,
and once writes stop every copy of a shard holds the same documents (read
per node with preference=_only_nodes), and the nodes hold no copy the
routing dropped. No acknowledged write is lost."""
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, cluster_file, eq, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-replicas-test-")
CFILE = os.path.join(TMP, "cluster.json")
NAMES = ["node-1", "node-2", "node-3"]
PORTS = cluster_file(CFILE, [(n, None) for n in NAMES])
NODES = {}
SHARDS = 4
INDEX = "rc"
ACKED = set()
FIG = []


def node(name="node-1"):
    return NODES[name]


def start_all():
    for n in NAMES:
        d = os.path.join(TMP, n)
        os.makedirs(d, exist_ok=True)
        NODES[n] = ClusterNode(CFILE, n, PORTS[n][0], data=d)


def wait_health(status, timeout=60):
    t0 = time.time()
    st, b = node().req("GET", "/_cluster/health?wait_for_status=%s&timeout=%ds" %
                       (status, timeout), timeout=timeout + 10)
    eq((st, b.get("status")), (200, status), "health %s: %s" % (status, b))
    return time.time() - t0


def shards_table():
    st, b = node().req("GET", "/_cat/shards/%s?format=json" % INDEX)
    eq(st, 200, "_cat/shards")
    return b


def check_layout(replicas):
    rows = shards_table()
    per = {}
    for r in rows:
        per.setdefault(int(r["shard"]), []).append(r)
    eq(sorted(per), list(range(SHARDS)), "every shard listed")
    for s, rs in per.items():
        eq(len(rs), 1 + replicas, "copies of shard %d: %s" % (s, rs))
        eq(sorted(r["state"] for r in rs), ["STARTED"] * (1 + replicas),
           "states of shard %d: %s" % (s, rs))
        eq(len({r["node"] for r in rs}), 1 + replicas, "distinct nodes of shard %d" % s)
        eq(sum(1 for r in rs if r["prirep"] == "p"), 1, "one primary of shard %d" % s)
    return per


class Writer(threading.Thread):
    def __init__(self):
        threading.Thread.__init__(self, daemon=True)
        self.stop = threading.Event()
        self.n = 0
        self.errors = 0

    def run(self):
        k = 0
        while not self.stop.is_set():
            lines = []
            ids = []
            for _ in range(50):
                ids.append("d%d" % k)
                lines.append({"index": {"_index": INDEX, "_id": "d%d" % k}})
                lines.append({"n": k, "body": "doc %d" % k})
                k += 1
            st, b = node("node-2").bulk(lines, params="?timeout=10s")
            if st != 200:
                self.errors += 1
                continue
            for i, it in zip(ids, b["items"]):
                if it["index"].get("status") in (200, 201):
                    ACKED.add(i)
            self.n += 1
            time.sleep(0.01)


def copies_identical():
    """Every acknowledged id is found (ids queries in batches through the
    in-sync copies), and per shard every copy counts the same documents
    (_cat/shards reads each copy on its own node)."""
    node().refresh(INDEX)
    acked = sorted(ACKED)
    found = 0
    for i in range(0, len(acked), 1000):
        batch = acked[i:i + 1000]
        st, b = node().req("POST", "/%s/_count" % INDEX, {"query": {"ids": {"values": batch}}})
        eq(st, 200, "count ids")
        found += b["count"]
    eq(found, len(acked), "acknowledged documents found")
    by_shard = {}
    for r in shards_table():
        by_shard.setdefault(r["shard"], set()).add(r["docs"])
    for s, docs in by_shard.items():
        eq(len(docs), 1, "shard %s copies hold different counts: %s" % (s, docs))
    return found


@test
def replicas_follow_a_live_index():
    start_all()
    wait_health("green")
    st, b = node().req("PUT", "/" + INDEX, {"settings": {"number_of_shards": SHARDS,
                                                          "number_of_replicas": 1}})
    eq(st, 200, "create: %s" % b)
    wait_health("green")
    check_layout(1)
    w = Writer()
    w.start()
    try:
        for replicas in (2, 0, 1):
            time.sleep(1.0)
            t0 = time.time()
            st, b = node("node-3").req("PUT", "/%s/_settings" % INDEX,
                                       {"index": {"number_of_replicas": replicas}})
            eq((st, b.get("acknowledged")), (200, True), "replicas -> %d: %s" % (replicas, b))
            st, s = node().req("GET", "/%s/_settings" % INDEX)
            eq(s[INDEX]["settings"]["index"]["number_of_replicas"], str(replicas),
               "settings show the new count")
            st, h = node().req("GET", "/_cluster/health")
            seen = h.get("status")
            green = wait_health("green", 90)
            check_layout(replicas)
            FIG.append("replicas->%d green after %.1fs (right after: %s)" %
                       (replicas, time.time() - t0, seen))
    finally:
        w.stop.set()
        w.join(30)
    eq(w.errors, 0, "bulk requests failed")
    wait_health("green")
    copies_identical()
    st, b = node().req("GET", "/%s/_count" % INDEX)
    eq(b["count"] >= len(ACKED), True, "count %s >= acked %d" % (b, len(ACKED)))
    # The copies the routing dropped (2 -> 0) left their nodes' disks: the
    # nodes hold two copies of every document, none more. A node removes
    # a dropped copy once it applies the state that has every placed copy
    # in sync, which may come just after green: waited for, capped.
    want, held = 2 * b["count"], None
    for _ in range(100):
        st, ns = node().req("GET", "/_nodes/stats")
        eq((st, len(ns["nodes"])), (200, 3), "node stats")
        held = sum(e["indices"]["docs"]["count"] for e in ns["nodes"].values())
        if held == want:
            break
        node().refresh(INDEX)
        time.sleep(0.3)
    eq(held, want, "documents held over the nodes (two copies of %d)" % b["count"])
    # a bad value is a clean 400, nothing changes
    st, b = node().req("PUT", "/%s/_settings" % INDEX, {"index": {"number_of_replicas": -1}})
    eq(st, 400, "negative replicas: %s" % b)
    check_layout(1)
    FIG.append("bulks %d acked docs %d" % (w.n, len(ACKED)))
    print("  figures: " + "; ".join(FIG))


def teardown():
    for n in NODES.values():
        n.stop()
    import shutil
    shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
