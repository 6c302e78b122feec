#!/usr/bin/env python3
"""Tables for docs/benchmarks.md from the JSON lines the bench scripts save.

  report.py machine                      one line: CPU, cores, RAM, kernel, commit, date
  report.py section NAME [DOC]           replace section NAME of DOC (default
                                         docs/benchmarks.md) with stdin
  report.py w1 DIR                       W1 table from DIR/*.json (w1.sh)
  report.py index DIR                    indexing table from DIR/*.json (index_bench.sh)
  report.py w5 DIR                       W5 table from DIR/*.json (w5.sh)

A section is the text between `<!-- NAME:BEGIN -->` and `<!-- NAME:END -->`;
it is appended when missing, so hand-written text around it survives reruns.
"""
import glob
import math
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""


def machine():
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    mem = sh("awk '/MemTotal/ {printf \"%.0f GB\", $2/1048576}' /proc/meminfo")
    commit = sh("git -C %s rev-parse --short HEAD" % ROOT)
    dirty = " (+uncommitted changes)" if sh("git -C %s status --porcelain -- . ':!docs/benchmarks.md'" % ROOT) else ""
    load = open("/proc/loadavg").read().split()[:3]
    return "%s, %s cores, %s RAM, Linux %s, commit %s%s, %s, load average at the end %s" % (
        cpu or platform.processor(), os.cpu_count(), mem, platform.release(), commit, dirty,
        sh("date -u '+%Y-%m-%d %H:%M UTC'"), " ".join(load))


def replace_section(name, text, doc=None):
    doc = doc or os.path.join(ROOT, "docs", "benchmarks.md")
    begin, end = "<!-- %s:BEGIN -->" % name, "<!-- %s:END -->" % name
    old = open(doc).read() if os.path.exists(doc) else "# Shoal benchmarks\n"
    block = "%s\n%s\n%s" % (begin, text.rstrip("\n"), end)
    if begin in old and end in old:
        new = old[:old.index(begin)] + block + old[old.index(end) + len(end):]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    with open(doc, "w") as f:
        f.write(new)


def load(path):
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=0):
    if x is None:
        return "n/a"
    if isinstance(x, float) and nd:
        return "%.*f" % (nd, x)
    return "{:,.0f}".format(x)


def rng(xs, nd=0):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    if len(xs) == 1:
        return fmt(xs[0], nd)
    return "%s (%s–%s)" % (fmt(med(xs), nd), fmt(min(xs), nd), fmt(max(xs), nd))


def ratio(a, b, nd=2):
    if a is None or b is None or b == 0:
        return "n/a"
    return "%.*f×" % (nd, a / b)


def verdict(ok):
    return "met" if ok else "**missed**"


