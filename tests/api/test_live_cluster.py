"""The live cluster on etcd, under faults (issue #16's M1-M7): real etcd
members and real `shoal --etcd` nodes, writers and searchers running
throughout. One cluster goes through the rows in turn:

  M3 add a fourth node under writes and searches: balanced, green, no
     failed search
  M4 drain a node (exclude._name), then stop it: green throughout (its
     primaries are handed over with their writes held, no resync)
  M5 kill -9 a data node past the delayed timeout: its copies rebuilt on
     the others, green with N-1
  M1 kill -9 the master: a new one within lease TTL + 5 s, writes resume
  M2 SIGSTOP the master past its lease, SIGCONT: it acknowledges nothing
     with its old term and comes back as a follower
  M6 three etcd members, kill -9 one: no write or search fails
  M7 compact etcd while a node is SIGSTOPped and the state changes; resume
     it: it converges to the current state; the master compacts etcd's
     history by itself

Each row prints its figures; after each, every acknowledged write is on
every copy of its shard and the copies are identical. The replica-count
row (M8) is test_replica_count.py. SHOAL_NETNS=1 runs every node and etcd
member in its own network namespace (shoal.py; tests/faults/run.sh --rows)."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live import Live, Searcher, Writer, check_copies, log  # noqa: E402
from shoal import run_tests, test  # noqa: E402

TTL = 5
INDEX = "live"
SHARDS = 6
DELAY = "3s"
FIGURES = []
L = None
W = []
S = None


def cluster():
    global L, S
    if L is None:
        L = Live(nodes=3, etcd_members=3, args=["-E", "cluster.lease_ttl=%ds" % TTL,
                                                "-E", "cluster.etcd_compaction_interval=1s",
                                                "-E", "cluster.etcd_compaction_retention=20"])
        m, _ = L.wait_master()
        st, b = L.req(m, "PUT", "/" + INDEX, {"settings": {
            "number_of_shards": SHARDS, "number_of_replicas": 1,
            "index.unassigned.node_left.delayed_timeout": DELAY},
            "mappings": {"properties": {"k": {"type": "keyword"}, "v": {"type": "long"}}}})
        assert st == 200, (st, b)
        L.wait_green()
        for wid in range(2):
            w = Writer(L, INDEX, wid)
            w.start()
            W.append(w)
        S = Searcher(L, INDEX)
        S.start()
    else:
        # every row starts from a settled cluster, so a row that failed
        # does not leave the next one a shard with a single copy
        L.wait_green()
    assert S.is_alive() and all(w.is_alive() for w in W), "a writer or the searcher died"
    return L


def acked():
    out = set()
    for w in W:
        out |= w.acked
    return out


def written():
    return sum(w.attempted for w in W), sum(len(w.acked) for w in W)


def wait_writes(n=200, timeout=30):
    """Until n more writes were acknowledged."""
    base = len(acked())
    t0 = time.time()
    while len(acked()) < base + n:
        if time.time() - t0 > timeout:
            raise AssertionError("writes did not resume within %ss (%d acked since)" %
                                 (timeout, len(acked()) - base))
        time.sleep(0.05)
    return time.time() - t0


def state_versions():
    """Each live node's cluster state version."""
    out = {}
    for n in L.live():
        st, b = L.req(n, "GET", "/_cluster/state", timeout=10)
        out[n] = b.get("version") if st == 200 else None
    return out


