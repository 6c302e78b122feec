#!/usr/bin/env python3
"""W5 before/after for the Shoal engine alone: BASE and NEW build dirs run
`shoal-engine query` on the same W3 index (made by w5.py N, in
/tmp/shoal-bench), trials alternating; prints the classes that moved more
than 15% and the geometric mean. Run alone on the machine. With
--base-index / --new-index each build reads its own index (a change of the
segment format: each on the index it writes, built from the same corpus).
Usage: tests/bench/ab_w5.py BASE_BUILD NEW_BUILD [--n 200000] [--base-index DIR] [--new-index DIR]"""
import json, subprocess, statistics, sys, math, os
import argparse
ap = argparse.ArgumentParser(description="W5 engine before/after: two shoal-engine builds on one index, alternating; run alone")
ap.add_argument("base"); ap.add_argument("new"); ap.add_argument("--n", type=int, default=200000)
ap.add_argument("--repeat", type=int, default=10); ap.add_argument("--trials", type=int, default=3)
ap.add_argument("--base-index"); ap.add_argument("--new-index")
a = ap.parse_args()
idx = "/tmp/shoal-bench/w5_w3_shoal_%d_s42" % a.n; q = "/tmp/shoal-bench/q_w3_%d_s42_q7.ndjson" % a.n
idxs = {"base": a.base_index or idx, "new": a.new_index or idx}
mp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "w3_mapping.json")
bins = {"base": os.path.join(a.base, "bin", "shoal-engine"), "new": os.path.join(a.new, "bin", "shoal-engine")}
res = {b: {} for b in bins}
for t in range(a.trials):
    for b in (["base", "new"] if t % 2 == 0 else ["new", "base"]):
        l0 = open("/proc/loadavg").read().split()[:3]
        p = subprocess.run([bins[b], "query", "--index", idxs[b], "--queries", q, "--repeat", str(a.repeat), "--mapping", mp],
                           capture_output=True, text=True)
        for line in p.stdout.splitlines() + p.stderr.splitlines():
            if line.startswith("{") and '"class"' in line:
                j = json.loads(line)
                res[b].setdefault(j["class"], []).append(j["qps"])
        print("trial %d %s load %s -> %s" % (t + 1, b, " ".join(l0), " ".join(open("/proc/loadavg").read().split()[:3])), flush=True)
rows = []
for c in res["new"]:
    a, n = statistics.median(res["base"][c]), statistics.median(res["new"][c])
    rows.append((c, a, n, n / a))
g = math.exp(sum(math.log(r[3]) for r in rows) / len(rows))
print("| class | before qps | after qps | after ÷ before |\n|---|---|---|---|")
for r in rows:
    if abs(r[3] - 1) > 0.15:
        print("| %s | %s | %s | %.2f× |" % (r[0], format(round(r[1]), ","), format(round(r[2]), ","), r[3]))
print("classes: %d, geometric mean after ÷ before %.2f×; shown: those that moved more than 15%%" % (len(rows), g))