# ------------------------------------------------------------------ W1
def w1(d):
    rows = []
    engines = []
    for meta in sorted(glob.glob(os.path.join(d, "*_meta.json"))):
        tag = os.path.basename(meta)[:-len("_meta.json")]
        m = load(meta)[0]
        warm = [x for f in sorted(glob.glob(os.path.join(d, tag + "_warm*.json"))) for x in load(f)]
        cold = [x for x in load(os.path.join(d, tag + "_cold.json"))]
        engines.append((tag, m, warm, cold))
    shoal_qps = {}
    sphinx_qps = None
    for tag, m, warm, cold in engines:
        q = med([w["qps"] for w in warm])
        if tag.startswith("sphinx"):
            sphinx_qps = q
        else:
            shoal_qps[tag] = q
    rows.append("| engine | protocol | warm qps (median, min–max) | p50 ms | p90 ms | p99 ms | p99.9 ms "
                "| cold pass p99 ms (÷ warm) | driver CPU-s per 1k q | indexing docs/s | private RSS MB (RSS) | on disk MB | vs Sphinx |")
    rows.append("|" + "---|" * 13)
    for tag, m, warm, cold in engines:
        qps = [w["qps"] for w in warm]
        p = lambda k: med([w[k] / 1000 for w in warm])
        cpu1k = med([w["driver_cpu_s"] / max(1, w["requests"]) * 1000 for w in warm])
        c99 = cold[0]["p99_us"] / 1000 if cold else None
        rel = ratio(c99, p("p99_us")) if c99 is not None else "n/a"
        rows.append("| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %s | %.3f | %s | %.1f (%.1f) | %.2f | %s |" % (
            m.get("label", tag), m.get("protocol", ""), rng(qps), p("p50_us") or 0, p("p90_us") or 0,
            p("p99_us") or 0, p("p999_us") or 0,
            ("%.2f (%s)" % (c99, rel)) if c99 is not None else "n/a", cpu1k or 0,
            fmt(m.get("index_docs_per_s")), m.get("private_kb", 0) / 1024, m.get("rss_kb", 0) / 1024,
            m.get("disk_bytes", 0) / 1e6,
            ratio(med(qps), sphinx_qps) if not tag.startswith("sphinx") else "1.00×"))
    # the targets (BENCHMARKS.md W1, issue #18), on the first Shoal row (1 shard)
    for tag, m, warm, cold in engines:
        if tag.startswith("sphinx") or tag.startswith("opensearch"):
            continue
        q, p99 = med([w["qps"] for w in warm]), med([w["p99_us"] / 1000 for w in warm])
        disk, priv = m.get("disk_bytes", 0) / 1e6, m.get("private_kb", 0) / 1024
        rows.append("")
        rows.append("Targets, %s: qps ≥ 3× Sphinx: %s %s; p99 ≤ 2 ms: %.2f ms %s; on disk ≤ 4.6 MB: "
                    "%.2f MB %s; private memory ≤ 64 MB: %.1f MB %s (server CPU per query ≤ 60 µs: "
                    "`tests/bench/ab_w1.sh`)." % (
                        m.get("label", tag), ratio(q, sphinx_qps),
                        verdict(q and sphinx_qps and q >= 3 * sphinx_qps) if sphinx_qps else "n/a",
                        p99 or 0, verdict(p99 is not None and p99 <= 2.0), disk, verdict(disk <= 4.6),
                        priv, verdict(priv <= 64)))
        break
    # the peers target (BENCHMARKS.md): W1 >= 3x OpenSearch 3, p99 lower,
    # each Shoal row against OpenSearch with the same shard count
    by_tag = {tag: (m, warm) for tag, m, warm, cold in engines}
    for tag, (m, warm) in sorted(by_tag.items()):
        if not tag.startswith("opensearch_"):
            continue
        peer = "shoal_" + tag[len("opensearch_"):]
        if peer not in by_tag:
            continue
        sm, sw = by_tag[peer]
        q, oq = med([w["qps"] for w in sw]), med([w["qps"] for w in warm])
        p99, op99 = med([w["p99_us"] / 1000 for w in sw]), med([w["p99_us"] / 1000 for w in warm])
        rows.append("")
        rows.append("Target, %s vs %s: qps ≥ 3× OpenSearch: %s %s; p99 lower: %.2f vs %.2f ms %s." % (
            sm.get("label", peer), m.get("label", tag), ratio(q, oq), verdict(q and oq and q >= 3 * oq),
            p99 or 0, op99 or 0, verdict(p99 is not None and op99 is not None and p99 < op99)))
    return "\n".join(rows)