def finish(row, extra):
    # the writers pause (no batch in flight) while every copy is read
    for w in W:
        w.idle.clear()
        w.hold.set()
    for w in W:
        assert w.idle.wait(30), "a writer did not pause"
    try:
        # Copies are compared in one state that every node has applied
        # and that does not change while they are read: green and settled
        # can hold between two rebalancing rounds (a node back after its
        # copies were dropped gets them again, two recoveries at a time),
        # and a read by node name (_only_nodes) includes a recovering
        # relocation target, so a move that starts during the read shows
        # a shard on three nodes. Such a read is done again, in the next
        # quiet state.
        t0 = time.time()
        while True:
            L.wait_green()
            v0 = state_versions()
            docs, differ, lost = check_copies(L, INDEX, 2, acked())
            v1 = state_versions()
            quiet = v0 == v1 and len(set(v0.values())) == 1 and None not in v0.values()
            if quiet or time.time() - t0 > 90:
                break
            log("  %s: the state changed during the read (%s -> %s): read again" % (row, v0, v1))
    finally:
        for w in W:
            w.hold.clear()
    att, ack = written()
    line = "%s: writes attempted %d acknowledged %d lost %d; %d docs, %d differing copies; %s" % (
        row, att, ack, len(lost), docs, len(differ), extra)
    FIGURES.append(line)
    log(line)
    assert not lost, "%s: %d acknowledged writes lost, e.g. %s" % (row, len(lost), lost[:5])
    assert not differ, "%s: copies differ: %s" % (row, differ[:5])


def shard_lines(cl, shard, n=40):
    """The log lines of every node that name [INDEX][shard], the last n."""
    tag = "[%s][%d]" % (INDEX, shard)
    out = []
    for name in list(cl.nodes):
        try:
            text = cl.full_log(name)
        except OSError:
            continue
        out += ["%s %s" % (name, line) for line in text.splitlines() if tag in line]
    return "\n".join(sorted(out, key=lambda l: l.split(" ", 1)[1])[-n:])


def balance(counts):
    return max(counts.values()) - min(counts.values())


@test
def m3_add_a_node():
    cl = cluster()
    wait_writes(200)
    # a template made before the node joins: it lives in the cluster state
    st, b = cl.any_req("PUT", "/_index_template/late", {
        "index_patterns": ["late-*"], "priority": 5,
        "template": {"settings": {"number_of_shards": 2, "number_of_replicas": 1}}})
    assert st == 200 and b.get("acknowledged"), (st, b)
    S.reset()
    t0 = time.time()
    new = cl.add()
    # copies move to it: green, nothing moving, balanced (bounded)
    while True:
        cl.wait_green(timeout=90)
        counts = cl.per_node(new)
        per_index = cl.per_node(new, INDEX)
        if balance(counts) <= 1 and balance(per_index) <= 1:
            break
        assert time.time() - t0 < 90, "not balanced after 90 s: %s" % counts
        time.sleep(0.2)
    counts = cl.per_node(new)
    moved = counts.get(new, 0)
    assert balance(counts) <= 1, "not balanced: %s" % counts
    per_index = cl.per_node(new, INDEX)
    assert balance(per_index) <= 1, "index not balanced: %s" % per_index
    assert S.failed == 0, "%d of %d searches failed: %s" % (S.failed, S.done, S.failures)
    assert S.done > 0 and S.is_alive(), "no search ran while the node joined"
    # the new node has the template, and an index it auto-creates uses it
    st, b = cl.req(new, "GET", "/_index_template/late")
    assert st == 200 and b["index_templates"][0]["name"] == "late", (st, b)
    st, b = cl.req(new, "PUT", "/late-1/_doc/1?refresh=true", {"k": "x"})
    assert st in (200, 201), (st, b)
    st, b = cl.req(new, "GET", "/late-1/_settings")
    assert st == 200 and b["late-1"]["settings"]["index"]["number_of_shards"] == "2", (st, b)
    st, b = cl.any_req("DELETE", "/late-1")
    assert st == 200, (st, b)
    # the new node names the cluster's uuid (kept in etcd), as the others do
    uuids = {cl.req(n, "GET", "/")[1]["cluster_uuid"] for n in cl.live()}
    assert len(uuids) == 1, "nodes name different cluster_uuids: %s" % uuids
    finish("M3 add node", "green+settled %.1f s after the start, %d copies moved to %s, "
           "per-node %s, %d searches 0 failed" % (time.time() - t0, moved, new,
                                                   sorted(counts.values()), S.done))


