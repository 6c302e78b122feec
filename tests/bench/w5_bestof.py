#!/usr/bin/env python3
"""W5 per-class ratios against a peer's best trial (Lucene's JIT makes trials differ up to
12x within one run): usage w5_bestof.py RESULTS_DIR [PEER] (RESULTS_DIR printed by w5.py;
PEER: lucene (8.8, the default), lucene10, tantivy, xapian)."""
import json, glob, os, statistics, math, sys
R = sys.argv[1]
def load(e):
    d = {}
    for f in sorted(glob.glob(os.path.join(R, e + "_*.json"))):
        for l in open(f):
            j = json.loads(l); d.setdefault(j["class"], []).append(j["qps"])
    return d
s, l = load("shoal"), load(sys.argv[2] if len(sys.argv) > 2 else "lucene")
rows = []
for c in s:
    if c in l:
        rows.append((c, statistics.median(s[c]), min(s[c]), max(s[c]), statistics.median(l[c]), min(l[c]), max(l[c])))
def gm(xs): return math.exp(sum(math.log(x) for x in xs) / len(xs))
text = [r for r in rows if not r[0].startswith(("agg_", "sort_", "range_"))]
fac = [r for r in rows if r[0].startswith(("agg_", "sort_", "range_"))]
for name, rs in (("text", text), ("facet", fac)):
    if not rs: continue
    print("%s classes %d: Shoal median / Lucene median geo %.2f×, below %d; Shoal median / Lucene best trial geo %.2f×, below %d; Lucene trial spread max/min: median %.2f, worst %.2f; Shoal's: median %.2f" % (
        name, len(rs), gm([r[1] / r[4] for r in rs]), sum(r[1] < r[4] for r in rs),
        gm([r[1] / r[6] for r in rs]), sum(r[1] < r[6] for r in rs),
        statistics.median(r[6] / r[5] for r in rs), max(r[6] / r[5] for r in rs), statistics.median(r[3] / r[2] for r in rs)))
    print("  below Lucene's best:", ", ".join("%s %.2f×" % (r[0], r[1] / r[6]) for r in sorted(rs, key=lambda r: r[1] / r[6]) if r[1] < r[6])[:900])