# ------------------------------------------------------------------ indexing
def index(d):
    rows = ["| corpus | engine | docs | to searchable s | force merge s | total s | CPU-s | docs per CPU-s "
            "| index MB | busy threads in force merge | docs/CPU-s vs Lucene | vs Sphinx |",
            "|" + "---|" * 12]
    res = {}
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        for x in load(f):
            res.setdefault((x["corpus"], x["engine"]), []).append(x)
    corpora = sorted({c for c, _ in res})
    for c in corpora:
        def mm(engine, k):
            return med([x.get(k) for x in res.get((c, engine), [])])
        luc, sph = mm("lucene", "docs_per_cpu_s"), mm("sphinx", "docs_per_cpu_s")
        for e in ("shoal", "lucene", "sphinx"):
            xs = res.get((c, e))
            if not xs:
                continue
            g = lambda k: [x.get(k) for x in xs]
            rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %s | %s | %s |" % (
                c, e + (" (%d trials)" % len(xs) if len(xs) > 1 else ""), fmt(mm(e, "docs")),
                rng(g("searchable_s"), 2), rng(g("force_merge_s"), 2), rng(g("total_s"), 2),
                rng(g("cpu_s"), 2), rng(g("docs_per_cpu_s")), (mm(e, "index_bytes") or 0) / 1e6,
                fmt(mm(e, "merge_busy_threads"), 2) if mm(e, "merge_busy_threads") else "n/a",
                ratio(mm(e, "docs_per_cpu_s"), luc), ratio(mm(e, "docs_per_cpu_s"), sph)))
    # the targets (issue #18): docs per CPU-s >= 2x Lucene, index bytes <= 1.1x Lucene
    lines = []
    for c in corpora:
        sd, ld = med([x.get("docs_per_cpu_s") for x in res.get((c, "shoal"), [])]), \
            med([x.get("docs_per_cpu_s") for x in res.get((c, "lucene"), [])])
        sb, lb = med([x.get("index_bytes") for x in res.get((c, "shoal"), [])]), \
            med([x.get("index_bytes") for x in res.get((c, "lucene"), [])])
        if sd and ld and sb and lb:
            lines.append("Targets, %s: docs per CPU-s ≥ 2× Lucene: %s %s; index bytes ≤ 1.1× Lucene: "
                         "%s %s." % (c, ratio(sd, ld), verdict(sd >= 2 * ld), ratio(sb, lb),
                                     verdict(sb <= 1.1 * lb)))
    if lines:
        rows.append("")
        rows.extend(lines)
    return "\n".join(rows)


# ------------------------------------------------------------------ W5
W5_ORDER = ("shoal", "lucene10", "tantivy", "lucene", "xapian")
W5_LABEL = {"shoal": "Shoal", "lucene10": "Lucene 10", "tantivy": "tantivy", "lucene": "Lucene 8.8",
            "xapian": "Xapian"}


def gmean(rs):
    rs = [r for r in rs if r]
    return math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else None


