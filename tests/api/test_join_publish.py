"""Nodes join a live cluster on etcd while the master publishes one state
change after another. On etcd the master's count of node slots grows when
a node registers; a publish that had sized its per-node calls by the old
count wrote past them when a node registered mid-publish (heap corruption:
a release master aborted in the replication suite's setup about once in
40 cluster starts; under AddressSanitizer the overflow is reported at
once). Here a client keeps the master publishing (index creates and
deletes) while seven more nodes register one after another, each
registration racing the publishes; every node must be alive and answer
afterwards, and every one must stop with exit code 0."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live import Live, log  # noqa: E402
from shoal import run_tests, test  # noqa: E402

JOINERS = 7
L = None


class Churn(threading.Thread):
    """Creates and deletes indices on the master as fast as it answers:
    each is a committed change the master publishes to every node."""

    def __init__(self, live, via, tag):
        threading.Thread.__init__(self, daemon=True)
        self.live, self.via, self.tag = live, via, tag
        self.stop = threading.Event()
        self.ok = self.errors = 0
        self.last_error = None

    def run(self):
        k = 0
        while not self.stop.is_set():
            name = "churn-%s-%d" % (self.tag, k % 4)
            k += 1
            try:
                st, b = self.live.req(self.via, "PUT", "/" + name,
                                      {"settings": {"number_of_shards": 2,
                                                    "number_of_replicas": 0}}, timeout=10)
                if st == 200:
                    st, b = self.live.req(self.via, "DELETE", "/" + name, timeout=10)
            except OSError as e:
                st, b = None, e
            if st == 200:
                self.ok += 1
            else:
                self.errors += 1
                self.last_error = (st, b)


@test
def nodes_join_while_the_master_publishes():
    global L
    L = Live(nodes=1)
    master = "node-1"
    deadline = time.time() + 30
    while L.master(master) != master and time.time() < deadline:
        time.sleep(0.1)
    assert L.master(master) == master, "node-1 did not become the master"
    # three clients: publishes overlap, so one is nearly always in flight
    churns = [Churn(L, master, t) for t in "abc"]
    for c in churns:
        c.start()

    def acked():
        return sum(c.ok for c in churns)

    try:
        for _ in range(JOINERS):
            before = acked()
            name = L.add()
            # the next joiner only once the master has published again
            t0 = time.time()
            while acked() < before + 3 and time.time() - t0 < 20:
                time.sleep(0.02)
            for n, node in L.nodes.items():
                assert node.proc.poll() is None, "%s exited with %s after %s joined; log:\n%s" % (
                    n, node.proc.returncode, name, L.log_tail(n))
    finally:
        for c in churns:
            c.stop.set()
        for c in churns:
            c.join(30)
    errors = sum(c.errors for c in churns)
    log("changes published while %d nodes joined: %d acknowledged, %d not (last: %s)" % (
        JOINERS, acked(), errors, [c.last_error for c in churns if c.last_error][-1:]))
    assert acked() >= 3 * JOINERS, "the master acknowledged %d changes" % acked()
    # every node took the last state and answers for all 8
    want = 1 + JOINERS
    deadline = time.time() + 30
    while True:
        counts = {}
        for n in L.nodes:
            st, b = L.req(n, "GET", "/_cluster/health", timeout=10)
            counts[n] = b.get("number_of_nodes") if st == 200 else (st, b)
        if all(c == want for c in counts.values()) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert all(c == want for c in counts.values()), "number_of_nodes per node: %s" % counts


def teardown():
    if L is None:
        return 0
    rcs = L.close()
    bad = {n: rc for n, rc in rcs.items() if rc not in (0, None)}
    if bad:
        log("nodes that did not stop cleanly: %s" % bad)
        return 1
    return 0


if __name__ == "__main__":
    run_tests(budget_s=float(os.environ.get("SHOAL_TEST_BUDGET", "180")), teardown=teardown)