@test
def reroute_and_explain():
    """POST _cluster/reroute moves a copy (and refuses bad commands whole);
    allocation/explain says why a copy is where it is."""
    cl = cluster()
    via = cl.live()[0]
    rows = [r for r in cl.shards(via, INDEX) if r["prirep"] == "r" and r["state"] == "STARTED"]
    r0 = rows[0]
    shard, src = int(r0["shard"]), r0["node"]
    holders = {r["node"] for r in cl.shards(via, INDEX) if int(r["shard"]) == shard}
    dst = [n for n in cl.live() if n not in holders][0]
    bad = {"commands": [{"move": {"index": INDEX, "shard": shard, "from_node": src,
                                  "to_node": dst}},
                        {"move": {"index": INDEX, "shard": shard, "from_node": dst,
                                  "to_node": src}}]}
    st, b = cl.req(via, "POST", "/_cluster/reroute", bad)
    assert st == 400 and "failed to find it on node" in b["error"]["reason"], (st, b)
    assert {r["node"] for r in cl.shards(via, INDEX) if int(r["shard"]) == shard} == holders, \
        "a refused reroute changed the routing"
    st, b = cl.req(via, "POST", "/_cluster/reroute", {"commands": [{"nope": {}}]})
    assert st == 400 and "unknown reroute command" in b["error"]["reason"], (st, b)
    # dry_run: the reply shows the move, the routing does not change
    st, b = cl.req(via, "POST", "/_cluster/reroute?dry_run=true&metric=routing_table",
                   {"commands": bad["commands"][:1]})
    assert st == 200 and b.get("acknowledged"), (st, b)
    assert set(b["state"]) == {"routing_table"}, b["state"].keys()
    would = {c["node"]: c["state"] for c in
             b["state"]["routing_table"]["indices"][INDEX]["shards"][str(shard)]}
    assert would.get(dst) == "INITIALIZING" and would.get(src) == "STARTED", would
    # explain: a command that cannot run is a NO, the others YES; still a dry run
    st, b = cl.req(via, "POST", "/_cluster/reroute?dry_run&explain=true&metric=none", bad)
    assert st == 200 and b["state"] == {}, (st, b)
    got = [(x["command"], x["decisions"][0]["decision"]) for x in b["explanations"]]
    assert got == [("move", "YES"), ("move", "NO")], b["explanations"]
    assert "failed to find it on node" in b["explanations"][1]["decisions"][0]["explanation"]
    time.sleep(1)  # a dry run committed nothing: no move starts
    assert {r["node"] for r in cl.shards(via, INDEX) if int(r["shard"]) == shard} == holders, \
        "a dry-run reroute changed the routing"
    for path, body, why in [
            ("/_cluster/reroute?dry_run=yes", {}, "only [true] or [false]"),
            ("/_cluster/reroute?metric=bogus", {}, "unrecognized metric"),
            ("/_cluster/reroute", {"commands": [], "bogus": 1}, "unknown field [bogus]")]:
        st, b = cl.req(via, "POST", path, body)
        assert st == 400 and why in b["error"]["reason"], (path, st, b)
    # retry_failed with no commands: accepted (allocation never gives up)
    st, b = cl.req(via, "POST", "/_cluster/reroute?retry_failed=true&metric=version")
    assert st == 200 and b.get("acknowledged") and set(b["state"]) == {"version"}, (st, b)
    # the move makes the nodes uneven: balancing would move a copy back at
    # once (as ES may); an operator stops it with rebalance.enable
    st, b = cl.req(via, "PUT", "/_cluster/settings",
                   {"transient": {"cluster.routing.rebalance.enable": "sometimes"}})
    assert st == 400 and "all, primaries, replicas or none" in b["error"]["reason"], (st, b)
    st, b = cl.req(via, "PUT", "/_cluster/settings",
                   {"transient": {"cluster.routing.rebalance.enable": "none"}})
    assert st == 200 and b.get("acknowledged"), (st, b)
    st, b = cl.req(via, "POST", "/_cluster/reroute", {"commands": bad["commands"][:1]})
    assert st == 200 and b.get("acknowledged"), (st, b)
    assert b["state"]["routing_table"]["indices"][INDEX], b
    t0 = time.time()
    while True:
        now = {r["node"]: r["state"] for r in cl.shards(via, INDEX)
               if int(r["shard"]) == shard and r["prirep"] == "r"}
        if dst in now and src not in now and now[dst] == "STARTED":
            break
        assert time.time() - t0 < 30, "move not done: %s; the nodes' lines on it:\n%s" % (
            now, shard_lines(cl, shard))
        time.sleep(0.1)
    st, e = cl.req(via, "POST", "/_cluster/allocation/explain",
                   {"index": INDEX, "shard": shard, "primary": False, "current_node": dst})
    assert st == 200 and e["current_state"] == "started" and \
        e["current_node"]["name"] == dst, (st, e)
    same = [d for d in e["node_allocation_decisions"] if d["node_name"] == dst][0]
    assert same["node_decision"] == "no" and \
        same["deciders"][0]["decider"] == "same_shard", same
    st, e = cl.req(via, "GET", "/_cluster/allocation/explain")
    assert st == 400 and "unable to find any unassigned shards" in e["error"]["reason"], (st, e)
    time.sleep(1)  # with rebalancing off the moved copy stays where it went
    now = {r["node"] for r in cl.shards(via, INDEX) if int(r["shard"]) == shard}
    assert dst in now and src not in now, "the moved copy did not stay: %s" % now
    st, b = cl.req(via, "PUT", "/_cluster/settings",
                   {"transient": {"cluster.routing.rebalance.enable": None}})
    assert st == 200, (st, b)
    cl.wait_green()
    FIGURES.append("reroute: [%s][%d] moved %s -> %s in %.1f s" %
                   (INDEX, shard, src, dst, time.time() - t0))