def w5(d):
    """Per class.mode: each engine's median qps, Shoal ÷ each peer, and every
    count that differs from Shoal's (Xapian's sloppy phrase is OP_NEAR)."""
    res = {}
    counts = {}
    meta = {}
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        eng = os.path.basename(f).split("_")[0]
        for x in load(f):
            if x.get("meta"):
                meta = x
                continue
            if "class" not in x:
                continue
            res.setdefault((x["class"], eng), []).append(x.get("qps"))
            counts.setdefault(x["class"], {})[eng] = x.get("counts")
    classes = []
    for c, _ in res:
        if c not in classes:
            classes.append(c)
    present = {e for _, e in res}
    engines = [e for e in W5_ORDER if e in present] + sorted(present - set(W5_ORDER))
    peers = [e for e in engines if e != "shoal"]
    label = lambda e: W5_LABEL.get(e, e)
    q = {(c, e): med(res.get((c, e), [])) for c in classes for e in engines}
    rows = ["| class | " + " | ".join("%s qps" % label(e) for e in engines) + " | " +
            " | ".join("Shoal ÷ %s" % label(e) for e in peers if "shoal" in engines) + " | counts agree |",
            "|" + "---|" * (1 + len(engines) + (len(peers) if "shoal" in engines else 0) + 1)]
    below = {e: [] for e in peers}
    disagree = 0
    for c in classes:
        cc = counts.get(c, {})
        ref = "shoal" if cc.get("shoal") is not None else next((e for e in engines if cc.get(e) is not None), None)
        diffs = []
        for e in engines:
            if e == ref or cc.get(e) is None or ref is None or cc[e] == cc[ref]:
                continue
            if e == "xapian" and c.startswith("sloppy"):
                diffs.append("Xapian differs (OP_NEAR allows any order)")
                continue
            diffs.append("%s %s vs %s %s" % (label(e), cc[e], label(ref), cc[ref]))
        real = [x for x in diffs if "OP_NEAR" not in x]
        if real:
            disagree += 1
        agree = ("**NO**: " + "; ".join(diffs)) if real else ("yes" + ("; " + diffs[0] if diffs else ""))
        if "shoal" in engines:
            for e in peers:
                if q[(c, "shoal")] is not None and q[(c, e)] is not None and q[(c, "shoal")] < q[(c, e)]:
                    below[e].append(c)
        rows.append("| %s | %s | %s | %s |" % (
            c, " | ".join(fmt(q[(c, e)]) for e in engines),
            " | ".join(ratio(q[(c, "shoal")], q[(c, e)]) for e in peers) if "shoal" in engines else "",
            agree))
    rows.append("")
    rows.append("Classes whose counts disagree between engines (Xapian's OP_NEAR aside): %d of %d." % (
        disagree, len(classes)))
    if "shoal" not in engines:
        return "\n".join(rows)
    # geometric means of Shoal ÷ peer, over all classes, the text classes and the facet cells
    facet = lambda c: c.startswith(("agg_", "sort_", "range_"))
    groups = (("all", classes), ("text", [c for c in classes if not facet(c)]),
              ("facet", [c for c in classes if facet(c)]))
    rows.append("")
    rows.append("| Shoal ÷ peer, geometric mean | " + " | ".join(
        "%s (%d classes)" % (g, len(cs)) for g, cs in groups if cs) + " | classes below 1.0× |")
    rows.append("|" + "---|" * (2 + sum(1 for _, cs in groups if cs)))
    geo = {}
    for e in peers:
        cells = []
        for g, cs in groups:
            if not cs:
                continue
            gm = gmean([q[(c, "shoal")] / q[(c, e)] for c in cs if q[(c, "shoal")] and q[(c, e)]])
            geo[(e, g)] = gm
            cells.append("%.2f×" % gm if gm else "n/a")
        rows.append("| %s | %s | %d%s |" % (label(e), " | ".join(cells), len(below[e]),
                                            (": " + ", ".join(below[e][:12]) + (" …" if len(below[e]) > 12 else ""))
                                            if below[e] else ""))
    if meta.get("index_bytes"):
        ib = meta["index_bytes"]
        rows.append("")
        rows.append("Index bytes on disk: " + ", ".join(
            "%s %.1f MB" % (label(e), ib[e] / 1e6) for e in engines if ib.get(e)) + ".")
    # the targets (BENCHMARKS.md W5): at or above Lucene 10 and tantivy on every
    # class and mode, geometric mean >= 1.5x, >= 3x Xapian; index bytes <= 1.1x Lucene
    main_peers = [e for e in ("lucene10", "tantivy") if e in peers] or [e for e in ("lucene",) if e in peers]
    parts = []
    for e in main_peers:
        gm = geo.get((e, "all"))
        parts.append("every class ≥ 1.0× %s: %s (%d below); geometric mean ≥ 1.5× %s: %s %s" % (
            label(e), verdict(not below[e]), len(below[e]), label(e), "%.2f×" % gm if gm else "n/a",
            verdict(gm is not None and gm >= 1.5)))
    if "xapian" in peers and geo.get(("xapian", "all")):
        parts.append("≥ 3× Xapian (geometric mean): %.2f× %s" % (geo[("xapian", "all")],
                                                                 verdict(geo[("xapian", "all")] >= 3)))
    ib = meta.get("index_bytes") or {}
    for e in [x for x in ("lucene10", "lucene") if x in peers][:1]:
        if ib.get("shoal") and ib.get(e):
            parts.append("index bytes ≤ 1.1× %s: %.2f× %s" % (label(e), ib["shoal"] / ib[e],
                                                             verdict(ib["shoal"] <= 1.1 * ib[e])))
    if parts:
        rows.append("")
        rows.append("Targets: " + "; ".join(parts) + ".")
    return "\n".join(rows)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd = sys.argv[1]
    if cmd == "machine":
        print(machine())
    elif cmd == "section":
        replace_section(sys.argv[2], sys.stdin.read(), sys.argv[3] if len(sys.argv) > 3 else None)
    elif cmd in ("w1", "index", "w5"):
        print(globals()[cmd](sys.argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
