"""Many indices on a live cluster (issue #27): a state change costs what
it changes. Three `shoal --etcd` nodes and a real etcd; indices created one
after another; the figures each node keeps in _nodes/stats ("discovery")
show how many etcd keys the master wrote and how many state bytes each node
read back per create. Counts, never times: the last creates must cost the
same keys and bytes as the first ones although many more indices exist,
and no node may fall back to reading the whole state for them."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from live import Live  # noqa: E402
from shoal import run_tests, test  # noqa: E402

BODY = {"settings": {"number_of_shards": 1, "number_of_replicas": 1}}


def figures(lv):
    out = {}
    for name in lv.live():
        st, b = lv.req(name, "GET", "/_nodes/stats", timeout=30)
        assert st == 200, (st, b)
        for n in b["nodes"].values():
            if n.get("name") == name:
                d = n["discovery"]
                p = d["published_cluster_states"]
                out[name] = (d["etcd"]["keys_written"], d["etcd"]["state_bytes_read"],
                             d["etcd"]["full_reads"], d["etcd"]["changes_applied"],
                             p["full_states"], p["compatible_diffs"])
    assert len(out) == len(lv.live()), out
    return out


def create_batch(lv, master, first, n):
    """Creates n indices; returns (keys written by the master, the most
    state bytes any node read from etcd, whole reads of etcd on any node,
    changes applied from the watch on the node that applied fewest, whole
    states published to any node, changes published to the node that took
    fewest) over the batch."""
    f0 = figures(lv)
    for i in range(first, first + n):
        st, b = lv.req(master, "PUT", "/many-%04d" % i, BODY, timeout=60)
        assert st == 200 and b.get("acknowledged"), (i, st, b)
    lv.wait_green(timeout=60)
    f1 = figures(lv)
    keys = f1[master][0] - f0[master][0]
    read = max(f1[x][1] - f0[x][1] for x in f1)
    full = max(f1[x][2] - f0[x][2] for x in f1)
    diffs = min(f1[x][3] - f0[x][3] for x in f1)
    others = [x for x in f1 if x != master]
    pub_full = max(f1[x][4] - f0[x][4] for x in others)
    pub_diffs = min(f1[x][5] - f0[x][5] for x in others)
    return keys, read, full, diffs, pub_full, pub_diffs


@test
def create_cost_does_not_grow_with_the_indices():
    lv = Live(nodes=3)
    try:
        lv.wait_green(timeout=60)
        master = lv.master(lv.live()[0])
        early = create_batch(lv, master, 0, 10)
        create_batch(lv, master, 10, 80)  # 90 indices exist now
        late = create_batch(lv, master, 90, 10)
        print("  per 10 creates: early keys=%d bytes=%d full=%d diffs=%d published whole=%d "
              "changes=%d; late keys=%d bytes=%d full=%d diffs=%d published whole=%d "
              "changes=%d" % (early + late), flush=True)
        assert early[0] > 0 and early[1] > 0 and early[3] > 0, early
        # the master publishes each change, not the whole state
        assert late[5] >= 10 and late[4] <= 1, (early, late)
        # the same work per create with 9x the indices: keys exactly as many
        # (one index key, its terms, the global key per change), bytes read
        # within a margin for longer names and shard events that split
        # differently between changes
        assert late[0] <= early[0] + 4, (early, late)
        assert late[1] <= early[1] * 1.5 + 2000, (early, late)
        # applied from the watch, not by reading everything (the 60-s safety
        # read may fall into a batch once)
        assert late[2] <= 1 and early[2] <= 1, (early, late)
        # every index is there, on every node
        for name in lv.live():
            st, b = lv.req(name, "GET", "/_cat/indices/many-*?h=index&format=json", timeout=30)
            assert st == 200 and len(b) == 100, (name, st, len(b) if isinstance(b, list) else b)
        # a delete is a change like another: the others stay
        st, b = lv.req(master, "DELETE", "/many-0042", timeout=60)
        assert st == 200, (st, b)
        for name in lv.live():
            for _ in range(100):
                st, b = lv.req(name, "GET", "/_cat/indices/many-*?h=index&format=json",
                               timeout=30)
                if st == 200 and len(b) == 99:
                    break
                time.sleep(0.1)
            assert st == 200 and len(b) == 99 and \
                "many-0042" not in [r["index"] for r in b], (name, st, b)
    finally:
        lv.close()


@test
def changes_larger_than_one_etcd_transaction():
    """cluster.etcd_max_txn_ops=16 (etcd's own limit is 128): a failover
    and a join that touch every index go in steps, each a whole state; a
    delete of many indices a user asks for is all or nothing: refused with
    a 400 that says why, nothing deleted."""
    lv = Live(nodes=3, args=["-E", "cluster.etcd_max_txn_ops=16"])
    try:
        lv.wait_green(timeout=60)
        master = lv.master(lv.live()[0])
        body = {"settings": {"number_of_shards": 1, "number_of_replicas": 1,
                             "index.unassigned.node_left.delayed_timeout": "0"}}
        for i in range(24):
            st, b = lv.req(master, "PUT", "/big-%02d" % i, body, timeout=60)
            assert st == 200, (i, st, b)
            st, b = lv.req(master, "PUT", "/big-%02d/_doc/1?refresh=true" % i, {"i": i},
                           timeout=60)
            assert st in (200, 201), (i, st, b)
        lv.wait_green(timeout=60)
        victim = [n for n in lv.live() if n != master][0]
        held = lv.per_node(master, "big-*").get(victim, 0)
        assert held >= 10, lv.per_node(master, "big-*")
        lv.nodes[victim].kill()
        lv.wait_green(timeout=90)
        log = lv.full_log(master)
        assert "made in steps" in log, "no change was made in steps"
        st, b = lv.req(master, "GET", "/big-*/_search?size=0", timeout=30)
        assert st == 200 and b["hits"]["total"]["value"] == 24 and \
            b["_shards"]["failed"] == 0, (st, b)
        lv.nodes[victim].start()
        lv.wait_green(timeout=90)
        # all or nothing for the user
        st, b = lv.req(master, "PUT", "/_cluster/settings",
                       {"transient": {"action.destructive_requires_name": False}})
        assert st == 200, (st, b)
        st, b = lv.req(master, "DELETE", "/big-*", timeout=60)
        assert st == 400 and b["error"]["type"] == "illegal_argument_exception" and \
            "etcd_max_txn_ops" in b["error"]["reason"], (st, b)
        st, b = lv.req(master, "GET", "/_cat/indices/big-*?h=index&format=json", timeout=30)
        assert st == 200 and len(b) == 24, (st, b)
        st, b = lv.req(master, "DELETE", "/big-00,big-01,big-02,big-03,big-04", timeout=60)
        assert st == 200, (st, b)
        st, b = lv.req(master, "GET", "/_cat/indices/big-*?h=index&format=json", timeout=30)
        assert st == 200 and len(b) == 19, (st, b)
        # one bulk that gives each of the 19 indices a new field, through a
        # node that is not the master: their mappings go to the master in one
        # change (in 2 steps of at most 15 indices here), not one per index
        def commits():
            st, b = lv.req(master, "GET", "/_nodes/_local/stats", timeout=30)
            return [n["discovery"]["etcd"]["commits"] for n in b["nodes"].values()][0]
        st, b = lv.req(master, "GET", "/_cluster/health?wait_for_status=green&wait_for_no_"
                       "relocating_shards=true&wait_for_no_initializing_shards=true&timeout=60s",
                       timeout=70)
        assert st == 200, (st, b)  # settled: no allocation change commits meanwhile
        c0 = commits()
        names = ["big-%02d" % i for i in range(5, 24)]
        lines = "".join('{"index":{"_index":"%s","_id":"2"}}\n{"fresh_%d":"x"}\n' % (x, k)
                        for k, x in enumerate(names))
        st, b = lv.req(victim, "POST", "/_bulk", lines, timeout=60)
        assert st == 200 and not b["errors"], (st, b)
        made = commits() - c0
        assert 1 <= made <= 2, "the bulk's mapping updates took %d commits" % made
        for node in lv.live():
            for k, x in enumerate(names):
                st, b = lv.req(node, "GET", "/%s/_mapping" % x, timeout=30)
                assert "fresh_%d" % k in b[x]["mappings"]["properties"], (node, x, b)
    finally:
        lv.close()


if __name__ == "__main__":
    run_tests()