@test
def m4_drain_then_stop():
    cl = cluster()
    m = cl.wait_master()[0]
    rows = cl.shards(m, INDEX)
    lead = {n: sum(1 for r in rows if r["prirep"] == "p" and r["node"] == n)
            for n in cl.live() if n != m}
    victim = max(sorted(lead), key=lambda n: lead[n])  # the one leading most shards
    primaries = lead[victim]
    assert primaries, "no node but the master leads a shard: nothing is handed over"
    failed_before = sum(w.failed for w in W)
    S.reset()
    t0 = time.time()
    st, b = cl.any_req("PUT", "/_cluster/settings", {
        "persistent": {"cluster.routing.allocation.exclude._name": victim}})
    assert st == 200 and b.get("acknowledged"), (st, b)
    not_green = red = 0
    while True:
        h = cl.health(victim)
        not_green += h.get("status") != "green"
        red += h.get("status") == "red"
        # drained: the node holds nothing and what the drain started is
        # done, the resync after a primary's hand-over included (the
        # shard is yellow until the other copy is back in sync)
        if cl.per_node(victim).get(victim, 0) == 0 and h.get("status") == "green" and \
                not h.get("relocating_shards") and not h.get("initializing_shards"):
            break
        assert time.time() - t0 < 120, "drain of %s not done in 120 s: %s" % (
            victim, cl.per_node(victim))
        time.sleep(0.1)
    drained = time.time() - t0
    cl.nodes[victim].leaving = True  # no new request goes to it
    time.sleep(0.5)  # the ones under way finish
    rc = cl.nodes[victim].stop()
    assert rc == 0, "drained node exited %s" % rc
    h = cl.health(cl.live()[0])
    assert h.get("status") == "green", "not green right after the drained node stopped: %s" % h
    st, b = cl.any_req("PUT", "/_cluster/settings", {
        "persistent": {"cluster.routing.allocation.exclude._name": None}})
    assert st == 200, (st, b)
    # a primary moves off with its writes held for the hand-over, so its
    # other copies stay in sync: green throughout (docs/cluster.md)
    assert red == 0, "health red %d times during the drain" % red
    assert not_green == 0, "health not green %d times during the drain" % not_green
    assert S.failed == 0, "%d searches failed: %s" % (S.failed, S.failures)
    finish("M4 drain+stop", "drained %s in %.1f s (%d primaries handed over), green in every "
           "0.1-s health sample and at its stop, %d searches 0 failed, %d writes failed" %
           (victim, drained, primaries, S.done, sum(w.failed for w in W) - failed_before))


