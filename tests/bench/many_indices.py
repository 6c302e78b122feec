#!/usr/bin/env python3
"""Many indices (issue #27): a live cluster on etcd (real etcd, real
`shoal --etcd` nodes on 127.0.0.1), N indices created one after another,
then the cluster-wide reads, one bulk touching every index, every node's
RSS, etcd's size, and deleting them all. Prints tables; times nothing in a
test. Measure alone on the machine (docs/benchmarks.md).

  python3 tests/bench/many_indices.py [--indices 1500] [--shards 1]
      [--replicas 1] [--nodes 3] [--reads 20] [--profile-at N]

Figures per create: latency (ms) and, from the master's _nodes/stats,
the keys it wrote to etcd and the state bytes each node read back, so a
create whose work grows with the indices that exist shows as a slope.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "api"))

from live import Live, one_req  # noqa: E402


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def state_figures(lv):
    """{node: (keys_written, state_bytes_read, full_reads, diffs)} from
    each node's _nodes/stats "discovery" section."""
    out = {}
    for name in lv.live():
        st, b = lv.req(name, "GET", "/_nodes/stats", timeout=30)
        if st != 200:
            continue
        for n in (b.get("nodes") or {}).values():
            if n.get("name") != name:
                continue
            d = n.get("discovery") or {}
            x = d.get("etcd") or {}
            out[name] = (x.get("keys_written", 0), x.get("state_bytes_read", 0),
                         x.get("full_reads", 0), x.get("changes_applied", 0))
    return out