def revoked(name, t0):
    """A node saw that the process of name is gone (its port closed) and
    revoked its lease rather than wait it out: said in a node's log."""
    cl = cluster()
    while not any("node [%s] is gone (nothing listens" % name in cl.full_log(n)
                  for n in cl.live()):
        assert time.time() - t0 < TTL + 5, "no node revoked the lease of [%s]" % name
        time.sleep(0.1)


@test
def m5_data_node_gone_past_delay():
    cl = cluster()
    m, _ = cl.wait_master()
    victim = [n for n in cl.live() if n != m][0]
    t0 = time.time()
    cl.nodes[victim].kill()
    # within the delay: its replicas are unassigned, delayed, and explain says so
    while True:
        st, e = cl.req(m, "GET", "/_cluster/allocation/explain")
        if st == 200:
            break
        assert time.time() - t0 < TTL + 5, "no unassigned copy to explain: %s" % e
        time.sleep(0.1)
    assert e["unassigned_info"]["reason"] == "NODE_LEFT" and \
        e["unassigned_info"]["details"] == "node_left [%s]" % victim, e
    revoked(victim, t0)
    green = cl.wait_green(timeout=60)
    counts = cl.per_node(cl.live()[0])
    assert victim not in counts or counts[victim] == 0
    finish("M5 node left", "%s killed; replicas rebuilt, green with %d nodes %.1f s after "
           "the kill (lease %d s + delayed_timeout %s)" % (victim, len(cl.live()), green, TTL,
                                                           DELAY))
    # it comes back: copies move to it again
    cl.nodes[victim].start()
    cl.wait_green(timeout=90)


@test
def m1_kill_master():
    cl = cluster()
    m, _ = cl.wait_master()
    wait_writes(100)
    t0 = time.time()
    cl.nodes[m].kill()
    new, _ = cl.wait_master(not_name=m, timeout=TTL + 10)
    elected = time.time() - t0
    resumed = wait_writes(100, timeout=30)
    cl.wait_green(timeout=60)
    green = time.time() - t0
    assert elected <= TTL + 5, "new master after %.1f s (lease %d s)" % (elected, TTL)
    revoked(m, t0)
    cl.nodes[m].start()
    cl.wait_green(timeout=90)
    finish("M1 kill master", "new master %s after %.1f s (lease %d s), writes resumed %.1f s "
           "later, green with the others %.1f s after the kill" % (new, elected, TTL, resumed,
                                                                     green))


@test
def m2_sigstop_master():
    cl = cluster()
    m, _ = cl.wait_master()
    wait_writes(100)
    t0 = time.time()
    cl.nodes[m].sigstop()
    new, _ = cl.wait_master(not_name=m, timeout=TTL + 10)
    elected = time.time() - t0
    time.sleep(max(0, TTL + 2 - (time.time() - t0)))
    cl.nodes[m].sigcont()
    # it rejoins as a follower: it names the new master, and its lease went
    t1 = time.time()
    while cl.master(m) != new:
        assert time.time() - t1 < 20, "old master %s names %s, not %s" % (m, cl.master(m), new)
        time.sleep(0.1)
    while "stops acting as master" not in cl.full_log(m):
        assert time.time() - t1 < 10, "no step-down in the old master's log"
        time.sleep(0.1)
    cl.wait_green(timeout=90)
    finish("M2 sigstop master", "stopped %s for %.1f s; new master %s after %.1f s; it "
           "followed %.1f s after SIGCONT" % (m, t1 - t0, new, elected, time.time() - t1))


@test
def m6_etcd_member_dies():
    cl = cluster()
    wait_writes(100)
    S.reset()
    gaps = [w.max_gap for w in W]
    for w in W:
        w.max_gap = 0.0
    failed0 = sum(w.failed for w in W)
    cl.etcd.kill(0)
    time.sleep(TTL + 2)  # a lease renewal and more, with one member gone
    wait_writes(100)
    failed = sum(w.failed for w in W) - failed0
    gap = max(w.max_gap for w in W)
    assert failed == 0, "%d writes failed with one etcd member down: %s" % (
        failed, [w.why for w in W])
    assert S.failed == 0, "%d searches failed: %s" % (S.failed, S.failures)
    # a state change goes through the two members left
    st, b = cl.any_req("PUT", "/live-m6", {"settings": {"number_of_shards": 1}})
    assert st == 200, (st, b)
    cl.etcd.start(0)
    cl.etcd.wait(0)
    cl.wait_green()
    finish("M6 etcd member killed", "0 of %d searches and 0 writes failed, longest pause "
           "between acknowledged writes %.2f s (before: %.2f s)" % (S.done, gap, max(gaps)))


@test
def m7_compaction_while_stopped():
    cl = cluster()
    m, _ = cl.wait_master()
    victim = [n for n in cl.live() if n != m][0]
    cl.nodes[victim].sigstop()
    t0 = time.time()
    # Each change waits for every node to apply it (up to 10 s, then
    # acknowledged: false); the stopped node counts until the master has
    # held it unreachable for 5 s. A client that waited only as long as the
    # master timed out first under the sanitizers: it waits 30 s, as
    # Elasticsearch's own ack timeout.
    took = []
    for i in range(3):
        t = time.time()
        st, b = cl.req(m, "PUT", "/live-m7-%d" % i, {"settings": {"number_of_shards": 1,
                                                                "number_of_replicas": 0}},
                       timeout=30)
        took.append(time.time() - t)
        assert st == 200, (st, b)
    t = time.time()
    st, b = cl.req(m, "DELETE", "/live-m7-0", timeout=30)
    took.append(time.time() - t)
    assert st == 200, (st, b)
    rev = cl.etcd.compact()
    cl.nodes[victim].sigcont()
    want = cl.req(m, "GET", "/_cluster/state")[1]["version"]
    t1 = time.time()
    while True:
        st, got = cl.req(victim, "GET", "/_cluster/state", timeout=5)
        if st == 200 and got.get("version", 0) >= want:
            st, idx = cl.req(victim, "GET", "/_cat/indices/live-m7-*?format=json")
            names = sorted(r["index"] for r in idx) if st == 200 else None
            if names == ["live-m7-1", "live-m7-2"]:
                break
        assert time.time() - t1 < 20, "%s at state %s, master at %s" % (
            victim, got.get("version") if isinstance(got, dict) else got, want)
        time.sleep(0.1)
    converged = time.time() - t1
    saw = "compacted" in cl.full_log(victim)
    cl.wait_green(timeout=60)
    # the master compacts etcd's history by itself too (every 1 s here,
    # keeping 20 revisions behind the nodes)
    t2 = time.time()
    m, _ = cl.wait_master()
    while "etcd history compacted to revision" not in cl.full_log(m):
        assert time.time() - t2 < 15, "the master [%s] never compacted etcd" % m
        time.sleep(0.2)
    finish("M7 compaction", "%s stopped %.1f s while the state changed and etcd compacted to "
           "revision %d; it reached state %d %.2f s after SIGCONT (%s); the changes took %s s" % (
               victim, t1 - t0, rev, want, converged,
               "its watch was compacted and it read again" if saw else "its watch kept up",
               " / ".join("%.1f" % x for x in took)))


def teardown():
    rc = 0
    for w in W:
        w.stop.set()
    if S:
        S.stop.set()
    for w in W:
        w.join(20)
    if S:
        S.join(20)
    log("figures:")
    for f in FIGURES:
        log("  " + f)
    if L:
        rcs = L.close()
        bad = {k: v for k, v in rcs.items() if v not in (0, None)}
        if bad:
            log("nodes exited uncleanly: %s" % bad)
            rc = 1
    return rc


if __name__ == "__main__":
    run_tests(budget_s=float(os.environ.get("SHOAL_LIVE_BUDGET", "420")), teardown=teardown)