def timed(lv, name, method, path, body=None, n=1):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        st, b = lv.req(name, method, path, body, timeout=120)
        ts.append((time.perf_counter() - t0) * 1000)
        if st >= 300:
            raise SystemExit("%s %s: %s %s" % (method, path, st, str(b)[:300]))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--indices", type=int, default=1500)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--reads", type=int, default=20, help="repetitions of each cluster-wide read")
    ap.add_argument("--step", type=int, default=100, help="a row every STEP creates")
    a = ap.parse_args()
    print("load average before: %s" % open("/proc/loadavg").read().strip())
    lv = Live(nodes=a.nodes)
    try:
        lv.wait_green(timeout=60)
        master = lv.master(lv.live()[0])
        per_node = (a.indices * a.shards * (1 + a.replicas) + a.nodes - 1) // a.nodes
        st, b = lv.req(master, "PUT", "/_cluster/settings",
                       {"persistent": {"cluster.max_shards_per_node": max(1000, 2 * per_node)}})
        if st != 200:
            raise SystemExit("cluster.max_shards_per_node: %s %s" % (st, b))
        rss0 = {n: rss_kb(lv.nodes[n].proc.pid) for n in lv.live()}
        cpu0 = {n: cpu_s(lv.nodes[n].proc.pid) for n in lv.live()}
        print("nodes %d, master %s; %d indices x %d shards x %d replicas" %
              (a.nodes, master, a.indices, a.shards, a.replicas))
        print("\n| creates | median ms | p90 ms | keys written per create (master) |"
              " state bytes read per create (per node) |")
        print("|---|---|---|---|---|")
        lat = []
        f0 = state_figures(lv)
        body = {"settings": {"number_of_shards": a.shards, "number_of_replicas": a.replicas}}
        for i in range(a.indices):
            t0 = time.perf_counter()
            st, b = one_req(lv.nodes[master].port, "PUT", "/mi-%05d" % i, body, timeout=120)
            lat.append((time.perf_counter() - t0) * 1000)
            if st != 200:
                raise SystemExit("create mi-%05d: %s %s" % (i, st, str(b)[:300]))
            if (i + 1) % a.step == 0:
                f1 = state_figures(lv)
                w = [(f1[n][0] - f0.get(n, (0,) * 4)[0]) for n in f1]
                r = [(f1[n][1] - f0.get(n, (0,) * 4)[1]) for n in f1]
                part = lat[-a.step:]
                print("| %d-%d | %.1f | %.1f | %.1f | %.0f |" % (
                    i + 2 - a.step, i + 1, statistics.median(part),
                    sorted(part)[int(len(part) * 0.9)], max(w) / a.step,
                    statistics.median(r) / a.step), flush=True)
                f0 = f1
        first, last = lat[:100], lat[-100:]
        print("\ncreate median: first 100 %.1f ms, last 100 %.1f ms (x%.2f)" % (
            statistics.median(first), statistics.median(last),
            statistics.median(last) / statistics.median(first)))
        t0 = time.time()
        lv.wait_green(timeout=600)
        print("green after the creates: %.1f s more" % (time.time() - t0))
        print("\n| read | median ms of %d |" % a.reads)
        print("|---|---|")
        for what, path in (("_cat/indices", "/_cat/indices"), ("_cat/shards", "/_cat/shards"),
                           ("_cluster/state", "/_cluster/state"), ("_stats", "/_stats"),
                           ("_cluster/health", "/_cluster/health"),
                           ("search * q=", "/*/_search?q=k:1&size=1")):
            print("| %s | %.1f |" % (what, timed(lv, master, "GET", path, n=a.reads)), flush=True)
        lines = []
        for i in range(a.indices):
            lines.append(json.dumps({"index": {"_index": "mi-%05d" % i, "_id": "1"}}))
            lines.append(json.dumps({"k": 1}))
        t0 = time.perf_counter()
        st, b = one_req(lv.nodes[master].port, "POST", "/_bulk?refresh=true",
                        "\n".join(lines) + "\n", timeout=600)
        print("\none bulk touching every index (%d items): %.0f ms, errors %s" % (
            a.indices, (time.perf_counter() - t0) * 1000, b.get("errors") if st == 200 else st))
        print("search * q= after the bulk: %.1f ms median" %
              timed(lv, master, "GET", "/*/_search?q=k:1&size=1", n=a.reads))
        copies = a.indices * a.shards * (1 + a.replicas)
        # RSS right after the work and at rest 35 s later (a node gives the
        # memory its threads freed back every 30 s)
        per = lv.per_node(master)
        r_now = {n: rss_kb(lv.nodes[n].proc.pid) for n in lv.live()}
        time.sleep(35)
        print("\n| node | RSS before MB | RSS after the bulk MB | at rest 35 s later MB "
              "| KB per copy held (after / at rest) | CPU s |")
        print("|---|---|---|---|---|---|")
        for n in lv.live():
            pid = lv.nodes[n].proc.pid
            r1, r2 = r_now[n], rss_kb(pid)
            held = per.get(n, 0)
            print("| %s%s | %.1f | %.1f | %.1f | %.1f / %.1f | %.1f |" % (
                n, " (master)" if n == master else "", rss0[n] / 1024, r1 / 1024, r2 / 1024,
                (r1 - rss0[n]) / held if held else 0, (r2 - rss0[n]) / held if held else 0,
                cpu_s(pid) - cpu0[n]))
        print("shard copies: %d" % copies)
        # one delete may change as many indices as one etcd transaction
        # holds (about 63 at etcd's default 128 operations): groups of 50
        t0 = time.perf_counter()
        bad = 0
        for g in range(0, a.indices, 50):
            names = ",".join("mi-%05d" % i for i in range(g, min(g + 50, a.indices)))
            st, b = one_req(lv.nodes[master].port, "DELETE", "/" + names, timeout=600)
            bad += st != 200
        print("DELETE of every index in groups of 50: %.0f ms, %d groups refused" % (
            (time.perf_counter() - t0) * 1000, bad))
        time.sleep(1)
        db = 0
        for root, _, files in os.walk(lv.etcd.dir):
            for f in files:
                if f == "db":
                    db += os.path.getsize(os.path.join(root, f))
        print("etcd db file(s): %.1f MB" % (db / 1048576))
    finally:
        lv.close()
        print("load average after: %s" % open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
